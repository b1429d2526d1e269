/*
 * test_netmask.c - netmask parsing, matching, groups and socket addresses.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "dnslb/core/netmask.h"

static struct sockaddr_storage
sa_of(const char *s)
{
	struct sockaddr_storage ss;
	socklen_t len;

	assert_int_equal(dlb_sockaddr_parse(s, 53, &ss, &len), 0);
	return ss;
}

static void
format_nm(const char *in, const char *expect)
{
	struct dlb_netmask nm;
	char buf[64];

	assert_int_equal(dlb_netmask_parse(in, &nm), 0);
	dlb_netmask_format(&nm, buf, sizeof(buf));
	assert_string_equal(buf, expect);
}

static void
test_parse_v4(void **state)
{
	struct dlb_netmask nm;

	(void)state;
	assert_int_equal(dlb_netmask_parse("192.0.2.0/24", &nm), 0);
	assert_int_equal(nm.family, AF_INET);
	assert_int_equal(nm.bits, 24);
	assert_int_equal(nm.addr[0], 192);
	assert_int_equal(nm.addr[3], 0);
	format_nm("192.0.2.0/24", "192.0.2.0/24");
	format_nm("10.0.0.0/8", "10.0.0.0/8");
	format_nm("0.0.0.0/0", "0.0.0.0/0");
}

static void
test_parse_v6(void **state)
{
	struct dlb_netmask nm;

	(void)state;
	assert_int_equal(dlb_netmask_parse("2001:db8::/32", &nm), 0);
	assert_int_equal(nm.family, AF_INET6);
	assert_int_equal(nm.bits, 32);
	format_nm("2001:db8::/32", "2001:db8::/32");
	format_nm("fc00::/7", "fc00::/7");
	format_nm("::/0", "::/0");
}

static void
test_parse_bare(void **state)
{
	(void)state;
	format_nm("127.0.0.1", "127.0.0.1/32");
	format_nm("::1", "::1/128");
	format_nm("2001:db8::1", "2001:db8::1/128");
}

static void
test_parse_invalid(void **state)
{
	static const char *const bad[] = {
		"127.0.0.355", "10.0.0.0/33", "::1/129", "garbage", "", "/24", "10.0.0.0/",
		"10.0.0.0/-1", "10.0.0.0/+8", "10.0.0.0/8x", "10.0.0.0/ 8", "1.2.3", "::g",
		"10.0.0.0/8/8", "10.0.0.0/99999999999999999999",
	};
	struct dlb_netmask nm;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(dlb_netmask_parse(bad[i], &nm), -1);
	assert_int_equal(dlb_netmask_parse(NULL, &nm), -1);
}

static void
test_host_bits_zeroed(void **state)
{
	(void)state;
	format_nm("192.168.1.77/24", "192.168.1.0/24");
	format_nm("10.255.255.255/9", "10.128.0.0/9");
	format_nm("172.31.5.5/12", "172.16.0.0/12");
	format_nm("1.2.3.4/0", "0.0.0.0/0");
	format_nm("2001:db8:ffff::1/33", "2001:db8:8000::/33");
	format_nm("fe80::1234/10", "fe80::/10");
	format_nm("ff::ff/7", "::/7");
}

static void
test_match(void **state)
{
	struct dlb_netmask nm;
	struct sockaddr_storage a;

	(void)state;
	assert_int_equal(dlb_netmask_parse("10.0.0.0/8", &nm), 0);
	a = sa_of("10.1.2.3");
	assert_true(dlb_netmask_match(&nm, (struct sockaddr *)&a));
	a = sa_of("11.1.2.3");
	assert_false(dlb_netmask_match(&nm, (struct sockaddr *)&a));
	a = sa_of("::1");
	assert_false(dlb_netmask_match(&nm, (struct sockaddr *)&a));
	/* an IPv4-mapped IPv6 source matches IPv4 netmasks */
	a = sa_of("::ffff:10.9.9.9");
	assert_true(dlb_netmask_match(&nm, (struct sockaddr *)&a));

	assert_int_equal(dlb_netmask_parse("100.64.0.0/10", &nm), 0);
	a = sa_of("100.127.255.255");
	assert_true(dlb_netmask_match(&nm, (struct sockaddr *)&a));
	a = sa_of("100.128.0.0");
	assert_false(dlb_netmask_match(&nm, (struct sockaddr *)&a));

	assert_int_equal(dlb_netmask_parse("fe80::/10", &nm), 0);
	a = sa_of("febf::1");
	assert_true(dlb_netmask_match(&nm, (struct sockaddr *)&a));
	a = sa_of("fec0::1");
	assert_false(dlb_netmask_match(&nm, (struct sockaddr *)&a));
	a = sa_of("10.0.0.1");
	assert_false(dlb_netmask_match(&nm, (struct sockaddr *)&a));

	assert_int_equal(dlb_netmask_parse("0.0.0.0/0", &nm), 0);
	a = sa_of("203.0.113.9");
	assert_true(dlb_netmask_match(&nm, (struct sockaddr *)&a));

	assert_int_equal(dlb_netmask_parse("192.0.2.1", &nm), 0);
	a = sa_of("192.0.2.1:1234");
	assert_true(dlb_netmask_match(&nm, (struct sockaddr *)&a));
	a = sa_of("192.0.2.2");
	assert_false(dlb_netmask_match(&nm, (struct sockaddr *)&a));
}

static void
test_group(void **state)
{
	struct dlb_nmg g, copy;
	struct dlb_netmask nm;
	struct sockaddr_storage a;
	char buf[64];

	(void)state;
	dlb_nmg_init(&g);
	dlb_nmg_init(&copy);
	a = sa_of("192.168.1.1");
	assert_false(dlb_nmg_match(&g, (struct sockaddr *)&a));

	assert_int_equal(dlb_netmask_parse("::1", &nm), 0);
	assert_int_equal(dlb_nmg_add(&g, &nm), 0);
	assert_int_equal(dlb_netmask_parse("192.168.0.0/16", &nm), 0);
	assert_int_equal(dlb_nmg_add(&g, &nm), 0);
	assert_int_equal(dlb_netmask_parse("10.0.0.0/8", &nm), 0);
	assert_int_equal(dlb_nmg_add(&g, &nm), 0);
	/* dedupe, including a spelling with host bits set */
	assert_int_equal(dlb_netmask_parse("10.3.3.3/8", &nm), 0);
	assert_int_equal(dlb_nmg_add(&g, &nm), 0);
	assert_int_equal(g.n, 3);

	/* sorted: IPv4 first, by address */
	dlb_netmask_format(&g.v[0], buf, sizeof(buf));
	assert_string_equal(buf, "10.0.0.0/8");
	dlb_netmask_format(&g.v[1], buf, sizeof(buf));
	assert_string_equal(buf, "192.168.0.0/16");
	dlb_netmask_format(&g.v[2], buf, sizeof(buf));
	assert_string_equal(buf, "::1/128");

	assert_true(dlb_nmg_match(&g, (struct sockaddr *)&a));
	a = sa_of("::1");
	assert_true(dlb_nmg_match(&g, (struct sockaddr *)&a));
	a = sa_of("::2");
	assert_false(dlb_nmg_match(&g, (struct sockaddr *)&a));

	assert_int_equal(dlb_nmg_copy(&copy, &g), 0);
	assert_int_equal(copy.n, 3);

	assert_int_equal(dlb_netmask_parse("192.168.0.0/16", &nm), 0);
	assert_true(dlb_nmg_remove(&g, &nm));
	assert_false(dlb_nmg_remove(&g, &nm));
	assert_int_equal(dlb_netmask_parse("10.0.0.0/9", &nm), 0);	/* not exact */
	assert_false(dlb_nmg_remove(&g, &nm));
	assert_int_equal(g.n, 2);
	a = sa_of("192.168.1.1");
	assert_false(dlb_nmg_match(&g, (struct sockaddr *)&a));
	assert_true(dlb_nmg_match(&copy, (struct sockaddr *)&a));

	/* many entries force reallocation */
	for (int i = 0; i < 100; i++) {
		snprintf(buf, sizeof(buf), "172.16.%d.0/24", i);
		assert_int_equal(dlb_netmask_parse(buf, &nm), 0);
		assert_int_equal(dlb_nmg_add(&g, &nm), 0);
	}
	assert_int_equal(g.n, 102);
	a = sa_of("172.16.99.1");
	assert_true(dlb_nmg_match(&g, (struct sockaddr *)&a));
	a = sa_of("172.16.100.1");
	assert_false(dlb_nmg_match(&g, (struct sockaddr *)&a));

	dlb_nmg_clear(&g);
	assert_int_equal(g.n, 0);
	assert_false(dlb_nmg_match(&g, (struct sockaddr *)&a));
	dlb_nmg_deinit(&g);
	dlb_nmg_deinit(&copy);
	dlb_nmg_deinit(&copy);	/* idempotent */
}

static bool
nmg_has(const struct dlb_nmg *g, const char *addr)
{
	struct sockaddr_storage a = sa_of(addr);

	return dlb_nmg_match(g, (struct sockaddr *)&a);
}

/* The IPv4 netmasks repeated in fast4 follow every change of the group. */
static void
test_group_fast4(void **state)
{
	struct dlb_nmg g, copy;
	struct dlb_netmask nm;
	char buf[64];

	(void)state;
	dlb_nmg_init(&g);
	dlb_nmg_init(&copy);
	/* more IPv4 netmasks than fast4 holds, and an IPv6 one */
	for (int i = 0; i < DLB_NMG_FAST4 + 3; i++) {
		snprintf(buf, sizeof(buf), "10.%d.0.0/16", i);
		assert_int_equal(dlb_netmask_parse(buf, &nm), 0);
		assert_int_equal(dlb_nmg_add(&g, &nm), 0);
	}
	assert_int_equal(dlb_netmask_parse("2001:db8::/32", &nm), 0);
	assert_int_equal(dlb_nmg_add(&g, &nm), 0);
	assert_int_equal(g.n4, DLB_NMG_FAST4);
	for (int i = 0; i < DLB_NMG_FAST4 + 3; i++) {
		snprintf(buf, sizeof(buf), "10.%d.200.1", i);
		assert_true(nmg_has(&g, buf));
	}
	assert_false(nmg_has(&g, "10.200.0.1"));
	assert_false(nmg_has(&g, "11.0.0.1"));
	assert_true(nmg_has(&g, "2001:db8::5"));

	/* removing one of fast4's: it stops matching, the next one moves in */
	assert_int_equal(dlb_netmask_parse("10.0.0.0/16", &nm), 0);
	assert_true(dlb_nmg_remove(&g, &nm));
	assert_false(nmg_has(&g, "10.0.0.1"));
	assert_true(nmg_has(&g, "10.1.0.1"));
	assert_true(nmg_has(&g, "10.9.0.1"));
	assert_int_equal(g.n4, DLB_NMG_FAST4);

	/* a copy has its own index */
	assert_int_equal(dlb_nmg_copy(&copy, &g), 0);
	assert_int_equal(copy.n4, DLB_NMG_FAST4);
	assert_true(nmg_has(&copy, "10.1.0.1"));
	assert_false(nmg_has(&copy, "10.0.0.1"));

	/* /0 matches every IPv4 address; a cleared group nothing */
	assert_int_equal(dlb_netmask_parse("0.0.0.0/0", &nm), 0);
	assert_int_equal(dlb_nmg_add(&g, &nm), 0);
	assert_true(nmg_has(&g, "203.0.113.9"));
	assert_false(nmg_has(&g, "2001:db9::1"));
	dlb_nmg_clear(&g);
	assert_int_equal(g.n4, 0);
	assert_false(nmg_has(&g, "203.0.113.9"));
	assert_true(nmg_has(&copy, "10.8.0.1"));

	/* only IPv6 netmasks: fast4 stays empty */
	assert_int_equal(dlb_netmask_parse("::1", &nm), 0);
	assert_int_equal(dlb_nmg_add(&g, &nm), 0);
	assert_int_equal(g.n4, 0);
	assert_false(nmg_has(&g, "127.0.0.1"));
	assert_true(nmg_has(&g, "::1"));
	dlb_nmg_deinit(&g);
	dlb_nmg_deinit(&copy);
}

static void
roundtrip(const char *in, uint16_t defport, const char *expect)
{
	struct sockaddr_storage ss;
	socklen_t len = 0;
	char buf[64];

	assert_int_equal(dlb_sockaddr_parse(in, defport, &ss, &len), 0);
	if (ss.ss_family == AF_INET)
		assert_int_equal(len, sizeof(struct sockaddr_in));
	else
		assert_int_equal(len, sizeof(struct sockaddr_in6));
	dlb_sockaddr_format((struct sockaddr *)&ss, buf, sizeof(buf));
	assert_string_equal(buf, expect);
}

static void
test_sockaddr_parse(void **state)
{
	struct sockaddr_storage ss;
	socklen_t len;

	(void)state;
	roundtrip("1.2.3.4", 53, "1.2.3.4:53");
	roundtrip("1.2.3.4:5300", 53, "1.2.3.4:5300");
	roundtrip("[::1]:53", 99, "[::1]:53");
	roundtrip("::1", 53, "[::1]:53");
	roundtrip("[::1]", 5353, "[::1]:5353");
	roundtrip("2001:db8::1", 53, "[2001:db8::1]:53");
	roundtrip("[2001:db8::1]:65535", 53, "[2001:db8::1]:65535");
	roundtrip("0.0.0.0:0", 53, "0.0.0.0:0");
	roundtrip("::ffff:1.2.3.4", 53, "[::ffff:1.2.3.4]:53");

	assert_int_equal(dlb_sockaddr_parse("1.2.3.4", 53, &ss, &len), 0);
	assert_int_equal(ss.ss_family, AF_INET);
	assert_int_equal(ntohs(((struct sockaddr_in *)&ss)->sin_port), 53);
}

static void
test_sockaddr_invalid(void **state)
{
	static const char *const bad[] = {
		"", "1.2.3.4:", "1.2.3.4:65536", "1.2.3.4:-1", "1.2.3.4:53x", "1.2.3.4:abc",
		"1.2.3.4: 53", "127.0.0.355", "127.0.0.355:53", "[::1]:", "[::1]:70000",
		"[::1]x", "[::1", "::1]", "[1.2.3.4]:53", "[]:53", "host.example:53",
		"garbage", "::g", "[::1]:5:3",
	};
	struct sockaddr_storage ss;
	socklen_t len;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (dlb_sockaddr_parse(bad[i], 53, &ss, &len) != -1)
			fail_msg("accepted '%s'", bad[i]);
	}
	assert_int_equal(dlb_sockaddr_parse(NULL, 53, &ss, &len), -1);
}

static void
test_sockaddr_equal(void **state)
{
	struct sockaddr_storage a, b;

	(void)state;
	a = sa_of("1.2.3.4");
	b = sa_of("1.2.3.4:53");
	assert_true(dlb_sockaddr_equal((struct sockaddr *)&a, (struct sockaddr *)&b));
	b = sa_of("1.2.3.4:54");
	assert_false(dlb_sockaddr_equal((struct sockaddr *)&a, (struct sockaddr *)&b));
	b = sa_of("1.2.3.5");
	assert_false(dlb_sockaddr_equal((struct sockaddr *)&a, (struct sockaddr *)&b));
	b = sa_of("::1");
	assert_false(dlb_sockaddr_equal((struct sockaddr *)&a, (struct sockaddr *)&b));
	a = sa_of("[::1]:53");
	assert_true(dlb_sockaddr_equal((struct sockaddr *)&a, (struct sockaddr *)&b));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_v4),
		cmocka_unit_test(test_parse_v6),
		cmocka_unit_test(test_parse_bare),
		cmocka_unit_test(test_parse_invalid),
		cmocka_unit_test(test_host_bits_zeroed),
		cmocka_unit_test(test_match),
		cmocka_unit_test(test_group),
		cmocka_unit_test(test_group_fast4),
		cmocka_unit_test(test_sockaddr_parse),
		cmocka_unit_test(test_sockaddr_invalid),
		cmocka_unit_test(test_sockaddr_equal),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
