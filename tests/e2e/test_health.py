"""Health checks (dnsdist-api.md §1.4) and server-selection policies (§1.5)
with real responder backends.

Health checks: the initial check before serving, down after
maxCheckFailures and up after rise (counting the check queries the
responder saw), mustResolve, checkTCP/tcpOnly, checkName/checkType/
checkClass, setCD, checkInterval, forced states, setServFailWhenNoServer,
a backend killed and restarted, and the log lines next to Debian's dnsdist
1.7.3.

Policies: distribution over three responders, checked statistically (shares
within generous bounds, never exact sequences).

Every config uses checkInterval=1 (the default) and short check timeouts.
The responder's set_check_mode() makes it answer the health-check name with
an error, or not at all, while it keeps answering client queries.
"""

import os
import re
import time

import pytest

from dnslbtest import (DNSDIST, IMPL, UdpClient, console, console_head, free_port, lua_server,
                       make_query, parse, udp_query, wait_until)

FAST = {"checkTimeout": 300}         # a dead check fails quickly


def marking(name, state):
    """Regex for dnsdist's state-change line of backend @name."""
    return r"Marking downstream %s \(.*\) as '%s'" % (re.escape(name), state)


def mark_index(d, name, state, start=0, timeout=6.0):
    return d.wait_line(marking(name, state), start, timeout)


def blast(port, names, batch=20, timeout=2.0):
    """Send queries for @names (unique) in parallel batches of @batch on one
    UDP socket; return {qname: answer Message} for those answered."""
    answers = {}
    with UdpClient(port) as c:
        for i in range(0, len(names), batch):
            ids = {}
            for j, n in enumerate(names[i:i + batch]):
                qid = (i + j) & 0xFFFF
                ids[qid] = n
                c.send(make_query(n, qid=qid).to_wire())
            end = time.monotonic() + timeout
            while ids:
                d = c.recv(end - time.monotonic())
                if d is None:
                    break
                m = parse(d)
                if m.id in ids:
                    answers[ids.pop(m.id)] = m
    return answers


def seen(resp, suffix):
    """Client queries responder @resp saw for names ending in @suffix."""
    return [q for q in resp.client_queries() if q.qname and q.qname.lower().endswith(suffix)]


def serve_names(port, suffix, n, batch=20):
    names = ["q%d.%s" % (i, suffix) for i in range(n)]
    return names, blast(port, names, batch)


def line_index(d, pattern):
    rx = re.compile(pattern)
    with d._cond:
        for i, l in enumerate(d.lines):
            if rx.search(l):
                return i
    return None

# ---------------------------------------------------------------------------
# health checks


def test_initial_check_marks_dead_backend_down(dnslb, responder):
    """A backend with nothing listening is down before the first query:
    every query is answered, by the live backend."""
    dead = "127.0.0.1:%d" % free_port()
    d = dnslb(lua_server(dead, name="dead", **FAST) + lua_server(responder, name="live")
              + "setUDPTimeout(0.5)\n")
    i = line_index(d, marking("dead", "down"))
    assert i is not None, "no 'Marking downstream dead (...) as 'down'' line"
    if IMPL == "dnslb":
        ready = line_index(d, r"running")
        assert ready is not None and i < ready, "marked down only after serving started"
    assert line_index(d, marking("live", "down")) is None
    names, ans = serve_names(d.port, "initial.test.", 40)
    assert len(ans) == 40, "%d of 40 answered: some went to the dead backend" % len(ans)
    assert len(seen(responder, "initial.test.")) == 40


def test_down_after_max_check_failures_and_up_after_rise(dnslb, make_responder):
    r1, r2 = make_responder(), make_responder()
    d = dnslb(lua_server(r1, name="b1", maxCheckFailures=3, rise=2, **FAST)
              + lua_server(r2, name="b2", **FAST)
              + "setServerPolicy(roundrobin)\nsetUDPTimeout(0.5)\n")
    names, ans = serve_names(d.port, "before.test.", 30)
    assert len(ans) == 30
    assert len(seen(r1, "before.test.")) > 0, "b1 got no traffic while up"

    # b1 stops answering the checks (client queries are still answered)
    start = len(d.lines)
    r1.set_check_mode("drop")
    i = mark_index(d, "b1", "down", start, timeout=8)
    assert i is not None, "b1 not marked down after it stopped answering checks"
    failed = len(r1.check_queries("drop"))
    assert 3 <= failed <= 4, "marked down after %d unanswered checks (maxCheckFailures=3)" % failed
    names, ans = serve_names(d.port, "during.test.", 30)
    assert len(ans) == 30
    assert len(seen(r1, "during.test.")) == 0, "a down backend still got traffic"
    assert len(seen(r2, "during.test.")) == 30

    # answers again: up after rise=2 good checks
    start = len(d.lines)
    r1.set_check_mode("answer")
    i = mark_index(d, "b1", "up", start, timeout=8)
    assert i is not None, "b1 not marked up again"
    last_drop = r1.check_queries("drop")[-1].time
    good = len([q for q in r1.check_queries("answer") if q.time > last_drop])
    assert 2 <= good <= 3, "marked up after %d good checks (rise=2)" % good
    names, ans = serve_names(d.port, "after.test.", 30)
    assert len(ans) == 30
    assert len(seen(r1, "after.test.")) > 0, "b1 got no traffic after coming back up"


@pytest.mark.parametrize("mode,b1_down,b2_down", [
    ("nxdomain", True, False), ("refused", True, False), ("servfail", True, True)])
def test_must_resolve(dnslb, make_responder, mode, b1_down, b2_down):
    """NXDOMAIN and REFUSED fail a check only with mustResolve; SERVFAIL
    always does."""
    r1, r2 = make_responder(), make_responder()
    r1.set_check_mode(mode)
    r2.set_check_mode(mode)
    d = dnslb(lua_server(r1, name="b1", mustResolve=True, **FAST)
              + lua_server(r2, name="b2", **FAST) + "setUDPTimeout(0.5)\n")
    assert (mark_index(d, "b1", "down", timeout=3) is not None) == b1_down
    if b2_down:
        assert mark_index(d, "b2", "down", timeout=3) is not None
    else:
        assert line_index(d, marking("b2", "down")) is None
    assert len(r1.check_queries(mode)) >= 1 and len(r2.check_queries(mode)) >= 1
    if not b2_down:
        names, ans = serve_names(d.port, "mr.test.", 20)
        assert len(ans) == 20
        assert len(seen(r1, "mr.test.")) == 0
        assert len(seen(r2, "mr.test.")) == 20


@pytest.mark.parametrize("key", ["checkTCP", "tcpOnly", None])
def test_check_transport(dnslb, responder, key):
    opts = dict(FAST)
    if key:
        opts[key] = True
    d = dnslb(lua_server(responder, name="b1", **opts))
    wait_until(lambda: len(responder.check_queries()) >= 2, 4)
    checks = responder.check_queries()
    assert len(checks) >= 2
    want = "tcp" if key else "udp"
    assert {q.transport for q in checks} == {want}
    assert line_index(d, marking("b1", "down")) is None
    assert udp_query(d.port, "www.transport.test.") is not None


def test_custom_check_name_type_class(dnslb, responder):
    responder.set_check_mode("answer", names=["health.example.test."])
    d = dnslb(lua_server(responder, name="b1", checkName="Health.Example.Test.",
                         checkType="AAAA", checkClass=3, **FAST))
    wait_until(lambda: len(responder.check_queries()) >= 2, 4)
    checks = responder.check_queries()
    assert len(checks) >= 2
    for q in checks:
        assert q.qname.lower() == "health.example.test."
        assert (q.qtype, q.qclass) == (28, 3)
        assert q.flags & 0x0100, "RD not set on the check query"
        assert not q.flags & 0x8000
        assert q.qdcount == 1
    if len(checks) >= 3:
        assert len({q.id for q in checks}) > 1, "check IDs are not random"
    assert not [q for q in responder.queries if q.qname == "a.root-servers.net."]
    assert line_index(d, marking("b1", "down")) is None
    # the check name answers NXDOMAIN now: fine without mustResolve
    assert udp_query(d.port, "www.custom.test.") is not None


@pytest.mark.parametrize("set_cd", [True, False])
def test_set_cd(dnslb, responder, set_cd):
    opts = dict(FAST)
    if set_cd:
        opts["setCD"] = True
    dnslb(lua_server(responder, name="b1", **opts))
    wait_until(lambda: len(responder.check_queries()) >= 1, 3)
    checks = responder.check_queries()
    assert checks
    for q in checks:
        assert bool(q.flags & 0x0010) == set_cd, "CD bit %s" % ("missing" if set_cd else "set")
        assert q.flags & 0x0100


def test_check_interval_respected(dnslb, responder):
    dnslb(lua_server(responder, name="b1", checkInterval=1, **FAST))
    t0 = time.monotonic()
    time.sleep(3.0)
    t1 = time.monotonic()
    n = len([q for q in responder.check_queries() if t0 <= q.time < t1])
    assert 2 <= n <= 5, "%d checks in ~3 s with checkInterval=1" % n


@pytest.mark.parametrize("how", [
    pytest.param("mode", marks=pytest.mark.dnslb_only("healthCheckMode is 1.8")),
    "setUp"])
def test_forced_states_not_checked(dnslb, make_responder, how):
    r1, r2 = make_responder(), make_responder()
    if how == "mode":
        conf = (lua_server(r1, name="b1", healthCheckMode="up", **FAST)
                + lua_server(r2, name="b2", healthCheckMode="down", **FAST))
    else:
        conf = (lua_server(r1, name="b1", **FAST) + lua_server(r2, name="b2", **FAST)
                + "getServer(0):setUp()\ngetServer(1):setDown()\n")
    # the forced-up one is preferred even though it is checked as failing
    r1.set_check_mode("servfail")
    d = dnslb(conf + "setUDPTimeout(0.5)\n")
    time.sleep(2.5)
    assert r1.check_queries() == [], "a backend forced up was health-checked"
    assert r2.check_queries() == [], "a backend forced down was health-checked"
    names, ans = serve_names(d.port, "forced.test.", 20)
    assert len(ans) == 20
    assert len(seen(r1, "forced.test.")) == 20
    assert len(seen(r2, "forced.test.")) == 0
    assert line_index(d, r"Marking downstream") is None


@pytest.mark.parametrize("servfail", [True, False])
def test_all_down(dnslb, servfail):
    dead = "127.0.0.1:%d" % free_port()
    d = dnslb(lua_server(dead, name="dead", **FAST)
              + ("setServFailWhenNoServer(true)\n" if servfail else "")
              + "setUDPTimeout(0.5)\n")
    assert line_index(d, marking("dead", "down")) is not None
    r = udp_query(d.port, "www.nosrv.test.", timeout=1.5)
    if servfail:
        assert r is not None, "no answer with setServFailWhenNoServer(true)"
        assert r.rcode() == 2
    else:
        assert r is None, "answered %r although no server is up" % r


def test_backend_killed_and_restarted(dnslb, make_responder):
    r1, r2 = make_responder(), make_responder()
    d = dnslb(lua_server(r1, name="b1", **FAST) + lua_server(r2, name="b2", **FAST)
              + "setServerPolicy(roundrobin)\nsetUDPTimeout(0.5)\n")
    names, ans = serve_names(d.port, "k1.test.", 20)
    assert len(ans) == 20 and len(seen(r1, "k1.test.")) > 0

    start = len(d.lines)
    r1.stop()
    assert mark_index(d, "b1", "down", start) is not None, "killed backend not marked down"
    names, ans = serve_names(d.port, "k2.test.", 20)
    assert len(ans) == 20, "%d of 20 answered while b1 is dead" % len(ans)
    assert len(seen(r2, "k2.test.")) == 20

    start = len(d.lines)
    r1.restart()
    assert mark_index(d, "b1", "up", start) is not None, "restarted backend not marked up"
    names, ans = serve_names(d.port, "k3.test.", 30)
    assert len(ans) == 30, "%d of 30 answered after the restart" % len(ans)
    assert len(seen(r1, "k3.test.")) > 0, "no answers from the restarted backend"


@pytest.mark.dnslb_only("dnslb's own verbose line")
def test_verbose_health_checks(dnslb, responder):
    responder.set_check_mode("servfail")
    d = dnslb(lua_server(responder, name="b1", **FAST) + "setVerboseHealthChecks(true)\n")
    assert d.wait_line(r"Health check of b1 \(127\.0\.0\.1:%d\) failed: .*SERVFAIL"
                       % responder.port, 0, 4) is not None

# ---------------------------------------------------------------------------
# side by side with dnsdist 1.7.3


@pytest.fixture
def both(dnslb):
    if IMPL != "dnslb":
        pytest.skip("compares dnslb with dnsdist")
    if not os.access(DNSDIST, os.X_OK):
        pytest.skip("dnsdist is not installed (%s)" % DNSDIST)

    def start(conf):
        ours = dnslb(conf, name="dnslb")
        try:
            theirs = dnslb(conf, impl="dnsdist", name="dnsdist")
        except Exception as e:
            pytest.skip("dnsdist cannot be started here: %s" % e)
        return ours, theirs
    return start


MARKING = re.compile(r"Marking downstream \S+ \([^)]*\) as '[a-z]+'")


def marking_lines(d):
    """The set of 'Marking downstream' messages in d's output.

    Searched for inside each line, not taken as whole lines: dnsdist 1.7.3
    prints "Accepting control connections on ..." without a newline, so the
    health checker's first message can land on the end of that line."""
    with d._cond:
        return {m.group(0) for l in d.lines for m in MARKING.finditer(l)}


def test_initial_check_like_dnsdist(both, responder):
    """A dead backend: both log the same 'down' line at startup and send
    every query to the live one."""
    dead_port = free_port()
    ours, theirs = both(lua_server("127.0.0.1:%d" % dead_port, name="dead", **FAST)
                        + lua_server(responder, name="live", **FAST) + "setUDPTimeout(0.5)\n")
    line = "Marking downstream dead (127.0.0.1:%d) as 'down'" % dead_port
    for d in (ours, theirs):
        assert d.wait_line(re.escape(line), 0, 3) is not None, "%s: no %r" % (d.name, line)
        names, ans = serve_names(d.port, "%s.side.test." % d.name, 20)
        assert len(ans) == 20, "%s answered %d of 20" % (d.name, len(ans))


def test_initial_up_logged_like_dnsdist(both, responder):
    """dnsdist logs the initial check's result for every backend, 'up' too."""
    dead_port = free_port()
    ours, theirs = both(lua_server("127.0.0.1:%d" % dead_port, name="dead", **FAST)
                        + lua_server(responder, name="live", **FAST))
    time.sleep(1.5)
    assert "Marking downstream live (%s) as 'up'" % responder.address in marking_lines(theirs)
    assert marking_lines(ours) == marking_lines(theirs)


def test_unnamed_backend_log_line_like_dnsdist(both):
    """Without name=, dnsdist's line names the backend by its address only."""
    dead_port = free_port()
    ours, theirs = both(lua_server("127.0.0.1:%d" % dead_port, **FAST))
    line = "Marking downstream 127.0.0.1:%d as 'down'" % dead_port
    assert theirs.wait_line(re.escape(line), 0, 3) is not None
    assert ours.wait_line(re.escape(line), 0, 3) is not None, \
        "dnslb's lines: %r" % sorted(marking_lines(ours))

# ---------------------------------------------------------------------------
# policies


def three(make_responder):
    return [make_responder() for _ in range(3)]


def shares(resps, suffix):
    return [len(seen(r, suffix)) for r in resps]


def test_least_outstanding_spreads(dnslb, make_responder):
    """Equally fast backends share parallel traffic. Every answer takes
    20 ms (delay-20): answered at once, the responders (threads of this
    process) would answer each query before the next is sent, every
    outstanding count would be 0, and the tie-break (lowest latency) would
    rightly send nearly everything to one backend."""
    rs = three(make_responder)
    d = dnslb("".join(lua_server(r, name="b%d" % i) for i, r in enumerate(rs)))
    ans = blast(d.port, ["delay-20.q%d.lo.test." % i for i in range(600)], batch=30)
    assert len(ans) >= 590
    counts = shares(rs, "lo.test.")
    assert sum(counts) >= 590
    assert all(c > 60 for c in counts), "leastOutstanding distribution %r" % counts


def test_first_available(dnslb, make_responder):
    rs = three(make_responder)
    workers = "setWorkerThreads(1)\n" if IMPL == "dnslb" else ""
    d = dnslb(lua_server(rs[0], name="b0", order=1, qps=20)
              + lua_server(rs[1], name="b1", order=2)
              + lua_server(rs[2], name="b2", order=3)
              + "setServerPolicy(firstAvailable)\n" + workers)
    # well under the limit: everything to the lowest order
    for i in range(10):
        assert udp_query(d.port, "s%d.fa.test." % i) is not None
    assert shares(rs, "fa.test.") == [10, 0, 0]
    # far over the limit: the rest spills to the others
    names, ans = serve_names(d.port, "burst.fa.test.", 300, batch=30)
    assert len(ans) >= 295
    c = shares(rs, "burst.fa.test.")
    assert c[1] + c[2] > 0.2 * sum(c), "nothing spilled over the qps limit: %r" % c
    assert c[0] > 0


def test_first_available_no_limit(dnslb, make_responder):
    rs = three(make_responder)
    d = dnslb(lua_server(rs[0], name="b0", order=3) + lua_server(rs[1], name="b1", order=1)
              + lua_server(rs[2], name="b2", order=2) + "setServerPolicy(firstAvailable)\n")
    names, ans = serve_names(d.port, "fa2.test.", 200, batch=30)
    assert len(ans) >= 195
    c = shares(rs, "fa2.test.")
    assert c == [0, sum(c), 0], "firstAvailable without a qps limit: %r" % c


def test_roundrobin_thirds(dnslb, make_responder):
    rs = three(make_responder)
    d = dnslb("".join(lua_server(r, name="b%d" % i) for i, r in enumerate(rs))
              + "setServerPolicy(roundrobin)\n")
    names, ans = serve_names(d.port, "rr.test.", 300)
    assert len(ans) >= 295
    counts = shares(rs, "rr.test.")
    total = sum(counts)
    assert all(0.25 * total <= c <= 0.42 * total for c in counts), \
        "roundrobin distribution %r" % counts


def test_wrandom_weights(dnslb, make_responder):
    light, heavy = make_responder(), make_responder()
    d = dnslb(lua_server(light, name="light", weight=1) + lua_server(heavy, name="heavy", weight=3)
              + "setServerPolicy(wrandom)\n")
    names, ans = serve_names(d.port, "wr.test.", 400)
    assert len(ans) >= 395
    l, h = len(seen(light, "wr.test.")), len(seen(heavy, "wr.test."))
    assert 0.60 * (l + h) <= h <= 0.90 * (l + h), "wrandom 1:3 gave %d:%d" % (l, h)


def test_whashed_sticky(dnslb, make_responder):
    rs = three(make_responder)
    d = dnslb("".join(lua_server(r, name="b%d" % i) for i, r in enumerate(rs))
              + "setServerPolicy(whashed)\n")
    names = ["n%d.wh.test." % i for i in range(50)]
    for rnd in range(3):
        ans = blast(d.port, [n.upper() if rnd == 1 else n for n in names])
        assert len(ans) >= 49
    where = {}
    for i, r in enumerate(rs):
        for q in seen(r, "wh.test."):
            where.setdefault(q.qname.lower(), set()).add(i)
    assert len(where) == 50
    moved = {n: b for n, b in where.items() if len(b) != 1}
    assert not moved, "names answered by more than one backend: %r" % moved
    assert len({next(iter(b)) for b in where.values()}) > 1, "all 50 names on one backend"


def test_check_function_instruction_limit(dnslb, make_responder):
    """A checkFunction that never returns fails its check after a bounded
    number of instructions (dnsdist would hang its health checks): the
    server goes down, the other one keeps its checks, the console answers."""
    if IMPL != "dnslb":
        pytest.skip("dnslb's limit")
    good, looping = make_responder(), make_responder()
    d = dnslb(console_head() +
              "setLuaInstructionLimit(100000)\nsetVerboseHealthChecks(true)\n"
              "function spin(n, t, c, dh) while true do end end\n"
              "newServer({address='%s', name='spin', checkFunction=spin, checkInterval=1})\n"
              % looping.address + lua_server(good, name="good"))
    assert mark_index(d, "spin", "down", 0, 6) is not None
    assert d.wait_line(r"Health check of spin .*checkFunction: .*instruction limit exceeded "
                       r"\(100000 instructions\)", 0, 6) is not None
    assert line_index(d, marking("good", "down")) is None
    states = console(d, "showServers()")
    assert re.search(r"\bspin\b.*\bdown\b", states), states
    assert re.search(r"\bgood\b.*\bup\b", states), states
