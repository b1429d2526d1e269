/*
 * lua_reference.h - the reference of every Lua object a configuration or a
 * rule sees (dq/dr, dq.dh, the helper objects of lua/objects.c, the Server,
 * ServerPool, PacketCache and ServerPolicy objects of lua/conf.c), from one
 * table, dlb_lua_reference[] in lua/lua_reference.c.
 *
 * The table generates docs/lua-reference.md (gen_rules_reference lua; the
 * docs_lua_reference test compares), and tests/unit/test_lua_reference.c
 * checks it against what the code exposes, both ways, so a member added to or
 * removed from an object without a table line fails the tests.
 *
 * Thread: any (constant data).
 */
#ifndef DNSLB_LUA_LUA_REFERENCE_H
#define DNSLB_LUA_LUA_REFERENCE_H

#include <stddef.h>
#include <stdio.h>

enum dlb_lref_kind {
	/*
	 * Starts an object's section: name is its metatable's registry name
	 * ("DNSQuestion"), sig how the docs write an instance ("dq"), doc the
	 * section's introduction (Markdown). A name of "" makes a section of
	 * global functions (DLB_LREF_FUNCTION lines) that belong to no object.
	 */
	DLB_LREF_OBJECT,
	DLB_LREF_CONSTRUCTOR,	/* a global function: name(sig) returns the object */
	DLB_LREF_FIELD_R,	/* inst.name, read-only; sig: its type */
	DLB_LREF_FIELD_RW,	/* inst.name, readable and writable; sig: its type */
	DLB_LREF_METHOD,	/* inst:name(sig), sig being "(args)" */
	DLB_LREF_OPERATOR,	/* a metamethod ("__eq", "__tostring"); sig: its use */
	DLB_LREF_FUNCTION,	/* a global function that goes with the object: name(sig) */
};

struct dlb_lref {
	const char *object;	/* section title: "DNSName" */
	const char *name;
	enum dlb_lref_kind kind;
	const char *sig;
	const char *doc;	/* one line (Markdown) */
};

/** Every object and member, grouped by object, an OBJECT line first. */
extern const struct dlb_lref dlb_lua_reference[];
extern const size_t dlb_lua_nreference;

/** Write docs/lua-reference.md to @f. */
void dlb_lua_write_reference(FILE *f);

#endif
