/*
 * globals_lua.c - dnsdist 1.7.3's small console globals: getBind(),
 * getBindCount() and their ClientState objects, show(), help(),
 * showSecurityStatus() and shutdown().
 *
 * Texts and numbering follow dnsdist 1.7.3 as observed with its console:
 * each frontend counts twice, UDP (2i) then TCP (2i+1), as showBinds()
 * numbers them, and a ClientState prints as its address. While the
 * configuration is evaluated, the frontends are those declared so far (0
 * before the first setLocal/addLocal, as in dnsdist, whose default
 * listener comes after the configuration); at runtime, the running ones.
 *
 * Thread: main (config state); in a worker state the functions exist too
 * (shutdown() from a rule stops the daemon as SIGTERM does).
 */
#include "lua/globals_lua.h"

#include <lauxlib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dnslb/config.h"
#include "dnslb/console.h"
#include "dnslb/daemon.h"
#include "lua/args.h"
#include "lua/conf.h"

#define MT_BIND		"ClientState"

struct lbind {
	char text[64];		/* the frontend's address, as showBinds() prints it */
	int index;		/* showBinds() number */
};

/* The frontends getBind() sees: the config being evaluated, or the running one. */
static const struct dlb_config *
binds_cfg(lua_State *L)
{
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);

	if (lc != NULL) {
		enum dlb_lua_phase p = dlb_lua_conf_phase(lc);

		if (p == DLB_LUA_PHASE_CONFIG || p == DLB_LUA_PHASE_CHECK ||
		    p == DLB_LUA_PHASE_WORKER || p == DLB_LUA_PHASE_RELOAD)
			return dlb_lua_conf_cfg(lc);
	}
	return dlb_daemon.cfg;
}

static int
nbinds(lua_State *L)
{
	const struct dlb_config *cfg = binds_cfg(L);

	return cfg != NULL ? __atomic_load_n(&cfg->nfrontends, __ATOMIC_ACQUIRE) * 2 : 0;
}

static int
l_get_bind_count(lua_State *L)
{
	lua_pushinteger(L, nbinds(L));
	return 1;
}

/* getBind(n): the ClientState at showBinds() number n, or nil. */
static int
l_get_bind(lua_State *L)
{
	lua_Integer n = dlb_lua_arg_int(L, 1, "getBind", 0, LUA_MAXINTEGER);
	const struct dlb_config *cfg = binds_cfg(L);
	struct lbind *b;

	if (cfg == NULL || n >= nbinds(L)) {
		lua_pushnil(L);
		return 1;
	}
	b = lua_newuserdatauv(L, sizeof(*b), 0);
	snprintf(b->text, sizeof(b->text), "%s", cfg->frontends[n / 2].text);
	b->index = (int)n;
	luaL_setmetatable(L, MT_BIND);
	return 1;
}

static int
l_bind_tostring(lua_State *L)
{
	struct lbind *b = luaL_checkudata(L, 1, MT_BIND);

	lua_pushstring(L, b->text);
	return 1;
}

/* dnslb has no TLS frontends: dnsdist gives "" for a plain one. */
static int
l_bind_tls_provider(lua_State *L)
{
	luaL_checkudata(L, 1, MT_BIND);
	lua_pushliteral(L, "");
	return 1;
}

/* No eBPF filter can be made (newBPFFilter is refused), so none is attached. */
static int
l_bind_attach_filter(lua_State *L)
{
	luaL_checkudata(L, 1, MT_BIND);
	return luaL_error(L, "attachFilter: eBPF filtering is not supported by dnslb");
}

static int
l_bind_detach_filter(lua_State *L)
{
	luaL_checkudata(L, 1, MT_BIND);
	return 0;
}

/* show(s): a line of console output, as dnsdist's (dropped while the configuration runs). */
static int
l_show(lua_State *L)
{
	if (lua_gettop(L) > 1)
		return luaL_error(L, "show: takes one argument");
	/* a number is converted, as dnsdist's string parameter converts it */
	if (lua_type(L, 1) == LUA_TNUMBER)
		dlb_lua_print(L, luaL_tolstring(L, 1, NULL));
	else
		dlb_lua_print(L, dlb_lua_arg_string(L, 1, "show"));
	return 0;
}

/* dnslb does no security polling: dnsdist's status stays 0 (unknown) without it. */
static int
l_show_security_status(lua_State *L)
{
	dlb_lua_print(L, "0");
	return 0;
}

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * help(): the global functions this state has, sorted, one a line.
 * dnsdist prints a fixed list with a line of help each; dnslb's reference
 * is in docs (configuration.md, rules-reference.md).
 */
static int
l_help(lua_State *L)
{
	const char **names;
	size_t n = 0, cap = 0;
	luaL_Buffer b;

	if (dlb_lua_silent(L))
		return 0;
	lua_pushglobaltable(L);
	lua_pushnil(L);
	while (lua_next(L, -2) != 0) {
		if (lua_type(L, -2) == LUA_TSTRING && lua_isfunction(L, -1))
			cap++;
		lua_pop(L, 1);
	}
	/* the strings stay alive: the global table holds them */
	names = lua_newuserdatauv(L, (cap > 0 ? cap : 1) * sizeof(*names), 0);
	lua_pushnil(L);
	while (lua_next(L, -3) != 0) {
		if (lua_type(L, -2) == LUA_TSTRING && lua_isfunction(L, -1) && n < cap)
			names[n++] = lua_tostring(L, -2);
		lua_pop(L, 1);
	}
	qsort(names, n, sizeof(*names), cmp_str);
	luaL_buffinit(L, &b);
	for (size_t i = 0; i < n; i++) {
		if (i > 0)
			luaL_addchar(&b, '\n');
		luaL_addstring(&b, names[i]);
		luaL_addstring(&b, "()");
	}
	luaL_pushresult(&b);
	dlb_lua_print(L, lua_tostring(L, -1));
	return 0;
}

/*
 * shutdown(): while the configuration is read, exit at once with status 0
 * (dnsdist's _exit(0), nothing flushed); once running, stop as SIGTERM does (the loop ends,
 * STOPPING=1 is notified, the workers are joined). A worker state replaying
 * the configuration does nothing: the config state already exited.
 */
static int
l_shutdown(lua_State *L)
{
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);
	enum dlb_lua_phase p = lc != NULL ? dlb_lua_conf_phase(lc) : DLB_LUA_PHASE_RUNNING;

	if (lua_gettop(L) > 0)
		return luaL_error(L, "shutdown: takes no argument");
	switch (p) {
	case DLB_LUA_PHASE_CONFIG:
	case DLB_LUA_PHASE_CHECK:
		/* as dnsdist: what stdio still buffers is lost (a pipe keeps print()s) */
		_exit(0);
	case DLB_LUA_PHASE_WORKER:
		return 0;
	case DLB_LUA_PHASE_RUNNING:
		/* the client sees the connection close, as with dnsdist's _exit() */
		dlb_console_drop_reply();
		kill(getpid(), SIGTERM);
		return 0;
	default:
		kill(getpid(), SIGTERM);
		return 0;
	}
}

void
dlb_lua_globals_register(lua_State *L)
{
	static const luaL_Reg bind_methods[] = {
		{ "toString", l_bind_tostring },
		{ "getEffectiveTLSProvider", l_bind_tls_provider },
		{ "attachFilter", l_bind_attach_filter },
		{ "detachFilter", l_bind_detach_filter },
		{ NULL, NULL },
	};
	static const luaL_Reg funcs[] = {
		{ "getBind", l_get_bind },
		{ "getBindCount", l_get_bind_count },
		{ "show", l_show },
		{ "showSecurityStatus", l_show_security_status },
		{ "help", l_help },
		{ "shutdown", l_shutdown },
		{ NULL, NULL },
	};

	luaL_newmetatable(L, MT_BIND);
	lua_newtable(L);
	luaL_setfuncs(L, bind_methods, 0);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, l_bind_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pop(L, 1);
	lua_pushglobaltable(L);
	luaL_setfuncs(L, funcs, 0);
	lua_pop(L, 1);
}
