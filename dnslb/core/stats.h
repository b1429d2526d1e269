/*
 * stats.h - counters. Each worker owns a struct dlb_stats and increments it
 * with plain stores (single writer); readers on other threads sum the
 * workers' copies with relaxed atomic loads (docs/rings.md).
 *
 * DLB_STATS_COUNTERS lists every counter once, in output order: its dnsdist
 * name, its field and how hot it is (H, W, C: see struct dlb_stats).
 */
#ifndef DNSLB_STATS_H
#define DNSLB_STATS_H

#include <stdint.h>
#include <stdio.h>

#define DLB_STATS_COUNTERS(X)						\
	X("queries", queries, H)					\
	X("rdqueries", rdqueries, H)					\
	X("responses", responses, W)					\
	X("servfail-responses", servfail_responses, C)			\
	X("frontend-noerror", frontend_noerror, H)			\
	X("frontend-nxdomain", frontend_nxdomain, C)			\
	X("frontend-servfail", frontend_servfail, C)			\
	X("acl-drops", acl_drops, W)					\
	X("cache-hits", cache_hits, H)					\
	X("cache-misses", cache_misses, W)				\
	X("self-answered", self_answered, C)				\
	X("rule-drop", rule_drop, C)					\
	X("rule-nxdomain", rule_nxdomain, C)				\
	X("rule-refused", rule_refused, C)				\
	X("rule-servfail", rule_servfail, C)				\
	X("rule-truncated", rule_truncated, C)				\
	X("lua-errors", lua_errors, C)					\
	X("downstream-timeouts", downstream_timeouts, C)		\
	X("downstream-send-errors", downstream_send_errors, C)		\
	X("no-policy", no_policy, C)					\
	X("noncompliant-queries", noncompliant_queries, C)		\
	X("noncompliant-responses", noncompliant_responses, C)		\
	X("empty-queries", empty_queries, C)				\
	X("latency0-1", latency0_1, H)					\
	X("latency1-10", latency1_10, C)				\
	X("latency10-50", latency10_50, C)				\
	X("latency50-100", latency50_100, C)				\
	X("latency100-1000", latency100_1000, C)			\
	X("latency-slow", latency_slow, C)				\
	X("latency-count", latency_count, H)				\
	X("latency-sum", latency_sum, H)				\
	X("inflight-full", inflight_full, C)				\
	X("failover-retries", failover_retries, C)			\
	X("tcp-client-connections", tcp_client_connections, C)		\
	X("tcp-client-rejected", tcp_client_rejected, C)		\
	X("tcp-client-timeouts", tcp_client_timeouts, C)		\
	X("tcp-downstream-connections", tcp_downstream_connections, C)	\
	X("tcp-downstream-failures", tcp_downstream_failures, C)	\
	X("tls-downstream-failures", tls_downstream_failures, C)	\
	X("tcp-client-banned", tcp_client_banned, C)			\
	X("tcp-client-rate-exceeded", tcp_client_rate_exceeded, C)	\
	X("tcp-too-many-read-ios", tcp_too_many_read_ios, C)		\
	X("tcp-output-buffer-full", tcp_output_buffer_full, C)		\
	X("tcp-overloaded-connections", tcp_overloaded_connections, C)	\
	X("client-outstanding-exceeded", client_outstanding_exceeded, C) \
	X("dyn-blocked", dyn_blocked, C)				\
	X("dyn-block-drops", dyn_block_drops, C)			\
	X("blocking-receives", blocking_receives, W)			\
	X("blocking-receive-wakeups", blocking_receive_wakeups, C)	\
	X("coalesced-receives", coalesced_receives, C)

/*
 * The fields in order of heat, not of the list: H, what every cache hit
 * counts, fills the first cache line with latency_sum_us; W (per wake-up or
 * per forwarded query) shares the second with latency_avg; then the rest (C).
 * A hit then touches two lines of counters instead of five or six.
 */
#define DLB_STATS_FIELD(name, field, heat) DLB_STATS_FIELD_##heat(field)
struct dlb_stats {
#define DLB_STATS_FIELD_H(field) uint64_t field;
#define DLB_STATS_FIELD_W(field)
#define DLB_STATS_FIELD_C(field)
	DLB_STATS_COUNTERS(DLB_STATS_FIELD)
	double latency_sum_us;			/* for latency-sum (ms, integer) */
	double latency_avg[4];			/* latency-avg100/1000/10000/1000000 (µs) */
#undef DLB_STATS_FIELD_H
#undef DLB_STATS_FIELD_W
#define DLB_STATS_FIELD_H(field)
#define DLB_STATS_FIELD_W(field) uint64_t field;
	DLB_STATS_COUNTERS(DLB_STATS_FIELD)
#undef DLB_STATS_FIELD_W
#undef DLB_STATS_FIELD_C
#define DLB_STATS_FIELD_W(field)
#define DLB_STATS_FIELD_C(field) uint64_t field;
	DLB_STATS_COUNTERS(DLB_STATS_FIELD)
#undef DLB_STATS_FIELD_H
#undef DLB_STATS_FIELD_W
#undef DLB_STATS_FIELD_C
} __attribute__((aligned(64)));
#undef DLB_STATS_FIELD

/** Per-worker, per-backend counters (indexed by backend->index). */
struct dlb_be_stats {
	uint64_t queries;			/* sent */
	uint64_t responses;
	uint64_t drops;				/* timeouts */
	uint64_t send_errors;
	uint64_t servfails;			/* SERVFAIL answers (lazy health checks) */
	uint64_t refused;			/* not sent: the in-flight table was full */
	uint32_t outstanding;			/* in flight now (UDP and TCP) */
	double latency_us;			/* EWMA 127/128 */
	/* TCP towards the backend, dnsdist's meanings (tcp_upstream.c, docs/web.md) */
	uint64_t tcp_new;			/* connections opened (each attempt) */
	uint64_t tcp_reused;			/* queries sent on a connection already open */
	uint64_t tcp_died_sending;		/* I/O errors sending a query */
	uint64_t tcp_died_reading;		/* closed or failed with queries pending */
	uint64_t tcp_gave_up;			/* queries failed after `retries` attempts */
	uint64_t tcp_connect_timeouts, tcp_read_timeouts, tcp_write_timeouts;
	uint64_t tls_resumptions;		/* TLS connections that resumed a session */
} __attribute__((aligned(64)));

/*
 * The constants of dlb_stats_latency: as literals, each is a separate 8-byte
 * load from the program's constant pool, up to ten cold lines per answer;
 * here what an answer under 50 ms reads is one line.
 */
extern const double dlb_stats_k[16];

/** Record one answer sent to a client after @sec seconds: histogram and sums. */
static inline void
dlb_stats_latency(struct dlb_stats *s, double sec)
{
	const double *k = dlb_stats_k;
	double usec;

	/* hidden from the compiler, which would fold k[i] back into literals */
	__asm__("" : "+r"(k));
	usec = sec * k[0];
	/* per answer: no division but the one for latency-sum */
	if (usec < k[1])
		s->latency0_1++;
	else if (usec < k[2])
		s->latency1_10++;
	else if (usec < k[3])
		s->latency10_50++;
	else if (usec < k[8])
		s->latency50_100++;
	else if (usec < k[9])
		s->latency100_1000++;
	else
		s->latency_slow++;
	s->latency_count++;
	s->latency_sum_us += usec;
	/* dnsdist's moving averages over the last 100, 1000, 10^4 and 10^6
	 * answers: avg = (w - 1) / w * avg + x / w, as avg + (x - avg) / w */
	s->latency_avg[0] += (usec - s->latency_avg[0]) * k[4];
	s->latency_avg[1] += (usec - s->latency_avg[1]) * k[5];
	s->latency_avg[2] += (usec - s->latency_avg[2]) * k[6];
	s->latency_avg[3] += (usec - s->latency_avg[3]) * k[7];
	/* (through int64_t: no 2^63 constant to load; 2^63 ms is never reached) */
	s->latency_sum = (uint64_t)(int64_t)(s->latency_sum_us / k[1]);
}

/**
 * Record @n answers sent after no time at all (on the loop's clock: answered
 * within the receive batch of their query), as @n dlb_stats_latency(s, 0)
 * calls would, to the bit: the moving averages decay by the same operations
 * in the same order. One call per batch instead of one per answer.
 */
static inline void
dlb_stats_latency_zeros(struct dlb_stats *s, unsigned n)
{
	const double *k = dlb_stats_k;
	double a0 = s->latency_avg[0], a1 = s->latency_avg[1], a2 = s->latency_avg[2],
	       a3 = s->latency_avg[3];

	__asm__("" : "+r"(k));
	s->latency0_1 += n;
	s->latency_count += n;
	/* latency_sum_us and latency_sum do not change */
	for (unsigned i = 0; i < n; i++) {
		a0 += (0.0 - a0) * k[4];
		a1 += (0.0 - a1) * k[5];
		a2 += (0.0 - a2) * k[6];
		a3 += (0.0 - a3) * k[7];
	}
	s->latency_avg[0] = a0;
	s->latency_avg[1] = a1;
	s->latency_avg[2] = a2;
	s->latency_avg[3] = a3;
}

/** Sum @n workers' counters into @out. Thread: any (relaxed loads). */
void dlb_stats_sum(const struct dlb_stats *const *v, int n, struct dlb_stats *out);
/** Print "stat <name> <value>" lines (the SIGUSR1 dump). */
void dlb_stats_print(const struct dlb_stats *s, FILE *f);

#endif
