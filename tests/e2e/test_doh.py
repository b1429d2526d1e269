"""DNS over HTTPS listeners (addDOHLocal) over TLS, with real clients: curl
(HTTP/2 by ALPN, HTTP/1.1, several streams on one connection), dnspython's
DoH client and Debian's kdig +https, validated against a test CA; GET and
POST give the answers plain TCP gives. Bad clients (a header block over the
bound, a body longer than a DNS message, plain DNS on the port, an idle
connection) get a clear, bounded answer or are closed, and the listener
serves on. SIGHUP reloads the certificates and keeps the listener. The
answers' bytes and headers beside dnsdist: tests/diff/test_doh_listener.py."""

import base64
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

from dnslbtest import free_port, lua_server, tcp_query
from test_dot import peer_serial, pki  # noqa: F401 (the fixture)

pytestmark = pytest.mark.dnslb_only("dnslb's DoH listener (dnsdist beside it: tests/diff)")

CURL = "/usr/bin/curl"


def doh_conf(responder, pki, port, opts="", urls='{"/dns-query"}'):
    return lua_server(responder) + (
        'addDOHLocal("127.0.0.1:%d", "%s/dns.pem", "%s/dns.key", %s%s)\n'
        % (port, pki, pki, urls, (", " + opts) if opts else ""))


def b64(wire):
    return base64.urlsafe_b64encode(wire).decode().rstrip("=")


def query_wire(qname, qtype="A"):
    q = dns.message.make_query(qname, qtype)
    q.id = 0
    return q.to_wire()


def curl(port, pki, path, *extra, data=None):
    """(HTTP version, status, body) of one request to https://dns.test:port."""
    argv = [CURL, "-s", "--max-time", "5", "--cacert", os.path.join(pki, "ca.pem"),
            "--resolve", "dns.test:%d:127.0.0.1" % port, "-o", "-",
            "-w", "\n%{http_version} %{http_code}"] + list(extra)
    if data is not None:
        argv += ["-H", "content-type: application/dns-message", "--data-binary", "@-"]
    r = subprocess.run(argv + ["https://dns.test:%d%s" % (port, path)], input=data,
                       capture_output=True, timeout=15)
    body, _, tail = r.stdout.rpartition(b"\n")
    version, status = tail.decode().split()
    return version, int(status), body


def test_doh_answers_as_tcp(dnslb, responder, pki):
    port = free_port()
    d = dnslb(doh_conf(responder, pki, port))
    assert d.wait_line(r"^Listening on 127\.0\.0\.1:%d for DoH$" % port) is not None
    plain = tcp_query(d.port, "www.example.test.")
    for extra in ((), ("--http1.1",)):
        version, status, body = curl(port, pki, "/dns-query?dns=" +
                                     b64(query_wire("www.example.test.")), *extra)
        assert (version, status) == ("1.1" if extra else "2", 200)
        assert dns.message.from_wire(body).answer == plain.answer
        version, status, body = curl(port, pki, "/dns-query", *extra,
                                     data=query_wire("www.example.test."))
        assert status == 200 and dns.message.from_wire(body).answer == plain.answer
    # a bad request gets dnsdist's status, over TLS too
    assert curl(port, pki, "/dns-query?foo=bar")[1:] == (400, b"Unable to find the DNS parameter")
    assert curl(port, pki, "/elsewhere")[1:] == (404, b"not found")
    # no UDP socket on a DoH listener
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(0.5)
    u.sendto(query_wire("www.example.test."), ("127.0.0.1", port))
    with pytest.raises((socket.timeout, ConnectionRefusedError)):
        u.recvfrom(512)
    u.close()


def test_doh_streams_on_one_connection(dnslb, responder, pki, tmp_path):
    """curl --parallel multiplexes 20 requests on one HTTP/2 connection, some
    answered late (out of order)."""
    port = free_port()
    dnslb(doh_conf(responder, pki, port))
    names = ["delay-%d.n%d.example.test." % ((20 - i) * 10, i) for i in range(20)]
    argv = [CURL, "-s", "--parallel", "--parallel-max", "20", "--http2", "--max-time", "10",
            "--cacert", os.path.join(pki, "ca.pem"),
            "--resolve", "dns.test:%d:127.0.0.1" % port, "-w", "%{num_connects}\n"]
    for i, n in enumerate(names):
        argv += ["-o", str(tmp_path / ("a%d" % i)),
                 "https://dns.test:%d/dns-query?dns=%s" % (port, b64(query_wire(n)))]
    r = subprocess.run(argv, capture_output=True, timeout=30)
    assert sum(int(x) for x in r.stdout.split()) == 1     # one connection
    for i, n in enumerate(names):
        m = dns.message.from_wire((tmp_path / ("a%d" % i)).read_bytes())
        assert m.question[0].name.to_text() == n and m.answer



def h2_frame(ftype, flags, stream, payload):
    return (len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + stream.to_bytes(4, "big")
            + payload)


def h2_post(stream, body):
    """HEADERS (HPACK: static-table names, literal values, no Huffman) and DATA of a POST."""
    def lit(index, value):      # literal without indexing, name from the static table
        v = value.encode()
        return (bytes([index]) if index < 15 else bytes([0x0f, index - 15])) + bytes([len(v)]) + v
    hdrs = (b"\x83\x87" + lit(4, "/dns-query") + lit(1, "dns.test")   # POST, https, :path, :authority
            + lit(31, "application/dns-message") + lit(28, str(len(body))))
    return h2_frame(1, 0x4, stream, hdrs) + h2_frame(0, 0x1, stream, body)


def recv_some(s):
    """What the socket has next; b"" at its end or after its timeout."""
    try:
        return s.recv(65536)
    except socket.timeout:
        return b""


def test_doh_posts_in_one_write(dnslb, responder, pki):
    """Eight POSTs in one TLS write, each a cache miss: all are forwarded in the
    same turn of the worker's loop, and each gets the answer to its own
    question (they once went to the backend as eight copies of the last one,
    and the others got a 502 after the backend's timeout)."""
    port = free_port()
    dnslb(doh_conf(responder, pki, port))
    names = ["p%d.batch.example.test." % i for i in range(8)]
    s = tls_socket(port, pki)
    assert s.selected_alpn_protocol() == "h2"
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0, b"")
              + b"".join(h2_post(1 + 2 * i, query_wire(n)) for i, n in enumerate(names)))
    bodies, done, buf = {}, set(), b""
    while len(done) < len(names):
        b = recv_some(s)
        if not b:
            break
        buf += b
        while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
            n = int.from_bytes(buf[:3], "big")
            ftype, flags, sid = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7fffffff
            if ftype == 0:
                bodies[sid] = bodies.get(sid, b"") + buf[9:9 + n]
            if ftype in (0, 1) and flags & 0x1:
                done.add(sid)
            buf = buf[9 + n:]
    s.close()
    assert len(done) == len(names)
    for i, n in enumerate(names):
        m = dns.message.from_wire(bodies[1 + 2 * i])
        assert m.question[0].name.to_text() == n and m.answer


def test_doh_http1_pipelined(dnslb, responder, pki):
    """Four HTTP/1.1 GETs in one write, each a cache miss: HTTP/1.1 takes the
    next request up only once the previous one is answered, from the
    backend's answer, not from a read; each must still be forwarded at once
    (a query queued for the backend there waited for the next read)."""
    port = free_port()
    dnslb(doh_conf(responder, pki, port))
    names = ["h%d.pipe.example.test." % i for i in range(4)]
    s = tls_socket(port, pki, alpn=("http/1.1",))
    s.settimeout(2)
    s.sendall(b"".join(b"GET /dns-query?dns=%s HTTP/1.1\r\nHost: dns.test\r\n\r\n"
                       % b64(query_wire(n)).encode() for n in names))
    buf, bodies = b"", []
    while len(bodies) < len(names):
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            head = buf[:end].decode("latin-1").lower().split("\r\n")
            clen = int([h for h in head if h.startswith("content-length:")][0].split(":")[1])
            if len(buf) >= end + 4 + clen:
                assert head[0].startswith("http/1.1 200"), head
                bodies.append(buf[end + 4:end + 4 + clen])
                buf = buf[end + 4 + clen:]
                continue
        b = recv_some(s)
        if not b:
            break
        buf += b
    s.close()
    assert len(bodies) == len(names), "answered %d of %d" % (len(bodies), len(names))
    for n, body in zip(names, bodies):
        m = dns.message.from_wire(body)
        assert m.question[0].name.to_text() == n and m.answer


def test_doh_dnspython(dnslb, responder, pki):
    port = free_port()
    d = dnslb(doh_conf(responder, pki, port))
    plain = tcp_query(d.port, "www.example.test.")
    for post in (False, True):
        q = dns.message.make_query("www.example.test.", "A")
        r = dns.query.https(q, "https://127.0.0.1:%d/dns-query" % port, post=post,
                            verify=os.path.join(pki, "ca.pem"), timeout=5)
        assert r.rcode() == dns.rcode.NOERROR and r.answer == plain.answer


@pytest.mark.skipif(shutil.which("kdig") is None, reason="kdig (knot-dnsutils) not installed")
def test_doh_kdig(dnslb, responder, pki):
    port = free_port()
    dnslb(doh_conf(responder, pki, port))
    for mode in ("+https", "+https-get"):
        r = subprocess.run(["kdig", "@127.0.0.1", "-p", str(port), mode,
                            "+tls-ca=%s/ca.pem" % pki, "+tls-hostname=dns.test",
                            "www.example.test.", "A"], capture_output=True, text=True,
                           timeout=15)
        assert "status: NOERROR" in r.stdout, r.stdout + r.stderr
        assert "192.0.2.1" in r.stdout


def tls_socket(port, pki, alpn=("h2",)):
    ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.pem"))
    ctx.set_alpn_protocols(list(alpn))
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    return ctx.wrap_socket(s, server_hostname="dns.test")


def read_all(s):
    data = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                return data
            data += b
    except (ConnectionResetError, ssl.SSLError):
        return data


def test_doh_bad_clients(dnslb, responder, pki):
    port = free_port()
    d = dnslb(doh_conf(responder, pki, port, "{idleTimeout=1}"))
    path = "/dns-query?dns=" + b64(query_wire("www.example.test."))
    # a header block over the bound (16 KiB): refused, the next request served
    version, status, _ = curl(port, pki, path, "--http1.1", "-H", "x-big: " + "a" * 20000)
    assert status in (400, 431)
    r = subprocess.run([CURL, "-s", "--http2", "--max-time", "5", "--cacert",
                        os.path.join(pki, "ca.pem"), "--resolve",
                        "dns.test:%d:127.0.0.1" % port, "-H", "x-big: " + "a" * 20000,
                        "https://dns.test:%d%s" % (port, path)], capture_output=True, timeout=10)
    assert r.returncode != 0 or b"\x00" not in r.stdout    # reset or refused, never an answer
    # a POST body longer than a DNS message
    assert curl(port, pki, "/dns-query", data=b"\0" * 70000)[1:] == (413, b"Payload Too Large")
    # plain DNS on the DoH port: the handshake fails, the connection closes
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        w = query_wire("www.example.test.")
        s.sendall(len(w).to_bytes(2, "big") + w)
        assert read_all(s)[:1] in (b"", b"\x15")
    # a truncated TLS record
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"\x16\x03\x01\x40\x00hello")
        s.shutdown(socket.SHUT_WR)
        read_all(s)
    # an idle connection is closed after idleTimeout
    with tls_socket(port, pki) as t:
        start = time.monotonic()
        read_all(t)     # the server's SETTINGS, then the close
        assert time.monotonic() - start < 8
    # serving on
    assert curl(port, pki, path)[1] == 200
    assert tcp_query(d.port, "www.example.test.").answer


def test_doh_sighup_reloads_certificates(dnslb, responder, pki):
    port = free_port()
    d = dnslb(doh_conf(responder, pki, port))
    assert peer_serial(port, pki) == 1
    shutil.copy(os.path.join(pki, "dns2.pem"), os.path.join(pki, "dns.pem"))
    d.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while peer_serial(port, pki) != 2:
        assert time.monotonic() < deadline, "the new certificate was not served"
        time.sleep(0.1)
    path = "/dns-query?dns=" + b64(query_wire("www.example.test."))
    assert curl(port, pki, path)[1] == 200
    # a reload that changes the listener's URLs is refused; it serves on
    with open(d.conf_path) as f:
        conf = f.read()
    with open(d.conf_path, "w") as f:
        f.write(conf.replace('{"/dns-query"}', '{"/other"}'))
    d.send_signal(signal.SIGHUP)
    assert d.wait_line("options of a DNS over TLS or HTTPS listener changed") is not None
    assert curl(port, pki, path)[1] == 200


def test_doh_check_config(pki, tmp_path):
    """--check-config names a missing certificate, a key without a
    certificate and a URL that is not a path, with the file and line."""
    from dnslbtest import dnslb_bin
    cases = [
        ('addDOHLocal("127.0.0.1:8443", "%s/nosuch.pem", "%s/dns.key")' % (pki, pki),
         "unable to read the certificate file"),
        ('addDOHLocal("127.0.0.1:8443", nil, "%s/dns.key")' % pki,
         "a key without a certificate"),
        ('addDOHLocal("127.0.0.1:8443", nil, nil, {"dns-query"})',
         "invalid URL path 'dns-query'"),
    ]
    for line, msg in cases:
        conf = tmp_path / "dnslb.conf"
        conf.write_text('newServer("127.0.0.1:53")\n' + line + "\n")
        r = subprocess.run([dnslb_bin(), "--check-config", "-C", str(conf)],
                           capture_output=True, text=True, timeout=10)
        assert r.returncode != 0
        assert msg in r.stdout + r.stderr and "dnslb.conf:2" in r.stdout + r.stderr
    conf.write_text('newServer("127.0.0.1:53")\naddDOHLocal("127.0.0.1:8443", "%s/dns.pem", '
                    '"%s/dns.key", {"/dns-query", "/q"}, {serverTokens="x", '
                    'customResponseHeaders={a="b"}})\n' % (pki, pki))
    r = subprocess.run([dnslb_bin(), "--check-config", "-C", str(conf)], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode == 0, r.stdout + r.stderr


def test_set_doh_response_map_entries_in_config(dnslb, responder, pki):
    """setDOHResponseMapEntries() in the configuration file: every DoH
    listener declared before it gets the map (two here); a path it does not
    match is still answered."""
    p1, p2 = free_port(), free_port()
    conf = (doh_conf(responder, pki, p1) +
            'addDOHLocal("127.0.0.1:%d", "%s/dns.pem", "%s/dns.key", "/dns-query")\n'
            % (p2, pki, pki) +
            'setDOHResponseMapEntries({newDOHResponseMapEntry("^/dns-query\\\\?tea", 418, "tea")})\n')
    dnslb(conf)
    for port in (p1, p2):
        assert curl(port, pki, "/dns-query?tea=1")[1:] == (418, b"tea")
        version, status, body = curl(port, pki, "/dns-query?dns=" + b64(query_wire("www.example.test.")))
        assert status == 200 and dns.message.from_wire(body).answer
