/*
 * bench_qps.c - in-process micro-benchmark of MaxQPSIPRule's per-subnet
 * table (rules/qps.c; a benchmark, never a test: it asserts nothing and
 * prints figures). One thread.
 *
 *   dlb_qps_ip_over alone     ns per call, N distinct clients (/32) visited
 *                             in a random order (the table holds them all,
 *                             every call finds its entry: the steady state
 *                             of a busy resolver farm), none over its rate
 *   rule chain                dlb_rules_run_query per query (the dq filled
 *                             as dnslb/pipeline/query.c does): the empty chain, then
 *                             MaxQPSIPRule(1e9) -> DropAction (never
 *                             matching) with the same clients; the
 *                             difference is what the rule costs a query
 *                             (issue 7's target: <= 300 ns)
 *   memory                    dlb_qps_ip_memory / clients
 *
 * The figure is the median of @runs runs.
 *
 *   dnslb-bench-qps [runs (5)] [clients (100000)]
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/core/stats.h"
#include "dnslb/core/util.h"
#include "dnslb/core/wire.h"
#include "rules/rules.h"
#include "perf/bench_util.h"

#define MAXRUNS 15

/*
 * The clients' addresses, laid out in the (random) order they are used, so
 * the benchmark's own reads are sequential: as in dnslb, where the address
 * comes from the packet just received, the table is the only random access.
 */
static struct sockaddr_in *clients;
static size_t nclients;
static uint8_t qpkt[512];
static size_t qlen;
static struct dlb_dnsmsg qmsg;
static struct sockaddr_in local;
static struct dlb_rng rng;
static struct dlb_stats stats;

#define die(what) bench_die("dnslb-bench-qps", (what))

static void
make_query(void)
{
	int n;

	memset(qpkt, 0, 12);
	dlb_wr16(qpkt, 0x1234);
	dlb_wr16(qpkt + 2, DLB_F_RD);
	dlb_wr16(qpkt + 4, 1);
	n = dlb_wire_name_from_text("www.bench.example.", qpkt + 12, DLB_MAX_NAME);
	if (n <= 0)
		die("bad name");
	n += 12;
	dlb_wr16(qpkt + n, 1);
	dlb_wr16(qpkt + n + 2, 1);
	qlen = (size_t)n + 4;
	if (dlb_wire_parse_query(qpkt, qlen, &qmsg) != DLB_OK)
		die("bad query");
}

/* ns per dlb_qps_ip_over call over @iters calls. */
static double
time_direct(struct dlb_qps_ip *q, size_t iters, double now, size_t *over)
{
	double t0 = mono();

	for (size_t i = 0; i < iters; i++)
		*over += dlb_qps_ip_over(q, (const struct sockaddr *)&clients[i % nclients], now);
	return (mono() - t0) * 1e9 / (double)iters;
}

static inline enum dlb_verdict_r
run_one(const struct dlb_chain *c, const struct sockaddr *remote, double now)
{
	struct dlb_dq dq;

	memset(&dq, 0, offsetof(struct dlb_dq, tags));
	dq.pkt = qpkt;
	dq.len = qlen;
	dq.cap = sizeof(qpkt);
	dq.m = &qmsg;
	dq.remote = remote;
	dq.local = (const struct sockaddr *)&local;
	dq.now = now;
	dq.t_start = now;
	dq.rng = &rng;
	dq.be_index = -1;
	dlb_dq_reset_decisions(&dq);
	dlb_tags_clear(&dq.tags);
	return dlb_rules_run_query(c, &dq, &stats);
}

static double
time_chain(size_t iters, double now, size_t *forwarded)
{
	const struct dlb_chain *c = dlb_rules_chain(DLB_CHAIN_QUERY);
	double t0 = mono();

	for (size_t i = 0; i < iters; i++)
		*forwarded += run_one(c, (const struct sockaddr *)&clients[i % nclients], now) ==
			      DLB_R_FORWARD;
	return (mono() - t0) * 1e9 / (double)iters;
}

/* @n distinct clients 10.x.y.z in a random order. */
static void
make_clients(size_t n)
{
	uint64_t seed = 0x9e3779b97f4a7c15ULL;

	free(clients);
	nclients = n;
	clients = calloc(n, sizeof(*clients));
	if (clients == NULL)
		die("out of memory");
	for (size_t i = 0; i < n; i++) {
		clients[i].sin_family = AF_INET;
		clients[i].sin_addr.s_addr = htonl(0x0a000000u + (uint32_t)i);
	}
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = rnd(&seed) % (i + 1);
		struct sockaddr_in t = clients[i];

		clients[i] = clients[j];
		clients[j] = t;
	}
}

static void
bench_direct(int runs, size_t n)
{
	struct dlb_qps_ip *q = dlb_qps_ip_new(1e9, 32, 64, 1e9, 300, 60, 10);
	double ns[MAXRUNS], now = mono(), m;
	size_t over = 0, iters = n * 20 < 2000000 ? 2000000 : n * 20;
	long rss0 = vmrss_kib(), rss1;

	if (q == NULL)
		die("out of memory");
	time_direct(q, n, now, &over);	/* insert every client */
	for (int k = 0; k < runs; k++)
		ns[k] = time_direct(q, iters, now, &over);
	rss1 = vmrss_kib();
	m = median(ns, runs);
	printf("| dlb_qps_ip_over, %7zu clients | %7.1f | %6.1f..%-6.1f | %9zu | %6.1f | %6ld |%s\n",
	       n, m, ns[0], ns[runs - 1], dlb_qps_ip_count(q),
	       (double)dlb_qps_ip_memory(q) / (double)n, (rss1 - rss0) / 1024,
	       over ? " !! some were over" : "");
	dlb_qps_ip_free(q);
}

static void
bench_chain(int runs)
{
	struct dlb_sel *sel = dlb_sel_new(DLB_SEL_MAXQPSIP);
	struct dlb_act *act = dlb_act_new(DLB_ACT_DROP);
	struct dlb_rule *rule;
	double empty[MAXRUNS], with[MAXRUNS], now = mono(), e, m;
	size_t fwd = 0, iters = nclients * 20 < 2000000 ? 2000000 : nclients * 20;

	if (sel == NULL || act == NULL)
		die("out of memory");
	sel->u.qpsip = dlb_qps_ip_new(1e9, 32, 64, 1e9, 300, 60, 10);
	rule = dlb_rule_new(sel, act, "", NULL);
	if (sel->u.qpsip == NULL || rule == NULL)
		die("out of memory");
	dlb_sel_unref(sel);
	dlb_act_unref(act);

	if (dlb_rules_publish(DLB_CHAIN_QUERY, NULL, 0, NULL) != 0)
		die("publish failed");
	time_chain(iters / 10, now, &fwd);
	for (int k = 0; k < runs; k++)
		empty[k] = time_chain(iters, now, &fwd);
	if (dlb_rules_publish(DLB_CHAIN_QUERY, &rule, 1, NULL) != 0)
		die("publish failed");
	time_chain(nclients, now, &fwd);	/* insert every client */
	for (int k = 0; k < runs; k++)
		with[k] = time_chain(iters, now, &fwd);
	e = median(empty, runs);
	m = median(with, runs);
	printf("\nrule chain, dlb_rules_run_query per query (dq set-up included), %zu clients:\n\n"
	       "| chain | ns/query | min..max |\n|---|---|---|\n"
	       "| empty (no rule) | %.1f | %.1f..%.1f |\n"
	       "| MaxQPSIPRule(1e9) -> DropAction, never over | %.1f | %.1f..%.1f |\n"
	       "\nMaxQPSIPRule costs %.1f ns per query over no rule%s\n",
	       nclients, e, empty[0], empty[runs - 1], m, with[0], with[runs - 1], m - e,
	       fwd == (size_t)(iters / 10 + (size_t)runs * iters * 2 + nclients)
		       ? "" : " (!! not all forwarded)");
	dlb_rules_publish(DLB_CHAIN_QUERY, NULL, 0, NULL);
	dlb_rule_unref(rule);
}

int
main(int argc, char **argv)
{
	int runs = argc > 1 ? atoi(argv[1]) : 5;
	size_t n = argc > 2 ? (size_t)strtoul(argv[2], NULL, 10) : 100000;

	if (runs < 1 || runs > MAXRUNS || n < 1)
		die("usage: dnslb-bench-qps [runs (1..15)] [clients]");
	dlb_rng_init(&rng);
	make_query();
	local.sin_family = AF_INET;
	local.sin_port = htons(53);
	local.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	printf("dnslb-bench-qps: %d runs per figure (median), one thread\n\n", runs);
	printf("| what | ns/call | min..max | entries | B/client | RSS MiB |\n"
	       "|---|---|---|---|---|---|\n");
	make_clients(1000);
	bench_direct(runs, 1000);
	make_clients(n);
	bench_direct(runs, n);
	if (n < 1000000) {
		make_clients(1000000);
		bench_direct(runs, 1000000);
		make_clients(n);
	}
	bench_chain(runs);
	free(clients);
	return 0;
}
