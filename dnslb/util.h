/*
 * util.h - small helpers: random numbers, monotonic time.
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

#endif
