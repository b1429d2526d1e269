/*
 * explain.h - explainQuery(): a dry run of a query through the ACL, the
 * rules, pool and policy selection and the cache (docs/rules.md).
 *
 * Thread: main (the config state).
 */
#ifndef DNSLB_LUA_EXPLAIN_H
#define DNSLB_LUA_EXPLAIN_H

#include <lua.h>

/** Register explainQuery in @L. */
void dlb_lua_explain_register(lua_State *L);

#endif
