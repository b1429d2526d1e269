/*
 * abuse_lua.h - the Lua settings of the abuse limits (docs/abuse.md): the
 * TCP connection rate, bans, masks, read IOs per query, overload threshold
 * and output bound (dnsdist 2.0's names, plus setMaxTCPOutputBufferSize),
 * and setMaxOutstandingPerClient.
 *
 * All are config-time only: from the console they raise "<name> cannot be
 * altered at runtime" (a reload keeps the running values, as for the other
 * TCP limits). In the states that replay the config against a throwaway
 * configuration they check their arguments and set the throwaway copy.
 *
 * Thread: main (the config state) and the replaying states.
 */
#ifndef DNSLB_LUA_ABUSE_LUA_H
#define DNSLB_LUA_ABUSE_LUA_H

#include <lua.h>

/** Register the abuse-limit settings as globals of @L. */
void dlb_lua_abuse_register(lua_State *L);

#endif
