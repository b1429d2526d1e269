/*
 * doh_conn.c - DNS over HTTPS, the clients' side (doh_conn.h).
 *
 * A connection is owned by the worker whose listening socket accepted it,
 * and found again from answers through {index, generation} handles in the
 * worker's DoH table (as TCP clients are), plus the request's stream ID.
 * Bytes come and go over a stream (dnslb/core/stream.h), with TLS
 * (dnslb/core/stream_tls.h) unless the listener has no certificate. The
 * HTTP version is what ALPN chose, else what the first bytes say (HTTP/2's
 * connection preface or not).
 *
 * Each request is read as dnsdist 1.7 reads it (doh_req.h): routing, the
 * client address (X-Forwarded-For when trusted), the ACL, exact paths, the
 * response map, then the DNS query. As dnsdist's DoH frontend does, an OPT
 * RR (payload 4096) is added to a query that has none, and removed from the
 * backend's answer; the query then goes through the pipeline like a TCP one
 * (TCAction does not apply), and to the backend over UDP. A dropped query
 * gets 403, a query with no answer from its backend 502.
 *
 * The HTTP layer (doh_h2.c, doh_h1.c) must not be re-entered from its own
 * callbacks, nor freed under them: while a request is handed to us
 * (c->feeding), answers are only queued in the session, and the bytes go
 * out once the feed has returned.
 */
#include "dnslb/frontend/doh_conn.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dnslb/core/config.h"
#include "dnslb/core/doh_cfg.h"
#include "dnslb/core/log.h"
#include "dnslb/core/netmask.h"
#include "dnslb/core/sink.h"
#include "dnslb/core/stream.h"
#include "dnslb/core/stream_tls.h"
#include "dnslb/core/tls.h"
#include "dnslb/core/util.h"
#include "dnslb/core/wire.h"
#include "dnslb/core/wstate.h"
#include "dnslb/frontend/doh_h1.h"
#include "dnslb/frontend/doh_h2.h"
#include "dnslb/frontend/doh_req.h"
#include "dnslb/frontend/tcp_client.h"
#include "dnslb/pipeline/forward.h"
#include "dnslb/pipeline/l2cache.h"
#include "dnslb/pipeline/query.h"
#include "dnslb/pipeline/rings.h"

#define DOH_QBUF	(65535 + 16)	/* a query (a DNS message) and the OPT RR added */
#define DOH_CHUNK	16384		/* bytes read or taken from the session at once */
#define DOH_OUT_HIGH	65536		/* stop taking answers from the session past this
					 * many bytes queued on the stream */
#define DOH_PATH_MAX	2048		/* a normalised path (longer: 404) */
#define DOH_BODY_MAX	65535		/* an HTTP answer's body set by the rules (longer: cut) */

/* The OPT RR dnsdist's DoH frontend adds to a query without one: payload 4096. */
static const uint8_t added_opt[11] = { 0, 0, 41, 0x10, 0x00, 0, 0, 0, 0, 0, 0 };

/* A worker's DoH state: its connections (slot table with generations). */
#define DOH_PEND_MAX	64	/* connections waiting for a batch's end; more: sent at once */

struct dlb_doh_worker {
	struct dlb_doh_conn **conns;
	uint32_t *free;
	uint32_t n, cap, nfree, gen, live;
	uint8_t qbuf[DOH_QBUF];		/* the query being read (one at a time) */
	uint8_t io[DOH_CHUNK];		/* bytes read, or taken from a session */
	uint8_t body[DOH_BODY_MAX];	/* the rules' HTTP answer body (one query at a time) */
	/* connections given answers during a backend's receive batch, sent at
	 * its end (one TLS write for several answers): {idx, gen} pairs */
	uint32_t pend_idx[DOH_PEND_MAX], pend_gen[DOH_PEND_MAX];
	uint32_t npend;
	time_t date_sec;
	char date[40];			/* the Date field of that second */
	struct dlb_doh_h2_limits lim;	/* the HTTP bounds (docs/doh.md) */
};

/* A client connection. Owner: its worker's DoH table; conn_close frees it. */
struct dlb_doh_conn {
	struct dlb_worker *w;
	struct dlb_listener *l;
	const struct dlb_doh_cfg *cfg;
	uint32_t idx, gen;
	union dlb_sockaddr peer;
	union dlb_sockaddr local;	/* wildcard listeners: the address asked */
	bool has_local;
	struct dlb_stream st;
	struct dlb_stream_tls tls;
	bool use_tls;
	int8_t tls_version;		/* enum dlb_tls_version_idx once the handshake is done; -1:
					 * none (plain HTTP, or not yet) */
	struct dlb_doh_h2 *h2;		/* one of h2, h1 once the version is known */
	struct dlb_doh_h1 *h1;
	uint8_t sniff[24];		/* the first bytes, while the version is not known */
	size_t nsniff;
	ev_timer timer;
	double started;
	uint32_t queries;		/* DNS queries read so far */
	uint32_t inflight;		/* requests forwarded, not yet answered */
	bool feeding;			/* inside the session's feed: answers are only queued */
	bool pending;			/* on the worker's list of connections to send at a
					 * backend batch's end */
	bool peer_closed;
	bool ending;			/* the session said the connection must end */
};

static void conn_readable(struct dlb_stream *st, void *ud);
static bool conn_drained(struct dlb_stream *st, void *ud);
static void conn_failed(struct dlb_stream *st, void *ud, enum dlb_stream_fail why, int err);
static void on_request(void *ud, const struct dlb_doh_request *rq);
static void on_gone(void *ud, int32_t stream_id);
static bool conn_connected(struct dlb_stream *st, void *ud);

static const struct dlb_stream_cb conn_stream_cb = {
	.connected = conn_connected,
	.readable = conn_readable,
	.drained = conn_drained,
	.failed = conn_failed,
};

static const struct dlb_doh_h2_cb session_cb = {
	.request = on_request,
	.gone = on_gone,
};

/* ---- the connection table -------------------------------------------------------- */

static struct dlb_doh_worker *
doh_worker(struct dlb_worker *w)
{
	if (w->doh == NULL && (w->doh = calloc(1, sizeof(*w->doh))) != NULL)
		dlb_doh_h2_limits_default(&w->doh->lim);
	return w->doh;
}

static int
table_add(struct dlb_doh_worker *d, struct dlb_doh_conn *c)
{
	if (d->nfree == 0 && d->n == d->cap) {
		uint32_t ncap = d->cap ? d->cap * 2 : 16;
		struct dlb_doh_conn **v = realloc(d->conns, ncap * sizeof(*v));
		uint32_t *f;

		if (v == NULL)
			return -1;
		d->conns = v;
		f = realloc(d->free, ncap * sizeof(*f));
		if (f == NULL)
			return -1;
		d->free = f;
		d->cap = ncap;
	}
	c->idx = d->nfree > 0 ? d->free[--d->nfree] : d->n++;
	c->gen = ++d->gen;
	d->conns[c->idx] = c;
	d->live++;
	return 0;
}

static struct dlb_doh_conn *
conn_lookup(const struct dlb_worker *w, const struct dlb_client *cl)
{
	const struct dlb_doh_worker *d = w->doh;
	struct dlb_doh_conn *c;

	if (d == NULL || cl->conn_id >= d->n)
		return NULL;
	c = d->conns[cl->conn_id];
	return c != NULL && c->gen == cl->conn_gen ? c : NULL;
}

bool
dlb_doh_idle(const struct dlb_worker *w)
{
	return w->doh == NULL || w->doh->live == 0;
}

/* ---- the connection ----------------------------------------------------------------- */

static void
conn_close(struct dlb_doh_conn *c)
{
	struct dlb_doh_worker *d = c->w->doh;

	dlb_stream_close(&c->st);
	ev_timer_stop(c->w->loop, &c->timer);
	dlb_doh_h2_free(c->h2);
	dlb_doh_h1_free(c->h1);
	d->conns[c->idx] = NULL;
	d->free[d->nfree++] = c->idx;
	d->live--;
	c->l->tcp_conns--;
	dlb_tcp_fe_closed(c->l->index, c->queries, dlb_worker_now(c->w) - c->started);
	free(c);
}

static size_t
conn_streams(const struct dlb_doh_conn *c)
{
	if (c->h2 != NULL)
		return dlb_doh_h2_streams(c->h2);
	return c->h1 != NULL && dlb_doh_h1_busy(c->h1) ? 1 : 0;
}

/* The session has nothing more to say and will read nothing more. */
static bool
session_done(const struct dlb_doh_conn *c)
{
	if (c->h2 != NULL)
		return dlb_doh_h2_done(c->h2);
	if (c->h1 != NULL)
		return dlb_doh_h1_done(c->h1);
	return false;
}

static void
conn_arm_timer(struct dlb_doh_conn *c)
{
	double now = dlb_worker_now(c->w), due;

	ev_timer_stop(c->w->loop, &c->timer);
	if (dlb_stream_pending(&c->st) > 0)
		due = c->st.last_io + c->w->snap->set.tcp_send_timeout;
	else if (c->inflight == 0)
		due = c->st.last_io + c->cfg->idle_timeout;
	else
		return;	/* waiting for backends: their own timeouts apply */
	ev_timer_set(&c->timer, due > now ? due - now : 0.001, 0.);
	ev_timer_start(c->w->loop, &c->timer);
}

/*
 * Move what the session has to send onto the stream, as far as the stream's
 * queue allows (the rest when it drains). @return false if @c was closed.
 */
static bool
conn_flush(struct dlb_doh_conn *c)
{
	struct dlb_doh_worker *d = c->w->doh;

	while (dlb_stream_pending(&c->st) < DOH_OUT_HIGH) {
		ssize_t n = 0;
		struct iovec iov;
		int rc;

		if (c->h2 != NULL)
			n = dlb_doh_h2_send(c->h2, d->io, sizeof(d->io));
		else if (c->h1 != NULL)
			n = (ssize_t)dlb_doh_h1_send(c->h1, d->io, sizeof(d->io));
		if (n < 0) {
			conn_close(c);
			return false;
		}
		if (n == 0)
			break;
		iov.iov_base = d->io;
		iov.iov_len = (size_t)n;
		rc = dlb_stream_writev(&c->st, &iov, 1);
		if (rc != 0) {
			if (rc != DLB_ENOMEM)
				c->l->tcp_died_sending++;
			conn_close(c);
			return false;
		}
	}
	return true;
}

/* After reading or writing: send, then close @c if it is done, else re-arm its timer. */
static bool
conn_after_io(struct dlb_doh_conn *c)
{
	if (!conn_flush(c))
		return false;
	if (dlb_stream_pending(&c->st) == 0 &&
	    (session_done(c) || ((c->peer_closed || c->ending) && c->inflight == 0))) {
		conn_close(c);
		return false;
	}
	conn_arm_timer(c);
	return true;
}

static void
conn_timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct dlb_doh_conn *c = container_of(t, struct dlb_doh_conn, timer);

	(void)loop, (void)revents;
	c->w->stats.tcp_client_timeouts++;
	c->l->tcp_client_timeouts++;
	conn_close(c);
}

static bool
conn_drained(struct dlb_stream *st, void *ud)
{
	(void)st;
	return conn_after_io(ud);
}

/* The TLS handshake is done: dnsdist's per-handshake figures, as for DNS over TLS. */
static bool
conn_connected(struct dlb_stream *st, void *ud)
{
	struct dlb_doh_conn *c = ud;

	(void)st;
	if (c->tls.ssl != NULL)
		c->tls_version = (int8_t)dlb_stream_client_tls_done(c->l, &c->tls);
	return true;
}

static void
conn_failed(struct dlb_stream *st, void *ud, enum dlb_stream_fail why, int err)
{
	struct dlb_doh_conn *c = ud;

	(void)st, (void)err;
	if (why != DLB_STREAM_CONNECT)
		c->l->tcp_died_sending++;
	else if (c->use_tls)
		dlb_stream_client_tls_failed(c->l, &c->tls);
	conn_close(c);
}

/* The HTTP version, from ALPN or from the first bytes. @return false if undecided yet. */
static bool
conn_pick_version(struct dlb_doh_conn *c, const uint8_t *in, size_t n, bool *h2)
{
	if (c->use_tls) {
		const unsigned char *p = NULL;
		unsigned int plen = 0;

		SSL_get0_alpn_selected(c->tls.ssl, &p, &plen);
		if (plen == 2 && memcmp(p, "h2", 2) == 0) {
			*h2 = true;
			return true;
		}
	}
	/* no ALPN, or http/1.1: HTTP/2 with prior knowledge is told by its preface */
	while (n > 0 && c->nsniff < sizeof(c->sniff)) {
		c->sniff[c->nsniff++] = *in++;
		n--;
	}
	if (!dlb_doh_h1_is_h2_preface(c->sniff, c->nsniff)) {
		*h2 = false;
		return true;
	}
	if (c->nsniff < sizeof(c->sniff))
		return false;
	*h2 = true;
	return true;
}

/* Give @n bytes of @in to the session. @return false if the connection must end. */
static bool
conn_feed(struct dlb_doh_conn *c, const uint8_t *in, size_t n)
{
	int rc;

	c->feeding = true;
	rc = c->h2 != NULL ? dlb_doh_h2_feed(c->h2, in, n) : dlb_doh_h1_feed(c->h1, in, n);
	c->feeding = false;
	return rc == 0;
}

static void
conn_readable(struct dlb_stream *st, void *ud)
{
	struct dlb_doh_conn *c = ud;
	struct dlb_doh_worker *d = c->w->doh;
	ssize_t n = dlb_stream_read(st, d->io, sizeof(d->io));
	const uint8_t *in = d->io;
	size_t len;

	if (n < 0) {
		if (errno == EAGAIN || errno == EINTR)
			return;
		if (conn_streams(c) == 0)
			c->l->tcp_died_reading++;
		conn_close(c);
		return;
	}
	if (n == 0) {
		dlb_stream_read_enable(st, false);
		c->peer_closed = true;
		conn_after_io(c);
		return;
	}
	len = (size_t)n;
	if (c->h2 == NULL && c->h1 == NULL) {
		size_t had = c->nsniff;
		bool h2;

		if (!conn_pick_version(c, in, len, &h2)) {
			conn_arm_timer(c);
			return;
		}
		if (h2)
			c->h2 = dlb_doh_h2_new(&d->lim, &session_cb, c);
		else
			c->h1 = dlb_doh_h1_new(&d->lim, &session_cb, c);
		if (c->h2 == NULL && c->h1 == NULL) {
			conn_close(c);
			return;
		}
		/* what was sniffed first, then the rest of this read */
		if (c->nsniff > 0 && !conn_feed(c, c->sniff, c->nsniff))
			c->ending = true;
		in += c->nsniff - had;
		len -= c->nsniff - had;
	}
	if (len > 0 && !c->ending && !conn_feed(c, in, len))
		c->ending = true;
	/* the queries of this read leave for their backends together */
	dlb_forward_flush(c->w);
	if (c->ending)
		dlb_stream_read_enable(st, false);
	conn_after_io(c);
}

/* ---- requests --------------------------------------------------------------------- */

/* The Date field's value for now (computed once a second). */
static const char *
http_date(struct dlb_doh_worker *d)
{
	time_t now = time(NULL);

	if (now != d->date_sec) {
		struct tm tm;

		gmtime_r(&now, &tm);
		strftime(d->date, sizeof(d->date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
		d->date_sec = now;
	}
	return d->date;
}

static void
answer_opts(struct dlb_doh_conn *c, struct dlb_doh_answer_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->server = c->cfg->server_tokens;
	o->date = http_date(c->w->doh);
	o->custom = c->cfg->custom;
	o->ncustom = c->cfg->ncustom;
	o->add_content_type = true;
	o->cache_control = c->cfg->cache_control;
}

/* Send @a on @stream (@reason: HTTP/1.1's reason phrase; NULL: the usual one).
 * Every answer is counted by HTTP version and status, as dnsdist counts those
 * of its handler (h2o's own 404 for a path that no URL routes is not). */
static void
conn_respond(struct dlb_doh_conn *c, int32_t stream, const struct dlb_doh_answer *a,
	     const char *reason)
{
	int k;

	switch (a->status) {
	case 200: k = DLB_DOH_ST_200; break;
	case 400: k = DLB_DOH_ST_400; break;
	case 403: k = DLB_DOH_ST_403; break;
	case 500: k = DLB_DOH_ST_500; break;
	case 502: k = DLB_DOH_ST_502; break;
	default: k = DLB_DOH_ST_OTHER; break;
	}
	if (reason == NULL)	/* (h2o's 404 is the only answer with its own reason) */
		c->l->doh.status[c->h2 != NULL ? 1 : 0][k]++;
	if (c->h2 != NULL)
		(void)dlb_doh_h2_respond(c->h2, stream, a->status, a->headers, a->nheaders, a->body,
					 a->len);
	else if (c->h1 != NULL)
		(void)dlb_doh_h1_respond(c->h1, stream, a->status, reason, a->headers, a->nheaders,
					 a->body, a->len);
}

/* An answer to a DNS query (or a response map's) with @status, in dnsdist's figures. */
static void
count_response(struct dlb_doh_conn *c, int status)
{
	struct dlb_doh_figures *f = &c->l->doh;

	if (status >= 200 && status < 300)
		f->valid++;
	else if (status >= 300 && status < 400)
		f->redirects++;
	else
		f->errors++;
}

/* Answer @stream with @status and @body (dlb_doh_answer_build's rules). */
static void
respond_plain(struct dlb_doh_conn *c, int32_t stream, int status, const uint8_t *body, size_t len)
{
	struct dlb_doh_answer a;
	struct dlb_doh_answer_opts o;

	answer_opts(c, &o);
	dlb_doh_answer_build(&a, status, body, len, &o);
	conn_respond(c, stream, &a, NULL);
}

/* The same for the answer to a DNS query, counted as one. */
static void
respond_status(struct dlb_doh_conn *c, int32_t stream, int status, const uint8_t *body, size_t len)
{
	count_response(c, status);
	respond_plain(c, stream, status, body, len);
}

static void
respond_verdict(struct dlb_doh_conn *c, int32_t stream, enum dlb_doh_verdict v)
{
	struct dlb_doh_answer a;
	struct dlb_doh_answer_opts o;

	answer_opts(c, &o);
	dlb_doh_answer_verdict(&a, v, &o);
	/* h2o's own 404, before dnsdist's handler: its reason phrase */
	conn_respond(c, stream, &a, v == DLB_DOH_NOT_FOUND ? "File Not Found" : NULL);
}

/* A request past the routing, the ACL and the response map, in dnsdist's
 * figures: a query by method and version, or a bad request. */
static void
count_request(struct dlb_doh_conn *c, const char *method, enum dlb_doh_verdict v)
{
	struct dlb_doh_figures *f = &c->l->doh;
	bool post = strcmp(method, "POST") == 0;

	if (post || (v != DLB_DOH_NO_DNS_PARAM && v != DLB_DOH_BAD_REQUEST)) {
		if (post)
			f->post++;
		else
			f->get++;
		if (c->h2 != NULL)
			f->http2++;
		else
			f->http1++;
	}
	if (v == DLB_DOH_NO_DNS_PARAM || v == DLB_DOH_BAD_REQUEST || v == DLB_DOH_BAD_BASE64)
		f->bad++;
}

static const char *
find_header(const struct dlb_doh_request *rq, const char *name)
{
	for (size_t i = 0; i < rq->nheaders; i++)
		if (strcmp(rq->headers[i].name, name) == 0)
			return rq->headers[i].value;
	return NULL;
}

/* A response map entry matched: its status, content and fields. */
static void
respond_map(struct dlb_doh_conn *c, int32_t stream, const struct dlb_doh_map_entry *e)
{
	struct dlb_doh_answer a;
	struct dlb_doh_answer_opts o;

	answer_opts(c, &o);
	if (e->headers != NULL) {
		o.custom = e->headers;
		o.ncustom = e->nheaders;
	}
	o.add_content_type = false;
	count_response(c, e->status);
	dlb_doh_answer_build(&a, e->status, e->content, e->content_len, &o);
	conn_respond(c, stream, &a, NULL);
}

/*
 * A query the rules answered with an HTTP status (HTTPStatusAction,
 * dq:setHTTPResponse), as dnsdist 1.7.3 answers it: the body they gave,
 * else the query they turned into a response; a 200 with the content type
 * they gave (else application/dns-message); a 3xx as a redirection to the
 * body; any other status with the body read as a C string (cut at its first
 * NUL, maybe empty), as h2o's error pages take it.
 */
static void
respond_rules(struct dlb_doh_conn *c, int32_t stream, struct dlb_query *q,
	      const struct dlb_dq_http *http)
{
	struct dlb_doh_answer a;
	struct dlb_doh_answer_opts o;
	const uint8_t *body = http->body;
	size_t len = http->body_len;

	if (len == 0) {
		body = q->pkt;
		len = q->len;
	}
	/* counted as the DNS answer it is, whatever the HTTP answer carries */
	if (!dlb_query_is_empty_notimp(q->pkt))
		dlb_query_account_answer(c->w, q->pkt, q->len, ev_now(c->w->loop));
	c->l->tcp_responses++;
	if (http->status >= 300 && http->status < 400) {
		/* the location field: never a control octet of the client's
		 * query (an empty body), which could end the field */
		size_t n = 0;

		while (n < len && body[n] >= 0x20 && body[n] != 0x7f)
			n++;
		len = n;
	} else if (http->status != 200) {
		len = strnlen((const char *)body, len);
	}
	answer_opts(c, &o);
	o.content_type = http->content_type[0] != '\0' ? http->content_type : NULL;
	o.body_given = true;
	count_response(c, http->status);
	if (http->status < 300 && http->status != 200 && len > 0) {
		/* h2o sends a 1xx or 2xx page as its 500 (HTTP/1.1 keeps the
		 * reason phrase of the status asked for) */
		o.body_given = false;
		dlb_doh_answer_build(&a, 500, NULL, 0, &o);
		c->l->doh.status[c->h2 != NULL ? 1 : 0][DLB_DOH_ST_500]++;
		conn_respond(c, stream, &a, dlb_doh_reason(http->status));
		return;
	}
	dlb_doh_answer_build(&a, http->status, body, len, &o);
	conn_respond(c, stream, &a, NULL);
}

/* The query's pass through the pipeline; @client is the address rules see. */
static void
run_query(struct dlb_doh_conn *c, int32_t stream, uint8_t *pkt, size_t len,
	  const union dlb_sockaddr *client, bool edns_added, struct dlb_dq_http *http)
{
	struct dlb_worker *w = c->w;
	const struct dlb_config *cfg = w->cfg;
	struct dlb_query q;
	struct dlb_client cl;
	uint64_t no_policy;

	w->stats.queries++;
	c->l->tcp_queries++;
	if (c->tls_version >= 0)
		c->l->tls_queries[c->tls_version]++;
	q.pkt = pkt;
	q.len = len;
	q.cap = len;	/* a longer local answer is built in the worker's scratch buffer */
	q.tcp = true;	/* as dnsdist's DoH queries: not UDP (no TCAction) */
	q.client = &client->sa;
	q.local = c->has_local ? &c->local.sa : (const struct sockaddr *)&cfg->frontends[c->l->index].addr;
	q.http = http;
	no_policy = w->stats.no_policy;
	switch (dlb_query_process(w, &q)) {
	case DLB_V_CLOSE:
	case DLB_V_DROP:
		/* dnsdist 1.7.3's DoH frontend does not count a query left
		 * without a server in no-policy (its 403 is all there is) */
		w->stats.no_policy = no_policy;
		respond_status(c, stream, 403, NULL, 0);
		return;
	case DLB_V_ANSWER:
		dlb_rings_local_answer(w, &q, q.pkt, q.len);
		if (http->status != 0) {
			respond_rules(c, stream, &q, http);
			return;
		}
		if (!dlb_query_is_empty_notimp(q.pkt))
			dlb_query_account_answer(w, q.pkt, q.len, ev_now(w->loop));
		c->l->tcp_responses++;
		respond_status(c, stream, 200, q.pkt, q.len);
		return;
	case DLB_V_FORWARD:
		break;
	}
	dlb_stream_client_fill(&cl, DLB_CLIENT_DOH, c->l, client, &q, c->idx, c->gen,
			       c->has_local ? &c->local : NULL);
	cl.stream = stream;
	cl.edns_added = edns_added;
	c->inflight++;
	if (dlb_l2_park(w, &q, &cl))
		return;
	dlb_forward(w, &q, &cl);
	/* a request taken up outside a read (HTTP/1.1's next one, once the previous is
	 * answered) has no read's flush to come: its query leaves now */
	if (!c->feeding)
		dlb_forward_flush(w);
}

static void
on_request(void *ud, const struct dlb_doh_request *rq)
{
	struct dlb_doh_conn *c = ud;
	struct dlb_worker *w = c->w;
	const struct dlb_doh_cfg *dc = c->cfg;
	struct dlb_doh_worker *d = w->doh;
	const struct dlb_doh_map *map;
	const struct dlb_doh_map_entry *e;
	union dlb_sockaddr client = c->peer;
	struct dlb_dq_http http;
	char norm[DOH_PATH_MAX], host[64];
	size_t plen = 0, nl, qlen = 0;
	const char *xff;
	enum dlb_doh_verdict v;
	struct dlb_dnsmsg m;
	bool added = false;

	while (plen < rq->path_len && rq->path[plen] != '?')
		plen++;
	nl = dlb_doh_normalize(rq->path, plen, norm, sizeof(norm));
	if (nl == 0 || !dlb_doh_route(&dc->paths, norm, nl)) {
		respond_verdict(c, rq->stream_id, DLB_DOH_NOT_FOUND);
		return;
	}
	if (dc->trust_xff && (xff = find_header(rq, "x-forwarded-for")) != NULL) {
		struct sockaddr_storage ss;

		if (dlb_doh_forwarded_for(xff, strlen(xff), &ss))
			memcpy(&client, &ss, sizeof(client));
	}
	if (!dlb_nmg_match(&w->snap->acl, &client.sa)) {
		static const char acl[] = "dns query not allowed because of ACL";

		w->stats.acl_drops++;
		respond_plain(c, rq->stream_id, 403, (const uint8_t *)acl, sizeof(acl) - 1);
		return;
	}
	if (!dlb_doh_exact(&dc->paths, norm, nl)) {
		respond_verdict(c, rq->stream_id, DLB_DOH_NO_ENDPOINT);
		return;
	}
	map = __atomic_load_n(&dc->map, __ATOMIC_ACQUIRE);
	if (map != NULL && (e = dlb_doh_map_match(map, rq->path)) != NULL) {
		respond_map(c, rq->stream_id, e);
		return;
	}
	v = dlb_doh_query(rq->method, strlen(rq->method), rq->path, rq->path_len, rq->body,
			  rq->body_len, d->qbuf, DOH_QBUF - sizeof(added_opt), &qlen);
	count_request(c, rq->method, v);
	if (v != DLB_DOH_QUERY) {
		respond_verdict(c, rq->stream_id, v);
		return;
	}
	if (d->qbuf[2] & 0x80) {
		/* a response, not a query: dnsdist's header check */
		w->stats.noncompliant_queries++;
		respond_status(c, rq->stream_id, 400, NULL, 0);
		return;
	}
	/* as dnsdist: EDNS for the backend, so that it may answer at length */
	if (dlb_wire_parse_query_general(d->qbuf, qlen, &m) == DLB_OK && !m.has_opt &&
	    qlen + sizeof(added_opt) <= 65535) {
		memcpy(d->qbuf + qlen, added_opt, sizeof(added_opt));
		qlen += sizeof(added_opt);
		dlb_wr16(d->qbuf + 10, (uint16_t)(dlb_rd16(d->qbuf + 10) + 1));
		added = true;
	}
	c->queries++;
	http = (struct dlb_dq_http){
		.doh = true,
		.path = rq->path,
		.path_len = rq->path_len,
		.query_at = plen,
		/* HTTP/2: its :scheme; HTTP/1: the connection's */
		.scheme = rq->scheme[0] != '\0' ? rq->scheme : c->use_tls ? "https" : "http",
		.host = rq->authority,
		.headers = rq->headers,
		.nheaders = rq->nheaders,
		.body = d->body,
		.body_cap = sizeof(d->body),
	};
	if (!rq->has_authority) {
		/* h2o's then: the listener's address, without its port */
		char *colon;

		dlb_sockaddr_format((const struct sockaddr *)&w->cfg->frontends[c->l->index].addr,
				    host, sizeof(host));
		if ((colon = strrchr(host, ':')) != NULL)
			*colon = '\0';
		http.host = host;
	}
	run_query(c, rq->stream_id, d->qbuf, qlen, &client, added, &http);
}

static void
on_gone(void *ud, int32_t stream_id)
{
	(void)ud, (void)stream_id;	/* its answer, if one comes, is dropped by the session */
}

/* ---- accepting ---------------------------------------------------------------------- */

void
dlb_doh_accept(struct dlb_worker *w, struct dlb_listener *l)
{
	const struct dlb_config *cfg = w->cfg;
	const struct dlb_frontend_cfg *fe = &cfg->frontends[l->index];
	struct dlb_doh_worker *d = doh_worker(w);

	for (int k = 0; k < 32; k++) {
		union dlb_sockaddr peer;
		socklen_t plen;
		struct dlb_doh_conn *c;
		int fd = dlb_stream_client_accept(l, &peer, &plen);

		if (fd == -1)
			return;
		c = d != NULL ? calloc(1, sizeof(*c)) : NULL;
		if (c == NULL || table_add(d, c) != 0) {
			free(c);
			close(fd);
			continue;
		}
		c->has_local = dlb_stream_client_setup(fd, l, &c->local);
		c->w = w;
		c->l = l;
		c->cfg = fe->doh;
		c->peer = peer;
		c->tls_version = -1;
		l->tcp_conns++;
		l->doh.connects++;
		c->started = dlb_worker_now(w);
		dlb_tcp_fe_opened(l->index);
		w->stats.tcp_client_connections++;
		ev_init(&c->timer, conn_timer_cb);
		dlb_stream_init(&c->st, w->loop, &dlb_stream_tcp_ops, &conn_stream_cb, c,
				DOH_OUT_HIGH + 2 * DOH_CHUNK);
		if (fe->tls != NULL) {
			SSL *ssl = dlb_tls_server_ssl_new(fe->tls);

			if (ssl == NULL) {
				close(fd);
				conn_close(c);
				continue;
			}
			SSL_set_accept_state(ssl);
			dlb_stream_tls_use(&c->st, &c->tls, ssl);
			c->use_tls = true;
		}
		if (dlb_stream_attach(&c->st, fd) != 0) {
			if (c->use_tls)
				dlb_stream_client_tls_failed(l, &c->tls);	/* the ClientHello was there */
			conn_close(c);
			continue;
		}
		if (c->use_tls && c->st.state == DLB_STREAM_OPEN)
			conn_connected(&c->st, c);
		conn_arm_timer(c);
	}
}

void
dlb_doh_close_all(struct dlb_worker *w)
{
	struct dlb_doh_worker *d = w->doh;

	if (d == NULL)
		return;
	for (uint32_t i = 0; i < d->n; i++)
		if (d->conns[i] != NULL)
			conn_close(d->conns[i]);
	free(d->conns);
	free(d->free);
	free(d);
	w->doh = NULL;
}

/* ---- answers from the pipeline -------------------------------------------------------- */

/* After an answer was queued for @c outside its own feed: send it. */
static void
conn_answered(struct dlb_doh_conn *c)
{
	if (!c->feeding)
		conn_after_io(c);
}

/*
 * The same, for an answer of a backend's receive batch (@batched): sent
 * when the batch ends (doh_sink_flush), so a connection given several
 * answers writes them at once.
 */
static void
conn_answered_batched(struct dlb_doh_conn *c, bool batched)
{
	struct dlb_doh_worker *d = c->w->doh;

	if (c->feeding || c->pending)
		return;
	if (!batched || d->npend == DOH_PEND_MAX) {
		conn_after_io(c);
		return;
	}
	c->pending = true;
	d->pend_idx[d->npend] = c->idx;
	d->pend_gen[d->npend] = c->gen;
	d->npend++;
}

static void
doh_sink_reply(struct dlb_worker *w, const struct dlb_client *cl, uint8_t *pkt, size_t len,
	       bool batched, bool part)
{
	struct dlb_doh_conn *c = conn_lookup(w, cl);

	if (c == NULL || part)
		return;	/* gone meanwhile; zone transfers are not asked over DoH */
	c->inflight--;
	if (cl->edns_added)
		len = dlb_wire_strip_ecs(pkt, len, DLB_ECS_OPT_RR, NULL);
	c->l->tcp_responses++;
	respond_status(c, cl->stream, 200, pkt, len);	/* the session copies it */
	conn_answered_batched(c, batched);
}

static void
doh_sink_no_answer(struct dlb_worker *w, const struct dlb_client *cl, enum dlb_slot_end why)
{
	struct dlb_doh_conn *c = conn_lookup(w, cl);

	if (c == NULL)
		return;
	c->inflight--;
	/* a response rule dropped it: as a dropped query; else no backend answered */
	respond_status(c, cl->stream, why == DLB_END_DROPPED ? 403 : 502, NULL, 0);
	conn_answered(c);
}

/* A backend's receive batch ended: send what its answers queued. */
static void
doh_sink_flush(struct dlb_worker *w)
{
	struct dlb_doh_worker *d = w->doh;

	if (d == NULL)
		return;
	for (uint32_t i = 0; i < d->npend; i++) {
		struct dlb_doh_conn *c = d->pend_idx[i] < d->n ? d->conns[d->pend_idx[i]] : NULL;

		if (c == NULL || c->gen != d->pend_gen[i] || !c->pending)
			continue;	/* closed meanwhile */
		c->pending = false;
		conn_after_io(c);	/* may close it: nothing of it is used after */
	}
	d->npend = 0;
}

const struct dlb_client_sink dlb_doh_client_sink = {
	.reply = doh_sink_reply,
	.no_answer = doh_sink_no_answer,
	.timed_out = NULL,
	.flush = doh_sink_flush,
};
