"""Redis-backed lookup rules (docs/fleet.md "Redis-backed lookup rules"):
two dnslb nodes mirror the same Redis set and hash (newRedisKVStore) and
route with KeyValueStoreLookupRule / KeyValueStoreLookupAction; changes in
Redis reach both nodes through keyspace notifications within a second;
with Redis stopped the nodes keep their last mirror and keep answering,
and a restarted Redis is mirrored again."""

import re
import signal
import time

import pytest

from dnslbtest import console, console_head, lua_server, udp_query, wait_until
from redisfix import Redis

pytestmark = pytest.mark.dnslb_only("dnslb's Redis-backed key-value stores")

REFUSED, NXDOMAIN, NOERROR = 5, 3, 0


@pytest.fixture
def redis(tmp_path):
    r = Redis(str(tmp_path)).start()
    yield r
    r.stop()


def conf(redis, responder, node, refresh=60):
    return console_head() + """
setRedis({address="%(addr)s", namespace="t", node="%(node)s"})
blocked = newRedisKVStore({name="blocked", key="kvs:blocked", refresh=%(refresh)s})
routes = newRedisKVStore({name="routes", type="hash", key="kvs:routes", refresh=%(refresh)s})
clients = newRedisKVStore({name="clients", key="kvs:clients", channel="kvs-changed",
                           keyspace=false, refresh=%(refresh)s})
addAction(KeyValueStoreLookupRule(blocked, KeyValueLookupKeySuffix()),
          RCodeAction(DNSRCode.REFUSED))
addAction("lua.test.", LuaAction(function(dq)
  -- a store read from a rule, in the worker's own Lua state
  if routes:lookup(dq.qname) == "lua" then return DNSAction.Spoof, "192.0.2.77" end
  return DNSAction.None
end))
addAction(KeyValueStoreLookupRule(clients, KeyValueLookupKeySourceIP(8)),
          RCodeAction(DNSRCode.NXDOMAIN))
addAction(AllRule(), KeyValueStoreLookupAction(routes, KeyValueLookupKeyQName(), "route"))
addAction(TagRule("route", "spoof"), SpoofAction("192.0.2.99"))
""" % {"addr": redis.address, "node": node, "refresh": refresh} + lua_server(responder, name="b")


def rcode(d, name):
    r = udp_query(d.port, name)
    return None if r is None else r.rcode()


def address(d, name):
    r = udp_query(d.port, name)
    if r is None or not r.answer:
        return None
    return r.answer[0][0].address


def stats(d):
    """{name: value} from dumpStats()."""
    toks = console(d, "dumpStats()").split()
    return {k: int(float(v)) for k, v in zip(toks[0::2], toks[1::2])}


def entries(d, store):
    out = console(d, "print(%s:getStats().entries)" % store).strip()
    return int(out) if out.isdigit() else -1


def mirrored(nodes, store, n):
    return all(entries(d, store) == n for d in nodes)


def until_both(nodes, pred, timeout):
    """Seconds until pred(node) held on every node (None: not within timeout)."""
    t0 = time.monotonic()
    pending = list(nodes)
    while pending and time.monotonic() - t0 < timeout:
        pending = [d for d in pending if not pred(d)]
        if pending:
            time.sleep(0.02)
    return None if pending else time.monotonic() - t0


@pytest.fixture
def nodes(dnslb, responder, redis):
    a = dnslb(conf(redis, responder, "node-a"), args=("--workers", "2"))
    b = dnslb(conf(redis, responder, "node-b"), args=("--workers", "2"))
    # the first mirrors (empty keys) are done once "refreshes" moves on both
    assert wait_until(lambda: all(stats(d)["kvs-refreshes"] >= 3 for d in (a, b)), 10)
    return a, b


def test_set_changes_routing_on_both_nodes(nodes, redis):
    a, b = nodes
    assert rcode(a, "www.bad.test.") == NOERROR and rcode(b, "www.bad.test.") == NOERROR

    redis.command("SADD", "kvs:blocked", "bad.test.")
    took = until_both(nodes, lambda d: rcode(d, "www.bad.test.") == REFUSED, 3)
    assert took is not None and took < 1.0, took
    print("SADD -> both nodes refuse: %.0f ms" % (took * 1000))
    assert rcode(a, "bad.test.") == REFUSED          # the suffix itself
    assert rcode(b, "notbad.test.") == NOERROR       # another name

    redis.command("SREM", "kvs:blocked", "bad.test.")
    took = until_both(nodes, lambda d: rcode(d, "www.bad.test.") == NOERROR, 3)
    assert took is not None and took < 1.0, took

    # bulk changes, deleting the key
    redis.command("SADD", "kvs:blocked", *["n%d.test." % i for i in range(5000)])
    assert wait_until(lambda: mirrored(nodes, "blocked", 5000), 3)
    assert rcode(b, "x.n4999.test.") == REFUSED
    redis.command("DEL", "kvs:blocked")
    assert wait_until(lambda: mirrored(nodes, "blocked", 0), 3)
    assert rcode(b, "x.n4999.test.") == NOERROR

    s = stats(a)
    assert s["kvs-lookups"] > 0 and s["kvs-hits"] > 0 and s["kvs-refresh-errors"] == 0
    out = console(a, "showKVStores()")
    assert re.search(r"^blocked\s+set\s+kvs:blocked\s+0\s", out, re.M), out
    assert "routes" in out and "clients" in out


def test_hash_value_becomes_a_tag(nodes, redis):
    a, b = nodes
    assert address(a, "www.spoof.test.") == "192.0.2.1"
    redis.command("HSET", "kvs:routes", "www.spoof.test.", "spoof")
    took = until_both(nodes, lambda d: address(d, "www.spoof.test.") == "192.0.2.99", 3)
    assert took is not None and took < 1.0, took
    assert address(b, "other.spoof.test.") == "192.0.2.1"    # exact qname only
    redis.command("HSET", "kvs:routes", "www.spoof.test.", "something-else")
    assert until_both(nodes, lambda d: address(d, "www.spoof.test.") == "192.0.2.1", 3)
    assert console(a, "print(routes:lookup(newDNSName('WWW.Spoof.Test')))").strip() == \
        "something-else"
    assert console(a, "print(routes:lookup('www.spoof.test.'))").strip() == "something-else"

    # kvs:lookup() from a LuaAction, on the workers
    assert address(a, "x.lua.test.") == "192.0.2.1"
    redis.command("HSET", "kvs:routes", "x.lua.test.", "lua")
    assert until_both(nodes, lambda d: address(d, "x.lua.test.") == "192.0.2.77", 3)


def test_client_ip_keys_and_explicit_channel(nodes, redis):
    a, b = nodes
    # the store listens to its channel only (keyspace=false): a change alone is not seen...
    redis.command("SADD", "kvs:clients", "127.0.0.0")
    time.sleep(0.5)
    assert rcode(a, "www.ip.test.") == NOERROR
    # ...until a message on the channel asks for a mirror
    redis.command("PUBLISH", "kvs-changed", "1")
    took = until_both(nodes, lambda d: rcode(d, "www.ip.test.") == NXDOMAIN, 3)
    assert took is not None and took < 1.0, took
    redis.command("SREM", "kvs:clients", "127.0.0.0")
    redis.command("PUBLISH", "kvs-changed", "1")
    assert until_both(nodes, lambda d: rcode(d, "www.ip.test.") == NOERROR, 3)


def test_redis_down_keeps_the_mirror_then_resyncs(dnslb, responder, redis):
    nodes = [dnslb(conf(redis, responder, n, refresh=1), args=("--workers", "2"))
             for n in ("node-a", "node-b")]
    redis.command("SADD", "kvs:blocked", "old.test.")
    assert until_both(nodes, lambda d: rcode(d, "www.old.test.") == REFUSED, 3)

    redis.stop()
    time.sleep(2.5)                  # two periodic refreshes fail on each node
    for d in nodes:
        assert rcode(d, "www.old.test.") == REFUSED      # the last mirror holds
        assert rcode(d, "www.fine.test.") == NOERROR     # and DNS goes on
        s = stats(d)
        assert s["kvs-refresh-errors"] >= 1 and s["kvs-entries"] == 1, s
    err = console(nodes[0], "print(blocked:getStats().lastError)").strip()
    assert "not connected" in err or "no reply" in err, err

    redis.start()                    # same port, empty (no persistence)
    redis.command("SADD", "kvs:blocked", "new.test.")
    took = until_both(nodes, lambda d: rcode(d, "www.new.test.") == REFUSED, 10)
    assert took is not None, "the nodes did not mirror the restarted Redis"
    for d in nodes:
        assert rcode(d, "www.old.test.") == NOERROR       # gone with the old Redis
        assert entries(d, "blocked") == 1


def test_reload_keeps_the_mirror(dnslb, responder, redis):
    """A reload that creates the same store again gets the running one with its
    mirror (nothing downloaded again); a store with another key is new."""
    d = dnslb(conf(redis, responder, "node-a"), args=("--workers", "2"))
    redis.command("SADD", "kvs:blocked", *["r%d.test." % i for i in range(20000)])
    assert wait_until(lambda: entries(d, "blocked") == 20000, 5)
    before = int(console(d, "print(blocked:getStats().refreshes)").strip())

    # the same stores, and one more rule on another key
    body = d.body + ('other = newRedisKVStore({name="other", key="kvs:other"})\n'
                     'addAction(KeyValueStoreLookupRule(other, KeyValueLookupKeyQName()), '
                     'DropAction())\n')
    d.body = body
    with open(d.conf_path, "w") as f:
        f.write(d.render_conf())
    start = len(d.lines)
    d.send_signal(signal.SIGHUP)
    assert d.wait_line(r"Reloaded '", start=start, timeout=10) is not None, d.output()

    assert entries(d, "blocked") == 20000           # at once: the mirror was kept
    assert int(console(d, "print(blocked:getStats().refreshes)").strip()) == before
    assert rcode(d, "x.r19999.test.") == REFUSED
    redis.command("SADD", "kvs:other", "gone.test.")
    assert wait_until(lambda: udp_query(d.port, "gone.test.", timeout=0.3) is None, 3)
    out = console(d, "showKVStores()")
    assert re.search(r"^other\s+set\s+kvs:other\s+1\s", out, re.M), out
