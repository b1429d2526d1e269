/*
 * test_doh_h2.c - the HTTP/2 side of a DoH connection (dnslb/frontend/doh_h2.c)
 * against an nghttp2 client in memory: the bytes of each side are handed to
 * the other until both are quiet. Checks: GET and POST requests with their
 * pseudo-headers, fields and body; answers with status, fields and body;
 * several streams at once answered out of order; and the bounds: a header
 * list too large (the stream reset), a body larger than a DNS message
 * (413), a client resetting streams too fast, a flood of SETTINGS, a bad
 * connection preface, and a stream reset before its answer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <nghttp2/nghttp2.h>

#include "dnslb/frontend/doh_h2.h"

/* ---- the server's side: requests recorded, answered by the test ---------------- */

#define MAXREQ 256

static struct {
	int n, gone;
	int32_t ids[MAXREQ];
	char method[MAXREQ][8];
	char path[MAXREQ][128];
	char accept[MAXREQ][64];
	size_t body_len[MAXREQ];
	uint8_t body[4][600];
	bool answer_now;		/* answer each request in the callback */
} srv;

static struct dlb_doh_h2 *server;

static void
on_request(void *ud, const struct dlb_doh_request *rq)
{
	int i = srv.n++;

	(void)ud;
	assert_true(i < MAXREQ);
	srv.ids[i] = rq->stream_id;
	snprintf(srv.method[i], sizeof(srv.method[i]), "%s", rq->method);
	snprintf(srv.path[i], sizeof(srv.path[i]), "%s", rq->path);
	srv.accept[i][0] = '\0';
	for (size_t k = 0; k < rq->nheaders; k++)
		if (strcmp(rq->headers[k].name, "accept") == 0)
			snprintf(srv.accept[i], sizeof(srv.accept[i]), "%s", rq->headers[k].value);
	srv.body_len[i] = rq->body_len;
	if (i < 4 && rq->body_len > 0 && rq->body_len <= sizeof(srv.body[0]))
		memcpy(srv.body[i], rq->body, rq->body_len);
	if (srv.answer_now) {
		static const struct dlb_doh_header ct = { "content-type", "application/dns-message" };

		assert_int_equal(dlb_doh_h2_respond(server, rq->stream_id, 200, &ct, 1,
						    (const uint8_t *)rq->path, strlen(rq->path)), 0);
	}
}

static void
on_gone(void *ud, int32_t id)
{
	(void)ud;
	(void)id;
	srv.gone++;
}

static const struct dlb_doh_h2_cb CB = { on_request, on_gone };

/* ---- the client: nghttp2, recording what each stream got ------------------------ */

static struct {
	int status[MAXREQ * 2];
	char ctype[MAXREQ * 2][64];
	uint8_t body[MAXREQ * 2][256];
	size_t body_len[MAXREQ * 2];
	bool closed[MAXREQ * 2];
	uint32_t close_code[MAXREQ * 2];
	uint32_t goaway_code;
	bool goaway;
} cli;

static int
c_on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nl,
	    const uint8_t *value, size_t vl, uint8_t flags, void *ud)
{
	int id = f->hd.stream_id;

	(void)s;
	(void)flags;
	(void)ud;
	if (id >= MAXREQ * 2)
		return 0;
	if (nl == 7 && memcmp(name, ":status", 7) == 0)
		cli.status[id] = atoi((const char *)value);
	if (nl == 12 && memcmp(name, "content-type", 12) == 0 && vl < 64) {
		memcpy(cli.ctype[id], value, vl);
		cli.ctype[id][vl] = '\0';
	}
	return 0;
}

static int
c_on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len, void *ud)
{
	(void)s;
	(void)flags;
	(void)ud;
	if (id < MAXREQ * 2 && cli.body_len[id] + len <= sizeof(cli.body[0])) {
		memcpy(cli.body[id] + cli.body_len[id], data, len);
		cli.body_len[id] += len;
	}
	return 0;
}

static int
c_on_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud)
{
	(void)s;
	(void)ud;
	if (id < MAXREQ * 2) {
		cli.closed[id] = true;
		cli.close_code[id] = code;
	}
	return 0;
}

static int
c_on_frame(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
	(void)s;
	(void)ud;
	if (f->hd.type == NGHTTP2_GOAWAY) {
		cli.goaway = true;
		cli.goaway_code = f->goaway.error_code;
	}
	return 0;
}

static nghttp2_session *
client_new(void)
{
	nghttp2_session_callbacks *cbs;
	nghttp2_session *c;

	assert_int_equal(nghttp2_session_callbacks_new(&cbs), 0);
	nghttp2_session_callbacks_set_on_header_callback(cbs, c_on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, c_on_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, c_on_close);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, c_on_frame);
	assert_int_equal(nghttp2_session_client_new(&c, cbs, NULL), 0);
	nghttp2_session_callbacks_del(cbs);
	assert_int_equal(nghttp2_submit_settings(c, NGHTTP2_FLAG_NONE, NULL, 0), 0);
	return c;
}

/* Hand each side's bytes to the other until both are quiet. @return the
 * server's last feed result. */
static int
pump(nghttp2_session *c)
{
	uint8_t buf[16384];
	int rc = 0;

	for (int round = 0; round < 1000; round++) {
		const uint8_t *data;
		ssize_t n, moved = 0;

		while ((n = nghttp2_session_mem_send(c, &data)) > 0) {
			moved += n;
			if (rc == 0)
				rc = dlb_doh_h2_feed(server, data, (size_t)n);
		}
		while ((n = dlb_doh_h2_send(server, buf, sizeof(buf))) > 0) {
			moved += n;
			nghttp2_session_mem_recv(c, buf, (size_t)n);
		}
		assert_true(n == 0);
		if (moved == 0)
			break;
	}
	return rc;
}

static int32_t
get(nghttp2_session *c, const char *path, const char *accept)
{
	nghttp2_nv nv[5] = {
		{ (uint8_t *)":method", (uint8_t *)"GET", 7, 3, 0 },
		{ (uint8_t *)":scheme", (uint8_t *)"https", 7, 5, 0 },
		{ (uint8_t *)":authority", (uint8_t *)"dns.test", 10, 8, 0 },
		{ (uint8_t *)":path", (uint8_t *)path, 5, strlen(path), 0 },
		{ (uint8_t *)"accept", (uint8_t *)accept, 6, accept ? strlen(accept) : 0, 0 },
	};
	int32_t id = nghttp2_submit_request(c, NULL, nv, accept ? 5 : 4, NULL, NULL);

	assert_true(id > 0);
	return id;
}

static struct {
	const uint8_t *p;
	size_t len, off;
} upload;

static ssize_t
upload_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
	    nghttp2_data_source *src, void *ud)
{
	size_t n = upload.len - upload.off;

	(void)s;
	(void)id;
	(void)src;
	(void)ud;
	if (n > length)
		n = length;
	memcpy(buf, upload.p + upload.off, n);
	upload.off += n;
	if (upload.off == upload.len)
		*flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)n;
}

static int32_t
post(nghttp2_session *c, const char *path, const uint8_t *body, size_t len)
{
	nghttp2_nv nv[5] = {
		{ (uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0 },
		{ (uint8_t *)":scheme", (uint8_t *)"https", 7, 5, 0 },
		{ (uint8_t *)":authority", (uint8_t *)"dns.test", 10, 8, 0 },
		{ (uint8_t *)":path", (uint8_t *)path, 5, strlen(path), 0 },
		{ (uint8_t *)"content-type", (uint8_t *)"application/dns-message", 12, 23, 0 },
	};
	nghttp2_data_provider prd = { .read_callback = upload_read };
	int32_t id;

	upload.p = body;
	upload.len = len;
	upload.off = 0;
	id = nghttp2_submit_request(c, NULL, nv, 5, &prd, NULL);
	assert_true(id > 0);
	return id;
}

static int
setup(void **state)
{
	struct dlb_doh_h2_limits l;

	(void)state;
	memset(&srv, 0, sizeof(srv));
	memset(&cli, 0, sizeof(cli));
	dlb_doh_h2_limits_default(&l);
	l.max_resets_per_s = 20;
	server = dlb_doh_h2_new(&l, &CB, NULL);
	assert_non_null(server);
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	dlb_doh_h2_free(server);
	server = NULL;
	return 0;
}

/* GET and POST, answered in the callback. */
static void
test_get_and_post(void **state)
{
	nghttp2_session *c = client_new();
	static const uint8_t q[33] = { 0, 0, 1, 0, 0, 1 };
	int32_t g, p;

	(void)state;
	srv.answer_now = true;
	g = get(c, "/dns-query?dns=AAAB", "application/dns-message");
	p = post(c, "/dns-query", q, sizeof(q));
	assert_int_equal(pump(c), 0);
	assert_int_equal(srv.n, 2);
	assert_string_equal(srv.method[0], "GET");
	assert_string_equal(srv.path[0], "/dns-query?dns=AAAB");
	assert_string_equal(srv.accept[0], "application/dns-message");
	assert_int_equal(srv.body_len[0], 0);
	assert_string_equal(srv.method[1], "POST");
	assert_int_equal(srv.body_len[1], sizeof(q));
	assert_memory_equal(srv.body[1], q, sizeof(q));
	assert_int_equal(cli.status[g], 200);
	assert_string_equal(cli.ctype[g], "application/dns-message");
	assert_int_equal(cli.body_len[g], 19);
	assert_memory_equal(cli.body[g], "/dns-query?dns=AAAB", 19);
	assert_int_equal(cli.status[p], 200);
	assert_true(cli.closed[g] && cli.closed[p]);
	assert_int_equal(dlb_doh_h2_streams(server), 0);
	nghttp2_session_del(c);
}

/* Several streams, answered later and in reverse order: each gets its own. */
static void
test_out_of_order(void **state)
{
	nghttp2_session *c = client_new();
	int32_t ids[10];
	char path[32];

	(void)state;
	for (int i = 0; i < 10; i++) {
		snprintf(path, sizeof(path), "/q%d", i);
		ids[i] = get(c, path, NULL);
	}
	assert_int_equal(pump(c), 0);
	assert_int_equal(srv.n, 10);
	assert_int_equal(dlb_doh_h2_streams(server), 10);
	for (int i = 9; i >= 0; i--) {
		snprintf(path, sizeof(path), "answer %d", i);
		assert_int_equal(dlb_doh_h2_respond(server, srv.ids[i], 200, NULL, 0, (uint8_t *)path,
						    strlen(path)), 0);
	}
	assert_int_equal(pump(c), 0);
	for (int i = 0; i < 10; i++) {
		snprintf(path, sizeof(path), "answer %d", i);
		assert_int_equal(cli.status[ids[i]], 200);
		assert_int_equal(cli.body_len[ids[i]], strlen(path));
		assert_memory_equal(cli.body[ids[i]], path, strlen(path));
	}
	/* a second answer to a stream is refused */
	assert_int_equal(dlb_doh_h2_respond(server, srv.ids[0], 200, NULL, 0, NULL, 0), -1);
	nghttp2_session_del(c);
}

/* A header list over 16 KiB: that stream is reset, the connection lives on. */
static void
test_header_list_bound(void **state)
{
	nghttp2_session *c = client_new();
	static char big[5000];
	nghttp2_nv nv[8];
	int32_t id, ok;

	(void)state;
	srv.answer_now = true;
	memset(big, 'x', sizeof(big) - 1);
	nv[0] = (nghttp2_nv){ (uint8_t *)":method", (uint8_t *)"GET", 7, 3, 0 };
	nv[1] = (nghttp2_nv){ (uint8_t *)":scheme", (uint8_t *)"https", 7, 5, 0 };
	nv[2] = (nghttp2_nv){ (uint8_t *)":authority", (uint8_t *)"dns.test", 10, 8, 0 };
	nv[3] = (nghttp2_nv){ (uint8_t *)":path", (uint8_t *)"/dns-query", 5, 10, 0 };
	for (int i = 4; i < 8; i++)
		nv[i] = (nghttp2_nv){ (uint8_t *)"x-big", (uint8_t *)big, 5, sizeof(big) - 1,
				      NGHTTP2_NV_FLAG_NO_INDEX };
	id = nghttp2_submit_request(c, NULL, nv, 8, NULL, NULL);
	ok = get(c, "/after", NULL);
	assert_int_equal(pump(c), 0);
	assert_true(cli.closed[id]);
	assert_int_equal(cli.status[id], 0);
	assert_int_not_equal(cli.close_code[id], NGHTTP2_NO_ERROR);
	assert_int_equal(cli.status[ok], 200);
	assert_int_equal(srv.n, 1);
	nghttp2_session_del(c);
}

/* A POST body larger than a DNS message: 413, never handed on. */
static void
test_body_bound(void **state)
{
	nghttp2_session *c = client_new();
	static uint8_t body[70000];
	int32_t id;

	(void)state;
	id = post(c, "/dns-query", body, sizeof(body));
	assert_int_equal(pump(c), 0);
	assert_int_equal(srv.n, 0);
	assert_int_equal(cli.status[id], 413);
	assert_int_equal(cli.body_len[id], 17);
	assert_memory_equal(cli.body[id], "Payload Too Large", 17);
	nghttp2_session_del(c);
}

/* A client that resets streams faster than the limit is sent away. */
static void
test_rapid_reset(void **state)
{
	nghttp2_session *c = client_new();
	int rc = 0;

	(void)state;
	for (int i = 0; i < 100 && rc == 0; i++) {
		int32_t id = get(c, "/dns-query?dns=AAAB", NULL);

		assert_int_equal(pump(c), 0);	/* the request goes out first */
		assert_int_equal(nghttp2_submit_rst_stream(c, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL), 0);
		rc = pump(c);
	}
	assert_int_equal(rc, -1);
	assert_true(cli.goaway);
	assert_int_equal(cli.goaway_code, NGHTTP2_ENHANCE_YOUR_CALM);
	assert_true(dlb_doh_h2_done(server));
	nghttp2_session_del(c);
}

/* SETTINGS frames whose ACKs are never read: nghttp2's flood bound ends it. */
static void
test_settings_flood(void **state)
{
	nghttp2_session *c = client_new();
	const uint8_t *data;
	ssize_t n;
	int rc = 0;

	(void)state;
	while ((n = nghttp2_session_mem_send(c, &data)) > 0)
		rc = dlb_doh_h2_feed(server, data, (size_t)n);
	for (int i = 0; i < 5000 && rc == 0; i++) {
		static const uint8_t settings[9] = { 0, 0, 0, 4, 0, 0, 0, 0, 0 };	/* empty SETTINGS */

		rc = dlb_doh_h2_feed(server, settings, sizeof(settings));
	}
	assert_int_equal(rc, -1);
	nghttp2_session_del(c);
}

/* Not HTTP/2 (an HTTP/1.1 request line): the connection ends. */
static void
test_bad_preface(void **state)
{
	static const char h1[] = "GET /dns-query HTTP/1.1\r\nHost: x\r\n\r\n";

	(void)state;
	assert_int_equal(dlb_doh_h2_feed(server, (const uint8_t *)h1, sizeof(h1) - 1), -1);
	assert_int_equal(srv.n, 0);
}

/* A stream reset by the client before its answer: the pipeline hears it is
 * gone, and a late answer is dropped. */
static void
test_gone(void **state)
{
	nghttp2_session *c = client_new();
	int32_t id;

	(void)state;
	id = get(c, "/dns-query?dns=AAAB", NULL);
	assert_int_equal(pump(c), 0);
	assert_int_equal(srv.n, 1);
	assert_int_equal(nghttp2_submit_rst_stream(c, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL), 0);
	assert_int_equal(pump(c), 0);
	assert_int_equal(srv.gone, 1);
	assert_int_equal(dlb_doh_h2_respond(server, srv.ids[0], 200, NULL, 0, NULL, 0), -1);
	assert_int_equal(dlb_doh_h2_streams(server), 0);
	nghttp2_session_del(c);
}

/* A session freed with streams still open, one delivered and unanswered
 * with its answer queued, one whose body never ended: their storage goes
 * with it (nghttp2_session_del calls no close callback; ASan's leak check
 * sees the rest), and nobody hears of them. */
static void
test_free_with_open_streams(void **state)
{
	nghttp2_session *c = client_new();
	static const nghttp2_nv nv[] = {
		{ (uint8_t *)":method", (uint8_t *)"POST", 7, 4, NGHTTP2_NV_FLAG_NONE },
		{ (uint8_t *)":path", (uint8_t *)"/dns-query", 5, 10, NGHTTP2_NV_FLAG_NONE },
		{ (uint8_t *)":scheme", (uint8_t *)"https", 7, 5, NGHTTP2_NV_FLAG_NONE },
		{ (uint8_t *)":authority", (uint8_t *)"dns.test", 10, 8, NGHTTP2_NV_FLAG_NONE },
	};

	(void)state;
	get(c, "/dns-query?dns=AAAB", NULL);
	get(c, "/dns-query?dns=AAAC", NULL);
	/* headers without END_STREAM: a POST whose body never comes */
	assert_true(nghttp2_submit_headers(c, NGHTTP2_FLAG_NONE, -1, NULL, nv, 4, NULL) > 0);
	assert_int_equal(pump(c), 0);
	assert_int_equal(srv.n, 2);
	assert_int_equal(dlb_doh_h2_respond(server, srv.ids[0], 200, NULL, 0,
					    (const uint8_t *)"x", 1), 0);
	assert_int_equal(dlb_doh_h2_streams(server), 3);
	dlb_doh_h2_free(server);
	server = NULL;
	assert_int_equal(srv.gone, 0);
	nghttp2_session_del(c);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_get_and_post, setup, teardown),
		cmocka_unit_test_setup_teardown(test_out_of_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_header_list_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(test_body_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rapid_reset, setup, teardown),
		cmocka_unit_test_setup_teardown(test_settings_flood, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_preface, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gone, setup, teardown),
		cmocka_unit_test_setup_teardown(test_free_with_open_streams, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
