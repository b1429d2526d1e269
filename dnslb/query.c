/*
 * query.c - the transport-independent part of a query's life.
 */
#include "dnslb/query.h"

#include <string.h>

#include "dnslb/backend.h"
#include "dnslb/config.h"
#include "dnslb/frontend.h"
#include "dnslb/proxyproto.h"
#include "dnslb/tcp.h"
#include "dnslb/worker.h"

/* @self: count in self-answered (not for no-policy SERVFAILs, counted there). */
static enum dlb_verdict
answer_locally(struct dlb_worker *w, struct dlb_query *q, uint8_t rcode, bool self)
{
	int n = dlb_wire_build_answer(q->pkt, &q->m, rcode, &w->cfg->selfans, q->pkt, q->cap);

	if (n < 0)
		return q->tcp ? DLB_V_CLOSE : DLB_V_DROP;
	q->len = (size_t)n;
	if (self)
		w->stats.self_answered++;
	return DLB_V_ANSWER;
}

/*
 * Answer @q from its pool's cache if it can: a fresh entry, or an expired one
 * within setStaleCacheEntriesTTL when no backend is available (dnsdist). A
 * hit late in an entry's life also sends the query to the backend in the
 * background (prefetch), before the query bytes are overwritten.
 */
static bool
cache_answer(struct dlb_worker *w, struct dlb_query *q)
{
	double now = dlb_worker_now(w);
	uint32_t stale = q->be == NULL ? w->cfg->stale_cache_ttl : 0;
	enum dlb_cache_result res;
	const struct dlb_cache_entry *e;
	uint8_t *out = q->pkt;
	size_t cap = q->cap, n;
	bool prefetch;

	e = dlb_cache_lookup(q->cache, &q->key, now, stale, &res, &prefetch, w->id);
	if (e == NULL)
		return false;
	if (prefetch && q->be != NULL)
		dlb_backend_prefetch(w, q);
	if (q->tcp) {
		/* the TCP frame is only as big as the query: answer from scratch */
		out = w->scratch;
		cap = DLB_RBUF_SIZE;
	}
	n = dlb_cache_copy_out(q->cache, e, res, q->m.id, q->pkt + q->m.qname_off, now, out, cap);
	if (n == 0)
		return false;
	q->pkt = out;
	q->len = n;
	return true;
}

enum dlb_verdict
dlb_query_process(struct dlb_worker *w, struct dlb_query *q)
{
	const struct dlb_config *cfg = w->cfg;
	int rc = dlb_wire_parse_query(q->pkt, q->len, &q->m);

	switch (rc) {
	case DLB_OK:
		break;
	case DLB_EEMPTY:
		w->stats.empty_queries++;
		if (q->m.flags & DLB_F_RD)
			w->stats.rdqueries++;
		if (cfg->drop_empty_queries)
			return DLB_V_DROP;
		return answer_locally(w, q, DLB_RCODE_NOTIMP, true);
	default:
		/* malformed, QR=1 or TC=1: never answer what we cannot trust */
		w->stats.noncompliant_queries++;
		return q->tcp ? DLB_V_CLOSE : DLB_V_DROP;
	}
	if (q->m.flags & DLB_F_RD)
		w->stats.rdqueries++;

	/* rules come here (rules issue); for now every query goes to the default pool */
	q->pool = w->default_pool;
	q->be = q->pool != NULL ? dlb_pool_select(w, q->pool, &q->m) : NULL;
	q->key.qtype = q->m.qtype;
	q->key.qclass = q->m.qclass;
	q->key.qname_len = q->m.qname_len;
	memcpy(q->key.qname_lc, q->m.qname_lc, q->m.qname_len);
	q->key.opts_len = 0;
	q->cache = q->pool != NULL ? q->pool->cache : NULL;
	q->ecslen = 0;
	if (q->be != NULL && q->be->use_ecs && q->client != NULL &&
	    (q->m.ecs_off == 0 || cfg->ecs_override))
		q->ecslen = (uint8_t)dlb_wire_ecs_option(q->client,
						 q->client->sa_family == AF_INET ? cfg->ecs_prefix_v4
										 : cfg->ecs_prefix_v6,
						 q->ecs);
	if (q->cache != NULL) {
		if (dlb_cache_key_make(q->cache, q->pkt, &q->m, q->tcp, &q->key) != 0 ||
		    (q->ecslen > 0 &&
		     dlb_cache_key_add_option(q->cache, &q->key, q->ecs, q->ecslen) != 0)) {
			/* not cacheable (AXFR, qdcount != 1, options too long for a key, ...) */
			q->cache = NULL;
		} else if (cache_answer(w, q)) {
			w->stats.cache_hits++;
			return DLB_V_ANSWER;
		} else {
			w->stats.cache_misses++;
		}
	}
	if (q->be == NULL) {
		w->stats.no_policy++;
		if (cfg->servfail_when_no_server)
			return answer_locally(w, q, DLB_RCODE_SERVFAIL, false);
		return DLB_V_DROP;
	}
	return DLB_V_FORWARD;
}

bool
dlb_query_response_matches(const struct dlb_worker *w, const uint8_t *pkt, size_t len,
			   const struct dlb_slot *s)
{
	struct dlb_dnsmsg m;
	int rc = dlb_wire_parse_response_question(pkt, len, &m);
	unsigned rcode;

	if (rc != DLB_OK && rc != DLB_EEMPTY)
		return false;
	if (!(m.flags & DLB_F_QR))
		return false;
	if (rc == DLB_EEMPTY) {
		rcode = DLB_RCODE(m.flags);
		return w->cfg->allow_empty_response ||
		       (rcode != DLB_RCODE_NOERROR && rcode != DLB_RCODE_NXDOMAIN);
	}
	return m.qtype == s->key.qtype && m.qclass == s->key.qclass &&
	       m.qname_len == s->key.qname_len &&
	       memcmp(m.qname_lc, s->key.qname_lc, s->key.qname_len) == 0;
}

size_t
dlb_query_add_ecs(const struct dlb_worker *w, const struct dlb_query *q, uint8_t *pkt, size_t len,
		  size_t cap, uint8_t *added)
{
	enum dlb_ecs_added a = DLB_ECS_NONE;

	if (q->ecslen > 0)
		len = dlb_wire_add_ecs(pkt, len, cap, &q->m, q->ecs, q->ecslen, w->cfg->ecs_override,
				       &a);
	*added = (uint8_t)a;
	return len;
}

size_t
dlb_query_pp_header(const struct dlb_worker *w, const struct dlb_client *c, bool tcp, uint8_t *out)
{
	union dlb_sockaddr local;
	const struct dlb_frontend_cfg *fe;

	if (c->proto == DLB_CLIENT_INTERNAL || c->listener >= w->cfg->nfrontends)
		return dlb_pp2_local(out);
	fe = &w->cfg->frontends[c->listener];
	memcpy(&local, &fe->addr, fe->addrlen < sizeof(local) ? fe->addrlen : sizeof(local));
	if (c->has_dst) {
		/* a wildcard listener: the address the client actually asked */
		if (local.sa.sa_family == AF_INET)
			local.sin.sin_addr = c->dst.v4.ipi_addr;
		else
			local.sin6.sin6_addr = c->dst.v6.ipi6_addr;
	}
	return dlb_pp2_build(out, tcp, &c->peer.sa, &local.sa);
}

void
dlb_query_fill_slot(struct dlb_slot *s, const struct dlb_query *q, const struct dlb_client *c)
{
	s->be_index = q->be->index;
	s->cache = q->cache;
	s->client = *c;
	s->pool = q->pool;
	s->retried = 0;
	s->qlen = 0;
	s->ecs_added = DLB_ECS_NONE;
	dlb_cache_key_copy(&s->key, &q->key);
	memcpy(s->qname_wire, q->pkt + q->m.qname_off, q->m.qname_len);
}

bool
dlb_query_answer_stale(struct dlb_worker *w, const struct dlb_slot *s)
{
	const struct dlb_config *cfg = w->cfg;
	double now = dlb_worker_now(w);
	enum dlb_cache_result res;
	const struct dlb_cache_entry *e;
	bool prefetch;
	size_t n;

	if (!cfg->stale_on_timeout || s->cache == NULL || s->client.proto == DLB_CLIENT_INTERNAL)
		return false;
	e = dlb_cache_lookup(s->cache, &s->key, now, cfg->stale_cache_ttl, &res, &prefetch, w->id);
	if (e == NULL)
		return false;
	n = dlb_cache_copy_out(s->cache, e, res, s->client.orig_id, s->qname_wire, now, w->scratch,
			       DLB_RBUF_SIZE);
	if (n == 0)
		return false;
	dlb_query_account_answer(w, w->scratch, n, s->client.t_start);
	if (s->client.proto == DLB_CLIENT_UDP)
		dlb_frontend_send_reply(w, &s->client, w->scratch, n);
	else
		dlb_tcp_deliver(w, &s->client, w->scratch, n);
	return true;
}

void
dlb_query_account_answer(struct dlb_worker *w, const uint8_t *pkt, size_t len, double t_start)
{
	unsigned rcode = DLB_RCODE(pkt[3]);

	if (rcode == DLB_RCODE_NOERROR)
		w->stats.frontend_noerror++;
	else if (rcode == DLB_RCODE_NXDOMAIN)
		w->stats.frontend_nxdomain++;
	else if (rcode == DLB_RCODE_SERVFAIL)
		w->stats.frontend_servfail++;
	dlb_stats_latency(&w->stats, (dlb_worker_now(w) - t_start) * 1e6);
}

size_t
dlb_query_finish_response(struct dlb_worker *w, uint8_t *pkt, size_t len, const struct dlb_slot *s)
{
	struct dlb_be_stats *bs = &w->be_stats[s->be_index];
	double usec = (dlb_worker_now(w) - s->client.t_start) * 1e6;
	uint16_t flags = dlb_rd16(pkt + 2);
	const uint16_t keep = DLB_F_RD | DLB_F_CD;

	if (s->ecs_added != DLB_ECS_NONE)
		len = dlb_wire_strip_ecs(pkt, len, (enum dlb_ecs_added)s->ecs_added);
	dlb_wr16(pkt, s->client.orig_id);
	flags = (uint16_t)((flags & ~keep) | (s->client.orig_flags & keep));
	dlb_wr16(pkt + 2, flags);

	bs->responses++;
	if (DLB_RCODE(flags) == DLB_RCODE_SERVFAIL)
		bs->servfails++;
	bs->latency_us = bs->latency_us == 0 ? usec : (127.0 * bs->latency_us + usec) / 128.0;
	if (s->cache != NULL)
		dlb_cache_insert(s->cache, &w->rcu, &s->key, pkt, len, dlb_worker_now(w), -1);
	if (s->client.proto == DLB_CLIENT_INTERNAL)
		return len;	/* a prefetch is not a client query */
	w->stats.responses++;
	if (DLB_RCODE(flags) == DLB_RCODE_SERVFAIL)
		w->stats.servfail_responses++;
	dlb_query_account_answer(w, pkt, len, s->client.t_start);
	return len;
}

/* ---- policies ---------------------------------------------------------- */

static bool
under_qps(struct dlb_worker *w, const struct dlb_backend *be)
{
	struct dlb_be_local *bl = &w->be[be->index];
	int limit = __atomic_load_n(&be->qps_limit_rt, __ATOMIC_RELAXED);
	int nworkers = w->cfg->workers > 0 ? w->cfg->workers : 1;
	double now = dlb_worker_now(w);
	uint32_t share;

	if (limit <= 0)
		return true;
	/* Each worker enforces its share of the limit: no shared counter. */
	share = (uint32_t)((limit + nworkers - 1) / nworkers);
	if (now - bl->qps_window_start >= 1.0) {
		bl->qps_window_start = now;
		bl->qps_window_count = 0;
	}
	return bl->qps_window_count < share;
}

static struct dlb_backend *
least_outstanding(struct dlb_worker *w, const struct dlb_pool *pool)
{
	struct dlb_backend *best = NULL;
	uint32_t best_out = 0;
	double best_lat = 0;

	/* members are sorted by order: the first minimum wins ties on order */
	for (int i = 0; i < pool->n; i++) {
		struct dlb_backend *be = pool->members[i];
		const struct dlb_be_stats *bs = &w->be_stats[be->index];

		if (!dlb_backend_is_up(be))
			continue;
		if (best == NULL || bs->outstanding < best_out ||
		    (bs->outstanding == best_out && be->order == best->order &&
		     bs->latency_us < best_lat)) {
			best = be;
			best_out = bs->outstanding;
			best_lat = bs->latency_us;
		}
	}
	return best;
}

/*
 * Bounded load (setWeightedBalancingFactor, setConsistentHashingBalancingFactor):
 * a server is skipped when its outstanding queries exceed its weighted share
 * of the pool's load times the factor. Per worker: each worker balances its
 * own outstanding queries, with no shared counter.
 */
struct load_bound {
	double factor;
	uint32_t total_out;
	uint32_t total_weight;
};

static void
load_bound_init(struct dlb_worker *w, const struct dlb_pool *pool, double factor,
		struct load_bound *lb)
{
	lb->factor = factor;
	lb->total_out = 0;
	lb->total_weight = 0;
	if (factor <= 0)
		return;
	for (int i = 0; i < pool->n; i++) {
		if (!dlb_backend_is_up(pool->members[i]))
			continue;
		lb->total_out += w->be_stats[pool->members[i]->index].outstanding;
		lb->total_weight += (uint32_t)pool->members[i]->weight;
	}
}

static bool
over_bound(const struct dlb_worker *w, const struct load_bound *lb, const struct dlb_backend *be)
{
	double target;

	if (lb->factor <= 0 || lb->total_weight == 0)
		return false;
	target = lb->factor * (lb->total_out + 1) * be->weight / lb->total_weight;
	return w->be_stats[be->index].outstanding > target;
}

static uint32_t
total_weight(struct dlb_worker *w, const struct dlb_pool *pool, const struct load_bound *lb)
{
	uint32_t sum = 0;

	for (int i = 0; i < pool->n; i++)
		if (dlb_backend_is_up(pool->members[i]) && !over_bound(w, lb, pool->members[i]))
			sum += (uint32_t)pool->members[i]->weight;
	return sum;
}

static struct dlb_backend *
weighted_pick(struct dlb_worker *w, const struct dlb_pool *pool, const struct load_bound *lb,
	      uint32_t r)
{
	for (int i = 0; i < pool->n; i++) {
		struct dlb_backend *be = pool->members[i];

		if (!dlb_backend_is_up(be) || over_bound(w, lb, be))
			continue;
		if (r < (uint32_t)be->weight)
			return be;
		r -= (uint32_t)be->weight;
	}
	return NULL;
}

/* wrandom and whashed: weighted choice by @r (random or the name's hash). */
static struct dlb_backend *
weighted(struct dlb_worker *w, const struct dlb_pool *pool, uint32_t r, bool hashed)
{
	struct load_bound lb;
	uint32_t tw;

	load_bound_init(w, pool, w->cfg->weighted_balancing_factor, &lb);
	tw = total_weight(w, pool, &lb);
	if (tw == 0 && lb.factor > 0) {
		lb.factor = 0;	/* everyone is over the bound: ignore it */
		tw = total_weight(w, pool, &lb);
	}
	if (tw == 0)
		return NULL;
	return weighted_pick(w, pool, &lb, hashed ? r % tw : dlb_rng_uniform(&w->rng, tw));
}

/*
 * chashed: the first point of the ring at or after the name's hash whose
 * server is up (and within the bounded load); a server that leaves only
 * moves the names of its own points.
 */
static struct dlb_backend *
consistent_hashed(struct dlb_worker *w, const struct dlb_pool *pool, uint32_t h)
{
	struct load_bound lb;
	int lo = 0, hi = pool->nring;

	if (pool->nring == 0)
		return NULL;
	load_bound_init(w, pool, w->cfg->ch_balancing_factor, &lb);
	while (lo < hi) {
		int mid = (lo + hi) / 2;

		if (pool->ring[mid].hash < h)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (int pass = 0; pass < 2; pass++) {
		for (int k = 0; k < pool->nring; k++) {
			struct dlb_backend *be = pool->ring[(lo + k) % pool->nring].be;

			if (dlb_backend_is_up(be) && (pass == 1 || !over_bound(w, &lb, be)))
				return be;
		}
		if (lb.factor <= 0)
			break;
	}
	return NULL;
}

struct dlb_backend *
dlb_pool_select(struct dlb_worker *w, const struct dlb_pool *pool, const struct dlb_dnsmsg *m)
{
	int policy = pool->policy >= 0 ? pool->policy : w->cfg->policy;

	if (pool->n == 0)
		return NULL;
	switch (policy) {
	case DLB_POLICY_FIRST_AVAILABLE:
		for (int i = 0; i < pool->n; i++) {
			struct dlb_backend *be = pool->members[i];

			if (dlb_backend_is_up(be) && under_qps(w, be)) {
				w->be[be->index].qps_window_count++;
				return be;
			}
		}
		return least_outstanding(w, pool);
	case DLB_POLICY_ROUNDROBIN: {
		int nup = 0;

		for (int i = 0; i < pool->n; i++)
			nup += dlb_backend_is_up(pool->members[i]);
		if (nup == 0) {
			if (w->cfg->roundrobin_fail_on_no_server)
				return NULL;
			return pool->members[w->rr_counter++ % (unsigned)pool->n];
		}
		for (unsigned k = w->rr_counter++ % (unsigned)nup, i = 0; i < (unsigned)pool->n; i++) {
			if (!dlb_backend_is_up(pool->members[i]))
				continue;
			if (k-- == 0)
				return pool->members[i];
		}
		return NULL;
	}
	case DLB_POLICY_WRANDOM:
		return weighted(w, pool, 0, false);
	case DLB_POLICY_WHASHED:
		/* not the per-process keyed hash: stickiness must survive restarts */
		return weighted(w, pool, dlb_name_hash_seeded(m->qname_lc, m->qname_len,
							      w->cfg->whashed_perturbation), true);
	case DLB_POLICY_CHASHED:
		return consistent_hashed(w, pool, dlb_name_hash_seeded(m->qname_lc, m->qname_len,
								       w->cfg->whashed_perturbation));
	case DLB_POLICY_LEAST_OUTSTANDING:
	default:
		return least_outstanding(w, pool);
	}
}
