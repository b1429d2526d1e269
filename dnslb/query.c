/*
 * query.c - the transport-independent part of a query's life.
 */
#include "dnslb/query.h"

#include <string.h>

#include "dnslb/config.h"
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
	return m.qtype == s->qtype && m.qclass == s->qclass && m.qname_len == s->qname_len &&
	       memcmp(m.qname_lc, s->qname_lc, s->qname_len) == 0;
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

void
dlb_query_finish_response(struct dlb_worker *w, uint8_t *pkt, size_t len, const struct dlb_slot *s)
{
	struct dlb_be_stats *bs = &w->be_stats[s->be_index];
	double usec = (dlb_worker_now(w) - s->client.t_start) * 1e6;
	uint16_t flags = dlb_rd16(pkt + 2);
	const uint16_t keep = DLB_F_RD | DLB_F_CD;

	dlb_wr16(pkt, s->client.orig_id);
	flags = (uint16_t)((flags & ~keep) | (s->client.orig_flags & keep));
	dlb_wr16(pkt + 2, flags);

	w->stats.responses++;
	if (DLB_RCODE(flags) == DLB_RCODE_SERVFAIL)
		w->stats.servfail_responses++;
	bs->responses++;
	bs->latency_us = bs->latency_us == 0 ? usec : (127.0 * bs->latency_us + usec) / 128.0;
	dlb_query_account_answer(w, pkt, len, s->client.t_start);
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

static uint32_t
total_weight(const struct dlb_pool *pool, bool up_only)
{
	uint32_t sum = 0;

	for (int i = 0; i < pool->n; i++)
		if (!up_only || dlb_backend_is_up(pool->members[i]))
			sum += (uint32_t)pool->members[i]->weight;
	return sum;
}

static struct dlb_backend *
weighted_pick(const struct dlb_pool *pool, uint32_t r)
{
	for (int i = 0; i < pool->n; i++) {
		struct dlb_backend *be = pool->members[i];

		if (!dlb_backend_is_up(be))
			continue;
		if (r < (uint32_t)be->weight)
			return be;
		r -= (uint32_t)be->weight;
	}
	return NULL;
}

/* FNV-1a over the lowercased name, seeded with setWHashedPertubation(). */
static uint32_t
name_hash_seeded(const uint8_t *lc, size_t len, uint32_t seed)
{
	uint32_t h = 2166136261u ^ seed;

	for (size_t i = 0; i < len; i++) {
		h ^= lc[i];
		h *= 16777619u;
	}
	return h;
}

struct dlb_backend *
dlb_pool_select(struct dlb_worker *w, const struct dlb_pool *pool, const struct dlb_dnsmsg *m)
{
	int policy = pool->policy >= 0 ? pool->policy : w->cfg->policy;
	uint32_t tw;

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
		tw = total_weight(pool, true);
		return tw == 0 ? NULL : weighted_pick(pool, dlb_rng_uniform(&w->rng, tw));
	case DLB_POLICY_WHASHED:
		tw = total_weight(pool, true);
		if (tw == 0)
			return NULL;
		/* not the per-process keyed hash: stickiness must survive restarts */
		return weighted_pick(pool, name_hash_seeded(m->qname_lc, m->qname_len,
							   w->cfg->whashed_perturbation) % tw);
	case DLB_POLICY_LEAST_OUTSTANDING:
	default:
		return least_outstanding(w, pool);
	}
}
