/*
 * test_inflight.c - the outstanding-query table: random IDs, exhaustion,
 * no overwrite of live IDs, FIFO (deadline) order, slot pool reuse.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "pkt.h"

#include <arpa/inet.h>

#include "dnslb/core/inflight.h"
#include "dnslb/core/util.h"

static void
test_ids_unique_and_random(void **state)
{
	struct dlb_inflight t;
	struct dlb_slot_pool p;
	struct dlb_rng rng;
	static uint8_t seen[65536];
	int sequential = 0, prev = -1;

	dlb_rng_init(&rng);
	assert_int_equal(dlb_slot_pool_init(&p), 0);
	assert_int_equal(dlb_inflight_init(&t, 65536), 0);
	memset(seen, 0, sizeof(seen));
	for (int i = 0; i < 1000; i++) {
		uint32_t idx = dlb_slot_alloc(&p);
		int id;

		assert_int_not_equal(idx, DLB_SLOT_NONE);
		id = dlb_inflight_add(&t, &p, &rng, idx, (double)i);
		assert_true(id >= 0 && id < 65536);
		assert_int_equal(seen[id], 0);	/* a live ID is never handed out twice */
		seen[id] = 1;
		assert_int_equal(dlb_inflight_lookup(&t, (uint16_t)id), idx);
		if (prev >= 0 && id == prev + 1)
			sequential++;
		prev = id;
	}
	/* random, not sequential: with 1000 draws, P(>5 consecutive +1 steps) is negligible */
	assert_true(sequential < 5);
	assert_int_equal(dlb_inflight_count(&t), 1000);
	dlb_inflight_deinit(&t);
	dlb_slot_pool_deinit(&p);
}

static void
test_exhaustion_and_release(void **state)
{
	struct dlb_inflight t;
	struct dlb_slot_pool p;
	struct dlb_rng rng;
	uint32_t idx[100];

	dlb_rng_init(&rng);
	dlb_slot_pool_init(&p);
	assert_int_equal(dlb_inflight_init(&t, 100), 0);
	for (int i = 0; i < 100; i++) {
		idx[i] = dlb_slot_alloc(&p);
		assert_true(dlb_inflight_add(&t, &p, &rng, idx[i], 1.0) >= 0);
	}
	/* full: refused, nothing overwritten */
	{
		uint32_t extra = dlb_slot_alloc(&p);

		assert_int_equal(dlb_inflight_add(&t, &p, &rng, extra, 1.0), DLB_EFULL);
		dlb_slot_free(&p, extra);
	}
	for (int i = 0; i < 100; i++) {
		struct dlb_slot *s = dlb_slot_get(&p, idx[i]);

		assert_int_equal(dlb_inflight_lookup(&t, s->wire_id), idx[i]);
	}
	/* releasing one makes room for exactly one */
	{
		struct dlb_slot *s = dlb_slot_get(&p, idx[42]);
		uint16_t old = s->wire_id;

		dlb_inflight_remove(&t, &p, idx[42]);
		assert_int_equal(dlb_inflight_lookup(&t, old), DLB_SLOT_NONE);
		assert_true(dlb_inflight_add(&t, &p, &rng, idx[42], 2.0) >= 0);
	}
	dlb_inflight_deinit(&t);
	dlb_slot_pool_deinit(&p);
}

static void
test_full_65536(void **state)
{
	struct dlb_inflight t;
	struct dlb_slot_pool p;
	struct dlb_rng rng;
	static uint8_t seen[65536];

	dlb_rng_init(&rng);
	dlb_slot_pool_init(&p);
	assert_int_equal(dlb_inflight_init(&t, 65536), 0);
	memset(seen, 0, sizeof(seen));
	for (int i = 0; i < 65536; i++) {
		uint32_t idx = dlb_slot_alloc(&p);
		int id = dlb_inflight_add(&t, &p, &rng, idx, 0);

		assert_true(id >= 0);
		assert_int_equal(seen[id], 0);
		seen[id] = 1;
	}
	assert_int_equal(dlb_inflight_add(&t, &p, &rng, dlb_slot_alloc(&p), 0), DLB_EFULL);
	dlb_inflight_deinit(&t);
	dlb_slot_pool_deinit(&p);
}

static void
test_fifo_order(void **state)
{
	struct dlb_inflight t;
	struct dlb_slot_pool p;
	struct dlb_rng rng;
	uint32_t idx[10];

	dlb_rng_init(&rng);
	dlb_slot_pool_init(&p);
	dlb_inflight_init(&t, 65536);
	for (int i = 0; i < 10; i++) {
		idx[i] = dlb_slot_alloc(&p);
		dlb_inflight_add(&t, &p, &rng, idx[i], (double)i);
	}
	assert_int_equal(dlb_inflight_oldest(&t), idx[0]);
	/* answered out of order: the oldest live one stays first */
	dlb_inflight_remove(&t, &p, idx[3]);
	dlb_inflight_remove(&t, &p, idx[0]);
	assert_int_equal(dlb_inflight_oldest(&t), idx[1]);
	dlb_inflight_remove(&t, &p, idx[1]);
	dlb_inflight_remove(&t, &p, idx[2]);
	assert_int_equal(dlb_inflight_oldest(&t), idx[4]);
	/* expiring in deadline order */
	for (int i = 4; i < 10; i++) {
		uint32_t o = dlb_inflight_oldest(&t);

		assert_int_equal(o, idx[i]);
		assert_true(dlb_slot_get(&p, o)->deadline == (double)i);
		dlb_inflight_remove(&t, &p, o);
	}
	assert_int_equal(dlb_inflight_oldest(&t), DLB_SLOT_NONE);
	assert_int_equal(dlb_inflight_count(&t), 0);
	dlb_inflight_deinit(&t);
	dlb_slot_pool_deinit(&p);
}

static void
test_slot_pool_reuse(void **state)
{
	struct dlb_slot_pool p;
	uint32_t a, b;

	dlb_slot_pool_init(&p);
	a = dlb_slot_alloc(&p);
	dlb_slot_free(&p, a);
	b = dlb_slot_alloc(&p);
	assert_int_equal(a, b);		/* freed slots are reused first: no growth */
	assert_int_equal(p.nchunks, 1);
	for (int i = 0; i < 5000; i++)
		assert_int_not_equal(dlb_slot_alloc(&p), DLB_SLOT_NONE);
	assert_int_equal(p.used, 5001);
	dlb_slot_pool_deinit(&p);
}

static void
test_rng_uniform(void **state)
{
	struct dlb_rng rng;
	int counts[10] = { 0 };

	dlb_rng_init(&rng);
	for (int i = 0; i < 100000; i++) {
		uint32_t v = dlb_rng_uniform(&rng, 10);

		assert_true(v < 10);
		counts[v]++;
	}
	for (int i = 0; i < 10; i++)
		assert_true(counts[i] > 9000 && counts[i] < 11000);
}

/* A slot asking www.Example.com A IN, sent to @to (NULL: a connected socket). */
static uint32_t
match_slot(struct dlb_inflight *t, struct dlb_slot_pool *p, struct dlb_rng *rng,
	   const struct sockaddr *to, int *id)
{
	static const uint8_t qname[] = "\3www\7example\3com";
	uint32_t idx = dlb_slot_alloc(p);
	struct dlb_slot *s = dlb_slot_get(p, idx);

	memset(&s->key, 0, sizeof(s->key));
	memcpy(s->key.qname_lc, qname, sizeof(qname));
	s->key.qname_len = sizeof(qname);
	s->key.qtype = 1;
	s->key.qclass = 1;
	s->src = to;
	*id = dlb_inflight_add(t, p, rng, idx, 1.0);
	assert_true(*id >= 0);
	return idx;
}

static size_t
answer(struct pb *b, int id, uint16_t flags, const char *name, uint16_t qtype)
{
	pb_hdr(b, (uint16_t)id, flags, name != NULL, 0, 0, 0);
	if (name != NULL)
		pb_question(b, name, qtype, 1);
	return b->n;
}

/*
 * One function says which slot an answer answers: the ID, the source (on an
 * unconnected socket) and the question must all match; nothing is changed.
 */
static void
test_match(void **state)
{
	struct dlb_inflight t;
	struct dlb_slot_pool p;
	struct dlb_rng rng;
	struct sockaddr_in be = { .sin_family = AF_INET, .sin_port = htons(53) };
	struct sockaddr_in other = be;
	enum dlb_answer_match why;
	struct pb b;
	uint32_t idx;
	int id;

	(void)state;
	inet_pton(AF_INET, "192.0.2.1", &be.sin_addr);
	inet_pton(AF_INET, "192.0.2.2", &other.sin_addr);
	dlb_rng_init(&rng);
	dlb_slot_pool_init(&p);
	assert_int_equal(dlb_inflight_init(&t, 65536), 0);
	idx = match_slot(&t, &p, &rng, (struct sockaddr *)&be, &id);

	/* the answer, its qname in another case */
	answer(&b, id, 0x8180, "WWW.example.COM", 1);
	assert_int_equal(dlb_inflight_match(&t, &p, b.b, b.n, (struct sockaddr *)&be, false, &why),
			 idx);
	assert_int_equal(why, DLB_ANSWER_OK);
	/* from another address: not this slot's, not counted */
	assert_int_equal(dlb_inflight_match(&t, &p, b.b, b.n, (struct sockaddr *)&other, false,
					    &why), DLB_SLOT_NONE);
	assert_int_equal(why, DLB_ANSWER_OTHER);
	/* a connected socket (no sender given): the kernel checked it */
	assert_int_equal(dlb_inflight_match(&t, &p, b.b, b.n, NULL, false, &why), idx);
	/* another ID */
	answer(&b, (id + 1) & 0xffff, 0x8180, "www.example.com", 1);
	assert_int_equal(dlb_inflight_match(&t, &p, b.b, b.n, NULL, false, &why), DLB_SLOT_NONE);
	assert_int_equal(why, DLB_ANSWER_OTHER);
	/* another question: spoofed or confused, the query keeps waiting */
	answer(&b, id, 0x8180, "www.example.org", 1);
	assert_int_equal(dlb_inflight_match(&t, &p, b.b, b.n, NULL, false, &why), DLB_SLOT_NONE);
	assert_int_equal(why, DLB_ANSWER_OTHER);
	answer(&b, id, 0x8180, "www.example.com", 28);
	assert_int_equal(dlb_inflight_match(&t, &p, b.b, b.n, NULL, false, &why), DLB_SLOT_NONE);
	assert_int_equal(why, DLB_ANSWER_OTHER);
	/* QR=0: noncompliant, as dnsdist counts it */
	answer(&b, id, 0x0100, "www.example.com", 1);
	assert_int_equal(dlb_inflight_match(&t, &p, b.b, b.n, NULL, false, &why), DLB_SLOT_NONE);
	assert_int_equal(why, DLB_ANSWER_NONCOMPLIANT);
	/* header only: REFUSED and SERVFAIL answer it, NOERROR only when allowed */
	answer(&b, id, 0x8185, NULL, 0);
	assert_int_equal(dlb_inflight_match(&t, &p, b.b, b.n, NULL, false, &why), idx);
	answer(&b, id, 0x8180, NULL, 0);
	assert_int_equal(dlb_inflight_match(&t, &p, b.b, b.n, NULL, false, &why), DLB_SLOT_NONE);
	assert_int_equal(why, DLB_ANSWER_NONCOMPLIANT);
	assert_int_equal(dlb_inflight_match(&t, &p, b.b, b.n, NULL, true, &why), idx);
	/* shorter than a header */
	assert_int_equal(dlb_inflight_match(&t, &p, b.b, 11, NULL, true, &why), DLB_SLOT_NONE);
	assert_int_equal(why, DLB_ANSWER_OTHER);
	/* after its removal (timeout): a late answer finds nothing */
	dlb_inflight_remove(&t, &p, idx);
	answer(&b, id, 0x8180, "www.example.com", 1);
	assert_int_equal(dlb_inflight_match(&t, &p, b.b, b.n, NULL, false, &why), DLB_SLOT_NONE);
	dlb_slot_free(&p, idx);
	dlb_inflight_deinit(&t);
	dlb_slot_pool_deinit(&p);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ids_unique_and_random),
		cmocka_unit_test(test_exhaustion_and_release),
		cmocka_unit_test(test_full_65536),
		cmocka_unit_test(test_fifo_order),
		cmocka_unit_test(test_slot_pool_reuse),
		cmocka_unit_test(test_rng_uniform),
		cmocka_unit_test(test_match),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
