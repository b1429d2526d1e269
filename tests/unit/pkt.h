/*
 * pkt.h - a small DNS message builder for the unit tests (test_wire.c,
 * test_cache.c, test_rules.c, test_rules_wire.c): header, names, questions,
 * records and OPT, written byte by byte so that every test states exactly
 * what it sends. A write past the buffer fails the test.
 *
 * Header-only (static inline): a test may size the buffer by defining PB_MAX
 * before including this file (its capacity is part of some tests), and one
 * that defines PB_TRACK_TTLS gets the offset and value of every TTL field
 * written (OPT's excepted) in ttl_off[]/ttl_val[]/nttl, reset by pb_hdr().
 *
 * Include after <cmocka.h>'s prerequisites; it includes them itself too.
 */
#ifndef DNSLB_TESTS_UNIT_PKT_H
#define DNSLB_TESTS_UNIT_PKT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "dnslb/core/wire.h"

#ifndef PB_MAX
#define PB_MAX	4096
#endif

#define PB_TTLS	64	/* TTL fields remembered with PB_TRACK_TTLS */

/* A message under construction: b[0..n). */
struct pb {
	uint8_t b[PB_MAX];
	size_t n;
#ifdef PB_TRACK_TTLS
	size_t ttl_off[PB_TTLS];
	uint32_t ttl_val[PB_TTLS];
	int nttl;
#endif
};

static inline void
pb_bytes(struct pb *p, const void *d, size_t n)
{
	assert_true(p->n + n <= PB_MAX);
	memcpy(p->b + p->n, d, n);
	p->n += n;
}

static inline void
pb_u8(struct pb *p, uint8_t v)
{
	pb_bytes(p, &v, 1);
}

static inline void
pb_u16(struct pb *p, uint16_t v)
{
	uint8_t b[2];

	dlb_wr16(b, v);
	pb_bytes(p, b, 2);
}

static inline void
pb_u32(struct pb *p, uint32_t v)
{
	uint8_t b[4];

	dlb_wr32(b, v);
	pb_bytes(p, b, 4);
}

/* A TTL field (remembered with PB_TRACK_TTLS). */
static inline void
pb_ttl(struct pb *p, uint32_t ttl)
{
#ifdef PB_TRACK_TTLS
	assert_true(p->nttl < PB_TTLS);
	p->ttl_off[p->nttl] = p->n;
	p->ttl_val[p->nttl++] = ttl;
#endif
	pb_u32(p, ttl);
}

/*
 * "www.example.com" (no escapes) as uncompressed wire labels, ending with the
 * root, or with a compression pointer to @ptr when @ptr >= 0. "" or "." is
 * the root.
 */
static inline void
pb_labels(struct pb *p, const char *text, int ptr)
{
	const char *s = text;

	while (*s != '\0' && strcmp(s, ".") != 0) {
		const char *dot = strchr(s, '.');
		size_t l = dot != NULL ? (size_t)(dot - s) : strlen(s);

		pb_u8(p, (uint8_t)l);
		pb_bytes(p, s, l);
		s += l;
		if (*s == '.')
			s++;
	}
	if (ptr >= 0)
		pb_u16(p, (uint16_t)(0xc000 | ptr));
	else
		pb_u8(p, 0);
}

/* A whole uncompressed name. */
static inline void
pb_name(struct pb *p, const char *text)
{
	pb_labels(p, text, -1);
}

/* A compression pointer to offset @target. */
static inline void
pb_ptr(struct pb *p, uint16_t target)
{
	pb_u16(p, (uint16_t)(0xc000 | target));
}

/* Start the message over with a header. */
static inline void
pb_hdr(struct pb *p, uint16_t id, uint16_t flags, uint16_t qd, uint16_t an, uint16_t ns,
       uint16_t ar)
{
	p->n = 0;
#ifdef PB_TRACK_TTLS
	p->nttl = 0;
#endif
	pb_u16(p, id);
	pb_u16(p, flags);
	pb_u16(p, qd);
	pb_u16(p, an);
	pb_u16(p, ns);
	pb_u16(p, ar);
}

static inline void
pb_question(struct pb *p, const char *name, uint16_t qtype, uint16_t qclass)
{
	pb_name(p, name);
	pb_u16(p, qtype);
	pb_u16(p, qclass);
}

/* A record's fixed part and RDATA, after an owner name the caller wrote. */
static inline void
pb_rr_tail(struct pb *p, uint16_t type, uint16_t class, uint32_t ttl, const void *rdata,
	   uint16_t rdlen)
{
	pb_u16(p, type);
	pb_u16(p, class);
	if (type == DLB_TYPE_OPT)
		pb_u32(p, ttl);		/* extended rcode, version, flags: not a TTL */
	else
		pb_ttl(p, ttl);
	pb_u16(p, rdlen);
	if (rdlen > 0)
		pb_bytes(p, rdata, rdlen);
}

/* A class IN record owned by the name at offset @owner (a compression pointer). */
static inline void
pb_rr_at(struct pb *p, uint16_t owner, uint16_t type, uint32_t ttl, const void *rdata,
	 uint16_t rdlen)
{
	pb_ptr(p, owner);
	pb_rr_tail(p, type, 1, ttl, rdata, rdlen);
}

/*
 * A class IN record whose RDATA the caller writes next: type, class, TTL and
 * an RDLENGTH that pb_rr_end() patches. @return the RDLENGTH offset.
 */
static inline size_t
pb_rr_start(struct pb *p, uint16_t type, uint32_t ttl)
{
	pb_u16(p, type);
	pb_u16(p, 1);
	pb_ttl(p, ttl);
	pb_u16(p, 0);
	return p->n - 2;
}

static inline void
pb_rr_end(struct pb *p, size_t rdlen_at)
{
	dlb_wr16(p->b + rdlen_at, (uint16_t)(p->n - rdlen_at - 2));
}

/* An OPT RR: payload size @udp, @ttl (extended rcode, version, DO: 0x8000), options. */
static inline void
pb_opt(struct pb *p, uint16_t udp, uint32_t ttl, const void *rdata, uint16_t rdlen)
{
	pb_u8(p, 0);
	pb_rr_tail(p, DLB_TYPE_OPT, udp, ttl, rdata, rdlen);
}

#endif
