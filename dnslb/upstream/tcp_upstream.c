/*
 * tcp_upstream.c - DNS over TCP towards backends (dnslb/upstream/tcp_upstream.h).
 *
 * Per worker and backend, a list of connections reused across clients;
 * each carries up to the backend's maxInFlight queries with IDs unique on
 * that connection. A request keeps its framed query until answered, so a
 * connection the backend closed is reopened and the queries resent (up to
 * `retries` attempts). A mismatched answer ends its query; an answer to no
 * query closes the connection and fails its queries (bad-inputs §3.2 #46).
 *
 * The bytes go over a stream (dnslb/core/stream.h) and are cut into
 * messages by dnslb/core/dnsframe.h. A DNS over TLS server's streams carry
 * TLS (dnslb/core/stream_tls.h), with the same reuse and pipelining; each
 * worker keeps the last session of each such server and offers it on its
 * next connection. A handshake that fails (a certificate that does not
 * validate among others) fails the connection's queries at once, with no
 * other attempt and never in clear. The end of every query goes to the
 * worker's upstream sink; nothing here knows the pipeline or the clients.
 * A sink may re-enter dlb_tcp_up_send (a TCP client's next query), and so
 * add to a connection being read: a write error met there is handled from
 * the connection's timer, never under the caller's feet.
 */
#include "dnslb/upstream/tcp_upstream.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/core/config.h"
#include "dnslb/core/connstat.h"
#include "dnslb/core/dnsframe.h"
#include "dnslb/core/log.h"
#include "dnslb/core/sink.h"
#include "dnslb/core/stream.h"
#include "dnslb/core/stream_tls.h"
#include "dnslb/core/tls.h"
#include "dnslb/core/wstate.h"

#define TCP_MAX_UP_PER_BACKEND	256		/* connections per worker and backend */
#define TCP_UP_IDLE_TIMEOUT	30.0		/* s an unused backend connection stays open */

struct up_req {
	struct dlb_slot s;		/* question, client, deadline; s.wire_id is ours */
	uint8_t *frame;			/* [PROXY header][length][query, ID rewritten] */
	size_t flen;
	/* a zone transfer (AXFR/IXFR from a TCP client): several answers */
	bool xfr;
	uint32_t master_serial;		/* of the first SOA answered */
	uint32_t soa_count, master_count;
};

/* A connection to a backend. Owner: its worker, on the backend's list (w->be[].tcp_conns). */
struct dlb_tcp_up {
	struct dlb_worker *w;
	struct dlb_tcp_up *next;
	int be_index;
	int attempts;
	bool single;			/* useProxyProtocol or a zone transfer: one query */
	bool broken;			/* a write failed inside dlb_tcp_up_send: see the timer */
	struct dlb_stream st;
	struct dlb_stream_tls tls;	/* st's TLS state (a DNS over TLS server) */
	bool session_kept;		/* this socket's session is the worker's to resume */
	struct dlb_frame_rx rx;
	ev_timer timer;			/* the first query's deadline, or the idle timeout */
	double last_use;
	double opened;			/* when the current socket was opened (loop clock) */
	uint32_t queries;		/* sent on the current socket (its average) */
	struct up_req *reqs;		/* in send order */
	uint32_t nreqs, cap;
};

static void up_arm_timer(struct dlb_tcp_up *u);
static void up_timer_cb(struct ev_loop *loop, ev_timer *t, int revents);
static bool up_connected(struct dlb_stream *st, void *ud);
static void up_readable(struct dlb_stream *st, void *ud);
static void up_failed(struct dlb_stream *st, void *ud, enum dlb_stream_fail why, int err);

static const struct dlb_stream_cb up_stream_cb = {
	.connected = up_connected,
	.readable = up_readable,
	.drained = NULL,
	.failed = up_failed,
};

void
dlb_tcp_up_target(const struct dlb_backend *be, int bind_opt, struct dlb_stream_target *t)
{
	memset(t, 0, sizeof(*t));
	t->addr = (const struct sockaddr *)&be->addr;
	t->addrlen = be->addrlen;
	if (be->source.ss_family != 0) {
		t->source = (const struct sockaddr *)&be->source;
		t->sourcelen = be->sourcelen;
	}
	t->iface = be->source_iface;
	t->bind_opt = bind_opt;
}

SSL *
dlb_tcp_up_tls_new(const struct dlb_backend *be, SSL_SESSION *resume)
{
	SSL *ssl = dlb_tls_client_ssl_new(be->tls, be->tls_subject_name, be->tls_subject_addr);

	if (ssl != NULL && resume != NULL)
		(void)SSL_set_session(ssl, resume);	/* not resumed: a full handshake */
	return ssl;
}

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

/*
 * Keep the TLS session of @u for the worker's next connection to its
 * server, once it can be resumed (a TLS 1.3 ticket comes after the
 * handshake, with the first answers).
 */
static void
up_keep_session(struct dlb_tcp_up *u)
{
	struct dlb_be_local *bl = &u->w->be[u->be_index];
	SSL_SESSION *sess;

	if (u->session_kept || u->tls.ssl == NULL || !u->tls.established || u->tls.failed)
		return;
	sess = SSL_get1_session(u->tls.ssl);
	if (sess == NULL)
		return;
	if (!SSL_SESSION_is_resumable(sess)) {
		SSL_SESSION_free(sess);
		return;
	}
	dlb_tls_session_keep(&bl->tls_session, sess);
	u->session_kept = true;
}

static void
up_close_stream(struct dlb_tcp_up *u)
{
	up_keep_session(u);
	if (u->st.fd >= 0) {
		struct dlb_backend *be = u->w->cfg->backends[u->be_index];

		dlb_connstat_closed(&be->tcp_current, &be->tcp_avg_queries, &be->tcp_avg_duration,
				    u->queries, dlb_worker_now(u->w) - u->opened);
	}
	dlb_stream_close(&u->st);
	dlb_frame_rx_discard(&u->rx);
}

static void
up_free(struct dlb_tcp_up *u)
{
	up_close_stream(u);
	ev_timer_stop(u->w->loop, &u->timer);
	up_unlink(u);
	for (uint32_t i = 0; i < u->nreqs; i++)
		free(u->reqs[i].frame);
	free(u->reqs);
	dlb_frame_rx_free(&u->rx);
	free(u);
}

/* Why the requests of a backend connection fail (up_fail_all). */
enum up_fail {
	UP_FAIL_ERROR,		/* no memory */
	UP_FAIL_GAVE_UP,	/* broken, and `retries` attempts made */
	UP_FAIL_TIMEOUT,	/* the first request's deadline passed */
	UP_FAIL_CONNECT_TIMEOUT,	/* the connect took longer than tcpConnectTimeout */
	UP_FAIL_OUT_OF_STEP,	/* an answer to no query */
	UP_FAIL_TLS,		/* the TLS handshake failed */
};

static const enum dlb_slot_end up_fail_end[] = {
	[UP_FAIL_ERROR] = DLB_END_NO_MEMORY,
	[UP_FAIL_GAVE_UP] = DLB_END_GAVE_UP,
	[UP_FAIL_TIMEOUT] = DLB_END_TIMEOUT,
	[UP_FAIL_CONNECT_TIMEOUT] = DLB_END_CONNECT_TIMEOUT,
	[UP_FAIL_OUT_OF_STEP] = DLB_END_CLOSED,
	[UP_FAIL_TLS] = DLB_END_GAVE_UP,
};

/* End the @n requests @reqs (detached from their connection) for @why, and free them. */
static void
up_end_reqs(struct dlb_worker *w, struct up_req *reqs, uint32_t n, enum dlb_slot_end why)
{
	for (uint32_t i = 0; i < n; i++) {
		w->be_stats[reqs[i].s.be_index].outstanding--;
		free(reqs[i].frame);
		w->up_sink->end(w, &reqs[i].s, why);
	}
	free(reqs);
}

/* Free @u, then end every request it had through the sink, for @why. */
static void
up_fail_all(struct dlb_tcp_up *u, enum up_fail why)
{
	struct dlb_worker *w = u->w;
	struct up_req *reqs = u->reqs;
	uint32_t n = u->nreqs;

	/* detach first: ending a request may re-enter this module */
	u->reqs = NULL;
	u->nreqs = u->cap = 0;
	w->stats.tcp_downstream_failures++;
	if (why == UP_FAIL_GAVE_UP)
		w->be_stats[u->be_index].tcp_gave_up++;
	up_free(u);
	up_end_reqs(w, reqs, n, up_fail_end[why]);
}

/* Open the socket (again) and queue every request on it. @return 0, -1. */
static int
up_connect(struct dlb_tcp_up *u)
{
	struct dlb_worker *w = u->w;
	struct dlb_backend *be = w->cfg->backends[u->be_index];
	struct dlb_stream_target t;

	if (be->tls != NULL) {
		SSL *ssl = dlb_tcp_up_tls_new(be, w->be[u->be_index].tls_session);

		if (ssl == NULL)
			return -1;
		dlb_stream_tls_use(&u->st, &u->tls, ssl);	/* freed with the stream */
		u->session_kept = false;
	}
	dlb_tcp_up_target(be, IP_BIND_ADDRESS_NO_PORT, &t);
	/* tcpConnectTimeout=0 leaves no time at all, never an endless wait */
	if (dlb_stream_connect(&u->st, &t,
			       be->tcp_connect_timeout > 0 ? be->tcp_connect_timeout : 0.001) != 0)
		return -1;
	u->attempts++;
	u->last_use = u->opened = ev_now(w->loop);
	u->queries = u->nreqs;	/* sent again on this one */
	w->stats.tcp_downstream_connections++;
	w->be_stats[u->be_index].tcp_new++;
	dlb_connstat_open(&be->tcp_current, &be->tcp_max);
	for (uint32_t i = 0; i < u->nreqs; i++) {
		struct iovec iov = { u->reqs[i].frame, u->reqs[i].flen };

		if (dlb_stream_writev(&u->st, &iov, 1) != 0)
			return -1;
	}
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

	up_close_stream(u);
	u->broken = false;
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
	double now, due;

	ev_timer_stop(u->w->loop, &u->timer);
	if (u->broken) {
		due = 0;
	} else if (u->st.state == DLB_STREAM_CONNECTING) {
		return;	/* the stream's connect timeout runs */
	} else if (u->nreqs > 0) {
		due = u->reqs[0].s.deadline;
	} else {
		due = u->last_use + TCP_UP_IDLE_TIMEOUT;
	}
	dlb_worker_clock_sync(u->w);	/* libev's clock, which the timer runs on, is now */
	now = dlb_worker_now(u->w);
	ev_timer_set(&u->timer, due > now ? due - now : 0.001, 0.);
	ev_timer_start(u->w->loop, &u->timer);
}

static void
up_timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct dlb_tcp_up *u = container_of(t, struct dlb_tcp_up, timer);
	double now = ev_now(loop);

	(void)revents;
	if (u->broken) {
		u->w->be_stats[u->be_index].tcp_died_sending++;
		up_broken(u);
		return;
	}
	if (u->nreqs > 0) {
		if (now >= u->reqs[0].s.deadline) {
			/* the backend sat on a query: fail the connection's queries */
			if (dlb_stream_pending(&u->st) > 0)
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

static bool
up_connected(struct dlb_stream *st, void *ud)
{
	struct dlb_tcp_up *u = ud;

	(void)st;
	if (u->tls.resumed)
		u->w->be_stats[u->be_index].tls_resumptions++;
	u->last_use = ev_now(u->w->loop);
	up_arm_timer(u);
	return true;
}

static void
up_failed(struct dlb_stream *st, void *ud, enum dlb_stream_fail why, int err)
{
	struct dlb_tcp_up *u = ud;

	(void)st, (void)err;
	if (why == DLB_STREAM_CONNECT_TIMEOUT) {
		/*
		 * As dnsdist 1.7.3: no other attempt (each would make the
		 * clients wait tcpConnectTimeout more); the clients' frontends
		 * count a downstream timeout.
		 */
		u->w->be_stats[u->be_index].tcp_connect_timeouts++;
		up_fail_all(u, UP_FAIL_CONNECT_TIMEOUT);
		return;
	}
	if (why == DLB_STREAM_CONNECT && u->tls.failed) {
		/* no other attempt: another handshake would fail alike */
		struct dlb_worker *w = u->w;
		const struct dlb_backend *be = w->cfg->backends[u->be_index];
		char reason[256];

		w->stats.tls_downstream_failures++;
		w->be_stats[u->be_index].tcp_died_sending++;
		dlb_tls_client_failure(u->tls.ssl, u->tls.error, reason, sizeof(reason));
		dlb_log_ratelimited(DLB_LOG_WARN,
				    "TLS handshake with downstream %s (%s) failed: %s", be->name,
				    be->addr_text, reason);
		up_fail_all(u, UP_FAIL_TLS);
		return;
	}
	/* the connection failed before or while the queries went */
	u->w->be_stats[u->be_index].tcp_died_sending++;
	up_broken(u);
}

static void
up_remove_req(struct dlb_tcp_up *u, uint32_t i)
{
	free(u->reqs[i].frame);
	memmove(&u->reqs[i], &u->reqs[i + 1], (u->nreqs - i - 1) * sizeof(*u->reqs));
	u->nreqs--;
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
		w->up_sink->xfr_part(w, &r->s, pkt, flen, false);
		return true;
	}
	s = r->s;
	up_remove_req(u, i);
	w->be_stats[s.be_index].outstanding--;
	w->up_sink->xfr_part(w, &s, pkt, flen, true);	/* the client then closes */
	if (u->single && u->nreqs == 0) {
		up_free(u);
		return false;
	}
	return true;
}

/* Handle the complete answers received. @return false if @u was freed. */
static bool
up_read_frames(struct dlb_tcp_up *u)
{
	struct dlb_worker *w = u->w;
	uint8_t *pkt;
	size_t flen;
	int rc;

	while ((rc = dlb_frame_rx_next(&u->rx, &pkt, &flen)) == 1) {
		struct dlb_slot s;
		enum dlb_answer_match match;
		uint32_t i;

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
			w->up_sink->end(w, &s, DLB_END_CLOSED);
		} else {
			w->up_sink->answer(w, &s, pkt, flen, false);
		}
		if (u->single && u->nreqs == 0) {
			up_free(u);
			return false;
		}
	}
	if (rc < 0) {
		up_fail_all(u, UP_FAIL_ERROR);
		return false;
	}
	return true;
}

static void
up_readable(struct dlb_stream *st, void *ud)
{
	struct dlb_tcp_up *u = ud;
	ssize_t n = dlb_frame_rx_fill(&u->rx, st);

	if (n == -1 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n == DLB_ENOMEM || n == DLB_ESPACE) {
		up_fail_all(u, UP_FAIL_ERROR);
		return;
	}
	if (n <= 0) {
		/* with queries waiting: dnsdist's tcpDiedReadingResponse */
		if (u->nreqs > 0)
			u->w->be_stats[u->be_index].tcp_died_reading++;
		up_broken(u);
		return;
	}
	if (!up_read_frames(u))
		return;
	up_keep_session(u);
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
		if (u->st.fd >= 0 && !u->single && !u->broken && u->nreqs < max) {
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
	u->last_use = ev_now(w->loop);
	dlb_stream_init(&u->st, w->loop, &dlb_stream_tcp_ops, &up_stream_cb, u, SIZE_MAX);
	dlb_frame_rx_init(&u->rx, 0);
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

/* @s could not be taken: no memory, or no connection. */
static void
up_refuse(struct dlb_worker *w, const struct dlb_backend *be, const struct dlb_slot *s,
	  bool count_backend)
{
	struct dlb_slot copy = *s;

	w->stats.downstream_send_errors++;
	if (count_backend)
		w->be_stats[be->index].send_errors++;
	w->up_sink->end(w, &copy, DLB_END_NO_MEMORY);
}

void
dlb_tcp_up_send(struct dlb_worker *w, const struct dlb_backend *be, const struct dlb_slot *s,
		const uint8_t *pre, size_t prelen, const uint8_t *msg, size_t len, bool xfr)
{
	struct dlb_tcp_up *u = up_get(w, be, xfr);
	struct up_req *r;
	double timeout = be->tcp_recv_timeout > 0 ? be->tcp_recv_timeout : 30;
	struct iovec iov;
	uint16_t id;
	bool unique;
	int rc;

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
			up_refuse(w, be, s, true);
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
	r->s = *s;
	r->s.wire_id = id;
	r->s.deadline = ev_now(w->loop) + timeout;
	r->xfr = xfr;
	r->master_serial = r->soa_count = r->master_count = 0;
	r->flen = prelen + 2 + len;
	r->frame = malloc(r->flen);
	if (r->frame == NULL) {
		up_refuse(w, be, s, false);
		return;
	}
	if (prelen > 0)
		memcpy(r->frame, pre, prelen);
	dlb_wr16(r->frame + prelen, (uint16_t)len);
	memcpy(r->frame + prelen + 2, msg, len);
	dlb_wr16(r->frame + prelen + 2, id);
	u->nreqs++;
	u->queries++;
	u->last_use = ev_now(w->loop);
	w->be_stats[be->index].queries++;
	w->be_stats[be->index].outstanding++;
	iov.iov_base = r->frame;
	iov.iov_len = r->flen;
	rc = dlb_stream_writev(&u->st, &iov, 1);
	if (rc != 0)
		u->broken = true;	/* the timer reconnects (the caller may be reading @u) */
	up_arm_timer(u);
}

uint64_t
dlb_tcp_up_oc_marked(const struct dlb_worker *w)
{
	uint64_t n = 0;

	for (int b = 0; b < w->nbe; b++)
		for (const struct dlb_tcp_up *u = w->be[b].tcp_conns; u != NULL; u = u->next)
			for (uint32_t i = 0; i < u->nreqs; i++)
				n += u->reqs[i].s.client_counted;
	return n;
}

void
dlb_tcp_up_close_all(struct dlb_worker *w)
{
	for (int b = 0; b < w->nbe; b++) {
		while (w->be[b].tcp_conns != NULL) {
			struct dlb_tcp_up *u = w->be[b].tcp_conns;
			struct up_req *reqs = u->reqs;
			uint32_t n = u->nreqs;

			u->reqs = NULL;
			u->nreqs = u->cap = 0;
			up_free(u);
			up_end_reqs(w, reqs, n, DLB_END_CLOSED);
		}
		/* after the closes, which keep one */
		dlb_tls_session_keep(&w->be[b].tls_session, NULL);
	}
}
