/*
 * test_fleet.c - the fleet's block encoding (dnslb/control/fleet.h): round trips of
 * netmask and suffix blocks and of the control announcements, the keys,
 * malformed input (hand-written cases, then every truncation and byte flip
 * of valid encodings, then random bytes: never a crash, always -1 or a
 * valid block), and the store's side (dnslb/pipeline/dynblock.h): fleet blocks carry
 * their origin, do not reach the hook, survive clearDynBlocks() and go with
 * their origin's clear.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/pipeline/dynblock.h"
#include "dnslb/control/fleet.h"
#include "dnslb/core/netmask.h"
#include "dnslb/store/redis.h"
#include "dnslb/core/wire.h"

static int
setup(void **state)
{
	(void)state;
	dlb_redis_settings_reset();
	dlb_dyn_reset();
	return 0;
}

static struct dlb_dyn_info
nm_block(const char *mask, double until, int action, const char *reason)
{
	struct dlb_dyn_info b;

	memset(&b, 0, sizeof(b));
	assert_int_equal(dlb_netmask_parse(mask, &b.nm), 0);
	b.until = until;
	b.action = action;
	b.reason = reason;
	return b;
}

static struct dlb_dyn_info
smt_block(const char *name, double until, int action, const char *reason)
{
	struct dlb_dyn_info b;
	int n;

	memset(&b, 0, sizeof(b));
	b.smt = true;
	n = dlb_wire_name_from_text(name, b.name, sizeof(b.name));
	assert_true(n > 0);
	b.namelen = (uint8_t)n;
	b.until = until;
	b.action = action;
	b.reason = reason;
	return b;
}

static void
test_roundtrip_netmask(void **state)
{
	struct dlb_dyn_info b = nm_block("192.0.2.0/24", 1700000000.25, DLB_DYN_REFUSED,
					 "too many | queries");
	struct dlb_fleet_msg m;
	char buf[DLB_FLEET_MSG_MAX + 1], text[64];
	int n;

	(void)state;
	n = dlb_fleet_encode_block(&b, "node a|1", buf, sizeof(buf));
	assert_true(n > 0);
	assert_string_equal(buf, "1|B|n|192.0.2.0/24|1700000000250|2|0|node%20a%7C1|"
				 "too many | queries");
	assert_int_equal(dlb_fleet_decode(buf, (size_t)n, &m), 0);
	assert_int_equal(m.kind, DLB_FLEET_MSG_BLOCK);
	assert_false(m.b.smt);
	dlb_netmask_format(&m.b.nm, text, sizeof(text));
	assert_string_equal(text, "192.0.2.0/24");
	assert_true(m.b.until > 1700000000.249 && m.b.until < 1700000000.251);
	assert_int_equal(m.b.action, DLB_DYN_REFUSED);
	assert_false(m.b.warning);
	assert_string_equal(m.origin, "node a|1");
	assert_string_equal(m.b.origin, "node a|1");
	assert_string_equal(m.b.reason, "too many | queries");

	b = nm_block("2001:db8::/48", 1800000000, DLB_DYN_NONE, "");
	b.warning = true;
	n = dlb_fleet_encode_block(&b, "b", buf, sizeof(buf));
	assert_true(n > 0);
	assert_int_equal(dlb_fleet_decode(buf, (size_t)n, &m), 0);
	dlb_netmask_format(&m.b.nm, text, sizeof(text));
	assert_string_equal(text, "2001:db8::/48");
	assert_true(m.b.warning);
	assert_int_equal(m.b.action, DLB_DYN_NONE);
	assert_string_equal(m.b.reason, "");

	/* too small a buffer, a bad action, no origin */
	assert_int_equal(dlb_fleet_encode_block(&b, "b", buf, 10), -1);
	b.action = 3;
	assert_int_equal(dlb_fleet_encode_block(&b, "b", buf, sizeof(buf)), -1);
	b.action = DLB_DYN_DROP;
	assert_int_equal(dlb_fleet_encode_block(&b, "", buf, sizeof(buf)), -1);
}

static void
test_roundtrip_suffix(void **state)
{
	struct dlb_dyn_info b = smt_block("Bad.Example.", 1700000010, DLB_DYN_NXDOMAIN, "smt");
	struct dlb_fleet_msg m;
	char buf[DLB_FLEET_MSG_MAX + 1], longr[600];
	int n;

	(void)state;
	n = dlb_fleet_encode_block(&b, "n1", buf, sizeof(buf));
	assert_true(n > 0);
	assert_string_equal(buf, "1|B|s|03426164074578616d706c6500|1700000010000|1|0|n1|smt");
	assert_int_equal(dlb_fleet_decode(buf, (size_t)n, &m), 0);
	assert_true(m.b.smt);
	/* lowercased on the way in */
	assert_int_equal(m.b.namelen, 13);
	assert_memory_equal(m.b.name, "\3bad\7example\0", 13);

	/* a long reason is cut to DLB_FLEET_REASON_MAX */
	memset(longr, 'r', sizeof(longr) - 1);
	longr[sizeof(longr) - 1] = '\0';
	b.reason = longr;
	n = dlb_fleet_encode_block(&b, "n1", buf, sizeof(buf));
	assert_true(n > 0);
	assert_int_equal(dlb_fleet_decode(buf, (size_t)n, &m), 0);
	assert_int_equal(strlen(m.reason), DLB_FLEET_REASON_MAX);

	/* the longest name and origin fit DLB_FLEET_MSG_MAX; a broken name does not encode */
	memset(&b, 0, sizeof(b));
	b.smt = true;
	b.name[0] = 5;
	b.name[1] = 'a';
	b.namelen = 2;
	b.until = 1700000000;
	b.reason = longr;
	assert_int_equal(dlb_fleet_encode_block(&b, "n1", buf, sizeof(buf)), -1);
	{
		char org[DLB_FLEET_NODE_MAX];

		memset(org, '|', sizeof(org) - 1);
		org[sizeof(org) - 1] = '\0';
		b.namelen = 0;
		for (int i = 0; i < 3; i++) {
			b.name[b.namelen++] = 63;
			for (int k = 0; k < 63; k++)
				b.name[b.namelen++] = 'a';
		}
		b.name[b.namelen++] = 61;
		for (int k = 0; k < 61; k++)
			b.name[b.namelen++] = 'a';
		b.name[b.namelen++] = 0;
		assert_int_equal(b.namelen, 255);
		n = dlb_fleet_encode_block(&b, org, buf, sizeof(buf));
		assert_true(n > 0 && n <= DLB_FLEET_MSG_MAX);
		assert_int_equal(dlb_fleet_decode(buf, (size_t)n, &m), 0);
		assert_string_equal(m.origin, org);
	}
}

static void
test_control(void **state)
{
	struct dlb_fleet_msg m;
	char buf[256];
	int n;

	(void)state;
	n = dlb_fleet_encode_control(DLB_FLEET_MSG_CLEAR, "fra-1", buf, sizeof(buf));
	assert_string_equal(buf, "1|C|fra-1");
	assert_int_equal(dlb_fleet_decode(buf, (size_t)n, &m), 0);
	assert_int_equal(m.kind, DLB_FLEET_MSG_CLEAR);
	assert_string_equal(m.origin, "fra-1");
	n = dlb_fleet_encode_control(DLB_FLEET_MSG_CLEARALL, "a:b", buf, sizeof(buf));
	assert_string_equal(buf, "1|X|a%3Ab");
	assert_int_equal(dlb_fleet_decode(buf, (size_t)n, &m), 0);
	assert_int_equal(m.kind, DLB_FLEET_MSG_CLEARALL);
	assert_string_equal(m.origin, "a:b");
	assert_int_equal(dlb_fleet_encode_control(DLB_FLEET_MSG_BLOCK, "a", buf, sizeof(buf)), -1);
}

static void
test_keys(void **state)
{
	struct dlb_dyn_info b = nm_block("10.0.0.0/8", 1, DLB_DYN_DROP, "");
	char key[1400];

	(void)state;
	snprintf(dlb_redis_settings.ns, sizeof(dlb_redis_settings.ns), "edge");
	assert_true(dlb_fleet_block_key(&b, "fra 1", key, sizeof(key)) > 0);
	assert_string_equal(key, "edge:block:fra%201:n:10.0.0.0/8");
	b = smt_block("www.Example.", 1, DLB_DYN_DROP, "");
	assert_true(dlb_fleet_block_key(&b, "x", key, sizeof(key)) > 0);
	assert_string_equal(key, "edge:block:x:s:www.Example.");
	assert_int_equal(dlb_fleet_block_key(&b, "x", key, 10), -1);
}

static void
test_malformed(void **state)
{
	static const char *const bad[] = {
		"",
		"1",
		"1|",
		"2|B|n|192.0.2.0/24|1700000000000|0|0|a|r",	/* version */
		"1|Z|a",					/* kind */
		"1|C|",						/* no origin */
		"1|C|a b",					/* unescaped */
		"1|C|%4",					/* short escape */
		"1|C|%zz",
		"1|C|%00",					/* NUL */
		"1|B|n|192.0.2.0/24|1700000000000|0|0|a",	/* no reason field */
		"1|B|x|192.0.2.0/24|1700000000000|0|0|a|r",
		"1|B|n|192.0.2.0|1700000000000|0|0|a|r",	/* no prefix length */
		"1|B|n|192.0.2.0/33|1700000000000|0|0|a|r",
		"1|B|n|not.an.address/8|1700000000000|0|0|a|r",
		"1|B|n||1700000000000|0|0|a|r",
		"1|B|n|192.0.2.0/24|-5|0|0|a|r",
		"1|B|n|192.0.2.0/24|0|0|0|a|r",
		"1|B|n|192.0.2.0/24|1700000000000000000|0|0|a|r",
		"1|B|n|192.0.2.0/24|17e11|0|0|a|r",
		"1|B|n|192.0.2.0/24|1700000000000|3|0|a|r",	/* not a block action */
		"1|B|n|192.0.2.0/24|1700000000000|1000|0|a|r",
		"1|B|n|192.0.2.0/24|1700000000000|0|2|a|r",
		"1|B|n|192.0.2.0/24|1700000000000|0|0||r",
		"1|B|s|03626164|1700000000000|0|0|a|r",		/* no root label */
		"1|B|s|036261|1700000000000|0|0|a|r",		/* label past the end */
		"1|B|s|0362616400ff|1700000000000|0|0|a|r",	/* bytes after the root */
		"1|B|s|4062616400|1700000000000|0|0|a|r",	/* label > 63 */
		"1|B|s|036261640|1700000000000|0|0|a|r",	/* odd hex */
		"1|B|s|03626g6400|1700000000000|0|0|a|r",
		"1|B|s|0362616400|1700000000000|0|1|a|r",	/* a suffix warning */
	};
	struct dlb_fleet_msg m;
	char longreason[400];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (dlb_fleet_decode(bad[i], strlen(bad[i]), &m) != -1)
			fail_msg("accepted: %s", bad[i]);
	}
	assert_int_equal(dlb_fleet_decode(NULL, 0, &m), -1);
	/* an embedded NUL, a reason past the limit */
	assert_int_equal(dlb_fleet_decode("1|C|a\0b", 7, &m), -1);
	snprintf(longreason, sizeof(longreason), "1|B|n|192.0.2.0/24|1700000000000|0|0|a|");
	memset(longreason + strlen(longreason), 'x', 300);
	longreason[sizeof(longreason) - 1] = '\0';
	assert_int_equal(dlb_fleet_decode(longreason, strlen(longreason), &m), -1);
	/* and the accepted forms of the same */
	assert_int_equal(dlb_fleet_decode("1|B|s|00|1700000000000|0|0|a|",
					  strlen("1|B|s|00|1700000000000|0|0|a|"), &m), 0);
	assert_int_equal(m.b.namelen, 1);
}

/* A decoded message must be a valid block that encodes again. */
static void
check_valid(const struct dlb_fleet_msg *m)
{
	char buf[DLB_FLEET_MSG_MAX + 1];

	if (m->kind != DLB_FLEET_MSG_BLOCK) {
		assert_true(m->origin[0] != '\0');
		return;
	}
	assert_true(dlb_dyn_action_valid(m->b.action));
	assert_true(dlb_fleet_encode_block(&m->b, m->origin, buf, sizeof(buf)) > 0);
}

static void
test_mutations(void **state)
{
	static const char *const good[] = {
		"1|B|n|192.0.2.0/24|1700000000250|2|0|node%20a%7C1|too many | queries",
		"1|B|n|2001:db8::/48|1800000000000|10|1|b|",
		"1|B|s|03426164074578616d706c6500|1700000010000|1|0|n1|smt",
		"1|C|fra-1",
		"1|X|a%3Ab",
	};
	struct dlb_fleet_msg m;
	char buf[DLB_FLEET_MSG_MAX + 64];
	unsigned seed = 12345;

	(void)state;
	for (size_t g = 0; g < sizeof(good) / sizeof(good[0]); g++) {
		size_t len = strlen(good[g]);

		assert_int_equal(dlb_fleet_decode(good[g], len, &m), 0);
		check_valid(&m);
		/* every truncation */
		for (size_t l = 0; l < len; l++) {
			memcpy(buf, good[g], l);
			if (dlb_fleet_decode(buf, l, &m) == 0)
				check_valid(&m);
		}
		/* every byte, set to a few interesting values */
		for (size_t i = 0; i < len; i++) {
			static const char vals[] = { 0,   '|', '%',    '/', '0',
						     '9', 'f', 'Z', '\xff', ':' };

			for (size_t v = 0; v < sizeof(vals); v++) {
				memcpy(buf, good[g], len);
				buf[i] = vals[v];
				if (dlb_fleet_decode(buf, len, &m) == 0)
					check_valid(&m);
			}
		}
	}
	/* random bytes, and random splices of '|'-separated fields */
	for (int r = 0; r < 20000; r++) {
		size_t len = (size_t)(rand_r(&seed) % (sizeof(buf) - 1));

		for (size_t i = 0; i < len; i++)
			buf[i] = (char)(rand_r(&seed) % 4 == 0 ? '|' : rand_r(&seed) % 256);
		if (r % 2 == 0 && len > 4)
			memcpy(buf, "1|B|", 4);
		if (dlb_fleet_decode(buf, len, &m) == 0)
			check_valid(&m);
	}
}

static int hook_calls;
static enum dlb_dyn_event hook_last;

static void
hook(enum dlb_dyn_event ev, const struct dlb_dyn_info *b, void *ud)
{
	(void)ud;
	hook_calls++;
	hook_last = ev;
	if (ev == DLB_DYN_EV_RAISED)
		assert_null(b->origin);
}

static void
test_store(void **state)
{
	double now = 1700000000;
	struct dlb_dyn_info b = nm_block("198.51.100.0/24", now + 60, DLB_DYN_DROP, "from b");
	struct dlb_netmask local;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	char *show;

	(void)state;
	dlb_dyn_set_hook(hook, NULL);
	hook_calls = 0;
	/* a fleet block: no hook, shown with its origin */
	assert_true(dlb_dyn_block_fleet(&b, "node-b", now));
	assert_int_equal(hook_calls, 0);
	/* the same again: nothing changes */
	assert_false(dlb_dyn_block_fleet(&b, "node-b", now));
	/* a local block: the hook */
	assert_int_equal(dlb_netmask_parse("203.0.113.7", &local), 0);
	assert_true(dlb_dyn_block_nm(&local, "local", now + 30, DLB_DYN_DROP, false, true, now));
	assert_int_equal(hook_calls, 1);
	assert_int_equal(hook_last, DLB_DYN_EV_RAISED);
	/* a warning is not handed over */
	assert_int_equal(dlb_netmask_parse("203.0.113.8", &local), 0);
	assert_true(dlb_dyn_block_nm(&local, "warn", now + 30, DLB_DYN_DROP, true, true, now));
	assert_int_equal(hook_calls, 1);
	dlb_dyn_publish();
	inet_pton(AF_INET, "198.51.100.9", &sa.sin_addr);
	assert_int_equal(dlb_dyn_lookup((struct sockaddr *)&sa, (const uint8_t *)"\0", 1, now + 1),
			 DLB_DYN_DROP);
	show = dlb_dyn_show(now);
	assert_non_null(show);
	assert_non_null(strstr(show, "from b (from node-b)\n"));
	assert_non_null(strstr(show, " local\n"));
	free(show);

	/* clearDynBlocks(): this node's go, the fleet's stay */
	dlb_dyn_clear();
	assert_int_equal(hook_last, DLB_DYN_EV_CLEARING);
	assert_int_equal(dlb_dyn_nmg_size(), 1);
	assert_int_equal(dlb_dyn_lookup((struct sockaddr *)&sa, (const uint8_t *)"\0", 1, now + 1),
			 DLB_DYN_DROP);
	/* its origin's clear */
	assert_int_equal(dlb_dyn_clear_origin("node-c"), 0);
	assert_int_equal(dlb_dyn_clear_origin("node-b"), 1);
	assert_int_equal(dlb_dyn_nmg_size(), 0);

	/* a fleet suffix block, then everything cleared */
	b = smt_block("bad.example.", now + 60, DLB_DYN_REFUSED, "s");
	assert_true(dlb_dyn_block_fleet(&b, "node-b", now));
	dlb_dyn_publish();
	assert_int_equal(dlb_dyn_smt_size(), 1);
	dlb_dyn_clear_all();
	assert_int_equal(dlb_dyn_smt_size(), 0);
	dlb_dyn_set_hook(NULL, NULL);
}

static void
test_view_without_redis(void **state)
{
	struct dlb_fleet_node n[2], t;
	char *s;

	(void)state;
	memset(n, 0, sizeof(n));
	n[0].queries = 100;
	n[0].qps = 10;
	n[0].cache_hits = 30;
	n[0].cache_misses = 70;
	n[0].backends_up = 1;
	n[0].backends = 2;
	n[0].uptime = 50;
	n[0].updated = 10;
	n[1].queries = 300;
	n[1].qps = 5;
	n[1].cache_hits = 70;
	n[1].cache_misses = 30;
	n[1].backends_up = 2;
	n[1].backends = 2;
	n[1].blocks = 3;
	n[1].uptime = 70;
	n[1].updated = 9;
	dlb_fleet_total(n, 2, &t);
	assert_string_equal(t.node, "Total");
	assert_true(t.queries == 400 && t.qps == 15 && t.backends_up == 3 && t.backends == 4);
	assert_true(t.hit_rate == 50.0 && t.blocks == 3 && t.uptime == 70 && t.updated == 9);
	s = dlb_fleet_show(0);
	assert_non_null(s);
	assert_string_equal(s, "Redis is not configured (setRedis)\n");
	free(s);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_roundtrip_netmask, setup),
		cmocka_unit_test_setup(test_roundtrip_suffix, setup),
		cmocka_unit_test_setup(test_control, setup),
		cmocka_unit_test_setup(test_keys, setup),
		cmocka_unit_test_setup(test_malformed, setup),
		cmocka_unit_test_setup(test_mutations, setup),
		cmocka_unit_test_setup(test_store, setup),
		cmocka_unit_test_setup(test_view_without_redis, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
