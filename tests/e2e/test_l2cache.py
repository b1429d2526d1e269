"""The second-level packet cache in Redis (docs/fleet.md, dnslb/pipeline/l2cache.h),
with a real redis-server on 127.0.0.1 and two dnslb nodes sharing one
namespace: a name resolved through node A is served by node B from Redis
(the backend sees one query), aged, with B's client's ID and qname case, over
UDP and TCP; Redis paused (SIGSTOP) or stopped: queries still answered by the
backend, counted; values that are corrupted or belong to another question are
refused and counted, never served."""

import re
import time

import dns.flags
import dns.message
import pytest

from dnslbtest import (UdpClient, a_addrs, console, console_head, lua_server, lua_value, parse,
                       tcp_query, udp_query, wait_until)
from redisfix import Redis

pytestmark = pytest.mark.dnslb_only("dnslb's second-level cache in Redis")

NS = "l2t"
SURE = {"l2Budget": 0.5}   # tests about answers, not the budget: sanitizer builds are slow


@pytest.fixture
def redis(tmp_path):
    r = Redis(str(tmp_path)).start()
    yield r
    r.stop()


def l2_conf(redis, responder, node, opts=None, extra=""):
    o = {"l2": True}
    o.update(opts or {})
    return (console_head()
            + 'setRedis({address="%s", namespace="%s", node="%s"})\n' % (redis.address, NS, node)
            + lua_server(responder, name="b") + "setUDPTimeout(1)\n"
            + "pc = newPacketCache(10000, %s)\n" % lua_value(o)
            + 'getPool(""):setCache(pc)\n' + extra)


def metrics(d):
    toks = console(d, "dumpStats()").split()
    return {k: int(float(v)) for k, v in zip(toks[0::2], toks[1::2])}


def connected(d, workers=2):
    return metrics(d).get("redis-connections-up", 0) == workers + 2


def node(dnslb, redis, responder, name, opts=None, extra=""):
    d = dnslb(l2_conf(redis, responder, name, opts, extra), args=("--workers", "2"), name=name)
    assert wait_until(lambda: connected(d), 10), console(d, "showRedis()")
    return d


def l2_keys(redis):
    return redis.command("KEYS", NS + ":pc:*")


def query(d, name, qid, tcp=False):
    q = dns.message.make_query(name, "A", use_edns=0, payload=1232)
    q.id = qid
    r = (tcp_query if tcp else udp_query)(d.port, q)
    assert r is not None, "no answer to %s from %s" % (name, d.name)
    return r


def test_hit_on_other_node(dnslb, responder, redis):
    a = node(dnslb, redis, responder, "node-a", SURE)
    b = node(dnslb, redis, responder, "node-b", SURE)
    for tcp, name in ((False, "ttl-300.shared.l2.test."), (True, "ttl-300.tcp.l2.test.")):
        r = query(a, name, 0x1111, tcp)
        assert a_addrs(r) == ["192.0.2.1"] and r.answer[0].ttl == 300
        assert wait_until(lambda: len(l2_keys(redis)) >= (2 if tcp else 1), 5), l2_keys(redis)
        ttl = int(redis.command("TTL", l2_keys(redis)[0]))
        assert 290 <= ttl <= 300        # EX = the answer's lifetime
        time.sleep(2.2)                 # so that B's answer is visibly aged

        # node B: another ID, another case; answered from Redis
        asked = name.upper().replace("SHARED", "Shared")
        r = query(b, asked, 0x4242, tcp)
        assert r.id == 0x4242
        assert r.question[0].name.to_text() == asked    # the client's own case
        assert a_addrs(r) == ["192.0.2.1"]
        assert 295 <= r.answer[0].ttl <= 298, r.answer[0].ttl   # aged from A's insert
        assert len(responder.queries_for(name)) == 1, responder.queries_for(name)
        # and now a local hit on B, with the same clock
        r2 = query(b, name, 0x4343, tcp)
        assert r2.id == 0x4343 and abs(r2.answer[0].ttl - r.answer[0].ttl) <= 1
        assert len(responder.queries_for(name)) == 1

    mb = metrics(b)
    assert mb["l2-cache-hits"] == 2 and mb["cache-hits"] == 2, mb
    assert mb["l2-cache-timeouts"] == 0 and mb["l2-cache-rejected"] == 0
    assert mb["l2-cache-stores"] == 0      # B forwarded nothing: it wrote nothing
    ma = metrics(a)
    assert ma["l2-cache-misses"] == 2 and ma["l2-cache-stores"] == 2, ma

    # a name nobody asked: a miss on both levels, then the backend
    r = query(b, "fresh.l2.test.", 7)
    assert a_addrs(r) == ["192.0.2.1"]
    assert metrics(b)["l2-cache-misses"] == 1


def test_uncacheable_not_written(dnslb, responder, redis):
    a = node(dnslb, redis, responder, "node-a")
    query(a, "tc.l2.test.", 1)          # TC=1: never cached, never written
    query(a, "ttl-0.l2.test.", 2)       # TTL 0: not cacheable
    query(a, "ttl-60.l2.test.", 3)
    assert wait_until(lambda: len(l2_keys(redis)) == 1, 3)
    time.sleep(0.3)
    assert len(l2_keys(redis)) == 1
    assert metrics(a)["l2-cache-stores"] == 1


def test_redis_paused(dnslb, responder, redis):
    b = node(dnslb, redis, responder, "node-b", {"l2Budget": 0.05})
    redis.pause()
    try:
        with UdpClient(b.port) as c:
            for i in range(5):
                q = dns.message.make_query("slow%d.l2.test." % i, "A")
                t0 = time.monotonic()
                c.send(q.to_wire())
                got = c.recv(2.0)
                dt = time.monotonic() - t0
                assert got is not None and parse(got).id == q.id
                assert dt < 0.9, dt     # the budget (50 ms), then the backend; not Redis
            # the late replies (after resume) must not answer anything again
            q = dns.message.make_query("slow-late.l2.test.", "A")
            c.send(q.to_wire())
            first = c.recv(2.0)
            assert first is not None
    finally:
        redis.resume()
    time.sleep(0.5)
    m = metrics(b)
    assert m["l2-cache-timeouts"] == 6, m
    assert m["l2-cache-hits"] == 0
    for i in range(5):
        assert len(responder.queries_for("slow%d.l2.test." % i)) == 1


def test_redis_paused_no_double_answer(dnslb, responder, redis):
    b = node(dnslb, redis, responder, "node-b", {"l2Budget": 0.2})
    a = node(dnslb, redis, responder, "node-a")
    query(a, "ttl-300.twice.l2.test.", 1)      # now in Redis: a late reply would be a hit
    assert wait_until(lambda: len(l2_keys(redis)) == 1, 5)
    redis.pause()
    with UdpClient(b.port) as c:
        q = dns.message.make_query("ttl-300.twice.l2.test.", "A")
        c.send(q.to_wire())
        time.sleep(0.5)                 # past the budget: forwarded to the backend
        redis.resume()                  # the GET's reply comes now, late
        got = c.collect(1.0)
    assert len(got) == 1, got
    assert parse(got[0]).id == q.id
    m = metrics(b)
    assert m["l2-cache-timeouts"] == 1 and m["l2-cache-hits"] == 0, m
    assert len(responder.queries_for("ttl-300.twice.l2.test.")) == 2


def test_redis_stopped(dnslb, responder, redis):
    b = node(dnslb, redis, responder, "node-b")
    redis.stop()
    assert wait_until(lambda: metrics(b)["redis-connections-up"] == 0, 5)
    for i in range(5):
        r = query(b, "down%d.l2.test." % i, i)
        assert a_addrs(r) == ["192.0.2.1"]
    m = metrics(b)
    assert m["l2-cache-errors"] == 5 and m["l2-cache-hits"] == 0, m
    assert m["l2-cache-store-drops"] == 5
    # a local hit never asks Redis
    query(b, "down0.l2.test.", 9)
    assert metrics(b)["l2-cache-errors"] == 5
    redis.start()       # same port: the connections come back, and so does the L2
    assert wait_until(lambda: connected(b), 10)
    query(b, "back.l2.test.", 10)
    assert wait_until(lambda: len(l2_keys(redis)) == 1, 5)


def test_corrupt_and_foreign_values_refused(dnslb, responder, redis):
    a = node(dnslb, redis, responder, "node-a", SURE)
    b = node(dnslb, redis, responder, "node-b", SURE)
    x, y = "ttl-300.x.l2.test.", "ttl-300.y.l2.test."
    query(a, x, 1)
    assert wait_until(lambda: len(l2_keys(redis)) == 1, 5)
    kx = l2_keys(redis)[0]
    query(a, y, 2)
    assert wait_until(lambda: len(l2_keys(redis)) == 2, 5)
    ky = [k for k in l2_keys(redis) if k != kx][0]

    # y's value under x's key: a collision, or a planted value; never served for x
    redis.command("RENAME", ky, kx)
    r = query(b, x, 3)
    assert r.question[0].name.to_text() == x and a_addrs(r) == ["192.0.2.1"]
    assert len(responder.queries_for(x)) == 2      # B asked the backend
    assert metrics(b)["l2-cache-rejected"] == 1

    # bytes damaged in place (the magic), then a value cut short
    z, w = "ttl-300.z.l2.test.", "ttl-300.w.l2.test."
    for name, damage in ((z, lambda k: redis.command("SETRANGE", k, 0, "XX")),
                         (w, lambda k: redis.command("SET", k, "DL2\x01" + "\x00" * 10))):
        before = set(l2_keys(redis))
        query(a, name, 4)
        assert wait_until(lambda: len(set(l2_keys(redis)) - before) == 1, 5)
        k = (set(l2_keys(redis)) - before).pop()
        damage(k)
        r = query(b, name, 5)
        assert a_addrs(r) == ["192.0.2.1"]
        assert len(responder.queries_for(name)) == 2
    m = metrics(b)
    assert m["l2-cache-rejected"] == 3 and m["l2-cache-hits"] == 0, m


def test_settings(dnslb, responder, redis):
    d = node(dnslb, redis, responder, "node-a",
             {"l2Budget": 0.01, "l2MaxInFlight": 16, "l2Name": "edge"},
             extra='plain = newPacketCache(100)\ngetPool("p"):setCache(plain)\n')
    query(d, "ttl-30.named.l2.test.", 1)
    assert wait_until(lambda: l2_keys(redis), 5)
    assert re.match(r"^%s:pc:edge:[0-9a-f]{16}$" % NS, l2_keys(redis)[0]), l2_keys(redis)
    out = console(d, 'newPacketCache(10, {l2Budget = 5})')
    assert "l2Budget" in out
    # without setRedis, no l2-* figure is shown
    e = dnslb(console_head() + lua_server(responder) +
              'pc = newPacketCache(100, {l2 = true})\ngetPool(""):setCache(pc)\n', name="plain")
    query(e, "ttl-30.noredis.l2.test.", 2)
    assert not any(k.startswith("l2-") for k in metrics(e))
