/*
 * test_rules_wire.c - unit tests for rules/names.c (suffix and name sets),
 * rules/answer.c (the answer builders against answers captured from dnsdist
 * 1.7.3, record walking and removal) and rules/log.c (LogAction formats).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rules/rules.h"

#define PB_MAX	4096	/* the test packet builder's capacity (pkt.h) */
#include "pkt.h"

/* ---- helpers --------------------------------------------------------------- */

static size_t
hex2bin(const char *hex, uint8_t *out, size_t outsz)
{
	size_t n = 0;

	for (; hex[0] != '\0' && hex[1] != '\0'; hex += 2) {
		unsigned v;

		assert_int_equal(sscanf(hex, "%2x", &v), 1);
		assert_true(n < outsz);
		out[n++] = (uint8_t)v;
	}
	return n;
}

static size_t
wire(const char *text, uint8_t *out)
{
	int n = dlb_wire_name_from_text(text, out, DLB_MAX_NAME);

	assert_true(n > 0);
	for (int i = 0; i < n; i++) {
		if (out[i] >= 'A' && out[i] <= 'Z')
			out[i] = (uint8_t)(out[i] + 32);
	}
	return (size_t)n;
}

/* ---- suffix set ------------------------------------------------------------ */

static bool
sfx_has(const struct dlb_suffix_set *s, const char *text)
{
	uint8_t w[DLB_MAX_NAME];
	size_t n = wire(text, w);

	return dlb_suffix_set_match(s, w, n);
}

static void
sfx_add(struct dlb_suffix_set *s, const char *text)
{
	uint8_t w[DLB_MAX_NAME];
	int n = dlb_wire_name_from_text(text, w, sizeof(w));

	assert_true(n > 0);
	/* the case as written: add() lowercases */
	assert_int_equal(dlb_suffix_set_add(s, w, (size_t)n), DLB_OK);
}

static bool
sfx_del(struct dlb_suffix_set *s, const char *text)
{
	uint8_t w[DLB_MAX_NAME];
	size_t n = wire(text, w);

	return dlb_suffix_set_remove(s, w, n);
}

static void
test_suffix_basic(void **state)
{
	struct dlb_suffix_set *s = dlb_suffix_set_new();
	uint8_t bad[] = { 3, 'a', 'b' };

	(void)state;
	assert_non_null(s);
	assert_false(sfx_has(s, "example.com"));
	sfx_add(s, "EXAMPLE.Com.");
	assert_int_equal(dlb_suffix_set_count(s), 1);
	assert_true(sfx_has(s, "example.com"));
	assert_true(sfx_has(s, "www.example.com"));
	assert_true(sfx_has(s, "a.b.c.example.com"));
	assert_false(sfx_has(s, "ample.com"));
	assert_false(sfx_has(s, "xexample.com"));
	assert_false(sfx_has(s, "com"));
	assert_false(sfx_has(s, "example.org"));
	assert_false(sfx_has(s, "example.com.org"));
	assert_false(sfx_has(s, "."));
	/* malformed input neither matches nor is added */
	assert_false(dlb_suffix_set_match(s, bad, sizeof(bad)));
	assert_int_equal(dlb_suffix_set_add(s, bad, sizeof(bad)), DLB_EINVAL);

	sfx_add(s, "example.com");	/* again: no change */
	assert_int_equal(dlb_suffix_set_count(s), 1);
	sfx_add(s, "www.example.com");
	assert_int_equal(dlb_suffix_set_count(s), 2);
	assert_true(sfx_del(s, "example.com"));
	assert_false(sfx_del(s, "example.com"));
	assert_false(sfx_del(s, "nothere.example.com"));
	assert_false(sfx_has(s, "example.com"));
	assert_false(sfx_has(s, "other.example.com"));
	assert_true(sfx_has(s, "www.example.com"));
	assert_true(sfx_has(s, "x.www.example.com"));
	assert_int_equal(dlb_suffix_set_count(s), 1);

	/* the root matches everything */
	sfx_add(s, ".");
	assert_true(sfx_has(s, "."));
	assert_true(sfx_has(s, "anything.org"));
	assert_true(sfx_del(s, "."));
	assert_false(sfx_has(s, "anything.org"));

	assert_true(sfx_del(s, "www.example.com"));
	assert_int_equal(dlb_suffix_set_count(s), 0);
	assert_false(sfx_has(s, "www.example.com"));
	dlb_suffix_set_free(s);
	dlb_suffix_set_free(NULL);
}

static void
test_suffix_deep_and_wide(void **state)
{
	struct dlb_suffix_set *s = dlb_suffix_set_new();
	char deep[300], name[64];
	size_t o = 0;

	(void)state;
	/* 127 one-octet labels: the longest name there is */
	for (int i = 0; i < 127; i++)
		o += (size_t)snprintf(deep + o, sizeof(deep) - o, "%c.", 'a' + i % 26);
	sfx_add(s, deep);
	assert_true(sfx_has(s, deep));
	assert_false(sfx_has(s, deep + 2));

	/* many children of one node: the hashed table, growth and deletion */
	for (int i = 0; i < 5000; i++) {
		snprintf(name, sizeof(name), "n%d.wide.test", i);
		sfx_add(s, name);
	}
	assert_int_equal(dlb_suffix_set_count(s), 5001);
	for (int i = 0; i < 5000; i += 2) {
		snprintf(name, sizeof(name), "n%d.wide.test", i);
		assert_true(sfx_del(s, name));
	}
	for (int i = 0; i < 5000; i++) {
		snprintf(name, sizeof(name), "x.n%d.wide.test", i);
		assert_int_equal(sfx_has(s, name), i % 2 == 1);
	}
	assert_false(sfx_has(s, "wide.test"));
	assert_false(sfx_has(s, "n5000.wide.test"));
	for (int i = 1; i < 5000; i += 2) {
		snprintf(name, sizeof(name), "n%d.wide.test", i);
		assert_true(sfx_del(s, name));
	}
	assert_int_equal(dlb_suffix_set_count(s), 1);
	assert_false(sfx_has(s, "n1.wide.test"));
	dlb_suffix_set_free(s);
}

static void
test_suffix_format_and_copy(void **state)
{
	struct dlb_suffix_set *s = dlb_suffix_set_new(), *c;
	char out[512], small[24];

	(void)state;
	dlb_suffix_set_format(s, out, sizeof(out));
	assert_string_equal(out, "");
	/* dnsdist 1.7.3 printed "qname in x., aa.x., ba.x., b.x." for these */
	sfx_add(s, "aa.x.");
	sfx_add(s, "b.x.");
	sfx_add(s, "x.");
	sfx_add(s, "ba.x.");
	dlb_suffix_set_format(s, out, sizeof(out));
	assert_string_equal(out, "x., aa.x., ba.x., b.x.");
	dlb_suffix_set_free(s);

	/* and "., example., a.example., z.a.example., b.example., org., A.org., b.org., Ab.org." */
	s = dlb_suffix_set_new();
	sfx_add(s, "b.example.");
	sfx_add(s, "a.example.");
	sfx_add(s, "example.");
	sfx_add(s, "z.a.example.");
	sfx_add(s, "org.");
	sfx_add(s, "A.org");
	sfx_add(s, "Ab.org");
	sfx_add(s, "b.org");
	sfx_add(s, ".");
	dlb_suffix_set_format(s, out, sizeof(out));
	assert_string_equal(out, "., example., a.example., z.a.example., b.example., org., a.org., "
				 "b.org., ab.org.");
	dlb_suffix_set_format(s, small, sizeof(small));
	assert_true(strlen(small) <= sizeof(small) - 1);
	assert_string_equal(small + strlen(small) - 3, "...");
	assert_int_equal(strncmp(small, "., example., a.exa", 18), 0);

	c = dlb_suffix_set_copy(s);
	assert_non_null(c);
	assert_int_equal(dlb_suffix_set_count(c), 9);
	assert_true(sfx_del(s, "example."));
	assert_true(sfx_del(s, "."));
	assert_true(sfx_has(c, "q.example."));
	assert_true(sfx_has(c, "anything."));
	assert_false(sfx_has(s, "q.example."));
	dlb_suffix_set_format(c, out, sizeof(out));
	assert_string_equal(out, "., example., a.example., z.a.example., b.example., org., a.org., "
				 "b.org., ab.org.");
	dlb_suffix_set_free(s);
	dlb_suffix_set_free(c);

	/* a cut output is the start of the whole one (only the first children get sorted) */
	s = dlb_suffix_set_new();
	for (int i = 0; i < 300; i++) {
		char name[32];

		snprintf(name, sizeof(name), "h%d.z%d.test", i * 7919 % 1000, i % 3);
		sfx_add(s, name);
	}
	{
		char *big = malloc(16384);
		size_t cut;

		assert_non_null(big);
		dlb_suffix_set_format(s, big, 16384);
		assert_null(strstr(big, "..."));
		for (size_t sz = 4; sz < 200; sz += 7) {
			dlb_suffix_set_format(s, small, sz < sizeof(small) ? sz : sizeof(small));
			dlb_suffix_set_format(s, out, sz);
			cut = strlen(out) - 3;
			assert_string_equal(out + cut, "...");
			assert_int_equal(strncmp(out, big, cut), 0);
		}
		free(big);
	}
	dlb_suffix_set_free(s);
}

/*
 * One dlb_qname_labels shared by lookups in several sets (as the rules share
 * the dq's): every answer equals dlb_suffix_set_match's, whichever set walked
 * deeper first (the hashes are filled lazily from the root end) and in any
 * order of the sets.
 */
static void
test_suffix_shared_labels(void **state)
{
	static const char *const names[] = {
		"www.example.com", "WWW.Example.COM", "example.com", "com", ".",
		"a.b.c.d.example.com", "x.www.example.com", "example.org", "www.example.net",
		"deep.a.b.c.d.e.f.g.h.i.j.example.net", "z9.example", "y9.example", "bench.example",
	};
	struct dlb_suffix_set *set[5];
	uint8_t w[DLB_MAX_NAME], bad[] = { 3, 'a', 'b' };
	struct dlb_qname_labels l;

	(void)state;
	for (size_t i = 0; i < 5; i++) {
		set[i] = dlb_suffix_set_new();
		assert_non_null(set[i]);
	}
	sfx_add(set[0], "com");				/* stops at the TLD */
	sfx_add(set[1], "www.Example.com");		/* walks 3 labels */
	sfx_add(set[1], "j.example.net");
	sfx_add(set[2], "z9.example");
	sfx_add(set[2], "y9.example");
	sfx_add(set[3], "c.d.example.com");
	sfx_add(set[3], "org");
	/* set[4] empty */
	for (int order = 0; order < 2; order++) {
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
			size_t n = wire(names[i], w);

			dlb_qname_labels_init(&l, w, n);
			for (size_t j = 0; j < 5; j++) {
				size_t k = order == 0 ? j : 4 - j;
				bool want = dlb_suffix_set_match(set[k], w, n);

				assert_int_equal(dlb_suffix_set_match_labels(set[k], w, &l), want);
				/* again, the hashes now all there */
				assert_int_equal(dlb_suffix_set_match_labels(set[k], w, &l), want);
			}
		}
	}
	/* a few answers spelled out */
	dlb_qname_labels_init(&l, w, wire("WWW.EXAMPLE.COM", w));
	assert_true(dlb_suffix_set_match_labels(set[0], w, &l));
	assert_true(dlb_suffix_set_match_labels(set[1], w, &l));
	assert_false(dlb_suffix_set_match_labels(set[2], w, &l));
	assert_false(dlb_suffix_set_match_labels(set[3], w, &l));
	assert_false(dlb_suffix_set_match_labels(set[4], w, &l));
	assert_int_equal(l.n, 3);
	/* a malformed name splits into no label: only the root would match it */
	dlb_qname_labels_init(&l, bad, sizeof(bad));
	assert_int_equal(l.n, 0);
	for (size_t j = 0; j < 5; j++)
		assert_false(dlb_suffix_set_match_labels(set[j], bad, &l));
	sfx_add(set[4], ".");
	assert_true(dlb_suffix_set_match_labels(set[4], bad, &l));
	for (size_t i = 0; i < 5; i++)
		dlb_suffix_set_free(set[i]);
}

static void
test_suffix_memory(void **state)
{
	struct dlb_suffix_set *s = dlb_suffix_set_new(), *c;
	char name[64];
	const int n = 100000;

	(void)state;
	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "name%06d.com.", i);
		sfx_add(s, name);
	}
	assert_int_equal(dlb_suffix_set_count(s), (size_t)n);
	print_message("suffix set: %d names like name000123.com.: %zu bytes, %.1f bytes/name\n", n,
		      dlb_suffix_set_memory(s), (double)dlb_suffix_set_memory(s) / n);
	for (int i = 0; i < n; i += 997) {
		snprintf(name, sizeof(name), "www.name%06d.com.", i);
		assert_true(sfx_has(s, name));
	}
	assert_false(sfx_has(s, "name100000.com."));
	c = dlb_suffix_set_copy(s);
	assert_non_null(c);
	assert_true(sfx_has(c, "x.name099999.com."));
	dlb_suffix_set_free(c);
	dlb_suffix_set_free(s);
}

/* ---- name set -------------------------------------------------------------- */

static void
test_name_set(void **state)
{
	struct dlb_name_set *s = dlb_name_set_new(), *c;
	uint8_t w[DLB_MAX_NAME];
	char out[256], name[64];
	size_t n;
	int r;

	(void)state;
	n = wire("www.example.com", w);
	assert_false(dlb_name_set_match(s, w, n));
	r = dlb_wire_name_from_text("WWW.Example.COM", w, sizeof(w));
	assert_int_equal(dlb_name_set_add(s, w, (size_t)r), DLB_OK);
	n = wire("www.example.com", w);
	assert_true(dlb_name_set_match(s, w, n));
	assert_int_equal(dlb_name_set_add(s, w, n), DLB_OK);
	assert_int_equal(dlb_name_set_count(s), 1);
	n = wire("example.com", w);
	assert_false(dlb_name_set_match(s, w, n));
	n = wire("a.www.example.com", w);
	assert_false(dlb_name_set_match(s, w, n));
	n = wire("b.example.", w);
	dlb_name_set_add(s, w, n);
	n = wire("a.example.", w);
	dlb_name_set_add(s, w, n);
	dlb_name_set_format(s, out, sizeof(out));
	assert_string_equal(out, "a.example., b.example., www.example.com.");

	c = dlb_name_set_copy(s);
	assert_non_null(c);
	assert_true(dlb_name_set_remove(s, w, n));
	assert_false(dlb_name_set_remove(s, w, n));
	assert_false(dlb_name_set_match(s, w, n));
	assert_true(dlb_name_set_match(c, w, n));
	assert_int_equal(dlb_name_set_count(c), 3);
	dlb_name_set_clear(c);
	assert_int_equal(dlb_name_set_count(c), 0);
	assert_false(dlb_name_set_match(c, w, n));
	dlb_name_set_free(c);

	/* growth and backward-shift deletion */
	for (int i = 0; i < 3000; i++) {
		snprintf(name, sizeof(name), "h%d.example", i);
		n = wire(name, w);
		assert_int_equal(dlb_name_set_add(s, w, n), DLB_OK);
	}
	for (int i = 0; i < 3000; i += 3) {
		snprintf(name, sizeof(name), "h%d.example", i);
		n = wire(name, w);
		assert_true(dlb_name_set_remove(s, w, n));
	}
	for (int i = 0; i < 3000; i++) {
		snprintf(name, sizeof(name), "h%d.example", i);
		n = wire(name, w);
		assert_int_equal(dlb_name_set_match(s, w, n), i % 3 != 0);
	}
	assert_int_equal(dlb_name_set_count(s), 2 + 2000);
	dlb_name_set_format(s, out, 32);
	assert_true(strlen(out) <= 31);
	assert_string_equal(out + strlen(out) - 3, "...");
	dlb_name_set_free(s);
	dlb_name_set_free(NULL);
}

/* ---- answer builders: byte for byte against dnsdist 1.7.3 ------------------- */

struct cap {
	uint8_t pkt[1024];
	size_t len;
	struct dlb_dnsmsg m;
};

static void
cap_query(struct cap *c, const char *hex)
{
	c->len = hex2bin(hex, c->pkt, sizeof(c->pkt));
	assert_int_equal(dlb_wire_parse_query(c->pkt, c->len, &c->m), DLB_OK);
}

static void
expect_hex(const struct cap *c, int r, const char *hex)
{
	uint8_t want[1024];
	size_t n = hex2bin(hex, want, sizeof(want));

	assert_int_equal(r, (int)n);
	assert_memory_equal(c->pkt, want, n);
}

static struct sockaddr_storage spoof_addrs[2];

static void
spoof_init(void)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)&spoof_addrs[0];
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&spoof_addrs[1];

	memset(spoof_addrs, 0, sizeof(spoof_addrs));
	sin->sin_family = AF_INET;
	inet_pton(AF_INET, "192.0.2.1", &sin->sin_addr);
	sin6->sin6_family = AF_INET6;
	inet_pton(AF_INET6, "2001:db8::1", &sin6->sin6_addr);
}

static int
spoof(struct cap *c, const struct dlb_answer_opts *o)
{
	return dlb_answer_spoof_addrs(c->pkt, c->len, sizeof(c->pkt), &c->m, spoof_addrs, 2, o,
				      NULL);
}

static void
test_answer_spoof(void **state)
{
	struct dlb_answer_opts o = { .aa = true, .aa_set = true, .ad = true, .ra = false,
				     .ra_set = true, .ttl = 300 };
	struct dlb_answer_opts ra = { .ra = true, .ra_set = true, .ttl = 60 };
	struct cap c;
	uint8_t copy[1024];

	(void)state;
	spoof_init();
	/* SpoofAction({"192.0.2.1","2001:db8::1"}): A, no EDNS, RD */
	cap_query(&c, "1234010000010000000000000573706f6f6604746573740000010001");
	expect_hex(&c, spoof(&c, NULL), "1234818000010001000000000573706f6f6604746573740000010001"
					 "c00c000100010000003c0004c0000201");
	/* EDNS with DO, RD clear: RA clear, OPT 1232 with DO */
	cap_query(&c, "1234000000010000000000010573706f6f6604"
		   "7465737400000100010000291000000080000000");
	expect_hex(&c, spoof(&c, NULL), "1234800000010001000000010573706f6f6604746573740000010001"
					 "c00c000100010000003c0004c000020100002904d0000080000000");
	/* AAAA with EDNS */
	cap_query(&c, "1234010000010000000000010573706f6f6604"
		   "7465737400001c00010000291000000000000000");
	expect_hex(&c, spoof(&c, NULL),
		   "1234818000010001000000010573706f6f660474"
		   "65737400001c0001c00c001c00010000003c0010"
		   "20010db800000000000000000000000100002904d0000000000000");
	/* the client's case is echoed */
	cap_query(&c, "1234010000010000000000000553704f6f4604546553740000010001");
	expect_hex(&c, spoof(&c, NULL), "1234818000010001000000000553704f6f4604546553740000010001"
					 "c00c000100010000003c0004c0000201");
	/* {aa=true, ad=true, ra=false, ttl=300} */
	cap_query(&c, "1234010000010000000000000673706f6f666f04746573740000010001");
	expect_hex(&c, spoof(&c, &o), "1234852000010001000000000673706f6f666f04746573740000010001"
				       "c00c000100010000012c0004c0000201");
	/* {ra=true} with RD clear */
	cap_query(&c, "1234000000010000000000000773706f6f66726104746573740000010001");
	expect_hex(&c, spoof(&c, &ra), "123480800001000100000000077370"
		   "6f6f66726104746573740000010001"
					"c00c000100010000003c0004c0000201");
	/* query flags AA|RD|Z|AD|CD: AA, Z and CD kept, AD cleared */
	cap_query(&c, "abcd05700001000000000000" "0573706f6f660474657374000001" "0001");
	expect_hex(&c, spoof(&c, NULL), "abcd85d000010001000000000573706f6f6604746573740000010001"
					 "c00c000100010000003c0004c0000201");
	/* opcode 2 is echoed */
	cap_query(&c, "abcd11000001000000000000" "0573706f6f660474657374000001" "0001");
	expect_hex(&c, spoof(&c, NULL), "abcd918000010001000000000573706f6f6604746573740000010001"
					 "c00c000100010000003c0004c0000201");
	/* MX: no address of that type, the action does nothing */
	cap_query(&c, "1234010000010000000000000573706f6f66047465737400000f0001");
	memcpy(copy, c.pkt, c.len);
	assert_int_equal(spoof(&c, NULL), 0);
	assert_memory_equal(copy, c.pkt, c.len);
	/* no room: DLB_ESPACE, packet untouched */
	cap_query(&c, "1234010000010000000000000573706f6f6604746573740000010001");
	memcpy(copy, c.pkt, c.len);
	assert_int_equal(dlb_answer_spoof_addrs(c.pkt, c.len, c.len + 15, &c.m, spoof_addrs, 2,
						NULL, NULL), DLB_ESPACE);
	assert_memory_equal(copy, c.pkt, c.len);
	assert_int_equal(dlb_answer_spoof_addrs(c.pkt, c.len, c.len + 16, &c.m, spoof_addrs, 2,
						NULL, NULL), (int)c.len + 16);
}

static void
test_answer_spoof_any_shuffled(void **state)
{
	struct cap c;
	int seen[2] = { 0, 0 };

	(void)state;
	spoof_init();
	for (int i = 0; i < 64; i++) {
		struct dlb_dnsmsg a;
		size_t p;
		int r;

		cap_query(&c, "1234010000010000000000000573706f6f6604746573740000ff0001");
		r = spoof(&c, NULL);
		/* 12 + 16 question, A record 16, AAAA record 28 */
		assert_int_equal(r, 28 + 16 + 28);
		assert_int_equal(dlb_rd16(c.pkt + 2), 0x8180);
		assert_int_equal(dlb_rd16(c.pkt + 6), 2);
		assert_int_equal(dlb_wire_parse_response_question(c.pkt, (size_t)r, &a), DLB_OK);
		p = 28;
		assert_int_equal(dlb_rd16(c.pkt + p), 0xc00c);
		seen[dlb_rd16(c.pkt + p + 2) == 28]++;
		/* both records there, each well formed */
		for (int k = 0; k < 2; k++) {
			uint16_t t = dlb_rd16(c.pkt + p + 2), rdlen = dlb_rd16(c.pkt + p + 10);

			assert_int_equal(rdlen, t == 1 ? 4 : 16);
			assert_int_equal(dlb_rd32(c.pkt + p + 6), 60);
			p += 12 + rdlen;
		}
		assert_int_equal(p, (size_t)r);
	}
	/* dnsdist shuffles; both orders show up */
	assert_true(seen[0] > 0 && seen[1] > 0);
}

static void
test_answer_cname_raw(void **state)
{
	uint8_t target[DLB_MAX_NAME], t2[DLB_MAX_NAME], abc[] = "\003abc", x[] = "\001x";
	uint8_t *raws[2] = { abc, x };
	uint16_t rawlen[2] = { 4, 2 };
	size_t tl = (size_t)dlb_wire_name_from_text("target.example.", target, sizeof(target));
	size_t tl2 = (size_t)dlb_wire_name_from_text("www.cname2.test.", t2, sizeof(t2));
	struct cap c;

	(void)state;
	/* SpoofCNAMEAction("target.example."): A, no EDNS */
	cap_query(&c, "12340100000100000000000005636e616d6504746573740000010001");
	expect_hex(&c, dlb_answer_spoof_cname(c.pkt, c.len, sizeof(c.pkt), &c.m, target, tl, NULL,
					      NULL),
		   "12348180000100010000000005636e616d650474"
		   "6573740000010001c00c000500010000003c0010"
		   "06746172676574076578616d706c6500");
	/* MX with EDNS+DO: still a CNAME, then the OPT */
	cap_query(&c, "12340100000100000000000105636e616d6504"
		   "7465737400000f00010000291000000080000000");
	expect_hex(&c, dlb_answer_spoof_cname(c.pkt, c.len, sizeof(c.pkt), &c.m, target, tl, NULL,
					      NULL),
		   "12348180000100010000000105636e616d650474"
		   "65737400000f0001c00c000500010000003c0010"
		   "06746172676574076578616d706c650000002904d0000080000000");
	/* a target below the qname is not compressed */
	cap_query(&c, "12340100000100000000000006636e616d653204746573740000010001");
	expect_hex(&c, dlb_answer_spoof_cname(c.pkt, c.len, sizeof(c.pkt), &c.m, t2, tl2, NULL,
					      NULL),
		   "12348180000100010000000006636e616d653204"
		   "746573740000010001c00c000500010000003c0011"
		   "0377777706636e616d6532047465737400");
	/* SpoofRawAction("\003abc"): TXT with EDNS+DO, and no OPT in the answer */
	cap_query(&c, "12340100000100000000000103"
		   "72617704746573740000100001" "0000291000000080000000");
	expect_hex(&c, dlb_answer_spoof_raw(c.pkt, c.len, sizeof(c.pkt), &c.m, raws, rawlen, 1,
					    NULL, NULL),
		   "123481800001000100000000037261770474657374"
		   "0000100001c00c001000010000003c000403616263");
	/* two rdatas, RD clear: shuffled like the addresses; both orders as dnsdist sent them */
	for (int i = 0, seen = 0; seen != 3; i++) {
		static const char *const both[2] = {
			"123480000001000200000000047261773204746573740000100001"
			"c00c001000010000003c000403616263c00c001000010000003c00020178",
			"123480000001000200000000047261773204746573740000100001"
			"c00c001000010000003c00020178c00c001000010000003c000403616263",
		};
		uint8_t want[2][128];
		size_t wn = hex2bin(both[0], want[0], sizeof(want[0]));
		int r;

		assert_true(i < 200);
		hex2bin(both[1], want[1], sizeof(want[1]));
		cap_query(&c, "123400000001000000000001047261773204746573740000100001"
			      "0000291000000080000000");
		r = dlb_answer_spoof_raw(c.pkt, c.len, sizeof(c.pkt), &c.m, raws, rawlen, 2, NULL,
					 NULL);
		assert_int_equal(r, (int)wn);
		if (memcmp(c.pkt, want[0], wn) == 0)
			seen |= 1;
		else if (memcmp(c.pkt, want[1], wn) == 0)
			seen |= 2;
		else
			fail_msg("neither order");
	}
	/* the query's class (dnsdist would write IN): CH */
	cap_query(&c, "1234010000010000000000000372617704746573740000100003");
	assert_int_equal(dlb_answer_spoof_raw(c.pkt, c.len, sizeof(c.pkt), &c.m, raws, rawlen, 1,
					      NULL, NULL), 26 + 16);
	assert_int_equal(dlb_rd16(c.pkt + 26 + 4), 3);
}

static void
soa_act(struct dlb_act *a, bool nxd)
{
	memset(a, 0, sizeof(*a));
	a->type = DLB_ACT_NEGATIVE_SOA;
	a->u.soa.nxd = nxd;
	a->u.soa.zone_len = (uint16_t)dlb_wire_name_from_text("test.", a->u.soa.zone, DLB_MAX_NAME);
	a->u.soa.mname_len = (uint16_t)dlb_wire_name_from_text("ns.test.", a->u.soa.mname,
							       DLB_MAX_NAME);
	a->u.soa.rname_len = (uint16_t)dlb_wire_name_from_text("hostmaster.test.", a->u.soa.rname,
							       DLB_MAX_NAME);
	a->u.soa.ttl = 3600;
	a->u.soa.serial = 1;
	a->u.soa.refresh = 2;
	a->u.soa.retry = 3;
	a->u.soa.expire = 4;
	a->u.soa.minimum = 5;
	a->u.soa.o.ttl = 60;
}

#define SOA_RR	"0474657374000006000100000e10002e026e730474" \
		"657374000a686f73746d617374657204746573740000" \
		"0000010000000200000003000000040000000500"

static void
test_answer_negative_soa(void **state)
{
	struct dlb_act a;
	struct cap c;

	(void)state;
	/* NegativeAndSOAAction(true, "test.", 3600, "ns.test.", "hostmaster.test.", 1, 2, 3, 4,
	 * 5) */
	soa_act(&a, true);
	cap_query(&c, "123401000001000000000000026e7804746573740000010001");
	expect_hex(&c, dlb_answer_negative_soa(c.pkt, c.len, sizeof(c.pkt), &c.m, &a, NULL),
		   "123481830001000000000001026e780474657374"
		   "00000100010474657374000006000100000e1000"
		   "2e026e730474657374000a686f73746d61737465"
		   "720474657374000000000100000002000000030000"
		   "000400000005");
	/* AAAA with EDNS+DO, RD clear: SOA then OPT in the additional section */
	cap_query(&c, "123400000001000000000001026e78047465737400001c00010000291000000080000000");
	expect_hex(&c, dlb_answer_negative_soa(c.pkt, c.len, sizeof(c.pkt), &c.m, &a, NULL),
		   "123480030001000000000002"
		   "026e78047465737400001c0001" SOA_RR "002904d0000080000000");
	/* query flags AA|RD|Z|AD|CD */
	cap_query(&c, "abcd05700001000000000000026e7804746573740000010001");
	expect_hex(&c, dlb_answer_negative_soa(c.pkt, c.len, sizeof(c.pkt), &c.m, &a, NULL),
		   "abcd85d30001000000000001026e780474657374"
		   "00000100010474657374000006000100000e1000"
		   "2e026e730474657374000a686f73746d61737465"
		   "720474657374000000000100000002000000030000"
		   "000400000005");
	/* NODATA with {aa=true, ad=true, ra=true}, EDNS */
	soa_act(&a, false);
	a.u.soa.o.aa = a.u.soa.o.aa_set = a.u.soa.o.ad = a.u.soa.o.ra = a.u.soa.o.ra_set = true;
	cap_query(&c, "123401000001000000000001066e6f6461746104"
		   "7465737400000100010000291000000000000000");
	expect_hex(&c, dlb_answer_negative_soa(c.pkt, c.len, sizeof(c.pkt), &c.m, &a, NULL),
		   "123485a00001000000000002066e6f6461746104746573740000010001" SOA_RR
		   "002904d0000000000000");
	/* in the authority section when asked */
	a.u.soa.soa_in_authority = true;
	cap_query(&c, "123401000001000000000001066e6f6461746104"
		   "7465737400000100010000291000000000000000");
	expect_hex(&c, dlb_answer_negative_soa(c.pkt, c.len, sizeof(c.pkt), &c.m, &a, NULL),
		   "123485a00001000000010001066e6f6461746104746573740000010001" SOA_RR
		   "002904d0000000000000");
	/* too small */
	cap_query(&c, "123401000001000000000000026e7804746573740000010001");
	assert_int_equal(dlb_answer_negative_soa(c.pkt, c.len, c.len + 20, &c.m, &a, NULL),
			 DLB_ESPACE);
}

static void
test_set_edns_option(void **state)
{
	static const uint8_t hello[] = "hello";
	struct cap c;
	size_t len;
	bool added;

	(void)state;
	/* no OPT: one appended (payload 512), after trailing data too */
	cap_query(&c, "12340100000100000000000002726304746573740000010001");
	len = c.len;
	assert_int_equal(dlb_wire_set_edns_option(c.pkt, &len, sizeof(c.pkt), &c.m, 65001, hello, 5,
						  &added), DLB_OK);
	assert_true(added);
	expect_hex(&c, (int)len, "12340100000100000000000102726304746573740000010001"
		   "0000290200000000000009fde9000568656c6c6f");
	/* an OPT: same-code options go, the new one last, DO kept, trailing data dropped */
	cap_query(&c, "12340100000100000000000102726304746573740000010001000029100000008000000e"
		      "fde900016f" "000a0000" "fde9000178" "54");
	len = c.len;
	assert_int_equal(dlb_wire_set_edns_option(c.pkt, &len, sizeof(c.pkt), &c.m, 65001, hello, 5,
						  &added), DLB_OK);
	assert_false(added);
	expect_hex(&c, (int)len, "12340100000100000000000102726304746573740000010001"
		   "000029100000008000000d" "000a0000" "fde9000568656c6c6f");
	/* it does not fit: left alone */
	cap_query(&c, "12340100000100000000000002726304746573740000010001");
	len = c.len;
	assert_int_equal(dlb_wire_set_edns_option(c.pkt, &len, c.len + 10, &c.m, 65001, hello, 5,
						  &added), DLB_ESPACE);
	assert_int_equal(len, c.len);
}

static void
test_answer_rcode_tc(void **state)
{
	struct dlb_answer_opts all = { .aa = true, .aa_set = true, .ad = true, .ra = true,
				       .ra_set = true, .ttl = 60 };
	struct dlb_selfanswer_opts noedns = { .add_edns = false, .payload_size = 1232 };
	struct cap c;

	(void)state;
	/* RCodeAction(REFUSED) */
	cap_query(&c, "12340100000100000000000002726304746573740000010001");
	expect_hex(&c, dlb_answer_rcode(c.pkt, c.len, sizeof(c.pkt), &c.m, 5, NULL, NULL),
		   "12348185000100000000000002726304746573740000010001");
	cap_query(&c, "123400000001000000000001027263047465737400000100010000291000000080000000");
	expect_hex(&c, dlb_answer_rcode(c.pkt, c.len, sizeof(c.pkt), &c.m, 5, NULL, NULL),
		   "1234800500010000000000010272630474657374000001000100002904d0000080000000");
	cap_query(&c, "abcd05700001000000000000" "02726304746573740000010001");
	expect_hex(&c, dlb_answer_rcode(c.pkt, c.len, sizeof(c.pkt), &c.m, 5, NULL, NULL),
		   "abcd85d5000100000000000002726304746573740000010001");
	/* RCodeAction(NXDOMAIN, {aa=true, ad=true, ra=true}) */
	cap_query(&c, "1234010000010000000000010372636f047465737400000100010000291000000000000000");
	expect_hex(&c, dlb_answer_rcode(c.pkt, c.len, sizeof(c.pkt), &c.m, 3, &all, NULL),
		   "123485a300010000000000010372636f0474657374000001000100002904d0000000000000");
	/* ERCodeAction(BADVERS) with and without EDNS, and BADKEY (17) */
	cap_query(&c, "12340100000100000000000103657263047465737400000100010000291000000000000000");
	expect_hex(&c, dlb_answer_rcode(c.pkt, c.len, sizeof(c.pkt), &c.m, 16, NULL, NULL),
		   "123481800001000000000001036572630474657374000001000100002904d0010000000000");
	cap_query(&c, "1234010000010000000000000365726304746573740000010001");
	expect_hex(&c, dlb_answer_rcode(c.pkt, c.len, sizeof(c.pkt), &c.m, 16, NULL, NULL),
		   "1234818000010000000000000365726304746573740000010001");
	cap_query(&c, "1234010000010000000000010565726331370474657374000001000100002910000000000000"
		      "00");
	expect_hex(&c, dlb_answer_rcode(c.pkt, c.len, sizeof(c.pkt), &c.m, 17, NULL, NULL),
		   "12348181000100000000000105657263313704"
		   "74657374000001000100002904d0010000000000");
	/* no lone OPT: the query's other octets stay (trailing data, an OPT not alone) */
	cap_query(&c, "12340100000100000000000002726304746573740000010001" "5454");
	expect_hex(&c, dlb_answer_rcode(c.pkt, c.len, sizeof(c.pkt), &c.m, 5, NULL, NULL),
		   "12348185000100000000000002726304746573740000010001" "5454");
	cap_query(&c, "123401000001000000000001027263047465737400000100010000291000000080000000"
		      "5454");
	expect_hex(&c, dlb_answer_rcode(c.pkt, c.len, sizeof(c.pkt), &c.m, 5, NULL, NULL),
		   "1234818500010000000000010272630474657374000001000100002904d0000080000000");
	/* setAddEDNSToSelfGeneratedResponses(false) */
	cap_query(&c, "123400000001000000000001027263047465737400000100010000291000000080000000");
	expect_hex(&c, dlb_answer_rcode(c.pkt, c.len, sizeof(c.pkt), &c.m, 5, NULL, &noedns),
		   "12348005000100000000000002726304746573740000010001");

	/* TCAction */
	cap_query(&c, "12340100000100000000000002746304746573740000010001");
	expect_hex(&c, dlb_answer_tc(c.pkt, c.len, sizeof(c.pkt), &c.m, NULL),
		   "12348380000100000000000002746304746573740000010001");
	cap_query(&c, "123401000001000000000001027463047465737400000100010000291000000080000000");
	expect_hex(&c, dlb_answer_tc(c.pkt, c.len, sizeof(c.pkt), &c.m, NULL),
		   "1234838000010000000000010274630474657374000001000100002904d0000080000000");
	cap_query(&c, "12340000000100000000000002746304746573740000010001");
	expect_hex(&c, dlb_answer_tc(c.pkt, c.len, sizeof(c.pkt), &c.m, NULL),
		   "12348200000100000000000002746304746573740000010001");
	cap_query(&c, "abcd05700001000000000000" "02746304746573740000010001");
	expect_hex(&c, dlb_answer_tc(c.pkt, c.len, sizeof(c.pkt), &c.m, NULL),
		   "abcd83d0000100000000000002746304746573740000010001");
	/* never beyond cap */
	cap_query(&c, "123401000001000000000001027463047465737400000100010000291000000080000000");
	assert_int_equal(dlb_answer_tc(c.pkt, c.len, 12 + 12 + 10, &c.m, NULL), DLB_ESPACE);
}

/* ---- walking and clearing records ------------------------------------------ */

struct visit {
	int n;
	int sections[32];
	uint16_t types[32];
	uint32_t ttls[32];
};

static void
visit_cb(void *ud, uint8_t *pkt, int section, uint16_t type, uint16_t cls, size_t ttl_off)
{
	struct visit *v = ud;

	(void)cls;
	assert_true(v->n < 32);
	v->sections[v->n] = section;
	v->types[v->n] = type;
	v->ttls[v->n] = dlb_rd32(pkt + ttl_off);
	v->n++;
}

/*
 * www.example.com A?
 *  an: www.example.com CNAME cdn.example.net.   (owner: ptr to the question)
 *      cdn.example.net A 192.0.2.1               (owner: ptr into the CNAME's RDATA)
 *      cdn.example.net A 192.0.2.2               (owner: ptr to the previous owner)
 *      cdn.example.net AAAA 2001:db8::1
 *  ns: example.net NS ns1.example.net.           (owner: ptr to "example.net" in the CNAME)
 *      example.net MX 10 mx.example.net.
 *      _s._tcp.example.net SRV 0 0 53 ns1.example.net. (target uncompressed)
 *  ar: ns1.example.net A 192.0.2.53              (owner: ptr into the NS RDATA)
 *      OPT
 */
static size_t
build_response(struct pb *p, uint16_t *cname_rdata)
{
	uint8_t a1[4] = { 192, 0, 2, 1 }, a2[4] = { 192, 0, 2, 2 }, a53[4] = { 192, 0, 2, 53 };
	uint8_t aaaa[16] = { 0x20, 0x01, 0x0d, 0xb8, [15] = 1 };
	size_t rl, cname_at, owner_a1, ex_net, ns_rdata;

	pb_hdr(p, 0x4242, 0x8180, 1, 4, 3, 2);
	pb_name(p, "www.example.com");
	pb_u16(p, 1);
	pb_u16(p, 1);
	/* CNAME */
	pb_u16(p, 0xc00c);
	rl = pb_rr_start(p, 5, 300);
	cname_at = p->n;
	pb_name(p, "cdn.example.net");
	pb_rr_end(p, rl);
	ex_net = cname_at + 4;	/* "example.net" inside the CNAME target */
	/* A x2 */
	owner_a1 = p->n;
	pb_u16(p, (uint16_t)(0xc000 | cname_at));
	rl = pb_rr_start(p, 1, 301);
	pb_bytes(p, a1, 4);
	pb_rr_end(p, rl);
	pb_u16(p, (uint16_t)(0xc000 | owner_a1));
	rl = pb_rr_start(p, 1, 302);
	pb_bytes(p, a2, 4);
	pb_rr_end(p, rl);
	pb_u16(p, (uint16_t)(0xc000 | cname_at));
	rl = pb_rr_start(p, 28, 303);
	pb_bytes(p, aaaa, 16);
	pb_rr_end(p, rl);
	/* NS */
	pb_u16(p, (uint16_t)(0xc000 | ex_net));
	rl = pb_rr_start(p, 2, 400);
	ns_rdata = p->n;
	pb_labels(p, "ns1", (int)ex_net);
	pb_rr_end(p, rl);
	/* MX */
	pb_u16(p, (uint16_t)(0xc000 | ex_net));
	rl = pb_rr_start(p, 15, 401);
	pb_u16(p, 10);
	pb_labels(p, "mx", (int)ex_net);
	pb_rr_end(p, rl);
	/* SRV */
	pb_labels(p, "_s._tcp", (int)ex_net);
	rl = pb_rr_start(p, 33, 402);
	pb_u16(p, 0);
	pb_u16(p, 0);
	pb_u16(p, 53);
	pb_name(p, "ns1.example.net");
	pb_rr_end(p, rl);
	/* additional */
	pb_u16(p, (uint16_t)(0xc000 | ns_rdata));
	rl = pb_rr_start(p, 1, 500);
	pb_bytes(p, a53, 4);
	pb_rr_end(p, rl);
	pb_u8(p, 0);
	pb_u16(p, 41);
	pb_u16(p, 1232);
	pb_u32(p, 0x8000);
	pb_u16(p, 0);
	if (cname_rdata != NULL)
		*cname_rdata = (uint16_t)cname_at;
	return p->n;
}

/* Every name of @pkt decoded: owners and the RDATA names of the types used here. */
static void
names_of(const uint8_t *pkt, size_t len, char out[][DLB_WIRE_NAME_TEXT_MAX], int *n)
{
	struct dlb_dnsmsg m;
	size_t pos;
	unsigned cnt;

	assert_int_equal(dlb_wire_parse_response_question(pkt, len, &m), DLB_OK);
	cnt = (unsigned)m.ancount + m.nscount + m.arcount;
	pos = m.question_end;
	*n = 0;
	for (unsigned i = 0; i < cnt; i++) {
		uint8_t name[DLB_MAX_NAME];
		size_t next, rd;
		uint16_t type, rdlen;
		int r = dlb_wire_decode_name(pkt, len, pos, name, &next, NULL);

		assert_true(r > 0);
		assert_true(dlb_wire_name_to_text(name, (size_t)r, out[(*n)++],
						  DLB_WIRE_NAME_TEXT_MAX) > 0);
		type = dlb_rd16(pkt + next);
		rdlen = dlb_rd16(pkt + next + 8);
		rd = next + 10;
		assert_true(rd + rdlen <= len);
		if (type == 5 || type == 2 || type == 15 || type == 33) {
			size_t off = rd + (type == 15 ? 2 : type == 33 ? 6 : 0), end;

			r = dlb_wire_decode_name(pkt, len, off, name, &end, NULL);
			assert_true(r > 0);
			assert_int_equal(end, rd + rdlen);
			assert_true(dlb_wire_name_to_text(name, (size_t)r, out[(*n)++],
							  DLB_WIRE_NAME_TEXT_MAX) > 0);
		}
		pos = rd + rdlen;
	}
	assert_int_equal(pos, len);
}

static void
test_walk_rrs(void **state)
{
	struct pb p;
	struct visit v = { 0 };
	size_t len = build_response(&p, NULL);

	(void)state;
	assert_int_equal(dlb_wire_walk_rrs(p.b, len, visit_cb, &v), DLB_OK);
	assert_int_equal(v.n, 8);	/* OPT skipped */
	assert_int_equal(v.sections[0], 1);
	assert_int_equal(v.types[0], 5);
	assert_int_equal(v.ttls[0], 300);
	assert_int_equal(v.types[3], 28);
	assert_int_equal(v.sections[4], 2);
	assert_int_equal(v.ttls[6], 402);
	assert_int_equal(v.sections[7], 3);
	assert_int_equal(v.ttls[7], 500);
}

static void
test_walk_rrs_malformed(void **state)
{
	struct pb p, q;
	struct visit v = { 0 };
	size_t len = build_response(&p, NULL);

	(void)state;
	/* truncated anywhere inside the records: an error, nothing visited */
	for (size_t cut = 12; cut < len; cut++) {
		v.n = 0;
		assert_true(dlb_wire_walk_rrs(p.b, cut, visit_cb, &v) < 0);
		assert_int_equal(v.n, 0);
	}
	assert_true(dlb_wire_walk_rrs(p.b, 5, visit_cb, &v) < 0);
	/* counts larger than the message */
	memcpy(&q, &p, sizeof(q));
	dlb_wr16(q.b + 6, 0xffff);
	assert_int_equal(dlb_wire_walk_rrs(q.b, len, visit_cb, &v), DLB_ETRUNC);
	/* an owner pointing to itself, and one pointing forward */
	pb_hdr(&q, 1, 0x8180, 1, 1, 0, 0);
	pb_name(&q, "a.test");
	pb_u16(&q, 1);
	pb_u16(&q, 1);
	pb_u16(&q, (uint16_t)(0xc000 | q.n));
	pb_rr_start(&q, 1, 1);
	assert_int_equal(dlb_wire_walk_rrs(q.b, q.n, visit_cb, &v), DLB_EMALF);
	dlb_wr16(q.b + 24, 0xc000 | 200);
	assert_int_equal(dlb_wire_walk_rrs(q.b, q.n, visit_cb, &v), DLB_EMALF);
	/* label type 01 */
	q.b[24] = 0x41;
	assert_int_equal(dlb_wire_walk_rrs(q.b, q.n, visit_cb, &v), DLB_EMALF);
	/* RDLENGTH past the end */
	pb_hdr(&q, 1, 0x8180, 1, 1, 0, 0);
	pb_name(&q, "a.test");
	pb_u16(&q, 1);
	pb_u16(&q, 1);
	pb_u16(&q, 0xc00c);
	pb_rr_start(&q, 1, 1);
	dlb_wr16(q.b + q.n - 2, 4);
	pb_u16(&q, 0);
	assert_int_equal(dlb_wire_walk_rrs(q.b, q.n, visit_cb, &v), DLB_ETRUNC);
	assert_int_equal(v.n, 0);
}

static bool
has_name(char names[][DLB_WIRE_NAME_TEXT_MAX], int n, const char *want)
{
	for (int i = 0; i < n; i++) {
		if (strcmp(names[i], want) == 0)
			return true;
	}
	return false;
}

static void
test_clear_types(void **state)
{
	char names[32][DLB_WIRE_NAME_TEXT_MAX];
	uint16_t cname = 5, aaaa_a[2] = { 28, 1 }, ns_mx[2] = { 2, 15 }, opt = 41;
	struct pb p, orig;
	struct visit v = { 0 };
	size_t len = build_response(&p, NULL);
	int r, n;

	(void)state;
	memcpy(&orig, &p, sizeof(orig));
	/* nothing of that type: untouched */
	r = dlb_wire_clear_types(p.b, len, sizeof(p.b), &opt, 1);
	assert_int_equal(r, (int)len);
	assert_memory_equal(p.b, orig.b, len);
	r = dlb_wire_clear_types(p.b, len, sizeof(p.b), (const uint16_t[]){ 16 }, 1);
	assert_int_equal(r, (int)len);
	assert_memory_equal(p.b, orig.b, len);

	/* remove the CNAME: the names that pointed into it are rebuilt */
	r = dlb_wire_clear_types(p.b, len, sizeof(p.b), &cname, 1);
	assert_true(r > 0);
	print_message("clear CNAME: %zu -> %d octets\n", len, r);
	assert_true((size_t)r <= len);
	assert_int_equal(dlb_rd16(p.b + 6), 3);
	assert_int_equal(dlb_rd16(p.b + 8), 3);
	assert_int_equal(dlb_rd16(p.b + 10), 2);
	names_of(p.b, (size_t)r, names, &n);
	assert_int_equal(n, 3 + 3 + 3 + 2);
	assert_string_equal(names[0], "cdn.example.net.");
	assert_string_equal(names[1], "cdn.example.net.");
	assert_string_equal(names[2], "cdn.example.net.");
	assert_string_equal(names[3], "example.net.");
	assert_string_equal(names[4], "ns1.example.net.");
	assert_string_equal(names[5], "example.net.");
	assert_string_equal(names[6], "mx.example.net.");
	assert_string_equal(names[7], "_s._tcp.example.net.");
	assert_string_equal(names[8], "ns1.example.net.");
	assert_string_equal(names[9], "ns1.example.net.");
	assert_string_equal(names[10], ".");
	assert_int_equal(dlb_wire_walk_rrs(p.b, (size_t)r, visit_cb, &v), DLB_OK);
	assert_int_equal(v.n, 7);
	assert_int_equal(v.ttls[0], 301);
	assert_int_equal(v.ttls[2], 303);
	/* the question is untouched */
	assert_memory_equal(p.b + 12, orig.b + 12, 21);

	/* AAAA and A out of the rebuilt message */
	len = (size_t)r;
	r = dlb_wire_clear_types(p.b, len, sizeof(p.b), aaaa_a, 2);
	assert_true(r > 0 && (size_t)r < len);
	assert_int_equal(dlb_rd16(p.b + 6), 0);
	assert_int_equal(dlb_rd16(p.b + 10), 1);	/* only OPT left */
	names_of(p.b, (size_t)r, names, &n);
	assert_true(has_name(names, n, "mx.example.net."));
	assert_true(has_name(names, n, "_s._tcp.example.net."));

	/* NS and MX out of the original: the SRV owner and the additional A survive */
	memcpy(&p, &orig, sizeof(p));
	len = orig.n;
	r = dlb_wire_clear_types(p.b, len, sizeof(p.b), ns_mx, 2);
	assert_true(r > 0 && (size_t)r <= len);
	names_of(p.b, (size_t)r, names, &n);
	assert_int_equal(dlb_rd16(p.b + 8), 1);
	assert_string_equal(names[n - 3], "ns1.example.net.");
	assert_true(has_name(names, n, "_s._tcp.example.net."));

	/* no room for the result: DLB_ESPACE, untouched */
	memcpy(&p, &orig, sizeof(p));
	assert_int_equal(dlb_wire_clear_types(p.b, len, 40, &cname, 1), DLB_ESPACE);
	assert_memory_equal(p.b, orig.b, len);
}

/*
 * A kept record whose owner points back into the record before it, so that
 * the name runs on into itself (no end, more than 255 octets): the message
 * is refused and left as it was. It used to come out with a pointer from
 * the rebuilt name to its own first label, a loop (tests/fuzz/fuzz_clear_types.c).
 */
static void
test_clear_types_self_pointer(void **state)
{
	struct pb p, orig;
	size_t rl, label_at;
	uint16_t a = 1;

	(void)state;
	pb_hdr(&p, 9, 0x8180, 1, 1, 0, 1);
	pb_name(&p, "q.test");
	pb_u16(&p, 1);
	pb_u16(&p, 1);
	/* an: q.test A whose RDATA is the label "abc", ending where the next record starts */
	pb_u16(&p, 0xc00c);
	rl = pb_rr_start(&p, 1, 60);
	label_at = p.n;
	pb_bytes(&p, "\003abc", 4);
	pb_rr_end(&p, rl);
	/* ar: "y" + a pointer to that label: y.abc.y.abc... */
	pb_bytes(&p, "\001y", 2);
	pb_u16(&p, (uint16_t)(0xc000 | label_at));
	rl = pb_rr_start(&p, 16, 60);
	pb_bytes(&p, "\001z", 2);
	pb_rr_end(&p, rl);
	memcpy(&orig, &p, sizeof(p));

	assert_int_equal(dlb_wire_clear_types(p.b, p.n, sizeof(p.b), &a, 1), DLB_EMALF);
	assert_memory_equal(p.b, orig.b, orig.n);
}

/* The name at @off as text, *@next after it. */
static void
name_at(const uint8_t *pkt, size_t len, size_t off, char *out, size_t *next)
{
	uint8_t name[DLB_MAX_NAME];
	int r = dlb_wire_decode_name(pkt, len, off, name, next, NULL);

	assert_true(r > 0);
	assert_true(dlb_wire_name_to_text(name, (size_t)r, out, DLB_WIRE_NAME_TEXT_MAX) > 0);
}

static void
test_clear_types_rdata(void **state)
{
	char t[DLB_WIRE_NAME_TEXT_MAX];
	struct pb p;
	size_t rl, cname_at, exorg, next, pos, rd;
	uint16_t cname = 5, rdlen;
	struct dlb_dnsmsg m;
	int r;

	(void)state;
	/*
	 * q.test A?  an: q.test CNAME a.example.org.
	 *            ns: example.org SOA ns.example.org. hm.example.org. (all via the CNAME)
	 *                a.example.org NAPTR 10 20 "u" "E2U+sip" "" example.org. (compressed,
	 *                against RFC 3597, accepted)
	 */
	pb_hdr(&p, 7, 0x8180, 1, 1, 2, 0);
	pb_name(&p, "q.test");
	pb_u16(&p, 1);
	pb_u16(&p, 1);
	pb_u16(&p, 0xc00c);
	rl = pb_rr_start(&p, 5, 10);
	cname_at = p.n;
	pb_name(&p, "a.example.org");
	pb_rr_end(&p, rl);
	exorg = cname_at + 2;
	pb_u16(&p, (uint16_t)(0xc000 | exorg));
	rl = pb_rr_start(&p, 6, 20);
	pb_labels(&p, "ns", (int)exorg);
	pb_labels(&p, "hm", (int)exorg);
	for (uint32_t i = 1; i <= 5; i++)
		pb_u32(&p, i);
	pb_rr_end(&p, rl);
	pb_u16(&p, (uint16_t)(0xc000 | cname_at));
	rl = pb_rr_start(&p, 35, 30);
	pb_u16(&p, 10);
	pb_u16(&p, 20);
	pb_bytes(&p, "\001u\007E2U+sip\000", 11);
	pb_u16(&p, (uint16_t)(0xc000 | exorg));
	pb_rr_end(&p, rl);

	r = dlb_wire_clear_types(p.b, p.n, sizeof(p.b), &cname, 1);
	assert_true(r > 0);
	assert_int_equal(dlb_wire_parse_response_question(p.b, (size_t)r, &m), DLB_OK);
	assert_int_equal(dlb_rd16(p.b + 6), 0);
	assert_int_equal(dlb_rd16(p.b + 8), 2);
	pos = m.question_end;
	/* SOA */
	name_at(p.b, (size_t)r, pos, t, &next);
	assert_string_equal(t, "example.org.");
	assert_int_equal(dlb_rd16(p.b + next), 6);
	rdlen = dlb_rd16(p.b + next + 8);
	rd = next + 10;
	name_at(p.b, (size_t)r, rd, t, &next);
	assert_string_equal(t, "ns.example.org.");
	name_at(p.b, (size_t)r, next, t, &next);
	assert_string_equal(t, "hm.example.org.");
	assert_int_equal(next + 20, rd + rdlen);
	assert_int_equal(dlb_rd32(p.b + next + 16), 5);
	pos = rd + rdlen;
	/* NAPTR: the replacement is written out in full */
	name_at(p.b, (size_t)r, pos, t, &next);
	assert_string_equal(t, "a.example.org.");
	assert_int_equal(dlb_rd16(p.b + next), 35);
	rdlen = dlb_rd16(p.b + next + 8);
	rd = next + 10;
	assert_memory_equal(p.b + rd + 4, "\001u\007E2U+sip\000", 11);
	assert_memory_equal(p.b + rd + 15, "\007example\003org\000", 13);
	assert_int_equal(rdlen, 4 + 11 + 13);
	assert_int_equal(rd + rdlen, (size_t)r);
}

static void
count_cb(void *ud, uint8_t *pkt, int section, uint16_t type, uint16_t cls, size_t ttl_off)
{
	(void)pkt;
	(void)section;
	(void)type;
	(void)cls;
	(void)ttl_off;
	++*(int *)ud;
}

/* Every owner name of a message that walks decodes, pointers and all. */
static void
owners_decode(const uint8_t *pkt, size_t len)
{
	unsigned cnt = (unsigned)dlb_rd16(pkt + 6) + dlb_rd16(pkt + 8) + dlb_rd16(pkt + 10);
	size_t pos = DLB_DNS_HDR;

	for (unsigned q = dlb_rd16(pkt + 4); q > 0; q--)
		pos = (size_t)dlb_wire_skip_name(pkt, len, pos) + 4;
	for (unsigned i = 0; i < cnt; i++) {
		uint8_t name[DLB_MAX_NAME];
		size_t next;

		assert_true(dlb_wire_decode_name(pkt, len, pos, name, &next, NULL) > 0);
		pos = next + 10 + dlb_rd16(pkt + next + 8);
	}
	assert_true(pos <= len);
}

/* Append the name at @off decoded, or "?"; @return the offset after it. */
static size_t
canon_name(const uint8_t *pkt, size_t len, size_t off, char *out, size_t outsz)
{
	uint8_t name[DLB_MAX_NAME];
	char t[DLB_WIRE_NAME_TEXT_MAX];
	size_t next = len;
	int r = dlb_wire_decode_name(pkt, len, off, name, &next, NULL);

	if (r < 0 || dlb_wire_name_to_text(name, (size_t)r, t, sizeof(t)) < 0)
		snprintf(t, sizeof(t), "?");
	strncat(out, t, outsz - strlen(out) - 1);
	strncat(out, " ", outsz - strlen(out) - 1);
	return next;
}

/*
 * Records of @pkt, but those of type @drop[0..@ndrop), as text: owner, type,
 * class, TTL, and the RDATA with its names decoded (the types build_response
 * uses), so that two messages compare whatever their compression.
 */
static int
canon_records(const uint8_t *pkt, size_t len, const uint16_t *drop, int ndrop, char *out,
	      size_t outsz)
{
	unsigned cnt = (unsigned)dlb_rd16(pkt + 6) + dlb_rd16(pkt + 8) + dlb_rd16(pkt + 10);
	size_t pos = DLB_DNS_HDR;
	int n = 0;

	out[0] = '\0';
	for (unsigned q = dlb_rd16(pkt + 4); q > 0; q--)
		pos = (size_t)dlb_wire_skip_name(pkt, len, pos) + 4;
	for (unsigned i = 0; i < cnt; i++) {
		size_t start = strlen(out), fixed = (size_t)dlb_wire_skip_name(pkt, len, pos), rd;
		uint16_t type = dlb_rd16(pkt + fixed), rdlen = dlb_rd16(pkt + fixed + 8);
		bool dropped = false;
		char num[64];

		for (int d = 0; d < ndrop; d++)
			dropped |= drop[d] == type && type != 41;
		canon_name(pkt, len, pos, out, outsz);
		snprintf(num, sizeof(num), "%u %u %u : ", type, dlb_rd16(pkt + fixed + 2),
			 dlb_rd32(pkt + fixed + 4));
		strncat(out, num, outsz - strlen(out) - 1);
		rd = fixed + 10;
		switch (type) {
		case 2: case 3: case 4: case 5: case 7: case 8: case 9: case 12: case 39:
			canon_name(pkt, len, rd, out, outsz);
			break;
		case 14: case 17:
			canon_name(pkt, len, canon_name(pkt, len, rd, out, outsz), out, outsz);
			break;
		case 6: {
			size_t p2 = canon_name(pkt, len, canon_name(pkt, len, rd, out, outsz), out,
					       outsz);

			for (size_t k = 0; k < 20 && p2 + k < len; k++) {
				snprintf(num, sizeof(num), "%02x", pkt[p2 + k]);
				strncat(out, num, outsz - strlen(out) - 1);
			}
			break;
		}
		case 15: case 18: case 21: case 36: case 26: case 33: {
			size_t skip = type == 33 ? 6 : 2, p2;

			for (size_t k = 0; k < skip && k < rdlen; k++) {
				snprintf(num, sizeof(num), "%02x", pkt[rd + k]);
				strncat(out, num, outsz - strlen(out) - 1);
			}
			p2 = canon_name(pkt, len, rd + skip, out, outsz);
			if (type == 26)
				canon_name(pkt, len, p2, out, outsz);
			break;
		}
		case 35: {
			size_t p2 = rd + 4;

			for (int k = 0; k < 3 && p2 < len; k++)
				p2 += 1 + (size_t)pkt[p2];
			for (size_t k = rd; k < p2 && k < len; k++) {
				snprintf(num, sizeof(num), "%02x", pkt[k]);
				strncat(out, num, outsz - strlen(out) - 1);
			}
			canon_name(pkt, len, p2, out, outsz);
			break;
		}
		default:
			for (size_t k = 0; k < rdlen; k++) {
				snprintf(num, sizeof(num), "%02x", pkt[rd + k]);
				strncat(out, num, outsz - strlen(out) - 1);
			}
			break;
		}
		strncat(out, "\n", outsz - strlen(out) - 1);
		if (dropped)
			out[start] = '\0';
		else
			n++;
		pos = rd + rdlen;
	}
	return n;
}

/* Mutated messages: never a crash; a success is a sound message with the same records. */
static void
test_clear_types_mutations(void **state)
{
	static const uint16_t types[] = { 1, 5, 2, 15, 28, 33, 6, 41 };
	struct pb orig, p;
	size_t len = build_response(&orig, NULL);
	unsigned seed = 12345, ok = 0, rebuilt = 0;

	(void)state;
	for (int it = 0; it < 20000; it++) {
		int flips = 1 + it % 3, r, visits = 0;
		uint16_t t[2];

		memcpy(&p, &orig, sizeof(p));
		for (int f = 0; f < flips; f++) {
			seed = seed * 1103515245u + 12345u;
			p.b[12 + (seed >> 8) % (len - 12)] ^= (uint8_t)(1u << ((seed >> 4) % 8));
		}
		seed = seed * 1103515245u + 12345u;
		t[0] = types[(seed >> 8) % 8];
		t[1] = types[(seed >> 16) % 8];
		(void)dlb_wire_walk_rrs(p.b, len, count_cb, &visits);
		memcpy(orig.b + PB_MAX / 2, p.b, len);	/* a copy to compare with */
		r = dlb_wire_clear_types(p.b, len, sizeof(p.b), t, 1 + it % 2);
		if (r < 0) {
			assert_memory_equal(p.b, orig.b + PB_MAX / 2, len);
			continue;
		}
		ok++;
		assert_true((size_t)r <= sizeof(p.b));
		assert_int_equal(dlb_wire_walk_rrs(p.b, (size_t)r, count_cb, &visits), DLB_OK);
		if ((size_t)r == len && memcmp(p.b, orig.b + PB_MAX / 2, len) == 0)
			continue;	/* nothing removed: untouched, pointers as they came */
		rebuilt++;
		owners_decode(p.b, (size_t)r);
		{
			static char before[8192], after[8192];
			int nb = canon_records(orig.b + PB_MAX / 2, len, t, 1 + it % 2, before,
					       sizeof(before));
			int na = canon_records(p.b, (size_t)r, NULL, 0, after, sizeof(after));

			assert_int_equal(nb, na);
			assert_string_equal(before, after);
		}
	}
	print_message("clear_types on 20000 mutated messages: %u accepted, %u rebuilt\n", ok,
		      rebuilt);
	assert_true(rebuilt > 1000);
}

static void
test_clear_types_malformed(void **state)
{
	struct pb p;
	uint16_t a = 1;
	uint8_t copy[PB_MAX];
	size_t rl;

	(void)state;
	/* an MX whose exchange overruns its RDATA: refused, untouched */
	pb_hdr(&p, 1, 0x8180, 1, 2, 0, 0);
	pb_name(&p, "a.test");
	pb_u16(&p, 15);
	pb_u16(&p, 1);
	pb_u16(&p, 0xc00c);
	rl = pb_rr_start(&p, 1, 1);
	pb_u32(&p, 0x01020304);
	pb_rr_end(&p, rl);
	pb_u16(&p, 0xc00c);
	rl = pb_rr_start(&p, 15, 1);
	pb_u16(&p, 10);
	pb_name(&p, "mx.a.test");
	pb_rr_end(&p, rl);
	dlb_wr16(p.b + rl, 5);		/* shorter than what is inside */
	memcpy(copy, p.b, p.n);
	assert_true(dlb_wire_clear_types(p.b, p.n, sizeof(p.b), &a, 1) < 0);
	assert_memory_equal(copy, p.b, p.n);
	/* a pointer loop in a kept record */
	pb_hdr(&p, 1, 0x8180, 1, 2, 0, 0);
	pb_name(&p, "a.test");
	pb_u16(&p, 1);
	pb_u16(&p, 1);
	pb_u16(&p, 0xc00c);
	rl = pb_rr_start(&p, 1, 1);
	pb_u32(&p, 0x01020304);
	pb_rr_end(&p, rl);
	pb_u16(&p, (uint16_t)(0xc000 | p.n));
	rl = pb_rr_start(&p, 5, 1);
	pb_u8(&p, 0);
	pb_rr_end(&p, rl);
	memcpy(copy, p.b, p.n);
	assert_true(dlb_wire_clear_types(p.b, p.n, sizeof(p.b), &a, 1) < 0);
	assert_memory_equal(copy, p.b, p.n);
}

/* ---- LogAction / LogResponseAction ----------------------------------------- */

struct logq {
	struct cap c;
	struct sockaddr_in sin;
	struct sockaddr_in6 sin6;
	struct dlb_dq dq;
};

static void
logq_init(struct logq *q, const char *hex, bool v6)
{
	memset(q, 0, sizeof(*q));
	q->c.len = hex2bin(hex, q->c.pkt, sizeof(q->c.pkt));
	assert_true(dlb_wire_parse_query(q->c.pkt, q->c.len, &q->c.m) == DLB_OK ||
		    dlb_wire_parse_response_question(q->c.pkt, q->c.len, &q->c.m) == DLB_OK);
	q->sin.sin_family = AF_INET;
	q->sin.sin_port = htons(33026);
	inet_pton(AF_INET, "127.0.0.1", &q->sin.sin_addr);
	q->sin6.sin6_family = AF_INET6;
	q->sin6.sin6_port = htons(53);
	inet_pton(AF_INET6, "::1", &q->sin6.sin6_addr);
	q->dq.pkt = q->c.pkt;
	q->dq.len = q->c.len;
	q->dq.cap = sizeof(q->c.pkt);
	q->dq.m = &q->c.m;
	q->dq.remote = v6 ? (struct sockaddr *)&q->sin6 : (struct sockaddr *)&q->sin;
}

static size_t
slurp(const char *path, char *buf, size_t bufsz)
{
	FILE *f = fopen(path, "rb");
	size_t n;

	assert_non_null(f);
	n = fread(buf, 1, bufsz - 1, f);
	fclose(f);
	buf[n] = '\0';
	return n;
}

static bool
starts_with(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

static void
test_log_text(void **state)
{
	char dir[] = "/tmp/dlb_rules_wire_XXXXXX", path[128], path1[128], buf[4096], err[256];
	struct dlb_log *l;
	struct logq q;
	uint16_t rawid;
	char want[512];
	size_t n;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/q.log", dir);
	snprintf(path1, sizeof(path1), "%s/q.log.1", dir);

	l = dlb_log_open(path, false, false, false, false, false, err, sizeof(err));
	assert_non_null(l);
	/* SpOoF.TeSt A, id 0x1234 */
	logq_init(&q, "1234010000010000000000000553704f6f4604546553740000010001", false);
	dlb_log_write(l, &q.dq, false);
	/* an unknown type and type 0, from ::1 */
	logq_init(&q, "00ff010000010000000000000271740474657374" "00ff000001", true);
	dlb_log_write(l, &q.dq, false);
	logq_init(&q, "ffff010000010000000000000271740474657374" "0000000001", false);
	dlb_log_write(l, &q.dq, false);
	/* a response: NXDOMAIN */
	logq_init(&q, "123481830001000000000000026e7804746573740000010001", false);
	q.dq.response = true;
	dlb_log_write(l, &q.dq, false);
	slurp(path, buf, sizeof(buf));
	/* dnsdist prints the ID's packet octets read in host order: 13330 on x86 */
	memcpy(&rawid, "\x12\x34", 2);
	n = (size_t)snprintf(want, sizeof(want),
			     "Packet from 127.0.0.1:33026 for SpOoF.TeSt. A with id %d\n", rawid);
	memcpy(&rawid, "\x00\xff", 2);
	n += (size_t)snprintf(want + n, sizeof(want) - n,
			      "Packet from [::1]:53 for qt.test. TYPE65280 with id %d\n", rawid);
	n += (size_t)snprintf(want + n, sizeof(want) - n,
			      "Packet from 127.0.0.1:33026 for qt.test. TYPE0 with id 65535\n");
	memcpy(&rawid, "\x12\x34", 2);
	snprintf(want + n, sizeof(want) - n,
		 "Answer to 127.0.0.1:33026 for nx.test. A (Non-Existent domain) with id %d\n",
		 rawid);
	assert_string_equal(buf, want);

	/* rotation: rename, reload, the next record goes to a new file */
	assert_int_equal(rename(path, path1), 0);
	logq_init(&q, "1234010000010000000000000553704f6f4604546553740000010001", false);
	dlb_log_write(l, &q.dq, false);
	assert_int_equal(dlb_log_reload(l), DLB_OK);
	logq_init(&q, "123401000001000000000000026e7804746573740000ff0001", false);
	dlb_log_write(l, &q.dq, false);
	slurp(path1, buf, sizeof(buf));
	assert_non_null(strstr(buf, "SpOoF.TeSt. A with id"));
	assert_null(strstr(buf, "ANY"));
	slurp(path, buf, sizeof(buf));
	assert_true(starts_with(buf, "Packet from 127.0.0.1:33026 for nx.test. ANY with id "));
	assert_true(strchr(buf, '\n') == buf + strlen(buf) - 1);	/* one line */
	dlb_log_free(l);

	/* append keeps what is there; no append truncates */
	l = dlb_log_open(path, false, true, true, false, true, err, sizeof(err));
	assert_non_null(l);
	/* the query arrived 30 s ago on the loop clock: the stamp is the query's */
	q.dq.t_start = 1000.0;
	q.dq.now = 1030.0;
	dlb_log_write(l, &q.dq, false);
	dlb_log_free(l);
	slurp(path, buf, sizeof(buf));
	{
		char *second = strchr(buf, '\n') + 1;
		unsigned long long sec;
		unsigned long nsec;
		int used = 0;

		/* "[<sec>.<nsec>] Packet from ..." */
		assert_int_equal(sscanf(second, "[%llu.%lu] %n", &sec, &nsec, &used), 2);
		assert_true(used > 0 && sec > 1600000000ULL && nsec < 1000000000UL);
		{
			struct timespec ts;
			double age;

			clock_gettime(CLOCK_REALTIME, &ts);
			age = (double)ts.tv_sec + ts.tv_nsec / 1e9 - ((double)sec + nsec / 1e9);
			assert_true(age > 29.0 && age < 31.0);
		}
		assert_true(starts_with(second + used,
					"Packet from 127.0.0.1:33026 for nx.test. ANY"));
	}
	l = dlb_log_open(path, false, false, true, false, false, err, sizeof(err));
	assert_non_null(l);
	dlb_log_free(l);
	assert_int_equal(slurp(path, buf, sizeof(buf)), 0);

	/* an empty path logs through the daemon's log (verbose only: nothing here) */
	l = dlb_log_open("", true, false, true, true, false, err, sizeof(err));
	assert_non_null(l);
	dlb_log_write(l, &q.dq, false);
	assert_int_equal(dlb_log_reload(l), DLB_OK);
	dlb_log_free(l);

	/* a path that cannot be opened */
	assert_null(dlb_log_open("/nonexistent/dir/x.log", false, false, true, false, false, err,
				 sizeof(err)));
	assert_non_null(strstr(err, "Unable to open file '/nonexistent/dir/x.log' for logging: "));

	unlink(path);
	unlink(path1);
	rmdir(dir);
}

static void
test_log_binary(void **state)
{
	char dir[] = "/tmp/dlb_rules_wire_XXXXXX", path[128], err[256];
	uint8_t buf[512], want[128];
	struct dlb_log *l;
	struct logq q;
	uint16_t v16;
	size_t n, w = 0;
	uint64_t sec;
	uint32_t nsec;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/q.bin", dir);
	l = dlb_log_open(path, true, false, true, false, false, err, sizeof(err));
	assert_non_null(l);
	logq_init(&q, "1234010000010000000000000553704f6f4604546553740000010001", false);
	dlb_log_write(l, &q.dq, false);
	logq_init(&q, "1234010000010000000000000553704f6f46045465537400001c0001", true);
	dlb_log_write(l, &q.dq, false);
	dlb_log_free(l);
	n = slurp(path, (char *)buf, sizeof(buf));

	/* id octets, qname (client case), qtype host order, family host order, address, port */
	memcpy(want + w, "\x12\x34", 2);
	w += 2;
	memcpy(want + w, "\x05SpOoF\x04TeSt\x00", 12);
	w += 12;
	v16 = 1;
	memcpy(want + w, &v16, 2);
	w += 2;
	v16 = AF_INET;
	memcpy(want + w, &v16, 2);
	w += 2;
	memcpy(want + w, "\x7f\x00\x00\x01\x81\x02", 6);	/* port 33026 */
	w += 6;
	memcpy(want + w, "\x12\x34", 2);
	w += 2;
	memcpy(want + w, "\x05SpOoF\x04TeSt\x00", 12);
	w += 12;
	v16 = 28;
	memcpy(want + w, &v16, 2);
	w += 2;
	v16 = AF_INET6;
	memcpy(want + w, &v16, 2);
	w += 2;
	memcpy(want + w, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x01\x00\x35", 18);
	w += 18;
	assert_int_equal(n, w);
	assert_memory_equal(buf, want, w);

	/* with the timestamp: u64 seconds, u32 nanoseconds first */
	l = dlb_log_open(path, true, false, true, false, true, err, sizeof(err));
	assert_non_null(l);
	logq_init(&q, "1234010000010000000000000553704f6f4604546553740000010001", false);
	dlb_log_write(l, &q.dq, false);
	dlb_log_free(l);
	n = slurp(path, (char *)buf, sizeof(buf));
	assert_int_equal(n, 12 + 24);
	memcpy(&sec, buf, 8);
	memcpy(&nsec, buf + 8, 4);
	assert_true(sec > 1600000000ULL && nsec < 1000000000U);
	assert_memory_equal(buf + 12, want, 24);
	unlink(path);
	rmdir(dir);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_suffix_basic),
		cmocka_unit_test(test_suffix_deep_and_wide),
		cmocka_unit_test(test_suffix_format_and_copy),
		cmocka_unit_test(test_suffix_shared_labels),
		cmocka_unit_test(test_suffix_memory),
		cmocka_unit_test(test_name_set),
		cmocka_unit_test(test_answer_spoof),
		cmocka_unit_test(test_answer_spoof_any_shuffled),
		cmocka_unit_test(test_answer_cname_raw),
		cmocka_unit_test(test_answer_negative_soa),
		cmocka_unit_test(test_answer_rcode_tc),
		cmocka_unit_test(test_set_edns_option),
		cmocka_unit_test(test_walk_rrs),
		cmocka_unit_test(test_walk_rrs_malformed),
		cmocka_unit_test(test_clear_types),
		cmocka_unit_test(test_clear_types_rdata),
		cmocka_unit_test(test_clear_types_self_pointer),
		cmocka_unit_test(test_clear_types_malformed),
		cmocka_unit_test(test_clear_types_mutations),
		cmocka_unit_test(test_log_text),
		cmocka_unit_test(test_log_binary),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
