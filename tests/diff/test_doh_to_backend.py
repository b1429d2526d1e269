"""DNS over HTTPS towards a backend, dnsdist 1.7.3 beside dnslb: both with
the same newServer{dohPath=...} towards the same DoH server (a third
dnsdist 1.7.3, its addDOHLocal answering by rules), asked the same queries
over UDP and TCP. The answers are the same bytes (ID aside), and so are the
counters both keep, the server's among them, but for the ones
docs/dnsdist-differences.md lists."""

import json
import os

import pytest

from diffharness import known, same_counters

import dnslbtest  # noqa: E402 (on the path through diffharness)
from test_tls_stats import make_cert

DOH_RULES = ('addAction("nx.example.test.", RCodeAction(DNSRCode.NXDOMAIN))\n'
             'addAction(AllRule(), SpoofAction({"192.0.2.7", "2001:db8::7"}))\n')


@pytest.fixture
def pki(tmp_path):
    """A self-signed certificate for dns.test (cert.pem, key.pem): its own CA."""
    d = str(tmp_path / "pki")
    os.makedirs(d)
    make_cert(d)
    return d


@pytest.fixture
def dohsrv(tmp_path, pki):
    port = dnslbtest.free_port()
    conf = ('addDOHLocal("127.0.0.1:%d", "%s/cert.pem", "%s/key.pem", "/dns-query")\n'
            % (port, pki, pki)) + DOH_RULES
    d = dnslbtest.Daemon(str(tmp_path), conf, listen=False, impl="dnsdist", name="dohsrv")
    d.start()
    d.doh_port = port
    yield d
    d.stop()


def server_row(side):
    """The server's showServers() line, the rates and latency aside."""
    row = [l for l in side.console("showServers()").splitlines() if l.startswith("0 ")][0]
    row = row.split()
    return row[:4] + row[6:10]


def test_same_answers_and_counters(pair, dohsrv, pki):
    body = ('newServer({address="127.0.0.1:%d", tls="openssl", dohPath="/dns-query", '
            'subjectName="dns.test", caStore="%s/cert.pem", checkInterval=3600, name="doh"})\n'
            % (dohsrv.doh_port, pki))
    p = pair(body, backends=(), dnslb_args=("--workers", "1"), web=True)
    for name, qtype, proto in (("www.example.test.", 1, "udp"), ("nx.example.test.", 1, "udp"),
                               ("v6.example.test.", 28, "udp"), ("www.example.test.", 1, "tcp"),
                               ("nx.example.test.", 1, "tcp")):
        wire = dnslbtest.build_query(name, qtype)
        assert p.query(wire, proto) is not None
    same_counters(p)
    # dnsdist 1.7.3 leaves a UDP client's answers from a DoH server out of
    # the server's responses; dnslb counts every answer
    assert known("DNS over HTTPS backends")
    resp = {}
    for side in (p.theirs, p.ours):
        _, doc = side.web("/api/v1/servers/localhost")
        srv = json.loads(doc)["servers"][0]
        resp[side.impl] = (srv["queries"], srv["responses"])
    assert resp == {"dnsdist": (5, 2), "dnslb": (5, 5)}, resp
    ours, theirs = server_row(p.ours), server_row(p.theirs)
    assert ours == theirs, (ours, theirs)
    tcp = {}
    for side in (p.theirs, p.ours):
        lines = [l for l in side.console("showTCPStats()").splitlines()
                 if not l.startswith("Passing ")]
        i = lines.index("Backends:")
        row = lines[i + 2].split()
        # died sending/reading, gave up, the timeouts
        tcp[side.impl] = row[5:11]
    assert tcp["dnslb"] == tcp["dnsdist"], tcp
