/*
 * stats_lua.c - dumpStats(), getStatisticsCounters(), showBinds(),
 * showTCPStats(), showTLSContexts() and showTLSErrorCounters(), with
 * dnsdist 1.7.3's layouts (observed; see docs/counters.md).
 */
#include "lua/stats_lua.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dnslb/core/config.h"
#include "dnslb/core/daemon.h"
#include "dnslb/control/metrics.h"
#include "dnslb/core/stats.h"
#include "dnslb/core/tls.h"
#include "dnslb/worker.h"
#include "lua/args.h"

static int
cmp_metric(const void *a, const void *b)
{
	return strcmp(((const struct dlb_metric *)a)->name, ((const struct dlb_metric *)b)->name);
}

/* One "%-35s\t%+11s" cell of dumpStats: integers as such, doubles as "    %9.1f". */
static void
stat_cell(const struct dlb_metric *m, char *out, size_t outsz)
{
	char v[64];

	if (m->is_double)
		snprintf(v, sizeof(v), "    %9.1f", m->value);
	else
		snprintf(v, sizeof(v), "%.0f", m->value);
	snprintf(out, outsz, "%-35s\t%11s", m->name, v);
}

/*
 * dumpStats(): every global metric sorted by name, in two columns; the left
 * one holds the first half (rounded down) and the right one starts at
 * column 51 (dnsdist's "%|0t|%1% %|51t|%2%").
 */
static int
l_dump_stats(lua_State *L)
{
	struct dlb_metric m[DLB_METRICS_MAX];
	size_t n, half;
	luaL_Buffer b;

	if (dlb_lua_silent(L))
		return 0;
	n = dlb_metrics_global(m, DLB_METRICS_MAX);
	qsort(m, n, sizeof(m[0]), cmp_metric);
	half = n / 2;
	luaL_buffinit(L, &b);
	for (size_t i = 0; i < n - half; i++) {
		char left[128] = "", right[128] = "";
		size_t len;

		if (i < half)
			stat_cell(&m[i], left, sizeof(left));
		if (half + i < n)
			stat_cell(&m[half + i], right, sizeof(right));
		luaL_addstring(&b, left);
		luaL_addchar(&b, ' ');
		len = strlen(left) + 1;
		while (len < 51) {
			luaL_addchar(&b, ' ');
			len++;
		}
		luaL_addstring(&b, right);
		if (i + 1 < n - half)
			luaL_addchar(&b, '\n');
	}
	luaL_pushresult(&b);
	dlb_lua_print(L, lua_tostring(L, -1));
	return 0;
}

/* getStatisticsCounters(): {name = value} of the plain counters (dnsdist: the stat_t entries). */
static int
l_get_statistics_counters(lua_State *L)
{
	struct dlb_metric m[DLB_METRICS_MAX];
	size_t n = dlb_metrics_global(m, DLB_METRICS_MAX);

	lua_createtable(L, 0, (int)n);
	for (size_t i = 0; i < n; i++) {
		if (!m[i].plain)
			continue;
		lua_pushinteger(L, (lua_Integer)m[i].value);
		lua_setfield(L, -2, m[i].name);
	}
	return 1;
}

/* showBinds(): "#   Address   Protocol   Queries", UDP then TCP for each frontend. */
static int
l_show_binds(lua_State *L)
{
	struct dlb_metrics_frontend f;
	char line[256];

	if (dlb_lua_silent(L))
		return 0;
	/* dnsdist's columns start at 0, 4, 35 and 57 */
	snprintf(line, sizeof(line), "%-3s %-30.30s %-20.20s  %s", "#", "Address", "Protocol",
		 "Queries");
	dlb_lua_print(L, line);
	for (int i = 0; dlb_metrics_frontend(i, &f) == 0; i++) {
		snprintf(line, sizeof(line), "%-3d %-30.30s %-20.20s  %llu", i, f.address, f.proto,
			 (unsigned long long)f.queries);
		dlb_lua_print(L, line);
	}
	return 0;
}

/*
 * showTCPStats(), dnsdist 1.7.3's layout: dnslb has no TCP worker pool (each
 * worker serves its own TCP clients), so the first table shows the workers,
 * with nothing ever queued; then every frontend (UDP ones all 0) and every
 * backend with its TCP connection figures; DNS over TLS listeners with their
 * TLS figures (0 for the others).
 */
static int
l_show_tcp_stats(lua_State *L)
{
	struct dlb_metrics_frontend f;
	struct dlb_metrics_backend *b;
	char line[512];

	if (dlb_lua_silent(L))
		return 0;
	snprintf(line, sizeof(line), "%-12s %-12s %-12s %-12s", "Workers", "Max Workers", "Queued",
		 "Max Queued");
	dlb_lua_print(L, line);
	snprintf(line, sizeof(line), "%-12d %-12d %-12d %-12d", dlb_daemon.nworkers,
		 dlb_daemon.nworkers, 0, 0);
	dlb_lua_print(L, line);
	dlb_lua_print(L, "");
	dlb_lua_print(L, "Frontends:");
	snprintf(line, sizeof(line),
		 "%-3s %-20.20s %-20s %-20s %-20s %-25s %-20s %-20s %-20s %-20s %-20s %-20s %-20s "
		 "%-25s %-25s %-15s %-15s %-15s %-15s %-15s",
		 "#", "Address", "Connections", "Max concurrent conn", "Died reading query",
		 "Died sending response", "Gave up", "Client timeouts", "Downstream timeouts",
		 "Avg queries/conn", "Avg duration", "TLS new sessions", "TLS Resumptions",
		 "TLS unknown ticket keys", "TLS inactive ticket keys", "TLS 1.0", "TLS 1.1",
		 "TLS 1.2", "TLS 1.3", "TLS other");
	dlb_lua_print(L, line);
	for (int i = 0; dlb_metrics_frontend(i, &f) == 0; i++) {
		snprintf(line, sizeof(line),
			 "%-3d %-20.20s %-20llu %-20llu %-20llu %-25llu %-20llu %-20llu %-20llu "
			 "%-20f %-20f %-20llu %-20llu %-25llu %-25llu %-15llu %-15llu %-15llu %-15llu "
			 "%-15llu",
			 i, f.address, (unsigned long long)f.tcp_current,
			 (unsigned long long)f.tcp_max, (unsigned long long)f.tcp_died_reading,
			 (unsigned long long)f.tcp_died_sending, (unsigned long long)f.tcp_gave_up,
			 (unsigned long long)f.tcp_client_timeouts,
			 (unsigned long long)f.tcp_downstream_timeouts, f.tcp_avg_queries,
			 f.tcp_avg_duration, (unsigned long long)f.tls_new_sessions,
			 (unsigned long long)f.tls_resumptions,
			 (unsigned long long)f.tls_unknown_ticket_keys,
			 (unsigned long long)f.tls_inactive_ticket_keys,
			 (unsigned long long)f.tls_queries[DLB_TLS_V10],
			 (unsigned long long)f.tls_queries[DLB_TLS_V11],
			 (unsigned long long)f.tls_queries[DLB_TLS_V12],
			 (unsigned long long)f.tls_queries[DLB_TLS_V13],
			 (unsigned long long)f.tls_queries[DLB_TLS_VUNKNOWN]);
		dlb_lua_print(L, line);
	}
	dlb_lua_print(L, "");
	dlb_lua_print(L, "Backends:");
	snprintf(line, sizeof(line),
		 "%-3s %-20.20s %-20.20s %-20s %-20s %-25s %-25s %-20s %-20s %-20s %-20s %-20s "
		 "%-20s %-20s %-20s %-20s",
		 "#", "Name", "Address", "Connections", "Max concurrent conn", "Died sending query",
		 "Died reading response", "Gave up", "Read timeouts", "Write timeouts",
		 "Connect timeouts", "Total connections", "Reused connections", "TLS resumptions",
		 "Avg queries/conn", "Avg duration");
	dlb_lua_print(L, line);
	b = malloc(sizeof(*b));
	for (int i = 0; b != NULL && dlb_metrics_backend(i, b) == 0; i++) {
		snprintf(line, sizeof(line),
			 "%-3d %-20.20s %-20.20s %-20llu %-20llu %-25llu %-25llu %-20llu %-20llu "
			 "%-20llu %-20llu %-20llu %-20llu %-20llu %-20f %-20f",
			 i, b->be->name, b->be->addr_text, (unsigned long long)b->tcp_current,
			 (unsigned long long)b->tcp_max, (unsigned long long)b->tcp_died_sending,
			 (unsigned long long)b->tcp_died_reading, (unsigned long long)b->tcp_gave_up,
			 (unsigned long long)b->tcp_read_timeouts,
			 (unsigned long long)b->tcp_write_timeouts,
			 (unsigned long long)b->tcp_connect_timeouts, (unsigned long long)b->tcp_new,
			 (unsigned long long)b->tcp_reused,
			 (unsigned long long)b->tls_resumptions, b->tcp_avg_queries,
			 b->tcp_avg_duration);
		dlb_lua_print(L, line);
	}
	free(b);
	return 0;
}

/* The next DNS over TLS listener from bind @*i on (advanced past it; DoH
 * listeners' contexts are not in dnsdist's list). @return 0, or -1 at the end. */
static int
next_tls_bind(int *i, struct dlb_metrics_frontend *f)
{
	while (dlb_metrics_frontend(*i, f) == 0) {
		(*i)++;
		if (f->tls != NULL && !f->doh)
			return 0;
	}
	return -1;
}

/*
 * showTLSContexts(): every DNS over TLS listener's ticket keys, rotation
 * delay and next rotation (local time; the epoch when it never rotates by
 * itself), dnsdist 1.7.3's table (observed).
 */
static int
l_show_tls_contexts(lua_State *L)
{
	struct dlb_metrics_frontend f;
	char line[256], when[32];
	int bind = 0;

	if (dlb_lua_silent(L))
		return 0;
	snprintf(line, sizeof(line), "%-3s %-20.20s %-14s %-14s %-21.21s", "#", "Address",
		 "# ticket keys", "Rotation delay", "Next rotation");
	dlb_lua_print(L, line);
	for (int n = 0; next_tls_bind(&bind, &f) == 0; n++) {
		time_t next = (time_t)dlb_tls_server_next_rotation(f.tls);
		struct tm tm;

		if (localtime_r(&next, &tm) == NULL ||
		    strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm) == 0)
			when[0] = '\0';
		snprintf(line, sizeof(line), "%-3d %-20.20s %-14zu %-14u %-21.21s", n, f.address,
			 dlb_tls_server_ticket_keys(f.tls),
			 dlb_tls_server_opts(f.tls)->ticket_rotation, when);
		dlb_lua_print(L, line);
	}
	return 0;
}

/* The next listener with TLS (DoT or DoH) from bind @*i on (advanced past it). @return 0, or -1 at the end. */
static int
next_any_tls_bind(int *i, struct dlb_metrics_frontend *f)
{
	while (dlb_metrics_frontend(*i, f) == 0) {
		(*i)++;
		if (f->tls != NULL)
			return 0;
	}
	return -1;
}

/* showTLSErrorCounters(): every DNS over TLS or HTTPS listener's failed
 * handshakes by reason (DoH listeners too, unlike showTLSContexts()),
 * dnsdist 1.7.3's table. */
static int
l_show_tls_error_counters(lua_State *L)
{
	struct dlb_metrics_frontend f;
	char line[512];
	int bind = 0;

	if (dlb_lua_silent(L))
		return 0;
	snprintf(line, sizeof(line), "%-3s %-20.20s %-23s %-23s %-23s %-23s %-23s %-23s %-23s %-23s",
		 "#", "Address", "DH key too small", "Inappropriate fallback", "No shared cipher",
		 "Unknown cipher type", "Unknown exchange type", "Unknown protocol",
		 "Unsupported EC", "Unsupported protocol");
	dlb_lua_print(L, line);
	for (int n = 0; next_any_tls_bind(&bind, &f) == 0; n++) {
		size_t o = (size_t)snprintf(line, sizeof(line), "%-3d %-20.20s", n, f.address);

		for (int k = 0; k < DLB_TLS_FAIL_COUNT && o < sizeof(line); k++)
			o += (size_t)snprintf(line + o, sizeof(line) - o, " %-23llu",
					      (unsigned long long)f.tls_failures[k]);
		dlb_lua_print(L, line);
	}
	dlb_lua_print(L, "");	/* dnsdist ends the table with an empty line */
	return 0;
}

/* The next DNS over HTTPS listener from bind @*i on (advanced past it). @return 0, or -1 at the end. */
static int
next_doh_bind(int *i, struct dlb_metrics_frontend *f)
{
	while (dlb_metrics_frontend(*i, f) == 0) {
		(*i)++;
		if (f->doh)
			return 0;
	}
	return -1;
}

/* showDOHFrontends(): each DNS over HTTPS listener's figures, dnsdist 1.7.3's table. */
static int
l_show_doh_frontends(lua_State *L)
{
	struct dlb_metrics_frontend f;
	char line[512];
	int bind = 0;

	if (dlb_lua_silent(L))
		return 0;
	snprintf(line, sizeof(line), "%-3s %-20.20s %-15s %-15s %-15s %-15s %-15s %-15s %-15s %-15s "
		 "%-15s %-15s %-15s %-15s", "#", "Address", "HTTP", "HTTP/1", "HTTP/2", "GET", "POST",
		 "Bad", "Errors", "Redirects", "Valid", "# ticket keys", "Rotation delay",
		 "Next rotation");
	dlb_lua_print(L, line);
	for (int n = 0; next_doh_bind(&bind, &f) == 0; n++) {
		const struct dlb_doh_figures *d = &f.doh_figs;
		/* without TLS: dnsdist's defaults for a context it does not have */
		unsigned long long keys = 0, delay = 43200, next = 0;

		if (f.tls != NULL) {
			keys = dlb_tls_server_ticket_keys(f.tls);
			delay = dlb_tls_server_opts(f.tls)->ticket_rotation;
			next = (unsigned long long)dlb_tls_server_next_rotation(f.tls);
		}
		snprintf(line, sizeof(line), "%-3d %-20.20s %-15llu %-15llu %-15llu %-15llu %-15llu "
			 "%-15llu %-15llu %-15llu %-15llu %-15llu %-15llu %-15llu", n, f.address,
			 (unsigned long long)d->connects, (unsigned long long)d->http1,
			 (unsigned long long)d->http2, (unsigned long long)d->get,
			 (unsigned long long)d->post, (unsigned long long)d->bad,
			 (unsigned long long)d->errors, (unsigned long long)d->redirects,
			 (unsigned long long)d->valid, keys, delay, next);
		dlb_lua_print(L, line);
	}
	return 0;
}

/* showDOHResponseCodes(): each DNS over HTTPS listener's answers by status,
 * for HTTP/1 then HTTP/2, dnsdist 1.7.3's tables. */
static int
l_show_doh_response_codes(lua_State *L)
{
	struct dlb_metrics_frontend f;
	char line[256];

	if (dlb_lua_silent(L))
		return 0;
	for (int v = 0; v < 2; v++) {
		int bind = 0;

		dlb_lua_print(L, "");
		dlb_lua_print(L, v == 0 ? "- HTTP/1:" : "- HTTP/2:");
		dlb_lua_print(L, "");
		snprintf(line, sizeof(line), "%-3s %-20.20s %-15s %-15s %-15s %-15s %-15s %-15s", "#",
			 "Address", "200", "400", "403", "500", "502", "Others");
		dlb_lua_print(L, line);
		for (int n = 0; next_doh_bind(&bind, &f) == 0; n++) {
			const uint64_t *st = f.doh_figs.status[v];

			snprintf(line, sizeof(line), "%-3d %-20.20s %-15llu %-15llu %-15llu %-15llu "
				 "%-15llu %-15llu", n, f.address, (unsigned long long)st[0],
				 (unsigned long long)st[1], (unsigned long long)st[2],
				 (unsigned long long)st[3], (unsigned long long)st[4],
				 (unsigned long long)st[5]);
			dlb_lua_print(L, line);
		}
	}
	return 0;
}

void
dlb_lua_stats_register(lua_State *L)
{
	static const luaL_Reg funcs[] = {
		{ "dumpStats", l_dump_stats },
		{ "getStatisticsCounters", l_get_statistics_counters },
		{ "showBinds", l_show_binds },
		{ "showTCPStats", l_show_tcp_stats },
		{ "showTLSContexts", l_show_tls_contexts },
		{ "showTLSErrorCounters", l_show_tls_error_counters },
		{ "showDOHFrontends", l_show_doh_frontends },
		{ "showDOHResponseCodes", l_show_doh_response_codes },
		{ NULL, NULL },
	};

	lua_pushglobaltable(L);
	luaL_setfuncs(L, funcs, 0);
	lua_pop(L, 1);
}
