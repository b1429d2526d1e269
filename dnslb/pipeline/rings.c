/*
 * rings.c - per-worker query and response rings: sizing, recording from the
 * query pipeline, and the readers behind topQueries() & co.
 *
 * Writers are the workers, each to its own rings (dlb_ring_push in rings.h:
 * a seqlock per entry, relaxed atomic word stores). Readers run on the main
 * thread: they copy each entry out (dlb_ring_read), check its sequence
 * number did not move, and work on the copy. They allocate freely (a hash
 * table of the keys they count); the writers never notice them.
 */
#include "dnslb/pipeline/rings.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "dnslb/core/daemon.h"
#include "dnslb/core/buf.h"
#include "dnslb/core/hash.h"
#include "dnslb/core/hashtab.h"
#include "dnslb/core/inflight.h"
#include "dnslb/core/log.h"
#include "dnslb/pipeline/query.h"
#include "dnslb/core/wire.h"
#include "dnslb/core/wstate.h"

/* struct dlb_query.ring_flags */
#define RINGS_CUR_NOTED 0x01		/* it parsed: its local answer goes in the response ring */
#define RINGS_CUR_HIT 0x02		/* answered from the cache */

static size_t ring_total = DLB_RING_DEFAULT_SIZE;
static bool record_queries = true, record_responses = true;

void
dlb_rings_set_size(size_t n, size_t shards)
{
	(void)shards;	/* each worker's ring is a shard: see docs/rings.md */
	ring_total = n > DLB_RING_MAX_SIZE ? DLB_RING_MAX_SIZE : n;
}

size_t
dlb_rings_total_size(void)
{
	return ring_total;
}

void
dlb_rings_set_recording(bool queries, bool responses)
{
	record_queries = queries;
	record_responses = responses;
}

void
dlb_rings_recording(bool *queries, bool *responses)
{
	*queries = record_queries;
	*responses = record_responses;
}

static int
ring_init(struct dlb_ring *ring, size_t cap)
{
	void *p;

	atomic_init(&ring->pos, 0);
	ring->widx = 0;
	ring->wlap = 0;
	ring->cap = 0;
	ring->slots = NULL;
	if (cap == 0)
		return 0;
	/* zero pages, made resident only as the ring fills */
	p = mmap(NULL, cap * sizeof(struct dlb_ring_slot), PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -1;
	ring->slots = p;
	ring->cap = cap;
	return 0;
}

static void
ring_deinit(struct dlb_ring *ring)
{
	if (ring->slots != NULL)
		munmap(ring->slots, ring->cap * sizeof(struct dlb_ring_slot));
	ring->slots = NULL;
	ring->cap = 0;
}

struct dlb_rings *
dlb_rings_new_caps(size_t qcap, size_t rcap)
{
	struct dlb_rings *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return NULL;
	if (ring_init(&r->query, qcap) != 0 || ring_init(&r->resp, rcap) != 0) {
		dlb_rings_free(r);
		return NULL;
	}
	return r;
}

struct dlb_rings *
dlb_rings_new_cap(size_t cap)
{
	return dlb_rings_new_caps(cap, cap);
}

struct dlb_rings *
dlb_rings_new(int nworkers)
{
	size_t n = nworkers > 0 ? (size_t)nworkers : 1;
	size_t cap = (ring_total + n - 1) / n;
	size_t qcap = record_queries ? cap : 0, rcap = record_responses ? cap : 0;
	struct dlb_rings *r = dlb_rings_new_caps(qcap, rcap);

	if (r == NULL)
		dlb_err("ring buffers: cannot map %zu + %zu entries (%zu bytes)", qcap, rcap,
			(qcap + rcap) * sizeof(struct dlb_ring_slot));
	return r;
}

void
dlb_rings_free(struct dlb_rings *r)
{
	if (r == NULL)
		return;
	ring_deinit(&r->query);
	ring_deinit(&r->resp);
	free(r);
}

/* ---- reading ------------------------------------------------------------------ */

bool
dlb_ring_read(const struct dlb_ring *ring, size_t slot, struct dlb_ring_rec *out)
{
	struct dlb_ring_slot *s = &ring->slots[slot];
	uint64_t w[DLB_RING_WORDS];

	for (int tries = 0; tries < 8; tries++) {
		uint64_t w0 = atomic_load_explicit(&s->w[0], memory_order_acquire), w0b;

		if (w0 & 1)
			continue;	/* being written: a few stores away from done */
		w[0] = w0;
		for (size_t i = 1; i < DLB_RING_WORDS; i++)
			w[i] = atomic_load_explicit(&s->w[i], memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire);
		w0b = atomic_load_explicit(&s->w[0], memory_order_relaxed);
		if (w0b == w0) {
			memcpy(out, w, sizeof(*out));
			/* the slot's bytes past the name are an older record's */
			if (out->namelen < DLB_RING_NAME_MAX)
				memset(out->name + out->namelen, 0,
				       DLB_RING_NAME_MAX - out->namelen);
			return true;
		}
	}
	return false;
}

/* A query-ring entry as its query: the folded answer's fields cleared. */
static void
rec_as_query(struct dlb_ring_rec *r)
{
	if (!(r->pflags & DLB_RING_ANSWERED))
		return;
	r->usec = 0;
	r->ancount = 0;
	r->backend = 0;
	r->pflags &= (uint8_t)~DLB_RING_ANSWERED;
}

/* A query-ring entry with a folded answer as that answer. */
static void
rec_as_answer(struct dlb_ring_rec *r)
{
	r->size = (uint16_t)(r->usec >> 16);
	r->hflags = (uint16_t)r->usec;
	r->usec = 0;
	r->pflags &= (uint8_t)~DLB_RING_ANSWERED;
}

/* Reads one ring's entries oldest first: all of them as they are (a
 * response ring), as queries, or only the folded answers, as answers. */
enum rit_mode { RIT_ALL, RIT_QUERIES, RIT_FOLDED };

struct rit {
	const struct dlb_ring *ring;
	enum rit_mode mode;
	uint64_t i, end;
	bool have;			/* rec holds the next entry */
	struct dlb_ring_rec rec;
};

static void
rit_next(struct rit *it)
{
	const struct dlb_ring *ring = it->ring;

	it->have = false;
	while (it->i < it->end) {
		/* a bad namelen cannot happen with a stable copy; never trust it */
		if (!dlb_ring_read(ring, (size_t)(it->i++ % ring->cap), &it->rec) ||
		    it->rec.namelen > DLB_RING_NAME_MAX)
			continue;
		if (it->mode == RIT_QUERIES) {
			rec_as_query(&it->rec);
		} else if (it->mode == RIT_FOLDED) {
			if (!(it->rec.pflags & DLB_RING_ANSWERED))
				continue;
			rec_as_answer(&it->rec);
		}
		it->have = true;
		return;
	}
}

static void
rit_init(struct rit *it, const struct dlb_ring *ring, enum rit_mode mode)
{
	uint64_t pos = atomic_load_explicit(&ring->pos, memory_order_acquire);
	uint64_t n = pos < ring->cap ? pos : ring->cap;

	it->ring = ring;
	it->mode = mode;
	it->i = pos - n;
	it->end = pos;
	rit_next(it);
}

size_t
dlb_ring_visit(const struct dlb_ring *ring, dlb_ring_visit_fn *fn, void *ud)
{
	struct rit it;
	size_t seen = 0;

	for (rit_init(&it, ring, RIT_ALL); it.have; rit_next(&it), seen++)
		fn(&it.rec, ud);
	return seen;
}

size_t
dlb_rings_visit_worker(const struct dlb_rings *rs, bool resp, dlb_ring_visit_fn *fn, void *ud)
{
	struct rit a, f;
	uint64_t total = 0, skip;
	size_t seen = 0;

	if (!resp) {
		for (rit_init(&a, &rs->query, RIT_QUERIES); a.have; rit_next(&a), seen++)
			fn(&a.rec, ud);
		return seen;
	}
	if (rs->resp.cap == 0)
		return 0;
	/* the newest resp.cap answers of both kinds: count, then skip the
	 * oldest (entries written in between make it a few more at most) */
	for (rit_init(&a, &rs->resp, RIT_ALL); a.have; rit_next(&a))
		total++;
	for (rit_init(&f, &rs->query, RIT_FOLDED); f.have; rit_next(&f))
		total++;
	skip = total > rs->resp.cap ? total - rs->resp.cap : 0;
	rit_init(&a, &rs->resp, RIT_ALL);
	rit_init(&f, &rs->query, RIT_FOLDED);
	while (a.have || f.have) {
		/* at the same time, a folded answer first: it was given at once */
		struct rit *it = !f.have || (a.have && a.rec.when_us < f.rec.when_us) ? &a : &f;

		if (skip > 0) {
			skip--;
		} else {
			fn(&it->rec, ud);
			seen++;
		}
		rit_next(it);
	}
	return seen;
}

uint64_t
dlb_rings_visit_all(bool resp, dlb_ring_visit_fn *fn, void *ud)
{
	uint64_t n = 0;

	for (int i = 0; i < dlb_daemon.nworkers; i++) {
		const struct dlb_rings *r = dlb_daemon.workers[i]->rings;

		if (r != NULL)
			n += dlb_rings_visit_worker(r, resp, fn, ud);
	}
	return n;
}

/* ---- recording ---------------------------------------------------------------- */

/*
 * A record being built: its words are what the push stores. rec_begin
 * zeroes the fixed fields (the words before the name's) and the word where
 * the name starts; rec_name zeroes the words the name ends in and says how
 * many words to store, so a short name costs a few stores, not a whole
 * 128-byte record.
 */
union ring_build {
	struct dlb_ring_rec r;
	uint64_t w[DLB_RING_WORDS];
};

static inline void
rec_begin(union ring_build *b)
{
	for (size_t i = 0; i <= DLB_RING_NAME_WORD; i++)
		b->w[i] = 0;
}

static inline void
rec_client(struct dlb_ring_rec *r, const struct sockaddr *sa)
{
	if (sa == NULL)
		return;
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

		memcpy(r->addr, &s6->sin6_addr, 16);
		r->port = ntohs(s6->sin6_port);
		r->pflags |= DLB_RING_V6;
	} else if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;

		memcpy(r->addr, &s4->sin_addr, 4);
		r->port = ntohs(s4->sin_port);
	}
}

/* The name, or its last labels that fit (a name is at most 255 bytes).
 * @return the words of @b to store: through the one holding the name's
 * last byte, at least DLB_RING_MIN_WORDS. */
static inline size_t
rec_name(union ring_build *b, const uint8_t *name, size_t len)
{
	struct dlb_ring_rec *r = &b->r;
	size_t off = 0, nw;

	if (len > DLB_RING_NAME_MAX) {
		while (off < len && len - off > DLB_RING_NAME_MAX)
			off += 1 + (size_t)name[off];
		if (off >= len)
			len = off = 0;	/* not a wire name: keep none of it */
		else
			r->pflags |= DLB_RING_TRUNC_NAME;
	}
	r->namelen = (uint8_t)(len - off);
	nw = (offsetof(struct dlb_ring_rec, name) + r->namelen + sizeof(uint64_t) - 1) /
	     sizeof(uint64_t);
	if (nw < DLB_RING_MIN_WORDS)
		nw = DLB_RING_MIN_WORDS;
#pragma GCC unroll 2
	for (size_t i = DLB_RING_NAME_WORD + 1; i < DLB_RING_MIN_WORDS; i++)
		b->w[i] = 0;
	for (size_t i = DLB_RING_MIN_WORDS; i < nw; i++)
		b->w[i] = 0;
	dlb_copy_short(r->name, name + off, len - off);	/* inline for 8..64 bytes */
	return nw;
}

static inline uint16_t
clamp16(size_t v)
{
	return v > UINT16_MAX ? UINT16_MAX : (uint16_t)v;
}

static inline int64_t
now_us(struct dlb_worker *w)
{
	return (int64_t)(dlb_worker_now(w) * 1e6);
}

/* What a query's record and its local answer's share: time (@now, s),
 * client, name, type, class, transport. @return the words to store
 * (rec_name). */
static inline size_t
rec_query(union ring_build *b, double now, const struct dlb_query *q)
{
	struct dlb_ring_rec *r = &b->r;
	size_t nw;

	rec_begin(b);
	r->when_us = (int64_t)(now * 1e6);
	rec_client(r, q->client);
	nw = rec_name(b, q->m.qname_lc, q->m.qname_len);
	r->qtype = q->m.qtype;
	r->qclass = q->m.qclass;
	if (q->tcp)
		r->pflags |= DLB_RING_TCP;
	return nw;
}

DLB_HOT void
dlb_rings_query(struct dlb_worker *w, struct dlb_query *q, int rc)
{
	struct dlb_rings *rs = w->rings;
	union ring_build b;
	struct dlb_ring_rec *r = &b.r;
	size_t nw;

	q->ring_flags = 0;
	if (rs == NULL || rc != DLB_OK)
		return;
	if (rs->query.cap == 0) {
		/* setRingBuffersOptions({recordQueries=false}): a local answer
		 * is still recorded, built from scratch (rec_from_query_ring
		 * finds no query ring) */
		q->ring_flags = rs->resp.cap != 0 ? RINGS_CUR_NOTED : 0;
		return;
	}
	nw = rec_query(&b, q->now, q);
	r->size = clamp16(q->len);
	r->id = q->m.id;
	r->hflags = q->m.flags;
	q->ring_pos = atomic_load_explicit(&rs->query.pos, memory_order_relaxed);
	q->ring_slot = (uint32_t)rs->query.widx;
	dlb_ring_push_words(&rs->query, b.w, nw);
	q->ring_flags = rs->resp.cap != 0 ? RINGS_CUR_NOTED : 0;
}

/*
 * Fold @q's local answer into @q's own entry of the query ring: the answer
 * shares the entry's time, client, name, type, class, transport and ID, so
 * only its size, flags, counts and source are stored, into lines this thread
 * wrote a moment ago, instead of a new response entry (two more lines, which
 * the ring's turnover then evicts). Seqlock as dlb_ring_push_words, with the
 * slot's next sequence numbers (DLB_RING_SEQ_STEP). @return false when the
 * answer cannot be folded: the query ring does not record, the slot has been
 * written since (more queries recorded than it holds), or the answer's ID is
 * not the query's.
 */
static inline bool
fold_answer(struct dlb_ring *ring, const struct dlb_query *q, uint16_t size, uint16_t id,
	    uint16_t hflags, uint16_t ancount, uint16_t backend)
{
	uint64_t pos = atomic_load_explicit(&ring->pos, memory_order_relaxed);
	struct dlb_ring_slot *s;
	union ring_build b;
	uint32_t seq;

	if (ring->cap == 0 || pos == q->ring_pos || pos - q->ring_pos > ring->cap)
		return false;
	s = &ring->slots[q->ring_slot];
	/* only the words a fold checks or rewrites */
	b.w[0] = atomic_load_explicit(&s->w[0], memory_order_relaxed);
	b.w[DLB_RING_ANSWER_WORD] =
		atomic_load_explicit(&s->w[DLB_RING_ANSWER_WORD], memory_order_relaxed);
	b.w[DLB_RING_NAME_WORD] =
		atomic_load_explicit(&s->w[DLB_RING_NAME_WORD], memory_order_relaxed);
	seq = (uint32_t)b.w[0];
	if (b.r.id != id || seq % DLB_RING_SEQ_STEP != 2)
		return false;
	b.r.usec = DLB_RING_FOLD_USEC(size, hflags);
	b.r.ancount = ancount;
	b.r.backend = backend;
	b.r.pflags |= DLB_RING_ANSWERED;
	atomic_store_explicit(&s->w[0], (uint64_t)(seq + 1), memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&s->w[DLB_RING_ANSWER_WORD], b.w[DLB_RING_ANSWER_WORD],
			      memory_order_relaxed);
	atomic_store_explicit(&s->w[DLB_RING_NAME_WORD], b.w[DLB_RING_NAME_WORD],
			      memory_order_relaxed);
	atomic_store_explicit(&s->w[0], (b.w[0] & ~(uint64_t)UINT32_MAX) | (uint32_t)(seq + 2),
			      memory_order_release);
	return true;
}

void
dlb_rings_cache_hit(struct dlb_query *q)
{
	q->ring_flags |= RINGS_CUR_HIT;
}

DLB_HOT void
dlb_rings_local_answer(struct dlb_worker *w, struct dlb_query *q, const uint8_t *pkt,
		       size_t len)
{
	struct dlb_rings *rs = w->rings;
	union ring_build b;
	struct dlb_ring_rec *r = &b.r;
	uint16_t size, id, hflags, ancount, backend;
	size_t nw;

	if (rs == NULL || !(q->ring_flags & RINGS_CUR_NOTED) || len < DLB_DNS_HDR)
		return;
	size = clamp16(len);
	id = dlb_rd16(pkt);
	hflags = dlb_rd16(pkt + 2);
	ancount = dlb_rd16(pkt + 6);
	backend = (q->ring_flags & RINGS_CUR_HIT) ? DLB_RING_BE_CACHE : DLB_RING_BE_SELF;
	q->ring_flags = 0;
	if (fold_answer(&rs->query, q, size, id, hflags, ancount, backend))
		return;
	/* no query entry to fold into: an entry of its own, built again */
	nw = rec_query(&b, q->now, q);
	r->size = size;
	r->id = id;
	r->hflags = hflags;
	r->ancount = ancount;
	r->backend = backend;
	dlb_ring_push_words(&rs->resp, b.w, nw);
}

void
dlb_rings_slot(struct dlb_worker *w, const struct dlb_slot *s, const uint8_t *pkt, size_t len,
	       int backend)
{
	struct dlb_rings *rs = w->rings;
	union ring_build b;
	struct dlb_ring_rec *r = &b.r;
	size_t nw;

	if (rs == NULL || rs->resp.cap == 0 || s->client.proto == DLB_CLIENT_INTERNAL)
		return;
	rec_begin(&b);
	r->when_us = now_us(w);
	rec_client(r, &s->client.peer.sa);
	nw = rec_name(&b, s->key.qname_lc, s->key.qname_len);
	r->qtype = s->key.qtype;
	r->qclass = s->key.qclass;
	r->backend = (uint16_t)backend;
	if (s->client.proto == DLB_CLIENT_TCP)
		r->pflags |= DLB_RING_TCP;
	if (pkt == NULL || len < DLB_DNS_HDR) {
		/* a timeout: dnsdist's zeroed header but the ID */
		r->usec = DLB_RING_TIMEOUT;
		r->id = s->client.orig_id;
	} else {
		double usec = (dlb_worker_now(w) - s->client.t_start) * 1e6;

		r->usec = usec <= 0 ? 0 : usec >= (double)(UINT32_MAX - 1) ? UINT32_MAX - 1
									  : (uint32_t)usec;
		r->size = clamp16(len);
		r->id = dlb_rd16(pkt);
		r->hflags = dlb_rd16(pkt + 2);
		r->ancount = dlb_rd16(pkt + 6);
	}
	dlb_ring_push_words(&rs->resp, b.w, nw);
}

/* ---- text ---------------------------------------------------------------------- */

void
dlb_ring_client_text(const struct dlb_ring_rec *rec, bool port, char *out, size_t outsz)
{
	char a[INET6_ADDRSTRLEN];
	bool v6 = rec->pflags & DLB_RING_V6;

	if (inet_ntop(v6 ? AF_INET6 : AF_INET, rec->addr, a, sizeof(a)) == NULL)
		strcpy(a, "?");
	if (!port)
		snprintf(out, outsz, "%s", a);
	else if (v6)
		snprintf(out, outsz, "[%s]:%u", a, rec->port);
	else
		snprintf(out, outsz, "%s:%u", a, rec->port);
}

void
dlb_ring_name_text(const struct dlb_ring_rec *rec, char *out, size_t outsz)
{
	const char *pre = (rec->pflags & DLB_RING_TRUNC_NAME) ? "..." : "";
	char t[DLB_WIRE_NAME_TEXT_MAX];

	if (rec->namelen == 0 || dlb_wire_name_to_text(rec->name, rec->namelen, t, sizeof(t)) < 0)
		strcpy(t, rec->namelen == 0 && !(rec->pflags & DLB_RING_TRUNC_NAME) ? "." : "?");
	snprintf(out, outsz, "%s%s", pre, t);
}

/* ---- counting: a hash table of keys (names, addresses) ------------------------- */

struct cslot {
	uint64_t count;
	uint32_t off;			/* key bytes in counter.keys */
	uint16_t len;
	uint16_t flags;			/* DLB_RING_TRUNC_NAME / DLB_RING_V6 of the key's entry */
	uint32_t tag;			/* the table's */
};

/* A key looked up: its bytes and flags, and the arena the slots point into. */
struct ckey {
	const uint8_t *k, *arena;
	uint16_t len, flags;
};

/*
 * The keys counted are at most the rings' entries (setRingBuffersSize), so
 * the table takes the hashtab's largest bound (2^30 slots); past it, the
 * count fails as out of memory does.
 */
struct counter {
	struct dlb_hashtab t;		/* of struct cslot */
	struct dlb_buf keys;		/* the keys' bytes, unbounded */
	uint64_t total;
	bool oom;
	const struct dlb_top_spec *spec;
};

static bool
cslot_eq(const void *e, const void *key)
{
	const struct cslot *s = e;
	const struct ckey *k = key;

	return s->len == k->len && s->flags == k->flags &&
	       memcmp(k->arena + s->off, k->k, k->len) == 0;
}

static void
counter_add(struct counter *c, const uint8_t *k, size_t len, uint16_t flags, uint64_t v)
{
	uint64_t h = dlb_fnv1a64(k, len, DLB_FNV1A64_INIT ^ flags);
	struct ckey key = { k, (const uint8_t *)c->keys.p, (uint16_t)len, flags };
	struct cslot *s;

	if (c->oom)
		return;
	c->total += v;
	s = dlb_hashtab_find(&c->t, h, cslot_eq, &key);
	if (s != NULL) {
		s->count += v;
		return;
	}
	if (len > UINT32_MAX - c->keys.len || dlb_buf_reserve(&c->keys, len) != DLB_OK ||
	    (s = dlb_hashtab_add(&c->t, h)) == NULL) {
		c->oom = true;
		return;
	}
	s->count = v;
	s->off = (uint32_t)c->keys.len;
	s->len = (uint16_t)len;
	s->flags = flags;
	dlb_buf_append(&c->keys, k, len);
}

/* The offset of the last @labels labels of wire name @n (@len bytes). */
static size_t
name_tail(const uint8_t *n, size_t len, int labels)
{
	size_t offs[DLB_RING_NAME_MAX], k = 0, off = 0;

	while (off < len && n[off] != 0 && k < DLB_RING_NAME_MAX) {
		offs[k++] = off;
		off += 1 + (size_t)n[off];
	}
	if (labels < 0 || (size_t)labels >= k)
		return 0;
	return labels == 0 ? (off < len ? off : len) : offs[k - (size_t)labels];
}

static void
count_name(struct counter *c, const struct dlb_ring_rec *r)
{
	size_t off = name_tail(r->name, r->namelen, c->spec->labels);
	uint16_t flags = r->pflags & DLB_RING_TRUNC_NAME;

	/* a truncated name grouped to labels it kept whole is a whole name again */
	if (off > 0)
		flags = 0;
	counter_add(c, r->name + off, r->namelen - off, flags, 1);
}

static void
count_addr(struct counter *c, const struct dlb_ring_rec *r, uint64_t v)
{
	bool v6 = r->pflags & DLB_RING_V6;

	counter_add(c, r->addr, v6 ? 16 : 4, v6 ? DLB_RING_V6 : 0, v);
}

static void
top_visit(const struct dlb_ring_rec *r, void *ud)
{
	struct counter *c = ud;
	const struct dlb_top_spec *sp = c->spec;

	switch (sp->kind) {
	case DLB_TOP_QNAMES:
		count_name(c, r);
		break;
	case DLB_TOP_RCODE:
		if (r->usec != DLB_RING_TIMEOUT && DLB_RCODE(r->hflags) == sp->rcode)
			count_name(c, r);
		break;
	case DLB_TOP_SLOW:
		if (r->usec > sp->min_usec)
			count_name(c, r);
		break;
	case DLB_TOP_TIMEOUTS:
		if (r->usec == DLB_RING_TIMEOUT)
			count_name(c, r);
		break;
	case DLB_TOP_CLIENTS:
		count_addr(c, r, 1);
		break;
	case DLB_TOP_BANDWIDTH:
		count_addr(c, r, r->size);
		break;
	}
}

/* Biggest first; ties in key order (wire bytes), so output is stable. */
static int
cslot_cmp(const void *a, const void *b, void *ud)
{
	const struct counter *c = ud;
	const struct cslot *x = a, *y = b;
	size_t l = x->len < y->len ? x->len : y->len;
	int d;

	if (x->count != y->count)
		return x->count > y->count ? -1 : 1;
	d = memcmp((const uint8_t *)c->keys.p + x->off, (const uint8_t *)c->keys.p + y->off, l);
	if (d != 0)
		return d;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return (int)x->flags - (int)y->flags;
}

static void
key_text(const struct counter *c, const struct cslot *s, char *out, size_t outsz)
{
	struct dlb_ring_rec r;

	r.pflags = (uint8_t)s->flags;
	if (c->spec->kind == DLB_TOP_CLIENTS || c->spec->kind == DLB_TOP_BANDWIDTH) {
		memset(r.addr, 0, sizeof(r.addr));
		memcpy(r.addr, (const uint8_t *)c->keys.p + s->off, s->len);
		dlb_ring_client_text(&r, false, out, outsz);
	} else {
		r.namelen = (uint8_t)s->len;
		memcpy(r.name, (const uint8_t *)c->keys.p + s->off, s->len);
		dlb_ring_name_text(&r, out, outsz);
	}
}

long
dlb_rings_top(const struct dlb_top_spec *spec, size_t n, struct dlb_top_entry **out,
	      uint64_t *total, uint64_t *rest)
{
	struct counter c = { .spec = spec };
	struct cslot *v = NULL;
	size_t nv = 0, nout;
	long ret = -1;

	dlb_hashtab_init(&c.t, sizeof(struct cslot), offsetof(struct cslot, tag), 1024, 1u << 30);
	*out = NULL;
	*total = *rest = 0;
	if (spec->kind == DLB_TOP_BANDWIDTH || spec->kind == DLB_TOP_CLIENTS ||
	    spec->kind == DLB_TOP_QNAMES)
		dlb_rings_visit_all(false, top_visit, &c);
	if (spec->kind != DLB_TOP_CLIENTS && spec->kind != DLB_TOP_QNAMES)
		dlb_rings_visit_all(true, top_visit, &c);
	if (c.oom)
		goto out;
	if (dlb_hashtab_count(&c.t) > 0) {
		v = malloc(dlb_hashtab_count(&c.t) * sizeof(*v));
		if (v == NULL)
			goto out;
		for (uint32_t i = 0; i < dlb_hashtab_slots(&c.t); i++) {
			const struct cslot *e = dlb_hashtab_at(&c.t, i);

			if (e != NULL)
				v[nv++] = *e;
		}
		qsort_r(v, nv, sizeof(*v), cslot_cmp, &c);
	}
	nout = n < nv ? n : nv;
	*out = calloc(nout > 0 ? nout : 1, sizeof(**out));
	if (*out == NULL)
		goto out;
	for (size_t i = 0; i < nout; i++) {
		key_text(&c, &v[i], (*out)[i].key, sizeof((*out)[i].key));
		(*out)[i].count = v[i].count;
	}
	for (size_t i = nout; i < nv; i++)
		*rest += v[i].count;
	*total = c.total;
	ret = (long)nout;
out:
	free(v);
	dlb_hashtab_deinit(&c.t);
	dlb_buf_deinit(&c.keys);
	return ret;
}

static size_t
top_copy(const struct dlb_top_spec *spec, size_t n, struct dlb_top_entry *out, uint64_t *total)
{
	struct dlb_top_entry *v;
	uint64_t rest;
	long k = dlb_rings_top(spec, n, &v, total, &rest);

	if (k < 0) {
		*total = 0;
		return 0;
	}
	memcpy(out, v, (size_t)k * sizeof(*v));
	free(v);
	return (size_t)k;
}

size_t
dlb_rings_top_names(size_t n, int labels, struct dlb_top_entry *out, uint64_t *total)
{
	struct dlb_top_spec spec = { .kind = DLB_TOP_QNAMES, .labels = labels > 0 ? labels : -1 };

	return top_copy(&spec, n, out, total);
}

size_t
dlb_rings_top_clients(size_t n, struct dlb_top_entry *out, uint64_t *total)
{
	struct dlb_top_spec spec = { .kind = DLB_TOP_CLIENTS, .labels = -1 };

	return top_copy(&spec, n, out, total);
}
