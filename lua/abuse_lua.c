/*
 * abuse_lua.c - setters of the abuse limits (abuse_lua.h, docs/abuse.md).
 * Each checks its arguments first, then raises at runtime, then stores into
 * the state's config (the real one at startup, the throwaway one in a
 * replay).
 */
#include "lua/abuse_lua.h"

#include <lauxlib.h>
#include <limits.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

#include "dnslb/pipeline/abuse.h"
#include "dnslb/core/config.h"
#include "lua/args.h"
#include "lua/conf.h"

/* The config to set, or a raise from the console (as lua/conf.c's config-time-only setters). */
static struct dlb_config *
config_time(lua_State *L, const char *fn)
{
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);
	enum dlb_lua_phase p;

	if (lc == NULL)
		luaL_error(L, "%s: no configuration", fn);
	p = dlb_lua_conf_phase(lc);
	if (p == DLB_LUA_PHASE_RUNNING)
		luaL_error(L, "%s cannot be altered at runtime", fn);
	if (p == DLB_LUA_PHASE_RULES)
		luaL_error(L, "%s cannot be called from a rule", fn);
	return dlb_lua_conf_cfg(lc);
}

/* An integer setting: argument #1 in [lo, hi] into the int at @off of the config. */
static int
set_int(lua_State *L, const char *fn, lua_Integer lo, lua_Integer hi, size_t off)
{
	lua_Integer v = dlb_lua_arg_int(L, 1, fn, lo, hi);
	struct dlb_config *cfg = config_time(L, fn);

	*(int *)(void *)((char *)cfg + off) = (int)v;
	return 0;
}

#define SETTER(lname, fn, lo, hi, field)						\
static int										\
lname(lua_State *L)									\
{											\
	return set_int(L, fn, lo, hi, offsetof(struct dlb_config, field));		\
}

SETTER(l_set_max_tcp_connection_rate_per_client, "setMaxTCPConnectionRatePerClient", 0, INT_MAX,
       max_tcp_conn_rate_per_client)
SETTER(l_set_tcp_connection_rate_interval, "setTCPConnectionRateInterval", 1, 1440,
       tcp_conn_rate_interval)
SETTER(l_set_ban_duration_for_exceeding_tcp_tls_rate, "setBanDurationForExceedingTCPTLSRate", 0,
       INT_MAX, tcp_ban_duration_rate)
SETTER(l_set_max_tcp_read_ios_per_query, "setMaxTCPReadIOsPerQuery", 0, INT_MAX,
       max_tcp_read_ios_per_query)
SETTER(l_set_ban_duration_for_exceeding_max_read_ios_per_query,
       "setBanDurationForExceedingMaxReadIOsPerQuery", 0, INT_MAX, tcp_ban_duration_read_ios)
SETTER(l_set_tcp_connections_mask_v4, "setTCPConnectionsMaskV4", 0, 32, tcp_conns_mask_v4)
SETTER(l_set_tcp_connections_mask_v6, "setTCPConnectionsMaskV6", 0, 128, tcp_conns_mask_v6)
SETTER(l_set_tcp_connections_overload_threshold, "setTCPConnectionsOverloadThreshold", 0, 100,
       tcp_overload_threshold)

static int
l_set_max_tcp_output_buffer_size(lua_State *L)
{
	/* at least one frame of the largest message; at most 1 GiB */
	lua_Integer v = dlb_lua_arg_int(L, 1, "setMaxTCPOutputBufferSize", 65537, 1 << 30);

	config_time(L, "setMaxTCPOutputBufferSize")->max_tcp_out_bytes = (size_t)v;
	return 0;
}

static const char *const oc_opts[] = { "action", "maskV4", "maskV6", NULL };
static const char *const oc_actions[] = {
	[DLB_OC_DROP] = "drop", [DLB_OC_REFUSED] = "refused", [DLB_OC_SERVFAIL] = "servfail",
};

/* setMaxOutstandingPerClient(n[, {action="drop"|"refused"|"servfail", maskV4=32, maskV6=64}]) */
static int
l_set_max_outstanding_per_client(lua_State *L)
{
	const char *fn = "setMaxOutstandingPerClient";
	lua_Integer n = dlb_lua_arg_int(L, 1, fn, 0, 65535);
	int t = dlb_lua_opt_table(L, 2, fn);
	int action = DLB_OC_DROP, v4 = 32, v6 = 64;
	struct dlb_config *cfg;

	if (t != 0) {
		const char *a = dlb_lua_opt_string_push(L, t, fn, "action");

		if (a != NULL) {
			size_t i;

			for (i = 0; i < sizeof(oc_actions) / sizeof(oc_actions[0]); i++)
				if (strcasecmp(a, oc_actions[i]) == 0)
					break;
			if (i == sizeof(oc_actions) / sizeof(oc_actions[0]))
				luaL_error(L, "%s: 'action' must be \"drop\", \"refused\" or "
					   "\"servfail\", got '%s'", fn, a);
			action = (int)i;
			lua_pop(L, 1);
		}
		dlb_lua_opt_int(L, t, fn, "maskV4", 0, 32, &v4);
		dlb_lua_opt_int(L, t, fn, "maskV6", 0, 128, &v6);
		dlb_lua_warn_unknown_keys(L, t, fn, "option", oc_opts);
	}
	cfg = config_time(L, fn);
	cfg->max_outstanding_per_client = (int)n;
	cfg->oc_action = action;
	cfg->oc_mask_v4 = v4;
	cfg->oc_mask_v6 = v6;
	return 0;
}

static const luaL_Reg abuse_funcs[] = {
	{ "setMaxTCPConnectionRatePerClient", l_set_max_tcp_connection_rate_per_client },
	{ "setTCPConnectionRateInterval", l_set_tcp_connection_rate_interval },
	{ "setBanDurationForExceedingTCPTLSRate", l_set_ban_duration_for_exceeding_tcp_tls_rate },
	{ "setMaxTCPReadIOsPerQuery", l_set_max_tcp_read_ios_per_query },
	{ "setBanDurationForExceedingMaxReadIOsPerQuery",
	  l_set_ban_duration_for_exceeding_max_read_ios_per_query },
	{ "setTCPConnectionsMaskV4", l_set_tcp_connections_mask_v4 },
	{ "setTCPConnectionsMaskV6", l_set_tcp_connections_mask_v6 },
	{ "setTCPConnectionsOverloadThreshold", l_set_tcp_connections_overload_threshold },
	{ "setMaxTCPOutputBufferSize", l_set_max_tcp_output_buffer_size },
	{ "setMaxOutstandingPerClient", l_set_max_outstanding_per_client },
	{ NULL, NULL },
};

void
dlb_lua_abuse_register(lua_State *L)
{
	lua_pushglobaltable(L);
	luaL_setfuncs(L, abuse_funcs, 0);
	lua_pop(L, 1);
}
