"""Backend answers: what dnsdist 1.7.3 and dnslb pass on to the client when
the backend's answer is odd (header only, another question, TC=1, trailing
data, a zone transfer of several messages, too large for the client)."""

import struct

import pytest

import diffharness
from diffharness import RD, build_query, known  # noqa: F401
from dnslbtest import encode_name

PROTOS = ("udp", "tcp")
ONE = 'newServer({address="@B0@"})\n'

# Counters that other areas of the differential work are bringing in line:
# dnsdist 1.7.3 lists names dnslb does not show yet (p.stats() fails on
# them), and reads tcp-listen-overflows from the host.
ELSEWHERE = {"tcp-listen-overflows"}


def same_counters(p):
    diffharness.same_counters(p, ELSEWHERE)


def q(name, qtype=1, opt=None, qid=4242, **kw):
    return build_query(name, qtype=qtype, qid=qid, opt=opt, **kw)


def test_header_only_answers(pair):
    """qdcount=0 answers: NOERROR and NXDOMAIN ones are not accepted (the
    real answer that follows is), REFUSED and SERVFAIL ones are."""
    p = pair(ONE)
    for proto in PROTOS:
        for label in ("empty-noerror", "empty-nxdomain", "empty-refused", "empty-servfail"):
            for opt in (None, {"payload": 1232}):
                p.query(q(label + ".example.test.", opt=opt), proto)
    same_counters(p)


def test_header_only_answers_allowed(pair):
    p = pair(ONE + "setAllowEmptyResponse(true)\n")
    for proto in PROTOS:
        for label in ("empty-noerror", "empty-nxdomain", "empty-refused"):
            p.query(q(label + ".example.test."), proto)
    same_counters(p)


def test_header_only_answers_response_rules(pair):
    """Response rules run on a header-only answer too."""
    p = pair(ONE + 'addResponseAction(AllRule(), SetTagResponseAction("t", "v"))\n'
             'addResponseAction(RCodeRule(DNSRCode.REFUSED), DropResponseAction())\n')
    for proto in PROTOS:
        p.query(q("empty-refused.example.test."), proto, timeout=1.0)
        p.query(q("empty-servfail.example.test."), proto)
    same_counters(p)


def test_wrong_question_answers(pair):
    """An answer for another name, type or class is not the answer: over UDP
    the right one that follows is passed on."""
    p = pair(ONE)
    for proto in PROTOS:
        for label in ("wrongname", "wrongtype", "wrongclass", "wrongid", "qr0"):
            for qtype in (1, 28):
                p.query(q(label + ".example.test.", qtype=qtype), proto)
    same_counters(p)


def test_wrong_question_case(pair):
    """The name is compared case-insensitively: an answer whose question
    differs only in case is the answer (the client's case comes back)."""
    p = pair(ONE)
    for proto in PROTOS:
        p.query(q("WwW.ExAmple.TEST."), proto)
    same_counters(p)


def test_tc_answers(pair):
    p = pair(ONE)
    for proto in PROTOS:
        for label in ("tc", "tcdata"):
            for opt in (None, {"payload": 1232}):
                p.query(q(label + ".example.test.", opt=opt), proto)
    same_counters(p)


def test_tc_answers_truncate_tc(pair):
    """truncateTC(true): a TC=1 answer from the backend loses its records."""
    p = pair(ONE + "truncateTC(true)\n")
    for proto in PROTOS:
        for label in ("tc", "tcdata"):
            for qtype in (1, 16):
                for opt in (None, {"payload": 1232}):
                    p.query(q(label + ".example.test.", qtype=qtype, opt=opt), proto)
    same_counters(p)


def test_tc_answers_truncate_tc_off(pair):
    p = pair(ONE + "truncateTC(false)\n")
    for proto in PROTOS:
        p.query(q("tcdata.example.test.", opt={"payload": 1232}), proto)
    same_counters(p)


# ---- trailing data -------------------------------------------------------

TRAIL_LUA = '''
function qtrail(dq)
  local t = dq:getTrailingData()
  if t == "TRAIL" then dq:setTrailingData("NEW") end
  if t == "CUT" then dq:setTrailingData("") end
  return DNSAction.None, ""
end
function rtrail(dr)
  local t = dr:getTrailingData()
  dr:setTrailingData("R" .. #t .. t)
  return DNSResponseAction.None, ""
end
'''


def test_trailing_data_passed(pair):
    """Bytes after the last record: in a query they reach the backend, in an
    answer the client."""
    p = pair(ONE)
    for proto in PROTOS:
        for opt in (None, {"payload": 1232}):
            p.query(q("www.example.test.", opt=opt, trailing=b"TRAIL"), proto)
            p.query(q("trailing.example.test.", opt=opt), proto)
            p.query(q("trailing.example.test.", opt=opt, trailing=b"\0\0"), proto)
    same_counters(p)


def test_trailing_data_lua(pair):
    """dq:getTrailingData()/setTrailingData() in LuaAction and
    LuaResponseAction: what the backend and the client receive."""
    p = pair(ONE + TRAIL_LUA + 'addAction(AllRule(), LuaAction(qtrail))\n'
             'addResponseAction(AllRule(), LuaResponseAction(rtrail))\n')
    for proto in PROTOS:
        for opt in (None, {"payload": 1232, "do": True}):
            for trailing in (b"", b"TRAIL", b"CUT", b"other"):
                p.query(q("www.example.test.", opt=opt, trailing=trailing), proto)
            p.query(q("trailing.example.test.", opt=opt), proto)
            p.query(q("nx.example.test.", opt=opt, trailing=b"TRAIL"), proto)
    same_counters(p)


def test_trailing_data_self_answers(pair):
    """Local answers to a query with trailing data, and the self-answered
    response chain's view of them."""
    p = pair(ONE + TRAIL_LUA +
             'addAction("rcode.test.", RCodeAction(DNSRCode.REFUSED))\n'
             'addAction("spoof.test.", SpoofAction("192.0.2.77"))\n'
             'addAction("tc.test.", TCAction())\n'
             'addSelfAnsweredResponseAction("lua.test.", LuaResponseAction(rtrail))\n'
             'addAction("lua.test.", RCodeAction(DNSRCode.NXDOMAIN))\n')
    for proto in PROTOS:
        for opt in (None, {"payload": 1232}):
            for name in ("rcode.test.", "spoof.test.", "tc.test.", "lua.test."):
                p.query(q(name, opt=opt, trailing=b"TRAIL"), proto)
    same_counters(p)


# ---- zone transfers --------------------------------------------------------

def soa_authority(serial):
    rdata = (b"\x02ns\x07example\x00\x0ahostmaster\x07example\x00"
             + struct.pack("!IIIII", serial, 3600, 600, 86400, 300))
    return b"\xc0\x0c" + struct.pack("!HHIH", 6, 1, 3600, len(rdata)) + rdata


def xfr_query(name, qtype=252, serial=None, qid=7):
    if serial is None:
        return q(name, qtype=qtype, qid=qid)
    return q(name, qtype=qtype, qid=qid, nscount=1) + soa_authority(serial)


def xfr_exchange(side, wire, then=None):
    """Every message on the connection after @wire (until 1 s of silence or
    the end), then @then's answer on the same connection and whether the
    daemon closed it."""
    from diffharness import TcpClient
    with TcpClient(side.port) as c:
        c.send_msg(wire)
        msgs = []
        while True:
            m = c.recv_msg(1.0)
            if m is None:
                break
            msgs.append(diffharness.strip_id(m))
        after = None
        if not c.eof and then is not None:
            try:
                c.send_msg(then)
                after = diffharness.strip_id(c.recv_msg(1.0))
            except OSError:
                pass
        return msgs, after, c.eof


def same_xfr(p, wire):
    then = q("www.example.test.", qid=8)
    a = xfr_exchange(p.theirs, wire, then)
    b = xfr_exchange(p.ours, wire, then)
    assert a == b, "zone transfer differs\n dnsdist: %r\n dnslb:   %r" % (a, b)
    p.assert_same_backend_traffic()
    return a


@pytest.mark.parametrize("n", [1, 2, 5])
def test_axfr_messages(pair, n):
    """Every message of a transfer reaches the client; the connection then
    closes (it takes no more queries)."""
    p = pair(ONE)
    msgs, after, eof = same_xfr(p, xfr_query("axfr-%d.example.test." % n))
    assert len(msgs) == n and after is None and eof
    same_counters(p)


def test_ixfr_messages(pair):
    p = pair(ONE)
    # older serial: an AXFR-style answer, all of it
    msgs, _, _ = same_xfr(p, xfr_query("axfr-3.example.test.", 251, serial=2024010100))
    assert len(msgs) == 3
    # the same serial: dnsdist 1.7.3 still counts SOAs as for an AXFR
    msgs, _, _ = same_xfr(p, xfr_query("axfr-3.example.test.", 251, serial=2024010101))
    assert len(msgs) == 3
    same_xfr(p, xfr_query("axfr-3.example.test.", 251))
    same_counters(p)


def test_xfr_refused(pair):
    """A transfer the backend refuses (one message), and one a rule refuses."""
    p = pair(ONE + 'addAction(AndRule({QTypeRule(DNSQType.AXFR), QNameRule("deny.test.")}), '
             'RCodeAction(DNSRCode.REFUSED))\n')
    same_xfr(p, xfr_query("refused.example.test."))
    same_xfr(p, xfr_query("deny.test."))
    same_xfr(p, xfr_query("axfr-2.example.test.", 251))
    same_counters(p)


def test_xfr_over_udp(pair):
    p = pair(ONE)
    p.query(xfr_query("axfr-2.example.test."), "udp")
    same_counters(p)


# ---- answers too large for a UDP client --------------------------------------

BIG = "Answers too large for a UDP client become TC=1 answers"


def tc_answer(query, answer, opt):
    """What dnslb sends instead of an answer too large: @answer's header
    with TC, @query's question, no records, an OPT when the answer had one
    (the backend echoes the query's: @opt, its payload and DO bit)."""
    qend = 12 + len(diffharness.dnslbtest.question_bytes(query))
    flags = struct.unpack("!H", answer[2:4])[0] | 0x0200
    out = answer[:2] + struct.pack("!HHHHH", flags, 1, 0, 0, 1 if opt else 0) + query[12:qend]
    if opt:
        out += b"\0" + struct.pack("!HHIH", 41, opt.get("payload", 1232),
                                   0x8000 if opt.get("do") else 0, 0)
    return out


@pytest.mark.parametrize("size,opt,fits", [
    (512, None, True), (513, None, False), (600, None, False),
    (600, {"payload": 100}, False), (1232, {"payload": 1232}, True),
    (1300, {"payload": 1232, "do": True}, False), (1300, {"payload": 4096}, True),
    (5000, {"payload": 4096}, False), (5000, {"payload": 65000}, False)])
def test_answer_too_large_for_udp_client(pair, size, opt, fits):
    p = pair(ONE)
    wire = q("huge-%d.example.test." % size, qtype=16, opt=opt)
    if fits:
        p.query(wire, "udp")
    else:
        known(BIG)
        theirs, ours = p.answers(wire, "udp")
        assert theirs is not None and ours is not None
        assert ours == tc_answer(wire, ours, opt)
        # the answer dnsdist passed on: the backend's, whole up to its buffer
        assert len(theirs) == min(size, 4368) and not theirs[2] & 0x02
        p.assert_same_backend_traffic()
    # over TCP the whole answer goes through
    p.query(wire, "tcp")
    same_counters(p)


def test_answer_too_large_cap(pair):
    # dnsdist has no such setting: the same file for both, dnslb's own call guarded
    p = pair(ONE + "if setMaxUDPAnswerSize then setMaxUDPAnswerSize(1232) end\n")
    known(BIG)
    opt = {"payload": 4096, "do": True}
    wire = q("huge-1300.example.test.", qtype=16, opt=opt)
    theirs, ours = p.answers(wire, "udp")
    assert len(theirs) == 1300
    assert ours == tc_answer(wire, ours, opt)
    p.query(q("huge-1232.example.test.", qtype=16, opt={"payload": 4096}), "udp")
    p.assert_same_backend_traffic()
    same_counters(p)


def test_answer_too_large_no_edns_in_self_answers(pair):
    p = pair(ONE + "setAddEDNSToSelfGeneratedResponses(false)\n")
    known(BIG)
    wire = q("huge-2000.example.test.", qtype=16, opt={"payload": 1232})
    theirs, ours = p.answers(wire, "udp")
    assert len(theirs) == 2000
    assert ours == tc_answer(wire, ours, None)
    same_counters(p)


@pytest.mark.parametrize("size,opt", [
    (513, None), (600, None), (300, {"payload": 100}), (513, {"payload": 511}),
    (1300, {"payload": 1232}), (1300, {"payload": 4096}), (4000, {"payload": 4096, "do": True})])
def test_answer_too_large_tcp_only_backend(pair, size, opt):
    """dnsdist itself makes the TC=1 answer for a UDP client of a tcpOnly
    backend: dnslb's is the same."""
    p = pair('newServer({address="@B0@", tcpOnly=true})\n')
    p.query(q("huge-%d.example.test." % size, qtype=16, opt=opt), "udp")
    same_counters(p)


def test_xfr_skips_response_rules(pair):
    """The messages of a transfer go to the client as the backend wrote
    them: no response rule runs on them."""
    p = pair(ONE + 'addResponseAction(AllRule(), DropResponseAction())\n')
    msgs, _, eof = same_xfr(p, xfr_query("axfr-3.example.test."))
    assert len(msgs) == 3 and eof
    same_counters(p)


def test_xfr_pipelined_query_ignored(pair):
    """A query sent behind the transfer on the same connection is never
    read: the connection closes after the last message."""
    from diffharness import TcpClient
    p = pair(ONE)
    wire = xfr_query("axfr-2.example.test.")
    out = {}
    for side in (p.theirs, p.ours):
        with TcpClient(side.port) as c:
            c.send_raw(struct.pack("!H", len(wire)) + wire +
                       struct.pack("!H", 34) + q("www.example.test.", qid=9))
            msgs = []
            while True:
                m = c.recv_msg(1.0)
                if m is None:
                    break
                msgs.append(diffharness.strip_id(m))
            out[side.impl] = (msgs, c.eof)
    assert out["dnsdist"] == out["dnslb"]
    assert len(out["dnslb"][0]) == 2 and out["dnslb"][1]
    p.assert_same_backend_traffic()
    same_counters(p)


# ---- spoofed answers with several records ------------------------------------

def rr_split(wire):
    """(header+question, sorted answer records) of an uncompressed-owner
    answer with one question: the records' order aside."""
    import dns.message
    m = dns.message.from_wire(wire)
    recs = sorted(m.answer[0].to_text().splitlines()) if m.answer else []
    return wire[2:12], m.question[0].to_text(), recs


def test_spoof_several_records_shuffled(pair):
    """SpoofAction and SpoofRawAction with several records: the same
    records in both, in an order each shuffles per answer."""
    p = pair(ONE + 'addAction("s.test.", SpoofAction({"192.0.2.1", "192.0.2.2", '
                   '"192.0.2.3", "192.0.2.4"}))\n'
                   'addAction("r.test.", SpoofRawAction({"\\001a", "\\001b", "\\001c"}))\n')
    for name, qtype in (("s.test.", 1), ("r.test.", 16)):
        for proto in PROTOS:
            orders = {"dnsdist": set(), "dnslb": set()}
            for _ in range(12):
                a, b = p.answers(q(name, qtype=qtype), proto)
                assert rr_split(a) == rr_split(b)
                assert len(a) == len(b)
                for impl, w in (("dnsdist", a), ("dnslb", b)):
                    orders[impl].add(w[12:])
            # 12 answers in one order out of 6 or 24: 1 in 6^11 by chance
            assert len(orders["dnsdist"]) > 1 and len(orders["dnslb"]) > 1, orders
    same_counters(p)


# ---- self-generated answers to queries with several records or questions ---

SELF_ANSWERS = (ONE +
                'addAction("rc.test.", RCodeAction(DNSRCode.REFUSED))\n'
                'addAction("s.test.", SpoofAction("192.0.2.1"))\n'
                'addAction("c.test.", SpoofCNAMEAction("target.test."))\n'
                'addAction("raw.test.", SpoofRawAction("\\001a"))\n'
                'addAction("t.test.", TCAction())\n'
                'addAction("n.test.", NegativeAndSOAAction(true, "n.test.", 60, "ns.", "h.", '
                '1, 2, 3, 4, 5))\n')
A_RR = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + b"\x01\x02\x03\x04"


def odd_queries(name, qtype=1):
    """Queries with records in the answer or additional section, a second
    question, an OPT followed by another record."""
    other_q = encode_name("x.test.") + struct.pack("!HH", 1, 1)
    return {
        "answer": q(name, qtype=qtype, ancount=1) + A_RR,
        "additional": q(name, qtype=qtype, arcount=1) + A_RR,
        "opt+record": q(name, qtype=qtype, opt={"payload": 1232}, arcount=2) + A_RR,
        "second-question-first": build_query(
            "x.test.", qdcount=2, question=other_q + encode_name(name) + struct.pack("!HH", 1, 1)),
    }


@pytest.mark.parametrize("name,qtype", [("rc.test.", 1), ("s.test.", 1), ("c.test.", 1),
                                        ("raw.test.", 16), ("t.test.", 1), ("n.test.", 1)])
def test_self_answers_to_odd_queries(pair, name, qtype):
    """A rule's answer to a query with more than one question and OPT:
    the same bytes, including whether an OPT is added."""
    p = pair(SELF_ANSWERS)
    for proto in PROTOS:
        for wire in odd_queries(name, qtype).values():
            p.query(wire, proto)
        # this name's question first, then another (for spoofs, see below);
        # NegativeAndSOAAction lets such a query go on to the backend
        if name in ("rc.test.", "t.test.", "n.test."):
            p.query(q(name, qtype=qtype, qdcount=2) + encode_name("x.test.") +
                    struct.pack("!HH", 1, 1), proto)
    same_counters(p)


@pytest.mark.parametrize("name,qtype", [("s.test.", 1), ("c.test.", 1), ("raw.test.", 16)])
def test_spoofed_answer_header_counts(pair, name, qtype):
    """A query with an authority record or a second question: dnsdist
    keeps those counts in the spoofed answer's header without the records
    (a malformed message); dnslb's header counts what the answer holds."""
    p = pair(SELF_ANSWERS)
    for proto in PROTOS:
        for extra, wire in (("ns", q(name, qtype=qtype, nscount=1) + A_RR),
                            ("qd", q(name, qtype=qtype, qdcount=2) + encode_name("x.test.") +
                             struct.pack("!HH", 1, 1))):
            a, b = p.answers(wire, proto)
            assert known("Spoofed answers count only what they hold")
            fixed = bytearray(a)
            if extra == "ns":
                assert struct.unpack("!H", a[8:10])[0] == 1
                fixed[8:10] = b"\x00\x00"
            else:
                assert struct.unpack("!H", a[4:6])[0] == 2
                fixed[4:6] = b"\x00\x01"
            assert diffharness.strip_id(bytes(fixed)) == diffharness.strip_id(b)


# ---- a backend that fails a TCP query ----------------------------------------

@pytest.mark.parametrize("name", ["drop.example.test.", "close.example.test."])
def test_tcp_backend_failure_closes_the_client(pair, name):
    """A backend that never answers over TCP (read timeout) or closes the
    connection (retries exhausted): the client's connection is closed
    without an answer, and no timeout is counted but the frontend's."""
    from diffharness import TcpClient
    p = pair('newServer({address="@B0@", tcpRecvTimeout=1, retries=1})\n')
    out = {}
    for side in (p.theirs, p.ours):
        with TcpClient(side.port) as c:
            c.send_msg(q(name, qid=7))
            out[side.impl] = (c.recv_msg(4.0), c.eof)
    assert out["dnsdist"] == out["dnslb"] == (None, True)
    p.assert_same_backend_traffic()
    same_counters(p)
