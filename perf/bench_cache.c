/*
 * bench_cache.c - in-process micro-benchmark of the packet cache
 * (docs/performance.md; a benchmark, never a test: it asserts
 * nothing and prints figures).
 *
 *   hit, 10000 names   cache key + lookup + copy-out (ID, qname case and TTL
 *                      patches) of a hit, names in random order
 *   hit, 100 names     the same over 100 hot names
 *   batch of 32        the same, the way a worker handles a receive batch:
 *                      keys for 32 queries, their sets then their entries
 *                      prefetched, then the lookups (dlb_cache_prefetch*)
 *   insert, full       cache key + insert of a new name into a full cache:
 *                      every insert evicts (it must not scan the cache)
 *
 * Each figure is the median of @runs runs of @ops operations, in ns per
 * operation on one thread. Hits run inside one RCU section per batch of 32
 * queries, as a worker does per receive batch (section enter/exit per query
 * is measured too). Then memory: VmRSS growth for 100,000 entries of a
 * typical answer (an A record for a 21-octet name, 64 octets).
 *
 *   dnslb-bench-cache [ops per run (1000000)] [runs (5)]
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dnslb/core/cache.h"
#include "dnslb/core/rcu.h"
#include "dnslb/core/wire.h"
#include "perf/bench_util.h"

#define T0	1700000000.0
#define BATCH	32
#define MAXRUNS	15

struct qmsg {
	uint8_t pkt[BENCH_QUERY_MAX];	/* the query */
	size_t len;
	struct dlb_dnsmsg m;
};

static struct dlb_rcu_thread rt;

/* A query "<Label>.example.com A", RD, EDNS 1232: the first letter in upper case (0x20-style). */
static void
make_query(struct qmsg *q, const char *label, uint16_t id)
{
	char name[DLB_MAX_NAME];

	snprintf(name, sizeof(name), "%s.example.com.", label);
	name[0] = (char)toupper((unsigned char)name[0]);
	q->len = bench_query_a(q->pkt, name, id, &q->m, "dnslb-bench-cache");
}

/* The backend's answer to @q: one A record (TTL 3600) and an OPT. */
static size_t
make_answer(const struct qmsg *q, uint32_t addr, uint8_t *out)
{
	size_t n = q->len - 11;

	memcpy(out, q->pkt, n);
	dlb_wr16(out + 2, DLB_F_QR | DLB_F_RD | DLB_F_RA);
	dlb_wr16(out + 6, 1);
	dlb_wr16(out + n, 0xc00c);
	dlb_wr16(out + n + 2, 1);
	dlb_wr16(out + n + 4, 1);
	dlb_wr32(out + n + 6, 3600);
	dlb_wr16(out + n + 10, 4);
	dlb_wr32(out + n + 12, addr);
	n += 16;
	memcpy(out + n, q->pkt + q->len - 11, 11);
	return n + 11;
}

static struct dlb_cache *
new_cache(uint32_t max_entries)
{
	struct dlb_cache_opts o;
	struct dlb_cache *c;

	dlb_cache_opts_default(&o);
	o.max_entries = max_entries;
	c = dlb_cache_new(&o);
	if (c == NULL) {
		fprintf(stderr, "dlb_cache_new failed\n");
		exit(1);
	}
	return c;
}

struct result {
	double ns[MAXRUNS];
	int n;
};

static void
report(const char *what, struct result *r)
{
	qsort(r->ns, (size_t)r->n, sizeof(r->ns[0]), cmp_double);
	printf("| %-46s | %7.1f | %7.1f | %7.1f |\n", what, r->ns[r->n / 2], r->ns[0],
	       r->ns[r->n - 1]);
}

/*
 * ns per hit: key + lookup + copy-out of names @idx[] ("www<5 digits>"), an
 * RCU section per @batch queries. As in a worker, the query and its parse
 * are in one hot buffer (the receive buffer and the query slot): each query
 * only rewrites the 5 digits there, so what is measured is the cache's own
 * work and memory traffic, not the benchmark's. The key includes the name's
 * hash, which the parser computes in dnslb (dlb_wire_name_hash): it is
 * computed here for each query.
 */
static char digits[100000][8];	/* "%05u" of every name number */

/* Make @q the query for name number @n, with ID @id. */
static void
set_name(struct qmsg *q, uint32_t n, uint16_t id)
{
	memcpy(q->pkt + 16, digits[n], 5);
	memcpy(q->m.qname_lc + 4, digits[n], 5);
	q->m.qname_hash = dlb_wire_name_hash(q->m.qname_lc, q->m.qname_len);
	q->m.id = id;
}

/* Lookup and copy-out of @k for @q: a miss is counted, a hit feeds @sink. */
static void
get_one(struct dlb_cache *c, const struct dlb_cache_key *k, const struct qmsg *q,
	unsigned *misses, unsigned *sink)
{
	uint8_t out[512];
	size_t len;
	bool pf;

	if (dlb_cache_get(c, k, q->m.id, q->pkt + q->m.qname_off, T0 + 10, 0, out, sizeof(out),
			  &len, &pf, 0) != DLB_CACHE_HIT)
		(*misses)++;
	else
		*sink += out[len - 1];
}

/* ns per operation of a run of @ops that started at @t. */
static double
per_op(double t, size_t ops, unsigned misses)
{
	t = mono() - t;
	if (misses != 0)
		fprintf(stderr, "warning: %u misses\n", misses);
	return t * 1e9 / (double)ops;
}

static double
run_hits(struct dlb_cache *c, const uint32_t *idx, size_t ops, int batch, unsigned *sink)
{
	struct qmsg q;
	double t;
	unsigned misses = 0;

	make_query(&q, "www00000", 0);
	t = mono();
	for (size_t i = 0; i < ops; i += (size_t)batch) {
		dlb_rcu_enter(&rt);
		for (size_t j = i; j < i + (size_t)batch && j < ops; j++) {
			struct dlb_cache_key k;

			set_name(&q, idx[j], (uint16_t)j);
			if (dlb_cache_key_make(c, q.pkt, &q.m, false, &k) != 0)
				misses++;
			else
				get_one(c, &k, &q, &misses, sink);
		}
		dlb_rcu_exit(&rt);
	}
	return per_op(t, ops, misses);
}

/*
 * The same, the way a worker handles a receive batch of @batch queries:
 * keys for the whole batch, each key's set prefetched, then each matching
 * entry prefetched, then the lookups and copy-outs (dlb_cache_prefetch*,
 * dnslb/frontend/frontend.c). The misses of a batch overlap instead of adding up.
 */
static double
run_hits_batched(struct dlb_cache *c, const uint32_t *idx, size_t ops, int batch, unsigned *sink)
{
	static struct qmsg qs[BATCH];
	static struct dlb_cache_key keys[BATCH];
	double t;
	unsigned misses = 0;

	for (int j = 0; j < batch; j++)
		make_query(&qs[j], "www00000", 0);
	t = mono();
	for (size_t i = 0; i < ops; i += (size_t)batch) {
		int n = ops - i < (size_t)batch ? (int)(ops - i) : batch;
		bool ok[BATCH];

		dlb_rcu_enter(&rt);
		for (int j = 0; j < n; j++) {
			struct qmsg *q = &qs[j];

			set_name(q, idx[i + j], (uint16_t)(i + j));
			ok[j] = dlb_cache_key_make(c, q->pkt, &q->m, false, &keys[j]) == 0;
			if (ok[j])
				dlb_cache_prefetch(c, &keys[j]);
		}
		for (int j = 0; j < n; j++)
			if (ok[j])
				dlb_cache_prefetch_entry(c, &keys[j]);
		for (int j = 0; j < n; j++) {
			if (!ok[j])
				misses++;
			else
				get_one(c, &keys[j], &qs[j], &misses, sink);
		}
		dlb_rcu_exit(&rt);
	}
	return per_op(t, ops, misses);
}

/* ns per insert into a full cache of @c; names are never seen before. */
static double
run_inserts(struct dlb_cache *c, size_t ops, unsigned *serial, uint64_t *inserted)
{
	struct qmsg q;
	uint8_t ans[512];
	char label[16];
	size_t alen;
	double t;

	snprintf(label, sizeof(label), "n%08u", 0u);
	make_query(&q, label, 1);
	alen = make_answer(&q, 0, ans);
	t = mono();
	for (size_t i = 0; i < ops; i++) {
		struct dlb_cache_key k;
		unsigned s = (*serial)++;

		/* a new name: rewrite the 8 digits in the parsed query and the answer */
		for (int d = 8; d >= 1; d--, s /= 10) {
			q.m.qname_lc[1 + d] = (uint8_t)('0' + s % 10);
			ans[12 + 1 + d] = (uint8_t)('0' + s % 10);
		}
		q.m.qname_hash = dlb_wire_name_hash(q.m.qname_lc, q.m.qname_len);
		if (dlb_cache_key_make(c, q.pkt, &q.m, false, &k) == 0 &&
		    dlb_cache_insert(c, &rt, &k, ans, alen, T0, -1))
			(*inserted)++;
		if ((i & 63) == 63)
			dlb_rcu_poll(&rt);
	}
	t = mono() - t;
	return t * 1e9 / (double)ops;
}

static void
bench_memory(void)
{
	enum { N = 100000 };
	struct dlb_cache *c;
	struct dlb_cache_stats st;
	struct qmsg q;
	uint8_t ans[512];
	size_t alen = 0;
	long before, after;
	unsigned failed = 0;

	before = vmrss_kib();
	c = new_cache(N);
	for (unsigned i = 0; i < N; i++) {
		struct dlb_cache_key k;
		char label[16];

		snprintf(label, sizeof(label), "r%06u", i);
		make_query(&q, label, 1);
		alen = make_answer(&q, i, ans);
		if (dlb_cache_key_make(c, q.pkt, &q.m, false, &k) != 0 ||
		    !dlb_cache_insert(c, &rt, &k, ans, alen, T0, -1))
			failed++;
	}
	after = vmrss_kib();
	dlb_cache_get_stats(c, &st);
	printf("memory: %u inserts, %llu entries held (%u refused, %llu evicted: shards fill "
	       "unevenly), answer %zu octets, name %u octets\n", (unsigned)N,
	       (unsigned long long)st.entries, failed, (unsigned long long)st.evictions, alen,
	       (unsigned)q.m.qname_len);
	printf("  VmRSS growth     %ld KiB = %.0f bytes per entry (entries + slot arrays + "
	       "malloc overhead)\n", after - before,
	       (double)(after - before) * 1024.0 / (double)st.entries);
	printf("  engine's count   %.0f bytes per entry (entry allocations, stats.bytes)\n",
	       (double)st.bytes / (double)st.entries);
	dlb_rcu_barrier(&rt);
	dlb_cache_free(c);
}

/* A cache of 100,000 entries holding names 0..@n-1; @return it, *@held: those cached. */
static struct dlb_cache *
warm_cache(unsigned n, uint32_t *held, unsigned *nheld)
{
	struct dlb_cache *c = new_cache(100000);

	for (unsigned i = 0; i < n; i++) {
		struct dlb_cache_key k;
		struct qmsg q;
		uint8_t ans[512];
		char label[16];
		size_t alen;

		snprintf(label, sizeof(label), "www%05u", i);
		make_query(&q, label, (uint16_t)i);
		alen = make_answer(&q, i, ans);
		if (dlb_cache_key_make(c, q.pkt, &q.m, false, &k) != 0)
			exit(1);
		(void)dlb_cache_insert(c, &rt, &k, ans, alen, T0, -1);
	}
	/* some inserts into shards that filled first evict or are refused */
	*nheld = 0;
	for (unsigned i = 0; i < n; i++) {
		struct dlb_cache_key k;
		struct qmsg q;
		uint8_t out[512];
		char label[16];
		size_t len;
		bool pf;

		snprintf(label, sizeof(label), "www%05u", i);
		make_query(&q, label, (uint16_t)i);
		dlb_rcu_enter(&rt);
		if (dlb_cache_key_make(c, q.pkt, &q.m, false, &k) == 0 &&
		    dlb_cache_get(c, &k, 1, q.pkt + 12, T0, 0, out, sizeof(out), &len, &pf,
				  1) == DLB_CACHE_HIT)
			held[(*nheld)++] = i;
		dlb_rcu_exit(&rt);
	}
	return c;
}

int
main(int argc, char **argv)
{
	enum { NAMES = 10000, HOT = 100, FULL = 10000, BIG = 100000 };
	size_t ops = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000000;
	int runs = argc > 2 ? atoi(argv[2]) : 5;
	uint32_t *idx_all = malloc(ops * sizeof(uint32_t)), *idx_hot = malloc(ops * sizeof(uint32_t));
	uint32_t *idx_big = malloc(ops * sizeof(uint32_t)), *held = malloc(BIG * sizeof(uint32_t));
	struct result hit_all = { .n = runs }, hit_hot = { .n = runs }, hit_sec = { .n = runs };
	struct result hit_big = { .n = runs }, ins = { .n = runs };
	struct result hitb_all = { .n = runs }, hitb_hot = { .n = runs }, hitb_big = { .n = runs };
	struct dlb_cache *c;
	struct dlb_cache_stats st;
	uint64_t seed = 88172645463325252ull, inserted = 0;
	unsigned sink = 0, serial = 0, nheld;

	if (runs < 1 || runs > MAXRUNS || ops == 0 || idx_all == NULL || idx_hot == NULL ||
	    idx_big == NULL || held == NULL) {
		fprintf(stderr, "usage: %s [ops per run] [runs (1..%d)]\n", argv[0], MAXRUNS);
		return 2;
	}
	dlb_rcu_init();
	if (dlb_rcu_register(&rt) != 0)
		return 1;
	for (unsigned i = 0; i < BIG; i++)
		snprintf(digits[i], sizeof(digits[i]), "%05u", i);

	bench_memory();	/* first, so that no freed memory is reused */

	/* hits: 10,000 names (and 100 of them) in a 100,000-entry cache */
	c = warm_cache(NAMES, held, &nheld);
	for (size_t i = 0; i < ops; i++) {
		idx_all[i] = held[rnd(&seed) % nheld];
		idx_hot[i] = held[rnd(&seed) % HOT];
	}
	for (int r = 0; r < runs; r++) {
		hit_all.ns[r] = run_hits(c, idx_all, ops, BATCH, &sink);
		hit_hot.ns[r] = run_hits(c, idx_hot, ops, BATCH, &sink);
		hit_sec.ns[r] = run_hits(c, idx_all, ops, 1, &sink);
		hitb_all.ns[r] = run_hits_batched(c, idx_all, ops, BATCH, &sink);
		hitb_hot.ns[r] = run_hits_batched(c, idx_hot, ops, BATCH, &sink);
	}
	dlb_rcu_barrier(&rt);
	dlb_cache_free(c);

	/* hits in a full cache: 100,000 names, sets about half full */
	c = warm_cache(BIG, held, &nheld);
	for (size_t i = 0; i < ops; i++)
		idx_big[i] = held[rnd(&seed) % nheld];
	for (int r = 0; r < runs; r++) {
		hit_big.ns[r] = run_hits(c, idx_big, ops, BATCH, &sink);
		hitb_big.ns[r] = run_hits_batched(c, idx_big, ops, BATCH, &sink);
	}
	dlb_rcu_barrier(&rt);
	dlb_cache_free(c);

	/* inserts into a full 10,000-entry cache */
	c = new_cache(FULL);
	run_inserts(c, 4 * FULL, &serial, &inserted);
	dlb_cache_get_stats(c, &st);
	{
		uint64_t ev0 = st.evictions, ins0 = inserted;

		for (int r = 0; r < runs; r++)
			ins.ns[r] = run_inserts(c, ops, &serial, &inserted);
		dlb_cache_get_stats(c, &st);
		printf("inserts into the full cache: %llu of %llu went in, %llu evictions\n",
		       (unsigned long long)(inserted - ins0), (unsigned long long)ops * runs,
		       (unsigned long long)(st.evictions - ev0));
	}
	dlb_rcu_barrier(&rt);
	dlb_cache_free(c);

	printf("\ndnslb-bench-cache: %zu operations per run, %d runs, one thread\n\n", ops, runs);
	printf("| %-46s | %7s | %7s | %7s |\n", "operation (ns/op)", "median", "min", "max");
	printf("|%.48s|%.9s|%.9s|%.9s|\n", "------------------------------------------------",
	       "---------", "---------", "---------");
	report("hit: key+lookup+copy-out, 10000 names", &hit_all);
	report("hit: key+lookup+copy-out, 100 hot names", &hit_hot);
	report("hit, 10000 names, RCU section per query", &hit_sec);
	report("hit, 100000 names (full 100k cache)", &hit_big);
	report("batch of 32 (prefetch), 10000 names", &hitb_all);
	report("batch of 32 (prefetch), 100 hot names", &hitb_hot);
	report("batch of 32 (prefetch), 100000 names", &hitb_big);
	report("insert into a full cache (evicts)", &ins);
	dlb_rcu_unregister(&rt);
	free(idx_all);
	free(idx_hot);
	free(idx_big);
	free(held);
	return sink == 0xffffffffu;	/* keeps the copies observable */
}
