#!/usr/bin/env bash
# What one request costs a Redis-protocol server, split into user and
# system CPU, and for weft-kv how it waited for its input:
#
#   bench/kv-per-request.sh [--reps N] ARM... -- TEST:DEPTH:REQUESTS...
#
# An arm is "redis" (redis-server, no persistence) or the path of a
# weft-kv binary, run with +RTS -N1. Each run starts a fresh server pinned
# to core 0, warms it up (20,000 requests of the test at -P 16), then runs
# `redis-benchmark -c 50 -P DEPTH -n REQUESTS -t TEST` on core 1. Arms are
# interleaved, taking turns to go first (against itself, a binary gained
# a median 4% on PING as the second arm of every repetition). Prints per
# run: ops/s, the server's user and system CPU per request in ns
# (/proc/PID/stat), the share of a core the server and the client
# (redis-benchmark, on core 1) each used: a client near 100% sets the
# pace, not the server; how often per 1,000 requests the client slept
# waiting for replies (its voluntary context switches, from GNU time:
# each sleep is a wake-up that one of the server's sends paid for); and for weft-kv, from INFO's runtime section before
# and after: its I/O managers' polls per request (blocking and not), the
# readiness events they brought per request, and the share of the run's
# wall time its dispatchers spent spinning.
#
# Example: bench/kv-per-request.sh --reps 4 redis dist-newstyle/bin/weft-kv -- ping_mbulk:1:300000 get:16:2000000
set -euo pipefail

reps=3
arms=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    --reps) reps=$2; shift 2 ;;
    *) arms+=("$1"); shift ;;
  esac
done
[ $# -ge 2 ] && [ ${#arms[@]} -ge 1 ] || { sed -n '2,21p' "$0" >&2; exit 2; }
shift
command -v redis-benchmark > /dev/null || { echo "kv-per-request: redis-benchmark not found" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "kv-per-request: /usr/bin/time not found (make deps installs Debian's time)" >&2; exit 2; }
port=6397
pid=""
client=$(mktemp)
trap '[ -z "$pid" ] || kill "$pid" 2> /dev/null || true; rm -f "$client"' EXIT

info() { # field: its value in weft-kv's INFO
  redis-cli -p $port INFO | tr -d '\r' | awk -F: -v k="$1" '$1 == k { print $2 }'
}
ticks() { awk '{ print $14, $15 }' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)

for rep in $(seq "$reps"); do
  for t in "$@"; do
    IFS=: read -r test depth n <<< "$t"
    # Arms alternate which goes first: the later runs of a repetition
    # can find the machine warmer or cooler.
    order=("${arms[@]}")
    if [ $((rep % 2)) = 0 ]; then order=(); for ((i = ${#arms[@]} - 1; i >= 0; i--)); do order+=("${arms[$i]}"); done; fi
    for arm in "${order[@]}"; do
      if [ "$arm" = redis ]; then
        taskset -c 0 redis-server --port $port --save "" --appendonly no > /dev/null 2>&1 &
      else
        taskset -c 0 "$arm" $port +RTS -N1 -RTS > /dev/null 2>&1 &
      fi
      pid=$!
      for _ in $(seq 50); do redis-cli -p $port PING > /dev/null 2>&1 && break; sleep 0.1; done
      timeout 60 taskset -c 1 redis-benchmark -p $port -c 50 -n 20000 -P 16 -t "$test" -q > /dev/null 2>&1
      weft=""
      if [ "$arm" != redis ]; then
        weft=1
        b0=$(info weft_polls_blocking); p0=$(info weft_polls_nonblocking); e0=$(info weft_poll_events); s0=$(info weft_spin_us)
      fi
      read -r u0 k0 < <(ticks)
      w0=$(date +%s%N)
      # The client's CPU time and how often it slept (its voluntary
      # context switches: each is a wake-up the server's send paid for).
      rps=$(timeout 120 /usr/bin/time -o "$client" -f "%U %S %w" taskset -c 1 \
              redis-benchmark -p $port -c 50 -n "$n" -P "$depth" -t "$test" -q 2>&1 \
              | tr '\r' '\n' | grep -a "requests per second" | tail -1 | awk '{ print $2 }')
      w1=$(date +%s%N)
      read -r u1 k1 < <(ticks)
      read -r cu cs sleeps < <(tail -1 "$client")
      client_ms=$(awk -v u="$cu" -v s="$cs" 'BEGIN { print int((u + s) * 1000) }')
      line=$(printf '%s\t%s\t-P %s\t%s\tops/s %s\tuser %d\tsys %d ns/req\tserver core %d%%\tclient core %d%%\tclient sleeps/1000 req %.1f' \
               "$rep" "$test" "$depth" "$arm" "$rps" \
               $(( (u1 - u0) * 1000000000 / hz / n )) $(( (k1 - k0) * 1000000000 / hz / n )) \
               $(( (u1 - u0 + k1 - k0) * 100000000000 / hz / (w1 - w0) )) $(( client_ms * 100000000 / (w1 - w0) )) \
               "$(bc -l <<< "1000 * $sleeps / $n")")
      if [ -n "$weft" ]; then
        b1=$(info weft_polls_blocking); p1=$(info weft_polls_nonblocking); e1=$(info weft_poll_events); s1=$(info weft_spin_us)
        line+=$(printf '\tpolls/req %.2f blocking + %.2f not\tevents/req %.2f\tspinning %.0f%%' \
                  "$(bc -l <<< "($b1 - $b0) / $n")" "$(bc -l <<< "($p1 - $p0) / $n")" "$(bc -l <<< "($e1 - $e0) / $n")" \
                  "$(bc -l <<< "100 * ($s1 - $s0) * 1000 / ($w1 - $w0)")")
      fi
      echo "$line"
      kill "$pid"; wait "$pid" 2> /dev/null || true; pid=""
    done
  done
done
