/*
 * timedipset.c - the address set of TimedIPSetRule: client addresses (the
 * address only, no port) each with a time to die, added from Lua at any
 * time (the configuration, the console, a LuaAction in any worker) and
 * looked up by the rule on the query path.
 *
 * The table is sharded as MaxQPSIPRule's (rules/qps.c): 64 shards chosen by
 * the high bits of a keyed hash of the address, one spinlock each, each a
 * dnslb/core/hashtab.h table (linear probing, backward-shift deletion). A rule that
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
#include "dnslb/core/hashtab.h"
#include "dnslb/core/netmask.h"

#define TIPS_SHARD_BITS	6
#define TIPS_SHARDS	(1u << TIPS_SHARD_BITS)
#define TIPS_MIN_SLOTS	16u
#define TIPS_MAX_SLOTS	(1u << 15)

/* One address; the key is (k0, k1, fam). */
struct tent {
	uint64_t k0, k1;	/* the address: v6 high/low halves, v4 in k1 */
	int64_t ttd;		/* time(NULL) at which it stops matching */
	uint32_t tag;		/* the table's (dnslb/core/hashtab.h) */
	uint32_t fam;		/* AF_INET or AF_INET6 */
};

struct tshard {
	ck_spinlock_t lock;
	struct dlb_hashtab t;	/* of struct tent */
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

static bool
tent_eq(const void *e, const void *key)
{
	const struct tent *a = e, *b = key;

	return a->k1 == b->k1 && a->k0 == b->k0 && a->fam == b->fam;
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
	for (unsigned i = 0; i < TIPS_SHARDS; i++) {
		ck_spinlock_init(&t->shards[i].lock);
		dlb_hashtab_init(&t->shards[i].t, sizeof(struct tent), offsetof(struct tent, tag),
				 TIPS_MIN_SLOTS, TIPS_MAX_SLOTS);
	}
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
		dlb_hashtab_deinit(&t->shards[i].t);
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

/* Drop the entries of @s whose time to die is before @now. Lock held. */
static void
shard_cleanup(struct tshard *s, int64_t now)
{
	for (uint32_t i = 0; i < dlb_hashtab_slots(&s->t); i++) {
		struct tent *e;

		/* a shifted-in entry lands at i: look again */
		while ((e = dlb_hashtab_at(&s->t, i)) != NULL && e->ttd < now)
			dlb_hashtab_remove(&s->t, e);
	}
	dlb_hashtab_shrink(&s->t);
}

int
dlb_timed_ipset_add(struct dlb_timed_ipset *t, const struct sockaddr *sa, int64_t ttd)
{
	struct tent key;
	struct tshard *s;
	struct tent *e;
	uint64_t h;
	int f;

	if (!dlb_sockaddr_subnet_key(sa, 32, 128, &key.k0, &key.k1, &f))
		return -1;
	key.fam = (uint32_t)f;
	h = key_hash(t, key.k0, key.k1, key.fam);
	s = &t->shards[h >> (64 - TIPS_SHARD_BITS)];
	ck_spinlock_lock(&s->lock);
	e = DLB_HASHTAB_FIND(&s->t, h, struct tent, tag, tent_eq, &key);
	if (e != NULL) {
		if (e->ttd < ttd)
			e->ttd = ttd;
		ck_spinlock_unlock(&s->lock);
		return 0;
	}
	e = dlb_hashtab_add(&s->t, h);
	if (e == NULL) {
		/* full at the bound: make room from the expired ones */
		shard_cleanup(s, (int64_t)time(NULL));
		e = dlb_hashtab_add(&s->t, h);
	}
	if (e == NULL) {
		ck_spinlock_unlock(&s->lock);
		return -1;
	}
	e->k0 = key.k0;
	e->k1 = key.k1;
	e->fam = key.fam;
	e->ttd = ttd;
	ck_spinlock_unlock(&s->lock);
	return 0;
}

bool
dlb_timed_ipset_match(struct dlb_timed_ipset *t, const struct sockaddr *sa)
{
	struct tent key;
	struct tshard *s;
	struct tent *e;
	int64_t ttd = 0;
	uint64_t h;
	bool found;
	int f;

	if (sa == NULL || !dlb_sockaddr_subnet_key(sa, 32, 128, &key.k0, &key.k1, &f))
		return false;
	key.fam = (uint32_t)f;
	h = key_hash(t, key.k0, key.k1, key.fam);
	s = &t->shards[h >> (64 - TIPS_SHARD_BITS)];
	/* an empty shard needs no lock (count is written under it, read here relaxed) */
	if (dlb_hashtab_count_relaxed(&s->t) == 0)
		return false;
	ck_spinlock_lock(&s->lock);
	e = DLB_HASHTAB_FIND(&s->t, h, struct tent, tag, tent_eq, &key);
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
		dlb_hashtab_clear(&s->t);
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
		for (uint32_t j = 0; j < dlb_hashtab_slots(&s->t); j++) {
			const struct tent *e = dlb_hashtab_at(&s->t, j);

			if (e != NULL && now < e->ttd)
				n++;
		}
		ck_spinlock_unlock(&s->lock);
	}
	return n;
}
