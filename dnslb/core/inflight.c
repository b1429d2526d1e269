/*
 * inflight.c - ID <-> slot tables and the slot pool.
 *
 * Random ID choice: draw a uniform 16-bit ID and keep it if it is free
 * (rejection sampling, so the choice is uniform among free IDs). Below half
 * full that takes under two draws on average and touches one cache line of
 * the table, which matters more on the hot path than a free list's O(1): a
 * free list costs three random memory accesses per query. When 64 draws in a
 * row hit live IDs (a table over ~99% full), a scan from a random start
 * finishes the job; count < max guarantees it finds one.
 */
#include "dnslb/core/inflight.h"

#include <stdlib.h>
#include <string.h>

#include "dnslb/core/netmask.h"
#include "dnslb/core/util.h"
#include "dnslb/core/wire.h"

#define CHUNK 1024

int
dlb_slot_pool_init(struct dlb_slot_pool *p)
{
	memset(p, 0, sizeof(*p));
	p->free_head = DLB_SLOT_NONE;
	return DLB_OK;
}

void
dlb_slot_pool_deinit(struct dlb_slot_pool *p)
{
	for (uint32_t i = 0; i < p->nchunks; i++)
		free(p->chunks[i]);
	free(p->chunks);
	memset(p, 0, sizeof(*p));
	p->free_head = DLB_SLOT_NONE;
}

static int
pool_grow(struct dlb_slot_pool *p)
{
	struct dlb_slot **nc, *chunk;
	uint32_t base;

	if (p->nchunks >= (UINT32_MAX / CHUNK) - 1)
		return DLB_ENOMEM;
	nc = realloc(p->chunks, (p->nchunks + 1) * sizeof(*nc));
	if (nc == NULL)
		return DLB_ENOMEM;
	p->chunks = nc;
	chunk = calloc(CHUNK, sizeof(*chunk));
	if (chunk == NULL)
		return DLB_ENOMEM;
	base = p->nchunks * CHUNK;
	p->chunks[p->nchunks++] = chunk;
	for (uint32_t i = CHUNK; i-- > 0;) {
		chunk[i].self = base + i;
		chunk[i].next = p->free_head;
		p->free_head = base + i;
	}
	return DLB_OK;
}

uint32_t
dlb_slot_alloc(struct dlb_slot_pool *p)
{
	struct dlb_slot *s;
	uint32_t idx;

	if (p->free_head == DLB_SLOT_NONE && pool_grow(p) != DLB_OK)
		return DLB_SLOT_NONE;
	idx = p->free_head;
	s = dlb_slot_get(p, idx);
	p->free_head = s->next;
	s->prev = s->next = DLB_SLOT_NONE;
	p->used++;
	return idx;
}

void
dlb_slot_free(struct dlb_slot_pool *p, uint32_t idx)
{
	struct dlb_slot *s = dlb_slot_get(p, idx);

	s->next = p->free_head;
	p->free_head = idx;
	p->used--;
}

int
dlb_inflight_init(struct dlb_inflight *t, uint32_t max)
{
	memset(t, 0, sizeof(*t));
	t->slot_of = malloc(65536 * sizeof(*t->slot_of));
	if (t->slot_of == NULL)
		return DLB_ENOMEM;
	for (uint32_t i = 0; i < 65536; i++)
		t->slot_of[i] = DLB_SLOT_NONE;
	t->count = 0;
	t->max = (max == 0 || max > 65536) ? 65536 : max;
	t->head = t->tail = DLB_SLOT_NONE;
	return DLB_OK;
}

void
dlb_inflight_deinit(struct dlb_inflight *t)
{
	free(t->slot_of);
	t->slot_of = NULL;
}

int
dlb_inflight_add(struct dlb_inflight *t, struct dlb_slot_pool *p, struct dlb_rng *rng,
		 uint32_t idx, double deadline)
{
	struct dlb_slot *s = dlb_slot_get(p, idx);
	uint32_t id = 0;
	int tries;

	if (t->count >= t->max || t->count >= 65536)
		return DLB_EFULL;
	for (tries = 0; tries < 64; tries++) {
		id = dlb_rng_u32(rng) & 0xffff;
		if (t->slot_of[id] == DLB_SLOT_NONE)
			break;
	}
	if (tries == 64) {
		while (t->slot_of[id] != DLB_SLOT_NONE)
			id = (id + 1) & 0xffff;
	}
	t->slot_of[id] = idx;
	t->count++;
	s->wire_id = (uint16_t)id;
	s->deadline = deadline;
	s->next = DLB_SLOT_NONE;
	s->prev = t->tail;
	if (t->tail != DLB_SLOT_NONE)
		dlb_slot_get(p, t->tail)->next = idx;
	else
		t->head = idx;
	t->tail = idx;
	return (int)id;
}

void
dlb_inflight_remove(struct dlb_inflight *t, struct dlb_slot_pool *p, uint32_t idx)
{
	struct dlb_slot *s = dlb_slot_get(p, idx);

	if (s->prev != DLB_SLOT_NONE)
		dlb_slot_get(p, s->prev)->next = s->next;
	else
		t->head = s->next;
	if (s->next != DLB_SLOT_NONE)
		dlb_slot_get(p, s->next)->prev = s->prev;
	else
		t->tail = s->prev;
	s->prev = s->next = DLB_SLOT_NONE;
	t->slot_of[s->wire_id] = DLB_SLOT_NONE;
	t->count--;
}

enum dlb_answer_match
dlb_slot_answer_matches(const struct dlb_slot *s, const uint8_t *pkt, size_t len, bool allow_empty)
{
	struct dlb_dnsmsg m;
	int rc = dlb_wire_parse_response_question(pkt, len, &m);
	unsigned rcode;

	if (len >= DLB_DNS_HDR && !(pkt[2] & 0x80))
		return DLB_ANSWER_NONCOMPLIANT;		/* QR=0 */
	if (rc != DLB_OK && rc != DLB_EEMPTY)
		return DLB_ANSWER_NONCOMPLIANT;
	if (rc == DLB_EEMPTY) {
		rcode = DLB_RCODE(m.flags);
		return allow_empty || (rcode != DLB_RCODE_NOERROR && rcode != DLB_RCODE_NXDOMAIN) ?
		       DLB_ANSWER_OK : DLB_ANSWER_NONCOMPLIANT;
	}
	if (m.qtype == s->key.qtype && m.qclass == s->key.qclass &&
	    m.qname_len == s->key.qname_len &&
	    memcmp(m.qname_lc, s->key.qname_lc, s->key.qname_len) == 0)
		return DLB_ANSWER_OK;
	return DLB_ANSWER_OTHER;
}

DLB_HOT uint32_t
dlb_inflight_match(const struct dlb_inflight *t, const struct dlb_slot_pool *p, const uint8_t *pkt,
		   size_t len, const struct sockaddr *from, bool allow_empty,
		   enum dlb_answer_match *why)
{
	const struct dlb_slot *s;
	uint32_t idx;

	*why = DLB_ANSWER_OTHER;
	if (len < DLB_DNS_HDR)
		return DLB_SLOT_NONE;
	idx = dlb_inflight_lookup(t, dlb_rd16(pkt));
	if (idx == DLB_SLOT_NONE)
		return DLB_SLOT_NONE;	/* unknown, duplicate or late (after its timeout) */
	s = dlb_slot_get(p, idx);
	if (from != NULL && s->src != NULL && !dlb_sockaddr_equal(from, s->src))
		return DLB_SLOT_NONE;	/* not from the server this ID was sent to */
	*why = dlb_slot_answer_matches(s, pkt, len, allow_empty);
	return *why == DLB_ANSWER_OK ? idx : DLB_SLOT_NONE;
}
