"""Lua: the standard libraries of the configuration (io, os, require), the
Lua 5.1/LuaJIT names configs use (unpack, loadstring, table.getn, bit), and
dnsdist's FFI rules and actions (LuaFFIRule, LuaFFIAction, ...) run by
dnslb's `ffi` module over its dq object (docs/lua.md)."""

import os

from diffharness import VOLATILE_STATS, build_query, check_config, known, same_check_config

A, AAAA, TXT, MX = 1, 28, 16, 15

LIBS = r'''
print(type(io), type(os), type(require), type(package), type(coroutine), type(debug))
print(type(io.open), type(io.lines), type(os.getenv), type(os.time()), type(os.date))
for line in io.lines("list.txt") do print("list", line) end
local f = assert(io.open("list.txt"))
print("first", f:read("*l"))
f:close()
print(io.open("no-such-file.txt"))
print(os.getenv("DNSLB_DIFF_NO_SUCH_VARIABLE"))
print("local", require("localmod").answer)
package.path = package.path .. ";./lib/?.lua"
local m = require "mymodule"
print("module", m.name, m.double(21))
print(require("mymodule") == m)
print(pcall(require, "no_such_module_x"))
local co = coroutine.wrap(function(a) coroutine.yield(a + 1) end)
print("coroutine", co(1))
'''

FILES = {
    "list.txt": "ads.example.\ntracker.example.\n",
    "lib/mymodule.lua": 'return { name = "mymodule", double = function(x) return 2 * x end }\n',
    "localmod.lua": 'return { answer = 42 }\n',
}


def test_io_os_require_at_config_time(workdir):
    out = same_check_config(workdir, LIBS.replace("print(pcall(require, \"no_such_module_x\"))\n", ""),
                            extra_files=FILES)
    assert out[0] == 0 and "module\tmymodule\t42" in out[1]


def test_require_of_a_missing_module(workdir):
    # both fail with Lua's "module ... not found" listing the paths tried:
    # LuaJIT's default package.path is not Lua 5.4's
    known("The default package.path and package.cpath")
    r = check_config(workdir, 'require "no_such_module_x"\n')
    for impl in ("dnsdist", "dnslb"):
        rc, out, err = r[impl]
        assert rc == 1 and "module 'no_such_module_x' not found" in out + err
    assert "no file '/usr/share/luajit-2.1.0-beta3/no_such_module_x.lua'" in r["dnsdist"][1]
    assert "no file '/usr/local/share/lua/5.4/no_such_module_x.lua'" in r["dnslb"][1]


def test_os_getenv_and_time(workdir, monkeypatch):
    monkeypatch.setenv("DNSLB_DIFF_BACKEND", "192.0.2.53")
    same_check_config(workdir, 'print(os.getenv("DNSLB_DIFF_BACKEND"))\n'
                      'print(os.time() > 1600000000, os.date("%Y") >= "2024")\n'
                      'print(os.time({year=2020, month=1, day=1, hour=0}) - os.time({year=2019, '
                      'month=12, day=31, hour=0}))\n'
                      'setACL({os.getenv("DNSLB_DIFF_BACKEND") .. "/32"})\n')


LUA51 = r'''
print(type(unpack), type(loadstring), type(table.getn), type(table.maxn), type(math.pow))
print(unpack({1, 2, 3}))
print(select("#", unpack({1, nil, 3}, 1, 3)))
print(loadstring("return 6 * 7")())
print(loadstring("syntax error here") == nil)
print(table.getn({1, 2, 3}), table.getn({}), table.maxn({[7] = 1, 2}), table.maxn({}))
print(math.pow(2, 10), math.pow(2, 0.5), math.log10(1000), math.ldexp(0.75, 4))
print(math.frexp(8))
print(math.frexp(-3))
print(math.cosh(0), math.sinh(0), math.tanh(0), math.tanh(100))
table.foreach({k = "v"}, print)
table.foreachi({"x", "y"}, print)
print(type(gcinfo()))
print(bit.band(0xff, 0x0f, 0x3c), bit.bor(1, 2, 4), bit.bxor(3, 1), bit.bnot(0), bit.bnot(-1))
print(bit.lshift(1, 31), bit.lshift(1, 32), bit.lshift(3, 30), bit.rshift(-1, 28))
print(bit.rshift(0x80000000, 31), bit.arshift(-256, 4), bit.arshift(0x7fffffff, 30))
print(bit.tobit(0xffffffff), bit.tobit(2^32 + 5), bit.tobit(-1), bit.tobit(0x80000000))
print(bit.tohex(255), bit.tohex(-1, -4), bit.tohex(0x12345678, 2), bit.tohex(1, 3))
print(bit.rol(0x12345678, 8), bit.ror(0x12345678, 8), bit.bswap(0x12345678))
print(bit.rol(1, 0), bit.ror(1, 0), bit.rol(0x80000001, 1), bit.bswap(0xff))
print(require("bit") == bit)
'''


def test_lua51_names(workdir):
    same_check_config(workdir, LUA51)


def test_no_jit_table(workdir):
    known("No jit, setfenv, getfenv, module or newproxy")
    r = check_config(workdir, "print(type(jit), type(setfenv), type(getfenv), type(module), "
                              "type(newproxy))\n")
    assert r["dnsdist"] == (0, "table\tfunction\tfunction\tfunction\tfunction\n"
                               "Configuration 'dnsdist.conf' OK!\n", "")
    assert r["dnslb"] == (0, "nil\tnil\tnil\tnil\tnil\nConfiguration 'dnsdist.conf' OK!\n", "")


# Counters that differ for reasons outside Lua, left to their own areas of
# work: the kernel's listen queue (system-wide), and how latency-count,
# responses and the frontend-<rcode> counters count self-answered queries
# and responses edited or dropped by response rules (dnsdist 1.7.3 counts
# the backend's rcode, before the response rules change it).
NOT_LUA_STATS = {"tcp-listen-overflows", "latency-count", "responses", "frontend-noerror",
                 "frontend-nxdomain"}


def same_counters(p):
    """The counters both have, compared. (p.stats() also wants every name of
    dnsdist's, which is the counters' area of work, not this file's.)"""
    a = p.parse_dumpstats(p.theirs.console("dumpStats()"))
    b = p.parse_dumpstats(p.ours.console("dumpStats()"))
    skip = VOLATILE_STATS | NOT_LUA_STATS
    diff = {k: (a[k], b[k]) for k in a if k in b and k not in skip and a[k] != b[k]}
    assert not diff, "counters differ (dnsdist, dnslb): %r" % diff


def prepare(workdir, files):
    """Write @files in the working directory of both daemons of the first pair."""
    for impl in ("dnsdist", "dnslb"):
        for rel, text in files.items():
            p = os.path.join(workdir, "p0", impl, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write(text)


def test_blocklist_from_a_file_and_a_module(pair, workdir, monkeypatch):
    """A SuffixMatchNode filled from a file (io.lines, relative to the working
    directory), a helper module found through package.path, an address from
    the environment: the rules built from them act the same in both."""
    monkeypatch.setenv("DNSLB_DIFF_SPOOF", "192.0.2.99")
    prepare(workdir, {
        "blocklist.txt": "# ads\nads.example.\n\ntracker.example.\nbad.test.\n",
        "refused.txt": "refused.example.\n",
        "lib/lists.lua": 'local M = {}\n'
                         'function M.load(path)\n'
                         '  local smn = newSuffixMatchNode()\n'
                         '  for line in io.lines(path) do\n'
                         '    if line ~= "" and line:sub(1, 1) ~= "#" then smn:add(line) end\n'
                         '  end\n'
                         '  return smn\n'
                         'end\n'
                         'return M\n',
    })
    body = r'''
newServer({address="@B0@"})
package.path = package.path .. ";./lib/?.lua"
local lists = require("lists")
local blocked = lists.load("blocklist.txt")
local f = assert(io.open("refused.txt", "r"))
local refused = newSuffixMatchNode()
refused:add(f:read("*l"))
f:close()
addAction(SuffixMatchNodeRule(blocked), DropAction())
addAction(LuaRule(function(dq) return refused:check(dq.qname) end), LuaAction(function() return DNSAction.Refused end))
addAction(QNameRule("env.example."), SpoofAction(os.getenv("DNSLB_DIFF_SPOOF")))
addAction(LuaRule(function(dq) return dq.qname:toString() == "mod.example." and lists.load ~= nil end),
          LuaAction(function() return DNSAction.Nxdomain end))
'''
    p = pair(body)
    for proto in ("udp", "tcp"):
        for name in ("www.ads.example.", "ads.example.", "tracker.example.", "a.bad.test.",
                     "refused.example.", "x.refused.example.", "env.example.", "mod.example.",
                     "www.example.test.", "ads.example.test."):
            p.query(build_query(name, qid=5), proto, timeout=0.5 if "example." in name else 2.0)
    same_counters(p)
    # the console runs in the config state: every library
    assert p.console('type(io.open) .. type(require) .. type(os.execute) .. select(2, unpack({1, 2}))') \
        == "functionfunctionfunction2\n"
    assert p.console('#io.open("blocklist.txt"):read("*a") .. tostring(require("lists") ~= nil)') \
        == "47true\n"


def test_rules_cannot_open_files(pair, workdir):
    """dnsdist lets a rule read files and run commands; dnslb's rules run on
    the workers, which must not block: io.open fails there, the action
    answers SERVFAIL. A handle opened at config time still works."""
    known("Rules cannot open files or run commands")
    prepare(workdir, {"answer.txt": "192.0.2.77\n"})
    body = r'''
newServer({address="@B0@"})
local fh = assert(io.open("answer.txt"))
addAction(QNameRule("open.example."), LuaAction(function(dq)
  local f = io.open("answer.txt")
  local a = f:read("*l")
  f:close()
  return DNSAction.Spoof, a
end))
addAction(QNameRule("handle.example."), LuaAction(function(dq)
  fh:seek("set")
  return DNSAction.Spoof, fh:read("*l")
end))
addAction(QNameRule("env.example."), LuaAction(function(dq)
  return DNSAction.Spoof, os.getenv("DNSLB_DIFF_UNSET") or "192.0.2.5"
end))
'''
    p = pair(body)
    p.query(build_query("handle.example."), "udp")
    p.query(build_query("env.example."), "udp")
    theirs, ours = p.answers(build_query("open.example."), "udp")
    assert theirs[3] & 0xf == 0 and theirs[6:8] == b"\0\1"      # NOERROR, one answer
    assert ours[3] & 0xf == 2                                   # SERVFAIL


# ---- FFI ----------------------------------------------------------------------

FFI = r'''
newServer({address="@B0@"})
local ffi = require("ffi")
local C = ffi.C

-- by qtype: TXT is refused
addAction(LuaFFIRule(function(dq)
  return C.dnsdist_ffi_dnsquestion_get_qtype(dq) == DNSQType.TXT
end), LuaAction(function() return DNSAction.Refused end))

-- by the raw qname (out arguments made by ffi.new)
local ref = ffi.new("const char *[1]")
local refLen = ffi.new("size_t[1]")
addAction(LuaFFIRule(function(dq)
  C.dnsdist_ffi_dnsquestion_get_qname_raw(dq, ref, refLen)
  return ffi.string(ref[0], refLen[0]) == "\3raw\7example\0"
end), LuaAction(function() return DNSAction.Nxdomain end))

-- qclass, opcode, tcp, length
addAction(LuaFFIRule(function(dq)
  return C.dnsdist_ffi_dnsquestion_get_qclass(dq) == DNSClass.CHAOS
end), LuaAction(function() return DNSAction.ServFail end))
addAction(AndRule({QNameRule("tcp.example."), LuaFFIRule(function(dq)
  return C.dnsdist_ffi_dnsquestion_get_tcp(dq)
end)}), LuaAction(function() return DNSAction.Refused end))
addAction(AndRule({QNameRule("len.example."), LuaFFIRule(function(dq)
  return C.dnsdist_ffi_dnsquestion_get_len(dq) > 40
end)}), LuaAction(function() return DNSAction.Drop end))

-- set_result and a returned DNSAction: a spoofed address
addAction(QNameRule("spoof.example."), LuaFFIAction(function(dq)
  local str = "192.0.2.42"
  C.dnsdist_ffi_dnsquestion_set_result(dq, str, #str)
  return DNSAction.Spoof
end))
addAction(QNameRule("copy.example."), LuaFFIAction(function(dq)
  local str = "192.0.2.43"
  local buf = ffi.new("char[?]", #str + 1)
  ffi.copy(buf, str)
  C.dnsdist_ffi_dnsquestion_set_result(dq, buf, #str)
  return DNSAction.Spoof
end))

-- the qname's hash picks an answer
addAction(QNameRule("hash.example."), LuaFFIAction(function(dq)
  local h = C.dnsdist_ffi_dnsquestion_get_qname_hash(dq, 0)
  local s = "192.0.2." .. tostring(tonumber(h % 200))
  C.dnsdist_ffi_dnsquestion_set_result(dq, s, #s)
  return DNSAction.Spoof
end))

-- the client's address and port
addAction(QNameRule("remote.example."), LuaFFIAction(function(dq)
  local addr = ffi.new("const void *[1]")
  local size = ffi.new("size_t[1]")
  C.dnsdist_ffi_dnsquestion_get_remoteaddr(dq, addr, size)
  local raw = ffi.string(addr[0], size[0])
  local ok = raw == "\127\0\0\1" and C.dnsdist_ffi_dnsquestion_get_remote_port(dq) > 0
  C.dnsdist_ffi_dnsquestion_get_masked_remoteaddr(dq, addr, size, 8)
  ok = ok and ffi.string(addr[0], size[0]) == "\127\0\0\0"
  local s = ok and "192.0.2.10" or "192.0.2.11"
  C.dnsdist_ffi_dnsquestion_set_result(dq, s, #s)
  return DNSAction.Spoof
end))

-- rcode: set_rcode and HeaderModify
addAction(QNameRule("rcode.example."), LuaFFIAction(function(dq)
  C.dnsdist_ffi_dnsquestion_set_rcode(dq, DNSRCode.NXDOMAIN)
  return DNSAction.Nxdomain
end))

-- tags: set_tag in an action, get_tag in a rule, TagRule
addAction(QNameRule("tag.example."), LuaFFIAction(function(dq)
  C.dnsdist_ffi_dnsquestion_set_tag(dq, "color", "blue")
  return DNSAction.None
end))
addAction(LuaFFIRule(function(dq)
  local v = C.dnsdist_ffi_dnsquestion_get_tag(dq, "color")
  return v ~= nil and ffi.string(v) == "blue"
end), LuaAction(function() return DNSAction.Refused end))

-- a Pool by name through set_result
newServer({address="@B1@", pool="other"})
addAction(QNameRule("pool.example."), LuaFFIAction(function(dq)
  C.dnsdist_ffi_dnsquestion_set_result(dq, "other", 5)
  return DNSAction.Pool
end))

-- per-thread variants: code evaluated in each thread's state
addAction(LuaFFIPerThreadRule([[
  local ffi = require("ffi")
  return function(dq)
    return ffi.C.dnsdist_ffi_dnsquestion_get_qtype(dq) == DNSQType.MX
  end
]]), LuaAction(function() return DNSAction.Nxdomain end))
addAction(QNameRule("pt.example."), LuaFFIPerThreadAction([[
  local ffi = require("ffi")
  return function(dq)
    local s = "192.0.2.60"
    ffi.C.dnsdist_ffi_dnsquestion_set_result(dq, s, #s)
    return DNSAction.Spoof
  end
]]))

-- response actions
addResponseAction(LuaFFIRule(function(dq)
  return C.dnsdist_ffi_dnsquestion_get_qtype(dq) == DNSQType.AAAA
end), LuaFFIResponseAction(function(dr)
  C.dnsdist_ffi_dnsquestion_set_rcode(dr, DNSRCode.REFUSED)
  return DNSResponseAction.HeaderModify
end))
addResponseAction(LuaFFIRule(function(dr)
  return C.dnsdist_ffi_dnsquestion_get_rcode(dr) == DNSRCode.NXDOMAIN
end), LuaFFIResponseAction(function(dr)
  if C.dnsdist_ffi_dnsquestion_get_qtype(dr) == DNSQType.A then
    C.dnsdist_ffi_dnsquestion_set_rcode(dr, DNSRCode.REFUSED)
  end
  return DNSResponseAction.HeaderModify
end))
addResponseAction(QNameRule("drop-response.example."), LuaFFIPerThreadResponseAction([[
  return function(dr) return DNSResponseAction.Drop end
]]))
'''


def test_ffi_rules_and_actions(pair):
    p = pair(FFI, backends=({}, {}))
    cases = [
        ("www.example.test.", A, 1), ("www.example.test.", TXT, 1), ("raw.example.", A, 1),
        ("RAW.example.", A, 1), ("chaos.example.", TXT, 3), ("chaos.example.", A, 3),
        ("tcp.example.", A, 1), ("len.example.", A, 1),
        ("a-very-long-label-for-the-length-rule.len.example.", A, 1),
        ("spoof.example.", A, 1), ("spoof.example.", AAAA, 1), ("copy.example.", A, 1),
        ("hash.example.", A, 1), ("remote.example.", A, 1), ("rcode.example.", A, 1),
        ("tag.example.", A, 1), ("pool.example.", A, 1), ("www.example.test.", MX, 1),
        ("pt.example.", A, 1), ("www.example.test.", AAAA, 1),
        ("drop-response.example.", A, 1), ("nx.example.test.", A, 1), ("nx.example.test.", TXT, 1),
    ]
    for proto in ("udp", "tcp"):
        for name, qtype, qclass in cases:
            timeout = 0.5 if name in ("len.example.", "drop-response.example.") else 2.0
            p.query(build_query(name, qtype=qtype, qclass=qclass, qid=9), proto, timeout=timeout)
    same_counters(p)
    p.console("showRules()")
    p.console("showResponseRules()")


def test_ffi_config_errors(workdir):
    """What the ffi module cannot be says so, at config time."""
    known("The ffi module")
    r = check_config(workdir, 'local ffi = require("ffi")\nffi.cdef[[int getpid(void);]]\n')
    assert r["dnsdist"][0] == 0
    rc, out, _ = r["dnslb"]
    assert rc == 1 and "ffi.cdef: dnslb cannot declare C functions or types" in out
    r = check_config(workdir, 'local ffi = require("ffi")\nlocal x = ffi.cast("int", 1)\n')
    assert r["dnsdist"][0] == 0
    rc, out, _ = r["dnslb"]
    assert rc == 1 and "ffi.cast does not exist in dnslb" in out
    r = check_config(workdir, 'local ffi = require("ffi")\nlocal f = ffi.C.dnsdist_ffi_servers_list_chashed\n')
    assert r["dnsdist"][0] == 0
    rc, out, _ = r["dnslb"]
    assert rc == 1 and "ffi.C.dnsdist_ffi_servers_list_chashed does not exist in dnslb" in out


def test_ffi_per_thread_code_errors(workdir):
    """dnsdist runs per-thread code only when a query needs it; dnslb at
    config time, so bad code fails the configuration."""
    known("The ffi module")
    for code, msg in (("return 1", "the code must return a function, not number"),
                      ("syntax error", "LuaFFIPerThreadRule:1: syntax error near")):
        r = check_config(workdir, 'addAction(LuaFFIPerThreadRule("%s"), DropAction())\n' % code)
        assert r["dnsdist"] == (0, "Configuration 'dnsdist.conf' OK!\n", "")
        rc, out, err = r["dnslb"]
        assert (rc, err) == (1, "") and msg in out


FFI_POLICY = r'''
newServer({address="@B0@", name="first", pool="", weight=3, order=1})
newServer({address="@B1@", name="second", pool="", weight=5, order=2})
newServer({address="@B0@", name="p-first", pool="p"})
newServer({address="@B1@", name="p-second", pool="p"})
local ffi = require("ffi")
local C = ffi.C
local ref = ffi.new("const dnsdist_ffi_server_t *[1]")

-- the global policy: by name, weight and order, then the qtype
setServerPolicyLuaFFI("pick", function(list, dq)
  local n = tonumber(C.dnsdist_ffi_servers_list_get_count(list))  -- a size_t: a cdata in LuaJIT
  local qt = C.dnsdist_ffi_dnsquestion_get_qtype(dq)
  for i = 0, n - 1 do
    C.dnsdist_ffi_servers_list_get_server(list, i, ref)
    local s = ref[0]
    local name = ffi.string(C.dnsdist_ffi_server_get_name(s))
    if qt == DNSQType.MX and name == "second" and C.dnsdist_ffi_server_get_weight(s) == 5
        and C.dnsdist_ffi_server_get_order(s) == 2 and C.dnsdist_ffi_server_is_up(s)
        and tonumber(C.dnsdist_ffi_server_get_outstanding(s)) == 0
        and C.dnsdist_ffi_server_get_latency(s) >= 0
        and ffi.string(C.dnsdist_ffi_server_get_name_with_addr(s)):match("^second %(127%.0%.0%.1:%d+%)$") then
      return i
    end
  end
  return qt % n
end)

-- a pool's own, per thread
setPoolServerPolicyLuaFFIPerThread("pt", [[
  local ffi = require("ffi")
  return function(list, dq)
    local raw = ffi.new("const char *[1]")
    local len = ffi.new("size_t[1]")
    ffi.C.dnsdist_ffi_dnsquestion_get_qname_raw(dq, raw, len)
    return tonumber(len[0]) % tonumber(ffi.C.dnsdist_ffi_servers_list_get_count(list))
  end
]], "p")
addAction("pool.example.", PoolAction("p"))
'''


def test_ffi_server_policies(pair):
    p = pair(FFI_POLICY, backends=({}, {}))
    for proto in ("udp", "tcp"):
        for name, qtype in (("www.example.test.", A), ("www.example.test.", AAAA),
                            ("www.example.test.", MX), ("www.example.test.", TXT),
                            ("a.pool.example.", A), ("ab.pool.example.", A),
                            ("abc.pool.example.", A)):
            p.query(build_query(name, qtype=qtype, qid=3), proto)
    p.console("showServerPolicy()")
    p.console("showPoolServerPolicy('p')")
    same_counters(p)


FFI_PROBE = r'''
newServer({address="@B0@"})
local ffi = require("ffi")
local C = ffi.C
local function n(x) return tostring(tonumber(x)) end
local function b(x) return x and "t" or "f" end

-- spoof_raw and spoof_addrs: arrays of dnsdist_ffi_raw_value_t (one record
-- each: dnsdist shuffles several)
addAction(QNameRule("raw.spoof.example."), LuaFFIAction(function(dq)
  local values = ffi.new("dnsdist_ffi_raw_value_t[2]")
  local a = "\5hello"
  values[0].value = a
  values[0].size = #a
  C.dnsdist_ffi_dnsquestion_spoof_raw(dq, values, 1)
  return DNSAction.HeaderModify
end))
addAction(QNameRule("addrs.spoof.example."), LuaFFIAction(function(dq)
  local values = ffi.new("dnsdist_ffi_raw_value_t[3]")
  local v4, v6 = "\192\0\2\7", "\32\1\13\184" .. string.rep("\0", 11) .. "\7"
  values[0].value = v4
  values[0].size = 4
  values[1].value = v6
  values[1].size = 16
  values[2].value = "bad"
  values[2].size = 3
  C.dnsdist_ffi_dnsquestion_spoof_addrs(dq, values, 3)
  return DNSAction.HeaderModify
end))

-- the values of the getters (and of the setters, read back), as the labels of a CNAME
addAction(AllRule(), LuaFFIAction(function(dq)
  local q = "dnsdist_ffi_dnsquestion_"
  local v = {}
  v[#v + 1] = "s" .. n(C[q .. "get_size"](dq))
  v[#v + 1] = "o" .. n(C[q .. "get_opcode"](dq))
  v[#v + 1] = "d" .. b(C[q .. "get_do"](dq))
  v[#v + 1] = "r" .. n(C[q .. "get_rcode"](dq))
  v[#v + 1] = "t" .. b(C[q .. "get_tcp"](dq))
  v[#v + 1] = "sc" .. b(C[q .. "get_skip_cache"](dq))
  C[q .. "set_skip_cache"](dq, true)
  v[#v + 1] = "sc" .. b(C[q .. "get_skip_cache"](dq))
  v[#v + 1] = "ue" .. b(C[q .. "get_use_ecs"](dq))
  C[q .. "set_use_ecs"](dq, false)
  v[#v + 1] = "ue" .. b(C[q .. "get_use_ecs"](dq))
  v[#v + 1] = "eo" .. b(C[q .. "get_ecs_override"](dq))
  C[q .. "set_ecs_override"](dq, true)
  v[#v + 1] = "eo" .. b(C[q .. "get_ecs_override"](dq))
  v[#v + 1] = "ep" .. n(C[q .. "get_ecs_prefix_length"](dq))
  C[q .. "set_ecs_prefix_length"](dq, 20)
  v[#v + 1] = "ep" .. n(C[q .. "get_ecs_prefix_length"](dq))
  v[#v + 1] = "tf" .. b(C[q .. "is_temp_failure_ttl_set"](dq)) .. n(C[q .. "get_temp_failure_ttl"](dq))
  C[q .. "set_temp_failure_ttl"](dq, 42)
  v[#v + 1] = "tf" .. b(C[q .. "is_temp_failure_ttl_set"](dq)) .. n(C[q .. "get_temp_failure_ttl"](dq))
  C[q .. "unset_temp_failure_ttl"](dq)
  v[#v + 1] = "tf" .. b(C[q .. "is_temp_failure_ttl_set"](dq))
  v[#v + 1] = "lp" .. b(C[q .. "get_local_port"](dq) > 0)
  local addr, size = ffi.new("const void *[1]"), ffi.new("size_t[1]")
  C[q .. "get_localaddr"](dq, addr, size)
  v[#v + 1] = "la" .. b(ffi.string(addr[0], size[0]) == "\127\0\0\1")
  C[q .. "set_tag"](dq, "a", "1")
  C[q .. "set_tag"](dq, "b", "2")
  local tags = ffi.new("const dnsdist_ffi_tag_t *[1]")
  local count = tonumber(C[q .. "get_tag_array"](dq, tags))
  local seen = {}
  for i = 0, count - 1 do
    seen[#seen + 1] = ffi.string(tags[0][i].name) .. ffi.string(tags[0][i].value)
  end
  table.sort(seen)
  v[#v + 1] = "tg" .. count .. table.concat(seen)
  v[#v + 1] = "nt" .. b(C[q .. "get_tag"](dq, "none") == nil)
  local tr = ffi.new("const char *[1]")
  local trn = tonumber(C[q .. "get_trailing_data"](dq, tr))
  v[#v + 1] = "tr" .. trn .. (trn > 0 and ffi.string(tr[0], trn) or "")
  local sni, snilen = ffi.new("const char *[1]"), ffi.new("size_t[1]")
  C[q .. "get_sni"](dq, sni, snilen)
  v[#v + 1] = "sni" .. n(snilen[0])
  v[#v + 1] = "h" .. b(C[q .. "get_http_path"](dq) == nil and C[q .. "get_http_host"](dq) == nil
    and C[q .. "get_http_scheme"](dq) == nil and C[q .. "get_http_query_string"](dq) == nil)
  local opts = ffi.new("const dnsdist_ffi_ednsoption_t *[1]")
  local nopts = tonumber(C[q .. "get_edns_options"](dq, opts))
  local o = {}
  for i = 0, nopts - 1 do
    local e = opts[0][i]
    local data = ffi.string(e.data, e.len)
    o[#o + 1] = tostring(tonumber(e.optionCode)) .. "x" .. tostring(tonumber(e.len)) .. "x"
      .. data:gsub(".", function(c) return string.format("%02x", c:byte()) end)
  end
  v[#v + 1] = "eo" .. nopts .. "-" .. table.concat(o, "-")
  local hdrs = ffi.new("const dnsdist_ffi_http_header_t *[1]")
  v[#v + 1] = "hh" .. n(C[q .. "get_http_headers"](dq, hdrs))
  v[#v + 1] = "probe.example."
  local s = table.concat(v, ".")
  C[q .. "set_result"](dq, s, #s)
  return DNSAction.Spoof
end))
'''


def test_ffi_getters_and_setters(pair):
    p = pair(FFI_PROBE)
    for proto in ("udp", "tcp"):
        for opt in (None, {"payload": 1232}, {"payload": 4096, "do": True}):
            assert p.query(build_query("probe.example.", qid=4, opt=opt), proto) is not None
        opts = {"payload": 1232, "options": ((65001, b"ab"), (10, b"\1\2\3\4\5\6\7\x08"),
                                             (65001, b"cd"), (3, b""))}
        a = p.query(build_query("probe.example.", qid=4, opt=opts), proto)
        assert b"eo4-3x0x-10x8x0102030405060708-65001x2x6162-65001x2x6364" in a
        a = p.query(build_query("probe.example.", qid=4, trailing=b"xyz"), proto)
        assert b"\x06tr3xyz" in a
        for name in ("raw.spoof.example.", "addrs.spoof.example."):
            for qtype in (A, AAAA, TXT):
                p.query(build_query(name, qtype=qtype, qid=4), proto)


def test_ffi_required_in_a_rule(pair):
    """require("ffi") first called inside a rule function (not at the top)."""
    p = pair('newServer({address="@B0@"})\n'
             'addAction(LuaFFIRule(function(dq)\n'
             '  return require("ffi").C.dnsdist_ffi_dnsquestion_get_qtype(dq) == DNSQType.TXT\n'
             'end), DropAction())\n')
    for proto in ("udp", "tcp"):
        p.query(build_query("www.example.test.", qtype=TXT), proto, timeout=0.5)
        p.query(build_query("www.example.test.", qtype=A), proto)


def test_header_modify_forwards_a_query(pair):
    """DNSAction.HeaderModify stops the rules; dnsdist answers only when the
    function set QR (dq:spoof, dq.dh:setQR), and otherwise forwards the
    query as the function left it (RD cleared, rcode bits set)."""
    p = pair('newServer({address="@B0@"})\n'
             'local ffi = require("ffi")\n'
             'addAction("none.example.", LuaAction(function(dq) return DNSAction.HeaderModify end))\n'
             'addAction("rcode.example.", LuaAction(function(dq) dq.rcode = 3 '
             'return DNSAction.HeaderModify end))\n'
             'addAction("qr.example.", LuaAction(function(dq) dq.dh:setQR(true) dq.rcode = 5 '
             'return DNSAction.HeaderModify end))\n'
             'addAction("rd.example.", LuaAction(function(dq) dq.dh:setRD(false) '
             'return DNSAction.HeaderModify end))\n'
             'addAction("spoof.example.", LuaAction(function(dq) dq:spoof({newCA("192.0.2.8")}) '
             'return DNSAction.HeaderModify end))\n'
             'addAction("ffi.example.", LuaFFIAction(function(dq) '
             'ffi.C.dnsdist_ffi_dnsquestion_set_rcode(dq, 2) return DNSAction.HeaderModify end))\n'
             'addAction(AllRule(), SpoofAction("192.0.2.99"))\n')
    for proto in ("udp", "tcp"):
        for name in ("none.example.", "rcode.example.", "qr.example.", "rd.example.",
                     "spoof.example.", "ffi.example."):
            assert p.query(build_query(name, qid=6), proto) is not None
    same_counters(p)
