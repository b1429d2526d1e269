/*
 * rings_lua.h - the Lua side of the ring buffers (docs/rings.md):
 * setRingBuffersSize, setRingBuffersLockRetries, setRingBuffersOptions
 * (dnsdist 1.8), and dnsdist 1.7's
 * inspection tools over the rings: topQueries, topClients, topResponses,
 * topSlow, topTimeouts (dnslb), topBandwidth, grepq, showResponseLatency,
 * getTopQueries, getTopResponses, getSlowResponses, getTopBandwidth,
 * getRespRing and getResponseRing.
 *
 * The tools read the daemon's rings (dlb_daemon) and print through the
 * global print, so the console captures their output. In the states that
 * replay a config against a throwaway configuration (worker states,
 * reloads) they check their arguments and do nothing else.
 *
 * Thread: main (the config state).
 */
#ifndef DNSLB_LUA_RINGS_LUA_H
#define DNSLB_LUA_RINGS_LUA_H

#include <lua.h>

/** Register the ring buffer functions as globals of @L. */
void dlb_lua_rings_register(lua_State *L);

#endif
