/*
 * query.c - the transport-independent part of a query's life.
 */
#include "dnslb/pipeline/query.h"

#include <string.h>

#include "dnslb/pipeline/forward.h"
#include "dnslb/core/config.h"
#include "dnslb/pipeline/dynblock.h"
#include "dnslb/pipeline/l2cache.h"
#include "dnslb/pipeline/policy.h"
#include "dnslb/core/probe.h"
#include "dnslb/core/proxyproto.h"
#include "dnslb/core/qcount.h"
#include "dnslb/pipeline/rings.h"
#include "dnslb/core/wstate.h"

/* @self: count in self-answered (not for no-policy SERVFAILs, counted there). */
static enum dlb_verdict
answer_locally(struct dlb_worker *w, struct dlb_query *q, uint8_t rcode, bool self)
{
	int n = dlb_wire_build_answer(q->pkt, &q->m, rcode, &w->snap->set.selfans, q->pkt, q->cap);

	if (n < 0)
		return q->tcp ? DLB_V_CLOSE : DLB_V_DROP;
	q->len = (size_t)n;
	if (self)
		w->stats.self_answered++;
	return DLB_V_ANSWER;
}

/* Cap every TTL of the answer at @max (SetMaxReturnedTTL*): the copy sent only. */
static void
cap_ttl_visit(void *ud, uint8_t *pkt, int section, uint16_t type, uint16_t cls, size_t off)
{
	uint32_t max = *(const uint32_t *)ud;

	(void)section;
	(void)type;
	(void)cls;
	if (dlb_rd32(pkt + off) > max)
		dlb_wr32(pkt + off, max);
}

static void
cap_ttls(uint8_t *pkt, size_t len, uint32_t max)
{
	if (max > 0)
		(void)dlb_wire_walk_rrs(pkt, len, cap_ttl_visit, &max);
}

/* Header and question of an answer, for the response rules. */
static bool
parse_answer(const uint8_t *pkt, size_t len, struct dlb_dnsmsg *m)
{
	int rc = dlb_wire_parse_response_question(pkt, len, m);

	return rc == DLB_OK || rc == DLB_EEMPTY;
}

/*
 * The fields every dq (query or response view) starts with: the packet,
 * who asked and how, this worker's context, no decision taken yet. The
 * memset stops before the tags (dlb_dq_reset_decisions empties them), so
 * it stays small; the qname split is marked not done.
 */
static void
dq_base(struct dlb_worker *w, struct dlb_dq *dq, uint8_t *pkt, size_t len, size_t cap,
	struct dlb_dnsmsg *m, const struct sockaddr *remote, const struct sockaddr *local,
	bool tcp, uint64_t gen)
{
	memset(dq, 0, offsetof(struct dlb_dq, tags));
	dq->pkt = pkt;
	dq->len = len;
	dq->cap = cap;
	dq->m = m;
	dq->remote = remote;
	dq->local = local;
	dq->tcp = tcp;
	dq->worker = w->id;
	dq->lua = dlb_worker_lua(w, gen);
	dq->cfg = w->cfg;
	dq->snap = w->snap;
	dq->set = &w->snap->set;
	dq->now = dlb_worker_now(w);
	dq->t_start = dq->now;
	dq->rng = &w->rng;
	dlb_dq_reset_decisions(dq);	/* also no tags, response = false, be_index = -1 */
}

/* The response view of an answer about to go to the client of @q. */
static void
dr_from_query(struct dlb_worker *w, const struct dlb_query *q, struct dlb_dq *dr,
	      struct dlb_dnsmsg *rm)
{
	/* a local answer sits in a whole receive buffer or in scratch: it may grow */
	dq_base(w, dr, q->pkt, q->len, q->cap, rm, q->client, q->local, q->tcp, q->rs->gen);
	dr->response = true;
	if (q->tags != NULL)
		dr->tags = *q->tags;
}

/*
 * Run response chain @kind over the local answer in q->pkt. @return the
 * verdict for the caller: DLB_V_ANSWER (possibly edited, possibly SERVFAIL
 * now), or DLB_V_DROP.
 */
static enum dlb_verdict
answer_rules_run(struct dlb_worker *w, struct dlb_query *q, enum dlb_chain_kind kind,
		 const struct dlb_chain *c)
{
	struct dlb_dnsmsg rm;
	struct dlb_dq dr;
	enum dlb_verdict_r v;
	int n;

	if (!parse_answer(q->pkt, q->len, &rm))
		return DLB_V_ANSWER;
	dr_from_query(w, q, &dr, &rm);
	dr.cache_hit = kind == DLB_CHAIN_CACHE_HIT;
	v = dlb_rules_run_response(c, &dr, &w->stats);
	if (v == DLB_R_DROP)
		return DLB_V_DROP;
	q->len = dr.len;
	if (dr.delay_ms > q->delay_ms)
		q->delay_ms = dr.delay_ms;
	if (dr.max_returned_ttl > 0 &&
	    (q->max_returned_ttl == 0 || dr.max_returned_ttl < q->max_returned_ttl))
		q->max_returned_ttl = dr.max_returned_ttl;
	if (v == DLB_R_SERVFAIL) {
		/* the header and question are still the client's: answer from them */
		n = dlb_wire_build_answer(q->pkt, &q->m, DLB_RCODE_SERVFAIL, &w->snap->set.selfans,
					  q->pkt, q->cap);
		if (n < 0)
			return DLB_V_DROP;
		q->len = (size_t)n;
	}
	return DLB_V_ANSWER;
}

/* An empty chain (the usual case) costs no call. */
static inline enum dlb_verdict
answer_rules(struct dlb_worker *w, struct dlb_query *q, enum dlb_chain_kind kind)
{
	const struct dlb_chain *c = q->rs->c[kind];

	return c->n == 0 ? DLB_V_ANSWER : answer_rules_run(w, q, kind, c);
}

static void select_server(struct dlb_worker *w, struct dlb_query *q);

/*
 * Answer @q from its pool's cache if it can: a fresh entry, or an expired one
 * within setStaleCacheEntriesTTL when no backend is available (dnsdist). A
 * hit late in an entry's life also sends the query to the backend in the
 * background (prefetch), before the query bytes are overwritten. Unless
 * @selected (the server is chosen, q->be), only a fresh entry answers, and a
 * prefetch chooses the server first.
 * @return DLB_V_FORWARD on a miss, else DLB_V_ANSWER or DLB_V_DROP (a
 * cache-hit rule dropped it).
 */
static DLB_HOT enum dlb_verdict
cache_answer(struct dlb_worker *w, struct dlb_query *q, bool selected)
{
	double now = q->now;
	uint32_t stale = selected && q->be == NULL ? w->snap->set.stale_cache_ttl : 0;
	enum dlb_cache_result res;
	const struct dlb_cache_entry *e;
	uint8_t *out = q->pkt;
	const uint8_t *qname = q->pkt + q->m.qname_off;
	uint8_t qname_copy[DLB_MAX_NAME];
	size_t cap = q->cap, n;
	bool prefetch;

	e = dlb_cache_lookup(q->cache, &q->key, now, stale, &res, &prefetch, w->id);
	if (e == NULL)
		return DLB_V_FORWARD;
	if (prefetch && !selected)
		select_server(w, q);
	if (prefetch && q->be != NULL)
		dlb_forward_prefetch(w, q);
	if (q->tcp) {
		/* the TCP frame is only as big as the query: answer from scratch */
		if (q->pkt == w->scratch) {
			/* (the query itself moved there for the rules) */
			memcpy(qname_copy, qname, q->m.qname_len);
			qname = qname_copy;
		}
		out = w->scratch;
		cap = DLB_RBUF_SIZE;
	}
	n = dlb_cache_copy_out(q->cache, e, res, q->m.id, qname, now, out, cap);
	if (n == 0)
		return DLB_V_FORWARD;
	q->pkt = out;
	q->cap = cap;
	q->len = n;
	if (q->has_dq) {
		/* a rule may have changed RD or CD (SetNoRecurseAction...), so
		 * the key holds its bits and the entry may come from a client
		 * that sent others: the client's own, as dnsdist restores them */
		const uint16_t rdcd = DLB_F_RD | DLB_F_CD;

		dlb_wr16(out + 2, (uint16_t)((dlb_rd16(out + 2) & ~rdcd) | (q->orig_flags & rdcd)));
	}
	w->stats.cache_hits++;
	dlb_rings_cache_hit(q);
	return answer_rules(w, q, DLB_CHAIN_CACHE_HIT);
}

DLB_HOT enum dlb_verdict
dlb_query_cache_hit_rules(struct dlb_worker *w, struct dlb_query *q)
{
	enum dlb_verdict v = answer_rules(w, q, DLB_CHAIN_CACHE_HIT);

	if (v == DLB_V_ANSWER)
		cap_ttls(q->pkt, q->len, q->max_returned_ttl);
	return v;
}

/* The rules' view of query @q (q->dq), with no decision taken yet. */
static void
dq_init(struct dlb_worker *w, struct dlb_query *q, struct dlb_dq *dq)
{
	q->has_dq = true;
	dq_base(w, dq, q->pkt, q->len, q->cap, &q->m, q->client, q->local, q->tcp, q->rs->gen);
	dq->http = q->http;
}

/*
 * Run the query rules. @return DLB_V_FORWARD to go on (with q->pool and the
 * per-query decisions set), or the final verdict of a rule that answered or
 * dropped.
 */
static enum dlb_verdict
query_rules(struct dlb_worker *w, struct dlb_query *q, const struct dlb_chain *c,
	    struct dlb_dq *dq)
{
	enum dlb_verdict_r v;

	int n;

	if (q->tcp && q->pkt != w->scratch) {
		/* TCP frames are only as big as the query: let answers grow */
		memcpy(w->scratch, q->pkt, q->len);
		q->pkt = w->scratch;
		q->cap = DLB_RBUF_SIZE;
	}
	dq_init(w, q, dq);

	v = dlb_rules_run_query(c, dq, &w->stats);
	q->len = dq->len;
	q->delay_ms = q->tcp ? 0 : dq->delay_ms;
	q->max_returned_ttl = dq->max_returned_ttl;
	if (dq->tags.n > 0)
		q->tags = &dq->tags;
	switch (v) {
	case DLB_R_DROP:
		return DLB_V_DROP;
	case DLB_R_SERVFAIL:
		q->m.flags = q->orig_flags;	/* the client's RD and CD, whatever rules did */
		n = dlb_wire_build_answer(q->pkt, &q->m, DLB_RCODE_SERVFAIL, &w->snap->set.selfans,
					  q->pkt, q->cap);
		if (n < 0)
			return q->tcp ? DLB_V_CLOSE : DLB_V_DROP;
		q->len = (size_t)n;
		/* fall through */
	case DLB_R_ANSWER: {
		enum dlb_verdict av = answer_rules(w, q, DLB_CHAIN_SELF_ANSWERED);

		if (av == DLB_V_ANSWER)
			cap_ttls(q->pkt, q->len, q->max_returned_ttl);
		return av;
	}
	case DLB_R_CONTINUE:
	case DLB_R_FORWARD:
	default:
		break;
	}
	if (dq->pool_set)
		q->pool = dq->pool;
	q->skip_cache = dq->skip_cache;
	q->tempfail_ttl = dq->tempfail_ttl;
	return DLB_V_FORWARD;
}

/*
 * Dynamic blocks (dnslb/pipeline/dynblock.h): after the ACL and the query ring,
 * before any rule, as dnsdist 1.7's applyRulesToQuery. Nxdomain, Refused
 * and Truncate answer at once (self-answered, then the self-answered
 * response rules); NoRecurse clears RD and skips the query rules; Drop
 * drops (dyn-block-drops). @return DLB_V_FORWARD to go on, with
 * *@skip_rules; anything else is the query's verdict.
 */
static enum dlb_verdict
dynblock(struct dlb_worker *w, struct dlb_query *q, bool *skip_rules)
{
	struct dlb_dyn_verdict dv;
	int n;

	*skip_rules = false;
	if (!dlb_dyn_query(w, q->client, q->m.qname_lc, q->m.qname_len, q->m.qtype, q->tcp, &dv))
		return DLB_V_FORWARD;
	if (dv.action == DLB_DYN_NORECURSE) {
		q->m.flags &= (uint16_t)~DLB_F_RD;
		q->pkt[2] &= (uint8_t)~(DLB_F_RD >> 8);
		*skip_rules = true;
		return DLB_V_FORWARD;
	}
	if (dv.action != DLB_DYN_NXDOMAIN && dv.action != DLB_DYN_REFUSED &&
	    dv.action != DLB_DYN_TRUNCATE) {
		w->stats.dyn_block_drops++;
		return q->tcp ? DLB_V_CLOSE : DLB_V_DROP;
	}
	if (q->tcp && q->pkt != w->scratch) {
		/* TCP frames are only as big as the query: let the answer grow */
		memcpy(w->scratch, q->pkt, q->len);
		q->pkt = w->scratch;
		q->cap = DLB_RBUF_SIZE;
	}
	if (dv.action == DLB_DYN_TRUNCATE)
		n = dlb_answer_tc(q->pkt, q->len, q->cap, &q->m, &w->snap->set.selfans);
	else
		n = dlb_wire_build_answer(q->pkt, &q->m, dv.action == DLB_DYN_NXDOMAIN ?
					  DLB_RCODE_NXDOMAIN : DLB_RCODE_REFUSED,
					  &w->snap->set.selfans, q->pkt, q->cap);
	if (n < 0)
		return q->tcp ? DLB_V_CLOSE : DLB_V_DROP;
	q->len = (size_t)n;
	w->stats.self_answered++;
	return answer_rules(w, q, DLB_CHAIN_SELF_ANSWERED);
}

/* setECSOverride, or SetECSOverrideAction for this query. */
static bool
ecs_override(const struct dlb_settings *set, const struct dlb_query *q)
{
	if (q->has_dq && q->dq.ecs_override >= 0)
		return q->dq.ecs_override != 0;
	return set->ecs_override;
}

/*
 * Does ECS apply to @q? As dnsdist: when its server has useClientSubnet, or
 * (no server available) its pool has setECS(true), and no rule turned ECS
 * off (dq.useECS). SetECSAction only sets the value. The option is then
 * added unless the client sent one and setECSOverride is off.
 */
static bool
use_ecs(const struct dlb_query *q)
{
	bool use = q->be != NULL ? q->be->use_ecs
				 : __atomic_load_n(&q->pool->use_ecs, __ATOMIC_RELAXED);

	return use && !(q->has_dq && q->dq.use_ecs == 0);
}

/* The ECS option for @q into q->ecs: SetECSAction's fixed subnet, or the client's. */
static size_t
ecs_option(const struct dlb_settings *set, struct dlb_query *q)
{
	const struct sockaddr *src = q->client;
	int bits;

	if (q->has_dq && q->dq.ecs_fixed.ss_family != 0) {
		src = (const struct sockaddr *)&q->dq.ecs_fixed;
		bits = q->dq.ecs_fixed_bits;
	} else if (src->sa_family == AF_INET) {
		bits = q->has_dq && q->dq.ecs_prefix_v4 >= 0 ? q->dq.ecs_prefix_v4
							     : set->ecs_prefix_v4;
	} else {
		bits = q->has_dq && q->dq.ecs_prefix_v6 >= 0 ? q->dq.ecs_prefix_v6
							     : set->ecs_prefix_v6;
	}
	return dlb_wire_ecs_option(src, bits, q->ecs);
}

/*
 * Query counting (setQueryCount): the name as dnsdist's toLogString() writes
 * it (no final dot), or what setQueryCountFilter's function returns for it.
 * @return -1 when the filter failed: the query is dropped, as dnsdist's
 * exception drops it. Only called while counting is on.
 */
static __attribute__((noinline, cold)) int
query_count(struct dlb_worker *w, struct dlb_query *q)
{
	char name[DLB_QCOUNT_NAME_MAX + 1];
	size_t len;
	int fn = dlb_qcount_filter(q->rs->gen), n;

	if (fn > 0) {
		dq_init(w, q, &q->dq);
		n = dlb_luaw_qcount_filter(q->dq.lua, fn, &q->dq, name, sizeof(name), &len);
		q->len = q->dq.len;
		if (n < 0) {
			w->stats.lua_errors++;
			return -1;
		}
		if (n == 0)
			return 0;
	} else {
		n = dlb_wire_name_to_text(q->pkt + q->m.qname_off, q->m.qname_len, name,
					  sizeof(name));
		if (n <= 0)
			return 0;
		len = (size_t)n;
		if (len > 1 && name[len - 1] == '.')
			name[--len] = '\0';
	}
	dlb_qcount_add(w->id, name, len);
	return 0;
}

/*
 * The first part of dlb_query_process: parse, dynamic blocks, query rules
 * and the cache key (without the subnet a useClientSubnet backend adds:
 * process_tail adds it once the server is chosen). DLB_V_FORWARD: go on
 * with process_tail. *@dyn_answer: the answer is a
 * dynamic block's.
 */
static enum dlb_verdict
process_head(struct dlb_worker *w, struct dlb_query *q, bool *dyn_answer)
{
	const struct dlb_settings *set = &w->snap->set;
	const struct dlb_chain *qc;
	bool skip_rules;
	int rc;

	q->now = dlb_worker_now(w);
	q->pool = w->default_pool;
	q->skip_cache = false;
	q->tempfail_ttl = -1;
	q->delay_ms = 0;
	q->max_returned_ttl = 0;
	q->tags = NULL;
	q->has_dq = false;
	rc = dlb_wire_parse_query(q->pkt, q->len, &q->m);
	DLB_PROBE_STAGE(DLB_PROBE_PARSE);
	dlb_rings_query(w, q, rc);

	switch (rc) {
	case DLB_OK:
		break;
	case DLB_EEMPTY:
		w->stats.empty_queries++;
		if (q->m.flags & DLB_F_RD)
			w->stats.rdqueries++;
		if (set->drop_empty_queries)
			return DLB_V_DROP;
		/* dnsdist 1.7.3 counts this NOTIMP neither in self-answered nor
		 * in the latency figures (dlb_query_account_local) */
		return answer_locally(w, q, DLB_RCODE_NOTIMP, false);
	default:
		/* malformed, QR=1 or TC=1: never answer what we cannot trust */
		w->stats.noncompliant_queries++;
		return q->tcp ? DLB_V_CLOSE : DLB_V_DROP;
	}
	if (q->m.flags & DLB_F_RD)
		w->stats.rdqueries++;

	q->orig_flags = q->m.flags;
	q->udp_max = !q->m.has_opt || q->m.udp_size < 512 ? 512 : q->m.udp_size;
	if (q->udp_max > set->max_udp_answer)
		q->udp_max = set->max_udp_answer;
	q->rs = dlb_query_rules(w);
	if (__builtin_expect(dlb_qcount_enabled(), 0) && query_count(w, q) != 0)
		return q->tcp ? DLB_V_CLOSE : DLB_V_DROP;
	{
		enum dlb_verdict v = dynblock(w, q, &skip_rules);

		if (v != DLB_V_FORWARD) {
			*dyn_answer = true;
			return v;
		}
	}
	qc = q->rs->c[DLB_CHAIN_QUERY];
	if (qc->n > 0 && !skip_rules) {
		enum dlb_verdict v = query_rules(w, q, qc, &q->dq);

		if (v != DLB_V_FORWARD)
			return v;
	}
	DLB_PROBE_STAGE(DLB_PROBE_RULES);
	q->cache = q->pool != NULL && !q->skip_cache ?
		   dlb_pool_state(w->snap, q->pool, NULL)->cache : NULL;
	if (q->cache != NULL && dlb_cache_key_make(q->cache, q->pkt, &q->m, q->tcp, &q->key) != 0)
		q->cache = NULL;	/* not cacheable (AXFR, qdcount != 1, options too long, ...) */
	if (q->cache != NULL) {
		/* the set's line is rarely cached after a wake-up: start loading
		 * it now, so that it arrives while the rest of the way to the
		 * lookup (its checks' own loads included) runs */
		dlb_cache_prefetch(q->cache, &q->key);
	} else {
		/* no key: the in-flight slot still keeps the question from it */
		q->key.qtype = q->m.qtype;
		q->key.qclass = q->m.qclass;
		q->key.qname_len = q->m.qname_len;
		memcpy(q->key.qname_lc, q->m.qname_lc, q->m.qname_len);
		q->key.opts_len = 0;
	}
	DLB_PROBE_STAGE(DLB_PROBE_KEY);
	return DLB_V_FORWARD;
}

/*
 * A Lua policy (newServerPolicy, setServerPolicyLua) in this worker's own
 * state. Without a dq (no query at hand) or on a Lua error (counted in
 * lua-errors), leastOutstanding decides.
 */
static struct dlb_backend *
lua_policy(struct dlb_worker *w, const struct dlb_policy_view *v, const struct dlb_pool *pool,
	   int policy, struct dlb_dq *dq)
{
	const struct dlb_settings *set = v->set;
	int k = policy - DLB_POLICY_LUA;
	int idx;

	if (dq == NULL || k >= set->nlua_policies)
		return dlb_policy_least_outstanding(v, pool);
	idx = dlb_luaw_policy(dq->lua, set->lua_policies[k].fn, set->lua_policies[k].src, pool, dq);
	if (idx == -1) {
		w->stats.lua_errors++;
		return dlb_policy_least_outstanding(v, pool);
	}
	/* a server added at runtime that this worker has not opened yet is not eligible */
	return idx >= 0 && idx < w->nbe ? w->cfg->backends[idx] : NULL;
}

/*
 * Choose a server of @pool for query @m by the pool's policy, on this
 * worker's view (its counters, random source, roundrobin position and QPS
 * windows; the clock: the query's arrival, @now). @dq: for a Lua policy
 * (NULL: leastOutstanding decides). NULL when none is available.
 */
static struct dlb_backend *
pool_select(struct dlb_worker *w, const struct dlb_pool *pool, const struct dlb_dnsmsg *m,
	    struct dlb_dq *dq, double now)
{
	const struct dlb_policy_view v = dlb_policy_view_init(w->cfg, &w->snap->set, w->snap,
							      w->be_stats, w->qps, &w->rng,
							      &w->rr_counter, now);
	int policy = dlb_snapshot_pool_policy(w->snap, pool);

	if (policy >= DLB_POLICY_LUA && dlb_pool_state(w->snap, pool, NULL)->n > 0)
		return lua_policy(w, &v, pool, policy, dq);
	return dlb_policy_select(&v, pool, policy, m->qname_lc, m->qname_len);
}

/* Choose @q's server (q->be; NULL when none is available). */
static DLB_HOT void
select_server(struct dlb_worker *w, struct dlb_query *q)
{
	if (q->pool != NULL && dlb_snapshot_pool_policy(w->snap, q->pool) >= DLB_POLICY_LUA && !q->has_dq)
		dq_init(w, q, &q->dq);	/* a Lua policy gets the dq */
	q->be = q->pool != NULL ? pool_select(w, q->pool, &q->m, q->has_dq ? &q->dq : NULL, q->now)
				: NULL;
}

/*
 * May @q look in the cache before its server is chosen? dnsdist chooses first
 * (the server's useClientSubnet puts the client's subnet in the key, and
 * stale entries are served only when no server is up). A hit then costs a
 * policy run it does not need, so dnslb looks first wherever the choice
 * cannot change the lookup and leaves nothing a hit would skip: no stale
 * serving, no server of the pool adding ECS and no rule asking for it, and a
 * policy whose choice has no side effect (leastOutstanding, wrandom, whashed,
 * chashed; not roundrobin's rotation, firstAvailable's QPS accounting or a
 * Lua policy). A miss then chooses as before.
 */
static bool
lookup_first(const struct dlb_worker *w, const struct dlb_query *q)
{
	int policy;

	if (__atomic_load_n(&q->pool->necs, __ATOMIC_RELAXED) > 0 ||
	    __atomic_load_n(&q->pool->use_ecs, __ATOMIC_RELAXED) || w->snap->set.stale_cache_ttl > 0)
		return false;
	policy = dlb_snapshot_pool_policy(w->snap, q->pool);
	return policy == DLB_POLICY_LEAST_OUTSTANDING || policy == DLB_POLICY_WRANDOM ||
	       policy == DLB_POLICY_WHASHED || policy == DLB_POLICY_CHASHED;
}

static enum dlb_verdict
cache_hit(struct dlb_worker *w, struct dlb_query *q, enum dlb_verdict v)
{
	if (v == DLB_V_ANSWER) {
		cap_ttls(q->pkt, q->len, q->max_returned_ttl);
		/* an entry stored for a client that takes more: a UDP client gets
		 * what it can take, a TC=1 answer, as from the backend (dlb_query_fit_udp) */
		if (!q->tcp && q->len > 512 && q->udp_max != 0 && q->len > q->udp_max)
			q->len = dlb_query_tc_for_client(w, q->pkt, q->len);
	}
	return v;
}

/*
 * The rest of dlb_query_process after process_head: the cache and the
 * server (see lookup_first for their order). Selection stays here, not in
 * process_head, so that a query of a batch is forwarded before the next one
 * is placed (the outstanding counts of leastOutstanding and the balancing
 * factors).
 */
static enum dlb_verdict
process_tail(struct dlb_worker *w, struct dlb_query *q)
{
	const struct dlb_settings *set = &w->snap->set;
	bool looked = false;

	q->be = NULL;
	q->ecslen = 0;
	if (q->cache != NULL && lookup_first(w, q)) {
		enum dlb_verdict v = cache_answer(w, q, false);

		if (v != DLB_V_FORWARD)
			return cache_hit(w, q, v);
		looked = true;
	}
	select_server(w, q);
	q->zero_scope = false;
	if (q->client != NULL && q->pool != NULL && use_ecs(q)) {
		if (q->cache != NULL && dlb_cache_get_opts(q->cache)->parse_ecs &&
		    (q->be == NULL || !q->be->disable_zero_scope)) {
			/* zero scope (dnsdist): first the key without our ECS; an
			 * answer whose ECS has scope 0 was stored there for all */
			enum dlb_verdict v = cache_answer(w, q, true);

			if (v != DLB_V_FORWARD)
				return cache_hit(w, q, v);
			q->zero_scope = q->m.ecs_off == 0;
		}
		if (q->m.ecs_off == 0 || ecs_override(set, q))
			q->ecslen = (uint8_t)ecs_option(set, q);
	}
	if (q->cache != NULL && q->ecslen > 0 &&
	    dlb_cache_key_add_option(q->cache, &q->key, q->ecs, q->ecslen) != 0)
		q->cache = NULL;	/* no room for the subnet in the key */
	if (q->cache != NULL) {
		/* looked already: only a server that has just joined the pool
		 * with useClientSubnet changes the key */
		if (!looked || q->ecslen > 0) {
			enum dlb_verdict v = cache_answer(w, q, true);

			if (v != DLB_V_FORWARD)
				return cache_hit(w, q, v);
		}
		w->stats.cache_misses++;
	}
	if (q->be == NULL) {
		w->stats.no_policy++;
		q->m.flags = q->orig_flags;	/* the client's RD and CD, whatever rules did */
		if (q->ecslen > 0 && !q->m.has_opt) {
			/* the pool's setECS: dnsdist has put an OPT RR in the query
			 * by now, and its answer built from the query keeps one */
			q->m.has_opt = true;
			if (q->tcp && q->pkt != w->scratch) {
				/* a TCP frame is only as big as the query */
				memcpy(w->scratch, q->pkt, q->len);
				q->pkt = w->scratch;
				q->cap = DLB_RBUF_SIZE;
			}
		}
		if (set->servfail_when_no_server)
			return answer_locally(w, q, DLB_RCODE_SERVFAIL, false);
		return DLB_V_DROP;
	}
	return DLB_V_FORWARD;
}

/* Local answers feed the dynamic-block rates (not those of a block itself). */
static void
dyn_local_answer(struct dlb_worker *w, const struct dlb_query *q)
{
	dlb_dyn_answer(w, q->client, q->m.qname_lc, q->m.qname_len, DLB_RCODE(q->pkt[3]), q->len,
		       DLB_DYN_FROM_LOCAL);
}

DLB_HOT bool
dlb_query_prepare(struct dlb_worker *w, struct dlb_query *q, enum dlb_verdict *v)
{
	bool dyn_answer = false;

	*v = process_head(w, q, &dyn_answer);
	if (*v == DLB_V_FORWARD)
		return true;
	if (*v == DLB_V_ANSWER && !dyn_answer)
		dyn_local_answer(w, q);
	return false;
}

void
dlb_query_prefetch_entry(const struct dlb_query *q)
{
	if (q->cache != NULL)
		dlb_cache_prefetch_entry(q->cache, &q->key);
}

DLB_HOT enum dlb_verdict
dlb_query_finish(struct dlb_worker *w, struct dlb_query *q)
{
	enum dlb_verdict v = process_tail(w, q);

	if (v == DLB_V_ANSWER)
		dyn_local_answer(w, q);
	return v;
}

enum dlb_verdict
dlb_query_process(struct dlb_worker *w, struct dlb_query *q)
{
	enum dlb_verdict v;

	if (!dlb_query_prepare(w, q, &v))
		return v;
	return dlb_query_finish(w, q);
}

size_t
dlb_query_tc_for_client(const struct dlb_worker *w, uint8_t *pkt, size_t len)
{
	pkt[2] |= DLB_F_TC >> 8;
	return dlb_wire_truncate_tc(pkt, len, w->snap->set.selfans.add_edns);
}

size_t
dlb_query_add_ecs(const struct dlb_worker *w, const struct dlb_query *q, uint8_t *pkt, size_t len,
		  size_t cap, uint8_t *added)
{
	enum dlb_ecs_added a = DLB_ECS_NONE;

	if (q->ecslen > 0)
		len = dlb_wire_add_ecs(pkt, len, cap, &q->m, q->ecs, q->ecslen, ecs_override(&w->snap->set, q),
				       &a);
	if (q->has_dq && q->dq.edns_added)
		a = DLB_ECS_OPT_RR;	/* SetEDNSOptionAction's OPT: the answer's goes, as in dnsdist */
	*added = (uint8_t)a;
	return len;
}

const struct sockaddr *
dlb_query_client_local(const struct dlb_worker *w, const struct dlb_client *c,
		       union dlb_sockaddr *out)
{
	const struct dlb_frontend_cfg *fe;

	if (c->proto == DLB_CLIENT_INTERNAL ||
	    c->listener >= __atomic_load_n(&w->cfg->nfrontends, __ATOMIC_ACQUIRE))
		return NULL;
	fe = &w->cfg->frontends[c->listener];
	memcpy(out, &fe->addr, fe->addrlen < sizeof(*out) ? fe->addrlen : sizeof(*out));
	if (c->has_dst) {
		/* a wildcard listener: the address the client actually asked */
		if (out->sa.sa_family == AF_INET)
			out->sin.sin_addr = c->dst.v4.ipi_addr;
		else
			out->sin6.sin6_addr = c->dst.v6.ipi6_addr;
	}
	return &out->sa;
}

size_t
dlb_query_pp_header(const struct dlb_worker *w, const struct dlb_client *c, bool tcp, uint8_t *out)
{
	union dlb_sockaddr local;

	if (dlb_query_client_local(w, c, &local) == NULL)
		return dlb_pp2_local(out);
	return dlb_pp2_build(out, tcp, &c->peer.sa, &local.sa);
}

size_t
dlb_query_slot_servfail(const struct dlb_slot *s, const struct dlb_client *cl, uint8_t *buf)
{
	size_t n = DLB_DNS_HDR;

	dlb_wr16(buf, cl->orig_id);
	dlb_wr16(buf + 2, (uint16_t)(DLB_F_QR | (cl->orig_flags & (DLB_F_RD | DLB_F_CD)) |
				     (cl->orig_flags & 0x7800) | DLB_RCODE_SERVFAIL));
	dlb_wr16(buf + 4, 1);
	memset(buf + 6, 0, 6);
	memcpy(buf + n, s->qname_wire, s->key.qname_len);
	n += s->key.qname_len;
	dlb_wr16(buf + n, s->key.qtype);
	dlb_wr16(buf + n + 2, s->key.qclass);
	return n + 4;
}

DLB_HOT void
dlb_query_fill_slot(struct dlb_slot *s, const struct dlb_query *q, const struct dlb_client *c)
{
	s->be_index = q->be->index;
	s->cache = q->cache;
	s->client = *c;
	s->pool = q->pool;
	s->retried = 0;
	s->qlen = 0;
	s->ecs_added = DLB_ECS_NONE;
	s->zero_scope = q->zero_scope && q->cache != NULL ? q->ecslen : 0;
	s->tempfail_ttl = q->tempfail_ttl;
	s->delay_ms = q->delay_ms;
	s->max_returned_ttl = q->max_returned_ttl;
	if (q->tags != NULL) {
		s->tags.n = q->tags->n;
		s->tags.used = q->tags->used;
		memcpy(s->tags.buf, q->tags->buf, q->tags->used);
	} else {
		dlb_tags_clear(&s->tags);
	}
	dlb_cache_key_copy(&s->key, &q->key);
	memcpy(s->qname_wire, q->pkt + q->m.qname_off, q->m.qname_len);
}

bool
dlb_query_answer_stale(struct dlb_worker *w, const struct dlb_slot *s)
{
	const struct dlb_settings *set = &w->snap->set;
	double now = dlb_worker_now(w);
	enum dlb_cache_result res;
	const struct dlb_cache_entry *e;
	bool prefetch;
	size_t n;

	if (!set->stale_on_timeout || s->cache == NULL || s->client.proto == DLB_CLIENT_INTERNAL)
		return false;
	e = dlb_cache_lookup(s->cache, &s->key, now, set->stale_cache_ttl, &res, &prefetch, w->id);
	if (e == NULL)
		return false;
	n = dlb_cache_copy_out(s->cache, e, res, s->client.orig_id, s->qname_wire, now, w->scratch,
			       DLB_RBUF_SIZE);
	if (n == 0)
		return false;
	dlb_rings_slot(w, s, w->scratch, n, DLB_RING_BE_CACHE);
	dlb_query_account_answer(w, w->scratch, n, s->client.t_start);
	dlb_dyn_answer(w, &s->client.peer.sa, s->key.qname_lc, s->key.qname_len,
		       DLB_RCODE(w->scratch[3]), n, DLB_DYN_FROM_LOCAL);
	w->client_sink[s->client.proto]->reply(w, &s->client, w->scratch, n, false, false);
	return true;
}

static inline void
account_rcode(struct dlb_worker *w, const uint8_t *pkt)
{
	unsigned rcode = DLB_RCODE(pkt[3]);

	if (rcode == DLB_RCODE_NOERROR)
		w->stats.frontend_noerror++;
	else if (rcode == DLB_RCODE_NXDOMAIN)
		w->stats.frontend_nxdomain++;
	else if (rcode == DLB_RCODE_SERVFAIL)
		w->stats.frontend_servfail++;
}

DLB_HOT void
dlb_query_account_answer(struct dlb_worker *w, const uint8_t *pkt, size_t len, double t_start)
{
	account_rcode(w, pkt);
	dlb_stats_latency(&w->stats, dlb_worker_now(w) - t_start);
}

DLB_HOT void
dlb_query_account_local(struct dlb_worker *w, const uint8_t *pkt)
{
	account_rcode(w, pkt);
	if (!dlb_query_is_empty_notimp(pkt))
		w->local_answers++;
}

DLB_HOT void
dlb_query_account_flush(struct dlb_worker *w)
{
	if (w->local_answers > 0) {
		dlb_stats_latency_zeros(&w->stats, w->local_answers);
		w->local_answers = 0;
	}
}

/* The response view of backend answer @pkt for slot @s. */
static void
dr_from_slot(struct dlb_worker *w, const struct dlb_slot *s, uint8_t *pkt, size_t len,
	     struct dlb_dnsmsg *rm, union dlb_sockaddr *local, uint64_t gen, struct dlb_dq *dr)
{
	const struct dlb_client *c = &s->client;

	/*
	 * cap: response actions never grow the answer in place (a TCP frame is
	 * followed by the next one); Lua's setTrailingData moves it to scratch
	 */
	dq_base(w, dr, pkt, len, len, rm, &c->peer.sa, dlb_query_client_local(w, c, local),
		c->proto == DLB_CLIENT_TCP || c->proto == DLB_CLIENT_DOH, gen);
	if (pkt == w->scratch)
		dr->cap = DLB_RBUF_SIZE;
	else
		dr->spare = w->scratch;
	dr->t_start = c->t_start;
	dr->response = true;
	dr->be_index = s->be_index;
	dr->tempfail_ttl = s->tempfail_ttl;
	dr->tags = s->tags;
}

DLB_HOT const struct dlb_ruleset *
dlb_query_rules(const struct dlb_worker *w)
{
	return w->snap->rules != NULL ? w->snap->rules : dlb_rules_current();
}

size_t
dlb_query_finish_response(struct dlb_worker *w, uint8_t **pktp, size_t len,
			  const struct dlb_slot *s, uint32_t *delay_ms)
{
	struct dlb_be_stats *bs = &w->be_stats[s->be_index];
	double usec = (dlb_worker_now(w) - s->client.t_start) * 1e6;
	uint8_t *pkt = *pktp;
	uint16_t flags = dlb_rd16(pkt + 2);
	const uint16_t keep = DLB_F_RD | DLB_F_CD;
	const struct dlb_ruleset *rs = dlb_query_rules(w);
	const struct dlb_chain *rc = rs->c[DLB_CHAIN_RESPONSE];
	const struct dlb_chain *ic = rs->c[DLB_CHAIN_CACHE_INSERTED];
	struct dlb_cache *cache = s->cache;
	uint32_t max_ttl = s->max_returned_ttl;
	int32_t tempfail = s->tempfail_ttl;
	struct dlb_dnsmsg rm;
	union dlb_sockaddr local;
	struct dlb_dq dr;
	bool zero_scope = false;

	*delay_ms = s->client.proto == DLB_CLIENT_UDP ? s->delay_ms : 0;
	if (s->ecs_added != DLB_ECS_NONE) {
		int scope = -1;

		len = dlb_wire_strip_ecs(pkt, len, (enum dlb_ecs_added)s->ecs_added,
					 s->zero_scope > 0 ? &scope : NULL);
		zero_scope = scope == 0;
	}
	dlb_wr16(pkt, s->client.orig_id);
	flags = (uint16_t)((flags & ~keep) | (s->client.orig_flags & keep));
	dlb_wr16(pkt + 2, flags);
	/* fixupCase: the response matched the question (same name, any case) */
	if (w->snap->set.fixup_case && dlb_rd16(pkt + 4) > 0 && len >= 12u + s->key.qname_len)
		memcpy(pkt + 12, s->qname_wire, s->key.qname_len);

	bs->responses++;
	if (DLB_RCODE(flags) == DLB_RCODE_SERVFAIL)
		bs->servfails++;
	bs->latency_us = bs->latency_us == 0 ? usec : (127.0 * bs->latency_us + usec) / 128.0;

	if ((rc->n > 0 || ic->n > 0) && s->client.proto != DLB_CLIENT_INTERNAL &&
	    parse_answer(pkt, len, &rm)) {
		dr_from_slot(w, s, pkt, len, &rm, &local, rs->gen, &dr);
		if (rc->n > 0) {
			enum dlb_verdict_r v = dlb_rules_run_response(rc, &dr, &w->stats);

			if (v == DLB_R_DROP)
				return 0;	/* not in responses, as in dnsdist */
			pkt = dr.pkt;		/* moved to grow (setTrailingData) */
			*pktp = pkt;
			len = dr.len;
			if (dr.skip_cache)
				cache = NULL;
			tempfail = dr.tempfail_ttl;
			if (v == DLB_R_SERVFAIL) {
				/* the question the slot kept, as the client wrote it */
				len = dlb_query_slot_servfail(s, &s->client, w->scratch);
				pkt = w->scratch;
				*pktp = pkt;
				cache = NULL;
			}
			if (dr.delay_ms > 0 && s->client.proto == DLB_CLIENT_UDP)
				*delay_ms = dr.delay_ms;
			if (dr.max_returned_ttl > 0 && (max_ttl == 0 || dr.max_returned_ttl < max_ttl))
				max_ttl = dr.max_returned_ttl;
		}
	} else {
		rc = NULL;
	}
	if (cache != NULL) {
		const struct dlb_cache_key *key = &s->key;
		struct dlb_cache_key nokey;
		bool inserted;

		if (zero_scope) {
			/* scope 0: good for every client, under the key without our ECS */
			dlb_cache_key_copy(&nokey, &s->key);
			dlb_cache_key_drop_option(cache, &nokey, s->zero_scope);
			key = &nokey;
		}
		inserted = dlb_cache_insert(cache, &w->rcu, key, pkt, len, dlb_worker_now(w),
					    tempfail);
		if (inserted && w->redis != NULL)	/* the fleet's second level */
			dlb_l2_store(w, cache, key, pkt, len, dlb_worker_now(w), tempfail);

		if (inserted && ic->n > 0 && rc != NULL) {
			enum dlb_verdict_r v;

			dr.pkt = pkt;
			dr.len = len;
			dr.cap = len;
			v = dlb_rules_run_response(ic, &dr, &w->stats);
			if (v == DLB_R_DROP)
				return 0;	/* not in responses, as in dnsdist */
			len = dr.len;
			if (dr.max_returned_ttl > 0 && (max_ttl == 0 || dr.max_returned_ttl < max_ttl))
				max_ttl = dr.max_returned_ttl;
		}
	}
	if (s->client.proto == DLB_CLIENT_INTERNAL)
		return 0;	/* a prefetch is not a client query */
	cap_ttls(pkt, len, max_ttl);
	w->stats.responses++;
	if (DLB_RCODE(flags) == DLB_RCODE_SERVFAIL)
		w->stats.servfail_responses++;
	dlb_rings_slot(w, s, pkt, len, s->be_index);
	/* dnsdist 1.7.3 leaves backend answers over TCP and DoH out of the
	 * latency histogram and averages (its cache hits and own answers are in) */
	if (s->client.proto == DLB_CLIENT_TCP || s->client.proto == DLB_CLIENT_DOH)
		account_rcode(w, pkt);
	else
		dlb_query_account_answer(w, pkt, len, s->client.t_start);
	dlb_dyn_answer(w, &s->client.peer.sa, s->key.qname_lc, s->key.qname_len,
		       DLB_RCODE(pkt[3]), len, DLB_DYN_FROM_BACKEND);
	return len;
}
