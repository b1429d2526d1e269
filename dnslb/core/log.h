/*
 * log.h - leveled logging to stderr (and syslog unless disabled).
 * Thread: any. Never call once per packet: use dlb_log_ratelimited() on the hot path.
 */
#ifndef DNSLB_LOG_H
#define DNSLB_LOG_H

#include <stdbool.h>

enum dlb_log_level {
	DLB_LOG_ERR = 0,
	DLB_LOG_WARN,
	DLB_LOG_INFO,
	DLB_LOG_DEBUG,
};

/** Configure the sinks. @syslog: also log to syslog (daemon facility). */
void dlb_log_init(bool use_syslog, bool verbose);
void dlb_log_set_verbose(bool verbose);
bool dlb_log_verbose(void);
/** --log-timestamps: the local time ("%b %d %H:%M:%S ") before each stdout line. */
void dlb_log_set_timestamps(bool on);
/**
 * setStructuredLogging: logfmt lines (msg="..." <level_key>="Info" ts="...").
 * @level_key, @time_format ("numeric" or "ISO8601"): NULL keeps the current.
 * Returns -1 (and changes nothing) for a bad key or format.
 */
int dlb_log_set_structured(bool on, const char *level_key, const char *time_format);
void dlb_log(enum dlb_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3), cold));

/** Log at most once per second per call site (@last holds the site's state). */
#define dlb_log_ratelimited(lvl, ...) do {				\
	static long dlb__last_;						\
	if (dlb_log_ratelimit_ok(&dlb__last_))				\
		dlb_log((lvl), __VA_ARGS__);				\
} while (0)
bool dlb_log_ratelimit_ok(long *last) __attribute__((cold));

#define dlb_err(...)	dlb_log(DLB_LOG_ERR, __VA_ARGS__)
#define dlb_warn(...)	dlb_log(DLB_LOG_WARN, __VA_ARGS__)
#define dlb_info(...)	dlb_log(DLB_LOG_INFO, __VA_ARGS__)
#define dlb_debug(...)	dlb_log(DLB_LOG_DEBUG, __VA_ARGS__)

#endif
