/*
 * hashtab.c - the open-addressing hash table. See hashtab.h.
 *
 * Backward-shift deletion (Knuth, TAOCP vol. 3, 6.4, Algorithm R): after
 * freeing slot i, walk the cluster that follows it; an entry at j whose
 * home is not in (i, j] may fill the hole, which then moves to j. A free
 * slot therefore always ends a probe sequence, and no tombstones are needed.
 */
#include "dnslb/core/hashtab.h"

#include <stdlib.h>

#include "dnslb/core/util.h"

static inline uint32_t *
tag_of(const struct dlb_hashtab *t, void *e)
{
	return (uint32_t *)(void *)((char *)e + t->hoff);
}

static inline char *
slot(const struct dlb_hashtab *t, uint32_t i)
{
	return (char *)t->v + (size_t)i * t->esize;
}

void
dlb_hashtab_init(struct dlb_hashtab *t, size_t esize, size_t hoff, uint32_t min_slots,
		 uint32_t max_slots)
{
	memset(t, 0, sizeof(*t));
	t->esize = (uint32_t)esize;
	t->hoff = (uint32_t)hoff;
	t->min_slots = dlb_pow2_at_least(min_slots < 2 ? 2 : min_slots);
	t->max_slots = dlb_pow2_at_least(max_slots);
	if (t->max_slots < t->min_slots)
		t->max_slots = t->min_slots;
}

void
dlb_hashtab_clear(struct dlb_hashtab *t)
{
	free(t->v);
	t->v = NULL;
	t->mask = 0;
	__atomic_store_n(&t->count, 0, __ATOMIC_RELAXED);
}

/* Move the entries into a table of @slots slots. @return 0, or -1 (unchanged). */
static int
resize(struct dlb_hashtab *t, uint32_t slots)
{
	char *nv = calloc(slots, t->esize);
	uint32_t nmask = slots - 1;

	if (nv == NULL)
		return -1;
	for (uint32_t i = 0; i < dlb_hashtab_slots(t); i++) {
		char *e = slot(t, i);
		uint32_t j, tag = *tag_of(t, e);

		if (tag == 0)
			continue;
		for (j = tag & nmask; *tag_of(t, nv + (size_t)j * t->esize) != 0; j = (j + 1) & nmask)
			;
		memcpy(nv + (size_t)j * t->esize, e, t->esize);
	}
	free(t->v);
	t->v = nv;
	t->mask = nmask;
	return 0;
}

void *
dlb_hashtab_add(struct dlb_hashtab *t, uint64_t h)
{
	uint32_t tag = dlb_hashtab_tag(h), slots = dlb_hashtab_slots(t), i;
	char *e;

	if (dlb_hashtab_add_grows(t)) {
		if (slots < t->max_slots && resize(t, slots == 0 ? t->min_slots : slots * 2) == 0)
			slots = t->mask + 1;
		if (slots == 0 || ((uint64_t)t->count + 1) * 4 > (uint64_t)slots * 3)
			return NULL;	/* full at the bound, or no memory */
	}
	for (i = tag & t->mask; *tag_of(t, slot(t, i)) != 0; i = (i + 1) & t->mask)
		;
	e = slot(t, i);
	memset(e, 0, t->esize);
	*tag_of(t, e) = tag;
	__atomic_store_n(&t->count, t->count + 1, __ATOMIC_RELAXED);
	return e;
}

void
dlb_hashtab_remove(struct dlb_hashtab *t, void *e)
{
	uint32_t mask = t->mask, i = (uint32_t)(((char *)e - (char *)t->v) / t->esize);

	for (uint32_t j = (i + 1) & mask; *tag_of(t, slot(t, j)) != 0; j = (j + 1) & mask) {
		uint32_t home = *tag_of(t, slot(t, j)) & mask;

		/* the entry at j may fill the hole at i unless its home is in (i, j] */
		if (((j - home) & mask) >= ((j - i) & mask)) {
			memcpy(slot(t, i), slot(t, j), t->esize);
			i = j;
		}
	}
	*tag_of(t, slot(t, i)) = 0;
	__atomic_store_n(&t->count, t->count - 1, __ATOMIC_RELAXED);
}

void
dlb_hashtab_shrink(struct dlb_hashtab *t)
{
	uint32_t slots = dlb_hashtab_slots(t);

	if (t->count == 0)
		dlb_hashtab_clear(t);
	else if (slots > t->min_slots && (uint64_t)t->count * 8 < slots)
		(void)resize(t, slots / 2);	/* no memory: keep the big one */
}

int
dlb_hashtab_copy(struct dlb_hashtab *dst, const struct dlb_hashtab *src)
{
	size_t bytes = dlb_hashtab_memory(src);

	dlb_hashtab_clear(dst);
	*dst = *src;
	dst->v = NULL;
	dst->mask = 0;
	dst->count = 0;
	if (bytes == 0)
		return 0;
	dst->v = malloc(bytes);
	if (dst->v == NULL)
		return -1;
	memcpy(dst->v, src->v, bytes);
	dst->mask = src->mask;
	dst->count = src->count;
	return 0;
}

size_t
dlb_hashtab_memory(const struct dlb_hashtab *t)
{
	return (size_t)dlb_hashtab_slots(t) * t->esize;
}

int
dlb_hashtab_check(const struct dlb_hashtab *t)
{
	uint32_t n = 0, slots = dlb_hashtab_slots(t);

	for (uint32_t i = 0; i < slots; i++) {
		uint32_t tag = *tag_of(t, slot(t, i));

		if (tag == 0)
			continue;
		if ((tag & 0x80000000u) == 0)
			return -1;
		/* reachable from its home: no free slot between home and i */
		for (uint32_t j = tag & t->mask; j != i; j = (j + 1) & t->mask)
			if (*tag_of(t, slot(t, j)) == 0)
				return -1;
		n++;
	}
	if (slots != 0 && (uint64_t)n * 4 > (uint64_t)slots * 3)
		return -1;
	return n == t->count ? 0 : -1;
}
