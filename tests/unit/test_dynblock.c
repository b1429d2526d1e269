/*
 * test_dynblock.c - dynamic blocks (dnslb/pipeline/dynblock.h): the store (netmask
 * and suffix matches, most specific first, expiry, warnings, purge, the
 * snapshot swap), the rate tracking and rule evaluation driven without a
 * daemon (a worker struct, its windows harvested by dlb_dyn_tick), the
 * suffix visitor, the legacy exceed*, and showDynBlocks()'s layout.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/pipeline/dynblock.h"
#include "dnslb/pipeline/dynblock_int.h"
#include "dnslb/core/netmask.h"
#include "dnslb/core/wire.h"
#include "dnslb/worker.h"

static struct sockaddr_storage
addr(const char *s)
{
	struct sockaddr_storage ss;
	socklen_t len;

	assert_int_equal(dlb_sockaddr_parse(s, 53, &ss, &len), 0);
	return ss;
}

static struct dlb_netmask
nm(const char *s)
{
	struct dlb_netmask m;

	assert_int_equal(dlb_netmask_parse(s, &m), 0);
	return m;
}

static size_t
name(const char *text, uint8_t *out)
{
	int n = dlb_wire_name_from_text(text, out, 256);

	assert_true(n > 0);
	for (int i = 0; i < n; i++)
		if (out[i] >= 'A' && out[i] <= 'Z')
			out[i] = (uint8_t)(out[i] + 32);
	return (size_t)n;
}

static int
look(const char *client, const char *qname, double now)
{
	struct sockaddr_storage ss = addr(client);
	uint8_t n[256];
	size_t len = name(qname, n);

	return dlb_dyn_lookup((struct sockaddr *)&ss, n, len, now);
}

static int
setup(void **state)
{
	(void)state;
	dlb_dyn_reset();
	return 0;
}

static void
block(const char *mask, int action, double until, bool warning, double now)
{
	struct dlb_netmask m = nm(mask);

	assert_true(dlb_dyn_block_nm(&m, "r", until, action, warning, true, now));
}

static void
block_name(const char *text, int action, double until, double now)
{
	uint8_t n[256];
	size_t len = name(text, n);

	assert_true(dlb_dyn_block_smt(n, len, "smt", until, action, true, now));
}

static void
test_most_specific(void **state)
{
	double now = 1000;

	(void)state;
	block("192.0.2.0/24", DLB_DYN_DROP, now + 60, false, now);
	block("192.0.2.1/32", DLB_DYN_REFUSED, now + 60, false, now);
	block("192.0.0.0/16", DLB_DYN_NXDOMAIN, now + 60, false, now);
	block("2001:db8::/32", DLB_DYN_TRUNCATE, now + 60, false, now);
	/* nothing is seen before it is published */
	assert_int_equal(look("192.0.2.1", "www.example.com", now), -1);
	dlb_dyn_publish();
	assert_int_equal(look("192.0.2.1", "www.example.com", now), DLB_DYN_REFUSED);
	assert_int_equal(look("192.0.2.2", "www.example.com", now), DLB_DYN_DROP);
	assert_int_equal(look("192.0.3.2", "www.example.com", now), DLB_DYN_NXDOMAIN);
	assert_int_equal(look("198.51.100.1", "www.example.com", now), -1);
	assert_int_equal(look("[2001:db8::1]:53", "x.", now), DLB_DYN_TRUNCATE);
	assert_int_equal(look("[2001:db9::1]:53", "x.", now), -1);
	assert_int_equal(dlb_dyn_nmg_size(), 4);
}

static void
test_expiry_warning_purge(void **state)
{
	double now = 1000;

	(void)state;
	/* the /32s first: a block or warning inside a longer-lasting /24 is not
	 * made (dnsdist weighs the entry covering the client) */
	block("192.0.2.1/32", DLB_DYN_REFUSED, now + 10, false, now);
	block("192.0.2.2/32", DLB_DYN_DROP, now + 60, true, now);
	block("192.0.2.0/24", DLB_DYN_DROP, now + 60, false, now);
	block("198.51.100.7/32", DLB_DYN_DROP, now + 60, true, now);
	{
		struct dlb_netmask m = nm("192.0.2.3/32");

		assert_false(dlb_dyn_block_nm(&m, "w", now + 60, DLB_DYN_DROP, true, true, now));
		assert_false(dlb_dyn_block_nm(&m, "b", now + 30, DLB_DYN_DROP, false, true, now));
	}
	dlb_dyn_publish();
	assert_int_equal(look("192.0.2.3", "a.", now), DLB_DYN_DROP);
	/* the most specific entry decides: a warning shadows the /24 (dnsdist) */
	assert_int_equal(look("192.0.2.2", "a.", now), -1);
	assert_int_equal(look("198.51.100.7", "a.", now), -1);
	/* expired: stops acting at once, and shadows the /24 until purged */
	assert_int_equal(look("192.0.2.1", "a.", now + 5), DLB_DYN_REFUSED);
	assert_int_equal(look("192.0.2.1", "a.", now + 11), -1);
	assert_int_equal(dlb_dyn_nmg_size(), 4);
	assert_int_equal(dlb_dyn_purge(now + 11), 1);
	assert_int_equal(dlb_dyn_nmg_size(), 3);
	assert_int_equal(look("192.0.2.1", "a.", now + 11), DLB_DYN_DROP);
	/* a warning never replaces a real block; a real block replaces a warning */
	{
		struct dlb_netmask m = nm("192.0.2.0/24");

		assert_false(dlb_dyn_block_nm(&m, "w", now + 100, DLB_DYN_DROP, true, true, now));
		m = nm("198.51.100.7/32");
		assert_true(dlb_dyn_block_nm(&m, "b", now + 30, DLB_DYN_DROP, false, true, now));
		/* a shorter block does not shorten a longer one */
		assert_false(dlb_dyn_block_nm(&m, "b", now + 20, DLB_DYN_DROP, false, true, now));
	}
	dlb_dyn_publish();
	assert_int_equal(look("198.51.100.7", "a.", now), DLB_DYN_DROP);
	/* NoOp and the default action */
	block("203.0.113.1/32", DLB_DYN_NOOP, now + 60, false, now);
	block("203.0.113.2/32", DLB_DYN_NONE, now + 60, false, now);
	dlb_dyn_publish();
	assert_int_equal(look("203.0.113.1", "a.", now), -1);
	assert_int_equal(look("203.0.113.2", "a.", now), DLB_DYN_DROP);
	dlb_dyn_set_default_action(DLB_DYN_REFUSED);
	assert_int_equal(look("203.0.113.2", "a.", now), DLB_DYN_REFUSED);
	dlb_dyn_clear();
	assert_int_equal(look("192.0.2.2", "a.", now), -1);
	assert_int_equal(dlb_dyn_nmg_size(), 0);
}

static void
test_smt(void **state)
{
	double now = 1000;

	(void)state;
	block_name("Example.COM", DLB_DYN_DROP, now + 60, now);
	block_name("www.example.com", DLB_DYN_REFUSED, now + 60, now);
	block_name("deep.a.b.c.d.e.f.example.org", DLB_DYN_NXDOMAIN, now + 60, now);
	dlb_dyn_publish();
	assert_int_equal(look("192.0.2.1", "example.com", now), DLB_DYN_DROP);
	assert_int_equal(look("192.0.2.1", "x.y.example.com", now), DLB_DYN_DROP);
	assert_int_equal(look("192.0.2.1", "www.example.com", now), DLB_DYN_REFUSED);
	assert_int_equal(look("192.0.2.1", "a.www.example.com", now), DLB_DYN_REFUSED);
	assert_int_equal(look("192.0.2.1", "com", now), -1);
	assert_int_equal(look("192.0.2.1", "example.org", now), -1);
	assert_int_equal(look("192.0.2.1", "x.deep.a.b.c.d.e.f.example.org", now),
			 DLB_DYN_NXDOMAIN);
	assert_int_equal(look("192.0.2.1", "notexample.com", now), -1);
	assert_int_equal(look("192.0.2.1", ".", now), -1);
	assert_int_equal(dlb_dyn_smt_size(), 3);
	assert_int_equal(look("192.0.2.1", "example.com", now + 61), -1);
}

/* Many swaps: each snapshot is freed once replaced (ASan checks the reads). */
static void
test_snapshot_swap(void **state)
{
	double now = 1000;
	char buf[64];

	(void)state;
	for (int i = 0; i < 200; i++) {
		snprintf(buf, sizeof(buf), "10.0.%d.%d/32", i / 250, i % 250);
		block(buf, DLB_DYN_DROP, now + 60, false, now);
		if (i % 7 == 0)
			block("10.1.0.0/16", DLB_DYN_REFUSED, now + 60 + i, false, now);
		dlb_dyn_publish();
		assert_int_equal(look("10.0.0.0", "a.", now), DLB_DYN_DROP);
		assert_int_equal(look("10.1.2.3", "a.", now), DLB_DYN_REFUSED);
	}
	assert_int_equal(dlb_dyn_nmg_size(), 201);
}

static void
test_show_format(void **state)
{
	double now = 1000;
	char *s;

	(void)state;
	block("127.0.0.2/32", DLB_DYN_REFUSED, now + 60, false, now);
	block("2001:db8::1/128", DLB_DYN_NONE, now + 30.7, false, now);
	block("127.0.0.3/32", DLB_DYN_DROP, now + 20, true, now);
	block_name("bad.example", DLB_DYN_TRUNCATE, now + 45, now);
	block("127.0.0.4/32", DLB_DYN_DROP, now - 1, false, now - 10);	/* expired: not shown */
	dlb_dyn_publish();
	s = dlb_dyn_show(now);
	assert_non_null(s);
	/* dnsdist 1.7.3's layout ("%-24s %8d %8d %-10s %-20s %s") */
	assert_string_equal(s,
		"What                      Seconds   Blocks Warning    Action               Reason\n"
		"127.0.0.2/32                   60        0 false      Send Refused         r\n"
		"2001:db8::1/128                30        0 false      Drop                 r\n"
		"127.0.0.3/32                   20        0 true       Do nothing           r\n"
		"bad.example.                   45        0 false      Truncate over UDP    smt\n");
	free(s);
}

/* ---- tracking and rules ------------------------------------------------------ */

static void
query(struct dlb_worker *w, const char *client, const char *qname, uint16_t qtype, int n)
{
	struct sockaddr_storage ss = addr(client);
	uint8_t nb[256];
	size_t len = name(qname, nb);

	for (int i = 0; i < n; i++)
		dlb_dyn_track_query(w->dyn, (struct sockaddr *)&ss, nb, len, qtype);
}

static void
answer(struct dlb_worker *w, const char *client, const char *qname, unsigned rcode, size_t bytes,
       int n)
{
	struct sockaddr_storage ss = addr(client);
	uint8_t nb[256];
	size_t len = name(qname, nb);

	for (int i = 0; i < n; i++)
		dlb_dyn_track_answer(w->dyn, (struct sockaddr *)&ss, nb, len, rcode, bytes,
				     DLB_DYN_FROM_BACKEND);
}

static struct dlb_dyn_rule
rule(enum dlb_dyn_rule_kind kind, uint16_t code, double rate, unsigned secs, double warn)
{
	struct dlb_dyn_rule r = { .kind = kind, .code = code, .rate = rate, .seconds = secs,
				  .block_seconds = 10, .action = DLB_DYN_NONE, .warning = warn };

	r.reason = strdup("rate");
	return r;
}

static void
test_rates(void **state)
{
	struct dlb_worker w;
	struct dlb_worker *ws[1] = { &w };
	struct dlb_dyn_group *g = dlb_dyn_group_new();
	struct dlb_dyn_rule r;
	double now = 5000;

	(void)state;
	memset(&w, 0, sizeof(w));
	r = rule(DLB_DYN_R_QRATE, 0, 10, 2, 0);
	dlb_dyn_group_set_rule(g, &r);
	r = rule(DLB_DYN_R_RCODE, DLB_RCODE_NXDOMAIN, 5, 2, 0);
	dlb_dyn_group_set_rule(g, &r);
	r = rule(DLB_DYN_R_RESPBYTES, 0, 1000, 2, 500);
	dlb_dyn_group_set_rule(g, &r);
	r = rule(DLB_DYN_R_QTYPE, 255, 3, 2, 0);
	dlb_dyn_group_set_rule(g, &r);
	dlb_dyn_group_register(g);
	assert_true(dlb_dyn_track_code(DLB_DYN_R_RCODE, DLB_RCODE_NXDOMAIN, now));
	assert_true(dlb_dyn_track_code(DLB_DYN_R_QTYPE, 255, now));
	{
		struct dlb_netmask x = nm("192.0.2.99/32");

		assert_int_equal(dlb_dyn_group_range(g, &x, false), 0);
	}
	dlb_dyn_tick(ws, 1, now);	/* attaches the worker */
	assert_non_null(w.dyn);

	/* second 1: A over the query rate (21 > 10 * 2), B under it, C: NXDOMAINs,
	 * D: bytes over the warning only, E: ANY queries, X: excluded */
	query(&w, "192.0.2.1", "a.example.", 1, 21);
	query(&w, "192.0.2.2", "a.example.", 1, 20);
	answer(&w, "192.0.2.3", "nx.example.", DLB_RCODE_NXDOMAIN, 50, 11);
	answer(&w, "192.0.2.4", "a.example.", 0, 600, 2);
	query(&w, "192.0.2.5", "a.example.", 255, 7);
	query(&w, "192.0.2.99", "a.example.", 1, 100);
	dlb_dyn_tick(ws, 1, now + 1);	/* the worker leaves window 0 */
	query(&w, "192.0.2.6", "a.example.", 1, 1);	/* (acknowledges the flip) */
	dlb_dyn_tick(ws, 1, now + 2);	/* harvested */
	assert_int_equal(dlb_dyn_group_apply(g, now + 2, NULL), 4);	/* A, C, D (warning), E */
	assert_int_equal(look("192.0.2.1", "a.", now + 2), DLB_DYN_DROP);
	assert_int_equal(look("192.0.2.2", "a.", now + 2), -1);
	assert_int_equal(look("192.0.2.3", "a.", now + 2), DLB_DYN_DROP);
	assert_int_equal(look("192.0.2.4", "a.", now + 2), -1);	/* a warning */
	assert_int_equal(look("192.0.2.5", "a.", now + 2), DLB_DYN_DROP);
	assert_int_equal(look("192.0.2.99", "a.", now + 2), -1);
	/* blocks expire on time */
	assert_int_equal(look("192.0.2.1", "a.", now + 13), -1);

	/* the window slides: B's 20 queries plus 5 more in the next seconds stay
	 * within 10/s over 2 s once the first second leaves the window */
	dlb_dyn_clear();
	query(&w, "192.0.2.2", "a.example.", 1, 5);
	dlb_dyn_tick(ws, 1, now + 3);
	query(&w, "192.0.2.7", "a.example.", 1, 1);
	dlb_dyn_tick(ws, 1, now + 4);
	assert_int_equal(dlb_dyn_group_apply(g, now + 4, NULL), 0);
	assert_int_equal(look("192.0.2.2", "a.", now + 4), -1);
	dlb_dyn_group_free(g);
	dlb_dyn_reset();
}

/*
 * dnsdist's window: a rule run right after a tick sees the second that tick
 * closed, and the `seconds` before it, no more; answers from the cache or a
 * rule do not count, a backend's timeout is a NOERROR of 0 bytes.
 */
static void
test_window_and_sources(void **state)
{
	struct dlb_worker w;
	struct dlb_worker *ws[1] = { &w };
	struct dlb_dyn_group *g = dlb_dyn_group_new();
	struct dlb_dyn_rule r;
	struct sockaddr_storage ss = addr("192.0.2.9");
	uint8_t nb[256];
	size_t len = name("x.example", nb);
	double now = 6000;

	(void)state;
	memset(&w, 0, sizeof(w));
	r = rule(DLB_DYN_R_QRATE, 0, 10, 2, 0);
	dlb_dyn_group_set_rule(g, &r);
	r = rule(DLB_DYN_R_RATIO, DLB_RCODE_SERVFAIL, 0.5, 2, 0);
	r.min_responses = 4;
	dlb_dyn_group_set_rule(g, &r);
	dlb_dyn_group_register(g);
	assert_true(dlb_dyn_track_code(DLB_DYN_R_RCODE, DLB_RCODE_SERVFAIL, now));
	dlb_dyn_tick(ws, 1, now);
	query(&w, "192.0.2.1", "a.example.", 1, 11);
	dlb_dyn_tick(ws, 1, now + 1);
	query(&w, "192.0.2.1", "a.example.", 1, 10);
	query(&w, "192.0.2.2", "a.example.", 1, 21);
	dlb_dyn_tick(ws, 1, now + 2);
	/* right after the tick: both seconds of A (21), all of B */
	assert_int_equal(dlb_dyn_group_apply(g, now + 2.01, NULL), 2);
	dlb_dyn_clear();
	query(&w, "192.0.2.2", "a.example.", 1, 1);
	dlb_dyn_tick(ws, 1, now + 3);
	/* A's first second has left the window; B's 21 have not */
	assert_int_equal(dlb_dyn_group_apply(g, now + 3.01, NULL), 1);
	assert_int_equal(look("192.0.2.1", "a.", now + 3), -1);
	assert_int_equal(look("192.0.2.2", "a.", now + 3), DLB_DYN_DROP);
	dlb_dyn_clear();

	/* ratio: 3 SERVFAIL from backends, 3 from the cache: 3 of 3 answers,
	 * under the minimum of 4; two timeouts make it 3 of 5 */
	for (int i = 0; i < 3; i++) {
		dlb_dyn_track_answer(w.dyn, (struct sockaddr *)&ss, nb, len, DLB_RCODE_SERVFAIL, 40,
				     DLB_DYN_FROM_BACKEND);
		dlb_dyn_track_answer(w.dyn, (struct sockaddr *)&ss, nb, len, DLB_RCODE_SERVFAIL, 40,
				     DLB_DYN_FROM_LOCAL);
	}
	dlb_dyn_tick(ws, 1, now + 4);
	assert_int_equal(dlb_dyn_group_apply(g, now + 4.01, NULL), 0);
	for (int i = 0; i < 2; i++)
		dlb_dyn_track_answer(w.dyn, (struct sockaddr *)&ss, nb, len, DLB_RCODE_SERVFAIL, 40,
				     DLB_DYN_FROM_TIMEOUT);
	dlb_dyn_tick(ws, 1, now + 5);
	assert_int_equal(dlb_dyn_group_apply(g, now + 5.01, NULL), 1);
	assert_int_equal(look("192.0.2.9", "a.", now + 5), DLB_DYN_DROP);
	dlb_dyn_group_free(g);
	dlb_dyn_reset();
}

/* CGNAT port ranges: measured and blocked per range of a /32, the most
 * specific block deciding; IPv6 clients have no port range. */
static void
test_port_ranges(void **state)
{
	struct dlb_worker w;
	struct dlb_worker *ws[1] = { &w };
	struct dlb_dyn_group *g = dlb_dyn_group_new();
	struct dlb_dyn_rule r;
	struct dlb_netmask m = nm("192.0.2.1/32");
	double now = 8000;
	struct dlb_dyn_info i = { .nm = m, .port = 49152, .pbits = 2 };
	char text[80];

	(void)state;
	memset(&w, 0, sizeof(w));
	r = rule(DLB_DYN_R_QRATE, 0, 10, 2, 0);
	dlb_dyn_group_set_rule(g, &r);
	dlb_dyn_group_set_masks(g, 32, 128, 2);
	dlb_dyn_group_register(g);
	dlb_dyn_tick(ws, 1, now);
	query(&w, "192.0.2.1:50000", "a.example.", 1, 15);
	query(&w, "192.0.2.1:60000", "a.example.", 1, 15);	/* the same range: 30 */
	query(&w, "192.0.2.1:1000", "a.example.", 1, 15);
	query(&w, "[2001:db8::1]:50000", "a.example.", 1, 21);
	dlb_dyn_tick(ws, 1, now + 1);
	assert_int_equal(dlb_dyn_group_apply(g, now + 1.01, NULL), 2);
	assert_int_equal(look("192.0.2.1:49152", "a.", now + 1), DLB_DYN_DROP);
	assert_int_equal(look("192.0.2.1:65535", "a.", now + 1), DLB_DYN_DROP);
	assert_int_equal(look("192.0.2.1:49151", "a.", now + 1), -1);
	assert_int_equal(look("[2001:db8::1]:1", "a.", now + 1), DLB_DYN_DROP);
	/* a less specific block applies to the other ranges */
	block("192.0.2.0/24", DLB_DYN_REFUSED, now + 60, false, now);
	dlb_dyn_publish();
	assert_int_equal(look("192.0.2.1:1000", "a.", now + 1), DLB_DYN_REFUSED);
	assert_int_equal(look("192.0.2.1:50000", "a.", now + 1), DLB_DYN_DROP);
	dlb_dyn_key_text(&i, text, sizeof(text));
	assert_string_equal(text, "192.0.2.1:49152/2");
	dlb_dyn_group_free(g);
	dlb_dyn_reset();
}

static void
count_hits(const struct dlb_netmask *client, uint64_t count, void *ud)
{
	assert_int_equal(client->bits, 128);
	*(uint64_t *)ud += count;
}

static void
test_masks_ratio_exceed(void **state)
{
	uint64_t hits = 0;
	struct dlb_worker w;
	struct dlb_worker *ws[1] = { &w };
	struct dlb_dyn_group *g = dlb_dyn_group_new();
	struct dlb_dyn_rule r;
	double now = 7000;
	long n;

	(void)state;
	memset(&w, 0, sizeof(w));
	r = rule(DLB_DYN_R_RATIO, DLB_RCODE_SERVFAIL, 0.5, 2, 0);
	r.min_responses = 10;
	dlb_dyn_group_set_rule(g, &r);
	r = rule(DLB_DYN_R_QRATE, 0, 10, 2, 0);
	dlb_dyn_group_set_rule(g, &r);
	dlb_dyn_group_set_masks(g, 24, 64, 0);
	dlb_dyn_group_register(g);
	assert_true(dlb_dyn_track_code(DLB_DYN_R_RCODE, DLB_RCODE_SERVFAIL, now));
	dlb_dyn_tick(ws, 1, now);
	/* 15 clients of one /24, 2 queries each: 30 > 20 for the /24 */
	for (int i = 1; i <= 15; i++) {
		char a[32];

		snprintf(a, sizeof(a), "198.51.100.%d", i);
		query(&w, a, "x.example.", 1, 2);
	}
	/* ratio: 8 SERVFAIL of 12 answers (> 0.5); another client 3 of 4 (< 10 answers) */
	answer(&w, "[2001:db8:0:1::1]:53", "x.example.", DLB_RCODE_SERVFAIL, 40, 8);
	answer(&w, "[2001:db8:0:1::2]:53", "x.example.", 0, 40, 4);
	answer(&w, "[2001:db8:0:2::1]:53", "x.example.", DLB_RCODE_SERVFAIL, 40, 3);
	answer(&w, "[2001:db8:0:2::1]:53", "x.example.", 0, 40, 1);
	dlb_dyn_tick(ws, 1, now + 1);
	dlb_dyn_tick(ws, 1, now + 2);
	dlb_dyn_group_apply(g, now + 2, NULL);
	assert_int_equal(look("198.51.100.200", "a.", now + 2), DLB_DYN_DROP);
	assert_int_equal(look("198.51.101.1", "a.", now + 2), -1);
	assert_int_equal(look("[2001:db8:0:1::77]:53", "a.", now + 2), DLB_DYN_DROP);
	assert_int_equal(look("[2001:db8:0:2::1]:53", "a.", now + 2), -1);
	/* exceedServFails: per whole address, 8 > 1 * 2 for one of them only */
	n = dlb_dyn_exceed(DLB_DYN_R_RCODE, DLB_RCODE_SERVFAIL, 1, 2, now + 2, count_hits, &hits);
	assert_int_equal(n, 2);
	assert_int_equal(hits, 11);	/* 8 + 3 */
	dlb_dyn_group_free(g);
	dlb_dyn_reset();
}

static bool
visitor(void *ud, const struct dlb_dyn_node *node, const struct dlb_dyn_stat *self,
	const struct dlb_dyn_stat *children, char **reason)
{
	int *calls = ud;

	(void)self;
	(*calls)++;
	if (node->labels_count == 2 && children->queries > 50 && node->nchildren > 50) {
		*reason = strdup(node->fullname);
		return true;
	}
	return false;
}

static void
test_suffix_visitor(void **state)
{
	struct dlb_worker w;
	struct dlb_worker *ws[1] = { &w };
	struct dlb_dyn_group *g = dlb_dyn_group_new();
	uint8_t nb[256];
	double now = 9000;
	int calls = 0;

	(void)state;
	memset(&w, 0, sizeof(w));
	dlb_dyn_group_set_suffix(g, 2, "sfx", 30, DLB_DYN_REFUSED, visitor);
	assert_int_equal(dlb_dyn_group_exclude_domain(g, nb, name("safe.example", nb)), 0);
	dlb_dyn_group_register(g);
	dlb_dyn_tick(ws, 1, now);
	for (int i = 0; i < 3000; i++) {
		char q[64];

		snprintf(q, sizeof(q), "r%d.victim.example", i);
		query(&w, "192.0.2.1", q, 1, 1);
		answer(&w, "192.0.2.1", q, DLB_RCODE_NXDOMAIN, 60, 1);
		snprintf(q, sizeof(q), "r%d.safe.example", i);
		query(&w, "192.0.2.1", q, 1, 1);
	}
	query(&w, "192.0.2.1", "www.other.example", 1, 10);
	dlb_dyn_tick(ws, 1, now + 1);
	dlb_dyn_tick(ws, 1, now + 2);
	dlb_dyn_group_apply(g, now + 2, &calls);
	assert_true(calls > 10);
	/* the table overflowed (3000+3000 names > the slots): the parent's totals
	 * stayed exact, so the flood is seen at victim.example */
	assert_int_equal(look("192.0.2.9", "www.victim.example", now + 2), DLB_DYN_REFUSED);
	assert_int_equal(look("192.0.2.9", "www.other.example", now + 2), -1);
	assert_int_equal(look("192.0.2.9", "x.safe.example", now + 2), -1);
	dlb_dyn_group_free(g);
	dlb_dyn_reset();
}

static const char *
qt_text(unsigned t, char *buf, size_t n)
{
	snprintf(buf, n, t == 255 ? "ANY" : "TYPE%u", t);
	return buf;
}

static void
test_group_text(void **state)
{
	struct dlb_dyn_group *g = dlb_dyn_group_new();
	struct dlb_dyn_rule r = rule(DLB_DYN_R_QRATE, 0, 20, 10, 0);
	struct dlb_netmask m = nm("10.0.0.0/8");
	char *s;

	(void)state;
	r.block_seconds = 60;
	dlb_dyn_group_set_rule(g, &r);
	r = rule(DLB_DYN_R_RATIO, DLB_RCODE_SERVFAIL, 0.2, 10, 0);
	r.block_seconds = 60;
	r.action = DLB_DYN_REFUSED;
	dlb_dyn_group_set_rule(g, &r);
	dlb_dyn_group_range(g, &m, false);
	s = dlb_dyn_group_text(g, qt_text);
	assert_string_equal(s,
		"Query rate rule: Apply the global DynBlock action for 60 seconds when over 20 "
		"during the last 10 seconds, reason: 'rate'\n"
		"Response rate rule: \n"
		"SuffixMatch rule: \n"
		"RCode rules: \n"
		"- Server Failure: Send Refused for 60 seconds when over 0.200000 ratio during "
		"the last 10 seconds, reason: 'rate'\n"
		"QType rules: \n"
		"Excluded Subnets: 10.0.0.0/8\n"
		"Excluded Domains: \n");
	free(s);
	dlb_dyn_group_free(g);
}

/* ---- top offenders (dyntop.c) ---- */

struct top_in {
	const char *reason, *key;	/* a key ending in '.' is a suffix */
	uint32_t value;
};

static void
top_push(const struct top_in *in, size_t n)
{
	struct dlb_dyn_top_ent *v = calloc(n > 0 ? n : 1, sizeof(*v));

	assert_non_null(v);
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(in[i].key);

		v[i].smt = in[i].key[l - 1] == '.';
		if (v[i].smt)
			v[i].namelen = (uint8_t)name(in[i].key, v[i].name);
		else
			v[i].nm = nm(in[i].key);
		v[i].value = in[i].value;
		v[i].reason = strdup(in[i].reason);
	}
	assert_int_equal(dlb_dyn_top_push(v, n), 0);
}

/* The published tops of a kind as "reason key value;" ... */
static const char *
tops_text(bool smt)
{
	static char out[4096];
	const struct dlb_dyn_top *t;
	size_t n = dlb_dyn_tops(smt, &t), len = 0;

	out[0] = '\0';
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(out + len, sizeof(out) - len, "%s %s %u;", t[i].reason,
					t[i].key, (unsigned)t[i].value);
	return out;
}

static void
test_top_offenders(void **state)
{
	(void)state;
	/* nothing before the first generation */
	assert_int_equal(dlb_dyn_top_generate(), 0);
	assert_string_equal(tops_text(false), "");

	/* netmasks: increases added up; a lower count (replaced block) or a
	 * new block counts in full; round half away from zero; equal rates:
	 * the later key (192.0.2.x in dnsdist's address order) first.
	 * Suffixes: only the last interval's increase (dnsdist 1.7's quirk). */
	top_push((const struct top_in[]){ { "r", "192.0.2.1/32", 10 }, { "r", "192.0.2.2/32", 100 },
					   { "r", "192.0.2.4/32", 0 }, { "s", "a.test.", 0 },
					   { "s", "b.test.", 0 } }, 5);
	top_push((const struct top_in[]){ { "r", "192.0.2.1/32", 40 }, { "r", "192.0.2.2/32", 5 },
					   { "r", "192.0.2.3/32", 7 }, { "r", "192.0.2.4/32", 45 },
					   { "s", "a.test.", 120 }, { "s", "b.test.", 60 } }, 6);
	top_push((const struct top_in[]){ { "r", "192.0.2.1/32", 70 }, { "r", "192.0.2.2/32", 65 },
					   { "r", "192.0.2.3/32", 7 }, { "r", "192.0.2.4/32", 90 },
					   { "s", "a.test.", 150 }, { "s", "b.test.", 60 },
					   { "another", "192.0.2.9/32", 600 } }, 7);
	assert_int_equal(dlb_dyn_top_generate(), 0);
	assert_string_equal(tops_text(false),
			    "another 192.0.2.9/32 10;"
			    "r 192.0.2.3/32 0;r 192.0.2.2/32 1;r 192.0.2.1/32 1;r 192.0.2.4/32 2;");
	assert_string_equal(tops_text(true), "s b.test. 0;s a.test. 1;");

	/* seven snapshots kept: the eighth push drops the first (the baseline
	 * becomes 60); the top 20 of 25 per reason */
	dlb_dyn_reset();
	for (int s = 0; s < 8; s++) {
		struct top_in in[26];
		char keys[25][32];

		for (int i = 0; i < 25; i++) {
			snprintf(keys[i], sizeof(keys[i]), "10.0.0.%d/32", i + 1);
			in[i] = (struct top_in){ "cut", keys[i], (uint32_t)(s == 7 ? (i + 1) * 60 : 0) };
		}
		in[25] = (struct top_in){ "old", "192.0.2.1/32", (uint32_t)(s * 60) };
		top_push(in, 26);
	}
	assert_int_equal(dlb_dyn_top_generate(), 0);
	{
		char want[2048];
		size_t len = 0;

		for (int i = 6; i <= 25; i++)
			len += (size_t)snprintf(want + len, sizeof(want) - len, "cut 10.0.0.%d/32 %d;",
						i, i);
		snprintf(want + len, sizeof(want) - len, "old 192.0.2.1/32 6;");
		assert_string_equal(tops_text(false), want);
	}
	assert_string_equal(tops_text(true), "");

	/* from the store, on the start's schedule: nothing before 60 s */
	dlb_dyn_reset();
	{
		struct dlb_netmask m = nm("192.0.2.7/32");
		uint8_t n[256];
		size_t len = name("Example.COM", n);
		double now = 1000.0;

		assert_true(dlb_dyn_block_nm(&m, "by hand", now + 300, DLB_DYN_DROP, false, true,
					     now));
		assert_true(dlb_dyn_block_smt(n, len, "names", now + 300, DLB_DYN_DROP, true, now));
		dlb_dyn_publish();
		dlb_dyn_top_start(now);
		for (int i = 1; i < 60; i++)
			dlb_dyn_top_tick(now + i + 0.5);
		assert_string_equal(tops_text(false), "");
		dlb_dyn_top_tick(now + 60.5);
		assert_string_equal(tops_text(false), "by hand 192.0.2.7/32 0;");
		assert_string_equal(tops_text(true), "names example.com. 0;");
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_most_specific, setup),
		cmocka_unit_test_setup(test_expiry_warning_purge, setup),
		cmocka_unit_test_setup(test_smt, setup),
		cmocka_unit_test_setup(test_snapshot_swap, setup),
		cmocka_unit_test_setup(test_show_format, setup),
		cmocka_unit_test_setup(test_rates, setup),
		cmocka_unit_test_setup(test_window_and_sources, setup),
		cmocka_unit_test_setup(test_port_ranges, setup),
		cmocka_unit_test_setup(test_masks_ratio_exceed, setup),
		cmocka_unit_test_setup(test_suffix_visitor, setup),
		cmocka_unit_test_setup(test_group_text, setup),
		cmocka_unit_test_setup(test_top_offenders, setup),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);

	dlb_dyn_reset();
	return rc;
}
