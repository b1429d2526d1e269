/*
 * policy.h - the built-in load-balancing policies (firstAvailable,
 * roundrobin, leastOutstanding, wrandom, whashed, chashed).
 *
 * A policy picks a server of a pool from the pool's members, the settings
 * in the configuration (balancing factors, hash perturbation, the number of
 * workers), and a narrow per-worker view: the worker's counters, its random
 * source, its roundrobin position, its QPS windows and its clock. Nothing
 * else of a worker is read, so the query pipeline (query.c), explainQuery
 * (a view with zeroed counters) and the unit tests (hand-set counters) run
 * the same code. Lua policies need the worker's Lua state and run in
 * query.c; here a Lua policy decides as leastOutstanding.
 *
 * Thread: the owner of the view (its counters, windows, random source and
 * roundrobin position are not shared); the pool and the configuration may
 * be read by any thread.
 */
#ifndef DNSLB_POLICY_H
#define DNSLB_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "dnslb/core/config.h"

struct dlb_be_stats;
struct dlb_rng;

/* firstAvailable's QPS limit (setQPS, qps=): a one-second window per server. */
struct dlb_qps_window {
	double start;		/* s, on the view's clock */
	uint32_t count;		/* queries given to the server in this window */
};

struct dlb_policy_view {
	const struct dlb_config *cfg;		/* live objects (the worker count) */
	const struct dlb_settings *set;		/* the snapshot's settings (factors...) */
	const struct dlb_snapshot *snap;	/* pools' members and weights; NULL: the
						 * builder's (main thread: explainQuery, tests) */
	const struct dlb_be_stats *be_stats;	/* [server index]: outstanding, latency_us */
	struct dlb_qps_window *qps;		/* [server index]: firstAvailable's windows */
	struct dlb_rng *rng;			/* wrandom's draws */
	unsigned *rr_counter;			/* roundrobin's position */
	double now;				/* s: the QPS windows' clock */
};

/**
 * The view over a worker's (or a stand-in's) state at @now: every part is
 * borrowed, none is copied. @set: the settings in force (a worker's
 * snapshot's, or the builder's &cfg->set on the main thread); @snap: the
 * worker's snapshot (NULL: the builder's pools). The one place a view is put
 * together (the query path, explain(), the benchmark and the tests).
 */
static inline struct dlb_policy_view
dlb_policy_view_init(const struct dlb_config *cfg, const struct dlb_settings *set,
		     const struct dlb_snapshot *snap, const struct dlb_be_stats *be_stats,
		     struct dlb_qps_window *qps, struct dlb_rng *rng, unsigned *rr_counter,
		     double now)
{
	return (struct dlb_policy_view){
		.cfg = cfg,
		.set = set,
		.snap = snap,
		.be_stats = be_stats,
		.qps = qps,
		.rng = rng,
		.rr_counter = rr_counter,
		.now = now,
	};
}

/**
 * Choose a server of @pool by @policy (enum dlb_policy; DLB_POLICY_LUA and
 * above decide as leastOutstanding). @qname_lc, @qname_len: the query's
 * lowercased wire name, which whashed and chashed hash. Updates the view's
 * QPS windows (firstAvailable), roundrobin position and random source.
 * @return the server, or NULL when none is eligible.
 */
struct dlb_backend *dlb_policy_select(const struct dlb_policy_view *v, const struct dlb_pool *pool,
				      int policy, const uint8_t *qname_lc, size_t qname_len);

/** leastOutstanding: the up server with the fewest queries in flight (ties: order, then
 * latency, then pool order). NULL when none is up. */
struct dlb_backend *dlb_policy_least_outstanding(const struct dlb_policy_view *v,
						 const struct dlb_pool *pool);

#endif
