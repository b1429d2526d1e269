"""Shared dynamic blocks and the fleet view (docs/fleet.md) with two or three
dnslb nodes on one real redis-server: a block raised on node A applies on
node B, shows its origin, expires everywhere; a node started later loads
the blocks in force; Redis stopped and restarted mid-test; clears; malformed
values from Redis; showFleet(), getFleet() and /api/v1/fleet; and node A ->
node B propagation time (printed; run with -s to see it)."""

import http.client
import json
import re
import socket
import statistics
import subprocess
import time

import dns.message
import dns.rcode
import pytest

from dnslbtest import console, console_head, dnslb_bin, lua_server, wait_until
from redisfix import Redis

pytestmark = pytest.mark.dnslb_only("dnslb's Redis fleet state")

NS = "fb"
API_KEY = "fleet-api-key"


@pytest.fixture
def redis(tmp_path):
    r = Redis(str(tmp_path)).start()
    yield r
    r.stop()


def node_conf(redis, responder, node, web_port=None):
    s = console_head()
    s += 'setRedis({address="%s", namespace="%s", node="%s"})\n' % (redis.address, NS, node)
    s += lua_server(responder, name="b")
    if web_port is not None:
        s += 'webserver("127.0.0.1:%d")\nsetWebserverConfig({apiKey="%s"})\n' % (web_port,
                                                                                 API_KEY)
    return s


def start_node(dnslb, redis, responder, node, web_port=None):
    return dnslb(node_conf(redis, responder, node, web_port), args=("--workers", "1"),
                 name=node)


def query(port, src, name="www.fleet.test.", timeout=0.5):
    """One UDP query from @src: the answer (Message), or None (dropped)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind((src, 0))
        s.settimeout(timeout)
        q = dns.message.make_query(name, "A")
        s.sendto(q.to_wire(), ("127.0.0.1", port))
        try:
            return dns.message.from_wire(s.recv(65535))
        except (socket.timeout, ConnectionRefusedError):
            return None
    finally:
        s.close()


def answered(d, src, name="www.fleet.test."):
    return query(d.port, src, name) is not None


def fleet_nodes(d):
    """getFleet() through the console: {node: {field: value}}."""
    out = console(d, 'for _, n in ipairs(getFleet()) do print(n.node, n.queries, n.qps, '
                     'n.backendsUp, n.backends, n.blocks, n.version, n.age, n.uptime) end')
    nodes = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 9:
            nodes[f[0]] = {"queries": float(f[1]), "qps": float(f[2]),
                           "backendsUp": float(f[3]), "backends": float(f[4]),
                           "blocks": float(f[5]), "version": f[6], "age": float(f[7]),
                           "uptime": float(f[8])}
    return nodes


def fleet_ready(a, names):
    """Every node writes its hash once a second: all listed means all connected."""
    return wait_until(lambda: set(names) <= set(fleet_nodes(a)), 10, 0.2)


def metric(d, name):
    toks = console(d, "dumpStats()").split()
    vals = dict(zip(toks[0::2], toks[1::2]))
    return int(float(vals[name]))


def show_rows(d):
    """showDynBlocks(): {what: reason}; the columns are dnsdist's."""
    lines = console(d, "showDynBlocks()").rstrip("\n").split("\n")
    assert lines[0].split() == ["What", "Seconds", "Blocks", "Warning", "Action", "Reason"]
    rows = {}
    for l in lines[1:]:
        m = re.match(r"(\S+)\s+(-?\d+)\s+(\d+) (true|false)\s+(.{20}) (.*)$", l)
        assert m, l
        rows[m.group(1)] = m.group(6)
    return rows


def block_keys(redis):
    keys, cur = [], "0"
    while True:
        cur, batch = redis.command("SCAN", cur, "MATCH", NS + ":block:*", "COUNT", "100")
        keys += batch
        if cur == "0":
            return sorted(keys)


def test_block_propagates_and_expires(dnslb, responder, redis):
    a = start_node(dnslb, redis, responder, "node-a")
    b = start_node(dnslb, redis, responder, "node-b")
    assert fleet_ready(a, ["node-a", "node-b"])
    assert answered(b, "127.0.0.21")

    console(a, 'addDynamicBlock("127.0.0.21", "flood", DNSAction.Drop, 4)')
    # within the window (a second; generous here for slow CI)
    assert wait_until(lambda: not answered(b, "127.0.0.21"), 5, 0.05)
    assert not answered(a, "127.0.0.21")
    assert answered(b, "127.0.0.22")                # only that client
    rows_b, rows_a = show_rows(b), show_rows(a)
    assert rows_b["127.0.0.21/32"] == "flood (from node-a)"
    assert rows_a["127.0.0.21/32"] == "flood"       # a node's own block: no origin
    assert block_keys(redis) == [NS + ":block:node-a:n:127.0.0.21/32"]
    val = redis.command("GET", NS + ":block:node-a:n:127.0.0.21/32")
    assert val.startswith("1|B|n|127.0.0.21/32|") and val.endswith("|0|0|node-a|flood")
    assert 0 < redis.command("PTTL", NS + ":block:node-a:n:127.0.0.21/32") <= 4000
    assert metric(a, "fleet-blocks-published") >= 1
    assert metric(b, "fleet-blocks-received") == 1
    assert metric(a, "fleet-blocks-received") == 0  # its own announcement is ignored

    # a suffix block, with an action
    console(a, 'addDynBlockSMT({"bad.fleet.test."}, "smt", 30, DNSAction.Refused)')
    r = wait_until(lambda: (lambda m: m is not None and m.rcode() == dns.rcode.REFUSED and m)(
        query(b.port, "127.0.0.23", "www.bad.fleet.test.")), 5, 0.05)
    assert r, "the suffix block did not reach node B"
    assert show_rows(b)["bad.fleet.test."] == "smt (from node-a)"

    # expiry: on both, and the key is gone
    assert wait_until(lambda: answered(a, "127.0.0.21") and answered(b, "127.0.0.21"), 10, 0.2)
    assert "127.0.0.21/32" not in show_rows(b)
    assert wait_until(lambda: NS + ":block:node-a:n:127.0.0.21/32" not in block_keys(redis), 3)


def test_late_node_loads_blocks(dnslb, responder, redis):
    a = start_node(dnslb, redis, responder, "node-a")
    assert fleet_ready(a, ["node-a"])
    console(a, 'addDynamicBlock("127.0.0.31", "before c", DNSAction.Drop, 60)')
    console(a, 'addDynBlockSMT({"late.fleet.test."}, "late smt", 60, DNSAction.Refused)')
    assert wait_until(lambda: len(block_keys(redis)) == 2, 3)
    c = start_node(dnslb, redis, responder, "node-c")
    assert wait_until(lambda: not answered(c, "127.0.0.31"), 5, 0.1)
    rows = show_rows(c)
    assert rows["127.0.0.31/32"] == "before c (from node-a)"
    assert rows["late.fleet.test."] == "late smt (from node-a)"
    assert metric(c, "fleet-blocks-received") == 2


def test_redis_down_and_back(dnslb, responder, redis):
    a = start_node(dnslb, redis, responder, "node-a")
    b = start_node(dnslb, redis, responder, "node-b")
    assert fleet_ready(a, ["node-a", "node-b"])
    console(a, 'addDynamicBlock("127.0.0.41", "before", DNSAction.Drop, 120)')
    console(b, 'addDynamicBlock("127.0.0.44", "b local", DNSAction.Drop, 120)')
    assert wait_until(lambda: not answered(b, "127.0.0.41") and not answered(a, "127.0.0.44"),
                      5, 0.05)

    redis.stop()
    assert wait_until(lambda: "down" in console(a, "showRedis()") and
                      "down" in console(b, "showRedis()"), 5)
    # both answer from local state, and their blocks still apply
    for d in (a, b):
        assert answered(d, "127.0.0.42")
        assert not answered(d, "127.0.0.41")
        assert not answered(d, "127.0.0.44")
    # a block raised while Redis is away applies locally only
    console(a, 'addDynamicBlock("127.0.0.43", "while down", DNSAction.Drop, 120)')
    assert not answered(a, "127.0.0.43")
    assert answered(b, "127.0.0.43")
    assert metric(a, "redis-errors") >= 1 and metric(b, "redis-errors") >= 1
    assert wait_until(lambda: "Redis unreachable?" in console(a, "showFleet()"), 5, 0.2)

    redis.start()       # empty: no persistence; the nodes write their blocks again
    assert wait_until(lambda: not answered(b, "127.0.0.43"), 15, 0.2), \
        "a block raised while Redis was down did not reach node B after the resync"
    assert show_rows(b)["127.0.0.43/32"] == "while down (from node-a)"
    assert wait_until(lambda: block_keys(redis) == sorted([
        NS + ":block:node-a:n:127.0.0.41/32", NS + ":block:node-a:n:127.0.0.43/32",
        NS + ":block:node-b:n:127.0.0.44/32"]), 5)
    assert fleet_ready(a, ["node-a", "node-b"])


def count_blocks(d):
    return int(console(d, "local n = 0 for _ in pairs(getDynamicBlocks()) do n = n + 1 end "
                          "print(n)").strip())


def test_bulk_blocks_and_empty_restart(dnslb, responder, redis):
    """More blocks at once than the write queue holds (16,384): paced writes,
    then the rest in parts; all of them again after Redis restarts empty."""
    n = 17000
    a = start_node(dnslb, redis, responder, "node-a")
    b = start_node(dnslb, redis, responder, "node-b")
    assert fleet_ready(a, ["node-a", "node-b"])
    console(a, 'local t = {} for i = 0, %d do t[string.format("127.9.%%d.%%d", i // 256, '
               'i %% 256)] = 1 end addDynBlocks(t, "bulk", 300)' % (n - 1))
    assert count_blocks(a) == n
    assert wait_until(lambda: count_blocks(b) == n, 30, 0.5), count_blocks(b)
    assert wait_until(lambda: len(block_keys(redis)) == n, 10, 0.5)
    assert not answered(b, "127.9.66.103")
    redis.stop()
    redis.start()
    assert wait_until(lambda: len(block_keys(redis)) == n, 30, 0.5)
    assert count_blocks(b) == n
    assert metric(a, "fleet-blocks-published") >= 2 * n


def test_clears(dnslb, responder, redis):
    a = start_node(dnslb, redis, responder, "node-a")
    b = start_node(dnslb, redis, responder, "node-b")
    assert fleet_ready(a, ["node-a", "node-b"])
    console(a, 'addDynamicBlock("127.0.0.51", "a1", DNSAction.Drop, 60)')
    console(b, 'addDynamicBlock("127.0.0.52", "b1", DNSAction.Drop, 60)')
    assert wait_until(lambda: set(show_rows(a)) == set(show_rows(b)) ==
                      {"127.0.0.51/32", "127.0.0.52/32"}, 5, 0.1)

    # clearDynBlocks() on A: A's blocks go, everywhere; B's stay
    console(a, "clearDynBlocks()")
    assert wait_until(lambda: set(show_rows(b)) == {"127.0.0.52/32"}, 5, 0.1)
    assert set(show_rows(a)) == {"127.0.0.52/32"}
    assert wait_until(lambda: block_keys(redis) == [NS + ":block:node-b:n:127.0.0.52/32"], 3)
    assert answered(b, "127.0.0.51")

    # clearFleetDynBlocks() on A: every block, every node, every key
    console(a, 'addDynamicBlock("127.0.0.53", "a2", DNSAction.Drop, 60)')
    assert wait_until(lambda: "127.0.0.53/32" in show_rows(b), 5, 0.1)
    assert console(a, "print(clearFleetDynBlocks())").strip() == "true"
    assert wait_until(lambda: show_rows(a) == {} and show_rows(b) == {}, 5, 0.1), \
        (show_rows(a), show_rows(b), block_keys(redis))
    assert wait_until(lambda: block_keys(redis) == [], 3)
    assert answered(b, "127.0.0.52") and answered(a, "127.0.0.53")


def test_malformed_values_ignored(dnslb, responder, redis):
    b = start_node(dnslb, redis, responder, "node-b")
    assert fleet_ready(b, ["node-b"])
    for junk in ("garbage", "1|B|n|127.0.0.61/32|notanumber|0|0|x|r", "1|B|s|zz|1|0|0|x|r",
                 "\x00\xff|B|", "1|C|", "1|B|n|127.0.0.61/32|99999999999999|3|0|x|r"):
        redis.command("PUBLISH", NS + ":blocks", junk)
    redis.command("SET", NS + ":block:x:n:bad", "1|B|n|300.0.0.1/32|1|0|0|x|r", "EX", "60")
    console(b, "clearDynBlocks()")      # restarts the resync, which reads the bad key
    assert wait_until(lambda: metric(b, "fleet-blocks-malformed") >= 7, 5, 0.2)
    assert answered(b, "127.0.0.61")
    assert show_rows(b) == {}
    # a well-formed block from an unknown node applies
    until = int((time.time() + 30) * 1000)
    redis.command("PUBLISH", NS + ":blocks", "1|B|n|127.0.0.62/32|%d|0|0|ext|by hand" % until)
    assert wait_until(lambda: not answered(b, "127.0.0.62"), 5, 0.05)
    assert show_rows(b)["127.0.0.62/32"] == "by hand (from ext)"


def http_get(port, path, key=API_KEY):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path, headers={"X-API-Key": key} if key else {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_fleet_view(dnslb, responder, redis):
    from dnslbtest import free_port
    web = free_port()
    a = start_node(dnslb, redis, responder, "node-a", web_port=web)
    b = start_node(dnslb, redis, responder, "node-b")
    assert fleet_ready(a, ["node-a", "node-b"])
    for i in range(30):
        assert answered(a, "127.0.0.71", "q%d.fleet.test." % i)
    for i in range(10):
        assert answered(b, "127.0.0.71", "q%d.fleet.test." % i)
    console(b, 'addDynamicBlock("127.0.0.72", "view", DNSAction.Drop, 60)')

    def figures_in():
        n = fleet_nodes(a)
        return n.get("node-a", {}).get("queries", 0) >= 30 and \
            n.get("node-b", {}).get("queries", 0) >= 10 and \
            n["node-a"]["blocks"] == 1 and n["node-b"]["blocks"] == 1
    assert wait_until(figures_in, 5, 0.3), fleet_nodes(a)
    n = fleet_nodes(a)
    for name in ("node-a", "node-b"):
        assert n[name]["backendsUp"] == 1 and n[name]["backends"] == 1
        assert n[name]["version"] == "0.1.0"
        assert 0 <= n[name]["age"] < 5
        assert 0 < n[name]["uptime"] < 600
        assert n[name]["qps"] >= 0

    out = console(a, "showFleet()").splitlines()
    assert out[0].split() == ["Node", "Uptime", "QPS", "Queries", "Hit", "rate", "Backends",
                              "up", "Blocks", "Age"]
    assert out[1].split()[0] == "node-a" and out[2].split()[0] == "node-b"
    tot = out[3].split()
    assert tot[0] == "Total" and int(tot[2]) >= 40 and tot[4] == "2/2" and tot[5] == "2"

    status, body = http_get(web, "/api/v1/fleet")
    assert status == 200, body
    j = json.loads(body)
    assert j["enabled"] is True and j["namespace"] == NS
    assert [x["node"] for x in j["nodes"]] == ["node-a", "node-b"]
    assert j["total"]["nodes"] == 2
    assert j["total"]["queries"] == sum(x["queries"] for x in j["nodes"])
    assert j["total"]["backendsUp"] == 2 and j["total"]["blocks"] == 2
    assert http_get(web, "/api/v1/fleet", key=None)[0] == 401
    assert http_get(web, "/api/v1/fleet", key="wrong")[0] == 401

    # a node that stops leaves the view once its hash expires (5 s)
    b.stop()
    b.stopped_by_test = True
    assert wait_until(lambda: set(fleet_nodes(a)) == {"node-a"}, 10, 0.5)


def test_propagation_time(dnslb, responder, redis):
    """Node A -> node B: the time between A and B starting to refuse a
    client, over 20 blocks (Refused, so that each probe is answered at once)."""
    a = start_node(dnslb, redis, responder, "node-a")
    b = start_node(dnslb, redis, responder, "node-b")
    assert fleet_ready(a, ["node-a", "node-b"])
    delays = []
    for i in range(20):
        src = "127.0.2.%d" % (i + 1)
        socks = {}
        for name, d in (("a", a), ("b", b)):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((src, 0))
            s.settimeout(0.5)
            socks[name] = (s, d.port)
        first = {}
        p = subprocess.Popen([dnslb_bin(), "-C", a.conf_path, "-c", "-e",
                              'addDynamicBlock("%s", "p%d", DNSAction.Refused, 60)' % (src, i)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             cwd=a.workdir)
        end = time.monotonic() + 10
        while len(first) < 2 and time.monotonic() < end:
            for name, (s, port) in socks.items():
                if name in first:
                    continue
                s.sendto(dns.message.make_query("p.fleet.test.", "A").to_wire(),
                         ("127.0.0.1", port))
                try:
                    m = dns.message.from_wire(s.recv(65535))
                except socket.timeout:
                    continue
                if m.rcode() == dns.rcode.REFUSED:
                    first[name] = time.monotonic()
        p.wait(30)
        for s, _ in socks.values():
            s.close()
        assert len(first) == 2, "block %d did not apply on both nodes" % i
        delays.append(max(0.0, first["b"] - first["a"]))
    med = statistics.median(delays) * 1000
    print("\nnode A -> node B block propagation over %d blocks: median %.2f ms, "
          "min %.2f ms, max %.2f ms" % (len(delays), med, min(delays) * 1000,
                                        max(delays) * 1000))
    assert med < 1000
