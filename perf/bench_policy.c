/*
 * bench_policy.c - in-process micro-benchmark of backend selection
 * (docs/performance.md; a benchmark, never a test: it asserts
 * nothing and prints figures).
 *
 * What each built-in policy (leastOutstanding, firstAvailable, roundrobin,
 * wrandom, whashed, chashed) costs per query, apart from the end-to-end
 * runs' noise: dlb_policy_select (dnslb/pipeline/policy.c) timed on the default pool of
 * a config with 1 backend and with 8 backends (weight=100 each, so chashed
 * has a ring of 800 points; fixed distinct ids, so the ring is the same
 * from run to run), the policy set globally (cfg->set.policy, setServerPolicy)
 * with the pool's own left at "use the global one", as the daemon does by
 * default.
 *
 * Each selection does what the query pipeline's does (dnslb/pipeline/query.c,
 * pool_select): the policies' view built on the stack from a worker's
 * counters (be_stats[] and QPS windows of DLB_MAX_BACKENDS entries), random
 * generator, roundrobin position and clock, the pool's policy looked up,
 * then dlb_policy_select.
 *
 * Queries are "q<k>.bench.example. A" with EDNS, 10,000 names built and
 * parsed in advance by the wire parser (so qname_lc/qname_len are real),
 * used in turn. In-flight queries are simulated so that leastOutstanding
 * compares real, changing counters: the last INFLIGHT selections count as
 * outstanding on their backend (each selection adds one to its backend and
 * retires the oldest), and the backends' latency EWMAs differ, so ties on
 * outstanding go to the latency comparison.
 *
 * Each figure is the median of @runs runs of @n selections, in ns per
 * selection on one thread, and includes that loop's own work (name rotation,
 * in-flight bookkeeping, a per-backend tally): the "harness" row is the same
 * loop with the selection replaced by members[0], for reference. The runs of
 * all figures are interleaved (every figure's run 1, then every figure's
 * run 2, ...), so that a change in the machine's load spreads over all of
 * them instead of landing on one policy (alternating, A B A B).
 *
 *   dnslb-bench-policy [runs (5)] [selections per run (2000000)]
 */
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
#include "perf/bench_util.h"

#define MAXRUNS		15
#define NQ		10000	/* prepared queries, used in turn */
#define INFLIGHT	16	/* simulated outstanding queries (a power of 2) */
#define HARNESS		(-1)	/* "policy": no selection, members[0] */

struct qmsg {
	uint8_t pkt[BENCH_QUERY_MAX];
	size_t len;
	struct dlb_dnsmsg m;
};

static struct qmsg queries[NQ];

static const int policies[] = {
	DLB_POLICY_LEAST_OUTSTANDING, DLB_POLICY_FIRST_AVAILABLE, DLB_POLICY_ROUNDROBIN,
	DLB_POLICY_WRANDOM, DLB_POLICY_WHASHED, DLB_POLICY_CHASHED,
};
#define NPOL ((int)(sizeof(policies) / sizeof(policies[0])))

/* A selection's result is consumed here, so the calls cannot be dropped. */
static volatile unsigned sink;

#define PROG "dnslb-bench-policy"
#define die(what) bench_die(PROG, (what))

/* The query "@name A", RD, EDNS 1232, parsed (perf/bench_util.h). */
static void
make_query(struct qmsg *q, const char *name, uint16_t id)
{
	q->len = bench_query_a(q->pkt, name, id, &q->m, PROG);
}

/* ---- the config and the worker view -------------------------------------------- */

/* @nb backends 127.0.0.1:5301.. in the default pool, weight=100, fixed distinct ids. */
static struct dlb_config *
config_with(int nb)
{
	struct dlb_config *cfg = dlb_config_new();
	char addr[32];

	if (cfg == NULL)
		die("out of memory");
	for (int i = 0; i < nb; i++) {
		struct dlb_backend *be = dlb_backend_new();

		if (be == NULL)
			die("out of memory");
		snprintf(addr, sizeof(addr), "127.0.0.1:%d", 5301 + i);
		if (dlb_sockaddr_parse(addr, 53, &be->addr, &be->addrlen) != 0)
			die("bad address");
		snprintf(be->uuid, sizeof(be->uuid), "6e2a1c52-0b1d-4c7e-9f00-%012d", i + 1);
		be->weight = 100;
		if (dlb_config_add_backend(cfg, be) != 0)
			die("cannot add a backend");
	}
	if (dlb_config_build_rings(cfg, NULL) != 0)
		die("cannot build the rings");
	return cfg;
}

/* What the policies read of a worker (dnslb/pipeline/policy.h). */
struct bench_worker {
	const struct dlb_config *cfg;
	struct dlb_be_stats *be_stats;
	struct dlb_qps_window *qps;
	struct dlb_rng rng;
	unsigned rr_counter;
};

static struct bench_worker *
worker_for(const struct dlb_config *cfg)
{
	struct bench_worker *w = calloc(1, sizeof(*w));

	if (w == NULL)
		die("out of memory");
	w->cfg = cfg;
	/* struct dlb_be_stats is declared 64-byte aligned: calloc does not promise that */
	w->be_stats = aligned_alloc(64, DLB_MAX_BACKENDS * sizeof(*w->be_stats));
	w->qps = calloc(DLB_MAX_BACKENDS, sizeof(*w->qps));
	if (w->be_stats == NULL || w->qps == NULL)
		die("out of memory");
	memset(w->be_stats, 0, DLB_MAX_BACKENDS * sizeof(*w->be_stats));
	dlb_rng_init(&w->rng);
	/* latency EWMAs that differ, so equal outstanding counts go to the latency test */
	for (int i = 0; i < cfg->nbackends; i++)
		w->be_stats[i].latency_us = 500.0 + 37.0 * (double)((i * 5) % 8);
	return w;
}

static void
worker_free(struct bench_worker *w)
{
	free(w->be_stats);
	free(w->qps);
	free(w);
}

/* One selection as the query pipeline makes it (dnslb/pipeline/query.c, pool_select). */
static struct dlb_backend *
select_one(struct bench_worker *w, const struct dlb_pool *pool, const struct dlb_dnsmsg *m,
	   double now)
{
	/* no worker threads: the builder's settings and pools */
	const struct dlb_policy_view v = dlb_policy_view_init(w->cfg, &w->cfg->set, NULL, w->be_stats,
							      w->qps, &w->rng, &w->rr_counter, now);

	return dlb_policy_select(&v, pool, dlb_config_pool_policy(w->cfg, pool), m->qname_lc,
				 m->qname_len);
}

/* ---- timing -------------------------------------------------------------------- */

/* One figure: a policy on one config, with its own in-flight window and tallies. */
struct cell {
	struct dlb_config *cfg;
	struct bench_worker *w;
	const struct dlb_pool *pool;
	int policy;			/* enum dlb_policy, or HARNESS */
	int ring[INFLIGHT];		/* backend index of the last selections */
	unsigned pos;
	unsigned q;			/* next query */
	unsigned long tally[DLB_MAX_BACKENDS];
	unsigned long none;		/* selections that returned NULL */
	double ns[MAXRUNS];
};

static void
cell_init(struct cell *c, struct dlb_config *cfg, struct bench_worker *w, int policy)
{
	memset(c, 0, sizeof(*c));
	c->cfg = cfg;
	c->w = w;
	c->policy = policy;
	c->pool = dlb_config_find_pool(cfg, "");
	if (c->pool == NULL || c->pool->n != cfg->nbackends)
		die("the default pool does not hold every backend");
	/* the in-flight window starts spread unevenly over the backends */
	for (int i = 0; i < INFLIGHT; i++)
		c->ring[i] = (i * i + 3 * i) % c->pool->n;
}

/*
 * Make @c's the policy in force and its in-flight window the worker's
 * outstanding counters (cells of one config share a worker).
 */
static void
cell_enter(struct cell *c)
{
	c->cfg->set.policy = c->policy == HARNESS ? DLB_POLICY_LEAST_OUTSTANDING : c->policy;
	for (int i = 0; i < c->cfg->nbackends; i++)
		c->w->be_stats[i].outstanding = 0;
	for (int i = 0; i < INFLIGHT; i++)
		c->w->be_stats[c->ring[i]].outstanding++;
}

/* ns per selection over @n selections by @c's policy (HARNESS: members[0]). */
static double
time_cell(struct cell *c, size_t n)
{
	struct bench_worker *w = c->w;
	const struct dlb_pool *pool = c->pool;
	const int policy = c->policy;
	unsigned q = c->q, pos = c->pos;
	unsigned acc = 0;
	double t0;

	cell_enter(c);
	t0 = mono();
	for (size_t i = 0; i < n; i++) {
		struct dlb_backend *be;

		if (policy == HARNESS)
			be = pool->members[0];
		else
			be = select_one(w, pool, &queries[q].m, t0);
		if (++q == NQ)
			q = 0;
		if (be == NULL) {
			c->none++;
			continue;
		}
		/* the oldest in-flight query is answered, this one goes out */
		w->be_stats[c->ring[pos]].outstanding--;
		c->ring[pos] = be->index;
		w->be_stats[be->index].outstanding++;
		pos = (pos + 1) & (INFLIGHT - 1);
		c->tally[be->index]++;
		acc += (unsigned)be->index;
	}
	t0 = mono() - t0;
	c->q = q;
	c->pos = pos;
	sink += acc;
	return t0 * 1e9 / (double)n;
}

/* The spread of @c's timed selections over the backends: "min..max %" per backend. */
static void
spread(const struct cell *c, char *out, size_t sz)
{
	unsigned long total = c->none, lo = (unsigned long)-1, hi = 0;

	for (int i = 0; i < c->cfg->nbackends; i++) {
		total += c->tally[i];
		lo = c->tally[i] < lo ? c->tally[i] : lo;
		hi = c->tally[i] > hi ? c->tally[i] : hi;
	}
	if (total == 0) {
		snprintf(out, sz, "-");
		return;
	}
	snprintf(out, sz, "%.1f..%.1f%%%s", 100.0 * (double)lo / (double)total,
		 100.0 * (double)hi / (double)total, c->none > 0 ? " !! some NULL" : "");
}

/* "median (min..max)" of @c's runs into @out; @return the median. */
static double
figure(struct cell *c, int runs, char *out, size_t sz)
{
	double m;

	qsort(c->ns, (size_t)runs, sizeof(c->ns[0]), cmp_double);
	m = c->ns[runs / 2];
	snprintf(out, sz, "%.1f (%.1f..%.1f)", m, c->ns[0], c->ns[runs - 1]);
	return m;
}

#define NCELL (2 * (NPOL + 1))	/* [0..NPOL]: 1 backend, then 8; the harness first */

int
main(int argc, char **argv)
{
	int runs = argc > 1 ? atoi(argv[1]) : 5;
	size_t n = argc > 2 ? strtoul(argv[2], NULL, 10) : 2000000;
	struct dlb_config *cfg[2];
	struct bench_worker *w[2];
	static struct cell cells[NCELL];

	if (runs < 1 || runs > MAXRUNS || n < 1) {
		fprintf(stderr, "usage: %s [runs (1..%d)] [selections per run (>= 1)]\n", argv[0],
			MAXRUNS);
		return 2;
	}
	for (int i = 0; i < NQ; i++) {
		char name[64];

		snprintf(name, sizeof(name), "q%d.bench.example.", i);
		make_query(&queries[i], name, (uint16_t)i);
	}
	cfg[0] = config_with(1);
	cfg[1] = config_with(8);
	for (int k = 0; k < 2; k++) {
		w[k] = worker_for(cfg[k]);
		cell_init(&cells[k * (NPOL + 1)], cfg[k], w[k], HARNESS);
		for (int p = 0; p < NPOL; p++)
			cell_init(&cells[k * (NPOL + 1) + 1 + p], cfg[k], w[k], policies[p]);
	}

	/* one warm-up round, then @runs rounds over every cell in turn (A B A B ...) */
	for (int i = 0; i < NCELL; i++)
		time_cell(&cells[i], n / 10 + 1);
	for (int i = 0; i < NCELL; i++) {
		memset(cells[i].tally, 0, sizeof(cells[i].tally));
		cells[i].none = 0;
	}
	for (int r = 0; r < runs; r++)
		for (int i = 0; i < NCELL; i++)
			cells[i].ns[r] = time_cell(&cells[i], n);

	printf("dnslb-bench-policy: dlb_policy_select, %zu selections per run, median of %d runs "
	       "(min..max),\none thread, the runs of all figures interleaved; %d query names in "
	       "turn,\n%d simulated in-flight queries, weight=100 per backend\n\n", n, runs, NQ,
	       INFLIGHT);
	printf("| %-16s | %-24s | %-24s | %8s | %-18s |\n", "policy", "1 backend: ns/sel",
	       "8 backends: ns/sel", "8 - 1 ns", "8 backends: spread");
	printf("|------------------|--------------------------|--------------------------|"
	       "----------|--------------------|\n");
	for (int p = 0; p <= NPOL; p++) {
		struct cell *c1 = &cells[p], *c8 = &cells[NPOL + 1 + p];
		char f1[48], f8[48], sp1[48], sp8[48];
		double m1 = figure(c1, runs, f1, sizeof(f1));
		double m8 = figure(c8, runs, f8, sizeof(f8));

		spread(c1, sp1, sizeof(sp1));
		spread(c8, sp8, sizeof(sp8));
		printf("| %-16s | %-24s | %-24s | %+8.1f | %-18s |%s\n",
		       c1->policy == HARNESS ? "harness (no sel)" : dlb_policy_name(c1->policy), f1,
		       f8, m8 - m1, sp8,
		       strstr(sp1, "!!") != NULL ? " !! 1 backend: some NULL" : "");
	}
	for (int k = 0; k < 2; k++) {
		worker_free(w[k]);
		dlb_config_free(cfg[k]);
	}
	return 0;
}
