"""Hashing policies, bounded load, setFailover, lazy health checks and
showServers() (docs/configuration.md, "Server objects" and "Load-balancing
policies").

chashed/whashed: which responder saw which name, checked over 200 names
(sticky, spread, identical after a restart thanks to fixed `id=`s, minimal
remapping when a chashed server goes down). setFailover: the order-1
responder is made silent or SERVFAILing with the responder's
set_answer_mode(), so that the retry target (another responder) still
answers the same name normally. Lazy health checks: the backend fails real
traffic, is marked down by the traffic alone, and comes back through its
probes.

No timing assertions: every wait is an upper bound.
"""

import os
import re
import shutil
import subprocess
import tempfile

import pytest

from dnslbtest import (DNSDIST, IMPL, UdpClient, a_addrs, dnslb_bin, lua_server, make_query,
                       parse, udp_query, wait_until)

pytestmark = pytest.mark.dnslb_only("setFailover, chashed, lazy checks: dnslb / dnsdist 1.8")

IDS = ["11111111-1111-4111-8111-111111111111",
       "22222222-2222-4222-8222-222222222222",
       "33333333-3333-4333-8333-333333333333"]
NAMES = ["host%03d.hash.test." % i for i in range(200)]


def marking(name, state):
    return r"Marking downstream %s \(.*\) as '%s'" % (re.escape(name), state)


def ask_each(port, names, times=2, timeout=2.0):
    """Query every name @times times, one at a time; return the names that
    got no NOERROR answer."""
    bad = []
    with UdpClient(port) as c:
        for n in names:
            for _ in range(times):
                q = make_query(n)
                c.send(q.to_wire())
                while True:
                    d = c.recv(timeout)
                    if d is None:
                        bad.append(n)
                        break
                    m = parse(d)
                    if m.id == q.id:
                        if m.rcode() != 0:
                            bad.append(n)
                        break
    return bad


def mapping(responders, names):
    """{name: index of the responder that saw it}; asserts every name was
    seen by exactly one responder (all its queries)."""
    seen = {}
    for i, r in enumerate(responders):
        for q in r.client_queries():
            seen.setdefault(q.qname.lower(), []).append(i)
    out = {}
    for n in names:
        who = seen.get(n.lower(), [])
        assert who and len(set(who)) == 1, "%s seen by responders %s" % (n, who)
        out[n] = who[0]
    return out


def hash_conf(responders, policy, extra="", modes=None):
    conf = "setServerPolicy(%s)\n%s" % (policy, extra)
    for i, r in enumerate(responders):
        conf += lua_server(r, name="b%d" % (i + 1), id=IDS[i], weight=100,
                           healthCheckMode=(modes or {}).get(i, "up"))
    return conf


def run_mapping(dnslb, responders, conf, names=NAMES):
    for r in responders:
        r.clear()
    d = dnslb(conf)
    assert ask_each(d.port, names) == []
    m = mapping(responders, names)
    for r in responders:
        # both queries of a name went to the same backend
        per = {}
        for q in r.client_queries():
            per[q.qname.lower()] = per.get(q.qname.lower(), 0) + 1
        assert set(per.values()) <= {2}, per
    assert d.stop() == 0
    return m


# ---- chashed / whashed ------------------------------------------------------

def test_chashed_sticky_spread_stable_minimal_remap(dnslb, make_responder):
    rs = [make_responder() for _ in range(3)]
    conf = hash_conf(rs, "chashed")
    first = run_mapping(dnslb, rs, conf)
    counts = [list(first.values()).count(i) for i in range(3)]
    assert all(c > len(NAMES) // 10 for c in counts), counts

    # restart with the same config: the ring is placed by the fixed ids
    again = run_mapping(dnslb, rs, conf)
    assert again == first

    # b3 forced down: only its names move
    down = run_mapping(dnslb, rs, hash_conf(rs, "chashed", modes={2: "down"}))
    for n in NAMES:
        if first[n] != 2:
            assert down[n] == first[n], "%s moved from b%d to b%d" % (n, first[n] + 1,
                                                                       down[n] + 1)
        else:
            assert down[n] in (0, 1)
    assert rs[2].client_queries() == []


def test_chashed_dead_backend_remaps_minimally(dnslb, make_responder):
    """The same with a responder that stops answering its health checks:
    once it is marked down only its names move."""
    rs = [make_responder() for _ in range(3)]
    names = NAMES[:90]
    conf = "setServerPolicy(chashed)\n"
    for i, r in enumerate(rs):
        conf += lua_server(r, name="b%d" % (i + 1), id=IDS[i], weight=100, checkTimeout=300)
    d = dnslb(conf)
    assert ask_each(d.port, names) == []
    first = mapping(rs, names)
    assert set(first.values()) == {0, 1, 2}
    start = len(d.lines)
    rs[1].set_check_mode("drop")
    assert d.wait_line(marking("b2", "down"), start, 6.0) is not None, d.output()
    for r in rs:
        r.clear()
    assert ask_each(d.port, names) == []
    after = mapping(rs, names)
    for n in names:
        if first[n] != 1:
            assert after[n] == first[n], n
        else:
            assert after[n] in (0, 2)


def test_whashed_stable_across_restarts(dnslb, make_responder):
    rs = [make_responder() for _ in range(3)]
    conf = hash_conf(rs, "whashed", extra="setWHashedPertubation(12345)\n")
    first = run_mapping(dnslb, rs, conf)
    counts = [list(first.values()).count(i) for i in range(3)]
    assert all(c > len(NAMES) // 10 for c in counts), counts
    assert run_mapping(dnslb, rs, conf) == first


# ---- balancing factors ------------------------------------------------------

@pytest.fixture
def short_dir():
    d = tempfile.mkdtemp(prefix="dlf")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def check_config(d, text):
    path = os.path.join(d, "fo.conf")
    with open(path, "w") as f:
        f.write(text)
    exe = DNSDIST if IMPL == "dnsdist" else dnslb_bin()
    r = subprocess.run([exe, "--check-config", "-C", path], capture_output=True, text=True,
                       timeout=20, stdin=subprocess.DEVNULL)
    return path, r.returncode, r.stdout + r.stderr


def test_balancing_factors_accepted(short_dir):
    path, rc, out = check_config(short_dir, 'newServer("127.0.0.1:5399")\n'
                                 'setConsistentHashingBalancingFactor(1.5)\n'
                                 'setWeightedBalancingFactor(1.5)\n'
                                 'setConsistentHashingBalancingFactor(0)\n')
    assert rc == 0, out
    assert "Configuration '%s' OK!" % path in out


@pytest.mark.parametrize("fn", ["setConsistentHashingBalancingFactor",
                                "setWeightedBalancingFactor"])
def test_balancing_factor_below_one_reported(short_dir, fn):
    """As dnsdist: the message, and the setting stays as it was."""
    path, rc, out = check_config(short_dir, 'newServer("127.0.0.1:5399")\n\n%s(0.5)\n' % fn)
    assert rc == 0, out
    assert out == "Invalid value passed to %s()!\nConfiguration '%s' OK!\n" % (fn, path), out


def test_chashed_balancing_factor_bounds_load(dnslb, make_responder):
    """With setConsistentHashingBalancingFactor(1.5), names of a server with
    too many outstanding queries go to another point of the ring; without,
    they all wait on it."""
    rs = [make_responder() for _ in range(3)]
    names = NAMES[:60]
    base = "setUDPTimeout(2)\nsetWorkerThreads(1)\n"   # the bound is per worker
    m = run_mapping(dnslb, rs, hash_conf(rs, "chashed", extra=base), names)
    on_b1 = [n for n in names if m[n] == 0][:10]
    assert len(on_b1) >= 6, m
    for factor, expect_spread in ((1.5, True), (0, False)):
        for r in rs:
            r.clear()
        rs[0].set_answer_mode("drop")
        extra = base + "setConsistentHashingBalancingFactor(%s)\n" % factor
        d = dnslb(hash_conf(rs, "chashed", extra=extra))
        with UdpClient(d.port) as c:       # one socket: one worker
            for i, n in enumerate(on_b1):
                c.send(make_query(n, qid=i).to_wire())
            got = c.collect(1.0)
        b1 = {q.qname.lower() for q in rs[0].client_queries()}
        if expect_spread:
            # b1 (a third of the weight) may hold at most 1.5 x its share of
            # all outstanding queries: about half of them, never all
            assert 2 <= len(b1) <= len(on_b1) // 2 + 1, b1
            assert len(got) == len(on_b1) - len(b1), got
        else:
            assert len(b1) == len(on_b1) and got == []
        assert d.stop() == 0
        rs[0].set_answer_mode("normal")


# ---- setFailover ------------------------------------------------------------

def failover_conf(rs, failover, timeout=0.5):
    conf = "setServerPolicy(firstAvailable)\nsetUDPTimeout(%s)\n" % timeout
    if failover is not None:
        conf += "setFailover(%s)\n" % failover
    conf += lua_server(rs[0], name="b1", order=1, healthCheckMode="up")
    conf += lua_server(rs[1], name="b2", order=2, healthCheckMode="up")
    if len(rs) > 2:
        conf += lua_server(rs[2], name="b3", order=1, pool="backup", healthCheckMode="up")
    return conf


@pytest.mark.parametrize("on", [True, False], ids=["failover", "none"])
def test_failover_on_timeout(dnslb, make_responder, on):
    rs = [make_responder(), make_responder()]
    rs[0].set_answer_mode("drop")
    d = dnslb(failover_conf(rs, "{onTimeout=true}" if on else None))
    r = udp_query(d.port, "www.fo.test.", timeout=3.0)
    assert len(rs[0].queries_for("www.fo.test")) == 1
    if on:
        assert r is not None and r.rcode() == 0 and a_addrs(r) == ["192.0.2.1"], r
        assert len(rs[1].queries_for("www.fo.test")) == 1
        s = d.wait_stats(lambda s: s["failover-retries"] >= 1)
        assert s["failover-retries"] == 1 and s["downstream-timeouts"] == 0, s
        assert s["backends"]["b1"]["drops"] == 1, s["backends"]
    else:
        assert r is None
        assert rs[1].queries_for("www.fo.test") == []
        s = d.wait_stats(lambda s: s["downstream-timeouts"] >= 1)
        assert s["downstream-timeouts"] == 1 and s["failover-retries"] == 0, s


@pytest.mark.parametrize("on", [True, False], ids=["failover", "none"])
def test_failover_on_servfail(dnslb, make_responder, on):
    rs = [make_responder(), make_responder()]
    rs[0].set_answer_mode("servfail")
    d = dnslb(failover_conf(rs, "{onServFail=true}" if on else None))
    r = udp_query(d.port, "www.fo.test.", timeout=3.0)
    assert r is not None
    assert len(rs[0].queries_for("www.fo.test")) == 1
    s = d.stats()
    if on:
        assert r.rcode() == 0 and a_addrs(r) == ["192.0.2.1"], r
        assert len(rs[1].queries_for("www.fo.test")) == 1
        assert s["failover-retries"] == 1, s
    else:
        assert r.rcode() == 2, r
        assert rs[1].queries_for("www.fo.test") == []
        assert s["failover-retries"] == 0, s


def test_failover_to_other_pool(dnslb, make_responder):
    rs = [make_responder() for _ in range(3)]
    rs[0].set_answer_mode("drop")
    d = dnslb(failover_conf(rs, '{onTimeout=true, pool="backup"}'))
    r = udp_query(d.port, "www.fo.test.", timeout=3.0)
    assert r is not None and r.rcode() == 0 and a_addrs(r) == ["192.0.2.1"], r
    assert len(rs[2].queries_for("www.fo.test")) == 1
    assert rs[1].queries_for("www.fo.test") == []
    s = d.wait_stats(lambda s: s["failover-retries"] >= 1)
    assert s["failover-retries"] == 1 and s["downstream-timeouts"] == 0, s


def test_failover_budget_spent(dnslb, make_responder):
    rs = [make_responder(), make_responder()]
    rs[0].set_answer_mode("drop")
    d = dnslb(failover_conf(rs, "{onTimeout=true, budget=0.3}"))
    assert udp_query(d.port, "www.fo.test.", timeout=2.0) is None
    assert rs[1].queries_for("www.fo.test") == []
    s = d.wait_stats(lambda s: s["downstream-timeouts"] >= 1)
    assert s["downstream-timeouts"] == 1 and s["failover-retries"] == 0, s


# ---- lazy health checks -------------------------------------------------------

def test_lazy_health_check(dnslb, make_responder):
    lazy, other = make_responder(), make_responder()
    conf = "setServerPolicy(firstAvailable)\nsetUDPTimeout(0.5)\n"
    conf += lua_server(lazy, name="lazy", order=1, healthCheckMode="lazy",
                       lazyHealthCheckThreshold=20, lazyHealthCheckMinSampleCount=5,
                       lazyHealthCheckFailedInterval=1, checkInterval=1, checkTimeout=300)
    conf += lua_server(other, name="other", order=2, checkInterval=1, checkTimeout=300)
    d = dnslb(conf)
    assert ask_each(d.port, ["ok%d.lazy.test." % i for i in range(5)], times=1) == []
    assert len(lazy.client_queries()) == 5 and other.client_queries() == []
    # the other backend's periodic checks are the clock: none reach the lazy one
    assert wait_until(lambda: len(other.check_queries()) >= 4, 8.0)
    assert lazy.check_queries() == []

    # real traffic fails: SERVFAIL to everything (the probes fail too)
    start = len(d.lines)
    lazy.set_answer_mode("servfail")
    lazy.set_check_mode("servfail")
    with UdpClient(d.port) as c:
        for i in range(10):
            q = make_query("bad%d.lazy.test." % i)
            c.send(q.to_wire())
            a = c.recv(2.0)
            assert a is not None and parse(a).rcode() == 2
    down = d.wait_line(marking("lazy", "down"), start, 6.0)
    assert down is not None, d.output()
    assert ask_each(d.port, ["moved%d.lazy.test." % i for i in range(5)], times=1) == []
    assert len(other.queries_for("moved")) == 5 and lazy.queries_for("moved") == []
    # probed while down; failing probes keep it down
    assert wait_until(lambda: len(lazy.check_queries("servfail")) >= 1, 6.0)
    assert d.wait_line(marking("lazy", "up"), down, 0) is None

    # it answers again: a probe brings it back
    lazy.set_answer_mode("normal")
    lazy.set_check_mode("answer")
    assert d.wait_line(marking("lazy", "up"), down, 6.0) is not None, d.output()
    assert len(lazy.check_queries("answer")) >= 1
    assert ask_each(d.port, ["back%d.lazy.test." % i for i in range(3)], times=1) == []
    assert len(lazy.queries_for("back")) == 3 and other.queries_for("back") == []


# ---- showServers() ------------------------------------------------------------

HEADER = ["#", "Name", "Address", "State", "Qps", "Qlim", "Ord", "Wt", "Queries", "Drops",
          "Drate", "Lat", "Outstanding", "Pools"]


def test_show_servers_at_load(dnslb, make_responder):
    r1, r2 = make_responder(), make_responder()
    conf = (lua_server(r1, name="s-up", healthCheckMode="up", order=3, weight=7)
            + lua_server(r2, name="s-down", healthCheckMode="down", pool="p1")
            # a console command run by the config prints nothing, as in dnsdist,
            # unless the config's own print() takes it
            + "local p = print\nprint = function(s) p(s) end\nshowServers()\n")
    d = dnslb(conf)
    lines = [l.split() for l in d.lines]
    hi = [i for i, t in enumerate(lines) if t[:1] == ["#"]]
    assert hi, d.output()
    assert lines[hi[0]] == HEADER
    rows = lines[hi[0] + 1:hi[0] + 3]
    # dnsdist's order: sorted by order (s-up has order 3)
    assert rows[1][:8] == ["1", "s-up", r1.address, "UP", "0.0", "0", "3", "7"], rows
    assert rows[0][:8] == ["0", "s-down", r2.address, "DOWN", "0.0", "0", "1", "1"], rows
    assert rows[0][-1] == "p1"
    assert lines[hi[0] + 3][0] == "All"
