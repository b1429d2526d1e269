/*
 * test_l2cache.c - the second-level cache's value format (dnslb/pipeline/l2cache.h):
 * the stable key hash and Redis key, encode/decode round trips, and every
 * way a value read from Redis is refused (format, another question, an
 * answer that would not be accepted from a backend), truncations and bit
 * flips included; and dlb_cache_answer_ttl agreeing with the insert rules.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/core/cache.h"
#include "dnslb/pipeline/l2cache.h"
#include "dnslb/core/rcu.h"
#include "dnslb/core/wire.h"

#define PB_MAX 2048
#include "pkt.h"

#define T0	1700000000.25
#define MAXT	64

static struct dlb_cache *cache;

static int
setup(void **state)
{
	struct dlb_cache_opts o;

	dlb_cache_opts_default(&o);
	o.max_entries = 100;
	o.l2 = true;
	cache = dlb_cache_new(&o);
	return cache == NULL;
}

static int
teardown(void **state)
{
	dlb_cache_free(cache);
	return 0;
}

/* The key of "@name A IN" (RD, EDNS with DO when @do_bit) for the test cache. */
static void
make_key(const char *name, bool do_bit, struct dlb_cache_key *k)
{
	struct pb p = { .n = 0 };
	struct dlb_dnsmsg m;

	pb_hdr(&p, 0x1234, DLB_F_RD, 1, 0, 0, 1);
	pb_question(&p, name, 1, 1);
	pb_opt(&p, 1232, do_bit ? 0x8000 : 0, NULL, 0);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	assert_int_equal(dlb_cache_key_make(cache, p.b, &m, false, k), 0);
}

/* An answer to "@name A IN": RD as @flags says, one A record with @ttl. */
static size_t
make_answer(struct pb *p, const char *name, uint16_t flags, uint32_t ttl)
{
	uint8_t rd[4] = { 192, 0, 2, 1 };

	p->n = 0;
	pb_hdr(p, 0x4321, (uint16_t)(DLB_F_QR | flags), 1, 1, 0, 0);
	pb_question(p, name, 1, 1);
	pb_rr_at(p, DLB_DNS_HDR, 1, ttl, rd, 4);
	return p->n;
}

static void
test_hash_stable(void **state)
{
	struct dlb_cache_key k1, k2, k3;
	char key[DLB_L2_KEY_MAX];
	size_t n;

	make_key("www.example.com", false, &k1);
	make_key("WWW.Example.COM", false, &k2);
	make_key("www.example.com", true, &k3);
	/* the case of the question is not in the key; the DO bit is */
	assert_int_equal(dlb_l2_hash(&k1), dlb_l2_hash(&k2));
	assert_true(dlb_l2_hash(&k1) != dlb_l2_hash(&k3));
	/* no per-process seed: the local key's keyed hash plays no part */
	k2.hash ^= 0xdeadbeefULL;
	assert_int_equal(dlb_l2_hash(&k1), dlb_l2_hash(&k2));
	/* the same on every node and every build: a fixed value */
	assert_int_equal(dlb_l2_hash(&k1), 0xa91e99aa5aab8bf3ULL);

	n = dlb_l2_key(key, "edge", "", &k1);
	assert_int_equal(n, strlen("edge:pc:") + 16);
	assert_string_equal(key, "edge:pc:a91e99aa5aab8bf3");
	n = dlb_l2_key(key, "edge", "internal", &k1);
	assert_string_equal(key, "edge:pc:internal:a91e99aa5aab8bf3");
	assert_int_equal(n, strlen(key));
}

static void
test_roundtrip(void **state)
{
	struct dlb_cache_key k;
	struct pb a;
	uint8_t v[4096];
	uint16_t offs[MAXT], nttl = 0;
	const uint8_t *ans = NULL;
	double ins = 0;
	size_t alen = 0, len, vlen;

	make_key("www.example.com", false, &k);
	len = make_answer(&a, "Www.Example.com", DLB_F_RD, 300);
	vlen = dlb_l2_encode(&k, T0, a.b, len, v, sizeof(v));
	assert_int_equal(vlen, DLB_L2_HDR + k.qname_len + k.opts_len + len);
	assert_int_equal(dlb_l2_decode(v, vlen, &k, &ins, &ans, &alen, offs, MAXT, &nttl),
			 DLB_L2_OK);
	assert_true(ins > T0 - 0.001 && ins < T0 + 0.001);	/* kept in milliseconds */
	assert_int_equal(alen, len);
	assert_memory_equal(ans, a.b, len);
	assert_true(ans >= v && ans + alen == v + vlen);	/* points into the value */
	assert_int_equal(nttl, 1);
	assert_int_equal(dlb_rd32(ans + offs[0]), 300);
	/* too small an output buffer */
	assert_int_equal(dlb_l2_encode(&k, T0, a.b, len, v, vlen - 1), 0);
}

static enum dlb_l2_verdict
decode(const uint8_t *v, size_t n, const struct dlb_cache_key *k)
{
	uint16_t offs[MAXT], nttl;
	const uint8_t *ans;
	double ins;
	size_t alen;

	return dlb_l2_decode(v, n, k, &ins, &ans, &alen, offs, MAXT, &nttl);
}

static void
test_refused(void **state)
{
	struct dlb_cache_key k, kdo, kother;
	struct pb a;
	uint8_t v[4096], w[4096];
	size_t len, vlen, off_ans;

	make_key("www.example.com", false, &k);
	make_key("www.example.com", true, &kdo);
	make_key("www.example.org", false, &kother);
	len = make_answer(&a, "www.example.com", DLB_F_RD, 300);
	vlen = dlb_l2_encode(&k, T0, a.b, len, v, sizeof(v));
	off_ans = DLB_L2_HDR + k.qname_len + k.opts_len;

	/* another question: a hash collision, or a planted value */
	assert_int_equal(decode(v, vlen, &kdo), DLB_L2_OTHER_KEY);
	assert_int_equal(decode(v, vlen, &kother), DLB_L2_OTHER_KEY);

	/* format */
	memcpy(w, v, vlen);
	w[0] = 'X';
	assert_int_equal(decode(w, vlen, &k), DLB_L2_BAD_FORMAT);
	memcpy(w, v, vlen);
	w[3] = 2;				/* another version */
	assert_int_equal(decode(w, vlen, &k), DLB_L2_BAD_FORMAT);
	memcpy(w, v, vlen);
	w[21] = 1;				/* reserved */
	assert_int_equal(decode(w, vlen, &k), DLB_L2_BAD_FORMAT);
	memcpy(w, v, vlen);
	w[vlen] = 0;				/* a trailing byte */
	assert_int_equal(decode(w, vlen + 1, &k), DLB_L2_BAD_FORMAT);
	memcpy(w, v, vlen);
	dlb_wr16(w + 22, (uint16_t)(len + 100));	/* an answer length past the end */
	assert_int_equal(decode(w, vlen, &k), DLB_L2_BAD_FORMAT);
	for (size_t n = 0; n < vlen; n++)		/* every truncation */
		assert_int_not_equal(decode(v, n, &k), DLB_L2_OK);

	/* answers that would not be accepted from a backend */
	memcpy(w, v, vlen);
	w[off_ans + 2] &= (uint8_t)~(DLB_F_QR >> 8);	/* QR = 0 */
	assert_int_equal(decode(w, vlen, &k), DLB_L2_BAD_ANSWER);
	memcpy(w, v, vlen);
	w[off_ans + 2] |= DLB_F_TC >> 8;		/* truncated */
	assert_int_equal(decode(w, vlen, &k), DLB_L2_BAD_ANSWER);
	memcpy(w, v, vlen);
	w[off_ans + 2] &= (uint8_t)~(DLB_F_RD >> 8);	/* RD differs from the key's */
	assert_int_equal(decode(w, vlen, &k), DLB_L2_BAD_ANSWER);
	memcpy(w, v, vlen);
	w[off_ans + 2] |= 0x28;				/* opcode 5 */
	assert_int_equal(decode(w, vlen, &k), DLB_L2_BAD_ANSWER);
	memcpy(w, v, vlen);
	w[off_ans + DLB_DNS_HDR + 1] = 'x';		/* "xww.example.com": another name */
	assert_int_equal(decode(w, vlen, &k), DLB_L2_BAD_ANSWER);
	memcpy(w, v, vlen);
	dlb_wr16(w + off_ans + DLB_DNS_HDR + k.qname_len, 28);	/* AAAA in the question */
	assert_int_equal(decode(w, vlen, &k), DLB_L2_BAD_ANSWER);
	memcpy(w, v, vlen);
	dlb_wr16(w + off_ans + 6, 5);			/* ancount 5, one record there */
	assert_int_equal(decode(w, vlen, &k), DLB_L2_BAD_ANSWER);
	memcpy(w, v, vlen);
	dlb_wr16(w + vlen - 6, 200);			/* the A's rdlength past the end */
	assert_int_equal(decode(w, vlen, &k), DLB_L2_BAD_ANSWER);
	memcpy(w, v, vlen);
	dlb_wr16(w + off_ans + 4, 0);			/* qdcount 0 */
	assert_int_equal(decode(w, vlen, &k), DLB_L2_BAD_ANSWER);
}

/* Every single-bit flip is either refused or decodes within the value's bounds. */
static void
test_bit_flips(void **state)
{
	struct dlb_cache_key k;
	struct pb a;
	uint8_t v[4096], w[4096];
	uint16_t offs[MAXT], nttl;
	const uint8_t *ans;
	double ins;
	size_t len, vlen, alen;

	make_key("a.b.example.net", false, &k);
	len = make_answer(&a, "A.b.EXAMPLE.net", DLB_F_RD, 60);
	vlen = dlb_l2_encode(&k, T0, a.b, len, v, sizeof(v));
	for (size_t i = 0; i < vlen * 8; i++) {
		memcpy(w, v, vlen);
		w[i / 8] ^= (uint8_t)(1u << (i % 8));
		if (dlb_l2_decode(w, vlen, &k, &ins, &ans, &alen, offs, MAXT, &nttl) != DLB_L2_OK)
			continue;
		assert_true(ans >= w && ans + alen == w + vlen);
		for (uint16_t t = 0; t < nttl; t++)
			assert_true(offs[t] + 4u <= alen);
	}
}

static void
test_answer_ttl(void **state)
{
	struct pb a;
	size_t len;

	len = make_answer(&a, "www.example.com", DLB_F_RD, 300);
	assert_int_equal(dlb_cache_answer_ttl(cache, a.b, len, -1), 300);
	len = make_answer(&a, "www.example.com", DLB_F_RD, 200000);
	assert_int_equal(dlb_cache_answer_ttl(cache, a.b, len, -1), 86400);	/* maxTTL */
	len = make_answer(&a, "www.example.com", DLB_F_RD | DLB_F_TC, 300);
	assert_int_equal(dlb_cache_answer_ttl(cache, a.b, len, -1), 0);	/* TC: never */
	len = make_answer(&a, "www.example.com", DLB_F_RD, 0);
	assert_int_equal(dlb_cache_answer_ttl(cache, a.b, len, -1), 0);
	/* SERVFAIL: temporaryFailureTTL, or the rules' value */
	a.n = 0;
	pb_hdr(&a, 1, DLB_F_QR | DLB_F_RD | DLB_RCODE_SERVFAIL, 1, 0, 0, 0);
	pb_question(&a, "www.example.com", 1, 1);
	assert_int_equal(dlb_cache_answer_ttl(cache, a.b, a.n, -1), 60);
	assert_int_equal(dlb_cache_answer_ttl(cache, a.b, a.n, 5), 5);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hash_stable),
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_bit_flips),
		cmocka_unit_test(test_answer_ttl),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
