/*
 * health.c - active health checks of backends, on the main thread's loop,
 * with dnsdist's semantics (dnsdist-api.md §1.4):
 *
 *  - every checkInterval seconds, a query for checkName/checkType/checkClass
 *    with RD=1 (CD with setCD) and a random ID, over UDP, or TCP with
 *    checkTCP or tcpOnly, from the backend's source address;
 *  - a failure is a timeout (checkTimeout ms), a short or malformed answer, a
 *    wrong ID, QR=0, a different question, SERVFAIL, and with mustResolve
 *    also NXDOMAIN and REFUSED;
 *  - maxCheckFailures failures in a row take an up backend down, rise
 *    successes in a row bring a down one up; each change is logged as
 *    "Marking downstream <name> (<addr>) as 'up'|'down'";
 *  - a backend forced up or down (setUp/setDown, healthCheckMode) is not
 *    checked;
 *  - before the workers start, one check of every backend decides its
 *    initial state;
 *  - healthCheckMode="lazy": no checks while the backend is up; real traffic
 *    judges it (dlb_health_lazy_tick), and once down it is probed with
 *    backoff until `rise` probes succeed.
 *
 * The verdict is published with an atomic store to be->healthy; workers read
 * it with dlb_backend_is_up().
 *
 * A TCP check goes over a stream (dnslb/core/stream.h) connected from the
 * backend's source as the workers' connections are (dnslb/upstream/tcp_upstream.h),
 * its answer cut out by dnslb/core/dnsframe.h; a UDP check has a socket of its own.
 * A DNS over TLS server is checked over TLS, validated as its queries are:
 * a handshake that fails is a failed check (never a check in clear), and
 * each check offers the session of the one before. A DNS over HTTPS server
 * is checked as dnsdist does, with the query POSTed on a connection of its
 * own (dnslb/upstream/doh_upstream.h): a status other than 200 fails it.
 *
 * Thread: main only.
 */
#include "dnslb/upstream/health.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dnslb/core/config.h"
#include "dnslb/core/dnsframe.h"
#include "dnslb/core/log.h"
#include "dnslb/core/proxyproto.h"
#include "dnslb/core/stream.h"
#include "dnslb/core/stream_tls.h"
#include "dnslb/core/tls.h"
#include "dnslb/core/util.h"
#include "dnslb/core/wire.h"
#include "dnslb/upstream/doh_upstream.h"
#include "dnslb/upstream/tcp_upstream.h"

#define container_of(p, T, m) ((T *)(void *)((char *)(p) - offsetof(T, m)))

struct hc {
	struct dlb_health *h;
	struct dlb_backend *be;
	ev_timer next;			/* the next check */
	ev_timer timeout;		/* the running check's deadline */
	ev_io io;			/* UDP */
	int fd;				/* UDP */
	struct dlb_stream st;		/* TCP */
	struct dlb_stream_tls tls;	/* st's TLS state (a DNS over TLS server) */
	SSL_SESSION *session;		/* owned: the last check's, offered to the next */
	struct dlb_doh_up *doh;		/* a DoH server's running check (its own connection) */
	struct dlb_frame_rx rx;		/* TCP: answers up to sizeof(resp) */
	bool running;
	bool tcp;
	uint16_t id;
	/* [PROXY LOCAL header][query] (UDP: what is sent starts at `out`) */
	uint8_t query[DLB_PP2_MAX + DLB_DNS_HDR + DLB_MAX_NAME + 4];
	size_t qlen;			/* the DNS query alone */
	uint8_t *out;
	size_t outlen;
	uint8_t resp[1024];		/* UDP */
	int fails, successes;		/* in a row */
	uint64_t checks;		/* sent */
	/* lazy mode */
	uint64_t last_q, last_f;	/* totals at the previous tick */
	uint64_t win_q, win_f;		/* queries and failures in the current window */
	int backoff_n;			/* probes failed since it went down */
};

struct dlb_health {
	struct ev_loop *loop;
	struct dlb_config *cfg;
	struct dlb_rng rng;
	struct hc *hcs[DLB_MAX_BACKENDS];	/* [n]; each one stays put (ev watchers) */
	int n;
	int initial_pending;		/* initial checks still running */
};

/* Lazy mode: seconds until the next probe of a down backend. */
static double
lazy_interval(const struct hc *c)
{
	const struct dlb_backend *be = c->be;
	double iv = be->lazy_failed_interval > 0 ? be->lazy_failed_interval : 30;

	if (be->lazy_backoff) {
		for (int i = 0; i < c->backoff_n && iv < be->lazy_max_backoff; i++)
			iv *= 2;
		if (be->lazy_max_backoff > 0 && iv > be->lazy_max_backoff)
			iv = be->lazy_max_backoff;
	}
	return iv;
}

static void check_start(struct hc *c);

/* dnsdist's log line; an unnamed server is shown by its address alone. */
static void
log_state(const struct dlb_backend *be, bool up)
{
	if (strcmp(be->name, be->addr_text) == 0)
		dlb_warn("Marking downstream %s as '%s'", be->addr_text, up ? "up" : "down");
	else
		dlb_warn("Marking downstream %s (%s) as '%s'", be->name, be->addr_text,
			 up ? "up" : "down");
}

/* Publish a new verdict; @always logs it even without a change (the initial check). */
static void
set_state(struct hc *c, bool up, bool always)
{
	struct dlb_backend *be = c->be;
	bool changed = (__atomic_load_n(&be->healthy, __ATOMIC_RELAXED) != 0) != up;

	if (changed)
		__atomic_store_n(&be->healthy, up ? 1 : 0, __ATOMIC_RELEASE);
	if (changed || always)
		log_state(be, up);
}

static void
check_stop_io(struct hc *c)
{
	struct ev_loop *loop = c->h->loop;

	ev_io_stop(loop, &c->io);
	ev_timer_stop(loop, &c->timeout);
	if (c->fd >= 0) {
		close(c->fd);
		c->fd = -1;
	}
	if (c->tls.ssl != NULL && c->tls.established && !c->tls.failed) {
		SSL_SESSION *sess = SSL_get1_session(c->tls.ssl);

		if (sess != NULL && SSL_SESSION_is_resumable(sess)) {
			SSL_SESSION_free(c->session);
			c->session = sess;
		} else {
			SSL_SESSION_free(sess);
		}
	}
	dlb_doh_check_cancel(c->doh);
	c->doh = NULL;
	dlb_stream_close(&c->st);
	dlb_frame_rx_free(&c->rx);
	c->running = false;
}

/* One check is over: update the state machine and schedule the next. */
static void
check_done(struct hc *c, bool ok, const char *why)
{
	struct dlb_health *h = c->h;
	struct dlb_backend *be = c->be;
	bool initial = c->checks == 1 && !be->lazy;

	check_stop_io(c);
	if (!ok && h->cfg->set.verbose_health_checks)
		dlb_info("Health check of %s (%s) failed: %s", be->name, be->addr_text, why);
	if (ok) {
		c->fails = 0;
		c->successes++;
	} else {
		c->successes = 0;
		c->fails++;
	}
	if (initial) {
		/* the first check decides the state and is logged, as dnsdist's initial check */
		set_state(c, ok, true);
		if (h->initial_pending > 0 && --h->initial_pending == 0)
			ev_break(h->loop, EVBREAK_ONE);
	} else if (__atomic_load_n(&be->healthy, __ATOMIC_RELAXED)) {
		if (c->fails >= be->max_check_failures)
			set_state(c, false, false);
	} else if (c->successes >= be->rise) {
		set_state(c, true, false);
	}
	if (be->lazy) {
		if (__atomic_load_n(&be->healthy, __ATOMIC_RELAXED)) {
			/* back up: traffic judges it again, from a fresh window */
			c->backoff_n = 0;
			c->win_q = c->win_f = 0;
			return;
		}
		if (!ok)
			c->backoff_n++;
		ev_timer_set(&c->next, ok ? (be->check_interval > 0 ? be->check_interval : 1)
					  : lazy_interval(c), 0.);
		ev_timer_start(h->loop, &c->next);
		return;
	}
	ev_timer_set(&c->next, be->check_interval > 0 ? be->check_interval : 1, 0.);
	ev_timer_start(h->loop, &c->next);
}

static void
check_validate(struct hc *c, const uint8_t *p, size_t n)
{
	const struct dlb_backend *be = c->be;
	const uint8_t *sent;
	struct dlb_dnsmsg m;
	unsigned rcode;
	int rc;

	if (n < DLB_DNS_HDR) {
		check_done(c, false, "short answer");
		return;
	}
	if (dlb_rd16(p) != c->id) {
		check_done(c, false, "ID mismatch");
		return;
	}
	rc = dlb_wire_parse_response_question(p, n, &m);
	if (rc != DLB_OK && rc != DLB_EEMPTY) {
		check_done(c, false, "malformed answer");
		return;
	}
	if (!(m.flags & DLB_F_QR)) {
		check_done(c, false, "QR not set");
		return;
	}
	rcode = DLB_RCODE(m.flags);
	if (rcode == DLB_RCODE_SERVFAIL) {
		check_done(c, false, "SERVFAIL");
		return;
	}
	if (be->must_resolve && (rcode == DLB_RCODE_NXDOMAIN || rcode == DLB_RCODE_REFUSED)) {
		check_done(c, false, rcode == DLB_RCODE_NXDOMAIN ? "NXDOMAIN" : "REFUSED");
		return;
	}
	/* the question sent (a checkFunction may have changed it) */
	sent = c->query + DLB_PP2_MAX;
	if (rc == DLB_OK &&
	    (m.qtype != dlb_rd16(sent + c->qlen - 4) || m.qclass != dlb_rd16(sent + c->qlen - 2) ||
	     !dlb_wire_name_equal_ci(m.qname_lc, m.qname_len, sent + DLB_DNS_HDR,
				     c->qlen - DLB_DNS_HDR - 4))) {
		check_done(c, false, "question mismatch");
		return;
	}
	check_done(c, true, NULL);
}

static void
check_io_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct hc *c = container_of(io, struct hc, io);
	ssize_t n;

	(void)loop, (void)revents;
	n = recv(c->fd, c->resp, sizeof(c->resp), MSG_DONTWAIT);
	if (n == -1) {
		if (errno != EAGAIN && errno != EINTR)
			check_done(c, false, strerror(errno));
		return;
	}
	check_validate(c, c->resp, (size_t)n);
}

static void
check_stream_readable(struct dlb_stream *st, void *ud)
{
	struct hc *c = ud;
	ssize_t n = dlb_frame_rx_fill(&c->rx, st);
	uint8_t *msg;
	size_t len;
	int rc;

	if (n == -1 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		check_done(c, false, n == 0 ? "connection closed"
					    : n == -1 ? strerror(errno) : "out of memory");
		return;
	}
	rc = dlb_frame_rx_next(&c->rx, &msg, &len);
	if (rc == DLB_ESPACE)
		check_done(c, false, "answer too large");	/* no business being this big */
	else if (rc < 0)
		check_done(c, false, "out of memory");
	else if (rc == 1)
		check_validate(c, msg, len);
}

static void
check_stream_failed(struct dlb_stream *st, void *ud, enum dlb_stream_fail why, int err)
{
	struct hc *c = ud;
	char reason[300], tls[256];

	(void)st;
	if (why == DLB_STREAM_CONNECT && c->tls.failed) {
		snprintf(reason, sizeof(reason), "TLS handshake failed: %s",
			 dlb_tls_client_failure(c->tls.ssl, c->tls.error, tls, sizeof(tls)));
		check_done(c, false, reason);
		return;
	}
	check_done(c, false, err != 0 ? strerror(err)
			     : why == DLB_STREAM_WRITE ? "send failed" : "connect failed");
}

static const struct dlb_stream_cb check_stream_cb = {
	.connected = NULL,
	.readable = check_stream_readable,
	.drained = NULL,
	.failed = check_stream_failed,
};

/* A DoH server's check is over (dnslb/upstream/doh_upstream.h): its connection goes. */
static void
check_doh_done(void *ud, const uint8_t *body, size_t len, const char *why, SSL_SESSION *session)
{
	struct hc *c = ud;

	c->doh = NULL;	/* freed by its module once this returns */
	if (session != NULL) {
		SSL_SESSION_free(c->session);
		c->session = session;
	}
	if (body == NULL)
		check_done(c, false, why);
	else
		check_validate(c, body, len);
}

static void
check_timeout_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	check_done(container_of(t, struct hc, timeout), false, "timeout");
}

static void
check_next_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	check_start(container_of(t, struct hc, next));
}

int (*dlb_health_check_hook)(const struct dlb_backend *be, uint8_t *name, int *name_len,
			     uint16_t *type, uint16_t *cls, uint16_t *flags, char *err,
			     size_t errlen);

static void
check_start(struct hc *c)
{
	struct dlb_health *h = c->h;
	struct dlb_backend *be = c->be;
	uint8_t *q = c->query + DLB_PP2_MAX;
	struct dlb_stream_target t;
	uint8_t pp[DLB_PP2_MAX];
	uint8_t name[DLB_MAX_NAME];
	int name_len = be->check_name_len;
	uint16_t type = be->check_type, cls = be->check_class;
	uint16_t flags = (uint16_t)(DLB_F_RD | (be->set_cd ? DLB_F_CD : 0));
	char err[256];
	size_t hl = 0;

	if (__atomic_load_n(&be->admin, __ATOMIC_RELAXED) != DLB_BE_AUTO) {
		/* forced up or down: no checks, but look again later */
		ev_timer_set(&c->next, be->check_interval > 0 ? be->check_interval : 1, 0.);
		ev_timer_start(h->loop, &c->next);
		return;
	}
	c->tcp = be->check_tcp || be->tcp_only;
	c->id = (uint16_t)dlb_rng_u32(&h->rng);
	memcpy(name, be->check_name, (size_t)name_len);
	if (be->check_fn && dlb_health_check_hook != NULL &&
	    dlb_health_check_hook(be, name, &name_len, &type, &cls, &flags, err,
				  sizeof(err)) != 0) {
		c->checks++;
		c->running = true;
		c->fd = -1;
		check_done(c, false, err);
		return;
	}
	dlb_wr16(q, c->id);
	dlb_wr16(q + 2, flags);
	dlb_wr16(q + 4, 1);
	memset(q + 6, 0, 6);
	memcpy(q + DLB_DNS_HDR, name, (size_t)name_len);
	dlb_wr16(q + DLB_DNS_HDR + name_len, type);
	dlb_wr16(q + DLB_DNS_HDR + name_len + 2, cls);
	c->qlen = DLB_DNS_HDR + (size_t)name_len + 4;
	/* a backend expecting PROXY headers gets a LOCAL one, as dnsdist sends */
	if (be->use_proxy_protocol)
		hl = dlb_pp2_local(pp);
	c->out = q - hl;
	c->outlen = hl + c->qlen;
	memcpy(c->out, pp, hl);
	c->checks++;
	c->running = true;

	/* from the backend's source, as the workers' connections (free-bound: it may not be up yet) */
	dlb_tcp_up_target(be, IP_FREEBIND, &t);
	if (be->doh_path[0] != '\0') {
		/* as dnsdist: a POST on a connection of its own, validated as the queries' */
		c->doh = dlb_doh_check_start(h->loop, be, c->session, pp, hl, q, c->qlen,
					     (be->check_timeout > 0 ? be->check_timeout : 1000) /
					     1000.0, check_doh_done, c);
		if (c->doh == NULL) {
			check_done(c, false, "DoH: could not start");
			return;
		}
	} else if (c->tcp) {
		/* the query waits in the stream until the connection is up */
		dlb_frame_rx_init(&c->rx, sizeof(c->resp));
		if (be->tls != NULL) {
			SSL *ssl = dlb_tcp_up_tls_new(be, c->session);

			if (ssl == NULL) {
				check_done(c, false, "TLS: out of memory");
				return;
			}
			dlb_stream_tls_use(&c->st, &c->tls, ssl);	/* freed with the stream */
		}
		if (dlb_stream_connect(&c->st, &t, 0) != 0 ||
		    dlb_frame_send(&c->st, c->out, hl, q, c->qlen) != 0) {
			check_done(c, false, strerror(errno));
			return;
		}
	} else {
		c->fd = dlb_stream_socket(&t, SOCK_DGRAM);
		if (c->fd == -1 || connect(c->fd, t.addr, t.addrlen) == -1 ||
		    send(c->fd, c->out, c->outlen, MSG_DONTWAIT) == -1) {
			check_done(c, false, strerror(errno));
			return;
		}
		ev_io_set(&c->io, c->fd, EV_READ);
		ev_io_start(h->loop, &c->io);
	}
	ev_timer_set(&c->timeout, (be->check_timeout > 0 ? be->check_timeout : 1000) / 1000.0, 0.);
	ev_timer_start(h->loop, &c->timeout);
}

static struct hc *
hc_new(struct dlb_health *h, struct dlb_backend *be)
{
	struct hc *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	c->h = h;
	c->be = be;
	c->fd = -1;
	ev_init(&c->next, check_next_cb);
	ev_init(&c->timeout, check_timeout_cb);
	ev_init(&c->io, check_io_cb);
	dlb_stream_init(&c->st, h->loop, &dlb_stream_tcp_ops, &check_stream_cb, c, SIZE_MAX);
	return c;
}

struct dlb_health *
dlb_health_new(struct ev_loop *loop, struct dlb_config *cfg)
{
	struct dlb_health *h = calloc(1, sizeof(*h));

	if (h == NULL)
		return NULL;
	h->loop = loop;
	h->cfg = cfg;
	dlb_rng_init(&h->rng);
	for (int i = 0; i < cfg->nbackends; i++) {
		h->hcs[i] = hc_new(h, cfg->backends[i]);
		if (h->hcs[i] == NULL) {
			dlb_health_free(h);
			return NULL;
		}
		h->n = i + 1;
	}
	return h;
}

int
dlb_health_add(struct dlb_health *h, struct dlb_backend *be)
{
	struct hc *c;

	if (be->index != h->n || h->n >= DLB_MAX_BACKENDS)
		return -1;
	c = hc_new(h, be);
	if (c == NULL)
		return -1;
	h->hcs[h->n++] = c;
	if (be->lazy) {
		__atomic_store_n(&be->healthy, 1, __ATOMIC_RELEASE);
	} else if (__atomic_load_n(&be->admin, __ATOMIC_RELAXED) == DLB_BE_AUTO) {
		/* down until its first check answers, which decides and is logged */
		__atomic_store_n(&be->healthy, 0, __ATOMIC_RELEASE);
		check_start(c);
	} else {
		ev_timer_set(&c->next, be->check_interval > 0 ? be->check_interval : 1, 0.);
		ev_timer_start(h->loop, &c->next);
	}
	return 0;
}

void
dlb_health_initial(struct dlb_health *h)
{
	h->initial_pending = 0;
	for (int i = 0; i < h->n; i++) {
		struct hc *c = h->hcs[i];

		if (c->be->lazy) {
			/* lazy: up until traffic says otherwise, no initial check */
			continue;
		} else if (__atomic_load_n(&c->be->admin, __ATOMIC_RELAXED) == DLB_BE_AUTO) {
			h->initial_pending++;
			check_start(c);
		} else {
			ev_timer_set(&c->next, c->be->check_interval > 0 ? c->be->check_interval : 1,
				     0.);
			ev_timer_start(h->loop, &c->next);
		}
	}
	/* run only the checks until each has an answer or timed out */
	if (h->initial_pending > 0)
		ev_run(h->loop, 0);
	h->initial_pending = 0;
}

void
dlb_health_lazy_tick(struct dlb_health *h)
{
	for (int i = 0; i < h->n; i++) {
		struct hc *c = h->hcs[i];
		const struct dlb_backend *be = c->be;
		struct dlb_be_totals t;
		uint64_t fails;

		if (!be->lazy || h->cfg->be_totals == NULL)
			continue;
		h->cfg->be_totals(be->index, &t);
		fails = t.drops + (be->lazy_timeouts_only ? 0 : t.servfails);
		c->win_q += t.queries - c->last_q;
		c->win_f += fails - c->last_f;
		c->last_q = t.queries;
		c->last_f = fails;
		if (__atomic_load_n(&be->admin, __ATOMIC_RELAXED) != DLB_BE_AUTO ||
		    !__atomic_load_n(&be->healthy, __ATOMIC_RELAXED) || c->running)
			continue;
		if (c->win_q >= (uint64_t)(be->lazy_min_samples > 0 ? be->lazy_min_samples : 1) &&
		    c->win_f * 100 >= c->win_q * (uint64_t)be->lazy_threshold) {
			if (h->cfg->set.verbose_health_checks)
				dlb_info("Lazy health check of %s (%s): %llu failures in %llu queries",
					 be->name, be->addr_text, (unsigned long long)c->win_f,
					 (unsigned long long)c->win_q);
			set_state(c, false, false);
			c->successes = 0;
			c->backoff_n = 0;
			ev_timer_stop(h->loop, &c->next);
			ev_timer_set(&c->next, lazy_interval(c), 0.);
			ev_timer_start(h->loop, &c->next);
		}
		if (c->win_q >= (uint64_t)(be->lazy_sample_size > 0 ? be->lazy_sample_size : 100))
			c->win_q = c->win_f = 0;	/* start a new window */
	}
}

uint64_t
dlb_health_checks_sent(const struct dlb_health *h, int be_index)
{
	return be_index >= 0 && be_index < h->n ? h->hcs[be_index]->checks : 0;
}

void
dlb_health_free(struct dlb_health *h)
{
	if (h == NULL)
		return;
	for (int i = 0; i < h->n; i++) {
		check_stop_io(h->hcs[i]);
		ev_timer_stop(h->loop, &h->hcs[i]->next);
		SSL_SESSION_free(h->hcs[i]->session);
		free(h->hcs[i]);
	}
	free(h);
}
