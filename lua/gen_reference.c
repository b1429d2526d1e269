/*
 * gen_reference.c - print a generated reference:
 *
 *   build/tests/gen_rules_reference [rules] > docs/rules-reference.md
 *     the selector and action catalog of lua/rules_lua.c
 *   build/tests/gen_rules_reference lua > docs/lua-reference.md
 *     the Lua objects table of lua/lua_reference.c
 *
 * The docs_rules_reference and docs_lua_reference tests compare its output
 * with the committed files.
 */
#include <stdio.h>
#include <string.h>

#include "lua/lua_reference.h"
#include "lua/rules_lua.h"

int
main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "rules";

	if (argc > 2 || (strcmp(what, "rules") != 0 && strcmp(what, "lua") != 0)) {
		fprintf(stderr, "usage: %s [rules|lua]\n", argv[0]);
		return 2;
	}
	if (strcmp(what, "lua") == 0)
		dlb_lua_write_reference(stdout);
	else
		dlb_lua_rules_write_reference(stdout);
	return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}
