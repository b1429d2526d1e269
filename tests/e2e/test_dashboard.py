"""The dashboard page (issue 6; docs/web.md, "Dashboard"), in headless Chromium.

The page loads from dnslb alone (no other origin), passes its own
Content-Security-Policy (the inline script is allowed by its hash), polls
the JSON endpoints with the browser's Basic credentials, draws its charts,
and writes what it fetched into #dlb-state, which is compared here with the
test's own /jsonstat and API reads taken after the traffic stopped. Any
JavaScript error, console error or CSP violation lands in #dlb-errors,
which must stay empty. Chromium only ever opens 127.0.0.1 URLs.
"""

import base64
import hashlib
import html
import json
import os
import re
import shutil
import subprocess

import pytest

from dnslbtest import lua_server, make_query, udp_query
from test_web import PASSWORD, basic, get_json, quiet, request, web_conf, web_port

pytestmark = pytest.mark.dnslb_only("dnslb's own dashboard")

CHROMIUM = os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium")


def chromium_dom(url, profile, budget_ms=6000):
    """The page's DOM after @budget_ms of virtual time (polls run once a second)."""
    if not shutil.which(CHROMIUM):
        pytest.skip("no chromium")
    assert re.match(r"http://([^@/]*@)?127\.0\.0\.1:\d+/", url), url
    cmd = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
           "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions",
           "--disable-background-networking", "--disable-sync", "--user-data-dir=" + profile,
           "--virtual-time-budget=%d" % budget_ms, "--dump-dom", url]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


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
