/*
 * doh_h2.h - the HTTP/2 server side of one DNS over HTTPS connection
 * (nghttp2), with no socket: bytes read from the connection go in with
 * dlb_doh_h2_feed, complete requests come out through a callback, answers
 * go in with dlb_doh_h2_respond, and the bytes to write come out of
 * dlb_doh_h2_send. The TLS stream of the DoH listener drives it; the unit
 * test drives it with an nghttp2 client in memory.
 *
 * Bounds (bad input): concurrent streams, the size of a request's header
 * list, the size of its body (a DNS message), SETTINGS and their ACKs
 * (nghttp2's flood protection), stream resets per second (the "rapid
 * reset" attack) and CONTINUATION frames. A stream over a bound is reset;
 * a connection that floods is ended with GOAWAY, and dlb_doh_h2_feed says
 * so.
 *
 * Thread: the owning worker.
 */
#ifndef DNSLB_DOH_H2_H
#define DNSLB_DOH_H2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dnslb/frontend/doh_req.h"

#define DLB_DOH_MAX_HEADERS	64	/* header fields kept per request */

struct dlb_doh_h2_limits {
	uint32_t max_streams;		/* concurrent streams (SETTINGS_MAX_CONCURRENT_STREAMS), default 100 */
	uint32_t max_header_list;	/* bytes of one request's header fields, default 16 KiB */
	uint32_t max_body;		/* bytes of a POST body, default 65535 */
	uint32_t max_resets_per_s;	/* stream resets a client may send per second, default 100 */
};

/* A complete request. Valid during the callback only. */
struct dlb_doh_request {
	int32_t stream_id;
	const char *method, *path, *scheme, *authority;	/* NUL-terminated; "" when absent */
	bool has_authority;		/* :authority, or HTTP/1's Host, was there (maybe empty) */
	size_t path_len;
	struct dlb_doh_header headers[DLB_DOH_MAX_HEADERS];	/* regular fields, lowercase names */
	size_t nheaders;
	const uint8_t *body;
	size_t body_len;
};

struct dlb_doh_h2_cb {
	/* a request is complete: answer it now or later with dlb_doh_h2_respond */
	void (*request)(void *ud, const struct dlb_doh_request *rq);
	/* a stream went away before its answer (reset by the client, or the
	 * connection ended): an answer that comes later is dropped */
	void (*gone)(void *ud, int32_t stream_id);
};

struct dlb_doh_h2;

void dlb_doh_h2_limits_default(struct dlb_doh_h2_limits *l);

/** A server session; the connection preface and SETTINGS are queued at
 * once (dlb_doh_h2_send). @return NULL when out of memory. */
struct dlb_doh_h2 *dlb_doh_h2_new(const struct dlb_doh_h2_limits *l, const struct dlb_doh_h2_cb *cb,
				  void *ud);
void dlb_doh_h2_free(struct dlb_doh_h2 *h);

/**
 * Bytes read from the client. Complete requests are handed to the
 * callback from here. @return 0, or -1 when the connection must end (a
 * protocol error or a flood: what is left to send, a GOAWAY, should still
 * be sent).
 */
int dlb_doh_h2_feed(struct dlb_doh_h2 *h, const uint8_t *in, size_t len);

/**
 * Answer stream @stream_id: @status, the header fields @hdrs (@nh; names
 * lowercase), then @body (@len bytes, copied). content-length is added.
 * @return 0, or -1 when the stream is gone (the answer is dropped).
 */
int dlb_doh_h2_respond(struct dlb_doh_h2 *h, int32_t stream_id, int status,
		       const struct dlb_doh_header *hdrs, size_t nh, const uint8_t *body, size_t len);

/** Copy up to @cap bytes to send into @out. @return the count (0: nothing
 * to send now), or -1 on a fatal error. */
ssize_t dlb_doh_h2_send(struct dlb_doh_h2 *h, uint8_t *out, size_t cap);

/** Nothing more will be read or written: the connection may close once
 * dlb_doh_h2_send gives 0. */
bool dlb_doh_h2_done(const struct dlb_doh_h2 *h);

/** Streams open now (requests not yet answered included). */
size_t dlb_doh_h2_streams(const struct dlb_doh_h2 *h);

#endif
