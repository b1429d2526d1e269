/*
 * bench_util.h - what the in-process micro-benchmarks share: a monotonic
 * clock, the process's resident memory, a xorshift generator.
 */
#ifndef DNSLB_PERF_BENCH_UTIL_H
#define DNSLB_PERF_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
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

#endif
