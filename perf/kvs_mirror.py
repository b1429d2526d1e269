#!/usr/bin/python3
"""Mirror time of a Redis-backed lookup store (docs/fleet.md): a real
redis-server on 127.0.0.1 holds a set of N members "domain<i>.com."; one
dnslb mirrors it (newRedisKVStore) and the script reports, from
kvs:getStats(), the time of the first mirror and of a re-mirror after one
SADD, the memory of the mirror, and how long the main loop took to answer
console commands and how long DNS queries took while it mirrored.

  DNSLB_BIN=build/dnslb perf/kvs_mirror.py [members (1000000)] [scanCount (10000)]

A benchmark, not a test (it asserts nothing). Traffic stays on 127.0.0.1.
"""

import os
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "e2e"))

from dnslbtest import Daemon, console, console_head, udp_query  # noqa: E402
from redisfix import Redis  # noqa: E402
from responder import Responder  # noqa: E402


def stats(d):
    out = console(d, "local s = big:getStats() print(s.entries, s.memory, s.refreshes, "
                     "s.lastRefreshDuration, s.mirroring)").split()
    return int(out[0]), int(out[1]), int(out[2]), float(out[3]), out[4] == "true"


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000000
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
    work = tempfile.mkdtemp(prefix="kvs-mirror-")
    r = Redis(work).start()
    resp = Responder().start()
    d = None
    try:
        t0 = time.monotonic()
        # filled inside Redis (a Lua script): much faster than sending the members
        for i in range(0, n, 100000):
            r.command("EVAL", "for i = ARGV[1], ARGV[2] - 1 do redis.call('SADD', KEYS[1], "
                      "string.format('domain%07d.com.', i)) end", 1, "big", i, min(n, i + 100000),
                      timeout=60)
        print("loaded %d members into Redis in %.1f s" % (n, time.monotonic() - t0))
        conf = (console_head() +
                'setRedis({address="%s"})\n' % r.address +
                'big = newRedisKVStore({key="big", refresh=3600, scanCount=%d})\n' % count +
                'addAction(KeyValueStoreLookupRule(big, KeyValueLookupKeySuffix()), '
                'RCodeAction(DNSRCode.REFUSED))\n' +
                'newServer({address="127.0.0.1:%d"})\n' % resp.port)
        d = Daemon(work, conf, ("--workers", "2"), name="mirror")
        t0 = time.monotonic()
        d.start()
        while True:
            e, mem, refreshes, dur, _ = stats(d)
            if refreshes >= 1 and e == n:
                break
            time.sleep(0.05)
        print("first mirror: %d entries in %.2f s (mirror duration %.2f s; %.1f MB, "
              "%.1f bytes a name)" % (e, time.monotonic() - t0, dur, mem / 1e6, mem / e))

        # a re-mirror alone (kvs:reload()), polled slowly
        console(d, "big:reload()")
        t0 = time.monotonic()
        while True:
            time.sleep(0.2)
            e, mem, refreshes, dur, mirroring = stats(d)
            if refreshes >= 2 and not mirroring:
                break
        print("re-mirror (kvs:reload(), nothing else running): mirror duration %.2f s" % dur)

        # a re-mirror after one change, with the console and DNS timed meanwhile
        lat_console, lat_dns = [], []
        done = threading.Event()

        def dns_loop():
            while not done.is_set():
                q0 = time.monotonic()
                udp_query(d.port, "www.example.net.")
                lat_dns.append(time.monotonic() - q0)

        th = threading.Thread(target=dns_loop)
        th.start()
        r.command("SADD", "big", "extra.example.")
        t0 = time.monotonic()
        while True:
            q0 = time.monotonic()
            e, mem, refreshes, dur, mirroring = stats(d)
            lat_console.append(time.monotonic() - q0)
            if refreshes >= 3 and not mirroring:
                break
        done.set()
        th.join()
        print("re-mirror after one SADD: %d entries, mirror duration %.2f s, visible after "
              "%.2f s" % (e, dur, time.monotonic() - t0))
        print("during it: console command (dnslb -c, incl. process start) max %.0f ms, "
              "median %.0f ms; DNS query max %.1f ms, median %.2f ms (%d queries)" % (
                  max(lat_console) * 1e3, sorted(lat_console)[len(lat_console) // 2] * 1e3,
                  max(lat_dns) * 1e3, sorted(lat_dns)[len(lat_dns) // 2] * 1e3,
                  len(lat_dns)))
        rc = udp_query(d.port, "www.domain0999999.com.").rcode()
        print("www.domain%07d.com. -> rcode %d (5 = REFUSED)" % (n - 1, rc))
    finally:
        if d is not None:
            d.stop()
        resp.stop()
        r.stop()


if __name__ == "__main__":
    main()
