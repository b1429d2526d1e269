/*
 * runtime.c - changes to the running daemon that involve every worker:
 * dnslb/runtime.h.
 */
#include "dnslb/runtime.h"

#include <stdio.h>
#include <time.h>

#include "dnslb/core/config.h"
#include "dnslb/core/daemon.h"
#include "dnslb/upstream/health.h"
#include "dnslb/core/log.h"
#include "dnslb/worker.h"

/* How long newServer waits for the workers to open their sockets. */
#define ADD_BACKEND_WAIT_S 5.0

int
dlb_daemon_open_backend(struct dlb_backend *be, char *err, size_t errlen)
{
	struct dlb_config *cfg = dlb_daemon.cfg;
	int failed_before[DLB_MAX_WORKERS];
	double deadline;
	int failed = 0, waiting;

	for (int i = 0; i < dlb_daemon.nworkers; i++)
		failed_before[i] = __atomic_load_n(&dlb_daemon.workers[i]->nbe_failed,
						   __ATOMIC_RELAXED);
	if (dlb_config_append_backend(cfg, be) != 0) {
		snprintf(err, errlen, "too many servers or pools");
		return -1;
	}
	/* checked from now on; auto mode: down until its first check answers */
	if (dlb_daemon.health != NULL && dlb_health_add(dlb_daemon.health, be) != 0)
		__atomic_store_n(&be->admin, DLB_BE_FORCED_DOWN, __ATOMIC_RELAXED);
	for (int i = 0; i < dlb_daemon.nworkers; i++)
		dlb_worker_open_new_backends(dlb_daemon.workers[i]);

	/* each worker opens its sockets within one loop iteration */
	deadline = dlb_daemon_now() + ADD_BACKEND_WAIT_S;
	do {
		struct timespec ts = { 0, 1000000 };

		waiting = 0;
		for (int i = 0; i < dlb_daemon.nworkers; i++)
			waiting += __atomic_load_n(&dlb_daemon.workers[i]->nbe, __ATOMIC_ACQUIRE) <=
				   be->index;
		if (waiting > 0)
			nanosleep(&ts, NULL);
	} while (waiting > 0 && dlb_daemon_now() < deadline);
	for (int i = 0; i < dlb_daemon.nworkers; i++)
		failed += __atomic_load_n(&dlb_daemon.workers[i]->nbe_failed, __ATOMIC_RELAXED) !=
			  failed_before[i];

	if (waiting > 0 || failed > 0) {
		/* listed (indexes never move at runtime) but down and in no pool */
		dlb_config_retire_backend(cfg, be);
		if (waiting > 0)
			snprintf(err, errlen, "%d worker%s did not open sockets towards %s in time",
				 waiting, waiting == 1 ? "" : "s", be->addr_text);
		else
			snprintf(err, errlen, "%d worker%s could not open sockets towards %s",
				 failed, failed == 1 ? "" : "s", be->addr_text);
		return 1;
	}
	return 0;
}

int
dlb_daemon_add_backend(struct dlb_backend *be, char *err, size_t errlen)
{
	struct dlb_config *cfg = dlb_daemon.cfg;
	int rc = dlb_daemon_open_backend(be, err, errlen);

	if (rc != 0)
		return rc;
	/* every worker can send to it: only now may a policy pick it */
	if (dlb_config_attach_backend(cfg, be) != 0) {
		dlb_config_retire_backend(cfg, be);
		snprintf(err, errlen, "too many pools");
		return 1;
	}
	if (dlb_config_build_rings(cfg, dlb_daemon.rcu) != 0)
		dlb_err("out of memory rebuilding the consistent-hashing rings");
	/* workers find it in its pools from the next snapshot */
	if (dlb_config_publish(cfg, dlb_daemon.rcu) != 0)
		dlb_err("out of memory publishing the pools: %s joins them later", be->name);
	return 0;
}

int
dlb_daemon_sync_listeners(char *err, size_t errlen)
{
	struct dlb_config *cfg = dlb_daemon.cfg;
	int failed_before[DLB_MAX_WORKERS];
	unsigned gen = __atomic_add_fetch(&cfg->fe_gen, 1, __ATOMIC_ACQ_REL);
	double deadline = dlb_daemon_now() + ADD_BACKEND_WAIT_S;
	int failed = 0, waiting;

	for (int i = 0; i < dlb_daemon.nworkers; i++) {
		failed_before[i] = __atomic_load_n(&dlb_daemon.workers[i]->fe_failed,
						   __ATOMIC_RELAXED);
		dlb_worker_sync_listeners(dlb_daemon.workers[i]);
	}
	do {
		struct timespec ts = { 0, 1000000 };

		waiting = 0;
		for (int i = 0; i < dlb_daemon.nworkers; i++)
			waiting += __atomic_load_n(&dlb_daemon.workers[i]->fe_gen,
						   __ATOMIC_ACQUIRE) != gen;
		if (waiting > 0)
			nanosleep(&ts, NULL);
	} while (waiting > 0 && dlb_daemon_now() < deadline);
	for (int i = 0; i < dlb_daemon.nworkers; i++)
		failed += __atomic_load_n(&dlb_daemon.workers[i]->fe_failed, __ATOMIC_RELAXED) !=
			  failed_before[i];
	if (waiting > 0) {
		snprintf(err, errlen, "%d worker%s did not update their listeners in time", waiting,
			 waiting == 1 ? "" : "s");
		return -1;
	}
	if (failed > 0) {
		snprintf(err, errlen, "%d worker%s could not open a new listener (see the log)",
			 failed, failed == 1 ? "" : "s");
		return -1;
	}
	return 0;
}
