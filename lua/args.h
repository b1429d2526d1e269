/*
 * args.h - argument and option helpers shared by the Lua bindings
 * (lua/conf.c, lua/rules_lua.c): one set of conventions, so every binding
 * accepts the same forms and raises the same messages.
 *
 * Conventions (dnsdist 1.7's): an integer or a number may also be given as a
 * numeric string ("10"); a boolean as true/false or "true"/"false". @fn is
 * the name of the Lua function being called; errors are raised with
 * luaL_error, which prefixes the caller's "chunk:line: ", so users read
 * "dnslb.conf:12: newServer: 'qps' must be an integer". The messages below
 * are part of the interface (tests and users grep them): keep them as they
 * are.
 *
 * Option tables: the dlb_lua_opt_*() functions read one key of the table at
 * stack index @t (an absolute index) and leave the stack as they found it
 * (except dlb_lua_opt_string_push, which leaves the string anchored).
 *
 * Thread: whichever thread uses the lua_State.
 */
#ifndef DNSLB_LUA_ARGS_H
#define DNSLB_LUA_ARGS_H

#include <lua.h>
#include <stdbool.h>

#include "dnslb/core/wire.h"

struct dlb_netmask;

/* ---- conversions (no errors) ---------------------------------------------- */

/** An integer from a number or a numeric string. @return false for anything else. */
bool dlb_lua_to_integer(lua_State *L, int idx, lua_Integer *out);
/** A finite number from a number or a numeric string. */
bool dlb_lua_to_number(lua_State *L, int idx, lua_Number *out);
/** true/false, or the strings "true"/"false". */
bool dlb_lua_to_bool(lua_State *L, int idx, bool *out);

/* ---- positional arguments ---------------------------------------------------- */

/**
 * Argument #@arg as an integer in [lo, hi]. Raises "<fn>: argument #<arg>
 * must be an integer" or "<fn>: <v> is out of range (<lo>..<hi>)".
 */
lua_Integer dlb_lua_arg_int(lua_State *L, int arg, const char *fn, lua_Integer lo,
			    lua_Integer hi);
/** Like dlb_lua_arg_int, but @def when the argument is absent or nil. */
lua_Integer dlb_lua_opt_arg_int(lua_State *L, int arg, const char *fn, lua_Integer lo,
				lua_Integer hi, lua_Integer def);
/** Argument #@arg as a number in [lo, hi] ("must be a number", "%f is out of range"). */
lua_Number dlb_lua_arg_num(lua_State *L, int arg, const char *fn, lua_Number lo, lua_Number hi);
/** Argument #@arg as a boolean ("<fn>: argument #<arg> must be a boolean"). */
bool dlb_lua_arg_bool(lua_State *L, int arg, const char *fn);
/** Like dlb_lua_arg_bool, but @def when the argument is absent or nil. */
bool dlb_lua_opt_arg_bool(lua_State *L, int arg, const char *fn, bool def);
/** Argument #@arg as a string (not a number): "must be a string". Borrowed from the stack. */
const char *dlb_lua_arg_string(lua_State *L, int arg, const char *fn);
/** Argument #@arg must be a function ("must be a function"). */
void dlb_lua_arg_function(lua_State *L, int arg, const char *fn);
/** The options table at @arg, or 0 when absent or nil; anything else raises. */
int dlb_lua_opt_table(lua_State *L, int arg, const char *fn);

/* ---- values at a stack index, named in errors ---------------------------------- */

/**
 * The integer at stack index @idx, in [lo, hi]; @what names it in errors,
 * quotes included: "<fn>: 'maxTTL' must be an integer",
 * "<fn>: 'maxTTL' is out of range (<lo>..<hi>)".
 */
lua_Integer dlb_lua_check_int_at(lua_State *L, int idx, const char *fn, const char *what,
				 lua_Integer lo, lua_Integer hi);
/** The boolean at stack index @idx: "<fn>: <what> must be a boolean". */
bool dlb_lua_check_bool_at(lua_State *L, int idx, const char *fn, const char *what);
/**
 * A netmask string ("192.0.2.0/24", "::1") at @idx: "<fn>: expected a netmask
 * string, got <type>" or "<fn>: invalid netmask '<s>'". (A Netmask object is
 * not accepted here: see lua/objects.c for that.)
 */
void dlb_lua_check_netmask(lua_State *L, int idx, const char *fn, struct dlb_netmask *nm);

/* ---- option tables --------------------------------------------------------------- */

/**
 * Option @key of table @t as an integer in [lo, hi] into *@out. @return
 * false (*@out untouched) when absent. Raises "<fn>: '<key>' must be an
 * integer" or "<fn>: '<key>' is out of range (<lo>..<hi>)".
 */
bool dlb_lua_opt_integer(lua_State *L, int t, const char *fn, const char *key, lua_Integer lo,
			 lua_Integer hi, lua_Integer *out);
/** dlb_lua_opt_integer into an int; [lo, hi] must lie within int's range. */
bool dlb_lua_opt_int(lua_State *L, int t, const char *fn, const char *key, lua_Integer lo,
		     lua_Integer hi, int *out);
/** Option @key as a boolean ("<fn>: '<key>' must be a boolean"). @return false when absent. */
bool dlb_lua_opt_bool(lua_State *L, int t, const char *fn, const char *key, bool *out);
/**
 * Option @key as a string, left on the stack (anchored) while the caller
 * uses it; the caller pops it. @return NULL (nothing pushed) when absent.
 */
const char *dlb_lua_opt_string_push(lua_State *L, int t, const char *fn, const char *key);

/** Is @s one of the NULL-terminated @list? */
bool dlb_lua_name_in(const char *s, const char *const *list);
/**
 * Log (not fail on) keys of table @t missing from the NULL-terminated
 * @known, as dnsdist 1.8+ does: "<fn>: unknown <what> '<key>'" (or "of type
 * <type>" for a key that is not a string). Nothing when @t is 0 or in a
 * silent state (dlb_lua_silent).
 */
void dlb_lua_warn_unknown_keys(lua_State *L, int t, const char *fn, const char *what,
			       const char *const *known);

/* ---- names of DNS constants ------------------------------------------------------ */

/** dnsdist 1.7's DNSClass, DNSOpcode and DNSRCode names (struct dlb_named, the
 * QType names and dlb_named_lookup are in dnslb/core/wire.h). */
extern const struct dlb_named dlb_lua_qclasses[];
extern const struct dlb_named dlb_lua_opcodes[];
extern const struct dlb_named dlb_lua_rcodes[];


/* ---- memory held while Lua may raise --------------------------------------------- */

/**
 * A box for malloc'ed memory while Lua runs code that may raise (print,
 * a visitor): the userdata's __gc frees @p if it still holds it. @n and
 * @cap are the owner's (a growing array).
 */
struct dlb_lua_box {
	void *p;
	size_t n, cap;
};

/** Push a new empty box (a userdata on the stack). */
struct dlb_lua_box *dlb_lua_box_new(lua_State *L);
/** Free what @b holds now (the box itself goes with the GC). */
void dlb_lua_box_free(struct dlb_lua_box *b);
/**
 * Append one zeroed element of @esize bytes to the array @b holds (doubling
 * from 16), the way the visitors of shared tables (rings, dynamic blocks)
 * collect into a box. The array may move. @return the element, or NULL when
 * out of memory (nothing changed).
 */
void *dlb_lua_box_push(struct dlb_lua_box *b, size_t esize);

/* ---- output ----------------------------------------------------------------------- */

/**
 * No output at all (no log lines, no show*() text): a worker state replaying
 * the config (DLB_LUA_PHASE_WORKER), or a state without a dlb_lua_conf.
 */
bool dlb_lua_silent(lua_State *L);
/** A worker state replaying the config: build objects, publish nothing, open no file. */
bool dlb_lua_replaying(lua_State *L);
/**
 * A line of show*() output: through the global print, so the console can
 * capture it; to stdout when print is not a function. While the
 * configuration is evaluated (and in --check-config) it is dropped, as
 * dnsdist drops it, unless print is a Lua function of the configuration's.
 */
void dlb_lua_print(lua_State *L, const char *s);

#endif
