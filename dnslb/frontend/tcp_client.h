/*
 * tcp.h - DNS over TCP: client connections of a frontend (2-byte length
 * framing, pipelining, out-of-order answers up to maxInFlight, limits and
 * timeouts) and reused, pipelined connections towards backends.
 *
 * Thread: the owning worker.
 */
#ifndef DNSLB_TCP_H
#define DNSLB_TCP_H

#include <stddef.h>
#include <stdint.h>

struct dlb_worker;
struct dlb_listener;
struct dlb_query;
struct dlb_client;

/** Accept every pending connection on @l's TCP socket. */
void dlb_tcp_accept(struct dlb_worker *w, struct dlb_listener *l);
/** Send @q to q->be over TCP on behalf of @c (a TCP client, or a UDP client of a tcpOnly backend). */
void dlb_tcp_forward(struct dlb_worker *w, struct dlb_query *q, const struct dlb_client *c);
/** Answer TCP client @c with @pkt (copied). A client that went away is ignored. */
void dlb_tcp_deliver(struct dlb_worker *w, const struct dlb_client *c, const uint8_t *pkt, size_t len);
/**
 * One message of a zone transfer for TCP client @c, not the last (copied):
 * its query stays in flight. A client that went away is ignored.
 */
void dlb_tcp_xfr_part(struct dlb_worker *w, const struct dlb_client *c, const uint8_t *pkt,
		      size_t len);
/**
 * The answer to TCP client @c's query was dropped (a response rule): release
 * its in-flight place and close the connection, as for a dropped query.
 */
void dlb_tcp_drop(struct dlb_worker *w, const struct dlb_client *c);
/**
 * Close every TCP connection of the worker (shutdown), and free its
 * per-client outstanding table (dnslb/pipeline/abuse.h).
 */
void dlb_tcp_worker_close_all(struct dlb_worker *w);
/** How the pipeline answers TCP clients (dnslb/core/sink.h). */
extern const struct dlb_client_sink dlb_tcp_client_sink;

/** A frontend's TCP connection figures over all workers (dnsdist's names). */
struct dlb_tcp_fe_figures {
	uint32_t current, max_concurrent;
	double avg_queries, avg_duration;	/* running averages; duration in ms */
};
/** Figures of frontend @fe (any thread: relaxed atomic loads). */
void dlb_tcp_fe_figures(int fe, struct dlb_tcp_fe_figures *out);

/** Backend requests of @w holding a per-client outstanding place (consistency checks). */
uint64_t dlb_tcp_oc_marked(const struct dlb_worker *w);

#endif
