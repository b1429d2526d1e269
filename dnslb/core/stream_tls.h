/*
 * stream_tls.h - TLS on a byte stream (dnslb/core/stream.h): an ops table
 * that runs OpenSSL between the socket and the DNS framing, for DoT and DoH
 * listeners (server side) and encrypted backends (client side). The
 * stream's connect, accept, write queue and events are the plain stream's;
 * the SSL comes from the contexts of dnslb/core/tls.h.
 *
 * Use: dlb_stream_init, then dlb_stream_tls_use with a new SSL (in accept
 * or connect state), then dlb_stream_attach (an accepted socket) or
 * dlb_stream_connect. ->connected follows the TLS handshake; ->failed with
 * DLB_STREAM_CONNECT reports a handshake that failed (t->failed set).
 *
 * Thread: the stream's loop.
 */
#ifndef DNSLB_STREAM_TLS_H
#define DNSLB_STREAM_TLS_H

#include <stdbool.h>

#include <openssl/ssl.h>

#include "dnslb/core/stream.h"

/* The TLS state of one stream (s->ctx), embedded in the stream's owner. */
struct dlb_stream_tls {
	SSL *ssl;		/* owned: freed when the stream closes */
	bool fd_set;		/* the SSL reads and writes the stream's socket */
	bool established;	/* the handshake completed */
	bool resumed;		/* ... by resuming a session */
	bool failed;		/* the handshake failed (not a plain EOF) */
	unsigned long error;	/* OpenSSL's last error when it failed (ERR_error_string) */
};

extern const struct dlb_stream_ops dlb_stream_tls_ops;

/** Put TLS on @s, with @t (embedded in the owner) holding @ssl (taken).
 * Call after dlb_stream_init, before dlb_stream_attach or _connect. */
void dlb_stream_tls_use(struct dlb_stream *s, struct dlb_stream_tls *t, SSL *ssl);

#endif
