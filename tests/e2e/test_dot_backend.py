"""DNS over TLS towards backends (newServer{tls="openssl", ...}) with
Debian's unbound as the DoT server, started here on a loopback port with a
test CA and no clear-text port at all: every answer came over TLS. UDP and
TCP clients are answered through it; certificates are validated by default
(an unknown CA, a wrong subjectName or subjectAddr, an expired certificate
fail the queries or the checks, never in clear; caStore or
validateCertificates=false work); health checks run
over TLS and mark the server down when it does not validate; one TLS
connection carries several queries; a new connection resumes the session of
the last one."""

import os
import re
import shutil
import ssl
import time

import dns.message
import dns.query
import dns.rcode
import pytest

import test_real_backend
from dnslbtest import (check_config_text, console, console_head, lua_server, make_query,
                       tcp_query, TcpClient)
from test_dot import pki  # noqa: F401 (the test CA and dns.test's certificate)

pytestmark = pytest.mark.dnslb_only("dnsdist 1.7.3 checks no name when subjectName is not "
                                    "given, and has no --workers")

UNBOUND = test_real_backend.UNBOUND


def unbound_tls_conf():
    """test_real_backend's unbound, serving DNS over TLS alone (no UDP, no
    clear TCP) with the test CA's certificate; {extra}: more options."""
    plain = "    interface: 127.0.0.1\n    port: {port}\n"
    conf = test_real_backend.UNBOUND_CONF
    assert plain in conf and "do-udp: yes" in conf
    return conf.replace(plain, (
        "    interface: 127.0.0.1@{port}\n"
        "    tls-port: {port}\n"
        "    tls-service-key: \"{pki}/dns.key\"\n"
        "    tls-service-pem: \"{pki}/{pem}\"\n"
        "    {extra}\n")).replace("do-udp: yes", "do-udp: no")


class Unbound(test_real_backend.Server):
    """unbound serving DNS over TLS only, on 127.0.0.1:port."""

    def __init__(self, workdir, pki, extra="", pem="dns.pem"):
        super().__init__("unbound", workdir)
        self.pki = pki
        self.extra = extra
        self.pem = pem

    def unbound_conf(self):
        return unbound_tls_conf().format(port=self.port, dir=self.dir, pki=self.pki,
                                         extra=self.extra, pem=self.pem)

    def ready(self):
        ctx = ssl.create_default_context(cafile=os.path.join(self.pki, "ca.pem"))
        if self.pem != "dns.pem":
            ctx.check_hostname = False      # a certificate that does not validate
            ctx.verify_mode = ssl.CERT_NONE
        q = dns.message.make_query("www.example.test.", "A")
        return bool(dns.query.tls(q, "127.0.0.1", port=self.port, ssl_context=ctx,
                                  server_hostname="dns.test", timeout=1).answer)


@pytest.fixture
def make_unbound(tmp_path, pki):
    if shutil.which(UNBOUND) is None:
        pytest.skip("unbound not installed")
    started = []

    def make(extra="", pem="dns.pem"):
        d = tmp_path / ("unbound%d" % len(started))
        d.mkdir()
        u = Unbound(str(d), pki, extra, pem).start()
        started.append(u)
        return u
    yield make
    for u in started:
        u.stop()


def dot_server(u, **opts):
    o = {"tls": "openssl", "checkName": "www.example.test."}
    o.update(opts)
    return lua_server("127.0.0.1:%d" % u.port, **o)


def backend_tcp_stats(d):
    """showTCPStats()'s line of backend 0: {column: value}."""
    lines = console(d, "showTCPStats()").splitlines()
    i = lines.index("Backends:")
    row = lines[i + 2].split()
    cols = ["#", "name", "address", "connections", "max", "died_sending", "died_reading",
            "gave_up", "read_timeouts", "write_timeouts", "connect_timeouts", "total",
            "reused", "tls_resumptions"]
    return {c: row[k] for k, c in enumerate(cols)}


def udp_answer(port, name, timeout=2.0):
    q = dns.message.make_query(name, "A")
    return dns.query.udp(q, "127.0.0.1", port=port, timeout=timeout)


def test_udp_and_tcp_clients_over_dot(dnslb, make_unbound, pki):
    u = make_unbound()
    d = dnslb("setVerboseHealthChecks(true)\n" + console_head() + dot_server(u, caStore=pki + "/ca.pem", subjectName="dns.test"),
              args=("--workers", "1"))
    assert d.wait_line("Marking downstream 127.0.0.1:%d as 'up'" % u.port) is not None
    r = udp_answer(d.port, "www.example.test.")
    assert r.rcode() == dns.rcode.NOERROR
    assert [rr.to_text() for rr in r.answer[0]] == ["192.0.2.10"]
    t = tcp_query(d.port, "www.example.test.")
    assert t.answer == r.answer
    assert d.stats()["tls-downstream-failures"] == 0


def test_connection_reuse(dnslb, make_unbound, pki):
    """Several queries, from one TCP client and over UDP: one TLS connection."""
    u = make_unbound()
    d = dnslb(console_head() + dot_server(u, caStore=pki + "/ca.pem", subjectName="dns.test"),
              args=("--workers", "1"))
    c = TcpClient(d.port)
    for i in range(5):
        c.send_msg(make_query("n%d.example.test." % i).to_wire())
        assert dns.message.from_wire(c.recv_msg()).rcode() == dns.rcode.NXDOMAIN
    c.close()
    for i in range(3):
        assert udp_answer(d.port, "www.example.test.").answer
    s = backend_tcp_stats(d)
    assert s["total"] == "1", s
    assert s["reused"] == "7", s
    assert s["connections"] == "1", s


def test_pipelining(dnslb, make_unbound, pki):
    """maxInFlight: a client's pipelined queries share one TLS connection."""
    u = make_unbound()
    d = dnslb(console_head() + dot_server(u, caStore=pki + "/ca.pem", subjectName="dns.test",
                                          maxInFlight=16),
              args=("--workers", "1"), listen_opts={"maxInFlight": 16})
    c = TcpClient(d.port)
    ids = set(range(100, 110))
    for i in sorted(ids):
        c.send_msg(make_query("p%d.example.test." % i, qid=i).to_wire())
    for _ in range(len(ids)):
        m = dns.message.from_wire(c.recv_msg())
        assert m.rcode() == dns.rcode.NXDOMAIN
        ids.discard(m.id)
    assert not ids
    c.close()
    s = backend_tcp_stats(d)
    assert s["total"] == "1" and s["reused"] == "9", s


def test_session_resumption(dnslb, make_unbound, pki):
    """unbound closes idle connections at once: each query opens a new TLS
    connection, which resumes the session of the one before."""
    u = make_unbound(extra="tcp-idle-timeout: 200")
    d = dnslb(console_head() + dot_server(u, caStore=pki + "/ca.pem", subjectName="dns.test"),
              args=("--workers", "1"))
    assert console(d, "print(getOutgoingTLSSessionCacheSize())") == "0\n"
    for i in range(3):
        assert udp_answer(d.port, "www.example.test.").answer
        deadline = time.monotonic() + 5
        while backend_tcp_stats(d)["connections"] != "0":
            assert time.monotonic() < deadline, "unbound did not close the idle connection"
            time.sleep(0.1)
    s = backend_tcp_stats(d)
    assert s["total"] == "3", s
    assert int(s["tls_resumptions"]) >= 1, s
    # the one session the worker keeps for the server
    assert console(d, "print(getOutgoingTLSSessionCacheSize())") == "1\n"


@pytest.mark.parametrize("opts,works", [
    ({}, False),                                            # the system's CAs: unknown CA
    ({"caStore": "@PKI@/ca.pem"}, True),                    # the address in the certificate
    ({"caStore": "@PKI@/ca.pem", "subjectName": "dns.test"}, True),
    ({"caStore": "@PKI@", "subjectName": "dns.test"}, False),    # a directory not hashed
    ({"caStore": "@PKI@/ca.pem", "subjectName": "wrong.test"}, False),
    ({"caStore": "@PKI@/ca.pem", "subjectAddr": "127.0.0.2"}, False),
    ({"validateCertificates": False}, True),
    ({"validateCertificates": False, "subjectName": "wrong.test"}, True),
], ids=["system-store", "castore-ip", "castore-name", "castore-dir-unhashed", "wrong-name",
        "wrong-addr", "no-validation", "no-validation-wrong-name"])
def test_validation(dnslb, make_unbound, pki, opts, works):
    """A forced-up server: the queries themselves succeed or fail."""
    u = make_unbound()
    opts = {k: (v.replace("@PKI@", pki) if isinstance(v, str) else v) for k, v in opts.items()}
    d = dnslb(console_head() + dot_server(u, healthCheckMode="up", **opts))
    if works:
        assert udp_answer(d.port, "www.example.test.").answer
        assert tcp_query(d.port, "www.example.test.").answer
        assert d.stats()["tls-downstream-failures"] == 0
        return
    with pytest.raises(dns.exception.Timeout):
        udp_answer(d.port, "www.example.test.", timeout=1.5)
    c = TcpClient(d.port)
    c.send_msg(make_query("www.example.test.").to_wire())
    assert c.wait_closed(5)
    c.close()
    assert d.stats()["tls-downstream-failures"] >= 2
    assert d.wait_line("TLS handshake with downstream") is not None


def expired_cert(pki):
    """dns.test's key in a certificate of the test CA that expired yesterday."""
    import datetime
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    def load(name):
        with open(os.path.join(pki, name), "rb") as f:
            return f.read()
    ca = x509.load_pem_x509_certificate(load("ca.pem"))
    ca_key = serialization.load_pem_private_key(load("ca.key"), None)
    key = serialization.load_pem_private_key(load("dns.key"), None)
    now = datetime.datetime.utcnow()
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dns.test")]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(7)
            .not_valid_before(now - datetime.timedelta(days=3))
            .not_valid_after(now - datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("dns.test")]), False)
            .sign(ca_key, hashes.SHA256()))
    with open(os.path.join(pki, "expired.pem"), "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    return "expired.pem"


def test_expired_certificate(dnslb, make_unbound, pki):
    u = make_unbound(pem=expired_cert(pki))
    d = dnslb("setVerboseHealthChecks(true)\n" + dot_server(u, caStore=pki + "/ca.pem",
                                                            subjectName="dns.test"))
    assert d.wait_line(r"failed: TLS handshake failed: certificate verify failed: "
                       r"certificate has expired") is not None
    with pytest.raises(dns.exception.Timeout):
        udp_answer(d.port, "www.example.test.", timeout=1.5)


def test_health_checks_over_tls(dnslb, make_unbound, pki):
    u = make_unbound()
    good = dot_server(u, caStore=pki + "/ca.pem", subjectName="dns.test", name="good")
    bad = dot_server(u, subjectName="dns.test", name="bad", pool="other")
    d = dnslb("setVerboseHealthChecks(true)\n" + good + bad)
    def marking(name, state):
        return re.escape("Marking downstream %s (127.0.0.1:%d) as '%s'" % (name, u.port, state))
    assert d.wait_line(marking("good", "up")) is not None
    assert d.wait_line(marking("bad", "down")) is not None
    assert d.wait_line(r"Health check of bad .* failed: TLS handshake failed: certificate "
                       r"verify failed") is not None
    # the server stops: down
    n = len(d.lines)
    u.stop()
    assert d.wait_line(marking("good", "down"), start=n) is not None


@pytest.mark.parametrize("opts,msg", [
    ('tls="gnutls"', "the TLS provider 'gnutls' is not supported by dnslb"),
    ('tls="openssl", caStore="/nonexistent/ca.pem"',
     "unable to read the CA store /nonexistent/ca.pem: No such file or directory"),
    ('tls="openssl", caStore="/etc/passwd"', "unable to load the CA store /etc/passwd"),
    ('tls="openssl", ciphers="NOSUCH"', "invalid ciphers NOSUCH"),
    ('tls="openssl", subjectAddr="dns.test"', "invalid subjectAddr 'dns.test'"),
])
def test_config_errors(tmp_path, opts, msg):
    rc, out = check_config_text(tmp_path, 'newServer{address="127.0.0.1:853", %s}\n' % opts)
    assert rc == 1, out
    assert msg in out, out


def test_config_accepted(tmp_path, pki):
    rc, out = check_config_text(tmp_path, (
        'newServer{address="127.0.0.1:853", tls="openssl", subjectName="dns.test", '
        'caStore="%s/ca.pem", ciphers="ECDHE-ECDSA-AES128-GCM-SHA256", '
        'ciphersTLS13="TLS_AES_128_GCM_SHA256", releaseBuffers=false, '
        'enableRenegotiation=false, validateCertificates=true}\n'
        'newServer{address="127.0.0.2", subjectName="x"}\n') % pki)
    assert rc == 0, out
    assert "'subjectName' is ignored without tls" in out, out


def test_reload_and_runtime_servers(dnslb, make_unbound, pki):
    """A reload keeps an unchanged DoT server (its context shared by the
    reload's copy), adds one, replaces one whose TLS options changed;
    newServer from the console adds one too. Each is checked over TLS."""
    u = make_unbound()
    head = console_head()
    a = dot_server(u, caStore=pki + "/ca.pem", name="a")
    b = dot_server(u, validateCertificates=False, name="b", pool="b")
    d = dnslb(head + a)
    assert udp_answer(d.port, "www.example.test.").answer

    def marked(name, state, start):
        return d.wait_line(re.escape("Marking downstream %s (127.0.0.1:%d) as '%s'"
                                     % (name, u.port, state)), start=start) is not None

    n = d.reload(head + a + b)
    assert marked("b", "up", n)
    assert not any("server a is no longer configured" in l for l in d.lines[n:])
    assert udp_answer(d.port, "www.example.test.").answer
    # a's name to check changes: another server, whose certificate does not match
    n = d.reload(head + dot_server(u, caStore=pki + "/ca.pem", name="a",
                                 subjectName="wrong.test") + b)
    assert marked("a", "down", n)
    console(d, 'newServer({address="127.0.0.1:%d", tls="openssl", caStore="%s/ca.pem", '
               'subjectName="dns.test", name="c", checkName="www.example.test."})'
            % (u.port, pki))
    assert marked("c", "up", n)
    assert udp_answer(d.port, "www.example.test.").answer
