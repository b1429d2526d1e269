/*
 * query.h - the query pipeline shared by the UDP and TCP frontends:
 * parse, header checks, (rules: later issue), pool and backend selection,
 * local answers. Transport-specific work (sending, framing) stays in
 * frontend.c, tcp_client.c, backend.c and tcp_upstream.c.
 *
 * Thread: the owning worker.
 */
#ifndef DNSLB_QUERY_H
#define DNSLB_QUERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dnslb/core/cache.h"
#include "dnslb/core/inflight.h"
#include "dnslb/core/wire.h"
#include "rules/rules.h"

struct dlb_worker;
struct dlb_client;
struct dlb_backend;
struct dlb_pool;
struct dlb_slot;
union dlb_sockaddr;

enum dlb_verdict {
	DLB_V_DROP = 0,		/* say nothing (UDP) */
	DLB_V_CLOSE,		/* malformed on TCP: close the connection */
	DLB_V_ANSWER,		/* q->pkt now holds a local answer of q->len bytes */
	DLB_V_FORWARD,		/* send to q->be */
};

struct dlb_query {
	/* What a cache hit reads or writes comes first (two lines), then the
	 * parse and the key, each with its fields before its name. */
	uint8_t *pkt;		/* the query; answers are built in place (cache hits over
				 * TCP go to the worker's scratch buffer, and pkt points there) */
	size_t len;
	size_t cap;		/* bytes available at pkt */
	const struct dlb_pool *pool;
	struct dlb_backend *be;
	struct dlb_cache *cache;	/* the pool's cache if the query is cacheable */
	const struct sockaddr *client;	/* the client's address (ECS, rules) */
	const struct sockaddr *local;	/* the address it asked (rules); NULL: unknown */
	/* decided by the query rules (rules/rules.h), carried into the slot */
	const struct dlb_tags *tags;	/* NULL: no tags */
	const struct dlb_ruleset *rs;	/* the rules in force for this query */
	double now;			/* the worker's loop time when it began (s): read
					 * once for the query's record and its cache lookup */
	uint64_t ring_pos;		/* dnslb/pipeline/rings.c: the position of its query-ring record */
	uint32_t ring_slot;		/* dnslb/pipeline/rings.c: that record's slot */
	int32_t tempfail_ttl;		/* -1: the cache's temporaryFailureTTL */
	uint32_t delay_ms;		/* delay the answer (UDP) */
	uint32_t max_returned_ttl;	/* 0: none */
	uint16_t orig_flags;		/* the client's flags, before rules changed m.flags
					 * (SetNoRecurse): restored in the answer */
	uint16_t udp_max;		/* the largest UDP answer the client takes, as it
					 * asked (setMaxUDPAnswerSize caps it) */
	bool tcp;
	bool skip_cache;
	bool has_dq;			/* the query rules ran: dq is valid */
	uint8_t ecslen;			/* 0: none */
	bool zero_scope;		/* the cache's zero-scope feature applies (parseECS) */
	uint8_t ring_flags;		/* dnslb/pipeline/rings.c: in the query ring, answered from the
					 * cache (the query's own: a receive batch prepares
					 * every query before it answers any) */
	struct dlb_dnsmsg m;
	struct dlb_cache_key key;	/* question fields always; the whole key with a cache */
	struct dlb_dq dq;		/* the query rules' view (ECS choices, tags) */
	uint8_t ecs[32];		/* the ECS option to add when q->be uses ECS */
	struct dlb_dq_http *http;	/* DoT and DoH: what the rules see of the transport
					 * (rules/rules.h), the frontend's; NULL: plain UDP
					 * and TCP. Last: only the rules read it, and a UDP
					 * query never writes it (its slot is zeroed once) */
};

/**
 * Add the ECS option prepared in @q to the packet at @pkt (@len bytes, room
 * for @cap), when q->be uses ECS. @return the new length; *@added says what
 * to strip from the answer.
 */
size_t dlb_query_add_ecs(const struct dlb_worker *w, const struct dlb_query *q, uint8_t *pkt,
			 size_t len, size_t cap, uint8_t *added);

/**
 * Run a query (already past the ACL, already counted in `queries`) through
 * the pipeline. Counters are updated here; the caller sends.
 */
enum dlb_verdict dlb_query_process(struct dlb_worker *w, struct dlb_query *q);

/*
 * dlb_query_process in two steps, so that a receive batch can overlap its
 * cache misses (dnslb/frontend/frontend.c): dlb_query_prepare runs the parse,
 * dynamic blocks, query rules and the cache key, and starts loading the
 * key's cache set; false: *@v is the final verdict; true:
 * dlb_query_prefetch_entry may run (once the set has had time to arrive),
 * then dlb_query_finish must (server selection, the client's subnet in the
 * key for a useClientSubnet backend, the lookup, the rest; its verdict is
 * final). Same counters and results as dlb_query_process.
 */
bool dlb_query_prepare(struct dlb_worker *w, struct dlb_query *q, enum dlb_verdict *v);
void dlb_query_prefetch_entry(const struct dlb_query *q);
enum dlb_verdict dlb_query_finish(struct dlb_worker *w, struct dlb_query *q);

/**
 * @q's answer came from the second-level cache (dnslb/pipeline/l2cache.h) and is in
 * q->pkt (q->len bytes, room for q->cap): run the cache-hit rules and
 * SetMaxReturnedTTL on it as on a local hit. @return DLB_V_ANSWER (possibly
 * edited) or DLB_V_DROP.
 */
enum dlb_verdict dlb_query_cache_hit_rules(struct dlb_worker *w, struct dlb_query *q);

/**
 * An answer of @len bytes in @pkt is larger than its UDP client can take
 * (dlb_client.udp_max): make it a TC=1 answer in place, as dnsdist 1.7 does
 * for a UDP client of a TCP-only backend: its header with TC, its question,
 * no records, and when it had an OPT RR (and
 * setAddEDNSToSelfGeneratedResponses) an OPT with its payload size and DO
 * bit. @return the new length.
 */
size_t dlb_query_tc_for_client(const struct dlb_worker *w, uint8_t *pkt, size_t len);

/*
 * The NOTIMP dnslb sends to an empty query (qdcount 0): dnsdist 1.7.3 leaves
 * it out of the latency figures and self-answered. A header-only answer from
 * the cache (a SERVFAIL or REFUSED kept for temporaryFailureTTL) is counted.
 */
static inline bool
dlb_query_is_empty_notimp(const uint8_t *pkt)
{
	return (pkt[4] | pkt[5]) == 0 && DLB_RCODE(pkt[3]) == DLB_RCODE_NOTIMP;
}

/*
 * The rules worker @w applies: its snapshot's (docs/architecture.md#publication).
 * A worker of a unit test without a daemon has none there: the rules
 * module's own. Thread: the worker, in its epoch section.
 */
const struct dlb_ruleset *dlb_query_rules(const struct dlb_worker *w);

/* A UDP client's answer as it may go out: never cut, never larger than it takes. */
static inline size_t
dlb_query_fit_udp(const struct dlb_worker *w, const struct dlb_client *c, uint8_t *pkt,
		  size_t len)
{
	if (len <= 512 || c->udp_max == 0 || len <= c->udp_max)
		return len;
	return dlb_query_tc_for_client(w, pkt, len);
}

/**
 * The PROXY v2 header for a query of client @c (@tcp: the TCP flavour):
 * source the client, destination the address and port it asked; a LOCAL
 * header for dnslb's own queries. @out needs DLB_PP2_MAX bytes.
 * @return its length.
 */
size_t dlb_query_pp_header(const struct dlb_worker *w, const struct dlb_client *c, bool tcp,
			   uint8_t *out);

/**
 * The local address client @c asked (its listener's, with the destination
 * of a wildcard listener filled in) into @out. @return @out, or NULL for
 * internal queries.
 */
const struct sockaddr *dlb_query_client_local(const struct dlb_worker *w,
					      const struct dlb_client *c, union dlb_sockaddr *out);

/**
 * A SERVFAIL for the query of slot @s from client @cl into @buf (at least
 * DLB_DNS_HDR + DLB_MAX_NAME + 4 bytes): the client's ID, opcode, RD and CD,
 * its question as it wrote it. @return its length.
 */
size_t dlb_query_slot_servfail(const struct dlb_slot *s, const struct dlb_client *cl,
			       uint8_t *buf);

/** Fill slot @s for query @q of client @c (question, cache key, client). */
void dlb_query_fill_slot(struct dlb_slot *s, const struct dlb_query *q, const struct dlb_client *c);

/**
 * Turn a matched backend answer into the client's answer in place: the
 * client's ID, and its RD and CD bits restored. Then the response rules run
 * (they may edit TTLs, remove records, drop it or turn it into SERVFAIL);
 * then it is accounted (responses, rcode counters, latency, the backend's
 * counters) and inserted into the cache when the query was cacheable, and
 * the cache-inserted rules and SetMaxReturnedTTL apply to the copy sent.
 * Internal (prefetch) queries only refresh the cache. An ECS option or OPT
 * RR dnslb added is removed first.
 * *@pkt may be redirected to the worker's scratch buffer (a SERVFAIL built
 * by a rule): send that at once, do not batch it. *@delay_ms: delay the
 * answer to a UDP client by that much (0: none).
 * @return the answer's length, 0 to send nothing (dropped by a rule, or an
 * internal query).
 */
size_t dlb_query_finish_response(struct dlb_worker *w, uint8_t **pkt, size_t len,
				 const struct dlb_slot *s, uint32_t *delay_ms);

/**
 * A query of slot @s timed out: with setServeStaleOnTimeout, answer it from
 * an expired cache entry (within setStaleCacheEntriesTTL).
 * @return true if the client was answered.
 */
bool dlb_query_answer_stale(struct dlb_worker *w, const struct dlb_slot *s);

/** Account an answer sent to a client (rcode counters and latency). */
void dlb_query_account_answer(struct dlb_worker *w, const uint8_t *pkt, size_t len,
			      double t_start);
/**
 * Account an answer made in the receive batch of its query (a cache hit, a
 * self-answered query): its rcode now, its latency (none) with the batch's
 * others at dlb_query_account_flush.
 */
void dlb_query_account_local(struct dlb_worker *w, const uint8_t *pkt);
/** Record the latency of the answers dlb_query_account_local has counted. */
void dlb_query_account_flush(struct dlb_worker *w);

#endif
