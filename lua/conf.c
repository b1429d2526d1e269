/*
 * conf.c - the dnsdist-compatible Lua configuration: listeners, ACL,
 * servers, pools, policies, packet caches, settings and constant tables.
 *
 * Every binding is a `static int l_<name>(lua_State *L)` listed in
 * conf_funcs[] below (Server, ServerPool, ServerPolicy and PacketCache
 * methods in their own metatables). Bindings validate all their arguments before they touch
 * struct dlb_config, so a Lua error (a longjmp) never leaves it half-changed
 * and never leaks: newServer() parses into a scratch userdata and only copies
 * into a malloc'ed backend once nothing can fail any more.
 *
 * Errors are raised with luaL_error, which prefixes the caller's
 * "chunk:line:", so users see "/etc/dnslb/dnslb.conf:12: newServer: ...".
 *
 * Phases: during DLB_LUA_PHASE_RUNNING (the console) the settings dnsdist
 * calls config-time only raise "<name> cannot be altered at runtime".
 * Worker states (lua/worker.c) replay the recorded config chunks in
 * DLB_LUA_PHASE_WORKER (silent, against a throwaway config), then run rules
 * in DLB_LUA_PHASE_RULES; what differs for them is marked "worker states"
 * below and gathered at the end of this file.
 *
 * Thread: main only. Ownership: struct dlb_lua_conf borrows the config; Lua
 * userdata for servers hold {pointer, index, uuid} and are re-validated
 * against the config on every use, so one kept after rmServer() raises an
 * error instead of touching freed memory. PacketCache userdata hold the
 * struct dlb_cache pointer itself: caches live in cfg->caches until
 * dlb_config_free(), and each cache has exactly one Lua object (kept in a
 * registry table), so getCache() returns the object newPacketCache() did.
 */
#include "lua/conf.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <unistd.h>
#include <lauxlib.h>
#include <limits.h>
#include <lua.h>
#include <lualib.h>
#include <math.h>
#include <net/if.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <regex.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "dnslb/core/cache.h"
#include "dnslb/core/config.h"
#include "dnslb/core/doh_cfg.h"
#include "dnslb/core/tls.h"
#include "dnslb/core/daemon.h"
#include "dnslb/upstream/health.h"
#include "dnslb/core/log.h"
#include "dnslb/core/netmask.h"
#include "dnslb/core/rcu.h"
#include "dnslb/runtime.h"
#include "dnslb/core/wire.h"
#include "lua/abuse_lua.h"
#include "lua/args.h"
#include "lua/compat_lua.h"
#include "lua/console_lua.h"
#include "lua/dynblock_lua.h"
#include "lua/explain.h"
#include "lua/kvstore_lua.h"
#include "lua/fleet_lua.h"
#include "lua/globals_lua.h"
#include "lua/objects.h"
#include "lua/redis_lua.h"
#include "lua/rings_lua.h"
#include "lua/rules_lua.h"
#include "lua/stats_lua.h"
#include "lua/web_lua.h"
#include "lua/worker.h"

#ifndef DLB_VERSION
#define DLB_VERSION "unknown"
#endif

#define MT_SERVER	"DownstreamState"
#define MT_POOL		"ServerPool"
#define MT_POLICY	"ServerPolicy"
#define MT_CACHE	"PacketCache"
#define MT_DIR		"dnslb.dir"

struct dlb_lua_conf {
	lua_State *L;
	struct dlb_config *cfg;		/* borrowed */
	enum dlb_lua_phase phase;
	bool including;			/* inside includeDirectory() */
	struct dlb_rcu_thread *rt;	/* borrowed: main thread's record, for cache methods */
	char *files[256];		/* every file evaluated, to undo Lua's shortening of names */
	int nfiles;
	/* worker states (lua/worker.c) */
	struct conf_chunk *chunks;	/* CONFIG/CHECK: what was evaluated, for replays */
	int nchunks;
	unsigned long serial;		/* unique per dlb_lua_conf of the process */
	unsigned long origin;		/* serial of the config state this one evaluates */
	size_t lua_mem_limit;		/* setLuaMemoryLimit, bytes; 0 = none */
	uint64_t lua_insn_limit;	/* setLuaInstructionLimit, per call; 0 = none */
	const struct dlb_reload_plan *plan;	/* borrowed, until the rebind: a reload's map
						 * of servers and caches (NULL: same positions) */
};

/* One evaluated chunk: a file, or a string with its chunk name. */
struct conf_chunk {
	char *path;			/* NULL for a string */
	char *code;
	char *chunkname;
};

static void
remember_file(struct dlb_lua_conf *lc, const char *path)
{
	char *dup;

	if (lc->nfiles == (int)(sizeof(lc->files) / sizeof(lc->files[0])))
		return;
	dup = strdup(path);
	if (dup != NULL)
		lc->files[lc->nfiles++] = dup;
}

/* A Server object: re-validated against cfg->backends on every use. */
struct server_ref {
	struct dlb_backend *be;
	int index;
	char uuid[40];
};

struct pool_ref {
	char name[64];
};

struct policy_ref {
	int policy;			/* enum dlb_policy */
};

struct cache_ref {
	struct dlb_cache *c;		/* owned by cfg->caches */
};

/* the registry key of the struct dlb_lua_conf pointer */
static const char conf_key = 'c';
/* the registry key of the table {lightuserdata cache -> its PacketCache object} */
static const char caches_key = 'p';
/* worker states: the registry keys of the weak set of the Server objects a
 * replay made, and of the real print() while a replay runs */
static const char servers_key = 's';
static const char print_key = 'r';

/* ---- constants ---------------------------------------------------------- */

static const struct dlb_named sections[] = {
	{ "Question", 0 }, { "Answer", 1 }, { "Authority", 2 }, { "Additional", 3 },
	{ NULL, 0 },
};

/*
 * dnsdist 1.7's DNSAction::Action order; SpoofPacket (1.8) and SetTag (1.9)
 * appended at the numbers later versions give them.
 */
static const struct dlb_named actions[] = {
	{ "Drop", 0 }, { "Nxdomain", 1 }, { "Refused", 2 }, { "Spoof", 3 }, { "Allow", 4 },
	{ "HeaderModify", 5 }, { "Pool", 6 }, { "Delay", 7 }, { "Truncate", 8 },
	{ "ServFail", 9 }, { "None", 10 }, { "NoOp", 11 }, { "NoRecurse", 12 },
	{ "SpoofRaw", 13 }, { "SpoofPacket", 14 }, { "SetTag", 15 },
	{ NULL, 0 },
};

/* dnsdist 1.7's DNSResponseAction::Action (Truncate was inserted before None later) */
static const struct dlb_named response_actions[] = {
	{ "Allow", 0 }, { "Delay", 1 }, { "Drop", 2 }, { "HeaderModify", 3 },
	{ "ServFail", 4 }, { "None", 5 },
	{ NULL, 0 },
};

static const struct dlb_named edns_options[] = {
	{ "NSID", 3 }, { "DAU", 5 }, { "DHU", 6 }, { "N3U", 7 }, { "ECS", 8 },
	{ "EXPIRE", 9 }, { "COOKIE", 10 }, { "TCPKEEPALIVE", 11 }, { "PADDING", 12 },
	{ "CHAIN", 13 }, { "KEYTAG", 14 },
	{ NULL, 0 },
};

static const struct {
	const char *name;
	const struct dlb_named *values;
} constant_tables[] = {
	{ "DNSQType", dlb_qtype_names },
	{ "DNSClass", dlb_lua_qclasses },
	{ "DNSRCode", dlb_lua_rcodes },
	{ "DNSOpcode", dlb_lua_opcodes },
	{ "DNSSection", sections },
	{ "DNSAction", actions },
	{ "DNSResponseAction", response_actions },
	{ "EDNSOptionCode", edns_options },
};

static const struct {
	const char *name;
	enum dlb_policy policy;
} policies[] = {
	{ "leastOutstanding", DLB_POLICY_LEAST_OUTSTANDING },
	{ "firstAvailable", DLB_POLICY_FIRST_AVAILABLE },
	{ "roundrobin", DLB_POLICY_ROUNDROBIN },
	{ "wrandom", DLB_POLICY_WRANDOM },
	{ "whashed", DLB_POLICY_WHASHED },
	{ "chashed", DLB_POLICY_CHASHED },
};

/* ---- helpers ------------------------------------------------------------ */

static struct dlb_lua_conf *
conf_get(lua_State *L)
{
	struct dlb_lua_conf *lc;

	lua_rawgetp(L, LUA_REGISTRYINDEX, &conf_key);
	lc = lua_touserdata(L, -1);
	lua_pop(L, 1);
	return lc;
}

/*
 * A replay in a worker state logs nothing: the config state did already.
 * --check-config prints what dnsdist prints there: warnings and errors, but
 * not the informational lines ("Added downstream server ...").
 */
#define conf_log(L, lvl, ...) do {					\
	enum dlb_lua_phase p_ = conf_get(L)->phase;			\
									\
	if (!dlb_lua_phase_throwaway(p_) &&				\
	    ((lvl) != DLB_LOG_INFO || p_ != DLB_LUA_PHASE_CHECK))	\
		dlb_log((lvl), __VA_ARGS__);				\
} while (0)

/* Worker states: a method that would change the configuration, from a rule. */
static void
not_from_rules(lua_State *L, const char *fn)
{
	if (conf_get(L)->phase == DLB_LUA_PHASE_RULES)
		luaL_error(L, "%s cannot be called from a rule", fn);
}

/* Raise dnsdist's error for a config-time-only setting called from the console. */
static void
config_time_only(lua_State *L, const char *fn)
{
	if (conf_get(L)->phase == DLB_LUA_PHASE_RUNNING)
		luaL_error(L, "%s cannot be altered at runtime", fn);
}

/* ---- listeners ---------------------------------------------------------- */

static const char *const frontend_opts[] = {
	"reusePort", "tcpFastOpenQueueSize", "maxInFlight", "maxConcurrentTCPConnections",
	"cpus", "doTCP", "interface", "tcpListenQueueSize", NULL,
};

/*
 * Parse a listener's address (argument 1, @port by default) and its options
 * (the table at @t, if any; @known: the keys it may have) into @fe.
 */
static void
parse_frontend_at(lua_State *L, const char *fn, struct dlb_frontend_cfg *fe, int t, int port,
		  const char *const *known)
{
	const char *addr = dlb_lua_arg_string(L, 1, fn), *s;

	memset(fe, 0, sizeof(*fe));
	if (dlb_sockaddr_parse(addr, port, &fe->addr, &fe->addrlen) != 0)
		luaL_error(L, "%s: invalid address '%s'", fn, addr);
	dlb_sockaddr_format((const struct sockaddr *)&fe->addr, fe->text, sizeof(fe->text));

	if (lua_type(L, t) == LUA_TTABLE) {
		dlb_lua_warn_unknown_keys(L, t, fn, "option", known);
		dlb_lua_opt_bool(L, t, fn, "reusePort", &fe->reuseport);
		dlb_lua_opt_int(L, t, fn, "tcpFastOpenQueueSize", 0, INT_MAX,
				&fe->tcp_fastopen_qsize);
		dlb_lua_opt_int(L, t, fn, "tcpListenQueueSize", 0, INT_MAX, &fe->tcp_listen_qsize);
		if ((s = dlb_lua_opt_string_push(L, t, fn, "interface")) != NULL) {
			if (strlen(s) >= sizeof(fe->iface) || strpbrk(s, "/ \t") != NULL)
				luaL_error(L, "%s: invalid interface '%s'", fn, s);
			memcpy(fe->iface, s, strlen(s) + 1);
			lua_pop(L, 1);
		}
		dlb_lua_opt_int(L, t, fn, "maxInFlight", 0, 65535, &fe->max_in_flight);
		dlb_lua_opt_int(L, t, fn, "maxConcurrentTCPConnections", 0, INT_MAX,
				&fe->max_concurrent_tcp);
		if (lua_getfield(L, t, "cpus") != LUA_TNIL) {
			lua_Integer n;

			if (lua_type(L, -1) != LUA_TTABLE)
				luaL_error(L, "%s: 'cpus' must be a table of CPU numbers", fn);
			n = (lua_Integer)lua_rawlen(L, -1);
			if (n > DLB_MAX_CPUS)
				luaL_error(L, "%s: at most %d CPUs in 'cpus'", fn, DLB_MAX_CPUS);
			for (lua_Integer i = 1; i <= n; i++) {
				lua_Integer cpu = 0;

				lua_rawgeti(L, -1, i);
				if (!dlb_lua_to_integer(L, -1, &cpu) || cpu < 0 ||
				    cpu >= CPU_SETSIZE)
					luaL_error(L, "%s: invalid CPU number in 'cpus'", fn);
				fe->cpus[fe->ncpus++] = (int)cpu;
				lua_pop(L, 1);
			}
		}
		lua_pop(L, 1);
	} else if (!lua_isnoneornil(L, t)) {
		/* dnsdist 1.7 refuses the pre-1.4 doTCP boolean here too */
		luaL_error(L, "%s: argument #%d must be a table of options", fn, t);
	}
}

/* setLocal/addLocal: address at 1, options at 2. */
static void
parse_frontend(lua_State *L, const char *fn, struct dlb_frontend_cfg *fe)
{
	parse_frontend_at(L, fn, fe, 2, DLB_DEFAULT_PORT, frontend_opts);
}

static int
l_set_local(lua_State *L)
{
	struct dlb_config *cfg = conf_get(L)->cfg;
	struct dlb_frontend_cfg fe;

	config_time_only(L, "setLocal");
	parse_frontend(L, "setLocal", &fe);
	cfg->nfrontends = 0;
	if (dlb_config_add_frontend(cfg, &fe) != 0)
		return luaL_error(L, "setLocal: cannot add listener %s", fe.text);
	return 0;
}

static int
l_add_local(lua_State *L)
{
	struct dlb_config *cfg = conf_get(L)->cfg;
	struct dlb_frontend_cfg fe;

	config_time_only(L, "addLocal");
	parse_frontend(L, "addLocal", &fe);
	if (dlb_config_add_frontend(cfg, &fe) != 0)
		return luaL_error(L, "addLocal: too many listeners (at most %d)",
				  DLB_MAX_FRONTENDS);
	return 0;
}

/* ---- DNS over TLS listeners (addTLSLocal) -------------------------------- */

#define DLB_DOT_PORT	853

static const char *const tls_local_opts[] = {
	"reusePort", "tcpFastOpenQueueSize", "maxInFlight", "maxConcurrentTCPConnections",
	"cpus", "interface", "tcpListenQueueSize",
	"provider", "ciphers", "ciphersTLS13", "minTLSVersion", "ticketKeyFile",
	"ticketsKeysRotationDelay", "numberOfTicketsKeys", "sessionTickets",
	"numberOfStoredSessions", "sessionTimeout", "ocspResponses", "preferServerCiphers",
	"keyLogFile", "releaseBuffers", "enableRenegotiation", "tlsAsyncMode", NULL,
};

/*
 * A string or a table of strings at @idx into @out (at most @max; they stay
 * valid while the value at @idx stays on the stack). @what names them in
 * errors. With @must_exist, a file that cannot be read is an error here,
 * with its name.
 */
static size_t
tls_files(lua_State *L, const char *fn, int idx, const char *what, const char **out, size_t max,
	  bool must_exist)
{
	size_t n = 0;

	if (lua_type(L, idx) == LUA_TSTRING) {
		out[n++] = lua_tostring(L, idx);
	} else if (lua_type(L, idx) == LUA_TTABLE) {
		lua_Integer len = (lua_Integer)lua_rawlen(L, idx);

		if (len < 1 || (size_t)len > max)
			luaL_error(L, "%s: between 1 and %d %s", fn, (int)max, what);
		for (lua_Integer i = 1; i <= len; i++) {
			lua_rawgeti(L, idx, i);
			if (lua_type(L, -1) != LUA_TSTRING)
				luaL_error(L, "%s: the %s must be strings", fn, what);
			out[n++] = lua_tostring(L, -1);
			lua_pop(L, 1);	/* the table keeps it */
		}
	} else {
		luaL_error(L, "%s: the %s must be a string or a table of strings", fn, what);
	}
	for (size_t i = 0; must_exist && i < n; i++)
		if (access(out[i], R_OK) != 0)
			luaL_error(L, "%s: unable to read the %s file '%s': %s", fn, what, out[i],
				   strerror(errno));
	return n;
}

/* The TLS options of addTLSLocal's table @t into @o; the strings stay on the stack. */
static void
tls_local_options(lua_State *L, const char *fn, int t, struct dlb_tls_server_opts *o,
		  bool must_exist)
{
	const char *s;
	bool b;
	int n;

	if (lua_type(L, t) != LUA_TTABLE)
		return;
	if ((s = dlb_lua_opt_string_push(L, t, fn, "provider")) != NULL &&
	    strcmp(s, "openssl") != 0)
		luaL_error(L, "%s: the TLS provider '%s' is not supported by dnslb (use \"openssl\")",
			   fn, s);
	o->ciphers = dlb_lua_opt_string_push(L, t, fn, "ciphers");
	o->ciphers13 = dlb_lua_opt_string_push(L, t, fn, "ciphersTLS13");
	if ((s = dlb_lua_opt_string_push(L, t, fn, "minTLSVersion")) != NULL &&
	    (o->min_version = dlb_tls_version_parse(s)) < 0)
		luaL_error(L, "%s: unknown minTLSVersion '%s' (tls1.0, tls1.1, tls1.2 or tls1.3)", fn, s);
	o->ticket_key_file = dlb_lua_opt_string_push(L, t, fn, "ticketKeyFile");
	if (o->ticket_key_file != NULL && must_exist && access(o->ticket_key_file, R_OK) != 0)
		luaL_error(L, "%s: unable to read the tickets key file '%s': %s", fn,
			   o->ticket_key_file, strerror(errno));
	/* without a key file, keys rotate every 12 hours by default; with one, only on request */
	o->ticket_rotation = o->ticket_key_file != NULL ? 0 : 43200;
	if (dlb_lua_opt_int(L, t, fn, "ticketsKeysRotationDelay", 0, INT_MAX, &n))
		o->ticket_rotation = (unsigned)n;
	if (dlb_lua_opt_int(L, t, fn, "numberOfTicketsKeys", 0, 1024, &n))
		o->ticket_keys = (unsigned)n;
	if (dlb_lua_opt_bool(L, t, fn, "sessionTickets", &b))
		o->tickets = b;
	if (dlb_lua_opt_int(L, t, fn, "numberOfStoredSessions", 0, INT_MAX, &n))
		o->stored_sessions = (unsigned)n;
	if (dlb_lua_opt_int(L, t, fn, "sessionTimeout", 0, INT_MAX, &n))
		o->session_timeout = (unsigned)n;
	if (dlb_lua_opt_bool(L, t, fn, "preferServerCiphers", &b))
		o->prefer_server_ciphers = b;
	if (dlb_lua_opt_bool(L, t, fn, "releaseBuffers", &b))
		o->release_buffers = b;
	if (dlb_lua_opt_bool(L, t, fn, "enableRenegotiation", &b))
		o->renegotiation = b;
	(void)dlb_lua_opt_bool(L, t, fn, "tlsAsyncMode", &b);	/* accepted: no async engine */
	o->keylog_file = dlb_lua_opt_string_push(L, t, fn, "keyLogFile");
	if (lua_getfield(L, t, "ocspResponses") != LUA_TNIL)
		o->nocsp = tls_files(L, fn, lua_gettop(L), "OCSP response", o->ocsp,
				     DLB_TLS_MAX_CERTS, must_exist);
	/* the table stays on the stack: it anchors the strings */
}

/*
 * addTLSLocal(addr, certFile(s), keyFile(s) [, options]): a DNS over TLS
 * listener, TCP only, default port 853 (docs/tls.md). Its certificates and
 * keys are loaded and checked here, --check-config included.
 */
static int
l_add_tls_local(lua_State *L)
{
	struct dlb_lua_conf *lc = conf_get(L);
	struct dlb_frontend_cfg fe;
	struct dlb_tls_server_opts o;
	bool replay = lc->phase == DLB_LUA_PHASE_WORKER;
	size_t nkeys;
	char err[512];
	int rc;

	config_time_only(L, "addTLSLocal");
	parse_frontend_at(L, "addTLSLocal", &fe, 4, DLB_DOT_PORT, tls_local_opts);
	dlb_tls_server_opts_default(&o);
	o.ncerts = tls_files(L, "addTLSLocal", 2, "certificate", o.certs, DLB_TLS_MAX_CERTS, !replay);
	nkeys = tls_files(L, "addTLSLocal", 3, "key", o.keys, DLB_TLS_MAX_CERTS, !replay);
	if (nkeys != o.ncerts)
		return luaL_error(L, "addTLSLocal: %d certificates but %d keys (one key per "
				  "certificate, in the same order)", (int)o.ncerts, (int)nkeys);
	tls_local_options(L, "addTLSLocal", 4, &o, !replay);
	if (o.nocsp > o.ncerts)
		return luaL_error(L, "addTLSLocal: more OCSP responses than certificates");
	if (replay)
		return 0;	/* a worker's replay: the config state has the listener */
	fe.tls = dlb_tls_server_new(&o, err, sizeof(err));
	if (fe.tls == NULL)
		return luaL_error(L, "addTLSLocal: %s", err);
	rc = dlb_config_add_frontend(lc->cfg, &fe);
	if (rc != 0) {
		dlb_tls_server_free(fe.tls);
		if (rc == -2)
			return luaL_error(L, "addTLSLocal: the address %s is already a listener's",
					  fe.text);
		return luaL_error(L, "addTLSLocal: too many listeners (at most %d)", DLB_MAX_FRONTENDS);
	}
	return 0;
}

/* ---- DNS over HTTPS listeners (addDOHLocal) ------------------------------ */

#define DLB_DOH_PORT	443
/* ALPN offered by a DoH listener over TLS: HTTP/2, then HTTP/1.1 */
static const char doh_alpn[] = "\x02h2\x08http/1.1";

static const char *const doh_local_opts[] = {
	"reusePort", "tcpFastOpenQueueSize", "interface", "cpus", "tcpListenQueueSize",
	"provider", "ciphers", "ciphersTLS13", "minTLSVersion", "ticketKeyFile",
	"ticketsKeysRotationDelay", "numberOfTicketsKeys", "sessionTickets",
	"numberOfStoredSessions", "sessionTimeout", "ocspResponses", "preferServerCiphers",
	"keyLogFile", "releaseBuffers", "enableRenegotiation", "tlsAsyncMode",
	"idleTimeout", "serverTokens", "customResponseHeaders", "sendCacheControlHeaders",
	"trustForwardedForHeader", "exactPathMatching", "internalPipeBufferSize", NULL,
};

/* addDOHLocal's URLs (argument 4: a string, a table of strings, or nil) into @dc. */
static void
doh_local_urls(lua_State *L, int idx, struct dlb_doh_cfg *dc)
{
	const char *urls[DLB_DOH_MAX_URLS];
	size_t n = 0;

	if (lua_isnoneornil(L, idx)) {
		urls[n++] = "/dns-query";
	} else {
		n = tls_files(L, "addDOHLocal", idx, "URL", urls, DLB_DOH_MAX_URLS, false);
	}
	for (size_t i = 0; i < n; i++)
		if (dlb_doh_cfg_add_url(dc, urls[i]) != 0)
			luaL_error(L, "addDOHLocal: invalid URL path '%s' (it must begin with '/')",
				   urls[i]);
}

static int
header_name_cmp(const void *a, const void *b)
{
	return strcmp(((const struct dlb_doh_header *)a)->name, ((const struct dlb_doh_header *)b)->name);
}

/* The DoH options of addDOHLocal's table @t into @dc. */
static void
doh_local_options(lua_State *L, int t, struct dlb_doh_cfg *dc)
{
	const char *fn = "addDOHLocal", *s;
	int n;

	if (lua_type(L, t) != LUA_TTABLE)
		return;
	if (dlb_lua_opt_int(L, t, fn, "idleTimeout", 1, INT_MAX, &n))
		dc->idle_timeout = (unsigned)n;
	if ((s = dlb_lua_opt_string_push(L, t, fn, "serverTokens")) != NULL) {
		char *v = strdup(s);

		if (v == NULL)
			luaL_error(L, "%s: out of memory", fn);
		free(dc->server_tokens);
		dc->server_tokens = v;
		lua_pop(L, 1);
	}
	(void)dlb_lua_opt_bool(L, t, fn, "sendCacheControlHeaders", &dc->cache_control);
	(void)dlb_lua_opt_bool(L, t, fn, "trustForwardedForHeader", &dc->trust_xff);
	(void)dlb_lua_opt_bool(L, t, fn, "exactPathMatching", &dc->paths.exact);
	/* dnsdist's pipe to its DoH thread: dnslb's workers answer DoH themselves */
	(void)dlb_lua_opt_int(L, t, fn, "internalPipeBufferSize", 0, INT_MAX, &n);
	if (lua_getfield(L, t, "customResponseHeaders") != LUA_TNIL) {
		struct dlb_doh_header h[DLB_DOH_MAX_CUSTOM];
		size_t nh = 0;

		if (lua_type(L, -1) != LUA_TTABLE)
			luaL_error(L, "%s: 'customResponseHeaders' must be a table of name = value", fn);
		lua_pushnil(L);
		while (lua_next(L, -2) != 0) {
			if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
				luaL_error(L, "%s: 'customResponseHeaders' must map names to strings", fn);
			if (nh >= DLB_DOH_MAX_CUSTOM)
				luaL_error(L, "%s: at most %d customResponseHeaders", fn,
					   DLB_DOH_MAX_CUSTOM);
			/* the table keeps the strings */
			h[nh].name = (char *)lua_tostring(L, -2);
			h[nh++].value = (char *)lua_tostring(L, -1);
			lua_pop(L, 1);
		}
		/* sent in the order of the names as written (dnsdist reads them into a std::map) */
		qsort(h, nh, sizeof(h[0]), header_name_cmp);
		for (size_t i = 0; i < nh; i++)
			if (dlb_doh_cfg_add_header(dc, h[i].name, h[i].value) != 0)
				luaL_error(L, "%s: out of memory", fn);
	}
	lua_pop(L, 1);
}

/* Free @dc when a Lua error unwinds addDOHLocal (a to-be-closed value). */
static int
doh_cfg_gc(lua_State *L)
{
	struct dlb_doh_cfg **p = lua_touserdata(L, 1);

	if (*p != NULL) {
		dlb_doh_cfg_free(*p);
		*p = NULL;
	}
	return 0;
}

/*
 * addDOHLocal(addr [, certFile(s) [, keyFile(s) [, urls [, options]]]]): a DNS
 * over HTTPS listener, TCP only, default port 443 (docs/doh.md). Without a
 * certificate it serves plain HTTP, for a TLS-terminating proxy in front.
 */
static int
l_add_doh_local(lua_State *L)
{
	struct dlb_lua_conf *lc = conf_get(L);
	struct dlb_frontend_cfg fe;
	struct dlb_tls_server_opts o;
	struct dlb_doh_cfg **dcp;
	bool replay = lc->phase == DLB_LUA_PHASE_WORKER;
	bool tls = !lua_isnoneornil(L, 2);
	char err[512];
	int rc;

	config_time_only(L, "addDOHLocal");
	lua_settop(L, 5);	/* the arguments keep their places under what is pushed next */
	parse_frontend_at(L, "addDOHLocal", &fe, 5, DLB_DOH_PORT, doh_local_opts);
	dcp = lua_newuserdatauv(L, sizeof(*dcp), 0);
	*dcp = NULL;
	lua_newtable(L);
	lua_pushcfunction(L, doh_cfg_gc);
	lua_setfield(L, -2, "__close");
	lua_setmetatable(L, -2);
	lua_toclose(L, -1);
	*dcp = dlb_doh_cfg_new();
	if (*dcp == NULL)
		return luaL_error(L, "addDOHLocal: out of memory");
	doh_local_urls(L, 4, *dcp);
	doh_local_options(L, 5, *dcp);
	dlb_tls_server_opts_default(&o);
	if (tls) {
		size_t nkeys;

		o.ncerts = tls_files(L, "addDOHLocal", 2, "certificate", o.certs, DLB_TLS_MAX_CERTS,
				     !replay);
		nkeys = lua_isnoneornil(L, 3) ? 0 : tls_files(L, "addDOHLocal", 3, "key", o.keys,
							      DLB_TLS_MAX_CERTS, !replay);
		if (nkeys != o.ncerts)
			return luaL_error(L, "addDOHLocal: %d certificates but %d keys (one key per "
					  "certificate, in the same order)", (int)o.ncerts, (int)nkeys);
		tls_local_options(L, "addDOHLocal", 5, &o, !replay);
		if (o.nocsp > o.ncerts)
			return luaL_error(L, "addDOHLocal: more OCSP responses than certificates");
		o.alpn = doh_alpn;
		o.alpn_len = sizeof(doh_alpn) - 1;
	} else if (!lua_isnoneornil(L, 3)) {
		return luaL_error(L, "addDOHLocal: a key without a certificate");
	}
	if (replay)
		return 0;	/* a worker's replay: the config state has the listener */
	if (!tls)
		conf_log(L, DLB_LOG_WARN, "No certificate provided for DoH endpoint %s, running in "
			 "DNS over HTTP mode instead of DNS over HTTPS", fe.text);
	if (tls) {
		fe.tls = dlb_tls_server_new(&o, err, sizeof(err));
		if (fe.tls == NULL)
			return luaL_error(L, "addDOHLocal: %s", err);
	}
	fe.doh = *dcp;
	rc = dlb_config_add_frontend(lc->cfg, &fe);
	if (rc != 0) {
		dlb_tls_server_free(fe.tls);
		if (rc == -2)
			return luaL_error(L, "addDOHLocal: the address %s is already a listener's",
					  fe.text);
		return luaL_error(L, "addDOHLocal: too many listeners (at most %d)", DLB_MAX_FRONTENDS);
	}
	*dcp = NULL;	/* the config has it */
	return 0;
}

/* ---- DoH frontends at runtime (getDOHFrontend, newDOHResponseMapEntry) ------------ */

#define MT_DOH_FRONTEND "dnslb.DOHFrontend"

/* shared with TLSFrontend (below) */
static int tls_reload_certificates(lua_State *L, struct dlb_tls_server *t, const char *text);
static int tls_rotate_tickets_key(lua_State *L, struct dlb_tls_server *t);
static int tls_load_tickets_keys(lua_State *L, struct dlb_tls_server *t);
#define MT_DOH_MAP_ENTRY "dnslb.DOHResponseMapEntry"

/* The @n-th DNS over HTTPS listener (0-based, in configuration order), or NULL. */
static struct dlb_frontend_cfg *
doh_frontend(struct dlb_config *cfg, lua_Integer n)
{
	for (int i = 0; i < cfg->nfrontends; i++)
		if (cfg->frontends[i].doh != NULL && n-- == 0)
			return &cfg->frontends[i];
	return NULL;
}

static int
doh_frontend_count(const struct dlb_config *cfg)
{
	int n = 0;

	for (int i = 0; i < cfg->nfrontends; i++)
		n += cfg->frontends[i].doh != NULL;
	return n;
}

/* getDOHFrontendCount(): how many DNS over HTTPS listeners there are. */
static int
l_get_doh_frontend_count(lua_State *L)
{
	lua_pushinteger(L, doh_frontend_count(conf_get(L)->cfg));
	return 1;
}

/* getDOHFrontend(n): the object, or nil with a message. */
static int
l_get_doh_frontend(lua_State *L)
{
	lua_Integer n = luaL_checkinteger(L, 1), *ud;

	if (n < 0 || doh_frontend(conf_get(L)->cfg, n) == NULL) {
		char msg[128];

		snprintf(msg, sizeof(msg), "Error: trying to get DOH frontend with index %lld but we "
			 "only have %d frontend(s)", (long long)n, doh_frontend_count(conf_get(L)->cfg));
		conf_log(L, DLB_LOG_ERR, "%s", msg);
		dlb_lua_print(L, msg);
		lua_pushnil(L);
		return 1;
	}
	ud = lua_newuserdatauv(L, sizeof(*ud), 0);
	*ud = n;
	luaL_setmetatable(L, MT_DOH_FRONTEND);
	return 1;
}

static struct dlb_frontend_cfg *
check_doh_frontend(lua_State *L)
{
	lua_Integer *ud = luaL_checkudata(L, 1, MT_DOH_FRONTEND);
	struct dlb_frontend_cfg *fe = doh_frontend(conf_get(L)->cfg, *ud);

	if (fe == NULL)
		luaL_error(L, "this DOH frontend no longer exists");
	return fe;
}

static int
l_doh_reload_certificates(lua_State *L)
{
	struct dlb_frontend_cfg *fe = check_doh_frontend(L);

	return tls_reload_certificates(L, fe->tls, fe->text);
}

static int
l_doh_rotate_tickets_key(lua_State *L)
{
	return tls_rotate_tickets_key(L, check_doh_frontend(L)->tls);
}

static int
l_doh_load_tickets_keys(lua_State *L)
{
	return tls_load_tickets_keys(L, check_doh_frontend(L)->tls);
}

/* A response map entry (newDOHResponseMapEntry): kept as given until setResponsesMap. */
struct doh_map_entry_ud {
	char *regex;
	int status;
	char *content;
	size_t content_len;
	struct dlb_doh_header *headers;	/* NULL: the frontend's customResponseHeaders */
	size_t nheaders;
};

static int
doh_map_entry_gc(lua_State *L)
{
	struct doh_map_entry_ud *e = luaL_checkudata(L, 1, MT_DOH_MAP_ENTRY);

	free(e->regex);
	free(e->content);
	for (size_t i = 0; i < e->nheaders; i++) {
		free(e->headers[i].name);
		free(e->headers[i].value);
	}
	free(e->headers);
	memset(e, 0, sizeof(*e));
	return 0;
}

/* newDOHResponseMapEntry(regex, status, content [, headers]) */
static int
l_new_doh_response_map_entry(lua_State *L)
{
	const char *regex = luaL_checkstring(L, 1);
	lua_Integer status = luaL_checkinteger(L, 2);
	size_t clen;
	const char *content = luaL_checklstring(L, 3, &clen);
	struct doh_map_entry_ud *e;
	regex_t re;

	lua_settop(L, 4);	/* the headers stay at 4 under the new object */
	if (status < 100 || status > 599)
		return luaL_error(L, "newDOHResponseMapEntry: invalid HTTP status code %d", (int)status);
	if (regcomp(&re, regex, REG_ICASE | REG_NOSUB | REG_EXTENDED) != 0)
		return luaL_error(L, "newDOHResponseMapEntry: invalid regular expression '%s'", regex);
	regfree(&re);
	e = lua_newuserdatauv(L, sizeof(*e), 0);
	memset(e, 0, sizeof(*e));
	luaL_setmetatable(L, MT_DOH_MAP_ENTRY);
	e->regex = strdup(regex);
	e->content = malloc(clen + 1);
	if (e->regex == NULL || e->content == NULL)
		return luaL_error(L, "newDOHResponseMapEntry: out of memory");
	memcpy(e->content, content, clen);
	e->content_len = clen;
	e->status = (int)status;
	if (lua_type(L, 4) == LUA_TTABLE) {
		struct dlb_doh_header h[DLB_DOH_MAX_CUSTOM];
		size_t nh = 0;

		lua_pushnil(L);
		while (lua_next(L, 4) != 0) {
			if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
				return luaL_error(L, "newDOHResponseMapEntry: the headers must map names "
						  "to strings");
			if (nh >= DLB_DOH_MAX_CUSTOM)
				return luaL_error(L, "newDOHResponseMapEntry: at most %d headers",
						  DLB_DOH_MAX_CUSTOM);
			h[nh].name = (char *)lua_tostring(L, -2);
			h[nh++].value = (char *)lua_tostring(L, -1);
			lua_pop(L, 1);
		}
		qsort(h, nh, sizeof(h[0]), header_name_cmp);
		e->headers = calloc(nh ? nh : 1, sizeof(*e->headers));
		if (e->headers == NULL)
			return luaL_error(L, "newDOHResponseMapEntry: out of memory");
		for (size_t i = 0; i < nh; i++) {
			e->headers[i].name = strdup(h[i].name);
			e->headers[i].value = strdup(h[i].value);
			e->nheaders = i + 1;
			if (e->headers[i].name == NULL || e->headers[i].value == NULL)
				return luaL_error(L, "newDOHResponseMapEntry: out of memory");
		}
	} else if (!lua_isnoneornil(L, 4)) {
		return luaL_error(L, "newDOHResponseMapEntry: the headers must be a table");
	}
	return 1;
}

/*
 * Publish the entries of the table at stack index @idx as listener @fe's
 * response map (@fn names the caller in errors). Raises a Lua error.
 */
static void
doh_set_map(lua_State *L, struct dlb_frontend_cfg *fe, int idx, const char *fn)
{
	struct dlb_doh_map *m = calloc(1, sizeof(*m));
	char err[256];
	lua_Integer n;

	if (m == NULL)
		luaL_error(L, "%s: out of memory", fn);
	n = (lua_Integer)lua_rawlen(L, idx);
	for (lua_Integer i = 1; i <= n; i++) {
		struct doh_map_entry_ud *e;

		lua_rawgeti(L, idx, i);
		e = luaL_testudata(L, -1, MT_DOH_MAP_ENTRY);
		if (e == NULL || e->regex == NULL ||
		    dlb_doh_map_add(m, e->regex, e->status, e->content, e->content_len, e->headers,
				    e->nheaders, err, sizeof(err)) != 0) {
			dlb_doh_map_clear(m);
			free(m);
			luaL_error(L, "%s: %s", fn, e == NULL ?
				   "entries must be newDOHResponseMapEntry objects" : err);
		}
		lua_pop(L, 1);
	}
	if (dlb_doh_cfg_set_map(fe->doh, m) != 0) {
		dlb_doh_map_clear(m);
		free(m);
		luaL_error(L, "%s: out of memory", fn);
	}
}

/* getDOHFrontend(n):setResponsesMap({entries}): published at once to the workers. */
static int
l_doh_set_responses_map(lua_State *L)
{
	struct dlb_frontend_cfg *fe = check_doh_frontend(L);

	luaL_checktype(L, 2, LUA_TTABLE);
	if (conf_get(L)->phase == DLB_LUA_PHASE_WORKER)
		return 0;	/* a worker's replay: the listener has its map */
	doh_set_map(L, fe, 2, "setResponsesMap");
	return 0;
}

/*
 * setDOHResponseMapEntries({entries}): dnslb's own, the response map of
 * every DoH listener declared so far (getDOHFrontend(n):setResponsesMap
 * for each n). None declared yet is an error: the call would do nothing.
 */
static int
l_set_doh_response_map_entries(lua_State *L)
{
	struct dlb_config *cfg = conf_get(L)->cfg;

	luaL_checktype(L, 1, LUA_TTABLE);
	if (conf_get(L)->phase == DLB_LUA_PHASE_WORKER)
		return 0;	/* a worker's replay: the listeners have their maps */
	if (doh_frontend_count(cfg) == 0)
		return luaL_error(L, "setDOHResponseMapEntries: no DNS over HTTPS listener "
				  "(call it after addDOHLocal)");
	for (int i = 0; i < cfg->nfrontends; i++)
		if (cfg->frontends[i].doh != NULL)
			doh_set_map(L, &cfg->frontends[i], 1, "setDOHResponseMapEntries");
	return 0;
}

static int
l_doh_frontend_tostring(lua_State *L)
{
	lua_pushfstring(L, "DOHFrontend(%s)", check_doh_frontend(L)->text);
	return 1;
}

static const luaL_Reg doh_frontend_methods[] = {
	{ "reloadCertificates", l_doh_reload_certificates },
	{ "rotateTicketsKey", l_doh_rotate_tickets_key },
	{ "loadTicketsKeys", l_doh_load_tickets_keys },
	{ "setResponsesMap", l_doh_set_responses_map },
	{ NULL, NULL },
};

static void
register_doh_frontend(lua_State *L)
{
	luaL_newmetatable(L, MT_DOH_FRONTEND);
	lua_newtable(L);
	luaL_setfuncs(L, doh_frontend_methods, 0);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, l_doh_frontend_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pop(L, 1);
	luaL_newmetatable(L, MT_DOH_MAP_ENTRY);
	lua_pushcfunction(L, doh_map_entry_gc);
	lua_setfield(L, -2, "__gc");
	lua_pop(L, 1);
}

/* ---- TLS frontends at runtime (getTLSFrontend, getTLSContext, reloadAllCertificates) ---- */

#define MT_TLS_FRONTEND "dnslb.TLSFrontend"

/* The @n-th DNS over TLS listener (0-based, in configuration order; DoH
 * listeners are getDOHFrontend's), or NULL. */
static struct dlb_tls_server *
tls_frontend(const struct dlb_config *cfg, lua_Integer n, const char **text)
{
	for (int i = 0; i < cfg->nfrontends; i++) {
		if (cfg->frontends[i].tls == NULL || cfg->frontends[i].doh != NULL)
			continue;
		if (n-- == 0) {
			if (text != NULL)
				*text = cfg->frontends[i].text;
			return cfg->frontends[i].tls;
		}
	}
	return NULL;
}

static int
tls_frontend_count(const struct dlb_config *cfg)
{
	int n = 0;

	for (int i = 0; i < cfg->nfrontends; i++)
		n += cfg->frontends[i].tls != NULL && cfg->frontends[i].doh == NULL;
	return n;
}

/* getTLSFrontend(n) / getTLSContext(n): the object, or nil and dnsdist's message. */
static int
push_tls_frontend(lua_State *L, const char *fn)
{
	struct dlb_config *cfg = conf_get(L)->cfg;
	lua_Integer n = luaL_checkinteger(L, 1);
	lua_Integer *ud;
	char msg[160];

	if (n < 0 || tls_frontend(cfg, n, NULL) == NULL) {
		/* dnsdist 1.7.3's log line (without the "u" its format leaves after the numbers) */
		if (strcmp(fn, "getTLSContext") == 0)
			snprintf(msg, sizeof(msg), "Error: trying to get TLS context with index %lld but "
				 "we only have %d context(s)", (long long)n, tls_frontend_count(cfg));
		else
			snprintf(msg, sizeof(msg), "Error: trying to get TLS frontend with index %lld but "
				 "we only have %d frontends", (long long)n, tls_frontend_count(cfg));
		conf_log(L, DLB_LOG_ERR, "%s", msg);
		dlb_lua_print(L, msg);	/* dnsdist's console prints it too */
		lua_pushnil(L);
		return 1;
	}
	ud = lua_newuserdatauv(L, sizeof(*ud), 0);
	*ud = n;
	luaL_setmetatable(L, MT_TLS_FRONTEND);
	return 1;
}

static int
l_get_tls_frontend(lua_State *L)
{
	return push_tls_frontend(L, "getTLSFrontend");
}

static int
l_get_tls_context(lua_State *L)
{
	return push_tls_frontend(L, "getTLSContext");
}

/* The context of a TLSFrontend object at 1 (an error if it is gone). */
static struct dlb_tls_server *
check_tls_frontend(lua_State *L, const char **text)
{
	lua_Integer *ud = luaL_checkudata(L, 1, MT_TLS_FRONTEND);
	struct dlb_tls_server *t = tls_frontend(conf_get(L)->cfg, *ud, text);

	if (t == NULL)
		luaL_error(L, "this TLS frontend no longer exists");
	return t;
}

/* What a TLSFrontend and a DOHFrontend do to their context @t (NULL: a DoH
 * listener without TLS: nothing), for frontend @text. */
static int
tls_reload_certificates(lua_State *L, struct dlb_tls_server *t, const char *text)
{
	char err[512];

	if (t != NULL && dlb_tls_server_reload(t, err, sizeof(err)) != 0)
		conf_log(L, DLB_LOG_ERR, "Error reloading certificates for frontend %s: %s", text, err);
	return 0;
}

static int
tls_rotate_tickets_key(lua_State *L, struct dlb_tls_server *t)
{
	char err[256];

	if (t != NULL && dlb_tls_server_rotate_ticket_key(t, err, sizeof(err)) != 0)
		return luaL_error(L, "rotateTicketsKey: %s", err);
	return 0;
}

static int
tls_load_tickets_keys(lua_State *L, struct dlb_tls_server *t)
{
	const char *file = luaL_checkstring(L, 2);
	char err[512];

	if (t != NULL && dlb_tls_server_load_ticket_keys(t, file, err, sizeof(err)) != 0)
		return luaL_error(L, "loadTicketsKeys: %s", err);
	return 0;
}

static int
l_tls_reload_certificates(lua_State *L)
{
	const char *text = "";
	struct dlb_tls_server *t = check_tls_frontend(L, &text);

	return tls_reload_certificates(L, t, text);
}

static int
l_tls_rotate_tickets_key(lua_State *L)
{
	return tls_rotate_tickets_key(L, check_tls_frontend(L, NULL));
}

static int
l_tls_load_tickets_keys(lua_State *L)
{
	return tls_load_tickets_keys(L, check_tls_frontend(L, NULL));
}

static int
l_tls_frontend_tostring(lua_State *L)
{
	const char *text = "";

	(void)check_tls_frontend(L, &text);
	lua_pushfstring(L, "TLSFrontend(%s)", text);
	return 1;
}

/* getTLSFrontendCount(): how many DNS over TLS listeners there are. */
static int
l_get_tls_frontend_count(lua_State *L)
{
	lua_pushinteger(L, tls_frontend_count(conf_get(L)->cfg));
	return 1;
}

/* reloadAllCertificates(): every DNS over TLS and HTTPS listener's certificates and keys. */
static int
l_reload_all_certificates(lua_State *L)
{
	struct dlb_config *cfg = conf_get(L)->cfg;
	char err[512];

	for (int i = 0; i < cfg->nfrontends; i++)
		if (cfg->frontends[i].tls != NULL &&
		    dlb_tls_server_reload(cfg->frontends[i].tls, err, sizeof(err)) != 0)
			conf_log(L, DLB_LOG_ERR, "Error reloading certificates for frontend %s: %s",
				 cfg->frontends[i].text, err);
	return 0;
}

/*
 * generateOCSPResponse(cert, issuerCert, issuerKey, outFile, days, minutes):
 * an OCSP response saying @cert is good, for ocspResponses (a local PKI, tests).
 * Written at startup, by --check-config, from the console and on reloads,
 * as dnsdist writes it; not by the workers' replays of the file.
 */
static int
l_generate_ocsp_response(lua_State *L)
{
	const char *cert = luaL_checkstring(L, 1), *ca = luaL_checkstring(L, 2);
	const char *key = luaL_checkstring(L, 3), *out = luaL_checkstring(L, 4);
	int ndays = (int)luaL_checkinteger(L, 5), nmin = (int)luaL_checkinteger(L, 6);
	char err[512];

	if (conf_get(L)->phase == DLB_LUA_PHASE_WORKER || conf_get(L)->phase == DLB_LUA_PHASE_RULES)
		return 0;
	if (dlb_tls_generate_ocsp(cert, ca, key, out, ndays, nmin, err, sizeof(err)) != 0)
		return luaL_error(L, "generateOCSPResponse: %s", err);
	return 0;
}

/* getOutgoingTLSSessionCacheSize(): the TLS sessions kept for connections to backends. */
static int
l_get_outgoing_tls_session_cache_size(lua_State *L)
{
	lua_pushinteger(L, (lua_Integer)dlb_tls_sessions_kept());
	return 1;
}

static const luaL_Reg tls_frontend_methods[] = {
	{ "reloadCertificates", l_tls_reload_certificates },
	{ "rotateTicketsKey", l_tls_rotate_tickets_key },
	{ "loadTicketsKeys", l_tls_load_tickets_keys },
	{ NULL, NULL },
};

static void
register_tls_frontend(lua_State *L)
{
	luaL_newmetatable(L, MT_TLS_FRONTEND);
	lua_newtable(L);
	luaL_setfuncs(L, tls_frontend_methods, 0);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, l_tls_frontend_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pop(L, 1);
}

/* ---- ACL ---------------------------------------------------------------- */

/*
 * At runtime the workers read the published snapshot (docs/architecture.md#publication):
 * after a setting, the ACL or a policy changed in the builder values, publish
 * them. At config time and while a reload evaluates, nothing is published
 * (startup and the reload publish the whole configuration once).
 */
static int
conf_publish(lua_State *L, const char *fn)
{
	struct dlb_lua_conf *lc = conf_get(L);

	if (lc->phase == DLB_LUA_PHASE_RUNNING && lc->cfg->snap != NULL &&
	    dlb_config_publish(lc->cfg, lc->rt) != 0)
		return luaL_error(L, "%s: out of memory", fn);
	return 0;
}

static int
l_set_acl(lua_State *L)
{
	struct dlb_config *cfg = conf_get(L)->cfg;
	struct dlb_netmask nm;
	lua_Integer n;

	if (lua_type(L, 1) == LUA_TSTRING) {
		dlb_lua_check_netmask(L, 1, "setACL", &nm);
		dlb_nmg_clear(&cfg->acl);
		if (dlb_nmg_add(&cfg->acl, &nm) != 0)
			return luaL_error(L, "setACL: out of memory");
		return conf_publish(L, "setACL");
	}
	luaL_checktype(L, 1, LUA_TTABLE);
	n = (lua_Integer)lua_rawlen(L, 1);
	/* validate everything first: an error must leave the old ACL in place */
	for (lua_Integer i = 1; i <= n; i++) {
		lua_rawgeti(L, 1, i);
		dlb_lua_check_netmask(L, -1, "setACL", &nm);
		lua_pop(L, 1);
	}
	dlb_nmg_clear(&cfg->acl);
	for (lua_Integer i = 1; i <= n; i++) {
		lua_rawgeti(L, 1, i);
		dlb_netmask_parse(lua_tostring(L, -1), &nm);
		lua_pop(L, 1);
		if (dlb_nmg_add(&cfg->acl, &nm) != 0)
			return luaL_error(L, "setACL: out of memory");
	}
	return conf_publish(L, "setACL");
}

/*
 * setACLFromFile(path): setACL with the netmasks of a file, one a line;
 * '#' starts a comment, blank lines are skipped (dnsdist 1.6+).
 */
static int
l_set_acl_from_file(lua_State *L)
{
	const char *path = dlb_lua_arg_string(L, 1, "setACLFromFile");
	struct stat st;
	char *buf, *line, *next;
	size_t len;
	int lineno = 0, n = 0;
	FILE *f;

	if (dlb_lua_replaying(L))
		return 0;	/* a worker's throwaway config: the ACL is not used */
	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (64 << 20))
		return luaL_error(L, "setACLFromFile: could not open '%s': %s", path,
				  stat(path, &st) != 0 ? strerror(errno) : "not a file of at most 64 MiB");
	/* the whole file in GC-owned memory, the FILE closed before any Lua call */
	buf = lua_newuserdatauv(L, (size_t)st.st_size + 1, 0);
	f = fopen(path, "re");
	if (f == NULL)
		return luaL_error(L, "setACLFromFile: could not open '%s': %s", path,
				  strerror(errno));
	len = fread(buf, 1, (size_t)st.st_size, f);
	fclose(f);
	buf[len] = '\0';
	lua_newtable(L);
	for (line = buf; line != NULL && *line != '\0'; line = next) {
		char *s = line, *e, *hash;
		struct dlb_netmask nm;

		next = strchr(line, '\n');
		if (next != NULL)
			*next++ = '\0';
		lineno++;
		if ((hash = strchr(line, '#')) != NULL)
			*hash = '\0';
		while (isspace((unsigned char)*s))
			s++;
		e = s + strlen(s);
		while (e > s && isspace((unsigned char)e[-1]))
			*--e = '\0';
		if (*s == '\0')
			continue;
		if (dlb_netmask_parse(s, &nm) != 0)
			return luaL_error(L, "setACLFromFile: %s:%d: invalid netmask '%s'", path,
					  lineno, s);
		lua_pushstring(L, s);
		lua_rawseti(L, -2, ++n);
	}
	lua_replace(L, 1);
	lua_settop(L, 1);
	return l_set_acl(L);
}

static int
l_add_acl(lua_State *L)
{
	struct dlb_netmask nm;

	dlb_lua_check_netmask(L, 1, "addACL", &nm);
	if (dlb_nmg_add(&conf_get(L)->cfg->acl, &nm) != 0)
		return luaL_error(L, "addACL: out of memory");
	return conf_publish(L, "addACL");
}

static int
l_rm_acl(lua_State *L)
{
	struct dlb_netmask nm;

	dlb_lua_check_netmask(L, 1, "rmACL", &nm);
	dlb_nmg_remove(&conf_get(L)->cfg->acl, &nm);
	return conf_publish(L, "rmACL");
}

static int
l_show_acl(lua_State *L)
{
	const struct dlb_nmg *acl = &conf_get(L)->cfg->acl;

	for (size_t i = 0; i < acl->n; i++) {
		char buf[64];

		dlb_netmask_format(&acl->v[i], buf, sizeof(buf));
		dlb_lua_print(L, buf);
	}
	return 0;
}

/* ---- Server objects ----------------------------------------------------- */

static void
push_server(lua_State *L, struct dlb_backend *be)
{
	struct server_ref *r = lua_newuserdatauv(L, sizeof(*r), 0);

	r->be = be;
	r->index = be->index;
	memcpy(r->uuid, be->uuid, sizeof(r->uuid));
	luaL_setmetatable(L, MT_SERVER);
	/* worker and reload states: dlb_lua_conf_rebind moves it to the real config's server */
	if (dlb_lua_phase_throwaway(conf_get(L)->phase)) {
		lua_rawgetp(L, LUA_REGISTRYINDEX, &servers_key);
		lua_pushvalue(L, -2);
		lua_pushboolean(L, 1);
		lua_rawset(L, -3);
		lua_pop(L, 1);
	}
}

void
dlb_lua_push_server(lua_State *L, struct dlb_backend *be)
{
	push_server(L, be);
}

struct dlb_backend *
dlb_lua_to_server(lua_State *L, int idx)
{
	struct server_ref *r = luaL_testudata(L, idx, MT_SERVER);
	struct dlb_config *cfg = conf_get(L)->cfg;

	if (r == NULL)
		return NULL;
	for (int i = 0; i < cfg->nbackends; i++)
		if (cfg->backends[i] == r->be && strcmp(cfg->backends[i]->uuid, r->uuid) == 0)
			return r->be;
	return NULL;
}

/* The live backend a Server object refers to, or a Lua error if it was removed. */
static struct dlb_backend *
check_server(lua_State *L, int idx)
{
	struct server_ref *r = luaL_checkudata(L, idx, MT_SERVER);
	struct dlb_config *cfg = conf_get(L)->cfg;
	/* workers' states too: a runtime newServer appends (release store) */
	int n = __atomic_load_n(&cfg->nbackends, __ATOMIC_ACQUIRE);

	if (r->index >= 0 && r->index < n && cfg->backends[r->index] == r->be &&
	    strcmp(cfg->backends[r->index]->uuid, r->uuid) == 0)
		return r->be;
	/* rmServer() re-indexed the list: find it again */
	for (int i = 0; i < n; i++) {
		if (cfg->backends[i] == r->be && strcmp(cfg->backends[i]->uuid, r->uuid) == 0) {
			r->index = i;
			return r->be;
		}
	}
	luaL_error(L, "this server was removed with rmServer()");
	return NULL;
}

static void
push_name_with_addr(lua_State *L, const struct dlb_backend *be)
{
	/* dnsdist prints the bare address for a server without a name */
	if (strcmp(be->name, be->addr_text) == 0)
		lua_pushstring(L, be->addr_text);
	else
		lua_pushfstring(L, "%s (%s)", be->name, be->addr_text);
}

static int
l_server_set_up(lua_State *L)
{
	__atomic_store_n(&check_server(L, 1)->admin, DLB_BE_FORCED_UP, __ATOMIC_RELAXED);
	return 0;
}

static int
l_server_set_down(lua_State *L)
{
	__atomic_store_n(&check_server(L, 1)->admin, DLB_BE_FORCED_DOWN, __ATOMIC_RELAXED);
	return 0;
}

static int
l_server_set_auto(lua_State *L)
{
	struct dlb_backend *be = check_server(L, 1);

	if (!lua_isnoneornil(L, 2))
		__atomic_store_n(&be->healthy, dlb_lua_arg_bool(L, 2, "setAuto") ? 1 : 0,
				 __ATOMIC_RELAXED);
	__atomic_store_n(&be->admin, DLB_BE_AUTO, __ATOMIC_RELAXED);
	return 0;
}

static int
l_server_is_up(lua_State *L)
{
	lua_pushboolean(L, dlb_backend_is_up(check_server(L, 1)));
	return 1;
}

static int
l_server_get_name(lua_State *L)
{
	lua_pushstring(L, check_server(L, 1)->name);
	return 1;
}

static int
l_server_get_name_with_addr(lua_State *L)
{
	push_name_with_addr(L, check_server(L, 1));
	return 1;
}

static int
l_server_get_id(lua_State *L)
{
	lua_pushstring(L, check_server(L, 1)->uuid);
	return 1;
}

static int
l_server_set_qps(lua_State *L)
{
	struct dlb_backend *be = check_server(L, 1);
	int qps = (int)dlb_lua_arg_int(L, 2, "setQPS", 0, INT_MAX);

	__atomic_store_n(&be->qps, qps, __ATOMIC_RELAXED);
	__atomic_store_n(&be->qps_limit_rt, qps, __ATOMIC_RELAXED);
	return 0;
}

/*
 * After a runtime change of pool membership, order or weight: publish fresh
 * consistent-hashing rings and a snapshot with the pools' new members
 * (before the workers run, main builds and publishes them once).
 */
static void
pools_changed(lua_State *L)
{
	struct dlb_lua_conf *lc = conf_get(L);

	if (lc->phase != DLB_LUA_PHASE_RUNNING || !dlb_daemon.running)
		return;
	if (dlb_config_build_rings(lc->cfg, lc->rt) != 0)
		dlb_err("out of memory rebuilding the consistent-hashing rings");
	if (dlb_config_publish(lc->cfg, lc->rt) != 0)
		dlb_err("out of memory publishing the pools: the previous ones stay in force");
}

static int
l_server_add_pool(lua_State *L)
{
	struct dlb_backend *be = check_server(L, 1);
	const char *pool = dlb_lua_arg_string(L, 2, "addPool");

	not_from_rules(L, "addPool");
	if (dlb_config_pool_add(conf_get(L)->cfg, pool, be) != 0)
		return luaL_error(L, "addPool: cannot add %s to pool '%s' (too many pools or name "
				  "too long)", be->name, pool);
	pools_changed(L);
	return 0;
}

static int
l_server_rm_pool(lua_State *L)
{
	struct dlb_backend *be = check_server(L, 1);

	not_from_rules(L, "rmPool");
	dlb_config_pool_remove(conf_get(L)->cfg, dlb_lua_arg_string(L, 2, "rmPool"), be);
	pools_changed(L);
	return 0;
}

/* A server's figures summed over the workers (zeros before they run). */
static void
server_totals(lua_State *L, const struct dlb_backend *be, struct dlb_be_totals *t)
{
	struct dlb_config *cfg = conf_get(L)->cfg;

	memset(t, 0, sizeof(*t));
	if (cfg->be_totals != NULL)
		cfg->be_totals(be->index, t);
}

static int
l_server_get_outstanding(lua_State *L)
{
	struct dlb_be_totals t;

	server_totals(L, check_server(L, 1), &t);
	lua_pushinteger(L, (lua_Integer)t.outstanding);
	return 1;
}

/* µs, the EWMA over recent answers (dnsdist: over the last 128 UDP queries) */
static int
l_server_get_latency(lua_State *L)
{
	struct dlb_be_totals t;

	server_totals(L, check_server(L, 1), &t);
	lua_pushnumber(L, t.latency_us);
	return 1;
}

static int
l_server_get_drops(lua_State *L)
{
	struct dlb_be_totals t;

	server_totals(L, check_server(L, 1), &t);
	lua_pushinteger(L, (lua_Integer)t.drops);
	return 1;
}

static int
l_server_get_queries(lua_State *L)
{
	struct dlb_be_totals t;

	server_totals(L, check_server(L, 1), &t);
	lua_pushinteger(L, (lua_Integer)t.queries);
	return 1;
}

static const luaL_Reg server_methods[] = {
	{ "getOutstanding", l_server_get_outstanding },
	{ "getLatency", l_server_get_latency },
	{ "getDrops", l_server_get_drops },
	{ "getQueries", l_server_get_queries },
	{ "setUp", l_server_set_up },
	{ "setDown", l_server_set_down },
	{ "setAuto", l_server_set_auto },
	{ "isUp", l_server_is_up },
	{ "getName", l_server_get_name },
	{ "getNameWithAddr", l_server_get_name_with_addr },
	{ "getID", l_server_get_id },
	{ "setQPS", l_server_set_qps },
	{ "addPool", l_server_add_pool },
	{ "rmPool", l_server_rm_pool },
	{ NULL, NULL },
};

/* __index: methods (upvalue 1), then the fields name, order, weight, upStatus. */
static int
l_server_index(lua_State *L)
{
	struct dlb_backend *be = check_server(L, 1);
	const char *key = lua_tostring(L, 2);

	if (lua_type(L, 2) != LUA_TSTRING)
		return 0;
	if (lua_getfield(L, lua_upvalueindex(1), key) != LUA_TNIL)
		return 1;
	if (strcmp(key, "name") == 0)
		lua_pushstring(L, be->name);
	else if (strcmp(key, "order") == 0)
		lua_pushinteger(L, __atomic_load_n(&be->order, __ATOMIC_RELAXED));
	else if (strcmp(key, "weight") == 0)
		lua_pushinteger(L, __atomic_load_n(&be->weight, __ATOMIC_RELAXED));
	else if (strcmp(key, "upStatus") == 0)
		lua_pushboolean(L, dlb_backend_is_up(be));
	else
		lua_pushnil(L);
	return 1;
}

static int
l_server_newindex(lua_State *L)
{
	struct dlb_backend *be = check_server(L, 1);
	const char *key = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "?";

	if (strcmp(key, "order") == 0) {
		int order = (int)dlb_lua_arg_int(L, 3, "order", 0, INT_MAX);

		if (conf_get(L)->phase == DLB_LUA_PHASE_RULES)
			return luaL_error(L, "a server's order cannot be changed from a rule");
		__atomic_store_n(&be->order, order, __ATOMIC_RELAXED);
		dlb_config_resort_pools(conf_get(L)->cfg);
		pools_changed(L);
	} else if (strcmp(key, "weight") == 0) {
		int weight = (int)dlb_lua_arg_int(L, 3, "weight", 1, INT_MAX);

		if (conf_get(L)->phase == DLB_LUA_PHASE_RULES)
			return luaL_error(L, "a server's weight cannot be changed from a rule");
		__atomic_store_n(&be->weight, weight, __ATOMIC_RELAXED);
		pools_changed(L);
	} else {
		return luaL_error(L, "Server field '%s' is read-only or unknown", key);
	}
	return 0;
}

static int
l_server_tostring(lua_State *L)
{
	push_name_with_addr(L, check_server(L, 1));
	return 1;
}

static int
l_server_eq(lua_State *L)
{
	struct server_ref *a = luaL_checkudata(L, 1, MT_SERVER);
	struct server_ref *b = luaL_checkudata(L, 2, MT_SERVER);

	lua_pushboolean(L, a->be == b->be && strcmp(a->uuid, b->uuid) == 0);
	return 1;
}

/* ---- newServer's checkFunction ------------------------------------------ */

/*
 * checkFunction(qname, qtype, qclass, dh) -> qname, qtype, qclass, called
 * by the health checker (main thread) before each check of its server; dh
 * is the check's header (getRD/setRD, getCD/setCD, ... as dq.dh). The
 * functions live in the registry of the config state that ran newServer,
 * keyed by the server's name and address (which a reload keeps).
 */
#define MT_CHECK_DH	"dlb.CheckHeader"

static const char check_fns_key = 0;
/* the state holding them before dlb_daemon.lc is set (the initial checks) */
static struct dlb_lua_conf *check_lc;

struct check_call {
	const struct dlb_backend *be;
	uint8_t *name;
	int *name_len;
	uint16_t *type, *cls, *flags;
};

static void
check_fn_key(lua_State *L, const struct dlb_backend *be)
{
	/* (newServer names a server after its address only once it is added) */
	lua_pushfstring(L, "%s\n%s", be->addr_text,
			strcmp(be->name, be->addr_text) != 0 ? be->name : "");
}

static uint16_t *
check_dh(lua_State *L)
{
	uint16_t **f = luaL_checkudata(L, 1, MT_CHECK_DH);

	if (*f == NULL)
		luaL_error(L, "this DNSHeader is gone: it is valid only during its checkFunction's call");
	return *f;
}

static int
check_dh_flag(lua_State *L)
{
	uint16_t bit = (uint16_t)lua_tointeger(L, lua_upvalueindex(1));
	uint16_t *f = check_dh(L);

	if (lua_toboolean(L, lua_upvalueindex(2))) {
		*f = lua_toboolean(L, 2) ? (uint16_t)(*f | bit) : (uint16_t)(*f & ~bit);
		return 0;
	}
	lua_pushboolean(L, (*f & bit) != 0);
	return 1;
}

static int
check_dh_tostring(lua_State *L)
{
	lua_pushliteral(L, "DNSHeader");
	return 1;
}

/* Under lua_pcall: run the checkFunction of c->be, read back its three results. */
static int
check_call_cb(lua_State *L)
{
	static const struct {
		const char *get, *set;
		uint16_t bit;
	} flags[] = {
		{ "getRD", "setRD", DLB_F_RD }, { "getCD", "setCD", DLB_F_CD },
		{ "getAD", "setAD", DLB_F_AD }, { "getAA", "setAA", DLB_F_AA },
		{ "getRA", "setRA", DLB_F_RA }, { "getTC", "setTC", DLB_F_TC },
		{ "getQR", "setQR", DLB_F_QR },
	};
	struct check_call *cc = lua_touserdata(L, 1);
	uint16_t **dh;
	const uint8_t *wire;
	size_t len;
	lua_Integer v;

	lua_rawgetp(L, LUA_REGISTRYINDEX, &check_fns_key);
	if (lua_type(L, -1) == LUA_TTABLE) {
		check_fn_key(L, cc->be);
		lua_rawget(L, -2);
	}
	if (lua_type(L, -1) != LUA_TFUNCTION)
		return luaL_error(L, "the checkFunction of %s is gone (reloaded away)",
				  cc->be->name);
	dlb_lua_push_dnsname(L, cc->name, (size_t)*cc->name_len);
	lua_pushinteger(L, *cc->type);
	lua_pushinteger(L, *cc->cls);
	dh = lua_newuserdatauv(L, sizeof(*dh), 0);
	*dh = cc->flags;
	if (luaL_newmetatable(L, MT_CHECK_DH)) {
		lua_newtable(L);
		for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
			for (int set = 0; set < 2; set++) {
				lua_pushinteger(L, flags[i].bit);
				lua_pushboolean(L, set);
				lua_pushcclosure(L, check_dh_flag, 2);
				lua_setfield(L, -2, set ? flags[i].set : flags[i].get);
			}
		}
		lua_setfield(L, -2, "__index");
		lua_pushcfunction(L, check_dh_tostring);
		lua_setfield(L, -2, "__tostring");
	}
	lua_setmetatable(L, -2);
	lua_pushvalue(L, -1);
	lua_insert(L, 2);	/* keep the header, to retire it after the call */
	lua_call(L, 4, 3);
	*dh = NULL;
	if ((wire = dlb_lua_to_dnsname(L, -3, &len)) != NULL && len <= DLB_MAX_NAME) {
		memcpy(cc->name, wire, len);
		*cc->name_len = (int)len;
	} else if (lua_type(L, -3) == LUA_TSTRING) {
		*cc->name_len = (int)dlb_lua_check_name_lc(L, -3, "checkFunction", cc->name);
	} else {
		return luaL_error(L, "checkFunction: the first result must be a DNSName");
	}
	for (int i = 0; i < 2; i++) {
		int isnum;

		v = lua_tointegerx(L, -2 + i, &isnum);
		if (!isnum || v < 0 || v > 65535)
			return luaL_error(L, "checkFunction: the %s result must be a %s (0..65535)",
					  i == 0 ? "second" : "third", i == 0 ? "type" : "class");
		if (i == 0)
			*cc->type = (uint16_t)v;
		else
			*cc->cls = (uint16_t)v;
	}
	return 0;
}

/*
 * A checkFunction runs in the configuration state, on the thread that runs
 * health checks: a bounded number of instructions (setLuaInstructionLimit,
 * or CHECK_INSN_DEFAULT), so that a loop fails the check instead of stopping
 * every check and the console.
 */
#define CHECK_INSN_DEFAULT	10000000
#define CHECK_HOOK_EVERY	1000
static uint64_t check_insns, check_insn_limit;

static void
check_insn_hook(lua_State *L, lua_Debug *ar)
{
	(void)ar;
	check_insns += CHECK_HOOK_EVERY;
	if (check_insns >= check_insn_limit)
		luaL_error(L, "instruction limit exceeded (%I instructions)",
			   (lua_Integer)check_insn_limit);
}

static int
check_hook(const struct dlb_backend *be, uint8_t *name, int *name_len, uint16_t *type,
	   uint16_t *cls, uint16_t *flags, char *err, size_t errlen)
{
	struct dlb_lua_conf *lc = dlb_daemon.lc != NULL ? dlb_daemon.lc : check_lc;
	struct check_call cc = { be, name, name_len, type, cls, flags };
	lua_Hook hook;
	lua_State *L;
	int top, st, hook_mask, hook_count;

	if (lc == NULL || lc->L == NULL) {
		snprintf(err, errlen, "checkFunction: no Lua state");
		return -1;
	}
	L = lc->L;
	top = lua_gettop(L);
	hook = lua_gethook(L);
	hook_mask = lua_gethookmask(L);
	hook_count = lua_gethookcount(L);
	check_insns = 0;
	check_insn_limit = lc->lua_insn_limit != 0 ? lc->lua_insn_limit : CHECK_INSN_DEFAULT;
	lua_sethook(L, check_insn_hook, LUA_MASKCOUNT, CHECK_HOOK_EVERY);
	lua_pushcfunction(L, check_call_cb);
	lua_pushlightuserdata(L, &cc);
	st = lua_pcall(L, 1, 0, 0);
	lua_sethook(L, hook, hook_mask, hook_count);
	if (st != LUA_OK) {
		const char *m = lua_tostring(L, -1);

		snprintf(err, errlen, "checkFunction: %s", m != NULL ? m : "error");
		lua_settop(L, top);
		return -1;
	}
	lua_settop(L, top);
	return 0;
}

/* newServer({checkFunction=f}) at stack index 1, for the added @be. */
static void
register_check_fn(lua_State *L, struct dlb_lua_conf *lc, struct dlb_backend *be)
{
	int t = lua_getfield(L, 1, "checkFunction");

	if (t == LUA_TNIL) {
		lua_pop(L, 1);
		return;
	}
	if (t != LUA_TFUNCTION)
		luaL_error(L, "newServer: 'checkFunction' must be a function");
	be->check_fn = true;
	if (dlb_lua_phase_throwaway(lc->phase) && lc->phase != DLB_LUA_PHASE_RELOAD) {
		lua_pop(L, 1);
		return;
	}
	if (lua_rawgetp(L, LUA_REGISTRYINDEX, &check_fns_key) != LUA_TTABLE) {
		lua_pop(L, 1);
		lua_newtable(L);
		lua_pushvalue(L, -1);
		lua_rawsetp(L, LUA_REGISTRYINDEX, &check_fns_key);
	}
	check_fn_key(L, be);
	lua_pushvalue(L, -3);
	lua_rawset(L, -3);
	lua_pop(L, 2);
	if (lc->phase != DLB_LUA_PHASE_RELOAD)
		check_lc = lc;
	dlb_health_check_hook = check_hook;
}

/* ---- newServer ---------------------------------------------------------- */

static const char *const server_keys[] = {
	"address", "name", "pool", "order", "weight", "qps", "id", "checkName", "checkType",
	"checkClass", "checkInterval", "checkTimeout", "maxCheckFailures", "rise",
	"mustResolve", "setCD", "checkTCP", "healthCheckMode", "sockets", "tcpOnly",
	"udpTimeout", "retries", "tcpConnectTimeout", "tcpSendTimeout", "tcpRecvTimeout",
	"maxInFlight", "source", "lazyHealthCheckSampleSize", "lazyHealthCheckMinSampleCount",
	"lazyHealthCheckThreshold", "lazyHealthCheckFailedInterval",
	"lazyHealthCheckUseExponentialBackOff", "lazyHealthCheckMaxBackOff", "lazyHealthCheckMode",
	"useClientSubnet", "useProxyProtocol", "checkFunction",
	"disableZeroScope",
	/* DNS over TLS (server_tls_keys) */
	"tls", "subjectName", "subjectAddr", "validateCertificates", "caStore", "ciphers",
	"ciphersTLS13", "releaseBuffers", "enableRenegotiation", "keyLogFile",
	/* DNS over HTTPS (server_doh_keys) */
	"dohPath", "addXForwardedHeaders",
	/* dnsdist 1.7 keys accepted and ignored: per-backend responder threads
	 * (cpus) and socket details (ipBindAddrNoPort, tcpFastOpen, reconnectOnUp) */
	"cpus", "ipBindAddrNoPort", "tcpFastOpen", "reconnectOnUp",
	NULL,
};

/*
 * dnsdist 1.7 keys dnslb cannot honour: a backend that expects XPF records
 * must not get queries without them. An error, not a warning.
 */
static const struct {
	const char *key;
	const char *why;
} server_unsupported_keys[] = {
	{ "addXPF", "XPF records are not supported" },
};

static void
set_server_address(lua_State *L, struct dlb_backend *be, const char *addr)
{
	static const uint8_t zero[16];
	const uint8_t *a;
	size_t alen;
	uint16_t port;

	if (dlb_sockaddr_parse(addr, DLB_DEFAULT_PORT, &be->addr, &be->addrlen) != 0)
		luaL_error(L, "newServer: invalid address '%s'", addr);
	if (be->addr.ss_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)(const void *)&be->addr;

		a = (const uint8_t *)&sin->sin_addr;
		alen = 4;
		port = ntohs(sin->sin_port);
	} else {
		const struct sockaddr_in6 *sin6 =
			(const struct sockaddr_in6 *)(const void *)&be->addr;

		a = sin6->sin6_addr.s6_addr;
		alen = 16;
		port = ntohs(sin6->sin6_port);
	}
	if (memcmp(a, zero, alen) == 0 || port == 0)
		luaL_error(L, "newServer: invalid address '%s' for a downstream server", addr);
	dlb_sockaddr_format((const struct sockaddr *)&be->addr, be->addr_text,
			    sizeof(be->addr_text));
}

/* source = "addr", "iface" or "addr@iface" */
static void
set_server_source(lua_State *L, struct dlb_backend *be, const char *src)
{
	char addr[128];
	const char *at = strchr(src, '@');
	const char *iface = NULL;
	bool have_addr = false;

	if (at != NULL) {
		size_t n = (size_t)(at - src);

		if (n == 0 || n >= sizeof(addr))
			luaL_error(L, "newServer: invalid source '%s'", src);
		memcpy(addr, src, n);
		addr[n] = '\0';
		have_addr = true;
		iface = at + 1;
	} else if (dlb_sockaddr_parse(src, 0, &be->source, &be->sourcelen) == 0) {
		snprintf(addr, sizeof(addr), "%s", src);
		have_addr = true;
	} else {
		iface = src;
	}
	if (have_addr) {
		if (dlb_sockaddr_parse(addr, 0, &be->source, &be->sourcelen) != 0)
			luaL_error(L, "newServer: invalid source address '%s'", addr);
		if (be->source.ss_family != be->addr.ss_family)
			luaL_error(L, "newServer: source address '%s' is not of the "
				   "server's family", addr);
	}
	if (iface != NULL) {
		size_t n = strlen(iface);

		if (n == 0 || n >= sizeof(be->source_iface) || strpbrk(iface, "/ \t") != NULL ||
		    if_nametoindex(iface) == 0) {
			/* dnsdist's warning: the server is used without a source */
			conf_log(L, DLB_LOG_WARN, "Dismissing source %s because '%s' is not a "
				 "valid interface name", src, iface);
			memset(&be->source, 0, sizeof(be->source));
			be->sourcelen = 0;
			be->source_iface[0] = '\0';
			return;
		}
		memcpy(be->source_iface, iface, n + 1);
	}
}

/* "1b4e28ba-2fa1-11d2-883f-0016d3cca427", stored lowercased. */
static void
set_server_id(lua_State *L, struct dlb_backend *be, const char *id)
{
	size_t n = strlen(id);

	if (n != 36)
		luaL_error(L, "newServer: invalid id '%s' (expected a UUID)", id);
	for (size_t i = 0; i < n; i++) {
		bool dash = i == 8 || i == 13 || i == 18 || i == 23;

		if (dash ? id[i] != '-' : !isxdigit((unsigned char)id[i]))
			luaL_error(L, "newServer: invalid id '%s' (expected a UUID)", id);
		be->uuid[i] = (char)tolower((unsigned char)id[i]);
	}
	be->uuid[n] = '\0';
}

static int
check_rrtype(lua_State *L, int idx, const char *fn, const char *key,
	     const struct dlb_named *names)
{
	lua_Integer v = 0;
	int named;

	if (dlb_lua_to_integer(L, idx, &v)) {
		if (v < 0 || v > 65535)
			luaL_error(L, "%s: '%s' is out of range (0..65535)", fn, key);
		return (int)v;
	}
	if (lua_type(L, idx) == LUA_TSTRING) {
		const char *s = lua_tostring(L, idx);

		if (dlb_named_lookup(names, s, &named))
			return named;
		if (names == dlb_lua_qclasses && strcasecmp(s, "CH") == 0)
			return 3;
		if (names == dlb_lua_qclasses && strcasecmp(s, "HS") == 0)
			return 4;
		luaL_error(L, "%s: unknown %s '%s'", fn, key, s);
	}
	luaL_error(L, "%s: '%s' must be a number or a name", fn, key);
	return 0;
}

static void
add_server_pool(lua_State *L, struct dlb_backend *be, const char *name, bool *want_default)
{
	if (name[0] == '\0') {
		*want_default = true;
		return;
	}
	if (strlen(name) >= sizeof(be->pools[0]))
		luaL_error(L, "newServer: pool name '%s' is too long", name);
	for (int i = 0; i < be->npools; i++)
		if (strcmp(be->pools[i], name) == 0)
			return;
	if (be->npools >= DLB_MAX_POOLS_PER_BACKEND)
		luaL_error(L, "newServer: at most %d pools per server", DLB_MAX_POOLS_PER_BACKEND);
	snprintf(be->pools[be->npools++], sizeof(be->pools[0]), "%s", name);
}

/*
 * newServer's weight= as dnsdist 1.7.3 reads it: the value as a string
 * (a number as Lua writes it) through std::stoi, so "5", 1.5 and "7abc"
 * give their leading integer. A value below 1, or no integer at all or
 * one past int, is not an error of the configuration there: dnsdist logs
 * it and newServer returns nil without adding the server. @return that
 * message, or NULL with be->weight set.
 */
static const char *
server_weight(lua_State *L, struct dlb_backend *be)
{
	static const char range[] =
		"Error creating new server: downstream weight value must be between 1 and 2147483647";
	const char *s, *p;
	long long v = 0;
	bool neg = false, digits = false;

	if (lua_getfield(L, 1, "weight") == LUA_TNIL) {
		lua_pop(L, 1);
		return NULL;
	}
	s = lua_type(L, -1) == LUA_TNUMBER || lua_type(L, -1) == LUA_TSTRING ?
	    lua_tostring(L, -1) : NULL;
	lua_pop(L, 1);	/* a string from the table: still anchored there */
	if (s == NULL)
		return range;
	for (p = s; isspace((unsigned char)*p); p++)
		;
	if (*p == '+' || *p == '-')
		neg = *p++ == '-';
	for (; isdigit((unsigned char)*p); p++) {
		digits = true;
		v = v * 10 + (*p - '0');
		if (v > (long long)INT_MAX + 1)
			return range;
	}
	if (!digits)
		return range;
	v = neg ? -v : v;
	if (v > INT_MAX || v < INT_MIN)
		return range;
	if (v < 1)
		return "Error creating new server: downstream weight value must be greater than 0.";
	be->weight = (int)v;
	return NULL;
}

/* The keys that mean nothing without tls= */
static const char *const server_tls_only_keys[] = {
	"subjectName", "subjectAddr", "validateCertificates", "caStore", "ciphers", "ciphersTLS13",
	"releaseBuffers", "enableRenegotiation", "keyLogFile", NULL,
};

/*
 * newServer's DNS over TLS keys (docs/tls.md#backends) into @be and @o; the
 * strings of @o stay on the stack. Without tls= the other keys are ignored,
 * with a warning, as dnsdist ignores them. A TLS server is reached over
 * streams only (tcpOnly): UDP clients' queries go over TLS too.
 * @return whether tls= was given.
 */
static bool
server_tls_keys(lua_State *L, struct dlb_backend *be, struct dlb_tls_client_opts *o)
{
	const char *fn = "newServer";
	const char *s;
	bool b;

	dlb_tls_client_opts_default(o);
	if ((s = dlb_lua_opt_string_push(L, 1, fn, "tls")) == NULL) {
		for (size_t i = 0; server_tls_only_keys[i] != NULL; i++) {
			if (lua_getfield(L, 1, server_tls_only_keys[i]) != LUA_TNIL)
				conf_log(L, DLB_LOG_WARN, "newServer: '%s' is ignored without tls",
					 server_tls_only_keys[i]);
			lua_pop(L, 1);
		}
		return false;
	}
	if (strcmp(s, "openssl") != 0)
		luaL_error(L, "newServer: the TLS provider '%s' is not supported by dnslb (use "
			   "\"openssl\")", s);
	if ((s = dlb_lua_opt_string_push(L, 1, fn, "subjectName")) != NULL) {
		if (strlen(s) >= sizeof(be->tls_subject_name))
			luaL_error(L, "newServer: subjectName '%s' is too long", s);
		snprintf(be->tls_subject_name, sizeof(be->tls_subject_name), "%s", s);
	}
	if ((s = dlb_lua_opt_string_push(L, 1, fn, "subjectAddr")) != NULL) {
		uint8_t a[16];

		if (inet_pton(AF_INET, s, a) != 1 && inet_pton(AF_INET6, s, a) != 1)
			luaL_error(L, "newServer: invalid subjectAddr '%s' (an IP address)", s);
		snprintf(be->tls_subject_addr, sizeof(be->tls_subject_addr), "%s", s);
	} else {
		/* no name either: the certificate must name the server's address */
		const struct sockaddr_in *sin = (const void *)&be->addr;
		const struct sockaddr_in6 *sin6 = (const void *)&be->addr;
		const void *ip = be->addr.ss_family == AF_INET ? (const void *)&sin->sin_addr :
								 (const void *)&sin6->sin6_addr;

		inet_ntop(be->addr.ss_family, ip, be->tls_subject_addr, sizeof(be->tls_subject_addr));
	}
	if (dlb_lua_opt_bool(L, 1, fn, "validateCertificates", &b))
		o->validate = b;
	o->ca_store = dlb_lua_opt_string_push(L, 1, fn, "caStore");
	o->ciphers = dlb_lua_opt_string_push(L, 1, fn, "ciphers");
	o->ciphers13 = dlb_lua_opt_string_push(L, 1, fn, "ciphersTLS13");
	if (dlb_lua_opt_bool(L, 1, fn, "releaseBuffers", &b))
		o->release_buffers = b;
	if (dlb_lua_opt_bool(L, 1, fn, "enableRenegotiation", &b))
		o->renegotiation = b;
	o->keylog_file = dlb_lua_opt_string_push(L, 1, fn, "keyLogFile");
	be->tcp_only = true;
	return true;
}

/* ALPN a DoH server's TLS context asks for: HTTP/2 only, as dnsdist 1.7 */
static const char doh_server_alpn[] = "\x02h2";

/*
 * newServer's DNS over HTTPS keys (docs/tls.md#doh-backends) into @be: with
 * dohPath, every query and health check is an HTTP/2 POST to that path
 * (over TLS with tls=, whose context then asks for "h2" by ALPN; in clear
 * HTTP/2 without, as dnsdist 1.7). addXForwardedHeaders means something
 * only with dohPath, and is ignored without, as dnsdist does.
 */
static void
server_doh_keys(lua_State *L, struct dlb_backend *be, struct dlb_tls_client_opts *o)
{
	const char *s = dlb_lua_opt_string_push(L, 1, "newServer", "dohPath");

	if (s == NULL)
		return;
	if (strlen(s) >= sizeof(be->doh_path))
		luaL_error(L, "newServer: dohPath '%s' is too long", s);
	snprintf(be->doh_path, sizeof(be->doh_path), "%s", s);
	lua_pop(L, 1);
	dlb_lua_opt_bool(L, 1, "newServer", "addXForwardedHeaders", &be->doh_xff);
	be->tcp_only = true;	/* never over UDP: every client's query goes over HTTP/2 */
	o->alpn = doh_server_alpn;
	o->alpn_len = sizeof(doh_server_alpn) - 1;
}

/* The table form of newServer, at stack index 1, into the scratch @be. */
static void
parse_server_table(lua_State *L, struct dlb_backend *be, bool *want_default,
		   const char **weight_err, struct dlb_tls_client_opts *tls, bool *want_tls)
{
	const char *fn = "newServer";
	const char *s;
	lua_Number secs = 0;

	for (size_t i = 0; i < sizeof(server_unsupported_keys) / sizeof(server_unsupported_keys[0]);
	     i++) {
		if (lua_getfield(L, 1, server_unsupported_keys[i].key) != LUA_TNIL)
			luaL_error(L, "newServer: '%s': %s by dnslb", server_unsupported_keys[i].key,
				   server_unsupported_keys[i].why);
		lua_pop(L, 1);
	}
	dlb_lua_warn_unknown_keys(L, 1, fn, "key", server_keys);

	s = dlb_lua_opt_string_push(L, 1, fn, "address");
	if (s == NULL)
		luaL_error(L, "newServer: 'address' is mandatory");
	set_server_address(L, be, s);
	lua_pop(L, 1);

	if ((s = dlb_lua_opt_string_push(L, 1, fn, "name")) != NULL) {
		if (strlen(s) >= sizeof(be->name))
			luaL_error(L, "newServer: name '%s' is too long", s);
		snprintf(be->name, sizeof(be->name), "%s", s);
		lua_pop(L, 1);
	}

	switch (lua_getfield(L, 1, "pool")) {
	case LUA_TNIL:
		break;
	case LUA_TSTRING:
		add_server_pool(L, be, lua_tostring(L, -1), want_default);
		break;
	case LUA_TTABLE: {
		lua_Integer n = (lua_Integer)lua_rawlen(L, -1);

		for (lua_Integer i = 1; i <= n; i++) {
			if (lua_rawgeti(L, -1, i) != LUA_TSTRING)
				luaL_error(L, "newServer: 'pool' must contain strings");
			add_server_pool(L, be, lua_tostring(L, -1), want_default);
			lua_pop(L, 1);
		}
		break;
	}
	default:
		luaL_error(L, "newServer: 'pool' must be a string or a table of strings");
	}
	lua_pop(L, 1);

	dlb_lua_opt_int(L, 1, fn, "order", 0, INT_MAX, &be->order);
	*weight_err = server_weight(L, be);
	dlb_lua_opt_int(L, 1, fn, "qps", 0, INT_MAX, &be->qps);

	if ((s = dlb_lua_opt_string_push(L, 1, fn, "id")) != NULL) {
		set_server_id(L, be, s);
		be->id_given = true;
		lua_pop(L, 1);
	}

	if ((s = dlb_lua_opt_string_push(L, 1, fn, "checkName")) != NULL) {
		int n = dlb_wire_name_from_text(s, be->check_name, sizeof(be->check_name));

		if (n <= 0)
			luaL_error(L, "newServer: invalid checkName '%s'", s);
		be->check_name_len = n;
		lua_pop(L, 1);
	}
	if (lua_getfield(L, 1, "checkType") != LUA_TNIL)
		be->check_type = (uint16_t)check_rrtype(L, -1, fn, "checkType", dlb_qtype_names);
	lua_pop(L, 1);
	if (lua_getfield(L, 1, "checkClass") != LUA_TNIL)
		be->check_class = (uint16_t)check_rrtype(L, -1, fn, "checkClass", dlb_lua_qclasses);
	lua_pop(L, 1);

	dlb_lua_opt_int(L, 1, fn, "checkInterval", 1, INT_MAX, &be->check_interval);
	dlb_lua_opt_int(L, 1, fn, "checkTimeout", 1, INT_MAX, &be->check_timeout);
	dlb_lua_opt_int(L, 1, fn, "maxCheckFailures", 1, INT_MAX, &be->max_check_failures);
	dlb_lua_opt_int(L, 1, fn, "rise", 1, INT_MAX, &be->rise);
	dlb_lua_opt_bool(L, 1, fn, "mustResolve", &be->must_resolve);
	dlb_lua_opt_bool(L, 1, fn, "setCD", &be->set_cd);
	dlb_lua_opt_bool(L, 1, fn, "checkTCP", &be->check_tcp);

	if ((s = dlb_lua_opt_string_push(L, 1, fn, "healthCheckMode")) != NULL) {
		if (strcasecmp(s, "auto") == 0) {
			be->admin = DLB_BE_AUTO;
		} else if (strcasecmp(s, "lazy") == 0) {
			be->admin = DLB_BE_AUTO;
			be->lazy = true;
		} else if (strcasecmp(s, "up") == 0) {
			be->admin = DLB_BE_FORCED_UP;
		} else if (strcasecmp(s, "down") == 0) {
			be->admin = DLB_BE_FORCED_DOWN;
		} else {
			luaL_error(L, "newServer: unknown healthCheckMode '%s'", s);
		}
		lua_pop(L, 1);
	}

	dlb_lua_opt_int(L, 1, fn, "lazyHealthCheckSampleSize", 1, 1000000, &be->lazy_sample_size);
	dlb_lua_opt_int(L, 1, fn, "lazyHealthCheckMinSampleCount", 1, 1000000,
			&be->lazy_min_samples);
	dlb_lua_opt_int(L, 1, fn, "lazyHealthCheckThreshold", 0, 100, &be->lazy_threshold);
	dlb_lua_opt_int(L, 1, fn, "lazyHealthCheckFailedInterval", 1, 86400,
			&be->lazy_failed_interval);
	dlb_lua_opt_bool(L, 1, fn, "lazyHealthCheckUseExponentialBackOff", &be->lazy_backoff);
	dlb_lua_opt_int(L, 1, fn, "lazyHealthCheckMaxBackOff", 1, 86400 * 7, &be->lazy_max_backoff);
	if ((s = dlb_lua_opt_string_push(L, 1, fn, "lazyHealthCheckMode")) != NULL) {
		if (strcasecmp(s, "TimeoutOnly") == 0)
			be->lazy_timeouts_only = true;
		else if (strcasecmp(s, "TimeoutOrServFail") == 0)
			be->lazy_timeouts_only = false;
		else
			luaL_error(L, "newServer: unknown lazyHealthCheckMode '%s' (TimeoutOnly or "
				   "TimeoutOrServFail)", s);
		lua_pop(L, 1);
	}

	dlb_lua_opt_bool(L, 1, fn, "useClientSubnet", &be->use_ecs);
	dlb_lua_opt_bool(L, 1, fn, "disableZeroScope", &be->disable_zero_scope);
	dlb_lua_opt_bool(L, 1, fn, "useProxyProtocol", &be->use_proxy_protocol);
	if (lua_getfield(L, 1, "sockets") != LUA_TNIL) {
		lua_Integer n = 0;

		/* dnsdist's warning for 0, and its fallback */
		if (dlb_lua_to_integer(L, -1, &n) && n == 0) {
			conf_log(L, DLB_LOG_WARN, "Dismissing invalid number of sockets '0', "
				 "using 1 instead");
			be->sockets = 1;
		} else {
			dlb_lua_opt_int(L, 1, fn, "sockets", 1, DLB_MAX_SOCKETS_PER_BACKEND,
					&be->sockets);
		}
	}
	lua_pop(L, 1);
	dlb_lua_opt_bool(L, 1, fn, "tcpOnly", &be->tcp_only);

	if (lua_getfield(L, 1, "udpTimeout") != LUA_TNIL) {
		if (!dlb_lua_to_number(L, -1, &secs) || secs < 0 || secs > 3600)
			luaL_error(L, "newServer: 'udpTimeout' must be a number of seconds "
				   "(0..3600)");
		be->udp_timeout_ms = (int)lround(secs * 1000);
		if (secs > 0 && be->udp_timeout_ms == 0)
			be->udp_timeout_ms = 1;
	}
	lua_pop(L, 1);

	dlb_lua_opt_int(L, 1, fn, "retries", 0, INT_MAX, &be->retries);
	dlb_lua_opt_int(L, 1, fn, "tcpConnectTimeout", 0, INT_MAX, &be->tcp_connect_timeout);
	dlb_lua_opt_int(L, 1, fn, "tcpSendTimeout", 0, INT_MAX, &be->tcp_send_timeout);
	dlb_lua_opt_int(L, 1, fn, "tcpRecvTimeout", 0, INT_MAX, &be->tcp_recv_timeout);
	dlb_lua_opt_int(L, 1, fn, "maxInFlight", 0, 65535, &be->max_in_flight);

	if ((s = dlb_lua_opt_string_push(L, 1, fn, "source")) != NULL) {
		set_server_source(L, be, s);
		lua_pop(L, 1);
	}
	*want_tls = server_tls_keys(L, be, tls);
	server_doh_keys(L, be, tls);
}

/*
 * newServer() from the console while the workers run: the daemon has every
 * worker open its sockets towards the new server before any pool lists it
 * (dnslb/core/daemon.h), and the health checker checks it at once.
 */
static int
new_server_runtime(lua_State *L, struct dlb_lua_conf *lc, struct dlb_backend *be,
		   bool want_default)
{
	char err[256];
	int rc = dlb_daemon_add_backend(be, err, sizeof(err));

	if (rc < 0) {
		dlb_backend_free(be);
		return luaL_error(L, "newServer: %s", err);
	}
	if (rc > 0)
		return luaL_error(L, "newServer: %s: it is listed but down and in no pool", err);
	if (want_default && be->npools > 0) {
		dlb_config_pool_add(lc->cfg, "", be);
		pools_changed(L);
	}
	dlb_info("Added downstream server %s", be->addr_text);
	push_server(L, be);
	return 1;
}

static int
l_new_server(lua_State *L)
{
	struct dlb_lua_conf *lc = conf_get(L);
	struct dlb_backend *scratch, *be;
	struct dlb_tls_client_opts tls;
	bool want_default = false, want_tls = false;
	const char *weight_err = NULL;
	char err[512];

	/* Parse into GC-owned scratch memory: a Lua error from here on leaks nothing. */
	scratch = lua_newuserdatauv(L, sizeof(*scratch), 0);
	be = dlb_backend_new();
	if (be == NULL)
		return luaL_error(L, "newServer: out of memory");
	memcpy(scratch, be, sizeof(*scratch));
	free(be);

	if (lua_type(L, 1) == LUA_TSTRING)
		set_server_address(L, scratch, lua_tostring(L, 1));
	else if (lua_type(L, 1) == LUA_TTABLE)
		parse_server_table(L, scratch, &want_default, &weight_err, &tls, &want_tls);
	else
		return luaL_error(L, "newServer: expected an address string or a table");
	if (weight_err != NULL) {
		conf_log(L, DLB_LOG_ERR, "%s", weight_err);
		lua_pushnil(L);
		return 1;
	}
	if (lua_type(L, 1) == LUA_TTABLE)
		register_check_fn(L, lc, scratch);
	scratch->qps_limit_rt = scratch->qps;
	scratch->admin_file = scratch->admin;
	scratch->named_default = want_default;

	if (lc->cfg->nbackends >= DLB_MAX_BACKENDS)
		return luaL_error(L, "newServer: too many servers (at most %d)", DLB_MAX_BACKENDS);
	/*
	 * The TLS context last, so that no Lua error can leak it: its CA store
	 * and ciphers are checked here, --check-config included. A worker's
	 * replay of the file needs none (the config state's server has it).
	 */
	if (want_tls && lc->phase != DLB_LUA_PHASE_WORKER) {
		scratch->tls = dlb_tls_client_new(&tls, err, sizeof(err));
		if (scratch->tls == NULL)
			return luaL_error(L, "newServer: %s", err);
	}
	be = malloc(sizeof(*be));
	if (be == NULL) {
		dlb_tls_client_free(scratch->tls);
		return luaL_error(L, "newServer: out of memory");
	}
	memcpy(be, scratch, sizeof(*be));
	if (lc->phase == DLB_LUA_PHASE_RUNNING && dlb_daemon.running)
		return new_server_runtime(L, lc, be, want_default);
	if (dlb_config_add_backend(lc->cfg, be) != 0) {
		dlb_backend_free(be);
		return luaL_error(L, "newServer: too many pools (at most %d)", DLB_MAX_POOLS);
	}
	/* pool={"", "x"}: the default pool as well as the named ones */
	if (want_default && be->npools > 0)
		dlb_config_pool_add(lc->cfg, "", be);
	/* dnsdist says nothing of it under --check-config */
	if (lc->phase != DLB_LUA_PHASE_CHECK)
		conf_log(L, DLB_LOG_INFO, "Added downstream server %s", be->addr_text);
	push_server(L, be);
	return 1;
}

/* ---- server list -------------------------------------------------------- */

static struct dlb_backend *
find_server_by_uuid(struct dlb_config *cfg, const char *uuid)
{
	for (int i = 0; i < cfg->nbackends; i++)
		if (strcasecmp(cfg->backends[i]->uuid, uuid) == 0)
			return cfg->backends[i];
	return NULL;
}

static int
l_get_server(lua_State *L)
{
	struct dlb_config *cfg = conf_get(L)->cfg;
	struct dlb_backend *be;

	if (lua_type(L, 1) == LUA_TNUMBER) {
		lua_Integer n = dlb_lua_arg_int(L, 1, "getServer", 0, INT_MAX);

		if (n >= cfg->nbackends)
			return luaL_error(L, "getServer: no server with index %I", n);
		push_server(L, cfg->backends[dlb_config_backend_at(cfg, (int)n)]);
		return 1;
	}
	be = find_server_by_uuid(cfg, dlb_lua_arg_string(L, 1, "getServer"));
	if (be == NULL)
		lua_pushnil(L);
	else
		push_server(L, be);
	return 1;
}

static int
l_get_servers(lua_State *L)
{
	struct dlb_config *cfg = conf_get(L)->cfg;

	lua_createtable(L, cfg->nbackends, 0);
	for (int i = 0; i < cfg->nbackends; i++) {
		push_server(L, cfg->backends[dlb_config_backend_at(cfg, i)]);
		lua_rawseti(L, -2, i + 1);
	}
	return 1;
}

/*
 * rmServer(n | uuid | server). At config time the backend is detached and
 * freed (later indexes shift down, as in dnsdist). From the console
 * (RUNNING) workers may hold per-backend state by index, so the backend
 * stays in the list: it leaves every pool (no new traffic) and is forced
 * down; it disappears at the next restart.
 */
static int
l_rm_server(lua_State *L)
{
	struct dlb_lua_conf *lc = conf_get(L);
	struct dlb_config *cfg = lc->cfg;
	struct dlb_backend *be;

	if (lua_type(L, 1) == LUA_TNUMBER) {
		lua_Integer n = dlb_lua_arg_int(L, 1, "rmServer", 0, INT_MAX);

		if (n >= cfg->nbackends)
			return luaL_error(L, "rmServer: no server with index %I", n);
		be = cfg->backends[dlb_config_backend_at(cfg, (int)n)];
	} else if (lua_type(L, 1) == LUA_TSTRING) {
		be = find_server_by_uuid(cfg, lua_tostring(L, 1));
		if (be == NULL)
			return luaL_error(L, "rmServer: no server with id '%s'",
					  lua_tostring(L, 1));
	} else {
		be = check_server(L, 1);
	}

	if (lc->phase != DLB_LUA_PHASE_RUNNING) {
		dlb_config_remove_backend(cfg, be->index);
		return 0;
	}
	dlb_config_retire_backend(cfg, be);
	pools_changed(L);
	dlb_info("Removed downstream server %s from all pools and marked it down",
		 be->addr_text);
	return 0;
}

/* ---- packet caches ------------------------------------------------------ */

#define CACHE_TTL_MAX		((lua_Integer)UINT32_MAX)
#define CACHE_SHARDS_MAX	1024

enum cache_opt_kind {
	CACHE_OPT_U32,
	CACHE_OPT_BOOL,
};

/* The plain newPacketCache() options: name, type, field, range. */
static const struct cache_opt_field {
	const char *key;
	enum cache_opt_kind kind;
	size_t off;
	lua_Integer lo, hi;
} cache_opt_fields[] = {
	{ "maxTTL", CACHE_OPT_U32, offsetof(struct dlb_cache_opts, max_ttl), 0, CACHE_TTL_MAX },
	{ "minTTL", CACHE_OPT_U32, offsetof(struct dlb_cache_opts, min_ttl), 0, CACHE_TTL_MAX },
	{ "temporaryFailureTTL", CACHE_OPT_U32, offsetof(struct dlb_cache_opts, temp_failure_ttl),
	  0, CACHE_TTL_MAX },
	{ "maxNegativeTTL", CACHE_OPT_U32, offsetof(struct dlb_cache_opts, max_negative_ttl), 0,
	  CACHE_TTL_MAX },
	{ "staleTTL", CACHE_OPT_U32, offsetof(struct dlb_cache_opts, stale_ttl), 0, CACHE_TTL_MAX },
	{ "numberOfShards", CACHE_OPT_U32, offsetof(struct dlb_cache_opts, shards), 1,
	  CACHE_SHARDS_MAX },
	{ "maximumEntrySize", CACHE_OPT_U32, offsetof(struct dlb_cache_opts, maximum_entry_size),
	  DLB_DNS_HDR, 65535 },
	{ "dontAge", CACHE_OPT_BOOL, offsetof(struct dlb_cache_opts, dont_age), 0, 0 },
	{ "keepStaleData", CACHE_OPT_BOOL, offsetof(struct dlb_cache_opts, keep_stale_data), 0, 0 },
	{ "parseECS", CACHE_OPT_BOOL, offsetof(struct dlb_cache_opts, parse_ecs), 0, 0 },
	{ "cookieHashing", CACHE_OPT_BOOL, offsetof(struct dlb_cache_opts, cookie_hashing), 0, 0 },
	{ "deferrableInsertLock", CACHE_OPT_BOOL,
	  offsetof(struct dlb_cache_opts, deferrable_insert_lock), 0, 0 },
	{ "l2", CACHE_OPT_BOOL, offsetof(struct dlb_cache_opts, l2), 0, 0 },
	{ "l2MaxInFlight", CACHE_OPT_U32, offsetof(struct dlb_cache_opts, l2_max_in_flight), 1,
	  65536 },
};

/* every key of the table form: the fields above and the ones parsed by hand */
static const char *const cache_keys[] = {
	"maxTTL", "minTTL", "temporaryFailureTTL", "maxNegativeTTL", "staleTTL",
	"numberOfShards", "maximumEntrySize", "dontAge", "keepStaleData", "parseECS",
	"cookieHashing", "deferrableInsertLock", "skipOptions", "maxMemory", "payloadRanks",
	"prefetch", "l2", "l2Budget", "l2MaxInFlight", "l2Name", NULL,
};

/* the deprecated positional form, from argument #2 on */
static const char *const cache_positional[] = {
	"maxTTL", "minTTL", "temporaryFailureTTL", "staleTTL", "dontAge", "numberOfShards",
	"deferrableInsertLock", "maxNegativeTTL", "parseECS",
};

static const struct cache_opt_field *
cache_opt_field(const char *key)
{
	for (size_t i = 0; i < sizeof(cache_opt_fields) / sizeof(cache_opt_fields[0]); i++)
		if (strcmp(cache_opt_fields[i].key, key) == 0)
			return &cache_opt_fields[i];
	return NULL;
}

/* Store the value at stack @idx into the option @f of @o; @what names it in errors. */
static void
set_cache_opt(lua_State *L, int idx, const char *fn, const char *what,
	      const struct cache_opt_field *f, struct dlb_cache_opts *o)
{
	char *field = (char *)o + f->off;

	if (f->kind == CACHE_OPT_BOOL) {
		bool b = dlb_lua_check_bool_at(L, idx, fn, what);

		memcpy(field, &b, sizeof(b));
	} else {
		uint32_t v = (uint32_t)dlb_lua_check_int_at(L, idx, fn, what, f->lo, f->hi);

		memcpy(field, &v, sizeof(v));
	}
}

/* "123456", "512K", "64M", "2G" (binary multiples) into bytes. */
static bool
parse_byte_size(const char *s, uint64_t *out)
{
	uint64_t v = 0, mult = 1;
	const char *p = s;

	if (!isdigit((unsigned char)*p))
		return false;
	for (; isdigit((unsigned char)*p); p++) {
		if (v > (UINT64_MAX - 9) / 10)
			return false;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	switch (*p) {
	case '\0':
		break;
	case 'k': case 'K':
		mult = 1024;
		break;
	case 'm': case 'M':
		mult = 1024 * 1024;
		break;
	case 'g': case 'G':
		mult = 1024 * 1024 * 1024;
		break;
	default:
		return false;
	}
	if (*p != '\0' && p[1] != '\0')
		return false;
	if (v > (uint64_t)INT64_MAX / mult)
		return false;
	*out = v * mult;
	return true;
}

static int
cmp_u16(const void *a, const void *b)
{
	uint16_t x = *(const uint16_t *)a, y = *(const uint16_t *)b;

	return (x > y) - (x < y);
}

/* skipOptions = {code, ...}: added to the codes the defaults already skip. */
static void
parse_skip_options(lua_State *L, int t, const char *fn, struct dlb_cache_opts *o)
{
	lua_Integer n;

	if (lua_type(L, t) != LUA_TTABLE)
		luaL_error(L, "%s: 'skipOptions' must be a table of EDNS option codes", fn);
	n = (lua_Integer)lua_rawlen(L, t);
	for (lua_Integer i = 1; i <= n; i++) {
		uint16_t code;
		bool seen = false;

		lua_rawgeti(L, t, i);
		code = (uint16_t)dlb_lua_check_int_at(L, -1, fn, "'skipOptions' entry", 0, 65535);
		lua_pop(L, 1);
		for (int j = 0; j < o->nskip; j++)
			seen = seen || o->skip_options[j] == code;
		if (seen)
			continue;
		if (o->nskip >= DLB_CACHE_MAX_SKIP)
			luaL_error(L, "%s: at most %d codes in 'skipOptions'", fn,
				   DLB_CACHE_MAX_SKIP);
		o->skip_options[o->nskip++] = code;
	}
}

/* payloadRanks = {512, 1232, 4096}: sorted, duplicates dropped. */
static void
parse_payload_ranks(lua_State *L, int t, const char *fn, struct dlb_cache_opts *o)
{
	uint16_t ranks[DLB_CACHE_MAX_RANKS];
	lua_Integer n;
	int nranks = 0;

	if (lua_type(L, t) != LUA_TTABLE)
		luaL_error(L, "%s: 'payloadRanks' must be a table of payload sizes", fn);
	n = (lua_Integer)lua_rawlen(L, t);
	for (lua_Integer i = 1; i <= n; i++) {
		uint16_t size;
		bool seen = false;

		lua_rawgeti(L, t, i);
		size = (uint16_t)dlb_lua_check_int_at(L, -1, fn, "'payloadRanks' entry", 512,
						      65535);
		lua_pop(L, 1);
		for (int j = 0; j < nranks; j++)
			seen = seen || ranks[j] == size;
		if (seen)
			continue;
		if (nranks >= DLB_CACHE_MAX_RANKS)
			luaL_error(L, "%s: at most %d sizes in 'payloadRanks'", fn,
				   DLB_CACHE_MAX_RANKS);
		ranks[nranks++] = size;
	}
	qsort(ranks, (size_t)nranks, sizeof(ranks[0]), cmp_u16);
	memcpy(o->payload_ranks, ranks, sizeof(ranks[0]) * (size_t)nranks);
	o->nranks = nranks;
}

/* newPacketCache(maxEntries, {options}): the table at index 2. */
static void
parse_cache_table(lua_State *L, const char *fn, struct dlb_cache_opts *o)
{
	lua_Number frac = 0;

	dlb_lua_warn_unknown_keys(L, 2, fn, "option", cache_keys);
	for (size_t i = 0; i < sizeof(cache_opt_fields) / sizeof(cache_opt_fields[0]); i++) {
		const struct cache_opt_field *f = &cache_opt_fields[i];
		char what[64];

		if (lua_getfield(L, 2, f->key) != LUA_TNIL) {
			snprintf(what, sizeof(what), "'%s'", f->key);
			set_cache_opt(L, -1, fn, what, f, o);
		}
		lua_pop(L, 1);
	}

	if (lua_getfield(L, 2, "skipOptions") != LUA_TNIL)
		parse_skip_options(L, lua_gettop(L), fn, o);
	lua_pop(L, 1);

	if (lua_getfield(L, 2, "payloadRanks") != LUA_TNIL)
		parse_payload_ranks(L, lua_gettop(L), fn, o);
	lua_pop(L, 1);

	switch (lua_getfield(L, 2, "maxMemory")) {
	case LUA_TNIL:
		break;
	case LUA_TSTRING:
		if (parse_byte_size(lua_tostring(L, -1), &o->max_bytes))
			break;
		/* fall through */
	default: {
		lua_Integer v = 0;

		if (lua_type(L, -1) != LUA_TNUMBER || !dlb_lua_to_integer(L, -1, &v) || v < 0)
			luaL_error(L, "%s: 'maxMemory' must be a number of bytes or a size like "
				   "\"64M\" (suffixes K, M, G)", fn);
		o->max_bytes = (uint64_t)v;
	}
	}
	lua_pop(L, 1);

	if (lua_getfield(L, 2, "prefetch") != LUA_TNIL) {
		if (!dlb_lua_to_number(L, -1, &frac) || frac < 0 || frac >= 1)
			luaL_error(L, "%s: 'prefetch' must be a fraction of the TTL, at least 0 "
				   "and below 1", fn);
		o->prefetch = frac;
	}
	lua_pop(L, 1);

	/* the second level in Redis (dnslb/pipeline/l2cache.h) */
	if (lua_getfield(L, 2, "l2Budget") != LUA_TNIL) {
		if (!dlb_lua_to_number(L, -1, &frac) || !(frac >= 0.0001 && frac <= 1))
			luaL_error(L, "%s: 'l2Budget' must be a number of seconds, 0.0001..1 "
				   "(e.g. 0.003)", fn);
		o->l2_budget = frac;
	}
	lua_pop(L, 1);
	if (lua_getfield(L, 2, "l2Name") != LUA_TNIL) {
		size_t n = 0;
		const char *name = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &n) : NULL;

		if (name == NULL || n >= sizeof(o->l2_name) || strpbrk(name, " \t\r\n") != NULL)
			luaL_error(L, "%s: 'l2Name' must be a string of at most %d characters "
				   "without spaces", fn, (int)sizeof(o->l2_name) - 1);
		memcpy(o->l2_name, name, n + 1);
	}
	lua_pop(L, 1);
}

/*
 * The deprecated form newPacketCache(maxEntries, maxTTL, minTTL,
 * temporaryFailureTTL, staleTTL, dontAge, numberOfShards,
 * deferrableInsertLock, maxNegativeTTL, parseECS); nil keeps a default.
 */
static void
parse_cache_positional(lua_State *L, const char *fn, struct dlb_cache_opts *o)
{
	int top = lua_gettop(L);
	size_t n = sizeof(cache_positional) / sizeof(cache_positional[0]);

	if (top > (int)n + 1)
		luaL_error(L, "%s: at most %d arguments", fn, (int)n + 1);
	conf_log(L, DLB_LOG_WARN, "%s: the positional form is deprecated, use "
		 "newPacketCache(maxEntries, {options})", fn);
	for (int arg = 2; arg <= top; arg++) {
		const struct cache_opt_field *f = cache_opt_field(cache_positional[arg - 2]);
		char what[64];

		if (lua_isnil(L, arg))
			continue;
		snprintf(what, sizeof(what), "'%s' (argument #%d)", f->key, arg);
		set_cache_opt(L, arg, fn, what, f, o);
	}
}

/* Push the one PacketCache object of @c. */
static void
push_cache(lua_State *L, struct dlb_cache *c)
{
	lua_rawgetp(L, LUA_REGISTRYINDEX, &caches_key);
	if (lua_rawgetp(L, -1, c) == LUA_TNIL) {
		struct cache_ref *r;

		lua_pop(L, 1);
		r = lua_newuserdatauv(L, sizeof(*r), 0);
		r->c = c;
		luaL_setmetatable(L, MT_CACHE);
		lua_pushvalue(L, -1);
		lua_rawsetp(L, -3, c);
	}
	lua_remove(L, -2);
}

static struct dlb_cache *
check_cache(lua_State *L, int idx)
{
	struct dlb_cache *c = ((struct cache_ref *)luaL_checkudata(L, idx, MT_CACHE))->c;

	/* worker states: a cache of the replay that the real config does not have */
	if (c == NULL)
		luaL_error(L, "this packet cache does not exist in the running configuration");
	return c;
}

/* The main thread's RCU record, which the operations that remove entries need. */
static struct dlb_rcu_thread *
conf_rcu(lua_State *L, const char *fn)
{
	struct dlb_rcu_thread *rt = conf_get(L)->rt;

	if (rt == NULL)
		luaL_error(L, "%s: not available (no RCU record for the configuration thread)", fn);
	return rt;
}

/*
 * A worker state replaying the config (lua/worker.h): the cache methods that
 * remove or dump entries already ran in the config state, on the real
 * caches; here they return 0 and do nothing. @return true then, with 0 pushed.
 */
static bool
replaying(lua_State *L)
{
	if (!dlb_lua_phase_throwaway(conf_get(L)->phase))
		return false;
	lua_pushinteger(L, 0);
	return true;
}

/* Free what the last operation retired, if no reader section is open here. */
static void
conf_rcu_poll(struct dlb_rcu_thread *rt)
{
	if (rt->depth == 0)
		dlb_rcu_poll(rt);
}

static int
l_new_packet_cache(lua_State *L)
{
	const char *fn = "newPacketCache";
	struct dlb_config *cfg = conf_get(L)->cfg;
	struct dlb_cache_opts o, def;
	struct cache_ref *r;
	struct dlb_cache *c;

	dlb_cache_opts_default(&o);
	def = o;
	o.max_entries = (uint32_t)dlb_lua_check_int_at(L, 1, fn, "maxEntries", 1,
						       (lua_Integer)UINT32_MAX);
	if (lua_type(L, 2) == LUA_TTABLE) {
		if (lua_gettop(L) > 2)
			return luaL_error(L, "%s: expected (maxEntries, {options})", fn);
		parse_cache_table(L, fn, &o);
	} else if (lua_gettop(L) >= 2) {
		parse_cache_positional(L, fn, &o);
	}
	if (o.max_entries < o.shards) {
		/* dnsdist's warning, only when the default number of shards is cut */
		if (o.shards == def.shards)
			conf_log(L, DLB_LOG_WARN, "The number of entries (%u) in the packet cache "
				 "is smaller than the number of shards (%u), decreasing the number "
				 "of shards to %u", o.max_entries, o.shards, o.max_entries);
		o.shards = o.max_entries;
	}
	if (cfg->ncaches < (int)(sizeof(cfg->caches) / sizeof(cfg->caches[0])))
		cfg->cache_opts[cfg->ncaches] = o;	/* as asked: what a reload compares */
	/* worker and reload states: never used, so the smallest cache there is */
	if (dlb_lua_phase_throwaway(conf_get(L)->phase)) {
		o.max_entries = 1;
		o.shards = 1;
		o.max_bytes = 0;
	}
	if (cfg->ncaches >= (int)(sizeof(cfg->caches) / sizeof(cfg->caches[0])))
		return luaL_error(L, "%s: too many packet caches (at most %d)", fn,
				  (int)(sizeof(cfg->caches) / sizeof(cfg->caches[0])));

	/* allocate the Lua side first: once the cache exists nothing may fail but the registry */
	r = lua_newuserdatauv(L, sizeof(*r), 0);
	c = dlb_cache_new(&o);
	if (c == NULL)
		return luaL_error(L, "%s: cannot create a cache of %I entries (out of memory)", fn,
				  (lua_Integer)o.max_entries);
	cfg->caches[cfg->ncaches] = c;
	__atomic_store_n(&cfg->ncaches, cfg->ncaches + 1, __ATOMIC_RELEASE);
	r->c = c;
	luaL_setmetatable(L, MT_CACHE);

	lua_rawgetp(L, LUA_REGISTRYINDEX, &caches_key);
	lua_pushvalue(L, -2);
	lua_rawsetp(L, -2, c);
	lua_pop(L, 1);
	return 1;
}

static void
push_cache_fill(lua_State *L, struct dlb_cache *c)
{
	struct dlb_cache_stats st;

	dlb_cache_get_stats(c, &st);
	lua_pushfstring(L, "%I/%I", (lua_Integer)st.entries, (lua_Integer)st.max_entries);
}

static int
l_cache_to_string(lua_State *L)
{
	push_cache_fill(L, check_cache(L, 1));
	return 1;
}

static int
l_cache_is_full(lua_State *L)
{
	lua_pushboolean(L, dlb_cache_is_full(check_cache(L, 1)));
	return 1;
}

static int
l_cache_print_stats(lua_State *L)
{
	/* dnsdist 1.7's lines, then dnslb's */
	static const char *const labels[] = {
		"Hits", "Misses", "Deferred inserts", "Deferred lookups", "Lookup Collisions",
		"Insert Collisions", "TTL Too Shorts", "Stale hits", "Prefetches", "Evictions",
	};
	struct dlb_cache_stats st;

	dlb_cache_get_stats(check_cache(L, 1), &st);
	{
		const uint64_t values[] = {
			st.hits, st.misses, st.deferred_inserts, st.deferred_lookups,
			st.lookup_collisions, st.insert_collisions, st.ttl_too_shorts,
			st.stale_hits, st.prefetches, st.evictions,
		};

		lua_pushfstring(L, "Entries: %I/%I", (lua_Integer)st.entries,
				(lua_Integer)st.max_entries);
		dlb_lua_print(L, lua_tostring(L, -1));
		lua_pop(L, 1);
		for (size_t i = 0; i < sizeof(labels) / sizeof(labels[0]); i++) {
			lua_pushfstring(L, "%s: %I", labels[i], (lua_Integer)values[i]);
			dlb_lua_print(L, lua_tostring(L, -1));
			lua_pop(L, 1);
		}
	}
	lua_pushfstring(L, "Memory: %I bytes", (lua_Integer)st.bytes);
	dlb_lua_print(L, lua_tostring(L, -1));
	lua_pop(L, 1);
	return 0;
}

static int
l_cache_get_stats(lua_State *L)
{
	static const char *const keys[] = {
		"entries", "maxEntries", "hits", "misses", "deferredInserts", "deferredLookups",
		"lookupCollisions", "insertCollisions", "ttlTooShorts", "staleHits", "prefetches",
		"evictions", "bytes",
	};
	struct dlb_cache_stats st;

	dlb_cache_get_stats(check_cache(L, 1), &st);
	{
		const uint64_t values[] = {
			st.entries, st.max_entries, st.hits, st.misses, st.deferred_inserts,
			st.deferred_lookups, st.lookup_collisions, st.insert_collisions,
			st.ttl_too_shorts, st.stale_hits, st.prefetches, st.evictions, st.bytes,
		};

		lua_createtable(L, 0, (int)(sizeof(keys) / sizeof(keys[0])));
		for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
			lua_pushinteger(L, (lua_Integer)values[i]);
			lua_setfield(L, -2, keys[i]);
		}
	}
	return 1;
}

/* expunge(n): remove entries until at most n remain. @return the number removed. */
static int
l_cache_expunge(lua_State *L)
{
	struct dlb_cache *c = check_cache(L, 1);
	size_t keep = (size_t)dlb_lua_check_int_at(L, 2, "expunge", "argument #1", 0,
						   LUA_MAXINTEGER);
	struct dlb_rcu_thread *rt;
	size_t removed;

	if (replaying(L))
		return 1;
	rt = conf_rcu(L, "expunge");
	removed = dlb_cache_expunge(c, rt, keep);
	conf_rcu_poll(rt);
	lua_pushinteger(L, (lua_Integer)removed);
	return 1;
}

/* purgeExpired(n): remove expired entries until at most n remain. */
static int
l_cache_purge_expired(lua_State *L)
{
	struct dlb_cache *c = check_cache(L, 1);
	size_t keep = (size_t)dlb_lua_check_int_at(L, 2, "purgeExpired", "argument #1", 0,
						   LUA_MAXINTEGER);
	struct dlb_rcu_thread *rt;
	size_t removed;

	if (replaying(L))
		return 1;
	rt = conf_rcu(L, "purgeExpired");
	removed = dlb_cache_purge_expired(c, rt, keep, (double)time(NULL));
	conf_rcu_poll(rt);
	lua_pushinteger(L, (lua_Integer)removed);
	return 1;
}

/*
 * expungeByName(name[, qtype = ANY[, suffixMatch = false]]): prints
 * "Expunged N records" and returns nothing, as dnsdist does.
 */
static int
l_cache_expunge_by_name(lua_State *L)
{
	const char *fn = "expungeByName";
	struct dlb_cache *c = check_cache(L, 1);
	uint8_t name[DLB_MAX_NAME];
	uint16_t qtype = 255;
	bool suffix = false;
	struct dlb_rcu_thread *rt;
	size_t removed, len;

	/* a DNSName (dnsdist's type) or a string */
	len = dlb_lua_check_name_lc(L, 2, fn, name);
	if (!lua_isnoneornil(L, 3))
		qtype = (uint16_t)check_rrtype(L, 3, fn, "qtype", dlb_qtype_names);
	if (!lua_isnoneornil(L, 4))
		suffix = dlb_lua_check_bool_at(L, 4, fn, "suffixMatch");
	if (replaying(L))
		return 0;
	rt = conf_rcu(L, fn);

	removed = dlb_cache_expunge_by_name(c, rt, name, len, qtype, suffix);
	conf_rcu_poll(rt);
	lua_pushfstring(L, "Expunged %I records", (lua_Integer)removed);
	dlb_lua_print(L, lua_tostring(L, -1));
	lua_pop(L, 1);
	return 0;
}

/*
 * dump(file): one line per entry. Like dnsdist, an existing file is never
 * overwritten, and failures are reported, not raised.
 */
static int
l_cache_dump(lua_State *L)
{
	struct dlb_cache *c = check_cache(L, 1);
	const char *path;
	struct dlb_rcu_thread *rt;
	long n;
	int err;

	if (lua_type(L, 2) != LUA_TSTRING)
		return luaL_error(L, "dump: the file name must be a string");
	path = lua_tostring(L, 2);
	if (replaying(L))
		return 1;
	rt = conf_rcu(L, "dump");

	n = dlb_cache_dump(c, rt, path, (double)time(NULL));
	err = errno;
	conf_rcu_poll(rt);
	if (n < 0)
		lua_pushfstring(L, "Error opening dump file for writing: %s", strerror(err));
	else
		lua_pushfstring(L, "Dumped %I records", (lua_Integer)n);
	dlb_lua_print(L, lua_tostring(L, -1));
	lua_pop(L, 1);
	return 0;
}

static const luaL_Reg cache_methods[] = {
	{ "printStats", l_cache_print_stats },
	{ "getStats", l_cache_get_stats },
	{ "expunge", l_cache_expunge },
	{ "expungeByName", l_cache_expunge_by_name },
	{ "purgeExpired", l_cache_purge_expired },
	{ "dump", l_cache_dump },
	{ "isFull", l_cache_is_full },
	{ "toString", l_cache_to_string },
	{ NULL, NULL },
};

static int
l_set_stale_cache_entries_ttl(lua_State *L)
{
	uint32_t ttl = (uint32_t)dlb_lua_arg_int(L, 1, "setStaleCacheEntriesTTL", 0, CACHE_TTL_MAX);

	conf_get(L)->cfg->set.stale_cache_ttl = ttl;
	return conf_publish(L, "setStaleCacheEntriesTTL");
}

static int
l_set_serve_stale_on_timeout(lua_State *L)
{
	bool on = dlb_lua_arg_bool(L, 1, "setServeStaleOnTimeout");

	conf_get(L)->cfg->set.stale_on_timeout = on;
	return conf_publish(L, "setServeStaleOnTimeout");
}

static int
l_set_cache_cleaning_delay(lua_State *L)
{
	int delay = (int)dlb_lua_arg_int(L, 1, "setCacheCleaningDelay", 1, INT_MAX);

	conf_get(L)->cfg->set.cache_cleaning_delay = delay;
	return conf_publish(L, "setCacheCleaningDelay");
}

static int
l_set_cache_cleaning_percentage(lua_State *L)
{
	int pct = (int)dlb_lua_arg_int(L, 1, "setCacheCleaningPercentage", 0, 100);

	conf_get(L)->cfg->set.cache_cleaning_pct = pct;
	return conf_publish(L, "setCacheCleaningPercentage");
}

/* ---- pools and policies ------------------------------------------------- */

static struct dlb_pool *
get_pool(lua_State *L, const char *fn, const char *name)
{
	struct dlb_lua_conf *lc = conf_get(L);
	struct dlb_pool *p;

	/* worker states: a rule reads the real config, it never adds to it */
	if (lc->phase == DLB_LUA_PHASE_RULES) {
		p = dlb_config_find_pool(lc->cfg, name);
		if (p == NULL)
			luaL_error(L, "%s: no pool '%s' (a rule cannot create one)", fn, name);
		return p;
	}
	p = dlb_config_get_pool(lc->cfg, name);
	if (p == NULL)
		luaL_error(L, "%s: cannot create pool '%s' (at most %d pools of names up to 63 "
			   "characters)", fn, name, DLB_MAX_POOLS);
	return p;
}

static int
l_get_pool(lua_State *L)
{
	struct dlb_pool *p = get_pool(L, "getPool", dlb_lua_arg_string(L, 1, "getPool"));
	struct pool_ref *r = lua_newuserdatauv(L, sizeof(*r), 0);

	snprintf(r->name, sizeof(r->name), "%s", p->name);
	luaL_setmetatable(L, MT_POOL);
	return 1;
}

static int
l_pool_get_name(lua_State *L)
{
	lua_pushstring(L, ((struct pool_ref *)luaL_checkudata(L, 1, MT_POOL))->name);
	return 1;
}

static int
l_pool_tostring(lua_State *L)
{
	lua_pushfstring(L, "ServerPool \"%s\"",
			((struct pool_ref *)luaL_checkudata(L, 1, MT_POOL))->name);
	return 1;
}

/* The pool a ServerPool object names (pools are never freed). */
static struct dlb_pool *
check_pool(lua_State *L, int idx, const char *fn)
{
	return get_pool(L, fn, ((struct pool_ref *)luaL_checkudata(L, idx, MT_POOL))->name);
}

/*
 * setCache/unsetCache work at runtime too: workers load pool->cache per
 * query, and a cache is never freed before dlb_config_free(), so a worker
 * still using the old pointer reads a live cache.
 */
static int
l_pool_set_cache(lua_State *L)
{
	struct dlb_pool *p = check_pool(L, 1, "setCache");
	struct dlb_cache *c = check_cache(L, 2);

	not_from_rules(L, "setCache");
	p->cache = c;
	return conf_publish(L, "setCache");
}

static int
l_pool_get_cache(lua_State *L)
{
	struct dlb_cache *c = __atomic_load_n(&check_pool(L, 1, "getCache")->cache,
					      __ATOMIC_ACQUIRE);

	if (c == NULL)
		lua_pushnil(L);
	else
		push_cache(L, c);
	return 1;
}

static int
l_pool_unset_cache(lua_State *L)
{
	struct dlb_pool *p = check_pool(L, 1, "unsetCache");

	not_from_rules(L, "unsetCache");
	p->cache = NULL;
	return conf_publish(L, "unsetCache");
}

/*
 * setECS(b): a query of this pool that finds no server available still gets
 * the client's ECS option in its cache key (dnsdist: for the stale entries
 * of useClientSubnet servers).
 */
static int
l_pool_set_ecs(lua_State *L)
{
	struct dlb_pool *p = check_pool(L, 1, "setECS");
	bool on = dlb_lua_check_bool_at(L, 2, "setECS", "value");

	__atomic_store_n(&p->use_ecs, on, __ATOMIC_RELAXED);
	return 0;
}

static int
l_pool_get_ecs(lua_State *L)
{
	lua_pushboolean(L, __atomic_load_n(&check_pool(L, 1, "getECS")->use_ecs, __ATOMIC_RELAXED));
	return 1;
}

static const luaL_Reg pool_methods[] = {
	{ "getName", l_pool_get_name },
	{ "setECS", l_pool_set_ecs },
	{ "getECS", l_pool_get_ecs },
	{ "setCache", l_pool_set_cache },
	{ "getCache", l_pool_get_cache },
	{ "unsetCache", l_pool_unset_cache },
	{ NULL, NULL },
};

static int
cmp_pool_names(const void *a, const void *b)
{
	return strcmp((*(const struct dlb_pool *const *)a)->name,
		      (*(const struct dlb_pool *const *)b)->name);
}

/* One showPools() row: dnsdist's boost format "%1$-20.20s %|25t|%2$20s %|25t|%3$20s %|50t|%4%". */
static void
print_pool_row(lua_State *L, const char *name, const char *cache, const char *policy,
	       const char *servers)
{
	char head[256];

	snprintf(head, sizeof(head), "%-20.20s     %20s %20s ", name, cache, policy);
	lua_pushfstring(L, "%s%s", head, servers);
	dlb_lua_print(L, lua_tostring(L, -1));
	lua_pop(L, 1);
}

/* showPools(): Name, Cache ("entries/max"), ServerPolicy, Servers; pools sorted by name. */
static int
l_show_pools(lua_State *L)
{
	struct dlb_config *cfg = conf_get(L)->cfg;
	struct dlb_pool *pools[DLB_MAX_POOLS];
	int n = cfg->npools;

	memcpy(pools, cfg->pools, sizeof(pools[0]) * (size_t)n);
	qsort(pools, (size_t)n, sizeof(pools[0]), cmp_pool_names);
	print_pool_row(L, "Name", "Cache", "ServerPolicy", "Servers");
	for (int i = 0; i < n; i++) {
		struct dlb_pool *p = pools[i];
		struct dlb_cache *c = __atomic_load_n(&p->cache, __ATOMIC_ACQUIRE);
		int policy = p->policy;
		int members = __atomic_load_n(&p->n, __ATOMIC_ACQUIRE);
		luaL_Buffer b;

		if (c != NULL)
			push_cache_fill(L, c);
		else
			lua_pushliteral(L, "");
		luaL_buffinit(L, &b);
		for (int j = 0; j < members; j++) {
			const struct dlb_backend *be = p->members[j];

			if (j > 0)
				luaL_addstring(&b, ", ");
			/* dnsdist 1.7.3: "name address", the name being the
			 * address when none was given */
			luaL_addstring(&b, be->name);
			luaL_addchar(&b, ' ');
			luaL_addstring(&b, be->addr_text);
		}
		luaL_pushresult(&b);
		print_pool_row(L, p->name, lua_tostring(L, -2),
			       dlb_config_policy_name(cfg, policy >= 0 ? policy : cfg->set.policy),
			       lua_tostring(L, -1));
		lua_pop(L, 2);
	}
	return 0;
}

static int
l_get_pool_servers(lua_State *L)
{
	struct dlb_pool *p = dlb_config_find_pool(conf_get(L)->cfg,
						  dlb_lua_arg_string(L, 1, "getPoolServers"));
	int n = p ? p->n : 0;

	lua_createtable(L, n, 0);
	for (int i = 0; i < n; i++) {
		push_server(L, p->members[i]);
		lua_rawseti(L, -2, i + 1);
	}
	return 1;
}

static int
check_policy(lua_State *L, int idx)
{
	return ((struct policy_ref *)luaL_checkudata(L, idx, MT_POLICY))->policy;
}

static int
l_policy_index(lua_State *L)
{
	int p = check_policy(L, 1);
	const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "";

	if (strcmp(k, "name") == 0)
		lua_pushstring(L, dlb_config_policy_name(conf_get(L)->cfg, p));
	else if (strcmp(k, "policy") == 0 && p >= DLB_POLICY_LUA)
		lua_getiuservalue(L, 1, 1);	/* a Lua policy's function */
	else
		lua_pushnil(L);
	return 1;
}

static int
l_policy_tostring(lua_State *L)
{
	lua_pushstring(L, dlb_config_policy_name(conf_get(L)->cfg, check_policy(L, 1)));
	return 1;
}

static int
l_set_server_policy(lua_State *L)
{
	int p = check_policy(L, 1);

	conf_get(L)->cfg->set.policy = p;
	return conf_publish(L, "setServerPolicy");
}

static int
l_show_server_policy(lua_State *L)
{
	dlb_lua_print(L, dlb_config_policy_name(conf_get(L)->cfg, conf_get(L)->cfg->set.policy));
	return 0;
}

static int
l_set_pool_server_policy(lua_State *L)
{
	int p = check_policy(L, 1);
	struct dlb_pool *pool = get_pool(L, "setPoolServerPolicy",
					 dlb_lua_arg_string(L, 2, "setPoolServerPolicy"));

	pool->policy = p;
	return conf_publish(L, "setPoolServerPolicy");
}

static int
l_show_pool_server_policy(lua_State *L)
{
	struct dlb_config *cfg = conf_get(L)->cfg;
	struct dlb_pool *pool =
		dlb_config_find_pool(cfg, dlb_lua_arg_string(L, 1, "showPoolServerPolicy"));

	/* a pool without its own policy uses the global one, and dnsdist prints that */
	dlb_lua_print(L, dlb_config_policy_name(cfg, pool && pool->policy >= 0 ? pool->policy
									       : cfg->set.policy));
	return 0;
}

/*
 * newServerPolicy(name, function(servers, dq) ... end): a Lua policy. The
 * function is numbered like LuaAction functions (lua/worker.h), so each
 * worker runs its own state's copy; it returns a Server of `servers` (or its
 * 1-based position), or nil for "no server".
 */
static int
new_lua_policy_ffi(lua_State *L, const char *fn, int name_idx, int fn_idx, bool ffi)
{
	struct dlb_config *cfg = conf_get(L)->cfg;
	const char *name = dlb_lua_arg_string(L, name_idx, fn);
	struct dlb_lua_policy *lp;
	struct policy_ref *r;

	luaL_checktype(L, fn_idx, LUA_TFUNCTION);
	if (cfg->set.nlua_policies >= DLB_MAX_LUA_POLICIES)
		return luaL_error(L, "%s: too many Lua policies (%d)", fn, DLB_MAX_LUA_POLICIES);
	lp = &cfg->set.lua_policies[cfg->set.nlua_policies];
	snprintf(lp->name, sizeof(lp->name), "%s", name);
	lp->ffi = ffi;
	lp->fn = dlb_lua_register_fn(L, fn_idx, lp->src, sizeof(lp->src));
	r = lua_newuserdatauv(L, sizeof(*r), 1);
	r->policy = DLB_POLICY_LUA + cfg->set.nlua_policies;
	lua_pushvalue(L, fn_idx);
	lua_setiuservalue(L, -2, 1);
	luaL_setmetatable(L, MT_POLICY);
	cfg->set.nlua_policies++;	/* workers see it with the next publication */
	conf_publish(L, fn);
	return 1;
}

static int
new_lua_policy(lua_State *L, const char *fn, int name_idx, int fn_idx)
{
	return new_lua_policy_ffi(L, fn, name_idx, fn_idx, false);
}

static int
l_new_server_policy(lua_State *L)
{
	return new_lua_policy(L, "newServerPolicy", 1, 2);
}

/* setServerPolicyLua(name, function) */
static int
l_set_server_policy_lua(lua_State *L)
{
	new_lua_policy(L, "setServerPolicyLua", 1, 2);
	conf_get(L)->cfg->set.policy = check_policy(L, -1);
	return conf_publish(L, "setServerPolicyLua");
}

/* setPoolServerPolicyLua(name, function, pool) */
static int
l_set_pool_server_policy_lua(lua_State *L)
{
	const char *fn = "setPoolServerPolicyLua";
	struct dlb_pool *pool = get_pool(L, fn, dlb_lua_arg_string(L, 3, fn));

	new_lua_policy(L, fn, 1, 2);
	pool->policy = check_policy(L, -1);
	return conf_publish(L, "setPoolServerPolicyLua");
}

/*
 * The FFI policies (dnsdist 1.7, LuaJIT there): f(servers, dq) gets the
 * pool's Server objects as the list of the ffi module's
 * dnsdist_ffi_servers_list_* functions (lua/compat_lua.c) and returns the
 * 0-based index of the server. PerThread: the code returns the function.
 */
static void
ffi_policy(lua_State *L, const char *fn, bool per_thread, int pool_arg)
{
	struct dlb_pool *pool = NULL;

	dlb_lua_arg_string(L, 1, fn);
	if (pool_arg > 0)
		pool = get_pool(L, fn, dlb_lua_arg_string(L, pool_arg, fn));
	if (per_thread) {
		dlb_lua_per_thread_fn(L, 2, fn);
		lua_replace(L, 2);
	} else {
		dlb_lua_arg_function(L, 2, fn);
	}
	new_lua_policy_ffi(L, fn, 1, 2, true);
	if (pool != NULL)
		pool->policy = check_policy(L, -1);
	else
		conf_get(L)->cfg->set.policy = check_policy(L, -1);
	conf_publish(L, fn);
}

static int
l_set_server_policy_lua_ffi(lua_State *L)
{
	ffi_policy(L, "setServerPolicyLuaFFI", false, 0);
	return 0;
}

static int
l_set_pool_server_policy_lua_ffi(lua_State *L)
{
	ffi_policy(L, "setPoolServerPolicyLuaFFI", false, 3);
	return 0;
}

static int
l_set_server_policy_lua_ffi_per_thread(lua_State *L)
{
	ffi_policy(L, "setServerPolicyLuaFFIPerThread", true, 0);
	return 0;
}

static int
l_set_pool_server_policy_lua_ffi_per_thread(lua_State *L)
{
	ffi_policy(L, "setPoolServerPolicyLuaFFIPerThread", true, 3);
	return 0;
}

static int
l_set_round_robin_fail_on_no_server(lua_State *L)
{
	conf_get(L)->cfg->set.roundrobin_fail_on_no_server =
		dlb_lua_arg_bool(L, 1, "setRoundRobinFailOnNoServer");
	return conf_publish(L, "setRoundRobinFailOnNoServer");
}

/*
 * setFailover({onTimeout=bool, onServFail=bool, pool="name", budget=seconds}):
 * dnslb's retry. A UDP query whose backend times out (onTimeout) or answers
 * SERVFAIL (onServFail) is sent once more to another server that is up, in
 * its own pool or in `pool`, if less than `budget` seconds (default 3) have
 * passed since it arrived. setFailover({}) turns it off.
 */
static int
l_set_failover(lua_State *L)
{
	struct dlb_config *cfg = conf_get(L)->cfg;
	static const char *const keys[] = { "onTimeout", "onServFail", "pool", "budget", NULL };
	bool on_timeout = false, on_servfail = false;
	lua_Number budget = 3.0;
	const char *pool = NULL;

	luaL_checktype(L, 1, LUA_TTABLE);
	lua_pushnil(L);
	while (lua_next(L, 1) != 0) {
		bool known = false;

		for (int i = 0; keys[i] != NULL; i++)
			known |= lua_type(L, -2) == LUA_TSTRING && strcmp(lua_tostring(L, -2), keys[i]) == 0;
		if (!known)
			conf_log(L, DLB_LOG_WARN, "setFailover: unknown key '%s'",
				 lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?");
		lua_pop(L, 1);
	}
	dlb_lua_opt_bool(L, 1, "setFailover", "onTimeout", &on_timeout);
	dlb_lua_opt_bool(L, 1, "setFailover", "onServFail", &on_servfail);
	if (lua_getfield(L, 1, "budget") != LUA_TNIL) {
		if (!dlb_lua_to_number(L, -1, &budget) || budget <= 0 || budget > 60)
			return luaL_error(L, "setFailover: 'budget' must be a number of seconds (0..60]");
	}
	lua_pop(L, 1);
	if (lua_getfield(L, 1, "pool") != LUA_TNIL) {
		pool = lua_tostring(L, -1);
		if (pool == NULL || strlen(pool) >= sizeof(cfg->set.failover_pool))
			return luaL_error(L, "setFailover: 'pool' must be a pool name");
	}
	cfg->set.failover_on_timeout = on_timeout;
	cfg->set.failover_on_servfail = on_servfail;
	cfg->set.failover_budget = budget;
	cfg->set.failover_other_pool = pool != NULL;
	snprintf(cfg->set.failover_pool, sizeof(cfg->set.failover_pool), "%s", pool ? pool : "");
	lua_pop(L, 1);
	return conf_publish(L, "setFailover");
}

/*
 * setWeightedBalancingFactor(f) / setConsistentHashingBalancingFactor(f):
 * a factor of at least 1.0 bounds a server's share of the outstanding
 * queries. Anything else (0 too) leaves the setting as it was, with
 * dnsdist's message: the default, 0, is off.
 */
static void
balancing_factor(lua_State *L, const char *fn, double *to)
{
	lua_Number f = luaL_checknumber(L, 1);

	if (f >= 1.0)
		*to = f;
	else
		conf_log(L, DLB_LOG_ERR, "Invalid value passed to %s()!", fn);
}

static int
l_set_weighted_balancing_factor(lua_State *L)
{
	balancing_factor(L, "setWeightedBalancingFactor",
			 &conf_get(L)->cfg->set.weighted_balancing_factor);
	return conf_publish(L, "setWeightedBalancingFactor");
}

static int
l_set_ch_balancing_factor(lua_State *L)
{
	balancing_factor(L, "setConsistentHashingBalancingFactor",
			 &conf_get(L)->cfg->set.ch_balancing_factor);
	return conf_publish(L, "setConsistentHashingBalancingFactor");
}

static int
cmp_cstr(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A console line built as boost::format does: "%|Nt|" pads to column N. */
struct ln {
	char p[1024];
	size_t len;
};

static void
ln_tab(struct ln *l, size_t col)
{
	while (l->len < col && l->len + 1 < sizeof(l->p))
		l->p[l->len++] = ' ';
	l->p[l->len] = '\0';
}

static void ln_add(struct ln *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
ln_add(struct ln *l, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(l->p + l->len, sizeof(l->p) - l->len, fmt, ap);
	va_end(ap);
	if (n > 0)
		l->len += (size_t)n < sizeof(l->p) - l->len ? (size_t)n : sizeof(l->p) - l->len - 1;
}

/*
 * One showServers() line; the cells are strings already formatted. dnsdist
 * 1.7.3's format: "%1$-3d [%15$-36s ]%2$-20.20s %|25t|%3% %|55t|%4$5s
 * %|51t|%5$7.1f %|66t|%6$7d %|69t|%7$3d %|78t|%8$2d %|80t|%9$10d
 * %|86t|%10$7d %|91t|%11$5.1f %|109t|%12$5.1f %|115t|%13$11d %14%", the
 * tabs 37 columns further with the UUID column; an address longer than
 * the column pushes the rest right.
 */
static void
show_servers_line(lua_State *L, bool uuids, const char *const c[15])
{
	static const size_t tabs[] = { 25, 55, 51, 66, 69, 78, 80, 86, 91, 109, 115 };
	size_t shift = uuids ? 37 : 0;
	struct ln l = { .len = 0 };

	ln_add(&l, "%-3s ", c[0]);
	if (uuids)
		ln_add(&l, "%-36s ", c[14]);
	ln_add(&l, "%-20.20s ", c[1]);
	ln_tab(&l, tabs[0] + shift);
	ln_add(&l, "%s ", c[2]);
	ln_tab(&l, tabs[1] + shift);
	ln_add(&l, "%5s ", c[3]);
	ln_tab(&l, tabs[2] + shift);
	ln_add(&l, "%7s ", c[4]);
	ln_tab(&l, tabs[3] + shift);
	ln_add(&l, "%7s ", c[5]);
	ln_tab(&l, tabs[4] + shift);
	ln_add(&l, "%3s ", c[6]);
	ln_tab(&l, tabs[5] + shift);
	ln_add(&l, "%2s ", c[7]);
	ln_tab(&l, tabs[6] + shift);
	ln_add(&l, "%10s ", c[8]);
	ln_tab(&l, tabs[7] + shift);
	ln_add(&l, "%7s ", c[9]);
	ln_tab(&l, tabs[8] + shift);
	ln_add(&l, "%5s ", c[10]);
	ln_tab(&l, tabs[9] + shift);
	ln_add(&l, "%5s ", c[11]);
	ln_tab(&l, tabs[10] + shift);
	ln_add(&l, "%11s %s", c[12], c[13]);
	dlb_lua_print(L, l.p);
}

/*
 * showServers([{showUUIDs=bool}]): dnsdist 1.7.3's table, in its order
 * (dlb_config_backend_at). State is up/down from health checks, UP/DOWN
 * when forced; Qps and Drate over the last second; Lat in ms; Pools the
 * names given to newServer (none for the default pool alone).
 */
static int
l_show_servers(lua_State *L)
{
	struct dlb_config *cfg = conf_get(L)->cfg;
	static const char *const head[15] = {
		"#", "Name", "Address", "State", "Qps", "Qlim", "Ord", "Wt", "Queries", "Drops",
		"Drate", "Lat", "Outstanding", "Pools", "UUID",
	};
	char num[13][32];
	const char *c[15];
	double total_qps = 0;
	uint64_t total_q = 0, total_d = 0;
	bool uuids = false;

	if (lua_type(L, 1) == LUA_TTABLE)
		dlb_lua_opt_bool(L, 1, "showServers", "showUUIDs", &uuids);
	else if (!lua_isnoneornil(L, 1))
		return luaL_error(L, "showServers: the argument must be a table of options");
	show_servers_line(L, uuids, head);
	for (int i = 0; i < cfg->nbackends; i++) {
		const struct dlb_backend *be = cfg->backends[dlb_config_backend_at(cfg, i)];
		int admin = __atomic_load_n(&be->admin, __ATOMIC_RELAXED);
		const char *state = admin == DLB_BE_FORCED_UP ? "UP" :
				    admin == DLB_BE_FORCED_DOWN ? "DOWN" :
				    __atomic_load_n(&be->healthy, __ATOMIC_RELAXED) ? "up" : "down";
		char pools[512] = "";
		const char *names[DLB_MAX_POOLS_PER_BACKEND];
		struct dlb_be_totals t;
		size_t o = 0;

		server_totals(L, be, &t);
		/* dnsdist's std::set, sorted ("" first, which adds nothing: no
		 * separator while the text is still empty) */
		for (int p = 0; p < be->npools; p++)
			names[p] = be->pools[p];
		qsort(names, (size_t)be->npools, sizeof(names[0]), cmp_cstr);
		for (int p = 0; p < be->npools && o < sizeof(pools); p++)
			o += (size_t)snprintf(pools + o, sizeof(pools) - o, "%s%s", o ? " " : "",
					      names[p]);
		snprintf(num[0], sizeof(num[0]), "%d", i);
		snprintf(num[4], sizeof(num[4]), "%.1f", t.qps);
		snprintf(num[5], sizeof(num[5]), "%d",
			 __atomic_load_n(&be->qps_limit_rt, __ATOMIC_RELAXED));
		snprintf(num[6], sizeof(num[6]), "%d", be->order);
		snprintf(num[7], sizeof(num[7]), "%d", be->weight);
		snprintf(num[8], sizeof(num[8]), "%llu", (unsigned long long)t.queries);
		snprintf(num[9], sizeof(num[9]), "%llu", (unsigned long long)t.drops);
		snprintf(num[10], sizeof(num[10]), "%.1f", t.drate);
		snprintf(num[11], sizeof(num[11]), "%.1f", t.latency_us / 1000.0);
		snprintf(num[12], sizeof(num[12]), "%llu", (unsigned long long)t.outstanding);
		c[0] = num[0];
		c[1] = be->name;
		c[2] = be->addr_text;
		c[3] = state;
		for (int k = 4; k <= 12; k++)
			c[k] = num[k];
		c[13] = pools;
		c[14] = be->uuid;
		show_servers_line(L, uuids, c);
		total_qps += t.qps;
		total_q += t.queries;
		total_d += t.drops;
	}
	snprintf(num[4], sizeof(num[4]), "%.1f", total_qps);
	snprintf(num[8], sizeof(num[8]), "%llu", (unsigned long long)total_q);
	snprintf(num[9], sizeof(num[9]), "%llu", (unsigned long long)total_d);
	for (int k = 0; k < 15; k++)
		c[k] = "";
	c[0] = "All";
	c[4] = num[4];
	c[8] = num[8];
	c[9] = num[9];
	show_servers_line(L, uuids, c);
	return 0;
}

/* EDNS Client Subnet added for useClientSubnet backends (dnsdist names and defaults). */
static int
l_set_ecs_source_prefix_v4(lua_State *L)
{
	conf_get(L)->cfg->set.ecs_prefix_v4 = (int)dlb_lua_arg_int(L, 1, "setECSSourcePrefixV4", 0, 32);
	return 0;
}

static int
l_set_ecs_source_prefix_v6(lua_State *L)
{
	conf_get(L)->cfg->set.ecs_prefix_v6 =
		(int)dlb_lua_arg_int(L, 1, "setECSSourcePrefixV6", 0, 128);
	return 0;
}

static int
l_set_ecs_override(lua_State *L)
{
	conf_get(L)->cfg->set.ecs_override = dlb_lua_arg_bool(L, 1, "setECSOverride");
	return conf_publish(L, "setECSOverride");
}

static int
l_set_whashed_pertubation(lua_State *L)
{
	conf_get(L)->cfg->set.whashed_perturbation =
		(uint32_t)dlb_lua_arg_int(L, 1, "setWHashedPertubation", 0, UINT32_MAX);
	return conf_publish(L, "setWHashedPertubation");
}

/* ---- settings ----------------------------------------------------------- */

static int
l_set_udp_timeout(lua_State *L)
{
	lua_Number secs = 0;

	if (!dlb_lua_to_number(L, 1, &secs) || secs <= 0 || secs > 3600)
		return luaL_error(L, "setUDPTimeout: expected a number of seconds (0..3600]");
	conf_get(L)->cfg->set.udp_timeout_ms = secs * 1000 < 1 ? 1 : (int)lround(secs * 1000);
	return conf_publish(L, "setUDPTimeout");
}

static int
l_set_max_udp_outstanding(lua_State *L)
{
	config_time_only(L, "setMaxUDPOutstanding");
	conf_get(L)->cfg->max_udp_outstanding =
		(int)dlb_lua_arg_int(L, 1, "setMaxUDPOutstanding", 1, 65535);
	return 0;
}

static int
l_set_servfail_when_no_server(lua_State *L)
{
	conf_get(L)->cfg->set.servfail_when_no_server =
		dlb_lua_arg_bool(L, 1, "setServFailWhenNoServer");
	return conf_publish(L, "setServFailWhenNoServer");
}

static int
l_set_drop_empty_queries(lua_State *L)
{
	conf_get(L)->cfg->set.drop_empty_queries = dlb_lua_arg_bool(L, 1, "setDropEmptyQueries");
	return conf_publish(L, "setDropEmptyQueries");
}

static int
l_set_allow_empty_response(lua_State *L)
{
	conf_get(L)->cfg->set.allow_empty_response = dlb_lua_arg_bool(L, 1, "setAllowEmptyResponse");
	return conf_publish(L, "setAllowEmptyResponse");
}

static int
l_truncate_tc(lua_State *L)
{
	conf_get(L)->cfg->set.truncate_tc = dlb_lua_arg_bool(L, 1, "truncateTC");
	return conf_publish(L, "truncateTC");
}

/* dnslb's own: the cap on what a UDP client's advertised size lets through */
static int
l_set_max_udp_answer_size(lua_State *L)
{
	conf_get(L)->cfg->set.max_udp_answer =
		(uint16_t)dlb_lua_arg_int(L, 1, "setMaxUDPAnswerSize", 512, 65535);
	return conf_publish(L, "setMaxUDPAnswerSize");
}

static int
l_set_payload_size_on_self_generated_answers(lua_State *L)
{
	const char *fn = "setPayloadSizeOnSelfGeneratedAnswers";
	lua_Integer n = dlb_lua_arg_int(L, 1, fn, 0, INT_MAX);

	if (n < 512) {
		conf_log(L, DLB_LOG_WARN, "%s() is set too low, using 512 instead!", fn);
		n = 512;
	} else if (n > 1500) {
		/* dnsdist 1.7 caps it at its UDP receive buffer's size */
		conf_log(L, DLB_LOG_WARN, "%s() is set too high, capping to 1500 instead!", fn);
		n = 1500;
	}
	conf_get(L)->cfg->set.selfans.payload_size = (uint16_t)n;
	return conf_publish(L, "setPayloadSizeOnSelfGeneratedAnswers");
}

static int
l_set_add_edns_to_self_generated_responses(lua_State *L)
{
	conf_get(L)->cfg->set.selfans.add_edns =
		dlb_lua_arg_bool(L, 1, "setAddEDNSToSelfGeneratedResponses");
	return conf_publish(L, "setAddEDNSToSelfGeneratedResponses");
}

static int
l_set_tcp_recv_timeout(lua_State *L)
{
	conf_get(L)->cfg->set.tcp_recv_timeout =
		(int)dlb_lua_arg_int(L, 1, "setTCPRecvTimeout", 0, INT_MAX);
	return conf_publish(L, "setTCPRecvTimeout");
}

static int
l_set_tcp_send_timeout(lua_State *L)
{
	conf_get(L)->cfg->set.tcp_send_timeout =
		(int)dlb_lua_arg_int(L, 1, "setTCPSendTimeout", 0, INT_MAX);
	return conf_publish(L, "setTCPSendTimeout");
}

static int
l_set_max_tcp_queries_per_connection(lua_State *L)
{
	config_time_only(L, "setMaxTCPQueriesPerConnection");
	conf_get(L)->cfg->max_tcp_queries_per_conn =
		(int)dlb_lua_arg_int(L, 1, "setMaxTCPQueriesPerConnection", 0, INT_MAX);
	return 0;
}

static int
l_set_max_tcp_connections_per_client(lua_State *L)
{
	config_time_only(L, "setMaxTCPConnectionsPerClient");
	conf_get(L)->cfg->max_tcp_conns_per_client =
		(int)dlb_lua_arg_int(L, 1, "setMaxTCPConnectionsPerClient", 0, INT_MAX);
	return 0;
}

static int
l_set_max_tcp_connection_duration(lua_State *L)
{
	config_time_only(L, "setMaxTCPConnectionDuration");
	conf_get(L)->cfg->max_tcp_conn_duration =
		(int)dlb_lua_arg_int(L, 1, "setMaxTCPConnectionDuration", 0, INT_MAX);
	return 0;
}

static int
l_set_max_tcp_client_threads(lua_State *L)
{
	config_time_only(L, "setMaxTCPClientThreads");
	conf_get(L)->cfg->max_tcp_client_threads =
		(int)dlb_lua_arg_int(L, 1, "setMaxTCPClientThreads", 0, INT_MAX);
	return 0;
}

static int
l_set_udp_multiple_messages_vector_size(lua_State *L)
{
	config_time_only(L, "setUDPMultipleMessagesVectorSize");
	conf_get(L)->cfg->udp_vector_size =
		(int)dlb_lua_arg_int(L, 1, "setUDPMultipleMessagesVectorSize", 0, DLB_UDP_BATCH);
	if (conf_get(L)->cfg->udp_vector_size == 0)
		conf_get(L)->cfg->udp_vector_size = 1;	/* dnsdist: 0 and 1 both mean off */
	return 0;
}

static int
l_set_worker_blocking_receive(lua_State *L)
{
	config_time_only(L, "setWorkerBlockingReceive");
	conf_get(L)->cfg->blocking_receive = dlb_lua_arg_bool(L, 1, "setWorkerBlockingReceive");
	return 0;
}

static int
l_set_worker_receive_coalescing(lua_State *L)
{
	config_time_only(L, "setWorkerReceiveCoalescing");
	conf_get(L)->cfg->recv_coalesce_us =
		(int)dlb_lua_arg_int(L, 1, "setWorkerReceiveCoalescing", 0, DLB_RECV_COALESCE_MAX_US);
	return 0;
}

static int
l_set_udp_socket_buffer_sizes(lua_State *L)
{
	struct dlb_config *cfg = conf_get(L)->cfg;
	int r, s;

	config_time_only(L, "setUDPSocketBufferSizes");
	r = (int)dlb_lua_arg_int(L, 1, "setUDPSocketBufferSizes", 0, INT_MAX);
	s = (int)dlb_lua_arg_int(L, 2, "setUDPSocketBufferSizes", 0, INT_MAX);
	cfg->udp_rcvbuf = r;
	cfg->udp_sndbuf = s;
	return 0;
}

static int
l_set_verbose(lua_State *L)
{
	bool v = dlb_lua_arg_bool(L, 1, "setVerbose");

	conf_get(L)->cfg->verbose = v;
	if (!dlb_lua_phase_throwaway(conf_get(L)->phase))
		dlb_log_set_verbose(v);
	return 0;
}

/* setStructuredLogging(enable [, {levelPrefix=, timeFormat=}]) (dnsdist 1.9) */
static int
l_set_structured_logging(lua_State *L)
{
	bool on = dlb_lua_arg_bool(L, 1, "setStructuredLogging");
	const char *level_key = NULL, *time_format = NULL;

	if (!lua_isnoneornil(L, 2)) {
		luaL_checktype(L, 2, LUA_TTABLE);
		lua_getfield(L, 2, "levelPrefix");
		if (!lua_isnil(L, -1))
			level_key = luaL_checkstring(L, -1);
		lua_getfield(L, 2, "timeFormat");
		if (!lua_isnil(L, -1))
			time_format = luaL_checkstring(L, -1);
		/* the strings stay on the stack, alive, until we return */
	}
	if (dlb_lua_phase_throwaway(conf_get(L)->phase))
		return 0;
	if (dlb_log_set_structured(on, level_key, time_format) != 0)
		return luaL_error(L, "setStructuredLogging: timeFormat must be \"numeric\" or "
				  "\"ISO8601\", levelPrefix a word");
	return 0;
}

static int
l_get_verbose(lua_State *L)
{
	lua_pushboolean(L, conf_get(L)->cfg->verbose);
	return 1;
}

static int
l_set_verbose_health_checks(lua_State *L)
{
	conf_get(L)->cfg->set.verbose_health_checks = dlb_lua_arg_bool(L, 1, "setVerboseHealthChecks");
	return conf_publish(L, "setVerboseHealthChecks");
}

static int
l_set_worker_threads(lua_State *L)
{
	config_time_only(L, "setWorkerThreads");
	conf_get(L)->cfg->workers =
		(int)dlb_lua_arg_int(L, 1, "setWorkerThreads", 0, DLB_MAX_WORKERS);
	return 0;
}

/* Security polling (secpoll.powerdns.com) does not exist in dnslb: accepted, no effect. */
static int
l_set_security_poll_suffix(lua_State *L)
{
	config_time_only(L, "setSecurityPollSuffix");
	dlb_lua_arg_string(L, 1, "setSecurityPollSuffix");
	return 0;
}

static int
l_set_security_poll_interval(lua_State *L)
{
	if (dlb_lua_arg_int(L, 1, "setSecurityPollInterval", INT_MIN, INT_MAX) <= 0)
		conf_log(L, DLB_LOG_WARN, "setSecurityPollInterval() should be > 0, skipping");
	return 0;
}

/* dnslb logs to the daemon facility: accepted, no effect. */
static int
l_set_syslog_facility(lua_State *L)
{
	config_time_only(L, "setSyslogFacility");
	if (lua_type(L, 1) != LUA_TNUMBER && lua_type(L, 1) != LUA_TSTRING)
		return luaL_error(L, "setSyslogFacility: expected a number or a facility name");
	return 0;
}

/* fixupCase(bool): the answer's question name as the client wrote it (default off). */
static int
l_fixup_case(lua_State *L)
{
	conf_get(L)->cfg->set.fixup_case = dlb_lua_arg_bool(L, 1, "fixupCase");
	return conf_publish(L, "fixupCase");
}

/*
 * The idle connections to DoH servers, per worker and server
 * (dnslb/upstream/doh_upstream.c): how many are kept, how long. dnslb
 * closes each at its own idle time, so the cleanup interval, which paces
 * dnsdist's sweep of its connection cache, only has its value kept.
 */
static int
l_set_doh_idle(lua_State *L)
{
	const char *fn = lua_tostring(L, lua_upvalueindex(1));
	struct dlb_settings *set = &conf_get(L)->cfg->set;

	if (strcmp(fn, "setMaxIdleDoHConnectionsPerDownstream") == 0)
		set->doh_max_idle_conns = (uint32_t)dlb_lua_arg_int(L, 1, fn, 0, UINT32_MAX);
	else if (strcmp(fn, "setDoHDownstreamMaxIdleTime") == 0)
		set->doh_max_idle_time = (uint32_t)dlb_lua_arg_int(L, 1, fn, 0, 65535);
	else
		set->doh_cleanup_interval = (uint32_t)dlb_lua_arg_int(L, 1, fn, 0, 65535);
	return conf_publish(L, fn);
}

/*
 * setAPIWritable(bool [, dir]): dnslb's HTTP API has no write operation
 * (PUT allow-from): false is what it is; true is an error, a configuration
 * that counts on changing the ACL over HTTP must not start without it.
 */
static int
l_set_api_writable(lua_State *L)
{
	if (dlb_lua_arg_bool(L, 1, "setAPIWritable"))
		return luaL_error(L, "setAPIWritable: a writable HTTP API is not supported by dnslb");
	if (!lua_isnoneornil(L, 2))
		dlb_lua_arg_string(L, 2, "setAPIWritable");
	return 0;
}

/*
 * dnsdist 1.7 tuning calls with nothing to act on in dnslb, accepted with
 * their arguments checked and no effect (docs/configuration.md, "Accepted
 * and ignored"): the queue and pipe that hand TCP connections to dnsdist's
 * TCP threads (dnslb's workers accept their own), dnsdist's threads for
 * outgoing DoH (dnslb's workers talk to DoH servers themselves), the
 * caches of outgoing TLS sessions (dnslb keeps one per worker and server),
 * the incoming proxy-protocol size limit (dnslb does not accept the
 * protocol from clients), the pruning of idle backend TCP connections
 * (dnslb closes them as the backend does) and the capabilities kept after
 * dropping privileges (dnslb binds everything before). @args: one letter
 * per argument, i integer, b boolean, s string, c a string or a table of
 * strings; uppercase is optional.
 */
static const struct ignored_call {
	const char *name;
	const char *args;
	bool config_time;
} ignored_calls[] = {
	{ "setMaxTCPQueuedConnections", "i", true },
	{ "setTCPInternalPipeBufferSize", "i", true },
	{ "setMaxCachedTCPConnectionsPerDownstream", "i", false },
	{ "setTCPDownstreamCleanupInterval", "i", false },
	{ "setTCPDownstreamMaxIdleTime", "i", false },
	{ "setOutgoingDoHWorkerThreads", "i", true },
	{ "setOutgoingTLSSessionsCacheMaxTicketsPerBackend", "i", false },
	{ "setOutgoingTLSSessionsCacheCleanupDelay", "i", false },
	{ "setOutgoingTLSSessionsCacheMaxTicketValidity", "i", false },
	{ "setProxyProtocolMaximumPayloadSize", "i", false },
	{ "addCapabilitiesToRetain", "c", true },
};

static int
l_ignored_call(lua_State *L)
{
	const struct ignored_call *c = lua_touserdata(L, lua_upvalueindex(1));

	if (c->config_time)
		config_time_only(L, c->name);
	for (int i = 0; c->args[i] != '\0'; i++) {
		int arg = i + 1;
		char k = c->args[i];

		if (k >= 'A' && k <= 'Z') {
			if (lua_isnoneornil(L, arg))
				continue;
			k = (char)(k - 'A' + 'a');
		}
		switch (k) {
		case 'i':
			dlb_lua_arg_int(L, arg, c->name, 0, INT_MAX);
			break;
		case 'b':
			dlb_lua_arg_bool(L, arg, c->name);
			break;
		case 's':
			dlb_lua_arg_string(L, arg, c->name);
			break;
		case 'c':
			if (lua_type(L, arg) == LUA_TTABLE) {
				lua_Integer n = (lua_Integer)lua_rawlen(L, arg);

				for (lua_Integer j = 1; j <= n; j++) {
					if (lua_rawgeti(L, arg, j) != LUA_TSTRING)
						luaL_error(L, "%s: expected a table of strings", c->name);
					lua_pop(L, 1);
				}
			} else {
				dlb_lua_arg_string(L, arg, c->name);
			}
			break;
		}
	}
	return 0;
}

/*
 * What dnslb cannot do, a clear error rather than "attempt to call a nil
 * value": a configuration that asks for DNSCrypt,
 * SNMP, eBPF, protobuf or dnstap logging or CDB/LMDB stores must not
 * start without it (docs/dnsdist-differences.md). A function
 * another part of dnslb defines is left alone (register_legacy_calls).
 */
#define NO_DNSCRYPT	"DNSCrypt is not supported by dnslb"
#define NO_SNMP		"SNMP is not supported by dnslb"
#define NO_BPF		"eBPF filtering is not supported by dnslb"
#define NO_PBDNSTAP	"protobuf and dnstap logging are not supported by dnslb"
#define NO_KVS		"CDB and LMDB key-value stores are not supported by dnslb"
static const struct {
	const char *name;
	const char *what;
} unsupported_calls[] = {
	{ "addDNSCryptBind", NO_DNSCRYPT },
	{ "getDNSCryptBind", NO_DNSCRYPT },
	{ "generateDNSCryptProviderKeys", NO_DNSCRYPT },
	{ "generateDNSCryptCertificate", NO_DNSCRYPT },
	{ "printDNSCryptProviderFingerprint", NO_DNSCRYPT },
	{ "snmpAgent", NO_SNMP },
	{ "sendCustomTrap", NO_SNMP },
	{ "SNMPTrapAction", NO_SNMP },
	{ "SNMPTrapResponseAction", NO_SNMP },
	{ "newBPFFilter", NO_BPF },
	{ "newDynBPFFilter", NO_BPF },
	{ "setDefaultBPFFilter", NO_BPF },
	{ "addBPFFilterDynBlocks", NO_BPF },
	{ "registerDynBPFFilter", NO_BPF },
	{ "unregisterDynBPFFilter", NO_BPF },
	{ "newRemoteLogger", NO_PBDNSTAP },
	{ "newFrameStreamTcpLogger", NO_PBDNSTAP },
	{ "newFrameStreamUnixLogger", NO_PBDNSTAP },
	{ "RemoteLogAction", NO_PBDNSTAP },
	{ "RemoteLogResponseAction", NO_PBDNSTAP },
	{ "DnstapLogAction", NO_PBDNSTAP },
	{ "DnstapLogResponseAction", NO_PBDNSTAP },
	{ "newCDBKVStore", NO_KVS },
	{ "newLMDBKVStore", NO_KVS },
};

static int
l_unsupported_call(lua_State *L)
{
	return luaL_error(L, "%s: %s", lua_tostring(L, lua_upvalueindex(1)),
			  lua_tostring(L, lua_upvalueindex(2)));
}

static void
register_legacy_calls(lua_State *L)
{
	static const char *const doh_idle_calls[] = {
		"setMaxIdleDoHConnectionsPerDownstream", "setDoHDownstreamMaxIdleTime",
		"setDoHDownstreamCleanupInterval",
	};

	for (size_t i = 0; i < sizeof(doh_idle_calls) / sizeof(doh_idle_calls[0]); i++) {
		lua_pushstring(L, doh_idle_calls[i]);
		lua_pushcclosure(L, l_set_doh_idle, 1);
		lua_setglobal(L, doh_idle_calls[i]);
	}
	for (size_t i = 0; i < sizeof(ignored_calls) / sizeof(ignored_calls[0]); i++) {
		lua_pushlightuserdata(L, (void *)&ignored_calls[i]);
		lua_pushcclosure(L, l_ignored_call, 1);
		lua_setglobal(L, ignored_calls[i].name);
	}
	for (size_t i = 0; i < sizeof(unsupported_calls) / sizeof(unsupported_calls[0]); i++) {
		int t = lua_getglobal(L, unsupported_calls[i].name);

		lua_pop(L, 1);
		if (t != LUA_TNIL)
			continue;	/* defined by another part of dnslb */
		lua_pushstring(L, unsupported_calls[i].name);
		lua_pushstring(L, unsupported_calls[i].what);
		lua_pushcclosure(L, l_unsupported_call, 2);
		lua_setglobal(L, unsupported_calls[i].name);
	}
}

/* ---- logging and utilities ---------------------------------------------- */

static int
l_infolog(lua_State *L)
{
	/* printed by --check-config too, as dnsdist does */
	if (!dlb_lua_phase_throwaway(conf_get(L)->phase))
		dlb_log(DLB_LOG_INFO, "%s", luaL_checkstring(L, 1));
	return 0;
}

static int
l_warnlog(lua_State *L)
{
	conf_log(L, DLB_LOG_WARN, "%s", luaL_checkstring(L, 1));
	return 0;
}

static int
l_errlog(lua_State *L)
{
	conf_log(L, DLB_LOG_ERR, "%s", luaL_checkstring(L, 1));
	return 0;
}

static int
l_show_version(lua_State *L)
{
	/* dnsdist's prefix first: tools match "^dnsdist <version>" */
	dlb_lua_print(L, "dnsdist " DLB_DNSDIST_API " (dnslb " DLB_VERSION ")");
	return 0;
}

static int
l_dir_gc(lua_State *L)
{
	DIR **d = luaL_checkudata(L, 1, MT_DIR);

	if (*d != NULL) {
		closedir(*d);
		*d = NULL;
	}
	return 0;
}

static int
cmp_strings(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * includeDirectory(path): evaluate every regular "*.conf" file (not starting
 * with '.') in byte order of the name. Errors keep the file's "path:line:".
 * Unlike dnsdist, which only logs, a missing directory is an error: a
 * config that silently loses half its servers should not start.
 */
static int
l_include_directory(lua_State *L)
{
	struct dlb_lua_conf *lc = conf_get(L);
	const char *dir, *sep;
	DIR **dp;
	struct dirent *ent;
	const char **names;
	int n = 0, files;

	config_time_only(L, "includeDirectory");
	dir = dlb_lua_arg_string(L, 1, "includeDirectory");
	sep = dir[0] != '\0' && dir[strlen(dir) - 1] == '/' ? "" : "/";
	if (lc->including)
		return luaL_error(L, "includeDirectory() cannot be used recursively");
	{
		struct stat st;

		/* dnsdist goes on without the directory, with these messages */
		if (stat(dir, &st) != 0) {
			conf_log(L, DLB_LOG_ERR, "The included directory %s does not exist!", dir);
			return 0;
		}
		if (!S_ISDIR(st.st_mode)) {
			conf_log(L, DLB_LOG_ERR, "The included directory %s is not a directory!",
				 dir);
			return 0;
		}
	}

	lua_newtable(L);			/* names, anchoring the strings */
	files = lua_gettop(L);
	dp = lua_newuserdatauv(L, sizeof(*dp), 0);
	*dp = NULL;
	luaL_setmetatable(L, MT_DIR);		/* closes the DIR if an error unwinds */
	*dp = opendir(dir);
	if (*dp == NULL)
		return luaL_error(L, "includeDirectory: cannot open directory '%s': %s", dir,
				  strerror(errno));
	while ((ent = readdir(*dp)) != NULL) {
		size_t len = strlen(ent->d_name);
		struct stat st;
		const char *path;

		if (ent->d_name[0] == '.' || len < 5 || strcmp(ent->d_name + len - 5, ".conf") != 0)
			continue;
		path = lua_pushfstring(L, "%s%s%s", dir, sep, ent->d_name);
		if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
			lua_pop(L, 1);
			continue;
		}
		lua_rawseti(L, files, ++n);
	}
	closedir(*dp);
	*dp = NULL;
	lua_pop(L, 1);

	names = lua_newuserdatauv(L, (size_t)(n > 0 ? n : 1) * sizeof(*names), 0);
	for (int i = 0; i < n; i++) {
		lua_rawgeti(L, files, i + 1);
		names[i] = lua_tostring(L, -1);
		lua_pop(L, 1);		/* still anchored by the table */
	}
	qsort(names, (size_t)n, sizeof(*names), cmp_strings);

	lc->including = true;
	for (int i = 0; i < n; i++) {
		remember_file(lc, names[i]);
		if (luaL_loadfile(L, names[i]) != LUA_OK ||
		    lua_pcall(L, 0, 0, 0) != LUA_OK) {
			lc->including = false;
			return lua_error(L);	/* the message already reads "file:line:" */
		}
		conf_log(L, DLB_LOG_DEBUG, "Read configuration from '%s'", names[i]);
	}
	lc->including = false;
	return 0;
}

/* getResolvers(path): the nameserver addresses of a resolv.conf file. */
static int
l_get_resolvers(lua_State *L)
{
	const char *path = dlb_lua_arg_string(L, 1, "getResolvers");
	char found[32][INET6_ADDRSTRLEN];
	char line[512];
	int n = 0;
	FILE *f;

	f = fopen(path, "r");
	if (f == NULL) {
		conf_log(L, DLB_LOG_WARN, "getResolvers: cannot open '%s': %s", path,
			 strerror(errno));
		lua_newtable(L);
		return 1;
	}
	/* no Lua call while the file is open: an error could not close it */
	while (n < (int)(sizeof(found) / sizeof(found[0])) &&
	       fgets(line, sizeof(line), f) != NULL) {
		char *save = NULL, *kw, *addr;
		uint8_t buf[16];

		kw = strtok_r(line, " \t\r\n", &save);
		if (kw == NULL || kw[0] == '#' || kw[0] == ';' || strcmp(kw, "nameserver") != 0)
			continue;
		addr = strtok_r(NULL, " \t\r\n", &save);
		if (addr == NULL || strchr(addr, '%') != NULL)	/* link-local with a scope */
			continue;
		if (inet_pton(AF_INET, addr, buf) != 1 && inet_pton(AF_INET6, addr, buf) != 1)
			continue;
		snprintf(found[n++], sizeof(found[0]), "%s", addr);
	}
	fclose(f);

	lua_createtable(L, n, 0);
	for (int i = 0; i < n; i++) {
		lua_pushstring(L, found[i]);
		lua_rawseti(L, -2, i + 1);
	}
	return 1;
}

/* ---- worker state limits (lua/worker.c) --------------------------------- */

/* setLuaMemoryLimit(bytes | "64M"): each worker state's allocations; 0 = none. */
static int
l_set_lua_memory_limit(lua_State *L)
{
	const char *fn = "setLuaMemoryLimit";
	uint64_t bytes = 0;
	lua_Integer v = 0;

	config_time_only(L, fn);
	if (lua_type(L, 1) == LUA_TSTRING && parse_byte_size(lua_tostring(L, 1), &bytes))
		v = (lua_Integer)bytes;
	else if (!dlb_lua_to_integer(L, 1, &v) || v < 0)
		return luaL_error(L, "%s: expected a number of bytes or a size like \"64M\"", fn);
	if (v != 0 && v < 1024 * 1024)
		return luaL_error(L, "%s: at least 1M (or 0: no limit)", fn);
	if ((uint64_t)v > SIZE_MAX)
		return luaL_error(L, "%s: too large", fn);
	conf_get(L)->lua_mem_limit = (size_t)v;
	return 0;
}

/* setLuaInstructionLimit(n): Lua VM instructions per rule call; 0 = none. */
static int
l_set_lua_instruction_limit(lua_State *L)
{
	const char *fn = "setLuaInstructionLimit";
	lua_Integer n;

	config_time_only(L, fn);
	n = dlb_lua_arg_int(L, 1, fn, 0, LUA_MAXINTEGER);
	if (n != 0 && n < 1000)
		return luaL_error(L, "%s: at least 1000 (or 0: no limit)", fn);
	conf_get(L)->lua_insn_limit = (uint64_t)n;
	return 0;
}

/* ---- registration ------------------------------------------------------- */

static dlb_reload_fn *reload_hook;

void
dlb_lua_conf_set_reload_hook(dlb_reload_fn *fn)
{
	reload_hook = fn;
}

/*
 * reload(): evaluate the config file again and swap rules, Lua code, ACL
 * and policies (dnslb; see docs/rules.md). The state running this call may
 * be replaced: it stays alive until the call returns (freed a second later).
 */
static int
l_reload(lua_State *L)
{
	char err[1024];

	if (conf_get(L)->phase != DLB_LUA_PHASE_RUNNING || reload_hook == NULL)
		return luaL_error(L, "reload() can only be called at runtime (console)");
	if (reload_hook(err, sizeof(err)) != 0) {
		lua_pushboolean(L, 0);
		lua_pushstring(L, err);
		return 2;
	}
	lua_pushboolean(L, 1);
	return 1;
}

static const luaL_Reg conf_funcs[] = {
	/* listeners */
	{ "setLocal", l_set_local },
	{ "addLocal", l_add_local },
	{ "addTLSLocal", l_add_tls_local },
	{ "addDOHLocal", l_add_doh_local },
	{ "getTLSFrontend", l_get_tls_frontend },
	{ "getTLSContext", l_get_tls_context },
	{ "getTLSFrontendCount", l_get_tls_frontend_count },
	{ "getDOHFrontend", l_get_doh_frontend },
	{ "getDOHFrontendCount", l_get_doh_frontend_count },
	{ "newDOHResponseMapEntry", l_new_doh_response_map_entry },
	{ "setDOHResponseMapEntries", l_set_doh_response_map_entries },
	{ "reloadAllCertificates", l_reload_all_certificates },
	{ "generateOCSPResponse", l_generate_ocsp_response },
	{ "getOutgoingTLSSessionCacheSize", l_get_outgoing_tls_session_cache_size },
	/* ACL */
	{ "setACL", l_set_acl },
	{ "addACL", l_add_acl },
	{ "rmACL", l_rm_acl },
	{ "showACL", l_show_acl },
	/* servers and pools */
	{ "newServer", l_new_server },
	{ "getServer", l_get_server },
	{ "getServers", l_get_servers },
	{ "rmServer", l_rm_server },
	{ "getPool", l_get_pool },
	{ "getPoolServers", l_get_pool_servers },
	{ "showPools", l_show_pools },
	{ "showServers", l_show_servers },
	{ "setFailover", l_set_failover },
	{ "setECSSourcePrefixV4", l_set_ecs_source_prefix_v4 },
	{ "setECSSourcePrefixV6", l_set_ecs_source_prefix_v6 },
	{ "setECSOverride", l_set_ecs_override },
	{ "setWeightedBalancingFactor", l_set_weighted_balancing_factor },
	{ "setConsistentHashingBalancingFactor", l_set_ch_balancing_factor },
	/* packet caches */
	{ "newPacketCache", l_new_packet_cache },
	{ "setStaleCacheEntriesTTL", l_set_stale_cache_entries_ttl },
	{ "setServeStaleOnTimeout", l_set_serve_stale_on_timeout },
	{ "setCacheCleaningDelay", l_set_cache_cleaning_delay },
	{ "setCacheCleaningPercentage", l_set_cache_cleaning_percentage },
	/* policies */
	{ "setServerPolicy", l_set_server_policy },
	{ "newServerPolicy", l_new_server_policy },
	{ "setServerPolicyLua", l_set_server_policy_lua },
	{ "setPoolServerPolicyLua", l_set_pool_server_policy_lua },
	{ "setServerPolicyLuaFFI", l_set_server_policy_lua_ffi },
	{ "setPoolServerPolicyLuaFFI", l_set_pool_server_policy_lua_ffi },
	{ "setServerPolicyLuaFFIPerThread", l_set_server_policy_lua_ffi_per_thread },
	{ "setPoolServerPolicyLuaFFIPerThread", l_set_pool_server_policy_lua_ffi_per_thread },
	{ "showServerPolicy", l_show_server_policy },
	{ "setPoolServerPolicy", l_set_pool_server_policy },
	{ "showPoolServerPolicy", l_show_pool_server_policy },
	{ "setRoundRobinFailOnNoServer", l_set_round_robin_fail_on_no_server },
	{ "setWHashedPertubation", l_set_whashed_pertubation },
	/* settings */
	{ "setUDPTimeout", l_set_udp_timeout },
	{ "setMaxUDPOutstanding", l_set_max_udp_outstanding },
	{ "setServFailWhenNoServer", l_set_servfail_when_no_server },
	{ "setDropEmptyQueries", l_set_drop_empty_queries },
	{ "setAllowEmptyResponse", l_set_allow_empty_response },
	{ "truncateTC", l_truncate_tc },
	{ "setMaxUDPAnswerSize", l_set_max_udp_answer_size },
	{ "setPayloadSizeOnSelfGeneratedAnswers", l_set_payload_size_on_self_generated_answers },
	{ "setAddEDNSToSelfGeneratedResponses", l_set_add_edns_to_self_generated_responses },
	{ "setTCPRecvTimeout", l_set_tcp_recv_timeout },
	{ "setTCPSendTimeout", l_set_tcp_send_timeout },
	{ "setMaxTCPQueriesPerConnection", l_set_max_tcp_queries_per_connection },
	{ "setMaxTCPConnectionsPerClient", l_set_max_tcp_connections_per_client },
	{ "setMaxTCPConnectionDuration", l_set_max_tcp_connection_duration },
	{ "setMaxTCPClientThreads", l_set_max_tcp_client_threads },
	{ "setUDPMultipleMessagesVectorSize", l_set_udp_multiple_messages_vector_size },
	{ "setWorkerBlockingReceive", l_set_worker_blocking_receive },
	{ "setWorkerReceiveCoalescing", l_set_worker_receive_coalescing },
	{ "setUDPSocketBufferSizes", l_set_udp_socket_buffer_sizes },
	{ "setVerbose", l_set_verbose },
	{ "setStructuredLogging", l_set_structured_logging },
	{ "getVerbose", l_get_verbose },
	{ "setVerboseHealthChecks", l_set_verbose_health_checks },
	{ "setWorkerThreads", l_set_worker_threads },
	{ "setSecurityPollSuffix", l_set_security_poll_suffix },
	{ "setSecurityPollInterval", l_set_security_poll_interval },
	{ "setSyslogFacility", l_set_syslog_facility },
	{ "setACLFromFile", l_set_acl_from_file },
	{ "fixupCase", l_fixup_case },
	{ "setAPIWritable", l_set_api_writable },
	/* logging and utilities */
	{ "infolog", l_infolog },
	{ "warnlog", l_warnlog },
	{ "errlog", l_errlog },
	{ "showVersion", l_show_version },
	{ "includeDirectory", l_include_directory },
	{ "reload", l_reload },
	{ "getResolvers", l_get_resolvers },
	/* worker states */
	{ "setLuaMemoryLimit", l_set_lua_memory_limit },
	{ "setLuaInstructionLimit", l_set_lua_instruction_limit },
	{ NULL, NULL },
};

static void
register_metatables(lua_State *L)
{
	luaL_newmetatable(L, MT_SERVER);
	luaL_newlib(L, server_methods);
	lua_pushcclosure(L, l_server_index, 1);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, l_server_newindex);
	lua_setfield(L, -2, "__newindex");
	lua_pushcfunction(L, l_server_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pushcfunction(L, l_server_eq);
	lua_setfield(L, -2, "__eq");
	lua_pop(L, 1);

	luaL_newmetatable(L, MT_POOL);
	luaL_newlib(L, pool_methods);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, l_pool_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pop(L, 1);

	luaL_newmetatable(L, MT_POLICY);
	lua_pushcfunction(L, l_policy_index);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, l_policy_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pop(L, 1);

	luaL_newmetatable(L, MT_CACHE);
	luaL_newlib(L, cache_methods);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, l_cache_to_string);
	lua_setfield(L, -2, "__tostring");
	lua_pop(L, 1);
	lua_newtable(L);
	lua_rawsetp(L, LUA_REGISTRYINDEX, &caches_key);

	luaL_newmetatable(L, MT_DIR);
	lua_pushcfunction(L, l_dir_gc);
	lua_setfield(L, -2, "__gc");
	lua_pop(L, 1);
}

static void
register_globals(lua_State *L)
{
	lua_pushglobaltable(L);
	luaL_setfuncs(L, conf_funcs, 0);
	lua_pop(L, 1);

	for (size_t i = 0; i < sizeof(policies) / sizeof(policies[0]); i++) {
		struct policy_ref *r = lua_newuserdatauv(L, sizeof(*r), 0);

		r->policy = (int)policies[i].policy;
		luaL_setmetatable(L, MT_POLICY);
		lua_setglobal(L, policies[i].name);
	}

	for (size_t i = 0; i < sizeof(constant_tables) / sizeof(constant_tables[0]); i++) {
		lua_newtable(L);
		for (const struct dlb_named *v = constant_tables[i].values; v->name; v++) {
			lua_pushinteger(L, v->value);
			lua_setfield(L, -2, v->name);
		}
		lua_setglobal(L, constant_tables[i].name);
	}
}

/* Worker states, while replaying: print() is silent. */
static int
l_quiet_print(lua_State *L)
{
	(void)L;
	return 0;
}

/*
 * Worker states: keep the real print() for dlb_lua_conf_rebind, silence it,
 * and start the weak set of the Server objects the replay makes.
 */
static void
worker_setup(lua_State *L)
{
	lua_getglobal(L, "print");
	lua_rawsetp(L, LUA_REGISTRYINDEX, &print_key);
	lua_pushcfunction(L, l_quiet_print);
	lua_setglobal(L, "print");
	dlb_lua_compat_quiet_io(L);
	if (conf_get(L)->phase == DLB_LUA_PHASE_WORKER)
		dlb_lua_compat_worker(L);

	lua_newtable(L);
	lua_createtable(L, 0, 1);
	lua_pushliteral(L, "k");
	lua_setfield(L, -2, "__mode");
	lua_setmetatable(L, -2);
	lua_rawsetp(L, LUA_REGISTRYINDEX, &servers_key);
}

/* States made with a custom allocator have no lauxlib panic handler: log, then Lua aborts. */
static int
conf_panic(lua_State *L)
{
	const char *msg = lua_tostring(L, -1);

	dlb_err("Lua panic: %s", msg != NULL ? msg : "(error object is not a string)");
	return 0;
}

/* Runs under lua_pcall so that an allocation failure cannot escape. */
static int
conf_setup(lua_State *L)
{
	/* every standard library, as dnsdist's config state has (lua/compat_lua.h) */
	dlb_lua_compat_open(L);
	register_metatables(L);
	register_tls_frontend(L);
	register_doh_frontend(L);
	register_globals(L);
	dlb_lua_objects_register(L);
	dlb_lua_rules_register(L);
	dlb_lua_explain_register(L);
	dlb_lua_console_register(L);
	dlb_lua_rings_register(L);
	dlb_lua_dynblock_register(L);
	dlb_lua_abuse_register(L);
	dlb_lua_redis_register(L);
	dlb_lua_kvstore_register(L);
	dlb_lua_fleet_register(L);
	dlb_lua_stats_register(L);
	dlb_lua_globals_register(L);
	dlb_lua_web_register(L);
	register_legacy_calls(L);	/* last: it leaves what the others define */
	if (dlb_lua_phase_throwaway(conf_get(L)->phase))
		worker_setup(L);
	return 0;
}

struct dlb_lua_conf *
dlb_lua_conf_new(struct dlb_config *cfg, enum dlb_lua_phase phase)
{
	return dlb_lua_conf_new_alloc(cfg, phase, NULL, NULL);
}

struct dlb_lua_conf *
dlb_lua_conf_new_alloc(struct dlb_config *cfg, enum dlb_lua_phase phase,
		       void *(*alloc)(void *ud, void *ptr, size_t osize, size_t nsize), void *ud)
{
	static unsigned long serials;
	struct dlb_lua_conf *lc = calloc(1, sizeof(*lc));

	if (lc == NULL)
		return NULL;
	lc->cfg = cfg;
	lc->phase = phase;
	lc->serial = lc->origin = ++serials;
	lc->lua_mem_limit = (size_t)64 << 20;
	lc->lua_insn_limit = 10000000;
	if (alloc != NULL) {
		lc->L = lua_newstate(alloc, ud);
		if (lc->L != NULL)
			lua_atpanic(lc->L, conf_panic);
	} else {
		lc->L = luaL_newstate();
	}
	if (lc->L == NULL) {
		free(lc);
		return NULL;
	}
	lua_pushlightuserdata(lc->L, lc);
	lua_rawsetp(lc->L, LUA_REGISTRYINDEX, &conf_key);
	lua_pushcfunction(lc->L, conf_setup);
	if (lua_pcall(lc->L, 0, 0, 0) != LUA_OK) {
		dlb_err("Lua setup failed: %s", lua_tostring(lc->L, -1));
		dlb_lua_conf_free(lc);
		return NULL;
	}
	return lc;
}

void
dlb_lua_conf_free(struct dlb_lua_conf *lc)
{
	if (lc == NULL)
		return;
	if (check_lc == lc)
		check_lc = NULL;
	if (lc->L != NULL)
		lua_close(lc->L);
	for (int i = 0; i < lc->nfiles; i++)
		free(lc->files[i]);
	for (int i = 0; i < lc->nchunks; i++) {
		free(lc->chunks[i].path);
		free(lc->chunks[i].code);
		free(lc->chunks[i].chunkname);
	}
	free(lc->chunks);
	free(lc);
}

void
dlb_lua_conf_set_phase(struct dlb_lua_conf *lc, enum dlb_lua_phase phase)
{
	lc->phase = phase;
}

void
dlb_lua_conf_set_rcu(struct dlb_lua_conf *lc, struct dlb_rcu_thread *rt)
{
	lc->rt = rt;
}

/* Run the chunk on the stack (or report the load error there) into @err. */
static int
conf_run(struct dlb_lua_conf *lc, int loadstatus, char *err, size_t errlen)
{
	lua_State *L = lc->L;

	if (loadstatus == LUA_OK && lua_pcall(L, 0, 0, 0) == LUA_OK)
		return 0;
	lc->including = false;
	if (err != NULL && errlen > 0) {
		const char *msg = lua_tostring(L, -1);
		const char *colon;

		if (msg == NULL)
			msg = "(error object is not a string)";
		/*
		 * Lua shortens long chunk names to "...<tail>" (LUA_IDSIZE); give the
		 * operator the whole path of the file the tail belongs to.
		 */
		if (strncmp(msg, "...", 3) == 0 && (colon = strchr(msg + 3, ':')) != NULL) {
			size_t tail = (size_t)(colon - (msg + 3));

			for (int i = 0; i < lc->nfiles; i++) {
				size_t fl = strlen(lc->files[i]);

				if (fl >= tail && memcmp(lc->files[i] + fl - tail, msg + 3, tail) == 0) {
					snprintf(err, errlen, "%s%s", lc->files[i], colon);
					msg = NULL;
					break;
				}
			}
		}
		if (msg != NULL)
			snprintf(err, errlen, "%s", msg);
	}
	lua_pop(L, 1);
	return -1;
}

/* Worker states: remember a chunk the config state evaluated (CONFIG/CHECK only). */
static int
record_chunk(struct dlb_lua_conf *lc, const char *path, const char *code, const char *chunkname,
	     char *err, size_t errlen)
{
	struct conf_chunk *v, *c;

	if (lc->phase != DLB_LUA_PHASE_CONFIG && lc->phase != DLB_LUA_PHASE_CHECK &&
	    lc->phase != DLB_LUA_PHASE_RELOAD)
		return 0;
	v = realloc(lc->chunks, sizeof(*v) * (size_t)(lc->nchunks + 1));
	if (v == NULL)
		goto out_nomem;
	lc->chunks = v;
	c = &v[lc->nchunks];
	c->path = path != NULL ? strdup(path) : NULL;
	c->code = code != NULL ? strdup(code) : NULL;
	c->chunkname = chunkname != NULL ? strdup(chunkname) : NULL;
	if ((path != NULL && c->path == NULL) || (code != NULL && c->code == NULL) ||
	    (chunkname != NULL && c->chunkname == NULL)) {
		free(c->path);
		free(c->code);
		free(c->chunkname);
		goto out_nomem;
	}
	lc->nchunks++;
	return 0;

out_nomem:
	if (err != NULL && errlen > 0)
		snprintf(err, errlen, "out of memory recording the configuration");
	return -1;
}

int
dlb_lua_conf_load_file(struct dlb_lua_conf *lc, const char *path, char *err, size_t errlen)
{
	remember_file(lc, path);
	if (conf_run(lc, luaL_loadfile(lc->L, path), err, errlen) != 0)
		return -1;
	return record_chunk(lc, path, NULL, NULL, err, errlen);
}

int
dlb_lua_conf_load_string(struct dlb_lua_conf *lc, const char *code, const char *chunkname,
			 char *err, size_t errlen)
{
	if (chunkname == NULL)
		chunkname = "=config";
	if (conf_run(lc, luaL_loadbuffer(lc->L, code, strlen(code), chunkname), err, errlen) != 0)
		return -1;
	return record_chunk(lc, NULL, code, chunkname, err, errlen);
}

struct dlb_lua_conf *
dlb_lua_conf_of(lua_State *L)
{
	struct dlb_lua_conf *lc;

	lua_rawgetp(L, LUA_REGISTRYINDEX, &conf_key);
	lc = lua_touserdata(L, -1);
	lua_pop(L, 1);
	return lc;
}

enum dlb_lua_phase
dlb_lua_conf_phase(const struct dlb_lua_conf *lc)
{
	return lc->phase;
}

struct dlb_config *
dlb_lua_conf_cfg(const struct dlb_lua_conf *lc)
{
	return lc->cfg;
}

struct dlb_rcu_thread *
dlb_lua_conf_rcu(const struct dlb_lua_conf *lc)
{
	return lc->rt;
}

/* ---- worker states (lua/worker.c) --------------------------------------- */

lua_State *
dlb_lua_conf_state(const struct dlb_lua_conf *lc)
{
	return lc->L;
}

unsigned long
dlb_lua_conf_origin(const struct dlb_lua_conf *lc)
{
	return lc->origin;
}

void
dlb_lua_conf_limits(const struct dlb_lua_conf *lc, size_t *mem_bytes, uint64_t *insns)
{
	*mem_bytes = lc->lua_mem_limit;
	*insns = lc->lua_insn_limit;
}

int
dlb_lua_conf_replay(const struct dlb_lua_conf *src, struct dlb_lua_conf *dst, char *err,
		    size_t errlen)
{
	dst->origin = src->origin;
	dst->plan = src->plan;
	for (int i = 0; i < src->nchunks; i++) {
		const struct conf_chunk *c = &src->chunks[i];
		int st;

		if (c->path != NULL) {
			remember_file(dst, c->path);
			st = luaL_loadfile(dst->L, c->path);
		} else {
			st = luaL_loadbuffer(dst->L, c->code, strlen(c->code), c->chunkname);
		}
		if (conf_run(dst, st, err, errlen) != 0)
			return -1;
	}
	return 0;
}

static int
backend_position(const struct dlb_config *cfg, const struct dlb_backend *be)
{
	for (int i = 0; i < cfg->nbackends; i++)
		if (cfg->backends[i] == be)
			return i;
	return -1;
}

static int
cache_position(const struct dlb_config *cfg, const struct dlb_cache *c)
{
	for (int i = 0; i < cfg->ncaches; i++)
		if (cfg->caches[i] == c)
			return i;
	return -1;
}

/*
 * Under lua_pcall: move the replay's Server and PacketCache objects from the
 * throwaway config (still lc->cfg) to the same positions in @cfg (argument 1),
 * and give print() back.
 */
static int
conf_rebind_cb(lua_State *L)
{
	struct dlb_lua_conf *lc = conf_get(L);
	const struct dlb_config *old = lc->cfg;
	struct dlb_config *cfg = lua_touserdata(L, 1);

	lua_rawgetp(L, LUA_REGISTRYINDEX, &servers_key);
	if (lua_istable(L, -1)) {
		lua_pushnil(L);
		while (lua_next(L, -2) != 0) {
			struct server_ref *r = lua_touserdata(L, -2);
			int i = backend_position(old, r->be);

			if (i >= 0 && lc->plan != NULL)
				i = lc->plan->be_map[i];
			lua_pop(L, 1);
			if (i >= 0 && i < cfg->nbackends) {
				r->be = cfg->backends[i];
				r->index = i;
				memcpy(r->uuid, r->be->uuid, sizeof(r->uuid));
			} else {
				r->be = NULL;	/* check_server: "removed" */
				r->index = -1;
			}
		}
	}
	lua_pop(L, 1);
	lua_pushnil(L);
	lua_rawsetp(L, LUA_REGISTRYINDEX, &servers_key);

	lua_rawgetp(L, LUA_REGISTRYINDEX, &caches_key);
	lua_newtable(L);
	lua_pushnil(L);
	while (lua_next(L, -3) != 0) {
		struct cache_ref *r = lua_touserdata(L, -1);
		int i = cache_position(old, r->c);

		if (i >= 0 && lc->plan != NULL)
			i = lc->plan->cache_map[i];
		r->c = i >= 0 && i < cfg->ncaches ? cfg->caches[i] : NULL;
		if (r->c != NULL)
			lua_rawsetp(L, -3, r->c);
		else
			lua_pop(L, 1);
	}
	lua_rawsetp(L, LUA_REGISTRYINDEX, &caches_key);
	lua_pop(L, 1);

	if (lua_rawgetp(L, LUA_REGISTRYINDEX, &print_key) != LUA_TNIL &&
	    lua_getglobal(L, "print") == LUA_TFUNCTION && lua_tocfunction(L, -1) == l_quiet_print) {
		lua_pop(L, 1);
		lua_setglobal(L, "print");
	}
	dlb_lua_compat_loud_io(L);
	return 0;
}

int
dlb_lua_conf_rebind(struct dlb_lua_conf *lc, struct dlb_config *cfg, char *err, size_t errlen)
{
	lua_pushcfunction(lc->L, conf_rebind_cb);
	lua_pushlightuserdata(lc->L, cfg);
	if (lua_pcall(lc->L, 1, 0, 0) != LUA_OK) {
		if (err != NULL && errlen > 0)
			snprintf(err, errlen, "%s", lua_tostring(lc->L, -1));
		lua_pop(lc->L, 1);
		return -1;
	}
	lc->cfg = cfg;
	lc->phase = DLB_LUA_PHASE_RULES;
	lc->plan = NULL;
	return 0;
}

bool
dlb_lua_conf_acts(lua_State *L)
{
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);

	return lc != NULL && (lc->phase == DLB_LUA_PHASE_CONFIG ||
			      lc->phase == DLB_LUA_PHASE_RUNNING);
}

bool
dlb_lua_conf_live(lua_State *L)
{
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);

	return dlb_lua_conf_acts(L) || (lc != NULL && lc->phase == DLB_LUA_PHASE_CHECK);
}

void
dlb_lua_conf_set_plan(struct dlb_lua_conf *lc, const struct dlb_reload_plan *plan)
{
	lc->plan = plan;
}

int
dlb_lua_conf_adopt(struct dlb_lua_conf *lc, struct dlb_config *cfg, struct dlb_rcu_thread *rt,
		   char *err, size_t errlen)
{
	if (dlb_lua_conf_rebind(lc, cfg, err, errlen) != 0)
		return -1;
	dlb_lua_globals_adopt(lc->L);
	lc->phase = DLB_LUA_PHASE_RUNNING;
	lc->rt = rt;
	return 0;
}

bool
dlb_lua_conf_has_maintenance(const struct dlb_lua_conf *lc)
{
	bool f = lua_getglobal(lc->L, "maintenance") == LUA_TFUNCTION;

	lua_pop(lc->L, 1);
	return f;
}

void
dlb_lua_conf_maintenance(struct dlb_lua_conf *lc)
{
	static time_t last_error;
	lua_State *L = lc->L;

	if (lua_getglobal(L, "maintenance") != LUA_TFUNCTION) {
		lua_pop(L, 1);
		return;
	}
	if (lua_pcall(L, 0, 0, 0) != LUA_OK) {
		time_t now = time(NULL);

		if (now - last_error >= 60) {
			last_error = now;
			dlb_err("maintenance() failed: %s",
				lua_tostring(L, -1) != NULL ? lua_tostring(L, -1) : "(not a string)");
		}
		lua_pop(L, 1);
	}
}


const char *
dlb_lua_release(void)
{
	return LUA_RELEASE;
}
