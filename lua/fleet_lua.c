/*
 * fleet_lua.c - showFleet(), getFleet(), clearFleetDynBlocks() (fleet_lua.h).
 */
#include "lua/fleet_lua.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/pipeline/dynblock.h"
#include "dnslb/control/fleet.h"
#include "dnslb/store/redis.h"
#include "lua/args.h"
#include "lua/conf.h"

/* showFleet(): the fleet view, one line per node, then the totals. */
static int
l_show_fleet(lua_State *L)
{
	struct dlb_lua_box *b;
	char *line;

	if (!dlb_lua_conf_acts(L))
		return 0;
	b = dlb_lua_box_new(L);
	b->p = dlb_fleet_show(dlb_dyn_now());
	if (b->p == NULL)
		return luaL_error(L, "showFleet: out of memory");
	line = b->p;
	while (*line != '\0') {
		char *nl = strchr(line, '\n');

		if (nl != NULL)
			*nl = '\0';
		dlb_lua_print(L, line);
		if (nl == NULL)
			break;
		line = nl + 1;
	}
	return 0;
}

static void
set_num(lua_State *L, const char *k, double v)
{
	lua_pushnumber(L, v);
	lua_setfield(L, -2, k);
}

/* getFleet(): {{node=, version=, uptime=, qps=, queries=, ...}, ...} sorted by node. */
static int
l_get_fleet(lua_State *L)
{
	const struct dlb_fleet_node *nodes;
	double as_of, now = dlb_dyn_now();
	size_t n = dlb_lua_conf_acts(L) ? dlb_fleet_nodes(&nodes, &as_of) : 0;

	lua_createtable(L, (int)n, 0);
	for (size_t i = 0; i < n; i++) {
		const struct dlb_fleet_node *x = &nodes[i];

		lua_createtable(L, 0, 13);
		lua_pushstring(L, x->node);
		lua_setfield(L, -2, "node");
		lua_pushstring(L, x->version);
		lua_setfield(L, -2, "version");
		set_num(L, "uptime", x->uptime);
		set_num(L, "qps", x->qps);
		set_num(L, "queries", x->queries);
		set_num(L, "cacheHits", x->cache_hits);
		set_num(L, "cacheMisses", x->cache_misses);
		set_num(L, "hitRate", x->hit_rate);
		set_num(L, "backendsUp", x->backends_up);
		set_num(L, "backends", x->backends);
		set_num(L, "blocks", x->blocks);
		set_num(L, "updated", x->updated);
		set_num(L, "age", now > x->updated ? now - x->updated : 0);
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
	return 1;
}

/*
 * clearFleetDynBlocks(): @return true when the fleet was told, false when
 * only this node cleared.
 */
static int
l_clear_fleet_dyn_blocks(lua_State *L)
{
	int rc;

	if (!dlb_lua_conf_acts(L)) {
		lua_pushboolean(L, false);
		return 1;
	}
	rc = dlb_fleet_clear_all();
	if (rc != 0 && dlb_redis_settings.enabled)
		dlb_lua_print(L, "Redis is unreachable: the dynamic blocks were cleared on this "
				 "node only");
	else if (rc != 0)
		dlb_lua_print(L, "Redis is not configured (setRedis): the dynamic blocks were "
				 "cleared on this node only");
	lua_pushboolean(L, rc == 0);
	return 1;
}

static const luaL_Reg fleet_funcs[] = {
	{ "showFleet", l_show_fleet },
	{ "getFleet", l_get_fleet },
	{ "clearFleetDynBlocks", l_clear_fleet_dyn_blocks },
	{ NULL, NULL },
};

void
dlb_lua_fleet_register(lua_State *L)
{
	lua_pushglobaltable(L);
	luaL_setfuncs(L, fleet_funcs, 0);
	lua_pop(L, 1);
}
