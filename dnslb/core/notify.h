/*
 * notify.h - the service manager's readiness protocol (sd_notify).
 *
 * Under systemd with Type=notify, $NOTIFY_SOCKET names a datagram socket:
 * dnslb sends READY=1 once every worker serves, RELOADING=1 then READY=1
 * around a reload, STOPPING=1 when it starts to exit, and WATCHDOG=1 at half
 * the unit's WatchdogSec= when the unit sets one. Without $NOTIFY_SOCKET
 * every call is a no-op. Thread: the main thread only.
 */
#ifndef DNSLB_NOTIFY_H
#define DNSLB_NOTIFY_H

#include <ev.h>

/** READY=1, with STATUS=@status (NULL: none). */
void dlb_notify_ready(const char *status);
/** RELOADING=1 (with MONOTONIC_USEC, as systemd 253+'s notify-reload wants). */
void dlb_notify_reloading(void);
/** STOPPING=1. */
void dlb_notify_stopping(void);
/** Start sending WATCHDOG=1 from @loop if the unit asks for it (WatchdogSec=). */
void dlb_notify_watchdog_start(struct ev_loop *loop);
void dlb_notify_watchdog_stop(struct ev_loop *loop);

#endif
