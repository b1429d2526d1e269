/*
 * rules_lua.h - the Lua side of the rule engine: every selector and action
 * constructor (from one catalog table, which also generates
 * docs/rules-reference.md), addAction and the other chain functions, rule
 * management (showRules, rmRule, mvRule, ...), and makeRule.
 *
 * Thread: main (config state) and, replaying the config, worker states:
 * there (DLB_LUA_PHASE_WORKER) chain functions check their arguments but
 * publish nothing.
 */
#ifndef DNSLB_LUA_RULES_LUA_H
#define DNSLB_LUA_RULES_LUA_H

#include <lua.h>
#include <stdio.h>

/** Metatables and globals. Under lua_pcall (may raise). */
void dlb_lua_rules_register(lua_State *L);

/**
 * The function of a LuaFFIPerThread* object or policy: the code at
 * @idx (a string) evaluated in this state must return one; pushed.
 * Raises "<fn>: ..." otherwise.
 */
void dlb_lua_per_thread_fn(lua_State *L, int idx, const char *fn);

/** Write the Markdown reference of every selector and action to @f. */
void dlb_lua_rules_write_reference(FILE *f);

#endif
