/*
 * rings_lua.c - setRingBuffersSize() and the inspection tools over the
 * ring buffers, with dnsdist 1.7.3's output formats (checked against Debian's
 * dnsdist 1.7.3 on the same traffic; differences in docs/rings.md).
 *
 * Each tool first checks its arguments, then, only in a state that may look
 * at the running daemon (config, check, console), reads the rings through
 * dnslb/pipeline/rings.h and prints line by line through dlb_lua_print.
 */
#include "lua/rings_lua.h"

#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dnslb/core/config.h"
#include "dnslb/core/daemon.h"
#include "dnslb/core/netmask.h"
#include "dnslb/pipeline/rings.h"
#include "dnslb/core/wire.h"
#include "dnslb/worker.h"
#include "lua/args.h"
#include "lua/conf.h"

/* ---- settings ------------------------------------------------------------------ */

static int
l_set_ring_buffers_size(lua_State *L)
{
	lua_Integer n = dlb_lua_arg_int(L, 1, "setRingBuffersSize", 0, DLB_RING_MAX_SIZE);
	lua_Integer shards = dlb_lua_opt_arg_int(L, 2, "setRingBuffersSize", 1, 1000000, 10);
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);
	enum dlb_lua_phase p = lc != NULL ? dlb_lua_conf_phase(lc) : DLB_LUA_PHASE_WORKER;

	if (p == DLB_LUA_PHASE_RUNNING) {
		/* dnsdist prints this and carries on */
		dlb_lua_print(L, "setRingBuffersSize() cannot be used at runtime!");
		return 0;
	}
	if (p == DLB_LUA_PHASE_CONFIG || p == DLB_LUA_PHASE_CHECK)
		dlb_rings_set_size((size_t)n, (size_t)shards);
	return 0;
}

/* Accepted for compatibility: writers take no lock, so there is nothing to retry. */
static int
l_set_ring_buffers_lock_retries(lua_State *L)
{
	dlb_lua_arg_int(L, 1, "setRingBuffersLockRetries", 0, LUA_MAXINTEGER);
	return 0;
}

/*
 * setRingBuffersOptions({lockRetries=n, recordQueries=bool, recordResponses=bool})
 * (dnsdist 1.8): lockRetries is checked and ignored, as setRingBuffersLockRetries.
 */
static int
l_set_ring_buffers_options(lua_State *L)
{
	static const char *const keys[] = { "lockRetries", "recordQueries", "recordResponses", NULL };
	const char *fn = "setRingBuffersOptions";
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);
	enum dlb_lua_phase p = lc != NULL ? dlb_lua_conf_phase(lc) : DLB_LUA_PHASE_WORKER;
	lua_Integer retries;
	bool queries, responses;

	if (lua_type(L, 1) != LUA_TTABLE)
		luaL_error(L, "%s: argument #1 must be a table of options", fn);
	dlb_lua_warn_unknown_keys(L, 1, fn, "option", keys);
	dlb_rings_recording(&queries, &responses);
	dlb_lua_opt_integer(L, 1, fn, "lockRetries", 0, LUA_MAXINTEGER, &retries);
	dlb_lua_opt_bool(L, 1, fn, "recordQueries", &queries);
	dlb_lua_opt_bool(L, 1, fn, "recordResponses", &responses);
	if (p == DLB_LUA_PHASE_RUNNING) {
		/* dnsdist 1.8 prints this and carries on */
		dlb_lua_print(L, "setRingBuffersOptions cannot be used at runtime!");
		return 0;
	}
	if (p == DLB_LUA_PHASE_CONFIG || p == DLB_LUA_PHASE_CHECK)
		dlb_rings_set_recording(queries, responses);
	return 0;
}

/* ---- top*() -------------------------------------------------------------------- */

/* A count of entries as dnsdist takes it (unsigned: -1 is "all"). */
static size_t
arg_top(lua_State *L, int arg, const char *fn, bool required)
{
	lua_Integer v = required ? dlb_lua_arg_int(L, arg, fn, LUA_MININTEGER, LUA_MAXINTEGER)
				 : dlb_lua_opt_arg_int(L, arg, fn, LUA_MININTEGER, LUA_MAXINTEGER, 10);

	return v < 0 ? SIZE_MAX : (size_t)v;
}

/* Labels to group names to: absent (or, as dnsdist's unsigned, negative) = whole names. */
static int
arg_labels(lua_State *L, int arg, const char *fn)
{
	lua_Integer v = dlb_lua_opt_arg_int(L, arg, fn, LUA_MININTEGER, LUA_MAXINTEGER, -1);

	return v < 0 ? -1 : v > 255 ? 255 : (int)v;
}

static unsigned
arg_rcode(lua_State *L, int arg, const char *fn, bool required)
{
	lua_Integer v = required ? dlb_lua_arg_int(L, arg, fn, LUA_MININTEGER, LUA_MAXINTEGER)
				 : dlb_lua_opt_arg_int(L, arg, fn, LUA_MININTEGER, LUA_MAXINTEGER, 0);

	return v < 0 || v > 15 ? 0x10000u : (unsigned)v;	/* out of range: matches nothing */
}

static uint64_t
arg_msec(lua_State *L, int arg, const char *fn, bool required)
{
	lua_Integer v = required ? dlb_lua_arg_int(L, arg, fn, LUA_MININTEGER, LUA_MAXINTEGER)
				 : dlb_lua_opt_arg_int(L, arg, fn, LUA_MININTEGER, LUA_MAXINTEGER, 500);

	if (v < 0 || (uint64_t)v > UINT64_MAX / 1000)
		return UINT64_MAX;
	return (uint64_t)v * 1000;
}

/*
 * Compute @spec's top @n, then print dnsdist's lines ("%4d  %-40s %4d
 * %4.1f%%", then a "Rest" line) or, with @table, return getTopQueries()'s
 * table {[k] = {key, count, percent}}.
 */
static int
run_top(lua_State *L, const char *fn, const struct dlb_top_spec *spec, size_t n, bool table)
{
	struct dlb_lua_box *box = dlb_lua_box_new(L);
	struct dlb_top_entry *v = NULL;
	uint64_t total = 0, rest = 0;
	long k = 0;
	char line[400];

	if (dlb_lua_conf_live(L)) {
		k = dlb_rings_top(spec, n, &v, &total, &rest);
		if (k < 0)
			return luaL_error(L, "%s: out of memory", fn);
		box->p = v;
	}
	if (table) {
		lua_createtable(L, (int)(k < INT32_MAX - 1 ? k + 1 : INT32_MAX), 0);
		for (long i = 0; i <= k; i++) {
			lua_createtable(L, 3, 0);
			lua_pushstring(L, i < k ? v[i].key : "Rest");
			lua_rawseti(L, -2, 1);
			lua_pushinteger(L, (lua_Integer)(i < k ? v[i].count : rest));
			lua_rawseti(L, -2, 2);
			lua_pushnumber(L, total > 0 ? 100.0 * (double)(i < k ? v[i].count : rest) /
						       (double)total : 100.0);
			lua_rawseti(L, -2, 3);
			lua_rawseti(L, -2, i + 1);
		}
		dlb_lua_box_free(box);
		return 1;
	}
	if (!dlb_lua_conf_live(L))
		return 0;
	for (long i = 0; i < k; i++) {
		snprintf(line, sizeof(line), "%4ld  %-40s %4llu %4.1f%%", i + 1, v[i].key,
			 (unsigned long long)v[i].count, 100.0 * (double)v[i].count / (double)total);
		dlb_lua_print(L, line);
	}
	snprintf(line, sizeof(line), "%4ld  %-40s %4llu %4.1f%%", k + 1, "Rest",
		 (unsigned long long)rest, total > 0 ? 100.0 * (double)rest / (double)total : 100.0);
	dlb_lua_print(L, line);
	dlb_lua_box_free(box);
	return 0;
}

static int
l_top_queries(lua_State *L)
{
	struct dlb_top_spec s = { .kind = DLB_TOP_QNAMES };
	size_t n = arg_top(L, 1, "topQueries", false);

	s.labels = arg_labels(L, 2, "topQueries");
	return run_top(L, "topQueries", &s, n, false);
}

static int
l_get_top_queries(lua_State *L)
{
	struct dlb_top_spec s = { .kind = DLB_TOP_QNAMES };
	size_t n = arg_top(L, 1, "getTopQueries", true);

	s.labels = arg_labels(L, 2, "getTopQueries");
	return run_top(L, "getTopQueries", &s, n, true);
}

static int
l_top_clients(lua_State *L)
{
	struct dlb_top_spec s = { .kind = DLB_TOP_CLIENTS, .labels = -1 };

	return run_top(L, "topClients", &s, arg_top(L, 1, "topClients", false), false);
}

static int
l_top_responses(lua_State *L)
{
	struct dlb_top_spec s = { .kind = DLB_TOP_RCODE };
	size_t n = arg_top(L, 1, "topResponses", false);

	s.rcode = arg_rcode(L, 2, "topResponses", false);
	s.labels = arg_labels(L, 3, "topResponses");
	return run_top(L, "topResponses", &s, n, false);
}

static int
l_get_top_responses(lua_State *L)
{
	struct dlb_top_spec s = { .kind = DLB_TOP_RCODE };
	size_t n = arg_top(L, 1, "getTopResponses", true);

	s.rcode = arg_rcode(L, 2, "getTopResponses", true);
	s.labels = arg_labels(L, 3, "getTopResponses");
	return run_top(L, "getTopResponses", &s, n, true);
}

static int
l_top_slow(lua_State *L)
{
	struct dlb_top_spec s = { .kind = DLB_TOP_SLOW };
	size_t n = arg_top(L, 1, "topSlow", false);

	s.min_usec = arg_msec(L, 2, "topSlow", false);
	s.labels = arg_labels(L, 3, "topSlow");
	return run_top(L, "topSlow", &s, n, false);
}

static int
l_get_slow_responses(lua_State *L)
{
	struct dlb_top_spec s = { .kind = DLB_TOP_SLOW };
	size_t n = arg_top(L, 1, "getSlowResponses", true);

	s.min_usec = arg_msec(L, 2, "getSlowResponses", true);
	s.labels = arg_labels(L, 3, "getSlowResponses");
	return run_top(L, "getSlowResponses", &s, n, true);
}

static int
l_top_timeouts(lua_State *L)
{
	struct dlb_top_spec s = { .kind = DLB_TOP_TIMEOUTS };
	size_t n = arg_top(L, 1, "topTimeouts", false);

	s.labels = arg_labels(L, 2, "topTimeouts");
	return run_top(L, "topTimeouts", &s, n, false);
}

static int
l_top_bandwidth(lua_State *L)
{
	struct dlb_top_spec s = { .kind = DLB_TOP_BANDWIDTH, .labels = -1 };

	return run_top(L, "topBandwidth", &s, arg_top(L, 1, "topBandwidth", false), false);
}

static int
l_get_top_bandwidth(lua_State *L)
{
	struct dlb_top_spec s = { .kind = DLB_TOP_BANDWIDTH, .labels = -1 };

	return run_top(L, "getTopBandwidth", &s, arg_top(L, 1, "getTopBandwidth", true), true);
}

/* ---- grepq() ------------------------------------------------------------------- */

struct grepq {
	bool has_nm, has_dn;
	struct dlb_netmask nm;
	uint8_t dn[DLB_MAX_NAME];
	size_t dnlen;
	long long msec;			/* -1: no latency selector */
};

struct hit {
	struct dlb_ring_rec rec;
	bool resp;
};

struct hits {
	struct hit *v;
	size_t n, cap;
	bool oom;
};

/* dnsdist's order: a netmask, else "<n>ms", else a name; a later one of a kind wins. */
static bool
grepq_selector(struct grepq *g, const char *s)
{
	size_t len = strlen(s);
	struct dlb_netmask nm;
	uint8_t dn[DLB_MAX_NAME];
	unsigned ms;
	int n;

	if (dlb_netmask_parse(s, &nm) == 0) {
		g->nm = nm;
		g->has_nm = true;
		return true;
	}
	if (len >= 2 && strcmp(s + len - 2, "ms") == 0 && sscanf(s, "%ums", &ms) == 1) {
		g->msec = ms;
		return true;
	}
	n = dlb_wire_name_from_text(s, dn, sizeof(dn));
	if (n < 0)
		return false;
	for (int i = 0; i < n; i++)
		g->dn[i] = (dn[i] >= 'A' && dn[i] <= 'Z') ? (uint8_t)(dn[i] + 32) : dn[i];
	g->dnlen = (size_t)n;
	g->has_dn = true;
	return true;
}

/* Is the entry's name @g->dn or below it (DNSName::isPartOf)? */
static bool
name_part_of(const struct grepq *g, const struct dlb_ring_rec *r)
{
	size_t off = 0;

	if (r->namelen == 0)
		return false;
	while (off < r->namelen) {
		if (r->namelen - off == g->dnlen && memcmp(r->name + off, g->dn, g->dnlen) == 0)
			return true;
		if (r->name[off] == 0)
			break;
		off += 1 + (size_t)r->name[off];
	}
	return false;
}

static bool
grepq_match(const struct grepq *g, const struct dlb_ring_rec *r, bool resp)
{
	if (g->has_nm) {
		struct sockaddr_storage ss = { 0 };

		if (r->pflags & DLB_RING_V6) {
			struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

			s6->sin6_family = AF_INET6;
			memcpy(&s6->sin6_addr, r->addr, 16);
		} else {
			struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

			s4->sin_family = AF_INET;
			memcpy(&s4->sin_addr, r->addr, 4);
		}
		if (!dlb_netmask_match(&g->nm, (const struct sockaddr *)&ss))
			return false;
	}
	if (g->has_dn && !name_part_of(g, r))
		return false;
	if (g->msec >= 0 && (!resp || r->usec / 1000 <= (unsigned long long)g->msec))
		return false;
	return true;
}

static void
hits_push(struct hits *h, const struct dlb_ring_rec *r, bool resp)
{
	if (h->oom)
		return;
	if (h->n == h->cap) {
		size_t nc = h->cap ? h->cap * 2 : 256;
		struct hit *nv = realloc(h->v, nc * sizeof(*nv));

		if (nv == NULL) {
			h->oom = true;
			return;
		}
		h->v = nv;
		h->cap = nc;
	}
	h->v[h->n].rec = *r;
	h->v[h->n].resp = resp;
	h->n++;
}

/* One worker's newest matches: a ring of the last @cap that grepq_visit saw. */
struct grepq_visit {
	const struct grepq *g;
	bool resp;
	struct dlb_ring_rec *v;		/* [cap] */
	size_t cap, n;			/* n: matches seen */
};

static void
grepq_visit(const struct dlb_ring_rec *r, void *ud)
{
	struct grepq_visit *gv = ud;

	if (!grepq_match(gv->g, r, gv->resp))
		return;
	gv->v[gv->n % gv->cap] = *r;
	gv->n++;
}

static int
hit_newest_first(const void *a, const void *b)
{
	const struct hit *x = a, *y = b;

	return x->rec.when_us > y->rec.when_us ? -1 : x->rec.when_us < y->rec.when_us;
}

/* Oldest first; at the same time, questions before answers. */
static int
hit_oldest_first(const void *a, const void *b)
{
	const struct hit *x = a, *y = b;

	if (x->rec.when_us != y->rec.when_us)
		return x->rec.when_us < y->rec.when_us ? -1 : 1;
	return (int)x->resp - (int)y->resp;
}

/* @kind's matches of every worker, the newest @limit of them, appended to @out. */
static void
grepq_collect(bool resp, const struct grepq *g, size_t limit, struct hits *out)
{
	struct hits h = { 0 };
	struct grepq_visit gv = { .g = g, .resp = resp };
	size_t most = 0;

	/* the newest @limit of each worker (at most its ring's entries), then
	 * the newest @limit of those */
	for (int i = 0; i < dlb_daemon.nworkers; i++) {
		const struct dlb_rings *rs = dlb_daemon.workers[i]->rings;

		if (rs != NULL && (resp ? rs->resp.cap : rs->query.cap) > most)
			most = resp ? rs->resp.cap : rs->query.cap;
	}
	gv.cap = limit < most ? limit : most;
	if (gv.cap > 0 && (gv.v = malloc(gv.cap * sizeof(*gv.v))) == NULL)
		h.oom = true;
	for (int i = 0; i < dlb_daemon.nworkers && gv.v != NULL; i++) {
		const struct dlb_rings *rs = dlb_daemon.workers[i]->rings;

		if (rs == NULL)
			continue;
		gv.n = 0;
		dlb_rings_visit_worker(rs, resp, grepq_visit, &gv);
		for (size_t k = gv.n > gv.cap ? gv.n - gv.cap : 0; k < gv.n; k++)
			hits_push(&h, &gv.v[k % gv.cap], resp);
	}
	free(gv.v);
	if (h.oom) {
		out->oom = true;
	} else {
		if (h.n > 1)
			qsort(h.v, h.n, sizeof(*h.v), hit_newest_first);
		for (size_t i = 0; i < h.n && i < limit; i++)
			hits_push(out, &h.v[i].rec, resp);
	}
	free(h.v);
}

#define GREPQ_FMT "%-7s %-47s %-12s %-12s %-5s %-25s %-5s %-6s %-2s %-2s %-2s %s"

static void
grepq_line(const struct hit *h, int64_t now_us, const struct dlb_config *cfg, char *line,
	   size_t linesz)
{
	const struct dlb_ring_rec *r = &h->rec;
	char t[32], id[8], client[64], name[DLB_WIRE_NAME_TEXT_MAX + 4], tbuf[16], lat[32];
	char rcode[96];
	const char *server = "";
	unsigned rc = DLB_RCODE(r->hflags);
	const char *rt;

	snprintf(t, sizeof(t), "%.1f", (double)(r->when_us - now_us) / 1e6);
	snprintf(id, sizeof(id), "%u", r->id);
	dlb_ring_client_text(r, true, client, sizeof(client));
	dlb_ring_name_text(r, name, sizeof(name));
	lat[0] = '\0';
	if (!h->resp) {
		snprintf(rcode, sizeof(rcode), "Question");
	} else {
		if (r->backend == DLB_RING_BE_CACHE)
			server = "Cache";
		else if (r->backend == DLB_RING_BE_SELF)
			server = "Self";
		else if (cfg != NULL && r->backend < cfg->nbackends)
			server = cfg->backends[r->backend]->addr_text;
		else
			server = "?";
		if (r->usec == DLB_RING_TIMEOUT)
			snprintf(lat, sizeof(lat), "T.O");
		else
			snprintf(lat, sizeof(lat), "%.1f", r->usec / 1000.0);
		rt = dlb_wire_rcode_text(rc);
		if (rc == 0)
			snprintf(rcode, sizeof(rcode), "%s. %u answers", rt, r->ancount);
		else if (rt != NULL)
			snprintf(rcode, sizeof(rcode), "%s", rt);
		else
			snprintf(rcode, sizeof(rcode), "Err#%u", rc);
	}
	snprintf(line, linesz, GREPQ_FMT, t, client, (r->pflags & DLB_RING_TCP) ? "DoTCP" : "DoUDP",
		 server, id, name, dlb_qtype_text(r->qtype, tbuf, sizeof(tbuf)), lat,
		 (r->hflags & DLB_F_TC) ? "TC" : "", (r->hflags & DLB_F_RD) ? "RD" : "",
		 (r->hflags & DLB_F_AA) ? "AA" : "", rcode);
}

static const char *const grepq_opts[] = { "outputFile", NULL };

static int
l_grepq(lua_State *L)
{
	struct grepq g = { .msec = -1 };
	struct hits out = { 0 };
	lua_Integer lim = dlb_lua_opt_arg_int(L, 2, "grepq", LUA_MININTEGER, LUA_MAXINTEGER, 0);
	size_t limit = lim <= 0 ? SIZE_MAX : (size_t)lim;
	int t = dlb_lua_opt_table(L, 3, "grepq");
	const char *path = NULL;
	struct dlb_config *cfg = dlb_lua_conf_cfg(dlb_lua_conf_of(L));
	char line[2048];
	struct timespec ts;
	int64_t now_us;
	struct dlb_lua_box *box;
	FILE *f = NULL;

	/* selectors: a string (or number), or an array of them */
	if (lua_type(L, 1) == LUA_TTABLE) {
		lua_Integer n = (lua_Integer)lua_rawlen(L, 1);

		for (lua_Integer i = 1; i <= n; i++) {
			lua_rawgeti(L, 1, i);
			if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER)
				return luaL_error(L, "grepq: selector #%d must be a string", (int)i);
			lua_pop(L, 1);
		}
	} else if (lua_type(L, 1) != LUA_TSTRING && lua_type(L, 1) != LUA_TNUMBER) {
		return luaL_error(L, "grepq: argument #1 must be a string or a table of strings");
	}
	if (t != 0) {
		dlb_lua_warn_unknown_keys(L, t, "grepq", "option", grepq_opts);
		path = dlb_lua_opt_string_push(L, t, "grepq", "outputFile");
	}
	if (!dlb_lua_conf_live(L))
		return 0;

	if (lua_type(L, 1) == LUA_TTABLE) {
		lua_Integer n = (lua_Integer)lua_rawlen(L, 1);

		for (lua_Integer i = 1; i <= n; i++) {
			const char *s;

			lua_rawgeti(L, 1, i);
			s = lua_tostring(L, -1);
			if (!grepq_selector(&g, s)) {
				snprintf(line, sizeof(line),
					 "Could not parse '%.200s' as domain name or netmask", s);
				dlb_lua_print(L, line);
				return 0;
			}
			lua_pop(L, 1);
		}
	} else if (!grepq_selector(&g, lua_tostring(L, 1))) {
		snprintf(line, sizeof(line), "Could not parse '%.200s' as domain name or netmask",
			 lua_tostring(L, 1));
		dlb_lua_print(L, line);
		return 0;
	}

	if (path != NULL && dlb_lua_conf_phase(dlb_lua_conf_of(L)) != DLB_LUA_PHASE_CHECK) {
		int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);

		if (fd >= 0 && (f = fdopen(fd, "w")) == NULL)
			close(fd);
		if (f == NULL) {
			snprintf(line, sizeof(line), "Error opening dump file for writing: %s",
				 strerror(errno));
			dlb_lua_print(L, line);
			return 0;
		}
	}

	if (g.msec < 0)
		grepq_collect(false, &g, limit, &out);
	grepq_collect(true, &g, limit, &out);
	if (out.oom) {
		free(out.v);
		if (f != NULL)
			fclose(f);
		return luaL_error(L, "grepq: out of memory");
	}
	box = dlb_lua_box_new(L);
	box->p = out.v;
	if (out.n > 1)
		qsort(out.v, out.n, sizeof(*out.v), hit_oldest_first);

	clock_gettime(CLOCK_REALTIME, &ts);
	now_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
	snprintf(line, sizeof(line), GREPQ_FMT, "Time", "Client", "Protocol", "Server", "ID", "Name",
		 "Type", "Lat.", "TC", "RD", "AA", "Rcode");
	if (f != NULL)
		fprintf(f, "%s\n", line);
	else
		dlb_lua_print(L, line);
	for (size_t i = 0; i < out.n; i++) {
		grepq_line(&out.v[i], now_us, cfg, line, sizeof(line));
		if (f != NULL)
			fprintf(f, "%s\n", line);
		else
			dlb_lua_print(L, line);
	}
	dlb_lua_box_free(box);
	if (f != NULL)
		fclose(f);
	return 0;
}

/* ---- showResponseLatency() ------------------------------------------------------ */

#define LAT_BINS 15			/* 0.1 ms .. 1638.4 ms, doubling */

struct latency {
	uint64_t bins[LAT_BINS];
	uint64_t size;
	double total;
};

static void
latency_visit(const struct dlb_ring_rec *r, void *ud)
{
	struct latency *l = ud;

	if (r->usec == DLB_RING_TIMEOUT)
		return;
	l->size++;
	l->total += r->usec;
	/* the first bin whose bound is >= usec; beyond the last, in no bin (as dnsdist) */
	for (int b = 0; b < LAT_BINS; b++) {
		if ((uint64_t)r->usec <= (uint64_t)100 << b) {
			l->bins[b]++;
			break;
		}
	}
}

static int
l_show_response_latency(lua_State *L)
{
	struct latency l = { { 0 }, 0, 0 };
	uint64_t highest = 0;
	char line[160], stars[80];

	if (!dlb_lua_conf_live(L))
		return 0;
	dlb_rings_visit_all(true, latency_visit, &l);
	if (l.size == 0) {
		dlb_lua_print(L, "No traffic yet.");
		return 0;
	}
	snprintf(line, sizeof(line), "Average response latency: %.02f msec",
		 0.001 * l.total / (double)l.size);
	dlb_lua_print(L, line);
	for (int b = 0; b < LAT_BINS; b++)
		if (l.bins[b] > highest)
			highest = l.bins[b];
	snprintf(line, sizeof(line), "%7s\t", "msec");
	dlb_lua_print(L, line);
	for (int b = 0; b < LAT_BINS; b++) {
		double share = highest > 0 ? 70.0 * (double)l.bins[b] / (double)highest : 0;
		int n = (int)share;
		char c = '*';

		if (n == 0 && l.bins[b] > 0) {
			n = 1;		/* one mark to show something is there */
			c = share > 0.5 ? ':' : '.';
		}
		memset(stars, c, (size_t)n);
		stars[n] = '\0';
		snprintf(line, sizeof(line), "%7.2f\t%s", (double)((uint64_t)100 << b) / 1000.0, stars);
		dlb_lua_print(L, line);
	}
	return 0;
}

/* ---- getRespRing(), getResponseRing() ------------------------------------------ */

struct ring_table {
	lua_State *L;
	bool full;			/* getResponseRing: name, qtype, rcode, usec */
	int rcode;			/* getRespRing: only this rcode; -1: all */
	lua_Integer n;
};

static void
ring_table_visit(const struct dlb_ring_rec *r, void *ud)
{
	struct ring_table *rt = ud;
	lua_State *L = rt->L;
	char name[DLB_WIRE_NAME_TEXT_MAX + 4];
	unsigned rc = DLB_RCODE(r->hflags);

	if (rt->rcode >= 0 && (unsigned)rt->rcode != rc)
		return;
	dlb_ring_name_text(r, name, sizeof(name));
	lua_createtable(L, 0, rt->full ? 4 : 2);
	if (rt->full) {
		lua_pushstring(L, name);
		lua_setfield(L, -2, "name");
		lua_pushinteger(L, r->qtype);
		lua_setfield(L, -2, "qtype");
		lua_pushinteger(L, rc);
		lua_setfield(L, -2, "rcode");
		lua_pushinteger(L, r->usec);
		lua_setfield(L, -2, "usec");
	} else {
		lua_pushstring(L, name);
		lua_setfield(L, -2, "qname");
		lua_pushfstring(L, "%d", (int)rc);
		lua_setfield(L, -2, "rcode");
	}
	lua_rawseti(L, -2, ++rt->n);
}

static int
l_get_resp_ring(lua_State *L)
{
	struct ring_table rt = { .L = L, .rcode = -1 };

	if (!lua_isnoneornil(L, 1)) {
		lua_Integer v = dlb_lua_arg_int(L, 1, "getRespRing", LUA_MININTEGER, LUA_MAXINTEGER);

		rt.rcode = v < 0 || v > 15 ? 0x10000 : (int)v;
	}
	lua_newtable(L);
	if (dlb_lua_conf_live(L))
		dlb_rings_visit_all(true, ring_table_visit, &rt);
	return 1;
}

static int
l_get_response_ring(lua_State *L)
{
	struct ring_table rt = { .L = L, .full = true, .rcode = -1 };

	lua_newtable(L);
	if (dlb_lua_conf_live(L))
		dlb_rings_visit_all(true, ring_table_visit, &rt);
	return 1;
}

static const luaL_Reg rings_funcs[] = {
	{ "setRingBuffersSize", l_set_ring_buffers_size },
	{ "setRingBuffersLockRetries", l_set_ring_buffers_lock_retries },
	{ "setRingBuffersOptions", l_set_ring_buffers_options },
	{ "topQueries", l_top_queries },
	{ "getTopQueries", l_get_top_queries },
	{ "topClients", l_top_clients },
	{ "topResponses", l_top_responses },
	{ "getTopResponses", l_get_top_responses },
	{ "topSlow", l_top_slow },
	{ "getSlowResponses", l_get_slow_responses },
	{ "topTimeouts", l_top_timeouts },
	{ "topBandwidth", l_top_bandwidth },
	{ "getTopBandwidth", l_get_top_bandwidth },
	{ "grepq", l_grepq },
	{ "showResponseLatency", l_show_response_latency },
	{ "getRespRing", l_get_resp_ring },
	{ "getResponseRing", l_get_response_ring },
	{ NULL, NULL },
};

void
dlb_lua_rings_register(lua_State *L)
{
	lua_pushglobaltable(L);
	luaL_setfuncs(L, rings_funcs, 0);
	lua_pop(L, 1);
}
