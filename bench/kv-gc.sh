#!/usr/bin/env bash
# A store or one of its collections growing, or written over once grown,
# against Redis-protocol servers:
#
#   bench/kv-gc.sh [--reps N] [-n REQUESTS] [--fill REQUESTS] ARM... -- TEST...
#
# TEST is a redis-benchmark test: one that adds to one key (hset, sadd,
# zadd), whose hash, set or sorted set then grows, or set, whose keys
# then spread over the store; or hset-keys, sadd-keys, lpush-keys or
# zadd-keys, a hash, set, list or sorted set under each of many keys
# (`HSET h:__rand_int__ f v`, `SADD s:__rand_int__ m`, `LPUSH
# l:__rand_int__ x`, `ZADD z:__rand_int__ 1 m`); or zrank or
# zrangebyscore, reads of the sorted set zadd grows (`ZRANK myzset
# element:__rand_int__`, `ZRANGEBYSCORE myzset __rand_int__ +inf LIMIT 0
# 10`), whose --fill requests are zadd's. Each run starts a fresh server pinned to
# core 0 and runs `redis-benchmark -c 50 -P 16 -r 1000000 -n REQUESTS -t
# TEST` (default 1,000,000 requests) on core 1, so that the collection
# grows to some 632,000 members, or the store to as many keys (the
# distinct random numbers drawn). With --fill, as many requests of the
# test run first, unmeasured: with --fill 10000000 the measured requests
# write over a store (or collection) that holds nearly all million keys
# (members) already. An arm is "redis" (redis-server, no persistence) or
# the path of a weft-kv binary, run with +RTS -N1. Arms are interleaved,
# and so are tests. Prints per run: ops/s, server CPU us per request
# (/proc/PID/stat), the collection's (store's) size at the end, and for
# weft-kv the collector's share of its CPU during the measured requests
# and the largest live heap so far (its INFO runtime section before and
# after); then the medians per test and arm.
#
# Example: bench/kv-gc.sh --reps 3 redis dist-newstyle/bin/weft-kv -- hset sadd zadd
#          bench/kv-gc.sh --reps 3 -n 2000000 --fill 10000000 redis dist-newstyle/bin/weft-kv -- set
set -euo pipefail

reps=3
requests=1000000
fill=0
arms=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    --reps) reps=$2; shift 2 ;;
    -n) requests=$2; shift 2 ;;
    --fill) fill=$2; shift 2 ;;
    *) arms+=("$1"); shift ;;
  esac
done
[ "${1:-}" = "--" ] || { echo "usage: $0 [--reps N] [-n REQUESTS] [--fill REQUESTS] ARM... -- TEST..." >&2; exit 2; }
shift
tests=("$@")
[ ${#arms[@]} -gt 0 ] && [ ${#tests[@]} -gt 0 ] || { echo "$0: no arms or no tests" >&2; exit 2; }

port=6393
tick=$(getconf CLK_TCK)
out=$(mktemp -d /tmp/kv-gc.XXXXXX)
trap 'rm -rf "$out"' EXIT

size_of() {
  case "$1" in
    hset) redis-cli -p $port hlen myhash ;;
    sadd) redis-cli -p $port scard myset ;;
    zadd|zrank|zrangebyscore) redis-cli -p $port zcard myzset ;;
    set|hset-keys|sadd-keys|lpush-keys|zadd-keys) redis-cli -p $port dbsize ;;
    *) echo "-" ;;
  esac
}

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# weft-kv's collector and mutator CPU in us and largest live heap in
# bytes so far, from its INFO runtime section.
gc_stats() {
  redis-cli -p $port INFO | tr -d '\r' \
    | awk -F: '$1 == "gc_cpu_us" { g = $2 } $1 == "mutator_cpu_us" { m = $2 } $1 == "gc_max_live_bytes" { l = $2 }
               END { print g + 0, m + 0, l + 0 }'
}

bench() { # requests [test]
  local t="${2:-$t}"
  local what=(-t "$t")
  case "$t" in
    hset-keys) what=(hset 'h:__rand_int__' f v) ;;
    sadd-keys) what=(sadd 's:__rand_int__' m) ;;
    lpush-keys) what=(lpush 'l:__rand_int__' x) ;;
    zadd-keys) what=(zadd 'z:__rand_int__' 1 m) ;;
    zrank) what=(zrank myzset 'element:__rand_int__') ;;
    zrangebyscore) what=(zrangebyscore myzset __rand_int__ +inf LIMIT 0 10) ;;
  esac
  taskset -c 1 redis-benchmark -p $port -c 50 -P 16 -r 1000000 -n "$1" -q "${what[@]}" 2>/dev/null \
    | tr '\r' '\n' | grep -o "[0-9.]* requests per second" | tail -1 | cut -d' ' -f1
}

wait_port() {
  for _ in $(seq 100); do
    redis-cli -p $port ping > /dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "$0: server on port $port did not answer" >&2
  return 1
}

printf "rep\ttest\tarm\tops/s\tcpu_us/op\tsize\tgc_share_%%\tmax_residency_MB\n" | tee "$out/runs"
for rep in $(seq "$reps"); do
  for t in "${tests[@]}"; do
    for arm in "${arms[@]}"; do
      if [ "$arm" = redis ]; then
        taskset -c 0 redis-server --port $port --save '' --appendonly no > /dev/null 2>&1 &
      else
        taskset -c 0 "$arm" $port +RTS -N1 -RTS > /dev/null 2>&1 &
      fi
      pid=$!
      wait_port
      filler=$t
      case "$t" in zrank|zrangebyscore) filler=zadd ;; esac
      [ "$fill" = 0 ] || bench "$fill" "$filler" > /dev/null
      [ "$arm" = redis ] || read -r g0 m0 _ < <(gc_stats)
      c0=$(cpu_ticks $pid)
      rps=$(bench "$requests")
      c1=$(cpu_ticks $pid)
      [ "$arm" = redis ] || read -r g1 m1 live < <(gc_stats)
      size=$(size_of "$t")
      kill -INT $pid; wait $pid 2> /dev/null || true
      cpu=$(awk -v d=$((c1 - c0)) -v t="$tick" -v n="$requests" 'BEGIN { printf "%.2f", d / t * 1e6 / n }')
      if [ "$arm" = redis ]; then
        gc=-; res=-
      else
        gc=$(awk -v g=$((g1 - g0)) -v m=$((m1 - m0)) 'BEGIN { printf "%.1f", 100 * g / (g + m) }')
        res=$(awk -v l="$live" 'BEGIN { printf "%.1f", l / 1e6 }')
      fi
      printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$rep" "$t" "$arm" "$rps" "$cpu" "$size" "$gc" "$res" | tee -a "$out/runs"
    done
  done
done

echo
echo "medians of $reps"
python3 - "$out/runs" <<'PY'
import sys, statistics
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
seen = []
for r in rows:
    if (r[1], r[2]) not in seen:
        seen.append((r[1], r[2]))
def med(xs):
    xs = [float(x) for x in xs if x not in ("-", "")]
    return statistics.median(xs) if xs else None
print("| test | arm | ops/s | CPU us/op | GC share % | max residency MB |")
print("|---|---|---|---|---|---|")
for t, a in seen:
    sel = [r for r in rows if r[1] == t and r[2] == a]
    ops, cpu, gc, res = (med([r[i] for r in sel]) for i in (3, 4, 6, 7))
    fmt = lambda x, f: "-" if x is None else f % x
    print(f"| {t} | {a} | {fmt(ops, '%.0f')} | {fmt(cpu, '%.2f')} | {fmt(gc, '%.1f')} | {fmt(res, '%.0f')} |")
PY
