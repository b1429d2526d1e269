/*
 * wire.h - the one DNS wire-format parser and the builders of local answers.
 *
 * Every part of dnslb that looks inside a DNS message goes through here, so
 * the rule engine, the cache and the forwarder agree on what a packet says
 * (bad-inputs §3.1.1, CVE-2018-14663). Parsing is one pass, allocates nothing
 * and is bounded: labels <= 63 octets, names <= 255 octets, compression
 * pointers bounded per name (DLB_WIRE_MAX_HOPS) and per message
 * (DLB_WIRE_MAX_WORK label visits).
 *
 * Thread: any; all functions are pure over caller-owned buffers.
 */
#ifndef DNSLB_WIRE_H
#define DNSLB_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include "dnslb/core/dnslb.h"

struct sockaddr;

#define DLB_DNS_HDR		12
#define DLB_WIRE_MAX_HOPS	127	/* compression pointers followed per name */
#define DLB_WIRE_MAX_WORK	4096	/* labels + pointers visited per message */
#define DLB_WIRE_NAME_TEXT_MAX	1005	/* name_to_text() worst case, incl. NUL */

/* header flag bits, host order of the 16-bit flags word */
#define DLB_F_QR	0x8000
#define DLB_F_AA	0x0400
#define DLB_F_TC	0x0200
#define DLB_F_RD	0x0100
#define DLB_F_RA	0x0080
#define DLB_F_AD	0x0020
#define DLB_F_CD	0x0010
#define DLB_OPCODE(f)	(((f) >> 11) & 0xf)
#define DLB_RCODE(f)	((f) & 0xf)

enum dlb_rcode {
	DLB_RCODE_NOERROR = 0,
	DLB_RCODE_FORMERR = 1,
	DLB_RCODE_SERVFAIL = 2,
	DLB_RCODE_NXDOMAIN = 3,
	DLB_RCODE_NOTIMP = 4,
	DLB_RCODE_REFUSED = 5,
};

#define DLB_TYPE_OPT	41
#define DLB_TYPE_SOA	6
#define DLB_TYPE_IXFR	251
#define DLB_TYPE_AXFR	252
#define DLB_EDNS_OPT_ECS	8
#define DLB_EDNS_OPT_COOKIE	10
#define DLB_EDNS_OPT_PADDING	12

/*
 * What a parse of one message found. Offsets are from the start of the message.
 * Only the first question is described; qdcount may be larger (such queries are
 * forwarded but never cached).
 */
struct dlb_dnsmsg {
	uint16_t id;
	uint16_t flags;
	uint16_t qdcount, ancount, nscount, arcount;

	/* first question, present when qdcount >= 1 (its name is the last
	 * field: a query's fields and the start of its name share a line) */
	uint16_t qname_off;		/* offset of the qname's first length octet */
	uint16_t qname_len;		/* wire length of the (uncompressed) qname, incl. root */
	uint64_t qname_hash;		/* dlb_wire_name_hash(qname_lc, qname_len) */
	uint16_t qtype;
	uint16_t qclass;
	uint16_t question_end;		/* offset just past the first question's qclass */

	/* EDNS (the OPT RR in the additional section), present when has_opt */
	bool has_opt;
	uint16_t opt_off;		/* offset of the OPT RR's owner name (the root octet) */
	uint16_t opt_rdata_off;		/* offset of the OPT RDATA */
	uint16_t opt_rdlen;
	uint16_t udp_size;		/* as sent (may be < 512) */
	uint8_t ext_rcode;
	uint8_t edns_version;
	bool do_bit;
	uint16_t ecs_off;		/* offset of the ECS option's code, 0 if none */
	uint16_t cookie_off;		/* offset of the COOKIE option's code, 0 if none */

	uint16_t parsed_end;		/* offset just past the last record parsed */
	bool trailing;			/* bytes after the last record (dropped when ECS is added) */

	uint8_t qname_lc[DLB_MAX_NAME];	/* the first question's name in wire form, ASCII
					 * lowercased (qname_len bytes; the parser leaves
					 * the rest as it was) */
};

/**
 * Parse a query: header, every question and record (bounded), the OPT RR.
 * Rules (bad-inputs §3.2 A):
 *  - < 12 octets, a truncated/overlong/looping name, a label type 01/10,
 *    counts that do not fit the length, two OPT RRs, an OPT whose owner is not
 *    the root, or an OPT outside the additional section: DLB_EMALF / DLB_ETRUNC;
 *  - EDNS options that overrun the OPT RDATA, or a second ECS or COOKIE
 *    option: DLB_EMALF;
 *  - QR=1 or TC=1: DLB_ENOTQUERY (the message is otherwise parsed); this wins
 *    over any parse error, so a malformed response is never answered;
 *  - qdcount == 0 with a sane header: DLB_EEMPTY (OPT still parsed so the
 *    NOTIMP answer can carry one);
 *  - bytes after the last record: OK, with m->trailing set.
 * The qname of the first question must not contain a compression pointer
 * (there is nothing before it to point to).
 * @return DLB_OK or a negative dlb_err; @m is filled as far as parsing got.
 */
int dlb_wire_parse_query(const uint8_t *pkt, size_t len, struct dlb_dnsmsg *m);

/**
 * dlb_wire_parse_query without its fast path for the common query: the
 * same results for every message (the unit tests compare the two).
 */
int dlb_wire_parse_query_general(const uint8_t *pkt, size_t len, struct dlb_dnsmsg *m);

/**
 * Parse a response's header and first question only (what outstanding-query
 * matching needs). The question name may not be compressed either.
 * @return DLB_OK, DLB_EEMPTY (qdcount == 0, header only is fine), or DLB_EMALF/DLB_ETRUNC.
 */
int dlb_wire_parse_response_question(const uint8_t *pkt, size_t len, struct dlb_dnsmsg *m);

/**
 * Skip one possibly-compressed name at @off without following pointers.
 * @return offset after the name, or a negative dlb_err.
 */
int dlb_wire_skip_name(const uint8_t *pkt, size_t len, size_t off);

/**
 * Decode one possibly-compressed name at @off into uncompressed lowercase wire
 * form in @out (>= DLB_MAX_NAME bytes), following at most DLB_WIRE_MAX_HOPS
 * pointers, each strictly backwards. @work counts label+pointer visits against
 * DLB_WIRE_MAX_WORK across a message (pass the same counter for every name;
 * NULL gives this call a budget of its own).
 * @return length written to @out, or a negative dlb_err. *@next gets the offset after the name.
 */
int dlb_wire_decode_name(const uint8_t *pkt, size_t len, size_t off, uint8_t *out,
			 size_t *next, unsigned *work);

/** Hash of a lowercased wire name (keyed per process, see dlb_wire_hash_init). */
uint64_t dlb_wire_name_hash(const uint8_t *lc, size_t len);
/**
 * Seed the keyed hash from a random source; call once at startup.
 * Thread: main, before any other thread runs or any hash is stored.
 */
void dlb_wire_hash_init(void);

/** Case-insensitive comparison of two uncompressed wire names. */
bool dlb_wire_name_equal_ci(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen);

/**
 * Presentation form of a wire name ("www.example.com.", "." for the root),
 * with non-printable octets and '.' inside labels escaped as \DDD / \. .
 * @outsz of DLB_WIRE_NAME_TEXT_MAX always suffices.
 * @return length written (NUL-terminated), DLB_ESPACE, or DLB_EINVAL for a
 * malformed wire name.
 */
int dlb_wire_name_to_text(const uint8_t *name, size_t len, char *out, size_t outsz);

/**
 * Text name ("www.example.com" or "www.example.com.") to wire form.
 * Escapes \. and \DDD are understood; the case is kept as written.
 * @return wire length, or DLB_EINVAL for a bad name, DLB_ESPACE if @outsz is too small.
 */
int dlb_wire_name_from_text(const char *text, uint8_t *out, size_t outsz);

/** What dlb_wire_scan_answer() found in a response. */
struct dlb_answer_scan {
	uint32_t min_ttl;	/* smallest TTL of the answer/authority/additional records
				 * other than OPT; UINT32_MAX when there are none */
	uint32_t nrecords;	/* records other than OPT */
	uint32_t soa_minimum;	/* MINIMUM of a SOA in the authority section */
	uint32_t soa_ttl;	/* that SOA's TTL */
	bool has_soa;
	uint16_t nttl;		/* TTL offsets written */
};

/**
 * Walk every record of the response @pkt (qdcount must be 1) with bounded
 * name skipping (pointers are not followed) and record the offset of each
 * TTL field except OPT's into @ttl_offs (at most @max).
 * @return DLB_OK, DLB_ESPACE (more TTLs than @max), or DLB_EMALF/DLB_ETRUNC
 * for anything malformed (such an answer is never cached).
 */
int dlb_wire_scan_answer(const uint8_t *pkt, size_t len, uint16_t *ttl_offs, size_t max,
			 struct dlb_answer_scan *out);

/** What dlb_wire_add_ecs() did, so the answer can be restored. */
enum dlb_ecs_added {
	DLB_ECS_NONE = 0,	/* query left as it was */
	DLB_ECS_OPTION,		/* an ECS option added to (or replaced in) the query's OPT */
	DLB_ECS_OPT_RR,		/* a whole OPT RR (with the ECS option) appended */
};

/**
 * Build the ECS option for @client: family, @prefix bits of the address
 * (host bits zeroed), scope 0. @out needs 4 + 4 + 16 bytes.
 * @return the option's length (code and length fields included).
 */
size_t dlb_wire_ecs_option(const struct sockaddr *client, int prefix, uint8_t *out);

/**
 * Add the EDNS Client Subnet option @ecs (from dlb_wire_ecs_option) to the
 * parsed query @m in @pkt (@len bytes, room for @cap), in place: into its OPT
 * RR, or as a new OPT RR (payload 512, as dnsdist) when it has none. An ECS
 * option the client sent is kept, unless @override (then replaced in its
 * place). Bytes after the query's last record are dropped before an option
 * or OPT RR is added, as dnsdist does: nothing is ever written after bytes
 * the parser did not read (CVE-2018-14663). A query whose qdcount is not 1
 * is never touched.
 * @return the new length; *@added tells what was done.
 */
size_t dlb_wire_add_ecs(uint8_t *pkt, size_t len, size_t cap, const struct dlb_dnsmsg *m,
			const uint8_t *ecs, size_t ecslen, bool override, enum dlb_ecs_added *added);

/**
 * Undo dlb_wire_add_ecs() in a backend's answer: remove the OPT RR
 * (DLB_ECS_OPT_RR) or the ECS option (DLB_ECS_OPTION) from its additional
 * section. An answer that cannot be walked is left alone. @scope, unless
 * NULL: the SCOPE PREFIX-LENGTH of the ECS option found there, or -1.
 * @return the new length.
 */
size_t dlb_wire_strip_ecs(uint8_t *pkt, size_t len, enum dlb_ecs_added added, int *scope);

/**
 * dnsdist's text for an (extended) rcode, as RCode::to_s / ERCode::to_s
 * print it ("No Error", "Non-Existent domain", ..., "Err#11"); NULL beyond
 * the known ones (print "Err#<n>").
 */
const char *dlb_wire_rcode_text(unsigned rcode);

/** Settings for locally generated answers (from the config). */
struct dlb_selfanswer_opts {
	bool add_edns;		/* setAddEDNSToSelfGeneratedResponses, default true */
	uint16_t payload_size;	/* setPayloadSizeOnSelfGeneratedAnswers, default 1232 */
};

/**
 * Build a locally generated answer with @rcode for the parsed query @q
 * (the packet @qpkt): the query's ID and opcode, QR=1, RD and CD copied from
 * the query, RA clear (as dnsdist), the first question echoed (when qdcount >= 1; the
 * client's own case), no records, and an OPT RR (payload size from @opts, DO
 * copied, version 0, extended rcode @rcode >> 4) when the query had one and
 * @opts->add_edns. @opts NULL means the defaults (EDNS on, 1232).
 * @out may alias @qpkt.
 * @return length written, or DLB_ESPACE.
 */
int dlb_wire_build_answer(const uint8_t *qpkt, const struct dlb_dnsmsg *q, uint8_t rcode,
			  const struct dlb_selfanswer_opts *opts, uint8_t *out, size_t outsz);

/**
 * truncateTC(true): cut the backend's TC=1 answer @pkt (@len bytes) down to
 * its header and first question, counts but qdcount zeroed, as dnsdist 1.7
 * does (it does the same, TC set first, to an answer too large for a UDP
 * client). When @add_edns and the answer had an OPT RR, a fresh one follows:
 * the answer's payload size and DO bit, nothing else. Never longer than
 * @len. @return the new length (@len when the answer does not parse).
 */
size_t dlb_wire_truncate_tc(uint8_t *pkt, size_t len, bool add_edns);

static inline uint16_t
dlb_rd16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

static inline uint32_t
dlb_rd32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline void
dlb_wr16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline void
dlb_wr32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/**
 * memcpy(@d, @s, @n) for the short copies of the hit path (names, small
 * answers): 8 to 64 bytes as two overlapping fixed-size copies (inline moves,
 * no call), anything else through memcpy. @d and @s must not overlap.
 */
static inline void
dlb_copy_short(uint8_t *d, const uint8_t *s, size_t n)
{
	if (n >= 8 && n <= 16) {
		__builtin_memcpy(d, s, 8);
		__builtin_memcpy(d + n - 8, s + n - 8, 8);
	} else if (n > 16 && n <= 32) {
		__builtin_memcpy(d, s, 16);
		__builtin_memcpy(d + n - 16, s + n - 16, 16);
	} else if (n > 32 && n <= 64) {
		__builtin_memcpy(d, s, 32);
		__builtin_memcpy(d + n - 32, s + n - 32, 32);
	} else {
		__builtin_memcpy(d, s, n);
	}
}

/*
 * Are the @n bytes at @a and @b equal? For a name in a cache key: 8 to 32
 * bytes (most names) with two or four overlapping 8-byte loads from each,
 * inline (no call); any other length through memcmp.
 */
static inline bool
dlb_equal_short(const uint8_t *a, const uint8_t *b, size_t n)
{
	uint64_t x[2], y[2];

	if (n >= 8 && n <= 16) {
		__builtin_memcpy(&x[0], a, 8);
		__builtin_memcpy(&x[1], a + n - 8, 8);
		__builtin_memcpy(&y[0], b, 8);
		__builtin_memcpy(&y[1], b + n - 8, 8);
		return ((x[0] ^ y[0]) | (x[1] ^ y[1])) == 0;
	}
	if (n > 16 && n <= 32) {
		uint64_t d = 0;

		for (size_t i = 0; i < 2; i++) {
			__builtin_memcpy(&x[i], a + 8 * i, 8);
			__builtin_memcpy(&y[i], b + 8 * i, 8);
			d |= x[i] ^ y[i];
		}
		for (size_t i = 0; i < 2; i++) {
			__builtin_memcpy(&x[i], a + n - 16 + 8 * i, 8);
			__builtin_memcpy(&y[i], b + n - 16 + 8 * i, 8);
			d |= x[i] ^ y[i];
		}
		return d == 0;
	}
	return __builtin_memcmp(a, b, n) == 0;
}

/* ---- names of DNS types ---------------------------------------------------- */

/** A mnemonic and its number; tables end with { NULL, 0 }. */
struct dlb_named {
	const char *name;
	int value;
};

/** dnsdist 1.7's QType::names. */
extern const struct dlb_named dlb_qtype_names[];

/** QType::toString: the mnemonic of @t, else "TYPEn", written to @buf. @return @buf. */
const char *dlb_qtype_text(unsigned t, char *buf, size_t bufsz);

/** Look @name up in @v, case-insensitively. @return false when it is not there. */
bool dlb_named_lookup(const struct dlb_named *v, const char *name, int *out);

#endif
