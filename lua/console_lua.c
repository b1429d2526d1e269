/*
 * console_lua.c - the console's Lua functions, the evaluation of console
 * commands, and the config reading of `dnslb -c` (console_lua.h).
 *
 * Phases (lua/conf.h): in CONFIG and CHECK the functions fill the process's
 * console settings (dnslb/control/console.h), which the console service applies
 * when it starts; in RUNNING (the console itself) they apply at once:
 * controlSocket() listens on one more address, setKey() is the key of the
 * next connections (a connection keeps the key it was opened with), the ACL
 * and limits apply to the next connections. In the throwaway phases (WORKER,
 * RELOAD) they check their arguments and change nothing, so a reload does
 * not touch the console. Client mode evaluates the config in a throwaway
 * WORKER state too (silent, nothing started), with `client.active` set:
 * then only controlSocket() and setKey() record anything, into the client's
 * options.
 *
 * Evaluation (dlb_lua_console_eval): the global print is replaced by one
 * that captures into the reply while the command runs, and given back
 * afterwards, also after an error (unless the command assigned print
 * itself). A hook runs meanwhile: every called C function is classified to
 * decide, like dnsdist's setLuaSideEffect()/setLuaNoSideEffect(), whether
 * the command goes into delta(), and the instruction count is bounded, so
 * `while true do end` cannot freeze the main loop.
 *
 * Thread: main only.
 */
#include "lua/console_lua.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "dnslb/core/buf.h"
#include "dnslb/core/config.h"
#include "dnslb/control/console.h"
#include "dnslb/control/console_client.h"
#include "dnslb/core/daemon.h"
#include "dnslb/core/netmask.h"
#include "lua/args.h"
#include "lua/conf.h"

#define DELTA_MAX		10000		/* entries kept; the oldest go first */
#define CMD_INSN_BUDGET		100000000ULL	/* Lua instructions per command */
#define HOOK_EVERY		10000
#define TEST_CRYPTO_MSG		"testStringForCryptoTests"

/* ---- client mode -------------------------------------------------------------------- */

static struct {
	bool active;			/* reading the config for `dnslb -c` */
	bool key_from_cli;		/* -k given: setKey() in the config is ignored */
	struct dlb_console_client_opts *opts;
} client;

/* the daemon's -k key: setKey() in the config file leaves it alone */
static bool daemon_cli_key;

int
dlb_lua_console_cli_key(const char *b64, char *err, size_t errlen)
{
	struct dlb_console_settings *s = dlb_console_settings();

	if (dlb_console_key_decode(b64, s->key, err, errlen) != 0)
		return -1;
	s->has_key = true;
	daemon_cli_key = true;
	return 0;
}

/* ---- delta() ------------------------------------------------------------------------ */

struct delta_entry {
	time_t when;
	char *line;
	size_t len;
};

static struct delta_entry *deltas;
static size_t ndeltas;

static void
delta_clear(void)
{
	for (size_t i = 0; i < ndeltas; i++)
		free(deltas[i].line);
	free(deltas);
	deltas = NULL;
	ndeltas = 0;
}

static void
delta_add(const char *line, size_t len)
{
	static bool atexit_done;
	char *dup;

	if (len == 0)
		return;
	if (deltas == NULL) {
		deltas = calloc(DELTA_MAX, sizeof(*deltas));
		if (deltas == NULL)
			return;
		if (!atexit_done) {
			atexit(delta_clear);
			atexit_done = true;
		}
	}
	dup = malloc(len + 1);
	if (dup == NULL)
		return;
	memcpy(dup, line, len);
	dup[len] = '\0';
	if (ndeltas == DELTA_MAX) {
		free(deltas[0].line);
		memmove(deltas, deltas + 1, (DELTA_MAX - 1) * sizeof(*deltas));
		ndeltas--;
	}
	deltas[ndeltas].when = time(NULL);
	deltas[ndeltas].line = dup;
	deltas[ndeltas].len = len;
	ndeltas++;
}

void
dlb_lua_console_reset(void)
{
	struct dlb_console_settings *s = dlb_console_settings();

	delta_clear();
	daemon_cli_key = false;
	s->naddrs = 0;
	s->has_key = false;
	memset(s->key, 0, sizeof(s->key));
	s->max_conns = DLB_CONSOLE_MAX_CONNS_DEFAULT;
	s->log_conns = true;
	s->max_msg = DLB_CONSOLE_MAX_MSG_DEFAULT;
	dlb_nmg_clear(&s->acl);
	{
		struct dlb_netmask nm;

		if (dlb_netmask_parse("127.0.0.0/8", &nm) == 0)
			dlb_nmg_add(&s->acl, &nm);
		if (dlb_netmask_parse("::1/128", &nm) == 0)
			dlb_nmg_add(&s->acl, &nm);
	}
}

/* ---- Lua functions ------------------------------------------------------------------ */

static enum dlb_lua_phase
phase_of(lua_State *L)
{
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);

	return lc != NULL ? dlb_lua_conf_phase(lc) : DLB_LUA_PHASE_WORKER;
}

/* May this call change the process's console settings? */
static bool
may_apply(lua_State *L)
{
	return !client.active && !dlb_lua_phase_throwaway(phase_of(L)) &&
	       phase_of(L) != DLB_LUA_PHASE_RULES;
}

/* controlSocket(addr): listen for console clients (default port 5199). */
static int
l_control_socket(lua_State *L)
{
	const char *a = dlb_lua_arg_string(L, 1, "controlSocket");
	struct dlb_console_settings *s;
	struct sockaddr_storage ss;
	socklen_t sl;
	char err[256];

	if (dlb_sockaddr_parse(a, DLB_CONSOLE_PORT, &ss, &sl) != 0)
		return luaL_error(L, "controlSocket: invalid address '%s'", a);
	if (client.active) {
		client.opts->addr = ss;
		client.opts->addrlen = sl;
		return 0;
	}
	if (!may_apply(L))
		return 0;
	s = dlb_console_settings();
	for (int i = 0; i < s->naddrs; i++)
		if (dlb_sockaddr_equal((struct sockaddr *)&s->addrs[i], (struct sockaddr *)&ss))
			return 0;
	if (s->naddrs == DLB_CONSOLE_MAX_ADDRS)
		return luaL_error(L, "controlSocket: too many control sockets (at most %d)",
				  DLB_CONSOLE_MAX_ADDRS);
	if (phase_of(L) == DLB_LUA_PHASE_RUNNING && dlb_console_started() &&
	    dlb_console_listen((struct sockaddr *)&ss, sl, err, sizeof(err)) != 0)
		return luaL_error(L, "%s", err);
	s->addrs[s->naddrs] = ss;
	s->addrlens[s->naddrs] = sl;
	s->naddrs++;
	return 0;
}

/* setKey(b64): the console key (32 bytes, base64). */
static int
l_set_key(lua_State *L)
{
	const char *b64 = dlb_lua_arg_string(L, 1, "setKey");
	uint8_t key[DLB_CONSOLE_KEY_BYTES];
	char err[300];

	if ((client.active && client.key_from_cli) ||
	    (daemon_cli_key && phase_of(L) != DLB_LUA_PHASE_RUNNING))
		return 0;	/* dnsdist: the -k key prevails over the config's */
	if (dlb_console_key_decode(b64, key, err, sizeof(err)) != 0)
		return luaL_error(L, "%s", err);
	if (client.active) {
		memcpy(client.opts->key, key, sizeof(key));
		client.opts->has_key = true;
	} else if (may_apply(L)) {
		struct dlb_console_settings *s = dlb_console_settings();

		memcpy(s->key, key, sizeof(key));
		s->has_key = true;
	}
	memset(key, 0, sizeof(key));
	return 0;
}

/* makeKey(): print setKey("...") with a fresh key. */
static int
l_make_key(lua_State *L)
{
	uint8_t key[DLB_CONSOLE_KEY_BYTES];
	char b64[DLB_CONSOLE_KEY_B64_LEN], line[DLB_CONSOLE_KEY_B64_LEN + 16];

	if (dlb_lua_silent(L) || client.active)
		return 0;
	dlb_console_key_new(key, b64);
	snprintf(line, sizeof(line), "setKey(\"%s\")", b64);
	memset(key, 0, sizeof(key));
	dlb_lua_print(L, line);
	return 0;
}

/* Check the netmask string or table of strings at 1; @apply: replace the ACL with it. */
static void
console_acl_arg(lua_State *L, const char *fn, bool apply)
{
	struct dlb_console_settings *s = apply ? dlb_console_settings() : NULL;
	struct dlb_netmask nm;
	lua_Integer n;

	if (lua_type(L, 1) == LUA_TSTRING) {
		dlb_lua_check_netmask(L, 1, fn, &nm);
		if (apply) {
			dlb_nmg_clear(&s->acl);
			if (dlb_nmg_add(&s->acl, &nm) != 0)
				luaL_error(L, "%s: out of memory", fn);
		}
		return;
	}
	if (lua_type(L, 1) != LUA_TTABLE)
		luaL_error(L, "%s: expected a netmask or a table of netmasks, got %s", fn,
			   luaL_typename(L, 1));
	n = (lua_Integer)lua_rawlen(L, 1);
	for (lua_Integer i = 1; i <= n; i++) {
		lua_rawgeti(L, 1, i);
		dlb_lua_check_netmask(L, -1, fn, &nm);
		lua_pop(L, 1);
	}
	if (!apply)
		return;
	dlb_nmg_clear(&s->acl);
	for (lua_Integer i = 1; i <= n; i++) {
		lua_rawgeti(L, 1, i);
		dlb_netmask_parse(lua_tostring(L, -1), &nm);
		lua_pop(L, 1);
		if (dlb_nmg_add(&s->acl, &nm) != 0)
			luaL_error(L, "%s: out of memory", fn);
	}
}

/* setConsoleACL(nm or {nm, ...}) */
static int
l_set_console_acl(lua_State *L)
{
	console_acl_arg(L, "setConsoleACL", may_apply(L));
	return 0;
}

/* addConsoleACL(nm) */
static int
l_add_console_acl(lua_State *L)
{
	struct dlb_netmask nm;

	dlb_lua_check_netmask(L, 1, "addConsoleACL", &nm);
	if (may_apply(L) && dlb_nmg_add(&dlb_console_settings()->acl, &nm) != 0)
		return luaL_error(L, "addConsoleACL: out of memory");
	return 0;
}

/* showConsoleACL(): one netmask a line. */
static int
l_show_console_acl(lua_State *L)
{
	const struct dlb_nmg *acl;

	if (dlb_lua_silent(L) || client.active)
		return 0;
	acl = &dlb_console_settings()->acl;
	for (size_t i = 0; i < acl->n; i++) {
		char buf[64];

		dlb_netmask_format(&acl->v[i], buf, sizeof(buf));
		dlb_lua_print(L, buf);
	}
	return 0;
}

/* setConsoleMaximumConcurrentConnections(n): 0 is no limit (dnsdist). */
static int
l_set_console_max_conns(lua_State *L)
{
	lua_Integer n = dlb_lua_arg_int(L, 1, "setConsoleMaximumConcurrentConnections", 0,
					UINT32_MAX);

	if (may_apply(L))
		dlb_console_settings()->max_conns = (uint32_t)n;
	return 0;
}

/* setConsoleConnectionsLogging(bool) */
static int
l_set_console_conns_logging(lua_State *L)
{
	bool on = dlb_lua_arg_bool(L, 1, "setConsoleConnectionsLogging");

	if (may_apply(L))
		dlb_console_settings()->log_conns = on;
	return 0;
}

/* setConsoleOutputMaxMsgSize(bytes) */
static int
l_set_console_output_max_msg_size(lua_State *L)
{
	lua_Integer n = dlb_lua_arg_int(L, 1, "setConsoleOutputMaxMsgSize", 0, UINT32_MAX);

	if (client.active)
		client.opts->max_msg = (uint32_t)n;
	else if (may_apply(L))
		dlb_console_settings()->max_msg = (uint32_t)n;
	return 0;
}

/* delta(): "-- <date>" then the command, for each command that changed something. */
static int
l_delta(lua_State *L)
{
	if (dlb_lua_silent(L) || client.active)
		return 0;
	for (size_t i = 0; i < ndeltas; i++) {
		struct tm tm;
		char date[128];

		localtime_r(&deltas[i].when, &tm);
		if (strftime(date, sizeof(date), "-- %a %b %d %Y %H:%M:%S %Z", &tm) == 0)
			date[0] = '\0';
		dlb_lua_print(L, date);
		lua_pushlstring(L, deltas[i].line, deltas[i].len);
		dlb_lua_print(L, lua_tostring(L, -1));
		lua_pop(L, 1);
	}
	return 0;
}

/* clearConsoleHistory(): forget what delta() shows. */
static int
l_clear_console_history(lua_State *L)
{
	if (may_apply(L))
		delta_clear();
	return 0;
}

static int
l_in_client_startup(lua_State *L)
{
	lua_pushboolean(L, client.active);
	return 1;
}

static int
l_in_config_check(lua_State *L)
{
	lua_pushboolean(L, phase_of(L) == DLB_LUA_PHASE_CHECK);
	return 1;
}

/* testCrypto([msg]): two round trips through the console's crypto with the key. */
static int
l_test_crypto(lua_State *L)
{
	const struct dlb_console_settings *s;
	uint8_t n1[DLB_CONSOLE_NONCE_BYTES], n2[DLB_CONSOLE_NONCE_BYTES];
	const char *msg = TEST_CRYPTO_MSG;
	size_t len = sizeof(TEST_CRYPTO_MSG) - 1;
	uint8_t *box, *out;
	bool ok = true;

	if (!lua_isnoneornil(L, 1)) {
		dlb_lua_arg_string(L, 1, "testCrypto");
		msg = lua_tolstring(L, 1, &len);
	}
	if (dlb_lua_silent(L) || client.active)
		return 0;
	s = dlb_console_settings();
	if (!s->has_key) {
		dlb_lua_print(L, "Crypto failed: Invalid encryption key of size 0, use setKey() to "
			      "set a valid key");
		return 0;
	}
	box = lua_newuserdatauv(L, len + DLB_CONSOLE_MAC_BYTES, 0);
	out = lua_newuserdatauv(L, len + 1, 0);
	dlb_console_nonce_init(n1);
	memcpy(n2, n1, sizeof(n1));
	for (int round = 0; round < 2 && ok; round++) {
		dlb_console_seal(box, msg, len, n1, s->key);
		ok = dlb_console_open(out, box, len + DLB_CONSOLE_MAC_BYTES, n2, s->key) == 0 &&
		     memcmp(out, msg, len) == 0;
		/* dnsdist increments both nonces once more between the rounds */
		dlb_console_nonce_increment(n1);
		dlb_console_nonce_increment(n2);
	}
	lua_pop(L, 2);
	dlb_lua_print(L, ok ? "Everything is ok!" :
		      "Crypto failed.. (the decoded value does not match the cleartext one)");
	return 0;
}

static const luaL_Reg console_funcs[] = {
	{ "controlSocket", l_control_socket },
	{ "setKey", l_set_key },
	{ "makeKey", l_make_key },
	{ "setConsoleACL", l_set_console_acl },
	{ "addConsoleACL", l_add_console_acl },
	{ "showConsoleACL", l_show_console_acl },
	{ "setConsoleMaximumConcurrentConnections", l_set_console_max_conns },
	{ "setConsoleConnectionsLogging", l_set_console_conns_logging },
	{ "setConsoleOutputMaxMsgSize", l_set_console_output_max_msg_size },
	{ "delta", l_delta },
	{ "clearConsoleHistory", l_clear_console_history },
	{ "inClientStartup", l_in_client_startup },
	{ "inConfigCheck", l_in_config_check },
	{ "testCrypto", l_test_crypto },
	{ NULL, NULL },
};

/* ---- evaluation --------------------------------------------------------------------- */

/*
 * The reply being built is a dnslb/core/buf.h buffer bounded to the output
 * limit: DLB_ESPACE is "the reply does not fit", DLB_ENOMEM "out of memory".
 */

/* The command running: its reply and what the hook found. */
static struct {
	struct dlb_buf *reply;		/* NULL: no command runs (print() writes to stdout) */
	bool side_effect;		/* a function that changes the configuration ran */
	bool no_side_effect;		/* a function dnsdist marks "no side effect" ran */
	uint64_t insns;
} cmd;

/* print() during a console command: into the reply (luaB_print's format). */
static int
l_console_print(lua_State *L)
{
	int n = lua_gettop(L);

	for (int i = 1; i <= n; i++) {
		size_t len;
		const char *s = luaL_tolstring(L, i, &len);

		if (cmd.reply == NULL) {
			if (i > 1)
				fputc('\t', stdout);
			fwrite(s, 1, len, stdout);
		} else if ((i > 1 && dlb_buf_append(cmd.reply, "\t", 1) != 0) ||
			   dlb_buf_append(cmd.reply, s, len) != 0) {
			goto out_full;
		}
		lua_pop(L, 1);
	}
	if (cmd.reply == NULL) {
		fputc('\n', stdout);
		fflush(stdout);
	} else if (dlb_buf_append(cmd.reply, "\n", 1) != 0) {
		goto out_full;
	}
	return 0;

out_full:
	if (cmd.reply->err == DLB_ENOMEM)
		return luaL_error(L, "not enough memory for the console output");
	{
		char msg[128];

		snprintf(msg, sizeof(msg), "the console output exceeds setConsoleOutputMaxMsgSize "
			 "(%u bytes)", dlb_console_settings()->max_msg);
		return luaL_error(L, "%s", msg);
	}
}

/*
 * The C functions of Lua's own libraries (which leave delta() alone), from a
 * fresh state: a sorted array, built once.
 */
static lua_CFunction *stdfuncs;
static size_t nstdfuncs;

static int
cmp_fn(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t) * (const lua_CFunction *)a;
	uintptr_t y = (uintptr_t) * (const lua_CFunction *)b;

	return x < y ? -1 : x > y;
}

static void
stdfuncs_free(void)
{
	free(stdfuncs);
	stdfuncs = NULL;
	nstdfuncs = 0;
}

static void
stdfuncs_collect(lua_State *S, int t, size_t *cap, int depth)
{
	lua_pushnil(S);
	while (lua_next(S, t) != 0) {
		if (lua_tocfunction(S, -1) != NULL) {
			if (nstdfuncs == *cap) {
				size_t ncap = *cap == 0 ? 256 : *cap * 2;
				lua_CFunction *nv = realloc(stdfuncs, ncap * sizeof(*nv));

				if (nv == NULL) {
					lua_pop(S, 2);
					return;
				}
				stdfuncs = nv;
				*cap = ncap;
			}
			stdfuncs[nstdfuncs++] = lua_tocfunction(S, -1);
		} else if (depth == 0 && lua_type(S, -1) == LUA_TTABLE) {
			stdfuncs_collect(S, lua_gettop(S), cap, 1);
		}
		lua_pop(S, 1);
	}
}

static void
stdfuncs_init(void)
{
	static bool done;
	lua_State *S;
	size_t cap = 0;

	if (done)
		return;
	done = true;
	S = luaL_newstate();
	if (S == NULL)
		return;
	luaL_openlibs(S);
	lua_pushglobaltable(S);
	stdfuncs_collect(S, lua_gettop(S), &cap, 0);
	lua_close(S);
	if (nstdfuncs > 0)
		qsort(stdfuncs, nstdfuncs, sizeof(*stdfuncs), cmp_fn);
	atexit(stdfuncs_free);
}

static bool
is_stdfunc(lua_CFunction f)
{
	return f == l_console_print ||
	       (nstdfuncs > 0 &&
		bsearch(&f, stdfuncs, nstdfuncs, sizeof(*stdfuncs), cmp_fn) != NULL);
}

/*
 * The functions dnsdist marks setLuaNoSideEffect(): what only shows or
 * reads. (getPool() creates the pool it names, so it is not one.)
 */
static bool
no_side_effect_name(const char *n)
{
	static const char *const prefixes[] = {
		"show", "get", "dump", "top", "print", "grepq", "exceed", "is", "to", "bench",
	};
	static const char *const names[] = {
		"delta", "testCrypto", "makeKey", "inClientStartup", "inConfigCheck", "help",
		"clearConsoleHistory",
	};

	if (strcmp(n, "getPool") == 0)
		return false;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(n, names[i]) == 0)
			return true;
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
		if (strncmp(n, prefixes[i], strlen(prefixes[i])) == 0)
			return true;
	return false;
}

static void
console_hook(lua_State *L, lua_Debug *ar)
{
	lua_CFunction f;

	if (cmd.reply == NULL)
		return;		/* a coroutine kept from an earlier command */
	if (ar->event == LUA_HOOKCOUNT) {
		cmd.insns += HOOK_EVERY;
		if (cmd.insns > CMD_INSN_BUDGET)
			luaL_error(L, "the console command was stopped after %d million Lua "
				   "instructions", (int)(CMD_INSN_BUDGET / 1000000));
		return;
	}
	if (lua_getinfo(L, "nf", ar) == 0)
		return;
	f = lua_tocfunction(L, -1);
	lua_pop(L, 1);
	if (f == NULL || is_stdfunc(f) || ar->name == NULL)
		return;		/* Lua code, Lua's libraries, or unnamed: no say */
	if (ar->namewhat != NULL && strcmp(ar->namewhat, "metamethod") == 0) {
		if (strcmp(ar->name, "newindex") == 0)
			cmd.side_effect = true;	/* server.order = 2 */
		return;
	}
	if (ar->namewhat != NULL && strcmp(ar->namewhat, "for iterator") == 0)
		return;
	if (no_side_effect_name(ar->name))
		cmd.no_side_effect = true;
	else
		cmd.side_effect = true;
}

/* The message handler: the message and a traceback, as dnsdist shows them. */
static int
msgh(lua_State *L)
{
	const char *msg = lua_tostring(L, 1);
	const char *tb, *tail;
	size_t n;

	if (msg == NULL) {
		if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
			msg = lua_tostring(L, -1);
		else
			msg = lua_pushfstring(L, "(error object is a %s value)",
					      luaL_typename(L, 1));
	}
	luaL_traceback(L, L, msg, 1);
	/* the last frame is the evaluator's own C function: not the user's business */
	tb = lua_tolstring(L, -1, &n);
	tail = "\n\t[C]: in ?";
	if (n >= strlen(tail) && strcmp(tb + n - strlen(tail), tail) == 0)
		lua_pushlstring(L, tb, n - strlen(tail));
	return 1;
}

/* A number as dnsdist (LuaJIT, "%.14g") shows it. */
static void
format_number(lua_State *L, int idx, char *out, size_t outsz)
{
	if (lua_isinteger(L, idx)) {
		snprintf(out, outsz, "%lld", (long long)lua_tointeger(L, idx));
	} else {
		double d = lua_tonumber(L, idx);

		if (isnan(d))
			snprintf(out, outsz, "nan");
		else if (isinf(d))
			snprintf(out, outsz, d > 0 ? "inf" : "-inf");
		else
			snprintf(out, outsz, "%.14g", d);
	}
}

/* A JSON string, escaped as json11 escapes it. */
static int
json_string(struct dlb_buf *r, const char *s, size_t n)
{
	int rc = dlb_buf_append(r, "\"", 1);

	for (size_t i = 0; i < n && rc == 0; i++) {
		unsigned char ch = (unsigned char)s[i];
		char esc[8];

		switch (ch) {
		case '\\': rc = dlb_buf_puts(r, "\\\\"); break;
		case '"': rc = dlb_buf_puts(r, "\\\""); break;
		case '\b': rc = dlb_buf_puts(r, "\\b"); break;
		case '\f': rc = dlb_buf_puts(r, "\\f"); break;
		case '\n': rc = dlb_buf_puts(r, "\\n"); break;
		case '\r': rc = dlb_buf_puts(r, "\\r"); break;
		case '\t': rc = dlb_buf_puts(r, "\\t"); break;
		default:
			if (ch <= 0x1f) {
				snprintf(esc, sizeof(esc), "\\u%04x", ch);
				rc = dlb_buf_puts(r, esc);
			} else if (ch == 0xe2 && i + 2 < n && (unsigned char)s[i + 1] == 0x80 &&
				   ((unsigned char)s[i + 2] == 0xa8 ||
				    (unsigned char)s[i + 2] == 0xa9)) {
				rc = dlb_buf_puts(r, (unsigned char)s[i + 2] == 0xa8 ? "\\u2028" :
					       "\\u2029");
				i += 2;
			} else {
				rc = dlb_buf_append(r, (const char *)&s[i], 1);
			}
		}
	}
	return rc != 0 ? rc : dlb_buf_append(r, "\"", 1);
}

struct json_kv {
	char *key;
	size_t klen;
	size_t order;			/* iteration order: the last duplicate wins */
	double v;
};

static int
cmp_kv(const void *a, const void *b)
{
	const struct json_kv *x = a, *y = b;
	size_t n = x->klen < y->klen ? x->klen : y->klen;
	int c = memcmp(x->key, y->key, n);

	if (c != 0)
		return c;
	if (x->klen != y->klen)
		return x->klen < y->klen ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

/*
 * The table at @idx as dnsdist prints a map of numbers: {"k": v, ...},
 * sorted by key. @return 0, 1 when it is not such a table (string or number
 * keys, numeric values), -1 when the reply is full.
 */
static int
format_table(lua_State *L, int idx, struct dlb_buf *r)
{
	struct json_kv *kv = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;

	lua_pushnil(L);
	while (lua_next(L, idx) != 0) {
		int kt = lua_type(L, -2), vt = lua_type(L, -1);
		char num[64];
		const char *k;
		size_t klen;

		if ((kt != LUA_TSTRING && kt != LUA_TNUMBER) ||
		    (vt != LUA_TNUMBER && !(vt == LUA_TSTRING && lua_isnumber(L, -1)))) {
			lua_pop(L, 2);
			rc = 1;
			goto out;
		}
		if (kt == LUA_TNUMBER) {
			format_number(L, -2, num, sizeof(num));	/* never converts the key */
			k = num;
			klen = strlen(num);
		} else {
			k = lua_tolstring(L, -2, &klen);
		}
		if (n == cap) {
			size_t ncap = cap == 0 ? 16 : cap * 2;
			struct json_kv *nv = realloc(kv, ncap * sizeof(*nv));

			if (nv == NULL) {
				lua_pop(L, 2);
				dlb_buf_set_error(r, DLB_ENOMEM);
				rc = -1;
				goto out;
			}
			kv = nv;
			cap = ncap;
		}
		kv[n].key = malloc(klen + 1);
		if (kv[n].key == NULL) {
			lua_pop(L, 2);
			dlb_buf_set_error(r, DLB_ENOMEM);
			rc = -1;
			goto out;
		}
		memcpy(kv[n].key, k, klen);
		kv[n].klen = klen;
		kv[n].order = n;
		kv[n].v = lua_tonumber(L, -1);
		n++;
		lua_pop(L, 1);
	}
	if (n > 0)
		qsort(kv, n, sizeof(*kv), cmp_kv);
	rc = dlb_buf_append(r, "{", 1);
	for (size_t i = 0, out = 0; i < n && rc == 0; i++) {
		char num[64];

		if (i + 1 < n && kv[i + 1].klen == kv[i].klen &&
		    memcmp(kv[i + 1].key, kv[i].key, kv[i].klen) == 0)
			continue;	/* a later duplicate replaces it */
		if (isfinite(kv[i].v))
			snprintf(num, sizeof(num), "%.17g", kv[i].v);
		else
			snprintf(num, sizeof(num), "null");
		if ((out++ > 0 && dlb_buf_append(r, ", ", 2) != 0) ||
		    json_string(r, kv[i].key, kv[i].klen) != 0 || dlb_buf_append(r, ": ", 2) != 0 ||
		    dlb_buf_puts(r, num) != 0)
			rc = -1;
	}
	if (rc == 0)
		rc = dlb_buf_append(r, "}\n", 2);
out:
	for (size_t i = 0; i < n; i++)
		free(kv[i].key);
	free(kv);
	return rc;
}

/*
 * The first return value at @idx, as dnsdist 1.7 formats it. @return true
 * when it could be printed (or there was nothing to print).
 */
static bool
format_result(lua_State *L, int idx, struct dlb_buf *r)
{
	struct dlb_backend *be;
	char num[64];
	int t = lua_type(L, idx);

	switch (t) {
	case LUA_TNONE:
	case LUA_TNIL:
		return true;
	case LUA_TSTRING: {
		size_t n;
		const char *s = lua_tolstring(L, idx, &n);

		if (dlb_buf_append(r, s, n) == 0)
			dlb_buf_append(r, "\n", 1);
		return true;
	}
	case LUA_TNUMBER:
		format_number(L, idx, num, sizeof(num));
		if (dlb_buf_puts(r, num) == 0)
			dlb_buf_append(r, "\n", 1);
		return true;
	case LUA_TUSERDATA:
		be = dlb_lua_to_server(L, idx);
		if (be != NULL) {
			if (dlb_buf_puts(r, be->name) == 0)
				dlb_buf_append(r, "\n", 1);
			return true;
		}
		/* a ClientState (getBind) prints as its address, as in dnsdist */
		if (luaL_testudata(L, idx, "ClientState") != NULL &&
		    luaL_callmeta(L, idx, "__tostring") && lua_type(L, -1) == LUA_TSTRING) {
			if (dlb_buf_puts(r, lua_tostring(L, -1)) == 0)
				dlb_buf_append(r, "\n", 1);
			lua_pop(L, 1);
			return true;
		}
		break;
	case LUA_TTABLE:
		if (format_table(L, idx, r) <= 0)
			return true;
		break;
	case LUA_TBOOLEAN:
		/*
		 * dnslb: dnsdist 1.7 cannot print a boolean; dnslb prints it, and
		 * after `false` the error string that follows it (reload()).
		 */
		if (lua_toboolean(L, idx)) {
			dlb_buf_puts(r, "true\n");
		} else {
			dlb_buf_puts(r, "false\n");
			if (lua_type(L, idx + 1) == LUA_TSTRING && dlb_buf_puts(r, lua_tostring(L, idx + 1)) == 0)
				dlb_buf_append(r, "\n", 1);
		}
		return true;
	default:
		break;
	}
	dlb_buf_puts(r, "Command returned an object we can't print: Trying to cast a lua variable "
		  "from \"");
	dlb_buf_puts(r, lua_typename(L, t));
	dlb_buf_puts(r, "\" to \"a string, a number, a Server or a table of numbers\"\n");
	return false;
}

struct eval_ctx {
	const char *line;		/* NUL-terminated */
	size_t len;
	struct dlb_buf *reply;
	bool record;			/* goes into delta() */
};

/* Runs under lua_pcall: Lua's own errors (memory) cannot escape. */
static int
eval_protected(lua_State *L)
{
	struct eval_ctx *ctx = lua_touserdata(L, 1);
	struct dlb_buf *r = ctx->reply;
	luaL_Buffer b;
	const char *code;
	size_t clen;
	int st, base, nres;
	bool printable;

	luaL_buffinit(L, &b);
	luaL_addstring(&b, "return ");
	luaL_addlstring(&b, ctx->line, ctx->len);
	luaL_pushresult(&b);				/* 2: "return <line>" */
	code = lua_tolstring(L, 2, &clen);
	lua_pushcfunction(L, msgh);			/* 3 */
	st = luaL_loadbuffer(L, code, clen, code);
	if (st == LUA_ERRSYNTAX) {
		lua_pop(L, 1);
		st = luaL_loadbuffer(L, ctx->line, ctx->len, ctx->line);
	}
	if (st != LUA_OK) {
		dlb_buf_puts(r, "Error: ");
		dlb_buf_puts(r, lua_tostring(L, -1) != NULL ? lua_tostring(L, -1) : "?");
		if (st == LUA_ERRSYNTAX)
			dlb_buf_puts(r, ": ");	/* sic: dnsdist */
		return 0;
	}
	/* 4: the chunk */
	lua_getglobal(L, "print");			/* 5: the print to give back */
	lua_pushvalue(L, 4);				/* 6: the function called */
	lua_pushcfunction(L, l_console_print);
	lua_setglobal(L, "print");
	base = 5;

	stdfuncs_init();
	cmd.reply = r;
	cmd.side_effect = cmd.no_side_effect = false;
	cmd.insns = 0;
	lua_sethook(L, console_hook, LUA_MASKCALL | LUA_MASKCOUNT, HOOK_EVERY);
	st = lua_pcall(L, 0, LUA_MULTRET, 3);
	lua_sethook(L, NULL, 0, 0);
	cmd.reply = NULL;

	nres = lua_gettop(L) - base;
	lua_getglobal(L, "print");
	if (lua_tocfunction(L, -1) == l_console_print) {	/* unless the command set it */
		lua_pushvalue(L, 5);
		lua_setglobal(L, "print");
	}
	lua_pop(L, 1);

	if (st != LUA_OK) {
		const char *msg = lua_tostring(L, -1);

		/* an output overflow ended the command: say only that */
		if (r->err == DLB_ESPACE)
			dlb_buf_reset(r);
		dlb_buf_puts(r, "Error: ");
		dlb_buf_puts(r, msg != NULL ? msg : "not enough memory");
		return 0;
	}
	printable = format_result(L, nres > 0 ? base + 1 : lua_gettop(L) + 1, r);
	ctx->record = printable && !(cmd.no_side_effect && !cmd.side_effect);
	return 0;
}

char *
dlb_lua_console_eval(const char *line, size_t len, size_t maxout, size_t *outlen)
{
	/* the bound counts the NUL */
	struct dlb_buf r = DLB_BUF_INIT(maxout < SIZE_MAX ? maxout + 1 : 0);
	struct eval_ctx ctx = { .line = line, .len = len, .reply = &r };
	struct dlb_lua_conf *lc = dlb_daemon.lc;
	lua_State *L;
	int top;

	if (lc == NULL) {
		dlb_buf_puts(&r, "Error: no configuration state\n");
	} else {
		L = dlb_lua_conf_state(lc);
		top = lua_gettop(L);
		if (!lua_checkstack(L, 16)) {
			dlb_buf_puts(&r, "Error: not enough memory");
		} else {
			lua_pushcfunction(L, eval_protected);
			lua_pushlightuserdata(L, &ctx);
			if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
				const char *msg = lua_tostring(L, -1);

				dlb_buf_reset(&r);
				ctx.record = false;
				dlb_buf_puts(&r, "Error: ");
				dlb_buf_puts(&r, msg != NULL ? msg : "not enough memory");
			}
		}
		lua_settop(L, top);
	}
	if (r.err == DLB_ESPACE) {
		char msg[160];

		/* what returned did not fit: the command ran, the reply says why it is missing */
		snprintf(msg, sizeof(msg), "Error: the reply exceeds setConsoleOutputMaxMsgSize "
			 "(%zu bytes)\n", maxout + DLB_CONSOLE_MAC_BYTES);
		dlb_buf_reset(&r);
		if (dlb_buf_puts(&r, msg) != 0)
			dlb_buf_reset(&r);
	}
	if (r.err == DLB_ENOMEM) {
		dlb_buf_deinit(&r);
		return NULL;
	}
	if (ctx.record)
		delta_add(line, len);
	if (r.p == NULL && dlb_buf_append(&r, "", 0) != DLB_OK)
		return NULL;	/* nothing said: still a string */
	*outlen = r.len;
	return r.p;
}

/* ---- registration and client mode ----------------------------------------------------- */

void
dlb_lua_console_register(lua_State *L)
{
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);

	lua_pushglobaltable(L);
	luaL_setfuncs(L, console_funcs, 0);
	lua_pop(L, 1);
	if (lc != NULL && dlb_lua_conf_phase(lc) == DLB_LUA_PHASE_CONFIG && !client.active) {
		dlb_console_set_eval(dlb_lua_console_eval);
		dlb_daemon_add_service(&dlb_console_service);
	}
}

int
dlb_lua_console_client_main(const char *config, const char *addr, const char *command,
			    const char *key)
{
	struct dlb_console_client_opts o;
	struct dlb_config *cfg;
	struct dlb_lua_conf *lc;
	char err[1024];
	int rc;

	memset(&o, 0, sizeof(o));
	o.max_msg = DLB_CONSOLE_MAX_MSG_DEFAULT;
	o.command = command;
	dlb_sockaddr_parse("127.0.0.1", DLB_CONSOLE_PORT, &o.addr, &o.addrlen);
	if (key != NULL) {
		if (dlb_console_key_decode(key, o.key, err, sizeof(err)) != 0) {
			fprintf(stderr, "%s\n", err);
			return 1;
		}
		o.has_key = true;
		client.key_from_cli = true;
	}
	if (access(config, R_OK) != 0) {
		fprintf(stderr, "Unable to read configuration from '%s'\n", config);
	} else {
		cfg = dlb_config_new();
		lc = cfg != NULL ? dlb_lua_conf_new(cfg, DLB_LUA_PHASE_WORKER) : NULL;
		if (lc == NULL) {
			fprintf(stderr, "out of memory\n");
			if (cfg != NULL)
				dlb_config_free(cfg);
			return 1;
		}
		client.active = true;
		client.opts = &o;
		rc = dlb_lua_conf_load_file(lc, config, err, sizeof(err));
		client.active = false;
		client.opts = NULL;
		dlb_lua_conf_free(lc);
		dlb_config_free(cfg);
		if (rc != 0) {
			fprintf(stderr, "Error while parsing the configuration file '%s': %s\n",
				config, err);
			return 1;
		}
	}
	client.key_from_cli = false;
	if (addr != NULL &&
	    dlb_sockaddr_parse(addr, DLB_CONSOLE_PORT, &o.addr, &o.addrlen) != 0) {
		fprintf(stderr, "Invalid console address '%s'\n", addr);
		return 1;
	}
	rc = dlb_console_client_run(&o);
	memset(o.key, 0, sizeof(o.key));
	return rc;
}
