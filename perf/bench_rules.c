/*
 * bench_rules.c - in-process micro-benchmark of the rule engine
 * (docs/performance.md; a benchmark, never a test: it asserts
 * nothing and prints figures).
 *
 * Chains are built directly through the C API of rules/rules.h
 * (dlb_sel_new + payload, dlb_act_new, dlb_rule_new, dlb_rules_publish),
 * then dlb_rules_run_query is timed on a struct dlb_dq filled on the stack
 * the way dnslb/pipeline/query.c's query_rules fills it (memset, packet fields,
 * dlb_dq_reset_decisions, tags cleared), per query:
 *
 *   empty chain            what the call and the dq set-up cost alone
 *   N QTypeRule            N non-matching qtype comparisons (N = 10, 100, 10000)
 *   N QNameRule            N non-matching exact-name comparisons
 *   N mixed                N non-matching rules cycling through QNameRule,
 *                          QTypeRule, a 2-name suffix rule, a /24
 *                          NetmaskGroupRule, AndRule{QTypeRule(A) matches,
 *                          QNameRule} and OrRule{AXFR, IXFR}
 *   100 of each kind       those six kinds one at a time, RegexRule (1 and 10)
 *                          and a SuffixMatchNodeRule of 100,000 names alone
 *   perf/run rules chain   the 100 rules of `perf/run --scenario rules` with
 *                          the LuaAction replaced by AllRule -> NoneAction
 *                          (a SuffixMatchNodeRule of 100,000 names, 24
 *                          QNameRule, 24 QTypeRule, 24 suffix rules, 12
 *                          NetmaskGroupRule, 12 AndRule, a RegexRule, an
 *                          OrRule, then the one rule that matches)
 *
 * Queries are "q<k>.bench.example. A" with EDNS, from 127.0.0.1, 1024
 * different names parsed in advance and used in turn. Each figure is the
 * median of @runs runs, in ns per query on one thread; ns/rule is
 * (ns/query - the empty chain's) / rules.
 *
 * Then the name sets, with 1,000,000 generated names
 * "n<i>.zone<i % 1000>.example.": build time, bytes per name
 * (dlb_suffix_set_memory / count, and VmRSS growth), the copy a
 * SuffixMatchNodeRule makes of its set, and the lookup cost of hits and
 * misses in random order (65,536 probe names): for the suffix set
 * (SuffixMatchNode) and the exact name set (DNSNameSet, QNameSetRule).
 *
 *   dnslb-bench-rules [runs (5)] [names (1000000)]
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dnslb/core/netmask.h"
#include "dnslb/core/stats.h"
#include "dnslb/core/util.h"
#include "dnslb/core/wire.h"
#include "rules/rules.h"
#include "perf/bench_util.h"

#define MAXRUNS	15
#define NQ	1024		/* prepared queries, used in turn */
#define NPROBE	65536		/* probe names for the set lookups */
#define PSTRIDE	48		/* bytes per probe name (wire form, <= 40 here) */

struct qmsg {
	uint8_t pkt[512];	/* the query; answers could be built in place */
	size_t len;
	struct dlb_dnsmsg m;
};

static struct qmsg queries[NQ];
static struct sockaddr_in client, local;
static struct dlb_rng rng;
static struct dlb_stats stats;

#define PROG "dnslb-bench-rules"
#define die(what) bench_die(PROG, (what))

/* Text name to lowercased wire form in @out (DLB_MAX_NAME); @return its length. */
static size_t
lc_name(const char *text, uint8_t *out)
{
	int n = dlb_wire_name_from_text(text, out, DLB_MAX_NAME);

	if (n <= 0)
		die("bad name");
	for (int i = 0; i < n; i++)
		if (out[i] >= 'A' && out[i] <= 'Z')
			out[i] = (uint8_t)(out[i] | 0x20);
	return (size_t)n;
}

/* The query "@name A", RD, EDNS 1232, parsed (perf/bench_util.h). */
static void
make_query(struct qmsg *q, const char *name, uint16_t id)
{
	q->len = bench_query_a(q->pkt, name, id, &q->m, PROG);
}

/* ---- building rules through the C API ------------------------------------------ */

static struct dlb_sel *
sel_new(enum dlb_sel_type t)
{
	struct dlb_sel *s = dlb_sel_new(t);

	if (s == NULL)
		die("out of memory");
	return s;
}

static struct dlb_sel *
sel_qname(const char *text)
{
	struct dlb_sel *s = sel_new(DLB_SEL_QNAME);

	s->u.name.len = (uint16_t)lc_name(text, s->u.name.lc);
	return s;
}

static struct dlb_sel *
sel_qtype(uint16_t t)
{
	struct dlb_sel *s = sel_new(DLB_SEL_QTYPE);

	s->u.num = t;
	return s;
}

static struct dlb_sel *
sel_suffixes(const char *a, const char *b)
{
	struct dlb_sel *s = sel_new(DLB_SEL_SUFFIX);
	uint8_t lc[DLB_MAX_NAME];

	s->u.suffixes = dlb_suffix_set_new();
	if (s->u.suffixes == NULL)
		die("out of memory");
	if (dlb_suffix_set_add(s->u.suffixes, lc, lc_name(a, lc)) != 0 ||
	    (b != NULL && dlb_suffix_set_add(s->u.suffixes, lc, lc_name(b, lc)) != 0))
		die("out of memory");
	return s;
}

static struct dlb_sel *
sel_nmg(const char *mask)
{
	struct dlb_sel *s = sel_new(DLB_SEL_NMG);
	struct dlb_netmask nm;

	s->u.nmg.src = true;
	if (dlb_netmask_parse(mask, &nm) != 0 || dlb_nmg_add(&s->u.nmg.g, &nm) != 0)
		die("bad netmask");
	return s;
}

/* AndRule / OrRule of two selectors (their references move into the list). */
static struct dlb_sel *
sel_list(enum dlb_sel_type t, struct dlb_sel *a, struct dlb_sel *b)
{
	struct dlb_sel *s = sel_new(t);

	s->u.list.v = malloc(2 * sizeof(s->u.list.v[0]));
	if (s->u.list.v == NULL)
		die("out of memory");
	s->u.list.v[0] = a;
	s->u.list.v[1] = b;
	s->u.list.n = 2;
	return s;
}

static struct dlb_act *
act_new(enum dlb_act_type t)
{
	struct dlb_act *a = dlb_act_new(t);

	if (a == NULL)
		die("out of memory");
	return a;
}

static struct dlb_act *
act_pool(const char *name)
{
	struct dlb_act *a = act_new(DLB_ACT_POOL);

	a->u.pool.name = strdup(name);
	a->u.pool.stop = true;
	if (a->u.pool.name == NULL)
		die("out of memory");
	return a;
}

static struct dlb_act *
act_rcode(uint16_t rcode)
{
	struct dlb_act *a = act_new(DLB_ACT_RCODE);

	a->u.rcode.rcode = rcode;
	a->u.rcode.o.ttl = 60;
	return a;
}

/* A growing list of rules; the rule holds the references to @sel and @act. */
struct rules {
	struct dlb_rule **v;
	int n, cap;
};

static void
add(struct rules *r, struct dlb_sel *sel, struct dlb_act *act)
{
	struct dlb_rule *rule;

	if (r->n == r->cap) {
		r->cap = r->cap ? 2 * r->cap : 64;
		r->v = realloc(r->v, (size_t)r->cap * sizeof(r->v[0]));
		if (r->v == NULL)
			die("out of memory");
	}
	rule = dlb_rule_new(sel, act, "", NULL);
	if (rule == NULL)
		die("out of memory");
	dlb_sel_unref(sel);
	dlb_act_unref(act);
	r->v[r->n++] = rule;
}

static void
rules_free(struct rules *r)
{
	for (int i = 0; i < r->n; i++)
		dlb_rule_unref(r->v[i]);
	free(r->v);
	memset(r, 0, sizeof(*r));
}

/* Non-A qtypes for the non-matching QTypeRules. */
static const uint16_t other_types[] = { 2, 5, 6, 12, 15, 16, 28, 33, 35, 43, 46, 48, 64, 65, 257 };
#define NTYPES (sizeof(other_types) / sizeof(other_types[0]))

static void
add_qtype_rule(struct rules *r, int i)
{
	add(r, sel_qtype(other_types[i % NTYPES]), act_rcode(DLB_RCODE_REFUSED));
}

static void
add_qname_rule(struct rules *r, int i)
{
	char name[64];

	snprintf(name, sizeof(name), "r%d.nomatch.example.", i);
	add(r, sel_qname(name), act_new(DLB_ACT_DROP));
}

/* The kinds of non-matching rules (never match "q<k>.bench.example. A" from 127.0.0.1). */
enum rule_kind {
	R_QNAME,	/* QNameRule("r<i>.nomatch.example.") */
	R_QTYPE,	/* QTypeRule(a non-A type) */
	R_SUFFIX,	/* makeRule({"z<i>.example.", "y<i>.example."}): a 2-name suffix set */
	R_NMG,		/* NetmaskGroupRule("10.x.y.0/24") */
	R_AND,		/* AndRule{QTypeRule(A) (matches), QNameRule("a<i>.nomatch.example.")} */
	R_OR,		/* OrRule{QTypeRule(AXFR), QTypeRule(IXFR)} */
	R_REGEX,	/* RegexRule("^evil<i>[0-9]*\\.") */
	R__MIXED	/* the first six in turn */
};

static void
add_kind_rule(struct rules *r, enum rule_kind kind, int i)
{
	char a[64], b[64], pool[32], err[128];
	struct dlb_sel *re;

	switch (kind == R__MIXED ? (enum rule_kind)(i % 6) : kind) {
	case R_QNAME:
		add_qname_rule(r, i);
		break;
	case R_QTYPE:
		add_qtype_rule(r, i);
		break;
	case R_SUFFIX:
		snprintf(a, sizeof(a), "z%d.example.", i);
		snprintf(b, sizeof(b), "y%d.example.", i);
		snprintf(pool, sizeof(pool), "p%d", i);
		add(r, sel_suffixes(a, b), act_pool(pool));
		break;
	case R_NMG:
		snprintf(a, sizeof(a), "10.%d.%d.0/24", (i / 256) % 256, i % 256);
		add(r, sel_nmg(a), act_new(DLB_ACT_DROP));
		break;
	case R_AND:
		snprintf(a, sizeof(a), "a%d.nomatch.example.", i);
		add(r, sel_list(DLB_SEL_AND, sel_qtype(1 /* A */), sel_qname(a)),
		    act_new(DLB_ACT_DROP));
		break;
	case R_OR:
		add(r, sel_list(DLB_SEL_OR, sel_qtype(252), sel_qtype(251)),
		    act_rcode(DLB_RCODE_REFUSED));
		break;
	default:
		snprintf(a, sizeof(a), "^evil%d[0-9]*\\.", i);
		re = sel_new(DLB_SEL_REGEX);
		if (dlb_sel_set_regex(re, a, err, sizeof(err)) != 0)
			die(err);
		add(r, re, act_new(DLB_ACT_DROP));
		break;
	}
}

/*
 * The chain of `perf/run --scenario rules` (same order and kinds; its
 * LuaAction becomes AllRule -> NoneAction here).
 */
/* SuffixMatchNodeRule of "s<i>.blocked.example." for i < 100,000 (what perf/run's has). */
static struct dlb_sel *
sel_smn100k(void)
{
	struct dlb_sel *smn = sel_new(DLB_SEL_SUFFIX);
	uint8_t lc[DLB_MAX_NAME];
	char name[64];

	smn->u.suffixes = dlb_suffix_set_new();
	if (smn->u.suffixes == NULL)
		die("out of memory");
	for (int i = 0; i < 100000; i++) {
		snprintf(name, sizeof(name), "s%d.blocked.example.", i);
		if (dlb_suffix_set_add(smn->u.suffixes, lc, lc_name(name, lc)) != 0)
			die("out of memory");
	}
	return smn;
}

static void
add_perf_run_chain(struct rules *r)
{
	struct dlb_sel *re;
	char name[64], err[128], b[64];
	int i;

	add(r, sel_smn100k(), act_new(DLB_ACT_DROP));
	for (i = 1; i <= 24; i++) {
		snprintf(name, sizeof(name), "r%d.nomatch.example.", i);
		add(r, sel_qname(name), act_new(DLB_ACT_DROP));
	}
	for (i = 1; i <= 24; i++)
		add_qtype_rule(r, i);
	for (i = 1; i <= 24; i++) {
		snprintf(name, sizeof(name), "z%d.example.", i);
		snprintf(b, sizeof(b), "y%d.example.", i);
		add(r, sel_suffixes(name, b), act_new(DLB_ACT_DROP));
	}
	for (i = 1; i <= 12; i++) {
		snprintf(name, sizeof(name), "10.%d.0.0/16", i);
		add(r, sel_nmg(name), act_new(DLB_ACT_DROP));
	}
	for (i = 1; i <= 12; i++) {
		snprintf(name, sizeof(name), "a%d.nomatch.example.", i);
		add(r, sel_list(DLB_SEL_AND, sel_qtype(1), sel_qname(name)),
		    act_new(DLB_ACT_DROP));
	}
	re = sel_new(DLB_SEL_REGEX);
	if (dlb_sel_set_regex(re, "^evil[0-9]+\\.", err, sizeof(err)) != 0)
		die(err);
	add(r, re, act_new(DLB_ACT_DROP));
	add(r, sel_list(DLB_SEL_OR, sel_qtype(252), sel_qtype(251)), act_rcode(DLB_RCODE_REFUSED));
	add(r, sel_new(DLB_SEL_ALL), act_new(DLB_ACT_NONE));
}

/* ---- timing the chain ------------------------------------------------------------ */

/* One query through @c, the dq filled as dnslb/pipeline/query.c's query_rules does. */
static inline enum dlb_verdict_r
run_one(const struct dlb_chain *c, struct qmsg *q, double now)
{
	struct dlb_dq dq;

	memset(&dq, 0, offsetof(struct dlb_dq, tags));
	dq.pkt = q->pkt;
	dq.len = q->len;
	dq.cap = sizeof(q->pkt);
	dq.m = &q->m;
	dq.remote = (const struct sockaddr *)&client;
	dq.local = (const struct sockaddr *)&local;
	dq.tcp = false;
	dq.worker = 0;
	dq.lua = NULL;
	dq.cfg = NULL;
	dq.now = now;
	dq.t_start = now;
	dq.rng = &rng;
	dq.be_index = -1;
	dlb_dq_reset_decisions(&dq);
	dlb_tags_clear(&dq.tags);
	return dlb_rules_run_query(c, &dq, &stats);
}

/* ns per query over @iters queries through the published query chain. */
static double
time_chain(size_t iters, unsigned *verdicts)
{
	const struct dlb_chain *c = dlb_rules_chain(DLB_CHAIN_QUERY);
	double t0 = mono(), now = t0;

	for (size_t i = 0; i < iters; i++)
		verdicts[run_one(c, &queries[i & (NQ - 1)], now)]++;
	return (mono() - t0) * 1e9 / (double)iters;
}

static double empty_ns;	/* the empty chain's figure: what the rules add is above it */

/*
 * A chain of @n rules of @kind (-1: the perf/run chain; -2: its
 * SuffixMatchNodeRule alone; n 0: empty), timed.
 */
static void
bench_chain(int kind, int n, int runs, const char *label)
{
	struct rules r = { 0 };
	double ns[MAXRUNS], m;
	unsigned verdicts[8] = { 0 };
	size_t iters;
	uint64_t hits;

	for (int i = 0; i < n; i++)
		add_kind_rule(&r, (enum rule_kind)kind, i);
	if (kind == -1)
		add_perf_run_chain(&r);
	else if (kind == -2)
		add(&r, sel_smn100k(), act_new(DLB_ACT_DROP));
	if (dlb_rules_publish(DLB_CHAIN_QUERY, r.v, r.n, NULL) != 0)
		die("publish failed");
	/* about 50 M rule evaluations per run, at least 2000 queries, at most 5 M */
	iters = r.n > 0 ? 50000000u / (size_t)r.n : 5000000u;
	iters = iters < 2000 ? 2000 : iters > 5000000 ? 5000000 : iters;
	time_chain(iters / 10 + 1, verdicts);	/* warm up */
	memset(verdicts, 0, sizeof(verdicts));
	for (int k = 0; k < runs; k++)
		ns[k] = time_chain(iters, verdicts);
	hits = r.n > 0 ? dlb_rule_hits(r.v[r.n - 1]) : 0;
	m = median(ns, runs);
	if (r.n == 0)
		empty_ns = m;
	printf("| %-50s | %6d | %9.1f | %9.1f..%-9.1f | %7.2f |%s\n", label, r.n, m, ns[0],
	       ns[runs - 1], r.n > 0 ? (m - empty_ns) / r.n : 0.0,
	       verdicts[DLB_R_FORWARD] == (unsigned)(iters * (size_t)runs) ? ""
									 : " !! not all forwarded");
	if (kind == -1 && hits == 0)
		printf("!! the last rule (All -> None) never matched\n");
	dlb_rules_publish(DLB_CHAIN_QUERY, NULL, 0, NULL);
	rules_free(&r);
}

/* ---- the name sets ---------------------------------------------------------------- */

/* The probe names of kind @kind for name number @i (see bench_sets' probes[]). */
static void
probe_name(int kind, unsigned i, char *text, size_t sz)
{
	switch (kind) {
	case 0:
		snprintf(text, sz, "www.n%u.zone%u.example.", i, i % 1000);
		break;
	case 1:
		snprintf(text, sz, "n%u.zone%u.example.", i, i % 1000);
		break;
	case 2:
		snprintf(text, sz, "x%u.zone%u.example.", i, i % 1000);
		break;
	default:
		snprintf(text, sz, "n%u.zone%u.other.", i, i % 1000);
		break;
	}
}

/* NPROBE probe names of @kind for random i < @names, lowercased wire form. */
static void
make_probes(uint8_t *buf, uint8_t *lens, int kind, unsigned names, uint64_t *seed)
{
	char text[96];

	for (unsigned k = 0; k < NPROBE; k++) {
		probe_name(kind, (unsigned)(rnd(seed) % names), text, sizeof(text));
		lens[k] = (uint8_t)lc_name(text, buf + (size_t)k * PSTRIDE);
	}
}

static double
time_suffix(const struct dlb_suffix_set *s, const uint8_t *buf, const uint8_t *lens, size_t ops,
	    unsigned *found)
{
	double t0 = mono();

	for (size_t i = 0; i < ops; i++) {
		size_t k = i & (NPROBE - 1);

		*found += dlb_suffix_set_match(s, buf + k * PSTRIDE, lens[k]);
	}
	return (mono() - t0) * 1e9 / (double)ops;
}

static double
time_nameset(const struct dlb_name_set *s, const uint8_t *buf, const uint8_t *lens, size_t ops,
	     unsigned *found)
{
	double t0 = mono();

	for (size_t i = 0; i < ops; i++) {
		size_t k = i & (NPROBE - 1);

		*found += dlb_name_set_match(s, buf + k * PSTRIDE, lens[k]);
	}
	return (mono() - t0) * 1e9 / (double)ops;
}

struct probe_set {
	const char *label;
	bool expect;	/* hit */
	uint8_t *buf;
	uint8_t lens[NPROBE];
};

static void
bench_sets(unsigned names, int runs)
{
	struct probe_set probes[] = {
		/* in probe_name's order */
		{ "hit: a name below a suffix (www.n<i>.zone<j>.example.)", true, NULL, { 0 } },
		{ "hit: the name itself (n<i>.zone<j>.example.)", true, NULL, { 0 } },
		{ "miss: first label differs (x<i>.zone<j>.example.)", false, NULL, { 0 } },
		{ "miss: at the TLD (n<i>.zone<j>.other.)", false, NULL, { 0 } },
	};
	enum { NP = sizeof(probes) / sizeof(probes[0]) };
	struct dlb_suffix_set *ss, *copy;
	struct dlb_name_set *ns;
	uint8_t lc[DLB_MAX_NAME];
	char text[96];
	uint64_t seed = 88172645463325252ull;
	long rss0, rss1, rss2;
	double t, tb, tc;
	size_t ops = 2000000;
	unsigned found;

	for (int p = 0; p < NP; p++) {
		probes[p].buf = malloc((size_t)NPROBE * PSTRIDE);
		if (probes[p].buf == NULL)
			die("out of memory");
		make_probes(probes[p].buf, probes[p].lens, p, names, &seed);
	}

	/* suffix set (SuffixMatchNode) */
	rss0 = vmrss_kib();
	ss = dlb_suffix_set_new();
	if (ss == NULL)
		die("out of memory");
	t = mono();
	for (unsigned i = 0; i < names; i++) {
		snprintf(text, sizeof(text), "n%u.zone%u.example.", i, i % 1000);
		if (dlb_suffix_set_add(ss, lc, lc_name(text, lc)) != 0)
			die("out of memory");
	}
	tb = mono() - t;
	rss1 = vmrss_kib();
	t = mono();
	copy = dlb_suffix_set_copy(ss);
	tc = mono() - t;
	rss2 = vmrss_kib();
	if (copy == NULL)
		die("out of memory");
	printf("suffix set (SuffixMatchNode), %zu names \"n<i>.zone<i%%1000>.example.\":\n",
	       dlb_suffix_set_count(ss));
	printf("  build (dlb_suffix_set_add, incl. text-to-wire of each name): %.2f s = %.0f ns "
	       "per name\n", tb, tb * 1e9 / names);
	printf("  memory: dlb_suffix_set_memory %zu bytes = %.1f bytes per name; VmRSS growth "
	       "%ld KiB = %.1f bytes per name\n", dlb_suffix_set_memory(ss),
	       (double)dlb_suffix_set_memory(ss) / (double)dlb_suffix_set_count(ss), rss1 - rss0,
	       (double)(rss1 - rss0) * 1024.0 / names);
	printf("  copy (SuffixMatchNodeRule copies its set): %.3f s, VmRSS growth %ld KiB\n", tc,
	       rss2 - rss1);
	dlb_suffix_set_free(copy);
	printf("  lookups (dlb_suffix_set_match), %d probe names in random order, %zu per run, "
	       "median of %d:\n", NPROBE, ops, runs);
	for (int p = 0; p < NP; p++) {
		double nsv[MAXRUNS];

		found = 0;
		time_suffix(ss, probes[p].buf, probes[p].lens, ops / 10, &found);
		found = 0;
		for (int k = 0; k < runs; k++)
			nsv[k] = time_suffix(ss, probes[p].buf, probes[p].lens, ops, &found);
		printf("  | %-56s | %6.1f ns | %s\n", probes[p].label, median(nsv, runs),
		       (found == (probes[p].expect ? ops * (size_t)runs : 0)) ? "as expected"
									    : "!! unexpected result");
	}
	dlb_suffix_set_free(ss);

	/* exact name set (DNSNameSet / QNameSetRule) */
	rss0 = vmrss_kib();
	ns = dlb_name_set_new();
	if (ns == NULL)
		die("out of memory");
	t = mono();
	for (unsigned i = 0; i < names; i++) {
		snprintf(text, sizeof(text), "n%u.zone%u.example.", i, i % 1000);
		if (dlb_name_set_add(ns, lc, lc_name(text, lc)) != 0)
			die("out of memory");
	}
	tb = mono() - t;
	rss1 = vmrss_kib();
	printf("\nname set (DNSNameSet, QNameSetRule), %zu names:\n", dlb_name_set_count(ns));
	printf("  build (dlb_name_set_add): %.2f s = %.0f ns per name; VmRSS growth %ld KiB = "
	       "%.1f bytes per name\n", tb, tb * 1e9 / names, rss1 - rss0,
	       (double)(rss1 - rss0) * 1024.0 / names);
	for (int p = 0; p < NP; p++) {
		double nsv[MAXRUNS];
		bool expect = p == 1;	/* exact names only */

		found = 0;
		time_nameset(ns, probes[p].buf, probes[p].lens, ops / 10, &found);
		found = 0;
		for (int k = 0; k < runs; k++)
			nsv[k] = time_nameset(ns, probes[p].buf, probes[p].lens, ops, &found);
		printf("  | %-56s | %6.1f ns | %s\n", probes[p].label, median(nsv, runs),
		       (found == (expect ? ops * (size_t)runs : 0)) ? (expect ? "hit" : "miss")
								      : "!! unexpected result");
	}
	dlb_name_set_free(ns);
	for (int p = 0; p < NP; p++)
		free(probes[p].buf);
}

int
main(int argc, char **argv)
{
	int runs = argc > 1 ? atoi(argv[1]) : 5;
	unsigned names = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 1000000;
	static const int sizes[] = { 10, 100, 10000 };

	if (runs < 1 || runs > MAXRUNS || names < 1000) {
		fprintf(stderr, "usage: %s [runs (1..%d)] [names (>= 1000)]\n", argv[0], MAXRUNS);
		return 2;
	}
	client.sin_family = AF_INET;
	client.sin_port = htons(40000);
	client.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	local = client;
	local.sin_port = htons(53);
	for (int i = 0; i < NQ; i++) {
		char name[64];

		snprintf(name, sizeof(name), "q%d.bench.example.", i);
		make_query(&queries[i], name, (uint16_t)i);
	}

	printf("dnslb-bench-rules: %d runs per figure (median), one thread\n\n", runs);
	bench_sets(names, runs);	/* first, so that no freed memory is reused */

	printf("\nrule chains: dlb_rules_run_query per query (dq set-up included), queries "
	       "\"q<k>.bench.example. A\" (%d names), no rule matching unless said\n\n", NQ);
	printf("| %-50s | %6s | %9s | %-20s | %7s |\n", "chain", "rules", "ns/query",
	       "min..max", "ns/rule");
	printf("|----------------------------------------------------|--------|-----------|"
	       "----------------------|---------|\n");
	bench_chain(0, 0, runs, "empty chain (dq set-up + call)");
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		bench_chain(R_QTYPE, sizes[i], runs, "QTypeRule, none matching");
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		bench_chain(R_QNAME, sizes[i], runs, "QNameRule, none matching");
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		bench_chain(R__MIXED, sizes[i], runs, "mixed (the first 6 kinds in turn)");
	bench_chain(R_SUFFIX, 100, runs, "suffix rule of 2 names, none matching");
	bench_chain(R_NMG, 100, runs, "NetmaskGroupRule /24, none matching");
	bench_chain(R_AND, 100, runs, "AndRule{QType A, QName}, none matching");
	bench_chain(R_OR, 100, runs, "OrRule{QType AXFR, IXFR}, none matching");
	bench_chain(R_REGEX, 1, runs, "RegexRule, not matching");
	bench_chain(R_REGEX, 10, runs, "RegexRule, none matching");
	bench_chain(-2, 0, runs, "SuffixMatchNodeRule of 100,000 names, no match");
	bench_chain(-1, 0, runs, "perf/run rules chain (Lua -> All/None)");
	return 0;
}
