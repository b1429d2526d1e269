/*
 * test_doh_h1.c - the HTTP/1.1 side of a DoH connection
 * (dnslb/frontend/doh_h1.c). The exchanges and the expected bytes are what
 * Debian's dnsdist 1.7.3 (h2o) answered over a plain connection: pipelined
 * requests answered in order, HTTP/1.0 and "Connection: close", chunked
 * and Content-Length bodies, h2o's fixed 400 for a request it cannot
 * parse; and the bounds (a body over 65,535 bytes, a header block over the
 * limit), "Expect: 100-continue", a request fed byte by byte, HTTP/2's
 * preface.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "dnslb/frontend/doh_h1.h"

#define QB64 "AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB"
static const uint8_t Q[] = "\0\0\1\0\0\1\0\0\0\0\0\0\3www\7example\3com\0\0\1\0\1";

static struct {
	int n;
	int32_t id[8];
	char method[8][8], path[8][128], host[8][32];
	size_t body_len[8];
	uint8_t body[8][64];
} rec;

static struct dlb_doh_h1 *h;

static void
on_request(void *ud, const struct dlb_doh_request *rq)
{
	int i = rec.n++;

	(void)ud;
	assert_true(i < 8);
	rec.id[i] = rq->stream_id;
	snprintf(rec.method[i], sizeof(rec.method[i]), "%s", rq->method);
	snprintf(rec.path[i], sizeof(rec.path[i]), "%s", rq->path);
	snprintf(rec.host[i], sizeof(rec.host[i]), "%s", rq->authority);
	rec.body_len[i] = rq->body_len;
	if (rq->body_len > 0 && rq->body_len <= sizeof(rec.body[i]))
		memcpy(rec.body[i], rq->body, rq->body_len);
}

static const struct dlb_doh_h2_cb CB = { on_request, NULL };

static int
setup(void **state)
{
	struct dlb_doh_h2_limits l;

	(void)state;
	memset(&rec, 0, sizeof(rec));
	dlb_doh_h2_limits_default(&l);
	h = dlb_doh_h1_new(&l, &CB, NULL);
	assert_non_null(h);
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	dlb_doh_h1_free(h);
	return 0;
}

static int
feed(const char *s, size_t n)
{
	return dlb_doh_h1_feed(h, (const uint8_t *)s, n);
}

#define FEED(lit) feed(lit, sizeof(lit) - 1)

/* What is waiting to be sent, as a string (NULs kept). */
static size_t
sent(char *out, size_t cap)
{
	size_t n = dlb_doh_h1_send(h, (uint8_t *)out, cap - 1);

	out[n] = '\0';
	return n;
}

static const struct dlb_doh_header ANSWER_FIELDS[] = {
	{ "server", "h2o/dnsdist" },
	{ "date", "Sat, 05 Dec 2026 08:00:15 GMT" },
	{ "x-foo", "bar" },
	{ "content-type", "application/dns-message" },
	{ "cache-control", "max-age=60" },
};

/* Two pipelined GETs: the second is handed on only once the first is
 * answered, and the answers come out in h2o's field order. */
static void
test_pipelined(void **state)
{
	static const char want1[] =
		"HTTP/1.1 200 OK\r\nDate: Sat, 05 Dec 2026 08:00:15 GMT\r\nConnection: keep-alive\r\n"
		"Content-Length: 5\r\nServer: h2o/dnsdist\r\nx-foo: bar\r\n"
		"content-type: application/dns-message\r\ncache-control: max-age=60\r\n\r\nhello";
	static const char want2[] =
		"HTTP/1.1 404 File Not Found\r\nDate: Sat, 05 Dec 2026 08:00:15 GMT\r\n"
		"Connection: keep-alive\r\nContent-Length: 9\r\nServer: h2o/dnsdist\r\n"
		"content-type: text/plain; charset=utf-8\r\n\r\nnot found";
	const struct dlb_doh_header nf[] = { ANSWER_FIELDS[0], ANSWER_FIELDS[1],
					     { "content-type", "text/plain; charset=utf-8" } };
	char out[1024];

	(void)state;
	assert_int_equal(FEED("GET /dns-query?dns=" QB64 " HTTP/1.1\r\nHost: x\r\n\r\n"
			      "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
	assert_int_equal(rec.n, 1);
	assert_true(dlb_doh_h1_busy(h));
	assert_string_equal(rec.method[0], "GET");
	assert_string_equal(rec.path[0], "/dns-query?dns=" QB64);
	assert_string_equal(rec.host[0], "x");
	assert_int_equal(dlb_doh_h1_respond(h, rec.id[0], 200, NULL, ANSWER_FIELDS, 5,
					    (const uint8_t *)"hello", 5), 0);
	assert_int_equal(rec.n, 2);
	assert_string_equal(rec.path[1], "/nope");
	assert_int_equal(sent(out, sizeof(out)), sizeof(want1) - 1);
	assert_string_equal(out, want1);
	/* an answer for a request that is not the current one is refused */
	assert_int_equal(dlb_doh_h1_respond(h, rec.id[0], 200, NULL, NULL, 0, NULL, 0), -1);
	assert_int_equal(dlb_doh_h1_respond(h, rec.id[1], 404, "File Not Found", nf, 3,
					    (const uint8_t *)"not found", 9), 0);
	sent(out, sizeof(out));
	assert_string_equal(out, want2);
	assert_false(dlb_doh_h1_done(h));
}

/* HTTP/1.0 and "Connection: close": answered with "Connection: close", then the end. */
static void
test_close(void **state)
{
	char out[512];

	(void)state;
	assert_int_equal(FEED("GET /dns-query HTTP/1.0\r\n\r\n"), 0);
	assert_int_equal(rec.n, 1);
	assert_int_equal(dlb_doh_h1_respond(h, rec.id[0], 400, NULL, NULL, 0,
					    (const uint8_t *)"Unable to parse the request", 27), 0);
	sent(out, sizeof(out));
	assert_non_null(strstr(out, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n"
				    "Content-Length: 27\r\n\r\n"));
	assert_true(dlb_doh_h1_done(h));
	assert_int_equal(FEED("GET / HTTP/1.1\r\n\r\n"), -1);	/* nothing more is read */
	teardown(state);
	setup(state);
	assert_int_equal(FEED("GET /x HTTP/1.1\r\nConnection: close\r\n\r\n"), 0);
	assert_int_equal(dlb_doh_h1_respond(h, rec.id[0], 200, NULL, NULL, 0, NULL, 0), 0);
	sent(out, sizeof(out));
	assert_non_null(strstr(out, "Connection: close\r\n"));
	assert_true(dlb_doh_h1_done(h));
}

/* POST with Content-Length, chunked, and without a length (an empty body). */
static void
test_bodies(void **state)
{
	char req[512];
	int n;

	(void)state;
	n = snprintf(req, sizeof(req), "POST /dns-query HTTP/1.1\r\nHost: x\r\nContent-Length: 33\r\n\r\n");
	memcpy(req + n, Q, 33);
	assert_int_equal(feed(req, (size_t)n + 33), 0);
	assert_int_equal(rec.body_len[0], 33);
	assert_memory_equal(rec.body[0], Q, 33);
	assert_int_equal(dlb_doh_h1_respond(h, rec.id[0], 200, NULL, NULL, 0, NULL, 0), 0);

	n = snprintf(req, sizeof(req), "POST /dns-query HTTP/1.1\r\nHost: x\r\n"
		     "Transfer-Encoding: chunked\r\n\r\n10\r\n");
	memcpy(req + n, Q, 16);
	n += 16;
	n += snprintf(req + n, sizeof(req) - (size_t)n, "\r\n11;ext=1\r\n");
	memcpy(req + n, Q + 16, 17);
	n += 17;
	n += snprintf(req + n, sizeof(req) - (size_t)n, "\r\n0\r\nX-Trailer: y\r\n\r\n");
	assert_int_equal(feed(req, (size_t)n), 0);
	assert_int_equal(rec.n, 2);
	assert_int_equal(rec.body_len[1], 33);
	assert_memory_equal(rec.body[1], Q, 33);
	assert_int_equal(dlb_doh_h1_respond(h, rec.id[1], 200, NULL, NULL, 0, NULL, 0), 0);

	assert_int_equal(FEED("POST /dns-query HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
	assert_int_equal(rec.n, 3);
	assert_int_equal(rec.body_len[2], 0);
}

/* Requests h2o cannot parse: its fixed 400, then the end. */
static void
test_unparsable(void **state)
{
	static const char want[] = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
				   "Connection: close\r\nContent-Length: 11\r\n\r\nBad Request";
	static const char *const bad[] = {
		"BOGUS\r\n\r\n",
		"GET /x HTTP/2.0\r\n\r\n",
		"GET  /x HTTP/1.1\r\n\r\n",
		"GET /x HTTP/1.1\r\n folded: x\r\n\r\n",
		"GET /x HTTP/1.1\r\nno colon\r\n\r\n",
		"GET /x HTTP/1.1\r\nContent-Length: 1x\r\n\r\n",
		"GET /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
		"POST /x HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"POST /x HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
		"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
	};
	char out[512];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(feed(bad[i], strlen(bad[i])), -1);
		assert_int_equal(rec.n, 0);
		sent(out, sizeof(out));
		if (strcmp(out, want) != 0)
			fail_msg("case %zu: '%s'", i, out);
		assert_true(dlb_doh_h1_done(h));
		teardown(state);
		setup(state);
	}
}

/* A NUL byte in the header block (found by fuzz_doh_h1): the fixed 400. */
static void
test_nul(void **state)
{
	static const char req[] = "GET /x HTTP/1.1\r\nA: \0b\r\n\r\n";
	char out[256];

	(void)state;
	assert_int_equal(feed(req, sizeof(req) - 1), -1);
	assert_int_equal(rec.n, 0);
	sent(out, sizeof(out));
	assert_non_null(strstr(out, "400 Bad Request"));
}

/* Bounds: a body over 65,535 bytes (413, then the end); a header block past
 * the limit with no end in sight (400). */
static void
test_bounds(void **state)
{
	static char big[20000];
	char out[512];

	assert_int_equal(FEED("POST /dns-query HTTP/1.1\r\nContent-Length: 70000\r\n\r\n"), -1);
	sent(out, sizeof(out));
	assert_non_null(strstr(out, "HTTP/1.1 413 Payload Too Large\r\n"));
	assert_true(dlb_doh_h1_done(h));
	teardown(state);
	setup(state);
	memset(big, 'a', sizeof(big));
	memcpy(big, "GET /x HTTP/1.1\r\nX-Big: ", 24);
	assert_int_equal(feed(big, sizeof(big)), -1);
	sent(out, sizeof(out));
	assert_non_null(strstr(out, "400 Bad Request"));
}

/* One byte at a time, with "Expect: 100-continue" before the body. */
static void
test_byte_by_byte(void **state)
{
	char req[256], out[256];
	int n = snprintf(req, sizeof(req), "POST /dns-query HTTP/1.1\r\nHost: x\r\n"
			 "Expect: 100-continue\r\nContent-Length: 33\r\n\r\n");

	(void)state;
	memcpy(req + n, Q, 33);
	for (int i = 0; i < n + 33; i++) {
		assert_int_equal(feed(req + i, 1), 0);
		if (i == n - 1) {
			sent(out, sizeof(out));
			assert_string_equal(out, "HTTP/1.1 100 Continue\r\n\r\n");
		}
	}
	assert_int_equal(rec.n, 1);
	assert_int_equal(rec.body_len[0], 33);
}

static void
test_preface_and_reasons(void **state)
{
	(void)state;
	assert_true(dlb_doh_h1_is_h2_preface((const uint8_t *)"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24));
	assert_true(dlb_doh_h1_is_h2_preface((const uint8_t *)"PRI *", 5));
	assert_false(dlb_doh_h1_is_h2_preface((const uint8_t *)"GET / HTTP/1.1", 14));
	assert_string_equal(dlb_doh_reason(200), "OK");
	assert_string_equal(dlb_doh_reason(302), "Found");
	assert_string_equal(dlb_doh_reason(502), "Bad Gateway");
	assert_string_equal(dlb_doh_reason(299), "Unknown");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_pipelined, setup, teardown),
		cmocka_unit_test_setup_teardown(test_close, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bodies, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unparsable, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nul, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bounds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_byte_by_byte, setup, teardown),
		cmocka_unit_test_setup_teardown(test_preface_and_reasons, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
