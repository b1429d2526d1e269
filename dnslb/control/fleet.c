/*
 * fleet.c - shared dynamic blocks and the fleet view through Redis
 * (fleet.h, docs/fleet.md).
 *
 * Everything runs on the main loop, over the control connection (commands)
 * and the pub/sub one (the "<ns>:blocks" channel). Nothing here waits: a
 * command either goes out now or the work is redone later from local state.
 *
 * Writes of this node's blocks go through a queue drained while fewer than
 * OUT_IN_FLIGHT commands of ours wait for replies, so a burst of blocks
 * (a rule group blocking thousands of clients) never hits the connection's
 * maxInFlight. While Redis is down nothing is queued: the local store is the
 * truth, and each (re)connection re-writes every block of this node in
 * force (SET ... PX, idempotent) and announces it again, so another node
 * that resynchronised before that write still hears of it.
 *
 * Three scanners walk the keyspace with SCAN MATCH COUNT (never KEYS), one
 * batch at a time: "resync" loads the fleet's blocks (MGET per batch),
 * "delete" removes block keys for clearDynBlocks()/clearFleetDynBlocks()
 * (UNLINK per batch, then the control announcement), "view" reads every
 * node's hash (HGETALL per key) into a new copy swapped in when complete.
 * A scanner's replies carry its generation: a restart (a clear, a
 * disconnect) makes the replies still in flight harmless.
 *
 * Clears: the store is the truth for this node's blocks, so a periodic
 * resync ignores keys of this node; only the first complete resync after
 * startup loads them back (a restarted node gets its blocks again). A
 * clearDynBlocks() while Redis is down is remembered and carried out on the
 * next connection, before the re-writes.
 */
#include "dnslb/control/fleet.h"
#include "dnslb/core/util.h"

#include <cjson/cJSON.h>
#include <ev.h>
#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/core/buf.h"
#include "dnslb/core/daemon.h"
#include "dnslb/core/log.h"
#include "dnslb/control/metrics.h"
#include "dnslb/core/netmask.h"
#include "dnslb/store/redis.h"
#include "dnslb/core/wire.h"

#ifndef DLB_VERSION
#define DLB_VERSION "unknown"
#endif

#define OUT_IN_FLIGHT	128		/* block writes of ours waiting for replies */
#define OUT_QUEUE_MAX	16384		/* queued writes; beyond, all re-written later */
#define SCAN_COUNT	"500"
#define FLEET_RESYNC	30.0		/* s between full resyncs (missed announcements) */
#define NODE_TTL_MS	"5000"		/* a node's hash lives this long without a write */
#define VIEW_MAX	1024		/* nodes in the fleet view */
#define KEY_MAX		1400		/* a key: ns + node (escaped) + name text */

/* ---- encoding ------------------------------------------------------------------ */

static bool
plain_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '_' || c == '-';
}

/* @s %XX-escaped outside [A-Za-z0-9._-] into @out. @return length, or -1 when it does not fit. */
static int
escape_node(const char *s, char *out, size_t outsz)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;

		if (plain_char(c)) {
			if (o + 1 >= outsz)
				return -1;
			out[o++] = (char)c;
		} else {
			if (o + 3 >= outsz)
				return -1;
			out[o++] = '%';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		}
	}
	if (o >= outsz)
		return -1;
	out[o] = '\0';
	return (int)o;
}

/* Undo escape_node() on @len bytes at @p. @return 0, or -1 when malformed or too long. */
static int
unescape_node(const char *p, size_t len, char *out, size_t outsz)
{
	size_t o = 0;

	if (len == 0)
		return -1;
	for (size_t i = 0; i < len; i++) {
		int c = (unsigned char)p[i];

		if (c == '%') {
			int hi, lo;

			if (i + 2 >= len)
				return -1;
			hi = dlb_hexval(p[i + 1]);
			lo = dlb_hexval(p[i + 2]);
			if (hi < 0 || lo < 0)
				return -1;
			c = hi << 4 | lo;
			i += 2;
		} else if (!plain_char((unsigned char)c)) {
			return -1;
		}
		if (c == 0 || o + 1 >= outsz)
			return -1;
		out[o++] = (char)c;
	}
	out[o] = '\0';
	return 0;
}

/* A complete, uncompressed wire name of exactly @len bytes? */
static bool
wire_name_ok(const uint8_t *n, size_t len)
{
	size_t i = 0;

	if (len == 0 || len > DLB_MAX_NAME)
		return false;
	while (i < len) {
		if (n[i] == 0)
			return i + 1 == len;
		if (n[i] > 63)
			return false;
		i += (size_t)n[i] + 1;
	}
	return false;
}

int
dlb_fleet_encode_block(const struct dlb_dyn_info *b, const char *origin, char *out, size_t outsz)
{
	char key[2 * DLB_MAX_NAME + 1], org[3 * DLB_FLEET_NODE_MAX];
	const char *reason = b->reason != NULL ? b->reason : "";
	size_t rlen = strnlen(reason, DLB_FLEET_REASON_MAX);
	long long until_ms;
	int n;

	if (!dlb_dyn_action_valid(b->action) || escape_node(origin, org, sizeof(org)) <= 0 ||
	    !(b->until > 0 && b->until < 1e13))
		return -1;
	if (b->smt) {
		static const char hex[] = "0123456789abcdef";

		if (!wire_name_ok(b->name, b->namelen))
			return -1;
		for (size_t i = 0; i < b->namelen; i++) {
			key[2 * i] = hex[b->name[i] >> 4];
			key[2 * i + 1] = hex[b->name[i] & 15];
		}
		key[2 * b->namelen] = '\0';
	} else {
		if (b->nm.family != AF_INET && b->nm.family != AF_INET6)
			return -1;
		dlb_netmask_format(&b->nm, key, sizeof(key));
	}
	until_ms = (long long)(b->until * 1000.0 + 0.5);
	n = snprintf(out, outsz, "1|B|%c|%s|%lld|%d|%d|%s|%.*s", b->smt ? 's' : 'n', key, until_ms,
		     b->action, b->warning ? 1 : 0, org, (int)rlen, reason);
	if (n < 0 || (size_t)n >= outsz)
		return -1;
	return n;
}

int
dlb_fleet_encode_control(enum dlb_fleet_msg_kind kind, const char *origin, char *out,
			 size_t outsz)
{
	char org[3 * DLB_FLEET_NODE_MAX];
	int n;

	if (kind == DLB_FLEET_MSG_BLOCK || escape_node(origin, org, sizeof(org)) <= 0)
		return -1;
	n = snprintf(out, outsz, "1|%c|%s", kind == DLB_FLEET_MSG_CLEAR ? 'C' : 'X', org);
	if (n < 0 || (size_t)n >= outsz)
		return -1;
	return n;
}

/* The next '|'-terminated field of [*p, end): its start and length. @return false at the end. */
static bool
field(const char **p, const char *end, const char **f, size_t *flen)
{
	const char *bar = memchr(*p, '|', (size_t)(end - *p));

	if (bar == NULL)
		return false;
	*f = *p;
	*flen = (size_t)(bar - *p);
	*p = bar + 1;
	return true;
}

/* Decimal digits only (no sign, no spaces), at most @maxdigits. */
static bool
parse_uint(const char *f, size_t len, size_t maxdigits, unsigned long long *out)
{
	unsigned long long v = 0;

	if (len == 0 || len > maxdigits)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (f[i] < '0' || f[i] > '9')
			return false;
		v = v * 10 + (unsigned long long)(f[i] - '0');
	}
	*out = v;
	return true;
}

int
dlb_fleet_decode(const char *p, size_t len, struct dlb_fleet_msg *m)
{
	const char *end, *f;
	size_t flen;
	unsigned long long until_ms, action;
	char text[64];
	bool smt;

	memset(m, 0, sizeof(*m));
	if (p == NULL || len < 4 || len > DLB_FLEET_MSG_MAX || memchr(p, '\0', len) != NULL)
		return -1;
	end = p + len;
	if (!field(&p, end, &f, &flen) || flen != 1 || f[0] != '1')
		return -1;
	if (!field(&p, end, &f, &flen) || flen != 1)
		return -1;
	if (f[0] == 'C' || f[0] == 'X') {
		m->kind = f[0] == 'C' ? DLB_FLEET_MSG_CLEAR : DLB_FLEET_MSG_CLEARALL;
		return unescape_node(p, (size_t)(end - p), m->origin, sizeof(m->origin));
	}
	if (f[0] != 'B')
		return -1;
	m->kind = DLB_FLEET_MSG_BLOCK;
	/* n|s */
	if (!field(&p, end, &f, &flen) || flen != 1 || (f[0] != 'n' && f[0] != 's'))
		return -1;
	smt = f[0] == 's';
	m->b.smt = smt;
	/* key */
	if (!field(&p, end, &f, &flen) || flen == 0)
		return -1;
	if (smt) {
		if (flen % 2 != 0 || flen / 2 > DLB_MAX_NAME)
			return -1;
		for (size_t i = 0; i < flen / 2; i++) {
			int hi = dlb_hexval(f[2 * i]), lo = dlb_hexval(f[2 * i + 1]);

			if (hi < 0 || lo < 0)
				return -1;
			m->b.name[i] = (uint8_t)(hi << 4 | lo);
			if (m->b.name[i] >= 'A' && m->b.name[i] <= 'Z')
				m->b.name[i] = (uint8_t)(m->b.name[i] + 32);
		}
		m->b.namelen = (uint8_t)(flen / 2);
		if (!wire_name_ok(m->b.name, m->b.namelen))
			return -1;
	} else {
		if (flen >= sizeof(text))
			return -1;
		memcpy(text, f, flen);
		text[flen] = '\0';
		if (strchr(text, '/') == NULL || dlb_netmask_parse(text, &m->b.nm) != 0)
			return -1;
	}
	/* until (ms), action, warning */
	if (!field(&p, end, &f, &flen) || !parse_uint(f, flen, 15, &until_ms) || until_ms == 0)
		return -1;
	m->b.until = (double)until_ms / 1000.0;
	if (!field(&p, end, &f, &flen) || !parse_uint(f, flen, 3, &action) ||
	    !dlb_dyn_action_valid((int)action))
		return -1;
	m->b.action = (int)action;
	if (!field(&p, end, &f, &flen) || flen != 1 || (f[0] != '0' && f[0] != '1') ||
	    (smt && f[0] == '1'))
		return -1;
	m->b.warning = f[0] == '1';
	/* origin, then the reason: the rest */
	if (!field(&p, end, &f, &flen) ||
	    unescape_node(f, flen, m->origin, sizeof(m->origin)) != 0)
		return -1;
	if ((size_t)(end - p) > DLB_FLEET_REASON_MAX)
		return -1;
	memcpy(m->reason, p, (size_t)(end - p));
	m->reason[end - p] = '\0';
	m->b.reason = m->reason;
	m->b.origin = m->origin;
	return 0;
}

int
dlb_fleet_block_key(const struct dlb_dyn_info *b, const char *origin, char *out, size_t outsz)
{
	char org[3 * DLB_FLEET_NODE_MAX], key[DLB_WIRE_NAME_TEXT_MAX];
	int n;

	if (escape_node(origin, org, sizeof(org)) <= 0)
		return -1;
	if (b->smt) {
		if (dlb_wire_name_to_text(b->name, b->namelen, key, sizeof(key)) < 0)
			return -1;
	} else {
		dlb_netmask_format(&b->nm, key, sizeof(key));
	}
	n = snprintf(out, outsz, "%s:block:%s:%c:%s", dlb_redis_settings.ns, org,
		     b->smt ? 's' : 'n', key);
	if (n < 0 || (size_t)n >= outsz)
		return -1;
	return n;
}

/* ---- state ----------------------------------------------------------------------- */

struct out {
	char *key, *val;
	size_t klen, vlen;
	double until;
};

enum { SC_RESYNC, SC_DELETE, SC_VIEW, SC__N };

struct scanner;
typedef void scan_batch_fn(struct scanner *s, const struct redisReply *keys);
typedef void scan_reply_fn(struct scanner *s, const struct redisReply *reply);
typedef void scan_done_fn(struct scanner *s, bool ok);

struct scanner {
	const char *name;
	char pattern[KEY_MAX];
	char cursor[32];
	bool running, again;
	unsigned gen;			/* replies of another generation are ignored */
	unsigned pending;		/* batch commands in flight */
	scan_batch_fn *batch;
	scan_reply_fn *reply;
	scan_done_fn *done;
};

static struct {
	bool started;
	struct ev_loop *loop;
	struct dlb_redis *ctl, *sub;
	ev_timer tick;			/* 1 s: figures, view, resync, reconnections */
	ev_timer publish;		/* 0 s: publish the store once after a burst of messages */
	char channel[128];
	char node_key[KEY_MAX];

	struct out *q;			/* ring of block writes */
	size_t qhead, qn;
	unsigned out_in_flight;
	bool resend_all;		/* re-write every block of ours in force, once drained */
	size_t resend_next;		/* ... from this one (in dlb_dyn_visit()'s order) */

	bool ctl_seen_up, sub_seen_up;	/* the (re)connection was handled */
	bool first_sync_done;		/* this node's own keys were loaded once */
	bool clear_pending;		/* clearDynBlocks() while Redis was down */
	bool clearall_pending;
	bool resync_after_delete;	/* a resync was asked for during a delete scan */
	int del_kind;			/* DLB_FLEET_MSG_CLEAR or _CLEARALL: the delete's */
	double last_resync;

	struct scanner sc[SC__N];

	/* the fleet view */
	struct dlb_fleet_node *view, *building;
	size_t nview, nbuilding;
	double view_as_of;

	/* figures of the last tick, for the rate */
	double last_queries, last_t;
	bool have_last;

	struct dlb_fleet_stats st;
} F;

static const char *
self(void)
{
	return dlb_redis_settings.node;
}

void
dlb_fleet_get_stats(struct dlb_fleet_stats *out)
{
	*out = F.st;
}

static bool
ctl_up(void)
{
	return F.started && dlb_redis_is_up(F.ctl);
}

/* ---- scanners ---------------------------------------------------------------------- */

static void *
scan_ud(const struct scanner *s)
{
	return (void *)(uintptr_t)(((uintptr_t)s->gen << 2) | (uintptr_t)(s - F.sc));
}

/* The scanner of @ud if its generation is still current, else NULL. */
static struct scanner *
scan_of(void *ud)
{
	uintptr_t v = (uintptr_t)ud;
	struct scanner *s;

	if ((v & 3) >= SC__N)
		return NULL;
	s = &F.sc[v & 3];
	if (!F.started || !s->running || (v >> 2) != (uintptr_t)s->gen)
		return NULL;
	return s;
}

static void scan_reply_cb(struct redisReply *reply, void *ud);
static void scan_start(struct scanner *s);

static void
scan_finish(struct scanner *s, bool ok)
{
	s->running = false;
	s->gen++;
	s->done(s, ok);
	if (s->again) {
		s->again = false;
		scan_start(s);
	}
}

static void
scan_send(struct scanner *s)
{
	const char *argv[] = { "SCAN", s->cursor, "MATCH", s->pattern, "COUNT", SCAN_COUNT };
	size_t argvlen[6];

	for (int i = 0; i < 6; i++)
		argvlen[i] = strlen(argv[i]);
	if (dlb_redis_command(F.ctl, scan_reply_cb, scan_ud(s), 0, 6, argv, argvlen) != 0)
		scan_finish(s, false);
}

static void
scan_start(struct scanner *s)
{
	if (s->running) {
		s->again = true;
		return;
	}
	if (!ctl_up())
		return;
	s->running = true;
	s->pending = 0;
	s->gen++;
	snprintf(s->cursor, sizeof(s->cursor), "0");
	scan_send(s);
}

/* Start over: replies in flight are ignored from now on. */
static void
scan_restart(struct scanner *s)
{
	if (s->running) {
		s->running = false;
		s->gen++;
	}
	scan_start(s);
}

/*
 * Load the fleet's blocks again, from the start. While a delete scan runs
 * the resync waits for its end: it would read keys about to go.
 */
static void
resync_request(void)
{
	struct scanner *s = &F.sc[SC_RESYNC];

	if (F.sc[SC_DELETE].running || F.clear_pending || F.clearall_pending) {
		if (s->running) {
			s->running = false;
			s->gen++;
		}
		s->again = false;
		F.resync_after_delete = true;
		return;
	}
	scan_restart(s);
}

/* The batch's commands are done: next SCAN, or the end. */
static void
scan_next(struct scanner *s)
{
	if (strcmp(s->cursor, "0") == 0)
		scan_finish(s, true);
	else
		scan_send(s);
}

static void
scan_reply_cb(struct redisReply *reply, void *ud)
{
	struct scanner *s = scan_of(ud);
	const struct redisReply *cur, *keys;
	unsigned gen;

	if (s == NULL)
		return;
	gen = s->gen;
	if (reply == NULL || reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
	    (cur = reply->element[0])->type != REDIS_REPLY_STRING ||
	    (keys = reply->element[1])->type != REDIS_REPLY_ARRAY ||
	    cur->len >= sizeof(s->cursor)) {
		scan_finish(s, false);
		return;
	}
	memcpy(s->cursor, cur->str, cur->len);
	s->cursor[cur->len] = '\0';
	s->pending = 0;
	if (keys->elements > 0)
		s->batch(s, keys);
	/* the batch may have ended this scan, and a new one may have started */
	if (s->running && s->gen == gen && s->pending == 0)
		scan_next(s);
}

static void
batch_reply_cb(struct redisReply *reply, void *ud)
{
	struct scanner *s = scan_of(ud);
	unsigned gen;

	if (s == NULL)
		return;
	if (reply == NULL) {
		scan_finish(s, false);
		return;
	}
	gen = s->gen;
	s->reply(s, reply);
	if (s->running && s->gen == gen && s->pending > 0 && --s->pending == 0)
		scan_next(s);
}

/* One command of a batch; the scanner ends on failure. */
static bool
batch_send(struct scanner *s, int argc, const char **argv, const size_t *argvlen)
{
	if (dlb_redis_command(F.ctl, batch_reply_cb, scan_ud(s), 0, argc, argv, argvlen) != 0) {
		scan_finish(s, false);
		return false;
	}
	s->pending++;
	return true;
}

/* One command over every key of @keys: "<cmd> key1 key2 ...". */
static void
batch_keys(struct scanner *s, const char *cmd, const struct redisReply *keys)
{
	size_t n = keys->elements;
	const char **argv = malloc((n + 1) * sizeof(*argv));
	size_t *argvlen = malloc((n + 1) * sizeof(*argvlen));
	int argc = 1;

	if (argv == NULL || argvlen == NULL) {
		free(argv);
		free(argvlen);
		scan_finish(s, false);
		return;
	}
	argv[0] = cmd;
	argvlen[0] = strlen(cmd);
	for (size_t i = 0; i < n; i++) {
		if (keys->element[i]->type != REDIS_REPLY_STRING)
			continue;
		argv[argc] = keys->element[i]->str;
		argvlen[argc++] = keys->element[i]->len;
	}
	if (argc > 1)
		(void)batch_send(s, argc, argv, argvlen);
	free(argv);
	free(argvlen);
}

/* ---- applying what the fleet says ------------------------------------------------- */

static void
publish_soon(void)
{
	if (!ev_is_active(&F.publish))
		ev_timer_start(F.loop, &F.publish);
}

static void
publish_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)loop;
	(void)t;
	(void)revents;
	dlb_dyn_publish();
}

/*
 * A block value or announcement @p. @loaded: read by a resync (own blocks
 * are taken back only by the first one). @return false when malformed.
 */
static bool
apply(const char *p, size_t len, bool loaded)
{
	struct dlb_fleet_msg m;
	bool own;

	if (dlb_fleet_decode(p, len, &m) != 0) {
		F.st.malformed++;
		dlb_log_ratelimited(DLB_LOG_WARN, "fleet: ignored a malformed %s from Redis",
				    loaded ? "block" : "announcement");
		return false;
	}
	own = strcmp(m.origin, self()) == 0;
	switch (m.kind) {
	case DLB_FLEET_MSG_BLOCK:
		if (loaded && m.b.warning)
			return true;
		if (own && (!loaded || F.first_sync_done))
			return true;	/* our own announcement, or our store knows better */
		if (!(m.b.until > dlb_dyn_now()))
			return true;
		if (dlb_dyn_block_fleet(&m.b, own ? NULL : m.origin, dlb_dyn_now())) {
			if (!own)
				F.st.received++;
			publish_soon();
		}
		return true;
	case DLB_FLEET_MSG_CLEAR:
		if (loaded)
			break;		/* not a key's value */
		if (!own && dlb_dyn_clear_origin(m.origin) > 0)
			dlb_info("fleet: cleared the dynamic blocks of %s, as it did", m.origin);
		resync_request();
		return true;
	case DLB_FLEET_MSG_CLEARALL:
		if (loaded)
			break;
		if (!own) {
			dlb_info("fleet: every dynamic block cleared, by %s", m.origin);
			dlb_dyn_clear_all();
		}
		resync_request();
		return true;
	}
	F.st.malformed++;
	return false;
}

static void
message_cb(const char *channel, const char *payload, size_t len, void *ud)
{
	(void)channel;
	(void)ud;
	if (F.started)
		(void)apply(payload, len, false);
}

/* resync: MGET each batch of block keys, apply the values */
static void
resync_batch(struct scanner *s, const struct redisReply *keys)
{
	batch_keys(s, "MGET", keys);
}

static void
resync_reply(struct scanner *s, const struct redisReply *reply)
{
	(void)s;
	if (reply->type != REDIS_REPLY_ARRAY)
		return;
	for (size_t i = 0; i < reply->elements; i++) {
		const struct redisReply *v = reply->element[i];

		if (v->type == REDIS_REPLY_STRING)
			(void)apply(v->str, v->len, true);
		/* nil: expired or deleted since SCAN saw it */
	}
}

static void
resync_done(struct scanner *s, bool ok)
{
	(void)s;
	if (ok) {
		F.first_sync_done = true;
		F.last_resync = ev_now(F.loop);
	}
	dlb_dyn_publish();
}

/* ---- writing this node's blocks ------------------------------------------------------ */

static void drain(void);

static void
out_free(struct out *o)
{
	free(o->key);
	free(o->val);
	memset(o, 0, sizeof(*o));
}

static void
queue_clear(void)
{
	while (F.qn > 0) {
		out_free(&F.q[F.qhead]);
		F.qhead = (F.qhead + 1) % OUT_QUEUE_MAX;
		F.qn--;
	}
	F.qhead = 0;
}

/* A write was lost (queue full, out of memory): every block again, from the first. */
static void
resend_later(void)
{
	F.resend_all = true;
	F.resend_next = 0;
}

static void
enqueue(const struct dlb_dyn_info *b)
{
	char key[KEY_MAX], val[DLB_FLEET_MSG_MAX + 1];
	int klen, vlen;
	struct out *o;

	/* a port range (CGNAT) stays on its node: the wire format keys on netmasks,
	 * and the whole address would block every subscriber behind it */
	if (b->warning || b->origin != NULL || b->pbits > 0)
		return;
	klen = dlb_fleet_block_key(b, self(), key, sizeof(key));
	vlen = dlb_fleet_encode_block(b, self(), val, sizeof(val));
	if (klen < 0 || vlen < 0) {
		dlb_log_ratelimited(DLB_LOG_WARN, "fleet: a dynamic block could not be encoded");
		return;
	}
	if ((F.q == NULL && (F.q = calloc(OUT_QUEUE_MAX, sizeof(*F.q))) == NULL) ||
	    F.qn == OUT_QUEUE_MAX) {
		resend_later();
		return;
	}
	o = &F.q[(F.qhead + F.qn) % OUT_QUEUE_MAX];
	o->key = malloc((size_t)klen + 1);
	o->val = malloc((size_t)vlen + 1);
	if (o->key == NULL || o->val == NULL) {
		out_free(o);
		resend_later();
		return;
	}
	memcpy(o->key, key, (size_t)klen + 1);
	memcpy(o->val, val, (size_t)vlen + 1);
	o->klen = (size_t)klen;
	o->vlen = (size_t)vlen;
	o->until = b->until;
	F.qn++;
}

static void
write_reply_cb(struct redisReply *reply, void *ud)
{
	if (F.out_in_flight > 0)
		F.out_in_flight--;
	if (ud != NULL && reply != NULL && reply->type != REDIS_REPLY_ERROR)
		F.st.published++;	/* the PUBLISH went through */
	if (F.started)
		drain();
}

struct resend_ctx {
	size_t i, from;
	bool full;
};

static void
resend_visit(const struct dlb_dyn_info *b, void *ud)
{
	struct resend_ctx *c = ud;
	size_t i = c->i++;

	if (i < c->from || c->full || b->warning || b->origin != NULL)
		return;
	if (F.qn == OUT_QUEUE_MAX) {
		/* the rest once these are out: a store larger than the queue goes in parts */
		c->full = true;
		F.resend_all = true;
		F.resend_next = i;
		return;
	}
	enqueue(b);
}

/* Queue the blocks of this node in force, from F.resend_next on. */
static void
resend_all(void)
{
	struct resend_ctx c = { .from = F.resend_next };

	F.resend_all = false;
	F.resend_next = 0;
	dlb_dyn_visit(dlb_dyn_now(), true, resend_visit, &c);
}

static void
drain(void)
{
	double now = dlb_dyn_now();

	if (!ctl_up() || F.sc[SC_DELETE].running || F.clear_pending || F.clearall_pending)
		return;
	if (F.qn == 0 && F.resend_all)
		resend_all();
	while (F.qn > 0 && F.out_in_flight + 2 <= OUT_IN_FLIGHT) {
		struct out *o = &F.q[F.qhead];
		long long px = (long long)((o->until - now) * 1000.0);
		char pxs[32];
		const char *set[] = { "SET", o->key, o->val, "PX", pxs };
		size_t setlen[5] = { 3, o->klen, o->vlen, 2, 0 };
		const char *pub[] = { "PUBLISH", F.channel, o->val };
		size_t publen[3] = { 7, strlen(F.channel), o->vlen };

		if (px > 0) {
			setlen[4] = (size_t)snprintf(pxs, sizeof(pxs), "%lld", px);
			if (dlb_redis_command(F.ctl, write_reply_cb, NULL, 0, 5, set, setlen) != 0)
				return;	/* down or full: the queue waits */
			F.out_in_flight++;
			if (dlb_redis_command(F.ctl, write_reply_cb, &F, 0, 3, pub, publen) == 0)
				F.out_in_flight++;
		}
		out_free(o);
		F.qhead = (F.qhead + 1) % OUT_QUEUE_MAX;
		F.qn--;
	}
	if (F.qn == 0 && F.resend_all)
		resend_all();
}

/* ---- clears ---------------------------------------------------------------------------- */

static void
delete_batch(struct scanner *s, const struct redisReply *keys)
{
	batch_keys(s, "UNLINK", keys);
}

static void
ignore_reply(struct scanner *s, const struct redisReply *reply)
{
	(void)s;
	(void)reply;
}

static void delete_start(void);

static void
delete_done(struct scanner *s, bool ok)
{
	char msg[DLB_FLEET_MSG_MAX];
	int n;

	(void)s;
	if (!ok) {
		/* the connection went away: again at the next one */
		if (F.del_kind == DLB_FLEET_MSG_CLEARALL)
			F.clearall_pending = true;
		else
			F.clear_pending = true;
		return;
	}
	n = dlb_fleet_encode_control((enum dlb_fleet_msg_kind)F.del_kind, self(), msg, sizeof(msg));
	if (n > 0) {
		const char *argv[] = { "PUBLISH", F.channel, msg };
		size_t argvlen[] = { 7, strlen(F.channel), (size_t)n };

		(void)dlb_redis_command(F.ctl, NULL, NULL, 0, 3, argv, argvlen);
	}
	if (F.clearall_pending || F.clear_pending) {
		delete_start();
		return;
	}
	if (F.resync_after_delete) {
		F.resync_after_delete = false;
		scan_restart(&F.sc[SC_RESYNC]);
	}
	drain();
}

/* Carry out the pending clear (the fleet-wide one first: it covers ours). */
static void
delete_start(void)
{
	struct scanner *s = &F.sc[SC_DELETE];
	char org[3 * DLB_FLEET_NODE_MAX];

	if (s->running || !ctl_up())
		return;
	if (F.clearall_pending) {
		F.clearall_pending = F.clear_pending = false;
		F.del_kind = DLB_FLEET_MSG_CLEARALL;
		snprintf(s->pattern, sizeof(s->pattern), "%s:block:*", dlb_redis_settings.ns);
	} else if (F.clear_pending) {
		F.clear_pending = false;
		F.del_kind = DLB_FLEET_MSG_CLEAR;
		if (escape_node(self(), org, sizeof(org)) <= 0)
			return;
		snprintf(s->pattern, sizeof(s->pattern), "%s:block:%s:*", dlb_redis_settings.ns,
			 org);
	} else {
		return;
	}
	/* the writes queued so far are older than the clear */
	queue_clear();
	F.resend_all = false;
	F.resend_next = 0;
	scan_start(s);
}

/* dynblock.c's hook */
static void
dyn_hook(enum dlb_dyn_event ev, const struct dlb_dyn_info *b, void *ud)
{
	(void)ud;
	if (!F.started)
		return;
	switch (ev) {
	case DLB_DYN_EV_RAISED:
		if (ctl_up() && F.ctl_seen_up) {
			enqueue(b);
			drain();
		}
		/* else: re-written with every block in force at the (re)connection */
		break;
	case DLB_DYN_EV_CLEARING:
		F.clear_pending = true;
		resync_request();
		delete_start();
		break;
	}
}

int
dlb_fleet_clear_all(void)
{
	dlb_dyn_clear_all();
	if (!ctl_up())
		return -1;	/* the other nodes never hear of it */
	F.clearall_pending = true;
	resync_request();
	delete_start();
	return 0;
}

/* ---- (re)connections ------------------------------------------------------------------- */

static void
ctl_connected(void)
{
	F.ctl_seen_up = true;
	delete_start();			/* a clear made while down, first */
	queue_clear();
	F.resend_all = true;
	F.resend_next = 0;
	drain();
	resync_request();
}

static void
on_ctl_up(struct dlb_redis *r, void *ud)
{
	(void)r;
	(void)ud;
	if (F.started)
		ctl_connected();
}

static void
on_sub_up(struct dlb_redis *r, void *ud)
{
	(void)r;
	(void)ud;
	if (!F.started)
		return;
	F.sub_seen_up = true;
	/* announcements made while we were not subscribed are in the keys */
	resync_request();
}

/* ---- the fleet view ------------------------------------------------------------------------ */

static void
view_batch(struct scanner *s, const struct redisReply *keys)
{
	unsigned gen = s->gen;

	for (size_t i = 0; i < keys->elements && s->running && s->gen == gen; i++) {
		const struct redisReply *k = keys->element[i];
		const char *argv[2] = { "HGETALL", k->str };
		size_t argvlen[2] = { 7, k->len };

		if (k->type == REDIS_REPLY_STRING)
			(void)batch_send(s, 2, argv, argvlen);
	}
}

static bool
num_of(const struct redisReply *v, double *out)
{
	char buf[64], *end;
	double d;

	if (v->type != REDIS_REPLY_STRING || v->len == 0 || v->len >= sizeof(buf))
		return false;
	memcpy(buf, v->str, v->len);
	buf[v->len] = '\0';
	d = strtod(buf, &end);
	if (*end != '\0' || !(d >= 0 && d < 1e18))
		return false;
	*out = d;
	return true;
}

static void
str_of(const struct redisReply *v, char *out, size_t outsz)
{
	size_t n = v->len < outsz - 1 ? v->len : outsz - 1;

	memcpy(out, v->str, n);
	out[n] = '\0';
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)out[i] < 0x20 || out[i] == 0x7f)
			out[i] = '?';
}

static void
view_reply(struct scanner *s, const struct redisReply *reply)
{
	struct dlb_fleet_node n;
	bool named = false;

	(void)s;
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements % 2 != 0 ||
	    F.nbuilding >= VIEW_MAX)
		return;
	memset(&n, 0, sizeof(n));
	for (size_t i = 0; i + 1 < reply->elements; i += 2) {
		const struct redisReply *k = reply->element[i], *v = reply->element[i + 1];
		static const struct {
			const char *name;
			size_t off;
		} nums[] = {
			{ "uptime", offsetof(struct dlb_fleet_node, uptime) },
			{ "queries", offsetof(struct dlb_fleet_node, queries) },
			{ "qps", offsetof(struct dlb_fleet_node, qps) },
			{ "cache_hits", offsetof(struct dlb_fleet_node, cache_hits) },
			{ "cache_misses", offsetof(struct dlb_fleet_node, cache_misses) },
			{ "hit_rate", offsetof(struct dlb_fleet_node, hit_rate) },
			{ "backends_up", offsetof(struct dlb_fleet_node, backends_up) },
			{ "backends", offsetof(struct dlb_fleet_node, backends) },
			{ "blocks", offsetof(struct dlb_fleet_node, blocks) },
			{ "updated", offsetof(struct dlb_fleet_node, updated) },
		};

		if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
			continue;
		if (strcmp(k->str, "node") == 0 && v->len > 0) {
			str_of(v, n.node, sizeof(n.node));
			named = true;
		} else if (strcmp(k->str, "version") == 0) {
			str_of(v, n.version, sizeof(n.version));
		} else {
			for (size_t j = 0; j < sizeof(nums) / sizeof(nums[0]); j++)
				if (strcmp(k->str, nums[j].name) == 0)
					(void)num_of(v, (double *)(void *)((char *)&n +
									    nums[j].off));
		}
	}
	if (!named)
		return;		/* gone between SCAN and HGETALL, or not ours */
	if (F.building == NULL && (F.building = calloc(VIEW_MAX, sizeof(*F.building))) == NULL)
		return;
	F.building[F.nbuilding++] = n;
}

static int
node_cmp(const void *a, const void *b)
{
	return strcmp(((const struct dlb_fleet_node *)a)->node,
		      ((const struct dlb_fleet_node *)b)->node);
}

static void
view_done(struct scanner *s, bool ok)
{
	struct dlb_fleet_node *old = F.view;

	(void)s;
	if (!ok) {
		F.nbuilding = 0;
		return;
	}
	if (F.nbuilding > 1)
		qsort(F.building, F.nbuilding, sizeof(*F.building), node_cmp);
	F.view = F.building;
	F.nview = F.nbuilding;
	F.view_as_of = dlb_dyn_now();
	F.building = old;
	F.nbuilding = 0;
}

static void
count_block(const struct dlb_dyn_info *b, void *ud)
{
	if (!b->warning)
		(*(size_t *)ud)++;
}

/* This node's figures into its hash. */
static void
write_node(double now)
{
	struct dlb_metric m[DLB_METRICS_MAX];
	struct dlb_metrics_backend be;
	size_t nm = dlb_metrics_global(m, DLB_METRICS_MAX), blocks = 0;
	double queries = 0, hits = 0, misses = 0, qps = 0, uptime = dlb_metrics_uptime();
	int up = 0, total = 0;
	char v[12][48];
	const char *argv[26];
	size_t argvlen[26];
	int argc = 0;

	for (size_t i = 0; i < nm; i++) {
		if (strcmp(m[i].name, "queries") == 0)
			queries = m[i].value;
		else if (strcmp(m[i].name, "cache-hits") == 0)
			hits = m[i].value;
		else if (strcmp(m[i].name, "cache-misses") == 0)
			misses = m[i].value;
	}
	for (int i = 0; dlb_metrics_backend(i, &be) == 0; i++) {
		total++;
		up += be.up;
	}
	dlb_dyn_visit(now, true, count_block, &blocks);
	if (F.have_last && now > F.last_t && queries >= F.last_queries)
		qps = (queries - F.last_queries) / (now - F.last_t);
	F.last_queries = queries;
	F.last_t = now;
	F.have_last = true;

	snprintf(v[0], sizeof(v[0]), "%.0f", uptime);
	snprintf(v[1], sizeof(v[1]), "%.0f", queries);
	snprintf(v[2], sizeof(v[2]), "%.1f", qps);
	snprintf(v[3], sizeof(v[3]), "%.0f", hits);
	snprintf(v[4], sizeof(v[4]), "%.0f", misses);
	snprintf(v[5], sizeof(v[5]), "%.1f",
		 hits + misses > 0 ? 100.0 * hits / (hits + misses) : 0);
	snprintf(v[6], sizeof(v[6]), "%d", up);
	snprintf(v[7], sizeof(v[7]), "%d", total);
	snprintf(v[8], sizeof(v[8]), "%zu", blocks);
	snprintf(v[9], sizeof(v[9]), "%.3f", now);
	{
		const char *pairs[][2] = {
			{ "node", self() }, { "version", DLB_VERSION }, { "uptime", v[0] },
			{ "queries", v[1] }, { "qps", v[2] }, { "cache_hits", v[3] },
			{ "cache_misses", v[4] }, { "hit_rate", v[5] }, { "backends_up", v[6] },
			{ "backends", v[7] }, { "blocks", v[8] }, { "updated", v[9] },
		};

		argv[argc++] = "HSET";
		argv[argc++] = F.node_key;
		for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
			argv[argc++] = pairs[i][0];
			argv[argc++] = pairs[i][1];
		}
	}
	for (int i = 0; i < argc; i++)
		argvlen[i] = strlen(argv[i]);
	if (dlb_redis_command(F.ctl, NULL, NULL, 0, argc, argv, argvlen) == 0) {
		const char *ex[] = { "PEXPIRE", F.node_key, NODE_TTL_MS };
		size_t exlen[] = { 7, strlen(F.node_key), strlen(NODE_TTL_MS) };

		(void)dlb_redis_command(F.ctl, NULL, NULL, 0, 3, ex, exlen);
	}
}

static void
tick_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	double now = dlb_dyn_now();

	(void)loop;
	(void)t;
	(void)revents;
	/* a connection whose on_up we missed (another module took the callback); the
	 * subscription's, once Redis has confirmed it */
	if (!dlb_redis_is_up(F.sub))
		F.sub_seen_up = false;
	else if (!F.sub_seen_up && dlb_redis_subscribed(F.sub))
		on_sub_up(F.sub, NULL);
	if (!dlb_redis_is_up(F.ctl)) {
		F.ctl_seen_up = false;
		return;
	}
	if (!F.ctl_seen_up)
		ctl_connected();
	write_node(now);
	if (!F.sc[SC_VIEW].running) {
		F.nbuilding = 0;
		scan_start(&F.sc[SC_VIEW]);
	}
	if (ev_now(F.loop) - F.last_resync >= FLEET_RESYNC && !F.sc[SC_RESYNC].running &&
	    !F.resync_after_delete)
		resync_request();
	drain();
}

/* ---- start, stop ------------------------------------------------------------------------ */

void
dlb_fleet_start(struct ev_loop *loop)
{
	char org[3 * DLB_FLEET_NODE_MAX];

	if (!dlb_redis_settings.enabled || dlb_daemon.redis_ctl == NULL ||
	    dlb_daemon.redis_sub == NULL || F.started)
		return;
	memset(&F, 0, sizeof(F));
	F.loop = loop;
	F.ctl = dlb_daemon.redis_ctl;
	F.sub = dlb_daemon.redis_sub;
	if (escape_node(self(), org, sizeof(org)) <= 0) {
		dlb_err("fleet: the node name '%s' is too long", self());
		return;
	}
	dlb_redis_key(F.channel, sizeof(F.channel), "blocks");
	snprintf(F.node_key, sizeof(F.node_key), "%s:node:%s", dlb_redis_settings.ns, org);
	F.sc[SC_RESYNC] = (struct scanner){ .name = "resync", .batch = resync_batch,
					    .reply = resync_reply, .done = resync_done };
	snprintf(F.sc[SC_RESYNC].pattern, KEY_MAX, "%s:block:*", dlb_redis_settings.ns);
	F.sc[SC_DELETE] = (struct scanner){ .name = "delete", .batch = delete_batch,
					    .reply = ignore_reply, .done = delete_done };
	F.sc[SC_VIEW] = (struct scanner){ .name = "view", .batch = view_batch,
					  .reply = view_reply, .done = view_done };
	snprintf(F.sc[SC_VIEW].pattern, KEY_MAX, "%s:node:*", dlb_redis_settings.ns);
	if (dlb_redis_subscribe(F.sub, F.channel, message_cb, NULL) != 0) {
		dlb_err("fleet: cannot subscribe to %s", F.channel);
		return;
	}
	dlb_redis_on_up(F.ctl, on_ctl_up, NULL);
	dlb_redis_on_up(F.sub, on_sub_up, NULL);
	dlb_dyn_set_hook(dyn_hook, NULL);
	ev_timer_init(&F.tick, tick_cb, 1.0, 1.0);
	ev_timer_start(loop, &F.tick);
	ev_timer_init(&F.publish, publish_cb, 0., 0.);
	F.started = true;
}

void
dlb_fleet_stop(void)
{
	if (!F.started)
		return;
	F.started = false;
	dlb_dyn_set_hook(NULL, NULL);
	dlb_redis_on_up(F.ctl, NULL, NULL);
	dlb_redis_on_up(F.sub, NULL, NULL);
	ev_timer_stop(F.loop, &F.tick);
	ev_timer_stop(F.loop, &F.publish);
	queue_clear();
	free(F.q);
	F.q = NULL;
	free(F.view);
	free(F.building);
	F.view = F.building = NULL;
	F.nview = F.nbuilding = 0;
	for (int i = 0; i < SC__N; i++)
		F.sc[i].running = false;
}

/* ---- the views ------------------------------------------------------------------------------ */

size_t
dlb_fleet_nodes(const struct dlb_fleet_node **nodes, double *as_of)
{
	*nodes = F.view;
	*as_of = F.view_as_of;
	return F.nview;
}

void
dlb_fleet_total(const struct dlb_fleet_node *nodes, size_t n, struct dlb_fleet_node *out)
{
	memset(out, 0, sizeof(*out));
	snprintf(out->node, sizeof(out->node), "Total");
	for (size_t i = 0; i < n; i++) {
		const struct dlb_fleet_node *x = &nodes[i];

		out->queries += x->queries;
		out->qps += x->qps;
		out->cache_hits += x->cache_hits;
		out->cache_misses += x->cache_misses;
		out->backends_up += x->backends_up;
		out->backends += x->backends;
		out->blocks += x->blocks;
		if (x->uptime > out->uptime)
			out->uptime = x->uptime;
		if (i == 0 || x->updated < out->updated)
			out->updated = x->updated;
	}
	if (out->cache_hits + out->cache_misses > 0)
		out->hit_rate = 100.0 * out->cache_hits / (out->cache_hits + out->cache_misses);
}

/* "42s", "5m07s", "2h05m", "3d04h" */
static void
duration(double s, char *out, size_t outsz)
{
	long long v = s > 0 ? (long long)s : 0;

	if (v < 60)
		snprintf(out, outsz, "%llds", v);
	else if (v < 3600)
		snprintf(out, outsz, "%lldm%02llds", v / 60, v % 60);
	else if (v < 86400)
		snprintf(out, outsz, "%lldh%02lldm", v / 3600, v % 3600 / 60);
	else
		snprintf(out, outsz, "%lldd%02lldh", v / 86400, v % 86400 / 3600);
}

#define SHOW_FMT "%-20s %-7s %9s %12s %8s %11s %7s %6s\n"

static void
show_line(struct dlb_buf *b, const struct dlb_fleet_node *n, double now, bool total)
{
	char up[32], qps[32], q[32], hr[32], be[32], bl[32], age[32];

	duration(n->uptime, up, sizeof(up));
	snprintf(qps, sizeof(qps), "%.1f", n->qps);
	snprintf(q, sizeof(q), "%.0f", n->queries);
	if (n->cache_hits + n->cache_misses > 0)
		snprintf(hr, sizeof(hr), "%.1f%%", n->hit_rate);
	else
		snprintf(hr, sizeof(hr), "-");
	snprintf(be, sizeof(be), "%.0f/%.0f", n->backends_up, n->backends);
	snprintf(bl, sizeof(bl), "%.0f", n->blocks);
	snprintf(age, sizeof(age), "%.1fs", now > n->updated ? now - n->updated : 0.0);
	dlb_buf_printf(b, SHOW_FMT, n->node, total ? "" : up, qps, q, hr, be, bl, age);
}

char *
dlb_fleet_show(double now)
{
	struct dlb_buf b = DLB_BUF_INIT(0);
	const struct dlb_fleet_node *nodes;
	struct dlb_fleet_node tot;
	double as_of;
	size_t n = dlb_fleet_nodes(&nodes, &as_of);

	if (!dlb_redis_settings.enabled) {
		dlb_buf_printf(&b, "Redis is not configured (setRedis)\n");
		goto out;
	}
	dlb_buf_printf(&b, SHOW_FMT, "Node", "Uptime", "QPS", "Queries", "Hit rate", "Backends up",
		  "Blocks", "Age");
	for (size_t i = 0; i < n; i++)
		show_line(&b, &nodes[i], now, false);
	dlb_fleet_total(nodes, n, &tot);
	show_line(&b, &tot, now, true);
	if (as_of == 0)
		dlb_buf_printf(&b, "(the fleet view has not been read from Redis yet)\n");
	else if (now - as_of > 3)
		dlb_buf_printf(&b, "(the fleet view is %.0f s old: Redis unreachable?)\n", now - as_of);
out:
	return dlb_buf_take(&b, NULL);	/* NULL when out of memory */
}

static cJSON *
node_json(const struct dlb_fleet_node *n, double now)
{
	cJSON *o = cJSON_CreateObject();

	if (o == NULL)
		return NULL;
	if (cJSON_AddStringToObject(o, "node", n->node) == NULL ||
	    cJSON_AddStringToObject(o, "version", n->version) == NULL ||
	    cJSON_AddNumberToObject(o, "uptime", n->uptime) == NULL ||
	    cJSON_AddNumberToObject(o, "qps", n->qps) == NULL ||
	    cJSON_AddNumberToObject(o, "queries", n->queries) == NULL ||
	    cJSON_AddNumberToObject(o, "cacheHits", n->cache_hits) == NULL ||
	    cJSON_AddNumberToObject(o, "cacheMisses", n->cache_misses) == NULL ||
	    cJSON_AddNumberToObject(o, "hitRate", n->hit_rate) == NULL ||
	    cJSON_AddNumberToObject(o, "backendsUp", n->backends_up) == NULL ||
	    cJSON_AddNumberToObject(o, "backends", n->backends) == NULL ||
	    cJSON_AddNumberToObject(o, "blocks", n->blocks) == NULL ||
	    cJSON_AddNumberToObject(o, "updated", n->updated) == NULL ||
	    cJSON_AddNumberToObject(o, "age", now > n->updated ? now - n->updated : 0) == NULL) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

cJSON *
dlb_fleet_json(double now)
{
	const struct dlb_fleet_node *nodes;
	struct dlb_fleet_node tot;
	double as_of;
	size_t n = dlb_fleet_nodes(&nodes, &as_of);
	cJSON *o = cJSON_CreateObject(), *arr, *t;

	if (o == NULL)
		return NULL;
	if (cJSON_AddBoolToObject(o, "enabled", dlb_redis_settings.enabled) == NULL ||
	    cJSON_AddStringToObject(o, "namespace", dlb_redis_settings.enabled ?
				    dlb_redis_settings.ns : "") == NULL ||
	    cJSON_AddNumberToObject(o, "asOf", as_of) == NULL ||
	    (arr = cJSON_AddArrayToObject(o, "nodes")) == NULL)
		goto out_oom;
	for (size_t i = 0; i < n; i++) {
		cJSON *x = node_json(&nodes[i], now);

		if (x == NULL)
			goto out_oom;
		cJSON_AddItemToArray(arr, x);
	}
	dlb_fleet_total(nodes, n, &tot);
	if ((t = node_json(&tot, now)) == NULL)
		goto out_oom;
	cJSON_DeleteItemFromObject(t, "node");
	cJSON_DeleteItemFromObject(t, "version");
	cJSON_DeleteItemFromObject(t, "age");
	cJSON_AddNumberToObject(t, "nodes", (double)n);
	cJSON_AddItemToObject(o, "total", t);
	return o;
out_oom:
	cJSON_Delete(o);
	return NULL;
}
