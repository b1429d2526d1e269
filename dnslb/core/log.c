/*
 * log.c - leveled logging. Lines go to stdout (dnsdist logs to stdout with
 * --disable-syslog) and, unless disabled, to syslog.
 *
 * When stdout is the journal (systemd sets $JOURNAL_STREAM to its device and
 * inode), each line starts with its syslog priority as "<N>" (sd-daemon(3)),
 * so `journalctl -p err` shows errors as errors. --log-timestamps puts the
 * local time in front of each stdout line, as dnsdist 1.8+ does; structured
 * logging (setStructuredLogging) writes logfmt instead.
 */
#include "dnslb/core/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

static bool log_syslog;
static bool log_verbose;
static bool log_journal;	/* stdout is the journal: "<N>" prefixes */
static bool log_timestamps;
static bool log_structured;
static char log_level_key[32] = "prio";
static bool log_iso8601;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

/* Is stdout the stream $JOURNAL_STREAM ("DEV:INODE") names? */
static bool
stdout_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (js == NULL || sscanf(js, "%llu:%llu", &dev, &ino) != 2)
		return false;
	if (fstat(STDOUT_FILENO, &st) != 0)
		return false;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void
dlb_log_init(bool use_syslog, bool verbose)
{
	log_syslog = use_syslog;
	log_verbose = verbose;
	log_journal = stdout_is_journal();
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
dlb_log_set_timestamps(bool on)
{
	log_timestamps = on;
}

int
dlb_log_set_structured(bool on, const char *level_key, const char *time_format)
{
	if (time_format != NULL && strcmp(time_format, "numeric") != 0 &&
	    strcmp(time_format, "ISO8601") != 0)
		return -1;
	if (level_key != NULL && (strlen(level_key) >= sizeof(log_level_key) ||
				  strpbrk(level_key, " =\"") != NULL || *level_key == '\0'))
		return -1;
	pthread_mutex_lock(&log_lock);
	log_structured = on;
	if (level_key != NULL)
		snprintf(log_level_key, sizeof(log_level_key), "%s", level_key);
	if (time_format != NULL)
		log_iso8601 = strcmp(time_format, "ISO8601") == 0;
	pthread_mutex_unlock(&log_lock);
	return 0;
}

/* logfmt: msg="..." prio="Info" ts="..." (quotes and backslashes escaped) */
static void
print_structured(enum dlb_log_level lvl, const char *msg)
{
	static const char *const names[] = { "Error", "Warning", "Info", "Debug" };
	struct timeval tv;
	char ts[64];

	gettimeofday(&tv, NULL);
	if (log_iso8601) {
		struct tm tm;
		char base[32];

		localtime_r(&tv.tv_sec, &tm);
		strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
		snprintf(ts, sizeof(ts), "%s.%03ld", base, (long)tv.tv_usec / 1000);
	} else {
		snprintf(ts, sizeof(ts), "%lld.%03ld", (long long)tv.tv_sec,
			 (long)tv.tv_usec / 1000);
	}
	fputs("msg=\"", stdout);
	for (const char *p = msg; *p != '\0'; p++) {
		if (*p == '"' || *p == '\\')
			fputc('\\', stdout);
		fputc(*p, stdout);
	}
	fprintf(stdout, "\" %s=\"%s\" ts=\"%s\"\n", log_level_key, names[lvl], ts);
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
	if (log_journal)
		fprintf(stdout, "<%d>", prio[lvl]);
	if (log_structured) {
		print_structured(lvl, buf);
	} else {
		if (log_timestamps) {
			char ts[32];
			time_t now = time(NULL);
			struct tm tm;

			localtime_r(&now, &tm);
			if (strftime(ts, sizeof(ts), "%b %d %H:%M:%S ", &tm) > 0)
				fputs(ts, stdout);
		}
		fprintf(stdout, "%s\n", buf);
	}
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
