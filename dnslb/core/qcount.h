/*
 * qcount.h - dnsdist's query counting (setQueryCount, setQueryCountFilter,
 * getQueryCounters, clearQueryCounters): a count per name of the queries
 * that pass the ACL, kept per worker.
 *
 * Each worker counts into its own table (no lock, no shared cache line);
 * the console reads the tables while the workers write them (a sequence
 * counter per table catches a clear racing the read) and merges them. A
 * clear is a generation bump: each worker empties its own table at its next
 * count, and until then its table reads as empty. Disabled, the query path
 * pays one relaxed load and a branch.
 *
 * Thread: dlb_qcount_add from worker @worker only; the rest main thread
 * (dlb_qcount_enabled and dlb_qcount_filter from any).
 */
#ifndef DNSLB_QCOUNT_H
#define DNSLB_QCOUNT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* the longest name counted (a filter may return any string); longer ones are not */
#define DLB_QCOUNT_NAME_MAX	1024
/* names a worker's table holds; further new names are not counted */
#define DLB_QCOUNT_MAX_NAMES	98304

extern bool dlb_qcount_on;

static inline bool
dlb_qcount_enabled(void)
{
	return __atomic_load_n(&dlb_qcount_on, __ATOMIC_RELAXED);
}

void dlb_qcount_set(bool on);
/** The filter: Lua function @fn of the worker states of rules generation @gen (0: none). */
void dlb_qcount_set_filter(uint64_t gen, int fn);
/** The filter function for rules of generation @gen, or 0. */
int dlb_qcount_filter(uint64_t gen);

/** Count one query for @name (@len bytes). @return 0, or -1 when not counted (table full). */
int dlb_qcount_add(int worker, const char *name, size_t len);

struct dlb_qcount_rec {
	const char *name;	/* into the snapshot's buffer; not NUL-terminated */
	size_t len;
	uint64_t count;
};

/**
 * Every name counted, all workers merged, sorted by count (highest first),
 * then by name. *@v and *@buf are malloc'ed (free both). @return 0, or -1
 * (ENOMEM).
 */
int dlb_qcount_snapshot(struct dlb_qcount_rec **v, size_t *n, char **buf);
/** Empty every table. @return the records there were (merged). */
size_t dlb_qcount_clear(void);

#endif
