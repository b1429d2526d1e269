"""DNS over TLS and DNS over HTTPS listeners under reload and abuse:
certificates reloaded (SIGHUP, the console) while clients keep querying over
connections opened before, none of which is dropped; a handshake flood and
slowloris TLS clients (a ClientHello dribbled a byte at a time), closed by
the receive timeout while real clients are served; a DoT client and a DoH
client that never read their answers, closed at the output bound or the
send timeout, the listener serving on. Every load is bounded in count and
time, on 127.0.0.1."""

import os
import shutil
import signal
import socket
import ssl
import threading
import time

import dns.message
import h2.config
import h2.connection
import h2.settings
import httpx
import pytest

from dnslbtest import console, console_head, free_port, lua_server, tcp_query, udp_query
from test_dot import dot_query, peer_serial, pki, tls_context  # noqa: F401 (the fixture)

pytestmark = pytest.mark.dnslb_only("dnslb's TLS listeners under load and abuse")


def both_conf(responder, pki, dot_port, doh_port, extra="", doh_opts="", **server):
    return console_head() + lua_server(responder, **server) + extra + (
        'addTLSLocal("127.0.0.1:%d", "%s/dns.pem", "%s/dns.key")\n'
        'addDOHLocal("127.0.0.1:%d", "%s/dns.pem", "%s/dns.key", "/dns-query"%s)\n'
        % (dot_port, pki, pki, doh_port, pki, pki, (", " + doh_opts) if doh_opts else ""))


def wire(qname, qtype="A"):
    q = dns.message.make_query(qname, qtype)
    q.id = 0
    return q.to_wire()


class DotConn:
    """One persistent DoT connection, queried one message at a time."""

    def __init__(self, port, pki):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.t = tls_context(pki).wrap_socket(s, server_hostname="dns.test")

    def ask(self, qname):
        w = wire(qname)
        self.t.sendall(len(w).to_bytes(2, "big") + w)
        hdr = self._read(2)
        return dns.message.from_wire(self._read(int.from_bytes(hdr, "big")))

    def _read(self, n):
        b = b""
        while len(b) < n:
            chunk = self.t.recv(n - len(b))
            if not chunk:
                raise ConnectionError("closed by the server")
            b += chunk
        return b

    def close(self):
        self.t.close()


def doh_client(pki):
    return httpx.Client(http2=True, verify=os.path.join(pki, "ca.pem"), timeout=5)


def doh_ask(client, port, qname):
    r = client.post("https://127.0.0.1:%d/dns-query" % port, content=wire(qname),
                    headers={"content-type": "application/dns-message",
                             "accept": "application/dns-message"})
    assert r.status_code == 200 and r.http_version == "HTTP/2"
    return dns.message.from_wire(r.content)


def test_certificates_reloaded_under_load_drop_nothing(dnslb, responder, pki):
    """Two clients query without pause over a DoT and a DoH connection opened
    before the first reload, while the certificates change four times
    (SIGHUP, reloadAllCertificates(), getTLSFrontend(0):reloadCertificates(),
    getDOHFrontend(0):reloadCertificates()): every query is answered on the
    same connections, and a new connection gets the certificate of the last
    reload."""
    dot_port, doh_port = free_port(), free_port()
    d = dnslb(both_conf(responder, pki, dot_port, doh_port))
    dot = DotConn(dot_port, pki)
    doh = doh_client(pki)
    assert dot.ask("first.example.test.").answer
    assert doh_ask(doh, doh_port, "first.example.test.").answer
    stop = threading.Event()
    done = {"dot": 0, "doh": 0}
    errors = []

    def load(kind):
        i = 0
        try:
            while not stop.is_set():
                name = "%s%d.example.test." % (kind, i)
                m = dot.ask(name) if kind == "dot" else doh_ask(doh, doh_port, name)
                assert m.question[0].name.to_text() == name and m.answer
                done[kind] += 1
                i += 1
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append("%s: %r" % (kind, e))

    doh_probes = 0      # TLS connections to the DoH port that send no request
    threads = [threading.Thread(target=load, args=(k,)) for k in ("dot", "doh")]
    for t in threads:
        t.start()
    try:
        steps = [lambda: d.send_signal(signal.SIGHUP),
                 lambda: console(d, "reloadAllCertificates()"),
                 lambda: console(d, "getTLSFrontend(0):reloadCertificates()"),
                 lambda: console(d, "getDOHFrontend(0):reloadCertificates()")]
        for k, step in enumerate(steps):
            serial = 2 if k % 2 == 0 else 1
            shutil.copy(os.path.join(pki, "dns%d.pem" % serial), os.path.join(pki, "dns.pem"))
            before = dict(done)
            step()
            deadline = time.monotonic() + 10
            # the listener reloaded: a new connection sees the new certificate
            port = doh_port if k == 3 else dot_port
            while True:
                doh_probes += port == doh_port
                if peer_serial(port, pki) == serial:
                    break
                assert time.monotonic() < deadline, "step %d: certificate not reloaded" % k
                time.sleep(0.05)
            # and the old connections kept answering meanwhile
            while done["dot"] <= before["dot"] + 5 or done["doh"] <= before["doh"] + 5:
                assert not errors, errors
                assert time.monotonic() < deadline, "step %d: the load stalled" % k
                time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert not errors, errors
    assert done["dot"] > 20 and done["doh"] > 20
    assert dot.ask("last.example.test.").answer
    assert doh_ask(doh, doh_port, "last.example.test.").answer
    # the same DoH connection served all of it: the listener accepted it and
    # the certificate probes, nothing else; every POST was an HTTP/2 query
    fronts = console(d, "showDOHFrontends()").splitlines()
    assert len(fronts) == 2, fronts
    f = fronts[1].split()      # # Address HTTP HTTP/1 HTTP/2 GET POST ...
    assert (f[2], f[3], f[4], f[5], f[6]) == (
        str(1 + doh_probes), "0", str(done["doh"] + 2), "0", str(done["doh"] + 2)), fronts
    dot.close()
    doh.close()


def partial_client_hello():
    """The first bytes of a real ClientHello (a TLS record header and the
    start of the handshake message), taken from Python's own."""
    a, b = socket.socketpair()
    try:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        t = ctx.wrap_socket(a, server_hostname="dns.test", do_handshake_on_connect=False)
        t.setblocking(False)
        try:
            t.do_handshake()
        except ssl.SSLWantReadError:
            pass
        hello = b.recv(4096)
        t.close()
    finally:
        b.close()
    assert hello[:1] == b"\x16"
    return hello[:64]


def test_handshake_flood_and_slowloris(dnslb, responder, pki):
    """200 connections (100 per listener) each dribble a ClientHello a byte
    every 0.3 s, and 100 more complete a handshake and go away without a
    query. Meanwhile DoT, DoH, TCP and UDP clients are answered; the
    dribbling connections are closed before their ClientHello is whole: on
    the DoT listener by the receive timeout (2 s), on the DoH listener by its
    idleTimeout (2 s), both counted from the connection's start (bytes of an
    unfinished handshake do not extend it), and the listeners serve on."""
    dot_port, doh_port = free_port(), free_port()
    d = dnslb(both_conf(responder, pki, dot_port, doh_port, "setTCPRecvTimeout(2)\n",
                        "{idleTimeout=2}"))
    hello = partial_client_hello()
    slow = []
    for i in range(200):
        s = socket.create_connection(("127.0.0.1", dot_port if i % 2 else doh_port), timeout=5)
        slow.append(s)
    # handshakes that finish and leave at once
    for i in range(100):
        with socket.create_connection(("127.0.0.1", dot_port if i % 2 else doh_port),
                                      timeout=5) as s:
            with tls_context(pki).wrap_socket(s, server_hostname="dns.test"):
                pass
    start = time.monotonic()
    closed = set()
    pos = 0
    with doh_client(pki) as doh:
        while len(closed) < len(slow) and time.monotonic() - start < 10:
            for k, s in enumerate(slow):
                if k in closed:
                    continue
                try:
                    s.sendall(hello[pos:pos + 1])
                    s.setblocking(False)
                    try:
                        if s.recv(1) == b"":
                            closed.add(k)
                    except BlockingIOError:
                        pass
                    finally:
                        s.setblocking(True)
                except (BrokenPipeError, ConnectionResetError):
                    closed.add(k)
            pos = min(pos + 1, len(hello) - 2)      # never the whole ClientHello
            # real clients are served all along
            assert dot_query(dot_port, "real.example.test.", pki).answer
            assert doh_ask(doh, doh_port, "real.example.test.").answer
            assert udp_query(d.port, "real.example.test.").answer
            assert tcp_query(d.port, "real.example.test.").answer
            time.sleep(0.3)
    elapsed = time.monotonic() - start
    for s in slow:
        s.close()
    assert len(closed) == len(slow), "%d of %d slow clients still open after %.1f s" % (
        len(slow) - len(closed), len(slow), elapsed)
    assert dot_query(dot_port, "after.example.test.", pki).answer


def wait_served_until(d, dot_port, doh_port, pki, counter, limit=15):
    """Query over DoT and DoH until @counter is 1 (at most @limit s)."""
    deadline = time.monotonic() + limit
    while True:
        assert dot_query(dot_port, "real.example.test.", pki).answer
        with doh_client(pki) as doh:
            assert doh_ask(doh, doh_port, "real.example.test.").answer
        st = d.stats()
        if st.get(counter, 0) >= 1:
            return st
        assert time.monotonic() < deadline, "%s still 0" % counter
        time.sleep(0.3)


def test_clients_that_never_read(dnslb, responder, pki):
    """A DoT client pipelines 400 queries with 16 KB answers and a DoH client
    posts 100 with 60 KB answers on one HTTP/2 connection (6 MB each: more
    than the kernel's autotuned send buffer takes), and neither reads: the
    DoT connection is closed at the output bound (128 KiB,
    tcp-output-buffer-full), the DoH one by the send timeout; both listeners
    serve other clients all along. The backend is TCP-only (large answers)."""
    dot_port, doh_port = free_port(), free_port()
    d = dnslb(both_conf(responder, pki, dot_port, doh_port,
                        "setTCPSendTimeout(1)\nsetMaxTCPOutputBufferSize(131072)\n",
                        tcpOnly=True))
    big = wire("size-16000.example.test.", "TXT")
    huge = wire("size-60000.example.test.", "TXT")

    def stuck(port, payload):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(5)
        s.connect(("127.0.0.1", port))
        ctx = tls_context(pki)
        if port == doh_port:
            ctx.set_alpn_protocols(["h2"])
        t = ctx.wrap_socket(s, server_hostname="dns.test")
        t.sendall(payload)
        return t

    dot_payload = (len(big).to_bytes(2, "big") + big) * 400
    h2c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    h2c.initiate_connection()
    h2c.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2 ** 31 - 1})
    h2c.increment_flow_control_window(2 ** 30)
    preface = h2c.data_to_send()

    def doh_batch():
        """20 POSTs."""
        for i in range(20):
            sid = h2c.get_next_available_stream_id()
            h2c.send_headers(sid, [(":method", "POST"), (":path", "/dns-query"),
                                   (":scheme", "https"), (":authority", "dns.test"),
                                   ("content-type", "application/dns-message"),
                                   ("content-length", str(len(huge)))])
            h2c.send_data(sid, huge, end_stream=True)
        return h2c.data_to_send()

    # one after the other (they share the test's one backend): others are
    # served meanwhile, and the stuck connection is closed, the DoH one by the
    # send timeout (a client timeout), the DoT one at the output bound;
    # nothing is read from either until then
    t2 = stuck(doh_port, preface)
    for i in range(5):
        t2.sendall(doh_batch())
        time.sleep(0.3)
    wait_served_until(d, dot_port, doh_port, pki, "tcp-client-timeouts")
    t1 = stuck(dot_port, dot_payload)
    st = wait_served_until(d, dot_port, doh_port, pki, "tcp-output-buffer-full")
    assert (st["tcp-output-buffer-full"], st["tcp-client-timeouts"]) == (1, 1)
    for t in (t1, t2):
        # what the server had sent, then the end of the connection
        t.settimeout(5)
        try:
            while t.recv(65536):
                pass
        except (ConnectionResetError, ssl.SSLError):
            pass
    t1.close()
    t2.close()
    assert tcp_query(d.port, "after.example.test.").answer
