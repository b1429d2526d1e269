"""The packet cache (newPacketCache, getPool(""):setCache), dnsdist 1.7.3
and dnslb side by side: what a hit answers, what reaches the backend (a hit
sends nothing), the counters and the console's cache commands."""

import time

import pytest

from diffharness import build_query, known  # noqa: F401
from test_ecs import align, cache_stats, counters, guard

COOKIE = 10


def pq(p, wire, proto="udp"):
    """p.query() within one second of the clock (see guard)."""
    guard()
    return p.query(wire, proto)


def cache_conf(opts="", n=100, extra=""):
    return ('newServer({address="@B0@"})\npc = newPacketCache(%d, {%s})\n'
            'getPool(""):setCache(pc)\n%s' % (n, opts, extra))


def check(p):
    """Counters, printStats and the entry count of both."""
    counters(p)
    cache_stats(p)
    p.console('pc:toString()')


@pytest.mark.parametrize("proto", ["udp", "tcp"])
def test_cookies_not_in_key(pair, proto):
    p = pair(cache_conf())
    align()
    for i, cookie in enumerate((bytes(8), bytes(range(8)), bytes(range(8)) + bytes(16),
                                b"\xff" * 8)):
        pq(p, build_query("cookie.test.", qid=i, opt={"payload": 1232,
                                                        "options": [(COOKIE, cookie)]}), proto)
    # a cookie and another option: the other option is in the key
    for i in range(2):
        pq(p, build_query("cookie.test.", qid=9, opt={
            "payload": 1232, "options": [(COOKIE, bytes([i]) * 8), (65001, b"x")]}), proto)
    pq(p, build_query("cookie.test.", qid=9, opt={"payload": 1232}), proto)
    check(p)


def test_cookie_hashing(pair):
    p = pair(cache_conf("cookieHashing=true"))
    align()
    for i in range(3):
        for c in (bytes(8), b"\x01" * 8):
            pq(p, build_query("cookie.test.", qid=i, opt={"payload": 1232,
                                                            "options": [(COOKIE, c)]}))
    check(p)


@pytest.mark.parametrize("size", [3000, 4090, 4096, 4097, 6000, 20000])
def test_large_answers_tcp(pair, size):
    p = pair(cache_conf())
    align()
    for _ in range(3):
        pq(p, build_query("big-%d.test." % size, qtype=16, opt={"payload": 4096}), "tcp")
        pq(p, build_query("big-%d.test." % size, qtype=16), "tcp")
    check(p)


TOO_BIG = "Answers too large for a UDP client become TC=1 answers"


def udp_limit(payload):
    """What a UDP client takes: 512 without EDNS, else its advertised size
    (at least 512), capped by setMaxUDPAnswerSize (default 4096)."""
    return 512 if payload is None else min(max(payload, 512), 4096)


@pytest.mark.parametrize("size", [1200, 1300, 4000, 4096, 4097])
def test_large_answers_udp(pair, size):
    """Answers the client can take are the same bytes from both (a miss, then
    a hit); one larger than the client takes is passed on by dnsdist and
    replaced by a TC=1 answer by dnslb (documented), from the cache too."""
    p = pair(cache_conf(), backends=({},))
    align()
    for _ in range(2):
        for payload in (4096, 1232, None):
            opt = {"payload": payload} if payload else None
            wire = build_query("size-%d.test." % size, qtype=16, opt=opt)
            if size <= udp_limit(payload):
                pq(p, wire, "udp")
                continue
            guard()
            a, b = p.answers(wire, "udp")
            known(TOO_BIG)
            assert a is not None and len(a) == size
            # header: TC set, the question only, an OPT if the query had one
            assert b is not None and b[2] & 0x02 and b[4:6] == b"\x00\x01"
            assert b[6:10] == b"\x00\x00\x00\x00"
            assert b[10:12] == (b"\x00\x01" if payload else b"\x00\x00")
            assert b[12:12 + len(wire) - 12 - (11 if payload else 0)] == \
                wire[12:len(wire) - (11 if payload else 0)]
            time.sleep(0.05)
            p.assert_same_backend_traffic()
        pq(p, build_query("size-%d.test." % size, qtype=16, opt={"payload": 4096}), "tcp")
    check(p)


def stats_of(text):
    return {k.strip(): v.strip() for k, v in
            (l.split(":", 1) for l in text.splitlines() if ":" in l)}


@pytest.mark.parametrize("n,names,opts", [(5, 12, "numberOfShards=1"), (1, 3, "numberOfShards=1"),
                                          (20, 50, "numberOfShards=1"), (10, 30, "")])
def test_full_cache(pair, n, names, opts):
    """dnsdist refuses to insert into a full shard; dnslb evicts. The first
    round is the same; in the second, both answer every query (the same
    records) and the counts add up."""
    p = pair(cache_conf(opts, n=n))
    align()
    for i in range(names):
        pq(p, build_query("n%d.full.test." % i, qid=i))
    known("A full cache makes room")
    for i in range(names):
        a, b = p.answers(build_query("n%d.full.test." % i, qid=i))
        assert a is not None and b is not None
        assert a[:-10] == b[:-10] and a[-4:] == b[-4:]    # the TTL aside
    p.new_backend_queries(p.theirs)
    p.new_backend_queries(p.ours)
    counters(p, but=("cache-hits", "cache-misses", "responses", "latency-count"))
    a = stats_of(p.theirs.console("pc:printStats()"))
    b = stats_of(p.ours.console("pc:printStats()"))
    assert int(a["Hits"]) + int(a["Misses"]) == int(b["Hits"]) + int(b["Misses"]) == 2 * names
    entries, cap = (int(x) for x in b["Entries"].split("/"))
    assert cap == n and 0 < entries <= n
    assert int(b["Evictions"]) == int(b["Misses"]) - entries    # every miss was stored


@pytest.mark.parametrize("cmd", [
    'getPool(""):getCache():expungeByName(newDNSName("x.test."), DNSQType.A, true)',
    'getPool(""):getCache():expungeByName(newDNSName("x.test."), DNSQType.A)',
    'getPool(""):getCache():expungeByName(newDNSName("x.test."))',
    'getPool(""):getCache():expungeByName(newDNSName("a.x.test."), DNSQType.AAAA, true)',
    'getPool(""):getCache():expungeByName(newDNSName("test."), DNSQType.ANY, true)',
    'getPool(""):getCache():expungeByName(newDNSName("X.TEST."), DNSQType.ANY, true)',
    'pc:expungeByName(newDNSName("x.test."), DNSQType.MX, false)',
    'pc:expunge(0)',
    'pc:expunge(3)',
    'pc:purgeExpired(0)',
])
def test_expunge(pair, cmd):
    # one shard: dnsdist's expunge(n) keeps n / shards per shard, and which
    # names share a shard depends on each one's hash
    p = pair(cache_conf("numberOfShards=1"))
    names = ("x.test.", "a.x.test.", "b.a.x.test.", "y.test.", "x.test2.")
    align()
    for proto in ("udp", "tcp"):
        for name in names:
            for qtype in (1, 28, 15):
                pq(p, build_query(name, qtype=qtype), proto)
    p.console('pc:toString()')
    p.console(cmd)
    p.console('pc:toString()')
    if cmd == 'pc:expunge(3)':
        # which 3 stay is the order of each one's table (dnsdist: a hash
        # map's), not something either defines: the counts are compared
        counters(p)
        return
    for proto in ("udp", "tcp"):
        for name in names:
            for qtype in (1, 28, 15):
                pq(p, build_query(name, qtype=qtype), proto)
    check(p)


@pytest.mark.parametrize("opts", ["", "temporaryFailureTTL=5", "temporaryFailureTTL=0"])
def test_temporary_failures(pair, opts):
    p = pair(cache_conf(opts))
    align()
    for _ in range(3):
        for proto in ("udp", "tcp"):
            for label in ("servfail", "refused", "empty-servfail", "empty-refused", "nx",
                          "formerr", "notimp"):
                pq(p, build_query(label + ".tf.test.", opt={"payload": 1232}), proto)
                pq(p, build_query(label + ".tf.test."), proto)
    check(p)


def test_keep_stale_data_and_expunge(pair):
    p = pair(cache_conf("keepStaleData=true, maxTTL=86400", extra="setStaleCacheEntriesTTL(600)\n"))
    align()
    for name in ("ttl-1.stale.test.", "ttl-300.stale.test."):
        pq(p, build_query(name))
    time.sleep(2.05)
    pq(p, build_query("ttl-1.stale.test."))      # expired, a server is up: refreshed
    p.console('getServer(0):setDown()')
    time.sleep(2.05)
    for name in ("ttl-1.stale.test.", "ttl-300.stale.test.", "none.stale.test."):
        pq(p, build_query(name))                 # stale, fresh, nothing
    p.console('pc:purgeExpired(0)')
    p.console('pc:toString()')
    pq(p, build_query("ttl-1.stale.test."))
    p.console('pc:expunge(0)')
    p.console('pc:toString()')
    pq(p, build_query("ttl-1.stale.test."))
    check(p)


@pytest.mark.parametrize("action", ["SetNoRecurseAction()",
                                    "SetDisableValidationAction()",
                                    "SetSkipCacheAction()"])
def test_rule_alters_header_before_hit(pair, action):
    p = pair(cache_conf(extra="addAction(AllRule(), %s)\n" % action))
    align()
    for proto in ("udp", "tcp"):
        for flags in (0x0100, 0x0000, 0x0110):
            for _ in range(2):
                pq(p, build_query("hdr.test.", flags=flags, opt={"payload": 1232}), proto)
    check(p)


def test_hits_and_key_fields(pair):
    """The same name, changing one thing a time: RD, CD, DO, payload, qtype,
    qclass, case, transport."""
    p = pair(cache_conf())
    align()
    variants = [dict(), dict(flags=0), dict(flags=0x0110), dict(opt={"payload": 1232}),
                dict(opt={"payload": 4096}), dict(opt={"payload": 1232, "do": True}),
                dict(qtype=28), dict(qclass=3), dict(qname="KeY.TeSt.")]
    for _ in range(2):
        for proto in ("udp", "tcp"):
            for v in variants:
                kw = dict(qname="key.test.")
                kw.update(v)
                pq(p, build_query(**kw), proto)
    check(p)
