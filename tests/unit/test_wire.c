/*
 * test_wire.c - unit tests for the wire parser and answer builder
 * (bad-inputs §3.2 A rows 1-27 as they apply to parsing, B rows 32/34).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "dnslb/core/wire.h"

#define PB_MAX	4096	/* the test packet builder's capacity (pkt.h) */
#include "pkt.h"

/* A standard query "www.Example.COM A IN", RD, optional OPT. */
static void
pb_std_query(struct pb *p, bool opt)
{
	pb_hdr(p, 0x1234, DLB_F_RD, 1, 0, 0, opt ? 1 : 0);
	pb_question(p, "www.Example.COM", 1, 1);
	if (opt)
		pb_opt(p, 4096, 0x8000, NULL, 0);
}

static const uint8_t www_example_com_lc[] = "\3www\7example\3com";	/* + NUL = root */

/* ---- queries: bad-inputs §3.2 A ---- */

static void
test_query_valid(void **state)
{
	struct pb p;
	struct dlb_dnsmsg m;

	(void)state;
	pb_std_query(&p, false);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	assert_int_equal(m.id, 0x1234);
	assert_int_equal(m.flags, DLB_F_RD);
	assert_int_equal(m.qdcount, 1);
	assert_int_equal(m.ancount + m.nscount + m.arcount, 0);
	assert_int_equal(m.qname_off, 12);
	assert_int_equal(m.qname_len, 17);
	assert_memory_equal(m.qname_lc, www_example_com_lc, 17);
	/* #15: the packet keeps the client's case */
	assert_memory_equal(p.b + 12, "\3www\7Example\3COM", 17);
	assert_int_equal(m.qname_hash, dlb_wire_name_hash(www_example_com_lc, 17));
	assert_int_equal(m.qtype, 1);
	assert_int_equal(m.qclass, 1);
	assert_int_equal(m.question_end, 12 + 17 + 4);
	assert_false(m.has_opt);
	assert_int_equal(m.parsed_end, p.n);
	assert_false(m.trailing);
}

/* ---- the fast path against the general parser ---- */

static uint64_t fp_state = 0x9e3779b97f4a7c15ULL;

static uint32_t
fp_rand(void)
{
	/* xorshift64*: the same messages on every run */
	fp_state ^= fp_state >> 12;
	fp_state ^= fp_state << 25;
	fp_state ^= fp_state >> 27;
	return (uint32_t)((fp_state * 0x2545F4914F6CDD1DULL) >> 32);
}

/* Both parsers on @pkt[0..len), each into a struct filled with the same
 * garbage first: the same result and every byte of the struct the same. */
static void
fp_compare(const uint8_t *pkt, size_t len)
{
	static struct dlb_dnsmsg a, b;
	int ra, rb;

	memset(&a, 0xa5, sizeof(a));
	memset(&b, 0xa5, sizeof(b));
	ra = dlb_wire_parse_query(pkt, len, &a);
	rb = dlb_wire_parse_query_general(pkt, len, &b);
	assert_int_equal(ra, rb);
	assert_memory_equal(&a, &b, sizeof(a));
}

/* A random query of the shapes the fast path takes and of those next to them. */
static void
fp_message(struct pb *p)
{
	static const uint16_t flag_set[] = {
		0, DLB_F_RD, DLB_F_RD | DLB_F_CD, DLB_F_QR, DLB_F_TC, 0x0800 /* opcode 1 */,
		0xffff, DLB_F_RD | 0x0010 /* AD */
	};
	uint16_t flags = flag_set[fp_rand() % 8], ar = fp_rand() % 4 == 0 ? 0 : 1;
	uint16_t qd = 1, an = 0, ns = 0;
	unsigned r = fp_rand() % 16, nlabels = 1 + fp_rand() % 6;

	if (r == 0)
		qd = (uint16_t)(fp_rand() % 3);
	else if (r == 1)
		an = 1;
	else if (r == 2)
		ns = 1;
	else if (r == 3)
		ar = (uint16_t)(2 + fp_rand() % 2);
	pb_hdr(p, (uint16_t)fp_rand(), flags, qd, an, ns, ar);
	if (fp_rand() % 8 == 0)
		nlabels = 4 + fp_rand() % 3;	/* long labels: around the 255 bound */
	for (unsigned i = 0; i < nlabels; i++) {
		uint8_t len = nlabels >= 4 && fp_rand() % 2 ? 63 : (uint8_t)(1 + fp_rand() % 20);

		if (p->n + 1 + len > 12 + 254)
			break;
		pb_u8(p, len);
		for (uint8_t j = 0; j < len; j++) {
			static const char chars[] = "abcXYZ09-_.Az";
			uint8_t c = fp_rand() % 16 == 0 ? (uint8_t)fp_rand()
							: (uint8_t)chars[fp_rand() % 13];

			pb_u8(p, c);
		}
	}
	pb_u8(p, 0);
	pb_u16(p, (uint16_t)(fp_rand() % 300));
	pb_u16(p, fp_rand() % 4 == 0 ? (uint16_t)fp_rand() : 1);
	for (uint16_t i = 0; i < an + ns; i++) {
		pb_u8(p, 0xc0);
		pb_u8(p, 12);
		pb_u16(p, 1);
		pb_u16(p, 1);
		pb_u32(p, 60);
		pb_u16(p, 4);
		pb_u32(p, 0x7f000001);
	}
	for (uint16_t i = 0; i < ar; i++) {
		uint8_t opts[64];
		size_t olen = 0;
		unsigned nopts = fp_rand() % 4;

		if (i > 0 && fp_rand() % 2) {	/* a second record: an A, or another OPT */
			pb_u8(p, 0);
			pb_u16(p, 1);
			pb_u16(p, 1);
			pb_u32(p, 0);
			pb_u16(p, 0);
			continue;
		}
		for (unsigned k = 0; k < nopts; k++) {
			static const uint16_t codes[] = { DLB_EDNS_OPT_ECS, DLB_EDNS_OPT_COOKIE, 12, 3, 65001 };
			uint16_t code = codes[fp_rand() % 5], l = (uint16_t)(fp_rand() % 9);

			if (olen + 4 + l > sizeof(opts))
				break;
			dlb_wr16(opts + olen, code);
			dlb_wr16(opts + olen + 2, l);
			for (uint16_t j = 0; j < l; j++)
				opts[olen + 4 + j] = (uint8_t)fp_rand();
			olen += 4 + l;
		}
		if (olen > 0 && fp_rand() % 8 == 0) {
			size_t cut = 1 + fp_rand() % 3;	/* the last option overruns */

			if (cut < olen)
				olen -= cut;
		}
		pb_opt(p, (uint16_t)fp_rand(), fp_rand() % 2 ? 0x8000 : (uint32_t)fp_rand(),
		       olen > 0 ? opts : NULL, (uint16_t)olen);
	}
	if (fp_rand() % 8 == 0) {
		unsigned extra = 1 + fp_rand() % 5;

		for (unsigned i = 0; i < extra; i++)
			pb_u8(p, (uint8_t)fp_rand());
	}
}

static void
test_query_fast_path_matches_general(void **state)
{
	struct pb p;

	(void)state;
	for (int i = 0; i < 3000; i++) {
		uint8_t mut[PB_MAX];

		p.n = 0;
		fp_message(&p);
		for (size_t l = 0; l <= p.n; l++)	/* every truncation */
			fp_compare(p.b, l);
		for (int k = 0; k < 40; k++) {		/* single-byte mutations */
			size_t at = fp_rand() % p.n;

			memcpy(mut, p.b, p.n);
			mut[at] = fp_rand() % 4 == 0 ? (uint8_t)(mut[at] ^ (1u << (fp_rand() % 8)))
						     : (uint8_t)fp_rand();
			fp_compare(mut, p.n);
		}
	}
	/* the common query itself, with and without an OPT */
	pb_std_query(&p, false);
	fp_compare(p.b, p.n);
	pb_std_query(&p, true);
	fp_compare(p.b, p.n);
}

/* #1 */
static void
test_query_empty_and_short(void **state)
{
	struct pb p;
	struct dlb_dnsmsg m;

	(void)state;
	assert_int_equal(dlb_wire_parse_query(NULL, 0, &m), DLB_ETRUNC);
	pb_std_query(&p, false);
	for (size_t l = 1; l < DLB_DNS_HDR; l++)
		assert_int_equal(dlb_wire_parse_query(p.b, l, &m), DLB_ETRUNC);
	/* header claims a question that is not there */
	assert_int_equal(dlb_wire_parse_query(p.b, DLB_DNS_HDR, &m), DLB_ETRUNC);
}

/* #2 */
static void
test_query_qdcount0(void **state)
{
	struct pb p;
	struct dlb_dnsmsg m;

	(void)state;
	pb_hdr(&p, 7, DLB_F_RD, 0, 0, 0, 0);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_EEMPTY);
	assert_int_equal(m.id, 7);
	assert_int_equal(m.qname_len, 0);
	assert_int_equal(m.question_end, 0);
	assert_false(m.has_opt);
	assert_int_equal(m.parsed_end, 12);

	/* the OPT is still parsed so a NOTIMP can carry one */
	pb_hdr(&p, 7, 0, 0, 0, 0, 1);
	pb_opt(&p, 1400, 0x8000, NULL, 0);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_EEMPTY);
	assert_true(m.has_opt);
	assert_int_equal(m.udp_size, 1400);
	assert_true(m.do_bit);
	assert_int_equal(m.opt_off, 12);
}

/* #3, #4, #8 */
static void
test_query_truncated(void **state)
{
	struct pb p;
	struct dlb_dnsmsg m;

	(void)state;
	pb_std_query(&p, false);
	/* every cut inside the question */
	for (size_t l = DLB_DNS_HDR; l < p.n; l++)
		assert_int_equal(dlb_wire_parse_query(p.b, l, &m), DLB_ETRUNC);

	/* qname without its root label */
	pb_hdr(&p, 1, 0, 1, 0, 0, 0);
	pb_bytes(&p, "\3www\3com", 8);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_ETRUNC);

	/* #4: qname complete, qtype/qclass missing or half there */
	pb_hdr(&p, 1, 0, 1, 0, 0, 0);
	pb_name(&p, "www.example.com");
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_ETRUNC);
	pb_u16(&p, 1);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_ETRUNC);
	pb_u8(&p, 0);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_ETRUNC);
	pb_u8(&p, 1);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);

	/* #8: label says 50, 10 octets left */
	pb_hdr(&p, 1, 0, 1, 0, 0, 0);
	pb_u8(&p, 50);
	pb_bytes(&p, "0123456789", 10);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_ETRUNC);
}

/* #5, #6 */
static void
test_query_qr_tc(void **state)
{
	struct pb p;
	struct dlb_dnsmsg m;

	(void)state;
	pb_std_query(&p, true);
	dlb_wr16(p.b + 2, DLB_F_QR | DLB_F_RD);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_ENOTQUERY);
	/* otherwise parsed */
	assert_int_equal(m.qtype, 1);
	assert_int_equal(m.qname_len, 17);
	assert_true(m.has_opt);

	dlb_wr16(p.b + 2, DLB_F_TC);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_ENOTQUERY);

	/* wins over a parse error: a malformed response is never answered */
	dlb_wr16(p.b + 2, DLB_F_QR);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n - 3, &m), DLB_ENOTQUERY);
	dlb_wr16(p.b + 2, DLB_F_QR);
	p.b[12] = 0x40;
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_ENOTQUERY);
	/* a short header is still just short */
	assert_int_equal(dlb_wire_parse_query(p.b, 4, &m), DLB_ETRUNC);
}

/* #7 */
static void
test_query_label_types(void **state)
{
	static const uint8_t sixtyfour[64] = { 'a' };
	struct pb p;
	struct dlb_dnsmsg m;

	(void)state;
	pb_hdr(&p, 1, 0, 1, 0, 0, 0);
	pb_u8(&p, 0x40);	/* "label of 64" = extended label type 01 */
	pb_bytes(&p, sixtyfour, 64);
	pb_u8(&p, 0);
	pb_u32(&p, 0x00010001);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_EMALF);

	pb_hdr(&p, 1, 0, 1, 0, 0, 0);
	pb_bytes(&p, "\3www\x80\0\0\1\0\1", 10);	/* reserved type 10 */
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_EMALF);

	pb_hdr(&p, 1, 0, 1, 0, 0, 0);
	pb_bytes(&p, "\xbf\0\0\1\0\1", 6);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_EMALF);
}

/* labels of the given lengths ('x' filled) then the root */
static void
pb_long_name(struct pb *p, const unsigned *lens, size_t n)
{
	uint8_t lab[63];

	memset(lab, 'X', sizeof(lab));
	for (size_t i = 0; i < n; i++) {
		pb_u8(p, (uint8_t)lens[i]);
		pb_bytes(p, lab, lens[i]);
	}
	pb_u8(p, 0);
}

/* #9, #10 */
static void
test_query_name_length(void **state)
{
	static const unsigned l255[] = { 63, 63, 63, 61 };
	static const unsigned l256[] = { 63, 63, 63, 62 };
	static const unsigned l5x63[] = { 63, 63, 63, 63, 63 };
	struct pb p;
	struct dlb_dnsmsg m;

	(void)state;
	pb_hdr(&p, 1, 0, 1, 0, 0, 0);
	pb_long_name(&p, l255, 4);
	pb_u32(&p, 0x00010001);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	assert_int_equal(m.qname_len, 255);
	assert_int_equal(m.qname_lc[1], 'x');
	assert_int_equal(m.qname_lc[254], 0);
	assert_int_equal(m.question_end, 12 + 255 + 4);

	pb_hdr(&p, 1, 0, 1, 0, 0, 0);
	pb_long_name(&p, l256, 4);
	pb_u32(&p, 0x00010001);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_EMALF);

	pb_hdr(&p, 1, 0, 1, 0, 0, 0);
	pb_long_name(&p, l5x63, 5);
	pb_u32(&p, 0x00010001);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_EMALF);
}

/* #11, #12: no compression in the first question at all */
static void
test_query_pointer_in_question(void **state)
{
	struct pb p;
	struct dlb_dnsmsg m;

	(void)state;
	pb_hdr(&p, 1, 0, 1, 0, 0, 0);
	pb_ptr(&p, 12);		/* itself */
	pb_u32(&p, 0x00010001);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_EMALF);

	pb_hdr(&p, 1, 0, 1, 0, 0, 0);
	pb_ptr(&p, 2);		/* into the header */
	pb_u32(&p, 0x00010001);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_EMALF);

	pb_hdr(&p, 1, 0, 1, 0, 0, 0);
	pb_ptr(&p, 0x3fff);	/* past the end */
	pb_u32(&p, 0x00010001);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_EMALF);

	pb_hdr(&p, 1, 0, 1, 0, 0, 0);
	pb_bytes(&p, "\3www", 4);
	pb_ptr(&p, 12);		/* after a label, back to the start */
	pb_u32(&p, 0x00010001);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_EMALF);
}

/* #14 */
static void
test_query_binary_labels(void **state)
{
	static const uint8_t name[] = "\5a\0.\xff" "B\3com";	/* + root */
	struct pb p;
	struct dlb_dnsmsg m;

	(void)state;
	pb_hdr(&p, 1, 0, 1, 0, 0, 0);
	pb_bytes(&p, name, sizeof(name));
	pb_u32(&p, 0x00100001);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	assert_int_equal(m.qname_len, sizeof(name));
	assert_memory_equal(m.qname_lc, "\5a\0.\xff" "b\3com", sizeof(name));
	assert_int_equal(m.qtype, 16);
}

/* #16, #17 */
static void
test_query_qdcount2(void **state)
{
	struct pb p;
	struct dlb_dnsmsg m;

	(void)state;
	pb_hdr(&p, 1, 0, 2, 0, 0, 0);
	pb_question(&p, "example.com", 1, 1);
	pb_bytes(&p, "\3www", 4);
	pb_ptr(&p, 12);		/* second question may be compressed */
	pb_u32(&p, 0x001c0001);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	assert_int_equal(m.qdcount, 2);
	assert_int_equal(m.qtype, 1);
	assert_int_equal(m.qname_len, 13);
	assert_int_equal(m.question_end, 12 + 13 + 4);
	assert_int_equal(m.parsed_end, p.n);

	/* second question pointing forward */
	dlb_wr16(p.b + 12 + 13 + 4 + 4, 0xc000 | 60);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_EMALF);

	/* #17: only one of two questions present */
	pb_hdr(&p, 1, 0, 2, 0, 0, 0);
	pb_question(&p, "a", 1, 1);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_ETRUNC);
	pb_hdr(&p, 1, 0, 2, 0, 0, 0);
	pb_question(&p, "example.com", 1, 1);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_ETRUNC);
}

/* #18, #19, #26 */
static void
test_query_unusual_but_valid(void **state)
{
	struct pb p;
	struct dlb_dnsmsg m;

	(void)state;
	pb_hdr(&p, 0, 4 << 11, 1, 0, 0, 0);	/* NOTIFY, ID 0 */
	pb_question(&p, ".", 65535, 255);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	assert_int_equal(m.id, 0);
	assert_int_equal(DLB_OPCODE(m.flags), 4);
	assert_int_equal(m.qname_len, 1);
	assert_int_equal(m.qname_lc[0], 0);
	assert_int_equal(m.qtype, 65535);
	assert_int_equal(m.qclass, 255);

	pb_hdr(&p, 0, 15 << 11, 1, 0, 0, 0);
	pb_question(&p, "x", 0, 3);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	assert_int_equal(DLB_OPCODE(m.flags), 15);
	assert_int_equal(m.qtype, 0);
	assert_int_equal(m.qclass, 3);
}

/* #20, #27 */
static void
test_query_trailing(void **state)
{
	struct pb p;
	struct dlb_dnsmsg m;
	uint8_t *big;

	(void)state;
	pb_std_query(&p, false);
	pb_bytes(&p, "garbage", 7);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	assert_true(m.trailing);
	assert_int_equal(m.parsed_end, 12 + 17 + 4);
	assert_int_equal(m.parsed_end, m.question_end);

	/* 65535 octets, mostly trailing; one more is not a DNS message */
	big = calloc(1, 65536);
	assert_non_null(big);
	pb_std_query(&p, true);
	memcpy(big, p.b, p.n);
	assert_int_equal(dlb_wire_parse_query(big, 65535, &m), DLB_OK);
	assert_true(m.trailing);
	assert_true(m.has_opt);
	assert_int_equal(m.parsed_end, p.n);
	assert_int_equal(dlb_wire_parse_query(big, 65536, &m), DLB_EMALF);
	free(big);
}

/* #21 */
static void
test_query_bad_opt(void **state)
{
	struct pb p;
	struct dlb_dnsmsg m;

	(void)state;
	/* arcount = 1, no record */
	pb_hdr(&p, 1, 0, 1, 0, 0, 1);
	pb_question(&p, "example.com", 1, 1);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_ETRUNC);
	assert_false(m.has_opt);

	/* OPT RDLENGTH beyond the packet */
	pb_hdr(&p, 1, 0, 1, 0, 0, 1);
	pb_question(&p, "example.com", 1, 1);
	pb_opt(&p, 1232, 0, NULL, 0);
	dlb_wr16(p.b + p.n - 2, 8);
	pb_bytes(&p, "\0\0\0\0", 4);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_ETRUNC);
	assert_false(m.has_opt);

	/* two OPTs */
	pb_hdr(&p, 1, 0, 1, 0, 0, 2);
	pb_question(&p, "example.com", 1, 1);
	pb_opt(&p, 1232, 0, NULL, 0);
	pb_opt(&p, 4096, 0x8000, NULL, 0);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_EMALF);

	/* OPT with a non-root owner, literal or compressed */
	pb_hdr(&p, 1, 0, 1, 0, 0, 1);
	pb_question(&p, "example.com", 1, 1);
	pb_name(&p, "example.com");
	pb_rr_tail(&p, DLB_TYPE_OPT, 1232, 0, NULL, 0);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_EMALF);
	pb_hdr(&p, 1, 0, 1, 0, 0, 1);
	pb_question(&p, "example.com", 1, 1);
	pb_ptr(&p, 12);
	pb_rr_tail(&p, DLB_TYPE_OPT, 1232, 0, NULL, 0);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_EMALF);

	/* OPT in the answer and in the authority section */
	pb_hdr(&p, 1, 0, 1, 1, 0, 0);
	pb_question(&p, "example.com", 1, 1);
	pb_opt(&p, 1232, 0, NULL, 0);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_EMALF);
	pb_hdr(&p, 1, 0, 1, 0, 1, 0);
	pb_question(&p, "example.com", 1, 1);
	pb_opt(&p, 1232, 0, NULL, 0);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_EMALF);
}

/* #22, #23 */
static void
test_query_edns_fields(void **state)
{
	struct pb p;
	struct dlb_dnsmsg m;

	(void)state;
	pb_hdr(&p, 1, 0, 1, 0, 0, 1);
	pb_question(&p, "example.com", 1, 1);
	pb_opt(&p, 0, 0x00018000, NULL, 0);	/* version 1, DO */
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	assert_true(m.has_opt);
	assert_int_equal(m.edns_version, 1);
	assert_int_equal(m.ext_rcode, 0);
	assert_true(m.do_bit);
	assert_int_equal(m.udp_size, 0);
	assert_int_equal(m.opt_off, 12 + 13 + 4);
	assert_int_equal(m.opt_rdata_off, 12 + 13 + 4 + 11);
	assert_int_equal(m.opt_rdlen, 0);
	assert_int_equal(m.ecs_off, 0);
	assert_int_equal(m.cookie_off, 0);

	pb_hdr(&p, 1, 0, 1, 0, 0, 1);
	pb_question(&p, "example.com", 1, 1);
	pb_opt(&p, 65535, 0x02000000, NULL, 0);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	assert_int_equal(m.udp_size, 65535);
	assert_int_equal(m.ext_rcode, 2);
	assert_int_equal(m.edns_version, 0);
	assert_false(m.do_bit);
}

/* #24 (offsets only), option framing */
static void
test_query_edns_options(void **state)
{
	static const uint8_t opts[] = {
		0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8,		/* COOKIE, client only */
		0, 12, 0, 2, 0, 0,				/* PADDING */
		0, 8, 0, 7, 0, 1, 24, 0, 192, 0, 2,		/* ECS 192.0.2/24 */
	};
	size_t opt_at = 12 + 13 + 4;
	struct pb p;
	struct dlb_dnsmsg m;
	uint8_t dup[sizeof(opts) + 11];

	(void)state;
	pb_hdr(&p, 1, 0, 1, 0, 0, 1);
	pb_question(&p, "example.com", 1, 1);
	pb_opt(&p, 1232, 0, opts, sizeof(opts));
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	assert_int_equal(m.opt_rdata_off, opt_at + 11);
	assert_int_equal(m.opt_rdlen, sizeof(opts));
	assert_int_equal(m.cookie_off, opt_at + 11);
	assert_int_equal(m.ecs_off, opt_at + 11 + 12 + 6);
	assert_int_equal(dlb_rd16(p.b + m.ecs_off), DLB_EDNS_OPT_ECS);
	assert_int_equal(dlb_rd16(p.b + m.cookie_off), DLB_EDNS_OPT_COOKIE);

	/* an option running past the RDATA (but not past the packet) */
	pb_hdr(&p, 1, 0, 1, 0, 0, 1);
	pb_question(&p, "example.com", 1, 1);
	pb_opt(&p, 1232, 0, opts, 12);
	dlb_wr16(p.b + p.n - 10, 9);
	pb_bytes(&p, "xx", 2);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_EMALF);
	assert_false(m.has_opt);

	/* a stub of an option header */
	pb_hdr(&p, 1, 0, 1, 0, 0, 1);
	pb_question(&p, "example.com", 1, 1);
	pb_opt(&p, 1232, 0, opts, 3);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_EMALF);

	/* two ECS options (smuggling), then two cookies */
	memcpy(dup, opts + 18, 11);
	memcpy(dup + 11, opts, sizeof(opts));
	pb_hdr(&p, 1, 0, 1, 0, 0, 1);
	pb_question(&p, "example.com", 1, 1);
	pb_opt(&p, 1232, 0, dup, sizeof(dup));
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_EMALF);
	pb_hdr(&p, 1, 0, 1, 0, 0, 1);
	pb_question(&p, "example.com", 1, 1);
	pb_opt(&p, 1232, 0, opts, 12);
	dlb_wr16(p.b + p.n - 14, 24);	/* RDLENGTH: room for a second cookie */
	pb_bytes(&p, opts, 12);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_EMALF);
}

/* #25 and huge counts */
static void
test_query_with_records(void **state)
{
	static const uint8_t a[4] = { 192, 0, 2, 1 };
	struct pb p;
	struct dlb_dnsmsg m;

	(void)state;
	pb_hdr(&p, 1, 0, 1, 1, 1, 2);
	pb_question(&p, "example.com", 1, 1);
	pb_ptr(&p, 12);
	pb_rr_tail(&p, 1, 1, 300, a, 4);
	pb_bytes(&p, "\2ns", 3);
	pb_ptr(&p, 12);
	pb_rr_tail(&p, 2, 1, 300, "\2ns\xc0\x0c", 5);
	pb_name(&p, "glue.example.net");
	pb_rr_tail(&p, 1, 1, 300, a, 4);
	pb_opt(&p, 1232, 0, NULL, 0);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	assert_int_equal(m.ancount, 1);
	assert_int_equal(m.nscount, 1);
	assert_int_equal(m.arcount, 2);
	assert_true(m.has_opt);
	assert_int_equal(m.opt_off, p.n - 11);
	assert_int_equal(m.parsed_end, p.n);
	assert_false(m.trailing);

	/* answer RDATA past the end */
	pb_hdr(&p, 1, 0, 1, 1, 0, 0);
	pb_question(&p, "example.com", 1, 1);
	pb_ptr(&p, 12);
	pb_rr_tail(&p, 1, 1, 300, a, 4);
	dlb_wr16(p.b + p.n - 6, 5);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_ETRUNC);

	/* answer owner pointing forward */
	pb_hdr(&p, 1, 0, 1, 1, 0, 0);
	pb_question(&p, "example.com", 1, 1);
	pb_ptr(&p, 40);
	pb_rr_tail(&p, 1, 1, 300, a, 4);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_EMALF);

	/* counts that cannot fit the length: rejected before any loop */
	pb_hdr(&p, 1, 0, 1, 65535, 65535, 65535);
	pb_question(&p, "example.com", 1, 1);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_ETRUNC);
	assert_int_equal(m.qname_len, 0);	/* not even the question was read */
	assert_int_equal(m.ancount, 65535);
	pb_hdr(&p, 1, 0, 65535, 0, 0, 0);
	pb_question(&p, "example.com", 1, 1);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_ETRUNC);
}

/* ---- names ---- */

/*
 * 12: "\3www\7example\3com\0" (17), 29: "\3foo" + ptr to 16 ("example.com"),
 * 35: ptr to 29.
 */
static void
pb_name_msg(struct pb *p)
{
	pb_hdr(p, 1, 0, 0, 0, 0, 0);
	pb_name(p, "www.EXAMPLE.com");
	pb_bytes(p, "\3Foo", 4);
	pb_ptr(p, 16);
	pb_ptr(p, 29);
}

static void
test_decode_name_pointers(void **state)
{
	struct pb p;
	uint8_t out[DLB_MAX_NAME];
	size_t next = 0;
	unsigned work = 0;

	(void)state;
	pb_name_msg(&p);
	assert_int_equal(dlb_wire_decode_name(p.b, p.n, 12, out, &next, &work), 17);
	assert_memory_equal(out, www_example_com_lc, 17);
	assert_int_equal(next, 29);
	assert_int_equal(work, 3);

	assert_int_equal(dlb_wire_decode_name(p.b, p.n, 29, out, &next, &work), 17);
	assert_memory_equal(out, "\3foo\7example\3com", 17);
	assert_int_equal(next, 35);	/* after the first pointer */
	assert_int_equal(work, 3 + 4);

	assert_int_equal(dlb_wire_decode_name(p.b, p.n, 35, out, &next, NULL), 17);
	assert_memory_equal(out, "\3foo\7example\3com", 17);
	assert_int_equal(next, 37);

	assert_int_equal(dlb_wire_skip_name(p.b, p.n, 12), 29);
	assert_int_equal(dlb_wire_skip_name(p.b, p.n, 29), 35);
	assert_int_equal(dlb_wire_skip_name(p.b, p.n, 35), 37);

	/* truncated pointer, truncated label, nothing at all */
	assert_int_equal(dlb_wire_decode_name(p.b, p.n - 1, 35, out, &next, NULL), DLB_ETRUNC);
	assert_int_equal(dlb_wire_skip_name(p.b, p.n - 1, 35), DLB_ETRUNC);
	assert_int_equal(dlb_wire_decode_name(p.b, 14, 12, out, &next, NULL), DLB_ETRUNC);
	assert_int_equal(dlb_wire_skip_name(p.b, 14, 12), DLB_ETRUNC);
	assert_int_equal(dlb_wire_decode_name(p.b, p.n, p.n, out, &next, NULL), DLB_ETRUNC);
	assert_int_equal(dlb_wire_skip_name(p.b, p.n, p.n), DLB_ETRUNC);
}

static void
test_decode_name_bad_pointers(void **state)
{
	struct pb p;
	uint8_t out[DLB_MAX_NAME];
	size_t next;
	unsigned work;

	(void)state;
	/* self loop */
	pb_hdr(&p, 1, 0, 0, 0, 0, 0);
	pb_name(&p, "a");
	pb_ptr(&p, 15);
	assert_int_equal(dlb_wire_decode_name(p.b, p.n, 15, out, &next, NULL), DLB_EMALF);
	assert_int_equal(dlb_wire_skip_name(p.b, p.n, 15), DLB_EMALF);

	/* two-pointer loop: 15 -> 17 -> 15 (the forward leg is refused) */
	pb_hdr(&p, 1, 0, 0, 0, 0, 0);
	pb_name(&p, "a");
	pb_ptr(&p, 17);
	pb_ptr(&p, 15);
	assert_int_equal(dlb_wire_decode_name(p.b, p.n, 15, out, &next, NULL), DLB_EMALF);
	assert_int_equal(dlb_wire_decode_name(p.b, p.n, 17, out, &next, NULL), DLB_EMALF);

	/* label then a pointer back into the same name ("\1b" + ptr to its own start) */
	pb_hdr(&p, 1, 0, 0, 0, 0, 0);
	pb_name(&p, "a");
	pb_bytes(&p, "\1b", 2);
	pb_ptr(&p, 15);
	assert_int_equal(dlb_wire_decode_name(p.b, p.n, 15, out, &next, NULL), DLB_EMALF);

	/*
	 * a pointer backwards that lands on a label sequence running forward
	 * over the pointer: "\4" at 15 swallows the pointer at 16..17 then
	 * reads the pointer at 20 -> 15: refused as not before segment start 15
	 */
	pb_hdr(&p, 1, 0, 0, 0, 0, 0);
	pb_name(&p, "a");		/* 12..14 */
	pb_u8(&p, 4);			/* 15 */
	pb_ptr(&p, 15);			/* 16 */
	pb_bytes(&p, "zz", 2);		/* 18 */
	pb_ptr(&p, 15);			/* 20 */
	work = 0;
	assert_int_equal(dlb_wire_decode_name(p.b, p.n, 16, out, &next, &work), DLB_EMALF);
	assert_int_equal(work, 3);	/* refused at once, not after DLB_WIRE_MAX_HOPS */

	/* forward, into the header, past the end */
	pb_hdr(&p, 1, 0, 0, 0, 0, 0);
	pb_ptr(&p, 14);
	pb_name(&p, "a");
	assert_int_equal(dlb_wire_decode_name(p.b, p.n, 12, out, &next, NULL), DLB_EMALF);
	assert_int_equal(dlb_wire_skip_name(p.b, p.n, 12), DLB_EMALF);
	dlb_wr16(p.b + 12, 0xc000 | 4);
	assert_int_equal(dlb_wire_decode_name(p.b, p.n, 12, out, &next, NULL), DLB_EMALF);
	assert_int_equal(dlb_wire_skip_name(p.b, p.n, 12), DLB_EMALF);
	dlb_wr16(p.b + 12, 0xc000 | 0x3fff);
	assert_int_equal(dlb_wire_decode_name(p.b, p.n, 12, out, &next, NULL), DLB_EMALF);

	/* label types 01 and 10 */
	pb_hdr(&p, 1, 0, 0, 0, 0, 0);
	pb_bytes(&p, "\x41\0", 2);
	assert_int_equal(dlb_wire_decode_name(p.b, p.n, 12, out, &next, NULL), DLB_EMALF);
	assert_int_equal(dlb_wire_skip_name(p.b, p.n, 12), DLB_EMALF);
	p.b[12] = 0x80;
	assert_int_equal(dlb_wire_decode_name(p.b, p.n, 12, out, &next, NULL), DLB_EMALF);
}

/* root at 12, then pointer i (i >= 1) at 11 + 2i pointing at the one before */
static void
pb_pointer_chain(struct pb *p, unsigned n)
{
	pb_hdr(p, 1, 0, 0, 0, 0, 0);
	pb_u8(p, 0);
	for (unsigned i = 1; i <= n; i++)
		pb_ptr(p, (uint16_t)(i == 1 ? 12 : 11 + 2 * (i - 1)));
}

static void
test_decode_name_hops_and_budget(void **state)
{
	struct pb p;
	uint8_t out[DLB_MAX_NAME];
	size_t next;
	unsigned work = 0;

	(void)state;
	pb_pointer_chain(&p, DLB_WIRE_MAX_HOPS + 1);
	/* pointer i follows i hops */
	assert_int_equal(dlb_wire_decode_name(p.b, p.n, 11 + 2 * DLB_WIRE_MAX_HOPS, out, &next,
					      &work), 1);
	assert_int_equal(out[0], 0);
	assert_int_equal(next, 13 + 2 * DLB_WIRE_MAX_HOPS);
	assert_int_equal(work, DLB_WIRE_MAX_HOPS);
	assert_int_equal(dlb_wire_decode_name(p.b, p.n, 11 + 2 * (DLB_WIRE_MAX_HOPS + 1), out,
					      &next, NULL), DLB_EMALF);
	/* skipping never follows, so the long chain is fine there */
	assert_int_equal(dlb_wire_skip_name(p.b, p.n, 11 + 2 * (DLB_WIRE_MAX_HOPS + 1)),
			 13 + 2 * (DLB_WIRE_MAX_HOPS + 1));

	/* per-message budget: 100 hops each, the 41st decode crosses 4096 */
	work = 0;
	for (int i = 0; i < 40; i++) {
		assert_int_equal(dlb_wire_decode_name(p.b, p.n, 11 + 2 * 100, out, &next, &work),
				 1);
	}
	assert_int_equal(work, 4000);
	assert_int_equal(dlb_wire_decode_name(p.b, p.n, 11 + 2 * 100, out, &next, &work),
			 DLB_EMALF);
	assert_int_equal(work, DLB_WIRE_MAX_WORK);
	/* spent for the rest of this message, even for a plain name */
	assert_int_equal(dlb_wire_decode_name(p.b, p.n, 13, out, &next, &work), DLB_EMALF);
	assert_int_equal(work, DLB_WIRE_MAX_WORK);
	/* a fresh budget per call without a counter */
	assert_int_equal(dlb_wire_decode_name(p.b, p.n, 11 + 2 * 100, out, &next, NULL), 1);
}

static void
test_decode_name_length(void **state)
{
	static const unsigned l3[] = { 63, 63, 63 };
	struct pb p;
	uint8_t out[DLB_MAX_NAME];
	size_t next;
	uint8_t lab[63];

	(void)state;
	memset(lab, 'Q', sizeof(lab));
	pb_hdr(&p, 1, 0, 0, 0, 0, 0);
	pb_long_name(&p, l3, 3);	/* 12..204, 193 octets */
	/* at 205: 62 + 193 = 255 octets decompressed, fits */
	pb_u8(&p, 61);
	pb_bytes(&p, lab, 61);
	pb_ptr(&p, 12);
	/* at 269: 63 + 193 = 256, too long */
	pb_u8(&p, 62);
	pb_bytes(&p, lab, 62);
	pb_ptr(&p, 12);
	assert_int_equal(dlb_wire_decode_name(p.b, p.n, 205, out, &next, NULL), 255);
	assert_int_equal(out[0], 61);
	assert_int_equal(out[1], 'q');
	assert_int_equal(out[62], 63);
	assert_int_equal(out[254], 0);
	assert_int_equal(next, 269);
	assert_int_equal(dlb_wire_decode_name(p.b, p.n, 269, out, &next, NULL), DLB_EMALF);
	/* skip does not see the pointed-to part */
	assert_int_equal(dlb_wire_skip_name(p.b, p.n, 269), 269 + 63 + 2);
}

static void
test_name_to_text(void **state)
{
	static const uint8_t bin[] = "\x09" "a.b\\c\0 \xff~" "\3com";
	char txt[DLB_WIRE_NAME_TEXT_MAX];
	uint8_t big[DLB_MAX_NAME];
	size_t n = 0;

	(void)state;
	assert_int_equal(dlb_wire_name_to_text(www_example_com_lc, 17, txt, sizeof(txt)), 16);
	assert_string_equal(txt, "www.example.com.");
	assert_int_equal(dlb_wire_name_to_text((const uint8_t *)"", 1, txt, sizeof(txt)), 1);
	assert_string_equal(txt, ".");
	assert_int_equal(dlb_wire_name_to_text(bin, sizeof(bin), txt, sizeof(txt)), 25);
	assert_string_equal(txt, "a\\.b\\\\c\\000\\032\\255~.com.");

	/* exact fit and one short */
	assert_int_equal(dlb_wire_name_to_text(www_example_com_lc, 17, txt, 17), 16);
	assert_int_equal(dlb_wire_name_to_text(www_example_com_lc, 17, txt, 16), DLB_ESPACE);
	assert_int_equal(dlb_wire_name_to_text((const uint8_t *)"", 1, txt, 1), DLB_ESPACE);

	/* malformed wire names */
	assert_int_equal(dlb_wire_name_to_text(www_example_com_lc, 16, txt, sizeof(txt)),
			 DLB_EINVAL);
	assert_int_equal(dlb_wire_name_to_text((const uint8_t *)"\5ab", 3, txt, sizeof(txt)),
			 DLB_EINVAL);
	assert_int_equal(dlb_wire_name_to_text((const uint8_t *)"\x40", 2, txt, sizeof(txt)),
			 DLB_EINVAL);
	assert_int_equal(dlb_wire_name_to_text((const uint8_t *)"\0\0", 2, txt, sizeof(txt)),
			 DLB_EINVAL);
	assert_int_equal(dlb_wire_name_to_text(www_example_com_lc, 0, txt, sizeof(txt)),
			 DLB_EINVAL);

	/* worst case: 250 octets of \255 in four labels */
	for (unsigned l = 0; l < 4; l++) {
		unsigned ll = l < 3 ? 63 : 61;

		big[n++] = (uint8_t)ll;
		memset(big + n, 0xff, ll);
		n += ll;
	}
	big[n++] = 0;
	assert_int_equal(n, 255);
	assert_int_equal(dlb_wire_name_to_text(big, n, txt, sizeof(txt)),
			 DLB_WIRE_NAME_TEXT_MAX - 1);
	assert_int_equal(dlb_wire_name_to_text(big, n, txt, sizeof(txt) - 1), DLB_ESPACE);
}

static void
test_name_from_text(void **state)
{
	uint8_t w[DLB_MAX_NAME + 8];
	char txt[DLB_WIRE_NAME_TEXT_MAX];
	char name[300];

	(void)state;
	assert_int_equal(dlb_wire_name_from_text("www.example.com", w, sizeof(w)), 17);
	assert_memory_equal(w, www_example_com_lc, 17);
	assert_int_equal(dlb_wire_name_from_text("www.example.com.", w, sizeof(w)), 17);
	assert_memory_equal(w, www_example_com_lc, 17);
	assert_int_equal(dlb_wire_name_from_text("WWW.Example.com", w, sizeof(w)), 17);
	assert_memory_equal(w, "\3WWW\7Example\3com", 17);	/* case kept */
	assert_int_equal(dlb_wire_name_from_text(".", w, sizeof(w)), 1);
	assert_int_equal(w[0], 0);

	assert_int_equal(dlb_wire_name_from_text("", w, sizeof(w)), DLB_EINVAL);
	assert_int_equal(dlb_wire_name_from_text(NULL, w, sizeof(w)), DLB_EINVAL);
	assert_int_equal(dlb_wire_name_from_text("a..b", w, sizeof(w)), DLB_EINVAL);
	assert_int_equal(dlb_wire_name_from_text(".a", w, sizeof(w)), DLB_EINVAL);
	assert_int_equal(dlb_wire_name_from_text("a..", w, sizeof(w)), DLB_EINVAL);
	assert_int_equal(dlb_wire_name_from_text("..", w, sizeof(w)), DLB_EINVAL);

	/* escapes */
	assert_int_equal(dlb_wire_name_from_text("a\\.b.c", w, sizeof(w)), 7);
	assert_memory_equal(w, "\3a.b\1c", 7);
	assert_int_equal(dlb_wire_name_from_text("\\065\\000\\255\\\\", w, sizeof(w)), 6);
	assert_memory_equal(w, "\4A\0\xff\\", 6);
	assert_int_equal(dlb_wire_name_from_text("\\256", w, sizeof(w)), DLB_EINVAL);
	assert_int_equal(dlb_wire_name_from_text("\\1", w, sizeof(w)), DLB_EINVAL);
	assert_int_equal(dlb_wire_name_from_text("\\12x", w, sizeof(w)), DLB_EINVAL);
	assert_int_equal(dlb_wire_name_from_text("ab\\", w, sizeof(w)), DLB_EINVAL);

	/* round trip through the escaping */
	assert_int_equal(dlb_wire_name_to_text((const uint8_t *)"\4a.\0\\\1z", 8, txt, sizeof(txt)),
			 12);
	assert_string_equal(txt, "a\\.\\000\\\\.z.");
	assert_int_equal(dlb_wire_name_from_text(txt, w, sizeof(w)), 8);
	assert_memory_equal(w, "\4a.\0\\\1z", 8);

	/* label 63 ok, 64 not */
	memset(name, 'a', 64);
	name[63] = '\0';
	assert_int_equal(dlb_wire_name_from_text(name, w, sizeof(w)), 65);
	name[63] = 'a';
	name[64] = '\0';
	assert_int_equal(dlb_wire_name_from_text(name, w, sizeof(w)), DLB_EINVAL);

	/* 63.63.63.61 = 255 octets ok, with or without the dot; 63.63.63.62 not */
	memset(name, 'b', sizeof(name));
	name[63] = name[127] = name[191] = '.';
	name[253] = '\0';
	assert_int_equal(dlb_wire_name_from_text(name, w, sizeof(w)), 255);
	name[253] = '.';
	name[254] = '\0';
	assert_int_equal(dlb_wire_name_from_text(name, w, sizeof(w)), 255);
	name[253] = 'b';
	assert_int_equal(dlb_wire_name_from_text(name, w, sizeof(w)), DLB_EINVAL);
	name[254] = '.';
	name[255] = '\0';
	assert_int_equal(dlb_wire_name_from_text(name, w, sizeof(w)), DLB_EINVAL);

	/* output too small */
	assert_int_equal(dlb_wire_name_from_text("www.example.com", w, 16), DLB_ESPACE);
	assert_int_equal(dlb_wire_name_from_text("www.example.com", w, 17), 17);
}

static void
test_name_hash_and_equal(void **state)
{
	struct pb p;
	struct dlb_dnsmsg m1, m2;
	uint32_t before[4];
	bool changed = false;
	static const char *names[4] = { "\1a", "\1b", "\3www\7example\3com", "\3com" };

	(void)state;
	pb_hdr(&p, 1, 0, 1, 0, 0, 0);
	pb_question(&p, "WWW.example.Com", 1, 1);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m1), DLB_OK);
	pb_hdr(&p, 1, 0, 1, 0, 0, 0);
	pb_question(&p, "www.EXAMPLE.cOM", 1, 1);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m2), DLB_OK);
	assert_int_equal(m1.qname_hash, m2.qname_hash);
	assert_memory_equal(m1.qname_lc, m2.qname_lc, 17);
	assert_int_not_equal(dlb_wire_name_hash(www_example_com_lc, 17),
			     dlb_wire_name_hash((const uint8_t *)"\3www\7example\3org", 17));

	/* keyed: reseeding changes the values, not the equalities */
	for (int i = 0; i < 4; i++)
		before[i] = dlb_wire_name_hash((const uint8_t *)names[i], strlen(names[i]) + 1);
	dlb_wire_hash_init();
	for (int i = 0; i < 4; i++) {
		size_t l = strlen(names[i]) + 1;

		if (dlb_wire_name_hash((const uint8_t *)names[i], l) != before[i])
			changed = true;
	}
	assert_true(changed);
	pb_hdr(&p, 1, 0, 1, 0, 0, 0);
	pb_question(&p, "WWW.example.Com", 1, 1);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m1), DLB_OK);
	assert_int_equal(m1.qname_hash, dlb_wire_name_hash(www_example_com_lc, 17));

	assert_true(dlb_wire_name_equal_ci((const uint8_t *)"\3WwW\7example\3COM", 17,
					   www_example_com_lc, 17));
	assert_true(dlb_wire_name_equal_ci((const uint8_t *)"", 1, (const uint8_t *)"", 1));
	assert_false(dlb_wire_name_equal_ci(www_example_com_lc, 17, www_example_com_lc, 16));
	assert_false(dlb_wire_name_equal_ci((const uint8_t *)"\3www\7example\3con", 17,
					    www_example_com_lc, 17));
	/* ASCII folding only */
	assert_false(dlb_wire_name_equal_ci((const uint8_t *)"\1\xc4", 3,
					    (const uint8_t *)"\1\xe4", 3));
	assert_false(dlb_wire_name_equal_ci((const uint8_t *)"\1@", 3, (const uint8_t *)"\1`", 3));
}

/* ---- responses: bad-inputs §3.2 B #32, #34 ---- */

static void
test_response_question(void **state)
{
	struct pb p;
	struct dlb_dnsmsg m;

	(void)state;
	pb_hdr(&p, 0xabcd, DLB_F_QR | DLB_F_RD | 3, 1, 1, 0, 0);
	pb_question(&p, "Www.Example.com", 28, 1);
	pb_bytes(&p, "\xff\xff\xff", 3);	/* the rest is not looked at */
	assert_int_equal(dlb_wire_parse_response_question(p.b, p.n, &m), DLB_OK);
	assert_int_equal(m.id, 0xabcd);
	assert_int_equal(DLB_RCODE(m.flags), 3);
	assert_int_equal(m.ancount, 1);
	assert_int_equal(m.qname_len, 17);
	assert_memory_equal(m.qname_lc, www_example_com_lc, 17);
	assert_int_equal(m.qname_hash, dlb_wire_name_hash(www_example_com_lc, 17));
	assert_int_equal(m.qtype, 28);
	assert_int_equal(m.qclass, 1);
	assert_int_equal(m.question_end, 33);
	assert_false(m.has_opt);

	/* #34: short, and truncated inside the question */
	assert_int_equal(dlb_wire_parse_response_question(p.b, 0, &m), DLB_ETRUNC);
	assert_int_equal(dlb_wire_parse_response_question(p.b, 11, &m), DLB_ETRUNC);
	for (size_t l = 12; l < 33; l++)
		assert_int_equal(dlb_wire_parse_response_question(p.b, l, &m), DLB_ETRUNC);

	/* #32: header only */
	pb_hdr(&p, 1, DLB_F_QR | 2, 0, 0, 0, 0);
	assert_int_equal(dlb_wire_parse_response_question(p.b, p.n, &m), DLB_EEMPTY);
	assert_int_equal(m.id, 1);
	assert_int_equal(DLB_RCODE(m.flags), 2);

	/* compressed question name */
	pb_hdr(&p, 1, DLB_F_QR, 1, 0, 0, 0);
	pb_ptr(&p, 12);
	pb_u32(&p, 0x00010001);
	assert_int_equal(dlb_wire_parse_response_question(p.b, p.n, &m), DLB_EMALF);
	/* label type 01 */
	p.b[12] = 0x41;
	assert_int_equal(dlb_wire_parse_response_question(p.b, p.n, &m), DLB_EMALF);
}

/* ---- answer builder ---- */

static const struct dlb_selfanswer_opts opts_on = { .add_edns = true, .payload_size = 1232 };
static const struct dlb_selfanswer_opts opts_off = { .add_edns = false, .payload_size = 1232 };

static void
test_build_answer(void **state)
{
	static const uint8_t opt_rr[11] = { 0, 0, 41, 0x04, 0xd0, 0, 0, 0x80, 0, 0, 0 };
	struct pb p;
	struct dlb_dnsmsg q, r;
	uint8_t out[512];
	int n;

	(void)state;
	pb_hdr(&p, 0xbeef, DLB_F_RD | DLB_F_CD | DLB_F_AD | DLB_F_AA, 1, 0, 0, 1);
	pb_question(&p, "WwW.Example.COM", 1, 1);
	pb_opt(&p, 4096, 0x8000, NULL, 0);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &q), DLB_OK);
	n = dlb_wire_build_answer(p.b, &q, DLB_RCODE_REFUSED, &opts_on, out, sizeof(out));
	assert_int_equal(n, 12 + 21 + 11);
	assert_int_equal(dlb_rd16(out), 0xbeef);
	assert_int_equal(dlb_rd16(out + 2),
			 DLB_F_QR | DLB_F_RD | DLB_F_CD | DLB_RCODE_REFUSED);
	assert_int_equal(dlb_rd16(out + 4), 1);
	assert_int_equal(dlb_rd16(out + 6), 0);
	assert_int_equal(dlb_rd16(out + 8), 0);
	assert_int_equal(dlb_rd16(out + 10), 1);
	assert_memory_equal(out + 12, "\3WwW\7Example\3COM\0\0\1\0\1", 21);
	assert_memory_equal(out + 33, opt_rr, 11);
	/* and it is a well-formed response */
	assert_int_equal(dlb_wire_parse_query(out, (size_t)n, &r), DLB_ENOTQUERY);
	assert_true(r.has_opt);
	assert_int_equal(r.udp_size, 1232);
	assert_true(r.do_bit);
	assert_int_equal(r.parsed_end, n);
	assert_int_equal(dlb_wire_parse_response_question(out, (size_t)n, &r), DLB_OK);
	assert_int_equal(r.qname_hash, q.qname_hash);

	/* without DO, RD, CD; other payload; SERVFAIL */
	pb_hdr(&p, 2, 0, 1, 0, 0, 1);
	pb_question(&p, "example.com", 16, 3);
	pb_opt(&p, 512, 0, NULL, 0);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &q), DLB_OK);
	n = dlb_wire_build_answer(p.b, &q, DLB_RCODE_SERVFAIL,
				  &(struct dlb_selfanswer_opts){ .add_edns = true,
								  .payload_size = 4096 },
				  out, sizeof(out));
	assert_int_equal(n, 12 + 17 + 11);
	assert_int_equal(dlb_rd16(out + 2), DLB_F_QR | DLB_RCODE_SERVFAIL);
	assert_memory_equal(out + 12 + 13, "\0\x10\0\3", 4);
	assert_memory_equal(out + 29, "\0\0\x29\x10\0\0\0\0\0\0\0", 11);

	/* opts NULL: the defaults */
	n = dlb_wire_build_answer(p.b, &q, DLB_RCODE_SERVFAIL, NULL, out, sizeof(out));
	assert_int_equal(n, 12 + 17 + 11);
	assert_int_equal(dlb_rd16(out + 29 + 3), 1232);

	/* BADVERS (16): header rcode 0, extended rcode 1 */
	n = dlb_wire_build_answer(p.b, &q, 16, &opts_on, out, sizeof(out));
	assert_int_equal(n, 12 + 17 + 11);
	assert_int_equal(DLB_RCODE(dlb_rd16(out + 2)), 0);
	assert_int_equal(out[29 + 5], 1);
}

static void
test_build_answer_edns_choice(void **state)
{
	struct pb p;
	struct dlb_dnsmsg q;
	uint8_t out[512];
	int n;

	(void)state;
	/* query with OPT, add_edns false: none */
	pb_std_query(&p, true);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &q), DLB_OK);
	n = dlb_wire_build_answer(p.b, &q, DLB_RCODE_NXDOMAIN, &opts_off, out, sizeof(out));
	assert_int_equal(n, 12 + 21);
	assert_int_equal(dlb_rd16(out + 10), 0);
	assert_int_equal(dlb_rd16(out + 2), DLB_F_QR | DLB_F_RD | DLB_RCODE_NXDOMAIN);

	/* query without OPT, add_edns true: none */
	pb_std_query(&p, false);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &q), DLB_OK);
	n = dlb_wire_build_answer(p.b, &q, DLB_RCODE_NXDOMAIN, &opts_on, out, sizeof(out));
	assert_int_equal(n, 12 + 21);
	assert_int_equal(dlb_rd16(out + 10), 0);

	/* opcode copied, qdcount 2 echoes only the first */
	pb_hdr(&p, 9, (5 << 11) | DLB_F_RD, 2, 0, 0, 0);
	pb_question(&p, "a.example", 6, 1);
	pb_ptr(&p, 12);
	pb_u32(&p, 0x00010001);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &q), DLB_OK);
	n = dlb_wire_build_answer(p.b, &q, DLB_RCODE_NOTIMP, &opts_on, out, sizeof(out));
	assert_int_equal(n, 12 + 11 + 4);
	assert_int_equal(dlb_rd16(out + 2), DLB_F_QR | (5 << 11) | DLB_F_RD | 4);
	assert_int_equal(dlb_rd16(out + 4), 1);
	assert_memory_equal(out + 12, "\1a\7example\0\0\6\0\1", 15);
}

static void
test_build_answer_header_only(void **state)
{
	struct pb p;
	struct dlb_dnsmsg q;
	uint8_t out[512];
	int n;

	(void)state;
	pb_hdr(&p, 0x4242, DLB_F_RD, 0, 0, 0, 0);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &q), DLB_EEMPTY);
	memset(out, 0xee, sizeof(out));
	n = dlb_wire_build_answer(p.b, &q, DLB_RCODE_NOTIMP, &opts_on, out, sizeof(out));
	assert_int_equal(n, 12);
	assert_memory_equal(out, "\x42\x42\x81\x04\0\0\0\0\0\0\0\0", 12);
	assert_int_equal(out[12], 0xee);

	/* with an OPT in the empty query the NOTIMP carries one */
	pb_hdr(&p, 0x4242, 0, 0, 0, 0, 1);
	pb_opt(&p, 1400, 0x8000, NULL, 0);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &q), DLB_EEMPTY);
	n = dlb_wire_build_answer(p.b, &q, DLB_RCODE_NOTIMP, &opts_on, out, sizeof(out));
	assert_int_equal(n, 12 + 11);
	assert_int_equal(dlb_rd16(out + 4), 0);
	assert_int_equal(dlb_rd16(out + 10), 1);
	assert_memory_equal(out + 12, "\0\0\x29\x04\xd0\0\0\x80\0\0\0", 11);

	/* a failed parse that never reached the question: header only */
	pb_hdr(&p, 0x4242, 0, 1, 0, 0, 0);
	pb_bytes(&p, "\x41\0\0\1\0\1", 6);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &q), DLB_EMALF);
	n = dlb_wire_build_answer(p.b, &q, DLB_RCODE_FORMERR, &opts_on, out, sizeof(out));
	assert_int_equal(n, 12);
	assert_int_equal(dlb_rd16(out + 4), 0);
	assert_int_equal(DLB_RCODE(dlb_rd16(out + 2)), DLB_RCODE_FORMERR);
}

static void
test_build_answer_space(void **state)
{
	struct pb p;
	struct dlb_dnsmsg q;
	uint8_t out[64];

	(void)state;
	pb_std_query(&p, true);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &q), DLB_OK);
	memset(out, 0xee, sizeof(out));
	assert_int_equal(dlb_wire_build_answer(p.b, &q, 5, &opts_on, out, 43), DLB_ESPACE);
	assert_int_equal(out[0], 0xee);	/* nothing written */
	assert_int_equal(dlb_wire_build_answer(p.b, &q, 5, &opts_on, out, 44), 44);
	assert_int_equal(dlb_wire_build_answer(p.b, &q, 5, &opts_off, out, 32), DLB_ESPACE);
	assert_int_equal(dlb_wire_build_answer(p.b, &q, 5, &opts_off, out, 33), 33);
	assert_int_equal(dlb_wire_build_answer(p.b, &q, 5, &opts_off, out, 0), DLB_ESPACE);
}

static void
test_build_answer_in_place(void **state)
{
	static const uint8_t a[4] = { 192, 0, 2, 1 };
	struct pb p;
	struct dlb_dnsmsg q;
	uint8_t ref[512], inplace[PB_MAX];
	int n, m;

	(void)state;
	/* a query with records and the OPT at the end, plus trailing bytes */
	pb_hdr(&p, 0x0102, DLB_F_RD, 1, 1, 0, 2);
	pb_question(&p, "Mixed.Case.Example", 255, 1);
	pb_ptr(&p, 12);
	pb_rr_tail(&p, 1, 1, 60, a, 4);
	pb_ptr(&p, 12);
	pb_rr_tail(&p, 1, 1, 60, a, 4);
	pb_opt(&p, 1232, 0x8000, "\0\x0c\0\x02\0\0", 6);
	pb_bytes(&p, "junk", 4);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &q), DLB_OK);
	assert_true(q.trailing);
	n = dlb_wire_build_answer(p.b, &q, DLB_RCODE_REFUSED, &opts_on, ref, sizeof(ref));
	assert_int_equal(n, 12 + 20 + 4 + 11);

	memcpy(inplace, p.b, p.n);
	m = dlb_wire_build_answer(inplace, &q, DLB_RCODE_REFUSED, &opts_on, inplace, p.n);
	assert_int_equal(m, n);
	assert_memory_equal(inplace, ref, (size_t)n);
	assert_memory_equal(inplace + 12, "\5Mixed\4Case\7Example\0", 20);

	/* in place into exactly the query's own length (no OPT: 36 octets) */
	pb_hdr(&p, 0x0102, 0, 1, 0, 0, 0);
	pb_question(&p, "Mixed.Case.Example", 255, 1);
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &q), DLB_OK);
	memcpy(inplace, p.b, p.n);
	m = dlb_wire_build_answer(inplace, &q, DLB_RCODE_NXDOMAIN, &opts_on, inplace, p.n);
	assert_int_equal(m, (int)p.n);
	assert_int_equal(dlb_rd16(inplace + 2), DLB_F_QR | DLB_RCODE_NXDOMAIN);
	assert_memory_equal(inplace + 12, p.b + 12, p.n - 12);
}

/* ---- EDNS Client Subnet: dlb_wire_ecs_option / add_ecs / strip_ecs ---- */

static size_t
ecs_for(const char *addr, int prefix, uint8_t *out)
{
	struct sockaddr_storage ss;

	memset(&ss, 0, sizeof(ss));
	if (strchr(addr, ':') != NULL) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)(void *)&ss;

		s6->sin6_family = AF_INET6;
		assert_int_equal(inet_pton(AF_INET6, addr, &s6->sin6_addr), 1);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)(void *)&ss;

		s4->sin_family = AF_INET;
		assert_int_equal(inet_pton(AF_INET, addr, &s4->sin_addr), 1);
	}
	return dlb_wire_ecs_option((const struct sockaddr *)(void *)&ss, prefix, out);
}

static void
test_ecs_option(void **state)
{
	static const uint8_t v4_24[] = { 0, 8, 0, 7, 0, 1, 24, 0, 192, 0, 2 };
	static const uint8_t v4_32[] = { 0, 8, 0, 8, 0, 1, 32, 0, 192, 0, 2, 129 };
	static const uint8_t v4_0[] = { 0, 8, 0, 4, 0, 1, 0, 0 };
	static const uint8_t v4_25[] = { 0, 8, 0, 8, 0, 1, 25, 0, 192, 0, 2, 0x80 };
	static const uint8_t v4_20[] = { 0, 8, 0, 7, 0, 1, 20, 0, 10, 0xab, 0xc0 };
	static const uint8_t v6_56[] = { 0, 8, 0, 11, 0, 2, 56, 0,
					 0x20, 0x01, 0x0d, 0xb8, 0x12, 0x34, 0x56 };
	static const uint8_t v6_60[] = { 0, 8, 0, 12, 0, 2, 60, 0,
					 0x20, 0x01, 0x0d, 0xb8, 0x12, 0x34, 0x56, 0x70 };
	static const uint8_t v6_0[] = { 0, 8, 0, 4, 0, 2, 0, 0 };
	uint8_t out[4 + 4 + 16 + 8];

	(void)state;
	memset(out, 0xee, sizeof(out));
	assert_int_equal(ecs_for("192.0.2.129", 24, out), sizeof(v4_24));
	assert_memory_equal(out, v4_24, sizeof(v4_24));
	assert_int_equal(out[sizeof(v4_24)], 0xee);	/* nothing written past it */
	assert_int_equal(ecs_for("192.0.2.129", 32, out), sizeof(v4_32));
	assert_memory_equal(out, v4_32, sizeof(v4_32));
	assert_int_equal(ecs_for("192.0.2.129", 0, out), sizeof(v4_0));
	assert_memory_equal(out, v4_0, sizeof(v4_0));
	/* host bits zeroed inside the last octet */
	assert_int_equal(ecs_for("192.0.2.255", 25, out), sizeof(v4_25));
	assert_memory_equal(out, v4_25, sizeof(v4_25));
	assert_int_equal(ecs_for("10.171.207.1", 20, out), sizeof(v4_20));
	assert_memory_equal(out, v4_20, sizeof(v4_20));
	assert_int_equal(ecs_for("2001:db8:1234:56ff:9abc::1", 56, out), sizeof(v6_56));
	assert_memory_equal(out, v6_56, sizeof(v6_56));
	assert_int_equal(ecs_for("2001:db8:1234:567f:9abc::1", 60, out), sizeof(v6_60));
	assert_memory_equal(out, v6_60, sizeof(v6_60));
	assert_int_equal(ecs_for("::1", 0, out), sizeof(v6_0));
	assert_memory_equal(out, v6_0, sizeof(v6_0));
	/* ::1/128: the whole address */
	assert_int_equal(ecs_for("::1", 128, out), 8 + 16);
	assert_int_equal(out[6], 128);
	assert_int_equal(out[8 + 15], 1);
}

/* A query with an OPT (payload 4096, DO) whose RDATA is @rdata, and @extra
 * (a record after the OPT in the additional section) if true. */
static void
ecs_query(struct pb *p, const void *rdata, uint16_t rdlen, bool extra)
{
	static const uint8_t a[4] = { 192, 0, 2, 7 };

	pb_hdr(p, 0x4321, DLB_F_RD, 1, 0, 0, extra ? 2 : 1);
	pb_question(p, "www.Example.COM", 1, 1);
	pb_opt(p, 4096, 0x8000, rdata, rdlen);
	if (extra) {
		pb_name(p, "glue.example.net");
		pb_rr_tail(p, 1, 1, 300, a, 4);
	}
}

/*
 * An answer to the query @q (@qlen bytes): question copied, two answer
 * records and one authority record with compressed names, then the query's
 * additional section (everything after its question) as is.
 */
static void
ecs_answer(struct pb *p, const uint8_t *q, size_t qlen)
{
	static const uint8_t a[4] = { 192, 0, 2, 1 };
	struct dlb_dnsmsg m;

	assert_int_equal(dlb_wire_parse_query(q, qlen, &m), DLB_OK);
	assert_int_equal(m.ancount + m.nscount, 0);
	pb_hdr(p, m.id, (uint16_t)(m.flags | DLB_F_QR | DLB_F_RA), 1, 2, 1, m.arcount);
	pb_bytes(p, q + DLB_DNS_HDR, m.question_end - DLB_DNS_HDR);
	pb_ptr(p, 12);				/* www.example.com A */
	pb_rr_tail(p, 1, 1, 300, a, 4);
	pb_ptr(p, 12);				/* www.example.com CNAME foo.www... */
	pb_rr_tail(p, 5, 1, 300, "\3foo\xc0\x0c", 6);
	pb_ptr(p, 16);				/* example.com NS ns.example.com */
	pb_rr_tail(p, 2, 1, 300, "\2ns\xc0\x10", 5);
	pb_bytes(p, q + m.question_end, qlen - m.question_end);
}

static void
test_add_ecs_no_opt(void **state)
{
	struct pb p, orig, ans, want;
	struct dlb_dnsmsg m;
	enum dlb_ecs_added added = DLB_ECS_OPTION;
	uint8_t ecs[32];
	size_t el, n;

	(void)state;
	el = ecs_for("127.0.0.1", 24, ecs);
	pb_std_query(&p, false);
	orig = p;
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	n = dlb_wire_add_ecs(p.b, p.n, PB_MAX, &m, ecs, el, false, &added);
	assert_int_equal(added, DLB_ECS_OPT_RR);
	assert_int_equal(n, orig.n + 11 + el);
	assert_int_equal(dlb_rd16(p.b + 10), 1);		/* arcount + 1 */
	assert_memory_equal(p.b, orig.b, 10);			/* rest of the header */
	assert_memory_equal(p.b + 12, orig.b + 12, orig.n - 12);
	assert_int_equal(p.b[orig.n], 0);			/* owner: root */
	assert_int_equal(dlb_rd16(p.b + orig.n + 1), DLB_TYPE_OPT);
	assert_int_equal(dlb_rd16(p.b + orig.n + 3), 512);	/* dnsdist's size */
	assert_int_equal(dlb_rd32(p.b + orig.n + 5), 0);
	assert_int_equal(dlb_rd16(p.b + orig.n + 9), el);
	assert_memory_equal(p.b + orig.n + 11, ecs, el);
	p.n = n;
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	assert_true(m.has_opt);
	assert_false(m.trailing);
	assert_int_equal(m.udp_size, 512);
	assert_false(m.do_bit);
	assert_int_equal(m.ecs_off, orig.n + 11);

	/* the answer loses the whole OPT RR again */
	ecs_answer(&ans, p.b, p.n);
	ecs_answer(&want, orig.b, orig.n);
	n = dlb_wire_strip_ecs(ans.b, ans.n, DLB_ECS_OPT_RR, NULL);
	assert_int_equal(n, want.n);
	assert_memory_equal(ans.b, want.b, want.n);

	/* a backend that dropped the OPT: nothing to remove */
	n = dlb_wire_strip_ecs(want.b, want.n, DLB_ECS_OPT_RR, NULL);
	assert_int_equal(n, want.n);
}

static void
test_add_ecs_with_opt(void **state)
{
	/* a client cookie (8 octets) already in the OPT */
	static const uint8_t cookie[] = { 0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8 };
	struct pb p, orig, ans, want;
	struct dlb_dnsmsg m, m0;
	enum dlb_ecs_added added = DLB_ECS_NONE;
	uint8_t ecs[32];
	size_t el, n, optend;

	(void)state;
	el = ecs_for("2001:db8::53", 56, ecs);
	ecs_query(&p, cookie, sizeof(cookie), true);	/* OPT, then an A record */
	orig = p;
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m0), DLB_OK);
	m = m0;
	n = dlb_wire_add_ecs(p.b, p.n, PB_MAX, &m, ecs, el, false, &added);
	assert_int_equal(added, DLB_ECS_OPTION);
	assert_int_equal(n, orig.n + el);
	assert_int_equal(dlb_rd16(p.b + 10), 2);		/* arcount unchanged */
	assert_int_equal(dlb_rd16(p.b + m0.opt_rdata_off - 2), sizeof(cookie) + el);
	assert_int_equal(dlb_rd16(p.b + m0.opt_rdata_off - 8), 4096);	/* payload kept */
	assert_int_equal(dlb_rd32(p.b + m0.opt_rdata_off - 6), 0x8000);	/* DO kept */
	optend = m0.opt_rdata_off + sizeof(cookie);
	assert_memory_equal(p.b, orig.b, optend - 2 - (optend - m0.opt_rdata_off));
	assert_memory_equal(p.b + m0.opt_rdata_off, cookie, sizeof(cookie));
	assert_memory_equal(p.b + optend, ecs, el);
	/* the record after the OPT, shifted intact */
	assert_memory_equal(p.b + optend + el, orig.b + optend, orig.n - optend);
	p.n = n;
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	assert_int_equal(m.ecs_off, optend);
	assert_int_equal(m.cookie_off, m0.cookie_off);
	assert_int_equal(m.arcount, 2);

	/* answer: only the ECS option goes, the cookie and the A record stay */
	ecs_answer(&ans, p.b, p.n);
	ecs_answer(&want, orig.b, orig.n);
	n = dlb_wire_strip_ecs(ans.b, ans.n, DLB_ECS_OPTION, NULL);
	assert_int_equal(n, want.n);
	assert_memory_equal(ans.b, want.b, want.n);

	/* an empty OPT (no options): the ECS is its only option */
	ecs_query(&p, NULL, 0, false);
	orig = p;
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	n = dlb_wire_add_ecs(p.b, p.n, PB_MAX, &m, ecs, el, false, &added);
	assert_int_equal(added, DLB_ECS_OPTION);
	assert_int_equal(n, orig.n + el);
	assert_int_equal(dlb_rd16(p.b + m.opt_rdata_off - 2), el);
	assert_memory_equal(p.b + orig.n, ecs, el);
	p.n = n;
	ecs_answer(&ans, p.b, p.n);
	ecs_answer(&want, orig.b, orig.n);
	n = dlb_wire_strip_ecs(ans.b, ans.n, DLB_ECS_OPTION, NULL);
	assert_int_equal(n, want.n);
	assert_memory_equal(ans.b, want.b, want.n);
}

static void
test_add_ecs_client_ecs(void **state)
{
	/* the client's ECS 10.0.0.0/8, then a cookie */
	static const uint8_t rd[] = { 0, 8, 0, 5, 0, 1, 8, 0, 10,
				      0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8 };
	static const uint8_t cookie_only[] = { 0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8 };
	struct pb p, orig, ans, want;
	struct dlb_dnsmsg m, m0;
	enum dlb_ecs_added added = DLB_ECS_OPTION;
	uint8_t ecs[32];
	size_t el, n;

	(void)state;
	el = ecs_for("127.0.0.1", 24, ecs);
	ecs_query(&p, rd, sizeof(rd), true);
	orig = p;
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m0), DLB_OK);
	assert_int_not_equal(m0.ecs_off, 0);

	/* override false: the client's ECS goes through, nothing changes */
	n = dlb_wire_add_ecs(p.b, p.n, PB_MAX, &m0, ecs, el, false, &added);
	assert_int_equal(added, DLB_ECS_NONE);
	assert_int_equal(n, orig.n);
	assert_memory_equal(p.b, orig.b, orig.n);
	/* and the answer keeps the client's ECS (nothing to undo) */
	ecs_answer(&ans, p.b, p.n);
	want = ans;
	n = dlb_wire_strip_ecs(ans.b, ans.n, DLB_ECS_NONE, NULL);
	assert_int_equal(n, want.n);
	assert_memory_equal(ans.b, want.b, want.n);

	/* override true: replaced by ours */
	m = m0;
	n = dlb_wire_add_ecs(p.b, p.n, PB_MAX, &m, ecs, el, true, &added);
	assert_int_equal(added, DLB_ECS_OPTION);
	assert_int_equal(n, orig.n - 9 + el);
	assert_int_equal(dlb_rd16(p.b + m0.opt_rdata_off - 2), sizeof(cookie_only) + el);
	assert_memory_equal(p.b + m0.opt_rdata_off, cookie_only, sizeof(cookie_only));
	assert_memory_equal(p.b + m0.opt_rdata_off + sizeof(cookie_only), ecs, el);
	/* the A record after the OPT is intact */
	assert_memory_equal(p.b + n - (orig.n - (m0.opt_rdata_off + sizeof(rd))),
			    orig.b + m0.opt_rdata_off + sizeof(rd),
			    orig.n - (m0.opt_rdata_off + sizeof(rd)));
	p.n = n;
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	assert_int_equal(m.ecs_off, m0.opt_rdata_off + sizeof(cookie_only));
	assert_int_equal(m.arcount, 2);

	/* answer: our ECS removed (the cookie and the A record stay) */
	ecs_answer(&ans, p.b, p.n);
	ecs_query(&orig, cookie_only, sizeof(cookie_only), true);
	ecs_answer(&want, orig.b, orig.n);
	n = dlb_wire_strip_ecs(ans.b, ans.n, DLB_ECS_OPTION, NULL);
	assert_int_equal(n, want.n);
	assert_memory_equal(ans.b, want.b, want.n);

	/* override true with the client's ECS as the only option */
	ecs_query(&p, rd, 9, false);
	orig = p;
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	n = dlb_wire_add_ecs(p.b, p.n, PB_MAX, &m, ecs, el, true, &added);
	assert_int_equal(added, DLB_ECS_OPTION);
	assert_int_equal(n, orig.n - 9 + el);
	assert_int_equal(dlb_rd16(p.b + m.opt_rdata_off - 2), el);
	assert_memory_equal(p.b + m.opt_rdata_off, ecs, el);
}

static void
test_add_ecs_untouched(void **state)
{
	struct pb p, orig;
	struct dlb_dnsmsg m;
	enum dlb_ecs_added added;
	uint8_t ecs[32];
	size_t el, n;

	(void)state;
	el = ecs_for("127.0.0.1", 24, ecs);

	/* trailing bytes after the last record: dropped, then the ECS added
	 * (dnsdist 1.7.3 does the same) */
	pb_std_query(&p, false);
	pb_bytes(&p, "garbage", 7);
	orig = p;
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	assert_true(m.trailing);
	added = DLB_ECS_OPTION;
	n = dlb_wire_add_ecs(p.b, p.n, PB_MAX, &m, ecs, el, false, &added);
	assert_int_equal(added, DLB_ECS_OPT_RR);
	assert_int_equal(n, orig.n - 7 + 11 + el);
	assert_memory_equal(p.b + 12, orig.b + 12, orig.n - 7 - 12);

	pb_std_query(&p, true);
	pb_bytes(&p, "\0\0", 2);
	orig = p;
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	assert_true(m.trailing);
	added = DLB_ECS_NONE;
	n = dlb_wire_add_ecs(p.b, p.n, PB_MAX, &m, ecs, el, true, &added);
	assert_int_equal(added, DLB_ECS_OPTION);
	assert_int_equal(n, orig.n - 2 + el);	/* no ECS to replace: dropped */

	/* no OPT, one octet too little room for the new OPT RR */
	pb_std_query(&p, false);
	orig = p;
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	added = DLB_ECS_OPTION;
	n = dlb_wire_add_ecs(p.b, p.n, p.n + 11 + el - 1, &m, ecs, el, false, &added);
	assert_int_equal(added, DLB_ECS_NONE);
	assert_int_equal(n, orig.n);
	assert_memory_equal(p.b, orig.b, orig.n);
	/* exactly enough */
	n = dlb_wire_add_ecs(p.b, p.n, p.n + 11 + el, &m, ecs, el, false, &added);
	assert_int_equal(added, DLB_ECS_OPT_RR);
	assert_int_equal(n, orig.n + 11 + el);

	/* an OPT, one octet too little room for the option */
	pb_std_query(&p, true);
	orig = p;
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	added = DLB_ECS_OPTION;
	n = dlb_wire_add_ecs(p.b, p.n, p.n + el - 1, &m, ecs, el, false, &added);
	assert_int_equal(added, DLB_ECS_NONE);
	assert_int_equal(n, orig.n);
	assert_memory_equal(p.b, orig.b, orig.n);
	n = dlb_wire_add_ecs(p.b, p.n, p.n + el, &m, ecs, el, false, &added);
	assert_int_equal(added, DLB_ECS_OPTION);
	assert_int_equal(n, orig.n + el);

	/* cap == len: no room at all */
	pb_std_query(&p, true);
	orig = p;
	assert_int_equal(dlb_wire_parse_query(p.b, p.n, &m), DLB_OK);
	n = dlb_wire_add_ecs(p.b, p.n, p.n, &m, ecs, el, false, &added);
	assert_int_equal(added, DLB_ECS_NONE);
	assert_memory_equal(p.b, orig.b, orig.n);
}

static void
test_strip_ecs_malformed(void **state)
{
	static const uint8_t rd_ecs[] = { 0, 8, 0, 7, 0, 1, 24, 0, 127, 0, 0 };
	/* an option that overruns the OPT RDATA, then our ECS */
	static const uint8_t rd_bad[] = { 0, 10, 0, 4, 1, 2, 3, 4,
					  0, 8, 0, 7, 0, 1, 24, 0, 127, 0, 0 };
	struct pb q, ans, keep;
	size_t n;

	(void)state;
	ecs_query(&q, rd_ecs, sizeof(rd_ecs), false);
	ecs_answer(&ans, q.b, q.n);

	/* truncated in the middle of the OPT RR */
	keep = ans;
	n = dlb_wire_strip_ecs(ans.b, ans.n - 3, DLB_ECS_OPTION, NULL);
	assert_int_equal(n, ans.n - 3);
	assert_memory_equal(ans.b, keep.b, keep.n);
	n = dlb_wire_strip_ecs(ans.b, ans.n - 3, DLB_ECS_OPT_RR, NULL);
	assert_int_equal(n, ans.n - 3);
	assert_memory_equal(ans.b, keep.b, keep.n);

	/* a name running off the end of an answer record: a label too long */
	keep = ans;
	{
		size_t qend = 12 + 17 + 4;

		ans.b[qend] = 0x3f;	/* the first answer's owner pointer -> label of 63 */
		keep = ans;
		assert_int_equal(dlb_wire_strip_ecs(ans.b, ans.n, DLB_ECS_OPTION, NULL), ans.n);
		assert_memory_equal(ans.b, keep.b, keep.n);
		ans.b[qend] = 0xc0;
	}

	/* qdcount 2: not walked */
	dlb_wr16(ans.b + 4, 2);
	keep = ans;
	assert_int_equal(dlb_wire_strip_ecs(ans.b, ans.n, DLB_ECS_OPTION, NULL), ans.n);
	assert_memory_equal(ans.b, keep.b, keep.n);
	dlb_wr16(ans.b + 4, 1);

	/* a header only, shorter than a header */
	keep = ans;
	assert_int_equal(dlb_wire_strip_ecs(ans.b, 11, DLB_ECS_OPTION, NULL), 11);
	assert_memory_equal(ans.b, keep.b, keep.n);

	/* an overrunning option before the ECS: the option walk stops, untouched */
	ecs_query(&q, rd_bad, sizeof(rd_bad), false);
	ecs_answer(&ans, q.b, q.n);
	ans.b[ans.n - sizeof(rd_bad) + 3] = 40;	/* the first option's length */
	keep = ans;
	assert_int_equal(dlb_wire_strip_ecs(ans.b, ans.n, DLB_ECS_OPTION, NULL), ans.n);
	assert_memory_equal(ans.b, keep.b, keep.n);

	/* the well-formed answer is stripped (the baseline of the cases above) */
	ecs_query(&q, rd_ecs, sizeof(rd_ecs), false);
	ecs_answer(&ans, q.b, q.n);
	n = dlb_wire_strip_ecs(ans.b, ans.n, DLB_ECS_OPTION, NULL);
	assert_int_equal(n, ans.n - sizeof(rd_ecs));
}


/*
 * A malformed answer whose defect lies after the OPT RR (arcount claims a
 * record that is not there): "an answer that cannot be walked is left alone"
 * (wire.h), so nothing may be removed.
 */
static void
test_strip_ecs_malformed_after_opt(void **state)
{
	static const uint8_t rd_ecs[] = { 0, 8, 0, 7, 0, 1, 24, 0, 127, 0, 0 };
	struct pb q, ans, keep;

	(void)state;
	ecs_query(&q, rd_ecs, sizeof(rd_ecs), false);
	ecs_answer(&ans, q.b, q.n);
	dlb_wr16(ans.b + 10, 2);
	keep = ans;
	assert_int_equal(dlb_wire_strip_ecs(ans.b, ans.n, DLB_ECS_OPTION, NULL), keep.n);
	assert_memory_equal(ans.b, keep.b, keep.n);
	assert_int_equal(dlb_wire_strip_ecs(ans.b, ans.n, DLB_ECS_OPT_RR, NULL), keep.n);
	assert_memory_equal(ans.b, keep.b, keep.n);
}

/* dlb_equal_short: equal for every length up to 70 (its word paths and
 * memcmp's), unequal for a difference at any position, either way round;
 * bytes past the length do not count */
static void
test_equal_short(void **state)
{
	uint8_t a[80], b[80];

	(void)state;
	for (size_t i = 0; i < sizeof(a); i++)
		a[i] = (uint8_t)(i * 7 + 1);
	for (size_t n = 0; n <= 70; n++) {
		memcpy(b, a, sizeof(b));
		assert_true(dlb_equal_short(a, b, n));
		for (size_t d = 0; d < n; d++) {
			b[d] ^= 0x20;
			assert_false(dlb_equal_short(a, b, n));
			assert_false(dlb_equal_short(b, a, n));
			b[d] ^= 0x20;
		}
		/* bytes past @n do not count */
		b[n] ^= 0xff;
		assert_true(dlb_equal_short(a, b, n));
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_query_valid),
		cmocka_unit_test(test_query_fast_path_matches_general),
		cmocka_unit_test(test_equal_short),
		cmocka_unit_test(test_query_empty_and_short),
		cmocka_unit_test(test_query_qdcount0),
		cmocka_unit_test(test_query_truncated),
		cmocka_unit_test(test_query_qr_tc),
		cmocka_unit_test(test_query_label_types),
		cmocka_unit_test(test_query_name_length),
		cmocka_unit_test(test_query_pointer_in_question),
		cmocka_unit_test(test_query_binary_labels),
		cmocka_unit_test(test_query_qdcount2),
		cmocka_unit_test(test_query_unusual_but_valid),
		cmocka_unit_test(test_query_trailing),
		cmocka_unit_test(test_query_bad_opt),
		cmocka_unit_test(test_query_edns_fields),
		cmocka_unit_test(test_query_edns_options),
		cmocka_unit_test(test_query_with_records),
		cmocka_unit_test(test_decode_name_pointers),
		cmocka_unit_test(test_decode_name_bad_pointers),
		cmocka_unit_test(test_decode_name_hops_and_budget),
		cmocka_unit_test(test_decode_name_length),
		cmocka_unit_test(test_name_to_text),
		cmocka_unit_test(test_name_from_text),
		cmocka_unit_test(test_name_hash_and_equal),
		cmocka_unit_test(test_response_question),
		cmocka_unit_test(test_build_answer),
		cmocka_unit_test(test_build_answer_edns_choice),
		cmocka_unit_test(test_build_answer_header_only),
		cmocka_unit_test(test_build_answer_space),
		cmocka_unit_test(test_build_answer_in_place),
		cmocka_unit_test(test_ecs_option),
		cmocka_unit_test(test_add_ecs_no_opt),
		cmocka_unit_test(test_add_ecs_with_opt),
		cmocka_unit_test(test_add_ecs_client_ecs),
		cmocka_unit_test(test_add_ecs_untouched),
		cmocka_unit_test(test_strip_ecs_malformed),
		cmocka_unit_test(test_strip_ecs_malformed_after_opt),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
