#!/bin/bash
# sws-pairs.sh BIN REPS SECS [reconnect]: weft-sws (from BIN) under NoStealing, Mely and
# TimeLeft at -N2 on cores 0,1, wrk (1 thread, 64 connections, 1 KiB file) on core 1,
# the three alternated REPS times; prints "round policy req/s server-CPU-us/req" per run.
# SWS_ARGS adds options to every weft-sws. Run it for two builds, alternating, to compare them side by side.
BIN=$1; REPS=$2; SECS=$3; MODE=${4:-keepalive}
tmp=$(mktemp -d)
root=$(mktemp -d); head -c 1024 /dev/zero | tr '\0' 'x' > $root/f
declare -A port pid
p=31000
for pol in NoStealing Mely TimeLeft; do
  port[$pol]=$p; taskset -c 0,1 $BIN/weft-sws $p $root --policy $pol $SWS_ARGS +RTS -N2 -RTS > $tmp/$pol.log 2>&1 & pid[$pol]=$!; p=$((p+1))
done
sleep 1
lua=""
if [ "$MODE" = reconnect ]; then
cat > $tmp/rc.lua <<'L'
local n = 0
request = function()
  n = n + 1
  if n % 150 == 0 then return wrk.format("GET", "/f", {["Connection"]="close"}) end
  return wrk.format("GET", "/f")
end
L
lua="-s $tmp/rc.lua"
fi
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
for r in $(seq $REPS); do
  for pol in NoStealing Mely TimeLeft; do
    c0=$(cpu ${pid[$pol]})
    out=$(taskset -c 1 wrk -t1 -c64 -d${SECS}s $lua http://127.0.0.1:${port[$pol]}/f 2>&1)
    c1=$(cpu ${pid[$pol]})
    reqs=$(echo "$out" | awk '/requests in/ {print $1}')
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    echo "$r $pol $rps $(echo "($c1-$c0)*10000/$reqs" | bc -l | cut -c1-5)"
  done
done
kill -INT ${pid[@]}; sleep 1; rm -rf $root $tmp
