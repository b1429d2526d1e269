/*
 * test_stats.c - the per-worker counters: latency buckets, sums, moving
 * averages, and summing workers' copies.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "dnslb/core/stats.h"

/* Each answer lands in the bucket of its latency; count and sum follow. */
static void
test_latency_buckets(void **state)
{
	static const struct {
		double sec;
		size_t off;
	} cases[] = {
		{ 0.0, offsetof(struct dlb_stats, latency0_1) },
		{ 0.000999, offsetof(struct dlb_stats, latency0_1) },
		{ 0.001, offsetof(struct dlb_stats, latency1_10) },
		{ 0.0099, offsetof(struct dlb_stats, latency1_10) },
		{ 0.010, offsetof(struct dlb_stats, latency10_50) },
		{ 0.049, offsetof(struct dlb_stats, latency10_50) },
		{ 0.050, offsetof(struct dlb_stats, latency50_100) },
		{ 0.0999, offsetof(struct dlb_stats, latency50_100) },
		{ 0.100, offsetof(struct dlb_stats, latency100_1000) },
		{ 0.999, offsetof(struct dlb_stats, latency100_1000) },
		{ 1.0, offsetof(struct dlb_stats, latency_slow) },
		{ 30.0, offsetof(struct dlb_stats, latency_slow) },
	};
	double total = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct dlb_stats s;

		memset(&s, 0, sizeof(s));
		dlb_stats_latency(&s, cases[i].sec);
		assert_int_equal(*(uint64_t *)((char *)&s + cases[i].off), 1);
		assert_int_equal(s.latency0_1 + s.latency1_10 + s.latency10_50 + s.latency50_100 +
				 s.latency100_1000 + s.latency_slow, 1);
		assert_int_equal(s.latency_count, 1);
	}

	/* latency-sum is in whole milliseconds of the running sum */
	struct dlb_stats s;

	memset(&s, 0, sizeof(s));
	for (int i = 0; i < 1000; i++) {
		dlb_stats_latency(&s, 0.0025);	/* 2.5 ms each */
		total += 2500;
	}
	assert_int_equal(s.latency_count, 1000);
	assert_int_equal(s.latency1_10, 1000);
	assert_true(s.latency_sum_us > total - 1 && s.latency_sum_us < total + 1);
	assert_int_equal(s.latency_sum, 2500);
}

/* The moving averages converge on a constant latency, each at its own pace. */
static void
test_latency_averages(void **state)
{
	struct dlb_stats s;

	(void)state;
	memset(&s, 0, sizeof(s));
	dlb_stats_latency(&s, 0.0001);	/* 100 us: one step of each weight */
	assert_true(s.latency_avg[0] > 0.999 && s.latency_avg[0] < 1.001);	/* 100/100 */
	assert_true(s.latency_avg[1] > 0.0999 && s.latency_avg[1] < 0.1001);
	assert_true(s.latency_avg[2] > 0.00999 && s.latency_avg[2] < 0.01001);
	assert_true(s.latency_avg[3] > 0.0000999 && s.latency_avg[3] < 0.0001001);
	for (int i = 0; i < 5000; i++)
		dlb_stats_latency(&s, 0.0001);
	/* after 5000 answers the last-100 and last-1000 averages have converged,
	 * the slower ones not yet */
	assert_true(s.latency_avg[0] > 99.99 && s.latency_avg[0] < 100.01);
	assert_true(s.latency_avg[1] > 99.0 && s.latency_avg[1] < 100.01);
	assert_true(s.latency_avg[2] > 35.0 && s.latency_avg[2] < 45.0);	/* 1 - e^-0.5 */
	assert_true(s.latency_avg[3] > 0.4 && s.latency_avg[3] < 0.6);
}

/* Summing copies adds every listed counter; printing names them all. */
/*
 * A batch's answers made with no latency are recorded at once
 * (dlb_stats_latency_zeros), and to the bit as one dlb_stats_latency(0) per
 * answer would have: buckets, count, sums and the moving averages.
 */
static void
test_latency_zeros_batched(void **state)
{
	static const unsigned ns[] = { 1, 2, 5, 31, 64 };

	(void)state;
	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		struct dlb_stats one, batch, before;

		memset(&one, 0, sizeof(one));
		/* averages and sums away from zero first */
		for (int j = 0; j < 50; j++)
			dlb_stats_latency(&one, 0.000137 * (j + 1));
		before = batch = one;
		for (unsigned j = 0; j < ns[i]; j++)
			dlb_stats_latency(&one, 0.0);
		dlb_stats_latency_zeros(&batch, ns[i]);
		assert_memory_equal(&one, &batch, sizeof(one));
		assert_int_equal(batch.latency_count, 50 + ns[i]);
		assert_int_equal(batch.latency0_1, before.latency0_1 + ns[i]);
		for (int k = 0; k < 4; k++)
			assert_true(batch.latency_avg[k] < before.latency_avg[k]);
	}
}

static void
test_sum_and_print(void **state)
{
	struct dlb_stats a, b, out;
	const struct dlb_stats *v[2] = { &a, &b };
	char buf[8192];
	FILE *f;

	(void)state;
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	a.queries = 3;
	b.queries = 4;
	a.cache_hits = 1;
	b.cache_misses = 2;
	a.blocking_receives = 5;
	b.coalesced_receives = 6;
	dlb_stats_sum(v, 2, &out);
	assert_int_equal(out.queries, 7);
	assert_int_equal(out.cache_hits, 1);
	assert_int_equal(out.cache_misses, 2);
	assert_int_equal(out.blocking_receives, 5);
	assert_int_equal(out.coalesced_receives, 6);

	f = fmemopen(buf, sizeof(buf), "w");
	assert_non_null(f);
	dlb_stats_print(&out, f);
	fclose(f);
	/* in the list's order, whatever the fields' order in memory */
	assert_non_null(strstr(buf, "stat queries 7\nstat rdqueries 0\nstat responses 0\n"));
	assert_non_null(strstr(buf, "stat cache-hits 1\nstat cache-misses 2\n"));
	assert_non_null(strstr(buf, "stat coalesced-receives 6\n"));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_latency_buckets),
		cmocka_unit_test(test_latency_averages),
		cmocka_unit_test(test_latency_zeros_batched),
		cmocka_unit_test(test_sum_and_print),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
