/*
 * abuse.c - the TCP client table (shared, accept/close only) and the
 * per-worker table of queries in flight per client subnet. See abuse.h and
 * docs/abuse.md.
 *
 * Both are dnslb/core/hashtab.h tables (linear probing, backward-shift
 * deletion, no tombstones), keyed by the masked client address (IPv4 as its
 * v4-mapped IPv6 form, so a v4 client on a dual-stack listener is the same
 * client) and a keyed hash (addresses are attacker-chosen).
 *
 * TCP client table: 64 shards of at most TCL_MAX_SLOTS slots of 48 bytes,
 * filled to 3/4 at most: 64 * 8192 * 48 B = 24 MiB and about 393,000
 * subnets at worst. A shard that would grow first forgets its idle entries;
 * a full shard admits new clients untracked (fail open). The connection rate
 * is a sliding-window estimate over two windows of setTCPConnectionRateInterval
 * (the previous window's count weighted by how much of it still overlaps the
 * last interval, plus the current one's): "on average more than n new
 * connections per second over the last interval" as dnsdist 2.0 words it,
 * in 8 bytes of counts.
 *
 * Outstanding table: 24-byte entries, one per subnet with queries in flight,
 * so its size follows the worker's in-flight queries; it grows at load 1/2
 * up to DLB_COC_MAX_SLOTS slots (6 MiB), shrinks at load 1/8.
 */
#include "dnslb/pipeline/abuse.h"

#include <ck_spinlock.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/upstream/backend.h"
#include "dnslb/core/config.h"
#include "dnslb/core/log.h"
#include "dnslb/core/hash.h"
#include "dnslb/core/hashtab.h"
#include "dnslb/core/netmask.h"
#include "dnslb/upstream/doh_upstream.h"
#include "dnslb/upstream/tcp_upstream.h"
#include "dnslb/core/wstate.h"

/* ---- keys ------------------------------------------------------------------------ */

/*
 * The key of @sa's subnet: IPv4 keys carry a marker in *@k1 so that they
 * never equal an IPv6 one. @return false for a non-IP address.
 */
static bool
make_key(const struct sockaddr *sa, int v4mask, int v6mask, uint64_t *k0, uint64_t *k1)
{
	int fam;

	if (!dlb_sockaddr_subnet_key(sa, v4mask, v6mask, k0, k1, &fam))
		return false;
	if (fam == AF_INET)
		*k1 |= 0xffff00000000ULL;
	return true;
}

static uint64_t seed0, seed1;
static pthread_once_t seed_once = PTHREAD_ONCE_INIT;

static void
seed_init(void)
{
	uint64_t s[2] = { 0x9e3779b97f4a7c15ULL, 0xbf58476d1ce4e5b9ULL };

	if (sodium_init() >= 0)
		randombytes_buf(s, sizeof(s));
	seed0 = s[0];
	seed1 = s[1];
}

static inline uint64_t
key_hash(uint64_t k0, uint64_t k1)
{
	return dlb_hash_key128(k0, k1, seed0, seed1);
}

/* ---- TCP client table ------------------------------------------------------------- */

#define TCL_SHARD_BITS	6
#define TCL_SHARDS	(1u << TCL_SHARD_BITS)
#define TCL_MIN_SLOTS	16u
#define TCL_MAX_SLOTS	(1u << 13)

struct tcl_ent {
	uint64_t k0, k1;	/* the masked address */
	double win_start;	/* start of the current rate window, s */
	double ban_until;	/* s; 0: not banned */
	uint32_t cur, prev;	/* new connections in the current and the previous window */
	uint32_t conns;		/* open counted connections */
	uint32_t tag;		/* the table's */
};

_Static_assert(sizeof(struct tcl_ent) == DLB_TCP_CLIENT_ENTRY_BYTES, "entry size");

struct tcl_shard {
	ck_spinlock_t lock;
	struct dlb_hashtab t;	/* of struct tcl_ent; count read relaxed */
} __attribute__((aligned(64)));

static struct tcl_shard tcl[TCL_SHARDS] = {	/* unlocked and empty */
	[0 ... TCL_SHARDS - 1] = {
		.lock = CK_SPINLOCK_INITIALIZER,
		.t = DLB_HASHTAB_INIT(struct tcl_ent, tag, TCL_MIN_SLOTS, TCL_MAX_SLOTS),
	},
};
static uint64_t tcl_next_sweep;		/* atomic: whole seconds */
static unsigned tcl_cursor;		/* atomic: next shard to sweep */

static double
rate_window(const struct dlb_config *cfg)
{
	return (cfg->tcp_conn_rate_interval > 0 ? cfg->tcp_conn_rate_interval : 5) * 60.0;
}

/* Move the window of @e forward to @now. */
static void
rate_roll(struct tcl_ent *e, double now, double win)
{
	double k = floor((now - e->win_start) / win);

	if (k < 1)
		return;
	e->prev = k < 2 ? e->cur : 0;
	e->cur = 0;
	e->win_start = k < 2 ? e->win_start + win : now;
}

/* Nothing to remember about @e at @now: no connection, no ban, no recent rate. */
static bool
tcl_idle(const struct tcl_ent *e, double now, double win)
{
	return e->conns == 0 && e->ban_until <= now &&
	       ((e->cur == 0 && e->prev == 0) || now >= e->win_start + 2 * win);
}

/* Forget the idle entries of @s; free its table when empty. Lock held. */
static void
tcl_sweep(struct tcl_shard *s, double now, double win)
{
	for (uint32_t i = 0; i < dlb_hashtab_slots(&s->t); i++) {
		struct tcl_ent *e;

		/* a shifted-in entry lands at i: look again */
		while ((e = dlb_hashtab_at(&s->t, i)) != NULL && tcl_idle(e, now, win))
			dlb_hashtab_remove(&s->t, e);
	}
	dlb_hashtab_shrink(&s->t);
}

static bool
tcl_eq(const void *e, const void *key)
{
	const struct tcl_ent *a = e, *b = key;

	return a->k1 == b->k1 && a->k0 == b->k0;
}

/* Find @k0/@k1 in @s, or add it when @create. Lock held. */
static struct tcl_ent *
tcl_find(struct tcl_shard *s, uint64_t h, uint64_t k0, uint64_t k1, bool create, double now,
	 double win)
{
	struct tcl_ent key = { .k0 = k0, .k1 = k1 }, *e;

	e = DLB_HASHTAB_FIND(&s->t, h, struct tcl_ent, tag, tcl_eq, &key);
	if (e != NULL || !create)
		return e;
	/* forget the idle ones before growing (rare: at each doubling) */
	if (dlb_hashtab_add_grows(&s->t))
		tcl_sweep(s, now, win);
	e = dlb_hashtab_add(&s->t, h);
	if (e == NULL)
		return NULL;	/* full: fail open */
	e->k0 = k0;
	e->k1 = k1;
	e->win_start = now;
	return e;
}

/* The shard and key of @sa. @return NULL for a non-IP address. */
static struct tcl_shard *
tcl_locate(const struct dlb_config *cfg, const struct sockaddr *sa, uint64_t *h, uint64_t *k0,
	   uint64_t *k1)
{
	pthread_once(&seed_once, seed_init);
	if (!make_key(sa, cfg->tcp_conns_mask_v4, cfg->tcp_conns_mask_v6, k0, k1))
		return NULL;
	*h = key_hash(*k0, *k1);
	return &tcl[*h >> (64 - TCL_SHARD_BITS)];
}

enum dlb_tcp_admit
dlb_tcp_client_admit(const struct dlb_config *cfg, const struct sockaddr *sa, double now,
		     bool *counted, uint32_t *prior)
{
	bool need_count = cfg->max_tcp_conns_per_client > 0;
	bool need_rate = cfg->max_tcp_conn_rate_per_client > 0;
	double win = rate_window(cfg);
	enum dlb_tcp_admit res = DLB_TCP_ADMIT_OK;
	uint64_t h, k0, k1;
	struct tcl_shard *s = tcl_locate(cfg, sa, &h, &k0, &k1);
	struct tcl_ent *e;

	*counted = false;
	*prior = 0;
	if (s == NULL)
		return DLB_TCP_ADMIT_OK;
	ck_spinlock_lock(&s->lock);
	e = tcl_find(s, h, k0, k1, need_count || need_rate, now, win);
	if (e == NULL)
		goto out;	/* nothing known and nothing to count, or no room */
	if (e->ban_until > now) {
		res = DLB_TCP_ADMIT_BANNED;
		goto out;
	}
	if (need_rate) {
		double limit = (double)cfg->max_tcp_conn_rate_per_client * win;
		double est;

		rate_roll(e, now, win);
		est = e->prev * (1.0 - (now - e->win_start) / win) + e->cur + 1;
		if (est > limit) {
			e->ban_until = now + cfg->tcp_ban_duration_rate;
			res = DLB_TCP_ADMIT_RATE;
			goto out;
		}
		e->cur++;
	}
	if (need_count) {
		*prior = e->conns;
		if (e->conns >= (uint32_t)cfg->max_tcp_conns_per_client) {
			res = DLB_TCP_ADMIT_TOO_MANY;
			goto out;
		}
		e->conns++;
		*counted = true;
	}
out:
	if (e != NULL && tcl_idle(e, now, win))
		dlb_hashtab_remove(&s->t, e);
	ck_spinlock_unlock(&s->lock);
	return res;
}

void
dlb_tcp_client_release(const struct dlb_config *cfg, const struct sockaddr *sa, double now)
{
	uint64_t h, k0, k1;
	struct tcl_shard *s = tcl_locate(cfg, sa, &h, &k0, &k1);
	struct tcl_ent *e;

	if (s == NULL)
		return;
	ck_spinlock_lock(&s->lock);
	e = tcl_find(s, h, k0, k1, false, now, 0);
	if (e != NULL && e->conns > 0 && --e->conns == 0 && tcl_idle(e, now, rate_window(cfg)))
		dlb_hashtab_remove(&s->t, e);
	ck_spinlock_unlock(&s->lock);
}

void
dlb_tcp_client_ban(const struct dlb_config *cfg, const struct sockaddr *sa, double now,
		   double seconds)
{
	uint64_t h, k0, k1;
	struct tcl_shard *s = tcl_locate(cfg, sa, &h, &k0, &k1);
	struct tcl_ent *e;

	if (s == NULL || !(seconds > 0))
		return;
	ck_spinlock_lock(&s->lock);
	e = tcl_find(s, h, k0, k1, true, now, rate_window(cfg));
	if (e != NULL && e->ban_until < now + seconds)
		e->ban_until = now + seconds;
	ck_spinlock_unlock(&s->lock);
}

bool
dlb_tcp_client_banned(const struct dlb_config *cfg, const struct sockaddr *sa, double now)
{
	uint64_t h, k0, k1;
	struct tcl_shard *s = tcl_locate(cfg, sa, &h, &k0, &k1);
	struct tcl_ent *e;
	bool banned = false;

	if (s == NULL)
		return false;
	ck_spinlock_lock(&s->lock);
	e = tcl_find(s, h, k0, k1, false, now, 0);
	banned = e != NULL && e->ban_until > now;
	ck_spinlock_unlock(&s->lock);
	return banned;
}

void
dlb_tcp_clients_maintain(const struct dlb_config *cfg, double now)
{
	uint64_t sec = (uint64_t)now, next = __atomic_load_n(&tcl_next_sweep, __ATOMIC_RELAXED);
	struct tcl_shard *s;

	if (sec < next ||
	    !__atomic_compare_exchange_n(&tcl_next_sweep, &next, sec + 1, false, __ATOMIC_RELAXED,
					 __ATOMIC_RELAXED))
		return;
	s = &tcl[__atomic_fetch_add(&tcl_cursor, 1, __ATOMIC_RELAXED) % TCL_SHARDS];
	ck_spinlock_lock(&s->lock);
	tcl_sweep(s, now, rate_window(cfg));
	ck_spinlock_unlock(&s->lock);
}

size_t
dlb_tcp_clients_count(void)
{
	size_t n = 0;

	for (unsigned i = 0; i < TCL_SHARDS; i++)
		n += dlb_hashtab_count_relaxed(&tcl[i].t);
	return n;
}

size_t
dlb_tcp_clients_memory(void)
{
	size_t n = 0;

	for (unsigned i = 0; i < TCL_SHARDS; i++) {
		ck_spinlock_lock(&tcl[i].lock);
		n += dlb_hashtab_memory(&tcl[i].t);
		ck_spinlock_unlock(&tcl[i].lock);
	}
	return n;
}

void
dlb_tcp_clients_reset(void)
{
	for (unsigned i = 0; i < TCL_SHARDS; i++) {
		ck_spinlock_lock(&tcl[i].lock);
		dlb_hashtab_clear(&tcl[i].t);
		ck_spinlock_unlock(&tcl[i].lock);
	}
	__atomic_store_n(&tcl_next_sweep, 0, __ATOMIC_RELAXED);
}

/* ---- per-client outstanding queries ---------------------------------------------- */

#define COC_MIN_SLOTS 64u

struct coc_ent {
	uint64_t k0, k1;	/* the masked address */
	uint32_t count;		/* queries in flight (> 0) */
	uint32_t tag;		/* the table's */
};

_Static_assert(sizeof(struct coc_ent) == DLB_COC_ENTRY_BYTES, "entry size");

struct dlb_coc {
	struct dlb_hashtab t;	/* of struct coc_ent: the subnets; no slots until the first acquire */
	uint64_t total;		/* queries in flight, all subnets */
	int v4mask, v6mask;
};

struct dlb_coc *
dlb_coc_new(int v4mask, int v6mask)
{
	struct dlb_coc *t = calloc(1, sizeof(*t));

	if (t == NULL)
		return NULL;
	pthread_once(&seed_once, seed_init);
	dlb_hashtab_init(&t->t, sizeof(struct coc_ent), offsetof(struct coc_ent, tag), COC_MIN_SLOTS,
			 DLB_COC_MAX_SLOTS);
	t->v4mask = v4mask < 0 ? 0 : v4mask > 32 ? 32 : v4mask;
	t->v6mask = v6mask < 0 ? 0 : v6mask > 128 ? 128 : v6mask;
	return t;
}

void
dlb_coc_free(struct dlb_coc *t)
{
	if (t == NULL)
		return;
	dlb_hashtab_deinit(&t->t);
	free(t);
}

static bool
coc_eq(const void *e, const void *key)
{
	const struct coc_ent *a = e, *b = key;

	return a->k1 == b->k1 && a->k0 == b->k0;
}

/* The entry of @sa's subnet, with its hash in *@h and key in *@key; NULL when none. */
static struct coc_ent *
coc_find(const struct dlb_coc *t, const struct sockaddr *sa, struct coc_ent *key, uint64_t *h,
	 bool *tracked)
{
	*tracked = make_key(sa, t->v4mask, t->v6mask, &key->k0, &key->k1);
	if (!*tracked)
		return NULL;
	*h = key_hash(key->k0, key->k1);
	return DLB_HASHTAB_FIND(&t->t, *h, struct coc_ent, tag, coc_eq, key);
}

enum dlb_coc_result
dlb_coc_acquire(struct dlb_coc *t, const struct sockaddr *sa, uint32_t max)
{
	struct coc_ent key, *e;
	uint64_t h = 0;
	bool tracked;

	e = coc_find(t, sa, &key, &h, &tracked);
	if (!tracked)
		return DLB_COC_UNTRACKED;
	if (e != NULL) {
		if (e->count >= max)
			return DLB_COC_OVER;
		e->count++;
		t->total++;
		return DLB_COC_ACQUIRED;
	}
	if (max == 0)
		return DLB_COC_OVER;
	e = dlb_hashtab_add(&t->t, h);
	if (e == NULL)
		return DLB_COC_UNTRACKED;	/* full: fail open */
	e->k0 = key.k0;
	e->k1 = key.k1;
	e->count = 1;
	t->total++;
	return DLB_COC_ACQUIRED;
}

void
dlb_coc_release(struct dlb_coc *t, const struct sockaddr *sa)
{
	struct coc_ent key, *e;
	uint64_t h = 0;
	bool tracked;

	e = coc_find(t, sa, &key, &h, &tracked);
	if (!tracked)
		return;
	if (e == NULL) {
		dlb_log_ratelimited(DLB_LOG_ERR, "per-client outstanding count released twice");
		return;
	}
	t->total--;
	if (--e->count > 0)
		return;
	dlb_hashtab_remove(&t->t, e);
	/* give memory back after a flood (hysteresis: grow at 1/2, shrink at 1/8) */
	dlb_hashtab_shrink(&t->t);
}

uint32_t
dlb_coc_get(const struct dlb_coc *t, const struct sockaddr *sa)
{
	struct coc_ent key;
	const struct coc_ent *e;
	uint64_t h = 0;
	bool tracked;

	e = coc_find(t, sa, &key, &h, &tracked);
	return e != NULL ? e->count : 0;
}

uint32_t
dlb_coc_clients(const struct dlb_coc *t)
{
	return dlb_hashtab_count(&t->t);
}

uint64_t
dlb_coc_total(const struct dlb_coc *t)
{
	return t->total;
}

size_t
dlb_coc_memory(const struct dlb_coc *t)
{
	return sizeof(*t) + dlb_hashtab_memory(&t->t);
}

int
dlb_coc_check(const struct dlb_coc *t)
{
	uint64_t total = 0;

	if (dlb_hashtab_check(&t->t) != 0)
		return -1;
	for (uint32_t i = 0; i < dlb_hashtab_slots(&t->t); i++) {
		const struct coc_ent *e = dlb_hashtab_at(&t->t, i);

		if (e == NULL)
			continue;
		if (e->count == 0 || e->tag != dlb_hashtab_tag(key_hash(e->k0, e->k1)))
			return -1;
		total += e->count;
	}
	return total == t->total ? 0 : -1;
}

/* ---- the worker's side ------------------------------------------------------------ */

static int oc_debug = -1;	/* DNSLB_CHECK_OUTSTANDING set: check at every acquire */

enum dlb_coc_result
dlb_oc_acquire(struct dlb_worker *w, const struct sockaddr *sa)
{
	const struct dlb_config *cfg = w->cfg;
	enum dlb_coc_result r;

	if (cfg->max_outstanding_per_client <= 0)
		return DLB_COC_UNTRACKED;
	if (w->client_oc == NULL) {
		w->client_oc = dlb_coc_new(cfg->oc_mask_v4, cfg->oc_mask_v6);
		if (w->client_oc == NULL)
			return DLB_COC_UNTRACKED;
		if (oc_debug < 0)
			oc_debug = getenv("DNSLB_CHECK_OUTSTANDING") != NULL;
	}
	if (oc_debug > 0 && dlb_oc_check_worker(w, dlb_tcp_up_oc_marked(w) + dlb_doh_up_oc_marked(w)) != 0)
		abort();	/* a test asked for it: fail loudly */
	r = dlb_coc_acquire(w->client_oc, sa, (uint32_t)cfg->max_outstanding_per_client);
	if (r == DLB_COC_OVER)
		w->stats.client_outstanding_exceeded++;
	return r;
}

void
dlb_oc_release(struct dlb_worker *w, struct dlb_slot *s)
{
	if (!s->client_counted)
		return;
	s->client_counted = 0;
	if (w->client_oc != NULL)
		dlb_coc_release(w->client_oc, &s->client.peer.sa);
}

int
dlb_oc_check_worker(const struct dlb_worker *w, uint64_t tcp_marked)
{
	uint64_t marked = tcp_marked;

	for (int i = 0; i < w->nshared; i++) {
		uint32_t idx = dlb_inflight_oldest(&w->shared[i]->table);

		while (idx != DLB_SLOT_NONE) {
			const struct dlb_slot *s = dlb_slot_get(&w->slots, idx);

			marked += s->client_counted;
			idx = s->next;
		}
	}
	for (int b = 0; b < w->nbe; b++) {
		const struct dlb_be_local *bl = &w->be[b];

		for (int i = 0; i < bl->nsocks; i++) {
			uint32_t idx = dlb_inflight_oldest(&bl->socks[i].table);

			while (idx != DLB_SLOT_NONE) {
				const struct dlb_slot *s = dlb_slot_get(&w->slots, idx);

				marked += s->client_counted;
				idx = s->next;
			}
		}
	}
	if (w->client_oc == NULL)
		return marked == 0 ? 0 : -1;
	if (dlb_coc_check(w->client_oc) != 0 || dlb_coc_total(w->client_oc) != marked) {
		dlb_err("worker %d: per-client outstanding counts (%llu) differ from the queries "
			"in flight that hold one (%llu)", w->id,
			(unsigned long long)dlb_coc_total(w->client_oc), (unsigned long long)marked);
		return -1;
	}
	return 0;
}

void
dlb_oc_worker_free(struct dlb_worker *w)
{
	dlb_coc_free(w->client_oc);
	w->client_oc = NULL;
}
