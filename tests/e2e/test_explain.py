"""explainQuery(): a dry run of a query through the ACL, the rules, the pool
and policy, and the cache (docs/rules.md, "Explaining a query").

Called from the config (its output goes to stdout like print()); the
console will call the same function.
"""

import pytest

import re

from dnslbtest import lua_server, udp_query

pytestmark = pytest.mark.dnslb_only("explainQuery is dnslb's")


def conf_for(r):
    return (lua_server(r, name="main") + lua_server(r, name="other", pool="abuse") +
            'pc = newPacketCache(100)\n'
            'getPool(""):setCache(pc)\n'
            'addAction("blocked.explain.test.", RCodeAction(DNSRCode.REFUSED), {name="block"})\n'
            'addAction(QTypeRule(DNSQType.TXT), PoolAction("abuse"))\n'
            'addAction(MaxQPSIPRule(10), DropAction())\n'
            'addAction(AllRule(), SetTagAction("seen", "1"))\n'
            'addAction(TagRule("seen", "1"), NoneAction())\n')


def test_explain_rules_pool_server(dnslb, responder):
    conf = conf_for(responder) + (
        'explainQuery("www.blocked.explain.test.", "A", "127.0.0.1")\n'
        'explainQuery("x.explain.test.", DNSQType.TXT, "127.0.0.1")\n'
        'explainQuery("y.explain.test.", "A", "192.0.2.1")\n'
        'explainQuery("z.explain.test.", "A", "127.0.0.1", {dnssec=true})\n')
    d = dnslb(conf)
    out = d.output()
    # rule 0 matched and answered: nothing after it was evaluated
    assert "#0 block qname in blocked.explain.test.: MATCH -> set rcode 5: stop: answered locally" in out
    assert "Result: answered by a rule (rcode 5" in out
    # TXT: rule 1 chose the pool and stopped
    assert "#1 qtype==TXT: MATCH -> to pool abuse: stop: forward" in out
    assert 'Pool: "abuse", policy leastOutstanding, 1 of 1 server(s) up' in out
    assert "Server: other (" in out
    assert "Cache: the pool has no packet cache" in out
    # rate limits are not evaluated (no token is taken), tags set by a rule are seen later
    assert "not evaluated here (rate limit, probability or Lua" in out
    line3 = out.split("  #3 ", 1)[1].split("\n", 1)[0]
    line4 = out.split("  #4 ", 1)[1].split("\n", 1)[0]
    assert "MATCH" in line3 and line3.endswith("continue with the next rule"), line3
    assert "MATCH" in line4, line4
    # a client outside the ACL stops at the ACL
    assert "ACL: the client is not in the ACL: dropped" in out


def test_explain_sees_the_cache(dnslb, responder):
    conf = conf_for(responder) + (
        'function maintenance()\n'
        '  if not done and getServer(0):getQueries() > 0 then\n'
        '    done = true\n'
        '    explainQuery("cached.explain.test.", "A", "127.0.0.1")\n'
        '  end\n'
        'end\n'
        'explainQuery("cached.explain.test.", "A", "127.0.0.1")\n')
    d = dnslb(conf)
    out = d.output()
    assert "Cache: no fresh answer (the query goes to a server)" in out
    assert 'Pool: "", policy leastOutstanding' in out
    assert "Server: main (" in out
    assert udp_query(d.port, "cached.explain.test.") is not None
    assert d.wait_line(lambda l: "Cache: holds a fresh answer" in l, timeout=5) is not None
    # nothing explainQuery did reached the backend
    assert len([q for q in responder.client_queries()
                if q.qname.lower() == "cached.explain.test."]) == 1


def test_explain_first_available_with_qps(dnslb, responder):
    """firstAvailable reads each server's qps window: explainQuery gives the
    policy a view of fresh windows (no worker, no event loop)."""
    conf = (lua_server(responder, name="first", qps=100) + lua_server(responder, name="second") +
            'setServerPolicy(firstAvailable)\n'
            'explainQuery("fa.explain.test.", "A", "127.0.0.1")\n')
    d = dnslb(conf)
    out = d.output()
    assert "policy firstAvailable" in out, out
    assert "Server: first (" in out, out
    assert udp_query(d.port, "fa.explain.test.") is not None


@pytest.mark.parametrize("policy", ["whashed", "chashed"])
def test_explain_hashed_pick_is_the_workers(dnslb, make_responder, policy):
    """whashed and chashed depend on the name only (nothing in flight): the
    server explainQuery names is the one the workers send the query to."""
    rs = {n: make_responder() for n in ("a", "b", "c")}
    names = ["h%d.explain.test." % i for i in range(12)]
    conf = "".join(lua_server(r, name=n, weight=w)
                   for (n, r), w in zip(rs.items(), (1, 2, 3))) + \
        "setServerPolicy(%s)\n" % policy + \
        "".join('explainQuery("%s", "A", "127.0.0.1")\n' % n for n in names)
    d = dnslb(conf)
    out = d.output()
    picks = re.findall(r"^Server: (\w+) \(", out, re.M)
    assert len(picks) == len(names), out
    for n in names:
        assert udp_query(d.port, n) is not None
    for n, server in zip(names, picks):
        got = {s for s, r in rs.items() if n in {q.qname.lower() for q in r.client_queries()}}
        assert got == {server}, (n, server, got, out)
