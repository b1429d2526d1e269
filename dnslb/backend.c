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
 * setMaxOutstandingPerClient (dnslb/abuse.h): a forwarded query of a client
 * takes a place in the worker's per-client table and marks its slot
 * (client_counted); release_slot, the one place a slot leaves its in-flight
 * table, gives it back. A failover retry is a new slot of the same client:
 * it takes its own place before the old slot is released.
 */
#include "dnslb/backend.h"

#include <net/if.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dnslb/abuse.h"
#include "dnslb/config.h"
#include "dnslb/dynblock.h"
#include "dnslb/frontend.h"
#include "dnslb/log.h"
#include "dnslb/netmask.h"
#include "dnslb/proxyproto.h"
#include "dnslb/query.h"
#include "dnslb/rings.h"
#include "dnslb/tcp.h"
#include "dnslb/worker.h"


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

	memset(bl, 0, sizeof(*bl));
	bl->timeout = (be->udp_timeout_ms > 0 ? be->udp_timeout_ms : w->cfg->udp_timeout_ms) / 1000.0;
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

/*
 * setFailover{}: send the query of @old once more, to another server of its
 * pool (or of the failover pool), if the client's budget allows. The caller
 * still releases @old. @return true if the retry is on its way.
 */
static bool
failover_retry(struct dlb_worker *w, const struct dlb_slot *old)
{
	const struct dlb_config *cfg = w->cfg;
	double now = dlb_worker_now(w);
	const struct dlb_pool *pool = old->pool;
	struct dlb_backend *be = NULL;
	struct dlb_be_local *bl;
	struct dlb_be_sock *s;
	struct dlb_slot *ns;
	uint8_t buf[DLB_PP2_MAX + DLB_SLOT_QUERY_MAX];
	size_t off = 0;
	uint32_t idx, self;
	int id;

	if (old->retried || old->qlen == 0 || old->client.proto != DLB_CLIENT_UDP ||
	    now - old->client.t_start >= cfg->failover_budget)
		return false;
	if (cfg->failover_other_pool)
		pool = dlb_config_find_pool(cfg, cfg->failover_pool);
	if (pool == NULL || pool->n == 0)
		return false;
	for (int i = 0, start = (int)(w->rr_counter++ % (unsigned)pool->n); i < pool->n; i++) {
		struct dlb_backend *c = pool->members[(start + i) % pool->n];

		if (c->index != old->be_index && !c->tcp_only && dlb_backend_is_up(c)) {
			be = c;
			break;
		}
	}
	if (be == NULL)
		return false;
	bl = &w->be[be->index];
	idx = dlb_slot_alloc(&w->slots);
	if (idx == DLB_SLOT_NONE)
		return false;
	ns = dlb_slot_get(&w->slots, idx);
	self = ns->self;
	*ns = *old;
	ns->self = self;
	ns->retried = 1;
	ns->be_index = be->index;
	id = take_id(w, bl, idx, now + bl->timeout, &s);
	if (id < 0) {
		dlb_slot_free(&w->slots, idx);
		return false;
	}
	/* the copy holds a place of its own: @old gives its back when released */
	if (ns->client_counted && w->client_oc != NULL)
		dlb_coc_acquire(w->client_oc, &ns->client.peer.sa, UINT32_MAX);
	w->be_stats[be->index].queries++;
	w->be_stats[be->index].outstanding++;
	arm_timer(w, now + bl->timeout);
	if (be->use_proxy_protocol)
		off = dlb_query_pp_header(w, &old->client, false, buf);
	memcpy(buf + off, old->query, old->qlen);
	dlb_wr16(buf + off, (uint16_t)id);
	/* rare: sent at once rather than batched */
	if (send_now(s, be, buf, off + old->qlen) == -1) {
		w->be_stats[be->index].send_errors++;
		release_slot(w, s, idx);
		return false;
	}
	w->stats.failover_retries++;
	return true;
}

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

static void
release_slot(struct dlb_worker *w, struct dlb_be_sock *s, uint32_t idx)
{
	struct dlb_slot *slot = dlb_slot_get(&w->slots, idx);

	w->be_stats[slot->be_index].outstanding--;
	w->be[slot->be_index].udp_count--;
	dlb_oc_release(w, slot);
	dlb_inflight_remove(&s->table, &w->slots, idx);
	dlb_slot_free(&w->slots, idx);
}

/* Expire the queries of @s due by @now; keep the earliest deadline left in *@next. */
static void
expire_sock(struct dlb_worker *w, struct dlb_be_sock *s, double now, double *next)
{
	uint32_t idx;

	while ((idx = dlb_inflight_oldest(&s->table)) != DLB_SLOT_NONE) {
		struct dlb_slot *slot = dlb_slot_get(&w->slots, idx);
		int b = slot->be_index;

		if (slot->deadline > now) {
			if (*next == 0 || slot->deadline < *next)
				*next = slot->deadline;
			return;
		}
		w->be_stats[b].drops++;
		dlb_rings_slot(w, slot, NULL, 0, b);
		if (slot->client.proto != DLB_CLIENT_INTERNAL &&
		    !(w->cfg->failover_on_timeout && failover_retry(w, slot))) {
			w->stats.downstream_timeouts++;
			dlb_dyn_answer(w, &slot->client.peer.sa, slot->key.qname_lc,
				       slot->key.qname_len, 0, 0, DLB_DYN_FROM_TIMEOUT);
			dlb_query_answer_stale(w, slot);
		}
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

		w->stats.downstream_send_errors++;
		w->be_stats[dlb_slot_get(&w->slots, idx)->be_index].send_errors++;
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

/* Answer a UDP query we do not forward with @rcode, in place; counted by the caller. */
static void
answer_rcode(struct dlb_worker *w, struct dlb_query *q, const struct dlb_client *c, uint8_t rcode)
{
	int n = dlb_wire_build_answer(q->pkt, &q->m, rcode, &w->cfg->selfans, q->pkt, q->cap);

	if (n < 0)
		return;
	w->stats.self_answered++;
	dlb_rings_local_answer(w, q, q->pkt, (size_t)n);
	dlb_query_account_answer(w, q->pkt, (size_t)n, c->t_start);
	dlb_frontend_queue_reply(w, c, q->pkt, (size_t)n);
}

static void
answer_servfail(struct dlb_worker *w, struct dlb_query *q, const struct dlb_client *c)
{
	answer_rcode(w, q, c, DLB_RCODE_SERVFAIL);
}

void
dlb_backend_answer_over_cap(struct dlb_worker *w, struct dlb_query *q, const struct dlb_client *c)
{
	switch (w->cfg->oc_action) {
	case DLB_OC_REFUSED:
		answer_rcode(w, q, c, DLB_RCODE_REFUSED);
		break;
	case DLB_OC_SERVFAIL:
		answer_rcode(w, q, c, DLB_RCODE_SERVFAIL);
		break;
	default:
		break;	/* drop: counted in client-outstanding-exceeded only */
	}
}

void
dlb_backend_forward(struct dlb_worker *w, struct dlb_query *q, const struct dlb_client *c)
{
	struct dlb_backend *be = q->be;
	struct dlb_be_local *bl = &w->be[be->index];
	struct dlb_be_sock *s;
	struct dlb_slot *slot;
	struct msghdr *mh;
	size_t off = 0;
	uint32_t idx;
	int id;
	enum dlb_coc_result oc;

	if (q->tcp || be->tcp_only) {
		dlb_tcp_forward(w, q, c);	/* checks setMaxOutstandingPerClient itself */
		return;
	}
	oc = dlb_oc_acquire(w, &c->peer.sa);
	if (oc == DLB_COC_OVER) {
		dlb_backend_answer_over_cap(w, q, c);
		return;
	}
	idx = dlb_slot_alloc(&w->slots);
	if (idx == DLB_SLOT_NONE) {
		if (oc == DLB_COC_ACQUIRED)
			dlb_coc_release(w->client_oc, &c->peer.sa);
		w->stats.inflight_full++;
		w->be_stats[be->index].refused++;
		answer_servfail(w, q, c);
		return;
	}
	slot = dlb_slot_get(&w->slots, idx);
	id = take_id(w, bl, idx, c->t_start + bl->timeout, &s);
	if (id < 0) {
		/* never overwrite a query in flight: refuse this one */
		if (oc == DLB_COC_ACQUIRED)
			dlb_coc_release(w->client_oc, &c->peer.sa);
		dlb_slot_free(&w->slots, idx);
		w->stats.inflight_full++;
		w->be_stats[be->index].refused++;
		answer_servfail(w, q, c);
		return;
	}
	dlb_query_fill_slot(slot, q, c);
	slot->client_counted = oc == DLB_COC_ACQUIRED;
	if (q->ecslen > 0 || (q->has_dq && q->dq.edns_added))
		q->len = dlb_query_add_ecs(w, q, q->pkt, q->len, q->cap, &slot->ecs_added);
	if ((w->cfg->failover_on_timeout || w->cfg->failover_on_servfail) &&
	    q->len <= DLB_SLOT_QUERY_MAX) {
		memcpy(slot->query, q->pkt, q->len);	/* kept for one retry */
		slot->qlen = (uint16_t)q->len;
	}
	w->be_stats[be->index].queries++;
	w->be_stats[be->index].outstanding++;
	if (!ev_is_active(&w->timeout_timer))
		arm_timer(w, slot->deadline);

	if (be->use_proxy_protocol) {
		uint8_t hdr[DLB_PP2_MAX];
		size_t hl = dlb_query_pp_header(w, c, false, hdr);

		if (q->len + hl <= q->cap) {
			memmove(q->pkt + hl, q->pkt, q->len);
			memcpy(q->pkt, hdr, hl);
			q->len += hl;
			off = hl;
		}
	}
	dlb_wr16(q->pkt + off, (uint16_t)id);
	if (s->out.n == DLB_UDP_BATCH)
		be_sock_flush(w, s);
	mh = &s->out.msgs[s->out.n].msg_hdr;
	s->out.iov[s->out.n].iov_base = q->pkt;
	s->out.iov[s->out.n].iov_len = q->len;
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
}

void
dlb_backend_prefetch(struct dlb_worker *w, const struct dlb_query *q)
{
	struct dlb_backend *be = q->be;
	struct dlb_be_local *bl = &w->be[be->index];
	struct dlb_client c;
	struct dlb_be_sock *s;
	uint8_t buf[4096];
	uint32_t idx;
	size_t len, off = 0;
	int id;

	memset(&c, 0, sizeof(c));
	c.proto = DLB_CLIENT_INTERNAL;
	c.orig_id = q->m.id;
	c.orig_flags = q->orig_flags;
	c.t_start = dlb_worker_now(w);
	if (q->tcp || be->tcp_only) {
		struct dlb_query copy = *q;

		/* dlb_tcp_forward copies the query into its own frame */
		dlb_tcp_forward(w, &copy, &c);
		return;
	}
	if (q->len > sizeof(buf))
		return;
	idx = dlb_slot_alloc(&w->slots);
	if (idx == DLB_SLOT_NONE)
		return;
	id = take_id(w, bl, idx, c.t_start + bl->timeout, &s);
	if (id < 0) {
		dlb_slot_free(&w->slots, idx);
		return;
	}
	dlb_query_fill_slot(dlb_slot_get(&w->slots, idx), q, &c);
	dlb_slot_get(&w->slots, idx)->client_counted = 0;	/* no client */
	w->be_stats[be->index].queries++;
	w->be_stats[be->index].outstanding++;
	if (!ev_is_active(&w->timeout_timer))
		arm_timer(w, c.t_start + bl->timeout);
	/* rare (once per entry and TTL): sent at once rather than batched */
	if (be->use_proxy_protocol)
		off = dlb_pp2_local(buf);
	memcpy(buf + off, q->pkt, q->len);
	len = dlb_query_add_ecs(w, q, buf + off, q->len, sizeof(buf) - off,
				&dlb_slot_get(&w->slots, idx)->ecs_added);
	dlb_wr16(buf + off, (uint16_t)id);
	if (send_now(s, be, buf, off + len) == -1) {
		w->be_stats[be->index].send_errors++;
		release_slot(w, s, idx);
	}
}

/* ---- answers ------------------------------------------------------------ */

static void
handle_answer(struct dlb_worker *w, struct dlb_be_sock *s, unsigned i)
{
	uint8_t *pkt = w->rbuf[i];
	size_t len = w->rmsgs[i].msg_len;
	struct dlb_slot *slot;
	uint32_t idx, delay_ms;

	/*
	 * What dnsdist 1.7 never counts as noncompliant is not counted here
	 * either: a short datagram, an unknown, duplicate or late ID, an
	 * answer from another address (its connected socket never sees one)
	 * and an answer for another question.
	 */
	if (len < DLB_DNS_HDR || (w->rmsgs[i].msg_hdr.msg_flags & MSG_TRUNC))
		return;
	idx = dlb_inflight_lookup(&s->table, dlb_rd16(pkt));
	if (idx == DLB_SLOT_NONE)
		return;		/* unknown, duplicate or late (after its timeout): never delivered */
	slot = dlb_slot_get(&w->slots, idx);
	if (s->be_index < 0 &&
	    !dlb_sockaddr_equal(&w->raddr[i].sa,
				(const struct sockaddr *)&w->cfg->backends[slot->be_index]->addr))
		return;		/* shared socket: not from the server this ID was sent to */
	switch (dlb_query_response_matches(w, pkt, len, slot)) {
	case DLB_ANSWER_OK:
		break;
	case DLB_ANSWER_NONCOMPLIANT:
		w->stats.noncompliant_responses++;
		return;		/* the query keeps waiting for the real answer */
	case DLB_ANSWER_OTHER:
		return;		/* spoofed: the query keeps waiting for the real answer */
	}
	if (w->cfg->truncate_tc && (pkt[2] & (DLB_F_TC >> 8)))
		len = dlb_wire_truncate_tc(pkt, len, w->cfg->selfans.add_edns);
	if (w->cfg->failover_on_servfail && DLB_RCODE(pkt[3]) == DLB_RCODE_SERVFAIL &&
	    failover_retry(w, slot)) {
		/* the client waits for the other server's answer */
		w->be_stats[slot->be_index].responses++;
		w->be_stats[slot->be_index].servfails++;
		release_slot(w, s, idx);
		return;
	}
	len = dlb_query_finish_response(w, &pkt, len, slot, &delay_ms);
	if (len == 0) {
		/* dropped by a response rule, or a prefetch */
		if (slot->client.proto == DLB_CLIENT_TCP)
			dlb_tcp_drop(w, &slot->client);
	} else if (slot->client.proto == DLB_CLIENT_TCP) {
		dlb_tcp_deliver(w, &slot->client, pkt, len);
	} else {
		len = dlb_query_fit_udp(w, &slot->client, pkt, len);
		if (delay_ms > 0)
			dlb_worker_delay_reply(w, &slot->client, pkt, len, delay_ms);
		else if (pkt != w->rbuf[i])
			dlb_frontend_send_reply(w, &slot->client, pkt, len);	/* scratch: now */
		else
			dlb_frontend_queue_reply(w, &slot->client, pkt, len);
	}
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
		dlb_frontend_flush(w);
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
