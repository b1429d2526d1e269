/*
 * The client side shared by dnslb-tlsload (DNS over TLS) and dnslb-dohload
 * (DNS over HTTPS): the clock, the benchmark's question, a nonblocking
 * connect, and keeping a session to resume.  Header-only, as perfutil.h, so
 * each program stays one translation unit.
 */
#ifndef DLB_PERF_TLSCLIENT_H
#define DLB_PERF_TLSCLIENT_H

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/ssl.h>

/* Seconds on the monotonic clock. */
static inline double
perf_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Write the question "h<@i>.bench.example A IN" at @p (at most 30 bytes); @return its length. */
static inline size_t
bench_question(uint8_t *p, unsigned i)
{
	static const uint8_t tail[] = { 5, 'b', 'e', 'n', 'c', 'h', 7, 'e', 'x', 'a', 'm', 'p',
					'l', 'e', 0, 0, 1, 0, 1 };
	char label[16];
	int n = snprintf(label, sizeof(label), "h%u", i);

	p[0] = (uint8_t)n;
	memcpy(p + 1, label, (size_t)n);
	memcpy(p + 1 + n, tail, sizeof(tail));
	return 1 + (size_t)n + sizeof(tail);
}

/*
 * A nonblocking TCP socket (TCP_NODELAY) connecting to @ss.  @return the
 * descriptor, or -1 if socket() failed; *@failed is set if connect() failed
 * at once (the descriptor is open all the same, for the caller to close).
 */
static inline int
connect_nb(const struct sockaddr_storage *ss, socklen_t len, bool *failed)
{
	int one = 1;
	int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	*failed = false;
	if (fd < 0)
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (const struct sockaddr *)ss, len) < 0 && errno != EINPROGRESS)
		*failed = true;
	return fd;
}

/* Keep @ssl's session in *@sess (freeing the one there) if it can be resumed. */
static inline void
keep_session(SSL *ssl, SSL_SESSION **sess)
{
	SSL_SESSION *n = SSL_get1_session(ssl);

	if (n != NULL && SSL_SESSION_is_resumable(n)) {
		SSL_SESSION_free(*sess);
		*sess = n;
	} else {
		SSL_SESSION_free(n);
	}
}

#endif
