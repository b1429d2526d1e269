/*
 * metrics.h - every figure the control plane shows, collected in one place
 * so that dumpStats(), getStatisticsCounters(), /jsonstat, /metrics, the
 * API, the dashboard and carbon all say the same thing.
 *
 * Thread: main (reads the workers' counters with relaxed loads and the
 * running config of dlb_daemon). Outside the daemon (nworkers == 0) every
 * counter reads 0 and the gauges read the process's own figures.
 */
#ifndef DNSLB_METRICS_H
#define DNSLB_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dnslb/core/wstate.h"

struct dlb_backend;
struct dlb_pool;
struct dlb_tls_server;

enum dlb_metric_type {
	DLB_METRIC_COUNTER,
	DLB_METRIC_GAUGE,
};

struct dlb_metric {
	const char *name;		/* dnsdist's name, e.g. "cache-hits" (static) */
	const char *help;		/* one line for Prometheus' HELP (static) */
	enum dlb_metric_type type;
	bool is_double;			/* latency-avg*: print with decimals */
	bool plain;			/* a plain counter: in getStatisticsCounters() */
	double value;			/* integers are exact up to 2^53 */
	bool expensive;			/* dumpStats() only: not in the web outputs (dnsdist) */
};

/** Upper bound on the number of global metrics. */
#define DLB_METRICS_MAX 160

/**
 * The global metrics (reference §2.1 plus dnslb's own): dnsdist's first,
 * in dnsdist's order (that of its /metrics), then dnslb's own: the counters
 * of dnslb/core/stats.h summed over the workers, special-memory-usage, the
 * cache, Redis and Lua totals. @return the number written to @out
 * (cap >= DLB_METRICS_MAX).
 */
size_t dlb_metrics_global(struct dlb_metric *out, size_t cap);

/** Per backend, as showServers() and the API show it. */
struct dlb_metrics_backend {
	const struct dlb_backend *be;
	const char *state;		/* "up", "down"; "UP"/"DOWN" when forced */
	bool up;			/* eligible for traffic */
	uint64_t queries, responses, drops, send_errors, outstanding;
	double qps, drate;		/* over the last second */
	double latency_ms;		/* UDP EWMA */
	int qps_limit, order, weight;
	char pools[512];		/* pool names separated by spaces */
	/* TCP connections to it, dnsdist's tcp* figures (docs/web.md) */
	uint64_t tcp_new, tcp_reused, tcp_died_sending, tcp_died_reading, tcp_gave_up;
	uint64_t tcp_connect_timeouts, tcp_read_timeouts, tcp_write_timeouts;
	uint64_t tcp_current, tcp_max;
	uint64_t tls_resumptions;	/* DNS over TLS servers */
	double tcp_avg_queries, tcp_avg_duration;	/* running averages; ms */
};
/** Backend @i of the running config, in dnsdist's numbering (dlb_config_backend_at). @return 0, or -1 when there is none. */
int dlb_metrics_backend(int i, struct dlb_metrics_backend *out);

/** Per frontend and protocol (showBinds(), dnsdist_frontend_*). */
struct dlb_metrics_frontend {
	const char *address;		/* "127.0.0.1:53" */
	const char *proto;		/* "UDP", "TCP", "TCP (DNS over TLS)", "TCP (DNS over HTTPS)"... */
	bool tcp;			/* TCP or DNS over TLS: the tcp* figures apply */
	uint64_t queries;		/* received on this bind (all workers) */
	uint64_t responses;		/* answers sent on it */
	uint64_t tcp_current;		/* TCP: connections open now */
	/* TCP: dnsdist's tcp* figures (docs/web.md); 0 for UDP */
	uint64_t tcp_died_reading, tcp_died_sending, tcp_gave_up;
	uint64_t tcp_client_timeouts, tcp_downstream_timeouts, tcp_max;
	double tcp_avg_queries, tcp_avg_duration;	/* running averages; ms */
	/* DNS over TLS (docs/tls.md#counters); 0 for the others */
	struct dlb_tls_server *tls;	/* the listener's context; NULL: not over TLS */
	bool doh;			/* a DNS over HTTPS listener (addDOHLocal) */
	uint64_t tls_new_sessions, tls_resumptions;
	uint64_t tls_unknown_ticket_keys, tls_inactive_ticket_keys;
	uint64_t tls_queries[5];	/* by enum dlb_tls_version_idx (dnslb/core/tls.h) */
	uint64_t tls_failures[8];	/* by enum dlb_tls_failure */
	struct dlb_doh_figures doh_figs;	/* DNS over HTTPS listeners' (docs/doh.md#counters) */
};
/**
 * Bind number @i, in showBinds()'s numbering (dlb_config_bind: a plain
 * listener's UDP then TCP, a DNS over TLS listener's one).
 * @return 0, or -1 when there is none.
 */
int dlb_metrics_frontend(int i, struct dlb_metrics_frontend *out);

/** Per pool (showPools(), dnsdist_pool_*). */
struct dlb_metrics_pool {
	const struct dlb_pool *pool;
	const char *name;		/* "" is the default pool (Prometheus: "_default_") */
	int servers, active;
	const char *policy;		/* the pool's policy name (its own or the global one) */
	bool has_cache;
	uint64_t cache_size, cache_entries, cache_hits, cache_misses;
	uint64_t cache_deferred_inserts, cache_deferred_lookups;
	uint64_t cache_lookup_collisions, cache_insert_collisions, cache_ttl_too_shorts;
};
/** Pool @i of the running config. @return 0, or -1 when there is none. */
int dlb_metrics_pool(int i, struct dlb_metrics_pool *out);

/** Per rule (dnsdist_rule_hits{id=...}). */
struct dlb_metrics_rule {
	const char *chain;		/* "rules", "response-rules", "cache-hit-response-rules",
					 * "self-answered-response-rules",
					 * "cache-inserted-response-rules" */
	char id[128];			/* the rule's name, else its UUID */
	char uuid[40];
	char rule[256], action[256];	/* as showRules() prints them */
	uint64_t matches;
	bool tee;			/* a TeeAction: its figures in tee_stats */
	uint64_t tee_stats[10];		/* rules/tee.h's, in enum dlb_tee_stat order */
};
/**
 * Call @fn for every rule of every chain of the current ruleset, in chain
 * then position order. Thread: main (inside its RCU section).
 */
void dlb_metrics_rules(void (*fn)(const struct dlb_metrics_rule *r, void *arg), void *arg);

/** Seconds since startup. */
double dlb_metrics_uptime(void);

#endif
