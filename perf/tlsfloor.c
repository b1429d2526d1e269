/*
 * dnslb-tlsfloor: the floor of perf/tls, a bare DNS over TLS server.
 *
 * One thread, epoll, nonblocking: it accepts TCP connections, runs
 * OpenSSL's server handshake with the given certificate and key (OpenSSL's
 * defaults otherwise: TLS 1.3, stateless session tickets, the record
 * buffers released while idle as both proxies do), and answers every
 * length-prefixed query by sending it back with QR set (the answers to
 * one read in one TLS record): no DNS logic, no
 * cache, no backend.  What it costs per handshake is what OpenSSL and the
 * kernel alone charge for a DNS over TLS connection: the crypto that
 * `openssl speed` measures plus the TLS and TCP overhead no proxy built on
 * OpenSSL can avoid.  Its RSS growth per idle connection is OpenSSL's own.
 *
 * Usage: dnslb-tlsfloor <addr:port> <cert.pem> <key.pem>
 *
 * It runs until SIGINT/SIGTERM.
 */
#include <errno.h>
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
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "perfutil.h"

#define INBUF	1024	/* queries are small: a few in flight fit; small, so an idle connection is OpenSSL's own */

struct conn {
	int fd;
	bool established;
	SSL *ssl;
	size_t have;
	uint8_t in[INBUF];
};

static int ep;
static volatile sig_atomic_t stopping;

static void
on_signal(int sig)
{
	(void)sig;
	stopping = 1;
}

static void
conn_free(struct conn *c)
{
	SSL_free(c->ssl);
	close(c->fd);
	free(c);
}

/* After an SSL call returned @r: wait for what it needs.  @return false if @c is gone. */
static bool
conn_wait(struct conn *c, int r)
{
	struct epoll_event ev = { .data.ptr = c };

	switch (SSL_get_error(c->ssl, r)) {
	case SSL_ERROR_WANT_READ:
		ev.events = EPOLLIN;
		break;
	case SSL_ERROR_WANT_WRITE:
		ev.events = EPOLLOUT;
		break;
	default:
		ERR_clear_error();
		conn_free(c);
		return false;
	}
	epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
	return true;
}

/* Handshake, then answer every complete query read. */
static void
conn_step(struct conn *c)
{
	int r;

	if (!c->established) {
		r = SSL_accept(c->ssl);
		if (r != 1) {
			conn_wait(c, r);
			return;
		}
		c->established = true;
	}
	for (;;) {
		r = SSL_read(c->ssl, c->in + c->have, (int)(sizeof(c->in) - c->have));
		if (r <= 0) {
			conn_wait(c, r);
			return;
		}
		c->have += (size_t)r;
		size_t off = 0;
		while (c->have - off >= 2) {
			size_t len = (size_t)(c->in[off] << 8 | c->in[off + 1]);
			if (c->have - off < len + 2)
				break;
			if (len >= 3)
				c->in[off + 4] |= 0x80;	/* QR */
			off += len + 2;
		}
		/*
		 * The answers of one read in one record, as a proxy that
		 * coalesces its writes sends them; small, on a connection that
		 * just read: the socket takes them.
		 */
		if (off > 0 && SSL_write(c->ssl, c->in, (int)off) <= 0) {
			ERR_clear_error();
			conn_free(c);
			return;
		}
		memmove(c->in, c->in + off, c->have - off);
		c->have -= off;
		if (c->have == sizeof(c->in)) {
			conn_free(c);	/* a frame larger than any query */
			return;
		}
	}
}

int
main(int argc, char **argv)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	int one = 1, lfd;

	if (argc != 4 || parse_addr(argv[1], &ss, &sl) < 0) {
		fprintf(stderr, "usage: dnslb-tlsfloor <addr:port> <cert.pem> <key.pem>\n");
		return 2;
	}
	raise_nofile();
	signal(SIGPIPE, SIG_IGN);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);

	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	if (ctx == NULL || SSL_CTX_use_certificate_chain_file(ctx, argv[2]) != 1 ||
	    SSL_CTX_use_PrivateKey_file(ctx, argv[3], SSL_FILETYPE_PEM) != 1) {
		ERR_print_errors_fp(stderr);
		return 1;
	}
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);

	lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&ss, sl) < 0 || listen(lfd, 1024) < 0) {
		perror("dnslb-tlsfloor: listen");
		return 1;
	}
	ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event lev = { .events = EPOLLIN, .data.ptr = NULL };
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev);

	struct epoll_event evs[256];
	while (!stopping) {
		int k = epoll_wait(ep, evs, 256, 200);
		for (int i = 0; i < k; i++) {
			if (evs[i].data.ptr != NULL) {
				conn_step(evs[i].data.ptr);
				continue;
			}
			for (;;) {
				int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
				if (fd < 0)
					break;
				struct conn *c = calloc(1, sizeof(*c));
				if (c == NULL || (c->ssl = SSL_new(ctx)) == NULL) {
					free(c);
					close(fd);
					continue;
				}
				setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
				c->fd = fd;
				SSL_set_fd(c->ssl, fd);
				struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
				epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
				conn_step(c);
			}
		}
	}
	return 0;
}
