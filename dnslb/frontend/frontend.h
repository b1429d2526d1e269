/*
 * frontend.h - client-facing sockets of one worker: UDP listeners with
 * recvmmsg/sendmmsg batches and IP_PKTINFO, and the TCP listening sockets
 * (connections themselves live in tcp_client.c).
 *
 * Thread: the owning worker, except dlb_listener_open (main thread, before
 * the worker starts, so sockets are bound before privileges are dropped).
 */
#ifndef DNSLB_FRONTEND_H
#define DNSLB_FRONTEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct dlb_worker;
struct dlb_listener;
struct dlb_client;
struct dlb_frontend_cfg;
struct dlb_sendbatch;

/** Bind the UDP and TCP sockets of @l for frontend @fe (SO_REUSEPORT). @return 0 or -1 (logged). */
int dlb_listener_open(struct dlb_worker *w, struct dlb_listener *l, int index,
		      const struct dlb_frontend_cfg *fe);
void dlb_listener_start(struct dlb_listener *l);
void dlb_listener_close(struct dlb_listener *l);
/*
 * A reload removing a listener: dlb_listener_pause stops reading and closes
 * the listening TCP socket (accepted connections go on); the UDP socket
 * stays open for the answers of queries in flight until
 * dlb_listener_close_udp (after a grace period), and answers for a closed
 * one are dropped. dlb_listener_resume (a reload adding it back, or a new
 * one whose UDP socket is not open yet) opens what is closed and starts
 * reading; counters are kept. @return 0, or -1 (logged).
 */
void dlb_listener_pause(struct dlb_listener *l);
void dlb_listener_close_udp(struct dlb_listener *l);
int dlb_listener_resume(struct dlb_listener *l, const struct dlb_frontend_cfg *fe);

/**
 * Queue an answer to a UDP client; @pkt must stay valid until the next
 * dlb_frontend_flush() (it is, for receive buffers of the current batch).
 */
void dlb_frontend_queue_reply(struct dlb_worker *w, const struct dlb_client *c, uint8_t *pkt,
			      size_t len);
/** Send an answer to a UDP client now (answers that do not come from a batch). */
void dlb_frontend_send_reply(struct dlb_worker *w, const struct dlb_client *c, const uint8_t *pkt,
			     size_t len);
/** Send every queued answer. */
void dlb_frontend_flush(struct dlb_worker *w);

/**
 * Whether worker @w has nothing in flight and nothing timed: no query at a
 * backend, no TCP connection (client or backend), no delayed answer, no
 * Redis command, subscription or reconnection pending, no query waiting on
 * the second-level cache. Only then may it wait in its UDP
 * socket's recvmmsg instead of epoll (dlb_frontend_park): nothing but a
 * datagram or a wake signal can then need it. Thread: the worker.
 */
bool dlb_worker_quiet(const struct dlb_worker *w);

/** How the pipeline answers UDP clients (dnslb/core/sink.h). */
extern const struct dlb_client_sink dlb_frontend_udp_sink;

/**
 * Worker @w is quiet (dlb_worker_quiet) and about to block in epoll_wait:
 * wait in recvmmsg on @l's UDP socket instead, and handle each batch as its
 * read callback would, as long as the worker stays quiet, up to 64 batches;
 * then (or on a wake signal: dlb_worker_wake, dlb_worker_wake_idle)
 * return to the loop. Thread: the worker, outside an epoch section.
 */
void dlb_frontend_park(struct dlb_worker *w, struct dlb_listener *l);

/**
 * The worker's room for one receive batch of queries in flight between
 * dlb_query_prepare and dlb_query_finish (w->upend). @return 0, or -1 (no
 * memory). Thread: the worker's creator; free with dlb_frontend_worker_free.
 */
int dlb_frontend_worker_init(struct dlb_worker *w);
void dlb_frontend_worker_free(struct dlb_worker *w);


#endif
