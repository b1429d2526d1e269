"""The rule engine end to end (dnsdist-api reference §1.7-1.10): addAction
with the selector shorthands and makeRule, every query action's effect on
the answer, the counters and what reaches the backend, every selector
(matched and not matched), the response chains (addResponseAction,
addCacheHitResponseAction, addSelfAnsweredResponseAction,
addCacheInsertedResponseAction), rule management from the config (rmRule,
mvRule, mvRuleToTop, clearRules, setRules/newRuleAction), showRules' table
and the config errors, with Debian's dnsdist 1.7.3 side by side where dnslb
must answer the same.

Conventions: a selector "matches" when its rule's action (RCodeAction
REFUSED or SpoofAction 192.0.2.99) answered and the backend never saw the
name; "does not match" when the responder's own answer (192.0.2.1, TTL 300)
came back. Every name is unique within a test so the responder's record of
queries tells which ones reached it.

No "faster than" timing assertions: DelayAction/DelayResponseAction are
checked as "at least the requested delay", rate limits with bounds that
grow with the time the burst took to send.
"""

import math
import os
import re
import socket
import subprocess
import time

import dns.edns
import dns.exception
import dns.flags
import dns.message
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import pytest

from dnslbtest import (AA, DNSDIST, IMPL, RD, Header, TcpClient, UdpClient, a_addrs,
                       build_query, dnslb_bin, fields_diff, free_port, lua_server, make_query,
                       msg_fields, parse, tcp_query, udp_query, udp_raw, wait_until)
from responder import REAL_AAAA, REAL_ADDR, _opt_rr, _rr

FAST = "setUDPTimeout(0.5)\n"
MARK = "192.0.2.99"
MARK6 = "2001:db8::99"
SPOOF_MARK = 'SpoofAction({"%s", "%s"})' % (MARK, MARK6)
REFUSE = "RCodeAction(DNSRCode.REFUSED)"
SOA_ARGS = '"example.", 3600, "ns.example.", "hostmaster.example.", 42, 7200, 900, 1209600, 300'


def conf(responder, extra="", name="b1"):
    return lua_server(responder, name=name) + FAST + extra


def ask(d, name, qtype="A", tcp=False, timeout=2.0, **kw):
    """A dnspython query (a name, or a ready Message); the answer or None."""
    q = name if isinstance(name, dns.message.Message) else make_query(name, qtype, **kw)
    return (tcp_query if tcp else udp_query)(d.port, q, timeout=timeout)


def must(d, name, qtype="A", **kw):
    r = ask(d, name, qtype, **kw)
    assert r is not None, "no answer to %s %s from %s" % (name, qtype, d.name)
    return r


def seen(responder, name):
    """How many queries for exactly @name (case-insensitive) the backend got."""
    n = name.lower()
    return sum(1 for q in responder.queries if q.qname and q.qname.lower() == n)


def counters(d, want, timeout=3.0):
    """Wait until every counter in @want reached its value, then check they
    are exactly that. @return the stats."""
    s = d.wait_stats(lambda s: all(s.get(k, 0) >= v for k, v in want.items()), timeout)
    got = {k: s.get(k) for k in want}
    assert got == want, "counters %r, expected %r" % (got, want)
    return s


def records(msg, section="answer"):
    """[(owner, ttl, class, type, rdata text)] in wire order."""
    out = []
    for rrset in getattr(msg, section):
        for rd in rrset:
            out.append((rrset.name.to_text(), rrset.ttl, dns.rdataclass.to_text(rrset.rdclass),
                        dns.rdatatype.to_text(rrset.rdtype), rd.to_text()))
    return out


def ttls(msg, section="answer"):
    return [r[1] for r in records(msg, section)]


def refused_by_rule(responder, r, name):
    return r is not None and r.rcode() == dns.rcode.REFUSED and seen(responder, name) == 0


def forwarded(responder, r, name):
    return (r is not None and r.rcode() == dns.rcode.NOERROR and seen(responder, name) >= 1)


def dnsdist_ok():
    return os.access(DNSDIST, os.X_OK)


def impl_bin():
    return DNSDIST if IMPL == "dnsdist" else dnslb_bin()


@pytest.fixture
def pair(dnslb, responder):
    """(dnslb, dnsdist 1.7.3) with the same config and the same responder."""
    if not dnsdist_ok():
        pytest.skip("dnsdist is not installed (%s)" % DNSDIST)

    def start(extra, servers=None):
        c = (servers if servers is not None else lua_server(responder, name="b1")) + FAST + extra
        ours = dnslb(c, name="ours")
        try:
            theirs = dnslb(c, impl="dnsdist", name="dnsdist")
        except Exception as e:          # noqa: BLE001
            pytest.skip("dnsdist cannot be started here: %s" % e)
        return ours, theirs
    return start


def exchange(port, wire, tcp=False, timeout=2.0):
    if tcp:
        with TcpClient(port) as c:
            c.send_msg(wire)
            return c.recv_msg(timeout)
    with UdpClient(port) as c:
        c.send(wire)
        return c.recv(timeout)


def compare_all(ours, theirs, cases, normalize=None):
    """Send each (label, wire, tcp) to both; @return the list of differences
    (an empty list when every answer matched field by field; answers
    dnspython cannot parse, e.g. SpoofRawAction's TXT rdata asked as A, are
    compared byte by byte). @normalize(label, fields) adjusts dnslb's fields
    for a deliberate difference."""
    bad = []
    for label, wire, tcp in cases:
        b = exchange(theirs.port, wire, tcp)
        a = exchange(ours.port, wire, tcp)
        if b is None and a is None:
            continue
        if a is None or b is None:
            bad.append("%s: dnslb %s, dnsdist %s" % (label, "answered" if a else "no answer",
                                                     "answered" if b else "no answer"))
            continue
        if len(a) < 12 or len(b) < 12:
            bad.append("%s: a %d-byte answer: dnslb %s, dnsdist %s" % (
                label, min(len(a), len(b)), a.hex() or "(empty)", b.hex() or "(empty)"))
            continue
        try:
            fa, fb = msg_fields(a), msg_fields(b)
        except dns.exception.DNSException:
            if a != b:
                bad.append("%s: bytes differ: dnslb %s, dnsdist %s" % (label, a.hex(), b.hex()))
            continue
        if normalize:
            fa = normalize(label, fa)
        diff = fields_diff(fa, fb)
        if diff:
            bad.append("%s: (dnslb, dnsdist) %r" % (label, diff))
    return bad


def query_variants(names, qtypes=("A", "AAAA", "ANY", "TXT"), tcp=(False,)):
    """Raw queries over names x qtypes x {no EDNS, EDNS, EDNS+DO} x RD on/off."""
    out = []
    qid = 100
    for name in names:
        for qt in qtypes:
            if name.lower().startswith("raw.") and qt != "TXT":
                continue        # TXT rdata as another type: unparseable, and shuffled
            for ek, opt in (("noedns", None), ("edns", {"payload": 1232}),
                            ("do", {"payload": 4096, "do": True})):
                for rd in (True, False):
                    for t in tcp:
                        qid += 1
                        w = build_query(name, qtype=dns.rdatatype.from_text(qt), qid=qid,
                                        flags=RD if rd else 0, opt=opt)
                        out.append(("%s %s %s rd=%d %s" % (name, qt, ek, rd, "tcp" if t else "udp"),
                                    w, t))
    return out

# ---------------------------------------------------------------------------
# addAction: the selector shorthands and makeRule


def test_shorthand_suffix_string(dnslb, responder):
    d = dnslb(conf(responder, 'addAction("blocked.test.", %s)\n' % REFUSE))
    for n in ("blocked.test.", "www.blocked.test.", "A.B.BLOCKED.Test."):
        assert refused_by_rule(responder, ask(d, n), n), n
    for n in ("notblocked.test.", "blocked.test.other.", "test."):
        assert forwarded(responder, ask(d, n), n), n
    # RCodeAction: self-answered only, as in dnsdist (a header change there)
    counters(d, {"rule-refused": 0, "self-answered": 3})


def test_shorthand_table_of_suffixes(dnslb, responder):
    d = dnslb(conf(responder, 'addAction({"t1.test.", "t2.test."}, %s)\n' % REFUSE))
    for n in ("x.t1.test.", "t2.test.", "y.z.t2.test."):
        assert refused_by_rule(responder, ask(d, n), n), n
    for n in ("t3.test.", "xt1.test."):
        assert forwarded(responder, ask(d, n), n), n


def test_shorthand_netmask_string(dnslb, responder):
    """"192.0.2.0/24" (not the client) must not match; "127.0.0.0/8" must.
    Were the first one a suffix (or matching everything) the query would be
    dropped."""
    d = dnslb(conf(responder, 'addAction("192.0.2.0/24", DropAction())\n'
                              'addAction("127.0.0.0/8", %s)\n' % REFUSE))
    assert refused_by_rule(responder, ask(d, "nm.test."), "nm.test.")
    counters(d, {"rule-refused": 0, "rule-drop": 0, "self-answered": 1})


def test_shorthand_netmask_no_match_forwards(dnslb, responder):
    d = dnslb(conf(responder, 'addAction("192.0.2.0/24", DropAction())\n'
                              'addAction({"10.0.0.0/8", "::2/128"}, DropAction())\n'))
    assert forwarded(responder, ask(d, "nm2.test."), "nm2.test.")
    counters(d, {"rule-drop": 0})


def test_make_rule(dnslb, responder):
    d = dnslb(conf(responder,
                   'addAction(makeRule("mk.test."), %s)\n' % REFUSE
                   + 'addAction(makeRule({"mk1.test.", "mk2.test."}), %s)\n' % REFUSE
                   + 'addAction(AndRule({makeRule("127.0.0.1"), makeRule("mkip.test.")}), %s)\n'
                   % SPOOF_MARK
                   + 'addAction(AndRule({makeRule("192.0.2.1/32"), makeRule("mknot.test.")}),'
                   ' %s)\n' % SPOOF_MARK))
    for n in ("a.mk.test.", "mk1.test.", "b.mk2.test."):
        assert refused_by_rule(responder, ask(d, n), n), n
    assert forwarded(responder, ask(d, "mk3.test."), "mk3.test.")
    r = must(d, "mkip.test.")
    assert a_addrs(r) == [MARK] and seen(responder, "mkip.test.") == 0
    r = must(d, "mknot.test.")
    assert a_addrs(r) == ["192.0.2.1"]

# ---------------------------------------------------------------------------
# query actions


def test_drop_action(dnslb, responder):
    d = dnslb(conf(responder, 'addAction("dropme.test.", DropAction())\n'))
    assert ask(d, "dropme.test.", timeout=1.0) is None, "DropAction answered"
    assert ask(d, "x.dropme.test.", tcp=True, timeout=1.0) is None, "DropAction answered (TCP)"
    assert seen(responder, "dropme.test.") == 0 and seen(responder, "x.dropme.test.") == 0
    assert forwarded(responder, ask(d, "keep.test."), "keep.test.")
    counters(d, {"rule-drop": 2, "self-answered": 0})


@pytest.mark.parametrize("rc", ["REFUSED", "NXDOMAIN", "SERVFAIL"])
def test_rcode_action(dnslb, responder, rc):
    d = dnslb(conf(responder, 'addAction("rc.test.", RCodeAction(DNSRCode.%s))\n' % rc))
    q = make_query("www.rc.test.", "A", qid=0x4321)
    r = must(d, q)
    assert r.rcode() == dns.rcode.from_text(rc)
    assert r.id == 0x4321 and r.flags & dns.flags.QR
    assert r.question[0].name.to_text() == "www.rc.test."
    assert r.answer == [] and r.authority == []
    h = Header(r.to_wire())
    assert h.rd and h.ra, "RA is copied from RD by default (dnsdist): %r" % h
    assert not h.aa
    r = must(d, "www.rc.test.", tcp=True)
    assert r.rcode() == dns.rcode.from_text(rc)
    assert seen(responder, "www.rc.test.") == 0, "the backend saw a query a rule answered"
    want = {"rule-refused": 0, "rule-nxdomain": 0, "rule-servfail": 0, "self-answered": 2}
    counters(d, want)


def test_rcode_action_options(dnslb, responder):
    d = dnslb(conf(responder, 'addAction("rco.test.", RCodeAction(DNSRCode.NXDOMAIN, '
                              '{aa=true, ra=false}))\n'))
    r = must(d, "rco.test.")
    h = Header(r.to_wire())
    assert r.rcode() == dns.rcode.NXDOMAIN and h.aa and not h.ra and h.rd


def test_allow_action_stops_later_rules(dnslb, responder):
    d = dnslb(conf(responder, 'addAction("allow.test.", AllowAction())\n'
                              'addAction(AllRule(), DropAction())\n'))
    assert forwarded(responder, ask(d, "x.allow.test."), "x.allow.test.")
    assert ask(d, "other.test.", timeout=1.0) is None
    counters(d, {"rule-drop": 1})


def test_none_action_continues(dnslb, responder):
    d = dnslb(conf(responder, 'addAction("none.test.", NoneAction())\n'
                              'addAction("none.test.", %s)\n' % REFUSE))
    assert refused_by_rule(responder, ask(d, "none.test."), "none.test.")


def two_pools(r1, r2):
    return lua_server(r1, name="d1") + lua_server(r2, name="p2s", pool="p2")


def test_pool_action_routes(dnslb, make_responder):
    r1, r2 = make_responder(), make_responder()
    d = dnslb(two_pools(r1, r2) + FAST + 'addAction("p2.test.", PoolAction("p2"))\n')
    for i in range(5):
        assert must(d, "n%d.p2.test." % i).rcode() == dns.rcode.NOERROR
        assert must(d, "n%d.default.test." % i).rcode() == dns.rcode.NOERROR
    assert len(r2.queries_for("n")) == 5 and all("p2.test" in q.qname for q in r2.queries_for("n"))
    assert len(r1.queries_for("n")) == 5 and all("default" in q.qname
                                                 for q in r1.queries_for("n"))
    # over TCP as well
    assert must(d, "tcp.p2.test.", tcp=True).rcode() == dns.rcode.NOERROR
    assert seen(r2, "tcp.p2.test.") == 1 and seen(r1, "tcp.p2.test.") == 0


def test_pool_action_is_terminal(dnslb, make_responder):
    r1, r2 = make_responder(), make_responder()
    d = dnslb(two_pools(r1, r2) + FAST + 'addAction("stop.test.", PoolAction("p2"))\n'
              'addAction("stop.test.", DropAction())\n')
    assert must(d, "stop.test.").rcode() == dns.rcode.NOERROR
    assert seen(r2, "stop.test.") == 1


@pytest.mark.dnslb_only("PoolAction's stop argument is dnsdist 1.8")
def test_pool_action_stop_false_continues(dnslb, make_responder):
    r1, r2 = make_responder(), make_responder()
    d = dnslb(two_pools(r1, r2) + FAST +
              'addAction("cont.test.", PoolAction("p2", false))\n'
              'addAction("dropit.cont.test.", DropAction())\n'
              'addAction("ref.cont.test.", %s)\n' % REFUSE)
    # continued, nothing else matched: still to pool p2
    assert must(d, "x.cont.test.").rcode() == dns.rcode.NOERROR
    assert seen(r2, "x.cont.test.") == 1 and seen(r1, "x.cont.test.") == 0
    # continued into a later rule
    assert ask(d, "dropit.cont.test.", timeout=1.0) is None
    r = must(d, "ref.cont.test.")
    assert r.rcode() == dns.rcode.REFUSED
    assert seen(r2, "ref.cont.test.") == 0 and seen(r2, "dropit.cont.test.") == 0


@pytest.mark.dnslb_only("dnsdist 1.7.3 drops it without counting no-policy")
def test_pool_action_missing_pool(dnslb, responder):
    """A pool with no server: no-policy, the backend of the default pool
    never sees it."""
    d = dnslb(conf(responder, 'addAction("nopool.test.", PoolAction("nosuchpool"))\n'
                              'setServFailWhenNoServer(true)\n'))
    r = ask(d, "nopool.test.")
    assert r is not None and r.rcode() == dns.rcode.SERVFAIL
    assert seen(responder, "nopool.test.") == 0
    counters(d, {"no-policy": 1})


def test_tc_action(dnslb, responder):
    d = dnslb(conf(responder, 'addAction("tc.test.", TCAction())\n'))
    r = must(d, "www.tc.test.")
    h = Header(r.to_wire())
    assert h.tc and h.qr and r.rcode() == dns.rcode.NOERROR and r.answer == []
    assert seen(responder, "www.tc.test.") == 0
    # over TCP the action is ignored: the real answer
    r = must(d, "www.tc.test.", tcp=True)
    assert not Header(r.to_wire()).tc
    assert a_addrs(r) == ["192.0.2.1"] and seen(responder, "www.tc.test.") == 1
    counters(d, {"rule-truncated": 1})


def check_spoof_header(r, qname, aa=False, rd=True):
    h = Header(r.to_wire())
    assert h.qr and h.opcode == 0 and not h.tc and h.rcode == 0
    assert h.aa == aa, "AA=%d, expected %d" % (h.aa, aa)
    assert h.rd == rd and h.ra == rd, "RD/RA %r" % h
    assert [q.name.to_text() for q in r.question] == [qname]


def test_spoof_action_records(dnslb, responder):
    d = dnslb(conf(responder,
                   'addAction("sp.test.", SpoofAction({"192.0.2.10", "192.0.2.11", '
                   '"2001:db8::10"}))\n'
                   'addAction("spttl.test.", SpoofAction("192.0.2.20", {ttl=3600, aa=true}))\n'
                   'addAction("sp6.test.", SpoofAction("2001:db8::20"))\n'))
    r = must(d, "www.sp.test.", "A")
    check_spoof_header(r, "www.sp.test.")
    assert sorted(records(r)) == [("www.sp.test.", 60, "IN", "A", "192.0.2.10"),
                                  ("www.sp.test.", 60, "IN", "A", "192.0.2.11")]
    assert r.authority == [] and r.additional == []
    r = must(d, "www.sp.test.", "AAAA")
    assert records(r) == [("www.sp.test.", 60, "IN", "AAAA", "2001:db8::10")]
    r = must(d, "www.sp.test.", "ANY")
    assert sorted(records(r)) == sorted([("www.sp.test.", 60, "IN", "A", "192.0.2.10"),
                                         ("www.sp.test.", 60, "IN", "A", "192.0.2.11"),
                                         ("www.sp.test.", 60, "IN", "AAAA", "2001:db8::10")])
    # neither A, AAAA nor ANY: the action does nothing, the query is forwarded
    # (dnsdist 1.7.3)
    r = must(d, "www.sp.test.", "TXT")
    assert records(r) == [("www.sp.test.", 300, "IN", "TXT", '"hello"')]
    assert seen(responder, "www.sp.test.") == 1
    # the client's case is echoed in the question and the owner names
    r = must(d, "WwW.Sp.TeSt.", "A", rd=False)
    check_spoof_header(r, "WwW.Sp.TeSt.", rd=False)
    assert {x[0] for x in records(r)} == {"WwW.Sp.TeSt."}
    # ttl and aa options
    r = must(d, "spttl.test.", "A")
    check_spoof_header(r, "spttl.test.", aa=True)
    assert records(r) == [("spttl.test.", 3600, "IN", "A", "192.0.2.20")]
    # an IPv6-only spoof asked for A: no address to give, the action does
    # nothing and the query is forwarded (dnsdist 1.7.3's SpoofAction)
    r = must(d, "sp6.test.", "A")
    assert records(r) == [("sp6.test.", 300, "IN", "A", "192.0.2.1")]
    assert seen(responder, "sp6.test.") == 1
    assert records(must(d, "sp6.test.", "AAAA")) == [("sp6.test.", 60, "IN", "AAAA",
                                                      "2001:db8::20")]
    assert seen(responder, "sp6.test.") == 1
    # over TCP too
    r = must(d, "tcp.sp.test.", "A", tcp=True)
    assert len(records(r)) == 2
    for n in ("spttl.test.", "tcp.sp.test."):
        assert seen(responder, n) == 0
    assert seen(responder, "www.sp.test.") == 1
    counters(d, {"self-answered": 7})


def test_spoof_action_with_edns(dnslb, responder):
    d = dnslb(conf(responder, 'addAction("spe.test.", SpoofAction("192.0.2.10"))\n'))
    r = must(d, "spe.test.", "A", edns=0, payload=1400, want_dnssec=True)
    assert r.edns == 0, "a query with EDNS got a spoofed answer without"
    assert records(r) == [("spe.test.", 60, "IN", "A", "192.0.2.10")]
    r = must(d, "spe.test.", "A")
    assert r.edns < 0, "a query without EDNS got an OPT back"


def test_spoof_cname_action(dnslb, responder):
    d = dnslb(conf(responder, 'addAction("cn.test.", SpoofCNAMEAction("target.example."))\n'
                              'addAction("cnttl.test.", SpoofCNAMEAction("t2.example.", '
                              '{ttl=120, aa=true}))\n'))
    for qt in ("A", "AAAA", "TXT"):
        r = must(d, "www.cn.test.", qt)
        check_spoof_header(r, "www.cn.test.")
        assert records(r) == [("www.cn.test.", 60, "IN", "CNAME", "target.example.")], qt
    r = must(d, "cnttl.test.")
    check_spoof_header(r, "cnttl.test.", aa=True)
    assert records(r) == [("cnttl.test.", 120, "IN", "CNAME", "t2.example.")]
    assert seen(responder, "www.cn.test.") == 0 and seen(responder, "cnttl.test.") == 0


def test_spoof_raw_action(dnslb, responder):
    d = dnslb(conf(responder,
                   r'addAction("raw.test.", SpoofRawAction("\003abc\003def"))' "\n"
                   r'addAction("raw2.test.", SpoofRawAction({"\005hello", "\005world"}, {ttl=30}))'
                   "\n"
                   r'addAction("rawa.test.", SpoofRawAction("\192\000\002\077"))' "\n"))
    r = must(d, "raw.test.", "TXT")
    check_spoof_header(r, "raw.test.")
    assert records(r) == [("raw.test.", 60, "IN", "TXT", '"abc" "def"')]
    r = must(d, "raw2.test.", "TXT")
    assert sorted(records(r)) == [("raw2.test.", 30, "IN", "TXT", '"hello"'),
                                  ("raw2.test.", 30, "IN", "TXT", '"world"')]
    # the rdata is of the query's type, whatever it is
    r = must(d, "rawa.test.", "A")
    assert records(r) == [("rawa.test.", 60, "IN", "A", "192.0.2.77")]
    for n in ("raw.test.", "raw2.test.", "rawa.test."):
        assert seen(responder, n) == 0


def soa_text(serial=42):
    return "ns.example. hostmaster.example. %d 7200 900 1209600 300" % serial


def test_negative_and_soa_action(dnslb, responder):
    """The SOA goes to the additional section, as dnsdist 1.7.3 does
    (rules.h: soa_in_authority defaults to false)."""
    d = dnslb(conf(responder,
                   'addAction("nxd.test.", NegativeAndSOAAction(true, %s))\n' % SOA_ARGS
                   + 'addAction("nodata.test.", NegativeAndSOAAction(false, %s))\n' % SOA_ARGS))
    r = must(d, "www.nxd.test.", "A")
    h = Header(r.to_wire())
    assert r.rcode() == dns.rcode.NXDOMAIN and h.qr
    assert r.answer == [] and r.authority == []
    assert records(r, "additional") == [("example.", 3600, "IN", "SOA", soa_text())]
    r = must(d, "www.nodata.test.", "AAAA")
    assert r.rcode() == dns.rcode.NOERROR and r.answer == [] and r.authority == []
    assert records(r, "additional") == [("example.", 3600, "IN", "SOA", soa_text())]
    assert seen(responder, "www.nxd.test.") == 0 and seen(responder, "www.nodata.test.") == 0
    counters(d, {"self-answered": 2})


@pytest.mark.dnslb_only("soaInAuthoritySection is dnsdist 1.8")
def test_negative_and_soa_in_authority(dnslb, responder):
    d = dnslb(conf(responder,
                   'addAction("nxda.test.", NegativeAndSOAAction(true, %s, '
                   '{soaInAuthoritySection=true, aa=true}))\n' % SOA_ARGS))
    for kw in ({}, {"edns": 0}, {"tcp": True}):
        r = must(d, "www.nxda.test.", "A", **kw)
        assert r.rcode() == dns.rcode.NXDOMAIN and r.answer == []
        assert Header(r.to_wire()).aa
        assert records(r, "authority") == [("example.", 3600, "IN", "SOA", soa_text())]
        assert records(r, "additional") == []
        if kw.get("edns") == 0:
            assert r.edns == 0
    assert seen(responder, "www.nxda.test.") == 0


def test_selectors_qtype(dnslb, responder):
    d = dnslb(conf(responder, 'addAction(QTypeRule(DNSQType.AAAA), %s)\n' % REFUSE
                   + 'addAction(QTypeRule("TXT"), %s)\n' % REFUSE
                   + 'addAction(QTypeRule(15), %s)\n' % REFUSE))
    for n, qt in (("q1.test.", "AAAA"), ("q2.test.", "TXT"), ("q3.test.", "MX")):
        assert refused_by_rule(responder, ask(d, n, qt), n), qt
    assert forwarded(responder, ask(d, "q4.test.", "A"), "q4.test.")


def test_opcode_rule_notify_refused(dnslb, responder):
    d = dnslb(conf(responder, 'addAction(OpcodeRule(DNSOpcode.Notify), %s)\n' % REFUSE))
    w = build_query("zone.notify.test.", qtype=6, qid=77, flags=(4 << 11) | AA)
    a = udp_raw(d.port, w, 2.0)
    assert a is not None, "NOTIFY not answered"
    h = Header(a)
    assert h.qr and h.opcode == 4 and h.rcode == dns.rcode.REFUSED and h.id == 77
    assert seen(responder, "zone.notify.test.") == 0
    assert forwarded(responder, ask(d, "zone.notify.test.", "SOA"), "zone.notify.test.")


def raw(name, qtype=1, qclass=1, **kw):
    return ("raw", build_query(name, qtype=qtype, qclass=qclass, **kw))


def msg(name, qtype="A", **kw):
    return ("msg", make_query(name, qtype, **kw))


def opt_msg(name, options, **kw):
    return ("msg", make_query(name, "A", edns=0, options=options, **kw))


# (selector, [(query, tcp, matches)]); every query name is unique in its case list
SELECTOR_CASES = {
    "QClassRule": ("QClassRule(3)", [
        (raw("version.bind.", qtype=16, qclass=3), False, True),
        (raw("version2.bind.", qtype=16, qclass=1), False, False)]),
    "RDRule": ("RDRule()", [
        (raw("rd1.test.", flags=RD), False, True),
        (raw("rd0.test.", flags=0), False, False)]),
    "DNSSECRule": ("DNSSECRule()", [
        (msg("do.test.", edns=0, want_dnssec=True), False, True),
        (msg("nodo.test.", edns=0), False, False),
        (msg("noedns.test."), False, False)]),
    "NotRule": ("NotRule(QTypeRule(DNSQType.A))", [
        (msg("not1.test.", "AAAA"), False, True),
        (msg("not2.test.", "A"), False, False)]),
    "AndRule": ('AndRule({QTypeRule(DNSQType.A), makeRule("and.test.")})', [
        (msg("x.and.test.", "A"), False, True),
        (msg("y.and.test.", "AAAA"), False, False),
        (msg("and2.test.", "A"), False, False)]),
    "OrRule": ('OrRule({QNameRule("o1.test."), QNameRule("o2.test.")})', [
        (msg("o1.test."), False, True),
        (msg("o2.test."), False, True),
        (msg("o3.test."), False, False)]),
    "NotAndOr": ('NotRule(OrRule({QNameRule("no1.test."), AndRule({TCPRule(true), '
                 'QNameRule("no2.test.")})}))', [
        (msg("no1.test."), False, False),
        (msg("no2.test."), True, False),
        (msg("no2.test."), False, True),
        (msg("no3.test."), False, True)]),
    "RegexRule": (r'RegexRule("^ads[0-9]+\\.example\\.test$")', [
        (msg("ads12.example.test."), False, True),
        (msg("ADS3.Example.Test."), False, True),
        (msg("xads1.example.test."), False, False),
        (msg("ads1.example.test.more."), False, False)]),
    "QNameRule": ('QNameRule("exact.test.")', [
        (msg("exact.test."), False, True),
        (msg("EXACT.Test.", "AAAA"), False, True),
        (msg("sub.exact.test."), False, False),
        (msg("inexact.test."), False, False)]),
    "QNameSetRule": ('QNameSetRule(nset)', [
        (msg("set1.test."), False, True),
        (msg("SET2.test."), False, True),
        (msg("sub.set1.test."), False, False),
        (msg("set3.test."), False, False)]),
    "SuffixMatchNodeRule": ("SuffixMatchNodeRule(smn)", [
        (msg("a.smn.test."), False, True),
        (msg("smn.test.", "AAAA"), False, True),
        (msg("b.c.SMN2.test."), False, True),
        (msg("xsmn.test."), False, False),
        (msg("smn3.test."), False, False)]),
    "NetmaskGroupRule-src": ("NetmaskGroupRule(nmg_lo)", [
        (msg("nmg1.test."), False, True),
        (msg("nmg2.test."), True, True)]),
    "NetmaskGroupRule-other": ("NetmaskGroupRule(nmg_other)", [
        (msg("nmg3.test."), False, False),
        (msg("nmg4.test."), True, False)]),
    "NetmaskGroupRule-dst": ("NetmaskGroupRule(nmg_dst, false)", [
        (msg("nmg5.test."), False, True)]),
    "NetmaskGroupRule-dst-other": ("NetmaskGroupRule(nmg_other, false)", [
        (msg("nmg6.test."), False, False)]),
    "TCPRule-true": ("TCPRule(true)", [
        (msg("tcp1.test."), True, True),
        (msg("tcp2.test."), False, False)]),
    "TCPRule-false": ("TCPRule(false)", [
        (msg("udp1.test."), False, True),
        (msg("udp2.test."), True, False)]),
    "QNameLabelsCountRule": ("QNameLabelsCountRule(2, 3)", [
        (msg("a.b."), False, False),
        (msg("a.b.c."), False, False),
        (msg("a.b.c.d."), False, True),
        (msg("one."), False, True)]),
    "QNameWireLengthRule": ("QNameWireLengthRule(1, 20)", [
        (msg("small.test."), False, False),                         # 12 bytes
        (msg("a-much-longer-name.example.test."), False, True)]),   # 33 bytes
    "RecordsCountRule": ("RecordsCountRule(DNSSection.Additional, 1, 10)", [
        (msg("rc1.test.", edns=0), False, True),
        (msg("rc2.test."), False, False)]),
    "EDNSOptionRule": ("EDNSOptionRule(65001)", [
        (opt_msg("eo1.test.", [dns.edns.GenericOption(65001, b"x")]), False, True),
        (opt_msg("eo2.test.", [dns.edns.GenericOption(65002, b"x")]), False, False),
        (msg("eo3.test."), False, False)]),
    "AllRule": ("AllRule()", [
        (msg("all1.test."), False, True),
        (msg("all2.test.", "TXT"), True, True)]),
}

SELECTOR_PRELUDE = """
nset = newDNSNameSet()
nset:add(newDNSName("set1.test."))
nset:add(newDNSName("set2.test."))
smn = newSuffixMatchNode()
smn:add(newDNSName("smn.test."))
smn:add("smn2.test.")
nmg_lo = newNMG()
nmg_lo:addMask("127.0.0.0/8")
nmg_other = newNMG()
nmg_other:addMask("192.0.2.0/24")
nmg_other:addMask("10.0.0.0/8")
nmg_dst = newNMG()
nmg_dst:addMask("127.0.0.1/32")
"""


@pytest.mark.parametrize("case", sorted(SELECTOR_CASES))
def test_selector(dnslb, responder, case):
    sel, cases = SELECTOR_CASES[case]
    d = dnslb(conf(responder, SELECTOR_PRELUDE + "addAction(%s, %s)\n" % (sel, REFUSE)))
    bad = []
    for (kind, q), tcp, match in cases:
        wire = q if kind == "raw" else q.to_wire()
        m = parse(wire)
        name = m.question[0].name.to_text()
        before = seen(responder, name)
        a = exchange(d.port, wire, tcp, 2.0)
        if a is None:
            bad.append("%s (%s): no answer" % (name, "tcp" if tcp else "udp"))
            continue
        got_refused = Header(a).rcode == dns.rcode.REFUSED
        reached = seen(responder, name) - before
        if match and not (got_refused and reached == 0):
            bad.append("%s (%s): should match, got rcode %d, backend saw %d"
                       % (name, "tcp" if tcp else "udp", Header(a).rcode, reached))
        if not match and (got_refused or reached != 1):
            bad.append("%s (%s): should not match, got rcode %d, backend saw %d"
                       % (name, "tcp" if tcp else "udp", Header(a).rcode, reached))
    assert bad == [], "%s: %s" % (sel, "; ".join(bad))
    n = sum(1 for _, _, m in cases if m)
    counters(d, {"rule-refused": 0, "self-answered": n})


def test_dst_port_rule_two_listeners(dnslb, responder):
    p2 = free_port()
    d = dnslb(conf(responder, 'addLocal("127.0.0.1:%d")\n' % p2
                   + 'addAction(DSTPortRule(%d), %s)\n' % (p2, REFUSE)))
    r = udp_query(p2, "dp1.test.", timeout=2.0)
    assert refused_by_rule(responder, r, "dp1.test.")
    r = tcp_query(p2, "dp2.test.", timeout=3.0)
    assert refused_by_rule(responder, r, "dp2.test.")
    assert forwarded(responder, ask(d, "dp3.test."), "dp3.test.")
    assert forwarded(responder, ask(d, "dp4.test.", tcp=True), "dp4.test.")


def burst(port, names, collect=1.5):
    """Send one query per name from one socket as fast as possible; @return
    (answers, seconds the sending took)."""
    with UdpClient(port) as c:
        t0 = time.monotonic()
        for i, n in enumerate(names):
            c.send(build_query(n, qid=i + 1))
        took = time.monotonic() - t0
        return c.collect(collect), took


def test_max_qps_ip_rule(dnslb, responder):
    d = dnslb(conf(responder, "addAction(MaxQPSIPRule(5), DropAction())\n"))
    n = 50
    names = ["q%d.qpsip.test." % i for i in range(n)]
    answers, took = burst(d.port, names)
    reached = len(responder.queries_for("q"))
    bound = 5 + math.ceil(5 * took) + 2
    assert 1 <= reached <= bound, "backend got %d of %d (bound %d, %.2f s to send)" % (
        reached, n, bound, took)
    assert len(answers) == reached
    assert all(Header(a).rcode == 0 for a in answers)
    counters(d, {"rule-drop": n - reached})
    # the bucket refills: a query a while later is answered
    time.sleep(1.2)
    assert forwarded(responder, ask(d, "later.qpsip.test."), "later.qpsip.test.")


def test_max_qps_rule(dnslb, responder):
    """MaxQPSRule matches while under the rate: NotRule() of it refuses the
    excess."""
    d = dnslb(conf(responder, "addAction(NotRule(MaxQPSRule(5)), %s)\n" % REFUSE))
    n = 50
    answers, took = burst(d.port, ["q%d.qps.test." % i for i in range(n)])
    assert len(answers) == n, "every query gets an answer (%d of %d)" % (len(answers), n)
    ok = sum(1 for a in answers if Header(a).rcode == 0)
    refused = sum(1 for a in answers if Header(a).rcode == dns.rcode.REFUSED)
    bound = 5 + math.ceil(5 * took) + 2
    assert ok + refused == n
    assert 1 <= ok <= bound, "%d forwarded of %d (bound %d, %.2f s to send)" % (ok, n, bound,
                                                                                 took)
    assert len(responder.queries_for("q")) == ok
    counters(d, {"rule-refused": 0, "self-answered": refused})


def test_proba_rule(dnslb, responder):
    d = dnslb(conf(responder, 'addAction(AndRule({makeRule("p0.test."), ProbaRule(0.0)}), %s)\n'
                   % REFUSE
                   + 'addAction(AndRule({makeRule("p1.test."), ProbaRule(1.0)}), %s)\n' % REFUSE))
    for i in range(20):
        n0, n1 = "n%d.p0.test." % i, "n%d.p1.test." % i
        assert forwarded(responder, ask(d, n0), n0), "ProbaRule(0) matched"
        assert refused_by_rule(responder, ask(d, n1), n1), "ProbaRule(1) did not match"


def test_tag_rule_and_set_tag_action(dnslb, responder):
    d = dnslb(conf(responder,
                   'addAction("tag.test.", SetTagAction("color", "red"))\n'
                   'addAction("tag2.test.", SetTagAction("color", "blue"))\n'
                   'addAction(TagRule("color", "red"), %s)\n' % REFUSE
                   + 'addAction(TagRule("color"), %s)\n' % SPOOF_MARK))
    assert refused_by_rule(responder, ask(d, "x.tag.test."), "x.tag.test.")
    r = must(d, "x.tag2.test.")
    assert a_addrs(r) == [MARK] and seen(responder, "x.tag2.test.") == 0
    assert forwarded(responder, ask(d, "untagged.test."), "untagged.test.")


def test_set_no_recurse_action(dnslb, responder):
    d = dnslb(conf(responder, 'addAction("norec.test.", SetNoRecurseAction())\n'
                              'addAction("norec.test.", %s)\n' % SPOOF_MARK))
    # SetNoRecurseAction continues: the second rule answers
    r = must(d, "x.norec.test.")
    assert a_addrs(r) == [MARK]
    d2 = dnslb(conf(responder, 'addAction("norec.test.", SetNoRecurseAction())\n'))
    r = must(d2, "y.norec.test.")
    assert a_addrs(r) == ["192.0.2.1"]
    q = responder.queries_for("y.norec.test.")
    assert len(q) == 1 and not (q[0].flags & RD), "the backend saw RD=1"
    assert Header(r.to_wire()).rd, "the client's RD was not restored in the answer"
    must(d2, "rd.other.test.")
    assert responder.queries_for("rd.other.test.")[0].flags & RD


def cache_conf(responder, extra=""):
    return conf(responder, 'pc = newPacketCache(1000)\ngetPool(""):setCache(pc)\n' + extra)


def test_set_skip_cache_action(dnslb, responder):
    d = dnslb(cache_conf(responder, 'addAction("skip.test.", SetSkipCacheAction())\n'))
    for _ in range(3):
        assert a_addrs(must(d, "x.skip.test.")) == ["192.0.2.1"]
        assert a_addrs(must(d, "cached.test.")) == ["192.0.2.1"]
    assert seen(responder, "x.skip.test.") == 3, "a skip-cache query was answered from cache"
    assert seen(responder, "cached.test.") == 1
    counters(d, {"cache-hits": 2})


def test_set_temp_failure_cache_ttl_action(dnslb, responder):
    d = dnslb(cache_conf(responder, 'addAction("tf0.test.", SetTempFailureCacheTTLAction(0))\n'
                                    'addAction("tf1.test.", SetTempFailureCacheTTLAction(1))\n'))
    for _ in range(2):
        assert must(d, "servfail.tf0.test.").rcode() == dns.rcode.SERVFAIL
        assert must(d, "servfail.tf1.test.").rcode() == dns.rcode.SERVFAIL
        assert must(d, "servfail.other.test.").rcode() == dns.rcode.SERVFAIL
    assert seen(responder, "servfail.tf0.test.") == 2, "tempFailureTTL 0 still cached"
    assert seen(responder, "servfail.other.test.") == 1, "default temporaryFailureTTL: cached"
    assert seen(responder, "servfail.tf1.test.") == 1
    time.sleep(2.5)
    assert must(d, "servfail.tf1.test.").rcode() == dns.rcode.SERVFAIL
    assert seen(responder, "servfail.tf1.test.") == 2, "a 1 s temp-failure entry outlived 2.5 s"
    assert must(d, "servfail.other.test.").rcode() == dns.rcode.SERVFAIL
    assert seen(responder, "servfail.other.test.") == 1


@pytest.mark.dnslb_only("SetMaxReturnedTTLAction is dnsdist 1.8")
def test_set_max_returned_ttl_action(dnslb, responder):
    """The cap applies to what the client gets, not to the cached entry: the
    same name asked on a listener without the rule gets the full TTL from
    the cache."""
    p2 = free_port()
    d = dnslb(cache_conf(responder, 'addLocal("127.0.0.1:%d")\n' % p2
                         + 'addAction(DSTPortRule(%d), SetMaxReturnedTTLAction(10))\n' % p2))
    for _ in range(2):
        r = udp_query(p2, "ttl-300.maxret.test.", timeout=2.0)
        assert r is not None and ttls(r) == [10], ttls(r) if r else None
    r = must(d, "ttl-300.maxret.test.")
    assert 290 <= ttls(r)[0] <= 300, "the cached entry was capped too: %r" % ttls(r)
    assert seen(responder, "ttl-300.maxret.test.") == 1
    # uncached, over TCP, too
    r = tcp_query(p2, "ttl-100.maxret2.test.", timeout=3.0)
    assert r is not None and ttls(r) == [10]
    r = udp_query(p2, "ttl-5.maxret3.test.", timeout=2.0)
    assert r is not None and ttls(r) == [5], "a TTL under the cap was changed"


def test_delay_action(dnslb, responder):
    """The answer comes at least the requested delay after the query (UDP
    only). 10 ms of slack for the event loop's cached clock."""
    d = dnslb(conf(responder, 'addAction("delay.test.", DelayAction(300))\n'))
    with UdpClient(d.port) as c:
        t0 = time.monotonic()
        c.send(build_query("x.delay.test.", qid=9))
        a = c.recv(3.0)
        took = time.monotonic() - t0
    assert a is not None and Header(a).id == 9 and a_addrs(a) == ["192.0.2.1"]
    assert took >= 0.29, "DelayAction(300) answered after %.3f s" % took
    assert seen(responder, "x.delay.test.") == 1
    # TCP: answered (not delayed, but no timing assertion of that kind)
    assert forwarded(responder, ask(d, "y.delay.test.", tcp=True), "y.delay.test.")


def test_pool_available_rule_failover(dnslb, make_responder):
    main, backup = make_responder(), make_responder()
    d = dnslb(lua_server(main, name="m1", pool="main")
              + lua_server(backup, name="bk", pool="backup")
              + FAST + 'addAction(PoolAvailableRule("main"), PoolAction("main"))\n'
              'addAction(AllRule(), PoolAction("backup"))\n')
    assert must(d, "a.fo.test.").rcode() == dns.rcode.NOERROR
    assert seen(main, "a.fo.test.") == 1 and seen(backup, "a.fo.test.") == 0
    # the main pool's only server fails its health checks
    main.set_check_mode("drop")
    i = [0]

    def goes_to_backup():
        i[0] += 1
        n = "b%d.fo.test." % i[0]
        r = ask(d, n, timeout=1.0)
        return r is not None and seen(backup, n) == 1
    assert wait_until(goes_to_backup, 15.0, 0.2), "never failed over to the backup pool"
    main.set_check_mode("answer")

    def back_to_main():
        i[0] += 1
        n = "c%d.fo.test." % i[0]
        r = ask(d, n, timeout=1.0)
        return r is not None and seen(main, n) == 1
    assert wait_until(back_to_main, 15.0, 0.2), "never came back to the main pool"


def test_pool_available_rule_down_at_start(dnslb, make_responder):
    main, backup = make_responder(), make_responder()
    d = dnslb(lua_server(main, name="m1", pool="main")
              + lua_server(backup, name="bk", pool="backup")
              + FAST + "getServer(0):setDown()\n"
              'addAction(PoolAvailableRule("main"), PoolAction("main"))\n'
              'addAction(AllRule(), PoolAction("backup"))\n')
    for i in range(3):
        n = "d%d.fo.test." % i
        assert must(d, n).rcode() == dns.rcode.NOERROR
        assert seen(backup, n) == 1 and seen(main, n) == 0


def test_log_action_text_file(dnslb, responder, tmp_path):
    path = tmp_path / "queries.log"
    d = dnslb(conf(responder, 'addAction("log.test.", LogAction("%s", false, true, false))\n'
                   % path))
    with UdpClient(d.port) as c:
        port = c.sock.getsockname()[1]
        c.send(build_query("www.log.test.", qtype=28, qid=4242))
        assert c.recv(2.0) is not None
    with TcpClient(d.port) as t:
        tport = t.sock.getsockname()[1]
        t.send_msg(build_query("tcp.log.test.", qtype=1, qid=77))
        assert t.recv_msg(3.0) is not None
    assert must(d, "notlogged.test.") is not None
    # the ID as dnsdist prints it: the packet's two octets read in host order
    # (4242 -> 37392 on little-endian hosts; rules/log.c reproduces it)
    ids = [socket.ntohs(4242), socket.ntohs(77)]
    want = ["Packet from 127.0.0.1:%d for www.log.test. AAAA with id %d" % (port, ids[0]),
            "Packet from 127.0.0.1:%d for tcp.log.test. A with id %d" % (tport, ids[1])]

    def lines():
        try:
            return path.read_text().splitlines()
        except OSError:
            return []
    wait_until(lambda: len(lines()) >= 2, 5.0)
    assert lines() == want
    # LogAction continues: the queries were forwarded
    assert seen(responder, "www.log.test.") == 1 and seen(responder, "tcp.log.test.") == 1

# ---------------------------------------------------------------------------
# response chains


TTL_ACTIONS = {
    "LimitTTL": ("LimitTTLResponseAction(100, 200)", {30: 100, 150: 150, 300: 200}),
    "SetMinTTL": ("SetMinTTLResponseAction(100)", {30: 100, 300: 300}),
    "SetMaxTTL": ("SetMaxTTLResponseAction(100)", {30: 30, 300: 100}),
    "SetReducedTTL": ("SetReducedTTLResponseAction(50)", {300: 150, 100: 50}),
}


@pytest.mark.dnslb_only("these response actions are dnsdist 1.8")
@pytest.mark.parametrize("which", sorted(TTL_ACTIONS))
def test_response_ttl_actions(dnslb, responder, which):
    act, expect = TTL_ACTIONS[which]
    d = dnslb(conf(responder, "addResponseAction(AllRule(), %s)\n" % act))
    for ttl, want in sorted(expect.items()):
        for qt in ("A", "AAAA"):
            r = must(d, "ttl-%d.%s.test." % (ttl, which.lower()), qt)
            assert ttls(r) == [want], "%s on TTL %d (%s): %r" % (act, ttl, qt, ttls(r))
        r = must(d, "ttl-%d.tcp.%s.test." % (ttl, which.lower()), tcp=True)
        assert ttls(r) == [want], "%s on TTL %d (TCP): %r" % (act, ttl, ttls(r))
    # the authority section too (the SOA of a negative answer)
    ttl = max(expect)
    r = must(d, "nxdomain-%d.%s.test." % (ttl, which.lower()))
    assert r.rcode() == dns.rcode.NXDOMAIN
    assert ttls(r, "authority") == [expect[ttl]]


@pytest.mark.dnslb_only("LimitTTLResponseAction is dnsdist 1.8")
def test_limit_ttl_types(dnslb, responder):
    d = dnslb(conf(responder, "addResponseAction(AllRule(), LimitTTLResponseAction(100, 200, "
                              "{DNSQType.AAAA}))\n"))
    assert ttls(must(d, "ttl-30.lt.test.", "A")) == [30]
    assert ttls(must(d, "ttl-30.lt.test.", "AAAA")) == [100]
    assert ttls(must(d, "ttl-300.lt.test.", "A")) == [300]
    assert ttls(must(d, "ttl-300.lt.test.", "AAAA")) == [200]


@pytest.mark.dnslb_only("SetMaxTTLResponseAction is dnsdist 1.8")
def test_response_rules_run_before_cache_insert(dnslb, responder):
    d = dnslb(cache_conf(responder, "addResponseAction(AllRule(), SetMaxTTLResponseAction(100))\n"))
    assert ttls(must(d, "ttl-300.ins.test.")) == [100]
    r = must(d, "ttl-300.ins.test.")
    assert seen(responder, "ttl-300.ins.test.") == 1
    assert 95 <= ttls(r)[0] <= 100, "the cached copy was not the edited one: %r" % ttls(r)


@pytest.mark.dnslb_only("addCacheInsertedResponseAction is dnsdist 1.8")
def test_cache_inserted_response_action(dnslb, responder):
    d = dnslb(cache_conf(responder, "addCacheInsertedResponseAction(AllRule(), "
                                    "SetMaxTTLResponseAction(5))\n"))
    assert ttls(must(d, "ttl-300.cins.test.")) == [5], "the answer sent was not edited"
    r = must(d, "ttl-300.cins.test.")
    assert seen(responder, "ttl-300.cins.test.") == 1
    assert ttls(r)[0] >= 290, "the cached copy was edited: %r" % ttls(r)
    # an answer that is not inserted (SetSkipCacheAction) does not run the chain
    d2 = dnslb(cache_conf(responder, 'addAction("nocache.test.", SetSkipCacheAction())\n'
                                     "addCacheInsertedResponseAction(AllRule(), "
                                     "SetMaxTTLResponseAction(5))\n"))
    assert ttls(must(d2, "ttl-300.nocache.test.")) == [300]


def mixed_behaviour(q, transport):
    """A + AAAA + TXT in the answer section, AAAA + A glue in the additional
    section (owner ns.example., uncompressed), and the OPT if asked."""
    glue = b"\x02ns\x07example\x00"
    answers = [_rr(1, REAL_ADDR), _rr(28, REAL_AAAA), _rr(16, b"\x05hello")]
    extra = [_rr(28, REAL_AAAA, name=glue), _rr(1, REAL_ADDR, name=glue)]
    opt = _opt_rr(q)
    flags = 0x8000 | 0x0400 | (q.flags & 0x0100)
    hdr = (q.id.to_bytes(2, "big") + flags.to_bytes(2, "big") + (1).to_bytes(2, "big")
           + len(answers).to_bytes(2, "big") + (0).to_bytes(2, "big")
           + (len(extra) + (1 if opt else 0)).to_bytes(2, "big"))
    qd = q.qname_wire + q.qtype.to_bytes(2, "big") + q.qclass.to_bytes(2, "big")
    return [(0, hdr + qd + b"".join(answers) + b"".join(extra) + opt, "normal")]


@pytest.mark.dnslb_only("ClearRecordTypesResponseAction is dnsdist 1.8")
def test_clear_record_types_response_action(dnslb, responder):
    responder.behaviours["mixed"] = mixed_behaviour
    d = dnslb(conf(responder, "addResponseAction(AllRule(), ClearRecordTypesResponseAction("
                              "{DNSQType.AAAA}))\n"))
    for kw in ({}, {"edns": 0}, {"tcp": True}):
        r = must(d, "mixed.test.", "ANY", **kw)
        assert sorted(x[3] for x in records(r)) == ["A", "TXT"], records(r)
        assert records(r, "additional") == [("ns.example.", 300, "IN", "A", "192.0.2.1")]
        assert Header(r.to_wire()).ancount == 2
        if kw.get("edns") == 0:
            assert r.edns == 0, "the OPT record was removed"
    # another answer is untouched
    r = must(d, "plain.test.", "A")
    assert records(r) == [("plain.test.", 300, "IN", "A", "192.0.2.1")]
    assert records(must(d, "plain.test.", "AAAA")) == []


def test_drop_response_action(dnslb, responder):
    d = dnslb(conf(responder, 'addResponseAction("dropresp.test.", DropResponseAction())\n'))
    assert ask(d, "x.dropresp.test.", timeout=1.0) is None
    assert ask(d, "y.dropresp.test.", tcp=True, timeout=1.0) is None
    assert seen(responder, "x.dropresp.test.") == 1, "the query did not reach the backend"
    assert forwarded(responder, ask(d, "kept.test."), "kept.test.")


def test_delay_response_action(dnslb, responder):
    d = dnslb(conf(responder, 'addResponseAction("dresp.test.", DelayResponseAction(300))\n'))
    with UdpClient(d.port) as c:
        t0 = time.monotonic()
        c.send(build_query("x.dresp.test.", qid=5))
        a = c.recv(3.0)
        took = time.monotonic() - t0
    assert a is not None and a_addrs(a) == ["192.0.2.1"]
    assert took >= 0.29, "DelayResponseAction(300) answered after %.3f s" % took


def test_cache_hit_response_action(dnslb, responder):
    """Runs on answers from the cache only: the second query is dropped."""
    d = dnslb(cache_conf(responder, "addCacheHitResponseAction(AllRule(), DropResponseAction())\n"))
    assert a_addrs(must(d, "hit.test.")) == ["192.0.2.1"]
    assert ask(d, "hit.test.", timeout=1.0) is None, "the cache-hit rule did not run"
    assert seen(responder, "hit.test.") == 1


@pytest.mark.dnslb_only("SetMaxTTLResponseAction is dnsdist 1.8")
def test_cache_hit_response_action_edits(dnslb, responder):
    d = dnslb(cache_conf(responder, "addCacheHitResponseAction(AllRule(), "
                                    "SetMaxTTLResponseAction(7))\n"))
    assert ttls(must(d, "hit2.test.")) == [300]
    assert ttls(must(d, "hit2.test.")) == [7]
    assert seen(responder, "hit2.test.") == 1


def test_self_answered_response_action(dnslb, responder):
    d = dnslb(conf(responder, 'addAction("sa.test.", %s)\n' % REFUSE
                   + 'addSelfAnsweredResponseAction("dropit.sa.test.", DropResponseAction())\n'
                   'addSelfAnsweredResponseAction("fwd.test.", DropResponseAction())\n'))
    assert ask(d, "dropit.sa.test.", timeout=1.0) is None, "the self-answered rule did not run"
    assert must(d, "keep.sa.test.").rcode() == dns.rcode.REFUSED
    # a forwarded answer does not go through that chain
    assert forwarded(responder, ask(d, "fwd.test."), "fwd.test.")
    assert seen(responder, "dropit.sa.test.") == 0


@pytest.mark.parametrize("fn", ["addResponseAction", "addCacheHitResponseAction",
                                "addSelfAnsweredResponseAction"])
def test_query_action_in_response_chain_fails_check_config(tmp_path, responder, fn):
    c = tmp_path / "bad.conf"
    c.write_text(lua_server(responder) + "%s(AllRule(), DropAction())\n" % fn)
    r = subprocess.run([impl_bin(), "--check-config", "-C", str(c)], capture_output=True,
                       text=True, timeout=20)
    msg = ("%s() can only be called with response-related actions, not query-related ones. "
           "Are you looking for addAction()?" % fn)
    assert r.returncode == 1, r.stdout + r.stderr
    assert msg in r.stdout + r.stderr
    assert "OK!" not in r.stdout
    if dnsdist_ok():
        r2 = subprocess.run([DNSDIST, "--check-config", "-C", str(c)], capture_output=True,
                            text=True, timeout=20)
        assert r2.returncode == 1 and msg in r2.stdout + r2.stderr


def test_response_action_in_query_chain_fails_check_config(tmp_path, responder):
    c = tmp_path / "bad.conf"
    c.write_text(lua_server(responder) + "addAction(AllRule(), DropResponseAction())\n")
    r = subprocess.run([impl_bin(), "--check-config", "-C", str(c)], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 1
    assert ("addAction() can only be called with query-related actions, not response-related "
            "ones. Are you looking for addResponseAction()?") in r.stdout + r.stderr

# ---------------------------------------------------------------------------
# rule management from the config


def spoofs(d, name):
    r = must(d, name)
    return a_addrs(r)


def test_rm_rule(dnslb, responder):
    u2 = "22222222-2222-4222-8222-222222222222"
    d = dnslb(conf(responder,
                   'addAction("r0.test.", SpoofAction("192.0.2.100"), {name="r0"})\n'
                   'addAction("r1.test.", SpoofAction("192.0.2.101"), {name="r1"})\n'
                   'addAction("r2.test.", SpoofAction("192.0.2.102"), {uuid="%s"})\n' % u2
                   + 'addAction("r3.test.", SpoofAction("192.0.2.103"), {name="r3"})\n'
                   'addAction("r4.test.", SpoofAction("192.0.2.104"))\n'
                   'rmRule(1)\n'                 # r1, by position
                   'rmRule("r0")\n'              # by name
                   'rmRule("%s")\n' % u2))      # by UUID
    for n in ("r0.test.", "r1.test.", "r2.test."):
        assert spoofs(d, n) == ["192.0.2.1"], n
    assert spoofs(d, "r3.test.") == ["192.0.2.103"]
    assert spoofs(d, "r4.test.") == ["192.0.2.104"]


def test_mv_rule(dnslb, responder):
    d = dnslb(conf(responder,
                   'addAction(AllRule(), SpoofAction("192.0.2.100"))\n'
                   'addAction("mv.test.", SpoofAction("192.0.2.101"))\n'
                   'addAction("mv2.test.", SpoofAction("192.0.2.102"))\n'
                   "mvRule(1, 0)\n"))
    assert spoofs(d, "mv.test.") == ["192.0.2.101"]
    assert spoofs(d, "mv2.test.") == ["192.0.2.100"], "only rule 1 should have moved"
    assert spoofs(d, "other.test.") == ["192.0.2.100"]


def test_mv_rule_to_top(dnslb, responder):
    d = dnslb(conf(responder,
                   'addAction(AllRule(), SpoofAction("192.0.2.100"))\n'
                   'addAction("mid.test.", SpoofAction("192.0.2.101"))\n'
                   'addAction("top.test.", SpoofAction("192.0.2.102"))\n'
                   "mvRuleToTop()\n"))
    assert spoofs(d, "top.test.") == ["192.0.2.102"]
    assert spoofs(d, "mid.test.") == ["192.0.2.100"]


def test_clear_rules(dnslb, responder):
    d = dnslb(conf(responder, 'addAction(AllRule(), DropAction())\n'
                              'addAction("x.test.", %s)\n' % REFUSE
                   + "clearRules()\n"
                   'addAction("after.test.", %s)\n' % SPOOF_MARK))
    assert forwarded(responder, ask(d, "cleared.test."), "cleared.test.")
    assert forwarded(responder, ask(d, "x.test."), "x.test.")
    assert spoofs(d, "after.test.") == [MARK]


def test_set_rules_new_rule_action(dnslb, responder):
    d = dnslb(conf(responder,
                   'addAction(AllRule(), DropAction())\n'
                   'setRules({newRuleAction("set.test.", SpoofAction("192.0.2.104")),'
                   ' newRuleAction(QTypeRule(DNSQType.AAAA), %s, {name="aaaa"})})\n' % REFUSE))
    assert spoofs(d, "set.test.") == ["192.0.2.104"]
    assert refused_by_rule(responder, ask(d, "v6.test.", "AAAA"), "v6.test.")
    assert forwarded(responder, ask(d, "other.test."), "other.test."), "the old rule survived"


def test_rm_response_rule(dnslb, responder):
    d = dnslb(conf(responder, 'addResponseAction("rr0.test.", DropResponseAction())\n'
                              'addResponseAction("rr1.test.", DropResponseAction())\n'
                              "rmResponseRule(0)\n"))
    assert forwarded(responder, ask(d, "rr0.test."), "rr0.test.")
    assert ask(d, "rr1.test.", timeout=1.0) is None


SHOW_CONF = (
    'addAction("r0.test.", SpoofAction("192.0.2.100"), {name="r0", uuid="%s"})\n'
    'addAction({"a.test.", "b.test."}, DropAction(), {uuid="%s"})\n'
    'addAction("192.0.2.0/24", RCodeAction(DNSRCode.REFUSED), {uuid="%s"})\n'
    'addAction(QTypeRule(DNSQType.AAAA), TCAction(), {uuid="%s"})\n'
    'addAction(AndRule({QNameRule("x.test."), NotRule(RDRule())}), PoolAction("p2"), '
    '{name="to-p2", uuid="%s"})\n'
    'addAction(RegexRule("^ads"), DelayAction(100), {uuid="%s"})\n'
    'addAction(AllRule(), AllowAction(), {uuid="%s"})\n'
) % tuple("%d%d%d%d%d%d%d%d-1111-4111-8111-11111111111%d" % ((i,) * 9) for i in range(7))

SHOW_HEADER = "#   Name                             Matches Rule" \
              "                                                     Action"


def table_after(lines, start_rx):
    """The lines from the first one matching @start_rx on, up to (not
    including) a line that does not look like a table row."""
    out = []
    on = False
    for l in lines:
        if not on and re.match(start_rx, l):
            on = True
        elif on and not re.match(r"^\d+\s", l):
            break
        if on:
            out.append(l.rstrip())
    return out


def dnsdist_console(d, cmd):
    r = subprocess.run([DNSDIST, "-C", d.conf_path, "-c", "-e", cmd], capture_output=True,
                       text=True, timeout=10, cwd=d.workdir)
    return r.stdout.splitlines()


# A console command run by the configuration prints nothing (as in dnsdist)
# unless the configuration's own print() takes its lines: this one prints them.
PRINTING = "local p = print\nprint = function(s) p(s) end\n"


@pytest.mark.dnslb_only("the configuration's own print() gets showRules()'s lines")
def test_show_rules_at_check_config(tmp_path, responder):
    c = tmp_path / "show.conf"
    c.write_text(lua_server(responder) + SHOW_CONF + PRINTING + "showRules()\n")
    r = subprocess.run([dnslb_bin(), "--check-config", "-C", str(c)], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 0, r.stdout + r.stderr
    table = table_after(r.stdout.splitlines(), r"^#\s+Name")
    assert table, r.stdout
    assert table[0] == SHOW_HEADER
    rows = table[1:]
    assert len(rows) == 7, table
    assert [x.split()[0] for x in rows] == [str(i) for i in range(7)]
    assert rows[0].split()[1:3] == ["r0", "0"]
    assert rows[4].split()[1:3] == ["to-p2", "0"]
    assert rows[1].split()[1] == "0", "an unnamed rule's Name column is empty"
    assert "Configuration '%s' OK!" % c in r.stdout.splitlines()


@pytest.mark.dnslb_only("compares with dnsdist's console")
@pytest.mark.parametrize("opts", ["", "{showUUIDs=true}"])
def test_show_rules_matches_dnsdist(dnslb, tmp_path, responder, opts):
    if not dnsdist_ok():
        pytest.skip("dnsdist is not installed")
    c = tmp_path / "show.conf"
    c.write_text(lua_server(responder) + SHOW_CONF + PRINTING + "showRules(%s)\n" % opts)
    r = subprocess.run([dnslb_bin(), "--check-config", "-C", str(c)], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 0, r.stdout + r.stderr
    ours = table_after(r.stdout.splitlines(), r"^#\s+Name")
    try:
        theirs_d = dnslb(lua_server(responder) + SHOW_CONF, impl="dnsdist", name="dnsdist")
    except Exception as e:          # noqa: BLE001
        pytest.skip("dnsdist cannot be started here: %s" % e)
    theirs = table_after(dnsdist_console(theirs_d, "showRules(%s)" % opts), r"^#\s+Name")
    assert len(theirs) == 8, theirs
    diff = [(i, a, b) for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    assert len(ours) == len(theirs) and not diff, \
        "showRules(%s) differs from dnsdist's:\n%s" % (
            opts, "\n".join("row %d\n  dnslb:   %r\n  dnsdist: %r" % x for x in diff))

# ---------------------------------------------------------------------------
# dnsdist 1.7.3 side by side


CMP_CONF = (
    'addAction("rcref.cmp.", RCodeAction(DNSRCode.REFUSED))\n'
    'addAction("nxd.cmp.", RCodeAction(DNSRCode.NXDOMAIN))\n'
    'addAction("srvf.cmp.", RCodeAction(DNSRCode.SERVFAIL))\n'
    'addAction("aa.cmp.", RCodeAction(DNSRCode.REFUSED, {aa=true}))\n'
    'addAction("spoof.cmp.", SpoofAction({"192.0.2.10", "192.0.2.11", "2001:db8::10"}))\n'
    'addAction("spoofttl.cmp.", SpoofAction("192.0.2.20", {ttl=3600, aa=true}))\n'
    'addAction("cname.cmp.", SpoofCNAMEAction("target.example."))\n'
    r'addAction("raw.cmp.", SpoofRawAction({"\003abc\003def", "\005hello"}))' "\n"
    'addAction("neg.cmp.", NegativeAndSOAAction(true, %s))\n'
    'addAction("nodata.cmp.", NegativeAndSOAAction(false, %s))\n'
    'addAction("trunc.cmp.", TCAction())\n'
    'addAction("dropit.cmp.", DropAction())\n'
    'addAction("spoof6.cmp.", SpoofAction("2001:db8::20"))\n'
) % (SOA_ARGS, SOA_ARGS)

CMP_NAMES = ["rcref.cmp.", "nxd.cmp.", "srvf.cmp.", "aa.cmp.", "spoof.cmp.", "Spoof.CMP.",
             "spoofttl.cmp.", "cname.cmp.", "raw.cmp.", "neg.cmp.", "nodata.cmp.", "trunc.cmp.",
             "spoof6.cmp."]


def test_self_generated_answers_match_dnsdist(pair):
    ours, theirs = pair(CMP_CONF)
    bad = compare_all(ours, theirs, query_variants(CMP_NAMES))
    assert not bad, "%d differences:\n%s" % (len(bad), "\n".join(bad[:40]))


def test_self_generated_answers_match_dnsdist_tcp(pair):
    ours, theirs = pair(CMP_CONF)
    bad = compare_all(ours, theirs, query_variants(CMP_NAMES, qtypes=("A", "TXT"), tcp=(True,)))
    assert not bad, "%d differences:\n%s" % (len(bad), "\n".join(bad[:40]))


def test_rule_counters_match_dnsdist(pair):
    ours, theirs = pair(CMP_CONF)
    for d in (ours, theirs):
        for n in ("rcref.cmp.", "nxd.cmp.", "srvf.cmp.", "spoof.cmp.", "trunc.cmp.",
                  "neg.cmp.", "fwd.cmp."):
            assert exchange(d.port, build_query(n)) is not None
        assert exchange(d.port, build_query("dropit.cmp."), timeout=0.5) is None
    names = ["queries", "responses", "rule-drop", "rule-nxdomain", "rule-refused",
             "rule-servfail", "rule-truncated", "self-answered",
             "frontend-noerror",
             "frontend-nxdomain", "frontend-servfail"]
    ts = theirs.wait_stats(lambda s: s["queries"] >= 8)
    os_ = ours.wait_stats(lambda s: s["queries"] >= 8)
    diff = {n: (os_.get(n), ts.get(n)) for n in names if os_.get(n) != ts.get(n)}
    assert diff == {}, "counters (dnslb, dnsdist) differ: %r" % diff


def test_pool_and_selectors_match_dnsdist(pair, make_responder, responder):
    r2 = make_responder()
    servers = lua_server(responder, name="b1") + lua_server(r2, name="p2s", pool="p2")
    ours, theirs = pair(SELECTOR_PRELUDE +
                        'addAction(AndRule({QTypeRule(DNSQType.AAAA), makeRule("p.cmp.")}), '
                        'PoolAction("p2"))\n'
                        'addAction(OrRule({QNameRule("x.cmp."), RegexRule("^ads")}), %s)\n'
                        % REFUSE +
                        'addAction(SuffixMatchNodeRule(smn), SpoofAction("192.0.2.33"))\n',
                        servers=servers)
    cases = query_variants(["p.cmp.", "x.cmp.", "ads1.cmp.", "smn.test.", "y.smn2.test.",
                            "other.cmp."], qtypes=("A", "AAAA"))
    bad = compare_all(ours, theirs, cases)
    assert not bad, "%d differences:\n%s" % (len(bad), "\n".join(bad[:40]))
