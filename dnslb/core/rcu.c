/*
 * rcu.c - the process's epoch domain.
 *
 * CK links every record into the epoch for good (ck_epoch_unregister only
 * marks it reusable), so records are allocated here, recycled when a thread
 * goes away, and never freed.
 */
#include "dnslb/core/rcu.h"

#include <stdlib.h>
#include <string.h>

static ck_epoch_t dlb_epoch;

void
dlb_rcu_init(void)
{
	ck_epoch_init(&dlb_epoch);
}

int
dlb_rcu_register(struct dlb_rcu_thread *t)
{
	memset(t, 0, sizeof(*t));
	t->rec = ck_epoch_recycle(&dlb_epoch, NULL);
	if (t->rec != NULL)
		return 0;
	t->rec = malloc(sizeof(*t->rec));
	if (t->rec == NULL)
		return -1;
	ck_epoch_register(&dlb_epoch, t->rec, NULL);
	return 0;
}

void
dlb_rcu_barrier(struct dlb_rcu_thread *t)
{
	ck_epoch_barrier(t->rec);
}

void
dlb_rcu_unregister(struct dlb_rcu_thread *t)
{
	if (t->rec == NULL)
		return;
	ck_epoch_barrier(t->rec);
	ck_epoch_unregister(t->rec);
	t->rec = NULL;
}
