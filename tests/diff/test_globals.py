"""dnsdist 1.7.3's small globals, dnslb against dnsdist on the same input:
getBind/getBindCount and their ClientState objects, show(),
showSecurityStatus(), shutdown(), help(), TagResponseAction,
getCacheHitResponseRules/topCacheHitRules, TimedIPSetRule and the query
counters. Whole console outputs, answer bytes and counters are compared."""

import re
import subprocess
import time

from diffharness import build_query, check_config, known, same_check_config  # noqa: F401

UUID_RX = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def norm(side, text):
    for i, r in enumerate(side.responders):
        text = text.replace(r.address, "@B%d@" % i)
    text = text.replace("127.0.0.1:%d" % side.port, "@PORT@")
    if side.tls_port is not None:
        text = text.replace("127.0.0.1:%d" % side.tls_port, "@TLSPORT@")
    return re.sub(UUID_RX, "UUID", text)


def same(p, cmd):
    a = norm(p.theirs, p.theirs.console(cmd))
    b = norm(p.ours, p.ours.console(cmd))
    assert a == b, "console output of %s differs\n--- dnsdist\n%s--- dnslb\n%s" % (cmd, a, b)
    return a


def test_binds(pair):
    p = pair('newServer({address="@B0@"})\n')
    p.query(build_query("www.example.test.", qid=1), "udp")
    p.query(build_query("www.example.test.", qid=2), "tcp")
    assert same(p, "showBinds()") == (
        "#   Address                        Protocol              Queries\n"
        "0   @PORT@                UDP                   1\n"
        "1   @PORT@                TCP                   1\n")
    assert same(p, "getBindCount()") == "2\n"
    assert same(p, "return getBind(0)") == "@PORT@\n"
    same(p, "return getBind(1):toString()")
    same(p, "return tostring(getBind(0)) .. '|' .. type(getBind(1))")
    assert same(p, "return getBind(2)") == ""
    same(p, "return getBind(0):getEffectiveTLSProvider()")
    same(p, "return getBind(1):detachFilter()")


def test_tls_binds_and_frontends(pair, tmp_path):
    """A DNS over TLS listener beside a plain one: dnsdist's bind numbering
    (one bind, "TCP (DNS over TLS)"), its TLS provider, getTLSFrontendCount,
    the TLSFrontend methods, and the same answer over DoT from both."""
    import ssl
    import dns.message
    import dns.query
    d = str(tmp_path)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", d + "/key.pem", "-out",
                    d + "/cert.pem", "-days", "2", "-subj", "/CN=dns.test", "-addext",
                    "subjectAltName=DNS:dns.test"], check=True, capture_output=True)
    p = pair('newServer({address="@B0@"})\n'
             'addTLSLocal("127.0.0.1:@TLSPORT@", "%s/cert.pem", "%s/key.pem")\n' % (d, d))
    assert same(p, "showBinds()") == (
        "#   Address                        Protocol              Queries\n"
        "0   @PORT@                UDP                   0\n"
        "1   @PORT@                TCP                   0\n"
        "2   @TLSPORT@                TCP (DNS over TLS)    0\n")
    assert same(p, "getBindCount()") == "3\n"
    assert same(p, "getTLSFrontendCount()") == "1\n"
    assert same(p, "getBind(2):getEffectiveTLSProvider()") == "openssl\n"
    assert same(p, "getBind(1):getEffectiveTLSProvider()") == "\n"
    assert same(p, "return getBind(2)") == "@TLSPORT@\n"
    assert same(p, "getTLSFrontend(0):rotateTicketsKey()") == ""
    assert same(p, "getTLSContext(0):rotateTicketsKey()") == ""
    assert same(p, "getTLSFrontend(0):reloadCertificates()") == ""
    assert same(p, "reloadAllCertificates()") == ""
    ctx = ssl.create_default_context(cafile=d + "/cert.pem")
    answers = []
    for side in (p.theirs, p.ours):
        q = dns.message.make_query("www.example.test.", "A")
        q.id = 7
        answers.append(dns.query.tls(q, "127.0.0.1", port=side.tls_port, ssl_context=ctx,
                                     server_hostname="dns.test", timeout=5).to_wire())
    assert answers[0] == answers[1]
    assert same(p, "showBinds()").splitlines()[3].endswith("1")


def test_binds_while_configuring(workdir):
    """getBindCount() counts the listeners declared so far (2 per
    address, doTCP=false too); the printed lines of the configuration are
    compared through --check-config's output."""
    same_check_config(workdir, '''
print(getBindCount())
setLocal("127.0.0.1:5300")
addLocal("127.0.0.1:5301", {doTCP=false})
print(getBindCount())
print(getBind(0):toString(), getBind(2):toString(), tostring(getBind(3)))
''')
    # 1.7.3 returns an empty object there, which aborts dnsdist when used
    known("Lua objects and rules: smaller differences")
    r = check_config(workdir, 'setLocal("127.0.0.1:5300")\nprint(getBind(2), getBind(-0))\n')
    assert r["dnslb"] == (0, "nil\t127.0.0.1:5300\nConfiguration 'dnsdist.conf' OK!\n", "")


def test_show_and_security_status(pair):
    p = pair('newServer({address="@B0@"})\n')
    assert same(p, "showSecurityStatus()") == "0\n"
    assert same(p, 'show("a line\\nand another")') == "a line\nand another\n"
    assert same(p, "show(5)") == "5\n"


def test_shutdown_from_the_console(pair):
    """dnsdist exits at once: its client sees the connection close; dnslb
    stops as on SIGTERM, and its client sees the same."""
    p = pair('newServer({address="@B0@"})\n')
    same(p, "shutdown()")
    for side in (p.theirs, p.ours):
        for _ in range(50):
            if side.daemon.proc.poll() is not None:
                break
            time.sleep(0.1)
        assert side.daemon.proc.poll() == 0


def test_shutdown_while_configuring(workdir):
    """shutdown() in the configuration: exit 0 at once, nothing printed
    (no "Configuration ... OK!")."""
    same_check_config(workdir, 'newServer({address="127.0.0.1:9"})\nshutdown()\nnewServer(nil)\n')


def test_help(pair):
    """dnsdist prints its fixed help list; dnslb every global function it
    has, sorted, one a line."""
    p = pair('newServer({address="@B0@"})\n')
    known("help() lists dnslb's functions")
    out = p.ours.console("help()")
    expect = p.ours.console(
        'local t = {} for k, v in pairs(_G) do if type(v) == "function" then '
        't[#t + 1] = k end end table.sort(t) '
        'for i = 1, #t do t[i] = t[i] .. "()" end return table.concat(t, "\\n")')
    assert out == expect
    assert "getBind()\n" in out and "help()\n" in out and "showServers()\n" in out


def test_tag_response_action(pair, workdir):
    """TagResponseAction: the deprecated name of SetTagResponseAction, with
    dnsdist's warning; the tag it sets is seen by the next response rule
    (which drops the A answers)."""
    conf = '''
newServer({address="@B0@"})
addResponseAction(QTypeRule(DNSQType.A), TagResponseAction("short", "yes"))
addResponseAction(TagRule("short", "yes"), DropResponseAction())
'''
    same_check_config(workdir, conf.replace("@B0@", "127.0.0.1:9"))
    p = pair(conf)
    p.query(build_query("www.example.test.", 1, qid=5), "udp")
    p.query(build_query("www.example.test.", 28, qid=6), "udp")
    # dnsdist's client runs the configuration too, printing its warning
    known("The console: smaller differences")
    warning = ("access to TagResponseAction is deprecated and will be removed in a future "
               "version, please use SetTagResponseAction instead\n")
    for cmd in ("showResponseRules()", "topResponseRules()"):
        a = norm(p.theirs, p.theirs.console(cmd))
        b = norm(p.ours, p.ours.console(cmd))
        assert a == warning + b
    assert b.split("\n")[1:3] == [
        "0                                          1 qtype==A" + " " * 49
        + "set tag 'short' to value 'yes'",
        "1                                          1 tag 'short' is set to 'yes'" + " " * 30
        + "drop"]
    p.stats()


def test_cache_hit_rules(pair):
    p = pair('''
newServer({address="@B0@"})
pc = newPacketCache(100)
getPool(""):setCache(pc)
addCacheHitResponseAction(QTypeRule(DNSQType.A), DelayResponseAction(1), {name="a-hits"})
addCacheHitResponseAction(AllRule(), SetTagResponseAction("hit", "1"))
addCacheHitResponseAction(QTypeRule(DNSQType.TXT), DropResponseAction())
''')
    for qid in (1, 2, 3):
        p.query(build_query("www.example.test.", 1, qid=qid), "udp")
    p.query(build_query("www.example.test.", 28, qid=4), "udp")
    p.query(build_query("www.example.test.", 28, qid=5), "udp")
    same(p, "topCacheHitRules()")
    same(p, "topCacheHitRules(1)")
    same(p, "topCacheHitRules(0, {showUUIDs=true})")
    same(p, "return #getCacheHitResponseRules()")
    same(p, "return #getCacheHitResponseRules(2)")
    same(p, "return #getCacheHitResponseRules(0)")
    same(p, "return #getTopRules(0)")


TIMED = '''
newServer({address="@B0@"})
tisr = TimedIPSetRule()
other = TimedIPSetRule()
other:add(newCA("192.0.2.1"), 3600)
other:add(newCA("2001:db8::1"), 3600)
other:add(newCA("192.0.2.2"), -5)
addAction(tisr:slice(), RCodeAction(DNSRCode.REFUSED), {name="timed"})
addAction(other:slice(), DropAction())
function mark(dq)
  if dq.qname:toString() == "mark.example.test." then
    tisr:add(dq.remoteaddr, 3600)
    return DNSAction.Nxdomain, ""
  end
  return DNSAction.None, ""
end
addAction(AllRule(), LuaAction(mark))
'''


def test_timed_ip_set_rule(pair):
    """A LuaAction adds the client to the set (in dnslb, from a worker's own
    Lua state: the set is shared); the rule then refuses it; the console
    shows the live count, clears, adds and cleans up."""
    p = pair(TIMED)
    www = lambda qid: build_query("www.example.test.", qid=qid)  # noqa: E731
    p.query(www(1), "udp")
    assert same(p, "showRules()").split("\n")[1:3] == [
        "0   timed                                  0 Src: 0 ips" + " " * 47 + "set rcode 5",
        "1                                          0 Src: 2 ips" + " " * 47 + "drop"]
    p.query(build_query("mark.example.test.", qid=2), "udp")
    p.query(www(3), "udp")
    p.query(www(4), "tcp")
    same(p, "showRules()")
    same(p, "topRules(1)")
    same(p, "tisr:clear()")
    p.query(www(5), "udp")
    same(p, "showRules()")
    same(p, "tisr:add(newCA('127.0.0.1:5300'), 3600)")
    p.query(www(6), "tcp")
    same(p, "tisr:add(newCA('127.0.0.1'), 10)")
    p.query(www(7), "udp")
    same(p, "other:add(newCA('192.0.2.1'), 1) other:add(newCA('192.0.2.3'), -1) other:cleanup()")
    same(p, "showRules()")
    same(p, "tisr:clear() tisr:add(newCA('127.0.0.1'), -1)")
    p.query(www(8), "udp")
    same(p, "return #getTopRules(1)")
    same(p, "showRules({showUUIDs=true})")
    p.stats()


def test_timed_ip_set_rule_config(workdir):
    same_check_config(workdir, '''
t = TimedIPSetRule()
t:add(newCA("192.0.2.1"), 10)
t:add(newCA("192.0.2.1:53"), 5)
t:add(newCA("2001:db8::1"), 10)
t:add(newCA("192.0.2.2"), -5)
t:add(newCA("192.0.2.3"), 1.5)
t:add(newCA("192.0.2.4"), "7")
local s = t:slice()
print(s:toString())
addAction(s, DropAction())
t:cleanup()
print(s:toString())
t:clear()
print(s:toString())
showRules()
print(topRules())
''')


def counters(side, cmd):
    """getQueryCounters()'s text: the header line and the (name, count) lines."""
    lines = side.console(cmd).split("\n")
    assert lines[-1] == ""
    recs = []
    for i, line in enumerate(lines[1:-1]):
        m = re.fullmatch(r"(\d+) +(.*): (\d+) request\(s\)", line)
        assert m and int(m.group(1)) == i + 1 and line.startswith("%-3d " % (i + 1)), line
        recs.append((m.group(2), int(m.group(3))))
    return lines[0], recs


def same_counters_text(p, cmd="getQueryCounters()"):
    """The same header and records; dnslb's sorted by count (then name)."""
    known("getQueryCounters() sorts by count")
    ha, ra = counters(p.theirs, cmd)
    hb, rb = counters(p.ours, cmd)
    assert ha == hb
    assert rb == sorted(rb, key=lambda r: (-r[1], r[0].encode()))
    if len(ra) == int(re.search(r"\((\d+) records", ha).group(1)):
        assert sorted(ra) == sorted(rb)     # every record shown: the same ones
    else:
        assert len(ra) == len(rb)
    return hb, rb


def test_query_counters(pair):
    p = pair('newServer({address="@B0@"})\n')
    assert same(p, "getQueryCounters()") == (
        "query counting is currently: disabled (0 records in buffer)\n")
    p.query(build_query("before.test.", qid=1), "udp")
    same(p, "setQueryCount(true)")
    for i, (name, qt, proto) in enumerate((
            ("www.example.test.", 1, "udp"), ("WWW.Example.test.", 1, "udp"),
            ("b.test.", 28, "udp"), ("a.test.", 1, "tcp"), ("b.test.", 1, "udp"),
            ("b.test.", 16, "tcp"), ("x y.test.", 1, "udp"), ("dot\\.in.label.test.", 1, "udp"),
            (".", 2, "udp"))):
        p.query(build_query(name, qt, qid=10 + i), proto)
    h, recs = same_counters_text(p)
    assert h == "query counting is currently: enabled (7 records in buffer)"
    assert recs == [("b.test", 3), (".", 1), ("WWW.Example.test", 1), ("a.test", 1),
                    ("dot\\\\.in.label.test", 1), ("www.example.test", 1), ("x\\032y.test", 1)]
    same_counters_text(p, "getQueryCounters(100)")
    assert same(p, "getQueryCounters(0)") == (
        "query counting is currently: enabled (7 records in buffer)\n")
    assert same(p, "clearQueryCounters()") == "7 records cleared from query counter buffer\n"
    same(p, "getQueryCounters()")
    # a filter: (count, name); anything else (or an error) drops the query
    same(p, "setQueryCountFilter(function(dq) return dq.qtype == DNSQType.AAAA, "
            "'six:' .. dq.qname:toString() end)")
    for i, (name, qt) in enumerate((("www.example.test.", 1), ("b.test.", 28),
                                    ("c.test.", 28), ("c.test.", 28))):
        p.query(build_query(name, qt, qid=30 + i), "udp")
    assert same_counters_text(p)[1] == [("six:c.test.", 2), ("six:b.test.", 1)]
    same(p, "setQueryCount(false)")
    p.query(build_query("d.test.", 28, qid=40), "udp")
    same_counters_text(p)
    same(p, "setQueryCount(true)")
    for i, f in enumerate(("function(dq) return true, 5 end",
                           "function(dq) return false, 'n' end",
                           "function(dq) return true end",
                           "function(dq) return 1, 'x' end",
                           "function(dq) return 'yes', 'y' end",
                           "function(dq) error('no') end")):
        same(p, "setQueryCountFilter(%s)" % f)
        p.query(build_query("e.test.", 1, qid=50 + i), "udp")
        p.query(build_query("e.test.", 1, qid=60 + i), "tcp")
    assert same_counters_text(p)[1] == [("5", 2), ("six:c.test.", 2), ("six:b.test.", 1)]
    p.stats()


def test_query_counters_from_the_configuration(pair):
    """setQueryCount/setQueryCountFilter in the configuration: the filter is
    a function of the configuration (in dnslb, each worker's own copy)."""
    p = pair('''
newServer({address="@B0@"})
setQueryCount(true)
prefix = "q:"
function qfilter(dq)
  return dq:getTag("skip") ~= "yes", prefix .. dq.qname:toString() .. "/" .. dq.qtype
end
setQueryCountFilter(qfilter)
''')
    for i, (name, qt) in enumerate((("a.test.", 1), ("a.test.", 28), ("a.test.", 1))):
        p.query(build_query(name, qt, qid=i + 1), "udp")
    assert same_counters_text(p)[1] == [("q:a.test./1", 2), ("q:a.test./28", 1)]


STATNODE = ('t = {} statNodeRespRing(function(n, s, c) t[#t + 1] = n.fullname .. "|" .. '
            'n.labelsCount .. "|" .. n:numChildren() .. "|" .. s.queries .. "," .. s.noerrors '
            '.. "," .. s.nxdomains .. "," .. s.servfails .. "," .. s.drops .. "," .. s.bytes '
            '.. "|" .. c.queries .. "," .. c.noerrors .. "," .. c.nxdomains .. "," .. '
            'c.servfails .. "," .. c.drops .. "," .. c.bytes end%s) return table.concat(t, "\\n")')


def test_stat_node_resp_ring(pair):
    """The response rings as dnsdist's StatNode tree: children first, in
    label order; a timeout counts as a drop; the root last, named ""."""
    p = pair('newServer({address="@B0@"})\n')
    for i, (name, qt) in enumerate((("www.example.test.", 1), ("nx.example.test.", 1),
                                    ("servfail.b.example.test.", 1), ("www.example.test.", 28),
                                    ("other.test.", 1), ("x y.test.", 16),
                                    ("drop.example.test.", 1))):
        p.query(build_query(name, qt, qid=i + 1), "udp")
    time.sleep(2.5)     # the drop's timeout
    out = same(p, STATNODE % "")
    assert out.split("\n")[-3:] == [
        "test.|1|3|0,0,0,0,0,0|7,4,1,1,1,274", "|0|1|0,0,0,0,0,0|7,4,1,1,1,274", ""]
    assert "x y.test.|2|0|1,1,0,0,0,44|1,1,0,0,0,44" in out
    same(p, STATNODE % ", 3600")
    time.sleep(1.2)
    assert same(p, STATNODE % ", 1") == "|0|0|0,0,0,0,0,0|0,0,0,0,0,0\n"
    # a visitor's error stops the visit and is the command's
    known("The rings: smaller differences")
    err = p.ours.console("statNodeRespRing(function() error('stop') end)")
    assert err.startswith("Error: [string \"return statNodeRespRing(function() error('sto...\"]:1: "
                          "stop\nstack traceback:\n")


def test_bench_rule(pair):
    """benchRule: the same text, the speed figures (machine-dependent)
    written as Q and U; the matches of rules that do not depend on the
    random queries are the same."""
    p = pair('newServer({address="@B0@"})\n')
    rx = r"Had (\d+) matches out of (\d+), \d+\.\d qps, in \d+\.\d usec\n"

    def bench(cmd):
        a, b = p.theirs.console(cmd), p.ours.console(cmd)
        ma, mb = re.fullmatch(rx, a), re.fullmatch(rx, b)
        assert ma and mb, (a, b)
        return ma.groups(), mb.groups()

    for cmd in ('benchRule(AllRule(), 1000)', 'benchRule(makeRule("example.com"), 2000, '
                '"example.com")', 'benchRule(RegexRule("^[0-9]+\\\\.x\\\\.y$"), 10, "x.y")',
                'benchRule(NotRule(AllRule()), 5)', 'benchRule(QNameRule("a.b"), 0)',
                'benchRule(AllRule())', 'benchRule(TCPRule(false), 7)'):
        a, b = bench(cmd)
        assert a == b, cmd
    a, b = bench('benchRule(QTypeRule("A"), 1000)')
    assert a[1] == b[1] == "1000" and int(b[0]) < 50


SVC = '''
newServer({address="@B0@"})
local svc = {
  newSVCRecordParameters(1, "dot.powerdns.com.", { mandatory={"port"}, alpn={ "dot" },
    noDefaultAlpn=true, port=853, ipv4hint={ "192.0.2.1" }, ipv6hint={ "2001:db8::1" } }),
  newSVCRecordParameters(2, "doh.powerdns.com.", { mandatory={"port", "alpn", "key7"},
    alpn={ "h2", "h3" }, port=443, ipv4hint={ "192.0.2.2", "10.0.0.1", "192.0.2.2" },
    ipv6hint={ "2001:db8::2" }, key7 = "/dns-query{?dns}", key65000 = "x", ech = "ech!" })
}
addAction(AndRule{QTypeRule(64), QNameRule('_dns.resolver.arpa.')}, SpoofSVCAction(svc))
addAction(QNameRule('alias.test.'), SpoofSVCAction({newSVCRecordParameters(0, "target.test.")},
  {ttl=30, aa=true}))
addAction(QNameRule('self.test.'), SpoofSVCAction({newSVCRecordParameters(1, ".",
  {ipv4hint={"192.0.2.9", "192.0.2.8"}, ipv6hint={"2001:db8::9"}}),
  newSVCRecordParameters(2, "www.self.test.", {ipv4hint={"192.0.2.7"}})}, {ra=false}))
addAction(QNameRule('none.test.'), SpoofSVCAction({}))
'''


def test_spoof_svc_action(pair, workdir):
    p = pair(SVC)
    for i, (name, qt, opt) in enumerate((
            ("_dns.resolver.arpa.", 64, None), ("_dns.resolver.arpa.", 64, True),
            ("_dns.resolver.arpa.", 1, None), ("alias.test.", 65, None),
            ("alias.test.", 1, True), ("self.test.", 64, None), ("SELF.test.", 65, True),
            ("none.test.", 64, None))):
        p.query(build_query(name, qt, qid=i + 1, opt=opt), "udp")
        p.query(build_query(name, qt, qid=i + 1, opt=opt), "tcp")
        p.query(build_query(name, qt, qid=i + 1, opt=opt, flags=0x0010), "udp")
        p.query(build_query(name, qt, qid=i + 1, opt={"do": True}, flags=0x0130), "udp")
    same(p, "showRules()")
    p.stats()


def test_ipcipher(workdir):
    """makeIPCipherKey and ComboAddress:ipencrypt/ipdecrypt: the same keys
    and the same pseudonyms, both ways."""
    conf = '''
local function hex(s) return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end)) end
local k = makeIPCipherKey("some passphrase")
print(hex(k), #k, hex(makeIPCipherKey("")), hex(makeIPCipherKey(string.rep("long", 40))))
for _, a in ipairs({"1.2.3.4", "192.0.2.1:53", "2001:db8::1", "[::1]:853", "0.0.0.0",
                    "255.255.255.255", "::ffff:1.2.3.4", "::"}) do
  local e = newCA(a):ipencrypt(k)
  print(a, e:toStringWithPort(), e:ipdecrypt(k):toStringWithPort(),
        newCA(a):ipdecrypt(k):toStringWithPort())
end
print(pcall(function() return newCA("1.2.3.4"):ipencrypt("short"):toString() end))
'''
    r = check_config(workdir, conf)
    known("Errors in the configuration name the file and line")
    rc, out, err = r["dnsdist"]
    out = re.sub(r'\[string "chunk"\]:(\d+): Caught exception: ', r"dnsdist.conf:\1: ", out)
    assert r["dnslb"] == (rc, out, err)
    assert "false\tdnsdist.conf:11: Need 128 bits of key for ipcrypt\n" in out
