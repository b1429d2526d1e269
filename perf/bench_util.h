/*
 * bench_util.h - what the in-process micro-benchmarks share: a monotonic
 * clock, the process's resident memory, a xorshift generator, sorting and
 * the median of run times, and the fatal-error exit.
 */
#ifndef DNSLB_PERF_BENCH_UTIL_H
#define DNSLB_PERF_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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

#endif
