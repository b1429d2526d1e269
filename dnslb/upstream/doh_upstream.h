/*
 * doh_upstream.h - DNS over HTTPS towards backends (newServer's dohPath),
 * as dnsdist 1.7.3 does it: each query an HTTP/2 POST of an
 * application/dns-message body on a connection shared across clients, over
 * TLS (ALPN "h2", the certificate validated as a DoT server's) or over
 * plain HTTP/2 without tls=. Per worker and backend, connections are reused
 * and carry as many streams as the server's SETTINGS_MAX_CONCURRENT_STREAMS
 * allows; a stream the server resets (or refuses with GOAWAY) is sent again
 * on another connection, up to the backend's `retries`. Every query handed
 * over ends exactly once through the worker's upstream sink
 * (dnslb/core/sink.h): an answer only from a 200 whose body answers the
 * question; a status other than 200, a reset, a broken connection or a
 * failed handshake end it without one.
 *
 * Health checks use the same connection code: one query on a connection of
 * its own, as dnsdist (dlb_doh_check_start).
 *
 * Thread: the owning worker (queries) or the main thread (checks).
 */
#ifndef DNSLB_DOH_UPSTREAM_H
#define DNSLB_DOH_UPSTREAM_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

struct dlb_worker;
struct dlb_backend;
struct dlb_slot;
struct dlb_doh_up;

/* Bounds on what a DoH server may send us (a body bigger than a DNS
 * message fails the connection, as dnsdist 1.7.3). */
#define DLB_DOH_UP_MAX_BODY	65535u
#define DLB_DOH_UP_MAX_CONNS	256		/* connections per worker and backend */

/**
 * Send the query of slot @s (@msg, @len bytes, the client's ID in it) to
 * DoH server @be (be->doh_path set). s->wire_id and s->deadline are set
 * here (tcpRecvTimeout). @pre (@prelen bytes, at most DLB_PP2_MAX; 0:
 * none) is useProxyProtocol's header: the query then goes on a new
 * connection of its own that starts with it. If it cannot be sent, the
 * slot ends at once through the sink (DLB_END_NO_MEMORY). May be called
 * from the sink while one of @w's DoH connections is being read.
 * Ownership: copies @s, @pre and @msg.
 */
void dlb_doh_up_send(struct dlb_worker *w, const struct dlb_backend *be, const struct dlb_slot *s,
		     const uint8_t *pre, size_t prelen, const uint8_t *msg, size_t len);

/** Close every DoH connection of @w (shutdown); their queries end through
 * the sink (DLB_END_CLOSED); the kept TLS sessions go. */
void dlb_doh_up_close_all(struct dlb_worker *w);

/** Queries of @w's DoH connections holding a per-client outstanding place. */
uint64_t dlb_doh_up_oc_marked(const struct dlb_worker *w);

/**
 * The outcome of a health check over DoH: @body (@len bytes, valid during
 * the call) with status 200, or NULL and @why (a text for the log).
 * @session: a new reference to the connection's resumable TLS session, the
 * callee's to keep or free (NULL: none). The check is freed once this
 * returns.
 */
typedef void dlb_doh_check_cb(void *ud, const uint8_t *body, size_t len, const char *why,
			      SSL_SESSION *session);

/**
 * Send health-check query @q (@qlen bytes) to DoH server @be on a new
 * connection of its own on @loop, its first bytes @pre (@prelen; 0: none;
 * a LOCAL PROXY header for useProxyProtocol), offering TLS session @resume
 * (NULL: none), connecting within @connect_timeout seconds. @cb follows
 * exactly once, unless dlb_doh_check_cancel comes first. @return the check, or
 * NULL (nothing will be reported) if it could not start.
 */
struct dlb_doh_up *dlb_doh_check_start(struct ev_loop *loop, const struct dlb_backend *be,
				       SSL_SESSION *resume, const uint8_t *pre, size_t prelen,
				       const uint8_t *q, size_t qlen, double connect_timeout,
				       dlb_doh_check_cb *cb, void *ud);

/** Abandon check @u (its timeout passed): freed, @cb not called. */
void dlb_doh_check_cancel(struct dlb_doh_up *u);

#endif
