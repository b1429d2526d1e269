/*
 * stats_lua.c - dumpStats(), getStatisticsCounters(), showBinds() and
 * showTCPStats(), with dnsdist 1.7.3's layouts (observed; see
 * docs/counters.md).
 */
#include "lua/stats_lua.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/core/config.h"
#include "dnslb/core/daemon.h"
#include "dnslb/control/metrics.h"
#include "dnslb/core/stats.h"
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
 * backend with its TCP connection figures. No TLS yet: those columns are 0.
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
			 "%-20f %-20f %-20d %-20d %-25d %-25d %-15d %-15d %-15d %-15d %-15d",
			 i, f.address, (unsigned long long)f.tcp_current,
			 (unsigned long long)f.tcp_max, (unsigned long long)f.tcp_died_reading,
			 (unsigned long long)f.tcp_died_sending, (unsigned long long)f.tcp_gave_up,
			 (unsigned long long)f.tcp_client_timeouts,
			 (unsigned long long)f.tcp_downstream_timeouts, f.tcp_avg_queries,
			 f.tcp_avg_duration, 0, 0, 0, 0, 0, 0, 0, 0, 0);
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

void
dlb_lua_stats_register(lua_State *L)
{
	static const luaL_Reg funcs[] = {
		{ "dumpStats", l_dump_stats },
		{ "getStatisticsCounters", l_get_statistics_counters },
		{ "showBinds", l_show_binds },
		{ "showTCPStats", l_show_tcp_stats },
		{ NULL, NULL },
	};

	lua_pushglobaltable(L);
	luaL_setfuncs(L, funcs, 0);
	lua_pop(L, 1);
}
