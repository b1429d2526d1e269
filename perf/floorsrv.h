/*
 * The server skeleton the floors of perf/tls share (dnslb-tlsfloor,
 * dnslb-dohfloor; header-only, as perfutil.h): one thread, epoll,
 * nonblocking sockets, OpenSSL's server defaults with the given certificate
 * and key and the record buffers released while idle (as both proxies do).
 * A floor supplies what a connection is (a struct that starts with a struct
 * floor_conn) and what it does when its socket is ready; accepting,
 * TCP_NODELAY, the handshake, the wait for what OpenSSL needs and the close
 * are here.
 */
#ifndef DLB_PERF_FLOORSRV_H
#define DLB_PERF_FLOORSRV_H

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "perfutil.h"

/* The start of a floor's connection (zeroed otherwise when accepted). */
struct floor_conn {
	int fd;
	SSL *ssl;
	bool established;	/* the handshake is done */
};

struct floor_ops {
	const char *name;			/* for messages: "dnslb-tlsfloor" */
	size_t conn_size;			/* the floor's connection struct */
	bool (*ctx_setup)(SSL_CTX *ctx);	/* NULL, or more context settings; false: fail */
	/* NULL, or the handshake just ended; false: @conn is gone (floor_free) */
	bool (*conn_established)(void *conn);
	void (*conn_step)(void *conn);		/* its socket is ready, the handshake done */
	void (*conn_drop)(void *conn);		/* NULL, or what to free besides, at its close */
};

static int floor_ep;
static volatile sig_atomic_t floor_stopping;
static const struct floor_ops *floor_ops;

/* Close connection @conn and free it. */
static inline void
floor_free(void *conn)
{
	struct floor_conn *c = conn;

	if (floor_ops->conn_drop != NULL)
		floor_ops->conn_drop(conn);
	SSL_free(c->ssl);
	close(c->fd);
	free(c);
}

static void
floor_on_signal(int sig)
{
	(void)sig;
	floor_stopping = 1;
}

/*
 * After an SSL call on connection @conn returned @r: wait for what it
 * needs. @return false if @conn is gone (an error or a close: freed).
 */
static inline bool
floor_wait(void *conn, int r)
{
	struct floor_conn *c = conn;
	struct epoll_event ev = { .data.ptr = conn };

	switch (SSL_get_error(c->ssl, r)) {
	case SSL_ERROR_WANT_READ:
		ev.events = EPOLLIN;
		break;
	case SSL_ERROR_WANT_WRITE:
		ev.events = EPOLLOUT;
		break;
	default:
		ERR_clear_error();
		floor_free(conn);
		return false;
	}
	epoll_ctl(floor_ep, EPOLL_CTL_MOD, c->fd, &ev);
	return true;
}

/* @conn's socket is ready: the handshake, then the floor's step. */
static inline void
floor_ready(void *conn)
{
	struct floor_conn *c = conn;

	if (!c->established) {
		int r = SSL_accept(c->ssl);

		if (r != 1) {
			floor_wait(conn, r);
			return;
		}
		c->established = true;
		if (floor_ops->conn_established != NULL && !floor_ops->conn_established(conn))
			return;
	}
	floor_ops->conn_step(conn);
}

/* main() of a floor: <addr:port> <cert.pem> <key.pem>, until SIGINT/SIGTERM. */
static inline int
floor_run(int argc, char **argv, const struct floor_ops *ops)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	int one = 1, lfd;

	if (argc != 4 || parse_addr(argv[1], &ss, &sl) < 0) {
		fprintf(stderr, "usage: %s <addr:port> <cert.pem> <key.pem>\n", ops->name);
		return 2;
	}
	floor_ops = ops;
	raise_nofile();
	signal(SIGPIPE, SIG_IGN);
	signal(SIGTERM, floor_on_signal);
	signal(SIGINT, floor_on_signal);

	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	if (ctx == NULL || SSL_CTX_use_certificate_chain_file(ctx, argv[2]) != 1 ||
	    SSL_CTX_use_PrivateKey_file(ctx, argv[3], SSL_FILETYPE_PEM) != 1 ||
	    (ops->ctx_setup != NULL && !ops->ctx_setup(ctx))) {
		ERR_print_errors_fp(stderr);
		return 1;
	}
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);

	lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&ss, sl) < 0 || listen(lfd, 1024) < 0) {
		fprintf(stderr, "%s: listen: ", ops->name);
		perror(NULL);
		return 1;
	}
	floor_ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event lev = { .events = EPOLLIN, .data.ptr = NULL };
	epoll_ctl(floor_ep, EPOLL_CTL_ADD, lfd, &lev);

	struct epoll_event evs[256];
	while (!floor_stopping) {
		int k = epoll_wait(floor_ep, evs, 256, 200);
		for (int i = 0; i < k; i++) {
			if (evs[i].data.ptr != NULL) {
				floor_ready(evs[i].data.ptr);
				continue;
			}
			for (;;) {
				int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
				struct floor_conn *c;

				if (fd < 0)
					break;
				if ((c = calloc(1, ops->conn_size)) == NULL ||
				    (c->ssl = SSL_new(ctx)) == NULL) {
					free(c);
					close(fd);
					continue;
				}
				c->fd = fd;
				setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
				SSL_set_fd(c->ssl, fd);
				struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
				epoll_ctl(floor_ep, EPOLL_CTL_ADD, fd, &ev);
				floor_ready(c);
			}
		}
	}
	return 0;
}

#endif
