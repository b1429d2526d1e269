/*
 * bench_util.h - what the in-process micro-benchmarks share: a monotonic
 * clock, the process's resident memory, a xorshift generator, sorting and
 * the median of run times, the fatal-error exit, and a plain A query.
 */
#ifndef DNSLB_PERF_BENCH_UTIL_H
#define DNSLB_PERF_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dnslb/core/wire.h"

/* Seconds on CLOCK_MONOTONIC. */
static inline double
mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* VmRSS in KiB, or -1. */
static inline long
vmrss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kib = -1;

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

/* xorshift64: fast, reproducible, not for anything but benchmarks. */
static inline uint64_t
rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* qsort comparison of doubles, ascending. */
static inline int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The median of @v[0..n) (sorts @v). */
static inline double
median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(v[0]), cmp_double);
	return v[n / 2];
}

/* "<program>: <what>" on stderr, exit 1. */
static inline void
bench_die(const char *prog, const char *what)
{
	fprintf(stderr, "%s: %s\n", prog, what);
	exit(1);
}

/* Room bench_query_a needs: header, the longest name, question, OPT. */
#define BENCH_QUERY_MAX (12 + DLB_MAX_NAME + 4 + 11)

/*
 * Write the query "@name A", RD, EDNS 1232, with ID @id into @p (room for
 * BENCH_QUERY_MAX bytes) and parse it into @m; exits (as @prog) when
 * @name is not a valid name. @return its length.
 */
static inline size_t
bench_query_a(uint8_t *p, const char *name, uint16_t id, struct dlb_dnsmsg *m, const char *prog)
{
	int n;

	memset(p, 0, 12);
	dlb_wr16(p, id);
	dlb_wr16(p + 2, DLB_F_RD);
	dlb_wr16(p + 4, 1);
	dlb_wr16(p + 10, 1);
	n = dlb_wire_name_from_text(name, p + 12, DLB_MAX_NAME);
	if (n <= 0)
		bench_die(prog, "bad query name");
	n += 12;
	dlb_wr16(p + n, 1);
	dlb_wr16(p + n + 2, 1);
	n += 4;
	p[n] = 0;
	dlb_wr16(p + n + 1, DLB_TYPE_OPT);
	dlb_wr16(p + n + 3, 1232);
	dlb_wr32(p + n + 5, 0);
	dlb_wr16(p + n + 9, 0);
	if (dlb_wire_parse_query(p, (size_t)n + 11, m) != DLB_OK)
		bench_die(prog, "bad query");
	return (size_t)n + 11;
}

#endif
