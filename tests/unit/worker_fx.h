/*
 * worker_fx.h - a real worker (dnslb/worker.h) over a config with one
 * backend, not started: the unit tests of the data plane (test_backend.c,
 * test_forward.c, test_query.c) drive its loop themselves and replace its sinks.
 *
 * Header-only (static inline). Include after <cmocka.h>.
 */
#ifndef DNSLB_TESTS_UNIT_WORKER_FX_H
#define DNSLB_TESTS_UNIT_WORKER_FX_H

#include <netinet/in.h>
#include <stdio.h>

#include "dnslb/core/config.h"
#include "dnslb/core/rcu.h"
#include "dnslb/worker.h"

/*
 * A new config whose one backend is @be_addr, with that backend's UDP
 * timeout @udp_timeout_ms (0: the default) and setMaxUDPOutstanding
 * @max_outstanding (0: the default). A test may change it before
 * wfx_worker_on.
 */
static inline struct dlb_config *
wfx_config(const struct sockaddr_in *be_addr, int udp_timeout_ms, int max_outstanding)
{
	struct dlb_config *cfg = dlb_config_new();
	struct dlb_backend *be = dlb_backend_new();

	cfg->workers = 1;
	if (max_outstanding > 0)
		cfg->max_udp_outstanding = max_outstanding;
	memcpy(&be->addr, be_addr, sizeof(*be_addr));
	be->addrlen = sizeof(*be_addr);
	snprintf(be->addr_text, sizeof(be->addr_text), "127.0.0.1:%u", ntohs(be_addr->sin_port));
	be->udp_timeout_ms = udp_timeout_ms;
	assert_int_equal(dlb_config_add_backend(cfg, be), 0);
	return cfg;
}

/* A worker over @cfg (published first: w->snap set): its backend sockets open,
 * its RCU record registered. */
static inline struct dlb_worker *
wfx_worker_on(struct dlb_config *cfg)
{
	struct dlb_worker *w;

	assert_int_equal(dlb_config_publish(cfg, NULL), 0);
	w = dlb_worker_new(0, cfg);

	assert_non_null(w);
	/* the tests call into the pipeline outside a loop iteration too */
	w->snap = dlb_config_snapshot(cfg);
	assert_int_equal(dlb_rcu_register(&w->rcu), 0);
	return w;
}

/* wfx_config, then wfx_worker_on; the config in *@cfgp. */
static inline struct dlb_worker *
wfx_worker(struct dlb_config **cfgp, const struct sockaddr_in *be_addr, int udp_timeout_ms,
	   int max_outstanding)
{
	*cfgp = wfx_config(be_addr, udp_timeout_ms, max_outstanding);
	return wfx_worker_on(*cfgp);
}

static inline void
wfx_free(struct dlb_worker *w, struct dlb_config *cfg)
{
	dlb_rcu_unregister(&w->rcu);
	dlb_worker_free(w);
	dlb_config_free(cfg);
}

/* main() of such a test file: what every worker needs once per process. */
#define WFX_RUN(tests)                          \
	(dlb_rcu_init(), dlb_worker_clock_init(), \
	 cmocka_run_group_tests(tests, NULL, NULL))

#endif
