/*
 * inflight.h - outstanding-query tracking towards one backend socket.
 *
 * Each worker owns, per backend UDP socket, a table mapping the 16-bit ID on
 * the wire to an in-flight slot (docs/architecture.md). IDs are drawn uniformly
 * at random among the free ones (an off-path attacker must guess them) by
 * rejection sampling, so a live ID is never reused and an in-flight query is
 * never overwritten. All
 * queries of one table share one timeout, so the send order is the deadline
 * order: a FIFO list gives O(1) expiry.
 *
 * Slots come from a per-worker pool (struct dlb_slot_pool) that grows in
 * chunks and never shrinks, so the hot path does not allocate once warm.
 *
 * Thread: the owning worker only.
 */
#ifndef DNSLB_INFLIGHT_H
#define DNSLB_INFLIGHT_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include "dnslb/core/cache.h"
#include "dnslb/core/dnslb.h"
#include "dnslb/core/tags.h"

struct dlb_rng;

#define DLB_SLOT_NONE UINT32_MAX
#define DLB_SLOT_QUERY_MAX 512	/* queries kept for a failover retry */

union dlb_sockaddr {
	struct sockaddr sa;
	struct sockaddr_in sin;
	struct sockaddr_in6 sin6;
};

union dlb_pktinfo {
	struct in_pktinfo v4;
	struct in6_pktinfo v6;
};

enum dlb_client_proto {
	DLB_CLIENT_UDP = 0,
	DLB_CLIENT_TCP,
	DLB_CLIENT_INTERNAL,		/* a cache prefetch: the answer only refreshes the cache */
	DLB_CLIENT_DOH,			/* DNS over HTTPS: forwarded over UDP as dnsdist 1.7,
					 * answered on its HTTP stream (dnslb/frontend/doh_conn.c) */
	DLB_CLIENT_PROTOS
};

/** Who asked, and how to answer them. Copied into every in-flight slot. */
struct dlb_client {
	uint8_t proto;			/* enum dlb_client_proto */
	uint8_t has_dst;		/* dst is valid (wildcard UDP listener) */
	uint16_t listener;		/* frontend index */
	uint16_t orig_id;		/* the client's query ID */
	uint16_t orig_flags;		/* the client's header flags (RD/CD restored) */
	uint16_t udp_max;		/* UDP: the largest answer it takes (0: no limit) */
	uint32_t conn_id;		/* TCP, DoH: connection slot */
	uint32_t conn_gen;		/* TCP, DoH: its generation (stale handles are dropped) */
	int32_t stream;			/* DoH: the request's HTTP stream */
	uint8_t edns_added;		/* DoH: an OPT RR was added to the query (removed
					 * from the backend's answer, as dnsdist) */
	union dlb_sockaddr peer;
	union dlb_pktinfo dst;		/* local address the query came to */
	double t_start;			/* when the query was received (s, monotonic) */
};

/** One query waiting for a backend's answer. */
struct dlb_slot {
	uint32_t prev, next;		/* FIFO (deadline order) within its table */
	uint32_t self;			/* own index in the pool */
	double deadline;		/* s, loop clock */
	uint16_t wire_id;		/* ID sent to the backend */
	int be_index;
	const struct sockaddr *src;	/* an answer must come from here; NULL: a connected
					 * socket's kernel checks it */
	struct dlb_cache *cache;	/* insert the answer here; NULL if not cacheable */
	struct dlb_client client;
	struct dlb_cache_key key;	/* the question (qname_lc, qtype, qclass); the cache key */
	uint8_t qname_wire[DLB_MAX_NAME];	/* the qname as the client wrote it (0x20 case) */
	/* failover (setFailover): the query as sent, to send it again once */
	const struct dlb_pool *pool;
	uint8_t retried;
	uint8_t client_counted;		/* holds a place in the worker's per-client
					 * outstanding table (dnslb/pipeline/abuse.h) */
	uint8_t ecs_added;		/* enum dlb_ecs_added: what to strip from the answer */
	uint8_t zero_scope;		/* > 0: the ECS option's length at the end of key.opts;
					 * an answer of scope 0 is cached without it */
	uint16_t qlen;			/* 0: not kept (failover off, or too big) */
	/* what the query rules decided that the answer needs */
	int32_t tempfail_ttl;		/* -1: the cache's */
	uint32_t delay_ms;
	uint32_t max_returned_ttl;
	struct dlb_tags tags;		/* n == 0: none */
	uint8_t query[DLB_SLOT_QUERY_MAX];
};

struct dlb_slot_pool {
	struct dlb_slot **chunks;
	uint32_t nchunks;
	uint32_t free_head;		/* free list threaded through ->next */
	uint32_t used;
};

struct dlb_inflight {
	uint32_t *slot_of;		/* [65536] slot index or DLB_SLOT_NONE */
	uint32_t count;			/* live IDs */
	uint32_t max;			/* setMaxUDPOutstanding */
	uint32_t head, tail;		/* FIFO of live slots, oldest first */
};

int dlb_slot_pool_init(struct dlb_slot_pool *p);
void dlb_slot_pool_deinit(struct dlb_slot_pool *p);
/** @return a slot index, or DLB_SLOT_NONE when memory ran out. */
uint32_t dlb_slot_alloc(struct dlb_slot_pool *p);
void dlb_slot_free(struct dlb_slot_pool *p, uint32_t idx);

static inline struct dlb_slot *
dlb_slot_get(const struct dlb_slot_pool *p, uint32_t idx)
{
	return &p->chunks[idx >> 10][idx & 1023];
}

/** @max: the most live IDs (1..65536). @return 0 or DLB_ENOMEM. */
int dlb_inflight_init(struct dlb_inflight *t, uint32_t max);
void dlb_inflight_deinit(struct dlb_inflight *t);

static inline uint32_t
dlb_inflight_count(const struct dlb_inflight *t)
{
	return t->count;
}

/**
 * Give slot @idx a random free ID, append it to the FIFO with @deadline.
 * @return the ID (>= 0), or DLB_EFULL when the table holds @max queries.
 */
int dlb_inflight_add(struct dlb_inflight *t, struct dlb_slot_pool *p, struct dlb_rng *rng,
		     uint32_t idx, double deadline);

/** Slot that holds @id, or DLB_SLOT_NONE. */
static inline uint32_t
dlb_inflight_lookup(const struct dlb_inflight *t, uint16_t id)
{
	return t->slot_of[id];
}

/* What a backend answer is to the in-flight query it claims to answer. */
enum dlb_answer_match {
	DLB_ANSWER_OK = 0,		/* its answer */
	DLB_ANSWER_OTHER,		/* not its answer (unknown ID, another source or another
					 * question): not counted */
	DLB_ANSWER_NONCOMPLIANT,	/* noncompliant-responses, as dnsdist counts it */
};

/**
 * Check answer @pkt (@len bytes) against the question of slot @s: QR=1, the
 * same qname (case-insensitive), qtype and qclass; a header-only answer only
 * for rcodes other than NOERROR/NXDOMAIN unless @allow_empty
 * (setAllowEmptyResponse). As dnsdist 1.7, QR=0, a refused header-only
 * answer and a question that does not parse are noncompliant; an answer
 * for another question is merely not this one's. Streams, whose IDs are
 * per connection, call this once they have found the request by its ID.
 */
enum dlb_answer_match dlb_slot_answer_matches(const struct dlb_slot *s, const uint8_t *pkt,
					      size_t len, bool allow_empty);

/**
 * The slot of table @t that answer @pkt answers: its ID is live, it comes
 * from the slot's source (@from: the sender, NULL on a connected socket) and
 * it answers the slot's question (dlb_slot_answer_matches). @return the
 * slot, or DLB_SLOT_NONE with *@why saying why not. Modifies nothing.
 */
uint32_t dlb_inflight_match(const struct dlb_inflight *t, const struct dlb_slot_pool *p,
			    const uint8_t *pkt, size_t len, const struct sockaddr *from,
			    bool allow_empty, enum dlb_answer_match *why);

/** Remove slot @idx (found by lookup or as the FIFO head); its ID becomes free. */
void dlb_inflight_remove(struct dlb_inflight *t, struct dlb_slot_pool *p, uint32_t idx);

/** Oldest live slot, or DLB_SLOT_NONE. */
static inline uint32_t
dlb_inflight_oldest(const struct dlb_inflight *t)
{
	return t->head;
}

#endif
