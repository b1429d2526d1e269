/*
 * fuzz_wire.c - libFuzzer target for the wire parser, name decoder and
 * answer builder. Besides "no crash" it checks the parser's promises:
 * offsets inside the message, names <= 255 octets, the hash matching the
 * lowercased name, text round trips, built answers parsing back, and the
 * query parser's fast path giving what its general path gives.
 *
 * Thread: single.  Ownership: borrows @data.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/core/wire.h"
#include "tests/fuzz/fuzz.h"

static void
check_name(const uint8_t *name, size_t len)
{
	char txt[DLB_WIRE_NAME_TEXT_MAX];
	uint8_t back[DLB_MAX_NAME];
	int t, w;

	CHECK(len >= 1 && len <= DLB_MAX_NAME && name[len - 1] == 0);
	t = dlb_wire_name_to_text(name, len, txt, sizeof(txt));
	CHECK(t > 0 && (size_t)t == strlen(txt));
	w = dlb_wire_name_from_text(txt, back, sizeof(back));
	CHECK(w > 0 && (size_t)w == len && memcmp(back, name, len) == 0);
}

static void
check_answer(const uint8_t *data, size_t size, const struct dlb_dnsmsg *q)
{
	static const struct dlb_selfanswer_opts opts = { .add_edns = true, .payload_size = 1232 };
	uint8_t out[DLB_DNS_HDR + DLB_MAX_NAME + 4 + 11];
	uint8_t *inplace;
	struct dlb_dnsmsg r;
	int n, n2, rc;

	n = dlb_wire_build_answer(data, q, DLB_RCODE_REFUSED, &opts, out, sizeof(out));
	CHECK(n >= DLB_DNS_HDR && (size_t)n <= sizeof(out));
	CHECK(dlb_rd16(out) == q->id);
	rc = dlb_wire_parse_query(out, (size_t)n, &r);
	CHECK(rc == DLB_ENOTQUERY);
	CHECK(r.parsed_end == n && !r.trailing);
	CHECK(r.has_opt == q->has_opt && r.do_bit == q->do_bit);
	rc = dlb_wire_parse_response_question(out, (size_t)n, &r);
	if (q->qdcount > 0) {
		CHECK(rc == DLB_OK);
		CHECK(r.qname_len == q->qname_len && r.qtype == q->qtype && r.qclass == q->qclass);
		CHECK(memcmp(r.qname_lc, q->qname_lc, q->qname_len) == 0);
		CHECK(r.qname_hash == q->qname_hash);
	} else {
		CHECK(rc == DLB_EEMPTY);
	}

	/* in place, into exactly the query's own buffer */
	inplace = malloc(size);
	CHECK(inplace != NULL);
	memcpy(inplace, data, size);
	n2 = dlb_wire_build_answer(inplace, q, DLB_RCODE_REFUSED, &opts, inplace, size);
	if ((size_t)n <= size) {
		CHECK(n2 == n);
		CHECK(memcmp(inplace, out, (size_t)n) == 0);
	} else {
		CHECK(n2 == DLB_ESPACE);
	}
	free(inplace);
}

static void
check_query(const uint8_t *data, size_t size)
{
	static struct dlb_dnsmsg m, g;
	int rc;

	/* the fast path for the common query and the general parser agree on
	 * everything (the structs start with the same bytes) */
	memset(&m, 0x5a, sizeof(m));
	memset(&g, 0x5a, sizeof(g));
	rc = dlb_wire_parse_query(data, size, &m);
	CHECK(dlb_wire_parse_query_general(data, size, &g) == rc);
	CHECK(memcmp(&m, &g, sizeof(m)) == 0);
	if (rc != DLB_OK && rc != DLB_EEMPTY)
		return;
	CHECK(size >= DLB_DNS_HDR && size <= 65535);
	CHECK(m.parsed_end <= size && m.trailing == (m.parsed_end < size));
	CHECK((m.flags & (DLB_F_QR | DLB_F_TC)) == 0);
	if (rc == DLB_OK) {
		CHECK(m.qdcount >= 1 && m.qname_off == DLB_DNS_HDR);
		CHECK(m.question_end == m.qname_off + m.qname_len + 4);
		CHECK(m.question_end <= m.parsed_end);
		CHECK(m.qname_hash == dlb_wire_name_hash(m.qname_lc, m.qname_len));
		check_name(m.qname_lc, m.qname_len);
		{
			/* the question reader (a label walk, then a SWAR lowercase
			 * copy) against the general name decoder */
			uint8_t lc[DLB_MAX_NAME];
			size_t next = 0;
			int n = dlb_wire_decode_name(data, size, DLB_DNS_HDR, lc, &next, NULL);

			CHECK(n == m.qname_len && memcmp(lc, m.qname_lc, (size_t)n) == 0);
			CHECK(next == (size_t)m.qname_off + m.qname_len);
		}
	} else {
		CHECK(m.qdcount == 0 && m.qname_len == 0);
	}
	if (m.has_opt) {
		CHECK(data[m.opt_off] == 0 && dlb_rd16(data + m.opt_off + 1) == DLB_TYPE_OPT);
		CHECK(m.opt_rdata_off == m.opt_off + 11);
		CHECK((size_t)m.opt_rdata_off + m.opt_rdlen <= m.parsed_end);
		if (m.ecs_off != 0)
			CHECK(dlb_rd16(data + m.ecs_off) == DLB_EDNS_OPT_ECS);
		if (m.cookie_off != 0)
			CHECK(dlb_rd16(data + m.cookie_off) == DLB_EDNS_OPT_COOKIE);
	}
	check_answer(data, size, &m);
}

/* The input as a presentation name and as a bare wire name: exact round trips. */
static void
check_text(const uint8_t *data, size_t size)
{
	char txt[DLB_WIRE_NAME_TEXT_MAX];
	uint8_t w[DLB_MAX_NAME];
	int n, t;

	if (size < sizeof(txt)) {
		memcpy(txt, data, size);
		txt[size] = '\0';
		n = dlb_wire_name_from_text(txt, w, sizeof(w));
		if (n > 0)
			check_name(w, (size_t)n);
	}
	t = dlb_wire_name_to_text(data, size, txt, sizeof(txt));
	if (t > 0) {
		n = dlb_wire_name_from_text(txt, w, sizeof(w));
		CHECK(n > 0 && (size_t)n == size && memcmp(w, data, size) == 0);
	}
}

/*
 * ECS added to a query and stripped from the same bytes seen as an answer:
 * the result stays within bounds and, when something was added, stripping
 * gives back the original length (the added ECS sits in the OPT RR).
 */
static void
check_ecs(const uint8_t *data, size_t size)
{
	static uint8_t buf[65536 + 64];
	struct dlb_dnsmsg m;
	struct sockaddr_in sin = { .sin_family = AF_INET };
	uint8_t ecs[32];
	enum dlb_ecs_added added;
	size_t elen, n, back;
	int rc;

	if (size > 65535)
		return;
	rc = dlb_wire_parse_query(data, size, &m);
	if (rc != DLB_OK)
		return;
	sin.sin_addr.s_addr = htonl(0x7f000001);
	elen = dlb_wire_ecs_option((const struct sockaddr *)&sin, 24, ecs);
	memcpy(buf, data, size);
	n = dlb_wire_add_ecs(buf, size, sizeof(buf), &m, ecs, elen, size % 2, &added);
	CHECK(n <= sizeof(buf) && n <= 65535 + 64);
	if (added == DLB_ECS_NONE) {
		CHECK(n == size && memcmp(buf, data, size) == 0);
		return;
	}
	back = dlb_wire_strip_ecs(buf, n, added, NULL);
	CHECK(back <= n);
	if (m.ecs_off == 0)
		CHECK(back == m.parsed_end);	/* trailing bytes are dropped */
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dlb_dnsmsg m;
	uint8_t name[DLB_MAX_NAME];
	unsigned work = 0;
	int rc;

	check_query(data, size);
	check_text(data, size);
	check_ecs(data, size);

	rc = dlb_wire_parse_response_question(data, size, &m);
	if (rc == DLB_OK) {
		CHECK(m.question_end <= size);
		check_name(m.qname_lc, m.qname_len);
	}

	for (size_t off = 0; off < size && off <= 65535; off++) {
		size_t next = 0;
		int n = dlb_wire_decode_name(data, size, off, name, &next, &work);
		int s = dlb_wire_skip_name(data, size, off);

		CHECK(work <= DLB_WIRE_MAX_WORK);
		if (n > 0) {
			check_name(name, (size_t)n);
			/* decoding is stricter than skipping; both agree on the end */
			CHECK(s > 0 && (size_t)s == next && next <= size);
		}
		if (s > 0)
			CHECK((size_t)s > off && (size_t)s <= size);
	}
	return 0;
}
