/*
 * dnslb-dohload: the DNS over HTTPS load generator of perf/tls (--transport doh).
 *
 * dnsperf -m doh cannot load dnsdist 1.7.3: against its h2o listener only
 * about two queries per connection complete and the others are counted lost
 * although dnsdist answered them 200.  This client speaks HTTP/2 with
 * nghttp2's client API over nonblocking OpenSSL (ALPN h2 required), each
 * query a POST to PATH (default /dns-query) with content-type
 * application/dns-message and a DNS ID of 0 (RFC 8484 4.1).
 *
 *   stream  CONC persistent connections, opened before the clock starts,
 *           each carrying up to K streams at a time.  With -Q RATE, POSTs
 *           start at RATE a second in total (open loop, as dnsperf -Q),
 *           checked every millisecond and spread over the connections in
 *           turn; a query whose turn comes while every connection has K in
 *           flight waits for a free stream.  Without -Q, every answered
 *           stream is replaced at once (closed loop).  POSTs start for SECS
 *           seconds (or until -n COUNT are sent), then up to WAIT seconds
 *           (-w, default 2) are given to those in flight; the rest are lost.
 *           It prints one line:
 *             sent S answered A failed F lost L seconds T per_second P
 *             latency_avg_us X latency_p50_us Y latency_p99_us Z reconnects R
 *           "answered" is a stream that ended with :status 200 and a DNS
 *           response to its question (QR set, RCODE 0, at least one answer,
 *           the question the query asked); "failed" any
 *           other end (another status, a reset, a closed connection: a
 *           connection that ends is opened again and counted in
 *           "reconnects"); per_second is answered / T, T the sending time.
 *   full    CONC connections at a time, each: TCP connect, a full TLS
 *           handshake with ALPN h2, the HTTP/2 preface and SETTINGS, one
 *           POST, its answer, close_notify, close; then a new one in its
 *           place, for SECS seconds.  With -r RATE, new connections start at
 *           RATE a second at most (as dnslb-tlsload).
 *   resume  the same, each connection offering the session (ticket) its
 *           slot's previous connection got.
 *           full and resume print dnslb-tlsload's line:
 *             connections C resumed R failed F seconds S per_second P
 *
 * The certificate is not verified (the client's CPU is not what is
 * measured).  Queries are "h<i>.bench.example A" with RD, i cycling over
 * -q NAMES (default 100), as dnslb-tlsload's.
 *
 * Usage: dnslb-dohload <addr:port> [-m stream|full|resume] [-c CONC] [-k K]
 *                      [-Q RATE] [-l SECS] [-n COUNT] [-w WAIT] [-r RATE]
 *                      [-q NAMES] [-p PATH] [-v]
 *
 * -v prints the first ten failed streams (status, size, DNS flags) on stderr.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "perfutil.h"
#include "tlsclient.h"

#define QMAX		64	/* one of our queries */
#define RMAX		512	/* the part of an answer kept (the header is what is checked) */
#define IBUF		16384	/* TLS plaintext read at once */
#define HIST_US		10	/* latency histogram: 10-µs buckets ... */
#define HIST_N		100000	/* ... up to one second */

enum mode { MODE_STREAM, MODE_FULL, MODE_RESUME };
enum state { ST_FREE, ST_CONNECT, ST_HANDSHAKE, ST_OPEN };

struct stream {
	bool used;
	int status;		/* :status, 0 until seen */
	size_t qlen, qoff;	/* the POST body and how much of it nghttp2 took */
	size_t rlen;		/* answer bytes received (those past RMAX are not kept) */
	double t;		/* when submitted */
	uint8_t q[QMAX];
	uint8_t r[RMAX];
};

struct conn {
	int fd;
	enum state st;
	SSL *ssl;
	SSL_SESSION *sess;	/* resume: the previous connection's session */
	nghttp2_session *h2;
	bool dying;		/* being torn down: stream ends are not counted */
	bool queued;		/* has output not yet handed to OpenSSL */
	unsigned inflight;
	uint32_t events;	/* what epoll watches now */
	uint8_t *obuf;		/* nghttp2's output waiting for SSL_write */
	size_t olen, ooff, ocap;
	struct stream *streams;	/* K of them */
};

static struct sockaddr_storage srv;
static socklen_t srvlen;
static SSL_CTX *ctx;
static nghttp2_session_callbacks *cbs;
static int ep;
static enum mode mode = MODE_STREAM;
static unsigned names = 100, next_name, kmax = 8;
static const char *path = "/dns-query";
static uint64_t sent, answered, failed, resumed, reconnects;
static uint32_t *hist;
static double lat_sum;
static bool verbose;
static volatile sig_atomic_t stopping;

static void
on_signal(int sig)
{
	(void)sig;
	stopping = 1;
}

/* Write a query (ID 0, RD) for the next name into @p; @return its length. */
static size_t
make_query(uint8_t *p)
{
	memset(p, 0, 12);
	p[2] = 0x01;		/* RD */
	p[5] = 1;		/* QDCOUNT */
	return 12 + bench_question(p + 12, next_name++ % names);
}

static void
watch(struct conn *c, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = c };

	if (events == c->events)
		return;
	if (epoll_ctl(ep, c->events == UINT32_MAX ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c->fd, &ev) < 0) {
		perror("epoll_ctl");
		exit(1);
	}
	c->events = events;
}

/* A stream ended: count it, free its slot. */
static void
stream_done(struct conn *c, struct stream *s, bool reset)
{
	const uint8_t *r = s->r;
	/* our query has one question and nothing else: its question must come back */
	bool ok = !reset && s->status == 200 && s->rlen >= s->qlen && s->qlen <= RMAX &&
		  (r[2] & 0x80) != 0 && (r[3] & 0x0f) == 0 && (r[6] << 8 | r[7]) > 0 &&
		  memcmp(r + 12, s->q + 12, s->qlen - 12) == 0;

	if (ok) {
		double us = (perf_now() - s->t) * 1e6;
		size_t b = (size_t)(us / HIST_US);

		answered++;
		lat_sum += us;
		hist[b < HIST_N ? b : HIST_N - 1]++;
	} else if (mode == MODE_STREAM) {
		if (verbose && failed < 10)
			fprintf(stderr, "dnslb-dohload: stream failed: %s, status %d, %zu bytes, "
				"flags %02x%02x, ancount %d\n", reset ? "reset" : "closed", s->status,
				s->rlen, s->rlen >= 4 ? r[2] : 0, s->rlen >= 4 ? r[3] : 0,
				s->rlen >= 8 ? r[6] << 8 | r[7] : -1);
		failed++;	/* full, resume: failed counts connections (close_conn) */
	}
	s->used = false;
	c->inflight--;
}

static int
on_header(nghttp2_session *h2, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
	  const uint8_t *value, size_t valuelen, uint8_t flags, void *user)
{
	struct stream *s = nghttp2_session_get_stream_user_data(h2, frame->hd.stream_id);

	(void)flags;
	(void)user;
	if (s != NULL && namelen == 7 && memcmp(name, ":status", 7) == 0 && valuelen == 3)
		s->status = (value[0] - '0') * 100 + (value[1] - '0') * 10 + (value[2] - '0');
	return 0;
}

static int
on_data(nghttp2_session *h2, uint8_t flags, int32_t id, const uint8_t *data, size_t len, void *user)
{
	struct stream *s = nghttp2_session_get_stream_user_data(h2, id);

	(void)flags;
	(void)user;
	if (s == NULL)
		return 0;
	if (s->rlen < RMAX)
		memcpy(s->r + s->rlen, data, len < RMAX - s->rlen ? len : RMAX - s->rlen);
	s->rlen += len;
	return 0;
}

static int
on_close(nghttp2_session *h2, int32_t id, uint32_t error, void *user)
{
	struct conn *c = user;
	struct stream *s = nghttp2_session_get_stream_user_data(h2, id);

	if (s != NULL && s->used && !c->dying)
		stream_done(c, s, error != NGHTTP2_NO_ERROR);
	return 0;
}

static ssize_t
read_body(nghttp2_session *h2, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
	  nghttp2_data_source *src, void *user)
{
	struct stream *s = src->ptr;
	size_t n = s->qlen - s->qoff;

	(void)h2;
	(void)id;
	(void)user;
	if (n > len)
		n = len;
	memcpy(buf, s->q + s->qoff, n);
	s->qoff += n;
	if (s->qoff == s->qlen)
		*flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)n;
}

/* Tear @c down; with @ok, politely (close_notify), keeping a resumable session. */
static void
close_conn(struct conn *c, bool ok)
{
	if (c->h2 != NULL) {
		/* Streams still open end unanswered; nghttp2_session_del must not count them twice. */
		if (mode == MODE_STREAM)
			failed += c->inflight;
		c->dying = true;
		nghttp2_session_del(c->h2);
		c->h2 = NULL;
		for (unsigned i = 0; i < kmax; i++)
			c->streams[i].used = false;
		c->inflight = 0;
		c->dying = false;
	}
	if (c->ssl != NULL) {
		if (ok) {
			if (mode == MODE_RESUME)
				keep_session(c->ssl, &c->sess);
			SSL_shutdown(c->ssl);	/* one close_notify, not waiting for the peer's */
		}
		SSL_free(c->ssl);
		c->ssl = NULL;
	}
	if (c->fd >= 0)
		close(c->fd);	/* epoll forgets a closed descriptor by itself */
	c->fd = -1;
	c->st = ST_FREE;
	c->olen = c->ooff = 0;
	c->queued = false;
	if (!ok && mode != MODE_STREAM)
		failed++;
}

static void
open_conn(struct conn *c)
{
	bool failed_now;

	c->fd = connect_nb(&srv, srvlen, &failed_now);
	if (c->fd < 0) {
		perror("socket");
		exit(1);
	}
	c->events = UINT32_MAX;
	if (failed_now) {
		close_conn(c, false);
		return;
	}
	c->st = ST_CONNECT;
	watch(c, EPOLLOUT);
}

/* Start one POST on @c (ST_OPEN, fewer than K in flight). @return false if nghttp2 refused. */
static bool
submit(struct conn *c)
{
	struct stream *s = NULL;
	char clen[8];

	for (unsigned i = 0; i < kmax; i++) {
		if (!c->streams[i].used) {
			s = &c->streams[i];
			break;
		}
	}
	if (s == NULL)
		return false;
	s->qlen = make_query(s->q);
	s->qoff = 0;
	s->rlen = 0;
	s->status = 0;
	snprintf(clen, sizeof(clen), "%zu", s->qlen);
#define NV(n, v) { (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), \
		   NGHTTP2_NV_FLAG_NO_COPY_NAME }
	nghttp2_nv nva[] = {
		NV(":method", "POST"),
		NV(":scheme", "https"),
		NV(":authority", "bench.example"),
		NV(":path", path),
		NV("accept", "application/dns-message"),
		NV("content-type", "application/dns-message"),
		NV("content-length", clen),
	};
#undef NV
	nghttp2_data_provider dp = { .source.ptr = s, .read_callback = read_body };

	if (nghttp2_submit_request(c->h2, NULL, nva, sizeof(nva) / sizeof(nva[0]), &dp, s) < 0)
		return false;
	s->used = true;
	s->t = perf_now();
	c->inflight++;
	c->queued = true;
	sent++;
	return true;
}

/* Hand nghttp2's output to OpenSSL as far as it goes. @return false if @c failed. */
static bool
flush(struct conn *c)
{
	for (;;) {
		if (c->ooff == c->olen) {
			c->olen = c->ooff = 0;
			for (;;) {
				const uint8_t *data;
				ssize_t n = nghttp2_session_mem_send(c->h2, &data);

				if (n < 0)
					return false;
				if (n == 0)
					break;
				if (c->olen + (size_t)n > c->ocap) {
					size_t cap = c->ocap ? c->ocap * 2 : 16384;
					while (cap < c->olen + (size_t)n)
						cap *= 2;
					uint8_t *p = realloc(c->obuf, cap);
					if (p == NULL)
						return false;
					c->obuf = p;
					c->ocap = cap;
				}
				memcpy(c->obuf + c->olen, data, (size_t)n);
				c->olen += (size_t)n;
				if (c->olen >= 65536)
					break;
			}
			c->queued = false;
			if (c->olen == 0)
				break;
		}
		int r = SSL_write(c->ssl, c->obuf + c->ooff, (int)(c->olen - c->ooff));
		if (r <= 0) {
			int e = SSL_get_error(c->ssl, r);
			if (e == SSL_ERROR_WANT_WRITE) {
				watch(c, EPOLLIN | EPOLLOUT);
				return true;
			}
			if (e == SSL_ERROR_WANT_READ)
				return true;	/* EPOLLIN is watched while open */
			ERR_clear_error();
			return false;
		}
		c->ooff += (size_t)r;
	}
	watch(c, EPOLLIN);
	if (!nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2))
		return false;	/* GOAWAY: the session is over */
	return true;
}

/* Read and feed nghttp2 until OpenSSL has nothing more. @return false if @c failed. */
static bool
receive(struct conn *c)
{
	uint8_t buf[IBUF];

	for (;;) {
		int r = SSL_read(c->ssl, buf, sizeof(buf));
		if (r <= 0) {
			int e = SSL_get_error(c->ssl, r);
			if (e == SSL_ERROR_WANT_READ)
				return true;
			if (e == SSL_ERROR_WANT_WRITE) {
				watch(c, EPOLLIN | EPOLLOUT);
				return true;
			}
			ERR_clear_error();
			return false;
		}
		if (nghttp2_session_mem_recv(c->h2, buf, (size_t)r) < 0)
			return false;
	}
}

/* After a connection-level failure: reopen in stream mode, count it in the others. */
static void
fail_conn(struct conn *c)
{
	close_conn(c, false);
	if (mode == MODE_STREAM && !stopping) {
		reconnects++;
		open_conn(c);
	}
}

/* The TLS handshake is done: check ALPN, start the HTTP/2 session. @return false on failure. */
static bool
start_h2(struct conn *c)
{
	const unsigned char *alpn;
	unsigned alen;
	nghttp2_settings_entry iv[] = {
		{ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100 },
		{ NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
	};

	SSL_get0_alpn_selected(c->ssl, &alpn, &alen);
	if (alen != 2 || memcmp(alpn, "h2", 2) != 0) {
		static bool said;
		if (!said)
			fprintf(stderr, "dnslb-dohload: the server did not select ALPN h2\n");
		said = true;
		return false;
	}
	if (SSL_session_reused(c->ssl))
		resumed++;
	if (nghttp2_session_client_new(&c->h2, cbs, c) != 0 ||
	    nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, 2) != 0)
		return false;
	c->st = ST_OPEN;
	return true;
}

/* Advance @c as far as it goes without blocking. */
static void
step(struct conn *c)
{
	if (c->st == ST_CONNECT) {
		int err = 0;
		socklen_t el = sizeof(err);
		if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err != 0) {
			fail_conn(c);
			return;
		}
		c->ssl = SSL_new(ctx);
		SSL_set_fd(c->ssl, c->fd);
		SSL_set_mode(c->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE);
		if (mode == MODE_RESUME && c->sess != NULL)
			SSL_set_session(c->ssl, c->sess);
		c->st = ST_HANDSHAKE;
	}
	if (c->st == ST_HANDSHAKE) {
		int r = SSL_connect(c->ssl);
		if (r != 1) {
			switch (SSL_get_error(c->ssl, r)) {
			case SSL_ERROR_WANT_READ:
				watch(c, EPOLLIN);
				return;
			case SSL_ERROR_WANT_WRITE:
				watch(c, EPOLLOUT);
				return;
			default:
				ERR_clear_error();
				fail_conn(c);
				return;
			}
		}
		if (!start_h2(c) || (mode != MODE_STREAM && !submit(c)) || !flush(c)) {
			fail_conn(c);
			return;
		}
	}
	if (c->st == ST_OPEN) {
		uint64_t before = answered;

		if (!receive(c) || !flush(c)) {
			fail_conn(c);
			return;
		}
		/* full, resume: the one answer ends the connection. */
		if (mode != MODE_STREAM && c->inflight == 0)
			close_conn(c, answered > before);
	}
}

static double
percentile(double p)
{
	uint64_t want = (uint64_t)((double)answered * p), seen = 0;

	if (answered == 0)
		return 0;
	for (size_t i = 0; i < HIST_N; i++) {
		seen += hist[i];
		if (seen > want)
			return (double)(i * HIST_US) + HIST_US / 2.0;
	}
	return (double)HIST_N * HIST_US;
}

static void
usage(void)
{
	fprintf(stderr, "usage: dnslb-dohload <addr:port> [-m stream|full|resume] [-c CONC] [-k K] "
		"[-Q RATE] [-l SECS] [-n COUNT] [-w WAIT] [-r RATE] [-q NAMES] [-p PATH] [-v]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	static const unsigned char alpn[] = { 2, 'h', '2' };
	unsigned conc = 16;
	double secs = 5, qrate = 0, hrate = 0, wait = 2, t0, end, t;
	uint64_t count = 0;
	int opt;

	while ((opt = getopt(argc, argv, "m:c:k:Q:l:n:w:r:q:p:v")) != -1) {
		switch (opt) {
		case 'm':
			if (strcmp(optarg, "stream") == 0)
				mode = MODE_STREAM;
			else if (strcmp(optarg, "full") == 0)
				mode = MODE_FULL;
			else if (strcmp(optarg, "resume") == 0)
				mode = MODE_RESUME;
			else
				usage();
			break;
		case 'c': conc = (unsigned)atoi(optarg); break;
		case 'k': kmax = (unsigned)atoi(optarg); break;
		case 'Q': qrate = atof(optarg); break;
		case 'l': secs = atof(optarg); break;
		case 'n': count = strtoull(optarg, NULL, 10); break;
		case 'w': wait = atof(optarg); break;
		case 'r': hrate = atof(optarg); break;
		case 'q': names = (unsigned)atoi(optarg); break;
		case 'p': path = optarg; break;
		case 'v': verbose = true; break;
		default: usage();
		}
	}
	if (optind + 1 != argc || parse_addr(argv[optind], &srv, &srvlen) < 0 || conc == 0 ||
	    kmax == 0 || names == 0 || secs <= 0 || path[0] != '/')
		usage();
	if (mode != MODE_STREAM)
		kmax = 1;

	raise_nofile();
	signal(SIGPIPE, SIG_IGN);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);

	ctx = SSL_CTX_new(TLS_client_method());
	if (ctx == NULL || SSL_CTX_set_alpn_protos(ctx, alpn, sizeof(alpn)) != 0) {
		ERR_print_errors_fp(stderr);
		return 1;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
	if (nghttp2_session_callbacks_new(&cbs) != 0)
		return 1;
	nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_close);

	struct conn *conns = calloc(conc, sizeof(*conns));
	struct epoll_event evs[256];

	hist = calloc(HIST_N, sizeof(*hist));
	if (conns == NULL || hist == NULL || (ep = epoll_create1(EPOLL_CLOEXEC)) < 0) {
		perror("dnslb-dohload");
		return 1;
	}
	for (unsigned i = 0; i < conc; i++) {
		conns[i].fd = -1;
		conns[i].streams = calloc(kmax, sizeof(struct stream));
		if (conns[i].streams == NULL) {
			perror("dnslb-dohload");
			return 1;
		}
	}

	if (mode == MODE_STREAM) {
		/* Open every connection before the clock starts (5 s at most). */
		unsigned open = 0;
		for (unsigned i = 0; i < conc; i++)
			open_conn(&conns[i]);
		end = perf_now() + 5;
		while (!stopping && perf_now() < end) {
			open = 0;
			for (unsigned i = 0; i < conc; i++)
				open += conns[i].st == ST_OPEN;
			if (open == conc)
				break;
			int k = epoll_wait(ep, evs, 256, 10);
			for (int i = 0; i < k; i++)
				step(evs[i].data.ptr);
		}
		if (open == 0) {
			fprintf(stderr, "dnslb-dohload: no connection opened\n");
			printf("sent 0 answered 0 failed %llu lost 0 seconds 0 per_second 0\n",
			       (unsigned long long)failed);
			return 1;
		}
		unsigned rr = 0;

		t0 = perf_now();
		end = t0 + secs;
		while (!stopping && (t = perf_now()) < end && (count == 0 || sent < count)) {
			uint64_t due = qrate > 0 ? (uint64_t)((t - t0) * qrate) : UINT64_MAX;
			unsigned full = 0;

			/* Round robin over the connections, one POST each turn, until none is due
			 * or every connection has K in flight. */
			while (sent < due && (count == 0 || sent < count) && full < conc) {
				struct conn *c = &conns[rr];
				rr = (rr + 1) % conc;
				if (c->st == ST_OPEN && c->inflight < kmax && submit(c))
					full = 0;
				else
					full++;
			}
			for (unsigned i = 0; i < conc; i++)
				if (conns[i].queued && !flush(&conns[i]))
					fail_conn(&conns[i]);
			int k = epoll_wait(ep, evs, 256, 1);
			for (int i = 0; i < k; i++)
				step(evs[i].data.ptr);
		}
		double el = perf_now() - t0;
		uint64_t pending = 0;

		/* Give those in flight WAIT seconds. */
		end = perf_now() + wait;
		for (;;) {
			pending = 0;
			for (unsigned i = 0; i < conc; i++)
				pending += conns[i].inflight;
			if (pending == 0 || perf_now() >= end)
				break;
			int k = epoll_wait(ep, evs, 256, 10);
			for (int i = 0; i < k; i++)
				step(evs[i].data.ptr);
		}
		printf("sent %llu answered %llu failed %llu lost %llu seconds %.3f per_second %.1f "
		       "latency_avg_us %.0f latency_p50_us %.0f latency_p99_us %.0f reconnects %llu\n",
		       (unsigned long long)sent, (unsigned long long)answered,
		       (unsigned long long)failed, (unsigned long long)pending, el,
		       (double)answered / el, answered ? lat_sum / (double)answered : 0.0,
		       percentile(0.5), percentile(0.99), (unsigned long long)reconnects);
	} else {
		uint64_t started = 0;

		t0 = perf_now();
		end = t0 + secs;
		while (!stopping && (t = perf_now()) < end) {
			for (unsigned i = 0; i < conc; i++) {
				if (hrate > 0 && (double)started >= (t - t0) * hrate)
					break;
				if (conns[i].st == ST_FREE) {
					open_conn(&conns[i]);
					started++;
				}
			}
			int k = epoll_wait(ep, evs, 256, hrate > 0 ? 1 : 100);
			for (int i = 0; i < k; i++)
				step(evs[i].data.ptr);
		}
		double el = perf_now() - t0;
		printf("connections %llu resumed %llu failed %llu seconds %.3f per_second %.1f\n",
		       (unsigned long long)answered, (unsigned long long)resumed,
		       (unsigned long long)failed, el, (double)answered / el);
	}
	fflush(stdout);
	for (unsigned i = 0; i < conc; i++)
		if (conns[i].st != ST_FREE)
			close_conn(&conns[i], true);
	return 0;
}
