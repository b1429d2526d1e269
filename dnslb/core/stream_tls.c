/*
 * stream_tls.c - TLS on a byte stream (stream_tls.h): the ops table that
 * runs OpenSSL between the socket and the DNS framing, client side and
 * server side. The stream (stream.c) does the rest: connect, accept, the
 * write queue, the events.
 */
#include "dnslb/core/stream_tls.h"

#include <errno.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

/* Bytes coalesced into one SSL_write: one TLS record's worth. */
#define TLS_WRITE_MAX	16384

/* What OpenSSL waits for, as the stream's ->want and errno. */
static int
tls_wait(struct dlb_stream *s, SSL *ssl, int r)
{
	switch (SSL_get_error(ssl, r)) {
	case SSL_ERROR_WANT_READ:
		s->want = EV_READ;
		errno = EAGAIN;
		return 0;
	case SSL_ERROR_WANT_WRITE:
		s->want = EV_WRITE;
		errno = EAGAIN;
		return 0;
	case SSL_ERROR_ZERO_RETURN:
		return 1;	/* the peer closed the TLS session */
	case SSL_ERROR_SYSCALL:
		if (errno == 0)
			errno = ECONNRESET;
		ERR_clear_error();
		return -1;
	default:
		((struct dlb_stream_tls *)s->ctx)->error = ERR_peek_last_error();
		ERR_clear_error();
		errno = EPROTO;
		return -1;
	}
}

static int
tls_handshake(struct dlb_stream *s)
{
	struct dlb_stream_tls *t = s->ctx;
	int r;

	if (!t->fd_set) {
		if (SSL_set_fd(t->ssl, s->fd) != 1) {
			errno = ENOMEM;
			return -1;
		}
		t->fd_set = true;
	}
	ERR_clear_error();	/* SSL_get_error and the info callback read this connection's own */
	r = SSL_do_handshake(t->ssl);
	if (r == 1) {
		t->established = true;
		t->resumed = SSL_session_reused(t->ssl) != 0;
		return 1;
	}
	switch (tls_wait(s, t->ssl, r)) {
	case 0:
		return 0;
	case 1:
		errno = ECONNRESET;
		return -1;
	default:
		t->failed = true;
		return -1;
	}
}

static ssize_t
tls_recv(struct dlb_stream *s, uint8_t *buf, size_t len)
{
	struct dlb_stream_tls *t = s->ctx;
	int r = SSL_read(t->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);

	if (r > 0)
		return r;
	switch (tls_wait(s, t->ssl, r)) {
	case 0:
		return -1;	/* errno EAGAIN */
	case 1:
		return 0;	/* close_notify: the end of the stream */
	default:
		return -1;
	}
}

static ssize_t
tls_sendv(struct dlb_stream *s, const struct iovec *iov, int iovcnt)
{
	struct dlb_stream_tls *t = s->ctx;
	uint8_t buf[TLS_WRITE_MAX];
	size_t n = 0;
	int r;

	/*
	 * One record for what fits: a DNS message and its length prefix go
	 * out together. A write OpenSSL could not finish is retried by the
	 * stream from its queue, which holds the same bytes first (the SSL
	 * accepts a moved buffer).
	 */
	for (int i = 0; i < iovcnt && n < sizeof(buf); i++) {
		size_t take = iov[i].iov_len < sizeof(buf) - n ? iov[i].iov_len : sizeof(buf) - n;

		memcpy(buf + n, iov[i].iov_base, take);
		n += take;
	}
	if (n == 0)
		return 0;
	r = SSL_write(t->ssl, buf, (int)n);
	if (r > 0)
		return r;
	if (tls_wait(s, t->ssl, r) == 1)
		errno = EPIPE;
	return -1;
}

static bool
tls_pending(struct dlb_stream *s)
{
	struct dlb_stream_tls *t = s->ctx;

	/* decrypted bytes not yet taken, or read-ahead bytes not yet decrypted */
	return SSL_has_pending(t->ssl) == 1;
}

static void
tls_release(struct dlb_stream *s)
{
	struct dlb_stream_tls *t = s->ctx;

	if (t->established && !t->failed) {
		(void)SSL_shutdown(t->ssl);	/* close_notify, best effort: the socket closes next */
		/* nothing left on the thread's queue for the next connection's
		 * alert to be taken for (tls.c's info callback reads the last error) */
		ERR_clear_error();
	}
	SSL_free(t->ssl);
	t->ssl = NULL;
}

const struct dlb_stream_ops dlb_stream_tls_ops = {
	.name = "tls",
	.handshake = tls_handshake,
	.recv = tls_recv,
	.sendv = tls_sendv,
	.pending = tls_pending,
	.release = tls_release,
};

void
dlb_stream_tls_use(struct dlb_stream *s, struct dlb_stream_tls *t, SSL *ssl)
{
	memset(t, 0, sizeof(*t));
	t->ssl = ssl;
	SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	/* one read() for a record's header and body, and for the records behind it, instead
	 * of two per record: what it reads beyond the record is reported by tls_pending */
	SSL_set_read_ahead(ssl, 1);
	s->ops = &dlb_stream_tls_ops;
	s->ctx = t;
}
