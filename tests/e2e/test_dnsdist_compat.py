"""dnslb and Debian's dnsdist 1.7.3 side by side, with the same config and
the same backend: answers, self-generated answers, drops, counters and the
--check-config messages must match (where dnslb does not deliberately
differ; those cases are in the other test files)."""

import os
import subprocess

import pytest

from dnslbtest import (DNSDIST, IMPL, QR, RD, Header, TcpClient, UdpClient, build_query,
                       dnslb_bin, lua_server, opt_rr)

pytestmark = pytest.mark.skipif(IMPL != "dnslb", reason="compares dnslb with dnsdist")


@pytest.fixture
def pair(dnslb, responder):
    """(dnslb, dnsdist), both forwarding to the same responder."""
    if not os.access(DNSDIST, os.X_OK):
        pytest.skip("dnsdist is not installed (%s)" % DNSDIST)

    def start(extra=""):
        conf = lua_server(responder, name="b1") + extra
        ours = dnslb(conf, name="dnslb")
        try:
            theirs = dnslb(conf, impl="dnsdist", name="dnsdist")
        except Exception as e:
            pytest.skip("dnsdist cannot be started here: %s" % e)
        return ours, theirs
    return start


def exchange_udp(port, wire, timeout=2.0):
    with UdpClient(port) as c:
        c.send(wire)
        return c.recv(timeout)


def exchange_tcp(port, wire, timeout=3.0):
    with TcpClient(port) as c:
        c.send_msg(wire)
        return c.recv_msg(timeout)


def test_normal_answer_identical(pair):
    ours, theirs = pair()
    for i, name in enumerate(["www.example.test.", "MiXeD.example.test.", "nx.example.test.",
                              "servfail.example.test.", "tc.example.test."]):
        for edns in (None, {"payload": 1232}):
            w = build_query(name, qid=500 + i, opt=edns)
            a, b = exchange_udp(ours.port, w), exchange_udp(theirs.port, w)
            assert a is not None and b is not None
            assert a == b, "UDP answers to %s differ" % name
            a, b = exchange_tcp(ours.port, w), exchange_tcp(theirs.port, w)
            assert a is not None and b is not None
            assert a == b, "TCP answers to %s differ" % name


@pytest.mark.parametrize("rd", [True, False])
@pytest.mark.parametrize("edns", [False, True])
def test_empty_query_notimp_identical(pair, rd, edns):
    """qdcount=0 -> NOTIMP: the same bytes from both (with an OPT of payload
    1232 in the query, dnsdist's echo and dnslb's own OPT coincide)."""
    ours, theirs = pair()
    w = build_query(question=b"", qid=0x2222, flags=RD if rd else 0,
                    arcount=1 if edns else 0) + (opt_rr(payload=1232) if edns else b"")
    a, b = exchange_udp(ours.port, w), exchange_udp(theirs.port, w)
    assert b is not None, "dnsdist did not answer"
    assert a is not None, "dnslb did not answer"
    assert Header(a).__dict__ == Header(b).__dict__
    assert a == b
    a, b = exchange_tcp(ours.port, w), exchange_tcp(theirs.port, w)
    assert a is not None and a == b


def test_qr_query_dropped_by_both(pair):
    ours, theirs = pair()
    w = build_query("qr.example.test.", flags=QR | RD, qid=3)
    assert exchange_udp(theirs.port, w, 1.0) is None
    assert exchange_udp(ours.port, w, 1.0) is None


def test_servfail_when_no_server_identical(pair):
    ours, theirs = pair("getServer(0):setDown()\nsetServFailWhenNoServer(true)\n")
    w = build_query("nosrv.example.test.", qid=4)
    a, b = exchange_udp(ours.port, w), exchange_udp(theirs.port, w)
    assert b is not None and a is not None
    assert a == b


def test_acl_drop_by_both(pair):
    ours, theirs = pair('setACL({"192.0.2.0/24"})\n')
    w = build_query("acl.example.test.", qid=5)
    assert exchange_udp(theirs.port, w, 1.0) is None
    assert exchange_udp(ours.port, w, 1.0) is None
    assert ours.stat_at_least("acl-drops", 1) == theirs.stat_at_least("acl-drops", 1) == 1


def test_counters_match(pair):
    """The same traffic gives the same values for the common counters."""
    ours, theirs = pair()
    traffic = [build_query("c%d.example.test." % i, qid=i) for i in range(5)]
    traffic += [build_query("nx.example.test.", qid=10),
                build_query("servfail.example.test.", qid=11),
                build_query("norecurse.example.test.", qid=12, flags=0),
                build_query(question=b"", qid=13)]                  # NOTIMP
    qr = build_query("qr.example.test.", flags=QR | RD, qid=14)
    for d in (ours, theirs):
        for w in traffic:
            assert exchange_udp(d.port, w) is not None
        assert exchange_udp(d.port, qr, 0.3) is None
    names = ["queries", "rdqueries", "responses", "servfail-responses", "frontend-noerror",
             "frontend-nxdomain", "frontend-servfail", "empty-queries", "noncompliant-queries",
             "acl-drops", "downstream-timeouts", "no-policy"]
    theirs_s = theirs.wait_stats(lambda s: s["responses"] >= 7 and s["queries"] >= 10)
    ours_s = ours.wait_stats(lambda s: s["responses"] >= 7 and s["queries"] >= 10)
    diff = {n: (ours_s.get(n), theirs_s.get(n)) for n in names
            if ours_s.get(n) != theirs_s.get(n)}
    assert diff == {}, "counter (dnslb, dnsdist) differ: %r" % diff


def run(exe, args):
    r = subprocess.run([exe] + args, capture_output=True, text=True, timeout=20,
                       stdin=subprocess.DEVNULL)
    return r.returncode, r.stdout + r.stderr


def test_check_config_messages(tmp_path, responder):
    if not os.access(DNSDIST, os.X_OK):
        pytest.skip("dnsdist is not installed")
    good = tmp_path / "good.conf"
    good.write_text('setLocal("127.0.0.1:5300")\nsetSecurityPollSuffix("")\n' +
                    lua_server(responder, name="b1") + 'setACL({"127.0.0.0/8"})\n')
    rc1, out1 = run(DNSDIST, ["--check-config", "-C", str(good)])
    if rc1 != 0:
        pytest.skip("dnsdist --check-config does not work here: %s" % out1[-500:])
    rc2, out2 = run(dnslb_bin(), ["--check-config", "-C", str(good)])
    assert rc2 == 0, out2
    line = "Configuration '%s' OK!" % good
    assert line in out1.splitlines(), out1
    assert line in out2.splitlines(), out2
    for text in ['setLocal("127.0.0.1:5300")\nlocal x = = 1\n', "\nfrobnicate(1)\n"]:
        bad = tmp_path / "bad.conf"
        bad.write_text(text)
        rc1, out1 = run(DNSDIST, ["--check-config", "-C", str(bad)])
        rc2, out2 = run(dnslb_bin(), ["--check-config", "-C", str(bad)])
        assert rc1 == 1 and rc2 == 1, (out1, out2)
        assert "OK!" not in out2
