/*
 * fuzz_cache.c - libFuzzer target for the packet cache: a query and a
 * backend answer, both from the input, through key, insert, lookup and
 * copy-out. The answer is what a backend (or a Redis peer) sends, so it is
 * untrusted. Besides "no crash" it checks the cache's promises:
 *
 *   - the bounds: entries and bytes never above the cache's limits;
 *   - an inserted answer is found again under the same key (unless it is too
 *     big for the client), and the copy handed out is the backend's answer
 *     byte for byte but for the ID and the question name, which are the
 *     client's (at age 0 no TTL changes);
 *   - the copy made in the query's own buffer (as a worker does) equals it;
 *   - the same query in other letter case finds the entry and gets its own
 *     spelling back; an aged or stale copy keeps the length, the header and
 *     the question;
 *   - dlb_cache_answer_ttl agrees that an inserted answer is cacheable;
 *   - expungeByName removes the entry.
 *
 * Input: byte 0 selects options (bit 0 TCP, bit 1 the second cache:
 * dontAge, payload ranks, skipOptions, cookie hashing; bit 2 a temporary
 * failure TTL of 30 s; bit 3 expunge by name afterwards), bytes 1-2 the
 * query's length (big endian), then the query, then the answer.
 *
 * Thread: single.  Ownership: borrows @data.
 */
#include <stdlib.h>
#include <string.h>

#include "dnslb/core/cache.h"
#include "dnslb/core/rcu.h"
#include "dnslb/core/wire.h"
#include "tests/fuzz/fuzz.h"

#define T0		1700000000.0
#define MAX_ENTRIES	32
#define MAX_BYTES	16384
#define OUTSZ		65536

static struct dlb_rcu_thread rt;
static struct dlb_cache *caches[2];
static uint8_t out[OUTSZ], own[OUTSZ], expect[OUTSZ];

/* At exit: the entries' addresses sit tagged in the slots, where
 * LeakSanitizer does not see them as pointers. */
static void
cleanup(void)
{
	dlb_rcu_barrier(&rt);
	for (int i = 0; i < 2; i++) {
		dlb_cache_free(caches[i]);
		caches[i] = NULL;
	}
	dlb_rcu_unregister(&rt);
}

static struct dlb_cache *
cache_for(int which)
{
	struct dlb_cache_opts o;

	if (caches[which] != NULL)
		return caches[which];
	if (caches[0] == NULL && caches[1] == NULL) {
		dlb_rcu_init();
		CHECK(dlb_rcu_register(&rt) == 0);
		CHECK(atexit(cleanup) == 0);
	}
	dlb_cache_opts_default(&o);
	o.max_entries = MAX_ENTRIES;
	o.max_bytes = MAX_BYTES;
	o.shards = 2;
	o.min_ttl = 1;
	if (which == 1) {
		o.dont_age = true;
		o.cookie_hashing = true;
		o.nranks = 3;
		o.payload_ranks[0] = 512;
		o.payload_ranks[1] = 1232;
		o.payload_ranks[2] = 4096;
		o.nskip = 1;
		o.skip_options[0] = 8;	/* ECS */
		o.max_negative_ttl = 300;
	}
	caches[which] = dlb_cache_new(&o);
	CHECK(caches[which] != NULL);
	return caches[which];
}

static void
check_bounds(const struct dlb_cache *c)
{
	struct dlb_cache_stats st;

	dlb_cache_get_stats(c, &st);
	CHECK(st.entries <= MAX_ENTRIES && st.max_entries == MAX_ENTRIES);
	CHECK(st.bytes <= MAX_BYTES);
	CHECK((st.entries == 0) == (st.bytes == 0));
}

/* Look @k up at @now; on a hit, copy it out for the client of @q (qname at @qn). */
static enum dlb_cache_result
get(struct dlb_cache *c, const struct dlb_cache_key *k, const struct dlb_dnsmsg *q,
    const uint8_t *qn, double now, uint32_t stale, uint8_t *dst, size_t *n)
{
	enum dlb_cache_result res;
	const struct dlb_cache_entry *e;
	bool prefetch;

	*n = 0;
	dlb_rcu_enter(&rt);
	e = dlb_cache_lookup(c, k, now, stale, &res, &prefetch, 0);
	if (e != NULL)
		*n = dlb_cache_copy_out(c, e, res, q->id, qn, now, dst, OUTSZ);
	dlb_rcu_exit(&rt);
	if (e == NULL)
		return DLB_CACHE_MISS;
	CHECK(*n > 0);
	return res;
}

/* The same answer, aged or stale: the length, header and question of @base. */
static void
check_same_shape(const uint8_t *a, size_t an, const uint8_t *base, size_t bn, size_t qend)
{
	CHECK(an == bn);
	CHECK(memcmp(a, base, qend) == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dlb_dnsmsg m, m2;
	struct dlb_cache_key k, k2;
	struct dlb_cache *c;
	const uint8_t *query, *ans;
	uint8_t flipped[OUTSZ];
	size_t qlen, alen, n, n2, qend;
	enum dlb_cache_result res;
	uint8_t ctl;
	bool tcp, inserted;
	int tempfail;

	if (!fuzz_split(data, size, &ctl, &query, &qlen, &ans, &alen))
		return 0;
	tcp = ctl & 1;
	tempfail = (ctl & 4) ? 30 : -1;
	c = cache_for((ctl >> 1) & 1);

	if (dlb_wire_parse_query(query, qlen, &m) != DLB_OK ||
	    dlb_cache_key_make(c, query, &m, tcp, &k) != 0)
		return 0;
	CHECK(m.qname_off == DLB_DNS_HDR);
	qend = DLB_DNS_HDR + k.qname_len + 4;

	inserted = dlb_cache_insert(c, &rt, &k, ans, alen, T0, tempfail);
	check_bounds(c);
	dlb_rcu_poll(&rt);
	if (!inserted)
		return 0;
	CHECK(dlb_cache_answer_ttl(c, ans, alen, tempfail) > 0);
	CHECK(alen >= qend);

	/* found again, as the backend sent it but for the ID and the client's name */
	res = get(c, &k, &m, query + m.qname_off, T0, 0, out, &n);
	if (alen > k.max_answer) {
		CHECK(res == DLB_CACHE_MISS);
		return 0;
	}
	CHECK(res == DLB_CACHE_HIT);
	memcpy(expect, ans, alen);
	dlb_wr16(expect, m.id);
	memcpy(expect + DLB_DNS_HDR, query + DLB_DNS_HDR, k.qname_len);
	CHECK(n == alen && memcmp(out, expect, alen) == 0);

	/* in the query's own buffer, the way a worker answers */
	memcpy(own, query, qlen);
	CHECK(get(c, &k, &m, own + m.qname_off, T0, 0, own, &n2) == DLB_CACHE_HIT);
	CHECK(n2 == alen && memcmp(own, expect, alen) == 0);

	/* aged, then stale: the same length, header and question */
	res = get(c, &k, &m, query + m.qname_off, T0 + 5, 0, own, &n2);
	if (res != DLB_CACHE_MISS)
		check_same_shape(own, n2, expect, alen, qend);
	res = get(c, &k, &m, query + m.qname_off, T0 + 200000, 400000, own, &n2);
	CHECK(res != DLB_CACHE_HIT);
	if (res == DLB_CACHE_STALE)
		check_same_shape(own, n2, expect, alen, qend);

	/* the same query in other letter case: the same key, its own spelling back */
	memcpy(flipped, query, qlen);
	for (size_t i = DLB_DNS_HDR; i < DLB_DNS_HDR + k.qname_len - 1; i++) {
		uint8_t ch = flipped[i];

		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'))
			flipped[i] = ch ^ 0x20;
	}
	CHECK(dlb_wire_parse_query(flipped, qlen, &m2) == DLB_OK);
	CHECK(dlb_cache_key_make(c, flipped, &m2, tcp, &k2) == 0);
	CHECK(k2.hash == k.hash);
	CHECK(get(c, &k2, &m2, flipped + DLB_DNS_HDR, T0, 0, own, &n2) == DLB_CACHE_HIT);
	CHECK(n2 == alen && memcmp(own + DLB_DNS_HDR, flipped + DLB_DNS_HDR, k.qname_len) == 0);
	CHECK(memcmp(own + DLB_DNS_HDR + k.qname_len, expect + DLB_DNS_HDR + k.qname_len,
		     alen - DLB_DNS_HDR - k.qname_len) == 0);

	if (ctl & 8) {
		CHECK(dlb_cache_expunge_by_name(c, &rt, k.qname_lc, k.qname_len, 255, false) >= 1);
		CHECK(get(c, &k, &m, query + m.qname_off, T0, 0, own, &n2) == DLB_CACHE_MISS);
		check_bounds(c);
	}
	return 0;
}
