/*
 * fleet_lua.h - the Lua side of the fleet (docs/fleet.md): showFleet(),
 * getFleet() and clearFleetDynBlocks(). They read the fleet view the main
 * thread refreshes every second (dnslb/control/fleet.h) and never wait on Redis.
 *
 * In the states that replay a config (worker states, reloads) and in
 * --check-config they do nothing.
 *
 * Thread: main (the config state).
 */
#ifndef DNSLB_LUA_FLEET_LUA_H
#define DNSLB_LUA_FLEET_LUA_H

#include <lua.h>

/** Register showFleet, getFleet and clearFleetDynBlocks as globals of @L. */
void dlb_lua_fleet_register(lua_State *L);

#endif
