/*
 * hashtab.h - the open-addressing hash table behind dnslb's per-client and
 * per-key tables: linear probing, backward-shift deletion (no tombstones, so
 * a table that churns never degrades), growth by doubling up to a bound, and
 * no allocation on lookup.
 *
 * Entries are the caller's fixed-size structs, stored inline (@esize bytes
 * each), so a lookup touches one slot per probe; a table of pointers is a
 * table of entries that hold a pointer. Each entry has a uint32_t field at
 * offset @hoff that the table owns: the tag, 0 in a free slot, else the low
 * 31 bits of the key's hash with bit 31 set. The table never looks at keys:
 * the caller hashes (dlb_hash_* in hash.h; a keyed hash where keys are
 * attacker-chosen) and passes an equality function, or uses
 * dlb_hashtab_find_bytes for keys that are plain bytes in the entry.
 *
 * Load: a table grows (doubling, from @min_slots) when an add would take it
 * past 1/2 full; at @max_slots it fills to 3/4 and then refuses new keys
 * (dlb_hashtab_add returns NULL: the caller decides, usually to fail open).
 * Memory is therefore bounded by @max_slots * @esize. dlb_hashtab_shrink
 * gives memory back (free when empty, halve under 1/8 full).
 *
 * Thread: none of its own; the caller serializes (a shard lock, or one
 * owner). @count is stored with relaxed atomics, so a reader outside the
 * lock may read it (dlb_hashtab_count_relaxed) as a hint.
 * Ownership: the table owns its slots; entries move on add, remove and
 * resize, so a pointer to an entry is valid until the next change.
 */
#ifndef DNSLB_CORE_HASHTAB_H
#define DNSLB_CORE_HASHTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct dlb_hashtab {
	void *v;		/* (mask + 1) slots of esize bytes; NULL when none */
	uint32_t mask;		/* slots - 1; 0 with v == NULL */
	uint32_t count;		/* entries; written with relaxed atomics */
	uint32_t esize;		/* bytes per entry */
	uint32_t hoff;		/* offset of the uint32_t tag in an entry */
	uint32_t min_slots;	/* the first allocation (a power of two) */
	uint32_t max_slots;	/* the bound (a power of two) */
};

/**
 * A static initializer: an empty table of entries of type @T whose tag is
 * member @tag, growing from @min to @max slots (powers of two).
 */
#define DLB_HASHTAB_INIT(T, tag, min, max)                                                   \
	{ .esize = sizeof(T), .hoff = offsetof(T, tag), .min_slots = (min), .max_slots = (max) }

/** Whether entry @e (of key @key) is the key looked for. */
typedef bool dlb_hashtab_eq_fn(const void *e, const void *key);

/**
 * An empty table of @esize-byte entries whose uint32_t tag is at @hoff,
 * growing from @min_slots to @max_slots slots (powers of two, rounded up;
 * max_slots <= 2^30). Allocates nothing.
 */
void dlb_hashtab_init(struct dlb_hashtab *t, size_t esize, size_t hoff, uint32_t min_slots,
		      uint32_t max_slots);
/** Free the slots; the table is empty and usable afterwards. */
void dlb_hashtab_clear(struct dlb_hashtab *t);
#define dlb_hashtab_deinit dlb_hashtab_clear

/** The tag the table stores for hash @h: never 0. */
static inline uint32_t
dlb_hashtab_tag(uint64_t h)
{
	return (uint32_t)h | 0x80000000u;
}

/** Slots allocated (0 when none). */
static inline uint32_t
dlb_hashtab_slots(const struct dlb_hashtab *t)
{
	return t->v != NULL ? t->mask + 1 : 0;
}

/** The entry in slot @i (< dlb_hashtab_slots), or NULL when the slot is free. */
static inline void *
dlb_hashtab_at(const struct dlb_hashtab *t, uint32_t i)
{
	char *e = (char *)t->v + (size_t)i * t->esize;

	return *(const uint32_t *)(const void *)(e + t->hoff) != 0 ? e : NULL;
}

static inline uint32_t
dlb_hashtab_count(const struct dlb_hashtab *t)
{
	return t->count;
}

/** The count as a hint, readable without the caller's lock. */
static inline uint32_t
dlb_hashtab_count_relaxed(const struct dlb_hashtab *t)
{
	return __atomic_load_n(&t->count, __ATOMIC_RELAXED);
}

/**
 * The entry of @key (hash @h, compared with @eq), or NULL, in a table of
 * @esize-byte entries with their tag at @hoff (the table's own). Inline so
 * that a static @eq is inlined into the probe loop and, through
 * DLB_HASHTAB_FIND, the entry size and tag offset are constants: the
 * hot-path lookups cost what a hand-written loop does. Allocates nothing.
 */
static inline void *
dlb_hashtab_find_sized(const struct dlb_hashtab *t, uint64_t h, size_t esize, size_t hoff,
		       dlb_hashtab_eq_fn *eq, const void *key)
{
	uint32_t tag = dlb_hashtab_tag(h), mask = t->mask;
	char *v = t->v;

	if (v == NULL)
		return NULL;
	for (uint32_t i = tag & mask;; i = (i + 1) & mask) {
		char *e = v + (size_t)i * esize;
		uint32_t et = *(const uint32_t *)(const void *)(e + hoff);

		if (et == 0)
			return NULL;
		if (et == tag && eq(e, key))
			return e;
	}
}

/** dlb_hashtab_find_sized for a table of entries of type @T with tag member @tag. */
#define DLB_HASHTAB_FIND(t, h, T, tag, eq, key)                                                 \
	((T *)dlb_hashtab_find_sized((t), (h), sizeof(T), offsetof(T, tag), (eq), (key)))

/** The entry of @key (hash @h, compared with @eq), or NULL. Allocates nothing. */
static inline void *
dlb_hashtab_find(const struct dlb_hashtab *t, uint64_t h, dlb_hashtab_eq_fn *eq, const void *key)
{
	return dlb_hashtab_find_sized(t, h, t->esize, t->hoff, eq, key);
}

/** As dlb_hashtab_find, for a key of @klen bytes stored at offset @koff of the entry. */
static inline void *
dlb_hashtab_find_bytes(const struct dlb_hashtab *t, uint64_t h, const void *key, size_t klen,
		       size_t koff)
{
	uint32_t tag = dlb_hashtab_tag(h), mask = t->mask;

	if (t->v == NULL)
		return NULL;
	for (uint32_t i = tag & mask;; i = (i + 1) & mask) {
		char *e = (char *)t->v + (size_t)i * t->esize;
		uint32_t et = *(const uint32_t *)(const void *)(e + t->hoff);

		if (et == 0)
			return NULL;
		if (et == tag && memcmp(e + koff, key, klen) == 0)
			return e;
	}
}

/** Whether one more entry would make @t grow (callers that evict first ask this). */
static inline bool
dlb_hashtab_add_grows(const struct dlb_hashtab *t)
{
	return t->v == NULL || ((uint64_t)t->count + 1) * 2 > (uint64_t)t->mask + 1;
}

/**
 * A new entry for hash @h: zeroed but for its tag. The caller has checked
 * that the key is not there, and fills in the key and value. Grows the
 * table as needed (see the top of the file).
 * @return the entry, or NULL when the table is full at its bound or out of
 * memory (nothing changed).
 */
void *dlb_hashtab_add(struct dlb_hashtab *t, uint64_t h);

/** Remove entry @e (a pointer into @t): later members of its cluster move up. */
void dlb_hashtab_remove(struct dlb_hashtab *t, void *e);

/**
 * Give memory back: free the slots when empty, else halve them (once) when
 * under 1/8 full and above @min_slots. Out of memory keeps the big table.
 */
void dlb_hashtab_shrink(struct dlb_hashtab *t);

/**
 * Make @dst (empty, or cleared first) a slot-for-slot copy of @src: the same
 * parameters and entries (bytes copied; the caller deep-copies what entries
 * point to). @return 0, or -1 when out of memory (@dst left empty).
 */
int dlb_hashtab_copy(struct dlb_hashtab *dst, const struct dlb_hashtab *src);

/** Bytes of slots allocated. */
size_t dlb_hashtab_memory(const struct dlb_hashtab *t);

/**
 * Check the invariants (every entry reachable from its home, the count):
 * tests and debug checks. @return 0, or -1.
 */
int dlb_hashtab_check(const struct dlb_hashtab *t);

#endif
