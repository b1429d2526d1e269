/*
 * doh_upstream.c - DNS over HTTPS towards backends (dnslb/upstream/doh_upstream.h).
 *
 * One connection is a stream (dnslb/core/stream.h; TLS from
 * dnslb/core/stream_tls.h for a tls= server) under an nghttp2 client
 * session. Bytes read go to nghttp2_session_mem_recv; nghttp2's output goes
 * to the stream's write queue from the send callback (before the handshake
 * is done it waits there). A query is a request whose body a data provider
 * reads from the request's copy of the query; the request is the stream's
 * user data in nghttp2.
 *
 * The end of a request is decided in nghttp2's stream-close callback and
 * delivered later: inside nghttp2's callbacks nothing reaches the sink, and
 * the finished requests wait on the connection's done list until
 * nghttp2_session_mem_recv has returned. The sink may then re-enter
 * dlb_doh_up_send (a TCP client's next query), on this connection among
 * others; a connection is freed only from its own events (read, timer,
 * stream failure), never under a caller's feet.
 *
 * Per worker and backend the connections sit on w->be[].doh_conns. A query
 * takes the first one that is open, not going away and below the server's
 * SETTINGS_MAX_CONCURRENT_STREAMS; else a new one (at most
 * DLB_DOH_UP_MAX_CONNS). An idle connection closes after the idle time;
 * beyond the number of idle connections kept per backend, at once
 * (setDoHDownstreamMaxIdleTime, setMaxIdleDoHConnectionsPerDownstream).
 * With useProxyProtocol, as dnsdist 1.7.3, a query opens a connection of
 * its own whose first bytes (inside TLS, before the HTTP/2 preface) are the
 * PROXY header naming its client, closed once the query is done; a health
 * check's connection starts with a LOCAL header.
 *
 * What dnsdist 1.7.3 does, and so this file: POST with :scheme https,
 * :authority the subjectName, accept and content-type
 * application/dns-message, a user-agent, content-length, and with
 * addXForwardedHeaders x-forwarded-for/-port/-proto; SETTINGS of no server
 * push, MAX_CONCURRENT_STREAMS 0 and a 16 MiB window; a body past 65535
 * bytes, an unknown stream or an unreadable :status fail the connection
 * (tcpDiedReadingResponse); a status other than 200 fails its query only; a
 * reset stream is sent again on another connection while the query has
 * retries left; a timeout fails every query of the connection
 * (tcpReadTimeouts or tcpWriteTimeouts).
 */
#include "dnslb/upstream/doh_upstream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

#include "dnslb/core/buf.h"
#include "dnslb/core/config.h"
#include "dnslb/core/connstat.h"
#include "dnslb/core/log.h"
#include "dnslb/core/proxyproto.h"
#include "dnslb/core/sink.h"
#include "dnslb/core/stream.h"
#include "dnslb/core/stream_tls.h"
#include "dnslb/core/tls.h"
#include "dnslb/core/wstate.h"
#include "dnslb/upstream/tcp_upstream.h"

/* "nghttp2-<version>/dnsdist" in dnsdist 1.7.3; dnslb names itself */
#define DOH_USER_AGENT	"nghttp2-" NGHTTP2_VERSION "/dnslb"

/* How a request ended (decided in nghttp2's callbacks, delivered after). */
enum req_outcome {
	REQ_ANSWER = 0,		/* status 200 and a body */
	REQ_HTTP_ERROR,		/* another status, or none */
	REQ_RESET,		/* reset by the server (or refused by its GOAWAY) */
};

struct doh_req {
	struct doh_req *next;		/* on the connection's done list */
	struct dlb_slot s;		/* worker: the query's slot (s.wire_id: its ID) */
	int32_t stream_id;
	uint8_t *q;			/* the query as sent */
	size_t qlen, qpos;
	struct dlb_buf body;		/* the answer, up to DLB_DOH_UP_MAX_BODY */
	int status;			/* :status; 0 none yet */
	uint8_t outcome;		/* enum req_outcome, once done */
	uint8_t failures;		/* times sent again after a reset */
	uint8_t prelen;			/* useProxyProtocol: the PROXY header's length */
	uint8_t pre[DLB_PP2_MAX];	/* ... and the header, sent before the connection's preface */
};

/* One HTTP/2 connection to a DoH server. Owner: its worker's list, or a health check. */
struct dlb_doh_up {
	struct dlb_worker *w;		/* NULL: a health check's connection */
	struct ev_loop *loop;
	const struct dlb_backend *be;
	struct dlb_doh_up *next;	/* w->be[].doh_conns */
	nghttp2_session *h2;
	struct dlb_stream st;
	struct dlb_stream_tls tls;
	ev_timer timer;			/* the first query's deadline, or the idle time */
	struct doh_req **reqs;		/* in flight, in send order */
	uint32_t nreqs, cap;
	struct doh_req *done_head, *done_tail;
	bool dead;			/* GOAWAY, a reset or a protocol error: no new query */
	bool broken;			/* a write failed where it could not be handled */
	bool fatal;			/* nghttp2 failed the session: fail everything */
	bool closing;			/* being freed: nghttp2's callbacks do nothing */
	bool session_kept;
	bool counted;			/* in the backend's current connections */
	bool single;			/* opened with a PROXY header: one query, never shared */
	double last_use, opened;
	uint32_t queries;		/* sent on it (dnsdist's average) */
	/* a health check's */
	dlb_doh_check_cb *check_cb;
	void *check_ud;
};

static void up_arm_timer(struct dlb_doh_up *u);
static void req_send(struct dlb_worker *w, const struct dlb_backend *be, struct doh_req *r);

/* ---- bookkeeping ----------------------------------------------------------------- */

/*
 * A request for query @q (@len bytes, copied), or NULL; @pre (@prelen
 * bytes, at most DLB_PP2_MAX, copied): the PROXY header its connection
 * starts with, or none.
 */
static struct doh_req *
req_new(const uint8_t *pre, size_t prelen, const uint8_t *q, size_t len)
{
	struct doh_req *r = calloc(1, sizeof(*r));

	if (r == NULL || prelen > sizeof(r->pre) || (r->q = malloc(len > 0 ? len : 1)) == NULL) {
		free(r);
		return NULL;
	}
	memcpy(r->q, q, len);
	r->qlen = len;
	if (prelen > 0)
		memcpy(r->pre, pre, prelen);
	r->prelen = (uint8_t)prelen;
	dlb_buf_init(&r->body, DLB_DOH_UP_MAX_BODY + 1);	/* + its NUL */
	return r;
}

static void
req_free(struct doh_req *r)
{
	free(r->q);
	dlb_buf_deinit(&r->body);
	free(r);
}

static double
up_now(const struct dlb_doh_up *u)
{
	return u->w != NULL ? dlb_worker_now(u->w) : ev_now(u->loop);
}

static struct dlb_be_stats *
up_stats(struct dlb_doh_up *u)
{
	return u->w != NULL ? &u->w->be_stats[u->be->index] : NULL;
}

#define UP_COUNT(u, field)						\
	do {								\
		struct dlb_be_stats *bs_ = up_stats(u);			\
		if (bs_ != NULL)					\
			bs_->field++;					\
	} while (0)

static void
up_remove_req(struct dlb_doh_up *u, const struct doh_req *r)
{
	for (uint32_t i = 0; i < u->nreqs; i++) {
		if (u->reqs[i] == r) {
			memmove(&u->reqs[i], &u->reqs[i + 1], (u->nreqs - i - 1) * sizeof(*u->reqs));
			u->nreqs--;
			return;
		}
	}
}

static void
up_unlink(struct dlb_doh_up *u)
{
	struct dlb_be_local *bl;

	if (u->w == NULL)
		return;
	bl = &u->w->be[u->be->index];
	for (struct dlb_doh_up **pp = &bl->doh_conns; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == u) {
			*pp = u->next;
			bl->doh_count--;
			u->w->tcp_up--;
			return;
		}
	}
}

/* A new reference to @u's TLS session if it can be resumed, else NULL. */
static SSL_SESSION *
up_session(const struct dlb_doh_up *u)
{
	SSL_SESSION *sess;

	if (u->tls.ssl == NULL || !u->tls.established || u->tls.failed)
		return NULL;
	sess = SSL_get1_session(u->tls.ssl);
	if (sess != NULL && !SSL_SESSION_is_resumable(sess)) {
		SSL_SESSION_free(sess);
		return NULL;
	}
	return sess;
}

/* Keep @u's session for the worker's next connection to the server (once resumable). */
static void
up_keep_session(struct dlb_doh_up *u)
{
	SSL_SESSION *sess;

	if (u->w == NULL || u->session_kept || (sess = up_session(u)) == NULL)
		return;
	dlb_tls_session_keep(&u->w->be[u->be->index].tls_session, sess);
	u->session_kept = true;
}

/*
 * Free @u and everything it holds; its requests must have been detached
 * (ended) already. nghttp2 is told nothing: the session goes with it.
 */
static void
up_free(struct dlb_doh_up *u)
{
	struct dlb_backend *be = (struct dlb_backend *)u->be;

	u->closing = true;
	up_keep_session(u);
	if (u->counted)
		dlb_connstat_closed(&be->tcp_current, &be->tcp_avg_queries, &be->tcp_avg_duration,
				    u->queries, up_now(u) - u->opened);
	if (u->h2 != NULL)
		nghttp2_session_del(u->h2);
	dlb_stream_close(&u->st);
	ev_timer_stop(u->loop, &u->timer);
	up_unlink(u);
	for (uint32_t i = 0; i < u->nreqs; i++)
		req_free(u->reqs[i]);
	while (u->done_head != NULL) {
		struct doh_req *r = u->done_head;

		u->done_head = r->next;
		req_free(r);
	}
	free(u->reqs);
	free(u);
}

/* ---- ending requests ------------------------------------------------------------- */

/* End worker request @r (detached from any connection) for @why, and free it. */
static void
req_end(struct dlb_worker *w, struct doh_req *r, enum dlb_slot_end why)
{
	struct dlb_slot s = r->s;

	req_free(r);
	w->be_stats[s.be_index].outstanding--;
	w->up_sink->end(w, &s, why);
}

/*
 * Free worker connection @u, then end every request it had (finished or
 * not: the connection broke under them) for @why.
 */
static void
up_end_all(struct dlb_doh_up *u, enum dlb_slot_end why)
{
	struct dlb_worker *w = u->w;
	struct doh_req **reqs = u->reqs, *done = u->done_head;
	uint32_t n = u->nreqs;

	/* detach first: ending a request may re-enter this module */
	u->reqs = NULL;
	u->nreqs = u->cap = 0;
	u->done_head = u->done_tail = NULL;
	up_free(u);
	while (done != NULL) {
		struct doh_req *r = done;

		done = r->next;
		req_end(w, r, why);
	}
	for (uint32_t i = 0; i < n; i++)
		req_end(w, reqs[i], why);
	free(reqs);
}

/*
 * Fail every request of @u for @why (the connection is gone), then free
 * @u. A health check hears @text.
 */
static void
up_fail_all(struct dlb_doh_up *u, enum dlb_slot_end why, const char *text)
{
	if (u->w == NULL) {
		dlb_doh_check_cb *cb = u->check_cb;
		void *ud = u->check_ud;
		SSL_SESSION *sess = up_session(u);

		up_free(u);
		cb(ud, NULL, 0, text, sess);
		return;
	}
	u->w->stats.tcp_downstream_failures++;
	up_end_all(u, why);
}

/* ---- nghttp2's callbacks ---------------------------------------------------------- */

static ssize_t
h2_send_cb(nghttp2_session *session, const uint8_t *data, size_t length, int flags, void *ud)
{
	struct dlb_doh_up *u = ud;
	struct iovec iov = { (void *)data, length };

	(void)session, (void)flags;
	if (u->closing || u->broken)
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	if (dlb_stream_writev(&u->st, &iov, 1) != 0) {
		u->broken = true;	/* the timer fails it (the caller may be reading @u) */
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	}
	return (ssize_t)length;
}

static ssize_t
h2_body_cb(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
	   uint32_t *data_flags, nghttp2_data_source *source, void *ud)
{
	struct doh_req *r = source->ptr;
	size_t n = r->qlen - r->qpos;

	(void)session, (void)stream_id, (void)ud;
	if (n > length)
		n = length;
	memcpy(buf, r->q + r->qpos, n);
	r->qpos += n;
	if (r->qpos == r->qlen)
		*data_flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)n;
}

static int
h2_header_cb(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
	     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
	struct dlb_doh_up *u = ud;
	struct doh_req *r;
	int status = 0;

	(void)flags;
	if (u->closing || frame->hd.type != NGHTTP2_HEADERS ||
	    frame->headers.cat != NGHTTP2_HCAT_RESPONSE || namelen != 7 ||
	    memcmp(name, ":status", 7) != 0)
		return 0;
	r = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
	if (r == NULL) {
		u->fatal = true;
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	}
	for (size_t i = 0; i < valuelen; i++) {
		if (value[i] < '0' || value[i] > '9' || i >= 3) {
			/* as dnsdist: an unreadable status fails the connection */
			UP_COUNT(u, tcp_died_reading);
			u->fatal = true;
			return NGHTTP2_ERR_CALLBACK_FAILURE;
		}
		status = status * 10 + (value[i] - '0');
	}
	r->status = valuelen > 0 ? status : -1;
	return 0;
}

static int
h2_data_cb(nghttp2_session *session, uint8_t flags, int32_t stream_id, const uint8_t *data,
	   size_t len, void *ud)
{
	struct dlb_doh_up *u = ud;
	struct doh_req *r;

	(void)flags;
	if (u->closing)
		return 0;
	r = nghttp2_session_get_stream_user_data(session, stream_id);
	if (r == NULL || dlb_buf_append(&r->body, data, len) != DLB_OK) {
		/* a stream we do not know, or a body no DNS message needs */
		if (r == NULL || r->body.err == DLB_ESPACE)
			UP_COUNT(u, tcp_died_reading);
		u->fatal = true;
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	}
	return 0;
}

static int
h2_frame_cb(nghttp2_session *session, const nghttp2_frame *frame, void *ud)
{
	struct dlb_doh_up *u = ud;

	(void)session;
	if (frame->hd.type == NGHTTP2_GOAWAY)
		u->dead = true;		/* no new stream; the ones below its last ID go on */
	return 0;
}

/* A stream ended: its request goes to the done list, delivered after nghttp2 returns. */
static int
h2_close_cb(nghttp2_session *session, int32_t stream_id, uint32_t error_code, void *ud)
{
	struct dlb_doh_up *u = ud;
	struct doh_req *r;

	if (u->closing)
		return 0;
	r = nghttp2_session_get_stream_user_data(session, stream_id);
	if (r == NULL)
		return 0;
	nghttp2_session_set_stream_user_data(session, stream_id, NULL);
	up_remove_req(u, r);
	if (error_code != NGHTTP2_NO_ERROR) {
		/* as dnsdist: the connection is not used again */
		UP_COUNT(u, tcp_died_reading);
		u->dead = true;
		r->outcome = REQ_RESET;
	} else {
		r->outcome = r->status == 200 ? REQ_ANSWER : REQ_HTTP_ERROR;
	}
	r->next = NULL;
	if (u->done_tail != NULL)
		u->done_tail->next = r;
	else
		u->done_head = r;
	u->done_tail = r;
	return 0;
}

static int
h2_error_cb(nghttp2_session *session, int lib_error_code, const char *msg, size_t len, void *ud)
{
	struct dlb_doh_up *u = ud;

	(void)session, (void)lib_error_code;
	dlb_debug("DoH backend %s: HTTP/2 error: %.*s", u->be->name, (int)len, msg);
	u->dead = true;
	return 0;
}

static nghttp2_session_callbacks *h2_callbacks;

static nghttp2_session_callbacks *
h2_cbs(void)
{
	nghttp2_session_callbacks *cbs = __atomic_load_n(&h2_callbacks, __ATOMIC_ACQUIRE);

	if (cbs != NULL)
		return cbs;
	if (nghttp2_session_callbacks_new(&cbs) != 0)
		return NULL;
	nghttp2_session_callbacks_set_send_callback(cbs, h2_send_cb);
	nghttp2_session_callbacks_set_on_header_callback(cbs, h2_header_cb);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, h2_data_cb);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, h2_frame_cb);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, h2_close_cb);
	nghttp2_session_callbacks_set_error_callback2(cbs, h2_error_cb);
	{
		nghttp2_session_callbacks *expect = NULL;

		/* several workers may race to build it: one wins, the others free theirs */
		if (!__atomic_compare_exchange_n(&h2_callbacks, &expect, cbs, false,
						 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			nghttp2_session_callbacks_del(cbs);
			cbs = expect;
		}
	}
	return cbs;
}

/* ---- the connection --------------------------------------------------------------- */

/* Hand nghttp2's pending output to the stream. @return false on a session error. */
static bool
up_flush(struct dlb_doh_up *u)
{
	if (u->closing || u->broken)
		return !u->broken;
	if (nghttp2_session_send(u->h2) != 0) {
		if (!u->broken)
			u->fatal = true;
		return false;
	}
	return true;
}

/*
 * Deliver the finished requests of @u: answers and failures to the sink
 * (a check's to its callback), resets sent again while retries remain.
 * The sink may re-enter dlb_doh_up_send; @u stays.
 */
static void
up_deliver(struct dlb_doh_up *u)
{
	struct dlb_worker *w = u->w;

	while (u->done_head != NULL) {
		struct doh_req *r = u->done_head;

		u->done_head = r->next;
		if (u->done_head == NULL)
			u->done_tail = NULL;
		if (w == NULL) {
			/* a check: its one request; the caller frees @u next */
			u->check_cb(u->check_ud,
				    r->outcome != REQ_ANSWER ? NULL :
				    r->body.p != NULL ? (uint8_t *)r->body.p : (uint8_t *)"",
				    r->outcome == REQ_ANSWER ? r->body.len : 0,
				    r->outcome == REQ_ANSWER ? NULL :
				    r->outcome == REQ_RESET ? "stream reset by the server" :
				    "HTTP status other than 200", up_session(u));
			u->check_cb = NULL;
			req_free(r);
			continue;
		}
		u->last_use = dlb_worker_now(w);
		if (r->outcome == REQ_RESET) {
			const struct dlb_backend *be = u->be;

			if (r->failures < (be->retries > 0 ? be->retries : 0)) {
				/* on another connection: this one takes no new stream */
				r->failures++;
				r->qpos = 0;
				dlb_buf_reset(&r->body);
				r->status = 0;
				r->s.deadline = dlb_worker_now(w) +
						(be->tcp_recv_timeout > 0 ? be->tcp_recv_timeout : 30);
				req_send(w, be, r);
				continue;
			}
			req_end(w, r, DLB_END_GAVE_UP);
			continue;
		}
		if (r->outcome == REQ_HTTP_ERROR) {
			dlb_debug("DoH backend %s: HTTP status %d", u->be->name, r->status);
			req_end(w, r, DLB_END_GAVE_UP);
			continue;
		}
		{
			enum dlb_answer_match match =
				dlb_slot_answer_matches(&r->s, (uint8_t *)r->body.p, r->body.len,
							w->snap->set.allow_empty_response);
			struct dlb_slot s = r->s;

			w->be_stats[s.be_index].outstanding--;
			if (match != DLB_ANSWER_OK) {
				if (match == DLB_ANSWER_NONCOMPLIANT)
					w->stats.noncompliant_responses++;
				req_free(r);
				w->up_sink->end(w, &s, DLB_END_CLOSED);
			} else {
				w->up_sink->answer(w, &s, (uint8_t *)r->body.p, r->body.len, false);
				req_free(r);
			}
		}
	}
}

static void
up_timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct dlb_doh_up *u = container_of(t, struct dlb_doh_up, timer);
	double now = ev_now(loop);

	(void)revents;
	if (u->broken || u->fatal) {
		UP_COUNT(u, tcp_died_sending);
		up_fail_all(u, DLB_END_GAVE_UP, "the connection broke while sending");
		return;
	}
	if (u->nreqs > 0) {
		if (now >= u->reqs[0]->s.deadline) {
			/* as dnsdist: the server sat on a query, the connection's queries fail */
			if (dlb_stream_pending(&u->st) > 0)
				UP_COUNT(u, tcp_write_timeouts);
			else
				UP_COUNT(u, tcp_read_timeouts);
			up_fail_all(u, DLB_END_TIMEOUT, "timeout");
			return;
		}
	} else if (u->w != NULL &&
		   (u->dead || now - u->last_use >= u->w->snap->set.doh_max_idle_time)) {
		up_free(u);
		return;
	}
	up_arm_timer(u);
}

static void
up_arm_timer(struct dlb_doh_up *u)
{
	double now, due;

	ev_timer_stop(u->loop, &u->timer);
	if (u->broken || u->fatal) {
		due = 0;
	} else if (u->st.state == DLB_STREAM_CONNECTING || u->w == NULL) {
		return;	/* the stream's connect timeout runs, or a check's owner's timeout */
	} else if (u->nreqs > 0) {
		due = u->reqs[0]->s.deadline;
	} else {
		due = u->dead ? 0 : u->last_use + u->w->snap->set.doh_max_idle_time;
	}
	if (u->w != NULL) {
		dlb_worker_clock_sync(u->w);	/* libev's clock, which the timer runs on, is now */
		now = dlb_worker_now(u->w);
	} else {
		now = ev_now(u->loop);
	}
	ev_timer_set(&u->timer, due > now ? due - now : 0.001, 0.);
	ev_timer_start(u->loop, &u->timer);
}

/* Idle connections of @u's worker to its server, @u aside. */
static uint32_t
up_idle_others(const struct dlb_doh_up *u)
{
	uint32_t n = 0;

	for (const struct dlb_doh_up *o = u->w->be[u->be->index].doh_conns; o != NULL; o = o->next)
		n += o != u && o->nreqs == 0 && !o->dead;
	return n;
}

/*
 * After an event on @u: deliver what finished, send what nghttp2 has, and
 * close the connection if it broke or has no more use. @return false if
 * @u was freed.
 */
static bool
up_settle(struct dlb_doh_up *u)
{
	up_deliver(u);
	if (u->w == NULL && u->check_cb == NULL) {
		up_free(u);	/* a check, answered */
		return false;
	}
	(void)up_flush(u);
	if (u->fatal) {
		up_fail_all(u, DLB_END_GAVE_UP, "HTTP/2 protocol error");
		return false;
	}
	if (u->w != NULL && u->nreqs == 0 && !u->broken &&
	    (u->dead || u->single || up_idle_others(u) >= u->w->snap->set.doh_max_idle_conns)) {
		/* no more use (a PROXY header's connection: its one query), or more
		 * idle connections than are kept */
		up_free(u);
		return false;
	}
	up_arm_timer(u);
	return true;
}

static bool
up_connected(struct dlb_stream *st, void *ud)
{
	struct dlb_doh_up *u = ud;

	(void)st;
	if (u->tls.resumed && u->w == NULL)
		__atomic_add_fetch(&((struct dlb_backend *)u->be)->check_tls_resumptions, 1,
				   __ATOMIC_RELAXED);
	else if (u->tls.resumed)
		UP_COUNT(u, tls_resumptions);
	u->last_use = up_now(u);
	up_arm_timer(u);
	return true;
}

static void
up_readable(struct dlb_stream *st, void *ud)
{
	struct dlb_doh_up *u = ud;
	uint8_t buf[16384];
	ssize_t n = dlb_stream_read(st, buf, sizeof(buf));

	if (n == -1 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		/* closed by the server: with queries waiting, dnsdist's tcpDiedReadingResponse */
		if (u->nreqs > 0 || u->done_head != NULL) {
			UP_COUNT(u, tcp_died_reading);
			up_fail_all(u, DLB_END_GAVE_UP, "the connection was closed");
		} else if (u->w == NULL) {
			up_fail_all(u, DLB_END_GAVE_UP, "the connection was closed");
		} else {
			up_free(u);
		}
		return;
	}
	u->last_use = up_now(u);
	if (nghttp2_session_mem_recv(u->h2, buf, (size_t)n) < 0)
		u->fatal = true;
	if (!u->fatal)
		up_keep_session(u);
	(void)up_settle(u);
}

static void
up_failed(struct dlb_stream *st, void *ud, enum dlb_stream_fail why, int err)
{
	struct dlb_doh_up *u = ud;
	char reason[256], text[300];

	(void)st, (void)err;
	if (why == DLB_STREAM_CONNECT_TIMEOUT) {
		UP_COUNT(u, tcp_connect_timeouts);
		up_fail_all(u, DLB_END_CONNECT_TIMEOUT, "connection timeout");
		return;
	}
	if (why == DLB_STREAM_CONNECT && u->tls.failed) {
		/* no other attempt: another handshake would fail alike, and never in clear */
		dlb_tls_client_failure(u->tls.ssl, u->tls.error, reason, sizeof(reason));
		if (u->w != NULL) {
			u->w->stats.tls_downstream_failures++;
			UP_COUNT(u, tcp_died_sending);
			dlb_log_ratelimited(DLB_LOG_WARN,
					    "TLS handshake with DoH downstream %s (%s) failed: %s",
					    u->be->name, u->be->addr_text, reason);
		}
		snprintf(text, sizeof(text), "TLS handshake failed: %s", reason);
		up_fail_all(u, DLB_END_GAVE_UP, text);
		return;
	}
	UP_COUNT(u, tcp_died_sending);
	up_fail_all(u, DLB_END_GAVE_UP, why == DLB_STREAM_CONNECT ? "connection refused" :
								    "the connection broke");
}

static const struct dlb_stream_cb up_stream_cb = {
	.connected = up_connected,
	.readable = up_readable,
	.drained = NULL,
	.failed = up_failed,
};

/*
 * A new connection to @be on @loop, connecting (requests wait in its
 * queue), its first bytes PROXY header @pre (@prelen bytes; 0: none):
 * inside TLS, before HTTP/2's preface, as dnsdist 1.7.3 sends it. NULL on
 * error.
 */
static struct dlb_doh_up *
up_open(struct ev_loop *loop, struct dlb_worker *w, const struct dlb_backend *be,
	SSL_SESSION *resume, double connect_timeout, const uint8_t *pre, size_t prelen)
{
	/* as dnsdist: no push (and so no streams from the server), a 16 MiB window */
	static const nghttp2_settings_entry iv[] = {
		{ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 0 },
		{ NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
		{ NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 16 * 1024 * 1024 },
	};
	nghttp2_session_callbacks *cbs = h2_cbs();
	struct dlb_stream_target t;
	struct dlb_doh_up *u;

	if (cbs == NULL || (u = calloc(1, sizeof(*u))) == NULL)
		return NULL;
	u->w = w;
	u->loop = loop;
	u->be = be;
	ev_init(&u->timer, up_timer_cb);
	dlb_stream_init(&u->st, loop, &dlb_stream_tcp_ops, &up_stream_cb, u, SIZE_MAX);
	if (nghttp2_session_client_new(&u->h2, cbs, u) != 0 ||
	    nghttp2_submit_settings(u->h2, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0])) != 0)
		goto fail;
	if (be->tls != NULL) {
		SSL *ssl = dlb_tcp_up_tls_new(be, resume);

		if (ssl == NULL)
			goto fail;
		dlb_stream_tls_use(&u->st, &u->tls, ssl);	/* freed with the stream */
	}
	/* a check binds its source free (it may not be up yet), as health.c's others */
	dlb_tcp_up_target(be, w != NULL ? IP_BIND_ADDRESS_NO_PORT : IP_FREEBIND, &t);
	/* tcpConnectTimeout=0 leaves no time at all, never an endless wait */
	if (dlb_stream_connect(&u->st, &t, connect_timeout > 0 ? connect_timeout : 0.001) != 0)
		goto fail;
	if (prelen > 0) {
		struct iovec iov = { (void *)pre, prelen };

		/* queued until the handshake is done; nghttp2's output follows it */
		if (dlb_stream_writev(&u->st, &iov, 1) != 0)
			goto fail;
		u->single = true;
	}
	u->last_use = u->opened = ev_now(loop);
	return u;
fail:
	if (u->h2 != NULL)
		nghttp2_session_del(u->h2);
	u->h2 = NULL;
	dlb_stream_close(&u->st);
	free(u);
	return NULL;
}

/* How many streams @u may carry now (the server's SETTINGS_MAX_CONCURRENT_STREAMS). */
static uint32_t
up_max_streams(const struct dlb_doh_up *u)
{
	return nghttp2_session_get_remote_settings(u->h2, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
}

/*
 * A connection of @w to @be with room for request @r, or NULL. A request
 * with a PROXY header gets a new connection of its own (the header names
 * its client), as dnsdist's.
 */
static struct dlb_doh_up *
up_get(struct dlb_worker *w, const struct dlb_backend *be, const struct doh_req *r)
{
	struct dlb_be_local *bl = &w->be[be->index];
	struct dlb_doh_up *u;

	for (u = r->prelen > 0 ? NULL : bl->doh_conns; u != NULL; u = u->next) {
		if (!u->dead && !u->broken && !u->fatal && !u->single &&
		    u->nreqs < up_max_streams(u)) {
			w->be_stats[be->index].tcp_reused++;
			return u;
		}
	}
	if (bl->doh_count >= DLB_DOH_UP_MAX_CONNS)
		return NULL;
	u = up_open(w->loop, w, be, bl->tls_session, be->tcp_connect_timeout, r->pre, r->prelen);
	if (u == NULL) {
		w->stats.tcp_downstream_failures++;
		return NULL;
	}
	u->next = bl->doh_conns;
	bl->doh_conns = u;
	bl->doh_count++;
	w->tcp_up++;
	w->stats.tcp_downstream_connections++;
	w->be_stats[be->index].tcp_new++;
	dlb_connstat_open(&((struct dlb_backend *)be)->tcp_current,
			  &((struct dlb_backend *)be)->tcp_max);
	u->counted = true;
	return u;
}

/* The x-forwarded-proto of client protocol @c (dnsdist's names). */
static const char *
xf_proto(const struct dlb_worker *w, const struct dlb_client *c)
{
	bool tls = c->listener < w->cfg->nfrontends && w->cfg->frontends[c->listener].tls != NULL;

	switch (c->proto) {
	case DLB_CLIENT_UDP:
		return "dns-over-udp";
	case DLB_CLIENT_DOH:
		return tls ? "dns-over-https" : "dns-over-http";
	case DLB_CLIENT_TCP:
		return tls ? "dns-over-tls" : "dns-over-tcp";
	default:
		return NULL;
	}
}

#define NV(n, v, vl) { (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, (vl), NGHTTP2_NV_FLAG_NONE }

/* Submit request @r on @u (nghttp2 copies the headers). @return 0, or -1. */
static int
up_submit(struct dlb_doh_up *u, struct doh_req *r)
{
	const struct dlb_backend *be = u->be;
	char clen[16], addr[INET6_ADDRSTRLEN], port[8];
	nghttp2_nv nv[11] = {
		NV(":method", "POST", 4),
		NV(":scheme", "https", 5),
		NV(":authority", be->tls_subject_name, strlen(be->tls_subject_name)),
		NV(":path", be->doh_path, strlen(be->doh_path)),
		NV("accept", "application/dns-message", 23),
		NV("content-type", "application/dns-message", 23),
		NV("user-agent", DOH_USER_AGENT, sizeof(DOH_USER_AGENT) - 1),
	};
	size_t nnv = 7;
	nghttp2_data_provider dp;
	int32_t id;

	nv[nnv] = (nghttp2_nv)NV("content-length", clen,
				 (size_t)snprintf(clen, sizeof(clen), "%zu", r->qlen));
	nnv++;
	/* not for health checks, nor internal queries (no client port, as dnsdist) */
	if (be->doh_xff && u->w != NULL && r->s.client.proto != DLB_CLIENT_INTERNAL) {
		const union dlb_sockaddr *p = &r->s.client.peer;
		const char *proto = xf_proto(u->w, &r->s.client);
		uint16_t pn = 0;

		if (p->sa.sa_family == AF_INET) {
			inet_ntop(AF_INET, &p->sin.sin_addr, addr, sizeof(addr));
			pn = ntohs(p->sin.sin_port);
		} else if (p->sa.sa_family == AF_INET6) {
			inet_ntop(AF_INET6, &p->sin6.sin6_addr, addr, sizeof(addr));
			pn = ntohs(p->sin6.sin6_port);
		}
		if (pn != 0) {
			nv[nnv++] = (nghttp2_nv)NV("x-forwarded-for", addr, strlen(addr));
			nv[nnv++] = (nghttp2_nv)NV("x-forwarded-port", port,
						   (size_t)snprintf(port, sizeof(port), "%u", pn));
			if (proto != NULL)
				nv[nnv++] = (nghttp2_nv)NV("x-forwarded-proto", proto,
							   strlen(proto));
		}
	}
	if (u->nreqs == u->cap) {
		uint32_t ncap = u->cap ? u->cap * 2 : 8;
		struct doh_req **nr = realloc(u->reqs, ncap * sizeof(*nr));

		if (nr == NULL)
			return -1;
		u->reqs = nr;
		u->cap = ncap;
	}
	dp.source.ptr = r;
	dp.read_callback = h2_body_cb;
	id = nghttp2_submit_request(u->h2, NULL, nv, nnv, &dp, r);
	if (id < 0) {
		u->dead = true;
		return -1;
	}
	r->stream_id = id;
	u->reqs[u->nreqs++] = r;
	u->queries++;
	u->last_use = up_now(u);
	return 0;
}

/* ---- queries from a worker --------------------------------------------------------- */

/*
 * Send worker request @r (detached) to @be: on a connection with room, or a
 * new one. On failure it ends through the sink (@why).
 */
static void
req_send(struct dlb_worker *w, const struct dlb_backend *be, struct doh_req *r)
{
	struct dlb_doh_up *u = up_get(w, be, r);

	if (u == NULL || up_submit(u, r) != 0) {
		w->stats.downstream_send_errors++;
		w->be_stats[be->index].send_errors++;
		req_end(w, r, DLB_END_NO_MEMORY);
		return;
	}
	(void)up_flush(u);
	up_arm_timer(u);
}

void
dlb_doh_up_send(struct dlb_worker *w, const struct dlb_backend *be, const struct dlb_slot *s,
		const uint8_t *pre, size_t prelen, const uint8_t *msg, size_t len)
{
	double timeout = be->tcp_recv_timeout > 0 ? be->tcp_recv_timeout : 30;
	struct doh_req *r = req_new(pre, prelen, msg, len);

	if (r == NULL) {
		struct dlb_slot copy = *s;

		w->stats.downstream_send_errors++;
		w->be_stats[be->index].send_errors++;
		w->up_sink->end(w, &copy, DLB_END_NO_MEMORY);
		return;
	}
	r->s = *s;
	r->s.wire_id = len >= 2 ? dlb_rd16(msg) : 0;
	r->s.deadline = dlb_worker_now(w) + timeout;
	w->be_stats[be->index].queries++;
	w->be_stats[be->index].outstanding++;
	req_send(w, be, r);
}

uint64_t
dlb_doh_up_oc_marked(const struct dlb_worker *w)
{
	uint64_t n = 0;

	for (int b = 0; b < w->nbe; b++)
		for (const struct dlb_doh_up *u = w->be[b].doh_conns; u != NULL; u = u->next)
			for (uint32_t i = 0; i < u->nreqs; i++)
				n += u->reqs[i]->s.client_counted;
	return n;
}

void
dlb_doh_up_close_all(struct dlb_worker *w)
{
	for (int b = 0; b < w->nbe; b++)
		while (w->be[b].doh_conns != NULL)
			up_end_all(w->be[b].doh_conns, DLB_END_CLOSED);
}

/* ---- health checks ---------------------------------------------------------------- */

struct dlb_doh_up *
dlb_doh_check_start(struct ev_loop *loop, const struct dlb_backend *be, SSL_SESSION *resume,
		    const uint8_t *pre, size_t prelen, const uint8_t *q, size_t qlen,
		    double connect_timeout, dlb_doh_check_cb *cb, void *ud)
{
	struct dlb_doh_up *u = up_open(loop, NULL, be, resume, connect_timeout, pre, prelen);
	struct doh_req *r;

	if (u == NULL)
		return NULL;
	u->check_cb = cb;
	u->check_ud = ud;
	/* as dnsdist: a check's connection is one of the server's */
	__atomic_add_fetch(&((struct dlb_backend *)be)->check_conns, 1, __ATOMIC_RELAXED);
	dlb_connstat_open(&((struct dlb_backend *)be)->tcp_current,
			  &((struct dlb_backend *)be)->tcp_max);
	u->counted = true;
	r = req_new(NULL, 0, q, qlen);
	if (r == NULL) {
		up_free(u);
		return NULL;
	}
	if (up_submit(u, r) != 0 || !up_flush(u)) {
		if (u->nreqs == 0)
			req_free(r);
		up_free(u);
		return NULL;
	}
	return u;
}

void
dlb_doh_check_cancel(struct dlb_doh_up *u)
{
	if (u != NULL)
		up_free(u);
}
