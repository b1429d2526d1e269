/*
 * doh_conn.h - DNS over HTTPS, the clients' side (addDOHLocal): the
 * connections accepted on a DoH listener, over TLS (ALPN "h2" or
 * "http/1.1") or plain HTTP behind a TLS-terminating proxy. Each request
 * goes through the request reader (doh_req.h) and, when it carries a DNS
 * query, through the same pipeline as UDP; the answer comes back through
 * dlb_doh_client_sink and goes out on the request's HTTP/2 stream (doh_h2.h)
 * or as the HTTP/1.1 response (doh_h1.h).
 *
 * Thread: the owning worker.
 */
#ifndef DNSLB_DOH_CONN_H
#define DNSLB_DOH_CONN_H

#include <stdbool.h>
#include <stdint.h>

struct dlb_worker;
struct dlb_listener;

/** Accept every pending connection on DoH listener @l. */
void dlb_doh_accept(struct dlb_worker *w, struct dlb_listener *l);
/** Close every DoH connection of the worker and free its DoH state (shutdown). */
void dlb_doh_close_all(struct dlb_worker *w);
/** No DoH connection is open on @w. */
bool dlb_doh_idle(const struct dlb_worker *w);
/** How the pipeline answers DoH clients (dnslb/core/sink.h). */
extern const struct dlb_client_sink dlb_doh_client_sink;

#endif
