/*
 * dnslb-dohfloor: the DNS over HTTPS floor of perf/tls (--transport doh).
 *
 * dnslb-tlsfloor's counterpart for DoH: one thread, epoll, nonblocking; it
 * accepts TCP connections, runs OpenSSL's server handshake with the given
 * certificate and key (OpenSSL's defaults otherwise, ALPN "h2", the record
 * buffers released while idle as both proxies do) and serves HTTP/2 with an
 * nghttp2 server session (the library dnslb's listener uses). Every
 * request's body, whatever its path or method, is sent back with QR set
 * and, for a query of one question and nothing else, a fixed A record for
 * it (dnslb-dohload counts an answer only with one), as a 200 of
 * content-type application/dns-message with its content-length:
 * no DNS logic, no cache, no backend, no header checks. The answers to one
 * read leave in one TLS write. What it costs per query is what OpenSSL,
 * nghttp2 and the kernel alone charge for DNS over HTTPS on a persistent
 * connection; per handshake, the TLS and HTTP/2 setup no proxy built on
 * them can avoid.
 *
 * Usage: dnslb-dohfloor <addr:port> <cert.pem> <key.pem>
 *
 * It runs until SIGINT/SIGTERM.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

#include "floorsrv.h"

#define BODY_MAX	512	/* a query; a longer body is cut (the floor answers what it kept) */
#define ANSWER_LEN	16	/* the A record added */
#define OUT_MAX		16384	/* nghttp2's output of one read, written at once (up to this) */

struct req {
	size_t len;
	uint8_t body[BODY_MAX + ANSWER_LEN];
	size_t sent;
	char clen[16];
};

struct conn {
	struct floor_conn fc;	/* fd, ssl, established */
	nghttp2_session *h2;
	size_t outlen;
	uint8_t out[OUT_MAX];
};

static nghttp2_session_callbacks *cbs;

/*
 * At a close: the session. A request of a stream still open is not freed
 * (nghttp2_session_del calls no close callback); the loads close their
 * connections with nothing in flight.
 */
static void
conn_drop(void *arg)
{
	struct conn *c = arg;

	if (c->h2 != NULL)
		nghttp2_session_del(c->h2);
}

/* ---- nghttp2 --------------------------------------------------------------------- */

static ssize_t
on_send(nghttp2_session *s, const uint8_t *data, size_t len, int flags, void *ud)
{
	struct conn *c = ud;

	(void)s, (void)flags;
	if (len > sizeof(c->out) - c->outlen)
		len = sizeof(c->out) - c->outlen;
	if (len == 0)
		return NGHTTP2_ERR_WOULDBLOCK;
	memcpy(c->out + c->outlen, data, len);
	c->outlen += len;
	return (ssize_t)len;
}

static int
on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
	struct req *r;

	(void)ud;
	if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	r = calloc(1, sizeof(*r));
	if (r == NULL)
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	nghttp2_session_set_stream_user_data(s, f->hd.stream_id, r);
	return 0;
}

static int
on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len, void *ud)
{
	struct req *r = nghttp2_session_get_stream_user_data(s, id);

	(void)flags, (void)ud;
	if (r == NULL)
		return 0;
	if (len > BODY_MAX - r->len)
		len = BODY_MAX - r->len;
	memcpy(r->body + r->len, data, len);
	r->len += len;
	return 0;
}

static ssize_t
body_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
	  nghttp2_data_source *src, void *ud)
{
	struct req *r = src->ptr;
	size_t n = r->len - r->sent;

	(void)s, (void)id, (void)ud;
	if (n > len)
		n = len;
	memcpy(buf, r->body + r->sent, n);
	r->sent += n;
	if (r->sent == r->len)
		*flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)n;
}

#define NV(n, v, vl) { (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, (vl), NGHTTP2_NV_FLAG_NONE }

static int
on_frame(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
	struct req *r;

	(void)ud;
	if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) ||
	    !(f->hd.flags & NGHTTP2_FLAG_END_STREAM) ||
	    (r = nghttp2_session_get_stream_user_data(s, f->hd.stream_id)) == NULL)
		return 0;
	static const uint8_t a_rr[ANSWER_LEN] = {
		0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4, 192, 0, 2, 1,	/* A 192.0.2.1 */
	};
	uint8_t *b = r->body;

	if (r->len >= 3)
		b[2] |= 0x80;	/* QR */
	if (r->len >= 12 && (b[4] << 8 | b[5]) == 1 && (b[6] | b[7] | b[8] | b[9] | b[10] | b[11]) == 0) {
		b[7] = 1;	/* ANCOUNT */
		memcpy(b + r->len, a_rr, sizeof(a_rr));
		r->len += sizeof(a_rr);
	}
	nghttp2_nv nv[] = {
		NV(":status", "200", 3),
		NV("content-type", "application/dns-message", 23),
		NV("content-length", r->clen, (size_t)snprintf(r->clen, sizeof(r->clen), "%zu",
							       r->len)),
	};
	nghttp2_data_provider dp = { .source.ptr = r, .read_callback = body_read };

	return nghttp2_submit_response(s, f->hd.stream_id, nv, sizeof(nv) / sizeof(nv[0]), &dp) ==
	       0 ? 0 : NGHTTP2_ERR_CALLBACK_FAILURE;
}

static int
on_close(nghttp2_session *s, int32_t id, uint32_t err, void *ud)
{
	(void)err, (void)ud;
	free(nghttp2_session_get_stream_user_data(s, id));
	nghttp2_session_set_stream_user_data(s, id, NULL);
	return 0;
}

static int
select_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
	    unsigned int inlen, void *arg)
{
	static const unsigned char h2[] = "\x02h2";

	(void)ssl, (void)arg;
	return SSL_select_next_proto((unsigned char **)out, outlen, h2, sizeof(h2) - 1, in, inlen) ==
	       OPENSSL_NPN_NEGOTIATED ? SSL_TLSEXT_ERR_OK : SSL_TLSEXT_ERR_ALERT_FATAL;
}

/* ---- connections ------------------------------------------------------------------- */

/* Write what nghttp2 has for @c, OUT_MAX bytes a TLS write.  @return false if @c is gone. */
static bool
conn_flush(struct conn *c)
{
	do {
		if (nghttp2_session_send(c->h2) != 0) {
			floor_free(c);
			return false;
		}
		/* small, on a connection that just read: the socket takes it */
		if (c->outlen > 0 && SSL_write(c->fc.ssl, c->out, (int)c->outlen) <= 0) {
			ERR_clear_error();
			floor_free(c);
			return false;
		}
		c->outlen = 0;
	} while (nghttp2_session_want_write(c->h2));
	return true;
}

/* The handshake is done: the session, and the server's SETTINGS. */
static bool
conn_established(void *arg)
{
	static const nghttp2_settings_entry iv[] = {
		{ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100 },
	};
	struct conn *c = arg;

	if (nghttp2_session_server_new(&c->h2, cbs, c) != 0 ||
	    nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, 1) != 0) {
		floor_free(c);
		return false;
	}
	return conn_flush(c);
}

/* Feed nghttp2 what is read, and answer. */
static void
conn_step(void *arg)
{
	struct conn *c = arg;
	uint8_t in[16384];
	int r;

	for (;;) {
		r = SSL_read(c->fc.ssl, in, sizeof(in));
		if (r <= 0) {
			floor_wait(c, r);
			return;
		}
		if (nghttp2_session_mem_recv(c->h2, in, (size_t)r) < 0) {
			floor_free(c);
			return;
		}
		if (!conn_flush(c))
			return;
	}
}

static bool
ctx_setup(SSL_CTX *ctx)
{
	SSL_CTX_set_alpn_select_cb(ctx, select_alpn, NULL);
	if (nghttp2_session_callbacks_new(&cbs) != 0)
		return false;
	nghttp2_session_callbacks_set_send_callback(cbs, on_send);
	nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_close);
	return true;
}

int
main(int argc, char **argv)
{
	static const struct floor_ops ops = {
		.name = "dnslb-dohfloor", .conn_size = sizeof(struct conn), .ctx_setup = ctx_setup,
		.conn_established = conn_established, .conn_step = conn_step, .conn_drop = conn_drop,
	};

	return floor_run(argc, argv, &ops);
}
