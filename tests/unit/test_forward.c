/*
 * test_forward.c - the pipeline's end of the one-way path (dnslb/pipeline/forward.c):
 * a real worker with recording client sinks in place of the frontends, fed
 * through its upstream sink as a transport would feed it. Each slot's end
 * must make the one reply decision: the answer to the right client sink,
 * the client's ID restored, batched or not, delayed, or no answer with the
 * counters dnsdist keeps.
 */
#include "pkt.h"

#include <arpa/inet.h>
#include <ev.h>
#include <stdlib.h>
#include <unistd.h>

#include "dnslb/core/config.h"
#include "dnslb/pipeline/forward.h"
#include "dnslb/core/rcu.h"
#include "dnslb/core/sink.h"
#include "dnslb/worker.h"
#include "worker_fx.h"

static struct {
	int replies, no_answers, parts, timed_out;
	int proto;			/* of the last call */
	enum dlb_slot_end why;
	bool batched;
	size_t len;
	uint8_t pkt[512];
} rec;

static void
rec_reply(struct dlb_worker *w, const struct dlb_client *c, uint8_t *pkt, size_t len, bool batched,
	  bool part)
{
	(void)w;
	if (part)
		rec.parts++;
	else
		rec.replies++;
	rec.proto = c->proto;
	rec.batched = batched;
	rec.len = len < sizeof(rec.pkt) ? len : sizeof(rec.pkt);
	memcpy(rec.pkt, pkt, rec.len);
}

static void
rec_no_answer(struct dlb_worker *w, const struct dlb_client *c, enum dlb_slot_end why)
{
	(void)w;
	rec.no_answers++;
	rec.proto = c->proto;
	rec.why = why;
}

static void
rec_flush(struct dlb_worker *w)
{
	(void)w;
}

static void
rec_timed_out(struct dlb_worker *w, const struct dlb_client *c)
{
	(void)w, (void)c;
	rec.timed_out++;
}

static const struct dlb_client_sink rec_sink = {
	.reply = rec_reply,
	.no_answer = rec_no_answer,
	.flush = rec_flush,
	.timed_out = rec_timed_out,
};

struct fx {
	struct dlb_config *cfg;
	struct dlb_worker *w;
	struct dlb_slot s;
};

static int
setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(53) };

	inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
	f->w = wfx_worker(&f->cfg, &sin, 0, 0);
	f->w->client_sink[DLB_CLIENT_UDP] = &rec_sink;
	f->w->client_sink[DLB_CLIENT_TCP] = &rec_sink;
	memset(&rec, 0, sizeof(rec));
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx *f = *state;

	wfx_free(f->w, f->cfg);
	free(f);
	return 0;
}

/* The slot of client ID @orig_id (RD set) asking "www.example.com" A over @proto. */
static struct dlb_slot *
slot(struct fx *f, int proto, uint16_t orig_id)
{
	static const uint8_t qname[] = "\3www\7example\3com";
	struct dlb_slot *s = &f->s;

	memset(s, 0, sizeof(*s));
	memcpy(s->key.qname_lc, qname, sizeof(qname));
	memcpy(s->qname_wire, qname, sizeof(qname));
	s->key.qname_len = sizeof(qname);
	s->key.qtype = 1;
	s->key.qclass = 1;
	s->be_index = 0;
	s->tempfail_ttl = -1;
	s->client.proto = (uint8_t)proto;
	s->client.orig_id = orig_id;
	s->client.orig_flags = 0x0100;
	s->client.peer.sin.sin_family = AF_INET;
	s->client.t_start = ev_now(f->w->loop);
	return s;
}

/* A backend's answer to the slot's question, under wire ID 0x9999, RD clear. */
static size_t
backend_answer(struct pb *b, uint16_t rcode)
{
	static const uint8_t a[4] = { 192, 0, 2, 1 };

	pb_hdr(b, 0x9999, (uint16_t)(0x8080 | rcode), 1, 1, 0, 0);
	pb_question(b, "www.example.com", 1, 1);
	pb_ptr(b, 12);
	pb_rr_tail(b, 1, 1, 60, a, 4);
	return b->n;
}

/* A UDP answer goes to the UDP sink, batched, the client's ID and RD restored. */
static void
test_answer_to_udp_client(void **state)
{
	struct fx *f = *state;
	struct pb b;
	size_t n = backend_answer(&b, 0);

	f->w->up_sink->answer(f->w, slot(f, DLB_CLIENT_UDP, 0x1234), b.b, n, true);
	assert_int_equal(rec.replies, 1);
	assert_int_equal(rec.proto, DLB_CLIENT_UDP);
	assert_true(rec.batched);
	assert_int_equal(rec.len, n);
	assert_int_equal(dlb_rd16(rec.pkt), 0x1234);
	assert_int_equal(dlb_rd16(rec.pkt + 2), 0x8180);
	assert_int_equal(f->w->stats.responses, 1);
	assert_int_equal(f->w->be_stats[0].responses, 1);
}

/* The same for a TCP client; a zone transfer's parts pass through as parts. */
static void
test_answer_to_tcp_client(void **state)
{
	struct fx *f = *state;
	struct pb b;
	size_t n = backend_answer(&b, 0);

	f->w->up_sink->xfr_part(f->w, slot(f, DLB_CLIENT_TCP, 7), b.b, n, false);
	assert_int_equal(rec.parts, 1);
	f->w->up_sink->answer(f->w, slot(f, DLB_CLIENT_TCP, 7), b.b, n, false);
	assert_int_equal(rec.replies, 1);
	assert_int_equal(rec.proto, DLB_CLIENT_TCP);
	assert_int_equal(dlb_rd16(rec.pkt), 7);
}

/* A prefetch's answer only refreshes the cache: no client sink hears of it. */
static void
test_internal_is_silent(void **state)
{
	struct fx *f = *state;
	struct pb b;
	size_t n = backend_answer(&b, 0);

	f->w->up_sink->answer(f->w, slot(f, DLB_CLIENT_INTERNAL, 1), b.b, n, true);
	f->w->up_sink->end(f->w, slot(f, DLB_CLIENT_INTERNAL, 1), DLB_END_TIMEOUT);
	assert_int_equal(rec.replies + rec.no_answers + rec.parts, 0);
	assert_int_equal(f->w->stats.responses, 0);
	assert_int_equal(f->w->stats.downstream_timeouts, 0);
	assert_int_equal(f->w->be_stats[0].drops, 1);
}

/*
 * A timeout: a UDP client's counts in downstream-timeouts and the server's
 * drops; a TCP client's only on its frontend (the sink), as dnsdist counts.
 */
static void
test_timeouts(void **state)
{
	struct fx *f = *state;

	f->w->up_sink->end(f->w, slot(f, DLB_CLIENT_UDP, 1), DLB_END_TIMEOUT);
	assert_int_equal(rec.no_answers, 1);
	assert_int_equal(rec.why, DLB_END_TIMEOUT);
	assert_int_equal(f->w->stats.downstream_timeouts, 1);
	assert_int_equal(f->w->be_stats[0].drops, 1);
	f->w->up_sink->end(f->w, slot(f, DLB_CLIENT_TCP, 1), DLB_END_TIMEOUT);
	assert_int_equal(rec.no_answers, 2);
	assert_int_equal(rec.proto, DLB_CLIENT_TCP);
	assert_int_equal(f->w->stats.downstream_timeouts, 1);
	assert_int_equal(f->w->be_stats[0].drops, 1);
	assert_int_equal(rec.replies, 0);
	/* each client sink heard of both timeouts (a stream counts them on its frontend) */
	assert_int_equal(rec.timed_out, 2);
	/* a connection not made in time: no answer, not a timeout of the query itself */
	f->w->up_sink->end(f->w, slot(f, DLB_CLIENT_TCP, 1), DLB_END_CONNECT_TIMEOUT);
	assert_int_equal(rec.no_answers, 3);
	assert_int_equal(rec.why, DLB_END_CONNECT_TIMEOUT);
	assert_int_equal(rec.timed_out, 2);
	assert_int_equal(f->w->be_stats[0].drops, 1);
}

/* A stream out of memory: its client gets a SERVFAIL for its question. */
static void
test_no_memory_servfail(void **state)
{
	struct fx *f = *state;
	struct dlb_dnsmsg m;

	f->w->up_sink->end(f->w, slot(f, DLB_CLIENT_TCP, 0x55aa), DLB_END_NO_MEMORY);
	assert_int_equal(rec.replies, 1);
	assert_int_equal(dlb_rd16(rec.pkt), 0x55aa);
	assert_int_equal(DLB_RCODE(rec.pkt[3]), DLB_RCODE_SERVFAIL);
	assert_int_equal(dlb_wire_parse_response_question(rec.pkt, rec.len, &m), DLB_OK);
	assert_int_equal(m.qtype, 1);
	assert_int_equal(f->w->stats.self_answered, 1);
}

/* DelayAction's delay: held, then sent (not batched) when the timer fires. */
static void
test_delayed_reply(void **state)
{
	struct fx *f = *state;
	struct dlb_slot *s = slot(f, DLB_CLIENT_UDP, 0x0d0d);
	struct pb b;
	size_t n = backend_answer(&b, 0);

	s->delay_ms = 30;
	f->w->up_sink->answer(f->w, s, b.b, n, true);
	assert_int_equal(rec.replies, 0);
	assert_int_equal(f->w->ndelayed, 1);
	for (int i = 0; i < 200 && rec.replies == 0; i++) {
		usleep(5000);
		ev_run(f->w->loop, EVRUN_NOWAIT);
	}
	assert_int_equal(rec.replies, 1);
	assert_false(rec.batched);
	assert_int_equal(dlb_rd16(rec.pkt), 0x0d0d);
	assert_int_equal(f->w->ndelayed, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_answer_to_udp_client, setup, teardown),
		cmocka_unit_test_setup_teardown(test_answer_to_tcp_client, setup, teardown),
		cmocka_unit_test_setup_teardown(test_internal_is_silent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_timeouts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_memory_servfail, setup, teardown),
		cmocka_unit_test_setup_teardown(test_delayed_reply, setup, teardown),
	};

	return WFX_RUN(tests);
}
