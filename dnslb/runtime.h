/*
 * runtime.h - changes to the running daemon that involve every worker: a
 * server added from the console or by a reload, listeners a reload added
 * or removed. Above the workers (dnslb/worker.h) and the health checks.
 *
 * Thread: main.
 */
#ifndef DNSLB_RUNTIME_H
#define DNSLB_RUNTIME_H

#include <stddef.h>

struct dlb_backend;
/**
 * newServer() while the workers run: append @be (ownership: taken) to the
 * running config, have the health checker check it and every worker open
 * its sockets towards it (waiting up to 5 s), then put it in its pools and
 * rebuild the consistent-hashing rings. Other servers' traffic is not
 * touched. Only while dlb_daemon.running. @return 0 (@be taken), 1 (taken,
 * but it could not be opened everywhere: it stays listed, since indexes
 * never move at runtime, forced down and in no pool; @err says why), or -1
 * (not taken: too many servers or pools, in @err). Thread: main.
 */
int dlb_daemon_add_backend(struct dlb_backend *be, char *err, size_t errlen);
/** The first half of dlb_daemon_add_backend: everything but the pools (a reload attaches later). */
int dlb_daemon_open_backend(struct dlb_backend *be, char *err, size_t errlen);

/**
 * Have every worker match its listeners to cfg->frontends (a reload added,
 * removed or revived some) and wait for them (at most 5 s). @return 0, or -1
 * with @err when a worker could not open one (a port below 1024 once
 * privileges are dropped, an address that is not local) or did not answer.
 * Thread: main, while the workers run.
 */
int dlb_daemon_sync_listeners(char *err, size_t errlen);

#endif
