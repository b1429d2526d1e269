/*
 * compat_lua.c - the standard libraries of a dnslb Lua state, the names of
 * Lua 5.1 and LuaJIT that configurations written for dnsdist use, and the
 * `ffi` module (lua/compat_lua.h, docs/lua.md).
 *
 * The aliases, `bit` and `ffi` are Lua code (compat_code below), run once
 * in every state: they are plain Lua functions, so a rule may call them,
 * and they cost what the same code written in the config would. The ffi
 * module stands for LuaJIT's as far as dnsdist's FFI rules use it: ffi.C
 * holds the dnsdist_ffi_dnsquestion_* functions, each working on dnslb's
 * dq object; out arguments are arrays made by ffi.new ("size_t[1]",
 * "const char *[1]"), Lua tables indexed from 0; a "const char *" is a Lua
 * string. What it cannot be (ffi.cdef, ffi.cast, a C struct) raises an
 * error that says so.
 */
#include "lua/compat_lua.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdbool.h>
#include <string.h>

#include "lua/worker.h"

static const char io_key = 'i';

static const char compat_code[] =
	"local P = ...\n"
	"local type, tonumber, tostring, error, pairs, setmetatable, getmetatable =\n"
	"  type, tonumber, tostring, error, pairs, setmetatable, getmetatable\n"
	"local mtype, floor, tointeger = math.type, math.floor, math.tointeger\n"
	"\n"
	"-- LuaJIT prints integral numbers without \".0\": so do these results\n"
	"local function num(x)\n"
	"  return tointeger(x) or x\n"
	"end\n"
	"\n"
	"-- Lua 5.1 and LuaJIT names\n"
	"unpack = table.unpack\n"
	"loadstring = load\n"
	"function table.getn(t) return #t end\n"
	"function table.maxn(t)\n"
	"  local m = 0\n"
	"  for k in pairs(t) do\n"
	"    if type(k) == \"number\" and k > m then m = k end\n"
	"  end\n"
	"  return m\n"
	"end\n"
	"function table.foreach(t, f)\n"
	"  for k, v in pairs(t) do\n"
	"    local r = f(k, v)\n"
	"    if r ~= nil then return r end\n"
	"  end\n"
	"end\n"
	"function table.foreachi(t, f)\n"
	"  for i = 1, #t do\n"
	"    local r = f(i, t[i])\n"
	"    if r ~= nil then return r end\n"
	"  end\n"
	"end\n"
	"function math.pow(x, y) return num(x ^ y) end\n"
	"function math.log10(x) return num(math.log(x, 10)) end\n"
	"function math.ldexp(m, e) return num(m * 2.0 ^ e) end\n"
	"function math.frexp(x)\n"
	"  if x == 0 or x ~= x or x == math.huge or x == -math.huge then return x, 0 end\n"
	"  local e = floor(math.log(math.abs(x), 2)) + 1\n"
	"  local m = x / 2.0 ^ e\n"
	"  if math.abs(m) >= 1 then m, e = m / 2, e + 1 elseif math.abs(m) < 0.5 then m, e = m * 2, e - 1 end\n"
	"  return num(m), e\n"
	"end\n"
	"function math.cosh(x) return num((math.exp(x) + math.exp(-x)) / 2) end\n"
	"function math.sinh(x) return num((math.exp(x) - math.exp(-x)) / 2) end\n"
	"function math.tanh(x)\n"
	"  if x > 20 then return 1 elseif x < -20 then return -1 end\n"
	"  local a, b = math.exp(x), math.exp(-x)\n"
	"  return num((a - b) / (a + b))\n"
	"end\n"
	"function gcinfo() return floor(collectgarbage(\"count\")) end\n"
	"\n"
	"-- LuaJIT's bit module (BitOp): 32-bit signed results\n"
	"local function tobit(x)\n"
	"  local v = tonumber(x)\n"
	"  if v == nil then error(\"bad argument to a bit function (number expected, got \" .. type(x) .. \")\", 3) end\n"
	"  local n = tointeger(v)\n"
	"  if n == nil then\n"
	"    if v ~= v or v == math.huge or v == -math.huge then return 0 end\n"
	"    n = tointeger(floor(v % 4294967296 + 0.5) % 4294967296) or 0\n"
	"  end\n"
	"  n = n & 0xffffffff\n"
	"  if n >= 0x80000000 then n = n - 0x100000000 end\n"
	"  return n\n"
	"end\n"
	"local function fold(op)\n"
	"  return function(x, ...)\n"
	"    local r = tobit(x)\n"
	"    for i = 1, select(\"#\", ...) do r = op(r, tobit((select(i, ...)))) end\n"
	"    return tobit(r)\n"
	"  end\n"
	"end\n"
	"bit = {\n"
	"  tobit = function(x) return tobit(x) end,\n"
	"  bnot = function(x) return tobit(~tobit(x)) end,\n"
	"  band = fold(function(a, b) return a & b end),\n"
	"  bor = fold(function(a, b) return a | b end),\n"
	"  bxor = fold(function(a, b) return a ~ b end),\n"
	"  lshift = function(x, n) return tobit((tobit(x) & 0xffffffff) << (tobit(n) & 31)) end,\n"
	"  rshift = function(x, n) return tobit((tobit(x) & 0xffffffff) >> (tobit(n) & 31)) end,\n"
	"  arshift = function(x, n) return tobit(tobit(x) // (1 << (tobit(n) & 31))) end,\n"
	"  rol = function(x, n)\n"
	"    local u, s = tobit(x) & 0xffffffff, tobit(n) & 31\n"
	"    return tobit((u << s) | (u >> ((32 - s) & 31)))\n"
	"  end,\n"
	"  ror = function(x, n)\n"
	"    local u, s = tobit(x) & 0xffffffff, tobit(n) & 31\n"
	"    return tobit((u >> s) | (u << ((32 - s) & 31)))\n"
	"  end,\n"
	"  bswap = function(x)\n"
	"    local u = tobit(x) & 0xffffffff\n"
	"    return tobit(((u & 0xff) << 24) | ((u & 0xff00) << 8) | ((u >> 8) & 0xff00) | (u >> 24))\n"
	"  end,\n"
	"  tohex = function(x, n)\n"
	"    n = n == nil and 8 or tobit(n)\n"
	"    local up = n < 0\n"
	"    if up then n = -n end\n"
	"    if n > 8 then n = 8 end\n"
	"    local s = string.format(up and \"%08X\" or \"%08x\", tobit(x) & 0xffffffff)\n"
	"    return s:sub(9 - n)\n"
	"  end,\n"
	"}\n"
	"package.loaded.bit = bit\n"
	"\n"
	"-- ffi: dnsdist's FFI functions over the dq object\n"
	"local NOFFI = \" (dnslb runs Lua 5.4, which has no FFI: its ffi module offers ffi.C.dnsdist_ffi_dnsquestion_* \"\n"
	"  .. \"functions, ffi.new for arrays, ffi.string and ffi.copy; see docs/lua.md)\"\n"
	"local arrays = setmetatable({}, { __mode = \"k\" })  -- array -> {char = bool, s = content}\n"
	"local ffi = {}\n"
	"local C = {}\n"
	"\n"
	"function ffi.new(ct, n, ...)\n"
	"  if type(ct) ~= \"string\" then error(\"ffi.new: a C type name expected\" .. NOFFI, 2) end\n"
	"  local base, size = ct:match(\"^%s*(.-)%s*%[%s*([%d%?]*)%s*%]%s*$\")\n"
	"  if base == nil or size == \"\" then\n"
	"    error(\"ffi.new: cannot make a '\" .. ct .. \"', only an array such as 'size_t[1]', \"\n"
	"      .. \"'const char *[1]' or 'char[?]'\" .. NOFFI, 2)\n"
	"  end\n"
	"  local inits = { ... }\n"
	"  if size == \"?\" then\n"
	"    size = tonumber(n)\n"
	"    if size == nil then error(\"ffi.new: '\" .. ct .. \"' needs its number of elements\", 2) end\n"
	"  else\n"
	"    size = tonumber(size)\n"
	"    table.insert(inits, 1, n)\n"
	"  end\n"
	"  if size == nil or size < 0 or size ~= floor(size) then\n"
	"    error(\"ffi.new: bad number of elements for '\" .. ct .. \"'\", 2)\n"
	"  end\n"
	"  base = base:gsub(\"%s+\", \" \")\n"
	"  local ptr = base:find(\"*\", 1, true) ~= nil\n"
	"  local a = {}\n"
	"  if not ptr and (base == \"char\" or base == \"const char\" or base == \"unsigned char\"\n"
	"      or base == \"uint8_t\" or base == \"int8_t\") then\n"
	"    arrays[a] = { char = true, s = \"\", size = size }\n"
	"    return a\n"
	"  end\n"
	"  if size > 65536 then\n"
	"    error(\"ffi.new: '\" .. ct .. \"' is too large for dnslb's ffi arrays (65536 elements at most)\", 2)\n"
	"  end\n"
	"  arrays[a] = { char = false, size = size }\n"
	"  if not ptr and base:gsub(\"^const \", \"\") == \"dnsdist_ffi_raw_value_t\" then\n"
	"    for i = 0, size - 1 do a[i] = { value = nil, size = 0 } end\n"
	"    return a\n"
	"  end\n"
	"  for i = 0, size - 1 do\n"
	"    local v = inits[i + 1]\n"
	"    if v == nil and not ptr then v = 0 end\n"
	"    a[i] = v\n"
	"  end\n"
	"  return a\n"
	"end\n"
	"\n"
	"-- the string a char pointer argument stands for: a Lua string or a char array\n"
	"local function str_of(p, len, fn)\n"
	"  local s\n"
	"  if type(p) == \"string\" then\n"
	"    s = p\n"
	"  elseif arrays[p] ~= nil and arrays[p].char then\n"
	"    s = arrays[p].s\n"
	"  else\n"
	"    error(fn .. \": a string or a char array expected, got \"\n"
	"      .. (p == nil and \"NULL\" or type(p)), 3)\n"
	"  end\n"
	"  if len == nil then return (s:match(\"^[^%z]*\")) end\n"
	"  return s:sub(1, tonumber(len))\n"
	"end\n"
	"\n"
	"function ffi.string(p, len) return str_of(p, len, \"ffi.string\") end\n"
	"\n"
	"function ffi.copy(dst, src, len)\n"
	"  local d = arrays[dst]\n"
	"  if d == nil or not d.char then error(\"ffi.copy: the destination must be a char array (ffi.new('char[?]', n))\", 2) end\n"
	"  local s = str_of(src, len, \"ffi.copy\")\n"
	"  if #s > d.size then error(\"ffi.copy: \" .. #s .. \" octets do not fit in \" .. d.size, 2) end\n"
	"  d.s = s\n"
	"end\n"
	"\n"
	"function ffi.cdef()\n"
	"  error(\"ffi.cdef: dnslb cannot declare C functions or types\" .. NOFFI, 2)\n"
	"end\n"
	"\n"
	"local function out(t, v, fn)\n"
	"  if arrays[t] == nil then error(fn .. \": an out argument must be an array of ffi.new\", 3) end\n"
	"  t[0] = v\n"
	"end\n"
	"\n"
	"local function dq_of(dq, fn)\n"
	"  if getmetatable(dq) ~= \"DNSQuestion\" then\n"
	"    error(fn .. \": argument #1 must be the dq of the FFI rule or action\", 3)\n"
	"  end\n"
	"  return dq\n"
	"end\n"
	"\n"
	"local function def(name, f)\n"
	"  local full = \"dnsdist_ffi_dnsquestion_\" .. name\n"
	"  C[full] = function(dq, ...) return f(dq_of(dq, full), full, ...) end\n"
	"end\n"
	"\n"
	"def(\"get_qtype\", function(dq) return dq.qtype end)\n"
	"def(\"get_qclass\", function(dq) return dq.qclass end)\n"
	"def(\"get_opcode\", function(dq) return dq.opcode end)\n"
	"def(\"get_rcode\", function(dq) return dq.rcode end)\n"
	"-- dnsdist's FFI set_rcode makes the query a response (QR), unlike dq.rcode\n"
	"def(\"set_rcode\", function(dq, _, rc)\n"
	"  dq.rcode = rc\n"
	"  dq.dh:setQR(true)\n"
	"end)\n"
	"def(\"get_len\", function(dq) return dq.len end)\n"
	"-- dnsdist 1.7's get_size is the size of the message, as get_len\n"
	"def(\"get_size\", function(dq) return dq.len end)\n"
	"def(\"get_tcp\", function(dq) return dq.tcp end)\n"
	"def(\"get_do\", function(dq) return dq:getDO() end)\n"
	"def(\"get_skip_cache\", function(dq) return dq.skipCache end)\n"
	"def(\"set_skip_cache\", function(dq, _, v) dq.skipCache = v end)\n"
	"def(\"get_use_ecs\", function(dq) return dq.useECS end)\n"
	"def(\"set_use_ecs\", function(dq, _, v) dq.useECS = v end)\n"
	"def(\"get_ecs_override\", function(dq) return dq.ecsOverride end)\n"
	"def(\"set_ecs_override\", function(dq, _, v) dq.ecsOverride = v end)\n"
	"def(\"get_ecs_prefix_length\", function(dq) return dq.ecsPrefixLength end)\n"
	"def(\"set_ecs_prefix_length\", function(dq, _, v) dq.ecsPrefixLength = v end)\n"
	"def(\"get_temp_failure_ttl\", function(dq) return dq.tempFailureTTL or 0 end)\n"
	"def(\"is_temp_failure_ttl_set\", function(dq) return dq.tempFailureTTL ~= nil end)\n"
	"def(\"set_temp_failure_ttl\", function(dq, _, v) dq.tempFailureTTL = v end)\n"
	"def(\"unset_temp_failure_ttl\", function(dq) dq.tempFailureTTL = nil end)\n"
	"def(\"get_qname_raw\", function(dq, fn, ref, len)\n"
	"  local raw = P.qname_raw(dq)\n"
	"  out(ref, raw, fn)\n"
	"  out(len, #raw, fn)\n"
	"end)\n"
	"def(\"get_qname_hash\", function(dq, _, init) return dq.qname:hash(init or 0) end)\n"
	"def(\"get_remoteaddr\", function(dq, fn, addr, size)\n"
	"  local a = P.addr(dq, false)\n"
	"  out(addr, a, fn)\n"
	"  out(size, a and #a or 0, fn)\n"
	"end)\n"
	"def(\"get_masked_remoteaddr\", function(dq, fn, addr, size, bits)\n"
	"  local a = P.addr(dq, false, bits)\n"
	"  out(addr, a, fn)\n"
	"  out(size, a and #a or 0, fn)\n"
	"end)\n"
	"def(\"get_localaddr\", function(dq, fn, addr, size)\n"
	"  local a = P.addr(dq, true)\n"
	"  out(addr, a, fn)\n"
	"  out(size, a and #a or 0, fn)\n"
	"end)\n"
	"def(\"get_remote_port\", function(dq)\n"
	"  local a = dq.remoteaddr\n"
	"  return a and a:getPort() or 0\n"
	"end)\n"
	"def(\"get_local_port\", function(dq)\n"
	"  local a = dq.localaddr\n"
	"  return a and a:getPort() or 0\n"
	"end)\n"
	"def(\"get_tag\", function(dq, fn, label) return dq:getTagArray()[str_of(label, nil, fn)] end)\n"
	"def(\"set_tag\", function(dq, fn, label, value)\n"
	"  dq:setTag(str_of(label, nil, fn), str_of(value, nil, fn))\n"
	"end)\n"
	"def(\"get_tag_array\", function(dq, fn, ref)\n"
	"  local t, n = {}, 0\n"
	"  for k, v in pairs(dq:getTagArray()) do\n"
	"    t[n] = { name = k, value = v }\n"
	"    n = n + 1\n"
	"  end\n"
	"  out(ref, t, fn)\n"
	"  return n\n"
	"end)\n"
	"def(\"set_result\", function(dq, fn, s, len) P.set_result(dq, str_of(s, len, fn)) end)\n"
	"def(\"get_trailing_data\", function(dq, fn, ref)\n"
	"  local t = dq:getTrailingData()\n"
	"  out(ref, t, fn)\n"
	"  return #t\n"
	"end)\n"
	"-- values: an array of dnsdist_ffi_raw_value_t ({value = string, size = n}), from 0\n"
	"local function raw_values(values, count, fn)\n"
	"  if arrays[values] == nil then error(fn .. \": the values must be an array of ffi.new\", 3) end\n"
	"  local t = {}\n"
	"  for i = 0, tonumber(count) - 1 do\n"
	"    local v = values[i]\n"
	"    if type(v) ~= \"table\" then error(fn .. \": value \" .. i .. \" is not a dnsdist_ffi_raw_value_t\", 3) end\n"
	"    t[#t + 1] = str_of(v.value, v.size, fn)\n"
	"  end\n"
	"  return t\n"
	"end\n"
	"-- the records of the query's type, TTL 60 (SpoofAction of raw rdatas / of addresses)\n"
	"def(\"spoof_raw\", function(dq, fn, values, count)\n"
	"  local t = raw_values(values, count, fn)\n"
	"  if #t > 0 then dq:spoof(t) end\n"
	"end)\n"
	"def(\"spoof_addrs\", function(dq, fn, values, count)\n"
	"  local t = {}\n"
	"  for _, raw in ipairs(raw_values(values, count, fn)) do\n"
	"    if #raw == 4 or #raw == 16 then t[#t + 1] = newCAFromRaw(raw, 0) end\n"
	"  end\n"
	"  if #t > 0 then dq:spoof(t) end\n"
	"end)\n"
	"-- the EDNS options of the query's OPT record: by code, then in the order sent\n"
	"def(\"get_edns_options\", function(dq, fn, ref)\n"
	"  local rd = P.opt_rdata(dq)\n"
	"  if rd == nil then return 0 end\n"
	"  local bycode, codes, pos = {}, {}, 1\n"
	"  while pos + 3 <= #rd do\n"
	"    local code, len = string.unpack(\">I2I2\", rd, pos)\n"
	"    local data = rd:sub(pos + 4, pos + 3 + len)\n"
	"    if #data < len then break end\n"
	"    if bycode[code] == nil then\n"
	"      bycode[code] = {}\n"
	"      codes[#codes + 1] = code\n"
	"    end\n"
	"    table.insert(bycode[code], data)\n"
	"    pos = pos + 4 + len\n"
	"  end\n"
	"  table.sort(codes)\n"
	"  local t, n = {}, 0\n"
	"  for _, code in ipairs(codes) do\n"
	"    for _, data in ipairs(bycode[code]) do\n"
	"      t[n] = { optionCode = code, len = #data, data = data }\n"
	"      n = n + 1\n"
	"    end\n"
	"  end\n"
	"  if n > 0 then out(ref, t, fn) end\n"
	"  return n\n"
	"end)\n"
	"-- dnslb has no DoT or DoH listeners: no SNI and no HTTP request, as dnsdist for Do53\n"
	"def(\"get_sni\", function(dq, fn, ref, len)\n"
	"  out(ref, \"\", fn)\n"
	"  out(len, 0, fn)\n"
	"end)\n"
	"def(\"get_http_path\", function() return nil end)\n"
	"def(\"get_http_query_string\", function() return nil end)\n"
	"def(\"get_http_host\", function() return nil end)\n"
	"def(\"get_http_scheme\", function() return nil end)\n"
	"def(\"get_http_headers\", function() return 0 end)\n"
	"\n"
	"-- the server list of an FFI policy (setServerPolicyLuaFFI): the pool's Server objects\n"
	"local function list_of(list, fn)\n"
	"  if type(list) ~= \"table\" then error(fn .. \": argument #1 must be the server list of the FFI policy\", 3) end\n"
	"  return list\n"
	"end\n"
	"local function server_of(s, fn)\n"
	"  if getmetatable(s) == nil or type(s) ~= \"userdata\" then\n"
	"    error(fn .. \": argument #1 must be a server of the list\", 3)\n"
	"  end\n"
	"  return s\n"
	"end\n"
	"C.dnsdist_ffi_servers_list_get_count = function(list)\n"
	"  return #list_of(list, \"dnsdist_ffi_servers_list_get_count\")\n"
	"end\n"
	"C.dnsdist_ffi_servers_list_get_server = function(list, idx, ref)\n"
	"  local fn = \"dnsdist_ffi_servers_list_get_server\"\n"
	"  out(ref, list_of(list, fn)[tonumber(idx) + 1], fn)\n"
	"end\n"
	"local function srv(name, f)\n"
	"  local full = \"dnsdist_ffi_server_\" .. name\n"
	"  C[full] = function(s) return f(server_of(s, full)) end\n"
	"end\n"
	"srv(\"is_up\", function(s) return s:isUp() end)\n"
	"srv(\"get_name\", function(s) return s:getName() end)\n"
	"srv(\"get_name_with_addr\", function(s) return s:getNameWithAddr() end)\n"
	"srv(\"get_weight\", function(s) return s.weight end)\n"
	"srv(\"get_order\", function(s) return s.order end)\n"
	"srv(\"get_outstanding\", function(s) return s:getOutstanding() end)\n"
	"srv(\"get_latency\", function(s) return s:getLatency() end)\n"
	"\n"
	"setmetatable(C, { __index = function(_, k)\n"
	"  error(\"ffi.C.\" .. tostring(k) .. \" does not exist in dnslb\" .. NOFFI, 2)\n"
	"end })\n"
	"ffi.C = C\n"
	"setmetatable(ffi, { __index = function(_, k)\n"
	"  error(\"ffi.\" .. tostring(k) .. \" does not exist in dnslb\" .. NOFFI, 2)\n"
	"end })\n"
	"package.preload.ffi = function() return ffi end\n";

void
dlb_lua_compat_open(lua_State *L)
{
	static const luaL_Reg libs[] = {
		{ LUA_GNAME, luaopen_base },
		{ LUA_LOADLIBNAME, luaopen_package },
		{ LUA_COLIBNAME, luaopen_coroutine },
		{ LUA_TABLIBNAME, luaopen_table },
		{ LUA_IOLIBNAME, luaopen_io },
		{ LUA_OSLIBNAME, luaopen_os },
		{ LUA_STRLIBNAME, luaopen_string },
		{ LUA_MATHLIBNAME, luaopen_math },
		{ LUA_UTF8LIBNAME, luaopen_utf8 },
		{ LUA_DBLIBNAME, luaopen_debug },
		{ NULL, NULL },
	};

	for (const luaL_Reg *lib = libs; lib->func != NULL; lib++) {
		luaL_requiref(L, lib->name, lib->func, 1);
		lua_pop(L, 1);
	}
	if (luaL_loadbuffer(L, compat_code, sizeof(compat_code) - 1, "=dnslb compat") != LUA_OK)
		lua_error(L);
	dlb_luaw_push_ffi(L);
	lua_call(L, 1, 0);
}

/* Push package.loaded[@lib] (the library itself, whatever the config did to the global). */
static int
push_lib(lua_State *L, const char *lib)
{
	luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
	lua_getfield(L, -1, lib);
	lua_remove(L, -2);
	return lua_type(L, -1);
}

void
dlb_lua_compat_quiet_io(lua_State *L)
{
	static const char code[] =
		"local io = ...\n"
		"local null = io.open('/dev/null', 'w')\n"
		"if null == nil then return nil end\n"
		"local saved = { io.output(), io.stdout, io.stderr }\n"
		"io.output(null); io.stdout = null; io.stderr = null\n"
		"return saved\n";

	if (luaL_loadbuffer(L, code, sizeof(code) - 1, "=dnslb io") != LUA_OK)
		lua_error(L);
	if (push_lib(L, LUA_IOLIBNAME) != LUA_TTABLE) {
		lua_pop(L, 2);
		return;
	}
	lua_call(L, 1, 1);
	lua_rawsetp(L, LUA_REGISTRYINDEX, &io_key);
}

void
dlb_lua_compat_worker(lua_State *L)
{
	/*
	 * coroutine.wrap over create and resume, so that a function the
	 * configuration wraps calls the rules' coroutine.resume (looked up at
	 * each call), which passes the instruction limit's hook on
	 */
	static const char code[] =
		"local co = ...\n"
		"local create, pack, unpack, error = co.create, table.pack, table.unpack, error\n"
		"co.wrap = function(f)\n"
		"  local c = create(f)\n"
		"  return function(...)\n"
		"    local r = pack(co.resume(c, ...))\n"
		"    if not r[1] then error(r[2], 0) end\n"
		"    return unpack(r, 2, r.n)\n"
		"  end\n"
		"end\n";

	if (luaL_loadbuffer(L, code, sizeof(code) - 1, "=dnslb coroutine") != LUA_OK)
		lua_error(L);
	if (push_lib(L, LUA_COLIBNAME) != LUA_TTABLE) {
		lua_pop(L, 2);
		return;
	}
	lua_call(L, 1, 0);
}

void
dlb_lua_compat_loud_io(lua_State *L)
{
	static const char code[] =
		"local io, saved = ...\n"
		"io.output(saved[1]); io.stdout = saved[2]; io.stderr = saved[3]\n";

	if (lua_rawgetp(L, LUA_REGISTRYINDEX, &io_key) != LUA_TTABLE) {
		lua_pop(L, 1);
		return;
	}
	if (luaL_loadbuffer(L, code, sizeof(code) - 1, "=dnslb io") != LUA_OK)
		lua_error(L);
	lua_insert(L, -2);
	if (push_lib(L, LUA_IOLIBNAME) != LUA_TTABLE) {
		lua_pop(L, 3);
		return;
	}
	lua_insert(L, -2);
	lua_call(L, 2, 0);
	lua_pushnil(L);
	lua_rawsetp(L, LUA_REGISTRYINDEX, &io_key);
}

static int
l_blocked(lua_State *L)
{
	return luaL_error(L, "%s cannot be called from a rule", lua_tostring(L, lua_upvalueindex(1)));
}

/* Replace every C function of library @lib but those of @keep by one that raises. */
static void
block_lib(lua_State *L, const char *lib, const char *const *keep)
{
	if (push_lib(L, lib) != LUA_TTABLE) {
		lua_pop(L, 1);
		return;
	}
	lua_pushnil(L);
	while (lua_next(L, -2) != 0) {
		bool kept = lua_type(L, -2) != LUA_TSTRING || !lua_iscfunction(L, -1);

		for (const char *const *k = keep; !kept && *k != NULL; k++)
			kept = strcmp(*k, lua_tostring(L, -2)) == 0;
		lua_pop(L, 1);
		if (!kept) {
			/* replacing an existing field during lua_next is allowed */
			lua_pushvalue(L, -1);
			lua_pushfstring(L, "%s.%s", lib, lua_tostring(L, -1));
			lua_pushcclosure(L, l_blocked, 1);
			lua_rawset(L, -4);
		}
	}
	lua_pop(L, 1);
}

/* A rule's require(name): a module the configuration loaded, or an error. */
static int
l_rule_require(lua_State *L)
{
	const char *name = luaL_checkstring(L, 1);

	luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
	if (lua_getfield(L, -1, name) != LUA_TNIL)
		return 1;
	lua_pop(L, 1);
	/* dnslb's own modules (ffi) are in package.preload: no file to read */
	luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
	if (lua_getfield(L, -1, name) == LUA_TFUNCTION) {
		lua_pushstring(L, name);
		lua_call(L, 1, 1);
		if (lua_isnil(L, -1)) {
			lua_pop(L, 1);
			lua_pushboolean(L, 1);
		}
		lua_pushvalue(L, -1);
		lua_setfield(L, 2, name);	/* package.loaded[name] */
		return 1;
	}
	return luaL_error(L, "require '%s': a rule cannot load a module, require it at the top "
			  "level of the configuration", name);
}

/*
 * A rule's coroutine.resume: the coroutine gets the caller's hook first. A
 * coroutine made during a call inherits the instruction limit's count hook
 * (lua_newthread copies it), but one the configuration made does not, and
 * would otherwise run unbounded.
 */
static int
l_rule_resume(lua_State *L)
{
	lua_State *co = lua_tothread(L, 1);

	luaL_argexpected(L, co != NULL, 1, "coroutine");
	if (co != L)
		lua_sethook(co, lua_gethook(L), lua_gethookmask(L), lua_gethookcount(L));
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
	return lua_gettop(L);
}

void
dlb_lua_compat_restrict(lua_State *L)
{
	static const char *const io_keep[] = { "write", "type", NULL };
	static const char *const os_keep[] = { "getenv", "time", "date", "clock", "difftime", NULL };
	static const char *const debug_keep[] = { "traceback", NULL };
	static const char *const package_keep[] = { NULL };

	block_lib(L, LUA_IOLIBNAME, io_keep);
	block_lib(L, LUA_OSLIBNAME, os_keep);
	/* debug.sethook would lift the instruction limit */
	block_lib(L, LUA_DBLIBNAME, debug_keep);
	block_lib(L, LUA_LOADLIBNAME, package_keep);
	lua_pushcfunction(L, l_rule_require);
	lua_setglobal(L, "require");
	if (push_lib(L, LUA_COLIBNAME) == LUA_TTABLE) {
		lua_getfield(L, -1, "resume");
		lua_pushcclosure(L, l_rule_resume, 1);
		lua_setfield(L, -2, "resume");
	}
	lua_pop(L, 1);
}
