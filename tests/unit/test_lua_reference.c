/*
 * test_lua_reference.c - the Lua objects table (lua/lua_reference.c) against
 * what the code exposes, both ways: a member the code has and the table
 * lacks fails, and so does a documented member the code lacks.
 *
 * - Objects whose metatable __index is a table (the helper objects of
 *   lua/objects.c, ServerPool, PacketCache) or a closure over one (Server):
 *   the table's keys are compared with the documented methods.
 * - Objects whose __index is a C function (dq, Server, ServerPolicy) and
 *   dq.dh (its metatable is hidden by __metatable): the names the C source
 *   dispatches on are extracted from lua/worker.c and lua/conf.c (the
 *   strcmp() names of the __index/__newindex functions, the luaL_Reg method
 *   arrays) and compared with the documented fields, read-write fields and
 *   methods.
 * - At runtime, every documented field and method is read on a live object
 *   (dq and dq.dh inside a LuaAction of a worker state), must be non-nil
 *   (methods: functions), and writing a field back must work for read-write
 *   fields and raise for read-only ones. Operators (__eq, __tostring) and
 *   constructors (global functions) are checked on the metatables and the
 *   globals.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <lauxlib.h>
#include <lua.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dnslb/core/config.h"
#include "dnslb/core/wire.h"
#include "lua/conf.h"
#include "lua/lua_reference.h"
#include "lua/worker.h"
#include "rules/rules.h"

#ifndef DLB_SOURCE_DIR
#error "DLB_SOURCE_DIR must name the source tree (tests/CMakeLists.txt)"
#endif

/* the metatables that exist only in worker states (lua/worker.c) */
static bool
worker_only(const char *mt)
{
	return strcmp(mt, "DNSQuestion") == 0 || strcmp(mt, "DNSHeader") == 0;
}

/* The OBJECT line of metatable @mt. */
static const struct dlb_lref *
object_of(const char *mt)
{
	for (size_t i = 0; i < dlb_lua_nreference; i++)
		if (dlb_lua_reference[i].kind == DLB_LREF_OBJECT &&
		    strcmp(dlb_lua_reference[i].name, mt) == 0)
			return &dlb_lua_reference[i];
	fail_msg("no object with metatable %s in dlb_lua_reference", mt);
	return NULL;
}

/* Whether @obj documents @name with a kind in @kinds (a bit per kind). */
static bool
documented(const struct dlb_lref *obj, const char *name, unsigned kinds)
{
	for (const struct dlb_lref *r = obj + 1;
	     r < dlb_lua_reference + dlb_lua_nreference && r->kind != DLB_LREF_OBJECT; r++)
		if ((kinds & (1u << r->kind)) != 0 && strcmp(r->name, name) == 0)
			return true;
	return false;
}

#define K(k) (1u << (k))
#define K_FIELDS (K(DLB_LREF_FIELD_R) | K(DLB_LREF_FIELD_RW))

/* ---- names from the C source --------------------------------------------------------- */

struct names {
	char v[64][48];
	int n;
};

static char *
read_source(const char *rel)
{
	char path[1024];
	FILE *fp;
	char *buf;
	long len;

	snprintf(path, sizeof(path), "%s/%s", DLB_SOURCE_DIR, rel);
	fp = fopen(path, "rb");
	if (fp == NULL)
		fail_msg("cannot open %s", path);
	assert_int_equal(fseek(fp, 0, SEEK_END), 0);
	len = ftell(fp);
	assert_true(len > 0);
	rewind(fp);
	buf = malloc((size_t)len + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)len, fp), (size_t)len);
	buf[len] = '\0';
	fclose(fp);
	return buf;
}

static void
add_name(struct names *ns, const char *s, size_t len)
{
	assert_true(len > 0 && len < sizeof(ns->v[0]));
	assert_true(ns->n < (int)(sizeof(ns->v) / sizeof(ns->v[0])));
	for (int i = 0; i < ns->n; i++)
		if (strlen(ns->v[i]) == len && memcmp(ns->v[i], s, len) == 0)
			return;
	memcpy(ns->v[ns->n], s, len);
	ns->v[ns->n++][len] = '\0';
}

/* The text from @start to @end (exclusive) of @src, which must contain them. */
static void
span(const char *src, const char *file, const char *start, const char *end, const char **from,
     const char **to)
{
	*from = strstr(src, start);
	if (*from == NULL)
		fail_msg("%s: '%s' not found: update tests/unit/test_lua_reference.c", file, start);
	*to = strstr(*from, end);
	assert_non_null(*to);
}

/* The string literals compared by strcmp() in C function @fn of @file. */
static void
strcmp_names(const char *src, const char *file, const char *fn, struct names *ns)
{
	char start[128];
	const char *p, *end;

	snprintf(start, sizeof(start), "\n%s(lua_State *L)\n{", fn);
	span(src, file, start, "\n}\n", &p, &end);
	while ((p = strstr(p, "strcmp(")) != NULL && p < end) {
		const char *q = strchr(p, '"'), *close = strchr(p, ')');

		assert_non_null(q);
		if (close != NULL && close < q)
			fail_msg("%s: %s: a strcmp() without a literal", file, fn);
		p = strchr(q + 1, '"');
		assert_non_null(p);
		add_name(ns, q + 1, (size_t)(p - q - 1));
	}
}

/* The names of luaL_Reg array @arr of @file. */
static void
reg_names(const char *src, const char *file, const char *arr, struct names *ns)
{
	char start[128];
	const char *p, *end;

	snprintf(start, sizeof(start), " %s[] = {", arr);
	span(src, file, start, "\n};", &p, &end);
	while ((p = strstr(p, "{ \"")) != NULL && p < end) {
		const char *q = strchr(p + 3, '"');

		assert_non_null(q);
		add_name(ns, p + 3, (size_t)(q - p - 3));
		p = q;
	}
}

/* Both ways: the set @ns against the members of @obj of kinds @kinds. */
static int
compare(const struct dlb_lref *obj, const struct names *ns, unsigned kinds, const char *what)
{
	int bad = 0;

	for (int i = 0; i < ns->n; i++)
		if (!documented(obj, ns->v[i], kinds)) {
			print_error("%s: %s '%s' is in the code but not in lua/lua_reference.c\n",
				    obj->object, what, ns->v[i]);
			bad++;
		}
	for (const struct dlb_lref *r = obj + 1;
	     r < dlb_lua_reference + dlb_lua_nreference && r->kind != DLB_LREF_OBJECT; r++) {
		bool found = false;

		if ((kinds & (1u << r->kind)) == 0)
			continue;
		for (int i = 0; i < ns->n && !found; i++)
			found = strcmp(ns->v[i], r->name) == 0;
		if (!found) {
			print_error("%s: %s '%s' is documented but not in the code\n", obj->object,
				    what, r->name);
			bad++;
		}
	}
	return bad;
}

/* The objects whose members the code picks in C: where to find their names. */
static const struct {
	const char *mt, *file, *index_fn, *newindex_fn, *methods;
} dispatch[] = {
	{ "DNSQuestion", "lua/worker.c", "l_dq_index", "l_dq_newindex", "dq_methods" },
	{ "DNSHeader", "lua/worker.c", NULL, NULL, "dh_methods" },
	{ "DownstreamState", "lua/conf.c", "l_server_index", "l_server_newindex", "server_methods" },
	{ "ServerPolicy", "lua/conf.c", "l_policy_index", NULL, NULL },
};

static void
test_source_dispatch(void **state)
{
	int bad = 0;

	(void)state;
	for (size_t d = 0; d < sizeof(dispatch) / sizeof(dispatch[0]); d++) {
		const struct dlb_lref *obj = object_of(dispatch[d].mt);
		char *src = read_source(dispatch[d].file);
		struct names fields = { .n = 0 }, rw = { .n = 0 }, methods = { .n = 0 };

		if (dispatch[d].index_fn != NULL)
			strcmp_names(src, dispatch[d].file, dispatch[d].index_fn, &fields);
		bad += compare(obj, &fields, K_FIELDS, "field");
		if (dispatch[d].newindex_fn != NULL)
			strcmp_names(src, dispatch[d].file, dispatch[d].newindex_fn, &rw);
		bad += compare(obj, &rw, K(DLB_LREF_FIELD_RW), "writable field");
		if (dispatch[d].methods != NULL)
			reg_names(src, dispatch[d].file, dispatch[d].methods, &methods);
		bad += compare(obj, &methods, K(DLB_LREF_METHOD), "method");
		free(src);
	}
	if (bad != 0)
		fail_msg("%d difference(s) between lua/lua_reference.c and the C dispatch", bad);
}

/* ---- the config state: metatables, constructors, live objects -------------------------- */

/* One live instance of each object of the config state, by metatable name. */
static const char instances_code[] =
	"newServer({address = '192.0.2.10:53', name = 'b1'})\n"
	"setLocal('127.0.0.1:5399')\n"
	"setRedis('127.0.0.1:1')\n"
	"instances = {\n"
	"  DNSName = newDNSName('www.example.com'), ComboAddress = newCA('192.0.2.1:53'),\n"
	"  Netmask = newNetmask('192.0.2.0/24'), NetmaskGroup = newNMG(),\n"
	"  SuffixMatchNode = newSuffixMatchNode(), DNSNameSet = newDNSNameSet(),\n"
	"  QPSLimiter = newQPSLimiter(1, 1), DownstreamState = getServer(0),\n"
	"  ServerPool = getPool(''), PacketCache = newPacketCache(10),\n"
	"  ServerPolicy = newServerPolicy('p', function() return nil end),\n"
	"  DynBlockRulesGroup = dynBlockRulesGroup(),\n"
	"  KeyValueStore = newRedisKVStore({key = 'k'}),\n"
	"  KeyValueLookupKey = KeyValueLookupKeyQName(), ClientState = getBind(0),\n"
	"  TimedIPSetRule = TimedIPSetRule(),\n"
	"  SVCRecordParameters = newSVCRecordParameters(1, 'a.example.'),\n"
	"}\n"
	"function write_back(o, k) o[k] = o[k] end\n";

/* Push the method table of the metatable at the top: its __index table, or
 * upvalue 1 of its __index closure, or nil. */
static void
push_methods(lua_State *L)
{
	lua_getfield(L, -1, "__index");
	if (lua_istable(L, -1))
		return;
	if (lua_iscfunction(L, -1) && lua_getupvalue(L, -1, 1) != NULL) {
		lua_remove(L, -2);
		if (lua_istable(L, -1))
			return;
	}
	lua_pop(L, 1);
	lua_pushnil(L);
}

static void
test_config_objects(void **state)
{
	struct dlb_config *cfg = dlb_config_new();
	struct dlb_lua_conf *lc = dlb_lua_conf_new(cfg, DLB_LUA_PHASE_CONFIG);
	char err[1024];
	lua_State *L;
	int bad = 0;

	(void)state;
	assert_non_null(lc);
	if (dlb_lua_conf_load_string(lc, instances_code, "=instances", err, sizeof(err)) != 0)
		fail_msg("%s", err);
	L = dlb_lua_conf_state(lc);
	for (size_t i = 0; i < dlb_lua_nreference; i++) {
		const struct dlb_lref *obj = &dlb_lua_reference[i];
		static const char *const ops[] = { "__eq", "__tostring" };
		struct names methods = { .n = 0 };
		int top = lua_gettop(L);

		if (obj->kind != DLB_LREF_OBJECT || worker_only(obj->name))
			continue;
		if (obj->name[0] == '\0') {
			/* a section of global functions only (no metatable): they must exist */
			for (const struct dlb_lref *r = obj + 1;
			     r < dlb_lua_reference + dlb_lua_nreference && r->kind != DLB_LREF_OBJECT;
			     r++) {
				if (r->kind != DLB_LREF_FUNCTION) {
					print_error("%s: only functions in a section without an object\n",
						    obj->object);
					bad++;
				} else if (lua_getglobal(L, r->name) != LUA_TFUNCTION) {
					print_error("%s: %s is not a global function\n", obj->object,
						    r->name);
					bad++;
				}
				lua_settop(L, top);
			}
			continue;
		}
		if (luaL_getmetatable(L, obj->name) != LUA_TTABLE)
			fail_msg("%s: no metatable '%s' in the config state", obj->object, obj->name);
		/* operators: both ways */
		for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
			bool has = lua_getfield(L, -1, ops[o]) != LUA_TNIL;

			lua_pop(L, 1);
			if (has != documented(obj, ops[o], K(DLB_LREF_OPERATOR))) {
				print_error("%s: operator %s is %s\n", obj->object, ops[o],
					    has ? "in the metatable but not documented" :
						  "documented but not in the metatable");
				bad++;
			}
		}
		/* methods of an __index table: both ways */
		push_methods(L);
		if (lua_istable(L, -1)) {
			lua_pushnil(L);
			while (lua_next(L, -2) != 0) {
				lua_pop(L, 1);
				assert_int_equal(lua_type(L, -1), LUA_TSTRING);
				add_name(&methods, lua_tostring(L, -1), lua_rawlen(L, -1));
			}
			bad += compare(obj, &methods, K(DLB_LREF_METHOD), "method");
		} else {
			/* a C __index function: the source check covers it */
			bool found = false;

			for (size_t d = 0; d < sizeof(dispatch) / sizeof(dispatch[0]); d++)
				found |= strcmp(dispatch[d].mt, obj->name) == 0;
			if (!found)
				fail_msg("%s: __index is a function; add it to dispatch[]", obj->object);
		}
		lua_settop(L, top);

		/* every documented member on a live instance */
		lua_getglobal(L, "instances");
		if (lua_getfield(L, -1, obj->name) != LUA_TUSERDATA)
			fail_msg("%s: no instance in instances_code", obj->object);
		for (const struct dlb_lref *r = obj + 1;
		     r < dlb_lua_reference + dlb_lua_nreference && r->kind != DLB_LREF_OBJECT; r++) {
			int t;

			switch (r->kind) {
			case DLB_LREF_CONSTRUCTOR:
			case DLB_LREF_FUNCTION:
				if (lua_getglobal(L, r->name) != LUA_TFUNCTION) {
					print_error("%s: constructor %s is not a global function\n",
						    obj->object, r->name);
					bad++;
				}
				lua_pop(L, 1);
				break;
			case DLB_LREF_METHOD:
			case DLB_LREF_FIELD_R:
			case DLB_LREF_FIELD_RW:
				t = lua_getfield(L, -1, r->name);
				lua_pop(L, 1);
				if (r->kind == DLB_LREF_METHOD ? t != LUA_TFUNCTION : t == LUA_TNIL) {
					print_error("%s: %s reads as a %s\n", obj->object, r->name,
						    lua_typename(L, t));
					bad++;
				}
				if (r->kind != DLB_LREF_METHOD) {
					bool ok;

					lua_getglobal(L, "write_back");
					lua_pushvalue(L, -2);
					lua_pushstring(L, r->name);
					ok = lua_pcall(L, 2, 0, 0) == LUA_OK;
					if (!ok)
						lua_pop(L, 1);
					if (ok != (r->kind == DLB_LREF_FIELD_RW)) {
						print_error("%s: writing %s %s\n", obj->object, r->name,
							    ok ? "works" : "raises");
						bad++;
					}
				}
				break;
			default:
				break;
			}
		}
		lua_settop(L, top);
	}
	dlb_lua_conf_free(lc);
	dlb_rules_shutdown();
	dlb_config_free(cfg);
	if (bad != 0)
		fail_msg("%d difference(s) between lua/lua_reference.c and the config state", bad);
}

/* ---- a worker state: dq and dq.dh inside a LuaAction ----------------------------------- */

static void
append(char **buf, size_t *len, size_t *cap, const char *s)
{
	size_t n = strlen(s);

	if (*len + n + 1 > *cap) {
		*cap = (*len + n + 1) * 2;
		*buf = realloc(*buf, *cap);
		assert_non_null(*buf);
	}
	memcpy(*buf + *len, s, n + 1);
	*len += n;
}

/* A Lua list of the members of @mt of kinds @kinds: "{'a', 'b', }". */
static void
append_list(char **buf, size_t *len, size_t *cap, const char *mt, unsigned kinds)
{
	const struct dlb_lref *obj = object_of(mt);

	append(buf, len, cap, "{");
	for (const struct dlb_lref *r = obj + 1;
	     r < dlb_lua_reference + dlb_lua_nreference && r->kind != DLB_LREF_OBJECT; r++)
		if ((kinds & (1u << r->kind)) != 0) {
			append(buf, len, cap, "'");
			append(buf, len, cap, r->name);
			append(buf, len, cap, "', ");
		}
	append(buf, len, cap, "}");
}

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

static void
test_dq_members(void **state)
{
	struct dlb_config *cfg = dlb_config_new();
	struct dlb_lua_conf *lc = dlb_lua_conf_new(cfg, DLB_LUA_PHASE_CONFIG);
	struct dlb_lua_worker *lw;
	char *code = NULL, err[1024], arg[4096];
	size_t len = 0, cap = 0, arglen = 0;
	uint8_t pkt[1232];
	struct dlb_dnsmsg m;
	struct sockaddr_in remote, local;
	struct dlb_dq dq;
	int rc;

	(void)state;
	assert_non_null(lc);
	append(&code, &len, &cap,
	       "newServer({address = '192.0.2.10:53', name = 'b1'})\n"
	       "probe = LuaAction(function(dq)\n"
	       "  local bad = {}\n"
	       "  local function try(f) return (pcall(f)) end\n"
	       "  for _, n in ipairs(");
	append_list(&code, &len, &cap, "DNSQuestion", K(DLB_LREF_FIELD_R));
	append(&code, &len, &cap,
	       ") do\n"
	       "    if dq[n] == nil then bad[#bad + 1] = 'dq.' .. n .. ' is nil' end\n"
	       "    if try(function() dq[n] = dq[n] end) then bad[#bad + 1] = 'dq.' .. n .. ' is writable' end\n"
	       "  end\n"
	       "  for _, n in ipairs(");
	append_list(&code, &len, &cap, "DNSQuestion", K(DLB_LREF_FIELD_RW));
	append(&code, &len, &cap,
	       ") do\n"
	       "    if dq[n] == nil then bad[#bad + 1] = 'dq.' .. n .. ' is nil' end\n"
	       "    if not try(function() dq[n] = dq[n] end) then bad[#bad + 1] = 'dq.' .. n .. ' is read-only' end\n"
	       "  end\n"
	       "  for _, n in ipairs(");
	append_list(&code, &len, &cap, "DNSQuestion", K(DLB_LREF_METHOD));
	append(&code, &len, &cap,
	       ") do\n"
	       "    if type(dq[n]) ~= 'function' then bad[#bad + 1] = 'dq:' .. n .. ' is not a method' end\n"
	       "  end\n"
	       "  for _, n in ipairs(");
	append_list(&code, &len, &cap, "DNSHeader", K(DLB_LREF_METHOD));
	append(&code, &len, &cap,
	       ") do\n"
	       "    if type(dq.dh[n]) ~= 'function' then bad[#bad + 1] = 'dq.dh:' .. n .. ' is not a method' end\n"
	       "  end\n"
	       "  for _, n in ipairs(");
	append_list(&code, &len, &cap, "DNSHeader", K_FIELDS);
	append(&code, &len, &cap,
	       ") do\n"
	       "    if dq.dh[n] == nil then bad[#bad + 1] = 'dq.dh.' .. n .. ' is nil' end\n"
	       "  end\n"
	       "  if tostring(dq) ~= 'DNSQuestion' then bad[#bad + 1] = 'tostring(dq)' end\n"
	       "  if tostring(dq.dh) ~= 'DNSHeader' then bad[#bad + 1] = 'tostring(dq.dh)' end\n"
	       "  return DNSAction.None, table.concat(bad, '; ')\n"
	       "end)\n");
	if (dlb_lua_conf_load_string(lc, code, "=probe", err, sizeof(err)) != 0)
		fail_msg("%s\n%s", err, code);
	free(code);
	lw = dlb_luaw_new(lc, cfg, 0, err, sizeof(err));
	if (lw == NULL)
		fail_msg("worker: %s", err);

	/* a query with every optional field set, so that no documented field reads nil */
	memset(&dq, 0, sizeof(dq));
	dq.pkt = pkt;
	dq.len = build_query(pkt, "www.example.com", 1);
	dq.cap = sizeof(pkt);
	assert_int_equal(dlb_wire_parse_query(pkt, dq.len, &m), DLB_OK);
	dq.m = &m;
	memset(&remote, 0, sizeof(remote));
	remote.sin_family = AF_INET;
	remote.sin_port = htons(5353);
	inet_pton(AF_INET, "192.0.2.53", &remote.sin_addr);
	local = remote;
	inet_pton(AF_INET, "127.0.0.1", &local.sin_addr);
	dq.remote = (const struct sockaddr *)&remote;
	dq.local = (const struct sockaddr *)&local;
	dq.cfg = cfg;
	dq.lua = lw;
	dq.be_index = -1;
	dq.now = dq.t_start = (double)time(NULL);
	dlb_dq_reset_decisions(&dq);
	dq.tempfail_ttl = 30;

	rc = dlb_luaw_action(lw, 1, NULL, &dq, false, arg, sizeof(arg), &arglen);
	assert_int_equal(rc, DLB_DA_NONE);
	if (arglen != 0)
		fail_msg("dq/dq.dh differ from lua/lua_reference.c: %s", arg);

	dlb_luaw_free(lw);
	dlb_lua_conf_free(lc);
	dlb_rules_shutdown();
	dlb_config_free(cfg);
}

/* ---- the table itself ---------------------------------------------------------------- */

static void
test_table_well_formed(void **state)
{
	(void)state;
	assert_int_equal(dlb_lua_reference[0].kind, DLB_LREF_OBJECT);
	for (size_t i = 0; i < dlb_lua_nreference; i++) {
		const struct dlb_lref *r = &dlb_lua_reference[i];

		assert_non_null(r->object);
		assert_non_null(r->name);
		assert_non_null(r->sig);
		assert_non_null(r->doc);
		assert_null(strchr(r->doc, '\n'));
		if (r->kind == DLB_LREF_OPERATOR && strcmp(r->name, "__eq") != 0 &&
		    strcmp(r->name, "__tostring") != 0)
			fail_msg("%s: operator %s is not checked by this test", r->object, r->name);
		/* one line per member and object */
		for (size_t j = i + 1; j < dlb_lua_nreference; j++) {
			const struct dlb_lref *s = &dlb_lua_reference[j];

			if (strcmp(r->object, s->object) != 0)
				continue;
			if (r->kind == DLB_LREF_OBJECT && s->kind == DLB_LREF_OBJECT)
				fail_msg("object %s twice", r->object);
			if (r->kind != DLB_LREF_OBJECT && strcmp(r->name, s->name) == 0)
				fail_msg("%s: %s twice", r->object, r->name);
		}
		if (r->kind != DLB_LREF_OBJECT)
			assert_string_equal(r->object, dlb_lua_reference[i - 1].object);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table_well_formed),
		cmocka_unit_test(test_source_dispatch),
		cmocka_unit_test(test_config_objects),
		cmocka_unit_test(test_dq_members),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
