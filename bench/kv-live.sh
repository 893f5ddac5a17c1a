#!/usr/bin/env bash
# What a Redis-protocol server holds per key: each weft-kv binary given is
# started on core 0 (+RTS -N1), filled by redis-benchmark on core 1 with
# SETs of 3-byte values over random keys, left idle until the runtime's
# idle collection has run, and stopped:
#
#   bench/kv-live.sh [-r KEYSPACE] [-n SETS] BIN...
#
# Prints per binary the keys stored, the live heap after the idle major
# collection (+RTS -S) in bytes and per key, the RSS, and the collector's
# and the mutator's CPU seconds over the fill. "redis" instead of a binary
# runs redis-server (no persistence) the same way, with its used_memory as
# the live bytes. Defaults: -r 1000000, -n 3000000 (about 95% of the
# keyspace then holds a key).
#
# Example: bench/kv-live.sh dist-newstyle/bin/weft-kv /tmp/other/weft-kv
set -euo pipefail

keyspace=1000000; sets=3000000
while [ $# -gt 0 ]; do
  case "$1" in
    -r) keyspace="$2"; shift 2 ;;
    -n) sets="$2"; shift 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
for tool in redis-benchmark redis-cli; do
  command -v "$tool" > /dev/null || { echo "kv-live: $tool not found" >&2; exit 2; }
done

stats="$(mktemp)"
pid=""
cleanup() { [ -z "$pid" ] || kill "$pid" 2> /dev/null || true; rm -f "$stats"; }
trap cleanup EXIT

printf '| binary | keys | live bytes | per key | RSS MiB | GC s | MUT s |\n|---|---|---|---|---|---|---|\n'
for bin in "$@"; do
  port=$((28000 + RANDOM % 1000))
  : > "$stats"
  if [ "$bin" = redis ]; then
    taskset -c 0 redis-server --port "$port" --save "" --appendonly no > /dev/null 2>&1 &
  else
    taskset -c 0 "$bin" "$port" +RTS -N1 -I0.3 -S"$stats" -RTS > /dev/null 2>&1 &
  fi
  pid=$!
  for _ in $(seq 50); do
    (exec 3<> "/dev/tcp/127.0.0.1/$port") 2> /dev/null && break
    sleep 0.1
  done
  taskset -c 1 redis-benchmark -p "$port" -t set -r "$keyspace" -P 64 -n "$sets" -c 50 -q > /dev/null 2>&1
  keys=$(redis-cli -p "$port" dbsize)
  used=$(redis-cli -p "$port" info memory | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }')
  # The idle collection (-I0.3) runs once the server has been idle 0.3 s.
  sleep 1.5
  rss=$(awk '/VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$pid/status")
  kill -INT "$pid"; wait "$pid" 2> /dev/null || true; pid=""
  # The last major collection with the store still live (the ones at exit
  # find it freed).
  if [ "$bin" = redis ]; then
    live=$used; gc=-; mut=-
  else
    live=$(awk '/Gen:  1/ && $3 > 1000000 { l = $3 } END { print l + 0 }' "$stats")
    gc=$(awk '/GC +time/ { print $3 }' "$stats"); mut=$(awk '/MUT +time/ { print $3 }' "$stats")
  fi
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$bin" "$keys" "$live" "$((live / (keys > 0 ? keys : 1)))" "$rss" "${gc%s}" "${mut%s}"
done
