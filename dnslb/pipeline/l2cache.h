/*
 * l2cache.h - the second-level packet cache in Redis (docs/cache.md and
 * §9, docs/fleet.md): a cache created with newPacketCache(n, {l2 = true})
 * shares its answers with every node of the fleet through setRedis's Redis.
 *
 * Miss path only. A query that missed the local cache and is about to go to
 * a backend is parked instead (dlb_l2_park): a copy of the query and its
 * client goes into a bounded per-worker table and a GET is sent on the
 * worker's own Redis connection with the cache's l2Budget as the command's
 * timeout. The reply resumes it on the same loop:
 *   - a valid value: inserted into the local cache with its original insert
 *     time, served like a local hit (ID, qname case, aged TTLs, the
 *     cache-hit rules);
 *   - nil, a rejected value, an error, the budget passed, a disconnect: the
 *     query goes to the backend chosen before parking, as if Redis were
 *     not there. A reply after the budget is dropped by the Redis core
 *     (redis.h), so a query is never both served and forwarded.
 * Over l2MaxInFlight parked queries on this worker, with the connection down
 * or over its maxInFlight, or for a query too big to park, the query goes
 * straight to the backend. The local hit path never comes here.
 *
 * Writes: an answer inserted into an L2 cache from a backend is also SET in
 * Redis with EX = its lifetime (fire and forget, same caps).
 *
 * Keys and values (dlb_l2_encode): the key is "<namespace>:pc:[<l2Name>:]"
 * plus 16 hex digits of an unkeyed XXH3 of the local cache key's fields, the
 * same on every node; the value carries the full key fields, so a hash
 * collision is seen and never answers another question, the wall-clock
 * insert time, and the answer. Everything read from Redis is checked like an
 * answer from a backend before use (dlb_l2_decode).
 *
 * Thread: dlb_l2_park, dlb_l2_store and the callbacks run on the worker's
 * own loop; dlb_l2_get_stats on any thread (relaxed loads).
 */
#ifndef DNSLB_L2CACHE_H
#define DNSLB_L2CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dnslb/core/cache.h"
#include "dnslb/pipeline/query.h"
#include "dnslb/core/wstate.h"

/* ---- value encoding (pure; tests/unit/test_l2cache.c) ------------------------
 *
 *   0  "DL2" 0x01             magic and version
 *   4  u64 inserted           wall clock, ms since the epoch (big endian)
 *  12  u16 qtype, u16 qclass, u16 payload_class
 *  18  u8 flags (DLB_CK_*), u8 qname_len, u8 opts_len, u8 reserved (0)
 *  22  u16 answer length
 *  24  qname_lc | opts | answer   (exactly: the value has no other bytes)
 */
#define DLB_L2_HDR		24
#define DLB_L2_MAX_VALUE	(DLB_L2_HDR + DLB_MAX_NAME + DLB_CACHE_MAX_OPTS + 65535)
#define DLB_L2_KEY_MAX		(64 + 4 + 32 + 1 + 16 + 1)	/* ns ":pc:" name ":" hex NUL */

/** Stable (unkeyed, same on every node) 64-bit hash of @k's fields. */
uint64_t dlb_l2_hash(const struct dlb_cache_key *k);

/**
 * The Redis key of @k: "<ns>:pc:<hash>" or "<ns>:pc:<name>:<hash>".
 * @return its length (< DLB_L2_KEY_MAX).
 */
size_t dlb_l2_key(char *out, const char *ns, const char *name, const struct dlb_cache_key *k);

/**
 * Encode the value for key @k, answer @ans (@len bytes) inserted at @inserted
 * (wall clock, s) into @out (@outsz bytes). @return its length, 0 if it
 * does not fit.
 */
size_t dlb_l2_encode(const struct dlb_cache_key *k, double inserted, const uint8_t *ans,
		     size_t len, uint8_t *out, size_t outsz);

/** Why a value was refused (dlb_l2_decode). */
enum dlb_l2_verdict {
	DLB_L2_OK = 0,
	DLB_L2_BAD_FORMAT,	/* magic, version, lengths */
	DLB_L2_OTHER_KEY,	/* well-formed, for another question (a hash collision) */
	DLB_L2_BAD_ANSWER,	/* the answer is malformed or does not answer the key */
};

/**
 * Check value @v (@vlen bytes, from Redis: untrusted) against key @k: the
 * format, every key field, and the answer as an answer from a backend would
 * be (QR, opcode QUERY, no TC, qdcount 1, the question equal to the key's,
 * RD and CD as in the key, every record well-formed within bounds). On
 * DLB_L2_OK: *@inserted (s), the answer in *@ans / *@len (pointing into @v),
 * its TTL offsets in @ttl_offs (room for @max; more is DLB_L2_BAD_ANSWER)
 * and their number in *@nttl.
 */
enum dlb_l2_verdict dlb_l2_decode(const uint8_t *v, size_t vlen, const struct dlb_cache_key *k,
				  double *inserted, const uint8_t **ans, size_t *len,
				  uint16_t *ttl_offs, size_t max, uint16_t *nttl);

/* ---- the worker's side ----------------------------------------------------------- */

/**
 * Called where a query that missed its cache is about to be forwarded
 * (frontend.c, tcp_client.c) with its client @c (TCP: its connection already counts
 * it in flight). @return true when @q is parked: it will be answered or
 * forwarded from the Redis reply, and the caller must not touch it again;
 * false: forward it now. Ownership: copies what it keeps.
 */
bool dlb_l2_park_slow(struct dlb_worker *w, struct dlb_query *q, const struct dlb_client *c);

/* The test inlined at the call sites: a few loads when the L2 is not in use. */
static inline bool
dlb_l2_park(struct dlb_worker *w, struct dlb_query *q, const struct dlb_client *c)
{
	return w->redis != NULL && q->cache != NULL && dlb_cache_get_opts(q->cache)->l2 &&
	       dlb_l2_park_slow(w, q, c);
}

/**
 * Answer @ans (@len bytes) of key @k was just inserted into cache @c at
 * @now (wall clock, s): write it to Redis if @c is an L2 cache, with EX = its
 * lifetime (@temp_failure_ttl as for dlb_cache_insert). Fire and forget.
 */
void dlb_l2_store(struct dlb_worker *w, struct dlb_cache *c, const struct dlb_cache_key *k,
		  const uint8_t *ans, size_t len, double now, int temp_failure_ttl);

/**
 * Free worker @w's table. After its Redis connection was freed (the
 * callbacks it ran then only released their queries). Thread: any, once
 * the worker's loop has stopped.
 */
void dlb_l2_worker_free(struct dlb_worker *w);
/** No query of @w waits on Redis and no write waits for its flush. Thread: the worker. */
bool dlb_l2_worker_quiet(const struct dlb_worker *w);

/** Counters, summed over the workers (metrics.c, docs/counters.md). */
struct dlb_l2_stats {
	uint64_t hits;		/* answered from Redis */
	uint64_t misses;	/* Redis had no value (or an expired one, or one too big for the client) */
	uint64_t timeouts;	/* l2Budget passed: forwarded */
	uint64_t errors;	/* connection down, error reply, disconnect: forwarded */
	uint64_t rejected;	/* a value refused by dlb_l2_decode or not cacheable here */
	uint64_t skipped;	/* over l2MaxInFlight (or Redis's maxInFlight), or too big to park */
	uint64_t stores;	/* answers written (SET sent) */
	uint64_t store_drops;	/* answers not written: connection down or over its cap */
	uint64_t parked;	/* gauge: queries waiting on Redis now */
};
void dlb_l2_get_stats(struct dlb_l2_stats *out);

#endif
