/*
 * conf.h - evaluation of the dnsdist-compatible Lua configuration.
 *
 * Thread: main only. The Lua state built here is the config state (L_conf of
 * docs/architecture.md); it stays alive after startup for the console.
 * Ownership: the dlb_lua_conf borrows @cfg; the caller frees both.
 */
#ifndef DNSLB_LUA_CONF_H
#define DNSLB_LUA_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct dlb_config;
struct dlb_lua_conf;
struct dlb_rcu_thread;
typedef struct lua_State lua_State;

enum dlb_lua_phase {
	DLB_LUA_PHASE_CONFIG = 0,	/* evaluating the config file at startup */
	DLB_LUA_PHASE_CHECK,		/* --check-config: same, nothing is started */
	DLB_LUA_PHASE_RUNNING,		/* console: config-time-only setters raise errors */
	DLB_LUA_PHASE_WORKER,		/* a worker state replaying the config against a
					 * throwaway config (lua/worker.h): nothing printed,
					 * logged or published */
	DLB_LUA_PHASE_RELOAD,		/* a reload's new config state, evaluated like a
					 * worker state (silent, throwaway config, tiny
					 * caches) but its rules go to the staged ruleset
					 * (rules/rules.h) and its chunks are recorded; then
					 * rebound to the running config (RUNNING) */
	DLB_LUA_PHASE_RULES,		/* a worker state after its replay, bound to the real
					 * config read-only: what runs is LuaRule/LuaAction
					 * code on a worker thread. Only the allow-list of
					 * lua/worker.c stays callable; the few methods that
					 * would change the config (Server:addPool, rmPool,
					 * .order=, ServerPool:setCache, unsetCache) raise,
					 * and getPool() never creates a pool */
};

/** A phase evaluating the config against a throwaway configuration (WORKER, RELOAD). */
static inline bool
dlb_lua_phase_throwaway(enum dlb_lua_phase p)
{
	return p == DLB_LUA_PHASE_WORKER || p == DLB_LUA_PHASE_RELOAD;
}

/**
 * Does state @L act on the running daemon (the config state at startup or
 * from the console: blocks, fleet state)? Replays and worker rule states
 * do not.
 */
bool dlb_lua_conf_acts(lua_State *L);
/** Can state @L read the daemon's live state (dlb_lua_conf_acts, or --check-config)? */
bool dlb_lua_conf_live(lua_State *L);

/** The dlb_lua_conf of state @L (registry), its phase, config and RCU record. */
struct dlb_lua_conf *dlb_lua_conf_of(lua_State *L);
enum dlb_lua_phase dlb_lua_conf_phase(const struct dlb_lua_conf *lc);
struct dlb_config *dlb_lua_conf_cfg(const struct dlb_lua_conf *lc);
struct dlb_rcu_thread *dlb_lua_conf_rcu(const struct dlb_lua_conf *lc);

struct dlb_lua_conf *dlb_lua_conf_new(struct dlb_config *cfg, enum dlb_lua_phase phase);

/** The Lua release dnslb runs ("Lua 5.4.4"), for --version: only lua/ sees Lua's headers. */
const char *dlb_lua_release(void);
void dlb_lua_conf_free(struct dlb_lua_conf *lc);
void dlb_lua_conf_set_phase(struct dlb_lua_conf *lc, enum dlb_lua_phase phase);

/**
 * The calling (main) thread's registered RCU record, which the PacketCache
 * methods that remove or read entries (expunge, expungeByName, purgeExpired,
 * dump) need. Without one they raise a Lua error. Ownership: borrowed; it
 * must outlive @lc or be replaced first.
 */
void dlb_lua_conf_set_rcu(struct dlb_lua_conf *lc, struct dlb_rcu_thread *rt);

/**
 * Evaluate the config file @path (chunk name "@path", so errors read
 * "path:line: message"). In the CONFIG and CHECK phases every chunk that
 * evaluated without error is recorded, in order, for dlb_lua_conf_replay.
 * @return 0, or -1 with the message in @err.
 */
int dlb_lua_conf_load_file(struct dlb_lua_conf *lc, const char *path, char *err, size_t errlen);

struct dlb_backend;
/** Push a Server object for @be (the state's config must hold it). */
void dlb_lua_push_server(lua_State *L, struct dlb_backend *be);
/** The backend of the Server object at @idx, or NULL (not a Server, or removed). */
struct dlb_backend *dlb_lua_to_server(lua_State *L, int idx);

/** The daemon's reload (SIGHUP); NULL before it runs. @return 0, or -1 with @err. */
typedef int dlb_reload_fn(char *err, size_t errlen);
/**
 * reload() in the config state calls @fn: it returns true, or false and the
 * error (the running configuration is then kept). Thread: main.
 */
void dlb_lua_conf_set_reload_hook(dlb_reload_fn *fn);

/**
 * Call the config's global maintenance() if it defines one (dnsdist calls it
 * every second). An error is logged, at most once a minute, and does not
 * stop later calls.
 */
void dlb_lua_conf_maintenance(struct dlb_lua_conf *lc);
/** Does the config define a global maintenance() function? */
bool dlb_lua_conf_has_maintenance(const struct dlb_lua_conf *lc);

/** Evaluate a string (tests, console). @chunkname as for luaL_loadbuffer. */
int dlb_lua_conf_load_string(struct dlb_lua_conf *lc, const char *code, const char *chunkname,
			     char *err, size_t errlen);

/* ---- worker states (lua/worker.c) -------------------------------------------
 *
 * A worker state is a dlb_lua_conf of its own: created with the worker's
 * counting allocator in DLB_LUA_PHASE_WORKER over a throwaway config, it
 * replays the chunks the config state evaluated, then is rebound to the real
 * config in DLB_LUA_PHASE_RULES. In the WORKER phase print(), infolog(),
 * warnlog(), errlog() and show*() output nothing, nothing is logged, and
 * newPacketCache() builds a one-entry cache whatever the size asked.
 */

/** Like dlb_lua_conf_new, but the state allocates through @alloc (a lua_Alloc). */
struct dlb_lua_conf *dlb_lua_conf_new_alloc(struct dlb_config *cfg, enum dlb_lua_phase phase,
					    void *(*alloc)(void *ud, void *ptr, size_t osize,
							   size_t nsize),
					    void *ud);

/** The Lua state of @lc (borrowed: it lives as long as @lc). */
lua_State *dlb_lua_conf_state(const struct dlb_lua_conf *lc);

/**
 * Evaluate in @dst, in order, every chunk @src recorded (files are read
 * again). @dst then counts as a replay of @src (dlb_lua_conf_origin).
 * @return 0, or -1 with "file:line: message" in @err.
 */
int dlb_lua_conf_replay(const struct dlb_lua_conf *src, struct dlb_lua_conf *dst, char *err,
			size_t errlen);

/**
 * After the replay: bind @lc to @cfg in DLB_LUA_PHASE_RULES. Server and
 * PacketCache objects the replay made are moved to the server (cache) of
 * @cfg at the same position; print() writes again. The throwaway config may
 * be freed afterwards. @return 0, or -1 with the message in @err.
 */
int dlb_lua_conf_rebind(struct dlb_lua_conf *lc, struct dlb_config *cfg, char *err,
			size_t errlen);

struct dlb_reload_plan;
/**
 * A reload's state: rebind its objects (and those of every replay of it made
 * from now on) through @plan instead of by position. Borrowed until the
 * rebind; each rebind forgets it.
 */
void dlb_lua_conf_set_plan(struct dlb_lua_conf *lc, const struct dlb_reload_plan *plan);

/**
 * The same for a reload's state (DLB_LUA_PHASE_RELOAD): bound to the running
 * @cfg, it becomes the config state (DLB_LUA_PHASE_RUNNING, RCU record @rt).
 */
int dlb_lua_conf_adopt(struct dlb_lua_conf *lc, struct dlb_config *cfg, struct dlb_rcu_thread *rt,
		       char *err, size_t errlen);

/**
 * A number naming the config state whose chunks @lc evaluates: its own for a
 * config state, its source's for a replay (newQPSLimiter shares buckets by it).
 */
unsigned long dlb_lua_conf_origin(const struct dlb_lua_conf *lc);

/**
 * setLuaMemoryLimit() (bytes per worker state, default 64 MiB, 0 = none) and
 * setLuaInstructionLimit() (per call, default 10,000,000, 0 = none).
 */
void dlb_lua_conf_limits(const struct dlb_lua_conf *lc, size_t *mem_bytes, uint64_t *insns);

#endif
