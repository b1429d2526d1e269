/*
 * kvstore.h - Redis-backed key-value stores for the rules (docs/fleet.md,
 * docs/fleet.md): KeyValueStoreLookupRule / KeyValueStoreLookupAction
 * read a Redis set or hash that every node mirrors in memory, so the query
 * path never waits on Redis.
 *
 * The map (struct dlb_kvmap): an immutable open-addressing hash table of
 * byte-string keys (set members, hash fields) to values (hash values; a set
 * has none). Slots are 8 octets {32 high bits of the key's XXH3, arena
 * offset}, load <= 3/4, linear probing; entries (lengths, key, value) sit
 * back to back in one arena. A lookup hashes the key once and compares
 * slot hashes before touching the arena: a miss reads one cache line of
 * slots. Built on the main thread, then published and only read.
 *
 * The store (struct dlb_kvstore): what newRedisKVStore{} made. The main
 * thread mirrors the Redis key into a new map, off to the side, with
 * SSCAN/HSCAN (COUNT scan_count) on a connection of this module's own
 * (role "kvstore"), one command in flight per store; when the cursor comes
 * back to 0 the new map replaces the published one with one atomic store
 * and the old one goes through the epoch (dlb_rcu_defer). A mirror is
 * started when the store is created, when a connection (re)connects, every
 * @refresh seconds, on a keyspace notification for the key
 * (__keyspace@<db>__:<key>, on subscriber connections of this module, role
 * "kvstore-sub") or a message on the store's own channel, and by
 * kvs:reload(); requests that arrive during a mirror make one more mirror
 * after it. A failed mirror keeps the published map and is retried with
 * backoff (1 s doubling up to @refresh).
 *
 * Identity: newRedisKVStore{} with the same name, type, key and channel
 * returns the same store (the config state, each worker state replaying
 * the config, a reload's new state), so a reload keeps the mirror.
 *
 * Threads: workers call dlb_kvstore_map()/dlb_kvmap_get()/
 * dlb_kvstore_count() inside their epoch section; dlb_kvstore_unref() may
 * run on any thread (a worker state's GC); everything else is main thread.
 */
#ifndef DNSLB_KVSTORE_H
#define DNSLB_KVSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ev_loop;
struct dlb_rcu_thread;

/* ---- the mirrored map ------------------------------------------------------- */

#define DLB_KVMAP_KEY_MAX	1024	/* longer members/fields are skipped (counted) */
#define DLB_KVMAP_VALUE_MAX	1024	/* longer hash values are skipped (counted) */

struct dlb_kvmap;

/** An empty map; @with_values: a hash (values kept), else a set. NULL on ENOMEM. */
struct dlb_kvmap *dlb_kvmap_new(bool with_values);
void dlb_kvmap_free(struct dlb_kvmap *m);
/**
 * Add or replace @key (its value @val: ignored for a set). Building only,
 * before the map is published. @return DLB_OK, DLB_EINVAL (empty, or over
 * the limits above) or DLB_ENOMEM.
 */
int dlb_kvmap_put(struct dlb_kvmap *m, const void *key, size_t klen, const void *val,
		  size_t vlen);
/**
 * Before the first put: room for @n entries and @bytes of arena, so that a
 * build of about that size never rehashes or moves the arena (a re-mirror
 * reserves the size of the map it replaces). @return DLB_OK or DLB_ENOMEM.
 */
int dlb_kvmap_reserve(struct dlb_kvmap *m, size_t n, size_t bytes);
/** Give the arena's spare room back (the end of a build). */
void dlb_kvmap_seal(struct dlb_kvmap *m);
/**
 * Is @key in @m (NULL: an empty map)? When found, *@val and *@vlen (if not
 * NULL) get its value: a hash field's value, a set member itself. Thread:
 * any (read only).
 */
bool dlb_kvmap_get(const struct dlb_kvmap *m, const void *key, size_t klen,
		   const uint8_t **val, size_t *vlen);
bool dlb_kvmap_has_values(const struct dlb_kvmap *m);
size_t dlb_kvmap_count(const struct dlb_kvmap *m);
/** Bytes held: slots + arena + the header (docs: memory per mirrored name). */
size_t dlb_kvmap_memory(const struct dlb_kvmap *m);

/* ---- stores ------------------------------------------------------------------ */

enum dlb_kvstore_type {
	DLB_KVS_SET = 0,	/* members are the keys; SSCAN */
	DLB_KVS_HASH,		/* fields are the keys, with values; HSCAN */
};

struct dlb_kvstore_opts {
	char name[64];			/* default: the key */
	enum dlb_kvstore_type type;
	char key[200];			/* the Redis key, used as is (no namespace) */
	char channel[120];		/* "" or a channel whose messages ask for a mirror */
	bool keyspace;			/* subscribe to __keyspace@<db>__:<key> (default true) */
	double refresh;			/* s between periodic mirrors (default 60) */
	unsigned scan_count;		/* SSCAN/HSCAN COUNT (default 10000) */
};

struct dlb_kvstore;

/** Defaults into @o (type set, keyspace on, refresh 60, count 10000). */
void dlb_kvstore_opts_init(struct dlb_kvstore_opts *o);

/**
 * The store named by @o (name, type, key, channel), found or made, with one
 * more reference; refresh and scan_count of a found one are updated. A new
 * store starts mirroring at once when the module runs (dlb_kvstore_start).
 * Main thread. @return NULL on ENOMEM.
 */
struct dlb_kvstore *dlb_kvstore_get(const struct dlb_kvstore_opts *o);
void dlb_kvstore_ref(struct dlb_kvstore *s);
/**
 * Drop a reference (any thread). At zero the store is freed at once when
 * the module does not run and this is the main thread, else by the main
 * thread's next tick (or dlb_kvstore_stop).
 */
void dlb_kvstore_unref(struct dlb_kvstore *s);

/** The published map (NULL before the first mirror). Thread: any, inside its epoch section. */
const struct dlb_kvmap *dlb_kvstore_map(const struct dlb_kvstore *s);

/** Count one lookup by @worker (-1 or out of range: the spare slot), and whether it hit. */
void dlb_kvstore_count(struct dlb_kvstore *s, int worker, bool hit);

/**
 * Install @m as the published map (taking it; the old one is retired
 * through @rt, or freed at once when @rt is NULL). What a mirror does at
 * its end; tests call it directly. Main thread.
 */
void dlb_kvstore_publish(struct dlb_kvstore *s, struct dlb_kvmap *m, struct dlb_rcu_thread *rt);

/** Ask for a mirror now (kvs:reload()). Main thread. */
void dlb_kvstore_reload(struct dlb_kvstore *s);

const struct dlb_kvstore_opts *dlb_kvstore_opts(const struct dlb_kvstore *s);

struct dlb_kvstore_stats {
	uint64_t lookups, hits;		/* rule lookups, and those that found a key */
	uint64_t refreshes;		/* mirrors completed */
	uint64_t refresh_errors;	/* mirrors failed (Redis down, timeout, error reply) */
	uint64_t notifications;		/* keyspace/channel messages received */
	uint64_t skipped;		/* members over the size limits, last mirror */
	size_t entries, memory;		/* of the published map */
	double last_ok;			/* loop time of the last completed mirror, 0: never */
	double age;			/* s since then (-1: never) */
	double last_duration;		/* s the last completed mirror took */
	bool mirroring;			/* a mirror is in progress */
	char last_error[128];		/* of the last failed mirror, "" if it succeeded */
};
/** Thread: main (the lookup counters are read with relaxed loads). */
void dlb_kvstore_get_stats(const struct dlb_kvstore *s, struct dlb_kvstore_stats *out);
/** The sums over every store, those freed included (metrics.c). */
void dlb_kvstore_totals(struct dlb_kvstore_stats *out);
/** Each live store (showKVStores()). */
typedef void dlb_kvstore_visit_fn(struct dlb_kvstore *s, void *ud);
void dlb_kvstore_visit(dlb_kvstore_visit_fn *fn, void *ud);

/**
 * Start mirroring on the main @loop (after setRedis's connections exist),
 * retiring maps through @rt. The module's Redis connections are made when
 * the first store exists (now or later). @return 0 (never fails: Redis
 * being down only delays the first mirror).
 */
int dlb_kvstore_start(struct ev_loop *loop, struct dlb_rcu_thread *rt);
/** Stop mirroring and close the connections; stores keep their last map. */
void dlb_kvstore_stop(void);

#endif
