/*
 * stats.c - summing and printing per-worker counters.
 */
#include "dnslb/core/stats.h"

#include <inttypes.h>
#include <stddef.h>
#include <string.h>

/* dlb_stats_latency's constants (stats.h): s to us, bucket bounds (us), the
 * moving averages' weights; an answer under 50 ms reads the first line only */
const double dlb_stats_k[16] __attribute__((aligned(64))) = {
	1e6, 1e3, 10e3, 50e3, 1e-2, 1e-3, 1e-4, 1e-6,
	100e3, 1000e3,
};

/* what a cache hit counts is one cache line (stats.h) */
_Static_assert(offsetof(struct dlb_stats, latency_avg) == 64, "hot counters fill one line");

void
dlb_stats_sum(const struct dlb_stats *const *v, int n, struct dlb_stats *out)
{
	memset(out, 0, sizeof(*out));
	for (int i = 0; i < n; i++) {
#define DLB_STATS_ADD(name, field, heat) \
		out->field += __atomic_load_n(&v[i]->field, __ATOMIC_RELAXED);
		DLB_STATS_COUNTERS(DLB_STATS_ADD)
#undef DLB_STATS_ADD
	}
}

void
dlb_stats_print(const struct dlb_stats *s, FILE *f)
{
#define DLB_STATS_PRINT(name, field, heat) fprintf(f, "stat %s %" PRIu64 "\n", name, s->field);
	DLB_STATS_COUNTERS(DLB_STATS_PRINT)
#undef DLB_STATS_PRINT
	fflush(f);
}
