/*
 * tcp_client.c - DNS over TCP, the clients' side (dnslb/frontend/tcp_client.h).
 *
 * Each accepted connection is owned by the worker whose listening socket
 * accepted it. Its bytes come and go over a stream (dnslb/core/stream.h),
 * cut into queries by dnslb/core/dnsframe.h; every complete query goes
 * through the same pipeline as UDP. With maxInFlight = 0 queries are
 * handled strictly one at a time (in order); with N > 0, up to N are
 * forwarded at once and answered as they come back. Connections are found
 * again from answers through {index, generation} handles, so an answer for
 * a connection that has gone is dropped safely. Answers come back through
 * the client sink installed here (dnslb/core/sink.h); the backends' side
 * is dnslb/upstream/tcp_upstream.c.
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
#include "dnslb/frontend/tcp_client.h"

#include <errno.h>
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
#include "dnslb/core/connstat.h"
#include "dnslb/core/dnsframe.h"
#include "dnslb/core/stream.h"
#include "dnslb/core/stream_tls.h"
#include "dnslb/core/tls.h"
#include "dnslb/pipeline/l2cache.h"
#include "dnslb/core/log.h"
#include "dnslb/core/proxyproto.h"
#include "dnslb/pipeline/query.h"
#include "dnslb/pipeline/rings.h"
#include "dnslb/core/wstate.h"


_Static_assert(sizeof(((struct dlb_listener *)0)->tls_queries) == DLB_TLS_VCOUNT * sizeof(uint64_t),
	       "a listener's TLS figures follow enum dlb_tls_version_idx");
_Static_assert(sizeof(((struct dlb_listener *)0)->tls_failures) ==
		       DLB_TLS_FAIL_COUNT * sizeof(uint64_t),
	       "a listener's TLS figures follow enum dlb_tls_failure");

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

void
dlb_tcp_fe_opened(int fe)
{
	dlb_connstat_open(&fe_figs[fe].current, &fe_figs[fe].max);
}

void
dlb_tcp_fe_closed(int fe, uint64_t queries, double seconds)
{
	dlb_connstat_closed(&fe_figs[fe].current, &fe_figs[fe].avg_queries,
			    &fe_figs[fe].avg_duration, queries, seconds);
}

/* setTCPConnectionsOverloadThreshold: what a restricted connection gets (dnsdist 2.0's) */
#define TCP_OVERLOAD_RECV_TIMEOUT	0.5	/* s */
#define TCP_OVERLOAD_DURATION		5.0	/* s */

/* ---- client connections ---------------------------------------------------- */

/* A client connection. Owner: its worker (w->conns[idx]); client_close frees it. */
struct dlb_tcp_client {
	struct dlb_worker *w;
	struct dlb_listener *l;
	uint32_t idx, gen;
	union dlb_sockaddr peer;
	union dlb_sockaddr local;	/* wildcard listeners: the address asked (getsockname) */
	bool has_local;
	bool processing;		/* inside client_process: answers are only queued */
	struct dlb_stream st;		/* st.last_io: the last byte read or written */
	struct dlb_stream_tls tls;	/* a DNS over TLS listener's: st's TLS state */
	int8_t tls_version;		/* enum dlb_tls_version_idx once the handshake is done; -1:
					 * none (plain TCP, or not yet) */
	struct dlb_frame_rx rx;
	ev_timer timer;
	double started;
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
static void client_readable(struct dlb_stream *st, void *ud);
static bool client_drained(struct dlb_stream *st, void *ud);
static void client_failed(struct dlb_stream *st, void *ud, enum dlb_stream_fail why, int err);
static bool client_connected(struct dlb_stream *st, void *ud);

static const struct dlb_stream_cb client_stream_cb = {
	.connected = client_connected,
	.readable = client_readable,
	.drained = client_drained,
	.failed = client_failed,
};

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

	dlb_stream_close(&c->st);
	ev_timer_stop(w->loop, &c->timer);
	dlb_frame_rx_free(&c->rx);
	w->conns[c->idx] = NULL;
	w->conns_free[w->nfree_conns++] = c->idx;
	c->l->tcp_conns--;
	dlb_tcp_fe_closed(c->l->index, c->queries, dlb_worker_now(w) - c->started);
	if (__atomic_load_n(&fe->max_concurrent_tcp, __ATOMIC_RELAXED) > 0)
		__atomic_sub_fetch(&fe_conns[c->l->index], 1, __ATOMIC_RELAXED);
	if (c->counted_client)
		dlb_tcp_client_release(w->cfg, &c->peer.sa, dlb_worker_now(w));
	free(c);
}

static bool
client_done(const struct dlb_tcp_client *c)
{
	return (c->peer_closed || c->limit_reached) && c->inflight == 0 &&
	       dlb_stream_pending(&c->st) == 0 && dlb_frame_rx_held(&c->rx) == 0;
}

/* After reading or writing: close @c if it is done, else re-arm its timer. @return false if closed. */
static bool
client_after_io(struct dlb_tcp_client *c)
{
	if (client_done(c)) {
		client_close(c);
		return false;
	}
	client_arm_timer(c);
	return true;
}

/* Send a framed copy of @pkt (what the socket does not take is queued). @return false if @c was closed. */
static bool
client_queue(struct dlb_tcp_client *c, const uint8_t *pkt, size_t len)
{
	int rc;

	c->st.out_max = c->w->cfg->max_tcp_out_bytes;	/* one answer always fits */
	rc = dlb_frame_send(&c->st, NULL, 0, pkt, len);
	if (rc == 0) {
		c->l->tcp_responses++;
		return true;
	}
	if (rc == DLB_ESPACE)
		c->w->stats.tcp_output_buffer_full++;	/* a client that does not read its answers */
	else if (rc != DLB_ENOMEM)
		c->l->tcp_died_sending++;
	client_close(c);
	return false;
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
	    (dlb_stream_pending(&c->st) > 0 && now - c->st.last_io >= c->w->snap->set.tcp_send_timeout) ||
	    (dlb_stream_pending(&c->st) == 0 && c->inflight == 0 &&
	     now - c->st.last_io >= client_recv_timeout(c))) {
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

	if (dlb_stream_pending(&c->st) > 0)
		due = c->st.last_io + c->w->snap->set.tcp_send_timeout;
	else if (c->inflight == 0)
		due = c->st.last_io + client_recv_timeout(c);
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

static bool
client_drained(struct dlb_stream *st, void *ud)
{
	(void)st;
	return client_after_io(ud);
}

int
dlb_stream_client_tls_done(struct dlb_listener *l, const struct dlb_stream_tls *tls)
{
	struct dlb_tls_handshake_info hi;

	dlb_tls_handshake_info(tls->ssl, &hi);
	if (tls->resumed)
		l->tls_resumptions++;
	else
		l->tls_new_sessions++;
	if (hi.unknown_ticket_key)
		l->tls_unknown_ticket_keys++;
	if (hi.inactive_ticket_key)
		l->tls_inactive_ticket_keys++;
	return dlb_tls_version_index(tls->ssl);
}

void
dlb_stream_client_tls_failed(struct dlb_listener *l, const struct dlb_stream_tls *tls)
{
	struct dlb_tls_handshake_info hi;

	if (tls->ssl == NULL)
		return;
	dlb_tls_handshake_info(tls->ssl, &hi);
	if (hi.failure != DLB_TLS_FAIL_NONE)
		l->tls_failures[hi.failure]++;
}

/*
 * A TLS handshake is done (->connected; only TLS streams have one to wait
 * for): dnsdist's per-handshake figures, and the version its queries count
 * under.
 */
static bool
client_connected(struct dlb_stream *st, void *ud)
{
	struct dlb_tcp_client *c = ud;

	(void)st;
	if (c->tls.ssl != NULL)
		c->tls_version = (int8_t)dlb_stream_client_tls_done(c->l, &c->tls);
	return true;
}

/* The TLS handshake failed, or the client went away during it: as dnsdist,
 * a connection that died reading, and the failure's reason if it had one. */
static void
client_handshake_failed(struct dlb_tcp_client *c)
{
	c->l->tcp_died_reading++;
	dlb_stream_client_tls_failed(c->l, &c->tls);
}

static void
client_failed(struct dlb_stream *st, void *ud, enum dlb_stream_fail why, int err)
{
	struct dlb_tcp_client *c = ud;

	(void)st, (void)err;
	/* the stream was accepted: a write failed, or the TLS handshake */
	if (why == DLB_STREAM_CONNECT)
		client_handshake_failed(c);
	else
		c->l->tcp_died_sending++;
	client_close(c);
}

/*
 * The client closed its side, or its connection failed: is that dnsdist's
 * tcpDiedReadingQuery? Yes before its first query or in the middle of one;
 * not once it has been answered and is between queries.
 */
static bool
client_died_reading(const struct dlb_tcp_client *c)
{
	return c->queries == 0 || dlb_frame_rx_partial(&c->rx);
}

static void
client_readable(struct dlb_stream *st, void *ud)
{
	struct dlb_tcp_client *c = ud;
	ssize_t n = dlb_frame_rx_fill(&c->rx, st);

	if (n == DLB_ESPACE) {
		/* only happens while a frame is being processed: wait */
		dlb_stream_read_enable(st, false);
		return;
	}
	if (n == DLB_ENOMEM) {
		client_close(c);
		return;
	}
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
		dlb_stream_read_enable(st, false);
		c->peer_closed = true;
		client_process(c);
		return;
	}
	c->read_ios++;
	client_process(c);
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

	c->processing = true;
	for (;;) {
		uint8_t *msg;
		size_t flen;
		struct dlb_query q;
		struct dlb_client cl;
		struct dlb_dq_http dot;
		int rc;

		if (c->limit_reached) {
			/* over the per-connection query limit: ignore the rest */
			dlb_frame_rx_discard(&c->rx);
			break;
		}
		if (c->inflight >= max_inflight)
			break;
		rc = dlb_frame_rx_peek_len(&c->rx);
		if (rc >= 0 && rc < DLB_DNS_HDR) {
			/* length 0 or shorter than a header: framing is broken */
			w->stats.noncompliant_queries++;
			client_close(c);
			return;
		}
		rc = dlb_frame_rx_next(&c->rx, &msg, &flen);
		if (rc < 0) {
			client_close(c);
			return;
		}
		if (rc == 0)
			break;
		w->stats.queries++;
		c->l->tcp_queries++;
		if (c->tls_version >= 0)
			c->l->tls_queries[c->tls_version]++;
		c->queries++;
		c->read_ios = 0;
		q.pkt = msg;
		q.len = flen;
		q.cap = flen;	/* local answers are never longer than the query */
		q.tcp = true;
		q.client = &c->peer.sa;
		q.local = c->has_local ? &c->local.sa
				       : (const struct sockaddr *)&cfg->frontends[c->l->index].addr;
		q.http = NULL;
		if (c->tls.ssl != NULL) {
			/* DNS over TLS: SNIRule and dq:getServerNameIndication() */
			dot = (struct dlb_dq_http){
				.sni = SSL_get_servername(c->tls.ssl, TLSEXT_NAMETYPE_host_name),
			};
			q.http = &dot;
		}
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
			dlb_stream_client_fill(&cl, DLB_CLIENT_TCP, c->l, &c->peer, &q, c->idx, c->gen,
					       c->has_local ? &c->local : NULL);
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
	c->processing = false;
	if (c->peer_closed && c->inflight < max_inflight)
		dlb_frame_rx_discard(&c->rx);	/* an incomplete last frame will never complete */
	if (cfg->max_tcp_read_ios_per_query > 0 &&
	    c->read_ios >= (uint32_t)cfg->max_tcp_read_ios_per_query &&
	    dlb_frame_rx_partial(&c->rx)) {
		/* a query dribbled in (slowloris): close, and keep the client out a while */
		w->stats.tcp_too_many_read_ios++;
		dlb_tcp_client_ban(cfg, &c->peer.sa, dlb_worker_now(w),
				   cfg->tcp_ban_duration_read_ios);
		client_close(c);
		return;
	}
	/* read more only when there is room to act on it */
	dlb_stream_read_enable(&c->st,
			       !c->peer_closed && !c->limit_reached && c->inflight < max_inflight);
	client_after_io(c);
}

/* ---- what TCP and DoH clients share (tcp_client.h) ------------------------------ */

int
dlb_stream_client_accept(struct dlb_listener *l, union dlb_sockaddr *peer, socklen_t *plen)
{
	int fd;

	*plen = sizeof(*peer);
	fd = accept4(l->tcp_fd, &peer->sa, plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd == -1 && errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
		dlb_log_ratelimited(DLB_LOG_WARN, "accept: %s", strerror(errno));
	return fd;
}

bool
dlb_stream_client_setup(int fd, const struct dlb_listener *l, union dlb_sockaddr *local)
{
	int one = 1;
	socklen_t llen = sizeof(*local);

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return l->wildcard && getsockname(fd, &local->sa, &llen) == 0;
}

void
dlb_stream_client_fill(struct dlb_client *cl, enum dlb_client_proto proto,
		       const struct dlb_listener *l, const union dlb_sockaddr *peer,
		       const struct dlb_query *q, uint32_t idx, uint32_t gen,
		       const union dlb_sockaddr *local)
{
	memset(cl, 0, sizeof(*cl));
	cl->proto = (uint8_t)proto;
	cl->listener = (uint16_t)l->index;
	cl->peer = *peer;
	cl->orig_id = q->m.id;
	cl->orig_flags = q->orig_flags;
	cl->conn_id = idx;
	cl->conn_gen = gen;
	if (local != NULL) {
		cl->has_dst = 1;
		if (local->sa.sa_family == AF_INET)
			cl->dst.v4.ipi_addr = local->sin.sin_addr;
		else
			cl->dst.v6.ipi6_addr = local->sin6.sin6_addr;
	}
	cl->t_start = ev_now(l->w->loop);
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
		socklen_t plen;
		struct dlb_tcp_client *c;
		int fd = dlb_stream_client_accept(l, &peer, &plen);
		uint32_t fe_prior = 0, client_prior = 0;
		bool counted;

		if (fd == -1)
			return;
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
		if (c == NULL || conn_table_add(w, c) != 0) {
			free(c);
			if (counted)
				dlb_tcp_client_release(cfg, &peer.sa, now);
			if (max_conc > 0)
				__atomic_sub_fetch(&fe_conns[l->index], 1, __ATOMIC_RELAXED);
			close(fd);
			continue;
		}
		c->has_local = dlb_stream_client_setup(fd, l, &c->local);
		c->w = w;
		c->l = l;
		c->peer = peer;
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
		c->started = ev_now(w->loop);
		c->tls_version = -1;
		l->tcp_conns++;
		dlb_tcp_fe_opened(l->index);
		w->stats.tcp_client_connections++;
		ev_init(&c->timer, client_timer_cb);
		dlb_stream_init(&c->st, w->loop, &dlb_stream_tcp_ops, &client_stream_cb, c,
				cfg->max_tcp_out_bytes);
		dlb_frame_rx_init(&c->rx, 0);
		if (fe->tls != NULL) {
			/* DNS over TLS: the handshake first, on the stream */
			SSL *ssl = dlb_tls_server_ssl_new(fe->tls);

			if (ssl == NULL) {
				close(fd);
				client_close(c);
				continue;
			}
			SSL_set_accept_state(ssl);
			dlb_stream_tls_use(&c->st, &c->tls, ssl);
		}
		if (dlb_stream_attach(&c->st, fd) != 0) {
			if (fe->tls != NULL)
				client_handshake_failed(c);	/* the ClientHello was there already */
			client_close(c);
			continue;
		}
		if (fe->tls != NULL && c->st.state == DLB_STREAM_OPEN)
			client_connected(&c->st, c);
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

/* Answer @cl with @pkt (copied): its query is done. A client that went away is ignored. */
static void
client_deliver(struct dlb_worker *w, const struct dlb_client *cl, const uint8_t *pkt, size_t len)
{
	struct dlb_tcp_client *c = client_lookup(w, cl);

	if (c == NULL)
		return;	/* the client went away meanwhile */
	c->inflight--;
	if (!client_queue(c, pkt, len))
		return;
	/*
	 * Inside the connection's own client_process (an answer made while
	 * forwarding), the loop goes on with the next frame: recursing here
	 * would grow the stack with every pipelined query.
	 */
	if (!c->processing)
		client_process(c);
}

/* One message of a zone transfer for @cl, not the last (copied): its query stays in flight. */
static void
client_xfr_part(struct dlb_worker *w, const struct dlb_client *cl, const uint8_t *pkt, size_t len)
{
	struct dlb_tcp_client *c = client_lookup(w, cl);

	if (c == NULL)
		return;	/* the client went away meanwhile */
	if (!client_queue(c, pkt, len))
		return;
	client_after_io(c);
}

/* @cl's query gets no answer: release its place and close, as for a dropped query. */
static void
client_drop(struct dlb_worker *w, const struct dlb_client *cl)
{
	struct dlb_tcp_client *c = client_lookup(w, cl);

	if (c == NULL)
		return;	/* the client went away meanwhile */
	c->inflight--;
	client_close(c);	/* nothing to say on a stream */
}

static void tcp_sink_reply(struct dlb_worker *w, const struct dlb_client *cl, uint8_t *pkt,
			   size_t len, bool batched, bool part);
static void tcp_sink_no_answer(struct dlb_worker *w, const struct dlb_client *cl,
			       enum dlb_slot_end why);
static void tcp_sink_flush(struct dlb_worker *w);
static void tcp_sink_timed_out(struct dlb_worker *w, const struct dlb_client *cl);

/* How the pipeline answers TCP clients (dnslb/core/sink.h). */
const struct dlb_client_sink dlb_tcp_client_sink = {
	.reply = tcp_sink_reply,
	.no_answer = tcp_sink_no_answer,
	.flush = tcp_sink_flush,
	.timed_out = tcp_sink_timed_out,
};

static void
tcp_sink_reply(struct dlb_worker *w, const struct dlb_client *cl, uint8_t *pkt, size_t len,
	       bool batched, bool part)
{
	(void)batched;	/* copied into the connection's output at once */
	if (part)
		client_xfr_part(w, cl, pkt, len);
	else
		client_deliver(w, cl, pkt, len);
}

static void
tcp_sink_no_answer(struct dlb_worker *w, const struct dlb_client *cl, enum dlb_slot_end why)
{
	struct dlb_tcp_client *c = client_lookup(w, cl);

	/* dnsdist counts these per query on the client's frontend */
	if (c != NULL && why == DLB_END_GAVE_UP)
		c->l->tcp_gave_up++;
	else if (c != NULL && why == DLB_END_CONNECT_TIMEOUT)
		c->l->tcp_downstream_timeouts++;	/* a timeout: counted by ->timed_out */
	client_drop(w, cl);
}

static void
tcp_sink_timed_out(struct dlb_worker *w, const struct dlb_client *cl)
{
	struct dlb_tcp_client *c = client_lookup(w, cl);

	if (c != NULL)
		c->l->tcp_downstream_timeouts++;
}

static void
tcp_sink_flush(struct dlb_worker *w)
{
	(void)w;	/* each answer went out as it came */
}

void
dlb_tcp_clients_close_all(struct dlb_worker *w)
{
	for (uint32_t i = 0; i < w->nconns; i++)
		if (w->conns[i] != NULL)
			client_close(w->conns[i]);
	free(w->conns);
	free(w->conns_free);
	w->conns = NULL;
	w->conns_free = NULL;
	w->nconns = w->conns_cap = w->nfree_conns = 0;
}
