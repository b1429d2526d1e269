/*
 * dynblock.c - the dynamic-block store and its query-path lookup
 * (dynblock.h). The rate tracking and the rule groups are in dyntrack.c.
 *
 * Master list (main thread only): an array of records plus an index by key.
 * A record is never changed once a snapshot may point to it (but for its
 * atomic hit counter): a refresh makes a new record that inherits the
 * count, and the old one goes to the list freed with the snapshot it was
 * last visible in.
 *
 * Snapshot (read by workers): one open-addressing table of netmask keys
 * (the hash covers family, prefix length and masked address) probed once
 * per distinct prefix length present, longest first; one table of suffix
 * names probed once per label count present. 16-byte slots: the 64-bit hash
 * and the record, whose key is compared only when the hash matches.
 */
#include "dnslb/pipeline/dynblock.h"

#include <arpa/inet.h>
#include <cJSON.h>
#include <ck_epoch.h>
#include <ev.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "dnslb/core/buf.h"
#include "dnslb/core/daemon.h"
#include "dnslb/pipeline/dynblock_int.h"
#include "dnslb/core/log.h"
#include "dnslb/core/rcu.h"
#include "dnslb/core/util.h"
#include "dnslb/core/wire.h"
#include "dnslb/core/wstate.h"

uint64_t dlb_dyn_seed;

void
dlb_dyn_seed_init(void)
{
	uint64_t s = 0;

	if (dlb_dyn_seed != 0)
		return;
	if (getrandom(&s, sizeof(s), 0) != (ssize_t)sizeof(s))
		s = (uint64_t)(uintptr_t)&s ^ (uint64_t)ev_time() * 1000003;
	dlb_dyn_seed = s | 1;
}

double
dlb_dyn_now(void)
{
	return ev_time();
}

bool
dlb_dyn_action_valid(int a)
{
	switch (a) {
	case DLB_DYN_DROP:
	case DLB_DYN_NXDOMAIN:
	case DLB_DYN_REFUSED:
	case DLB_DYN_TRUNCATE:
	case DLB_DYN_NONE:
	case DLB_DYN_NOOP:
	case DLB_DYN_NORECURSE:
		return true;
	default:
		return false;
	}
}

const char *
dlb_dyn_action_name(int a)
{
	/* dnsdist 1.7's DNSAction::typeToString (as showDynBlocks() prints it) */
	static const char *const names[] = {
		"Drop", "Send NXDomain", "Send Refused", "Spoof an answer", "Allow",
		"Modify the header", "Route to a pool", "Delay", "Truncate over UDP",
		"Send ServFail", "Do nothing", "Do nothing", "Set rd=0",
		"Spoof an answer from raw bytes",
	};

	if (a < 0 || (size_t)a >= sizeof(names) / sizeof(names[0]))
		return "Unknown";
	return names[a];
}

/* ---- records and tables ---------------------------------------------------- */

struct dlb_dyn_rec {
	_Atomic uint64_t blocks;	/* bumped by workers (relaxed) */
	uint64_t hash;
	double until;
	int action;
	bool warning;
	bool smt;
	struct dlb_netmask nm;
	uint16_t port;			/* pbits > 0: the first port of the range */
	uint8_t pbits;			/* port bits (IPv4 /32 only): probed as prefix 32 + pbits */
	uint8_t namelen;
	uint8_t labels;			/* smt: label count (root = 0) */
	uint8_t name[256];
	char *reason;
	char *origin;			/* the fleet node it came from; NULL: this node */
};

struct slot {
	uint64_t hash;
	struct dlb_dyn_rec *rec;	/* NULL: empty */
};

struct table {
	struct slot *v;
	size_t mask;			/* slots - 1 */
	size_t n;
};

struct dlb_dyn_snap {
	ck_epoch_entry_t epoch;
	struct table nm, smt;
	/*
	 * A blocked Bloom filter in front of the netmask table: a client picks
	 * one 64-byte line by its address masked to the filter's coarse prefix
	 * (the shortest length present, at least /16 or /32 for IPv6), and each
	 * length probed tests one bit of that line. A miss then costs one cache
	 * line, not one table probe per length (8 bits per block: 128 KiB for
	 * 100,000). Lengths shorter than the coarse prefix bypass it.
	 */
	uint64_t *filter;		/* [nlines * 8] */
	size_t line_mask;		/* nlines - 1 */
	uint8_t coarse4, coarse6;
	uint8_t v4_lens[49], v6_lens[129];	/* prefix lengths present, longest first
						 * (IPv4: 33..48 are /32 and a port range) */
	uint8_t n4, n6;
	uint64_t smt_labels[2];		/* label counts present (bit per count, 0..127) */
	uint8_t smt_max_labels;
	struct dlb_dyn_rec **dead;	/* freed with this snapshot */
	size_t ndead;
};

static struct {
	struct dlb_dyn_snap *live;	/* atomic: what workers read */
	struct dlb_dyn_rec **recs;	/* the master list */
	size_t n, cap;
	struct table index;		/* key -> record, over recs */
	struct dlb_dyn_rec **dead;	/* replaced or removed since the last publish */
	size_t ndead, deadcap;
	bool dirty;
	int default_action;		/* atomic: read by workers */
	unsigned purge_interval;
	double last_purge;
	dlb_dyn_hook_fn *hook;		/* the fleet's (dlb_dyn_set_hook) */
	void *hook_ud;
} g = { .default_action = DLB_DYN_DROP, .purge_interval = 60 };

static void info_of(const struct dlb_dyn_rec *r, struct dlb_dyn_info *b);

void
dlb_dyn_set_hook(dlb_dyn_hook_fn *fn, void *ud)
{
	g.hook = fn;
	g.hook_ud = ud;
}

/* Tell the fleet about @r, a block of this node just put in the master list. */
static void
hook_raised(const struct dlb_dyn_rec *r)
{
	struct dlb_dyn_info b;

	if (g.hook == NULL || r->warning || r->origin != NULL)
		return;
	info_of(r, &b);
	g.hook(DLB_DYN_EV_RAISED, &b, g.hook_ud);
}

static void
rec_free(struct dlb_dyn_rec *r)
{
	if (r == NULL)
		return;
	free(r->reason);
	free(r->origin);
	free(r);
}

static bool
rec_same_key(const struct dlb_dyn_rec *a, const struct dlb_dyn_rec *b)
{
	if (a->smt != b->smt)
		return false;
	if (a->smt)
		return a->namelen == b->namelen && memcmp(a->name, b->name, a->namelen) == 0;
	return a->nm.family == b->nm.family && a->nm.bits == b->nm.bits &&
	       a->pbits == b->pbits && a->port == b->port &&
	       memcmp(a->nm.addr, b->nm.addr, 16) == 0;
}

static int
table_init(struct table *t, size_t n)
{
	size_t slots = 16;

	while (slots < n * 2)
		slots *= 2;
	t->v = calloc(slots, sizeof(*t->v));
	if (t->v == NULL)
		return -1;
	t->mask = slots - 1;
	t->n = 0;
	return 0;
}

static void
table_deinit(struct table *t)
{
	free(t->v);
	t->v = NULL;
	t->mask = 0;
	t->n = 0;
}

/* Insert or replace (same key) @r. The table must have room (n < slots / 2). */
static struct dlb_dyn_rec *
table_put(struct table *t, struct dlb_dyn_rec *r)
{
	for (size_t i = r->hash & t->mask;; i = (i + 1) & t->mask) {
		struct slot *s = &t->v[i];

		if (s->rec == NULL) {
			s->hash = r->hash;
			s->rec = r;
			t->n++;
			return NULL;
		}
		if (s->hash == r->hash && rec_same_key(s->rec, r)) {
			struct dlb_dyn_rec *old = s->rec;

			s->rec = r;
			return old;
		}
	}
}

static struct dlb_dyn_rec *
table_get(const struct table *t, const struct dlb_dyn_rec *key)
{
	if (t->v == NULL)
		return NULL;
	for (size_t i = key->hash & t->mask;; i = (i + 1) & t->mask) {
		const struct slot *s = &t->v[i];

		if (s->rec == NULL)
			return NULL;
		if (s->hash == key->hash && rec_same_key(s->rec, key))
			return s->rec;
	}
}

static int
index_rebuild(size_t room)
{
	struct table t;

	if (table_init(&t, g.n + room) != 0)
		return -1;
	for (size_t i = 0; i < g.n; i++)
		table_put(&t, g.recs[i]);
	table_deinit(&g.index);
	g.index = t;
	return 0;
}

static int
dead_push(struct dlb_dyn_rec *r)
{
	if (g.ndead == g.deadcap) {
		size_t cap = g.deadcap ? g.deadcap * 2 : 64;
		struct dlb_dyn_rec **v = realloc(g.dead, cap * sizeof(*v));

		if (v == NULL)
			return -1;
		g.dead = v;
		g.deadcap = cap;
	}
	g.dead[g.ndead++] = r;
	return 0;
}

static unsigned
name_labels(const uint8_t *name, size_t len)
{
	unsigned n = 0;

	for (size_t i = 0; i < len && name[i] != 0; i += (size_t)name[i] + 1)
		n++;
	return n;
}

static void
key_hash(struct dlb_dyn_rec *r)
{
	dlb_dyn_seed_init();
	if (r->smt)
		r->hash = dlb_dyn_hash_name(r->name, r->namelen);
	else
		r->hash = dlb_dyn_hash_port(dlb_dyn_hash_addr(r->nm.family, r->nm.bits, r->nm.addr),
					    r->port, r->pbits);
}

/*
 * Put @r (new) in the master list, replacing the record of the same key if
 * any (which goes to the dead list). @return -1 when out of memory (@r freed).
 */
static int
master_put(struct dlb_dyn_rec *r)
{
	struct dlb_dyn_rec *old;

	if (g.n == g.cap) {
		size_t cap = g.cap ? g.cap * 2 : 64;
		struct dlb_dyn_rec **v = realloc(g.recs, cap * sizeof(*v));

		if (v == NULL)
			goto out_free;
		g.recs = v;
		g.cap = cap;
	}
	if ((g.index.n + 1) * 2 > g.index.mask + 1 && index_rebuild(g.n + 64) != 0)
		goto out_free;
	if (g.ndead == g.deadcap && dead_push(NULL) == 0)
		g.ndead--;	/* room for the replaced one: the swap below cannot fail */
	if (g.ndead == g.deadcap)
		goto out_free;
	old = table_put(&g.index, r);
	if (old != NULL) {
		for (size_t i = 0; i < g.n; i++) {
			if (g.recs[i] == old) {
				g.recs[i] = r;
				break;
			}
		}
		g.dead[g.ndead++] = old;
	} else {
		g.recs[g.n++] = r;
	}
	g.dirty = true;
	return 0;
out_free:
	rec_free(r);
	return -1;
}

/*
 * dnsdist's addOrRefreshBlock (both flavours): the decision on an existing
 * record @got, and the count a new record inherits. @return false to keep
 * @got as it is.
 */
static bool
refresh_decision(const struct dlb_dyn_rec *got, bool warning, double until, double now,
		 uint64_t *count, bool *announce)
{
	*count = 0;
	*announce = true;
	if (got == NULL)
		return true;
	if (warning && !got->warning)
		return false;	/* a real block is not replaced by a warning */
	if (!(!warning && got->warning) && until < got->until)
		return false;	/* it had a longer policy */
	if (now < got->until) {
		*count = atomic_load_explicit(&got->blocks, memory_order_relaxed);
		*announce = !warning && got->warning;
	}
	return true;
}

/* The fleet's copy of a block it already has: nothing to do. */
static bool
same_fleet_block(const struct dlb_dyn_rec *got, double until, int action, const char *origin)
{
	if (got == NULL || got->until != until || got->action != action || got->warning)
		return false;
	if (got->origin == NULL || origin == NULL)
		return got->origin == origin;
	return strcmp(got->origin, origin) == 0;
}

/*
 * The most specific record covering @key (its own, a shorter port range of
 * its address, or a shorter prefix): what dnsdist's NetmaskTree::lookup of
 * the requestor finds in addOrRefreshBlock and addDynBlocks, so that, say, a
 * client inside a blocked /24 gets no warning of its own.
 */
static struct dlb_dyn_rec *
covering_nm(const struct dlb_dyn_rec *key)
{
	struct dlb_dyn_rec k;
	struct dlb_dyn_rec *got;

	memset(&k, 0, sizeof(k));
	k.nm = key->nm;
	for (int pb = key->pbits; pb > 0; pb--) {
		k.pbits = (uint8_t)pb;
		k.port = dlb_dyn_port_mask(key->port, (unsigned)pb);
		key_hash(&k);
		if ((got = table_get(&g.index, &k)) != NULL)
			return got;
	}
	k.pbits = 0;
	k.port = 0;
	for (int b = key->nm.bits; b >= 0; b--) {
		k.nm.bits = (uint8_t)b;
		dlb_dyn_mask(k.nm.addr, (unsigned)b);
		key_hash(&k);
		if ((got = table_get(&g.index, &k)) != NULL)
			return got;
	}
	return NULL;
}

/* @origin: the fleet node (copied), NULL for this node's; @fleet: from the fleet (no hook). */
static bool
block_nm(const struct dlb_netmask *nm, uint16_t port, unsigned pbits, const char *reason,
	 double until, int action, bool warning, bool quiet, double now, const char *origin,
	 bool fleet)
{
	struct dlb_dyn_rec key, *got, *r;
	uint64_t count;
	bool announce;
	char text[80];

	if (pbits > 0 && (nm->family != AF_INET || nm->bits != 32 || pbits > 16))
		return false;	/* (the callers never ask) */
	memset(&key, 0, sizeof(key));
	key.nm = *nm;
	key.pbits = (uint8_t)pbits;
	key.port = dlb_dyn_port_mask(port, pbits);
	key_hash(&key);
	/* the fleet's copies replace their own key; a local decision weighs the
	 * entry that covers the client, as dnsdist's */
	got = fleet ? table_get(&g.index, &key) : covering_nm(&key);
	if (fleet && same_fleet_block(got, until, warning ? DLB_DYN_NOOP : action, origin))
		return false;
	if (!refresh_decision(got, warning, until, now, &count, &announce))
		return false;
	r = calloc(1, sizeof(*r));
	if (r == NULL || (r->reason = strdup(reason != NULL ? reason : "")) == NULL ||
	    (origin != NULL && (r->origin = strdup(origin)) == NULL)) {
		if (r != NULL)
			free(r->reason);
		free(r);
		return false;
	}
	r->nm = *nm;
	r->port = key.port;
	r->pbits = key.pbits;
	r->hash = key.hash;
	r->until = until;
	r->action = warning ? DLB_DYN_NOOP : action;
	r->warning = warning;
	atomic_store_explicit(&r->blocks, count, memory_order_relaxed);
	if (master_put(r) != 0)
		return false;
	if (!fleet)
		hook_raised(r);
	if (!quiet && announce) {
		struct dlb_dyn_info i = { .nm = *nm, .port = key.port, .pbits = key.pbits };

		dlb_dyn_key_text(&i, text, sizeof(text));
		if (warning)
			dlb_warn("Query rate for %s exceeded set warning rate (%s)", text, reason);
		else
			dlb_warn("Inserting dynamic block for %s for %.0f seconds: %s", text,
				 until - now, reason);
	}
	return true;
}

bool
dlb_dyn_block_nm(const struct dlb_netmask *nm, const char *reason, double until, int action,
		 bool warning, bool quiet, double now)
{
	return block_nm(nm, 0, 0, reason, until, action, warning, quiet, now, NULL, false);
}

bool
dlb_dyn_block_range(const struct dlb_netmask *nm, uint16_t port, unsigned pbits,
		    const char *reason, double until, int action, bool warning, bool quiet,
		    double now)
{
	return block_nm(nm, port, pbits, reason, until, action, warning, quiet, now, NULL, false);
}

static bool
block_smt(const uint8_t *name, size_t namelen, const char *reason, double until, int action,
	  bool quiet, double now, const char *origin, bool fleet)
{
	struct dlb_dyn_rec *key, *got, *r;
	uint64_t count;
	bool announce;
	char text[DLB_WIRE_NAME_TEXT_MAX];

	if (namelen == 0 || namelen > 255)
		return false;
	key = calloc(1, sizeof(*key));
	if (key == NULL)
		return false;
	key->smt = true;
	key->namelen = (uint8_t)namelen;
	for (size_t i = 0; i < namelen; i++)
		key->name[i] = (uint8_t)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
	key_hash(key);
	got = table_get(&g.index, key);
	if ((fleet && same_fleet_block(got, until, action, origin)) ||
	    !refresh_decision(got, false, until, now, &count, &announce) ||
	    (key->reason = strdup(reason != NULL ? reason : "")) == NULL ||
	    (origin != NULL && (key->origin = strdup(origin)) == NULL)) {
		free(key->reason);
		free(key);
		return false;
	}
	r = key;
	r->labels = (uint8_t)name_labels(r->name, r->namelen);
	r->until = until;
	r->action = action;
	atomic_store_explicit(&r->blocks, count, memory_order_relaxed);
	if (master_put(r) != 0)
		return false;
	if (!fleet)
		hook_raised(r);
	if (!quiet && announce) {
		if (dlb_wire_name_to_text(name, namelen, text, sizeof(text)) < 0)
			snprintf(text, sizeof(text), "(bad name)");
		dlb_warn("Inserting dynamic block for %s for %.0f seconds: %s", text, until - now,
			 reason);
	}
	return true;
}

bool
dlb_dyn_block_smt(const uint8_t *name, size_t namelen, const char *reason, double until,
		  int action, bool quiet, double now)
{
	return block_smt(name, namelen, reason, until, action, quiet, now, NULL, false);
}

bool
dlb_dyn_block_fleet(const struct dlb_dyn_info *b, const char *origin, double now)
{
	if (b->smt)
		return block_smt(b->name, b->namelen, b->reason, b->until, b->action, true, now,
				 origin, true);
	return block_nm(&b->nm, b->port, b->pbits, b->reason, b->until, b->action, b->warning, true, now, origin,
			true);
}

/* ---- snapshots ------------------------------------------------------------- */

static void
snap_free(struct dlb_dyn_snap *s)
{
	if (s == NULL)
		return;
	table_deinit(&s->nm);
	table_deinit(&s->smt);
	free(s->filter);
	for (size_t i = 0; i < s->ndead; i++)
		rec_free(s->dead[i]);
	free(s->dead);
	free(s);
}

static void
snap_reclaim(ck_epoch_entry_t *e)
{
	snap_free(container_of(e, struct dlb_dyn_snap, epoch));
}

/* The two filter bits of a key hash (a 512-bit line, two bits: k = 2). */
#define FBIT1(h) ((unsigned)((h) >> 20) & 511)
#define FBIT2(h) ((unsigned)((h) >> 29) & 511)

/* The filter line of address (@hi, @lo): by its coarse prefix. */
static inline const uint64_t *
filter_line(const struct dlb_dyn_snap *s, uint8_t family, uint64_t hi, uint64_t lo)
{
	dlb_dyn_mask_words(&hi, &lo, family == AF_INET ? s->coarse4 : s->coarse6);
	return s->filter + ((dlb_dyn_hash_words(family, 255, hi, lo) >> 40) & s->line_mask) * 8;
}

static void
filter_add(struct dlb_dyn_snap *s, const struct dlb_dyn_rec *r)
{
	uint64_t *line, hi, lo;

	if (r->nm.bits < (r->nm.family == AF_INET ? s->coarse4 : s->coarse6))
		return;	/* probed without the filter */
	dlb_dyn_words(r->nm.addr, &hi, &lo);
	line = (uint64_t *)filter_line(s, r->nm.family, hi, lo);
	line[FBIT1(r->hash) / 64] |= 1ull << (FBIT1(r->hash) % 64);
	line[FBIT2(r->hash) / 64] |= 1ull << (FBIT2(r->hash) % 64);
}

static struct dlb_dyn_snap *
snap_build(void)
{
	struct dlb_dyn_snap *s = calloc(1, sizeof(*s));
	bool v4[49] = { false }, v6[129] = { false };
	size_t nnm = 0, nsmt = 0;

	if (s == NULL)
		return NULL;
	for (size_t i = 0; i < g.n; i++) {
		if (g.recs[i]->smt)
			nsmt++;
		else
			nnm++;
	}
	s->line_mask = 64 - 1;
	while ((s->line_mask + 1) * 512 < nnm * 8)
		s->line_mask = s->line_mask * 2 + 1;
	s->filter = aligned_alloc(64, (s->line_mask + 1) * 64);
	if (s->filter != NULL)
		memset(s->filter, 0, (s->line_mask + 1) * 64);
	s->coarse4 = 32;
	s->coarse6 = 128;
	for (size_t i = 0; i < g.n; i++) {
		const struct dlb_dyn_rec *r = g.recs[i];

		if (r->smt)
			continue;
		if (r->nm.family == AF_INET && r->nm.bits < s->coarse4)
			s->coarse4 = r->nm.bits < 16 ? 16 : r->nm.bits;
		else if (r->nm.family == AF_INET6 && r->nm.bits < s->coarse6)
			s->coarse6 = r->nm.bits < 32 ? 32 : r->nm.bits;
	}
	if (s->filter == NULL || table_init(&s->nm, nnm) != 0 || table_init(&s->smt, nsmt) != 0) {
		snap_free(s);
		return NULL;
	}
	for (size_t i = 0; i < g.n; i++) {
		struct dlb_dyn_rec *r = g.recs[i];

		if (r->smt) {
			table_put(&s->smt, r);
			if (r->labels < 128)
				s->smt_labels[r->labels / 64] |= 1ull << (r->labels % 64);
			if (r->labels > s->smt_max_labels)
				s->smt_max_labels = r->labels;
		} else {
			filter_add(s, r);
			table_put(&s->nm, r);
			if (r->nm.family == AF_INET && r->nm.bits <= 32)
				v4[r->nm.bits + r->pbits] = true;
			else if (r->nm.bits <= 128)
				v6[r->nm.bits] = true;
		}
	}
	for (int b = 48; b >= 0; b--)
		if (v4[b])
			s->v4_lens[s->n4++] = (uint8_t)b;
	for (int b = 128; b >= 0; b--)
		if (v6[b])
			s->v6_lens[s->n6++] = (uint8_t)b;
	return s;
}

void
dlb_dyn_publish(void)
{
	struct dlb_dyn_snap *s, *prev;
	struct dlb_rcu_thread *rt = dlb_daemon.rcu;

	if (!g.dirty)
		return;
	if (g.n == 0) {
		s = NULL;
	} else if ((s = snap_build()) == NULL) {
		dlb_log_ratelimited(DLB_LOG_ERR, "dynamic blocks: out of memory, not published");
		return;
	}
	prev = __atomic_exchange_n(&g.live, s, __ATOMIC_ACQ_REL);
	g.dirty = false;
	if (prev == NULL) {
		/* nobody can hold records that were never published */
		for (size_t i = 0; i < g.ndead; i++)
			rec_free(g.dead[i]);
		g.ndead = 0;
		return;
	}
	prev->dead = g.dead;
	prev->ndead = g.ndead;
	g.dead = NULL;
	g.ndead = g.deadcap = 0;
	if (rt != NULL)
		dlb_rcu_defer(rt, &prev->epoch, snap_reclaim);
	else
		snap_free(prev);
}

void
dlb_dyn_clear_all(void)
{
	for (size_t i = 0; i < g.n; i++) {
		if (dead_push(g.recs[i]) != 0) {
			/* out of memory: leak rather than free what a reader may hold */
			continue;
		}
	}
	g.n = 0;
	table_deinit(&g.index);
	g.dirty = true;
	dlb_dyn_publish();
}

/* The master list now holds its first @kept records: re-index and publish if some went. */
static size_t
list_compacted(size_t kept, size_t dropped)
{
	g.n = kept;
	if (dropped > 0) {
		if (index_rebuild(64) != 0)
			table_deinit(&g.index);	/* rebuilt at the next insert */
		g.dirty = true;
		dlb_dyn_publish();
	}
	return dropped;
}

/* Remove the records whose origin is @origin (NULL: this node's). */
static size_t
remove_origin(const char *origin)
{
	size_t kept = 0, dropped = 0;

	for (size_t i = 0; i < g.n; i++) {
		struct dlb_dyn_rec *r = g.recs[i];
		bool match = origin == NULL ? r->origin == NULL
					    : r->origin != NULL && strcmp(r->origin, origin) == 0;

		if (!match || dead_push(r) != 0)
			g.recs[kept++] = r;
		else
			dropped++;
	}
	return list_compacted(kept, dropped);
}

void
dlb_dyn_clear(void)
{
	if (g.hook != NULL)
		g.hook(DLB_DYN_EV_CLEARING, NULL, g.hook_ud);
	(void)remove_origin(NULL);
	g.dirty = true;
	dlb_dyn_publish();
}

size_t
dlb_dyn_clear_origin(const char *origin)
{
	return origin != NULL ? remove_origin(origin) : 0;
}

size_t
dlb_dyn_purge(double now)
{
	size_t kept = 0, dropped = 0;

	for (size_t i = 0; i < g.n; i++) {
		struct dlb_dyn_rec *r = g.recs[i];

		if (now < r->until || dead_push(r) != 0)
			g.recs[kept++] = r;
		else
			dropped++;
	}
	return list_compacted(kept, dropped);
}

void
dlb_dyn_set_default_action(int a)
{
	__atomic_store_n(&g.default_action, a, __ATOMIC_RELAXED);
}

int
dlb_dyn_default_action(void)
{
	return __atomic_load_n(&g.default_action, __ATOMIC_RELAXED);
}

void
dlb_dyn_set_purge_interval(unsigned s)
{
	g.purge_interval = s;
}

/* ---- the query path -------------------------------------------------------- */

/* The most specific entry of @addr in @s, when active and not a warning. */
static struct dlb_dyn_rec *
lookup_addr(const struct dlb_dyn_snap *s, const struct sockaddr *sa, double now)
{
	uint8_t family, base[16], coarse;
	uint16_t port;
	uint64_t bhi, blo;
	const uint8_t *lens;
	const uint64_t *line;
	unsigned nlens;

	if (s->nm.n == 0 || !dlb_dyn_addr_of(sa, &family, base))
		return NULL;
	if (family == AF_INET) {
		lens = s->v4_lens;
		nlens = s->n4;
		coarse = s->coarse4;
	} else {
		lens = s->v6_lens;
		nlens = s->n6;
		coarse = s->coarse6;
	}
	if (nlens == 0)
		return NULL;
	dlb_dyn_words(base, &bhi, &blo);
	line = filter_line(s, family, bhi, blo);
	port = dlb_dyn_port_of(sa);
	for (unsigned k = 0; k < nlens; k++) {
		uint8_t bits = lens[k], pbits = 0;
		uint16_t mport = 0;
		uint64_t hi = bhi, lo = blo, h;
		unsigned b1, b2;

		if (bits > 32 && family == AF_INET) {
			/* a port range of the /32 (CGNAT), more specific than it */
			pbits = (uint8_t)(bits - 32);
			bits = 32;
			mport = dlb_dyn_port_mask(port, pbits);
		}
		dlb_dyn_mask_words(&hi, &lo, bits);
		h = dlb_dyn_hash_port(dlb_dyn_hash_words(family, bits, hi, lo), mport, pbits);
		b1 = FBIT1(h);
		b2 = FBIT2(h);
		if (bits >= coarse && (!(line[b1 / 64] & (1ull << (b1 % 64))) ||
				       !(line[b2 / 64] & (1ull << (b2 % 64)))))
			continue;	/* not in the filter: surely not in the table */
		for (size_t i = h & s->nm.mask;; i = (i + 1) & s->nm.mask) {
			const struct slot *sl = &s->nm.v[i];
			const struct dlb_dyn_rec *r = sl->rec;
			uint64_t rhi, rlo;

			if (r == NULL)
				break;
			if (sl->hash != h)
				continue;
			dlb_dyn_words(r->nm.addr, &rhi, &rlo);
			if (r->nm.family != family || r->nm.bits != bits || rhi != hi || rlo != lo ||
			    r->pbits != pbits || r->port != mport)
				continue;
			/* dnsdist acts on the most specific entry only: an expired
			 * one (until purged) or a warning shadows a wider block */
			return now < r->until && !r->warning ? (struct dlb_dyn_rec *)r : NULL;
		}
	}
	return NULL;
}

/* The longest active suffix block of @name. */
static struct dlb_dyn_rec *
lookup_name(const struct dlb_dyn_snap *s, const uint8_t *name, size_t len, double now)
{
	unsigned labels, off = 0;

	if (s->smt.n == 0 || len == 0)
		return NULL;
	labels = name_labels(name, len);
	for (unsigned l = labels;; l--) {
		if (l < 128 && l <= s->smt_max_labels && (s->smt_labels[l / 64] & (1ull << (l % 64)))) {
			uint64_t h = dlb_dyn_hash_name(name + off, len - off);

			for (size_t i = h & s->smt.mask;; i = (i + 1) & s->smt.mask) {
				const struct slot *sl = &s->smt.v[i];
				const struct dlb_dyn_rec *r = sl->rec;

				if (r == NULL)
					break;
				if (sl->hash != h || r->namelen != len - off ||
				    memcmp(r->name, name + off, len - off) != 0)
					continue;
				if (now < r->until && !r->warning)
					return (struct dlb_dyn_rec *)r;
				break;
			}
		}
		if (l == 0 || off >= len || name[off] == 0)
			break;
		off += (unsigned)name[off] + 1;
	}
	return NULL;
}

/* The effective action of @r; -1 when it does nothing (NoOp). */
static int
rec_action(const struct dlb_dyn_rec *r)
{
	int a = r->action == DLB_DYN_NONE ? dlb_dyn_default_action() : r->action;

	return a == DLB_DYN_NOOP || a == DLB_DYN_NONE ? -1 : a;
}

int
dlb_dyn_lookup(const struct sockaddr *client, const uint8_t *qname_lc, size_t qname_len,
	       double now)
{
	const struct dlb_dyn_snap *s = __atomic_load_n(&g.live, __ATOMIC_ACQUIRE);
	const struct dlb_dyn_rec *r;
	int a;

	if (s == NULL)
		return -1;
	if ((r = lookup_addr(s, client, now)) != NULL && (a = rec_action(r)) >= 0)
		return a;
	if ((r = lookup_name(s, qname_lc, qname_len, now)) != NULL && (a = rec_action(r)) >= 0)
		return a;
	return -1;
}

/* dnsdist: a NoOp block lets the query go on (to the SMT, then the rules);
 * Truncate over TCP does not apply and is not counted. */
static bool
applies(struct dlb_dyn_rec *r, bool tcp, struct dlb_dyn_verdict *v)
{
	int a;

	if (r == NULL || (a = rec_action(r)) < 0)
		return false;
	if (a == DLB_DYN_TRUNCATE && tcp)
		return false;
	atomic_fetch_add_explicit(&r->blocks, 1, memory_order_relaxed);
	v->action = a;
	return true;
}

DLB_HOT bool
dlb_dyn_query(struct dlb_worker *w, const struct sockaddr *client, const uint8_t *qname_lc,
	      size_t qname_len, uint16_t qtype, bool tcp, struct dlb_dyn_verdict *v)
{
	struct dlb_dyn_worker *dw = __atomic_load_n(&w->dyn, __ATOMIC_ACQUIRE);
	const struct dlb_dyn_snap *s;
	double now;

	if (dw != NULL && client != NULL)
		dlb_dyn_track_query(dw, client, qname_lc, qname_len, qtype);
	s = __atomic_load_n(&g.live, __ATOMIC_ACQUIRE);
	if (s == NULL)
		return false;
	now = dlb_worker_now(w);
	v->smt = false;
	if (client != NULL && applies(lookup_addr(s, client, now), tcp, v)) {
		w->stats.dyn_blocked++;
		return true;
	}
	if (applies(lookup_name(s, qname_lc, qname_len, now), tcp, v)) {
		v->smt = true;
		w->stats.dyn_blocked++;
		return true;
	}
	return false;
}

DLB_HOT void
dlb_dyn_answer(struct dlb_worker *w, const struct sockaddr *client, const uint8_t *qname_lc,
	       size_t qname_len, unsigned rcode, size_t len, enum dlb_dyn_from from)
{
	struct dlb_dyn_worker *dw = __atomic_load_n(&w->dyn, __ATOMIC_ACQUIRE);

	if (dw != NULL && client != NULL)
		dlb_dyn_track_answer(dw, client, qname_lc, qname_len, rcode, len, from);
}

/* ---- the control plane's views --------------------------------------------- */

static void
info_of(const struct dlb_dyn_rec *r, struct dlb_dyn_info *b)
{
	b->smt = r->smt;
	b->nm = r->nm;
	b->port = r->port;
	b->pbits = r->pbits;
	b->namelen = r->namelen;
	memcpy(b->name, r->name, r->namelen);
	b->until = r->until;
	b->action = r->action;
	b->warning = r->warning;
	b->blocks = atomic_load_explicit(&r->blocks, memory_order_relaxed);
	b->reason = r->reason;
	b->origin = r->origin;
}

size_t
dlb_dyn_visit(double now, bool active_only, dlb_dyn_visit_fn *fn, void *ud)
{
	size_t n = 0;

	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < g.n; i++) {
			const struct dlb_dyn_rec *r = g.recs[i];
			struct dlb_dyn_info b;

			if (r->smt != (pass == 1) || (active_only && !(now < r->until)))
				continue;
			info_of(r, &b);
			fn(&b, ud);
			n++;
		}
	}
	return n;
}

size_t
dlb_dyn_nmg_size(void)
{
	const struct dlb_dyn_snap *s = __atomic_load_n(&g.live, __ATOMIC_ACQUIRE);

	return s != NULL ? s->nm.n : 0;
}

size_t
dlb_dyn_smt_size(void)
{
	const struct dlb_dyn_snap *s = __atomic_load_n(&g.live, __ATOMIC_ACQUIRE);

	return s != NULL ? s->smt.n : 0;
}

void
dlb_dyn_key_text(const struct dlb_dyn_info *b, char *out, size_t outsz)
{
	if (!b->smt && b->pbits > 0) {
		/* dnsdist's AddressAndPortRange::toString */
		char a[64];

		dlb_netmask_format(&b->nm, a, sizeof(a));
		*strchr(a, '/') = '\0';
		snprintf(out, outsz, "%s:%u/%u", a, (unsigned)b->port, (unsigned)b->pbits);
		return;
	}
	if (!b->smt) {
		dlb_netmask_format(&b->nm, out, outsz);
		return;
	}
	/* dnsdist prints "empty" for a block without a domain; ours always have one */
	if (dlb_wire_name_to_text(b->name, b->namelen, out, outsz) < 0)
		snprintf(out, outsz, "empty");
}

/* dnsdist 1.7: boost::format("%-24s %8d %8d %-10s %-20s %s\n"), seconds truncated. */
#define SHOW_FMT "%-24s %8s %8s %-10s %-20s %s\n"

struct show_ctx {
	struct dlb_buf *b;
	double now;
};

static void
show_visit(const struct dlb_dyn_info *i, void *ud)
{
	struct show_ctx *c = ud;
	char key[DLB_WIRE_NAME_TEXT_MAX], secs[32], blocks[32];
	const char *action = dlb_dyn_action_name(i->action != DLB_DYN_NONE ? i->action
								 : dlb_dyn_default_action());

	dlb_dyn_key_text(i, key, sizeof(key));
	/* until.tv_sec - now.tv_sec */
	snprintf(secs, sizeof(secs), "%lld", (long long)i->until - (long long)c->now);
	snprintf(blocks, sizeof(blocks), "%llu", (unsigned long long)i->blocks);
	/* a fleet block names its origin after the reason: dnsdist's columns stay */
	if (i->origin != NULL)
		dlb_buf_printf(c->b, "%-24s %8s %8s %-10s %-20s %s (from %s)\n", key, secs, blocks,
			   i->warning ? "true" : "false", action, i->reason, i->origin);
	else
		dlb_buf_printf(c->b, SHOW_FMT, key, secs, blocks, i->warning ? "true" : "false",
			   action, i->reason);
}

char *
dlb_dyn_show(double now)
{
	struct dlb_buf b = DLB_BUF_INIT(0);
	struct show_ctx c = { &b, now };

	dlb_buf_printf(&b, SHOW_FMT, "What", "Seconds", "Blocks", "Warning", "Action", "Reason");
	dlb_dyn_visit(now, true, show_visit, &c);
	return dlb_buf_take(&b, NULL);	/* NULL when out of memory */
}

struct json_ctx {
	cJSON *obj;
	double now;
	bool oom;
};

static void
json_visit(const struct dlb_dyn_info *i, void *ud)
{
	struct json_ctx *c = ud;
	char key[DLB_WIRE_NAME_TEXT_MAX];
	cJSON *t = cJSON_CreateObject();
	int a = i->action != DLB_DYN_NONE ? i->action : dlb_dyn_default_action();

	if (t == NULL) {
		c->oom = true;
		return;
	}
	dlb_dyn_key_text(i, key, sizeof(key));
	if (cJSON_AddStringToObject(t, "reason", i->reason) == NULL ||
	    cJSON_AddNumberToObject(t, "seconds",
				    (double)((long long)i->until - (long long)c->now)) == NULL ||
	    cJSON_AddNumberToObject(t, "blocks", (double)i->blocks) == NULL ||
	    cJSON_AddStringToObject(t, "action", dlb_dyn_action_name(a)) == NULL ||
	    (!i->smt && cJSON_AddBoolToObject(t, "warning", i->warning) == NULL)) {
		cJSON_Delete(t);
		c->oom = true;
		return;
	}
	/* dnsdist's emplace: the first of two equal keys stays */
	if (cJSON_GetObjectItemCaseSensitive(c->obj, key) != NULL) {
		cJSON_Delete(t);
		return;
	}
	cJSON_AddItemToObject(c->obj, key, t);
}

int
dlb_dyn_fill_json(cJSON *obj, double now)
{
	struct json_ctx c = { obj, now, false };

	dlb_dyn_visit(now, true, json_visit, &c);
	return c.oom ? -1 : 0;
}

/* ---- maintenance ------------------------------------------------------------ */

void
dlb_dyn_tick(struct dlb_worker *const *ws, int n, double now)
{
	dlb_dyn_track_tick(ws, n, now);
	if (g.last_purge == 0)
		g.last_purge = now;
	if (g.purge_interval > 0 && now - g.last_purge >= g.purge_interval) {
		g.last_purge = now;
		dlb_dyn_purge(now);
	}
	dlb_dyn_publish();
}

void
dlb_dynblock_maintenance(void)
{
	double now = dlb_dyn_now();

	dlb_dyn_tick(dlb_daemon.workers, dlb_daemon.nworkers, now);
	dlb_dyn_top_tick(now);
}

void
dlb_dyn_reset(void)
{
	dlb_dyn_clear_all();
	free(g.recs);
	g.recs = NULL;
	g.n = g.cap = 0;
	table_deinit(&g.index);
	g.default_action = DLB_DYN_DROP;
	g.purge_interval = 60;
	g.last_purge = 0;
	dlb_dyn_track_reset();
	dlb_dyn_top_reset();
}
