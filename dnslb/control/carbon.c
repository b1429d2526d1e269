/*
 * carbon.c - carbonServer() (carbon.h): Graphite plaintext pushes from the
 * main loop.
 *
 * A target's life: its ev_timer fires every interval (the first push right
 * at start, as dnsdist) -> push_start() builds the whole message from the
 * metrics, opens a non-blocking TCP socket and connects -> push_io_cb()
 * writes what the socket takes until the message is out -> close. A
 * deadline timer bounds a push (connect included) to min(interval, 5 s); a
 * push still running when the next is due is dropped first. Failures are
 * logged at most once a second and never stop later pushes.
 *
 * Unlike dnsdist 1.7, which sleeps the first target's interval for all of
 * them, each target keeps its own interval.
 *
 * Thread: main only.
 */
#include "dnslb/control/carbon.h"

#include <errno.h>
#include <ev.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dnslb/core/buf.h"
#include "dnslb/core/config.h"
#include "dnslb/core/daemon.h"
#include "dnslb/core/dnslb.h"
#include "dnslb/core/log.h"
#include "dnslb/control/metrics.h"
#include "dnslb/core/netmask.h"
#include "dnslb/core/tls.h"

#define CARBON_PORT 2003
#define CARBON_MAX_DEADLINE 5.0		/* s, one push at most */
#define CARBON_MAX_MSG ((size_t)16 << 20)

struct carbon_target {
	struct sockaddr_storage addr;
	socklen_t addrlen;
	char text[64];				/* "127.0.0.1:2003" */
	char prefix[3 * DLB_CARBON_MAX_NAME + 4];	/* "namespace.ourname.instance." */
	unsigned interval;			/* s */

	struct ev_loop *loop;
	ev_timer tick;				/* every interval */
	ev_timer deadline;			/* the push in progress */
	ev_io io;				/* its socket */
	int fd;					/* -1: no push in progress */
	bool connected;
	char *msg;
	size_t len, off;
};

static struct {
	struct carbon_target t[DLB_CARBON_MAX];
	int n;
	struct ev_loop *loop;			/* set while the service runs */
} carbon;

/* ---- the message: a dnslb/core/buf.h buffer, bounded by CARBON_MAX_MSG ---------- */

/*
 * A name as one path component: dots become underscores (dnsdist), and so
 * does anything that would break the line protocol (whitespace, control
 * characters).
 */
static void
path_component(char *out, size_t outsz, const char *s)
{
	snprintf(out, outsz, "%s", s);
	for (unsigned char *p = (unsigned char *)out; *p != '\0'; p++)
		if (*p == '.' || *p <= ' ' || *p == 0x7f)
			*p = '_';
}

static void
value_text(char *out, size_t outsz, double v, bool is_double)
{
	if (!isfinite(v))
		snprintf(out, outsz, "0");
	else if (!is_double && v >= 0 && v < 18446744073709551616.0)
		snprintf(out, outsz, "%" PRIu64, (uint64_t)v);
	else
		snprintf(out, outsz, "%.15g", v);
}

/* One frontend figure: its last path component and value. */
struct fe_path {
	const char *path;
	uint64_t v;
};

/* "PREFIXfrontends.NAME.PATH VALUE NOW" for each of @p. */
static void
put_fe_paths(struct dlb_buf *b, const char *prefix, const char *name, const struct fe_path *p,
	     size_t n, long long now)
{
	for (size_t k = 0; k < n; k++)
		dlb_buf_printf(b, "%sfrontends.%s.%s %" PRIu64 " %lld\r\n", prefix, name, p[k].path,
			       p[k].v, now);
}

static void
build_message(const struct carbon_target *t, struct dlb_buf *b)
{
	struct dlb_metric m[DLB_METRICS_MAX];
	size_t n = dlb_metrics_global(m, DLB_METRICS_MAX);
	long long now = (long long)time(NULL);
	struct dlb_metrics_backend be;
	static struct dlb_metrics_frontend fe[DLB_MAX_FRONTENDS * 2];	/* main thread only */
	struct dlb_metrics_pool pool;
	char val[64], name[256];
	int nfe;

	for (size_t i = 0; i < n; i++) {
		value_text(val, sizeof(val), m[i].value, m[i].is_double);
		dlb_buf_printf(b, "%s%s %s %lld\r\n", t->prefix, m[i].name, val, now);
	}

	for (int i = 0; dlb_metrics_backend(i, &be) == 0; i++) {
		const char *base = t->prefix;

		path_component(name, sizeof(name), be.be->name);
		dlb_buf_printf(b, "%sservers.%s.queries %" PRIu64 " %lld\r\n", base, name, be.queries, now);
		dlb_buf_printf(b, "%sservers.%s.responses %" PRIu64 " %lld\r\n", base, name, be.responses,
			  now);
		dlb_buf_printf(b, "%sservers.%s.drops %" PRIu64 " %lld\r\n", base, name, be.drops, now);
		/* dnsdist: 0 while the server is down */
		value_text(val, sizeof(val), be.up ? be.latency_ms : 0, true);
		dlb_buf_printf(b, "%sservers.%s.latency %s %lld\r\n", base, name, val, now);
		dlb_buf_printf(b, "%sservers.%s.senderrors %" PRIu64 " %lld\r\n", base, name,
			  be.send_errors, now);
		dlb_buf_printf(b, "%sservers.%s.outstanding %" PRIu64 " %lld\r\n", base, name,
			  be.outstanding, now);
		/* TCP: dnsdist 1.7.3's paths, its misspellings kept ("readding",
		 * "readimeouts") so that what reads dnsdist's finds them */
		{
			const struct { const char *path; uint64_t v; } tv[] = {
				{ "tcpdiedsendingquery", be.tcp_died_sending },
				{ "tcpdiedreaddingresponse", be.tcp_died_reading },
				{ "tcpgaveup", be.tcp_gave_up },
				{ "tcpreadimeouts", be.tcp_read_timeouts },
				{ "tcpwritetimeouts", be.tcp_write_timeouts },
				{ "tcpconnecttimeouts", be.tcp_connect_timeouts },
				{ "tcpcurrentconnections", be.tcp_current },
				{ "tcpmaxconcurrentconnections", be.tcp_max },
				{ "tcpnewconnections", be.tcp_new },
				{ "tcpreusedconnections", be.tcp_reused },
				{ "tlsresumptions", be.tls_resumptions },
			};

			for (size_t k = 0; k < sizeof(tv) / sizeof(tv[0]); k++)
				dlb_buf_printf(b, "%sservers.%s.%s %" PRIu64 " %lld\r\n", base, name,
					  tv[k].path, tv[k].v, now);
		}
		dlb_buf_printf(b, "%sservers.%s.tcpavgqueriesperconnection %g %lld\r\n", base, name,
			  be.tcp_avg_queries, now);
		dlb_buf_printf(b, "%sservers.%s.tcpavgconnectionduration %g %lld\r\n", base, name,
			  be.tcp_avg_duration, now);
	}

	/* "<address>_udp" / "_tcp"; a repeated bind gets "_2", "_3"... (dnsdist) */
	nfe = 0;
	while (nfe < DLB_MAX_FRONTENDS * 2 && dlb_metrics_frontend(nfe, &fe[nfe]) == 0)
		nfe++;
	for (int i = 0; i < nfe; i++) {
		bool tcp = fe[i].tcp;
		char raw[96];
		int dup = 1;

		snprintf(raw, sizeof(raw), "%s_%s", fe[i].address, tcp ? "tcp" : "udp");
		for (int j = 0; j < i; j++)
			if (strcmp(fe[j].address, fe[i].address) == 0 &&
			    strcmp(fe[j].proto, fe[i].proto) == 0)
				dup++;
		path_component(name, sizeof(name), raw);
		if (dup > 1) {
			size_t l = strlen(name);

			snprintf(name + l, sizeof(name) - l, "_%d", dup);
		}
		dlb_buf_printf(b, "%sfrontends.%s.queries %" PRIu64 " %lld\r\n", t->prefix, name,
			  fe[i].queries, now);
		dlb_buf_printf(b, "%sfrontends.%s.responses %" PRIu64 " %lld\r\n", t->prefix, name,
			  fe[i].responses, now);
		/* dnsdist's, for UDP frontends too (all 0 there); the handshake
		 * failures for DNS over TLS listeners only */
		{
			const struct fe_path tv[] = {
				{ "tcpdiedreadingquery", fe[i].tcp_died_reading },
				{ "tcpdiedsendingresponse", fe[i].tcp_died_sending },
				{ "tcpgaveup", fe[i].tcp_gave_up },
				{ "tcpclientimeouts", fe[i].tcp_client_timeouts },
				{ "tcpdownstreamtimeouts", fe[i].tcp_downstream_timeouts },
				{ "tcpcurrentconnections", fe[i].tcp_current },
				{ "tcpmaxconcurrentconnections", fe[i].tcp_max },
			};
			const struct fe_path tls[] = {
				{ "tls10-queries", fe[i].tls_queries[DLB_TLS_V10] },
				{ "tls11-queries", fe[i].tls_queries[DLB_TLS_V11] },
				{ "tls12-queries", fe[i].tls_queries[DLB_TLS_V12] },
				{ "tls13-queries", fe[i].tls_queries[DLB_TLS_V13] },
				{ "tls-unknown-queries", fe[i].tls_queries[DLB_TLS_VUNKNOWN] },
				{ "tlsnewsessions", fe[i].tls_new_sessions },
				{ "tlsresumptions", fe[i].tls_resumptions },
				{ "tlsunknownticketkeys", fe[i].tls_unknown_ticket_keys },
				{ "tlsinactiveticketkeys", fe[i].tls_inactive_ticket_keys },
			};
			/* enum dlb_tls_failure's order */
			static const char *const fails[] = {
				"tlsdhkeytoosmall", "tlsinappropriatefallback", "tlsnosharedcipher",
				"tlsunknownciphertype", "tlsunknownkeyexchangetype",
				"tlsunknownprotocol", "tlsunsupportedec", "tlsunsupportedprotocol",
			};

			put_fe_paths(b, t->prefix, name, tv, sizeof(tv) / sizeof(tv[0]), now);
			dlb_buf_printf(b, "%sfrontends.%s.tcpavgqueriesperconnection %g %lld\r\n",
				  t->prefix, name, fe[i].tcp_avg_queries, now);
			dlb_buf_printf(b, "%sfrontends.%s.tcpavgconnectionduration %g %lld\r\n",
				  t->prefix, name, fe[i].tcp_avg_duration, now);
			put_fe_paths(b, t->prefix, name, tls, sizeof(tls) / sizeof(tls[0]), now);
			for (size_t k = 0; fe[i].tls != NULL && k < DLB_TLS_FAIL_COUNT; k++)
				dlb_buf_printf(b, "%sfrontends.%s.%s %" PRIu64 " %lld\r\n", t->prefix,
					       name, fails[k], fe[i].tls_failures[k], now);
		}
	}

	for (int i = 0; dlb_metrics_pool(i, &pool) == 0; i++) {
		const char *base = t->prefix;

		path_component(name, sizeof(name), pool.name[0] != '\0' ? pool.name : "_default_");
		dlb_buf_printf(b, "%spools.%s.servers %d %lld\r\n", base, name, pool.servers, now);
		dlb_buf_printf(b, "%spools.%s.servers-up %d %lld\r\n", base, name, pool.active, now);
		if (!pool.has_cache)
			continue;
		dlb_buf_printf(b, "%spools.%s.cache-size %" PRIu64 " %lld\r\n", base, name,
			  pool.cache_size, now);
		dlb_buf_printf(b, "%spools.%s.cache-entries %" PRIu64 " %lld\r\n", base, name,
			  pool.cache_entries, now);
		dlb_buf_printf(b, "%spools.%s.cache-hits %" PRIu64 " %lld\r\n", base, name,
			  pool.cache_hits, now);
		dlb_buf_printf(b, "%spools.%s.cache-misses %" PRIu64 " %lld\r\n", base, name,
			  pool.cache_misses, now);
		dlb_buf_printf(b, "%spools.%s.cache-deferred-inserts %" PRIu64 " %lld\r\n", base, name,
			  pool.cache_deferred_inserts, now);
		dlb_buf_printf(b, "%spools.%s.cache-deferred-lookups %" PRIu64 " %lld\r\n", base, name,
			  pool.cache_deferred_lookups, now);
		dlb_buf_printf(b, "%spools.%s.cache-lookup-collisions %" PRIu64 " %lld\r\n", base, name,
			  pool.cache_lookup_collisions, now);
		dlb_buf_printf(b, "%spools.%s.cache-insert-collisions %" PRIu64 " %lld\r\n", base, name,
			  pool.cache_insert_collisions, now);
		dlb_buf_printf(b, "%spools.%s.cache-ttl-too-shorts %" PRIu64 " %lld\r\n", base, name,
			  pool.cache_ttl_too_shorts, now);
	}
}

/* ---- one push ------------------------------------------------------------------- */

static void
push_end(struct carbon_target *t)
{
	if (t->fd >= 0) {
		ev_io_stop(t->loop, &t->io);
		ev_timer_stop(t->loop, &t->deadline);
		close(t->fd);
		t->fd = -1;
	}
	free(t->msg);
	t->msg = NULL;
	t->len = t->off = 0;
	t->connected = false;
}

static void
push_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct carbon_target *t = w->data;

	(void)loop;
	(void)revents;
	if (!t->connected) {
		int soerr = 0;
		socklen_t sl = sizeof(soerr);

		if (getsockopt(t->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == -1)
			soerr = errno;
		if (soerr != 0) {
			dlb_log_ratelimited(DLB_LOG_WARN,
					    "Unable to connect to the carbon server %s: %s",
					    t->text, strerror(soerr));
			push_end(t);
			return;
		}
		t->connected = true;
	}
	while (t->off < t->len) {
		ssize_t n = send(t->fd, t->msg + t->off, t->len - t->off, MSG_NOSIGNAL);

		if (n == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;		/* wait for room */
			dlb_log_ratelimited(DLB_LOG_WARN,
					    "Problem sending carbon data to %s: %s", t->text,
					    strerror(errno));
			push_end(t);
			return;
		}
		t->off += (size_t)n;
	}
	push_end(t);
}

static void
push_deadline_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct carbon_target *t = w->data;

	(void)loop;
	(void)revents;
	dlb_log_ratelimited(DLB_LOG_WARN, "Unable to write data to the carbon server %s: %s",
			    t->text, t->connected ? "timeout while sending" : "connect timeout");
	push_end(t);
}

static void
push_start(struct carbon_target *t)
{
	struct dlb_buf b = DLB_BUF_INIT(CARBON_MAX_MSG);
	double deadline;

	if (t->fd >= 0) {
		dlb_log_ratelimited(DLB_LOG_WARN,
				    "The previous push to the carbon server %s did not finish: "
				    "dropped", t->text);
		push_end(t);
	}
	build_message(t, &b);
	if (dlb_buf_failed(&b) || b.len == 0) {
		if (dlb_buf_failed(&b))
			dlb_log_ratelimited(DLB_LOG_WARN, "carbon: out of memory building the "
					    "message for %s", t->text);
		free(b.p);
		return;
	}
	t->fd = socket(t->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (t->fd == -1) {
		dlb_log_ratelimited(DLB_LOG_WARN, "carbon: socket(): %s", strerror(errno));
		free(b.p);
		return;
	}
	t->msg = b.p;
	t->len = b.len;
	t->off = 0;
	t->connected = false;
	if (connect(t->fd, (struct sockaddr *)&t->addr, t->addrlen) == -1 &&
	    errno != EINPROGRESS) {
		dlb_log_ratelimited(DLB_LOG_WARN, "Unable to connect to the carbon server %s: %s",
				    t->text, strerror(errno));
		close(t->fd);
		t->fd = -1;
		push_end(t);
		return;
	}
	ev_io_init(&t->io, push_io_cb, t->fd, EV_WRITE);
	t->io.data = t;
	ev_io_start(t->loop, &t->io);
	deadline = (double)t->interval < CARBON_MAX_DEADLINE ? (double)t->interval
							      : CARBON_MAX_DEADLINE;
	ev_timer_init(&t->deadline, push_deadline_cb, deadline, 0.);
	t->deadline.data = t;
	ev_timer_start(t->loop, &t->deadline);
}

static void
tick_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	push_start(w->data);
}

static void
target_start(struct carbon_target *t, struct ev_loop *loop)
{
	t->loop = loop;
	/* the first push right away (dnsdist), then every interval */
	ev_timer_init(&t->tick, tick_cb, 0., (double)t->interval);
	t->tick.data = t;
	ev_timer_start(loop, &t->tick);
}

/* ---- configuration ---------------------------------------------------------------- */

static bool
name_ok(const char *s)
{
	if (s == NULL)
		return true;
	if (strlen(s) > DLB_CARBON_MAX_NAME)
		return false;
	for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++)
		if (*p <= ' ' || *p == 0x7f)
			return false;
	return true;
}

static int
parse_addr(const char *addr, struct sockaddr_storage *ss, socklen_t *len, char *err,
	   size_t errlen)
{
	if (dlb_sockaddr_parse(addr, CARBON_PORT, ss, len) != 0) {
		snprintf(err, errlen, "invalid carbon server address '%s'", addr);
		return -1;
	}
	return 0;
}

int
dlb_carbon_check(const char *addr, const char *ourname, unsigned interval, const char *ns,
		 const char *instance, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	socklen_t len;

	if (parse_addr(addr, &ss, &len, err, errlen) != 0)
		return -1;
	if (!name_ok(ourname) || !name_ok(ns) || !name_ok(instance)) {
		snprintf(err, errlen, "ourname, namespace and instance must have no whitespace "
			 "or control characters and at most %d bytes", DLB_CARBON_MAX_NAME);
		return -1;
	}
	if (interval < 1) {
		snprintf(err, errlen, "the interval must be at least 1 second");
		return -1;
	}
	return 0;
}

int
dlb_carbon_add(const char *addr, const char *ourname, unsigned interval, const char *ns,
	       const char *instance, char *err, size_t errlen)
{
	struct carbon_target *t;
	char host[DLB_CARBON_MAX_NAME + 1], hostpath[DLB_CARBON_MAX_NAME + 1];

	if (dlb_carbon_check(addr, ourname, interval, ns, instance, err, errlen) != 0)
		return -1;
	if (carbon.n == DLB_CARBON_MAX) {
		snprintf(err, errlen, "too many carbon servers (%d at most)", DLB_CARBON_MAX);
		return -1;
	}
	if (ourname == NULL || *ourname == '\0') {
		/* dnsdist: the host name, dots as underscores */
		if (gethostname(host, sizeof(host)) == -1) {
			snprintf(err, errlen, "The 'ourname' setting in 'carbonServer()' has not "
				 "been set and we are unable to determine the system's hostname: "
				 "%s", strerror(errno));
			return -1;
		}
		host[sizeof(host) - 1] = '\0';
		path_component(hostpath, sizeof(hostpath), host);
		ourname = hostpath;
	}
	t = &carbon.t[carbon.n];
	memset(t, 0, sizeof(*t));
	t->fd = -1;
	(void)parse_addr(addr, &t->addr, &t->addrlen, err, errlen);
	dlb_sockaddr_format((struct sockaddr *)&t->addr, t->text, sizeof(t->text));
	snprintf(t->prefix, sizeof(t->prefix), "%s.%s.%s.",
		 ns != NULL && *ns != '\0' ? ns : "dnsdist", ourname,
		 instance != NULL && *instance != '\0' ? instance : "main");
	t->interval = interval;
	carbon.n++;
	if (carbon.loop != NULL)
		target_start(t, carbon.loop);
	return 0;
}

/* ---- the service -------------------------------------------------------------------- */

static int
carbon_start(struct ev_loop *loop, char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	/* kept even with no target yet: carbonServer() from the console adds one */
	carbon.loop = loop;
	for (int i = 0; i < carbon.n; i++)
		target_start(&carbon.t[i], loop);
	return 0;
}

static void
carbon_stop(void)
{
	for (int i = 0; i < carbon.n; i++) {
		struct carbon_target *t = &carbon.t[i];

		if (t->loop != NULL) {
			ev_timer_stop(t->loop, &t->tick);
			push_end(t);
		}
	}
	carbon.n = 0;
	carbon.loop = NULL;
}

const struct dlb_service dlb_carbon_service = {
	.name = "carbon",
	.start = carbon_start,
	.stop = carbon_stop,
};
