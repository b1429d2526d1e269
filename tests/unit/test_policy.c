/*
 * test_policy.c - the built-in load-balancing policies (dnslb/pipeline/policy.c) on a
 * hand-made view: counters, QPS windows, clock and random source set by the
 * test, no worker, no sockets, no event loop. In the spirit of dnsdist's
 * policy unit tests: order and fallback (firstAvailable), exact rotation
 * (roundrobin), lowest count and ties (leastOutstanding), weighted shares
 * (wrandom, whashed), stability and minimal disruption (chashed), QPS
 * limits, the balancing factors, and no server up.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/core/config.h"
#include "dnslb/core/dnslb.h"
#include "dnslb/core/netmask.h"
#include "dnslb/pipeline/policy.h"
#include "dnslb/core/stats.h"
#include "dnslb/core/util.h"
#include "dnslb/core/wire.h"

#define MAXB 8

struct fx {
	struct dlb_config *cfg;
	struct dlb_pool *pool;
	struct dlb_backend *be[MAXB];
	int nb;
	struct dlb_be_stats *stats;	/* [DLB_MAX_BACKENDS] */
	struct dlb_qps_window qps[DLB_MAX_BACKENDS];
	struct dlb_rng rng;
	unsigned rr;
	struct dlb_policy_view v;
};

/* A fixed ChaCha20 key: the same draws on every run (no flaky shares). */
static void
seed_rng(struct dlb_rng *r, uint8_t seed)
{
	dlb_rng_init(r);	/* initialises libsodium */
	for (size_t i = 0; i < sizeof(r->key); i++)
		r->key[i] = (uint8_t)(seed + i * 7);
	r->nonce = 0;
	r->pos = sizeof(r->buf);
}

/*
 * @nb servers 127.0.0.1:5301.. in the default pool, with @weights (NULL:
 * 1 each) and fixed ids (a fixed chashed ring), all up.
 */
static struct fx *
fx_new(int nb, const int *weights)
{
	struct fx *f = calloc(1, sizeof(*f));
	char addr[32];

	assert_non_null(f);
	f->cfg = dlb_config_new();
	assert_non_null(f->cfg);
	f->cfg->workers = 1;
	for (int i = 0; i < nb; i++) {
		struct dlb_backend *be = dlb_backend_new();

		assert_non_null(be);
		snprintf(addr, sizeof(addr), "127.0.0.1:%d", 5301 + i);
		assert_int_equal(dlb_sockaddr_parse(addr, 53, &be->addr, &be->addrlen), 0);
		snprintf(be->uuid, sizeof(be->uuid), "6e2a1c52-0b1d-4c7e-9f00-%012d", i + 1);
		be->weight = weights != NULL ? weights[i] : 1;
		assert_int_equal(dlb_config_add_backend(f->cfg, be), 0);
		f->be[i] = be;
	}
	f->nb = nb;
	assert_int_equal(dlb_config_build_rings(f->cfg, NULL), 0);
	f->pool = dlb_config_find_pool(f->cfg, "");
	assert_non_null(f->pool);
	assert_int_equal(f->pool->n, nb);
	f->stats = aligned_alloc(64, DLB_MAX_BACKENDS * sizeof(*f->stats));
	assert_non_null(f->stats);
	memset(f->stats, 0, DLB_MAX_BACKENDS * sizeof(*f->stats));
	seed_rng(&f->rng, 42);
	/* no workers: the builder's settings and pools */
	f->v = dlb_policy_view_init(f->cfg, &f->cfg->set, NULL, f->stats, f->qps, &f->rng, &f->rr,
				    1000.0);
	return f;
}

static void
fx_free(struct fx *f)
{
	dlb_config_free(f->cfg);
	free(f->stats);
	free(f);
}

static void
set_down(struct fx *f, int i, bool down)
{
	f->be[i]->admin = down ? DLB_BE_FORCED_DOWN : DLB_BE_AUTO;
}

/* The server (index in f->be) the pool's @policy picks for @name; -1: none. */
static int
pick(struct fx *f, int policy, const char *name)
{
	uint8_t wire[DLB_MAX_NAME], lc[DLB_MAX_NAME];
	int n = dlb_wire_name_from_text(name, wire, sizeof(wire));
	struct dlb_backend *be;

	assert_true(n > 0);
	for (int i = 0; i < n; i++)
		lc[i] = (uint8_t)(wire[i] >= 'A' && wire[i] <= 'Z' ? wire[i] + 32 : wire[i]);
	be = dlb_policy_select(&f->v, f->pool, policy, lc, (size_t)n);
	if (be == NULL)
		return -1;
	for (int i = 0; i < f->nb; i++)
		if (f->be[i] == be)
			return i;
	fail_msg("a server outside the pool");
	return -2;
}

static int
pick_n(struct fx *f, int policy, int k)
{
	char name[64];

	snprintf(name, sizeof(name), "n%d.example.com.", k);
	return pick(f, policy, name);
}

/* ---- firstAvailable --------------------------------------------------- */

static void
test_first_available_order(void **state)
{
	struct fx *f = fx_new(3, NULL);

	(void)state;
	for (int i = 0; i < 10; i++)
		assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a.example."), 0);
	set_down(f, 0, true);
	assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a.example."), 1);
	set_down(f, 1, true);
	assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a.example."), 2);
	set_down(f, 0, false);
	assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a.example."), 0);
	/* order= comes before the order of declaration */
	f->be[0]->order = 3;
	dlb_config_resort_pools(f->cfg);
	set_down(f, 1, false);
	assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a.example."), 1);
	fx_free(f);
}

static void
test_first_available_qps(void **state)
{
	struct fx *f = fx_new(3, NULL);

	(void)state;
	f->be[0]->qps_limit_rt = 2;
	assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a."), 0);
	assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a."), 0);
	/* over its limit in this second: the next one */
	assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a."), 1);
	assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a."), 1);
	f->v.now += 0.75;
	assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a."), 1);
	/* a new window one second after the first */
	f->v.now += 0.25;
	assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a."), 0);
	assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a."), 0);
	assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a."), 1);

	/* all over their limits: leastOutstanding among the up ones */
	f->v.now += 5;
	for (int i = 0; i < 3; i++)
		f->be[i]->qps_limit_rt = 1;
	for (int i = 0; i < 3; i++)
		assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a."), i);
	f->stats[0].outstanding = 4;
	f->stats[1].outstanding = 1;
	f->stats[2].outstanding = 3;
	assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a."), 1);
	assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a."), 1);
	fx_free(f);
}

/* Each worker enforces its share of a limit, rounded up. */
static void
test_qps_per_worker_share(void **state)
{
	struct fx *f = fx_new(2, NULL);

	(void)state;
	f->cfg->workers = 4;
	f->be[0]->qps_limit_rt = 10;	/* ceil(10 / 4) = 3 here */
	for (int i = 0; i < 3; i++)
		assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a."), 0);
	assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a."), 1);
	/* a limit smaller than the workers: at least one each */
	f->v.now += 1;
	f->be[0]->qps_limit_rt = 1;
	assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a."), 0);
	assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a."), 1);
	/* workers unset (0): the whole limit */
	f->v.now += 1;
	f->cfg->workers = 0;
	f->be[0]->qps_limit_rt = 5;
	for (int i = 0; i < 5; i++)
		assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a."), 0);
	assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a."), 1);
	/* no limit (0): never skipped */
	f->be[0]->qps_limit_rt = 0;
	for (int i = 0; i < 100; i++)
		assert_int_equal(pick(f, DLB_POLICY_FIRST_AVAILABLE, "a."), 0);
	fx_free(f);
}

/* ---- roundrobin ------------------------------------------------------- */

static void
test_roundrobin(void **state)
{
	struct fx *f = fx_new(3, NULL);

	(void)state;
	for (int i = 0; i < 30; i++)
		assert_int_equal(pick(f, DLB_POLICY_ROUNDROBIN, "a."), i % 3);
	/* a down server is skipped: the cycle is over the up ones */
	f->rr = 0;
	set_down(f, 1, true);
	for (int i = 0; i < 10; i++)
		assert_int_equal(pick(f, DLB_POLICY_ROUNDROBIN, "a."), i % 2 == 0 ? 0 : 2);
	/* none up: dnsdist still cycles over all of them... */
	f->rr = 0;
	set_down(f, 0, true);
	set_down(f, 2, true);
	for (int i = 0; i < 6; i++)
		assert_int_equal(pick(f, DLB_POLICY_ROUNDROBIN, "a."), i % 3);
	/* ...unless setRoundRobinFailOnNoServer */
	f->cfg->set.roundrobin_fail_on_no_server = true;
	assert_int_equal(pick(f, DLB_POLICY_ROUNDROBIN, "a."), -1);
	fx_free(f);
}

/* ---- leastOutstanding ------------------------------------------------- */

static void
test_least_outstanding(void **state)
{
	struct fx *f = fx_new(4, NULL);

	(void)state;
	f->stats[0].outstanding = 5;
	f->stats[1].outstanding = 2;
	f->stats[2].outstanding = 7;
	f->stats[3].outstanding = 3;
	assert_int_equal(pick(f, DLB_POLICY_LEAST_OUTSTANDING, "a."), 1);
	set_down(f, 1, true);
	assert_int_equal(pick(f, DLB_POLICY_LEAST_OUTSTANDING, "a."), 3);
	/* no side effect: the same answer again */
	assert_int_equal(pick(f, DLB_POLICY_LEAST_OUTSTANDING, "a."), 3);
	for (int i = 0; i < 4; i++)
		set_down(f, i, true);
	assert_int_equal(pick(f, DLB_POLICY_LEAST_OUTSTANDING, "a."), -1);
	fx_free(f);
}

static void
test_least_outstanding_ties(void **state)
{
	struct fx *f = fx_new(4, NULL);

	(void)state;
	/* all equal: the first */
	assert_int_equal(pick(f, DLB_POLICY_LEAST_OUTSTANDING, "a."), 0);
	/* equal counts and order: the lower latency */
	for (int i = 0; i < 4; i++) {
		f->stats[i].outstanding = 3;
		f->stats[i].latency_us = 100.0 - i * 10;
	}
	assert_int_equal(pick(f, DLB_POLICY_LEAST_OUTSTANDING, "a."), 3);
	/* equal counts: a lower order wins over a lower latency */
	f->be[3]->order = 2;
	f->be[2]->order = 2;
	dlb_config_resort_pools(f->cfg);
	assert_int_equal(pick(f, DLB_POLICY_LEAST_OUTSTANDING, "a."), 1);
	/* equal counts, order and latency: the first in the pool */
	f->stats[0].latency_us = f->stats[1].latency_us;
	assert_int_equal(pick(f, DLB_POLICY_LEAST_OUTSTANDING, "a."), 0);
	/* a lower count wins over everything */
	f->stats[3].outstanding = 2;
	assert_int_equal(pick(f, DLB_POLICY_LEAST_OUTSTANDING, "a."), 3);
	/* a Lua policy number without its worker's Lua state: leastOutstanding */
	assert_int_equal(pick(f, DLB_POLICY_LUA + 3, "a."), 3);
	fx_free(f);
}

/* ---- wrandom ---------------------------------------------------------- */

#define DRAWS 100000

static void
assert_share(int count, int total, double expect, double tol)
{
	double got = (double)count / total;

	if (got < expect - tol || got > expect + tol)
		fail_msg("share %.4f, expected %.4f +- %.4f", got, expect, tol);
}

static void
test_wrandom_distribution(void **state)
{
	const int w[] = { 1, 2, 7 };
	struct fx *f = fx_new(3, w);
	int count[3] = { 0 };

	(void)state;
	for (int i = 0; i < DRAWS; i++) {
		int k = pick(f, DLB_POLICY_WRANDOM, "a.");

		assert_true(k >= 0);
		count[k]++;
	}
	/* a share's standard deviation here is under 0.15%: 1% is far outside */
	assert_share(count[0], DRAWS, 0.1, 0.01);
	assert_share(count[1], DRAWS, 0.2, 0.01);
	assert_share(count[2], DRAWS, 0.7, 0.01);
	/* a down server's share goes to the others, by weight */
	set_down(f, 2, true);
	memset(count, 0, sizeof(count));
	for (int i = 0; i < DRAWS; i++)
		count[pick(f, DLB_POLICY_WRANDOM, "a.")]++;
	assert_int_equal(count[2], 0);
	assert_share(count[0], DRAWS, 1.0 / 3, 0.01);
	assert_share(count[1], DRAWS, 2.0 / 3, 0.01);
	/* the name plays no part */
	set_down(f, 0, true);
	for (int i = 0; i < 100; i++)
		assert_int_equal(pick_n(f, DLB_POLICY_WRANDOM, i), 1);
	set_down(f, 1, true);
	assert_int_equal(pick(f, DLB_POLICY_WRANDOM, "a."), -1);
	fx_free(f);
}

/* Weights whose sum overflows an int: held at INT_MAX, every server still picked. */
static void
test_wrandom_huge_weights(void **state)
{
	const int w[] = { INT32_MAX, INT32_MAX, 1 };
	struct fx *f = fx_new(3, w);
	int count[3] = { 0 };

	(void)state;
	for (int i = 0; i < 1000; i++)
		count[pick(f, DLB_POLICY_WRANDOM, "a.")]++;
	/* as dnsdist's sum, capped at INT_MAX: only the first is ever drawn */
	assert_int_equal(count[0], 1000);
	set_down(f, 0, true);
	memset(count, 0, sizeof(count));
	for (int i = 0; i < 1000; i++)
		count[pick(f, DLB_POLICY_WRANDOM, "a.")]++;
	assert_int_equal(count[1], 1000);
	fx_free(f);
}

/* ---- whashed ---------------------------------------------------------- */

#define NAMES 20000

static void
test_whashed(void **state)
{
	const int w[] = { 1, 2, 7 };
	struct fx *f = fx_new(3, w);
	static int first[NAMES];
	int count[3] = { 0 }, moved = 0;

	(void)state;
	for (int i = 0; i < NAMES; i++) {
		first[i] = pick_n(f, DLB_POLICY_WHASHED, i);
		assert_true(first[i] >= 0);
		count[first[i]]++;
	}
	assert_share(count[0], NAMES, 0.1, 0.02);
	assert_share(count[1], NAMES, 0.2, 0.02);
	assert_share(count[2], NAMES, 0.7, 0.02);
	/* the same name, the same server, whatever the random source or counters */
	seed_rng(&f->rng, 7);
	f->stats[2].outstanding = 100;
	for (int i = 0; i < NAMES; i++)
		assert_int_equal(pick_n(f, DLB_POLICY_WHASHED, i), first[i]);
	/* case does not matter (the name is hashed lowercased, as dnsdist's burtleCI) */
	assert_int_equal(pick(f, DLB_POLICY_WHASHED, "N17.Example.COM."), first[17]);
	/* it is dnsdist's choice: the name's hash modulo the total weight */
	for (int i = 0; i < 100; i++) {
		char name[64];
		uint8_t wire[DLB_MAX_NAME];
		int n, r;

		snprintf(name, sizeof(name), "n%d.example.com.", i);
		n = dlb_wire_name_from_text(name, wire, sizeof(wire));
		r = (int)(dlb_burtle_ci(wire, (size_t)n, f->cfg->set.whashed_perturbation) % 10);
		assert_int_equal(first[i], r < 1 ? 0 : r < 3 ? 1 : 2);
	}
	/* setWHashedPertubation changes the mapping */
	f->cfg->set.whashed_perturbation = 12345;
	for (int i = 0; i < NAMES; i++)
		moved += pick_n(f, DLB_POLICY_WHASHED, i) != first[i];
	assert_true(moved > NAMES / 4);
	for (int i = 0; i < 3; i++)
		set_down(f, i, true);
	assert_int_equal(pick(f, DLB_POLICY_WHASHED, "a."), -1);
	fx_free(f);
}

/* ---- chashed ---------------------------------------------------------- */

static void
test_chashed_stable(void **state)
{
	const int w[] = { 100, 100, 100, 100 };
	struct fx *f = fx_new(4, w);
	static int first[NAMES];
	int count[4] = { 0 };

	(void)state;
	for (int i = 0; i < NAMES; i++) {
		first[i] = pick_n(f, DLB_POLICY_CHASHED, i);
		assert_true(first[i] >= 0);
		count[first[i]]++;
	}
	/* 100 points each: roughly a quarter each */
	for (int i = 0; i < 4; i++)
		assert_share(count[i], NAMES, 0.25, 0.08);
	seed_rng(&f->rng, 9);
	for (int i = 0; i < NAMES; i++)
		assert_int_equal(pick_n(f, DLB_POLICY_CHASHED, i), first[i]);
	/* a server going down moves only its own names */
	set_down(f, 2, true);
	for (int i = 0; i < NAMES; i++) {
		int k = pick_n(f, DLB_POLICY_CHASHED, i);

		if (first[i] != 2)
			assert_int_equal(k, first[i]);
		else
			assert_true(k >= 0 && k != 2);
	}
	/* and they come back when it does */
	set_down(f, 2, false);
	for (int i = 0; i < NAMES; i++)
		assert_int_equal(pick_n(f, DLB_POLICY_CHASHED, i), first[i]);
	for (int i = 0; i < 4; i++)
		set_down(f, i, true);
	assert_int_equal(pick(f, DLB_POLICY_CHASHED, "a."), -1);
	fx_free(f);
}

/* Weights up to INT_MAX: a ring of bounded size that keeps the shares. */
static void
test_chashed_large_weights(void **state)
{
	const int w[] = { 1000000000, 1000000000, 2000000000 };
	struct fx *f = fx_new(3, w);
	const struct dlb_ch_ring *ring = dlb_pool_ring(f->pool);
	int count[3] = { 0 };

	(void)state;
	assert_non_null(ring);
	assert_true((unsigned)ring->n <= DLB_CH_MAX_POINTS + 3);
	for (int i = 0; i < NAMES; i++)
		count[pick_n(f, DLB_POLICY_CHASHED, i)]++;
	assert_share(count[0], NAMES, 0.25, 0.03);
	assert_share(count[1], NAMES, 0.25, 0.03);
	assert_share(count[2], NAMES, 0.5, 0.03);
	fx_free(f);
}

/* ---- the balancing factors (bounded load) ----------------------------- */

static void
test_weighted_balancing_factor(void **state)
{
	struct fx *f = fx_new(2, NULL);
	int count[2] = { 0 };

	(void)state;
	/* s0 holds 10 of 10 in flight; its bound: 1.5 * 11 * 1/2 = 8.25 */
	f->stats[0].outstanding = 10;
	for (int i = 0; i < 1000; i++)
		count[pick(f, DLB_POLICY_WRANDOM, "a.")]++;
	assert_true(count[0] > 300);	/* off: the load plays no part */
	f->cfg->set.weighted_balancing_factor = 1.5;
	for (int i = 0; i < 1000; i++)
		assert_int_equal(pick(f, DLB_POLICY_WRANDOM, "a."), 1);
	/* whashed too: every name goes to s1 */
	for (int i = 0; i < 1000; i++)
		assert_int_equal(pick_n(f, DLB_POLICY_WHASHED, i), 1);
	/* both within their bound: 1.5 * (8 + 1) / 2 = 6.75 */
	f->stats[0].outstanding = 6;
	f->stats[1].outstanding = 2;
	memset(count, 0, sizeof(count));
	for (int i = 0; i < 1000; i++)
		count[pick(f, DLB_POLICY_WRANDOM, "a.")]++;
	assert_true(count[0] > 300 && count[1] > 300);
	/* the only server up is never over its bound */
	f->stats[0].outstanding = 1000;
	set_down(f, 1, true);
	assert_int_equal(pick(f, DLB_POLICY_WRANDOM, "a."), 0);
	fx_free(f);
}

static void
test_ch_balancing_factor(void **state)
{
	const int w[] = { 100, 100, 100 };
	struct fx *f = fx_new(3, w);
	static int first[NAMES];
	int moved_other = 0;

	(void)state;
	for (int i = 0; i < NAMES; i++)
		first[i] = pick_n(f, DLB_POLICY_CHASHED, i);
	f->stats[0].outstanding = 30;	/* bound: 1.2 * 31 / 3 = 12.4 */
	f->cfg->set.ch_balancing_factor = 1.2;
	for (int i = 0; i < NAMES; i++) {
		int k = pick_n(f, DLB_POLICY_CHASHED, i);

		assert_int_not_equal(k, 0);
		moved_other += first[i] != 0 && k != first[i];
	}
	/* only s0's names move */
	assert_int_equal(moved_other, 0);
	/* off again: back where they were */
	f->cfg->set.ch_balancing_factor = 0;
	for (int i = 0; i < NAMES; i++)
		assert_int_equal(pick_n(f, DLB_POLICY_CHASHED, i), first[i]);
	fx_free(f);
}

/* ---- no server, the pool's policy ------------------------------------- */

static void
test_no_server(void **state)
{
	const int policies[] = {
		DLB_POLICY_LEAST_OUTSTANDING, DLB_POLICY_FIRST_AVAILABLE, DLB_POLICY_WRANDOM,
		DLB_POLICY_WHASHED, DLB_POLICY_CHASHED, DLB_POLICY_LUA,
	};
	struct fx *f = fx_new(2, NULL);
	struct dlb_pool *empty = dlb_config_get_pool(f->cfg, "empty");

	(void)state;
	set_down(f, 0, true);
	set_down(f, 1, true);
	for (size_t i = 0; i < sizeof(policies) / sizeof(policies[0]); i++)
		assert_int_equal(pick(f, policies[i], "a."), -1);
	/* an empty pool, roundrobin included */
	assert_non_null(empty);
	for (int p = DLB_POLICY_LEAST_OUTSTANDING; p <= DLB_POLICY_CHASHED; p++)
		assert_null(dlb_policy_select(&f->v, empty, p, (const uint8_t *)"\0", 1));
	fx_free(f);
}

static void
test_pool_policy(void **state)
{
	struct fx *f = fx_new(1, NULL);

	(void)state;
	f->cfg->set.policy = DLB_POLICY_WRANDOM;
	assert_int_equal(f->pool->policy, -1);
	assert_int_equal(dlb_config_pool_policy(f->cfg, f->pool), DLB_POLICY_WRANDOM);
	assert_int_equal(dlb_config_publish(f->cfg, NULL), 0);
	f->pool->policy = DLB_POLICY_CHASHED;
	assert_int_equal(dlb_config_pool_policy(f->cfg, f->pool), DLB_POLICY_CHASHED);
	/* workers see the change only once it is published */
	assert_int_equal(dlb_snapshot_pool_policy(dlb_config_snapshot(f->cfg), f->pool),
			 DLB_POLICY_WRANDOM);
	assert_int_equal(dlb_config_publish(f->cfg, NULL), 0);
	assert_int_equal(dlb_snapshot_pool_policy(dlb_config_snapshot(f->cfg), f->pool),
			 DLB_POLICY_CHASHED);
	fx_free(f);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_first_available_order),
		cmocka_unit_test(test_first_available_qps),
		cmocka_unit_test(test_qps_per_worker_share),
		cmocka_unit_test(test_roundrobin),
		cmocka_unit_test(test_least_outstanding),
		cmocka_unit_test(test_least_outstanding_ties),
		cmocka_unit_test(test_wrandom_distribution),
		cmocka_unit_test(test_wrandom_huge_weights),
		cmocka_unit_test(test_whashed),
		cmocka_unit_test(test_chashed_stable),
		cmocka_unit_test(test_chashed_large_weights),
		cmocka_unit_test(test_weighted_balancing_factor),
		cmocka_unit_test(test_ch_balancing_factor),
		cmocka_unit_test(test_no_server),
		cmocka_unit_test(test_pool_policy),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
