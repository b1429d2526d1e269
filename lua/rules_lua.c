/*
 * rules_lua.c - the Lua side of the rule engine: every selector, query
 * action and response action constructor, makeRule, and the functions that
 * edit and show the five rule chains (addAction, showRules, rmRule, mvRule,
 * setRules, ... and their response, cache-hit, self-answered and
 * cache-inserted variants).
 *
 * One catalog, catalog[] below, lists every constructor: its Lua name, its
 * kind, the C function, the argument signature as users read it and a
 * one-line doc. dlb_lua_rules_register() registers it as globals and
 * dlb_lua_rules_write_reference() turns it into docs/rules-reference.md (a
 * ctest regenerates the file and compares, so the docs cannot drift). A new
 * selector is one catalog line plus one l_<name>() function. The chain
 * functions come from chains[] (names per chain) and mgmt_docs[] (their
 * signatures and docs), documented the same way.
 *
 * Texts follow dnsdist 1.7.3 as observed with its console: a selector's
 * description (showRules' "Rule" column, DNSRule:toString()), an action's
 * ("Action" column), the showRules/topRules layout, rmRule/mvRule's printed
 * "Error: ..." lines and the chain/action mismatch errors. Selectors and
 * actions added after 1.7 use the texts of the dnsdist version that added
 * them.
 *
 * Objects: a DNSRule userdata holds one reference on a struct dlb_sel, a
 * DNSAction/DNSResponseAction one on a struct dlb_act, a DNSDistRuleAction
 * (newRuleAction, getTopRules) one on a struct dlb_rule; __gc drops it.
 * Constructors check their arguments, then push the userdata first and build
 * the C object inside it, so a Lua error (a longjmp) at any later point
 * leaves nothing behind: __gc frees whatever was built. Selectors and
 * actions are immutable once returned; sets and netmask groups given as
 * objects are copied (dnsdist copies them too).
 *
 * Chains are edited copy-on-write: the functions build a new pointer array
 * from dlb_rules_chain() and publish it with dlb_rules_publish(); at
 * runtime (DLB_LUA_PHASE_RUNNING) the old chain is retired through the
 * config state's RCU record. In DLB_LUA_PHASE_WORKER (a worker state
 * replaying the config) the functions check their arguments and build the
 * objects, so LuaRule/LuaAction functions get the same numbers as in the
 * config state, but publish, print and log nothing.
 *
 * Errors are raised with luaL_error, so users read
 * "dnslb.conf:12: QTypeRule: unknown type 'AAA'".
 *
 * Thread: main (config state), or the thread building a worker state.
 */
#include "lua/rules_lua.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <lauxlib.h>
#include <limits.h>
#include <lua.h>
#include <math.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "dnslb/core/buf.h"
#include "dnslb/core/config.h"
#include "dnslb/core/daemon.h"
#include "dnslb/core/dnslb.h"
#include "dnslb/store/kvstore.h"
#include "dnslb/core/log.h"
#include "dnslb/core/netmask.h"
#include "dnslb/core/util.h"
#include "dnslb/core/wire.h"
#include "lua/args.h"
#include "lua/conf.h"
#include "lua/kvstore_lua.h"
#include "lua/objects.h"
#include "lua/worker.h"
#include "rules/rules.h"
#include "rules/tee.h"

/* userdata type names, as dnsdist names them */
#define MT_SEL		"DNSRule"
#define MT_ACT		"DNSAction"
#define MT_RACT		"DNSResponseAction"
#define MT_RULE		"DNSDistRuleAction"

/* longest list shown in a description ("qname in a., b., ..."); longer ones end in "..." */
#define DESC_LIST_MAX	4096

struct sel_box {
	struct dlb_sel *s;		/* one reference; NULL while being built */
};

struct act_box {
	struct dlb_act *a;
};

struct rule_box {
	struct dlb_rule *r;
};

/* ---- a small string builder (no Lua calls while one is open) ------------ */

struct sb {
	struct dlb_buf b;	/* unbounded (zeroed); the cut is ours */
	size_t limit;		/* 0: none; else stop at about this length, ending in "..." */
	bool cut;
};

static void
sb_add(struct sb *b, const char *s, size_t n)
{
	if (b->cut)
		return;
	if (b->limit != 0 && b->b.len + n > b->limit) {
		b->cut = true;
		s = "...";
		n = 3;
	}
	dlb_buf_append(&b->b, s, n);
}

static void
sb_puts(struct sb *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

static void sb_printf(struct sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
sb_printf(struct sb *b, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	sb_add(b, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

/* Hand the built string to *@dst (which must be NULL), or raise on ENOMEM. */
static void
sb_finish(lua_State *L, struct sb *b, char **dst)
{
	char *p;

	if (dlb_buf_failed(&b->b)) {
		dlb_buf_deinit(&b->b);
		luaL_error(L, "out of memory");
	}
	p = dlb_buf_take(&b->b, NULL);
	if (p == NULL)
		p = strdup("");
	if (p == NULL)
		luaL_error(L, "out of memory");
	*dst = p;
}

static void set_desc(lua_State *L, char **dst, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* A description into *@dst (replacing one already there). */
static void
set_desc(lua_State *L, char **dst, const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		luaL_error(L, "out of memory");
	free(*dst);
	*dst = s;
}

/* strdup that raises; the result must be stored where __gc frees it before anything else raises. */
static char *
dup_str(lua_State *L, const char *s)
{
	char *d = strdup(s);

	if (d == NULL)
		luaL_error(L, "out of memory");
	return d;
}

/*
 * A rate as dnsdist prints it: dnsdist keeps QPS values as integers, so
 * integral values print as integers; a fractional one (dnslb keeps it) with %g.
 */
static void
fmt_rate(double v, char *out, size_t outsz)
{
	if (v == floor(v) && v < 1e15)
		snprintf(out, outsz, "%.0f", v);
	else
		snprintf(out, outsz, "%g", v);
}

/* ---- DNS constants --------------------------------------------------------- */

static const char *const section_names[] = { "QD", "AN", "NS", "AR" };

/* ERCode::to_s */
static void
ercode_text(unsigned rcode, char *out, size_t outsz)
{
	const char *t = dlb_wire_rcode_text(rcode);

	if (t != NULL)
		snprintf(out, outsz, "%s", t);
	else
		snprintf(out, outsz, "Err#%u", rcode);
}

/* A qtype at @idx: a number (DNSQType.A), a mnemonic ("AAAA", any case) or "TYPEn". */
static uint16_t
check_qtype(lua_State *L, int idx, const char *fn)
{
	lua_Integer v = 0;
	int code = 0;

	if (lua_type(L, idx) == LUA_TNUMBER) {
		if (!dlb_lua_to_integer(L, idx, &v) || v < 0 || v > 65535)
			luaL_error(L, "%s: invalid type %s", fn, lua_tostring(L, idx));
		return (uint16_t)v;
	}
	if (lua_type(L, idx) != LUA_TSTRING)
		luaL_error(L, "%s: a type must be a number or a name, not %s", fn,
			   luaL_typename(L, idx));
	if (dlb_named_lookup(dlb_qtype_names, lua_tostring(L, idx), &code))
		return (uint16_t)code;
	if (strncasecmp(lua_tostring(L, idx), "TYPE", 4) == 0) {
		const char *d = lua_tostring(L, idx) + 4;
		char *end;
		unsigned long n = strtoul(d, &end, 10);

		if (*d != '\0' && isdigit((unsigned char)*d) && *end == '\0' && n <= 65535)
			return (uint16_t)n;
	}
	if (dlb_lua_to_integer(L, idx, &v) && v >= 0 && v <= 65535)
		return (uint16_t)v;
	luaL_error(L, "%s: unknown type '%s'", fn, lua_tostring(L, idx));
	return 0;
}

/* A number in [0, hi] or one of @names (the DNSClass/DNSOpcode/DNSRCode mnemonics). */
static unsigned
check_code(lua_State *L, int idx, const char *fn, const char *what,
	   const struct dlb_named *names, unsigned hi)
{
	lua_Integer v = 0;
	int code = 0;

	if (lua_type(L, idx) == LUA_TSTRING &&
	    dlb_named_lookup(names, lua_tostring(L, idx), &code))
		v = code;
	else if (!dlb_lua_to_integer(L, idx, &v))
		luaL_error(L, "%s: argument #%d must be %s number", fn, idx, what);
	if (v < 0 || v > (lua_Integer)hi)
		luaL_error(L, "%s: %s %I is out of range (0..%I)", fn, what, v, (lua_Integer)hi);
	return (unsigned)v;
}

/* ---- userdata ------------------------------------------------------------ */

static struct dlb_sel *
push_sel(lua_State *L, enum dlb_sel_type type)
{
	struct sel_box *b = lua_newuserdatauv(L, sizeof(*b), 0);

	b->s = NULL;
	luaL_setmetatable(L, MT_SEL);
	b->s = dlb_sel_new(type);
	if (b->s == NULL)
		luaL_error(L, "out of memory");
	return b->s;
}

static struct dlb_act *
push_act(lua_State *L, enum dlb_act_type type, bool response)
{
	struct act_box *b = lua_newuserdatauv(L, sizeof(*b), 0);

	b->a = NULL;
	luaL_setmetatable(L, response ? MT_RACT : MT_ACT);
	b->a = dlb_act_new(type);
	if (b->a == NULL)
		luaL_error(L, "out of memory");
	b->a->response = response;
	return b->a;
}

static void
push_act_ref(lua_State *L, struct dlb_act *a)
{
	struct act_box *b = lua_newuserdatauv(L, sizeof(*b), 0);

	b->a = NULL;
	luaL_setmetatable(L, a->response ? MT_RACT : MT_ACT);
	dlb_act_ref(a);
	b->a = a;
}

static void
push_rule_ref(lua_State *L, struct dlb_rule *r)
{
	struct rule_box *b = lua_newuserdatauv(L, sizeof(*b), 0);

	b->r = NULL;
	luaL_setmetatable(L, MT_RULE);
	dlb_rule_ref(r);
	b->r = r;
}

/* The selector of the DNSRule at @idx, or NULL when it is not one. */
static struct dlb_sel *
to_sel(lua_State *L, int idx)
{
	struct sel_box *b = luaL_testudata(L, idx, MT_SEL);

	return b != NULL ? b->s : NULL;
}

static struct dlb_sel *
check_sel(lua_State *L, int idx, const char *fn)
{
	struct dlb_sel *s = to_sel(L, idx);

	if (s == NULL)
		luaL_error(L, "%s: argument #%d must be a selector (a DNSRule), not %s", fn, idx,
			   luaL_typename(L, idx));
	return s;
}

/* The action at @idx (query or response), or NULL. */
static struct dlb_act *
to_act(lua_State *L, int idx)
{
	struct act_box *b = luaL_testudata(L, idx, MT_ACT);

	if (b == NULL)
		b = luaL_testudata(L, idx, MT_RACT);
	return b != NULL ? b->a : NULL;
}

static struct dlb_rule *
to_rule(lua_State *L, int idx)
{
	struct rule_box *b = luaL_testudata(L, idx, MT_RULE);

	return b != NULL ? b->r : NULL;
}

static int
l_sel_gc(lua_State *L)
{
	struct sel_box *b = luaL_checkudata(L, 1, MT_SEL);

	if (b->s != NULL)
		dlb_sel_unref(b->s);
	b->s = NULL;
	return 0;
}

static int
l_sel_tostring(lua_State *L)
{
	struct sel_box *b = luaL_checkudata(L, 1, MT_SEL);
	char buf[64];

	lua_pushstring(L, b->s != NULL ? dlb_sel_desc(b->s, buf, sizeof(buf)) : "");
	return 1;
}

static int
l_act_gc(lua_State *L)
{
	struct act_box *b = lua_touserdata(L, 1);

	if (b != NULL && b->a != NULL)
		dlb_act_unref(b->a);
	if (b != NULL)
		b->a = NULL;
	return 0;
}

static int
l_act_tostring(lua_State *L)
{
	struct dlb_act *a = to_act(L, 1);

	lua_pushstring(L, a != NULL && a->desc != NULL ? a->desc : "");
	return 1;
}

/* DNSAction:reload() / DNSResponseAction:reload(): reopen a log file (after rotation). */
static int
l_act_reload(lua_State *L)
{
	struct dlb_act *a = to_act(L, 1);

	if (a == NULL)
		return luaL_error(L, "reload: not an action");
	if ((a->type == DLB_ACT_LOG || a->type == DLB_RACT_LOG) && a->u.log != NULL &&
	    dlb_log_reload(a->u.log) != 0 && !dlb_lua_silent(L))
		dlb_warn("Unable to reopen the file for logging: %s", strerror(errno));
	return 0;
}

/*
 * DNSAction:getStats() / :printStats(): dnsdist 1.7 has them on every query
 * action; only TeeAction has figures, the others answer {"": 0}.
 */
static const struct dlb_act *
stats_act(lua_State *L)
{
	struct act_box *b = luaL_testudata(L, 1, MT_ACT);

	return b != NULL && b->a != NULL && b->a->type == DLB_ACT_TEE ? b->a : NULL;
}

static int
l_act_get_stats(lua_State *L)
{
	const struct dlb_act *a = stats_act(L);

	if (a == NULL) {
		lua_createtable(L, 0, 1);
		lua_pushinteger(L, 0);
		lua_setfield(L, -2, "");
		return 1;
	}
	lua_createtable(L, 0, DLB_TEE__COUNT);
	for (int i = 0; i < DLB_TEE__COUNT; i++) {
		lua_pushinteger(L, a->u.tee != NULL ?
				(lua_Integer)dlb_tee_stat(a->u.tee, (enum dlb_tee_stat)i) : 0);
		lua_setfield(L, -2, dlb_tee_names[i]);
	}
	return 1;
}

/* dnsdist prints "name\tvalue" per figure, in its map's (sorted) order */
static int
l_act_print_stats(lua_State *L)
{
	const struct dlb_act *a = stats_act(L);
	int order[DLB_TEE__COUNT];

	if (dlb_lua_silent(L))
		return 0;
	if (a == NULL) {
		dlb_lua_print(L, "\t0");
		return 0;
	}
	for (int i = 0; i < DLB_TEE__COUNT; i++) {
		int k = i;

		while (k > 0 && strcmp(dlb_tee_names[order[k - 1]], dlb_tee_names[i]) > 0) {
			order[k] = order[k - 1];
			k--;
		}
		order[k] = i;
	}
	for (int i = 0; i < DLB_TEE__COUNT; i++) {
		lua_pushfstring(L, "%s\t%I", dlb_tee_names[order[i]],
				(lua_Integer)(a->u.tee != NULL ?
					      dlb_tee_stat(a->u.tee, (enum dlb_tee_stat)order[i]) : 0));
		dlb_lua_print(L, lua_tostring(L, -1));
		lua_pop(L, 1);
	}
	return 0;
}

static int
l_rule_gc(lua_State *L)
{
	struct rule_box *b = luaL_checkudata(L, 1, MT_RULE);

	if (b->r != NULL)
		dlb_rule_unref(b->r);
	b->r = NULL;
	return 0;
}

static int
l_rule_tostring(lua_State *L)
{
	struct rule_box *b = luaL_checkudata(L, 1, MT_RULE);
	char buf[64];

	if (b->r == NULL)
		lua_pushliteral(L, "DNSDistRuleAction");
	else
		lua_pushfstring(L, "DNSDistRuleAction(%s, %s)",
				dlb_sel_desc(b->r->sel, buf, sizeof(buf)),
				b->r->act->desc ? b->r->act->desc : "");
	return 1;
}

/* ---- names ------------------------------------------------------------------ */

/*
 * A name argument at @idx: a string ("www.example.com", with or without the
 * final dot) or a DNSName. Validated by dlb_lua_check_name_lc (which raises
 * "<fn>: bad name"); the wire form as written (case kept, for descriptions
 * and answers) goes to @wire and, when @lc is not NULL, the lowercased one
 * to @lc (both DLB_MAX_NAME bytes). @return the length.
 */
static size_t
check_name(lua_State *L, int idx, const char *fn, uint8_t *wire, uint8_t *lc)
{
	uint8_t tmp[DLB_MAX_NAME];
	uint8_t *low = lc != NULL ? lc : tmp;
	size_t len = dlb_lua_check_name_lc(L, idx, fn, low);
	const uint8_t *w;
	size_t wl = 0;

	if ((w = dlb_lua_to_dnsname(L, idx, &wl)) != NULL && wl == len) {
		memcpy(wire, w, len);
		return len;
	}
	if (lua_type(L, idx) == LUA_TSTRING &&
	    dlb_wire_name_from_text(lua_tostring(L, idx), wire, DLB_MAX_NAME) == (int)len)
		return len;
	memcpy(wire, low, len);
	return len;
}

/* Presentation form ("www.Example.com.") of a wire name. */
static void
name_text(const uint8_t *wire, size_t len, char *out, size_t outsz)
{
	if (dlb_wire_name_to_text(wire, len, out, outsz) < 0)
		snprintf(out, outsz, "?");
}

/* ASCII lowercase copy (length octets are < 64, never in 'A'..'Z'). */
static void
wire_lower(const uint8_t *in, size_t len, uint8_t *out)
{
	for (size_t i = 0; i < len; i++)
		out[i] = (uint8_t)tolower(in[i]);
}

/* How many values a "string or table" argument holds, and the i-th (pushed). */
static lua_Integer
list_len(lua_State *L, int idx)
{
	return lua_type(L, idx) == LUA_TTABLE ? (lua_Integer)lua_rawlen(L, idx) : 1;
}

static void
list_push(lua_State *L, int idx, lua_Integer i)
{
	if (lua_type(L, idx) == LUA_TTABLE)
		lua_rawgeti(L, idx, i);
	else
		lua_pushvalue(L, idx);
}

/*
 * Names collected from a string, a DNSName or a table of them, kept in a
 * userdata on the stack (so an error cannot leak them) for the suffix set and
 * its description.
 */
struct name_ent {
	uint32_t off;		/* into bytes */
	uint16_t len;
	uint32_t seq;		/* position given: the first of equal names is shown */
};

struct name_list {
	size_t n;
	struct name_ent *e;
	uint8_t *bytes;
};

static void
collect_names(lua_State *L, int idx, const char *fn, struct name_list *nl)
{
	lua_Integer n = list_len(L, idx);
	size_t total = 0;
	uint8_t wire[DLB_MAX_NAME];
	char *mem;

	/* first pass: check every name, add up the bytes */
	for (lua_Integer i = 1; i <= n; i++) {
		list_push(L, idx, i);
		if (lua_type(L, idx) == LUA_TTABLE && lua_type(L, -1) != LUA_TSTRING &&
		    dlb_lua_to_dnsname(L, -1, &(size_t){ 0 }) == NULL)
			luaL_error(L, "%s: element #%I must be a name, not %s", fn, i,
				   luaL_typename(L, -1));
		total += check_name(L, lua_gettop(L), fn, wire, NULL);
		lua_pop(L, 1);
	}
	mem = lua_newuserdatauv(L, (size_t)n * sizeof(struct name_ent) + total + 1, 0);
	nl->n = (size_t)n;
	nl->e = (struct name_ent *)(void *)mem;
	nl->bytes = (uint8_t *)mem + (size_t)n * sizeof(struct name_ent);
	total = 0;
	for (lua_Integer i = 1; i <= n; i++) {
		size_t len;

		list_push(L, idx, i);
		len = check_name(L, lua_gettop(L), fn, wire, NULL);
		lua_pop(L, 1);
		memcpy(nl->bytes + total, wire, len);
		nl->e[i - 1].off = (uint32_t)total;
		nl->e[i - 1].len = (uint16_t)len;
		nl->e[i - 1].seq = (uint32_t)(i - 1);
		total += len;
	}
}

/*
 * dnsdist's DNSName ordering (SuffixMatchNode keeps its names in a std::set):
 * the wire bytes compared from the end, ASCII case-insensitively.
 */
static int
dnsname_cmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
	size_t i = 0;

	while (i < al && i < bl) {
		int ca = tolower(a[al - 1 - i]), cb = tolower(b[bl - 1 - i]);

		if (ca != cb)
			return ca < cb ? -1 : 1;
		i++;
	}
	return al < bl ? -1 : al > bl ? 1 : 0;
}

static int
name_ent_cmp(const void *pa, const void *pb, void *bytes)
{
	const struct name_ent *a = pa, *b = pb;
	const uint8_t *base = bytes;
	int c = dnsname_cmp(base + a->off, a->len, base + b->off, b->len);

	if (c != 0)
		return c;
	return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/*
 * Fill the suffix set @set with the names of @nl and, unless @desc is NULL,
 * describe them as dnsdist 1.7 does: "A.Example., z.a.example., com." (its
 * order, case as first written, duplicates once).
 */
static void
suffixes_from_names(lua_State *L, struct name_list *nl, struct dlb_suffix_set *set,
		    struct sb *desc)
{
	uint8_t lc[DLB_MAX_NAME];
	char text[DLB_WIRE_NAME_TEXT_MAX];
	bool first = true;

	for (size_t i = 0; i < nl->n; i++) {
		wire_lower(nl->bytes + nl->e[i].off, nl->e[i].len, lc);
		if (dlb_suffix_set_add(set, lc, nl->e[i].len) != 0)
			luaL_error(L, "out of memory");
	}
	if (desc == NULL)
		return;
	qsort_r(nl->e, nl->n, sizeof(nl->e[0]), name_ent_cmp, nl->bytes);
	for (size_t i = 0; i < nl->n; i++) {
		if (i > 0 && dnsname_cmp(nl->bytes + nl->e[i - 1].off, nl->e[i - 1].len,
					 nl->bytes + nl->e[i].off, nl->e[i].len) == 0)
			continue;
		name_text(nl->bytes + nl->e[i].off, nl->e[i].len, text, sizeof(text));
		if (!first)
			sb_puts(desc, ", ");
		sb_puts(desc, text);
		first = false;
	}
}

/* ---- netmasks and addresses ----------------------------------------------- */

/* "Src: 10.0.0.0/8, 192.0.2.0/24" (or "Dst: in-group" when @quiet) */
static void
describe_nmg(lua_State *L, struct dlb_sel *s)
{
	struct sb b = { .limit = DESC_LIST_MAX };
	char buf[64];

	sb_puts(&b, s->u.nmg.src ? "Src: " : "Dst: ");
	if (s->quiet) {
		sb_puts(&b, "in-group");
	} else {
		for (size_t i = 0; i < s->u.nmg.g.n; i++) {
			dlb_netmask_format(&s->u.nmg.g.v[i], buf, sizeof(buf));
			if (i > 0)
				sb_puts(&b, ", ");
			sb_puts(&b, buf);
		}
	}
	free(s->desc);
	s->desc = NULL;
	sb_finish(L, &b, &s->desc);
}

/* The netmask as an address (host bits zeroed) in a sockaddr. */
static void
netmask_to_sockaddr(const struct dlb_netmask *nm, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (nm->family == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)ss;

		sin->sin_family = AF_INET;
		memcpy(&sin->sin_addr, nm->addr, 4);
	} else {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

		sin6->sin6_family = AF_INET6;
		memcpy(&sin6->sin6_addr, nm->addr, 16);
	}
}

/* An address argument: a string ("192.0.2.1", "2001:db8::1") or a ComboAddress. */
static void
check_address(lua_State *L, int idx, const char *fn, struct sockaddr_storage *ss)
{
	const struct sockaddr_storage *ca = dlb_lua_to_ca(L, idx);
	socklen_t len;

	if (ca != NULL) {
		*ss = *ca;
		return;
	}
	if (lua_type(L, idx) != LUA_TSTRING)
		luaL_error(L, "%s: expected an address, got %s", fn, luaL_typename(L, idx));
	if (dlb_sockaddr_parse(lua_tostring(L, idx), 0, ss, &len) != 0)
		luaL_error(L, "%s: invalid address '%s'", fn, lua_tostring(L, idx));
}

/* ComboAddress::toString(): the address without its port. */
static void
address_text(const struct sockaddr_storage *ss, char *out, size_t outsz)
{
	const void *p = ss->ss_family == AF_INET
		? (const void *)&((const struct sockaddr_in *)ss)->sin_addr
		: (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr;

	if (inet_ntop(ss->ss_family, p, out, (socklen_t)outsz) == NULL)
		snprintf(out, outsz, "?");
}

/* ---- selectors ---------------------------------------------------------- */

static int
l_all_rule(lua_State *L)
{
	struct dlb_sel *s = push_sel(L, DLB_SEL_ALL);

	set_desc(L, &s->desc, "All");
	return 1;
}

/* AndRule/OrRule: "(a) && (b)" / "(a) || (b)" */
static int
list_rule(lua_State *L, enum dlb_sel_type type, const char *fn, const char *op)
{
	struct sb b = { 0 };
	struct dlb_sel *s;
	lua_Integer n;

	if (lua_type(L, 1) != LUA_TTABLE)
		return luaL_error(L, "%s: argument #1 must be a table of selectors", fn);
	n = (lua_Integer)lua_rawlen(L, 1);
	for (lua_Integer i = 1; i <= n; i++) {
		lua_rawgeti(L, 1, i);
		if (to_sel(L, -1) == NULL)
			return luaL_error(L, "%s: element #%I must be a selector (a DNSRule), "
					  "not %s", fn, i, luaL_typename(L, -1));
		lua_pop(L, 1);
	}
	if (n > INT_MAX / (lua_Integer)sizeof(void *))
		return luaL_error(L, "%s: too many selectors", fn);
	s = push_sel(L, type);
	if (n > 0) {
		s->u.list.v = calloc((size_t)n, sizeof(s->u.list.v[0]));
		if (s->u.list.v == NULL)
			return luaL_error(L, "out of memory");
	}
	for (lua_Integer i = 1; i <= n; i++) {
		struct dlb_sel *sub;

		lua_rawgeti(L, 1, i);
		sub = to_sel(L, -1);
		lua_pop(L, 1);
		dlb_sel_ref(sub);
		s->u.list.v[s->u.list.n++] = sub;
	}
	for (int i = 0; i < s->u.list.n; i++) {
		if (i > 0)
			sb_puts(&b, op);
		sb_printf(&b, "(%s)", s->u.list.v[i]->desc ? s->u.list.v[i]->desc : "");
	}
	sb_finish(L, &b, &s->desc);
	return 1;
}

static int
l_and_rule(lua_State *L)
{
	return list_rule(L, DLB_SEL_AND, "AndRule", " && ");
}

static int
l_or_rule(lua_State *L)
{
	return list_rule(L, DLB_SEL_OR, "OrRule", " || ");
}

static int
l_not_rule(lua_State *L)
{
	struct dlb_sel *sub = check_sel(L, 1, "NotRule");
	struct dlb_sel *s = push_sel(L, DLB_SEL_NOT);

	dlb_sel_ref(sub);
	s->u.sub = sub;
	set_desc(L, &s->desc, "!(%s)", sub->desc ? sub->desc : "");
	return 1;
}

static int
l_qname_rule(lua_State *L)
{
	uint8_t wire[DLB_MAX_NAME], lc[DLB_MAX_NAME];
	char text[DLB_WIRE_NAME_TEXT_MAX];
	size_t len = check_name(L, 1, "QNameRule", wire, lc);
	struct dlb_sel *s;

	name_text(wire, len, text, sizeof(text));
	s = push_sel(L, DLB_SEL_QNAME);
	memcpy(s->u.name.lc, lc, len);
	s->u.name.len = (uint16_t)len;
	set_desc(L, &s->desc, "qname==%s", text);
	return 1;
}

static int
l_qname_set_rule(lua_State *L)
{
	struct dlb_name_set *ns = dlb_lua_to_nameset(L, 1);
	struct dlb_sel *s;

	if (ns == NULL)
		return luaL_error(L, "QNameSetRule: argument #1 must be a DNSNameSet "
				  "(newDNSNameSet()), not %s", luaL_typename(L, 1));
	s = push_sel(L, DLB_SEL_QNAME_SET);
	s->u.nameset = dlb_name_set_copy(ns);
	if (s->u.nameset == NULL)
		return luaL_error(L, "out of memory");
	set_desc(L, &s->desc, "qname in DNSNameSet(%zu FQDNs)", dlb_name_set_count(ns));
	return 1;
}

/* A suffix selector from a SuffixMatchNode object (copied). */
static void
suffix_rule_from_smn(lua_State *L, struct dlb_suffix_set *smn, bool quiet)
{
	struct dlb_sel *s = push_sel(L, DLB_SEL_SUFFIX);
	char *buf;

	s->quiet = quiet;
	s->u.suffixes = dlb_suffix_set_copy(smn);
	if (s->u.suffixes == NULL)
		luaL_error(L, "out of memory");
	if (quiet) {
		set_desc(L, &s->desc, "qname==in-set");
		return;
	}
	buf = lua_newuserdatauv(L, DESC_LIST_MAX, 0);
	dlb_suffix_set_format(smn, buf, DESC_LIST_MAX);
	set_desc(L, &s->desc, "qname in %s", buf);
	lua_pop(L, 1);
}

/* A suffix selector from names (a string, a DNSName or a table of them) at @idx. */
static void
suffix_rule_from_names(lua_State *L, int idx, const char *fn, bool quiet)
{
	struct name_list nl;
	struct dlb_sel *s;
	struct sb b = { .limit = DESC_LIST_MAX };

	collect_names(L, idx, fn, &nl);		/* pushes the list */
	s = push_sel(L, DLB_SEL_SUFFIX);
	s->quiet = quiet;
	s->u.suffixes = dlb_suffix_set_new();
	if (s->u.suffixes == NULL)
		luaL_error(L, "out of memory");
	if (quiet) {
		suffixes_from_names(L, &nl, s->u.suffixes, NULL);
		set_desc(L, &s->desc, "qname==in-set");
	} else {
		sb_puts(&b, "qname in ");
		/* an error in here (ENOMEM) leaks at most the description being built */
		suffixes_from_names(L, &nl, s->u.suffixes, &b);
		sb_finish(L, &b, &s->desc);
	}
	lua_remove(L, -2);			/* the list */
}

static int
l_suffix_match_node_rule(lua_State *L)
{
	struct dlb_suffix_set *smn = dlb_lua_to_smn(L, 1);
	bool quiet = dlb_lua_opt_arg_bool(L, 2, "SuffixMatchNodeRule", false);

	if (smn == NULL)
		return luaL_error(L, "SuffixMatchNodeRule: argument #1 must be a SuffixMatchNode "
				  "(newSuffixMatchNode()), not %s", luaL_typename(L, 1));
	suffix_rule_from_smn(L, smn, quiet);
	return 1;
}

static int
l_qname_suffix_rule(lua_State *L)
{
	struct dlb_suffix_set *smn = dlb_lua_to_smn(L, 1);
	bool quiet = dlb_lua_opt_arg_bool(L, 2, "QNameSuffixRule", false);

	if (smn != NULL)
		suffix_rule_from_smn(L, smn, quiet);
	else if (lua_type(L, 1) == LUA_TSTRING || lua_type(L, 1) == LUA_TTABLE ||
		 dlb_lua_to_dnsname(L, 1, &(size_t){ 0 }) != NULL)
		suffix_rule_from_names(L, 1, "QNameSuffixRule", quiet);
	else
		return luaL_error(L, "QNameSuffixRule: argument #1 must be a name or a table of "
				  "names, not %s", luaL_typename(L, 1));
	return 1;
}

/* A selector on a regular expression (@what before it in its description):
 * RegexRule, HTTPPathRegexRule. */
static int
regex_rule(lua_State *L, const char *fn, enum dlb_sel_type type, const char *what)
{
	const char *re = dlb_lua_arg_string(L, 1, fn);
	struct dlb_sel *s = push_sel(L, type);
	char err[256];

	if (dlb_sel_set_regex(s, re, err, sizeof(err)) != 0)
		return luaL_error(L, "%s: invalid regular expression '%s': %s", fn, re, err);
	set_desc(L, &s->desc, "%s%s", what, re);
	return 1;
}

static int
l_regex_rule(lua_State *L)
{
	return regex_rule(L, "RegexRule", DLB_SEL_REGEX, "Regex: ");
}

/* ---- DNS over HTTPS and TLS ------------------------------------------------------- */

static int
l_http_header_rule(lua_State *L)
{
	const char *name = dlb_lua_arg_string(L, 1, "HTTPHeaderRule");
	const char *re = dlb_lua_arg_string(L, 2, "HTTPHeaderRule");
	struct dlb_sel *s = push_sel(L, DLB_SEL_HTTP_HEADER);
	char err[256];

	if (dlb_sel_set_http_header(s, name, re, err, sizeof(err)) != 0)
		return luaL_error(L, "HTTPHeaderRule: invalid regular expression '%s': %s", re, err);
	/* dnsdist shows the name as it was given */
	set_desc(L, &s->desc, "http[%s] ~ %s", name, re);
	return 1;
}

/* A selector on one string (@what before it in its description): HTTPPathRule, SNIRule. */
static int
string_rule(lua_State *L, const char *fn, enum dlb_sel_type type, const char *what)
{
	const char *v = dlb_lua_arg_string(L, 1, fn);
	struct dlb_sel *s = push_sel(L, type);

	s->u.str = dup_str(L, v);
	set_desc(L, &s->desc, "%s == %s", what, v);
	return 1;
}

static int
l_http_path_rule(lua_State *L)
{
	return string_rule(L, "HTTPPathRule", DLB_SEL_HTTP_PATH, "url path");
}

static int
l_http_path_regex_rule(lua_State *L)
{
	return regex_rule(L, "HTTPPathRegexRule", DLB_SEL_HTTP_PATH_REGEX, "http path ~ ");
}

static int
l_sni_rule(lua_State *L)
{
	return string_rule(L, "SNIRule", DLB_SEL_SNI, "SNI");
}

static int
l_qtype_rule(lua_State *L)
{
	uint16_t t = check_qtype(L, 1, "QTypeRule");
	struct dlb_sel *s = push_sel(L, DLB_SEL_QTYPE);
	char text[32];

	s->u.num = t;
	dlb_qtype_text(t, text, sizeof(text));
	set_desc(L, &s->desc, "qtype==%s", text);
	return 1;
}

static int
l_qclass_rule(lua_State *L)
{
	unsigned c = check_code(L, 1, "QClassRule", "a class", dlb_lua_qclasses, 65535);
	struct dlb_sel *s = push_sel(L, DLB_SEL_QCLASS);

	s->u.num = c;
	set_desc(L, &s->desc, "qclass==%u", c);
	return 1;
}

static int
l_opcode_rule(lua_State *L)
{
	unsigned op = check_code(L, 1, "OpcodeRule", "an opcode", dlb_lua_opcodes, 15);
	struct dlb_sel *s = push_sel(L, DLB_SEL_OPCODE);

	s->u.num = op;
	set_desc(L, &s->desc, "opcode==%u", op);
	return 1;
}

static int
l_rd_rule(lua_State *L)
{
	struct dlb_sel *s = push_sel(L, DLB_SEL_RD);

	set_desc(L, &s->desc, "rd==1");
	return 1;
}

static int
l_dnssec_rule(lua_State *L)
{
	struct dlb_sel *s = push_sel(L, DLB_SEL_DNSSEC);

	set_desc(L, &s->desc, "DNSSEC");
	return 1;
}

/* A netmask group selector from an NMG object, a netmask string or a table of them at @idx. */
static void
nmg_rule(lua_State *L, int idx, const char *fn, bool src, bool quiet)
{
	struct dlb_nmg *g = dlb_lua_to_nmg(L, idx);
	struct dlb_netmask nm;
	struct dlb_sel *s;
	lua_Integer n = 0;

	if (g == NULL) {
		if (lua_type(L, idx) != LUA_TSTRING && lua_type(L, idx) != LUA_TTABLE)
			luaL_error(L, "%s: argument #%d must be a NetmaskGroup, a netmask or a "
				   "table of netmasks, not %s", fn, idx, luaL_typename(L, idx));
		n = list_len(L, idx);
		for (lua_Integer i = 1; i <= n; i++) {
			list_push(L, idx, i);
			dlb_lua_check_netmask(L, -1, fn, &nm);
			lua_pop(L, 1);
		}
	}
	s = push_sel(L, DLB_SEL_NMG);
	s->quiet = quiet;
	s->u.nmg.src = src;
	if (g != NULL) {
		if (dlb_nmg_copy(&s->u.nmg.g, g) != 0)
			luaL_error(L, "out of memory");
	} else {
		for (lua_Integer i = 1; i <= n; i++) {
			list_push(L, idx, i);
			dlb_netmask_parse(lua_tostring(L, -1), &nm);
			lua_pop(L, 1);
			if (dlb_nmg_add(&s->u.nmg.g, &nm) != 0)
				luaL_error(L, "out of memory");
		}
	}
	describe_nmg(L, s);
}

static int
l_netmask_group_rule(lua_State *L)
{
	bool src = dlb_lua_opt_arg_bool(L, 2, "NetmaskGroupRule", true);
	bool quiet = dlb_lua_opt_arg_bool(L, 3, "NetmaskGroupRule", false);

	nmg_rule(L, 1, "NetmaskGroupRule", src, quiet);
	return 1;
}

static int
l_dst_port_rule(lua_State *L)
{
	unsigned port = (unsigned)dlb_lua_arg_int(L, 1, "DSTPortRule", 0, 65535);
	struct dlb_sel *s = push_sel(L, DLB_SEL_DSTPORT);

	s->u.num = port;
	set_desc(L, &s->desc, "dst port==%u", port);
	return 1;
}

static int
l_tcp_rule(lua_State *L)
{
	bool tcp = dlb_lua_arg_bool(L, 1, "TCPRule");
	struct dlb_sel *s = push_sel(L, DLB_SEL_TCP);

	s->u.flag = tcp;
	set_desc(L, &s->desc, "%s", tcp ? "TCP" : "UDP");
	return 1;
}

static int
l_max_qps_ip_rule(lua_State *L)
{
	const char *fn = "MaxQPSIPRule";
	double qps = dlb_lua_arg_num(L, 1, fn, 0, 1e9);
	int v4 = (int)dlb_lua_opt_arg_int(L, 2, fn, 0, 32, 32);
	int v6 = (int)dlb_lua_opt_arg_int(L, 3, fn, 0, 128, 64);
	double burst = lua_isnoneornil(L, 4) ? qps : dlb_lua_arg_num(L, 4, fn, 0, 1e9);
	int expiration = (int)dlb_lua_opt_arg_int(L, 5, fn, 0, INT_MAX, 300);
	int cleanup = (int)dlb_lua_opt_arg_int(L, 6, fn, 0, INT_MAX, 60);
	int scan = (int)dlb_lua_opt_arg_int(L, 7, fn, 1, INT_MAX, 10);
	struct dlb_sel *s = push_sel(L, DLB_SEL_MAXQPSIP);
	char r[32], b[32];

	s->u.qpsip = dlb_qps_ip_new(qps, v4, v6, burst, expiration, cleanup, scan);
	if (s->u.qpsip == NULL)
		return luaL_error(L, "out of memory");
	fmt_rate(qps, r, sizeof(r));
	fmt_rate(burst, b, sizeof(b));
	set_desc(L, &s->desc, "IP (/%d, /%d) match for QPS over %s burst %s", v4, v6, r, b);
	return 1;
}

/* A malloc'ed token bucket for the object on top of the stack, stored by the caller at once. */
static struct dlb_bucket *
new_bucket(lua_State *L, double rate, double burst)
{
	struct dlb_bucket *bk = malloc(sizeof(*bk));

	if (bk == NULL)
		luaL_error(L, "out of memory");
	dlb_bucket_init(bk, rate, burst);
	return bk;
}

static int
l_max_qps_rule(lua_State *L)
{
	double qps = dlb_lua_arg_num(L, 1, "MaxQPSRule", 0, 1e9);
	double burst = lua_isnoneornil(L, 2) ? qps : dlb_lua_arg_num(L, 2, "MaxQPSRule", 0, 1e9);
	struct dlb_sel *s = push_sel(L, DLB_SEL_MAXQPS);
	char r[32];

	s->u.bucket = new_bucket(L, qps, burst);
	fmt_rate(qps, r, sizeof(r));
	set_desc(L, &s->desc, "Max %s qps", r);
	return 1;
}

static int
l_proba_rule(lua_State *L)
{
	double p = dlb_lua_arg_num(L, 1, "ProbaRule", 0, 1);
	struct dlb_sel *s = push_sel(L, DLB_SEL_PROBA);

	s->u.proba = p;
	set_desc(L, &s->desc, "match with prob. %.2f", p);
	return 1;
}

static int
l_rcode_rule(lua_State *L)
{
	unsigned rc = check_code(L, 1, "RCodeRule", "an rcode", dlb_lua_rcodes, 15);
	struct dlb_sel *s = push_sel(L, DLB_SEL_RCODE);
	char text[64];

	s->u.num = rc;
	ercode_text(rc, text, sizeof(text));
	set_desc(L, &s->desc, "rcode==%s", text);
	return 1;
}

static int
l_ercode_rule(lua_State *L)
{
	unsigned rc = check_code(L, 1, "ERCodeRule", "an rcode", dlb_lua_rcodes, 4095);
	struct dlb_sel *s = push_sel(L, DLB_SEL_ERCODE);
	char text[64];

	s->u.num = rc;
	ercode_text(rc, text, sizeof(text));
	set_desc(L, &s->desc, "ercode==%s", text);
	return 1;
}

static int
l_edns_option_rule(lua_State *L)
{
	unsigned code = (unsigned)dlb_lua_arg_int(L, 1, "EDNSOptionRule", 0, 65535);
	struct dlb_sel *s = push_sel(L, DLB_SEL_EDNS_OPTION);

	s->u.num = code;
	set_desc(L, &s->desc, "ednsoptcode==%u", code);
	return 1;
}

static int
l_edns_version_rule(lua_State *L)
{
	unsigned v = (unsigned)dlb_lua_arg_int(L, 1, "EDNSVersionRule", 0, 255);
	struct dlb_sel *s = push_sel(L, DLB_SEL_EDNS_VERSION);

	s->u.num = v;
	set_desc(L, &s->desc, "ednsversion>%u", v);
	return 1;
}

static int
l_payload_size_rule(lua_State *L)
{
	static const struct {
		const char *name, *text;
		enum dlb_cmp op;
	} cmps[] = {
		{ "equal", "equal to", DLB_CMP_EQ },
		{ "greater", "greater than", DLB_CMP_GT },
		{ "greaterOrEqual", "equal to or greater than", DLB_CMP_GE },
		{ "smaller", "smaller than", DLB_CMP_LT },
		{ "smallerOrEqual", "equal to or smaller than", DLB_CMP_LE },
	};
	const char *cmp = dlb_lua_arg_string(L, 1, "PayloadSizeRule");
	unsigned size = (unsigned)dlb_lua_arg_int(L, 2, "PayloadSizeRule", 0, 65535);
	struct dlb_sel *s;

	for (size_t i = 0; i < sizeof(cmps) / sizeof(cmps[0]); i++) {
		if (strcmp(cmp, cmps[i].name) != 0)
			continue;
		s = push_sel(L, DLB_SEL_PAYLOAD_SIZE);
		s->u.cmp.op = (int)cmps[i].op;
		s->u.cmp.size = size;
		set_desc(L, &s->desc, "payload size is %s %u", cmps[i].text, size);
		return 1;
	}
	return luaL_error(L, "PayloadSizeRule: unsupported comparison '%s' (equal, greater, "
			  "greaterOrEqual, smaller, smallerOrEqual)", cmp);
}

static int
l_records_count_rule(lua_State *L)
{
	unsigned sec = (unsigned)dlb_lua_arg_int(L, 1, "RecordsCountRule", 0, 3);
	unsigned min = (unsigned)dlb_lua_arg_int(L, 2, "RecordsCountRule", 0, 65535);
	unsigned max = (unsigned)dlb_lua_arg_int(L, 3, "RecordsCountRule", 0, 65535);
	struct dlb_sel *s = push_sel(L, DLB_SEL_RECORDS_COUNT);

	s->u.count.section = (uint8_t)sec;
	s->u.count.min = (uint16_t)min;
	s->u.count.max = (uint16_t)max;
	set_desc(L, &s->desc, "%u <= records in %s <= %u", min, section_names[sec], max);
	return 1;
}

static int
l_records_type_count_rule(lua_State *L)
{
	unsigned sec = (unsigned)dlb_lua_arg_int(L, 1, "RecordsTypeCountRule", 0, 3);
	uint16_t type = check_qtype(L, 2, "RecordsTypeCountRule");
	unsigned min = (unsigned)dlb_lua_arg_int(L, 3, "RecordsTypeCountRule", 0, 65535);
	unsigned max = (unsigned)dlb_lua_arg_int(L, 4, "RecordsTypeCountRule", 0, 65535);
	struct dlb_sel *s = push_sel(L, DLB_SEL_RECORDS_TYPE_COUNT);
	char text[32];

	s->u.count.section = (uint8_t)sec;
	s->u.count.type = type;
	s->u.count.min = (uint16_t)min;
	s->u.count.max = (uint16_t)max;
	dlb_qtype_text(type, text, sizeof(text));
	set_desc(L, &s->desc, "%u <= %s records in %s <= %u", min, text, section_names[sec], max);
	return 1;
}

static int
range_rule(lua_State *L, enum dlb_sel_type type, const char *fn, const char *what,
	   lua_Integer hi)
{
	unsigned min = (unsigned)dlb_lua_arg_int(L, 1, fn, 0, hi);
	unsigned max = (unsigned)dlb_lua_arg_int(L, 2, fn, 0, hi);
	struct dlb_sel *s = push_sel(L, type);

	s->u.range.min = min;
	s->u.range.max = max;
	set_desc(L, &s->desc, "%s < %u || %s > %u", what, min, what, max);
	return 1;
}

static int
l_qname_labels_count_rule(lua_State *L)
{
	return range_rule(L, DLB_SEL_LABELS_COUNT, "QNameLabelsCountRule", "labels count", 255);
}

static int
l_qname_wire_length_rule(lua_State *L)
{
	return range_rule(L, DLB_SEL_WIRE_LENGTH, "QNameWireLengthRule", "wire length", 65535);
}

static int
l_trailing_data_rule(lua_State *L)
{
	struct dlb_sel *s = push_sel(L, DLB_SEL_TRAILING_DATA);

	set_desc(L, &s->desc, "trailing data");
	return 1;
}

static int
l_tag_rule(lua_State *L)
{
	const char *name = dlb_lua_arg_string(L, 1, "TagRule");
	const char *value = lua_isnoneornil(L, 2) ? NULL : dlb_lua_arg_string(L, 2, "TagRule");
	struct dlb_sel *s = push_sel(L, DLB_SEL_TAG);

	s->u.tag.name = dup_str(L, name);
	if (value != NULL) {
		s->u.tag.value = dup_str(L, value);
		set_desc(L, &s->desc, "tag '%s' is set to '%s'", name, value);
	} else {
		set_desc(L, &s->desc, "tag '%s' is set", name);
	}
	return 1;
}

static int
l_pool_available_rule(lua_State *L)
{
	const char *pool = dlb_lua_arg_string(L, 1, "PoolAvailableRule");
	struct dlb_sel *s = push_sel(L, DLB_SEL_POOL_AVAILABLE);

	s->u.pool.name = dup_str(L, pool);
	set_desc(L, &s->desc, "pool '%s' is available", pool);
	return 1;
}

static int
l_pool_outstanding_rule(lua_State *L)
{
	const char *pool = dlb_lua_arg_string(L, 1, "PoolOutstandingRule");
	lua_Integer limit = dlb_lua_arg_int(L, 2, "PoolOutstandingRule", 0, LUA_MAXINTEGER);
	struct dlb_sel *s = push_sel(L, DLB_SEL_POOL_OUTSTANDING);

	s->u.pool.name = dup_str(L, pool);
	s->u.pool.limit = (uint64_t)limit;
	set_desc(L, &s->desc, "pool '%s' outstanding > %llu", pool, (unsigned long long)limit);
	return 1;
}

static int
l_lua_rule(lua_State *L)
{
	struct dlb_sel *s;

	dlb_lua_arg_function(L, 1, "LuaRule");
	s = push_sel(L, DLB_SEL_LUA);
	s->u.lua.fn = dlb_lua_register_fn(L, 1, s->u.lua.src, sizeof(s->u.lua.src));
	set_desc(L, &s->desc, "Lua script");
	return 1;
}

/*
 * The function of a LuaFFIPerThread* object: the code at @idx evaluated
 * in this state must return one. dnsdist runs it in a bare state of each
 * thread; dnslb's worker states are per thread already, so it is evaluated
 * here, once in each state, and the function numbered as a LuaRule's.
 * Leaves the function on the stack top.
 */
void
dlb_lua_per_thread_fn(lua_State *L, int idx, const char *fn)
{
	size_t len;
	const char *code;
	char name[96];

	dlb_lua_arg_string(L, idx, fn);
	code = lua_tolstring(L, idx, &len);
	luaL_where(L, 1);
	snprintf(name, sizeof(name), "=%s%s", lua_tostring(L, -1), fn);
	lua_pop(L, 1);
	if (luaL_loadbufferx(L, code, len, name, "t") != LUA_OK)
		luaL_error(L, "%s: %s", fn, lua_tostring(L, -1));
	lua_call(L, 0, 1);
	if (lua_type(L, -1) != LUA_TFUNCTION)
		luaL_error(L, "%s: the code must return a function, not %s", fn, luaL_typename(L, -1));
}

static int
lua_rule(lua_State *L, int idx, const char *desc)
{
	struct dlb_sel *s = push_sel(L, DLB_SEL_LUA);

	s->u.lua.fn = dlb_lua_register_fn(L, idx, s->u.lua.src, sizeof(s->u.lua.src));
	set_desc(L, &s->desc, "%s", desc);
	return 1;
}

/* LuaFFIRule(f): f(dq) with the ffi module's functions (lua/compat_lua.c) */
static int
l_lua_ffi_rule(lua_State *L)
{
	dlb_lua_arg_function(L, 1, "LuaFFIRule");
	return lua_rule(L, 1, "Lua FFI script");
}

static int
l_lua_ffi_per_thread_rule(lua_State *L)
{
	dlb_lua_per_thread_fn(L, 1, "LuaFFIPerThreadRule");
	return lua_rule(L, lua_gettop(L), "Lua FFI per-thread script");
}

/* The KeyValueStore and KeyValueLookupKey arguments of the KVS rule and action. */
static void
check_kvs_args(lua_State *L, const char *fn, struct dlb_kvstore **kvs,
	       const struct dlb_kvs_key **key)
{
	*kvs = dlb_lua_to_kvstore(L, 1);
	if (*kvs == NULL)
		luaL_error(L, "%s: argument #1 must be a KeyValueStore (newRedisKVStore()), not %s",
			   fn, luaL_typename(L, 1));
	*key = dlb_lua_to_kvkey(L, 2);
	if (*key == NULL)
		luaL_error(L, "%s: argument #2 must be a KeyValueLookupKey (KeyValueLookupKeyQName(), "
			   "...), not %s", fn, luaL_typename(L, 2));
}

static int
l_kvs_lookup_rule(lua_State *L)
{
	struct dlb_kvstore *kvs;
	const struct dlb_kvs_key *key;
	struct dlb_sel *s;
	char d[128];

	check_kvs_args(L, "KeyValueStoreLookupRule", &kvs, &key);
	s = push_sel(L, DLB_SEL_KVS);
	dlb_kvstore_ref(kvs);
	s->u.kvs.store = kvs;
	s->u.kvs.key = *key;
	dlb_kvs_key_describe(key, d, sizeof(d));
	set_desc(L, &s->desc, "lookup key-value store based on '%s'", d);
	return 1;
}

/* ---- TimedIPSetRule ---------------------------------------------------------- */

#define MT_TIPS		"TimedIPSetRule"

struct tips_box {
	struct dlb_timed_ipset *t;	/* one reference; NULL while being built */
};

/* registry key of this state's count of TimedIPSetRule() calls */
static const char tips_count_key = 't';

/*
 * TimedIPSetRule(): a set shared by every state of the configuration (the
 * config state's n-th is each worker state's n-th, as newQPSLimiter), so
 * that a LuaAction adding an address in one worker feeds the rule in all;
 * one made inside a rule belongs to that state.
 */
static int
l_timed_ipset_rule(lua_State *L)
{
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);
	enum dlb_lua_phase p = lc != NULL ? dlb_lua_conf_phase(lc) : DLB_LUA_PHASE_RULES;
	struct tips_box *b = lua_newuserdatauv(L, sizeof(*b), 0);
	lua_Integer k;

	b->t = NULL;
	luaL_setmetatable(L, MT_TIPS);
	if (p == DLB_LUA_PHASE_RULES) {
		b->t = dlb_timed_ipset_new();
	} else {
		lua_rawgetp(L, LUA_REGISTRYINDEX, &tips_count_key);
		k = lua_tointeger(L, -1) + 1;
		lua_pop(L, 1);
		lua_pushinteger(L, k);
		lua_rawsetp(L, LUA_REGISTRYINDEX, &tips_count_key);
		b->t = dlb_timed_ipset_shared(dlb_lua_conf_origin(lc), (long)k,
					      p != DLB_LUA_PHASE_WORKER);
		/* none: a configuration that is not deterministic; this state's own */
		if (b->t == NULL && p == DLB_LUA_PHASE_WORKER)
			b->t = dlb_timed_ipset_new();
	}
	if (b->t == NULL)
		return luaL_error(L, "TimedIPSetRule: out of memory");
	return 1;
}

static struct dlb_timed_ipset *
check_tips(lua_State *L)
{
	struct tips_box *b = luaL_checkudata(L, 1, MT_TIPS);

	if (b->t == NULL)
		luaL_error(L, "TimedIPSetRule: unusable object");
	return b->t;
}

static int
l_tips_gc(lua_State *L)
{
	struct tips_box *b = luaL_checkudata(L, 1, MT_TIPS);

	dlb_timed_ipset_unref(b->t);
	b->t = NULL;
	return 0;
}

/* :add(ca, seconds): the address (not the port) matches for the next @seconds s. */
static int
l_tips_add(lua_State *L)
{
	struct dlb_timed_ipset *t = check_tips(L);
	struct sockaddr_storage ss;
	const struct sockaddr_storage *ca;
	lua_Number secs;
	socklen_t len;

	if (lua_gettop(L) < 3)
		return luaL_error(L, "TimedIPSetRule:add: takes an address and a number of seconds");
	ca = dlb_lua_to_ca(L, 2);
	if (ca == NULL && lua_type(L, 2) == LUA_TSTRING &&
	    dlb_sockaddr_parse(lua_tostring(L, 2), 0, &ss, &len) == 0)
		ca = &ss;
	if (ca == NULL)
		return luaL_error(L, "TimedIPSetRule:add: argument #1 must be a ComboAddress, not %s",
				  luaL_typename(L, 2));
	/* dnsdist's int parameter: a number or a numeric string, truncated */
	if (!dlb_lua_to_number(L, 3, &secs) || secs < -1e15 || secs > 1e15)
		return luaL_error(L, "TimedIPSetRule:add: argument #2 must be a number of seconds");
	if (dlb_timed_ipset_add(t, (const struct sockaddr *)ca,
				(int64_t)time(NULL) + (int64_t)secs) != 0)
		return luaL_error(L, "TimedIPSetRule:add: the set is full (or out of memory)");
	return 0;
}

static int
l_tips_clear(lua_State *L)
{
	dlb_timed_ipset_clear(check_tips(L));
	return 0;
}

static int
l_tips_cleanup(lua_State *L)
{
	dlb_timed_ipset_cleanup(check_tips(L));
	return 0;
}

/* :slice(): the DNSRule that matches the set's live addresses, for addAction. */
static int
l_tips_slice(lua_State *L)
{
	struct dlb_timed_ipset *t = check_tips(L);
	struct dlb_sel *s = push_sel(L, DLB_SEL_TIMED_IPSET);

	dlb_timed_ipset_ref(t);
	s->u.tips = t;
	/* the stored text is for readers without dlb_sel_desc; showRules counts live */
	set_desc(L, &s->desc, "Src: %zu ips", dlb_timed_ipset_live(t));
	return 1;
}

/*
 * makeRule semantics (dnsdist's luadnsrule_t): the selector at @idx is a
 * DNSRule (returned as is), a string (a netmask or an address makes a
 * NetmaskGroupRule, anything else a suffix rule), a DNSName (suffix rule),
 * or a table of strings or DNSNames: all netmasks make a NetmaskGroupRule,
 * all names a suffix rule. dnsdist silently drops the names of a table that
 * mixes both; dnslb refuses it instead.
 * Leaves a DNSRule on the stack (the one at @idx, or a new one) and @return
 * its selector.
 */
static struct dlb_sel *
make_rule(lua_State *L, int idx, const char *fn)
{
	struct dlb_netmask nm;
	struct dlb_sel *s = to_sel(L, idx);

	idx = lua_absindex(L, idx);
	if (s != NULL) {
		lua_pushvalue(L, idx);
		return s;
	}
	if (lua_type(L, idx) == LUA_TSTRING) {
		if (dlb_netmask_parse(lua_tostring(L, idx), &nm) == 0)
			nmg_rule(L, idx, fn, true, false);
		else
			suffix_rule_from_names(L, idx, fn, false);
	} else if (lua_type(L, idx) == LUA_TTABLE) {
		lua_Integer n = (lua_Integer)lua_rawlen(L, idx), masks = 0, first_name = 0;

		for (lua_Integer i = 1; i <= n; i++) {
			lua_rawgeti(L, idx, i);
			if (lua_type(L, -1) == LUA_TSTRING &&
			    dlb_netmask_parse(lua_tostring(L, -1), &nm) == 0)
				masks++;
			else if (first_name == 0)
				first_name = i;
			lua_pop(L, 1);
		}
		if (masks > 0 && first_name != 0) {
			lua_rawgeti(L, idx, first_name);
			luaL_error(L, "%s: a table of selectors must hold only netmasks or only "
				   "names ('%s' is not a netmask)", fn,
				   luaL_tolstring(L, -1, NULL));
		}
		if (masks > 0)
			nmg_rule(L, idx, fn, true, false);
		else
			suffix_rule_from_names(L, idx, fn, false);
	} else if (dlb_lua_to_dnsname(L, idx, &(size_t){ 0 }) != NULL) {
		suffix_rule_from_names(L, idx, fn, false);
	} else {
		luaL_error(L, "%s: a selector must be a DNSRule, a name, a netmask or a table of "
			   "them, not %s", fn, luaL_typename(L, idx));
	}
	return to_sel(L, -1);
}

static int
l_make_rule(lua_State *L)
{
	make_rule(L, 1, "makeRule");
	return 1;
}

/* ---- query actions ---------------------------------------------------------- */

static const char *const answer_keys[] = { "aa", "ad", "ra", "ttl", NULL };
static const char *const header_keys[] = { "aa", "ad", "ra", NULL };
static const char *const soa_keys[] = { "aa", "ad", "ra", "soaInAuthoritySection", NULL };

/* {aa=, ad=, ra=[, ttl=]} at @arg (absent: defaults: RA copied from RD, TTL 60). */
static void
answer_opts(lua_State *L, int arg, const char *fn, bool with_ttl, struct dlb_answer_opts *o)
{
	int t = dlb_lua_opt_table(L, arg, fn);
	lua_Integer ttl;

	memset(o, 0, sizeof(*o));
	o->ttl = 60;
	if (t == 0)
		return;
	dlb_lua_warn_unknown_keys(L, t, fn, "option", with_ttl ? answer_keys : header_keys);
	o->aa_set = dlb_lua_opt_bool(L, t, fn, "aa", &o->aa);
	dlb_lua_opt_bool(L, t, fn, "ad", &o->ad);
	o->ra_set = dlb_lua_opt_bool(L, t, fn, "ra", &o->ra);
	if (with_ttl && dlb_lua_opt_integer(L, t, fn, "ttl", 0, UINT32_MAX, &ttl))
		o->ttl = (uint32_t)ttl;
}

static int
l_pool_action(lua_State *L)
{
	const char *pool = dlb_lua_arg_string(L, 1, "PoolAction");
	bool stop = dlb_lua_opt_arg_bool(L, 2, "PoolAction", true);
	struct dlb_act *a = push_act(L, DLB_ACT_POOL, false);

	a->u.pool.name = dup_str(L, pool);
	a->u.pool.stop = stop;
	set_desc(L, &a->desc, "to pool %s", pool);
	return 1;
}

/* An action without arguments. */
static int
simple_action(lua_State *L, enum dlb_act_type type, bool response, const char *desc)
{
	struct dlb_act *a = push_act(L, type, response);

	set_desc(L, &a->desc, "%s", desc);
	return 1;
}

static int
l_drop_action(lua_State *L)
{
	return simple_action(L, DLB_ACT_DROP, false, "drop");
}

static int
l_allow_action(lua_State *L)
{
	return simple_action(L, DLB_ACT_ALLOW, false, "allow");
}

static int
l_none_action(lua_State *L)
{
	return simple_action(L, DLB_ACT_NONE, false, "no op");
}

static int
l_continue_action(lua_State *L)
{
	struct act_box *sub = luaL_testudata(L, 1, MT_ACT);
	struct dlb_act *a;

	if (sub == NULL || sub->a == NULL)
		return luaL_error(L, "ContinueAction: argument #1 must be a query action, not %s",
				  luaL_testudata(L, 1, MT_RACT) ? "a response action"
								: luaL_typename(L, 1));
	a = push_act(L, DLB_ACT_CONTINUE, false);
	dlb_act_ref(sub->a);
	a->u.sub = sub->a;
	set_desc(L, &a->desc, "continue after: %s", sub->a->desc ? sub->a->desc : "");
	return 1;
}

static int
l_rcode_action(lua_State *L)
{
	unsigned rc = check_code(L, 1, "RCodeAction", "an rcode", dlb_lua_rcodes, 15);
	struct dlb_answer_opts o;
	struct dlb_act *a;

	answer_opts(L, 2, "RCodeAction", false, &o);
	a = push_act(L, DLB_ACT_RCODE, false);
	a->u.rcode.rcode = (uint16_t)rc;
	a->u.rcode.o = o;
	set_desc(L, &a->desc, "set rcode %u", rc);
	return 1;
}

/* HTTPStatusAction(status, body[, contentType=""[, {aa=, ad=, ra=, ttl=}]]) */
static int
l_http_status_action(lua_State *L)
{
	lua_Integer status = dlb_lua_arg_int(L, 1, "HTTPStatusAction", 0, 65535);
	size_t len;
	const char *body;
	const char *ctype = "";
	struct dlb_answer_opts o;
	struct dlb_act *a;

	(void)dlb_lua_arg_string(L, 2, "HTTPStatusAction");
	body = lua_tolstring(L, 2, &len);
	if (!lua_isnoneornil(L, 3))
		ctype = dlb_lua_arg_string(L, 3, "HTTPStatusAction");
	answer_opts(L, 4, "HTTPStatusAction", true, &o);	/* ttl= is read, and unused */
	a = push_act(L, DLB_ACT_HTTP_STATUS, false);
	a->u.http.status = (uint16_t)status;
	a->u.http.o = o;
	a->u.http.ctype = dup_str(L, ctype);
	a->u.http.body = malloc(len > 0 ? len : 1);
	if (a->u.http.body == NULL)
		return luaL_error(L, "out of memory");
	memcpy(a->u.http.body, body, len);
	a->u.http.len = len;
	set_desc(L, &a->desc, "return an HTTP status of %d", (int)status);
	return 1;
}

static int
l_ercode_action(lua_State *L)
{
	unsigned rc = check_code(L, 1, "ERCodeAction", "an rcode", dlb_lua_rcodes, 4095);
	struct dlb_answer_opts o;
	struct dlb_act *a;
	char text[64];

	answer_opts(L, 2, "ERCodeAction", false, &o);
	a = push_act(L, DLB_ACT_ERCODE, false);
	a->u.rcode.rcode = (uint16_t)rc;
	a->u.rcode.o = o;
	ercode_text(rc, text, sizeof(text));
	set_desc(L, &a->desc, "set ercode %s", text);
	return 1;
}

static int
l_tc_action(lua_State *L)
{
	return simple_action(L, DLB_ACT_TC, false, "tc=1 answer");
}

static int
l_spoof_action(lua_State *L)
{
	const char *fn = "SpoofAction";
	lua_Integer n;
	struct dlb_answer_opts o;
	struct sockaddr_storage ss;
	struct dlb_act *a;
	struct sb b = { .limit = DESC_LIST_MAX };
	char text[64];

	if (lua_type(L, 1) != LUA_TSTRING && lua_type(L, 1) != LUA_TTABLE &&
	    dlb_lua_to_ca(L, 1) == NULL)
		return luaL_error(L, "%s: argument #1 must be an address or a table of addresses",
				  fn);
	n = list_len(L, 1);
	for (lua_Integer i = 1; i <= n; i++) {
		list_push(L, 1, i);
		check_address(L, -1, fn, &ss);
		lua_pop(L, 1);
	}
	if (n > 65535)
		return luaL_error(L, "%s: too many addresses", fn);
	answer_opts(L, 2, fn, true, &o);
	a = push_act(L, DLB_ACT_SPOOF, false);
	a->u.spoof.o = o;
	if (n > 0) {
		a->u.spoof.addrs = calloc((size_t)n, sizeof(a->u.spoof.addrs[0]));
		if (a->u.spoof.addrs == NULL)
			return luaL_error(L, "out of memory");
	}
	for (lua_Integer i = 1; i <= n; i++) {
		list_push(L, 1, i);
		check_address(L, -1, fn, &a->u.spoof.addrs[i - 1]);
		lua_pop(L, 1);
		a->u.spoof.naddrs++;
	}
	sb_puts(&b, "spoof in ");
	for (int i = 0; i < a->u.spoof.naddrs; i++) {
		address_text(&a->u.spoof.addrs[i], text, sizeof(text));
		sb_printf(&b, "%s ", text);
	}
	sb_finish(L, &b, &a->desc);
	return 1;
}

static int
l_spoof_cname_action(lua_State *L)
{
	uint8_t wire[DLB_MAX_NAME];
	char text[DLB_WIRE_NAME_TEXT_MAX];
	size_t len = check_name(L, 1, "SpoofCNAMEAction", wire, NULL);
	struct dlb_answer_opts o;
	struct dlb_act *a;

	answer_opts(L, 2, "SpoofCNAMEAction", true, &o);
	a = push_act(L, DLB_ACT_SPOOF_CNAME, false);
	a->u.spoof.o = o;
	memcpy(a->u.spoof.cname, wire, len);
	a->u.spoof.cname_len = (uint16_t)len;
	name_text(wire, len, text, sizeof(text));
	set_desc(L, &a->desc, "spoof in %s ", text);
	return 1;
}

static int
l_spoof_raw_action(lua_State *L)
{
	const char *fn = "SpoofRawAction";
	struct dlb_answer_opts o;
	struct dlb_act *a;
	lua_Integer n;

	if (lua_type(L, 1) != LUA_TSTRING && lua_type(L, 1) != LUA_TTABLE)
		return luaL_error(L, "%s: argument #1 must be a string of rdata or a table of them",
				  fn);
	n = list_len(L, 1);
	for (lua_Integer i = 1; i <= n; i++) {
		list_push(L, 1, i);
		if (lua_type(L, -1) != LUA_TSTRING)
			return luaL_error(L, "%s: rdata #%I must be a string, not %s", fn, i,
					  luaL_typename(L, -1));
		if (lua_rawlen(L, -1) > 65535)
			return luaL_error(L, "%s: rdata #%I is longer than 65535 bytes", fn, i);
		lua_pop(L, 1);
	}
	if (n > 65535)
		return luaL_error(L, "%s: too many records", fn);
	answer_opts(L, 2, fn, true, &o);
	a = push_act(L, DLB_ACT_SPOOF_RAW, false);
	a->u.spoof.o = o;
	if (n > 0) {
		a->u.spoof.raw = calloc((size_t)n, sizeof(a->u.spoof.raw[0]));
		a->u.spoof.raw_len = calloc((size_t)n, sizeof(a->u.spoof.raw_len[0]));
		if (a->u.spoof.raw == NULL || a->u.spoof.raw_len == NULL)
			return luaL_error(L, "out of memory");
	}
	for (lua_Integer i = 1; i <= n; i++) {
		size_t len;
		const char *rd;
		uint8_t *copy;

		list_push(L, 1, i);
		rd = lua_tolstring(L, -1, &len);
		copy = malloc(len > 0 ? len : 1);
		if (copy == NULL)
			return luaL_error(L, "out of memory");
		memcpy(copy, rd, len);
		lua_pop(L, 1);
		a->u.spoof.raw[a->u.spoof.nraw] = copy;
		a->u.spoof.raw_len[a->u.spoof.nraw] = (uint16_t)len;
		a->u.spoof.nraw++;
	}
	set_desc(L, &a->desc, "spoof in %s", n > 0 ? "raw bytes " : "");
	return 1;
}

/* ---- SVC records (newSVCRecordParameters, SpoofSVCAction) ---------------------- */

#define MT_SVC		"SVCRecordParameters"
#define SVC_MAX_HINTS	64

/* One SVCB/HTTPS record: its rdata, and the hints SpoofSVCAction adds records for. */
struct svc_box {
	uint8_t rdata[4096];
	uint16_t rdlen;
	uint8_t target[DLB_MAX_NAME];
	uint16_t target_len;
	int nv4, nv6;
	uint8_t v4[SVC_MAX_HINTS][4], v6[SVC_MAX_HINTS][16];
};

/* SvcParam::keyFromString: a key's number, or -1. */
static long
svc_key(const char *k)
{
	static const char *const names[] = { "mandatory", "alpn", "no-default-alpn", "port",
					     "ipv4hint", "ech", "ipv6hint" };
	char *end;
	unsigned long v;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(k, names[i]) == 0)
			return (long)i;
	if (strncmp(k, "key", 3) != 0 || k[3] < '0' || k[3] > '9')
		return -1;
	errno = 0;
	v = strtoul(k + 3, &end, 10);
	return *end != '\0' || errno != 0 || v > 65535 ? -1 : (long)v;
}

struct svc_param {
	uint16_t key;
	const char *val;	/* borrowed from the Lua table */
	size_t len;
};

static void
svc_put(lua_State *L, struct svc_box *b, const void *p, size_t n)
{
	if (b->rdlen + n > sizeof(b->rdata))
		luaL_error(L, "newSVCRecordParameters: the record is too large");
	memcpy(b->rdata + b->rdlen, p, n);
	b->rdlen = (uint16_t)(b->rdlen + n);
}

static void
svc_put16(lua_State *L, struct svc_box *b, unsigned v)
{
	uint8_t x[2] = { (uint8_t)(v >> 8), (uint8_t)v };

	svc_put(L, b, x, 2);
}

/* Check that the value at @idx is a table of strings (for key @what). @return how many. */
static lua_Integer
svc_strings(lua_State *L, int idx, const char *what)
{
	lua_Integer n;

	if (lua_type(L, idx) != LUA_TTABLE)
		luaL_error(L, "newSVCRecordParameters: %s must be a table of strings", what);
	n = (lua_Integer)lua_rawlen(L, idx);
	for (lua_Integer i = 1; i <= n; i++) {
		if (lua_rawgeti(L, idx, i) != LUA_TSTRING)
			luaL_error(L, "newSVCRecordParameters: %s must be a table of strings", what);
		lua_pop(L, 1);
	}
	return n;
}

static int
cmp_svc_param(const void *a, const void *b)
{
	const struct svc_param *x = a, *y = b;

	return (int)x->key - (int)y->key;
}

static void
svc_mandatory(lua_State *L, int t, struct svc_box *b)
{
	const char *fn = "newSVCRecordParameters";
	uint16_t mandatory[16];
	int nmand = 0;

	if (lua_getfield(L, t, "mandatory") != LUA_TNIL) {
		lua_Integer k = svc_strings(L, -1, "mandatory");

		for (lua_Integer i = 1; i <= k; i++) {
			long key;
			bool dup = false;

			lua_rawgeti(L, -1, i);
			key = svc_key(lua_tostring(L, -1));
			if (key < 0)
				luaL_error(L, "%s: unknown SvcParam key '%s'", fn, lua_tostring(L, -1));
			lua_pop(L, 1);
			for (int j = 0; j < nmand; j++)
				dup |= mandatory[j] == key;
			if (dup)
				continue;	/* dnsdist keeps them in a set */
			if (nmand == (int)(sizeof(mandatory) / sizeof(mandatory[0])))
				luaL_error(L, "%s: too many mandatory keys", fn);
			mandatory[nmand++] = (uint16_t)key;
		}
	}
	lua_pop(L, 1);
	if (nmand == 0)
		return;
	/* a set: ascending */
	for (int i = 1; i < nmand; i++)
		for (int j = i; j > 0 && mandatory[j - 1] > mandatory[j]; j--) {
			uint16_t x = mandatory[j];

			mandatory[j] = mandatory[j - 1];
			mandatory[j - 1] = x;
		}
	svc_put16(L, b, 0);
	svc_put16(L, b, (unsigned)(2 * nmand));
	for (int i = 0; i < nmand; i++)
		svc_put16(L, b, mandatory[i]);
}

static void
svc_alpn(lua_State *L, int t, struct svc_box *b)
{
	const char *fn = "newSVCRecordParameters";

	if (lua_getfield(L, t, "alpn") != LUA_TNIL) {
		lua_Integer k = svc_strings(L, -1, "alpn");
		size_t total = 0;

		for (lua_Integer i = 1; i <= k; i++) {
			size_t len;

			lua_rawgeti(L, -1, i);
			lua_tolstring(L, -1, &len);
			lua_pop(L, 1);
			if (len > 255)
				luaL_error(L, "%s: an alpn value is longer than 255 bytes", fn);
			total += 1 + len;
		}
		if (k > 0) {
			if (total > 65535)
				luaL_error(L, "%s: the record is too large", fn);
			svc_put16(L, b, 1);
			svc_put16(L, b, (unsigned)total);
			for (lua_Integer i = 1; i <= k; i++) {
				size_t len;
				const char *v;
				uint8_t l;

				lua_rawgeti(L, -1, i);
				v = lua_tolstring(L, -1, &len);
				l = (uint8_t)len;
				svc_put(L, b, &l, 1);
				svc_put(L, b, v, len);
				lua_pop(L, 1);
			}
		}
	}
	lua_pop(L, 1);
}

/* ipv4hint (@fam 4) or ipv6hint (6): the rdata's addresses, kept for the extra records. */
static void
svc_hints(lua_State *L, int t, struct svc_box *b, int fam)
{
	const char *fn = "newSVCRecordParameters";
	const char *key = fam == 4 ? "ipv4hint" : "ipv6hint";
	size_t alen = fam == 4 ? 4 : 16;
	lua_Integer k;

	if (lua_getfield(L, t, key) == LUA_TNIL) {
		lua_pop(L, 1);
		return;
	}
	k = svc_strings(L, -1, key);
	if (k > SVC_MAX_HINTS)
		luaL_error(L, "%s: at most %d addresses in %s", fn, SVC_MAX_HINTS, key);
	if (k > 0) {
		svc_put16(L, b, (unsigned)fam);
		svc_put16(L, b, (unsigned)(alen * (size_t)k));
	}
	for (lua_Integer i = 1; i <= k; i++) {
		struct sockaddr_storage ss;
		socklen_t sl;
		const void *a;

		lua_rawgeti(L, -1, i);
		if (dlb_sockaddr_parse(lua_tostring(L, -1), 0, &ss, &sl) != 0 ||
		    ss.ss_family != (fam == 4 ? AF_INET : AF_INET6))
			luaL_error(L, "%s: '%s' is not an IPv%c address", fn, lua_tostring(L, -1),
				   fam == 4 ? '4' : '6');
		lua_pop(L, 1);
		a = fam == 4 ? (const void *)&((struct sockaddr_in *)&ss)->sin_addr :
			       (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr;
		svc_put(L, b, a, alen);
		if (fam == 4)
			memcpy(b->v4[b->nv4++], a, 4);
		else
			memcpy(b->v6[b->nv6++], a, 16);
	}
	lua_pop(L, 1);
}

static bool
svc_named_key(const char *k)
{
	static const char *const named[] = { "mandatory", "alpn", "noDefaultAlpn", "port",
					     "ipv4hint", "ipv6hint", "ech", NULL };

	return dlb_lua_name_in(k, named);
}

/*
 * newSVCRecordParameters(priority, target[, {mandatory=, alpn=, noDefaultAlpn=, port=,
 * ipv4hint=, ipv6hint=, ech=, keyN=}]): the SVCB rdata as dnsdist 1.7 builds
 * it: priority, target (uncompressed), then the parameters by key number.
 */
static int
l_new_svc_record_parameters(lua_State *L)
{
	const char *fn = "newSVCRecordParameters";
	lua_Integer prio = dlb_lua_arg_int(L, 1, fn, 0, 65535);
	const char *target = dlb_lua_arg_string(L, 2, fn);
	struct svc_param extra[64];
	int nextra = 0, t = dlb_lua_opt_table(L, 3, fn);
	struct svc_box *b;
	int n;

	b = lua_newuserdatauv(L, sizeof(*b), 0);
	b->rdlen = 0;
	b->nv4 = b->nv6 = 0;
	luaL_setmetatable(L, MT_SVC);
	n = dlb_wire_name_from_text(target, b->target, sizeof(b->target));
	if (n <= 0)
		return luaL_error(L, "%s: invalid target '%s'", fn, target);
	b->target_len = (uint16_t)n;
	svc_put16(L, b, (unsigned)prio);
	svc_put(L, b, b->target, b->target_len);
	if (t == 0)
		return 1;
	svc_mandatory(L, t, b);
	svc_alpn(L, t, b);
	if (lua_getfield(L, t, "noDefaultAlpn") != LUA_TNIL) {
		bool v;

		if (!dlb_lua_to_bool(L, -1, &v))
			return luaL_error(L, "%s: noDefaultAlpn must be a boolean", fn);
		if (v) {
			svc_put16(L, b, 2);
			svc_put16(L, b, 0);
		}
	}
	lua_pop(L, 1);
	if (lua_getfield(L, t, "port") != LUA_TNIL) {
		lua_Integer port = dlb_lua_check_int_at(L, -1, fn, "port", 0, 65535);

		svc_put16(L, b, 3);
		svc_put16(L, b, 2);
		svc_put16(L, b, (unsigned)port);
	}
	lua_pop(L, 1);
	svc_hints(L, t, b, 4);
	if (lua_getfield(L, t, "ech") != LUA_TNIL) {
		size_t len;
		const char *v;

		if (lua_type(L, -1) != LUA_TSTRING)
			return luaL_error(L, "%s: ech must be a string", fn);
		v = lua_tolstring(L, -1, &len);
		if (len > 0) {
			if (len > 65535)
				return luaL_error(L, "%s: the record is too large", fn);
			svc_put16(L, b, 5);
			svc_put16(L, b, (unsigned)len);
			svc_put(L, b, v, len);
		}
	}
	lua_pop(L, 1);
	svc_hints(L, t, b, 6);
	/* any other key: keyN = "value", by key number */
	lua_pushnil(L);
	while (lua_next(L, t) != 0) {
		const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
		long key;

		if (k == NULL || svc_named_key(k)) {
			lua_pop(L, 1);
			continue;
		}
		key = svc_key(k);
		if (key < 0)
			return luaL_error(L, "%s: unknown SvcParam key '%s'", fn, k);
		if (lua_type(L, -1) != LUA_TSTRING)
			return luaL_error(L, "%s: the value of %s must be a string", fn, k);
		if (nextra == (int)(sizeof(extra) / sizeof(extra[0])))
			return luaL_error(L, "%s: too many parameters", fn);
		extra[nextra].key = (uint16_t)key;
		/* the string stays alive: the table holds it */
		extra[nextra].val = lua_tolstring(L, -1, &extra[nextra].len);
		nextra++;
		lua_pop(L, 1);
	}
	qsort(extra, (size_t)nextra, sizeof(extra[0]), cmp_svc_param);
	for (int i = 0; i < nextra; i++) {
		if (extra[i].len > 65535)
			return luaL_error(L, "%s: the record is too large", fn);
		svc_put16(L, b, extra[i].key);
		svc_put16(L, b, (unsigned)extra[i].len);
		svc_put(L, b, extra[i].val, extra[i].len);
	}
	return 1;
}

/* dnsdist's std::set order of (name, address): DNSName's <, then ComboAddress's <. */
static int
cmp_svc_add(const void *pa, const void *pb)
{
	const struct dlb_svc_additional *a = pa, *b = pb;
	size_t i = a->name_len, j = b->name_len;

	/* the wire names compared from their last byte, ASCII case folded */
	while (i > 0 && j > 0) {
		uint8_t x = a->name[--i], y = b->name[--j];

		x = x >= 'A' && x <= 'Z' ? (uint8_t)(x + 32) : x;
		y = y >= 'A' && y <= 'Z' ? (uint8_t)(y + 32) : y;
		if (x != y)
			return x < y ? -1 : 1;
	}
	if (i != j)
		return i < j ? -1 : 1;
	if (a->type == 1) {
		/* s_addr compared as a host-order (little-endian) number */
		for (int k = 3; k >= 0; k--)
			if (a->addr[k] != b->addr[k])
				return a->addr[k] < b->addr[k] ? -1 : 1;
		return 0;
	}
	return memcmp(a->addr, b->addr, 16);
}

/* SpoofSVCAction({params}[, {aa=, ad=, ra=, ttl=}]) */
static int
l_spoof_svc_action(lua_State *L)
{
	const char *fn = "SpoofSVCAction";
	struct dlb_answer_opts o;
	struct dlb_act *a;
	lua_Integer n;
	int nadd = 0, k = 0;

	if (lua_type(L, 1) != LUA_TTABLE)
		return luaL_error(L, "%s: argument #1 must be a table of newSVCRecordParameters()",
				  fn);
	n = (lua_Integer)lua_rawlen(L, 1);
	if (n > 1024)
		return luaL_error(L, "%s: too many records", fn);
	for (lua_Integer i = 1; i <= n; i++) {
		const struct svc_box *b;

		lua_rawgeti(L, 1, i);
		b = luaL_testudata(L, -1, MT_SVC);
		if (b == NULL)
			return luaL_error(L, "%s: element #%I must be a newSVCRecordParameters(), "
					  "not %s", fn, i, luaL_typename(L, -1));
		nadd += b->nv4 + b->nv6;
		lua_pop(L, 1);
	}
	answer_opts(L, 2, fn, true, &o);
	a = push_act(L, DLB_ACT_SPOOF_SVC, false);
	a->u.spoof.o = o;
	if (n > 0) {
		a->u.spoof.raw = calloc((size_t)n, sizeof(a->u.spoof.raw[0]));
		a->u.spoof.raw_len = calloc((size_t)n, sizeof(a->u.spoof.raw_len[0]));
		if (a->u.spoof.raw == NULL || a->u.spoof.raw_len == NULL)
			return luaL_error(L, "out of memory");
	}
	if (nadd > 0) {
		a->u.spoof.add = calloc((size_t)nadd, sizeof(a->u.spoof.add[0]));
		if (a->u.spoof.add == NULL)
			return luaL_error(L, "out of memory");
	}
	/* the A records (sorted, without duplicates), then the AAAA ones: dnsdist's two sets */
	for (int fam = 0; fam < 2; fam++) {
		int first = k;

		for (lua_Integer i = 1; i <= n; i++) {
			const struct svc_box *b;

			lua_rawgeti(L, 1, i);
			b = lua_touserdata(L, -1);
			lua_pop(L, 1);
			for (int h = 0; h < (fam == 0 ? b->nv4 : b->nv6); h++) {
				struct dlb_svc_additional *e = &a->u.spoof.add[k];
				bool dup = false;

				memcpy(e->name, b->target, b->target_len);
				e->name_len = b->target_len;
				e->type = fam == 0 ? 1 : 28;
				memcpy(e->addr, fam == 0 ? b->v4[h] : b->v6[h], fam == 0 ? 4 : 16);
				for (int j = first; j < k && !dup; j++)
					dup = cmp_svc_add(&a->u.spoof.add[j], e) == 0;
				if (!dup)
					k++;
			}
		}
		if (k - first > 1)
			qsort(a->u.spoof.add + first, (size_t)(k - first),
			      sizeof(a->u.spoof.add[0]), cmp_svc_add);
	}
	a->u.spoof.nadd = k;
	for (lua_Integer i = 1; i <= n; i++) {
		const struct svc_box *b;
		uint8_t *copy;

		lua_rawgeti(L, 1, i);
		b = lua_touserdata(L, -1);
		copy = malloc(b->rdlen);
		if (copy == NULL)
			return luaL_error(L, "out of memory");
		memcpy(copy, b->rdata, b->rdlen);
		a->u.spoof.raw[a->u.spoof.nraw] = copy;
		a->u.spoof.raw_len[a->u.spoof.nraw] = b->rdlen;
		a->u.spoof.nraw++;
		lua_pop(L, 1);
	}
	set_desc(L, &a->desc, "spoof SVC record ");
	return 1;
}

static uint32_t
arg_u32(lua_State *L, int arg, const char *fn)
{
	return (uint32_t)dlb_lua_arg_int(L, arg, fn, 0, UINT32_MAX);
}

static int
l_negative_and_soa_action(lua_State *L)
{
	const char *fn = "NegativeAndSOAAction";
	bool nxd = dlb_lua_arg_bool(L, 1, fn);
	uint8_t zone[DLB_MAX_NAME], mname[DLB_MAX_NAME], rname[DLB_MAX_NAME];
	size_t zl = check_name(L, 2, fn, zone, NULL);
	uint32_t ttl = arg_u32(L, 3, fn);
	size_t ml = check_name(L, 4, fn, mname, NULL);
	size_t rl = check_name(L, 5, fn, rname, NULL);
	uint32_t serial = arg_u32(L, 6, fn), refresh = arg_u32(L, 7, fn);
	uint32_t retry = arg_u32(L, 8, fn), expire = arg_u32(L, 9, fn);
	uint32_t minimum = arg_u32(L, 10, fn);
	int t = dlb_lua_opt_table(L, 11, fn);
	bool in_auth = false;	/* dnsdist's default: the SOA in the additional section */
	struct dlb_answer_opts o;
	struct dlb_act *a;

	memset(&o, 0, sizeof(o));
	o.ttl = 60;
	if (t != 0) {
		dlb_lua_warn_unknown_keys(L, t, fn, "option", soa_keys);
		o.aa_set = dlb_lua_opt_bool(L, t, fn, "aa", &o.aa);
		dlb_lua_opt_bool(L, t, fn, "ad", &o.ad);
		o.ra_set = dlb_lua_opt_bool(L, t, fn, "ra", &o.ra);
		dlb_lua_opt_bool(L, t, fn, "soaInAuthoritySection", &in_auth);
	}
	a = push_act(L, DLB_ACT_NEGATIVE_SOA, false);
	a->u.soa.nxd = nxd;
	memcpy(a->u.soa.zone, zone, zl);
	a->u.soa.zone_len = (uint16_t)zl;
	memcpy(a->u.soa.mname, mname, ml);
	a->u.soa.mname_len = (uint16_t)ml;
	memcpy(a->u.soa.rname, rname, rl);
	a->u.soa.rname_len = (uint16_t)rl;
	a->u.soa.ttl = ttl;
	a->u.soa.serial = serial;
	a->u.soa.refresh = refresh;
	a->u.soa.retry = retry;
	a->u.soa.expire = expire;
	a->u.soa.minimum = minimum;
	a->u.soa.o = o;
	a->u.soa.soa_in_authority = in_auth;
	/* sic: dnsdist 1.7 prints "NXD " + " with SOA" */
	set_desc(L, &a->desc, "%s with SOA", nxd ? "NXD " : "NODATA");
	return 1;
}

static int
l_qps_action(lua_State *L)
{
	double qps = dlb_lua_arg_num(L, 1, "QPSAction", 0, 1e9);
	struct dlb_act *a = push_act(L, DLB_ACT_QPS, false);
	char r[32];

	a->u.bucket = new_bucket(L, qps, qps);
	fmt_rate(qps, r, sizeof(r));
	set_desc(L, &a->desc, "qps limit to %s", r);
	return 1;
}

static int
l_qps_pool_action(lua_State *L)
{
	double qps = dlb_lua_arg_num(L, 1, "QPSPoolAction", 0, 1e9);
	const char *pool = dlb_lua_arg_string(L, 2, "QPSPoolAction");
	bool stop = dlb_lua_opt_arg_bool(L, 3, "QPSPoolAction", true);
	struct dlb_act *a = push_act(L, DLB_ACT_QPS_POOL, false);
	char r[32];

	a->u.qpspool.stop = stop;
	a->u.qpspool.pool = dup_str(L, pool);
	a->u.qpspool.bucket = new_bucket(L, qps, qps);
	fmt_rate(qps, r, sizeof(r));
	set_desc(L, &a->desc, "max %s to pool %s", r, pool);
	return 1;
}

/* DelayAction/DelayResponseAction: at most an hour */
static int
delay_action(lua_State *L, enum dlb_act_type type, bool response, const char *fn)
{
	unsigned ms = (unsigned)dlb_lua_arg_int(L, 1, fn, 0, 3600000);
	struct dlb_act *a = push_act(L, type, response);

	a->u.num = ms;
	set_desc(L, &a->desc, "delay by %u msec", ms);
	return 1;
}

static int
l_delay_action(lua_State *L)
{
	return delay_action(L, DLB_ACT_DELAY, false, "DelayAction");
}

static int
l_set_no_recurse_action(lua_State *L)
{
	return simple_action(L, DLB_ACT_NO_RECURSE, false, "set rd=0");
}

static int
l_set_disable_validation_action(lua_State *L)
{
	return simple_action(L, DLB_ACT_DISABLE_VALIDATION, false, "set cd=1");
}

static int
l_set_skip_cache_action(lua_State *L)
{
	return simple_action(L, DLB_ACT_SKIP_CACHE, false, "skip cache");
}

static int
l_set_tempfail_ttl_action(lua_State *L)
{
	uint32_t ttl = arg_u32(L, 1, "SetTempFailureCacheTTLAction");
	struct dlb_act *a = push_act(L, DLB_ACT_TEMPFAIL_TTL, false);

	a->u.num = ttl;
	set_desc(L, &a->desc, "set tempfailure cache ttl to %u", ttl);
	return 1;
}

static int
l_set_ecs_action(lua_State *L)
{
	struct dlb_netmask v4, v6;
	bool has_v6 = !lua_isnoneornil(L, 2);
	struct dlb_act *a;
	char t4[64], t6[64];

	dlb_lua_check_netmask(L, 1, "SetECSAction", &v4);
	if (has_v6)
		dlb_lua_check_netmask(L, 2, "SetECSAction", &v6);
	a = push_act(L, DLB_ACT_ECS, false);
	netmask_to_sockaddr(&v4, &a->u.ecs.v4);
	a->u.ecs.bits4 = v4.bits;
	dlb_netmask_format(&v4, t4, sizeof(t4));
	if (has_v6) {
		/* without one, u.ecs.v6 stays family 0: the v4 value serves every client */
		netmask_to_sockaddr(&v6, &a->u.ecs.v6);
		a->u.ecs.bits6 = v6.bits;
		dlb_netmask_format(&v6, t6, sizeof(t6));
		set_desc(L, &a->desc, "set ECS to %s / %s", t4, t6);
	} else {
		set_desc(L, &a->desc, "set ECS to %s", t4);
	}
	return 1;
}

static int
l_set_ecs_prefix_length_action(lua_State *L)
{
	unsigned v4 = (unsigned)dlb_lua_arg_int(L, 1, "SetECSPrefixLengthAction", 0, 32);
	unsigned v6 = (unsigned)dlb_lua_arg_int(L, 2, "SetECSPrefixLengthAction", 0, 128);
	struct dlb_act *a = push_act(L, DLB_ACT_ECS_PREFIX, false);

	a->u.ecsprefix.v4 = (uint16_t)v4;
	a->u.ecsprefix.v6 = (uint16_t)v6;
	set_desc(L, &a->desc, "set ECS prefix length to %u/%u", v4, v6);
	return 1;
}

static int
l_set_ecs_override_action(lua_State *L)
{
	bool v = dlb_lua_arg_bool(L, 1, "SetECSOverrideAction");
	struct dlb_act *a = push_act(L, DLB_ACT_ECS_OVERRIDE, false);

	a->u.flag = v;
	set_desc(L, &a->desc, "set ECS override to %d", v ? 1 : 0);
	return 1;
}

static int
l_set_disable_ecs_action(lua_State *L)
{
	return simple_action(L, DLB_ACT_DISABLE_ECS, false, "disable ECS");
}

static int
tag_action(lua_State *L, enum dlb_act_type type, bool response, const char *fn)
{
	const char *name = dlb_lua_arg_string(L, 1, fn);
	const char *value = dlb_lua_arg_string(L, 2, fn);
	struct dlb_act *a = push_act(L, type, response);

	a->u.tag.name = dup_str(L, name);
	a->u.tag.value = dup_str(L, value);
	set_desc(L, &a->desc, "set tag '%s' to value '%s'", name, value);
	return 1;
}

static int
l_set_tag_action(lua_State *L)
{
	return tag_action(L, DLB_ACT_TAG, false, "SetTagAction");
}

static int
l_set_edns_option_action(lua_State *L)
{
	const char *fn = "SetEDNSOptionAction";
	unsigned code = (unsigned)dlb_lua_arg_int(L, 1, fn, 0, 65535);
	size_t len;
	const char *data = luaL_checklstring(L, 2, &len);
	struct dlb_act *a;

	if (len > 65535 - 4)
		return luaL_error(L, "%s: the option data is longer than %d bytes", fn, 65535 - 4);
	a = push_act(L, DLB_ACT_SET_EDNS_OPTION, false);
	a->u.ednsopt.code = (uint16_t)code;
	a->u.ednsopt.len = (uint16_t)len;
	a->u.ednsopt.data = malloc(len > 0 ? len : 1);
	if (a->u.ednsopt.data == NULL)
		return luaL_error(L, "out of memory");
	memcpy(a->u.ednsopt.data, data, len);
	set_desc(L, &a->desc, "add EDNS Option (code=%u)", code);
	return 1;
}

static int
l_kvs_lookup_action(lua_State *L)
{
	struct dlb_kvstore *kvs;
	const struct dlb_kvs_key *key;
	const char *tag;
	struct dlb_act *a;
	char d[128];

	check_kvs_args(L, "KeyValueStoreLookupAction", &kvs, &key);
	tag = dlb_lua_arg_string(L, 3, "KeyValueStoreLookupAction");
	a = push_act(L, DLB_ACT_KVS, false);
	dlb_kvstore_ref(kvs);
	a->u.kvs.store = kvs;
	a->u.kvs.key = *key;
	a->u.kvs.tag = dup_str(L, tag);
	dlb_kvs_key_describe(key, d, sizeof(d));
	set_desc(L, &a->desc, "lookup key-value store based on '%s' and set the result in tag '%s'",
		 d, tag);
	return 1;
}

static int
max_returned_ttl_action(lua_State *L, enum dlb_act_type type, bool response, const char *fn)
{
	uint32_t max = arg_u32(L, 1, fn);
	struct dlb_act *a = push_act(L, type, response);

	a->u.num = max;
	set_desc(L, &a->desc, "cap the TTL of the returned response to %u", max);
	return 1;
}

static int
l_set_max_returned_ttl_action(lua_State *L)
{
	return max_returned_ttl_action(L, DLB_ACT_MAX_RETURNED_TTL, false,
				       "SetMaxReturnedTTLAction");
}

/*
 * LogAction / LogResponseAction. In a worker state the file is not opened:
 * the object is only built to keep the replay in step, never published, and
 * opening (and with append=false truncating) the file once per worker would
 * be wrong.
 */
static int
log_action(lua_State *L, bool response, const char *fn)
{
	int a0 = response ? 1 : 2;	/* LogResponseAction has no 'binary' argument */
	const char *path = lua_isnoneornil(L, 1) ? "" : dlb_lua_arg_string(L, 1, fn);
	bool binary = response ? false : dlb_lua_opt_arg_bool(L, 2, fn, true);
	bool append = dlb_lua_opt_arg_bool(L, a0 + 1, fn, false);
	bool buffered = dlb_lua_opt_arg_bool(L, a0 + 2, fn, true);
	bool verbose_only = dlb_lua_opt_arg_bool(L, a0 + 3, fn, true);
	bool timestamp = dlb_lua_opt_arg_bool(L, a0 + 4, fn, false);
	struct dlb_act *a = push_act(L, response ? DLB_RACT_LOG : DLB_ACT_LOG, response);
	char err[256];

	if (!dlb_lua_replaying(L)) {
		err[0] = '\0';
		a->u.log = dlb_log_open(path, binary, append, buffered, verbose_only, timestamp,
					err, sizeof(err));
		if (a->u.log == NULL)
			return luaL_error(L, "%s: %s", fn, err[0] ? err : "cannot open the log");
	}
	if (path[0] != '\0')
		set_desc(L, &a->desc, "log to %s", path);
	else
		set_desc(L, &a->desc, "log");
	return 1;
}

/*
 * TeeAction(remote[, addECS]): copy each matching UDP query to @remote
 * (port 53 by default) and count its answers; go on. In a worker state's
 * replay no socket is opened (the object is never published).
 */
static int
l_tee_action(lua_State *L)
{
	const char *remote = dlb_lua_arg_string(L, 1, "TeeAction");
	bool add_ecs = dlb_lua_opt_arg_bool(L, 2, "TeeAction", false);
	struct sockaddr_storage ss;
	socklen_t len;
	struct dlb_act *a;
	char err[256], text[64];

	if (dlb_sockaddr_parse(remote, 53, &ss, &len) != 0)
		return luaL_error(L, "TeeAction: invalid address '%s'", remote);
	/* a copy without the client's subnet would mislead the other server */
	if (add_ecs)
		return luaL_error(L, "TeeAction: addECS is not supported by dnslb");
	a = push_act(L, DLB_ACT_TEE, false);
	if (!dlb_lua_replaying(L)) {
		a->u.tee = dlb_tee_new(&ss, len, err, sizeof(err));
		if (a->u.tee == NULL)
			return luaL_error(L, "TeeAction: %s", err);
	}
	dlb_sockaddr_format((const struct sockaddr *)&ss, text, sizeof(text));
	set_desc(L, &a->desc, "tee to %s", text);
	return 1;
}

static int
l_log_action(lua_State *L)
{
	return log_action(L, false, "LogAction");
}

static int
lua_action(lua_State *L, enum dlb_act_type type, bool response, const char *fn,
	   const char *desc)
{
	struct dlb_act *a;

	dlb_lua_arg_function(L, 1, fn);
	a = push_act(L, type, response);
	a->u.lua.fn = dlb_lua_register_fn(L, 1, a->u.lua.src, sizeof(a->u.lua.src));
	set_desc(L, &a->desc, "%s", desc);
	return 1;
}

static int
l_lua_action(lua_State *L)
{
	return lua_action(L, DLB_ACT_LUA, false, "LuaAction", "Lua script");
}

/* LuaFFIAction(f): f(dq) returns a DNSAction; its string comes from set_result */
static int
l_lua_ffi_action(lua_State *L)
{
	return lua_action(L, DLB_ACT_LUA, false, "LuaFFIAction", "Lua FFI script");
}

/* The function of @code, in place of argument 1, then lua_action(). */
static int
lua_per_thread_action(lua_State *L, enum dlb_act_type type, bool response, const char *fn)
{
	dlb_lua_per_thread_fn(L, 1, fn);
	lua_replace(L, 1);
	lua_settop(L, 1);
	return lua_action(L, type, response, fn, "Lua FFI per-thread script");
}

static int
l_lua_ffi_per_thread_action(lua_State *L)
{
	return lua_per_thread_action(L, DLB_ACT_LUA, false, "LuaFFIPerThreadAction");
}

/* ---- response actions -------------------------------------------------------- */

static int
l_allow_response_action(lua_State *L)
{
	return simple_action(L, DLB_RACT_ALLOW, true, "allow");
}

static int
l_drop_response_action(lua_State *L)
{
	return simple_action(L, DLB_RACT_DROP, true, "drop");
}

static int
l_delay_response_action(lua_State *L)
{
	return delay_action(L, DLB_RACT_DELAY, true, "DelayResponseAction");
}

static int
l_log_response_action(lua_State *L)
{
	return log_action(L, true, "LogResponseAction");
}

static int
l_set_skip_cache_response_action(lua_State *L)
{
	return simple_action(L, DLB_RACT_SKIP_CACHE, true, "skip cache");
}

static int
l_set_tag_response_action(lua_State *L)
{
	return tag_action(L, DLB_RACT_TAG, true, "SetTagResponseAction");
}

/*
 * A type or a table of types at @arg into a malloc'ed array (*@types,
 * stored by the caller into the object on top of the stack before anything
 * else can raise). @return the count.
 */
static int
check_types(lua_State *L, int arg, const char *fn, uint16_t **types)
{
	lua_Integer n = list_len(L, arg);
	uint16_t *v;

	if (lua_type(L, arg) != LUA_TTABLE && lua_type(L, arg) != LUA_TNUMBER &&
	    lua_type(L, arg) != LUA_TSTRING)
		luaL_error(L, "%s: argument #%d must be a type or a table of types", fn, arg);
	if (n > 65535)
		luaL_error(L, "%s: too many types", fn);
	for (lua_Integer i = 1; i <= n; i++) {
		list_push(L, arg, i);
		check_qtype(L, -1, fn);
		lua_pop(L, 1);
	}
	*types = NULL;
	if (n == 0)
		return 0;
	v = malloc((size_t)n * sizeof(*v));
	if (v == NULL)
		luaL_error(L, "out of memory");
	for (lua_Integer i = 1; i <= n; i++) {
		list_push(L, arg, i);
		v[i - 1] = check_qtype(L, -1, fn);	/* checked above: cannot raise */
		lua_pop(L, 1);
	}
	*types = v;
	return (int)n;
}

/* The LIMIT_TTL action on top of the stack: describe it as dnsdist does. */
static void
describe_limit_ttl(lua_State *L, struct dlb_act *a)
{
	struct sb b = { .limit = DESC_LIST_MAX };
	char text[32];

	sb_printf(&b, "limit ttl (%u <= ttl <= %u", a->u.ttl.min, a->u.ttl.max);
	if (a->u.ttl.ntypes > 0) {
		sb_puts(&b, ", types in [");
		for (int i = 0; i < a->u.ttl.ntypes; i++) {
			dlb_qtype_text(a->u.ttl.types[i], text, sizeof(text));
			sb_printf(&b, "%s%s", i > 0 ? " " : "", text);
		}
		sb_puts(&b, "]");
	}
	sb_puts(&b, ")");
	sb_finish(L, &b, &a->desc);
}

static int
l_limit_ttl_response_action(lua_State *L)
{
	const char *fn = "LimitTTLResponseAction";
	uint32_t min, max;
	struct dlb_act *a;

	lua_settop(L, 3);	/* push_act() below must not land on an absent argument #3 */
	min = arg_u32(L, 1, fn);
	max = lua_isnoneornil(L, 2) ? UINT32_MAX : arg_u32(L, 2, fn);
	a = push_act(L, DLB_RACT_LIMIT_TTL, true);
	a->u.ttl.min = min;
	a->u.ttl.max = max;
	if (!lua_isnoneornil(L, 3)) {
		uint16_t *types;
		int n = check_types(L, 3, fn, &types);

		a->u.ttl.types = types;
		a->u.ttl.ntypes = n;
	}
	describe_limit_ttl(L, a);
	return 1;
}

static int
l_set_min_ttl_response_action(lua_State *L)
{
	uint32_t min = arg_u32(L, 1, "SetMinTTLResponseAction");
	struct dlb_act *a = push_act(L, DLB_RACT_LIMIT_TTL, true);

	a->u.ttl.min = min;
	a->u.ttl.max = UINT32_MAX;
	describe_limit_ttl(L, a);
	return 1;
}

static int
l_set_max_ttl_response_action(lua_State *L)
{
	uint32_t max = arg_u32(L, 1, "SetMaxTTLResponseAction");
	struct dlb_act *a = push_act(L, DLB_RACT_LIMIT_TTL, true);

	a->u.ttl.min = 0;
	a->u.ttl.max = max;
	describe_limit_ttl(L, a);
	return 1;
}

static int
l_set_reduced_ttl_response_action(lua_State *L)
{
	unsigned pct = (unsigned)dlb_lua_arg_int(L, 1, "SetReducedTTLResponseAction", 0, 100);
	struct dlb_act *a = push_act(L, DLB_RACT_REDUCED_TTL, true);

	a->u.num = pct;
	/* dnsdist: std::to_string(double) */
	set_desc(L, &a->desc, "reduce ttl to %f percent of its value", pct / 100.0 * 100);
	return 1;
}

static int
l_set_max_returned_ttl_response_action(lua_State *L)
{
	return max_returned_ttl_action(L, DLB_RACT_MAX_RETURNED_TTL, true,
				       "SetMaxReturnedTTLResponseAction");
}

static int
l_clear_record_types_response_action(lua_State *L)
{
	const char *fn = "ClearRecordTypesResponseAction";
	struct dlb_act *a;
	uint16_t *types;
	int n;

	if (lua_isnoneornil(L, 1))
		return luaL_error(L, "%s: argument #1 must be a type or a table of types", fn);
	a = push_act(L, DLB_RACT_CLEAR_RECORD_TYPES, true);
	n = check_types(L, 1, fn, &types);
	a->u.types.types = types;
	a->u.types.ntypes = n;
	set_desc(L, &a->desc, "clear record types");
	return 1;
}

static int
l_lua_response_action(lua_State *L)
{
	return lua_action(L, DLB_RACT_LUA, true, "LuaResponseAction", "Lua response script");
}

static int
l_lua_ffi_response_action(lua_State *L)
{
	return lua_action(L, DLB_RACT_LUA, true, "LuaFFIResponseAction", "Lua FFI script");
}

static int
l_lua_ffi_per_thread_response_action(lua_State *L)
{
	return lua_per_thread_action(L, DLB_RACT_LUA, true, "LuaFFIPerThreadResponseAction");
}

/* ---- benchRule ------------------------------------------------------------- */

#define BENCH_ITEMS	1000

struct bench_item {
	uint8_t pkt[DLB_DNS_HDR + DLB_MAX_NAME + 4];
	size_t len;
	struct dlb_dnsmsg m;
	struct sockaddr_in remote;
};

/*
 * benchRule(selector[, times=100000[, suffix="powerdns.com"]]): dnsdist's
 * rule benchmark. 1000 queries for "<random number>.<suffix>" of a random
 * type (0..254) from random IPv4 clients, matched in turn @times times;
 * prints the matches and the speed. Lua selectors do not match here (the
 * console has no worker state to run them in).
 */
static int
l_bench_rule(lua_State *L)
{
	struct dlb_sel *s = to_sel(L, 1);
	lua_Integer times = dlb_lua_opt_arg_int(L, 2, "benchRule", 0, INT_MAX, 100000);
	const char *suffix = lua_isnoneornil(L, 3) ? "powerdns.com" :
			     dlb_lua_arg_string(L, 3, "benchRule");
	const struct dlb_config *cfg = dlb_daemon.cfg;
	struct bench_item *items;
	struct dlb_rng rng;
	struct timespec t0, t1;
	double udiff;
	lua_Integer matches = 0;
	char line[160];

	if (s == NULL)
		return luaL_error(L, "benchRule: argument #1 must be a DNSRule, not %s",
				  luaL_typename(L, 1));
	if (dlb_lua_silent(L))
		return 0;
	dlb_rng_init(&rng);
	items = lua_newuserdatauv(L, BENCH_ITEMS * sizeof(*items), 0);	/* freed by the GC */
	for (int i = 0; i < BENCH_ITEMS; i++) {
		struct bench_item *it = &items[i];
		char name[320];
		int n;

		snprintf(name, sizeof(name), "%u.%s", dlb_rng_u32(&rng) & 0x7fffffff, suffix);
		memset(it->pkt, 0, DLB_DNS_HDR);
		it->pkt[5] = 1;		/* qdcount */
		n = dlb_wire_name_from_text(name, it->pkt + DLB_DNS_HDR, DLB_MAX_NAME);
		if (n <= 0)
			return luaL_error(L, "benchRule: invalid suffix '%s'", suffix);
		it->len = DLB_DNS_HDR + (size_t)n;
		dlb_wr16(it->pkt + it->len, (uint16_t)dlb_rng_uniform(&rng, 0xff));
		dlb_wr16(it->pkt + it->len + 2, 1);
		it->len += 4;
		if (dlb_wire_parse_query(it->pkt, it->len, &it->m) != DLB_OK)
			return luaL_error(L, "benchRule: could not build a query for '%s'", name);
		memset(&it->remote, 0, sizeof(it->remote));
		it->remote.sin_family = AF_INET;
		it->remote.sin_addr.s_addr = dlb_rng_u32(&rng);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (lua_Integer k = 0; k < times; k++) {
		struct bench_item *it = &items[k % BENCH_ITEMS];
		struct dlb_dq dq;

		memset(&dq, 0, offsetof(struct dlb_dq, tags));
		dq.pkt = it->pkt;
		dq.len = it->len;
		dq.cap = it->len;
		dq.m = &it->m;
		dq.remote = (const struct sockaddr *)&it->remote;
		dq.local = cfg != NULL && cfg->nfrontends > 0 ?
			   (const struct sockaddr *)&cfg->frontends[0].addr : NULL;
		dq.worker = DLB_MAX_WORKERS;
		dq.cfg = cfg;
		dq.now = (double)t0.tv_sec + t0.tv_nsec / 1e9;
		dq.t_start = dq.now;
		dq.rng = &rng;
		dlb_dq_reset_decisions(&dq);
		if (dlb_sel_match(s, &dq))
			matches++;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	udiff = (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
	if (udiff <= 0)
		udiff = 0.001;
	snprintf(line, sizeof(line), "Had %lld matches out of %lld, %.1f qps, in %.1f usec",
		 (long long)matches, (long long)times, 1000000 * ((double)times / udiff), udiff);
	dlb_lua_print(L, line);
	return 0;
}

/* ---- the catalog ------------------------------------------------------------ */

enum cat_kind {
	CAT_SELECTOR = 0,
	CAT_ACTION,
	CAT_RESPONSE_ACTION,
};

struct cat_entry {
	const char *name;		/* the Lua global */
	enum cat_kind kind;
	lua_CFunction fn;
	const char *args;		/* as users read it: "(qps[, burst=qps])" */
	const char *doc;		/* one line */
	const char *alias_of;		/* deprecated: the current name (warned on use) */
};

#define ALIAS(name, fn, args, of) \
	{ name, CAT_ACTION, fn, args, "alias of " of " (deprecated 1.6 name)", of }

static const struct cat_entry catalog[] = {
	/* selectors */
	{ "AllRule", CAT_SELECTOR, l_all_rule, "()", "Matches every query.", NULL },
	{ "AndRule", CAT_SELECTOR, l_and_rule, "({selectors})",
	  "Matches when every selector of the list matches (in order, stopping at the first that "
	  "does not).", NULL },
	{ "OrRule", CAT_SELECTOR, l_or_rule, "({selectors})",
	  "Matches when any selector of the list matches (in order, stopping at the first that "
	  "does).", NULL },
	{ "NotRule", CAT_SELECTOR, l_not_rule, "(selector)",
	  "Matches when the selector does not.", NULL },
	{ "QNameRule", CAT_SELECTOR, l_qname_rule, "(name)",
	  "The qname is exactly this name (case-insensitive).", NULL },
	{ "QNameSetRule", CAT_SELECTOR, l_qname_set_rule, "(set)",
	  "The qname is one of the names of a DNSNameSet (newDNSNameSet()); exact match.", NULL },
	{ "SuffixMatchNodeRule", CAT_SELECTOR, l_suffix_match_node_rule, "(smn[, quiet=false])",
	  "The qname is at or below one of the names of a SuffixMatchNode (newSuffixMatchNode()); "
	  "quiet shortens the description to \"qname==in-set\".", NULL },
	{ "QNameSuffixRule", CAT_SELECTOR, l_qname_suffix_rule,
	  "(name|{names}|smn[, quiet=false])",
	  "The qname is at or below one of the names (dnsdist 1.9).", NULL },
	{ "RegexRule", CAT_SELECTOR, l_regex_rule, "(regex)",
	  "The qname, without its final dot, matches the POSIX extended regular expression "
	  "(case-insensitive).", NULL },
	{ "QTypeRule", CAT_SELECTOR, l_qtype_rule, "(qtype)",
	  "The qtype is this one: a number, DNSQType.X or a name such as \"AAAA\".", NULL },
	{ "QClassRule", CAT_SELECTOR, l_qclass_rule, "(qclass)",
	  "The qclass is this one (a number, DNSClass.X or a name).", NULL },
	{ "OpcodeRule", CAT_SELECTOR, l_opcode_rule, "(opcode)",
	  "The opcode is this one (a number, DNSOpcode.X or a name).", NULL },
	{ "RDRule", CAT_SELECTOR, l_rd_rule, "()", "The RD (recursion desired) bit is set.", NULL },
	{ "DNSSECRule", CAT_SELECTOR, l_dnssec_rule, "()",
	  "The DO (DNSSEC OK) bit is set.", NULL },
	{ "NetmaskGroupRule", CAT_SELECTOR, l_netmask_group_rule,
	  "(nmg|netmask|{netmasks}[, src=true[, quiet=false]])",
	  "The client's address (src=false: the address the query was sent to) is in the "
	  "NetmaskGroup or one of the netmasks.", NULL },
	{ "DSTPortRule", CAT_SELECTOR, l_dst_port_rule, "(port)",
	  "The query was sent to this port.", NULL },
	{ "TCPRule", CAT_SELECTOR, l_tcp_rule, "(tcp)",
	  "The query came over TCP (true) or UDP (false).", NULL },
	{ "MaxQPSIPRule", CAT_SELECTOR, l_max_qps_ip_rule,
	  "(qps[, v4Mask=32[, v6Mask=64[, burst=qps[, expiration=300[, cleanupDelay=60"
	  "[, scanFraction=10]]]]]])",
	  "The client's subnet (/v4Mask, /v6Mask) is over qps queries per second (a token "
	  "bucket per subnet).", NULL },
	{ "MaxQPSRule", CAT_SELECTOR, l_max_qps_rule, "(qps[, burst=qps])",
	  "Matches while the queries it sees stay under qps per second (NotRule() matches the "
	  "excess).", NULL },
	{ "ProbaRule", CAT_SELECTOR, l_proba_rule, "(probability)",
	  "Matches at random with this probability (0 to 1).", NULL },
	{ "RCodeRule", CAT_SELECTOR, l_rcode_rule, "(rcode)",
	  "The rcode (the header's 4 bits) is this one; for response rules.", NULL },
	{ "ERCodeRule", CAT_SELECTOR, l_ercode_rule, "(rcode)",
	  "The extended rcode (12 bits, with EDNS) is this one.", NULL },
	{ "EDNSOptionRule", CAT_SELECTOR, l_edns_option_rule, "(code)",
	  "The OPT record carries an option with this code.", NULL },
	{ "EDNSVersionRule", CAT_SELECTOR, l_edns_version_rule, "(version)",
	  "The EDNS version is greater than this one.", NULL },
	{ "PayloadSizeRule", CAT_SELECTOR, l_payload_size_rule, "(comparison, size)",
	  "The packet's size compares to size: \"equal\", \"greater\", \"greaterOrEqual\", "
	  "\"smaller\" or \"smallerOrEqual\" (dnsdist 1.9).", NULL },
	{ "RecordsCountRule", CAT_SELECTOR, l_records_count_rule, "(section, min, max)",
	  "The section (DNSSection.X, 0 to 3) holds between min and max records.", NULL },
	{ "RecordsTypeCountRule", CAT_SELECTOR, l_records_type_count_rule,
	  "(section, qtype, min, max)",
	  "The section holds between min and max records of this type.", NULL },
	{ "QNameLabelsCountRule", CAT_SELECTOR, l_qname_labels_count_rule, "(min, max)",
	  "The qname has fewer than min or more than max labels.", NULL },
	{ "QNameWireLengthRule", CAT_SELECTOR, l_qname_wire_length_rule, "(min, max)",
	  "The qname's wire length is below min or above max.", NULL },
	{ "TrailingDataRule", CAT_SELECTOR, l_trailing_data_rule, "()",
	  "The packet has bytes after the DNS message.", NULL },
	{ "TagRule", CAT_SELECTOR, l_tag_rule, "(name[, value])",
	  "The query carries this tag (SetTagAction, dq:setTag()), with this value if given.",
	  NULL },
	{ "PoolAvailableRule", CAT_SELECTOR, l_pool_available_rule, "(pool)",
	  "The pool has at least one server up.", NULL },
	{ "PoolOutstandingRule", CAT_SELECTOR, l_pool_outstanding_rule, "(pool, limit)",
	  "The pool's servers have more than limit queries outstanding in all.", NULL },
	{ "LuaRule", CAT_SELECTOR, l_lua_rule, "(function)",
	  "function(dq) returns true; runs in each worker's own Lua state, an error is no "
	  "match.", NULL },
	{ "LuaFFIRule", CAT_SELECTOR, l_lua_ffi_rule, "(function)",
	  "LuaRule for dnsdist's FFI functions: function(dq) returns true, calling "
	  "require('ffi').C.dnsdist_ffi_dnsquestion_* on dq (lua.md).", NULL },
	{ "LuaFFIPerThreadRule", CAT_SELECTOR, l_lua_ffi_per_thread_rule, "(code)",
	  "LuaFFIRule of the function the code returns, evaluated in each worker's state.",
	  NULL },
	{ "KeyValueStoreLookupRule", CAT_SELECTOR, l_kvs_lookup_rule, "(kvs, lookupKey)",
	  "One of the keys lookupKey makes from the query (KeyValueLookupKeyQName(), "
	  "...Suffix(), ...SourceIP(), ...Tag()) is in the Redis set or hash that kvs "
	  "(newRedisKVStore()) mirrors; see fleet.md.", NULL },
	{ "HTTPHeaderRule", CAT_SELECTOR, l_http_header_rule, "(name, regex)",
	  "A DNS over HTTPS query whose HTTP header field of this name (case-insensitive; the "
	  "first, if sent twice) matches the POSIX extended regular expression "
	  "(case-insensitive, anywhere in the value); see doh.md.", NULL },
	{ "HTTPPathRule", CAT_SELECTOR, l_http_path_rule, "(path)",
	  "A DNS over HTTPS query whose HTTP path, query string aside, is exactly this one "
	  "(case-sensitive, as the client sent it).", NULL },
	{ "HTTPPathRegexRule", CAT_SELECTOR, l_http_path_regex_rule, "(regex)",
	  "A DNS over HTTPS query whose HTTP path, query string aside, matches the POSIX "
	  "extended regular expression (case-insensitive).", NULL },
	{ "SNIRule", CAT_SELECTOR, l_sni_rule, "(name)",
	  "A DNS over TLS query whose client sent this server name (TLS SNI; exact). As in "
	  "dnsdist 1.7.3, DNS over HTTPS queries have none, and SNIRule(\"\") matches every "
	  "query without one.", NULL },
	{ "makeRule", CAT_SELECTOR, l_make_rule, "(name|netmask|{names}|{netmasks})",
	  "The selector a string or table stands for where one is expected: netmasks make a "
	  "NetmaskGroupRule, names a suffix rule (QNameSuffixRule).", NULL },

	/* query actions */
	{ "PoolAction", CAT_ACTION, l_pool_action, "(pool[, stop=true])",
	  "Send the query to this pool; stop=false sets the pool and goes on with the next "
	  "rule.", NULL },
	{ "DropAction", CAT_ACTION, l_drop_action, "()", "Drop the query.", NULL },
	{ "AllowAction", CAT_ACTION, l_allow_action, "()",
	  "Stop processing the rules and forward the query.", NULL },
	{ "NoneAction", CAT_ACTION, l_none_action, "()", "Do nothing; go on.", NULL },
	{ "ContinueAction", CAT_ACTION, l_continue_action, "(action)",
	  "Run the action, then go on with the next rule whatever it decided.", NULL },
	{ "RCodeAction", CAT_ACTION, l_rcode_action, "(rcode[, {aa=, ad=, ra=}])",
	  "Answer with this rcode (DNSRCode.X).", NULL },
	{ "HTTPStatusAction", CAT_ACTION, l_http_status_action,
	  "(status, body[, contentType=\"\"[, {aa=, ad=, ra=}]])",
	  "Answer a DNS over HTTPS query with this HTTP status and body (a 3xx: a redirection "
	  "to the body's URL); any other query goes on to the next rule (see doh.md).", NULL },
	{ "ERCodeAction", CAT_ACTION, l_ercode_action, "(rcode[, {aa=, ad=, ra=}])",
	  "Answer with this extended rcode (the upper bits in the OPT record).", NULL },
	{ "TCAction", CAT_ACTION, l_tc_action, "()",
	  "Answer with TC=1 over UDP, so the client retries over TCP (nothing over TCP).",
	  NULL },
	{ "SpoofAction", CAT_ACTION, l_spoof_action,
	  "(address|{addresses}[, {aa=, ad=, ra=, ttl=60}])",
	  "Answer A and AAAA queries with these addresses (ANY: both).", NULL },
	{ "SpoofCNAMEAction", CAT_ACTION, l_spoof_cname_action,
	  "(name[, {aa=, ad=, ra=, ttl=60}])", "Answer with a CNAME to this name.", NULL },
	{ "SpoofRawAction", CAT_ACTION, l_spoof_raw_action,
	  "(rdata|{rdatas}[, {aa=, ad=, ra=, ttl=60}])",
	  "Answer with records of the query's type holding these raw rdata.", NULL },
	{ "SpoofSVCAction", CAT_ACTION, l_spoof_svc_action,
	  "({newSVCRecordParameters(...), ...}[, {aa=, ad=, ra=, ttl=60}])",
	  "Answer with these SVCB records, with the query's type, in order, and A/AAAA records "
	  "for their targets' ipv4hint/ipv6hint addresses in the additional section.", NULL },
	{ "NegativeAndSOAAction", CAT_ACTION, l_negative_and_soa_action,
	  "(nxd, zone, ttl, mname, rname, serial, refresh, retry, expire, minimum"
	  "[, {aa=, ad=, ra=, soaInAuthoritySection=false}])",
	  "Answer NXDOMAIN (nxd) or NODATA with this SOA record (in the additional section "
	  "unless soaInAuthoritySection).", NULL },
	{ "QPSAction", CAT_ACTION, l_qps_action, "(maxqps)",
	  "Drop the queries over maxqps per second; let the others go on.", NULL },
	{ "QPSPoolAction", CAT_ACTION, l_qps_pool_action, "(maxqps, pool[, stop=true])",
	  "Send up to maxqps queries per second to the pool; the others go on.", NULL },
	{ "DelayAction", CAT_ACTION, l_delay_action, "(ms)",
	  "Delay the answer to the client by ms milliseconds (UDP only); go on.", NULL },
	{ "SetNoRecurseAction", CAT_ACTION, l_set_no_recurse_action, "()",
	  "Clear the RD bit; go on.", NULL },
	{ "SetDisableValidationAction", CAT_ACTION, l_set_disable_validation_action, "()",
	  "Set the CD bit; go on.", NULL },
	{ "SetEDNSOptionAction", CAT_ACTION, l_set_edns_option_action, "(code, data)",
	  "Add the EDNS option code with data to the query, replacing one of that code; a query "
	  "without an OPT RR gets one (payload 512), which is then removed from the answer; go on.",
	  NULL },
	{ "SetSkipCacheAction", CAT_ACTION, l_set_skip_cache_action, "()",
	  "Neither look the query up in the packet cache nor cache its answer; go on.", NULL },
	{ "SetTempFailureCacheTTLAction", CAT_ACTION, l_set_tempfail_ttl_action, "(ttl)",
	  "Cache a SERVFAIL or REFUSED answer to this query for ttl seconds; go on.", NULL },
	{ "SetECSAction", CAT_ACTION, l_set_ecs_action, "(v4netmask[, v6netmask])",
	  "Send this EDNS Client Subnet value instead of the client's (v6netmask for IPv6 "
	  "clients when given); go on.", NULL },
	{ "SetECSPrefixLengthAction", CAT_ACTION, l_set_ecs_prefix_length_action, "(v4, v6)",
	  "Use these ECS prefix lengths for this query; go on.", NULL },
	{ "SetECSOverrideAction", CAT_ACTION, l_set_ecs_override_action, "(override)",
	  "Replace (true) or keep (false) an ECS option the client sent; go on.", NULL },
	{ "SetDisableECSAction", CAT_ACTION, l_set_disable_ecs_action, "()",
	  "Add no ECS option to this query; go on.", NULL },
	{ "SetTagAction", CAT_ACTION, l_set_tag_action, "(name, value)",
	  "Set a tag on the query (TagRule, dq:getTag()); go on.", NULL },
	{ "SetMaxReturnedTTLAction", CAT_ACTION, l_set_max_returned_ttl_action, "(max)",
	  "Cap the TTLs of the answer sent to the client, not of the cached one; go on.", NULL },
	{ "LogAction", CAT_ACTION, l_log_action,
	  "([file[, binary=true[, append=false[, buffered=true[, verboseOnly=true"
	  "[, includeTimestamp=false]]]]]])",
	  "Log the query to the file (no file: to the log, with setVerbose when verboseOnly); "
	  "go on. The object's reload() reopens the file.", NULL },
	{ "TeeAction", CAT_ACTION, l_tee_action, "(remote[, addECS=false])",
	  "Send a copy of the query (UDP only; over TCP counted in tcp-drops) to remote and "
	  "count its answers (getStats(), printStats(), the API's action-stats); go on. "
	  "addECS=true is refused.", NULL },
	{ "KeyValueStoreLookupAction", CAT_ACTION, l_kvs_lookup_action,
	  "(kvs, lookupKey, destinationTag)",
	  "Set the tag to the value of the first key found in kvs (a hash: the field's value; "
	  "a set: the member), or to \"\" when none is; go on.", NULL },
	{ "LuaAction", CAT_ACTION, l_lua_action, "(function)",
	  "function(dq) returns DNSAction.X[, \"arg\"]; runs in each worker's own Lua state, an "
	  "error answers SERVFAIL.", NULL },
	{ "LuaFFIAction", CAT_ACTION, l_lua_ffi_action, "(function)",
	  "LuaAction for dnsdist's FFI functions: function(dq) returns DNSAction.X, its string "
	  "set by dnsdist_ffi_dnsquestion_set_result (lua.md).", NULL },
	{ "LuaFFIPerThreadAction", CAT_ACTION, l_lua_ffi_per_thread_action, "(code)",
	  "LuaFFIAction of the function the code returns, evaluated in each worker's state.",
	  NULL },
	ALIAS("NoRecurseAction", l_set_no_recurse_action, "()", "SetNoRecurseAction"),
	ALIAS("DisableValidationAction", l_set_disable_validation_action, "()",
	      "SetDisableValidationAction"),
	ALIAS("SkipCacheAction", l_set_skip_cache_action, "()", "SetSkipCacheAction"),
	ALIAS("TempFailureCacheTTLAction", l_set_tempfail_ttl_action, "(ttl)",
	      "SetTempFailureCacheTTLAction"),
	ALIAS("ECSOverrideAction", l_set_ecs_override_action, "(override)",
	      "SetECSOverrideAction"),
	ALIAS("ECSPrefixLengthAction", l_set_ecs_prefix_length_action, "(v4, v6)",
	      "SetECSPrefixLengthAction"),
	ALIAS("DisableECSAction", l_set_disable_ecs_action, "()", "SetDisableECSAction"),
	ALIAS("TagAction", l_set_tag_action, "(name, value)", "SetTagAction"),
	ALIAS("SetNegativeAndSOAAction", l_negative_and_soa_action,
	      "(nxd, zone, ttl, mname, rname, serial, refresh, retry, expire, minimum[, opts])",
	      "NegativeAndSOAAction"),

	/* response actions */
	{ "AllowResponseAction", CAT_RESPONSE_ACTION, l_allow_response_action, "()",
	  "Stop processing the response rules and send the response.", NULL },
	{ "DropResponseAction", CAT_RESPONSE_ACTION, l_drop_response_action, "()",
	  "Drop the response (the client times out).", NULL },
	{ "DelayResponseAction", CAT_RESPONSE_ACTION, l_delay_response_action, "(ms)",
	  "Delay the response by ms milliseconds (UDP only); go on.", NULL },
	{ "LogResponseAction", CAT_RESPONSE_ACTION, l_log_response_action,
	  "([file[, append=false[, buffered=true[, verboseOnly=true[, includeTimestamp=false]]]]])",
	  "Log the response to the file (no file: to the log); go on. reload() reopens the "
	  "file.", NULL },
	{ "SetSkipCacheResponseAction", CAT_RESPONSE_ACTION, l_set_skip_cache_response_action,
	  "()", "Do not cache this response; go on.", NULL },
	{ "SetTagResponseAction", CAT_RESPONSE_ACTION, l_set_tag_response_action,
	  "(name, value)", "Set a tag; go on.", NULL },
	{ "TagResponseAction", CAT_RESPONSE_ACTION, l_set_tag_response_action,
	  "(name, value)", "alias of SetTagResponseAction (deprecated 1.6 name)",
	  "SetTagResponseAction" },
	{ "LimitTTLResponseAction", CAT_RESPONSE_ACTION, l_limit_ttl_response_action,
	  "(min[, max=4294967295[, {qtypes}]])",
	  "Raise TTLs below min and lower TTLs above max (of these types only, if given); go on.",
	  NULL },
	{ "SetMinTTLResponseAction", CAT_RESPONSE_ACTION, l_set_min_ttl_response_action,
	  "(min)", "Raise TTLs below min to min; go on.", NULL },
	{ "SetMaxTTLResponseAction", CAT_RESPONSE_ACTION, l_set_max_ttl_response_action,
	  "(max)", "Lower TTLs above max to max; go on.", NULL },
	{ "SetReducedTTLResponseAction", CAT_RESPONSE_ACTION,
	  l_set_reduced_ttl_response_action, "(percent)",
	  "Scale every TTL to this percentage of its value; go on.", NULL },
	{ "SetMaxReturnedTTLResponseAction", CAT_RESPONSE_ACTION,
	  l_set_max_returned_ttl_response_action, "(max)",
	  "Cap the TTLs sent to the client after the response is cached; go on.", NULL },
	{ "ClearRecordTypesResponseAction", CAT_RESPONSE_ACTION,
	  l_clear_record_types_response_action, "(qtype|{qtypes})",
	  "Remove the records of these types from the response (compression pointers re-pointed; "
	  "a response whose names cannot be decoded is left as it is); go on.", NULL },
	{ "LuaResponseAction", CAT_RESPONSE_ACTION, l_lua_response_action, "(function)",
	  "function(dr) returns DNSResponseAction.X; runs in each worker's own Lua state, an "
	  "error answers SERVFAIL.", NULL },
	{ "LuaFFIResponseAction", CAT_RESPONSE_ACTION, l_lua_ffi_response_action, "(function)",
	  "LuaResponseAction for dnsdist's FFI functions (lua.md).", NULL },
	{ "LuaFFIPerThreadResponseAction", CAT_RESPONSE_ACTION,
	  l_lua_ffi_per_thread_response_action, "(code)",
	  "LuaFFIResponseAction of the function the code returns, evaluated in each worker's "
	  "state.", NULL },
};

#undef ALIAS

#define NCATALOG ((int)(sizeof(catalog) / sizeof(catalog[0])))

/* A deprecated alias: warn as dnsdist 1.7 does, then build what the current name builds. */
static int
l_deprecated(lua_State *L)
{
	const struct cat_entry *e = &catalog[lua_tointeger(L, lua_upvalueindex(1))];

	if (!dlb_lua_silent(L))
		dlb_warn("access to %s is deprecated and will be removed in a future version, "
			 "please use %s instead", e->name, e->alias_of);
	return e->fn(L);
}

/* ---- rule chains -------------------------------------------------------------- */

enum chain_op {
	OP_ADD = 0,
	OP_SHOW,
	OP_RM,
	OP_MV,
	OP_MV_TOP,
	OP_CLEAR,
	OP_TOP,
	OP_GET_TOP,
	OP_SET,
	OP__COUNT,
};

static const struct chain_def {
	enum dlb_chain_kind kind;
	const char *label;			/* in the docs */
	const char *names[OP__COUNT];		/* by enum chain_op */
} chains[DLB_CHAIN__COUNT] = {
	{ DLB_CHAIN_QUERY, "query",
	  { "addAction", "showRules", "rmRule", "mvRule", "mvRuleToTop", "clearRules",
	    "topRules", "getTopRules", "setRules" } },
	{ DLB_CHAIN_RESPONSE, "response",
	  { "addResponseAction", "showResponseRules", "rmResponseRule", "mvResponseRule",
	    "mvResponseRuleToTop", "clearResponseRules", "topResponseRules",
	    "getTopResponseRules", "setResponseRules" } },
	{ DLB_CHAIN_CACHE_HIT, "cache hit",
	  { "addCacheHitResponseAction", "showCacheHitResponseRules", "rmCacheHitResponseRule",
	    "mvCacheHitResponseRule", "mvCacheHitResponseRuleToTop",
	    "clearCacheHitResponseRules", "topCacheHitResponseRules",
	    "getTopCacheHitResponseRules", "setCacheHitResponseRules" } },
	{ DLB_CHAIN_SELF_ANSWERED, "self-answered",
	  { "addSelfAnsweredResponseAction", "showSelfAnsweredResponseRules",
	    "rmSelfAnsweredResponseRule", "mvSelfAnsweredResponseRule",
	    "mvSelfAnsweredResponseRuleToTop", "clearSelfAnsweredResponseRules",
	    "topSelfAnsweredResponseRules", "getTopSelfAnsweredResponseRules",
	    "setSelfAnsweredResponseRules" } },
	{ DLB_CHAIN_CACHE_INSERTED, "cache inserted",
	  { "addCacheInsertedResponseAction", "showCacheInsertedResponseRules",
	    "rmCacheInsertedResponseRule", "mvCacheInsertedResponseRule",
	    "mvCacheInsertedResponseRuleToTop", "clearCacheInsertedResponseRules",
	    "topCacheInsertedResponseRules", "getTopCacheInsertedResponseRules",
	    "setCacheInsertedResponseRules" } },
};

/* The chain functions' signatures and docs (written for the query chain's names). */
static const struct {
	enum chain_op op;
	const char *what;	/* the small table's row */
	const char *args;
	const char *doc;
} mgmt_docs[] = {
	{ OP_ADD, "add a rule", "(selector, action[, {name=, uuid=}])",
	  "Append a rule. The selector is a DNSRule or, as with makeRule, a name, a netmask or "
	  "a table of them; the action must suit the chain (query actions for addAction, "
	  "response actions for the others). The name (or the UUID) identifies the rule for "
	  "rmRule and in metrics." },
	{ OP_SHOW, "show", "([{showUUIDs=false, truncateRuleWidth=}])",
	  "Print the rules: position, name, matches, selector and action (with showUUIDs, the "
	  "UUID and creation order too)." },
	{ OP_RM, "remove", "(position|name|uuid)",
	  "Remove the rule at this position (from 0), or every rule with this name or UUID." },
	{ OP_MV, "move", "(from, to)",
	  "Move the rule at position from to position to (the number of rules: to the end)." },
	{ OP_MV_TOP, "move the last to the top", "()", "Move the last rule to the top." },
	{ OP_CLEAR, "clear", "()", "Remove every rule." },
	{ OP_TOP, "top rules (text)", "([n=10[, {showUUIDs=, truncateRuleWidth=}]])",
	  "Return the n rules with the most matches (0: all), as showRules' text." },
	{ OP_GET_TOP, "top rules (objects)", "([n=10])",
	  "Return the n rules with the most matches (0: all), as rule objects." },
	{ OP_SET, "replace", "({rules})",
	  "Replace the whole chain with these rule objects (newRuleAction, getTopRules)." },
};

static const struct {
	const char *name, *args, *doc;
} other_docs[] = {
	{ "newRuleAction", "(selector, action[, {name=, uuid=}])",
	  "A rule object (a DNSDistRuleAction) for setRules and its variants, not added to any "
	  "chain." },
	{ "TimedIPSetRule", "()",
	  "A set of client addresses, each until a time: `t:add(ca, seconds)` (the address, "
	  "not the port; re-adding keeps the later time), `t:cleanup()` (drop the expired), "
	  "`t:clear()`, and `t:slice()`, the selector (`Src: N ips`, N the live addresses) "
	  "for addAction. Made at the top of the config, one set is shared by every worker, "
	  "so a LuaAction can add to it." },
	{ "newSVCRecordParameters",
	  "(priority, target[, {mandatory={keys}, alpn={ids}, noDefaultAlpn=, port=, "
	  "ipv4hint={addrs}, ipv6hint={addrs}, ech=, keyN=value}])",
	  "One SVCB/HTTPS record for SpoofSVCAction: its rdata as dnsdist 1.7 writes it (the "
	  "parameters by key number; keyN gives key N a raw value)." },
	{ "benchRule", "(selector[, times=100000[, suffix=\"powerdns.com\"]])",
	  "Match the selector against 1000 made-up queries (random numbers under suffix, random "
	  "types and IPv4 clients) times times; prints `Had N matches out of times, Q qps, in U "
	  "usec`. Lua selectors do not match there." },
	{ "getCacheHitResponseRules", "([n=10])",
	  "dnsdist 1.7's name of getTopCacheHitResponseRules." },
	{ "topCacheHitRules", "([n=10[, {showUUIDs=, truncateRuleWidth=}]])",
	  "dnsdist 1.7's name of topCacheHitResponseRules." },
	{ "getAction", "(position)",
	  "The action of the query rule at this position (from 0), or nil." },
};

static const struct chain_def *
chain_up(lua_State *L)
{
	return &chains[lua_tointeger(L, lua_upvalueindex(1))];
}

/* Scratch space for a new chain, released by the GC (so an error cannot leak it). */
static struct dlb_rule **
tmp_rules(lua_State *L, size_t n)
{
	return lua_newuserdatauv(L, (n > 0 ? n : 1) * sizeof(struct dlb_rule *), 0);
}

/*
 * Publish @v[0..n) as chain @kind. At runtime workers may be walking the old
 * chain: it is retired through the config state's RCU record; before they
 * run it is freed at once. @return 0 or DLB_ENOMEM.
 */
static int
publish_rc(lua_State *L, enum dlb_chain_kind kind, struct dlb_rule *const *v, int n)
{
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);
	struct dlb_rcu_thread *rt = NULL;

	if (dlb_lua_conf_phase(lc) == DLB_LUA_PHASE_RUNNING)
		rt = dlb_lua_conf_rcu(lc);
	return dlb_rules_publish(kind, v, n, rt);
}

static void
publish(lua_State *L, const char *fn, enum dlb_chain_kind kind, struct dlb_rule *const *v, int n)
{
	if (publish_rc(L, kind, v, n) != 0)
		luaL_error(L, "%s: out of memory", fn);
}

/* Does @a suit chain @cd? If not, raise dnsdist's message. */
static void
check_chain_action(lua_State *L, const struct chain_def *cd, const char *fn,
		   const struct dlb_act *a)
{
	if (cd->kind == DLB_CHAIN_QUERY && a->response)
		luaL_error(L, "%s() can only be called with query-related actions, not "
			   "response-related ones. Are you looking for addResponseAction()?", fn);
	if (cd->kind != DLB_CHAIN_QUERY && !a->response)
		luaL_error(L, "%s() can only be called with response-related actions, not "
			   "query-related ones. Are you looking for addAction()?", fn);
}

/* A UUID in text form (8-4-4-4-12 hex digits, optionally in braces) into lowercase @out. */
static bool
parse_uuid(const char *in, char out[37])
{
	size_t len = strlen(in);
	int j = 0;

	if (len == 38 && in[0] == '{' && in[37] == '}') {
		in++;
		len = 36;
	}
	if (len != 36)
		return false;
	for (int i = 0; i < 36; i++) {
		bool dash = i == 8 || i == 13 || i == 18 || i == 23;

		if (dash ? in[i] != '-' : !isxdigit((unsigned char)in[i]))
			return false;
		out[j++] = (char)tolower((unsigned char)in[i]);
	}
	out[36] = '\0';
	return true;
}

static const char *const rule_keys[] = { "name", "uuid", NULL };

/* {name=, uuid=} at @arg into @name (64) and @uuid (40, "" if none). */
static void
rule_opts(lua_State *L, int arg, const char *fn, char *name, char *uuid)
{
	int t = dlb_lua_opt_table(L, arg, fn);

	name[0] = '\0';
	uuid[0] = '\0';
	if (t == 0)
		return;
	dlb_lua_warn_unknown_keys(L, t, fn, "option", rule_keys);
	if (lua_getfield(L, t, "name") != LUA_TNIL) {
		size_t len;
		const char *s;

		if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER)
			luaL_error(L, "%s: 'name' must be a string", fn);
		s = lua_tolstring(L, -1, &len);
		if (len > 63)
			luaL_error(L, "%s: 'name' is longer than 63 characters", fn);
		memcpy(name, s, len + 1);
	}
	lua_pop(L, 1);
	if (lua_getfield(L, t, "uuid") != LUA_TNIL) {
		if (lua_type(L, -1) != LUA_TSTRING || !parse_uuid(lua_tostring(L, -1), uuid))
			luaL_error(L, "%s: invalid uuid string '%s'", fn,
				   luaL_tolstring(L, -1, NULL));
	}
	lua_pop(L, 1);
}

static int
l_chain_add(lua_State *L)
{
	const struct chain_def *cd = chain_up(L);
	const char *fn = cd->names[OP_ADD];
	struct dlb_sel *s;
	struct dlb_act *a;
	const struct dlb_chain *c;
	struct dlb_rule **v, *r;
	char name[64], uuid[40];
	int rc;

	lua_settop(L, 3);	/* make_rule pushes: keep the options at 3 */
	s = make_rule(L, 1, fn);
	a = to_act(L, 2);
	if (a == NULL)
		return luaL_error(L, "%s: argument #2 must be an action, not %s", fn,
				  luaL_typename(L, 2));
	check_chain_action(L, cd, fn, a);
	rule_opts(L, 3, fn, name, uuid);
	if (dlb_lua_replaying(L))
		return 0;
	c = dlb_rules_chain(cd->kind);
	v = tmp_rules(L, (size_t)c->n + 1);
	memcpy(v, c->v, (size_t)c->n * sizeof(v[0]));
	r = dlb_rule_new(s, a, name, uuid[0] ? uuid : NULL);
	if (r == NULL)
		return luaL_error(L, "%s: out of memory", fn);
	v[c->n] = r;
	rc = publish_rc(L, cd->kind, v, c->n + 1);
	dlb_rule_unref(r);		/* the chain holds it now */
	if (rc != 0)
		return luaL_error(L, "%s: out of memory", fn);
	return 0;
}

/* {showUUIDs=, truncateRuleWidth=} at @arg */
static void
show_opts(lua_State *L, int arg, const char *fn, bool *uuids, lua_Integer *trunc)
{
	static const char *const keys[] = { "showUUIDs", "truncateRuleWidth", NULL };
	int t = dlb_lua_opt_table(L, arg, fn);

	*uuids = false;
	*trunc = -1;
	if (t == 0)
		return;
	dlb_lua_warn_unknown_keys(L, t, fn, "option", keys);
	dlb_lua_opt_bool(L, t, fn, "showUUIDs", uuids);
	dlb_lua_opt_integer(L, t, fn, "truncateRuleWidth", -1, INT_MAX, trunc);
}

/* dnsdist's "%-56s": the selector's description, cut at @trunc (-1: whole), padded. */
static void
sb_rule_desc(struct sb *b, const char *desc, lua_Integer trunc)
{
	size_t len = strlen(desc);

	if (trunc >= 0 && (size_t)trunc < len)
		len = (size_t)trunc;
	sb_add(b, desc, len);
	for (; len < 56; len++)
		sb_add(b, " ", 1);
}

/*
 * dnsdist 1.7's rulesToString: a header, then one line per rule, each ending
 * in "\n". Pushes the text.
 */
static void
push_rules_text(lua_State *L, struct dlb_rule *const *v, int n, bool uuids, lua_Integer trunc)
{
	struct sb b = { 0 };

	if (uuids)
		sb_printf(&b, "%-3s %-30s %-38s %9s %9s %-56s %s\n", "#", "Name", "UUID",
			  "Cr. Order", "Matches", "Rule", "Action");
	else
		sb_printf(&b, "%-3s %-30s %9s %-56s %s\n", "#", "Name", "Matches", "Rule",
			  "Action");
	for (int i = 0; i < n; i++) {
		const struct dlb_rule *r = v[i];
		char buf[64];

		if (uuids)
			sb_printf(&b, "%-3d %-30s %-38s %9llu %9llu ", i, r->name, r->uuid,
				  (unsigned long long)r->creation,
				  (unsigned long long)dlb_rule_hits(r));
		else
			sb_printf(&b, "%-3d %-30s %9llu ", i, r->name,
				  (unsigned long long)dlb_rule_hits(r));
		sb_rule_desc(&b, dlb_sel_desc(r->sel, buf, sizeof(buf)), trunc);
		sb_puts(&b, " ");
		sb_puts(&b, r->act->desc ? r->act->desc : "");
		sb_puts(&b, "\n");
	}
	if (dlb_buf_failed(&b.b)) {
		dlb_buf_deinit(&b.b);
		luaL_error(L, "out of memory");
	}
	lua_pushlstring(L, b.b.p ? b.b.p : "", b.b.len);
	dlb_buf_deinit(&b.b);
}

static int
l_chain_show(lua_State *L)
{
	const struct chain_def *cd = chain_up(L);
	const struct dlb_chain *c;
	lua_Integer trunc;
	bool uuids;
	const char *text, *nl;
	int ti;

	show_opts(L, 1, cd->names[OP_SHOW], &uuids, &trunc);
	if (dlb_lua_silent(L))
		return 0;
	c = dlb_rules_chain(cd->kind);
	push_rules_text(L, c->v, c->n, uuids, trunc);
	ti = lua_gettop(L);
	/* one print per line, as the console shows them */
	for (text = lua_tostring(L, ti); (nl = strchr(text, '\n')) != NULL; text = nl + 1) {
		lua_pushlstring(L, text, (size_t)(nl - text));
		dlb_lua_print(L, lua_tostring(L, -1));
		lua_pop(L, 1);
	}
	return 0;
}

/* Print dnsdist's "Error: ..." line (these are messages, not Lua errors, in dnsdist). */
static void
print_error(lua_State *L, const char *msg)
{
	if (!dlb_lua_silent(L))
		dlb_lua_print(L, msg);
}

static int
l_chain_rm(lua_State *L)
{
	const struct chain_def *cd = chain_up(L);
	const char *fn = cd->names[OP_RM];
	const struct dlb_chain *c;
	struct dlb_rule **v;
	int n = 0;

	if (lua_type(L, 1) == LUA_TNUMBER) {
		lua_Integer pos = dlb_lua_arg_int(L, 1, fn, 0, LUA_MAXINTEGER);

		if (dlb_lua_replaying(L))
			return 0;
		c = dlb_rules_chain(cd->kind);
		if (pos >= c->n) {
			print_error(L, "Error: attempt to delete non-existing rule");
			return 0;
		}
		v = tmp_rules(L, (size_t)c->n);
		for (int i = 0; i < c->n; i++)
			if (i != pos)
				v[n++] = c->v[i];
	} else if (lua_type(L, 1) == LUA_TSTRING) {
		const char *id = lua_tostring(L, 1);
		char uuid[37];
		bool by_uuid = parse_uuid(id, uuid);

		if (dlb_lua_replaying(L))
			return 0;
		c = dlb_rules_chain(cd->kind);
		v = tmp_rules(L, (size_t)c->n);
		/* a UUID matches by UUID only; anything else by name, every rule so named */
		for (int i = 0; i < c->n; i++)
			if (by_uuid ? strcasecmp(c->v[i]->uuid, uuid) != 0
				    : strcmp(c->v[i]->name, id) != 0)
				v[n++] = c->v[i];
		if (n == c->n) {
			print_error(L, "Error: no rule matched");
			return 0;
		}
	} else {
		return luaL_error(L, "%s: argument #1 must be a position, a name or a UUID, not %s",
				  fn, luaL_typename(L, 1));
	}
	publish(L, fn, cd->kind, v, n);
	return 0;
}

static int
l_chain_mv(lua_State *L)
{
	const struct chain_def *cd = chain_up(L);
	const char *fn = cd->names[OP_MV];
	lua_Integer from = dlb_lua_arg_int(L, 1, fn, 0, LUA_MAXINTEGER);
	lua_Integer to = dlb_lua_arg_int(L, 2, fn, 0, LUA_MAXINTEGER);
	const struct dlb_chain *c;
	struct dlb_rule **v, *subject;
	int n = 0;

	if (dlb_lua_replaying(L))
		return 0;
	c = dlb_rules_chain(cd->kind);
	if (from >= c->n || to > c->n) {
		print_error(L, "Error: attempt to move rules from/to invalid index");
		return 0;
	}
	/* dnsdist: erase from, then insert at to (one less when it was after from) */
	subject = c->v[from];
	v = tmp_rules(L, (size_t)c->n);
	for (int i = 0; i < c->n; i++)
		if (i != from)
			v[n++] = c->v[i];
	if (to > n) {
		v[n++] = subject;
	} else {
		if (from < to)
			to--;
		memmove(&v[to + 1], &v[to], (size_t)(n - to) * sizeof(v[0]));
		v[to] = subject;
		n++;
	}
	publish(L, fn, cd->kind, v, n);
	return 0;
}

static int
l_chain_mv_top(lua_State *L)
{
	const struct chain_def *cd = chain_up(L);
	const struct dlb_chain *c;
	struct dlb_rule **v;

	if (dlb_lua_replaying(L))
		return 0;
	c = dlb_rules_chain(cd->kind);
	if (c->n == 0)
		return 0;
	v = tmp_rules(L, (size_t)c->n);
	v[0] = c->v[c->n - 1];
	memcpy(&v[1], c->v, (size_t)(c->n - 1) * sizeof(v[0]));
	publish(L, cd->names[OP_MV_TOP], cd->kind, v, c->n);
	return 0;
}

static int
l_chain_clear(lua_State *L)
{
	const struct chain_def *cd = chain_up(L);

	if (dlb_lua_replaying(L))
		return 0;
	publish(L, cd->names[OP_CLEAR], cd->kind, NULL, 0);
	return 0;
}

struct ranked {
	struct dlb_rule *r;
	uint64_t hits;
	int pos;
};

static int
ranked_cmp(const void *pa, const void *pb)
{
	const struct ranked *a = pa, *b = pb;

	if (a->hits != b->hits)
		return a->hits > b->hits ? -1 : 1;
	return a->pos - b->pos;
}

/* The @top rules of @c with the most matches (ties: in chain order) into @v. @return how many. */
static int
top_rules(lua_State *L, const struct dlb_chain *c, lua_Integer top, struct dlb_rule **v)
{
	struct ranked *rk = lua_newuserdatauv(L, (size_t)(c->n > 0 ? c->n : 1) * sizeof(*rk), 0);
	int n = 0;

	for (int i = 0; i < c->n; i++) {
		rk[i].r = c->v[i];
		rk[i].hits = dlb_rule_hits(c->v[i]);
		rk[i].pos = i;
	}
	qsort(rk, (size_t)c->n, sizeof(*rk), ranked_cmp);
	/* as dnsdist's loop, which stops when the count reaches top: 0 means all */
	for (int i = 0; i < c->n && (top == 0 || i < top); i++)
		v[n++] = rk[i].r;
	lua_pop(L, 1);
	return n;
}

static int
l_chain_top(lua_State *L)
{
	const struct chain_def *cd = chain_up(L);
	const char *fn = cd->names[OP_TOP];
	lua_Integer top = dlb_lua_opt_arg_int(L, 1, fn, 0, INT_MAX, 10), trunc;
	const struct dlb_chain *c = dlb_rules_chain(cd->kind);
	struct dlb_rule **v;
	bool uuids;
	int n;

	show_opts(L, 2, fn, &uuids, &trunc);
	v = tmp_rules(L, (size_t)c->n);
	n = top_rules(L, c, top, v);
	push_rules_text(L, v, n, uuids, trunc);
	return 1;
}

static int
l_chain_get_top(lua_State *L)
{
	const struct chain_def *cd = chain_up(L);
	lua_Integer top = dlb_lua_opt_arg_int(L, 1, cd->names[OP_GET_TOP], 0, INT_MAX, 10);
	const struct dlb_chain *c = dlb_rules_chain(cd->kind);
	struct dlb_rule **v = tmp_rules(L, (size_t)c->n);
	int n = top_rules(L, c, top, v);

	lua_createtable(L, n, 0);
	for (int i = 0; i < n; i++) {
		push_rule_ref(L, v[i]);
		lua_rawseti(L, -2, i + 1);
	}
	return 1;
}

static int
l_chain_set(lua_State *L)
{
	const struct chain_def *cd = chain_up(L);
	const char *fn = cd->names[OP_SET];
	struct dlb_rule **v;
	lua_Integer n;

	if (lua_type(L, 1) != LUA_TTABLE)
		return luaL_error(L, "%s: argument #1 must be a table of rules (newRuleAction())",
				  fn);
	n = (lua_Integer)lua_rawlen(L, 1);
	if (n > INT_MAX / (lua_Integer)sizeof(void *))
		return luaL_error(L, "%s: too many rules", fn);
	v = tmp_rules(L, (size_t)n);
	for (lua_Integer i = 1; i <= n; i++) {
		struct dlb_rule *r;

		lua_rawgeti(L, 1, i);
		r = to_rule(L, -1);
		if (r == NULL)
			return luaL_error(L, "%s: element #%I must be a rule (newRuleAction()), "
					  "not %s", fn, i, luaL_typename(L, -1));
		check_chain_action(L, cd, fn, r->act);
		lua_pop(L, 1);
		v[i - 1] = r;	/* the table keeps the box (and its reference) alive */
	}
	if (dlb_lua_replaying(L))
		return 0;
	publish(L, fn, cd->kind, v, (int)n);
	return 0;
}

static int
l_new_rule_action(lua_State *L)
{
	const char *fn = "newRuleAction";
	struct dlb_sel *s;
	struct dlb_act *a;
	struct rule_box *b;
	char name[64], uuid[40];

	lua_settop(L, 3);	/* make_rule pushes: keep the options at 3 */
	s = make_rule(L, 1, fn);
	a = to_act(L, 2);

	if (a == NULL)
		return luaL_error(L, "%s: argument #2 must be an action, not %s", fn,
				  luaL_typename(L, 2));
	rule_opts(L, 3, fn, name, uuid);
	b = lua_newuserdatauv(L, sizeof(*b), 0);
	b->r = NULL;
	luaL_setmetatable(L, MT_RULE);
	b->r = dlb_rule_new(s, a, name, uuid[0] ? uuid : NULL);
	if (b->r == NULL)
		return luaL_error(L, "%s: out of memory", fn);
	return 1;
}

static int
l_get_action(lua_State *L)
{
	lua_Integer pos = dlb_lua_arg_int(L, 1, "getAction", 0, LUA_MAXINTEGER);
	const struct dlb_chain *c = dlb_rules_chain(DLB_CHAIN_QUERY);

	if (pos >= c->n)
		lua_pushnil(L);
	else
		push_act_ref(L, c->v[pos]->act);
	return 1;
}

/* ---- registration ------------------------------------------------------------- */

static const lua_CFunction chain_fns[OP__COUNT] = {
	[OP_ADD] = l_chain_add,
	[OP_SHOW] = l_chain_show,
	[OP_RM] = l_chain_rm,
	[OP_MV] = l_chain_mv,
	[OP_MV_TOP] = l_chain_mv_top,
	[OP_CLEAR] = l_chain_clear,
	[OP_TOP] = l_chain_top,
	[OP_GET_TOP] = l_chain_get_top,
	[OP_SET] = l_chain_set,
};

/* Metatable @name: @methods (NULL: none) as __index, @gc and @tostring. */
static void
new_metatable(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction gc,
	      lua_CFunction tostring)
{
	luaL_newmetatable(L, name);
	if (methods != NULL) {
		lua_newtable(L);
		luaL_setfuncs(L, methods, 0);
		lua_setfield(L, -2, "__index");
	}
	lua_pushcfunction(L, gc);
	lua_setfield(L, -2, "__gc");
	lua_pushcfunction(L, tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pop(L, 1);
}

static void
register_metatables(lua_State *L)
{
	static const luaL_Reg sel_methods[] = {
		{ "toString", l_sel_tostring },
		{ NULL, NULL },
	};
	/* dnsdist 1.7: every DNSAction has these; a DNSResponseAction only reload() */
	static const luaL_Reg act_methods[] = {
		{ "printStats", l_act_print_stats },
		{ "getStats", l_act_get_stats },
		{ "reload", l_act_reload },
		{ NULL, NULL },
	};
	static const luaL_Reg ract_methods[] = {
		{ "reload", l_act_reload },
		{ NULL, NULL },
	};
	static const luaL_Reg tips_methods[] = {
		{ "add", l_tips_add },
		{ "clear", l_tips_clear },
		{ "cleanup", l_tips_cleanup },
		{ "slice", l_tips_slice },
		{ NULL, NULL },
	};

	new_metatable(L, MT_SEL, sel_methods, l_sel_gc, l_sel_tostring);
	new_metatable(L, MT_ACT, act_methods, l_act_gc, l_act_tostring);
	new_metatable(L, MT_RACT, ract_methods, l_act_gc, l_act_tostring);
	new_metatable(L, MT_RULE, NULL, l_rule_gc, l_rule_tostring);
	/* no methods (1.7.3's has none either) */
	luaL_newmetatable(L, MT_SVC);
	lua_newtable(L);
	lua_setfield(L, -2, "__index");
	lua_pop(L, 1);
	/* no __tostring: 1.7.3's has none either */
	luaL_newmetatable(L, MT_TIPS);
	lua_newtable(L);
	luaL_setfuncs(L, tips_methods, 0);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, l_tips_gc);
	lua_setfield(L, -2, "__gc");
	lua_pop(L, 1);
}

void
dlb_lua_rules_register(lua_State *L)
{
	register_metatables(L);
	for (int i = 0; i < NCATALOG; i++) {
		if (catalog[i].alias_of != NULL) {
			lua_pushinteger(L, i);
			lua_pushcclosure(L, l_deprecated, 1);
		} else {
			lua_pushcfunction(L, catalog[i].fn);
		}
		lua_setglobal(L, catalog[i].name);
	}
	for (int c = 0; c < DLB_CHAIN__COUNT; c++) {
		for (int op = 0; op < OP__COUNT; op++) {
			lua_pushinteger(L, c);
			lua_pushcclosure(L, chain_fns[op], 1);
			lua_setglobal(L, chains[c].names[op]);
		}
	}
	/* dnsdist 1.7's names for two cache-hit chain functions */
	lua_pushinteger(L, DLB_CHAIN_CACHE_HIT);
	lua_pushcclosure(L, l_chain_get_top, 1);
	lua_setglobal(L, "getCacheHitResponseRules");
	lua_pushinteger(L, DLB_CHAIN_CACHE_HIT);
	lua_pushcclosure(L, l_chain_top, 1);
	lua_setglobal(L, "topCacheHitRules");
	lua_pushcfunction(L, l_timed_ipset_rule);
	lua_setglobal(L, "TimedIPSetRule");
	lua_pushcfunction(L, l_bench_rule);
	lua_setglobal(L, "benchRule");
	lua_pushcfunction(L, l_new_svc_record_parameters);
	lua_setglobal(L, "newSVCRecordParameters");
	lua_pushcfunction(L, l_new_rule_action);
	lua_setglobal(L, "newRuleAction");
	lua_pushcfunction(L, l_get_action);
	lua_setglobal(L, "getAction");
}

/* ---- the reference (docs/rules-reference.md) ---------------------------------- */

/* Markdown table cell text: '|' escaped. */
static void
md_cell(FILE *f, const char *s)
{
	for (; *s != '\0'; s++) {
		if (*s == '|')
			fputc('\\', f);
		fputc(*s, f);
	}
}

static void
md_catalog_section(FILE *f, enum cat_kind kind, const char *title, const char *intro,
		   const char *col)
{
	fprintf(f, "## %s\n\n%s\n\n| %s | Description |\n|---|---|\n", title, intro, col);
	for (int i = 0; i < NCATALOG; i++) {
		if (catalog[i].kind != kind)
			continue;
		fputs("| `", f);
		md_cell(f, catalog[i].name);
		md_cell(f, catalog[i].args);
		fputs("` | ", f);
		md_cell(f, catalog[i].doc);
		fputs(" |\n", f);
	}
	fputc('\n', f);
}

void
dlb_lua_rules_write_reference(FILE *f)
{
	fputs("# Rules reference: selectors, actions, rule management\n\n"
	      "<!-- Generated by gen_rules_reference (lua/gen_reference.c) from the catalog in\n"
	      "     lua/rules_lua.c; the docs_rules_reference test fails when they differ.\n"
	      "     Regenerate: <build>/tests/gen_rules_reference > docs/rules-reference.md -->\n\n"
	      "Every selector and action of the Lua configuration, with its arguments: `[...]`\n"
	      "marks optional ones and `=x` their defaults. The names and arguments are\n"
	      "dnsdist's (1.7, plus the later additions noted), so dnsdist configurations work\n"
	      "unchanged. Numbers may also be given as numeric strings (`\"10\"`), as dnsdist 1.7\n"
	      "accepts. `showRules()` shows each selector and action with the same description\n"
	      "dnsdist prints.\n\n"
	      "Rules run in order; the first action that stops processing (Allow, Drop, Pool,\n"
	      "the answering actions, ...) decides. Actions that \"go on\" let the next rule\n"
	      "run.\n\n",
	      f);
	md_catalog_section(f, CAT_SELECTOR, "Selectors",
			   "A selector (a `DNSRule` object; `:toString()` gives its description) "
			   "decides whether a rule applies. Wherever a selector is expected, a "
			   "name, a netmask or a table of them may be given instead (see "
			   "`makeRule`).",
			   "Selector");
	md_catalog_section(f, CAT_ACTION, "Query actions",
			   "For `addAction()` and the query chain (`DNSAction` objects). The "
			   "deprecated names still work and log a warning when used.",
			   "Action");
	md_catalog_section(f, CAT_RESPONSE_ACTION, "Response actions",
			   "For the response chains: `addResponseAction()` (responses from a "
			   "backend), `addCacheHitResponseAction()`, "
			   "`addSelfAnsweredResponseAction()` and "
			   "`addCacheInsertedResponseAction()` (`DNSResponseAction` objects). "
			   "Selectors work on responses too (`RCodeRule`, `RecordsCountRule`, "
			   "...).",
			   "Action");

	fputs("## Rule management\n\n"
	      "Five chains, each with the same functions:\n\n"
	      "| | ", f);
	for (int c = 0; c < DLB_CHAIN__COUNT; c++)
		fprintf(f, "%s%s", chains[c].label, c + 1 < DLB_CHAIN__COUNT ? " | " : " |\n");
	fputs("|---", f);
	for (int c = 0; c < DLB_CHAIN__COUNT; c++)
		fputs("|---", f);
	fputs("|\n", f);
	for (size_t d = 0; d < sizeof(mgmt_docs) / sizeof(mgmt_docs[0]); d++) {
		fprintf(f, "| %s |", mgmt_docs[d].what);
		for (int c = 0; c < DLB_CHAIN__COUNT; c++)
			fprintf(f, " `%s` |", chains[c].names[mgmt_docs[d].op]);
		fputc('\n', f);
	}
	fputs("\nAt runtime (from the console) every change is published at once, without\n"
	      "disturbing queries in flight. The functions, written with the query chain's\n"
	      "names:\n\n"
	      "| Function | Description |\n|---|---|\n", f);
	for (size_t d = 0; d < sizeof(mgmt_docs) / sizeof(mgmt_docs[0]); d++) {
		fprintf(f, "| `%s", chains[0].names[mgmt_docs[d].op]);
		md_cell(f, mgmt_docs[d].args);
		fputs("` | ", f);
		md_cell(f, mgmt_docs[d].doc);
		fputs(" |\n", f);
	}
	for (size_t d = 0; d < sizeof(other_docs) / sizeof(other_docs[0]); d++) {
		fprintf(f, "| `%s", other_docs[d].name);
		md_cell(f, other_docs[d].args);
		fputs("` | ", f);
		md_cell(f, other_docs[d].doc);
		fputs(" |\n", f);
	}
}
