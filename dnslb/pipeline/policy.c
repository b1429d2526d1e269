/*
 * policy.c - the built-in load-balancing policies, on a narrow per-worker
 * view (policy.h).
 */
#include "dnslb/pipeline/policy.h"

#include <stdbool.h>
#include <stdint.h>

#include "dnslb/core/config.h"
#include "dnslb/core/stats.h"
#include "dnslb/core/util.h"

/* A server's order: changed in place at runtime (only a tie-break here). */
static inline int
order_of(const struct dlb_backend *be)
{
	return __atomic_load_n(&be->order, __ATOMIC_RELAXED);
}

static bool
under_qps(const struct dlb_policy_view *v, const struct dlb_backend *be)
{
	struct dlb_qps_window *win = &v->qps[be->index];
	int limit = __atomic_load_n(&be->qps_limit_rt, __ATOMIC_RELAXED);
	int nworkers = v->cfg->workers > 0 ? v->cfg->workers : 1;
	uint32_t share;

	if (limit <= 0)
		return true;
	/* Each worker enforces its share of the limit: no shared counter. */
	share = (uint32_t)((limit + nworkers - 1) / nworkers);
	if (v->now - win->start >= 1.0) {
		win->start = v->now;
		win->count = 0;
	}
	return win->count < share;
}

struct dlb_backend *
dlb_policy_least_outstanding(const struct dlb_policy_view *v, const struct dlb_pool *pool)
{
	struct dlb_pool_state tmp;
	const struct dlb_pool_state *ps = dlb_pool_state(v->snap, pool, &tmp);
	struct dlb_backend *best = NULL;
	uint32_t best_out = 0;
	double best_lat = 0;

	/* members are sorted by order: the first minimum wins ties on order */
	for (int i = 0; i < ps->n; i++) {
		struct dlb_backend *be = ps->members[i];
		const struct dlb_be_stats *bs = &v->be_stats[be->index];

		if (!dlb_backend_is_up(be))
			continue;
		if (best == NULL || bs->outstanding < best_out ||
		    (bs->outstanding == best_out && order_of(be) == order_of(best) &&
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
load_bound_init(const struct dlb_policy_view *v, const struct dlb_pool_state *ps, double factor,
		struct load_bound *lb)
{
	lb->factor = factor;
	lb->total_out = 0;
	lb->total_weight = 0;
	if (factor <= 0)
		return;
	for (int i = 0; i < ps->n; i++) {
		if (!dlb_backend_is_up(ps->members[i]))
			continue;
		lb->total_out += v->be_stats[ps->members[i]->index].outstanding;
		lb->total_weight += (uint32_t)dlb_pool_weight(ps, i);
	}
}

static bool
over_bound(const struct dlb_policy_view *v, const struct load_bound *lb,
	   const struct dlb_backend *be)
{
	double target;

	if (lb->factor <= 0 || lb->total_weight == 0)
		return false;
	/* the live weight (a heuristic bound: a reload in between moves it a little) */
	target = lb->factor * (lb->total_out + 1) * __atomic_load_n(&be->weight, __ATOMIC_RELAXED) /
		 lb->total_weight;
	return v->be_stats[be->index].outstanding > target;
}

static uint32_t
total_weight(const struct dlb_policy_view *v, const struct dlb_pool_state *ps,
	     const struct load_bound *lb)
{
	uint32_t sum = 0;

	/* dnsdist's int sum, held at INT_MAX rather than overflowing */
	for (int i = 0; i < ps->n; i++)
		if (dlb_backend_is_up(ps->members[i]) && !over_bound(v, lb, ps->members[i]))
			sum += (uint32_t)dlb_pool_weight(ps, i) > INT32_MAX - sum ?
			       INT32_MAX - sum : (uint32_t)dlb_pool_weight(ps, i);
	return sum;
}

static struct dlb_backend *
weighted_pick(const struct dlb_policy_view *v, const struct dlb_pool_state *ps,
	      const struct load_bound *lb, uint32_t r)
{
	for (int i = 0; i < ps->n; i++) {
		struct dlb_backend *be = ps->members[i];

		if (!dlb_backend_is_up(be) || over_bound(v, lb, be))
			continue;
		if (r < (uint32_t)dlb_pool_weight(ps, i))
			return be;
		r -= (uint32_t)dlb_pool_weight(ps, i);
	}
	return NULL;
}

/* wrandom and whashed: weighted choice by @r (random or the name's hash). */
static struct dlb_backend *
weighted(const struct dlb_policy_view *v, const struct dlb_pool_state *ps, uint32_t r, bool hashed)
{
	struct load_bound lb;
	uint32_t tw;

	load_bound_init(v, ps, v->set->weighted_balancing_factor, &lb);
	tw = total_weight(v, ps, &lb);
	if (tw == 0 && lb.factor > 0) {
		lb.factor = 0;	/* everyone is over the bound: ignore it */
		tw = total_weight(v, ps, &lb);
	}
	if (tw == 0)
		return NULL;
	return weighted_pick(v, ps, &lb, hashed ? r % tw : dlb_rng_uniform(v->rng, tw));
}

/*
 * chashed: the first point of the ring at or after the name's hash whose
 * server is up (and within the bounded load); a server that leaves only
 * moves the names of its own points.
 */
static struct dlb_backend *
consistent_hashed(const struct dlb_policy_view *v, const struct dlb_pool *pool,
		  const struct dlb_pool_state *ps, uint32_t h)
{
	const struct dlb_ch_ring *ring = dlb_pool_ring(pool);
	struct load_bound lb;
	int lo = 0, hi;

	if (ring == NULL || ring->n == 0)
		return NULL;
	hi = ring->n;
	load_bound_init(v, ps, v->set->ch_balancing_factor, &lb);
	while (lo < hi) {
		int mid = (lo + hi) / 2;

		if (ring->p[mid].hash < h)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (int pass = 0; pass < 2; pass++) {
		for (int k = 0; k < ring->n; k++) {
			struct dlb_backend *be = ring->p[(lo + k) % ring->n].be;

			if (dlb_backend_is_up(be) && (pass == 1 || !over_bound(v, &lb, be)))
				return be;
		}
		if (lb.factor <= 0)
			break;
	}
	return NULL;
}

struct dlb_backend *
dlb_policy_select(const struct dlb_policy_view *v, const struct dlb_pool *pool, int policy,
		  const uint8_t *qname_lc, size_t qname_len)
{
	struct dlb_pool_state tmp;
	const struct dlb_pool_state *ps = dlb_pool_state(v->snap, pool, &tmp);

	if (ps->n == 0)
		return NULL;
	switch (policy) {
	case DLB_POLICY_FIRST_AVAILABLE:
		for (int i = 0; i < ps->n; i++) {
			struct dlb_backend *be = ps->members[i];

			if (dlb_backend_is_up(be) && under_qps(v, be)) {
				v->qps[be->index].count++;
				return be;
			}
		}
		return dlb_policy_least_outstanding(v, pool);
	case DLB_POLICY_ROUNDROBIN: {
		int nup = 0;

		for (int i = 0; i < ps->n; i++)
			nup += dlb_backend_is_up(ps->members[i]);
		if (nup == 0) {
			if (v->set->roundrobin_fail_on_no_server)
				return NULL;
			return ps->members[(*v->rr_counter)++ % (unsigned)ps->n];
		}
		for (unsigned k = (*v->rr_counter)++ % (unsigned)nup, i = 0; i < (unsigned)ps->n;
		     i++) {
			if (!dlb_backend_is_up(ps->members[i]))
				continue;
			if (k-- == 0)
				return ps->members[i];
		}
		return NULL;
	}
	case DLB_POLICY_WRANDOM:
		return weighted(v, ps, 0, false);
	case DLB_POLICY_WHASHED:
		/* dnsdist's hash of the name: the same server for the same name
		 * as dnsdist, and across restarts */
		return weighted(v, ps, dlb_burtle_ci(qname_lc, qname_len,
						       v->set->whashed_perturbation), true);
	case DLB_POLICY_CHASHED:
		return consistent_hashed(v, pool, ps, dlb_burtle_ci(qname_lc, qname_len,
								v->set->whashed_perturbation));
	case DLB_POLICY_LEAST_OUTSTANDING:
	default:
		return dlb_policy_least_outstanding(v, pool);
	}
}
