#!/usr/bin/python3
"""perf/l2_latency.py: what the second-level cache (Redis) costs and saves.

A benchmark, never a test: it asserts nothing and prints figures.

    perf/l2_latency.py [--dnslb build/dnslb] [--names 300] [--rounds 3] [--no-cpu]

1. Latency, end to end from a Python UDP client on 127.0.0.1 (the client's
   own overhead is in every figure alike; compare the differences):
   a real redis-server, the e2e responder as the backend, and three dnslb
   nodes (one worker each): A and B with newPacketCache(..., {l2 = true})
   in one namespace, C with the same cache and no L2. For each of --names
   new names:
     backend, no L2     C: local miss, forwarded
     backend + L2 miss  A: local miss, Redis GET (nil), forwarded, SET
     L2 hit             B: local miss, Redis GET (A's answer), served
     local hit          B again
   Medians and 90th percentiles in microseconds.

2. Local cache-hit CPU with and without the L2 (--no-cpu skips it): dnslb
   with l2 = true and Redis up, and dnslb with no setRedis, alternating
   (A B A B ...), each warmed on 100 hot names then loaded with
   dnsperf -Q 20000 -l 5; server CPU from /proc/PID/stat (utime + stime).
   The hit path never reaches the L2 code, so the ratio is expected at 1.00
   within the machine's noise.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))

import dns.message  # noqa: E402

import dnslbtest  # noqa: E402
from redisfix import Redis  # noqa: E402
from responder import Responder  # noqa: E402


def conf(redis, responder, l2, node):
    head = ""
    if redis is not None:
        head = 'setRedis({address="%s", namespace="bench", node="%s"})\n' % (redis.address, node)
    return (head + dnslbtest.lua_server(responder)
            + "pc = newPacketCache(100000, {l2 = %s})\n" % ("true" if l2 else "false")
            + 'getPool(""):setCache(pc)\n')


def ask_us(sock, port, name, qid):
    q = dns.message.make_query(name, "A")
    q.id = qid
    wire = q.to_wire()
    t0 = time.perf_counter_ns()
    sock.sendto(wire, ("127.0.0.1", port))
    data = sock.recv(4096)
    dt = (time.perf_counter_ns() - t0) / 1000.0
    if dns.message.from_wire(data).id != qid:
        raise RuntimeError("wrong answer")
    return dt


def summary(label, xs):
    xs = sorted(xs)
    p90 = xs[int(len(xs) * 0.9) - 1]
    print("  %-22s median %7.1f us   p90 %7.1f us   (n=%d)" % (label, statistics.median(xs),
                                                             p90, len(xs)))
    return statistics.median(xs)


def latency(work, responder, redis, n):
    a = dnslbtest.Daemon(work, conf(redis, responder, True, "a"), name="a").start()
    b = dnslbtest.Daemon(work, conf(redis, responder, True, "b"), name="b").start()
    c = dnslbtest.Daemon(work, conf(None, responder, False, "c"), name="c").start()
    try:
        time.sleep(1.0)         # Redis connections up
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(2.0)
        res = {"backend, no L2": [], "backend + L2 miss": [], "L2 hit": [], "local hit": []}
        for i in range(n):
            name = "n%d.l2bench.example." % i
            res["backend, no L2"].append(ask_us(s, c.port, name, i & 0xffff))
            res["backend + L2 miss"].append(ask_us(s, a.port, name, i & 0xffff))
            time.sleep(0.002)   # A's SET is on its way to Redis
            res["L2 hit"].append(ask_us(s, b.port, name, i & 0xffff))
            res["local hit"].append(ask_us(s, b.port, name, i & 0xffff))
        print("latency, one query at a time, %d names:" % n)
        med = {k: summary(k, v) for k, v in res.items()}
        print("  L2 hit - local hit:         %+7.1f us" % (med["L2 hit"] - med["local hit"]))
        print("  L2 hit - backend (no L2):   %+7.1f us" % (med["L2 hit"] - med["backend, no L2"]))
        print("  L2 miss cost (A - C):       %+7.1f us" % (med["backend + L2 miss"]
                                                         - med["backend, no L2"]))
    finally:
        for d in (a, b, c):
            d.stop()


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return int(parts[11]) + int(parts[12])


def hit_cpu(work, responder, redis, rounds):
    qfile = os.path.join(work, "hot.txt")
    with open(qfile, "w") as f:
        for i in range(100):
            f.write("h%d.l2bench.example A\n" % i)
    hz = os.sysconf("SC_CLK_TCK")
    out = {True: [], False: []}
    for r in range(rounds):
        for l2 in (True, False):
            d = dnslbtest.Daemon(work, conf(redis if l2 else None, responder, l2, "cpu"),
                                 name="cpu").start()
            try:
                time.sleep(1.0)
                for _ in range(2):
                    subprocess.run(["dnsperf", "-s", "127.0.0.1", "-p", str(d.port), "-d", qfile,
                                    "-n", "1"], capture_output=True, timeout=30)
                t0 = cpu_ticks(d.proc.pid)
                p = subprocess.run(["dnsperf", "-s", "127.0.0.1", "-p", str(d.port), "-d", qfile,
                                    "-Q", "20000", "-l", "5"], capture_output=True, text=True,
                                   timeout=60)
                t1 = cpu_ticks(d.proc.pid)
                done = 0
                for line in p.stdout.splitlines():
                    if "Queries completed:" in line:
                        done = int(line.split()[2])
                us = (t1 - t0) / hz * 1e6 / max(done, 1)
                out[l2].append(us)
                print("  round %d  %-12s %6.2f us CPU/query  (%d queries)"
                      % (r + 1, "L2 on" if l2 else "no L2", us, done))
            finally:
                d.stop()
    ratios = [a / b for a, b in zip(out[True], out[False])]
    print("local cache hit, CPU per query: L2 on %.2f us, no L2 %.2f us; paired ratio "
          "median %.3f (rounds: %s)" % (statistics.median(out[True]), statistics.median(out[False]),
                                        statistics.median(ratios),
                                        ", ".join("%.3f" % x for x in ratios)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dnslb", default=os.environ.get("DNSLB_BIN", "build/dnslb"))
    ap.add_argument("--names", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-cpu", action="store_true")
    args = ap.parse_args()
    os.environ["DNSLB_BIN"] = os.path.abspath(args.dnslb)
    with tempfile.TemporaryDirectory() as work:
        redis = Redis(work).start()
        responder = Responder().start()
        try:
            latency(work, responder, redis, args.names)
            if not args.no_cpu:
                hit_cpu(work, responder, redis, args.rounds)
        finally:
            responder.stop()
            redis.stop()


if __name__ == "__main__":
    main()
