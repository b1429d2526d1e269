/*
 * redis_lua.h - the Lua side of fleet state (docs/fleet.md): setRedis{}
 * (config time only: from the console it raises "... cannot be altered at
 * runtime", and a reload keeps the running settings), showRedis().
 *
 * Thread: main (the config state) and the replaying states, which check the
 * arguments and change nothing.
 */
#ifndef DNSLB_LUA_REDIS_LUA_H
#define DNSLB_LUA_REDIS_LUA_H

#include <lua.h>

/** Register setRedis and showRedis as globals of @L. */
void dlb_lua_redis_register(lua_State *L);

#endif
