/*
 * qps.c - rate limits for rules: the global token bucket (MaxQPSRule,
 * QPSAction, QPSPoolAction) and the per-subnet table (MaxQPSIPRule).
 *
 * The bucket is the Generic Cell Rate Algorithm (ITU-T I.371), which is a
 * token bucket written as one number: the "theoretical arrival time" (TAT)
 * at which the bucket would be full again. With emission interval T =
 * 1/rate, the bucket holds (now + burst*T - TAT) / T tokens, so taking one
 * is "TAT' = max(TAT, now) + T, allowed iff TAT' - now <= burst*T". Tokens
 * and the refill time therefore pack into a single 64-bit word (the TAT as a
 * double), updated with one CAS: no lock, no torn state, and over any window
 * [t0, t1] at most rate*(t1-t0) + burst tokens are granted, whatever the
 * number of concurrent callers. A new bucket starts full (TAT = -inf), as
 * dnsdist's QPSLimiter does.
 *
 * The per-subnet table is sharded (64 shards, one spinlock each, chosen by
 * the high bits of a keyed hash of the masked address), so workers contend
 * only when their clients hash to the same shard; each shard is a
 * dnslb/core/hashtab.h table (linear probing, backward-shift deletion).
 * Memory is bounded: a slot is 40 bytes (struct qent), tables double up to QPSIP_MAX_SLOTS per shard at a load of 1/2 and then fill to
 * 3/4, so at most 64 * 2^15 * 40 B = 80 MiB and about 1.5 M subnets; a new
 * subnet beyond that is not tracked (it is never "over": fail open, as the
 * alternative would let a spoofed flood lock out new clients). Idle entries
 * go at cleanup, and a shard left empty (or under 1/8 full) gives memory back.
 *
 * Thread: dlb_bucket_take and dlb_qps_ip_over from any thread; the rest
 * main thread.
 */
#include "rules/rules.h"

#include <arpa/inet.h>
#include <ck_spinlock.h>
#include <math.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/core/hash.h"
#include "dnslb/core/hashtab.h"
#include "dnslb/core/netmask.h"

/* ---- the global bucket ---------------------------------------------------- */

static inline uint64_t
dbl_bits(double d)
{
	uint64_t u;

	memcpy(&u, &d, sizeof(u));
	return u;
}

static inline double
bits_dbl(uint64_t u)
{
	double d;

	memcpy(&d, &u, sizeof(d));
	return d;
}

/*
 * Slack on the burst test so that exactly @burst back-to-back takes pass
 * despite rounding in the repeated "+ T"; it is relative to T and does not
 * accumulate (TAT only advances by granted tokens).
 */
#define GCRA_EPS 1e-6

void
dlb_bucket_init(struct dlb_bucket *b, double rate, double burst)
{
	b->rate = rate;
	b->burst = burst;
	__atomic_store_n(&b->state, dbl_bits(-INFINITY), __ATOMIC_RELAXED);
}

bool
dlb_bucket_take(struct dlb_bucket *b, double now)
{
	double t, limit;
	uint64_t old;

	if (!(b->rate > 0))
		return false;
	t = 1.0 / b->rate;
	limit = (b->burst + GCRA_EPS) * t;
	old = __atomic_load_n(&b->state, __ATOMIC_RELAXED);
	for (;;) {
		double tat = bits_dbl(old);

		if (!(tat >= now))	/* also -inf and NaN */
			tat = now;
		tat += t;
		if (tat - now > limit)
			return false;
		if (__atomic_compare_exchange_n(&b->state, &old, dbl_bits(tat), true,
						__ATOMIC_RELAXED, __ATOMIC_RELAXED))
			return true;
	}
}

/* ---- per-subnet buckets ----------------------------------------------------- */

#define QPSIP_SHARD_BITS 6
#define QPSIP_SHARDS	(1u << QPSIP_SHARD_BITS)
#define QPSIP_MIN_SLOTS	16u
#define QPSIP_MAX_SLOTS	(1u << 15)

/* One tracked subnet: 40 bytes; the key is (k0, k1, fam). */
struct qent {
	uint64_t k0, k1;	/* the masked address: v6 high/low halves, v4 in k1 */
	double tat;		/* GCRA state (see the top of the file) */
	double last;		/* last query seen, s */
	uint32_t tag;		/* the table's (dnslb/core/hashtab.h) */
	uint32_t fam;		/* AF_INET or AF_INET6 */
};

_Static_assert(sizeof(struct qent) == 40, "qent size");

struct qshard {
	ck_spinlock_t lock;
	struct dlb_hashtab t;	/* of struct qent; count read relaxed by count() */
} __attribute__((aligned(64)));

struct dlb_qps_ip {
	struct qshard shards[QPSIP_SHARDS];
	double t, limit;	/* emission interval 1/qps, (burst + eps) * t */
	bool never;		/* qps <= 0: every query is over */
	int v4mask, v6mask;
	double expiration;	/* s */
	double cleanup_delay;	/* s */
	unsigned per_call;	/* shards scanned by one cleanup */
	unsigned cursor;	/* next shard to scan */
	double next_cleanup;
	uint64_t seed0, seed1;	/* hash key: addresses are attacker-chosen */
};

/* The key of @sa's subnet. @return false for an address family we do not track. */
static bool
make_key(const struct dlb_qps_ip *q, const struct sockaddr *sa, uint64_t *k0, uint64_t *k1,
	 uint32_t *fam)
{
	int f;

	if (!dlb_sockaddr_subnet_key(sa, q->v4mask, q->v6mask, k0, k1, &f))
		return false;
	*fam = (uint32_t)f;
	return true;
}

static inline uint64_t
key_hash(const struct dlb_qps_ip *q, uint64_t k0, uint64_t k1, uint32_t fam)
{
	return dlb_hash_key128(k0, k1 ^ ((uint64_t)fam << 56), q->seed0, q->seed1);
}

static bool
qent_eq(const void *e, const void *key)
{
	const struct qent *a = e, *b = key;

	return a->k1 == b->k1 && a->k0 == b->k0 && a->fam == b->fam;
}

struct dlb_qps_ip *
dlb_qps_ip_new(double qps, int v4mask, int v6mask, double burst, int expiration,
	       int cleanup_delay, int scan_fraction)
{
	struct dlb_qps_ip *q;
	uint64_t seed[2];

	if (sodium_init() < 0)
		return NULL;
	q = aligned_alloc(64, (sizeof(*q) + 63) & ~(size_t)63);
	if (q == NULL)
		return NULL;
	memset(q, 0, sizeof(*q));
	for (unsigned i = 0; i < QPSIP_SHARDS; i++) {
		ck_spinlock_init(&q->shards[i].lock);
		dlb_hashtab_init(&q->shards[i].t, sizeof(struct qent), offsetof(struct qent, tag),
				 QPSIP_MIN_SLOTS, QPSIP_MAX_SLOTS);
	}
	q->never = !(qps > 0);
	q->t = q->never ? 0 : 1.0 / qps;
	q->limit = (burst + GCRA_EPS) * q->t;
	q->v4mask = v4mask < 0 ? 0 : v4mask > 32 ? 32 : v4mask;
	q->v6mask = v6mask < 0 ? 0 : v6mask > 128 ? 128 : v6mask;
	q->expiration = expiration;
	q->cleanup_delay = cleanup_delay;
	if (scan_fraction < 1)
		scan_fraction = 1;
	q->per_call = (QPSIP_SHARDS + (unsigned)scan_fraction - 1) / (unsigned)scan_fraction;
	q->next_cleanup = -INFINITY;
	randombytes_buf(seed, sizeof(seed));
	q->seed0 = seed[0];
	q->seed1 = seed[1];
	return q;
}

void
dlb_qps_ip_free(struct dlb_qps_ip *q)
{
	if (q == NULL)
		return;
	for (unsigned i = 0; i < QPSIP_SHARDS; i++)
		dlb_hashtab_deinit(&q->shards[i].t);
	free(q);
}

bool
dlb_qps_ip_over(struct dlb_qps_ip *q, const struct sockaddr *sa, double now)
{
	struct qent key;
	struct qshard *s;
	struct qent *e;
	uint64_t h;
	double tat;
	bool over;

	if (q->never)
		return true;
	if (sa == NULL || !make_key(q, sa, &key.k0, &key.k1, &key.fam))
		return false;
	h = key_hash(q, key.k0, key.k1, key.fam);
	s = &q->shards[h >> (64 - QPSIP_SHARD_BITS)];

	ck_spinlock_lock(&s->lock);
	e = DLB_HASHTAB_FIND(&s->t, h, struct qent, tag, qent_eq, &key);
	if (e == NULL) {
		/* a new subnet: grow at load 1/2 (rare, amortized), fill to 3/4 at the cap */
		e = dlb_hashtab_add(&s->t, h);
		if (e == NULL) {
			ck_spinlock_unlock(&s->lock);
			return false;	/* full: fail open (see the top of the file) */
		}
		e->k0 = key.k0;
		e->k1 = key.k1;
		e->fam = key.fam;
		e->tat = now;	/* full bucket */
	}
	tat = e->tat > now ? e->tat : now;
	tat += q->t;
	over = tat - now > q->limit;
	if (!over)
		e->tat = tat;
	e->last = now;
	ck_spinlock_unlock(&s->lock);
	return over;
}

size_t
dlb_qps_ip_cleanup(struct dlb_qps_ip *q, double now)
{
	double cutoff = now - q->expiration;
	size_t removed = 0;

	/*
	 * Callable as often as the caller likes: the work happens at most every
	 * cleanup_delay s (5 % slack so a timer firing exactly every
	 * cleanup_delay s never skips a turn).
	 */
	if (q->cleanup_delay > 0 && now < q->next_cleanup - 0.05 * q->cleanup_delay)
		return 0;
	q->next_cleanup = now + q->cleanup_delay;

	for (unsigned n = 0; n < q->per_call; n++) {
		struct qshard *s = &q->shards[q->cursor];

		q->cursor = (q->cursor + 1) % QPSIP_SHARDS;
		ck_spinlock_lock(&s->lock);
		for (uint32_t i = 0; i < dlb_hashtab_slots(&s->t); i++) {
			struct qent *e;

			/* a shifted-in entry lands at i: look again */
			while ((e = dlb_hashtab_at(&s->t, i)) != NULL && e->last < cutoff) {
				dlb_hashtab_remove(&s->t, e);
				removed++;
			}
		}
		dlb_hashtab_shrink(&s->t);	/* empty: freed; under 1/8: halved */
		ck_spinlock_unlock(&s->lock);
	}
	return removed;
}

size_t
dlb_qps_ip_count(const struct dlb_qps_ip *q)
{
	size_t n = 0;

	for (unsigned i = 0; i < QPSIP_SHARDS; i++)
		n += dlb_hashtab_count_relaxed(&q->shards[i].t);
	return n;
}

size_t
dlb_qps_ip_memory(const struct dlb_qps_ip *q)
{
	size_t n = sizeof(*q);

	for (unsigned i = 0; i < QPSIP_SHARDS; i++) {
		struct qshard *s = (struct qshard *)&q->shards[i];

		ck_spinlock_lock(&s->lock);
		n += dlb_hashtab_memory(&s->t);
		ck_spinlock_unlock(&s->lock);
	}
	return n;
}
