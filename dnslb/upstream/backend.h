/*
 * backend.h - a worker's traffic to backends over UDP: the shared unconnected
 * socket(s), each backend's own connected sockets (`sockets=N`), ID tables,
 * batched sends, answers and timeouts.
 * TCP towards backends is in dnslb/upstream/tcp_upstream.c.
 *
 * Thread: the owning worker, except dlb_backend_local_open (main thread,
 * before the worker starts).
 */
#ifndef DNSLB_BACKEND_H
#define DNSLB_BACKEND_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct dlb_worker;
struct dlb_backend;

/** Open this worker's sockets towards @be. @return 0 or -1 (logged). */
int dlb_backend_local_open(struct dlb_worker *w, const struct dlb_backend *be);
void dlb_backend_local_start(struct dlb_worker *w, int be_index);
/** Forget @be_index's sockets (the shared ones stay: dlb_backend_shared_close). */
void dlb_backend_local_close(struct dlb_worker *w, int be_index);
/** Close the worker's shared backend sockets (dlb_worker_free). */
void dlb_backend_shared_close(struct dlb_worker *w);

/**
 * Hand slot @idx (filled by the pipeline: client, question, what the answer
 * needs) to backend @be: give it an ID due at @start plus the backend's UDP
 * timeout, write the ID at @id_off of @pkt (after a PROXY header) and queue
 * @pkt (@len bytes, left in place until dlb_backend_flush) or, @now, send
 * it at once. On success the slot is the transport's until it ends through
 * w->up_sink (dnslb/core/sink.h). @return 0; DLB_EFULL when the backend has
 * setMaxUDPOutstanding queries in flight or every table is full, or -1
 * when the send @now failed (counted): the slot is then still the
 * caller's.
 */
int dlb_backend_send(struct dlb_worker *w, const struct dlb_backend *be, uint32_t idx, double start,
		     uint8_t *pkt, size_t len, size_t id_off, bool now);
/** Send every queued query. */
void dlb_backend_flush(struct dlb_worker *w);
/** libev callback of the worker's timeout timer. */
void dlb_backend_timeout_cb(struct ev_loop *loop, ev_timer *t, int revents);

#endif
