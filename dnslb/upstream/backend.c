/*
 * backend.c - UDP towards backends: random IDs from the in-flight table,
 * batched sends, answer matching, exact timeouts.
 *
 * Sockets: each worker has one unconnected UDP socket per (address family,
 * UDP timeout) that every backend without source=, sockets>1 or tcpOnly
 * shares, so a batch of queries spread over many backends is still one
 * sendmmsg and their answers one recvmmsg. An answer on it must come from the
 * address of the backend its ID was given to (checked here, as a connected
 * socket's kernel would). Each backend also has its own connected socket(s)
 * (`sockets=N`): the only ones for the backends that cannot share, and the
 * overflow for the others when the shared socket's ID table is full.
 *
 * The pipeline (dnslb/pipeline/forward.c) fills a slot and hands it over with
 * dlb_backend_send; every slot then ends once through the worker's
 * upstream sink (dnslb/core/sink.h), with its matched answer, a timeout or a send
 * error, and release_slot, the one place a slot leaves its in-flight table,
 * frees it. This file knows nothing of clients, rules or the cache.
 */
#include "dnslb/upstream/backend.h"

#include <net/if.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dnslb/core/config.h"
#include "dnslb/core/log.h"
#include "dnslb/core/sink.h"
#include "dnslb/core/wstate.h"


static void be_read_cb(struct ev_loop *loop, ev_io *io, int revents);

static int
open_be_socket(const struct dlb_backend *be)
{
	int fd = socket(be->addr.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;

	if (fd == -1)
		return -1;
	if (be->source_iface[0] != '\0' &&
	    setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, be->source_iface,
		       (socklen_t)strlen(be->source_iface)) == -1)
		goto out_close;
	if (be->source.ss_family != 0) {
		setsockopt(fd, IPPROTO_IP, IP_FREEBIND, &one, sizeof(one));
		if (bind(fd, (const struct sockaddr *)&be->source, be->sourcelen) == -1)
			goto out_close;
	}
	if (connect(fd, (const struct sockaddr *)&be->addr, be->addrlen) == -1)
		goto out_close;
	return fd;
out_close:
	close(fd);
	return -1;
}

/* Can @be's UDP go through the worker's shared unconnected socket? */
static bool
be_can_share(const struct dlb_backend *be)
{
	const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)(const void *)&be->addr;

	if (be->tcp_only || be->sockets > 1 || be->source.ss_family != 0 ||
	    be->source_iface[0] != '\0')
		return false;
	/* link-local: the answer's scope would have to match too */
	return be->addr.ss_family == AF_INET ||
	       (be->addr.ss_family == AF_INET6 && !IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr));
}

/*
 * The worker's shared socket for @family and @timeout, opened on first use.
 * @return NULL when it cannot be had (DLB_MAX_SHARED_SOCKS distinct pairs,
 * no memory or no fd): the backend then uses its own sockets only.
 */
static struct dlb_be_sock *
shared_sock(struct dlb_worker *w, int family, double timeout)
{
	struct dlb_be_sock *s;
	int rcvbuf = 4 << 20;	/* the answers of all backends (capped by rmem_max) */

	for (int i = 0; i < w->nshared; i++)
		if (w->shared[i]->family == family && w->shared[i]->timeout == timeout)
			return w->shared[i];
	if (w->nshared == DLB_MAX_SHARED_SOCKS)
		return NULL;
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return NULL;
	s->w = w;
	s->be_index = -1;
	s->family = family;
	s->timeout = timeout;
	/* every ID: setMaxUDPOutstanding is a per-backend bound (take_id) */
	if (dlb_inflight_init(&s->table, 65536) != DLB_OK) {
		free(s);
		return NULL;
	}
	s->fd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s->fd == -1) {
		dlb_inflight_deinit(&s->table);
		free(s);
		return NULL;
	}
	setsockopt(s->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	dlb_sendbatch_init(&s->out, s->fd);
	ev_io_init(&s->io, be_read_cb, s->fd, EV_READ);
	w->shared[w->nshared++] = s;
	return s;
}

void
dlb_backend_shared_close(struct dlb_worker *w)
{
	for (int i = 0; i < w->nshared; i++) {
		struct dlb_be_sock *s = w->shared[i];

		ev_io_stop(w->loop, &s->io);
		close(s->fd);
		dlb_inflight_deinit(&s->table);
		free(s);
		w->shared[i] = NULL;
	}
	w->nshared = 0;
}

int
dlb_backend_local_open(struct dlb_worker *w, const struct dlb_backend *be)
{
	struct dlb_be_local *bl = &w->be[be->index];
	/* opened by dlb_worker_new before the first publication (main thread: the
	 * builder's value), or by the worker in a loop iteration (its snapshot's) */
	int global_ms = w->snap != NULL ? w->snap->set.udp_timeout_ms : w->cfg->set.udp_timeout_ms;

	memset(bl, 0, sizeof(*bl));
	bl->timeout = (be->udp_timeout_ms > 0 ? be->udp_timeout_ms : global_ms) / 1000.0;
	if (be_can_share(be))
		bl->shared = shared_sock(w, be->addr.ss_family, bl->timeout);
	bl->nsocks = be->sockets > 0 ? be->sockets : 1;
	bl->udp_max = (uint32_t)w->cfg->max_udp_outstanding * (uint32_t)bl->nsocks;
	bl->socks = calloc((size_t)bl->nsocks, sizeof(*bl->socks));
	if (bl->socks == NULL) {
		bl->nsocks = 0;
		return -1;
	}
	for (int i = 0; i < bl->nsocks; i++)
		bl->socks[i].fd = -1;	/* a failure half-way closes only what was opened */
	for (int i = 0; i < bl->nsocks; i++) {
		struct dlb_be_sock *s = &bl->socks[i];

		s->w = w;
		s->be_index = be->index;
		if (dlb_inflight_init(&s->table, (uint32_t)w->cfg->max_udp_outstanding) != DLB_OK)
			return -1;
		if (be->tcp_only)
			continue;
		s->fd = open_be_socket(be);
		if (s->fd == -1) {
			dlb_err("Unable to open a UDP socket towards %s: %s", be->addr_text,
				strerror(errno));
			return -1;
		}
		dlb_sendbatch_init(&s->out, s->fd);
	}
	return 0;
}

void
dlb_backend_local_close(struct dlb_worker *w, int be_index)
{
	struct dlb_be_local *bl = &w->be[be_index];

	for (int i = 0; i < bl->nsocks; i++) {
		struct dlb_be_sock *s = &bl->socks[i];

		if (s->fd >= 0) {
			ev_io_stop(w->loop, &s->io);
			close(s->fd);
		}
		dlb_inflight_deinit(&s->table);
	}
	free(bl->socks);
	bl->socks = NULL;
	bl->nsocks = 0;
	bl->shared = NULL;	/* stays open for the others: dlb_backend_shared_close */
}

/*
 * Give slot @idx an ID towards the backend of @bl, due at @deadline: on the
 * shared socket, or on one of the backend's own when the shared table is
 * full (or it has none). @return the ID and *@sp, or < 0 when the backend
 * has setMaxUDPOutstanding queries in flight (per socket of its own) or
 * every table is full.
 */
static int
take_id(struct dlb_worker *w, struct dlb_be_local *bl, uint32_t idx, double deadline,
	struct dlb_be_sock **sp)
{
	int id = DLB_EFULL;

	if (bl->udp_count >= bl->udp_max)
		return DLB_EFULL;
	if (bl->shared != NULL) {
		id = dlb_inflight_add(&bl->shared->table, &w->slots, &w->rng, idx, deadline);
		*sp = bl->shared;
	}
	if (id < 0 && bl->nsocks > 0) {
		*sp = &bl->socks[bl->next_sock++ % (unsigned)bl->nsocks];
		id = dlb_inflight_add(&(*sp)->table, &w->slots, &w->rng, idx, deadline);
	}
	if (id >= 0)
		bl->udp_count++;
	return id;
}

/* Send @buf to @be from @s at once (the rare unbatched sends). */
static ssize_t
send_now(const struct dlb_be_sock *s, const struct dlb_backend *be, const void *buf, size_t len)
{
	if (s->be_index < 0)
		return sendto(s->fd, buf, len, MSG_DONTWAIT, (const struct sockaddr *)&be->addr,
			      be->addrlen);
	return send(s->fd, buf, len, MSG_DONTWAIT);
}

/* ---- timeouts ----------------------------------------------------------- */

static void arm_timer(struct dlb_worker *w, double deadline);
static void release_slot(struct dlb_worker *w, struct dlb_be_sock *s, uint32_t idx);

static void
arm_timer(struct dlb_worker *w, double deadline)
{
	double now, after;

	dlb_worker_clock_sync(w);	/* libev's clock, which the timer runs on, is now */
	now = dlb_worker_now(w);
	after = deadline - now;

	if (after < 0.0005)
		after = 0.0005;
	if (ev_is_active(&w->timeout_timer)) {
		if (ev_timer_remaining(w->loop, &w->timeout_timer) <= after)
			return;
		ev_timer_stop(w->loop, &w->timeout_timer);
	}
	ev_timer_set(&w->timeout_timer, after, 0.);
	ev_timer_start(w->loop, &w->timeout_timer);
}

/* Take slot @idx out of @s's table (its ID becomes free); the slot stays allocated. */
static void
untake_id(struct dlb_worker *w, struct dlb_be_sock *s, uint32_t idx)
{
	struct dlb_slot *slot = dlb_slot_get(&w->slots, idx);

	w->be_stats[slot->be_index].outstanding--;
	w->be[slot->be_index].udp_count--;
	dlb_inflight_remove(&s->table, &w->slots, idx);
}

static void
release_slot(struct dlb_worker *w, struct dlb_be_sock *s, uint32_t idx)
{
	untake_id(w, s, idx);
	dlb_slot_free(&w->slots, idx);
}

/* Expire the queries of @s due by @now; keep the earliest deadline left in *@next. */
static void
expire_sock(struct dlb_worker *w, struct dlb_be_sock *s, double now, double *next)
{
	uint32_t idx;

	while ((idx = dlb_inflight_oldest(&s->table)) != DLB_SLOT_NONE) {
		struct dlb_slot *slot = dlb_slot_get(&w->slots, idx);

		if (slot->deadline > now) {
			if (*next == 0 || slot->deadline < *next)
				*next = slot->deadline;
			return;
		}
		w->up_sink->end(w, slot, DLB_END_TIMEOUT);
		release_slot(w, s, idx);
	}
}

void
dlb_backend_timeout_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct dlb_worker *w = ev_userdata(loop);
	double now = ev_now(loop);
	double next = 0;

	for (int i = 0; i < w->nshared; i++)
		expire_sock(w, w->shared[i], now, &next);
	for (int b = 0; b < w->nbe; b++) {
		struct dlb_be_local *bl = &w->be[b];

		for (int i = 0; i < bl->nsocks; i++)
			expire_sock(w, &bl->socks[i], now, &next);
	}
	if (next != 0)
		arm_timer(w, next);
}

/* ---- sending ------------------------------------------------------------ */

static void
be_sock_flush(struct dlb_worker *w, struct dlb_be_sock *s)
{
	uint32_t failed[DLB_UDP_BATCH];
	unsigned nf;

	if (s->out.n == 0)
		return;
	nf = dlb_sendbatch_flush(&s->out, failed, DLB_UDP_BATCH);
	for (unsigned i = 0; i < nf && i < DLB_UDP_BATCH; i++) {
		uint32_t idx = s->tags[failed[i]];
		struct dlb_slot *slot = dlb_slot_get(&w->slots, idx);

		w->stats.downstream_send_errors++;
		w->be_stats[slot->be_index].send_errors++;
		w->up_sink->end(w, slot, DLB_END_SEND_ERROR);
		release_slot(w, s, idx);
	}
}

DLB_HOT void
dlb_backend_flush(struct dlb_worker *w)
{
	if (w->be_queued == 0)
		return;		/* every batch of cache hits */
	w->be_queued = 0;
	for (int i = 0; i < w->nshared; i++)
		if (w->shared[i]->out.n > 0)
			be_sock_flush(w, w->shared[i]);
	for (int b = 0; b < w->nbe; b++) {
		struct dlb_be_local *bl = &w->be[b];

		for (int i = 0; i < bl->nsocks; i++)
			if (bl->socks[i].out.n > 0)
				be_sock_flush(w, &bl->socks[i]);
	}
}

int
dlb_backend_send(struct dlb_worker *w, const struct dlb_backend *be, uint32_t idx, double start,
		 uint8_t *pkt, size_t len, size_t id_off, bool now)
{
	struct dlb_be_local *bl = &w->be[be->index];
	struct dlb_slot *slot = dlb_slot_get(&w->slots, idx);
	struct dlb_be_sock *s;
	struct msghdr *mh;
	int id;

	slot->be_index = be->index;
	id = take_id(w, bl, idx, start + bl->timeout, &s);
	if (id < 0)
		return DLB_EFULL;
	/* an answer on the shared socket must come from the address asked */
	slot->src = s->be_index < 0 ? (const struct sockaddr *)&be->addr : NULL;
	w->be_stats[be->index].queries++;
	w->be_stats[be->index].outstanding++;
	if (!ev_is_active(&w->timeout_timer) || now)
		arm_timer(w, slot->deadline);
	dlb_wr16(pkt + id_off, (uint16_t)id);
	if (now) {
		if (send_now(s, be, pkt, len) == -1) {
			w->be_stats[be->index].send_errors++;
			untake_id(w, s, idx);	/* the slot is the caller's again */
			return -1;
		}
		return 0;
	}
	if (s->out.n == DLB_UDP_BATCH)
		be_sock_flush(w, s);
	mh = &s->out.msgs[s->out.n].msg_hdr;
	s->out.iov[s->out.n].iov_base = pkt;
	s->out.iov[s->out.n].iov_len = len;
	if (s->be_index < 0) {
		memcpy(&s->out.addr[s->out.n], &be->addr, be->addrlen);
		mh->msg_name = &s->out.addr[s->out.n];
		mh->msg_namelen = be->addrlen;
	} else {
		mh->msg_name = NULL;	/* connected */
		mh->msg_namelen = 0;
	}
	mh->msg_iov = &s->out.iov[s->out.n];
	mh->msg_iovlen = 1;
	mh->msg_control = NULL;		/* no ancillary data */
	mh->msg_controllen = 0;
	s->tags[s->out.n] = idx;
	mh->msg_flags = 0;
	s->out.n++;
	w->be_queued++;
	return 0;
}

/* ---- answers ------------------------------------------------------------ */

static DLB_HOT void
handle_answer(struct dlb_worker *w, struct dlb_be_sock *s, unsigned i)
{
	uint8_t *pkt = w->rbuf[i];
	size_t len = w->rmsgs[i].msg_len;
	enum dlb_answer_match m;
	uint32_t idx;

	/*
	 * What dnsdist 1.7 never counts as noncompliant is not counted here
	 * either: a short datagram, an unknown, duplicate or late ID, an
	 * answer from another address (its connected socket never sees one)
	 * and an answer for another question. Those that do not match leave
	 * the query waiting for the real answer.
	 */
	if (w->rmsgs[i].msg_hdr.msg_flags & MSG_TRUNC)
		return;
	idx = dlb_inflight_match(&s->table, &w->slots, pkt, len,
				 s->be_index < 0 ? &w->raddr[i].sa : NULL,
				 w->snap->set.allow_empty_response, &m);
	if (idx == DLB_SLOT_NONE) {
		if (m == DLB_ANSWER_NONCOMPLIANT)
			w->stats.noncompliant_responses++;
		return;
	}
	if (w->snap->set.truncate_tc && (pkt[2] & (DLB_F_TC >> 8)))
		len = dlb_wire_truncate_tc(pkt, len, w->snap->set.selfans.add_edns);
	w->up_sink->answer(w, dlb_slot_get(&w->slots, idx), pkt, len, true);
	release_slot(w, s, idx);
}

static void
be_read_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct dlb_be_sock *s = container_of(io, struct dlb_be_sock, io);
	struct dlb_worker *w = s->w;

	for (int round = 0; round < 4; round++) {
		int n = dlb_worker_recv_batch(w, s->fd, DLB_UDP_BATCH);

		if (n == 0)
			break;
		for (int i = 0; i < n; i++)
			handle_answer(w, s, (unsigned)i);
		w->up_sink->batch_end(w);
		if (n < DLB_UDP_BATCH)
			break;
	}
}

void
dlb_backend_local_start(struct dlb_worker *w, int be_index)
{
	struct dlb_be_local *bl = &w->be[be_index];

	if (bl->shared != NULL && !ev_is_active(&bl->shared->io))
		ev_io_start(w->loop, &bl->shared->io);
	for (int i = 0; i < bl->nsocks; i++) {
		struct dlb_be_sock *s = &bl->socks[i];

		if (s->fd < 0)
			continue;
		ev_io_init(&s->io, be_read_cb, s->fd, EV_READ);
		ev_io_start(w->loop, &s->io);
	}
}
