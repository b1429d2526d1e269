/*
 * conf.h - evaluation of the dnsdist-compatible Lua configuration.
 *
 * Thread: main only. The Lua state built here is the config state (L_conf of
 * ARCHITECTURE.md §1); it stays alive after startup for the console.
 * Ownership: the dlb_lua_conf borrows @cfg; the caller frees both.
 */
#ifndef DNSLB_LUA_CONF_H
#define DNSLB_LUA_CONF_H

#include <stdbool.h>
#include <stddef.h>

struct dlb_config;
struct dlb_lua_conf;
struct dlb_rcu_thread;

enum dlb_lua_phase {
	DLB_LUA_PHASE_CONFIG = 0,	/* evaluating the config file at startup */
	DLB_LUA_PHASE_CHECK,		/* --check-config: same, nothing is started */
	DLB_LUA_PHASE_RUNNING,		/* console: config-time-only setters raise errors */
};

struct dlb_lua_conf *dlb_lua_conf_new(struct dlb_config *cfg, enum dlb_lua_phase phase);
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
 * "path:line: message").
 * @return 0, or -1 with the message in @err.
 */
int dlb_lua_conf_load_file(struct dlb_lua_conf *lc, const char *path, char *err, size_t errlen);

/** Evaluate a string (tests, console). @chunkname as for luaL_loadbuffer. */
int dlb_lua_conf_load_string(struct dlb_lua_conf *lc, const char *code, const char *chunkname,
			     char *err, size_t errlen);

#endif
