/*
 * gen_reference.c - print docs/rules-reference.md, generated from the
 * selector and action catalog of lua/rules_lua.c. The docs_rules_reference
 * test compares its output with the committed file.
 *
 *   build/gen_rules_reference > docs/rules-reference.md
 */
#include <stdio.h>

#include "lua/rules_lua.h"

int
main(void)
{
	dlb_lua_rules_write_reference(stdout);
	return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}
