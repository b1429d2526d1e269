/*
 * explain.c - explainQuery(name[, qtype[, client[, {tcp=, dnssec=, rd=}]]]):
 * run a synthetic query through the ACL and the query rules without sending
 * anything, and print each rule evaluated, which matched, what its action
 * did, the pool, the server its policy would pick, and whether the cache
 * holds an answer (dnslb; dnsdist has none).
 *
 * Nothing here has side effects on traffic: selectors and actions that would
 * (rate limiters, ProbaRule, Lua, logging) are reported as "not evaluated"
 * instead of being run; the actions that only change the query (pool,
 * flags, tags, local answers) are run on a private copy so later rules see
 * their effect. Rule match counters are not bumped. The cache lookup counts
 * as one lookup of the main thread in the cache's statistics.
 *
 * Thread: main (config state), while the workers run or not.
 */
#include "lua/explain.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "dnslb/core/cache.h"
#include "dnslb/core/config.h"
#include "dnslb/core/netmask.h"
#include "dnslb/pipeline/policy.h"
#include "dnslb/core/rcu.h"
#include "dnslb/core/stats.h"
#include "dnslb/core/util.h"
#include "dnslb/core/wire.h"
#include "lua/conf.h"
#include "rules/rules.h"

static void
out(lua_State *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One line through the global print, so the console can capture it. */
static void
out(lua_State *L, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	lua_getglobal(L, "print");
	lua_pushstring(L, line);
	lua_call(L, 1, 0);
}

/* Would evaluating @s change state that real traffic depends on, or need Lua? */
static bool
sel_has_effects(const struct dlb_sel *s)
{
	switch (s->type) {
	case DLB_SEL_AND:
	case DLB_SEL_OR:
		for (int i = 0; i < s->u.list.n; i++)
			if (sel_has_effects(s->u.list.v[i]))
				return true;
		return false;
	case DLB_SEL_NOT:
		return sel_has_effects(s->u.sub);
	case DLB_SEL_MAXQPSIP:
	case DLB_SEL_MAXQPS:
	case DLB_SEL_PROBA:
	case DLB_SEL_LUA:
		return true;
	default:
		return false;
	}
}

static bool
act_has_effects(const struct dlb_act *a)
{
	switch (a->type) {
	case DLB_ACT_CONTINUE:
		return act_has_effects(a->u.sub);
	case DLB_ACT_QPS:
	case DLB_ACT_QPS_POOL:
	case DLB_ACT_LOG:
	case DLB_ACT_LUA:
	case DLB_ACT_TEE:
		return true;
	default:
		return false;
	}
}

static const char *
verdict_text(enum dlb_verdict_r v)
{
	switch (v) {
	case DLB_R_CONTINUE:
		return "continue with the next rule";
	case DLB_R_FORWARD:
		return "stop: forward";
	case DLB_R_DROP:
		return "stop: drop";
	case DLB_R_ANSWER:
		return "stop: answered locally";
	case DLB_R_SERVFAIL:
		return "stop: answer SERVFAIL";
	}
	return "?";
}

static uint16_t
check_qtype(lua_State *L, int idx)
{
	lua_Integer t;

	if (lua_isnoneornil(L, idx))
		return 1;
	if (lua_type(L, idx) == LUA_TSTRING && !lua_isnumber(L, idx)) {
		lua_getglobal(L, "DNSQType");
		lua_getfield(L, -1, lua_tostring(L, idx));
		if (!lua_isinteger(L, -1))
			luaL_error(L, "explainQuery: unknown qtype '%s'", lua_tostring(L, idx));
		t = lua_tointeger(L, -1);
		lua_pop(L, 2);
		return (uint16_t)t;
	}
	t = luaL_checkinteger(L, idx);
	if (t < 0 || t > 65535)
		luaL_error(L, "explainQuery: qtype out of range");
	return (uint16_t)t;
}

static bool
opt_flag(lua_State *L, int t, const char *key, bool def)
{
	bool v = def;

	if (t != 0 && lua_getfield(L, t, key) != LUA_TNIL)
		v = lua_toboolean(L, -1);
	if (t != 0)
		lua_pop(L, 1);
	return v;
}

/* Build the query packet: header, question, an OPT RR with DO when @dnssec. */
static size_t
build_query(uint8_t *pkt, const uint8_t *name, size_t nlen, uint16_t qtype, bool rd, bool dnssec)
{
	size_t n = DLB_DNS_HDR;

	memset(pkt, 0, DLB_DNS_HDR);
	dlb_wr16(pkt, 0x4242);
	dlb_wr16(pkt + 2, rd ? DLB_F_RD : 0);
	dlb_wr16(pkt + 4, 1);
	memcpy(pkt + n, name, nlen);
	n += nlen;
	dlb_wr16(pkt + n, qtype);
	dlb_wr16(pkt + n + 2, 1);
	n += 4;
	if (dnssec) {
		dlb_wr16(pkt + 10, 1);
		pkt[n++] = 0;			/* root owner */
		dlb_wr16(pkt + n, 41);		/* OPT */
		dlb_wr16(pkt + n + 2, 1232);
		dlb_wr32(pkt + n + 4, 0x8000);	/* DO */
		dlb_wr16(pkt + n + 8, 0);
		n += 10;
	}
	return n;
}

/*
 * The server @pool's @policy would pick with no query in flight: the
 * policies' view with zeroed counters and fresh QPS windows, at @now.
 */
static struct dlb_backend *
policy_pick(const struct dlb_config *cfg, const struct dlb_pool *pool, int policy,
	    const struct dlb_dnsmsg *m, struct dlb_rng *rng, double now)
{
	static const struct dlb_be_stats zero[DLB_MAX_BACKENDS];
	struct dlb_qps_window *qps = calloc(DLB_MAX_BACKENDS, sizeof(*qps));
	unsigned rr = 0;
	struct dlb_policy_view v = dlb_policy_view_init(cfg, &cfg->set, NULL, zero, qps, rng, &rr, now);
	struct dlb_backend *be;

	if (qps == NULL)
		return NULL;
	be = dlb_policy_select(&v, pool, policy, m->qname_lc, m->qname_len);
	free(qps);
	return be;
}

static void
explain_cache(lua_State *L, const struct dlb_pool *pool, const uint8_t *pkt,
	      const struct dlb_dnsmsg *m, bool tcp, double now)
{
	struct dlb_rcu_thread *rt = dlb_lua_conf_rcu(dlb_lua_conf_of(L));
	struct dlb_cache_key key;
	const struct dlb_cache_entry *e;
	enum dlb_cache_result res = DLB_CACHE_MISS;
	bool prefetch;

	if (pool->cache == NULL) {
		out(L, "Cache: the pool has no packet cache");
		return;
	}
	memset(&key, 0, sizeof(key));
	key.qtype = m->qtype;
	key.qclass = m->qclass;
	key.qname_len = m->qname_len;
	memcpy(key.qname_lc, m->qname_lc, m->qname_len);
	if (dlb_cache_key_make(pool->cache, pkt, m, tcp, &key) != 0) {
		out(L, "Cache: this query is not cacheable");
		return;
	}
	if (rt == NULL) {
		out(L, "Cache: not looked up (no RCU record on this thread)");
		return;
	}
	dlb_rcu_enter(rt);
	e = dlb_cache_lookup(pool->cache, &key, now, 0, &res, &prefetch, DLB_MAX_WORKERS);
	dlb_rcu_exit(rt);
	out(L, "Cache: %s", e != NULL ? "holds a fresh answer (served from the cache)"
				       : "no fresh answer (the query goes to a server)");
}

static int
l_explain_query(lua_State *L)
{
	struct dlb_config *cfg = dlb_lua_conf_cfg(dlb_lua_conf_of(L));
	const char *name = luaL_checkstring(L, 1);
	uint16_t qtype = check_qtype(L, 2);
	const char *client = luaL_optstring(L, 3, "127.0.0.1");
	int t = lua_istable(L, 4) ? 4 : 0;
	bool tcp = opt_flag(L, t, "tcp", false);
	bool dnssec = opt_flag(L, t, "dnssec", false);
	bool rd = opt_flag(L, t, "rd", true);
	static struct dlb_rng rng;
	static bool rng_ready;
	uint8_t wire[DLB_MAX_NAME];
	struct sockaddr_storage remote;
	socklen_t rlen;
	struct dlb_dnsmsg m;
	struct dlb_dq dq;
	const struct dlb_chain *c;
	const struct dlb_pool *pool;
	struct dlb_backend *be;
	enum dlb_verdict_r v = DLB_R_FORWARD;
	struct timeval tv;
	uint8_t *pkt;
	int nlen;
	size_t len;

	if (dlb_lua_phase_throwaway(dlb_lua_conf_phase(dlb_lua_conf_of(L))))
		return 0;	/* a worker state replaying the config, or a reload: not now */
	nlen = dlb_wire_name_from_text(name, wire, sizeof(wire));
	if (nlen <= 0)
		return luaL_error(L, "explainQuery: invalid name '%s'", name);
	if (dlb_sockaddr_parse(client, 0, &remote, &rlen) != 0)
		return luaL_error(L, "explainQuery: invalid client address '%s'", client);
	if (!rng_ready) {
		dlb_rng_init(&rng);
		rng_ready = true;
	}
	pkt = lua_newuserdatauv(L, DLB_RBUF_SIZE, 0);	/* freed by the GC */
	len = build_query(pkt, wire, (size_t)nlen, qtype, rd, dnssec);
	if (dlb_wire_parse_query(pkt, len, &m) != DLB_OK)
		return luaL_error(L, "explainQuery: could not build the query");
	gettimeofday(&tv, NULL);

	out(L, "Query: %s type %u from %s over %s%s%s", name, qtype, client, tcp ? "TCP" : "UDP",
	    dnssec ? ", DO" : "", rd ? ", RD" : "");
	if (!dlb_nmg_match(&cfg->acl, (const struct sockaddr *)&remote)) {
		out(L, "ACL: the client is not in the ACL: dropped (acl-drops)");
		return 0;
	}
	out(L, "ACL: allowed");
	out(L, "Dynamic blocks: none configured");

	memset(&dq, 0, offsetof(struct dlb_dq, tags));
	dq.pkt = pkt;
	dq.len = len;
	dq.cap = DLB_RBUF_SIZE;
	dq.m = &m;
	dq.remote = (const struct sockaddr *)&remote;
	dq.local = cfg->nfrontends > 0 ? (const struct sockaddr *)&cfg->frontends[0].addr : NULL;
	dq.tcp = tcp;
	dq.worker = DLB_MAX_WORKERS;
	dq.lua = NULL;
	dq.cfg = cfg;
	dq.set = &cfg->set;	/* the main thread's: the builder values */
	dq.now = (double)tv.tv_sec + tv.tv_usec / 1e6;
	dq.t_start = dq.now;
	dq.rng = &rng;
	dlb_dq_reset_decisions(&dq);
	dlb_tags_clear(&dq.tags);

	c = dlb_rules_chain(DLB_CHAIN_QUERY);
	out(L, "Rules: %d", c->n);
	for (int i = 0; i < c->n && v != DLB_R_DROP && v != DLB_R_ANSWER && v != DLB_R_SERVFAIL; i++) {
		const struct dlb_rule *r = c->v[i];
		char buf[64];
		const char *sd = dlb_sel_desc(r->sel, buf, sizeof(buf));
		const char *ad = r->act->desc ? r->act->desc : "?";

		v = DLB_R_CONTINUE;
		if (sel_has_effects(r->sel)) {
			out(L, "  #%d %s%s%s: not evaluated here (rate limit, probability or Lua: "
			    "decided per query in the workers); assumed not to match", i,
			    r->name, r->name[0] ? " " : "", sd);
			continue;
		}
		if (!dlb_sel_match(r->sel, &dq)) {
			out(L, "  #%d %s%s%s: no match", i, r->name, r->name[0] ? " " : "", sd);
			continue;
		}
		if (act_has_effects(r->act)) {
			out(L, "  #%d %s%s%s: MATCH -> %s: not run here (logging, rate limit or Lua); "
			    "assumed to continue", i, r->name, r->name[0] ? " " : "", sd, ad);
			continue;
		}
		v = dlb_act_run(r->act, &dq);
		out(L, "  #%d %s%s%s: MATCH -> %s: %s", i, r->name, r->name[0] ? " " : "", sd, ad,
		    verdict_text(v));
		if (v == DLB_R_FORWARD)
			break;
	}
	switch (v) {
	case DLB_R_DROP:
		out(L, "Result: dropped by a rule");
		return 0;
	case DLB_R_ANSWER:
		out(L, "Result: answered by a rule (rcode %u, %zu bytes)", DLB_RCODE(dq.pkt[3]),
		    dq.len);
		return 0;
	case DLB_R_SERVFAIL:
		out(L, "Result: answered SERVFAIL by a rule");
		return 0;
	default:
		break;
	}
	pool = dq.pool_set ? dq.pool : dlb_config_find_pool(cfg, "");
	if (pool == NULL) {
		out(L, "Pool: %s does not exist or has no server: no-policy",
		    dq.pool_set ? "the chosen pool" : "the default pool");
		return 0;
	}
	{
		int up = 0, policy = dlb_config_pool_policy(cfg, pool);
		enum dlb_lua_phase ph = dlb_lua_conf_phase(dlb_lua_conf_of(L));

		for (int i = 0; i < pool->n; i++)
			up += dlb_backend_is_up(pool->members[i]);
		out(L, "Pool: \"%s\", policy %s, %d of %d server(s) up", pool->name,
		    dlb_config_policy_name(cfg, policy), up, pool->n);
		/* chashed's rings are built once the config is read: at config
		 * time (no worker reads them yet) build them for the pick */
		if (policy == DLB_POLICY_CHASHED &&
		    (ph == DLB_LUA_PHASE_CONFIG || ph == DLB_LUA_PHASE_CHECK) &&
		    dlb_config_build_rings(cfg, NULL) != 0)
			return luaL_error(L, "explainQuery: out of memory");
		be = pool->n > 0 ? policy_pick(cfg, pool, policy, &m, &rng, dq.now) : NULL;
		if (be != NULL)
			out(L, "Server: %s (%s)%s", be->name, be->addr_text,
			    policy >= DLB_POLICY_LUA ? " (a Lua policy runs in the workers: this is "
						       "leastOutstanding's pick)" :
						       " (the policy's pick with nothing in flight)");
		else
			out(L, "Server: none available: %s", cfg->set.servfail_when_no_server
				   ? "SERVFAIL (setServFailWhenNoServer)" : "dropped (no-policy)");
	}
	if (dq.skip_cache)
		out(L, "Cache: skipped (SetSkipCacheAction)");
	else
		explain_cache(L, pool, dq.pkt, &m, tcp, dq.now);
	return 0;
}

void
dlb_lua_explain_register(lua_State *L)
{
	lua_register(L, "explainQuery", l_explain_query);
}
