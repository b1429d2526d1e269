/*
 * util.h - small helpers: random numbers, monotonic time, large tables.
 */
#ifndef DNSLB_UTIL_H
#define DNSLB_UTIL_H

#include <stdint.h>
#include <stddef.h>

/*
 * Per-thread random generator: a ChaCha20 keystream (libsodium) seeded from
 * the kernel once, refilled in blocks, so drawing a query ID costs no syscall.
 * Thread: the owner only.
 */
struct dlb_rng {
	uint8_t buf[512];
	size_t pos;
	uint8_t key[32];
	uint64_t nonce;
};

/** The value of hexadecimal digit @c (either case), or -1. */
static inline int
dlb_hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/** The least power of two >= @v, at most 2^30 (table sizes). */
static inline uint32_t
dlb_pow2_at_least(uint64_t v)
{
	uint32_t p = 1;

	while (p < v && p < (1u << 30))
		p <<= 1;
	return p;
}

void dlb_rng_init(struct dlb_rng *r);
uint32_t dlb_rng_u32(struct dlb_rng *r);
/** Uniform in [0, n), n > 0. */
uint32_t dlb_rng_uniform(struct dlb_rng *r, uint32_t n);
void dlb_rng_bytes(struct dlb_rng *r, void *out, size_t len);

/**
 * A random (version 4, RFC 4122 variant) UUID in its 36-character text form
 * into @out (>= 37 bytes). libsodium must be initialised (sodium_init).
 */
void dlb_uuid_v4(char *out, size_t outsz);

/** Monotonic time in seconds (CLOCK_MONOTONIC). */
double dlb_now(void);

/* Tables of DLB_TABLE_HUGE bytes or more get transparent huge pages. */
#define DLB_TABLE_HUGE ((size_t)2 << 20)

/**
 * Zero-filled anonymous memory for a large table read at random places, such
 * as the packet cache's slots. From DLB_TABLE_HUGE bytes on, the mapping is
 * aligned to DLB_TABLE_HUGE, rounded up to a multiple of it and advised for
 * transparent huge pages (MADV_HUGEPAGE, honoured when the kernel's THP
 * mode is "always" or "madvise"): a lookup anywhere in the table then needs
 * one TLB entry per 2 MiB instead of one per 4 KiB page. Smaller tables get
 * plain pages. Returns NULL if the memory cannot be mapped; free with
 * dlb_table_free and the same @size.
 */
void *dlb_table_alloc(size_t size);
void dlb_table_free(void *p, size_t size);

#endif
