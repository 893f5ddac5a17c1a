#!/usr/bin/env python3
"""Two builds of weft side by side: the same servers from each, the same load,
interleaved, to tell whether a change moved a benchmark.

usage: bench/ab.py BASE_BIN HEAD_BIN [--reps N] [--secs S] [--only CELL,...]
                   [--base-env K=V,...] [--head-env K=V,...]

The two builds may be one directory given twice, with the arms told apart
by their environments (--base-env, --head-env: added to each cell's own).

For each cell, the server of each build is started (pinned with taskset: -N1
on core 0, -N2 on cores 0,1), then REPS rounds run the load (on core 1)
against each, alternating which build goes first. Server CPU-us per request
comes from /proc/PID/stat, rescheduling IPIs per request from the RES line of
/proc/interrupts on the server's cores (anything else on them counts too). Prints every run, then per cell the medians of
req/s, CPU-us/req and p99, and HEAD/BASE ratios of the medians with the
min-max of the per-round ratios. Cells (default: all):

  simple-c16 simple-c400          weft-simple-server -N1, weft-loadgen
  simple-uring-c16 simple-uring-c400   the same on io_uring
  simple-n2-c1 simple-n2-c16 simple-n2-c400 simple-uring-n2-c16   -N2 (cores 0,1; load on core 1)
  pong-n2-c400                    weft-pong -N2, wrk
  echo echo-uring                 weft-echo -N1, one connection, 8-byte ping-pong (epoll, io_uring)
  pong-c16 pong-c400              weft-pong -N1, wrk
  pong-uring-c16 pong-uring-c400  the same on io_uring
  warp-c16 warp-c400              weft-warp-pong --server weft -N1, wrk
  sws-c64                         weft-sws (Mely) -N2, wrk, 1 KiB file
  kv-get kv-set                   weft-kv -N1, redis-benchmark -c 50 -P 1
Loopback only; every server is stopped at the end of its cell.
"""
import os, re, subprocess, sys, tempfile, time, statistics, signal

args = sys.argv[1:]
def opt(name, default):
    if name in args:
        i = args.index(name); v = args[i + 1]; del args[i:i + 2]; return v
    return default
def envs(v):
    return dict(kv.split("=", 1) for kv in v.split(",") if kv)
arm_env = {"base": envs(opt("--base-env", "")), "head": envs(opt("--head-env", ""))}
reps = int(opt("--reps", "5")); secs = int(opt("--secs", "3")); only = opt("--only", "")
if len(args) != 2:
    sys.exit(__doc__)
bins = {"base": args[0], "head": args[1]}
root = tempfile.mkdtemp()
with open(os.path.join(root, "f"), "wb") as f:
    f.write(b"x" * 1024)
loadgen = os.path.join(args[1], "weft-loadgen")

def cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])   # utime + stime, in ticks

def ipis(cores):
    with open("/proc/interrupts") as f:
        for line in f:
            if line.strip().startswith("RES:"):
                counts = line.split()[1:]
                return sum(int(counts[int(c)]) for c in cores.split(","))
    return 0

def run_loadgen(port, extra):
    out = subprocess.run(["taskset", "-c", "1", loadgen, "127.0.0.1", str(port), "--duration", str(secs),
                          "--warmup", "0.5"] + extra, capture_output=True, text=True).stdout
    kv = dict(re.findall(r"(\w+)=([0-9.]+)", out))
    return float(kv.get("rps", 0)), float(kv.get("requests", 0)), float(kv.get("p99_us", 0))

def wrk_units(v):
    m = re.match(r"([0-9.]+)(us|ms|s)", v)
    return float(m.group(1)) * {"us": 1, "ms": 1e3, "s": 1e6}[m.group(2)] if m else 0.0

def run_wrk(port, conns, path):
    out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c%d" % conns, "-d%ds" % secs, "--latency",
                          "http://127.0.0.1:%d%s" % (port, path)], capture_output=True, text=True).stdout
    reqs = re.search(r"(\d+) requests in", out); rps = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    p99 = re.search(r"99%\s+(\S+)", out)
    return (float(rps.group(1)) if rps else 0.0, float(reqs.group(1)) if reqs else 0.0,
            wrk_units(p99.group(1)) if p99 else 0.0)

def run_redis(port, test):
    n = 60000 * secs
    out = subprocess.run(["taskset", "-c", "1", "redis-benchmark", "-p", str(port), "-c", "50", "-n", str(n),
                          "-t", test, "-q"], capture_output=True, text=True).stdout
    m = re.findall(r"([0-9.]+) requests per second", out)
    return (float(m[-1]) if m else 0.0), float(n), 0.0

def simple(uring, c, n=1):
    env = {"WEFT_BACKEND": "uring"} if uring else {}
    return ("0" if n == 1 else "0,1", env,
            lambda b, p: [b + "/weft-simple-server", str(p), "90", "323", "--manager", "weft", "+RTS", "-N%d" % n, "-RTS"],
            lambda p: run_loadgen(p, ["--conns", str(c)]))

def pong(uring, c, n=1):
    env = {"WEFT_BACKEND": "uring"} if uring else {}
    return ("0" if n == 1 else "0,1", env, lambda b, p: [b + "/weft-pong", str(p), "+RTS", "-N%d" % n, "-RTS"],
            lambda p: run_wrk(p, c, "/"))

cells = {
    "simple-c16": simple(False, 16), "simple-c400": simple(False, 400),
    "simple-uring-c16": simple(True, 16), "simple-uring-c400": simple(True, 400),
    "simple-n2-c1": simple(False, 1, 2), "simple-n2-c16": simple(False, 16, 2), "simple-n2-c400": simple(False, 400, 2),
    "simple-uring-n2-c16": simple(True, 16, 2), "pong-n2-c400": pong(False, 400, 2),
    "echo": ("0", {}, lambda b, p: [b + "/weft-echo", str(p), "--manager", "weft", "+RTS", "-N1", "-RTS"],
             lambda p: run_loadgen(p, ["--conns", "1", "--req", "8", "--reply", "8"])),
    "echo-uring": ("0", {"WEFT_BACKEND": "uring"}, lambda b, p: [b + "/weft-echo", str(p), "--manager", "weft", "+RTS", "-N1", "-RTS"],
                   lambda p: run_loadgen(p, ["--conns", "1", "--req", "8", "--reply", "8"])),
    "pong-c16": pong(False, 16), "pong-c400": pong(False, 400),
    "pong-uring-c16": pong(True, 16), "pong-uring-c400": pong(True, 400),
    "warp-c16": ("0", {}, lambda b, p: [b + "/weft-warp-pong", str(p), "--server", "weft", "+RTS", "-N1", "-RTS"],
                 lambda p: run_wrk(p, 16, "/")),
    "warp-c400": ("0", {}, lambda b, p: [b + "/weft-warp-pong", str(p), "--server", "weft", "+RTS", "-N1", "-RTS"],
                  lambda p: run_wrk(p, 400, "/")),
    "sws-c64": ("0,1", {}, lambda b, p: [b + "/weft-sws", str(p), root, "--policy", "Mely", "+RTS", "-N2", "-RTS"],
                lambda p: run_wrk(p, 64, "/f")),
    "kv-get": ("0", {}, lambda b, p: [b + "/weft-kv", str(p), "+RTS", "-N1", "-RTS"], lambda p: run_redis(p, "get")),
    "kv-set": ("0", {}, lambda b, p: [b + "/weft-kv", str(p), "+RTS", "-N1", "-RTS"], lambda p: run_redis(p, "set")),
}
chosen = [c for c in cells if not only or c in only.split(",")]
port = 32100
summary = []
for name in chosen:
    cores, env, argv, load = cells[name]
    procs = {}
    for arm in ("base", "head"):
        port += 1
        procs[arm] = (subprocess.Popen(["taskset", "-c", cores] + argv(bins[arm], port), env=dict(os.environ, **{**env, **arm_env[arm]}),
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), port)
    time.sleep(1.0)
    res = {"base": [], "head": []}
    try:
        for r in range(reps):
            for arm in (("base", "head") if r % 2 == 0 else ("head", "base")):
                p, prt = procs[arm]
                c0 = cpu(p.pid); i0 = ipis(cores); rps, reqs, p99 = load(prt); i1 = ipis(cores); c1 = cpu(p.pid)
                us = (c1 - c0) * 1e6 / os.sysconf("SC_CLK_TCK") / max(reqs, 1)
                ipr = (i1 - i0) / max(reqs, 1)
                res[arm].append((rps, us, p99, ipr))
                print("  %-18s %d/%d %-4s %10.0f req/s %7.2f CPU-us/req p99 %8.0f us %6.3f IPI/req" % (
                    name, r + 1, reps, arm, rps, us, p99, ipr), flush=True)
    finally:
        for p, _ in procs.values():
            p.send_signal(signal.SIGINT)
        for p, _ in procs.values():
            try: p.wait(5)
            except subprocess.TimeoutExpired: p.kill(); p.wait()
    med = {a: [statistics.median(x[i] for x in res[a]) for i in range(4)] for a in res}
    ratio = lambda i: med["head"][i] / med["base"][i] if med["base"][i] else float("nan")
    rounds = lambda i: [h[i] / b[i] for h, b in zip(res["head"], res["base"]) if b[i]]
    span = lambda i: "%.2f-%.2f" % (min(rounds(i)), max(rounds(i))) if rounds(i) else "-"
    summary.append("| %s | %.0f | %.0f | %.2f (%s) | %.2f | %.2f | %.2f (%s) | %.0f | %.0f | %.3f | %.3f |" % (
        name, med["base"][0], med["head"][0], ratio(0), span(0), med["base"][1], med["head"][1], ratio(1), span(1),
        med["base"][2], med["head"][2], med["base"][3], med["head"][3]))
print("\n| cell | base req/s | head req/s | head/base (rounds) | base CPU-us/req | head CPU-us/req | head/base (rounds) | base p99 us | head p99 us | base IPI/req | head IPI/req |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
print("\n".join(summary))
