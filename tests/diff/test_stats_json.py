"""Counters and their web views: dumpStats(), /jsonstat?command=stats,
/api/v1/servers/localhost/statistics, the global part of /metrics and the
/api/v1/servers/localhost document, compared with dnsdist 1.7.3 after the
same traffic. Only volatile values (time, memory, host counters, latencies,
ports, UUIDs) are normalized."""

import json
import os
import re
import socket
import struct
import time
import urllib.request

from diffharness import (DNSLB_ONLY_STATS, SRC, VOLATILE_STATS, TcpClient, build_query,
                         free_port, known, strip_id)  # noqa: F401
from dnslbtest import Daemon

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


def series_set(text):
    """{(series name, label names)} of a /metrics text."""
    out = set()
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? ', line)
        labels = tuple(sorted(re.findall(r'(\w+)="', m.group(2) or "")))
        out.add((m.group(1), labels))
    return out


def series_values(text, name):
    """The values of series @name, in the order of its lines."""
    return [line.split()[-1] for line in text.splitlines()
            if line.startswith(name + "{") or line.startswith(name + " ")]


def documented_series():
    """docs/web.md's table of dnslb's own /metrics series: {"always": set,
    "with `setRedis`": set} of (series name, label names)."""
    with open(os.path.join(SRC, "docs", "web.md")) as f:
        text = f.read()
    table = text[text.index("### dnslb's own series"):].split("\n\n")[2]
    out = {}
    for row in table.splitlines()[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        names = re.findall(r"`([a-z0-9_]+)`", cells[0])
        for n in names:
            name = n if n.startswith("dnsdist_") else "dnsdist" + n
            out.setdefault(cells[2], set()).add((name, ()))
    return out


# dnslb's own /metrics series without Redis: the global lines of its own
# counters (docs/dnsdist-differences.md, "Counters dnslb adds")
DNSLB_ONLY_SERIES = {("dnsdist_" + n.replace("-", "_"), ()) for n in DNSLB_ONLY_STATS}

# dnsdist's per-server and per-frontend TCP connection series
SERVER_TCP = ("tcpdiedsendingquery", "tcpdiedreadingresponse", "tcpgaveup", "tcpreadtimeouts",
              "tcpwritetimeouts", "tcpconnecttimeouts", "tcpcurrentconnections",
              "tcpmaxconcurrentconnections", "tcpnewconnections", "tcpreusedconnections",
              "tlsresumptions")
FRONTEND_TCP = ("tcpdiedreadingquery", "tcpdiedsendingresponse", "tcpgaveup",
                "tcpclientimeouts", "tcpdownstreamtimeouts", "tcpcurrentconnections",
                "tcpmaxconcurrentconnections")


def on_both(p, fn):
    """fn(side) on dnsdist, then on dnslb; asserts the same results (IDs aside)."""
    a, b = fn(p.theirs), fn(p.ours)
    norm = lambda v: [strip_id(x) if isinstance(x, bytes) else x for x in v]  # noqa: E731
    assert norm(a) == norm(b), (a, b)
    return a


def pipelined(side, names):
    """Queries one after the other on one TCP connection; the answers."""
    out = []
    with TcpClient(side.port) as c:
        for i, name in enumerate(names):
            c.send_msg(build_query(name, qid=i + 1))
            out.append(c.recv_msg(2))
    time.sleep(0.1)
    return out


def cut_short(side, nbytes):
    """A connection the client closes after @nbytes of a framed query (0:
    before anything)."""
    s = socket.create_connection(("127.0.0.1", side.port))
    w = build_query("www.example.test.", qid=1)
    if nbytes:
        s.sendall((struct.pack("!H", len(w)) + w)[:nbytes])
    time.sleep(0.1)
    s.close()
    time.sleep(0.1)
    return []


def tcp_traffic(p):
    """TCP traffic whose connection figures are deterministic: three queries
    on one connection, a connection closed mid-query, one closed before
    anything was sent."""
    on_both(p, lambda s: pipelined(s, ("www1.example.test.", "www2.example.test.",
                                       "servfail.example.test.")))
    on_both(p, lambda s: cut_short(s, 7))
    on_both(p, lambda s: cut_short(s, 0))


def test_metrics_series_set(pair):
    """Every series of dnsdist's /metrics, with the same label names, is in
    dnslb's; dnslb's others are its own documented ones."""
    p = pair(BODY, backends=BACKENDS, web=True)
    traffic(p)
    tcp_traffic(p)
    a, b = (series_set(s.web("/metrics")[1].decode()) for s in (p.theirs, p.ours))
    assert a - b == set()
    assert known("Counters dnslb adds")
    assert b - a == DNSLB_ONLY_SERIES == documented_series()["always"]


def head_lines(text):
    """{HELP/TYPE line} of the per-server and per-frontend families."""
    return {line for line in text.splitlines()
            if re.match(r"# (HELP|TYPE) dnsdist_(server|frontend)_", line)}


def test_metrics_server_frontend_heads(pair):
    """The HELP and TYPE lines of the per-server and per-frontend families
    are dnsdist's text."""
    p = pair(BODY, backends=BACKENDS, web=True)
    tcp_traffic(p)
    texts = [s.web("/metrics")[1].decode() for s in (p.theirs, p.ours)]
    a, b = (head_lines(t) for t in texts)
    assert known("/metrics writes each family under its own TYPE line")
    typo = "# TYPE dnsdist_server_tlsersumptions counter"
    sampled = {x[0] for x in series_set(texts[0])}
    unsampled = {h for h in a if h.split()[2] not in sampled and h != typo}
    assert {h.split()[2] for h in unsampled} <= {
        "dnsdist_frontend_" + n for n in (
            "tlsqueries", "tlsnewsessions", "tlsresumptions", "tlsunknownticketkeys",
            "tlsinactiveticketkeys", "tlshandshakefailures", "http_connects",
            "doh_http_method_queries", "doh_http_version_queries", "doh_bad_requests",
            "doh_responses", "doh_version_status_responses")}
    assert a - b == unsampled | {typo}
    assert b - a == {"# TYPE dnsdist_server_tlsresumptions counter"}


def test_metrics_series_set_richer(pair):
    """The same with dynamic blocks, several pools with caches, named
    servers, rules of more chains, and a second listener (on a port of the
    system's choosing: the two daemons share the text)."""
    p = pair(BODY + '''
addLocal("127.0.0.1:0")
getPool("abuse"):setCache(newPacketCache(50))
local dbr = dynBlockRulesGroup()
dbr:setQueryRate(1000, 1, "too many", 10)
function maintenance() dbr:apply() end
addCacheHitResponseAction(AllRule(), DelayResponseAction(0))
addSelfAnsweredResponseAction(AllRule(), DelayResponseAction(0))
''', backends=BACKENDS, web=True)
    traffic(p)
    tcp_traffic(p)
    a, b = (series_set(s.web("/metrics")[1].decode()) for s in (p.theirs, p.ours))
    assert a - b == set()
    assert b - a == documented_series()["always"]


def dnslb_series(workdir, name, body):
    """The /metrics series of a dnslb alone on @body."""
    port = free_port()
    d = Daemon(workdir, 'webserver("127.0.0.1:%d")\n'
               'setWebserverConfig({apiKey="key", acl="127.0.0.0/8"})\n' % port + body,
               impl="dnslb", name=name)
    d.start()
    try:
        req = urllib.request.Request("http://127.0.0.1:%d/metrics" % port,
                                     headers={"X-API-Key": "key"})
        with urllib.request.urlopen(req, timeout=5) as r:
            return series_set(r.read().decode())
    finally:
        d.kill()


def test_metrics_series_with_redis(workdir):
    """With setRedis (dnslb only; the Redis need not answer to list them),
    the documented Redis series are added, and nothing else."""
    body = 'newServer({address="127.0.0.1:9"})\n'
    without = dnslb_series(workdir, "plain", body)
    with_redis = dnslb_series(workdir, "redis", body + 'setRedis({address="127.0.0.1:%d"})\n'
                              % free_port())
    assert without <= with_redis
    assert with_redis - without == documented_series()["with `setRedis`"]


def tcp_stats_tables(text):
    """showTCPStats()'s frontend and backend tables, split in columns,
    addresses and the average duration (time) left out."""
    out = []
    for line in text[text.index("Frontends:"):].splitlines():
        cols = re.sub(r"127\.0\.0\.1:\d+", "ADDR", line).split()
        if cols and cols[0].isdigit() and len(cols) == 20:
            del cols[10]        # a frontend's "Avg duration"
        elif cols and cols[0].isdigit():
            del cols[-1]        # a backend's
        out.append(cols)
    return out


def test_tcp_connection_figures(pair):
    """The per-server and per-frontend TCP figures after the same TCP
    traffic, in /metrics, the API and showTCPStats()."""
    p = pair('newServer({address="@B0@"})\n', backends=({},), web=True)
    tcp_traffic(p)
    a, b = (s.web("/metrics")[1].decode() for s in (p.theirs, p.ours))
    for name in SERVER_TCP:
        assert series_values(a, "dnsdist_server_" + name) == \
            series_values(b, "dnsdist_server_" + name), name
    for name in FRONTEND_TCP + ("tcpavgqueriesperconnection",):
        assert series_values(a, "dnsdist_frontend_" + name) == \
            series_values(b, "dnsdist_frontend_" + name), name
    # one backend connection, used three times; two client connections died reading
    assert series_values(b, "dnsdist_server_tcpnewconnections") == ["1"]
    assert series_values(b, "dnsdist_server_tcpreusedconnections") == ["2"]
    assert series_values(b, "dnsdist_frontend_tcpdiedreadingquery") == ["2"]
    # running averages over 3, 0 and 0 queries
    assert series_values(b, "dnsdist_frontend_tcpavgqueriesperconnection") == ["0.029403"]
    ja, jb = (json.loads(s.web("/api/v1/servers/localhost")[1]) for s in (p.theirs, p.ours))
    for x, y in zip(ja["servers"] + ja["frontends"], jb["servers"] + jb["frontends"]):
        for k in x:
            if k.startswith("tcp") and k != "tcpAvgConnectionDuration":
                assert x[k] == y[k], k
    # the tables but the workers line (dnslb has no TCP thread pool)
    ta, tb = (tcp_stats_tables(s.console("showTCPStats()")) for s in (p.theirs, p.ours))
    assert ta == tb
    assert known("showTCPStats() shows dnslb's workers")
    workers = p.ours.console("showTCPStats()").splitlines()[1].split()
    assert workers[0] == workers[1] and int(workers[0]) >= 1 and workers[2:] == ["0", "0"]


def test_tcp_shared_backend_connections(pair):
    """Two clients in a row, one query each: dnsdist opens a backend
    connection for each, dnslb's worker reuses the one it has."""
    p = pair('newServer({address="@B0@"})\n', backends=({},), web=True)
    on_both(p, lambda s: pipelined(s, ("www1.example.test.",)))
    on_both(p, lambda s: pipelined(s, ("www2.example.test.",)))
    a, b = (s.web("/metrics")[1].decode() for s in (p.theirs, p.ours))
    new = [int(series_values(t, "dnsdist_server_tcpnewconnections")[0]) for t in (a, b)]
    reused = [int(series_values(t, "dnsdist_server_tcpreusedconnections")[0]) for t in (a, b)]
    assert (new[0], reused[0]) == (2, 0)
    assert known("Backend TCP connections are shared between a worker's clients")
    # one each, or two new when the two clients landed on different workers
    assert (new[1], reused[1]) in ((1, 1), (2, 0))


def test_tcp_failure_figures(pair):
    """A backend that closes without answering (retries, then gives up), one
    that never answers (read timeout), clients that go idle (timeouts)."""
    p = pair('setTCPRecvTimeout(1)\nnewServer({address="@B0@", tcpRecvTimeout=1})\n',
             backends=({},), web=True)
    for name in ("close.example.test.", "drop.example.test."):
        # the client's answer is not compared here: dnsdist 1.7.3 closes
        # the connection, dnslb answers SERVFAIL
        p.answers(build_query(name, qid=7), "tcp", timeout=3)
        time.sleep(0.3)     # each server sees the close before the next connection
    idle = {}
    for s in (p.theirs, p.ours):
        c = TcpClient(s.port)
        c.send_msg(build_query("www.example.test.", qid=1))
        c.recv_msg(2)
        d = socket.create_connection(("127.0.0.1", s.port))
        w = build_query("www.example.test.", qid=1)
        d.sendall(struct.pack("!H", len(w)) + w[:5])
        e = socket.create_connection(("127.0.0.1", s.port))     # sends nothing
        idle[s.daemon.impl] = (c.sock, d, e)
    time.sleep(1.6)
    for socks in idle.values():
        for x in socks:
            x.close()
    time.sleep(0.2)
    a, b = (s.web("/metrics")[1].decode() for s in (p.theirs, p.ours))
    for name in set(SERVER_TCP) - {"tcpcurrentconnections", "tcpmaxconcurrentconnections"}:
        assert series_values(a, "dnsdist_server_" + name) == \
            series_values(b, "dnsdist_server_" + name), name
    # (dnsdist's tcpmaxconcurrentconnections varies from run to run when a
    # silent connection is among the open ones: 2 or 3 here; dnslb's is 3)
    for name in set(FRONTEND_TCP) - {"tcpdiedreadingquery", "tcpclientimeouts",
                                     "tcpmaxconcurrentconnections"}:
        assert series_values(a, "dnsdist_frontend_" + name) == \
            series_values(b, "dnsdist_frontend_" + name), name
    assert series_values(b, "dnsdist_frontend_tcpmaxconcurrentconnections") == ["3"]
    # the silent client: dnsdist waits for it to close, dnslb times it out
    assert series_values(a, "dnsdist_frontend_tcpdiedreadingquery") == ["1"]
    assert series_values(a, "dnsdist_frontend_tcpclientimeouts") == ["2"]
    assert known("A silent TCP client is closed by the receive timeout")
    assert series_values(b, "dnsdist_frontend_tcpdiedreadingquery") == ["0"]
    assert series_values(b, "dnsdist_frontend_tcpclientimeouts") == ["3"]
    # the failed connections (five, then one) still count in dnsdist's
    assert known("tcpCurrentConnections counts open connections only")
    assert series_values(b, "dnsdist_server_tcpcurrentconnections") == ["1"]
    # five attempts, then gave up; a read timeout; two idle clients
    assert series_values(b, "dnsdist_server_tcpnewconnections") == ["7"]
    assert series_values(b, "dnsdist_server_tcpdiedreadingresponse") == ["5"]
    assert series_values(b, "dnsdist_server_tcpgaveup") == ["1"]
    assert series_values(b, "dnsdist_server_tcpreadtimeouts") == ["1"]
    assert series_values(b, "dnsdist_frontend_tcpgaveup") == ["1"]
    assert series_values(b, "dnsdist_frontend_tcpdownstreamtimeouts") == ["1"]


class FullListener:
    """A TCP port on 127.0.0.1 whose accept queue is full: a connect to it
    gets no answer (its SYN is dropped), so it runs into the timeout."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(0)
        self.port = self.sock.getsockname()[1]
        self.fillers = []
        for _ in range(3):
            f = socket.socket()
            f.setblocking(False)
            f.connect_ex(("127.0.0.1", self.port))
            self.fillers.append(f)
        time.sleep(0.2)

    def close(self):
        for f in self.fillers:
            f.close()
        self.sock.close()


def test_tcp_connect_failures(pair):
    """A backend whose TCP port refuses (each of the `retries` attempts dies
    sending, then it gives up) and one whose connect times out (no other
    attempt, as dnsdist 1.7.3)."""
    full = FullListener()
    try:
        p = pair('''
newServer({address="127.0.0.1:%d", pool="refused", tcpConnectTimeout=1, retries=3})
newServer({address="127.0.0.1:%d", pool="full", tcpConnectTimeout=1})
getServer(0):setUp()
getServer(1):setUp()
addAction("refused.example.test.", PoolAction("refused"))
addAction("full.example.test.", PoolAction("full"))
''' % (free_port(), full.port), backends=(), web=True)
        for name in ("refused.example.test.", "full.example.test."):
            # the answers are not compared here (dnsdist closes the
            # connection, dnslb answers SERVFAIL)
            p.answers(build_query(name, qid=7), "tcp", timeout=2.5)
            # one connection after the other (both servers are asked at once):
            # let each see the client's close before the next one connects
            time.sleep(0.3)
        a, b = (s.web("/metrics")[1].decode() for s in (p.theirs, p.ours))
    finally:
        full.close()
    for name in set(SERVER_TCP) - {"tcpcurrentconnections"}:
        assert series_values(a, "dnsdist_server_" + name) == \
            series_values(b, "dnsdist_server_" + name), name
    for name in set(FRONTEND_TCP) - {"tcpcurrentconnections", "tcpmaxconcurrentconnections"}:
        assert series_values(a, "dnsdist_frontend_" + name) == \
            series_values(b, "dnsdist_frontend_" + name), name
    assert series_values(b, "dnsdist_server_tcpnewconnections") == ["3", "1"]
    assert series_values(b, "dnsdist_server_tcpdiedsendingquery") == ["3", "0"]
    assert series_values(b, "dnsdist_server_tcpgaveup") == ["1", "0"]
    assert series_values(b, "dnsdist_server_tcpconnecttimeouts") == ["0", "1"]
    assert series_values(b, "dnsdist_frontend_tcpgaveup") == ["1"]
    assert series_values(b, "dnsdist_frontend_tcpdownstreamtimeouts") == ["1"]
    assert known("tcpCurrentConnections counts open connections only")
    assert series_values(b, "dnsdist_server_tcpcurrentconnections") == ["0", "0"]
    assert series_values(b, "dnsdist_frontend_tcpcurrentconnections") == ["0"]
    assert series_values(b, "dnsdist_frontend_tcpmaxconcurrentconnections") == ["1"]


def norm_localhost(doc):
    text = json.dumps(doc, sort_keys=True)
    text = re.sub(r'127\.0\.0\.1:\d+', "127.0.0.1:PORT", text)
    text = re.sub(r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', "UUID", text)
    doc = json.loads(text)
    for s in doc["servers"]:
        s["latency"] = "V"
        s["qps"] = "V"
        s["dropRate"] = "V"
    for s in doc["servers"] + doc["frontends"]:
        s["tcpAvgConnectionDuration"] = "V"    # a time
    return doc


def test_localhost_document(pair):
    p = pair(BODY, backends=BACKENDS, web=True)
    udp_only = ("www.example.test.", "www.example.test.", "nx.example.test.",
                "refused.example.test.", "abuse.example.test.", "tc.example.test.")
    for name in udp_only:
        p.query(build_query(name, qid=9), "udp")
    # and the TCP connection figures: three queries on one connection (no
    # cache hit among them), one connection closed mid-query
    on_both(p, lambda s: pipelined(s, ("www1.example.test.", "www2.example.test.",
                                       "www3.example.test.")))
    on_both(p, lambda s: cut_short(s, 7))
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


def tail_heads(text):
    """The HELP and TYPE lines from dnsdist_rule_hits's on, in order."""
    lines = text.splitlines()
    start = lines.index("# HELP dnsdist_rule_hits Number of hits of that rule")
    return [line for line in lines[start:] if line.startswith("#")]


def test_metrics_tail_heads(pair):
    """After the rules: the dynamic blocks' top offenders (HELP and TYPE
    lines even without a sample, as before the first minute), then
    dnsdist_info, in dnsdist's order and text."""
    p = pair(BODY, backends=BACKENDS, web=True)
    traffic(p)
    a, b = (tail_heads(s.web("/metrics")[1].decode()) for s in (p.theirs, p.ours))
    assert a == b
    assert [line.split()[2] for line in a[::2]] == [
        "dnsdist_rule_hits", "dnsdist_dynblocks_nmg_top_offenders_hits_per_second",
        "dnsdist_dynblocks_smt_top_offenders_hits_per_second", "dnsdist_info"]
