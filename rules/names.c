/*
 * names.c - name sets for selectors: the suffix set (SuffixMatchNode) and the
 * exact-name set (DNSNameSet).
 *
 * Suffix set: a label tree rooted at ".". A node holds its label (lowercase,
 * inline), a "terminal" flag (a name ends here) and its children: 8-octet
 * slots {32-bit label hash, 32-bit node reference}, either a short list
 * (<= 4, scanned) or an open-addressing table (linear probing, load <= 3/4,
 * backward-shift deletion, no tombstones). A match walks the qname's labels
 * from the root end: one hash and one probe sequence per label, comparing
 * hashes in the slots and labels (memcmp) only on a hash match - O(labels)
 * whatever the size of the set, and a miss reads no node. The rules split
 * the qname once per query (struct dlb_qname_labels in the dq) and every
 * set's lookup of that query reuses the split and the label hashes
 * (dlb_suffix_set_match_labels): the hash has one process-wide seed.
 * Memory: nodes live in a per-set arena of 64 KiB chunks, addressed by
 * 32-bit references (freed nodes go to free lists by size class), so a name
 * of one new label costs its node (15 octets + the label, rounded to 8) plus
 * one slot (8 octets / load factor): 49 octets a name for 1,000,000 names
 * like "domain0000123.com." (measured; 1.0 s to build, ~80 ns a match).
 *
 * Name set: a dnslb/core/hashtab.h table of owned lowercase wire names,
 * each slot holding the hash's tag beside the pointer so that probes compare
 * tags before touching a name.
 *
 * Hashes: XXH3 with a fixed seed, not dlb_wire_name_hash(): these tables are
 * built from the configuration, possibly before dlb_wire_hash_init() changes
 * that function's key, and only lookups see client data (a client can pick
 * which probe sequence it walks, not make one longer).
 *
 * Thread: built and changed on the main thread; once published, any thread
 * may call the match functions (they only read).
 */
#include "rules/rules.h"

#include <stdlib.h>
#include <string.h>

#include "dnslb/core/hash.h"
#include "dnslb/core/hashtab.h"

#define NAMES_SEED	0x6c62646e735f7365ULL	/* fixed: see the file comment */
#define SFX_LIST_LOG2	2			/* up to 4 children: a plain list */
#define SFX_CHUNK	65536			/* arena chunk, octets */
#define SFX_MAX_LABELS	DLB_QNAME_MAX_LABELS	/* 255 octets: <= 127 labels + the root */

static uint8_t
lower(uint8_t c)
{
	return (c >= 'A' && c <= 'Z') ? (uint8_t)(c + ('a' - 'A')) : c;
}

/*
 * Split the wire name @n (@len octets) into label offsets, lowercasing into
 * @lc when it is not NULL. @return the number of labels (root excluded), or
 * -1 for a malformed name (bad label type, overrun, bytes after the root).
 */
static int
name_labels(const uint8_t *n, size_t len, uint8_t *off, uint8_t *lc)
{
	size_t pos = 0;
	int k = 0;

	if (len == 0 || len > DLB_MAX_NAME)
		return -1;
	for (;;) {
		uint8_t c = n[pos];

		if (c == 0)
			break;
		if (c > DLB_MAX_LABEL || pos + 1 + c >= len)
			return -1;
		off[k++] = (uint8_t)pos;
		if (lc != NULL) {
			lc[pos] = c;
			for (size_t i = pos + 1; i <= pos + c; i++)
				lc[i] = lower(n[i]);
		}
		pos += 1 + (size_t)c;
	}
	if (pos != len - 1)
		return -1;
	if (lc != NULL)
		lc[pos] = 0;
	return k;
}

static uint64_t
label_hash(const uint8_t *l, size_t n)
{
	return dlb_hash_bytes(l, n, NAMES_SEED);
}

/* ---- suffix set ------------------------------------------------------------ */

/*
 * A child slot: the label's 32-bit hash beside the child's arena reference,
 * so that a probe reads 8 octets and compares hashes before touching a
 * node; a lookup that misses (the usual case for a block list) reads one
 * cache line of the table and no node. ref 0 is the root, which is never a
 * child: it marks an empty slot.
 */
struct sfx_slot {
	uint32_t hash;
	uint32_t ref;
};

/*
 * A tree node. kids: NULL (no children), a list of 1 << klog2 <= 4 slots
 * (the first nkids used), or a table of 1 << klog2 slots, linear probing
 * from hash & mask. On a free list: kids NULL, nkids = the next free ref.
 */
struct sfx_node {
	struct sfx_slot *kids;
	uint32_t nkids;
	uint8_t klog2;
	uint8_t terminal;
	uint8_t len;
	uint8_t label[];
};

#define SFX_HDR		offsetof(struct sfx_node, label)
#define SFX_CLASSES	((SFX_HDR + DLB_MAX_LABEL + 7) / 8 + 1)
#define SFX_OFF_BITS	13				/* 8-octet units in a chunk */
#define SFX_MAX_CHUNKS	((size_t)1 << (32 - SFX_OFF_BITS))

/* The arena: chunks of SFX_CHUNK octets; a node's ref = chunk << 13 | offset / 8. */
struct dlb_suffix_set {
	uint8_t **chunkv;
	size_t nchunks, chunkcap;
	size_t used;			/* octets used in the last chunk */
	size_t count;			/* terminal nodes */
	size_t bytes;			/* arena chunks + child arrays + this struct */
	uint32_t freel[SFX_CLASSES];	/* freed nodes by size / 8 (0: none) */
};

static struct sfx_node *
node_at(const struct dlb_suffix_set *s, uint32_t ref)
{
	return (struct sfx_node *)(void *)(s->chunkv[ref >> SFX_OFF_BITS] +
					   ((size_t)(ref & ((1u << SFX_OFF_BITS) - 1)) << 3));
}

static struct sfx_node *
root_of(const struct dlb_suffix_set *s)
{
	return node_at(s, 0);
}

static size_t
node_size(uint8_t len)
{
	return (SFX_HDR + len + 7) & ~(size_t)7;
}

/* @return the new node's ref (never 0 but for the root), or UINT32_MAX on ENOMEM. */
static uint32_t
node_new(struct dlb_suffix_set *s, const uint8_t *label, uint8_t len)
{
	size_t sz = node_size(len);
	uint32_t ref = s->freel[sz / 8];
	struct sfx_node *n;

	if (ref != 0) {
		n = node_at(s, ref);
		s->freel[sz / 8] = n->nkids;
	} else {
		if (s->nchunks == 0 || SFX_CHUNK - s->used < sz) {
			if (s->nchunks == SFX_MAX_CHUNKS)
				return UINT32_MAX;
			if (s->nchunks == s->chunkcap) {
				size_t cap = s->chunkcap != 0 ? s->chunkcap * 2 : 16;
				uint8_t **v = realloc(s->chunkv, cap * sizeof(*v));

				if (v == NULL)
					return UINT32_MAX;
				s->bytes += (cap - s->chunkcap) * sizeof(*v);
				s->chunkv = v;
				s->chunkcap = cap;
			}
			/* zeroed: dlb_suffix_set_free walks the nodes and the unused tail */
			s->chunkv[s->nchunks] = calloc(1, SFX_CHUNK);
			if (s->chunkv[s->nchunks] == NULL)
				return UINT32_MAX;
			s->nchunks++;
			s->used = 0;
			s->bytes += SFX_CHUNK;
		}
		ref = (uint32_t)((s->nchunks - 1) << SFX_OFF_BITS | s->used >> 3);
		s->used += sz;
		n = node_at(s, ref);
	}
	n->kids = NULL;
	n->nkids = 0;
	n->klog2 = 0;
	n->terminal = 0;
	n->len = len;
	if (len > 0)
		memcpy(n->label, label, len);
	return ref;
}

static void
node_release(struct dlb_suffix_set *s, uint32_t ref)
{
	struct sfx_node *n = node_at(s, ref);
	size_t sz = node_size(n->len);

	n->kids = NULL;
	n->nkids = s->freel[sz / 8];
	s->freel[sz / 8] = ref;
}

static bool
node_is_table(const struct sfx_node *n)
{
	return n->klog2 > SFX_LIST_LOG2;
}

static size_t
node_slots(const struct sfx_node *n)
{
	if (n->kids == NULL)
		return 0;
	return node_is_table(n) ? (size_t)1 << n->klog2 : n->nkids;
}

static size_t
kids_bytes(uint8_t klog2)
{
	return ((size_t)1 << klog2) * sizeof(struct sfx_slot);
}

static uint32_t
label_hash32(const uint8_t *l, uint8_t len)
{
	return (uint32_t)label_hash(l, len);
}

static bool
slot_is(const struct dlb_suffix_set *s, struct sfx_slot e, const uint8_t *l, uint8_t len,
	uint32_t h)
{
	const struct sfx_node *k;

	if (e.hash != h)
		return false;
	k = node_at(s, e.ref);
	return k->len == len && memcmp(k->label, l, len) == 0;
}

/* The ref of @n's child labelled @l (lowercase, hash @h), or 0. */
static uint32_t
child_ref(const struct dlb_suffix_set *s, const struct sfx_node *n, const uint8_t *l,
	  uint8_t len, uint32_t h)
{
	if (n->nkids == 0)
		return 0;
	if (!node_is_table(n)) {
		for (uint32_t i = 0; i < n->nkids; i++) {
			if (slot_is(s, n->kids[i], l, len, h))
				return n->kids[i].ref;
		}
		return 0;
	}
	{
		size_t mask = ((size_t)1 << n->klog2) - 1, i = h & mask;

		for (; n->kids[i].ref != 0; i = (i + 1) & mask) {
			if (slot_is(s, n->kids[i], l, len, h))
				return n->kids[i].ref;
		}
	}
	return 0;
}

/* Place a slot in a table known to have room and not to hold it. */
static void
table_put(struct sfx_slot *kids, size_t mask, struct sfx_slot e)
{
	size_t i = e.hash & mask;

	while (kids[i].ref != 0)
		i = (i + 1) & mask;
	kids[i] = e;
}

/* Resize @n's children to 1 << @klog2 slots (list or table; never shrinks). */
static int
node_rekid(struct dlb_suffix_set *s, struct sfx_node *n, uint8_t klog2)
{
	size_t bytes = kids_bytes(klog2), cap = (size_t)1 << klog2, old_slots = node_slots(n);
	struct sfx_slot *nk = calloc(1, bytes), *old = n->kids;

	if (nk == NULL)
		return DLB_ENOMEM;
	if (klog2 > SFX_LIST_LOG2) {
		for (size_t i = 0; i < old_slots; i++) {
			if (old[i].ref != 0)
				table_put(nk, cap - 1, old[i]);
		}
	} else if (old != NULL) {
		memcpy(nk, old, n->nkids * sizeof(*nk));
	}
	if (old != NULL) {
		s->bytes -= kids_bytes(n->klog2);
		free(old);
	}
	s->bytes += bytes;
	n->kids = nk;
	n->klog2 = klog2;
	return DLB_OK;
}

static int
node_add_child(struct dlb_suffix_set *s, struct sfx_node *n, struct sfx_slot e)
{
	size_t cap = n->kids != NULL ? (size_t)1 << n->klog2 : 0;
	int r;

	if (!node_is_table(n)) {
		if (n->nkids < cap) {
			n->kids[n->nkids++] = e;
			return DLB_OK;
		}
		/* 0 -> 1 -> 2 -> 4 (lists), then an 8-slot table */
		r = node_rekid(s, n, n->kids == NULL ? 0 : (uint8_t)(n->klog2 + 1));
		if (r != DLB_OK)
			return r;
		if (!node_is_table(n)) {
			n->kids[n->nkids++] = e;
			return DLB_OK;
		}
	} else if ((size_t)(n->nkids + 1) * 4 > cap * 3) {
		/* load factor <= 3/4 */
		r = node_rekid(s, n, (uint8_t)(n->klog2 + 1));
		if (r != DLB_OK)
			return r;
	}
	table_put(n->kids, ((size_t)1 << n->klog2) - 1, e);
	n->nkids++;
	return DLB_OK;
}

static void
node_remove_child(struct dlb_suffix_set *s, struct sfx_node *n, uint32_t ref, uint32_t h)
{
	if (!node_is_table(n)) {
		for (uint32_t i = 0; i < n->nkids; i++) {
			if (n->kids[i].ref == ref) {
				n->kids[i] = n->kids[--n->nkids];
				break;
			}
		}
	} else {
		size_t mask = ((size_t)1 << n->klog2) - 1, i = h & mask, j;

		while (n->kids[i].ref != ref)
			i = (i + 1) & mask;
		/* backward-shift deletion: pull later members of the cluster into the hole */
		for (j = (i + 1) & mask; n->kids[j].ref != 0; j = (j + 1) & mask) {
			size_t home = n->kids[j].hash & mask;

			/* j may move to i only if its home is not in (i, j] cyclically */
			if (((j - home) & mask) >= ((j - i) & mask)) {
				n->kids[i] = n->kids[j];
				i = j;
			}
		}
		n->kids[i].ref = 0;
		n->nkids--;
	}
	if (n->nkids == 0) {
		s->bytes -= kids_bytes(n->klog2);
		free(n->kids);
		n->kids = NULL;
		n->klog2 = 0;
	}
}

struct dlb_suffix_set *
dlb_suffix_set_new(void)
{
	struct dlb_suffix_set *s = calloc(1, sizeof(*s));

	if (s == NULL)
		return NULL;
	s->bytes = sizeof(*s);
	if (node_new(s, NULL, 0) != 0) {	/* the root: ref 0 */
		dlb_suffix_set_free(s);
		return NULL;
	}
	return s;
}

void
dlb_suffix_set_free(struct dlb_suffix_set *s)
{
	if (s == NULL)
		return;
	/* walk the arena: free nodes and the zeroed tails have kids == NULL */
	for (size_t c = 0; c < s->nchunks; c++) {
		size_t end = c + 1 == s->nchunks ? s->used : SFX_CHUNK;

		for (size_t off = 0; off + SFX_HDR <= end;) {
			struct sfx_node *n = (struct sfx_node *)(void *)(s->chunkv[c] + off);

			free(n->kids);
			off += node_size(n->len);
		}
		free(s->chunkv[c]);
	}
	free(s->chunkv);
	free(s);
}

int
dlb_suffix_set_add(struct dlb_suffix_set *s, const uint8_t *lc, size_t len)
{
	uint8_t off[SFX_MAX_LABELS], name[DLB_MAX_NAME];
	struct sfx_node *n = root_of(s);
	int k = name_labels(lc, len, off, name);

	if (k < 0)
		return DLB_EINVAL;
	while (k-- > 0) {
		const uint8_t *l = name + off[k] + 1;
		uint8_t ll = name[off[k]];
		uint32_t h = label_hash32(l, ll), ref = child_ref(s, n, l, ll, h);

		if (ref == 0) {
			/* chunks never move, so @n stays valid across node_new */
			ref = node_new(s, l, ll);
			if (ref == UINT32_MAX)
				return DLB_ENOMEM;
			struct sfx_slot e = { .hash = h, .ref = ref };

			if (node_add_child(s, n, e) != DLB_OK) {
				node_release(s, ref);
				return DLB_ENOMEM;
			}
		}
		n = node_at(s, ref);
	}
	if (!n->terminal) {
		n->terminal = 1;
		s->count++;
	}
	return DLB_OK;
}

bool
dlb_suffix_set_remove(struct dlb_suffix_set *s, const uint8_t *lc, size_t len)
{
	uint8_t off[SFX_MAX_LABELS], name[DLB_MAX_NAME];
	struct sfx_node *path[SFX_MAX_LABELS + 1];
	uint32_t refs[SFX_MAX_LABELS + 1], hashes[SFX_MAX_LABELS + 1];
	int k = name_labels(lc, len, off, name), depth = 0;

	if (k < 0)
		return false;
	path[0] = root_of(s);
	while (k-- > 0) {
		const uint8_t *l = name + off[k] + 1;
		uint8_t ll = name[off[k]];
		uint32_t h = label_hash32(l, ll), ref = child_ref(s, path[depth], l, ll, h);

		if (ref == 0)
			return false;
		path[++depth] = node_at(s, ref);
		hashes[depth] = h;
		refs[depth] = ref;
	}
	if (!path[depth]->terminal)
		return false;
	path[depth]->terminal = 0;
	s->count--;
	/* prune the branch that no longer leads to a name */
	for (; depth > 0; depth--) {
		struct sfx_node *c = path[depth];

		if (c->terminal || c->nkids > 0)
			break;
		node_remove_child(s, path[depth - 1], refs[depth], hashes[depth]);
		node_release(s, refs[depth]);
	}
	return true;
}

void
dlb_qname_labels_init(struct dlb_qname_labels *l, const uint8_t *lc, size_t len)
{
	int k = name_labels(lc, len, l->off, NULL);

	/* a malformed name: no label, as name_labels' -1 made the walk do */
	l->n = (uint8_t)(k < 0 ? 0 : k);
	l->h = l->n;
	l->name_hashed = false;
}

/*
 * The walk from the root end over @l's labels; the hashes not yet in @l
 * are computed as the walk reaches their label (it always goes from the
 * root end down, so the hashed labels stay a suffix: hash[h..n-1]).
 */
bool
dlb_suffix_set_match_labels(const struct dlb_suffix_set *s, const uint8_t *lc,
			    struct dlb_qname_labels *l)
{
	const struct sfx_node *n = root_of(s);
	int k = l->n;

	if (n->terminal)
		return true;	/* "." matches everything */
	if (n->nkids == 0)
		return false;
	while (k-- > 0) {
		const uint8_t *lab = lc + l->off[k] + 1;
		uint8_t ll = lc[l->off[k]];
		uint32_t ref;

		if (k < l->h) {
			l->hash[k] = label_hash32(lab, ll);
			l->h = (uint8_t)k;
		}
		ref = child_ref(s, n, lab, ll, l->hash[k]);
		if (ref == 0)
			return false;
		n = node_at(s, ref);
		if (n->terminal)
			return true;
	}
	return false;
}

bool
dlb_suffix_set_match(const struct dlb_suffix_set *s, const uint8_t *lc, size_t len)
{
	struct dlb_qname_labels l;
	const struct sfx_node *n = root_of(s);

	/* the same early exits as the walk, before splitting the name */
	if (n->terminal)
		return true;
	if (n->nkids == 0)
		return false;
	dlb_qname_labels_init(&l, lc, len);
	return dlb_suffix_set_match_labels(s, lc, &l);
}

size_t
dlb_suffix_set_count(const struct dlb_suffix_set *s)
{
	return s->count;
}

size_t
dlb_suffix_set_memory(const struct dlb_suffix_set *s)
{
	return s->bytes;
}

/*
 * Give every node of the copy its own child array (the arena was copied
 * whole, so refs are the same). After a failure the rest get none, so that
 * the copy never frees the source's arrays.
 */
static void
copy_kids(struct dlb_suffix_set *d, struct sfx_node *n, bool *failed)
{
	struct sfx_slot *src = n->kids;
	size_t bytes, slots;

	if (src == NULL)
		return;
	slots = node_slots(n);
	bytes = kids_bytes(n->klog2);
	n->kids = *failed ? NULL : malloc(bytes);
	if (n->kids == NULL) {
		*failed = true;
		n->nkids = 0;
		n->klog2 = 0;
		return;
	}
	memcpy(n->kids, src, bytes);
	for (size_t i = 0; i < slots; i++) {
		if (src[i].ref != 0)
			copy_kids(d, node_at(d, src[i].ref), failed);
	}
}

struct dlb_suffix_set *
dlb_suffix_set_copy(const struct dlb_suffix_set *s)
{
	struct dlb_suffix_set *d = calloc(1, sizeof(*d));
	bool failed = false;

	if (d == NULL)
		return NULL;
	*d = *s;
	d->chunkv = calloc(s->chunkcap, sizeof(*d->chunkv));
	d->nchunks = 0;
	if (d->chunkv == NULL) {
		free(d);
		return NULL;
	}
	for (size_t c = 0; c < s->nchunks; c++) {
		d->chunkv[c] = malloc(SFX_CHUNK);
		if (d->chunkv[c] == NULL)
			goto fail;
		memcpy(d->chunkv[c], s->chunkv[c], SFX_CHUNK);
		d->nchunks++;
	}
	/* the tree's nodes point to @s's arrays until copy_kids replaces them (free nodes
	 * have none) */
	copy_kids(d, root_of(d), &failed);
	if (failed)
		goto fail;
	return d;
fail:
	if (d->nchunks < s->nchunks) {
		/* nodes copied so far still point at @s's arrays: forget them all */
		for (size_t c = 0; c < d->nchunks; c++)
			free(d->chunkv[c]);
		free(d->chunkv);
		free(d);
		return NULL;
	}
	dlb_suffix_set_free(d);
	return NULL;
}

/* Output with truncation: at most size-1 octets, "..." at the end when cut. */
struct fmt_out {
	char *out;
	size_t size, pos;
	bool cut;
};

static void
fmt_put(struct fmt_out *f, const char *s, size_t n)
{
	if (f->cut)
		return;
	if (f->size == 0 || n > f->size - 1 - f->pos) {
		f->cut = true;
		return;
	}
	memcpy(f->out + f->pos, s, n);
	f->pos += n;
}

static void
fmt_finish(struct fmt_out *f)
{
	if (f->size == 0)
		return;
	if (f->cut) {
		size_t room = f->size - 1;

		if (room < 3) {
			f->pos = room;
			memset(f->out, '.', room);
		} else {
			if (f->pos > room - 3)
				f->pos = room - 3;
			memcpy(f->out + f->pos, "...", 3);
			f->pos += 3;
		}
	}
	f->out[f->pos] = '\0';
}

/* Append the wire name @wire in presentation form, ", " before all but the first. */
static void
fmt_name(struct fmt_out *f, bool *first, const uint8_t *wire, size_t len)
{
	char text[DLB_WIRE_NAME_TEXT_MAX];
	int n = dlb_wire_name_to_text(wire, len, text, sizeof(text));

	if (n < 0)
		return;
	if (!*first)
		fmt_put(f, ", ", 2);
	*first = false;
	fmt_put(f, text, (size_t)n);
}

/*
 * dnsdist's SuffixMatchNode order (1.7.3, observed: "qname in x., aa.x.,
 * ba.x., b.x."): pre-order, siblings ordered by their label compared from its
 * last octet backwards, case-insensitively (DNSName's operator<).
 */
static int
sfx_cmp(const void *a, const void *b)
{
	const struct sfx_node *x = *(const struct sfx_node *const *)a;
	const struct sfx_node *y = *(const struct sfx_node *const *)b;
	size_t i = x->len, j = y->len;

	while (i > 0 && j > 0) {
		uint8_t cx = x->label[--i], cy = y->label[--j];

		if (cx != cy)
			return cx < cy ? -1 : 1;
	}
	return (i > 0) - (j > 0);
}

static void
sift_down(const struct sfx_node **h, size_t k, size_t i)
{
	for (;;) {
		size_t c = 2 * i + 1;
		const struct sfx_node *t;

		if (c >= k)
			return;
		if (c + 1 < k && sfx_cmp(&h[c + 1], &h[c]) > 0)
			c++;
		if (sfx_cmp(&h[c], &h[i]) <= 0)
			return;
		t = h[c];
		h[c] = h[i];
		h[i] = t;
		i = c;
	}
}

/* Move the @k smallest of @v[0..@m) into @v[0..@k) (a max-heap of k): O(m log k). */
static void
select_smallest(const struct sfx_node **v, size_t m, size_t k)
{
	for (size_t i = k / 2; i-- > 0;)
		sift_down(v, k, i);
	for (size_t i = k; i < m; i++) {
		if (sfx_cmp(&v[i], &v[0]) < 0) {
			v[0] = v[i];
			sift_down(v, k, 0);
		}
	}
}

struct sfx_walk {
	const struct dlb_suffix_set *s;
	struct fmt_out f;
	bool first;
	const struct sfx_node *path[SFX_MAX_LABELS + 1];
};

static void
sfx_visit(struct sfx_walk *w, const struct sfx_node *n, int depth)
{
	const struct sfx_node **v;
	size_t m = 0;

	if (w->f.cut)
		return;
	w->path[depth] = n;
	if (n->terminal) {
		uint8_t wire[DLB_MAX_NAME];
		size_t len = 0;

		for (int d = depth; d > 0; d--) {
			wire[len++] = w->path[d]->len;
			memcpy(wire + len, w->path[d]->label, w->path[d]->len);
			len += w->path[d]->len;
		}
		wire[len++] = 0;
		fmt_name(&w->f, &w->first, wire, len);
	}
	if (n->nkids == 0 || depth >= SFX_MAX_LABELS)
		return;
	v = malloc(n->nkids * sizeof(*v));
	if (v == NULL) {
		w->f.cut = true;
		return;
	}
	for (size_t i = 0; i < node_slots(n); i++) {
		if (n->kids[i].ref != 0)
			v[m++] = node_at(w->s, n->kids[i].ref);
	}
	/* each name takes >= 3 octets of output: only that many children can show */
	if (m > w->f.size / 3 + 1) {
		select_smallest(v, m, w->f.size / 3 + 1);
		m = w->f.size / 3 + 1;
	}
	if (m > 1)
		qsort(v, m, sizeof(*v), sfx_cmp);
	for (size_t i = 0; i < m && !w->f.cut; i++)
		sfx_visit(w, v[i], depth + 1);
	free(v);
}

void
dlb_suffix_set_format(const struct dlb_suffix_set *s, char *out, size_t outsz)
{
	struct sfx_walk *w = malloc(sizeof(*w));

	if (outsz == 0)
		goto out;
	if (w == NULL) {
		out[0] = '\0';
		goto out;
	}
	w->s = s;
	w->f = (struct fmt_out){ .out = out, .size = outsz };
	w->first = true;
	sfx_visit(w, root_of(s), 0);
	fmt_finish(&w->f);
out:
	free(w);
}

/* ---- name set -------------------------------------------------------------- */

struct ns_slot {
	uint8_t *name;		/* name[0] = wire length, then the wire name; owned */
	uint32_t tag;		/* the table's */
};

/* Configuration-built, so no bound of its own (the hashtab's largest). */
#define NS_MAX_SLOTS	(1u << 30)

struct dlb_name_set {
	struct dlb_hashtab t;	/* of struct ns_slot */
};

struct dlb_name_set *
dlb_name_set_new(void)
{
	struct dlb_name_set *s = malloc(sizeof(*s));

	if (s != NULL)
		dlb_hashtab_init(&s->t, sizeof(struct ns_slot), offsetof(struct ns_slot, tag), 16,
				 NS_MAX_SLOTS);
	return s;
}

void
dlb_name_set_clear(struct dlb_name_set *s)
{
	for (uint32_t i = 0; i < dlb_hashtab_slots(&s->t); i++) {
		struct ns_slot *e = dlb_hashtab_at(&s->t, i);

		if (e != NULL)
			free(e->name);
	}
	dlb_hashtab_clear(&s->t);
}

void
dlb_name_set_free(struct dlb_name_set *s)
{
	if (s == NULL)
		return;
	dlb_name_set_clear(s);
	free(s);
}

static uint32_t
ns_hash(const uint8_t *lc, size_t len)
{
	return (uint32_t)dlb_hash_bytes(lc, len, NAMES_SEED);
}

/* A name looked up: @len bytes of lowercase wire name at @lc. */
struct ns_key {
	const uint8_t *lc;
	size_t len;
};

static bool
ns_eq(const void *e, const void *key)
{
	const uint8_t *n = ((const struct ns_slot *)e)->name;
	const struct ns_key *k = key;

	return n[0] == k->len && memcmp(n + 1, k->lc, k->len) == 0;
}

/* The slot holding @lc, or NULL. */
static inline struct ns_slot *
ns_find(const struct dlb_name_set *s, const uint8_t *lc, size_t len, uint32_t h)
{
	struct ns_key k = { lc, len };

	return DLB_HASHTAB_FIND(&s->t, h, struct ns_slot, tag, ns_eq, &k);
}

int
dlb_name_set_add(struct dlb_name_set *s, const uint8_t *lc, size_t len)
{
	uint8_t off[SFX_MAX_LABELS], name[DLB_MAX_NAME], *copy;
	struct ns_slot *e;
	uint32_t h;

	if (name_labels(lc, len, off, name) < 0)
		return DLB_EINVAL;
	h = ns_hash(name, len);
	if (ns_find(s, name, len, h) != NULL)
		return DLB_OK;
	copy = malloc(1 + len);
	if (copy == NULL)
		return DLB_ENOMEM;
	e = dlb_hashtab_add(&s->t, h);
	if (e == NULL) {
		free(copy);
		return DLB_ENOMEM;
	}
	copy[0] = (uint8_t)len;
	memcpy(copy + 1, name, len);
	e->name = copy;
	return DLB_OK;
}

bool
dlb_name_set_remove(struct dlb_name_set *s, const uint8_t *lc, size_t len)
{
	uint8_t off[SFX_MAX_LABELS], name[DLB_MAX_NAME];
	struct ns_slot *e;

	if (dlb_hashtab_count(&s->t) == 0 || name_labels(lc, len, off, name) < 0)
		return false;
	e = ns_find(s, name, len, ns_hash(name, len));
	if (e == NULL)
		return false;
	free(e->name);
	dlb_hashtab_remove(&s->t, e);
	return true;
}

bool
dlb_name_set_match(const struct dlb_name_set *s, const uint8_t *lc, size_t len)
{
	if (dlb_hashtab_count(&s->t) == 0 || len == 0 || len > DLB_MAX_NAME)
		return false;
	return ns_find(s, lc, len, ns_hash(lc, len)) != NULL;
}

bool
dlb_name_set_match_labels(const struct dlb_name_set *s, const uint8_t *lc, size_t len,
			  struct dlb_qname_labels *l)
{
	if (dlb_hashtab_count(&s->t) == 0 || len == 0 || len > DLB_MAX_NAME)
		return false;
	if (!l->name_hashed) {
		l->name_hash = ns_hash(lc, len);
		l->name_hashed = true;
	}
	return ns_find(s, lc, len, l->name_hash) != NULL;
}

size_t
dlb_name_set_count(const struct dlb_name_set *s)
{
	return dlb_hashtab_count(&s->t);
}

struct dlb_name_set *
dlb_name_set_copy(const struct dlb_name_set *s)
{
	struct dlb_name_set *d = dlb_name_set_new();

	uint32_t i;

	if (d == NULL)
		return NULL;
	if (dlb_hashtab_copy(&d->t, &s->t) != 0)
		goto fail;
	/* the slots are copied: give each its own name (the originals stay @s's) */
	for (i = 0; i < dlb_hashtab_slots(&d->t); i++) {
		struct ns_slot *e = dlb_hashtab_at(&d->t, i);
		uint8_t *n;

		if (e == NULL)
			continue;
		n = malloc(1 + (size_t)e->name[0]);
		if (n == NULL)
			goto fail_names;
		memcpy(n, e->name, 1 + (size_t)e->name[0]);
		e->name = n;
	}
	return d;
fail_names:
	/* slots from i on still point at @s's names: forget them, free ours */
	for (uint32_t j = 0; j < i; j++) {
		struct ns_slot *e = dlb_hashtab_at(&d->t, j);

		if (e != NULL)
			free(e->name);
	}
	dlb_hashtab_clear(&d->t);
fail:
	free(d);
	return NULL;
}

static int
str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted (byte order of the presentation forms), joined by ", ". */
void
dlb_name_set_format(const struct dlb_name_set *s, char *out, size_t outsz)
{
	struct fmt_out f = { .out = out, .size = outsz };
	char **v;
	size_t m = 0, total;
	bool first = true;

	if (outsz == 0)
		return;
	total = dlb_hashtab_count(&s->t);
	v = total > 0 ? calloc(total, sizeof(*v)) : NULL;
	if (total > 0 && v == NULL) {
		out[0] = '\0';
		return;
	}
	for (uint32_t i = 0; i < dlb_hashtab_slots(&s->t); i++) {
		char text[DLB_WIRE_NAME_TEXT_MAX];
		const struct ns_slot *e = dlb_hashtab_at(&s->t, i);
		const uint8_t *n = e != NULL ? e->name : NULL;

		if (n == NULL || dlb_wire_name_to_text(n + 1, n[0], text, sizeof(text)) < 0)
			continue;
		v[m] = strdup(text);
		if (v[m] == NULL) {
			f.cut = true;
			break;
		}
		m++;
	}
	if (m > 1)
		qsort(v, m, sizeof(*v), str_cmp);
	for (size_t i = 0; i < m; i++) {
		if (!first)
			fmt_put(&f, ", ", 2);
		first = false;
		fmt_put(&f, v[i], strlen(v[i]));
		free(v[i]);
	}
	free(v);
	fmt_finish(&f);
}
