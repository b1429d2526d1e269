/*
 * test_stream_tls.c - TLS on a byte stream (dnslb/core/stream_tls.c): a
 * server stream and a client stream over a socketpair, each with its SSL
 * from the contexts of dnslb/core/tls.c, driven by a libev loop. Checks:
 * the handshake reports ->connected on both sides; bytes go both ways; a
 * write larger than the socket takes goes out whole through the write
 * queue (OpenSSL's retries from a moved buffer); bytes OpenSSL holds
 * decrypted or read ahead are reported without new socket data, also when
 * reading is turned back on, and when the handshake ends inside
 * dlb_stream_attach; a handshake that fails
 * validation reports ->failed; a closed peer reads as the end of the stream.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <ev.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dnslb/core/stream.h"
#include "dnslb/core/stream_tls.h"
#include "dnslb/core/tls.h"
#include "tls_fx.h"

/* One end: its stream, its TLS state, what it saw. */
struct end {
	struct dlb_stream s;
	struct dlb_stream_tls t;
	bool connected, failed, eof;
	enum dlb_stream_fail why;
	size_t chunk;			/* bytes per dlb_stream_read */
	uint8_t *got;
	size_t ngot, cap;
	int reads;
	bool pause;			/* reading off after each read that gave bytes */
};

static bool
on_connected(struct dlb_stream *s, void *ud)
{
	struct end *e = ud;

	(void)s;
	e->connected = true;
	return true;
}

static void
on_readable(struct dlb_stream *s, void *ud)
{
	struct end *e = ud;
	uint8_t buf[65536];
	ssize_t n = dlb_stream_read(s, buf, e->chunk);

	e->reads++;
	if (n == 0) {
		e->eof = true;
		dlb_stream_read_enable(s, false);
		return;
	}
	if (n < 0)
		return;
	assert_true(e->ngot + (size_t)n <= e->cap);
	memcpy(e->got + e->ngot, buf, (size_t)n);
	e->ngot += (size_t)n;
	if (e->pause)
		dlb_stream_read_enable(s, false);
}

static bool
on_drained(struct dlb_stream *s, void *ud)
{
	(void)s;
	(void)ud;
	return true;
}

static void
on_failed(struct dlb_stream *s, void *ud, enum dlb_stream_fail why, int err)
{
	struct end *e = ud;

	(void)err;
	e->failed = true;
	e->why = why;
	dlb_stream_read_enable(s, false);
}

static const struct dlb_stream_cb CB = { on_connected, on_readable, on_drained, on_failed };

static struct {
	struct ev_loop *loop;
	struct dlb_tls_server *srv;
	struct dlb_tls_client *cli;
	struct end a, b;		/* a: the server side, b: the client side */
} F;

static int
fx_setup(void **state)
{
	struct dlb_tls_server_opts so;
	struct dlb_tls_client_opts co;
	char err[256];

	make_pki(state);
	dlb_tls_server_opts_default(&so);
	so.certs[0] = path("dns.pem");
	so.keys[0] = path("dns.key");
	so.ncerts = 1;
	F.srv = dlb_tls_server_new(&so, err, sizeof(err));
	assert_non_null(F.srv);
	dlb_tls_client_opts_default(&co);
	co.ca_store = path("ca.pem");
	F.cli = dlb_tls_client_new(&co, err, sizeof(err));
	assert_non_null(F.cli);
	F.loop = ev_loop_new(EVFLAG_AUTO);
	return 0;
}

static int
fx_teardown(void **state)
{
	dlb_tls_server_free(F.srv);
	dlb_tls_client_free(F.cli);
	ev_loop_destroy(F.loop);
	return remove_pki(state);
}

/* The two ends over a fresh socketpair, the client expecting @name. */
static void
pair(const char *name, size_t cap)
{
	int sv[2];
	SSL *ss, *cs;

	for (int i = 0; i < 2; i++) {
		struct end *e = i ? &F.b : &F.a;

		free(e->got);
		memset(e, 0, sizeof(*e));
		e->chunk = 65536;
		e->cap = cap;
		e->got = malloc(cap);
		assert_non_null(e->got);
	}
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	ss = dlb_tls_server_ssl_new(F.srv);
	cs = dlb_tls_client_ssl_new(F.cli, name, NULL);
	assert_non_null(ss);
	assert_non_null(cs);
	SSL_set_accept_state(ss);
	SSL_set_connect_state(cs);
	dlb_stream_init(&F.a.s, F.loop, &dlb_stream_tcp_ops, &CB, &F.a, 1 << 20);
	dlb_stream_tls_use(&F.a.s, &F.a.t, ss);
	dlb_stream_init(&F.b.s, F.loop, &dlb_stream_tcp_ops, &CB, &F.b, 1 << 20);
	dlb_stream_tls_use(&F.b.s, &F.b.t, cs);
	assert_int_equal(dlb_stream_attach(&F.a.s, sv[0]), 0);
	assert_int_equal(dlb_stream_attach(&F.b.s, sv[1]), 0);
}

static void
unpair(void)
{
	dlb_stream_close(&F.a.s);
	dlb_stream_close(&F.b.s);
}

/* Run the loop until @done or 2000 turns. */
static void
run_until(bool (*done)(void))
{
	for (int i = 0; i < 2000 && !done(); i++)
		ev_run(F.loop, EVRUN_NOWAIT);
}

static bool
both_connected(void)
{
	return (F.a.connected && F.b.connected) || F.a.failed || F.b.failed;
}

static size_t want_a, want_b;

static bool
all_received(void)
{
	return F.a.ngot >= want_a && F.b.ngot >= want_b;
}

static void
test_handshake_and_bytes(void **state)
{
	struct iovec iov[2];
	uint8_t prefix[2] = { 0, 5 };

	(void)state;
	pair("dns.test", 1024);
	run_until(both_connected);
	assert_true(F.a.connected && F.b.connected);
	assert_true(F.a.t.established && F.b.t.established);
	assert_false(F.b.t.resumed);
	/* a framed message each way */
	iov[0] = (struct iovec){ prefix, 2 };
	iov[1] = (struct iovec){ (void *)"hello", 5 };
	assert_int_equal(dlb_stream_writev(&F.b.s, iov, 2), 0);
	iov[1] = (struct iovec){ (void *)"world", 5 };
	assert_int_equal(dlb_stream_writev(&F.a.s, iov, 2), 0);
	want_a = want_b = 7;
	run_until(all_received);
	assert_int_equal(F.a.ngot, 7);
	assert_memory_equal(F.a.got, "\0\5hello", 7);
	assert_int_equal(F.b.ngot, 7);
	assert_memory_equal(F.b.got, "\0\5world", 7);
	unpair();
}

/* 1 MiB in one write: far more than the socket takes at once. */
static void
test_large_write(void **state)
{
	static uint8_t big[1 << 20];
	struct iovec iov;

	(void)state;
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 31 + 7);
	pair("dns.test", sizeof(big));
	run_until(both_connected);
	assert_true(F.b.connected);
	iov = (struct iovec){ big, sizeof(big) };
	assert_int_equal(dlb_stream_writev(&F.a.s, &iov, 1), 0);
	assert_true(F.a.s.out_bytes > 0);	/* the rest waits in the queue */
	want_a = 0;
	want_b = sizeof(big);
	run_until(all_received);
	assert_int_equal(F.b.ngot, sizeof(big));
	assert_memory_equal(F.b.got, big, sizeof(big));
	assert_int_equal(F.a.s.out_bytes, 0);
	unpair();
}

/* One record read 16 bytes at a time: OpenSSL holds the rest decrypted, and
 * the stream reports it with no more bytes on the socket. */
static void
test_pending_reported(void **state)
{
	uint8_t msg[300];
	struct iovec iov = { msg, sizeof(msg) };

	(void)state;
	memset(msg, 'x', sizeof(msg));
	pair("dns.test", 1024);
	run_until(both_connected);
	F.b.chunk = 16;
	assert_int_equal(dlb_stream_writev(&F.a.s, &iov, 1), 0);
	want_a = 0;
	want_b = sizeof(msg);
	run_until(all_received);
	assert_int_equal(F.b.ngot, sizeof(msg));
	assert_true(F.b.reads >= (int)(sizeof(msg) / 16));
	unpair();
}

/* Three records in one read (read-ahead): SSL_read gives one; with reading
 * off the others wait in OpenSSL, not on the socket, and turning reading on
 * reports them. */
static void
test_read_ahead_reported(void **state)
{
	uint8_t msg[3][100];
	struct iovec iov;

	(void)state;
	pair("dns.test", 1024);
	run_until(both_connected);
	assert_int_equal(SSL_get_read_ahead(F.b.t.ssl), 1);
	F.b.pause = true;
	for (int i = 0; i < 3; i++) {
		memset(msg[i], 'a' + i, sizeof(msg[i]));
		iov = (struct iovec){ msg[i], sizeof(msg[i]) };
		assert_int_equal(dlb_stream_writev(&F.a.s, &iov, 1), 0);	/* a record each */
	}
	want_a = 0;
	want_b = 100;
	run_until(all_received);
	assert_int_equal(F.b.ngot, 100);	/* one record per SSL_read */
	assert_int_equal(SSL_has_pending(F.b.t.ssl), 1);
	for (int i = 0; i < 50; i++)
		ev_run(F.loop, EVRUN_NOWAIT);
	assert_int_equal(F.b.ngot, 100);	/* reading off: nothing more */
	F.b.pause = false;
	dlb_stream_read_enable(&F.b.s, true);
	want_b = 300;
	run_until(all_received);
	assert_int_equal(F.b.ngot, 300);
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 100; j++)
			assert_int_equal(F.b.got[i * 100 + j], 'a' + i);
	unpair();
}

/*
 * The client's last handshake flight and its first bytes are in the socket
 * before the server's stream is attached: the handshake ends inside
 * dlb_stream_attach, and what its read took beyond the handshake (read
 * ahead) is reported as readable with no more socket data to come.
 */
static void
test_attach_reports_read_ahead(void **state)
{
	int sv[2], rc = 0;
	SSL *ss, *cs;

	(void)state;
	pair("dns.test", 64);	/* only for the ends' buffers */
	unpair();
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	ss = dlb_tls_server_ssl_new(F.srv);
	cs = dlb_tls_client_ssl_new(F.cli, "dns.test", NULL);
	assert_non_null(ss);
	assert_non_null(cs);
	SSL_set_accept_state(ss);
	SSL_set_connect_state(cs);
	assert_int_equal(SSL_set_fd(ss, sv[0]), 1);
	assert_int_equal(SSL_set_fd(cs, sv[1]), 1);
	/* the client's handshake to its end; the server's up to the client's Finished */
	for (int i = 0; i < 10 && rc != 1; i++) {
		rc = SSL_do_handshake(cs);
		if (rc != 1)
			assert_int_not_equal(SSL_do_handshake(ss), 1);
	}
	assert_int_equal(rc, 1);
	assert_int_equal(SSL_write(cs, "hello", 5), 5);
	dlb_stream_init(&F.a.s, F.loop, &dlb_stream_tcp_ops, &CB, &F.a, 1 << 20);
	dlb_stream_tls_use(&F.a.s, &F.a.t, ss);
	assert_int_equal(dlb_stream_attach(&F.a.s, sv[0]), 0);
	assert_int_equal(F.a.s.state, DLB_STREAM_OPEN);	/* the path under test */
	want_a = 5;
	want_b = 0;
	run_until(all_received);
	assert_int_equal(F.a.ngot, 5);
	assert_memory_equal(F.a.got, "hello", 5);
	dlb_stream_close(&F.a.s);
	SSL_free(cs);
	close(sv[1]);
}

/* A certificate for another name: the client's handshake fails. */
static void
test_handshake_fails(void **state)
{
	(void)state;
	pair("other.test", 64);
	run_until(both_connected);
	run_until(both_connected);
	assert_true(F.b.failed);
	assert_int_equal(F.b.why, DLB_STREAM_CONNECT);
	assert_true(F.b.t.failed);
	assert_false(F.b.connected);
	unpair();
}

static bool
b_eof(void)
{
	return F.b.eof || F.b.failed;
}

/* The server closes (close_notify): the client reads the end of the stream. */
static void
test_close_notify(void **state)
{
	(void)state;
	pair("dns.test", 64);
	run_until(both_connected);
	dlb_stream_close(&F.a.s);
	run_until(b_eof);
	assert_true(F.b.eof);
	assert_false(F.b.failed);
	dlb_stream_close(&F.b.s);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_handshake_and_bytes),
		cmocka_unit_test(test_large_write),
		cmocka_unit_test(test_pending_reported),
		cmocka_unit_test(test_read_ahead_reported),
		cmocka_unit_test(test_attach_reports_read_ahead),
		cmocka_unit_test(test_handshake_fails),
		cmocka_unit_test(test_close_notify),
	};
	int rc;

	signal(SIGPIPE, SIG_IGN);	/* as the daemon: a closed peer is an error, not a signal */
	rc = cmocka_run_group_tests(tests, fx_setup, fx_teardown);

	free(F.a.got);
	free(F.b.got);
	return rc;
}
