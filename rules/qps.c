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
 * only when their clients hash to the same shard; each shard is an open
 * addressing table with linear probing and backward-shift deletion (no
 * tombstones). Memory is bounded: a slot is 40 bytes (struct qent), tables
 * double up to QPSIP_MAX_SLOTS per shard at a load of 1/2 and then fill to
 * 3/4, so at most 64 * 2^15 * 40 B = 80 MiB and about 1.5 M subnets; a new
 * subnet beyond that is not tracked (it is never "over": fail open, as the
 * alternative would let a spoofed flood lock out new clients). Idle entries
 * go at cleanup, and a shard left empty gives its table back.
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

/* One tracked subnet: 40 bytes. */
struct qent {
	uint64_t k0, k1;	/* the masked address: v6 high/low halves, v4 in k1 */
	double tat;		/* GCRA state (see the top of the file) */
	double last;		/* last query seen, s */
	uint32_t hash;		/* low bits of the keyed hash: the home slot */
	uint32_t fam;		/* 0: free slot; AF_INET or AF_INET6 */
};

struct qshard {
	ck_spinlock_t lock;
	uint32_t mask;		/* slots - 1; 0 with v == NULL */
	uint32_t count;		/* written under the lock, read relaxed by count() */
	struct qent *v;
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
	for (unsigned i = 0; i < QPSIP_SHARDS; i++)
		ck_spinlock_init(&q->shards[i].lock);
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
		free(q->shards[i].v);
	free(q);
}

/* Move the entries of @s into a table of @slots slots. Lock held. @return 0 or -1. */
static int
shard_resize(struct qshard *s, uint32_t slots)
{
	struct qent *nv = calloc(slots, sizeof(*nv));
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

bool
dlb_qps_ip_over(struct dlb_qps_ip *q, const struct sockaddr *sa, double now)
{
	uint64_t k0, k1, h;
	uint32_t fam, i, slots;
	struct qshard *s;
	struct qent *e;
	double tat;
	bool over;

	if (q->never)
		return true;
	if (sa == NULL || !make_key(q, sa, &k0, &k1, &fam))
		return false;
	h = key_hash(q, k0, k1, fam);
	s = &q->shards[h >> (64 - QPSIP_SHARD_BITS)];

	ck_spinlock_lock(&s->lock);
	if (s->v != NULL) {
		for (i = (uint32_t)h & s->mask; s->v[i].fam != 0; i = (i + 1) & s->mask) {
			e = &s->v[i];
			if (e->k1 == k1 && e->k0 == k0 && e->fam == fam)
				goto found;
		}
	}
	/* a new subnet: grow at load 1/2 (rare, amortized), fill to 3/4 at the cap */
	slots = s->v == NULL ? 0 : s->mask + 1;
	if (slots == 0 || (s->count + 1) * 2 > slots) {
		if (slots < QPSIP_MAX_SLOTS &&
		    shard_resize(s, slots == 0 ? QPSIP_MIN_SLOTS : slots * 2) == 0)
			slots = s->mask + 1;
		if (slots == 0 || (s->count + 1) * 4 > slots * 3) {
			ck_spinlock_unlock(&s->lock);
			return false;	/* full: fail open (see the top of the file) */
		}
	}
	for (i = (uint32_t)h & s->mask; s->v[i].fam != 0; i = (i + 1) & s->mask)
		;
	e = &s->v[i];
	e->k0 = k0;
	e->k1 = k1;
	e->fam = fam;
	e->hash = (uint32_t)h;
	e->tat = now;		/* full bucket */
	__atomic_store_n(&s->count, s->count + 1, __ATOMIC_RELAXED);
found:
	tat = e->tat > now ? e->tat : now;
	tat += q->t;
	over = tat - now > q->limit;
	if (!over)
		e->tat = tat;
	e->last = now;
	ck_spinlock_unlock(&s->lock);
	return over;
}

/* Remove slot @i (backward-shift deletion: later members of its cluster move up). */
static void
shard_delete(struct qshard *s, uint32_t i)
{
	uint32_t mask = s->mask;

	for (uint32_t j = (i + 1) & mask; s->v[j].fam != 0; j = (j + 1) & mask) {
		uint32_t home = s->v[j].hash & mask;

		/* the entry at j may fill the hole at i unless its home is in (i, j] */
		if (((j - home) & mask) >= ((j - i) & mask)) {
			s->v[i] = s->v[j];
			i = j;
		}
	}
	s->v[i].fam = 0;
	__atomic_store_n(&s->count, s->count - 1, __ATOMIC_RELAXED);
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
		if (s->v != NULL) {
			for (uint32_t i = 0; i <= s->mask; i++) {
				/* a shifted-in entry lands at i: look again */
				while (s->v[i].fam != 0 && s->v[i].last < cutoff) {
					shard_delete(s, i);
					removed++;
				}
			}
			if (s->count == 0) {
				free(s->v);
				s->v = NULL;
				s->mask = 0;
			}
		}
		ck_spinlock_unlock(&s->lock);
	}
	return removed;
}

size_t
dlb_qps_ip_count(const struct dlb_qps_ip *q)
{
	size_t n = 0;

	for (unsigned i = 0; i < QPSIP_SHARDS; i++)
		n += __atomic_load_n(&q->shards[i].count, __ATOMIC_RELAXED);
	return n;
}

size_t
dlb_qps_ip_memory(const struct dlb_qps_ip *q)
{
	size_t n = sizeof(*q);

	for (unsigned i = 0; i < QPSIP_SHARDS; i++) {
		struct qshard *s = (struct qshard *)&q->shards[i];

		ck_spinlock_lock(&s->lock);
		if (s->v != NULL)
			n += ((size_t)s->mask + 1) * sizeof(struct qent);
		ck_spinlock_unlock(&s->lock);
	}
	return n;
}
