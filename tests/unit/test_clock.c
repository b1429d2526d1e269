/*
 * test_clock.c - the park clock (dnslb/worker.c): the worker's clock in
 * dlb_frontend_park, read from the TSC between libev's updates.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <time.h>

#include "dnslb/worker.h"

static struct dlb_worker *
fake_worker(void)
{
	struct dlb_worker *w = calloc(1, sizeof(*w));

	assert_non_null(w);
	w->loop = ev_loop_new(0);
	assert_non_null(w->loop);
	return w;
}

static void
fake_worker_free(struct dlb_worker *w)
{
	ev_loop_destroy(w->loop);
	free(w);
}

static void
sleep_us(long us)
{
	struct timespec ts = { 0, us * 1000 };

	nanosleep(&ts, NULL);
}

/* Outside the park loop the worker's clock is libev's. */
static void
test_clock_off_is_libev(void **state)
{
	struct dlb_worker *w = fake_worker();

	(void)state;
	dlb_worker_clock_init();
	assert_false(w->tsc_clock);
	ev_now_update(w->loop);
	assert_true(dlb_worker_now(w) == ev_now(w->loop));
	fake_worker_free(w);
}

/*
 * Through many receives (ticks) over a few tens of milliseconds: never
 * backwards, never more than 100 us from the wall clock (ev_time), and
 * moving (a tick after a 300 us sleep reads at least 250 us later). Where
 * the park clock is off (no TSC clocksource) a tick is ev_now_update, which
 * passes the same checks.
 */
static void
test_clock_follows_real_time(void **state)
{
	struct dlb_worker *w = fake_worker();
	double last;

	(void)state;
	dlb_worker_clock_init();
	dlb_worker_clock_anchor(w);
	assert_true(w->tsc_clock == (dlb_tsc_seconds > 0));
	last = dlb_worker_now(w);
	for (int i = 0; i < 200; i++) {
		double before, now, after;

		sleep_us(i % 3 == 0 ? 300 : 20);
		before = ev_time();
		dlb_worker_clock_tick(w);
		now = dlb_worker_now(w);
		after = ev_time();
		assert_true(now >= last);
		if (now < before - 100e-6 || now > after + 100e-6)
			fail_msg("tick %d: %.6f outside [%.6f, %.6f] +- 100 us", i, now, before, after);
		if (i % 3 == 0 && now - last < 250e-6)
			fail_msg("tick %d: moved %.1f us after a 300 us sleep", i, (now - last) * 1e6);
		last = now;
	}
	dlb_worker_clock_release(w);
	assert_false(w->tsc_clock);
	fake_worker_free(w);
}

/* libev's own clock (the one timers run on) lags the park clock by at most
 * PARK_CLOCK_SYNC (1 ms) plus a tick's reading, and dlb_worker_clock_sync
 * brings it up to now. */
static void
test_clock_sync_updates_libev(void **state)
{
	struct dlb_worker *w = fake_worker();

	(void)state;
	dlb_worker_clock_init();
	if (dlb_tsc_seconds <= 0) {
		/* no usable TSC calibration (a loaded host): nothing to check */
		fake_worker_free(w);
		skip();
	}
	dlb_worker_clock_anchor(w);
	for (int i = 0; i < 50; i++) {
		sleep_us(100);
		dlb_worker_clock_tick(w);
		assert_true(dlb_worker_now(w) - ev_now(w->loop) < 1.5e-3);
	}
	sleep_us(500);
	dlb_worker_clock_tick(w);
	dlb_worker_clock_sync(w);
	assert_true(dlb_worker_now(w) - ev_now(w->loop) < 20e-6);
	assert_true(ev_now(w->loop) - dlb_worker_now(w) < 20e-6);
	dlb_worker_clock_release(w);
	fake_worker_free(w);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_clock_off_is_libev),
		cmocka_unit_test(test_clock_follows_real_time),
		cmocka_unit_test(test_clock_sync_updates_libev),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
