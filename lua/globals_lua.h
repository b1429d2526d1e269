/*
 * globals_lua.h - dnsdist's small console globals: getBind(),
 * getBindCount() (ClientState objects), show(), help(),
 * showSecurityStatus(), shutdown() and the query counters.
 *
 * Thread: the thread that owns the state.
 */
#ifndef DNSLB_LUA_GLOBALS_LUA_H
#define DNSLB_LUA_GLOBALS_LUA_H

#include <lua.h>

/** Register the globals and the ClientState metatable. Under lua_pcall (may raise). */
void dlb_lua_globals_register(lua_State *L);

/**
 * A reload's state @L is adopted: publish what it set for the workers'
 * next generation (setQueryCountFilter). Thread: main.
 */
void dlb_lua_globals_adopt(lua_State *L);

#endif
