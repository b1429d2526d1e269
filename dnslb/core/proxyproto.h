/*
 * proxyproto.h - PROXY protocol version 2 headers towards backends
 * (useProxyProtocol), so a backend sees the real client address.
 *
 * Thread: any; pure functions over caller-owned buffers.
 */
#ifndef DNSLB_PROXYPROTO_H
#define DNSLB_PROXYPROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sockaddr;

#define DLB_PP2_MAX	(16 + 36)	/* signature, header, two IPv6 addresses and ports */

/**
 * A PROXY v2 header for a connection or datagram from @src to @dst (same
 * family), over TCP or UDP. A mismatch of families gives a LOCAL header.
 * @return its length (at most DLB_PP2_MAX).
 */
size_t dlb_pp2_build(uint8_t *out, bool tcp, const struct sockaddr *src,
		     const struct sockaddr *dst);

/** A LOCAL header (health checks, dnslb's own queries). @return its length, 16. */
size_t dlb_pp2_local(uint8_t *out);

#endif
