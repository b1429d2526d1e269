/*
 * stream.h - a byte stream driven by a worker's libev loop: what DNS over
 * TCP (and, next, over TLS) is carried on, client side and backend side
 * (docs/architecture.md#byte-streams).
 *
 * A stream is embedded in its owner (a client connection, a backend
 * connection, a health check), which is told what happens through a
 * callback table (struct dlb_stream_cb): connected, readable, drained,
 * failed. The owner reads with dlb_stream_read when told "readable" (one
 * read per event; dnslb/core/dnsframe.h does it for DNS messages) and
 * writes with dlb_stream_writev, which sends what the socket takes now and
 * keeps the rest, copied, in a bounded write queue flushed as the socket
 * drains. Writes made before the connection is up wait in the queue.
 *
 * The bytes themselves go through an ops table (struct dlb_stream_ops):
 * dlb_stream_tcp_ops moves them on the socket as they are. A TLS stream is
 * one more file that provides an ops table (handshake after the TCP
 * connect or accept, SSL_read/SSL_write, the direction the library waits
 * for in ->want); nothing above the stream changes.
 *
 * Callbacks may free the owner (and so the stream): the stream touches
 * nothing after a callback that can close it returns false (->connected,
 * ->drained) or after ->readable and ->failed, which are always last.
 *
 * Thread: the owning worker (or the main thread for health checks): the
 * loop given to dlb_stream_init.
 */
#ifndef DNSLB_STREAM_H
#define DNSLB_STREAM_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

struct dlb_stream;

/** What went wrong, for ->failed. */
enum dlb_stream_fail {
	DLB_STREAM_CONNECT = 0,		/* the connection could not be made */
	DLB_STREAM_CONNECT_TIMEOUT,	/* ... not within the connect timeout */
	DLB_STREAM_WRITE,		/* the queued bytes could not be sent */
};

/** The owner's side: what the stream reports. @ud is dlb_stream_init's. */
struct dlb_stream_cb {
	/* The connection (and handshake) is up. @return false if the stream was closed. */
	bool (*connected)(struct dlb_stream *s, void *ud);
	/* Bytes (or the end of the stream) can be read: call dlb_stream_read once. */
	void (*readable)(struct dlb_stream *s, void *ud);
	/* The write queue has just emptied. @return false if the stream was closed. */
	bool (*drained)(struct dlb_stream *s, void *ud);
	/* The stream failed (@why, @err an errno); the owner closes it. */
	void (*failed)(struct dlb_stream *s, void *ud, enum dlb_stream_fail why, int err);
};

/** How bytes move on a stream: plain TCP, or (one file each) TLS. */
struct dlb_stream_ops {
	const char *name;
	/*
	 * The session after the TCP connect (or accept): 1 up, 0 not yet (s->want
	 * says which direction it waits for), -1 failed (errno).
	 */
	int (*handshake)(struct dlb_stream *s);
	/* Read: >0 bytes, 0 the end of the stream, -1 errno (EAGAIN: nothing now; s->want). */
	ssize_t (*recv)(struct dlb_stream *s, uint8_t *buf, size_t len);
	/* Write what it can of @iov: bytes written, -1 errno (EAGAIN: nothing now; s->want). */
	ssize_t (*sendv)(struct dlb_stream *s, const struct iovec *iov, int iovcnt);
	/*
	 * Bytes already read from the socket and waiting in the ops' own
	 * buffer (TLS decrypts whole records): the stream then reports
	 * ->readable again without waiting for the socket. NULL: never.
	 */
	bool (*pending)(struct dlb_stream *s);
	/* Release the ops' own state (s->ctx); the stream closes the socket. */
	void (*release)(struct dlb_stream *s);
};

/** The plain TCP ops: bytes as they are on the socket. */
extern const struct dlb_stream_ops dlb_stream_tcp_ops;

/* one queued write (a copy of what the socket did not take at once) */
struct dlb_stream_chunk {
	struct dlb_stream_chunk *next;
	size_t len, off;
	uint8_t data[];
};

enum dlb_stream_state {
	DLB_STREAM_CLOSED = 0,
	DLB_STREAM_CONNECTING,		/* TCP connect in progress */
	DLB_STREAM_HANDSHAKE,		/* ops->handshake in progress */
	DLB_STREAM_OPEN,
};

/** A stream. Owner: the struct it is embedded in; dlb_stream_close before freeing that. */
struct dlb_stream {
	const struct dlb_stream_ops *ops;
	void *ctx;			/* the ops' own state (a TLS session); NULL for TCP */
	const struct dlb_stream_cb *cb;
	void *ud;
	struct ev_loop *loop;
	int fd;
	uint8_t state;			/* enum dlb_stream_state */
	uint8_t reading;		/* the owner wants ->readable */
	uint8_t want;			/* EV_READ/EV_WRITE the ops wait for (TLS) */
	ev_io io;
	ev_timer connect_timer;		/* active while connecting with a timeout */
	struct dlb_stream_chunk *out_head, *out_tail;
	size_t out_bytes;		/* queued, not yet sent */
	size_t out_max;			/* dlb_stream_writev refuses to queue past this */
	double last_io;			/* loop clock of the last byte read or written */
};

/** Where to connect to, and from (a backend's address, source and interface). */
struct dlb_stream_target {
	const struct sockaddr *addr;
	socklen_t addrlen;
	const struct sockaddr *source;	/* NULL: any */
	socklen_t sourcelen;
	const char *iface;		/* SO_BINDTODEVICE; NULL or "": none */
	int bind_opt;			/* IP_BIND_ADDRESS_NO_PORT or IP_FREEBIND before bind; 0: none */
};

/**
 * Prepare @s (embedded in its owner) on @loop with @ops, reporting to @cb
 * with @ud. @out_max: the write queue's bound in bytes (a write that finds
 * the queue empty is always taken). Thread: @loop's. Ownership: keeps @ops,
 * @cb and @ud.
 */
void dlb_stream_init(struct dlb_stream *s, struct ev_loop *loop, const struct dlb_stream_ops *ops,
		     const struct dlb_stream_cb *cb, void *ud, size_t out_max);

/**
 * Take connected socket @fd (nonblocking; accepted, or one end of a
 * socketpair): the stream is open (after ops->handshake) and reading.
 * Ownership: takes @fd, closed by dlb_stream_close. @return 0, <0 dlb_err.
 */
int dlb_stream_attach(struct dlb_stream *s, int fd);

/**
 * A nonblocking socket of @type towards @t, bound to its source and
 * interface, not yet connected. @return the socket, or -1 (errno).
 */
int dlb_stream_socket(const struct dlb_stream_target *t, int type);

/**
 * Connect @s to @t over TCP (TCP_NODELAY), nonblocking; ->connected or
 * ->failed follows. @timeout: seconds (0: none) before ->failed with
 * DLB_STREAM_CONNECT_TIMEOUT. @return 0, or -1 (errno) if it failed at
 * once (nothing reported then).
 */
int dlb_stream_connect(struct dlb_stream *s, const struct dlb_stream_target *t, double timeout);

/**
 * Read once into @buf: >0 bytes, 0 the end of the stream, -1 errno (EAGAIN:
 * nothing now). Call from ->readable.
 */
ssize_t dlb_stream_read(struct dlb_stream *s, uint8_t *buf, size_t len);

/** Ask for ->readable (@on) or stop asking (backpressure). */
void dlb_stream_read_enable(struct dlb_stream *s, bool on);

/**
 * Write @iov: sent now as far as the socket takes it, the rest copied to the
 * write queue (also before the connection is up). Ownership: copies.
 * @return 0; DLB_ESPACE (nothing written) if the queue is not empty and
 * would grow past out_max; DLB_ENOMEM; -errno if the stream failed (the
 * owner closes it: nothing is reported through ->failed for this call).
 */
int dlb_stream_writev(struct dlb_stream *s, const struct iovec *iov, int iovcnt);

/** Bytes waiting in the write queue. */
static inline size_t
dlb_stream_pending(const struct dlb_stream *s)
{
	return s->out_bytes;
}

/** Stop the watchers, free the queue and the ops' state, close the socket. Idempotent. */
void dlb_stream_close(struct dlb_stream *s);

#endif
