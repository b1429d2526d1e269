"""EDNS: answers to queries with and without an OPT RR (the backend's answer
with or without one of its own), self-generated answers with odd payload
sizes and the DO bit, EDNS options in rules, Lua and SetEDNSOptionAction."""

import pytest

import diffharness
from diffharness import build_query, known

PROTOS = ("udp", "tcp")
ONE = 'newServer({address="@B0@"})\n'

# Counters other areas are bringing in line (see test_answers.py): compared
# here value for value, all but these.
ELSEWHERE = {"tcp-listen-overflows", "rule-refused", "rule-nxdomain",
             "rule-servfail"}

OPTS = (None, {"payload": 512}, {"payload": 100}, {"payload": 1232, "do": True},
        {"payload": 4096, "options": [(65001, b"abc")]}, {"payload": 65535, "do": True},
        {"payload": 1232, "version": 1}, {"payload": 1232, "ext_rcode": 1})


def same_counters(p):
    diffharness.same_counters(p, ELSEWHERE)


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


SET_OPT = ('addAction("set.test.", SetEDNSOptionAction(65001, "hello"))\n'
           'addAction("set2.test.", SetEDNSOptionAction(65002, "x"))\n'
           'addAction("set2.test.", SetEDNSOptionAction(65001, "again"))\n'
           'addAction("set3.test.", SetEDNSOptionAction(65003, ""))\n')


def test_set_edns_option_action(pair):
    """What the backend receives, and what the client gets back (the OPT
    RR the action added is removed from the answer)."""
    p = pair(ONE + SET_OPT)
    for proto in PROTOS:
        for opt in (None, {"payload": 1232}, {"payload": 100},
                    {"options": [(65001, b"old"), (10, b"12345678"), (65001, b"x")]}):
            for name in ("set.test.", "set2.test.", "withopt.set.test.", "noopt.set.test."):
                p.query(q(name, opt=opt), proto)
                p.query(q(name, opt=opt, trailing=b"TT"), proto)
        p.query(q("set3.test."), proto)
    same_counters(p)


def test_set_edns_option_then_rule(pair):
    """A later EDNSOptionRule sees the option the action added."""
    p = pair(ONE + SET_OPT + 'addAction(EDNSOptionRule(65002), SpoofAction("192.0.2.2"))\n'
             'addAction(EDNSOptionRule(65001), RCodeAction(DNSRCode.NXDOMAIN))\n')
    for proto in PROTOS:
        for opt in (None, {"payload": 1232}, {"payload": 100},
                    {"options": [(65001, b"old"), (10, b"12345678")]}):
            for name in ("set.test.", "set2.test.", "other.test."):
                p.query(q(name, opt=opt), proto)
    same_counters(p)


SET_DO = "SetEDNSOptionAction keeps the query's EDNS flags"
SET_EMPTY = "SetEDNSOptionAction with empty data adds an empty option"


def test_set_edns_option_action_do_bit(pair):
    """dnsdist 1.7.3 rewrites the OPT RR's TTL a byte off: the DO bit lands
    in the version field (0x00008000 becomes 0x00800000). dnslb keeps it."""
    p = pair(ONE + SET_OPT)
    known(SET_DO)
    for proto in PROTOS:
        wire = q("set.test.", opt={"payload": 4096, "do": True})
        theirs, ours = p.answers(wire, proto)
        (_, ta), = p.new_backend_queries(p.theirs)
        (_, oa), = p.new_backend_queries(p.ours)
        opt_at = 12 + len(diffharness.dnslbtest.question_bytes(wire))
        assert ta[opt_at + 5:opt_at + 9] == b"\x00\x80\x00\x00"
        assert oa[opt_at + 5:opt_at + 9] == b"\x00\x00\x80\x00"
        assert oa[:opt_at + 5] + oa[opt_at + 9:] == ta[:opt_at + 5] + ta[opt_at + 9:]
        assert ours[:2] == theirs[:2] and ours is not None


def test_set_edns_option_action_empty_data(pair):
    """On a query with an OPT RR, dnsdist 1.7.3 drops the query when the
    option's data is empty (its rewrite throws); dnslb adds the option."""
    p = pair(ONE + SET_OPT)
    known(SET_EMPTY)
    for proto in PROTOS:
        wire = q("set3.test.", opt={"payload": 1232})
        theirs, ours = p.answers(wire, proto)
        assert theirs is None and ours is not None
        assert p.new_backend_queries(p.theirs) == []
        (_, oa), = p.new_backend_queries(p.ours)
        assert oa == diffharness.strip_id(q("set3.test.", opt={
            "payload": 1232, "options": [(65003, b"")]}))


def test_set_edns_option_action_show_rules(pair):
    p = pair(ONE + 'addAction("set.test.", SetEDNSOptionAction(65001, "hello"))\n')
    p.console("showRules()")


EDNS_LUA = '''
function hex(s)
  return (s:gsub(".", function(c) return string.format("%02x", string.byte(c)) end))
end
function summary(dq)
  local opts = dq:getEDNSOptions()
  local codes = {}
  for code, _ in pairs(opts) do table.insert(codes, code) end
  table.sort(codes)
  local out = "n" .. #codes
  for _, code in ipairs(codes) do
    local view = opts[code]
    out = out .. "-" .. code .. "x" .. view:count()
    for _, v in ipairs(view:getValues()) do out = out .. "v" .. hex(v) end
  end
  return out
end
function qopts(dq)
  return DNSAction.Spoof, summary(dq) .. ".example."
end
function ropts(dr)
  dr:setTrailingData(summary(dr))
  return DNSResponseAction.None, ""
end
'''


def test_get_edns_options(pair):
    """dq:getEDNSOptions() in LuaAction and LuaResponseAction."""
    p = pair(ONE + EDNS_LUA + 'addAction("lua.test.", LuaAction(qopts))\n'
             'addResponseAction(AllRule(), LuaResponseAction(ropts))\n')
    for proto in PROTOS:
        for opt in (None, {"payload": 1232}, {"options": [(65001, b"ab")]},
                    {"options": [(65001, b"ab"), (10, b"12345678"), (65001, b""), (8, b"\0\1\x18\0\xc0\0\2")]}):
            p.query(q("lua.test.", opt=opt), proto)
            for name in ("www.example.test.", "withopt.example.test.", "noopt.example.test."):
                p.query(q(name, opt=opt), proto)
    same_counters(p)


@pytest.mark.parametrize("conf", [
    "setPayloadSizeOnSelfGeneratedAnswers(4096)\n", "setPayloadSizeOnSelfGeneratedAnswers(100)\n",
    "setPayloadSizeOnSelfGeneratedAnswers(1500)\n", "truncateTC(true)\n",
    'addAction(AllRule(), SetEDNSOptionAction(65001, "abc"))\n'])
def test_check_config(workdir, conf):
    diffharness.same_check_config(workdir, conf)


SET_TRAIL = "EDNSOptionRule after an OPT RR appended to trailing data"


def test_set_edns_option_trailing_then_rule(pair):
    """An OPT RR appended after trailing data (both do that) leaves a message
    that does not parse: dnsdist 1.7.3 drops the query when a later
    EDNSOptionRule looks at it; in dnslb the rule does not match."""
    p = pair(ONE + SET_OPT + 'addAction(EDNSOptionRule(65001), RCodeAction(DNSRCode.NXDOMAIN))\n')
    known(SET_TRAIL)
    for proto in PROTOS:
        wire = q("set.test.", trailing=b"TT")
        theirs, ours = p.answers(wire, proto)
        assert theirs is None and ours is not None
        assert p.new_backend_queries(p.theirs) == []
        (_, oa), = p.new_backend_queries(p.ours)
        sent = bytearray(diffharness.strip_id(wire))
        sent[11] = 1
        assert oa == bytes(sent) + diffharness.dnslbtest.opt_rr(
            payload=512, options=[(65001, b"hello")])
