/*
 * fuzz_clear_types.c - libFuzzer target for the response actions' record
 * walkers on a backend's answer (untrusted): dlb_wire_walk_rrs (LimitTTL...)
 * and dlb_wire_clear_types (ClearRecordTypesResponseAction), which rebuilds
 * the message and re-points its compression pointers. Checks:
 *
 *   - walk_rrs visits TTL fields inside the message, sections 1..3;
 *   - clear_types leaves the message untouched when it fails or has
 *     nothing to remove, changes only a message walk_rrs accepts, and stays
 *     within its capacity: the message's own length as response actions
 *     pass it (a pointer into anything but an earlier name is written out
 *     in full, so a backend can make the rebuilt message longer), or with
 *     control bit 7 the whole buffer;
 *   - a rebuilt message walks, keeps the header and question, has the
 *     section counts of the records kept and none of the listed types
 *     (OPT always stays);
 *   - every record kept has the same owner name, type, class and TTL, and
 *     the same RDATA: bytes for types without names, the decoded names (and
 *     the fixed fields) for NS, CNAME, PTR, DNAME, MX and SOA.
 *
 * Input: byte 0 picks the types to clear from a list (bit i: types[i] for
 * i < 7) and the capacity (bit 7), the rest is the answer.
 *
 * Thread: single.  Ownership: borrows @data.
 */
#include <string.h>

#include "dnslb/core/wire.h"
#include "rules/rules.h"
#include "tests/fuzz/fuzz.h"

#define CAP	65536

/* A AAAA CNAME NS SOA MX RRSIG */
static const uint16_t all_types[7] = { 1, 28, 5, 2, 6, 15, 46 };
static uint8_t in[CAP], pkt[CAP];
static size_t inlen, outlen;

struct rec {
	size_t owner, fixed, rdata, end;
	uint16_t type;
};

/* The records of @p (which walk_rrs accepted), at most @max; @return how many, or -1. */
static int
records(const uint8_t *p, size_t len, struct rec *out, int max, size_t *qend)
{
	unsigned qd = dlb_rd16(p + 4), n = 0;
	unsigned total = (unsigned)dlb_rd16(p + 6) + dlb_rd16(p + 8) + dlb_rd16(p + 10);
	size_t pos = DLB_DNS_HDR;
	int r;

	for (unsigned i = 0; i < qd; i++) {
		r = dlb_wire_skip_name(p, len, pos);
		if (r < 0)
			return -1;
		pos = (size_t)r + 4;
	}
	*qend = pos;
	for (n = 0; n < total && (int)n < max; n++) {
		r = dlb_wire_skip_name(p, len, pos);
		if (r < 0 || (size_t)r + 10 > len)
			return -1;
		out[n].owner = pos;
		out[n].fixed = (size_t)r;
		out[n].type = dlb_rd16(p + r);
		out[n].rdata = (size_t)r + 10;
		out[n].end = out[n].rdata + dlb_rd16(p + r + 8);
		if (out[n].end > len)
			return -1;
		pos = out[n].end;
	}
	return (int)n;
}

/* Both names decode the same (or the first does not decode at all). @return the next offsets. */
static void
same_name(const uint8_t *a, size_t alen, size_t *ao, const uint8_t *b, size_t blen, size_t *bo)
{
	uint8_t na[DLB_MAX_NAME], nb[DLB_MAX_NAME];
	int la, lb;

	la = dlb_wire_decode_name(a, alen, *ao, na, ao, NULL);
	lb = dlb_wire_decode_name(b, blen, *bo, nb, bo, NULL);
	if (la < 0)
		return;		/* a forward pointer, or too much work: what was it? */
	CHECK(lb == la && memcmp(na, nb, (size_t)la) == 0);
}

static void
same_rdata(const struct rec *x, const struct rec *y)
{
	size_t a = x->rdata, b = y->rdata;

	switch (x->type) {
	case 2: case 5: case 12: case 39:	/* NS CNAME PTR DNAME */
		same_name(in, inlen, &a, pkt, outlen, &b);
		break;
	case 15:	/* MX */
		CHECK(memcmp(in + a, pkt + b, 2) == 0);
		a += 2;
		b += 2;
		same_name(in, inlen, &a, pkt, outlen, &b);
		break;
	case 6: {	/* SOA */
		size_t a0 = a;

		same_name(in, inlen, &a, pkt, outlen, &b);
		if (a == a0)
			break;
		same_name(in, inlen, &a, pkt, outlen, &b);
		if (a + 20 <= x->end)
			CHECK(memcmp(in + a, pkt + b, 20) == 0);
		break;
	}
	case 3: case 4: case 7: case 8: case 9: case 14: case 17: case 18: case 21: case 26:
	case 33: case 35: case 36:
		break;	/* names inside (MINFO, RP, AFSDB, ...), not compared here */
	default:
		CHECK(x->end - x->rdata == y->end - y->rdata);
		CHECK(memcmp(in + x->rdata, pkt + y->rdata, x->end - x->rdata) == 0);
	}
}

static bool
listed(uint16_t t, const uint16_t *types, int n)
{
	for (int i = 0; i < n; i++)
		if (types[i] == t)
			return t != DLB_TYPE_OPT;
	return false;
}

static void
visit(void *ud, uint8_t *p, int section, uint16_t type, uint16_t cls, size_t ttl_off)
{
	size_t len = *(size_t *)ud;

	CHECK(section >= 1 && section <= 3 && type != DLB_TYPE_OPT && ttl_off + 4 <= len);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct rec ra[8192], rb[8192];
	uint16_t types[7];
	size_t len, cap, qa, qb;
	int ntypes = 0, walk, n, na, nb, j, k = 0, an, ns;
	unsigned kept[3] = { 0, 0, 0 };

	if (size < 1 || size - 1 > CAP)
		return 0;
	for (int i = 0; i < 7; i++)
		if (data[0] & (1u << i))
			types[ntypes++] = all_types[i];
	len = size - 1;
	cap = (data[0] & 0x80) ? CAP : len;
	memcpy(in, data + 1, len);
	memcpy(pkt, data + 1, len);

	walk = dlb_wire_walk_rrs(pkt, len, visit, &len);
	CHECK(memcmp(pkt, in, len) == 0);
	n = dlb_wire_clear_types(pkt, len, cap, types, ntypes);
	if (n < 0) {
		CHECK(memcmp(pkt, in, len) == 0);
		return 0;
	}
	if ((size_t)n == len && memcmp(pkt, in, len) == 0)
		return 0;	/* nothing to remove (or a rebuild to the same bytes) */
	CHECK(walk == DLB_OK && n > 0 && (size_t)n <= cap);
	inlen = len;
	outlen = (size_t)n;
	CHECK(dlb_wire_walk_rrs(pkt, outlen, visit, &outlen) == DLB_OK);
	na = records(in, len, ra, 8192, &qa);
	nb = records(pkt, outlen, rb, 8192, &qb);
	CHECK(na >= 0 && nb >= 0 && nb < na);
	CHECK(qa == qb && memcmp(pkt, in, 6) == 0 &&
	      memcmp(pkt + DLB_DNS_HDR, in + DLB_DNS_HDR, qa - DLB_DNS_HDR) == 0);
	an = dlb_rd16(in + 6);
	ns = dlb_rd16(in + 8);
	for (int i = 0; i < na; i++) {
		size_t oa = ra[i].owner, ob;

		if (listed(ra[i].type, types, ntypes))
			continue;
		CHECK(k < nb);
		kept[i < an ? 0 : i < an + ns ? 1 : 2]++;
		j = k++;
		ob = rb[j].owner;
		CHECK(rb[j].type == ra[i].type);
		CHECK(memcmp(in + ra[i].fixed, pkt + rb[j].fixed, 8) == 0);	/* type class TTL */
		same_name(in, inlen, &oa, pkt, outlen, &ob);
		same_rdata(&ra[i], &rb[j]);
	}
	CHECK(k == nb);
	CHECK(dlb_rd16(pkt + 6) == kept[0] && dlb_rd16(pkt + 8) == kept[1] &&
	      dlb_rd16(pkt + 10) == kept[2]);
	for (int i = 0; i < nb; i++)
		CHECK(!listed(rb[i].type, types, ntypes));
	return 0;
}
