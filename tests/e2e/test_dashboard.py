"""The dashboard page (issue 6; docs/web.md, "Dashboard"), in headless Chromium.

The page loads from dnslb alone (no other origin), passes its own
Content-Security-Policy (the inline script is allowed by its hash), polls
the JSON endpoints with the browser's Basic credentials, draws its charts,
and writes what it fetched into #dlb-state, which is compared here with the
test's own /jsonstat and API reads taken after the traffic stopped. Any
JavaScript error, console error or CSP violation lands in #dlb-errors,
which must stay empty. Chromium only ever opens 127.0.0.1 URLs.

The panels (rcodes, listen addresses and ACL, rules, response rules,
dynamic blocks, server pools) are compared with the JSON the test reads
itself, and the layout is checked at 800 and 1400 px wide: the page writes
whether it overflows the window sideways into #dlb-state, and screenshots
at both widths must come out as real pictures of the page.
"""

import base64
import hashlib
import html
import json
import os
import re
import shutil
import struct
import subprocess
import zlib

import pytest

from dnslbtest import console, console_head, lua_server, make_query, udp_query
from test_web import PASSWORD, basic, get_json, quiet, request, web_conf, web_port

pytestmark = pytest.mark.dnslb_only("dnslb's own dashboard")

CHROMIUM = os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium")


def chromium(url, profile, budget_ms, out_args, window=None):
    if not shutil.which(CHROMIUM):
        pytest.skip("no chromium")
    assert re.match(r"http://([^@/]*@)?127\.0\.0\.1:\d+/", url), url
    cmd = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
           "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions",
           "--disable-background-networking", "--disable-sync", "--user-data-dir=" + profile,
           "--virtual-time-budget=%d" % budget_ms]
    if window is not None:
        cmd.append("--window-size=%d,%d" % window)
    r = subprocess.run(cmd + out_args + [url], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def chromium_dom(url, profile, budget_ms=6000, window=None):
    """The page's DOM after @budget_ms of virtual time (polls run once a second)."""
    return chromium(url, profile, budget_ms, ["--dump-dom"], window)


def chromium_screenshot(url, profile, path, window, budget_ms=4000):
    """A PNG of the window (@window = (width, height)) after @budget_ms."""
    chromium(url, profile, budget_ms, ["--screenshot=" + path], window)
    assert os.path.exists(path), "no screenshot written"
    return png_pixels(path)


def png_pixels(path):
    """(width, height, rows of (r, g, b) tuples) of an 8-bit RGB or RGBA PNG."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, hdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = hdr
    assert depth == 8 and ctype in (2, 6) and interlace == 0, hdr
    bpp = 3 if ctype == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    hi = int.from_bytes(b"\x80" * stride, "big")
    lo = int.from_bytes(b"\x7f" * stride, "big")
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 2:      # Up, most rows: add the rows bytewise in one big-integer sum
            x, p = int.from_bytes(line, "big"), int.from_bytes(prev, "big")
            line = bytearray((((x & lo) + (p & lo)) ^ ((x ^ p) & hi)).to_bytes(stride, "big"))
            f = 0
        for i in range(stride if f else 0):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, bpp)])
        prev = line
    return w, h, rows


def element_text(dom, elem_id):
    m = re.search(r'<pre id="%s"[^>]*>(.*?)</pre>' % elem_id, dom, re.S)
    assert m, "no #%s in the page:\n%s" % (elem_id, dom[:3000])
    return html.unescape(m.group(1))


def test_dashboard_in_chromium(dnslb, make_responder, tmp_path):
    r1, r2 = make_responder(), make_responder()
    d = dnslb(lua_server(r1, name="first.backend") + lua_server(r2, name="second")
              + 'setServerPolicy(roundrobin)\n'
              + 'getPool(""):setCache(newPacketCache(1000))\n' + web_conf())
    port = web_port(d)
    names = ["dash%d.example." % i for i in range(6)]
    for n in names + names[:4] + names[:2]:
        assert udp_query(d.port, make_query(n)) is not None
    quiet(d)

    dom = chromium_dom("http://user:%s@127.0.0.1:%d/" % (PASSWORD, port), str(tmp_path / "p"))
    assert element_text(dom, "dlb-errors").strip() == ""
    state = json.loads(element_text(dom, "dlb-state"))
    assert state["error"] is None, state["error"]
    assert state["polls"] >= 2, state

    # the figures the page shows are dnslb's (traffic stopped: counters are still)
    status, stats = get_json(port, "/jsonstat?command=stats")
    assert status == 200
    for k in ("queries", "responses", "cache-hits", "cache-misses", "frontend-noerror",
              "latency0-1", "rule-drop"):
        assert state["stats"][k] == stats[k], k
    assert state["stats"]["queries"] == 12 and state["stats"]["cache-hits"] == 6
    api = get_json(port, "/api/v1/servers/localhost")[1]
    assert [(s["name"], s["queries"], s["state"]) for s in state["servers"]] == \
        [(s["name"], s["queries"], s["state"]) for s in api["servers"]]
    assert sum(s["queries"] for s in state["servers"]) == 6

    # top names and clients as the API gives them
    top = get_json(port, "/api/v1/servers/localhost/top?n=10")[1]
    assert state["top"]["names"] == top["names"]
    assert {x["name"]: x["count"] for x in top["names"]}["dash0.example."] == 3
    assert state["top"]["clients"][0]["count"] == 12

    # every chart drew its series; the per-backend one a line per backend
    charts = state["charts"]
    for c in ("c-qps", "c-lat", "c-hit", "c-be"):
        assert charts[c]["points"] >= 1, (c, charts)
    assert charts["c-be"]["lines"] == 2
    assert charts["c-qps"]["lines"] == 2
    # no traffic during the page's life: the last rate drawn is 0 queries/s
    assert charts["c-qps"]["last"][0] == 0
    # the tiles show the same counters
    assert re.search(r'id="t-queries">12<', dom)
    assert re.search(r'id="t-hits">6<', dom)
    assert "first.backend" in dom and "second" in dom
    assert "dash0.example." in dom


def test_dashboard_needs_the_password(dnslb):
    d = dnslb(web_conf())
    port = web_port(d)
    status, hdrs, body = request(port, "/")
    assert status == 401 and hdrs["www-authenticate"].lower().startswith("basic")
    status, hdrs, body = request(port, "/", headers={"Authorization": basic(PASSWORD)})
    assert status == 200 and hdrs["content-type"].startswith("text/html")
    page = body.decode()
    # self-contained: nothing loaded from elsewhere
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', page), "external resource"
    assert page.count("<script>") == 1 and "<script src" not in page
    # its CSP allows exactly its own inline script, by hash
    script = page.split("<script>", 1)[1].split("</script>", 1)[0]
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    csp = hdrs["content-security-policy"]
    assert "script-src 'sha256-%s'" % digest in csp, csp
    assert "default-src 'self'" in csp
    assert request(port, "/index.html", headers={"Authorization": basic(PASSWORD)})[0] == 200


def test_dashboard_reports_a_failing_endpoint(dnslb, tmp_path):
    """With the API closed to the password, the page says so instead of drawing stale data."""
    d = dnslb(web_conf(extra_opts={"dashboardRequiresAuthentication": False,
                                   "statsRequireAuthentication": False}))
    port = web_port(d)
    dom = chromium_dom("http://127.0.0.1:%d/" % port, str(tmp_path / "p"), budget_ms=3000)
    state = json.loads(element_text(dom, "dlb-state"))
    assert state["polls"] == 0
    assert "HTTP 401" in state["error"]
    assert re.search(r'id="status">error: [^<]*401', dom)


PANELS_CONF = (
    'setACL({"127.0.0.0/8", "::1/128", "192.0.2.0/24"})\n'
    'addAction(QNameRule("refuse.dash.example."), RCodeAction(DNSRCode.REFUSED), '
    '{name="refuse-it"})\n'
    'addAction(QNameRule("fail.dash.example."), RCodeAction(DNSRCode.SERVFAIL))\n'
    'addAction(AllRule(), PoolAction(""))\n'
    'addResponseAction(RCodeRule(DNSRCode.NXDOMAIN), AllowResponseAction(), {name="nx-seen"})\n'
    'addCacheHitResponseAction(AllRule(), AllowResponseAction())\n'
    'getPool(""):setCache(newPacketCache(1000))\n')


def test_dashboard_panels_and_layout(dnslb, make_responder, tmp_path):
    r1, r2 = make_responder(), make_responder()
    d = dnslb(console_head() + lua_server(r1, name="first", pool=["", "x"])
              + lua_server(r2, name="second", pool="y") + PANELS_CONF + web_conf())
    port = web_port(d)
    # NOERROR (one of them twice: a cache hit), NXDOMAIN, SERVFAIL from a backend,
    # REFUSED and SERVFAIL by rules
    for n in ("a.dash.example.", "a.dash.example.", "nx.dash.example.",
              "servfail.dash.example.", "refuse.dash.example.", "refuse.dash.example.",
              "fail.dash.example."):
        assert udp_query(d.port, make_query(n)) is not None, n
    console(d, 'addDynamicBlock("127.0.0.50", "dashboard test", DNSAction.Refused, 3600)')
    console(d, 'addDynBlockSMT({"smt.dash.example."}, "smt test", 3600)')
    quiet(d)

    url = "http://user:%s@127.0.0.1:%d/" % (PASSWORD, port)
    dom = chromium_dom(url, str(tmp_path / "p800"), window=(800, 1000))
    assert element_text(dom, "dlb-errors").strip() == ""
    state = json.loads(element_text(dom, "dlb-state"))
    assert state["error"] is None and state["polls"] >= 2, state

    # no horizontal overflow at 800 px: the tables scroll inside their cards
    lay = state["layout"]
    assert lay["innerWidth"] == 800 and not lay["overflow"], lay
    assert lay["scrollWidth"] <= lay["innerWidth"], lay

    api = get_json(port, "/api/v1/servers/localhost")[1]
    stats = get_json(port, "/jsonstat?command=stats")[1]
    blocks = get_json(port, "/jsonstat?command=dynblocklist")[1]

    # rcodes: the counters as /jsonstat gives them, their share of the queries,
    # and a rate of 0 (no traffic during the page's life)
    assert [(r["rcode"], r["counter"]) for r in state["rcodes"]] == [
        ("NOERROR", "frontend-noerror"), ("NXDOMAIN", "frontend-nxdomain"),
        ("SERVFAIL", "frontend-servfail"), ("SERVFAIL from backends", "servfail-responses"),
        ("REFUSED by rules", "rule-refused"), ("NXDOMAIN by rules", "rule-nxdomain"),
        ("SERVFAIL by rules", "rule-servfail")]
    assert stats["queries"] == 7
    for r in state["rcodes"]:
        assert r["count"] == stats[r["counter"]], r
        assert r["pct"] == pytest.approx(100.0 * stats[r["counter"]] / 7), r
        assert r["rate"] == 0, r
    counts = {r["counter"]: r["count"] for r in state["rcodes"]}
    # RCodeAction counts in self-answered only (as dnsdist)
    assert counts["rule-refused"] == 0 and counts["rule-servfail"] == 0
    assert counts["servfail-responses"] == 1 and counts["frontend-nxdomain"] == 1
    assert counts["frontend-servfail"] == 2 and counts["frontend-noerror"] == 2

    # rules and response rules with their match counts, as the API gives them
    keys = ("id", "name", "rule", "action", "matches")
    # the API names response rules only (as dnsdist's): a query rule's name is ""
    assert state["rules"] == [{k: r.get(k, "") for k in keys} for r in api["rules"]]
    assert [(r["name"], r["matches"]) for r in state["rules"]] == \
        [("", 2), ("", 1), ("", 4)]     # query rules have no name in the API (dnsdist's)
    chains = (("response", "response-rules"), ("cache hit", "cache-hit-response-rules"),
              ("cache inserted", "cache-inserted-response-rules"),
              ("self-answered", "self-answered-response-rules"))
    assert state["responseRules"] == [dict({k: r[k] for k in keys}, chain=label)
                                      for label, chain in chains for r in api.get(chain, [])]
    assert [(r["chain"], r["name"], r["matches"]) for r in state["responseRules"]] == \
        [("response", "nx-seen", 1), ("cache hit", "", 1)]

    # the active blocks (their seconds left count down between the two reads)
    assert set(state["dynblocks"]) == set(blocks) == {"127.0.0.50/32", "smt.dash.example."}
    for k, b in blocks.items():
        page = dict(state["dynblocks"][k])
        assert 3500 < page.pop("seconds") <= 3600
        assert page == {x: v for x, v in b.items() if x != "seconds"}, k

    # the pools of each server, the listen addresses and the ACL
    assert [(s["name"], s["pools"]) for s in state["servers"]] == \
        [(s["name"], s["pools"]) for s in api["servers"]] == [("first", ["", "x"]),
                                                              ("second", ["y"])]
    fkeys = ("address", "type", "queries", "responses", "tcpCurrentConnections")
    assert state["frontends"] == [{k: f[k] for k in fkeys if k in f} for f in api["frontends"]]
    assert [f["type"] for f in state["frontends"]] == ["UDP", "TCP"]
    assert state["frontends"][0]["queries"] == 7
    assert state["acl"] == api["acl"].split(", ")
    assert sorted(state["acl"]) == ["127.0.0.0/8", "192.0.2.0/24", "::1/128"]

    # and the page shows them
    for text in ("nx-seen", "qname==refuse.dash.example.", "dashboard test",
                 "smt.dash.example.", "192.0.2.0/24", "(default), x", "frontend-servfail"):
        assert html.escape(text, quote=False) in dom, text
    assert re.search(r'id="t-blocks">2<', dom)

    # wide: still no overflow
    dom = chromium_dom(url, str(tmp_path / "p1400"), window=(1400, 1000))
    lay = json.loads(element_text(dom, "dlb-state"))["layout"]
    assert lay["innerWidth"] == 1400 and not lay["overflow"], lay

    # screenshots at both widths: the window's size, the dark header on top,
    # the page's colours (not a blank or error page)
    for width in (800, 1400):
        path = str(tmp_path / ("dashboard-%d.png" % width))
        w, h, rows = chromium_screenshot(url, str(tmp_path / ("s%d" % width)), path,
                                         (width, 1000))
        assert (w, h) == (width, 1000)
        assert rows[10][5] == (0x1d, 0x23, 0x30), rows[10][5]     # header: --ink
        assert rows[h - 5][5] == (0xf5, 0xf6, 0xf8), rows[h - 5][5]  # page: --bg
        colours = set()
        for row in rows[::7]:
            colours.update(row[::7])
        assert len(colours) > 50, len(colours)
