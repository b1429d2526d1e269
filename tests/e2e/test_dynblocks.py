"""Dynamic blocks (docs/dynblocks.md): rate rules of a dynBlockRulesGroup
(query rate, rcode rate, response-byte rate), a setSuffixMatchRule visitor
against a random-subdomain flood, excludeRange, warning mode, every action,
addDynamicBlock / showDynBlocks / clearDynBlocks / getDynamicBlocks from the
console, /jsonstat?command=dynblocklist, the counters (dyn-blocked,
dyn-block-nmg-size, the accounting identity), and showDynBlocks and the
dynblocklist JSON next to Debian's dnsdist 1.7.3.

Clients are told apart by their source address: each test binds its UDP
sockets to its own 127.0.0.x. Traffic is bounded (a few hundred queries per
test) and the only timing assumptions are "blocked within a few seconds" and
"unblocked some seconds after the block time", with generous slack."""

import base64
import json
import os
import re
import socket
import subprocess
import time
import urllib.request

import dns.flags
import dns.message
import dns.rcode
import pytest

from dnslbtest import DNSDIST, SANITIZER_MARKERS, dnslb_bin, free_port, lua_server, wait_until

pytestmark = pytest.mark.dnslb_only("dynamic blocks of dnslb (dnsdist is driven explicitly)")

API_KEY = "dynblock-api-key"


def new_key():
    return base64.b64encode(os.urandom(32)).decode()


def conf(responder, body, web_port=None, console=True):
    s = ""
    if console:     # (the harness gives dnsdist a console of its own)
        s = 'controlSocket("127.0.0.1:%d")\nsetKey("%s")\n' % (free_port(), new_key())
    s += lua_server(responder.address) + "\n"
    if web_port is not None:
        s += 'webserver("127.0.0.1:%d")\nsetWebserverConfig({apiKey="%s"})\n' % (web_port,
                                                                                 API_KEY)
    return s + body


def console(d, cmd, exe=None):
    """Run @cmd on the console of daemon @d: (rc, stdout)."""
    r = subprocess.run([exe or dnslb_bin(), "-C", d.conf_path, "-c", "-e", cmd],
                       capture_output=True, text=True, timeout=30, cwd=d.workdir,
                       env=dict(os.environ, HOME=d.workdir))
    for m in SANITIZER_MARKERS:
        assert m not in r.stderr, r.stderr
    return r.returncode, r.stdout


def query(port, src, name="www.example.test.", qtype="A", timeout=0.6, rd=True):
    """One UDP query from source address @src: the answer (Message) or None."""
    q = dns.message.make_query(name, qtype)
    if not rd:
        q.flags &= ~dns.flags.RD
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind((src, 0))
        s.settimeout(timeout)
        s.sendto(q.to_wire(), ("127.0.0.1", port))
        try:
            return dns.message.from_wire(s.recv(65535))
        except (socket.timeout, ConnectionRefusedError):
            return None
    finally:
        s.close()


def tcp_query(port, src, name="www.example.test.", qtype="A", timeout=2.0):
    q = dns.message.make_query(name, qtype).to_wire()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((src, 0))
        s.settimeout(timeout)
        s.connect(("127.0.0.1", port))
        s.sendall(len(q).to_bytes(2, "big") + q)
        buf = b""
        while len(buf) < 2 or len(buf) < 2 + int.from_bytes(buf[:2], "big"):
            chunk = s.recv(65535)
            if not chunk:
                return None
            buf += chunk
        return dns.message.from_wire(buf[2:2 + int.from_bytes(buf[:2], "big")])
    except (socket.timeout, ConnectionError):
        return None
    finally:
        s.close()


def flood(port, src, names, count, pace=0.002):
    """Send @count queries from @src (names cycled, or a function of i); answers
    are drained as they come. Returns how many were answered."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((src, 0))
    s.setblocking(False)
    answered = 0
    for i in range(count):
        name = names(i) if callable(names) else names[i % len(names)]
        qt = "A"
        if isinstance(name, tuple):
            name, qt = name
        s.sendto(dns.message.make_query(name, qt).to_wire(), ("127.0.0.1", port))
        time.sleep(pace)
        try:
            while True:
                s.recv(65535)
                answered += 1
        except BlockingIOError:
            pass
    end = time.monotonic() + 0.5
    s.setblocking(True)
    while time.monotonic() < end:
        s.settimeout(max(0.01, end - time.monotonic()))
        try:
            s.recv(65535)
            answered += 1
        except (socket.timeout, BlockingIOError):
            break
    s.close()
    return answered


def settle():
    """Measuring starts with the daemon (a rule group exists); this leaves
    the first maintenance round (one second after start) behind, so each
    test's traffic is judged by whole rounds."""
    time.sleep(1.3)


def answered(port, src, name="www.example.test.", **kw):
    return query(port, src, name, **kw) is not None


def blocked_within(port, src, name="www.example.test.", timeout=8.0):
    return wait_until(lambda: not answered(port, src, name), timeout, 0.2)


def stats(d):
    rc, out = console(d, "dumpStats()")
    assert rc == 0, out
    vals = {}
    for line in out.splitlines():
        f = line.split()
        for i in range(0, len(f) - 1, 2):
            try:
                vals[f[i]] = float(f[i + 1])
            except ValueError:
                pass
    return vals


def show_rows(d):
    """showDynBlocks() from the console: {what: [seconds, blocks, warning, action, reason]}."""
    rc, out = console(d, "showDynBlocks()")
    assert rc == 0, out
    lines = out.rstrip("\n").split("\n")
    assert lines[0].split() == ["What", "Seconds", "Blocks", "Warning", "Action", "Reason"]
    rows = {}
    for l in lines[1:]:
        m = re.match(r"(\S+)\s+(-?\d+)\s+(\d+) (true|false)\s+(.{20}) (.*)$", l)
        assert m, l
        rows[m.group(1)] = [int(m.group(2)), int(m.group(3)), m.group(4) == "true",
                            m.group(5).strip(), m.group(6)]
    return rows


MAINT = "function maintenance() dbr:apply() end\n"


def test_query_rate_block_then_expiry(dnslb, responder):
    d = dnslb(conf(responder, 'dbr = dynBlockRulesGroup()\n'
                   'dbr:setQueryRate(20, 2, "Exceeded query rate", 3)\n' + MAINT))
    settle()
    a, b = "127.0.0.2", "127.0.0.3"
    assert answered(d.port, a) and answered(d.port, b)
    flood(d.port, a, ["www.example.test."], 150, pace=0.004)
    assert blocked_within(d.port, a), "not blocked:\n" + d.output()
    assert answered(d.port, b)  # the other client is not affected
    assert d.wait_line(r"Inserting dynamic block for 127\.0\.0\.2/32 for 3 seconds: "
                       r"Exceeded query rate", 0, 5) is not None
    rows = show_rows(d)
    assert "127.0.0.2/32" in rows and rows["127.0.0.2/32"][3] == "Drop"
    st = stats(d)
    assert st["dyn-blocked"] >= 1 and st["dyn-block-drops"] >= 1
    assert st["dyn-block-nmg-size"] >= 1
    # unblocked once the rate fell and the block time passed
    assert wait_until(lambda: answered(d.port, a), 15.0, 0.5), d.output()
    assert answered(d.port, b)
    # every query ended one way (docs/counters.md, with dnslb's dyn-block-drops)
    st = stats(d)
    lhs = st["queries"] - st["noncompliant-queries"]
    rhs = (st["responses"] + st["cache-hits"] + st["downstream-timeouts"] + st["self-answered"]
           + st["no-policy"] + st["rule-drop"] + st["dyn-block-drops"])
    assert lhs == rhs, st


def test_rcode_rate(dnslb, responder):
    d = dnslb(conf(responder, 'dbr = dynBlockRulesGroup()\n'
                   'dbr:setRCodeRate(DNSRCode.NXDOMAIN, 5, 2, "Exceeded NXD rate", 4)\n'
                   + MAINT))
    settle()
    a, b = "127.0.0.4", "127.0.0.5"
    n = flood(d.port, a, ["nx.example.test."], 60, pace=0.01)
    assert n > 0
    assert blocked_within(d.port, a), d.output()
    # the block is for the client, whatever it asks; the other client is fine
    assert not answered(d.port, a, "www.example.test.")
    assert answered(d.port, b, "nx.example.test.")
    assert answered(d.port, b, "www.example.test.")
    assert show_rows(d)["127.0.0.4/32"][4] == "Exceeded NXD rate"


def test_response_byte_rate(dnslb, responder):
    d = dnslb(conf(responder, 'dbr = dynBlockRulesGroup()\n'
                   'dbr:setResponseByteRate(400, 2, "Exceeded resp BW rate", 4, '
                   'DNSAction.Refused)\n' + MAINT))
    settle()
    a, b = "127.0.0.6", "127.0.0.7"
    flood(d.port, a, [("www.example.test.", "TXT")], 60, pace=0.01)

    def refused():
        r = query(d.port, a)
        return r is not None and r.rcode() == dns.rcode.REFUSED
    assert wait_until(refused, 8.0, 0.2), d.output()
    r = query(d.port, b)
    assert r is not None and r.rcode() == dns.rcode.NOERROR


SMT_BODY = r'''
dbr = dynBlockRulesGroup()
dbr:setSuffixMatchRule(3, "random subdomains", 4, DNSAction.Drop,
  function(node, self, children)
    if node.labelsCount == 3 and children.queries > 50 and children.nxdomains > 40
       and node:numChildren() > 40 then
      return true, "PRSD on " .. node.fullname
    end
    return false
  end)
dbr:excludeDomains({"safe.test."})
function maintenance() dbr:apply() end
'''


def test_suffix_match_visitor(dnslb, responder):
    d = dnslb(conf(responder, SMT_BODY))
    settle()
    # a random-subdomain flood under victim.example.test. (NXDOMAIN answers),
    # from several sources, and the same under safe.test. (excluded)
    for k, src in enumerate(("127.0.0.8", "127.0.0.9")):
        flood(d.port, src, lambda i, k=k: "nx.r%d-%d.victim.example.test." % (k, i), 60,
              pace=0.003)
        flood(d.port, src, lambda i, k=k: "nx.r%d-%d.x.safe.test." % (k, i), 60, pace=0.003)

    def victim_blocked():
        return not answered(d.port, "127.0.0.10", "www.victim.example.test.")
    assert wait_until(victim_blocked, 8.0, 0.3), d.output()
    # other domains (and the excluded one) are answered, from any client
    assert answered(d.port, "127.0.0.10", "www.other.example.test.")
    assert answered(d.port, "127.0.0.8", "www.other.example.test.")
    assert answered(d.port, "127.0.0.10", "www.x.safe.test.")
    rows = show_rows(d)
    assert rows["victim.example.test."][4] == "PRSD on victim.example.test."
    assert not any(k.endswith("safe.test.") for k in rows)
    rc, out = console(d, 'for k, v in pairs(getDynamicBlocksSMT()) do print(k, v.reason) end')
    assert "victim.example.test.\tPRSD on victim.example.test." in out


def test_exclude_range_and_warning(dnslb, responder):
    d = dnslb(conf(responder, 'dbr = dynBlockRulesGroup()\n'
                   'dbr:setQueryRate(1000, 2, "too fast", 4, DNSAction.Drop, 20)\n'
                   'dbr2 = dynBlockRulesGroup()\n'
                   'dbr2:setQueryRate(20, 2, "excluded anyway", 4)\n'
                   'dbr2:excludeRange({"127.0.0.0/24"})\n'
                   'dbr2:includeRange("127.0.0.12/32")\n'
                   'function maintenance() dbr:apply() dbr2:apply() end\n'))
    settle()
    warned, excluded, included = "127.0.0.11", "127.0.0.13", "127.0.0.12"
    flood(d.port, warned, ["www.example.test."], 150, pace=0.004)
    flood(d.port, excluded, ["www.example.test."], 150, pace=0.004)
    flood(d.port, included, ["www.example.test."], 150, pace=0.004)
    # includeRange makes an exception to the excluded range: that one is blocked
    assert blocked_within(d.port, included), d.output()
    assert d.wait_line(r"Query rate for 127\.0\.0\.11/32 exceeded set warning rate", 0, 5), \
        d.output()
    rows = show_rows(d)
    # the warning: shown, NoOp, not blocking; the excluded client: nothing
    assert rows["127.0.0.11/32"][2] is True
    assert rows["127.0.0.11/32"][3] == "Do nothing"
    # (dbr, without exclusions, may warn about it; dbr2 never blocks it)
    assert "127.0.0.13/32" not in rows or rows["127.0.0.13/32"][2] is True
    assert answered(d.port, warned) and answered(d.port, excluded)
    assert rows["127.0.0.12/32"][2] is False


def test_actions_from_console(dnslb, responder):
    d = dnslb(conf(responder, ""))
    acts = {"127.0.0.20": "Drop", "127.0.0.21": "Nxdomain", "127.0.0.22": "Refused",
            "127.0.0.23": "Truncate", "127.0.0.24": "NoRecurse", "127.0.0.25": "NoOp"}
    for src, act in acts.items():
        rc, out = console(d, 'addDynamicBlock("%s", "action %s", DNSAction.%s, 60)'
                          % (src, act, act))
        assert rc == 0 and "rror" not in out, out
    assert query(d.port, "127.0.0.20") is None
    assert query(d.port, "127.0.0.21").rcode() == dns.rcode.NXDOMAIN
    assert query(d.port, "127.0.0.22").rcode() == dns.rcode.REFUSED
    tc = query(d.port, "127.0.0.23")
    assert tc.flags & dns.flags.TC and not tc.answer
    # Truncate does not apply over TCP (dnsdist)
    r = tcp_query(d.port, "127.0.0.23")
    assert r is not None and r.rcode() == dns.rcode.NOERROR and r.answer
    # NoRecurse: answered by the backend, asked without RD, the client's RD restored
    responder.clear()
    r = query(d.port, "127.0.0.24", "norec.example.test.")
    assert r is not None and r.answer and r.flags & dns.flags.RD
    q = [x for x in responder.queries if x.qname.lower() == "norec.example.test."]
    assert q and not (q[0].flags & 0x0100), q
    r = query(d.port, "127.0.0.25")
    assert r is not None and r.answer
    rows = show_rows(d)
    assert rows["127.0.0.20/32"][3] == "Drop"
    assert rows["127.0.0.21/32"][3] == "Send NXDomain"
    assert rows["127.0.0.22/32"][3] == "Send Refused"
    assert rows["127.0.0.23/32"][3] == "Truncate over UDP"
    assert rows["127.0.0.24/32"][3] == "Set rd=0"
    assert rows["127.0.0.25/32"][3] == "Do nothing"
    assert rows["127.0.0.21/32"][1] >= 1 and rows["127.0.0.25/32"][1] == 0
    # a netmask and an SMT block, then clearDynBlocks()
    console(d, 'addDynamicBlock("127.0.1.0/24", "whole /24", DNSAction.Refused, 60)')
    console(d, 'addDynBlockSMT({"Bad.Example.Test"}, "bad name", 60, DNSAction.Nxdomain)')
    assert query(d.port, "127.0.1.77").rcode() == dns.rcode.REFUSED
    assert query(d.port, "127.0.0.30", "x.bad.example.test.").rcode() == dns.rcode.NXDOMAIN
    rows = show_rows(d)
    assert rows["127.0.1.0/24"][4] == "whole /24" and 55 <= rows["127.0.1.0/24"][0] <= 60
    assert rows["bad.example.test."][3] == "Send NXDomain"
    rc, out = console(d, "for k, v in pairs(getDynamicBlocks()) do print(k, v.action, v.blocks) end")
    assert "127.0.1.0/24\t2\t1" in out, out
    st = stats(d)
    assert st["dyn-blocked"] >= 6 and st["dyn-block-nmg-size"] == 7
    console(d, "clearDynBlocks()")
    assert show_rows(d) == {}
    assert answered(d.port, "127.0.0.20") and answered(d.port, "127.0.1.77")
    assert stats(d)["dyn-block-nmg-size"] == 0
    # setDynBlocksAction is config time only (dnsdist 1.7)
    console(d, "setDynBlocksAction(DNSAction.Refused)")
    assert d.wait_line("Dynamic blocks action cannot be altered at runtime!", 0, 5) is not None


def test_default_action_and_expiry(dnslb, responder):
    d = dnslb(conf(responder, 'setDynBlocksAction(DNSAction.Refused)\n'
                   'addDynBlockSMT({"short.example.test."}, "short", 2)\n'))
    r = query(d.port, "127.0.0.31", "short.example.test.")
    assert r is not None and r.rcode() == dns.rcode.REFUSED
    assert show_rows(d)["short.example.test."][3] == "Send Refused"
    # expired blocks stop acting at once and leave the list
    assert wait_until(lambda: answered(d.port, "127.0.0.31", "short.example.test.") and
                      query(d.port, "127.0.0.31", "short.example.test.").rcode() == 0, 6.0, 0.3)
    assert show_rows(d) == {}


def test_legacy_exceed_and_add_dyn_blocks(dnslb, responder):
    d = dnslb(conf(responder, 'function maintenance()\n'
                   '  addDynBlocks(exceedQRate(20, 2), "Exceeded query rate", 4)\n'
                   '  addDynBlocks(exceedNXDOMAINs(5, 2), "Exceeded NXD rate", 4, '
                   'DNSAction.Refused)\n'
                   'end\n'))
    settle()
    time.sleep(1.2)     # exceed*() start the measuring at their first call
    flood(d.port, "127.0.0.40", ["www.example.test."], 150, pace=0.004)
    flood(d.port, "127.0.0.41", ["nx.example.test."], 40, pace=0.01)
    assert blocked_within(d.port, "127.0.0.40"), d.output()

    def refused():
        r = query(d.port, "127.0.0.41")
        return r is not None and r.rcode() == dns.rcode.REFUSED
    assert wait_until(refused, 8.0, 0.3), d.output()
    assert answered(d.port, "127.0.0.42")
    rc, out = console(d, "t = exceedQRate(0, 5) n = 0 for k, v in pairs(t) do n = n + 1 end "
                      "return tostring(n > 0) .. ' ' .. type(next(t))")
    assert out.split() == ["true", "userdata"], out


def test_jsonstat_dynblocklist(dnslb, responder):
    port = free_port()
    d = dnslb(conf(responder, "", web_port=port))
    console(d, 'addDynamicBlock("127.0.0.50", "json reason", DNSAction.Refused, 60)')
    console(d, 'addDynBlockSMT({"json.example.test."}, "smt reason", 30)')
    query(d.port, "127.0.0.50")
    req = urllib.request.Request("http://127.0.0.1:%d/jsonstat?command=dynblocklist" % port,
                                 headers={"X-API-Key": API_KEY})
    j = json.loads(urllib.request.urlopen(req, timeout=5).read())
    assert set(j) == {"127.0.0.50/32", "json.example.test."}
    nm = j["127.0.0.50/32"]
    assert set(nm) == {"reason", "seconds", "blocks", "action", "warning"}
    assert nm["reason"] == "json reason" and nm["action"] == "Send Refused"
    assert nm["blocks"] == 1 and nm["warning"] is False and 55 <= nm["seconds"] <= 60
    smt = j["json.example.test."]
    assert set(smt) == {"reason", "seconds", "blocks", "action"}  # no "warning" (dnsdist)
    assert smt["action"] == "Drop"
    req = urllib.request.Request("http://127.0.0.1:%d/metrics" % port,
                                 headers={"X-API-Key": API_KEY})
    metrics = urllib.request.urlopen(req, timeout=5).read().decode()
    assert re.search(r"^dnsdist_dyn_blocked 1$", metrics, re.M), metrics
    assert re.search(r"^dnsdist_dyn_block_nmg_size 1$", metrics, re.M)


def _norm_show(text):
    """showDynBlocks lines with the Seconds column blanked (time passes)."""
    out = []
    for l in text.rstrip("\n").split("\n"):
        if l.startswith("What"):
            out.append(l)
        else:
            out.append(l[:25] + "   " + l[33:])
    return out


COMPAT_CMDS = [
    'addDynBlocks({[newCA("127.0.0.2")]=1}, "some reason", 60, DNSAction.Refused)',
    'addDynBlocks({[newCA("2001:db8::1")]=1}, "v6 reason", 30)',
    'addDynBlocks({[newCA("127.0.0.3")]=1}, "nx reason", 30, DNSAction.Nxdomain)',
    'addDynBlockSMT({"bad.example.", "Other.Example"}, "smt reason", 45, DNSAction.Truncate)',
]


@pytest.mark.skipif(not os.access(DNSDIST, os.X_OK), reason="no dnsdist binary")
def test_same_as_dnsdist(dnslb, responder, tmp_path):
    """showDynBlocks(), the dynblocklist JSON and toString() against dnsdist 1.7.3."""
    outs = {}
    for impl in ("dnslb", "dnsdist"):
        port = free_port()
        body = conf(responder, "", web_port=port, console=impl == "dnslb")
        d = dnslb(body, impl=impl, name="d-" + impl)
        exe = DNSDIST if impl == "dnsdist" else None
        for c in COMPAT_CMDS:
            rc, out = console(d, c, exe)
            assert rc == 0, out
        rc, show = console(d, "showDynBlocks()", exe)
        show = "\n".join(l for l in show.split("\n") if "plain-text" not in l)
        req = urllib.request.Request("http://127.0.0.1:%d/jsonstat?command=dynblocklist" % port,
                                     headers={"X-API-Key": API_KEY})
        j = json.loads(urllib.request.urlopen(req, timeout=5).read())
        rc, ts = console(d, 'g = dynBlockRulesGroup() '
                         'g:setQueryRate(20, 10, "Exceeded query rate", 60) '
                         'g:setRCodeRate(DNSRCode.NXDOMAIN, 5, 10, "nx", 60, DNSAction.Refused, 3) '
                         'g:setRCodeRatio(DNSRCode.SERVFAIL, 0.2, 10, "sf ratio", 60, 20) '
                         'g:setQTypeRate(DNSQType.ANY, 5, 10, "any", 60) '
                         'g:setResponseByteRate(10000, 10, "bytes", 60, DNSAction.Drop, 5000) '
                         'g:excludeRange({"10.0.0.0/8"}) '
                         'g:excludeDomains({"ok.example."}) '
                         'return g:toString()', exe)
        ts = "\n".join(l for l in ts.split("\n") if "plain-text" not in l)
        outs[impl] = (_norm_show(show), j, ts)
    assert sorted(outs["dnslb"][0]) == sorted(outs["dnsdist"][0])
    for v in (outs["dnslb"][1], outs["dnsdist"][1]):
        for e in v.values():
            e["seconds"] = 0
    assert outs["dnslb"][1] == outs["dnsdist"][1]
    assert outs["dnslb"][2].strip() == outs["dnsdist"][2].strip()
