"""Ring buffers and the inspection tools (docs/rings.md): topQueries,
topClients, topResponses, topSlow, topTimeouts, topBandwidth, grepq,
showResponseLatency, getRespRing, getResponseRing, setRingBuffersSize,
setRingBuffersOptions.

dnslb's console is reached here through the config's maintenance()
(called every second on the main thread, in the console's phase): it waits
until the query ring holds the trigger name, then runs the commands and
prints their output between markers. Against dnsdist (DNSLB_E2E_IMPL)
the commands go through its console instead.
"""

import re
import subprocess
import time

import pytest

import dnslbtest
from dnslbtest import TcpClient, make_query, udp_query

TRIGGER = "zz-trigger.test."

INSPECT = r"""
inspect_cmds = {%s}
inspect_done = false
inspect_calls = 0
function inspect_seen(t)
  for _, v in ipairs(t) do
    if v[1] == "%s" then return true end
  end
  return false
end
-- the trigger's question and answer are both in the rings (or, with
-- rings off, the third call: about 3 s after startup)
function inspect_ready()
  inspect_calls = inspect_calls + 1
  if %s then return inspect_calls >= 3 end
  return inspect_seen(getTopQueries(-1)) and inspect_seen(getTopResponses(-1, 0))
end
function maintenance()
  if inspect_done or not inspect_ready() then return end
  inspect_done = true
  for _, c in ipairs(inspect_cmds) do
    print("=== " .. c)
    local ok, err = pcall(load(c))
    if not ok then print("error: " .. tostring(err)) end
  end
  print("=== end")
end
"""


def lua_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def inspect_conf(cmds, rings_off=False):
    return INSPECT % (", ".join(lua_str(c) for c in cmds), TRIGGER,
                      "true" if rings_off else "false")


def run_inspect(d, cmds, timeout=10.0, trigger=True):
    """{command: [output lines]} for @cmds, after the trigger query."""
    out = {}
    if trigger:
        assert udp_query(d.port, TRIGGER, timeout=2.0) is not None
    if d.impl == "dnsdist":
        time.sleep(0.2)
        for c in cmds:
            r = subprocess.run([dnslbtest.DNSDIST, "-C", d.conf_path, "-c", "-e", c],
                               capture_output=True, text=True, timeout=10, cwd=d.workdir)
            out[c] = r.stdout.rstrip("\n").split("\n") if r.stdout.strip() else []
        return out
    end = d.wait_line(lambda l: l == "=== end", 0, timeout)
    assert end is not None, "maintenance() printed nothing:\n" + d.output()
    start = d.wait_line(lambda l: l == "=== " + cmds[0], 0, 0)
    cur = None
    with d._cond:
        lines = d.lines[start:end]
    for l in lines:
        if l.startswith("=== ") and l[4:] in cmds:
            cur = l[4:]
            out[cur] = []
        elif cur is not None and not re.match(r"^\S+ \d\d:\d\d:\d\d ", l):
            out[cur].append(l)
    return out


def top_line(k, key, count, pct):
    return "%4d  %-40s %4d %4.1f%%" % (k, key, count, pct)


def traffic(d):
    """The fixed traffic: 16 queries from 127.0.0.1 (the trigger makes 17)."""
    for _ in range(5):
        assert udp_query(d.port, "www.example.com.") is not None
    for _ in range(3):
        assert udp_query(d.port, "mail.example.com.") is not None
    assert udp_query(d.port, "a.b.c.example.org.", "AAAA") is not None
    assert udp_query(d.port, "nx.example.com.") is not None
    assert udp_query(d.port, "nx.example.com.") is not None
    assert udp_query(d.port, "servfail.example.net.") is not None
    assert udp_query(d.port, "delay-700.example.com.") is not None
    assert udp_query(d.port, "self.example.") is not None
    assert udp_query(d.port, "drop.example.com.", timeout=0.3) is None
    with TcpClient(d.port) as t:
        t.send_msg(make_query("tcp.example.com.", qid=4242).to_wire())
        assert t.recv_msg() is not None


BASE = """
setUDPTimeout(1)
newServer({address="127.0.0.1:%d", name="b1"})
pc = newPacketCache(10000)
getPool(""):setCache(pc)
addAction(QNameRule("self.example."), RCodeAction(DNSRCode.REFUSED))
"""

GREPQ_FMT = "%-7s %-47s %-12s %-12s %-5s %-25s %-5s %-6s %-2s %-2s %-2s %s"
GREPQ_HEAD = GREPQ_FMT % ("Time", "Client", "Protocol", "Server", "ID", "Name", "Type", "Lat.",
                          "TC", "RD", "AA", "Rcode")
GREPQ_RX = re.compile(r"^(-?\d+\.\d) +(\S+) +(DoUDP|DoTCP) +(\S*) +(\d+) +(\S+) +(\S+) +"
                      r"(T\.O|\d+\.\d)? +(TC)? *(RD)? *(AA)? *(\S.*)$")


def grepq_rows(lines):
    """Parse grepq() output; every row must have dnsdist's exact layout."""
    assert lines[0] == GREPQ_HEAD
    rows = []
    for l in lines[1:]:
        m = GREPQ_RX.match(l)
        assert m, "not a grepq row: %r" % l
        f = [x or "" for x in m.groups()]
        assert l == GREPQ_FMT % tuple(f), "layout differs: %r" % l
        rows.append(dict(zip(("time", "client", "proto", "server", "id", "name", "type", "lat",
                              "tc", "rd", "aa", "rcode"), f)))
    return rows


def top_rows(lines):
    """Parse top*() output into [(key, count)] and check the numbering,
    the layout, the percentages and the closing Rest line."""
    rows = []
    for i, l in enumerate(lines):
        m = re.match(r"^ *(\d+)  (\S+) +(\d+) +(\d+\.\d)%$", l)
        assert m, "not a top line: %r" % l
        rows.append((int(m.group(1)), m.group(2), int(m.group(3)), m.group(4)))
    total = sum(r[2] for r in rows)
    for i, (k, key, count, pct) in enumerate(rows):
        assert k == i + 1
        want = 100.0 * count / total if total else 100.0
        assert lines[i] == top_line(k, key, count, want)
    assert rows[-1][1] == "Rest"
    counts = [r[2] for r in rows[:-1]]
    assert counts == sorted(counts, reverse=True)
    return [(r[1], r[2]) for r in rows]


QUERY_CMDS = ["topQueries()", "topQueries(2)", "topQueries(3, 2)", "topQueries(0)", "topClients()",
              'grepq("127.0.0.1", 2)']


def test_query_ring_tools(dnslb, responder):
    """The query-ring tools print what dnsdist 1.7.3 prints for the same
    traffic (this test also passes with DNSLB_E2E_IMPL=dnsdist)."""
    args = ("--workers", "2") if dnslbtest.IMPL == "dnslb" else ()
    d = dnslb(BASE % responder.port + inspect_conf(QUERY_CMDS), args=args)
    traffic(d)
    out = run_inspect(d, QUERY_CMDS)

    rows = top_rows(out["topQueries()"])
    ones = {"a.b.c.example.org.", "servfail.example.net.", "delay-700.example.com.",
            "self.example.", "drop.example.com.", "tcp.example.com.", TRIGGER}
    assert rows[:3] == [("www.example.com.", 5), ("mail.example.com.", 3), ("nx.example.com.", 2)]
    assert set(rows[3:10]) == {(n, 1) for n in ones}
    assert rows[10] == ("Rest", 0)
    assert out["topQueries()"][0] == top_line(1, "www.example.com.", 5, 100.0 * 5 / 17)

    assert top_rows(out["topQueries(2)"]) == [("www.example.com.", 5), ("mail.example.com.", 3),
                                              ("Rest", 9)]
    rows = top_rows(out["topQueries(3, 2)"])
    assert rows[0] == ("example.com.", 13)
    assert set(rows[1:3]) <= {("example.org.", 1), ("example.net.", 1), ("self.example.", 1),
                              ("zz-trigger.test.", 1)}
    assert rows[3] == ("Rest", 2)
    assert out["topQueries(0)"] == [top_line(1, "Rest", 17, 100.0)]
    assert out["topClients()"] == [top_line(1, "127.0.0.1", 17, 100.0),
                                   top_line(2, "Rest", 0, 0.0)]

    # the last 2 questions from 127.0.0.1 (and the last 2 answers)
    rows = grepq_rows(out['grepq("127.0.0.1", 2)'])
    qs = [r for r in rows if r["rcode"] == "Question"]
    assert [r["name"] for r in qs] == ["tcp.example.com.", TRIGGER]
    assert qs[0]["proto"] == "DoTCP" and qs[0]["id"] == "4242" and qs[0]["server"] == ""
    assert qs[1]["proto"] == "DoUDP" and qs[1]["rd"] == "RD" and qs[1]["lat"] == ""
    assert all(float(r["time"]) <= 0 for r in rows)


RESP_CMDS = ["topResponses()", "topResponses(10, 3)", "topSlow()", "topSlow(10, 800)",
             "topTimeouts()", "topBandwidth()", "showResponseLatency()", 'grepq("100ms")',
             'grepq({"127.0.0.1/8", "Drop.Example.COM"})', 'grepq("example.com", 3)',
             'grepq("self.example")', 'grepq("foo..bar")', "setRingBuffersSize(10)",
             "print(#getRespRing(), #getRespRing(3), getRespRing(3)[1].rcode)",
             "local r = getResponseRing() print(#r, r[1].name, r[1].qtype, r[1].rcode)",
             "local t = getTopQueries(1) print(t[1][1], t[1][2], t[2][1], t[2][2])"]


@pytest.mark.dnslb_only("cache hits and self-answered answers are in the response ring (dnsdist 1.8)")
def test_response_ring_tools(dnslb, responder):
    d = dnslb(BASE % responder.port + inspect_conf(RESP_CMDS), args=("--workers", "2"))
    traffic(d)
    assert d.stat_at_least("downstream-timeouts", 1) >= 1
    out = run_inspect(d, RESP_CMDS)

    # www: 1 backend answer and 4 cache hits; nx is NXDOMAIN; the timeout is no answer
    rows = top_rows(out["topResponses()"])
    assert rows[:2] == [("www.example.com.", 5), ("mail.example.com.", 3)]
    assert set(rows[2:6]) == {("a.b.c.example.org.", 1), ("tcp.example.com.", 1),
                              ("delay-700.example.com.", 1), (TRIGGER, 1)}
    assert rows[6] == ("Rest", 0)
    assert top_rows(out["topResponses(10, 3)"]) == [("nx.example.com.", 2), ("Rest", 0)]
    assert set(top_rows(out["topSlow()"])[:2]) == {("delay-700.example.com.", 1),
                                                   ("drop.example.com.", 1)}
    assert top_rows(out["topSlow(10, 800)"]) == [("drop.example.com.", 1), ("Rest", 0)]
    assert top_rows(out["topTimeouts()"]) == [("drop.example.com.", 1), ("Rest", 0)]
    rows = top_rows(out["topBandwidth()"])
    assert rows[0][0] == "127.0.0.1" and rows[0][1] > 17 * 33 and rows[1] == ("Rest", 0)

    lat = out["showResponseLatency()"]
    assert re.match(r"^Average response latency: \d+\.\d\d msec$", lat[0])
    assert lat[1] == "   msec\t"
    assert len(lat) == 17
    bins = [100 * 2 ** i / 1000.0 for i in range(15)]
    for b, l in zip(bins, lat[2:]):
        assert re.match(r"^%7.2f\t[*:.]*$" % b, l), l
    assert lat[2].endswith("*" * 70)        # the cache hits (0 us) are the biggest bin
    assert re.match(r"^ 819\.20\t[*:.]+$", lat[15])   # delay-700

    rows = grepq_rows(out['grepq("100ms")'])
    assert [r["name"] for r in rows] == ["delay-700.example.com.", "drop.example.com."]
    # the delayed answer's latency: at least the responder's delay (a busy
    # machine adds to it: no upper bound but the 1 s timeout)
    assert 700.0 <= float(rows[0]["lat"]) < 1000.0, rows[0]
    to = rows[1]
    assert to["server"] == "127.0.0.1:%d" % responder.port
    assert to["lat"] == "T.O" and to["rcode"] == "No Error. 0 answers" and to["rd"] == ""

    rows = grepq_rows(out['grepq({"127.0.0.1/8", "Drop.Example.COM"})'])
    assert [(r["name"], r["rcode"]) for r in rows] == [("drop.example.com.", "Question"),
                                                       ("drop.example.com.", "No Error. 0 answers")]
    assert rows[0]["id"] == rows[1]["id"]

    rows = grepq_rows(out['grepq("example.com", 3)'])
    assert sum(r["rcode"] == "Question" for r in rows) == 3
    assert sum(r["rcode"] != "Question" for r in rows) == 3

    rows = grepq_rows(out['grepq("self.example")'])
    assert [(r["server"], r["rcode"]) for r in rows] == [("", "Question"), ("Self", "Query Refused")]
    assert out['grepq("foo..bar")'] == ["Could not parse 'foo..bar' as domain name or netmask"]
    assert out["setRingBuffersSize(10)"] == ["setRingBuffersSize() cannot be used at runtime!"]

    # 16 answers and a timeout; rcode given as a string, as dnsdist does
    assert out["print(#getRespRing(), #getRespRing(3), getRespRing(3)[1].rcode)"] == ["17\t2\t3"]
    n, name, qtype, rcode = out[RESP_CMDS[-2]][0].split("\t")
    assert n == "17" and qtype in ("1", "28") and rcode in ("0", "3", "2", "5")
    assert out[RESP_CMDS[-1]] == ["www.example.com.\t5\tRest\t12"]


@pytest.mark.dnslb_only("one worker's ring: dnsdist shards by hash")
def test_small_ring_keeps_the_newest(dnslb, responder):
    cmds = ["topQueries(-1)", "print(#getResponseRing())"]
    d = dnslb("setRingBuffersSize(4, 1)\n" + BASE % responder.port + inspect_conf(cmds),
              args=("--workers", "1"))
    for i in range(10):
        assert udp_query(d.port, "n%d.example." % i) is not None
    out = run_inspect(d, cmds)
    rows = top_rows(out["topQueries(-1)"])
    assert set(rows[:4]) == {("n7.example.", 1), ("n8.example.", 1), ("n9.example.", 1),
                             (TRIGGER, 1)}
    assert rows[4] == ("Rest", 0)
    assert out["print(#getResponseRing())"] == ["4"]


@pytest.mark.dnslb_only("dnsdist 1.7.3 does not record cache hits in the response ring")
def test_small_ring_mixes_hits_and_backend_answers(dnslb, responder):
    """Cache hits are kept in their queries' entries, backend answers in the
    response ring: the answers shown are still the newest ring-size ones of
    both kinds, oldest first."""
    show = ('for _, r in ipairs(getResponseRing()) do '
            'print(r.name .. " " .. (r.usec > 0 and "backend" or "cache")) end')
    cmds = [show, "print(#getResponseRing())"]
    d = dnslb("setRingBuffersSize(4, 1)\n" + BASE % responder.port + inspect_conf(cmds),
              args=("--workers", "1"))
    for name in ["h.example.", "h.example.", "h.example.", "h.example.", "n1.example.",
                 "h.example.", "h.example."]:
        assert udp_query(d.port, name) is not None
    out = run_inspect(d, cmds)
    assert out[show] == ["n1.example. backend", "h.example. cache", "h.example. cache",
                         TRIGGER + " backend"], d.output()
    assert out["print(#getResponseRing())"] == ["4"]


@pytest.mark.dnslb_only("inspection through maintenance()")
def test_rings_off(dnslb, responder):
    cmds = ["topQueries()", "topClients()", "grepq(\"127.0.0.1\")", "showResponseLatency()",
            "print(#getResponseRing())"]
    d = dnslb("setRingBuffersSize(0)\n" + BASE % responder.port + inspect_conf(cmds, True))
    for _ in range(3):
        assert udp_query(d.port, "www.example.com.") is not None
    out = run_inspect(d, cmds)
    assert out["topQueries()"] == [top_line(1, "Rest", 0, 100.0)]
    assert out["topClients()"] == [top_line(1, "Rest", 0, 100.0)]
    assert out['grepq("127.0.0.1")'] == [GREPQ_HEAD]
    assert out["showResponseLatency()"] == ["No traffic yet."]
    assert out["print(#getResponseRing())"] == ["0"]


@pytest.mark.dnslb_only("setRingBuffersOptions is dnsdist 1.8's; inspection through maintenance()")
def test_recording_options(dnslb, responder):
    """recordQueries=false: the query ring is empty, answers (a cache hit,
    a self-answered query) are still recorded; recordResponses=false: the
    other way round. Neither can change at runtime."""
    cmds = ["topQueries()", "topResponses()", 'grepq("self.example")',
            "print(#getResponseRing())", "setRingBuffersOptions({recordQueries=true})"]
    d = dnslb("setRingBuffersOptions({recordQueries=false, lockRetries=3})\n" +
              BASE % responder.port + inspect_conf(cmds, True))
    for _ in range(3):
        assert udp_query(d.port, "www.example.com.") is not None
    assert udp_query(d.port, "self.example.") is not None
    out = run_inspect(d, cmds, trigger=False)
    assert out["topQueries()"] == [top_line(1, "Rest", 0, 100.0)]
    assert top_rows(out["topResponses()"]) == [("www.example.com.", 3), ("Rest", 0)]
    rows = grepq_rows(out['grepq("self.example")'])
    assert [(r["server"], r["rcode"]) for r in rows] == [("Self", "Query Refused")]
    assert out["print(#getResponseRing())"] == ["4"]
    assert out["setRingBuffersOptions({recordQueries=true})"] == [
        "setRingBuffersOptions cannot be used at runtime!"]
    assert d.stop() == 0

    d = dnslb("setRingBuffersOptions({recordResponses=false})\n" + BASE % responder.port +
              inspect_conf(cmds, True))
    for _ in range(3):
        assert udp_query(d.port, "www.example.com.") is not None
    assert udp_query(d.port, "self.example.") is not None
    out = run_inspect(d, cmds, trigger=False)
    assert top_rows(out["topQueries()"]) == [("www.example.com.", 3), ("self.example.", 1),
                                             ("Rest", 0)]
    assert top_rows(out["topResponses()"]) == [("Rest", 0)]
    rows = grepq_rows(out['grepq("self.example")'])
    assert [(r["server"], r["rcode"]) for r in rows] == [("", "Question")]
    assert out["print(#getResponseRing())"] == ["0"]


@pytest.mark.dnslb_only("dnslb's --check-config messages")
@pytest.mark.parametrize("line,ok,msg", [
    ("setRingBuffersSize(1000000, 100)", True, ""),
    ("setRingBuffersSize(0)", True, ""),
    ("setRingBuffersLockRetries(5)", True, ""),
    ("setRingBuffersOptions({lockRetries=5, recordQueries=false, recordResponses=true})", True, ""),
    # unknown keys: ignored, logged by the daemon only (--check-config as dnsdist)
    ("setRingBuffersOptions({recordQuery=false})", True, ""),
    ("setRingBuffersOptions({recordQueries=1})", False,
     "setRingBuffersOptions: 'recordQueries' must be a boolean"),
    ("setRingBuffersOptions({lockRetries=-1})", False, "out of range"),
    ("setRingBuffersOptions(5)", False, "setRingBuffersOptions: argument #1 must be a table"),
    ("setRingBuffersSize(-1)", False, "setRingBuffersSize: -1 is out of range"),
    ("setRingBuffersSize(1e12)", False, "out of range"),
    ("setRingBuffersSize('many')", False, "setRingBuffersSize: argument #1 must be an integer"),
    ("setRingBuffersSize(10, 0)", False, "setRingBuffersSize: 0 is out of range"),
    ("topQueries('x')", False, "topQueries: argument #1 must be an integer"),
    ("grepq({})", True, ""),
    ("grepq(true)", False, "grepq: argument #1 must be a string or a table of strings"),
    ("topQueries() topSlow(5, 100, 2) grepq('example.com', 5) showResponseLatency()", True, ""),
])
def test_check_config(tmp_path, line, ok, msg):
    conf = tmp_path / "c.conf"
    conf.write_text('newServer("127.0.0.1:1")\n' + line + "\n")
    r = subprocess.run([dnslbtest.dnslb_bin(), "--check-config", "-C", str(conf)],
                       capture_output=True, text=True, timeout=30)
    assert (r.returncode == 0) == ok, r.stdout + r.stderr
    assert msg in r.stdout + r.stderr


SNR_CMD = ('statNodeRespRing(function(n, self, children) '
           'print(n.fullname .. " " .. children.queries .. " " .. self.queries) end)')


@pytest.mark.skipif(dnslbtest.IMPL != "dnslb", reason="dnslb's output, checked by name")
def test_stat_node_resp_ring(dnslb, responder):
    """statNodeRespRing visits the response ring's name tree children first,
    each node's subtree counts with it (the tree grows past its first
    allocation: one node per label)."""
    d = dnslb(BASE % responder.port + inspect_conf([SNR_CMD]))
    traffic(d)
    for i in range(40):
        assert udp_query(d.port, "n%d.many.example.com." % i) is not None
    out = run_inspect(d, [SNR_CMD])
    seen = {}
    for l in out[SNR_CMD]:
        name, sub, own = l.rsplit(" ", 2)
        seen[name] = (int(sub), int(own))
    assert seen["www.example.com."] == (5, 5)
    assert seen["many.example.com."][0] == 40
    assert seen["n7.many.example.com."] == (1, 1)
    assert seen["com."][0] >= 50
    names = [l.rsplit(" ", 2)[0] for l in out[SNR_CMD]]
    assert names.index("n7.many.example.com.") < names.index("many.example.com.")
