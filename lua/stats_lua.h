/*
 * stats_lua.h - the statistics functions of the console: dumpStats(),
 * getStatisticsCounters(), showBinds(), showTCPStats(). They read
 * dnslb/control/metrics.h, so they show the same figures as the web API.
 *
 * Thread: main (config state). In a worker or reload replay they print
 * nothing (dlb_lua_silent).
 */
#ifndef DNSLB_LUA_STATS_LUA_H
#define DNSLB_LUA_STATS_LUA_H

#include <lua.h>

/** Register the globals. Under lua_pcall (may raise). */
void dlb_lua_stats_register(lua_State *L);

#endif
