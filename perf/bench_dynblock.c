/*
 * bench_dynblock.c - in-process micro-benchmark of dynamic blocks
 * (docs/performance.md; a benchmark, never a test: it asserts
 * nothing and prints figures).
 *
 * The store gets N active blocks (default 100,000): random IPv4 /32s, plus
 * 1% random /24s and 1% IPv6 /64s, plus 100 suffix (SMT) blocks, published
 * as one snapshot. Then dlb_dyn_lookup() - what the query path runs per
 * query after the ACL: the snapshot load, the filter line, the netmask
 * probes (one per distinct prefix length: here 32 and 24, skipped when the
 * filter says no) and the name probes (one per label count present) - is
 * timed over 4,096 prepared (client, qname) pairs, each used 128 times (a
 * query's own packet is in cache; the store's tables are not, beyond what
 * 4,096 clients touch):
 *
 *   no blocks at all          the cost when dynamic blocks are unused
 *   N blocks, misses          clients and names that match nothing
 *   N blocks, hits            clients that are blocked (/32)
 *
 * Then the rate tracking: dlb_dyn_track_query() for 100,000 distinct clients
 * in turn (the per-worker window table is 24,576 clients: beyond, queries
 * are counted as untracked, which is also timed) and for one client.
 *
 * Each figure is the median of @runs runs, in ns per lookup on one thread.
 *
 *   dnslb-bench-dynblock [runs (5)] [blocks (100000)]
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/pipeline/dynblock.h"
#include "dnslb/pipeline/dynblock_int.h"
#include "dnslb/core/netmask.h"
#include "dnslb/core/wire.h"
#include "dnslb/worker.h"
#include "perf/bench_util.h"

#define MAXRUNS 15
#define NPROBE 4096		/* probes: their packets are in cache, as a query's are */
#define REPS 128

static struct sockaddr_in probes[NPROBE];
static uint8_t pnames[NPROBE][48];
static size_t plens[NPROBE];
static volatile int sink;

/* ns per lookup over the probes, median of @runs. */
static double
time_lookups(int runs, double now)
{
	double v[MAXRUNS];

	for (int r = 0; r < runs; r++) {
		double t0 = mono();
		int acc = 0;

		for (int rep = 0; rep < REPS; rep++)
			for (int i = 0; i < NPROBE; i++)
				acc += dlb_dyn_lookup((const struct sockaddr *)&probes[i], pnames[i],
						      plens[i], now);
		sink = acc;
		v[r] = (mono() - t0) * 1e9 / ((double)REPS * NPROBE);
	}
	return median(v, runs);
}

static void
set_probes(uint64_t *seed, const uint32_t *blocked, unsigned nblocked, bool hits)
{
	for (int i = 0; i < NPROBE; i++) {
		char name[64];
		int n;

		probes[i].sin_family = AF_INET;
		probes[i].sin_addr.s_addr =
			hits ? htonl(blocked[rnd(seed) % nblocked])
			     : htonl(0x0b000000u | (uint32_t)(rnd(seed) & 0xffffff));	/* 11/8 */
		snprintf(name, sizeof(name), "q%u.zone%u.bench.example.",
			 (unsigned)(rnd(seed) % 100000), (unsigned)(rnd(seed) % 1000));
		n = dlb_wire_name_from_text(name, pnames[i], sizeof(pnames[i]));
		plens[i] = n > 0 ? (size_t)n : 1;
	}
}

int
main(int argc, char **argv)
{
	int runs = argc > 1 ? atoi(argv[1]) : 5;
	unsigned nblocks = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 100000;
	uint64_t seed = 0x9e3779b97f4a7c15ULL;
	uint32_t *blocked;
	double now = 1e9, t0, ns_none, ns_miss, ns_hit;
	long rss0, rss1;

	if (runs < 1 || runs > MAXRUNS || nblocks < 100) {
		fprintf(stderr, "usage: %s [runs (1..%d)] [blocks (>= 100)]\n", argv[0], MAXRUNS);
		return 2;
	}
	blocked = malloc(nblocks * sizeof(*blocked));
	if (blocked == NULL)
		return 1;
	printf("dnslb-bench-dynblock: %d runs per figure (median), one thread\n\n", runs);
	set_probes(&seed, NULL, 0, false);
	ns_none = time_lookups(runs, now);

	rss0 = vmrss_kib();
	t0 = mono();
	for (unsigned i = 0; i < nblocks; i++) {
		struct dlb_netmask nm = { .family = AF_INET, .bits = 32 };
		uint32_t a = 0x0a000000u | (uint32_t)(rnd(&seed) & 0xffffff);	/* 10/8 */

		if (i % 100 == 1) {
			nm.bits = 24;
			a = 0xac100000u | ((uint32_t)(rnd(&seed) & 0xfff) << 8);	/* 172.16/12 */
		} else if (i % 100 == 2) {
			nm.family = AF_INET6;
			nm.bits = 64;
			nm.addr[0] = 0x20;
			nm.addr[1] = 0x01;
			nm.addr[2] = 0x0d;
			nm.addr[3] = 0xb8;
			memcpy(nm.addr + 4, &a, 4);
		}
		if (nm.family == AF_INET) {
			uint32_t be = htonl(a);

			memcpy(nm.addr, &be, 4);
		}
		blocked[i] = nm.bits == 32 ? a : 0x0a000001u;
		dlb_dyn_block_nm(&nm, "bench", now + 3600, DLB_DYN_DROP, false, true, now);
	}
	for (int i = 0; i < 100; i++) {
		char name[64];
		uint8_t w[64];
		int n;

		snprintf(name, sizeof(name), "blocked%d.example.", i);
		n = dlb_wire_name_from_text(name, w, sizeof(w));
		dlb_dyn_block_smt(w, (size_t)n, "bench", now + 3600, DLB_DYN_DROP, true, now);
	}
	dlb_dyn_publish();
	rss1 = vmrss_kib();
	printf("store: %u netmask blocks (/32, 1%% /24, 1%% IPv6 /64) + 100 suffix blocks: "
	       "built and published in %.1f ms; %zu in the snapshot; ~%.0f bytes per block "
	       "(VmRSS growth, master list + index + snapshot)\n\n",
	       nblocks, (mono() - t0) * 1e3, dlb_dyn_nmg_size(),
	       rss0 > 0 && rss1 > 0 ? (double)(rss1 - rss0) * 1024.0 / nblocks : 0.0);

	set_probes(&seed, blocked, nblocks, false);
	ns_miss = time_lookups(runs, now);
	set_probes(&seed, blocked, nblocks, true);
	ns_hit = time_lookups(runs, now);
	printf("| %-52s | %9s |\n", "lookup (dlb_dyn_lookup: client, then qname)", "ns/lookup");
	printf("|------------------------------------------------------|-----------|\n");
	printf("| %-52s | %9.1f |\n", "no blocks published", ns_none);
	printf("| %-52s | %9.1f |\n", "100k blocks, client and name not blocked", ns_miss);
	printf("| %-52s | %9.1f |\n", "100k blocks, client blocked (/32 hit)", ns_hit);

	/* the rate tracking of a worker: one window, 100,000 distinct clients */
	{
		struct dlb_worker w;
		struct dlb_worker *ws[1] = { &w };
		struct dlb_dyn_group *g = dlb_dyn_group_new();
		struct dlb_dyn_rule r = { .kind = DLB_DYN_R_QRATE, .rate = 100, .seconds = 10,
					  .block_seconds = 10, .action = DLB_DYN_NONE };
		static struct sockaddr_in clients[100000];
		double v[MAXRUNS], one[MAXRUNS];

		memset(&w, 0, sizeof(w));
		r.reason = strdup("bench");
		dlb_dyn_group_set_rule(g, &r);
		dlb_dyn_group_register(g);
		dlb_dyn_tick(ws, 1, now);
		for (int i = 0; i < 100000; i++) {
			clients[i].sin_family = AF_INET;
			clients[i].sin_addr.s_addr = htonl(0x0b000000u + (uint32_t)i * 7919u);
		}
		for (int k = 0; k < runs; k++) {
			double t1 = mono();

			for (int i = 0; i < 100000; i++)
				dlb_dyn_track_query(w.dyn, (struct sockaddr *)&clients[i],
						    pnames[i % NPROBE], plens[i % NPROBE], 1);
			v[k] = (mono() - t1) * 1e9 / 100000.0;
			t1 = mono();
			for (int i = 0; i < 100000; i++)
				dlb_dyn_track_query(w.dyn, (struct sockaddr *)&clients[0],
						    pnames[i % NPROBE], plens[i % NPROBE], 1);
			one[k] = (mono() - t1) * 1e9 / 100000.0;
			dlb_dyn_tick(ws, 1, now + k + 1);	/* harvest, empty the window */
		}
		printf("| %-52s | %9.1f |\n", "track a query, 100k distinct clients in a window",
		       median(v, runs));
		printf("| %-52s | %9.1f |\n", "track a query, one client", median(one, runs));
		t0 = mono();
		dlb_dyn_group_apply(g, now + runs + 1, NULL);
		printf("\nrule evaluation (apply) over %d one-second buckets of 24,576 tracked "
		       "clients each: %.1f ms\n", runs, (mono() - t0) * 1e3);
		dlb_dyn_group_free(g);
	}
	dlb_dyn_reset();
	free(blocked);
	return 0;
}
