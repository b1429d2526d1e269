/*
 * dnslb-tlsload: the DNS over TLS load generator of perf/tls.
 *
 * dnsperf (-m dot) keeps its connections open; this measures what it cannot:
 * new connections, each with one query, and connections held idle.
 *
 *   full    CONC connections at a time, each: TCP connect, a full TLS
 *           handshake, one query, its answer, close_notify, close; then a
 *           new one in its place, for SECS seconds.
 *           With -r RATE, new connections start at RATE per second at most
 *           (CONC still bounds those in flight), so servers compared at the
 *           same rate do the same work per wake-up.
 *   resume  the same, but each connection offers the session (ticket) its
 *           slot's previous connection got: after the first, every
 *           handshake is a resumption unless the server refuses it.
 *   idle    N connections opened (at most CONC handshaking at once), each
 *           with one query answered, then held open without traffic for
 *           SECS seconds or until SIGTERM.  "established N" is printed on
 *           stdout once they all are, so a caller can measure the server
 *           then.
 *
 * The certificate is not verified (the client's CPU is not what is
 * measured); the key exchange is OpenSSL's default (X25519 first), TLS 1.3
 * unless -2 asks for TLS 1.2.  Queries are "h<i>.bench.example A", i cycling
 * over -q NAMES (default 100).  At the end it prints one line:
 *   connections C resumed R failed F seconds S per_second P
 * counting connections whose answer was read.
 *
 * Usage: dnslb-tlsload <addr:port> -m full|resume|idle [-c CONC] [-l SECS]
 *                      [-r RATE] [-n N] [-q NAMES] [-2]
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

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "perfutil.h"
#include "tlsclient.h"

#define MSGMAX	1024	/* an answer to one of our queries fits easily */

enum mode { MODE_FULL, MODE_RESUME, MODE_IDLE };
enum state { ST_FREE, ST_CONNECT, ST_HANDSHAKE, ST_WRITE, ST_READ, ST_IDLE };

struct slot {
	int fd;
	enum state st;
	SSL *ssl;
	SSL_SESSION *sess;	/* resume: the previous connection's session */
	size_t have;		/* answer bytes read so far */
	uint8_t buf[MSGMAX + 2];
};

static struct sockaddr_storage srv;
static socklen_t srvlen;
static SSL_CTX *ctx;
static int ep;
static enum mode mode = MODE_FULL;
static unsigned names = 100, next_name;
static uint64_t done, resumed, failed;
static volatile sig_atomic_t stopping;

static void
on_signal(int sig)
{
	(void)sig;
	stopping = 1;
}

/* Write a length-prefixed query for the next name into @p; @return its length with the prefix. */
static size_t
make_query(uint8_t *p)
{
	size_t len = 12;
	uint16_t id = (uint16_t)rand();

	memset(p + 2, 0, 12);
	p[2] = (uint8_t)(id >> 8);
	p[3] = (uint8_t)id;
	p[4] = 0x01;		/* RD */
	p[7] = 1;		/* QDCOUNT */
	len += bench_question(p + 2 + len, next_name++ % names);
	p[0] = (uint8_t)(len >> 8);
	p[1] = (uint8_t)len;
	return len + 2;
}

static void
watch(struct slot *s, uint32_t events, int op)
{
	struct epoll_event ev = { .events = events, .data.ptr = s };

	if (epoll_ctl(ep, op, s->fd, &ev) < 0) {
		perror("epoll_ctl");
		exit(1);
	}
}

static void
close_slot(struct slot *s, bool ok)
{
	if (s->ssl != NULL) {
		if (ok) {
			if (mode == MODE_RESUME)
				keep_session(s->ssl, &s->sess);
			SSL_shutdown(s->ssl);	/* one close_notify, not waiting for the peer's */
		}
		SSL_free(s->ssl);
		s->ssl = NULL;
	}
	if (s->fd >= 0)
		close(s->fd);	/* epoll forgets a closed descriptor by itself */
	s->fd = -1;
	s->st = ST_FREE;
	if (!ok)
		failed++;
}

static void
open_slot(struct slot *s)
{
	bool failed_now;

	s->fd = connect_nb(&srv, srvlen, &failed_now);
	if (s->fd < 0) {
		perror("socket");
		exit(1);
	}
	s->have = 0;
	if (failed_now) {
		close_slot(s, false);
		return;
	}
	s->st = ST_CONNECT;
	watch(s, EPOLLOUT, EPOLL_CTL_ADD);
}

/* After an SSL call returned @r: wait for what it needs, or fail the slot. @return true to go on. */
static bool
ssl_wait(struct slot *s, int r)
{
	switch (SSL_get_error(s->ssl, r)) {
	case SSL_ERROR_WANT_READ:
		watch(s, EPOLLIN, EPOLL_CTL_MOD);
		return false;
	case SSL_ERROR_WANT_WRITE:
		watch(s, EPOLLOUT, EPOLL_CTL_MOD);
		return false;
	default:
		ERR_clear_error();
		close_slot(s, false);
		return false;
	}
}

/* Advance @s as far as it goes without blocking. */
static void
step(struct slot *s)
{
	int r;

	if (s->st == ST_CONNECT) {
		int err = 0;
		socklen_t el = sizeof(err);
		if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err != 0) {
			close_slot(s, false);
			return;
		}
		s->ssl = SSL_new(ctx);
		SSL_set_fd(s->ssl, s->fd);
		if (mode == MODE_RESUME && s->sess != NULL)
			SSL_set_session(s->ssl, s->sess);
		s->st = ST_HANDSHAKE;
	}
	if (s->st == ST_HANDSHAKE) {
		r = SSL_connect(s->ssl);
		if (r != 1) {
			ssl_wait(s, r);
			return;
		}
		if (SSL_session_reused(s->ssl))
			resumed++;
		make_query(s->buf);
		s->st = ST_WRITE;
	}
	if (s->st == ST_WRITE) {
		size_t len = (size_t)(s->buf[0] << 8 | s->buf[1]) + 2;
		r = SSL_write(s->ssl, s->buf, (int)len);
		if (r <= 0) {
			ssl_wait(s, r);
			return;
		}
		s->st = ST_READ;
	}
	if (s->st == ST_READ) {
		for (;;) {
			r = SSL_read(s->ssl, s->buf + s->have, (int)(sizeof(s->buf) - s->have));
			if (r <= 0) {
				ssl_wait(s, r);
				return;
			}
			s->have += (size_t)r;
			if (s->have >= 2 && s->have >= (size_t)(s->buf[0] << 8 | s->buf[1]) + 2)
				break;
			if (s->have == sizeof(s->buf)) {
				close_slot(s, false);
				return;
			}
		}
		done++;
		if (mode == MODE_IDLE) {
			s->st = ST_IDLE;
			watch(s, 0, EPOLL_CTL_MOD);
			return;
		}
		close_slot(s, true);
	}
}

static void
usage(void)
{
	fprintf(stderr, "usage: dnslb-tlsload <addr:port> -m full|resume|idle [-c CONC] [-l SECS] "
		"[-r RATE] [-n N] [-q NAMES] [-2]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	unsigned conc = 16, n = 1000;
	double secs = 5, rate = 0, t0, end;
	bool tls12 = false;
	int opt;

	while ((opt = getopt(argc, argv, "m:c:l:r:n:q:2")) != -1) {
		switch (opt) {
		case 'm':
			if (strcmp(optarg, "full") == 0)
				mode = MODE_FULL;
			else if (strcmp(optarg, "resume") == 0)
				mode = MODE_RESUME;
			else if (strcmp(optarg, "idle") == 0)
				mode = MODE_IDLE;
			else
				usage();
			break;
		case 'c': conc = (unsigned)atoi(optarg); break;
		case 'l': secs = atof(optarg); break;
		case 'r': rate = atof(optarg); break;
		case 'n': n = (unsigned)atoi(optarg); break;
		case 'q': names = (unsigned)atoi(optarg); break;
		case '2': tls12 = true; break;
		default: usage();
		}
	}
	if (optind + 1 != argc || parse_addr(argv[optind], &srv, &srvlen) < 0 || conc == 0 ||
	    names == 0 || secs <= 0 || (mode == MODE_IDLE && n == 0))
		usage();

	/* Idle mode holds N descriptors: raise the soft limit to the hard one. */
	raise_nofile();
	signal(SIGPIPE, SIG_IGN);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);

	ctx = SSL_CTX_new(TLS_client_method());
	if (ctx == NULL) {
		ERR_print_errors_fp(stderr);
		return 1;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
	if (tls12)
		SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);

	unsigned nslots = mode == MODE_IDLE ? n : conc;
	struct slot *slots = calloc(nslots, sizeof(*slots));
	struct epoll_event evs[256];
	unsigned opened = 0;

	if (slots == NULL || (ep = epoll_create1(EPOLL_CLOEXEC)) < 0) {
		perror("dnslb-tlsload");
		return 1;
	}
	for (unsigned i = 0; i < nslots; i++)
		slots[i].fd = -1;
	t0 = perf_now();
	end = t0 + secs;
	if (mode == MODE_IDLE) {
		/* Open N, CONC at a time; then hold them for SECS from there. */
		while (!stopping && done + failed < n) {
			unsigned busy = (unsigned)(opened - done - failed);
			while (opened < n && busy < conc) {
				open_slot(&slots[opened++]);
				busy++;
			}
			int k = epoll_wait(ep, evs, 256, 100);
			for (int i = 0; i < k; i++)
				step(evs[i].data.ptr);
		}
		printf("established %llu failed %llu\n", (unsigned long long)done,
		       (unsigned long long)failed);
		fflush(stdout);
		end = perf_now() + secs;
		while (!stopping && perf_now() < end)
			usleep(50000);
	} else {
		uint64_t started = 0;
		double t;

		while (!stopping && (t = perf_now()) < end) {
			for (unsigned i = 0; i < nslots; i++) {
				if (rate > 0 && (double)started >= (t - t0) * rate)
					break;
				if (slots[i].st == ST_FREE) {
					open_slot(&slots[i]);
					started++;
				}
			}
			int k = epoll_wait(ep, evs, 256, rate > 0 ? 1 : 100);
			for (int i = 0; i < k; i++)
				step(evs[i].data.ptr);
		}
	}
	double el = perf_now() - t0;
	printf("connections %llu resumed %llu failed %llu seconds %.3f per_second %.1f\n",
	       (unsigned long long)done, (unsigned long long)resumed, (unsigned long long)failed,
	       el, (double)done / el);
	return 0;
}
