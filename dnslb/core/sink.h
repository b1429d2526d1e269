/*
 * sink.h - the two callback tables that keep the forwarding path one-way
 * (docs/architecture.md#one-way-data-flow).
 *
 *   frontend --query--> pipeline --slot--> backend transport
 *   frontend <-client sink-- pipeline <-upstream sink-- backend transport
 *
 * The pipeline (dnslb/pipeline/forward.c) hands a query, already in an in-flight slot,
 * to a backend transport (dnslb/upstream/backend.c for UDP,
 * dnslb/upstream/tcp_upstream.c for streams). The transport reports the end of every slot
 * exactly once, through the worker's upstream sink: an answer that matched
 * (ID, source and question), or the reason there is none. After the call
 * the slot is the transport's again, which frees it: a sink never keeps a
 * pointer to it, and changes nothing in it but client_counted (it gives the
 * client's setMaxOutstandingPerClient place back). Only the pipeline
 * installs an upstream sink.
 *
 * The pipeline answers a client through the client sink of the client's
 * protocol (enum dlb_client_proto), which that frontend installs. Neither
 * side includes the other: a transport sees the pipeline, and the pipeline
 * a frontend, only through these pointers in struct dlb_worker.
 *
 * Thread: the owning worker.
 */
#ifndef DNSLB_SINK_H
#define DNSLB_SINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct dlb_worker;
struct dlb_slot;
struct dlb_client;

/** Why a slot ends without an answer. */
enum dlb_slot_end {
	DLB_END_TIMEOUT = 0,	/* no answer by its deadline */
	DLB_END_SEND_ERROR,	/* the query could not be sent */
	DLB_END_GAVE_UP,	/* stream: the connection broke and its retries ran out */
	DLB_END_NO_MEMORY,	/* stream: no memory to carry on */
	DLB_END_CLOSED,		/* stream: the answer did not match or the stream went out
				 * of step: no answer, the client's stream closes */
	DLB_END_DROPPED,	/* pipeline only: a rule dropped the answer */
	DLB_END_CONNECT_TIMEOUT,	/* stream: the connection was not made in time
					 * (tcpConnectTimeout); no other attempt */
};

/** What a backend transport reports to the pipeline. */
struct dlb_upstream_sink {
	/*
	 * The answer to @s, matched: @pkt holds @len bytes and may be edited in
	 * place; room for DLB_RBUF_SIZE only when @batched. @batched: @pkt is
	 * an entry of the worker's receive batch and stays valid until
	 * ->batch_end (a UDP reply may be queued); otherwise it is valid during
	 * the call only.
	 */
	void (*answer)(struct dlb_worker *w, struct dlb_slot *s, uint8_t *pkt, size_t len,
		       bool batched);
	/*
	 * One message of a zone transfer of @s, passed on as the backend wrote
	 * it, ID aside (as dnsdist: no response rules, not counted as a
	 * response). @last: the transfer's final message; @s ends with it.
	 */
	void (*xfr_part)(struct dlb_worker *w, struct dlb_slot *s, uint8_t *pkt, size_t len,
			 bool last);
	/* @s ends without an answer, for @why. */
	void (*end)(struct dlb_worker *w, struct dlb_slot *s, enum dlb_slot_end why);
	/* A receive batch of answers is done: send what was queued. */
	void (*batch_end)(struct dlb_worker *w);
};

/** How the pipeline answers the clients of one protocol. */
struct dlb_client_sink {
	/*
	 * Send @pkt (@len bytes) to @c. @batched: @pkt stays valid until
	 * ->flush, so the reply may be queued; otherwise copy or send it now.
	 * @part: a zone transfer's message with more to follow (streams).
	 */
	void (*reply)(struct dlb_worker *w, const struct dlb_client *c, uint8_t *pkt, size_t len,
		      bool batched, bool part);
	/*
	 * @c's query gets no answer, for @why: a stream closes the connection
	 * and counts @why on its frontend as dnsdist does; a datagram client
	 * is told nothing.
	 */
	void (*no_answer)(struct dlb_worker *w, const struct dlb_client *c, enum dlb_slot_end why);
	/*
	 * Optional (NULL: nothing): @c's query timed out at the backend; a
	 * stale answer or ->no_answer follows. A stream counts it on its
	 * frontend, as dnsdist, whether or not a stale answer is served.
	 */
	void (*timed_out)(struct dlb_worker *w, const struct dlb_client *c);
	/* Send what ->reply queued. */
	void (*flush)(struct dlb_worker *w);
};

#endif
