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
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "floorsrv.h"

#define INBUF	1024	/* queries are small: a few in flight fit; small, so an idle connection is OpenSSL's own */

struct conn {
	struct floor_conn fc;	/* fd, ssl, established */
	size_t have;
	uint8_t in[INBUF];
};

/* Answer every complete query read. */
static void
conn_step(void *arg)
{
	struct conn *c = arg;
	int r;

	for (;;) {
		r = SSL_read(c->fc.ssl, c->in + c->have, (int)(sizeof(c->in) - c->have));
		if (r <= 0) {
			floor_wait(c, r);
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
		if (off > 0 && SSL_write(c->fc.ssl, c->in, (int)off) <= 0) {
			ERR_clear_error();
			floor_free(c);
			return;
		}
		memmove(c->in, c->in + off, c->have - off);
		c->have -= off;
		if (c->have == sizeof(c->in)) {
			floor_free(c);	/* a frame larger than any query */
			return;
		}
	}
}

int
main(int argc, char **argv)
{
	static const struct floor_ops ops = {
		.name = "dnslb-tlsfloor", .conn_size = sizeof(struct conn), .conn_step = conn_step,
	};

	return floor_run(argc, argv, &ops);
}
