"""Live reload (SIGHUP; reload() in the console): the config file is
evaluated again and its rules (every chain at once), Lua code (new worker
states), servers, pools, caches (unchanged ones keep their entries), ACL,
policies and settings replace the running ones; in-flight queries finish;
a failed reload keeps the running configuration and says why (file:line).
docs/rules.md, "Live reload".
"""

import re
import signal
import threading
import time

import pytest

from dnslbtest import UdpClient, console, console_head, lua_server, make_query, parse, udp_query

pytestmark = pytest.mark.dnslb_only("dnsdist has no reload (SIGHUP ends it)")


def rewrite(d, body):
    d.body = body
    with open(d.conf_path, "w") as f:
        f.write(d.render_conf())


def reload_and_wait(d, ok=True):
    start = len(d.lines)
    d.send_signal(signal.SIGHUP)
    pat = r"Reloaded '" if ok else r"Reload of '.*' failed"
    i = d.wait_line(pat, start=start, timeout=10)
    assert i is not None, "no reload line in:\n" + d.output()
    return d.lines[i]


def rcode(d, name, qtype="A"):
    r = udp_query(d.port, name, qtype)
    assert r is not None, "no answer for " + name
    return r.rcode()


def conf_a(r):
    return (lua_server(r, name="b") +
            'local helper = {}\n'
            'function helper.answer(dq) return DNSAction.Spoof, "192.0.2.1" end\n'
            'addAction("blocked.reload.test.", RCodeAction(DNSRCode.REFUSED))\n'
            'addAction("lua.reload.test.", LuaAction(function(dq) return helper.answer(dq) end))\n')


def conf_b(r):
    return (lua_server(r, name="b") +
            'local helper = {}\n'
            'function helper.answer(dq) return DNSAction.Spoof, "192.0.2.2" end\n'
            'addAction("blocked.reload.test.", RCodeAction(DNSRCode.NXDOMAIN))\n'
            'addAction("lua.reload.test.", LuaAction(function(dq) return helper.answer(dq) end))\n'
            'addResponseAction(AllRule(), LimitTTLResponseAction(0, 7))\n')


def a_of(d, name):
    r = udp_query(d.port, name)
    assert r is not None
    return [rd.address for rrs in r.answer for rd in rrs]


def test_reload_swaps_rules_and_lua(dnslb, responder):
    d = dnslb(conf_a(responder), args=("--workers", "2"))
    assert rcode(d, "x.blocked.reload.test.") == 5
    assert a_of(d, "lua.reload.test.") == ["192.0.2.1"]
    rewrite(d, conf_b(responder))
    reload_and_wait(d)
    assert rcode(d, "x.blocked.reload.test.") == 3
    # every worker now runs the new Lua code (several queries: both workers)
    for _ in range(20):
        assert a_of(d, "lua.reload.test.") == ["192.0.2.2"]
    r = udp_query(d.port, "ttl.reload.test.")
    assert r is not None and all(rrs.ttl <= 7 for rrs in r.answer)
    assert d.stats()["lua-errors"] == 0


def test_failed_reload_keeps_running_config(dnslb, responder):
    d = dnslb(conf_a(responder))
    rewrite(d, conf_a(responder) + 'addAction(QTypeRule(DNSQType.A), NoSuchAction())\n')
    line = reload_and_wait(d, ok=False)
    assert "running configuration is kept" in line
    # the setLocal() line, configuration A, then the bad line
    assert "%s:%d:" % (d.conf_path, 1 + conf_a(responder).count("\n") + 1) in line, line
    assert rcode(d, "x.blocked.reload.test.") == 5
    assert a_of(d, "lua.reload.test.") == ["192.0.2.1"]


def structure_conf(a, b_or_c, extra_pool_server=None, cache_entries=10000, weight=1):
    """Servers, pools and a cache: `sa` in the default pool with a cache,
    `srv` (b or c) in pool p (rule p.reload.test.), optionally one in pool q."""
    r, name = b_or_c
    s = ('sa = newServer({address="%s", name="a", weight=%d})\n' % (a.address, weight) +
         'srv = newServer({address="%s", name="%s", pool="p"})\n' % (r.address, name) +
         'pc = newPacketCache(%d)\n' % cache_entries +
         'getPool(""):setCache(pc)\n'
         'addAction("p.reload.test.", PoolAction("p"))\n'
         'addAction("who.reload.test.", LuaAction(function(dq)\n'
         '  if srv:getName() == "%s" and srv:isUp() then\n'
         '    return DNSAction.Spoof, "192.0.2.77" end\n'
         '  return DNSAction.Refused end))\n' % name)
    if extra_pool_server is not None:
        s += lua_server(extra_pool_server, name="d", pool="q")
        s += 'addAction("q.reload.test.", PoolAction("q"))\n'
    return s


def names_seen(r, suffix):
    return [q.qname.lower() for q in r.client_queries() if q.qname.lower().endswith(suffix)]


def test_reload_changes_servers_pools_and_caches(dnslb, make_responder):
    a, b, c, dd = (make_responder() for _ in range(4))
    d = dnslb(structure_conf(a, (b, "b")), args=("--workers", "2"))
    assert rcode(d, "x.p.reload.test.") == 0 and names_seen(b, "p.reload.test.")
    assert rcode(d, "cached.reload.test.") == 0
    assert rcode(d, "cached.reload.test.") == 0
    assert len(names_seen(a, "cached.reload.test.")) == 1        # the second one was a hit
    for _ in range(10):
        assert a_of(d, "who.reload.test.") == ["192.0.2.77"]

    # b leaves, c joins pool p, pool q appears with d, a's weight changes; same cache
    rewrite(d, structure_conf(a, (c, "c"), extra_pool_server=dd, weight=5))
    line = reload_and_wait(d)
    assert "servers, pools, caches" in line
    # c's first health check, then it serves pool p; b gets nothing more
    assert d.wait_line(r"Marking downstream c \(.*\) as 'up'", timeout=5) is not None
    assert d.wait_line(r"downstream server b is no longer configured", timeout=5) is not None
    nb = len(b.client_queries())
    for i in range(10):
        assert rcode(d, "y%d.p.reload.test." % i) == 0
        assert rcode(d, "z%d.q.reload.test." % i) == 0
    assert len(names_seen(c, "p.reload.test.")) == 10
    assert len(names_seen(dd, "q.reload.test.")) == 10
    assert len([q for q in b.client_queries()]) == nb
    # the unchanged cache kept its entry: still a hit
    assert rcode(d, "cached.reload.test.") == 0
    assert len(names_seen(a, "cached.reload.test.")) == 1
    # Lua objects of the config state and of both workers' states name the new servers
    for _ in range(10):
        assert a_of(d, "who.reload.test.") == ["192.0.2.77"]
    assert d.stats()["lua-errors"] == 0

    # a cache of another size is a new (empty) cache
    rewrite(d, structure_conf(a, (c, "c"), extra_pool_server=dd, weight=5, cache_entries=20000))
    reload_and_wait(d)
    assert rcode(d, "cached.reload.test.") == 0
    assert len(names_seen(a, "cached.reload.test.")) == 2


def tcp_answers(port, name):
    from dnslbtest import tcp_query
    try:
        r = tcp_query(port, name, timeout=2.0)
    except OSError:
        return False
    return r is not None and r.rcode() == 0


def test_reload_adds_and_removes_listeners(dnslb, responder):
    import socket
    from dnslbtest import free_port
    q = free_port()
    extra = 'addLocal("127.0.0.1:%d")\n' % q
    d = dnslb(conf_a(responder), args=("--workers", "2"))
    assert udp_query(q, "before.listen.reload.test.", timeout=0.5) is None

    rewrite(d, conf_a(responder) + extra)
    reload_and_wait(d)
    assert d.wait_line(r"Listening on 127\.0\.0\.1:%d" % q, timeout=2) is not None
    for i in range(10):     # both workers' sockets answer (SO_REUSEPORT spreads the ports)
        assert rcode_at(q, "n%d.listen.reload.test." % i) == 0
    assert tcp_answers(q, "tcp.listen.reload.test.")

    # removed: nothing answers there any more, the first listener still does
    rewrite(d, conf_a(responder))
    reload_and_wait(d)
    assert d.wait_line(r"no longer listening on 127\.0\.0\.1:%d" % q, timeout=2) is not None
    assert udp_query(q, "gone.listen.reload.test.", timeout=0.5) is None
    assert not tcp_answers(q, "gone-tcp.listen.reload.test.")
    assert rcode(d, "still.listen.reload.test.") == 0

    # and back again (its UDP socket was still open for answers in flight)
    rewrite(d, conf_a(responder) + extra)
    reload_and_wait(d)
    for i in range(10):
        assert rcode_at(q, "back%d.listen.reload.test." % i) == 0
    assert tcp_answers(q, "back-tcp.listen.reload.test.")

    # a listener that cannot be bound fails the reload; the running one stays
    busy = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    busy.bind(("127.0.0.1", 0))
    try:
        rewrite(d, conf_b(responder) + extra +
                'addLocal("127.0.0.1:%d")\n' % busy.getsockname()[1])
        line = reload_and_wait(d, ok=False)
        assert "could not open a new listener" in line, line
    finally:
        busy.close()
    assert rcode(d, "x.blocked.reload.test.") == 5      # still configuration A
    assert rcode_at(q, "kept.listen.reload.test.") == 0


def rcode_at(port, name):
    r = udp_query(port, name)
    assert r is not None, "no answer for %s on port %d" % (name, port)
    return r.rcode()


def test_failed_reload_with_a_new_server_keeps_everything(dnslb, make_responder):
    """A new server whose sockets cannot be opened (a non-local source)
    fails the reload: the running config stays, rules included."""
    a, b = make_responder(), make_responder()
    d = dnslb(conf_a(a))
    # the failure comes after the new snapshot was built: it is never published
    rewrite(d, conf_b(a) + lua_server(b, name="bad", source="192.0.2.77") +
            'setACL({"192.0.2.0/24"})\nsetMaxUDPAnswerSize(512)\n')
    line = reload_and_wait(d, ok=False)
    assert "could not open sockets" in line, line
    assert rcode(d, "x.blocked.reload.test.") == 5
    assert rcode(d, "fine.reload.test.") == 0
    assert b.client_queries() == []
    assert d.stats()["acl-drops"] == 0


def test_reload_acl(dnslb, responder):
    d = dnslb(conf_a(responder))
    assert udp_query(d.port, "acl.reload.test.") is not None
    rewrite(d, conf_a(responder) + 'setACL({"192.0.2.0/24"})\n')
    reload_and_wait(d)
    assert udp_query(d.port, "acl.reload.test.", timeout=1.0) is None
    assert d.stats()["acl-drops"] >= 1


@pytest.mark.parametrize("swap_servers", [False, True])
def test_reload_under_load_loses_nothing(dnslb, make_responder, swap_servers):
    responder, other = make_responder(), make_responder()
    confs = [conf_b(responder), conf_a(responder)]
    if swap_servers:
        # a second server that comes and goes with every reload
        confs = [confs[0] + lua_server(other, name="x"), confs[1]]
    d = dnslb(conf_a(responder), args=("--workers", "2"))
    stop = threading.Event()
    results = {"sent": 0, "lost": 0, "bad": 0}

    def load():
        with UdpClient(d.port) as c:
            n = 0
            while not stop.is_set():
                name = ("lua.reload.test." if n % 2 else "q%d.load.reload.test." % n)
                q = make_query(name)
                c.send(q.to_wire())
                results["sent"] += 1
                while True:
                    w = c.recv(2.0)
                    if w is None:
                        results["lost"] += 1
                        break
                    m = parse(w)
                    if m.id == q.id:
                        if m.rcode() != 0:
                            results["bad"] += 1
                        break
                n += 1

    t = threading.Thread(target=load)
    t.start()
    try:
        for i in range(6):
            time.sleep(0.3)
            rewrite(d, confs[i % 2])
            reload_and_wait(d)
    finally:
        stop.set()
        t.join(10)
    assert results["sent"] > 50
    assert results["lost"] == 0, results
    assert results["bad"] == 0, results
    assert d.stats()["lua-errors"] == 0
    if swap_servers:
        assert other.client_queries(), "the server that came and went got no query"


def test_acl_changed_at_runtime_is_published(dnslb, responder):
    """setACL at runtime (here from maintenance(), as the console would) is
    seen by the workers: they read a published copy, never the one being
    edited."""
    conf = (conf_a(responder) +
            'local n = 0\n'
            'function maintenance()\n'
            '  n = n + 1\n'
            '  if n == 2 then setACL({"192.0.2.0/24"}) infolog("acl changed") end\n'
            'end\n')
    d = dnslb(conf, args=("--workers", "2"))
    assert udp_query(d.port, "before.acl.reload.test.") is not None
    assert d.wait_line("acl changed", timeout=5) is not None
    assert udp_query(d.port, "after.acl.reload.test.", timeout=1.0) is None
    assert d.stats()["acl-drops"] >= 1


@pytest.mark.parametrize("tail", [
    'addAction(AllRule(), RCodeAction(DNSRCode.REFUSED))\n'
    'addAction(AllRule(), RCodeAction(DNSRCode.NXDOMAIN))\n'
    'mvRuleToTop()\n',
    'addAction(AllRule(), RCodeAction(DNSRCode.REFUSED))\n'
    'clearRules()\n'
    'setRules({newRuleAction(AllRule(), RCodeAction(DNSRCode.NXDOMAIN))})\n',
])
def test_reload_builds_the_same_chain_as_startup(dnslb, responder, tail):
    d = dnslb(lua_server(responder, name="b") + tail)
    assert rcode(d, "same.reload.test.") == 3
    reload_and_wait(d)
    assert rcode(d, "same.reload.test.") == 3


def test_many_reloads_with_a_lua_policy(dnslb, make_responder):
    """Lua policies of each reload reuse the slots of older generations:
    reloads never run out (40 here), and the policy keeps working."""
    a, b = make_responder(), make_responder()
    conf = (lua_server(a, name="a") + lua_server(b, name="b") +
            'setServerPolicyLua("second", function(servers, dq) return servers[2] end)\n')
    d = dnslb(conf)
    for i in range(40):
        reload_and_wait(d)
    assert rcode(d, "many.reload.test.") == 0
    assert any(q.qname.lower() == "many.reload.test." for q in b.client_queries())
    assert not any(q.qname.lower() == "many.reload.test." for q in a.client_queries())
    assert d.stats()["lua-errors"] == 0


def test_response_rule_drop_over_tcp_closes_the_connection(dnslb, responder):
    """A response rule that drops the answer to a TCP client closes that
    connection (as a dropped query does) instead of leaving it hanging."""
    import socket
    import struct
    conf = (lua_server(responder, name="b") +
            'addResponseAction(QNameRule("dropme.reload.test."), DropResponseAction())\n')
    d = dnslb(conf)
    q = make_query("dropme.reload.test.").to_wire()
    s = socket.create_connection(("127.0.0.1", d.port), timeout=3)
    try:
        s.sendall(struct.pack("!H", len(q)) + q)
        assert s.recv(2) == b""      # closed, no answer
    finally:
        s.close()
    assert rcode(d, "fine.reload.test.") == 0


def test_servfail_from_a_response_rule_echoes_the_question(dnslb, responder):
    conf = (lua_server(responder, name="b") +
            'addResponseAction(AllRule(), LuaResponseAction(function(dr)'
            ' return DNSResponseAction.ServFail end))\n')
    d = dnslb(conf)
    r = udp_query(d.port, "Sf.Reload.Test.")
    assert r is not None and r.rcode() == 2
    assert len(r.question) == 1 and r.question[0].name.to_text() == "Sf.Reload.Test."


def test_reload_from_lua(dnslb, responder):
    """reload() in the config state (what the console calls): it returns
    true; the state that called it stays valid until the call returns."""
    conf = (conf_a(responder) +
            'local n = 0\n'
            'function maintenance()\n'
            '  n = n + 1\n'
            '  if n == 2 and not reloaded then\n'
            '    reloaded = true\n'
            '    local ok, err = reload()\n'
            '    infolog("reload() gave " .. tostring(ok) .. " " .. tostring(err))\n'
            '  end\n'
            'end\n')
    d = dnslb(conf)
    assert d.wait_line("reload\\(\\) gave true nil", timeout=6) is not None, d.output()
    assert rcode(d, "x.blocked.reload.test.") == 5


def rule_matches(d):
    """{rule text (name, else selector -> action): matches} from showRules()."""
    out = console(d, "showRules()")
    rows = {}
    for line in out.splitlines():
        m = re.match(r"^\s*(\d+)\s+(\S*)\s+(\d+)\s+(.*?)\s{2,}(.*?)\s*$", line)
        if m is None:
            continue
        rows[m.group(2) or "%s -> %s" % (m.group(4), m.group(5))] = int(m.group(3))
    return rows


def counter_conf(r, head, changed_rcode, extra=""):
    return (head + lua_server(r, name="b") + extra +
            'addAction("kept.counter.test.", RCodeAction(DNSRCode.REFUSED), {name="kept"})\n'
            'addAction("unnamed.counter.test.", RCodeAction(DNSRCode.NXDOMAIN))\n'
            'addAction("changed.counter.test.", RCodeAction(DNSRCode.%s))\n' % changed_rcode)


def test_unchanged_rules_keep_their_counters(dnslb, responder):
    """A reload's rule that repeats a running one (same name, selector and
    action) keeps its match counter, wherever it moved in the chain; a
    changed rule starts again at 0."""
    head = console_head()
    d = dnslb(counter_conf(responder, head, "REFUSED"), args=("--workers", "2"))
    for _ in range(3):
        assert rcode(d, "kept.counter.test.") == 5
        assert rcode(d, "unnamed.counter.test.") == 3
        assert rcode(d, "changed.counter.test.") == 5
    before = rule_matches(d)
    assert before["kept"] == 3, before
    # a new rule first: every kept rule moves one place down
    rewrite(d, counter_conf(responder, head, "NOTIMP",
                            'addAction("new.counter.test.", RCodeAction(DNSRCode.REFUSED))\n'))
    reload_and_wait(d)
    assert rcode(d, "changed.counter.test.") == 4
    after = rule_matches(d)
    assert after["kept"] == 3, after
    unnamed = [k for k in after if k.startswith("qname in unnamed.counter.test.")]
    assert len(unnamed) == 1 and after[unnamed[0]] == 3, after
    changed = [k for k in after if k.startswith("qname in changed.counter.test.")]
    assert len(changed) == 1 and after[changed[0]] == 1, after
    assert rcode(d, "kept.counter.test.") == 5
    assert rule_matches(d)["kept"] == 4
