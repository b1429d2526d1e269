/*
 * dynblock_lua.h - the Lua side of dynamic blocks (docs/dynblocks.md):
 * dynBlockRulesGroup() and its methods, the legacy exceed*() and
 * addDynBlocks(), addDynBlockSMT(), addDynamicBlock(), setDynBlocksAction(),
 * setDynBlocksPurgeInterval(), showDynBlocks(), clearDynBlocks(),
 * getDynamicBlocks() and getDynamicBlocksSMT(), with dnsdist 1.7's
 * arguments and output formats.
 *
 * In the states that replay a config against a throwaway configuration
 * (worker states, reloads) and in --check-config, every function checks its
 * arguments and changes nothing; apply() and the exceed*() functions then
 * see no traffic. Worker rule states cannot call them (lua/worker.c's
 * allow-list).
 *
 * Thread: main (the config state).
 */
#ifndef DNSLB_LUA_DYNBLOCK_LUA_H
#define DNSLB_LUA_DYNBLOCK_LUA_H

#include <lua.h>

/** Register the dynamic-block functions and the DynBlockRulesGroup metatable in @L. */
void dlb_lua_dynblock_register(lua_State *L);

#endif
