/*
 * forward.c - the forwarding half of the query pipeline (dnslb/pipeline/forward.h):
 * slot, transport, and the answer's way back.
 *
 * Out: dlb_forward fills an in-flight slot from the query (client, question,
 * cache key, what the rules decided) and hands it to the transport: UDP
 * (dnslb/upstream/backend.h), a stream (dnslb/upstream/tcp_upstream.h) or
 * HTTP/2 to a DoH server (dnslb/upstream/doh_upstream.h). In: each slot ends once,
 * through dlb_forward_sink; response rules, cache insertion and failover
 * run there, and dlb_forward_reply sends the answer through the client sink
 * of its protocol. Neither transports nor frontends are called back by
 * name: docs/architecture.md#one-way-data-flow.
 *
 * setMaxOutstandingPerClient (dnslb/pipeline/abuse.h): a forwarded query takes a
 * place in the worker's per-client table and marks its slot
 * (client_counted); every end of a slot in the sink gives it back. A
 * failover retry is a new slot of the same client: it takes its own place
 * before the old slot's is given back.
 */
#include "dnslb/pipeline/forward.h"

#include <stdlib.h>
#include <string.h>

#include "dnslb/pipeline/abuse.h"
#include "dnslb/upstream/backend.h"
#include "dnslb/core/config.h"
#include "dnslb/pipeline/dynblock.h"
#include "dnslb/core/proxyproto.h"
#include "dnslb/pipeline/query.h"
#include "dnslb/pipeline/rings.h"
#include "dnslb/upstream/doh_upstream.h"
#include "dnslb/upstream/tcp_upstream.h"
#include "dnslb/core/wstate.h"

/* ---- replies -------------------------------------------------------------------- */

static void
delay_arm(struct dlb_worker *w)
{
	double after;

	ev_timer_stop(w->loop, &w->delay_timer);
	if (w->delayed_head == NULL)
		return;
	dlb_worker_clock_sync(w);	/* libev's clock, which the timer runs on, is now */
	after = w->delayed_head->when - ev_now(w->loop);
	ev_timer_set(&w->delay_timer, after > 0 ? after : 0, 0);
	ev_timer_start(w->loop, &w->delay_timer);
}

void
dlb_forward_delay_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct dlb_worker *w = container_of(t, struct dlb_worker, delay_timer);
	double now = ev_now(loop);

	(void)revents;
	while (w->delayed_head != NULL && w->delayed_head->when <= now + 0.0005) {
		struct dlb_delayed *d = w->delayed_head;

		w->delayed_head = d->next;
		if (w->delayed_head == NULL)
			w->delayed_tail = NULL;
		w->ndelayed--;
		w->client_sink[d->client.proto]->reply(w, &d->client, d->pkt, d->len, false, false);
		free(d);
	}
	delay_arm(w);
}

void
dlb_forward_delay_free_all(struct dlb_worker *w)
{
	while (w->delayed_head != NULL) {
		struct dlb_delayed *d = w->delayed_head;

		w->delayed_head = d->next;
		free(d);
	}
	w->delayed_tail = NULL;
	w->ndelayed = 0;
}

/* Hold @pkt back @ms (DelayAction, DelayResponseAction); beyond the bound: now. */
static void
delay_reply(struct dlb_worker *w, const struct dlb_client *c, uint8_t *pkt, size_t len,
	    uint32_t ms)
{
	struct dlb_delayed *d = NULL, **pp;

	if (w->ndelayed < DLB_MAX_DELAYED)
		d = malloc(sizeof(*d) + len);
	if (d == NULL) {
		w->client_sink[c->proto]->reply(w, c, pkt, len, false, false);
		return;
	}
	d->when = ev_now(w->loop) + ms / 1000.0;
	d->client = *c;
	d->len = len;
	memcpy(d->pkt, pkt, len);
	d->next = NULL;
	w->ndelayed++;
	/* delays differ rarely: insert from the tail */
	if (w->delayed_tail == NULL || w->delayed_tail->when <= d->when) {
		if (w->delayed_tail != NULL)
			w->delayed_tail->next = d;
		else
			w->delayed_head = d;
		w->delayed_tail = d;
	} else {
		for (pp = &w->delayed_head; *pp != NULL && (*pp)->when <= d->when; pp = &(*pp)->next)
			;
		d->next = *pp;
		*pp = d;
	}
	if (w->delayed_head == d || !ev_is_active(&w->delay_timer))
		delay_arm(w);
}

DLB_HOT void
dlb_forward_reply(struct dlb_worker *w, const struct dlb_client *c, uint8_t *pkt, size_t len,
		  uint32_t delay_ms, bool batched)
{
	if (c->proto == DLB_CLIENT_INTERNAL)
		return;		/* a prefetch only refreshes the cache */
	if (len == 0) {
		w->client_sink[c->proto]->no_answer(w, c, DLB_END_DROPPED);
		return;
	}
	if (c->proto == DLB_CLIENT_UDP) {
		len = dlb_query_fit_udp(w, c, pkt, len);
		if (delay_ms > 0) {
			delay_reply(w, c, pkt, len, delay_ms);
			return;
		}
	}
	w->client_sink[c->proto]->reply(w, c, pkt, len, batched, false);
}

/* Answer a UDP query we do not forward with @rcode, in place; counted by the caller. */
static void
answer_rcode(struct dlb_worker *w, struct dlb_query *q, const struct dlb_client *c, uint8_t rcode)
{
	int n = dlb_wire_build_answer(q->pkt, &q->m, rcode, &w->snap->set.selfans, q->pkt, q->cap);

	if (n < 0)
		return;
	w->stats.self_answered++;
	dlb_rings_local_answer(w, q, q->pkt, (size_t)n);
	dlb_query_account_answer(w, q->pkt, (size_t)n, c->t_start);
	w->client_sink[c->proto]->reply(w, c, q->pkt, (size_t)n, true, false);
}

void
dlb_forward_over_cap(struct dlb_worker *w, struct dlb_query *q, const struct dlb_client *c)
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

/* ---- out ------------------------------------------------------------------------ */

static void up_end(struct dlb_worker *w, struct dlb_slot *s, enum dlb_slot_end why);

/*
 * setFailover{}: send the query of @old once more, to another server of its
 * pool (or of the failover pool), if the client's budget allows. Only a UDP
 * client's query sent over UDP is kept for it (qlen). The caller still ends
 * @old. @return true if the retry is on its way.
 */
static bool
failover_retry(struct dlb_worker *w, const struct dlb_slot *old)
{
	const struct dlb_settings *set = &w->snap->set;
	double now = dlb_worker_now(w);
	const struct dlb_pool *pool = old->pool;
	const struct dlb_pool_state *ps;
	struct dlb_backend *be = NULL;
	struct dlb_slot *ns;
	uint8_t buf[DLB_PP2_MAX + DLB_SLOT_QUERY_MAX];
	size_t off = 0;
	uint32_t idx, self;

	if (old->retried || old->qlen == 0 || old->client.proto != DLB_CLIENT_UDP ||
	    now - old->client.t_start >= set->failover_budget)
		return false;
	if (set->failover_other_pool)
		pool = dlb_snapshot_find_pool(w->snap, set->failover_pool);
	if (pool == NULL || (ps = dlb_pool_state(w->snap, pool, NULL))->n == 0)
		return false;
	for (int i = 0, start = (int)(w->rr_counter++ % (unsigned)ps->n); i < ps->n; i++) {
		struct dlb_backend *c = ps->members[(start + i) % ps->n];

		if (c->index != old->be_index && !c->tcp_only && dlb_backend_is_up(c)) {
			be = c;
			break;
		}
	}
	if (be == NULL)
		return false;
	idx = dlb_slot_alloc(&w->slots);
	if (idx == DLB_SLOT_NONE)
		return false;
	ns = dlb_slot_get(&w->slots, idx);
	self = ns->self;
	*ns = *old;
	ns->self = self;
	ns->retried = 1;
	ns->be_index = be->index;
	if (be->use_proxy_protocol)
		off = dlb_query_pp_header(w, &old->client, false, buf);
	memcpy(buf + off, old->query, old->qlen);
	/* rare: sent at once rather than batched */
	if (dlb_backend_send(w, be, idx, now, buf, off + old->qlen, off, true) != 0) {
		dlb_slot_free(&w->slots, idx);
		return false;
	}
	/* the copy holds a place of its own: @old gives its back when it ends */
	if (ns->client_counted && w->client_oc != NULL)
		dlb_coc_acquire(w->client_oc, &ns->client.peer.sa, UINT32_MAX);
	w->stats.failover_retries++;
	return true;
}

/*
 * setMaxOutstandingPerClient: stream client @c already has its cap of
 * queries in flight (slot @s, not handed over). Answer by cfg->oc_action
 * (drop: the connection closes, as for a dropped query on a stream).
 */
static void
stream_over_cap(struct dlb_worker *w, const struct dlb_client *c, const struct dlb_slot *s)
{
	uint8_t buf[DLB_DNS_HDR + DLB_MAX_NAME + 4];
	size_t n;

	if (w->cfg->oc_action == DLB_OC_DROP) {
		w->client_sink[c->proto]->no_answer(w, c, DLB_END_DROPPED);
		return;
	}
	n = dlb_query_slot_servfail(s, c, buf);
	if (w->cfg->oc_action == DLB_OC_REFUSED)
		buf[3] = (uint8_t)((buf[3] & 0xf0) | DLB_RCODE_REFUSED);
	w->stats.self_answered++;
	dlb_rings_slot(w, s, buf, n, DLB_RING_BE_SELF);
	dlb_query_account_answer(w, buf, n, c->t_start);
	w->client_sink[c->proto]->reply(w, c, buf, n, false, false);
}

/*
 * Forward @q over a stream (a TCP client, or a tcpOnly backend, DoT and DoH
 * servers among them): the slot is a copy the transport keeps with the
 * query, which it resends on a new connection if need be.
 */
static void
forward_stream(struct dlb_worker *w, struct dlb_query *q, const struct dlb_client *c)
{
	const struct dlb_backend *be = q->be;
	bool xfr = c->proto == DLB_CLIENT_TCP && q->m.qdcount > 0 &&
		   (q->m.qtype == DLB_TYPE_AXFR || q->m.qtype == DLB_TYPE_IXFR);
	size_t room = q->len + (q->ecslen > 0 ? 11u + q->ecslen : 0);
	uint8_t pre[DLB_PP2_MAX];
	size_t prelen = 0, len;
	uint8_t *msg;
	struct dlb_slot s;

	memset(&s, 0, offsetof(struct dlb_slot, key));
	dlb_query_fill_slot(&s, q, c);
	if (c->proto != DLB_CLIENT_INTERNAL) {
		switch (dlb_oc_acquire(w, &c->peer.sa)) {
		case DLB_COC_OVER:
			if (c->proto == DLB_CLIENT_TCP)
				stream_over_cap(w, c, &s);
			else
				dlb_forward_over_cap(w, q, c);
			return;
		case DLB_COC_ACQUIRED:
			s.client_counted = 1;	/* given back when the slot ends */
			break;
		case DLB_COC_UNTRACKED:
			break;
		}
	}
	/* room for an ECS option or OPT RR added on the way */
	msg = malloc(room);
	if (msg == NULL) {
		w->stats.downstream_send_errors++;
		up_end(w, &s, DLB_END_NO_MEMORY);
		return;
	}
	memcpy(msg, q->pkt, q->len);
	len = dlb_query_add_ecs(w, q, msg, q->len, room, &s.ecs_added);
	if (be->use_proxy_protocol)
		prelen = dlb_query_pp_header(w, c, c->proto != DLB_CLIENT_UDP, pre);
	if (be->doh_path[0] != '\0') {
		/* DNS over HTTPS: one HTTP/2 request, whatever the client's protocol */
		dlb_doh_up_send(w, be, &s, pre, prelen, msg, len);
		free(msg);
		return;
	}
	dlb_tcp_up_send(w, be, &s, pre, prelen, msg, len, xfr);
	free(msg);
}

void
dlb_forward(struct dlb_worker *w, struct dlb_query *q, const struct dlb_client *c)
{
	struct dlb_backend *be = q->be;
	struct dlb_slot *slot;
	size_t off = 0;
	uint32_t idx;
	enum dlb_coc_result oc;

	/* DoH queries are TCP ones for the rules, but go over UDP (as dnsdist 1.7) */
	if ((q->tcp && c->proto != DLB_CLIENT_DOH) || be->tcp_only) {
		forward_stream(w, q, c);
		return;
	}
	oc = dlb_oc_acquire(w, &c->peer.sa);
	if (oc == DLB_COC_OVER) {
		dlb_forward_over_cap(w, q, c);
		return;
	}
	idx = dlb_slot_alloc(&w->slots);
	if (idx == DLB_SLOT_NONE)
		goto refuse;
	slot = dlb_slot_get(&w->slots, idx);
	dlb_query_fill_slot(slot, q, c);
	slot->client_counted = oc == DLB_COC_ACQUIRED;
	if (q->ecslen > 0 || (q->has_dq && q->dq.edns_added))
		q->len = dlb_query_add_ecs(w, q, q->pkt, q->len, q->cap, &slot->ecs_added);
	if ((w->snap->set.failover_on_timeout || w->snap->set.failover_on_servfail ||
	     c->proto == DLB_CLIENT_DOH) && q->len <= DLB_SLOT_QUERY_MAX) {
		memcpy(slot->query, q->pkt, q->len);	/* kept for one retry */
		slot->qlen = (uint16_t)q->len;
	}
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
	/* A DoH query lives in its connection's read buffer, which the next request of the same
	 * read overwrites before the batch is flushed (a batch of POSTs once sent several
	 * copies of the last one): it joins the batch from the slot's copy, which lives as
	 * long as the query is in flight, or else leaves at once. */
	if (__builtin_expect(c->proto == DLB_CLIENT_DOH, 0)) {
		bool kept = slot->qlen == q->len && off == 0;

		if (dlb_backend_send(w, be, idx, c->t_start, kept ? slot->query : q->pkt, q->len,
				     off, !kept) == 0)
			return;
	} else if (dlb_backend_send(w, be, idx, c->t_start, q->pkt, q->len, off, false) == 0) {
		return;
	}
	/* never overwrite a query in flight: refuse this one */
	dlb_slot_free(&w->slots, idx);
refuse:
	if (oc == DLB_COC_ACQUIRED)
		dlb_coc_release(w->client_oc, &c->peer.sa);
	w->stats.inflight_full++;
	w->be_stats[be->index].refused++;
	answer_rcode(w, q, c, DLB_RCODE_SERVFAIL);
}

void
dlb_forward_prefetch(struct dlb_worker *w, const struct dlb_query *q)
{
	struct dlb_backend *be = q->be;
	struct dlb_client c;
	struct dlb_slot *slot;
	uint8_t buf[4096];
	uint32_t idx;
	size_t len, off = 0;

	memset(&c, 0, sizeof(c));
	c.proto = DLB_CLIENT_INTERNAL;
	c.orig_id = q->m.id;
	c.orig_flags = q->orig_flags;
	c.t_start = dlb_worker_now(w);
	if (q->tcp || be->tcp_only) {
		struct dlb_query copy = *q;

		/* forward_stream copies the query into its own frame */
		forward_stream(w, &copy, &c);
		return;
	}
	if (q->len > sizeof(buf))
		return;
	idx = dlb_slot_alloc(&w->slots);
	if (idx == DLB_SLOT_NONE)
		return;
	slot = dlb_slot_get(&w->slots, idx);
	dlb_query_fill_slot(slot, q, &c);
	slot->client_counted = 0;	/* no client */
	/* rare (once per entry and TTL): sent at once rather than batched */
	if (be->use_proxy_protocol)
		off = dlb_pp2_local(buf);
	memcpy(buf + off, q->pkt, q->len);
	len = dlb_query_add_ecs(w, q, buf + off, q->len, sizeof(buf) - off, &slot->ecs_added);
	if (dlb_backend_send(w, be, idx, c.t_start, buf, off + len, off, true) != 0)
		dlb_slot_free(&w->slots, idx);
}

/* ---- in: the upstream sink ------------------------------------------------------ */

/*
 * A DoH client's query got a truncated answer over UDP: as dnsdist 1.7, ask
 * the same server again over TCP, once (the query was kept, qlen). The new
 * slot takes over the client's place; @s ends. @return true if sent.
 */
static bool
doh_tc_retry(struct dlb_worker *w, struct dlb_slot *s, const uint8_t *pkt, size_t len)
{
	const struct dlb_backend *be;
	struct dlb_slot ns;
	uint8_t pre[DLB_PP2_MAX];
	size_t prelen = 0;

	if (s->client.proto != DLB_CLIENT_DOH || len < DLB_DNS_HDR || !(pkt[2] & 0x02) ||
	    s->retried || s->qlen == 0 || s->be_index < 0 || s->be_index >= w->nbe)
		return false;
	be = w->cfg->backends[s->be_index];
	/* the transport copies the slot: this one is only a template */
	ns = *s;
	ns.retried = 1;
	s->client_counted = 0;	/* the new slot holds the client's place now */
	if (be->use_proxy_protocol)
		prelen = dlb_query_pp_header(w, &s->client, true, pre);
	dlb_tcp_up_send(w, be, &ns, pre, prelen, s->query, s->qlen, false);
	return true;
}

static DLB_HOT void
up_answer(struct dlb_worker *w, struct dlb_slot *s, uint8_t *pkt, size_t len, bool batched)
{
	uint8_t *ans = pkt;
	uint32_t delay_ms;

	if (__builtin_expect(s->client.proto == DLB_CLIENT_DOH, 0) && doh_tc_retry(w, s, pkt, len)) {
		w->be_stats[s->be_index].responses++;
		return;
	}

	if (w->snap->set.failover_on_servfail && DLB_RCODE(pkt[3]) == DLB_RCODE_SERVFAIL &&
	    failover_retry(w, s)) {
		/* the client waits for the other server's answer */
		w->be_stats[s->be_index].responses++;
		w->be_stats[s->be_index].servfails++;
		dlb_oc_release(w, s);
		return;
	}
	len = dlb_query_finish_response(w, &ans, len, s, &delay_ms);
	/* a SERVFAIL built by a rule is in the scratch buffer: send it now */
	dlb_forward_reply(w, &s->client, ans, len, delay_ms, batched && ans == pkt);
	dlb_oc_release(w, s);
}

static void
up_xfr_part(struct dlb_worker *w, struct dlb_slot *s, uint8_t *pkt, size_t len, bool last)
{
	if (s->client.proto == DLB_CLIENT_TCP)
		w->client_sink[DLB_CLIENT_TCP]->reply(w, &s->client, pkt, len, false, !last);
	if (last)
		dlb_oc_release(w, s);
}

static void
up_end(struct dlb_worker *w, struct dlb_slot *s, enum dlb_slot_end why)
{
	const struct dlb_client *c = &s->client;
	uint8_t buf[DLB_DNS_HDR + DLB_MAX_NAME + 4];
	size_t n;

	switch (why) {
	case DLB_END_TIMEOUT:
		/*
		 * dnsdist counts a TCP client's timeout only on its frontend (the
		 * client sink), not in the server's drops or downstream-timeouts
		 */
		dlb_rings_slot(w, s, NULL, 0, s->be_index);
		if (c->proto != DLB_CLIENT_TCP)
			w->be_stats[s->be_index].drops++;
		if (c->proto == DLB_CLIENT_INTERNAL)
			break;
		if (w->snap->set.failover_on_timeout && failover_retry(w, s))
			break;
		if (c->proto != DLB_CLIENT_TCP) {
			w->stats.downstream_timeouts++;
			dlb_dyn_answer(w, &c->peer.sa, s->key.qname_lc, s->key.qname_len, 0, 0,
				       DLB_DYN_FROM_TIMEOUT);
		}
		if (w->client_sink[c->proto]->timed_out != NULL)
			w->client_sink[c->proto]->timed_out(w, c);
		if (!dlb_query_answer_stale(w, s))
			w->client_sink[c->proto]->no_answer(w, c, why);
		break;
	case DLB_END_NO_MEMORY:
		/* a stream's client gets a SERVFAIL, so pipelined neighbours survive */
		if (c->proto != DLB_CLIENT_TCP)
			break;
		n = dlb_query_slot_servfail(s, c, buf);
		w->stats.self_answered++;
		dlb_rings_slot(w, s, buf, n, DLB_RING_BE_SELF);
		dlb_query_account_answer(w, buf, n, c->t_start);
		w->client_sink[c->proto]->reply(w, c, buf, n, false, false);
		break;
	case DLB_END_SEND_ERROR:
	case DLB_END_GAVE_UP:
	case DLB_END_CONNECT_TIMEOUT:
	case DLB_END_CLOSED:
	case DLB_END_DROPPED:
		if (c->proto != DLB_CLIENT_INTERNAL)
			w->client_sink[c->proto]->no_answer(w, c, why);
		break;
	}
	dlb_oc_release(w, s);
}

static void
up_batch_end(struct dlb_worker *w)
{
	w->client_sink[DLB_CLIENT_UDP]->flush(w);
	w->client_sink[DLB_CLIENT_DOH]->flush(w);	/* DoH connections given answers */
}

const struct dlb_upstream_sink dlb_forward_sink = {
	.answer = up_answer,
	.xfr_part = up_xfr_part,
	.end = up_end,
	.batch_end = up_batch_end,
};

void
dlb_forward_flush(struct dlb_worker *w)
{
	dlb_backend_flush(w);
}

static void
internal_reply(struct dlb_worker *w, const struct dlb_client *c, uint8_t *pkt, size_t len,
	       bool batched, bool part)
{
	(void)w, (void)c, (void)pkt, (void)len, (void)batched, (void)part;
}

static void
internal_no_answer(struct dlb_worker *w, const struct dlb_client *c, enum dlb_slot_end why)
{
	(void)w, (void)c, (void)why;
}

static void
internal_flush(struct dlb_worker *w)
{
	(void)w;
}

const struct dlb_client_sink dlb_forward_internal_sink = {
	.reply = internal_reply,
	.no_answer = internal_no_answer,
	.flush = internal_flush,
};
