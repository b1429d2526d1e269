"""The HTTP and SNI rules beside dnsdist 1.7.3: HTTPHeaderRule,
HTTPPathRule, HTTPPathRegexRule, SNIRule, HTTPStatusAction and the dq
methods of DNS over HTTPS and TLS (getHTTPHeaders, getHTTPPath,
getHTTPQueryString, getHTTPScheme, getHTTPHost, setHTTPResponse,
getServerNameIndication, getProtocol), over DoH (plain HTTP/2 and HTTP/1.1
with curl, and HTTPS with a server name), DNS over TLS with and without a
server name, and plain UDP and TCP queries meeting the same rules. Each
answer is compared whole (status line, header fields but Date, body; DNS
answers ID aside), then showRules() and dumpStats(). Also: a
setHTTPResponse() followed by a drop, an HTTP/1.1 request with two Host
fields, and one with an absolute URI naming another host.

The dq methods are seen through a Lua action that answers a TXT record
made of their values (the Host's port, which differs between the two
daemons, written PORT).
"""

import socket
import ssl
import struct

import pytest

from diffharness import build_query, known, strip_id
from test_doh_listener import b64, curl
from test_tls_stats import make_cert

BODY = '''
newServer({address="@B0@"})
addDOHLocal("127.0.0.1:@TLSPORT@", nil, nil, {"/dns-query", "/other"}, {})
addTLSLocal("127.0.0.1:@TLSPORT1@", "%(d)s/cert.pem", "%(d)s/key.pem")
addDOHLocal("127.0.0.1:@TLSPORT2@", "%(d)s/cert.pem", "%(d)s/key.pem", {"/dns-query"}, {})

function txt(s)
  local out = {}
  for i = 1, #s, 255 do
    local c = s:sub(i, i + 254)
    table.insert(out, string.char(#c) .. c)
  end
  if #out == 0 then return "\\0" end
  return table.concat(out)
end

function show(dq)
  local h = dq:getHTTPHeaders()
  local ks = {}
  for k, v in pairs(h) do table.insert(ks, k .. "=" .. v) end
  table.sort(ks)
  local host = dq:getHTTPHost():gsub(":%%d+$", ":PORT")
  local s = table.concat({"path=" .. dq:getHTTPPath(), "qs=" .. dq:getHTTPQueryString(),
                          "scheme=" .. dq:getHTTPScheme(), "host=" .. host,
                          "sni=" .. dq:getServerNameIndication(), "proto=" .. dq:getProtocol(),
                          "headers=" .. table.concat(ks, "|")}, " ")
  return DNSAction.SpoofRaw, txt(s)
end
addAction("show.test.", LuaAction(show))

addAction(AndRule({QNameRule("hdr.test."), HTTPHeaderRule("X-Route", "^blue")}), SpoofAction("192.0.2.1"))
addAction(AndRule({QNameRule("hdr.test."), HTTPHeaderRule("host", ".")}), SpoofAction("192.0.2.11"))
addAction(AndRule({QNameRule("path.test."), HTTPPathRule("/other")}), SpoofAction("192.0.2.2"))
addAction(AndRule({QNameRule("path.test."), HTTPPathRule("/dns-query")}), SpoofAction("192.0.2.12"))
addAction(AndRule({QNameRule("re.test."), HTTPPathRegexRule("^/DNS-q")}), SpoofAction("192.0.2.3"))
addAction(AndRule({QNameRule("re.test."), HTTPPathRegexRule("dns=")}), SpoofAction("192.0.2.13"))
addAction(AndRule({QNameRule("sni.test."), SNIRule("dns.test")}), SpoofAction("192.0.2.4"))
addAction(AndRule({QNameRule("sni.test."), SNIRule("")}), SpoofAction("192.0.2.5"))

addAction("s200.test.", HTTPStatusAction(200, "hello", "text/x"))
addAction("s200e.test.", HTTPStatusAction(200, ""))
addAction("s200d.test.", HTTPStatusAction(200, "body"))
addAction("s200f.test.", HTTPStatusAction(200, "", "", {aa=true, ad=true, ra=false}))
addAction("s403.test.", HTTPStatusAction(403, "go away"))
addAction("s403e.test.", HTTPStatusAction(403, ""))
addAction("s404e.test.", HTTPStatusAction(404, "", "", {aa=true}))
addAction("s302.test.", HTTPStatusAction(302, "https://x.example/"))
addAction("s418.test.", HTTPStatusAction(418, "teapot", "text/tea"))
addAction("lua.test.", LuaAction(function(dq)
  dq:setHTTPResponse(201, "lua body", "text/lua")
  dq.dh:setQR(true)
  return DNSAction.HeaderModify
end))
addAction("lua2.test.", LuaAction(function(dq)
  dq:setHTTPResponse(200, "")
  dq.dh:setQR(true)
  return DNSAction.HeaderModify
end))
addAction("lua4.test.", LuaAction(function(dq)
  dq:setHTTPResponse(200, "never sent")
  return DNSAction.Drop
end))
addAction("s201.test.", HTTPStatusAction(201, "created"))
addAction("s503.test.", HTTPStatusAction(503, "", "text/x"))
addAction("lua3.test.", LuaAction(function(dq)
  dq:setHTTPResponse(503, "down")
  dq.dh:setQR(true)
  return DNSAction.HeaderModify
end))
'''

# (qname, qtype): what each HTTP request and each plain query asks
NAMES = [
    ("show.test.", 16), ("hdr.test.", 1), ("path.test.", 1), ("re.test.", 1),
    ("sni.test.", 1), ("s200.test.", 1), ("s200e.test.", 1), ("s200d.test.", 1),
    ("s200f.test.", 1), ("s403.test.", 1), ("s403e.test.", 1), ("s404e.test.", 1),
    ("s302.test.", 1), ("s418.test.", 1), ("lua.test.", 1), ("lua2.test.", 1),
    ("lua3.test.", 1), ("lua4.test.", 1), ("s201.test.", 1), ("s503.test.", 1), ("www.example.test.", 1),
]

# (path with %s for the query, curl -H headers)
REQUESTS = [
    ("/dns-query?dns=%s", ()),
    ("/other?dns=%s", ("X-Route: Blue-green",)),
    ("/dns-query?x=1&dns=%s", ("X-Route: red", "x-route: blue", "Cookie: a=1", "Accept: text/x")),
    ("/dns-query?dns=%s", ("X-Empty;", "User-Agent: ua/1.0", "X-Route: BLUE")),
]


@pytest.fixture
def http_pair(pair, workdir):
    make_cert(workdir)
    return pair(BODY % {"d": workdir}, backends=({},))


def both_doh(p, workdir, path, version, headers=(), host_port=None):
    a = curl(p.theirs.tls_port, path, version, workdir, headers=headers)
    b = curl(p.ours.tls_port, path, version, workdir, headers=headers)
    assert a == b, "DoH answers differ for %s (HTTP/%s, %r)\n dnsdist: %r\n dnslb:   %r" % (
        path, version, headers, a, b)
    p.assert_same_backend_traffic()
    return a


def test_doh_requests(http_pair, workdir):
    """Every name over every request shape, HTTP/2 and HTTP/1.1, then the
    rules' counters and the statistics."""
    p = http_pair
    for version in (2, 1):
        for path, headers in REQUESTS:
            for name, qtype in NAMES:
                wire = build_query(name, qtype=qtype, qid=0)
                both_doh(p, workdir, path % b64(wire), version, headers)
    # a Host field of its own, and none at all (HTTP/1.1)
    wire = build_query("show.test.", qtype=16, qid=0)
    both_doh(p, workdir, "/dns-query?dns=%s" % b64(wire), 1, ("Host: example.test",))
    both_doh(p, workdir, "/dns-query?dns=%s" % b64(wire), 1, ("Host: ",))
    both_doh(p, workdir, "/dns-query?dns=%s" % b64(wire), 2, ("Host: example.test",))
    # a query ID that is not 0: the body of a non-200 without one is the
    # query turned response, read up to its first NUL
    both_doh(p, workdir, "/dns-query?dns=%s" % b64(build_query("s403e.test.", qid=0x4142)), 2)
    p.console("showRules()")
    p.stats()


def raw_http1(port, request):
    """The answer to one raw HTTP/1.1 request, Date aside."""
    s = socket.create_connection(("127.0.0.1", port), timeout=3)
    s.sendall(request)
    data = b""
    try:
        while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 4 + int(
                [l for l in data.split(b"\r\n") if l.lower().startswith(b"content-length:")][0]
                .split(b":")[1]):
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, IndexError):
        pass
    s.close()
    return b"\r\n".join(l for l in data.split(b"\r\n") if not l.startswith(b"Date:"))


def test_no_host(http_pair):
    """HTTP/1.1 without a Host field: the host is the listener's address."""
    p = http_pair
    wire = build_query("show.test.", qtype=16, qid=0)
    req = b"GET /dns-query?dns=" + b64(wire).encode() + b" HTTP/1.1\r\n\r\n"
    a, b = raw_http1(p.theirs.tls_port, req), raw_http1(p.ours.tls_port, req)
    assert a == b, "\n dnsdist: %r\n dnslb:   %r" % (a, b)


def test_repeated_host(http_pair):
    """HTTP/1.1 with two Host fields, and HTTP/1.1 with a Host field and an
    absolute URI naming another host."""
    p = http_pair
    wire = build_query("show.test.", qtype=16, qid=0)
    path = b"/dns-query?dns=" + b64(wire).encode()
    for req in (b"GET " + path + b" HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n",
                b"GET http://c.test" + path + b" HTTP/1.1\r\nHost: a.test\r\n\r\n"):
        a, b = raw_http1(p.theirs.tls_port, req), raw_http1(p.ours.tls_port, req)
        assert a == b, "%r\n dnsdist: %r\n dnslb:   %r" % (req, a, b)
    p.assert_same_backend_traffic()


def dot_query(port, wire, sni):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=3) as raw:
        with ctx.wrap_socket(raw, server_hostname=sni) as s:
            s.sendall(struct.pack("!H", len(wire)) + wire)
            data = b""
            try:
                while len(data) < 2 or len(data) < 2 + struct.unpack("!H", data[:2])[0]:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
            except socket.timeout:
                pass
    return data[2:] if len(data) >= 2 else None


def test_dot_sni(http_pair):
    """DNS over TLS with a server name, another one and none."""
    p = http_pair
    for sni in ("dns.test", "other.test", None):
        for name, qtype in NAMES:
            wire = build_query(name, qtype=qtype, qid=0x1234)
            a = dot_query(p.theirs.tls_ports["@TLSPORT1@"], wire, sni)
            b = dot_query(p.ours.tls_ports["@TLSPORT1@"], wire, sni)
            assert strip_id(a) == strip_id(b), "DoT %s (SNI %r)\n dnsdist: %s\n dnslb:   %s" % (
                name, sni, a and a.hex(), b and b.hex())
            p.assert_same_backend_traffic()
    p.console("showRules()")
    p.stats()


def doh_tls(port, path, sni, version):
    """(status, body) of a GET over TLS with curl, the server name @sni."""
    import subprocess
    argv = ["/usr/bin/curl", "-sk", "--max-time", "5", "-o", "-", "-w", "\n%{http_code}",
            "--resolve", "%s:%d:127.0.0.1" % (sni, port),
            "--http2" if version == 2 else "--http1.1", "https://%s:%d%s" % (sni, port, path)]
    r = subprocess.run(argv, capture_output=True, timeout=10)
    body, _, status = r.stdout.rpartition(b"\n")
    return status, body.replace(str(port).encode(), b"PORT")


def test_doh_sni(http_pair):
    """DNS over HTTPS with a server name: dnsdist 1.7.3's DoH queries carry
    none (SNIRule does not see it, getServerNameIndication() is "")."""
    p = http_pair
    for version in (2, 1):
        for name in ("sni.test.", "show.test."):
            wire = build_query(name, qtype=16 if name == "show.test." else 1, qid=0)
            path = "/dns-query?dns=%s" % b64(wire)
            a = doh_tls(p.theirs.tls_ports["@TLSPORT2@"], path, "dns.test", version)
            b = doh_tls(p.ours.tls_ports["@TLSPORT2@"], path, "dns.test", version)
            assert a == b, "%s over HTTP/%d\n dnsdist: %r\n dnslb:   %r" % (name, version, a, b)
    p.console("showRules()")


def test_plain_queries(http_pair):
    """UDP and TCP queries meet the same rules: the HTTP selectors do not
    match, HTTPStatusAction goes on to the next rule, the dq methods give
    "" (an empty table), SNIRule("") matches."""
    p = http_pair
    for proto in ("udp", "tcp"):
        for name, qtype in NAMES:
            p.query(build_query(name, qtype=qtype, qid=0x2222), proto)
    p.console("showRules()")
    p.stats()


LATER = "dq:setHTTPResponse() shapes only an answer of the query rules"

BODY_LATER = '''
newServer({address="@B0@"})
addDOHLocal("127.0.0.1:@TLSPORT@", nil, nil, {"/dns-query"}, {})
addAction("later.test.", LuaAction(function(dq)
  dq:setHTTPResponse(418, "later", "text/x")
  return DNSAction.None
end))
addResponseAction(HTTPPathRule("/dns-query"), SetTagResponseAction("seen", "yes"))
addResponseAction(HTTPHeaderRule("user-agent", "."), SetTagResponseAction("seen", "yes"))
'''


def test_response_rules(pair, workdir):
    """Response rules see no HTTP request in dnsdist 1.7.3 either (its DoH
    answers come back over UDP without it); a query whose Lua action set
    an HTTP response and let it go on to its backend is the one documented
    difference: dnsdist then sends a 500, dnslb the backend's answer."""
    p = pair(BODY_LATER, backends=({},))
    path = "/dns-query?dns=%s" % b64(build_query("www.example.test.", qid=0))
    for version in (2, 1):
        both_doh(p, workdir, path, version)
    p.console("showResponseRules()")
    path = "/dns-query?dns=%s" % b64(build_query("later.test.", qid=0))
    for version in (2, 1):
        a = curl(p.theirs.tls_port, path, version, workdir)
        b = curl(p.ours.tls_port, path, version, workdir)
        assert known(LATER)
        assert a[0].split()[1] == "500" and a[2] == b"Internal Server Error", a
        assert b[0].split()[1] == "200" and "content-type: application/dns-message" in b[1], b
        p.assert_same_backend_traffic()
