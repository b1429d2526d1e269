"""EDNS: answers to queries with and without an OPT RR (the backend's answer
with or without one of its own), self-generated answers with odd payload
sizes and the DO bit, EDNS options in rules, Lua and SetEDNSOptionAction."""

import pytest

import diffharness
from diffharness import build_query

PROTOS = ("udp", "tcp")
ONE = 'newServer({address="@B0@"})\n'

# Counters other areas are bringing in line (see test_answers.py): compared
# here value for value, all but these.
ELSEWHERE = {"latency-count", "tcp-listen-overflows", "rule-refused", "rule-nxdomain",
             "rule-servfail"}

OPTS = (None, {"payload": 512}, {"payload": 100}, {"payload": 1232, "do": True},
        {"payload": 4096, "options": [(65001, b"abc")]}, {"payload": 65535, "do": True},
        {"payload": 1232, "version": 1}, {"payload": 1232, "ext_rcode": 1})


def same_counters(p):
    a = p.parse_dumpstats(p.theirs.console("dumpStats()"))
    b = p.parse_dumpstats(p.ours.console("dumpStats()"))
    skip = diffharness.VOLATILE_STATS | ELSEWHERE
    diff = {k: (a[k], b[k]) for k in a if k in b and k not in skip and a[k] != b[k]}
    assert not diff, "counters differ (dnsdist, dnslb): %r" % diff


def q(name, qtype=1, opt=None, qid=4321, **kw):
    return build_query(name, qtype=qtype, qid=qid, opt=opt, **kw)


def test_backend_answers_with_and_without_opt(pair):
    """The backend answers with an OPT RR when the query had none, without
    one when it had one, or echoes the query's."""
    p = pair(ONE)
    for proto in PROTOS:
        for opt in OPTS:
            for label in ("www", "withopt", "noopt", "nx"):
                p.query(q(label + ".example.test.", opt=opt), proto)
    same_counters(p)


@pytest.mark.parametrize("action", [
    "RCodeAction(DNSRCode.REFUSED)", "RCodeAction(DNSRCode.NXDOMAIN)",
    'SpoofAction("192.0.2.77")', 'SpoofAction({"192.0.2.77", "2001:db8::77"})',
    'SpoofCNAMEAction("target.example.")', "TCAction()",
    "ERCodeAction(DNSRCode.BADVERS)"])
def test_self_generated_answers(pair, action):
    p = pair(ONE + 'addAction("self.test.", %s)\n' % action)
    for proto in PROTOS:
        for opt in OPTS:
            for qtype in (1, 28):
                p.query(q("self.test.", qtype=qtype, opt=opt), proto)
    same_counters(p)


@pytest.mark.parametrize("settings", [
    "setPayloadSizeOnSelfGeneratedAnswers(4096)\n",
    "setPayloadSizeOnSelfGeneratedAnswers(100)\n",
    "setPayloadSizeOnSelfGeneratedAnswers(70000)\n",
    "setAddEDNSToSelfGeneratedResponses(false)\n"])
def test_self_generated_answer_settings(pair, settings):
    p = pair(ONE + settings + 'addAction("rc.test.", RCodeAction(DNSRCode.REFUSED))\n'
             'addAction("sp.test.", SpoofAction("192.0.2.77"))\n'
             'addAction("tc.test.", TCAction())\n')
    for proto in PROTOS:
        for opt in OPTS[:4]:
            for name in ("rc.test.", "sp.test.", "tc.test."):
                p.query(q(name, opt=opt), proto)
    same_counters(p)


def test_edns_option_rule(pair):
    p = pair(ONE + 'addAction(EDNSOptionRule(65001), RCodeAction(DNSRCode.REFUSED))\n'
             'addAction(EDNSOptionRule(10), SpoofAction("192.0.2.10"))\n')
    for proto in PROTOS:
        for opt in (None, {"payload": 1232}, {"options": [(65001, b"")]},
                    {"options": [(65002, b"x"), (65001, b"abc")]},
                    {"options": [(10, b"01234567")]}):
            p.query(q("www.example.test.", opt=opt), proto)
    same_counters(p)
