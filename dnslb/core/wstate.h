/*
 * wstate.h - a data-plane worker's state: its libev loop and everything it owns
 * (docs/architecture.md): its UDP and TCP listener sockets (one per frontend,
 * SO_REUSEPORT), its sockets and in-flight tables towards every backend, its
 * TCP connections, counters and random generator.
 *
 * Thread: a worker's fields are touched only by its own thread, except
 * `stats`/`be_stats` (read by others with relaxed loads) and `stop` (ev_async).
 *
 * The leaf under every layer of the data plane (docs/architecture.md#layers):
 * the state, and the primitives on it that the frontends, the pipeline and
 * the transports use (the clock, batched receives, waiting and waking,
 * wstate.c). Creating, starting and stopping a worker is dnslb/worker.h.
 */
#ifndef DNSLB_WSTATE_H
#define DNSLB_WSTATE_H

#include <ev.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "dnslb/core/config.h"
#include "dnslb/core/inflight.h"
#include "dnslb/core/rcu.h"
#include "dnslb/core/sendbatch.h"
#include "dnslb/core/stats.h"
#include "dnslb/core/util.h"

struct dlb_config;
struct dlb_backend;
struct dlb_pool;
struct dlb_qps_window;
struct dlb_tcp_client;
struct dlb_doh_worker;
struct dlb_tcp_up;
struct dlb_doh_up;
struct dlb_lua_worker;
struct dlb_redis;
struct dlb_l2_worker;
struct dlb_dyn_worker;
struct dlb_coc;
struct dlb_udp_pending;

/* A frontend as seen by one worker: its own UDP and TCP sockets. */
/* A DNS over HTTPS listener's figures, dnsdist's (docs/doh.md#counters). */
enum { DLB_DOH_ST_200 = 0, DLB_DOH_ST_400, DLB_DOH_ST_403, DLB_DOH_ST_500, DLB_DOH_ST_502,
       DLB_DOH_ST_OTHER, DLB_DOH_ST_COUNT };
struct dlb_doh_figures {
	uint64_t connects;		/* connections accepted */
	uint64_t get, post;		/* queries by method */
	uint64_t http1, http2;		/* ... by HTTP version */
	uint64_t bad;			/* requests that carried no DNS query */
	uint64_t errors, redirects, valid;	/* answers to queries, by kind */
	uint64_t status[2][DLB_DOH_ST_COUNT];	/* ... by HTTP version and status */
};

struct dlb_listener {
	struct dlb_worker *w;
	int index;			/* frontend index in the config */
	int family;
	bool wildcard;			/* bound to 0.0.0.0 / :: : reply from the asked address */
	int udp_fd, tcp_fd;
	ev_io udp_io, tcp_io;
	int udp_ep;			/* epoll holding udp_fd, which the loop watches (frontend.c,
					 * unpoll_udp); -1: the loop watches udp_fd */
	bool udp_unpolled;		/* parked: udp_fd is out of udp_ep */
	struct dlb_sendbatch out;	/* replies to clients */
	uint32_t tcp_conns;		/* current TCP connections (this worker) */
	uint64_t udp_queries, tcp_queries;
	uint64_t udp_responses, tcp_responses;	/* answers queued for clients */
	/* TCP connections that ended badly, dnsdist's meanings (tcp_client.c, docs/web.md) */
	uint64_t tcp_died_reading;		/* the client closed or failed mid-query */
	uint64_t tcp_died_sending;		/* I/O error sending an answer */
	uint64_t tcp_gave_up;			/* a query whose backend connection gave up */
	uint64_t tcp_client_timeouts;		/* closed by a client-side timeout */
	uint64_t tcp_downstream_timeouts;	/* a query that timed out at the backend */
	/* DNS over TLS, dnsdist's figures (tcp_client.c, docs/tls.md#counters) */
	uint64_t tls_new_sessions, tls_resumptions;	/* completed handshakes */
	uint64_t tls_unknown_ticket_keys;	/* ... offering a ticket under a key gone */
	uint64_t tls_inactive_ticket_keys;	/* ... resumed under an older key */
	uint64_t tls_queries[5];		/* per query, by enum dlb_tls_version_idx (tls.h) */
	uint64_t tls_failures[8];		/* failed handshakes, by enum dlb_tls_failure */
	struct dlb_doh_figures doh;	/* DNS over HTTPS listeners' (doh_conn.c) */
	bool active;			/* reading (false: removed by a reload, or failed) */
	double close_at;		/* paused: when its UDP socket closes (loop clock) */
};

/*
 * One UDP socket towards backends, with its ID table: either connected to
 * one backend (be_index >= 0), or unconnected and shared by the worker's
 * backends of one address family and one UDP timeout (be_index == -1): its
 * queries carry their destination, an answer's source address must be the
 * backend of the slot its ID names.
 */
struct dlb_be_sock {
	struct dlb_worker *w;
	int be_index;			/* -1: shared */
	int fd;
	int family;			/* shared: AF_INET or AF_INET6 */
	double timeout;			/* shared: the UDP timeout of its backends, s */
	ev_io io;
	struct dlb_inflight table;
	struct dlb_sendbatch out;	/* queries (connected: no address) */
	uint32_t tags[DLB_UDP_BATCH];	/* slot of each queued query, freed if its send fails */
};

#define DLB_MAX_SHARED_SOCKS 8		/* per worker: (family, timeout) pairs */

/* A worker's view of one backend. */
struct dlb_be_local {
	struct dlb_be_sock *shared;	/* the worker's shared socket it uses first; NULL: none
					 * (source=, sockets>1, tcpOnly) */
	struct dlb_be_sock *socks;	/* its own connected sockets; also taken when the shared
					 * socket's ID table is full */
	int nsocks;
	unsigned next_sock;		/* round robin over socks */
	uint32_t udp_count, udp_max;	/* UDP queries in flight; setMaxUDPOutstanding x nsocks */
	double timeout;			/* s */
	/* TCP connections to this backend (reused, pipelined) */
	struct dlb_tcp_up *tcp_conns;	/* list of open connections */
	uint32_t tcp_count;
	struct ssl_session_st *tls_session;	/* owned: the last TLS session of a DNS over TLS
						 * or HTTPS server, offered on the next connection */
	/* HTTP/2 connections to a DoH server (dnslb/upstream/doh_upstream.c) */
	struct dlb_doh_up *doh_conns;
	uint32_t doh_count;
};

/* An answer held back by DelayAction / DelayResponseAction. */
struct dlb_delayed {
	struct dlb_delayed *next;
	double when;			/* loop clock */
	struct dlb_client client;
	size_t len;
	uint8_t pkt[];
};

#define DLB_MAX_DELAYED 65536		/* per worker; beyond, answers go out at once */

struct dlb_worker {
	/* What every wake-up and every query read, first (four lines in a row);
	 * what reloads, timers and forwarding use comes after it. */
	int id;
	struct ev_loop *loop;
	const struct dlb_config *cfg;	/* live objects: servers, pools, caches, listeners */
	const struct dlb_snapshot *snap;	/* settings, ACL, policies: the snapshot loaded
					 * when this epoch section began (dlb_worker_enter);
					 * read only inside it */
	const struct dlb_pool *default_pool;	/* pool "" (NULL when it has no servers) */
	struct dlb_listener *listeners;	/* [DLB_MAX_FRONTENDS] */
	int nlisteners;			/* slots in use (atomic: a reload adds) */
	struct dlb_be_local *be;	/* [DLB_MAX_BACKENDS]: the first nbe are open */
	int nshared;
	unsigned be_queued;		/* datagrams queued to backend sockets since the last
					 * dlb_backend_flush (0: it has nothing to look at) */
	int nbe;			/* backends opened (atomic: the worker stores it,
					 * main waits for it after a runtime newServer) */
	struct dlb_slot_pool slots;
	/* with slots.used, what dlb_worker_quiet reads (once per wake-up) */
	uint32_t ndelayed;		/* delayed answers (delayed_head) */
	uint32_t tcp_up;		/* TCP connections to backends (DoH ones too), open or
					 * opening */
	struct dlb_redis *redis;	/* setRedis: this worker's data connection (dnslb/store/redis.h) */
	struct dlb_l2_worker *l2;	/* queries waiting on the second-level cache
					 * (dnslb/pipeline/l2cache.h); NULL until first used */
	/* TCP client connections: slot table with generations (the free
	 * stack and the generation counter are below, with the cold fields) */
	struct dlb_tcp_client **conns;
	uint32_t nconns, conns_cap;
	uint32_t nfree_conns;
	struct dlb_rcu_thread rcu;	/* epoch record: entered around each loop iteration's
					 * callbacks (invoke_in_section, worker.c) */
	uint8_t *scratch;		/* DLB_RBUF_SIZE: answers built outside a receive buffer */
	/* one recvmmsg batch (the arrays are at the end of the struct) */
	uint8_t (*rbuf)[DLB_RBUF_SIZE];	/* [DLB_UDP_BATCH], pages touched on use only */
	unsigned rdirty;		/* receive entries the kernel filled last time */
	/* the park clock (worker.c): while tsc_clock, dlb_worker_now reads
	 * tsc_now, which each parked receive sets from the TSC */
	bool tsc_clock;
	double tsc_now;			/* seconds, on ev_now's scale */
	uint64_t clk_tsc;		/* the TSC at its anchor... */
	double clk_ev;			/* ...and libev's time then */
	struct dlb_udp_pending *upend;	/* [DLB_UDP_BATCH]: the batch's queries (frontend.c) */
	struct dlb_be_stats *be_stats;	/* [DLB_MAX_BACKENDS] */
	struct dlb_qps_window *qps;	/* [DLB_MAX_BACKENDS]: firstAvailable's QPS windows
					 * (dnslb/pipeline/policy.h) */
	struct dlb_rings *rings;	/* query and response rings (dnslb/pipeline/rings.h) */
	struct dlb_dyn_worker *dyn;	/* atomic: dynamic-block rate tracking (dnslb/pipeline/dynblock.h),
					 * set by the main thread when a rule first needs it */
	struct dlb_coc *client_oc;	/* setMaxOutstandingPerClient: queries in flight per
					 * client subnet (dnslb/pipeline/abuse.h); NULL until used */
	/* blocking receive (setWorkerBlockingReceive; worker.c) */
	struct dlb_listener *park;	/* its only UDP socket, when it has one; else NULL */
	bool started;			/* the thread exists (main: signals may be sent) */
	bool stopping;			/* the stop async ran: the loop is ending */
	bool park_waiting;		/* atomic: in a blocking or coalescing receive */
	unsigned local_answers;		/* answers of this batch whose latency is
					 * not recorded yet (dlb_query_account_local) */
	struct dlb_lua_worker *lua;	/* own Lua state for Lua rules (lua/worker.h) */
	uint64_t lua_gen;		/* the ruleset generation it belongs to */

	pthread_t thread;
	struct dlb_rng rng;
	/* the one-way path (dnslb/core/sink.h): installed by dlb_worker_new */
	const struct dlb_upstream_sink *up_sink;		/* the pipeline's */
	const struct dlb_client_sink *client_sink[DLB_CLIENT_PROTOS];	/* by client->proto */
	unsigned rr_counter;		/* roundrobin policy */
	unsigned fe_gen;		/* atomic: the cfg->fe_gen it has synced to */
	int fe_failed;			/* atomic: listeners it could not open at runtime */
	ev_async fe_sync;		/* main: cfg's listeners changed */
	ev_timer fe_grace;		/* closes the UDP sockets of removed listeners */
	struct dlb_be_sock *shared[DLB_MAX_SHARED_SOCKS];	/* unconnected backend sockets */
	int nbe_failed;			/* atomic: backends it could not open at runtime */
	ev_async be_add;		/* main: cfg->nbackends grew */
	uint32_t *conns_free;		/* stack of free indices */
	uint32_t tcp_gen;
	struct dlb_doh_worker *doh;	/* DNS over HTTPS connections (dnslb/frontend/doh_conn.c);
					 * NULL until the first one */
	ev_timer timeout_timer;		/* earliest in-flight deadline */
	ev_async stop;
	struct dlb_lua_handoff *lua_next;	/* atomic: a reload's new state, taken by the
						 * worker when it sees that generation */
	/* delayed answers, in deadline order (delays differ rarely: insert from the tail) */
	struct dlb_delayed *delayed_head, *delayed_tail;
	ev_timer delay_timer;
	uint64_t idle_seen;		/* main: its receives at the last
					 * dlb_worker_wake_idle */

	/* Last, after every field a query reads (a few lines in a row): the
	 * counters, then the receive arrays (several KiB, one entry per
	 * datagram). */
	struct dlb_stats stats;
	struct mmsghdr rmsgs[DLB_UDP_BATCH];
	struct iovec riov[DLB_UDP_BATCH];
	union dlb_sockaddr raddr[DLB_UDP_BATCH];
	char rcmsg[DLB_UDP_BATCH][CMSG_SPACE(sizeof(struct in6_pktinfo)) + 64];
};

/** A Lua state built by a reload for the rules of generation @gen. */
struct dlb_lua_handoff {
	struct dlb_lua_worker *lw;
	uint64_t gen;
};

/*
 * Switch to the state handed over for @gen, if any. Implemented by
 * worker.c, which owns the hand-off between the main thread and the worker
 * (a leaf interface, as rules/rules.h has for Lua rules).
 */
void dlb_worker_take_lua(struct dlb_worker *w, uint64_t gen);

/**
 * The worker's Lua state for rules of generation @gen: after a reload, the
 * first query that sees the new rules switches to the state built for them
 * (and frees the old one). Thread: the worker.
 */
static inline struct dlb_lua_worker *
dlb_worker_lua(struct dlb_worker *w, uint64_t gen)
{
	if (gen != w->lua_gen)
		dlb_worker_take_lua(w, gen);
	return w->lua;
}

/**
 * Wait in a blocking recvmmsg on @fd (setWorkerBlockingReceive) for up to
 * @batch datagrams, into the worker's receive vector. A wake signal
 * (dlb_worker_wake, or the kernel's for a TCP connection on one of its
 * listeners) ends the wait at any point without losing a datagram already
 * received; so does dlb_worker_wake_idle (a safety net: nothing timed is
 * pending when a worker waits). With @coalesce, it first sleeps
 * for setWorkerReceiveCoalescing's interval, then takes what has queued
 * meanwhile, and blocks only if nothing has (dlb_frontend_park says when).
 * @return the datagrams received (0:
 * none), and in *@woken whether a wake signal came: the caller then goes
 * back to its event loop. Thread: the worker, outside an epoch section.
 */
int dlb_worker_park_recv(struct dlb_worker *w, int fd, unsigned batch, bool coalesce, bool *woken);

/**
 * Interrupt worker @w if it waits in dlb_worker_park_recv, after an
 * ev_async_send to it, so that its loop runs the async. Thread: any.
 */
void dlb_worker_wake(struct dlb_worker *w);

/**
 * Make the calling worker's next dlb_worker_park_recv return at once, so
 * that its loop polls its sockets first. dlb_listener_start calls it: a
 * connection queued on a TCP listener before its wake-up signal was set
 * would otherwise wait for the next datagram or dlb_worker_wake_idle.
 * Thread: a worker.
 */
void dlb_worker_wake_self(void);

/**
 * The safety net of the blocking receive, once a second: wake worker @w if
 * it waits in a blocking or coalescing receive and has started none since
 * the last call (it may have waited in the same one since). A waiting
 * worker thus returns to its loop within two seconds whatever happens; the
 * socket has no receive timeout, whose timer the kernel would arm and
 * cancel on every wait. Thread: main.
 */
void dlb_worker_wake_idle(struct dlb_worker *w);

/** The signal that wakes a waiting worker (also set with F_SETSIG on its TCP listeners). */
#define DLB_WAKE_SIGNAL SIGURG

/* msg_len of a receive entry the kernel has not filled since it was made ready */
#define DLB_RECV_UNFILLED UINT_MAX

/**
 * Make the receive vector ready for recvmmsg() again: only the entries the
 * kernel filled last time (@w->rdirty) need their lengths reset, and their
 * msg_len set back to DLB_RECV_UNFILLED (every other entry still has it), so
 * that a wait interrupted by a jump can tell what was received
 * (dlb_worker_park_recv). The caller stores the number it received in
 * @w->rdirty.
 */
static inline void
dlb_worker_prepare_recv(struct dlb_worker *w)
{
	for (unsigned i = 0; i < w->rdirty; i++) {
		w->rmsgs[i].msg_hdr.msg_namelen = sizeof(w->raddr[i]);
		w->rmsgs[i].msg_hdr.msg_controllen = sizeof(w->rcmsg[i]);
		w->rmsgs[i].msg_len = DLB_RECV_UNFILLED;
	}
	w->rdirty = 0;
}

/**
 * Receive up to @batch datagrams from @fd into the worker's receive vector.
 * @return how many (0 when nothing was waiting or on an error, logged at a
 * limited rate).
 */
int dlb_worker_recv_batch(struct dlb_worker *w, int fd, unsigned batch);

/** Current loop time, the clock for deadlines and latency: libev's, or in
 * the park loop the park clock (worker.c), which follows it within a few
 * microseconds. */
static inline double
dlb_worker_now(const struct dlb_worker *w)
{
	return w->tsc_clock ? w->tsc_now : ev_now(w->loop);
}

/** Seconds per TSC tick for the park clock; 0 where it is off (no stable
 * TSC: each parked receive then updates libev's clock instead). */
extern double dlb_tsc_seconds;

/** Measure the TSC's rate for the park clock, once per process (about 2
 * ms, on the first call; dlb_worker_new calls it). */
void dlb_worker_clock_init(void);
/** Before the park loop's first receive: anchor the park clock to libev's,
 * updated now. */
void dlb_worker_clock_anchor(struct dlb_worker *w);
/** After a parked receive: the worker's clock is now (see worker.c). */
void dlb_worker_clock_tick(struct dlb_worker *w);
/** Before starting a libev timer where the park clock may be on: libev's
 * clock brought up to now (and the park clock re-anchored). */
void dlb_worker_clock_sync(struct dlb_worker *w);
/** Leaving the park loop: back to libev's clock. */
static inline void
dlb_worker_clock_release(struct dlb_worker *w)
{
	w->tsc_clock = false;
}

/** Ready every receive entry of the batch arrays (dlb_worker_new). */
void dlb_worker_init_recv(struct dlb_worker *w);
/** Install the wake signal's handler, once per process (dlb_worker_start). */
void dlb_worker_wake_init(void);

/**
 * Begin an epoch section on worker @w and load the published snapshot into
 * w->snap: every setting, the ACL and the policies it reads until
 * dlb_worker_exit come from that one snapshot (docs/architecture.md#publication).
 * Thread: the worker.
 */
static inline void
dlb_worker_enter(struct dlb_worker *w)
{
	dlb_rcu_enter(&w->rcu);
	if (w->rcu.depth == 1)
		w->snap = dlb_config_snapshot(w->cfg);
}

/** End the section dlb_worker_enter began; w->snap may be freed after it. */
static inline void
dlb_worker_exit(struct dlb_worker *w)
{
	dlb_rcu_exit(&w->rcu);
}

#endif
