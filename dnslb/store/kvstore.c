/*
 * kvstore.c - Redis-backed key-value stores mirrored in memory (kvstore.h,
 * docs/fleet.md "Redis-backed lookup rules").
 *
 * The map is built once and then only read, so it needs no locks and no
 * tombstones: a change in Redis makes a whole new map (an SSCAN/HSCAN walk,
 * a few milliseconds of main-thread work per reply of scan_count members),
 * which replaces the old one with one atomic store. Memory: 8-octet slots
 * at a load between 3/8 and 3/4, plus each entry in the arena (1 or 2
 * length octets and the key; for a hash, the value and its length too):
 * 35.8 octets a name for 1,000,000 names like "domain0000123.com."
 * (perf/bench_kvstore.c measures it; docs/fleet.md has the figures).
 *
 * The module keeps its own Redis connections (role "kvstore" for the scans,
 * "kvstore-sub" for the notifications, 8 channels each) rather than
 * setRedis's control and pub/sub ones: a long mirror then never delays the
 * fleet's control commands, and reconnect callbacks are ours alone. They
 * are made only when a store exists.
 *
 * Thread: see kvstore.h. The registry, the scans and the timers belong to
 * the main thread; refs is atomic because a worker state's GC may drop the
 * last Lua reference; maps and dead stores are freed through the epoch.
 */
#include "dnslb/store/kvstore.h"

#include <ck_epoch.h>
#include <ev.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "dnslb/core/dnslb.h"
#include "dnslb/core/hash.h"
#include "dnslb/core/log.h"
#include "dnslb/core/rcu.h"
#include "dnslb/store/redis.h"

#define KV_CHANS_PER_CONN	8	/* redis.c subscribes at most 8 channels a connection */
#define KV_MAX_SUBS		16	/* subscriber connections: 128 channels */
#define KV_KICK_DELAY		0.05	/* s: requests closer than this make one mirror */
#define KV_TICK			1.0	/* s: periodic refreshes, retries, reaping */
#define KV_SCAN_TIMEOUT_MIN	2.0	/* s: one SSCAN/HSCAN reply, at least */
#define KV_RETRY_MIN		1.0	/* s: first retry after a failed mirror */

/* ---- the map ----------------------------------------------------------------- */

/* A slot: the key's hash (high 32 bits) beside its entry's arena offset + 1 (0: empty). */
struct kv_slot {
	uint32_t hash;
	uint32_t off;
};

struct dlb_kvmap {
	ck_epoch_entry_t epoch;		/* retirement (dlb_kvstore_publish) */
	struct kv_slot *slots;		/* [mask + 1], or NULL while empty */
	size_t mask;
	size_t n;			/* entries */
	uint8_t *arena;			/* entries: len key [len value] */
	size_t used, cap;
	uint64_t seed;
	bool values;			/* a hash: entries carry values */
};

static uint64_t
kv_seed(void)
{
	static uint64_t seed;		/* per process: clients cannot aim at a probe sequence */
	uint64_t s = __atomic_load_n(&seed, __ATOMIC_RELAXED);

	if (s == 0) {
		if (getrandom(&s, sizeof(s), 0) != (ssize_t)sizeof(s))
			s = (uint64_t)(uintptr_t)&seed ^ 0x9e3779b97f4a7c15ULL;
		s |= 1;
		__atomic_store_n(&seed, s, __ATOMIC_RELAXED);
	}
	return s;
}

/* A length: 1 octet below 128, else 2 (big-endian, high bit set); lengths < 32768. */
static size_t
len_put(uint8_t *p, size_t n)
{
	if (n < 0x80) {
		p[0] = (uint8_t)n;
		return 1;
	}
	p[0] = (uint8_t)(0x80 | (n >> 8));
	p[1] = (uint8_t)n;
	return 2;
}

static const uint8_t *
len_get(const uint8_t *p, size_t *n)
{
	if (p[0] < 0x80) {
		*n = p[0];
		return p + 1;
	}
	*n = (size_t)(p[0] & 0x7f) << 8 | p[1];
	return p + 2;
}

struct dlb_kvmap *
dlb_kvmap_new(bool with_values)
{
	struct dlb_kvmap *m = calloc(1, sizeof(*m));

	if (m == NULL)
		return NULL;
	m->values = with_values;
	m->seed = kv_seed();
	return m;
}

void
dlb_kvmap_free(struct dlb_kvmap *m)
{
	if (m == NULL)
		return;
	free(m->slots);
	free(m->arena);
	free(m);
}

/* The entry at arena offset @off: its key, and its value (a set: the key). */
static void
entry_at(const struct dlb_kvmap *m, uint32_t off, const uint8_t **k, size_t *kl,
	 const uint8_t **v, size_t *vl)
{
	const uint8_t *p = len_get(m->arena + off - 1, kl);

	*k = p;
	if (m->values) {
		*v = len_get(p + *kl, vl);
	} else {
		*v = p;
		*vl = *kl;
	}
}

/* The slot holding @key, or the empty slot that ends its probe sequence. */
static size_t
slot_find(const struct dlb_kvmap *m, const void *key, size_t klen, uint64_t h)
{
	uint32_t tag = (uint32_t)(h >> 32);
	size_t i = (size_t)h & m->mask;

	for (;; i = (i + 1) & m->mask) {
		const struct kv_slot *s = &m->slots[i];
		const uint8_t *k, *v;
		size_t kl, vl;

		if (s->off == 0)
			return i;
		if (s->hash != tag)
			continue;
		entry_at(m, s->off, &k, &kl, &v, &vl);
		if (kl == klen && memcmp(k, key, klen) == 0)
			return i;
	}
}

static int
map_grow(struct dlb_kvmap *m)
{
	size_t cap = m->slots != NULL ? (m->mask + 1) * 2 : 64;
	struct kv_slot *v = calloc(cap, sizeof(*v));

	if (v == NULL)
		return DLB_ENOMEM;
	for (size_t i = 0; m->slots != NULL && i <= m->mask; i++) {
		const struct kv_slot *s = &m->slots[i];
		const uint8_t *k, *val;
		size_t kl, vl, j;

		if (s->off == 0)
			continue;
		/* the full hash again: the slot keeps only its high half */
		entry_at(m, s->off, &k, &kl, &val, &vl);
		for (j = (size_t)dlb_hash_bytes(k, kl, m->seed) & (cap - 1); v[j].off != 0;
		     j = (j + 1) & (cap - 1))
			;
		v[j] = *s;
	}
	free(m->slots);
	m->slots = v;
	m->mask = cap - 1;
	return DLB_OK;
}

/* Append an entry to the arena. @return its offset + 1, or 0 on ENOMEM / arena full. */
static uint32_t
arena_add(struct dlb_kvmap *m, const void *key, size_t klen, const void *val, size_t vlen)
{
	size_t need = 2 + klen + (m->values ? 2 + vlen : 0), off;

	if (m->used + need > UINT32_MAX - 1)
		return 0;
	if (m->used + need > m->cap) {
		size_t cap = m->cap != 0 ? m->cap : 4096;
		uint8_t *a;

		while (cap < m->used + need)
			cap *= 2;
		a = realloc(m->arena, cap);
		if (a == NULL)
			return 0;
		m->arena = a;
		m->cap = cap;
	}
	off = m->used;
	m->used += len_put(m->arena + m->used, klen);
	memcpy(m->arena + m->used, key, klen);
	m->used += klen;
	if (m->values) {
		m->used += len_put(m->arena + m->used, vlen);
		if (vlen > 0)
			memcpy(m->arena + m->used, val, vlen);
		m->used += vlen;
	}
	return (uint32_t)off + 1;
}

int
dlb_kvmap_put(struct dlb_kvmap *m, const void *key, size_t klen, const void *val, size_t vlen)
{
	uint64_t h;
	size_t i;
	uint32_t off;

	if (klen == 0 || klen > DLB_KVMAP_KEY_MAX || (m->values && vlen > DLB_KVMAP_VALUE_MAX))
		return DLB_EINVAL;
	if ((m->slots == NULL || (m->n + 1) * 4 > (m->mask + 1) * 3) && map_grow(m) != DLB_OK)
		return DLB_ENOMEM;
	h = dlb_hash_bytes(key, klen, m->seed);
	i = slot_find(m, key, klen, h);
	if (m->slots[i].off != 0) {
		const uint8_t *k, *v;
		size_t kl, vl;

		/* a set member seen twice (SSCAN may repeat), or a hash value unchanged */
		entry_at(m, m->slots[i].off, &k, &kl, &v, &vl);
		if (!m->values || (vl == vlen && memcmp(v, val, vlen) == 0))
			return DLB_OK;
		/* a new value: a new entry (the old bytes stay until the map goes) */
		off = arena_add(m, key, klen, val, vlen);
		if (off == 0)
			return DLB_ENOMEM;
		m->slots[i].off = off;
		return DLB_OK;
	}
	off = arena_add(m, key, klen, val, vlen);
	if (off == 0)
		return DLB_ENOMEM;
	m->slots[i].hash = (uint32_t)(h >> 32);
	m->slots[i].off = off;
	m->n++;
	return DLB_OK;
}

int
dlb_kvmap_reserve(struct dlb_kvmap *m, size_t n, size_t bytes)
{
	size_t cap = 64;
	uint8_t *a;

	if (m->slots != NULL || m->arena != NULL)
		return DLB_OK;
	while (cap * 3 < n * 4 + 4)
		cap *= 2;
	m->slots = calloc(cap, sizeof(*m->slots));
	if (m->slots == NULL)
		return DLB_ENOMEM;
	m->mask = cap - 1;
	if (bytes > 0 && bytes < UINT32_MAX) {
		a = malloc(bytes);
		if (a != NULL) {
			m->arena = a;
			m->cap = bytes;
		}
	}
	return DLB_OK;
}

void
dlb_kvmap_seal(struct dlb_kvmap *m)
{
	uint8_t *a;

	if (m->used == 0 || m->used == m->cap)
		return;
	a = realloc(m->arena, m->used);
	if (a != NULL) {
		m->arena = a;
		m->cap = m->used;
	}
}

bool
dlb_kvmap_get(const struct dlb_kvmap *m, const void *key, size_t klen, const uint8_t **val,
	      size_t *vlen)
{
	const uint8_t *k, *v;
	size_t i, kl, vl;

	if (m == NULL || m->n == 0 || klen == 0)
		return false;
	i = slot_find(m, key, klen, dlb_hash_bytes(key, klen, m->seed));
	if (m->slots[i].off == 0)
		return false;
	entry_at(m, m->slots[i].off, &k, &kl, &v, &vl);
	if (val != NULL)
		*val = v;
	if (vlen != NULL)
		*vlen = vl;
	return true;
}

bool
dlb_kvmap_has_values(const struct dlb_kvmap *m)
{
	return m != NULL && m->values;
}

size_t
dlb_kvmap_count(const struct dlb_kvmap *m)
{
	return m != NULL ? m->n : 0;
}

size_t
dlb_kvmap_memory(const struct dlb_kvmap *m)
{
	if (m == NULL)
		return 0;
	return sizeof(*m) + m->cap + (m->slots != NULL ? (m->mask + 1) * sizeof(struct kv_slot) : 0);
}

static void
map_free_cb(ck_epoch_entry_t *e)
{
	dlb_kvmap_free((struct dlb_kvmap *)(void *)((char *)e - offsetof(struct dlb_kvmap, epoch)));
}

/* ---- stores -------------------------------------------------------------------- */

/* One worker's lookup counters, alone on their cache line. */
struct kv_ctr {
	uint64_t lookups, hits;
	char pad[48];
};

struct dlb_kvstore {
	struct dlb_kvmap *map;		/* published (atomic pointer) */
	struct kv_ctr *ctr;		/* [DLB_MAX_WORKERS + 1]: per worker, the last for others */
	int refs;			/* atomic */
	struct dlb_kvstore_opts o;
	struct dlb_kvstore *next;	/* the registry */
	ck_epoch_entry_t epoch;		/* a reaped store's retirement */
	/* mirroring (main thread) */
	bool dirty;			/* a mirror is wanted */
	bool scanning;
	struct dlb_kvmap *build;	/* the map being built */
	char cursor[32];
	double scan_start, next_refresh, retry_at, backoff;
	uint64_t build_skipped;
	/* figures (main thread) */
	uint64_t refreshes, refresh_errors, notifications, skipped;
	double last_ok, last_duration;
	char last_error[128];
};

static struct {
	struct dlb_kvstore *stores;
	struct ev_loop *loop;
	struct dlb_rcu_thread *rt;
	bool running;				/* atomic: dlb_kvstore_unref reads it anywhere */
	pthread_t main;				/* the thread that makes stores */
	bool main_known;
	struct dlb_redis *cmd;			/* SSCAN / HSCAN */
	struct dlb_redis *subs[KV_MAX_SUBS];	/* notifications */
	int nsubs, last_chans;			/* channels on subs[nsubs - 1] */
	char (*chans)[128];			/* channels subscribed so far */
	size_t nchans, capchans;
	ev_timer tick, kick;
	struct dlb_kvstore_stats gone;		/* the figures of stores freed */
} kv;

void
dlb_kvstore_opts_init(struct dlb_kvstore_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->type = DLB_KVS_SET;
	o->keyspace = true;
	o->refresh = 60;
	o->scan_count = 10000;
}

const struct dlb_kvmap *
dlb_kvstore_map(const struct dlb_kvstore *s)
{
	return __atomic_load_n(&s->map, __ATOMIC_ACQUIRE);
}

const struct dlb_kvstore_opts *
dlb_kvstore_opts(const struct dlb_kvstore *s)
{
	return &s->o;
}

void
dlb_kvstore_count(struct dlb_kvstore *s, int worker, bool hit)
{
	struct kv_ctr *c = &s->ctr[(unsigned)worker < DLB_MAX_WORKERS ? worker : DLB_MAX_WORKERS];

	/* one writer per slot but for the spare one: plain read-modify-write, relaxed */
	__atomic_store_n(&c->lookups, __atomic_load_n(&c->lookups, __ATOMIC_RELAXED) + 1,
			 __ATOMIC_RELAXED);
	if (hit)
		__atomic_store_n(&c->hits, __atomic_load_n(&c->hits, __ATOMIC_RELAXED) + 1,
				 __ATOMIC_RELAXED);
}

void
dlb_kvstore_publish(struct dlb_kvstore *s, struct dlb_kvmap *m, struct dlb_rcu_thread *rt)
{
	struct dlb_kvmap *old = s->map;

	__atomic_store_n(&s->map, m, __ATOMIC_RELEASE);
	if (old == NULL)
		return;
	if (rt != NULL)
		dlb_rcu_defer(rt, &old->epoch, map_free_cb);
	else
		dlb_kvmap_free(old);
}

static void
add_stats(struct dlb_kvstore_stats *sum, const struct dlb_kvstore_stats *st)
{
	sum->lookups += st->lookups;
	sum->hits += st->hits;
	sum->refreshes += st->refreshes;
	sum->refresh_errors += st->refresh_errors;
	sum->notifications += st->notifications;
	sum->skipped += st->skipped;
	sum->entries += st->entries;
	sum->memory += st->memory;
}

void
dlb_kvstore_get_stats(const struct dlb_kvstore *s, struct dlb_kvstore_stats *out)
{
	const struct dlb_kvmap *m = dlb_kvstore_map(s);

	memset(out, 0, sizeof(*out));
	for (int i = 0; i <= DLB_MAX_WORKERS; i++) {
		out->lookups += __atomic_load_n(&s->ctr[i].lookups, __ATOMIC_RELAXED);
		out->hits += __atomic_load_n(&s->ctr[i].hits, __ATOMIC_RELAXED);
	}
	out->refreshes = s->refreshes;
	out->refresh_errors = s->refresh_errors;
	out->notifications = s->notifications;
	out->skipped = s->skipped;
	out->entries = dlb_kvmap_count(m);
	out->memory = dlb_kvmap_memory(m);
	out->last_ok = s->last_ok;
	out->age = s->last_ok > 0 && kv.loop != NULL ? ev_now(kv.loop) - s->last_ok : -1;
	out->last_duration = s->last_duration;
	out->mirroring = s->scanning;
	snprintf(out->last_error, sizeof(out->last_error), "%s", s->last_error);
}

void
dlb_kvstore_totals(struct dlb_kvstore_stats *out)
{
	*out = kv.gone;
	out->entries = out->memory = 0;	/* gauges: the live stores only */
	for (const struct dlb_kvstore *s = kv.stores; s != NULL; s = s->next) {
		struct dlb_kvstore_stats st;

		dlb_kvstore_get_stats(s, &st);
		add_stats(out, &st);
	}
}

void
dlb_kvstore_visit(dlb_kvstore_visit_fn *fn, void *ud)
{
	for (struct dlb_kvstore *s = kv.stores; s != NULL; s = s->next)
		if (__atomic_load_n(&s->refs, __ATOMIC_ACQUIRE) > 0)
			fn(s, ud);
}

static void
store_free(struct dlb_kvstore *s)
{
	dlb_kvmap_free(s->map);
	dlb_kvmap_free(s->build);
	free(s->ctr);
	free(s);
}

static void
store_free_cb(ck_epoch_entry_t *e)
{
	store_free((struct dlb_kvstore *)(void *)((char *)e - offsetof(struct dlb_kvstore, epoch)));
}

/* Unlink @s from the registry, keep its figures, free it (now, or after the epoch). */
static void
store_reap(struct dlb_kvstore *s)
{
	struct dlb_kvstore_stats st;

	for (struct dlb_kvstore **pp = &kv.stores; *pp != NULL; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	dlb_kvstore_get_stats(s, &st);
	add_stats(&kv.gone, &st);
	if (kv.running && kv.rt != NULL)
		dlb_rcu_defer(kv.rt, &s->epoch, store_free_cb);
	else
		store_free(s);
}

void
dlb_kvstore_ref(struct dlb_kvstore *s)
{
	__atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
}

void
dlb_kvstore_unref(struct dlb_kvstore *s)
{
	if (s == NULL || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) > 0)
		return;
	/*
	 * Running, or on another thread (a worker state's GC): the main thread's
	 * tick, or dlb_kvstore_stop, reaps it. Otherwise (config check, shutdown,
	 * tests) now.
	 */
	if (!__atomic_load_n(&kv.running, __ATOMIC_ACQUIRE) && kv.main_known &&
	    pthread_equal(pthread_self(), kv.main))
		store_reap(s);
}

/* ---- mirroring ------------------------------------------------------------------ */

static void scan_send(struct dlb_kvstore *s);

static void
kick(void)
{
	if (!kv.running || ev_is_active(&kv.kick))
		return;
	ev_timer_set(&kv.kick, KV_KICK_DELAY, 0.);
	ev_timer_start(kv.loop, &kv.kick);
}

static void
keyspace_channel(const struct dlb_kvstore *s, char *out, size_t outsz)
{
	snprintf(out, outsz, "__keyspace@%d__:%s", dlb_redis_settings.db, s->o.key);
}

static void
on_message(const char *channel, const char *payload, size_t len, void *ud)
{
	char ks[256];

	for (struct dlb_kvstore *s = kv.stores; s != NULL; s = s->next) {
		keyspace_channel(s, ks, sizeof(ks));
		if ((s->o.keyspace && strcmp(channel, ks) == 0) ||
		    (s->o.channel[0] != '\0' && strcmp(channel, s->o.channel) == 0)) {
			s->notifications++;
			s->dirty = true;
			s->retry_at = 0;
		}
	}
	kick();
}

/* A (re)connection: notifications may have been missed, mirror everything again. */
static void
on_up(struct dlb_redis *r, void *ud)
{
	for (struct dlb_kvstore *s = kv.stores; s != NULL; s = s->next) {
		s->dirty = true;
		s->retry_at = 0;
		s->backoff = 0;
	}
	kick();
}

static void
subscribe(const char *channel)
{
	struct dlb_redis *r;

	for (size_t i = 0; i < kv.nchans; i++)
		if (strcmp(kv.chans[i], channel) == 0)
			return;
	if (strlen(channel) >= sizeof(kv.chans[0])) {
		dlb_warn("KVStore: channel '%s' is too long to subscribe to; the store relies on "
			 "its periodic refresh", channel);
		return;
	}
	if (kv.nchans == kv.capchans) {
		size_t cap = kv.capchans != 0 ? kv.capchans * 2 : 8;
		char (*v)[128] = realloc(kv.chans, cap * sizeof(*v));

		if (v == NULL)
			return;
		kv.chans = v;
		kv.capchans = cap;
	}
	if (kv.nsubs == 0 || kv.last_chans == KV_CHANS_PER_CONN) {
		if (kv.nsubs == KV_MAX_SUBS) {
			dlb_warn("KVStore: too many channels; '%s' relies on the periodic refresh",
				 channel);
			return;
		}
		r = dlb_redis_new(kv.loop, "kvstore-sub");
		if (r == NULL)
			return;
		dlb_redis_on_up(r, on_up, NULL);
		dlb_redis_start(r);
		kv.subs[kv.nsubs++] = r;
		kv.last_chans = 0;
	}
	r = kv.subs[kv.nsubs - 1];
	if (dlb_redis_subscribe(r, channel, on_message, NULL) != 0)
		return;
	kv.last_chans++;
	snprintf(kv.chans[kv.nchans++], sizeof(kv.chans[0]), "%s", channel);
}

/* The module's connections and @s's subscriptions (running, with setRedis). */
static void
store_attach(struct dlb_kvstore *s)
{
	char ks[256];

	if (!kv.running || !dlb_redis_settings.enabled)
		return;
	if (kv.cmd == NULL) {
		kv.cmd = dlb_redis_new(kv.loop, "kvstore");
		if (kv.cmd == NULL)
			return;
		dlb_redis_on_up(kv.cmd, on_up, NULL);
		dlb_redis_start(kv.cmd);
	}
	if (s->o.keyspace) {
		keyspace_channel(s, ks, sizeof(ks));
		subscribe(ks);
	}
	if (s->o.channel[0] != '\0')
		subscribe(s->o.channel);
	s->dirty = true;
	kick();
}

struct dlb_kvstore *
dlb_kvstore_get(const struct dlb_kvstore_opts *o)
{
	struct dlb_kvstore *s;

	if (!kv.main_known) {
		kv.main = pthread_self();
		kv.main_known = true;
	}
	for (s = kv.stores; s != NULL; s = s->next) {
		if (strcmp(s->o.name, o->name) == 0 && s->o.type == o->type &&
		    strcmp(s->o.key, o->key) == 0 && strcmp(s->o.channel, o->channel) == 0 &&
		    s->o.keyspace == o->keyspace) {
			s->o.refresh = o->refresh;
			s->o.scan_count = o->scan_count;
			dlb_kvstore_ref(s);
			return s;
		}
	}
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return NULL;
	s->ctr = aligned_alloc(64, sizeof(struct kv_ctr) * (DLB_MAX_WORKERS + 1));
	if (s->ctr == NULL) {
		free(s);
		return NULL;
	}
	memset(s->ctr, 0, sizeof(struct kv_ctr) * (DLB_MAX_WORKERS + 1));
	s->o = *o;
	s->refs = 1;
	s->next = kv.stores;
	kv.stores = s;
	store_attach(s);
	return s;
}

void
dlb_kvstore_reload(struct dlb_kvstore *s)
{
	s->dirty = true;
	s->retry_at = 0;
	kick();
}

static double
loop_now(void)
{
	return kv.loop != NULL ? ev_now(kv.loop) : 0;
}

static void
scan_fail(struct dlb_kvstore *s, const char *why)
{
	double now = loop_now(), cap = s->o.refresh > KV_RETRY_MIN ? s->o.refresh : KV_RETRY_MIN;

	dlb_kvmap_free(s->build);
	s->build = NULL;
	s->scanning = false;
	s->refresh_errors++;
	snprintf(s->last_error, sizeof(s->last_error), "%s", why);
	s->dirty = true;
	s->backoff = s->backoff > 0 ? (s->backoff * 2 < cap ? s->backoff * 2 : cap) : KV_RETRY_MIN;
	s->retry_at = now + s->backoff;
	if (kv.running)
		dlb_log_ratelimited(DLB_LOG_WARN,
				    "KVStore %s: mirroring Redis key '%s' failed: %s (keeping %zu "
				    "entries)", s->o.name, s->o.key, why,
				    dlb_kvmap_count(dlb_kvstore_map(s)));
}

static void
scan_done(struct dlb_kvstore *s)
{
	double now = loop_now();

	dlb_kvmap_seal(s->build);
	dlb_kvstore_publish(s, s->build, kv.rt);
	s->build = NULL;
	s->scanning = false;
	s->refreshes++;
	s->skipped = s->build_skipped;
	s->last_ok = now;
	s->last_duration = now - s->scan_start;
	s->last_error[0] = '\0';
	s->backoff = 0;
	s->next_refresh = now + s->o.refresh;
	if (s->build_skipped > 0)
		dlb_log_ratelimited(DLB_LOG_WARN,
				    "KVStore %s: %llu members of '%s' are longer than %d octets "
				    "(values %d): skipped", s->o.name,
				    (unsigned long long)s->build_skipped, s->o.key,
				    DLB_KVMAP_KEY_MAX, DLB_KVMAP_VALUE_MAX);
	if (s->dirty)
		kick();
}

/* Add one reply's members (set) or field/value pairs (hash). @return 0 or DLB_ENOMEM. */
static int
scan_add(struct dlb_kvstore *s, const redisReply *list)
{
	bool hash = s->o.type == DLB_KVS_HASH;
	size_t step = hash ? 2 : 1;

	for (size_t i = 0; i + step <= list->elements; i += step) {
		const redisReply *k = list->element[i], *v = hash ? list->element[i + 1] : NULL;
		int rc;

		if (k->type != REDIS_REPLY_STRING || (v != NULL && v->type != REDIS_REPLY_STRING))
			continue;
		rc = dlb_kvmap_put(s->build, k->str, k->len, v != NULL ? v->str : NULL,
				   v != NULL ? v->len : 0);
		if (rc == DLB_ENOMEM)
			return rc;
		if (rc != DLB_OK)
			s->build_skipped++;
	}
	return DLB_OK;
}

static void
scan_cb(redisReply *reply, void *ud)
{
	struct dlb_kvstore *s = ud;
	const redisReply *cur, *list;

	if (!s->scanning)
		return;
	if (reply == NULL) {
		scan_fail(s, "no reply (Redis down, or timeout)");
		return;
	}
	if (reply->type == REDIS_REPLY_ERROR) {
		scan_fail(s, reply->str);
		return;
	}
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
	    reply->element[0]->type != REDIS_REPLY_STRING ||
	    reply->element[0]->len >= sizeof(s->cursor) ||
	    reply->element[1]->type != REDIS_REPLY_ARRAY) {
		scan_fail(s, "unexpected reply to a SCAN command");
		return;
	}
	cur = reply->element[0];
	list = reply->element[1];
	if (scan_add(s, list) != DLB_OK) {
		scan_fail(s, "out of memory");
		return;
	}
	memcpy(s->cursor, cur->str, cur->len);
	s->cursor[cur->len] = '\0';
	if (strcmp(s->cursor, "0") == 0)
		scan_done(s);
	else
		scan_send(s);
}

static void
scan_send(struct dlb_kvstore *s)
{
	char count[16];
	const char *argv[5];
	size_t lens[5];
	double t = dlb_redis_settings.command_timeout;

	if (t < KV_SCAN_TIMEOUT_MIN)
		t = KV_SCAN_TIMEOUT_MIN;
	snprintf(count, sizeof(count), "%u", s->o.scan_count);
	argv[0] = s->o.type == DLB_KVS_HASH ? "HSCAN" : "SSCAN";
	argv[1] = s->o.key;
	argv[2] = s->cursor;
	argv[3] = "COUNT";
	argv[4] = count;
	for (int i = 0; i < 5; i++)
		lens[i] = strlen(argv[i]);
	if (kv.cmd == NULL || dlb_redis_command(kv.cmd, scan_cb, s, t, 5, argv, lens) != 0)
		scan_fail(s, "Redis is not connected");
}

static void
scan_start(struct dlb_kvstore *s)
{
	const struct dlb_kvmap *cur = dlb_kvstore_map(s);

	s->build = dlb_kvmap_new(s->o.type == DLB_KVS_HASH);
	s->dirty = false;
	if (s->build == NULL) {
		s->refresh_errors++;
		return;
	}
	/* a new mirror is most often the size of the last one: no rehash, no arena copies */
	if (cur != NULL)
		(void)dlb_kvmap_reserve(s->build, cur->n + cur->n / 16, cur->used + cur->used / 16);
	s->scanning = true;
	s->scan_start = loop_now();
	s->build_skipped = 0;
	snprintf(s->cursor, sizeof(s->cursor), "0");
	scan_send(s);
}

/* Start the mirrors that are wanted and due. */
static void
run(void)
{
	double now = loop_now();

	for (struct dlb_kvstore *s = kv.stores; s != NULL; s = s->next) {
		if (s->scanning || !s->dirty || now < s->retry_at ||
		    __atomic_load_n(&s->refs, __ATOMIC_ACQUIRE) == 0)
			continue;
		scan_start(s);
	}
}

static void
kick_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	run();
}

static void
tick_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	double now = ev_now(loop);
	struct dlb_kvstore *s = kv.stores, *next;

	for (; s != NULL; s = next) {
		next = s->next;
		if (__atomic_load_n(&s->refs, __ATOMIC_ACQUIRE) == 0) {
			if (!s->scanning)
				store_reap(s);
			continue;
		}
		if (!s->scanning && s->o.refresh > 0 && now >= s->next_refresh)
			s->dirty = true;
	}
	run();
}

int
dlb_kvstore_start(struct ev_loop *loop, struct dlb_rcu_thread *rt)
{
	kv.loop = loop;
	kv.rt = rt;
	kv.main = pthread_self();
	kv.main_known = true;
	__atomic_store_n(&kv.running, true, __ATOMIC_RELEASE);
	ev_init(&kv.kick, kick_cb);
	ev_timer_init(&kv.tick, tick_cb, KV_TICK, KV_TICK);
	ev_timer_start(loop, &kv.tick);
	for (struct dlb_kvstore *s = kv.stores; s != NULL; s = s->next)
		store_attach(s);
	return 0;
}

void
dlb_kvstore_stop(void)
{
	struct dlb_kvstore *s, *next;

	if (!kv.running)
		return;
	__atomic_store_n(&kv.running, false, __ATOMIC_RELEASE);
	ev_timer_stop(kv.loop, &kv.tick);
	ev_timer_stop(kv.loop, &kv.kick);
	/* pending scans get their callback (NULL) now: they fail and free their build */
	dlb_redis_free(kv.cmd);
	kv.cmd = NULL;
	for (int i = 0; i < kv.nsubs; i++)
		dlb_redis_free(kv.subs[i]);
	kv.nsubs = 0;
	kv.last_chans = 0;
	free(kv.chans);
	kv.chans = NULL;
	kv.nchans = kv.capchans = 0;
	for (s = kv.stores; s != NULL; s = next) {
		next = s->next;
		if (__atomic_load_n(&s->refs, __ATOMIC_ACQUIRE) == 0)
			store_reap(s);
	}
	kv.loop = NULL;
	kv.rt = NULL;
}
