/*
 * dyntop.c - the dynamic blocks' top offenders (dynblock.h, docs/dynblocks.md):
 * dnsdist 1.7's dnsdist_dynblocks_nmg_top_offenders_hits_per_second and
 * dnsdist_dynblocks_smt_top_offenders_hits_per_second.
 *
 * Every TOP_COLLECT_S seconds from the start the main thread takes a
 * snapshot of the store: per reason, the TOP_KEEP netmask blocks with the
 * most hits (the "Blocks" column of showDynBlocks()), and the same for the
 * suffix blocks. The last TOP_SNAPS snapshots are kept. Every TOP_GENERATE_S
 * seconds the increase of each block's count over the kept snapshots (the
 * oldest one being the baseline) gives, per reason, the TOP_N blocks with
 * the largest increase, published as round(increase / 60). Nothing runs on
 * the workers: their hit counters are read as showDynBlocks() reads them.
 *
 * dnsdist's arithmetic, kept so that both print the same numbers:
 *  - a count lower than the previous snapshot's (the block was replaced, or
 *    it was not in the previous snapshot) counts in full;
 *  - for suffix blocks each snapshot's increase REPLACES the sum instead of
 *    adding to it, so only the last interval's increase counts (a quirk of
 *    dnsdist 1.7, reproduced);
 *  - the top-N cut compares the smallest kept entry's rounded rate with the
 *    candidate's raw sum, and entries are kept in ascending order of the
 *    rounded rate, a new one going before those of an equal rate;
 *  - counts are kept as 32-bit numbers;
 *  - reasons come out in byte order, and within a reason the blocks are
 *    visited in the order of dnsdist's map keys (netmasks: longer prefix
 *    first, then the address as dnsdist's ComboAddress orders it; names:
 *    their wire form compared byte by byte from the end, case folded).
 *
 * Thread: main.
 */
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "dnslb/pipeline/dynblock.h"
#include "dnslb/core/hash.h"
#include "dnslb/core/hashtab.h"
#include "dnslb/core/log.h"

#define TOP_N		20
#define TOP_KEEP	(TOP_N * 5)	/* per snapshot: more than shown, so that a
					 * block near the cut has a chance to make it */
#define TOP_SNAPS	7
#define TOP_COLLECT_S	10
#define TOP_GENERATE_S	60

struct snap {
	struct dlb_dyn_top_ent *v;
	size_t n;
};

static struct {
	struct snap snaps[TOP_SNAPS];	/* oldest first */
	int nsnaps;
	struct dlb_dyn_top *out[2];	/* [0]: netmasks, [1]: suffixes */
	size_t nout[2];
	double next_collect, next_generate;	/* 0: not started */
} t;

static void
ents_free(struct dlb_dyn_top_ent *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i].reason);
	free(v);
}

static void
out_free(int k)
{
	for (size_t i = 0; i < t.nout[k]; i++)
		free(t.out[k][i].reason);
	free(t.out[k]);
	t.out[k] = NULL;
	t.nout[k] = 0;
}

/* dnsdist's Netmask order: longer prefix first, then family, then the
 * address (IPv4: its network-order word compared as a host integer). */
static int
nm_cmp(const struct dlb_dyn_top_ent *a, const struct dlb_dyn_top_ent *b)
{
	if (a->nm.bits != b->nm.bits)
		return a->nm.bits > b->nm.bits ? -1 : 1;
	if (a->nm.family != b->nm.family)
		return a->nm.family < b->nm.family ? -1 : 1;
	if (a->nm.family == AF_INET) {
		uint32_t x, y;

		memcpy(&x, a->nm.addr, 4);
		memcpy(&y, b->nm.addr, 4);
		if (x != y)
			return x < y ? -1 : 1;
	} else {
		int c = memcmp(a->nm.addr, b->nm.addr, 16);

		if (c != 0)
			return c < 0 ? -1 : 1;
	}
	if (a->pbits != b->pbits)
		return a->pbits < b->pbits ? -1 : 1;
	return a->port < b->port ? -1 : a->port > b->port;
}

static unsigned
fold(uint8_t c)
{
	return c >= 'A' && c <= 'Z' ? c + 32u : c;
}

/* dnsdist's DNSName order: the wire forms compared from their last byte. */
static int
name_cmp(const struct dlb_dyn_top_ent *a, const struct dlb_dyn_top_ent *b)
{
	size_t i = a->namelen, j = b->namelen;

	while (i > 0 && j > 0) {
		unsigned x = fold(a->name[--i]), y = fold(b->name[--j]);

		if (x != y)
			return x < y ? -1 : 1;
	}
	return i > 0 ? 1 : j > 0 ? -1 : 0;
}

/* Snapshot entries, in the order generation walks them: kind, reason, key, age. */
static int
gen_cmp(const void *pa, const void *pb)
{
	const struct dlb_dyn_top_ent *a = *(const struct dlb_dyn_top_ent *const *)pa;
	const struct dlb_dyn_top_ent *b = *(const struct dlb_dyn_top_ent *const *)pb;
	int c;

	if (a->smt != b->smt)
		return a->smt ? 1 : -1;
	if ((c = strcmp(a->reason, b->reason)) != 0)
		return c;
	if ((c = a->smt ? name_cmp(a, b) : nm_cmp(a, b)) != 0)
		return c;
	return a->age < b->age ? -1 : a->age > b->age;
}

/* Collection order: kind, reason, then the order the store visited them. */
static int
collect_cmp(const void *pa, const void *pb)
{
	const struct dlb_dyn_top_ent *a = pa, *b = pb;
	int c;

	if (a->smt != b->smt)
		return a->smt ? 1 : -1;
	if ((c = strcmp(a->reason, b->reason)) != 0)
		return c;
	return a->age < b->age ? -1 : a->age > b->age;
}

/* A kept entry of a bounded top list (the entry itself stays where it is). */
struct kept {
	const struct dlb_dyn_top_ent *e;
	uint32_t value;
};

/*
 * dnsdist's bounded sorted insertion into @v (@n kept, at most @cap,
 * ascending by .value): a candidate of raw size @raw (compared with the
 * smallest kept one's .value) and kept value @value goes before the kept
 * entries of an equal value; when full the smallest is dropped.
 * @return the new count.
 */
static size_t
bounded_insert(struct kept *v, size_t n, size_t cap, const struct dlb_dyn_top_ent *e,
	       uint64_t raw, uint32_t value)
{
	size_t at;

	if (n >= cap && !(v[0].value < raw))
		return n;
	if (n >= cap) {
		memmove(v, v + 1, (n - 1) * sizeof(*v));
		n--;
	}
	for (at = 0; at < n && v[at].value < value; at++)
		;
	memmove(v + at + 1, v + at, (n - at) * sizeof(*v));
	v[at].e = e;
	v[at].value = value;
	return n + 1;
}

/* dlb_dyn_top_push; @owned: the reasons of @v are to be freed (else borrowed). */
static int
push(struct dlb_dyn_top_ent *v, size_t n, bool owned)
{
	struct dlb_dyn_top_ent *keep, *shrunk;
	struct kept cur[TOP_KEEP];
	size_t nkeep = 0;

	for (size_t i = 0; i < n; i++)
		v[i].age = (unsigned)i;
	qsort(v, n, sizeof(*v), collect_cmp);
	if ((keep = malloc((n > 0 ? n : 1) * sizeof(*keep))) == NULL) {
		if (owned)
			ents_free(v, n);
		return -1;
	}
	for (size_t i = 0; i < n;) {
		size_t j = i, ncur = 0;

		for (; j < n && v[j].smt == v[i].smt && strcmp(v[j].reason, v[i].reason) == 0; j++)
			ncur = bounded_insert(cur, ncur, TOP_KEEP, &v[j], v[j].value, v[j].value);
		for (size_t k = 0; k < ncur; k++) {
			keep[nkeep] = *cur[k].e;
			keep[nkeep].reason = strdup(cur[k].e->reason);
			if (keep[nkeep].reason != NULL)
				nkeep++;
		}
		i = j;
	}
	if (owned)
		ents_free(v, n);
	if ((shrunk = realloc(keep, (nkeep > 0 ? nkeep : 1) * sizeof(*keep))) != NULL)
		keep = shrunk;
	if (t.nsnaps == TOP_SNAPS) {
		ents_free(t.snaps[0].v, t.snaps[0].n);
		memmove(t.snaps, t.snaps + 1, (TOP_SNAPS - 1) * sizeof(t.snaps[0]));
		t.nsnaps--;
	}
	t.snaps[t.nsnaps].v = keep;
	t.snaps[t.nsnaps].n = nkeep;
	t.nsnaps++;
	return 0;
}

int
dlb_dyn_top_push(struct dlb_dyn_top_ent *v, size_t n)
{
	return push(v, n, true);
}

/* Append the @n kept entries @top (one reason) to the published list *@o. */
static int
out_append(struct dlb_dyn_top **o, size_t *no, const struct kept *top, size_t n)
{
	struct dlb_dyn_top *p = realloc(*o, (*no + n + 1) * sizeof(*p));

	if (p == NULL)
		return -1;
	*o = p;
	for (size_t i = 0; i < n; i++) {
		struct dlb_dyn_info info;
		struct dlb_dyn_top *d = &p[*no];

		memset(&info, 0, sizeof(info));
		info.smt = top[i].e->smt;
		info.nm = top[i].e->nm;
		info.port = top[i].e->port;
		info.pbits = top[i].e->pbits;
		memcpy(info.name, top[i].e->name, top[i].e->namelen);
		info.namelen = top[i].e->namelen;
		dlb_dyn_key_text(&info, d->key, sizeof(d->key));
		d->value = top[i].value;
		if ((d->reason = strdup(top[i].e->reason)) == NULL)
			return -1;
		(*no)++;
	}
	return 0;
}

int
dlb_dyn_top_generate(void)
{
	struct dlb_dyn_top_ent **all;
	struct kept top[TOP_N];
	struct dlb_dyn_top *o[2] = { NULL, NULL };
	size_t no[2] = { 0, 0 }, n = 0;
	int rc = 0;

	if (t.nsnaps == 0)
		return 0;
	for (int s = 0; s < t.nsnaps; s++)
		n += t.snaps[s].n;
	if ((all = malloc((n > 0 ? n : 1) * sizeof(*all))) == NULL)
		return -1;
	n = 0;
	for (int s = 0; s < t.nsnaps; s++)
		for (size_t i = 0; i < t.snaps[s].n; i++) {
			t.snaps[s].v[i].age = (unsigned)s;
			all[n++] = &t.snaps[s].v[i];
		}
	qsort(all, n, sizeof(*all), gen_cmp);
	for (size_t i = 0; i < n && rc == 0;) {
		size_t j = i, ntop = 0;
		bool smt = all[i]->smt;

		/* one reason: one key at a time, in key order */
		while (j < n && all[j]->smt == smt && strcmp(all[j]->reason, all[i]->reason) == 0) {
			size_t k = j;
			uint64_t sum = 0;
			uint32_t last = 0;

			for (; k < n && all[k]->smt == smt &&
			       strcmp(all[k]->reason, all[j]->reason) == 0 &&
			       (smt ? name_cmp(all[k], all[j]) : nm_cmp(all[k], all[j])) == 0; k++) {
				uint32_t v = all[k]->value;
				uint64_t d = v < last ? v : (uint64_t)(v - last);

				if (all[k]->age == 0) {
					last = v;	/* the baseline */
					continue;
				}
				/* dnsdist 1.7 adds the increases of netmask blocks but
				 * assigns those of suffix blocks: reproduced */
				sum = smt ? d : sum + d;
				last = v;
			}
			ntop = bounded_insert(top, ntop, TOP_N, all[j], sum,
					      (uint32_t)round((double)sum / 60.0));
			j = k;
		}
		if (out_append(&o[smt], &no[smt], top, ntop) != 0)
			rc = -1;
		i = j;
	}
	free(all);
	if (rc != 0) {
		for (int k = 0; k < 2; k++) {
			for (size_t i = 0; i < no[k]; i++)
				free(o[k][i].reason);
			free(o[k]);
		}
		return -1;
	}
	for (int k = 0; k < 2; k++) {
		out_free(k);
		t.out[k] = o[k];
		t.nout[k] = no[k];
	}
	return 0;
}

/* The blocks of one kind and reason while the store is visited. */
struct group {
	const char *reason;		/* borrowed: the store does not change meanwhile */
	bool smt;
	size_t n;
	struct kept list[TOP_KEEP];	/* ascending; pointing into slot[] */
	struct dlb_dyn_top_ent slot[TOP_KEEP];
};

/* A slot of the groups' table: a pointer, keyed by (smt, reason). */
struct gslot {
	struct group *g;
	uint32_t tag;			/* the table's */
};

struct collect_ctx {
	struct dlb_hashtab groups;	/* of struct gslot; unbounded (the reasons are the store's) */
	size_t total;			/* entries kept over all groups */
	bool oom;
};

static uint64_t
group_hash(bool smt, const char *reason)
{
	return dlb_fnv1a64_str(reason, DLB_FNV1A64_INIT ^ (uint64_t)smt);
}

struct gkey {
	const char *reason;
	bool smt;
};

static bool
gslot_eq(const void *e, const void *key)
{
	const struct group *g = ((const struct gslot *)e)->g;
	const struct gkey *k = key;

	return g->smt == k->smt && strcmp(g->reason, k->reason) == 0;
}

/* The group of (@smt, @reason), made if new. NULL when out of memory. */
static struct group *
group_of(struct collect_ctx *c, bool smt, const char *reason)
{
	uint64_t h = group_hash(smt, reason);
	struct gkey key = { reason, smt };
	struct group *g;
	struct gslot *s = dlb_hashtab_find(&c->groups, h, gslot_eq, &key);

	if (s != NULL)
		return s->g;
	if ((g = malloc(sizeof(*g))) == NULL)
		return NULL;
	if ((s = dlb_hashtab_add(&c->groups, h)) == NULL) {
		free(g);
		return NULL;
	}
	g->reason = reason;
	g->smt = smt;
	g->n = 0;
	s->g = g;
	return g;
}

/* Each block goes straight into its group's bounded list: no copy of the
 * whole store, whatever its size. */
static void
collect_visit(const struct dlb_dyn_info *b, void *ud)
{
	struct collect_ctx *c = ud;
	const char *reason = b->reason != NULL ? b->reason : "";
	uint32_t value = (uint32_t)b->blocks;	/* dnsdist keeps them as unsigned int */
	struct group *g;
	struct dlb_dyn_top_ent *e;
	size_t before;

	if (c->oom)
		return;
	if ((g = group_of(c, b->smt, reason)) == NULL) {
		c->oom = true;
		return;
	}
	if (g->n >= TOP_KEEP && !(g->list[0].value < value))
		return;
	/* a full list drops its smallest: its slot takes the newcomer */
	e = &g->slot[g->n < TOP_KEEP ? g->n : (size_t)(g->list[0].e - g->slot)];
	memset(e, 0, sizeof(*e));
	e->smt = b->smt;
	e->nm = b->nm;
	e->port = b->port;
	e->pbits = b->pbits;
	memcpy(e->name, b->name, b->namelen);
	e->namelen = b->namelen;
	e->value = value;
	e->reason = (char *)(uintptr_t)reason;	/* borrowed until push() copies it */
	before = g->n;
	g->n = bounded_insert(g->list, g->n, TOP_KEEP, e, value, value);
	c->total += g->n - before;
}

/* Every block the store holds, expired ones not purged yet included (dnsdist's). */
static int
collect(double now)
{
	struct collect_ctx c = { .total = 0 };
	struct dlb_dyn_top_ent *v = NULL;
	size_t n = 0;
	int rc = -1;

	dlb_hashtab_init(&c.groups, sizeof(struct gslot), offsetof(struct gslot, tag), 16, 1u << 30);
	dlb_dyn_visit(now, false, collect_visit, &c);
	if (!c.oom && (v = malloc((c.total > 0 ? c.total : 1) * sizeof(*v))) != NULL) {
		for (uint32_t i = 0; i < dlb_hashtab_slots(&c.groups); i++) {
			const struct gslot *s = dlb_hashtab_at(&c.groups, i);

			for (size_t k = 0; s != NULL && k < s->g->n; k++)
				v[n++] = *s->g->list[k].e;
		}
		rc = push(v, n, false);
	}
	free(v);
	for (uint32_t i = 0; i < dlb_hashtab_slots(&c.groups); i++) {
		const struct gslot *s = dlb_hashtab_at(&c.groups, i);

		if (s != NULL)
			free(s->g);
	}
	dlb_hashtab_deinit(&c.groups);
	return rc;
}

void
dlb_dyn_top_start(double now)
{
	t.next_collect = now + TOP_COLLECT_S;
	t.next_generate = now + TOP_GENERATE_S;
}

void
dlb_dyn_top_tick(double now)
{
	if (t.next_collect == 0)
		dlb_dyn_top_start(now);
	if (now >= t.next_collect) {
		if (collect(now) != 0)
			dlb_log_ratelimited(DLB_LOG_ERR, "dynamic blocks: out of memory, "
					    "top offenders not collected");
		/* on the schedule of the start: the once-a-second tick must not
		 * make each period a little longer (dnsdist's does not drift) */
		t.next_collect += TOP_COLLECT_S;
		if (t.next_collect <= now)
			t.next_collect = now + TOP_COLLECT_S;
	}
	if (now >= t.next_generate) {
		if (dlb_dyn_top_generate() != 0)
			dlb_log_ratelimited(DLB_LOG_ERR, "dynamic blocks: out of memory, "
					    "top offenders not updated");
		t.next_generate += TOP_GENERATE_S;
		if (t.next_generate <= now)
			t.next_generate = now + TOP_GENERATE_S;
	}
}

size_t
dlb_dyn_tops(bool smt, const struct dlb_dyn_top **out)
{
	*out = t.out[smt];
	return t.nout[smt];
}

void
dlb_dyn_top_reset(void)
{
	for (int s = 0; s < t.nsnaps; s++)
		ents_free(t.snaps[s].v, t.snaps[s].n);
	for (int k = 0; k < 2; k++)
		out_free(k);
	memset(&t, 0, sizeof(t));
}
