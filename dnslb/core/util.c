/*
 * util.c - random numbers, time and error strings.
 */
#include "dnslb/core/util.h"

#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "dnslb/core/dnslb.h"

void
dlb_rng_init(struct dlb_rng *r)
{
	if (sodium_init() < 0)
		randombytes_buf(r->key, sizeof(r->key)); /* unreachable on Linux */
	randombytes_buf(r->key, sizeof(r->key));
	r->nonce = 0;
	r->pos = sizeof(r->buf);
}

static void
rng_refill(struct dlb_rng *r)
{
	uint8_t nonce[crypto_stream_chacha20_NONCEBYTES] = { 0 };

	memcpy(nonce, &r->nonce, sizeof(r->nonce) < sizeof(nonce) ? sizeof(r->nonce) : sizeof(nonce));
	r->nonce++;
	crypto_stream_chacha20(r->buf, sizeof(r->buf), nonce, r->key);
	r->pos = 0;
}

void
dlb_rng_bytes(struct dlb_rng *r, void *out, size_t len)
{
	uint8_t *o = out;

	while (len > 0) {
		size_t n;

		if (r->pos == sizeof(r->buf))
			rng_refill(r);
		n = sizeof(r->buf) - r->pos;
		if (n > len)
			n = len;
		memcpy(o, r->buf + r->pos, n);
		r->pos += n;
		o += n;
		len -= n;
	}
}

uint32_t
dlb_rng_u32(struct dlb_rng *r)
{
	uint32_t v;

	dlb_rng_bytes(r, &v, sizeof(v));
	return v;
}

uint32_t
dlb_rng_uniform(struct dlb_rng *r, uint32_t n)
{
	/* Lemire's multiply-shift with rejection: unbiased. */
	uint64_t m = (uint64_t)dlb_rng_u32(r) * n;
	uint32_t l = (uint32_t)m;

	if (l < n) {
		uint32_t t = -n % n;

		while (l < t) {
			m = (uint64_t)dlb_rng_u32(r) * n;
			l = (uint32_t)m;
		}
	}
	return (uint32_t)(m >> 32);
}

double
dlb_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void
dlb_uuid_v4(char *out, size_t outsz)
{
	uint8_t u[16];

	randombytes_buf(u, sizeof(u));
	u[6] = (uint8_t)((u[6] & 0x0f) | 0x40);
	u[8] = (uint8_t)((u[8] & 0x3f) | 0x80);
	snprintf(out, outsz,
		 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11],
		 u[12], u[13], u[14], u[15]);
}

/* The bytes dlb_table_alloc maps for a table of @size. */
static size_t
table_len(size_t size)
{
	size_t unit = size >= DLB_TABLE_HUGE ? DLB_TABLE_HUGE : 4096;

	return size > SIZE_MAX - unit ? 0 : (size + unit - 1) & ~(unit - 1);
}

void *
dlb_table_alloc(size_t size)
{
	size_t len = table_len(size);
	uint8_t *m, *a;

	if (len == 0)
		return NULL;
	if (len < DLB_TABLE_HUGE) {
		m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		return m == MAP_FAILED ? NULL : m;
	}
	/* map one huge page more, then trim it to an aligned start */
	if (len > SIZE_MAX - DLB_TABLE_HUGE)
		return NULL;
	m = mmap(NULL, len + DLB_TABLE_HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	a = (uint8_t *)(((uintptr_t)m + DLB_TABLE_HUGE - 1) & ~(uintptr_t)(DLB_TABLE_HUGE - 1));
	/* a is less than a huge page past m: the tail is never empty, the
	 * head is when m was aligned already */
	if (a > m)
		munmap(m, (size_t)(a - m));
	munmap(a + len, (size_t)(m + DLB_TABLE_HUGE - a));
	/* only advice: without THP (or with it off) the table has plain pages */
	(void)madvise(a, len, MADV_HUGEPAGE);
	return a;
}

void
dlb_table_free(void *p, size_t size)
{
	if (p != NULL)
		munmap(p, table_len(size));
}

const char *
dlb_strerror(int err)
{
	switch (err) {
	case DLB_OK:
		return "success";
	case DLB_EMALF:
		return "malformed DNS message";
	case DLB_ETRUNC:
		return "truncated DNS message";
	case DLB_ESPACE:
		return "no space left in the output buffer";
	case DLB_EEMPTY:
		return "no question";
	case DLB_EFULL:
		return "table full";
	case DLB_ENOTQUERY:
		return "not a query";
	default:
		return err < 0 && err > -1000 ? strerror(-err) : "unknown error";
	}
}
