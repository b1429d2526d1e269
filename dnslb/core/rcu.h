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

/*
 * ThreadSanitizer cannot see ck_epoch's grace-period detection (it runs in
 * libck.so, not instrumented), so every free of a retired object would be
 * reported as racing with the readers' last accesses. In a TSan build each
 * section's end releases, and each reclamation pass first acquires, one
 * sync object: what a reader did in a section it has left happens before
 * what the reclaimer frees after that. This is what the grace period
 * guarantees (an object is freed only once every section that could see it
 * has ended). The edge is wider than that (all earlier sections, not only
 * those that saw the object), so it can hide a race between a reader's
 * earlier plain write and a later read by the reclaiming thread; counters
 * are the only such data. No other build has it.
 */
#if defined(__SANITIZE_THREAD__)
#define DLB_RCU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DLB_RCU_TSAN 1
#endif
#endif

#ifdef DLB_RCU_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
extern char dlb_rcu_tsan_grace;
struct dlb_rcu_thread;
/* dlb_rcu_poll in a TSan build: the callbacks that became safe are taken out
 * first, the acquire comes after that detection and before they run (an
 * acquire before ck_epoch_poll would miss a section that ended between the
 * two, yet whose end let poll free the object). */
void dlb_rcu_poll_tsan(struct dlb_rcu_thread *t);
#define DLB_RCU_TSAN_SECTION_END()	__tsan_release(&dlb_rcu_tsan_grace)
#define DLB_RCU_TSAN_RECLAIM()		__tsan_acquire(&dlb_rcu_tsan_grace)
#else
#define DLB_RCU_TSAN_SECTION_END()	((void)0)
#define DLB_RCU_TSAN_RECLAIM()		((void)0)
#endif

struct dlb_rcu_thread {
	ck_epoch_record_t *rec;	/* never freed: CK keeps every record on a global list.
				 * Atomic: other threads may look at it (dyntrack.c) */
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
	if (--t->depth == 0) {
		DLB_RCU_TSAN_SECTION_END();
		ck_epoch_end(t->rec, NULL);
	}
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
	if (t->rec->n_pending > 0) {
#ifdef DLB_RCU_TSAN
		dlb_rcu_poll_tsan(t);
#else
		ck_epoch_poll(t->rec);
#endif
	}
}

/** Wait until everything @t retired is freed (shutdown, tests). Outside a section. */
void dlb_rcu_barrier(struct dlb_rcu_thread *t);

#endif
