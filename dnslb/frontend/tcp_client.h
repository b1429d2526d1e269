/*
 * tcp_client.h - DNS over TCP, the clients' side: the connections accepted
 * on a frontend (2-byte length framing, pipelining, out-of-order answers
 * up to maxInFlight, limits and timeouts). Queries go into the pipeline
 * like UDP ones; answers come back through dlb_tcp_client_sink. The
 * backends' side is dnslb/upstream/tcp_upstream.h.
 *
 * Thread: the owning worker.
 */
#ifndef DNSLB_TCP_CLIENT_H
#define DNSLB_TCP_CLIENT_H

#include <stddef.h>
#include <stdint.h>

struct dlb_worker;
struct dlb_listener;

/** Accept every pending connection on @l's TCP socket. */
void dlb_tcp_accept(struct dlb_worker *w, struct dlb_listener *l);
/** Close every client connection of the worker (shutdown). */
void dlb_tcp_clients_close_all(struct dlb_worker *w);
/** How the pipeline answers TCP clients (dnslb/core/sink.h). */
extern const struct dlb_client_sink dlb_tcp_client_sink;

/** A frontend's TCP connection figures over all workers (dnsdist's names). */
struct dlb_tcp_fe_figures {
	uint32_t current, max_concurrent;
	double avg_queries, avg_duration;	/* running averages; duration in ms */
};
/** Figures of frontend @fe (any thread: relaxed atomic loads). */
void dlb_tcp_fe_figures(int fe, struct dlb_tcp_fe_figures *out);

#endif
