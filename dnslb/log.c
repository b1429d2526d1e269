/*
 * log.c - leveled logging. Lines go to stdout (dnsdist logs to stdout with
 * --disable-syslog) and, unless disabled, to syslog.
 */
#include "dnslb/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <syslog.h>
#include <time.h>

static bool log_syslog;
static bool log_verbose;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

void
dlb_log_init(bool use_syslog, bool verbose)
{
	log_syslog = use_syslog;
	log_verbose = verbose;
	if (use_syslog)
		openlog("dnslb", LOG_PID, LOG_DAEMON);
}

void
dlb_log_set_verbose(bool verbose)
{
	log_verbose = verbose;
}

bool
dlb_log_verbose(void)
{
	return log_verbose;
}

void
dlb_log(enum dlb_log_level lvl, const char *fmt, ...)
{
	static const int prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG };
	char buf[1024];
	va_list ap;

	if (lvl == DLB_LOG_DEBUG && !log_verbose)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&log_lock);
	fprintf(stdout, "%s\n", buf);
	fflush(stdout);
	pthread_mutex_unlock(&log_lock);
	if (log_syslog)
		syslog(prio[lvl], "%s", buf);
}

bool
dlb_log_ratelimit_ok(long *last)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	if (__atomic_load_n(last, __ATOMIC_RELAXED) == ts.tv_sec)
		return false;
	__atomic_store_n(last, ts.tv_sec, __ATOMIC_RELAXED);
	return true;
}
