"""Malformed and unusual UDP queries (bad-inputs §3.2 A) sent as raw bytes,
and the shape of self-generated answers (NOTIMP for qdcount=0)."""

import struct
import time

import pytest

from dnslbtest import (QR, RD, TC, Header, UdpClient, a_addrs, build_query, encode_name,
                       lua_server, opt_rr, parse, question_bytes)

QTQC = struct.pack("!HH", 1, 1)


def hdr(qid=0x4141, flags=RD, qd=1, an=0, ns=0, ar=0):
    return struct.pack("!HHHHHH", qid, flags, qd, an, ns, ar)


def name_of(octets):
    """A wire name of exactly @octets octets (root byte included)."""
    out = b""
    left = octets - 1
    while left > 0:
        ln = min(63, left - 1)
        out += bytes([ln]) + b"a" * ln
        left -= ln + 1
    assert len(out) + 1 == octets
    return out + b"\x00"


assert len(name_of(255)) == 255 and len(name_of(256)) == 256

# name, raw datagram, counted in noncompliant-queries
MALFORMED = [
    ("empty-datagram", b"", True),
    ("5-bytes", b"\x12\x34\x01\x00\x00", True),
    ("11-bytes", hdr()[:11], True),
    ("question-missing", hdr(), True),
    ("qname-truncated", hdr() + b"\x0aabc", True),
    ("qtype-missing", hdr() + encode_name("x.example.test."), True),
    ("qclass-missing", hdr() + encode_name("x.example.test.") + b"\x00\x01", True),
    ("label-0x40", hdr() + b"\x40" + b"a" * 64 + b"\x00" + QTQC, True),
    ("label-type-0x80", hdr() + b"\x80abc\x00" + QTQC, True),
    ("label-past-end", hdr() + b"\x32" + b"a" * 10, True),
    ("name-256-octets", hdr() + name_of(256) + QTQC, True),
    ("pointer-to-itself", hdr() + b"\xc0\x0c" + QTQC, True),
    ("pointer-loop-2", hdr() + b"\x01a\xc0\x0c" + QTQC, True),
    ("pointer-past-end", hdr() + b"\xc0\xff" + QTQC, True),
    ("qr-set", build_query("qr.example.test.", flags=QR | RD), False),
]


def send_bad_then_good(port, bad):
    """Send @bad, then a good query from the same socket; return every
    datagram received until shortly after the good answer."""
    good = build_query("good.example.test.", qid=0xBEEF)
    with UdpClient(port) as c:
        c.send(bad)
        c.send(good)
        got = []
        while True:
            a = c.recv(3.0)
            if a is None:
                break
            got.append(a)
            if len(a) >= 12 and Header(a).id == 0xBEEF:
                got += c.collect(0.3)
                break
    return got


@pytest.mark.parametrize("name,wire,counted", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_dropped(dnslb, responder, name, wire, counted):
    d = dnslb(lua_server(responder))
    got = send_bad_then_good(d.port, wire)
    ids = [Header(a).id for a in got if len(a) >= 12]
    assert ids == [0xBEEF], "expected only the good answer, got %r" % got
    assert a_addrs(got[0]) == ["192.0.2.1"]
    forwarded = [q for q in responder.client_queries() if q.id is None or
                 not (q.qname and q.qname.lower() == "good.example.test.")]
    assert forwarded == [], "malformed query reached the backend"
    if counted and (d.impl == "dnslb" or len(wire) < 12):
        # (1.7.3 counts only datagrams shorter than a header)
        assert d.stat_at_least("noncompliant-queries", 1) == 1
    s = d.stats()
    assert s["responses"] == 1


@pytest.mark.dnslb_only("1.7.3 forwards TC=1 queries")
def test_tc_query_dropped(dnslb, responder):
    d = dnslb(lua_server(responder))
    got = send_bad_then_good(d.port, build_query("tc.example.test.", flags=TC | RD))
    assert [Header(a).id for a in got] == [0xBEEF]
    assert responder.queries_for("tc.") == []


@pytest.mark.dnslb_only("1.7.3 counts only datagrams shorter than a header")
def test_many_malformed_then_still_serving(dnslb, responder):
    d = dnslb(lua_server(responder))
    with UdpClient(d.port) as c:
        for _ in range(20):
            for _, wire, counted in MALFORMED:
                if counted:
                    c.send(wire)
            time.sleep(0.01)        # no burst: kernel buffers are not under test
    n = sum(1 for m in MALFORMED if m[2]) * 20
    assert d.stat_at_least("noncompliant-queries", n, timeout=10) == n
    got = send_bad_then_good(d.port, b"")
    assert len(got) == 1


# ---- unusual but well-formed queries: forwarded and answered ---------------

FORWARDED = [
    ("name-255-octets", hdr() + name_of(255) + QTQC),
    ("trailing-garbage", build_query("trail.example.test.", qid=0x4141) + b"\xde\xad\xbe\xef" * 4),
    ("binary-label", hdr() + b"\x05a\x00.\xffb\x07example\x04test\x00" + QTQC),
    ("root-any", hdr() + b"\x00" + struct.pack("!HH", 255, 1)),
    ("qtype-0", hdr() + encode_name("q0.example.test.") + struct.pack("!HH", 0, 1)),
    ("qtype-65535", hdr() + encode_name("qmax.example.test.") + struct.pack("!HH", 65535, 1)),
    ("class-chaos", hdr() + encode_name("version.bind.") + struct.pack("!HH", 16, 3)),
    ("id-0", build_query("zero.example.test.", qid=0)),
    ("ednsv1", build_query("v1.example.test.", qid=0x4141, opt={"version": 1})),
    ("edns-payload-0", build_query("p0.example.test.", qid=0x4141, opt={"payload": 0})),
    ("rd-0", build_query("nord.example.test.", qid=0x4141, flags=0)),
]


@pytest.mark.parametrize("name,wire", FORWARDED, ids=[f[0] for f in FORWARDED])
def test_unusual_query_forwarded(dnslb, responder, name, wire):
    d = dnslb(lua_server(responder))
    with UdpClient(d.port) as c:
        c.send(wire)
        a = c.recv(3.0)
    assert a is not None, "no answer"
    h = Header(a)
    qh = Header(wire)
    assert h.qr and h.id == qh.id and h.rd == qh.rd
    assert question_bytes(a) == question_bytes(wire), "question not the client's"
    seen = [q for q in responder.client_queries() if q.id is not None and q.qname_wire]
    assert len(seen) == 1
    assert seen[0].qname_wire + seen[0].wire[12 + len(seen[0].qname_wire):][:4] == \
        question_bytes(wire)
    if name == "name-255-octets":
        assert len(seen[0].qname_wire) == 255


# ---- odd queries dnslb may forward or refuse; it must stay up -------------

SURVIVE = [
    ("qdcount-2-two-questions", hdr(qd=2) + encode_name("a.example.test.") + QTQC +
     encode_name("b.example.test.") + QTQC),
    ("qdcount-2-one-question", hdr(qd=2) + encode_name("a.example.test.") + QTQC),
    ("arcount-1-no-record", hdr(ar=1) + encode_name("a.example.test.") + QTQC),
    ("opt-rdlen-past-end", hdr(ar=1) + encode_name("a.example.test.") + QTQC +
     b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x40\x00\x0a"),
    ("two-opts", hdr(ar=2) + encode_name("a.example.test.") + QTQC + opt_rr() + opt_rr()),
    ("opcode-notify", build_query("n.example.test.", qid=0x4141, flags=(4 << 11))),
    ("opcode-update", build_query("u.example.test.", qid=0x4141, flags=(5 << 11))),
    ("opcode-15", build_query("o.example.test.", qid=0x4141, flags=(15 << 11) | RD)),
    ("ancount-1-garbage", hdr(an=1) + encode_name("a.example.test.") + QTQC + b"\xc0\x0c"),
    # #24: ECS with an impossible prefix, a wrong family, an oversized address
    ("ecs-prefix-33", build_query("e.example.test.", qid=0x4141, opt={
        "options": [(8, struct.pack("!HBB", 1, 33, 0) + b"\xc0\x00\x02\x01\x00")]})),
    ("ecs-family-9", build_query("e.example.test.", qid=0x4141, opt={
        "options": [(8, struct.pack("!HBB", 9, 24, 0) + b"\xc0\x00\x02")]})),
    ("ecs-oversized", build_query("e.example.test.", qid=0x4141, opt={
        "options": [(8, struct.pack("!HBB", 1, 32, 0) + b"\x01" * 40)]})),
    ("edns-option-past-rdata", hdr(ar=1) + encode_name("a.example.test.") + QTQC +
     b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x06\x00\x08\x00\xff\x00\x01"),
]


@pytest.mark.parametrize("name,wire", SURVIVE, ids=[s[0] for s in SURVIVE])
def test_odd_query_survived(dnslb, responder, name, wire):
    d = dnslb(lua_server(responder))
    got = send_bad_then_good(d.port, wire)
    good = [a for a in got if Header(a).id == 0xBEEF]
    assert len(good) == 1 and a_addrs(good[0]) == ["192.0.2.1"]
    for a in got:
        if Header(a).id != 0xBEEF:
            h = Header(a)
            assert h.qr and h.id == 0x4141, "odd answer %r" % h
    assert d.alive()


# ---- qdcount = 0: NOTIMP ---------------------------------------------------

def notimp_exchange(d, wire):
    with UdpClient(d.port) as c:
        c.send(wire)
        return c.recv(3.0)


@pytest.mark.parametrize("rd", [True, False])
def test_empty_query_notimp(dnslb, responder, rd):
    d = dnslb(lua_server(responder))
    wire = hdr(qid=0x7777, qd=0, flags=RD if rd else 0)
    a = notimp_exchange(d, wire)
    assert a is not None, "no NOTIMP"
    h = Header(a)
    assert h.qr and h.id == 0x7777 and h.rcode == 4 and h.opcode == 0
    assert h.rd == rd, "RD not restored"
    assert (h.qdcount, h.ancount, h.nscount, h.arcount) == (0, 0, 0, 0)
    assert len(a) == 12
    assert d.stat_at_least("empty-queries", 1) == 1
    assert responder.client_queries() == []


@pytest.mark.dnslb_only("1.7.3 turns the query around, echoing its OPT")
def test_empty_query_with_opt_gets_opt(dnslb, responder):
    d = dnslb(lua_server(responder))
    a = notimp_exchange(d, hdr(qid=0x7778, qd=0, ar=1) + opt_rr(payload=4096))
    assert a is not None
    h = Header(a)
    assert h.rcode == 4 and h.id == 0x7778 and h.qdcount == 0 and h.arcount == 1
    m = parse(a)
    assert m.edns == 0 and m.payload == 1232


@pytest.mark.dnslb_only("1.7.3 turns the query around, echoing its OPT")
def test_empty_query_payload_setting(dnslb, responder):
    d = dnslb(lua_server(responder) + "setPayloadSizeOnSelfGeneratedAnswers(1400)\n")
    a = notimp_exchange(d, hdr(qid=0x7779, qd=0, ar=1) + opt_rr(payload=4096))
    assert a is not None
    assert parse(a).payload == 1400


@pytest.mark.dnslb_only("1.7.3 turns the query around, echoing its OPT")
def test_empty_query_no_edns_setting(dnslb, responder):
    d = dnslb(lua_server(responder) + "setAddEDNSToSelfGeneratedResponses(false)\n")
    a = notimp_exchange(d, hdr(qid=0x777A, qd=0, ar=1) + opt_rr(payload=4096))
    assert a is not None
    h = Header(a)
    assert h.rcode == 4 and h.arcount == 0 and len(a) == 12


def test_empty_query_dropped_when_configured(dnslb, responder):
    d = dnslb(lua_server(responder) + "setDropEmptyQueries(true)\n")
    got = send_bad_then_good(d.port, hdr(qid=0x777B, qd=0))
    assert [Header(a).id for a in got] == [0xBEEF]
    assert d.stat_at_least("empty-queries", 1) == 1


@pytest.mark.dnslb_only("1.7.3 does not count a bad qname as noncompliant")
def test_accounting_identity(dnslb, responder):
    """reference §2.1 (1.7 form, no rules or cache here): queries -
    noncompliant-queries = responses - noncompliant-responses +
    downstream-timeouts + no-policy + self-answered, plus the empty query,
    whose NOTIMP is not self-answered (as in dnsdist 1.7.3)."""
    d = dnslb(lua_server(responder) + "setUDPTimeout(0.5)\n")
    traffic = [build_query("c%d.example.test." % i, qid=i) for i in range(5)]
    traffic += [build_query("nx.example.test."), build_query("servfail.example.test."),
                build_query("norecurse.example.test.", flags=0), hdr(qd=0),
                build_query("qr.example.test.", flags=QR | RD), b"\x00\x01\x02",
                build_query("drop.example.test."), hdr() + b"\xc0\x0c" + QTQC]
    with UdpClient(d.port) as c:
        for w in traffic:
            c.send(w)
            time.sleep(0.01)
        answers = c.collect(2.0)
    assert len(answers) == 9
    s = d.wait_stats(lambda s: s["downstream-timeouts"] >= 1)
    lhs = s["queries"] - s["noncompliant-queries"]
    rhs = (s["responses"] - s["noncompliant-responses"] + s["downstream-timeouts"] +
           s["no-policy"] + s["self-answered"] + s["empty-queries"])
    assert lhs == rhs, s
    assert s["queries"] >= 11 and s["empty-queries"] == 1
