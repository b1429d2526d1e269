/*
 * notify.c - sd_notify(3) messages to the service manager (notify.h).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "dnslb/core/log.h"
#include "dnslb/core/notify.h"

static ev_timer watchdog;
static bool watchdog_on;

static void
notify(const char *msg)
{
	int rc = sd_notify(0, msg);

	/* 0: no $NOTIFY_SOCKET, not run by a service manager: nothing to say */
	if (rc < 0)
		dlb_log_ratelimited(DLB_LOG_WARN, "Unable to notify the service manager: %s",
				    strerror(-rc));
}

void
dlb_notify_ready(const char *status)
{
	char msg[256];

	if (status != NULL)
		snprintf(msg, sizeof(msg), "READY=1\nSTATUS=%s", status);
	else
		snprintf(msg, sizeof(msg), "READY=1");
	notify(msg);
}

void
dlb_notify_reloading(void)
{
	struct timespec ts;
	char msg[96];

	clock_gettime(CLOCK_MONOTONIC, &ts);
	snprintf(msg, sizeof(msg), "RELOADING=1\nMONOTONIC_USEC=%llu",
		 (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000);
	notify(msg);
}

void
dlb_notify_stopping(void)
{
	notify("STOPPING=1");
}

static void
watchdog_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)w;
	(void)revents;
	/*
	 * Sent from the main loop, which also runs the health checks, the
	 * maintenance tick and the console: a main thread that hangs stops the
	 * pings and systemd restarts the service.
	 */
	notify("WATCHDOG=1");
}

void
dlb_notify_watchdog_start(struct ev_loop *loop)
{
	uint64_t usec = 0;

	if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0)
		return;
	ev_timer_init(&watchdog, watchdog_cb, 0., (double)usec / 2e6);
	ev_timer_again(loop, &watchdog);
	watchdog_on = true;
	notify("WATCHDOG=1");
}

void
dlb_notify_watchdog_stop(struct ev_loop *loop)
{
	if (watchdog_on)
		ev_timer_stop(loop, &watchdog);
	watchdog_on = false;
}
