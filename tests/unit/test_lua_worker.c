/*
 * test_lua_worker.c - per-worker Lua states (lua/worker.c) and the helper
 * objects (lua/objects.c).
 *
 * One config (config_text) is evaluated by a CONFIG state; two worker states
 * are built from it with dlb_luaw_new, and its LuaRule/LuaAction/
 * LuaResponseAction functions are called on hand-built packets. A function
 * is named by the "--@NAME" marker on the line of its `function`: its
 * number is the marker's rank in the text (one Lua* call per marker) and
 * its "file:line" the marker's line.
 *
 * The objects are checked by Lua snippets in a CONFIG state: eq() raises
 * with both values and the caller's line, which the load error shows. The
 * expected values are what dnsdist 1.7.3 prints for the same calls.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dnslb/core/config.h"
#include "dnslb/core/stats.h"
#include "dnslb/core/wire.h"
#include "lua/conf.h"
#include "lua/worker.h"
#include "rules/rules.h"

/* ---- the config ------------------------------------------------------------- */

static const char config_text[] =
	"setLuaInstructionLimit(1000000)\n"
	"setLuaMemoryLimit('16M')\n"
	"newServer({address='192.0.2.10:53', name='b1', pool='x'})\n"
	"srv = getServer(0)\n"
	"pc = newPacketCache(100000)\n"
	"getPool('x'):setCache(pc)\n"
	"helpers = { bad = newSuffixMatchNode(), pools = { ['www.example.com.'] = 'x' } }\n"
	"helpers.bad:add('bad.example')\n"
	"local upv = { prefix = '192.0.2.' }\n"
	"counter = 0\n"
	"limiter = newQPSLimiter(1, 3)\n"
	"function pick_pool(dq) return helpers.pools[dq.qname:toString():lower()] end\n"
	"print('test_lua_worker: printed by the config state only')\n"
	"a_pool = LuaAction(function(dq) --@POOL\n"
	"  return DNSAction.Pool, pick_pool(dq)\n"
	"end)\n"
	"a_spoof = LuaAction(function(dq) --@SPOOF\n"
	"  return DNSAction.Spoof, upv.prefix .. '1'\n"
	"end)\n"
	"a_packet = LuaAction(function(dq) --@PACKET\n"
	"  return DNSAction.SpoofPacket, '\\0\\1\\0\\2bin\\0ary'\n"
	"end)\n"
	"a_read = LuaAction(function(dq) --@READ\n"
	"  return DNSAction.None, table.concat({dq.qname:toString(), dq.qtype, dq.qclass,\n"
	"    dq.remoteaddr:toStringWithPort(), tostring(dq.localaddr), dq.len, dq.size,\n"
	"    tostring(dq.tcp), dq:getProtocol(), tostring(dq:getDO()), dq.opcode, dq.rcode,\n"
	"    tostring(dq.tempFailureTTL), tostring(dq.skipCache), '[' .. dq.pool .. ']',\n"
	"    tostring(dq.useECS), dq.ecsPrefixLength, tostring(dq.dh:getRD()), dq.dh:getID(),\n"
	"    '[' .. dq:getTag('nope') .. ']', #dq:getContent(), tostring(dq.qname:isPartOf('example.com'))}, ' ')\n"
	"end)\n"
	"a_write = LuaAction(function(dq) --@WRITE\n"
	"  dq.rcode = DNSRCode.NXDOMAIN\n"
	"  dq.dh:setRD(false)\n"
	"  dq.dh:setCD(true)\n"
	"  dq:setTag('k', 'v')\n"
	"  dq:setTag('gone', 1)\n"
	"  dq:unsetTag('gone')\n"
	"  dq.pool = 'x'\n"
	"  dq.skipCache = true\n"
	"  dq.tempFailureTTL = 30\n"
	"  dq.useECS = false\n"
	"  dq.ecsPrefixLength = 16\n"
	"  local t = dq:getTagArray()\n"
	"  return DNSAction.None, t.k .. (t.gone or '-') .. dq.pool .. tostring(dq.dh:getRD()) .. dq.rcode\n"
	"end)\n"
	"a_tagfull = LuaAction(function(dq) --@TAGFULL\n"
	"  for i = 1, 100 do dq:setTag('key' .. i, string.rep('v', 10)) end\n"
	"end)\n"
	"r_bad = LuaRule(function(dq) --@RULE\n"
	"  return helpers.bad:check(dq.qname)\n"
	"end)\n"
	"a_err = LuaAction(function(dq) --@ERR\n"
	"  error('boom')\n"
	"end)\n"
	"a_loop = LuaAction(function(dq) --@LOOP\n"
	"  while true do end\n"
	"end)\n"
	"a_pcall_loop = LuaAction(function(dq) --@PCALLLOOP\n"
	"  while true do pcall(function() while true do end end) end\n"
	"end)\n"
	"a_mem = LuaAction(function(dq) --@MEM\n"
	"  local t = {}\n"
	"  for i = 1, 1e7 do t[i] = i end\n"
	"  return DNSAction.None\n"
	"end)\n"
	"a_blocked = LuaAction(function(dq) --@BLOCKED\n"
	"  newServer('192.0.2.99')\n"
	"  return DNSAction.None\n"
	"end)\n"
	"a_blocked_msgs = LuaAction(function(dq) --@BLOCKEDMSGS\n"
	"  local r = {}\n"
	"  for _, f in ipairs({function() newServer('192.0.2.99') end, function() addAction(AllRule(), DropAction()) end,\n"
	"      function() srv:addPool('y') end, function() getPool('nope') end, function() pc:expunge(0) end,\n"
	"      function() getPool('x'):setCache(pc) end, function() local n = newServer n('192.0.2.98') end}) do\n"
	"    local ok, e = pcall(f)\n"
	"    r[#r + 1] = ok and 'ok' or e:gsub('^[^ ]*: ', '')\n"
	"  end\n"
	"  return DNSAction.None, table.concat(r, '|')\n"
	"end)\n"
	"a_srv = LuaAction(function(dq) --@SRV\n"
	"  return DNSAction.None, srv:getName() .. ' ' .. tostring(srv:isUp()) .. ' ' .. getPool('x'):getName()\n"
	"    .. ' ' .. #getServers() .. ' ' .. getPoolServers('x')[1]:getName() .. ' ' .. tostring(getPool('x'):getCache() == pc)\n"
	"end)\n"
	"a_counter = LuaAction(function(dq) --@COUNTER\n"
	"  counter = counter + 1\n"
	"  return DNSAction.None, counter\n"
	"end)\n"
	"a_qps = LuaAction(function(dq) --@QPS\n"
	"  return limiter:check() and DNSAction.Allow or DNSAction.Drop\n"
	"end)\n"
	"a_nil = LuaAction(function(dq) --@NIL\n"
	"  return\n"
	"end)\n"
	"a_badret = LuaAction(function(dq) --@BADRET\n"
	"  return 'hello'\n"
	"end)\n"
	"a_dqspoof = LuaAction(function(dq) --@DQSPOOF\n"
	"  dq:spoof(newCA(upv.prefix .. '7'))\n"
	"  return DNSAction.HeaderModify\n"
	"end)\n"
	"a_dqspoof_tbl = LuaAction(function(dq) --@DQSPOOFTBL\n"
	"  dq:spoof({'192.0.2.1', newCA('192.0.2.2')})\n"
	"  return DNSAction.HeaderModify\n"
	"end)\n"
	"a_dqspoof_cname = LuaAction(function(dq) --@DQSPOOFCNAME\n"
	"  dq:spoof('target.example.')\n"
	"  return DNSAction.HeaderModify\n"
	"end)\n"
	"a_dqspoof_raw = LuaAction(function(dq) --@DQSPOOFRAW\n"
	"  dq:spoof({'\\192\\0\\2\\3'})\n"
	"  return DNSAction.HeaderModify\n"
	"end)\n"
	"a_setcontent = LuaAction(function(dq) --@SETCONTENT\n"
	"  local ok, e = pcall(function() dq:setContent('\\18\\52\\1') end)\n"
	"  dq:setContent('\\18\\52\\1\\0\\0\\1\\0\\0\\0\\0\\0\\0\\5other\\7example\\0\\0\\28\\0\\1')\n"
	"  return DNSAction.None, dq.qname:toString() .. dq.qtype .. ' ' .. tostring(ok)\n"
	"end)\n"
	"a_resp = LuaResponseAction(function(dr) --@RESP\n"
	"  local seen = {}\n"
	"  dr:editTTLs(function(section, qclass, qtype, ttl)\n"
	"    seen[#seen + 1] = section .. '/' .. qclass .. '/' .. qtype .. '/' .. ttl\n"
	"    return ttl // 2\n"
	"  end)\n"
	"  return DNSResponseAction.None, table.concat(seen, ',') .. ' ' .. dr:getTrailingData() .. ' '\n"
	"    .. dr:getSelectedBackend()\n"
	"end)\n"
	"a_do = LuaResponseAction(function(dr) --@DO\n"
	"  return DNSResponseAction.None, tostring(dr:getDO())\n"
	"end)\n"
	"addAction(QNameRule('chain.example.'), LuaAction(function(dq) --@CHAIN\n"
	"  return DNSAction.Spoof, '192.0.2.42'\n"
	"end))\n"
	"local ffi = require('ffi')\n"
	"local null = io.open('/dev/null')\n"
	"a_libs = LuaAction(function(dq) --@LIBS\n"
	"  local r = {}\n"
	"  for _, f in ipairs({function() return io.open('/dev/null') end, function() return os.execute('true') end,\n"
	"      function() return dofile('/dev/null') end, function() return debug.sethook() end,\n"
	"      function() return require('no_such_module') end, function() return require('ffi') == ffi end,\n"
	"      function() return require('bit') == bit end, function() return null:read('*a') end,\n"
	"      function() return type(os.getenv('PATH')) end, function() return unpack({7}) end}) do\n"
	"    local ok, e = pcall(f)\n"
	"    r[#r + 1] = ok and tostring(e) or e:gsub('^[^ ]*: ', '')\n"
	"  end\n"
	"  return DNSAction.None, table.concat(r, '|')\n"
	"end)\n"
	"a_ffi = LuaFFIAction(function(dq) --@FFI\n"
	"  local C = ffi.C\n"
	"  local ref, len = ffi.new('const char *[1]'), ffi.new('size_t[1]')\n"
	"  C.dnsdist_ffi_dnsquestion_get_qname_raw(dq, ref, len)\n"
	"  local s = C.dnsdist_ffi_dnsquestion_get_qtype(dq) .. ' ' .. #ffi.string(ref[0], len[0])\n"
	"    .. ' ' .. C.dnsdist_ffi_dnsquestion_get_remote_port(dq)\n"
	"  C.dnsdist_ffi_dnsquestion_set_tag(dq, 'k', 'v')\n"
	"  s = s .. ' ' .. ffi.string(C.dnsdist_ffi_dnsquestion_get_tag(dq, 'k'))\n"
	"  C.dnsdist_ffi_dnsquestion_set_result(dq, s, #s)\n"
	"  return DNSAction.None\n"
	"end)\n"
	"local spin = coroutine.create(function() while true do end end)\n"
	"local wspin = coroutine.wrap(function() while true do end end)\n"
	"local gen = coroutine.wrap(function(a) local b = coroutine.yield(a + 1) error('end ' .. b, 0) end)\n"
	"a_wrapcfg = LuaAction(function(dq) --@WRAPCFG\n"
	"  wspin()\n"
	"  return DNSAction.None\n"
	"end)\n"
	"a_gen = LuaAction(function(dq) --@GEN\n"
	"  local x = gen(1)\n"
	"  local ok, e = pcall(gen, 5)\n"
	"  return DNSAction.None, x .. ' ' .. tostring(ok) .. ' ' .. e\n"
	"end)\n"
	"a_coloop = LuaAction(function(dq) --@COLOOP\n"
	"  coroutine.resume(spin)\n"
	"  return DNSAction.None\n"
	"end)\n"
	"a_wraploop = LuaAction(function(dq) --@WRAPLOOP\n"
	"  local ok = pcall(coroutine.wrap(function() while true do end end))\n"
	"  while true do end\n"
	"end)\n";

/* The function number of a marker: its rank among the markers. */
static int
fn_of(const char *marker)
{
	char tag[64];
	const char *at, *p;
	int n = 1;

	snprintf(tag, sizeof(tag), "--@%s\n", marker);
	at = strstr(config_text, tag);
	assert_non_null(at);
	for (p = strstr(config_text, "--@"); p != NULL && p < at; p = strstr(p + 3, "--@"))
		n++;
	return n;
}

/* Its "file:line" as the state records it: the config's chunk name is "=cfg". */
static const char *
src_of(const char *marker)
{
	static char src[64];
	char tag[64];
	const char *at;
	int line = 1;

	snprintf(tag, sizeof(tag), "--@%s\n", marker);
	at = strstr(config_text, tag);
	assert_non_null(at);
	for (const char *p = config_text; p < at; p++)
		line += *p == '\n';
	snprintf(src, sizeof(src), "cfg:%d", line);
	return src;
}

/* ---- packets ----------------------------------------------------------------- */

#define PKT_CAP 1232

/* A query for @name/@qtype, RD set, ID 0x1234. @return its length. */
static size_t
build_query(uint8_t *p, const char *name, uint16_t qtype)
{
	size_t n = DLB_DNS_HDR;
	int len;

	memset(p, 0, DLB_DNS_HDR);
	dlb_wr16(p, 0x1234);
	dlb_wr16(p + 2, DLB_F_RD);
	dlb_wr16(p + 4, 1);
	len = dlb_wire_name_from_text(name, p + n, DLB_MAX_NAME);
	assert_true(len > 0);
	n += (size_t)len;
	dlb_wr16(p + n, qtype);
	dlb_wr16(p + n + 2, 1);
	return n + 4;
}

struct query {
	uint8_t pkt[PKT_CAP];
	struct dlb_dnsmsg m;
	struct sockaddr_in remote, local;
	struct dlb_dq dq;
};

static void
query_init(struct query *q, struct dlb_config *cfg, struct dlb_lua_worker *lw, const char *name,
	   uint16_t qtype)
{
	memset(q, 0, sizeof(*q));
	q->dq.pkt = q->pkt;
	q->dq.len = build_query(q->pkt, name, qtype);
	q->dq.cap = sizeof(q->pkt);
	assert_int_equal(dlb_wire_parse_query(q->pkt, q->dq.len, &q->m), DLB_OK);
	q->dq.m = &q->m;
	q->remote.sin_family = AF_INET;
	q->remote.sin_port = htons(5353);
	inet_pton(AF_INET, "192.0.2.53", &q->remote.sin_addr);
	q->local.sin_family = AF_INET;
	q->local.sin_port = htons(53);
	inet_pton(AF_INET, "127.0.0.1", &q->local.sin_addr);
	q->dq.remote = (const struct sockaddr *)&q->remote;
	q->dq.local = NULL;
	q->dq.cfg = cfg;
	q->dq.lua = lw;
	q->dq.be_index = -1;
	q->dq.now = q->dq.t_start = (double)time(NULL);
	dlb_dq_reset_decisions(&q->dq);
}

/* ---- the fixture: a config state and two workers ---------------------------------- */

struct fixture {
	struct dlb_config *cfg;
	struct dlb_lua_conf *lc;
	struct dlb_lua_worker *w[2];
	char err[1024];
	char arg[2048];
	size_t arglen;
};

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->cfg = dlb_config_new();
	assert_non_null(f->cfg);
	f->lc = dlb_lua_conf_new(f->cfg, DLB_LUA_PHASE_CONFIG);
	assert_non_null(f->lc);
	if (dlb_lua_conf_load_string(f->lc, config_text, "=cfg", f->err, sizeof(f->err)) != 0)
		fail_msg("config: %s", f->err);
	for (int i = 0; i < 2; i++) {
		f->w[i] = dlb_luaw_new(f->lc, f->cfg, i, f->err, sizeof(f->err));
		if (f->w[i] == NULL)
			fail_msg("worker %d: %s", i, f->err);
	}
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	for (int i = 0; i < 2; i++)
		dlb_luaw_free(f->w[i]);
	dlb_lua_conf_free(f->lc);
	dlb_rules_shutdown();
	dlb_config_free(f->cfg);
	free(f);
	return 0;
}

static int
act(struct fixture *f, int w, const char *marker, struct dlb_dq *dq)
{
	return dlb_luaw_action(f->w[w], fn_of(marker), src_of(marker), dq, dq->response, f->arg,
			       sizeof(f->arg), &f->arglen);
}

/* Run @marker on worker @w for a fresh query of www.example.com/A. */
static int
act_q(struct fixture *f, int w, const char *marker, struct query *q)
{
	query_init(q, f->cfg, f->w[w], "www.example.com", 1);
	return act(f, w, marker, &q->dq);
}

/* ---- tests: calls and results ------------------------------------------------------ */

static void
test_actions_on_both_workers(void **state)
{
	struct fixture *f = *state;
	struct query q;

	for (int w = 0; w < 2; w++) {
		assert_int_equal(act_q(f, w, "POOL", &q), DLB_DA_POOL);
		assert_string_equal(f->arg, "x");
		assert_int_equal(f->arglen, 1);

		assert_int_equal(act_q(f, w, "SPOOF", &q), DLB_DA_SPOOF);
		assert_string_equal(f->arg, "192.0.2.1");

		assert_int_equal(act_q(f, w, "PACKET", &q), DLB_DA_SPOOF_PACKET);
		assert_int_equal(f->arglen, 11);
		assert_memory_equal(f->arg, "\0\1\0\2bin\0ary", 11);

		assert_int_equal(act_q(f, w, "NIL", &q), DLB_DA_NONE);
		assert_int_equal(f->arglen, 0);
	}
}

static void
test_arg_truncated(void **state)
{
	struct fixture *f = *state;
	struct query q;
	char small[4];
	size_t len = 99;

	query_init(&q, f->cfg, f->w[0], "www.example.com", 1);
	assert_int_equal(dlb_luaw_action(f->w[0], fn_of("SPOOF"), src_of("SPOOF"), &q.dq, false,
					 small, sizeof(small), &len), DLB_DA_SPOOF);
	assert_string_equal(small, "192");
	assert_int_equal(len, 3);
}

static void
test_dq_read(void **state)
{
	struct fixture *f = *state;
	struct query q;
	char want[512];

	query_init(&q, f->cfg, f->w[1], "WWW.Example.com", 1);
	assert_int_equal(act(f, 1, "READ", &q.dq), DLB_DA_NONE);
	snprintf(want, sizeof(want), "WWW.Example.com. 1 1 192.0.2.53:5353 nil %d %d false Do53 UDP "
		 "false 0 0 nil false [] true 24 true 4660 [] %d true", (int)q.dq.len, PKT_CAP,
		 (int)q.dq.len);
	assert_string_equal(f->arg, want);

	/* the local address when there is one, TCP */
	query_init(&q, f->cfg, f->w[1], "www.example.com", 28);
	q.dq.local = (const struct sockaddr *)&q.local;
	q.dq.tcp = true;
	assert_int_equal(act(f, 1, "READ", &q.dq), DLB_DA_NONE);
	assert_non_null(strstr(f->arg, " 28 1 192.0.2.53:5353 127.0.0.1 "));
	assert_non_null(strstr(f->arg, " true Do53 TCP "));
}

static void
test_dq_write(void **state)
{
	struct fixture *f = *state;
	struct query q;

	assert_int_equal(act_q(f, 0, "WRITE", &q), DLB_DA_NONE);
	assert_string_equal(f->arg, "v-xfalse3");
	assert_int_equal(q.pkt[3] & 0xf, 3);			/* rcode */
	assert_int_equal(q.pkt[2] & 0x01, 0);			/* RD cleared */
	assert_int_equal(q.pkt[3] & 0x10, 0x10);		/* CD set */
	assert_int_equal(q.m.flags, dlb_rd16(q.pkt + 2));	/* the parse follows */
	assert_string_equal(dlb_tags_get(&q.dq.tags, "k"), "v");
	assert_null(dlb_tags_get(&q.dq.tags, "gone"));
	assert_true(q.dq.pool_set);
	assert_non_null(q.dq.pool);
	assert_ptr_equal(q.dq.pool, dlb_config_find_pool(f->cfg, "x"));
	assert_true(q.dq.skip_cache);
	assert_int_equal(q.dq.tempfail_ttl, 30);
	assert_int_equal(q.dq.use_ecs, 0);
	assert_int_equal(q.dq.ecs_prefix_v4, 16);

	/* tags that do not fit: an error, the query keeps what it had */
	assert_int_equal(act_q(f, 0, "TAGFULL", &q), -1);
}

static void
test_rule(void **state)
{
	struct fixture *f = *state;
	struct query q;

	for (int w = 0; w < 2; w++) {
		query_init(&q, f->cfg, f->w[w], "www.example.com", 1);
		assert_int_equal(dlb_luaw_rule(f->w[w], fn_of("RULE"), src_of("RULE"), &q.dq), 0);
		query_init(&q, f->cfg, f->w[w], "X.Bad.Example", 1);
		assert_int_equal(dlb_luaw_rule(f->w[w], fn_of("RULE"), src_of("RULE"), &q.dq), 1);
		/* a rule that fails does not match: -1 */
		assert_int_equal(dlb_luaw_rule(f->w[w], fn_of("ERR"), src_of("ERR"), &q.dq), -1);
	}
}

static void
test_errors(void **state)
{
	struct fixture *f = *state;
	struct query q;

	assert_int_equal(act_q(f, 0, "ERR", &q), -1);
	assert_int_equal(act_q(f, 0, "BADRET", &q), -1);
	/* the wrong function: a number that does not exist, or a different file:line */
	query_init(&q, f->cfg, f->w[0], "www.example.com", 1);
	assert_int_equal(dlb_luaw_action(f->w[0], 999, "cfg:1", &q.dq, false, f->arg,
					 sizeof(f->arg), &f->arglen), -1);
	assert_int_equal(dlb_luaw_action(f->w[0], fn_of("POOL"), "cfg:1", &q.dq, false, f->arg,
					 sizeof(f->arg), &f->arglen), -1);
	assert_int_equal(dlb_luaw_action(NULL, 1, "cfg:1", &q.dq, false, f->arg, sizeof(f->arg),
					 &f->arglen), -1);
	/* and the state still works */
	assert_int_equal(act_q(f, 0, "POOL", &q), DLB_DA_POOL);
}

static double
mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
test_instruction_limit(void **state)
{
	struct fixture *f = *state;
	struct query q;
	double t0 = mono();

	assert_int_equal(act_q(f, 0, "LOOP", &q), -1);
	/* a pcall inside the script cannot swallow the limit */
	assert_int_equal(act_q(f, 0, "PCALLLOOP", &q), -1);
	assert_true(mono() - t0 < 5.0);
	/* the budget is per call: the state goes on working */
	for (int i = 0; i < 100; i++)
		assert_int_equal(act_q(f, 0, "POOL", &q), DLB_DA_POOL);
	assert_int_equal(act_q(f, 0, "LOOP", &q), -1);
	assert_int_equal(act_q(f, 0, "SPOOF", &q), DLB_DA_SPOOF);
	/* coroutines: one the config made, one made in the call */
	t0 = mono();
	assert_int_equal(act_q(f, 0, "COLOOP", &q), -1);
	assert_int_equal(act_q(f, 1, "WRAPLOOP", &q), -1);
	assert_int_equal(act_q(f, 1, "WRAPCFG", &q), -1);
	assert_int_equal(act_q(f, 0, "GEN", &q), DLB_DA_NONE);
	assert_string_equal(f->arg, "2 false end 5");
	assert_true(mono() - t0 < 5.0);
	assert_int_equal(act_q(f, 0, "SPOOF", &q), DLB_DA_SPOOF);
}

static void
test_memory_limit(void **state)
{
	struct fixture *f = *state;
	struct query q;

	for (int i = 0; i < 3; i++) {
		assert_int_equal(act_q(f, 1, "MEM", &q), -1);
		assert_int_equal(act_q(f, 1, "POOL", &q), DLB_DA_POOL);
		assert_string_equal(f->arg, "x");
	}
}

static void
test_blocked(void **state)
{
	struct fixture *f = *state;
	struct query q;

	assert_int_equal(act_q(f, 0, "BLOCKED", &q), -1);
	assert_int_equal(f->cfg->nbackends, 1);
	assert_int_equal(act_q(f, 0, "BLOCKEDMSGS", &q), DLB_DA_NONE);
	assert_string_equal(f->arg,
			    "newServer cannot be called from a rule|"
			    "AllRule cannot be called from a rule|"
			    "addPool cannot be called from a rule|"
			    "getPool: no pool 'nope' (a rule cannot create one)|"
			    "expunge: not available (no RCU record for the configuration thread)|"
			    "setCache cannot be called from a rule|"
			    "newServer cannot be called from a rule");
	assert_null(dlb_config_find_pool(f->cfg, "nope"));
	assert_null(dlb_config_find_pool(f->cfg, "y"));
}

/* What a rule keeps of the standard libraries (lua/compat_lua.h), and the ffi module. */
static void
test_libraries_in_rules(void **state)
{
	struct fixture *f = *state;
	struct query q;

	assert_int_equal(act_q(f, 0, "LIBS", &q), DLB_DA_NONE);
	assert_string_equal(f->arg,
			    "io.open cannot be called from a rule|"
			    "os.execute cannot be called from a rule|"
			    "dofile cannot be called from a rule|"
			    "debug.sethook cannot be called from a rule|"
			    "require 'no_such_module': a rule cannot load a module, require it at the "
			    "top level of the configuration|"
			    "true|true||string|7");
	assert_int_equal(act_q(f, 1, "FFI", &q), DLB_DA_NONE);
	assert_string_equal(f->arg, "1 17 5353 v");
}

static void
test_config_objects_in_rules(void **state)
{
	struct fixture *f = *state;
	struct query q;

	for (int w = 0; w < 2; w++) {
		assert_int_equal(act_q(f, w, "SRV", &q), DLB_DA_NONE);
		assert_string_equal(f->arg, "b1 true x 1 b1 true");
	}
}

static void
test_globals_per_state(void **state)
{
	struct fixture *f = *state;
	struct query q;

	assert_int_equal(act_q(f, 0, "COUNTER", &q), DLB_DA_NONE);
	assert_string_equal(f->arg, "1");
	assert_int_equal(act_q(f, 0, "COUNTER", &q), DLB_DA_NONE);
	assert_string_equal(f->arg, "2");
	assert_int_equal(act_q(f, 1, "COUNTER", &q), DLB_DA_NONE);
	assert_string_equal(f->arg, "1");
}

static void
test_qps_limiter_shared(void **state)
{
	struct fixture *f = *state;
	struct query q;
	int allowed = 0;

	/* newQPSLimiter(1, 3): three tokens for both workers together */
	for (int i = 0; i < 3; i++)
		allowed += act_q(f, 0, "QPS", &q) == DLB_DA_ALLOW;
	for (int i = 0; i < 3; i++)
		allowed += act_q(f, 1, "QPS", &q) == DLB_DA_ALLOW;
	assert_true(allowed >= 3 && allowed <= 4);	/* 4: a second went by */
	assert_int_equal(act_q(f, 1, "QPS", &q) == DLB_DA_DROP ||
			 act_q(f, 0, "QPS", &q) == DLB_DA_DROP, 1);
}

static void
test_dq_spoof(void **state)
{
	struct fixture *f = *state;
	struct query q;
	size_t qlen;

	qlen = build_query(q.pkt, "www.example.com", 1);
	assert_int_equal(act_q(f, 0, "DQSPOOF", &q), DLB_DA_HEADER_MODIFY);
	assert_true(q.dq.len == qlen + 16);
	assert_int_equal(q.pkt[2] & 0x80, 0x80);		/* QR */
	assert_int_equal(dlb_rd16(q.pkt + 6), 1);		/* ANCOUNT */
	assert_memory_equal(q.pkt + q.dq.len - 4, "\xc0\x00\x02\x07", 4);
	assert_int_equal(dlb_rd32(q.pkt + q.dq.len - 10), 60);	/* TTL */

	assert_int_equal(act_q(f, 0, "DQSPOOFTBL", &q), DLB_DA_HEADER_MODIFY);
	assert_int_equal(dlb_rd16(q.pkt + 6), 2);
	assert_true(memcmp(q.pkt + q.dq.len - 4, "\xc0\x00\x02\x02", 4) == 0 ||
		    memcmp(q.pkt + q.dq.len - 20, "\xc0\x00\x02\x02", 4) == 0);

	assert_int_equal(act_q(f, 0, "DQSPOOFCNAME", &q), DLB_DA_HEADER_MODIFY);
	assert_int_equal(dlb_rd16(q.pkt + 6), 1);
	assert_int_equal(dlb_rd16(q.pkt + qlen + 2), 5);	/* CNAME */

	assert_int_equal(act_q(f, 0, "DQSPOOFRAW", &q), DLB_DA_HEADER_MODIFY);
	assert_int_equal(dlb_rd16(q.pkt + 6), 1);
	assert_memory_equal(q.pkt + q.dq.len - 4, "\xc0\x00\x02\x03", 4);
}

static void
test_dq_set_content(void **state)
{
	struct fixture *f = *state;
	struct query q;

	assert_int_equal(act_q(f, 1, "SETCONTENT", &q), DLB_DA_NONE);
	assert_string_equal(f->arg, "other.example.28 false");
	assert_int_equal(q.m.qtype, 28);
	assert_int_equal(q.dq.len, 12 + 15 + 4);
	assert_int_equal(q.m.qname_len, 15);
}

/* A response: www.example.com A 300 192.0.2.1, then 5 octets of trailing data. */
static size_t
build_response(uint8_t *p)
{
	size_t n = build_query(p, "www.example.com", 1);
	static const uint8_t rr[] = {
		0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0x01, 0x2c, 0, 4, 192, 0, 2, 1,
	};

	dlb_wr16(p + 2, DLB_F_QR | DLB_F_RD | DLB_F_RA);
	dlb_wr16(p + 6, 1);
	memcpy(p + n, rr, sizeof(rr));
	n += sizeof(rr);
	memcpy(p + n, "TRAIL", 5);
	return n + 5;
}

/* An OPT RR with DO set at @p (the caller bumps ARCOUNT). @return its length. */
static size_t
add_opt_do(uint8_t *p)
{
	static const uint8_t opt[] = { 0, 0, 41, 0x04, 0xd0, 0, 0, 0x80, 0, 0, 0 };

	memcpy(p, opt, sizeof(opt));
	return sizeof(opt);
}

static void
test_response(void **state)
{
	struct fixture *f = *state;
	struct query q;

	query_init(&q, f->cfg, f->w[0], "www.example.com", 1);
	q.dq.len = build_response(q.pkt);
	assert_int_equal(dlb_wire_parse_response_question(q.pkt, q.dq.len, &q.m), DLB_OK);
	q.dq.response = true;
	q.dq.be_index = 0;
	assert_int_equal(act(f, 0, "RESP", &q.dq), DLB_DRA_NONE);
	assert_string_equal(f->arg, "1/1/1/300 TRAIL b1");
	assert_int_equal(dlb_rd32(q.pkt + q.dq.len - 5 - 10), 150);
	assert_int_equal(act(f, 0, "DO", &q.dq), DLB_DRA_NONE);
	assert_string_equal(f->arg, "false");
	/* spoofing is for queries */
	assert_int_equal(act(f, 0, "DQSPOOF", &q.dq), -1);

	/* the DO bit of a response's OPT RR (after the answer), and of a query's */
	query_init(&q, f->cfg, f->w[0], "www.example.com", 1);
	q.dq.len = build_response(q.pkt) - 5;
	q.dq.len += add_opt_do(q.pkt + q.dq.len);
	dlb_wr16(q.pkt + 10, 1);
	assert_int_equal(dlb_wire_parse_response_question(q.pkt, q.dq.len, &q.m), DLB_OK);
	q.dq.response = true;
	assert_int_equal(act(f, 0, "DO", &q.dq), DLB_DRA_NONE);
	assert_string_equal(f->arg, "true");
	query_init(&q, f->cfg, f->w[0], "www.example.com", 1);
	q.dq.len += add_opt_do(q.pkt + q.dq.len);
	dlb_wr16(q.pkt + 10, 1);
	assert_int_equal(dlb_wire_parse_query(q.pkt, q.dq.len, &q.m), DLB_OK);
	assert_int_equal(act(f, 0, "READ", &q.dq), DLB_DA_NONE);
	assert_non_null(strstr(f->arg, " Do53 UDP true "));
}

/* The whole chain: QNameRule + LuaAction, run by the rule engine on worker 1's state. */
static void
test_chain(void **state)
{
	struct fixture *f = *state;
	struct dlb_stats st;
	struct query q;

	memset(&st, 0, sizeof(st));
	query_init(&q, f->cfg, f->w[1], "chain.example", 1);
	assert_int_equal(dlb_rules_run_query(dlb_rules_chain(DLB_CHAIN_QUERY), &q.dq, &st),
			 DLB_R_ANSWER);
	assert_memory_equal(q.pkt + q.dq.len - 4, "\xc0\x00\x02\x2a", 4);
	/* no Lua state: the action fails (SERVFAIL) and is counted */
	query_init(&q, f->cfg, NULL, "chain.example", 1);
	assert_int_equal(dlb_rules_run_query(dlb_rules_chain(DLB_CHAIN_QUERY), &q.dq, &st),
			 DLB_R_SERVFAIL);
	assert_int_equal(st.lua_errors, 1);
}

/* ---- building worker states: failures ------------------------------------------------- */

static void
test_replay_failures(void **state)
{
	struct dlb_config *cfg = dlb_config_new();
	struct dlb_lua_conf *lc;
	char path[] = "/tmp/test_lua_worker_XXXXXX";
	char err[512];
	int fd;
	FILE *fp;

	(void)state;
	/* a file the workers cannot read again: the error names it */
	fd = mkstemp(path);
	assert_true(fd >= 0);
	fp = fdopen(fd, "w");
	fputs("x = 1\n", fp);
	fclose(fp);
	lc = dlb_lua_conf_new(cfg, DLB_LUA_PHASE_CONFIG);
	assert_int_equal(dlb_lua_conf_load_file(lc, path, err, sizeof(err)), 0);
	unlink(path);
	assert_null(dlb_luaw_new(lc, cfg, 3, err, sizeof(err)));
	assert_non_null(strstr(err, path));
	assert_non_null(strstr(err, "worker 3"));
	dlb_lua_conf_free(lc);

	/* a config too big for the workers' memory limit */
	lc = dlb_lua_conf_new(cfg, DLB_LUA_PHASE_CONFIG);
	assert_int_equal(dlb_lua_conf_load_string(lc, "setLuaMemoryLimit(1048576)\n"
						  "big = {} for i = 1, 200000 do big[i] = i end\n",
						  "=big", err, sizeof(err)), 0);
	assert_null(dlb_luaw_new(lc, cfg, 0, err, sizeof(err)));
	assert_non_null(strstr(err, "not enough memory"));
	assert_non_null(strstr(err, "setLuaMemoryLimit"));
	dlb_lua_conf_free(lc);

	/* the limits are config-time only */
	lc = dlb_lua_conf_new(cfg, DLB_LUA_PHASE_CONFIG);
	dlb_lua_conf_set_phase(lc, DLB_LUA_PHASE_RUNNING);
	assert_int_equal(dlb_lua_conf_load_string(lc, "setLuaInstructionLimit(5000)", "=c", err,
						  sizeof(err)), -1);
	assert_non_null(strstr(err, "cannot be altered at runtime"));
	dlb_lua_conf_free(lc);
	dlb_config_free(cfg);
}

/* The replay is silent, builds no big cache, and touches nothing of the real config. */
static void
test_replay_isolated(void **state)
{
	struct dlb_config *cfg = dlb_config_new();
	struct dlb_lua_conf *lc = dlb_lua_conf_new(cfg, DLB_LUA_PHASE_CONFIG);
	struct dlb_lua_worker *lw;
	char err[512];

	(void)state;
	assert_int_equal(dlb_lua_conf_load_string(lc, "newServer('192.0.2.1')\n"
						  "newPacketCache(1000000)\n"
						  "setACL('10.0.0.0/8')\n", "=iso", err,
						  sizeof(err)), 0);
	lw = dlb_luaw_new(lc, cfg, 0, err, sizeof(err));
	assert_non_null(lw);
	assert_int_equal(cfg->nbackends, 1);
	assert_int_equal(cfg->ncaches, 1);
	assert_int_equal(cfg->acl.n, 1);
	dlb_luaw_free(lw);
	dlb_lua_conf_free(lc);
	dlb_config_free(cfg);
}

/* ---- the helper objects ------------------------------------------------------------------ */

static const char objects_prelude[] =
	"local function eq(a, b)\n"
	"  if a ~= b then error(string.format('%s ~= %s', tostring(a), tostring(b)), 2) end\n"
	"end\n"
	"local function fails(f, pat)\n"
	"  local ok, e = pcall(f)\n"
	"  if ok then error('did not fail', 2) end\n"
	"  if pat and not tostring(e):find(pat, 1, true) then error('error: ' .. tostring(e), 2) end\n"
	"end\n";

static void
run_lua(const char *chunkname, const char *code)
{
	struct dlb_config *cfg = dlb_config_new();
	struct dlb_lua_conf *lc = dlb_lua_conf_new(cfg, DLB_LUA_PHASE_CONFIG);
	size_t n = strlen(objects_prelude) + strlen(code) + 1;
	char *all = malloc(n);
	char err[1024];

	assert_non_null(all);
	snprintf(all, n, "%s%s", objects_prelude, code);
	if (dlb_lua_conf_load_string(lc, all, chunkname, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	free(all);
	dlb_lua_conf_free(lc);
	dlb_config_free(cfg);
}

static void
test_dnsname(void **state)
{
	(void)state;
	run_lua("=dnsname",
		"local n = newDNSName('WWW.Example.com')\n"
		"eq(n:toString(), 'WWW.Example.com.') eq(n:tostring(), 'WWW.Example.com.')\n"
		"eq(tostring(n), 'WWW.Example.com.') eq(n:toStringNoDot(), 'WWW.Example.com')\n"
		"eq(n:toDNSString(), '\\3WWW\\7Example\\3com\\0')\n"
		"eq(n:countLabels(), 3) eq(n:wirelength(), 17)\n"
		"eq(n:isPartOf(newDNSName('example.COM')), true) eq(n:isPartOf(newDNSName('ample.com')), false)\n"
		"eq(n:isPartOf('com'), true) eq(n:isPartOf(newDNSName('.')), true)\n"
		/* dnsdist 1.7.3's values (burtleCI) */
		"eq(n:hash(), 2017814160) eq(newDNSName('www.example.com'):hash(), 2017814160)\n"
		"eq(newDNSName('.'):hash(), 1843378377) eq(newDNSName('a.b.c'):hash(), 4074008190)\n"
		"eq(newDNSName('x'):hash(), 2700808934)\n"
		"eq(newDNSName('.'):toString(), '.') eq(newDNSName(''):toString(), '.')\n"
		"eq(newDNSName('.'):countLabels(), 0) eq(newDNSName('.'):wirelength(), 1)\n"
		"eq(newDNSName('.'):toStringNoDot(), '') eq(n:empty(), false)\n"
		"eq(n == newDNSName('www.example.com.'), true) eq(n == newDNSName('www.example.org'), false)\n"
		"eq(n:equal('www.EXAMPLE.com'), true)\n"
		"local c = newDNSName('a.b.c')\n"
		"eq(c:chopOff(), true) eq(c:toString(), 'b.c.') eq(c:chopOff(), true) eq(c:chopOff(), true)\n"
		"eq(c:toString(), '.') eq(c:chopOff(), false) eq(c:toString(), '.')\n"
		"eq(newDNSNameFromRaw('\\3www\\7example\\3com\\0'):toString(), 'www.example.com.')\n"
		"eq(newDNSNameFromRaw('\\1a\\0trailing'):toString(), 'a.')\n"
		"fails(function() newDNSNameFromRaw('\\3ww') end, 'invalid wire name')\n"
		"fails(function() newDNSNameFromRaw('\\64' .. string.rep('a', 64) .. '\\0') end, 'label')\n"
		"fails(function() newDNSName('a..b') end, \"bad name 'a..b'\")\n"
		"fails(function() newDNSName(string.rep('a', 64)) end)\n"
		"eq(newDNSName('a\\\\.b.c'):toString(), 'a\\\\.b.c.')\n"
		"eq(newDNSNameFromRaw('\\3a b\\0'):toString(), 'a\\\\032b.')\n");
}

static void
test_combo_address(void **state)
{
	(void)state;
	run_lua("=ca",
		"local a = newCA('192.0.2.1')\n"
		"eq(a:toString(), '192.0.2.1') eq(a:tostring(), '192.0.2.1') eq(tostring(a), '192.0.2.1')\n"
		"eq(a:toStringWithPort(), '192.0.2.1:0') eq(a:tostringWithPort(), '192.0.2.1:0')\n"
		"eq(a:getPort(), 0) eq(a:isIPv4(), true) eq(a:isIPv6(), false)\n"
		"local b = newCA('192.0.2.1:53') eq(b:toStringWithPort(), '192.0.2.1:53') eq(b:getPort(), 53)\n"
		"local c = newCA('2001:db8::1') eq(c:toString(), '2001:db8::1')\n"
		"eq(c:toStringWithPort(), '[2001:db8::1]:0') eq(c:isIPv6(), true)\n"
		"eq(newCA('[2001:db8::1]:53'):toStringWithPort(), '[2001:db8::1]:53')\n"
		"fails(function() newCA('foo') end, \"Unable to convert presentation address 'foo'\")\n"
		"eq(newCA('192.0.2.1') == newCA('192.0.2.1'), true) eq(a == b, false)\n"
		"local t = newCA('192.0.2.255:53') t:truncate(24) eq(t:toStringWithPort(), '192.0.2.0:53')\n"
		"local t6 = newCA('2001:db8::ffff') t6:truncate(64) eq(t6:toString(), '2001:db8::')\n"
		"local m = newCA('::ffff:192.0.2.1')\n"
		"eq(m:isMappedIPv4(), true) eq(m:mapToIPv4():toString(), '192.0.2.1') eq(a:isMappedIPv4(), false)\n"
		"fails(function() c:mapToIPv4() end, \"can't map non-mapped\")\n"
		"eq(newCAFromRaw('\\192\\0\\2\\1', 53):toStringWithPort(), '192.0.2.1:53')\n"
		"eq(newCAFromRaw(string.rep('\\0', 15) .. '\\1', 0):toStringWithPort(), '[::1]:0')\n"
		"eq(newCAFromRaw('\\192\\0\\2\\1'):getPort(), 0)\n"
		"fails(function() newCAFromRaw('abc', 53) end, '4 or 16')\n");
}

static void
test_netmask_and_group(void **state)
{
	(void)state;
	run_lua("=nm",
		"local n = newNetmask('192.0.2.77/24')\n"
		"eq(n:getNetwork():toString(), '192.0.2.0') eq(n:getMaskedNetwork():toString(), '192.0.2.0')\n"
		"eq(n:getBits(), 24) eq(n:isIPv4(), true) eq(n:isIPv6(), false)\n"
		"eq(n:toString(), '192.0.2.0/24') eq(tostring(n), '192.0.2.0/24')\n"
		"eq(n:match('192.0.2.5'), true) eq(n:match('192.0.3.5'), false) eq(n:match(newCA('192.0.2.9')), true)\n"
		"eq(newNetmask(newCA('192.0.2.77'), 16):toString(), '192.0.0.0/16')\n"
		"eq(newNetmask('192.0.2.77'):toString(), '192.0.2.77/32')\n"
		"eq(newNetmask('2001:db8::1/64'):toString(), '2001:db8::/64')\n"
		"eq(newNetmask('1.2.3.4/24') == newNetmask('1.2.3.0/24'), true)\n"
		"fails(function() newNetmask('foo') end, \"Unable to convert 'foo' to a netmask\")\n"
		"local g = newNMG()\n"
		"g:addMask('192.0.2.0/24') g:addMasks({'10.0.0.0/8', '2001:db8::/32'})\n"
		"eq(g:size(), 3) eq(g:toString(), 'NetmaskGroup 10.0.0.0/8, 192.0.2.0/24, 2001:db8::/32')\n"
		"eq(tostring(g), g:toString())\n"
		"eq(g:match(newCA('10.1.2.3')), true) eq(g:match(newCA('11.1.2.3')), false) eq(g:match('2001:db8::5'), true)\n"
		"g:addMask('10.0.0.0/8') eq(g:size(), 3)\n"
		"g:addMask(newNetmask('172.16.0.0/12')) eq(g:size(), 4)\n"
		"g:addMasks({['1.0.0.0/8'] = true, [newCA('9.9.9.9')] = 1}) eq(g:size(), 6) eq(g:match('9.9.9.9'), true)\n"
		"fails(function() g:addMask('!10.1.0.0/16') end, 'not supported')\n"
		"fails(function() g:addMasks({'3.0.0.0/8', 'foo'}) end, 'foo') eq(g:size(), 6)\n"
		"g:clear() eq(g:size(), 0) eq(g:toString(), 'NetmaskGroup ')\n");
}

static void
test_suffix_match_node(void **state)
{
	(void)state;
	run_lua("=smn",
		"local s = newSuffixMatchNode()\n"
		"s:add('Example.com') s:add(newDNSName('example.org.')) s:add({'a.net', 'b.net'})\n"
		"s:add({newDNSName('c.net')})\n"
		"eq(s:check(newDNSName('www.EXAMPLE.com')), true) eq(s:check(newDNSName('example.co')), false)\n"
		"eq(s:check(newDNSName('x.b.net')), true) eq(s:check('x.c.net'), true) eq(s:check('net'), false)\n"
		"eq(s:size(), 5)\n"
		"s:remove('example.com') eq(s:check(newDNSName('www.example.com')), false)\n"
		"s:remove(newDNSName('example.org')) eq(s:check('example.org'), false)\n"
		"s:remove({'a.net'}) eq(s:check('a.net'), false) eq(s:check('b.net'), true)\n"
		"fails(function() s:add('a..b') end, 'bad name')\n"
		"fails(function() s:add({'ok.example', 5}) end) eq(s:check('ok.example'), false)\n"
		"eq(tostring(s):sub(1, 16), 'SuffixMatchNode ')\n");
}

static void
test_dnsname_set(void **state)
{
	(void)state;
	run_lua("=nameset",
		"local ns = newDNSNameSet()\n"
		"ns:add(newDNSName('a.com')) ns:add(newDNSName('A.com')) eq(ns:size(), 1)\n"
		"ns:add('b.com') ns:add({'c.org', newDNSName('d.org')}) eq(ns:size(), 4)\n"
		"eq(ns:check(newDNSName('a.COM')), true) eq(ns:check(newDNSName('x.a.com')), false)\n"
		"eq(ns:check('b.com'), true)\n"
		"eq(ns:delete(newDNSName('a.com')), 1) eq(ns:size(), 3) eq(ns:delete(newDNSName('zz.com')), 0)\n"
		"eq(ns:empty(), false)\n"
		"eq(ns:toString(), 'b.com\\nc.org\\nd.org\\n') eq(tostring(ns), ns:toString())\n"
		"ns:clear() eq(ns:size(), 0) eq(ns:empty(), true) eq(ns:toString(), '')\n");
}

static void
test_qps_limiter(void **state)
{
	(void)state;
	run_lua("=qps",
		"local q = newQPSLimiter(2, 3)\n"
		"eq(q:check(), true) eq(q:check(), true) eq(q:check(), true) eq(q:check(), false)\n"
		"eq(tostring(q), 'QPSLimiter(2, 3)')\n"
		"eq(newQPSLimiter(0, 5):check(), false)\n"
		"fails(function() newQPSLimiter(-1, 1) end, 'negative')\n");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_actions_on_both_workers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_arg_truncated, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dq_read, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dq_write, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rule, setup, teardown),
		cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_instruction_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_memory_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_blocked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_libraries_in_rules, setup, teardown),
		cmocka_unit_test_setup_teardown(test_config_objects_in_rules, setup, teardown),
		cmocka_unit_test_setup_teardown(test_globals_per_state, setup, teardown),
		cmocka_unit_test_setup_teardown(test_qps_limiter_shared, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dq_spoof, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dq_set_content, setup, teardown),
		cmocka_unit_test_setup_teardown(test_response, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chain, setup, teardown),
		cmocka_unit_test(test_replay_failures),
		cmocka_unit_test(test_replay_isolated),
		cmocka_unit_test(test_dnsname),
		cmocka_unit_test(test_combo_address),
		cmocka_unit_test(test_netmask_and_group),
		cmocka_unit_test(test_suffix_match_node),
		cmocka_unit_test(test_dnsname_set),
		cmocka_unit_test(test_qps_limiter),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
