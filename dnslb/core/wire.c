/*
 * wire.c - the DNS wire-format parser and the builder of local answers.
 *
 * One pass, no allocation, bounded work: a message is at most 65535 octets,
 * record counts are checked against the length before any loop runs, names
 * are <= 255 octets, and decompression follows only strictly backward
 * pointers (each one lands before the start of the segment it was read in,
 * so a chain cannot loop) within DLB_WIRE_MAX_HOPS per name and
 * DLB_WIRE_MAX_WORK per message.
 *
 * Thread: any. The only shared state is the hash seed, written once by
 * dlb_wire_hash_init() before workers start and read-only afterwards.
 */
#include "dnslb/core/wire.h"

#include <endian.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
/* XXH3 inlined: per query it hashes a name and a few key bytes, where the
 * library call's dispatch costs as much as the hash */
#define XXH_INLINE_ALL
#include <xxhash.h>

#define WIRE_MAX_MSG	65535	/* a DNS message never exceeds a TCP length prefix */
#define WIRE_MIN_QUESTION 5	/* root name + qtype + qclass */
#define WIRE_MIN_RR	11	/* root name + type, class, ttl, rdlength */
#define WIRE_PTR	0xc0
#define WIRE_LABEL_MASK	0xc0

/*
 * Read cursor with a sticky error (STYLE §3.4.2): every read past the end
 * sets error once and returns 0; callers check error when it matters.
 * Ownership: borrows @pkt.
 */
struct dlb_wire {
	const uint8_t *pkt;
	size_t len;
	size_t pos;
	int error;
};

static void
wire_fail(struct dlb_wire *w, int err)
{
	if (w->error == DLB_OK)
		w->error = err;
}

static bool
wire_need(struct dlb_wire *w, size_t n)
{
	if (w->error != DLB_OK)
		return false;
	if (w->len - w->pos < n) {
		wire_fail(w, DLB_ETRUNC);
		return false;
	}
	return true;
}

static uint16_t
wire_u16(struct dlb_wire *w)
{
	uint16_t v;

	if (!wire_need(w, 2))
		return 0;
	v = dlb_rd16(w->pkt + w->pos);
	w->pos += 2;
	return v;
}

static void
wire_skip(struct dlb_wire *w, size_t n)
{
	if (wire_need(w, n))
		w->pos += n;
}

static uint8_t
ascii_lower(uint8_t c)
{
	return (c >= 'A' && c <= 'Z') ? (uint8_t)(c + ('a' - 'A')) : c;
}

/* One label or pointer visit; the budget saturates instead of wrapping. */
static bool
work_spend(unsigned *work)
{
	if (*work >= DLB_WIRE_MAX_WORK)
		return false;
	++*work;
	return true;
}

/* The body of dlb_wire_decode_name() (the question's name: qname_decode). */
static int
name_decode(const uint8_t *pkt, size_t len, size_t off, uint8_t *out, size_t *next,
	    unsigned *work)
{
	size_t pos = off, seg = off, n = 0, after = 0;
	unsigned hops = 0;
	bool jumped = false;

	if (len > WIRE_MAX_MSG)
		return DLB_EMALF;
	for (;;) {
		uint8_t c;

		if (pos >= len)
			return DLB_ETRUNC;
		c = pkt[pos];
		if ((c & WIRE_LABEL_MASK) == WIRE_PTR) {
			size_t target;

			if (len - pos < 2)
				return DLB_ETRUNC;
			target = (size_t)((c & 0x3f) << 8 | pkt[pos + 1]);
			if (!work_spend(work) || ++hops > DLB_WIRE_MAX_HOPS)
				return DLB_EMALF;
			/* strictly before this segment: no loops, no forward refs */
			if (target >= seg || target < DLB_DNS_HDR)
				return DLB_EMALF;
			if (!jumped)
				after = pos + 2;
			jumped = true;
			pos = seg = target;
			continue;
		}
		if (c & WIRE_LABEL_MASK)
			return DLB_EMALF;	/* 01 and 10 label types */
		if (c == 0)
			break;
		if (!work_spend(work))
			return DLB_EMALF;
		if (n + 1 + c + 1 > DLB_MAX_NAME)
			return DLB_EMALF;
		if (len - pos - 1 < c)
			return DLB_ETRUNC;
		out[n++] = c;
		for (size_t i = 1; i <= c; i++)
			out[n++] = ascii_lower(pkt[pos + i]);
		pos += 1 + (size_t)c;
	}
	out[n++] = 0;
	if (next != NULL)
		*next = jumped ? after : pos + 1;
	return (int)n;
}

/* 'A'..'Z' (and only those) of 8 bytes at once get 0x20: SWAR, no carry
 * between bytes (each sum stays below 0x100). */
static inline uint64_t
lower8(uint64_t x)
{
	const uint64_t ones = 0x0101010101010101ULL, high = ones * 0x80;
	uint64_t c = x & ~high;
	uint64_t ge_a = c + ones * (0x80 - 'A');
	uint64_t gt_z = c + ones * (0x80 - 'Z' - 1);

	return x | (((ge_a ^ gt_z) & ~x & high) >> 2);
}

/* @dst[0..n) = @src[0..n) ASCII lowercased, 8 bytes a step (the last step
 * overlaps the one before: it reads and writes only inside [0, n)). */
static inline void
lower_copy(uint8_t *dst, const uint8_t *src, size_t n)
{
	uint64_t x;
	size_t i;

	if (n < 8) {
		for (i = 0; i < n; i++)
			dst[i] = ascii_lower(src[i]);
		return;
	}
	for (i = 0; i + 8 <= n; i += 8) {
		memcpy(&x, src + i, 8);
		x = lower8(x);
		memcpy(dst + i, &x, 8);
	}
	if (i < n) {
		memcpy(&x, src + n - 8, 8);
		x = lower8(x);
		memcpy(dst + n - 8, &x, 8);
	}
}

/*
 * The usual labels of a question name at @off: 1..63 octets each, ending well
 * inside the packet and the 255-octet bound. @return where the walk stopped
 * (anything else is left to a careful walk from there).
 */
static inline size_t
qname_quick_walk(const uint8_t *pkt, size_t len, size_t off)
{
	size_t pos = off, lim = len < off + DLB_MAX_NAME - 1 ? len : off + DLB_MAX_NAME - 1;

	while (pos < lim) {
		uint8_t c = pkt[pos];

		if ((uint8_t)(c - 1) >= 63 || pos + 1 + c >= lim)
			break;
		pos += 1 + (size_t)c;
	}
	return pos;
}

/*
 * The question name: name_decode without compression pointers (malformed
 * there), in two passes: the label walk checks everything (the same checks
 * in the same order, so the same error), then one lowercased copy of the
 * whole name, length octets included (they are below 'A').
 */
static int
qname_decode(const uint8_t *pkt, size_t len, size_t off, uint8_t *out, size_t *next)
{
	size_t pos, n;

	if (len > WIRE_MAX_MSG)
		return DLB_EMALF;
	pos = qname_quick_walk(pkt, len, off);
	for (;;) {
		uint8_t c;

		if (pos >= len)
			return DLB_ETRUNC;
		c = pkt[pos];
		if (c & WIRE_LABEL_MASK)
			return DLB_EMALF;	/* a pointer, or label type 01/10 */
		if (c == 0)
			break;
		if (pos - off + 1 + c + 1 > DLB_MAX_NAME)
			return DLB_EMALF;
		if (len - pos - 1 < c)
			return DLB_ETRUNC;
		pos += 1 + (size_t)c;
	}
	n = pos + 1 - off;
	lower_copy(out, pkt + off, n);
	*next = pos + 1;
	return (int)n;
}

int
dlb_wire_decode_name(const uint8_t *pkt, size_t len, size_t off, uint8_t *out,
		     size_t *next, unsigned *work)
{
	unsigned local = 0;

	return name_decode(pkt, len, off, out, next, work != NULL ? work : &local);
}

DLB_HOT int
dlb_wire_skip_name(const uint8_t *pkt, size_t len, size_t off)
{
	size_t pos = off, n = 0;

	if (len > WIRE_MAX_MSG)
		return DLB_EMALF;
	for (;;) {
		uint8_t c;

		if (pos >= len)
			return DLB_ETRUNC;
		c = pkt[pos];
		if ((c & WIRE_LABEL_MASK) == WIRE_PTR) {
			size_t target;

			if (len - pos < 2)
				return DLB_ETRUNC;
			target = (size_t)((c & 0x3f) << 8 | pkt[pos + 1]);
			/* same rule as decoding: before the name, after the header */
			if (target >= off || target < DLB_DNS_HDR)
				return DLB_EMALF;
			return (int)(pos + 2);
		}
		if (c & WIRE_LABEL_MASK)
			return DLB_EMALF;
		if (c == 0)
			return (int)(pos + 1);
		if (n + 1 + c + 1 > DLB_MAX_NAME)
			return DLB_EMALF;
		if (len - pos - 1 < c)
			return DLB_ETRUNC;
		n += 1 + (size_t)c;
		pos += 1 + (size_t)c;
	}
}

static void
parse_header(struct dlb_wire *w, struct dlb_dnsmsg *m)
{
	const uint8_t *p;

	if (!wire_need(w, DLB_DNS_HDR))
		return;
	p = w->pkt + w->pos;
	m->id = dlb_rd16(p);
	m->flags = dlb_rd16(p + 2);
	m->qdcount = dlb_rd16(p + 4);
	m->ancount = dlb_rd16(p + 6);
	m->nscount = dlb_rd16(p + 8);
	m->arcount = dlb_rd16(p + 10);
	w->pos += DLB_DNS_HDR;
}

/* The first question: an uncompressed name, recorded lowercased and hashed. */
static DLB_HOT void
parse_first_question(struct dlb_wire *w, struct dlb_dnsmsg *m)
{
	size_t next;
	int n;

	if (w->error != DLB_OK)
		return;
	n = qname_decode(w->pkt, w->len, w->pos, m->qname_lc, &next);
	if (n < 0) {
		wire_fail(w, n);
		return;
	}
	m->qname_off = (uint16_t)w->pos;
	m->qname_len = (uint16_t)n;
	m->qname_hash = dlb_wire_name_hash(m->qname_lc, (size_t)n);
	w->pos = next;
	if (w->len - w->pos >= 4) {
		m->qtype = dlb_rd16(w->pkt + w->pos);
		m->qclass = dlb_rd16(w->pkt + w->pos + 2);
		w->pos += 4;
	} else {
		m->qtype = wire_u16(w);		/* what there is, then ETRUNC */
		m->qclass = wire_u16(w);
	}
	if (w->error == DLB_OK)
		m->question_end = (uint16_t)w->pos;
}

static void
wire_skip_name(struct dlb_wire *w)
{
	int next;

	if (w->error != DLB_OK)
		return;
	next = dlb_wire_skip_name(w->pkt, w->len, w->pos);
	if (next < 0)
		wire_fail(w, next);
	else
		w->pos = (size_t)next;
}

/*
 * EDNS options: each must fit the RDATA exactly; a second ECS or COOKIE is
 * malformed (RFC 7871 §7.1.1, RFC 7873 §5.2.2) and could smuggle a value
 * past whichever code reads the other copy. The offsets of the ECS and
 * COOKIE options' codes go to *@ecs and *@cookie (0: none yet) as they are
 * found. @return false when malformed.
 */
static inline bool
opt_options_walk(const uint8_t *pkt, size_t rdata, size_t rdlen, uint16_t *ecs, uint16_t *cookie)
{
	size_t p = rdata, end = rdata + rdlen;

	while (p < end) {
		uint16_t code, olen;

		if (end - p < 4)
			return false;
		code = dlb_rd16(pkt + p);
		olen = dlb_rd16(pkt + p + 2);
		if (olen > end - p - 4)
			return false;
		if (code == DLB_EDNS_OPT_ECS || code == DLB_EDNS_OPT_COOKIE) {
			uint16_t *slot = code == DLB_EDNS_OPT_ECS ? ecs : cookie;

			if (*slot != 0)
				return false;
			*slot = (uint16_t)p;
		}
		p += 4 + (size_t)olen;
	}
	return true;
}

/* The OPT record's fields (its options already walked). */
static inline void
opt_fields(struct dlb_dnsmsg *m, size_t owner, uint16_t udp_size, uint32_t ttl, size_t rdata,
	   uint16_t rdlen)
{
	m->has_opt = true;
	m->opt_off = (uint16_t)owner;
	m->opt_rdata_off = (uint16_t)rdata;
	m->opt_rdlen = rdlen;
	m->udp_size = udp_size;
	m->ext_rcode = (uint8_t)(ttl >> 24);
	m->edns_version = (uint8_t)(ttl >> 16);
	m->do_bit = (ttl & 0x8000) != 0;
}

static void
parse_opt(struct dlb_wire *w, struct dlb_dnsmsg *m, size_t owner, uint16_t udp_size,
	  uint32_t ttl, size_t rdata, uint16_t rdlen)
{
	/* a literal root owner: no pointer, so never a second name in disguise */
	if (m->has_opt || w->pkt[owner] != 0) {
		wire_fail(w, DLB_EMALF);
		return;
	}
	if (!opt_options_walk(w->pkt, rdata, rdlen, &m->ecs_off, &m->cookie_off)) {
		wire_fail(w, DLB_EMALF);
		return;
	}
	opt_fields(m, owner, udp_size, ttl, rdata, rdlen);
}

/* @count resource records; OPT is only legal when @additional. */
static DLB_HOT void
parse_records(struct dlb_wire *w, struct dlb_dnsmsg *m, unsigned count, bool additional)
{
	for (unsigned i = 0; i < count && w->error == DLB_OK; i++) {
		size_t owner = w->pos, rdata;
		uint16_t type, class, rdlen;
		const uint8_t *p;
		uint32_t ttl;

		if (w->pos < w->len && w->pkt[w->pos] == 0)
			w->pos++;	/* the root (an OPT's owner): no call */
		else
			wire_skip_name(w);
		/* type, class, TTL, RDLENGTH: one bounds check for the 10 octets */
		if (!wire_need(w, 10))
			break;
		p = w->pkt + w->pos;
		type = dlb_rd16(p);
		class = dlb_rd16(p + 2);
		ttl = dlb_rd32(p + 4);
		rdlen = dlb_rd16(p + 8);
		w->pos += 10;
		rdata = w->pos;
		wire_skip(w, rdlen);
		if (w->error != DLB_OK || type != DLB_TYPE_OPT)
			continue;
		if (!additional)
			wire_fail(w, DLB_EMALF);
		else
			parse_opt(w, m, owner, class, ttl, rdata, rdlen);
	}
}

/* Zero every field but qname_lc, whose bytes past qname_len mean nothing
 * (255 bytes not cleared per query). */
static inline void
dnsmsg_clear(struct dlb_dnsmsg *m)
{
	memset(m, 0, offsetof(struct dlb_dnsmsg, qname_lc));
	memset((uint8_t *)m + offsetof(struct dlb_dnsmsg, qname_lc) + sizeof(m->qname_lc), 0,
	       sizeof(*m) - offsetof(struct dlb_dnsmsg, qname_lc) - sizeof(m->qname_lc));
}

int
dlb_wire_parse_query_general(const uint8_t *pkt, size_t len, struct dlb_dnsmsg *m)
{
	struct dlb_wire w = { .pkt = pkt, .len = len };
	size_t min_body;
	bool notquery;

	dnsmsg_clear(m);
	if (len > WIRE_MAX_MSG)
		return DLB_EMALF;
	parse_header(&w, m);
	if (w.error != DLB_OK)
		return w.error;
	/* a response must never be answered, even with FORMERR (reflection loops) */
	notquery = (m->flags & (DLB_F_QR | DLB_F_TC)) != 0;

	/* every count is bounded by the length before any loop runs */
	min_body = (size_t)m->qdcount * WIRE_MIN_QUESTION +
		   ((size_t)m->ancount + m->nscount + m->arcount) * WIRE_MIN_RR;
	if (min_body > len - DLB_DNS_HDR)
		wire_fail(&w, DLB_ETRUNC);

	if (m->qdcount > 0)
		parse_first_question(&w, m);
	for (unsigned i = 1; i < m->qdcount && w.error == DLB_OK; i++) {
		wire_skip_name(&w);
		wire_skip(&w, 4);
	}
	/* a query usually has only an OPT: no call for an empty section */
	if (m->ancount > 0)
		parse_records(&w, m, m->ancount, false);
	if (m->nscount > 0)
		parse_records(&w, m, m->nscount, false);
	if (m->arcount > 0)
		parse_records(&w, m, m->arcount, true);

	if (w.error == DLB_OK) {
		m->parsed_end = (uint16_t)w.pos;
		m->trailing = w.pos < len;
	}
	if (notquery)
		return DLB_ENOTQUERY;
	if (w.error != DLB_OK)
		return w.error;
	return m->qdcount == 0 ? DLB_EEMPTY : DLB_OK;
}

/*
 * The common query in one pass: QR and TC clear, one question, no answer or
 * authority records, at most one additional record and that an OPT with the
 * root as owner, a question name of ordinary labels. It sets exactly what
 * dlb_wire_parse_query_general sets for such a message (tests/unit/test_wire.c
 * compares the two on generated and mutated messages) and returns true, or
 * returns false as soon as the message is anything else, before it has written
 * anything the general parser would not overwrite: a malformed message is
 * always the general parser's, so its error is the general parser's too.
 */
static DLB_HOT bool
parse_query_fast(const uint8_t *pkt, size_t len, struct dlb_dnsmsg *m)
{
	const size_t off = DLB_DNS_HDR;
	size_t pos, n, rdata = 0;
	uint16_t flags, arcount, udp_size = 0, rdlen = 0, ecs = 0, cookie = 0;
	uint32_t ttl = 0;
	uint64_t counts;

	if (len < DLB_DNS_HDR + WIRE_MIN_QUESTION || len > WIRE_MAX_MSG)
		return false;
	flags = dlb_rd16(pkt + 2);
	/* qdcount 1, ancount 0, nscount 0, arcount 0 or 1: one load */
	memcpy(&counts, pkt + 4, 8);
	counts = be64toh(counts);
	arcount = (uint16_t)counts;
	if ((flags & (DLB_F_QR | DLB_F_TC)) != 0 || (counts >> 16) != (uint64_t)1 << 32 ||
	    arcount > 1)
		return false;
	/* qname_decode's quick walk, accepted only when it ends on the root
	 * label: the careful walk would then stop at once, with the same end */
	pos = qname_quick_walk(pkt, len, off);
	if (pos >= len || pkt[pos] != 0 || len - pos - 1 < 4)
		return false;
	n = pos + 1 - off;
	pos += 1 + 4;
	if (arcount == 1) {
		/* root owner, type OPT, class, TTL, RDLENGTH, the RDATA */
		if (len - pos < WIRE_MIN_RR || pkt[pos] != 0 ||
		    dlb_rd16(pkt + pos + 1) != DLB_TYPE_OPT)
			return false;
		udp_size = dlb_rd16(pkt + pos + 3);
		ttl = dlb_rd32(pkt + pos + 5);
		rdlen = dlb_rd16(pkt + pos + 9);
		rdata = pos + WIRE_MIN_RR;
		if (len - rdata < rdlen)
			return false;
		if (!opt_options_walk(pkt, rdata, rdlen, &ecs, &cookie))
			return false;
	}
	dnsmsg_clear(m);
	m->id = dlb_rd16(pkt);
	m->flags = flags;
	m->qdcount = 1;
	m->arcount = arcount;
	m->qname_off = (uint16_t)off;
	m->qname_len = (uint16_t)n;
	lower_copy(m->qname_lc, pkt + off, n);
	m->qname_hash = dlb_wire_name_hash(m->qname_lc, n);
	m->qtype = dlb_rd16(pkt + off + n);
	m->qclass = dlb_rd16(pkt + off + n + 2);
	m->question_end = (uint16_t)(off + n + 4);
	if (arcount == 1) {
		opt_fields(m, off + n + 4, udp_size, ttl, rdata, rdlen);
		m->ecs_off = ecs;
		m->cookie_off = cookie;
		pos = rdata + rdlen;
	}
	m->parsed_end = (uint16_t)pos;
	m->trailing = pos < len;
	return true;
}

DLB_HOT int
dlb_wire_parse_query(const uint8_t *pkt, size_t len, struct dlb_dnsmsg *m)
{
	if (parse_query_fast(pkt, len, m))
		return DLB_OK;
	return dlb_wire_parse_query_general(pkt, len, m);
}

int
dlb_wire_parse_response_question(const uint8_t *pkt, size_t len, struct dlb_dnsmsg *m)
{
	struct dlb_wire w = { .pkt = pkt, .len = len };

	dnsmsg_clear(m);
	if (len > WIRE_MAX_MSG)
		return DLB_EMALF;
	parse_header(&w, m);
	if (w.error != DLB_OK)
		return w.error;
	if (m->qdcount == 0)
		return DLB_EEMPTY;
	parse_first_question(&w, m);
	if (w.error != DLB_OK)
		return w.error;
	m->parsed_end = (uint16_t)w.pos;
	return DLB_OK;
}

/* Fixed until dlb_wire_hash_init(); tests and tools may run without it. */
static uint64_t name_hash_seed = 0x9e3779b97f4a7c15ULL;

void
dlb_wire_hash_init(void)
{
	uint64_t seed;

	if (sodium_init() < 0)
		return;		/* keep the fixed seed; sodium_init cannot fail on Linux */
	randombytes_buf(&seed, sizeof(seed));
	name_hash_seed = seed;
}

uint64_t
dlb_wire_name_hash(const uint8_t *lc, size_t len)
{
	return XXH3_64bits_withSeed(lc, len, name_hash_seed);
}

bool
dlb_wire_name_equal_ci(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
	/* length octets (<= 63) are below 'A', so lowering them is harmless */
	if (alen != blen)
		return false;
	for (size_t i = 0; i < alen; i++) {
		if (ascii_lower(a[i]) != ascii_lower(b[i]))
			return false;
	}
	return true;
}

/* Append @n chars, always leaving room for the NUL; sticky DLB_ESPACE. */
static void
text_put(char *out, size_t outsz, size_t *o, int *err, const char *s, size_t n)
{
	if (*err != DLB_OK)
		return;
	if (outsz - *o <= n) {
		*err = DLB_ESPACE;
		return;
	}
	memcpy(out + *o, s, n);
	*o += n;
}

int
dlb_wire_name_to_text(const uint8_t *name, size_t len, char *out, size_t outsz)
{
	size_t pos = 0, o = 0;
	int err = DLB_OK;

	if (len == 0 || len > DLB_MAX_NAME)
		return DLB_EINVAL;
	if (outsz == 0)
		return DLB_ESPACE;
	if (name[0] == 0)
		text_put(out, outsz, &o, &err, ".", 1);
	for (;;) {
		uint8_t c;

		if (pos >= len)
			return DLB_EINVAL;
		c = name[pos];
		if (c == 0)
			break;
		if (c > DLB_MAX_LABEL || (size_t)c + 2 > len - pos)
			return DLB_EINVAL;	/* label type bits, or no room for the root */
		for (size_t i = pos + 1; i <= pos + c; i++) {
			uint8_t ch = name[i];
			char esc[5];

			if (ch == '.' || ch == '\\') {
				esc[0] = '\\';
				esc[1] = (char)ch;
				text_put(out, outsz, &o, &err, esc, 2);
			} else if (ch > 0x20 && ch < 0x7f) {
				esc[0] = (char)ch;
				text_put(out, outsz, &o, &err, esc, 1);
			} else {
				esc[0] = '\\';
				esc[1] = (char)('0' + ch / 100);
				esc[2] = (char)('0' + ch / 10 % 10);
				esc[3] = (char)('0' + ch % 10);
				text_put(out, outsz, &o, &err, esc, 4);
			}
		}
		text_put(out, outsz, &o, &err, ".", 1);
		pos += 1 + (size_t)c;
	}
	if (pos != len - 1)
		return DLB_EINVAL;
	if (err != DLB_OK)
		return err;
	out[o] = '\0';
	return (int)o;
}

/* One character of a label in presentation form; -1 if the escape is bad. */
static int
text_char(const char **pp)
{
	const unsigned char *p = (const unsigned char *)*pp;
	int v;

	if (p[0] != '\\') {
		*pp += 1;
		return p[0];
	}
	if (p[1] >= '0' && p[1] <= '9') {
		if (p[2] < '0' || p[2] > '9' || p[3] < '0' || p[3] > '9')
			return -1;
		v = (p[1] - '0') * 100 + (p[2] - '0') * 10 + (p[3] - '0');
		if (v > 255)
			return -1;
		*pp += 4;
		return v;
	}
	if (p[1] == '\0')
		return -1;
	*pp += 2;
	return p[1];
}

int
dlb_wire_name_from_text(const char *text, uint8_t *out, size_t outsz)
{
	uint8_t buf[DLB_MAX_NAME];
	const char *p = text;
	size_t n = 0;

	if (text == NULL || text[0] == '\0')
		return DLB_EINVAL;
	if (strcmp(text, ".") != 0) {
		while (*p != '\0') {
			size_t lab = n++;
			unsigned llen = 0;

			while (*p != '\0' && *p != '.') {
				int c = text_char(&p);

				if (c < 0 || llen == DLB_MAX_LABEL || n + 2 > DLB_MAX_NAME)
					return DLB_EINVAL;
				buf[n++] = (uint8_t)c;
				llen++;
			}
			if (llen == 0)
				return DLB_EINVAL;	/* empty label: "a..b", ".a" */
			buf[lab] = (uint8_t)llen;
			if (*p == '.')
				p++;
		}
	}
	buf[n++] = 0;
	if (outsz < n)
		return DLB_ESPACE;
	memcpy(out, buf, n);
	return (int)n;
}

int
dlb_wire_build_answer(const uint8_t *qpkt, const struct dlb_dnsmsg *q, uint8_t rcode,
		      const struct dlb_selfanswer_opts *opts, uint8_t *out, size_t outsz)
{
	static const struct dlb_selfanswer_opts defaults = {
		.add_edns = true,
		.payload_size = 1232,
	};
	size_t qlen = 0, need, o;
	bool opt;
	uint16_t flags;

	if (opts == NULL)
		opts = &defaults;
	/* echo the question only if the parse got through it */
	if (q->qdcount >= 1 && q->qname_off >= DLB_DNS_HDR && q->question_end > q->qname_off)
		qlen = (size_t)(q->question_end - q->qname_off);
	opt = q->has_opt && opts->add_edns;
	need = DLB_DNS_HDR + qlen + (opt ? WIRE_MIN_RR : 0);
	if (outsz < need)
		return DLB_ESPACE;

	/* question first: with out == qpkt the header writes must not precede the read */
	if (qlen > 0)
		memmove(out + DLB_DNS_HDR, qpkt + q->qname_off, qlen);
	/* RA stays clear, as in dnsdist's answers built from the query */
	flags = (uint16_t)(DLB_F_QR | (q->flags & (0xf << 11)) | (q->flags & (DLB_F_RD | DLB_F_CD))
			   | (rcode & 0xf));
	dlb_wr16(out, q->id);
	dlb_wr16(out + 2, flags);
	dlb_wr16(out + 4, qlen > 0 ? 1 : 0);
	dlb_wr16(out + 6, 0);
	dlb_wr16(out + 8, 0);
	dlb_wr16(out + 10, opt ? 1 : 0);
	o = DLB_DNS_HDR + qlen;
	if (opt) {
		/* root owner, OPT, class = payload, TTL = ext-rcode|version 0|DO, no RDATA */
		out[o] = 0;
		dlb_wr16(out + o + 1, DLB_TYPE_OPT);
		dlb_wr16(out + o + 3, opts->payload_size);
		dlb_wr32(out + o + 5, (uint32_t)(rcode >> 4) << 24 | (q->do_bit ? 0x8000u : 0));
		dlb_wr16(out + o + 9, 0);
		o += WIRE_MIN_RR;
	}
	return (int)o;
}

size_t
dlb_wire_truncate_tc(uint8_t *pkt, size_t len, bool add_edns)
{
	struct dlb_dnsmsg m;
	size_t o;

	/* the query parser walks an answer too (it says ENOTQUERY at the end) */
	(void)dlb_wire_parse_query_general(pkt, len, &m);
	if (len < DLB_DNS_HDR)
		return len;
	if (m.qdcount == 0)
		o = DLB_DNS_HDR;
	else if (m.qname_off >= DLB_DNS_HDR && m.question_end > m.qname_off &&
		 m.question_end <= len)
		o = m.question_end;
	else
		return len;
	dlb_wr16(pkt + 6, 0);
	dlb_wr16(pkt + 8, 0);
	dlb_wr16(pkt + 10, 0);
	if (add_edns && m.has_opt && o + WIRE_MIN_RR <= len) {
		pkt[o] = 0;
		dlb_wr16(pkt + o + 1, DLB_TYPE_OPT);
		dlb_wr16(pkt + o + 3, m.udp_size);
		dlb_wr32(pkt + o + 5, m.do_bit ? 0x8000u : 0);
		dlb_wr16(pkt + o + 9, 0);
		dlb_wr16(pkt + 10, 1);
		o += WIRE_MIN_RR;
	}
	return o;
}

int
dlb_wire_scan_answer(const uint8_t *pkt, size_t len, uint16_t *ttl_offs, size_t max,
		     struct dlb_answer_scan *out)
{
	unsigned counts[3];
	size_t pos;
	int r;

	memset(out, 0, sizeof(*out));
	out->min_ttl = UINT32_MAX;
	if (len < DLB_DNS_HDR || len > WIRE_MAX_MSG || dlb_rd16(pkt + 4) != 1)
		return DLB_EMALF;
	counts[0] = dlb_rd16(pkt + 6);
	counts[1] = dlb_rd16(pkt + 8);
	counts[2] = dlb_rd16(pkt + 10);
	/* every record needs at least 11 octets: no loop over absurd counts */
	if ((size_t)(counts[0] + counts[1] + counts[2]) * 11 > len)
		return DLB_ETRUNC;
	r = dlb_wire_skip_name(pkt, len, DLB_DNS_HDR);
	if (r < 0)
		return r;
	pos = (size_t)r + 4;
	if (pos > len)
		return DLB_ETRUNC;
	for (int sec = 0; sec < 3; sec++) {
		for (unsigned i = 0; i < counts[sec]; i++) {
			uint16_t type, rdlen;
			uint32_t ttl;

			r = dlb_wire_skip_name(pkt, len, pos);
			if (r < 0)
				return r;
			pos = (size_t)r;
			if (len - pos < 10)
				return DLB_ETRUNC;
			type = dlb_rd16(pkt + pos);
			ttl = dlb_rd32(pkt + pos + 4);
			rdlen = dlb_rd16(pkt + pos + 8);
			if (len - pos - 10 < rdlen)
				return DLB_ETRUNC;
			if (type != DLB_TYPE_OPT) {
				if (out->nttl == max)
					return DLB_ESPACE;
				ttl_offs[out->nttl++] = (uint16_t)(pos + 4);
				out->nrecords++;
				if (ttl < out->min_ttl)
					out->min_ttl = ttl;
				if (sec == 1 && type == 6 /* SOA */) {
					size_t rd = pos + 10, end = rd + rdlen;

					/* MNAME and RNAME, then 5 32-bit fields, MINIMUM last */
					r = dlb_wire_skip_name(pkt, end, rd);
					if (r < 0)
						return r;
					r = dlb_wire_skip_name(pkt, end, (size_t)r);
					if (r < 0)
						return r;
					if (end - (size_t)r < 20)
						return DLB_EMALF;
					out->has_soa = true;
					out->soa_minimum = dlb_rd32(pkt + r + 16);
					out->soa_ttl = ttl;
				}
			}
			pos += 10 + (size_t)rdlen;
		}
	}
	return DLB_OK;
}

size_t
dlb_wire_ecs_option(const struct sockaddr *client, int prefix, uint8_t *out)
{
	const uint8_t *addr;
	size_t alen, n;
	int fam, max;

	if (client->sa_family == AF_INET) {
		addr = (const uint8_t *)&((const struct sockaddr_in *)(const void *)client)->sin_addr;
		fam = 1;
		max = 32;
	} else {
		addr = (const uint8_t *)&((const struct sockaddr_in6 *)(const void *)client)->sin6_addr;
		fam = 2;
		max = 128;
	}
	if (prefix < 0)
		prefix = 0;
	if (prefix > max)
		prefix = max;
	alen = ((size_t)prefix + 7) / 8;
	dlb_wr16(out, DLB_EDNS_OPT_ECS);
	dlb_wr16(out + 2, (uint16_t)(4 + alen));
	dlb_wr16(out + 4, (uint16_t)fam);
	out[6] = (uint8_t)prefix;
	out[7] = 0;	/* scope */
	memcpy(out + 8, addr, alen);
	if (prefix % 8)
		out[8 + alen - 1] &= (uint8_t)(0xff << (8 - prefix % 8));
	n = 8 + alen;
	return n;
}

size_t
dlb_wire_add_ecs(uint8_t *pkt, size_t len, size_t cap, const struct dlb_dnsmsg *m,
		 const uint8_t *ecs, size_t ecslen, bool override, enum dlb_ecs_added *added)
{
	size_t orig;

	*added = DLB_ECS_NONE;
	if (m->parsed_end > len || m->parsed_end < DLB_DNS_HDR)
		return len;
	if (m->qdcount != 1)
		return len;	/* its answer could not be restored (strip walks one question) */
	if (m->has_opt && m->ecs_off != 0 && !override)
		return len;	/* the client's own ECS goes through */
	/* bytes after the last record are dropped before anything is added,
	 * as dnsdist does: we never write after bytes we did not parse (a
	 * failure below returns @orig: the query as it came). A replaced
	 * option keeps its place, and they stay, as in dnsdist. */
	orig = len;
	if (m->ecs_off == 0)
		len = m->parsed_end;
	if (!m->has_opt) {
		if (len + 11 + ecslen > cap || len + 11 + ecslen > WIRE_MAX_MSG)
			return orig;
		pkt[len] = 0;				/* owner: root */
		dlb_wr16(pkt + len + 1, DLB_TYPE_OPT);
		/* payload 512, as dnsdist: the client sent no EDNS, so it takes 512 */
		dlb_wr16(pkt + len + 3, 512);
		dlb_wr32(pkt + len + 5, 0);		/* ext rcode, version, flags */
		dlb_wr16(pkt + len + 9, (uint16_t)ecslen);
		memcpy(pkt + len + 11, ecs, ecslen);
		dlb_wr16(pkt + 10, (uint16_t)(dlb_rd16(pkt + 10) + 1));
		*added = DLB_ECS_OPT_RR;
		return len + 11 + ecslen;
	}
	if (m->ecs_off != 0) {
		size_t off = m->ecs_off, olen = 4u + dlb_rd16(pkt + off + 2);

		/* replace: remove the old option, then add ours below */
		if (len - olen + ecslen > cap)
			return orig;
		memmove(pkt + off, pkt + off + olen, len - off - olen);
		len -= olen;
		dlb_wr16(pkt + m->opt_rdata_off - 2,
			 (uint16_t)(dlb_rd16(pkt + m->opt_rdata_off - 2) - olen));
	}
	{
		size_t rdlen = dlb_rd16(pkt + m->opt_rdata_off - 2);
		size_t end = m->opt_rdata_off + rdlen;

		if (len + ecslen > cap || len + ecslen > WIRE_MAX_MSG || rdlen + ecslen > 65535)
			return m->ecs_off != 0 ? len : orig;
		memmove(pkt + end + ecslen, pkt + end, len - end);
		memcpy(pkt + end, ecs, ecslen);
		dlb_wr16(pkt + m->opt_rdata_off - 2, (uint16_t)(rdlen + ecslen));
		*added = DLB_ECS_OPTION;
		return len + ecslen;
	}
}

size_t
dlb_wire_strip_ecs(uint8_t *pkt, size_t len, enum dlb_ecs_added added, int *scope)
{
	unsigned counts[3];
	size_t pos, opt_rr = 0, opt_rdata = 0, opt_end = 0;
	uint16_t opt_rdlen = 0;
	bool found = false;
	int r;

	if (scope != NULL)
		*scope = -1;
	if (added == DLB_ECS_NONE || len < DLB_DNS_HDR || dlb_rd16(pkt + 4) > 1)
		return len;
	counts[0] = dlb_rd16(pkt + 6);
	counts[1] = dlb_rd16(pkt + 8);
	counts[2] = dlb_rd16(pkt + 10);
	if ((size_t)(counts[0] + counts[1] + counts[2]) * 11 > len)
		return len;
	pos = DLB_DNS_HDR;
	if (dlb_rd16(pkt + 4) == 1) {
		r = dlb_wire_skip_name(pkt, len, pos);
		if (r < 0 || (size_t)r + 4 > len)
			return len;
		pos = (size_t)r + 4;
	}
	/* walk every record first: an answer that cannot be walked is left alone */
	for (int sec = 0; sec < 3; sec++) {
		for (unsigned i = 0; i < counts[sec]; i++) {
			size_t rr = pos, rdata;
			uint16_t type, rdlen;

			r = dlb_wire_skip_name(pkt, len, pos);
			if (r < 0 || len - (size_t)r < 10)
				return len;
			pos = (size_t)r;
			type = dlb_rd16(pkt + pos);
			rdlen = dlb_rd16(pkt + pos + 8);
			rdata = pos + 10;
			if (len - rdata < rdlen)
				return len;
			pos = rdata + rdlen;
			if (sec == 2 && type == DLB_TYPE_OPT && !found) {
				found = true;
				opt_rr = rr;
				opt_rdata = rdata;
				opt_rdlen = rdlen;
				opt_end = pos;
			}
		}
	}
	if (!found)
		return len;
	if (scope != NULL) {
		/* the cache's zero scope: only the SCOPE byte of the first ECS */
		for (size_t o = opt_rdata; o + 4 <= opt_rdata + opt_rdlen;) {
			size_t olen = 4u + dlb_rd16(pkt + o + 2);

			if (o + olen > opt_rdata + opt_rdlen)
				break;
			if (dlb_rd16(pkt + o) == DLB_EDNS_OPT_ECS) {
				if (olen >= 8)
					*scope = pkt[o + 7];
				break;
			}
			o += olen;
		}
	}
	if (added == DLB_ECS_OPT_RR) {
		memmove(pkt + opt_rr, pkt + opt_end, len - opt_end);
		dlb_wr16(pkt + 10, (uint16_t)(counts[2] - 1));
		return len - (opt_end - opt_rr);
	}
	/* remove the ECS option from the OPT RDATA, if the options are well formed */
	for (size_t o = opt_rdata; o + 4 <= opt_rdata + opt_rdlen;) {
		size_t olen = 4u + dlb_rd16(pkt + o + 2);

		if (o + olen > opt_rdata + opt_rdlen)
			return len;
		if (dlb_rd16(pkt + o) == DLB_EDNS_OPT_ECS) {
			memmove(pkt + o, pkt + o + olen, len - o - olen);
			dlb_wr16(pkt + opt_rdata - 2, (uint16_t)(opt_rdlen - olen));
			return len - olen;
		}
		o += olen;
	}
	return len;
}

const char *
dlb_wire_rcode_text(unsigned rcode)
{
	static const char *const texts[] = {
		"No Error", "Form Error", "Server Failure", "Non-Existent domain",
		"Not Implemented", "Query Refused", "Name Exists when it should not",
		"RR Set Exists when it should not", "RR Set that should exist does not",
		"Server Not Authoritative for zone / Not Authorized",
		"Name not contained in zone", "Err#11", "Err#12", "Err#13", "Err#14", "Err#15",
		"Bad OPT Version / TSIG Signature Failure", "Key not recognized",
		"Signature out of time window", "Bad TKEY Mode", "Duplicate key name",
		"Algorithm not supported", "Bad Truncation", "Bad/missing Server Cookie",
	};

	return rcode < sizeof(texts) / sizeof(texts[0]) ? texts[rcode] : NULL;
}

/* ---- names of DNS types ---------------------------------------------------- */

/* dnsdist's QType::names (1.7) */
const struct dlb_named dlb_qtype_names[] = {
	{ "A", 1 }, { "NS", 2 }, { "MD", 3 }, { "MF", 4 }, { "CNAME", 5 }, { "SOA", 6 },
	{ "MB", 7 }, { "MG", 8 }, { "MR", 9 }, { "NULL", 10 }, { "WKS", 11 }, { "PTR", 12 },
	{ "HINFO", 13 }, { "MINFO", 14 }, { "MX", 15 }, { "TXT", 16 }, { "RP", 17 },
	{ "AFSDB", 18 }, { "SIG", 24 }, { "KEY", 25 }, { "AAAA", 28 }, { "LOC", 29 },
	{ "SRV", 33 }, { "NAPTR", 35 }, { "KX", 36 }, { "CERT", 37 }, { "A6", 38 },
	{ "DNAME", 39 }, { "OPT", 41 }, { "APL", 42 }, { "DS", 43 }, { "SSHFP", 44 },
	{ "IPSECKEY", 45 }, { "RRSIG", 46 }, { "NSEC", 47 }, { "DNSKEY", 48 }, { "DHCID", 49 },
	{ "NSEC3", 50 }, { "NSEC3PARAM", 51 }, { "TLSA", 52 }, { "SMIMEA", 53 }, { "RKEY", 57 },
	{ "CDS", 59 }, { "CDNSKEY", 60 }, { "OPENPGPKEY", 61 }, { "CSYNC", 62 },
	{ "ZONEMD", 63 }, { "SVCB", 64 }, { "HTTPS", 65 }, { "SPF", 99 }, { "NID", 104 },
	{ "L32", 105 }, { "L64", 106 }, { "LP", 107 }, { "EUI48", 108 }, { "EUI64", 109 },
	{ "TKEY", 249 }, { "TSIG", 250 }, { "IXFR", 251 }, { "AXFR", 252 }, { "MAILB", 253 },
	{ "MAILA", 254 }, { "ANY", 255 }, { "URI", 256 }, { "CAA", 257 }, { "DLV", 32769 },
	{ "ADDR", 65400 }, { "ALIAS", 65401 }, { "LUA", 65402 },
	{ NULL, 0 },
};

const char *
dlb_qtype_text(unsigned t, char *buf, size_t bufsz)
{
	for (const struct dlb_named *v = dlb_qtype_names; v->name != NULL; v++) {
		if ((unsigned)v->value == t) {
			snprintf(buf, bufsz, "%s", v->name);
			return buf;
		}
	}
	snprintf(buf, bufsz, "TYPE%u", t);
	return buf;
}

bool
dlb_named_lookup(const struct dlb_named *v, const char *name, int *out)
{
	for (; v->name != NULL; v++) {
		if (strcasecmp(v->name, name) == 0) {
			*out = v->value;
			return true;
		}
	}
	return false;
}
