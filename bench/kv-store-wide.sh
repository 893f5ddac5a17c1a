#!/usr/bin/env bash
# How long store-wide commands take in weft-kv with many key colors (a
# transaction holding one, and RANDOMKEY), for weft-kv binaries side by
# side:
#
#   bench/kv-store-wide.sh [--reps N] [--colors N] BIN...
#
# Each run starts a fresh server (--key-colors N, default 65536) on cores
# 0 and 1 at +RTS -N1 and at -N2, fills it with one key, or with SET over
# 10,000 random keys (redis-benchmark -r 10000, 30,000 requests: some
# 9,500 keys, most on a color of their own), and times redis-cli sending
# MULTI, KEYS * (or DBSIZE), EXEC, and then RANDOMKEY alone: the round
# trip, redis-cli's start included (about 10 ms). Arms are interleaved. Prints one line per run
# (rep, binary, -N, keys, command, microseconds), then the medians with
# their min-max in milliseconds.
#
# Example: bench/kv-store-wide.sh --reps 5 /tmp/weft-kv-before dist-newstyle/bin/weft-kv
set -euo pipefail

reps=5; colors=65536
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps="$2"; shift 2 ;;
    --colors) colors="$2"; shift 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { sed -n '2,16p' "$0" >&2; exit 2; }
port=6394
out=$(mktemp /tmp/kv-store-wide.XXXXXX)
trap 'rm -f "$out"' EXIT

for rep in $(seq "$reps"); do
  for n in 1 2; do
    for fill in 1 10000; do
      for bin in "$@"; do
        taskset -c 0,1 "$bin" $port --key-colors "$colors" +RTS -N$n -RTS >/dev/null 2>&1 &
        pid=$!
        for _ in $(seq 50); do redis-cli -p $port PING >/dev/null 2>&1 && break; sleep 0.1; done
        if [ "$fill" = 1 ]; then
          redis-cli -p $port SET a 1 >/dev/null
        else
          timeout 60 redis-benchmark -p $port -c 10 -P 16 -n 30000 -r "$fill" -t set -q >/dev/null 2>&1
        fi
        keys=$(redis-cli -p $port DBSIZE)
        for cmd in "KEYS *" "DBSIZE" "RANDOMKEY"; do
          if [ "$cmd" = RANDOMKEY ]; then input=$'RANDOMKEY\r\n'; else input=$(printf 'MULTI\r\n%s\r\nEXEC\r\n' "$cmd"); fi
          t0=$(date +%s%N)
          printf '%s' "$input" | timeout 60 redis-cli -p $port >/dev/null
          t1=$(date +%s%N)
          printf '%s\t%s\t-N%s\t%s\t%s\t%s\n' "$rep" "$bin" "$n" "$keys" "${cmd%% *}" $(( (t1 - t0) / 1000 )) | tee -a "$out"
        done
        kill $pid; wait $pid 2>/dev/null || true
      done
    done
  done
done

echo
echo "medians of $reps, ms (min-max); keys: 1, or about 9,500"
awk -F'\t' '{ k = $2 "\t" $3 "\t" ($4 > 1 ? "~9.5k" : "1") "\t" $5; v[k] = v[k] " " $6 }
  END { for (k in v) print k "\t" v[k] }' "$out" | sort | while IFS=$'\t' read -r bin n keys cmd times; do
  sorted=$(tr ' ' '\n' <<<"$times" | grep . | sort -n)
  count=$(wc -l <<<"$sorted")
  med=$(sed -n "$(( (count + 1) / 2 ))p" <<<"$sorted")
  printf '%s\t%s\tkeys %s\t%s\t%.0f (%.0f-%.0f)\n' "$bin" "$n" "$keys" "$cmd" \
    "$(bc -l <<<"$med/1000")" "$(bc -l <<<"$(head -1 <<<"$sorted")/1000")" "$(bc -l <<<"$(tail -1 <<<"$sorted")/1000")"
done
