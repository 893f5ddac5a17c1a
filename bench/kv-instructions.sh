#!/usr/bin/env bash
# Instructions per request of a Redis-protocol server under redis-benchmark,
# counted by callgrind: a measure that the machine's other tenants do not
# move, unlike time (which this does not measure: cache misses and the
# collector's copying cost time, not instructions).
#
#   bench/kv-instructions.sh ARM TEST:DEPTH:REQUESTS...
#
# ARM is "redis" (redis-server, no persistence) or the path of a weft-kv
# binary (run with +RTS -N1). Per test: a fresh server under valgrind
# --tool=callgrind pinned to core 0, redis-benchmark -c 50 on core 1, a
# quarter of the requests as warm-up, the counters zeroed, the requests,
# a dump; prints the instructions per request of the dumped interval.
#
# Example: bench/kv-instructions.sh dist-newstyle/bin/weft-kv get:64:40000 mset:64:20000
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,14p' "$0" >&2; exit 2; }
arm="$1"; shift
for tool in valgrind callgrind_control redis-benchmark; do
  command -v "$tool" > /dev/null || { echo "kv-instructions: $tool not found" >&2; exit 2; }
done
dir="$(mktemp -d)"
pid=""
cleanup() { [ -z "$pid" ] || kill "$pid" 2> /dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

for spec in "$@"; do
  [[ "$spec" =~ ^[a-z_0-9]+:[0-9]+:[0-9]+$ ]] || { echo "kv-instructions: not TEST:DEPTH:REQUESTS: $spec" >&2; exit 2; }
  IFS=: read -r t depth n <<< "$spec"
  port=$((28000 + RANDOM % 1000))
  rm -f "$dir"/cg.out*
  if [ "$arm" = redis ]; then
    taskset -c 0 valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" \
      redis-server --port "$port" --save "" --appendonly no > /dev/null 2>&1 &
  else
    taskset -c 0 valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" \
      "$arm" "$port" +RTS -N1 -RTS > /dev/null 2>&1 &
  fi
  pid=$!
  for _ in $(seq 150); do
    (exec 3<> "/dev/tcp/127.0.0.1/$port") 2> /dev/null && break
    sleep 0.2
  done
  taskset -c 1 redis-benchmark -p "$port" -t "$t" -P "$depth" -n $((n / 4)) -c 50 -q > /dev/null 2>&1
  callgrind_control -z "$pid" > /dev/null 2>&1
  taskset -c 1 redis-benchmark -p "$port" -t "$t" -P "$depth" -n "$n" -c 50 -q > /dev/null 2>&1
  callgrind_control -d "$pid" > /dev/null 2>&1
  sleep 1
  kill "$pid"; wait "$pid" 2> /dev/null || true; pid=""
  ir=$(cat "$dir"/cg.out.[0-9]* | awk '/^totals:/ { s += $2 } END { print s + 0 }')
  awk -v a="$(basename "${arm%% *}")" -v t="$t" -v d="$depth" -v ir="$ir" -v n="$n" \
    'BEGIN { printf "%-10s %-8s -P %-3s %8.0f instructions per request\n", a, t, d, ir / n }'
done
