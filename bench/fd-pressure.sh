#!/bin/sh
# The fd-pressure tables of docs/benchmarks.md, for every server: an idle
# pool against a flood (bench/idle-pool.py, RLIMIT_NOFILE 64) and
# slowloris at full scale (bench/slowloris.py, RLIMIT_NOFILE 256, idle
# timeout 3 s, 400 attackers, fresh clients for 17 s). Loopback only;
# each server is stopped after its run. About 3 minutes.
#
# usage: bench/fd-pressure.sh [BIN_DIR]   (default dist-newstyle/bin)
set -eu
bin=${1:-dist-newstyle/bin}
here=$(dirname "$0")
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
printf 'hello\n' > "$root/hello.txt"
printf '<p>index</p>\n' > "$root/index.html"

echo "== idle pool against a flood"
"$here/idle-pool.py" 7901 echo "$bin/weft-echo" 7901
"$here/idle-pool.py" 7902 simple "$bin/weft-simple-server" 7902 1 1
"$here/idle-pool.py" 7903 kv "$bin/weft-kv" 7903
if command -v redis-server >/dev/null; then
  "$here/idle-pool.py" 7904 kv redis-server --port 7904 --save '' --appendonly no --logfile /dev/null
fi
"$here/idle-pool.py" 7905 http "$bin/weft-pong" 7905
"$here/idle-pool.py" 7906 http "$bin/weft-sws" 7906 "$root"

echo "== slowloris at the fd limit"
slowloris() {
  port=$1 kind=$2; shift 2
  prlimit --nofile=256:256 "$@" 2>/dev/null &
  pid=$!
  sleep 1
  "$here/slowloris.py" "$port" "$pid" "$kind" 17 400 || true
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
slowloris 7911 pong "$bin/weft-pong" 7911 --idle-timeout 3
slowloris 7912 sws "$bin/weft-sws" 7912 "$root" --idle-timeout 3
slowloris 7913 kv "$bin/weft-kv" 7913 --timeout 3
