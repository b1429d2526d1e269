/*
 * rcu.h - safe memory reclamation for objects read without locks (cache
 * entries today; config snapshots later), over Concurrency Kit's epochs.
 *
 * Every thread that reads or retires shared objects owns one struct
 * dlb_rcu_thread. Readers bracket their accesses with dlb_rcu_enter/exit;
 * workers do so around each loop iteration's work, never across a wait, so an
 * idle worker never holds back reclamation (docs/architecture.md#memory-reclamation). A retired
 * object is freed by its retiring thread's dlb_rcu_poll() once every thread
 * has left the sections that might still see it.
 *
 * Thread: each dlb_rcu_thread is used by its owner only.
 */
#ifndef DNSLB_RCU_H
#define DNSLB_RCU_H

#include <ck_epoch.h>

struct dlb_rcu_thread {
	ck_epoch_record_t *rec;	/* never freed: CK keeps every record on a global list */
	unsigned depth;		/* nesting of enter/exit */
};

/** Once, before any thread registers. */
void dlb_rcu_init(void);
/** Register the calling thread (reuses the records of threads gone). @return 0 or -1 (no memory). */
int dlb_rcu_register(struct dlb_rcu_thread *t);
/** The thread is going away: reclaim what it retired, release its record. */
void dlb_rcu_unregister(struct dlb_rcu_thread *t);

static inline void
dlb_rcu_enter(struct dlb_rcu_thread *t)
{
	if (t->depth++ == 0)
		ck_epoch_begin(t->rec, NULL);
}

static inline void
dlb_rcu_exit(struct dlb_rcu_thread *t)
{
	if (--t->depth == 0)
		ck_epoch_end(t->rec, NULL);
}

/** Free @e with @cb once no reader can hold it. Ownership: taken. */
static inline void
dlb_rcu_defer(struct dlb_rcu_thread *t, ck_epoch_entry_t *e, ck_epoch_cb_t *cb)
{
	ck_epoch_call(t->rec, e, cb);
}

/**
 * Run the callbacks that became safe (non-blocking). Call outside a section.
 * Cheap when nothing is pending: polling scans every thread's record, so it
 * is skipped then (this runs once per loop iteration).
 */
static inline void
dlb_rcu_poll(struct dlb_rcu_thread *t)
{
	if (t->rec->n_pending > 0)
		ck_epoch_poll(t->rec);
}

/** Wait until everything @t retired is freed (shutdown, tests). Outside a section. */
void dlb_rcu_barrier(struct dlb_rcu_thread *t);

#endif
