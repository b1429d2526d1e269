"""The built-in web server (issue 6; docs/web.md): /metrics in the Prometheus
text format (names, types, labels and their escaping, the latency histogram,
per server/frontend/pool/rule series), /jsonstat, the JSON API and its
dnsdist 1.7.3 shape, DELETE /api/v1/cache, authentication (password, API
key, scrypt hashes interchangeable with dnsdist's hashPassword()), the ACL,
custom and security headers, the Origin rule, the request and connection
limits, and the Lua functions' validation.

Every test binds the web server to 127.0.0.1:0 and reads the port from the
"Webserver launched on" line. The helpers here are shared with
test_dashboard.py and test_carbon.py.
"""

import base64
import http.client
import json
import os
import re
import signal
import socket
import time

import pytest

from dnslbtest import (DNSDIST, check_config_text, free_port, lua_server, lua_value,
                       make_query, udp_query, wait_until)

pytestmark = pytest.mark.dnslb_only("webserver(\"127.0.0.1:0\") and dnslb's own endpoints")

PASSWORD = "s3cret:with:colons"
API_KEY = "the-api-key"
# dnsdist 1.7.3's hashPassword("secret") (scrypt N=1024, r=8, p=1)
DNSDIST_HASH_OF_SECRET = ("$scrypt$ln=10,p=1,r=8$qYOd+05lsD8vmyrUterr2w==$"
                          "1nsHdxYpY73Yi1zEzfDsMw/GtsPxra8QabOP8791cJE=")


def web_conf(password=PASSWORD, api_key=API_KEY, extra_opts=None, addr="127.0.0.1:0"):
    opts = {}
    if password is not None:
        opts["password"] = password
    if api_key is not None:
        opts["apiKey"] = api_key
    opts.update(extra_opts or {})
    return 'webserver("%s")\nsetWebserverConfig(%s)\n' % (addr, lua_value(opts))


def web_port(d, timeout=10.0):
    """The port of the first 'Webserver launched on' line of daemon @d."""
    idx = d.wait_line(r"Webserver launched on", 0, timeout)
    assert idx is not None, "no 'Webserver launched on' line:\n" + d.output()
    m = re.search(r"Webserver launched on (?:\[[0-9a-f:]+\]|[0-9.]+):(\d+)", d.lines[idx])
    return int(m.group(1))


def start_dnsdist(dnslb, body, **web):
    """Debian's dnsdist 1.7.3 with @body and a web server on a fixed free port
    (it logs the configured port, not the bound one). Skips if it cannot run."""
    if not os.access(DNSDIST, os.X_OK):
        pytest.skip("no dnsdist binary")
    port = free_port()
    try:
        dd = dnslb(body + web_conf(addr="127.0.0.1:%d" % port, **web), impl="dnsdist",
                   name="dnsdist")
    except Exception as e:      # noqa: BLE001 - any failure to start means: no reference
        pytest.skip("dnsdist did not start: %s" % e)
    if dd.wait_line(r"Webserver launched on", 0, 10) is None:
        pytest.skip("dnsdist did not start its web server")
    return dd, port


def basic(password, user="any-user"):
    return "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()


def request(port, path, method="GET", headers=None, body=None, host="127.0.0.1",
            source=None, timeout=10.0):
    """One HTTP request: (status, {lowercased header: value}, body bytes)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout,
                                      source_address=(source, 0) if source else None)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def get_json(port, path, auth=None, key=API_KEY, method="GET"):
    h = {}
    if key is not None:
        h["X-API-Key"] = key
    if auth is not None:
        h["Authorization"] = auth
    status, hdrs, body = request(port, path, method=method, headers=h)
    assert hdrs.get("content-type", "").startswith("application/json"), (status, hdrs, body)
    return status, json.loads(body)


def prom_families(text):
    from prometheus_client.parser import text_string_to_metric_families
    return {f.name: f for f in text_string_to_metric_families(text)}


def get_metrics(port, auth=None):
    """/metrics with @auth (an Authorization value), else the API key."""
    status, hdrs, body = request(port, "/metrics",
                                 headers={"Authorization": auth} if auth else
                                 {"X-API-Key": API_KEY})
    assert status == 200, body
    assert hdrs["content-type"].startswith("text/plain")
    return body.decode()


def quiet(d, timeout=5.0):
    """Wait until the counters stop moving (health checks do not count as queries)."""
    last = [None]

    def same():
        s = d.stats()["queries"]
        ok = s == last[0]
        last[0] = s
        return ok
    wait_until(same, timeout, 0.2)


def send_queries(d, names):
    for n in names:
        assert udp_query(d.port, make_query(n)) is not None, n


# ---- /metrics ---------------------------------------------------------------------------

RULE_NAME = 'quote " backslash \\ newline \n end'
RULE_LUA = '"quote \\" backslash \\\\ newline \\n end"'     # the same, as a Lua literal


def test_metrics_prometheus_format(dnslb, responder):
    conf = (lua_server(responder, name="back.one", pool=["", "abuse"])
            + 'getPool("abuse"):setCache(newPacketCache(100))\n'
            + 'getPool(""):setCache(newPacketCache(10000))\n'
            + 'addAction("blocked.example.", DropAction(), {name=%s})\n' % RULE_LUA
            + 'addAction("other.example.", RCodeAction(5))\n'
            + web_conf())
    d = dnslb(conf)
    port = web_port(d)
    send_queries(d, ["a%d.example." % i for i in range(5)] + ["a0.example.", "a1.example."])
    for _ in range(3):
        udp_query(d.port, make_query("blocked.example."), timeout=0.3)
    quiet(d)
    stats = d.stats()
    text = get_metrics(port, basic(PASSWORD))
    fams = prom_families(text)

    # every global counter, named dnsdist_<name with - as _>, with HELP and TYPE
    for name in ("queries", "responses", "cache-hits", "cache-misses", "rule-drop",
                 "latency0-1", "latency-slow", "latency-avg100", "uptime", "acl-drops",
                 "downstream-timeouts", "frontend-noerror", "no-policy", "rdqueries"):
        pname = "dnsdist_" + name.replace("-", "_")
        assert pname in fams, pname
        assert "# HELP %s " % pname in text and "# TYPE %s " % pname in text
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            assert line.split()[3] in ("counter", "gauge", "histogram"), line
    assert fams["dnsdist_queries"].type == "counter"
    assert fams["dnsdist_uptime"].type == "gauge"
    assert fams["dnsdist_queries"].samples[0].value == stats["queries"] == 10
    assert fams["dnsdist_cache_hits"].samples[0].value == stats["cache-hits"] == 2
    assert fams["dnsdist_rule_drop"].samples[0].value == stats["rule-drop"] == 3

    # the latency histogram: cumulative buckets 1, 10, 50, 100, 1000, +Inf
    hist = fams["dnsdist_latency"]
    assert hist.type == "histogram"
    buckets = [(s.labels["le"], s.value) for s in hist.samples if s.name.endswith("_bucket")]
    assert [b[0] for b in buckets] == ["1", "10", "50", "100", "1000", "+Inf"]
    vals = [b[1] for b in buckets]
    assert vals == sorted(vals)
    assert vals[0] == stats["latency0-1"]
    assert vals[-1] == sum(stats[k] for k in ("latency0-1", "latency1-10", "latency10-50",
                                              "latency50-100", "latency100-1000",
                                              "latency-slow"))
    assert vals[-1] >= 7        # the 7 answers (the drops have no latency)
    names = {s.name for s in hist.samples}
    assert {"dnsdist_latency_sum", "dnsdist_latency_count"} <= names
    # the histogram parts are not also exported on their own
    assert "\ndnsdist_latency_sum " in text and text.count("\ndnsdist_latency_sum ") == 1

    # per server: name with dots as underscores, and the address
    srv = {s.name: s for s in fams["dnsdist_server_queries"].samples}
    assert len(srv) == 1
    s = fams["dnsdist_server_queries"].samples[0]
    assert s.labels == {"server": "back_one", "address": responder.address}
    assert s.value == stats["backends"]["back.one"]["queries"] == 5
    for fam in ("status", "responses", "drops", "senderrors", "outstanding", "order", "weight"):
        assert "dnsdist_server_" + fam in fams
    assert fams["dnsdist_server_status"].samples[0].value == 1
    assert fams["dnsdist_server_latency"].samples       # emitted while up

    # frontends: UDP and TCP of the one bind
    fr = {(x.labels["proto"], x.labels["frontend"], x.labels["thread"]): x.value
          for x in fams["dnsdist_frontend_queries"].samples}
    assert fr[("UDP", "127.0.0.1:%d" % d.port, "0")] == 10
    assert ("TCP", "127.0.0.1:%d" % d.port, "0") in fr

    # pools: "" is _default_, cache figures for pools with a cache
    ps = {x.labels["pool"]: x.value for x in fams["dnsdist_pool_servers"].samples}
    assert ps == {"_default_": 1, "abuse": 1}
    cs = {x.labels["pool"]: x.value for x in fams["dnsdist_pool_cache_size"].samples}
    assert cs == {"_default_": 10000, "abuse": 100}
    hits = {x.labels["pool"]: x.value for x in fams["dnsdist_pool_cache_hits"].samples}
    assert hits["_default_"] == 2

    # rules: the name, escaped in the text and read back intact
    rh = {x.labels["id"]: x.value for x in fams["dnsdist_rule_hits"].samples}
    assert rh[RULE_NAME] == 3
    assert len(rh) == 2
    assert 'id="quote \\" backslash \\\\ newline \\n end"' in text
    info = fams["dnsdist_info"].samples[0]
    assert info.value == 1 and info.labels["version"]


def test_metrics_unique_rule_ids(dnslb):
    """Two rules with one name: the second is reported by UUID, so no series repeats."""
    conf = ('addAction("a.example.", DropAction(), {name="same"})\n'
            'addAction("b.example.", DropAction(), {name="same"})\n' + web_conf())
    d = dnslb(conf)
    text = get_metrics(web_port(d))
    ids = [x.labels["id"] for x in prom_families(text)["dnsdist_rule_hits"].samples]
    assert len(ids) == 2 and len(set(ids)) == 2
    assert "same" in ids
    other = [i for i in ids if i != "same"][0]
    assert re.fullmatch(r"[0-9a-f-]{36}", other), other


def test_metrics_names_like_dnsdist(dnslb, make_responder):
    """Every global metric dnsdist 1.7.3 exports that dnslb counts has the same name."""
    if not os.access(DNSDIST, os.X_OK):
        pytest.skip("no dnsdist binary")
    r = make_responder()
    d = dnslb(lua_server(r) + web_conf())
    ours = prom_families(get_metrics(web_port(d)))
    dd, dport = start_dnsdist(dnslb, lua_server(r))
    theirs = prom_families(get_metrics(dport))
    # families both have must agree on type; dnslb must have dnsdist's core ones
    for name, fam in ours.items():
        if name in theirs and theirs[name].type != "unknown":
            assert fam.type == theirs[name].type, name
    core = ["dnsdist_" + n for n in (
        "queries", "rdqueries", "responses", "servfail_responses", "frontend_noerror",
        "frontend_nxdomain", "frontend_servfail", "acl_drops", "rule_drop", "rule_nxdomain",
        "rule_refused", "rule_servfail", "rule_truncated", "self_answered",
        "downstream_timeouts", "downstream_send_errors", "no_policy", "latency0_1",
        "latency1_10", "latency10_50", "latency50_100", "latency100_1000", "latency_slow",
        "latency_avg100", "latency_avg1000", "latency_avg10000", "latency_avg1000000",
        "uptime", "cache_hits", "cache_misses", "noncompliant_queries",
        "noncompliant_responses", "empty_queries", "latency", "server_status",
        "server_queries", "server_responses", "server_drops", "server_senderrors",
        "server_outstanding", "server_order", "server_weight", "frontend_queries",
        "frontend_responses", "pool_servers", "pool_active_servers", "info")]
    for name in core:
        assert name in theirs, name     # the list itself is dnsdist's
        assert name in ours, name


# ---- /jsonstat and the API --------------------------------------------------------------


def test_jsonstat(dnslb, responder):
    d = dnslb(lua_server(responder) + 'getPool(""):setCache(newPacketCache(10000))\n'
              + web_conf())
    port = web_port(d)
    send_queries(d, ["j1.example.", "j2.example.", "j1.example."])
    quiet(d)
    stats = d.stats()
    status, js = get_json(port, "/jsonstat?command=stats")
    assert status == 200
    assert isinstance(js, dict)
    for k in ("queries", "responses", "cache-hits", "cache-misses", "rule-drop", "latency0-1",
              "latency-avg100", "uptime", "acl-drops", "downstream-timeouts"):
        assert k in js, k
    for k in ("queries", "responses", "cache-hits", "cache-misses", "latency0-1",
              "frontend-noerror"):
        assert js[k] == stats[k], k
    assert js["queries"] == 3 and js["cache-hits"] == 1
    assert js["server-policy"] == "leastOutstanding"
    assert all(isinstance(v, (int, float)) for k, v in js.items() if k != "server-policy")
    # Basic auth works for the stats too, and no credentials do not
    status, js2 = get_json(port, "/jsonstat?command=stats", auth=basic(PASSWORD), key=None)
    assert status == 200 and js2["queries"] == 3
    status, _ = get_json(port, "/jsonstat?command=stats", key=None)
    assert status == 401
    # no dynamic blocks yet: dnsdist's empty object
    assert get_json(port, "/jsonstat?command=dynblocklist") == (200, {})
    assert get_json(port, "/jsonstat?command=ebpfblocklist") == (200, {})
    status, err = get_json(port, "/jsonstat?command=nonsense")
    assert status == 404 and "error" in err
    status, err = get_json(port, "/jsonstat")
    assert status == 404


API_CONF = (
    'newServer({address="%(a)s", name="back.one", pool={"", "abuse"}, order=3, weight=7})\n'
    'newServer({address="%(b)s", pool="abuse"})\n'
    'getPool("abuse"):setCache(newPacketCache(100))\n'
    'addAction("bad.example.", DropAction(), {name="named"})\n'
    'addAction("x.example.", RCodeAction(5))\n'
    'addResponseAction(AllRule(), AllowResponseAction())\n')


def test_api_localhost_shape(dnslb, make_responder):
    r1, r2 = make_responder(), make_responder()
    d = dnslb(API_CONF % {"a": r1.address, "b": r2.address} + web_conf())
    port = web_port(d)
    send_queries(d, ["api1.example.", "api2.example."])
    quiet(d)
    status, js = get_json(port, "/api/v1/servers/localhost")
    assert status == 200
    assert set(js) >= {"acl", "cache-hit-response-rules", "daemon_type", "dohFrontends",
                       "frontends", "local", "pools", "response-rules", "rules",
                       "self-answered-response-rules", "servers", "version"}
    assert js["daemon_type"] == "dnsdist"
    assert "127.0.0.0/8" in js["acl"]
    assert js["local"] == "127.0.0.1:%d" % d.port
    fr = js["frontends"]
    assert [(f["type"], f["udp"], f["tcp"]) for f in fr] == [("UDP", True, False),
                                                             ("TCP", False, True)]
    assert fr[0]["queries"] == 2 and fr[0]["address"] == "127.0.0.1:%d" % d.port
    srv = js["servers"]
    # dnsdist's order: sorted by order (back.one has order 3)
    assert [s["name"] for s in srv] == [r2.address, "back.one"]
    s0 = srv[1]
    for k in ("address", "dropRate", "id", "latency", "name", "order", "outstanding", "pools",
              "qps", "qpsLimit", "queries", "responses", "reuseds", "sendErrors", "state",
              "weight"):
        assert k in s0, k
    assert s0["address"] == r1.address and s0["order"] == 3 and s0["weight"] == 7
    assert s0["pools"] == ["", "abuse"] and srv[0]["pools"] == ["abuse"]
    assert s0["state"] == "up"
    assert s0["queries"] == 2 and s0["responses"] == 2
    pools = {p["name"]: p for p in js["pools"]}
    assert set(pools) == {"", "abuse"}
    assert pools["abuse"]["cacheSize"] == 100 and pools["abuse"]["serversCount"] == 2
    assert pools[""]["serversCount"] == 1
    for k in ("cacheDeferredInserts", "cacheEntries", "cacheHits", "cacheMisses", "id",
              "serversCount"):
        assert k in pools["abuse"]
    rules = js["rules"]
    assert [x["rule"] for x in rules] == ["qname in bad.example.", "qname in x.example."]
    assert set(rules[0]) >= {"action", "action-stats", "creationOrder", "id", "matches",
                             "rule", "uuid"}
    # dnsdist 1.7.3 names its response rules only
    assert "name" not in rules[0] and "name" in js["response-rules"][0]
    assert [x["id"] for x in rules] == [0, 1]
    assert len(js["response-rules"]) == 1
    assert set(js["response-rules"][0]) >= {"action", "id", "matches", "rule", "uuid"}
    # the password opens this endpoint too (the dashboard polls it), not the others
    assert get_json(port, "/api/v1/servers/localhost", auth=basic(PASSWORD), key=None)[0] == 200
    assert get_json(port, "/api/v1/servers/localhost/statistics", auth=basic(PASSWORD),
                    key=None)[0] == 401


def test_api_shape_matches_dnsdist(dnslb, make_responder):
    """Same config in dnsdist 1.7.3: the same top-level keys and object keys."""
    if not os.access(DNSDIST, os.X_OK):
        pytest.skip("no dnsdist binary")
    r1, r2 = make_responder(), make_responder()
    conf = API_CONF % {"a": r1.address, "b": r2.address} + web_conf()
    d = dnslb(conf)
    ours = get_json(web_port(d), "/api/v1/servers/localhost")[1]
    dd, dport = start_dnsdist(dnslb, API_CONF % {"a": r1.address, "b": r2.address})
    theirs = get_json(dport, "/api/v1/servers/localhost")[1]
    # the cache-inserted chain (a dnsdist 1.8 chain) only once it has rules
    assert set(ours) == set(theirs)
    assert ours["daemon_type"] == theirs["daemon_type"]
    assert ours["acl"] == theirs["acl"]
    assert ours["local"] == theirs["local"].replace(str(dd.port), str(d.port))
    for k in ("servers", "pools", "frontends", "rules", "response-rules"):
        assert len(ours[k]) == len(theirs[k]), k
        for a, b in zip(ours[k], theirs[k]):
            assert set(a) == set(b), (k, set(a) ^ set(b))
    # dnsdist lists servers by order; compare them by name
    tsrv = {x["name"].replace(r1.address, "R1"): x for x in theirs["servers"]}
    for a in ours["servers"]:
        b = tsrv[a["name"].replace(r1.address, "R1")]
        for k in ("order", "weight", "pools", "qpsLimit", "address", "state"):
            assert a[k] == b[k], k
    for a, b in zip(ours["pools"], theirs["pools"]):
        assert set(a) == set(b)
        for k in ("name", "serversCount", "cacheSize"):
            assert a[k] == b[k], k
    for a, b in zip(ours["rules"], theirs["rules"]):
        assert a["rule"] == b["rule"] and a["action"] == b["action"]
    st_ours = get_json(web_port(d), "/api/v1/servers/localhost/statistics")[1]
    st_theirs = get_json(dport, "/api/v1/servers/localhost/statistics")[1]
    assert {x["type"] for x in st_ours} == {x["type"] for x in st_theirs} == {"StatisticItem"}
    assert set(st_ours[0]) == set(st_theirs[0]) == {"name", "type", "value"}
    assert get_json(web_port(d), "/jsonstat?command=dynblocklist")[1] == \
        get_json(dport, "/jsonstat?command=dynblocklist")[1]


def test_api_statistics_pool_top(dnslb, make_responder):
    r1, r2 = make_responder(), make_responder()
    d = dnslb(API_CONF % {"a": r1.address, "b": r2.address} + web_conf())
    port = web_port(d)
    send_queries(d, ["top1.example."] * 3 + ["top2.example."])
    quiet(d)
    stats = d.stats()
    status, st = get_json(port, "/api/v1/servers/localhost/statistics")
    assert status == 200
    byname = {x["name"]: x for x in st}
    assert byname["queries"]["value"] == stats["queries"] == 4
    assert all(x["type"] == "StatisticItem" for x in st)

    status, pool = get_json(port, "/api/v1/servers/localhost/pool?name=abuse")
    assert status == 200
    assert [s["name"] for s in pool["servers"]] == [r2.address, "back.one"]
    assert pool["stats"]["name"] == "abuse" and pool["stats"]["cacheSize"] == 100
    status, pool = get_json(port, "/api/v1/servers/localhost/pool?name=")
    assert status == 200 and [s["name"] for s in pool["servers"]] == ["back.one"]
    assert get_json(port, "/api/v1/servers/localhost/pool?name=nope")[0] == 404
    assert get_json(port, "/api/v1/servers/localhost/pool")[0] == 400

    status, top = get_json(port, "/api/v1/servers/localhost/top?n=5")
    assert status == 200
    names = {x["name"]: x["count"] for x in top["names"]}
    assert names.get("top1.example.") == 3 and names.get("top2.example.") == 1
    assert top["names"][0]["name"] == "top1.example."
    assert top["clients"] and top["clients"][0]["count"] == 4
    assert top["names-total"] == 4
    assert get_json(port, "/api/v1/servers/localhost/top?n=0")[0] == 400
    assert get_json(port, "/api/v1/servers/localhost/top?n=abc")[0] == 400


def test_cache_delete(dnslb, responder):
    d = dnslb(lua_server(responder) + 'getPool(""):setCache(newPacketCache(10000))\n'
              + 'getPool("other")\n' + web_conf())
    port = web_port(d)
    names = ["del.example.", "sub.del.example.", "keep.example."]
    send_queries(d, names)
    assert udp_query(d.port, make_query("del.example.", "AAAA")) is not None
    send_queries(d, names)              # all from the cache now
    before = len(responder.client_queries())

    def delete(qs):
        return get_json(port, "/api/v1/cache?" + qs, method="DELETE")

    assert delete("pool=&name=del.example&type=AAAA") == (200, {"count": "1",
                                                                "status": "purged"})
    assert delete("pool=&name=DEL.example.&type=AAAA") == (200, {"count": "0",
                                                                 "status": "purged"})
    assert delete("pool=&name=del.example&suffix") == (200, {"count": "2",
                                                             "status": "purged"})
    send_queries(d, names)
    assert len(responder.client_queries()) == before + 2    # del and sub.del went again
    assert delete("pool=&name=keep.example&type=TYPE1")[1]["count"] == "1"
    assert delete("pool=&name=keep.example&type=%231")[1]["count"] == "0"
    # errors
    for qs, code in (("pool=&name=a..b", 400), ("pool=&name=x&type=BOGUS", 400),
                     ("pool=&type=A", 400), ("pool=nope&name=x", 404),
                     ("pool=other&name=x", 404), ("pool=&name=x&type=TYPE99999", 400)):
        status, err = delete(qs)
        assert status == code and "error" in err, (qs, status, err)
    status, _ = get_json(port, "/api/v1/cache?pool=&name=x")
    assert status == 405
    status, hdrs, _ = request(port, "/api/v1/cache?pool=&name=x", method="DELETE")
    assert status == 401                        # the API key is required
    assert d.alive()


def test_not_found_and_methods(dnslb):
    d = dnslb(web_conf())
    port = web_port(d)
    assert get_json(port, "/api/v1/servers/localhost/nothing")[0] == 404
    assert get_json(port, "/nothing", auth=basic(PASSWORD))[0] == 404
    status, hdrs, body = request(port, "/api/v1/servers/localhost", method="POST",
                                 headers={"X-API-Key": API_KEY})
    assert status == 405 and "GET" in hdrs["allow"] and "error" in json.loads(body)
    status, hdrs, body = request(port, "/metrics", method="PUT",
                                 headers={"Authorization": basic(PASSWORD)})
    assert status == 405
    status, hdrs, body = request(port, "/metrics", method="HEAD",
                                 headers={"Authorization": basic(PASSWORD)})
    assert status == 200 and body == b""


# ---- authentication ---------------------------------------------------------------------


def test_authentication_rules(dnslb):
    d = dnslb(web_conf())
    port = web_port(d)
    cases = [
        # path, headers, expected
        ("/", {}, 401),
        ("/", {"Authorization": basic(PASSWORD)}, 200),
        ("/", {"Authorization": basic(PASSWORD, user="")}, 200),
        ("/", {"Authorization": basic("wrong")}, 401),
        ("/", {"Authorization": basic(PASSWORD[:-1])}, 401),
        ("/", {"X-API-Key": API_KEY}, 401),
        ("/", {"Authorization": "Basic !!!"}, 401),
        ("/", {"Authorization": "Bearer " + PASSWORD}, 401),
        ("/metrics", {}, 401),
        ("/metrics", {"Authorization": basic(PASSWORD)}, 200),
        ("/metrics", {"X-API-Key": API_KEY}, 200),
        ("/metrics", {"X-API-Key": API_KEY + "x"}, 401),
        ("/jsonstat?command=stats", {"X-API-Key": API_KEY}, 200),
        ("/api/v1/servers/localhost/statistics", {"X-API-Key": API_KEY}, 200),
        ("/api/v1/servers/localhost/statistics", {}, 401),
        ("/api/v1/servers/localhost/statistics", {"X-API-Key": ""}, 401),
    ]
    for path, h, want in cases:
        status, hdrs, _ = request(port, path, headers=h)
        assert status == want, (path, h, status)
        if status == 401 and not path.startswith("/api/"):
            assert hdrs["www-authenticate"].lower().startswith("basic")


def test_authentication_switches(dnslb):
    d = dnslb(web_conf(extra_opts={"statsRequireAuthentication": False,
                                   "apiRequiresAuthentication": False,
                                   "dashboardRequiresAuthentication": False}))
    port = web_port(d)
    for path in ("/", "/metrics", "/jsonstat?command=stats",
                 "/api/v1/servers/localhost/statistics"):
        assert request(port, path)[0] == 200, path


def test_no_credentials_configured(dnslb):
    """No password and no key: nothing authenticates (dnsdist 1.7 let any Basic in)."""
    d = dnslb(web_conf(password=None, api_key=None))
    port = web_port(d)
    assert request(port, "/", headers={"Authorization": basic("x")})[0] == 401
    assert request(port, "/metrics", headers={"X-API-Key": "x"})[0] == 401


def test_hashed_credentials(dnslb, tmp_path):
    """dnsdist's hash works in dnslb, hashPassword() hashes, hashPlaintextCredentials."""
    conf = ('print("HASH=" .. hashPassword("pw one"))\n'
            'print("HASH2=" .. hashPassword("pw", 2048))\n'
            + web_conf(password=DNSDIST_HASH_OF_SECRET, api_key="plain-key",
                       extra_opts={"hashPlaintextCredentials": True}))
    d = dnslb(conf)
    port = web_port(d)
    assert request(port, "/", headers={"Authorization": basic("secret")})[0] == 200
    assert request(port, "/", headers={"Authorization": basic("Secret")})[0] == 401
    assert request(port, "/metrics", headers={"X-API-Key": "plain-key"})[0] == 200
    assert request(port, "/metrics", headers={"X-API-Key": "plain-kez"})[0] == 401
    out = "\n".join(d.lines)
    h1 = re.search(r"HASH=(\S+)", out).group(1)
    h2 = re.search(r"HASH2=(\S+)", out).group(1)
    rx = r"\$scrypt\$ln=%d,p=1,r=8\$[A-Za-z0-9+/]{22}==\$[A-Za-z0-9+/]{43}="
    assert re.fullmatch(rx % 10, h1), h1
    assert re.fullmatch(rx % 11, h2), h2
    assert "plain-text password" not in out     # the password was given hashed
    # the hash dnslb made is accepted as a credential, by dnslb and by dnsdist
    d2 = dnslb(web_conf(password=h1, api_key=None), name="second")
    p2 = web_port(d2)
    assert request(p2, "/", headers={"Authorization": basic("pw one")})[0] == 200
    assert request(p2, "/", headers={"Authorization": basic("pw two")})[0] == 401
    if os.access(DNSDIST, os.X_OK):
        try:
            dd, dport = start_dnsdist(dnslb, "", password=h1, api_key=None)
        except pytest.skip.Exception:
            return
        assert request(dport, "/jsonstat?command=stats",
                       headers={"Authorization": basic("pw one")})[0] == 200
        assert request(dport, "/jsonstat?command=stats",
                       headers={"Authorization": basic("pw two")})[0] == 401


def check_config(tmp_path, body):
    return check_config_text(tmp_path, body)


@pytest.mark.parametrize("body,message", [
    ('webserver("nonsense")', "Error parsing the bind address"),
    ('webserver("127.0.0.1:0", 5)', "must be a string"),
    ('setWebserverConfig({acl="192.0.2.0/33"})', "invalid netmask"),
    ('setWebserverConfig({acl="bad"})', "invalid netmask"),
    ('setWebserverConfig({password="$scrypt$ln=10,p=1,r=8$abc$def"})',
     "not a valid hashed credential"),
    ('setWebserverConfig({password="$scrypt$ln=20,p=1,r=8$qYOd+05lsD8vmyrUterr2w==$'
     '1nsHdxYpY73Yi1zEzfDsMw/GtsPxra8QabOP8791cJE="})', "not a valid hashed credential"),
    ('setWebserverConfig({customHeaders={["Bad Name"]="x"}})', "invalid custom header"),
    ('setWebserverConfig({customHeaders={["X-A"]="a\\r\\nInjected: 1"}})',
     "invalid custom header"),
    ('setWebserverConfig({customHeaders="x"})', "must be a table"),
    ('setWebserverConfig({maxConcurrentConnections=0})', "out of range"),
    ('setWebserverConfig({statsRequireAuthentication="maybe"})', "must be a boolean"),
    ('setWebserverConfig(5)', ""),
    ('hashPassword("x", 1000)', "power of 2"),
    ('hashPassword("x", 65536)', "power of 2"),
    ('hashPassword("x", 0)', "power of 2"),
    ('carbonServer("not an address")', "invalid carbon server address"),
    ('carbonServer("127.0.0.1", "has space")', "whitespace"),
    ('carbonServer("127.0.0.1", "h", 0)', "out of range"),
])
def test_config_errors(tmp_path, body, message):
    rc, out = check_config(tmp_path, body + "\n")
    assert rc != 0, out
    assert message in out, out
    assert re.search(r"check\.conf:1:", out), out


def test_check_config_and_show(tmp_path):
    port = free_port()
    rc, out = check_config(tmp_path, (
        'webserver("127.0.0.1:%d")\n'
        'setWebserverConfig({password="x", acl="127.0.0.0/8, !127.0.0.2, ::1", '
        'customHeaders={["X-A"]="b"}, maxConcurrentConnections="7", '
        'statsRequireAuthentication=false})\n'
        'carbonServer("127.0.0.1:%d", "me", 5, "ns", "inst")\n'
        'print(showWebserverConfig())\n' % (port, port)))
    assert rc == 0, out
    assert "ACL: 127.0.0.0/8, !127.0.0.2/32, ::1/128" in out
    assert " - X-A: b" in out
    assert "Statistics require authentication: no" in out
    assert "Password: set" in out and "API key: unset" in out
    assert "Maximum concurrent connections: 7" in out
    assert "Webserver launched" not in out     # --check-config starts nothing


# ---- ACL, headers, origin, limits ---------------------------------------------------------


def test_acl(dnslb):
    d = dnslb(web_conf(extra_opts={"acl": "127.0.0.0/8, !127.0.0.1"}))
    port = web_port(d)
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        request(port, "/", headers={"Authorization": basic(PASSWORD)}, timeout=3)
    status, _, _ = request(port, "/", headers={"Authorization": basic(PASSWORD)},
                           source="127.0.0.2")
    assert status == 200
    assert d.wait_line("refused a connection from 127.0.0.1", 0, 5) is not None


def test_acl_default_localhost_only(dnslb):
    d = dnslb(web_conf())
    port = web_port(d)
    assert request(port, "/metrics", headers={"X-API-Key": API_KEY})[0] == 200
    # 127.0.0.2 is not in the default ACL (127.0.0.1, ::1)
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        request(port, "/metrics", headers={"X-API-Key": API_KEY}, source="127.0.0.2",
                timeout=3)


def test_security_and_custom_headers(dnslb):
    d = dnslb(web_conf() + 'setWebserverConfig({customHeaders={["X-Frame-Options"]="", '
              '["X-Custom"]="custom value"}})\n')
    port = web_port(d)
    for path, h in (("/metrics", {"X-API-Key": API_KEY}), ("/nothing", {}),
                    ("/", {"Authorization": basic(PASSWORD)})):
        status, hdrs, _ = request(port, path, headers=h)
        assert "x-frame-options" not in hdrs, path
        assert hdrs["x-custom"] == "custom value"
        assert hdrs["x-content-type-options"] == "nosniff"
        assert hdrs["x-permitted-cross-domain-policies"] == "none"
        assert "default-src 'self'" in hdrs["content-security-policy"]
        assert "access-control-allow-origin" not in hdrs


def test_origin_rule(dnslb):
    d = dnslb(web_conf())
    port = web_port(d)
    h = {"X-API-Key": API_KEY}
    status, hdrs, body = request(port, "/api/v1/servers/localhost",
                                 headers=dict(h, Origin="http://evil.example"))
    assert status == 403 and "cross-origin" in json.loads(body)["error"]
    assert "access-control-allow-origin" not in hdrs
    assert request(port, "/metrics", headers=dict(h, Origin="null"))[0] == 403
    own = "http://127.0.0.1:%d" % port
    status, hdrs, _ = request(port, "/api/v1/servers/localhost", headers=dict(h, Origin=own))
    assert status == 200 and "access-control-allow-origin" not in hdrs
    # a preflight from elsewhere is refused too
    assert request(port, "/api/v1/cache", method="OPTIONS",
                   headers={"Origin": "http://evil.example",
                            "Access-Control-Request-Method": "DELETE"})[0] == 403


def test_request_limits(dnslb):
    d = dnslb(web_conf())
    port = web_port(d)
    h = {"X-API-Key": API_KEY}
    status, _, _ = request(port, "/metrics?" + "a" * 2000, headers=h)
    assert status in (414, 431)
    status, _, _ = request(port, "/metrics", headers=dict(h, **{"X-Big": "b" * 100000}))
    assert status in (413, 431)
    status, _, body = request(port, "/api/v1/servers/localhost", method="GET", headers=h,
                              body=b"x" * 100)
    assert status == 413
    assert request(port, "/metrics", headers=h)[0] == 200


def test_max_concurrent_connections(dnslb):
    d = dnslb(web_conf(extra_opts={"maxConcurrentConnections": 2}))
    port = web_port(d)
    h = {"X-API-Key": API_KEY}
    held = []
    try:
        for _ in range(2):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/metrics", headers=h)     # keep-alive: stays open
            r = c.getresponse()
            r.read()
            assert r.status == 200
            held.append(c)
        with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
            request(port, "/metrics", headers=h, timeout=3)
        assert d.wait_line("2 connections already open", 0, 5) is not None
    finally:
        for c in held:
            c.close()
    assert wait_until(lambda: _ok(port, h), 5.0, 0.2)


def _ok(port, h):
    try:
        return request(port, "/metrics", headers=h, timeout=2)[0] == 200
    except OSError:
        return False


def test_garbage_requests_do_not_hurt(dnslb, responder):
    d = dnslb(lua_server(responder) + web_conf())
    port = web_port(d)
    junk = [b"\x00\xff" * 100 + b"\r\n\r\n", b"GET\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 5000 + b"\r\n",
            b"DELETE /api/v1/cache?pool=%00&name=%ff%fe HTTP/1.1\r\nHost: x\r\n"
            b"X-API-Key: " + API_KEY.encode() + b"\r\n\r\n",
            b"GET /%%%% HTTP/1.1\r\nHost: x\r\nAuthorization: Basic " + b"A" * 3000 + b"\r\n\r\n"]
    for data in junk:
        s = socket.create_connection(("127.0.0.1", port), timeout=3)
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            while s.recv(65536):
                pass
        except OSError:
            pass
        finally:
            s.close()
    # a client that connects and says nothing does not stall anything
    idle = socket.create_connection(("127.0.0.1", port), timeout=3)
    try:
        assert udp_query(d.port, make_query("alive.example.")) is not None
        assert request(port, "/metrics", headers={"X-API-Key": API_KEY})[0] == 200
    finally:
        idle.close()
    assert d.alive()


# ---- lifecycle ---------------------------------------------------------------------------


def test_bind_failure_is_not_fatal(dnslb, responder):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        d = dnslb(lua_server(responder) + web_conf(addr="127.0.0.1:%d" % busy.getsockname()[1]))
        assert d.wait_line("Unable to bind to webserver socket", 0, 5) is not None
        assert udp_query(d.port, make_query("x.example.")) is not None
    finally:
        busy.close()


def test_reload_keeps_the_web_server(dnslb, responder):
    d = dnslb(lua_server(responder) + web_conf())
    port = web_port(d)
    start = len(d.lines)
    d.send_signal(signal.SIGHUP)
    assert d.wait_line(r"[Rr]eload", start, 10) is not None
    time.sleep(0.5)
    assert request(port, "/metrics", headers={"X-API-Key": API_KEY})[0] == 200
    assert not any("Webserver launched" in l or "Unable to bind" in l for l in d.lines[start:])


def test_two_listeners_ipv6(dnslb):
    try:
        s = socket.socket(socket.AF_INET6)
        s.bind(("::1", 0))
        s.close()
    except OSError:
        pytest.skip("no IPv6 loopback")
    d = dnslb('webserver("127.0.0.1:0")\nwebserver("[::1]:0")\n'
              'setWebserverConfig(%s)\n' % lua_value({"apiKey": API_KEY}))
    idx = d.wait_line(r"Webserver launched on \[::1\]:(\d+)", 0, 10)
    assert idx is not None, d.output()
    p6 = int(re.search(r"\]:(\d+)", d.lines[idx]).group(1))
    status, _, _ = request(p6, "/metrics", headers={"X-API-Key": API_KEY}, host="::1")
    assert status == 200
    assert request(web_port(d), "/metrics", headers={"X-API-Key": API_KEY})[0] == 200
