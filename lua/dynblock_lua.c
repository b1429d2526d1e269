/*
 * dynblock_lua.c - dynamic blocks from Lua (dynblock_lua.h), over
 * dnslb/pipeline/dynblock.h. Every function checks all its arguments before it
 * touches the store, then acts only in a state that may (the config state
 * at startup and on the console); apply() and exceed*() also need a running
 * daemon to have traffic to look at.
 */
#include "lua/dynblock_lua.h"

#include <lauxlib.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/pipeline/dynblock.h"
#include "dnslb/core/log.h"
#include "dnslb/core/netmask.h"
#include "dnslb/core/wire.h"
#include "lua/args.h"
#include "lua/conf.h"
#include "lua/objects.h"

#define MT_DBRG "DynBlockRulesGroup"

/* An optional DNSAction argument; @def when absent or nil. */
static int
opt_action(lua_State *L, int arg, const char *fn, int def)
{
	int a = (int)dlb_lua_opt_arg_int(L, arg, fn, 0, 255, def);

	if (!dlb_dyn_action_valid(a))
		luaL_error(L, "%s: a dynamic block's action can only be DNSAction.Drop, NoOp, "
			   "Nxdomain, Refused, Truncate, NoRecurse or None", fn);
	return a;
}


/* Print @text line by line through print() (the console captures it). */
static void
print_lines(lua_State *L, char *text)
{
	char *line = text;

	while (*line != '\0') {
		char *nl = strchr(line, '\n');

		if (nl != NULL)
			*nl = '\0';
		dlb_lua_print(L, line);
		if (nl == NULL)
			break;
		line = nl + 1;
	}
}

/* ---- DynBlockRulesGroup --------------------------------------------------- */

struct dbrg {
	struct dlb_dyn_group *g;
};

static struct dbrg *
check_dbrg(lua_State *L)
{
	struct dbrg *d = luaL_checkudata(L, 1, MT_DBRG);

	if (d->g == NULL)
		luaL_error(L, "DynBlockRulesGroup: object is gone");
	return d;
}

static int
l_dbrg_gc(lua_State *L)
{
	struct dbrg *d = luaL_checkudata(L, 1, MT_DBRG);

	dlb_dyn_group_free(d->g);
	d->g = NULL;
	return 0;
}

static int
l_dyn_block_rules_group(lua_State *L)
{
	struct dbrg *d = lua_newuserdatauv(L, sizeof(*d), 1);

	d->g = NULL;
	luaL_setmetatable(L, MT_DBRG);
	d->g = dlb_dyn_group_new();
	if (d->g == NULL)
		luaL_error(L, "dynBlockRulesGroup: out of memory");
	if (dlb_lua_conf_acts(L))
		dlb_dyn_group_register(d->g);	/* rates build up before the first apply() */
	return 1;
}

/*
 * The arguments every rate rule shares, from @i: rate (or ratio), seconds,
 * reason, blockingTime[, minimumNumberOfResponses][, action[, warning]].
 * @return r->reason malloc'ed (ownership to the caller).
 */
static void
rule_args(lua_State *L, int i, const char *fn, bool ratio, struct dlb_dyn_rule *r)
{
	r->rate = dlb_lua_arg_num(L, i, fn, 0, ratio ? 1e9 : 1e12);
	r->seconds = (unsigned)dlb_lua_arg_int(L, i + 1, fn, 1, DLB_DYN_MAX_SECONDS);
	(void)dlb_lua_arg_string(L, i + 2, fn);
	r->block_seconds = (unsigned)dlb_lua_arg_int(L, i + 3, fn, 0, 1 << 30);
	if (ratio)
		r->min_responses = (unsigned)dlb_lua_arg_int(L, i + 4, fn, 0, UINT32_MAX);
	r->action = opt_action(L, i + 4 + ratio, fn, DLB_DYN_NONE);
	r->warning = lua_isnoneornil(L, i + 5 + ratio)
			     ? 0 : dlb_lua_arg_num(L, i + 5 + ratio, fn, 0, 1e12);
	r->reason = strdup(lua_tostring(L, i + 2));
	if (r->reason == NULL)
		luaL_error(L, "%s: out of memory", fn);
}

static int
set_rule(lua_State *L, enum dlb_dyn_rule_kind kind, const char *fn)
{
	struct dbrg *d = check_dbrg(L);
	struct dlb_dyn_rule r = { .kind = kind };
	bool coded = kind == DLB_DYN_R_QTYPE || kind == DLB_DYN_R_RCODE || kind == DLB_DYN_R_RATIO;

	if (coded) {
		r.code = (uint16_t)dlb_lua_arg_int(L, 2, fn, 0, kind == DLB_DYN_R_QTYPE ? 65535 : 15);
		if (dlb_dyn_group_codes(d->g, kind, r.code) > DLB_DYN_TRACKED)
			luaL_error(L, "%s: a group measures at most %d distinct %s", fn,
				   DLB_DYN_TRACKED, kind == DLB_DYN_R_QTYPE ? "qtypes" : "rcodes");
	}
	rule_args(L, coded ? 3 : 2, fn, kind == DLB_DYN_R_RATIO, &r);
	dlb_dyn_group_set_rule(d->g, &r);	/* takes r.reason */
	if (coded && dlb_lua_conf_acts(L))
		(void)dlb_dyn_track_code(kind, r.code, dlb_dyn_now());	/* measure it from now */
	return 0;
}

static int
l_set_query_rate(lua_State *L)
{
	return set_rule(L, DLB_DYN_R_QRATE, "setQueryRate");
}

static int
l_set_response_byte_rate(lua_State *L)
{
	return set_rule(L, DLB_DYN_R_RESPBYTES, "setResponseByteRate");
}

static int
l_set_rcode_rate(lua_State *L)
{
	return set_rule(L, DLB_DYN_R_RCODE, "setRCodeRate");
}

static int
l_set_rcode_ratio(lua_State *L)
{
	return set_rule(L, DLB_DYN_R_RATIO, "setRCodeRatio");
}

static int
l_set_qtype_rate(lua_State *L)
{
	return set_rule(L, DLB_DYN_R_QTYPE, "setQTypeRate");
}

static int
l_exclude_or_include(lua_State *L, bool include, const char *fn)
{
	struct dbrg *d = check_dbrg(L);
	struct dlb_nmg *nmg = dlb_lua_to_nmg(L, 2);
	struct dlb_netmask nm;

	if (nmg != NULL) {
		for (size_t i = 0; i < nmg->n; i++)
			if (dlb_dyn_group_range(d->g, &nmg->v[i], include) != 0)
				return luaL_error(L, "%s: out of memory", fn);
		return 0;
	}
	if (lua_istable(L, 2)) {
		lua_Integer n = (lua_Integer)lua_rawlen(L, 2);

		for (lua_Integer i = 1; i <= n; i++) {
			lua_rawgeti(L, 2, i);
			dlb_lua_check_netmask(L, -1, fn, &nm);
			lua_pop(L, 1);
		}
		for (lua_Integer i = 1; i <= n; i++) {
			lua_rawgeti(L, 2, i);
			dlb_lua_check_netmask(L, -1, fn, &nm);
			lua_pop(L, 1);
			if (dlb_dyn_group_range(d->g, &nm, include) != 0)
				return luaL_error(L, "%s: out of memory", fn);
		}
		return 0;
	}
	dlb_lua_check_netmask(L, 2, fn, &nm);
	if (dlb_dyn_group_range(d->g, &nm, include) != 0)
		return luaL_error(L, "%s: out of memory", fn);
	return 0;
}

static int
l_exclude_range(lua_State *L)
{
	return l_exclude_or_include(L, false, "excludeRange");
}

static int
l_include_range(lua_State *L)
{
	return l_exclude_or_include(L, true, "includeRange");
}

static int
l_exclude_domains(lua_State *L)
{
	struct dbrg *d = check_dbrg(L);
	uint8_t lc[DLB_MAX_NAME];
	size_t len;

	if (lua_istable(L, 2)) {
		lua_Integer n = (lua_Integer)lua_rawlen(L, 2);

		for (lua_Integer i = 1; i <= n; i++) {
			lua_rawgeti(L, 2, i);
			(void)dlb_lua_check_name_lc(L, -1, "excludeDomains", lc);
			lua_pop(L, 1);
		}
		for (lua_Integer i = 1; i <= n; i++) {
			lua_rawgeti(L, 2, i);
			len = dlb_lua_check_name_lc(L, -1, "excludeDomains", lc);
			lua_pop(L, 1);
			if (dlb_dyn_group_exclude_domain(d->g, lc, len) != 0)
				return luaL_error(L, "excludeDomains: out of memory");
		}
		return 0;
	}
	len = dlb_lua_check_name_lc(L, 2, "excludeDomains", lc);
	if (dlb_dyn_group_exclude_domain(d->g, lc, len) != 0)
		return luaL_error(L, "excludeDomains: out of memory");
	return 0;
}

static int
l_set_masks(lua_State *L)
{
	struct dbrg *d = check_dbrg(L);
	lua_Integer v4 = dlb_lua_arg_int(L, 2, "setMasks", 0, 255);
	lua_Integer v6 = dlb_lua_arg_int(L, 3, "setMasks", 0, 255);
	lua_Integer port = dlb_lua_opt_arg_int(L, 4, "setMasks", 0, 255, 0);

	/* dnsdist's checks, in its order and words */
	if (v4 > 32)
		return luaL_error(L, "Trying to set an invalid IPv4 mask (%d) to a Dynamic Block "
				  "object", (int)v4);
	if (v6 > 128)
		return luaL_error(L, "Trying to set an invalid IPv6 mask (%d) to a Dynamic Block "
				  "object", (int)v6);
	if (port > 16)
		return luaL_error(L, "Trying to set an invalid port mask (%d) to a Dynamic Block "
				  "object", (int)port);
	if (port != 0 && v4 != 32)
		return luaL_error(L, "Setting a non-zero port mask for Dynamic Blocks while only "
				  "considering parts of IPv4 addresses does not make sense");
	dlb_dyn_group_set_masks(d->g, (unsigned)v4, (unsigned)v6, (unsigned)port);
	return 0;
}

static int
l_set_quiet(lua_State *L)
{
	struct dbrg *d = check_dbrg(L);

	dlb_dyn_group_set_quiet(d->g, dlb_lua_arg_bool(L, 2, "setQuiet"));
	return 0;
}

static int
l_to_string(lua_State *L)
{
	struct dbrg *d = check_dbrg(L);
	struct dlb_lua_box *b = dlb_lua_box_new(L);

	b->p = dlb_dyn_group_text(d->g, dlb_qtype_text);
	if (b->p == NULL)
		return luaL_error(L, "toString: out of memory");
	lua_pushstring(L, b->p);
	return 1;
}

/* ---- the suffix visitor ---- */

struct visit_args {
	const struct dlb_dyn_node *node;
	const struct dlb_dyn_stat *self, *children;
};

static int
l_node_num_children(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	lua_getfield(L, 1, "_numChildren");
	return 1;
}

static void
push_stat(lua_State *L, const struct dlb_dyn_stat *s)
{
	lua_createtable(L, 0, 7);
	lua_pushinteger(L, (lua_Integer)s->queries);
	lua_setfield(L, -2, "queries");
	lua_pushinteger(L, (lua_Integer)s->noerrors);
	lua_setfield(L, -2, "noerrors");
	lua_pushinteger(L, (lua_Integer)s->nxdomains);
	lua_setfield(L, -2, "nxdomains");
	lua_pushinteger(L, (lua_Integer)s->servfails);
	lua_setfield(L, -2, "servfails");
	lua_pushinteger(L, (lua_Integer)s->drops);
	lua_setfield(L, -2, "drops");
	lua_pushinteger(L, (lua_Integer)s->bytes);
	lua_setfield(L, -2, "bytes");
	lua_pushinteger(L, 0);
	lua_setfield(L, -2, "hits");
}

/* Under lua_pcall: visitor(node, self, children) -> block[, reason]. */
static int
visit_call(lua_State *L)
{
	const struct visit_args *a = lua_touserdata(L, 2);

	lua_settop(L, 1);	/* the visitor */
	lua_createtable(L, 0, 4);
	lua_pushstring(L, a->node->fullname);
	lua_setfield(L, -2, "fullname");
	lua_pushinteger(L, a->node->labels_count);
	lua_setfield(L, -2, "labelsCount");
	lua_pushinteger(L, a->node->nchildren);
	lua_setfield(L, -2, "_numChildren");
	lua_pushcfunction(L, l_node_num_children);
	lua_setfield(L, -2, "numChildren");
	push_stat(L, a->self);
	push_stat(L, a->children);
	lua_call(L, 3, 2);
	return 2;
}

struct vctx {
	lua_State *L;
	int fn;				/* stack index of the visitor */
};

static bool
visit_cb(void *ud, const struct dlb_dyn_node *node, const struct dlb_dyn_stat *self,
	 const struct dlb_dyn_stat *children, char **reason)
{
	struct vctx *c = ud;
	lua_State *L = c->L;
	struct visit_args a = { node, self, children };
	bool block;

	lua_pushcfunction(L, visit_call);
	lua_pushvalue(L, c->fn);
	lua_pushlightuserdata(L, &a);
	if (lua_pcall(L, 2, 2, 0) != LUA_OK) {
		dlb_log_ratelimited(DLB_LOG_ERR, "setSuffixMatchRule visitor: %s",
				    lua_isstring(L, -1) ? lua_tostring(L, -1) : "error");
		lua_pop(L, 1);
		return false;
	}
	block = lua_toboolean(L, -2);
	if (block && lua_type(L, -1) == LUA_TSTRING)
		*reason = strdup(lua_tostring(L, -1));
	lua_pop(L, 2);
	return block;
}

static int
l_set_suffix_match_rule(lua_State *L)
{
	struct dbrg *d = check_dbrg(L);
	unsigned secs = (unsigned)dlb_lua_arg_int(L, 2, "setSuffixMatchRule", 1,
						  DLB_DYN_MAX_SECONDS);
	const char *reason = dlb_lua_arg_string(L, 3, "setSuffixMatchRule");
	unsigned block = (unsigned)dlb_lua_arg_int(L, 4, "setSuffixMatchRule", 0, 1 << 30);
	int action = opt_action(L, 5, "setSuffixMatchRule", DLB_DYN_NONE);

	dlb_lua_arg_function(L, 6, "setSuffixMatchRule");
	lua_pushvalue(L, 6);
	lua_setiuservalue(L, 1, 1);
	dlb_dyn_group_set_suffix(d->g, secs, reason, block, action, visit_cb);
	return 0;
}

static int
l_apply(lua_State *L)
{
	struct dbrg *d = check_dbrg(L);
	struct vctx c = { L, 0 };

	if (!dlb_lua_conf_acts(L))
		return 0;
	luaL_checkstack(L, 16, "apply");
	lua_getiuservalue(L, 1, 1);
	c.fn = lua_gettop(L);
	dlb_dyn_group_apply(d->g, dlb_dyn_now(), &c);
	lua_settop(L, 1);
	return 0;
}

static const luaL_Reg dbrg_methods[] = {
	{ "setQueryRate", l_set_query_rate },
	{ "setResponseByteRate", l_set_response_byte_rate },
	{ "setRCodeRate", l_set_rcode_rate },
	{ "setRCodeRatio", l_set_rcode_ratio },
	{ "setQTypeRate", l_set_qtype_rate },
	{ "setSuffixMatchRule", l_set_suffix_match_rule },
	{ "excludeRange", l_exclude_range },
	{ "includeRange", l_include_range },
	{ "excludeDomains", l_exclude_domains },
	{ "setMasks", l_set_masks },
	{ "setQuiet", l_set_quiet },
	{ "apply", l_apply },
	{ "toString", l_to_string },
	{ NULL, NULL },
};

/* ---- legacy exceed*() and addDynBlocks() ------------------------------------ */

struct hit {
	struct dlb_netmask nm;
	uint64_t count;
};

static void
exceed_cb(const struct dlb_netmask *client, uint64_t count, void *ud)
{
	struct hit *h = dlb_lua_box_push(ud, sizeof(*h));

	if (h == NULL)
		return;	/* out of memory: the table will miss clients */
	*h = (struct hit){ *client, count };
}

static int
exceed(lua_State *L, enum dlb_dyn_rule_kind kind, uint16_t code, int arg, const char *fn)
{
	double rate = dlb_lua_arg_num(L, arg, fn, 0, 1e12);
	unsigned secs = (unsigned)dlb_lua_arg_int(L, arg + 1, fn, 1, DLB_DYN_MAX_SECONDS);
	struct dlb_lua_box *b = dlb_lua_box_new(L);

	lua_newtable(L);
	if (!dlb_lua_conf_acts(L))
		return 1;
	if (dlb_dyn_exceed(kind, code, rate, secs, dlb_dyn_now(), exceed_cb, b) < 0)
		return luaL_error(L, "%s: at most %d distinct qtypes and rcodes are measured at "
				  "a time", fn, DLB_DYN_TRACKED);
	for (size_t i = 0; i < b->n; i++) {
		const struct hit *h = &((const struct hit *)b->p)[i];
		struct sockaddr_storage ss;

		memset(&ss, 0, sizeof(ss));
		if (h->nm.family == AF_INET) {
			struct sockaddr_in *sin = (struct sockaddr_in *)&ss;

			sin->sin_family = AF_INET;
			memcpy(&sin->sin_addr, h->nm.addr, 4);
		} else {
			struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;

			sin6->sin6_family = AF_INET6;
			memcpy(&sin6->sin6_addr, h->nm.addr, 16);
		}
		dlb_lua_push_ca(L, (const struct sockaddr *)&ss);
		lua_pushinteger(L, (lua_Integer)h->count);
		lua_rawset(L, -3);
	}
	return 1;
}

static int
l_exceed_qrate(lua_State *L)
{
	return exceed(L, DLB_DYN_R_QRATE, 0, 1, "exceedQRate");
}

static int
l_exceed_servfails(lua_State *L)
{
	return exceed(L, DLB_DYN_R_RCODE, DLB_RCODE_SERVFAIL, 1, "exceedServFails");
}

static int
l_exceed_nxdomains(lua_State *L)
{
	return exceed(L, DLB_DYN_R_RCODE, DLB_RCODE_NXDOMAIN, 1, "exceedNXDOMAINs");
}

static int
l_exceed_resp_byterate(lua_State *L)
{
	return exceed(L, DLB_DYN_R_RESPBYTES, 0, 1, "exceedRespByterate");
}

static int
l_exceed_qtype_rate(lua_State *L)
{
	uint16_t qtype = (uint16_t)dlb_lua_arg_int(L, 1, "exceedQTypeRate", 0, 65535);

	return exceed(L, DLB_DYN_R_QTYPE, qtype, 2, "exceedQTypeRate");
}

/* An address (ComboAddress or string, optionally "a/n") at @idx into @nm; false if invalid. */
static bool
to_client(lua_State *L, int idx, unsigned bits, bool bits_set, struct dlb_netmask *nm)
{
	const struct sockaddr_storage *ca = dlb_lua_to_ca(L, idx);
	struct sockaddr_storage ss;
	socklen_t len;

	memset(nm, 0, sizeof(*nm));
	if (ca == NULL) {
		const char *s;

		if (lua_type(L, idx) != LUA_TSTRING)
			return false;
		s = lua_tostring(L, idx);
		if (strchr(s, '/') != NULL) {
			if (dlb_netmask_parse(s, nm) != 0)
				return false;
			if (bits_set && bits < nm->bits)
				goto masked;
			return true;
		}
		if (dlb_sockaddr_parse(s, 0, &ss, &len) != 0)
			return false;
		ca = &ss;
	}
	if (ca->ss_family == AF_INET) {
		nm->family = AF_INET;
		nm->bits = 32;
		memcpy(nm->addr, &((const struct sockaddr_in *)ca)->sin_addr, 4);
	} else if (ca->ss_family == AF_INET6) {
		nm->family = AF_INET6;
		nm->bits = 128;
		memcpy(nm->addr, &((const struct sockaddr_in6 *)ca)->sin6_addr, 16);
	} else {
		return false;
	}
	if (!bits_set)
		return true;
masked:
	if (bits > nm->bits)
		bits = nm->bits;
	nm->bits = (uint8_t)bits;
	for (unsigned i = 0; i < 16; i++) {
		unsigned keep = bits >= 8 * (i + 1) ? 8 : bits > 8 * i ? bits - 8 * i : 0;

		nm->addr[i] &= (uint8_t)(0xff00u >> keep);
	}
	return true;
}

static int
l_add_dyn_blocks(lua_State *L)
{
	const char *msg;
	lua_Integer secs;
	int action;
	double now = dlb_dyn_now();
	struct dlb_netmask nm;
	bool changed = false;

	luaL_checktype(L, 1, LUA_TTABLE);
	msg = dlb_lua_arg_string(L, 2, "addDynBlocks");
	secs = dlb_lua_opt_arg_int(L, 3, "addDynBlocks", 0, 1 << 30, 10);
	action = opt_action(L, 4, "addDynBlocks", DLB_DYN_NONE);
	lua_pushnil(L);
	while (lua_next(L, 1) != 0) {
		lua_pop(L, 1);
		if (!to_client(L, -1, 0, false, &nm))
			return luaL_error(L, "addDynBlocks: keys must be ComboAddress objects or "
					  "addresses");
	}
	if (!dlb_lua_conf_acts(L))
		return 0;
	lua_pushnil(L);
	while (lua_next(L, 1) != 0) {
		lua_pop(L, 1);
		(void)to_client(L, -1, 0, false, &nm);
		changed |= dlb_dyn_block_nm(&nm, msg, now + (double)secs, action, false, false,
					    now);
	}
	if (changed)
		dlb_dyn_publish();
	return 0;
}

static int
l_add_dyn_block_smt(lua_State *L)
{
	const char *msg;
	lua_Integer secs, n;
	int action;
	double now = dlb_dyn_now();
	uint8_t lc[DLB_MAX_NAME];
	size_t len;
	bool changed = false;

	luaL_checktype(L, 1, LUA_TTABLE);
	msg = dlb_lua_arg_string(L, 2, "addDynBlockSMT");
	secs = dlb_lua_opt_arg_int(L, 3, "addDynBlockSMT", 0, 1 << 30, 10);
	action = opt_action(L, 4, "addDynBlockSMT", DLB_DYN_NONE);
	n = (lua_Integer)lua_rawlen(L, 1);
	for (lua_Integer i = 1; i <= n; i++) {
		lua_rawgeti(L, 1, i);
		(void)dlb_lua_check_name_lc(L, -1, "addDynBlockSMT", lc);
		lua_pop(L, 1);
	}
	if (!dlb_lua_conf_acts(L))
		return 0;
	for (lua_Integer i = 1; i <= n; i++) {
		lua_rawgeti(L, 1, i);
		len = dlb_lua_check_name_lc(L, -1, "addDynBlockSMT", lc);
		lua_pop(L, 1);
		changed |= dlb_dyn_block_smt(lc, len, msg, now + (double)secs, action, false, now);
	}
	if (changed)
		dlb_dyn_publish();
	return 0;
}

/* addDynamicBlock(address, message[, action[, seconds[, clientIPMask[, clientIPPortMask]]]]) */
static int
l_add_dynamic_block(lua_State *L)
{
	const char *msg = dlb_lua_arg_string(L, 2, "addDynamicBlock");
	int action = opt_action(L, 3, "addDynamicBlock", DLB_DYN_NONE);
	lua_Integer secs = dlb_lua_opt_arg_int(L, 4, "addDynamicBlock", 0, 1 << 30, 10);
	bool bits_set = !lua_isnoneornil(L, 5);
	unsigned bits = (unsigned)dlb_lua_opt_arg_int(L, 5, "addDynamicBlock", 0, 128, 128);
	lua_Integer port = dlb_lua_opt_arg_int(L, 6, "addDynamicBlock", 0, 16, 0);
	double now = dlb_dyn_now();
	struct dlb_netmask nm;

	if (port != 0)
		return luaL_error(L, "addDynamicBlock: port ranges (CGNAT) are not supported by "
				  "dnslb: the sixth argument must be 0");
	if (!to_client(L, 1, bits, bits_set, &nm)) {
		/* dnsdist logs and goes on */
		if (!dlb_lua_silent(L))
			dlb_err("addDynamicBlock: Unable to parse '%s'",
				lua_isstring(L, 1) ? lua_tostring(L, 1) : luaL_typename(L, 1));
		return 0;
	}
	if (!dlb_lua_conf_acts(L))
		return 0;
	if (dlb_dyn_block_nm(&nm, msg, now + (double)secs, action, false, false, now))
		dlb_dyn_publish();
	return 0;
}

static int
l_set_dyn_blocks_action(lua_State *L)
{
	int a = (int)dlb_lua_arg_int(L, 1, "setDynBlocksAction", 0, 255);

	if (a != DLB_DYN_DROP && a != DLB_DYN_NOOP && a != DLB_DYN_NXDOMAIN &&
	    a != DLB_DYN_REFUSED && a != DLB_DYN_TRUNCATE && a != DLB_DYN_NORECURSE) {
		/* dnsdist 1.7's message; it logs and keeps the action */
		if (!dlb_lua_silent(L))
			dlb_err("Dynamic blocks action can only be Drop, NoOp, NXDomain, Refused, "
				"Truncate or NoRecurse!");
		return 0;
	}
	if (dlb_lua_conf_of(L) != NULL &&
	    dlb_lua_conf_phase(dlb_lua_conf_of(L)) == DLB_LUA_PHASE_RUNNING) {
		/* dnsdist 1.7: config time only */
		dlb_err("Dynamic blocks action cannot be altered at runtime!");
		return 0;
	}
	if (dlb_lua_conf_acts(L))
		dlb_dyn_set_default_action(a);
	return 0;
}

static int
l_set_dyn_blocks_purge_interval(lua_State *L)
{
	unsigned s = (unsigned)dlb_lua_arg_int(L, 1, "setDynBlocksPurgeInterval", 0, 1 << 30);

	if (dlb_lua_conf_acts(L))
		dlb_dyn_set_purge_interval(s);
	return 0;
}

static int
l_show_dyn_blocks(lua_State *L)
{
	struct dlb_lua_box *b;

	if (!dlb_lua_conf_live(L))
		return 0;
	b = dlb_lua_box_new(L);
	b->p = dlb_dyn_show(dlb_dyn_now());
	if (b->p == NULL)
		return luaL_error(L, "showDynBlocks: out of memory");
	print_lines(L, b->p);
	return 0;
}

static int
l_clear_dyn_blocks(lua_State *L)
{
	if (dlb_lua_conf_acts(L))
		dlb_dyn_clear();
	return 0;
}

struct get_ctx {
	lua_State *L;
	bool smt;
};

static void
get_visit(const struct dlb_dyn_info *i, void *ud)
{
	struct get_ctx *c = ud;
	lua_State *L = c->L;
	char key[DLB_WIRE_NAME_TEXT_MAX];

	if (i->smt != c->smt)
		return;
	dlb_dyn_key_text(i, key, sizeof(key));
	lua_createtable(L, 0, 7);
	lua_pushstring(L, i->reason);
	lua_setfield(L, -2, "reason");
	lua_pushstring(L, i->smt ? key : "");
	lua_setfield(L, -2, "domain");
	lua_pushinteger(L, (lua_Integer)i->until);
	lua_setfield(L, -2, "until");
	lua_pushinteger(L, (lua_Integer)i->blocks);
	lua_setfield(L, -2, "blocks");
	lua_pushinteger(L, i->action != DLB_DYN_NONE ? i->action : dlb_dyn_default_action());
	lua_setfield(L, -2, "action");
	lua_pushboolean(L, i->warning);
	lua_setfield(L, -2, "warning");
	lua_pushboolean(L, false);
	lua_setfield(L, -2, "bpf");
	lua_setfield(L, -2, key);
}

static int
get_blocks(lua_State *L, bool smt)
{
	struct get_ctx c = { L, smt };

	lua_newtable(L);
	if (dlb_lua_conf_live(L))
		dlb_dyn_visit(dlb_dyn_now(), true, get_visit, &c);
	return 1;
}

static int
l_get_dynamic_blocks(lua_State *L)
{
	return get_blocks(L, false);
}

static int
l_get_dynamic_blocks_smt(lua_State *L)
{
	return get_blocks(L, true);
}

static const luaL_Reg dynblock_funcs[] = {
	{ "dynBlockRulesGroup", l_dyn_block_rules_group },
	{ "exceedQRate", l_exceed_qrate },
	{ "exceedServFails", l_exceed_servfails },
	{ "exceedNXDOMAINs", l_exceed_nxdomains },
	{ "exceedRespByterate", l_exceed_resp_byterate },
	{ "exceedQTypeRate", l_exceed_qtype_rate },
	{ "addDynBlocks", l_add_dyn_blocks },
	{ "addDynBlockSMT", l_add_dyn_block_smt },
	{ "addDynamicBlock", l_add_dynamic_block },
	{ "setDynBlocksAction", l_set_dyn_blocks_action },
	{ "setDynBlocksPurgeInterval", l_set_dyn_blocks_purge_interval },
	{ "showDynBlocks", l_show_dyn_blocks },
	{ "clearDynBlocks", l_clear_dyn_blocks },
	{ "getDynamicBlocks", l_get_dynamic_blocks },
	{ "getDynamicBlocksSMT", l_get_dynamic_blocks_smt },
	{ NULL, NULL },
};

void
dlb_lua_dynblock_register(lua_State *L)
{
	if (luaL_newmetatable(L, MT_DBRG)) {
		luaL_newlib(L, dbrg_methods);
		lua_setfield(L, -2, "__index");
		lua_pushcfunction(L, l_dbrg_gc);
		lua_setfield(L, -2, "__gc");
	}
	lua_pop(L, 1);
	lua_pushglobaltable(L);
	luaL_setfuncs(L, dynblock_funcs, 0);
	lua_pop(L, 1);
}
