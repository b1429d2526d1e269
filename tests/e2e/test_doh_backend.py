"""DNS over HTTPS towards backends (newServer{dohPath=..., tls="openssl"}).

The DoH server is Debian's dnsdist 1.7.3 (addDOHLocal with the test CA's
certificate for dns.test, forwarding to a scripted UDP backend), started
here on loopback; or, to see the requests themselves and to misbehave, a
small HTTP/2 server written with python3-h2 (H2Server below). UDP, TCP and
DoT clients are answered through it; many parallel queries share one
HTTP/2 connection; a new connection resumes the last one's TLS session;
health checks go over DoH; certificates are validated (wrong name, unknown
CA, expired); the request carries dnsdist's headers, X-Forwarded-* with
addXForwardedHeaders; a server that answers 500, garbage, a huge body,
resets the stream, sends GOAWAY or closes mid-stream fails the queries it
should and nothing else."""

import os
import re
import socket
import ssl
import threading
import time

import dns.exception
import dns.message
import dns.query
import dns.rcode
import dns.flags
import dns.rrset
import pytest

import dnslbtest
from dnslbtest import console, console_head, lua_server, make_query, tcp_query, wait_until
from test_dot import pki, dot_query  # noqa: F401 (the test CA and dns.test's certificate)
from test_dot_backend import backend_tcp_stats, expired_cert

pytestmark = pytest.mark.dnslb_only("starts dnsdist 1.7.3 itself as the DoH server")

h2 = pytest.importorskip("h2.connection")
import h2.config  # noqa: E402
import h2.events  # noqa: E402


# ---- dnsdist 1.7.3 as the DoH server -----------------------------------------------

def dnsdist_doh(tmp_path, pki, responder, name="dohsrv", pem="dns.pem"):
    """dnsdist 1.7.3 serving DoH on a free port (path /dns-query) with
    @pem, forwarding to @responder over UDP. .doh_port: its port."""
    port = dnslbtest.free_port()
    conf = ('addDOHLocal("127.0.0.1:%d", "%s/%s", "%s/dns.key", "/dns-query")\n'
            % (port, pki, pem, pki)) + lua_server(responder)
    d = dnslbtest.Daemon(str(tmp_path), conf, listen=False, impl="dnsdist", name=name)
    d.start()
    d.doh_port = port
    return d


def dnsdist_console(d, cmd):
    import subprocess
    r = subprocess.run([dnslbtest.DNSDIST, "-C", d.conf_path, "-c", "-e", cmd],
                       capture_output=True, text=True, timeout=10, cwd=d.workdir)
    return r.stdout


def doh_frontend_figures(d):
    """dnsdist's showDOHFrontends() line and the TLS figures of its
    frontend in showTCPStats(): {"post": n, "tls_new": n, "tls_resumed": n,
    "max_conns": n}."""
    rows = dnsdist_console(d, "showDOHFrontends()").splitlines()
    post = int(rows[1].split()[6])
    lines = dnsdist_console(d, "showTCPStats()").splitlines()
    i = lines.index("Frontends:")
    row = lines[i + 2].split()
    return {"post": post, "max_conns": int(row[3]), "tls_new": int(row[11]),
            "tls_resumed": int(row[12])}


@pytest.fixture
def dohsrv(tmp_path, pki, responder):
    started = []

    def make(**kw):
        d = dnsdist_doh(tmp_path, pki, responder, name="dohsrv%d" % len(started), **kw)
        started.append(d)
        return d
    yield make
    for d in started:
        d.stop()


def doh_server(port, **opts):
    o = {"tls": "openssl", "dohPath": "/dns-query", "subjectName": "dns.test"}
    o.update(opts)
    return lua_server("127.0.0.1:%d" % port, **o)


def udp_answer(port, name, timeout=2.0):
    return dns.query.udp(make_query(name), "127.0.0.1", port=port, timeout=timeout)


def marking(port, state, name=None):
    if name is None:
        return re.escape("Marking downstream 127.0.0.1:%d as '%s'" % (port, state))
    return re.escape("Marking downstream %s (127.0.0.1:%d) as '%s'" % (name, port, state))


# ---- a scripted HTTP/2 server (python3-h2) -------------------------------------------

class H2Server:
    """A DoH server over TLS (ALPN h2) that records every request's headers
    and answers by the first label of the query's name:
      h500      status 500
      garbage   200 and a body that is no DNS message
      huge      200 and a 70000-byte body
      rst       RST_STREAM (INTERNAL_ERROR)
      close     the connection closed, no answer
      goaway    the answer, then GOAWAY and the connection closed
      slow-<ms> the answer after <ms> milliseconds
      (other)   A 192.0.2.99
    With proxy=True each connection starts (inside TLS) with a PROXY v2
    header, recorded in self.proxy_headers (raw bytes, in arrival order);
    self.closed counts the connections the client closed."""

    def __init__(self, pki, pem="dns.pem", proxy=False):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(os.path.join(pki, pem), os.path.join(pki, "dns.key"))
        self.ctx.set_alpn_protocols(["h2"])
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.requests = []          # (headers as a list of (name, value), qname)
        self.connections = 0
        self.closed = 0
        self.proxy = proxy
        self.proxy_headers = []
        self.lock = threading.Lock()
        self.stopping = False
        threading.Thread(target=self._accept, daemon=True).start()

    def stop(self):
        self.stopping = True
        self.sock.close()

    def _accept(self):
        while not self.stopping:
            try:
                s, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(s,), daemon=True).start()

    def _serve(self, raw):
        try:
            s = self.ctx.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError):
            raw.close()
            return
        with self.lock:
            self.connections += 1
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        conn.initiate_connection()
        out_lock = threading.Lock()
        pending = {}                # stream: bytes still to send
        bodies, heads = {}, {}

        def flush():
            with out_lock:
                for sid in list(pending):
                    data = pending[sid]
                    while data:
                        n = min(len(data), conn.local_flow_control_window(sid),
                                conn.max_outbound_frame_size)
                        if n <= 0:
                            break
                        conn.send_data(sid, data[:n], end_stream=(n == len(data)))
                        data = data[n:]
                    if data:
                        pending[sid] = data
                    else:
                        del pending[sid]
                out = conn.data_to_send()
            if out:
                s.sendall(out)

        def respond(sid, status, body, then_goaway=False):
            with out_lock:
                conn.send_headers(sid, [(":status", str(status)),
                                        ("content-type", "application/dns-message"),
                                        ("content-length", str(len(body)))])
                if body:
                    pending[sid] = body
                else:
                    conn.end_stream(sid)
            flush()
            if then_goaway:
                with out_lock:
                    conn.close_connection()
                    s.sendall(conn.data_to_send())
                time.sleep(0.1)
                s.close()

        try:
            s.sendall(conn.data_to_send())
            head = b""
            while self.proxy:
                chunk = s.recv(65535)
                if not chunk:
                    with self.lock:
                        self.closed += 1
                    return
                head += chunk
                if len(head) >= 16:
                    assert head[:12] == b"\r\n\r\n\x00\r\nQUIT\n", head
                    n = 16 + int.from_bytes(head[14:16], "big")
                    if len(head) >= n:
                        with self.lock:
                            self.proxy_headers.append(head[:n])
                        head = head[n:]
                        break
            while True:
                data, head = head or s.recv(65535), b""
                if not data:
                    with self.lock:
                        self.closed += 1
                    break
                with out_lock:
                    events = conn.receive_data(data)
                for ev in events:
                    if isinstance(ev, h2.events.RequestReceived):
                        heads[ev.stream_id] = [(k.decode(), v.decode()) for k, v in ev.headers]
                        bodies[ev.stream_id] = b""
                    elif isinstance(ev, h2.events.DataReceived):
                        bodies[ev.stream_id] += ev.data
                        with out_lock:
                            conn.acknowledge_received_data(ev.flow_controlled_length,
                                                           ev.stream_id)
                    elif isinstance(ev, h2.events.StreamEnded):
                        if self._answer(s, conn, out_lock, ev.stream_id, heads, bodies,
                                        respond):
                            return
                flush()
        except (OSError, ssl.SSLError, h2.exceptions.ProtocolError):
            pass
        finally:
            try:
                s.close()
            except OSError:
                pass

    def _answer(self, s, conn, out_lock, sid, heads, bodies, respond):
        """Answer stream @sid; True when the connection is to end now."""
        q = dns.message.from_wire(bodies[sid])
        qname = q.question[0].name.to_text()
        with self.lock:
            self.requests.append((heads[sid], qname, bodies[sid]))
        label = qname.split(".")[0]
        r = dns.message.make_response(q)
        r.answer.append(dns.rrset.from_text(q.question[0].name, 60, "IN", "A", "192.0.2.99"))
        if label == "h500":
            respond(sid, 500, b"")
        elif label == "garbage":
            respond(sid, 200, b"this is not DNS")
        elif label == "huge":
            respond(sid, 200, b"\0" * 70000)
        elif label == "rst":
            with out_lock:
                conn.reset_stream(sid, error_code=2)
        elif label == "close":
            s.close()
            return True
        elif label == "goaway":
            respond(sid, 200, r.to_wire(), then_goaway=True)
            return True
        elif label.startswith("slow-"):
            def later():
                time.sleep(int(label[5:]) / 1000.0)
                try:
                    respond(sid, 200, r.to_wire())
                except OSError:
                    pass
            threading.Thread(target=later, daemon=True).start()
        else:
            respond(sid, 200, r.to_wire())
        return False

    def names(self):
        with self.lock:
            return [n for _, n, _ in self.requests]

    def headers_for(self, qname):
        with self.lock:
            for h, n, _ in self.requests:
                if n == qname:
                    return h
        return None


@pytest.fixture
def h2srv(pki):
    started = []

    def make(**kw):
        s = H2Server(pki, **kw)
        started.append(s)
        return s
    yield make
    for s in started:
        s.stop()


# ---- through dnsdist 1.7.3's DoH frontend ----------------------------------------------

def test_udp_tcp_and_dot_clients(dnslb, dohsrv, pki):
    srv = dohsrv()
    d = dnslb("setVerboseHealthChecks(true)\n" + console_head() +
              doh_server(srv.doh_port, caStore=pki + "/ca.pem"), args=("--workers", "1"))
    assert d.wait_line(marking(srv.doh_port, "up")) is not None
    r = udp_answer(d.port, "www.example.test.")
    assert r.rcode() == dns.rcode.NOERROR
    assert [rr.to_text() for rr in r.answer[0]] == ["192.0.2.1"]
    assert not (r.flags & dns.flags.TC)
    t = tcp_query(d.port, "www.example.test.")
    assert t.answer == r.answer
    nx = udp_answer(d.port, "nx.example.test.")
    assert nx.rcode() == dns.rcode.NXDOMAIN
    s = d.stats()
    assert s["tls-downstream-failures"] == 0
    assert s["responses"] >= 3


def test_dot_client(dnslb, dohsrv, pki):
    """A DNS over TLS client's query crosses to the DoH server too."""
    srv = dohsrv()
    dot_port = dnslbtest.free_port()
    d = dnslb(doh_server(srv.doh_port, caStore=pki + "/ca.pem") +
              'addTLSLocal("127.0.0.1:%d", "%s/dns.pem", "%s/dns.key")\n' % (dot_port, pki, pki))
    assert d.wait_line(marking(srv.doh_port, "up")) is not None
    r = dot_query(dot_port, "www.example.test.", pki)
    assert [rr.to_text() for rr in r.answer[0]] == ["192.0.2.1"]


def test_multiplexed_on_one_connection(dnslb, dohsrv, pki, responder):
    """40 queries in parallel, each held 300 ms by the backend: one HTTP/2
    connection carries them all (the health check aside: forced up)."""
    srv = dohsrv()
    d = dnslb(console_head() + doh_server(srv.doh_port, caStore=pki + "/ca.pem",
                                          healthCheckMode="up"),
              args=("--workers", "1"))
    before = doh_frontend_figures(srv)
    socks = []
    for i in range(40):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(make_query("delay-300.n%d.example.test." % i).to_wire(),
                 ("127.0.0.1", d.port))
        socks.append(s)
    got = 0
    for s in socks:
        s.settimeout(3)
        r = dns.message.from_wire(s.recv(4096))
        got += r.rcode() == dns.rcode.NOERROR
        s.close()
    assert got == 40
    st = backend_tcp_stats(d)
    assert st["total"] == "1", st
    assert st["reused"] == "39", st
    after = doh_frontend_figures(srv)
    assert after["post"] - before["post"] == 40
    assert after["tls_new"] + after["tls_resumed"] - before["tls_new"] - \
        before["tls_resumed"] == 1, (before, after)


def test_resumption_after_reconnect(dnslb, dohsrv, pki):
    """setDoHDownstreamMaxIdleTime(1): the idle connection closes; the next
    one resumes its TLS session."""
    srv = dohsrv()
    d = dnslb(console_head() + "setDoHDownstreamMaxIdleTime(1)\n" +
              doh_server(srv.doh_port, caStore=pki + "/ca.pem", healthCheckMode="up"),
              args=("--workers", "1"))
    assert udp_answer(d.port, "one.example.test.").answer
    wait_until(lambda: backend_tcp_stats(d)["connections"] == "0", timeout=5)
    assert udp_answer(d.port, "two.example.test.").answer
    st = backend_tcp_stats(d)
    assert st["total"] == "2", st
    assert st["tls_resumptions"] == "1", st
    assert doh_frontend_figures(srv)["tls_resumed"] >= 1


def test_health_checks_up_and_down(dnslb, dohsrv, pki, responder):
    srv = dohsrv()
    d = dnslb("setVerboseHealthChecks(true)\n" +
              doh_server(srv.doh_port, caStore=pki + "/ca.pem"))
    assert d.wait_line(marking(srv.doh_port, "up")) is not None
    n = len(d.lines)
    srv.stop()
    assert d.wait_line(marking(srv.doh_port, "down"), start=n) is not None


def test_health_check_is_a_post_on_its_own_connection(dnslb, h2srv, pki):
    s = h2srv()
    d = dnslb(doh_server(s.port, caStore=pki + "/ca.pem", checkInterval=1))
    assert d.wait_line(marking(s.port, "up")) is not None
    assert wait_until(lambda: s.names().count("a.root-servers.net.") >= 2, timeout=5)
    # as dnsdist: each check a connection of its own
    assert s.connections >= 2


@pytest.mark.parametrize("opts,why", [
    ({"subjectName": "other.test"}, "certificate verify failed"),
    ({"caStore": None}, "certificate verify failed"),
])
def test_validation_failures(dnslb, dohsrv, pki, opts, why):
    srv = dohsrv()
    o = {"caStore": pki + "/ca.pem"}
    o.update(opts)
    o = {k: v for k, v in o.items() if v is not None}
    d = dnslb("setVerboseHealthChecks(true)\n" + doh_server(srv.doh_port, **o))
    assert d.wait_line(r"failed: TLS handshake failed: " + why) is not None
    assert d.wait_line(marking(srv.doh_port, "down")) is not None
    # forced up: the queries fail too, never sent in clear
    console_d = dnslb(console_head() + "setVerboseHealthChecks(true)\n" +
                      doh_server(srv.doh_port, healthCheckMode="up", **o), name="forced")
    with pytest.raises(dns.exception.Timeout):
        udp_answer(console_d.port, "www.example.test.", timeout=1.5)
    assert console_d.stat_at_least("tls-downstream-failures", 1) >= 1


def test_expired_certificate(dnslb, dohsrv, pki):
    srv = dohsrv(pem=expired_cert(pki))
    d = dnslb("setVerboseHealthChecks(true)\n" +
              doh_server(srv.doh_port, caStore=pki + "/ca.pem"))
    assert d.wait_line(r"failed: TLS handshake failed: certificate verify failed: "
                       r"certificate has expired") is not None


# ---- the requests themselves -------------------------------------------------------------

def test_request_headers_and_forwarded_headers(dnslb, h2srv, pki):
    s = h2srv()
    d = dnslb(doh_server(s.port, caStore=pki + "/ca.pem", addXForwardedHeaders=True,
                         healthCheckMode="up"))
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.bind(("127.0.0.1", 0))
    c.settimeout(3)
    c.sendto(make_query("xff.example.test.").to_wire(), ("127.0.0.1", d.port))
    r = dns.message.from_wire(c.recv(4096))
    assert [rr.to_text() for rr in r.answer[0]] == ["192.0.2.99"]
    h = s.headers_for("xff.example.test.")
    names = [k for k, _ in h]
    hd = dict(h)
    # dnsdist 1.7.3's request: these headers, in this order
    assert names == [":method", ":scheme", ":authority", ":path", "accept", "content-type",
                     "user-agent", "content-length", "x-forwarded-for", "x-forwarded-port",
                     "x-forwarded-proto"], h
    assert hd[":method"] == "POST" and hd[":scheme"] == "https"
    assert hd[":authority"] == "dns.test" and hd[":path"] == "/dns-query"
    assert hd["accept"] == hd["content-type"] == "application/dns-message"
    assert re.fullmatch(r"nghttp2-[0-9.]+/dnslb", hd["user-agent"]), hd
    assert hd["x-forwarded-for"] == "127.0.0.1"
    assert hd["x-forwarded-port"] == str(c.getsockname()[1])
    assert hd["x-forwarded-proto"] == "dns-over-udp"
    c.close()
    t = tcp_query(d.port, "xfftcp.example.test.")
    assert t.answer
    assert dict(s.headers_for("xfftcp.example.test."))["x-forwarded-proto"] == "dns-over-tcp"


def test_no_forwarded_headers_by_default(dnslb, h2srv, pki):
    s = h2srv()
    d = dnslb(doh_server(s.port, caStore=pki + "/ca.pem", healthCheckMode="up"))
    assert udp_answer(d.port, "plain.example.test.").answer
    names = [k for k, _ in s.headers_for("plain.example.test.")]
    assert not [n for n in names if n.startswith("x-forwarded")], names


def test_headers_as_dnsdist_sends_them(tmp_path, dnslb, h2srv, pki):
    """dnsdist 1.7.3 with the same newServer towards the same server: the
    same header names in the same order, the same values but the
    user-agent's product."""
    s = h2srv()
    conf = doh_server(s.port, caStore=pki + "/ca.pem", addXForwardedHeaders=True,
                      healthCheckMode="up")
    d = dnslb(conf)
    ref = dnslbtest.Daemon(str(tmp_path), conf, impl="dnsdist", name="refdnsdist").start()
    try:
        for port, name in ((d.port, "lbb"), (ref.port, "ref")):
            q = make_query(name + ".example.test.", qid=0x4242)
            assert dns.query.udp(q, "127.0.0.1", port=port, timeout=2).answer
    finally:
        ref.stop()
    mine = s.headers_for("lbb.example.test.")
    theirs = s.headers_for("ref.example.test.")
    assert [k for k, _ in mine] == [k for k, _ in theirs]
    skip = {"user-agent", "x-forwarded-port"}
    assert [(k, v) for k, v in mine if k not in skip] == \
        [(k, v) for k, v in theirs if k not in skip]
    # nghttp2's version (dnsdist's is the one it was built with), then the product
    assert re.fullmatch(r"nghttp2-[0-9.]+/dnsdist", dict(theirs)["user-agent"])
    assert re.fullmatch(r"nghttp2-[0-9.]+/dnslb", dict(mine)["user-agent"])
    # the body: the query as the client sent it, its ID included
    bodies = {n: b for _, n, b in s.requests}
    assert bodies["lbb.example.test."].replace(b"lbb", b"ref") == bodies["ref.example.test."]


# ---- bad peers ---------------------------------------------------------------------------

@pytest.mark.parametrize("label", ["h500", "garbage", "huge", "rst", "close"])
def test_bad_peer(dnslb, h2srv, pki, label):
    s = h2srv()
    d = dnslb(console_head() + doh_server(s.port, caStore=pki + "/ca.pem",
                                          healthCheckMode="up", retries=2),
              args=("--workers", "1"))
    with pytest.raises(dns.exception.Timeout):
        udp_answer(d.port, "%s.example.test." % label, timeout=1.5)
    # the next query is answered (on a new connection when that one broke)
    r = udp_answer(d.port, "after.example.test.")
    assert [rr.to_text() for rr in r.answer[0]] == ["192.0.2.99"]
    st = backend_tcp_stats(d)
    if label == "rst":
        # sent again on another connection while retries remain, as dnsdist
        assert s.names().count("rst.example.test.") == 3
        assert int(st["died_reading"]) >= 1, st
    if label in ("huge", "close"):
        assert int(st["died_reading"]) == 1, st
    if label in ("h500", "garbage"):
        assert st["total"] == "1", st        # the connection stays


def test_goaway(dnslb, h2srv, pki):
    s = h2srv()
    d = dnslb(console_head() + doh_server(s.port, caStore=pki + "/ca.pem",
                                          healthCheckMode="up"),
              args=("--workers", "1"))
    assert udp_answer(d.port, "goaway.example.test.").answer
    assert udp_answer(d.port, "next.example.test.").answer
    assert s.connections == 2
    assert backend_tcp_stats(d)["total"] == "2"


def test_timeout_ends_queries_once(dnslb, h2srv, pki):
    s = h2srv()
    d = dnslb(console_head() + doh_server(s.port, caStore=pki + "/ca.pem",
                                          healthCheckMode="up", tcpRecvTimeout=1),
              args=("--workers", "1"))
    with pytest.raises(dns.exception.Timeout):
        udp_answer(d.port, "slow-2500.example.test.", timeout=1.8)
    st = backend_tcp_stats(d)
    assert st["read_timeouts"] == "1", st
    assert wait_until(lambda: d.stats()["backends"] and
                      list(d.stats()["backends"].values())[0]["outstanding"] == 0, timeout=3)
    time.sleep(1.0)     # the late answer finds nothing to end
    assert udp_answer(d.port, "after.example.test.").answer


def test_cleartext_h2_without_tls(dnslb, tmp_path, pki, responder):
    """dohPath without tls=: HTTP/2 in clear (prior knowledge), as dnsdist."""
    port = dnslbtest.free_port()
    srv = dnslbtest.Daemon(str(tmp_path), 'addDOHLocal("127.0.0.1:%d", nil, nil, "/dns-query")\n'
                           % port + lua_server(responder), listen=False, impl="dnsdist",
                           name="clear").start()
    try:
        d = dnslb(lua_server("127.0.0.1:%d" % port, dohPath="/dns-query"))
        assert d.wait_line(marking(port, "up")) is not None
        assert udp_answer(d.port, "www.example.test.").answer
    finally:
        srv.stop()


def test_doh_client_to_doh_server(dnslb, h2srv, pki):
    """A DoH client's query crosses to the DoH server: its answer comes
    back on the client's stream, x-forwarded-proto says dns-over-https; a
    server's 500 gives the client an error status, never a 200."""
    from test_doh import curl
    s = h2srv()
    port = dnslbtest.free_port()
    dnslb(doh_server(s.port, caStore=pki + "/ca.pem", addXForwardedHeaders=True,
                     healthCheckMode="up") +
          'addDOHLocal("127.0.0.1:%d", "%s/dns.pem", "%s/dns.key", "/dns-query")\n'
          % (port, pki, pki))
    q = make_query("dohclient.example.test.", qid=0)
    r = dns.query.https(q, "https://127.0.0.1:%d/dns-query" % port, post=True,
                        verify=os.path.join(pki, "ca.pem"), timeout=5)
    assert [rr.to_text() for rr in r.answer[0]] == ["192.0.2.99"]
    assert dict(s.headers_for("dohclient.example.test."))["x-forwarded-proto"] == \
        "dns-over-https"
    _, status, _ = curl(port, pki, "/dns-query", data=make_query("h500.example.test.",
                                                                    qid=0).to_wire())
    assert status != 200


def test_idle_connections_kept(dnslb, h2srv, pki):
    """setMaxIdleDoHConnectionsPerDownstream(0): a connection closes as soon
    as it has nothing in flight; the next query opens (and resumes) another."""
    s = h2srv()
    d = dnslb(console_head() + "setMaxIdleDoHConnectionsPerDownstream(0)\n" +
              doh_server(s.port, caStore=pki + "/ca.pem", healthCheckMode="up"),
              args=("--workers", "1"))
    assert udp_answer(d.port, "one.example.test.").answer
    assert wait_until(lambda: backend_tcp_stats(d)["connections"] == "0", timeout=3)
    assert udp_answer(d.port, "two.example.test.").answer
    st = backend_tcp_stats(d)
    assert st["total"] == "2" and st["tls_resumptions"] == "1", st
    assert s.connections == 2


def test_health_check_fails_on_bad_status_and_reset(dnslb, h2srv, pki):
    """A check answered 500, or reset, is a failed check: the server goes down."""
    s = h2srv()
    d = dnslb("setVerboseHealthChecks(true)\n" +
              doh_server(s.port, caStore=pki + "/ca.pem", checkName="h500.example.", name="a") +
              doh_server(s.port, caStore=pki + "/ca.pem", checkName="rst.example.", name="b",
                         pool="b"))
    assert d.wait_line(marking(s.port, "down", "a")) is not None
    assert d.wait_line(marking(s.port, "down", "b")) is not None
    assert d.wait_line(r"Health check of a .* failed: HTTP status other than 200") is not None
    assert d.wait_line(r"Health check of b .* failed: stream reset by the server") is not None


def test_reload_and_runtime_servers(dnslb, h2srv, pki):
    """A reload keeps an unchanged DoH server and replaces one whose dohPath
    changed; newServer{dohPath=} from the console adds one, checked over DoH."""
    s = h2srv()
    head = console_head()
    a = doh_server(s.port, caStore=pki + "/ca.pem", name="a")
    d = dnslb(head + a)
    assert d.wait_line(marking(s.port, "up", "a")) is not None
    assert udp_answer(d.port, "r1.example.test.").answer

    n = d.reload(head + a)
    assert not any("server a is no longer configured" in l for l in d.lines[n:])
    assert udp_answer(d.port, "r2.example.test.").answer
    n = d.reload(head + doh_server(s.port, caStore=pki + "/ca.pem", name="a", dohPath="/other"))
    # another server (checked before it serves)
    assert d.wait_line(marking(s.port, "up", "a"), start=n) is not None
    assert udp_answer(d.port, "r3.example.test.").answer
    assert dict(s.headers_for("r3.example.test."))[":path"] == "/other"
    n = len(d.lines)
    console(d, 'newServer({address="127.0.0.1:%d", tls="openssl", caStore="%s/ca.pem", '
               'subjectName="dns.test", dohPath="/dns-query", name="c", pool="c"})'
            % (s.port, pki))
    assert d.wait_line(marking(s.port, "up", "c"), start=n) is not None


# ---- useProxyProtocol ---------------------------------------------------------------------

PP2_SIG = b"\r\n\r\n\x00\r\nQUIT\n"


def pp2_parse(h):
    """(command, family/transport byte, source (ip, port), destination (ip, port))
    of PROXY v2 header @h (IPv4 only, as the tests send), or (command, fam)."""
    assert h[:12] == PP2_SIG and h[12] >> 4 == 2, h
    cmd, fam = h[12] & 0x0f, h[13]
    if fam == 0:
        return cmd, fam
    assert fam in (0x11, 0x12) and len(h) == 16 + 12, h
    return (cmd, fam, (socket.inet_ntoa(h[16:20]), int.from_bytes(h[24:26], "big")),
            (socket.inet_ntoa(h[20:24]), int.from_bytes(h[26:28], "big")))


def proxy_run(d, s, client_port):
    """Two UDP queries from one socket and one over TCP through @d to DoH
    server @s; what the server saw once every connection closed, the
    client's and the listener's ports in place of their numbers."""
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.bind(("127.0.0.1", client_port))
    c.settimeout(3)
    for i in range(2):
        c.sendto(make_query("pp%d.example.test." % i).to_wire(), ("127.0.0.1", d.port))
        r = dns.message.from_wire(c.recv(4096))
        assert [rr.to_text() for rr in r.answer[0]] == ["192.0.2.99"]
    c.close()
    assert tcp_query(d.port, "pptcp.example.test.").answer
    assert wait_until(lambda: s.closed == s.connections, timeout=5)
    ports = {client_port: "udp-client", d.port: "listener"}

    def norm(h):
        p = pp2_parse(h)
        if len(p) == 2:
            return p
        return p[:2] + tuple((a, ports.get(n, "tcp-client")) for a, n in p[2:])
    return {"connections": s.connections, "closed": s.closed, "names": s.names(),
            "headers": [norm(h) for h in s.proxy_headers]}


def test_proxy_protocol_as_dnsdist(tmp_path, dnslb, h2srv, pki):
    """useProxyProtocol towards a DoH server beside dnsdist 1.7.3: the same
    PROXY headers (inside TLS, before the preface; LOCAL for the health
    check, the client's addresses for a query, DGRAM for UDP and STREAM for
    TCP clients), a connection per query, every one closed, the same
    showTCPStats figures."""
    seen, stats = {}, {}
    for impl in ("dnslb", "dnsdist"):
        s = h2srv(proxy=True)
        conf = doh_server(s.port, caStore=pki + "/ca.pem", useProxyProtocol=True,
                          checkInterval=3600)
        if impl == "dnslb":
            d = dnslb(console_head() + conf, args=("--workers", "1"))
        else:
            d = dnslbtest.Daemon(str(tmp_path), conf, impl="dnsdist", name="refdnsdist").start()
        try:
            # the first health check, then the queries
            assert wait_until(lambda: s.names() == ["a.root-servers.net."], timeout=5)
            assert wait_until(lambda: s.closed == 1, timeout=5)
            seen[impl] = proxy_run(d, s, dnslbtest.free_port())
            row = backend_tcp_stats(d)
            # tls_resumptions: dnsdist's first query connection resumes the
            # health check's session, dnslb's does not (a listed difference)
            stats[impl] = {k: v for k, v in row.items()
                           if k not in ("name", "address", "tls_resumptions")}
        finally:
            if impl == "dnsdist":
                d.stop()
    assert seen["dnslb"] == seen["dnsdist"]
    assert seen["dnslb"]["headers"] == [
        (0, 0),
        (1, 0x12, ("127.0.0.1", "udp-client"), ("127.0.0.1", "listener")),
        (1, 0x12, ("127.0.0.1", "udp-client"), ("127.0.0.1", "listener")),
        (1, 0x11, ("127.0.0.1", "tcp-client"), ("127.0.0.1", "listener"))]
    assert seen["dnslb"]["connections"] == 4
    assert stats["dnslb"] == stats["dnsdist"]


def test_proxy_protocol_retried_after_reset(dnslb, h2srv, pki):
    """A stream the server resets is sent again on a new connection of its
    own, with the same PROXY header."""
    s = h2srv(proxy=True)
    d = dnslb(doh_server(s.port, caStore=pki + "/ca.pem", useProxyProtocol=True,
                         healthCheckMode="up", retries=1))
    with pytest.raises(dns.exception.Timeout):
        udp_answer(d.port, "rst.example.test.", timeout=1.5)
    assert wait_until(lambda: len(s.proxy_headers) == 2, timeout=5)
    assert s.names() == ["rst.example.test."] * 2
    assert s.proxy_headers[0] == s.proxy_headers[1]
    assert pp2_parse(s.proxy_headers[0])[:2] == (1, 0x12)
