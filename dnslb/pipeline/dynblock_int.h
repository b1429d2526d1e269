/*
 * dynblock_int.h - what dnslb/pipeline/dynblock.c (the store and the query path) and
 * dnslb/pipeline/dyntrack.c (the per-worker tracking and the rule groups) share.
 * Not for other modules: they use dnslb/pipeline/dynblock.h.
 */
#ifndef DNSLB_DYNBLOCK_INT_H
#define DNSLB_DYNBLOCK_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

#include "dnslb/pipeline/dynblock.h"
#include "dnslb/core/hash.h"
#include "dnslb/core/netmask.h"

/* Process-wide random seed of every dynamic-block hash (set once, at the first block or tracking). */
extern uint64_t dlb_dyn_seed;
void dlb_dyn_seed_init(void);

static inline uint64_t dlb_dyn_hash_words(uint8_t family, uint8_t bits, uint64_t hi,
					  uint64_t lo);
static inline void dlb_dyn_words(const uint8_t addr[16], uint64_t *hi, uint64_t *lo);

/* Hash of (family, bits, 16 address bytes, host bits zero). */
static inline uint64_t
dlb_dyn_hash_addr(uint8_t family, uint8_t bits, const uint8_t addr[16])
{
	uint64_t hi, lo;

	dlb_dyn_words(addr, &hi, &lo);
	return dlb_dyn_hash_words(family, bits, hi, lo);
}

/* Hash of a lowercase wire name (FNV-1a over 8-byte words, then mixed). */
static inline uint64_t
dlb_dyn_hash_name(const uint8_t *p, size_t len)
{
	uint64_t h = dlb_dyn_seed ^ len;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t v;

		__builtin_memcpy(&v, p + i, 8);
		h = (h ^ v) * 0x100000001b3ULL;
		h ^= h >> 29;
	}
	for (; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ULL;
	return dlb_fmix64(h);
}

/* An address (16 bytes, network order) as two host-order words, and back. */
static inline void
dlb_dyn_words(const uint8_t addr[16], uint64_t *hi, uint64_t *lo)
{
	__builtin_memcpy(hi, addr, 8);
	__builtin_memcpy(lo, addr + 8, 8);
	*hi = __builtin_bswap64(*hi);
	*lo = __builtin_bswap64(*lo);
}

/* Keep the first @bits bits of the address in (@hi, @lo). */
static inline void
dlb_dyn_mask_words(uint64_t *hi, uint64_t *lo, unsigned bits)
{
	if (bits >= 128)
		return;
	if (bits >= 64) {
		*lo &= bits == 64 ? 0 : ~0ULL << (128 - bits);
		return;
	}
	*lo = 0;
	*hi &= bits == 0 ? 0 : ~0ULL << (64 - bits);
}

/* Hash of (family, bits, masked address as words): what the store's tables use. */
static inline uint64_t
dlb_dyn_hash_words(uint8_t family, uint8_t bits, uint64_t hi, uint64_t lo)
{
	return dlb_fmix64(dlb_fmix64(hi ^ dlb_dyn_seed ^ ((uint64_t)bits << 8 | family)) ^ lo);
}

/* The address bytes of @sa into @addr (16 bytes, zero padded). */
static inline bool
dlb_dyn_addr_of(const struct sockaddr *sa, uint8_t *family, uint8_t addr[16])
{
	__builtin_memset(addr, 0, 16);
	if (sa->sa_family == AF_INET) {
		__builtin_memcpy(addr, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
		*family = AF_INET;
		return true;
	}
	if (sa->sa_family == AF_INET6) {
		__builtin_memcpy(addr, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr,
				 16);
		*family = AF_INET6;
		return true;
	}
	return false;
}

/* The port of @sa (host order); 0 when not IPv4: dnsdist's port ranges are IPv4's only. */
static inline uint16_t
dlb_dyn_port_of(const struct sockaddr *sa)
{
	if (sa->sa_family != AF_INET)
		return 0;
	return __builtin_bswap16(((const struct sockaddr_in *)(const void *)sa)->sin_port);
}

/* The first port of @port's range of @pbits bits. */
static inline uint16_t
dlb_dyn_port_mask(uint16_t port, unsigned pbits)
{
	return pbits == 0 ? 0 : pbits >= 16 ? port : (uint16_t)(port & ~(0xffffu >> pbits));
}

/* Hash of a port range of an address whose (full-length) key hashes to @h. */
static inline uint64_t
dlb_dyn_hash_port(uint64_t h, uint16_t port, unsigned pbits)
{
	return pbits == 0 ? h : dlb_fmix64(h ^ ((uint64_t)pbits << 16 | port));
}

static inline void
dlb_dyn_mask(uint8_t addr[16], unsigned bits)
{
	for (unsigned i = 0; i < 16; i++) {
		if (bits >= 8) {
			bits -= 8;
			continue;
		}
		addr[i] &= (uint8_t)(0xff00u >> bits);
		bits = 0;
	}
}

/* ---- per-worker tracking (dyntrack.c) ---- */

struct dlb_dyn_worker;

/* Thread: worker. */
void dlb_dyn_track_query(struct dlb_dyn_worker *dw, const struct sockaddr *client,
			 const uint8_t *qname, size_t qlen, uint16_t qtype);
void dlb_dyn_track_answer(struct dlb_dyn_worker *dw, const struct sockaddr *client,
			  const uint8_t *qname, size_t qlen, unsigned rcode, size_t len,
			  enum dlb_dyn_from from);

/* Thread: main. The tracking's once-a-second step (harvest, flip, forget). */
void dlb_dyn_track_tick(struct dlb_worker *const *ws, int n, double now);
void dlb_dyn_track_reset(void);

#endif
