/*
 * rings.h - per-worker query and response ring buffers (docs/rings.md)
 * and the readers behind the console's top*() / grepq() tools and the web
 * dashboard.
 *
 * Each worker owns one struct dlb_rings: a query ring and a response ring of
 * fixed capacity, written by that worker only, with plain (relaxed atomic)
 * stores and no lock, allocation or syscall per entry. Readers on the main
 * thread copy entries out under a per-entry sequence number (seqlock): an
 * entry being rewritten while it is read is skipped or read again, never
 * seen torn, and the writer never waits for a reader.
 *
 * An entry is 128 bytes (two cache lines); see docs/rings.md. An answer
 * given locally (from the cache, or by a rule) is folded into its query's
 * entry while that is still in the query ring, instead of taking a response
 * entry of its own: readers of the response side use dlb_rings_visit_worker,
 * which merges the two.
 */
#ifndef DNSLB_RINGS_H
#define DNSLB_RINGS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sockaddr;

/* The longest qname kept whole, in wire bytes (root label included). A longer
 * name keeps its last labels that fit and is marked truncated (shown with a
 * leading "..."); suffix matches and label grouping still work on it. */
#define DLB_RING_NAME_MAX 78

/* struct dlb_ring_rec.backend for answers that no backend gave */
#define DLB_RING_BE_CACHE 0xffff		/* from the packet cache (also stale) */
#define DLB_RING_BE_SELF 0xfffe			/* self-answered (rules, no server, ...) */
#define DLB_RING_TIMEOUT UINT32_MAX		/* usec of a backend timeout */
#define DLB_RING_DEFAULT_SIZE 10000
#define DLB_RING_MAX_SIZE 100000000		/* setRingBuffersSize() bound, per ring */

/* struct dlb_ring_rec.pflags */
#define DLB_RING_TCP 0x01			/* the client used TCP (else UDP) */
#define DLB_RING_V6 0x02			/* client address is IPv6 */
#define DLB_RING_TRUNC_NAME 0x04		/* qname kept only in part */
/* In a query ring's slot only, never in a record a reader is given: the
 * query's local answer (cache hit, self-answered) is folded into the entry
 * (usec holds DLB_RING_FOLD_USEC(size, hflags), ancount and backend are the
 * answer's). dlb_rings_visit_worker shows it as a query and as an answer. */
#define DLB_RING_ANSWERED 0x08
#define DLB_RING_FOLD_USEC(size, hflags) ((uint32_t)(size) << 16 | (uint32_t)(hflags))

/**
 * One ring entry, as written and as copied out by readers. Queries and
 * responses share the format: for a query, size is the query's, hflags and
 * id are the query header's, usec/ancount/backend are 0; for a response they
 * describe the answer the client got (a timeout: usec DLB_RING_TIMEOUT,
 * hflags and ancount 0, id the client's).
 */
struct dlb_ring_rec {
	uint32_t seq;				/* even: stable; odd: being written */
	uint32_t usec;				/* response latency (µs); DLB_RING_TIMEOUT */
	int64_t when_us;			/* wall clock (worker loop time), µs */
	uint8_t addr[16];			/* client address (IPv4: first 4 bytes) */
	uint16_t port;				/* client port, host order */
	uint16_t qtype, qclass;
	uint16_t size;				/* query size, or response size */
	uint16_t id;				/* DNS ID as the client sees it */
	uint16_t hflags;			/* header bytes 2-3: QR opcode AA TC RD RA Z AD CD rcode */
	uint16_t ancount;
	uint16_t backend;			/* backend index, DLB_RING_BE_CACHE, DLB_RING_BE_SELF */
	uint8_t pflags;				/* DLB_RING_TCP, DLB_RING_V6, DLB_RING_TRUNC_NAME */
	uint8_t namelen;			/* wire bytes in name */
	uint8_t name[DLB_RING_NAME_MAX];	/* lowercase wire name (or its last labels) */
};

#define DLB_RING_WORDS (sizeof(struct dlb_ring_rec) / sizeof(uint64_t))

_Static_assert(sizeof(struct dlb_ring_rec) == 128, "ring entries are two cache lines");

/* An entry in memory: the record as words, each stored and loaded atomically
 * (relaxed), so a reader racing the writer is well defined (and TSan-clean);
 * word 0 holds seq (low half) and usec. */
struct dlb_ring_slot {
	_Atomic uint64_t w[DLB_RING_WORDS];
};

/** One ring: single writer, any number of readers. */
struct dlb_ring {
	_Atomic uint64_t pos;			/* entries ever written */
	size_t cap;				/* 0: recording off */
	size_t widx;				/* writer only: pos % cap, the next slot */
	uint32_t wlap;				/* writer only: pos / cap (a slot's seq is 2 x lap) */
	struct dlb_ring_slot *slots;		/* [cap], mmap'ed: pages touched on use */
};

/** A worker's two rings. */
struct dlb_rings {
	struct dlb_ring query;
	struct dlb_ring resp;
};

/**
 * Set the total capacity of each ring, split over the workers (config time).
 * @n = 0 turns recording off. @shards is accepted for dnsdist compatibility
 * (each worker's ring is a shard). Affects rings created afterwards.
 */
void dlb_rings_set_size(size_t n, size_t shards);
/** The total capacity set by dlb_rings_set_size (default 10000). */
size_t dlb_rings_total_size(void);
/**
 * setRingBuffersOptions: which rings record (both by default). A ring that
 * does not record has capacity 0 and maps no memory; a cache hit's or
 * self-answered answer is still recorded when only the query ring is off.
 * Config time; affects rings created afterwards.
 */
void dlb_rings_set_recording(bool queries, bool responses);
/** What dlb_rings_set_recording set. */
void dlb_rings_recording(bool *queries, bool *responses);
/** Create rings of @qcap query and @rcap response entries (tests). */
struct dlb_rings *dlb_rings_new_caps(size_t qcap, size_t rcap);

/**
 * Create a worker's rings for a daemon of @nworkers workers: each ring holds
 * ceil(total / @nworkers) entries. @return NULL on failure (out of memory),
 * logged; capacity 0 is not a failure (recording is then off).
 */
struct dlb_rings *dlb_rings_new(int nworkers);
/** Create rings of exactly @cap entries each (tests). */
struct dlb_rings *dlb_rings_new_cap(size_t cap);
/** Free rings from dlb_rings_new (NULL is fine). */
void dlb_rings_free(struct dlb_rings *r);

/* Word of struct dlb_ring_rec where pflags, namelen and the name begin. */
#define DLB_RING_NAME_WORD (offsetof(struct dlb_ring_rec, pflags) / sizeof(uint64_t))
/* Word that holds id, hflags, ancount and backend (a fold rewrites it). */
#define DLB_RING_ANSWER_WORD (offsetof(struct dlb_ring_rec, id) / sizeof(uint64_t))

_Static_assert(offsetof(struct dlb_ring_rec, pflags) % sizeof(uint64_t) == 0,
	       "pflags starts a word");
_Static_assert(offsetof(struct dlb_ring_rec, backend) / sizeof(uint64_t) == DLB_RING_ANSWER_WORD &&
	       DLB_RING_ANSWER_WORD + 1 == DLB_RING_NAME_WORD,
	       "a fold stores two words after word 0");

/*
 * A slot's sequence number (word 0's low half) moves by DLB_RING_SEQ_STEP
 * per lap: a push stores lap x 4 + 1 (odd: being written) and then + 2; a
 * fold into the same entry later stores + 3 and then + 4. So it only grows,
 * and a reader that saw the same even number before and after its copy saw
 * no write in between.
 */
#define DLB_RING_SEQ_STEP 4

/* Words every push stores at least: the fixed fields and a name of up to 22
 * bytes (www.example.com is 17), stored without a loop. */
#define DLB_RING_MIN_WORDS 9

/*
 * Slots a push prefetches ahead of the one it writes, so the lines are owned
 * by the time they are written: near enough that they are still in cache
 * then (a receive batch is a few queries; lines prefetched for the next
 * batch may be gone after the wait in between). Two rings of 10,000
 * 128-byte entries do not fit a core's L2 with everything else, so without
 * this every push's stores miss to L3 or memory (docs/performance.md, "Ring
 * writes on the hit path").
 */
#define DLB_RING_PREFETCH_AHEAD 4

/* Ask for the lines of the slot DLB_RING_PREFETCH_AHEAD after the next one.
 * For writing: PREFETCHW where the target has it; baseline x86-64 gets
 * PREFETCHT0, which fetches the line exclusive when no other core holds it
 * (readers are rare), so the stores then need no further request. */
static inline void
dlb_ring_prefetch_ahead(const struct dlb_ring *ring)
{
	size_t ahead = ring->widx + DLB_RING_PREFETCH_AHEAD;
	const char *p;

	if (ring->cap <= DLB_RING_PREFETCH_AHEAD)
		return;		/* a tiny ring stays in cache anyway */
	if (ahead >= ring->cap)
		ahead -= ring->cap;
	p = (const char *)&ring->slots[ahead];
	__builtin_prefetch(p, 1, 3);
	__builtin_prefetch(p + 64, 1, 3);
}

/**
 * Append the record whose first @nw words are @w (DLB_RING_MIN_WORDS <= @nw
 * <= DLB_RING_WORDS) to @ring. The slot's later words keep an older record's
 * bytes: a writer passes only the words that hold its name (readers use
 * namelen bytes of it; dlb_ring_read zeroes the rest of the copy). Thread:
 * the ring's owner only. Word 0's low half (seq) is ignored. Cost: @nw + 1
 * plain stores into the next slot; no lock, no syscall.
 */
static inline void
dlb_ring_push_words(struct dlb_ring *ring, const uint64_t *w, size_t nw)
{
	struct dlb_ring_slot *s;
	uint64_t pos;
	uint32_t seq;

	if (ring->cap == 0)
		return;
	pos = atomic_load_explicit(&ring->pos, memory_order_relaxed);
	s = &ring->slots[ring->widx];
	dlb_ring_prefetch_ahead(ring);
	/* the slot's seq without reading it: each lap moved it by
	 * DLB_RING_SEQ_STEP, so the push only stores into the slot and never
	 * waits for its line */
	seq = ring->wlap * DLB_RING_SEQ_STEP;
	/* seqlock write side (Boehm, "Can seqlocks get along with programming
	 * language memory models?", 2012): odd seq, release fence, the data,
	 * then the next even seq with release */
	atomic_store_explicit(&s->w[0], (uint64_t)(uint32_t)(seq + 1), memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
#pragma GCC unroll 8
	for (size_t i = 1; i < DLB_RING_MIN_WORDS; i++)
		atomic_store_explicit(&s->w[i], w[i], memory_order_relaxed);
	for (size_t i = DLB_RING_MIN_WORDS; i < nw; i++)
		atomic_store_explicit(&s->w[i], w[i], memory_order_relaxed);
	atomic_store_explicit(&s->w[0], (w[0] & ~(uint64_t)UINT32_MAX) | (uint32_t)(seq + 2),
			      memory_order_release);
	atomic_store_explicit(&ring->pos, pos + 1, memory_order_release);
	if (++ring->widx == ring->cap) {
		ring->widx = 0;
		ring->wlap++;
	}
}

/** Append @rec to @ring (all its words). Thread: the ring's owner only. @rec->seq is ignored. */
static inline void
dlb_ring_push(struct dlb_ring *ring, const struct dlb_ring_rec *rec)
{
	uint64_t w[DLB_RING_WORDS];

	__builtin_memcpy(w, rec, sizeof(w));
	dlb_ring_push_words(ring, w, DLB_RING_WORDS);
}

/**
 * Copy the entry in slot @slot of @ring into @out. @return false if the
 * writer was rewriting it on every one of a few tries. Never blocks the
 * writer. Thread: any.
 */
bool dlb_ring_read(const struct dlb_ring *ring, size_t slot, struct dlb_ring_rec *out);

/**
 * Visit the entries of @ring oldest first (at most cap; entries overwritten
 * while the visit runs are seen in their newer version or skipped). @fn
 * gets a stable copy, as stored: a query entry may carry a folded answer
 * (DLB_RING_ANSWERED); the tools use dlb_rings_visit_worker instead.
 * @return entries visited. Thread: any.
 */
typedef void dlb_ring_visit_fn(const struct dlb_ring_rec *rec, void *ud);
size_t dlb_ring_visit(const struct dlb_ring *ring, dlb_ring_visit_fn *fn, void *ud);

/* ---- recording (the worker's thread) ---------------------------------------------
 *
 * One call at each place a query is accepted, an answer leaves for the
 * client, or a backend times out. All return at once when recording is off.
 */

struct dlb_worker;
struct dlb_query;
struct dlb_slot;

/**
 * dlb_query_process parsed @q (@rc from dlb_wire_parse_query): record it in
 * the query ring when it parsed (DLB_OK), at q->now (set when its processing
 * began). Starts the bookkeeping of the query's local answer
 * (dlb_rings_local_answer, whose record has the same time), also when only
 * the response ring records.
 */
void dlb_rings_query(struct dlb_worker *w, struct dlb_query *q, int rc);
/** @q was answered from the cache (cache_answer). */
void dlb_rings_cache_hit(struct dlb_query *q);
/**
 * @q is answered locally with @pkt (@len bytes): a cache hit if
 * dlb_rings_cache_hit was called for it, else self-answered. Recorded once
 * per query, only if the query parsed (dlb_rings_query with DLB_OK).
 */
void dlb_rings_local_answer(struct dlb_worker *w, struct dlb_query *q, const uint8_t *pkt,
			    size_t len);
/**
 * The client of in-flight query @s gets @pkt (@len bytes, ID and flags as the
 * client sees them) from @backend (an index, DLB_RING_BE_CACHE for a stale
 * answer, DLB_RING_BE_SELF for a SERVFAIL of ours); @pkt NULL: backend
 * @backend timed out. Internal queries (prefetch) are not recorded.
 */
void dlb_rings_slot(struct dlb_worker *w, const struct dlb_slot *s, const uint8_t *pkt, size_t len,
		    int backend);

/* ---- readers for the console and the web dashboard (main thread) ----------------
 *
 * They read dlb_daemon.workers[0..nworkers) (none: empty results) without
 * stopping or slowing the workers.
 */

/**
 * Visit the queries (@resp false) or the answers of one worker's rings,
 * oldest first. Queries are the query ring's entries. Answers are the
 * response ring's entries and the answers folded into the query ring's,
 * merged by time, the newest response-ring capacity of them (no answers when
 * the response ring does not record). Records are given as a query's or an
 * answer's (DLB_RING_ANSWERED cleared). @return entries visited.
 */
size_t dlb_rings_visit_worker(const struct dlb_rings *rs, bool resp, dlb_ring_visit_fn *fn,
			      void *ud);
/** dlb_rings_visit_worker for every worker. @return entries visited. */
uint64_t dlb_rings_visit_all(bool resp, dlb_ring_visit_fn *fn, void *ud);

struct dlb_top_entry {
	char key[300];
	uint64_t count;
};

enum dlb_top_kind {
	DLB_TOP_QNAMES,		/* query ring, by qname: topQueries */
	DLB_TOP_RCODE,		/* response ring, answers with rcode: topResponses */
	DLB_TOP_SLOW,		/* response ring, usec > min_usec (timeouts too): topSlow */
	DLB_TOP_TIMEOUTS,	/* response ring, timeouts: topTimeouts */
	DLB_TOP_CLIENTS,	/* query ring, by client address: topClients */
	DLB_TOP_BANDWIDTH,	/* both rings, bytes by client address: topBandwidth */
};

struct dlb_top_spec {
	enum dlb_top_kind kind;
	int labels;		/* names: keep the last @labels labels; < 0: whole names */
	unsigned rcode;		/* DLB_TOP_RCODE */
	uint64_t min_usec;	/* DLB_TOP_SLOW */
};

/**
 * The @n (SIZE_MAX: all) biggest keys of @spec, biggest first (ties in key
 * order), into a malloc'ed array *@out that the caller frees. Keys are names
 * ("www.example.com.", truncated ones "...example.com.") or client addresses
 * ("192.0.2.1", "2001:db8::1"). *@total is the sum over every key, *@rest
 * the sum over the keys beyond @n. @return the number of entries in *@out,
 * or -1 when out of memory (*@out NULL).
 */
long dlb_rings_top(const struct dlb_top_spec *spec, size_t n, struct dlb_top_entry **out,
		   uint64_t *total, uint64_t *rest);

/**
 * The @n most frequent qnames (grouped to the last @labels labels; 0 = whole
 * names) in all workers' query rings, most frequent first, into @out[@n].
 * *@total = entries seen. Reads dlb_daemon.workers; safe with 0 workers.
 * @return entries written to @out.
 */
size_t dlb_rings_top_names(size_t n, int labels, struct dlb_top_entry *out, uint64_t *total);
/**
 * The @n clients (address text) with the most queries in all workers' query
 * rings, into @out[@n]; *@total = entries seen. @return entries written.
 */
size_t dlb_rings_top_clients(size_t n, struct dlb_top_entry *out, uint64_t *total);

/* ---- formatting helpers (shared with lua/rings_lua.c) ---- */

/** The client of @rec as text, "192.0.2.1" or with @port "192.0.2.1:53" / "[::1]:53". */
void dlb_ring_client_text(const struct dlb_ring_rec *rec, bool port, char *out, size_t outsz);
/** The qname of @rec as text (DLB_WIRE_NAME_TEXT_MAX + 3 bytes suffice). */
void dlb_ring_name_text(const struct dlb_ring_rec *rec, char *out, size_t outsz);

#endif
