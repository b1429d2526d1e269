/*
 * test_console.c - the console protocol (dnslb/control/console.c), the client
 * session (dnslb/control/console_client.c) and command evaluation
 * (lua/console_lua.c):
 *
 * - nonce merge and increment (sodcrypto.cc's SodiumNonce), seal/open, the
 *   frame header and its limit, key decoding and dnsdist's messages;
 * - a round trip through a socketpair: the server on an ev loop in this
 *   thread, the client session in another, commands evaluated in a config
 *   state in the RUNNING phase (replies as dnsdist formats them, Lua
 *   errors, delta());
 * - a client with another key, and an oversized frame header, are closed
 *   without an answer;
 * - the phases: a worker state changes no console setting.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ev.h>
#include <lua.h>

#include "dnslb/core/config.h"
#include "dnslb/control/console.h"
#include "dnslb/control/console_client.h"
#include "dnslb/core/daemon.h"
#include "dnslb/core/rcu.h"
#include "lua/conf.h"
#include "lua/console_lua.h"
#include "rules/rules.h"

/* a fixed valid key and its base64 */
static const char key_b64[] = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

static void
test_nonce(void **state)
{
	uint8_t a[DLB_CONSOLE_NONCE_BYTES], b[DLB_CONSOLE_NONCE_BYTES], m[DLB_CONSOLE_NONCE_BYTES];

	(void)state;
	for (int i = 0; i < DLB_CONSOLE_NONCE_BYTES; i++) {
		a[i] = (uint8_t)i;
		b[i] = (uint8_t)(100 + i);
	}
	dlb_console_nonce_merge(m, a, b);
	assert_memory_equal(m, a, 12);
	assert_memory_equal(m + 12, b + 12, 12);
	dlb_console_nonce_merge(m, b, a);
	assert_memory_equal(m, b, 12);
	assert_memory_equal(m + 12, a + 12, 12);

	/* a big-endian counter in the first 4 bytes, the rest untouched */
	memset(m, 0, sizeof(m));
	m[3] = 0xff;
	m[4] = 0x77;
	dlb_console_nonce_increment(m);
	assert_int_equal(m[2], 1);
	assert_int_equal(m[3], 0);
	assert_int_equal(m[4], 0x77);
	memset(m, 0xff, 4);
	dlb_console_nonce_increment(m);
	assert_int_equal(m[0] | m[1] | m[2] | m[3], 0);	/* wraps */
	assert_int_equal(m[4], 0x77);
}

static void
test_seal_open(void **state)
{
	uint8_t key[DLB_CONSOLE_KEY_BYTES], other[DLB_CONSOLE_KEY_BYTES];
	uint8_t n1[DLB_CONSOLE_NONCE_BYTES], n2[DLB_CONSOLE_NONCE_BYTES], keep[DLB_CONSOLE_NONCE_BYTES];
	uint8_t box[5 + DLB_CONSOLE_MAC_BYTES], out[5 + 1];
	char err[256], b64[DLB_CONSOLE_KEY_B64_LEN];

	(void)state;
	assert_int_equal(dlb_console_key_decode(key_b64, key, err, sizeof(err)), 0);
	for (int i = 0; i < DLB_CONSOLE_KEY_BYTES; i++)
		assert_int_equal(key[i], i);
	dlb_console_key_new(other, b64);
	assert_int_equal(strlen(b64), 44);

	dlb_console_nonce_init(n1);
	memcpy(n2, n1, sizeof(n1));
	dlb_console_seal(box, "hello", 5, n1, key);
	assert_memory_not_equal(n1, n2, sizeof(n1));	/* incremented */
	memcpy(keep, n2, sizeof(n2));
	/* another key, or a changed byte: refused, nonce unchanged */
	assert_int_equal(dlb_console_open(out, box, sizeof(box), n2, other), -1);
	assert_memory_equal(n2, keep, sizeof(n2));
	box[DLB_CONSOLE_MAC_BYTES] ^= 1;
	assert_int_equal(dlb_console_open(out, box, sizeof(box), n2, key), -1);
	box[DLB_CONSOLE_MAC_BYTES] ^= 1;
	assert_int_equal(dlb_console_open(out, box, DLB_CONSOLE_MAC_BYTES - 1, n2, key), -1);
	assert_int_equal(dlb_console_open(out, box, sizeof(box), n2, key), 0);
	assert_memory_equal(out, "hello", 5);
	assert_memory_equal(n1, n2, sizeof(n1));	/* both sides moved on together */
	/* the same nonce twice does not open the next message */
	dlb_console_seal(box, "again", 5, n1, key);
	assert_int_equal(dlb_console_open(out, box, sizeof(box), keep, key), -1);

	/* dnsdist's messages */
	assert_int_equal(dlb_console_key_decode("!!!notbase64", key, err, sizeof(err)), -1);
	assert_string_equal(err, "Unable to decode !!!notbase64 as Base64");
	assert_int_equal(dlb_console_key_decode("YWJj", key, err, sizeof(err)), -1);
	assert_string_equal(err, "Invalid encryption key of size 3, use setKey() to set a valid key");
	assert_int_equal(dlb_console_key_decode("YWI", key, err, sizeof(err)), -1);
	assert_string_equal(err, "Invalid encryption key of size 2, use setKey() to set a valid key");
	/* unpadded and with blanks: accepted */
	memset(key, 0, sizeof(key));
	assert_int_equal(dlb_console_key_decode(" AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8\n",
						key, err, sizeof(err)), 0);
	assert_int_equal(key[31], 31);
}

static void
test_frame(void **state)
{
	uint8_t hdr[4];
	uint32_t len = 0;

	(void)state;
	dlb_console_frame_put_len(hdr, 0x01020304);
	assert_int_equal(hdr[0], 1);
	assert_int_equal(hdr[3], 4);
	assert_int_equal(dlb_console_frame_get_len(hdr, 0x01020304, &len), 0);
	assert_int_equal(len, 0x01020304);
	assert_int_equal(dlb_console_frame_get_len(hdr, 0x01020303, &len), -1);
	dlb_console_frame_put_len(hdr, 0x7fffffff);
	assert_int_equal(dlb_console_frame_get_len(hdr, DLB_CONSOLE_MAX_MSG_DEFAULT, &len), -1);
}

/* ---- a server and a client over a socketpair -------------------------------------------- */

struct fixture {
	struct dlb_config *cfg;
	struct dlb_lua_conf *lc;
	struct ev_loop *loop;
	char err[512];
};

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char conf[256];

	assert_non_null(f);
	dlb_lua_console_reset();
	f->cfg = dlb_config_new();
	assert_non_null(f->cfg);
	f->lc = dlb_lua_conf_new(f->cfg, DLB_LUA_PHASE_CONFIG);
	assert_non_null(f->lc);
	snprintf(conf, sizeof(conf),
		 "controlSocket('127.0.0.1:5299')\nsetKey('%s')\n"
		 "newServer({address='192.0.2.1', name='srv1'})\n", key_b64);
	assert_int_equal(dlb_lua_conf_load_string(f->lc, conf, "=conf", f->err,
						  sizeof(f->err)), 0);
	dlb_lua_conf_set_phase(f->lc, DLB_LUA_PHASE_RUNNING);
	dlb_daemon.lc = f->lc;
	f->loop = ev_loop_new(0);
	assert_non_null(f->loop);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	dlb_daemon.lc = NULL;
	ev_loop_destroy(f->loop);
	dlb_lua_conf_free(f->lc);
	dlb_rules_shutdown();
	dlb_config_free(f->cfg);
	dlb_lua_console_reset();
	free(f);
	return 0;
}

#define MAX_CMDS 24

/* What the client thread does and gets. */
struct client_job {
	int fd;
	uint8_t key[DLB_CONSOLE_KEY_BYTES];
	const char *cmds[MAX_CMDS];
	int ncmds;
	int start_rc;
	int rc[MAX_CMDS];
	char *replies[MAX_CMDS];
	size_t lens[MAX_CMDS];
	char err[256];
};

static void *
client_thread(void *arg)
{
	struct client_job *j = arg;
	struct dlb_console_session s;

	j->start_rc = dlb_console_session_start(&s, j->fd, j->key, DLB_CONSOLE_MAX_MSG_DEFAULT,
						j->err, sizeof(j->err));
	for (int i = 0; i < j->ncmds && j->start_rc == 0; i++)
		j->rc[i] = dlb_console_session_command(&s, j->cmds[i], strlen(j->cmds[i]),
						       &j->replies[i], &j->lens[i], j->err,
						       sizeof(j->err));
	dlb_console_session_close(&s);
	return NULL;
}

/* Run @j against the server until the client hangs up. */
static void
run_client(struct fixture *f, struct client_job *j)
{
	struct dlb_console_stats st;
	pthread_t t;
	int sv[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	j->fd = sv[1];
	assert_int_equal(dlb_console_serve_fd(f->loop, sv[0], "test"), 0);
	assert_int_equal(pthread_create(&t, NULL, client_thread, j), 0);
	ev_run(f->loop, 0);	/* returns once the connection is closed */
	pthread_join(t, NULL);
	dlb_console_get_stats(&st);
	assert_int_equal(st.current, 0);
}

static void
free_job(struct client_job *j)
{
	for (int i = 0; i < j->ncmds; i++)
		free(j->replies[i]);
}

static void
test_round_trip(void **state)
{
	struct fixture *f = *state;
	struct client_job j;
	const char *expect[] = {
		"dnsdist " DLB_DNSDIST_API " (dnslb " DLB_VERSION ")\n",	/* printed */
		"2\n",
		"3.3333333333333\n",
		"abc\n",
		"",				/* a statement */
		"5\n",
		"srv1\n",			/* a Server: its name */
		"{\"a\": 1, \"b\": 2.5, \"c\": 5}\n",
		"true\n",			/* dnslb prints booleans */
		"a\t1\nr\n",			/* printed, then returned */
		NULL,				/* error */
		NULL,				/* syntax error */
		"127.0.0.0/8\n::1/128\n",
		"",
		"1\n",
		"Everything is ok!\n",
	};

	memset(&j, 0, sizeof(j));
	assert_int_equal(dlb_console_key_decode(key_b64, j.key, f->err, sizeof(f->err)), 0);
	j.cmds[j.ncmds++] = "showVersion()";
	j.cmds[j.ncmds++] = "1+1";
	j.cmds[j.ncmds++] = "10/3";
	j.cmds[j.ncmds++] = "'abc'";
	j.cmds[j.ncmds++] = "x = 5";
	j.cmds[j.ncmds++] = "x";
	j.cmds[j.ncmds++] = "getServer(0)";
	j.cmds[j.ncmds++] = "{c='5', b=2.5, a=1}";
	j.cmds[j.ncmds++] = "true";
	j.cmds[j.ncmds++] = "(function() print('a', 1) return 'r' end)()";
	j.cmds[j.ncmds++] = "nosuch()";
	j.cmds[j.ncmds++] = "x =";
	j.cmds[j.ncmds++] = "showConsoleACL()";
	j.cmds[j.ncmds++] = "";
	j.cmds[j.ncmds++] = "type(print) == 'function' and 1 or 0";
	j.cmds[j.ncmds++] = "testCrypto()";
	j.cmds[j.ncmds++] = "delta()";
	run_client(f, &j);
	assert_int_equal(j.start_rc, 0);
	for (int i = 0; i < j.ncmds; i++)
		assert_int_equal(j.rc[i], 0);
	for (size_t i = 0; i < sizeof(expect) / sizeof(expect[0]); i++) {
		if (expect[i] != NULL)
			assert_string_equal(j.replies[i], expect[i]);
	}
	assert_true(strncmp(j.replies[10], "Error: [string \"return nosuch()\"]:1: ",
			    strlen("Error: [string \"return nosuch()\"]:1: ")) == 0);
	assert_non_null(strstr(j.replies[10], "stack traceback:"));
	assert_true(strncmp(j.replies[11], "Error: [string \"x =\"]:1: ",
			    strlen("Error: [string \"x =\"]:1: ")) == 0);
	assert_true(j.lens[11] > 2 && strcmp(j.replies[11] + j.lens[11] - 2, ": ") == 0);
	/* print was given back after the commands, also after the error */
	lua_getglobal(dlb_lua_conf_state(f->lc), "print");
	assert_true(lua_tocfunction(dlb_lua_conf_state(f->lc), -1) != NULL);
	lua_pop(dlb_lua_conf_state(f->lc), 1);
	/* delta(): what changed something, not what only showed */
	assert_non_null(strstr(j.replies[16], "\nx = 5\n"));
	assert_non_null(strstr(j.replies[16], "\n1+1\n"));
	assert_true(strncmp(j.replies[16], "-- ", 3) == 0);
	assert_null(strstr(j.replies[16], "showVersion"));
	assert_null(strstr(j.replies[16], "showConsoleACL"));
	assert_null(strstr(j.replies[16], "nosuch"));
	assert_non_null(strstr(j.replies[16], "\ntrue\n"));	/* printed, so recorded as 1+1 */
	free_job(&j);
}

static void
test_wrong_key(void **state)
{
	struct fixture *f = *state;
	struct dlb_console_stats before, after;
	struct client_job j;

	memset(&j, 0, sizeof(j));
	memset(j.key, 7, sizeof(j.key));
	j.cmds[j.ncmds++] = "x = 1";
	dlb_console_get_stats(&before);
	run_client(f, &j);
	dlb_console_get_stats(&after);
	assert_int_equal(j.start_rc, DLB_CONSOLE_ECLOSED);
	assert_non_null(strstr(j.err, "likely indicating a key mismatch"));
	assert_int_equal(after.bad_key, before.bad_key + 1);
	assert_int_equal(after.commands, before.commands);
}

/* The client side of an oversized header: nonce, then 0x7fffffff. */
static void *
oversized_thread(void *arg)
{
	int fd = *(int *)arg;
	uint8_t nonce[DLB_CONSOLE_NONCE_BYTES] = { 0 }, theirs[DLB_CONSOLE_NONCE_BYTES];
	uint8_t hdr[4] = { 0x7f, 0xff, 0xff, 0xff }, b;
	ssize_t got = 0, r;

	if (write(fd, nonce, sizeof(nonce)) != (ssize_t)sizeof(nonce) ||
	    write(fd, hdr, sizeof(hdr)) != (ssize_t)sizeof(hdr))
		*(int *)arg = -1;
	while (got < (ssize_t)sizeof(theirs) && (r = read(fd, theirs + got, sizeof(theirs) - (size_t)got)) > 0)
		got += r;
	/* then the server closes: EOF, nothing else */
	*(int *)arg = got == (ssize_t)sizeof(theirs) && read(fd, &b, 1) == 0 ? 0 : -2;
	close(fd);
	return NULL;
}

static void
test_oversized(void **state)
{
	struct fixture *f = *state;
	struct dlb_console_stats before, after;
	pthread_t t;
	int sv[2], arg;

	dlb_console_get_stats(&before);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	arg = sv[1];
	assert_int_equal(dlb_console_serve_fd(f->loop, sv[0], "test"), 0);
	assert_int_equal(pthread_create(&t, NULL, oversized_thread, &arg), 0);
	ev_run(f->loop, 0);
	pthread_join(t, NULL);
	assert_int_equal(arg, 0);
	dlb_console_get_stats(&after);
	assert_int_equal(after.oversized, before.oversized + 1);
}

static void
test_output_limit(void **state)
{
	struct fixture *f = *state;
	struct client_job j;

	memset(&j, 0, sizeof(j));
	assert_int_equal(dlb_console_key_decode(key_b64, j.key, f->err, sizeof(f->err)), 0);
	dlb_console_settings()->max_msg = 200;
	j.cmds[j.ncmds++] = "for i = 1, 1000 do print(i) end";
	j.cmds[j.ncmds++] = "string.rep('x', 500)";
	j.cmds[j.ncmds++] = "while true do end";
	j.cmds[j.ncmds++] = "'still here'";
	run_client(f, &j);
	assert_int_equal(j.start_rc, 0);
	assert_non_null(strstr(j.replies[0], "exceeds setConsoleOutputMaxMsgSize"));
	assert_non_null(strstr(j.replies[1], "exceeds setConsoleOutputMaxMsgSize"));
	assert_non_null(strstr(j.replies[2], "stopped after"));
	assert_string_equal(j.replies[3], "still here\n");
	free_job(&j);
}

/* A worker (or reload) state checks the arguments and changes nothing. */
static void
test_phases(void **state)
{
	struct dlb_config *cfg = dlb_config_new();
	struct dlb_lua_conf *lc;
	char err[512];

	(void)state;
	dlb_lua_console_reset();
	assert_non_null(cfg);
	lc = dlb_lua_conf_new(cfg, DLB_LUA_PHASE_WORKER);
	assert_non_null(lc);
	assert_int_equal(dlb_lua_conf_load_string(lc,
		"controlSocket('127.0.0.1:5300') setKey('" "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
		"') setConsoleACL('10.0.0.0/8') setConsoleMaximumConcurrentConnections(3) "
		"assert(not inClientStartup() and not inConfigCheck())", "=w", err, sizeof(err)), 0);
	assert_int_equal(dlb_console_settings()->naddrs, 0);
	assert_false(dlb_console_settings()->has_key);
	assert_int_equal(dlb_console_settings()->max_conns, DLB_CONSOLE_MAX_CONNS_DEFAULT);
	assert_int_equal(dlb_console_settings()->acl.n, 2);
	/* but the arguments are checked */
	assert_int_equal(dlb_lua_conf_load_string(lc, "setKey('YWJj')", "=w", err, sizeof(err)),
			 -1);
	assert_non_null(strstr(err, "Invalid encryption key of size 3"));
	assert_int_equal(dlb_lua_conf_load_string(lc, "setConsoleACL({'10.0.0.0/8', 'nope'})",
						  "=w", err, sizeof(err)), -1);
	dlb_lua_conf_free(lc);
	dlb_rules_shutdown();
	dlb_config_free(cfg);

	/* CHECK: inConfigCheck() is true, settings are recorded (nothing starts) */
	cfg = dlb_config_new();
	lc = dlb_lua_conf_new(cfg, DLB_LUA_PHASE_CHECK);
	assert_int_equal(dlb_lua_conf_load_string(lc,
		"assert(inConfigCheck()) controlSocket('[::1]') setConsoleACL({'10.0.0.0/8'}) "
		"addConsoleACL('192.0.2.0/24')", "=c", err, sizeof(err)), 0);
	assert_int_equal(dlb_console_settings()->naddrs, 1);
	assert_int_equal(dlb_console_settings()->acl.n, 2);
	{
		char text[128];

		dlb_console_acl_text(text, sizeof(text));
		assert_string_equal(text, "10.0.0.0/8, 192.0.2.0/24");
	}
	dlb_lua_conf_free(lc);
	dlb_rules_shutdown();
	dlb_config_free(cfg);
	dlb_lua_console_reset();
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nonce),
		cmocka_unit_test(test_seal_open),
		cmocka_unit_test(test_frame),
		cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wrong_key, setup, teardown),
		cmocka_unit_test_setup_teardown(test_oversized, setup, teardown),
		cmocka_unit_test_setup_teardown(test_output_limit, setup, teardown),
		cmocka_unit_test(test_phases),
	};

	dlb_rcu_init();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
