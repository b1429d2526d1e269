/*
 * globals_lua.c - dnsdist 1.7.3's small console globals: getBind(),
 * getBindCount() and their ClientState objects, show(), help(),
 * showSecurityStatus(), shutdown() and the query counters
 * (setQueryCount, setQueryCountFilter, getQueryCounters,
 * clearQueryCounters; dnslb/core/qcount.h) and statNodeRespRing().
 *
 * Texts and numbering follow dnsdist 1.7.3 as observed with its console:
 * each frontend counts twice, UDP (2i) then TCP (2i+1), as showBinds()
 * numbers them, and a ClientState prints as its address. While the
 * configuration is evaluated, the frontends are those declared so far (0
 * before the first setLocal/addLocal, as in dnsdist, whose default
 * listener comes after the configuration); at runtime, the running ones.
 *
 * Thread: main (config state); in a worker state the functions exist too
 * (shutdown() from a rule stops the daemon as SIGTERM does).
 */
#include "lua/globals_lua.h"

#include <lauxlib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "dnslb/core/config.h"
#include "dnslb/control/console.h"
#include "dnslb/core/daemon.h"
#include "dnslb/core/ipcipher.h"
#include "dnslb/core/qcount.h"
#include "dnslb/pipeline/rings.h"
#include "dnslb/core/wire.h"
#include "lua/args.h"
#include "lua/conf.h"
#include "lua/worker.h"
#include "rules/rules.h"

#define MT_BIND		"ClientState"

struct lbind {
	char text[64];		/* the frontend's address, as showBinds() prints it */
	int index;		/* showBinds() number */
	bool tls;		/* a DNS over TLS bind */
};

/* The frontends getBind() sees: the config being evaluated, or the running one. */
static const struct dlb_config *
binds_cfg(lua_State *L)
{
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);

	if (lc != NULL) {
		enum dlb_lua_phase p = dlb_lua_conf_phase(lc);

		if (p == DLB_LUA_PHASE_CONFIG || p == DLB_LUA_PHASE_CHECK ||
		    p == DLB_LUA_PHASE_WORKER || p == DLB_LUA_PHASE_RELOAD)
			return dlb_lua_conf_cfg(lc);
	}
	return dlb_daemon.cfg;
}

static int
nbinds(lua_State *L)
{
	const struct dlb_config *cfg = binds_cfg(L);

	return cfg != NULL ? dlb_config_nbinds(cfg) : 0;
}

static int
l_get_bind_count(lua_State *L)
{
	lua_pushinteger(L, nbinds(L));
	return 1;
}

/* getBind(n): the ClientState at showBinds() number n, or nil. */
static int
l_get_bind(lua_State *L)
{
	lua_Integer n = dlb_lua_arg_int(L, 1, "getBind", 0, LUA_MAXINTEGER);
	const struct dlb_config *cfg = binds_cfg(L);
	struct lbind *b;
	bool tcp;
	int fe = cfg != NULL && n < INT_MAX ? dlb_config_bind(cfg, (int)n, &tcp) : -1;

	if (fe < 0) {
		lua_pushnil(L);
		return 1;
	}
	b = lua_newuserdatauv(L, sizeof(*b), 0);
	snprintf(b->text, sizeof(b->text), "%s", cfg->frontends[fe].text);
	b->index = (int)n;
	b->tls = cfg->frontends[fe].tls != NULL;
	luaL_setmetatable(L, MT_BIND);
	return 1;
}

static int
l_bind_tostring(lua_State *L)
{
	struct lbind *b = luaL_checkudata(L, 1, MT_BIND);

	lua_pushstring(L, b->text);
	return 1;
}

/* "openssl" for a DNS over TLS bind; "" for a plain one, as dnsdist. */
static int
l_bind_tls_provider(lua_State *L)
{
	struct lbind *b = luaL_checkudata(L, 1, MT_BIND);

	lua_pushstring(L, b->tls ? "openssl" : "");
	return 1;
}

/* No eBPF filter can be made (newBPFFilter is refused), so none is attached. */
static int
l_bind_attach_filter(lua_State *L)
{
	luaL_checkudata(L, 1, MT_BIND);
	return luaL_error(L, "attachFilter: eBPF filtering is not supported by dnslb");
}

static int
l_bind_detach_filter(lua_State *L)
{
	luaL_checkudata(L, 1, MT_BIND);
	return 0;
}

/* show(s): a line of console output, as dnsdist's (dropped while the configuration runs). */
static int
l_show(lua_State *L)
{
	if (lua_gettop(L) > 1)
		return luaL_error(L, "show: takes one argument");
	/* a number is converted, as dnsdist's string parameter converts it */
	if (lua_type(L, 1) == LUA_TNUMBER)
		dlb_lua_print(L, luaL_tolstring(L, 1, NULL));
	else
		dlb_lua_print(L, dlb_lua_arg_string(L, 1, "show"));
	return 0;
}

/* dnslb does no security polling: dnsdist's status stays 0 (unknown) without it. */
static int
l_show_security_status(lua_State *L)
{
	dlb_lua_print(L, "0");
	return 0;
}

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * help(): the global functions this state has, sorted, one a line.
 * dnsdist prints a fixed list with a line of help each; dnslb's reference
 * is in docs (configuration.md, rules-reference.md).
 */
static int
l_help(lua_State *L)
{
	const char **names;
	size_t n = 0, cap = 0;
	luaL_Buffer b;

	if (dlb_lua_silent(L))
		return 0;
	lua_pushglobaltable(L);
	lua_pushnil(L);
	while (lua_next(L, -2) != 0) {
		if (lua_type(L, -2) == LUA_TSTRING && lua_isfunction(L, -1))
			cap++;
		lua_pop(L, 1);
	}
	/* the strings stay alive: the global table holds them */
	names = lua_newuserdatauv(L, (cap > 0 ? cap : 1) * sizeof(*names), 0);
	lua_pushnil(L);
	while (lua_next(L, -3) != 0) {
		if (lua_type(L, -2) == LUA_TSTRING && lua_isfunction(L, -1) && n < cap)
			names[n++] = lua_tostring(L, -2);
		lua_pop(L, 1);
	}
	qsort(names, n, sizeof(*names), cmp_str);
	luaL_buffinit(L, &b);
	for (size_t i = 0; i < n; i++) {
		if (i > 0)
			luaL_addchar(&b, '\n');
		luaL_addstring(&b, names[i]);
		luaL_addstring(&b, "()");
	}
	luaL_pushresult(&b);
	dlb_lua_print(L, lua_tostring(L, -1));
	return 0;
}

/*
 * shutdown(): while the configuration is read, exit at once with status 0
 * (dnsdist's _exit(0), nothing flushed); once running, stop as SIGTERM does (the loop ends,
 * STOPPING=1 is notified, the workers are joined). A worker state replaying
 * the configuration does nothing: the config state already exited.
 */
static int
l_shutdown(lua_State *L)
{
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);
	enum dlb_lua_phase p = lc != NULL ? dlb_lua_conf_phase(lc) : DLB_LUA_PHASE_RUNNING;

	if (lua_gettop(L) > 0)
		return luaL_error(L, "shutdown: takes no argument");
	switch (p) {
	case DLB_LUA_PHASE_CONFIG:
	case DLB_LUA_PHASE_CHECK:
		/* as dnsdist: what stdio still buffers is lost (a pipe keeps print()s) */
		_exit(0);
	case DLB_LUA_PHASE_WORKER:
		return 0;
	case DLB_LUA_PHASE_RUNNING:
		/* the client sees the connection close, as with dnsdist's _exit() */
		dlb_console_drop_reply();
		kill(getpid(), SIGTERM);
		return 0;
	default:
		kill(getpid(), SIGTERM);
		return 0;
	}
}

/* ---- query counting ------------------------------------------------------- */

/* registry key: a reload's setQueryCountFilter function, published at adoption */
static const char qcount_pending_key = 'c';

/* Does this state's call set the process-wide settings? */
static bool
qcount_publishes(lua_State *L, enum dlb_lua_phase *phase)
{
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);

	*phase = lc != NULL ? dlb_lua_conf_phase(lc) : DLB_LUA_PHASE_WORKER;
	return *phase == DLB_LUA_PHASE_CONFIG || *phase == DLB_LUA_PHASE_RUNNING ||
	       *phase == DLB_LUA_PHASE_RELOAD;
}

static int
l_set_query_count(lua_State *L)
{
	bool on = dlb_lua_arg_bool(L, 1, "setQueryCount");
	enum dlb_lua_phase p;

	if (qcount_publishes(L, &p))
		dlb_qcount_set(on);
	return 0;
}

/*
 * setQueryCountFilter(f): f(dq) returns (count, name). The function is
 * numbered in every state (as a LuaRule's), so the workers run their own
 * copy; it applies to the rules generation it was set for.
 */
static int
l_set_query_count_filter(lua_State *L)
{
	char src[96];
	enum dlb_lua_phase p;
	int fn;

	dlb_lua_arg_function(L, 1, "setQueryCountFilter");
	fn = dlb_lua_register_fn(L, 1, src, sizeof(src));
	if (!qcount_publishes(L, &p))
		return 0;
	if (p == DLB_LUA_PHASE_RELOAD) {
		/* the workers get this state's functions once the reload is adopted */
		lua_pushinteger(L, fn);
		lua_rawsetp(L, LUA_REGISTRYINDEX, &qcount_pending_key);
		return 0;
	}
	dlb_qcount_set_filter(dlb_rules_current()->gen, fn);
	return 0;
}

void
dlb_lua_globals_adopt(lua_State *L)
{
	lua_Integer fn;

	lua_rawgetp(L, LUA_REGISTRYINDEX, &qcount_pending_key);
	fn = lua_tointeger(L, -1);
	lua_pop(L, 1);
	/* the reload's rules and Lua states come next, one generation up */
	dlb_qcount_set_filter(dlb_rules_current()->gen + 1, (int)fn);
}

/* getQueryCounters([max=10]): dnsdist's text; the names sorted by count. */
static int
l_get_query_counters(lua_State *L)
{
	lua_Integer max = dlb_lua_opt_arg_int(L, 1, "getQueryCounters", 0, UINT32_MAX, 10);
	struct dlb_qcount_rec *v;
	char *buf, *text;
	size_t n, cap, len;

	if (dlb_lua_silent(L))
		return 0;
	if (dlb_qcount_snapshot(&v, &n, &buf) != 0)
		return luaL_error(L, "getQueryCounters: out of memory");
	/* the text in C, so that no Lua error can leak the snapshot */
	cap = 128;
	for (size_t i = 0; i < n && i < (size_t)max; i++)
		cap += v[i].len + 64;
	text = malloc(cap);
	if (text != NULL) {
		len = (size_t)snprintf(text, cap,
				       "query counting is currently: %s (%zu records in buffer)",
				       dlb_qcount_enabled() ? "enabled" : "disabled", n);
		for (size_t i = 0; i < n && i < (size_t)max; i++)
			len += (size_t)snprintf(text + len, cap - len, "\n%-3zu %.*s: %llu request(s)",
						i + 1, (int)v[i].len, v[i].name,
						(unsigned long long)v[i].count);
	}
	free(v);
	free(buf);
	if (text == NULL)
		return luaL_error(L, "getQueryCounters: out of memory");
	lua_pushstring(L, text);
	free(text);
	dlb_lua_print(L, lua_tostring(L, -1));
	return 0;
}

static int
l_clear_query_counters(lua_State *L)
{
	char line[96];
	enum dlb_lua_phase p;

	if (!qcount_publishes(L, &p))
		return 0;
	snprintf(line, sizeof(line), "%zu records cleared from query counter buffer",
		 dlb_qcount_clear());
	dlb_lua_print(L, line);
	return 0;
}

/* ---- statNodeRespRing ------------------------------------------------------ */

/*
 * dnsdist's StatNode over the response rings: a tree of names (a node per
 * suffix, children in case-insensitive label order), each answer counted
 * at its own name's node (a timeout as a drop), visited children first.
 */
struct sn_stat {
	uint64_t queries, noerrors, nxdomains, servfails, drops, bytes;
};

struct sn_node {
	uint32_t first_child, next;	/* indexes + 1; 0: none */
	uint32_t nchildren;
	uint16_t labels;
	uint8_t llen;
	uint8_t label[63];
	struct sn_stat self;
};

struct sn_tree {
	struct dlb_lua_box *box;	/* the nodes (node 0: the root) */
	int64_t now_us, cutoff_us;	/* cutoff 0: every entry */
	bool oom;
};

/* dnsdist's CIStringCompare: bytes, ASCII case folded. */
static int
label_cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
	for (size_t i = 0; i < alen && i < blen; i++) {
		int ca = a[i] >= 'A' && a[i] <= 'Z' ? a[i] + 32 : a[i];
		int cb = b[i] >= 'A' && b[i] <= 'Z' ? b[i] + 32 : b[i];

		if (ca != cb)
			return ca - cb;
	}
	return alen < blen ? -1 : alen > blen;
}

/* The child of node @parent labelled @label (made when missing); 0 on ENOMEM. */
static uint32_t
sn_child(struct sn_tree *t, uint32_t parent, const uint8_t *label, size_t llen, uint16_t labels)
{
	struct sn_node *v = t->box->p;
	uint32_t *link = &v[parent].first_child, k;

	while (*link != 0) {
		int c = label_cmp(v[*link - 1].label, v[*link - 1].llen, label, llen);

		if (c == 0)
			return *link - 1;
		if (c > 0)
			break;
		link = &v[*link - 1].next;
	}
	{
		/* @link points into the array, which may move: take it along */
		ptrdiff_t off = (char *)link - (char *)v;

		if (dlb_lua_box_push(t->box, sizeof(*v)) == NULL)
			return 0;
		v = t->box->p;
		link = (uint32_t *)(void *)((char *)v + off);
	}
	k = (uint32_t)t->box->n - 1;
	v[k].llen = (uint8_t)llen;
	memcpy(v[k].label, label, llen);
	v[k].labels = labels;
	v[k].next = *link;
	*link = k + 1;
	v[parent].nchildren++;
	return k;
}

static void
sn_visit_rec(const struct dlb_ring_rec *r, void *ud)
{
	struct sn_tree *t = ud;
	size_t offs[DLB_MAX_NAME / 2 + 1], nl = 0;
	uint32_t node = 0;
	struct sn_stat *st;
	uint16_t labels = 0;

	if (t->oom || r->when_us > t->now_us || (t->cutoff_us != 0 && r->when_us < t->cutoff_us))
		return;
	for (size_t off = 0; off < r->namelen && r->name[off] != 0 && nl < sizeof(offs) / sizeof(offs[0]);
	     off += (size_t)r->name[off] + 1) {
		if (off + 1 + r->name[off] > r->namelen)
			return;
		offs[nl++] = off;
	}
	if (nl == 0)
		return;	/* the root: dnsdist's submit ignores it */
	for (size_t k = nl; k-- > 0;) {
		node = sn_child(t, node, r->name + offs[k] + 1, r->name[offs[k]], ++labels);
		if (node == 0) {
			t->oom = true;
			return;
		}
	}
	st = &((struct sn_node *)t->box->p)[node].self;
	st->queries++;
	if (r->usec == DLB_RING_TIMEOUT) {
		st->drops++;
		return;	/* a timeout: no answer, no bytes */
	}
	switch (DLB_RCODE(r->hflags)) {
	case 0:
		st->noerrors++;
		break;
	case 2:
		st->servfails++;
		break;
	case 3:
		st->nxdomains++;
		break;
	}
	st->bytes += r->size;
}

static void
push_sn_stat(lua_State *L, const struct sn_stat *s)
{
	lua_createtable(L, 0, 6);
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
}

static int
l_sn_num_children(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	lua_getfield(L, 1, "_numChildren");
	return 1;
}

/*
 * Visit node @k (its full name @full, @flen bytes) children first, calling
 * the visitor at stack index 1; add the subtree's counts to @total.
 */
static void
sn_visit(lua_State *L, struct sn_tree *t, uint32_t k, const char *full, size_t flen,
	 struct sn_stat *total)
{
	struct sn_stat sub = ((struct sn_node *)t->box->p)[k].self;
	char child[DLB_MAX_NAME + 2];

	for (uint32_t c = ((struct sn_node *)t->box->p)[k].first_child; c != 0;
	     c = ((struct sn_node *)t->box->p)[c - 1].next) {
		const struct sn_node *n = &((struct sn_node *)t->box->p)[c - 1];
		size_t clen = n->llen + 1 + flen;

		/* dnsdist's fullname: the raw labels, each followed by a dot */
		if (clen > sizeof(child))
			continue;
		memcpy(child, n->label, n->llen);
		child[n->llen] = '.';
		memcpy(child + n->llen + 1, full, flen);
		sn_visit(L, t, c - 1, child, clen, &sub);
	}
	total->queries += sub.queries;
	total->noerrors += sub.noerrors;
	total->nxdomains += sub.nxdomains;
	total->servfails += sub.servfails;
	total->drops += sub.drops;
	total->bytes += sub.bytes;
	{
		const struct sn_node *n = &((struct sn_node *)t->box->p)[k];

		lua_pushvalue(L, 1);
		lua_createtable(L, 0, 4);
		lua_pushlstring(L, full, flen);
		lua_setfield(L, -2, "fullname");
		lua_pushinteger(L, n->labels);
		lua_setfield(L, -2, "labelsCount");
		lua_pushinteger(L, n->nchildren);
		lua_setfield(L, -2, "_numChildren");
		lua_pushcfunction(L, l_sn_num_children);
		lua_setfield(L, -2, "numChildren");
		push_sn_stat(L, &n->self);
		push_sn_stat(L, &sub);
	}
	lua_call(L, 3, 0);
}

/* statNodeRespRing(visitor[, seconds]): the visitor gets (node, self, children). */
static int
l_stat_node_resp_ring(lua_State *L)
{
	lua_Integer secs = dlb_lua_opt_arg_int(L, 2, "statNodeRespRing", 0, UINT32_MAX, 0);
	struct sn_tree t = { 0 };
	struct sn_stat total = { 0 };
	struct timeval tv;

	dlb_lua_arg_function(L, 1, "statNodeRespRing");
	lua_settop(L, 2);
	gettimeofday(&tv, NULL);
	t.now_us = (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
	t.cutoff_us = secs > 0 ? t.now_us - (int64_t)secs * 1000000 : 0;
	t.box = dlb_lua_box_new(L);	/* index 3: frees the tree if the visitor raises */
	if (dlb_lua_box_push(t.box, sizeof(struct sn_node)) == NULL)	/* the root */
		return luaL_error(L, "statNodeRespRing: out of memory");
	dlb_rings_visit_all(true, sn_visit_rec, &t);
	if (t.oom)
		return luaL_error(L, "statNodeRespRing: out of memory");
	sn_visit(L, &t, 0, "", 0, &total);
	dlb_lua_box_free(t.box);
	return 0;
}

/* makeIPCipherKey(password): the 16-byte key for ComboAddress:ipencrypt/ipdecrypt. */
static int
l_make_ipcipher_key(lua_State *L)
{
	size_t len;
	const char *pw = luaL_checklstring(L, 1, &len);
	uint8_t key[DLB_IPCIPHER_KEY];

	dlb_ipcipher_key(pw, len, key);
	lua_pushlstring(L, (const char *)key, sizeof(key));
	return 1;
}

void
dlb_lua_globals_register(lua_State *L)
{
	static const luaL_Reg bind_methods[] = {
		{ "toString", l_bind_tostring },
		{ "getEffectiveTLSProvider", l_bind_tls_provider },
		{ "attachFilter", l_bind_attach_filter },
		{ "detachFilter", l_bind_detach_filter },
		{ NULL, NULL },
	};
	static const luaL_Reg funcs[] = {
		{ "getBind", l_get_bind },
		{ "getBindCount", l_get_bind_count },
		{ "show", l_show },
		{ "showSecurityStatus", l_show_security_status },
		{ "help", l_help },
		{ "shutdown", l_shutdown },
		{ "setQueryCount", l_set_query_count },
		{ "setQueryCountFilter", l_set_query_count_filter },
		{ "getQueryCounters", l_get_query_counters },
		{ "clearQueryCounters", l_clear_query_counters },
		{ "statNodeRespRing", l_stat_node_resp_ring },
		{ "makeIPCipherKey", l_make_ipcipher_key },
		{ NULL, NULL },
	};

	luaL_newmetatable(L, MT_BIND);
	lua_newtable(L);
	luaL_setfuncs(L, bind_methods, 0);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, l_bind_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pop(L, 1);
	lua_pushglobaltable(L);
	luaL_setfuncs(L, funcs, 0);
	lua_pop(L, 1);
}
