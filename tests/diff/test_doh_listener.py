"""DNS over HTTPS over the wire, beside dnsdist 1.7.3: both run the same
addDOHLocal listener (plain HTTP, the form behind a TLS-terminating proxy;
TLS itself is tests/e2e/test_doh.py), curl asks both the same requests over
HTTP/2 (prior knowledge) and HTTP/1.1, and the whole answers are compared:
status line, every header field but Date (its value is only checked to be
an HTTP date), and the body; then what each backend received.
"""

import base64
import json
import os
import re
import subprocess
import time

import pytest

from diffharness import build_query, known  # noqa: F401

CURL = "/usr/bin/curl"

BODY = '''
newServer({address="@B0@"})
addDOHLocal("127.0.0.1:@TLSPORT@", nil, nil, {"/dns-query", "/other/"}, {%s})
addAction("drop.example.test.", DropAction())
addAction("refused.example.test.", RCodeAction(DNSRCode.REFUSED))
addAction("spoof.example.test.", SpoofAction("192.0.2.77"))
addAction("tconly.example.test.", TCAction())
addAction("nopool.example.test.", PoolAction("nothing-here"))
'''

DATE = re.compile(r"^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$")


def console(side, cmd):
    """@side's console output of @cmd, its DoH port written PORT, without
    dnsdist's warnings about the test's plain-text web password."""
    out = side.console(cmd).replace(":%d " % side.tls_port, ":PORT ")
    return "".join(line for line in out.splitlines(True) if "plain-text" not in line)


def b64(wire):
    return base64.urlsafe_b64encode(wire).decode().rstrip("=")


def curl(port, path, version, workdir, method=None, body=None, headers=()):
    """(status line, [header lines but Date], body) of one request."""
    out = os.path.join(workdir, "body")
    argv = [CURL, "-s", "--max-time", "5", "-o", out, "-D", "-",
            "--http2-prior-knowledge" if version == 2 else "--http1.1"]
    if method:
        argv += ["-X", method]
    for h in headers:
        argv += ["-H", h]
    if body is not None:
        src = os.path.join(workdir, "post")
        with open(src, "wb") as f:
            f.write(body)
        argv += ["--data-binary", "@" + src]
    if os.path.exists(out):
        os.unlink(out)
    r = subprocess.run(argv + ["http://127.0.0.1:%d%s" % (port, path)], capture_output=True,
                       timeout=10)
    lines = r.stdout.decode("latin-1").replace("\r", "").split("\n")
    fields = []
    for line in lines[1:]:
        if line.lower().startswith("date:"):
            assert DATE.match(line.split(":", 1)[1].strip()), line
            continue
        if line:
            fields.append(line)
    data = open(out, "rb").read() if os.path.exists(out) else b""
    return lines[0], fields, data


def both(p, workdir, path, version, **kw):
    a = curl(p.theirs.tls_port, path, version, workdir, **kw)
    b = curl(p.ours.tls_port, path, version, workdir, **kw)
    assert a == b, "DoH answers differ for %s (HTTP/%s)\n dnsdist: %r\n dnslb:   %r" % (
        path, version, a, b)
    time.sleep(0.05)
    p.assert_same_backend_traffic()
    return a


def q(name, qtype=1, **kw):
    return build_query(name, qtype=qtype, qid=0, **kw)


REQUESTS = [
    # (what, path or None for a GET of the query, query, kw)
    ("forwarded", None, q("www.example.test."), {}),
    ("forwarded AAAA", None, q("www.example.test.", qtype=28), {}),
    ("the query's ID kept", None, build_query("id.example.test.", qid=0x1234), {}),
    ("POST, the query's ID kept", "/dns-query", build_query("id2.example.test.", qid=0xbeef),
     {"method": "POST"}),
    ("with EDNS", None, q("www.example.test.", opt={"payload": 1232}), {}),
    ("nxdomain", None, q("nx.example.test."), {}),
    ("servfail", None, q("servfail.example.test."), {}),
    ("answer with OPT", None, q("withopt.example.test."), {}),
    ("ttl", None, q("ttl-42.example.test."), {}),
    ("dropped: 403", None, q("drop.example.test."), {}),
    ("refused by a rule", None, q("refused.example.test."), {}),
    ("spoofed", None, q("spoof.example.test."), {}),
    ("TCAction does not apply", None, q("tconly.example.test."), {}),
    ("truncated: asked again over TCP", None, q("tc.example.test."), {}),
    ("truncated with records", None, q("tcdata.example.test."), {}),
    ("truncated, then a full answer over TCP", None, q("big-3000.example.test.", qtype=16), {}),
    ("no server: 403", None, q("nopool.example.test."), {}),
    ("no answer: 502", None, q("drop.other.test."), {}),
    ("second URL, prefix", "/other/x?dns=%s", q("www.example.test."), {}),
    ("not found", "/nowhere?dns=%s", q("www.example.test."), {}),
    ("no endpoint", "/dns-query/more?dns=%s", q("www.example.test."), {}),
    ("no dns parameter", "/dns-query?foo=bar", None, {}),
    ("bad base64", "/dns-query?dns=!!!!", None, {}),
    ("not DNS", "/dns-query?dns=AAAA", None, {}),
    ("second parameter", "/dns-query?x=1&dns=%s", q("www.example.test."), {}),
    ("POST", "/dns-query", q("www.example.test."), {"method": "POST"}),
    ("POST, NXDOMAIN", "/dns-query", q("nx.example.test."), {"method": "POST"}),
    ("PUT", "/dns-query", q("www.example.test."), {"method": "PUT"}),
]


def request(p, workdir, version, path, wire, kw):
    if kw.get("method") in ("POST", "PUT"):
        return both(p, workdir, path, version, method=kw["method"], body=wire,
                    headers=("content-type: application/dns-message",))
    if path is None:
        path = "/dns-query?dns=%s"
    if "%s" in path:
        path = path % b64(wire)
    return both(p, workdir, path, version)


@pytest.mark.parametrize("version", [2, 1])
def test_requests(pair, workdir, version):
    p = pair(BODY % "", backends=({},))
    for what, path, wire, kw in REQUESTS:
        if what == "no answer: 502":
            continue    # below, once, in its own test
        request(p, workdir, version, path, wire, kw)


def test_no_answer(pair, workdir):
    """The backend never answers: 502 once its timeout has passed."""
    p = pair(BODY % "", backends=({},))
    both(p, workdir, "/dns-query?dns=%s" % b64(q("drop.example.org.")), 2)


def test_options(pair, workdir):
    """customResponseHeaders, serverTokens, sendCacheControlHeaders=false,
    exactPathMatching=false."""
    opts = ('customResponseHeaders={["X-Test"]="yes", ["access-control-allow-origin"]="*"}, '
            'serverTokens="example", sendCacheControlHeaders=false, exactPathMatching=false')
    p = pair(BODY % opts, backends=({},))
    for version in (2, 1):
        for path in ("/dns-query?dns=%s", "/dns-query/more?dns=%s", "/nowhere?dns=%s"):
            both(p, workdir, path % b64(q("www.example.test.")), version)
        both(p, workdir, "/dns-query?dns=!!", version)


def test_forwarded_for(pair, workdir):
    """trustForwardedForHeader: the ACL sees X-Forwarded-For's last address."""
    opts = "trustForwardedForHeader=true"
    p = pair(BODY % opts + 'setACL({"192.0.2.0/24"})\n', backends=({},))
    path = "/dns-query?dns=%s" % b64(q("www.example.test."))
    for version in (2, 1):
        both(p, workdir, path, version)     # 127.0.0.1: refused by the ACL
        both(p, workdir, path, version, headers=("X-Forwarded-For: 192.0.2.1",))
        both(p, workdir, path, version, headers=("X-Forwarded-For: 192.0.2.1, 10.0.0.1",))
        both(p, workdir, path, version, headers=("X-Forwarded-For: 10.0.0.1, 192.0.2.9",))
        both(p, workdir, path, version, headers=("X-Forwarded-For: nonsense",))
    p.stats()


def test_counters_after_traffic(pair, workdir):
    """dumpStats(), showDOHFrontends(), showDOHResponseCodes() and the DoH
    lines of /metrics after the same DoH traffic, over both versions."""
    p = pair(BODY % "", backends=({},), web=True)
    for version in (2, 1):
        for what, path, wire, kw in REQUESTS:
            if what != "no answer: 502":
                request(p, workdir, version, path, wire, kw)
    p.stats()
    for cmd in ("showDOHFrontends()", "showDOHResponseCodes()", "getDOHFrontendCount()"):
        a, b = (console(s, cmd) for s in (p.theirs, p.ours))
        assert a == b, "%s differs\n--- dnsdist\n%s--- dnslb\n%s" % (cmd, a, b)

    def doh_lines(side):
        text = side.web("/metrics")[1].decode().replace(":%d" % side.tls_port, ":PORT")
        return [line for line in text.splitlines()
                if "_doh_" in line or "http_connects" in line]
    assert doh_lines(p.theirs) == doh_lines(p.ours)
    a, b = (json.loads(side.web("/api/v1/servers/localhost")[1])["dohFrontends"]
            for side in (p.theirs, p.ours))
    for x in a + b:
        x["address"] = x["address"].rsplit(":", 1)[0]
    assert a == b


def test_responses_map(pair, workdir):
    """getDOHFrontend(0):setResponsesMap() from the console: a matching path
    gets the entry's status, content and fields (its own, or the listener's
    customResponseHeaders), a redirect its HTML page; the others go on."""
    p = pair(BODY % 'customResponseHeaders={["x-frontend"]="1"}', backends=({},))
    p.console('getDOHFrontend(0):setResponsesMap({'
              'newDOHResponseMapEntry("^/dns-query\\\\?x=", 200, "hello", {["X-B"]="2", ["X-A"]="1"}), '
              'newDOHResponseMapEntry("^/dns-query\\\\?y=", 418, "teapot"), '
              'newDOHResponseMapEntry("^/DNS-query\\\\?r=", 307, "https://elsewhere.example/")})')
    for version in (2, 1):
        for path in ("/dns-query?x=1", "/dns-query?y=1", "/dns-query?r=1", "/dns-query?z=1",
                     "/dns-query?dns=%s" % b64(q("www.example.test."))):
            both(p, workdir, path, version)
    assert p.console("getDOHFrontendCount()") == "1\n"
    p.console("getDOHFrontend(0):reloadCertificates()")


def test_set_doh_response_map_entries(pair, workdir):
    """dnslb's setDOHResponseMapEntries() (dnsdist 1.7.3 has no such global)
    answers as dnsdist's getDOHFrontend(0):setResponsesMap() with the same
    entries."""
    p = pair(BODY % "", backends=({},))
    entries = ('{newDOHResponseMapEntry("^/dns-query\\\\?x=", 200, "hello", {["X-A"]="1"}), '
               'newDOHResponseMapEntry("^/dns-query\\\\?r=", 307, "https://elsewhere.example/")}')
    assert console(p.theirs, "getDOHFrontend(0):setResponsesMap(%s)" % entries) == ""
    assert console(p.ours, "setDOHResponseMapEntries(%s)" % entries) == ""
    for version in (2, 1):
        for path in ("/dns-query?x=1", "/dns-query?r=1", "/dns-query?z=1",
                     "/dns-query?dns=%s" % b64(q("www.example.test."))):
            both(p, workdir, path, version)
