/*
 * inflight.c - ID <-> slot tables and the slot pool.
 *
 * Random ID choice: free_ids[] holds exactly the free IDs. Drawing index r
 * uniformly in [0, nfree) and swapping the last free ID into its place gives a
 * uniform choice among free IDs in O(1), with no retry loop however full the
 * table is. Releasing appends the ID back.
 */
#include "dnslb/inflight.h"

#include <stdlib.h>
#include <string.h>

#include "dnslb/util.h"

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
	t->free_ids = malloc(65536 * sizeof(*t->free_ids));
	if (t->slot_of == NULL || t->free_ids == NULL) {
		dlb_inflight_deinit(t);
		return DLB_ENOMEM;
	}
	for (uint32_t i = 0; i < 65536; i++) {
		t->slot_of[i] = DLB_SLOT_NONE;
		t->free_ids[i] = (uint16_t)i;
	}
	t->nfree = 65536;
	t->max = (max == 0 || max > 65536) ? 65536 : max;
	t->head = t->tail = DLB_SLOT_NONE;
	return DLB_OK;
}

void
dlb_inflight_deinit(struct dlb_inflight *t)
{
	free(t->slot_of);
	free(t->free_ids);
	t->slot_of = NULL;
	t->free_ids = NULL;
}

int
dlb_inflight_add(struct dlb_inflight *t, struct dlb_slot_pool *p, struct dlb_rng *rng,
		 uint32_t idx, double deadline)
{
	struct dlb_slot *s = dlb_slot_get(p, idx);
	uint32_t r;
	uint16_t id;

	if (dlb_inflight_count(t) >= t->max || t->nfree == 0)
		return DLB_EFULL;
	r = dlb_rng_uniform(rng, t->nfree);
	id = t->free_ids[r];
	t->free_ids[r] = t->free_ids[--t->nfree];
	t->slot_of[id] = idx;
	s->wire_id = id;
	s->deadline = deadline;
	s->next = DLB_SLOT_NONE;
	s->prev = t->tail;
	if (t->tail != DLB_SLOT_NONE)
		dlb_slot_get(p, t->tail)->next = idx;
	else
		t->head = idx;
	t->tail = idx;
	return id;
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
	t->free_ids[t->nfree++] = s->wire_id;
}
