"""Backend answers: what dnsdist 1.7.3 and dnslb pass on to the client when
the backend's answer is odd (header only, another question, TC=1, trailing
data, a zone transfer of several messages, too large for the client)."""

import struct

import diffharness
from diffharness import RD, build_query, known  # noqa: F401

PROTOS = ("udp", "tcp")
ONE = 'newServer({address="@B0@"})\n'

# Counters that other areas of the differential work are bringing in line:
# dnsdist 1.7.3 lists names dnslb does not show yet, counts no latency for
# TCP answers, and reads tcp-listen-overflows from the host. Until those
# land, every other counter is compared here, value for value.
ELSEWHERE = {"latency-count", "tcp-listen-overflows"}


def same_counters(p):
    a = p.parse_dumpstats(p.theirs.console("dumpStats()"))
    b = p.parse_dumpstats(p.ours.console("dumpStats()"))
    skip = diffharness.VOLATILE_STATS | ELSEWHERE
    diff = {k: (a[k], b[k]) for k in a if k in b and k not in skip and a[k] != b[k]}
    assert not diff, "counters differ (dnsdist, dnslb): %r" % diff


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
