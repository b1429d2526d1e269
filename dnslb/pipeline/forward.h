/*
 * forward.h - the forwarding half of the query pipeline: a query the
 * pipeline (dnslb/pipeline/query.h) decided to forward goes into an in-flight slot
 * and to a backend transport; its end comes back through the upstream sink
 * installed here (dnslb/core/sink.h), and the one "reply to the client" decision
 * (UDP, TCP, delayed, prefetch) is made here, for answers from backends and
 * from the second-level cache.
 *
 * Thread: the owning worker.
 */
#ifndef DNSLB_FORWARD_H
#define DNSLB_FORWARD_H

#include <ev.h>
#include <stddef.h>
#include <stdint.h>

#include "dnslb/core/sink.h"

struct dlb_worker;
struct dlb_query;
struct dlb_client;

/** The pipeline's upstream sink: dlb_worker_new installs it in every worker. */
extern const struct dlb_upstream_sink dlb_forward_sink;
/** The client sink of internal queries (prefetch): they are never answered. */
extern const struct dlb_client_sink dlb_forward_internal_sink;

/**
 * Forward @q (given a backend, q->be) for client @c: over UDP from this
 * worker's socket (queued until dlb_backend_flush), or over TCP for TCP
 * clients and tcpOnly backends. A query that cannot take a slot is answered
 * here (SERVFAIL, or setMaxOutstandingPerClient's action).
 */
void dlb_forward(struct dlb_worker *w, struct dlb_query *q, const struct dlb_client *c);

/**
 * Send a copy of @q to q->be now, as an internal query whose answer only
 * refreshes the cache (prefetch). @q itself is not modified.
 */
void dlb_forward_prefetch(struct dlb_worker *w, const struct dlb_query *q);

/**
 * UDP client @c already has its setMaxOutstandingPerClient queries in
 * flight: answer @q by cfg->oc_action (REFUSED or SERVFAIL built in place
 * and queued; drop: nothing).
 */
void dlb_forward_over_cap(struct dlb_worker *w, struct dlb_query *q, const struct dlb_client *c);

/**
 * The one reply decision: send answer @pkt (@len bytes; 0: the query gets
 * none) to @c through its protocol's client sink, fitted to a UDP client,
 * after @delay_ms (UDP only; 0: now). @batched: @pkt stays valid until the
 * receive batch is flushed, so it may be queued.
 */
void dlb_forward_reply(struct dlb_worker *w, const struct dlb_client *c, uint8_t *pkt, size_t len,
		       uint32_t delay_ms, bool batched);

/** The end of a receive batch: send the queries it queued to backends. */
void dlb_forward_flush(struct dlb_worker *w);

/** libev callback of the worker's delay_timer (DelayAction answers due). */
void dlb_forward_delay_cb(struct ev_loop *loop, ev_timer *t, int revents);
/** Drop every delayed answer (dlb_worker_free). */
void dlb_forward_delay_free_all(struct dlb_worker *w);

#endif
