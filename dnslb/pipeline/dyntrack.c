/*
 * dyntrack.c - rate measurement for dynamic blocks, and the rule groups
 * (dynblock.h).
 *
 * Per worker (struct dlb_dyn_worker, reached from worker->dyn): two windows,
 * each a fixed open-addressing table of clients (64 bytes a slot) and one of
 * qnames (168 bytes a slot), plus the list of slots used. The worker writes
 * the window that the main thread's `flip` names; it acknowledges a flip on
 * the first query after it (`ack`, release). The main thread harvests the
 * other window once the worker has left it: when `ack` shows the flip, or
 * when an epoch grace period deferred after the flip has passed (an idle
 * worker). Harvesting copies the used slots into a chunk of the history
 * (one per worker and second) and clears them; the window is then prepared
 * (the tracking spec written into it) and becomes the next flip's target.
 *
 * What a window counts follows the spec: the client mask (the finest any
 * group asks for), the rcodes and qtypes some rule or exceed* call asked for
 * (at most DLB_DYN_TRACKED of each, indexed by the spec the window was
 * written under, which the chunk keeps), whether clients and names are
 * tracked at all.
 *
 * Names: a full name is inserted while the table is under half full; past
 * that, a name not yet present is counted under its longest suffix already
 * present or insertable under three quarters full, and as a last resort at
 * the root. Every ancestor's totals therefore stay exact: the detail lost
 * is below the level where a random-subdomain flood concentrates.
 *
 * Thread: the worker for dlb_dyn_track_query/answer, main for the rest.
 */
#include <ck_epoch.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dnslb/core/daemon.h"
#include "dnslb/pipeline/dynblock.h"
#include "dnslb/pipeline/dynblock_int.h"
#include "dnslb/core/log.h"
#include "dnslb/core/rcu.h"
#include "dnslb/core/wire.h"
#include "dnslb/core/wstate.h"

#define CSLOTS 32768u			/* client slots per window */
#define CMAX (CSLOTS * 3 / 4)		/* tracked clients per window */
#define SSLOTS 8192u			/* name slots per window */
#define SMAX_FULL (SSLOTS / 2)
#define SMAX (SSLOTS * 3 / 4)
#define SNAME 128			/* longest name kept (longer: its last labels) */
#define FORGET_S 120.0			/* codes, masks and windows not asked for since */
#define LEGACY_PRE_S 10			/* history kept for exceed*() before their first call */
#define SETTLE_NS 20000000L		/* longest wait for the workers to leave a window */

struct cent {
	uint8_t addr[16];
	uint8_t family;			/* 0: empty slot */
	uint8_t pad;
	uint16_t port;			/* the first port of its range (spec.pbits) */
	uint32_t queries, responses, bytes;
	uint32_t rcode[DLB_DYN_TRACKED];
	uint32_t qtype[DLB_DYN_TRACKED];
};
_Static_assert(sizeof(struct cent) == 64, "a client slot is one cache line");

struct sent {
	uint64_t hash;
	uint32_t queries, drops, noerrors, nxdomains, servfails;
	uint32_t bytes;
	uint8_t namelen;		/* 0: empty slot */
	uint8_t name[SNAME];
	uint8_t pad[7];
};
_Static_assert(sizeof(struct sent) == 168, "name slots are 168 bytes");

struct spec {
	uint8_t v4bits, v6bits;
	uint8_t pbits;			/* IPv4 port bits (CGNAT ranges): the finest asked */
	uint8_t nrcodes, nqtypes;
	uint8_t rcodes[DLB_DYN_TRACKED];
	uint16_t qtypes[DLB_DYN_TRACKED];
	bool clients, names;
};

struct window {
	struct spec spec;		/* main: written before the flip into it */
	double start;			/* main: when the flip into it was made */
	uint32_t nc, ns;		/* slots used */
	uint64_t untracked;		/* queries of clients that found the table full */
	struct sent root;		/* names that found the table full */
	uint32_t *cused, *sused;	/* [CMAX], [SMAX]: indices used */
	struct cent *c;			/* [CSLOTS] */
	struct sent *s;			/* [SSLOTS]; NULL until names are tracked */
};

struct dlb_dyn_worker {
	_Atomic uint32_t flip;		/* main: the window is win[flip & 1] */
	_Atomic uint32_t ack;		/* worker: the last flip it saw */
	uint32_t seen;			/* worker-local copy of ack */
	struct window win[2];
	/* main thread only */
	bool pending;			/* flipped, old window not harvested yet */
	uint64_t flip_tick;
	double flip_at;			/* when the last flip was made: the old window's end */
	struct dlb_worker *w;		/* its worker (for its epoch record) */
	struct dlb_dyn_worker *next_all;
};

/* ---- the worker side -------------------------------------------------------- */

static inline struct window *
cur_window(struct dlb_dyn_worker *dw)
{
	uint32_t f = atomic_load_explicit(&dw->flip, memory_order_acquire);

	if (f != dw->seen) {
		dw->seen = f;
		/* every write to the old window happened before this store */
		atomic_store_explicit(&dw->ack, f, memory_order_release);
	}
	return &dw->win[f & 1];
}

static struct cent *
client_slot(struct window *win, const struct sockaddr *sa)
{
	uint8_t fam, addr[16];
	uint16_t port = 0;
	uint64_t h;

	if (!dlb_dyn_addr_of(sa, &fam, addr))
		return NULL;
	dlb_dyn_mask(addr, fam == AF_INET ? win->spec.v4bits : win->spec.v6bits);
	h = dlb_dyn_hash_addr(fam, 0, addr);
	if (win->spec.pbits > 0) {
		port = dlb_dyn_port_mask(dlb_dyn_port_of(sa), win->spec.pbits);
		h = dlb_dyn_hash_port(h, port, win->spec.pbits);
	}
	for (uint32_t i = (uint32_t)h & (CSLOTS - 1);; i = (i + 1) & (CSLOTS - 1)) {
		struct cent *c = &win->c[i];

		if (c->family == 0) {
			if (win->nc >= CMAX) {
				win->untracked++;
				return NULL;
			}
			c->family = fam;
			c->port = port;
			memcpy(c->addr, addr, 16);
			win->cused[win->nc++] = i;
			return c;
		}
		if (c->family == fam && c->port == port && memcmp(c->addr, addr, 16) == 0)
			return c;
	}
}

/* The slot of @name (or of a suffix of it, see the file comment). */
static struct sent *
name_slot(struct window *win, const uint8_t *name, size_t len)
{
	uint32_t limit = SMAX_FULL;

	/* names longer than a slot keep their last labels */
	while (len > SNAME && name[0] != 0) {
		len -= (size_t)name[0] + 1;
		name += name[0] + 1;
	}
	for (;;) {
		uint64_t h;

		if (len <= 1 || len > SNAME)
			return &win->root;
		h = dlb_dyn_hash_name(name, len);
		for (uint32_t i = (uint32_t)h & (SSLOTS - 1);; i = (i + 1) & (SSLOTS - 1)) {
			struct sent *s = &win->s[i];

			if (s->namelen == 0) {
				if (win->ns >= limit)
					break;
				s->hash = h;
				s->namelen = (uint8_t)len;
				memcpy(s->name, name, len);
				win->sused[win->ns++] = i;
				return s;
			}
			if (s->hash == h && s->namelen == len && memcmp(s->name, name, len) == 0)
				return s;
		}
		/* full for this name: count it under its parent */
		limit = SMAX;
		len -= (size_t)name[0] + 1;
		name += name[0] + 1;
	}
}

static int
code_index(const uint16_t *v, unsigned n, unsigned code)
{
	for (unsigned i = 0; i < n; i++)
		if (v[i] == code)
			return (int)i;
	return -1;
}

void
dlb_dyn_track_query(struct dlb_dyn_worker *dw, const struct sockaddr *client,
		    const uint8_t *qname, size_t qlen, uint16_t qtype)
{
	struct window *win = cur_window(dw);

	if (win->spec.clients) {
		struct cent *c = client_slot(win, client);

		if (c != NULL) {
			int k = code_index(win->spec.qtypes, win->spec.nqtypes, qtype);

			c->queries++;
			if (k >= 0)
				c->qtype[k]++;
		}
	}
}

void
dlb_dyn_track_answer(struct dlb_dyn_worker *dw, const struct sockaddr *client,
		     const uint8_t *qname, size_t qlen, unsigned rcode, size_t len,
		     enum dlb_dyn_from from)
{
	struct window *win = cur_window(dw);

	if (from == DLB_DYN_FROM_TIMEOUT) {
		rcode = 0;	/* dnsdist's ring entry of a timeout: a zeroed header */
		len = 0;
	}
	if (win->spec.clients && from != DLB_DYN_FROM_LOCAL) {
		struct cent *c = client_slot(win, client);

		if (c != NULL) {
			c->responses++;
			c->bytes += (uint32_t)len;
			for (unsigned i = 0; i < win->spec.nrcodes; i++)
				if (win->spec.rcodes[i] == rcode)
					c->rcode[i]++;
		}
	}
	/* dnsdist's StatNode of the response ring: a timeout is a drop */
	if (win->spec.names && win->s != NULL && qname != NULL && from != DLB_DYN_FROM_LOCAL) {
		struct sent *s = name_slot(win, qname, qlen);

		s->queries++;
		s->bytes += (uint32_t)len;
		if (from == DLB_DYN_FROM_TIMEOUT)
			s->drops++;
		else if (rcode == 0)
			s->noerrors++;
		else if (rcode == 2)
			s->servfails++;
		else if (rcode == 3)
			s->nxdomains++;
	}
}

/* ---- the main side: registrations, spec, history ----------------------------- */

struct code_reg {
	enum dlb_dyn_rule_kind kind;	/* DLB_DYN_R_QTYPE or DLB_DYN_R_RCODE */
	uint16_t code;
	double last;
};

/* One worker window's harvest. */
struct chunk {
	double t0, t1;			/* the window's time: [flip into it, flip out of it) */
	struct spec spec;
	struct cent *c;
	size_t nc;
	struct sent *s;			/* the root overflow is the last one */
	size_t ns;
};

static struct {
	struct dlb_dyn_group **groups;	/* registered (applied at least once) */
	size_t ngroups, gcap;
	struct code_reg codes[2 * DLB_DYN_TRACKED];
	size_t ncodes;
	double legacy_last;		/* last exceed* call */
	unsigned legacy_seconds;	/* their longest window lately */
	double legacy_seconds_at;
	struct chunk *chunks;		/* oldest first */
	size_t nchunks, chcap;
	struct dlb_dyn_worker *all;	/* every dlb_dyn_worker made */
	uint64_t tick;
	uint64_t grace_done;		/* flips of ticks <= this are quiescent */
	bool grace_busy;
	uint64_t grace_tick;
	ck_epoch_entry_t grace_entry;
	uint64_t untracked;		/* queries of untracked clients (log) */
} t;

struct dlb_dyn_group {
	struct dlb_dyn_rule rules[2 + 3 * DLB_DYN_TRACKED];
	size_t nrules;
	bool suffix;
	unsigned sfx_seconds, sfx_block;
	int sfx_action;
	char *sfx_reason;
	dlb_dyn_visitor_fn *visit;
	struct {
		struct dlb_netmask nm;
		bool include;
	} *ranges;
	size_t nranges;
	struct {
		uint8_t name[256];
		uint8_t len;
	} *domains;
	size_t ndomains;
	unsigned v4bits, v6bits, pbits;
	bool quiet;
	bool registered;
};

static struct code_reg *
code_find(enum dlb_dyn_rule_kind kind, uint16_t code)
{
	for (size_t i = 0; i < t.ncodes; i++)
		if (t.codes[i].kind == kind && t.codes[i].code == code)
			return &t.codes[i];
	return NULL;
}

bool
dlb_dyn_track_code(enum dlb_dyn_rule_kind kind, uint16_t code, double now)
{
	struct code_reg *r;
	size_t n = 0;

	if (kind == DLB_DYN_R_RATIO)
		kind = DLB_DYN_R_RCODE;
	if (kind != DLB_DYN_R_RCODE && kind != DLB_DYN_R_QTYPE)
		return true;
	if ((r = code_find(kind, code)) != NULL) {
		r->last = now;
		return true;
	}
	/* forget codes nobody asked for lately */
	for (size_t i = 0; i < t.ncodes; i++)
		if (now - t.codes[i].last < FORGET_S)
			t.codes[n++] = t.codes[i];
	t.ncodes = n;
	n = 0;
	for (size_t i = 0; i < t.ncodes; i++)
		n += t.codes[i].kind == kind;
	if (n >= DLB_DYN_TRACKED)
		return false;
	t.codes[t.ncodes++] = (struct code_reg){ kind, code, now };
	return true;
}

static bool
group_has_client_rules(const struct dlb_dyn_group *g)
{
	return g->nrules > 0;
}

static void
spec_now(struct spec *s, double now)
{
	bool legacy;

	memset(s, 0, sizeof(*s));
	s->v4bits = 32;
	s->v6bits = 128;
	for (size_t i = 0; i < t.ngroups; i++) {
		const struct dlb_dyn_group *g = t.groups[i];

		s->clients |= group_has_client_rules(g);
		s->names |= g->suffix;
		if (group_has_client_rules(g) && g->pbits > s->pbits)
			s->pbits = (uint8_t)g->pbits;
	}
	legacy = t.legacy_last > 0 && now - t.legacy_last < FORGET_S;
	s->clients |= legacy;
	for (size_t i = 0; i < t.ncodes; i++) {
		if (now - t.codes[i].last >= FORGET_S)
			continue;
		if (t.codes[i].kind == DLB_DYN_R_RCODE && s->nrcodes < DLB_DYN_TRACKED)
			s->rcodes[s->nrcodes++] = (uint8_t)t.codes[i].code;
		else if (t.codes[i].kind == DLB_DYN_R_QTYPE && s->nqtypes < DLB_DYN_TRACKED)
			s->qtypes[s->nqtypes++] = t.codes[i].code;
	}
	/* exceedNXDOMAINs() and exceedServFails() see what came before their
	 * first call, as in dnsdist, while a slot is spare (not registered) */
	for (int k = 0; legacy && k < 2; k++) {
		uint8_t rc = k == 0 ? DLB_RCODE_NXDOMAIN : DLB_RCODE_SERVFAIL;
		bool have = false;

		for (unsigned i = 0; i < s->nrcodes; i++)
			have |= s->rcodes[i] == rc;
		if (!have && s->nrcodes < DLB_DYN_TRACKED)
			s->rcodes[s->nrcodes++] = rc;
	}
}

/* The longest window anyone asks for (history kept that long). */
static unsigned
retention(double now)
{
	unsigned r = 0;

	for (size_t i = 0; i < t.ngroups; i++) {
		const struct dlb_dyn_group *g = t.groups[i];

		for (size_t k = 0; k < g->nrules; k++)
			if (g->rules[k].seconds > r)
				r = g->rules[k].seconds;
		if (g->suffix && g->sfx_seconds > r)
			r = g->sfx_seconds;
	}
	if (now - t.legacy_seconds_at < FORGET_S && t.legacy_seconds > r)
		r = t.legacy_seconds;
	return r;
}

static struct dlb_dyn_worker *
worker_new(void)
{
	struct dlb_dyn_worker *dw = calloc(1, sizeof(*dw));

	if (dw == NULL)
		return NULL;
	for (int i = 0; i < 2; i++) {
		struct window *w = &dw->win[i];

		w->c = calloc(CSLOTS, sizeof(*w->c));
		w->cused = malloc(CMAX * sizeof(*w->cused));
		if (w->c == NULL || w->cused == NULL)
			goto out_free;
		w->spec.v4bits = 32;
		w->spec.v6bits = 128;
	}
	return dw;
out_free:
	for (int i = 0; i < 2; i++) {
		free(dw->win[i].c);
		free(dw->win[i].cused);
	}
	free(dw);
	return NULL;
}

static void
worker_free(struct dlb_dyn_worker *dw)
{
	for (int i = 0; i < 2; i++) {
		free(dw->win[i].c);
		free(dw->win[i].cused);
		free(dw->win[i].s);
		free(dw->win[i].sused);
	}
	free(dw);
}

static int window_prepare(struct window *win, const struct spec *s);
static void spec_now(struct spec *s, double now);

static int
attach_at(struct dlb_worker *w, double now)
{
	struct dlb_dyn_worker *dw;
	struct spec s;

	if (w->dyn != NULL)
		return 0;
	dlb_dyn_seed_init();
	if ((dw = worker_new()) == NULL)
		return -1;
	/* measuring from the first query on: the current window has the spec too */
	spec_now(&s, now);
	window_prepare(&dw->win[0], &s);
	dw->win[0].start = now;
	dw->flip_at = now;
	dw->w = w;
	dw->next_all = t.all;
	t.all = dw;
	__atomic_store_n(&w->dyn, dw, __ATOMIC_RELEASE);
	return 0;
}

int
dlb_dyn_attach_worker(struct dlb_worker *w)
{
	return attach_at(w, dlb_dyn_now());
}

void
dlb_dyn_track_start(struct dlb_worker *const *ws, int n, bool maintenance, double now)
{
	struct spec s;

	if (maintenance) {
		/* exceed*() may be called from it: dnsdist's rings hold every query
		 * from the start, so measure whole addresses from the start too, and
		 * keep what its functions are usually asked for (the legacy window
		 * and codes are then those of the calls) */
		t.legacy_last = now;
		t.legacy_seconds = LEGACY_PRE_S;
		t.legacy_seconds_at = now;
	}
	spec_now(&s, now);
	if (!(s.clients || s.names))
		return;
	for (int i = 0; i < n; i++)
		if (attach_at(ws[i], now) != 0)
			dlb_log_ratelimited(DLB_LOG_ERR, "dynamic blocks: out of memory, "
					    "worker %d measures from the first maintenance on", i);
}

/* Make window @win (not the worker's current one) ready for @s. @return 0 or -1. */
static int
window_prepare(struct window *win, const struct spec *s)
{
	if (s->names && win->s == NULL) {
		win->s = calloc(SSLOTS, sizeof(*win->s));
		win->sused = malloc(SMAX * sizeof(*win->sused));
		if (win->s == NULL || win->sused == NULL) {
			free(win->s);
			free(win->sused);
			win->s = NULL;
			win->sused = NULL;
		}
	}
	win->spec = *s;
	if (s->names && win->s == NULL)
		win->spec.names = false;
	return 0;
}

/*
 * How long ago, at @now, chunk @c was measured: from its middle. dnsdist
 * counts what its rings hold from the last @seconds (cutoff = now - seconds);
 * the rules run right after the tick that closed the newest window, so a
 * rule over S seconds takes the S newest windows (ages 0.5 .. S - 0.5), and
 * one run a little later still takes the same.
 */
static inline double
chunk_age(const struct chunk *c, double now)
{
	return now - (c->t0 + c->t1) / 2;
}

static int
chunk_push(struct chunk *c)
{
	if (t.nchunks == t.chcap) {
		size_t cap = t.chcap ? t.chcap * 2 : 64;
		struct chunk *v = realloc(t.chunks, cap * sizeof(*v));

		if (v == NULL)
			return -1;
		t.chunks = v;
		t.chcap = cap;
	}
	t.chunks[t.nchunks++] = *c;
	return 0;
}

/* Copy window @win, left at @end, into a chunk (when anything asks for it) and clear it. */
static void
harvest(struct window *win, double end, bool keep)
{
	struct chunk c = { .t0 = win->start, .t1 = end, .spec = win->spec };
	bool root = win->root.queries > 0;

	if (keep && (win->nc > 0 || win->ns > 0 || root)) {
		c.c = malloc((win->nc ? win->nc : 1) * sizeof(*c.c));
		c.s = malloc((win->ns + 1) * sizeof(*c.s));
		if (c.c == NULL || c.s == NULL) {
			free(c.c);
			free(c.s);
			c.c = NULL;
			c.s = NULL;
			dlb_log_ratelimited(DLB_LOG_ERR, "dynamic blocks: out of memory, "
					    "one second of measurements lost");
		}
	}
	for (uint32_t k = 0; k < win->nc; k++) {
		struct cent *e = &win->c[win->cused[k]];

		if (c.c != NULL)
			c.c[c.nc++] = *e;
		memset(e, 0, sizeof(*e));
	}
	for (uint32_t k = 0; k < win->ns; k++) {
		struct sent *e = &win->s[win->sused[k]];

		if (c.s != NULL)
			c.s[c.ns++] = *e;
		memset(e, 0, sizeof(*e));
	}
	if (root && c.s != NULL) {
		win->root.namelen = 1;
		win->root.name[0] = 0;
		c.s[c.ns++] = win->root;
	}
	memset(&win->root, 0, sizeof(win->root));
	t.untracked += win->untracked;
	win->untracked = 0;
	win->nc = win->ns = 0;
	if (c.c != NULL && chunk_push(&c) != 0) {
		free(c.c);
		free(c.s);
	}
}

static void
grace_cb(ck_epoch_entry_t *e)
{
	(void)e;
	t.grace_done = t.grace_tick;
	t.grace_busy = false;
}

/*
 * Has the worker of @dw left the window it wrote before the flip to @f? It
 * has when it acknowledged the flip, or when it is outside its epoch section
 * (between two loop iterations, or waiting): it reads the flip only inside
 * one, and the fence between our flip and this load (its own between entering
 * and reading) makes a section it enters later see the new window.
 */
static bool
left_window(const struct dlb_dyn_worker *dw, uint32_t f)
{
	ck_epoch_record_t *rec;

	if (dlb_daemon.rcu == NULL)
		return true;	/* without a daemon (tests) the "worker" runs on this thread */
	if (atomic_load_explicit(&dw->ack, memory_order_acquire) == f)
		return true;
	/* (registered by the worker's thread when it starts) */
	rec = __atomic_load_n(&dw->w->rcu.rec, __ATOMIC_ACQUIRE);
	return rec != NULL && __atomic_load_n(&rec->active, __ATOMIC_ACQUIRE) == 0;
}

void
dlb_dyn_track_tick(struct dlb_worker *const *ws, int n, double now)
{
	struct dlb_rcu_thread *rt = dlb_daemon.rcu;
	struct spec s;
	unsigned keep_s;
	size_t drop = 0;
	bool flipped = false, waiting;
	struct timespec t0;

	t.tick++;
	spec_now(&s, now);
	keep_s = retention(now);
	for (int i = 0; i < n; i++) {
		struct dlb_worker *w = ws[i];
		struct dlb_dyn_worker *dw = w->dyn;
		uint32_t f;

		if (dw == NULL) {
			if (!(s.clients || s.names) || attach_at(w, now) != 0)
				continue;
			dw = w->dyn;
		}
		f = atomic_load_explicit(&dw->flip, memory_order_relaxed);
		if (dw->pending) {
			/* a straggler of the last tick: harvested once the epoch says so */
			if (!left_window(dw, f) && t.grace_done < dw->flip_tick)
				continue;
			harvest(&dw->win[(f + 1) & 1], dw->flip_at, keep_s > 0);
			dw->pending = false;
		}
		if (!(s.clients || s.names) && !dw->win[f & 1].spec.clients &&
		    !dw->win[f & 1].spec.names)
			continue;	/* nothing to measure: leave it idle */
		window_prepare(&dw->win[(f + 1) & 1], &s);
		dw->win[(f + 1) & 1].start = now;
		atomic_store_explicit(&dw->flip, f + 1, memory_order_release);
		dw->pending = true;
		dw->flip_tick = t.tick;
		dw->flip_at = now;
		flipped = true;
	}
	/*
	 * dnsdist's rules see every query up to the moment they run, and they run
	 * right after this: harvest the window just left now rather than a tick
	 * later. A busy worker acknowledges the flip at its next query, an idle
	 * one is outside its section; a worker still inside a long section after
	 * a short wait is harvested at the next tick (or after the grace period).
	 */
	atomic_thread_fence(memory_order_seq_cst);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		struct timespec t1;

		waiting = false;
		for (struct dlb_dyn_worker *dw = t.all; dw != NULL; dw = dw->next_all) {
			uint32_t f = atomic_load_explicit(&dw->flip, memory_order_relaxed);

			if (!dw->pending || dw->flip_tick != t.tick)
				continue;
			if (!left_window(dw, f)) {
				waiting = true;
				continue;
			}
			harvest(&dw->win[(f + 1) & 1], dw->flip_at, keep_s > 0);
			dw->pending = false;
		}
		if (!waiting)
			break;
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if ((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec) > SETTLE_NS)
			break;
		sched_yield();
	} while (waiting);
	if (flipped && waiting && rt != NULL && !t.grace_busy) {
		t.grace_busy = true;
		t.grace_tick = t.tick;
		dlb_rcu_defer(rt, &t.grace_entry, grace_cb);
	}
	if (t.untracked > 0) {
		dlb_log_ratelimited(DLB_LOG_WARN, "dynamic blocks: the client tables were full: "
				    "%llu queries were not measured",
				    (unsigned long long)t.untracked);
		t.untracked = 0;
	}
	/* forget what no rule can look at any more */
	while (drop < t.nchunks && now - t.chunks[drop].t1 >= (double)keep_s + 2) {
		free(t.chunks[drop].c);
		free(t.chunks[drop].s);
		drop++;
	}
	if (drop > 0) {
		memmove(t.chunks, t.chunks + drop, (t.nchunks - drop) * sizeof(*t.chunks));
		t.nchunks -= drop;
	}
}

/* ---- evaluation --------------------------------------------------------------- */

/* Per masked client: a value (and a total, for ratios) per rule. */
struct acc {
	uint8_t addr[16];
	uint8_t family;			/* 0: empty */
	uint8_t bits;
	uint8_t pbits;			/* a port range of a /32 (CGNAT) */
	uint16_t port;
	uint64_t v[];			/* [2 * nrules] */
};

struct accmap {
	uint8_t *mem;
	size_t stride, mask, n;
};

static int
accmap_init(struct accmap *m, size_t n, size_t nrules)
{
	size_t slots = 64;

	while (slots < n * 2)
		slots *= 2;
	m->stride = (sizeof(struct acc) + 2 * nrules * sizeof(uint64_t) + 7) & ~(size_t)7;
	m->mem = calloc(slots, m->stride);
	m->mask = slots - 1;
	m->n = 0;
	return m->mem == NULL ? -1 : 0;
}

static struct acc *
accmap_get(struct accmap *m, uint8_t family, const uint8_t addr[16], uint8_t bits,
	   uint16_t port, uint8_t pbits)
{
	uint64_t h = dlb_dyn_hash_port(dlb_dyn_hash_addr(family, bits, addr), port, pbits);

	for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
		struct acc *a = (struct acc *)(void *)(m->mem + i * m->stride);

		if (a->family == 0) {
			a->family = family;
			a->bits = bits;
			a->pbits = pbits;
			a->port = port;
			memcpy(a->addr, addr, 16);
			m->n++;
			return a;
		}
		if (a->family == family && a->port == port && memcmp(a->addr, addr, 16) == 0)
			return a;
	}
}

static uint32_t
chunk_code(const struct chunk *c, const struct cent *e, enum dlb_dyn_rule_kind kind, uint16_t code)
{
	if (kind == DLB_DYN_R_QTYPE) {
		for (unsigned i = 0; i < c->spec.nqtypes; i++)
			if (c->spec.qtypes[i] == code)
				return e->qtype[i];
	} else {
		for (unsigned i = 0; i < c->spec.nrcodes; i++)
			if (c->spec.rcodes[i] == code)
				return e->rcode[i];
	}
	return 0;
}

/* The value rule @r measures for entry @e of chunk @c (and its total, for ratios). */
static uint64_t
rule_value(const struct dlb_dyn_rule *r, const struct chunk *c, const struct cent *e,
	   uint64_t *total)
{
	*total = 0;
	switch (r->kind) {
	case DLB_DYN_R_QRATE:
		return e->queries;
	case DLB_DYN_R_RESPBYTES:
		return e->bytes;
	case DLB_DYN_R_QTYPE:
	case DLB_DYN_R_RCODE:
		return chunk_code(c, e, r->kind, r->code);
	case DLB_DYN_R_RATIO:
		*total = e->responses;
		return chunk_code(c, e, DLB_DYN_R_RCODE, r->code);
	}
	return 0;
}

/*
 * Sum, per client masked to @v4/@v6 bits, the values of @rules over their
 * windows ending at @now into @m. @return 0 or -1 (out of memory).
 */
static int
accumulate(struct accmap *m, const struct dlb_dyn_rule *rules, size_t nrules, unsigned v4,
	   unsigned v6, unsigned pbits, double now)
{
	size_t total = 0;
	unsigned longest = 0;

	for (size_t k = 0; k < nrules; k++)
		if (rules[k].seconds > longest)
			longest = rules[k].seconds;
	for (size_t i = 0; i < t.nchunks; i++)
		if (chunk_age(&t.chunks[i], now) < longest)
			total += t.chunks[i].nc;
	if (accmap_init(m, total, nrules) != 0)
		return -1;
	for (size_t i = 0; i < t.nchunks; i++) {
		const struct chunk *c = &t.chunks[i];
		double age = chunk_age(c, now);

		if (age >= longest || age < -1)
			continue;
		for (size_t j = 0; j < c->nc; j++) {
			const struct cent *e = &c->c[j];
			unsigned bits = e->family == AF_INET ? v4 : v6;
			/* dnsdist's AddressAndPortRange: IPv4 /32 only (set_masks checks) */
			unsigned pb = e->family == AF_INET && bits == 32 ? pbits : 0;
			uint8_t addr[16];
			struct acc *a;

			memcpy(addr, e->addr, 16);
			dlb_dyn_mask(addr, bits);
			a = accmap_get(m, e->family, addr, (uint8_t)bits,
				       dlb_dyn_port_mask(e->port, pb), (uint8_t)pb);
			for (size_t k = 0; k < nrules; k++) {
				uint64_t tot;

				if (age >= rules[k].seconds)
					continue;
				a->v[2 * k] += rule_value(&rules[k], c, e, &tot);
				a->v[2 * k + 1] += tot;
			}
		}
	}
	return 0;
}

static bool
rate_exceeded(const struct dlb_dyn_rule *r, double rate, uint64_t count)
{
	return rate > 0 && (double)count > rate * (double)r->seconds;
}

static bool
ratio_exceeded(const struct dlb_dyn_rule *r, double ratio, uint64_t count, uint64_t total)
{
	return ratio > 0 && total >= r->min_responses && (double)count > ratio * (double)total;
}

/* ---- groups ------------------------------------------------------------------- */

struct dlb_dyn_group *
dlb_dyn_group_new(void)
{
	struct dlb_dyn_group *g = calloc(1, sizeof(*g));

	if (g == NULL)
		return NULL;
	g->v4bits = 32;
	g->v6bits = 128;
	g->sfx_action = DLB_DYN_NONE;
	return g;
}

static void
group_unregister(struct dlb_dyn_group *g)
{
	for (size_t i = 0; i < t.ngroups; i++) {
		if (t.groups[i] == g) {
			t.groups[i] = t.groups[--t.ngroups];
			break;
		}
	}
	g->registered = false;
}

void
dlb_dyn_group_free(struct dlb_dyn_group *g)
{
	if (g == NULL)
		return;
	if (g->registered)
		group_unregister(g);
	for (size_t i = 0; i < g->nrules; i++)
		free(g->rules[i].reason);
	free(g->sfx_reason);
	free(g->ranges);
	free(g->domains);
	free(g);
}

void
dlb_dyn_group_set_rule(struct dlb_dyn_group *g, const struct dlb_dyn_rule *r)
{
	size_t i;

	for (i = 0; i < g->nrules; i++)
		if (g->rules[i].kind == r->kind &&
		    (r->kind == DLB_DYN_R_QRATE || r->kind == DLB_DYN_R_RESPBYTES ||
		     g->rules[i].code == r->code))
			break;
	if (i < g->nrules) {
		free(g->rules[i].reason);
	} else if (g->nrules == sizeof(g->rules) / sizeof(g->rules[0])) {
		free(r->reason);
		return;	/* the Lua side checks the bound first */
	} else {
		g->nrules++;
	}
	g->rules[i] = *r;
}

size_t
dlb_dyn_group_codes(const struct dlb_dyn_group *g, enum dlb_dyn_rule_kind kind, uint16_t code)
{
	uint16_t seen[3 * DLB_DYN_TRACKED + 1];
	size_t n = 0;
	bool rc = kind != DLB_DYN_R_QTYPE;

	seen[n++] = code;
	for (size_t i = 0; i < g->nrules; i++) {
		const struct dlb_dyn_rule *r = &g->rules[i];
		bool found = false;

		if (rc ? (r->kind != DLB_DYN_R_RCODE && r->kind != DLB_DYN_R_RATIO)
		       : r->kind != DLB_DYN_R_QTYPE)
			continue;
		for (size_t k = 0; k < n && !found; k++)
			found = seen[k] == r->code;
		if (!found && n < sizeof(seen) / sizeof(seen[0]))
			seen[n++] = r->code;
	}
	return n;
}

void
dlb_dyn_group_set_suffix(struct dlb_dyn_group *g, unsigned seconds, const char *reason,
			 unsigned block_seconds, int action, dlb_dyn_visitor_fn *fn)
{
	char *r = strdup(reason != NULL ? reason : "");

	if (r == NULL)
		return;
	free(g->sfx_reason);
	g->sfx_reason = r;
	g->suffix = true;
	g->sfx_seconds = seconds;
	g->sfx_block = block_seconds;
	g->sfx_action = action;
	g->visit = fn;
}

int
dlb_dyn_group_range(struct dlb_dyn_group *g, const struct dlb_netmask *nm, bool include)
{
	void *v = realloc(g->ranges, (g->nranges + 1) * sizeof(*g->ranges));

	if (v == NULL)
		return -1;
	g->ranges = v;
	g->ranges[g->nranges].nm = *nm;
	g->ranges[g->nranges].include = include;
	g->nranges++;
	return 0;
}

int
dlb_dyn_group_exclude_domain(struct dlb_dyn_group *g, const uint8_t *name, size_t len)
{
	void *v;

	if (len == 0 || len > 255)
		return -1;
	v = realloc(g->domains, (g->ndomains + 1) * sizeof(*g->domains));
	if (v == NULL)
		return -1;
	g->domains = v;
	for (size_t i = 0; i < len; i++)
		g->domains[g->ndomains].name[i] =
			(uint8_t)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
	g->domains[g->ndomains].len = (uint8_t)len;
	g->ndomains++;
	return 0;
}

void
dlb_dyn_group_set_masks(struct dlb_dyn_group *g, unsigned v4, unsigned v6, unsigned port)
{
	g->v4bits = v4;
	g->v6bits = v6;
	g->pbits = port;
}

void
dlb_dyn_group_set_quiet(struct dlb_dyn_group *g, bool quiet)
{
	g->quiet = quiet;
}

/* Does @nm (a whole masked client) fall in netmask @r? */
static bool
nm_covers(const struct dlb_netmask *r, const struct dlb_netmask *nm)
{
	uint8_t a[16];

	if (r->family != nm->family || r->bits > nm->bits)
		return false;
	memcpy(a, nm->addr, 16);
	dlb_dyn_mask(a, r->bits);
	return memcmp(a, r->addr, 16) == 0;
}

bool
dlb_dyn_group_excluded(const struct dlb_dyn_group *g, const struct dlb_netmask *nm)
{
	int best = -1;
	bool excluded = false;

	/* dnsdist's NetmaskGroup with "!" entries: the most specific match decides */
	for (size_t i = 0; i < g->nranges; i++) {
		if (!nm_covers(&g->ranges[i].nm, nm) || (int)g->ranges[i].nm.bits < best)
			continue;
		best = g->ranges[i].nm.bits;
		excluded = !g->ranges[i].include;
	}
	return excluded;
}

static bool
domain_excluded(const struct dlb_dyn_group *g, const uint8_t *name, size_t len)
{
	for (size_t off = 0;;) {
		for (size_t i = 0; i < g->ndomains; i++)
			if (g->domains[i].len == len - off &&
			    memcmp(g->domains[i].name, name + off, len - off) == 0)
				return true;
		if (off >= len || name[off] == 0)
			return false;
		off += (size_t)name[off] + 1;
	}
}

static bool
add_block(struct dlb_dyn_group *g, const struct acc *a, const struct dlb_dyn_rule *r,
	  bool warning, double now)
{
	struct dlb_netmask nm = { .family = a->family, .bits = a->bits };

	memcpy(nm.addr, a->addr, 16);
	/* (exclusions are by address, as dnsdist's) */
	if (dlb_dyn_group_excluded(g, &nm))
		return false;
	return dlb_dyn_block_range(&nm, a->port, a->pbits, r->reason, now + r->block_seconds,
				   r->action, warning, g->quiet, now);
}

/* dnsdist's order of the rules: by kind, then (std::map) by code. */
static const enum dlb_dyn_rule_kind kind_order[] = {
	DLB_DYN_R_QRATE, DLB_DYN_R_RESPBYTES, DLB_DYN_R_QTYPE, DLB_DYN_R_RCODE, DLB_DYN_R_RATIO,
};

static int
rule_order_cmp(const void *a, const void *b)
{
	const struct dlb_dyn_rule *x = *(const struct dlb_dyn_rule *const *)a;
	const struct dlb_dyn_rule *y = *(const struct dlb_dyn_rule *const *)b;
	int kx = 0, ky = 0;

	for (int i = 0; i < 5; i++) {
		if (kind_order[i] == x->kind)
			kx = i;
		if (kind_order[i] == y->kind)
			ky = i;
	}
	if (kx != ky)
		return kx - ky;
	return (int)x->code - (int)y->code;
}

static size_t
apply_clients(struct dlb_dyn_group *g, double now)
{
	const struct dlb_dyn_rule *order[sizeof(g->rules) / sizeof(g->rules[0])];
	struct accmap m;
	size_t added = 0;

	if (g->nrules == 0)
		return 0;
	if (accumulate(&m, g->rules, g->nrules, g->v4bits, g->v6bits, g->pbits, now) != 0) {
		dlb_log_ratelimited(DLB_LOG_ERR, "dynamic blocks: out of memory evaluating rules");
		return 0;
	}
	for (size_t k = 0; k < g->nrules; k++)
		order[k] = &g->rules[k];
	qsort(order, g->nrules, sizeof(order[0]), rule_order_cmp);
	for (size_t i = 0; i <= m.mask; i++) {
		const struct acc *a = (const struct acc *)(const void *)(m.mem + i * m.stride);
		enum dlb_dyn_rule_kind done = (enum dlb_dyn_rule_kind)-1;

		if (a->family == 0)
			continue;
		/* dnsdist's DynBlockRulesGroup::apply: each rule warns, then blocks;
		 * a block by the query rate or the response bytes ends the client's
		 * turn, one by a qtype, rcode or ratio rule the rest of its kind */
		for (size_t j = 0; j < g->nrules; j++) {
			const struct dlb_dyn_rule *r = order[j];
			size_t k = (size_t)(r - g->rules);
			uint64_t v = a->v[2 * k], tot = a->v[2 * k + 1];
			bool warn, over;

			if (r->kind == done)
				continue;
			if (r->kind == DLB_DYN_R_RATIO) {
				warn = ratio_exceeded(r, r->warning, v, tot);
				over = ratio_exceeded(r, r->rate, v, tot);
			} else {
				warn = rate_exceeded(r, r->warning, v);
				over = rate_exceeded(r, r->rate, v);
			}
			if (warn)
				added += add_block(g, a, r, true, now);
			if (!over)
				continue;
			added += add_block(g, a, r, false, now);
			if (r->kind == DLB_DYN_R_QRATE || r->kind == DLB_DYN_R_RESPBYTES)
				break;
			done = r->kind;
		}
	}
	free(m.mem);
	return added;
}

/* ---- the suffix stat tree ------------------------------------------------------- */

static size_t
count_labels(const uint8_t *name, size_t len)
{
	size_t n = 0;

	for (size_t i = 0; i < len && name[i] != 0; i += (size_t)name[i] + 1)
		n++;
	return n;
}

struct snode {
	const uint8_t *name;		/* into the names buffer: this suffix */
	uint8_t len;
	uint8_t labels;
	struct dlb_dyn_stat self;
	uint32_t first_child, next;	/* indices + 1; 0: none */
	uint32_t nchildren;
};

struct stree {
	struct snode *v;
	size_t n, cap;
	uint32_t *slots;		/* hash -> index + 1 */
	size_t mask;
	uint8_t *names;			/* every distinct name, copied */
	size_t names_len;
};

static uint32_t
stree_find(struct stree *st, const uint8_t *name, size_t len, uint32_t parent)
{
	uint64_t h = dlb_dyn_hash_name(name, len);
	size_t i;

	for (i = h & st->mask; st->slots[i] != 0; i = (i + 1) & st->mask) {
		struct snode *n = &st->v[st->slots[i] - 1];

		if (n->len == len && memcmp(n->name, name, len) == 0)
			return st->slots[i];
	}
	if (st->n == st->cap)
		return 0;	/* sized beforehand: cannot happen */
	st->v[st->n] = (struct snode){ .name = name, .len = (uint8_t)len };
	st->v[st->n].labels = (uint8_t)(parent == 0 ? 0 : st->v[parent - 1].labels + 1);
	if (parent != 0) {
		st->v[st->n].next = st->v[parent - 1].first_child;
		st->v[parent - 1].first_child = (uint32_t)st->n + 1;
		st->v[parent - 1].nchildren++;
	}
	st->slots[i] = (uint32_t)++st->n;
	return st->slots[i];
}

/* The node of @name (creating it and its ancestors). */
static uint32_t
stree_node(struct stree *st, const uint8_t *name, size_t len)
{
	size_t offs[128], nl = 0;
	uint32_t node;

	for (size_t off = 0; off < len && name[off] != 0 && nl < 128; off += (size_t)name[off] + 1)
		offs[nl++] = off;
	node = stree_find(st, name + len - 1, 1, 0);	/* the root */
	for (size_t k = nl; k-- > 0 && node != 0;)
		node = stree_find(st, name + offs[k], len - offs[k], node);
	return node;
}

struct visit_ctx {
	struct dlb_dyn_group *g;
	struct stree *st;
	void *ud;
	double now;
	size_t added;
};

static void
stat_add(struct dlb_dyn_stat *a, const struct dlb_dyn_stat *b)
{
	a->queries += b->queries;
	a->noerrors += b->noerrors;
	a->nxdomains += b->nxdomains;
	a->servfails += b->servfails;
	a->drops += b->drops;
	a->bytes += b->bytes;
}

/* dnsdist's StatNode::visit: children first; @total gets this subtree's total. */
static void
stree_visit(struct visit_ctx *c, uint32_t idx, struct dlb_dyn_stat *total, unsigned depth)
{
	struct snode *n = &c->st->v[idx - 1];
	struct dlb_dyn_stat sub = n->self;
	char text[DLB_WIRE_NAME_TEXT_MAX];
	char *reason = NULL;

	for (uint32_t ch = n->first_child; ch != 0 && depth < 130; ch = c->st->v[ch - 1].next)
		stree_visit(c, ch, &sub, depth + 1);
	stat_add(total, &sub);
	if (n->labels == 0)
		return;	/* never the root: blocking "." would block everything */
	if (dlb_wire_name_to_text(n->name, n->len, text, sizeof(text)) < 0)
		return;
	{
		struct dlb_dyn_node node = { text, n->labels, n->nchildren, n->name, n->len };

		if (!c->g->visit(c->ud, &node, &n->self, &sub, &reason))
			return;
	}
	if (!domain_excluded(c->g, n->name, n->len))
		c->added += dlb_dyn_block_smt(n->name, n->len,
					      reason != NULL ? reason : c->g->sfx_reason,
					      c->now + c->g->sfx_block, c->g->sfx_action,
					      c->g->quiet, c->now);
	free(reason);
}

static size_t
apply_suffixes(struct dlb_dyn_group *g, double now, void *ud)
{
	struct stree st = { 0 };
	struct visit_ctx c = { g, &st, ud, now, 0 };
	struct dlb_dyn_stat total = { 0 };
	size_t names = 0, nodes = 0;

	if (!g->suffix || g->visit == NULL)
		return 0;
	for (size_t i = 0; i < t.nchunks; i++)
		if (chunk_age(&t.chunks[i], now) < g->sfx_seconds)
			names += t.chunks[i].ns;
	if (names == 0)
		return 0;
	nodes = names + 8;	/* each name makes at most one node per label, plus the root */
	for (size_t i = 0; i < t.nchunks; i++)
		if (chunk_age(&t.chunks[i], now) < g->sfx_seconds)
			for (size_t j = 0; j < t.chunks[i].ns; j++)
				nodes += count_labels(t.chunks[i].s[j].name,
							   t.chunks[i].s[j].namelen);
	st.cap = nodes;
	st.v = calloc(nodes, sizeof(*st.v));
	{
		size_t slots = 64;

		while (slots < nodes * 2)
			slots *= 2;
		st.slots = calloc(slots, sizeof(*st.slots));
		st.mask = slots - 1;
	}
	st.names = malloc(names * SNAME);
	if (st.v == NULL || st.slots == NULL || st.names == NULL)
		goto out;
	for (size_t i = 0; i < t.nchunks; i++) {
		const struct chunk *ch = &t.chunks[i];

		if (!(chunk_age(ch, now) < g->sfx_seconds))
			continue;
		for (size_t j = 0; j < ch->ns; j++) {
			const struct sent *e = &ch->s[j];
			uint8_t *copy = st.names + st.names_len;
			uint32_t node;
			struct snode *n;

			if (domain_excluded(g, e->name, e->namelen))
				continue;
			memcpy(copy, e->name, e->namelen);
			st.names_len += e->namelen;
			node = stree_node(&st, copy, e->namelen);
			if (node == 0)
				continue;
			n = &st.v[node - 1];
			n->self.queries += e->queries;
			n->self.noerrors += e->noerrors;
			n->self.nxdomains += e->nxdomains;
			n->self.servfails += e->servfails;
			n->self.bytes += e->bytes;
			n->self.drops += e->drops;
		}
	}
	if (st.n > 0)
		stree_visit(&c, 1, &total, 0);	/* node 1 is the root: made first */
out:
	free(st.v);
	free(st.slots);
	free(st.names);
	return c.added;
}

static void
group_register(struct dlb_dyn_group *g)
{
	if (g->registered)
		return;
	if (t.ngroups == t.gcap) {
		size_t cap = t.gcap ? t.gcap * 2 : 8;
		void *v = realloc(t.groups, cap * sizeof(*t.groups));

		if (v == NULL)
			return;
		t.groups = v;
		t.gcap = cap;
	}
	t.groups[t.ngroups++] = g;
	g->registered = true;
}

void
dlb_dyn_group_register(struct dlb_dyn_group *g)
{
	group_register(g);
}

size_t
dlb_dyn_group_apply(struct dlb_dyn_group *g, double now, void *ud)
{
	size_t added;

	group_register(g);
	for (size_t i = 0; i < g->nrules; i++) {
		const struct dlb_dyn_rule *r = &g->rules[i];

		if ((r->kind == DLB_DYN_R_QTYPE || r->kind == DLB_DYN_R_RCODE ||
		     r->kind == DLB_DYN_R_RATIO) &&
		    !dlb_dyn_track_code(r->kind, r->code, now))
			dlb_log_ratelimited(DLB_LOG_ERR,
					    "dynamic blocks: more than %d distinct %s are asked "
					    "for; rule for %u not measured",
					    DLB_DYN_TRACKED,
					    r->kind == DLB_DYN_R_QTYPE ? "qtypes" : "rcodes",
					    (unsigned)r->code);
	}
	added = apply_clients(g, now);
	added += apply_suffixes(g, now, ud);
	dlb_dyn_publish();
	return added;
}

/* ---- legacy exceed* -------------------------------------------------------------- */

long
dlb_dyn_exceed(enum dlb_dyn_rule_kind kind, uint16_t code, double rate, unsigned seconds,
	       double now, dlb_dyn_exceed_fn *fn, void *ud)
{
	struct dlb_dyn_rule r = { .kind = kind, .code = code, .rate = rate, .seconds = seconds };
	struct accmap m;
	long n = 0;

	if (!dlb_dyn_track_code(kind, code, now))
		return -1;
	t.legacy_last = now;
	if (seconds >= t.legacy_seconds || now - t.legacy_seconds_at >= FORGET_S) {
		t.legacy_seconds = seconds;
		t.legacy_seconds_at = now;
	}
	if (accumulate(&m, &r, 1, 32, 128, 0, now) != 0)
		return 0;
	for (size_t i = 0; i <= m.mask; i++) {
		const struct acc *a = (const struct acc *)(const void *)(m.mem + i * m.stride);
		struct dlb_netmask nm;

		if (a->family == 0 || !((double)a->v[0] > rate * (double)seconds))
			continue;
		nm.family = a->family;
		nm.bits = a->bits;
		memcpy(nm.addr, a->addr, 16);
		fn(&nm, a->v[0], ud);
		n++;
	}
	free(m.mem);
	return n;
}

/* ---- toString ------------------------------------------------------------------ */

static void
rule_text(const struct dlb_dyn_rule *r, char *out, size_t outsz, bool ratio)
{
	char head[64];

	if (r->action != DLB_DYN_NONE)
		snprintf(head, sizeof(head), "%s ", dlb_dyn_action_name(r->action));
	else
		snprintf(head, sizeof(head), "Apply the global DynBlock action ");
	if (ratio)
		snprintf(out, outsz,
			 "%sfor %u seconds when over %f ratio during the last %u seconds, "
			 "reason: '%s'",
			 head, r->block_seconds, r->rate, r->seconds, r->reason);
	else
		snprintf(out, outsz,
			 "%sfor %u seconds when over %u during the last %u seconds, reason: '%s'",
			 head, r->block_seconds, (unsigned)r->rate, r->seconds, r->reason);
}

char *
dlb_dyn_group_text(const struct dlb_dyn_group *g, dlb_dyn_qtype_text_fn *qtype_text)
{
	size_t cap = 4096 + g->nranges * 64 + g->ndomains * 1024 + g->nrules * 1200;
	char *out = malloc(cap), line[1400], name[DLB_WIRE_NAME_TEXT_MAX], buf[64];
	size_t len = 0;
	const struct dlb_dyn_rule *q = NULL, *b = NULL;

	if (out == NULL)
		return NULL;
#define ADD(...) len += (size_t)snprintf(out + len, cap - len, __VA_ARGS__)
	for (size_t i = 0; i < g->nrules; i++) {
		if (g->rules[i].kind == DLB_DYN_R_QRATE)
			q = &g->rules[i];
		else if (g->rules[i].kind == DLB_DYN_R_RESPBYTES)
			b = &g->rules[i];
	}
	line[0] = '\0';
	if (q != NULL)
		rule_text(q, line, sizeof(line), false);
	ADD("Query rate rule: %s\n", line);
	line[0] = '\0';
	if (b != NULL)
		rule_text(b, line, sizeof(line), false);
	ADD("Response rate rule: %s\n", line);
	line[0] = '\0';
	if (g->suffix) {
		struct dlb_dyn_rule s = { .action = g->sfx_action, .block_seconds = g->sfx_block,
					  .seconds = g->sfx_seconds, .reason = g->sfx_reason };

		rule_text(&s, line, sizeof(line), false);
	}
	ADD("SuffixMatch rule: %s\n", line);
	ADD("RCode rules: \n");
	for (int ratio = 0; ratio < 2; ratio++) {
		for (size_t i = 0; i < g->nrules; i++) {
			const struct dlb_dyn_rule *r = &g->rules[i];
			const char *rc;

			if (r->kind != (ratio ? DLB_DYN_R_RATIO : DLB_DYN_R_RCODE))
				continue;
			rc = dlb_wire_rcode_text(r->code);
			if (rc == NULL) {
				snprintf(buf, sizeof(buf), "Err#%u", (unsigned)r->code);
				rc = buf;
			}
			rule_text(r, line, sizeof(line), ratio);
			ADD("- %s: %s\n", rc, line);
		}
	}
	ADD("QType rules: \n");
	for (size_t i = 0; i < g->nrules; i++) {
		const struct dlb_dyn_rule *r = &g->rules[i];

		if (r->kind != DLB_DYN_R_QTYPE)
			continue;
		rule_text(r, line, sizeof(line), false);
		ADD("- %s: %s\n", qtype_text(r->code, buf, sizeof(buf)), line);
	}
	/* dnsdist's NetmaskGroup::toString and SuffixMatchNode::toString */
	ADD("Excluded Subnets: ");
	for (size_t i = 0; i < g->nranges; i++) {
		dlb_netmask_format(&g->ranges[i].nm, name, sizeof(name));
		ADD("%s%s%s", i ? ", " : "", g->ranges[i].include ? "!" : "", name);
	}
	ADD("\nExcluded Domains: ");
	for (size_t i = 0; i < g->ndomains; i++) {
		if (dlb_wire_name_to_text(g->domains[i].name, g->domains[i].len, name,
					  sizeof(name)) < 0)
			continue;
		ADD("%s%s", i ? ", " : "", name);
	}
	ADD("\n");
#undef ADD
	return out;
}

/* ---- tests --------------------------------------------------------------------- */

void
dlb_dyn_track_reset(void)
{
	while (t.ngroups > 0)
		group_unregister(t.groups[t.ngroups - 1]);
	free(t.groups);
	for (size_t i = 0; i < t.nchunks; i++) {
		free(t.chunks[i].c);
		free(t.chunks[i].s);
	}
	free(t.chunks);
	while (t.all != NULL) {
		struct dlb_dyn_worker *dw = t.all;

		t.all = dw->next_all;
		worker_free(dw);
	}
	memset(&t, 0, sizeof(t));
}
