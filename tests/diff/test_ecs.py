"""EDNS Client Subnet: useClientSubnet, setECSOverride,
setECSSourcePrefixV4/V6, the ECS actions, a pool's setECS(), and the cache
with ECS (parseECS, answers with scope zero), dnsdist 1.7.3 and dnslb side
by side. The backends echo the query's OPT (ECS included), so the answers
show what each did to the ECS on the way back too. Clients bind other
loopback addresses (all of 127/8 is local on Linux) to fall in other
subnets."""

import json
import re
import socket
import struct
import time

import pytest

from diffharness import VOLATILE_STATS, known, build_query, strip_id  # noqa: F401

ECS = 8
COOKIE = 10


def ecs(family, source, addr, scope=0):
    return (ECS, struct.pack("!HBB", family, source, scope) + bytes(addr))


def exchange_from(side, wire, proto, src, timeout=2.0):
    fam = socket.AF_INET6 if ":" in src else socket.AF_INET
    host = "::1" if fam == socket.AF_INET6 else "127.0.0.1"
    if proto == "udp":
        s = socket.socket(fam, socket.SOCK_DGRAM)
    else:
        s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.bind((src, 0))
        s.connect((host, side.port))
        if proto == "udp":
            s.send(wire)
            try:
                return s.recv(65535)
            except socket.timeout:
                return None
        s.sendall(struct.pack("!H", len(wire)) + wire)
        buf = b""
        try:
            while len(buf) < 2 or len(buf) < 2 + struct.unpack("!H", buf[:2])[0]:
                d = s.recv(65535)
                if not d:
                    return None
                buf += d
        except socket.timeout:
            return None
        return buf[2:]
    finally:
        s.close()


def drop_ecs(wire):
    """@wire (an answer whose last record is its OPT) without its ECS option."""
    opt = wire.rindex(b"\x00\x00\x29")
    rdlen = struct.unpack("!H", wire[opt + 9:opt + 11])[0]
    rdata, out, i = wire[opt + 11:opt + 11 + rdlen], b"", 0
    while i + 4 <= len(rdata):
        code, ln = struct.unpack("!HH", rdata[i:i + 4])
        if code != ECS:
            out += rdata[i:i + 4 + ln]
        i += 4 + ln
    return wire[:opt + 9] + struct.pack("!H", len(out)) + out


def query_from(p, wire, proto="udp", src="127.0.0.1", replaced=False):
    """p.query() from the source address @src. @replaced: the query's own
    ECS is replaced (override): dnslb takes it out of the answer."""
    guard()
    a = exchange_from(p.theirs, wire, proto, src)
    b = exchange_from(p.ours, wire, proto, src)
    if replaced and a is not None and a != b:
        known("The ECS dnslb put in is taken out of the answer")
        a = drop_ecs(a)
    assert strip_id(a) == strip_id(b), (
        "answers differ over %s from %s\n dnsdist: %s\n dnslb:   %s"
        % (proto, src, a and a.hex(), b and b.hex()))
    time.sleep(0.05)
    p.assert_same_backend_traffic()
    return a


def counters(p, but=()):
    """p.stats(), less the names dnslb does not have yet (another part of
    the work adds them): every name both have must hold the same value."""
    a = p.parse_dumpstats(p.theirs.console("dumpStats()"))
    b = p.parse_dumpstats(p.ours.console("dumpStats()"))
    skip = VOLATILE_STATS | {"tcp-listen-overflows"} | set(but)   # the kernel's, for the host
    diff = {k: (a[k], b[k]) for k in a if k in b and k not in skip and a[k] != b[k]}
    assert not diff, "counters differ (dnsdist, dnslb): %r" % diff


def cache_stats(p):
    """printStats() of the default pool's cache: dnsdist's lines, then
    dnslb's own (documented)."""
    a = p.theirs.console('getPool(""):getCache():printStats()')
    b = p.ours.console('getPool(""):getCache():printStats()')
    known("printStats and getStats show more")
    lines = a.rstrip("\n") + "\n"
    assert b.startswith(lines), "printStats differs\n--- dnsdist\n%s--- dnslb\n%s" % (a, b)
    assert re.fullmatch(r"Stale hits: \d+\nPrefetches: \d+\nEvictions: \d+\n"
                        r"Memory: \d+ bytes\n" + re.escape(a[len(lines):]), b[len(lines):]), b
    ga = json.loads(p.theirs.console('getPool(""):getCache():getStats()'))
    gb = json.loads(p.ours.console('getPool(""):getCache():getStats()'))
    extra = {"staleHits", "prefetches", "evictions", "bytes"}
    assert set(gb) - set(ga) == extra
    assert {k: v for k, v in gb.items() if k not in extra} == ga


def guard():
    """Keep the next exchange with both daemons within one second of the
    clock: dnsdist and dnslb then see the same age for a cached answer.
    A quarter of a second is kept free: on a loaded machine one exchange
    with both (over TCP: two connections) has taken over 70 ms."""
    if time.time() % 1.0 > 0.75:
        time.sleep(1.01 - time.time() % 1.0)


def align():
    """Wait for the start of a second: dnsdist ages cached answers by whole
    seconds of the clock, so both must insert and hit within the same ones."""
    time.sleep(1.02 - time.time() % 1.0)


SRCS = ("127.0.0.1", "127.0.0.2", "127.9.8.7")


def variety(p, name, protos=("udp", "tcp"), srcs=SRCS, override=False):
    """The same set of queries for each transport and source: no EDNS,
    EDNS without options, EDNS with a cookie and DO, EDNS with the client's
    own ECS (v4 /24, v4 /32, v6 /56, source 0)."""
    opts = [
        None,
        {"payload": 1232},
        {"payload": 4096, "do": True, "options": [(COOKIE, bytes(range(8)))]},
        {"payload": 1232, "options": [ecs(1, 24, [10, 1, 2])]},
        {"payload": 1232, "options": [ecs(1, 32, [10, 1, 2, 3])]},
        {"payload": 1232, "options": [ecs(2, 56, bytes(7))]},
        {"payload": 1232, "options": [ecs(1, 0, [])]},
        {"payload": 1232, "options": [(COOKIE, bytes(8)), ecs(1, 24, [10, 1, 2])]},
    ]
    n = 0
    for proto in protos:
        for src in srcs:
            for o in opts:
                n += 1
                own = o is not None and any(c == ECS for c, _ in o.get("options", ()))
                query_from(p, build_query("q%d.%s" % (n, name), qid=n, opt=o), proto, src,
                           replaced=override and own)


@pytest.mark.parametrize("extra", [
    "",
    "setECSOverride(true)\n",
    "setECSSourcePrefixV4(16)\nsetECSSourcePrefixV6(48)\n",
    "setECSSourcePrefixV4(32)\nsetECSOverride(true)\n",
    "setECSSourcePrefixV4(0)\n",
], ids=["default", "override", "prefix16", "prefix32-override", "prefix0"])
def test_use_client_subnet(pair, extra):
    p = pair('newServer({address="@B0@", useClientSubnet=true})\n' + extra)
    variety(p, "ecs.test.", override="Override(true)" in extra)
    counters(p)


def test_no_use_client_subnet(pair):
    p = pair('newServer({address="@B0@"})\nsetECSOverride(true)\n')
    variety(p, "plain.test.", srcs=("127.0.0.2",))
    counters(p)


def test_ipv6_client(pair):
    p = pair('newServer({address="@B0@", useClientSubnet=true})\n'
             'addLocal("[::1]:@PORT@")\nsetECSSourcePrefixV6(48)\n')
    variety(p, "v6.test.", srcs=("::1",))
    counters(p)


@pytest.mark.parametrize("action", [
    'SetECSAction("10.20.0.0/16")',
    'SetECSAction("10.20.30.40")',
    'SetECSAction("10.20.0.0/16", "2001:db8::/32")',
    'SetECSPrefixLengthAction(16, 40)',
    'SetECSPrefixLengthAction(32, 128)',
    'SetECSOverrideAction(true)',
    'SetECSOverrideAction(false)',
    'SetDisableECSAction()',
], ids=["setecs16", "setecs-host", "setecs-v4v6", "prefixlen16", "prefixlen32",
        "override-on", "override-off", "disable"])
@pytest.mark.parametrize("ucs", [True, False], ids=["ucs", "noucs"])
def test_actions(pair, action, ucs):
    body = 'newServer({address="@B0@"%s})\n' % (", useClientSubnet=true" if ucs else "")
    body += 'addAction(makeRule("act.test."), %s)\n' % action
    p = pair(body)
    variety(p, "act.test.", srcs=("127.0.0.2",), override=ucs and action == "SetECSOverrideAction(true)")
    variety(p, "other.test.", srcs=("127.0.0.2",), protos=("udp",))
    counters(p)


def test_pool_set_ecs(pair):
    p = pair('newServer({address="@B0@"})\ngetPool(""):setECS(true)\n')
    assert p.console('getPool(""):getECS() and "on" or "off"') == "on\n"
    variety(p, "pool.test.", srcs=("127.0.0.2",))
    p.console('getPool(""):setECS(false)')
    assert p.console('getPool(""):getECS() and "on" or "off"') == "off\n"
    variety(p, "pool2.test.", srcs=("127.0.0.2",), protos=("udp",))
    counters(p)


@pytest.mark.parametrize("copts", [
    "",
    "parseECS=true",
    "parseECS=true, disableZeroScope=true",
], ids=["plain", "parseecs", "nozeroscope"])
@pytest.mark.parametrize("label", ["www", "ecsscope-0", "ecsscope-24"])
def test_cache_with_ecs(pair, copts, label):
    p = pair('newServer({address="@B0@", useClientSubnet=true})\n'
             'pc = newPacketCache(100, {%s})\ngetPool(""):setCache(pc)\n' % copts)
    for proto in ("udp", "tcp"):
        align()
        for src in ("127.0.0.1", "127.0.0.2", "127.0.1.1", "127.0.0.1"):
            for o in (None, {"payload": 1232},
                      {"payload": 1232, "options": [ecs(1, 24, [10, 1, 2])]},
                      {"payload": 1232, "options": [ecs(1, 24, [10, 1, 3])]}):
                query_from(p, build_query(label + ".c.test.", qid=7, opt=o), proto, src)
    counters(p)
    p.console('getPool(""):getCache():toString()')
    cache_stats(p)


@pytest.mark.parametrize("pool_ecs", [True, False], ids=["pool-ecs", "no-pool-ecs"])
def test_pool_ecs_stale_when_no_server(pair, pool_ecs):
    """setECS on the pool: with its server down, a query still gets the
    client's subnet in its cache key, so the stale entries of the
    useClientSubnet server are found."""
    p = pair('newServer({address="@B0@", useClientSubnet=true})\n'
             'pc = newPacketCache(100, {})\ngetPool(""):setCache(pc)\n'
             'setStaleCacheEntriesTTL(600)\nsetServFailWhenNoServer(true)\n'
             'getPool(""):setECS(%s)\n' % ("true" if pool_ecs else "false"))
    align()
    for proto in ("udp", "tcp"):
        query_from(p, build_query("ttl-1.stale.test."), proto, "127.0.0.1")
    time.sleep(2.05)
    p.console('getServer(0):setDown()')
    for proto in ("udp", "tcp"):
        for src in ("127.0.0.1", "127.0.0.2", "127.0.1.1"):
            query_from(p, build_query("ttl-1.stale.test."), proto, src)
    counters(p)
    cache_stats(p)


@pytest.mark.parametrize("extra", ["", "setECSOverride(true)\n"], ids=["keep", "override"])
def test_trailing_bytes(pair, extra):
    """Bytes after the last record: dropped before the ECS is added."""
    p = pair('newServer({address="@B0@", useClientSubnet=true})\n' + extra)
    for proto in ("udp", "tcp"):
        for i, opt in enumerate((None, {"payload": 1232},
                                 {"payload": 1232, "options": [ecs(1, 24, [10, 1, 2])]})):
            query_from(p, build_query("t%d.trail.test." % i, opt=opt, trailing=b"\xde\xad\xbe\xef"),
                       proto, replaced=bool(extra) and i == 2)
    counters(p)
