/*
 * worker.h - per-worker Lua states (docs/architecture.md#rules-lua-states-and-reloads).
 *
 * Each worker owns one Lua state, built on the main thread before the
 * workers start, by evaluating the same config chunks as the config state
 * with every configuration directive applied to a throwaway configuration
 * (DLB_LUA_PHASE_WORKER): top-level helper functions, tables and upvalues
 * exist in every state exactly as the config defines them. LuaRule,
 * LuaAction and LuaResponseAction functions are numbered in creation order
 * (dlb_lua_register_fn) in every state; a rule stores the number, and the
 * worker runs its own state's function of that number. Then the state is
 * bound to the real configuration, read-only: only an allow-list of
 * functions stays callable from rules (getServer, getPool, logging, the
 * helper objects, ...).
 *
 * Limits: an instruction-count hook stops a call after
 * setLuaInstructionLimit() instructions (default 10,000,000); an allocator
 * caps each worker state at setLuaMemoryLimit() bytes (default 64 MiB).
 *
 * Thread: a struct dlb_lua_worker is used by its worker only, once built.
 */
#ifndef DNSLB_LUA_WORKER_H
#define DNSLB_LUA_WORKER_H

#include <lua.h>
#include <stddef.h>

struct dlb_lua_conf;
struct dlb_config;
struct dlb_lua_worker;

/**
 * Store the function at @idx as the next Lua rule function of this state.
 * @src gets "file:line" of its definition. @return its number (>= 1).
 *
 * In the running config state (the console, maintenance()) the worker
 * states cannot replay the code that made the function, so its bytecode is
 * kept (lua_dump) and each worker loads it into its own state the first
 * time it calls that number. Such a function may use globals (the worker's
 * own) but not capture local variables: that raises, as does a C function.
 */
int dlb_lua_register_fn(lua_State *L, int idx, char *src, size_t srcsz);

/**
 * Build worker @id's state from the chunks @lc evaluated, then bind it to
 * @cfg. @return NULL with a message in @err (file:line when the replay
 * failed).
 */
struct dlb_lua_worker *dlb_luaw_new(const struct dlb_lua_conf *lc, const struct dlb_config *cfg,
				    int id, char *err, size_t errlen);
void dlb_luaw_free(struct dlb_lua_worker *lw);

struct dlb_pool;
struct dlb_dq;
/**
 * Push a table of the C helpers of the ffi module (lua/compat_lua.c):
 * set_result(dq, s), addr(dq, local[, bits]), qname_raw(dq), opt_rdata(dq). They take a
 * dq of a running rule; elsewhere they raise.
 */
void dlb_luaw_push_ffi(lua_State *L);

#endif
