/*
 * worker.c - per-worker Lua states (lua/worker.h, docs/architecture.md#rules-lua-states-and-reloads) and
 * the dq/dr object that LuaRule, LuaAction and LuaResponseAction functions
 * receive.
 *
 * Building a state (main thread, before the workers run):
 *  1. a dlb_lua_conf of its own, allocating through a counting allocator
 *     (the memory cap), in DLB_LUA_PHASE_WORKER over a throwaway config;
 *  2. dlb_lua_conf_replay: the chunks the config state evaluated, in order.
 *     Every LuaRule/LuaAction/LuaResponseAction call numbers its function
 *     (dlb_lua_register_fn) as the config state did, so a rule's number
 *     names the same function here, and "file:line" checks it;
 *  3. dlb_lua_conf_rebind to the real config (DLB_LUA_PHASE_RULES); the
 *     throwaway config is freed;
 *  4. every global C function not on rule_allow[] is replaced by one
 *     raising "<name> cannot be called from a rule"; the user's own Lua
 *     functions and tables stay as the config made them.
 *
 * Calling (the worker, per query): the function is looked up by number in
 * a table kept at the bottom of the state's stack, with the one reusable dq
 * userdata and the message handler (Redis' luaCallFunction pattern). The dq
 * points at the struct dlb_dq only for the call; a dq kept in a global
 * raises an error instead of touching a finished query.
 *
 * Limits (Redis script_lua.c): a count hook every HOOK_EVERY instructions
 * stops a call past setLuaInstructionLimit() instructions and, from then
 * on, fires at every instruction until the call returns, so a pcall inside
 * the script cannot swallow the error. The allocator refuses to grow the
 * state past setLuaMemoryLimit() bytes; Lua then raises "not enough
 * memory", the call fails and the garbage is collected. Every GC_EVERY
 * calls, a GC step runs if the state grew by GC_SLACK since the last one.
 *
 * Errors: the function's error, the limits, a bad return value: the call
 * returns -1 (the caller answers SERVFAIL and counts lua-errors) and one
 * line per second per worker is logged.
 *
 * Thread: a struct dlb_lua_worker is built and freed on the main thread and
 * used by its worker only in between.
 */
#include "lua/worker.h"

#include <lauxlib.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dnslb/core/buf.h"
#include "dnslb/core/config.h"
#include "dnslb/core/hash.h"
#include "dnslb/core/log.h"
#include "dnslb/core/netmask.h"
#include "dnslb/core/wire.h"
#include "lua/compat_lua.h"
#include "lua/conf.h"
#include "lua/objects.h"
#include "rules/rules.h"

#define HOOK_EVERY	1000	/* instructions between two calls of the count hook */
#define GC_EVERY	64	/* rule calls between two looks at the memory in use */
#define GC_SLACK	(256 * 1024)	/* bytes allocated since the last step that call for one */
#define SRC_MAX		96	/* "file:line", as struct dlb_sel/dlb_act keep it */
#define SPOOF_MAX	64	/* records dq:spoof() builds */

#define MT_DQ		"DNSQuestion"
#define MT_DH		"DNSHeader"
#define MT_EOV		"EDNSOptionView"

/* registry keys: {n -> function} and {n -> "file:line"} of dlb_lua_register_fn */
static const char fns_key = 'f';
static const char srcs_key = 'S';
/* registry key: the string of the last dnsdist_ffi_dnsquestion_set_result() */
static const char result_key = 'R';

/* What stays on the worker state's stack between calls. */
enum {
	SLOT_FNS = 1,		/* the functions table */
	SLOT_DQ,		/* the dq userdata */
	SLOT_MSGH,		/* the message handler */
	SLOT__TOP = SLOT_MSGH,
};

/* The allocator's account (the state's only allocator). */
struct lua_mem {
	size_t used;		/* bytes */
	size_t limit;		/* 0: none */
};

/* The dq userdata. */
struct dq_box {
	struct dlb_dq *dq;		/* set only while a function runs */
	bool response;			/* a response rule: the caller's word, else dq->response */
	unsigned rewrites;		/* setContent/spoof calls: the packet was replaced */
	char pool[64];			/* the last name given to dq.pool in this call */
	bool pool_named;
	/*
	 * dnsdist_ffi_dnsquestion_set_result() of this call: a LuaFFIAction's
	 * string, kept alive by the registry (result_key) until the next one
	 */
	bool result_set;
	size_t result_len;
	const char *result;
};

/* The dq.dh userdata: the header of the same query, valid as long as the dq. */
struct dh_box {
	struct dq_box *box;
};

struct dlb_lua_worker {
	struct dlb_lua_conf *lc;	/* owns L */
	lua_State *L;
	int id;				/* worker id, for logs */
	struct lua_mem mem;
	uint64_t insn_limit;		/* 0: none */
	uint64_t insns;			/* counted in this call, by HOOK_EVERY */
	bool killed;			/* this call passed insn_limit */
	unsigned calls;
	size_t gc_mark;			/* mem.used after the last GC step */
	long last_err_log;		/* dlb_log_ratelimit_ok */
	bool mismatch_logged;
	int nfns;
	char (*srcs)[SRC_MAX];		/* [nfns + 1]: "file:line" of function n */
	struct dq_box *box;		/* SLOT_DQ's */
};

/* Global functions a rule may call; any other global C function raises. */
static const char *const rule_allow[] = {
	/* Lua's base library (dofile, loadfile: no file access from a rule) */
	"assert", "collectgarbage", "error", "getmetatable", "ipairs", "load", "next", "pairs",
	"pcall", "print", "rawequal", "rawget", "rawlen", "rawset", "select", "setmetatable",
	"tonumber", "tostring", "type", "xpcall", "warn",
	/* read-only views of the configuration, logging */
	"getServer", "getServers", "getPool", "getPoolServers", "infolog", "warnlog", "errlog",
	"getVerbose", "showVersion",
	/* lua/objects.h */
	"newDNSName", "newDNSNameFromRaw", "newCA", "newCAFromRaw", "newNetmask", "newNMG",
	"newSuffixMatchNode", "newDNSNameSet", "newQPSLimiter",
	/* Lua 5.1 / LuaJIT names (lua/compat_lua.c) */
	"unpack", "loadstring",
	NULL,
};

static struct dlb_lua_worker *
worker_of(lua_State *L)
{
	return *(struct dlb_lua_worker **)lua_getextraspace(L);
}

/* ---- function numbering ------------------------------------------------------ */

/* Push the registry table at @key, creating it. */
static void
push_registry_table(lua_State *L, const char *key)
{
	if (lua_rawgetp(L, LUA_REGISTRYINDEX, key) == LUA_TTABLE)
		return;
	lua_pop(L, 1);
	lua_newtable(L);
	lua_pushvalue(L, -1);
	lua_rawsetp(L, LUA_REGISTRYINDEX, key);
}

/*
 * Functions numbered in a running config state (the console): their bytecode,
 * by (origin of the config state, number). Append-only, published with a
 * release store of the count; read by the workers on the first call of a
 * number their state lacks. Kept until exit (the console makes few).
 */
struct runtime_fn {
	unsigned long origin;
	int n;
	char src[SRC_MAX];
	size_t len;
	char code[];
};

#define MAX_RUNTIME_FNS		1024
#define MAX_RUNTIME_FN_BYTES	(256 * 1024)
static struct runtime_fn *runtime_fns[MAX_RUNTIME_FNS];
static unsigned nruntime_fns;	/* atomic: published entries */

/* lua_dump's writer: appends to a dnslb/core/buf.h buffer (bounded: DLB_ESPACE is too big). */
static int
dump_writer(lua_State *L, const void *chunk, size_t sz, void *ud)
{
	(void)L;
	return dlb_buf_append(ud, chunk, sz) != DLB_OK;
}

/* Keep the bytecode of function @idx (number @n, defined at @src) for the workers. */
static void
keep_runtime_fn(lua_State *L, int idx, int n, const char *src)
{
	struct dlb_buf b = DLB_BUF_INIT(MAX_RUNTIME_FN_BYTES + 1);	/* + the NUL */
	struct runtime_fn *f;
	const char *up;
	int rc;

	if (lua_iscfunction(L, idx))
		luaL_error(L, "a C function cannot be a Lua rule or policy created at runtime");
	for (int i = 1; (up = lua_getupvalue(L, idx, i)) != NULL; i++) {
		lua_pop(L, 1);
		if (strcmp(up, "_ENV") != 0)
			luaL_error(L, "a function created at runtime (console) runs in each worker's "
				   "own state and cannot capture the local variable '%s': use a "
				   "global", up);
	}
	if (__atomic_load_n(&nruntime_fns, __ATOMIC_RELAXED) >= MAX_RUNTIME_FNS)
		luaL_error(L, "too many Lua functions created at runtime (at most %d): reload",
			   MAX_RUNTIME_FNS);
	lua_pushvalue(L, idx);
	rc = lua_dump(L, dump_writer, &b, 0);
	lua_pop(L, 1);
	if (rc != 0 || dlb_buf_failed(&b)) {
		bool too_big = b.err == DLB_ESPACE;

		dlb_buf_deinit(&b);
		luaL_error(L, too_big ? "function too large to hand to the workers" :
				  "out of memory");
	}
	f = malloc(sizeof(*f) + b.len);
	if (f == NULL) {
		dlb_buf_deinit(&b);
		luaL_error(L, "out of memory");
	}
	f->origin = dlb_lua_conf_origin(dlb_lua_conf_of(L));
	f->n = n;
	snprintf(f->src, sizeof(f->src), "%s", src);
	f->len = b.len;
	memcpy(f->code, b.p, b.len);
	dlb_buf_deinit(&b);
	runtime_fns[nruntime_fns] = f;
	__atomic_store_n(&nruntime_fns, nruntime_fns + 1, __ATOMIC_RELEASE);
}

static const struct runtime_fn *
find_runtime_fn(unsigned long origin, int n)
{
	unsigned cnt = __atomic_load_n(&nruntime_fns, __ATOMIC_ACQUIRE);

	for (unsigned i = cnt; i-- > 0;)
		if (runtime_fns[i]->origin == origin && runtime_fns[i]->n == n)
			return runtime_fns[i];
	return NULL;
}

int
dlb_lua_register_fn(lua_State *L, int idx, char *src, size_t srcsz)
{
	lua_Debug ar;
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);
	int n;

	idx = lua_absindex(L, idx);
	luaL_checktype(L, idx, LUA_TFUNCTION);
	lua_pushvalue(L, idx);
	lua_getinfo(L, ">S", &ar);
	snprintf(src, srcsz, "%s:%d", ar.short_src, ar.linedefined);

	push_registry_table(L, &srcs_key);
	n = (int)lua_rawlen(L, -1) + 1;
	if (lc != NULL && dlb_lua_conf_phase(lc) == DLB_LUA_PHASE_RUNNING)
		keep_runtime_fn(L, idx, n, src);
	lua_pushstring(L, src);
	lua_rawseti(L, -2, n);
	push_registry_table(L, &fns_key);
	lua_pushvalue(L, idx);
	lua_rawseti(L, -2, n);
	lua_pop(L, 2);
	return n;
}

/* ---- limits ----------------------------------------------------------------------- */

/* lua_Alloc counting every byte of the state, refusing growth past the limit. */
static void *
counting_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	struct lua_mem *m = ud;
	void *p;

	if (ptr == NULL)
		osize = 0;	/* then osize is the kind of object, not a size */
	if (nsize == 0) {
		free(ptr);
		m->used -= osize;
		return NULL;
	}
	if (m->limit != 0 && nsize > osize && m->used - osize + nsize > m->limit)
		return NULL;
	p = realloc(ptr, nsize);
	if (p == NULL)
		return NULL;
	m->used = m->used - osize + nsize;
	return p;
}

/*
 * The count hook. Past the limit it re-arms itself for every instruction
 * and raises each time, until the call returns to dlb_luaw_*: an error
 * caught by a pcall in the script is raised again at the next instruction.
 */
static void
insn_hook(lua_State *L, lua_Debug *ar)
{
	struct dlb_lua_worker *lw = worker_of(L);

	(void)ar;
	if (!lw->killed) {
		lw->insns += HOOK_EVERY;
		if (lw->insns < lw->insn_limit)
			return;
		lw->killed = true;
		lua_sethook(L, insn_hook, LUA_MASKCOUNT, 1);
		/* in a coroutine: its resume returns the error, the caller must stop too */
		if (L != lw->L)
			lua_sethook(lw->L, insn_hook, LUA_MASKCOUNT, 1);
	}
	luaL_error(L, "instruction limit exceeded (%I instructions)", (lua_Integer)lw->insn_limit);
}

static void
arm(struct dlb_lua_worker *lw)
{
	lw->insns = 0;
	lw->killed = false;
	if (lw->insn_limit != 0)
		lua_sethook(lw->L, insn_hook, LUA_MASKCOUNT, HOOK_EVERY);
}

static void
disarm(struct dlb_lua_worker *lw)
{
	if (lw->insn_limit != 0)
		lua_sethook(lw->L, NULL, 0, 0);
}

/* ---- the dq object ---------------------------------------------------------------- */

/* The query of @b, or an error when its function already returned. */
static struct dlb_dq *
live_dq(lua_State *L, const struct dq_box *b)
{
	if (b->dq == NULL)
		luaL_error(L, "this DNSQuestion is gone: a dq is valid only during its rule "
			   "function's call");
	return b->dq;
}

/*
 * A method's self. The metamethods take the userdata as is: the metatable
 * is hidden (__metatable), so Lua calls them with the dq only.
 */
static struct dlb_dq *
check_dq(lua_State *L, int idx)
{
	return live_dq(L, luaL_checkudata(L, idx, MT_DQ));
}

/* Is the method's self (argument 1, checked) a response? */
static bool
is_response(lua_State *L)
{
	return ((const struct dq_box *)lua_touserdata(L, 1))->response;
}

static void
push_qname(lua_State *L, const struct dlb_dq *dq)
{
	const struct dlb_dnsmsg *m = dq->m;

	if (m->qdcount == 0 || m->qname_len == 0 ||
	    (size_t)m->qname_off + m->qname_len > dq->len)
		lua_pushnil(L);
	else
		dlb_lua_push_dnsname(L, dq->pkt + m->qname_off, m->qname_len);
}

static uint16_t
hdr_flags(const struct dlb_dq *dq)
{
	return dq->len >= DLB_DNS_HDR ? dlb_rd16(dq->pkt + 2) : 0;
}

/* Write the header flags into the packet and into the parse that describes it. */
static void
set_hdr_flags(struct dlb_dq *dq, uint16_t flags)
{
	if (dq->len < DLB_DNS_HDR)
		return;
	dlb_wr16(dq->pkt + 2, flags);
	dq->m->flags = flags;
}

static bool
remote_is_v6(const struct dlb_dq *dq)
{
	return dq->remote != NULL && dq->remote->sa_family == AF_INET6;
}

static void
push_pool_name(lua_State *L, const struct dq_box *b, const struct dlb_dq *dq)
{
	if (!dq->pool_set)
		lua_pushliteral(L, "");
	else if (b->pool_named)
		lua_pushstring(L, b->pool);
	else if (dq->pool != NULL)
		lua_pushstring(L, dq->pool->name);
	else
		lua_pushliteral(L, "");
}

/*
 * __index: the fields (a switch on the first letter), then the methods
 * (upvalue 1). dq.dh is upvalue 2.
 */
static int
l_dq_index(lua_State *L)
{
	struct dq_box *b = lua_touserdata(L, 1);	/* only ever called for the dq */
	struct dlb_dq *dq = live_dq(L, b);
	const char *k;

	if (lua_type(L, 2) != LUA_TSTRING)
		return 0;
	k = lua_tostring(L, 2);
	switch (k[0]) {
	case 'd':
		if (strcmp(k, "dh") == 0) {
			lua_pushvalue(L, lua_upvalueindex(2));
			return 1;
		}
		break;
	case 'e':
		if (strcmp(k, "ecsOverride") == 0) {
			lua_pushboolean(L, dq->ecs_override >= 0 ? dq->ecs_override :
					   dq->set != NULL && dq->set->ecs_override);
			return 1;
		}
		if (strcmp(k, "ecsPrefixLength") == 0) {
			int v6 = remote_is_v6(dq);
			int p = v6 ? dq->ecs_prefix_v6 : dq->ecs_prefix_v4;

			if (p < 0)
				p = dq->set == NULL ? (v6 ? 56 : 24) :
				    v6 ? dq->set->ecs_prefix_v6 : dq->set->ecs_prefix_v4;
			lua_pushinteger(L, p);
			return 1;
		}
		break;
	case 'l':
		if (strcmp(k, "len") == 0) {
			lua_pushinteger(L, (lua_Integer)dq->len);
			return 1;
		}
		if (strcmp(k, "localaddr") == 0) {
			if (dq->local == NULL)
				lua_pushnil(L);
			else
				dlb_lua_push_ca(L, dq->local);
			return 1;
		}
		break;
	case 'o':
		if (strcmp(k, "opcode") == 0) {
			lua_pushinteger(L, DLB_OPCODE(hdr_flags(dq)));
			return 1;
		}
		break;
	case 'p':
		if (strcmp(k, "pool") == 0) {
			push_pool_name(L, b, dq);
			return 1;
		}
		break;
	case 'q':
		if (strcmp(k, "qname") == 0) {
			push_qname(L, dq);
			return 1;
		}
		if (strcmp(k, "qtype") == 0) {
			lua_pushinteger(L, dq->m->qtype);
			return 1;
		}
		if (strcmp(k, "qclass") == 0) {
			lua_pushinteger(L, dq->m->qclass);
			return 1;
		}
		break;
	case 'r':
		if (strcmp(k, "remoteaddr") == 0) {
			if (dq->remote == NULL)
				lua_pushnil(L);
			else
				dlb_lua_push_ca(L, dq->remote);
			return 1;
		}
		if (strcmp(k, "rcode") == 0) {
			lua_pushinteger(L, DLB_RCODE(hdr_flags(dq)));
			return 1;
		}
		break;
	case 's':
		if (strcmp(k, "size") == 0) {
			lua_pushinteger(L, (lua_Integer)dq->cap);
			return 1;
		}
		if (strcmp(k, "skipCache") == 0) {
			lua_pushboolean(L, dq->skip_cache);
			return 1;
		}
		break;
	case 't':
		if (strcmp(k, "tcp") == 0) {
			lua_pushboolean(L, dq->tcp);
			return 1;
		}
		if (strcmp(k, "tempFailureTTL") == 0) {
			if (dq->tempfail_ttl < 0)
				lua_pushnil(L);
			else
				lua_pushinteger(L, dq->tempfail_ttl);
			return 1;
		}
		break;
	case 'u':
		if (strcmp(k, "useECS") == 0) {
			lua_pushboolean(L, dq->use_ecs != 0);
			return 1;
		}
		break;
	}
	lua_pushvalue(L, 2);
	lua_rawget(L, lua_upvalueindex(1));
	return 1;
}

static lua_Integer
field_int(lua_State *L, const char *k, lua_Integer lo, lua_Integer hi)
{
	int isnum = 0;
	lua_Integer v = lua_tointegerx(L, 3, &isnum);

	if (!isnum || v < lo || v > hi)
		luaL_error(L, "dq.%s: expected an integer in %I..%I", k, lo, hi);
	return v;
}

static int
l_dq_newindex(lua_State *L)
{
	struct dq_box *b = lua_touserdata(L, 1);	/* only ever called for the dq */
	struct dlb_dq *dq = live_dq(L, b);
	const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "?";

	if (strcmp(k, "rcode") == 0) {
		/* the low 4 bits go in the header; an extended rcode needs an OPT RR */
		lua_Integer rc = field_int(L, k, 0, 4095);

		set_hdr_flags(dq, (uint16_t)((hdr_flags(dq) & ~0xf) | (rc & 0xf)));
	} else if (strcmp(k, "skipCache") == 0) {
		dq->skip_cache = lua_toboolean(L, 3);
	} else if (strcmp(k, "tempFailureTTL") == 0) {
		dq->tempfail_ttl = lua_isnil(L, 3) ? -1 : (int32_t)field_int(L, k, 0, INT32_MAX);
	} else if (strcmp(k, "pool") == 0) {
		size_t len;
		const char *name = luaL_checklstring(L, 3, &len);

		if (len >= sizeof(b->pool))
			return luaL_error(L, "dq.pool: pool name too long");
		memcpy(b->pool, name, len + 1);
		b->pool_named = true;
		dq->pool_set = true;
		dq->pool = dq->cfg != NULL ? dlb_config_find_pool(dq->cfg, name) : NULL;
	} else if (strcmp(k, "useECS") == 0) {
		dq->use_ecs = lua_toboolean(L, 3) ? 1 : 0;
	} else if (strcmp(k, "ecsOverride") == 0) {
		dq->ecs_override = lua_toboolean(L, 3) ? 1 : 0;
	} else if (strcmp(k, "ecsPrefixLength") == 0) {
		/* dnsdist has one prefix length: the one of the client's family */
		bool v6 = remote_is_v6(dq);
		lua_Integer p = field_int(L, k, 0, v6 || dq->remote == NULL ? 128 : 32);

		if (v6 || dq->remote == NULL)
			dq->ecs_prefix_v6 = (int16_t)p;
		if (!v6)
			dq->ecs_prefix_v4 = (int16_t)(p > 32 ? 32 : p);
	} else {
		return luaL_error(L, "dq.%s is read-only or unknown", k);
	}
	return 0;
}

static int
l_dq_tostring(lua_State *L)
{
	lua_pushliteral(L, "DNSQuestion");
	return 1;
}

/* ---- dq methods: tags ------------------------------------------------------------ */

/* A tag key or value: a string (a number is turned into one) without NUL. */
static const char *
tag_string(lua_State *L, int idx, const char *fn)
{
	size_t len;
	const char *s;

	if (lua_type(L, idx) != LUA_TSTRING && lua_type(L, idx) != LUA_TNUMBER)
		luaL_error(L, "%s: tags are strings, not %s", fn, luaL_typename(L, idx));
	s = lua_tolstring(L, idx, &len);
	if (strlen(s) != len)
		luaL_error(L, "%s: a tag cannot contain a NUL octet", fn);
	return s;
}

/* getTag(key): "" when not set, as dnsdist 1.7 */
static int
l_dq_get_tag(lua_State *L)
{
	struct dlb_dq *dq = check_dq(L, 1);
	const char *v = dlb_tags_get(&dq->tags, tag_string(L, 2, "getTag"));

	lua_pushstring(L, v != NULL ? v : "");
	return 1;
}

static int
l_dq_set_tag(lua_State *L)
{
	struct dlb_dq *dq = check_dq(L, 1);
	const char *k = tag_string(L, 2, "setTag");
	const char *v = tag_string(L, 3, "setTag");

	if (dlb_tags_set(&dq->tags, k, v) != 0)
		return luaL_error(L, "setTag: no room for tag '%s' (the tags of a query hold %d "
				  "bytes)", k, DLB_TAGS_BYTES);
	return 0;
}

/* Copy @from into @to without @key. */
static void
tags_without(const struct dlb_tags *from, struct dlb_tags *to, const char *key)
{
	const char *k, *v;
	size_t pos = 0;

	dlb_tags_clear(to);
	while (dlb_tags_next(from, &pos, &k, &v))
		if (strcmp(k, key) != 0)
			dlb_tags_set(to, k, v);
}

static int
l_dq_unset_tag(lua_State *L)
{
	struct dlb_dq *dq = check_dq(L, 1);
	struct dlb_tags t;

	tags_without(&dq->tags, &t, tag_string(L, 2, "unsetTag"));
	dq->tags = t;
	return 0;
}

static int
l_dq_get_tag_array(lua_State *L)
{
	struct dlb_dq *dq = check_dq(L, 1);
	const char *k, *v;
	size_t pos = 0;

	lua_createtable(L, 0, dq->tags.n);
	while (dlb_tags_next(&dq->tags, &pos, &k, &v)) {
		lua_pushstring(L, v);
		lua_setfield(L, -2, k);
	}
	return 1;
}

/* setTagArray({k = v, ...}): all or nothing */
static int
l_dq_set_tag_array(lua_State *L)
{
	struct dlb_dq *dq = check_dq(L, 1);
	struct dlb_tags t = dq->tags;

	luaL_checktype(L, 2, LUA_TTABLE);
	lua_pushnil(L);
	while (lua_next(L, 2) != 0) {
		const char *k, *v;

		lua_pushvalue(L, -2);	/* tag_string may turn a number key into a string */
		k = tag_string(L, -1, "setTagArray");
		v = tag_string(L, -2, "setTagArray");
		if (dlb_tags_set(&t, k, v) != 0)
			return luaL_error(L, "setTagArray: no room for tag '%s' (the tags of a "
					  "query hold %d bytes)", k, DLB_TAGS_BYTES);
		lua_pop(L, 2);
	}
	dq->tags = t;
	return 0;
}

/* ---- dq methods: the rest ---------------------------------------------------------- */

/*
 * The OPT RR's RDATA in @pkt: the first OPT of the additional section,
 * every record walked. @return false when there is none or the message
 * cannot be walked.
 */
static bool
find_opt_rdata(const uint8_t *pkt, size_t len, size_t *rdata, size_t *rdlen)
{
	unsigned qd, an, ns, ar;
	size_t off = DLB_DNS_HDR;

	if (len < DLB_DNS_HDR)
		return false;
	qd = dlb_rd16(pkt + 4);
	an = dlb_rd16(pkt + 6);
	ns = dlb_rd16(pkt + 8);
	ar = dlb_rd16(pkt + 10);
	for (unsigned i = 0; i < qd; i++) {
		int n = dlb_wire_skip_name(pkt, len, off);

		if (n < 0 || (size_t)n + 4 > len)
			return false;
		off = (size_t)n + 4;
	}
	for (unsigned i = 0; i < an + ns + ar; i++) {
		int n = dlb_wire_skip_name(pkt, len, off);
		size_t rl;

		if (n < 0 || (size_t)n + 10 > len)
			return false;
		rl = dlb_rd16(pkt + n + 8);
		if ((size_t)n + 10 + rl > len)
			return false;
		if (i >= an + ns && dlb_rd16(pkt + n) == DLB_TYPE_OPT) {
			*rdata = (size_t)n + 10;
			*rdlen = rl;
			return true;
		}
		off = (size_t)n + 10 + rl;
	}
	return false;
}

/* The DO bit of the OPT RR of @pkt (a response: its parse stops at the question). */
static bool
message_do_bit(const uint8_t *pkt, size_t len)
{
	size_t rdata, rdlen;

	/* the flags are the TTL's low half: 4 bytes before the RDLENGTH's end */
	return find_opt_rdata(pkt, len, &rdata, &rdlen) && (pkt[rdata - 4] & 0x80) != 0;
}

static int
l_dq_get_do(lua_State *L)
{
	struct dlb_dq *dq = check_dq(L, 1);

	lua_pushboolean(L, is_response(L) ? message_do_bit(dq->pkt, dq->len) : dq->m->do_bit);
	return 1;
}

static int
l_dq_get_protocol(lua_State *L)
{
	const struct dlb_dq *dq = check_dq(L, 1);

	if (dq->http != NULL)
		lua_pushstring(L, dq->http->doh ? "DNS over HTTPS" : "DNS over TLS");
	else if (dq->tcp)
		lua_pushliteral(L, "Do53 TCP");
	else
		lua_pushliteral(L, "Do53 UDP");
	return 1;
}

static int
l_dq_get_content(lua_State *L)
{
	struct dlb_dq *dq = check_dq(L, 1);

	lua_pushlstring(L, (const char *)dq->pkt, dq->len);
	return 1;
}

/*
 * setContent(s): replace the whole message. It must parse (as a query, or
 * as a response's header and question in a response rule); the parse then
 * describes the new message.
 */
static int
l_dq_set_content(lua_State *L)
{
	struct dlb_dq *dq = check_dq(L, 1);
	size_t len;
	const uint8_t *s = (const uint8_t *)luaL_checklstring(L, 2, &len);
	struct dlb_dnsmsg m;
	int rc;

	if (len > dq->cap)
		return luaL_error(L, "setContent: %d bytes do not fit the %d of the buffer",
				  (int)len, (int)dq->cap);
	if (is_response(L))
		rc = dlb_wire_parse_response_question(s, len, &m);
	else
		rc = dlb_wire_parse_query(s, len, &m);
	/*
	 * A query may be made into an answer (then returned with HeaderModify):
	 * QR or TC set is fine, if its header and question are sound.
	 */
	if (rc == DLB_ENOTQUERY && !is_response(L)) {
		rc = dlb_wire_parse_response_question(s, len, &m);
		if (rc == DLB_EEMPTY)
			rc = DLB_OK;
	}
	if (rc != DLB_OK)
		return luaL_error(L, "setContent: not a valid DNS message (%s)", dlb_strerror(rc));
	memmove(dq->pkt, s, len);
	dq->len = len;
	*dq->m = m;
	((struct dq_box *)lua_touserdata(L, 1))->rewrites++;
	return 0;
}

static double
wall_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* getElapsedUs(): since the query arrived (the loop clock is wall-clock based). */
static int
l_dq_get_elapsed_us(lua_State *L)
{
	struct dlb_dq *dq = check_dq(L, 1);
	double el = wall_now() - dq->t_start;

	if (dq->t_start <= 0 || el < 0 || el > 86400)
		el = dq->now - dq->t_start;
	lua_pushnumber(L, el > 0 ? el * 1e6 : 0);
	return 1;
}

/* Offset just past the last record of @pkt, or -1 when it cannot be walked. */
static long
message_end(const uint8_t *pkt, size_t len)
{
	unsigned qd, rr;
	size_t off = DLB_DNS_HDR;

	if (len < DLB_DNS_HDR)
		return -1;
	qd = dlb_rd16(pkt + 4);
	rr = (unsigned)dlb_rd16(pkt + 6) + dlb_rd16(pkt + 8) + dlb_rd16(pkt + 10);
	for (unsigned i = 0; i < qd; i++) {
		int n = dlb_wire_skip_name(pkt, len, off);

		if (n < 0 || (size_t)n + 4 > len)
			return -1;
		off = (size_t)n + 4;
	}
	for (unsigned i = 0; i < rr; i++) {
		int n = dlb_wire_skip_name(pkt, len, off);

		if (n < 0 || (size_t)n + 10 > len)
			return -1;
		off = (size_t)n + 10 + dlb_rd16(pkt + n + 8);
		if (off > len)
			return -1;
	}
	return (long)off;
}

static int
l_dq_get_trailing_data(lua_State *L)
{
	struct dlb_dq *dq = check_dq(L, 1);
	long end = message_end(dq->pkt, dq->len);

	if (end < 0 || (size_t)end >= dq->len)
		lua_pushliteral(L, "");
	else
		lua_pushlstring(L, (const char *)dq->pkt + end, dq->len - (size_t)end);
	return 1;
}

/*
 * setTrailingData(s): replace what follows the last record by @s (as
 * dnsdist: after the whole message when it cannot be walked). Returns false
 * when the message would pass 65535 bytes. A response grows into the
 * worker's spare buffer (a backend answer's own may be followed by others).
 */
static int
l_dq_set_trailing_data(lua_State *L)
{
	struct dlb_dq *dq = check_dq(L, 1);
	size_t tlen;
	const char *tail = luaL_checklstring(L, 2, &tlen);
	long end = message_end(dq->pkt, dq->len);
	size_t at = end < 0 ? dq->len : (size_t)end;

	if (tlen > 65535 - at) {	/* a DNS message never passes a TCP length prefix */
		lua_pushboolean(L, 0);
		return 1;
	}
	if (at + tlen > dq->cap) {
		if (dq->spare == NULL || dq->spare == dq->pkt || at + tlen > DLB_RBUF_SIZE) {
			lua_pushboolean(L, 0);
			return 1;
		}
		memcpy(dq->spare, dq->pkt, at);
		dq->pkt = dq->spare;
		dq->cap = DLB_RBUF_SIZE;
		dq->spare = NULL;
	}
	memcpy(dq->pkt + at, tail, tlen);
	dq->len = at + tlen;
	if (end >= 0)
		dq->m->trailing = tlen > 0;
	lua_pushboolean(L, 1);
	return 1;
}

static int
l_eov_count(lua_State *L)
{
	luaL_checkudata(L, 1, MT_EOV);
	lua_getiuservalue(L, 1, 1);
	lua_pushinteger(L, (lua_Integer)lua_rawlen(L, -1));
	return 1;
}

static int
l_eov_get_values(lua_State *L)
{
	lua_Integer n;

	luaL_checkudata(L, 1, MT_EOV);
	lua_getiuservalue(L, 1, 1);
	n = (lua_Integer)lua_rawlen(L, -1);
	lua_createtable(L, (int)n, 0);
	for (lua_Integer i = 1; i <= n; i++) {
		lua_rawgeti(L, -2, i);
		lua_rawseti(L, -2, i);
	}
	return 1;
}

static const luaL_Reg eov_methods[] = {
	{ "count", l_eov_count },
	{ "getValues", l_eov_get_values },
	{ NULL, NULL },
};

/*
 * getEDNSOptions(): a table of EDNSOptionView keyed by option code (each
 * holds the values of the options of that code, in order); empty without
 * an OPT RR. An OPT whose options overrun its RDATA is an error, as in
 * dnsdist.
 */
static int
l_dq_get_edns_options(lua_State *L)
{
	struct dlb_dq *dq = check_dq(L, 1);
	size_t rdata, rdlen, p;

	lua_newtable(L);
	if (!find_opt_rdata(dq->pkt, dq->len, &rdata, &rdlen))
		return 1;
	for (p = rdata; p + 4 <= rdata + rdlen;) {
		uint16_t code = dlb_rd16(dq->pkt + p);
		size_t olen = dlb_rd16(dq->pkt + p + 2);

		if (p + 4 + olen > rdata + rdlen)
			return luaL_error(L, "Unable to parse EDNS options");
		if (lua_rawgeti(L, -1, code) == LUA_TNIL) {
			lua_pop(L, 1);
			lua_newuserdatauv(L, 0, 1);
			if (luaL_newmetatable(L, MT_EOV)) {
				lua_newtable(L);
				luaL_setfuncs(L, eov_methods, 0);
				lua_setfield(L, -2, "__index");
				lua_pushliteral(L, MT_EOV);
				lua_setfield(L, -2, "__metatable");
			}
			lua_setmetatable(L, -2);
			lua_newtable(L);
			lua_setiuservalue(L, -2, 1);
			lua_pushvalue(L, -1);
			lua_rawseti(L, -3, code);
		}
		lua_getiuservalue(L, -1, 1);
		lua_pushlstring(L, (const char *)dq->pkt + p + 4, olen);
		lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
		lua_pop(L, 2);
		p += 4 + olen;
	}
	if (p != rdata + rdlen)
		return luaL_error(L, "Unable to parse EDNS options");
	return 1;
}

/* An address of dq:spoof(): a ComboAddress, or a string that is an address. */
static bool
spoof_address(lua_State *L, int idx, struct sockaddr_storage *out)
{
	const struct sockaddr_storage *ca = dlb_lua_to_ca(L, idx);
	socklen_t len;

	if (ca != NULL) {
		*out = *ca;
		return true;
	}
	return lua_type(L, idx) == LUA_TSTRING &&
	       dlb_sockaddr_parse(lua_tostring(L, idx), 0, out, &len) == 0;
}

/*
 * spoof(x): turn the query into an answer, in place; the function then
 * returns DNSAction.HeaderModify (as with dnsdist). x is
 *  - a ComboAddress, an address string, or a table of them: A/AAAA records
 *    (those of the query's type; both for ANY);
 *  - a string that is not an address: a CNAME to that name;
 *  - a table of strings that are not addresses: raw rdatas (dnsdist 1.7's
 *    reading of a table of strings), one record each of the query's type.
 * TTL 60, RA copied from RD, as SpoofAction.
 */
static int
l_dq_spoof(lua_State *L)
{
	struct dlb_dq *dq = check_dq(L, 1);
	static const struct dlb_answer_opts o = { .ttl = 60 };
	const struct dlb_selfanswer_opts *so = dq->set != NULL ? &dq->set->selfans : NULL;
	struct sockaddr_storage addrs[SPOOF_MAX];
	uint8_t *raw[SPOOF_MAX];
	uint16_t rawlen[SPOOF_MAX];
	int naddrs = 0, nraw = 0, rc;

	if (is_response(L))
		return luaL_error(L, "spoof: only a query can be spoofed");
	if (lua_type(L, 2) == LUA_TTABLE) {
		lua_Integer n = (lua_Integer)lua_rawlen(L, 2);

		if (n < 1 || n > SPOOF_MAX)
			return luaL_error(L, "spoof: expected 1 to %d records", SPOOF_MAX);
		for (lua_Integer i = 1; i <= n; i++) {
			size_t len;

			lua_rawgeti(L, 2, i);	/* anchored by the table */
			if (spoof_address(L, -1, &addrs[naddrs])) {
				naddrs++;
			} else if (lua_type(L, -1) == LUA_TSTRING) {
				raw[nraw] = (uint8_t *)(uintptr_t)lua_tolstring(L, -1, &len);
				if (len > UINT16_MAX)
					return luaL_error(L, "spoof: rdata too long");
				rawlen[nraw++] = (uint16_t)len;
			} else {
				return luaL_error(L, "spoof: expected addresses or strings, got %s",
						  luaL_typename(L, -1));
			}
			lua_pop(L, 1);
		}
		if (naddrs > 0 && nraw > 0)
			return luaL_error(L, "spoof: a table of addresses or of raw rdatas, not "
					  "both");
		if (naddrs > 0)
			rc = dlb_answer_spoof_addrs(dq->pkt, dq->len, dq->cap, dq->m, addrs, naddrs,
						    &o, so);
		else
			rc = dlb_answer_spoof_raw(dq->pkt, dq->len, dq->cap, dq->m, raw, rawlen,
						  nraw, &o, so);
	} else if (spoof_address(L, 2, &addrs[0])) {
		rc = dlb_answer_spoof_addrs(dq->pkt, dq->len, dq->cap, dq->m, addrs, 1, &o, so);
	} else if (lua_type(L, 2) == LUA_TSTRING) {
		uint8_t name[DLB_MAX_NAME];
		int n = dlb_wire_name_from_text(lua_tostring(L, 2), name, sizeof(name));

		if (n <= 0)
			return luaL_error(L, "spoof: '%s' is neither an address nor a name",
					  lua_tostring(L, 2));
		rc = dlb_answer_spoof_cname(dq->pkt, dq->len, dq->cap, dq->m, name, (size_t)n, &o,
					    so);
	} else {
		return luaL_error(L, "spoof: expected an address, a name or a table, got %s",
				  luaL_typename(L, 2));
	}
	if (rc < 0)
		return luaL_error(L, "spoof: cannot build the answer (%s)", dlb_strerror(rc));
	if (rc == 0)
		return 0;	/* no address of the asked type: nothing spoofed (dnsdist) */
	dq->len = (size_t)rc;
	/* the message is an answer now: describe it (header, question) */
	(void)dlb_wire_parse_response_question(dq->pkt, dq->len, dq->m);
	dq->m->flags = hdr_flags(dq);
	((struct dq_box *)lua_touserdata(L, 1))->rewrites++;
	return 0;
}

/* One record editTTLs visits. */
struct ttl_rr {
	uint32_t ttl_off;
	uint16_t type, cls;
	uint8_t section;
};

struct ttl_walk {
	struct ttl_rr *v;	/* NULL: count only */
	size_t n;
};

static void
ttl_visit(void *ud, uint8_t *pkt, int section, uint16_t type, uint16_t cls, size_t ttl_off)
{
	struct ttl_walk *w = ud;

	(void)pkt;
	if (w->v != NULL) {
		w->v[w->n].ttl_off = (uint32_t)ttl_off;
		w->v[w->n].type = type;
		w->v[w->n].cls = cls;
		w->v[w->n].section = (uint8_t)section;
	}
	w->n++;
}

/*
 * editTTLs(function(section, qclass, qtype, ttl) return newttl end), for
 * responses: every record but OPT. nil keeps the TTL. The records are
 * listed first, so no Lua runs (or raises) inside the packet walk.
 */
static int
l_dq_edit_ttls(lua_State *L)
{
	struct dlb_dq *dq = check_dq(L, 1);
	const struct dq_box *b = lua_touserdata(L, 1);
	struct ttl_walk w = { NULL, 0 };
	unsigned rewrites = b->rewrites;
	size_t n;

	if (!is_response(L))
		return luaL_error(L, "editTTLs: only for responses");
	luaL_checktype(L, 2, LUA_TFUNCTION);
	if (dlb_wire_walk_rrs(dq->pkt, dq->len, ttl_visit, &w) != 0)
		return luaL_error(L, "editTTLs: the response cannot be parsed");
	n = w.n;
	if (n == 0)
		return 0;
	w.v = lua_newuserdatauv(L, n * sizeof(*w.v), 0);
	w.n = 0;
	if (dlb_wire_walk_rrs(dq->pkt, dq->len, ttl_visit, &w) != 0 || w.n != n)
		return luaL_error(L, "editTTLs: the response cannot be parsed");
	for (size_t i = 0; i < n; i++) {
		const struct ttl_rr *r = &w.v[i];
		lua_Integer ttl;
		int isnum = 0;

		lua_pushvalue(L, 2);
		lua_pushinteger(L, r->section);
		lua_pushinteger(L, r->cls);
		lua_pushinteger(L, r->type);
		lua_pushinteger(L, dlb_rd32(dq->pkt + r->ttl_off));
		lua_call(L, 4, 1);
		/* the function may hold the dr and replace the message: offsets are stale */
		if (b->rewrites != rewrites || b->dq != dq)
			return luaL_error(L, "editTTLs: the message was replaced by the function");
		if (!lua_isnil(L, -1)) {
			ttl = lua_tointegerx(L, -1, &isnum);
			if (!isnum || ttl < 0 || ttl > (lua_Integer)UINT32_MAX)
				return luaL_error(L, "editTTLs: the function must return a TTL "
						  "(0..4294967295) or nil");
			dlb_wr32(dq->pkt + r->ttl_off, (uint32_t)ttl);
		}
		lua_pop(L, 1);
	}
	return 0;
}

static int
l_dq_get_selected_backend(lua_State *L)
{
	struct dlb_dq *dq = check_dq(L, 1);

	if (dq->be_index < 0 || dq->cfg == NULL || dq->be_index >= dq->cfg->nbackends)
		lua_pushnil(L);
	else
		lua_pushstring(L, dq->cfg->backends[dq->be_index]->name);
	return 1;
}

/* ---- dq methods: DNS over HTTPS and TLS ------------------------------------------------ */

/*
 * As dnsdist 1.7.3: for a query that did not come over DoH, the HTTP
 * getters give "" (getHTTPHeaders an empty table) and setHTTPResponse does
 * nothing. A response rule sees none of them (nor in dnsdist 1.7.3).
 */
static const struct dlb_dq_http *
dq_doh(lua_State *L)
{
	const struct dlb_dq *dq = check_dq(L, 1);

	return dq->http != NULL && dq->http->doh ? dq->http : NULL;
}

static int
l_dq_get_http_path(lua_State *L)
{
	const struct dlb_dq_http *h = dq_doh(L);

	lua_pushlstring(L, h != NULL ? h->path : "", h != NULL ? h->query_at : 0);
	return 1;
}

/* The query string with its '?'. */
static int
l_dq_get_http_query_string(lua_State *L)
{
	const struct dlb_dq_http *h = dq_doh(L);

	if (h == NULL)
		lua_pushliteral(L, "");
	else
		lua_pushlstring(L, h->path + h->query_at, h->path_len - h->query_at);
	return 1;
}

static int
l_dq_get_http_scheme(lua_State *L)
{
	const struct dlb_dq_http *h = dq_doh(L);

	lua_pushstring(L, h != NULL ? h->scheme : "");
	return 1;
}

static int
l_dq_get_http_host(lua_State *L)
{
	const struct dlb_dq_http *h = dq_doh(L);

	lua_pushstring(L, h != NULL ? h->host : "");
	return 1;
}

static int
l_dq_get_http_headers(lua_State *L)
{
	const struct dlb_dq_http *h = dq_doh(L);

	lua_newtable(L);
	for (size_t i = 0; h != NULL && i < h->nheaders; i++) {
		if (!dlb_dq_http_header_shown(h, i))
			continue;
		lua_pushstring(L, h->headers[i].value);
		lua_setfield(L, -2, h->headers[i].name);
	}
	return 1;
}

/* setHTTPResponse(status, body[, contentType]): what a DoH query's answer
 * will be, once the rules answer it (dq.dh:setQR(true) and HeaderModify,
 * for instance). */
static int
l_dq_set_http_response(lua_State *L)
{
	struct dlb_dq *dq = check_dq(L, 1);
	lua_Integer status = luaL_checkinteger(L, 2);
	size_t len;
	const char *body = luaL_checklstring(L, 3, &len);
	const char *ctype = luaL_optstring(L, 4, "");

	if (status < 0 || status > 65535)
		return luaL_error(L, "setHTTPResponse: the status must be 0 to 65535, not %I",
				  status);
	if (dq->http != NULL && dq->http->doh && !dq->response)
		dlb_dq_http_set_response(dq->http, (uint16_t)status, (const uint8_t *)body, len,
					 ctype);
	return 0;
}

/* The server name a DNS over TLS client sent; "" without one (dnsdist 1.7.3
 * gives none for DoH). */
static int
l_dq_get_sni(lua_State *L)
{
	const struct dlb_dq *dq = check_dq(L, 1);

	lua_pushstring(L, dq->http != NULL && dq->http->sni != NULL ? dq->http->sni : "");
	return 1;
}

static const luaL_Reg dq_methods[] = {
	{ "getHTTPPath", l_dq_get_http_path },
	{ "getHTTPQueryString", l_dq_get_http_query_string },
	{ "getHTTPScheme", l_dq_get_http_scheme },
	{ "getHTTPHost", l_dq_get_http_host },
	{ "getHTTPHeaders", l_dq_get_http_headers },
	{ "setHTTPResponse", l_dq_set_http_response },
	{ "getServerNameIndication", l_dq_get_sni },
	{ "getTag", l_dq_get_tag },
	{ "setTag", l_dq_set_tag },
	{ "unsetTag", l_dq_unset_tag },
	{ "getTagArray", l_dq_get_tag_array },
	{ "setTagArray", l_dq_set_tag_array },
	{ "getDO", l_dq_get_do },
	{ "getProtocol", l_dq_get_protocol },
	{ "getContent", l_dq_get_content },
	{ "setContent", l_dq_set_content },
	{ "getElapsedUs", l_dq_get_elapsed_us },
	{ "getTrailingData", l_dq_get_trailing_data },
	{ "getEDNSOptions", l_dq_get_edns_options },
	{ "setTrailingData", l_dq_set_trailing_data },
	{ "spoof", l_dq_spoof },
	{ "editTTLs", l_dq_edit_ttls },
	{ "getSelectedBackend", l_dq_get_selected_backend },
	{ NULL, NULL },
};

/* ---- dq.dh: the header --------------------------------------------------------------- */

static struct dlb_dq *
check_dh(lua_State *L)
{
	struct dh_box *h = luaL_checkudata(L, 1, MT_DH);

	if (h->box->dq == NULL)
		luaL_error(L, "this DNSHeader is gone: dq.dh is valid only during its rule "
			   "function's call");
	return h->box->dq;
}

static int
get_flag(lua_State *L, uint16_t bit)
{
	lua_pushboolean(L, (hdr_flags(check_dh(L)) & bit) != 0);
	return 1;
}

static int
set_flag(lua_State *L, uint16_t bit)
{
	struct dlb_dq *dq = check_dh(L);
	uint16_t f = hdr_flags(dq);

	set_hdr_flags(dq, lua_toboolean(L, 2) ? (uint16_t)(f | bit) : (uint16_t)(f & ~bit));
	return 0;
}

#define DH_FLAG(name, bit)						\
static int l_dh_get_##name(lua_State *L) { return get_flag(L, bit); }	\
static int l_dh_set_##name(lua_State *L) { return set_flag(L, bit); }

DH_FLAG(rd, DLB_F_RD)
DH_FLAG(cd, DLB_F_CD)
DH_FLAG(ad, DLB_F_AD)
DH_FLAG(aa, DLB_F_AA)
DH_FLAG(ra, DLB_F_RA)
DH_FLAG(tc, DLB_F_TC)
DH_FLAG(qr, DLB_F_QR)

static int
l_dh_get_id(lua_State *L)
{
	struct dlb_dq *dq = check_dh(L);

	lua_pushinteger(L, dq->len >= 2 ? dlb_rd16(dq->pkt) : 0);
	return 1;
}

static int
l_dh_tostring(lua_State *L)
{
	lua_pushliteral(L, "DNSHeader");
	return 1;
}

static const luaL_Reg dh_methods[] = {
	{ "getRD", l_dh_get_rd }, { "setRD", l_dh_set_rd },
	{ "getCD", l_dh_get_cd }, { "setCD", l_dh_set_cd },
	{ "getAD", l_dh_get_ad }, { "setAD", l_dh_set_ad },
	{ "getAA", l_dh_get_aa }, { "setAA", l_dh_set_aa },
	{ "getRA", l_dh_get_ra }, { "setRA", l_dh_set_ra },
	{ "getTC", l_dh_get_tc }, { "setTC", l_dh_set_tc },
	{ "getQR", l_dh_get_qr }, { "setQR", l_dh_set_qr },
	{ "getID", l_dh_get_id },
	{ NULL, NULL },
};

/* ---- the C functions of the ffi module (lua/compat_lua.c) ------------------------ */

/* set_result(dq, s): the string of a LuaFFIAction (Spoof's address, Pool's name, ...). */
static int
l_ffi_set_result(lua_State *L)
{
	struct dq_box *b = luaL_checkudata(L, 1, MT_DQ);
	size_t len;

	live_dq(L, b);
	luaL_checklstring(L, 2, &len);
	lua_settop(L, 2);
	lua_pushvalue(L, 2);
	lua_rawsetp(L, LUA_REGISTRYINDEX, &result_key);	/* keeps the string alive */
	b->result = lua_tostring(L, 2);
	b->result_len = len;
	b->result_set = true;
	return 0;
}

/*
 * addr(dq, local[, bits]): the address of the client (local: the one it
 * asked) in network order, 4 or 16 octets, masked to @bits when given;
 * nil when there is none.
 */
static int
l_ffi_addr(lua_State *L)
{
	struct dlb_dq *dq = check_dq(L, 1);
	const struct sockaddr *sa = lua_toboolean(L, 2) ? dq->local : dq->remote;
	lua_Integer bits = luaL_optinteger(L, 3, -1);
	uint8_t a[16];
	size_t n;

	if (sa == NULL || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)) {
		lua_pushnil(L);
		return 1;
	}
	if (sa->sa_family == AF_INET) {
		n = 4;
		memcpy(a, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, n);
	} else {
		n = 16;
		memcpy(a, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, n);
	}
	if (bits >= 0)
		for (size_t i = 0; i < n; i++) {
			lua_Integer keep = bits - (lua_Integer)i * 8;

			if (keep < 8)
				a[i] = keep <= 0 ? 0 : (uint8_t)(a[i] & (0xff << (8 - keep)));
		}
	lua_pushlstring(L, (const char *)a, n);
	return 1;
}

/* qname_raw(dq): the qname as the packet has it, in wire form. */
static int
l_ffi_qname_raw(lua_State *L)
{
	struct dlb_dq *dq = check_dq(L, 1);
	const struct dlb_dnsmsg *m = dq->m;

	if (m->qdcount == 0 || m->qname_len == 0 ||
	    (size_t)m->qname_off + m->qname_len > dq->len)
		lua_pushliteral(L, "");
	else
		lua_pushlstring(L, (const char *)dq->pkt + m->qname_off, m->qname_len);
	return 1;
}

/* opt_rdata(dq): the RDATA of the query's OPT record (its EDNS options), or nil. */
static int
l_ffi_opt_rdata(lua_State *L)
{
	struct dlb_dq *dq = check_dq(L, 1);
	const struct dlb_dnsmsg *m = dq->m;

	if (!m->has_opt || (size_t)m->opt_rdata_off + m->opt_rdlen > dq->len)
		lua_pushnil(L);
	else
		lua_pushlstring(L, (const char *)dq->pkt + m->opt_rdata_off, m->opt_rdlen);
	return 1;
}

void
dlb_luaw_push_ffi(lua_State *L)
{
	static const luaL_Reg fns[] = {
		{ "set_result", l_ffi_set_result },
		{ "opt_rdata", l_ffi_opt_rdata },
		{ "addr", l_ffi_addr },
		{ "qname_raw", l_ffi_qname_raw },
		{ NULL, NULL },
	};

	luaL_newlib(L, fns);
}

/* ---- building a state -------------------------------------------------------------- */

static int
l_blocked(lua_State *L)
{
	return luaL_error(L, "%s cannot be called from a rule",
			  lua_tostring(L, lua_upvalueindex(1)));
}

static bool
allowed(const char *name)
{
	for (const char *const *a = rule_allow; *a != NULL; a++)
		if (strcmp(*a, name) == 0)
			return true;
	return false;
}

/* The message handler: the error as a string. */
static int
l_msgh(lua_State *L)
{
	if (lua_type(L, 1) == LUA_TSTRING)
		return 1;
	if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
		return 1;
	lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
	return 1;
}

/*
 * Under lua_pcall, after the rebind: block the configuration functions,
 * make the dq/dh metatables and objects. Returns the three values that stay
 * at the bottom of the stack (SLOT_FNS, SLOT_DQ, SLOT_MSGH).
 */
static int
setup_rules_cb(lua_State *L)
{
	struct dq_box *b;
	struct dh_box *h;

	lua_pushglobaltable(L);
	lua_pushnil(L);
	while (lua_next(L, -2) != 0) {
		/* replacing an existing field during lua_next is allowed */
		if (lua_type(L, -2) == LUA_TSTRING && lua_iscfunction(L, -1) &&
		    !allowed(lua_tostring(L, -2))) {
			lua_pushvalue(L, -2);
			lua_pushvalue(L, -1);
			lua_pushcclosure(L, l_blocked, 1);
			lua_rawset(L, -5);
		}
		lua_pop(L, 1);
	}
	lua_pop(L, 1);
	dlb_lua_compat_restrict(L);

	b = lua_newuserdatauv(L, sizeof(*b), 0);
	memset(b, 0, sizeof(*b));
	luaL_newmetatable(L, MT_DQ);
	lua_newtable(L);
	luaL_setfuncs(L, dq_methods, 0);
	h = lua_newuserdatauv(L, sizeof(*h), 0);
	h->box = b;
	luaL_newmetatable(L, MT_DH);
	lua_newtable(L);
	luaL_setfuncs(L, dh_methods, 0);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, l_dh_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pushliteral(L, MT_DH);
	lua_setfield(L, -2, "__metatable");
	lua_setmetatable(L, -2);
	lua_pushcclosure(L, l_dq_index, 2);	/* methods, dh */
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, l_dq_newindex);
	lua_setfield(L, -2, "__newindex");
	lua_pushcfunction(L, l_dq_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pushliteral(L, MT_DQ);
	lua_setfield(L, -2, "__metatable");
	lua_setmetatable(L, -2);

	push_registry_table(L, &fns_key);
	lua_insert(L, -2);			/* fns, dq */
	lua_pushcfunction(L, l_msgh);
	return 3;
}

/* Copy the "file:line" of every numbered function into lw->srcs. */
static int
copy_srcs(struct dlb_lua_worker *lw)
{
	lua_State *L = lw->L;
	int n;

	push_registry_table(L, &srcs_key);
	n = (int)lua_rawlen(L, -1);
	lw->srcs = calloc((size_t)n + 1, sizeof(*lw->srcs));
	if (lw->srcs == NULL) {
		lua_pop(L, 1);
		return -1;
	}
	for (int i = 1; i <= n; i++) {
		lua_rawgeti(L, -1, i);
		snprintf(lw->srcs[i], sizeof(lw->srcs[i]), "%s",
			 lua_isstring(L, -1) ? lua_tostring(L, -1) : "");
		lua_pop(L, 1);
	}
	lua_pop(L, 1);
	lw->nfns = n;
	return 0;
}

struct dlb_lua_worker *
dlb_luaw_new(const struct dlb_lua_conf *lc, const struct dlb_config *cfg, int id, char *err,
	     size_t errlen)
{
	struct dlb_lua_worker *lw = calloc(1, sizeof(*lw));
	struct dlb_config *scratch = NULL;
	char msg[512] = "";

	if (lw == NULL)
		goto out_nomem;
	lw->id = id;
	dlb_lua_conf_limits(lc, &lw->mem.limit, &lw->insn_limit);
	scratch = dlb_config_new();
	if (scratch == NULL)
		goto out_nomem;
	lw->lc = dlb_lua_conf_new_alloc(scratch, DLB_LUA_PHASE_WORKER, counting_alloc, &lw->mem);
	if (lw->lc == NULL) {
		snprintf(msg, sizeof(msg), "cannot create the Lua state (out of memory, or "
			 "setLuaMemoryLimit(%zu) too small)", lw->mem.limit);
		goto out_free;
	}
	lw->L = dlb_lua_conf_state(lw->lc);
	*(struct dlb_lua_worker **)lua_getextraspace(lw->L) = lw;

	if (dlb_lua_conf_replay(lc, lw->lc, msg, sizeof(msg)) != 0)
		goto out_free;
	/* Thread: the state reads @cfg from then on; only atomics are written (docs/lua.md). */
	if (dlb_lua_conf_rebind(lw->lc, (struct dlb_config *)(uintptr_t)cfg, msg,
				sizeof(msg)) != 0)
		goto out_free;
	dlb_config_free(scratch);	/* nothing of the state points into it now */
	scratch = NULL;

	lua_settop(lw->L, 0);
	lua_pushcfunction(lw->L, setup_rules_cb);
	if (lua_pcall(lw->L, 0, 3, 0) != LUA_OK) {
		snprintf(msg, sizeof(msg), "%s", lua_tostring(lw->L, -1));
		goto out_free;
	}
	lw->box = lua_touserdata(lw->L, SLOT_DQ);
	if (copy_srcs(lw) != 0)
		goto out_nomem;
	lua_gc(lw->L, LUA_GCCOLLECT);
	lw->gc_mark = lw->mem.used;
	return lw;

out_nomem:
	snprintf(msg, sizeof(msg), "out of memory");
out_free:
	if (strstr(msg, "not enough memory") != NULL && lw != NULL)
		snprintf(err, errlen, "Lua state of worker %d: %s (setLuaMemoryLimit is %zu bytes)",
			 id, msg, lw->mem.limit);
	else
		snprintf(err, errlen, "Lua state of worker %d: %s", id, msg);
	dlb_luaw_free(lw);
	dlb_config_free(scratch);
	return NULL;
}

void
dlb_luaw_free(struct dlb_lua_worker *lw)
{
	if (lw == NULL)
		return;
	dlb_lua_conf_free(lw->lc);
	free(lw->srcs);
	free(lw);
}

/* ---- calling ------------------------------------------------------------------------ */

static void
log_error(struct dlb_lua_worker *lw, const char *what, const char *src, const char *msg)
{
	if (dlb_log_ratelimit_ok(&lw->last_err_log))
		dlb_warn("%s (%s) failed on worker %d: %s", what, src, lw->id, msg);
}

/* A signature of a pool's membership: the cached Server objects are still right if it matches. */
static lua_Integer
pool_signature(const struct dlb_pool_state *ps)
{
	uint64_t h = DLB_FNV1A64_INIT ^ (uint64_t)ps->n;

	h = dlb_fnv1a64(ps->members, (size_t)ps->n * sizeof(ps->members[0]), h);
	return (lua_Integer)(h >> 1);
}

/* What a policy call gets: the pool (the cache key) and its members in the dq's snapshot. */
struct policy_pool {
	const struct dlb_pool *pool;
	const struct dlb_pool_state *ps;
};

/*
 * Push a fresh table of Server objects of @pool's members (in order): the
 * objects are made once per pool (again when its membership changed) and
 * kept in the registry, the table is new for every call, so a policy that
 * changes it changes nothing for the next query. Allocates: call it
 * protected.
 */
static void
push_pool_servers(lua_State *L, const struct policy_pool *pp)
{
	static const char key = 'p', sig_key = 's';
	const struct dlb_pool *pool = pp->pool;
	const struct dlb_pool_state *ps = pp->ps;
	lua_Integer sig = pool_signature(ps);
	bool cached = false;

	push_registry_table(L, &sig_key);
	push_registry_table(L, &key);			/* sigs, cache */
	lua_rawgetp(L, -2, pool);			/* sigs, cache, sig? */
	if (lua_type(L, -1) == LUA_TNUMBER && lua_tointeger(L, -1) == sig) {
		lua_pop(L, 1);
		cached = lua_rawgetp(L, -1, pool) == LUA_TTABLE;
		if (!cached)
			lua_pop(L, 1);
	} else {
		lua_pop(L, 1);
	}
	if (!cached) {
		lua_createtable(L, ps->n, 0);
		for (int i = 0; i < ps->n; i++) {
			dlb_lua_push_server(L, ps->members[i]);
			lua_rawseti(L, -2, i + 1);
		}
		lua_pushvalue(L, -1);
		lua_rawsetp(L, -3, pool);		/* cache[pool] = t */
		lua_pushinteger(L, sig);
		lua_rawsetp(L, -4, pool);		/* sigs[pool] = sig */
	}
	/* stack: sigs, cache, cached table */
	lua_createtable(L, ps->n, 0);
	for (int i = 1; i <= ps->n; i++) {
		lua_rawgeti(L, -2, i);
		lua_rawseti(L, -2, i);
	}
	lua_replace(L, -4);
	lua_pop(L, 2);
}

/* (fns table, runtime_fn) -> fns[n] = the loaded function. */
static int
load_fn_protected(lua_State *L)
{
	const struct runtime_fn *f = lua_touserdata(L, 2);

	if (luaL_loadbufferx(L, f->code, f->len, f->src, "b") != LUA_OK)
		return lua_error(L);
	lua_rawseti(L, 1, f->n);
	return 0;
}

/*
 * Function @fn was numbered after this state was built (created from the
 * console): load its bytecode into SLOT_FNS[@fn]. Its only upvalue, if any,
 * is _ENV, which lua_load sets to this state's globals. @return 0 (loaded,
 * or no such function: the caller reports it), -1 on a load error (logged).
 */
static int
load_runtime_fn(struct dlb_lua_worker *lw, int fn)
{
	lua_State *L = lw->L;
	const struct runtime_fn *f = find_runtime_fn(dlb_lua_conf_origin(lw->lc), fn);
	int st;

	if (f == NULL)
		return 0;
	if (fn > lw->nfns) {
		char (*ns)[SRC_MAX] = realloc(lw->srcs, ((size_t)fn + 1) * sizeof(*ns));

		if (ns == NULL)
			return -1;
		for (int i = lw->nfns + 1; i <= fn; i++)
			ns[i][0] = '\0';
		lw->srcs = ns;
		lw->nfns = fn;
	}
	/* protected: loading and storing allocate, under the state's memory cap */
	lua_pushcfunction(L, load_fn_protected);
	lua_pushvalue(L, SLOT_FNS);
	lua_pushlightuserdata(L, (void *)(uintptr_t)f);
	st = lua_pcall(L, 2, 0, 0);
	if (st != LUA_OK) {
		log_error(lw, "Lua function", f->src,
			  lua_isstring(L, -1) ? lua_tostring(L, -1) : "cannot load it");
		lua_pop(L, 1);
		return -1;
	}
	snprintf(lw->srcs[fn], sizeof(lw->srcs[fn]), "%s", f->src);
	return 0;
}

/* Protected trampoline of a policy call: (function, pool, dq) -> function(servers, dq). */
static int
policy_call(lua_State *L)
{
	const struct policy_pool *pp = lua_touserdata(L, 2);

	lua_pushvalue(L, 1);
	push_pool_servers(L, pp);
	lua_pushvalue(L, 3);
	lua_call(L, 2, 1);
	return 1;
}

/*
 * Push function @fn and call it with the dq for @dq (preceded by the
 * servers of @pool when not NULL: a policy); its @nres results are left on
 * the stack. @return 0, or -1 (logged; the stack back at SLOT__TOP).
 */
static int
call_fn_pool(struct dlb_lua_worker *lw, const char *what, int fn, const char *src,
	     struct dlb_dq *dq, bool response, const struct dlb_pool *pool, int nres)
{
	lua_State *L = lw->L;
	struct dlb_pool_state tmp;
	struct policy_pool pp = { pool, NULL };
	int st, nargs = 1;

	if ((fn > lw->nfns || (fn >= 1 && lw->srcs[fn][0] == '\0')) &&
	    load_runtime_fn(lw, fn) != 0)
		return -1;
	if (fn < 1 || fn > lw->nfns || (src != NULL && strcmp(lw->srcs[fn], src) != 0)) {
		if (!lw->mismatch_logged) {
			lw->mismatch_logged = true;
			dlb_err("%s (%s) is function %d of the config state, but worker %d's state "
				"has %s: the configuration did not evaluate the same way twice "
				"(it must be deterministic); the rule fails", what,
				src != NULL ? src : "?", fn, lw->id,
				fn >= 1 && fn <= lw->nfns ? lw->srcs[fn] : "no such function");
		}
		return -1;
	}
	if (pool != NULL) {
		/* the servers table is built inside the protected call (it allocates) */
		lua_pushcfunction(L, policy_call);
		lua_rawgeti(L, SLOT_FNS, fn);
		pp.ps = dlb_pool_state(dq->snap, pool, &tmp);
		lua_pushlightuserdata(L, &pp);
		nargs = 3;
	} else {
		lua_rawgeti(L, SLOT_FNS, fn);
	}
	lua_pushvalue(L, SLOT_DQ);
	lw->box->dq = dq;
	lw->box->response = response;
	lw->box->pool_named = false;
	lw->box->result_set = false;
	arm(lw);
	st = lua_pcall(L, nargs, nres, SLOT_MSGH);
	lw->box->dq = NULL;
	/*
	 * A GC step when the state grew: Lua's own collector follows the
	 * allocations anyway, and a step when nothing was allocated would cost
	 * more than a small rule (a 16 us step every 64 calls: 250 ns a call).
	 */
	if (++lw->calls % GC_EVERY == 0 && lw->mem.used > lw->gc_mark + GC_SLACK) {
		lua_gc(L, LUA_GCSTEP, 0);	/* finalizers run under the hook too */
		lw->gc_mark = lw->mem.used;
	}
	disarm(lw);
	if (st != LUA_OK) {
		log_error(lw, what, lw->srcs[fn], lw->killed ? "instruction limit exceeded" :
			  lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "error");
		lua_settop(L, SLOT__TOP);
		return -1;
	}
	return 0;
}

/*
 * Push function @fn and call it with the dq for @dq; its @nres results are
 * left on the stack. @return 0, or -1 (logged; the stack back at SLOT__TOP).
 */
static int
call_fn(struct dlb_lua_worker *lw, const char *what, int fn, const char *src, struct dlb_dq *dq,
	bool response, int nres)
{
	return call_fn_pool(lw, what, fn, src, dq, response, NULL, nres);
}

int
dlb_luaw_rule(struct dlb_lua_worker *lw, int fn, const char *src, struct dlb_dq *dq)
{
	int match;

	if (lw == NULL || call_fn(lw, "LuaRule", fn, src, dq, dq->response, 1) != 0)
		return -1;
	match = lua_toboolean(lw->L, -1);
	lua_settop(lw->L, SLOT__TOP);
	return match ? 1 : 0;
}

int
dlb_luaw_qcount_filter(struct dlb_lua_worker *lw, int fn, struct dlb_dq *dq, char *out,
		       size_t outsz, size_t *outlen)
{
	const char *what = "setQueryCountFilter";
	lua_State *L;
	const char *s;
	char num[64];
	size_t len;
	int count;

	*outlen = 0;
	if (lw == NULL || call_fn(lw, what, fn, NULL, dq, false, 2) != 0)
		return -1;
	/* outside lua_pcall: nothing that allocates (see dlb_luaw_action) */
	L = lw->L;
	if (lua_type(L, -2) != LUA_TBOOLEAN ||
	    (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER)) {
		log_error(lw, what, lw->srcs[fn], "must return a boolean and a string");
		lua_settop(L, SLOT__TOP);
		return -1;
	}
	count = lua_toboolean(L, -2);
	if (lua_type(L, -1) == LUA_TSTRING) {
		s = lua_tolstring(L, -1, &len);
	} else {
		/* LuaJIT's number format ("5", not Lua 5.4's "5.0") */
		if (lua_isinteger(L, -1))
			len = (size_t)snprintf(num, sizeof(num), "%lld",
					       (long long)lua_tointeger(L, -1));
		else
			len = (size_t)snprintf(num, sizeof(num), "%.14g", (double)lua_tonumber(L, -1));
		s = num;
	}
	if (len >= outsz) {
		/* too long to keep: not counted (docs/configuration.md) */
		lua_settop(L, SLOT__TOP);
		return 0;
	}
	memcpy(out, s, len);
	out[len] = '\0';
	*outlen = len;
	lua_settop(L, SLOT__TOP);
	return count;
}

int
dlb_luaw_action(struct dlb_lua_worker *lw, int fn, const char *src, struct dlb_dq *dq,
		bool response, char *arg, size_t argsz, size_t *arglen)
{
	const char *what = response ? "LuaResponseAction" : "LuaAction";
	lua_Integer action, max = response ? DLB_DRA_NONE : DLB_DA_SET_TAG;
	char num[64];
	const char *s = NULL;
	size_t len = 0;
	lua_State *L;
	int isnum = 0;

	if (argsz > 0)
		arg[0] = '\0';
	*arglen = 0;
	if (lw == NULL || call_fn(lw, what, fn, src, dq, response, 2) != 0)
		return -1;
	/*
	 * Outside lua_pcall from here: nothing that allocates in the state (it
	 * may be at its memory limit, and an error here would be a panic).
	 */
	L = lw->L;
	if (lua_isnil(L, -2)) {
		/* a bare `return` (or nil) is None (dnsdist 1.7 would fail it) */
		action = response ? DLB_DRA_NONE : DLB_DA_NONE;
	} else {
		action = lua_tointegerx(L, -2, &isnum);
		if (!isnum || action < 0 || action > max) {
			char msg[128];

			if (lua_type(L, -2) == LUA_TNUMBER)
				snprintf(msg, sizeof(msg), "returned %.14g, not a %s value",
					 (double)lua_tonumber(L, -2), response ?
					 "DNSResponseAction" : "DNSAction");
			else
				snprintf(msg, sizeof(msg), "returned a %s, not a %s value",
					 luaL_typename(L, -2), response ? "DNSResponseAction" :
					 "DNSAction");
			log_error(lw, what, lw->srcs[fn], msg);
			lua_settop(L, SLOT__TOP);
			return -1;
		}
	}
	if (lua_type(L, -1) == LUA_TSTRING) {
		s = lua_tolstring(L, -1, &len);
	} else if (lua_isinteger(L, -1)) {
		/* Delay, 100: a number where dnsdist wants "100" */
		len = (size_t)snprintf(num, sizeof(num), "%lld", (long long)lua_tointeger(L, -1));
		s = num;
	} else if (lua_type(L, -1) == LUA_TNUMBER) {
		len = (size_t)snprintf(num, sizeof(num), "%.14g", (double)lua_tonumber(L, -1));
		s = num;
	} else if (!lua_isnil(L, -1)) {
		log_error(lw, what, lw->srcs[fn], "its second value must be a string");
		lua_settop(L, SLOT__TOP);
		return -1;
	} else if (lw->box->result_set) {
		/* a LuaFFIAction gives its string through dnsdist_ffi_dnsquestion_set_result */
		s = lw->box->result;
		len = lw->box->result_len;
	}
	if (s != NULL && argsz > 0) {
		size_t n = len < argsz - 1 ? len : argsz - 1;

		memcpy(arg, s, n);
		arg[n] = '\0';
		*arglen = n;
	}
	lua_settop(L, SLOT__TOP);
	return (int)action;
}

int
dlb_luaw_policy(struct dlb_lua_worker *lw, int fn, const char *src, const struct dlb_pool *pool,
		struct dlb_dq *dq)
{
	struct dlb_pool_state tmp;
	const struct dlb_pool_state *ps = dlb_pool_state(dq->snap, pool, &tmp);
	lua_State *L;
	struct dlb_backend *be;
	int idx = -1;
	bool ffi = false;

	if (lw == NULL || call_fn_pool(lw, "Lua policy", fn, src, dq, false, pool, 1) != 0)
		return -1;
	L = lw->L;
	/* an FFI policy (setServerPolicyLuaFFI) returns a 0-based index; few policies */
	if (dq->set != NULL) {
		int np = dq->set->nlua_policies;

		for (int k = 0; k < np; k++)
			if (dq->set->lua_policies[k].fn == fn)
				ffi = dq->set->lua_policies[k].ffi;
	}
	if (ffi) {
		int isnum = 0;
		lua_Integer i = lua_tointegerx(L, -1, &isnum);

		if (!isnum || i < 0 || i >= ps->n) {
			log_error(lw, "Lua FFI policy", lw->srcs[fn], "it must return the 0-based "
				  "index of a server of the list");
			lua_settop(L, SLOT__TOP);
			return -1;
		}
		idx = ps->members[i]->index;
	} else if (lua_isinteger(L, -1)) {
		lua_Integer i = lua_tointeger(L, -1);

		if (i >= 1 && i <= ps->n)
			idx = ps->members[i - 1]->index;
	} else if ((be = dlb_lua_to_server(L, -1)) != NULL) {
		/* only a server of this pool: a stale object of another one is "none" */
		for (int i = 0; i < ps->n; i++)
			if (ps->members[i] == be)
				idx = be->index;
	} else if (!lua_isnil(L, -1)) {
		log_error(lw, "Lua policy", lw->srcs[fn], "it must return a Server, a position or nil");
		lua_settop(L, SLOT__TOP);
		return -1;
	}
	lua_settop(L, SLOT__TOP);
	return idx >= 0 ? idx : -2;
}
