/*
 * compat_lua.h - the standard Lua libraries of a dnslb state, the names
 * Lua 5.1 and LuaJIT configurations use (unpack, loadstring, table.getn,
 * bit, ...), and the `ffi` module that runs dnsdist's LuaJIT FFI rules over
 * dnslb's dq object (docs/lua.md, "Lua 5.1, LuaJIT and the FFI").
 *
 * Every state (config, console, worker) opens all the standard libraries,
 * as dnsdist does: a configuration may read files (io), call os.getenv and
 * require modules through package.path. A worker state's rules then lose
 * what would block a worker or escape the limits (dlb_lua_compat_restrict).
 *
 * Thread: main, when a state is built; the functions set up are then used
 * by the state's own thread.
 */
#ifndef DNSLB_LUA_COMPAT_H
#define DNSLB_LUA_COMPAT_H

#include <lua.h>

/** Open the standard libraries, the Lua 5.1/LuaJIT names and `ffi` (under lua_pcall). */
void dlb_lua_compat_open(lua_State *L);

/** A replaying state: io.write, io.stdout and io.stderr go to /dev/null (under lua_pcall). */
void dlb_lua_compat_quiet_io(lua_State *L);

/**
 * A worker state, before its replay: coroutine.wrap made of create and
 * resume, so that the rules' resume (dlb_lua_compat_restrict) bounds every
 * coroutine (under lua_pcall).
 */
void dlb_lua_compat_worker(lua_State *L);

/** After the replay: give io its standard output back (under lua_pcall). */
void dlb_lua_compat_loud_io(lua_State *L);

/**
 * A worker state's rules: io (but io.write and io.type), os (but getenv,
 * time, date, clock, difftime), debug (but traceback), package.loadlib and
 * package.searchpath raise "<name> cannot be called from a rule"; require
 * gives modules already loaded only; coroutine.resume passes the caller's
 * instruction hook on to the coroutine (under lua_pcall).
 */
void dlb_lua_compat_restrict(lua_State *L);

#endif
