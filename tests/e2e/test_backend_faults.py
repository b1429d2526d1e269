"""Backend faults and spoofing (bad-inputs §3.2 B): mismatched answers are
dropped (counted as dnsdist counts them) while the query keeps waiting, timeouts, late and
duplicate answers, empty answers, TC relay, no server available."""

import pytest

from responder import Responder
from dnslbtest import Header, UdpClient, a_addrs, build_query, lua_server, parse, wait_until

FAST = "setUDPTimeout(0.5)\n"


def exchange(port, wire, first=3.0, extra=0.5):
    """All answers to one query: the first within @first seconds, then
    whatever else arrives within @extra seconds."""
    with UdpClient(port) as c:
        c.send(wire)
        a = c.recv(first)
        if a is None:
            return []
        return [a] + c.collect(extra)


@pytest.mark.parametrize("label", ["wrongid", "wrongname", "wrongtype", "wrongclass",
                                   "qr0", "short", "otherport"])
def test_mismatched_answer_dropped_real_one_delivered(dnslb, responder, label):
    d = dnslb(lua_server(responder))
    wire = build_query("%s.example.test." % label, qid=999)
    got = exchange(d.port, wire)
    assert len(got) == 1, "expected exactly one answer, got %r" % [parse(g) for g in got]
    h = Header(got[0])
    assert h.id == 999 and h.qr
    assert a_addrs(got[0]) == ["192.0.2.1"], "the forged answer was delivered"
    assert responder.sent("spoof") or responder.sent("spoof-otherport")
    s = d.stats()
    assert s["responses"] == 1
    # as dnsdist counts it: only QR=0 is noncompliant; another ID, question
    # or source (dnslb's shared socket sees otherport's, dnsdist's connected
    # one does not) is merely not the answer
    assert s["noncompliant-responses"] == (1 if label == "qr0" else 0)


@pytest.mark.parametrize("label", ["empty-noerror", "empty-nxdomain"])
def test_header_only_noerror_nxdomain_dropped(dnslb, responder, label):
    d = dnslb(lua_server(responder))
    got = exchange(d.port, build_query("%s.example.test." % label, qid=5))
    assert len(got) == 1
    h = Header(got[0])
    assert h.qdcount == 1 and h.rcode == 0, "header-only answer was passed: %r" % h
    assert a_addrs(got[0]) == ["192.0.2.1"]
    assert d.stat_at_least("noncompliant-responses", 1) == 1


def test_header_only_noerror_allowed(dnslb, responder):
    d = dnslb(lua_server(responder) + "setAllowEmptyResponse(true)\n")
    got = exchange(d.port, build_query("empty-noerror.example.test.", qid=6))
    assert len(got) == 1
    h = Header(got[0])
    assert h.id == 6 and h.qr and h.rcode == 0 and h.qdcount == 0 and h.ancount == 0


@pytest.mark.parametrize("label,rcode", [("empty-refused", 5), ("empty-servfail", 2)])
def test_header_only_refused_servfail_passed(dnslb, responder, label, rcode):
    d = dnslb(lua_server(responder))
    got = exchange(d.port, build_query("%s.example.test." % label, qid=7))
    assert len(got) == 1, "header-only %s answer not passed" % label
    h = Header(got[0])
    assert h.id == 7 and h.qr and h.rcode == rcode and h.qdcount == 0


def test_timeout_counted_no_answer(dnslb, responder):
    d = dnslb(lua_server(responder, name="b1") + FAST)
    got = exchange(d.port, build_query("drop.example.test.", qid=8), first=2.0, extra=0)
    assert got == []
    assert d.stat_at_least("downstream-timeouts", 1) == 1
    s = d.stats()
    assert s["responses"] == 0
    if d.impl == "dnslb":
        b = s["backends"]["b1"]
        assert b["drops"] == 1 and b["outstanding"] == 0 and b["queries"] == 1
    # still answering
    got = exchange(d.port, build_query("after.example.test.", qid=9), extra=0)
    assert len(got) == 1 and a_addrs(got[0]) == ["192.0.2.1"]


@pytest.mark.dnslb_only("udpTimeout is a 1.8 newServer key")
def test_per_backend_udp_timeout(dnslb, responder):
    d = dnslb(lua_server(responder, udpTimeout=0.5) + "setUDPTimeout(30)\n")
    assert exchange(d.port, build_query("drop.example.test.", qid=8), first=1.5) == []
    assert d.stat_at_least("downstream-timeouts", 1, timeout=5) == 1


@pytest.mark.dnslb_only("1.7.3 reaps timeouts once a second and delivers late answers")
def test_late_answer_not_delivered(dnslb, make_responder):
    r = make_responder(late_ms=1500)
    d = dnslb(lua_server(r) + FAST)
    with UdpClient(d.port) as c:
        c.send(build_query("late.example.test.", qid=10))
        assert wait_until(lambda: r.sent("late"), 5.0), "responder never sent the late answer"
        got = c.collect(1.0)
    assert got == [], "late answer delivered after the timeout"
    assert d.stat_at_least("downstream-timeouts", 1) == 1
    assert d.stats()["responses"] == 0
    assert d.stats()["noncompliant-responses"] == 0, "a late answer is not noncompliant"


def test_two_answers_one_delivered(dnslb, responder):
    d = dnslb(lua_server(responder))
    with UdpClient(d.port) as c:
        c.send(build_query("twice.example.test.", qid=11))
        first = c.recv(3.0)
        assert first is not None
        assert wait_until(lambda: responder.sent("second"), 3.0)
        more = c.collect(0.5)
    assert a_addrs(first) == ["192.0.2.1"]
    assert more == [], "second answer delivered too"
    s = d.stats()
    assert s["responses"] == 1
    assert s["noncompliant-responses"] == 0, "a duplicate is not noncompliant (dnsdist)"


def test_tc_answer_relayed(dnslb, responder):
    d = dnslb(lua_server(responder))
    got = exchange(d.port, build_query("tc.example.test.", qid=12))
    assert len(got) == 1
    h = Header(got[0])
    assert h.tc and h.id == 12 and h.rcode == 0 and h.qdcount == 1


@pytest.mark.parametrize("rd", [True, False])
def test_servfail_when_no_server(dnslb, responder, rd):
    d = dnslb(lua_server(responder) + "getServer(0):setDown()\nsetServFailWhenNoServer(true)\n")
    wire = build_query("nosrv.example.test.", qid=13, flags=0x0100 if rd else 0)
    got = exchange(d.port, wire)
    assert len(got) == 1
    h = Header(got[0])
    assert h.qr and h.id == 13 and h.rcode == 2 and h.rd == rd
    assert h.qdcount == 1 and got[0][12:len(wire)] == wire[12:], "question not echoed"
    assert d.stat_at_least("no-policy", 1) == 1
    assert responder.queries_for("nosrv.") == []


def test_servfail_when_no_server_edns(dnslb, responder):
    d = dnslb(lua_server(responder) + "getServer(0):setDown()\nsetServFailWhenNoServer(true)\n")
    got = exchange(d.port, build_query("nosrv.example.test.", qid=14, opt={"payload": 4096}))
    assert len(got) == 1
    m = parse(got[0])
    assert m.rcode() == 2 and m.edns == 0 and m.payload == 1232


def test_no_server_dropped(dnslb, responder):
    d = dnslb(lua_server(responder) + "getServer(0):setDown()\n")
    assert exchange(d.port, build_query("nosrv.example.test.", qid=15), first=1.5) == []
    assert d.stat_at_least("no-policy", 1) == 1
    assert responder.queries_for("nosrv.") == []


def test_no_backend_configured_dropped(dnslb):
    d = dnslb("")
    assert exchange(d.port, build_query("nosrv.example.test.", qid=16), first=1.5) == []
    assert d.stat_at_least("no-policy", 1) == 1


def test_answer_from_another_backend_ignored(dnslb, make_responder):
    """Two backends share the worker's UDP socket and its ID space. An
    answer that carries the ID of a query sent to b1 but comes from b2's
    address is not b1's answer: dropped and counted, the query keeps waiting
    for b1's real answer."""
    from responder import SPOOF_ADDR, _rr, build_answer
    r1, r2 = make_responder(), make_responder()
    d = dnslb(lua_server(r1, name="b1") + lua_server(r2, name="b2") +
              "setServerPolicy(firstAvailable)\nsetWorkerThreads(1)\n")
    with UdpClient(d.port) as c:
        c.send(build_query("delay-600.cross.example.test.", qid=321))
        qs = r1.wait_queries("delay-600.cross.")
        assert len(qs) == 1, "b1 did not get the query"
        q = qs[0]
        # from b2's own socket (its address and port), to where b1's query came from
        r2.udp.sendto(build_answer(q, answers=[_rr(1, SPOOF_ADDR)]), q.src)
        got = c.collect(1.5)
    assert len(got) == 1, "expected exactly one answer, got %r" % [parse(g) for g in got]
    assert Header(got[0]).id == 321 and a_addrs(got[0]) == ["192.0.2.1"]
    s = d.stats()
    assert s["backends"]["b1"]["responses"] == 1
    assert s["noncompliant-responses"] == 0, "dnsdist's connected socket never sees it"


def test_ipv4_and_ipv6_backends_together(dnslb, make_responder):
    """A worker shares one socket per address family: backends of both
    families in one pool all get queries and every query is answered."""
    r4, r6 = make_responder(), make_responder(host="::1")
    d = dnslb(lua_server(r4, name="v4") + lua_server(r6, name="v6") +
              "setServerPolicy(roundrobin)\nsetWorkerThreads(1)\n")
    with UdpClient(d.port) as c:
        for i in range(20):
            c.send(build_query("fam%d.example.test." % i, qid=400 + i))
        got = c.collect(1.0)
    assert sorted(Header(g).id for g in got) == list(range(400, 420))
    assert all(a_addrs(g) == ["192.0.2.1"] for g in got)
    assert len(r4.queries_for("fam")) == 10 and len(r6.queries_for("fam")) == 10


def test_answer_from_another_port_ignored_on_own_socket(dnslb, responder):
    """sockets=2 gives the backend its own connected sockets (no shared
    one): the kernel drops the datagram from another port, the real answer
    is delivered."""
    d = dnslb(lua_server(responder, sockets=2))
    got = exchange(d.port, build_query("otherport.example.test.", qid=998))
    assert len(got) == 1 and a_addrs(got[0]) == ["192.0.2.1"]
    assert responder.sent("spoof-otherport")
    assert d.stats()["responses"] == 1


def refused_silent_queries(d, tag, n, qid0, expect):
    """Send @n queries that the backends never answer (drop.<tag><i>.,
    IDs from @qid0) at once; @return the headers of the answers that came
    at once, checked to be @expect SERVFAILs."""
    with UdpClient(d.port) as c:
        for i in range(n):
            c.send(build_query("drop.%s%d.example.test." % (tag, i), qid=qid0 + i))
        got = c.collect(0.7)
    refused = [Header(g) for g in got]
    assert len(refused) == expect, "expected %d immediate refusals, got %r" % (expect, refused)
    assert all(h.rcode == 2 and h.qr for h in refused)
    return refused


@pytest.mark.dnslb_only("dnsdist overwrites the oldest in-flight query instead of refusing")
def test_max_udp_outstanding_is_per_backend(dnslb):
    """Two backends share the worker's UDP socket, yet setMaxUDPOutstanding
    bounds each of them: with 2, roundrobin over two silent backends lets
    four queries wait and refuses the fifth and sixth, one per backend."""
    with Responder() as r1, Responder() as r2:
        d = dnslb(lua_server(r1, name="b1") + lua_server(r2, name="b2") +
                  "setMaxUDPOutstanding(2)\nsetUDPTimeout(1)\nsetWorkerThreads(1)\n"
                  "setServerPolicy(roundrobin)\n")
        refused_silent_queries(d, "m", 6, 200, 2)
        assert d.stat_at_least("downstream-timeouts", 4, timeout=5) == 4
        s = d.stats()
        assert s["inflight-full"] == 2
        for b in ("b1", "b2"):
            assert s["backends"][b]["refused"] == 1
            assert s["backends"][b]["queries"] == 2
        assert len(r1.queries_for("drop.m")) == 2 and len(r2.queries_for("drop.m")) == 2


@pytest.mark.dnslb_only("dnsdist overwrites the oldest in-flight query instead of refusing")
def test_full_inflight_table_refuses_and_counts(dnslb, responder):
    """setMaxUDPOutstanding(2) with a backend that never answers: two
    queries wait, the next three are refused with SERVFAIL at once and
    counted (inflight-full, the backend's `refused`); the waiting ones are
    never overwritten: they time out as themselves."""
    d = dnslb(lua_server(responder, name="b1") + "setMaxUDPOutstanding(2)\n"
              "setUDPTimeout(1)\nsetWorkerThreads(1)\n")
    refused = refused_silent_queries(d, "n", 5, 100, 3)
    assert sorted(h.id for h in refused) == [102, 103, 104]
    assert d.stat_at_least("downstream-timeouts", 2, timeout=5) == 2
    s = d.stats()
    assert s["inflight-full"] == 3
    assert s["backends"]["b1"]["refused"] == 3
    assert s["backends"]["b1"]["queries"] == 2 and s["backends"]["b1"]["outstanding"] == 0
