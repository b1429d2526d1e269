/*
 * dnsframe.c - DNS messages over a byte stream (dnslb/core/dnsframe.h).
 */
#include "dnslb/core/dnsframe.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "dnslb/core/dnslb.h"
#include "dnslb/core/stream.h"
#include "dnslb/core/wire.h"

void
dlb_frame_rx_init(struct dlb_frame_rx *rx, uint32_t max)
{
	memset(rx, 0, sizeof(*rx));
	rx->max = max > 0 && max < DLB_FRAME_MAX ? max : DLB_FRAME_MAX;
}

void
dlb_frame_rx_free(struct dlb_frame_rx *rx)
{
	free(rx->buf);
	rx->buf = NULL;
	rx->cap = rx->len = rx->pos = 0;
}

/* Room for @need bytes from rx->pos: move the held bytes to the start, grow. */
static int
rx_reserve(struct dlb_frame_rx *rx, size_t need)
{
	uint8_t *nb;

	if (rx->pos + need <= rx->cap)
		return DLB_OK;
	if (rx->pos > 0) {
		memmove(rx->buf, rx->buf + rx->pos, rx->len - rx->pos);
		rx->len -= rx->pos;
		rx->pos = 0;
	}
	if (need <= rx->cap)
		return DLB_OK;
	nb = realloc(rx->buf, need);
	if (nb == NULL)
		return DLB_ENOMEM;
	rx->buf = nb;
	rx->cap = (uint32_t)need;
	return DLB_OK;
}

ssize_t
dlb_frame_rx_fill(struct dlb_frame_rx *rx, struct dlb_stream *s)
{
	ssize_t n;

	if (rx->buf == NULL) {
		uint32_t first = rx->max < DLB_FRAME_RX_INITIAL ? rx->max : DLB_FRAME_RX_INITIAL;

		rx->buf = malloc(first);
		if (rx->buf == NULL)
			return DLB_ENOMEM;
		rx->cap = first;
	}
	if (rx->pos > 0 && rx->pos == rx->len)
		rx->pos = rx->len = 0;
	if (rx->filled && rx->cap < DLB_FRAME_RX_BURST && rx->cap < rx->max) {
		/* a burst: read more at a time (a failed growth only reads less) */
		uint32_t cap = rx->cap * 2 < DLB_FRAME_RX_BURST ? rx->cap * 2 : DLB_FRAME_RX_BURST;

		(void)rx_reserve(rx, cap < rx->max ? cap : rx->max);
	}
	rx->filled = false;
	if (rx->len == rx->cap) {
		/* keep the frames not yet taken at the start of the buffer */
		memmove(rx->buf, rx->buf + rx->pos, rx->len - rx->pos);
		rx->len -= rx->pos;
		rx->pos = 0;
		if (rx->len == rx->cap)
			return DLB_ESPACE;
	}
	n = dlb_stream_read(s, rx->buf + rx->len, rx->cap - rx->len);
	if (n > 0) {
		rx->filled = (uint32_t)n == rx->cap - rx->len;
		rx->len += (uint32_t)n;
	}
	return n;
}

int
dlb_frame_rx_next(struct dlb_frame_rx *rx, uint8_t **msg, size_t *len)
{
	size_t avail = rx->len - rx->pos;
	size_t flen;

	if (avail < 2)
		return 0;
	flen = dlb_rd16(rx->buf + rx->pos);
	if (flen + 2 > rx->max)
		return DLB_ESPACE;
	if (avail < flen + 2) {
		/* make room for the rest of it now, so the next fill can take it */
		int rc = rx_reserve(rx, flen + 2);

		return rc == DLB_OK ? 0 : rc;
	}
	*msg = rx->buf + rx->pos + 2;
	*len = flen;
	rx->pos += (uint32_t)(flen + 2);
	return 1;
}

bool
dlb_frame_rx_partial(const struct dlb_frame_rx *rx)
{
	size_t avail = rx->len - rx->pos;

	return avail > 0 && (avail < 2 || avail < (size_t)dlb_rd16(rx->buf + rx->pos) + 2);
}

int
dlb_frame_send(struct dlb_stream *s, const uint8_t *pre, size_t prelen, const uint8_t *msg,
	       size_t len)
{
	uint8_t hdr[2];
	struct iovec iov[3];
	int n = 0;

	dlb_wr16(hdr, (uint16_t)len);
	if (prelen > 0) {
		iov[n].iov_base = (void *)(uintptr_t)pre;
		iov[n++].iov_len = prelen;
	}
	iov[n].iov_base = hdr;
	iov[n++].iov_len = 2;
	iov[n].iov_base = (void *)(uintptr_t)msg;
	iov[n++].iov_len = len;
	return dlb_stream_writev(s, iov, n);
}
