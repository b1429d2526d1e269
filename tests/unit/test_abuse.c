/*
 * test_abuse.c - the abuse tables (dnslb/pipeline/abuse.h) and MaxQPSIPRule's table
 * at scale (rules/qps.c):
 *
 * - the per-client outstanding table against a model (random acquire and
 *   release over many subnets, dlb_coc_check after every step), caps, masks,
 *   v4-mapped addresses, entries and memory given back at 0;
 * - the TCP client table: per-client cap, connection rate and ban, read-IO
 *   bans, masks, idle entries forgotten;
 * - the Lua settings: values, option checks, config time only;
 * - MaxQPSIPRule: 1,000,000 distinct clients stay within the stated bound
 *   (64 shards x 2^15 slots x 40 B) and idle entries are all reclaimed.
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

#include "dnslb/pipeline/abuse.h"
#include "dnslb/core/config.h"
#include "lua/conf.h"
#include "rules/rules.h"

static struct sockaddr_in
v4(uint32_t a)
{
	struct sockaddr_in s;

	memset(&s, 0, sizeof(s));
	s.sin_family = AF_INET;
	s.sin_addr.s_addr = htonl(a);
	s.sin_port = htons(5353);
	return s;
}

static struct sockaddr_in6
v6(const char *text)
{
	struct sockaddr_in6 s;

	memset(&s, 0, sizeof(s));
	s.sin6_family = AF_INET6;
	assert_int_equal(inet_pton(AF_INET6, text, &s.sin6_addr), 1);
	return s;
}

#define SA(x) ((const struct sockaddr *)&(x))

/* ---- per-client outstanding table --------------------------------------------------- */

static uint32_t
xorshift(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

static void
test_coc_model(void **state)
{
	enum { NCLIENTS = 5000, STEPS = 200000, MAX = 4 };
	static uint32_t model[NCLIENTS];
	struct dlb_coc *t = dlb_coc_new(32, 64);
	uint32_t seed = 12345, clients = 0;
	uint64_t total = 0;
	size_t empty;

	assert_non_null(t);
	empty = dlb_coc_memory(t);
	memset(model, 0, sizeof(model));
	for (int step = 0; step < STEPS; step++) {
		uint32_t k = xorshift(&seed) % NCLIENTS;
		struct sockaddr_in a = v4(0x0a000000u + k);

		if (xorshift(&seed) % 2 == 0) {
			enum dlb_coc_result r = dlb_coc_acquire(t, SA(a), MAX);

			if (model[k] >= MAX) {
				assert_int_equal(r, DLB_COC_OVER);
			} else {
				assert_int_equal(r, DLB_COC_ACQUIRED);
				clients += model[k] == 0;
				model[k]++;
				total++;
			}
		} else if (model[k] > 0) {
			dlb_coc_release(t, SA(a));
			model[k]--;
			clients -= model[k] == 0;
			total--;
		}
		assert_int_equal(dlb_coc_get(t, SA(a)), model[k]);
		if (step % 64 == 0 || step == STEPS - 1) {
			assert_int_equal(dlb_coc_check(t), 0);
			assert_int_equal(dlb_coc_clients(t), clients);
			assert_int_equal(dlb_coc_total(t), total);
		}
	}
	/* everything back: no entry and no table left */
	for (uint32_t k = 0; k < NCLIENTS; k++) {
		struct sockaddr_in a = v4(0x0a000000u + k);

		while (model[k] > 0) {
			dlb_coc_release(t, SA(a));
			model[k]--;
		}
	}
	assert_int_equal(dlb_coc_check(t), 0);
	assert_int_equal(dlb_coc_clients(t), 0);
	assert_int_equal(dlb_coc_total(t), 0);
	assert_int_equal(dlb_coc_memory(t), empty);
	dlb_coc_free(t);
}

static void
test_coc_masks(void **state)
{
	struct dlb_coc *t = dlb_coc_new(24, 64);
	struct sockaddr_in a = v4(0xc0000201), b = v4(0xc00002fe), other = v4(0xc0000301);
	struct sockaddr_in6 mapped = v6("::ffff:192.0.2.7"), x = v6("2001:db8:1:2::1"),
			    y = v6("2001:db8:1:2:ffff::9"), z = v6("2001:db8:1:3::1");

	assert_non_null(t);
	/* 192.0.2.1 and 192.0.2.254 are one /24, and so is its v4-mapped form */
	assert_int_equal(dlb_coc_acquire(t, SA(a), 3), DLB_COC_ACQUIRED);
	assert_int_equal(dlb_coc_acquire(t, SA(b), 3), DLB_COC_ACQUIRED);
	assert_int_equal(dlb_coc_acquire(t, SA(mapped), 3), DLB_COC_ACQUIRED);
	assert_int_equal(dlb_coc_acquire(t, SA(a), 3), DLB_COC_OVER);
	assert_int_equal(dlb_coc_acquire(t, SA(other), 3), DLB_COC_ACQUIRED);
	assert_int_equal(dlb_coc_get(t, SA(b)), 3);
	/* one /64 for x and y, another for z */
	assert_int_equal(dlb_coc_acquire(t, SA(x), 1), DLB_COC_ACQUIRED);
	assert_int_equal(dlb_coc_acquire(t, SA(y), 1), DLB_COC_OVER);
	assert_int_equal(dlb_coc_acquire(t, SA(z), 1), DLB_COC_ACQUIRED);
	/* cap 0: everything is over */
	{
		struct sockaddr_in one = v4(1);

		assert_int_equal(dlb_coc_acquire(t, SA(one), 0), DLB_COC_OVER);
	}
	assert_int_equal(dlb_coc_clients(t), 4);
	assert_int_equal(dlb_coc_total(t), 6);
	assert_int_equal(dlb_coc_check(t), 0);
	dlb_coc_release(t, SA(mapped));
	dlb_coc_release(t, SA(a));
	dlb_coc_release(t, SA(b));
	dlb_coc_release(t, SA(other));
	dlb_coc_release(t, SA(y));
	dlb_coc_release(t, SA(z));
	assert_int_equal(dlb_coc_clients(t), 0);
	assert_int_equal(dlb_coc_check(t), 0);
	dlb_coc_free(t);
}

/* A flood of distinct clients grows the table to its bound, then it fails open. */
static void
test_coc_bounded(void **state)
{
	struct dlb_coc *t = dlb_coc_new(32, 128);
	uint32_t n = DLB_COC_MAX_SLOTS, acquired = 0, untracked = 0;

	assert_non_null(t);
	for (uint32_t i = 0; i < n; i++) {
		struct sockaddr_in a = v4(0x0b000000u + i);
		enum dlb_coc_result r = dlb_coc_acquire(t, SA(a), 10);

		acquired += r == DLB_COC_ACQUIRED;
		untracked += r == DLB_COC_UNTRACKED;
	}
	assert_true(dlb_coc_memory(t) <= sizeof(void *) * 8 +
					   (size_t)DLB_COC_MAX_SLOTS * DLB_COC_ENTRY_BYTES);
	assert_int_equal(acquired, DLB_COC_MAX_SLOTS / 4 * 3);
	assert_int_equal(untracked, n - acquired);
	assert_int_equal(dlb_coc_check(t), 0);
	for (uint32_t i = 0; i < n; i++) {
		struct sockaddr_in a = v4(0x0b000000u + i);

		if (dlb_coc_get(t, SA(a)) > 0)
			dlb_coc_release(t, SA(a));
	}
	assert_int_equal(dlb_coc_clients(t), 0);
	assert_int_equal(dlb_coc_check(t), 0);
	dlb_coc_free(t);
}

/* ---- TCP client table --------------------------------------------------------------- */

static struct dlb_config *
tcp_cfg(void)
{
	struct dlb_config *cfg = dlb_config_new();

	assert_non_null(cfg);
	dlb_tcp_clients_reset();
	return cfg;
}

static void
test_tcp_per_client_cap(void **state)
{
	struct dlb_config *cfg = tcp_cfg();
	struct sockaddr_in a = v4(0x7f000001), b = v4(0x7f000002);
	bool counted;
	uint32_t prior;

	cfg->max_tcp_conns_per_client = 2;
	assert_int_equal(dlb_tcp_client_admit(cfg, SA(a), 100, &counted, &prior), DLB_TCP_ADMIT_OK);
	assert_true(counted);
	assert_int_equal(prior, 0);
	assert_int_equal(dlb_tcp_client_admit(cfg, SA(a), 100, &counted, &prior), DLB_TCP_ADMIT_OK);
	assert_int_equal(prior, 1);
	assert_int_equal(dlb_tcp_client_admit(cfg, SA(a), 100, &counted, &prior),
			 DLB_TCP_ADMIT_TOO_MANY);
	assert_false(counted);
	assert_int_equal(dlb_tcp_client_admit(cfg, SA(b), 100, &counted, &prior), DLB_TCP_ADMIT_OK);
	dlb_tcp_client_release(cfg, SA(a), 101);
	assert_int_equal(dlb_tcp_client_admit(cfg, SA(a), 101, &counted, &prior), DLB_TCP_ADMIT_OK);
	/* every connection closed: nothing left to remember */
	dlb_tcp_client_release(cfg, SA(a), 102);
	dlb_tcp_client_release(cfg, SA(a), 102);
	dlb_tcp_client_release(cfg, SA(b), 102);
	assert_int_equal(dlb_tcp_clients_count(), 0);
	/* the mask aggregates: 127.0.0.1 and .2 are one /24 */
	cfg->tcp_conns_mask_v4 = 24;
	assert_int_equal(dlb_tcp_client_admit(cfg, SA(a), 103, &counted, &prior), DLB_TCP_ADMIT_OK);
	assert_int_equal(dlb_tcp_client_admit(cfg, SA(b), 103, &counted, &prior), DLB_TCP_ADMIT_OK);
	assert_int_equal(dlb_tcp_client_admit(cfg, SA(a), 103, &counted, &prior),
			 DLB_TCP_ADMIT_TOO_MANY);
	dlb_tcp_clients_reset();
	dlb_config_free(cfg);
}

static void
test_tcp_rate_and_ban(void **state)
{
	struct dlb_config *cfg = tcp_cfg();
	struct sockaddr_in a = v4(0xc0000201), b = v4(0xc0000202);
	double now = 1000;
	bool counted;
	uint32_t prior;
	int ok = 0;

	cfg->max_tcp_conn_rate_per_client = 2;	/* per second, over 1 minute: 120 */
	cfg->tcp_conn_rate_interval = 1;
	cfg->tcp_ban_duration_rate = 10;
	for (int i = 0; i < 200; i++) {
		enum dlb_tcp_admit r = dlb_tcp_client_admit(cfg, SA(a), now, &counted, &prior);

		if (r != DLB_TCP_ADMIT_OK) {
			assert_int_equal(r, DLB_TCP_ADMIT_RATE);
			break;
		}
		ok++;
	}
	assert_int_equal(ok, 120);
	/* banned for 10 s, whatever the rate does; another client is not */
	assert_int_equal(dlb_tcp_client_admit(cfg, SA(a), now + 1, &counted, &prior),
			 DLB_TCP_ADMIT_BANNED);
	assert_true(dlb_tcp_client_banned(cfg, SA(a), now + 9.9));
	assert_int_equal(dlb_tcp_client_admit(cfg, SA(b), now + 1, &counted, &prior),
			 DLB_TCP_ADMIT_OK);
	/* after the ban, with the window still full: over again, banned again */
	assert_int_equal(dlb_tcp_client_admit(cfg, SA(a), now + 10.5, &counted, &prior),
			 DLB_TCP_ADMIT_RATE);
	/* two windows later the past no longer counts */
	assert_int_equal(dlb_tcp_client_admit(cfg, SA(a), now + 200, &counted, &prior),
			 DLB_TCP_ADMIT_OK);
	/* idle entries are forgotten by the sweeps (one shard per second) */
	for (int i = 0; i < 64; i++)
		dlb_tcp_clients_maintain(cfg, now + 400 + i);
	assert_int_equal(dlb_tcp_clients_count(), 0);
	assert_int_equal(dlb_tcp_clients_memory(), 0);
	dlb_config_free(cfg);
}

static void
test_tcp_read_io_ban(void **state)
{
	struct dlb_config *cfg = tcp_cfg();
	struct sockaddr_in6 a = v6("2001:db8::1"), same = v6("2001:db8::2"), other = v6("2001:db8:1::1");
	bool counted;
	uint32_t prior;

	cfg->tcp_conns_mask_v6 = 64;
	dlb_tcp_client_ban(cfg, SA(a), 50, 60);
	assert_int_equal(dlb_tcp_client_admit(cfg, SA(same), 55, &counted, &prior),
			 DLB_TCP_ADMIT_BANNED);
	assert_int_equal(dlb_tcp_client_admit(cfg, SA(other), 55, &counted, &prior),
			 DLB_TCP_ADMIT_OK);
	assert_false(counted);	/* no cap, no rate: nothing counted */
	assert_int_equal(dlb_tcp_client_admit(cfg, SA(a), 110.5, &counted, &prior),
			 DLB_TCP_ADMIT_OK);
	assert_int_equal(dlb_tcp_clients_count(), 0);	/* the expired ban went with it */
	dlb_tcp_clients_reset();
	dlb_config_free(cfg);
}

/* ---- the Lua settings ------------------------------------------------------------------ */

static void
test_lua_settings(void **state)
{
	struct dlb_config *cfg = dlb_config_new();
	struct dlb_lua_conf *lc;
	char err[512];

	assert_non_null(cfg);
	/* the defaults: dnsdist 2.0's, and the dnslb ones */
	assert_int_equal(cfg->max_tcp_conn_rate_per_client, 0);
	assert_int_equal(cfg->tcp_conn_rate_interval, 5);
	assert_int_equal(cfg->tcp_ban_duration_rate, 10);
	assert_int_equal(cfg->max_tcp_read_ios_per_query, 50);
	assert_int_equal(cfg->tcp_ban_duration_read_ios, 60);
	assert_int_equal(cfg->tcp_overload_threshold, 90);
	assert_int_equal(cfg->max_tcp_out_bytes, 256 * 1024);
	assert_int_equal(cfg->max_outstanding_per_client, 0);
	lc = dlb_lua_conf_new(cfg, DLB_LUA_PHASE_CONFIG);
	assert_non_null(lc);
	assert_int_equal(dlb_lua_conf_load_string(lc,
		"setMaxTCPConnectionRatePerClient(7) setTCPConnectionRateInterval(2)\n"
		"setBanDurationForExceedingTCPTLSRate(30) setMaxTCPReadIOsPerQuery(9)\n"
		"setBanDurationForExceedingMaxReadIOsPerQuery(0) setTCPConnectionsMaskV4(24)\n"
		"setTCPConnectionsMaskV6(56) setTCPConnectionsOverloadThreshold(0)\n"
		"setMaxTCPOutputBufferSize(100000)\n"
		"setMaxOutstandingPerClient(12, {action='ServFail', maskV4=16, maskV6=48})\n",
		"=t", err, sizeof(err)), 0);
	assert_int_equal(cfg->max_tcp_conn_rate_per_client, 7);
	assert_int_equal(cfg->tcp_conn_rate_interval, 2);
	assert_int_equal(cfg->tcp_ban_duration_rate, 30);
	assert_int_equal(cfg->max_tcp_read_ios_per_query, 9);
	assert_int_equal(cfg->tcp_ban_duration_read_ios, 0);
	assert_int_equal(cfg->tcp_conns_mask_v4, 24);
	assert_int_equal(cfg->tcp_conns_mask_v6, 56);
	assert_int_equal(cfg->tcp_overload_threshold, 0);
	assert_int_equal(cfg->max_tcp_out_bytes, 100000);
	assert_int_equal(cfg->max_outstanding_per_client, 12);
	assert_int_equal(cfg->oc_action, DLB_OC_SERVFAIL);
	assert_int_equal(cfg->oc_mask_v4, 16);
	assert_int_equal(cfg->oc_mask_v6, 48);
	/* bad values raise */
	assert_int_not_equal(dlb_lua_conf_load_string(lc, "setTCPConnectionsMaskV4(33)", "=t", err,
						      sizeof(err)), 0);
	assert_non_null(strstr(err, "out of range"));
	assert_int_not_equal(dlb_lua_conf_load_string(lc,
		"setMaxOutstandingPerClient(1, {action='nxdomain'})", "=t", err, sizeof(err)), 0);
	assert_non_null(strstr(err, "'action' must be"));
	assert_int_not_equal(dlb_lua_conf_load_string(lc, "setMaxTCPOutputBufferSize(1000)", "=t",
						      err, sizeof(err)), 0);
	/* config time only */
	dlb_lua_conf_set_phase(lc, DLB_LUA_PHASE_RUNNING);
	assert_int_not_equal(dlb_lua_conf_load_string(lc, "setMaxOutstandingPerClient(3)", "=t",
						      err, sizeof(err)), 0);
	assert_non_null(strstr(err, "setMaxOutstandingPerClient cannot be altered at runtime"));
	assert_int_not_equal(dlb_lua_conf_load_string(lc, "setMaxTCPReadIOsPerQuery(3)", "=t",
						      err, sizeof(err)), 0);
	assert_non_null(strstr(err, "cannot be altered at runtime"));
	assert_int_equal(cfg->max_outstanding_per_client, 12);
	assert_int_equal(cfg->max_tcp_read_ios_per_query, 9);
	dlb_lua_conf_free(lc);
	dlb_rules_shutdown();
	dlb_config_free(cfg);
}

/* ---- MaxQPSIPRule at scale ------------------------------------------------------------- */

#define QPS_BOUND ((size_t)64 * 32768 * 40)	/* rules/qps.c: shards x max slots x entry */

static void
test_qps_ip_million_clients(void **state)
{
	struct dlb_qps_ip *q = dlb_qps_ip_new(10, 32, 64, 10, 60, 0, 1);
	double now = 5000;
	size_t over = 0, removed = 0, mem;

	assert_non_null(q);
	for (uint32_t i = 0; i < 1000000; i++) {
		struct sockaddr_in a = v4(0x0a000000u + i);

		over += dlb_qps_ip_over(q, SA(a), now + i * 1e-6);
	}
	assert_int_equal(over, 0);	/* one query each: all under their rate */
	assert_int_equal(dlb_qps_ip_count(q), 1000000);
	mem = dlb_qps_ip_memory(q);
	print_message("MaxQPSIPRule: 1,000,000 clients in %zu bytes (%.1f B/client, bound %zu)\n",
		      mem, (double)mem / 1e6, QPS_BOUND);
	assert_true(mem <= QPS_BOUND + 65536);
	/* a client seen again keeps its bucket: the 11th query in a second is over */
	{
		struct sockaddr_in seven = v4(0x0a000007);

		for (int k = 0; k < 10; k++)
			assert_false(dlb_qps_ip_over(q, SA(seven), now + 1));
		assert_true(dlb_qps_ip_over(q, SA(seven), now + 1));
	}
	/* not yet idle for 60 s: nothing goes */
	assert_int_equal(dlb_qps_ip_cleanup(q, now + 30), 0);
	/* idle past the expiration: every entry goes, and the tables with them */
	removed = dlb_qps_ip_cleanup(q, now + 100);
	assert_int_equal(removed, 1000000);
	assert_int_equal(dlb_qps_ip_count(q), 0);
	assert_true(dlb_qps_ip_memory(q) < 65536);
	dlb_qps_ip_free(q);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_coc_model),
		cmocka_unit_test(test_coc_masks),
		cmocka_unit_test(test_coc_bounded),
		cmocka_unit_test(test_tcp_per_client_cap),
		cmocka_unit_test(test_tcp_rate_and_ban),
		cmocka_unit_test(test_tcp_read_io_ban),
		cmocka_unit_test(test_lua_settings),
		cmocka_unit_test(test_qps_ip_million_clients),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
