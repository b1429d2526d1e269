/*
 * connstat.h - dnsdist's connection gauges, shared by all workers: the
 * connections open now and at most, and running averages of queries per
 * connection and of a connection's duration (a frontend's TCP figures,
 * a backend's). Touched when a connection opens or closes only.
 *
 * Thread: any (relaxed atomics).
 */
#ifndef DNSLB_CONNSTAT_H
#define DNSLB_CONNSTAT_H

#include <stdbool.h>
#include <stdint.h>

/* One more connection in *@cur; raise *@max to it. */
static inline void
dlb_connstat_open(uint32_t *cur, uint32_t *max)
{
	uint32_t n = __atomic_add_fetch(cur, 1, __ATOMIC_RELAXED);
	uint32_t m = __atomic_load_n(max, __ATOMIC_RELAXED);

	while (n > m && !__atomic_compare_exchange_n(max, &m, n, true, __ATOMIC_RELAXED,
						     __ATOMIC_RELAXED))
		;
}

/* dnsdist's running average: avg = 99 avg / 100 + x / 100. */
static inline void
dlb_connstat_avg(double *avg, double x)
{
	double old, nv;

	__atomic_load(avg, &old, __ATOMIC_RELAXED);
	do
		nv = 99.0 * old / 100.0 + x / 100.0;
	while (!__atomic_compare_exchange(avg, &old, &nv, true, __ATOMIC_RELAXED,
					  __ATOMIC_RELAXED));
}

/* A connection closes after @queries queries and @sec seconds (whole ms, as dnsdist). */
static inline void
dlb_connstat_closed(uint32_t *cur, double *avg_q, double *avg_d, uint64_t queries, double sec)
{
	__atomic_sub_fetch(cur, 1, __ATOMIC_RELAXED);
	dlb_connstat_avg(avg_q, (double)queries);
	dlb_connstat_avg(avg_d, (double)(uint64_t)(sec > 0 ? sec * 1000.0 : 0));
}

#endif
