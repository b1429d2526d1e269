/*
 * fuzz_l2.c - libFuzzer target for the second-level cache's values
 * (dnslb/pipeline/l2cache.c): what a node reads from Redis was written by another
 * node, or by anyone who can write to that Redis, so it is untrusted.
 *
 *   - decode (control bit 1 clear): the rest of the input is a value read
 *     for the query's key. If dlb_l2_decode accepts it, the answer lies
 *     inside the value where the format puts it, its TTL offsets inside the
 *     answer, its question is the key's and its flags match the key's; the
 *     value encodes back to itself (but for the insert time's rounding);
 *     and the local cache takes it like a backend's answer or refuses it
 *     for its lifetime only.
 *   - round trip (bit 1 set): the rest is an answer; encoded for the key it
 *     decodes to the same bytes and insert time, if it answers the key.
 *
 * Bit 0: the query came over TCP. Input layout: fuzz_split (fuzz.h).
 * Seeds: tests/fuzz/corpus/l2/ (make_corpus.py): the cache seeds'
 * answers as values (v_*) and for the round trip (rt_*).
 *
 * Thread: single.  Ownership: borrows @data.
 */
#include <string.h>

#include "dnslb/core/cache.h"
#include "dnslb/pipeline/l2cache.h"
#include "dnslb/core/rcu.h"
#include "dnslb/core/wire.h"
#include "tests/fuzz/fuzz.h"

#define T0	1700000000.0
#define MAXTTL	512

static struct dlb_rcu_thread rt;
static struct dlb_cache *cache;
static uint8_t enc[DLB_L2_HDR + 255 + DLB_CACHE_MAX_OPTS + 65536];

static void
cleanup(void)
{
	dlb_rcu_barrier(&rt);
	dlb_cache_free(cache);
	cache = NULL;
	dlb_rcu_unregister(&rt);
}

static struct dlb_cache *
get_cache(void)
{
	struct dlb_cache_opts o;

	if (cache != NULL)
		return cache;
	dlb_rcu_init();
	CHECK(dlb_rcu_register(&rt) == 0);
	CHECK(atexit(cleanup) == 0);
	dlb_cache_opts_default(&o);
	o.max_entries = 16;
	o.shards = 1;
	cache = dlb_cache_new(&o);
	CHECK(cache != NULL);
	return cache;
}

/* An answer dlb_l2_decode accepted for @k: where it is and what it says. */
static void
check_accepted(const uint8_t *v, size_t vlen, const struct dlb_cache_key *k, const uint8_t *ans,
	       size_t alen, const uint16_t *offs, uint16_t nttl)
{
	struct dlb_dnsmsg m;
	size_t n;

	CHECK(ans == v + DLB_L2_HDR + k->qname_len + k->opts_len);
	CHECK(ans + alen == v + vlen && alen >= DLB_DNS_HDR + k->qname_len + 4);
	CHECK(nttl <= MAXTTL);
	for (uint16_t i = 0; i < nttl; i++)
		CHECK(offs[i] >= DLB_DNS_HDR + k->qname_len + 4 && offs[i] + 4u <= alen);
	CHECK(dlb_wire_parse_response_question(ans, alen, &m) == DLB_OK);
	CHECK(m.qname_len == k->qname_len && memcmp(m.qname_lc, k->qname_lc, k->qname_len) == 0);
	CHECK(m.qtype == k->qtype && m.qclass == k->qclass && (m.flags & DLB_F_QR));
	CHECK(!(m.flags & DLB_F_TC));
	CHECK(!(m.flags & DLB_F_RD) == !(k->flags & DLB_CK_RD));
	/* the same value back, but for the insert time (ms, rounded through a double) */
	n = dlb_l2_encode(k, 1.0, ans, alen, enc, sizeof(enc));
	CHECK(n == vlen && memcmp(enc, v, 4) == 0 && memcmp(enc + 12, v + 12, vlen - 12) == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dlb_dnsmsg m;
	struct dlb_cache_key k;
	struct dlb_cache *c;
	const uint8_t *query, *rest, *ans;
	uint16_t offs[MAXTTL], nttl;
	size_t qlen, rlen, alen, n;
	double inserted;
	uint8_t ctl;
	enum dlb_l2_verdict v;

	if (!fuzz_split(data, size, &ctl, &query, &qlen, &rest, &rlen))
		return 0;
	c = get_cache();
	if (dlb_wire_parse_query(query, qlen, &m) != DLB_OK ||
	    dlb_cache_key_make(c, query, &m, ctl & 1, &k) != 0)
		return 0;

	if (ctl & 2) {
		/* round trip: the rest is an answer */
		n = dlb_l2_encode(&k, T0 + 0.25, rest, rlen, enc, sizeof(enc));
		if (n == 0) {
			CHECK(rlen > UINT16_MAX);
			return 0;
		}
		v = dlb_l2_decode(enc, n, &k, &inserted, &ans, &alen, offs, MAXTTL, &nttl);
		CHECK(v == DLB_L2_OK || v == DLB_L2_BAD_ANSWER);
		if (v == DLB_L2_OK) {
			CHECK(alen == rlen && memcmp(ans, rest, rlen) == 0);
			CHECK(inserted > T0 + 0.249 && inserted < T0 + 0.251);
			check_accepted(enc, n, &k, ans, alen, offs, nttl);
		}
		return 0;
	}

	v = dlb_l2_decode(rest, rlen, &k, &inserted, &ans, &alen, offs, MAXTTL, &nttl);
	if (v != DLB_L2_OK)
		return 0;
	check_accepted(rest, rlen, &k, ans, alen, offs, nttl);
	/* into the local cache as l2cache.c does: refused only for its lifetime */
	if (!dlb_cache_insert(c, &rt, &k, ans, alen, T0, -1))
		CHECK(dlb_cache_answer_ttl(c, ans, alen, -1) == 0);
	dlb_rcu_poll(&rt);
	return 0;
}
