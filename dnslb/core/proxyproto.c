/*
 * proxyproto.c - PROXY protocol v2 (haproxy's proxy-protocol.txt §2.2).
 */
#include "dnslb/core/proxyproto.h"

#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

static const uint8_t pp2_sig[12] = { 0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d,
				     0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a };

size_t
dlb_pp2_local(uint8_t *out)
{
	memcpy(out, pp2_sig, sizeof(pp2_sig));
	out[12] = 0x20;		/* version 2, LOCAL */
	out[13] = 0x00;		/* UNSPEC */
	out[14] = 0;
	out[15] = 0;
	return 16;
}

size_t
dlb_pp2_build(uint8_t *out, bool tcp, const struct sockaddr *src, const struct sockaddr *dst)
{
	uint8_t *p = out + 16;
	size_t alen;

	if (src->sa_family != dst->sa_family ||
	    (src->sa_family != AF_INET && src->sa_family != AF_INET6))
		return dlb_pp2_local(out);
	memcpy(out, pp2_sig, sizeof(pp2_sig));
	out[12] = 0x21;		/* version 2, PROXY */
	if (src->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)src, *d = (const void *)dst;

		out[13] = tcp ? 0x11 : 0x12;
		memcpy(p, &s->sin_addr, 4);
		memcpy(p + 4, &d->sin_addr, 4);
		memcpy(p + 8, &s->sin_port, 2);
		memcpy(p + 10, &d->sin_port, 2);
		alen = 12;
	} else {
		const struct sockaddr_in6 *s = (const void *)src, *d = (const void *)dst;

		out[13] = tcp ? 0x21 : 0x22;
		memcpy(p, &s->sin6_addr, 16);
		memcpy(p + 16, &d->sin6_addr, 16);
		memcpy(p + 32, &s->sin6_port, 2);
		memcpy(p + 34, &d->sin6_port, 2);
		alen = 36;
	}
	out[14] = 0;
	out[15] = (uint8_t)alen;
	return 16 + alen;
}
