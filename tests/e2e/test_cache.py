"""Packet cache end to end (issue 3): hits served without the backend (the
responder counts what reaches it), TTL aging, case and ID restoration, what
is in the key (DO, CD, RD, transport, EDNS options but not cookies, payload
ranks), what is cached and for how long (temporary failures, negative
answers, minTTL, TC), stale answers, prefetch, the entry and byte bounds,
the PacketCache Lua methods at config time, and dnsdist 1.7.3 side by side.

The responder labels used here: ttl-<n>, seq-<n>, nxdomain-<ttl>[-<min>],
nodata-<ttl>[-<min>], tcdata, servfail, refused, nx (see responder.py).

Not covered: expunge/expungeByName/purgeExpired on a running cache. Without
a console there is no way to call them after queries were cached; they are
only exercised on the empty cache at config time (test_cache_methods_at_
config_time) until the console issue lands.
"""

import os
import time

import dns.flags
import dns.rcode
import dns.rdatatype
import pytest

from dnslbtest import (DNSDIST, IMPL, Header, UdpClient, a_addrs, build_query, console,
                       console_head, encode_name, lua_server,
                       lua_value, make_query, parse, question_bytes, tcp_query, udp_query,
                       udp_raw)

FAST = "setUDPTimeout(0.5)\n"


def cache_conf(responder, opts=None, max_entries=10000, extra="", server=None):
    """A config: one server (@responder), the default pool with a cache."""
    o = "" if opts is None else ", " + lua_value(opts)
    return (lua_server(responder, **(server or {})) + FAST
            + "pc = newPacketCache(%d%s)\n" % (max_entries, o)
            + 'getPool(""):setCache(pc)\n' + extra)


def ask(d, name, qtype="A", tcp=False, cd=False, **kw):
    """One query via dnspython; returns the answer Message (asserts one came)."""
    q = make_query(name, qtype, **kw)
    if cd:
        q.flags |= dns.flags.CD
    r = (tcp_query if tcp else udp_query)(d.port, q)
    assert r is not None, "no answer to %s from %s" % (name, d.name)
    return r


def backend_count(responder, name):
    return len(responder.queries_for(name))


def first_ttl(msg):
    for section in (msg.answer, msg.authority):
        for rrset in section:
            return rrset.ttl
    raise AssertionError("no records in %s" % msg)


def counters(d, hits, misses):
    """Wait until cache-hits/cache-misses reach the expected values, then
    check they are exactly that."""
    s = d.wait_stats(lambda s: s["cache-hits"] >= hits and s["cache-misses"] >= misses, 3.0)
    assert (s["cache-hits"], s["cache-misses"]) == (hits, misses), \
        "cache-hits/cache-misses %d/%d, expected %d/%d" % (
            s["cache-hits"], s["cache-misses"], hits, misses)
    return s


def sleep_until(t):
    left = t - time.monotonic()
    if left > 0:
        time.sleep(left)

# ---------------------------------------------------------------------------
# hits


def test_hit_after_miss_backend_counters_case_and_id(dnslb, responder):
    d = dnslb(cache_conf(responder))
    a = udp_raw(d.port, build_query("www.example.com.", qid=0x1111))
    assert a is not None and Header(a).id == 0x1111
    # another client, another ID, another case pattern (0x20)
    b = udp_raw(d.port, build_query("WwW.ExAmPle.CoM.", qid=0x2222))
    assert b is not None
    assert backend_count(responder, "www.example.com.") == 1, "the hit reached the backend"
    counters(d, hits=1, misses=1)
    hb = Header(b)
    assert hb.id == 0x2222, "the hit carries ID %#x, not the second client's" % hb.id
    assert hb.qr and hb.rcode == 0 and hb.rd
    assert question_bytes(b) == encode_name("WwW.ExAmPle.CoM.") + b"\x00\x01\x00\x01", \
        "the client's qname case was not restored on the hit: %r" % question_bytes(b)
    assert a_addrs(b) == ["192.0.2.1"] and a_addrs(a) == ["192.0.2.1"]
    # the same answer otherwise (the TTL may have aged by a second at most)
    ma, mb = parse(a), parse(b)
    assert ma.answer[0].ttl - mb.answer[0].ttl in (0, 1)
    # a third query, yet another ID: still one backend query
    c = ask(d, "www.example.com.", qid=0x3333)
    assert c.id == 0x3333 and a_addrs(c) == ["192.0.2.1"]
    assert backend_count(responder, "www.example.com.") == 1
    counters(d, hits=2, misses=1)
    s = d.stats()
    assert s["queries"] == 3


def test_other_qtype_and_name_are_misses(dnslb, responder):
    d = dnslb(cache_conf(responder))
    ask(d, "k.example.test.", "A")
    ask(d, "k.example.test.", "AAAA")
    ask(d, "k2.example.test.", "A")
    ask(d, "k.example.test.", "A")
    assert backend_count(responder, "k.example.test.") == 2
    assert backend_count(responder, "k2.example.test.") == 1
    counters(d, hits=1, misses=3)

# ---------------------------------------------------------------------------
# TTLs


def test_ttl_decreases_on_hits_never_below_zero(dnslb, responder):
    d = dnslb(cache_conf(responder))
    # entries age by whole seconds of the clock (as dnsdist's): start just
    # after one turns, so the 3 s entry is still there 2.2 s later
    time.sleep(1.02 - time.time() % 1.0)
    r30 = ask(d, "ttl-30.age.test.")
    r3 = ask(d, "ttl-3.age.test.")
    assert first_ttl(r30) == 30 and first_ttl(r3) == 3
    time.sleep(2.2)
    h30 = ask(d, "ttl-30.age.test.")
    h3 = ask(d, "ttl-3.age.test.")
    assert backend_count(responder, "ttl-30.age.test.") == 1
    assert backend_count(responder, "ttl-3.age.test.") == 1
    t30, t3 = first_ttl(h30), first_ttl(h3)
    assert t30 <= 29, "TTL not aged after 2.2 s: %d" % t30
    assert t30 >= 20, "TTL aged far too much (or wrapped): %d" % t30
    assert 0 <= t3 <= 2, "TTL of a 3 s entry after 2.2 s: %d" % t3


def test_dont_age_keeps_ttl(dnslb, responder):
    d = dnslb(cache_conf(responder, {"dontAge": True}))
    assert first_ttl(ask(d, "ttl-30.dontage.test.")) == 30
    time.sleep(2.2)
    h = ask(d, "ttl-30.dontage.test.")
    assert backend_count(responder, "ttl-30.dontage.test.") == 1
    assert first_ttl(h) == 30, "dontAge=true but the TTL was aged to %d" % first_ttl(h)

# ---------------------------------------------------------------------------
# the key


def _variants(kind):
    """Two query variants (kwargs for ask()) that must not share an entry."""
    return {
        "do": ({"edns": 0, "want_dnssec": False}, {"edns": 0, "want_dnssec": True}),
        "cd": ({"cd": False}, {"cd": True}),
        "rd": ({"rd": True}, {"rd": False}),
        "transport": ({"tcp": False}, {"tcp": True}),
        "edns-vs-none": ({"edns": -1}, {"edns": 0}),
    }[kind]


@pytest.mark.parametrize("kind", ["do", "cd", "rd", "transport", "edns-vs-none"])
def test_key_separates(dnslb, responder, kind):
    d = dnslb(cache_conf(responder))
    name = "sep-%s.example.test." % kind
    v1, v2 = _variants(kind)
    a1 = ask(d, name, **v1)
    a2 = ask(d, name, **v2)
    assert backend_count(responder, name) == 2, \
        "the %s variants shared one cache entry" % kind
    # both are cached, each under its own key
    b1 = ask(d, name, **v1)
    b2 = ask(d, name, **v2)
    assert backend_count(responder, name) == 2
    counters(d, hits=2, misses=2)
    if kind == "do":
        assert not (b1.ednsflags & dns.flags.DO) and (b2.ednsflags & dns.flags.DO)
    if kind == "cd":
        assert not (b1.flags & dns.flags.CD) and (b2.flags & dns.flags.CD)
    if kind == "rd":
        assert (b1.flags & dns.flags.RD) and not (b2.flags & dns.flags.RD)
    if kind == "edns-vs-none":
        assert b1.edns < 0 and b2.edns == 0
    for a, b in ((a1, b1), (a2, b2)):
        assert a_addrs(a) == a_addrs(b) == ["192.0.2.1"]


COOKIE = 10


def _cookie_query(name, cookie, qid, extra=()):
    opts = [(COOKIE, cookie)] + list(extra)
    return build_query(name, qid=qid, opt={"payload": 1232, "options": opts})


@pytest.mark.parametrize("hashing", [False, True])
def test_cookies_not_in_key_unless_cookie_hashing(dnslb, responder, hashing):
    d = dnslb(cache_conf(responder, {"cookieHashing": hashing}))
    name = "cookie.example.test."
    a = udp_raw(d.port, _cookie_query(name, b"\x01" * 8, 1))
    b = udp_raw(d.port, _cookie_query(name, b"\x02" * 8, 2))
    assert a is not None and b is not None and Header(b).id == 2
    assert a_addrs(b) == ["192.0.2.1"]
    assert backend_count(responder, name) == (2 if hashing else 1), \
        "cookieHashing=%s: backend saw %d queries" % (hashing, backend_count(responder, name))
    counters(d, hits=0 if hashing else 1, misses=2 if hashing else 1)
    # another (non-cookie) option is part of the key either way
    c = udp_raw(d.port, _cookie_query(name, b"\x01" * 8, 3, extra=[(65001, b"xyz")]))
    assert c is not None
    assert backend_count(responder, name) == (3 if hashing else 2), \
        "an answer was shared between queries with different EDNS options"


@pytest.mark.dnslb_only("payloadRanks is a dnslb addition (dnsdist 2.0 has it)")
@pytest.mark.parametrize("ranks", [None, [512, 1232, 4096]])
def test_payload_ranks_share_entries(dnslb, responder, ranks):
    d = dnslb(cache_conf(responder, {"payloadRanks": ranks} if ranks else {}))
    name = "ranks.example.test."
    a = ask(d, name, edns=0, payload=1232)
    b = ask(d, name, edns=0, payload=1400)
    assert a_addrs(a) == a_addrs(b) == ["192.0.2.1"]
    if ranks:
        assert backend_count(responder, name) == 1, \
            "EDNS 1232 and 1400 are one rank but did not share the entry"
        counters(d, hits=1, misses=1)
    else:
        assert backend_count(responder, name) == 2, \
            "without payloadRanks different EDNS sizes must not share entries"
        counters(d, hits=0, misses=2)
    # a client in another rank (512) still gets its own entry
    ask(d, name, edns=0, payload=512)
    assert backend_count(responder, name) == (2 if ranks else 3)

# ---------------------------------------------------------------------------
# what is cached, and for how long


def test_temporary_failure_ttl(dnslb, responder):
    d = dnslb(cache_conf(responder, {"temporaryFailureTTL": 2}))
    for label in ("servfail", "refused"):
        name = "%s.tf.test." % label
        want = dns.rcode.SERVFAIL if label == "servfail" else dns.rcode.REFUSED
        assert ask(d, name).rcode() == want
        assert ask(d, name, qid=4242).rcode() == want
        assert backend_count(responder, name) == 1, "%s was not cached" % label
    counters(d, hits=2, misses=2)
    time.sleep(2.6)
    for label in ("servfail", "refused"):
        name = "%s.tf.test." % label
        ask(d, name)
        assert backend_count(responder, name) == 2, \
            "%s still cached after temporaryFailureTTL (2 s)" % label


def test_temporary_failure_ttl_zero_not_cached(dnslb, responder):
    d = dnslb(cache_conf(responder, {"temporaryFailureTTL": 0}))
    for _ in range(2):
        assert ask(d, "servfail.tf0.test.").rcode() == dns.rcode.SERVFAIL
    assert backend_count(responder, "servfail.tf0.test.") == 2
    counters(d, hits=0, misses=2)


def test_negative_caching(dnslb, responder):
    d = dnslb(cache_conf(responder))
    names = {"nxdomain-3.neg.test.": dns.rcode.NXDOMAIN,
             "nodata-3.neg.test.": dns.rcode.NOERROR}
    t0 = time.monotonic()
    for name, rc in names.items():
        r = ask(d, name)
        assert r.rcode() == rc and not r.answer and first_ttl(r) == 3
    # NXDOMAIN without a SOA carries no TTL: never cached
    ask(d, "nx.neg.test.")
    ask(d, "nx.neg.test.")
    assert backend_count(responder, "nx.neg.test.") == 2
    sleep_until(t0 + 1.1)
    for name, rc in names.items():
        r = ask(d, name)
        assert r.rcode() == rc and not r.answer
        assert r.authority and r.authority[0].rdtype == dns.rdatatype.SOA
        assert backend_count(responder, name) == 1, "%s was not cached" % name
        assert 0 <= first_ttl(r) <= 2, "SOA TTL on a hit after 1.1 s: %d" % first_ttl(r)
    sleep_until(t0 + 3.6)
    for name in names:
        ask(d, name)
        assert backend_count(responder, name) == 2, "%s outlived its SOA TTL (3 s)" % name


def test_max_negative_ttl_caps(dnslb, responder):
    d = dnslb(cache_conf(responder, {"maxNegativeTTL": 2}))
    names = ["nxdomain-300.negcap.test.", "nodata-300.negcap.test."]
    time.sleep(1.02 - time.time() % 1.0)    # entries age by whole seconds of the clock
    t0 = time.monotonic()
    for name in names:
        ask(d, name)
    sleep_until(t0 + 1.1)
    for name in names:
        r = ask(d, name)
        assert backend_count(responder, name) == 1, "%s was not cached" % name
        # the returned TTL is the record's own, aged (dnsdist does not cap it)
        assert 290 <= first_ttl(r) <= 299, first_ttl(r)
    sleep_until(t0 + 2.6)
    for name in names:
        ask(d, name)
        assert backend_count(responder, name) == 2, \
            "%s cached longer than maxNegativeTTL=2" % name


@pytest.mark.dnslb_only("dnsdist 1.7 ignores the SOA MINIMUM (uses the records' TTLs)")
def test_negative_ttl_bounded_by_soa_minimum(dnslb, responder):
    d = dnslb(cache_conf(responder))
    names = ["nxdomain-300-2.negmin.test.", "nodata-300-2.negmin.test."]
    t0 = time.monotonic()
    for name in names:
        ask(d, name)
    sleep_until(t0 + 1.0)
    for name in names:
        ask(d, name)
        assert backend_count(responder, name) == 1, "%s was not cached" % name
    sleep_until(t0 + 2.6)
    for name in names:
        ask(d, name)
        assert backend_count(responder, name) == 2, \
            "%s cached past its SOA MINIMUM (2 s, RFC 2308)" % name


def test_min_ttl_not_cached_below(dnslb, responder):
    d = dnslb(cache_conf(responder, {"minTTL": 10}))
    for _ in range(2):
        assert first_ttl(ask(d, "ttl-5.minttl.test.")) == 5
        assert first_ttl(ask(d, "ttl-20.minttl.test.")) <= 20
    assert backend_count(responder, "ttl-5.minttl.test.") == 2, \
        "an answer with TTL 5 < minTTL 10 was cached"
    assert backend_count(responder, "ttl-20.minttl.test.") == 1
    counters(d, hits=1, misses=3)


@pytest.mark.dnslb_only("dnsdist 1.7.3 has no TC check: it caches a TC=1 answer with records")
def test_truncated_answers_not_cached(dnslb, responder):
    d = dnslb(cache_conf(responder))
    for _ in range(2):
        w = udp_raw(d.port, build_query("tcdata.tc.test.", qid=77))
        assert w is not None and Header(w).tc
        w = udp_raw(d.port, build_query("tc.tc.test.", qid=78))
        assert w is not None and Header(w).tc
    assert backend_count(responder, "tcdata.tc.test.") == 2, "a TC=1 answer was cached"
    assert backend_count(responder, "tc.tc.test.") == 2
    counters(d, hits=0, misses=4)


def _fill_and_check_bound(d, responder, names):
    """Insert @names one by one, each asked twice in a row: the second must
    be a hit (a full cache makes room for a new entry, it does not refuse
    it). Then ask them all again, newest first; return how many were still
    cached (hits of that last pass)."""
    refused = []
    for n in names:
        assert a_addrs(ask(d, n)) == ["192.0.2.1"]
        ask(d, n)
        if backend_count(responder, n) != 1:
            refused.append(n)
    assert not refused, "%d of %d new entries were not admitted by the full cache (first: %s)" \
        % (len(refused), len(names), refused[0])
    before = {n: backend_count(responder, n) for n in names}
    for n in reversed(names):
        assert a_addrs(ask(d, n)) == ["192.0.2.1"]
    assert d.alive()
    return sum(1 for n in names if backend_count(responder, n) == before[n])


@pytest.mark.dnslb_only("not asserted against dnsdist (a full dnsdist shard refuses inserts)")
def test_max_entries_bound(dnslb, responder):
    # one shard, so that the bound is exactly maxEntries
    d = dnslb(cache_conf(responder, {"numberOfShards": 1}, max_entries=400))
    names = ["n%04d.bound.test." % i for i in range(1200)]
    hits = _fill_and_check_bound(d, responder, names)
    assert 1 <= hits <= 400, "%d of 1200 names were still cached in a 400-entry cache" % hits


@pytest.mark.dnslb_only("maxMemory is a dnslb addition")
def test_max_memory_bound(dnslb, responder):
    limit = 2048
    d = dnslb(cache_conf(responder, {"numberOfShards": 1, "maxMemory": limit}))
    names = ["m%03d.memory.test." % i for i in range(100)]
    size = len(udp_raw(d.port, build_query("size.memory.test.", flags=0x0100)))
    hits = _fill_and_check_bound(d, responder, names)
    # every entry holds at least its answer's bytes
    assert 1 <= hits <= limit // size, \
        "%d entries of >= %d bytes cached under maxMemory=%d" % (hits, size, limit)


# ---------------------------------------------------------------------------
# stale answers


@pytest.mark.dnslb_only("serving stale on a backend timeout is a dnslb addition")
@pytest.mark.parametrize("on", [True, False])
def test_stale_on_backend_timeout(dnslb, responder, on):
    extra = "setStaleCacheEntriesTTL(30)\n" + ("setServeStaleOnTimeout(true)\n" if on else "")
    d = dnslb(cache_conf(responder, {"staleTTL": 7}, extra=extra + "setCacheCleaningDelay(60)\n"))
    # dnslb's first cache cleaning runs about 1 s after start (not after
    # setCacheCleaningDelay): let it pass, or it may purge the expired entry
    time.sleep(1.3)
    name = "ttl-1.stale.test."
    assert first_ttl(ask(d, name)) == 1
    responder.behaviours["ttl-1"] = lambda q, transport: []     # backend stops answering it
    time.sleep(1.6)                                             # the entry has expired
    r = udp_query(d.port, name, qid=0x5151, timeout=2.5)
    assert backend_count(responder, name) == 2, "the expired entry was served without asking"
    if not on:
        assert r is None, "answered after a backend timeout without setServeStaleOnTimeout"
        return
    assert r is not None, "no stale answer after the backend timed out (counters %s)" % d.stats()
    assert r.id == 0x5151 and r.rcode() == dns.rcode.NOERROR
    assert a_addrs(r) == ["192.0.2.1"]
    assert first_ttl(r) == 7, "stale answer TTL %d, expected staleTTL=7" % first_ttl(r)
    assert d.stat_at_least("downstream-timeouts", 1) == 1


def test_stale_when_no_backend_up(dnslb, make_responder):
    """setStaleCacheEntriesTTL: the only backend is stopped; once health
    checks mark it down, expired entries are served with TTL = staleTTL."""
    resp = make_responder()
    d = dnslb(cache_conf(resp, {"staleTTL": 7}, extra="setStaleCacheEntriesTTL(30)\n",
                         server={"checkInterval": 1, "maxCheckFailures": 1, "checkTimeout": 300}))
    time.sleep(1.3)                 # past the first cache cleaning (see above)
    name = "ttl-1.down.test."
    assert first_ttl(ask(d, name)) == 1
    resp.stop()
    time.sleep(3.0)                 # expired, and a few failed health checks
    r = udp_query(d.port, name, qid=0x6161, timeout=2.0)
    if r is None and d.impl == "dnslb":
        s = d.stats()
        if s["downstream-timeouts"] + s["downstream-send-errors"] > 0:
            pytest.skip("dnslb still sent the query to the stopped backend: it was never "
                        "marked down (no health checks yet), so the no-backend-up stale "
                        "path cannot be reached without a console")
    assert r is not None, "no stale answer with every backend down"
    assert r.id == 0x6161 and a_addrs(r) == ["192.0.2.1"]
    assert first_ttl(r) == 7

# ---------------------------------------------------------------------------
# prefetch


@pytest.mark.dnslb_only("prefetch is a dnslb addition")
def test_prefetch_refreshes_hot_entry(dnslb, responder):
    d = dnslb(cache_conf(responder, {"prefetch": 0.5}))
    # Timeline (TTL 8, prefetch in the last half): the hit at 5.6 s refreshes; at 8.6 s the
    # first answer has expired while the refreshed one (inserted ~5.6 s) is only 3 s old, well
    # short of its own prefetch point (4 s), so the last ask cannot trigger another refresh
    # even on a slow (sanitizer) build.
    name = "seq-8.prefetch.test."
    t0 = time.monotonic()
    r = ask(d, name)
    assert a_addrs(r) == ["198.51.100.1"] and first_ttl(r) == 8
    sleep_until(t0 + 5.6)               # in the last half of the entry's life
    r = ask(d, name)
    assert a_addrs(r) == ["198.51.100.1"], "the client did not get the cached answer"
    assert first_ttl(r) <= 3
    assert len(responder.wait_queries(name, 2, timeout=1.0)) == 2, \
        "no background refresh after a hit in the last half of the TTL"
    sleep_until(t0 + 8.6)               # the first answer has expired by now
    r = ask(d, name)
    assert a_addrs(r) == ["198.51.100.2"], "not the refreshed answer: %s" % a_addrs(r)
    assert 1 <= first_ttl(r) <= 8
    assert backend_count(responder, name) == 2, "the refreshed entry was not used"
    s = counters(d, hits=2, misses=1)
    # the refresh is not a client query
    assert s["queries"] == 3
    assert s["responses"] == 1
    be = list(s["backends"].values())[0]
    assert be["queries"] == 2 and be["responses"] == 2

# ---------------------------------------------------------------------------
# PacketCache methods (config time only: no console yet)


@pytest.mark.dnslb_only("dnslb's return values and extra printStats lines")
def test_cache_methods_at_config_time(dnslb, responder, tmp_path):
    dump = str(tmp_path / "empty.dump")
    exists = str(tmp_path / "exists.dump")
    with open(exists, "w") as f:
        f.write("keep me\n")
    extra = (
        'print("T expunge0=" .. tostring(pc:expunge(0)))\n'
        'print("T purge=" .. tostring(pc:purgeExpired(0)))\n'
        'pc:expungeByName("example.com.", DNSQType.A, true)\n'
        'print("T string=" .. pc:toString())\n'
        'print("T full=" .. tostring(pc:isFull()))\n'
        'print("T entries=" .. tostring(pc:getStats().entries))\n'
        'pc:dump(%s)\n'
        'pc:dump(%s)\n'
        'pc:printStats()\n') % (lua_value(dump), lua_value(exists))
    d = dnslb(cache_conf(responder, max_entries=100, extra=extra))
    out = d.output()
    for want in ("T expunge0=0", "T purge=0", "T string=0/100", "T full=false",
                 "T entries=0"):
        assert want in out, "%r not in the output:\n%s" % (want, out)
    # what these methods print is console output: at config time it goes
    # nowhere, as in dnsdist 1.7.3 (tests/diff/test_cli.py compares)
    for console_only in ("Expunged 0 records", "Dumped 0 records", "Entries: 0/100",
                         "Error opening dump file for writing"):
        assert console_only not in out, out
    assert os.path.getsize(dump) == 0
    with open(exists) as f:
        assert f.read() == "keep me\n", "dump() overwrote an existing file"
    # the cache works after all that
    ask(d, "after.methods.test.")
    ask(d, "after.methods.test.")
    assert backend_count(responder, "after.methods.test.") == 1

# ---------------------------------------------------------------------------
# side by side with dnsdist 1.7.3


@pytest.fixture
def cache_pair(dnslb, make_responder):
    """(dnslb, its responder, dnsdist, its responder): the same cache config."""
    if IMPL != "dnslb":
        pytest.skip("compares dnslb with dnsdist")
    if not os.access(DNSDIST, os.X_OK):
        pytest.skip("dnsdist is not installed (%s)" % DNSDIST)
    opts = {"maxTTL": 86400, "minTTL": 0, "temporaryFailureTTL": 60, "staleTTL": 60,
            "dontAge": False}
    r1, r2 = make_responder(), make_responder()
    ours = dnslb(cache_conf(r1, opts), name="dnslb")
    try:
        theirs = dnslb(cache_conf(r2, opts), impl="dnsdist", name="dnsdist")
    except Exception as e:          # noqa: BLE001
        pytest.skip("dnsdist cannot be started here: %s" % e)
    return ours, r1, theirs, r2


def _strip(msg):
    """A Message's content without the ID and the TTLs."""
    def sec(s):
        return sorted((str(rr.name).lower(), rr.rdtype, sorted(r.to_text() for r in rr))
                      for rr in s)
    return (msg.flags, msg.rcode(), sec(msg.answer), sec(msg.authority), msg.edns)


def test_dnsdist_same_hits_aging_and_negative_caching(cache_pair):
    ours, r1, theirs, r2 = cache_pair
    names = ["www.cmp.test.", "nxdomain-30.cmp.test.", "ttl-30.cmp.test.", "nodata-30.cmp.test."]
    first = {}
    t0 = time.monotonic()
    for d in (ours, theirs):
        for n in names:
            first[d.name, n] = ask(d, n, qid=1)
            ask(d, n.upper(), qid=2)
    for n in names:
        assert backend_count(r1, n) == backend_count(r2, n) == 1, \
            "%s: backend queries dnslb %d, dnsdist %d" % (n, backend_count(r1, n),
                                                         backend_count(r2, n))
        assert _strip(first["dnslb", n]) == _strip(first["dnsdist", n])
    s1, s2 = counters(ours, 4, 4), counters(theirs, 4, 4)
    assert s1["queries"] == s2["queries"] == 8
    sleep_until(t0 + 2.2)
    for n in names[1:]:
        a, b = ask(ours, n, qid=3), ask(theirs, n, qid=3)
        assert _strip(a) == _strip(b)
        ta, tb = first_ttl(a), first_ttl(b)
        assert ta < 30 and tb < 30, "%s: TTL not aged (dnslb %d, dnsdist %d)" % (n, ta, tb)
        # dnsdist ages in whole seconds of wall time: allow one second apart
        assert abs(ta - tb) <= 1, "%s: TTL dnslb %d, dnsdist %d" % (n, ta, tb)
        assert backend_count(r1, n) == backend_count(r2, n) == 1

# ---------------------------------------------------------------------------
# receive batches


@pytest.mark.skipif(IMPL == "dnsdist", reason="setLuaInstructionLimit is dnslb's")
def test_receive_batch_every_verdict(dnslb, responder):
    """Queries that queue up while the worker is busy come back in one
    receive batch, which runs each query up to its cache lookup, prefetches,
    then finishes them (dnslb/frontend/frontend.c): hits, misses, rule answers, drops
    and malformed datagrams in one batch each get what they would alone,
    and each answer is in the response ring (the ring's bookkeeping of the
    query being answered is the query's own, not the worker's)."""
    stall = ('function(dq) local x = 0 for i = 1, 20000000 do x = x + i end '
             'return DNSAction.None end')
    d = dnslb(console_head() + cache_conf(responder, extra=(
        "setWorkerThreads(1)\nsetLuaInstructionLimit(0)\n"
        'addAction("stall.batch.test.", LuaAction(%s))\n' % stall +
        'addAction("spoof.batch.test.", SpoofAction("192.0.2.77"))\n'
        'addAction("refused.batch.test.", RCodeAction(DNSRCode.REFUSED))\n'
        'addAction("drop.batch.test.", DropAction())\n')))
    hits = ["hit%d.batch.test." % i for i in range(8)]
    for n in hits:
        ask(d, n)
    counters(d, hits=0, misses=8)
    burst = {}                      # qid -> (kind, name)
    qid = 100
    for kind, names in (("hit", hits), ("miss", ["miss%d.batch.test." % i for i in range(8)]),
                        ("spoof", ["spoof.batch.test."] * 4),
                        ("refused", ["refused.batch.test."] * 4),
                        ("drop", ["drop.batch.test."] * 4)):
        for n in names:
            burst[qid] = (kind, n)
            qid += 1
    with UdpClient(d.port) as c:
        c.send(build_query("stall.batch.test.", qid=1))   # the worker spins in Lua...
        malformed = 0
        for i, (q, (kind, n)) in enumerate(burst.items()):
            c.send(build_query(n, qid=q))
            if i % 8 == 7:
                c.send(b"\x12\x34\x01")     # malformed: dropped, counted
                malformed += 1
        got = c.collect(3.0)        # ... while these queue up for one receive batch
    by_id = {}
    for wire in got:
        h = Header(wire)
        assert h.id not in by_id, "two answers for ID %d" % h.id
        by_id[h.id] = wire
    assert 1 in by_id, "the stalled query was not answered"
    for q, (kind, n) in burst.items():
        wire = by_id.get(q)
        if kind == "drop":
            assert wire is None, "a dropped query was answered"
            continue
        assert wire is not None, "no answer to %s query %s (ID %d)" % (kind, n, q)
        assert question_bytes(wire) == encode_name(n) + b"\x00\x01\x00\x01"
        h = Header(wire)
        if kind == "refused":
            assert h.rcode == dns.rcode.REFUSED
        elif kind == "spoof":
            assert h.rcode == 0 and a_addrs(wire) == ["192.0.2.77"]
        else:
            assert h.rcode == 0 and a_addrs(wire) == ["192.0.2.1"], (kind, n)
    assert len(by_id) == 1 + 8 + 8 + 4 + 4
    # the hits never reached the backend again; each miss reached it once
    for n in hits:
        assert backend_count(responder, n) == 1, n
    for i in range(8):
        assert backend_count(responder, "miss%d.batch.test." % i) == 1
    s = counters(d, hits=8, misses=8 + 8 + 1)   # the stalled query was a miss too
    assert s["noncompliant-queries"] == malformed == 3
    assert s["rule-drop"] == 4
    # one response ring entry per answer: the warm-up's 8, then the burst's
    out = console(d, 'for _, e in ipairs(getResponseRing()) do print(e.name .. " " .. e.rcode) end')
    seen = {}
    for line in out.split("\n"):
        if line.strip():
            name, rcode = line.rsplit(" ", 1)
            k = (name.rstrip(".") + ".", int(rcode))
            seen[k] = seen.get(k, 0) + 1
    want = {("stall.batch.test.", 0): 1, ("spoof.batch.test.", 0): 4,
            ("refused.batch.test.", dns.rcode.REFUSED): 4}
    for n in hits:
        want[(n, 0)] = 2
    for i in range(8):
        want[("miss%d.batch.test." % i, 0)] = 1
    assert seen == want, "response ring: %s" % sorted(seen.items())
