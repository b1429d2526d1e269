/*
 * dnsframe.h - DNS messages over a byte stream (RFC 1035 §4.2.2, RFC 7766):
 * each message is preceded by its length in two octets.
 *
 * Receiving: a struct dlb_frame_rx is one bounded buffer that reads from a
 * stream (dnslb/core/stream.h) and hands out the complete messages it
 * holds, several per read when pipelined, reassembling the ones that come
 * in pieces. A message points into the buffer until the next
 * dlb_frame_rx_fill. Sending: dlb_frame_send writes the length and the
 * message with one writev, so the framing never touches a socket.
 *
 * Thread: the stream's.
 */
#ifndef DNSLB_DNSFRAME_H
#define DNSLB_DNSFRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct dlb_stream;

#define DLB_FRAME_MAX		(65535 + 2)	/* the longest frame: length and message */
/*
 * The buffer's first size: a query or two, which is what an idle or a
 * one-at-a-time connection ever holds (each idle connection keeps it). A
 * read that fills it doubles it before the next, up to DLB_FRAME_RX_BURST,
 * so that a pipelining client's bursts take as few reads as before; a frame
 * longer than the buffer grows it to the frame's need.
 */
#define DLB_FRAME_RX_INITIAL	512
#define DLB_FRAME_RX_BURST	4096

/** A receive buffer. Owner: the connection; dlb_frame_rx_free. */
struct dlb_frame_rx {
	uint8_t *buf;			/* NULL until the first fill */
	uint32_t cap, len;		/* bytes allocated, bytes held */
	uint32_t pos;			/* the next frame starts here */
	uint32_t max;			/* the longest frame taken (<= DLB_FRAME_MAX) */
	bool filled;			/* the last read filled the room */
};

/** An empty buffer taking frames up to @max bytes (length included; 0: DLB_FRAME_MAX). */
void dlb_frame_rx_init(struct dlb_frame_rx *rx, uint32_t max);
/** Free the buffer. Idempotent. */
void dlb_frame_rx_free(struct dlb_frame_rx *rx);

/**
 * Read once from @s into the room left (consumed frames are dropped first,
 * the buffer grows to hold the frame being received).
 * @return >0 bytes read, 0 the end of the stream, -1 with errno (EAGAIN:
 * nothing now), DLB_ESPACE: no room (frames not yet taken fill the
 * buffer: take them first), DLB_ENOMEM.
 */
ssize_t dlb_frame_rx_fill(struct dlb_frame_rx *rx, struct dlb_stream *s);

/**
 * The next complete message: *@msg, *@len (0 for a zero length prefix).
 * @return 1 a message (consumed), 0 none complete yet, DLB_ESPACE: the
 * length announced is over rx->max, DLB_ENOMEM: no memory to grow the
 * buffer for it.
 */
int dlb_frame_rx_next(struct dlb_frame_rx *rx, uint8_t **msg, size_t *len);

/** Part of a frame is held, not complete. */
bool dlb_frame_rx_partial(const struct dlb_frame_rx *rx);

/** The length announced by the next frame, or -1 if its two octets are not all here. */
static inline int
dlb_frame_rx_peek_len(const struct dlb_frame_rx *rx)
{
	return rx->len - rx->pos >= 2 ? (rx->buf[rx->pos] << 8) | rx->buf[rx->pos + 1] : -1;
}

/** Bytes held and not yet taken. */
static inline size_t
dlb_frame_rx_held(const struct dlb_frame_rx *rx)
{
	return rx->len - rx->pos;
}

/** Forget what is held (a connection that takes no more queries). */
static inline void
dlb_frame_rx_discard(struct dlb_frame_rx *rx)
{
	rx->pos = rx->len = 0;
}

/**
 * Send @msg (@len <= 65535) on @s, preceded by its length and by @pre
 * (@prelen bytes, a PROXY header; NULL: none), with one write
 * (dnslb/core/stream.h: dlb_stream_writev's returns).
 */
int dlb_frame_send(struct dlb_stream *s, const uint8_t *pre, size_t prelen, const uint8_t *msg,
		   size_t len);

#endif
