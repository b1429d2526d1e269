/*
 * metrics.c - the figures of metrics.h: the workers' counters summed, the
 * process and host figures read from /proc, and the per-backend, frontend,
 * pool and rule views. Everything is computed on demand on the main thread;
 * nothing here runs on the query path.
 */
#include "dnslb/control/metrics.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "dnslb/core/cache.h"
#include "dnslb/core/config.h"
#include "dnslb/core/daemon.h"
#include "dnslb/pipeline/dynblock.h"
#include "dnslb/control/fleet.h"
#include "dnslb/store/kvstore.h"
#include "dnslb/pipeline/l2cache.h"
#include "dnslb/store/redis.h"
#include "dnslb/core/stats.h"
#include "dnslb/frontend/tcp_client.h"
#include "dnslb/core/wstate.h"
#include "rules/rules.h"
#include "rules/tee.h"

/* ---- /proc readers ------------------------------------------------------- */

/*
 * The value of column @col in the "<prefix>:" table of @path (/proc/net/snmp
 * and /proc/net/netstat: a header line of names, then a line of values).
 */
static double
proc_table_value(const char *path, const char *prefix, const char *col)
{
	char names[4096], values[4096];
	size_t plen = strlen(prefix);
	double out = 0;
	FILE *f = fopen(path, "r");

	if (f == NULL)
		return 0;
	while (fgets(names, sizeof(names), f) != NULL) {
		char *sn, *sv, *n, *v;

		if (strncmp(names, prefix, plen) != 0 || names[plen] != ':')
			continue;
		if (fgets(values, sizeof(values), f) == NULL)
			break;
		n = strtok_r(names + plen + 1, " \n", &sn);
		v = strtok_r(values + plen + 1, " \n", &sv);
		while (n != NULL && v != NULL) {
			if (strcmp(n, col) == 0) {
				out = strtod(v, NULL);
				break;
			}
			n = strtok_r(NULL, " \n", &sn);
			v = strtok_r(NULL, " \n", &sv);
		}
		break;
	}
	fclose(f);
	return out;
}

/* "Name value" files (/proc/net/snmp6, /proc/self/smaps_rollup: "Name: value kB"). */
static double
proc_kv_value(const char *path, const char *key)
{
	char line[512];
	size_t klen = strlen(key);
	double out = 0;
	FILE *f = fopen(path, "r");

	if (f == NULL)
		return 0;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (strncmp(line, key, klen) == 0 && (line[klen] == ' ' || line[klen] == '\t' ||
						       line[klen] == ':')) {
			out = strtod(line + klen + (line[klen] == ':'), NULL);
			break;
		}
	}
	fclose(f);
	return out;
}

static double
rss_bytes(void)
{
	unsigned long size = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f == NULL)
		return 0;
	if (fscanf(f, "%lu %lu", &size, &resident) != 2)
		resident = 0;
	fclose(f);
	return (double)resident * (double)sysconf(_SC_PAGESIZE);
}

static double
fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	double n = 0;

	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n > 0 ? n - 1 : 0;	/* not the one opendir holds */
}

/* cpu-iowait and cpu-steal: the host's, in USER_HZ, from the "cpu" line of /proc/stat. */
static void
host_cpu(double *iowait, double *steal)
{
	unsigned long long v[8] = { 0 };
	FILE *f = fopen("/proc/stat", "r");

	*iowait = *steal = 0;
	if (f == NULL)
		return;
	if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
		   &v[4], &v[5], &v[6], &v[7]) == 8) {
		*iowait = (double)v[4];
		*steal = (double)v[7];
	}
	fclose(f);
}

/* ---- global -------------------------------------------------------------- */

double
dlb_metrics_uptime(void)
{
	return dlb_daemon.start > 0 ? dlb_daemon_now() - dlb_daemon.start : 0;
}

static void
sum_workers(struct dlb_stats *s, double avg[4])
{
	const struct dlb_stats *v[DLB_MAX_WORKERS] = { NULL };
	int n = 0, navg = 0;

	avg[0] = avg[1] = avg[2] = avg[3] = 0;
	for (int i = 0; i < dlb_daemon.nworkers && i < DLB_MAX_WORKERS; i++) {
		const struct dlb_stats *ws = &dlb_daemon.workers[i]->stats;
		double a[4];

		v[n++] = ws;
		for (int k = 0; k < 4; k++)
			__atomic_load(&ws->latency_avg[k], &a[k], __ATOMIC_RELAXED);
		if (__atomic_load_n(&ws->latency_count, __ATOMIC_RELAXED) == 0)
			continue;
		for (int k = 0; k < 4; k++)
			avg[k] += a[k];
		navg++;
	}
	dlb_stats_sum(v, n, s);
	for (int k = 0; k < 4 && navg > 0; k++)
		avg[k] /= navg;
}

static void
sum_caches(struct dlb_cache_stats *t)
{
	const struct dlb_config *cfg = dlb_daemon.cfg;

	memset(t, 0, sizeof(*t));
	for (int i = 0; cfg != NULL && i < cfg->ncaches; i++) {
		struct dlb_cache_stats st;

		dlb_cache_get_stats(cfg->caches[i], &st);
		t->entries += st.entries;
		t->stale_hits += st.stale_hits;
		t->prefetches += st.prefetches;
		t->evictions += st.evictions;
		t->ttl_too_shorts += st.ttl_too_shorts;
	}
}

struct help {
	const char *name, *help;
};

/* The help of each counter of stats.h, by name (Prometheus HELP). */
static const struct help counter_help[] = {
	{ "queries", "Number of received queries" },
	{ "rdqueries", "Number of received queries with the recursion desired bit set" },
	{ "responses", "Number of responses received from backends" },
	{ "servfail-responses", "Number of SERVFAIL answers received from backends" },
	{ "frontend-noerror", "Number of NoError answers sent to clients" },
	{ "frontend-nxdomain", "Number of NXDomain answers sent to clients" },
	{ "frontend-servfail", "Number of SERVFAIL answers sent to clients" },
	{ "acl-drops", "Number of packets dropped because of the ACL" },
	{ "cache-hits", "Number of times an answer was retrieved from cache" },
	{ "cache-misses", "Number of times an answer not found in the cache" },
	{ "self-answered", "Number of self-answered responses" },
	{ "rule-drop", "Number of queries dropped because of a rule" },
	{ "rule-nxdomain", "Number of NXDomain answers returned because of a rule" },
	{ "rule-refused", "Number of Refused answers returned because of a rule" },
	{ "rule-servfail", "Number of SERVFAIL answers received because of a rule" },
	{ "rule-truncated", "Number of truncated answers returned because of a rule" },
	{ "lua-errors", "Number of Lua rule, action or policy calls that raised an error" },
	{ "downstream-timeouts", "Number of queries not answered in time by a backend" },
	{ "downstream-send-errors", "Number of errors when sending a query to a backend" },
	{ "no-policy", "Number of queries dropped because no server was available" },
	{ "noncompliant-queries", "Number of queries dropped as non-compliant" },
	{ "noncompliant-responses", "Number of answers from a backend dropped as non-compliant" },
	{ "empty-queries", "Number of empty queries received from clients" },
	{ "latency0-1", "Number of queries answered in less than 1ms" },
	{ "latency1-10", "Number of queries answered in 1-10 ms" },
	{ "latency10-50", "Number of queries answered in 10-50 ms" },
	{ "latency50-100", "Number of queries answered in 50-100 ms" },
	{ "latency100-1000", "Number of queries answered in 100-1000 ms" },
	{ "latency-slow", "Number of queries answered in more than 1 second" },
	{ "latency-count", "Number of queries contributing to response time histogram" },
	{ "latency-sum", "Total response time of all queries in milliseconds" },
	{ "inflight-full", "Queries not forwarded because the in-flight table was full" },
	{ "failover-retries", "Queries retried on another server after a timeout or SERVFAIL" },
	{ "tcp-client-connections", "TCP connections accepted from clients" },
	{ "tcp-client-rejected", "TCP client connections refused by a limit" },
	{ "tcp-client-timeouts", "TCP client connections closed by a timeout" },
	{ "tcp-downstream-connections", "TCP connections opened to backends" },
	{ "tcp-downstream-failures", "TCP connections to backends that failed" },
	{ "tls-downstream-failures", "TLS handshakes with backends that failed (validation too)" },
	{ "dyn-blocked", "Number of queries dropped because of a dynamic block" },
	{ "dyn-block-drops", "Queries dropped (Drop action) by a dynamic block" },
	{ "blocking-receives", "Times a worker with nothing in flight waited in recvmmsg on its UDP socket instead of epoll" },
	{ "blocking-receive-wakeups", "Of those waits and of the coalescing sleeps, the ones a wake signal ended: a TCP connection, a reload, a new server, shutdown" },
	{ "coalesced-receives", "Times a worker slept setWorkerReceiveCoalescing's interval before receiving, instead of being woken by the next datagram" },
};

/*
 * The counters dnsdist 1.7.3 has for events dnslb never meets: its
 * inter-thread pipes (dnslb's workers hand nothing to other threads), the
 * truncation of answers by truncateTC (dnslb has no such setting), the
 * incoming proxy protocol (dnslb does not accept it) and its security
 * polling. They read 0, as dnsdist's do when nothing happened.
 */
static const struct help never_counted[] = {
	{ "trunc-failures", "Number of errors encountered while truncating an answer" },
	{ "proxy-protocol-invalid", "Number of queries dropped because of an invalid Proxy Protocol header" },
	{ "security-status", "Security status of this software. 0=unknown, 1=OK, 2=upgrade recommended, 3=upgrade mandatory" },
	{ "doh-query-pipe-full", "Number of DoH queries dropped because the internal pipe used to distribute queries was full" },
	{ "doh-response-pipe-full", "Number of DoH responses dropped because the internal pipe used to distribute responses was full" },
	{ "outgoing-doh-query-pipe-full", "Number of outgoing DoH queries dropped because the internal pipe used to distribute queries was full" },
	{ "tcp-query-pipe-full", "Number of TCP queries dropped because the internal pipe used to distribute queries was full" },
	{ "tcp-cross-protocol-query-pipe-full", "Number of TCP cross-protocol queries dropped because the internal pipe used to distribute queries was full" },
	{ "tcp-cross-protocol-response-pipe-full", "Number of TCP cross-protocol responses dropped because the internal pipe used to distribute queries was full" },
};

/*
 * dnsdist 1.7.3's own order of its counters (its statistics table), which
 * /metrics and /api/v1/servers/localhost/statistics follow; dnslb's own
 * counters come after them. special-memory-usage, which no web output
 * shows, is left out.
 */
static const char *const dnsdist_names[] = {
	"responses", "servfail-responses", "queries", "frontend-nxdomain", "frontend-servfail",
	"frontend-noerror", "acl-drops", "rule-drop", "rule-nxdomain", "rule-refused",
	"rule-servfail", "rule-truncated", "self-answered", "downstream-timeouts",
	"downstream-send-errors", "trunc-failures", "no-policy", "latency0-1", "latency1-10",
	"latency10-50", "latency50-100", "latency100-1000", "latency-slow", "latency-avg100",
	"latency-avg1000", "latency-avg10000", "latency-avg1000000", "uptime",
	"real-memory-usage", "udp-in-errors", "udp-noport-errors", "udp-recvbuf-errors",
	"udp-sndbuf-errors", "udp-in-csum-errors", "udp6-in-errors", "udp6-recvbuf-errors",
	"udp6-sndbuf-errors", "udp6-noport-errors", "udp6-in-csum-errors", "tcp-listen-overflows",
	"noncompliant-queries", "noncompliant-responses", "proxy-protocol-invalid", "rdqueries",
	"empty-queries", "cache-hits", "cache-misses", "cpu-iowait", "cpu-steal", "cpu-sys-msec",
	"cpu-user-msec", "fd-usage", "dyn-blocked", "dyn-block-nmg-size", "security-status",
	"doh-query-pipe-full", "doh-response-pipe-full", "outgoing-doh-query-pipe-full",
	"tcp-query-pipe-full", "tcp-cross-protocol-query-pipe-full",
	"tcp-cross-protocol-response-pipe-full", "latency-sum", "latency-count",
};

/* Move dnsdist's counters to the front of @m, in dnsdist_names' order; the rest keep theirs. */
static void
dnsdist_order(struct dlb_metric *m, size_t n)
{
	size_t done = 0;

	for (size_t k = 0; k < sizeof(dnsdist_names) / sizeof(dnsdist_names[0]); k++) {
		for (size_t i = done; i < n; i++) {
			struct dlb_metric t;

			if (strcmp(m[i].name, dnsdist_names[k]) != 0)
				continue;
			t = m[i];
			memmove(&m[done + 1], &m[done], (i - done) * sizeof(m[0]));
			m[done++] = t;
			break;
		}
	}
}

static const char *
help_of(const char *name)
{
	for (size_t i = 0; i < sizeof(counter_help) / sizeof(counter_help[0]); i++)
		if (strcmp(counter_help[i].name, name) == 0)
			return counter_help[i].help;
	return name;
}

static void
put(struct dlb_metric *out, size_t cap, size_t *n, const char *name, const char *help,
    enum dlb_metric_type type, bool is_double, bool plain, double value)
{
	if (*n >= cap)
		return;
	out[*n] = (struct dlb_metric){ name, help, type, is_double, plain, value, false };
	(*n)++;
}

/* Sum the counters of every Redis connection (dlb_redis_visit). */
static void
redis_sum(const struct dlb_redis *r, void *ud)
{
	struct dlb_redis_stats *sum = ud, st;

	dlb_redis_get_stats(r, &st);
	sum->commands += st.commands;
	sum->errors += st.errors;
	sum->timeouts += st.timeouts;
	sum->reconnects += st.reconnects;
	sum->up += st.up;
}

/* The Redis-backed lookup stores' counters (dnslb/store/kvstore.h), shown with setRedis. */
static void
kvs_metrics(struct dlb_metric *out, size_t cap, size_t *n)
{
	struct dlb_kvstore_stats k;

	dlb_kvstore_totals(&k);
	put(out, cap, n, "kvs-lookups", "KeyValueStoreLookupRule/Action lookups in Redis-backed stores",
	    DLB_METRIC_COUNTER, false, false, (double)k.lookups);
	put(out, cap, n, "kvs-hits", "Lookups in Redis-backed stores that found a key",
	    DLB_METRIC_COUNTER, false, false, (double)k.hits);
	put(out, cap, n, "kvs-refreshes", "Mirrors of Redis-backed stores completed",
	    DLB_METRIC_COUNTER, false, false, (double)k.refreshes);
	put(out, cap, n, "kvs-refresh-errors", "Mirrors of Redis-backed stores failed: Redis down, timeout, error reply",
	    DLB_METRIC_COUNTER, false, false, (double)k.refresh_errors);
	put(out, cap, n, "kvs-entries", "Keys mirrored in all Redis-backed stores",
	    DLB_METRIC_GAUGE, false, false, (double)k.entries);
}

/* The second-level cache's counters (dnslb/pipeline/l2cache.h), shown with setRedis. */
static void
l2_metrics(struct dlb_metric *out, size_t cap, size_t *n)
{
	struct dlb_l2_stats l2;

	dlb_l2_get_stats(&l2);
	put(out, cap, n, "l2-cache-hits", "Queries answered from the Redis second-level cache",
	    DLB_METRIC_COUNTER, false, false, (double)l2.hits);
	put(out, cap, n, "l2-cache-misses", "Second-level cache lookups that found no usable entry",
	    DLB_METRIC_COUNTER, false, false, (double)l2.misses);
	put(out, cap, n, "l2-cache-timeouts", "Second-level cache lookups that ran past l2Budget",
	    DLB_METRIC_COUNTER, false, false, (double)l2.timeouts);
	put(out, cap, n, "l2-cache-errors", "Second-level cache lookups failed: Redis down, error reply, disconnect",
	    DLB_METRIC_COUNTER, false, false, (double)l2.errors);
	put(out, cap, n, "l2-cache-rejected", "Second-level cache values refused: malformed, another question, not cacheable",
	    DLB_METRIC_COUNTER, false, false, (double)l2.rejected);
	put(out, cap, n, "l2-cache-skipped", "Local misses not looked up in Redis: over l2MaxInFlight or maxInFlight",
	    DLB_METRIC_COUNTER, false, false, (double)l2.skipped);
	put(out, cap, n, "l2-cache-stores", "Answers written to the second-level cache",
	    DLB_METRIC_COUNTER, false, false, (double)l2.stores);
	put(out, cap, n, "l2-cache-store-drops", "Answers not written to the second-level cache: Redis down or over its cap",
	    DLB_METRIC_COUNTER, false, false, (double)l2.store_drops);
	put(out, cap, n, "l2-cache-waiting", "Queries waiting on the second-level cache now",
	    DLB_METRIC_GAUGE, false, false, (double)l2.parked);
}

size_t
dlb_metrics_global(struct dlb_metric *out, size_t cap)
{
	struct dlb_stats s;
	struct dlb_cache_stats cs;
	struct rusage ru;
	double avg[4], iowait, steal;
	size_t n = 0;

	sum_workers(&s, avg);
	sum_caches(&cs);
#define DLB_METRIC_PUT(name, field, heat) \
	put(out, cap, &n, name, help_of(name), DLB_METRIC_COUNTER, false, true, (double)s.field);
	DLB_STATS_COUNTERS(DLB_METRIC_PUT)
#undef DLB_METRIC_PUT

	put(out, cap, &n, "latency-avg100", "Average response latency in microseconds of the last 100 packets",
	    DLB_METRIC_GAUGE, true, false, avg[0]);
	put(out, cap, &n, "latency-avg1000", "Average response latency in microseconds of the last 1000 packets",
	    DLB_METRIC_GAUGE, true, false, avg[1]);
	put(out, cap, &n, "latency-avg10000", "Average response latency in microseconds of the last 10000 packets",
	    DLB_METRIC_GAUGE, true, false, avg[2]);
	put(out, cap, &n, "latency-avg1000000", "Average response latency in microseconds of the last 1000000 packets",
	    DLB_METRIC_GAUGE, true, false, avg[3]);
	put(out, cap, &n, "uptime", "Uptime of the dnsdist process in seconds", DLB_METRIC_GAUGE, false,
	    false, (double)(uint64_t)dlb_metrics_uptime());
	put(out, cap, &n, "real-memory-usage", "Current memory usage in bytes", DLB_METRIC_GAUGE,
	    false, false, rss_bytes());
	put(out, cap, &n, "special-memory-usage", "Memory usage (more precise but expensive to retrieve)",
	    DLB_METRIC_GAUGE, false, false,
	    proc_kv_value("/proc/self/smaps_rollup", "Private_Dirty") * 1024);
	put(out, cap, &n, "fd-usage", "Number of currently used file descriptors", DLB_METRIC_GAUGE,
	    false, false, fd_count());
	if (getrusage(RUSAGE_SELF, &ru) != 0)
		memset(&ru, 0, sizeof(ru));
	put(out, cap, &n, "cpu-user-msec", "Milliseconds spent by dnsdist in the user state",
	    DLB_METRIC_COUNTER, false, false,
	    (double)ru.ru_utime.tv_sec * 1000 + (double)(ru.ru_utime.tv_usec / 1000));
	put(out, cap, &n, "cpu-sys-msec", "Milliseconds spent by dnsdist in the system state",
	    DLB_METRIC_COUNTER, false, false,
	    (double)ru.ru_stime.tv_sec * 1000 + (double)(ru.ru_stime.tv_usec / 1000));
	host_cpu(&iowait, &steal);
	put(out, cap, &n, "cpu-iowait", "Time waiting for I/O to complete by the whole system, in units of USER_HZ",
	    DLB_METRIC_COUNTER, false, false, iowait);
	put(out, cap, &n, "cpu-steal", "Stolen time, which is the time spent by the whole system in other operating systems when running in a virtualized environment, in units of USER_HZ",
	    DLB_METRIC_COUNTER, false, false, steal);
	put(out, cap, &n, "udp-in-errors", "From /proc/net/snmp InErrors", DLB_METRIC_COUNTER, false,
	    false, proc_table_value("/proc/net/snmp", "Udp", "InErrors"));
	put(out, cap, &n, "udp-noport-errors", "From /proc/net/snmp NoPorts", DLB_METRIC_COUNTER,
	    false, false, proc_table_value("/proc/net/snmp", "Udp", "NoPorts"));
	put(out, cap, &n, "udp-recvbuf-errors", "From /proc/net/snmp RcvbufErrors",
	    DLB_METRIC_COUNTER, false, false,
	    proc_table_value("/proc/net/snmp", "Udp", "RcvbufErrors"));
	put(out, cap, &n, "udp-sndbuf-errors", "From /proc/net/snmp SndbufErrors",
	    DLB_METRIC_COUNTER, false, false,
	    proc_table_value("/proc/net/snmp", "Udp", "SndbufErrors"));
	put(out, cap, &n, "udp-in-csum-errors", "From /proc/net/snmp InCsumErrors",
	    DLB_METRIC_COUNTER, false, false,
	    proc_table_value("/proc/net/snmp", "Udp", "InCsumErrors"));
	put(out, cap, &n, "udp6-in-errors", "From /proc/net/snmp6 Udp6InErrors", DLB_METRIC_COUNTER,
	    false, false, proc_kv_value("/proc/net/snmp6", "Udp6InErrors"));
	put(out, cap, &n, "udp6-noport-errors", "From /proc/net/snmp6 Udp6NoPorts",
	    DLB_METRIC_COUNTER, false, false, proc_kv_value("/proc/net/snmp6", "Udp6NoPorts"));
	put(out, cap, &n, "udp6-recvbuf-errors", "From /proc/net/snmp6 Udp6RcvbufErrors",
	    DLB_METRIC_COUNTER, false, false,
	    proc_kv_value("/proc/net/snmp6", "Udp6RcvbufErrors"));
	put(out, cap, &n, "udp6-sndbuf-errors", "From /proc/net/snmp6 Udp6SndbufErrors",
	    DLB_METRIC_COUNTER, false, false,
	    proc_kv_value("/proc/net/snmp6", "Udp6SndbufErrors"));
	put(out, cap, &n, "udp6-in-csum-errors", "From /proc/net/snmp6 Udp6InCsumErrors",
	    DLB_METRIC_COUNTER, false, false,
	    proc_kv_value("/proc/net/snmp6", "Udp6InCsumErrors"));
	put(out, cap, &n, "tcp-listen-overflows", "From /proc/net/netstat ListenOverflows",
	    DLB_METRIC_COUNTER, false, false,
	    proc_table_value("/proc/net/netstat", "TcpExt", "ListenOverflows"));
	/* dnslb's own, over every packet cache */
	put(out, cap, &n, "dyn-block-nmg-size", "Number of dynamic blocks entries",
	    DLB_METRIC_GAUGE, false, false, (double)dlb_dyn_nmg_size());
	put(out, cap, &n, "cache-entries", "Entries in all packet caches", DLB_METRIC_GAUGE, false,
	    false, (double)cs.entries);
	put(out, cap, &n, "cache-stale-hits", "Expired cache entries served (stale answers)",
	    DLB_METRIC_COUNTER, false, false, (double)cs.stale_hits);
	put(out, cap, &n, "cache-prefetches", "Cache entries refreshed in the background (prefetch)",
	    DLB_METRIC_COUNTER, false, false, (double)cs.prefetches);
	put(out, cap, &n, "cache-evictions", "Cache entries evicted to make room",
	    DLB_METRIC_COUNTER, false, false, (double)cs.evictions);
	if (dlb_redis_settings.enabled) {
		struct dlb_redis_stats rs = { 0 };
		struct dlb_fleet_stats fs;

		dlb_redis_visit(redis_sum, &rs);
		put(out, cap, &n, "redis-commands", "Commands sent to Redis", DLB_METRIC_COUNTER,
		    false, false, (double)rs.commands);
		put(out, cap, &n, "redis-errors", "Redis error replies, failed sends and connects",
		    DLB_METRIC_COUNTER, false, false, (double)rs.errors);
		put(out, cap, &n, "redis-timeouts", "Redis commands and connects that timed out",
		    DLB_METRIC_COUNTER, false, false, (double)rs.timeouts);
		put(out, cap, &n, "redis-reconnects", "Reconnection attempts to Redis",
		    DLB_METRIC_COUNTER, false, false, (double)rs.reconnects);
		put(out, cap, &n, "redis-connections-up", "Redis connections up now",
		    DLB_METRIC_GAUGE, false, false, (double)rs.up);
		dlb_fleet_get_stats(&fs);
		put(out, cap, &n, "fleet-blocks-published", "Dynamic blocks of this node written to Redis and announced",
		    DLB_METRIC_COUNTER, false, false, (double)fs.published);
		put(out, cap, &n, "fleet-blocks-received", "Dynamic blocks of other nodes applied from Redis",
		    DLB_METRIC_COUNTER, false, false, (double)fs.received);
		put(out, cap, &n, "fleet-blocks-malformed", "Block values and announcements from Redis ignored as malformed",
		    DLB_METRIC_COUNTER, false, false, (double)fs.malformed);
		l2_metrics(out, cap, &n);
		kvs_metrics(out, cap, &n);
	}
	put(out, cap, &n, "cache-ttl-too-shorts", "Answers not cached because their TTL was below minTTL",
	    DLB_METRIC_COUNTER, false, false, (double)cs.ttl_too_shorts);
	/* dnsdist's counters of events dnslb never has (docs/counters.md) */
	for (size_t i = 0; i < sizeof(never_counted) / sizeof(never_counted[0]); i++)
		put(out, cap, &n, never_counted[i].name, never_counted[i].help,
		    strcmp(never_counted[i].name, "security-status") == 0 ? DLB_METRIC_GAUGE :
		    DLB_METRIC_COUNTER, false, true, 0);
	for (size_t i = 0; i < n; i++)
		out[i].expensive = strcmp(out[i].name, "special-memory-usage") == 0;
	dnsdist_order(out, n);
	return n;
}

/* ---- per backend, frontend, pool ---------------------------------------- */

int
dlb_metrics_backend(int i, struct dlb_metrics_backend *out)
{
	const struct dlb_config *cfg = dlb_daemon.cfg;
	const struct dlb_backend *be;
	struct dlb_be_totals t;
	int admin;
	size_t o = 0;

	memset(out, 0, sizeof(*out));
	if (cfg == NULL || (i = dlb_config_backend_at(cfg, i)) < 0)
		return -1;
	be = cfg->backends[i];
	memset(&t, 0, sizeof(t));
	if (cfg->be_totals != NULL)
		cfg->be_totals(i, &t);
	admin = __atomic_load_n(&be->admin, __ATOMIC_RELAXED);
	out->be = be;
	out->state = admin == DLB_BE_FORCED_UP ? "UP" : admin == DLB_BE_FORCED_DOWN ? "DOWN" :
		     __atomic_load_n(&be->healthy, __ATOMIC_RELAXED) ? "up" : "down";
	out->up = dlb_backend_is_up(be);
	out->queries = t.queries;
	out->responses = t.responses;
	out->drops = t.drops;
	out->send_errors = t.send_errors;
	out->outstanding = t.outstanding;
	out->qps = t.qps;
	out->drate = t.drate;
	out->latency_ms = t.latency_us / 1000.0;
	out->tcp_new = t.tcp_new;
	out->tcp_reused = t.tcp_reused;
	out->tcp_died_sending = t.tcp_died_sending;
	out->tcp_died_reading = t.tcp_died_reading;
	out->tcp_gave_up = t.tcp_gave_up;
	out->tcp_connect_timeouts = t.tcp_connect_timeouts;
	out->tcp_read_timeouts = t.tcp_read_timeouts;
	out->tcp_write_timeouts = t.tcp_write_timeouts;
	out->tls_resumptions = t.tls_resumptions;
	out->tcp_current = __atomic_load_n(&be->tcp_current, __ATOMIC_RELAXED);
	out->tcp_max = __atomic_load_n(&be->tcp_max, __ATOMIC_RELAXED);
	__atomic_load(&be->tcp_avg_queries, &out->tcp_avg_queries, __ATOMIC_RELAXED);
	__atomic_load(&be->tcp_avg_duration, &out->tcp_avg_duration, __ATOMIC_RELAXED);
	out->qps_limit = __atomic_load_n(&be->qps_limit_rt, __ATOMIC_RELAXED);
	out->order = be->order;
	out->weight = be->weight;
	for (int p = 0; p < be->npools && o < sizeof(out->pools); p++)
		o += (size_t)snprintf(out->pools + o, sizeof(out->pools) - o, "%s%s", p ? " " : "",
				      be->pools[p]);
	return 0;
}

/* A listener's DNS over TLS figures into @out (0 on the others): the same names on both. */
static void
add_tls(struct dlb_metrics_frontend *out, const struct dlb_listener *l)
{
#define ADD_TLS(field) (out->field += __atomic_load_n(&l->field, __ATOMIC_RELAXED))
	ADD_TLS(tls_new_sessions);
	ADD_TLS(tls_resumptions);
	ADD_TLS(tls_unknown_ticket_keys);
	ADD_TLS(tls_inactive_ticket_keys);
	for (size_t v = 0; v < sizeof(out->tls_queries) / sizeof(out->tls_queries[0]); v++)
		ADD_TLS(tls_queries[v]);
	for (size_t f = 0; f < sizeof(out->tls_failures) / sizeof(out->tls_failures[0]); f++)
		ADD_TLS(tls_failures[f]);
#undef ADD_TLS
}

/* A listener's DNS over HTTPS figures into @out. */
static void
add_doh(struct dlb_doh_figures *out, const struct dlb_doh_figures *d)
{
	const uint64_t *src = (const uint64_t *)d;
	uint64_t *dst = (uint64_t *)out;

	/* all uint64_t: summed field by field, relaxed */
	for (size_t k = 0; k < sizeof(*d) / sizeof(uint64_t); k++)
		dst[k] += __atomic_load_n(&src[k], __ATOMIC_RELAXED);
}

int
dlb_metrics_frontend(int i, struct dlb_metrics_frontend *out)
{
	const struct dlb_config *cfg = dlb_daemon.cfg;
	bool tcp = false;
	int fe = cfg != NULL && i >= 0 ? dlb_config_bind(cfg, i, &tcp) : -1;

	memset(out, 0, sizeof(*out));
	if (fe < 0)
		return -1;
	out->address = cfg->frontends[fe].text;
	out->proto = dlb_frontend_proto(&cfg->frontends[fe], tcp);
	out->tcp = tcp;
	out->tls = cfg->frontends[fe].tls;
	out->doh = cfg->frontends[fe].doh != NULL;
	for (int w = 0; w < dlb_daemon.nworkers; w++) {
		const struct dlb_worker *wk = dlb_daemon.workers[w];

		for (int k = 0; k < wk->nlisteners; k++) {
			const struct dlb_listener *l = &wk->listeners[k];

			if (l->index != fe)
				continue;
			if (tcp) {
				out->queries += __atomic_load_n(&l->tcp_queries, __ATOMIC_RELAXED);
				out->responses += __atomic_load_n(&l->tcp_responses, __ATOMIC_RELAXED);
				out->tcp_current += __atomic_load_n(&l->tcp_conns, __ATOMIC_RELAXED);
				out->tcp_died_reading += __atomic_load_n(&l->tcp_died_reading,
									 __ATOMIC_RELAXED);
				out->tcp_died_sending += __atomic_load_n(&l->tcp_died_sending,
									 __ATOMIC_RELAXED);
				out->tcp_gave_up += __atomic_load_n(&l->tcp_gave_up, __ATOMIC_RELAXED);
				out->tcp_client_timeouts += __atomic_load_n(&l->tcp_client_timeouts,
									    __ATOMIC_RELAXED);
				out->tcp_downstream_timeouts +=
					__atomic_load_n(&l->tcp_downstream_timeouts, __ATOMIC_RELAXED);
				add_tls(out, l);
				add_doh(&out->doh_figs, &l->doh);
			} else {
				out->queries += __atomic_load_n(&l->udp_queries, __ATOMIC_RELAXED);
				out->responses += __atomic_load_n(&l->udp_responses, __ATOMIC_RELAXED);
			}
		}
	}
	if (tcp) {
		struct dlb_tcp_fe_figures f;

		dlb_tcp_fe_figures(fe, &f);
		out->tcp_max = f.max_concurrent;
		out->tcp_avg_queries = f.avg_queries;
		out->tcp_avg_duration = f.avg_duration;
	}
	return 0;
}

int
dlb_metrics_pool(int i, struct dlb_metrics_pool *out)
{
	const struct dlb_config *cfg = dlb_daemon.cfg;
	const struct dlb_pool *pool;
	int policy;

	memset(out, 0, sizeof(*out));
	if (cfg == NULL || i < 0 || i >= cfg->npools)
		return -1;
	pool = cfg->pools[i];
	out->pool = pool;
	out->name = pool->name;
	out->servers = pool->n;
	for (int k = 0; k < pool->n; k++)
		if (dlb_backend_is_up(pool->members[k]))
			out->active++;
	policy = __atomic_load_n(&pool->policy, __ATOMIC_RELAXED);
	out->policy = dlb_config_policy_name(cfg, policy >= 0 ? policy :
					      __atomic_load_n(&cfg->set.policy, __ATOMIC_RELAXED));
	if (pool->cache != NULL) {
		struct dlb_cache_stats st;

		dlb_cache_get_stats(pool->cache, &st);
		out->has_cache = true;
		out->cache_size = st.max_entries;
		out->cache_entries = st.entries;
		out->cache_hits = st.hits;
		out->cache_misses = st.misses;
		out->cache_deferred_inserts = st.deferred_inserts;
		out->cache_deferred_lookups = st.deferred_lookups;
		out->cache_lookup_collisions = st.lookup_collisions;
		out->cache_insert_collisions = st.insert_collisions;
		out->cache_ttl_too_shorts = st.ttl_too_shorts;
	}
	return 0;
}

/* ---- rules ---------------------------------------------------------------- */

_Static_assert(DLB_TEE__COUNT == sizeof(((struct dlb_metrics_rule *)0)->tee_stats) / sizeof(uint64_t),
	       "struct dlb_metrics_rule holds every TeeAction figure");

static const char *const chain_names[DLB_CHAIN__COUNT] = {
	[DLB_CHAIN_QUERY] = "rules",
	[DLB_CHAIN_RESPONSE] = "response-rules",
	[DLB_CHAIN_CACHE_HIT] = "cache-hit-response-rules",
	[DLB_CHAIN_SELF_ANSWERED] = "self-answered-response-rules",
	[DLB_CHAIN_CACHE_INSERTED] = "cache-inserted-response-rules",
};

void
dlb_metrics_rules(void (*fn)(const struct dlb_metrics_rule *r, void *arg), void *arg)
{
	const struct dlb_ruleset *rs = dlb_rules_current();
	struct dlb_metrics_rule m;
	char live[64];

	for (int k = 0; k < DLB_CHAIN__COUNT; k++) {
		const struct dlb_chain *c = rs->c[k];

		for (int i = 0; c != NULL && i < c->n; i++) {
			const struct dlb_rule *r = c->v[i];

			memset(&m, 0, sizeof(m));
			m.chain = chain_names[k];
			snprintf(m.id, sizeof(m.id), "%s", r->name[0] ? r->name : r->uuid);
			snprintf(m.uuid, sizeof(m.uuid), "%s", r->uuid);
			/* as showRules: a selector with live state (TimedIPSetRule) counts now */
			snprintf(m.rule, sizeof(m.rule), "%s",
				 dlb_sel_desc(r->sel, live, sizeof(live)));
			snprintf(m.action, sizeof(m.action), "%s", r->act->desc ? r->act->desc : "");
			m.matches = dlb_rule_hits(r);
			if (r->act->type == DLB_ACT_TEE && r->act->u.tee != NULL) {
				m.tee = true;
				for (int s = 0; s < DLB_TEE__COUNT; s++)
					m.tee_stats[s] = dlb_tee_stat(r->act->u.tee,
								      (enum dlb_tee_stat)s);
			}
			fn(&m, arg);
		}
	}
}
