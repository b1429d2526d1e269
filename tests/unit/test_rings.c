/*
 * test_rings.c - the ring buffers: wrap-around, what a query and its answers
 * record (names too long to keep whole, timeouts, cache hits), the top-N
 * readers over several workers, and a writer racing a reader (run under
 * ThreadSanitizer by tests/run-all): a reader never sees a torn entry.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <ev.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/core/daemon.h"
#include "dnslb/core/inflight.h"
#include "dnslb/pipeline/query.h"
#include "dnslb/pipeline/rings.h"
#include "dnslb/core/wire.h"
#include "dnslb/worker.h"

static struct dlb_ring_rec
rec_named(const char *name, const char *addr, uint16_t rcode, uint32_t usec, uint16_t size)
{
	struct dlb_ring_rec r;
	int n;

	memset(&r, 0, sizeof(r));
	n = dlb_wire_name_from_text(name, r.name, sizeof(r.name));
	assert_true(n > 0);
	r.namelen = (uint8_t)n;
	if (strchr(addr, ':') != NULL) {
		assert_int_equal(inet_pton(AF_INET6, addr, r.addr), 1);
		r.pflags |= DLB_RING_V6;
	} else {
		assert_int_equal(inet_pton(AF_INET, addr, r.addr), 1);
	}
	r.hflags = (uint16_t)(DLB_F_QR | rcode);
	r.usec = usec;
	r.size = size;
	r.qtype = 1;
	r.qclass = 1;
	return r;
}

struct collect {
	struct dlb_ring_rec v[64];
	size_t n;
};

static void
collect_cb(const struct dlb_ring_rec *r, void *ud)
{
	struct collect *c = ud;

	assert_true(c->n < 64);
	c->v[c->n++] = *r;
}

static void
test_wraps_oldest_first(void **state)
{
	struct dlb_rings *rs = dlb_rings_new_cap(4);
	struct collect c = { .n = 0 };

	(void)state;
	assert_non_null(rs);
	for (int i = 0; i < 10; i++) {
		struct dlb_ring_rec r = rec_named("a.example.", "192.0.2.1", 0, 0, 0);

		r.size = (uint16_t)i;
		dlb_ring_push(&rs->query, &r);
	}
	assert_int_equal(dlb_ring_visit(&rs->query, collect_cb, &c), 4);
	for (size_t i = 0; i < 4; i++) {
		assert_int_equal(c.v[i].size, 6 + i);	/* the last four, oldest first */
		assert_int_equal(c.v[i].seq % 2, 0);
	}
	c.n = 0;
	assert_int_equal(dlb_ring_visit(&rs->resp, collect_cb, &c), 0);
	dlb_rings_free(rs);

	/* capacity 0: recording off, nothing to visit, nothing mapped */
	rs = dlb_rings_new_cap(0);
	assert_non_null(rs);
	dlb_ring_push(&rs->query, &c.v[0]);
	assert_int_equal(dlb_ring_visit(&rs->query, collect_cb, &c), 0);
	dlb_rings_free(rs);
}

/*
 * A writer stores only the words up to the end of its name: a short name
 * pushed into a slot that held a long one leaves the older bytes there, and
 * the reader's copy has zeros past namelen instead.
 */
static void
test_short_name_after_long(void **state)
{
	struct dlb_rings *rs = dlb_rings_new_cap(1);
	struct dlb_ring_rec r, got;
	union {
		struct dlb_ring_rec r;
		uint64_t w[DLB_RING_WORDS];
	} b;
	size_t nw;

	(void)state;
	assert_non_null(rs);
	memset(&r, 0, sizeof(r));
	r.namelen = DLB_RING_NAME_MAX;
	memset(r.name, 'x', sizeof(r.name));
	r.size = 1;
	dlb_ring_push(&rs->query, &r);

	memset(&b, 0, sizeof(b));
	b.r.size = 2;
	b.r.qtype = 28;
	b.r.namelen = 3;
	memcpy(b.r.name, "\2ab", 3);
	nw = (offsetof(struct dlb_ring_rec, name) + 3 + 7) / 8;
	if (nw < DLB_RING_MIN_WORDS)
		nw = DLB_RING_MIN_WORDS;
	assert_true(nw < DLB_RING_WORDS);	/* words nw.. keep the long name's 'x' */
	dlb_ring_push_words(&rs->query, b.w, nw);	/* the same slot (capacity 1) */
	assert_true(dlb_ring_read(&rs->query, 0, &got));
	assert_int_equal(got.size, 2);
	assert_int_equal(got.qtype, 28);
	assert_int_equal(got.namelen, 3);
	assert_memory_equal(got.name, "\2ab", 3);
	for (size_t i = 3; i < DLB_RING_NAME_MAX; i++)
		assert_int_equal(got.name[i], 0);
	dlb_rings_free(rs);
}

static void
test_sizing(void **state)
{
	struct dlb_rings *rs;

	(void)state;
	assert_int_equal(dlb_rings_total_size(), DLB_RING_DEFAULT_SIZE);
	dlb_rings_set_size(10, 3);
	rs = dlb_rings_new(4);		/* 10 over 4 workers: 3 each */
	assert_int_equal(rs->query.cap, 3);
	assert_int_equal(rs->resp.cap, 3);
	dlb_rings_free(rs);
	dlb_rings_set_size(0, 1);
	rs = dlb_rings_new(4);
	assert_int_equal(rs->query.cap, 0);
	dlb_rings_free(rs);
	dlb_rings_set_size(DLB_RING_DEFAULT_SIZE, 10);
}

/* A fake worker: a loop for the clock and rings; nothing else is touched. */
static struct dlb_worker *
fake_worker(size_t cap)
{
	struct dlb_worker *w = calloc(1, sizeof(*w));

	assert_non_null(w);
	w->loop = ev_loop_new(0);
	w->rings = dlb_rings_new_cap(cap);
	assert_non_null(w->rings);
	return w;
}

static void
fake_worker_free(struct dlb_worker *w)
{
	dlb_rings_free(w->rings);
	ev_loop_destroy(w->loop);
	free(w);
}

/* Parse a query for @name into @q (packet in @buf). */
static void
make_query(struct dlb_query *q, uint8_t *buf, const char *name, uint16_t id)
{
	int n;

	memset(q, 0, sizeof(*q));
	memset(buf, 0, 12);
	dlb_wr16(buf, id);
	dlb_wr16(buf + 2, DLB_F_RD);
	dlb_wr16(buf + 4, 1);
	n = dlb_wire_name_from_text(name, buf + 12, DLB_MAX_NAME);
	assert_true(n > 0);
	dlb_wr16(buf + 12 + n, 1);
	dlb_wr16(buf + 14 + n, 1);
	q->pkt = buf;
	q->len = (size_t)(16 + n);
	q->cap = 512;
	assert_int_equal(dlb_wire_parse_query(q->pkt, q->len, &q->m), DLB_OK);
}

/* dlb_rings_query as the query path calls it: q->now is the worker's time
 * when it began (process_head sets it) */
static void
record_query(struct dlb_worker *w, struct dlb_query *q, int rc)
{
	q->now = dlb_worker_now(w);
	dlb_rings_query(w, q, rc);
}

static void
test_recording(void **state)
{
	struct dlb_worker *w = fake_worker(8);
	struct sockaddr_in6 sa = { .sin6_family = AF_INET6, .sin6_port = htons(5353) };
	uint8_t buf[512], ans[64];
	char longname[300], text[DLB_WIRE_NAME_TEXT_MAX + 4];
	struct collect c = { .n = 0 };
	struct dlb_query q;
	struct dlb_slot s;
	size_t q0len;

	(void)state;
	inet_pton(AF_INET6, "2001:db8::5", &sa.sin6_addr);

	/* a query answered from the cache */
	make_query(&q, buf, "WWW.Example.COM.", 0x1234);
	q0len = q.len;
	q.client = (struct sockaddr *)&sa;
	record_query(w, &q, DLB_OK);
	dlb_rings_cache_hit(&q);
	memcpy(ans, buf, q.len);
	dlb_wr16(ans + 2, DLB_F_QR | DLB_F_RD | DLB_RCODE_NXDOMAIN);
	dlb_rings_local_answer(w, &q, ans, q.len);
	/* recorded once per query */
	dlb_rings_local_answer(w, &q, ans, q.len);

	/* a malformed one: neither the query nor its answer */
	record_query(w, &q, DLB_EMALF);
	dlb_rings_local_answer(w, &q, ans, q.len);

	/* a name longer than an entry keeps its last labels */
	strcpy(longname, "");
	for (int i = 0; i < 4; i++)
		strcat(longname, "labellabellabellabellabel.");
	for (int i = 0; i < 5; i++)
		strcat(longname, "abcdefghij.");
	strcat(longname, "example.");
	make_query(&q, buf, longname, 7);
	q.client = (struct sockaddr *)&sa;
	q.tcp = true;
	record_query(w, &q, DLB_OK);

	/* a backend's timeout, and a prefetch that is not recorded */
	memset(&s, 0, sizeof(s));
	s.client.proto = DLB_CLIENT_UDP;
	s.client.orig_id = 99;
	memcpy(&s.client.peer, &sa, sizeof(sa));
	make_query(&q, buf, "slow.example.", 99);
	s.key.qname_len = q.m.qname_len;
	memcpy(s.key.qname_lc, q.m.qname_lc, q.m.qname_len);
	s.key.qtype = 28;
	s.key.qclass = 1;
	dlb_rings_slot(w, &s, NULL, 0, 3);
	s.client.proto = DLB_CLIENT_INTERNAL;
	dlb_rings_slot(w, &s, NULL, 0, 3);

	assert_int_equal(dlb_rings_visit_worker(w->rings, false, collect_cb, &c), 2);
	dlb_ring_name_text(&c.v[0], text, sizeof(text));
	assert_string_equal(text, "www.example.com.");	/* lowercase */
	assert_int_equal(c.v[0].id, 0x1234);
	assert_int_equal(c.v[0].port, 5353);
	assert_true(c.v[0].pflags & DLB_RING_V6);
	assert_false(c.v[0].pflags & DLB_RING_TCP);
	/* the query as the query, though its answer is folded into its entry */
	assert_int_equal(c.v[0].pflags & DLB_RING_ANSWERED, 0);
	assert_int_equal(c.v[0].usec, 0);
	assert_int_equal(c.v[0].backend, 0);
	assert_int_equal(c.v[0].hflags, DLB_F_RD);
	dlb_ring_client_text(&c.v[0], true, text, sizeof(text));
	assert_string_equal(text, "[2001:db8::5]:5353");
	dlb_ring_client_text(&c.v[0], false, text, sizeof(text));
	assert_string_equal(text, "2001:db8::5");

	assert_true(c.v[1].pflags & DLB_RING_TRUNC_NAME);
	assert_true(c.v[1].pflags & DLB_RING_TCP);
	assert_true(c.v[1].namelen <= DLB_RING_NAME_MAX);
	dlb_ring_name_text(&c.v[1], text, sizeof(text));
	assert_string_equal(text, "...abcdefghij.abcdefghij.abcdefghij.abcdefghij.abcdefghij.example.");

	c.n = 0;
	/* the hit's answer is in its query's entry: the response ring has only
	 * the timeout, the answers visited are both */
	assert_int_equal(atomic_load(&w->rings->resp.pos), 1);
	assert_int_equal(dlb_rings_visit_worker(w->rings, true, collect_cb, &c), 2);
	assert_int_equal(c.v[0].backend, DLB_RING_BE_CACHE);
	assert_int_equal(DLB_RCODE(c.v[0].hflags), DLB_RCODE_NXDOMAIN);
	assert_int_equal(c.v[0].pflags & DLB_RING_ANSWERED, 0);
	assert_int_equal(c.v[0].id, 0x1234);
	assert_int_equal(c.v[0].size, q0len);
	assert_int_equal(c.v[0].usec, 0);
	dlb_ring_name_text(&c.v[0], text, sizeof(text));
	assert_string_equal(text, "www.example.com.");
	assert_int_equal(c.v[1].backend, 3);
	assert_int_equal(c.v[1].usec, DLB_RING_TIMEOUT);
	assert_int_equal(c.v[1].id, 99);
	assert_int_equal(c.v[1].qtype, 28);
	assert_int_equal(c.v[1].hflags, 0);
	fake_worker_free(w);
}

/* The newest record of @ring (whose entries are all written). */
static struct dlb_ring_rec
newest(const struct dlb_ring *ring)
{
	struct dlb_ring_rec r;
	uint64_t pos = atomic_load(&ring->pos);

	assert_true(pos > 0);
	assert_true(dlb_ring_read(ring, (size_t)((pos - 1) % ring->cap), &r));
	return r;
}

/* The newest answer of @rs (dlb_rings_visit_worker's last). */
static struct dlb_ring_rec
newest_answer(const struct dlb_rings *rs)
{
	struct collect c = { .n = 0 };

	assert_true(dlb_rings_visit_worker(rs, true, collect_cb, &c) > 0);
	return c.v[c.n - 1];
}

/*
 * A local answer is folded into its query's entry while the query ring
 * still holds it (fewer queries than its capacity recorded since) and the
 * answer keeps the query's ID; otherwise it takes a response entry of its
 * own, built from the query. Either way readers see the query's own name,
 * client, type and transport, with the answer's size, ID, flags and counts,
 * and the query's record stays the query's.
 */
static void
test_answer_record_from_query(void **state)
{
	struct dlb_worker *w = fake_worker(8);
	struct sockaddr_in sa4 = { .sin_family = AF_INET, .sin_port = htons(4242) };
	struct sockaddr_in6 sa6 = { .sin6_family = AF_INET6, .sin6_port = htons(5353) };
	uint8_t buf[512], other[512], ans[512];
	char text[DLB_WIRE_NAME_TEXT_MAX + 4];
	struct dlb_query q, o;
	struct dlb_ring_rec qr, ar;
	struct collect c;

	(void)state;
	inet_pton(AF_INET, "192.0.2.7", &sa4.sin_addr);
	inet_pton(AF_INET6, "2001:db8::9", &sa6.sin6_addr);
	for (int between = 0; between <= 9; between++) {
		for (int v = 0; v < 4; v++) {
			bool v6 = v & 1, same_id = v & 2;
			uint16_t qid = (uint16_t)(100 + between), aid = same_id ? qid : 0xbeef;
			bool fold = same_id && between < 8;
			uint64_t rpos;

			/* fresh rings: the only answer is this one's */
			dlb_rings_free(w->rings);
			w->rings = dlb_rings_new_cap(8);
			assert_non_null(w->rings);
			make_query(&q, buf, between % 2 ? "Mixed.Case.Example." :
				   "a-name-long-enough-for-three-words.example.", qid);
			q.client = v6 ? (struct sockaddr *)&sa6 : (struct sockaddr *)&sa4;
			q.tcp = between % 3 == 0;
			q.m.qtype = 28;
			record_query(w, &q, DLB_OK);
			qr = newest(&w->rings->query);
			/* other queries, recorded after this one and before its answer */
			for (int i = 0; i < between; i++) {
				make_query(&o, other, "other.example.", 7);
				o.client = (struct sockaddr *)&sa4;
				record_query(w, &o, DLB_OK);
			}
			dlb_rings_cache_hit(&q);
			memcpy(ans, buf, q.len);
			dlb_wr16(ans, aid);
			dlb_wr16(ans + 2, DLB_F_QR | DLB_F_RD | DLB_F_RA | DLB_RCODE_NOERROR);
			dlb_wr16(ans + 6, 3);
			rpos = atomic_load(&w->rings->resp.pos);
			dlb_rings_local_answer(w, &q, ans, q.len + 40);
			/* folded: no response entry of its own */
			assert_int_equal(atomic_load(&w->rings->resp.pos), rpos + !fold);
			ar = newest_answer(w->rings);

			dlb_ring_name_text(&ar, text, sizeof(text));
			assert_string_equal(text, between % 2 ? "mixed.case.example." :
					    "a-name-long-enough-for-three-words.example.");
			assert_int_equal(ar.namelen, qr.namelen);
			assert_memory_equal(ar.addr, qr.addr, sizeof(ar.addr));
			assert_int_equal(ar.port, v6 ? 5353 : 4242);
			assert_int_equal(ar.pflags, qr.pflags);
			assert_int_equal(!!(ar.pflags & DLB_RING_TCP), q.tcp);
			assert_int_equal(!!(ar.pflags & DLB_RING_V6), v6);
			assert_int_equal(ar.qtype, 28);
			assert_int_equal(ar.qclass, 1);
			assert_int_equal(ar.when_us, qr.when_us);
			assert_int_equal(ar.usec, 0);
			/* the answer's own */
			assert_int_equal(ar.size, q.len + 40);
			assert_int_equal(ar.id, aid);
			assert_int_equal(ar.hflags, DLB_F_QR | DLB_F_RD | DLB_F_RA);
			assert_int_equal(ar.ancount, 3);
			assert_int_equal(ar.backend, DLB_RING_BE_CACHE);
			/* and the query's record is the query's, as readers see it
			 * (while the ring still holds it) */
			assert_int_equal(qr.id, qid);
			assert_int_equal(qr.size, q.len);
			assert_int_equal(qr.backend, 0);
			c.n = 0;
			dlb_rings_visit_worker(w->rings, false, collect_cb, &c);
			if (between < 8) {
				qr = c.v[c.n - 1 - (size_t)between];
				assert_int_equal(qr.id, qid);
				assert_int_equal(qr.size, q.len);
				assert_int_equal(qr.hflags, DLB_F_RD);
				assert_int_equal(qr.usec, 0);
				assert_int_equal(qr.ancount, 0);
				assert_int_equal(qr.backend, 0);
				assert_int_equal(qr.pflags & DLB_RING_ANSWERED, 0);
			}
		}
	}
	fake_worker_free(w);
}

/*
 * The answers a reader sees are the newest response-ring capacity of the
 * response ring's entries and the folded ones, merged by time: folded
 * answers that fall out of the query ring go with their queries, and a
 * response ring that does not record shows no answers at all.
 */
static void
test_answer_view(void **state)
{
	struct dlb_worker *w = fake_worker(4);
	struct sockaddr_in sa4 = { .sin_family = AF_INET, .sin_port = htons(4242) };
	uint8_t buf[512];
	struct collect c = { .n = 0 };
	struct dlb_query q;
	struct dlb_slot s;

	(void)state;
	inet_pton(AF_INET, "192.0.2.7", &sa4.sin_addr);
	memset(&s, 0, sizeof(s));
	s.client.proto = DLB_CLIENT_UDP;
	memcpy(&s.client.peer, &sa4, sizeof(sa4));
	/* at t: 3 hits, folded; at t + 1: 2 backend timeouts; at t + 2: 3 hits */
	for (int step = 0; step < 3; step++) {
		for (int i = 0; i < (step == 1 ? 2 : 3); i++) {
			make_query(&q, buf, "x.example.", (uint16_t)(step * 10 + i));
			if (step == 1) {
				s.key.qname_len = q.m.qname_len;
				memcpy(s.key.qname_lc, q.m.qname_lc, q.m.qname_len);
				s.client.orig_id = q.m.id;
				dlb_rings_slot(w, &s, NULL, 0, 1);
				continue;
			}
			q.client = (struct sockaddr *)&sa4;
			record_query(w, &q, DLB_OK);
			dlb_rings_cache_hit(&q);
			dlb_wr16(buf + 2, DLB_F_QR | DLB_F_RD);
			dlb_rings_local_answer(w, &q, buf, q.len);
		}
		ev_sleep(0.002);
		ev_now_update(w->loop);
	}
	/* query ring (4): hits 1, 2 of step 0 fell out with 0; the answers:
	 * hits 20..22, timeouts 10..11, hit 2 = 6, cut to the newest 4 */
	assert_int_equal(atomic_load(&w->rings->query.pos), 6);
	assert_int_equal(atomic_load(&w->rings->resp.pos), 2);
	assert_int_equal(dlb_rings_visit_worker(w->rings, true, collect_cb, &c), 4);
	assert_int_equal(c.v[0].id, 11);
	assert_int_equal(c.v[0].usec, DLB_RING_TIMEOUT);
	for (int i = 1; i < 4; i++) {
		assert_int_equal(c.v[i].id, 20 + i - 1);
		assert_int_equal(c.v[i].backend, DLB_RING_BE_CACHE);
		assert_true(c.v[i].when_us > c.v[0].when_us);
	}
	c.n = 0;
	assert_int_equal(dlb_rings_visit_worker(w->rings, false, collect_cb, &c), 4);
	assert_int_equal(c.v[0].id, 2);
	assert_int_equal(c.v[3].id, 22);
	for (int i = 0; i < 4; i++)
		assert_int_equal(c.v[i].backend, 0);

	/* queries only: nothing on the answer side, though entries are there */
	dlb_rings_free(w->rings);
	w->rings = dlb_rings_new_caps(4, 0);
	make_query(&q, buf, "x.example.", 1);
	record_query(w, &q, DLB_OK);
	dlb_rings_cache_hit(&q);
	dlb_rings_local_answer(w, &q, buf, q.len);
	c.n = 0;
	assert_int_equal(dlb_rings_visit_worker(w->rings, true, collect_cb, &c), 0);
	assert_int_equal(dlb_rings_visit_worker(w->rings, false, collect_cb, &c), 1);
	assert_int_equal(c.v[0].backend, 0);
	fake_worker_free(w);
}

/*
 * setRingBuffersOptions: a ring that does not record maps nothing; with
 * only the response ring, a cache hit's answer is still recorded (built
 * from the query, as no query record exists); with only the query ring,
 * nothing reaches the response side.
 */
static void
test_recording_options(void **state)
{
	struct sockaddr_in sa4 = { .sin_family = AF_INET, .sin_port = htons(4242) };
	uint8_t buf[512], ans[512];
	char text[DLB_WIRE_NAME_TEXT_MAX + 4];
	struct dlb_ring_rec ar;
	struct dlb_rings *rs;
	struct dlb_worker *w;
	struct dlb_query q;
	bool rq, rr;

	(void)state;
	dlb_rings_recording(&rq, &rr);
	assert_true(rq && rr);
	dlb_rings_set_size(10, 1);
	dlb_rings_set_recording(false, true);
	rs = dlb_rings_new(2);
	assert_int_equal(rs->query.cap, 0);
	assert_null(rs->query.slots);
	assert_int_equal(rs->resp.cap, 5);
	dlb_rings_free(rs);
	dlb_rings_set_recording(true, false);
	rs = dlb_rings_new(2);
	assert_int_equal(rs->query.cap, 5);
	assert_int_equal(rs->resp.cap, 0);
	dlb_rings_free(rs);
	dlb_rings_set_recording(true, true);
	dlb_rings_set_size(DLB_RING_DEFAULT_SIZE, 10);

	/* responses only */
	w = fake_worker(8);
	dlb_rings_free(w->rings);
	w->rings = dlb_rings_new_caps(0, 8);
	assert_non_null(w->rings);
	inet_pton(AF_INET, "192.0.2.7", &sa4.sin_addr);
	for (int i = 0; i < 3; i++) {
		make_query(&q, buf, "Hit.Example.", (uint16_t)(7 + i));
		q.client = (struct sockaddr *)&sa4;
		record_query(w, &q, DLB_OK);
		assert_int_equal(atomic_load(&w->rings->query.pos), 0);
		dlb_rings_cache_hit(&q);
		memcpy(ans, buf, q.len);
		dlb_wr16(ans + 2, DLB_F_QR | DLB_F_RD | DLB_RCODE_NOERROR);
		dlb_wr16(ans + 6, 1);
		dlb_rings_local_answer(w, &q, ans, q.len + 16);
		assert_int_equal(atomic_load(&w->rings->resp.pos), (uint64_t)i + 1);
		ar = newest(&w->rings->resp);
		dlb_ring_name_text(&ar, text, sizeof(text));
		assert_string_equal(text, "hit.example.");
		assert_int_equal(ar.port, 4242);
		assert_int_equal(ar.id, 7 + i);
		assert_int_equal(ar.size, q.len + 16);
		assert_int_equal(ar.ancount, 1);
		assert_int_equal(ar.backend, DLB_RING_BE_CACHE);
	}
	/* a query that did not parse has no answer record */
	make_query(&q, buf, "bad.example.", 9);
	record_query(w, &q, DLB_EMALF);
	dlb_rings_local_answer(w, &q, buf, q.len);
	assert_int_equal(atomic_load(&w->rings->resp.pos), 3);

	/* queries only */
	dlb_rings_free(w->rings);
	w->rings = dlb_rings_new_caps(8, 0);
	assert_non_null(w->rings);
	make_query(&q, buf, "hit.example.", 11);
	q.client = (struct sockaddr *)&sa4;
	record_query(w, &q, DLB_OK);
	assert_int_equal(atomic_load(&w->rings->query.pos), 1);
	dlb_rings_cache_hit(&q);
	dlb_rings_local_answer(w, &q, buf, q.len);
	assert_int_equal(atomic_load(&w->rings->resp.pos), 0);
	assert_null(w->rings->resp.slots);
	fake_worker_free(w);
}

static void
test_top(void **state)
{
	struct dlb_worker *w[2] = { fake_worker(16), fake_worker(16) };
	struct dlb_worker *const *saved = dlb_daemon.workers;
	int saved_n = dlb_daemon.nworkers;
	struct dlb_top_entry out[8], *v;
	struct dlb_top_spec spec = { .kind = DLB_TOP_RCODE, .labels = -1, .rcode = 3 };
	uint64_t total, rest;
	struct dlb_ring_rec r;
	long k;

	(void)state;
	/* none: empty, safe */
	dlb_daemon.workers = NULL;
	dlb_daemon.nworkers = 0;
	assert_int_equal(dlb_rings_top_names(8, 0, out, &total), 0);
	assert_int_equal(total, 0);

	dlb_daemon.workers = w;
	dlb_daemon.nworkers = 2;
	for (int i = 0; i < 3; i++) {
		r = rec_named("a.example.com.", "192.0.2.1", 0, 100, 50);
		dlb_ring_push(&w[i % 2]->rings->query, &r);
		dlb_ring_push(&w[i % 2]->rings->resp, &r);
	}
	r = rec_named("b.example.com.", "2001:db8::1", 3, 3000000, 70);
	dlb_ring_push(&w[0]->rings->query, &r);
	dlb_ring_push(&w[1]->rings->resp, &r);
	r = rec_named("c.example.net.", "192.0.2.1", 3, DLB_RING_TIMEOUT, 0);
	dlb_ring_push(&w[1]->rings->query, &r);
	dlb_ring_push(&w[1]->rings->resp, &r);

	assert_int_equal(dlb_rings_top_names(8, 0, out, &total), 3);
	assert_int_equal(total, 5);
	assert_string_equal(out[0].key, "a.example.com.");
	assert_int_equal(out[0].count, 3);
	assert_int_equal(out[1].count, 1);
	assert_int_equal(dlb_rings_top_names(1, 0, out, &total), 1);
	assert_int_equal(dlb_rings_top_names(8, 2, out, &total), 2);
	assert_string_equal(out[0].key, "example.com.");
	assert_int_equal(out[0].count, 4);
	assert_string_equal(out[1].key, "example.net.");

	assert_int_equal(dlb_rings_top_clients(8, out, &total), 2);
	assert_string_equal(out[0].key, "192.0.2.1");
	assert_int_equal(out[0].count, 4);
	assert_string_equal(out[1].key, "2001:db8::1");

	/* NXDOMAIN answers: the timeout (rcode bits set here on purpose) is not one */
	k = dlb_rings_top(&spec, 8, &v, &total, &rest);
	assert_int_equal(k, 1);
	assert_string_equal(v[0].key, "b.example.com.");
	assert_int_equal(total, 1);
	free(v);

	spec.kind = DLB_TOP_SLOW;
	spec.min_usec = 2000 * 1000;
	k = dlb_rings_top(&spec, 1, &v, &total, &rest);
	assert_int_equal(k, 1);
	assert_int_equal(total, 2);	/* slow answers and timeouts */
	assert_int_equal(rest, 1);
	free(v);

	spec.kind = DLB_TOP_TIMEOUTS;
	spec.labels = 0;		/* grouped to the root */
	k = dlb_rings_top(&spec, 8, &v, &total, &rest);
	assert_int_equal(k, 1);
	assert_string_equal(v[0].key, ".");
	free(v);

	spec.kind = DLB_TOP_BANDWIDTH;
	k = dlb_rings_top(&spec, 8, &v, &total, &rest);
	assert_int_equal(k, 2);
	assert_string_equal(v[0].key, "192.0.2.1");
	assert_int_equal(v[0].count, 3 * 50 * 2);	/* queries and answers */
	assert_int_equal(v[1].count, 70 * 2);
	free(v);

	dlb_daemon.workers = saved;
	dlb_daemon.nworkers = saved_n;
	fake_worker_free(w[0]);
	fake_worker_free(w[1]);
}

/* ---- a writer racing a reader ---------------------------------------------- */

#define RACE_WRITES 1000000

struct race {
	struct dlb_ring *ring;
	_Atomic int done;
	uint64_t reads, bad;
};

/* Run @reader and @writer on @arg in two threads until both return. */
static void
run_race(void *(*reader)(void *), void *(*writer)(void *), void *arg)
{
	pthread_t wt, rt;

	assert_int_equal(pthread_create(&rt, NULL, reader, arg), 0);
	assert_int_equal(pthread_create(&wt, NULL, writer, arg), 0);
	pthread_join(wt, NULL);
	pthread_join(rt, NULL);
}

static struct dlb_ring_rec
race_rec(uint64_t k)
{
	struct dlb_ring_rec r;

	memset(&r, 0, sizeof(r));
	r.usec = (uint32_t)k;
	r.when_us = (int64_t)k;
	memset(r.addr, (int)(k & 0xff), sizeof(r.addr));
	r.size = (uint16_t)k;
	r.id = (uint16_t)(k >> 16);
	r.namelen = DLB_RING_NAME_MAX;	/* every byte of the record is checked */
	memset(r.name, (int)((k >> 8) & 0xff), sizeof(r.name));
	return r;
}

static void *
race_writer(void *arg)
{
	struct race *rc = arg;

	for (uint64_t k = 1; k <= RACE_WRITES; k++) {
		struct dlb_ring_rec r = race_rec(k);

		dlb_ring_push(rc->ring, &r);
	}
	atomic_store(&rc->done, 1);
	return NULL;
}

static void
race_check(const struct dlb_ring_rec *r, void *ud)
{
	struct race *rc = ud;
	struct dlb_ring_rec want = race_rec((uint64_t)r->when_us);

	want.seq = r->seq;
	rc->reads++;
	if (memcmp(&want, r, sizeof(want)) != 0)
		rc->bad++;
}

static void *
race_reader(void *arg)
{
	struct race *rc = arg;

	while (!atomic_load(&rc->done))
		dlb_ring_visit(rc->ring, race_check, rc);
	dlb_ring_visit(rc->ring, race_check, rc);
	return NULL;
}

static void
test_writer_reader_race(void **state)
{
	struct dlb_rings *rs = dlb_rings_new_cap(32);	/* small: the writer laps the reader */
	struct race rc = { .reads = 0, .bad = 0 };

	(void)state;
	assert_non_null(rs);
	rc.ring = &rs->query;
	atomic_init(&rc.done, 0);
	run_race(race_reader, race_writer, &rc);
	assert_true(rc.reads >= 32);
	assert_int_equal(rc.bad, 0);
	assert_int_equal(atomic_load(&rc.ring->pos), RACE_WRITES);
	dlb_rings_free(rs);
}

/*
 * The same race with answers folded into query entries: the writer records
 * queries through the pipeline's calls and answers every other one from the
 * "cache" (folded); the reader checks each query and each answer it is given
 * against what the writer recorded for that name. A fold seen half-written
 * would mix a query's fields with an answer's.
 */
struct fold_race {
	struct dlb_worker *w;
	_Atomic int done;
	uint64_t queries, answers, bad;
};

static void *
fold_writer(void *arg)
{
	struct fold_race *fr = arg;
	struct sockaddr_in sa4 = { .sin_family = AF_INET, .sin_port = htons(4242) };
	uint8_t buf[512], ans[512];
	char name[64];
	struct dlb_query q;

	for (uint64_t k = 1; k <= RACE_WRITES; k++) {
		snprintf(name, sizeof(name), "q%llu.example.", (unsigned long long)k);
		make_query(&q, buf, name, (uint16_t)k);
		q.client = (struct sockaddr *)&sa4;
		record_query(fr->w, &q, DLB_OK);
		if (k % 2 == 0)
			continue;
		dlb_rings_cache_hit(&q);
		memcpy(ans, buf, q.len);
		dlb_wr16(ans + 2, DLB_F_QR | DLB_F_RD | (uint16_t)(k % 6));
		dlb_wr16(ans + 6, (uint16_t)(k % 7));
		dlb_rings_local_answer(fr->w, &q, ans, q.len + k % 100);
	}
	atomic_store(&fr->done, 1);
	return NULL;
}

static void
fold_check(const struct dlb_ring_rec *r, void *ud, bool resp)
{
	struct fold_race *fr = ud;
	char text[DLB_WIRE_NAME_TEXT_MAX + 4];
	unsigned long long k = 0;
	size_t qlen;

	dlb_ring_name_text(r, text, sizeof(text));
	if (sscanf(text, "q%llu.example.", &k) != 1) {
		fr->bad++;
		return;
	}
	qlen = 16 + strlen(text) + 1;	/* header, wire name, type, class */
	if (r->id != (uint16_t)k || r->pflags != 0 || r->usec != 0) {
		fr->bad++;
	} else if (!resp) {
		fr->queries++;
		if (r->size != qlen || r->hflags != DLB_F_RD || r->ancount != 0 || r->backend != 0)
			fr->bad++;
	} else {
		fr->answers++;
		if (k % 2 == 0 || r->size != qlen + k % 100 ||
		    r->hflags != (DLB_F_QR | DLB_F_RD | k % 6) || r->ancount != k % 7 ||
		    r->backend != DLB_RING_BE_CACHE)
			fr->bad++;
	}
}

static void
fold_check_query(const struct dlb_ring_rec *r, void *ud)
{
	fold_check(r, ud, false);
}

static void
fold_check_answer(const struct dlb_ring_rec *r, void *ud)
{
	fold_check(r, ud, true);
}

static void *
fold_reader(void *arg)
{
	struct fold_race *fr = arg;
	bool last = false;

	while (!last) {
		last = atomic_load(&fr->done);
		dlb_rings_visit_worker(fr->w->rings, false, fold_check_query, fr);
		dlb_rings_visit_worker(fr->w->rings, true, fold_check_answer, fr);
	}
	return NULL;
}

static void
test_fold_reader_race(void **state)
{
	struct fold_race fr = { .w = fake_worker(32), .queries = 0, .answers = 0, .bad = 0 };

	(void)state;
	atomic_init(&fr.done, 0);
	run_race(fold_reader, fold_writer, &fr);
	assert_true(fr.queries >= 32);
	assert_true(fr.answers >= 16);
	assert_int_equal(fr.bad, 0);
	/* every answer was folded */
	assert_int_equal(atomic_load(&fr.w->rings->query.pos), RACE_WRITES);
	assert_int_equal(atomic_load(&fr.w->rings->resp.pos), 0);
	fake_worker_free(fr.w);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wraps_oldest_first),
		cmocka_unit_test(test_short_name_after_long),
		cmocka_unit_test(test_sizing),
		cmocka_unit_test(test_recording),
		cmocka_unit_test(test_answer_record_from_query),
		cmocka_unit_test(test_answer_view),
		cmocka_unit_test(test_recording_options),
		cmocka_unit_test(test_top),
		cmocka_unit_test(test_writer_reader_race),
		cmocka_unit_test(test_fold_reader_race),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
