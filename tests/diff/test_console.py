"""The console: what dnsdist 1.7.3 and dnslb print for the same commands on
the same configuration, byte for byte. Each side's backends listen on
their own ports, so those ports (and the listener's) are written back as
@B0@, @B1@, @PORT@ before comparing; random server UUIDs as UUID."""

import re
import subprocess
import time

from diffharness import DNSDIST, build_query, dnslb_bin, known  # noqa: F401

UUID_RX = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def norm(side, text):
    for i, r in enumerate(side.responders):
        text = text.replace(r.address, "@B%d@" % i)
    text = text.replace("127.0.0.1:%d" % side.port, "@PORT@")
    return re.sub(UUID_RX, "UUID", text)


def lat_column(text, shift=0):
    """showServers() with its Qps and Lat columns written as Q and L,
    widths kept: per-second rates and moving averages of each side's own
    round trips, volatile."""
    out = []
    for line in text.split("\n"):
        cells = list(re.finditer(r"\S+", line))
        if cells and cells[0].group().isdigit():
            cols = {4 + shift: "Q", 11 + shift: "L"}
        elif cells and cells[0].group() == "All":
            cols = {1: "Q"}
        else:
            cols = {}
        for col, mark in sorted(cols.items(), reverse=True):
            m = cells[col]
            line = line[:m.start()] + mark.rjust(m.end() - m.start()) + line[m.end():]
        out.append(line)
    return "\n".join(out)


def same(p, cmd, fix=None):
    a = norm(p.theirs, p.theirs.console(cmd))
    b = norm(p.ours, p.ours.console(cmd))
    if fix:
        a, b = fix(a), fix(b)
    assert a == b, "console output of %s differs\n--- dnsdist\n%s--- dnslb\n%s" % (cmd, a, b)
    return a


SERVERS = '''
setServerPolicy(firstAvailable)
newServer({address="@B0@"})
newServer({address="@B1@", pool={"", "abuse"}, name="second", weight=3})
newServer({address="@B2@", pool="abuse", order=2, qps=10})
newServer({address="[::1]:9", pool="v6", name="a-very-long-server-name-indeed", order=0})
newServer({address="[2001:db8:aaaa:bbbb:cccc:dddd:eeee:ffff]:5353", name="v6long", order=3,
           pool={"v6", "abuse"}})
'''


def test_show_servers_and_pools(pair):
    p = pair(SERVERS, backends=({}, {}, {}))
    same(p, "showServers()")
    for name in ("www.example.test.", "nx.example.test."):
        p.query(build_query(name, qid=3), "udp")
    out = same(p, "showServers()", lat_column)
    # dnsdist's order: by order, then as added
    assert [l.split()[1] for l in out.splitlines()[1:-1]] == [
        "a-very-long-server-n", "@B0@", "second", "@B2@", "v6long"]
    same(p, "showServers({showUUIDs=true})", lambda t: lat_column(t, 1))
    same(p, "showServers({showUUIDs=false})", lat_column)
    same(p, "showPools()")
    same(p, "getServer(0):getOutstanding()")
    same(p, "return getServer(1):getOutstanding()")
    same(p, "return getServer(1).name")
    same(p, "return getServer(4):getName()")
    same(p, "return #getServers()")
    same(p, "local t = {} for _, s in ipairs(getServers()) do t[#t + 1] = s:getName() end "
            "return table.concat(t, ' ')")
    same(p, "return getPoolServers('abuse')[1]:getName()")


TLS_SERVERS = '''
newServer({address="@B0@", tls="openssl", subjectName="dns.test", validateCertificates=false})
newServer({address="127.0.0.1", tls="openssl", name="dot", subjectName="dns.test",
           validateCertificates=false, pool="tls"})
'''


def test_show_servers_dns_over_tls(pair):
    """DNS over TLS servers are shown as any other (a responder that does
    not speak TLS is down on both sides); without a port, 53 as in dnsdist
    1.7.3, tls or not."""
    p = pair(TLS_SERVERS, backends=({},))
    out = same(p, "showServers()")
    assert "127.0.0.1:53" in out and "@B0@" in out
    same(p, "showPools()")
    same(p, "return getServer(1):getName()")


def test_show_rules(pair):
    p = pair('''
newServer({address="@B0@"})
addAction("refused.example.test.", RCodeAction(DNSRCode.REFUSED), {name="refuse-them"})
addAction(AndRule({QTypeRule(DNSQType.TXT), makeRule("txt.example.test.")}), DropAction())
addAction(RegexRule("^evil"), TCAction())
addAction(AllRule(), PoolAction("abuse"))
addResponseAction("nx.example.test.", DelayResponseAction(1))
addResponseAction(RCodeRule(DNSRCode.SERVFAIL), DropResponseAction(), {name="no-servfail"})
addCacheHitResponseAction(AllRule(), DelayResponseAction(2))
addSelfAnsweredResponseAction(AllRule(), DelayResponseAction(3))
''', backends=({},))
    p.query(build_query("refused.example.test.", qid=3), "udp")
    same(p, "showRules()")
    same(p, "showRules({showUUIDs=true})")
    same(p, "showRules({truncateRuleWidth=10})")
    same(p, "showResponseRules()")
    same(p, "showResponseRules({showUUIDs=true})")
    same(p, "showCacheHitResponseRules()")
    same(p, "showSelfAnsweredResponseRules()")
    same(p, "topRules()")
    same(p, "topResponseRules()")


def test_acls(pair):
    p = pair('''
newServer({address="@B0@"})
setACL({"127.0.0.0/8", "10.0.0.0/8", "::1/128", "2001:db8::/32"})
addACL("192.0.2.0/24")
setConsoleACL({"127.0.0.1/32", "::1"})
addConsoleACL("10.1.2.3/32")
''', backends=({},))
    same(p, "showACL()")
    same(p, "showConsoleACL()")


def test_top_queries_and_rings(pair):
    p = pair('newServer({address="@B0@"})\n', backends=({},))
    for name in ("a.example.test.",) * 3 + ("b.example.test.",) * 2 + ("nx.example.test.",):
        p.query(build_query(name, qid=3), "udp")
    time.sleep(0.2)
    same(p, "topQueries()")
    same(p, "topQueries(2)")
    same(p, "topQueries(10, 2)")
    same(p, "topResponses()")
    same(p, "topResponses(10, DNSRCode.NXDOMAIN)")
    ring = ("local t = {} for _, e in ipairs(getRespRing(%s)) do "
            "t[#t + 1] = e.qname .. ' ' .. e.rcode end table.sort(t) "
            "return table.concat(t, ',')")
    a, b = p.theirs.console(ring % ""), p.ours.console(ring % "")
    assert known("getRespRing() returns the whole ring")
    assert b == ("a.example.test. 0,a.example.test. 0,a.example.test. 0,b.example.test. 0,"
                 "b.example.test. 0,nx.example.test. 3\n")
    assert set(a.strip().split(",")) <= set(b.strip().split(","))
    assert p.ours.console(ring % "DNSRCode.NXDOMAIN") == "nx.example.test. 3\n"
    assert p.ours.console("return getRespRing()[1].rcode") == "0\n"


def test_errors_of_bad_commands(pair):
    p = pair('newServer({address="@B0@"})\n', backends=({},))
    for cmd in ("getServer(7)", "nosuchfunction()", "showServers(", "return 1 +",
                "getServer(0):nosuchmethod()", "error('boom')", "newServer()"):
        a = p.theirs.console(cmd)
        b = p.ours.console(cmd)
        # both say something; the wording of Lua errors is LuaJIT's in
        # dnsdist and Lua 5.4's in dnslb
        assert a and b, (cmd, a, b)
    same(p, "return 1 + 1")
    same(p, "return 'a', 2")
    same(p, "x = 5")
    same(p, "return x")
    # dnsdist prints on its own standard output, dnslb in the reply
    assert p.theirs.console("print('x')") == ""
    assert known("print() in the console answers in the console")
    assert p.ours.console("print('x')") == "x\n"


def test_show_version(pair):
    p = pair('newServer({address="@B0@"})\n', backends=({},))
    a, b = p.theirs.console("showVersion()"), p.ours.console("showVersion()")
    assert a == "dnsdist 1.7.3\n"
    assert known("The version is dnslb's")
    assert re.fullmatch(r"dnsdist 1\.7\.3 \(dnslb \d+\.\d+\.\d+\)\n", b), b


def test_console_acl_refuses_the_client(pair):
    p = pair('newServer({address="@B0@"})\nsetConsoleACL({"192.0.2.1/32"})\n', backends=({},))
    out = {}
    for s in (p.theirs, p.ours):
        binary = DNSDIST if s.impl == "dnsdist" else dnslb_bin()
        r = subprocess.run([binary, "-C", s.daemon.conf_path, "-c", "-e", "showServers()"],
                           capture_output=True, text=True, timeout=10, cwd=s.daemon.workdir)
        out[s.impl] = (r.returncode, r.stdout, r.stderr)
    # the server closes the connection from 127.0.0.1 at once: both clients fail
    # (dnsdist's message depends on the race: EOF, or the connection reset)
    assert out["dnsdist"][0] == 1 and out["dnsdist"][2] == ""
    assert out["dnsdist"][1] in ("Fatal error: EOF while reading message\n",
                                 "Fatal error: failed in readn2: Connection reset by peer\n")
    assert known("The console client explains a closed connection")
    assert out["dnslb"] == (1, "", "The server closed the connection right away, likely "
                            "indicating a key mismatch. Please check your setKey() directive.\n")
    p.stats()
