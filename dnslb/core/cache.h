/*
 * cache.h - the sharded packet cache (docs/cache.md, dnsdist semantics
 * of dnsdist-api.md §1.6 and §3.6).
 *
 * Structure: 2^k shards chosen by hash bits. A shard is a set-associative
 * table of entry pointers: the hash picks a set of DLB_CACHE_WAYS slots (one
 * cache line of pointers, each tagged with 16 bits of its key's hash); a
 * lookup reads at most those slots and only the entry whose tag matches, so
 * it is bounded whatever an attacker inserts. Readers take no lock: they
 * load the slot pointers and read immutable entries inside an RCU (epoch)
 * section.
 * Writers (inserts from workers, expunges from the main thread) hold the
 * shard's spinlock, publish a new pointer, and retire the old entry through
 * the writer's RCU record. A full set or a shard over its entry or byte bound
 * evicts inside the set: the entry closest to expiry goes first (sampled
 * LRU over the set).
 *
 * Hit path: copy the stored answer, patch the ID, the question name's case
 * (the client's own bytes) and every TTL at offsets recorded at insert; no
 * allocation, no lock, no re-encoding.
 *
 * Thread: any thread with a registered struct dlb_rcu_thread; lookups inside
 * dlb_rcu_enter/exit.
 */
#ifndef DNSLB_CACHE_H
#define DNSLB_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dnslb/core/dnslb.h"
#include "dnslb/core/wire.h"

struct dlb_rcu_thread;

#define DLB_CACHE_WAYS		8
#define DLB_CACHE_MAX_OPTS	64	/* bytes of EDNS options kept in a key */
#define DLB_CACHE_MAX_SKIP	16
#define DLB_CACHE_MAX_RANKS	8

/** newPacketCache() options; dlb_cache_opts_default() gives dnsdist 1.7's defaults. */
struct dlb_cache_opts {
	/* first, what a hit reads (after the cache's set array: one line) */
	int nranks;			/* entries in payload_ranks */
	int nskip;			/* entries in skip_options */
	bool cookie_hashing;		/* cookieHashing: the COOKIE option's content is part of the key */
	bool dont_age;			/* dontAge */
	double prefetch;		/* dnslb: refresh an entry hit in this last fraction of its life; 0 = off */
	uint32_t stale_ttl;		/* staleTTL, default 60: TTL written into stale answers */

	uint32_t max_entries;		/* maxEntries (mandatory) */
	uint64_t max_bytes;		/* maxMemory (dnslb): bytes of entries, 0 = no bound */
	uint32_t max_ttl;		/* maxTTL, default 86400 */
	uint32_t min_ttl;		/* minTTL, default 0: lower answers are not cached */
	uint32_t temp_failure_ttl;	/* temporaryFailureTTL, default 60 (0: SERVFAIL/REFUSED not cached) */
	uint32_t max_negative_ttl;	/* maxNegativeTTL, default 3600 */
	uint32_t shards;		/* numberOfShards, default 20 (rounded up to a power of 2) */
	bool keep_stale_data;		/* keepStaleData */
	bool parse_ecs;			/* parseECS: the ECS option is compared on hits (it always is: it is in the key) */
	uint16_t skip_options[DLB_CACHE_MAX_SKIP];	/* skipOptions: option codes left out of the key */
	uint32_t maximum_entry_size;	/* maximumEntrySize, default 4096 */
	uint16_t payload_ranks[DLB_CACHE_MAX_RANKS];	/* payloadRanks, ascending; empty = exact size */
	bool deferrable_insert_lock;	/* accepted; inserts always wait for the (short) shard lock */
	/* the second level in Redis (dnslb/pipeline/l2cache.h, docs/fleet.md) */
	bool l2;			/* l2: ask Redis on a miss, write answers to it */
	double l2_budget;		/* l2Budget, s (default 0.003): longest wait for Redis */
	uint32_t l2_max_in_flight;	/* l2MaxInFlight (default 256): lookups waiting, per worker */
	char l2_name[32];		/* l2Name: part of the Redis keys ("" = none) */
};

void dlb_cache_opts_default(struct dlb_cache_opts *o);

/**
 * A cache key: everything an answer may depend on. The entry keeps the same
 * fields and a lookup compares them all, so a hash collision never returns
 * another question's answer.
 */
struct dlb_cache_key {
	uint64_t hash;			/* keyed per process */
	uint64_t name_hash;		/* the query's qname_hash (dlb_wire_name_hash) */
	uint16_t qtype, qclass;
	uint16_t qname_len;
	uint16_t payload_class;		/* rank (with payloadRanks) or the exact EDNS size; 0 = no EDNS */
	uint16_t max_answer;		/* with payloadRanks, what the client accepts over UDP
					 * (512 or its EDNS size); else 65535 */
	uint8_t flags;			/* DLB_CK_* */
	uint8_t opts_len;
	uint8_t qname_lc[DLB_MAX_NAME];
	uint8_t opts[DLB_CACHE_MAX_OPTS];	/* the OPT RDATA minus skipped options */
};

#define DLB_CK_RD	0x01
#define DLB_CK_CD	0x02
#define DLB_CK_DO	0x04
#define DLB_CK_TCP	0x08
#define DLB_CK_EDNS	0x10

struct dlb_cache;

/** Copy @src's used bytes into @dst (keys are large; most of a key is unused). */
static inline void
dlb_cache_key_copy(struct dlb_cache_key *dst, const struct dlb_cache_key *src)
{
	dst->hash = src->hash;
	dst->name_hash = src->name_hash;
	dst->qtype = src->qtype;
	dst->qclass = src->qclass;
	dst->qname_len = src->qname_len;
	dst->payload_class = src->payload_class;
	dst->max_answer = src->max_answer;
	dst->flags = src->flags;
	dst->opts_len = src->opts_len;
	__builtin_memcpy(dst->qname_lc, src->qname_lc, src->qname_len);
	__builtin_memcpy(dst->opts, src->opts, src->opts_len);
}

/** @return a cache, or NULL (no memory, max_entries == 0). Ownership: caller frees. */
struct dlb_cache *dlb_cache_new(const struct dlb_cache_opts *o);
/** Free everything now. Only when no other thread can reach the cache. */
void dlb_cache_free(struct dlb_cache *c);
const struct dlb_cache_opts *dlb_cache_get_opts(const struct dlb_cache *c);

/**
 * Build the key of query @m (the packet @pkt) for cache @c.
 * @return 0, or -1 when the query is not cacheable (qdcount != 1, AXFR/IXFR,
 * opcode other than QUERY, EDNS options too long for a key).
 */
int dlb_cache_key_make(const struct dlb_cache *c, const uint8_t *pkt, const struct dlb_dnsmsg *m,
		       bool tcp, struct dlb_cache_key *k);

/**
 * Append an EDNS option (code, length, data) to @k's options and rehash: the
 * ECS option dnslb adds for a useClientSubnet backend, so answers are cached
 * per client subnet. @return 0, or -1 when the key has no room (not cacheable).
 */
int dlb_cache_key_add_option(const struct dlb_cache *c, struct dlb_cache_key *k,
			     const uint8_t *opt, size_t len);

/** Undo dlb_cache_key_add_option(): drop the last @len bytes of options and rehash. */
void dlb_cache_key_drop_option(const struct dlb_cache *c, struct dlb_cache_key *k, size_t len);

/** What a lookup found. */
enum dlb_cache_result {
	DLB_CACHE_MISS = 0,
	DLB_CACHE_HIT,		/* fresh */
	DLB_CACHE_STALE,	/* expired, served within the stale window (TTLs set to staleTTL) */
};

struct dlb_cache_entry;

/**
 * Find the entry for @k. @now is wall-clock seconds. @stale_window > 0 also
 * accepts an entry expired for at most that many seconds (DLB_CACHE_STALE).
 * An entry whose answer is longer than k->max_answer is a miss. *@prefetch
 * is set when this hit is the first in the last `prefetch` fraction of the
 * entry's life (once per entry). Counts hits/misses for worker @wid
 * (0..DLB_MAX_WORKERS; DLB_MAX_WORKERS is the main thread).
 * Thread: any, inside an RCU section; the entry stays valid until its exit.
 */
const struct dlb_cache_entry *dlb_cache_lookup(struct dlb_cache *c, const struct dlb_cache_key *k,
					       double now, uint32_t stale_window,
					       enum dlb_cache_result *res, bool *prefetch, int wid);

/**
 * Start loading what a lookup of @k will read: dlb_cache_prefetch the line of
 * the key's set, dlb_cache_prefetch_entry (once that line has had time to
 * arrive) the entry whose tag matches. Hints only, no effect on any result.
 * For a batch of queries, the first for all of them, then the second for
 * all, then the lookups overlap their memory misses instead of waiting for
 * each in turn (dnslb/frontend/frontend.c does so for a receive batch).
 * Thread: any, inside an RCU section.
 */
void dlb_cache_prefetch(const struct dlb_cache *c, const struct dlb_cache_key *k);
void dlb_cache_prefetch_entry(const struct dlb_cache *c, const struct dlb_cache_key *k);

/**
 * Copy @e's answer into @out with the ID @id, the question name bytes as the
 * client sent them (@qname, k->qname_len bytes; may alias @out) and TTLs aged
 * to @now (or set to staleTTL when @res is DLB_CACHE_STALE).
 * @return the answer length, or 0 if @outsz is too small.
 */
size_t dlb_cache_copy_out(const struct dlb_cache *c, const struct dlb_cache_entry *e,
			  enum dlb_cache_result res, uint16_t id, const uint8_t *qname, double now,
			  uint8_t *out, size_t outsz);

/** Lookup and copy-out in one call (tests, benchmarks). @return the result. */
enum dlb_cache_result dlb_cache_get(struct dlb_cache *c, const struct dlb_cache_key *k,
				    uint16_t id, const uint8_t *qname, double now,
				    uint32_t stale_window, uint8_t *out, size_t outsz,
				    size_t *outlen, bool *prefetch, int wid);

/**
 * Insert the backend answer @resp for key @k (received at @now), applying the
 * cacheability rules: not TC, not malformed, not larger than
 * maximumEntrySize, TTL from the records (clamped by maxTTL, negative answers
 * by the SOA minimum and maxNegativeTTL, SERVFAIL/REFUSED by
 * @temp_failure_ttl if >= 0, else temporaryFailureTTL), not below minTTL.
 * Retired entries go to @rt's RCU record.
 * Thread: any with a registered @rt, outside or inside a section.
 * @return true if inserted.
 */
bool dlb_cache_insert(struct dlb_cache *c, struct dlb_rcu_thread *rt, const struct dlb_cache_key *k,
		      const uint8_t *resp, size_t len, double now, int temp_failure_ttl);

/**
 * The lifetime dlb_cache_insert would give the answer @resp (same rules and
 * options; @temp_failure_ttl as there). @return seconds, or 0 when @c would
 * not cache it. Scans the answer: for the second level (l2cache.c), not for
 * the hit path. Thread: any.
 */
uint32_t dlb_cache_answer_ttl(const struct dlb_cache *c, const uint8_t *resp, size_t len,
			      int temp_failure_ttl);

/** Counters and sizes (summed over shards and workers). */
struct dlb_cache_stats {
	uint64_t entries, max_entries;
	uint64_t bytes;
	uint64_t hits, misses, stale_hits, prefetches;
	uint64_t deferred_inserts, deferred_lookups;
	uint64_t lookup_collisions, insert_collisions;
	uint64_t ttl_too_shorts;
	uint64_t evictions, not_cacheable;
};
void dlb_cache_get_stats(const struct dlb_cache *c, struct dlb_cache_stats *st);

/** Remove entries until at most @keep remain (expunge(0) empties). @return removed. */
size_t dlb_cache_expunge(struct dlb_cache *c, struct dlb_rcu_thread *rt, size_t keep);
/** Remove expired entries until at most @keep remain. @return removed. */
size_t dlb_cache_purge_expired(struct dlb_cache *c, struct dlb_rcu_thread *rt, size_t keep,
			       double now);
/**
 * Remove entries for the lowercased wire name @name (or under it with
 * @suffix) and @qtype (255 = ANY, all types). @return removed.
 */
size_t dlb_cache_expunge_by_name(struct dlb_cache *c, struct dlb_rcu_thread *rt,
				 const uint8_t *name, size_t namelen, uint16_t qtype, bool suffix);
/**
 * Write one line per entry in dnsdist 1.7.3's format
 * ("<qname> <ttl> <qtype> ; rcode N, key N, length N, received over UDP 0|1, added <epoch>").
 * @return entries written, or -1 (errno set) if @path exists or cannot be created.
 */
long dlb_cache_dump(struct dlb_cache *c, struct dlb_rcu_thread *rt, const char *path, double now);
bool dlb_cache_is_full(const struct dlb_cache *c);

#endif
