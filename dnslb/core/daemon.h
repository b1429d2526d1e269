/*
 * daemon.h - what the control plane (console, web server, carbon, metrics)
 * needs to see of the running daemon: the config, the workers, the main loop
 * and the current config Lua state, plus the services that run on the main
 * loop.
 *
 * Thread: main only. main.c fills dlb_daemon before the workers start and
 * keeps `lc` current across reloads; outside the daemon (unit tests,
 * --check-config) every field is zero/NULL.
 */
#ifndef DNSLB_DAEMON_H
#define DNSLB_DAEMON_H

#include <stdbool.h>
#include <stddef.h>

struct dlb_config;
struct dlb_worker;
struct dlb_lua_conf;
struct dlb_health;
struct dlb_rcu_thread;
struct dlb_redis;
struct ev_loop;

struct dlb_daemon {
	struct dlb_config *cfg;		/* the running configuration */
	struct dlb_worker *const *workers;	/* [nworkers] */
	int nworkers;
	struct ev_loop *loop;		/* the main thread's loop */
	struct dlb_lua_conf *lc;	/* the config state (replaced by reloads) */
	struct dlb_health *health;
	struct dlb_rcu_thread *rcu;	/* the main thread's RCU record (cache expunges) */
	struct dlb_redis *redis_ctl;	/* setRedis: the main thread's control connection */
	struct dlb_redis *redis_sub;	/* setRedis: the main thread's pub/sub connection */
	double start;			/* CLOCK_MONOTONIC seconds at startup */
	double start_wall;		/* time(NULL) at startup */
	bool running;			/* the workers run: the loop is live */
};

extern struct dlb_daemon dlb_daemon;

/**
 * A control-plane service (console server, web server, carbon sender) that
 * runs on the main loop. A module registers it when its Lua functions are
 * registered (any number of times: the same pointer is kept once); main.c
 * starts every registered service once the workers run, and stops them
 * before the loop goes. @start runs even when the config did not ask for
 * the service: it then does nothing and returns 0.
 */
struct dlb_service {
	const char *name;
	/** @return 0, or -1 with a message in @err (the daemon then exits 1). */
	int (*start)(struct ev_loop *loop, char *err, size_t errlen);
	void (*stop)(void);
};

void dlb_daemon_add_service(const struct dlb_service *s);
/** Start every service, in registration order. @return 0, or -1 with @err. */
int dlb_daemon_start_services(char *err, size_t errlen);
/** Stop the services started, in reverse order. */
void dlb_daemon_stop_services(void);

/** Monotonic seconds (CLOCK_MONOTONIC). */
double dlb_daemon_now(void);

#endif
