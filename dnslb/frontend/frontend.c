/*
 * frontend.c - UDP listeners: receive a batch with recvmmsg, run each query
 * through the pipeline, answer or forward, then flush all sends of the batch
 * with one sendmmsg per socket (docs/architecture.md).
 */
#include "dnslb/frontend/frontend.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <unistd.h>

#include "dnslb/pipeline/forward.h"
#include "dnslb/core/config.h"
#include "dnslb/pipeline/l2cache.h"
#include "dnslb/core/log.h"
#include "dnslb/core/probe.h"
#include "dnslb/pipeline/query.h"
#include "dnslb/store/redis.h"
#include "dnslb/pipeline/rings.h"
#include "dnslb/frontend/doh_conn.h"
#include "dnslb/frontend/tcp_client.h"
#include "dnslb/core/wstate.h"


static int
set_sockopt_int(int fd, int level, int opt, int v)
{
	return setsockopt(fd, level, opt, &v, sizeof(v));
}

static bool
is_wildcard(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

/*
 * A UDP listener a worker may wait on (dlb_frontend_park): blocking; every
 * other receive and send on it passes MSG_DONTWAIT. No receive timeout: the
 * kernel would arm and cancel its timer on every wait, and the main thread
 * wakes a worker that has waited a whole second instead (dlb_worker_wake_idle).
 */
static int
set_blocking_receive(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl == -1 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == -1)
		return -1;
	return 0;
}

/*
 * A connection on TCP listener @fd sends DLB_WAKE_SIGNAL to the calling
 * worker thread, so that a worker waiting in its UDP socket accepts it at
 * once. (The signal is set before O_ASYNC: until then the kernel would send
 * SIGIO, whose default action ends the process.)
 */
static void
set_accept_signal(int fd)
{
	struct f_owner_ex own = { .type = F_OWNER_TID, .pid = (pid_t)syscall(SYS_gettid) };
	int fl;

	if (fcntl(fd, F_SETOWN_EX, &own) == -1 || fcntl(fd, F_SETSIG, DLB_WAKE_SIGNAL) == -1 ||
	    (fl = fcntl(fd, F_GETFL)) == -1 || fcntl(fd, F_SETFL, fl | O_ASYNC) == -1)
		dlb_log_ratelimited(DLB_LOG_WARN, "TCP listener wake-up signal: %s", strerror(errno));
}

static int
open_socket(const struct dlb_frontend_cfg *fe, int type, const struct dlb_config *cfg)
{
	int fam = fe->addr.ss_family;
	int fd = socket(fam, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd == -1)
		return -1;
	if (set_sockopt_int(fd, SOL_SOCKET, SO_REUSEADDR, 1) == -1 ||
	    set_sockopt_int(fd, SOL_SOCKET, SO_REUSEPORT, 1) == -1)
		goto out_close;
	if (fam == AF_INET6)
		set_sockopt_int(fd, IPPROTO_IPV6, IPV6_V6ONLY, 1);
	/* as dnsdist: an address not (yet) configured on the host binds all the
	 * same (a virtual address that comes with a failover, an interface up
	 * after dnslb) */
	if (!is_wildcard((const struct sockaddr *)&fe->addr))
		set_sockopt_int(fd, IPPROTO_IP, IP_FREEBIND, 1);
	/* interface=: only what arrives on it (checked fatal at startup) */
	if (fe->iface[0] != '\0' &&
	    setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, fe->iface, (socklen_t)strlen(fe->iface)) == -1)
		goto out_close;
	if (type == SOCK_DGRAM) {
		/* only a wildcard bind needs to learn which address was asked */
		if (fam == AF_INET && is_wildcard((const struct sockaddr *)&fe->addr))
			set_sockopt_int(fd, IPPROTO_IP, IP_PKTINFO, 1);
		else if (is_wildcard((const struct sockaddr *)&fe->addr))
			set_sockopt_int(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, 1);
		if (cfg->udp_rcvbuf > 0)
			set_sockopt_int(fd, SOL_SOCKET, SO_RCVBUF, cfg->udp_rcvbuf);
		if (cfg->udp_sndbuf > 0)
			set_sockopt_int(fd, SOL_SOCKET, SO_SNDBUF, cfg->udp_sndbuf);
		if (cfg->blocking_receive && set_blocking_receive(fd) == -1)
			goto out_close;
	} else {
		if (fe->tcp_fastopen_qsize > 0)
			set_sockopt_int(fd, IPPROTO_TCP, TCP_FASTOPEN, fe->tcp_fastopen_qsize);
		set_sockopt_int(fd, IPPROTO_TCP, TCP_NODELAY, 1);
	}
	if (bind(fd, (const struct sockaddr *)&fe->addr, fe->addrlen) == -1)
		goto out_close;
	if (type == SOCK_STREAM &&
	    listen(fd, fe->tcp_listen_qsize > 0 ? fe->tcp_listen_qsize : SOMAXCONN) == -1)
		goto out_close;
	return fd;
out_close:
	close(fd);
	return -1;
}

int
dlb_listener_open(struct dlb_worker *w, struct dlb_listener *l, int index,
		  const struct dlb_frontend_cfg *fe)
{
	memset(l, 0, sizeof(*l));
	l->udp_ep = -1;
	l->w = w;
	l->index = index;
	l->family = fe->addr.ss_family;
	l->wildcard = is_wildcard((const struct sockaddr *)&fe->addr);
	l->udp_fd = -1;
	/* a DNS over TLS or HTTPS listener is TCP only */
	if (!dlb_frontend_stream_only(fe) && (l->udp_fd = open_socket(fe, SOCK_DGRAM, w->cfg)) == -1) {
		dlb_err("Unable to bind the UDP socket on %s: %s", fe->text, strerror(errno));
		return -1;
	}
	l->tcp_fd = open_socket(fe, SOCK_STREAM, w->cfg);
	if (l->tcp_fd == -1) {
		dlb_err("Unable to bind the TCP socket on %s: %s", fe->text, strerror(errno));
		if (l->udp_fd >= 0)
			close(l->udp_fd);
		l->udp_fd = -1;
		return -1;
	}
	dlb_sendbatch_init(&l->out, l->udp_fd);
	return 0;
}

static void listener_flush(struct dlb_listener *l);
static void close_udp_ep(struct dlb_listener *l);

void
dlb_listener_close(struct dlb_listener *l)
{
	close_udp_ep(l);
	if (l->udp_fd >= 0)
		close(l->udp_fd);
	if (l->tcp_fd >= 0)
		close(l->tcp_fd);
	l->udp_fd = l->tcp_fd = -1;
	l->out.fd = -1;
}

int
dlb_listener_resume(struct dlb_listener *l, const struct dlb_frontend_cfg *fe)
{
	const struct dlb_config *cfg = l->w->cfg;

	if (l->udp_fd < 0 && !dlb_frontend_stream_only(fe)) {
		l->udp_fd = open_socket(fe, SOCK_DGRAM, cfg);
		if (l->udp_fd == -1) {
			dlb_err("Unable to bind the UDP socket on %s: %s", fe->text,
				strerror(errno));
			return -1;
		}
		dlb_sendbatch_init(&l->out, l->udp_fd);
	}
	l->tcp_fd = open_socket(fe, SOCK_STREAM, cfg);
	if (l->tcp_fd == -1) {
		dlb_err("Unable to bind the TCP socket on %s: %s", fe->text, strerror(errno));
		return -1;	/* the UDP socket stays, unread, until dlb_listener_close_udp */
	}
	dlb_listener_start(l);
	return 0;
}

void
dlb_listener_pause(struct dlb_listener *l)
{
	struct ev_loop *loop = l->w->loop;

	ev_io_stop(loop, &l->udp_io);
	ev_io_stop(loop, &l->tcp_io);
	listener_flush(l);
	if (l->tcp_fd >= 0)
		close(l->tcp_fd);
	l->tcp_fd = -1;
}

void
dlb_listener_close_udp(struct dlb_listener *l)
{
	listener_flush(l);
	close_udp_ep(l);
	if (l->udp_fd >= 0)
		close(l->udp_fd);
	l->udp_fd = -1;
	l->out.fd = -1;
}

static void
listener_flush(struct dlb_listener *l)
{
	if (l->out.n > 0)
		dlb_sendbatch_flush(&l->out, NULL, 0);
}

DLB_HOT void
dlb_frontend_flush(struct dlb_worker *w)
{
	for (int i = 0; i < w->nlisteners; i++)
		listener_flush(&w->listeners[i]);
}

/* Fill msg @i of @b to answer @c with @pkt (not copied). */
static void
fill_reply(struct dlb_listener *l, struct dlb_sendbatch *b, unsigned i, const struct dlb_client *c,
	   const uint8_t *pkt, size_t len)
{
	struct msghdr *mh = &b->msgs[i].msg_hdr;

	l->udp_responses++;
	b->iov[i].iov_base = (void *)pkt;
	b->iov[i].iov_len = len;
	b->addr[i] = c->peer;
	mh->msg_namelen = c->peer.sa.sa_family == AF_INET ? sizeof(struct sockaddr_in)
							  : sizeof(struct sockaddr_in6);
	/* msg_name, msg_iov, msg_iovlen and msg_flags are set once
	 * (dlb_sendbatch_init); no control data unless set below */
	if (l->wildcard && !c->has_dst) {
		mh->msg_control = NULL;
		mh->msg_controllen = 0;
	} else if (l->wildcard) {
		/* answer from the address the client asked (a wildcard bind) */
		struct cmsghdr *cm;

		mh->msg_control = b->cmsg[i];
		if (l->family == AF_INET) {
			struct in_pktinfo pi = { 0 };

			mh->msg_controllen = CMSG_SPACE(sizeof(pi));
			cm = CMSG_FIRSTHDR(mh);
			cm->cmsg_level = IPPROTO_IP;
			cm->cmsg_type = IP_PKTINFO;
			cm->cmsg_len = CMSG_LEN(sizeof(pi));
			pi.ipi_spec_dst = c->dst.v4.ipi_addr;
			memcpy(CMSG_DATA(cm), &pi, sizeof(pi));
		} else {
			struct in6_pktinfo pi = c->dst.v6;

			mh->msg_controllen = CMSG_SPACE(sizeof(pi));
			cm = CMSG_FIRSTHDR(mh);
			cm->cmsg_level = IPPROTO_IPV6;
			cm->cmsg_type = IPV6_PKTINFO;
			cm->cmsg_len = CMSG_LEN(sizeof(pi));
			memcpy(CMSG_DATA(cm), &pi, sizeof(pi));
		}
	}
}

DLB_HOT void
dlb_frontend_queue_reply(struct dlb_worker *w, const struct dlb_client *c, uint8_t *pkt, size_t len)
{
	struct dlb_listener *l = &w->listeners[c->listener];

	if (l->udp_fd < 0)
		return;		/* the listener was removed by a reload and closed since */
	if (l->out.n == DLB_UDP_BATCH)
		listener_flush(l);
	fill_reply(l, &l->out, l->out.n, c, pkt, len);
	l->out.n++;
}

void
dlb_frontend_send_reply(struct dlb_worker *w, const struct dlb_client *c, const uint8_t *pkt,
			size_t len)
{
	struct dlb_listener *l = &w->listeners[c->listener];
	struct dlb_sendbatch *b = &l->out;

	if (l->udp_fd < 0)
		return;		/* the listener was removed by a reload and closed since */
	/* Reuse the listener's batch: queue, then send at once. */
	if (b->n == DLB_UDP_BATCH)
		listener_flush(l);
	fill_reply(l, b, b->n, c, pkt, len);
	b->n++;
	listener_flush(l);
}

/* ---- receiving ----------------------------------------------------------- */

static void
get_pktinfo(struct msghdr *mh, struct dlb_client *c)
{
	c->has_dst = 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm != NULL; cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_PKTINFO) {
			memcpy(&c->dst.v4, CMSG_DATA(cm), sizeof(c->dst.v4));
			c->has_dst = 1;
		} else if (cm->cmsg_level == IPPROTO_IPV6 && cm->cmsg_type == IPV6_PKTINFO) {
			memcpy(&c->dst.v6, CMSG_DATA(cm), sizeof(c->dst.v6));
			c->has_dst = 1;
		}
	}
}

/* One received query between dlb_query_prepare and its verdict. */
struct dlb_udp_pending {
	struct dlb_client c;		/* first: it and the query's first lines in a row */
	union dlb_sockaddr local;	/* q.local points here */
	struct dlb_query q;
};

int
dlb_frontend_worker_init(struct dlb_worker *w)
{
	/* pages touched on use only: a worker that never sees a full batch uses one */
	w->upend = mmap(NULL, (size_t)DLB_UDP_BATCH * sizeof(*w->upend), PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (w->upend == MAP_FAILED) {
		w->upend = NULL;
		return -1;
	}
	return 0;
}

void
dlb_frontend_worker_free(struct dlb_worker *w)
{
	if (w->upend != NULL)
		munmap(w->upend, (size_t)DLB_UDP_BATCH * sizeof(*w->upend));
	w->upend = NULL;
}

/* Send, park or forward @p by its final verdict @v. */
static DLB_HOT void
udp_verdict(struct dlb_worker *w, struct dlb_udp_pending *p, enum dlb_verdict v)
{
	struct dlb_query *q = &p->q;
	struct dlb_client *c = &p->c;

	switch (v) {
	case DLB_V_DROP:
	case DLB_V_CLOSE:
		return;
	case DLB_V_ANSWER:
		dlb_rings_local_answer(w, q, q->pkt, q->len);
		dlb_query_account_local(w, q->pkt);
		if (q->delay_ms > 0)
			dlb_forward_reply(w, c, q->pkt, q->len, q->delay_ms, true);
		else
			dlb_frontend_queue_reply(w, c, q->pkt, q->len);
		return;
	case DLB_V_FORWARD:
		c->orig_id = q->m.id;
		c->orig_flags = q->orig_flags;
		c->udp_max = q->udp_max;
		c->conn_id = c->conn_gen = 0;
		c->t_start = dlb_worker_now(w);
		if (dlb_l2_park(w, q, c))
			return;		/* asks the fleet's cache first (dnslb/pipeline/l2cache.h) */
		dlb_forward(w, q, c);
		return;
	}
}

/*
 * Received message @i into @p, up to the cache lookup. @return true when
 * dlb_query_finish must run (the verdict of anything else is dealt with).
 */
static DLB_HOT bool
udp_prepare(struct dlb_worker *w, struct dlb_listener *l, unsigned i, struct dlb_udp_pending *p)
{
	struct msghdr *mh = &w->rmsgs[i].msg_hdr;
	struct dlb_query *q = &p->q;
	struct dlb_client *c = &p->c;
	enum dlb_verdict v;

	if (!dlb_nmg_match(&w->snap->acl, &w->raddr[i].sa)) {
		w->stats.acl_drops++;
		return false;
	}
	DLB_PROBE_STAGE(DLB_PROBE_ACL);
	w->stats.queries++;
	l->udp_queries++;
	if (mh->msg_flags & MSG_TRUNC) {
		/* bigger than our buffer: we could not see all of it */
		w->stats.noncompliant_queries++;
		return false;
	}
	q->pkt = w->rbuf[i];
	q->len = w->rmsgs[i].msg_len;
	q->cap = DLB_RBUF_SIZE;
	q->tcp = false;
	q->client = &w->raddr[i].sa;
	/* q->http stays NULL: w->upend is zeroed when mapped, and nothing sets it */
	c->proto = DLB_CLIENT_UDP;
	c->listener = (uint16_t)l->index;
	c->peer = w->raddr[i];
	if (l->wildcard) {
		get_pktinfo(mh, c);
		q->local = dlb_query_client_local(w, c, &p->local);
	} else {
		/* the listener's own address, in the config: the query lives
		 * within this batch, and the config outlives the batch */
		c->has_dst = 0;
		q->local = c->listener < __atomic_load_n(&w->cfg->nfrontends, __ATOMIC_ACQUIRE)
				   ? (const struct sockaddr *)&w->cfg->frontends[c->listener].addr
				   : NULL;
	}
	if (dlb_query_prepare(w, q, &v))
		return true;
	udp_verdict(w, p, v);
	return false;
}

/* The rest of @p's way from its cache lookup (dlb_query_finish), then its verdict. */
static inline void
udp_finish(struct dlb_worker *w, struct dlb_udp_pending *p)
{
	enum dlb_verdict v = dlb_query_finish(w, &p->q);

	DLB_PROBE_STAGE(DLB_PROBE_HIT);
	udp_verdict(w, p, v);
	DLB_PROBE_STAGE(DLB_PROBE_REPLY);
}

/*
 * Handle the @n messages of a receive batch. One query goes straight
 * through (its cache set is prefetched as soon as its key is made). With
 * more, each runs up to its cache lookup first, which prefetches its set,
 * and then their entries are prefetched before any lookup: the batch's
 * cache misses overlap instead of adding up (the rules of each query still
 * run in arrival order, as do the lookups).
 */
static DLB_HOT void
handle_udp_batch(struct dlb_worker *w, struct dlb_listener *l, unsigned n)
{
	struct dlb_udp_pending *p = w->upend;
	uint8_t fin[DLB_UDP_BATCH];	/* the messages dlb_query_finish must see */
	unsigned nfin = 0;

	if (n == 1) {
		if (udp_prepare(w, l, 0, p))
			udp_finish(w, p);
		return;
	}
	for (unsigned i = 0; i < n; i++) {
		if (udp_prepare(w, l, i, &p[i]))
			fin[nfin++] = (uint8_t)i;
	}
	for (unsigned j = 0; j < nfin; j++)
		dlb_query_prefetch_entry(&p[fin[j]].q);
	DLB_PROBE_STAGE(DLB_PROBE_BATCH);
	for (unsigned j = 0; j < nfin; j++)
		udp_finish(w, &p[fin[j]]);
}

/* Datagrams one recvmmsg takes (setUDPMultipleMessagesVectorSize). */
static unsigned
recv_batch_size(const struct dlb_worker *w)
{
	unsigned batch = (unsigned)w->cfg->udp_vector_size;

	return batch == 0 || batch > DLB_UDP_BATCH ? DLB_UDP_BATCH : batch;
}

#ifdef DLB_CYCLE_PROBE
__thread uint64_t dlb_probe_send_cycles;
__thread uint64_t dlb_probe_stage_last, dlb_probe_stage_cycles[DLB_PROBE_NSTAGES];
__thread uint64_t dlb_probe_wake_t0, dlb_probe_wake_s0, dlb_probe_wake_cycles, dlb_probe_wakes;

void
dlb_probe_batch_done(const struct dlb_worker *w, uint64_t cycles, unsigned n)
{
	static const char *const names[DLB_PROBE_NSTAGES] = {
		"acl", "parse", "rules", "key", "batch", "hit", "reply", "flush"
	};
	static __thread uint64_t total, queries, batches;
	static __thread uint64_t by_n[9][2];	/* batches of 1..7, 8 or more: count, cycles */
	char line[256] = "";
	int o = 0;

	total += cycles;
	queries += n;
	by_n[n < 8 ? n : 8][0]++;
	by_n[n < 8 ? n : 8][1] += cycles;
	if (++batches % DLB_PROBE_REPORT_BATCHES != 0)
		return;
	dlb_log(DLB_LOG_INFO,
		"cycle probe: worker %d: %llu queries, %llu batches, %.1f cycles per query", w->id,
		(unsigned long long)queries, (unsigned long long)batches,
		(double)total / (double)queries);
	for (int i = 0; i < DLB_PROBE_NSTAGES && o >= 0 && (size_t)o < sizeof(line); i++)
		o += snprintf(line + o, sizeof(line) - (size_t)o, " %s %llu", names[i],
			      (unsigned long long)dlb_probe_stage_cycles[i]);
	dlb_log(DLB_LOG_INFO, "stage probe: worker %d: %llu queries:%s", w->id,
		(unsigned long long)queries, line);
	o = 0;
	for (int i = 1; i <= 8 && o >= 0 && (size_t)o < sizeof(line); i++)
		o += snprintf(line + o, sizeof(line) - (size_t)o, " %d:%llu:%llu", i,
			      (unsigned long long)by_n[i][0], (unsigned long long)by_n[i][1]);
	dlb_log(DLB_LOG_INFO, "size probe: worker %d: batches of n (8: 8 or more):%s", w->id, line);
	dlb_log(DLB_LOG_INFO, "wake probe: worker %d: %llu queries, %llu receives, %llu cycles", w->id,
		(unsigned long long)queries, (unsigned long long)dlb_probe_wakes,
		(unsigned long long)dlb_probe_wake_cycles);
}
#endif

/* Handle a received batch of @n, then send what it queued (one sendmmsg per socket). */
static DLB_HOT void
udp_batch_and_flush(struct dlb_worker *w, struct dlb_listener *l, unsigned n)
{
	DLB_PROBE_BATCH_BEGIN();
	handle_udp_batch(w, l, n);
	dlb_query_account_flush(w);
	dlb_forward_flush(w);
	dlb_frontend_flush(w);
	DLB_PROBE_BATCH_END(w, n);
}

static void
udp_read_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct dlb_listener *l = container_of(io, struct dlb_listener, udp_io);
	struct dlb_worker *w = l->w;
	unsigned batch = recv_batch_size(w);

	/* a few batches per wakeup, then give the other sockets a turn */
	for (int round = 0; round < 4; round++) {
		int n = dlb_worker_recv_batch(w, l->udp_fd, batch);

		if (n == 0)
			break;
		udp_batch_and_flush(w, l, (unsigned)n);
		if ((unsigned)n < batch)
			break;
	}
}

/* Batches a worker handles in one wait before its loop runs again. */
#define PARK_BATCHES 64

/*
 * setWorkerReceiveCoalescing: a worker sleeps before its next receive only
 * while that pays, i.e. while each wake-up finds at least this many
 * datagrams (a sleep costs what a wake-up by a datagram does; with fewer,
 * it would only add latency). A smaller batch, a wake signal or going back
 * to the loop ends it; the next batch that large starts it again. A full
 * batch is not followed by a sleep: more may be queued already.
 */
#define COALESCE_MIN_BATCH 2

/*
 * While the worker waits in its UDP socket (the park loop), the socket is out
 * of every epoll set. Registered, the socket's wait queue has an epoll entry
 * on it, and the kernel runs every datagram the worker sends through it when
 * it frees the buffer (sock_wfree: the write-space wake-up, locked, with
 * interrupts off): about 0.1 us per query of system time here, which the
 * floor and dnsdist, waiting in recvmmsg on sockets no epoll watches, do not
 * pay (docs/performance.md, "The parked socket out of epoll"). libev removes an fd from its
 * epoll set only when an event it does not want comes for it, so the UDP
 * socket sits in an epoll instance of the listener's own (udp_ep), which the
 * loop watches instead: the park loop deletes the socket from it on entry and
 * adds it back on exit (a datagram that came meanwhile makes it readable at
 * once). Without udp_ep (epoll_create1 failed) the loop watches the socket.
 */
static void
unpoll_udp(struct dlb_listener *l)
{
	if (l->udp_ep >= 0 && !l->udp_unpolled &&
	    epoll_ctl(l->udp_ep, EPOLL_CTL_DEL, l->udp_fd, NULL) == 0)
		l->udp_unpolled = true;
}

static void
repoll_udp(struct dlb_listener *l)
{
	struct epoll_event ev = { .events = EPOLLIN };

	if (!l->udp_unpolled)
		return;
	l->udp_unpolled = false;
	ev.data.fd = l->udp_fd;
	if (epoll_ctl(l->udp_ep, EPOLL_CTL_ADD, l->udp_fd, &ev) == -1 && errno != EEXIST)
		dlb_log_ratelimited(DLB_LOG_WARN, "epoll_ctl: %s", strerror(errno));
}

/* The fd the loop watches for @l's datagrams: udp_ep holding the socket, or the socket. */
static int
udp_watch_fd(struct dlb_listener *l)
{
	struct epoll_event ev = { .events = EPOLLIN };

	if (l->udp_ep < 0 && l->w->cfg->blocking_receive) {
		l->udp_ep = epoll_create1(EPOLL_CLOEXEC);
		ev.data.fd = l->udp_fd;
		if (l->udp_ep >= 0 && epoll_ctl(l->udp_ep, EPOLL_CTL_ADD, l->udp_fd, &ev) == -1) {
			close(l->udp_ep);
			l->udp_ep = -1;
		}
	}
	return l->udp_ep >= 0 ? l->udp_ep : l->udp_fd;
}

static void
close_udp_ep(struct dlb_listener *l)
{
	if (l->udp_ep >= 0)
		close(l->udp_ep);
	l->udp_ep = -1;
	l->udp_unpolled = false;
}

DLB_HOT void
dlb_frontend_park(struct dlb_worker *w, struct dlb_listener *l)
{
	unsigned batch = recv_batch_size(w);
	/* read once: that line of the config is cold after each wake-up, and
	 * w->cfg changes only in the worker's loop, outside this one */
	bool may_coalesce = w->cfg->recv_coalesce_us > 0, coalesce = false;

	unpoll_udp(l);
	dlb_worker_clock_anchor(w);
	for (int k = 0; k < PARK_BATCHES; k++) {
		bool woken;
		int n = dlb_worker_park_recv(w, l->udp_fd, batch, coalesce, &woken);

		coalesce = may_coalesce && n >= COALESCE_MIN_BATCH && (unsigned)n < batch;
		if (n > 0) {
			dlb_worker_clock_tick(w);
			dlb_worker_enter(w);
			udp_batch_and_flush(w, l, (unsigned)n);
			dlb_worker_exit(w);
			dlb_rcu_poll(&w->rcu);
		}
		if (n == 0 || woken || !dlb_worker_quiet(w))
			break;
	}
	dlb_worker_clock_release(w);
	repoll_udp(l);
	DLB_PROBE_WAKE_CANCEL();
}

static void
tcp_accept_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct dlb_listener *l = container_of(io, struct dlb_listener, tcp_io);

	if (l->w->cfg->frontends[l->index].doh != NULL)
		dlb_doh_accept(l->w, l);
	else
		dlb_tcp_accept(l->w, l);
}

void
dlb_listener_start(struct dlb_listener *l)
{
	if (l->udp_fd >= 0) {
		ev_io_init(&l->udp_io, udp_read_cb, udp_watch_fd(l), EV_READ);
		ev_io_start(l->w->loop, &l->udp_io);
	}
	ev_io_init(&l->tcp_io, tcp_accept_cb, l->tcp_fd, EV_READ);
	ev_io_start(l->w->loop, &l->tcp_io);
	if (l->w->cfg->blocking_receive) {
		set_accept_signal(l->tcp_fd);
		/* connections queued before the signal was set send none: the
		 * loop's next poll, not a wait in the UDP socket, must see them */
		dlb_worker_wake_self();
	}
}

/* ---- waiting ------------------------------------------------------------------- */

DLB_HOT bool
dlb_worker_quiet(const struct dlb_worker *w)
{
	return w->slots.used == 0 && w->ndelayed == 0 && w->nconns == w->nfree_conns &&
	       dlb_doh_idle(w) && w->tcp_up == 0 && (w->redis == NULL || dlb_redis_quiet(w->redis)) &&
	       dlb_l2_worker_quiet(w);
}

/* ---- the UDP client sink (dnslb/core/sink.h) ------------------------------------------ */

static void
udp_sink_reply(struct dlb_worker *w, const struct dlb_client *c, uint8_t *pkt, size_t len,
	       bool batched, bool part)
{
	(void)part;	/* no zone transfers over UDP */
	if (batched)
		dlb_frontend_queue_reply(w, c, pkt, len);
	else
		dlb_frontend_send_reply(w, c, pkt, len);
}

static void
udp_sink_no_answer(struct dlb_worker *w, const struct dlb_client *c, enum dlb_slot_end why)
{
	(void)w, (void)c, (void)why;	/* a datagram client is told nothing */
}

const struct dlb_client_sink dlb_frontend_udp_sink = {
	.reply = udp_sink_reply,
	.no_answer = udp_sink_no_answer,
	.flush = dlb_frontend_flush,
};
