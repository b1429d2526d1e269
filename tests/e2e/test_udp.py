"""UDP forwarding: answers, ID and case restoration, EDNS pass-through,
random outgoing IDs, concurrency, two backends."""

import select
import socket
import time

import dns.edns
import dns.rcode
import pytest

from dnslbtest import (Header, UdpClient, a_addrs, build_query, lua_server, parse,
                       question_bytes, udp_query, udp_raw)


def test_forward_a(dnslb, responder):
    d = dnslb(lua_server(responder, name="b1"))
    r = udp_query(d.port, "www.example.test.")
    assert r is not None, "no answer"
    assert r.rcode() == dns.rcode.NOERROR
    assert a_addrs(r) == ["192.0.2.1"]
    qs = responder.queries_for("www.example.test.")
    assert len(qs) == 1 and qs[0].transport == "udp"


@pytest.mark.parametrize("qtype,expect", [("AAAA", "2001:db8::1"), ("MX", "mail.example."),
                                          ("TXT", "hello")])
def test_forward_other_types(dnslb, responder, qtype, expect):
    d = dnslb(lua_server(responder))
    r = udp_query(d.port, "t.example.test.", qtype)
    assert r is not None
    assert expect in r.answer[0].to_text()


def test_forward_nxdomain_and_servfail(dnslb, responder):
    d = dnslb(lua_server(responder))
    r = udp_query(d.port, "nx.example.test.")
    assert r is not None and r.rcode() == dns.rcode.NXDOMAIN
    r = udp_query(d.port, "servfail.example.test.")
    assert r is not None and r.rcode() == dns.rcode.SERVFAIL


@pytest.mark.parametrize("qid", [0, 1, 0x1234, 0xFFFF])
def test_client_id_restored(dnslb, responder, qid):
    d = dnslb(lua_server(responder))
    wire = build_query("id.example.test.", qid=qid)
    ans = udp_raw(d.port, wire)
    assert ans is not None
    h = Header(ans)
    assert h.id == qid and h.qr and h.rcode == 0
    assert a_addrs(ans) == ["192.0.2.1"]


def test_case_preserved(dnslb, responder):
    d = dnslb(lua_server(responder))
    wire = build_query("MiXeD.CaSe.ExAmPlE.tEsT.", qid=77)
    ans = udp_raw(d.port, wire)
    assert ans is not None
    assert question_bytes(ans) == question_bytes(wire)
    qs = responder.queries_for("mixed.case.")
    assert len(qs) == 1
    assert qs[0].qname_wire == question_bytes(wire)[:-4], "backend did not get the client's case"


def test_rd_flag_forwarded(dnslb, responder):
    d = dnslb(lua_server(responder))
    for rd in (True, False):
        flags = 0x0100 if rd else 0
        ans = udp_raw(d.port, build_query("rd%d.example.test." % rd, flags=flags))
        assert ans is not None
        assert Header(ans).rd == rd
        q = responder.queries_for("rd%d." % rd)[0]
        assert bool(q.flags & 0x0100) == rd


def test_edns_passes_through(dnslb, responder):
    d = dnslb(lua_server(responder))
    opt = {"payload": 1400, "do": True, "options": [(65001, b"dnslb-e2e")]}
    wire = build_query("edns.example.test.", opt=opt)
    ans = udp_raw(d.port, wire)
    assert ans is not None
    q = responder.queries_for("edns.")[0]
    assert q.opt is not None, "backend got no OPT"
    assert q.opt["payload"] == 1400 and q.opt["do"]
    assert (65001, b"dnslb-e2e") in q.opt["options"]
    m = parse(ans)
    assert m.edns >= 0, "answer lost its OPT"
    assert m.payload == 1400
    assert any(o.otype == 65001 for o in m.options)


def test_no_edns_in_answer_without_edns_in_query(dnslb, responder):
    d = dnslb(lua_server(responder))
    ans = udp_raw(d.port, build_query("noedns.example.test."))
    assert ans is not None
    assert Header(ans).arcount == 0 and parse(ans).edns < 0


@pytest.mark.dnslb_only("1.7.3 uses sequential outgoing IDs")
def test_outgoing_ids_random(dnslb, responder):
    d = dnslb(lua_server(responder))
    n = 64
    with UdpClient(d.port) as c:
        for i in range(n):
            c.send(build_query("rid-%d.example.test." % i, qid=i + 1))
            assert c.recv(3.0) is not None, "query %d not answered" % i
    seen = {}
    for q in responder.queries_for("rid-"):
        seen[int(q.qname.split(".")[0][4:])] = q.id
    assert len(seen) == n
    ids = [seen[i] for i in range(n)]
    # not the client's IDs
    assert sum(1 for i in range(n) if ids[i] == i + 1) <= 2, ids
    # not constant, not a counter: random 16-bit draws are almost all
    # distinct, spread over the space, with irregular steps
    assert len(set(ids)) >= n - 4, ids
    assert max(ids) - min(ids) > 8192, ids
    steps = [(ids[i + 1] - ids[i]) % 65536 for i in range(n - 1)]
    assert len(set(steps)) > n // 2, steps
    assert sum(1 for s in steps if s <= 16 or s >= 65536 - 16) < n // 4, steps


def test_many_concurrent_queries(dnslb, responder):
    """500 queries, up to 64 in flight at a time (a larger burst could
    overflow the kernel's default socket buffer, which is not dnslb's doing),
    from 4 client sockets; every answer matches its query."""
    d = dnslb(lua_server(responder))
    n, window = 500, 64
    names = {}
    clients = [UdpClient(d.port) for _ in range(4)]
    got = {}
    try:
        sent = 0
        end = time.monotonic() + 30
        while len(got) < n and time.monotonic() < end:
            while sent < n and sent - len(got) < window:
                i = sent
                name = ("delay-%d.c%d.example.test." % (20 * (i % 5), i)) if i % 2 else \
                       ("c%d.example.test." % i)
                names[i] = name
                clients[i % 4].send(build_query(name, qid=i))
                sent += 1
            r, _, _ = select.select([c.sock for c in clients], [], [], 3.0)
            if not r:
                break
            for sock in r:
                a = sock.recv(65535)
                h = Header(a)
                assert h.id not in got, "duplicate answer for ID %d" % h.id
                got[h.id] = a
    finally:
        for c in clients:
            c.close()
    assert len(got) == n, "answered %d of %d" % (len(got), n)
    for i, a in got.items():
        assert parse(a).question[0].name.to_text() == names[i], "answer for the wrong query"
        assert a_addrs(a) == ["192.0.2.1"]


def test_same_client_id_twice_in_flight(dnslb, responder):
    """Two queries with the same ID from the same client are both answered,
    each with its own question (bad-inputs #26)."""
    d = dnslb(lua_server(responder))
    with UdpClient(d.port) as c:
        c.send(build_query("delay-300.one.example.test.", qid=4242))
        c.send(build_query("delay-300.two.example.test.", qid=4242))
        got = [c.recv(5.0), c.recv(5.0)]
    assert None not in got
    names = sorted(parse(a).question[0].name.to_text() for a in got)
    assert names == ["delay-300.one.example.test.", "delay-300.two.example.test."]
    assert all(Header(a).id == 4242 for a in got)


def test_two_backends_least_outstanding(dnslb, make_responder):
    r1, r2 = make_responder(), make_responder()
    d = dnslb(lua_server(r1, name="b1") + lua_server(r2, name="b2") +
              "setServerPolicy(leastOutstanding)\n")
    n = 20
    with UdpClient(d.port) as c:
        for i in range(n):
            c.send(build_query("delay-300.lo%d.example.test." % i, qid=i))
        got = [c.recv(5.0) for _ in range(n)]
    assert None not in got
    c1, c2 = len(r1.queries_for("delay-300.lo")), len(r2.queries_for("delay-300.lo"))
    assert c1 + c2 == n
    assert c1 >= 1 and c2 >= 1, "leastOutstanding used one backend only (%d/%d)" % (c1, c2)


def test_ipv6_listener_and_backend(dnslb, make_responder):
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s.bind(("::1", 0))
        s.close()
    except OSError:
        pytest.skip("no IPv6 loopback")
    r6 = make_responder(host="::1")
    d = dnslb(lua_server(r6), host="::1")
    r = udp_query(d.port, "v6.example.test.", host="::1")
    assert r is not None and a_addrs(r) == ["192.0.2.1"]
    assert r6.queries_for("v6.")[0].src[0] == "::1"


def test_counters(dnslb, responder):
    d = dnslb(lua_server(responder, name="b1"))
    for i in range(5):
        assert udp_query(d.port, "cnt%d.example.test." % i) is not None
    assert udp_query(d.port, "nx.example.test.") is not None
    assert udp_query(d.port, "servfail.example.test.") is not None
    s = d.wait_stats(lambda s: s["responses"] >= 7)
    assert s["queries"] == 7
    assert s["rdqueries"] == 7
    assert s["responses"] == 7
    assert s["frontend-noerror"] == 5
    assert s["frontend-nxdomain"] == 1
    assert s["frontend-servfail"] == 1
    assert s["servfail-responses"] == 1
    assert s["latency-count"] == 7
    assert s["downstream-timeouts"] == 0
    if d.impl == "dnslb":
        b = s["backends"]["b1"]
        assert b["queries"] == 7 and b["responses"] == 7
        assert b["outstanding"] == 0 and b["drops"] == 0
