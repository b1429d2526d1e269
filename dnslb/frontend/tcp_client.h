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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "dnslb/core/inflight.h"

struct dlb_worker;
struct dlb_listener;
struct dlb_query;
struct dlb_stream_tls;

/** Accept every pending connection on @l's TCP socket. */
void dlb_tcp_accept(struct dlb_worker *w, struct dlb_listener *l);
/* What the stream clients (TCP here, DNS over HTTPS in doh_conn.c) share. */
/** Accept one connection on @l's TCP socket (nonblocking): the socket, or
 * -1 when there is none now (an error other than EAGAIN is logged). */
int dlb_stream_client_accept(struct dlb_listener *l, union dlb_sockaddr *peer, socklen_t *plen);
/** TCP_NODELAY on accepted @fd; on a wildcard listener, the address the
 * client asked into *@local. @return whether *@local was set. */
bool dlb_stream_client_setup(int fd, const struct dlb_listener *l, union dlb_sockaddr *local);
/** The client record of query @q from connection {@idx, @gen} of @l
 * (@local: the address asked, NULL when the listener's own). */
void dlb_stream_client_fill(struct dlb_client *cl, enum dlb_client_proto proto,
			    const struct dlb_listener *l, const union dlb_sockaddr *peer,
			    const struct dlb_query *q, uint32_t idx, uint32_t gen,
			    const union dlb_sockaddr *local);
/** A TLS client's handshake on @l is done: dnsdist's per-handshake
 * figures (new session or resumption, ticket keys). @return the version
 * index its queries count under (enum dlb_tls_version_idx). */
int dlb_stream_client_tls_done(struct dlb_listener *l, const struct dlb_stream_tls *tls);
/** A TLS client's handshake on @l failed: the failure's reason, if any. */
void dlb_stream_client_tls_failed(struct dlb_listener *l, const struct dlb_stream_tls *tls);
/** Close every client connection of the worker (shutdown). */
void dlb_tcp_clients_close_all(struct dlb_worker *w);
/** How the pipeline answers TCP clients (dnslb/core/sink.h). */
extern const struct dlb_client_sink dlb_tcp_client_sink;

/** A frontend's TCP connection figures over all workers (dnsdist's names). */
struct dlb_tcp_fe_figures {
	uint32_t current, max_concurrent;
	double avg_queries, avg_duration;	/* running averages; duration in ms */
};
/** A connection of frontend @fe opened, or closed after @queries queries and
 * @seconds (TCP and DoH clients: dnsdist's gauges). */
void dlb_tcp_fe_opened(int fe);
void dlb_tcp_fe_closed(int fe, uint64_t queries, double seconds);
/** Figures of frontend @fe (any thread: relaxed atomic loads). */
void dlb_tcp_fe_figures(int fe, struct dlb_tcp_fe_figures *out);

#endif
