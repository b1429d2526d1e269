/*
 * qcount.c - per-worker query counters (qcount.h).
 *
 * A worker's table is an open-addressing array of slots {count, hash,
 * offset, length} and an append-only arena of names, both mapped once
 * (MAP_NORESERVE: only the pages used are memory) and never moved or
 * unmapped, so that the console can read them while the worker writes. The
 * worker fills a new slot's hash, offset and name, then publishes its count
 * with a release store; the console reads the count with an acquire load
 * and skips zeros. Counts only grow, stored by their one writer. Emptying
 * (MADV_DONTNEED gives zero pages back) happens inside an odd sequence
 * number: a console read that overlaps one sees the number change and
 * reads again.
 *
 * Names are hashed with SipHash (libsodium's crypto_shorthash) under a
 * random key: they are chosen by clients.
 */
#include "dnslb/core/qcount.h"

#include <sched.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "dnslb/core/dnslb.h"

#define QC_SLOTS	(1u << 17)	/* > DLB_QCOUNT_MAX_NAMES * 4 / 3 */
#define QC_ARENA	((size_t)16 << 20)

struct qc_slot {
	uint64_t count;		/* atomic; 0: free */
	uint64_t hash;
	uint32_t off, len;	/* the name in the arena */
};

struct qc_table {
	struct qc_slot *slots;
	char *arena;
	size_t used;		/* arena bytes used (writer only) */
	uint32_t n;		/* names (writer only) */
	uint64_t gen;		/* atomic: the clear generation this table is at */
	uint64_t seq;		/* atomic: odd while emptying */
};

bool dlb_qcount_on;
static uint64_t filter;		/* atomic: gen << 24 | fn */
static uint64_t clear_gen;	/* atomic */
static struct qc_table *tables[DLB_MAX_WORKERS];	/* atomic pointers */
static unsigned char hkey[crypto_shorthash_KEYBYTES];
static bool hkey_ready;

void
dlb_qcount_set(bool on)
{
	if (!hkey_ready && sodium_init() >= 0) {
		crypto_shorthash_keygen(hkey);
		__atomic_store_n(&hkey_ready, true, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&dlb_qcount_on, on && hkey_ready, __ATOMIC_RELEASE);
}

void
dlb_qcount_set_filter(uint64_t gen, int fn)
{
	__atomic_store_n(&filter, fn > 0 ? gen << 24 | (uint64_t)(fn & 0xffffff) : 0,
			 __ATOMIC_RELEASE);
}

int
dlb_qcount_filter(uint64_t gen)
{
	uint64_t f = __atomic_load_n(&filter, __ATOMIC_ACQUIRE);

	if (f == 0 || f >> 24 != (gen & 0xffffffffffULL))
		return 0;
	return (int)(f & 0xffffff);
}

static void *
map(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static struct qc_table *
table_new(void)
{
	struct qc_table *t = calloc(1, sizeof(*t));

	if (t == NULL)
		return NULL;
	t->slots = map(QC_SLOTS * sizeof(struct qc_slot));
	t->arena = map(QC_ARENA);
	if (t->slots == NULL || t->arena == NULL) {
		if (t->slots != NULL)
			munmap(t->slots, QC_SLOTS * sizeof(struct qc_slot));
		if (t->arena != NULL)
			munmap(t->arena, QC_ARENA);
		free(t);
		return NULL;
	}
	t->gen = __atomic_load_n(&clear_gen, __ATOMIC_ACQUIRE);
	return t;
}

/* Empty @t (its worker). */
static void
table_zap(struct qc_table *t, uint64_t gen)
{
	uint64_t s = __atomic_load_n(&t->seq, __ATOMIC_RELAXED);

	__atomic_store_n(&t->seq, s + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	if (t->n > 0)
		madvise(t->slots, QC_SLOTS * sizeof(struct qc_slot), MADV_DONTNEED);
	if (t->used > 0)
		madvise(t->arena, (t->used + 4095) & ~(size_t)4095, MADV_DONTNEED);
	t->n = 0;
	t->used = 0;
	__atomic_store_n(&t->gen, gen, __ATOMIC_RELAXED);
	__atomic_store_n(&t->seq, s + 2, __ATOMIC_RELEASE);
}

static uint64_t
name_hash(const char *name, size_t len)
{
	uint64_t h;

	crypto_shorthash((unsigned char *)&h, (const unsigned char *)name, len, hkey);
	return h;
}

int
dlb_qcount_add(int worker, const char *name, size_t len)
{
	struct qc_table *t;
	uint64_t h, gen;
	uint32_t i;

	if (worker < 0 || worker >= DLB_MAX_WORKERS || len > DLB_QCOUNT_NAME_MAX ||
	    !__atomic_load_n(&hkey_ready, __ATOMIC_ACQUIRE))
		return -1;
	t = tables[worker];
	if (t == NULL) {
		t = table_new();
		if (t == NULL)
			return -1;
		__atomic_store_n(&tables[worker], t, __ATOMIC_RELEASE);
	}
	gen = __atomic_load_n(&clear_gen, __ATOMIC_ACQUIRE);
	if (t->gen != gen)
		table_zap(t, gen);
	h = name_hash(name, len);
	for (i = (uint32_t)h & (QC_SLOTS - 1);; i = (i + 1) & (QC_SLOTS - 1)) {
		struct qc_slot *s = &t->slots[i];
		uint64_t c = s->count;	/* its one writer: plain reads */

		if (c == 0)
			break;
		if (s->hash == h && s->len == len && memcmp(t->arena + s->off, name, len) == 0) {
			__atomic_store_n(&s->count, c + 1, __ATOMIC_RELAXED);
			return 0;
		}
	}
	if (t->n >= DLB_QCOUNT_MAX_NAMES || t->used + len > QC_ARENA)
		return -1;
	memcpy(t->arena + t->used, name, len);
	t->slots[i].hash = h;
	t->slots[i].off = (uint32_t)t->used;
	t->slots[i].len = (uint32_t)len;
	__atomic_store_n(&t->slots[i].count, 1, __ATOMIC_RELEASE);
	t->used += len;
	t->n++;
	return 0;
}

struct snap {
	struct dlb_qcount_rec *v;
	size_t n, cap;
	char *buf;
	size_t used, bufcap;
};

static int
snap_add(struct snap *sn, const char *name, size_t len, uint64_t count)
{
	if (sn->n == sn->cap) {
		size_t cap = sn->cap ? sn->cap * 2 : 64;
		struct dlb_qcount_rec *v = realloc(sn->v, cap * sizeof(*v));

		if (v == NULL)
			return -1;
		sn->v = v;
		sn->cap = cap;
	}
	/* allocated even for an empty name: the sorts compare from it */
	if (sn->buf == NULL || sn->used + len > sn->bufcap) {
		size_t cap = sn->bufcap ? sn->bufcap : 4096;
		char *b;

		while (cap < sn->used + len)
			cap *= 2;
		b = realloc(sn->buf, cap);
		if (b == NULL)
			return -1;
		sn->buf = b;
		sn->bufcap = cap;
	}
	if (len > 0)
		memcpy(sn->buf + sn->used, name, len);
	/* an offset until the buffer stops moving */
	sn->v[sn->n].name = (const char *)(uintptr_t)sn->used;
	sn->v[sn->n].len = len;
	sn->v[sn->n].count = count;
	sn->n++;
	sn->used += len;
	return 0;
}

/* Append @t's records; @return 0, 1 when a clear overlapped (nothing kept), -1 ENOMEM. */
static int
snap_table(struct snap *sn, struct qc_table *t, uint64_t gen)
{
	size_t n0 = sn->n, used0 = sn->used;
	uint64_t s1 = __atomic_load_n(&t->seq, __ATOMIC_ACQUIRE);

	if (s1 & 1)
		return 1;
	if (__atomic_load_n(&t->gen, __ATOMIC_RELAXED) != gen)
		return 0;	/* a clear this worker has not seen yet: empty */
	for (uint32_t i = 0; i < QC_SLOTS; i++) {
		struct qc_slot *s = &t->slots[i];
		uint64_t c = __atomic_load_n(&s->count, __ATOMIC_ACQUIRE);
		uint32_t off, len;

		if (c == 0)
			continue;
		off = __atomic_load_n(&s->off, __ATOMIC_RELAXED);
		len = __atomic_load_n(&s->len, __ATOMIC_RELAXED);
		if ((size_t)off + len > QC_ARENA || len > DLB_QCOUNT_NAME_MAX)
			break;	/* torn by a clear: the sequence check below retries */
		if (snap_add(sn, t->arena + off, len, c) != 0)
			return -1;
	}
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (__atomic_load_n(&t->seq, __ATOMIC_RELAXED) == s1)
		return 0;
	sn->n = n0;
	sn->used = used0;
	return 1;
}

static const char *snap_buf;	/* qsort's context (main thread only) */

static int
cmp_name(const void *pa, const void *pb)
{
	const struct dlb_qcount_rec *a = pa, *b = pb;
	size_t l = a->len < b->len ? a->len : b->len;
	int c = memcmp(snap_buf + (uintptr_t)a->name, snap_buf + (uintptr_t)b->name, l);

	if (c != 0)
		return c;
	return a->len < b->len ? -1 : a->len > b->len;
}

static int
cmp_count(const void *pa, const void *pb)
{
	const struct dlb_qcount_rec *a = pa, *b = pb;

	if (a->count != b->count)
		return a->count > b->count ? -1 : 1;
	return cmp_name(pa, pb);
}

int
dlb_qcount_snapshot(struct dlb_qcount_rec **v, size_t *n, char **buf)
{
	struct snap sn = { 0 };
	uint64_t gen = __atomic_load_n(&clear_gen, __ATOMIC_ACQUIRE);
	size_t k = 0;

	for (int w = 0; w < DLB_MAX_WORKERS; w++) {
		struct qc_table *t = __atomic_load_n(&tables[w], __ATOMIC_ACQUIRE);
		int r = 1;

		for (int tries = 0; t != NULL && r == 1 && tries < 1000; tries++) {
			r = snap_table(&sn, t, gen);
			if (r == 1)
				sched_yield();
		}
		if (r < 0) {
			free(sn.v);
			free(sn.buf);
			return -1;
		}
	}
	/* merge the workers' counts of the same name */
	snap_buf = sn.buf;
	if (sn.n > 1)
		qsort(sn.v, sn.n, sizeof(*sn.v), cmp_name);
	for (size_t i = 0; i < sn.n; i++) {
		if (k > 0 && cmp_name(&sn.v[k - 1], &sn.v[i]) == 0)
			sn.v[k - 1].count += sn.v[i].count;
		else
			sn.v[k++] = sn.v[i];
	}
	sn.n = k;
	if (sn.n > 1)
		qsort(sn.v, sn.n, sizeof(*sn.v), cmp_count);
	for (size_t i = 0; i < sn.n; i++)
		sn.v[i].name = sn.buf + (uintptr_t)sn.v[i].name;
	snap_buf = NULL;
	*v = sn.v;
	*n = sn.n;
	*buf = sn.buf;
	return 0;
}

size_t
dlb_qcount_clear(void)
{
	struct dlb_qcount_rec *v = NULL;
	char *buf = NULL;
	size_t n = 0;

	if (dlb_qcount_snapshot(&v, &n, &buf) != 0)
		n = 0;
	free(v);
	free(buf);
	__atomic_add_fetch(&clear_gen, 1, __ATOMIC_ACQ_REL);
	return n;
}
