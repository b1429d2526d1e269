"""Lua server policies: newServerPolicy, setServerPolicyLua,
setPoolServerPolicyLua (docs/server-selection.md, "Lua policies").

A policy function f(servers, dq) runs in each worker's own Lua state and
returns a Server of `servers`, its 1-based position, or nil. Which backend
saw which name is read from the responders; no timing assertions.
"""

import pytest

from dnslbtest import UdpClient, lua_server, make_query, parse

pytestmark = pytest.mark.dnslb_only("Lua policies run in per-worker states in dnslb")


def ask_all(port, names, timeout=2.0):
    """{name: rcode or None}, one query at a time."""
    out = {}
    with UdpClient(port) as c:
        for n in names:
            q = make_query(n)
            c.send(q.to_wire())
            out[n] = None
            while True:
                d = c.recv(timeout)
                if d is None:
                    break
                m = parse(d)
                if m.id == q.id:
                    out[n] = m.rcode()
                    break
    return out


def seen_names(r):
    return {q.qname.lower() for q in r.client_queries()}


def test_set_server_policy_lua_routes_by_name(dnslb, make_responder):
    a, b = make_responder(), make_responder()
    conf = (lua_server(a, name="a") + lua_server(b, name="b") +
            'local function route(servers, dq)\n'
            '  if dq.qname:isPartOf(newDNSName("to-b.pol.test.")) then return servers[2] end\n'
            '  return 1\n'
            'end\n'
            'setServerPolicyLua("byname", route)\n'
            'showServerPolicy()\n')
    d = dnslb(conf, args=("--workers", "2"))
    # showServerPolicy() is console output: at config time it goes nowhere (dnsdist 1.7.3)
    assert "byname" not in d.output()
    names_a = ["n%d.to-a.pol.test." % i for i in range(20)]
    names_b = ["n%d.to-b.pol.test." % i for i in range(20)]
    res = ask_all(d.port, names_a + names_b)
    assert all(rc == 0 for rc in res.values()), res
    assert set(names_b) <= seen_names(b) and not (set(names_b) & seen_names(a))
    assert set(names_a) <= seen_names(a) and not (set(names_a) & seen_names(b))


def test_new_server_policy_object_and_pool_policy(dnslb, make_responder):
    a, b, c = make_responder(), make_responder(), make_responder()
    conf = (lua_server(a, name="a") + lua_server(b, name="b", pool="two") +
            lua_server(c, name="c", pool="two") +
            'local last = newServerPolicy("last", function(servers, dq) return servers[#servers] end)\n'
            'print("policy name " .. last.name)\n'
            'print("policy fn " .. type(last.policy))\n'
            'setPoolServerPolicyLua("second", function(servers, dq) return 2 end, "two")\n'
            'showPoolServerPolicy("two")\n'
            'setServerPolicy(last)\n'
            'addAction("two.pol.test.", PoolAction("two"))\n')
    d = dnslb(conf)
    out = d.output()
    assert "policy name last" in out and "policy fn function" in out
    assert "second" not in out      # showPoolServerPolicy(): console output, none at config time
    res = ask_all(d.port, ["x%d.def.pol.test." % i for i in range(5)] +
                  ["x%d.two.pol.test." % i for i in range(5)])
    assert all(rc == 0 for rc in res.values()), res
    # the default pool has one server; pool "two" picks its 2nd member (c)
    assert {"x%d.two.pol.test." % i for i in range(5)} <= seen_names(c)
    assert not any(n.endswith("two.pol.test.") for n in seen_names(b))
    assert {"x%d.def.pol.test." % i for i in range(5)} <= seen_names(a)


def test_lua_policy_nil_means_no_server_and_error_falls_back(dnslb, make_responder):
    a = make_responder()
    conf = (lua_server(a, name="a") +
            'setServFailWhenNoServer(true)\n'
            'setServerPolicyLua("picky", function(servers, dq)\n'
            '  local n = dq.qname:toString()\n'
            '  if n:find("^none%.") then return nil end\n'
            '  if n:find("^boom%.") then error("policy failed") end\n'
            '  return servers[1]\n'
            'end)\n')
    d = dnslb(conf)
    res = ask_all(d.port, ["none.pol.test.", "boom.pol.test.", "fine.pol.test."])
    assert res["none.pol.test."] == 2          # no server: SERVFAIL (setServFailWhenNoServer)
    assert res["boom.pol.test."] == 0          # error: leastOutstanding decided
    assert res["fine.pol.test."] == 0
    st = d.stats()
    assert st["no-policy"] >= 1
    assert st["lua-errors"] >= 1
    assert "none.pol.test." not in seen_names(a)


def test_lua_policy_gets_a_fresh_servers_table(dnslb, make_responder):
    """A policy that edits its servers table changes nothing for the next
    query (dnsdist builds the table for every call)."""
    rs = [make_responder() for _ in range(3)]
    conf = ("".join(lua_server(r, name="b%d" % i) for i, r in enumerate(rs)) +
            'setServerPolicyLua("eat", function(servers, dq)\n'
            '  table.remove(servers, 1)\n'
            '  return servers[1]\n'
            'end)\n')
    d = dnslb(conf)
    names = ["n%d.fresh.pol.test." % i for i in range(6)]
    res = ask_all(d.port, names)
    assert all(rc == 0 for rc in res.values()), res
    assert set(names) <= seen_names(rs[1])      # always the 2nd server
    assert not (set(names) & (seen_names(rs[0]) | seen_names(rs[2])))


def test_lua_policy_under_memory_pressure_does_not_abort(dnslb, responder):
    """A worker state at its memory cap: the policy's call fails (counted),
    the process keeps serving."""
    conf = (lua_server(responder, name="a") +
            'setLuaMemoryLimit("1M")\n'
            'hog = {}\n'
            'addAction(AllRule(), LuaAction(function(dq)\n'
            '  pcall(function() while true do hog = {next = hog, pad = string.rep("x", 1000)} end end)\n'
            '  return DNSAction.None\n'
            'end))\n'
            'setServerPolicyLua("p", function(servers, dq) return servers[1] end)\n')
    d = dnslb(conf)
    ask_all(d.port, ["m%d.mem.pol.test." % i for i in range(5)])
    assert d.alive()
    st = d.stats()
    assert st["queries"] >= 5
