/*
 * stats.c - summing and printing per-worker counters.
 */
#include "dnslb/stats.h"

#include <inttypes.h>
#include <string.h>

void
dlb_stats_sum(const struct dlb_stats *const *v, int n, struct dlb_stats *out)
{
	memset(out, 0, sizeof(*out));
	for (int i = 0; i < n; i++) {
#define DLB_STATS_ADD(name, field) \
		out->field += __atomic_load_n(&v[i]->field, __ATOMIC_RELAXED);
		DLB_STATS_COUNTERS(DLB_STATS_ADD)
#undef DLB_STATS_ADD
	}
}

void
dlb_stats_print(const struct dlb_stats *s, FILE *f)
{
#define DLB_STATS_PRINT(name, field) fprintf(f, "stat %s %" PRIu64 "\n", name, s->field);
	DLB_STATS_COUNTERS(DLB_STATS_PRINT)
#undef DLB_STATS_PRINT
	fflush(f);
}
