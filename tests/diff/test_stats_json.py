"""Counters and their web views: dumpStats(), /jsonstat?command=stats,
/api/v1/servers/localhost/statistics, the global part of /metrics and the
/api/v1/servers/localhost document, compared with dnsdist 1.7.3 after the
same traffic. Only volatile values (time, memory, host counters, latencies,
ports, UUIDs) are normalized."""

import json
import re

from diffharness import (DNSLB_ONLY_STATS, VOLATILE_STATS, build_query, known,
                         strip_id)  # noqa: F401

BODY = '''
setServerPolicy(firstAvailable)
newServer({address="@B0@"})
newServer({address="@B1@", pool={"", "abuse"}, name="second", weight=3})
newServer({address="@B2@", pool="abuse", order=2})
newServer({address="192.0.2.1:53", pool="unreachable", name="down-server"})
addAction("refused.example.test.", LuaAction(function(dq) return DNSAction.Refused end),
          {name="refuse-them"})
addAction("dropme.example.test.", DropAction())
addAction("tc.example.test.", TCAction())
addAction("abuse.example.test.", PoolAction("abuse"))
addResponseAction("nx.example.test.", DelayResponseAction(1))
pc = newPacketCache(100)
getPool(""):setCache(pc)
'''
BACKENDS = ({}, {}, {})


def traffic(p):
    for proto in ("udp", "tcp"):
        for name in ("www.example.test.", "www.example.test.", "nx.example.test.",
                     "refused.example.test.", "servfail.example.test.",
                     "abuse.example.test.", "tc.example.test."):
            p.query(build_query(name, qid=9), proto)
    p.query(build_query("dropme.example.test.", qid=9), "udp")


def test_dumpstats_after_traffic(pair):
    p = pair(BODY, backends=BACKENDS)
    traffic(p)
    p.stats()


def test_jsonstat_keys_and_values(pair):
    p = pair(BODY, backends=BACKENDS, web=True)
    traffic(p)
    a, b = (json.loads(s.web("/jsonstat?command=stats")[1]) for s in (p.theirs, p.ours))
    assert set(a) - set(b) == set()
    # dnslb's own counters, and only those (docs/dnsdist-differences.md)
    assert known("Counters dnslb adds")
    assert set(b) - set(a) == DNSLB_ONLY_STATS
    for k in a:
        if k not in VOLATILE_STATS:
            assert a[k] == b[k], (k, a[k], b[k])


def test_statistics_api(pair):
    p = pair(BODY, backends=BACKENDS, web=True)
    traffic(p)
    a, b = (json.loads(s.web("/api/v1/servers/localhost/statistics")[1])
            for s in (p.theirs, p.ours))
    assert known("Counters dnslb adds")
    assert {x["name"] for x in b} - {x["name"] for x in a} == DNSLB_ONLY_STATS
    b = [x for x in b if x["name"] not in DNSLB_ONLY_STATS]

    def norm(v):
        return [dict(x, value="V") if x["name"] in VOLATILE_STATS else x for x in v]
    assert norm(a) == norm(b)


def global_metrics(text):
    """The global series of /metrics (up to the latency histogram), values
    of the volatile ones replaced, dnslb's own series left out."""
    own = {"dnsdist_" + n.replace("-", "_") for n in DNSLB_ONLY_STATS}
    vol = {"dnsdist_" + n.replace("-", "_") for n in VOLATILE_STATS}
    out = []
    for line in text.splitlines():
        if line.startswith("# HELP dnsdist_server_"):
            break
        words = line.split()
        series = words[2] if line.startswith("#") else words[0].split("{")[0]
        if series in own:
            continue
        if not line.startswith("#") and (series in vol or series.startswith("dnsdist_latency")):
            line = words[0] + " V"
        out.append(line)
    return out


def test_metrics_global_series(pair):
    p = pair(BODY, backends=BACKENDS, web=True)
    traffic(p)
    a, b = (global_metrics(s.web("/metrics")[1].decode()) for s in (p.theirs, p.ours))
    assert a == b


def norm_localhost(doc):
    text = json.dumps(doc, sort_keys=True)
    text = re.sub(r'127\.0\.0\.1:\d+', "127.0.0.1:PORT", text)
    text = re.sub(r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', "UUID", text)
    doc = json.loads(text)
    for s in doc["servers"]:
        s["latency"] = "V"
        s["qps"] = "V"
        s["dropRate"] = "V"
    return doc


def test_localhost_document(pair):
    p = pair(BODY, backends=BACKENDS, web=True)
    udp_only = ("www.example.test.", "www.example.test.", "nx.example.test.",
                "refused.example.test.", "abuse.example.test.", "tc.example.test.")
    for name in udp_only:
        p.query(build_query(name, qid=9), "udp")
    a, b = (json.loads(s.web("/api/v1/servers/localhost")[1]) for s in (p.theirs, p.ours))
    a, b = norm_localhost(a), norm_localhost(b)
    assert a["version"] == "1.7.3"
    assert known("The version is dnslb's")
    assert re.fullmatch(r"\d+\.\d+\.\d+", b["version"])
    a["version"] = b["version"] = "V"
    # one cache hit (the second www) over UDP
    assert known("A frontend's responses include its cache hits")
    assert b["frontends"][0]["responses"] == a["frontends"][0]["responses"] + 1
    a["frontends"][0]["responses"] = b["frontends"][0]["responses"]
    assert a == b
    # a server in the default pool alone has no pools; pool={"", "abuse"} both
    pools = {s["name"]: s["pools"] for s in b["servers"]}
    assert pools["second"] == ["", "abuse"]
    assert pools["down-server"] == ["unreachable"]
    assert [s["order"] for s in b["servers"]] == [1, 1, 1, 2]


def test_rcode_action_counters(pair):
    p = pair('''
newServer({address="@B0@"})
addAction("refused.example.test.", RCodeAction(DNSRCode.REFUSED))
addAction("nx.example.test.", RCodeAction(DNSRCode.NXDOMAIN))
addAction("servfail.example.test.", RCodeAction(DNSRCode.SERVFAIL))
''', backends=({},))
    for proto in ("udp", "tcp"):
        for name in ("refused.example.test.", "nx.example.test.", "servfail.example.test."):
            p.query(build_query(name, qid=9), proto)
    a, b = (p.parse_dumpstats(s.console("dumpStats()")) for s in (p.theirs, p.ours))
    # a header change in dnsdist: self-answered only, not rule-refused & co
    for k in ("rule-refused", "rule-nxdomain", "rule-servfail"):
        assert a[k] == b[k] == "0", k
    assert a["self-answered"] == b["self-answered"] == "6"
    p.stats()
