/*
 * doh_h1.h - the HTTP/1.1 server side of one DNS over HTTPS connection,
 * with no socket, answering as dnsdist 1.7 (h2o) answers: bytes in with
 * dlb_doh_h1_feed, one complete request at a time out through the same
 * callbacks as HTTP/2 (doh_h2.h), the answer in with dlb_doh_h1_respond,
 * bytes out with dlb_doh_h1_send. A connection speaks HTTP/1.1 when TLS
 * negotiated "http/1.1" (or nothing), or when a plain connection does not
 * begin with HTTP/2's preface (dlb_doh_h1_is_h2_preface).
 *
 * Requests are taken in order, one at a time: the next one of a pipeline is
 * read only once the current one is answered (while one is pending the
 * caller may stop reading: dlb_doh_h1_busy). Bodies come with
 * Content-Length or chunked. Bounds: the request line and fields
 * (max_header_list), the body (max_body: 413), the bytes buffered; a
 * request that cannot be parsed gets h2o's fixed 400 and the connection
 * closes.
 *
 * Thread: the owning worker.
 */
#ifndef DNSLB_DOH_H1_H
#define DNSLB_DOH_H1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dnslb/frontend/doh_h2.h"

struct dlb_doh_h1;

/** Does @p (@len bytes, maybe fewer than the preface) begin as HTTP/2's
 * connection preface? With fewer bytes: as far as they go. */
bool dlb_doh_h1_is_h2_preface(const uint8_t *p, size_t len);

/** A session on @l's bounds reporting to @cb. NULL when out of memory. */
struct dlb_doh_h1 *dlb_doh_h1_new(const struct dlb_doh_h2_limits *l, const struct dlb_doh_h2_cb *cb,
				  void *ud);
void dlb_doh_h1_free(struct dlb_doh_h1 *h);

/** Bytes read from the client; the next request is handed to the callback
 * when complete. @return 0, or -1 when the connection must end after what
 * is left to send (a 400 for a request that cannot be parsed, too many
 * bytes buffered). */
int dlb_doh_h1_feed(struct dlb_doh_h1 *h, const uint8_t *in, size_t len);

/**
 * Answer the current request (@id from the callback): @status with the
 * reason phrase @reason (NULL: the usual one), the header fields @hdrs
 * (lowercase; "server" and "date" go where h2o writes them), @body. A
 * pipelined request waiting behind it is then handed on. @return 0, or -1
 * when @id is not the current request.
 */
int dlb_doh_h1_respond(struct dlb_doh_h1 *h, int32_t id, int status, const char *reason,
		       const struct dlb_doh_header *hdrs, size_t nh, const uint8_t *body, size_t len);

/** Copy up to @cap bytes to send into @out. @return the count. */
size_t dlb_doh_h1_send(struct dlb_doh_h1 *h, uint8_t *out, size_t cap);

/** A request is waiting for its answer. */
bool dlb_doh_h1_busy(const struct dlb_doh_h1 *h);

/** The connection is to close once dlb_doh_h1_send gives 0. */
bool dlb_doh_h1_done(const struct dlb_doh_h1 *h);

/** The reason phrase h2o gives @status ("OK", "Not Found", ...; "Unknown"). */
const char *dlb_doh_reason(int status);

#endif
