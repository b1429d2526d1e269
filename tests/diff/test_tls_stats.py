"""DNS over TLS figures beside dnsdist 1.7.3: after the same TLS traffic
(new sessions, resumptions with a ticket under the current key, an older
key and a key rotated out, TLS 1.2 and TLS 1.3 forced on the client side,
handshakes failing on the version and on the ciphers), the whole
showTCPStats(), showTLSContexts() and showTLSErrorCounters() text, the TLS
lines of /metrics, the frontends of /api/v1/servers/localhost and the
frontends' carbon paths are compared. Only volatile values are normalized:
ports, times, a connection's average duration."""

import json
import re
import socket
import ssl
import struct
import subprocess
import threading
import time

from diffharness import build_query, free_port, known


def make_cert(d):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", d + "/key.pem", "-out",
                    d + "/cert.pem", "-days", "2", "-subj", "/CN=dns.test", "-addext",
                    "subjectAltName=DNS:dns.test"], check=True, capture_output=True)


class Carbon:
    """A carbon receiver both daemons send to; each side's messages are told
    apart by its own listening ports in the paths."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.messages = []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with c, c.makefile("rb") as f:
                self.messages.append(f.read().decode())

    def last_for(self, port):
        for m in reversed(self.messages):
            if ":%d_tcp." % port in m:
                return m
        return None

    def close(self):
        self.sock.close()


def context(d, version=None):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(d + "/cert.pem")
    if version is not None:
        ctx.minimum_version = ctx.maximum_version = version
    return ctx


def dot(port, ctx, queries=1, session=None):
    """One DoT connection: @queries queries, answers read. @return (the
    session to resume, whether this one was resumed), or None when the
    handshake failed."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        t = ctx.wrap_socket(s, server_hostname="dns.test", session=session)
    except ssl.SSLError:
        s.close()
        time.sleep(0.5)     # as below: two failed handshakes in a row were 2 concurrent
        return None
    for _ in range(queries):
        w = build_query("www.example.test.", qid=9)
        t.sendall(struct.pack("!H", len(w)) + w)
        n = struct.unpack("!H", t.recv(2))[0]
        got = b""
        while len(got) < n:
            got += t.recv(n - len(got))
    out = (t.session, t.session_reused)
    t.close()
    time.sleep(0.5)     # its close counted before the next connection opens (max concurrent)
    return out


def tls_traffic(side, d, rotate):
    """The same DoT traffic on @side: what each connection saw (resumed or
    not, failed), which the caller compares between the two."""
    port = side.tls_port
    seen = []
    v12, v13 = context(d, ssl.TLSVersion.TLSv1_2), context(d, ssl.TLSVersion.TLSv1_3)
    s12, r = dot(port, v12, 2)
    seen.append(r)
    seen.append(dot(port, v12, 1, s12)[1])             # resumed
    s13, r = dot(port, v13, 3)
    seen.append(r)
    seen.append(dot(port, v13, 1, s13)[1])             # resumed
    rotate(side)                                        # s13's key: inactive
    seen.append(dot(port, v13, 1, s13)[1])             # resumed from it
    rotate(side)
    rotate(side)                                        # and gone (2 keys kept)
    seen.append(dot(port, v13, 1, s13)[1])             # a full handshake
    seen.append(dot(port, context(d), 1) is None)               # any version: 1.3
    # no version in common (tls1.0 against minTLSVersion tls1.2)
    old = context(d, ssl.TLSVersion.TLSv1)
    old.set_ciphers("ALL:@SECLEVEL=0")
    seen.append(dot(port, old) is None)
    # no cipher in common
    weak = context(d, ssl.TLSVersion.TLSv1_2)
    weak.set_ciphers("AES128-SHA256")
    seen.append(dot(port, weak) is None)
    return seen


BODY = '''newServer({address="@B0@"})
addTLSLocal("127.0.0.1:@TLSPORT@", "%(d)s/cert.pem", "%(d)s/key.pem",
            {minTLSVersion="tls1.2", numberOfTicketsKeys=2})
addTLSLocal("127.0.0.1:@TLSPORT1@", "%(d)s/cert.pem", "%(d)s/key.pem", {sessionTickets=false})
addTLSLocal("127.0.0.1:@TLSPORT2@", "%(d)s/cert.pem", "%(d)s/key.pem",
            {ticketsKeysRotationDelay=0, numberOfTicketsKeys=0})
carbonServer("127.0.0.1:%(carbon)d", "tlsstats", 1)
'''

ADDR = re.compile(r"127\.0\.0\.1:\d+")
CARBON_ADDR = re.compile(r"127_0_0_1:\d+")


def console(side, cmd):
    """@cmd's output on @side, without the warnings dnsdist's console client
    prints about the web server's plain-text password and key."""
    return "".join(line for line in side.console(cmd).splitlines(True)
                   if not line.startswith("Passing a plain-text "))


def tcp_stats(text):
    """showTCPStats(): the frontends' table with the ports and the average
    duration (time) left out; the backends' header."""
    out = []
    lines = text.splitlines()
    for line in lines[lines.index("Frontends:"):lines.index("Backends:") + 2]:
        cols = ADDR.sub("ADDR", line).split()
        if cols and cols[0].isdigit():
            del cols[10]
        out.append(cols)
    return out


def tls_contexts(text):
    return re.sub(r"20\d\d-\d\d-\d\d \d\d:\d\d:\d\d", "WHEN", ADDR.sub("ADDR", text))


def metrics_tls(text):
    """The TLS lines of /metrics: the per-frontend families' samples and heads."""
    return sorted(ADDR.sub("ADDR", line) for line in text.splitlines()
                  if "dnsdist_frontend_tls" in line)


def frontends(doc):
    out = []
    for f in doc["frontends"]:
        f = dict(f)
        f["address"] = ADDR.sub("ADDR", f["address"])
        del f["tcpAvgConnectionDuration"]
        out.append(f)
    return out


def carbon_frontends(message):
    out = []
    for line in message.splitlines():
        if ".frontends." not in line or line.split()[0].endswith("tcpavgconnectionduration"):
            continue
        path, value, _ = line.split()
        out.append((CARBON_ADDR.sub("ADDR", path), value))
    return out


def test_tls_figures(pair, tmp_path):
    d = str(tmp_path)
    make_cert(d)
    carbon = Carbon()
    try:
        p = pair(BODY % {"d": d, "carbon": carbon.port}, web=True)

        def rotate(side):
            assert console(side, "getTLSContext(0):rotateTicketsKey()") == ""

        seen = [tls_traffic(s, d, rotate) for s in (p.theirs, p.ours)]
        assert seen[0] == seen[1]
        assert seen[1] == [False, True, False, True, True, False, False, True, True]

        ta, tb = (tcp_stats(console(s, "showTCPStats()")) for s in (p.theirs, p.ours))
        assert ta == tb
        # 4 new sessions (one after its key went), 3 resumed (one from an
        # older key); 3 queries over TLS 1.2, 7 over 1.3
        row = [r for r in tb if r and r[0] == "2"][0]
        assert row[10:] == ["4", "3", "1", "1", "0", "0", "3", "7", "0"]
        # the workers' table and the backends' figures: dnslb's own (test_stats_json)
        assert known("showTCPStats() shows dnslb's workers")
        assert known("Backend TCP connections are shared between a worker's clients")

        a, b = (console(s, "showTLSErrorCounters()") for s in (p.theirs, p.ours))
        assert ADDR.sub("ADDR", a) == ADDR.sub("ADDR", b)
        assert b.splitlines()[1].split()[2:] == ["0", "0", "1", "0", "0", "0", "0", "1"]

        a, b = (tls_contexts(console(s, "showTLSContexts()")) for s in (p.theirs, p.ours))
        assert a == b
        assert [line.split() for line in b.splitlines()[1:]] == [
            ["0", "ADDR", "2", "43200", "WHEN"], ["1", "ADDR", "1", "43200", "WHEN"],
            ["2", "ADDR", "0", "0"] + time.strftime("%Y-%m-%d %H:%M:%S",
                                                     time.localtime(0)).split()]

        ma, mb = (metrics_tls(s.web("/metrics")[1].decode()) for s in (p.theirs, p.ours))
        assert known("/metrics writes each family under its own TYPE line")
        assert ma == mb
        assert 'dnsdist_frontend_tlsnewsessions{frontend="ADDR",proto="TCP (DNS over TLS)",' \
            'thread="0"} 4' in mb

        ja, jb = (frontends(json.loads(s.web("/api/v1/servers/localhost")[1]))
                  for s in (p.theirs, p.ours))
        assert ja == jb
        assert (jb[2]["tlsNewSessions"], jb[2]["tls13Queries"],
                jb[2]["tlsHandshakeFailuresUnsupportedProtocol"]) == (4, 7, 1)
        assert "tlsHandshakeFailuresNoSharedCipher" not in jb[1]

        for _ in range(50):
            ca, cb = (carbon.last_for(s.tls_port) for s in (p.theirs, p.ours))
            if ca and cb and ":%d_tcp.tlsnosharedcipher 1" % p.ours.tls_port in cb and \
                    ":%d_tcp.tlsnosharedcipher 1" % p.theirs.tls_port in ca:
                break
            time.sleep(0.2)
        assert carbon_frontends(ca) == carbon_frontends(cb)
        assert ":%d_tcp.tlsresumptions 3 " % p.ours.tls_port in cb
    finally:
        carbon.close()


def test_tls_contexts_with_a_key_file(pair, tmp_path):
    """Keys from a ticketKeyFile (two of them): the same keys counted, but
    dnslb does not rotate them by itself."""
    d = str(tmp_path)
    make_cert(d)
    with open(d + "/tickets.key", "wb") as f:
        f.write(bytes(range(160)))
    p = pair('newServer({address="@B0@"})\n'
             'addTLSLocal("127.0.0.1:@TLSPORT@", "%s/cert.pem", "%s/key.pem", '
             '{ticketKeyFile="%s/tickets.key"})\n' % (d, d, d))
    a, b = (tls_contexts(console(s, "showTLSContexts()")).splitlines()[1].split()
            for s in (p.theirs, p.ours))
    assert a[:3] == b[:3] == ["0", "ADDR", "2"]
    assert known("ticketsKeysRotationDelay is 0 with a ticketKeyFile")
    assert a[3:] == ["43200", "WHEN"]
    assert b[3:] == ["0"] + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(0)).split()


def doh(port, ctx, requests):
    """@requests GETs on one DNS over HTTPS connection; None when the
    handshake failed."""
    import base64
    import httpx
    ctx.set_alpn_protocols(["h2"])
    ctx.check_hostname = False      # the chain is still verified; the name is dns.test
    path = "/dns-query?dns=" + base64.urlsafe_b64encode(
        build_query("www.example.test.", qid=0)).decode().rstrip("=")
    try:
        with httpx.Client(http2=True, verify=ctx, timeout=5) as c:
            for _ in range(requests):
                r = c.get("https://127.0.0.1:%d%s" % (port, path))
                assert r.status_code == 200
    except httpx.ConnectError:
        return None
    time.sleep(0.5)     # its close counted before the next connection opens (max concurrent)
    return True


def test_doh_listener_tls_figures(pair, tmp_path):
    """A DNS over HTTPS listener's TLS figures, as a DoT listener's: new
    sessions, queries by TLS version, a handshake without a cipher in
    common; the TLS lines of /metrics, the API's frontends and
    showTLSErrorCounters() beside dnsdist."""
    d = str(tmp_path)
    make_cert(d)
    p = pair('newServer({address="@B0@"})\n'
             'addDOHLocal("127.0.0.1:@TLSPORT@", "%s/cert.pem", "%s/key.pem", "/dns-query")\n'
             % (d, d), web=True)
    for side in (p.theirs, p.ours):
        port = side.tls_port
        weak = context(d, ssl.TLSVersion.TLSv1_2)
        weak.set_ciphers("AES128-SHA256")
        seen = [doh(port, context(d, ssl.TLSVersion.TLSv1_3), 2),
                doh(port, context(d, ssl.TLSVersion.TLSv1_2), 1),
                doh(port, weak, 1)]
        assert seen == [True, True, None]
    ma, mb = (metrics_tls(s.web("/metrics")[1].decode()) for s in (p.theirs, p.ours))
    assert known("/metrics writes each family under its own TYPE line")
    assert ma == mb
    assert 'dnsdist_frontend_tlsqueries{frontend="ADDR",proto="TCP (DNS over HTTPS)",' \
        'thread="0",tls="tls13"} 2' in mb
    ja, jb = (frontends(json.loads(s.web("/api/v1/servers/localhost")[1]))
              for s in (p.theirs, p.ours))
    ta, tb = ([f for f in j if "HTTPS" in f["type"]] for j in (ja, jb))
    assert ta == tb
    assert (tb[0]["tlsNewSessions"], tb[0]["tls12Queries"]) == (2, 1)
    a, b = (console(s, "showTLSErrorCounters()") for s in (p.theirs, p.ours))
    assert ADDR.sub("ADDR", a) == ADDR.sub("ADDR", b)


def stapled(port):
    """The OCSP response a TLS listener staples, as openssl s_client prints
    it, times and signature left out."""
    r = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % port, "-status",
                        "-servername", "dns.test"], input=b"", capture_output=True, timeout=10)
    out = r.stdout.decode()
    start, end = out.index("OCSP response:"), out.index("Signature Algorithm:")
    return re.sub(r"[A-Z][a-z]{2} +\d+ [\d:]+ \d{4} GMT", "WHEN", out[start:end])


def test_generated_ocsp_response_stapled(pair, tmp_path):
    """generateOCSPResponse() writes a response for a certificate, signed by
    its issuer, which ocspResponses staples: the same response (times and
    signature aside) from both; getOutgoingTLSSessionCacheSize() with no
    TLS backend."""
    d = str(tmp_path)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", d + "/ca.key", "-out",
                    d + "/ca.pem", "-days", "2", "-subj", "/CN=test CA"], check=True,
                   capture_output=True)
    subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", d + "/key.pem", "-out",
                    d + "/cert.csr", "-subj", "/CN=dns.test"], check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", d + "/cert.csr", "-CA", d + "/ca.pem",
                    "-CAkey", d + "/ca.key", "-set_serial", "77", "-days", "2", "-out",
                    d + "/cert.pem"], check=True, capture_output=True)
    p = pair('newServer({address="@B0@"})\n'
             'generateOCSPResponse("%(d)s/cert.pem", "%(d)s/ca.pem", "%(d)s/ca.key", '
             '"%(d)s/ocsp-@TLSPORT@.der", 1, 30)\n'
             'addTLSLocal("127.0.0.1:@TLSPORT@", "%(d)s/cert.pem", "%(d)s/key.pem", '
             '{ocspResponses={"%(d)s/ocsp-@TLSPORT@.der"}})\n' % {"d": d})
    a, b = (stapled(s.tls_port) for s in (p.theirs, p.ours))
    assert a == b
    assert "Cert Status: good" in b and "Serial Number: 4D" in b
    assert [console(s, "getOutgoingTLSSessionCacheSize()") for s in (p.theirs, p.ours)] \
        == ["0\n", "0\n"]
