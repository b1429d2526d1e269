/*
 * test_backend.c - the UDP backend transport (dnslb/upstream/backend.c) on its own:
 * a real worker's sockets towards a backend played by the test on
 * loopback, and a recording upstream sink in place of the pipeline. Each
 * slot handed over must end exactly once through the sink: a matched
 * answer, a timeout or a send error; answers that do not match leave the
 * slot waiting.
 */
#include "pkt.h"

#include <arpa/inet.h>
#include <ev.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dnslb/upstream/backend.h"
#include "dnslb/core/config.h"
#include "dnslb/core/rcu.h"
#include "dnslb/core/sink.h"
#include "dnslb/worker.h"
#include "worker_fx.h"

static struct {
	int answers, ends, batches;
	enum dlb_slot_end why;
	bool batched;
	uint16_t orig_id;		/* the client's, from the slot */
	size_t len;
	uint8_t pkt[512];
} rec;

static void
rec_answer(struct dlb_worker *w, struct dlb_slot *s, uint8_t *pkt, size_t len, bool batched)
{
	(void)w;
	rec.answers++;
	rec.batched = batched;
	rec.orig_id = s->client.orig_id;
	rec.len = len < sizeof(rec.pkt) ? len : sizeof(rec.pkt);
	memcpy(rec.pkt, pkt, rec.len);
}

static void
rec_xfr_part(struct dlb_worker *w, struct dlb_slot *s, uint8_t *pkt, size_t len, bool last)
{
	(void)w, (void)s, (void)pkt, (void)len, (void)last;
	fail_msg("no zone transfers over UDP");
}

static void
rec_end(struct dlb_worker *w, struct dlb_slot *s, enum dlb_slot_end why)
{
	(void)w, (void)s;
	rec.ends++;
	rec.why = why;
}

static void
rec_batch_end(struct dlb_worker *w)
{
	(void)w;
	rec.batches++;
}

static const struct dlb_upstream_sink rec_sink = {
	.answer = rec_answer,
	.xfr_part = rec_xfr_part,
	.end = rec_end,
	.batch_end = rec_batch_end,
};

struct fx {
	struct dlb_config *cfg;
	struct dlb_worker *w;
	int be_fd;			/* the backend: a UDP socket on loopback */
	int other_fd;			/* another address, for answers from elsewhere */
};

static int
udp_socket(struct sockaddr_in *sin)
{
	socklen_t sl = sizeof(*sin);
	int fd = socket(AF_INET, SOCK_DGRAM, 0);

	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)sin, sizeof(*sin)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)sin, &sl), 0);
	return fd;
}

static int
setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct sockaddr_in sin, other;

	f->be_fd = udp_socket(&sin);
	f->other_fd = udp_socket(&other);
	f->w = wfx_worker(&f->cfg, &sin, 500, 2);
	f->w->up_sink = &rec_sink;
	dlb_backend_local_start(f->w, 0);
	memset(&rec, 0, sizeof(rec));
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx *f = *state;

	wfx_free(f->w, f->cfg);
	close(f->be_fd);
	close(f->other_fd);
	free(f);
	return 0;
}

/* A slot for client ID @orig_id asking www.example.com A, and its query in @q. */
static uint32_t
slot_for(struct fx *f, uint16_t orig_id, struct pb *q)
{
	uint32_t idx = dlb_slot_alloc(&f->w->slots);
	struct dlb_slot *s = dlb_slot_get(&f->w->slots, idx);
	struct dlb_dnsmsg m;

	assert_int_not_equal(idx, DLB_SLOT_NONE);
	pb_hdr(q, orig_id, 0x0100, 1, 0, 0, 0);
	pb_question(q, "www.example.com", 1, 1);
	assert_int_equal(dlb_wire_parse_response_question(q->b, q->n, &m), DLB_OK);
	memset(&s->key, 0, sizeof(s->key));
	memcpy(s->key.qname_lc, m.qname_lc, m.qname_len);
	s->key.qname_len = m.qname_len;
	s->key.qtype = 1;
	s->key.qclass = 1;
	memset(&s->client, 0, sizeof(s->client));
	s->client.proto = DLB_CLIENT_UDP;
	s->client.orig_id = orig_id;
	return idx;
}

/* The backend reads one query: @return its ID; its sender in *@from. */
static uint16_t
be_read(struct fx *f, struct sockaddr_in *from)
{
	uint8_t buf[512];
	socklen_t fl = sizeof(*from);
	struct pollfd pfd = { .fd = f->be_fd, .events = POLLIN };
	ssize_t n;

	assert_int_equal(poll(&pfd, 1, 2000), 1);
	n = recvfrom(f->be_fd, buf, sizeof(buf), 0, (struct sockaddr *)from, &fl);
	assert_true(n >= 12);
	return dlb_rd16(buf);
}

/* Run the worker's loop until the sink heard @n more calls, or 2 s. */
static void
run_until(struct fx *f, int n)
{
	int want = rec.answers + rec.ends + n;

	for (int i = 0; i < 400 && rec.answers + rec.ends < want; i++) {
		ev_run(f->w->loop, EVRUN_NOWAIT);
		usleep(5000);
	}
}

/*
 * Hand a query of client ID @orig_id to the transport and let the backend
 * read it. @return the ID it got on the wire; its sender in *@from.
 */
static uint16_t
send_one(struct fx *f, uint16_t orig_id, struct sockaddr_in *from)
{
	struct pb q;
	uint32_t idx = slot_for(f, orig_id, &q);

	assert_int_equal(dlb_backend_send(f->w, f->cfg->backends[0], idx, ev_now(f->w->loop), q.b,
					  q.n, 0, false), 0);
	assert_int_equal(f->w->be_stats[0].outstanding, 1);
	dlb_backend_flush(f->w);
	return be_read(f, from);
}

/* Run the worker's loop for about @ms (what must not reach the sink). */
static void
run_for(struct fx *f, int ms)
{
	for (int i = 0; i < ms / 5; i++) {
		ev_run(f->w->loop, EVRUN_NOWAIT);
		usleep(5000);
	}
}

static void
reply(int fd, const struct sockaddr_in *to, uint16_t id, uint16_t flags, const char *name)
{
	struct pb a;

	pb_hdr(&a, id, flags, 1, 0, 0, 0);
	pb_question(&a, name, 1, 1);
	assert_int_equal(sendto(fd, a.b, a.n, 0, (const struct sockaddr *)to, sizeof(*to)),
			 (ssize_t)a.n);
}

/*
 * An answer reaches the sink once, batched, with the slot's client; what
 * does not match (another question, another sender, QR=0) leaves the slot
 * waiting, QR=0 counted as noncompliant. The slot is freed after the sink.
 */
static void
test_answer_matched_once(void **state)
{
	struct fx *f = *state;
	struct sockaddr_in from;
	uint16_t id = send_one(f, 0x4242, &from);

	reply(f->be_fd, &from, id, 0x8180, "www.example.org");		/* another question */
	reply(f->other_fd, &from, id, 0x8180, "www.example.com");	/* another sender */
	reply(f->be_fd, &from, id, 0x0100, "www.example.com");		/* QR=0 */
	run_for(f, 100);
	assert_int_equal(rec.answers + rec.ends, 0);
	assert_int_equal(f->w->stats.noncompliant_responses, 1);
	reply(f->be_fd, &from, id, 0x8180, "WWW.EXAMPLE.COM");
	run_until(f, 1);
	assert_int_equal(rec.answers, 1);
	assert_int_equal(rec.ends, 0);
	assert_true(rec.batched);
	assert_int_equal(rec.orig_id, 0x4242);
	assert_true(rec.batches >= 1);
	assert_int_equal(f->w->slots.used, 0);
	assert_int_equal(f->w->be_stats[0].outstanding, 0);
	/* a second copy of the answer finds nothing */
	reply(f->be_fd, &from, id, 0x8180, "www.example.com");
	run_for(f, 100);
	assert_int_equal(rec.answers, 1);
}

/* No answer by the deadline: one end(TIMEOUT), and the slot is freed. */
static void
test_timeout_ends_once(void **state)
{
	struct fx *f = *state;
	struct sockaddr_in from;
	uint16_t id = send_one(f, 7, &from);

	usleep(600000);		/* past the backend's 500 ms */
	ev_now_update(f->w->loop);
	run_until(f, 1);
	assert_int_equal(rec.ends, 1);
	assert_int_equal(rec.why, DLB_END_TIMEOUT);
	assert_int_equal(rec.answers, 0);
	assert_int_equal(f->w->slots.used, 0);
	/* the late answer is not delivered */
	reply(f->be_fd, &from, id, 0x8180, "www.example.com");
	run_for(f, 100);
	assert_int_equal(rec.answers + rec.ends, 1);
}

/*
 * setMaxUDPOutstanding (2 here): a third query is refused and its slot
 * stays the caller's; nothing in flight is overwritten.
 */
static void
test_full_refuses(void **state)
{
	struct fx *f = *state;
	struct pb q[3];
	uint32_t idx[3];

	for (int i = 0; i < 3; i++)
		idx[i] = slot_for(f, (uint16_t)i, &q[i]);
	assert_int_equal(dlb_backend_send(f->w, f->cfg->backends[0], idx[0], ev_now(f->w->loop),
					  q[0].b, q[0].n, 0, false), 0);
	assert_int_equal(dlb_backend_send(f->w, f->cfg->backends[0], idx[1], ev_now(f->w->loop),
					  q[1].b, q[1].n, 0, false), 0);
	assert_int_equal(dlb_backend_send(f->w, f->cfg->backends[0], idx[2], ev_now(f->w->loop),
					  q[2].b, q[2].n, 0, false), DLB_EFULL);
	assert_int_equal(f->w->be_stats[0].outstanding, 2);
	assert_int_equal(f->w->slots.used, 3);
	dlb_slot_free(&f->w->slots, idx[2]);
	dlb_backend_flush(f->w);
	usleep(600000);
	ev_now_update(f->w->loop);
	run_until(f, 2);
	assert_int_equal(rec.ends, 2);
	assert_int_equal(f->w->slots.used, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_answer_matched_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_timeout_ends_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_full_refuses, setup, teardown),
	};

	return WFX_RUN(tests);
}
