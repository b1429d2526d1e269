/*
 * test_cache.c - the packet cache (cache.h): key computation and the
 * collision check, the copy-out patches (ID, the client's qname case, TTL
 * aging with compressed names), the insert rules (TC, temporary failures,
 * negative TTLs, maxTTL/minTTL, size, malformed answers), expiry, stale
 * serving, prefetch, payload ranks, the entry and byte bounds, and the
 * maintenance operations (expunge, expungeByName, purgeExpired, dump, isFull).
 *
 * Answers are real DNS messages built byte by byte below; the clock is the
 * @now argument, so every expectation is exact.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dnslb/core/cache.h"
#include "dnslb/core/rcu.h"
#include "dnslb/core/util.h"
#include "dnslb/core/wire.h"

#define T0	1700000000.0	/* insert time of most entries */
#define RD	DLB_F_RD
#define W_MAIN	DLB_MAX_WORKERS	/* the main thread's stats slot */
#define EDNS_DO	0x8000u	/* the DO bit in an OPT RR's TTL field */

static void *scratch(size_t n);

/* ---- a small DNS message builder ------------------------------------------ */

/* Messages remember their TTL fields' offsets (not OPT's): see pkt.h. */
#define PB_MAX		8192
#define PB_TRACK_TTLS
#include "pkt.h"

/* Wire form of @text into @out; @return its length. */
static size_t
wire_name(const char *text, uint8_t *out)
{
	struct pb *p = scratch(sizeof(*p));
	size_t n;

	pb_name(p, text);
	n = p->n;
	memcpy(out, p->b, n);
	return n;
}

static void
pb_a(struct pb *p, uint16_t owner, uint32_t ttl, uint32_t addr)
{
	uint8_t rd[4];

	dlb_wr32(rd, addr);
	pb_rr_at(p, owner, 1, ttl, rd, 4);
}

static void
pb_aaaa(struct pb *p, uint16_t owner, uint32_t ttl)
{
	static const uint8_t rd[16] = { 0x20, 0x01, 0x0d, 0xb8, [15] = 1 };

	pb_rr_at(p, owner, 28, ttl, rd, 16);
}

/*
 * SOA for the zone at offset @zone: MNAME "ns1" + pointer to the zone,
 * RNAME "hostmaster" + pointer, then serial, refresh, retry, expire, @minimum.
 */
static void
pb_soa(struct pb *p, uint16_t zone, uint32_t ttl, uint32_t minimum)
{
	size_t rdlen_at;

	pb_ptr(p, zone);
	rdlen_at = pb_rr_start(p, 6, ttl);
	pb_u8(p, 3);
	pb_bytes(p, "ns1", 3);
	pb_ptr(p, zone);
	pb_u8(p, 10);
	pb_bytes(p, "hostmaster", 10);
	pb_ptr(p, zone);
	pb_u32(p, 2024010101);
	pb_u32(p, 7200);
	pb_u32(p, 900);
	pb_u32(p, 1209600);
	pb_u32(p, minimum);
	pb_rr_end(p, rdlen_at);
}

/* A TXT record at @owner with @rdlen bytes of RDATA (character strings). */
static void
pb_txt(struct pb *p, uint16_t owner, uint32_t ttl, uint16_t rdlen)
{
	uint8_t rd[PB_MAX];
	size_t i = 0;

	assert_true(rdlen < PB_MAX);
	while (i < rdlen) {
		size_t l = rdlen - i - 1 > 255 ? 255 : rdlen - i - 1;

		rd[i] = (uint8_t)l;
		memset(rd + i + 1, 'x', l);
		i += 1 + l;
	}
	pb_rr_at(p, owner, 16, ttl, rd, rdlen);
}

/* Start an answer: header (QR, RA, @flags, counts) and the question. */
static void
ans_begin(struct pb *p, const char *qname, uint16_t qtype, uint16_t flags, uint16_t an,
	  uint16_t ns, uint16_t ar)
{
	pb_hdr(p, 0x1111, (uint16_t)(DLB_F_QR | DLB_F_RA | flags), 1, an, ns, ar);
	pb_question(p, qname, qtype, 1);
}

/* "<qname> A" answered with one A record (@ttl) and an OPT: ~60 bytes. */
static void
ans_a(struct pb *p, const char *qname, uint32_t ttl, uint32_t addr)
{
	ans_begin(p, qname, 1, RD, 1, 0, 1);
	pb_a(p, DLB_DNS_HDR, ttl, addr);
	pb_opt(p, 1232, 0, NULL, 0);
}

/* ---- queries and keys ------------------------------------------------------ */

struct qspec {
	const char *name;
	uint16_t qtype, qclass;		/* 0: A, IN */
	uint16_t flags;			/* header flags as sent (RD, CD, opcode) */
	uint16_t qdcount;		/* 0: 1 */
	uint16_t edns;			/* EDNS UDP size; 0: no OPT */
	bool do_bit;
	const uint8_t *opts;		/* OPT RDATA */
	uint16_t optlen;
	bool tcp;
	uint16_t id;
};

struct qry {
	struct pb p;
	struct dlb_dnsmsg m;
	struct dlb_cache_key k;
};

/* Build and parse the query @s; @return dlb_cache_key_make()'s result. */
static int
qry_make(const struct dlb_cache *c, struct qry *q, const struct qspec *s)
{
	struct pb *p = &q->p;
	uint16_t qd = s->qdcount != 0 ? s->qdcount : 1;

	pb_hdr(p, s->id, s->flags, qd, 0, 0, s->edns != 0 ? 1 : 0);
	for (uint16_t i = 0; i < qd; i++)
		pb_question(p, s->name, s->qtype != 0 ? s->qtype : 1, s->qclass != 0 ? s->qclass : 1);
	if (s->edns != 0)
		pb_opt(p, s->edns, s->do_bit ? EDNS_DO : 0, s->opts, s->optlen);
	assert_int_equal(dlb_wire_parse_query(p->b, p->n, &q->m), DLB_OK);
	return dlb_cache_key_make(c, p->b, &q->m, s->tcp, &q->k);
}

/* The key of the usual query: @name A IN, RD, EDNS 1232 over UDP. */
static void
qry_std(const struct dlb_cache *c, struct qry *q, const char *name)
{
	assert_int_equal(qry_make(c, q, &(struct qspec){ .name = name, .flags = RD, .edns = 1232 }),
			 0);
}

static bool
key_same(const struct dlb_cache_key *a, const struct dlb_cache_key *b)
{
	return a->hash == b->hash && a->qtype == b->qtype && a->qclass == b->qclass &&
	       a->qname_len == b->qname_len && a->payload_class == b->payload_class &&
	       a->flags == b->flags && a->opts_len == b->opts_len &&
	       memcmp(a->qname_lc, b->qname_lc, a->qname_len) == 0 &&
	       memcmp(a->opts, b->opts, a->opts_len) == 0;
}

/* ---- fixtures ---------------------------------------------------------------- */

/*
 * Each test registers an RCU thread; buffers and caches a test makes are
 * freed by the teardown, so a failing assertion (a longjmp) leaks nothing.
 */
static struct dlb_rcu_thread rt;
static void *scratch_ptrs[256];
static int nscratch;
static struct dlb_cache *live[8];

/* Zeroed memory that lives until the end of the test. */
static void *
scratch(size_t n)
{
	void *p = calloc(1, n);

	assert_non_null(p);
	assert_true(nscratch < (int)(sizeof(scratch_ptrs) / sizeof(scratch_ptrs[0])));
	scratch_ptrs[nscratch++] = p;
	return p;
}

static int
rcu_setup(void **state)
{
	return dlb_rcu_register(&rt);
}

static int
rcu_teardown(void **state)
{
	dlb_rcu_barrier(&rt);
	for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++) {
		dlb_cache_free(live[i]);
		live[i] = NULL;
	}
	while (nscratch > 0)
		free(scratch_ptrs[--nscratch]);
	dlb_rcu_unregister(&rt);
	return 0;
}

static struct dlb_cache *
cache_with(uint32_t max_entries, void (*tweak)(struct dlb_cache_opts *))
{
	struct dlb_cache_opts o;
	struct dlb_cache *c;

	dlb_cache_opts_default(&o);
	o.max_entries = max_entries;
	if (tweak != NULL)
		tweak(&o);
	c = dlb_cache_new(&o);
	assert_non_null(c);
	for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++) {
		if (live[i] == NULL) {
			live[i] = c;
			return c;
		}
	}
	fail_msg("too many caches in one test");
	return NULL;
}

/* Everything retired is reclaimed before the cache goes away. */
static void
cache_done(struct dlb_cache *c)
{
	dlb_rcu_barrier(&rt);
	for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++)
		if (live[i] == c)
			live[i] = NULL;
	dlb_cache_free(c);
}

static struct dlb_cache_stats
stats(const struct dlb_cache *c)
{
	struct dlb_cache_stats st;

	dlb_cache_get_stats(c, &st);
	return st;
}

/* Result of a lookup + copy-out by query @q at @now into @out. */
static enum dlb_cache_result
get(struct dlb_cache *c, const struct qry *q, double now, uint32_t stale, uint8_t *out,
    size_t *len)
{
	bool pf;
	enum dlb_cache_result r;

	dlb_rcu_enter(&rt);
	r = dlb_cache_get(c, &q->k, q->m.id, q->p.b + q->m.qname_off, now, stale, out, PB_MAX,
			  len, &pf, W_MAIN);
	dlb_rcu_exit(&rt);
	return r;
}

static bool
put(struct dlb_cache *c, const struct qry *q, const struct pb *a, double now)
{
	return dlb_cache_insert(c, &rt, &q->k, a->b, a->n, now, -1);
}

/* ---- keys -------------------------------------------------------------------- */

static void
test_new_rejects_zero(void **state)
{
	struct dlb_cache_opts o;

	dlb_cache_opts_default(&o);
	assert_null(dlb_cache_new(&o));
	assert_int_equal(o.max_ttl, 86400);
	assert_int_equal(o.temp_failure_ttl, 60);
	assert_int_equal(o.max_negative_ttl, 3600);
	assert_int_equal(o.stale_ttl, 60);
	assert_int_equal(o.maximum_entry_size, 4096);
}

static void
test_key_case_insensitive(void **state)
{
	struct dlb_cache *c = cache_with(100, NULL);
	struct qry *a = scratch(sizeof(*a)), *b = scratch(sizeof(*b));
	struct pb *ans = scratch(sizeof(*ans));
	uint8_t out[PB_MAX], lc[DLB_MAX_NAME];
	size_t len;

	qry_std(c, a, "www.Example.COM");
	qry_std(c, b, "WWW.example.com");
	assert_true(key_same(&a->k, &b->k));
	assert_int_equal(a->k.qname_len, wire_name("www.example.com", lc));
	assert_memory_equal(a->k.qname_lc, lc, a->k.qname_len);
	assert_int_equal(a->k.max_answer, 65535);	/* no payloadRanks: no bound */
	assert_int_equal(a->k.payload_class, 1232);
	assert_int_equal(a->k.flags, DLB_CK_RD | DLB_CK_EDNS);

	/* inserted under one spelling, found under the other, in the client's case */
	ans_a(ans, "www.Example.COM", 300, 0x01020304);
	assert_true(put(c, a, ans, T0));
	assert_int_equal(get(c, b, T0, 0, out, &len), DLB_CACHE_HIT);
	assert_int_equal(len, ans->n);
	assert_memory_equal(out + DLB_DNS_HDR, "\3WWW\7example\3com", 17);
	assert_memory_equal(out + DLB_DNS_HDR + 17, ans->b + DLB_DNS_HDR + 17, len - 29);
	assert_int_equal(stats(c).hits, 1);
	assert_int_equal(stats(c).misses, 0);
	cache_done(c);
}

/* Every field that changes the answer gives another key, and another entry. */
static void
test_key_fields(void **state)
{
	static const struct qspec specs[] = {
		{ .name = "www.example.com", .flags = RD, .edns = 1232 },	/* base */
		{ .name = "www.example.com", .qtype = 28, .flags = RD, .edns = 1232 },
		{ .name = "www.example.com", .qclass = 3, .flags = RD, .edns = 1232 },
		{ .name = "www.example.com", .flags = 0, .edns = 1232 },
		{ .name = "www.example.com", .flags = RD | DLB_F_CD, .edns = 1232 },
		{ .name = "www.example.com", .flags = RD, .edns = 1232, .do_bit = true },
		{ .name = "www.example.com", .flags = RD, .edns = 1232, .tcp = true },
		{ .name = "www.example.com", .flags = RD, .edns = 4096 },
		{ .name = "www.example.com", .flags = RD },
		{ .name = "www.example.org", .flags = RD, .edns = 1232 },
	};
	enum { N = sizeof(specs) / sizeof(specs[0]) };
	struct dlb_cache *c = cache_with(100, NULL);
	struct qry *q = scratch(N * sizeof(*q));
	struct pb *ans = scratch(sizeof(*ans));
	uint8_t out[PB_MAX];
	size_t len;

	for (int i = 0; i < N; i++)
		assert_int_equal(qry_make(c, &q[i], &specs[i]), 0);
	for (int i = 0; i < N; i++)
		for (int j = i + 1; j < N; j++)
			assert_true(q[i].k.hash != q[j].k.hash);
	assert_int_equal(q[5].k.flags, DLB_CK_RD | DLB_CK_EDNS | DLB_CK_DO);
	assert_int_equal(q[4].k.flags, DLB_CK_RD | DLB_CK_CD | DLB_CK_EDNS);
	assert_int_equal(q[6].k.flags, DLB_CK_RD | DLB_CK_EDNS | DLB_CK_TCP);
	assert_int_equal(q[6].k.max_answer, 65535);
	assert_int_equal(q[8].k.flags, DLB_CK_RD);
	assert_int_equal(q[8].k.payload_class, 0);
	assert_int_equal(q[8].k.max_answer, 65535);	/* no payloadRanks: no bound */

	/* the base's answer is served to the base only, even with a forged equal hash */
	ans_a(ans, "www.example.com", 300, 0x01020304);
	assert_true(put(c, &q[0], ans, T0));
	for (int i = 1; i < N; i++) {
		assert_int_equal(get(c, &q[i], T0, 0, out, &len), DLB_CACHE_MISS);
		q[i].k.hash = q[0].k.hash;
		assert_int_equal(get(c, &q[i], T0, 0, out, &len), DLB_CACHE_MISS);
	}
	assert_int_equal(get(c, &q[0], T0, 0, out, &len), DLB_CACHE_HIT);
	assert_int_equal(stats(c).lookup_collisions, N - 1);
	assert_int_equal(stats(c).misses, 2 * (N - 1));
	cache_done(c);
}

static void
opt_append(uint8_t *buf, uint16_t *len, uint16_t code, const void *data, uint16_t dlen)
{
	dlb_wr16(buf + *len, code);
	dlb_wr16(buf + *len + 2, dlen);
	if (dlen > 0)
		memcpy(buf + *len + 4, data, dlen);
	*len = (uint16_t)(*len + 4 + dlen);
}

static uint64_t
hash_with_opts(const struct dlb_cache *c, const uint8_t *opts, uint16_t optlen, int *rc)
{
	struct qry *q = scratch(sizeof(*q));
	uint64_t h;

	*rc = qry_make(c, q, &(struct qspec){ .name = "www.example.com", .flags = RD,
					      .edns = 1232, .opts = opts, .optlen = optlen });
	h = q->k.hash;
	return h;
}

static void
skip_65001(struct dlb_cache_opts *o)
{
	o->skip_options[0] = 65001;
	o->nskip = 1;
}

static void
cookie_hashing(struct dlb_cache_opts *o)
{
	o->cookie_hashing = true;
}

static void
test_key_edns_options(void **state)
{
	struct dlb_cache *c = cache_with(100, NULL);
	struct dlb_cache *cs = cache_with(100, skip_65001);
	struct dlb_cache *cc = cache_with(100, cookie_hashing);
	static const uint8_t cookie1[8] = "AAAAAAAA", cookie2[8] = "BBBBBBBB", pad[20];
	static const uint8_t ecs1[7] = { 0, 1, 24, 0, 192, 0, 2 }, ecs2[7] = { 0, 1, 24, 0, 198, 51, 100 };
	uint8_t o1[256], o2[256];
	uint16_t l1 = 0, l2 = 0;
	uint64_t none, h1, h2;
	int rc;

	none = hash_with_opts(c, NULL, 0, &rc);
	assert_int_equal(rc, 0);

	/* COOKIE: its content is ignored unless cookieHashing; its length
	 * counts (dnsdist hashes the OPT's RDLENGTH) */
	opt_append(o1, &l1, DLB_EDNS_OPT_COOKIE, cookie1, 8);
	opt_append(o2, &l2, DLB_EDNS_OPT_COOKIE, cookie2, 8);
	assert_true(hash_with_opts(c, o1, l1, &rc) == hash_with_opts(c, o2, l2, &rc));
	assert_true(hash_with_opts(c, o1, l1, &rc) != none);
	l2 = 0;
	opt_append(o2, &l2, DLB_EDNS_OPT_COOKIE, pad, 16);
	assert_true(hash_with_opts(c, o1, l1, &rc) != hash_with_opts(c, o2, l2, &rc));
	l2 = 0;
	opt_append(o2, &l2, DLB_EDNS_OPT_COOKIE, cookie2, 8);
	h1 = hash_with_opts(cc, o1, l1, &rc);
	h2 = hash_with_opts(cc, o2, l2, &rc);
	assert_true(h1 != h2);
	assert_true(h1 != hash_with_opts(cc, NULL, 0, &rc));

	/* PADDING: its content always ignored, its length counts */
	l1 = l2 = 0;
	opt_append(o1, &l1, DLB_EDNS_OPT_PADDING, pad, 20);
	opt_append(o2, &l2, DLB_EDNS_OPT_PADDING, cookie1, 8);
	opt_append(o2, &l2, DLB_EDNS_OPT_PADDING, cookie2, 8);
	assert_true(hash_with_opts(c, o1, l1, &rc) != none);
	assert_true(hash_with_opts(cc, o1, l1, &rc) != hash_with_opts(cc, NULL, 0, &rc));

	/* an unknown option is part of the key, unless in skipOptions */
	l1 = l2 = 0;
	opt_append(o1, &l1, 65001, "one", 3);
	opt_append(o2, &l2, 65001, "two", 3);
	h1 = hash_with_opts(c, o1, l1, &rc);
	h2 = hash_with_opts(c, o2, l2, &rc);
	assert_true(h1 != h2 && h1 != none && h2 != none);
	assert_true(hash_with_opts(cs, o1, l1, &rc) == hash_with_opts(cs, o2, l2, &rc));
	assert_true(hash_with_opts(cs, o1, l1, &rc) != hash_with_opts(cs, NULL, 0, &rc));

	/* ECS: part of the key (its address and prefix) */
	l1 = l2 = 0;
	opt_append(o1, &l1, DLB_EDNS_OPT_ECS, ecs1, 7);
	opt_append(o2, &l2, DLB_EDNS_OPT_ECS, ecs2, 7);
	h1 = hash_with_opts(c, o1, l1, &rc);
	h2 = hash_with_opts(c, o2, l2, &rc);
	assert_true(h1 != h2 && h1 != none && h2 != none);
	assert_true(hash_with_opts(c, o1, l1, &rc) == h1);

	/* ECS + cookie + padding: the ECS and the others' lengths count */
	opt_append(o1, &l1, DLB_EDNS_OPT_COOKIE, cookie2, 8);
	opt_append(o1, &l1, DLB_EDNS_OPT_PADDING, pad, 12);
	l2 = 0;
	opt_append(o2, &l2, DLB_EDNS_OPT_ECS, ecs1, 7);
	opt_append(o2, &l2, DLB_EDNS_OPT_COOKIE, cookie1, 8);
	opt_append(o2, &l2, DLB_EDNS_OPT_PADDING, "xxxxxxxxxxxx", 12);
	assert_true(hash_with_opts(c, o1, l1, &rc) != h1);
	assert_true(hash_with_opts(c, o1, l1, &rc) == hash_with_opts(c, o2, l2, &rc));

	/* options longer than a key holds: not cacheable; exactly 64 bytes fit */
	{
		static const uint8_t big[61];

		l1 = 0;
		opt_append(o1, &l1, 65002, big, 60);
		assert_int_equal(l1, DLB_CACHE_MAX_OPTS);
		hash_with_opts(c, o1, l1, &rc);
		assert_int_equal(rc, 0);
		l1 = 0;
		opt_append(o1, &l1, 65002, big, 61);
		hash_with_opts(c, o1, l1, &rc);
		assert_int_equal(rc, -1);
		/* the same bytes in skipped options are no problem */
		l1 = 0;
		opt_append(o1, &l1, DLB_EDNS_OPT_PADDING, big, 61);
		opt_append(o1, &l1, 65001, big, 61);
		hash_with_opts(cs, o1, l1, &rc);
		assert_int_equal(rc, 0);	/* only their headers are kept */
	}
	cache_done(c);
	cache_done(cs);
	cache_done(cc);
}

static void
ranks_3(struct dlb_cache_opts *o)
{
	o->payload_ranks[0] = 512;
	o->payload_ranks[1] = 1232;
	o->payload_ranks[2] = 4096;
	o->nranks = 3;
}

/* payloadRanks: clients in one size class share entries when the answer fits. */
static void
test_key_payload_ranks(void **state)
{
	static const struct { uint16_t edns, cls; } t[] = {
		{ 400, 1 }, { 512, 1 }, { 1000, 1 }, { 1231, 1 }, { 1232, 2 }, { 1400, 2 },
		{ 4095, 2 }, { 4096, 3 }, { 65000, 3 },
	};
	struct dlb_cache *c = cache_with(100, ranks_3);
	struct qry *q = scratch(sizeof(*q)), *q1232 = scratch(sizeof(*q1232));
	struct qry *q1400 = scratch(sizeof(*q1400)), *q512 = scratch(sizeof(*q512));
	struct pb *ans = scratch(sizeof(*ans));
	uint8_t out[PB_MAX];
	size_t len;

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		assert_int_equal(qry_make(c, q, &(struct qspec){ .name = "www.example.com",
								.flags = RD, .edns = t[i].edns }), 0);
		assert_int_equal(q->k.payload_class, t[i].cls);
		assert_int_equal(q->k.max_answer, t[i].edns < 512 ? 512 : t[i].edns);
	}
	assert_int_equal(qry_make(c, q512, &(struct qspec){ .name = "www.example.com", .flags = RD,
							  .edns = 512 }), 0);
	assert_int_equal(qry_make(c, q, &(struct qspec){ .name = "www.example.com", .flags = RD,
						       .edns = 1000 }), 0);
	assert_true(key_same(&q512->k, &q->k));
	assert_int_equal(qry_make(c, q1232, &(struct qspec){ .name = "www.example.com",
							   .flags = RD, .edns = 1232 }), 0);
	assert_int_equal(qry_make(c, q1400, &(struct qspec){ .name = "www.example.com",
							   .flags = RD, .edns = 1400 }), 0);
	assert_true(key_same(&q1232->k, &q1400->k));
	assert_false(key_same(&q512->k, &q1232->k));

	/* 900 bytes, fetched for the 1000-byte client: fits 1000, not 512 */
	ans_begin(ans, "www.example.com", 1, RD, 1, 0, 0);
	pb_txt(ans, DLB_DNS_HDR, 300, (uint16_t)(900 - 33 - 12));
	assert_int_equal(ans->n, 900);
	assert_true(put(c, q, ans, T0));
	assert_int_equal(get(c, q, T0 + 1, 0, out, &len), DLB_CACHE_HIT);
	assert_int_equal(len, 900);
	assert_int_equal(get(c, q512, T0 + 1, 0, out, &len), DLB_CACHE_MISS);
	assert_int_equal(len, 0);

	/* 1300 bytes in class 2: the 1400-byte client hits, the 1232-byte one misses */
	ans_begin(ans, "www.example.com", 1, RD, 1, 0, 0);
	pb_txt(ans, DLB_DNS_HDR, 300, (uint16_t)(1300 - 33 - 12));
	assert_true(put(c, q1400, ans, T0));
	assert_int_equal(get(c, q1400, T0 + 1, 0, out, &len), DLB_CACHE_HIT);
	assert_int_equal(len, 1300);
	assert_int_equal(get(c, q1232, T0 + 1, 0, out, &len), DLB_CACHE_MISS);
	assert_int_equal(stats(c).hits, 2);
	assert_int_equal(stats(c).misses, 2);
	cache_done(c);
}

static void
test_key_not_cacheable(void **state)
{
	struct dlb_cache *c = cache_with(100, NULL);
	struct qry *q = scratch(sizeof(*q));

	assert_int_equal(qry_make(c, q, &(struct qspec){ .name = "a.example", .flags = RD }), 0);
	assert_int_equal(qry_make(c, q, &(struct qspec){ .name = "a.example", .flags = RD,
						       .qdcount = 2 }), -1);
	assert_int_equal(qry_make(c, q, &(struct qspec){ .name = "a.example", .qtype = 252 }), -1);
	assert_int_equal(qry_make(c, q, &(struct qspec){ .name = "a.example", .qtype = 251 }), -1);
	assert_int_equal(qry_make(c, q, &(struct qspec){ .name = "a.example",
						       .flags = 4 << 11 /* NOTIFY */ }), -1);
	assert_int_equal(qry_make(c, q, &(struct qspec){ .name = "a.example",
						       .flags = 5 << 11 /* UPDATE */ }), -1);
	cache_done(c);
}

/* A lookup compares the stored question: equal hashes never mix names. */
static void
test_hash_collision(void **state)
{
	struct dlb_cache *c = cache_with(100, NULL);
	struct qry *a = scratch(sizeof(*a)), *b = scratch(sizeof(*b));
	struct pb *aa = scratch(sizeof(*aa)), *ab = scratch(sizeof(*ab));
	uint8_t out[PB_MAX];
	size_t len;

	qry_std(c, a, "a.example.com");
	qry_std(c, b, "b.example.com");
	b->k.hash = a->k.hash;
	ans_a(aa, "a.example.com", 300, 0x0a000001);
	ans_a(ab, "b.example.com", 300, 0x0a000002);
	dlb_wr16(aa->b, a->m.id);	/* what a hit answers */
	dlb_wr16(ab->b, b->m.id);
	assert_true(put(c, a, aa, T0));
	assert_int_equal(get(c, b, T0, 0, out, &len), DLB_CACHE_MISS);
	assert_int_equal(stats(c).lookup_collisions, 1);
	assert_int_equal(stats(c).misses, 1);

	/* both can live in the same set; each lookup gets its own answer */
	assert_true(put(c, b, ab, T0));
	assert_int_equal(stats(c).insert_collisions, 1);
	assert_int_equal(stats(c).entries, 2);
	assert_int_equal(get(c, a, T0, 0, out, &len), DLB_CACHE_HIT);
	assert_int_equal(len, aa->n);
	assert_memory_equal(out, aa->b, len);
	assert_int_equal(get(c, b, T0, 0, out, &len), DLB_CACHE_HIT);
	assert_int_equal(len, ab->n);
	assert_memory_equal(out, ab->b, len);

	/* and expunging one leaves the other */
	assert_int_equal(dlb_cache_expunge_by_name(c, &rt, a->k.qname_lc, a->k.qname_len, 255,
						   false), 1);
	assert_int_equal(get(c, a, T0, 0, out, &len), DLB_CACHE_MISS);
	assert_int_equal(get(c, b, T0, 0, out, &len), DLB_CACHE_HIT);
	assert_memory_equal(out, ab->b, len);
	cache_done(c);
}

/* ---- copy-out ---------------------------------------------------------------- */

/*
 * www.example.com A: CNAME to web.example.com, A records owned by the
 * CNAME's target (a pointer into RDATA), NS + SOA in the authority section
 * owned by "example.com" (a pointer into the question), glue in the additional
 * section owned by "ns1" + pointer, and an OPT with DO.
 */
static void
ans_rich(struct pb *p, const char *qname)
{
	uint16_t zone = DLB_DNS_HDR + 4, target, ns1;
	uint8_t rd[64];
	size_t rdlen;

	ans_begin(p, qname, 1, RD, 3, 2, 3);
	/* CNAME: "web" + pointer to example.com */
	rd[0] = 3;
	memcpy(rd + 1, "web", 3);
	dlb_wr16(rd + 4, (uint16_t)(0xc000 | zone));
	rdlen = 6;
	target = (uint16_t)(p->n + 12);
	pb_rr_at(p, DLB_DNS_HDR, 5, 3600, rd, (uint16_t)rdlen);
	pb_a(p, target, 300, 0xc0000201);
	pb_a(p, target, 250, 0xc0000202);
	/* authority: NS ns1.example.com, SOA */
	rd[0] = 3;
	memcpy(rd + 1, "ns1", 3);
	dlb_wr16(rd + 4, (uint16_t)(0xc000 | zone));
	ns1 = (uint16_t)(p->n + 12);
	pb_rr_at(p, zone, 2, 86400, rd, 6);
	pb_soa(p, zone, 900, 120);
	/* additional: ns1 A and AAAA, OPT */
	pb_a(p, ns1, 7200, 0xc0000235);
	pb_aaaa(p, ns1, 7000);
	pb_opt(p, 1232, EDNS_DO, NULL, 0);
}

static void
test_copy_out_patches(void **state)
{
	struct dlb_cache *c = cache_with(100, NULL);
	struct qry *q = scratch(sizeof(*q)), *client = scratch(sizeof(*client));
	struct pb *ans = scratch(sizeof(*ans));
	uint8_t out[PB_MAX], expect[PB_MAX];
	size_t len;

	qry_std(c, q, "www.example.com");
	ans_rich(ans, "www.example.com");
	assert_int_equal(ans->nttl, 7);
	assert_true(put(c, q, ans, T0));

	assert_int_equal(qry_make(c, client, &(struct qspec){ .name = "wWw.ExAmple.cOM",
							    .flags = RD, .edns = 1232,
							    .id = 0xbeef }), 0);
	assert_int_equal(get(c, client, T0 + 10, 0, out, &len), DLB_CACHE_HIT);
	assert_int_equal(len, ans->n);
	/* expected: the original with the ID, the client's case and TTLs - 10 */
	memcpy(expect, ans->b, ans->n);
	dlb_wr16(expect, 0xbeef);
	memcpy(expect + DLB_DNS_HDR, "\3wWw\7ExAmple\3cOM", 17);
	for (int i = 0; i < ans->nttl; i++)
		dlb_wr32(expect + ans->ttl_off[i], ans->ttl_val[i] - 10);
	assert_memory_equal(out, expect, len);
	/* the OPT's TTL field (DO) is not a TTL: still 0x00008000 */
	assert_int_equal(dlb_rd32(out + len - 6), 0x8000);

	/* fractions of a second do not age; at 249.5 s the smallest TTL is 1 */
	assert_int_equal(get(c, client, T0 + 0.9, 0, out, &len), DLB_CACHE_HIT);
	assert_int_equal(dlb_rd32(out + ans->ttl_off[2]), 250);
	assert_int_equal(get(c, client, T0 + 249.5, 0, out, &len), DLB_CACHE_HIT);
	assert_int_equal(dlb_rd32(out + ans->ttl_off[2]), 1);
	assert_int_equal(dlb_rd32(out + ans->ttl_off[0]), 3600 - 249);
	assert_int_equal(get(c, client, T0 + 250, 0, out, &len), DLB_CACHE_MISS);
	/* a clock behind the insert time does not age either */
	assert_int_equal(get(c, client, T0 - 5, 0, out, &len), DLB_CACHE_HIT);
	assert_int_equal(dlb_rd32(out + ans->ttl_off[5]), 7200);

	/* @qname may alias @out: the client's query is in the output buffer */
	{
		bool pf;
		enum dlb_cache_result r;
		const struct dlb_cache_entry *e;

		memcpy(out, client->p.b, client->p.n);
		dlb_rcu_enter(&rt);
		e = dlb_cache_lookup(c, &client->k, T0 + 10, 0, &r, &pf, W_MAIN);
		assert_non_null(e);
		assert_int_equal(r, DLB_CACHE_HIT);
		assert_false(pf);
		assert_int_equal(dlb_cache_copy_out(c, e, r, 0xbeef, out + DLB_DNS_HDR, T0 + 10,
						    out, sizeof(out)), ans->n);
		/* too small a buffer: 0, nothing claimed */
		assert_int_equal(dlb_cache_copy_out(c, e, r, 0xbeef, out + DLB_DNS_HDR, T0 + 10,
						    expect, ans->n - 1), 0);
		dlb_rcu_exit(&rt);
		memcpy(expect, ans->b, ans->n);
		dlb_wr16(expect, 0xbeef);
		memcpy(expect + DLB_DNS_HDR, "\3wWw\7ExAmple\3cOM", 17);
		for (int i = 0; i < ans->nttl; i++)
			dlb_wr32(expect + ans->ttl_off[i], ans->ttl_val[i] - 10);
		assert_memory_equal(out, expect, ans->n);

		/* ... or lie in it elsewhere, where the answer's bytes land on
		 * it: the name is saved before the copy overwrites it */
		memset(out, 0, sizeof(out));
		memcpy(out + 40, client->p.b + DLB_DNS_HDR, 17);
		dlb_rcu_enter(&rt);
		e = dlb_cache_lookup(c, &client->k, T0 + 10, 0, &r, &pf, W_MAIN);
		assert_non_null(e);
		assert_int_equal(dlb_cache_copy_out(c, e, r, 0xbeef, out + 40, T0 + 10, out,
						    sizeof(out)), ans->n);
		dlb_rcu_exit(&rt);
		assert_memory_equal(out, expect, ans->n);
	}
	assert_int_equal(stats(c).hits, 6);
	assert_int_equal(stats(c).misses, 1);
	cache_done(c);
}

static void
dont_age(struct dlb_cache_opts *o)
{
	o->dont_age = true;
}

static void
test_copy_out_dont_age(void **state)
{
	struct dlb_cache *c = cache_with(100, dont_age);
	struct qry *q = scratch(sizeof(*q));
	struct pb *ans = scratch(sizeof(*ans));
	uint8_t out[PB_MAX];
	size_t len;

	qry_std(c, q, "www.example.com");
	ans_rich(ans, "www.example.com");
	assert_true(put(c, q, ans, T0));
	assert_int_equal(get(c, q, T0 + 200, 0, out, &len), DLB_CACHE_HIT);
	dlb_wr16(ans->b, q->m.id);
	assert_memory_equal(out, ans->b, ans->n);
	cache_done(c);
}

/* Records with TTLs below the entry's lifetime age to 0, never below. */
static void
test_copy_out_ttl_floor(void **state)
{
	struct dlb_cache *c = cache_with(100, NULL);
	struct qry *q = scratch(sizeof(*q));
	struct pb *ans = scratch(sizeof(*ans));
	uint8_t out[PB_MAX];
	size_t len;

	qry_std(c, q, "www.example.com");
	/* a SERVFAIL lives temporaryFailureTTL (60 s), whatever its records say */
	ans_begin(ans, "www.example.com", 1, RD | DLB_RCODE_SERVFAIL, 1, 0, 1);
	pb_a(ans, DLB_DNS_HDR, 5, 0x01020304);
	pb_opt(ans, 1232, 0, NULL, 0);
	assert_true(put(c, q, ans, T0));
	assert_int_equal(get(c, q, T0 + 3, 0, out, &len), DLB_CACHE_HIT);
	assert_int_equal(dlb_rd32(out + ans->ttl_off[0]), 2);
	assert_int_equal(get(c, q, T0 + 30, 0, out, &len), DLB_CACHE_HIT);
	assert_int_equal(dlb_rd32(out + ans->ttl_off[0]), 0);
	assert_int_equal(get(c, q, T0 + 59, 0, out, &len), DLB_CACHE_HIT);
	assert_int_equal(dlb_rd32(out + ans->ttl_off[0]), 0);
	assert_int_equal(get(c, q, T0 + 60, 0, out, &len), DLB_CACHE_MISS);
	cache_done(c);
}

/* ---- insert rules ------------------------------------------------------------- */

/* Lifetime of the entry for @q: the first whole second at which it misses. */
static int
lifetime(struct dlb_cache *c, const struct qry *q, double t0)
{
	uint8_t out[PB_MAX];
	size_t len;

	for (int s = 0; s <= 100000; s++)
		if (get(c, q, t0 + s, 0, out, &len) == DLB_CACHE_MISS)
			return s;
	return -1;
}

static void
test_insert_tc_and_malformed(void **state)
{
	struct dlb_cache *c = cache_with(100, NULL);
	struct qry *q = scratch(sizeof(*q));
	struct pb *ans = scratch(sizeof(*ans));

	qry_std(c, q, "www.example.com");
	/* TC */
	ans_begin(ans, "www.example.com", 1, RD | DLB_F_TC, 1, 0, 0);
	pb_a(ans, DLB_DNS_HDR, 300, 1);
	assert_false(put(c, q, ans, T0));
	/* a record cut short */
	ans_a(ans, "www.example.com", 300, 1);
	assert_false(dlb_cache_insert(c, &rt, &q->k, ans->b, ans->n - 13, T0, -1));
	/* counts promising more records than there are */
	ans_a(ans, "www.example.com", 300, 1);
	dlb_wr16(ans->b + 6, 2);
	assert_false(put(c, q, ans, T0));
	/* RDLENGTH past the end */
	ans_begin(ans, "www.example.com", 1, RD, 1, 0, 0);
	pb_a(ans, DLB_DNS_HDR, 300, 1);
	dlb_wr16(ans->b + ans->n - 6, 5);
	assert_false(put(c, q, ans, T0));
	/* a bad owner name: label type 01 */
	ans_begin(ans, "www.example.com", 1, RD, 1, 0, 0);
	pb_u8(ans, 0x41);
	pb_bytes(ans, "x", 1);
	pb_u8(ans, 0);
	pb_rr_tail(ans, 1, 1, 300, "\1\2\3\4", 4);
	assert_false(put(c, q, ans, T0));
	/* a bad owner name: a forward compression pointer */
	ans_begin(ans, "www.example.com", 1, RD, 1, 0, 0);
	pb_rr_at(ans, (uint16_t)(ans->n + 4), 1, 300, "\1\2\3\4", 4);
	assert_false(put(c, q, ans, T0));
	/* a bad name inside a SOA */
	ans_begin(ans, "www.example.com", 1, RD | DLB_RCODE_NXDOMAIN, 0, 1, 0);
	pb_soa(ans, DLB_DNS_HDR + 4, 300, 300);
	ans->b[ans->n - 20 - 2 - 11 - 2 - 3 - 1] = 0x80;	/* "ns1" length octet */
	assert_false(put(c, q, ans, T0));
	/* qdcount 0, and no header at all */
	ans_a(ans, "www.example.com", 300, 1);
	dlb_wr16(ans->b + 4, 0);
	assert_false(put(c, q, ans, T0));
	assert_false(dlb_cache_insert(c, &rt, &q->k, ans->b, 11, T0, -1));
	/* another question than the key's (the entry stores the key's name in
	 * the answer): a name of the same length, another type, another class */
	ans_a(ans, "www.examplx.com", 300, 1);
	assert_false(put(c, q, ans, T0));
	ans_a(ans, "www.example.com", 300, 1);
	dlb_wr16(ans->b + DLB_DNS_HDR + 17, 28);
	assert_false(put(c, q, ans, T0));
	ans_a(ans, "www.example.com", 300, 1);
	dlb_wr16(ans->b + DLB_DNS_HDR + 19, 3);
	assert_false(put(c, q, ans, T0));

	assert_int_equal(stats(c).entries, 0);
	assert_int_equal(stats(c).bytes, 0);
	assert_int_equal(stats(c).not_cacheable, 12);
	/* the well-formed one is cached */
	ans_a(ans, "www.example.com", 300, 1);
	assert_true(put(c, q, ans, T0));
	assert_int_equal(stats(c).entries, 1);
	cache_done(c);
}

static void
no_temp_failures(struct dlb_cache_opts *o)
{
	o->temp_failure_ttl = 0;
}

static void
test_insert_temporary_failures(void **state)
{
	struct dlb_cache *c = cache_with(100, NULL);
	struct dlb_cache *c0 = cache_with(100, no_temp_failures);
	struct qry *q = scratch(sizeof(*q));
	struct pb *ans = scratch(sizeof(*ans));

	qry_std(c, q, "www.example.com");
	ans_begin(ans, "www.example.com", 1, RD | DLB_RCODE_SERVFAIL, 0, 0, 1);
	pb_opt(ans, 1232, 0, NULL, 0);
	assert_true(put(c, q, ans, T0));
	assert_int_equal(lifetime(c, q, T0), 60);
	/* per-call override: 5 s, and 0 = not cached */
	assert_true(dlb_cache_insert(c, &rt, &q->k, ans->b, ans->n, T0, 5));
	assert_int_equal(lifetime(c, q, T0), 5);
	assert_int_equal(dlb_cache_expunge(c, &rt, 0), 1);
	assert_false(dlb_cache_insert(c, &rt, &q->k, ans->b, ans->n, T0, 0));
	assert_int_equal(stats(c).entries, 0);

	/* REFUSED the same */
	ans_begin(ans, "www.example.com", 1, RD | DLB_RCODE_REFUSED, 0, 0, 0);
	assert_true(put(c, q, ans, T0));
	assert_int_equal(lifetime(c, q, T0), 60);

	/* temporaryFailureTTL = 0: not cached, unless the call overrides */
	assert_int_equal(qry_make(c0, q, &(struct qspec){ .name = "www.example.com", .flags = RD,
							.edns = 1232 }), 0);
	assert_false(put(c0, q, ans, T0));
	assert_int_equal(stats(c0).entries, 0);
	assert_true(dlb_cache_insert(c0, &rt, &q->k, ans->b, ans->n, T0, 30));
	assert_int_equal(lifetime(c0, q, T0), 30);
	cache_done(c);
	cache_done(c0);
}

/* NXDOMAIN or NODATA with a SOA whose TTL is @soa_ttl and MINIMUM @min. */
static void
ans_negative(struct pb *p, uint16_t rcode, uint32_t soa_ttl, uint32_t min)
{
	ans_begin(p, "nope.example.com", 1, (uint16_t)(RD | rcode), 0, 1, 1);
	pb_soa(p, DLB_DNS_HDR + 5, soa_ttl, min);
	pb_opt(p, 1232, 0, NULL, 0);
}

static void
max_negative_50(struct dlb_cache_opts *o)
{
	o->max_negative_ttl = 50;
}

static void
test_insert_negative(void **state)
{
	struct dlb_cache *c = cache_with(100, NULL);
	struct dlb_cache *cm = cache_with(100, max_negative_50);
	struct qry *q = scratch(sizeof(*q)), *qm = scratch(sizeof(*qm));
	struct pb *ans = scratch(sizeof(*ans));
	static const uint16_t rcodes[] = { DLB_RCODE_NXDOMAIN, DLB_RCODE_NOERROR };
	uint8_t out[PB_MAX];
	size_t len;

	qry_std(c, q, "nope.example.com");
	qry_std(cm, qm, "nope.example.com");
	for (int i = 0; i < 2; i++) {
		/* min(SOA TTL, MINIMUM), capped by maxNegativeTTL */
		ans_negative(ans, rcodes[i], 3600, 300);
		assert_true(put(c, q, ans, T0));
		assert_int_equal(lifetime(c, q, T0), 300);
		ans_negative(ans, rcodes[i], 100, 300);
		assert_true(put(c, q, ans, T0));
		assert_int_equal(lifetime(c, q, T0), 100);
		/* aged like any TTL: the SOA's TTL field is 3600 - 299 */
		ans_negative(ans, rcodes[i], 3600, 300);
		assert_true(put(c, q, ans, T0));
		assert_int_equal(get(c, q, T0 + 299, 0, out, &len), DLB_CACHE_HIT);
		assert_int_equal(dlb_rd32(out + ans->ttl_off[0]), 3600 - 299);
		assert_int_equal(DLB_RCODE(dlb_rd16(out + 2)), rcodes[i]);
		ans_negative(ans, rcodes[i], 90000, 90000);
		assert_true(put(c, q, ans, T0));
		assert_int_equal(lifetime(c, q, T0), 3600);
		ans_negative(ans, rcodes[i], 3600, 300);
		assert_true(put(cm, qm, ans, T0));
		assert_int_equal(lifetime(cm, qm, T0), 50);
		/* a negative answer with MINIMUM 0 is not cached */
		ans_negative(ans, rcodes[i], 3600, 0);
		assert_false(put(c, q, ans, T0));
		/* (a refused answer leaves the previous entry in place) */
		assert_int_equal(dlb_cache_expunge(c, &rt, 0), 1);
		assert_int_equal(dlb_cache_expunge(cm, &rt, 0), 1);
	}
	/* NODATA and NXDOMAIN without a SOA: no TTL to go by, not cached */
	ans_begin(ans, "nope.example.com", 1, RD, 0, 0, 1);
	pb_opt(ans, 1232, 0, NULL, 0);
	assert_false(put(c, q, ans, T0));
	ans_begin(ans, "nope.example.com", 1, RD | DLB_RCODE_NXDOMAIN, 0, 0, 0);
	assert_false(put(c, q, ans, T0));
	assert_int_equal(stats(c).entries, 0);
	cache_done(c);
	cache_done(cm);
}

static void
max_ttl_100_min_ttl_60(struct dlb_cache_opts *o)
{
	o->max_ttl = 100;
	o->min_ttl = 60;
}

static void
test_insert_ttl_bounds(void **state)
{
	struct dlb_cache *c = cache_with(100, NULL);
	struct dlb_cache *cb = cache_with(100, max_ttl_100_min_ttl_60);
	struct qry *q = scratch(sizeof(*q)), *qb = scratch(sizeof(*qb));
	struct pb *ans = scratch(sizeof(*ans));

	qry_std(c, q, "www.example.com");
	qry_std(cb, qb, "www.example.com");
	/* maxTTL caps the lifetime (default 86400) */
	ans_a(ans, "www.example.com", 1000000, 1);
	assert_true(put(c, q, ans, T0));
	assert_int_equal(lifetime(c, q, T0), 86400);
	assert_true(put(cb, qb, ans, T0));
	assert_int_equal(lifetime(cb, qb, T0), 100);
	/* the smallest TTL of all sections decides */
	ans_rich(ans, "www.example.com");
	assert_true(put(c, q, ans, T0));
	assert_int_equal(lifetime(c, q, T0), 250);
	/* minTTL: below it, not cached and counted */
	ans_a(ans, "www.example.com", 59, 1);
	assert_int_equal(dlb_cache_expunge(cb, &rt, 0), 1);
	assert_false(put(cb, qb, ans, T0));
	assert_int_equal(stats(cb).ttl_too_shorts, 1);
	assert_int_equal(stats(cb).entries, 0);
	ans_a(ans, "www.example.com", 60, 1);
	assert_true(put(cb, qb, ans, T0));
	assert_int_equal(stats(cb).ttl_too_shorts, 1);
	assert_int_equal(lifetime(cb, qb, T0), 60);
	/* a 0 TTL is never cached */
	ans_a(ans, "www.example.com", 0, 1);
	assert_int_equal(dlb_cache_expunge(c, &rt, 0), 1);
	assert_false(put(c, q, ans, T0));
	assert_int_equal(stats(c).entries, 0);
	assert_int_equal(stats(c).ttl_too_shorts, 0);
	cache_done(c);
	cache_done(cb);
}

static void
max_entry_512(struct dlb_cache_opts *o)
{
	o->maximum_entry_size = 512;
}

static void
test_insert_max_entry_size(void **state)
{
	struct dlb_cache *c = cache_with(100, max_entry_512);
	struct qry *q = scratch(sizeof(*q));
	struct pb *ans = scratch(sizeof(*ans));

	qry_std(c, q, "www.example.com");
	ans_begin(ans, "www.example.com", 1, RD, 1, 0, 0);
	pb_txt(ans, DLB_DNS_HDR, 300, 513 - 45);
	assert_int_equal(ans->n, 513);
	assert_false(put(c, q, ans, T0));
	assert_int_equal(stats(c).not_cacheable, 1);
	ans_begin(ans, "www.example.com", 1, RD, 1, 0, 0);
	pb_txt(ans, DLB_DNS_HDR, 300, 512 - 45);
	assert_int_equal(ans->n, 512);
	assert_true(put(c, q, ans, T0));
	assert_int_equal(stats(c).entries, 1);
	cache_done(c);
}

static void
test_insert_replace(void **state)
{
	struct dlb_cache *c = cache_with(100, NULL);
	struct qry *q = scratch(sizeof(*q));
	struct pb *a1 = scratch(sizeof(*a1)), *a2 = scratch(sizeof(*a2));
	uint8_t out[PB_MAX];
	size_t len;
	uint64_t bytes1;

	qry_std(c, q, "www.example.com");
	ans_a(a1, "www.example.com", 300, 0x01010101);
	ans_a(a2, "www.example.com", 600, 0x02020202);
	assert_true(put(c, q, a1, T0));
	bytes1 = stats(c).bytes;
	assert_true(bytes1 >= a1->n);
	assert_true(put(c, q, a2, T0 + 100));
	assert_int_equal(stats(c).entries, 1);
	assert_int_equal(stats(c).bytes, bytes1);
	assert_int_equal(stats(c).evictions, 0);
	assert_int_equal(stats(c).insert_collisions, 0);
	assert_int_equal(get(c, q, T0 + 110, 0, out, &len), DLB_CACHE_HIT);
	assert_int_equal(len, a2->n);
	assert_int_equal(dlb_rd32(out + len - 4 - 11), 0x02020202);
	assert_int_equal(dlb_rd32(out + a2->ttl_off[0]), 590);
	assert_int_equal(lifetime(c, q, T0 + 100), 600);
	cache_done(c);
}

/* ---- expiry, stale, prefetch --------------------------------------------------- */

static void
stale_7(struct dlb_cache_opts *o)
{
	o->stale_ttl = 7;
}

static void
test_stale(void **state)
{
	struct dlb_cache *c = cache_with(100, stale_7);
	struct qry *q = scratch(sizeof(*q));
	struct pb *ans = scratch(sizeof(*ans));
	uint8_t out[PB_MAX];
	size_t len;

	qry_std(c, q, "www.example.com");
	ans_rich(ans, "www.example.com");
	assert_true(put(c, q, ans, T0));
	assert_int_equal(get(c, q, T0 + 249, 30, out, &len), DLB_CACHE_HIT);
	assert_int_equal(get(c, q, T0 + 250, 0, out, &len), DLB_CACHE_MISS);
	assert_int_equal(get(c, q, T0 + 250, 30, out, &len), DLB_CACHE_STALE);
	assert_int_equal(len, ans->n);
	for (int i = 0; i < ans->nttl; i++)
		assert_int_equal(dlb_rd32(out + ans->ttl_off[i]), 7);
	assert_int_equal(dlb_rd32(out + len - 6), 0x8000);
	assert_memory_equal(out + 2, ans->b + 2, ans->ttl_off[0] - 2);
	assert_int_equal(get(c, q, T0 + 279.9, 30, out, &len), DLB_CACHE_STALE);
	assert_int_equal(get(c, q, T0 + 280, 30, out, &len), DLB_CACHE_MISS);
	assert_int_equal(get(c, q, T0 + 1000, 30, out, &len), DLB_CACHE_MISS);
	assert_int_equal(stats(c).stale_hits, 2);
	assert_int_equal(stats(c).hits, 3);	/* stale ones too, as dnsdist */
	assert_int_equal(stats(c).misses, 3);
	cache_done(c);
}

static void
prefetch_10pct(struct dlb_cache_opts *o)
{
	o->prefetch = 0.1;
}

static bool
lookup_prefetch(struct dlb_cache *c, const struct qry *q, double now, enum dlb_cache_result want)
{
	bool pf = true;
	enum dlb_cache_result r;

	dlb_rcu_enter(&rt);
	(void)dlb_cache_lookup(c, &q->k, now, 0, &r, &pf, W_MAIN);
	dlb_rcu_exit(&rt);
	assert_int_equal(r, want);
	return pf;
}

static void
test_prefetch(void **state)
{
	struct dlb_cache *c = cache_with(100, prefetch_10pct);
	struct dlb_cache *c0 = cache_with(100, NULL);
	struct qry *q = scratch(sizeof(*q));
	struct pb *ans = scratch(sizeof(*ans));

	qry_std(c, q, "www.example.com");
	ans_a(ans, "www.example.com", 100, 1);
	assert_true(put(c, q, ans, T0));
	assert_false(lookup_prefetch(c, q, T0 + 50, DLB_CACHE_HIT));
	assert_false(lookup_prefetch(c, q, T0 + 89, DLB_CACHE_HIT));
	assert_true(lookup_prefetch(c, q, T0 + 91, DLB_CACHE_HIT));
	assert_false(lookup_prefetch(c, q, T0 + 92, DLB_CACHE_HIT));
	assert_false(lookup_prefetch(c, q, T0 + 99.5, DLB_CACHE_HIT));
	assert_false(lookup_prefetch(c, q, T0 + 100, DLB_CACHE_MISS));
	assert_int_equal(stats(c).prefetches, 1);
	/* the refreshed entry may be prefetched again */
	assert_true(put(c, q, ans, T0 + 95));
	assert_false(lookup_prefetch(c, q, T0 + 96, DLB_CACHE_HIT));
	assert_true(lookup_prefetch(c, q, T0 + 186, DLB_CACHE_HIT));
	assert_false(lookup_prefetch(c, q, T0 + 187, DLB_CACHE_HIT));
	assert_int_equal(stats(c).prefetches, 2);

	/* prefetch = 0: never */
	assert_int_equal(qry_make(c0, q, &(struct qspec){ .name = "www.example.com", .flags = RD,
							.edns = 1232 }), 0);
	assert_true(put(c0, q, ans, T0));
	assert_false(lookup_prefetch(c0, q, T0 + 99, DLB_CACHE_HIT));
	assert_int_equal(stats(c0).prefetches, 0);
	cache_done(c);
	cache_done(c0);
}

/* ---- bounds ----------------------------------------------------------------------- */

static void
name_of(char *buf, size_t sz, const char *label, unsigned i)
{
	snprintf(buf, sz, "%s%u.example.com", label, i);
}

/*
 * Insert 10 x max_entries distinct names: evictions account for every entry
 * gone and isFull follows the count. @return the most entries ever held.
 */
static uint64_t
check_entry_bound(uint32_t max_entries, void (*tweak)(struct dlb_cache_opts *))
{
	struct dlb_cache *c = cache_with(max_entries, tweak);
	struct qry *q = scratch(sizeof(*q));
	struct pb *ans = scratch(sizeof(*ans));
	uint64_t inserted = 0, most = 0;
	uint8_t out[PB_MAX];
	size_t len;
	char name[64];

	for (unsigned i = 0; i < 10 * max_entries; i++) {
		struct dlb_cache_stats st;

		name_of(name, sizeof(name), "host", i);
		qry_std(c, q, name);
		ans_a(ans, name, 300 + i % 100, i);
		if (put(c, q, ans, T0 + i % 50)) {
			inserted++;
			/* what was just inserted is there */
			assert_int_equal(get(c, q, T0 + 50, 0, out, &len), DLB_CACHE_HIT);
			assert_int_equal(dlb_rd32(out + len - 4 - 11), i);
		}
		st = stats(c);
		if (st.entries > most)
			most = st.entries;
		assert_int_equal(st.evictions, inserted - st.entries);
		assert_int_equal(dlb_cache_is_full(c), st.entries >= max_entries);
		dlb_rcu_poll(&rt);
	}
	if (most > max_entries)
		print_message("max_entries %u (%u shards): %llu entries held\n", max_entries,
			      dlb_cache_get_opts(c)->shards, (unsigned long long)most);
	/* nearly every insert went in */
	assert_true(inserted >= 9 * max_entries);
	cache_done(c);
	return most;
}

static void
shards_1(struct dlb_cache_opts *o)
{
	o->shards = 1;
}

static void
shards_16(struct dlb_cache_opts *o)
{
	o->shards = 16;
}

static void
test_bound_entries(void **state)
{
	uint64_t most[5];

	most[0] = check_entry_bound(64, shards_1);
	most[1] = check_entry_bound(1024, shards_16);
	most[2] = check_entry_bound(1000, NULL);	/* 20 shards -> 32; 1000 is no multiple */
	most[3] = check_entry_bound(100, NULL);
	most[4] = check_entry_bound(10, NULL);		/* fewer entries than shards */
	assert_int_equal(most[0], 64);
	assert_int_equal(most[1], 1024);
	assert_int_equal(most[2], 1000);
	assert_int_equal(most[3], 100);
	assert_int_equal(most[4], 10);
}

/*
 * Sets holding several entries (64 in 16 sets of 8): each lookup finds its
 * own among them by tag and full key, before and after the prefetch calls a
 * receive batch makes (hints: they change no result), and absent names miss.
 */
static void
test_shared_sets_and_prefetch(void **state)
{
	struct dlb_cache *c = cache_with(64, shards_1);
	struct qry *q = scratch(sizeof(*q));
	struct pb *ans = scratch(sizeof(*ans));
	uint8_t out[PB_MAX];
	size_t len;
	char name[64];

	for (unsigned i = 0; i < 64; i++) {
		name_of(name, sizeof(name), "set", i);
		qry_std(c, q, name);
		ans_a(ans, name, 300, 0xc0000200u + i);
		assert_true(put(c, q, ans, T0));
	}
	for (int round = 0; round < 2; round++) {
		unsigned held = 0;

		for (unsigned i = 0; i < 128; i++) {
			enum dlb_cache_result r;

			name_of(name, sizeof(name), i < 64 ? "set" : "absent", i);
			qry_std(c, q, name);
			if (round == 1) {
				dlb_rcu_enter(&rt);
				dlb_cache_prefetch(c, &q->k);
				dlb_cache_prefetch_entry(c, &q->k);
				dlb_rcu_exit(&rt);
			}
			r = get(c, q, T0 + 1, 0, out, &len);
			if (i >= 64) {
				assert_int_equal(r, DLB_CACHE_MISS);
				continue;
			}
			/* a full set may have evicted a few of the 64 */
			if (r == DLB_CACHE_HIT) {
				held++;
				assert_int_equal(dlb_rd32(out + len - 4 - 11), 0xc0000200u + i);
			}
		}
		assert_int_equal(held, stats(c).entries);
		assert_true(held >= 48);
	}
	assert_int_equal(stats(c).lookup_collisions, 0);
	cache_done(c);
}

static void
max_bytes_256k(struct dlb_cache_opts *o)
{
	o->max_bytes = 256 * 1024;
	o->shards = 4;
}

/* maxMemory: many names, big and small answers; bytes never exceed the bound. */
static void
test_bound_bytes(void **state)
{
	struct dlb_cache *c = cache_with(100000, max_bytes_256k);
	struct qry *q = scratch(sizeof(*q));
	struct pb *ans = scratch(sizeof(*ans));
	uint64_t inserted = 0, max_seen = 0;
	size_t n;
	char name[64];

	for (unsigned i = 0; i < 20000; i++) {
		struct dlb_cache_stats st;
		uint16_t rdlen = (uint16_t)((i % 3 == 0) ? 4000 : (i % 3 == 1) ? 20 : 1000 + i % 700);

		name_of(name, sizeof(name), "n", i);
		qry_std(c, q, name);
		ans_begin(ans, name, 1, RD, 1, 0, 0);
		pb_txt(ans, DLB_DNS_HDR, 3600, rdlen);
		if (put(c, q, ans, T0))
			inserted++;
		st = stats(c);
		assert_true(st.bytes <= 256 * 1024);
		assert_int_equal(st.evictions, inserted - st.entries);
		if (st.bytes > max_seen)
			max_seen = st.bytes;
		dlb_rcu_poll(&rt);
	}
	/* the bound is used, not just respected */
	assert_true(max_seen > 256 * 1024 / 2);
	n = stats(c).entries;
	assert_int_equal(dlb_cache_expunge(c, &rt, 0), n);
	assert_int_equal(stats(c).bytes, 0);
	assert_int_equal(stats(c).entries, 0);
	cache_done(c);
}

static void
max_bytes_64k_1_shard(struct dlb_cache_opts *o)
{
	o->max_bytes = 64 * 1024;
	o->shards = 1;
}

/*
 * A full cache evicts rather than refuses (issue 3: "a full shard evicts
 * instead of refusing inserts"): once full, every new answer goes in, whether
 * the entry bound or the byte bound is the one that binds.
 */
static unsigned
check_full_accepts(uint32_t max_entries, void (*tweak)(struct dlb_cache_opts *))
{
	struct dlb_cache *c = cache_with(max_entries, tweak);
	struct qry *q = scratch(sizeof(*q));
	struct pb *ans = scratch(sizeof(*ans));
	unsigned refused = 0, tried = 0;
	char name[64];

	for (unsigned i = 0; i < 20000; i++) {
		name_of(name, sizeof(name), "f", i);
		qry_std(c, q, name);
		ans_a(ans, name, 300, i);
		if (stats(c).evictions > 0) {
			tried++;
			refused += !put(c, q, ans, T0);
		} else {
			(void)put(c, q, ans, T0);
		}
		dlb_rcu_poll(&rt);
	}
	assert_true(tried > 10000);
	if (refused != 0)
		print_message("full cache (max_entries %u, max_bytes %llu): %u of %u inserts "
			      "refused\n", max_entries,
			      (unsigned long long)dlb_cache_get_opts(c)->max_bytes, refused, tried);
	cache_done(c);
	return refused;
}

static void
test_full_cache_evicts(void **state)
{
	unsigned by_entries = check_full_accepts(1024, shards_16);
	unsigned by_bytes = check_full_accepts(100000, max_bytes_64k_1_shard);

	assert_int_equal(by_entries, 0);
	assert_int_equal(by_bytes, 0);
}

static void
max_bytes_2k_1_shard(struct dlb_cache_opts *o)
{
	o->max_bytes = 2048;
	o->shards = 1;
}

/* An answer too big for the shard's byte budget is refused without evicting. */
static void
test_refused_insert_evicts_nothing(void **state)
{
	struct dlb_cache *c = cache_with(8, max_bytes_2k_1_shard);
	struct qry *q = scratch(sizeof(*q));
	struct pb *ans = scratch(sizeof(*ans));
	char name[64];

	for (unsigned i = 0; i < 8; i++) {
		name_of(name, sizeof(name), "s", i);
		qry_std(c, q, name);
		ans_a(ans, name, 300, i);
		assert_true(put(c, q, ans, T0));
	}
	assert_int_equal(stats(c).entries, 8);
	assert_int_equal(stats(c).evictions, 0);
	qry_std(c, q, "big.example.com");
	ans_begin(ans, "big.example.com", 1, RD, 1, 0, 0);
	pb_txt(ans, DLB_DNS_HDR, 300, 3000);
	assert_false(put(c, q, ans, T0));
	assert_int_equal(stats(c).evictions, 0);
	assert_int_equal(stats(c).entries, 8);
	cache_done(c);
}

/* ---- maintenance -------------------------------------------------------------------- */

static void
insert_names(struct dlb_cache *c, const char *label, unsigned n, uint32_t ttl)
{
	struct qry *q = scratch(sizeof(*q));
	struct pb *ans = scratch(sizeof(*ans));
	char name[64];

	for (unsigned i = 0; i < n; i++) {
		name_of(name, sizeof(name), label, i);
		qry_std(c, q, name);
		ans_a(ans, name, ttl, i);
		assert_true(put(c, q, ans, T0));
	}
}

static void
test_expunge(void **state)
{
	struct dlb_cache *c = cache_with(1000, NULL);

	insert_names(c, "h", 100, 300);
	assert_int_equal(stats(c).entries, 100);
	assert_int_equal(dlb_cache_expunge(c, &rt, 100), 0);
	assert_int_equal(dlb_cache_expunge(c, &rt, 40), 60);
	assert_int_equal(stats(c).entries, 40);
	assert_int_equal(dlb_cache_expunge(c, &rt, 0), 40);
	assert_int_equal(stats(c).entries, 0);
	assert_int_equal(stats(c).bytes, 0);
	assert_int_equal(dlb_cache_expunge(c, &rt, 0), 0);
	cache_done(c);
}

static void
test_purge_expired(void **state)
{
	struct dlb_cache *c = cache_with(1000, NULL);
	struct qry *q = scratch(sizeof(*q));
	uint8_t out[PB_MAX];
	size_t len;

	insert_names(c, "short", 10, 10);
	insert_names(c, "long", 10, 100);
	assert_int_equal(dlb_cache_purge_expired(c, &rt, 0, T0 + 9), 0);
	/* at most down to @keep */
	assert_int_equal(dlb_cache_purge_expired(c, &rt, 15, T0 + 10), 5);
	assert_int_equal(stats(c).entries, 15);
	assert_int_equal(dlb_cache_purge_expired(c, &rt, 0, T0 + 50), 5);
	assert_int_equal(stats(c).entries, 10);
	for (unsigned i = 0; i < 10; i++) {
		char name[64];

		name_of(name, sizeof(name), "long", i);
		qry_std(c, q, name);
		assert_int_equal(get(c, q, T0 + 50, 0, out, &len), DLB_CACHE_HIT);
	}
	assert_int_equal(dlb_cache_purge_expired(c, &rt, 0, T0 + 100), 10);
	assert_int_equal(stats(c).entries, 0);
	assert_int_equal(stats(c).bytes, 0);
	cache_done(c);
}

struct named {
	const char *name;
	uint16_t qtype;
};

static const struct named by_name_set[] = {
	{ "example.com", 1 }, { "example.com", 28 }, { "www.example.com", 1 },
	{ "www.example.com", 28 }, { "a.b.example.com", 1 }, { "badexample.com", 1 },
	{ "example.org", 1 }, { "com", 1 }, { "xexample.com", 28 },
};
#define BY_NAME_N (sizeof(by_name_set) / sizeof(by_name_set[0]))

static void
by_name_fill(struct dlb_cache *c)
{
	struct qry *q = scratch(sizeof(*q));
	struct pb *ans = scratch(sizeof(*ans));
	size_t n = stats(c).entries;

	assert_int_equal(dlb_cache_expunge(c, &rt, 0), n);
	for (size_t i = 0; i < BY_NAME_N; i++) {
		assert_int_equal(qry_make(c, q, &(struct qspec){ .name = by_name_set[i].name,
							       .qtype = by_name_set[i].qtype,
							       .flags = RD, .edns = 1232 }), 0);
		ans_begin(ans, by_name_set[i].name, by_name_set[i].qtype, RD, 1, 0, 0);
		if (by_name_set[i].qtype == 1)
			pb_a(ans, DLB_DNS_HDR, 300, 1);
		else
			pb_aaaa(ans, DLB_DNS_HDR, 300);
		assert_true(put(c, q, ans, T0));
	}
}

/* Which of by_name_set are still cached: a bit per entry. */
static unsigned
by_name_present(struct dlb_cache *c)
{
	struct qry *q = scratch(sizeof(*q));
	uint8_t out[PB_MAX];
	size_t len;
	unsigned bits = 0;

	for (size_t i = 0; i < BY_NAME_N; i++) {
		assert_int_equal(qry_make(c, q, &(struct qspec){ .name = by_name_set[i].name,
							       .qtype = by_name_set[i].qtype,
							       .flags = RD, .edns = 1232 }), 0);
		if (get(c, q, T0, 0, out, &len) == DLB_CACHE_HIT)
			bits |= 1u << i;
	}
	return bits;
}

static size_t
expunge_name(struct dlb_cache *c, const char *text, uint16_t qtype, bool suffix)
{
	uint8_t w[DLB_MAX_NAME];
	size_t n = wire_name(text, w);

	return dlb_cache_expunge_by_name(c, &rt, w, n, qtype, suffix);
}

static void
test_expunge_by_name(void **state)
{
	struct dlb_cache *c = cache_with(1000, NULL);
	const unsigned all = (1u << BY_NAME_N) - 1;

	by_name_fill(c);
	assert_int_equal(by_name_present(c), all);
	/* exact, one type */
	assert_int_equal(expunge_name(c, "example.com", 1, false), 1);
	assert_int_equal(by_name_present(c), all & ~1u);
	/* exact, ANY */
	assert_int_equal(expunge_name(c, "example.com", 255, false), 1);
	assert_int_equal(by_name_present(c), all & ~3u);
	assert_int_equal(expunge_name(c, "example.com", 255, false), 0);

	/* suffix: on label boundaries only (not badexample.com, xexample.com) */
	by_name_fill(c);
	assert_int_equal(expunge_name(c, "example.com", 255, true), 5);
	assert_int_equal(by_name_present(c), (1u << 5) | (1u << 6) | (1u << 7) | (1u << 8));
	assert_int_equal(stats(c).entries, 4);

	/* suffix with a type */
	by_name_fill(c);
	assert_int_equal(expunge_name(c, "example.com", 28, true), 2);
	assert_int_equal(by_name_present(c), all & ~((1u << 1) | (1u << 3)));
	/* "com" covers all but example.org; the root covers everything */
	by_name_fill(c);
	assert_int_equal(expunge_name(c, "com", 255, true), 8);
	assert_int_equal(by_name_present(c), 1u << 6);
	by_name_fill(c);
	assert_int_equal(expunge_name(c, ".", 255, true), BY_NAME_N);
	assert_int_equal(stats(c).entries, 0);
	/* a name longer than any entry, or unknown: nothing */
	by_name_fill(c);
	assert_int_equal(expunge_name(c, "x.www.example.com", 255, true), 0);
	assert_int_equal(expunge_name(c, "ample.com", 255, true), 0);
	assert_int_equal(by_name_present(c), all);
	cache_done(c);
}

static void
test_dump(void **state)
{
	struct dlb_cache *c = cache_with(1000, NULL);
	struct qry *q = scratch(sizeof(*q)), *qt = scratch(sizeof(*qt));
	struct qry *qn = scratch(sizeof(*qn));
	struct pb *ans = scratch(sizeof(*ans));
	char dir[] = "/tmp/test_cache.XXXXXX", path[64], line[256], want[3][256];
	int found[3] = { 0, 0, 0 }, nlines = 0;
	FILE *f;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/dump", dir);

	qry_std(c, q, "www.Example.com");
	ans_a(ans, "www.Example.com", 300, 1);
	assert_true(put(c, q, ans, T0));
	snprintf(want[0], sizeof(want[0]),
		 "www.example.com. 200 A ; rcode 0, key %u, length %zu, received over UDP 1, "
		 "added 1700000000\n", (unsigned)(uint32_t)q->k.hash, ans->n);
	assert_int_equal(qry_make(c, qt, &(struct qspec){ .name = "www.example.com", .qtype = 28,
							.flags = RD, .tcp = true }), 0);
	ans_begin(ans, "www.example.com", 28, RD, 1, 0, 0);
	pb_aaaa(ans, DLB_DNS_HDR, 150);
	assert_true(put(c, qt, ans, T0 + 10));
	snprintf(want[1], sizeof(want[1]),
		 "www.example.com. 60 AAAA ; rcode 0, key %u, length %zu, received over UDP 0, "
		 "added 1700000010\n", (unsigned)(uint32_t)qt->k.hash, ans->n);
	qry_std(c, qn, "nope.example.com");
	ans_negative(ans, DLB_RCODE_NXDOMAIN, 3600, 30);
	assert_true(put(c, qn, ans, T0));
	snprintf(want[2], sizeof(want[2]),
		 "nope.example.com. 0 A ; rcode 3, key %u, length %zu, received over UDP 1, "
		 "added 1700000000\n", (unsigned)(uint32_t)qn->k.hash, ans->n);

	assert_int_equal(dlb_cache_dump(c, &rt, path, T0 + 100), 3);
	f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f) != NULL) {
		nlines++;
		for (int i = 0; i < 3; i++)
			if (strcmp(line, want[i]) == 0)
				found[i]++;
	}
	fclose(f);
	assert_int_equal(nlines, 3);
	assert_int_equal(found[0], 1);
	assert_int_equal(found[1], 1);
	assert_int_equal(found[2], 1);

	/* an existing file is never overwritten */
	errno = 0;
	assert_int_equal(dlb_cache_dump(c, &rt, path, T0 + 100), -1);
	assert_int_equal(errno, EEXIST);
	f = fopen(path, "r");
	assert_non_null(f);
	nlines = 0;
	while (fgets(line, sizeof(line), f) != NULL)
		nlines++;
	fclose(f);
	assert_int_equal(nlines, 3);
	assert_int_equal(unlink(path), 0);
	/* an empty cache dumps nothing */
	assert_int_equal(dlb_cache_expunge(c, &rt, 0), 3);
	assert_int_equal(dlb_cache_dump(c, &rt, path, T0 + 100), 0);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(rmdir(dir), 0);
	cache_done(c);
}

static void
test_is_full(void **state)
{
	struct dlb_cache *c = cache_with(64, shards_1);
	struct qry *q = scratch(sizeof(*q));
	struct pb *ans = scratch(sizeof(*ans));
	char name[64];
	unsigned i;

	assert_false(dlb_cache_is_full(c));
	for (i = 0; i < 1000 && stats(c).entries < 64; i++) {
		assert_false(dlb_cache_is_full(c));
		name_of(name, sizeof(name), "full", i);
		qry_std(c, q, name);
		ans_a(ans, name, 300, i);
		assert_true(put(c, q, ans, T0));
	}
	assert_int_equal(stats(c).entries, 64);
	assert_true(dlb_cache_is_full(c));
	assert_int_equal(dlb_cache_expunge(c, &rt, 63), 1);
	assert_false(dlb_cache_is_full(c));
	assert_int_equal(stats(c).max_entries, 64);
	cache_done(c);
}

/* ---- the slot table's memory ------------------------------------------------ */

/* The [start, end) of the mapping in /proc/self/maps that holds @p; 0 if none. */
static int
mapping_of(const void *p, uintptr_t *start, uintptr_t *end)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int found = 0;

	assert_non_null(f);
	while (!found && fgets(line, sizeof(line), f) != NULL) {
		unsigned long a, b;

		if (sscanf(line, "%lx-%lx", &a, &b) == 2 && (uintptr_t)p >= a && (uintptr_t)p < b) {
			*start = a;
			*end = b;
			found = 1;
		}
	}
	fclose(f);
	return found;
}

/* The process's VmSize in KiB, read without malloc (which could map memory). */
static long
vm_size_kb(void)
{
	char buf[4096];
	int fd = open("/proc/self/status", O_RDONLY);
	ssize_t n;
	char *v;

	assert_true(fd >= 0);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	assert_true(n > 0);
	buf[n] = '\0';
	v = strstr(buf, "VmSize:");
	assert_non_null(v);
	return strtol(v + 7, NULL, 10);
}

/*
 * dlb_table_alloc: zero-filled and writable; from 2 MiB on aligned to 2 MiB,
 * its own mapping (advised for huge pages), and what it keeps mapped is
 * exactly the size rounded up to 2 MiB (the extra huge page it maps to align
 * the start is given back on both sides); below, whole pages. Freeing
 * unmaps all of it.
 */
static void
test_table_alloc(void **state)
{
	static const size_t sizes[] = { 64, 4096 * 3 + 1, DLB_TABLE_HUGE - 8, DLB_TABLE_HUGE,
					DLB_TABLE_HUGE + 1, 3 * DLB_TABLE_HUGE };
	static const size_t lens[] = { 4096, 4096 * 4, DLB_TABLE_HUGE, DLB_TABLE_HUGE,
				       2 * DLB_TABLE_HUGE, 3 * DLB_TABLE_HUGE };

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint8_t *t = dlb_table_alloc(sizes[i]);
		uintptr_t start, end;
		long before, during;

		assert_non_null(t);
		for (size_t j = 0; j < sizes[i]; j += 509)
			assert_int_equal(t[j], 0);
		assert_int_equal(t[sizes[i] - 1], 0);
		memset(t, 0xa5, sizes[i]);
		if (sizes[i] >= DLB_TABLE_HUGE) {
			assert_int_equal((uintptr_t)t % DLB_TABLE_HUGE, 0);
			assert_true(mapping_of(t, &start, &end));
			assert_int_equal(start, (uintptr_t)t);
			assert_int_equal(end - start, lens[i]);
		} else {
			assert_int_equal((uintptr_t)t % 4096, 0);
		}
		dlb_table_free(t, sizes[i]);

		before = vm_size_kb();
		t = dlb_table_alloc(sizes[i]);
		assert_non_null(t);
		during = vm_size_kb();
		dlb_table_free(t, sizes[i]);
		assert_int_equal(during - before, (long)(lens[i] / 1024));
		assert_int_equal(vm_size_kb(), before);
	}
	dlb_table_free(NULL, DLB_TABLE_HUGE);
}

/*
 * A cache of 100,000 entries (a 2 MiB slot table, on huge pages where the
 * kernel gives them): names spread over all of it hit and miss as in a
 * small one.
 */
static void
test_big_slot_table(void **state)
{
	struct dlb_cache *c = cache_with(100000, NULL);
	struct qry *q = scratch(sizeof(*q));
	struct pb *ans = scratch(sizeof(*ans));
	uint8_t out[PB_MAX];
	size_t len;
	char name[64];

	for (unsigned i = 0; i < 5000; i++) {
		name_of(name, sizeof(name), "big", i);
		qry_std(c, q, name);
		ans_a(ans, name, 300, i);
		assert_true(put(c, q, ans, T0));
	}
	assert_int_equal(stats(c).entries, 5000);
	for (unsigned i = 0; i < 5000; i += 7) {
		name_of(name, sizeof(name), "big", i);
		qry_std(c, q, name);
		assert_int_equal(get(c, q, T0 + 1, 0, out, &len), DLB_CACHE_HIT);
		name_of(name, sizeof(name), "absent", i);
		qry_std(c, q, name);
		assert_int_equal(get(c, q, T0 + 1, 0, out, &len), DLB_CACHE_MISS);
	}
	cache_done(c);
}

#define T(f) cmocka_unit_test_setup_teardown(f, rcu_setup, rcu_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_new_rejects_zero),
		T(test_key_case_insensitive),
		T(test_key_fields),
		T(test_key_edns_options),
		T(test_key_payload_ranks),
		T(test_key_not_cacheable),
		T(test_hash_collision),
		T(test_copy_out_patches),
		T(test_copy_out_dont_age),
		T(test_copy_out_ttl_floor),
		T(test_insert_tc_and_malformed),
		T(test_insert_temporary_failures),
		T(test_insert_negative),
		T(test_insert_ttl_bounds),
		T(test_insert_max_entry_size),
		T(test_insert_replace),
		T(test_stale),
		T(test_prefetch),
		T(test_bound_entries),
		T(test_bound_bytes),
		T(test_full_cache_evicts),
		T(test_shared_sets_and_prefetch),
		T(test_refused_insert_evicts_nothing),
		T(test_expunge),
		T(test_purge_expired),
		T(test_expunge_by_name),
		T(test_dump),
		T(test_is_full),
		T(test_table_alloc),
		T(test_big_slot_table),
	};

	dlb_rcu_init();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
