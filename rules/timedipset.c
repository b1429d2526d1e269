/*
 * timedipset.c - the address set of TimedIPSetRule: client addresses (the
 * address only, no port) each with a time to die, added from Lua at any
 * time (the configuration, the console, a LuaAction in any worker) and
 * looked up by the rule on the query path.
 *
 * The table is sharded as MaxQPSIPRule's (rules/qps.c): 64 shards chosen by
 * the high bits of a keyed hash of the address, one spinlock each, open
 * addressing with linear probing and backward-shift deletion. A rule that
 * matches takes one shard's lock for one probe sequence; workers contend
 * only on the same shard. Memory is bounded: a shard grows to
 * TIPS_MAX_SLOTS slots (at load 1/2, then fills to 3/4); adding to a full
 * shard first drops its expired entries, and fails when none are.
 *
 * Times are time(NULL) seconds, as dnsdist's: an entry matches while
 * now < its time to die; re-adding an address keeps the later time.
 *
 * One set is shared by every Lua state of a configuration (the n-th
 * TimedIPSetRule() of the config state is the n-th of each worker state:
 * dlb_timed_ipset_shared), so an address a LuaAction adds in one worker is
 * seen by the rule in all of them. References are atomic; the registry of
 * shared sets has its own mutex (only state building and freeing touch it).
 *
 * Thread: any.
 */
#include "rules/rules.h"

#include <ck_spinlock.h>
#include <pthread.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dnslb/core/hash.h"
#include "dnslb/core/netmask.h"

#define TIPS_SHARD_BITS	6
#define TIPS_SHARDS	(1u << TIPS_SHARD_BITS)
#define TIPS_MIN_SLOTS	16u
#define TIPS_MAX_SLOTS	(1u << 15)

struct tent {
	uint64_t k0, k1;	/* the address: v6 high/low halves, v4 in k1 */
	int64_t ttd;		/* time(NULL) at which it stops matching */
	uint32_t hash;		/* low bits of the keyed hash: the home slot */
	uint32_t fam;		/* 0: free slot; AF_INET or AF_INET6 */
};

struct tshard {
	ck_spinlock_t lock;
	uint32_t mask;		/* slots - 1; 0 with v == NULL */
	uint32_t count;
	struct tent *v;
} __attribute__((aligned(64)));

struct dlb_timed_ipset {
	struct tshard shards[TIPS_SHARDS];
	uint64_t seed0, seed1;	/* hash key: addresses are attacker-chosen */
	int refs;		/* atomic */
	/* the registry entry (dlb_timed_ipset_shared); origin 0: not registered */
	unsigned long origin;
	long nth;
	struct dlb_timed_ipset *next;
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct dlb_timed_ipset *registry;

static inline uint64_t
key_hash(const struct dlb_timed_ipset *t, uint64_t k0, uint64_t k1, uint32_t fam)
{
	return dlb_hash_key128(k0, k1 ^ ((uint64_t)fam << 56), t->seed0, t->seed1);
}

struct dlb_timed_ipset *
dlb_timed_ipset_new(void)
{
	struct dlb_timed_ipset *t;
	uint64_t seed[2];

	if (sodium_init() < 0)
		return NULL;
	t = aligned_alloc(64, (sizeof(*t) + 63) & ~(size_t)63);
	if (t == NULL)
		return NULL;
	memset(t, 0, sizeof(*t));
	for (unsigned i = 0; i < TIPS_SHARDS; i++)
		ck_spinlock_init(&t->shards[i].lock);
	randombytes_buf(seed, sizeof(seed));
	t->seed0 = seed[0];
	t->seed1 = seed[1];
	t->refs = 1;
	return t;
}

void
dlb_timed_ipset_ref(struct dlb_timed_ipset *t)
{
	__atomic_add_fetch(&t->refs, 1, __ATOMIC_RELAXED);
}

void
dlb_timed_ipset_unref(struct dlb_timed_ipset *t)
{
	if (t == NULL)
		return;
	if (t->origin != 0) {
		/* under the registry lock: a lookup must not revive a set being freed */
		pthread_mutex_lock(&registry_lock);
		if (__atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL) > 0) {
			pthread_mutex_unlock(&registry_lock);
			return;
		}
		for (struct dlb_timed_ipset **p = &registry; *p != NULL; p = &(*p)->next) {
			if (*p == t) {
				*p = t->next;
				break;
			}
		}
		pthread_mutex_unlock(&registry_lock);
	} else if (__atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL) > 0) {
		return;
	}
	for (unsigned i = 0; i < TIPS_SHARDS; i++)
		free(t->shards[i].v);
	free(t);
}

struct dlb_timed_ipset *
dlb_timed_ipset_shared(unsigned long origin, long nth, bool create)
{
	struct dlb_timed_ipset *t;

	pthread_mutex_lock(&registry_lock);
	for (t = registry; t != NULL; t = t->next) {
		if (t->origin == origin && t->nth == nth) {
			__atomic_add_fetch(&t->refs, 1, __ATOMIC_RELAXED);
			pthread_mutex_unlock(&registry_lock);
			return t;
		}
	}
	t = create ? dlb_timed_ipset_new() : NULL;
	if (t != NULL) {
		t->origin = origin;
		t->nth = nth;
		t->next = registry;
		registry = t;
	}
	pthread_mutex_unlock(&registry_lock);
	return t;
}

/* Move the entries of @s into a table of @slots slots. Lock held. @return 0 or -1. */
static int
shard_resize(struct tshard *s, uint32_t slots)
{
	struct tent *nv = calloc(slots, sizeof(*nv));
	uint32_t nmask = slots - 1;

	if (nv == NULL)
		return -1;
	if (s->v != NULL) {
		for (uint32_t i = 0; i <= s->mask; i++) {
			uint32_t j;

			if (s->v[i].fam == 0)
				continue;
			for (j = s->v[i].hash & nmask; nv[j].fam != 0; j = (j + 1) & nmask)
				;
			nv[j] = s->v[i];
		}
		free(s->v);
	}
	s->v = nv;
	s->mask = nmask;
	return 0;
}

/* Remove slot @i (backward-shift deletion: later members of its cluster move up). */
static void
shard_delete(struct tshard *s, uint32_t i)
{
	uint32_t mask = s->mask;

	for (uint32_t j = (i + 1) & mask; s->v[j].fam != 0; j = (j + 1) & mask) {
		uint32_t home = s->v[j].hash & mask;

		if (((j - home) & mask) >= ((j - i) & mask)) {
			s->v[i] = s->v[j];
			i = j;
		}
	}
	s->v[i].fam = 0;
	__atomic_store_n(&s->count, s->count - 1, __ATOMIC_RELAXED);
}

/* Drop the entries of @s whose time to die is before @now. Lock held. */
static void
shard_cleanup(struct tshard *s, int64_t now)
{
	if (s->v == NULL)
		return;
	for (uint32_t i = 0; i <= s->mask; i++) {
		/* a shifted-in entry lands at i: look again */
		while (s->v[i].fam != 0 && s->v[i].ttd < now)
			shard_delete(s, i);
	}
	if (s->count == 0) {
		free(s->v);
		s->v = NULL;
		s->mask = 0;
	}
}

/* The slot of the key in @s, or NULL. Lock held. */
static struct tent *
shard_find(struct tshard *s, uint64_t h, uint64_t k0, uint64_t k1, uint32_t fam)
{
	if (s->v == NULL)
		return NULL;
	for (uint32_t i = (uint32_t)h & s->mask; s->v[i].fam != 0; i = (i + 1) & s->mask) {
		struct tent *e = &s->v[i];

		if (e->k1 == k1 && e->k0 == k0 && e->fam == fam)
			return e;
	}
	return NULL;
}

int
dlb_timed_ipset_add(struct dlb_timed_ipset *t, const struct sockaddr *sa, int64_t ttd)
{
	uint64_t k0, k1, h;
	uint32_t fam, slots, i;
	struct tshard *s;
	struct tent *e;
	int f;

	if (!dlb_sockaddr_subnet_key(sa, 32, 128, &k0, &k1, &f))
		return -1;
	fam = (uint32_t)f;
	h = key_hash(t, k0, k1, fam);
	s = &t->shards[h >> (64 - TIPS_SHARD_BITS)];
	ck_spinlock_lock(&s->lock);
	e = shard_find(s, h, k0, k1, fam);
	if (e != NULL) {
		if (e->ttd < ttd)
			e->ttd = ttd;
		ck_spinlock_unlock(&s->lock);
		return 0;
	}
	slots = s->v == NULL ? 0 : s->mask + 1;
	if (slots == 0 || (s->count + 1) * 2 > slots) {
		if (slots < TIPS_MAX_SLOTS &&
		    shard_resize(s, slots == 0 ? TIPS_MIN_SLOTS : slots * 2) == 0)
			slots = s->mask + 1;
		if (slots != 0 && (s->count + 1) * 4 > slots * 3) {
			shard_cleanup(s, (int64_t)time(NULL));
			slots = s->v == NULL ? 0 : s->mask + 1;
			if (slots == 0 && shard_resize(s, TIPS_MIN_SLOTS) == 0)
				slots = s->mask + 1;
		}
		if (slots == 0 || (s->count + 1) * 4 > slots * 3) {
			ck_spinlock_unlock(&s->lock);
			return -1;
		}
	}
	for (i = (uint32_t)h & s->mask; s->v[i].fam != 0; i = (i + 1) & s->mask)
		;
	e = &s->v[i];
	e->k0 = k0;
	e->k1 = k1;
	e->fam = fam;
	e->hash = (uint32_t)h;
	e->ttd = ttd;
	__atomic_store_n(&s->count, s->count + 1, __ATOMIC_RELAXED);
	ck_spinlock_unlock(&s->lock);
	return 0;
}

bool
dlb_timed_ipset_match(struct dlb_timed_ipset *t, const struct sockaddr *sa)
{
	uint64_t k0, k1, h;
	struct tshard *s;
	struct tent *e;
	int64_t ttd = 0;
	bool found;
	int f;

	if (sa == NULL || !dlb_sockaddr_subnet_key(sa, 32, 128, &k0, &k1, &f))
		return false;
	h = key_hash(t, k0, k1, (uint32_t)f);
	s = &t->shards[h >> (64 - TIPS_SHARD_BITS)];
	/* an empty shard needs no lock (count is written under it, read here relaxed) */
	if (__atomic_load_n(&s->count, __ATOMIC_RELAXED) == 0)
		return false;
	ck_spinlock_lock(&s->lock);
	e = shard_find(s, h, k0, k1, (uint32_t)f);
	found = e != NULL;
	if (found)
		ttd = e->ttd;
	ck_spinlock_unlock(&s->lock);
	return found && (int64_t)time(NULL) < ttd;
}

void
dlb_timed_ipset_cleanup(struct dlb_timed_ipset *t)
{
	int64_t now = (int64_t)time(NULL);

	for (unsigned i = 0; i < TIPS_SHARDS; i++) {
		ck_spinlock_lock(&t->shards[i].lock);
		shard_cleanup(&t->shards[i], now);
		ck_spinlock_unlock(&t->shards[i].lock);
	}
}

void
dlb_timed_ipset_clear(struct dlb_timed_ipset *t)
{
	for (unsigned i = 0; i < TIPS_SHARDS; i++) {
		struct tshard *s = &t->shards[i];

		ck_spinlock_lock(&s->lock);
		free(s->v);
		s->v = NULL;
		s->mask = 0;
		__atomic_store_n(&s->count, 0, __ATOMIC_RELAXED);
		ck_spinlock_unlock(&s->lock);
	}
}

size_t
dlb_timed_ipset_live(struct dlb_timed_ipset *t)
{
	int64_t now = (int64_t)time(NULL);
	size_t n = 0;

	for (unsigned i = 0; i < TIPS_SHARDS; i++) {
		struct tshard *s = &t->shards[i];

		ck_spinlock_lock(&s->lock);
		if (s->v != NULL)
			for (uint32_t j = 0; j <= s->mask; j++)
				if (s->v[j].fam != 0 && now < s->v[j].ttd)
					n++;
		ck_spinlock_unlock(&s->lock);
	}
	return n;
}
