"""Lua in the rule engine end to end (dnsdist-api reference §1.11-1.12):
LuaAction returning every DNSAction, LuaRule reading the dq object
(qname:isPartOf, qtype, remoteaddr), tags carried from a LuaAction to a
LuaResponseAction, dr:editTTLs, the config's top-level helpers used from
rules (each worker state replays the config), two workers running Lua
concurrently, and the failure modes: a Lua error answers SERVFAIL (counted
in lua-errors), an endless loop is stopped by the instruction limit, a
failing LuaRule does not match, a rule calling newServer() fails.

The responder answers A 192.0.2.1 TTL 300 for ordinary names; a rule's own
answers are told apart by their addresses, rcodes and TTLs, and by the
backend never having seen the name.
"""

import select
import time

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import pytest

from dnslbtest import (RD, Header, UdpClient, a_addrs, build_query, lua_server, make_query,
                       parse, tcp_query, udp_query)

FAST = "setUDPTimeout(0.5)\n"


def ask(d, name, qtype="A", tcp=False, timeout=2.0, **kw):
    q = name if isinstance(name, dns.message.Message) else make_query(name, qtype, **kw)
    return (tcp_query if tcp else udp_query)(d.port, q, timeout=timeout)


def must(d, name, qtype="A", **kw):
    r = ask(d, name, qtype, **kw)
    assert r is not None, "no answer to %s %s from %s" % (name, qtype, d.name)
    return r


def seen(responder, name):
    n = name.lower()
    return sum(1 for q in responder.queries if q.qname and q.qname.lower() == n)


def records(msg, section="answer"):
    out = []
    for rrset in getattr(msg, section):
        for rd in rrset:
            out.append((rrset.name.to_text(), rrset.ttl, dns.rdatatype.to_text(rrset.rdtype),
                        rd.to_text()))
    return out


def counters(d, want, timeout=3.0):
    s = d.wait_stats(lambda s: all(s.get(k, 0) >= v for k, v in want.items()), timeout)
    got = {k: s.get(k) for k in want}
    assert got == want, "counters %r, expected %r" % (got, want)
    return s


def is_dnslb(d):
    return d.impl == "dnslb"

# ---------------------------------------------------------------------------
# LuaAction: every DNSAction


ACTIONS_CONF = r"""
local function la(suffix, f) addAction(suffix, LuaAction(f)) end
la("dropit.la.test.", function(dq) return DNSAction.Drop end)
la("nxd.la.test.", function(dq) return DNSAction.Nxdomain end)
la("ref.la.test.", function(dq) return DNSAction.Refused end)
la("sf.la.test.", function(dq) return DNSAction.ServFail end)
la("spoof.la.test.", function(dq) return DNSAction.Spoof, "192.0.2.1" end)
la("spoof6.la.test.", function(dq) return DNSAction.Spoof, "2001:db8::53" end)
la("cname.la.test.", function(dq) return DNSAction.Spoof, "cname.example." end)
la("pool.la.test.", function(dq) return DNSAction.Pool, "x" end)
la("allow.la.test.", function(dq) return DNSAction.Allow end)
la("none.la.test.", function(dq) return DNSAction.None end)
la("trunc.la.test.", function(dq) return DNSAction.Truncate end)
la("hm.la.test.", function(dq)
  dq.rcode = DNSRCode.REFUSED
  dq.dh:setQR(true)
  return DNSAction.HeaderModify
end)
la("delay.la.test.", function(dq) return DNSAction.Delay, "300" end)
la("norec.la.test.", function(dq) return DNSAction.NoRecurse end)
la("raw.la.test.", function(dq) return DNSAction.SpoofRaw, "\003abc\003def" end)
-- what comes after: tells "stopped" from "continued"
addAction({"allow.la.test.", "norec.la.test."}, DropAction())
addAction({"none.la.test.", "delay.la.test."}, SpoofAction("192.0.2.88"))
"""


def actions_daemon(dnslb, make_responder):
    r1, rx = make_responder(), make_responder()
    d = dnslb(lua_server(r1, name="b1") + lua_server(rx, name="xs", pool="x") + FAST
              + ACTIONS_CONF)
    return d, r1, rx


def test_lua_action_drop(dnslb, make_responder):
    d, r1, _ = actions_daemon(dnslb, make_responder)
    assert ask(d, "dropit.la.test.", timeout=1.0) is None
    assert ask(d, "dropit.la.test.", tcp=True, timeout=1.0) is None
    assert seen(r1, "dropit.la.test.") == 0
    counters(d, {"rule-drop": 2, "self-answered": 0})


@pytest.mark.parametrize("name,rcode,counter", [
    ("nxd.la.test.", dns.rcode.NXDOMAIN, "rule-nxdomain"),
    ("ref.la.test.", dns.rcode.REFUSED, "rule-refused"),
    ("sf.la.test.", dns.rcode.SERVFAIL, "rule-servfail")])
def test_lua_action_rcodes(dnslb, make_responder, name, rcode, counter):
    d, r1, _ = actions_daemon(dnslb, make_responder)
    q = make_query(name, "A", qid=0x55AA)
    r = must(d, q)
    assert r.rcode() == rcode and r.id == 0x55AA and r.flags & dns.flags.QR
    assert r.question[0].name.to_text() == name and r.answer == []
    assert must(d, name, tcp=True).rcode() == rcode
    assert seen(r1, name) == 0
    counters(d, {counter: 2, "self-answered": 2})


def test_lua_action_spoof_address(dnslb, make_responder):
    d, r1, _ = actions_daemon(dnslb, make_responder)
    r = must(d, "spoof.la.test.")
    assert records(r) == [("spoof.la.test.", 60, "A", "192.0.2.1")], \
        "not the spoofed answer (TTL 60): %r" % records(r)
    assert Header(r.to_wire()).qr and r.rcode() == dns.rcode.NOERROR
    r = must(d, "spoof6.la.test.", "AAAA")
    assert records(r) == [("spoof6.la.test.", 60, "AAAA", "2001:db8::53")]
    assert seen(r1, "spoof.la.test.") == 0 and seen(r1, "spoof6.la.test.") == 0
    counters(d, {"self-answered": 2})


def test_lua_action_spoof_cname(dnslb, make_responder):
    d, r1, _ = actions_daemon(dnslb, make_responder)
    for qt in ("A", "AAAA"):
        r = must(d, "cname.la.test.", qt)
        assert records(r) == [("cname.la.test.", 60, "CNAME", "cname.example.")], qt
    assert seen(r1, "cname.la.test.") == 0


def test_lua_action_spoof_raw(dnslb, make_responder):
    d, r1, _ = actions_daemon(dnslb, make_responder)
    r = must(d, "raw.la.test.", "TXT")
    assert records(r) == [("raw.la.test.", 60, "TXT", '"abc" "def"')]
    assert seen(r1, "raw.la.test.") == 0


def test_lua_action_pool(dnslb, make_responder):
    d, r1, rx = actions_daemon(dnslb, make_responder)
    for i in range(3):
        n = "n%d.pool.la.test." % i
        assert a_addrs(must(d, n)) == ["192.0.2.1"]
        assert seen(rx, n) == 1 and seen(r1, n) == 0, "not routed to pool x"
    assert a_addrs(must(d, "other.test.")) == ["192.0.2.1"]
    assert seen(r1, "other.test.") == 1 and seen(rx, "other.test.") == 0


def test_lua_action_allow_stops(dnslb, make_responder):
    d, r1, _ = actions_daemon(dnslb, make_responder)
    r = must(d, "allow.la.test.")
    assert records(r) == [("allow.la.test.", 300, "A", "192.0.2.1")]
    assert seen(r1, "allow.la.test.") == 1
    counters(d, {"rule-drop": 0})


@pytest.mark.parametrize("name", ["none.la.test."])
def test_lua_action_none_continues(dnslb, make_responder, name):
    """DNSAction.None goes on to the next rule (SpoofAction 192.0.2.88)."""
    d, r1, _ = actions_daemon(dnslb, make_responder)
    r = must(d, name)
    assert a_addrs(r) == ["192.0.2.88"]
    assert seen(r1, name) == 0


def test_lua_action_truncate(dnslb, make_responder):
    d, r1, _ = actions_daemon(dnslb, make_responder)
    r = must(d, "trunc.la.test.")
    h = Header(r.to_wire())
    assert h.tc and h.qr and r.answer == [] and r.rcode() == dns.rcode.NOERROR
    assert seen(r1, "trunc.la.test.") == 0
    # ignored over TCP: the backend's answer
    r = must(d, "trunc.la.test.", tcp=True)
    assert not Header(r.to_wire()).tc and a_addrs(r) == ["192.0.2.1"]
    assert seen(r1, "trunc.la.test.") == 1
    counters(d, {"rule-truncated": 1})


def test_lua_action_header_modify(dnslb, make_responder):
    d, r1, _ = actions_daemon(dnslb, make_responder)
    r = must(d, "hm.la.test.")
    assert r.rcode() == dns.rcode.REFUSED and Header(r.to_wire()).qr
    assert r.question[0].name.to_text() == "hm.la.test."
    assert seen(r1, "hm.la.test.") == 0
    counters(d, {"self-answered": 1})


def test_lua_action_delay(dnslb, make_responder):
    """DNSAction.Delay, "300" delays the answer (at least 300 ms; 10 ms of
    slack for the event loop's cached clock) and continues with the next
    rule, whose answer it is."""
    d, r1, _ = actions_daemon(dnslb, make_responder)
    with UdpClient(d.port) as c:
        t0 = time.monotonic()
        c.send(build_query("delay.la.test.", qid=3))
        a = c.recv(3.0)
        took = time.monotonic() - t0
    assert a is not None and a_addrs(a) == ["192.0.2.88"]
    assert took >= 0.29, "Delay 300 answered after %.3f s" % took


def test_lua_action_no_recurse(dnslb, make_responder):
    """NoRecurse clears RD and stops (the DropAction after it never runs)."""
    d, r1, _ = actions_daemon(dnslb, make_responder)
    r = must(d, "norec.la.test.")
    assert a_addrs(r) == ["192.0.2.1"]
    qs = r1.queries_for("norec.la.test.")
    assert len(qs) == 1 and not (qs[0].flags & RD), "the backend saw RD=1"
    assert Header(r.to_wire()).rd, "the client's RD was not restored"
    counters(d, {"rule-drop": 0})


def test_lua_action_answers_match_dnsdist(dnslb, make_responder):
    """The answers built from DNSAction values, next to dnsdist 1.7.3's."""
    import os
    from dnslbtest import DNSDIST, fields_diff, msg_fields
    if not os.access(DNSDIST, os.X_OK):
        pytest.skip("dnsdist is not installed")
    r1, rx = make_responder(), make_responder()
    c = lua_server(r1, name="b1") + lua_server(rx, name="xs", pool="x") + FAST + ACTIONS_CONF
    ours = dnslb(c, name="ours")
    try:
        theirs = dnslb(c, impl="dnsdist", name="dnsdist")
    except Exception as e:          # noqa: BLE001
        pytest.skip("dnsdist cannot be started here: %s" % e)
    bad = []
    qid = 1
    for name, qt in (("nxd.la.test.", "A"), ("ref.la.test.", "A"),
                     ("sf.la.test.", "AAAA"), ("spoof.la.test.", "A"),
                     ("spoof6.la.test.", "AAAA"), ("cname.la.test.", "A"),
                     ("trunc.la.test.", "A"), ("hm.la.test.", "A"), ("raw.la.test.", "TXT"),
                     ("none.la.test.", "A"), ("Spoof.LA.Test.", "A")):
        for edns in (-1, 0):
            for rd in (True, False):
                qid += 1
                w = make_query(name, qt, qid=qid, edns=edns, rd=rd).to_wire()
                with UdpClient(theirs.port) as t:
                    t.send(w)
                    b = t.recv(2.0)
                with UdpClient(ours.port) as o:
                    o.send(w)
                    a = o.recv(2.0)
                label = "%s %s edns=%d rd=%d" % (name, qt, edns, rd)
                if a is None or b is None:
                    if a is not b:
                        bad.append("%s: dnslb %r, dnsdist %r" % (label, a is not None,
                                                                 b is not None))
                    continue
                diff = fields_diff(msg_fields(a), msg_fields(b))
                if diff:
                    bad.append("%s: (dnslb, dnsdist) %r" % (label, diff))
    assert not bad, "\n".join(bad)

# ---------------------------------------------------------------------------
# LuaRule and the dq object


def test_lua_rule_dq_fields(dnslb, responder):
    d = dnslb(lua_server(responder) + FAST + r"""
lrzone = newDNSName("lr.test.")
addAction(LuaRule(function(dq) return dq.qname:isPartOf(lrzone) end), SpoofAction("192.0.2.91"))
addAction(LuaRule(function(dq) return dq.qtype == DNSQType.AAAA end),
          RCodeAction(DNSRCode.REFUSED))
addAction(LuaRule(function(dq) return dq.remoteaddr:toString() == "10.9.8.7" end), DropAction())
addAction(AndRule({LuaRule(function(dq) return dq.remoteaddr:toString() == "127.0.0.1" end),
                   makeRule("ra.test.")}), SpoofAction("192.0.2.93"))
""")
    for n in ("lr.test.", "a.b.LR.test."):
        r = must(d, n)
        assert a_addrs(r) == ["192.0.2.91"], n
        assert seen(responder, n) == 0
    r = must(d, "lrx.test.")
    assert a_addrs(r) == ["192.0.2.1"], "isPartOf matched another name"
    r = must(d, "v6.test.", "AAAA")
    assert r.rcode() == dns.rcode.REFUSED and seen(responder, "v6.test.") == 0
    r = must(d, "x.ra.test.")
    assert a_addrs(r) == ["192.0.2.93"]
    r = must(d, "x.ra.test.", tcp=True)
    assert a_addrs(r) == ["192.0.2.93"]
    counters(d, {"rule-drop": 0})


def test_lua_dq_spoof_and_get_do(dnslb, responder):
    """dq:spoof() + DNSAction.HeaderModify, and dq:getDO() in a LuaRule."""
    d = dnslb(lua_server(responder) + FAST + r"""
addAction("dqspoof.test.", LuaAction(function(dq)
  dq:spoof({newCA("192.0.2.71"), newCA("192.0.2.72")})
  return DNSAction.HeaderModify
end))
addAction(AndRule({makeRule("do.test."), LuaRule(function(dq) return dq:getDO() end)}),
          SpoofAction("192.0.2.73"))
""")
    for kw in ({}, {"tcp": True}):
        r = must(d, "dqspoof.test.", **kw)
        assert sorted(records(r)) == [("dqspoof.test.", 60, "A", "192.0.2.71"),
                                      ("dqspoof.test.", 60, "A", "192.0.2.72")], records(r)
    assert seen(responder, "dqspoof.test.") == 0
    r = must(d, "a.do.test.", edns=0, want_dnssec=True)
    assert a_addrs(r) == ["192.0.2.73"], "dq:getDO() was false with DO=1"
    r = must(d, "b.do.test.", edns=0)
    assert a_addrs(r) == ["192.0.2.1"], "dq:getDO() was true with DO=0"
    r = must(d, "c.do.test.")
    assert a_addrs(r) == ["192.0.2.1"]


def test_lua_tags_carried_to_response_action(dnslb, responder):
    d = dnslb(lua_server(responder) + FAST + r"""
addAction("tagme.test.", LuaAction(function(dq)
  dq:setTag("drop", "yes")
  return DNSAction.None
end))
addAction("settag.test.", SetTagAction("k", "v"))
addAction(LuaRule(function(dq) return dq:getTag("k") == "v" end), SpoofAction("192.0.2.94"))
addResponseAction(AllRule(), LuaResponseAction(function(dr)
  if dr:getTag("drop") == "yes" then return DNSResponseAction.Drop end
  return DNSResponseAction.None
end))
""")
    assert ask(d, "x.tagme.test.", timeout=1.0) is None, "the tagged answer was not dropped"
    assert ask(d, "y.tagme.test.", tcp=True, timeout=1.0) is None
    assert seen(responder, "x.tagme.test.") == 1, "the query should have been forwarded"
    assert a_addrs(must(d, "untagged.test.")) == ["192.0.2.1"]
    assert a_addrs(must(d, "settag.test.")) == ["192.0.2.94"]
    assert seen(responder, "settag.test.") == 0


def test_lua_response_action_edit_ttls(dnslb, responder):
    d = dnslb(lua_server(responder) + FAST + r"""
addResponseAction("edit.test.", LuaResponseAction(function(dr)
  dr:editTTLs(function(section, qclass, qtype, ttl)
    if section == DNSSection.Answer then return 42 end
    return math.floor(ttl / 2)
  end)
  return DNSResponseAction.None
end))
""")
    r = must(d, "ttl-300.edit.test.")
    assert records(r) == [("ttl-300.edit.test.", 42, "A", "192.0.2.1")]
    r = must(d, "ttl-300.edit.test.", tcp=True)
    assert records(r) == [("ttl-300.edit.test.", 42, "A", "192.0.2.1")]
    r = must(d, "nxdomain-300.edit.test.")
    assert r.rcode() == dns.rcode.NXDOMAIN
    assert [x[1] for x in records(r, "authority")] == [150]
    r = must(d, "ttl-300.noedit.test.")
    assert records(r)[0][1] == 300


def test_config_helpers_in_worker_states(dnslb, responder):
    """Top-level functions, tables, locals (upvalues) and globals of the
    config work unchanged inside rules."""
    d = dnslb(lua_server(responder) + FAST + r"""
local blocked = { ["bad.helper.test."] = true, ["worse.helper.test."] = true }
SPOOF_TO = "192.0.2.55"
counts = {}
function verdict(name)
  counts[name] = (counts[name] or 0) + 1
  if blocked[name] then return DNSAction.Refused end
  return DNSAction.None
end
local function lower_name(dq) return dq.qname:toString():lower() end
addAction(AllRule(), LuaAction(function(dq) return verdict(lower_name(dq)) end))
addAction("spoof.helper.test.", LuaAction(function(dq) return DNSAction.Spoof, SPOOF_TO end))
addAction(LuaRule(function(dq) return counts[lower_name(dq)] ~= nil and
                                      counts[lower_name(dq)] >= 2 end),
          SpoofAction("192.0.2.56"))
""")
    for n in ("bad.helper.test.", "WORSE.helper.test."):
        r = must(d, n)
        assert r.rcode() == dns.rcode.REFUSED, n
        assert seen(responder, n) == 0
    r = must(d, "x.spoof.helper.test.")
    assert a_addrs(r) == ["192.0.2.55"]
    r = must(d, "fine.helper.test.")
    assert a_addrs(r) == ["192.0.2.1"]


@pytest.mark.dnslb_only("--workers is dnslb's")
def test_two_workers_concurrent_lua(dnslb, responder):
    """Two workers, each with its own Lua state: 400 queries from 8 client
    sockets, up to 64 in flight; even ones are spoofed by a LuaAction with
    an address computed from the name, odd ones forwarded and their TTL set
    by a LuaResponseAction. Every answer must be the right one."""
    d = dnslb(lua_server(responder) + FAST + r"""
local function num(dq) return tonumber(dq.qname:toString():match("^n(%d+)%.")) end
addAction(AllRule(), LuaAction(function(dq)
  local k = num(dq)
  if k == nil or k % 2 == 1 then return DNSAction.None end
  return DNSAction.Spoof, "10.0." .. math.floor(k / 256) .. "." .. (k % 256)
end))
addResponseAction(AllRule(), LuaResponseAction(function(dr)
  local k = num(dr)
  if k ~= nil then
    dr:editTTLs(function(section, qclass, qtype, ttl) return k + 1000 end)
  end
  return DNSResponseAction.None
end))
""", args=["--workers", "2"])
    n, window = 400, 64
    clients = [UdpClient(d.port) for _ in range(8)]
    names, got = {}, {}
    try:
        sent = 0
        end = time.monotonic() + 30
        while len(got) < n and time.monotonic() < end:
            while sent < n and sent - len(got) < window:
                i = sent
                names[i] = "n%d.workers.test." % i
                clients[i % 8].send(build_query(names[i], qid=i))
                sent += 1
            r, _, _ = select.select([c.sock for c in clients], [], [], 3.0)
            if not r:
                break
            for sock in r:
                a = sock.recv(65535)
                got[Header(a).id] = a
    finally:
        for c in clients:
            c.close()
    assert len(got) == n, "answered %d of %d" % (len(got), n)
    bad = []
    for i, a in sorted(got.items()):
        m = parse(a)
        if m.question[0].name.to_text() != names[i]:
            bad.append("%d: answer for %s" % (i, m.question[0].name))
            continue
        if i % 2 == 0:
            want = [(names[i], 60, "A", "10.0.%d.%d" % (i // 256, i % 256))]
        else:
            want = [(names[i], i + 1000, "A", "192.0.2.1")]
        if records(m) != want:
            bad.append("%d: %r, expected %r" % (i, records(m), want))
    assert not bad, "%d wrong answers: %s" % (len(bad), "; ".join(bad[:10]))
    assert len(responder.queries_for("n")) == n // 2
    s = d.stats()
    assert s["lua-errors"] == 0
    assert s["self-answered"] == n // 2

# ---------------------------------------------------------------------------
# failures


def test_lua_action_error_servfail(dnslb, responder):
    d = dnslb(lua_server(responder) + FAST + r"""
addAction("err.test.", LuaAction(function(dq) error("boom") end))
addAction("nilcall.test.", LuaAction(function(dq) return dq.nosuchfield.x end))
""")
    for n in ("err.test.", "nilcall.test."):
        r = must(d, n)
        assert r.rcode() == dns.rcode.SERVFAIL, n
        assert seen(responder, n) == 0
    r = must(d, "x.err.test.", tcp=True)
    assert r.rcode() == dns.rcode.SERVFAIL
    # the others are still answered
    for i in range(5):
        assert a_addrs(must(d, "ok%d.test." % i)) == ["192.0.2.1"]
    assert must(d, "err.test.").rcode() == dns.rcode.SERVFAIL
    want = {"rule-servfail": 4}
    if is_dnslb(d):
        want["lua-errors"] = 4
    counters(d, want)


@pytest.mark.dnslb_only("setLuaInstructionLimit is dnslb's")
def test_lua_action_endless_loop_stopped(dnslb, responder):
    d = dnslb(lua_server(responder) + FAST + r"""
setLuaInstructionLimit(100000)
addAction("loop.test.", LuaAction(function(dq) while true do end end))
""")
    for i in range(3):
        r = ask(d, "loop.test.", timeout=5.0)
        assert r is not None, "the endless loop was not stopped"
        assert r.rcode() == dns.rcode.SERVFAIL
        assert a_addrs(must(d, "after%d.test." % i)) == ["192.0.2.1"]
    assert seen(responder, "loop.test.") == 0
    counters(d, {"lua-errors": 3})


@pytest.mark.dnslb_only("setLuaInstructionLimit is dnslb's")
def test_lua_rule_endless_loop_no_match(dnslb, responder):
    d = dnslb(lua_server(responder) + FAST + r"""
setLuaInstructionLimit(100000)
addAction(AndRule({makeRule("rloop.test."), LuaRule(function(dq)
  local x = 0
  while true do x = x + 1 end
end)}), DropAction())
""")
    r = ask(d, "rloop.test.", timeout=5.0)
    assert r is not None and a_addrs(r) == ["192.0.2.1"], "a stopped LuaRule matched"
    counters(d, {"lua-errors": 1, "rule-drop": 0})


def test_lua_rule_error_no_match(dnslb, responder):
    d = dnslb(lua_server(responder) + FAST + r"""
addAction(LuaRule(function(dq) error("rule boom") end), SpoofAction("192.0.2.99"))
addAction(LuaRule(function(dq) return dq.qname:nosuchmethod() end), DropAction())
""")
    for i in range(3):
        r = must(d, "lrerr%d.test." % i)
        assert a_addrs(r) == ["192.0.2.1"], "a failing LuaRule matched"
        assert seen(responder, "lrerr%d.test." % i) == 1
    want = {"rule-drop": 0, "self-answered": 0}
    if is_dnslb(d):
        want["lua-errors"] = 6
    counters(d, want)


@pytest.mark.dnslb_only("dnsdist allows newServer() from a rule")
def test_rule_calling_new_server_fails(dnslb, responder):
    d = dnslb(lua_server(responder, name="b1") + FAST + r"""
addAction("ns.test.", LuaAction(function(dq)
  newServer({address="127.0.0.1:9", name="fromrule"})
  return DNSAction.Spoof, "192.0.2.98"
end))
addAction(LuaRule(function(dq)
  newServer({address="127.0.0.1:9"})
  return true
end), DropAction())
""")
    r = must(d, "ns.test.")
    assert r.rcode() == dns.rcode.SERVFAIL, "newServer() from a LuaAction did not fail"
    # the LuaRule fails too: no match, the query is forwarded
    for i in range(4):
        r = must(d, "after%d.ns2.test." % i)
        assert a_addrs(r) == ["192.0.2.1"]
        assert seen(responder, "after%d.ns2.test." % i) == 1
    s = counters(d, {"lua-errors": 5, "rule-drop": 0})
    assert set(s["backends"]) == {"b1"}, "a server was added: %r" % sorted(s["backends"])


# ---------------------------------------------------------------------------
# Lua functions created at runtime (the console, maintenance()): the workers
# load their bytecode on first use


@pytest.mark.dnslb_only("dnsdist has one Lua state: nothing to hand over")
def test_lua_action_added_at_runtime_runs_in_the_workers(dnslb, responder):
    d = dnslb(lua_server(responder) + """
spoofto = "192.0.2.77"
local ticks = 0
function maintenance()
  ticks = ticks + 1
  if ticks == 1 then
    addAction("rt.lua.test.", LuaAction(function(dq)
      return DNSAction.Spoof, spoofto
    end))
    addAction(AndRule{QNameSuffixRule("rtrule.lua.test."), LuaRule(function(dq)
      return dq.qtype == DNSQType.A
    end)}, RCodeAction(DNSRCode.REFUSED))
    print("T added")
    local captured = "x"
    local ok, err = pcall(LuaAction, function(dq) return DNSAction.Spoof, captured end)
    print("T capture " .. tostring(ok) .. " " .. tostring(err))
  end
end
""")
    assert d.wait_line(lambda l: l.startswith("T added"), timeout=5.0) is not None, d.output()
    # both workers (a few queries, different source ports) run the new function
    for i in range(6):
        r = udp_query(d.port, "q%d.rt.lua.test." % i)
        assert r is not None and a_addrs(r) == ["192.0.2.77"], r
        r = udp_query(d.port, "q%d.rtrule.lua.test." % i)
        assert r is not None and r.rcode() == dns.rcode.REFUSED
    r = udp_query(d.port, "q0.rtrule.lua.test.", "AAAA")
    assert r is not None and r.rcode() == dns.rcode.NOERROR   # the LuaRule did not match
    out = d.output()
    assert "T capture false" in out and "cannot capture the local variable 'captured'" in out
    s = d.stats()
    assert s["lua-errors"] == 0
