/*
 * tcp.c - DNS over TCP, both sides.
 *
 * Client side: each accepted connection is owned by the worker whose
 * listening socket accepted it. Frames are read into one buffer; every
 * complete frame is a query through the same pipeline as UDP. With
 * maxInFlight = 0 queries are handled strictly one at a time (in order); with
 * N > 0, up to N are forwarded at once and answered as they come back.
 * Connections are found again from answers through {index, generation}
 * handles, so an answer for a connection that has gone is dropped safely.
 *
 * Backend side: per worker and backend, a list of connections reused across
 * clients; each carries up to the backend's maxInFlight queries with IDs
 * unique on that connection. A request keeps its framed query until answered,
 * so a connection the backend closed is reopened and the queries resent
 * (up to `retries` attempts). A mismatched answer closes the connection and
 * fails its queries (bad-inputs §3.2 #46).
 *
 * Abuse limits (docs/abuse.md): on accept, the shared TCP client table
 * (dnslb/pipeline/abuse.h) checks bans, the connection rate and the per-client cap;
 * a connection needing more than setMaxTCPReadIOsPerQuery reads for one
 * query is closed and its client banned; answers queued beyond
 * setMaxTCPOutputBufferSize for a client that does not read close it; past
 * setTCPConnectionsOverloadThreshold of a cap, new connections get one
 * query, a short receive timeout and a short life. Queries in flight count
 * against setMaxOutstandingPerClient while they hold a backend request.
 */
#include "dnslb/frontend/tcp.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dnslb/pipeline/abuse.h"
#include "dnslb/pipeline/forward.h"
#include "dnslb/core/config.h"
#include "dnslb/frontend/frontend.h"
#include "dnslb/pipeline/l2cache.h"
#include "dnslb/core/log.h"
#include "dnslb/core/proxyproto.h"
#include "dnslb/pipeline/query.h"
#include "dnslb/pipeline/rings.h"
#include "dnslb/core/wstate.h"


#define TCP_RBUF_INITIAL	4096
#define TCP_MAX_UP_PER_BACKEND	256		/* connections per worker and backend */
#define TCP_UP_IDLE_TIMEOUT	30.0		/* s an unused backend connection stays open */

/* connections per frontend, all workers (atomic), for setMaxConcurrentTCPConnections */
static uint32_t fe_conns[DLB_MAX_FRONTENDS];

/*
 * dnsdist's per-frontend gauges, all workers (atomic): connections open now
 * and at most, and the running averages of queries per connection and of a
 * connection's duration. Touched when a connection opens or closes only.
 */
static struct {
	uint32_t current, max;
	double avg_queries, avg_duration;
} fe_figs[DLB_MAX_FRONTENDS];

/* One more connection in *@cur; raise *@max to it. */
static void
gauge_open(uint32_t *cur, uint32_t *max)
{
	uint32_t n = __atomic_add_fetch(cur, 1, __ATOMIC_RELAXED);
	uint32_t m = __atomic_load_n(max, __ATOMIC_RELAXED);

	while (n > m && !__atomic_compare_exchange_n(max, &m, n, true, __ATOMIC_RELAXED,
						     __ATOMIC_RELAXED))
		;
}

/* dnsdist's running average: avg = 99 avg / 100 + x / 100. */
static void
running_avg(double *avg, double x)
{
	double old, nv;

	__atomic_load(avg, &old, __ATOMIC_RELAXED);
	do
		nv = 99.0 * old / 100.0 + x / 100.0;
	while (!__atomic_compare_exchange(avg, &old, &nv, true, __ATOMIC_RELAXED,
					  __ATOMIC_RELAXED));
}

/* A connection closes after @queries queries and @sec seconds (whole ms, as dnsdist). */
static void
conn_closed(uint32_t *cur, double *avg_q, double *avg_d, uint64_t queries, double sec)
{
	__atomic_sub_fetch(cur, 1, __ATOMIC_RELAXED);
	running_avg(avg_q, (double)queries);
	running_avg(avg_d, (double)(uint64_t)(sec > 0 ? sec * 1000.0 : 0));
}

void
dlb_tcp_fe_figures(int fe, struct dlb_tcp_fe_figures *out)
{
	memset(out, 0, sizeof(*out));
	if (fe < 0 || fe >= DLB_MAX_FRONTENDS)
		return;
	out->current = __atomic_load_n(&fe_figs[fe].current, __ATOMIC_RELAXED);
	out->max_concurrent = __atomic_load_n(&fe_figs[fe].max, __ATOMIC_RELAXED);
	__atomic_load(&fe_figs[fe].avg_queries, &out->avg_queries, __ATOMIC_RELAXED);
	__atomic_load(&fe_figs[fe].avg_duration, &out->avg_duration, __ATOMIC_RELAXED);
}

/* setTCPConnectionsOverloadThreshold: what a restricted connection gets (dnsdist 2.0's) */
#define TCP_OVERLOAD_RECV_TIMEOUT	0.5	/* s */
#define TCP_OVERLOAD_DURATION		5.0	/* s */

/* ---- client connections ---------------------------------------------------- */

struct outbuf {
	struct outbuf *next;
	size_t len, off;
	uint8_t data[];
};

struct dlb_tcp_client {
	struct dlb_worker *w;
	struct dlb_listener *l;
	uint32_t idx, gen;
	int fd;
	union dlb_sockaddr peer;
	union dlb_sockaddr local;	/* wildcard listeners: the address asked (getsockname) */
	bool has_local;
	ev_io rio, wio;
	ev_timer timer;
	double started, last_io;
	uint8_t *rbuf;
	size_t rcap, rlen, rpos;	/* frames start at rpos */
	struct outbuf *out_head, *out_tail;
	size_t out_bytes;
	uint32_t inflight;		/* forwarded, not yet answered */
	uint32_t queries;		/* read so far */
	bool limit_reached;		/* setMaxTCPQueriesPerConnection: read no more */
	bool peer_closed;		/* the client shut its side down */
	bool counted_client;		/* holds a per-client count */
	bool restricted;		/* accepted past the overload threshold */
	uint32_t read_ios;		/* reads since the last complete query */
};

static void client_process(struct dlb_tcp_client *c);
static void client_arm_timer(struct dlb_tcp_client *c);

static int
conn_table_add(struct dlb_worker *w, struct dlb_tcp_client *c)
{
	uint32_t i;

	if (w->nfree_conns > 0) {
		i = w->conns_free[--w->nfree_conns];
	} else {
		if (w->nconns == w->conns_cap) {
			uint32_t ncap = w->conns_cap ? w->conns_cap * 2 : 64;
			struct dlb_tcp_client **nc = realloc(w->conns, ncap * sizeof(*nc));
			uint32_t *nf;

			if (nc == NULL)
				return -1;
			w->conns = nc;
			nf = realloc(w->conns_free, ncap * sizeof(*nf));
			if (nf == NULL)
				return -1;
			w->conns_free = nf;
			w->conns_cap = ncap;
		}
		i = w->nconns++;
	}
	w->conns[i] = c;
	c->idx = i;
	c->gen = ++w->tcp_gen;
	return 0;
}

static void
client_close(struct dlb_tcp_client *c)
{
	struct dlb_worker *w = c->w;
	const struct dlb_frontend_cfg *fe = &w->cfg->frontends[c->l->index];

	ev_io_stop(w->loop, &c->rio);
	ev_io_stop(w->loop, &c->wio);
	ev_timer_stop(w->loop, &c->timer);
	close(c->fd);
	while (c->out_head != NULL) {
		struct outbuf *o = c->out_head;

		c->out_head = o->next;
		free(o);
	}
	free(c->rbuf);
	w->conns[c->idx] = NULL;
	w->conns_free[w->nfree_conns++] = c->idx;
	c->l->tcp_conns--;
	conn_closed(&fe_figs[c->l->index].current, &fe_figs[c->l->index].avg_queries,
		    &fe_figs[c->l->index].avg_duration, c->queries, dlb_worker_now(w) - c->started);
	if (__atomic_load_n(&fe->max_concurrent_tcp, __ATOMIC_RELAXED) > 0)
		__atomic_sub_fetch(&fe_conns[c->l->index], 1, __ATOMIC_RELAXED);
	if (c->counted_client)
		dlb_tcp_client_release(w->cfg, &c->peer.sa, dlb_worker_now(w));
	free(c);
}

static bool
client_done(const struct dlb_tcp_client *c)
{
	return (c->peer_closed || c->limit_reached) && c->inflight == 0 && c->out_head == NULL &&
	       c->rpos == c->rlen;
}

static void
client_flush(struct dlb_tcp_client *c)
{
	struct dlb_worker *w = c->w;

	while (c->out_head != NULL) {
		struct outbuf *o = c->out_head;
		ssize_t n = send(c->fd, o->data + o->off, o->len - o->off, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n == -1) {
			if (errno == EAGAIN || errno == EINTR)
				break;
			c->l->tcp_died_sending++;
			client_close(c);
			return;
		}
		c->last_io = dlb_worker_now(w);
		o->off += (size_t)n;
		c->out_bytes -= (size_t)n;
		if (o->off < o->len)
			break;
		c->out_head = o->next;
		if (c->out_head == NULL)
			c->out_tail = NULL;
		free(o);
	}
	if (c->out_head != NULL) {
		if (!ev_is_active(&c->wio))
			ev_io_start(w->loop, &c->wio);
	} else if (ev_is_active(&c->wio)) {
		ev_io_stop(w->loop, &c->wio);
	}
	if (client_done(c)) {
		client_close(c);
		return;
	}
	client_arm_timer(c);
}

/* Queue a framed copy of @pkt. @return false if the client was closed. */
static bool
client_queue(struct dlb_tcp_client *c, const uint8_t *pkt, size_t len)
{
	struct outbuf *o;

	if (c->out_bytes > 0 && c->out_bytes + len + 2 > c->w->cfg->max_tcp_out_bytes) {
		/* a client that does not read its answers (one answer always fits) */
		c->w->stats.tcp_output_buffer_full++;
		client_close(c);
		return false;
	}
	o = malloc(sizeof(*o) + len + 2);
	if (o == NULL) {
		client_close(c);
		return false;
	}
	c->l->tcp_responses++;
	o->next = NULL;
	o->len = len + 2;
	o->off = 0;
	dlb_wr16(o->data, (uint16_t)len);
	memcpy(o->data + 2, pkt, len);
	if (c->out_tail != NULL)
		c->out_tail->next = o;
	else
		c->out_head = o;
	c->out_tail = o;
	c->out_bytes += o->len;
	return true;
}

/* The receive timeout and the longest life of @c (0: none), restricted or not. */
static double
client_recv_timeout(const struct dlb_tcp_client *c)
{
	double t = c->w->snap->set.tcp_recv_timeout;

	return c->restricted && (t <= 0 || t > TCP_OVERLOAD_RECV_TIMEOUT) ? TCP_OVERLOAD_RECV_TIMEOUT
									  : t;
}

static double
client_max_duration(const struct dlb_tcp_client *c)
{
	double d = c->w->cfg->max_tcp_conn_duration;

	return c->restricted && (d <= 0 || d > TCP_OVERLOAD_DURATION) ? TCP_OVERLOAD_DURATION : d;
}

static void
client_timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct dlb_tcp_client *c = container_of(t, struct dlb_tcp_client, timer);
	double now = ev_now(loop);
	double max_duration = client_max_duration(c);

	if ((max_duration > 0 && now - c->started >= max_duration) ||
	    (c->out_head != NULL && now - c->last_io >= c->w->snap->set.tcp_send_timeout) ||
	    (c->out_head == NULL && c->inflight == 0 && now - c->last_io >= client_recv_timeout(c))) {
		c->w->stats.tcp_client_timeouts++;
		c->l->tcp_client_timeouts++;
		client_close(c);
		return;
	}
	client_arm_timer(c);
}

/* Next instant something may time out: idle/partial read, send, duration. */
static void
client_arm_timer(struct dlb_tcp_client *c)
{
	double now = dlb_worker_now(c->w), due = 0;
	double max_duration = client_max_duration(c);

	if (c->out_head != NULL)
		due = c->last_io + c->w->snap->set.tcp_send_timeout;
	else if (c->inflight == 0)
		due = c->last_io + client_recv_timeout(c);
	if (max_duration > 0) {
		double end = c->started + max_duration;

		if (due == 0 || end < due)
			due = end;
	}
	ev_timer_stop(c->w->loop, &c->timer);
	if (due == 0)
		return;	/* waiting for backends: their own timeouts apply */
	ev_timer_set(&c->timer, due > now ? due - now : 0.001, 0.);
	ev_timer_start(c->w->loop, &c->timer);
}

static void
client_write_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	client_flush(container_of(io, struct dlb_tcp_client, wio));
}

static bool client_partial_frame(const struct dlb_tcp_client *c);

/*
 * The client closed its side, or its connection failed: is that dnsdist's
 * tcpDiedReadingQuery? Yes before its first query or in the middle of one;
 * not once it has been answered and is between queries.
 */
static bool
client_died_reading(const struct dlb_tcp_client *c)
{
	return c->queries == 0 || client_partial_frame(c);
}

static void
client_read_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct dlb_tcp_client *c = container_of(io, struct dlb_tcp_client, rio);
	ssize_t n;

	if (c->rpos > 0 && c->rpos == c->rlen)
		c->rpos = c->rlen = 0;
	if (c->rlen == c->rcap) {
		/* keep the unprocessed tail at the start of the buffer */
		memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
		c->rlen -= c->rpos;
		c->rpos = 0;
		if (c->rlen == c->rcap) {
			/* only happens while a frame is being processed: wait */
			ev_io_stop(loop, &c->rio);
			return;
		}
	}
	n = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, MSG_DONTWAIT);
	if (n == -1) {
		if (errno != EAGAIN && errno != EINTR) {
			if (client_died_reading(c))
				c->l->tcp_died_reading++;
			client_close(c);
		}
		return;
	}
	if (n == 0) {
		if (client_died_reading(c))
			c->l->tcp_died_reading++;
		/* half-close: answer what was fully received, then close */
		ev_io_stop(loop, &c->rio);
		c->peer_closed = true;
		client_process(c);
		return;
	}
	c->rlen += (size_t)n;
	c->last_io = ev_now(loop);
	c->read_ios++;
	client_process(c);
}

/* Part of a frame is buffered and not complete yet. */
static bool
client_partial_frame(const struct dlb_tcp_client *c)
{
	size_t avail = c->rlen - c->rpos;

	return avail > 0 && (avail < 2 || avail < (size_t)dlb_rd16(c->rbuf + c->rpos) + 2);
}

/*
 * Handle the complete frames in the buffer, as far as the in-flight limit
 * allows. May close @c.
 */
static void
client_process(struct dlb_tcp_client *c)
{
	struct dlb_worker *w = c->w;
	const struct dlb_config *cfg = w->cfg;
	const struct dlb_frontend_cfg *fe = &cfg->frontends[c->l->index];
	/* a reload may change it (reload_commit_listeners: atomic) */
	int fe_max = __atomic_load_n(&fe->max_in_flight, __ATOMIC_RELAXED);
	uint32_t max_inflight = fe_max > 0 && !c->restricted ? (uint32_t)fe_max : 1;

	for (;;) {
		size_t avail = c->rlen - c->rpos;
		uint16_t flen;
		struct dlb_query q;
		struct dlb_client cl;

		if (c->limit_reached) {
			/* over the per-connection query limit: ignore the rest */
			c->rpos = c->rlen;
			break;
		}
		if (c->inflight >= max_inflight)
			break;
		if (avail < 2)
			break;
		flen = dlb_rd16(c->rbuf + c->rpos);
		if (flen < DLB_DNS_HDR) {
			/* length 0 or shorter than a header: framing is broken */
			w->stats.noncompliant_queries++;
			client_close(c);
			return;
		}
		if (avail < (size_t)flen + 2) {
			if (c->rpos + 2 + (size_t)flen > c->rcap) {
				size_t need = (size_t)flen + 2;
				uint8_t *nb;

				memmove(c->rbuf, c->rbuf + c->rpos, avail);
				c->rlen = avail;
				c->rpos = 0;
				if (need > c->rcap) {
					nb = realloc(c->rbuf, need);
					if (nb == NULL) {
						client_close(c);
						return;
					}
					c->rbuf = nb;
					c->rcap = need;
				}
			}
			break;
		}
		w->stats.queries++;
		c->l->tcp_queries++;
		c->queries++;
		c->read_ios = 0;
		q.pkt = c->rbuf + c->rpos + 2;
		q.len = flen;
		q.cap = flen;	/* local answers are never longer than the query */
		q.tcp = true;
		q.client = &c->peer.sa;
		q.local = c->has_local ? &c->local.sa
				       : (const struct sockaddr *)&cfg->frontends[c->l->index].addr;
		c->rpos += (size_t)flen + 2;
		if ((cfg->max_tcp_queries_per_conn > 0 &&
		     c->queries >= (uint32_t)cfg->max_tcp_queries_per_conn) || c->restricted)
			c->limit_reached = true;

		switch (dlb_query_process(w, &q)) {
		case DLB_V_CLOSE:
		case DLB_V_DROP:
			/* nothing to say on a stream: close (dnsdist does the same) */
			client_close(c);
			return;
		case DLB_V_ANSWER:
			dlb_rings_local_answer(w, &q, q.pkt, q.len);
			if (!dlb_query_is_empty_notimp(q.pkt))
				dlb_query_account_answer(w, q.pkt, q.len, ev_now(w->loop));
			/* else the NOTIMP to an empty query: not in the latency
			 * figures (dnsdist 1.7.3), nor in frontend-* (NOTIMP) */
			if (!client_queue(c, q.pkt, q.len))
				return;
			break;
		case DLB_V_FORWARD:
			memset(&cl, 0, sizeof(cl));
			cl.proto = DLB_CLIENT_TCP;
			cl.listener = (uint16_t)c->l->index;
			cl.peer = c->peer;
			cl.orig_id = q.m.id;
			cl.orig_flags = q.orig_flags;
			cl.conn_id = c->idx;
			cl.conn_gen = c->gen;
			if (c->has_local) {
				cl.has_dst = 1;
				if (c->local.sa.sa_family == AF_INET)
					cl.dst.v4.ipi_addr = c->local.sin.sin_addr;
				else
					cl.dst.v6.ipi6_addr = c->local.sin6.sin6_addr;
			}
			cl.t_start = ev_now(w->loop);
			c->inflight++;
			/* as dnsdist, a connection that carried a zone transfer takes no more queries */
			if (q.m.qdcount > 0 &&
			    (q.m.qtype == DLB_TYPE_AXFR || q.m.qtype == DLB_TYPE_IXFR))
				c->limit_reached = true;
			if (dlb_l2_park(w, &q, &cl))
				break;	/* asks the fleet's cache first (dnslb/pipeline/l2cache.h) */
			dlb_forward(w, &q, &cl);
			/* a failed forward answers at once, which may have closed c */
			if (w->conns[cl.conn_id] != c)
				return;
			break;
		}
	}
	if (c->peer_closed && c->inflight < max_inflight)
		c->rpos = c->rlen;	/* an incomplete last frame will never complete */
	if (cfg->max_tcp_read_ios_per_query > 0 &&
	    c->read_ios >= (uint32_t)cfg->max_tcp_read_ios_per_query && client_partial_frame(c)) {
		/* a query dribbled in (slowloris): close, and keep the client out a while */
		w->stats.tcp_too_many_read_ios++;
		dlb_tcp_client_ban(cfg, &c->peer.sa, dlb_worker_now(w),
				   cfg->tcp_ban_duration_read_ios);
		client_close(c);
		return;
	}
	if (c->rpos == c->rlen)
		c->rpos = c->rlen = 0;
	/* read more only when there is room to act on it */
	if (!c->peer_closed && !c->limit_reached && c->inflight < max_inflight) {
		if (!ev_is_active(&c->rio))
			ev_io_start(w->loop, &c->rio);
	} else if (ev_is_active(&c->rio)) {
		ev_io_stop(w->loop, &c->rio);
	}
	client_flush(c);
}

void
dlb_tcp_accept(struct dlb_worker *w, struct dlb_listener *l)
{
	const struct dlb_config *cfg = w->cfg;
	const struct dlb_frontend_cfg *fe = &cfg->frontends[l->index];
	int threshold = cfg->tcp_overload_threshold;
	/* a reload may change it (reload_commit_listeners: atomic) */
	int max_conc = __atomic_load_n(&fe->max_concurrent_tcp, __ATOMIC_RELAXED);
	double now = dlb_worker_now(w);

	dlb_tcp_clients_maintain(cfg, now);
	for (int k = 0; k < 32; k++) {
		union dlb_sockaddr peer;
		socklen_t plen = sizeof(peer);
		struct dlb_tcp_client *c;
		int fd = accept4(l->tcp_fd, &peer.sa, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
		int one = 1;
		uint32_t fe_prior = 0, client_prior = 0;
		bool counted;

		if (fd == -1) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				dlb_log_ratelimited(DLB_LOG_WARN, "accept: %s", strerror(errno));
			return;
		}
		if (!dlb_nmg_match(&w->snap->acl, &peer.sa)) {
			w->stats.acl_drops++;
			close(fd);
			continue;
		}
		if (max_conc > 0 &&
		    (fe_prior = __atomic_fetch_add(&fe_conns[l->index], 1, __ATOMIC_RELAXED)) >=
			    (uint32_t)max_conc) {
			__atomic_sub_fetch(&fe_conns[l->index], 1, __ATOMIC_RELAXED);
			w->stats.tcp_client_rejected++;
			close(fd);
			continue;
		}
		switch (dlb_tcp_client_admit(cfg, &peer.sa, now, &counted, &client_prior)) {
		case DLB_TCP_ADMIT_OK:
			break;
		case DLB_TCP_ADMIT_BANNED:
			w->stats.tcp_client_banned++;
			goto refuse;
		case DLB_TCP_ADMIT_RATE:
			w->stats.tcp_client_rate_exceeded++;
			goto refuse;
		case DLB_TCP_ADMIT_TOO_MANY:
			w->stats.tcp_client_rejected++;
		refuse:
			if (max_conc > 0)
				__atomic_sub_fetch(&fe_conns[l->index], 1, __ATOMIC_RELAXED);
			close(fd);
			continue;
		}
		c = calloc(1, sizeof(*c));
		if (c == NULL || (c->rbuf = malloc(TCP_RBUF_INITIAL)) == NULL ||
		    conn_table_add(w, c) != 0) {
			if (c != NULL)
				free(c->rbuf);
			free(c);
			if (counted)
				dlb_tcp_client_release(cfg, &peer.sa, now);
			if (max_conc > 0)
				__atomic_sub_fetch(&fe_conns[l->index], 1, __ATOMIC_RELAXED);
			close(fd);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (l->wildcard) {
			socklen_t llen = sizeof(c->local);

			c->has_local = getsockname(fd, &c->local.sa, &llen) == 0;
		}
		c->w = w;
		c->l = l;
		c->fd = fd;
		c->peer = peer;
		c->rcap = TCP_RBUF_INITIAL;
		c->counted_client = counted;
		/* past the overload threshold of a cap: one query, short timeouts */
		if (threshold > 0 &&
		    ((max_conc > 0 &&
		      (uint64_t)fe_prior * 100 >= (uint64_t)threshold * max_conc) ||
		     (counted && (uint64_t)client_prior * 100 >=
					 (uint64_t)threshold * cfg->max_tcp_conns_per_client))) {
			c->restricted = true;
			w->stats.tcp_overloaded_connections++;
		}
		c->started = c->last_io = ev_now(w->loop);
		l->tcp_conns++;
		gauge_open(&fe_figs[l->index].current, &fe_figs[l->index].max);
		w->stats.tcp_client_connections++;
		ev_io_init(&c->rio, client_read_cb, fd, EV_READ);
		ev_io_init(&c->wio, client_write_cb, fd, EV_WRITE);
		ev_init(&c->timer, client_timer_cb);
		ev_io_start(w->loop, &c->rio);
		client_arm_timer(c);
	}
}

static struct dlb_tcp_client *
client_lookup(struct dlb_worker *w, const struct dlb_client *cl)
{
	struct dlb_tcp_client *c;

	if (cl->conn_id >= w->nconns)
		return NULL;
	c = w->conns[cl->conn_id];
	if (c == NULL || c->gen != cl->conn_gen)
		return NULL;
	return c;
}

void
dlb_tcp_deliver(struct dlb_worker *w, const struct dlb_client *cl, const uint8_t *pkt, size_t len)
{
	struct dlb_tcp_client *c = client_lookup(w, cl);

	if (c == NULL)
		return;	/* the client went away meanwhile */
	c->inflight--;
	if (!client_queue(c, pkt, len))
		return;
	client_process(c);
}

void
dlb_tcp_xfr_part(struct dlb_worker *w, const struct dlb_client *cl, const uint8_t *pkt,
		 size_t len)
{
	struct dlb_tcp_client *c = client_lookup(w, cl);

	if (c == NULL)
		return;	/* the client went away meanwhile */
	if (!client_queue(c, pkt, len))
		return;
	client_flush(c);
}

static void tcp_sink_reply(struct dlb_worker *w, const struct dlb_client *cl, uint8_t *pkt,
			   size_t len, bool batched, bool part);
static void tcp_sink_no_answer(struct dlb_worker *w, const struct dlb_client *cl,
			       enum dlb_slot_end why);
static void tcp_sink_flush(struct dlb_worker *w);

/* How the pipeline answers TCP clients (dnslb/core/sink.h). */
const struct dlb_client_sink dlb_tcp_client_sink = {
	.reply = tcp_sink_reply,
	.no_answer = tcp_sink_no_answer,
	.flush = tcp_sink_flush,
};

static void
tcp_sink_reply(struct dlb_worker *w, const struct dlb_client *cl, uint8_t *pkt, size_t len,
	       bool batched, bool part)
{
	(void)batched;	/* copied into the connection's output at once */
	if (part)
		dlb_tcp_xfr_part(w, cl, pkt, len);
	else
		dlb_tcp_deliver(w, cl, pkt, len);
}

static void
tcp_sink_no_answer(struct dlb_worker *w, const struct dlb_client *cl, enum dlb_slot_end why)
{
	struct dlb_tcp_client *c = client_lookup(w, cl);

	/* dnsdist counts these per query on the client's frontend */
	if (c != NULL && why == DLB_END_GAVE_UP)
		c->l->tcp_gave_up++;
	else if (c != NULL && why == DLB_END_TIMEOUT)
		c->l->tcp_downstream_timeouts++;
	dlb_tcp_drop(w, cl);
}

static void
tcp_sink_flush(struct dlb_worker *w)
{
	(void)w;	/* each answer went out as it came */
}

void
dlb_tcp_drop(struct dlb_worker *w, const struct dlb_client *cl)
{
	struct dlb_tcp_client *c = client_lookup(w, cl);

	if (c == NULL)
		return;	/* the client went away meanwhile */
	c->inflight--;
	client_close(c);	/* nothing to say on a stream, as for a dropped query */
}

/* A forwarded TCP query failed: SERVFAIL, so pipelined neighbours survive. */
static void
client_fail(struct dlb_worker *w, const struct dlb_client *cl, const struct dlb_slot *s,
	    bool count_self)
{
	uint8_t buf[DLB_DNS_HDR + DLB_MAX_NAME + 4];
	size_t n = dlb_query_slot_servfail(s, cl, buf);

	if (count_self)
		w->stats.self_answered++;	/* a timeout is counted as such instead */
	dlb_rings_slot(w, s, buf, n, DLB_RING_BE_SELF);
	dlb_query_account_answer(w, buf, n, cl->t_start);
	if (cl->proto == DLB_CLIENT_TCP)
		dlb_tcp_deliver(w, cl, buf, n);
	else
		dlb_frontend_send_reply(w, cl, buf, n);
}

/*
 * setMaxOutstandingPerClient: TCP client @cl already has its cap of queries
 * in flight. Answer this one by cfg->oc_action (drop: close, as for a
 * dropped query on a stream).
 */
static void
client_over_cap(struct dlb_worker *w, const struct dlb_client *cl, const struct dlb_slot *s)
{
	uint8_t buf[DLB_DNS_HDR + DLB_MAX_NAME + 4];
	struct dlb_tcp_client *c;
	size_t n;

	if (w->cfg->oc_action == DLB_OC_DROP) {
		dlb_tcp_drop(w, cl);
		return;
	}
	n = dlb_query_slot_servfail(s, cl, buf);
	if (w->cfg->oc_action == DLB_OC_REFUSED)
		buf[3] = (uint8_t)((buf[3] & 0xf0) | DLB_RCODE_REFUSED);
	w->stats.self_answered++;
	dlb_rings_slot(w, s, buf, n, DLB_RING_BE_SELF);
	dlb_query_account_answer(w, buf, n, cl->t_start);
	/*
	 * Queued without dlb_tcp_deliver's client_process: we are inside the
	 * connection's own client_process loop, which goes on with the next
	 * frame (recursing here would grow the stack with every pipelined query).
	 */
	c = client_lookup(w, cl);
	if (c != NULL) {
		c->inflight--;
		client_queue(c, buf, n);
	}
}

/* ---- backend connections ------------------------------------------------------ */

enum up_state {
	UP_CONNECTING = 0,
	UP_READY,
};

struct up_req {
	struct dlb_slot s;		/* question, client, deadline; s.wire_id is ours */
	uint8_t *frame;			/* framed query, ID rewritten */
	size_t flen;
	size_t written;
	/* a zone transfer (AXFR/IXFR from a TCP client): several answers */
	bool xfr;
	uint32_t master_serial;		/* of the first SOA answered */
	uint32_t soa_count, master_count;
};

struct dlb_tcp_up {
	struct dlb_worker *w;
	struct dlb_tcp_up *next;
	int be_index;
	int fd;
	int state;
	int attempts;
	bool single;			/* useProxyProtocol: one query, then closed */
	ev_io io;
	ev_timer timer;
	double last_use;
	double opened;			/* when the current socket was opened (loop clock) */
	uint32_t queries;		/* sent on the current socket (its average) */
	struct up_req *reqs;		/* in send order */
	uint32_t nreqs, cap;
	uint32_t wpos;			/* first request not fully written */
	uint8_t *rbuf;
	size_t rlen, rcap;
};

static void up_io_cb(struct ev_loop *loop, ev_io *io, int revents);
static void up_arm_timer(struct dlb_tcp_up *u);
static void up_timer_cb(struct ev_loop *loop, ev_timer *t, int revents);

static uint32_t
up_max_inflight(const struct dlb_backend *be)
{
	return be->max_in_flight > 0 ? (uint32_t)be->max_in_flight : 1;
}

static void
up_unlink(struct dlb_tcp_up *u)
{
	struct dlb_be_local *bl = &u->w->be[u->be_index];

	for (struct dlb_tcp_up **pp = &bl->tcp_conns; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == u) {
			*pp = u->next;
			bl->tcp_count--;
			u->w->tcp_up--;
			return;
		}
	}
}

static void
up_close_fd(struct dlb_tcp_up *u)
{
	if (u->fd >= 0) {
		struct dlb_backend *be = u->w->cfg->backends[u->be_index];

		ev_io_stop(u->w->loop, &u->io);
		close(u->fd);
		u->fd = -1;
		conn_closed(&be->tcp_current, &be->tcp_avg_queries, &be->tcp_avg_duration,
			    u->queries, dlb_worker_now(u->w) - u->opened);
	}
	u->rlen = 0;
}

static void
up_free(struct dlb_tcp_up *u)
{
	struct dlb_worker *w = u->w;

	up_close_fd(u);
	ev_timer_stop(w->loop, &u->timer);
	up_unlink(u);
	for (uint32_t i = 0; i < u->nreqs; i++)
		free(u->reqs[i].frame);
	free(u->reqs);
	free(u->rbuf);
	free(u);
}

/* Why the requests of a backend connection fail (up_fail_all). */
enum up_fail {
	UP_FAIL_ERROR,		/* no memory */
	UP_FAIL_GAVE_UP,	/* broken, and `retries` attempts made */
	UP_FAIL_TIMEOUT,	/* the first request's deadline passed */
	UP_FAIL_CONNECT_TIMEOUT,	/* the connect took longer than tcpConnectTimeout */
	UP_FAIL_OUT_OF_STEP,	/* an answer to no query */
};

/*
 * Fail every request of @u, then free it. TCP clients' connections are
 * closed without an answer, as dnsdist closes them when the backend times
 * out, gives up or answers out of step (a stale answer is sent instead when
 * setServeStaleOnTimeout has one); only when memory ran out do they get a
 * SERVFAIL. UDP clients get nothing. The TCP clients' frontends count a
 * timeout or a give-up, per query.
 */
static void
up_fail_all(struct dlb_tcp_up *u, enum up_fail why)
{
	struct dlb_worker *w = u->w;
	struct up_req *reqs = u->reqs;
	uint32_t n = u->nreqs;
	bool timeout = why == UP_FAIL_TIMEOUT;
	/* as dnsdist: a TCP client gets no answer, its connection is closed */
	bool close_clients = why != UP_FAIL_ERROR;

	/* detach first: failing a request may re-enter this module */
	u->reqs = NULL;
	u->nreqs = u->cap = 0;
	w->stats.tcp_downstream_failures++;
	if (why == UP_FAIL_GAVE_UP)
		w->be_stats[u->be_index].tcp_gave_up++;
	up_free(u);
	for (uint32_t i = 0; i < n; i++) {
		struct up_req *r = &reqs[i];

		w->be_stats[r->s.be_index].outstanding--;
		dlb_oc_release(w, &r->s);
		if (r->s.client.proto == DLB_CLIENT_TCP && why != UP_FAIL_ERROR &&
		    why != UP_FAIL_OUT_OF_STEP) {
			struct dlb_tcp_client *c = client_lookup(w, &r->s.client);

			if (c != NULL && why == UP_FAIL_GAVE_UP)
				c->l->tcp_gave_up++;
			else if (c != NULL)
				c->l->tcp_downstream_timeouts++;
		}
		/*
		 * dnsdist counts a TCP client's timeout only on its frontend (above),
		 * not in the server's drops or downstream-timeouts
		 */
		if (timeout)
			dlb_rings_slot(w, &r->s, NULL, 0, r->s.be_index);
		if (timeout && r->s.client.proto != DLB_CLIENT_TCP) {
			w->be_stats[r->s.be_index].drops++;
			if (r->s.client.proto != DLB_CLIENT_INTERNAL)
				w->stats.downstream_timeouts++;
		}
		if (timeout && r->s.client.proto != DLB_CLIENT_INTERNAL &&
		    dlb_query_answer_stale(w, &r->s)) {
			free(r->frame);
			continue;
		}
		if (r->s.client.proto == DLB_CLIENT_TCP && close_clients)
			dlb_tcp_drop(w, &r->s.client);
		else if (r->s.client.proto == DLB_CLIENT_TCP)
			client_fail(w, &r->s.client, &r->s, !timeout);
		free(r->frame);
	}
	free(reqs);
}


static int
up_connect(struct dlb_tcp_up *u)
{
	const struct dlb_backend *be = u->w->cfg->backends[u->be_index];
	int fd = socket(be->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;

	if (fd == -1)
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (be->source_iface[0] != '\0')
		setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, be->source_iface,
			   (socklen_t)strlen(be->source_iface));
	if (be->source.ss_family != 0) {
		setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
		if (bind(fd, (const struct sockaddr *)&be->source, be->sourcelen) == -1) {
			close(fd);
			return -1;
		}
	}
	if (connect(fd, (const struct sockaddr *)&be->addr, be->addrlen) == -1 &&
	    errno != EINPROGRESS) {
		close(fd);
		return -1;
	}
	u->fd = fd;
	u->state = UP_CONNECTING;
	u->attempts++;
	u->last_use = u->opened = ev_now(u->w->loop);
	u->wpos = 0;
	for (uint32_t i = 0; i < u->nreqs; i++)
		u->reqs[i].written = 0;
	u->queries = u->nreqs;	/* sent again on this one */
	u->w->stats.tcp_downstream_connections++;
	u->w->be_stats[u->be_index].tcp_new++;
	gauge_open(&u->w->cfg->backends[u->be_index]->tcp_current,
		   &u->w->cfg->backends[u->be_index]->tcp_max);
	ev_io_init(&u->io, up_io_cb, fd, EV_READ | EV_WRITE);
	ev_io_start(u->w->loop, &u->io);
	return 0;
}

/*
 * The connection broke: reconnect and resend if attempts remain, else fail.
 * @return false when @u was freed.
 */
static bool
up_broken(struct dlb_tcp_up *u)
{
	const struct dlb_backend *be = u->w->cfg->backends[u->be_index];

	up_close_fd(u);
	if (u->nreqs == 0) {
		up_free(u);
		return false;
	}
	if (u->attempts < (be->retries > 0 ? be->retries : 1) && up_connect(u) == 0) {
		up_arm_timer(u);
		return true;
	}
	up_fail_all(u, UP_FAIL_GAVE_UP);
	return false;
}

static void
up_arm_timer(struct dlb_tcp_up *u)
{
	const struct dlb_backend *be = u->w->cfg->backends[u->be_index];
	double now, due;

	dlb_worker_clock_sync(u->w);	/* libev's clock, which the timer runs on, is now */
	now = dlb_worker_now(u->w);

	if (u->state == UP_CONNECTING)
		due = u->last_use + be->tcp_connect_timeout;
	else if (u->nreqs > 0)
		due = u->reqs[0].s.deadline;
	else
		due = u->last_use + TCP_UP_IDLE_TIMEOUT;
	ev_timer_stop(u->w->loop, &u->timer);
	ev_timer_set(&u->timer, due > now ? due - now : 0.001, 0.);
	ev_timer_start(u->w->loop, &u->timer);
}

static void
up_timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct dlb_tcp_up *u = container_of(t, struct dlb_tcp_up, timer);
	const struct dlb_backend *be = u->w->cfg->backends[u->be_index];
	double now = ev_now(loop);

	if (u->state == UP_CONNECTING) {
		if (now - u->last_use >= be->tcp_connect_timeout) {
			/*
			 * As dnsdist 1.7.3: no other attempt (each would make
			 * the clients wait tcpConnectTimeout more); the clients'
			 * frontends count a downstream timeout.
			 */
			u->w->be_stats[u->be_index].tcp_connect_timeouts++;
			up_fail_all(u, UP_FAIL_CONNECT_TIMEOUT);
			return;
		}
	} else if (u->nreqs > 0) {
		if (now >= u->reqs[0].s.deadline) {
			/* the backend sat on a query: fail the connection's queries */
			if (u->wpos < u->nreqs)
				u->w->be_stats[u->be_index].tcp_write_timeouts++;
			else
				u->w->be_stats[u->be_index].tcp_read_timeouts++;
			up_fail_all(u, UP_FAIL_TIMEOUT);
			return;
		}
	} else if (now - u->last_use >= TCP_UP_IDLE_TIMEOUT) {
		up_free(u);
		return;
	}
	up_arm_timer(u);
}

/* @return false when @u was freed; check u->state after (it may be reconnecting). */
static bool
up_write(struct dlb_tcp_up *u)
{
	while (u->wpos < u->nreqs) {
		struct up_req *r = &u->reqs[u->wpos];
		ssize_t n = send(u->fd, r->frame + r->written, r->flen - r->written,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n == -1) {
			if (errno == EAGAIN || errno == EINTR)
				break;
			u->w->be_stats[u->be_index].tcp_died_sending++;
			return up_broken(u);
		}
		r->written += (size_t)n;
		if (r->written < r->flen)
			break;
		u->wpos++;
	}
	ev_io_stop(u->w->loop, &u->io);
	ev_io_set(&u->io, u->fd, u->wpos < u->nreqs ? EV_READ | EV_WRITE : EV_READ);
	ev_io_start(u->w->loop, &u->io);
	return true;
}

static void
up_remove_req(struct dlb_tcp_up *u, uint32_t i)
{
	free(u->reqs[i].frame);
	memmove(&u->reqs[i], &u->reqs[i + 1], (u->nreqs - i - 1) * sizeof(*u->reqs));
	u->nreqs--;
	if (u->wpos > i)
		u->wpos--;
}

/* The SERIAL of a SOA whose RDATA ends at @end: 20 octets before (dnsdist's way). */
static uint32_t
soa_serial(const uint8_t *pkt, size_t end)
{
	return dlb_rd32(pkt + end - 20);
}

/*
 * Is @pkt the last message of zone transfer @r? As dnsdist 1.7.3: any rcode
 * but NOERROR ends it; else the SOAs of the answer section count: the first
 * one's serial is the master's; a second SOA with it ends an AXFR (or an
 * AXFR-style IXFR), the master's serial seen three times an IXFR. A lone
 * SOA (an IXFR already up to date) ends nothing: the backend's closing or
 * the timeout does, as in dnsdist 1.7.3. A message that cannot be walked
 * ends nothing.
 */
static bool
xfr_finished(struct up_req *r, const uint8_t *pkt, size_t len)
{
	size_t off = DLB_DNS_HDR;
	unsigned qd, an;
	int n;

	if (len < DLB_DNS_HDR)
		return false;
	if (DLB_RCODE(pkt[3]) != DLB_RCODE_NOERROR)
		return true;
	qd = dlb_rd16(pkt + 4);
	an = dlb_rd16(pkt + 6);
	for (unsigned i = 0; i < qd; i++) {
		n = dlb_wire_skip_name(pkt, len, off);
		if (n < 0 || (size_t)n + 4 > len)
			return false;
		off = (size_t)n + 4;
	}
	for (unsigned i = 0; i < an; i++) {
		uint16_t type, cls, rdlen;
		uint32_t serial;

		n = dlb_wire_skip_name(pkt, len, off);
		if (n < 0 || (size_t)n + 10 > len)
			return false;
		type = dlb_rd16(pkt + n);
		cls = dlb_rd16(pkt + n + 2);
		rdlen = dlb_rd16(pkt + n + 8);
		off = (size_t)n + 10 + rdlen;
		if (off > len)
			return false;
		if (type != DLB_TYPE_SOA || cls != 1)
			continue;
		if (rdlen < 22)
			return false;
		serial = soa_serial(pkt, off);
		r->soa_count++;
		if (r->soa_count == 1) {
			r->master_serial = serial;
			r->master_count = 1;
		} else if (serial == r->master_serial) {
			r->master_count++;
			if (r->soa_count == 2 || r->master_count == 3)
				return true;
		}
	}
	return false;
}

/*
 * One message of the zone transfer of request @i. As dnsdist, it goes to
 * the client as the backend wrote it, its ID aside: no check of the
 * question, no response rules, not counted as a response. The last one
 * ends the request. @return false if @u was freed.
 */
static bool
up_xfr_message(struct dlb_tcp_up *u, uint32_t i, uint8_t *pkt, size_t flen)
{
	struct dlb_worker *w = u->w;
	const struct dlb_backend *be = w->cfg->backends[u->be_index];
	struct up_req *r = &u->reqs[i];
	struct dlb_slot s;

	dlb_wr16(pkt, r->s.client.orig_id);
	u->last_use = ev_now(w->loop);
	if (!xfr_finished(r, pkt, flen)) {
		r->s.deadline = ev_now(w->loop) +
				(be->tcp_recv_timeout > 0 ? be->tcp_recv_timeout : 30);
		dlb_tcp_xfr_part(w, &r->s.client, pkt, flen);
		return true;
	}
	s = r->s;
	up_remove_req(u, i);
	w->be_stats[s.be_index].outstanding--;
	dlb_oc_release(w, &s);
	dlb_tcp_deliver(w, &s.client, pkt, flen);	/* the client then closes (no more reads) */
	if (u->single && u->nreqs == 0) {
		up_free(u);
		return false;
	}
	return true;
}

/* Handle complete answer frames. @return false if @u was freed. */
static bool
up_read_frames(struct dlb_tcp_up *u)
{
	struct dlb_worker *w = u->w;
	size_t pos = 0;

	while (u->rlen - pos >= 2) {
		uint16_t flen = dlb_rd16(u->rbuf + pos);
		uint8_t *pkt = u->rbuf + pos + 2;
		struct dlb_slot s;
		enum dlb_answer_match match;
		size_t alen;
		uint32_t i, delay_ms;

		if (u->rlen - pos < (size_t)flen + 2)
			break;
		pos += (size_t)flen + 2;
		for (i = 0; i < u->nreqs; i++)
			if (flen >= DLB_DNS_HDR && u->reqs[i].s.wire_id == dlb_rd16(pkt))
				break;
		if (i == u->nreqs) {
			/*
			 * An answer to no query: the stream is out of step. As
			 * dnsdist, every client waiting on it loses its connection.
			 */
			up_fail_all(u, UP_FAIL_OUT_OF_STEP);
			return false;
		}
		if (u->reqs[i].xfr) {
			if (!up_xfr_message(u, i, pkt, flen))
				return false;
			continue;
		}
		match = dlb_slot_answer_matches(&u->reqs[i].s, pkt, flen, w->snap->set.allow_empty_response);
		s = u->reqs[i].s;
		up_remove_req(u, i);
		w->be_stats[s.be_index].outstanding--;
		dlb_oc_release(w, &s);
		u->last_use = ev_now(w->loop);
		u->attempts = 0;	/* it answers: a later break gets a fresh round of retries */
		if (match != DLB_ANSWER_OK) {
			/*
			 * On a stream there is no waiting for the real one. As
			 * dnsdist, the client's connection is closed; the backend
			 * connection, still in step, stays.
			 */
			if (match == DLB_ANSWER_NONCOMPLIANT)
				w->stats.noncompliant_responses++;
			if (s.client.proto == DLB_CLIENT_TCP)
				dlb_tcp_drop(w, &s.client);
			if (u->single && u->nreqs == 0) {
				up_free(u);
				return false;
			}
			continue;
		}
		alen = dlb_query_finish_response(w, &pkt, flen, &s, &delay_ms);
		if (alen == 0) {
			/* dropped by a rule, or a prefetch */
			if (s.client.proto == DLB_CLIENT_TCP)
				dlb_tcp_drop(w, &s.client);
		} else if (s.client.proto == DLB_CLIENT_TCP) {
			dlb_tcp_deliver(w, &s.client, pkt, alen);
		} else {
			/* a UDP client of a tcpOnly backend */
			alen = dlb_query_fit_udp(w, &s.client, pkt, alen);
			if (delay_ms > 0)
				dlb_forward_reply(w, &s.client, pkt, alen, delay_ms, false);
			else
				dlb_frontend_send_reply(w, &s.client, pkt, alen);
		}
		if (u->single && u->nreqs == 0) {
			up_free(u);
			return false;
		}
	}
	memmove(u->rbuf, u->rbuf + pos, u->rlen - pos);
	u->rlen -= pos;
	if (u->rlen >= 2 && (size_t)dlb_rd16(u->rbuf) + 2 > u->rcap) {
		size_t need = (size_t)dlb_rd16(u->rbuf) + 2;
		uint8_t *nb = realloc(u->rbuf, need);

		if (nb == NULL) {
			up_fail_all(u, UP_FAIL_ERROR);
			return false;
		}
		u->rbuf = nb;
		u->rcap = need;
	}
	return true;
}

static void
up_io_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct dlb_tcp_up *u = container_of(io, struct dlb_tcp_up, io);

	if (u->state == UP_CONNECTING) {
		int err = 0;
		socklen_t el = sizeof(err);

		if (getsockopt(u->fd, SOL_SOCKET, SO_ERROR, &err, &el) == -1 || err != 0) {
			/* the connection failed before the query could go */
			u->w->be_stats[u->be_index].tcp_died_sending++;
			up_broken(u);
			return;
		}
		u->state = UP_READY;
		u->last_use = ev_now(loop);
	}
	if (revents & EV_WRITE) {
		if (!up_write(u))
			return;
		if (u->state == UP_CONNECTING)
			return;	/* reconnecting */
	}
	if (revents & EV_READ) {
		ssize_t n;

		if (u->rcap == 0) {
			u->rbuf = malloc(TCP_RBUF_INITIAL);
			if (u->rbuf == NULL) {
				up_fail_all(u, UP_FAIL_ERROR);
				return;
			}
			u->rcap = TCP_RBUF_INITIAL;
		}
		n = recv(u->fd, u->rbuf + u->rlen, u->rcap - u->rlen, MSG_DONTWAIT);
		if (n == 0 || (n == -1 && errno != EAGAIN && errno != EINTR)) {
			/* with queries waiting: dnsdist's tcpDiedReadingResponse */
			if (u->nreqs > 0)
				u->w->be_stats[u->be_index].tcp_died_reading++;
			up_broken(u);
			return;
		}
		if (n > 0) {
			u->rlen += (size_t)n;
			if (!up_read_frames(u))
				return;
		}
	}
	up_arm_timer(u);
}

/*
 * A connection to @be with room for a query; @own: a new one of its own,
 * never shared (a zone transfer, as dnsdist).
 */
static struct dlb_tcp_up *
up_get(struct dlb_worker *w, const struct dlb_backend *be, bool own)
{
	struct dlb_be_local *bl = &w->be[be->index];
	uint32_t max = up_max_inflight(be);
	struct dlb_tcp_up *u;

	/* a PROXY header names one client: such connections are never shared */
	for (u = bl->tcp_conns; u != NULL && !own; u = u->next) {
		if (u->fd >= 0 && !u->single && u->nreqs < max) {
			w->be_stats[be->index].tcp_reused++;
			return u;
		}
	}
	if (bl->tcp_count >= TCP_MAX_UP_PER_BACKEND)
		return NULL;
	u = calloc(1, sizeof(*u));
	if (u == NULL)
		return NULL;
	u->w = w;
	u->be_index = be->index;
	u->single = be->use_proxy_protocol || own;
	u->fd = -1;
	u->last_use = ev_now(w->loop);
	ev_init(&u->timer, up_timer_cb);
	u->next = bl->tcp_conns;
	bl->tcp_conns = u;
	bl->tcp_count++;
	w->tcp_up++;
	if (up_connect(u) != 0) {
		w->stats.tcp_downstream_failures++;
		up_free(u);
		return NULL;
	}
	return u;
}

void
dlb_tcp_forward(struct dlb_worker *w, struct dlb_query *q, const struct dlb_client *c)
{
	const struct dlb_backend *be = q->be;
	bool xfr = c->proto == DLB_CLIENT_TCP && q->m.qdcount > 0 &&
		   (q->m.qtype == DLB_TYPE_AXFR || q->m.qtype == DLB_TYPE_IXFR);
	struct dlb_tcp_up *u = up_get(w, be, xfr);
	struct up_req *r;
	double timeout = be->tcp_recv_timeout > 0 ? be->tcp_recv_timeout : 30;
	size_t hl;
	uint16_t id;
	bool unique;
	struct dlb_slot s;

	memset(&s, 0, offsetof(struct dlb_slot, key));
	dlb_query_fill_slot(&s, q, c);
	if (c->proto != DLB_CLIENT_INTERNAL) {
		switch (dlb_oc_acquire(w, &c->peer.sa)) {
		case DLB_COC_OVER:
			if (c->proto == DLB_CLIENT_TCP)
				client_over_cap(w, c, &s);
			else
				dlb_forward_over_cap(w, q, c);
			return;
		case DLB_COC_ACQUIRED:
			s.client_counted = 1;	/* released where `outstanding` goes down */
			break;
		case DLB_COC_UNTRACKED:
			break;
		}
	}
	if (u == NULL || u->nreqs == u->cap) {
		struct up_req *nr = NULL;

		if (u != NULL) {
			uint32_t ncap = u->cap ? u->cap * 2 : 4;

			nr = realloc(u->reqs, ncap * sizeof(*nr));
			if (nr != NULL) {
				u->reqs = nr;
				u->cap = ncap;
			}
		}
		if (nr == NULL) {
			dlb_oc_release(w, &s);
			w->stats.downstream_send_errors++;
			w->be_stats[be->index].send_errors++;
			if (c->proto == DLB_CLIENT_TCP)
				client_fail(w, c, &s, true);
			return;
		}
	}
	/* an ID unique on this connection: never reuse one in flight (CVE-2026-33596) */
	do {
		id = (uint16_t)dlb_rng_u32(&w->rng);
		unique = true;
		for (uint32_t i = 0; i < u->nreqs; i++)
			if (u->reqs[i].s.wire_id == id)
				unique = false;
	} while (!unique);
	r = &u->reqs[u->nreqs];
	r->s = s;
	r->s.wire_id = id;
	r->s.deadline = ev_now(w->loop) + timeout;
	r->written = 0;
	r->xfr = xfr;
	r->master_serial = r->soa_count = r->master_count = 0;
	/* room for a PROXY header and an ECS option or OPT RR added on the way */
	r->frame = malloc(DLB_PP2_MAX + q->len + 2 + (q->ecslen > 0 ? 11u + q->ecslen : 0));
	if (r->frame == NULL) {
		dlb_oc_release(w, &r->s);
		w->stats.downstream_send_errors++;
		if (c->proto == DLB_CLIENT_TCP)
			client_fail(w, c, &s, true);
		return;
	}
	hl = be->use_proxy_protocol ? dlb_query_pp_header(w, c, c->proto != DLB_CLIENT_UDP,
							   r->frame) : 0;
	memcpy(r->frame + hl + 2, q->pkt, q->len);
	r->flen = hl + 2 + dlb_query_add_ecs(w, q, r->frame + hl + 2, q->len,
					     q->len + (q->ecslen > 0 ? 11u + q->ecslen : 0),
					     &r->s.ecs_added);
	dlb_wr16(r->frame + hl, (uint16_t)(r->flen - hl - 2));
	dlb_wr16(r->frame + hl + 2, id);
	u->nreqs++;
	u->queries++;
	u->last_use = ev_now(w->loop);
	w->be_stats[be->index].queries++;
	w->be_stats[be->index].outstanding++;
	if (u->state == UP_READY && !up_write(u))
		return;
	up_arm_timer(u);
}

uint64_t
dlb_tcp_oc_marked(const struct dlb_worker *w)
{
	uint64_t n = 0;

	for (int b = 0; b < w->nbe; b++)
		for (const struct dlb_tcp_up *u = w->be[b].tcp_conns; u != NULL; u = u->next)
			for (uint32_t i = 0; i < u->nreqs; i++)
				n += u->reqs[i].s.client_counted;
	return n;
}

void
dlb_tcp_worker_close_all(struct dlb_worker *w)
{
	for (uint32_t i = 0; i < w->nconns; i++)
		if (w->conns[i] != NULL)
			client_close(w->conns[i]);
	for (int b = 0; b < w->nbe; b++) {
		while (w->be[b].tcp_conns != NULL) {
			struct dlb_tcp_up *u = w->be[b].tcp_conns;

			for (uint32_t i = 0; i < u->nreqs; i++) {
				w->be_stats[u->reqs[i].s.be_index].outstanding--;
				dlb_oc_release(w, &u->reqs[i].s);
			}
			up_free(u);
		}
	}
	/* the worker is ending: its UDP slots are freed without release */
	dlb_oc_worker_free(w);
	free(w->conns);
	free(w->conns_free);
	w->conns = NULL;
	w->conns_free = NULL;
	w->nconns = w->conns_cap = w->nfree_conns = 0;
}
