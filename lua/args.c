/*
 * args.c - argument and option helpers shared by the Lua bindings (args.h).
 *
 * Thread: whichever thread uses the lua_State.
 */
#include "lua/args.h"

#include <lauxlib.h>
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dnslb/core/log.h"
#include "dnslb/core/netmask.h"
#include "lua/conf.h"

/* ---- conversions ------------------------------------------------------------ */

bool
dlb_lua_to_integer(lua_State *L, int idx, lua_Integer *out)
{
	int t = lua_type(L, idx), isnum = 0;

	if (t != LUA_TNUMBER && t != LUA_TSTRING)
		return false;
	*out = lua_tointegerx(L, idx, &isnum);
	return isnum != 0;
}

bool
dlb_lua_to_number(lua_State *L, int idx, lua_Number *out)
{
	int t = lua_type(L, idx), isnum = 0;

	if (t != LUA_TNUMBER && t != LUA_TSTRING)
		return false;
	*out = lua_tonumberx(L, idx, &isnum);
	return isnum != 0 && isfinite(*out);
}

bool
dlb_lua_to_bool(lua_State *L, int idx, bool *out)
{
	if (lua_type(L, idx) == LUA_TBOOLEAN) {
		*out = lua_toboolean(L, idx);
		return true;
	}
	if (lua_type(L, idx) == LUA_TSTRING) {
		const char *s = lua_tostring(L, idx);

		if (strcmp(s, "true") == 0 || strcmp(s, "false") == 0) {
			*out = s[0] == 't';
			return true;
		}
	}
	return false;
}

/* ---- positional arguments ------------------------------------------------------- */

lua_Integer
dlb_lua_arg_int(lua_State *L, int arg, const char *fn, lua_Integer lo, lua_Integer hi)
{
	lua_Integer v = 0;

	if (!dlb_lua_to_integer(L, arg, &v))
		luaL_error(L, "%s: argument #%d must be an integer", fn, arg);
	if (v < lo || v > hi)
		luaL_error(L, "%s: %I is out of range (%I..%I)", fn, v, lo, hi);
	return v;
}

lua_Integer
dlb_lua_opt_arg_int(lua_State *L, int arg, const char *fn, lua_Integer lo, lua_Integer hi,
		    lua_Integer def)
{
	if (lua_isnoneornil(L, arg))
		return def;
	return dlb_lua_arg_int(L, arg, fn, lo, hi);
}

lua_Number
dlb_lua_arg_num(lua_State *L, int arg, const char *fn, lua_Number lo, lua_Number hi)
{
	lua_Number v = 0;

	if (!dlb_lua_to_number(L, arg, &v))
		luaL_error(L, "%s: argument #%d must be a number", fn, arg);
	if (v < lo || v > hi)
		luaL_error(L, "%s: %f is out of range (%f..%f)", fn, v, lo, hi);
	return v;
}

bool
dlb_lua_arg_bool(lua_State *L, int arg, const char *fn)
{
	bool b = false;

	if (!dlb_lua_to_bool(L, arg, &b))
		luaL_error(L, "%s: argument #%d must be a boolean", fn, arg);
	return b;
}

bool
dlb_lua_opt_arg_bool(lua_State *L, int arg, const char *fn, bool def)
{
	if (lua_isnoneornil(L, arg))
		return def;
	return dlb_lua_arg_bool(L, arg, fn);
}

const char *
dlb_lua_arg_string(lua_State *L, int arg, const char *fn)
{
	if (lua_type(L, arg) != LUA_TSTRING)
		luaL_error(L, "%s: argument #%d must be a string", fn, arg);
	return lua_tostring(L, arg);
}

void
dlb_lua_arg_function(lua_State *L, int arg, const char *fn)
{
	if (lua_type(L, arg) != LUA_TFUNCTION)
		luaL_error(L, "%s: argument #%d must be a function", fn, arg);
}

int
dlb_lua_opt_table(lua_State *L, int arg, const char *fn)
{
	if (lua_isnoneornil(L, arg))
		return 0;
	if (lua_type(L, arg) != LUA_TTABLE)
		luaL_error(L, "%s: argument #%d must be a table of options", fn, arg);
	return arg;
}

/* ---- values at a stack index ------------------------------------------------------- */

lua_Integer
dlb_lua_check_int_at(lua_State *L, int idx, const char *fn, const char *what, lua_Integer lo,
		     lua_Integer hi)
{
	lua_Integer v = 0;

	if (!dlb_lua_to_integer(L, idx, &v))
		luaL_error(L, "%s: %s must be an integer", fn, what);
	if (v < lo || v > hi)
		luaL_error(L, "%s: %s is out of range (%I..%I)", fn, what, lo, hi);
	return v;
}

bool
dlb_lua_check_bool_at(lua_State *L, int idx, const char *fn, const char *what)
{
	bool b = false;

	if (!dlb_lua_to_bool(L, idx, &b))
		luaL_error(L, "%s: %s must be a boolean", fn, what);
	return b;
}

void
dlb_lua_check_netmask(lua_State *L, int idx, const char *fn, struct dlb_netmask *nm)
{
	if (lua_type(L, idx) != LUA_TSTRING)
		luaL_error(L, "%s: expected a netmask string, got %s", fn, luaL_typename(L, idx));
	if (dlb_netmask_parse(lua_tostring(L, idx), nm) != 0)
		luaL_error(L, "%s: invalid netmask '%s'", fn, lua_tostring(L, idx));
}

/* ---- option tables ------------------------------------------------------------------ */

bool
dlb_lua_opt_integer(lua_State *L, int t, const char *fn, const char *key, lua_Integer lo,
		    lua_Integer hi, lua_Integer *out)
{
	lua_Integer v = 0;

	if (lua_getfield(L, t, key) == LUA_TNIL) {
		lua_pop(L, 1);
		return false;
	}
	if (!dlb_lua_to_integer(L, -1, &v))
		luaL_error(L, "%s: '%s' must be an integer", fn, key);
	if (v < lo || v > hi)
		luaL_error(L, "%s: '%s' is out of range (%I..%I)", fn, key, lo, hi);
	lua_pop(L, 1);
	*out = v;
	return true;
}

bool
dlb_lua_opt_int(lua_State *L, int t, const char *fn, const char *key, lua_Integer lo,
		lua_Integer hi, int *out)
{
	lua_Integer v = 0;

	if (!dlb_lua_opt_integer(L, t, fn, key, lo, hi, &v))
		return false;
	*out = (int)v;
	return true;
}

bool
dlb_lua_opt_bool(lua_State *L, int t, const char *fn, const char *key, bool *out)
{
	if (lua_getfield(L, t, key) == LUA_TNIL) {
		lua_pop(L, 1);
		return false;
	}
	if (!dlb_lua_to_bool(L, -1, out))
		luaL_error(L, "%s: '%s' must be a boolean", fn, key);
	lua_pop(L, 1);
	return true;
}

const char *
dlb_lua_opt_string_push(lua_State *L, int t, const char *fn, const char *key)
{
	if (lua_getfield(L, t, key) == LUA_TNIL) {
		lua_pop(L, 1);
		return NULL;
	}
	if (lua_type(L, -1) != LUA_TSTRING)
		luaL_error(L, "%s: '%s' must be a string", fn, key);
	return lua_tostring(L, -1);
}

bool
dlb_lua_name_in(const char *s, const char *const *list)
{
	for (; *list != NULL; list++)
		if (strcmp(s, *list) == 0)
			return true;
	return false;
}

void
dlb_lua_warn_unknown_keys(lua_State *L, int t, const char *fn, const char *what,
			  const char *const *known)
{
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);

	/* dnsdist 1.7 ignores unknown keys silently: --check-config prints
	 * nothing; the daemon logs them, a typo is worth a line in the log */
	if (t == 0 || dlb_lua_silent(L) || dlb_lua_conf_phase(lc) == DLB_LUA_PHASE_CHECK)
		return;
	lua_pushnil(L);
	while (lua_next(L, t) != 0) {
		lua_pop(L, 1);
		if (lua_type(L, -1) != LUA_TSTRING)
			dlb_warn("%s: unknown %s of type %s", fn, what, luaL_typename(L, -1));
		else if (!dlb_lua_name_in(lua_tostring(L, -1), known))
			dlb_warn("%s: unknown %s '%s'", fn, what, lua_tostring(L, -1));
	}
}

/* ---- names of DNS constants ------------------------------------------------------------ */

const struct dlb_named dlb_lua_qclasses[] = {
	{ "IN", 1 }, { "CHAOS", 3 }, { "NONE", 254 }, { "ANY", 255 },
	{ NULL, 0 },
};

const struct dlb_named dlb_lua_opcodes[] = {
	{ "Query", 0 }, { "IQuery", 1 }, { "Status", 2 }, { "Notify", 4 }, { "Update", 5 },
	{ NULL, 0 },
};

const struct dlb_named dlb_lua_rcodes[] = {
	{ "NOERROR", 0 }, { "FORMERR", 1 }, { "SERVFAIL", 2 }, { "NXDOMAIN", 3 },
	{ "NOTIMP", 4 }, { "REFUSED", 5 }, { "YXDOMAIN", 6 }, { "YXRRSET", 7 },
	{ "NXRRSET", 8 }, { "NOTAUTH", 9 }, { "NOTZONE", 10 }, { "BADVERS", 16 },
	{ "BADSIG", 16 }, { "BADKEY", 17 }, { "BADTIME", 18 }, { "BADMODE", 19 },
	{ "BADNAME", 20 }, { "BADALG", 21 }, { "BADTRUNC", 22 }, { "BADCOOKIE", 23 },
	{ NULL, 0 },
};


/* ---- memory held while Lua may raise ------------------------------------------------------ */

static int
box_gc(lua_State *L)
{
	struct dlb_lua_box *b = lua_touserdata(L, 1);

	free(b->p);
	b->p = NULL;
	return 0;
}

struct dlb_lua_box *
dlb_lua_box_new(lua_State *L)
{
	struct dlb_lua_box *b = lua_newuserdatauv(L, sizeof(*b), 0);

	memset(b, 0, sizeof(*b));
	if (luaL_newmetatable(L, "dnslb.box")) {
		lua_pushcfunction(L, box_gc);
		lua_setfield(L, -2, "__gc");
	}
	lua_setmetatable(L, -2);
	return b;
}

void
dlb_lua_box_free(struct dlb_lua_box *b)
{
	free(b->p);
	b->p = NULL;
	b->n = b->cap = 0;
}

void *
dlb_lua_box_push(struct dlb_lua_box *b, size_t esize)
{
	char *e;

	if (b->n == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 16;
		void *p = cap <= SIZE_MAX / esize ? realloc(b->p, cap * esize) : NULL;

		if (p == NULL)
			return NULL;
		b->p = p;
		b->cap = cap;
	}
	e = (char *)b->p + b->n++ * esize;
	memset(e, 0, esize);
	return e;
}

/* ---- output ------------------------------------------------------------------------------ */

bool
dlb_lua_silent(lua_State *L)
{
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);

	return lc == NULL || dlb_lua_phase_throwaway(dlb_lua_conf_phase(lc));
}

bool
dlb_lua_replaying(lua_State *L)
{
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);

	return lc == NULL || dlb_lua_conf_phase(lc) == DLB_LUA_PHASE_WORKER;
}

void
dlb_lua_print(lua_State *L, const char *s)
{
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);
	enum dlb_lua_phase p = lc != NULL ? dlb_lua_conf_phase(lc) : DLB_LUA_PHASE_RUNNING;

	if (dlb_lua_phase_throwaway(p))
		return;
	/* A console command run by the configuration prints nothing: dnsdist
	 * drops the output it buffers for the console. Only a print() the
	 * configuration defined itself (a Lua function) still gets it. */
	if (lua_getglobal(L, "print") != LUA_TFUNCTION || lua_iscfunction(L, -1)) {
		if (p == DLB_LUA_PHASE_CONFIG || p == DLB_LUA_PHASE_CHECK) {
			lua_pop(L, 1);
			return;
		}
	}
	if (lua_type(L, -1) == LUA_TFUNCTION) {
		lua_pushstring(L, s);
		lua_call(L, 1, 0);
	} else {
		lua_pop(L, 1);
		fputs(s, stdout);
		fputc('\n', stdout);
	}
}
