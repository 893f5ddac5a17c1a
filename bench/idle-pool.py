#!/usr/bin/env python3
"""An idle connection pool against a flood, at a low fd limit.

usage: idle-pool.py PORT echo|simple|kv|http SERVER_COMMAND...

Starts the server command under RLIMIT_NOFILE 64 (weft's servers then
serve 32 clients), opens a pool of 10 clients that each make one request,
waits 0.5 s, opens 118 more connections (the flood) without sending
anything, and has each of the 10 make one request again. Prints how many
of the pool were answered, and what the flood's connections got: the
server's refusal, a close (b''), or nothing within a second (admitted and
waiting for a request). E.g.

  bench/idle-pool.py 7901 kv dist-newstyle/bin/weft-kv 7901
  bench/idle-pool.py 7902 simple dist-newstyle/bin/weft-simple-server 7902 1 1
"""
import socket, subprocess, sys, time, os, resource
port = int(sys.argv[1]); kind = sys.argv[2]; cmd = sys.argv[3:]
def limit(): resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
p = subprocess.Popen(cmd, preexec_fn=limit, stderr=subprocess.PIPE)
time.sleep(1.0)
req = {"echo": b"x", "kv": b"*1\r\n$4\r\nPING\r\n", "http": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "simple": b"x"*int(os.environ.get("REQ","1"))}[kind]
def exchange(s):
    s.sendall(req); s.settimeout(2); return s.recv(4096)
pool = []
for i in range(10):
    s = socket.create_connection(("127.0.0.1", port)); pool.append(s); exchange(s)
time.sleep(0.5)
flood = []; refusals = {}
for i in range(118):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2); flood.append(s)
    except Exception as e:
        refusals[repr(e)] = refusals.get(repr(e), 0) + 1
time.sleep(0.3)
answered = 0
for s in pool:
    try:
        r = exchange(s); answered += bool(r)
    except Exception as e: print("pool error", e)
got = {}
for s in flood:
    s.settimeout(1)
    try:
        d = b""
        while True:
            c = s.recv(4096)
            if not c: break
            d += c
        got[d] = got.get(d, 0) + 1
    except Exception as e:
        got[repr(e)] = got.get(repr(e), 0) + 1
print("%s: pool answered %d of 10; the flood's 118 connections got: %s%s" % (
    " ".join(cmd), answered, ", ".join("%s x%d" % (k[:40], v) for k, v in got.items()),
    ("; connects failed: %s" % refusals) if refusals else ""))
for s in pool + flood: s.close()
p.terminate(); p.wait()
