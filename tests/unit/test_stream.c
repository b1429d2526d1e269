/*
 * test_stream.c - byte streams and what is built on them:
 *
 *  - DNS framing (dnslb/core/dnsframe.c): a message split byte by byte,
 *    several in one read, a length over the bound, a zero length, a
 *    burst that grows the first buffer, a message bigger than it;
 *  - the plain TCP stream (dnslb/core/stream.c) over a socketpair: writes
 *    queued past what the socket takes and flushed in order, the queue's
 *    bound, close, a write error, a connect refused, a connect timeout;
 *  - the backends' TCP transport (dnslb/upstream/tcp_upstream.c) against a
 *    backend played by the test on loopback, with a recording upstream sink
 *    in place of the pipeline: answers (pipelined, out of order), a zone
 *    transfer's parts, a timeout, an answer to no query, a backend that
 *    closes, a backend that is not there.
 */
#include "pkt.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dnslb/core/config.h"
#include "dnslb/core/dnsframe.h"
#include "dnslb/core/inflight.h"
#include "dnslb/core/sink.h"
#include "dnslb/core/stream.h"
#include "dnslb/upstream/tcp_upstream.h"
#include "dnslb/worker.h"
#include "worker_fx.h"

/* ---- a stream over a socketpair ------------------------------------------------ */

static struct {
	int connected, readable, drained, failed;
	enum dlb_stream_fail why;
	int err;
} ev;

static bool
ev_connected(struct dlb_stream *s, void *ud)
{
	(void)s, (void)ud;
	ev.connected++;
	return true;
}

static void
ev_readable(struct dlb_stream *s, void *ud)
{
	(void)s, (void)ud;
	ev.readable++;
}

static bool
ev_drained(struct dlb_stream *s, void *ud)
{
	(void)s, (void)ud;
	ev.drained++;
	return true;
}

static void
ev_failed(struct dlb_stream *s, void *ud, enum dlb_stream_fail why, int err)
{
	(void)ud;
	ev.failed++;
	ev.why = why;
	ev.err = err;
	dlb_stream_close(s);
}

static const struct dlb_stream_cb ev_cb = {
	.connected = ev_connected,
	.readable = ev_readable,
	.drained = ev_drained,
	.failed = ev_failed,
};

struct pair {
	struct ev_loop *loop;
	struct dlb_stream s;
	int peer;			/* the other end, blocking */
};

static void
pair_open(struct pair *p, size_t out_max)
{
	int sv[2];

	memset(&ev, 0, sizeof(ev));
	p->loop = ev_loop_new(EVFLAG_AUTO);
	assert_non_null(p->loop);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
	p->peer = sv[1];
	dlb_stream_init(&p->s, p->loop, &dlb_stream_tcp_ops, &ev_cb, p, out_max);
	assert_int_equal(dlb_stream_attach(&p->s, sv[0]), 0);
}

static void
pair_close(struct pair *p)
{
	dlb_stream_close(&p->s);
	if (p->peer >= 0)
		close(p->peer);
	ev_loop_destroy(p->loop);
}

/* Run @loop until *@counter moves, or about 2 s. */
static void
run_until_moves(struct ev_loop *loop, const int *counter)
{
	int was = *counter;

	for (int i = 0; i < 400 && *counter == was; i++) {
		ev_run(loop, EVRUN_NOWAIT);
		usleep(5000);
	}
}

static void
peer_send(struct pair *p, const void *d, size_t n)
{
	assert_int_equal(send(p->peer, d, n, 0), (ssize_t)n);
}

/* ---- framing ------------------------------------------------------------------- */

/* A query as a frame: [length][ID, flags, one question]. */
static size_t
frame_query(uint8_t *out, uint16_t id, const char *name)
{
	struct pb q;

	q.n = 0;
	pb_hdr(&q, id, 0x0100, 1, 0, 0, 0);
	pb_question(&q, name, 1, 1);
	dlb_wr16(out, (uint16_t)q.n);
	memcpy(out + 2, q.b, q.n);
	return q.n + 2;
}

static void
test_frame_byte_by_byte(void **state)
{
	struct pair p;
	struct dlb_frame_rx rx;
	uint8_t f[600], *msg;
	size_t n = frame_query(f, 0x1234, "www.example.com"), len;

	(void)state;
	pair_open(&p, 65536);
	dlb_frame_rx_init(&rx, 0);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(dlb_frame_rx_next(&rx, &msg, &len), 0);
		assert_int_equal(dlb_frame_rx_partial(&rx), i > 0);
		peer_send(&p, f + i, 1);
		assert_int_equal(dlb_frame_rx_fill(&rx, &p.s), 1);
	}
	assert_int_equal(dlb_frame_rx_next(&rx, &msg, &len), 1);
	assert_int_equal(len, n - 2);
	assert_memory_equal(msg, f + 2, len);
	assert_int_equal(dlb_frame_rx_held(&rx), 0);
	assert_false(dlb_frame_rx_partial(&rx));
	dlb_frame_rx_free(&rx);
	pair_close(&p);
}

static void
test_frame_several_per_read(void **state)
{
	struct pair p;
	struct dlb_frame_rx rx;
	uint8_t f[2000], *msg;
	size_t n = 0, len;

	(void)state;
	pair_open(&p, 65536);
	dlb_frame_rx_init(&rx, 0);
	for (uint16_t id = 1; id <= 3; id++)
		n += frame_query(f + n, id, "a.example");
	f[n++] = 0;	/* and the first octet of a fourth */
	peer_send(&p, f, n);
	assert_int_equal(dlb_frame_rx_fill(&rx, &p.s), (ssize_t)n);
	for (uint16_t id = 1; id <= 3; id++) {
		assert_int_equal(dlb_frame_rx_next(&rx, &msg, &len), 1);
		assert_int_equal(dlb_rd16(msg), id);
	}
	assert_int_equal(dlb_frame_rx_next(&rx, &msg, &len), 0);
	assert_true(dlb_frame_rx_partial(&rx));
	assert_int_equal(dlb_frame_rx_peek_len(&rx), -1);
	dlb_frame_rx_free(&rx);
	pair_close(&p);
}

static void
test_frame_oversized(void **state)
{
	struct pair p;
	struct dlb_frame_rx rx;
	uint8_t f[2] = { 0x01, 0x00 }, *msg;	/* 256 bytes announced */
	size_t len;

	(void)state;
	pair_open(&p, 65536);
	dlb_frame_rx_init(&rx, 200);
	peer_send(&p, f, 2);
	assert_int_equal(dlb_frame_rx_fill(&rx, &p.s), 2);
	assert_int_equal(dlb_frame_rx_peek_len(&rx), 256);
	assert_int_equal(dlb_frame_rx_next(&rx, &msg, &len), DLB_ESPACE);
	dlb_frame_rx_free(&rx);
	pair_close(&p);
}

static void
test_frame_zero_length(void **state)
{
	struct pair p;
	struct dlb_frame_rx rx;
	uint8_t f[600], *msg;
	size_t n, len;

	(void)state;
	pair_open(&p, 65536);
	dlb_frame_rx_init(&rx, 0);
	f[0] = f[1] = 0;
	n = 2 + frame_query(f + 2, 7, "b.example");
	peer_send(&p, f, n);
	assert_int_equal(dlb_frame_rx_fill(&rx, &p.s), (ssize_t)n);
	assert_int_equal(dlb_frame_rx_peek_len(&rx), 0);
	assert_int_equal(dlb_frame_rx_next(&rx, &msg, &len), 1);
	assert_int_equal(len, 0);
	assert_int_equal(dlb_frame_rx_next(&rx, &msg, &len), 1);
	assert_int_equal(dlb_rd16(msg), 7);
	dlb_frame_rx_free(&rx);
	pair_close(&p);
}

/*
 * A connection that sends a query at a time keeps the first buffer; a burst
 * that fills it doubles it before each next read, up to DLB_FRAME_RX_BURST,
 * and every frame of the burst comes out whole and in order.
 */
static void
test_frame_burst_grows(void **state)
{
	struct pair p;
	struct dlb_frame_rx rx;
	uint8_t f[8192], *msg;
	size_t n = 0, len;
	uint16_t next = 1;
	int reads = 0;

	(void)state;
	pair_open(&p, 65536);
	dlb_frame_rx_init(&rx, 0);
	n = frame_query(f, next, "a.example");
	peer_send(&p, f, n);
	assert_int_equal(dlb_frame_rx_fill(&rx, &p.s), (ssize_t)n);
	assert_int_equal(dlb_frame_rx_next(&rx, &msg, &len), 1);
	assert_int_equal(dlb_rd16(msg), next++);
	assert_int_equal(rx.cap, DLB_FRAME_RX_INITIAL);	/* one query: the first size */
	n = 0;
	for (uint16_t id = 2; n + 64 < sizeof(f); id++)
		n += frame_query(f + n, id, "a.example");
	peer_send(&p, f, n);
	for (size_t got = 0; got < n; reads++) {
		ssize_t r = dlb_frame_rx_fill(&rx, &p.s);

		assert_true(r > 0);
		got += (size_t)r;
		while (dlb_frame_rx_next(&rx, &msg, &len) == 1)
			assert_int_equal(dlb_rd16(msg), next++);
	}
	assert_int_equal(rx.cap, DLB_FRAME_RX_BURST);
	assert_true(reads < (int)(n / DLB_FRAME_RX_INITIAL));	/* fewer reads than at 512 */
	assert_false(dlb_frame_rx_partial(&rx));
	dlb_frame_rx_free(&rx);
	pair_close(&p);
}

/* A message longer than the first buffer: the buffer grows to the frame's need. */
static void
test_frame_grows(void **state)
{
	struct pair p;
	struct dlb_frame_rx rx;
	size_t big = 60000, got = 0, len;
	uint8_t *f = malloc(big + 2), *msg = NULL;
	int rc = 0;

	(void)state;
	pair_open(&p, 65536);
	dlb_frame_rx_init(&rx, 0);
	dlb_wr16(f, (uint16_t)big);
	for (size_t i = 0; i < big; i++)
		f[2 + i] = (uint8_t)i;
	for (size_t off = 0; off < big + 2; off += 1000)
		peer_send(&p, f + off, big + 2 - off < 1000 ? big + 2 - off : 1000);
	while (rc == 0) {
		ssize_t n = dlb_frame_rx_fill(&rx, &p.s);

		assert_true(n > 0);
		got += (size_t)n;
		rc = dlb_frame_rx_next(&rx, &msg, &len);
	}
	assert_int_equal(rc, 1);
	assert_int_equal(got, big + 2);
	assert_int_equal(len, big);
	assert_memory_equal(msg, f + 2, big);
	assert_true(rx.cap >= big + 2);
	dlb_frame_rx_free(&rx);
	free(f);
	pair_close(&p);
}

/* ---- the plain stream -------------------------------------------------------------- */

/* Writes the socket cannot take wait in the queue, bounded, and go out in order. */
static void
test_stream_write_queue(void **state)
{
	struct pair p;
	uint8_t chunk[4096], buf[65536];
	size_t sent = 0, got = 0;
	int sndbuf = 4096, rc = 0;

	(void)state;
	pair_open(&p, 64 * 1024);
	setsockopt(p.s.fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	while (rc == 0) {
		for (size_t i = 0; i < sizeof(chunk); i++)
			chunk[i] = (uint8_t)(sent + i);
		rc = dlb_frame_send(&p.s, NULL, 0, chunk, sizeof(chunk) - 2);
		if (rc == 0)
			sent += sizeof(chunk);
	}
	/* the queue refused what would take it past its bound, and kept the rest */
	assert_int_equal(rc, DLB_ESPACE);
	assert_true(dlb_stream_pending(&p.s) > 0);
	assert_true(dlb_stream_pending(&p.s) <= 64 * 1024);
	assert_int_equal(ev.drained, 0);
	/* the peer reads: the queue drains, every byte in its place */
	while (got < sent) {
		ssize_t n = recv(p.peer, buf, sizeof(buf), MSG_DONTWAIT);

		if (n > 0) {
			for (ssize_t i = 0; i < n; i++) {
				/* each frame: its length (0x0ffe), then bytes counting from its offset */
				size_t at = got + (size_t)i, k = at % sizeof(chunk);

				assert_int_equal(buf[i], k == 0 ? 0x0f : k == 1 ? 0xfe : (uint8_t)(at - 2));
			}
			got += (size_t)n;
		}
		ev_run(p.loop, EVRUN_NOWAIT);
	}
	if (ev.drained == 0)
		run_until_moves(p.loop, &ev.drained);
	assert_int_equal(ev.drained, 1);
	assert_int_equal(dlb_stream_pending(&p.s), 0);
	assert_int_equal(ev.failed, 0);
	pair_close(&p);
}

/* Close: the peer sees the end; the peer's close: a read of 0. */
static void
test_stream_close(void **state)
{
	struct pair p;
	uint8_t b[16];

	(void)state;
	pair_open(&p, 1024);
	close(p.peer);
	p.peer = -1;
	run_until_moves(p.loop, &ev.readable);
	assert_int_equal(ev.readable, 1);
	assert_int_equal(dlb_stream_read(&p.s, b, sizeof(b)), 0);
	dlb_stream_close(&p.s);
	dlb_stream_close(&p.s);	/* idempotent */
	assert_int_equal(p.s.fd, -1);
	pair_close(&p);

	pair_open(&p, 1024);
	dlb_stream_close(&p.s);
	assert_int_equal(recv(p.peer, b, sizeof(b), 0), 0);
	pair_close(&p);
}

/* A write to a peer that went away: at once, or from the queue through ->failed. */
static void
test_stream_write_error(void **state)
{
	struct pair p;
	uint8_t chunk[4096] = { 0 };
	int sndbuf = 4096;

	(void)state;
	pair_open(&p, 1 << 20);
	close(p.peer);
	p.peer = -1;
	assert_int_equal(dlb_frame_send(&p.s, NULL, 0, chunk, 100), -EPIPE);
	pair_close(&p);

	pair_open(&p, 1 << 20);
	setsockopt(p.s.fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	while (dlb_stream_pending(&p.s) == 0)
		assert_int_equal(dlb_frame_send(&p.s, NULL, 0, chunk, sizeof(chunk) - 2), 0);
	close(p.peer);
	p.peer = -1;
	run_until_moves(p.loop, &ev.failed);
	assert_int_equal(ev.failed, 1);
	assert_int_equal(ev.why, DLB_STREAM_WRITE);
	assert_int_equal(ev.err, EPIPE);
	pair_close(&p);
}

/* A TCP listener on loopback (@backlog), its address in *@sin. */
static int
tcp_listener(struct sockaddr_in *sin, int backlog)
{
	socklen_t sl = sizeof(*sin);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)sin, sizeof(*sin)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)sin, &sl), 0);
	assert_int_equal(listen(fd, backlog), 0);
	return fd;
}

/* Connect: up (queued bytes follow), refused, or not answered in time. */
static void
test_stream_connect(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct dlb_stream s;
	struct dlb_stream_target t;
	struct sockaddr_in sin;
	int lfd = tcp_listener(&sin, 16), afd, fill[8];
	uint8_t b[64];

	(void)state;
	memset(&ev, 0, sizeof(ev));
	memset(&t, 0, sizeof(t));
	t.addr = (struct sockaddr *)&sin;
	t.addrlen = sizeof(sin);
	dlb_stream_init(&s, loop, &dlb_stream_tcp_ops, &ev_cb, NULL, 1024);
	assert_int_equal(dlb_stream_connect(&s, &t, 5), 0);
	assert_int_equal(dlb_frame_send(&s, NULL, 0, (const uint8_t *)"hello", 5), 0);
	run_until_moves(loop, &ev.connected);
	assert_int_equal(ev.connected, 1);
	afd = accept(lfd, NULL, NULL);
	assert_true(afd >= 0);
	assert_int_equal(recv(afd, b, 7, MSG_WAITALL), 7);
	assert_memory_equal(b, "\0\5hello", 7);
	dlb_stream_close(&s);
	close(afd);
	close(lfd);

	/* nobody listens there now */
	assert_int_equal(dlb_stream_connect(&s, &t, 5), 0);
	run_until_moves(loop, &ev.failed);
	assert_int_equal(ev.failed, 1);
	assert_int_equal(ev.why, DLB_STREAM_CONNECT);
	assert_int_equal(ev.err, ECONNREFUSED);

	/* a listener whose queue is full drops the SYN: the connect times out */
	lfd = tcp_listener(&sin, 0);
	for (int i = 0; i < 8; i++) {
		fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		connect(fill[i], (struct sockaddr *)&sin, sizeof(sin));
	}
	usleep(50000);
	assert_int_equal(dlb_stream_connect(&s, &t, 0.3), 0);
	run_until_moves(loop, &ev.failed);
	assert_int_equal(ev.failed, 2);
	assert_int_equal(ev.why, DLB_STREAM_CONNECT_TIMEOUT);
	for (int i = 0; i < 8; i++)
		close(fill[i]);
	close(lfd);
	ev_loop_destroy(loop);
}

/* ---- the backends' TCP transport ----------------------------------------------------- */

static struct {
	int answers, parts, lasts, ends;
	enum dlb_slot_end why;
	uint16_t orig_id;		/* the client's, from the slot */
	uint16_t ans_id;		/* the answer's ID as handed over */
} rec;

static void
rec_answer(struct dlb_worker *w, struct dlb_slot *s, uint8_t *pkt, size_t len, bool batched)
{
	(void)w, (void)len;
	assert_false(batched);
	rec.answers++;
	rec.orig_id = s->client.orig_id;
	rec.ans_id = dlb_rd16(pkt);
}

static void
rec_xfr_part(struct dlb_worker *w, struct dlb_slot *s, uint8_t *pkt, size_t len, bool last)
{
	(void)w, (void)s, (void)len;
	rec.parts++;
	rec.lasts += last;
	rec.ans_id = dlb_rd16(pkt);
}

static void
rec_end(struct dlb_worker *w, struct dlb_slot *s, enum dlb_slot_end why)
{
	(void)w;
	rec.ends++;
	rec.why = why;
	rec.orig_id = s->client.orig_id;
}

static void
rec_batch_end(struct dlb_worker *w)
{
	(void)w;
}

static const struct dlb_upstream_sink rec_sink = {
	.answer = rec_answer,
	.xfr_part = rec_xfr_part,
	.end = rec_end,
	.batch_end = rec_batch_end,
};

struct ufx {
	struct dlb_config *cfg;
	struct dlb_worker *w;
	int lfd;			/* the backend's listener */
	int be;				/* the backend's side of the connection */
};

static int
up_setup(void **state)
{
	struct ufx *f = calloc(1, sizeof(*f));
	struct sockaddr_in sin;

	f->lfd = tcp_listener(&sin, 16);
	f->be = -1;
	f->w = wfx_worker(&f->cfg, &sin, 0, 0);
	f->w->up_sink = &rec_sink;
	f->cfg->backends[0]->tcp_recv_timeout = 1;
	f->cfg->backends[0]->max_in_flight = 4;
	f->cfg->backends[0]->retries = 1;
	memset(&rec, 0, sizeof(rec));
	*state = f;
	return 0;
}

static int
up_teardown(void **state)
{
	struct ufx *f = *state;

	dlb_tcp_up_close_all(f->w);
	wfx_free(f->w, f->cfg);
	if (f->be >= 0)
		close(f->be);
	close(f->lfd);
	free(f);
	return 0;
}

static int
rec_calls(void)
{
	return rec.answers + rec.parts + rec.ends;
}

/* Run the worker's loop until the sink heard @n more calls, or 3 s. */
static void
up_run_until(struct ufx *f, int n)
{
	int want = rec_calls() + n;

	for (int i = 0; i < 600 && rec_calls() < want; i++) {
		ev_run(f->w->loop, EVRUN_NOWAIT);
		usleep(5000);
	}
}

/* Hand a query for www.example.com of client ID @orig_id to the transport. */
static void
up_send(struct ufx *f, uint16_t orig_id, uint16_t qtype, bool xfr)
{
	struct dlb_slot *s = calloc(1, sizeof(*s));
	struct pb q;
	struct dlb_dnsmsg m;

	q.n = 0;
	pb_hdr(&q, orig_id, 0x0100, 1, 0, 0, 0);
	pb_question(&q, "www.example.com", qtype, 1);
	assert_int_equal(dlb_wire_parse_response_question(q.b, q.n, &m), DLB_OK);
	memcpy(s->key.qname_lc, m.qname_lc, m.qname_len);
	s->key.qname_len = m.qname_len;
	s->key.qtype = qtype;
	s->key.qclass = 1;
	s->client.proto = DLB_CLIENT_TCP;
	s->client.orig_id = orig_id;
	dlb_tcp_up_send(f->w, f->cfg->backends[0], s, NULL, 0, q.b, q.n, xfr);
	free(s);	/* copied */
}

/* The backend reads one framed query (accepting the connection first if need be). @return its ID. */
static uint16_t
be_read(struct ufx *f, struct pb *q)
{
	uint8_t hdr[2];

	for (int i = 0; i < 400 && f->be < 0; i++) {
		struct pollfd pfd = { .fd = f->lfd, .events = POLLIN };

		ev_run(f->w->loop, EVRUN_NOWAIT);
		if (poll(&pfd, 1, 5) == 1)
			f->be = accept(f->lfd, NULL, NULL);
	}
	assert_true(f->be >= 0);
	for (int i = 0; i < 400; i++) {
		struct pollfd pfd = { .fd = f->be, .events = POLLIN };

		ev_run(f->w->loop, EVRUN_NOWAIT);
		if (poll(&pfd, 1, 5) == 1)
			break;
	}
	assert_int_equal(recv(f->be, hdr, 2, MSG_WAITALL), 2);
	q->n = dlb_rd16(hdr);
	assert_int_equal(recv(f->be, q->b, q->n, MSG_WAITALL), (ssize_t)q->n);
	return dlb_rd16(q->b);
}

/* The backend answers @id for www.example.com (@qtype) with @an records built by @body. */
static void
be_answer(struct ufx *f, uint16_t id, uint16_t qtype, const struct pb *body, uint16_t an)
{
	struct pb a;
	uint8_t hdr[2];

	a.n = 0;
	pb_hdr(&a, id, 0x8180, 1, an, 0, 0);
	pb_question(&a, "www.example.com", qtype, 1);
	if (body != NULL)
		pb_bytes(&a, body->b, body->n);
	dlb_wr16(hdr, (uint16_t)a.n);
	assert_int_equal(send(f->be, hdr, 2, 0), 2);
	assert_int_equal(send(f->be, a.b, a.n, 0), (ssize_t)a.n);
}

/* Two pipelined queries answered in reverse order: two answers, each its own. */
static void
test_up_answers(void **state)
{
	struct ufx *f = *state;
	struct pb q;
	uint16_t id1, id2;

	up_send(f, 0x1111, 1, false);
	up_send(f, 0x2222, 1, false);
	id1 = be_read(f, &q);
	id2 = be_read(f, &q);
	assert_int_not_equal(id1, id2);
	assert_int_equal(f->w->be_stats[0].outstanding, 2);
	be_answer(f, id2, 1, NULL, 0);
	up_run_until(f, 1);
	assert_int_equal(rec.answers, 1);
	assert_int_equal(rec.orig_id, 0x2222);
	be_answer(f, id1, 1, NULL, 0);
	up_run_until(f, 1);
	assert_int_equal(rec.answers, 2);
	assert_int_equal(rec.orig_id, 0x1111);
	assert_int_equal(f->w->be_stats[0].outstanding, 0);
	assert_int_equal(f->w->be_stats[0].tcp_new, 1);
	assert_int_equal(f->w->be_stats[0].tcp_reused, 1);
	assert_int_equal(rec.ends, 0);
}

/* One SOA record (serial @serial) owned by the question's name. */
static void
soa_rr(struct pb *b, uint32_t serial)
{
	uint8_t rd[22] = { 0 };

	pb_ptr(b, DLB_DNS_HDR);
	rd[2] = (uint8_t)(serial >> 24);
	rd[3] = (uint8_t)(serial >> 16);
	rd[4] = (uint8_t)(serial >> 8);
	rd[5] = (uint8_t)serial;
	pb_rr_tail(b, DLB_TYPE_SOA, 1, 60, rd, sizeof(rd));
}

/* A zone transfer: SOA, A, SOA: two parts, then the last one, the client's ID back. */
static void
test_up_xfr(void **state)
{
	struct ufx *f = *state;
	struct pb q, b;
	uint8_t a[4] = { 192, 0, 2, 1 };
	uint16_t id;

	up_send(f, 0x3333, DLB_TYPE_AXFR, true);
	id = be_read(f, &q);
	b.n = 0;
	soa_rr(&b, 42);
	be_answer(f, id, DLB_TYPE_AXFR, &b, 1);
	b.n = 0;
	pb_ptr(&b, DLB_DNS_HDR);
	pb_rr_tail(&b, 1, 1, 60, a, 4);
	be_answer(f, id, DLB_TYPE_AXFR, &b, 1);
	up_run_until(f, 2);
	assert_int_equal(rec.parts, 2);
	assert_int_equal(rec.lasts, 0);
	assert_int_equal(rec.ans_id, 0x3333);
	b.n = 0;
	soa_rr(&b, 42);
	be_answer(f, id, DLB_TYPE_AXFR, &b, 1);
	up_run_until(f, 1);
	assert_int_equal(rec.parts, 3);
	assert_int_equal(rec.lasts, 1);
	assert_int_equal(rec.answers + rec.ends, 0);
	assert_int_equal(f->w->be_stats[0].outstanding, 0);
}

/* A backend that sits on a query: the query ends, timed out. */
static void
test_up_timeout(void **state)
{
	struct ufx *f = *state;
	struct pb q;

	up_send(f, 0x4444, 1, false);
	be_read(f, &q);
	up_run_until(f, 1);	/* tcp_recv_timeout is 1 s */
	assert_int_equal(rec.ends, 1);
	assert_int_equal(rec.why, DLB_END_TIMEOUT);
	assert_int_equal(rec.orig_id, 0x4444);
	assert_int_equal(f->w->be_stats[0].tcp_read_timeouts, 1);
	assert_int_equal(f->w->be_stats[0].outstanding, 0);
}

/* An answer to no query: the connection is out of step, its queries end closed. */
static void
test_up_out_of_step(void **state)
{
	struct ufx *f = *state;
	struct pb q;
	uint16_t id;

	up_send(f, 0x5555, 1, false);
	id = be_read(f, &q);
	be_answer(f, (uint16_t)(id + 1), 1, NULL, 0);
	up_run_until(f, 1);
	assert_int_equal(rec.ends, 1);
	assert_int_equal(rec.why, DLB_END_CLOSED);
	assert_int_equal(rec.answers, 0);
}

/* The backend closes with the query pending, and retries are spent: it gave up. */
static void
test_up_backend_closes(void **state)
{
	struct ufx *f = *state;
	struct pb q;

	up_send(f, 0x6666, 1, false);
	be_read(f, &q);
	close(f->be);
	f->be = -1;
	up_run_until(f, 1);
	assert_int_equal(rec.ends, 1);
	assert_int_equal(rec.why, DLB_END_GAVE_UP);
	assert_int_equal(f->w->be_stats[0].tcp_died_reading, 1);
	assert_int_equal(f->w->be_stats[0].tcp_gave_up, 1);
}

/* No backend there: the connect fails, the query gives up. */
static void
test_up_refused(void **state)
{
	struct ufx *f = *state;

	close(f->lfd);
	f->lfd = socket(AF_INET, SOCK_STREAM, 0);	/* for teardown */
	up_send(f, 0x7777, 1, false);
	up_run_until(f, 1);
	assert_int_equal(rec.ends, 1);
	assert_true(rec.why == DLB_END_GAVE_UP || rec.why == DLB_END_NO_MEMORY);
	assert_int_equal(f->w->be_stats[0].outstanding, 0);
}

/* Shutdown with a query pending: it ends, closed. */
static void
test_up_close_all(void **state)
{
	struct ufx *f = *state;
	struct pb q;

	up_send(f, 0x8888, 1, false);
	be_read(f, &q);
	dlb_tcp_up_close_all(f->w);
	assert_int_equal(rec.ends, 1);
	assert_int_equal(rec.why, DLB_END_CLOSED);
	assert_int_equal(f->w->tcp_up, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_frame_byte_by_byte),
		cmocka_unit_test(test_frame_several_per_read),
		cmocka_unit_test(test_frame_oversized),
		cmocka_unit_test(test_frame_zero_length),
		cmocka_unit_test(test_frame_burst_grows),
		cmocka_unit_test(test_frame_grows),
		cmocka_unit_test(test_stream_write_queue),
		cmocka_unit_test(test_stream_close),
		cmocka_unit_test(test_stream_write_error),
		cmocka_unit_test(test_stream_connect),
		cmocka_unit_test_setup_teardown(test_up_answers, up_setup, up_teardown),
		cmocka_unit_test_setup_teardown(test_up_xfr, up_setup, up_teardown),
		cmocka_unit_test_setup_teardown(test_up_timeout, up_setup, up_teardown),
		cmocka_unit_test_setup_teardown(test_up_out_of_step, up_setup, up_teardown),
		cmocka_unit_test_setup_teardown(test_up_backend_closes, up_setup, up_teardown),
		cmocka_unit_test_setup_teardown(test_up_refused, up_setup, up_teardown),
		cmocka_unit_test_setup_teardown(test_up_close_all, up_setup, up_teardown),
	};

	return WFX_RUN(tests);
}
