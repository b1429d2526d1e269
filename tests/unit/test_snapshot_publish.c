/*
 * test_snapshot_publish.c - configuration snapshots (dnslb/core/config.c,
 * docs/architecture.md#publication): built from the builder values,
 * published with one pointer swap, read by another thread inside its epoch
 * sections, retired through the epoch; a reload's prepared snapshot that
 * fails validation publishes nothing. Also run under ThreadSanitizer
 * (tests/run-all).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/core/config.h"
#include "dnslb/core/rcu.h"

#define PUBLICATIONS 2000

static void
test_build_and_publish(void **state)
{
	struct dlb_config *cfg = dlb_config_new();
	const struct dlb_snapshot *s;

	(void)state;
	assert_non_null(cfg);
	assert_null(dlb_config_snapshot(cfg));
	cfg->set.udp_timeout_ms = 1234;
	snprintf(cfg->set.failover_pool, sizeof(cfg->set.failover_pool), "spare");
	dlb_config_get_pool(cfg, "p")->policy = DLB_POLICY_CHASHED;
	assert_int_equal(dlb_config_publish(cfg, NULL), 0);
	s = dlb_config_snapshot(cfg);
	assert_non_null(s);
	assert_int_equal(s->gen, 1);
	assert_ptr_equal(s->live, cfg);
	assert_int_equal(s->set.udp_timeout_ms, 1234);
	assert_string_equal(s->set.failover_pool, "spare");
	assert_int_equal(s->acl.n, cfg->acl.n);
	assert_int_equal(dlb_snapshot_pool_policy(s, dlb_config_find_pool(cfg, "p")),
			 DLB_POLICY_CHASHED);
	assert_int_equal(dlb_snapshot_pool_policy(s, dlb_config_find_pool(cfg, "")),
			 DLB_POLICY_LEAST_OUTSTANDING);

	/* the builder changes; the published snapshot does not, until published */
	cfg->set.udp_timeout_ms = 99;
	snprintf(cfg->set.failover_pool, sizeof(cfg->set.failover_pool), "other");
	assert_int_equal(s->set.udp_timeout_ms, 1234);
	assert_string_equal(s->set.failover_pool, "spare");
	assert_int_equal(dlb_config_publish(cfg, NULL), 0);	/* the old one freed at once */
	s = dlb_config_snapshot(cfg);
	assert_int_equal(s->gen, 2);
	assert_int_equal(s->set.udp_timeout_ms, 99);
	assert_string_equal(s->set.failover_pool, "other");
	dlb_config_free(cfg);
}

/* ---- one reader thread against a publishing main thread ------------------- */

struct reader {
	struct dlb_config *cfg;
	bool stop;		/* atomic */
	uint64_t reads;		/* atomic */
	uint64_t last_gen;
	int torn;		/* snapshots whose fields disagree */
	int backwards;		/* generations seen going back */
};

static void *
reader_main(void *arg)
{
	struct reader *r = arg;
	struct dlb_rcu_thread rt;

	if (dlb_rcu_register(&rt) != 0)
		return NULL;
	while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
		const struct dlb_snapshot *s;

		dlb_rcu_enter(&rt);
		s = dlb_config_snapshot(r->cfg);
		/* the publisher keeps these in step: a torn copy would not be */
		if (s->set.udp_timeout_ms != s->set.tcp_recv_timeout * 10 ||
		    strtoul(s->set.failover_pool + 1, NULL, 10) != (unsigned long)s->set.tcp_recv_timeout ||
		    s->pools[0].policy != s->set.tcp_recv_timeout % 3)
			r->torn++;
		if (s->gen < r->last_gen)
			r->backwards++;
		r->last_gen = s->gen;
		__atomic_fetch_add(&r->reads, 1, __ATOMIC_RELAXED);
		dlb_rcu_exit(&rt);
		dlb_rcu_poll(&rt);
	}
	dlb_rcu_unregister(&rt);
	return NULL;
}

static void
set_values(struct dlb_config *cfg, int k)
{
	cfg->set.tcp_recv_timeout = k;
	cfg->set.udp_timeout_ms = k * 10;
	snprintf(cfg->set.failover_pool, sizeof(cfg->set.failover_pool), "p%d", k);
	cfg->pools[0]->policy = k % 3;
}

static void
test_publish_while_reading(void **state)
{
	struct dlb_config *cfg = dlb_config_new();
	struct dlb_rcu_thread main_rt;
	struct reader r = { .cfg = cfg };
	pthread_t th;

	(void)state;
	assert_non_null(cfg);
	assert_int_equal(dlb_rcu_register(&main_rt), 0);
	set_values(cfg, 1);
	assert_int_equal(dlb_config_publish(cfg, NULL), 0);
	assert_int_equal(pthread_create(&th, NULL, reader_main, &r), 0);
	while (__atomic_load_n(&r.reads, __ATOMIC_RELAXED) == 0)
		sched_yield();	/* the publications below overlap its reads */
	for (int k = 2; k < PUBLICATIONS; k++) {
		set_values(cfg, k);
		assert_int_equal(dlb_config_publish(cfg, &main_rt), 0);
		dlb_rcu_poll(&main_rt);	/* reclaim what the reader has left */
	}
	__atomic_store_n(&r.stop, true, __ATOMIC_RELEASE);
	assert_int_equal(pthread_join(th, NULL), 0);
	dlb_rcu_barrier(&main_rt);
	assert_int_equal(main_rt.rec->n_pending, 0);	/* every old snapshot reclaimed */
	assert_true(r.reads > 0);
	assert_int_equal(r.torn, 0);
	assert_int_equal(r.backwards, 0);
	assert_int_equal(dlb_config_snapshot(cfg)->gen, PUBLICATIONS - 1);
	dlb_rcu_unregister(&main_rt);
	dlb_config_free(cfg);
}

/* ---- reloads: prepare, adopt ---------------------------------------------- */

static void
test_failed_validation_publishes_nothing(void **state)
{
	struct dlb_config *cfg = dlb_config_new(), *ncfg = dlb_config_new();
	const struct dlb_snapshot *before;
	struct dlb_reload_plan plan;
	char err[256] = "";

	(void)state;
	assert_int_equal(dlb_config_publish(cfg, NULL), 0);
	before = dlb_config_snapshot(cfg);
	assert_null(dlb_config_plan_reload(cfg, ncfg, &plan));
	/* more Lua policies than a reload may bring */
	ncfg->set.nlua_policies = DLB_MAX_LUA_POLICIES / 2 + 1;
	ncfg->set.udp_timeout_ms = 7;
	assert_null(dlb_config_adopt_prepare(cfg, ncfg, &plan, err, sizeof(err)));
	assert_non_null(strstr(err, "too many Lua policies"));
	assert_ptr_equal(dlb_config_snapshot(cfg), before);
	assert_int_equal(before->gen, 1);
	assert_int_equal(before->set.udp_timeout_ms, 2000);
	assert_int_equal(cfg->set.udp_timeout_ms, 2000);
	dlb_config_free(ncfg);
	dlb_config_free(cfg);
}

static void
test_adopt_publishes_once(void **state)
{
	struct dlb_config *cfg = dlb_config_new(), *ncfg = dlb_config_new();
	struct dlb_snapshot *prepared;
	const struct dlb_snapshot *s;
	struct dlb_reload_plan plan;
	struct dlb_netmask nm;
	char err[256] = "";

	(void)state;
	assert_int_equal(dlb_config_publish(cfg, NULL), 0);
	ncfg->set.udp_timeout_ms = 7;
	ncfg->set.policy = DLB_POLICY_ROUNDROBIN;
	dlb_config_get_pool(ncfg, "q")->policy = DLB_POLICY_WRANDOM;
	dlb_nmg_clear(&ncfg->acl);
	assert_int_equal(dlb_netmask_parse("192.0.2.0/24", &nm), 0);
	assert_int_equal(dlb_nmg_add(&ncfg->acl, &nm), 0);
	assert_null(dlb_config_plan_reload(cfg, ncfg, &plan));
	prepared = dlb_config_adopt_prepare(cfg, ncfg, &plan, err, sizeof(err));
	assert_non_null(prepared);
	/* prepared, not published: the pool exists, workers still read gen 1 */
	assert_non_null(dlb_config_find_pool(cfg, "q"));
	assert_int_equal(dlb_config_snapshot(cfg)->gen, 1);
	dlb_config_adopt(cfg, ncfg, &plan, prepared, NULL);
	s = dlb_config_snapshot(cfg);
	assert_ptr_equal(s, prepared);
	assert_int_equal(s->gen, 2);
	assert_int_equal(s->set.udp_timeout_ms, 7);
	assert_int_equal(s->acl.n, 1);
	assert_int_equal(dlb_snapshot_pool_policy(s, dlb_config_find_pool(cfg, "q")),
			 DLB_POLICY_WRANDOM);
	assert_int_equal(dlb_snapshot_pool_policy(s, dlb_config_find_pool(cfg, "")),
			 DLB_POLICY_ROUNDROBIN);
	/* the builder values follow */
	assert_int_equal(cfg->set.udp_timeout_ms, 7);
	assert_int_equal(cfg->acl.n, 1);
	dlb_config_free(ncfg);
	dlb_config_free(cfg);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_build_and_publish),
		cmocka_unit_test(test_publish_while_reading),
		cmocka_unit_test(test_failed_validation_publishes_nothing),
		cmocka_unit_test(test_adopt_publishes_once),
	};

	dlb_rcu_init();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
