/*
 * console_lua.h - the console's Lua side: controlSocket(), setKey(),
 * makeKey(), the console ACL and limits, delta(), inClientStartup(),
 * inConfigCheck(), testCrypto(); the evaluation of console commands in the
 * config state; and the config reading of client mode (`dnslb -c`).
 *
 * Thread: main only.
 */
#ifndef DNSLB_LUA_CONSOLE_LUA_H
#define DNSLB_LUA_CONSOLE_LUA_H

#include <stddef.h>

typedef struct lua_State lua_State;

/**
 * Register the console's Lua globals in @L (lua/conf.c calls it for every
 * state). In the config state of the CONFIG phase it also registers the
 * console service (daemon.h) and the evaluator.
 */
void dlb_lua_console_register(lua_State *L);

/**
 * Evaluate one console command in the current config state (dlb_daemon.lc),
 * as dnsdist does: `return <line>` first, the line as a statement when that
 * does not compile. The reply is what the command printed (print() and the
 * show*() functions), then its first return value formatted as dnsdist does
 * (a string or a number and a newline, a Server's name, a table of numbers
 * as JSON; anything else is an error line), or "Error: <message>" for a Lua
 * error. A command that succeeded and changed something is added to
 * delta(). The reply is at most @maxout bytes (a longer output ends the
 * command with an error). A dlb_console_eval_fn (dnslb/control/console.h).
 * @return the malloc'ed reply (*@outlen bytes), or NULL when out of memory.
 */
char *dlb_lua_console_eval(const char *line, size_t len, size_t maxout, size_t *outlen);

/**
 * Client mode (`dnslb -c`): evaluate @config silently (inClientStartup() is
 * true, nothing is started) for its controlSocket() and setKey(), let
 * @addr (-c ADDR, may be NULL) and @key (-k, may be NULL) override them,
 * then run the console client with @command (-e, NULL: interactive).
 * @return the process exit status.
 */
int dlb_lua_console_client_main(const char *config, const char *addr, const char *command,
				const char *key);

/**
 * `dnslb -k KEY` for the daemon: the console key, which setKey() in the
 * config file does not replace (a setKey() from the console does), as in
 * dnsdist. @return 0, or -1 with dnsdist's message in @err.
 */
int dlb_lua_console_cli_key(const char *b64, char *err, size_t errlen);

/** Forget delta() and reset the console settings (unit tests). */
void dlb_lua_console_reset(void);

#endif
