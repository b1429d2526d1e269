/*
 * l2cache.c - the second-level packet cache in Redis. See l2cache.h for the
 * design; this file holds the value format, the per-worker table of parked
 * queries and the Redis callbacks.
 *
 * Parked queries: entries come from chunks allocated on demand up to the
 * largest l2MaxInFlight asked for, then recycled through a free list (no
 * allocation per query once warm). An entry whose query was answered or
 * forwarded from a callback may still be referenced by a send batch (UDP
 * batches borrow their buffers until flushed), so it is retired, not freed:
 * an ev_prepare watcher, run before the loop blocks again, flushes the
 * batches once for every query resumed in that iteration and only then puts
 * the retired entries back on the free list.
 *
 * Lifetimes: caches, pools and backends live as long as the process
 * (config.h), so an entry keeps pointers to them; the ruleset is taken
 * again when the query resumes (it is RCU-protected and may have been
 * replaced by a reload while the query waited).
 */
#include "dnslb/pipeline/l2cache.h"

#include <ev.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/core/hash.h"
#include "dnslb/pipeline/forward.h"
#include "dnslb/pipeline/dynblock.h"
#include "dnslb/pipeline/query.h"
#include "dnslb/store/redis.h"
#include "dnslb/pipeline/rings.h"
#include "dnslb/core/wstate.h"

#define L2_MAGIC	"DL2\x01"
#define L2_MAX_TTLS	512		/* as the local cache: more is not cacheable */
#define L2_PKT		2048		/* query copy; answers up to this size are built here */
#define L2_MAX_QUERY	1232		/* bigger queries are not parked (room for ECS, PROXY) */
#define L2_CHUNK	32		/* entries per allocation */

/* ---- value format -------------------------------------------------------------- */

static inline void
wr64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--) {
		p[i] = (uint8_t)v;
		v >>= 8;
	}
}

static inline uint64_t
rd64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

uint64_t
dlb_l2_hash(const struct dlb_cache_key *k)
{
	uint8_t buf[DLB_MAX_NAME + 7 + DLB_CACHE_MAX_OPTS];
	size_t n = k->qname_len;

	/* the fields of the local key, in a fixed order, no per-process seed */
	memcpy(buf, k->qname_lc, n);
	dlb_wr16(buf + n, k->qtype);
	dlb_wr16(buf + n + 2, k->qclass);
	buf[n + 4] = k->flags;
	dlb_wr16(buf + n + 5, k->payload_class);
	memcpy(buf + n + 7, k->opts, k->opts_len);
	return dlb_hash_bytes(buf, n + 7 + k->opts_len, 0);	/* = XXH3_64bits */
}

size_t
dlb_l2_key(char *out, const char *ns, const char *name, const struct dlb_cache_key *k)
{
	int n = snprintf(out, DLB_L2_KEY_MAX, "%s:pc:%s%s%016llx", ns, name,
			 name[0] != '\0' ? ":" : "", (unsigned long long)dlb_l2_hash(k));

	if (n < 0)
		return 0;
	return (size_t)n < DLB_L2_KEY_MAX ? (size_t)n : DLB_L2_KEY_MAX - 1;
}

size_t
dlb_l2_encode(const struct dlb_cache_key *k, double inserted, const uint8_t *ans, size_t len,
	      uint8_t *out, size_t outsz)
{
	size_t total = DLB_L2_HDR + k->qname_len + k->opts_len + len;

	if (len > UINT16_MAX || k->qname_len > UINT8_MAX || total > outsz)
		return 0;
	memcpy(out, L2_MAGIC, 4);
	wr64(out + 4, inserted > 0 ? (uint64_t)(inserted * 1000.0) : 0);
	dlb_wr16(out + 12, k->qtype);
	dlb_wr16(out + 14, k->qclass);
	dlb_wr16(out + 16, k->payload_class);
	out[18] = k->flags;
	out[19] = (uint8_t)k->qname_len;
	out[20] = k->opts_len;
	out[21] = 0;
	dlb_wr16(out + 22, (uint16_t)len);
	memcpy(out + DLB_L2_HDR, k->qname_lc, k->qname_len);
	memcpy(out + DLB_L2_HDR + k->qname_len, k->opts, k->opts_len);
	memcpy(out + DLB_L2_HDR + k->qname_len + k->opts_len, ans, len);
	return total;
}

enum dlb_l2_verdict
dlb_l2_decode(const uint8_t *v, size_t vlen, const struct dlb_cache_key *k, double *inserted,
	      const uint8_t **ansp, size_t *lenp, uint16_t *ttl_offs, size_t max, uint16_t *nttl)
{
	const uint8_t *ans;
	struct dlb_dnsmsg m;
	struct dlb_answer_scan scan;
	size_t qlen, olen, alen;
	uint16_t flags;

	if (vlen < DLB_L2_HDR || memcmp(v, L2_MAGIC, 4) != 0 || v[21] != 0)
		return DLB_L2_BAD_FORMAT;
	qlen = v[19];
	olen = v[20];
	alen = dlb_rd16(v + 22);
	if (qlen == 0 || olen > DLB_CACHE_MAX_OPTS || DLB_L2_HDR + qlen + olen + alen != vlen)
		return DLB_L2_BAD_FORMAT;
	if (dlb_rd16(v + 12) != k->qtype || dlb_rd16(v + 14) != k->qclass ||
	    dlb_rd16(v + 16) != k->payload_class || v[18] != k->flags ||
	    qlen != k->qname_len || olen != k->opts_len ||
	    memcmp(v + DLB_L2_HDR, k->qname_lc, qlen) != 0 ||
	    memcmp(v + DLB_L2_HDR + qlen, k->opts, olen) != 0)
		return DLB_L2_OTHER_KEY;

	/* the answer: as much trust as a datagram from the network */
	ans = v + DLB_L2_HDR + qlen + olen;
	if (alen < DLB_DNS_HDR)
		return DLB_L2_BAD_ANSWER;
	flags = dlb_rd16(ans + 2);
	if (!(flags & DLB_F_QR) || (flags & DLB_F_TC) || ((flags >> 11) & 0xf) != 0 ||
	    !(flags & DLB_F_RD) != !(k->flags & DLB_CK_RD) ||
	    !(flags & DLB_F_CD) != !(k->flags & DLB_CK_CD))
		return DLB_L2_BAD_ANSWER;
	if (dlb_wire_parse_response_question(ans, alen, &m) != DLB_OK || m.qdcount != 1 ||
	    m.qname_off != DLB_DNS_HDR || m.qname_len != k->qname_len ||
	    memcmp(m.qname_lc, k->qname_lc, k->qname_len) != 0 || m.qtype != k->qtype ||
	    m.qclass != k->qclass)
		return DLB_L2_BAD_ANSWER;
	if (dlb_wire_scan_answer(ans, alen, ttl_offs, max, &scan) != DLB_OK)
		return DLB_L2_BAD_ANSWER;
	*inserted = (double)rd64(v + 4) / 1000.0;
	*ansp = ans;
	*lenp = alen;
	*nttl = scan.nttl;
	return DLB_L2_OK;
}

/* ---- counters ------------------------------------------------------------------- */

struct l2_wstats {
	uint64_t hits, misses, timeouts, errors, rejected, skipped, stores, store_drops;
	uint64_t parked;
} __attribute__((aligned(64)));

/* one slot per worker id: written by that worker only, read by the metrics */
static struct l2_wstats l2_ws[DLB_MAX_WORKERS];

#define STAT_SET(x, v)	__atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
#define STAT_INC(x)	STAT_SET(x, (x) + 1)

void
dlb_l2_get_stats(struct dlb_l2_stats *out)
{
	memset(out, 0, sizeof(*out));
	for (int i = 0; i < DLB_MAX_WORKERS; i++) {
		const struct l2_wstats *s = &l2_ws[i];

		out->hits += __atomic_load_n(&s->hits, __ATOMIC_RELAXED);
		out->misses += __atomic_load_n(&s->misses, __ATOMIC_RELAXED);
		out->timeouts += __atomic_load_n(&s->timeouts, __ATOMIC_RELAXED);
		out->errors += __atomic_load_n(&s->errors, __ATOMIC_RELAXED);
		out->rejected += __atomic_load_n(&s->rejected, __ATOMIC_RELAXED);
		out->skipped += __atomic_load_n(&s->skipped, __ATOMIC_RELAXED);
		out->stores += __atomic_load_n(&s->stores, __ATOMIC_RELAXED);
		out->store_drops += __atomic_load_n(&s->store_drops, __ATOMIC_RELAXED);
		out->parked += __atomic_load_n(&s->parked, __ATOMIC_RELAXED);
	}
}

/* ---- parked queries ---------------------------------------------------------------- */

/* A query waiting for Redis: what forwarding it or answering it needs. */
struct l2_park {
	struct l2_park *next;		/* free or retired list */
	struct dlb_l2_worker *lw;
	struct dlb_cache *cache;
	const struct dlb_pool *pool;
	struct dlb_backend *be;		/* chosen before parking */
	double t_park;			/* loop clock */
	double budget;			/* s */
	struct dlb_client client;
	struct dlb_dnsmsg m;		/* the parsed query (offsets into pkt) */
	struct dlb_cache_key key;
	struct dlb_tags tags;
	bool has_tags;
	bool tcp;
	int8_t ecs_override;		/* the rules' SetECSOverrideAction, -1: none */
	uint8_t ecslen;
	uint8_t ecs[32];
	uint16_t orig_flags;
	int32_t tempfail_ttl;
	uint32_t delay_ms;
	uint32_t max_returned_ttl;
	uint16_t len;			/* query bytes in pkt */
	uint8_t pkt[L2_PKT];		/* the query; the answer on a hit that fits */
};

struct dlb_l2_worker {
	struct dlb_worker *w;
	struct l2_park **chunks;
	uint32_t nchunks;
	uint32_t parked;		/* waiting on Redis now */
	struct l2_park *free_list;
	struct l2_park *retired;	/* resumed this iteration; freed after the flush */
	ev_prepare flush;
	uint8_t *val;			/* DLB_L2_MAX_VALUE: a SET's value */
	struct l2_wstats *st;
};

static void
flush_cb(struct ev_loop *loop, ev_prepare *pw, int revents)
{
	struct dlb_l2_worker *lw = container_of(pw, struct dlb_l2_worker, flush);

	/* the batches may point into retired entries: send them first */
	dlb_forward_flush(lw->w);
	lw->w->client_sink[DLB_CLIENT_UDP]->flush(lw->w);
	while (lw->retired != NULL) {
		struct l2_park *p = lw->retired;

		lw->retired = p->next;
		p->next = lw->free_list;
		lw->free_list = p;
	}
	ev_prepare_stop(loop, pw);
}

static struct dlb_l2_worker *
l2_worker(struct dlb_worker *w)
{
	struct dlb_l2_worker *lw = w->l2;

	if (lw != NULL)
		return lw;
	lw = calloc(1, sizeof(*lw));
	if (lw == NULL)
		return NULL;
	lw->val = malloc(DLB_L2_MAX_VALUE);
	if (lw->val == NULL) {
		free(lw);
		return NULL;
	}
	lw->w = w;
	lw->st = &l2_ws[w->id];
	ev_prepare_init(&lw->flush, flush_cb);
	w->l2 = lw;
	return lw;
}

/* A free entry, growing the table up to @cap entries. NULL: none. */
static struct l2_park *
park_get(struct dlb_l2_worker *lw, uint32_t cap)
{
	struct l2_park *p, **nc;

	if (lw->parked >= cap)
		return NULL;
	if (lw->free_list == NULL) {
		if ((uint64_t)lw->nchunks * L2_CHUNK >= cap)
			return NULL;	/* the rest are retired until the loop's flush */
		nc = realloc(lw->chunks, (lw->nchunks + 1) * sizeof(*nc));
		if (nc == NULL)
			return NULL;
		lw->chunks = nc;
		p = malloc(L2_CHUNK * sizeof(*p));
		if (p == NULL)
			return NULL;
		lw->chunks[lw->nchunks++] = p;
		for (int i = 0; i < L2_CHUNK; i++) {
			p[i].lw = lw;
			p[i].next = lw->free_list;
			lw->free_list = &p[i];
		}
	}
	p = lw->free_list;
	lw->free_list = p->next;
	return p;
}

static void
park_retire(struct dlb_l2_worker *lw, struct l2_park *p)
{
	p->next = lw->retired;
	lw->retired = p;
	if (!ev_is_active(&lw->flush))
		ev_prepare_start(lw->w->loop, &lw->flush);
}

/* The query of @p as the pipeline sees it (@local: room for its local address). */
static void
park_query(struct dlb_worker *w, struct l2_park *p, struct dlb_query *q, union dlb_sockaddr *local)
{
	q->pkt = p->pkt;
	q->len = p->len;
	q->cap = sizeof(p->pkt);
	q->tcp = p->tcp;
	q->m = p->m;
	q->orig_flags = p->orig_flags;
	q->pool = p->pool;
	q->be = p->be;
	q->cache = p->cache;
	dlb_cache_key_copy(&q->key, &p->key);
	q->client = &p->client.peer.sa;
	q->local = dlb_query_client_local(w, &p->client, local);
	q->http = NULL;		/* a DoH request's fields did not outlive its reading */
	q->skip_cache = false;
	q->tempfail_ttl = p->tempfail_ttl;
	q->delay_ms = p->delay_ms;
	q->max_returned_ttl = p->max_returned_ttl;
	q->tags = p->has_tags ? &p->tags : NULL;
	q->rs = dlb_query_rules(w);	/* never the one of before the wait */
	q->has_dq = p->ecs_override >= 0;
	if (q->has_dq)
		q->dq.ecs_override = p->ecs_override;	/* the only dq field forwarding reads */
	q->ecslen = p->ecslen;
	memcpy(q->ecs, p->ecs, p->ecslen);
	/* a query sent to Redis carried no zero-scope lookup: its ECS stays in
	 * the key (use_ecs with zero scope skips the second level) */
	q->zero_scope = false;
	q->udp_max = p->client.udp_max;
}

/*
 * Redis did not answer @p: send it to the backend chosen before. Its
 * deadline still counts from its arrival, so it joins the backend's FIFO
 * with a deadline up to l2Budget earlier than its neighbours': its timeout
 * may be noticed that much late (inflight.h), never early.
 */
static void
resume_forward(struct dlb_worker *w, struct l2_park *p)
{
	union dlb_sockaddr local;
	struct dlb_query q;

	park_query(w, p, &q, &local);
	dlb_forward(w, &q, &p->client);
}

/*
 * Serve @p from value @v: insert it into the local cache with its original
 * insert time, then answer as a local hit does. @return false (counted)
 * when the value cannot be used: the caller forwards.
 */
static bool
serve(struct dlb_worker *w, struct l2_park *p, const uint8_t *v, size_t vlen)
{
	struct l2_wstats *st = p->lw->st;
	const struct dlb_cache_opts *o = dlb_cache_get_opts(p->cache);
	uint16_t offs[L2_MAX_TTLS], nttl;
	uint8_t qname[DLB_MAX_NAME];
	const uint8_t *ans;
	double inserted, now = dlb_worker_now(w);
	union dlb_sockaddr local;
	struct dlb_query q;
	struct dlb_slot rs;
	size_t alen;
	uint32_t ttl, age = 0;
	uint8_t *out;
	enum dlb_verdict verdict;

	if (dlb_l2_decode(v, vlen, &p->key, &inserted, &ans, &alen, offs, L2_MAX_TTLS, &nttl) !=
		    DLB_L2_OK ||
	    (ttl = dlb_cache_answer_ttl(p->cache, ans, alen, p->tempfail_ttl)) == 0) {
		STAT_INC(st->rejected);
		return false;
	}
	if (inserted > now)
		inserted = now;		/* the writer's clock is ahead: no negative age */
	if (now - inserted >= ttl || alen > p->key.max_answer) {
		/* expired (clocks apart), or too big for this client: as a local miss */
		STAT_INC(st->misses);
		return false;
	}
	if (!o->dont_age)
		age = (uint32_t)(now - inserted);
	(void)dlb_cache_insert(p->cache, &w->rcu, &p->key, ans, alen, inserted, p->tempfail_ttl);

	/* the answer, patched as dlb_cache_copy_out patches a local hit */
	memcpy(qname, p->pkt + p->m.qname_off, p->m.qname_len);
	out = alen <= sizeof(p->pkt) ? p->pkt : w->scratch;
	memcpy(out, ans, alen);
	dlb_wr16(out, p->client.orig_id);
	memcpy(out + DLB_DNS_HDR, qname, p->m.qname_len);
	for (uint16_t i = 0; age > 0 && i < nttl; i++) {
		uint32_t t = dlb_rd32(out + offs[i]);

		dlb_wr32(out + offs[i], t > age ? t - age : 0);
	}
	STAT_INC(st->hits);

	park_query(w, p, &q, &local);
	q.pkt = out;
	q.len = alen;
	q.cap = out == p->pkt ? sizeof(p->pkt) : DLB_RBUF_SIZE;
	verdict = dlb_query_cache_hit_rules(w, &q);
	if (verdict != DLB_V_ANSWER) {
		dlb_forward_reply(w, &p->client, q.pkt, 0, 0, false);	/* dropped by a rule */
		return true;
	}
	/* the response ring reads the client and the question of a slot */
	rs.client = p->client;
	dlb_cache_key_copy(&rs.key, &p->key);
	dlb_rings_slot(w, &rs, q.pkt, q.len, DLB_RING_BE_CACHE);
	dlb_query_account_answer(w, q.pkt, q.len, p->client.t_start);
	dlb_dyn_answer(w, &p->client.peer.sa, p->key.qname_lc, p->key.qname_len,
		       DLB_RCODE(q.pkt[3]), q.len, DLB_DYN_FROM_LOCAL);
	/* from the park (sent by flush_cb), or the scratch buffer: now */
	dlb_forward_reply(w, &p->client, q.pkt, q.len, q.delay_ms, q.pkt == p->pkt);
	return true;
}

/* The GET's reply (NULL: the budget passed, or the connection went away). */
static void
get_cb(struct redisReply *reply, void *ud)
{
	struct l2_park *p = ud;
	struct dlb_l2_worker *lw = p->lw;
	struct dlb_worker *w = lw->w;
	struct l2_wstats *st = lw->st;

	lw->parked--;
	STAT_SET(st->parked, lw->parked);
	if (ev_depth(w->loop) == 0) {
		/* shutdown: the connection is freed after the loop ended; nobody to answer */
		p->next = lw->free_list;
		lw->free_list = p;
		return;
	}
	if (reply == NULL) {
		/* the command's timer fires at the budget; sooner is a disconnect */
		if (dlb_worker_now(w) - p->t_park >= p->budget * 0.9)
			STAT_INC(st->timeouts);
		else
			STAT_INC(st->errors);
		resume_forward(w, p);
	} else if (reply->type == REDIS_REPLY_NIL) {
		STAT_INC(st->misses);
		resume_forward(w, p);
	} else if (reply->type != REDIS_REPLY_STRING) {
		STAT_INC(st->errors);
		resume_forward(w, p);
	} else if (!serve(w, p, (const uint8_t *)reply->str, reply->len)) {
		resume_forward(w, p);
	}
	park_retire(lw, p);
}

bool
dlb_l2_park_slow(struct dlb_worker *w, struct dlb_query *q, const struct dlb_client *c)
{
	const struct dlb_cache_opts *o = dlb_cache_get_opts(q->cache);
	struct dlb_l2_worker *lw = l2_worker(w);
	struct l2_wstats *st = &l2_ws[w->id];
	char key[DLB_L2_KEY_MAX];
	const char *argv[2];
	size_t argvlen[2];
	struct l2_park *p;

	if (c->proto == DLB_CLIENT_INTERNAL)
		return false;
	if (!dlb_redis_is_up(w->redis)) {
		STAT_INC(st->errors);
		return false;
	}
	if (lw == NULL || q->len > L2_MAX_QUERY || q->m.qname_len > DLB_MAX_NAME ||
	    (p = park_get(lw, o->l2_max_in_flight)) == NULL) {
		STAT_INC(st->skipped);
		return false;
	}
	argv[0] = "GET";
	argvlen[0] = 3;
	argv[1] = key;
	argvlen[1] = dlb_l2_key(key, dlb_redis_settings.ns, o->l2_name, &q->key);
	dlb_worker_clock_sync(w);	/* the command's timer runs on libev's clock */
	if (dlb_redis_command(w->redis, get_cb, p, o->l2_budget, 2, argv, argvlen) != 0) {
		/* over the connection's maxInFlight (or it just failed) */
		p->next = lw->free_list;
		lw->free_list = p;
		STAT_INC(st->skipped);
		return false;
	}
	p->cache = q->cache;
	p->pool = q->pool;
	p->be = q->be;
	p->t_park = dlb_worker_now(w);
	p->budget = o->l2_budget;
	p->client = *c;
	p->m = q->m;
	dlb_cache_key_copy(&p->key, &q->key);
	p->has_tags = q->tags != NULL;
	if (p->has_tags) {
		p->tags.n = q->tags->n;
		p->tags.used = q->tags->used;
		memcpy(p->tags.buf, q->tags->buf, q->tags->used);
	}
	p->tcp = q->tcp;
	p->ecs_override = q->has_dq ? q->dq.ecs_override : -1;
	p->ecslen = q->ecslen;
	memcpy(p->ecs, q->ecs, q->ecslen);
	p->orig_flags = q->orig_flags;
	p->tempfail_ttl = q->tempfail_ttl;
	p->delay_ms = q->delay_ms;
	p->max_returned_ttl = q->max_returned_ttl;
	p->len = (uint16_t)q->len;
	memcpy(p->pkt, q->pkt, q->len);
	lw->parked++;
	STAT_SET(st->parked, lw->parked);
	return true;
}

void
dlb_l2_store(struct dlb_worker *w, struct dlb_cache *c, const struct dlb_cache_key *k,
	     const uint8_t *ans, size_t len, double now, int temp_failure_ttl)
{
	const struct dlb_cache_opts *o = dlb_cache_get_opts(c);
	struct dlb_l2_worker *lw;
	struct l2_wstats *st;
	char key[DLB_L2_KEY_MAX], ex[16];
	const char *argv[5];
	size_t argvlen[5], vlen;
	uint32_t ttl;

	if (!o->l2 || w->redis == NULL || (lw = l2_worker(w)) == NULL)
		return;
	st = lw->st;
	ttl = dlb_cache_answer_ttl(c, ans, len, temp_failure_ttl);
	vlen = dlb_l2_encode(k, now, ans, len, lw->val, DLB_L2_MAX_VALUE);
	if (ttl == 0 || vlen == 0)
		return;
	argv[0] = "SET";
	argvlen[0] = 3;
	argv[1] = key;
	argvlen[1] = dlb_l2_key(key, dlb_redis_settings.ns, o->l2_name, k);
	argv[2] = (const char *)lw->val;
	argvlen[2] = vlen;
	argv[3] = "EX";
	argvlen[3] = 2;
	argv[4] = ex;
	argvlen[4] = (size_t)snprintf(ex, sizeof(ex), "%u", ttl);
	if (dlb_redis_command(w->redis, NULL, NULL, 0, 5, argv, argvlen) == 0)
		STAT_INC(st->stores);
	else
		STAT_INC(st->store_drops);
}

DLB_HOT bool
dlb_l2_worker_quiet(const struct dlb_worker *w)
{
	const struct dlb_l2_worker *lw = w->l2;

	return lw == NULL || (lw->parked == 0 && !ev_is_active(&lw->flush));
}

void
dlb_l2_worker_free(struct dlb_worker *w)
{
	struct dlb_l2_worker *lw = w->l2;

	if (lw == NULL)
		return;
	if (w->loop != NULL)
		ev_prepare_stop(w->loop, &lw->flush);
	for (uint32_t i = 0; i < lw->nchunks; i++)
		free(lw->chunks[i]);
	free(lw->chunks);
	free(lw->val);
	free(lw);
	w->l2 = NULL;
}
