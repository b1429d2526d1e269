/*
 * stream.c - byte streams on a libev loop (dnslb/core/stream.h), and the
 * plain TCP ops.
 *
 * One ev_io per stream, its interest recomputed from the state: writable
 * while connecting, while bytes are queued, or when the ops wait for it;
 * readable while the owner asks. The write queue is a list of copies of
 * what the socket did not take at once, flushed with one writev of up to
 * STREAM_IOV chunks per event.
 */
#include "dnslb/core/stream.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dnslb/core/dnslb.h"

#define STREAM_IOV	16	/* queued chunks sent by one writev */

/* ---- plain TCP ops ---------------------------------------------------------------- */

static int
tcp_handshake(struct dlb_stream *s)
{
	(void)s;
	return 1;	/* nothing on top of TCP */
}

static ssize_t
tcp_recv(struct dlb_stream *s, uint8_t *buf, size_t len)
{
	return recv(s->fd, buf, len, MSG_DONTWAIT);
}

static ssize_t
tcp_sendv(struct dlb_stream *s, const struct iovec *iov, int iovcnt)
{
	struct msghdr mh;

	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = (struct iovec *)(uintptr_t)iov;
	mh.msg_iovlen = (size_t)iovcnt;
	return sendmsg(s->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static void
tcp_release(struct dlb_stream *s)
{
	(void)s;
}

const struct dlb_stream_ops dlb_stream_tcp_ops = {
	.name = "tcp",
	.handshake = tcp_handshake,
	.recv = tcp_recv,
	.sendv = tcp_sendv,
	.release = tcp_release,
};

/* ---- the stream ----------------------------------------------------------------- */

static void stream_io_cb(struct ev_loop *loop, ev_io *io, int revents);
static void stream_connect_timeout_cb(struct ev_loop *loop, ev_timer *t, int revents);

void
dlb_stream_init(struct dlb_stream *s, struct ev_loop *loop, const struct dlb_stream_ops *ops,
		const struct dlb_stream_cb *cb, void *ud, size_t out_max)
{
	memset(s, 0, sizeof(*s));
	s->ops = ops;
	s->cb = cb;
	s->ud = ud;
	s->loop = loop;
	s->fd = -1;
	s->out_max = out_max;
	ev_init(&s->io, stream_io_cb);
	ev_init(&s->connect_timer, stream_connect_timeout_cb);
}

/* Watch what the state needs. */
static void
stream_update_io(struct dlb_stream *s)
{
	int ev = 0;

	switch (s->state) {
	case DLB_STREAM_CONNECTING:
		ev = EV_WRITE;
		break;
	case DLB_STREAM_HANDSHAKE:
		ev = s->want ? s->want : EV_READ;
		break;
	case DLB_STREAM_OPEN:
		ev = (s->reading ? EV_READ : 0) | (s->out_bytes > 0 ? EV_WRITE : 0) | s->want;
		break;
	default:
		return;
	}
	if (ev_is_active(&s->io) && (s->io.events & (EV_READ | EV_WRITE)) == ev)
		return;
	ev_io_stop(s->loop, &s->io);
	if (ev == 0)
		return;
	ev_io_set(&s->io, s->fd, ev);
	ev_io_start(s->loop, &s->io);
}

/* Send what the queue holds, as far as the socket takes it. @return 0, -1 (errno). */
static int
stream_flush(struct dlb_stream *s)
{
	while (s->out_head != NULL) {
		struct iovec iov[STREAM_IOV];
		struct dlb_stream_chunk *c = s->out_head;
		int n = 0;
		ssize_t sent;

		for (; c != NULL && n < STREAM_IOV; c = c->next, n++) {
			iov[n].iov_base = c->data + c->off;
			iov[n].iov_len = c->len - c->off;
		}
		s->want = 0;
		sent = s->ops->sendv(s, iov, n);
		if (sent == -1)
			return errno == EAGAIN || errno == EINTR ? 0 : -1;
		s->last_io = ev_now(s->loop);
		s->out_bytes -= (size_t)sent;
		while (sent > 0) {
			c = s->out_head;
			if ((size_t)sent < c->len - c->off) {
				c->off += (size_t)sent;
				return 0;	/* the socket is full */
			}
			sent -= (ssize_t)(c->len - c->off);
			s->out_head = c->next;
			if (s->out_head == NULL)
				s->out_tail = NULL;
			free(c);
		}
	}
	return 0;
}

/* The stream failed: stop watching, then tell the owner (last). */
static void
stream_fail(struct dlb_stream *s, enum dlb_stream_fail why, int err)
{
	ev_io_stop(s->loop, &s->io);
	ev_timer_stop(s->loop, &s->connect_timer);
	s->cb->failed(s, s->ud, why, err);
}

/* Bytes the ops hold (TLS read-ahead) will not wake the socket: report them as readable. */
static void
stream_feed_pending(struct dlb_stream *s)
{
	if (s->ops->pending != NULL && s->reading && s->ops->pending(s))
		ev_feed_event(s->loop, &s->io, EV_READ);
}

/* The TCP connection is up: the ops' handshake. @return false if @s was closed or failed. */
static bool
stream_handshake(struct dlb_stream *s)
{
	int r;

	s->state = DLB_STREAM_HANDSHAKE;
	s->want = 0;
	r = s->ops->handshake(s);
	if (r < 0) {
		stream_fail(s, DLB_STREAM_CONNECT, errno);
		return false;
	}
	if (r == 0) {
		stream_update_io(s);
		return false;	/* not yet */
	}
	ev_timer_stop(s->loop, &s->connect_timer);
	s->state = DLB_STREAM_OPEN;
	s->want = 0;
	s->last_io = ev_now(s->loop);
	if (s->cb->connected != NULL && !s->cb->connected(s, s->ud))
		return false;
	stream_feed_pending(s);	/* what the handshake read beyond itself */
	return true;
}

static void
stream_io_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct dlb_stream *s = container_of(io, struct dlb_stream, io);
	bool opened = false;

	(void)loop;
	if (s->state == DLB_STREAM_CONNECTING) {
		int err = 0;
		socklen_t el = sizeof(err);

		if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &el) == -1)
			err = errno;
		if (err != 0) {
			stream_fail(s, DLB_STREAM_CONNECT, err);
			return;
		}
		if (!stream_handshake(s))
			return;
		opened = true;
	} else if (s->state == DLB_STREAM_HANDSHAKE) {
		if (!stream_handshake(s))
			return;
		opened = true;
	}
	if (s->out_bytes > 0 && (opened || (revents & EV_WRITE) || (s->want & revents))) {
		if (stream_flush(s) == -1) {
			stream_fail(s, DLB_STREAM_WRITE, errno);
			return;
		}
		if (s->out_bytes == 0 && s->cb->drained != NULL && !s->cb->drained(s, s->ud))
			return;
	}
	stream_update_io(s);
	if ((revents & EV_READ) && s->reading && s->cb->readable != NULL)
		s->cb->readable(s, s->ud);	/* last: it may close the stream */
}

static void
stream_connect_timeout_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct dlb_stream *s = container_of(t, struct dlb_stream, connect_timer);

	(void)loop, (void)revents;
	stream_fail(s, DLB_STREAM_CONNECT_TIMEOUT, ETIMEDOUT);
}

int
dlb_stream_attach(struct dlb_stream *s, int fd)
{
	s->fd = fd;
	s->state = DLB_STREAM_HANDSHAKE;
	s->reading = 1;
	s->last_io = ev_now(s->loop);
	s->want = 0;
	switch (s->ops->handshake(s)) {
	case 1:
		s->state = DLB_STREAM_OPEN;
		s->want = 0;
		break;
	case 0:
		break;	/* ->connected follows */
	default:
		return -errno;
	}
	stream_update_io(s);
	if (s->state == DLB_STREAM_OPEN)
		stream_feed_pending(s);	/* the handshake's last read took what followed it too */
	return 0;
}

int
dlb_stream_socket(const struct dlb_stream_target *t, int type)
{
	int fd = socket(t->addr->sa_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;

	if (fd == -1)
		return -1;
	if (t->iface != NULL && t->iface[0] != '\0')
		setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, t->iface, (socklen_t)strlen(t->iface));
	if (t->source != NULL && t->source->sa_family != 0) {
		if (t->bind_opt != 0)
			setsockopt(fd, IPPROTO_IP, t->bind_opt, &one, sizeof(one));
		if (bind(fd, t->source, t->sourcelen) == -1) {
			int err = errno;

			close(fd);
			errno = err;
			return -1;
		}
	}
	return fd;
}

int
dlb_stream_connect(struct dlb_stream *s, const struct dlb_stream_target *t, double timeout)
{
	int fd = dlb_stream_socket(t, SOCK_STREAM);
	int one = 1;

	if (fd == -1)
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, t->addr, t->addrlen) == -1 && errno != EINPROGRESS) {
		int err = errno;

		close(fd);
		errno = err;
		return -1;
	}
	/* even a connect done at once is reported from the loop, as any other */
	s->fd = fd;
	s->state = DLB_STREAM_CONNECTING;
	s->reading = 1;
	s->want = 0;
	s->last_io = ev_now(s->loop);
	if (timeout > 0) {
		ev_timer_set(&s->connect_timer, timeout, 0.);
		ev_timer_start(s->loop, &s->connect_timer);
	}
	stream_update_io(s);
	return 0;
}

ssize_t
dlb_stream_read(struct dlb_stream *s, uint8_t *buf, size_t len)
{
	ssize_t n;

	s->want = 0;
	n = s->ops->recv(s, buf, len);
	if (n > 0) {
		s->last_io = ev_now(s->loop);
		stream_feed_pending(s);
	}
	return n;
}

void
dlb_stream_read_enable(struct dlb_stream *s, bool on)
{
	s->reading = on;
	stream_update_io(s);
	if (on && s->state == DLB_STREAM_OPEN)
		stream_feed_pending(s);	/* bytes read ahead while reading was off */
}

int
dlb_stream_writev(struct dlb_stream *s, const struct iovec *iov, int iovcnt)
{
	struct dlb_stream_chunk *c;
	size_t total = 0, skip = 0, off = 0;

	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	if (s->out_head != NULL && s->out_bytes + total > s->out_max)
		return DLB_ESPACE;
	if (s->out_head == NULL && s->state == DLB_STREAM_OPEN) {
		ssize_t n;

		s->want = 0;
		n = s->ops->sendv(s, iov, iovcnt);
		if (n == -1 && errno != EAGAIN && errno != EINTR)
			return -errno;
		if (n > 0) {
			s->last_io = ev_now(s->loop);
			skip = (size_t)n;
		}
		if (skip == total) {
			stream_update_io(s);
			return 0;
		}
	}
	c = malloc(sizeof(*c) + total - skip);
	if (c == NULL)
		return DLB_ENOMEM;
	for (int i = 0; i < iovcnt; i++) {
		const uint8_t *p = iov[i].iov_base;
		size_t l = iov[i].iov_len;

		if (skip >= l) {
			skip -= l;
			continue;
		}
		memcpy(c->data + off, p + skip, l - skip);
		off += l - skip;
		skip = 0;
	}
	c->next = NULL;
	c->len = off;
	c->off = 0;
	if (s->out_tail != NULL)
		s->out_tail->next = c;
	else
		s->out_head = c;
	s->out_tail = c;
	s->out_bytes += off;
	stream_update_io(s);
	return 0;
}

void
dlb_stream_close(struct dlb_stream *s)
{
	ev_io_stop(s->loop, &s->io);
	ev_timer_stop(s->loop, &s->connect_timer);
	while (s->out_head != NULL) {
		struct dlb_stream_chunk *c = s->out_head;

		s->out_head = c->next;
		free(c);
	}
	s->out_tail = NULL;
	s->out_bytes = 0;
	if (s->ctx != NULL)
		s->ops->release(s);
	s->ctx = NULL;
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	s->state = DLB_STREAM_CLOSED;
	s->reading = 0;
	s->want = 0;
}
