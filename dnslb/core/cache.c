/*
 * cache.c - the sharded packet cache. See cache.h for the design.
 *
 * Entry layout (one allocation, immutable once published but for the
 * `prefetched` flag, which is only ever set with an atomic CAS):
 *
 *   struct cache_entry | answer | pad to 2 | ttl_offs[nttl] | opts
 *
 * The answer's question name is stored lowercased: it is the key's name (the
 * hit path writes the client's own case over it), so a hit reads one copy of
 * the name (a typical A answer's entry: 114 bytes, 144 before).
 *
 * Slots: a slot holds an entry's address with the top 16 bits of its key's
 * hash in the (unused) top 16 bits of the word, so a lookup dereferences
 * only the entry whose tag matches: one entry per hit, none (but for 1 in
 * 65,536) per miss, however full the set.
 *
 * Concurrency: slots are written only under the shard's spinlock (release
 * stores: an entry's contents before its slot) and read with acquire loads;
 * a removed entry is retired through the writer's epoch record.
 */
#include "dnslb/core/cache.h"

#include <ck_pr.h>
#include <ck_spinlock.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* XXH3 inlined: per query it hashes a name and a few key bytes, where the
 * library call's dispatch costs as much as the hash */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "dnslb/core/rcu.h"
#include "dnslb/core/util.h"

#define MAX_TTLS 512	/* TTL fields an answer may have to be cached */

struct cache_entry {
	ck_epoch_entry_t epoch;
	double inserted;	/* wall clock, s */
	uint32_t ttl;		/* lifetime, s */
	uint32_t hash_lo;	/* the key hash's low 32 bits (the slot has the top 16) */
	uint16_t len;		/* answer bytes */
	uint16_t nttl;
	uint16_t qtype, qclass;
	uint16_t qname_len;
	uint16_t payload_class;
	uint8_t flags;
	uint8_t opts_len;
	uint8_t prefetched;	/* atomic */
	uint8_t rcode;		/* | ENTRY_HDR_ONLY */
	uint8_t data[];
};

/* rcode bit: serve only the header (a header-only temporary failure) */
#define ENTRY_HDR_ONLY	0x80
_Static_assert(sizeof(struct cache_entry) == 48, "the entry header's size, as docs/cache.md says");

/* A slot: entry address | tag << SLOT_TAG_SHIFT; 0 = empty. */
typedef uintptr_t cache_slot;

#define SLOT_TAG_SHIFT	48
#define SLOT_ADDR_MASK	(((cache_slot)1 << SLOT_TAG_SHIFT) - 1)
_Static_assert(sizeof(cache_slot) == 8, "tagged slots need 64-bit addresses");

struct cache_shard {
	ck_spinlock_t lock;
	cache_slot *slots;		/* nsets * DLB_CACHE_WAYS */
	uint32_t set_mask;
	uint32_t hand;			/* CLOCK hand: eviction outside a full shard's set */
	uint32_t entries;		/* under lock; read racily for stats */
	uint32_t max_entries;
	uint64_t bytes, max_bytes;
	uint64_t insert_collisions, ttl_too_shorts, evictions, not_cacheable;
} __attribute__((aligned(64)));

struct cache_wstats {
	uint64_t hits, misses, stale_hits, prefetches, lookup_collisions;
} __attribute__((aligned(64)));

struct dlb_cache {
	/* what a hit reads, in one line: these, then the head of o */
	uint32_t nshards;		/* power of 2 */
	uint32_t set_mask;		/* sets per shard - 1 (the same for every shard) */
	/* every shard's sets, shard after shard (shard i's slots point into it):
	 * a lookup finds its set from the hash alone, without reading the shard */
	cache_slot *slots;
	struct dlb_cache_opts o;
	struct cache_shard *shards;
	struct cache_wstats ws[DLB_MAX_WORKERS + 1];
};
_Static_assert(offsetof(struct dlb_cache, o.stale_ttl) + 4 <= 64, "a hit reads one line");

/*
 * Counters with one writer (a worker's own slot, or a shard's counters under
 * its lock) and racy readers: relaxed load+store, no locked instruction.
 */
#define STAT_ADD(x, n) __atomic_store_n(&(x), __atomic_load_n(&(x), __ATOMIC_RELAXED) + (n), \
					__ATOMIC_RELAXED)

static inline struct cache_entry *
slot_entry(cache_slot v)
{
	return (struct cache_entry *)(v & SLOT_ADDR_MASK);
}

/* The tag of a hash, as it sits in a slot. */
static inline cache_slot
slot_tag(uint64_t hash)
{
	return (cache_slot)(hash >> SLOT_TAG_SHIFT) << SLOT_TAG_SHIFT;
}

/* Does slot value @v hold an entry with tag @tag (slot_tag of its hash)? */
static inline bool
slot_has_tag(cache_slot v, cache_slot tag)
{
	return v != 0 && (v & ~SLOT_ADDR_MASK) == tag;
}

static inline cache_slot
slot_load(const cache_slot *slot)
{
	return __atomic_load_n(slot, __ATOMIC_ACQUIRE);
}

/* Writers only, shard lock held. Release: the entry's contents before the slot. */
static inline void
slot_store(cache_slot *slot, cache_slot v)
{
	__atomic_store_n(slot, v, __ATOMIC_RELEASE);
}

static inline const uint8_t *
entry_answer(const struct cache_entry *e)
{
	return e->data;
}

/* The key's name, lowercased: the answer's question name. */
static inline const uint8_t *
entry_qname(const struct cache_entry *e)
{
	return e->data + DLB_DNS_HDR;
}

static inline const uint16_t *
entry_ttls(const struct cache_entry *e)
{
	return (const uint16_t *)(const void *)(e->data + ((e->len + 1u) & ~1u));
}

static inline const uint8_t *
entry_opts(const struct cache_entry *e)
{
	return (const uint8_t *)(entry_ttls(e) + e->nttl);
}

/* Bytes of an entry's allocation, from its fields (what getStats().bytes counts). */
static inline size_t
entry_alloc_size(size_t opts_len, size_t nttl, size_t len)
{
	return sizeof(struct cache_entry) + ((len + 1u) & ~(size_t)1) + nttl * sizeof(uint16_t) +
	       opts_len;
}

static inline size_t
entry_size(const struct cache_entry *e)
{
	return entry_alloc_size(e->opts_len, e->nttl, e->len);
}

void
dlb_cache_opts_default(struct dlb_cache_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->max_ttl = 86400;
	o->min_ttl = 0;
	o->temp_failure_ttl = 60;
	o->max_negative_ttl = 3600;
	o->stale_ttl = 60;
	o->shards = 20;
	o->maximum_entry_size = 4096;
	o->deferrable_insert_lock = true;
	o->l2_budget = 0.003;
	o->l2_max_in_flight = 256;
}

/*
 * The fewest entries a shard's share of maxEntries may be: a smaller cache
 * gets fewer shards. A shard evicts at its share and keys fall on shards by
 * a hash keyed per process, so with small shares a cache far from full lost
 * answers at random: 12 answers in newPacketCache(100) (32 shards of 3)
 * filled one shard in about 1 start in 90, and the cache held 11 where
 * dnsdist (20 shards of 5) held 12 (test_ecs.py::test_cache_with_ecs).
 */
#define CACHE_MIN_SHARE	64

/* Bytes of @c's slot table (all shards' sets). */
static size_t
slots_size(const struct dlb_cache *c)
{
	return (size_t)c->nshards * ((size_t)c->set_mask + 1) * DLB_CACHE_WAYS * sizeof(cache_slot);
}

struct dlb_cache *
dlb_cache_new(const struct dlb_cache_opts *o)
{
	struct dlb_cache *c;
	uint32_t per_shard, nsets, most;

	if (o->max_entries == 0)
		return NULL;
	c = aligned_alloc(64, sizeof(*c));
	if (c == NULL)
		return NULL;
	memset(c, 0, sizeof(*c));
	c->o = *o;
	c->nshards = dlb_pow2_at_least(o->shards > 0 ? o->shards : 1);
	most = o->max_entries / CACHE_MIN_SHARE > 0 ? o->max_entries / CACHE_MIN_SHARE : 1;
	if (c->nshards > most)
		c->nshards = dlb_pow2_at_least(most) > most ? dlb_pow2_at_least(most) / 2
							    : dlb_pow2_at_least(most);
	if (c->nshards == 0)
		c->nshards = 1;
	c->o.shards = c->nshards;
	c->shards = aligned_alloc(64, c->nshards * sizeof(*c->shards));
	if (c->shards == NULL) {
		free(c);
		return NULL;
	}
	memset(c->shards, 0, c->nshards * sizeof(*c->shards));
	per_shard = (o->max_entries + c->nshards - 1) / c->nshards;
	/* twice as many slots as entries: sets stay half full, conflicts are rare */
	nsets = dlb_pow2_at_least(((uint64_t)per_shard * 2 + DLB_CACHE_WAYS - 1) / DLB_CACHE_WAYS);
	c->set_mask = nsets - 1;
	/* zero-filled, and on huge pages from 2 MiB on (100,000 entries make
	 * 2 MiB): lookups land anywhere in it, and with 4 KiB pages most would
	 * also miss the TLB */
	c->slots = dlb_table_alloc(slots_size(c));
	if (c->slots == NULL) {
		dlb_cache_free(c);
		return NULL;
	}
	for (uint32_t i = 0; i < c->nshards; i++) {
		struct cache_shard *s = &c->shards[i];

		ck_spinlock_init(&s->lock);
		s->set_mask = nsets - 1;
		/* the bound is exact: the first shards take the remainder */
		s->max_entries = o->max_entries / c->nshards + (i < o->max_entries % c->nshards);
		s->max_bytes = o->max_bytes > 0 ? o->max_bytes / c->nshards : UINT64_MAX;
		s->slots = c->slots + (size_t)i * nsets * DLB_CACHE_WAYS;
	}
	return c;
}

void
dlb_cache_free(struct dlb_cache *c)
{
	if (c == NULL)
		return;
	for (uint32_t i = 0; i < c->nshards; i++) {
		struct cache_shard *s = &c->shards[i];

		if (s->slots == NULL)
			continue;
		for (uint64_t j = 0; j < ((uint64_t)s->set_mask + 1) * DLB_CACHE_WAYS; j++)
			free(slot_entry(s->slots[j]));
	}
	dlb_table_free(c->slots, slots_size(c));
	free(c->shards);
	free(c);
}

const struct dlb_cache_opts *
dlb_cache_get_opts(const struct dlb_cache *c)
{
	return &c->o;
}

/* ---- keys -------------------------------------------------------------------- */

static bool
skip_option(const struct dlb_cache_opts *o, uint16_t code)
{
	if (code == DLB_EDNS_OPT_COOKIE && !o->cookie_hashing)
		return true;
	if (code == DLB_EDNS_OPT_PADDING)
		return true;
	for (int i = 0; i < o->nskip; i++)
		if (o->skip_options[i] == code)
			return true;
	return false;
}

/* A bijective 64-bit mixer: Pelle Evensen's rrmxmx (XXH3 uses it for its
 * 4-8 byte inputs). */
static inline uint64_t
mix64(uint64_t h)
{
	h ^= ((h << 49) | (h >> 15)) ^ ((h << 24) | (h >> 40));
	h *= 0x9FB21C651E98DF25ULL;
	h ^= (h >> 35) + 8;
	h *= 0x9FB21C651E98DF25ULL;
	return h ^ (h >> 28);
}

/* A key with EDNS options: XXH3 of the fields' word @f and the options,
 * seeded with the name's hash. */
static __attribute__((noinline)) uint64_t
key_hash_opts(const struct dlb_cache_key *k, uint64_t f)
{
	uint8_t tail[8 + DLB_CACHE_MAX_OPTS];

	memcpy(tail, &f, 8);
	memcpy(tail + 8, k->opts, k->opts_len);
	return XXH3_64bits_withSeed(tail, 8u + k->opts_len, k->name_hash);
}

/*
 * The key's hash: the name's (the parser's, keyed per process:
 * dlb_wire_name_hash) with the other fields. Without EDNS options (nearly
 * every key) they fit one word, mixed into the name's hash.
 */
static inline void
key_hash(struct dlb_cache_key *k)
{
	uint64_t f = (uint64_t)k->qtype | (uint64_t)k->qclass << 16 | (uint64_t)k->flags << 32 |
		     (uint64_t)k->payload_class << 40;

	k->hash = k->opts_len == 0 ? mix64(k->name_hash ^ f) : key_hash_opts(k, f);
}

DLB_HOT int
dlb_cache_key_make(const struct dlb_cache *c, const uint8_t *pkt, const struct dlb_dnsmsg *m,
		   bool tcp, struct dlb_cache_key *k)
{
	const struct dlb_cache_opts *o = &c->o;

	if (m->qdcount != 1 || DLB_OPCODE(m->flags) != 0 || m->qtype == 251 || m->qtype == 252)
		return -1;
	k->qtype = m->qtype;
	k->qclass = m->qclass;
	k->qname_len = m->qname_len;
	k->name_hash = m->qname_hash;
	dlb_copy_short(k->qname_lc, m->qname_lc, m->qname_len);
	k->flags = (uint8_t)(((m->flags & DLB_F_RD) ? DLB_CK_RD : 0) |
			     ((m->flags & DLB_F_CD) ? DLB_CK_CD : 0) | (tcp ? DLB_CK_TCP : 0));
	k->opts_len = 0;
	k->payload_class = 0;
	/* only payloadRanks can give an entry to a client that accepts less
	 * than the one it was stored for; without, as dnsdist, an entry is
	 * served as the backend answered a query of exactly this kind */
	k->max_answer = tcp || o->nranks == 0 ? 65535 : 512;
	if (m->has_opt) {
		size_t pos = m->opt_rdata_off, end = pos + m->opt_rdlen;
		uint16_t size = m->udp_size < 512 ? 512 : m->udp_size;

		k->flags |= DLB_CK_EDNS | (m->do_bit ? DLB_CK_DO : 0);
		if (!tcp && o->nranks > 0)
			k->max_answer = size;
		if (o->nranks > 0) {
			int r = 0;

			while (r + 1 < o->nranks && size >= o->payload_ranks[r + 1])
				r++;
			k->payload_class = (uint16_t)(r + 1);
		} else {
			k->payload_class = size;
		}
		/*
		 * The parser validated the option layout. A skipped option
		 * (COOKIE) keeps its code and length, not its content: dnsdist
		 * hashes the OPT's RDLENGTH, so a cookie of another size is
		 * another entry. Whether a code is skipped is the cache's
		 * choice, the same for every key, so the bytes still read
		 * back one way only.
		 */
		while (end - pos >= 4) {
			uint16_t code = dlb_rd16(pkt + pos), olen = dlb_rd16(pkt + pos + 2);
			size_t take = skip_option(o, code) ? 4u : 4u + olen;

			if (k->opts_len + take > DLB_CACHE_MAX_OPTS)
				return -1;
			memcpy(k->opts + k->opts_len, pkt + pos, take);
			k->opts_len = (uint8_t)(k->opts_len + take);
			pos += 4u + olen;
		}
	}
	key_hash(k);
	return 0;
}

int
dlb_cache_key_add_option(const struct dlb_cache *c, struct dlb_cache_key *k, const uint8_t *opt,
			 size_t len)
{
	if (k->opts_len + len > DLB_CACHE_MAX_OPTS)
		return -1;
	memcpy(k->opts + k->opts_len, opt, len);
	k->opts_len = (uint8_t)(k->opts_len + len);
	key_hash(k);
	return 0;
}

void
dlb_cache_key_drop_option(const struct dlb_cache *c, struct dlb_cache_key *k, size_t len)
{
	(void)c;
	if (len > k->opts_len)
		len = k->opts_len;
	k->opts_len = (uint8_t)(k->opts_len - len);
	key_hash(k);
}

static inline __attribute__((always_inline)) bool
key_equal(const struct cache_entry *e, const struct dlb_cache_key *k)
{
	return e->qtype == k->qtype && e->qclass == k->qclass && e->flags == k->flags &&
	       e->payload_class == k->payload_class && e->qname_len == k->qname_len &&
	       e->opts_len == k->opts_len &&
	       dlb_equal_short(entry_qname(e), k->qname_lc, k->qname_len) &&
	       (k->opts_len == 0 || memcmp(entry_opts(e), k->opts, k->opts_len) == 0);
}

static inline struct cache_shard *
shard_of(const struct dlb_cache *c, uint64_t hash)
{
	return &c->shards[(hash >> 40) & (c->nshards - 1)];
}

static inline cache_slot *
set_of(const struct cache_shard *s, uint64_t hash)
{
	return &s->slots[(size_t)(hash & s->set_mask) * DLB_CACHE_WAYS];
}

/* set_of(shard_of(c, hash), hash), without reading the shard's header. */
static inline cache_slot *
lookup_set(const struct dlb_cache *c, uint64_t hash)
{
	size_t shard = (size_t)((hash >> 40) & (c->nshards - 1));
	size_t set = shard * ((size_t)c->set_mask + 1) + (size_t)(hash & c->set_mask);

	return &c->slots[set * DLB_CACHE_WAYS];
}

/* ---- lookups ------------------------------------------------------------------ */

DLB_HOT void
dlb_cache_prefetch(const struct dlb_cache *c, const struct dlb_cache_key *k)
{
	__builtin_prefetch(lookup_set(c, k->hash));
}

DLB_HOT void
dlb_cache_prefetch_entry(const struct dlb_cache *c, const struct dlb_cache_key *k)
{
	const cache_slot *set = lookup_set(c, k->hash);
	cache_slot tag = slot_tag(k->hash);

	for (int i = 0; i < DLB_CACHE_WAYS; i++) {
		cache_slot v = slot_load(&set[i]);

		if (slot_has_tag(v, tag)) {
			const char *e = (const char *)slot_entry(v);

			/* the header and key, then the answer and its TTL offsets */
			__builtin_prefetch(e);
			__builtin_prefetch(e + 64);
			__builtin_prefetch(e + 128);
			return;
		}
	}
}

DLB_HOT const struct dlb_cache_entry *
dlb_cache_lookup(struct dlb_cache *c, const struct dlb_cache_key *k, double now,
		 uint32_t stale_window, enum dlb_cache_result *res, bool *prefetch, int wid)
{
	struct cache_wstats *ws = &c->ws[wid];
	cache_slot *set = lookup_set(c, k->hash), tag = slot_tag(k->hash);

	*res = DLB_CACHE_MISS;
	*prefetch = false;
	for (int i = 0; i < DLB_CACHE_WAYS; i++) {
		cache_slot v = slot_load(&set[i]);
		struct cache_entry *e;
		double expires;

		if (!slot_has_tag(v, tag))
			continue;
		e = slot_entry(v);
		if (e->hash_lo != (uint32_t)k->hash)
			continue;
		if (!key_equal(e, k)) {
			STAT_ADD(ws->lookup_collisions, 1);
			continue;
		}
		if (e->len > k->max_answer)
			break;	/* payloadRanks: too big for this client, ask a backend */
		expires = e->inserted + e->ttl;
		if (now < expires) {
			*res = DLB_CACHE_HIT;
			STAT_ADD(ws->hits, 1);
			if (c->o.prefetch > 0 && expires - now < c->o.prefetch * e->ttl &&
			    ck_pr_load_8(&e->prefetched) == 0 &&
			    ck_pr_cas_8(&e->prefetched, 0, 1)) {
				*prefetch = true;
				STAT_ADD(ws->prefetches, 1);
			}
			return (const struct dlb_cache_entry *)e;
		}
		if (stale_window > 0 && now < expires + stale_window) {
			*res = DLB_CACHE_STALE;
			STAT_ADD(ws->hits, 1);	/* dnsdist counts a stale answer as a hit */
			STAT_ADD(ws->stale_hits, 1);
			return (const struct dlb_cache_entry *)e;
		}
		break;
	}
	STAT_ADD(ws->misses, 1);
	return NULL;
}

/* The answer into @out, then the client's name (@qname, anywhere, even in
 * @out: then it is saved first, as the answer overwrites it). */
static __attribute__((noinline)) void
copy_answer_name(const struct cache_entry *e, const uint8_t *qname, uint8_t *out)
{
	uint8_t qn[DLB_MAX_NAME];
	uintptr_t q = (uintptr_t)qname, o = (uintptr_t)out;

	if (q + e->qname_len <= o || q >= o + e->len) {
		memcpy(out, entry_answer(e), e->len);
		memcpy(out + DLB_DNS_HDR, qname, e->qname_len);
		return;
	}
	memcpy(qn, qname, e->qname_len);
	memcpy(out, entry_answer(e), e->len);
	memcpy(out + DLB_DNS_HDR, qn, e->qname_len);
}

DLB_HOT size_t
dlb_cache_copy_out(const struct dlb_cache *c, const struct dlb_cache_entry *ce,
		   enum dlb_cache_result res, uint16_t id, const uint8_t *qname, double now,
		   uint8_t *out, size_t outsz)
{
	const struct cache_entry *e = (const struct cache_entry *)ce;
	const uint16_t *ttls = entry_ttls(e);
	uint32_t age = 0;

	if (outsz < e->len)
		return 0;
	if (qname == out + DLB_DNS_HDR && e->len >= DLB_DNS_HDR + e->qname_len) {
		/* the query's own buffer: its name (the client's case) stays,
		 * the answer is copied around it */
		const uint8_t *a = entry_answer(e);
		size_t after = DLB_DNS_HDR + e->qname_len;

		memcpy(out, a, DLB_DNS_HDR);
		dlb_copy_short(out + after, a + after, e->len - after);
	} else {
		copy_answer_name(e, qname, out);
	}
	dlb_wr16(out, id);
	if (res == DLB_CACHE_STALE) {
		for (uint16_t i = 0; i < e->nttl; i++)
			dlb_wr32(out + ttls[i], c->o.stale_ttl);
	} else if (!c->o.dont_age) {
		age = now > e->inserted ? (uint32_t)(now - e->inserted) : 0;
		if (age > 0) {
			for (uint16_t i = 0; i < e->nttl; i++) {
				uint32_t t = dlb_rd32(out + ttls[i]);

				dlb_wr32(out + ttls[i], t > age ? t - age : 0);
			}
		}
	}
	return __builtin_expect(e->rcode & ENTRY_HDR_ONLY, 0) ? DLB_DNS_HDR : e->len;
}

enum dlb_cache_result
dlb_cache_get(struct dlb_cache *c, const struct dlb_cache_key *k, uint16_t id,
	      const uint8_t *qname, double now, uint32_t stale_window, uint8_t *out, size_t outsz,
	      size_t *outlen, bool *prefetch, int wid)
{
	enum dlb_cache_result res;
	const struct dlb_cache_entry *e =
		dlb_cache_lookup(c, k, now, stale_window, &res, prefetch, wid);

	*outlen = 0;
	if (e == NULL)
		return DLB_CACHE_MISS;
	*outlen = dlb_cache_copy_out(c, e, res, id, qname, now, out, outsz);
	return *outlen > 0 ? res : DLB_CACHE_MISS;
}

/* ---- inserts ------------------------------------------------------------------- */

static void
entry_reclaim(ck_epoch_entry_t *ep)
{
	free(ep);	/* the epoch entry is the first member */
}

/* Take @e out of @slot (lock held) and retire it. */
static void
remove_locked(struct cache_shard *s, struct dlb_rcu_thread *rt, cache_slot *slot)
{
	struct cache_entry *e = slot_entry(*slot);

	slot_store(slot, 0);
	STAT_ADD(s->entries, -1);
	STAT_ADD(s->bytes, -(uint64_t)entry_size(e));
	dlb_rcu_defer(rt, &e->epoch, entry_reclaim);
}

/*
 * A victim anywhere in the shard, for when the target set has none: the next
 * occupied slot after the CLOCK hand. Lock held; NULL only if the shard is empty.
 */
static cache_slot *
victim_in_shard(struct cache_shard *s)
{
	uint32_t nslots = (s->set_mask + 1) * DLB_CACHE_WAYS;

	for (uint32_t i = 0; i < nslots; i++) {
		uint32_t j = (s->hand + i) & (nslots - 1);

		if (s->slots[j] != 0) {
			s->hand = (j + 1) & (nslots - 1);
			return &s->slots[j];
		}
	}
	return NULL;
}

/* The victim in a set: the entry that expires first, other than @keep. */
static cache_slot *
victim_in_set(cache_slot *set, const struct cache_entry *keep)
{
	cache_slot *best = NULL;
	double best_exp = 0;

	for (int i = 0; i < DLB_CACHE_WAYS; i++) {
		struct cache_entry *e = slot_entry(set[i]);
		double exp;

		if (e == NULL || e == keep)
			continue;
		exp = e->inserted + e->ttl;
		if (best == NULL || exp < best_exp) {
			best = &set[i];
			best_exp = exp;
		}
	}
	return best;
}

enum ttl_verdict {
	TTL_OK = 0,
	TTL_NOT_CACHEABLE,
	TTL_TOO_SHORT,		/* below minTTL */
};

/*
 * The cacheability rules (cache.h, dlb_cache_insert): the lifetime of answer
 * @resp in *@ttlp, its TTL offsets in @offs (MAX_TTLS) and @scan, its rcode.
 */
static enum ttl_verdict
answer_ttl(const struct dlb_cache_opts *o, const uint8_t *resp, size_t len, int temp_failure_ttl,
	   uint16_t *offs, struct dlb_answer_scan *scan, uint32_t *ttlp, unsigned *rcodep)
{
	unsigned rcode;
	uint64_t ttl;

	if (len == DLB_DNS_HDR && !(dlb_rd16(resp + 2) & DLB_F_TC) &&
	    memcmp(resp + 4, "\0\0\0\0\0\0\0\0", 8) == 0) {
		/* header only: no records to scan */
		memset(scan, 0, sizeof(*scan));
	} else if (len < DLB_DNS_HDR || len > o->maximum_entry_size || len > UINT16_MAX ||
		   (dlb_rd16(resp + 2) & DLB_F_TC) ||
		   dlb_wire_scan_answer(resp, len, offs, MAX_TTLS, scan) != DLB_OK) {
		return TTL_NOT_CACHEABLE;
	}
	rcode = DLB_RCODE(dlb_rd16(resp + 2));
	*rcodep = rcode;
	if (rcode == DLB_RCODE_SERVFAIL || rcode == DLB_RCODE_REFUSED) {
		ttl = temp_failure_ttl >= 0 ? (uint32_t)temp_failure_ttl : o->temp_failure_ttl;
	} else {
		if (scan->nrecords == 0)
			return TTL_NOT_CACHEABLE;	/* no TTL to go by (NODATA without SOA, empty answers) */
		ttl = scan->min_ttl;
		if (rcode == DLB_RCODE_NXDOMAIN ||
		    (rcode == DLB_RCODE_NOERROR && dlb_rd16(resp + 6) == 0 && scan->has_soa)) {
			if (scan->has_soa && scan->soa_minimum < ttl)
				ttl = scan->soa_minimum;	/* RFC 2308 */
			if (ttl > o->max_negative_ttl)
				ttl = o->max_negative_ttl;
		} else if (ttl > o->max_ttl) {
			ttl = o->max_ttl;
		}
		if (ttl < o->min_ttl)
			return TTL_TOO_SHORT;
	}
	if (ttl == 0)
		return TTL_NOT_CACHEABLE;
	*ttlp = (uint32_t)ttl;
	return TTL_OK;
}

uint32_t
dlb_cache_answer_ttl(const struct dlb_cache *c, const uint8_t *resp, size_t len,
		     int temp_failure_ttl)
{
	uint16_t offs[MAX_TTLS];
	struct dlb_answer_scan scan;
	uint32_t ttl = 0;
	unsigned rcode;

	return answer_ttl(&c->o, resp, len, temp_failure_ttl, offs, &scan, &ttl, &rcode) == TTL_OK
		       ? ttl : 0;
}

bool
dlb_cache_insert(struct dlb_cache *c, struct dlb_rcu_thread *rt, const struct dlb_cache_key *k,
		 const uint8_t *resp, size_t len, double now, int temp_failure_ttl)
{
	struct cache_shard *s = shard_of(c, k->hash);
	uint16_t offs[MAX_TTLS];
	uint8_t hdr_only[DLB_DNS_HDR + DLB_MAX_NAME + 4];
	struct dlb_answer_scan scan;
	struct cache_entry *e;
	cache_slot *set, *slot = NULL, *same = NULL, tag = slot_tag(k->hash);
	unsigned rcode = 0;
	uint32_t ttl = 0;
	size_t pos, size;

	switch (answer_ttl(&c->o, resp, len, temp_failure_ttl, offs, &scan, &ttl, &rcode)) {
	case TTL_OK:
		break;
	case TTL_TOO_SHORT:
		__atomic_add_fetch(&s->ttl_too_shorts, 1, __ATOMIC_RELAXED);
		return false;
	case TTL_NOT_CACHEABLE:
	default:
		__atomic_add_fetch(&s->not_cacheable, 1, __ATOMIC_RELAXED);
		return false;
	}

	/*
	 * The answer's question is the key's: its name is stored as the key's.
	 * A header-only SERVFAIL or REFUSED is cached too (dnsdist does, for
	 * temporaryFailureTTL): stored with the key's question after it, for
	 * the lookups' compare, and served as the header alone (ENTRY_HDR_ONLY).
	 */
	if (len == DLB_DNS_HDR && dlb_rd16(resp + 4) == 0 &&
	    (rcode == DLB_RCODE_SERVFAIL || rcode == DLB_RCODE_REFUSED)) {
		memcpy(hdr_only, resp, DLB_DNS_HDR);
		memcpy(hdr_only + DLB_DNS_HDR, k->qname_lc, k->qname_len);
		dlb_wr16(hdr_only + DLB_DNS_HDR + k->qname_len, k->qtype);
		dlb_wr16(hdr_only + DLB_DNS_HDR + k->qname_len + 2, k->qclass);
		resp = hdr_only;
		len = DLB_DNS_HDR + k->qname_len + 4u;
		rcode |= ENTRY_HDR_ONLY;
	} else if (dlb_rd16(resp + 4) != 1 || len < DLB_DNS_HDR + k->qname_len + 4u ||
	    !dlb_wire_name_equal_ci(resp + DLB_DNS_HDR, k->qname_len, k->qname_lc, k->qname_len) ||
	    dlb_rd16(resp + DLB_DNS_HDR + k->qname_len) != k->qtype ||
	    dlb_rd16(resp + DLB_DNS_HDR + k->qname_len + 2) != k->qclass) {
		__atomic_add_fetch(&s->not_cacheable, 1, __ATOMIC_RELAXED);	/* no lock held */
		return false;
	}
	pos = (len + 1u) & ~(size_t)1;
	size = entry_alloc_size(k->opts_len, scan.nttl, len);
	if (size > s->max_bytes) {
		/* could never fit, whatever we evicted */
		__atomic_add_fetch(&s->not_cacheable, 1, __ATOMIC_RELAXED);	/* no lock held */
		return false;
	}
	e = malloc(size);
	if (e == NULL)
		return false;
	if (slot_entry((cache_slot)e) != e) {
		/* an address above 2^48 (never on Linux unless asked for): no room for the tag */
		free(e);
		__atomic_add_fetch(&s->not_cacheable, 1, __ATOMIC_RELAXED);	/* no lock held */
		return false;
	}
	e->hash_lo = (uint32_t)k->hash;
	/* whole seconds, as dnsdist's time(): an answer ages by one at each
	 * turn of the clock's second, not a second after it came */
	e->inserted = (double)(int64_t)now;
	e->ttl = (uint32_t)ttl;
	e->len = (uint16_t)len;
	e->nttl = scan.nttl;
	e->qtype = k->qtype;
	e->qclass = k->qclass;
	e->qname_len = k->qname_len;
	e->payload_class = k->payload_class;
	e->flags = k->flags;
	e->opts_len = k->opts_len;
	e->prefetched = 0;
	e->rcode = (uint8_t)rcode;
	memcpy(e->data, resp, len);
	memcpy(e->data + DLB_DNS_HDR, k->qname_lc, k->qname_len);
	memcpy(e->data + pos, offs, scan.nttl * sizeof(uint16_t));
	memcpy(e->data + pos + scan.nttl * sizeof(uint16_t), k->opts, k->opts_len);

	ck_spinlock_lock(&s->lock);
	set = set_of(s, k->hash);
	for (int i = 0; i < DLB_CACHE_WAYS; i++) {
		struct cache_entry *x = slot_entry(set[i]);

		if (x == NULL) {
			if (slot == NULL)
				slot = &set[i];
		} else if (slot_has_tag(set[i], tag) && x->hash_lo == (uint32_t)k->hash) {
			if (key_equal(x, k))
				same = &set[i];
			else
				STAT_ADD(s->insert_collisions, 1);
		}
	}
	if (same != NULL) {
		/* a newer answer replaces the old one */
		remove_locked(s, rt, same);
		slot = same;
	}
	/*
	 * Stay within the shard's bounds: evict in this set first (soonest
	 * expiry), then, for the entry or byte bound, elsewhere in the shard
	 * (CLOCK). A full shard always makes room: inserts are never refused.
	 */
	while (slot == NULL || s->entries + 1 > s->max_entries || s->bytes + size > s->max_bytes) {
		cache_slot *v = victim_in_set(set, NULL);

		if (v == NULL && slot != NULL)
			v = victim_in_shard(s);
		if (v == NULL) {
			/* unreachable: an empty shard has room for an entry that fits */
			ck_spinlock_unlock(&s->lock);
			free(e);
			return false;
		}
		remove_locked(s, rt, v);
		STAT_ADD(s->evictions, 1);
		if (slot == NULL)
			slot = v;
	}
	slot_store(slot, (cache_slot)e | tag);	/* release: the contents before the slot */
	STAT_ADD(s->entries, 1);
	STAT_ADD(s->bytes, size);
	ck_spinlock_unlock(&s->lock);
	return true;
}

/* ---- maintenance and introspection -------------------------------------------- */

void
dlb_cache_get_stats(const struct dlb_cache *c, struct dlb_cache_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->max_entries = c->o.max_entries;
	for (uint32_t i = 0; i < c->nshards; i++) {
		const struct cache_shard *s = &c->shards[i];

		st->entries += __atomic_load_n(&s->entries, __ATOMIC_RELAXED);
		st->bytes += __atomic_load_n(&s->bytes, __ATOMIC_RELAXED);
		st->insert_collisions += __atomic_load_n(&s->insert_collisions, __ATOMIC_RELAXED);
		st->ttl_too_shorts += __atomic_load_n(&s->ttl_too_shorts, __ATOMIC_RELAXED);
		st->evictions += __atomic_load_n(&s->evictions, __ATOMIC_RELAXED);
		st->not_cacheable += __atomic_load_n(&s->not_cacheable, __ATOMIC_RELAXED);
	}
	for (int w = 0; w <= DLB_MAX_WORKERS; w++) {
		const struct cache_wstats *ws = &c->ws[w];

		st->hits += __atomic_load_n(&ws->hits, __ATOMIC_RELAXED);
		st->misses += __atomic_load_n(&ws->misses, __ATOMIC_RELAXED);
		st->stale_hits += __atomic_load_n(&ws->stale_hits, __ATOMIC_RELAXED);
		st->prefetches += __atomic_load_n(&ws->prefetches, __ATOMIC_RELAXED);
		st->lookup_collisions += __atomic_load_n(&ws->lookup_collisions, __ATOMIC_RELAXED);
	}
}

static size_t
total_entries(const struct dlb_cache *c)
{
	size_t n = 0;

	for (uint32_t i = 0; i < c->nshards; i++)
		n += __atomic_load_n(&c->shards[i].entries, __ATOMIC_RELAXED);
	return n;
}

/*
 * Remove entries matching @pred while the cache holds more than @keep.
 * Shards are visited in turn, each under its own lock.
 */
typedef bool cache_pred_fn(const struct cache_entry *e, const void *arg);

static size_t
remove_where(struct dlb_cache *c, struct dlb_rcu_thread *rt, size_t keep, cache_pred_fn *pred,
	     const void *arg)
{
	size_t removed = 0, total = total_entries(c);

	for (uint32_t i = 0; i < c->nshards && total > keep; i++) {
		struct cache_shard *s = &c->shards[i];
		size_t nslots = ((size_t)s->set_mask + 1) * DLB_CACHE_WAYS;

		ck_spinlock_lock(&s->lock);
		for (size_t j = 0; j < nslots && total > keep; j++) {
			if (s->slots[j] != 0 && pred(slot_entry(s->slots[j]), arg)) {
				remove_locked(s, rt, &s->slots[j]);
				removed++;
				total--;
			}
			if ((j & 1023) == 1023) {
				/* let this shard's inserts through now and then */
				ck_spinlock_unlock(&s->lock);
				ck_spinlock_lock(&s->lock);
			}
		}
		ck_spinlock_unlock(&s->lock);
	}
	return removed;
}

static bool
pred_all(const struct cache_entry *e, const void *arg)
{
	return true;
}

size_t
dlb_cache_expunge(struct dlb_cache *c, struct dlb_rcu_thread *rt, size_t keep)
{
	return remove_where(c, rt, keep, pred_all, NULL);
}

static bool
pred_expired(const struct cache_entry *e, const void *arg)
{
	return *(const double *)arg >= e->inserted + e->ttl;
}

size_t
dlb_cache_purge_expired(struct dlb_cache *c, struct dlb_rcu_thread *rt, size_t keep, double now)
{
	return remove_where(c, rt, keep, pred_expired, &now);
}

struct name_match {
	const uint8_t *name;
	size_t len;
	uint16_t qtype;
	bool suffix;
};

static bool
pred_name(const struct cache_entry *e, const void *arg)
{
	const struct name_match *nm = arg;
	const uint8_t *q = entry_qname(e);

	if (nm->qtype != 255 && e->qtype != nm->qtype)
		return false;
	if (!nm->suffix)
		return e->qname_len == nm->len && memcmp(q, nm->name, nm->len) == 0;
	/* a suffix match must start on a label boundary of the entry's name */
	for (size_t off = 0; off < e->qname_len && e->qname_len - off >= nm->len;
	     off += 1u + q[off]) {
		if (e->qname_len - off == nm->len && memcmp(q + off, nm->name, nm->len) == 0)
			return true;
		if (q[off] == 0)
			break;
	}
	return false;
}

size_t
dlb_cache_expunge_by_name(struct dlb_cache *c, struct dlb_rcu_thread *rt, const uint8_t *name,
			  size_t namelen, uint16_t qtype, bool suffix)
{
	struct name_match nm = { name, namelen, qtype, suffix };

	return remove_where(c, rt, 0, pred_name, &nm);
}

bool
dlb_cache_is_full(const struct dlb_cache *c)
{
	return total_entries(c) >= c->o.max_entries;
}

static const char *
type_name(uint16_t t, char *buf, size_t sz)
{
	static const struct { uint16_t t; const char *n; } names[] = {
		{ 1, "A" }, { 2, "NS" }, { 5, "CNAME" }, { 6, "SOA" }, { 12, "PTR" },
		{ 15, "MX" }, { 16, "TXT" }, { 28, "AAAA" }, { 33, "SRV" }, { 35, "NAPTR" },
		{ 43, "DS" }, { 46, "RRSIG" }, { 47, "NSEC" }, { 48, "DNSKEY" }, { 50, "NSEC3" },
		{ 52, "TLSA" }, { 64, "SVCB" }, { 65, "HTTPS" }, { 99, "SPF" }, { 255, "ANY" },
		{ 257, "CAA" },
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].t == t)
			return names[i].n;
	snprintf(buf, sz, "TYPE%u", t);
	return buf;
}

long
dlb_cache_dump(struct dlb_cache *c, struct dlb_rcu_thread *rt, const char *path, double now)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	long n = 0;
	FILE *f;

	if (fd == -1)
		return -1;
	f = fdopen(fd, "w");
	if (f == NULL) {
		close(fd);
		return -1;
	}
	for (uint32_t i = 0; i < c->nshards; i++) {
		struct cache_shard *s = &c->shards[i];
		size_t nslots = ((size_t)s->set_mask + 1) * DLB_CACHE_WAYS;

		/*
		 * Read like a worker, inside an epoch section: formatting to a file
		 * under the shard lock would stall every insert into the shard.
		 */
		dlb_rcu_enter(rt);
		for (size_t j = 0; j < nslots; j++) {
			const struct cache_entry *e = slot_entry(slot_load(&s->slots[j]));
			char name[DLB_WIRE_NAME_TEXT_MAX], tb[16];
			double left;

			if (e == NULL)
				continue;
			if (dlb_wire_name_to_text(entry_qname(e), e->qname_len, name, sizeof(name)) < 0)
				snprintf(name, sizeof(name), "?");
			left = e->inserted + e->ttl - now;
			fprintf(f, "%s %ld %s ; rcode %u, key %u, length %u, received over UDP %d, "
				   "added %ld\n",
				name, (long)(left > 0 ? floor(left) : 0),
				type_name(e->qtype, tb, sizeof(tb)), e->rcode & ~ENTRY_HDR_ONLY, (unsigned)e->hash_lo,
				e->len, (e->flags & DLB_CK_TCP) ? 0 : 1, (long)e->inserted);
			n++;
		}
		dlb_rcu_exit(rt);
	}
	if (fclose(f) != 0)
		return -1;
	return n;
}
