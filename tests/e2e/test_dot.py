"""DNS over TLS listeners (addTLSLocal): real clients (dnspython's DoT client
and Debian's kdig +tls) get the same answers as over plain TCP, validated
against a test CA; TLS listeners have no UDP socket; bad clients (plain DNS
on the TLS port, a truncated TLS record, a handshake never finished) are
closed and the listener serves on; SIGHUP reloads the certificates (new
connections get the new one) and refuses to change the listener's options;
--check-config names a missing or mismatched file."""

import os
import shutil
import signal
import socket
import ssl
import subprocess
import time

import dns.message
import dns.query
import dns.rcode
import pytest

from dnslbtest import console, console_head, free_port, lua_server, tcp_query

pytestmark = pytest.mark.dnslb_only("the TLS listener's e2e cases run on dnslb (dnsdist's own "
                                    "DoT is the reference of the unit cases)")


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def pki(tmp_path):
    """A test CA and two certificates for dns.test and 127.0.0.1 (serials 1
    and 2, ECDSA P-256), plus a key that matches neither."""
    d = str(tmp_path)
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=dnslb test CA",
            cwd=d)
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-out", "dns.key", cwd=d)
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-out", "other.key", cwd=d)
    openssl("req", "-new", "-key", "dns.key", "-out", "dns.csr", "-subj", "/CN=dns.test", cwd=d)
    with open(os.path.join(d, "ext.cnf"), "w") as f:
        f.write("subjectAltName=DNS:dns.test,IP:127.0.0.1\n")
    for serial in (1, 2):
        openssl("x509", "-req", "-in", "dns.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-set_serial", str(serial), "-days", "2", "-extfile", "ext.cnf",
                "-out", "dns%d.pem" % serial, cwd=d)
    shutil.copy(os.path.join(d, "dns1.pem"), os.path.join(d, "dns.pem"))
    return d


def tls_context(pki):
    return ssl.create_default_context(cafile=os.path.join(pki, "ca.pem"))


def dot_query(port, qname, pki, qtype="A", timeout=5.0):
    q = dns.message.make_query(qname, qtype)
    return dns.query.tls(q, "127.0.0.1", port=port, ssl_context=tls_context(pki),
                         server_hostname="dns.test", timeout=timeout)


def peer_serial(port, pki):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        with tls_context(pki).wrap_socket(s, server_hostname="dns.test") as t:
            der = t.getpeercert(binary_form=True)
    out = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout", "-serial"], input=der,
                         capture_output=True, check=True).stdout.decode()
    return int(out.strip().split("=")[1], 16)


def read_to_close(s):
    """What the server sent before it closed: b"" (nothing), b"alert" (TLS
    alert records only) or the bytes themselves."""
    data = b""
    try:
        while True:
            b = s.recv(4096)
            if not b:
                break
            data += b
    except ConnectionResetError:
        pass
    if data and data[0] == 0x15:
        return b"alert"
    return data


def dot_conf(responder, pki, port, opts=""):
    return lua_server(responder) + (
        'addTLSLocal("127.0.0.1:%d", "%s/dns.pem", "%s/dns.key"%s)\n'
        % (port, pki, pki, (", " + opts) if opts else ""))


def test_dot_answers_as_tcp(dnslb, responder, pki):
    port = free_port()
    d = dnslb(dot_conf(responder, pki, port, "{minTLSVersion='tls1.2'}"))
    assert d.wait_line(r"^Listening on 127\.0\.0\.1:%d for TLS$" % port) is not None
    r = dot_query(port, "www.example.test.", pki)
    plain = tcp_query(d.port, "www.example.test.")
    assert r.rcode() == dns.rcode.NOERROR
    assert r.answer and r.answer == plain.answer
    # several queries on one connection, and several connections
    for i in range(5):
        assert dot_query(port, "n%d.example.test." % i, pki).answer
    # no UDP socket on a TLS listener
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(0.5)
    u.sendto(dns.message.make_query("www.example.test.", "A").to_wire(), ("127.0.0.1", port))
    with pytest.raises((socket.timeout, ConnectionRefusedError)):
        u.recvfrom(512)
    u.close()


@pytest.mark.skipif(shutil.which("kdig") is None, reason="kdig (knot-dnsutils) not installed")
def test_dot_kdig(dnslb, responder, pki):
    port = free_port()
    dnslb(dot_conf(responder, pki, port))
    out = subprocess.run(["kdig", "+tls", "+tls-ca=%s/ca.pem" % pki, "+tls-hostname=dns.test",
                          "@127.0.0.1", "-p", str(port), "www.example.test.", "A"],
                         capture_output=True, text=True, timeout=20).stdout
    assert "status: NOERROR" in out, out
    assert "TLS session (TLS1.3)" in out, out
    assert "ANSWER: 1" in out, out


def test_dot_validation_by_client(dnslb, responder, pki):
    """A client that expects another name refuses the certificate."""
    port = free_port()
    dnslb(dot_conf(responder, pki, port))
    q = dns.message.make_query("www.example.test.", "A")
    with pytest.raises(ssl.SSLCertVerificationError):
        dns.query.tls(q, "127.0.0.1", port=port, ssl_context=tls_context(pki),
                      server_hostname="other.test", timeout=5)


def test_dot_bad_clients(dnslb, responder, pki):
    port = free_port()
    d = dnslb(dot_conf(responder, pki, port) + "setTCPRecvTimeout(1)\n")
    # plain DNS over TCP on the TLS port: no answer (a TLS alert at most), closed
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        wire = dns.message.make_query("www.example.test.", "A").to_wire()
        s.sendall(len(wire).to_bytes(2, "big") + wire)
        assert read_to_close(s) in (b"", b"alert")
    # a truncated TLS record, then the end
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"\x16\x03\x01\x02\x00\x01\x00")
    # a handshake never begun: closed by the receive timeout
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        start = time.monotonic()
        assert s.recv(1) == b""
        assert time.monotonic() - start < 4.5
    # still serving, over TLS and plain
    assert dot_query(port, "www.example.test.", pki).answer
    assert tcp_query(d.port, "www.example.test.").answer


def test_dot_sighup_reloads_certificates(dnslb, responder, pki):
    port = free_port()
    d = dnslb(dot_conf(responder, pki, port))
    assert peer_serial(port, pki) == 1
    shutil.copy(os.path.join(pki, "dns2.pem"), os.path.join(pki, "dns.pem"))
    d.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while peer_serial(port, pki) != 2:
        assert time.monotonic() < deadline, "the new certificate was not served"
        time.sleep(0.1)
    assert dot_query(port, "www.example.test.", pki).answer
    # a reload that changes the listener's options is refused; it serves on
    with open(d.conf_path) as f:
        conf = f.read()
    with open(d.conf_path, "w") as f:
        f.write(conf.replace('dns.key")', 'dns.key", {minTLSVersion="tls1.3"})'))
    d.send_signal(signal.SIGHUP)
    assert d.wait_line("options of a DNS over TLS or HTTPS listener changed") is not None
    assert dot_query(port, "www.example.test.", pki).answer
    assert peer_serial(port, pki) == 2


def test_console_tls_frontends(dnslb, responder, pki):
    """getTLSFrontend(n):reloadCertificates(), rotateTicketsKey() and
    loadTicketsKeys(file), getTLSContext(n), reloadAllCertificates()."""
    port = free_port()
    keys = os.path.join(pki, "tickets.key")
    with open(keys, "wb") as f:
        f.write(os.urandom(160))
    d = dnslb(console_head() + dot_conf(responder, pki, port))
    assert console(d, "print(getTLSFrontend(0))") == "TLSFrontend(127.0.0.1:%d)\n" % port
    assert console(d, "print(getTLSFrontendCount())") == "1\n"
    # (the bind numbering and getBind() beside dnsdist: tests/diff/test_globals.py)
    assert console(d, "getTLSContext(1)") == (
        "Error: trying to get TLS context with index 1 but we only have 1 context(s)\n")
    assert console(d, "getTLSFrontend(1)") == (
        "Error: trying to get TLS frontend with index 1 but we only have 1 frontends\n")
    assert console(d, "getTLSContext(0):rotateTicketsKey()") == ""
    assert console(d, 'getTLSFrontend(0):loadTicketsKeys("%s")' % keys) == ""
    assert "unable to open the tickets key file" in console(
        d, 'getTLSFrontend(0):loadTicketsKeys("%s/nosuch")' % pki)
    assert peer_serial(port, pki) == 1
    shutil.copy(os.path.join(pki, "dns2.pem"), os.path.join(pki, "dns.pem"))
    assert console(d, "getTLSFrontend(0):reloadCertificates()") == ""
    assert peer_serial(port, pki) == 2
    shutil.copy(os.path.join(pki, "dns1.pem"), os.path.join(pki, "dns.pem"))
    assert console(d, "reloadAllCertificates()") == ""
    assert peer_serial(port, pki) == 1
    assert dot_query(port, "www.example.test.", pki).answer


def dot_connection(port, ctx, queries, session=None):
    """One DoT connection with @queries queries over it (Python's client);
    @return its session, or None when the handshake failed."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            with ctx.wrap_socket(s, server_hostname="dns.test", session=session) as t:
                for i in range(queries):
                    wire = dns.message.make_query("c%d.example.test." % i, "A").to_wire()
                    t.sendall(len(wire).to_bytes(2, "big") + wire)
                    n = int.from_bytes(t.recv(2), "big")
                    while n > 0:
                        n -= len(t.recv(n))
                return t.session
    except ssl.SSLError:
        return None


def test_dot_counters_over_workers(dnslb, responder, pki):
    """The TLS figures of connections spread over 4 workers add up: new
    sessions and resumptions, queries by version, failed handshakes by
    reason (also connections that died reading), ticket keys."""
    port = free_port()
    d = dnslb(console_head() + dot_conf(responder, pki, port, "{minTLSVersion='tls1.2'}"),
              args=("--workers", "4"))
    v12, v13 = tls_context(pki), tls_context(pki)
    v12.maximum_version = ssl.TLSVersion.TLSv1_2
    v13.minimum_version = ssl.TLSVersion.TLSv1_3
    s12 = dot_connection(port, v12, 2)
    for _ in range(3):
        assert dot_connection(port, v12, 1, s12) is not None     # resumed
    for _ in range(4):
        assert dot_connection(port, v13, 3) is not None
    weak = tls_context(pki)
    weak.maximum_version = ssl.TLSVersion.TLSv1_2
    weak.set_ciphers("AES128-SHA256")
    assert dot_connection(port, weak, 1) is None
    time.sleep(0.3)     # the refused handshake counted by its worker
    frontend = [line.split() for line in console(d, "showTCPStats()").splitlines()
                if line.startswith("2 ")][0]
    del frontend[10]    # the average duration
    # died reading: the failed handshake; TLS: 5 new, 3 resumed, 5 queries
    # over TLS 1.2 and 12 over TLS 1.3
    assert frontend[4] == "1"
    assert frontend[10:] == ["5", "3", "0", "0", "0", "0", "5", "12", "0"]
    errors = console(d, "showTLSErrorCounters()").splitlines()
    assert errors[0].split()[:3] == ["#", "Address", "DH"]
    assert errors[1].split() == ["0", "127.0.0.1:%d" % port, "0", "0", "1", "0", "0", "0", "0",
                                 "0"]
    assert errors[2:] == [""]
    assert console(d, "getTLSContext(0):rotateTicketsKey()") == ""
    assert console(d, "showTLSContexts()").splitlines()[1].split()[:4] == [
        "0", "127.0.0.1:%d" % port, "2", "43200"]


@pytest.mark.parametrize("files,msg", [
    (("nosuch.pem", "dns.key"), "addTLSLocal: unable to read the certificate file '%s/nosuch.pem': "
                                "No such file or directory"),
    (("dns.pem", "other.key"), "addTLSLocal: the key %s/other.key does not match the certificate "
                               "%s/dns.pem"),
])
def test_check_config_names_the_file(pki, files, msg, tmp_path):
    from dnslbtest import dnslb_bin
    conf = tmp_path / "check.conf"
    conf.write_text('addTLSLocal("127.0.0.1:853", "%s/%s", "%s/%s")\n'
                    % (pki, files[0], pki, files[1]))
    r = subprocess.run([dnslb_bin(), "--check-config", "-C", str(conf)], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1
    want = msg.replace("%s", pki)
    assert ("%s:1: %s" % (conf, want)) in r.stdout, r.stdout
