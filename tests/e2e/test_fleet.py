"""Fleet state through Redis (docs/fleet.md), against a real redis-server
on 127.0.0.1: the connections (one per worker, control, pub/sub), their
counters, Redis going away and coming back while DNS keeps being answered
from local state, and the settings' errors."""

import re
import subprocess
import time

import pytest

from dnslbtest import (console, console_head, dnslb_bin, free_port, lua_server, udp_query,
                       wait_until)
from redisfix import Redis

pytestmark = pytest.mark.dnslb_only("dnslb's Redis fleet state")


@pytest.fixture
def redis(tmp_path):
    r = Redis(str(tmp_path)).start()
    yield r
    r.stop()


def redis_conf(redis, extra=""):
    return 'setRedis({address="%s", namespace="t", node="node-a"})\n%s' % (redis.address, extra)


def connections(d):
    """{role: (state, commands, errors, timeouts, reconnects)} from showRedis()."""
    out = {}
    for l in console(d, "showRedis()").splitlines():
        m = re.match(r"^(worker \d+|control|pubsub)\s+(up|down)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)",
                     l)
        if m:
            out[m.group(1)] = (m.group(2),) + tuple(int(x) for x in m.group(3, 4, 5, 6))
    return out


def metric(d, name):
    """A metric from dumpStats() (name value pairs, two columns)."""
    toks = console(d, "dumpStats()").split()
    vals = dict(zip(toks[0::2], toks[1::2]))
    return int(float(vals[name]))


def all_up(d, n_workers=2):
    c = connections(d)
    return len(c) == n_workers + 2 and all(v[0] == "up" for v in c.values())


def test_connections_and_redis_going_away(dnslb, responder, redis):
    d = dnslb(console_head() + redis_conf(redis) + lua_server(responder, name="b"),
              args=("--workers", "2"))
    assert wait_until(lambda: all_up(d), 5), console(d, "showRedis()")
    out = console(d, "showRedis()")
    assert 'Redis at 127.0.0.1:%d, db 0, namespace "t", node "node-a"' % redis.port in out
    assert metric(d, "redis-connections-up") == 4

    redis.stop()
    assert wait_until(lambda: not any(v[0] == "up" for v in connections(d).values()), 5)
    # DNS goes on from local state
    for i in range(5):
        r = udp_query(d.port, "down%d.fleet.test." % i)
        assert r is not None and r.rcode() == 0
    time.sleep(1.0)
    assert metric(d, "redis-connections-up") == 0
    assert metric(d, "redis-reconnects") >= 1 and metric(d, "redis-errors") >= 1

    redis.start()       # same port: the connections come back on their own
    assert wait_until(lambda: all_up(d), 10), console(d, "showRedis()")


def test_auth_and_db(dnslb, responder, tmp_path):
    r = Redis(str(tmp_path))
    r.start()
    try:
        r.command("CONFIG", "SET", "requirepass", "s3cret")
        conf = (console_head() +
                'setRedis({address="%s", password="s3cret", db=3})\n' % r.address +
                lua_server(responder, name="b"))
        d = dnslb(conf, args=("--workers", "1"))
        assert wait_until(lambda: all_up(d, 1), 5)
        time.sleep(0.3)
        assert metric(d, "redis-errors") == 0       # AUTH and SELECT were accepted
    finally:
        r.stop()


@pytest.mark.parametrize("arg, err", [
    ('{address="127.0.0.1:6379", nosuch=1}', "unknown option 'nosuch'"),
    ('"not an address"', "invalid address"),
    ('{address="127.0.0.1", db=-1}', "out of range"),
    ('{address="127.0.0.1", commandTimeout="x"}', "must be a number"),
    ('{address="127.0.0.1", namespace=""}', "'namespace' must be a non-empty word"),
])
def test_bad_settings(tmp_path, arg, err):
    conf = tmp_path / "bad.conf"
    conf.write_text('setLocal("127.0.0.1:%d")\nsetRedis(%s)\n' % (free_port(), arg))
    r = subprocess.run([dnslb_bin(), "-C", str(conf), "--check-config"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0
    assert err in r.stdout + r.stderr, r.stdout + r.stderr
    assert "%s:2:" % conf in r.stdout + r.stderr


def test_runtime_set_redis_refused(dnslb, responder, redis):
    d = dnslb(console_head() + lua_server(responder, name="b"))
    out = console(d, 'setRedis("%s")' % redis.address)
    assert "cannot be altered at runtime" in out
    assert "not configured" in console(d, "showRedis()")
