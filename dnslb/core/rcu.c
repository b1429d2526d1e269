/*
 * rcu.c - the process's epoch domain.
 *
 * CK links every record into the epoch for good (ck_epoch_unregister only
 * marks it reusable), so records are allocated here, recycled when a thread
 * goes away, and never freed.
 */
#include "dnslb/core/rcu.h"

#include <stdlib.h>

#include "dnslb/core/dnslb.h"

static ck_epoch_t dlb_epoch;

#ifdef DLB_RCU_TSAN
char dlb_rcu_tsan_grace;	/* the sync object of rcu.h's TSan note; only its address is used */
#endif

void
dlb_rcu_init(void)
{
	ck_epoch_init(&dlb_epoch);
}

int
dlb_rcu_register(struct dlb_rcu_thread *t)
{
	ck_epoch_record_t *rec = ck_epoch_recycle(&dlb_epoch, NULL);

	t->depth = 0;
	if (rec == NULL) {
		rec = malloc(sizeof(*rec));
		if (rec == NULL) {
			__atomic_store_n(&t->rec, NULL, __ATOMIC_RELEASE);
			return -1;
		}
		ck_epoch_register(&dlb_epoch, rec, NULL);
	}
	__atomic_store_n(&t->rec, rec, __ATOMIC_RELEASE);
	return 0;
}

#ifdef DLB_RCU_TSAN
void
dlb_rcu_poll_tsan(struct dlb_rcu_thread *t)
{
	ck_stack_t ready = CK_STACK_INITIALIZER;
	ck_stack_entry_t *c, *next;

	ck_epoch_poll_deferred(t->rec, &ready);
	DLB_RCU_TSAN_RECLAIM();
	for (c = ck_stack_batch_pop_upmc(&ready); c != NULL; c = next) {
		ck_epoch_entry_t *e = container_of(c, ck_epoch_entry_t, stack_entry);

		next = CK_STACK_NEXT(c);
		e->function(e);
	}
}
#endif

void
dlb_rcu_barrier(struct dlb_rcu_thread *t)
{
	/* ck_epoch_barrier, in its two steps: the TSan edge between them */
	ck_epoch_synchronize(t->rec);
	DLB_RCU_TSAN_RECLAIM();
	ck_epoch_reclaim(t->rec);
}

void
dlb_rcu_unregister(struct dlb_rcu_thread *t)
{
	if (t->rec == NULL)
		return;
	dlb_rcu_barrier(t);
	ck_epoch_unregister(t->rec);
	__atomic_store_n(&t->rec, NULL, __ATOMIC_RELEASE);
}
