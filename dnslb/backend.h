/*
 * backend.h - a worker's traffic to backends over UDP: the shared unconnected
 * socket(s), each backend's own connected sockets (`sockets=N`), ID tables,
 * batched sends, answers and timeouts.
 * TCP towards backends is in tcp.c.
 *
 * Thread: the owning worker, except dlb_backend_local_open (main thread,
 * before the worker starts).
 */
#ifndef DNSLB_BACKEND_H
#define DNSLB_BACKEND_H

#include <ev.h>
#include <stdint.h>

struct dlb_worker;
struct dlb_query;
struct dlb_client;
struct dlb_backend;

/** Open this worker's sockets towards @be. @return 0 or -1 (logged). */
int dlb_backend_local_open(struct dlb_worker *w, const struct dlb_backend *be);
void dlb_backend_local_start(struct dlb_worker *w, int be_index);
/** Forget @be_index's sockets (the shared ones stay: dlb_backend_shared_close). */
void dlb_backend_local_close(struct dlb_worker *w, int be_index);
/** Close the worker's shared backend sockets (dlb_worker_free). */
void dlb_backend_shared_close(struct dlb_worker *w);

/**
 * Forward @q (already given a backend by the pipeline) for client @c: over
 * UDP from this worker's socket, or over TCP for TCP clients and tcpOnly
 * backends. The UDP send is queued until dlb_backend_flush().
 */
void dlb_backend_forward(struct dlb_worker *w, struct dlb_query *q, const struct dlb_client *c);
/**
 * Send a copy of @q to q->be now, as an internal query whose answer only
 * refreshes the cache (prefetch). @q itself is not modified.
 */
void dlb_backend_prefetch(struct dlb_worker *w, const struct dlb_query *q);
/**
 * UDP client @c already has its setMaxOutstandingPerClient queries in
 * flight: answer @q by cfg->oc_action (REFUSED or SERVFAIL built in place
 * and queued; drop: nothing).
 */
void dlb_backend_answer_over_cap(struct dlb_worker *w, struct dlb_query *q,
				 const struct dlb_client *c);
/** Send every queued query. */
void dlb_backend_flush(struct dlb_worker *w);
/** libev callback of the worker's timeout timer. */
void dlb_backend_timeout_cb(struct ev_loop *loop, ev_timer *t, int revents);

#endif
