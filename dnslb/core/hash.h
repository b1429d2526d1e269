/*
 * hash.h - the hash functions of dnslb's tables, in one place.
 *
 *   dlb_fmix64          MurmurHash3's 64-bit finalizer: a bijection with good
 *                       avalanche, for keys that are already words
 *   dlb_hash_key128     a keyed hash of a two-word key (client subnets: the
 *                       addresses are attacker-chosen, so the seeds are secret)
 *   dlb_hash_bytes      XXH3 of a byte string with a seed (libxxhash)
 *   dlb_fnv1a32/64      FNV-1a: stable across restarts and machines, for the
 *                       few places where a hash is seen outside the process
 *                       or where the table is tiny and the input trusted
 *
 * The per-query name and cache-key hashes (wire.c, cache.c) inline XXH3
 * themselves (XXH_INLINE_ALL) and do not go through here.
 *
 * Thread: any (pure functions).
 */
#ifndef DNSLB_CORE_HASH_H
#define DNSLB_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <xxhash.h>

#define DLB_FNV1A32_INIT	2166136261u
#define DLB_FNV1A64_INIT	14695981039346656037ULL

/** MurmurHash3's 64-bit finalizer: a bijection with good avalanche (hash tables). */
static inline uint64_t
dlb_fmix64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ULL;
	k ^= k >> 33;
	return k;
}

/** A keyed hash of the key (@k0, @k1) with the secret seeds @s0, @s1. */
static inline uint64_t
dlb_hash_key128(uint64_t k0, uint64_t k1, uint64_t s0, uint64_t s1)
{
	return dlb_fmix64(k0 ^ s0) ^ dlb_fmix64(k1 ^ s1);
}

/** XXH3 (64 bits) of @n bytes at @p with @seed. */
static inline uint64_t
dlb_hash_bytes(const void *p, size_t n, uint64_t seed)
{
	return XXH3_64bits_withSeed(p, n, seed);
}

/** FNV-1a (32 bits) of @n bytes at @p, continuing from @h (DLB_FNV1A32_INIT to start). */
static inline uint32_t
dlb_fnv1a32(const void *p, size_t n, uint32_t h)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 16777619u;
	return h;
}

/** FNV-1a (64 bits) of @n bytes at @p, continuing from @h (DLB_FNV1A64_INIT to start). */
static inline uint64_t
dlb_fnv1a64(const void *p, size_t n, uint64_t h)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ULL;
	return h;
}

/** FNV-1a (64 bits) of the NUL-terminated @s, continuing from @h. */
static inline uint64_t
dlb_fnv1a64_str(const char *s, uint64_t h)
{
	for (; *s != '\0'; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ULL;
	return h;
}

#endif
