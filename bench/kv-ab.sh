#!/usr/bin/env bash
# Two Redis-protocol servers side by side under redis-benchmark, arms
# interleaved, a fresh server per run:
#
#   bench/kv-ab.sh [-r KEYSPACE] [--reps N] [--n2] ARM_A ARM_B TEST:DEPTH:REQUESTS...
#
# An arm is "redis" (redis-server, no persistence), "redis-io2" (the same
# with --io-threads 2 --io-threads-do-reads yes), or the path of a weft-kv
# binary, optionally followed by its options ("BIN --key-colors 8"), run
# with +RTS -N1. Each server is pinned to core 0 and redis-benchmark
# (-c 50) to core 1; with --n2, weft-kv runs with +RTS -N2 and the servers
# are pinned to cores 0 and 1 (sharing the client's core). With -r, every run first fills the
# store with SET over the keyspace (-P 64, 1M requests) and the test then
# draws its keys from it. Prints one line per run (rep, test, depth, arm,
# ops/s, server CPU us per request from /proc/PID/stat), then per test the
# medians, B / A with its per-repetition min-max, and the CPU per request.
#
# Example: bench/kv-ab.sh --reps 5 redis dist-newstyle/bin/weft-kv get:16:2000000 set:16:2000000
set -euo pipefail

keyspace=""; reps=5; n2=""
while [ $# -gt 0 ]; do
  case "$1" in
    -r) keyspace="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --n2) n2=1; shift ;;
    *) break ;;
  esac
done
[ $# -ge 3 ] || { sed -n '2,18p' "$0" >&2; exit 2; }
arm_a="$1"; arm_b="$2"; shift 2
tests=("$@")
for t in "${tests[@]}"; do
  [[ "$t" =~ ^[a-z_0-9]+:[0-9]+:[0-9]+$ ]] || { echo "kv-ab: not TEST:DEPTH:REQUESTS: $t" >&2; exit 2; }
done
command -v redis-benchmark > /dev/null || { echo "kv-ab: redis-benchmark not found" >&2; exit 2; }

out="$(mktemp)"
pid=""
cleanup() { [ -z "$pid" ] || kill "$pid" 2> /dev/null || true; rm -f "$out"; }
trap cleanup EXIT

cores=0; caps=-N1
[ -z "$n2" ] || { cores=0,1; caps=-N2; }
start() { # start ARM PORT: sets pid
  if [ "$1" = redis ]; then
    taskset -c "$cores" redis-server --port "$2" --save "" --appendonly no > /dev/null 2>&1 &
  elif [ "$1" = redis-io2 ]; then
    taskset -c "$cores" redis-server --port "$2" --save "" --appendonly no \
      --io-threads 2 --io-threads-do-reads yes > /dev/null 2>&1 &
  else
    read -r -a cmd <<< "$1"
    taskset -c "$cores" "${cmd[0]}" "$2" "${cmd[@]:1}" +RTS "$caps" -RTS > /dev/null 2>&1 &
  fi
  pid=$!
  for _ in $(seq 50); do
    (exec 3<> "/dev/tcp/127.0.0.1/$2") 2> /dev/null && return 0
    sleep 0.1
  done
  echo "kv-ab: $1 did not start" >&2; exit 1
}

ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

random=()
[ -z "$keyspace" ] || random=(-r "$keyspace")
for rep in $(seq "$reps"); do
  for spec in "${tests[@]}"; do
    IFS=: read -r t depth n <<< "$spec"
    for arm in A B; do
      bin="$arm_a"; [ "$arm" = B ] && bin="$arm_b"
      port=$((27000 + RANDOM % 2000))
      start "$bin" "$port"
      [ -z "$keyspace" ] || taskset -c 1 redis-benchmark -p "$port" -t set "${random[@]}" -P 64 -n 1000000 -c 50 -q > /dev/null 2>&1
      c0=$(ticks "$pid")
      rps=$(taskset -c 1 redis-benchmark -p "$port" -t "$t" "${random[@]}" -P "$depth" -n "$n" -c 50 -q 2>&1 |
            tr '\r' '\n' | grep "requests per second" | tail -1 | awk '{ print $(NF-5) }')
      c1=$(ticks "$pid")
      kill "$pid"; wait "$pid" 2> /dev/null || true; pid=""
      line="$rep $t $depth $arm $rps $(awk -v a="$c0" -v b="$c1" -v n="$n" 'BEGIN { printf "%.3f", (b - a) * 10000 / n }')"
      echo "$line"; echo "$line" >> "$out"
    done
  done
done

python3 - "$out" "$arm_a" "$arm_b" <<'EOF'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    rep, t, depth, arm, rps, cpu = line.split()
    runs[(t, int(depth), arm)].append((float(rps), float(cpu)))
print(f"\nA = {sys.argv[2]}, B = {sys.argv[3]}; medians")
print("| test | depth | A ops/s | B ops/s | B / A (min-max) | A CPU us/op | B CPU us/op | B / A |")
print("|---|---|---|---|---|---|---|---|")
for (t, depth) in sorted({(t, d) for t, d, _ in runs}, key=lambda k: (k[1], k[0])):
    a, b = runs[(t, depth, "A")], runs[(t, depth, "B")]
    ra, rb = statistics.median(x for x, _ in a), statistics.median(x for x, _ in b)
    ca, cb = statistics.median(y for _, y in a), statistics.median(y for _, y in b)
    per = [y[0] / x[0] for x, y in zip(a, b)]
    print(f"| {t.upper()} | {depth} | {ra:.0f} | {rb:.0f} | {rb / ra:.2f} ({min(per):.2f}-{max(per):.2f}) "
          f"| {ca:.3f} | {cb:.3f} | {cb / ca:.2f} |")
EOF
