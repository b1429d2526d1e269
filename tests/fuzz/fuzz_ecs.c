/*
 * fuzz_ecs.c - libFuzzer target for EDNS Client Subnet on the way out and
 * back (useClientSubnet): dlb_wire_add_ecs on the client's query, then
 * dlb_wire_strip_ecs on a backend's answer, which is untrusted. Checks:
 *
 *   - a query add_ecs must not touch (bytes after its last record, qdcount
 *     other than 1) is left as it was;
 *   - otherwise the result stays within its buffer and parses as a query
 *     with the same ID, flags and question, with an OPT RR holding an ECS
 *     option: ours, unless the client sent one and there is no override;
 *     a new OPT RR adds one to ARCOUNT and says 1232;
 *   - stripping the query we sent, as if the backend echoed it, gives back
 *     the client's query (when no client ECS option was replaced);
 *   - stripping any answer never grows it, leaves it alone if nothing was
 *     added, and keeps the header and question of one that had them.
 *
 * Input (fuzz_split, fuzz.h): control bit 0 override, bit 1 an IPv6 client,
 * bits 2-7 the source prefix length; the query; the answer.
 *
 * Thread: single.  Ownership: borrows @data.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "dnslb/core/wire.h"
#include "tests/fuzz/fuzz.h"

#define CAP	4096

static uint8_t qbuf[CAP], echo[CAP], abuf[65536];

/* The query as a backend would echo it: QR set. */
static void
as_response(uint8_t *pkt)
{
	dlb_wr16(pkt + 2, (uint16_t)(dlb_rd16(pkt + 2) | DLB_F_QR));
}

/* dlb_wire_add_ecs on @q; @return its new length and *@added. */
static size_t
add_ecs(const uint8_t *q, size_t qlen, const struct dlb_dnsmsg *m, uint8_t ctl,
	const uint8_t *ecs, size_t ecslen, enum dlb_ecs_added *added)
{
	struct dlb_dnsmsg m2;
	size_t n;

	memcpy(qbuf, q, qlen);
	n = dlb_wire_add_ecs(qbuf, qlen, CAP, m, ecs, ecslen, ctl & 1, added);
	if (m->qdcount != 1)
		CHECK(*added == DLB_ECS_NONE);
	if (*added == DLB_ECS_NONE) {
		CHECK(n == qlen && memcmp(qbuf, q, qlen) == 0);
		return n;
	}
	CHECK(n <= CAP);
	CHECK(dlb_wire_parse_query(qbuf, n, &m2) == DLB_OK);
	CHECK(m2.id == m->id && m2.flags == m->flags && m2.qdcount == m->qdcount);
	CHECK(m2.qname_len == m->qname_len && memcmp(m2.qname_lc, m->qname_lc, m->qname_len) == 0);
	CHECK(m2.qtype == m->qtype && m2.qclass == m->qclass);
	CHECK(m2.has_opt && m2.ecs_off != 0);
	if ((ctl & 1) || m->ecs_off == 0)
		CHECK(memcmp(qbuf + m2.ecs_off, ecs, ecslen) == 0);
	if (*added == DLB_ECS_OPT_RR) {
		CHECK(!m->has_opt && m2.arcount == m->arcount + 1 && m2.udp_size == 512);
	} else {
		CHECK(m->has_opt && m2.arcount == m->arcount);
	}
	return n;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dlb_dnsmsg m, r, r2;
	const uint8_t *query, *ans;
	uint8_t ecs[4 + 4 + 16];
	size_t qlen, alen, ecslen, n, s;
	enum dlb_ecs_added added;
	union {
		struct sockaddr sa;
		struct sockaddr_in v4;
		struct sockaddr_in6 v6;
	} client;
	uint8_t ctl;
	int prefix, rq;

	if (!fuzz_split(data, size, &ctl, &query, &qlen, &ans, &alen) || qlen > CAP ||
	    alen > sizeof(abuf))
		return 0;
	if (dlb_wire_parse_query(query, qlen, &m) != DLB_OK)
		return 0;

	memset(&client, 0, sizeof(client));
	prefix = ctl >> 2;
	if (ctl & 2) {
		client.v6.sin6_family = AF_INET6;
		CHECK(inet_pton(AF_INET6, "2001:db8:1234:5678::42", &client.v6.sin6_addr) == 1);
		prefix = prefix * 2 + 1;	/* 1..127 */
	} else {
		client.v4.sin_family = AF_INET;
		CHECK(inet_pton(AF_INET, "192.0.2.42", &client.v4.sin_addr) == 1);
		if (prefix > 32)
			prefix = 32;
	}
	ecslen = dlb_wire_ecs_option(&client.sa, prefix, ecs);
	CHECK(ecslen >= 8 && ecslen <= sizeof(ecs));
	n = add_ecs(query, qlen, &m, ctl, ecs, ecslen, &added);

	/* the query we sent, echoed: stripping gives back the client's */
	if (added != DLB_ECS_NONE && !(added == DLB_ECS_OPTION && m.ecs_off != 0)) {
		memcpy(echo, qbuf, n);
		as_response(echo);
		s = dlb_wire_strip_ecs(echo, n, added, NULL);
		memcpy(abuf, query, qlen);
		as_response(abuf);
		/* (less what followed the last record: dropped) */
		CHECK(s == m.parsed_end && memcmp(echo, abuf, m.parsed_end) == 0);
	}

	/* any answer */
	memcpy(abuf, ans, alen);
	rq = dlb_wire_parse_response_question(abuf, alen, &r);
	s = dlb_wire_strip_ecs(abuf, alen, added, NULL);
	CHECK(s <= alen);
	if (added == DLB_ECS_NONE)
		CHECK(s == alen && memcmp(abuf, ans, alen) == 0);
	if (rq == DLB_OK && s != alen) {
		CHECK(dlb_wire_parse_response_question(abuf, s, &r2) == DLB_OK);
		CHECK(r2.id == r.id && r2.flags == r.flags && r2.qdcount == r.qdcount);
		CHECK(r2.ancount == r.ancount && r2.nscount == r.nscount);
		CHECK(r2.qname_len == r.qname_len && r2.qtype == r.qtype && r2.qclass == r.qclass);
		CHECK(memcmp(abuf + DLB_DNS_HDR, ans + DLB_DNS_HDR,
			     r.question_end - DLB_DNS_HDR) == 0);
	}
	return 0;
}
