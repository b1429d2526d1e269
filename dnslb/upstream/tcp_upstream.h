/*
 * tcp_upstream.h - DNS over TCP towards backends: per worker and backend,
 * connections reused across clients, pipelined up to the backend's
 * maxInFlight, reopened and resent when they break, zone transfers
 * answered in several messages. Every query handed over ends exactly once
 * through the worker's upstream sink (dnslb/core/sink.h).
 *
 * Thread: the owning worker.
 */
#ifndef DNSLB_TCP_UPSTREAM_H
#define DNSLB_TCP_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

struct dlb_worker;
struct dlb_backend;
struct dlb_slot;
struct dlb_stream_target;

/**
 * Send the query of slot @s (@msg, @len bytes, the client's ID still in
 * it) to @be over TCP, preceded by @pre (@prelen bytes: a PROXY header, or
 * nothing). @xfr: a zone transfer, on a connection of its own, whose
 * answer comes in several messages (->xfr_part). s->wire_id and
 * s->deadline are set here. If the query cannot be sent, the slot ends at
 * once through the sink (DLB_END_NO_MEMORY).
 * Ownership: copies @s, @pre and @msg.
 */
void dlb_tcp_up_send(struct dlb_worker *w, const struct dlb_backend *be, const struct dlb_slot *s,
		     const uint8_t *pre, size_t prelen, const uint8_t *msg, size_t len, bool xfr);

/**
 * Close every backend connection of @w (shutdown); their queries end
 * through the sink (DLB_END_CLOSED).
 */
void dlb_tcp_up_close_all(struct dlb_worker *w);

/** Queries of @w holding a per-client outstanding place (consistency checks). */
uint64_t dlb_tcp_up_oc_marked(const struct dlb_worker *w);

/**
 * Where a connection to @be goes from: its address, source and interface.
 * @bind_opt: IP_BIND_ADDRESS_NO_PORT or IP_FREEBIND before binding the
 * source (0: none). Ownership: @t points into @be.
 */
void dlb_tcp_up_target(const struct dlb_backend *be, int bind_opt, struct dlb_stream_target *t);

/**
 * A client SSL towards DNS over TLS server @be (be->tls set): its SNI and
 * the name or address its certificate must carry, offering session
 * @resume (NULL: none). Thread: any. Ownership: the caller frees the SSL
 * (dlb_stream_tls_use takes it); @resume is not kept past the handshake's
 * own reference. @return NULL on error.
 */
SSL *dlb_tcp_up_tls_new(const struct dlb_backend *be, SSL_SESSION *resume);

#endif
