/*
 * worker.c - a data-plane thread: creation (sockets bound on the main
 * thread, before privileges are dropped), its event loop, orderly stop.
 */
#include "dnslb/worker.h"

#include <sched.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "dnslb/abuse.h"
#include "dnslb/backend.h"
#include "dnslb/config.h"
#include "dnslb/frontend.h"
#include "dnslb/l2cache.h"
#include "dnslb/log.h"
#include "dnslb/policy.h"
#include "dnslb/probe.h"
#include "dnslb/redis.h"
#include "dnslb/rings.h"
#include "dnslb/tcp.h"
#include "lua/worker.h"

/*
 * The park clock. A worker parked in its UDP socket (dlb_frontend_park)
 * needs the time after each receive: its queries' timestamps and latency,
 * cache ages, deadlines. ev_now_update reads the clock through the vDSO and
 * redoes libev's bookkeeping, about 240 cycles per wake-up here, most of it
 * misses on the clock's shared data after the wait (docs/performance.md).
 * The park clock reads the TSC instead and adds the ticks since its anchor,
 * a (TSC, ev_now) pair taken when the park loop starts and again whenever
 * the anchor is older than PARK_CLOCK_SYNC. So libev's own clock is never
 * further behind than that, and a timer started in the park loop is
 * started on an updated one (dlb_worker_clock_sync: backend timeouts,
 * delayed answers, second-level cache lookups). The park clock never goes
 * backwards: a reading below the last one repeats it.
 * It is on where the kernel keeps time with the TSC (the clocksource "tsc":
 * constant rate, synchronised across CPUs); elsewhere each parked receive
 * calls ev_now_update, as it always did.
 */
#define PARK_CLOCK_SYNC 0.001	/* s */

double dlb_tsc_seconds;
static uint64_t park_clock_sync_ticks;
static pthread_once_t park_clock_once = PTHREAD_ONCE_INIT;

/* Measure the TSC's rate against CLOCK_MONOTONIC (dlb_now) over about 2 ms. */
static void
park_clock_init(void)
{
#if defined(__x86_64__)
	char cs[32] = "";
	FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
	struct timespec pause = { 0, 2000000 };
	uint64_t t0, t1;
	double m0, m1, sec;

	if (f == NULL)
		return;
	if (fgets(cs, sizeof(cs), f) == NULL)
		cs[0] = '\0';
	fclose(f);
	if (strcmp(cs, "tsc\n") != 0)
		return;
	m0 = dlb_now();
	t0 = __rdtsc();
	nanosleep(&pause, NULL);
	m1 = dlb_now();
	t1 = __rdtsc();
	if (t1 <= t0 || m1 <= m0)
		return;
	sec = (m1 - m0) / (double)(t1 - t0);
	if (sec < 1e-10 || sec > 1e-8)	/* outside 100 MHz to 10 GHz: not trusted */
		return;
	park_clock_sync_ticks = (uint64_t)(PARK_CLOCK_SYNC / sec);
	dlb_tsc_seconds = sec;
#endif
}

void
dlb_worker_clock_init(void)
{
	pthread_once(&park_clock_once, park_clock_init);
}

void
dlb_worker_clock_anchor(struct dlb_worker *w)
{
	ev_now_update(w->loop);
#if defined(__x86_64__)
	if (dlb_tsc_seconds > 0) {
		w->clk_tsc = __rdtsc();
		w->clk_ev = ev_now(w->loop);
		if (!w->tsc_clock || w->clk_ev > w->tsc_now)
			w->tsc_now = w->clk_ev;
		w->tsc_clock = true;
	}
#endif
}

DLB_HOT void
dlb_worker_clock_tick(struct dlb_worker *w)
{
#if defined(__x86_64__)
	if (w->tsc_clock) {
		/* unsigned: a TSC behind the anchor (it never should be) re-anchors too */
		uint64_t d = __rdtsc() - w->clk_tsc;
		double now;

		if (__builtin_expect(d >= park_clock_sync_ticks, 0)) {
			dlb_worker_clock_anchor(w);
			return;
		}
		now = w->clk_ev + (double)d * dlb_tsc_seconds;
		if (now > w->tsc_now)
			w->tsc_now = now;
		return;
	}
#endif
	ev_now_update(w->loop);
}

void
dlb_worker_clock_sync(struct dlb_worker *w)
{
	if (w->tsc_clock)
		dlb_worker_clock_anchor(w);
}

/* Point every receive entry at its buffer once; recvmmsg() only changes lengths. */
static void
init_recv(struct dlb_worker *w)
{
	for (unsigned i = 0; i < DLB_UDP_BATCH; i++) {
		struct msghdr *mh = &w->rmsgs[i].msg_hdr;

		w->riov[i].iov_base = w->rbuf[i];
		w->riov[i].iov_len = DLB_RBUF_SIZE;
		mh->msg_name = &w->raddr[i];
		mh->msg_namelen = sizeof(w->raddr[i]);
		mh->msg_iov = &w->riov[i];
		mh->msg_iovlen = 1;
		mh->msg_control = w->rcmsg[i];
		mh->msg_controllen = sizeof(w->rcmsg[i]);
		mh->msg_flags = 0;
		w->rmsgs[i].msg_len = DLB_RECV_UNFILLED;
	}
	w->rdirty = 0;
}

DLB_HOT int
dlb_worker_recv_batch(struct dlb_worker *w, int fd, unsigned batch)
{
	int n;

	dlb_worker_prepare_recv(w);
	n = dlb_recvmmsg(fd, w->rmsgs, batch, MSG_DONTWAIT);
	if (n == -1) {
		if (errno != EAGAIN && errno != EINTR)
			dlb_log_ratelimited(DLB_LOG_WARN, "recvmmsg: %s", strerror(errno));
		return 0;
	}
	w->rdirty = (unsigned)n;
	return n;
}

static void
stop_cb(struct ev_loop *loop, ev_async *a, int revents)
{
	struct dlb_worker *w = ev_userdata(loop);

	w->stopping = true;
	ev_break(loop, EVBREAK_ALL);
}

/* ---- blocking receive (setWorkerBlockingReceive) ------------------------ */

/*
 * A worker with nothing in flight waits for its next query in recvmmsg on
 * its UDP socket (blocking, with no timeout: dlb_worker_wake_idle) instead
 * of epoll_wait then recvmmsg: one system call per wake-up instead of two,
 * the reflector floor's own pattern. Anything else that may need the worker
 * while it waits sends it DLB_WAKE_SIGNAL: the main thread after an
 * ev_async_send (dlb_worker_wake), the kernel for a connection on one of its
 * TCP listeners (O_ASYNC, F_SETOWN_EX to the worker's thread; frontend.c).
 *
 * While park_armed is set (from just before the "no wake pending" check
 * until the call returns) the handler jumps out of the whole wait: a signal
 * in the window before the call is not lost, and one during the call ends
 * it (it is not restarted: the handler does not return). The entries the
 * kernel filled before that are those whose msg_len is no longer
 * DLB_RECV_UNFILLED (dlb_worker_prepare_recv), so no datagram it had
 * received is lost. SA_NODEFER leaves the signal unblocked after the jump
 * (sigsetjmp saves no mask: no system call). Anywhere else the handler only
 * sets park_wake, and SA_RESTART makes the worker's other blocking calls
 * (a log write to a full pipe) carry on as if no signal had come.
 */

static __thread bool precise_sleep;	/* this thread's timer slack is set */
static __thread volatile sig_atomic_t park_wake;	/* a wake signal came */
static __thread volatile sig_atomic_t park_armed;	/* park_jmp may be jumped to */
static __thread sigjmp_buf park_jmp;

static void
wake_handler(int sig)
{
	(void)sig;
	park_wake = 1;
	if (park_armed) {
		park_armed = 0;
		siglongjmp(park_jmp, 1);
	}
}

static pthread_once_t wake_once = PTHREAD_ONCE_INIT;

static void
wake_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = wake_handler;
	sa.sa_flags = SA_NODEFER | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(DLB_WAKE_SIGNAL, &sa, NULL);
}

DLB_HOT bool
dlb_worker_quiet(const struct dlb_worker *w)
{
	return w->slots.used == 0 && w->ndelayed == 0 && w->nconns == w->nfree_conns &&
	       w->tcp_up == 0 && (w->redis == NULL || dlb_redis_quiet(w->redis)) &&
	       dlb_l2_worker_quiet(w);
}

DLB_HOT int
dlb_worker_park_recv(struct dlb_worker *w, int fd, unsigned batch, bool coalesce, bool *woken)
{
	volatile unsigned max = batch;	/* read after a jump */
	int n;

	DLB_PROBE_WAKE_END();
	dlb_worker_prepare_recv(w);
	*woken = false;
	if (sigsetjmp(park_jmp, 0) != 0) {
		/* jumped out of the wait: keep the datagrams the kernel had filled */
		for (n = 0; n < (int)max && w->rmsgs[n].msg_len != DLB_RECV_UNFILLED; n++)
			;
		goto woken;
	}
	park_armed = 1;
	if (park_wake) {
		park_armed = 0;
		n = 0;
		goto woken;
	}
	/* for dlb_worker_wake_idle (the main thread) */
	__atomic_store_n(&w->park_waiting, true, __ATOMIC_RELAXED);
	if (coalesce) {
		/* a timer, not the next datagram, wakes the worker: the ones that
		 * arrive meanwhile make one batch (a wake signal jumps out of it) */
		struct timespec ts = { 0, (long)w->cfg->recv_coalesce_us * 1000 };

		if (!precise_sleep) {
			/* the default slack (50 us) would add up to that much latency */
			prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
			precise_sleep = true;
		}
		w->stats.coalesced_receives++;
		nanosleep(&ts, NULL);
		n = dlb_recvmmsg(fd, w->rmsgs, batch, MSG_DONTWAIT);
		if (n > 0 || errno != EAGAIN)
			goto got;
	}
	w->stats.blocking_receives++;
	n = dlb_recvmmsg(fd, w->rmsgs, batch, MSG_WAITFORONE);
got:
	park_armed = 0;
	__atomic_store_n(&w->park_waiting, false, __ATOMIC_RELAXED);
	if (n == -1) {
		if (errno == EINTR) {	/* another signal: treat it as a wake-up */
			*woken = true;
		} else if (errno != EAGAIN) {
			dlb_log_ratelimited(DLB_LOG_WARN, "recvmmsg: %s", strerror(errno));
			*woken = true;
		}
		return 0;	/* EAGAIN: nothing came */
	}
	w->rdirty = (unsigned)n;
	DLB_PROBE_WAKE_BEGIN();
	return n;
woken:
	park_wake = 0;
	__atomic_store_n(&w->park_waiting, false, __ATOMIC_RELAXED);
	w->stats.blocking_receive_wakeups++;
	w->rdirty = (unsigned)n;
	*woken = true;
	return n;
}

void
dlb_worker_wake_self(void)
{
	park_wake = 1;
}

void
dlb_worker_wake(struct dlb_worker *w)
{
	if (w->started && w->cfg->blocking_receive)
		pthread_kill(w->thread, DLB_WAKE_SIGNAL);
}

void
dlb_worker_wake_idle(struct dlb_worker *w)
{
	uint64_t n = __atomic_load_n(&w->stats.blocking_receives, __ATOMIC_RELAXED) +
		     __atomic_load_n(&w->stats.coalesced_receives, __ATOMIC_RELAXED);

	if (n == w->idle_seen && __atomic_load_n(&w->park_waiting, __ATOMIC_RELAXED))
		dlb_worker_wake(w);
	w->idle_seen = n;
}

/*
 * The listener a worker can wait on: the only one with a UDP socket, if it
 * is active (a paused one keeps its UDP socket for a grace period: then
 * there are two, or the only one is not read any more).
 */
static void
park_choose(struct dlb_worker *w)
{
	struct dlb_listener *one = NULL;

	w->park = NULL;
	if (!w->cfg->blocking_receive)
		return;
	for (int i = 0; i < w->nlisteners; i++) {
		if (w->listeners[i].udp_fd < 0)
			continue;
		if (one != NULL)
			return;
		one = &w->listeners[i];
	}
	if (one != NULL && one->active)
		w->park = one;
}

/*
 * The loop's invoke step (ev_set_invoke_pending_cb): every callback of a loop
 * iteration runs inside one epoch section, left before the loop blocks again,
 * so an idle worker never holds back reclamation. (Replaces a check and a
 * prepare watcher: two fewer watcher dispatches per wake-up.)
 */
static void
invoke_in_section(struct ev_loop *loop)
{
	struct dlb_worker *w = ev_userdata(loop);

	dlb_rcu_enter(&w->rcu);
	ev_invoke_pending(loop);
	dlb_rcu_exit(&w->rcu);
	dlb_rcu_poll(&w->rcu);
	/* about to block in epoll_wait: wait in the UDP socket instead if it may */
	if (w->park != NULL && !w->stopping && dlb_worker_quiet(w))
		dlb_frontend_park(w, w->park);
}

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

static void
delay_cb(struct ev_loop *loop, ev_timer *t, int revents)
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
		dlb_frontend_send_reply(w, &d->client, d->pkt, d->len);
		free(d);
	}
	delay_arm(w);
}

void
dlb_worker_delay_reply(struct dlb_worker *w, const struct dlb_client *c, const uint8_t *pkt,
		       size_t len, uint32_t ms)
{
	struct dlb_delayed *d = NULL, **pp;

	if (w->ndelayed < DLB_MAX_DELAYED)
		d = malloc(sizeof(*d) + len);
	if (d == NULL) {
		dlb_frontend_send_reply(w, c, pkt, len);
		return;
	}
	d->when = ev_now(w->loop) + ms / 1000.0;
	d->client = *c;
	d->len = len;
	memcpy(d->pkt, pkt, len);
	d->next = NULL;
	w->ndelayed++;
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
	if (w->delayed_head == d)
		delay_arm(w);
	else if (!ev_is_active(&w->delay_timer))
		delay_arm(w);
}

void
dlb_worker_give_lua(struct dlb_worker *w, struct dlb_lua_worker *lw, uint64_t gen)
{
	struct dlb_lua_handoff *h = malloc(sizeof(*h)), *old;

	if (h == NULL) {
		dlb_luaw_free(lw);
		return;		/* the worker keeps its state; Lua rules of @gen fail, logged */
	}
	h->lw = lw;
	h->gen = gen;
	old = __atomic_exchange_n(&w->lua_next, h, __ATOMIC_ACQ_REL);
	if (old != NULL) {
		/* never taken: a newer reload came first */
		dlb_luaw_free(old->lw);
		free(old);
	}
}

void
dlb_worker_take_lua(struct dlb_worker *w, uint64_t gen)
{
	struct dlb_lua_handoff *h = __atomic_exchange_n(&w->lua_next, NULL, __ATOMIC_ACQ_REL);

	if (h == NULL)
		return;
	if (h->gen > gen) {
		/* built for rules this worker does not see yet: put it back */
		struct dlb_lua_handoff *none = NULL;

		if (__atomic_compare_exchange_n(&w->lua_next, &none, h, false, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			return;
		/* a newer one arrived meanwhile: ours is stale */
	}
	if (h->gen != gen) {
		dlb_luaw_free(h->lw);
		free(h);
		return;
	}
	dlb_luaw_free(w->lua);
	w->lua = h->lw;
	w->lua_gen = h->gen;
	free(h);
}

static void
delay_free_all(struct dlb_worker *w)
{
	while (w->delayed_head != NULL) {
		struct dlb_delayed *d = w->delayed_head;

		w->delayed_head = d->next;
		free(d);
	}
	w->delayed_tail = NULL;
	w->ndelayed = 0;
}

/* How long a removed listener's UDP socket stays open for answers in flight. */
#define LISTENER_GRACE_S 10.0

static void
fe_grace_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct dlb_worker *w = ev_userdata(loop);
	double now = ev_now(loop), next = 0;

	for (int i = 0; i < w->nlisteners; i++) {
		struct dlb_listener *l = &w->listeners[i];

		if (l->active || l->udp_fd < 0)
			continue;
		if (l->close_at <= now)
			dlb_listener_close_udp(l);
		else if (next == 0 || l->close_at < next)
			next = l->close_at;
	}
	if (next != 0) {
		ev_timer_set(t, next - now, 0.);
		ev_timer_start(loop, t);
	}
	park_choose(w);
}

/*
 * Match the listeners to cfg->frontends: open the new ones, pause the
 * removed ones (their UDP sockets close LISTENER_GRACE_S later), resume
 * those added back. A listener that cannot be opened is counted in
 * fe_failed and left closed.
 */
static void
fe_sync_cb(struct ev_loop *loop, ev_async *a, int revents)
{
	struct dlb_worker *w = ev_userdata(loop);
	const struct dlb_config *cfg = w->cfg;
	unsigned gen = __atomic_load_n(&cfg->fe_gen, __ATOMIC_ACQUIRE);
	int n = __atomic_load_n(&cfg->nfrontends, __ATOMIC_ACQUIRE);
	bool grace = false;

	for (int i = 0; i < n; i++) {
		const struct dlb_frontend_cfg *fe = &cfg->frontends[i];
		struct dlb_listener *l = &w->listeners[i];
		bool want = !__atomic_load_n(&fe->removed, __ATOMIC_ACQUIRE);

		if (i >= w->nlisteners) {
			l->w = w;
			l->index = i;
			l->family = fe->addr.ss_family;
			l->udp_fd = l->tcp_fd = l->out.fd = -1;
			l->udp_ep = -1;
			__atomic_store_n(&w->nlisteners, i + 1, __ATOMIC_RELEASE);
		}
		if (want && !l->active) {
			if (l->udp_fd < 0 && l->tcp_fd < 0) {
				/* never opened (or closed since): bind both afresh */
				struct dlb_listener fresh;

				if (dlb_listener_open(w, &fresh, i, fe) == 0) {
					l->udp_fd = fresh.udp_fd;
					l->tcp_fd = fresh.tcp_fd;
					l->wildcard = fresh.wildcard;
					/* not copied: its messages point into it */
					dlb_sendbatch_init(&l->out, fresh.udp_fd);
					dlb_listener_start(l);
					l->active = true;
				} else {
					__atomic_fetch_add(&w->fe_failed, 1, __ATOMIC_RELAXED);
				}
			} else if (dlb_listener_resume(l, fe) == 0) {
				l->active = true;
			} else {
				__atomic_fetch_add(&w->fe_failed, 1, __ATOMIC_RELAXED);
			}
		} else if (!want && l->active) {
			dlb_listener_pause(l);
			l->active = false;
			l->close_at = ev_now(loop) + LISTENER_GRACE_S;
			grace = true;
		}
	}
	if (grace && !ev_is_active(&w->fe_grace)) {
		ev_timer_set(&w->fe_grace, LISTENER_GRACE_S, 0.);
		ev_timer_start(loop, &w->fe_grace);
	}
	park_choose(w);
	__atomic_store_n(&w->fe_gen, gen, __ATOMIC_RELEASE);
}

void
dlb_worker_sync_listeners(struct dlb_worker *w)
{
	ev_async_send(w->loop, &w->fe_sync);
	dlb_worker_wake(w);
}

/*
 * Open and start the sockets towards the servers appended since the last
 * time. One that cannot be opened (no fd left) keeps no socket and is
 * counted in nbe_failed: main leaves it out of every pool.
 */
static void
be_add_cb(struct ev_loop *loop, ev_async *a, int revents)
{
	struct dlb_worker *w = ev_userdata(loop);
	int n = __atomic_load_n(&w->cfg->nbackends, __ATOMIC_ACQUIRE);

	for (int b = w->nbe; b < n; b++) {
		if (dlb_backend_local_open(w, w->cfg->backends[b]) == 0) {
			dlb_backend_local_start(w, b);
		} else {
			dlb_backend_local_close(w, b);
			__atomic_fetch_add(&w->nbe_failed, 1, __ATOMIC_RELAXED);
		}
		__atomic_store_n(&w->nbe, b + 1, __ATOMIC_RELEASE);
	}
}

void
dlb_worker_open_new_backends(struct dlb_worker *w)
{
	ev_async_send(w->loop, &w->be_add);
	dlb_worker_wake(w);
}

struct dlb_worker *
dlb_worker_new(int id, const struct dlb_config *cfg)
{
	struct dlb_worker *w = calloc(1, sizeof(*w));
	/* sized for every server newServer may add at runtime (80 B each) */
	int nb = DLB_MAX_BACKENDS;

	if (w == NULL)
		return NULL;
	w->id = id;
	w->cfg = cfg;
	w->default_pool = dlb_config_find_pool(cfg, "");
	dlb_rng_init(&w->rng);
	dlb_slot_pool_init(&w->slots);
	dlb_worker_clock_init();
	w->loop = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
	/* receive buffers: only the pages datagrams actually fill become resident */
	w->rbuf = mmap(NULL, (size_t)DLB_UDP_BATCH * DLB_RBUF_SIZE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	w->scratch = malloc(DLB_RBUF_SIZE);
	w->be = calloc((size_t)nb, sizeof(*w->be));
	w->be_stats = aligned_alloc(64, (size_t)nb * sizeof(*w->be_stats));
	w->qps = calloc((size_t)nb, sizeof(*w->qps));
	/* sized for the listeners reloads may add (pages touched only when used) */
	w->listeners = calloc(DLB_MAX_FRONTENDS, sizeof(*w->listeners));
	if (w->loop == NULL || w->rbuf == MAP_FAILED || w->be == NULL || w->be_stats == NULL ||
	    w->qps == NULL ||
	    w->listeners == NULL || w->scratch == NULL || dlb_frontend_worker_init(w) != 0) {
		if (w->rbuf == MAP_FAILED)
			w->rbuf = NULL;
		dlb_err("worker %d: out of memory", id);
		dlb_worker_free(w);
		return NULL;
	}
	memset(w->be_stats, 0, (size_t)nb * sizeof(*w->be_stats));
	w->rings = dlb_rings_new(cfg->workers);
	if (w->rings == NULL) {
		dlb_worker_free(w);
		return NULL;
	}
	init_recv(w);
	ev_set_userdata(w->loop, w);
	for (int i = 0; i < cfg->nfrontends; i++) {
		if (dlb_listener_open(w, &w->listeners[i], i, &cfg->frontends[i]) != 0) {
			dlb_worker_free(w);
			return NULL;
		}
		w->listeners[i].active = true;
		w->nlisteners++;
	}
	w->fe_gen = cfg->fe_gen;
	ev_async_init(&w->fe_sync, fe_sync_cb);
	ev_async_start(w->loop, &w->fe_sync);
	ev_init(&w->fe_grace, fe_grace_cb);
	for (int b = 0; b < cfg->nbackends; b++) {
		w->nbe = b + 1;		/* closed by dlb_worker_free even if half open */
		if (dlb_backend_local_open(w, cfg->backends[b]) != 0) {
			dlb_worker_free(w);
			return NULL;
		}
	}
	ev_init(&w->timeout_timer, dlb_backend_timeout_cb);
	ev_async_init(&w->be_add, be_add_cb);
	ev_async_start(w->loop, &w->be_add);
	ev_init(&w->delay_timer, delay_cb);
	ev_async_init(&w->stop, stop_cb);
	ev_async_start(w->loop, &w->stop);
	ev_set_invoke_pending_cb(w->loop, invoke_in_section);
	return w;
}

static void *
worker_main(void *arg)
{
	struct dlb_worker *w = arg;
	const struct dlb_config *cfg = w->cfg;

	/* cpus= of the first frontend that has some: pin round robin over them */
	for (int i = 0; i < cfg->nfrontends; i++) {
		const struct dlb_frontend_cfg *fe = &cfg->frontends[i];

		if (fe->ncpus > 0) {
			cpu_set_t set;

			CPU_ZERO(&set);
			CPU_SET(fe->cpus[w->id % fe->ncpus], &set);
			pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
			break;
		}
	}
	for (int i = 0; i < w->nlisteners; i++)
		dlb_listener_start(&w->listeners[i]);
	for (int b = 0; b < w->nbe; b++)
		dlb_backend_local_start(w, b);
	if (dlb_rcu_register(&w->rcu) != 0) {
		dlb_err("worker %d: out of memory", w->id);
		return NULL;
	}
	park_choose(w);
	ev_run(w->loop, 0);
	/* (outside any section now) close connections, then free what we retired */
	dlb_tcp_worker_close_all(w);
	dlb_rcu_unregister(&w->rcu);
	return NULL;
}

int
dlb_worker_start(struct dlb_worker *w)
{
	char name[16];

	pthread_once(&wake_once, wake_install);
	if (pthread_create(&w->thread, NULL, worker_main, w) != 0)
		return -1;
	w->started = true;
	snprintf(name, sizeof(name), "dnslb/w%d", w->id);
	pthread_setname_np(w->thread, name);
	return 0;
}

void
dlb_worker_stop_join(struct dlb_worker *w)
{
	ev_async_send(w->loop, &w->stop);
	dlb_worker_wake(w);
	pthread_join(w->thread, NULL);
}

void
dlb_worker_free(struct dlb_worker *w)
{
	if (w == NULL)
		return;
	if (w->loop != NULL) {
		dlb_tcp_worker_close_all(w);
		ev_timer_stop(w->loop, &w->timeout_timer);
		ev_timer_stop(w->loop, &w->delay_timer);
		ev_timer_stop(w->loop, &w->fe_grace);
	}
	delay_free_all(w);
	dlb_oc_worker_free(w);		/* setMaxOutstandingPerClient's table (idempotent) */
	dlb_l2_worker_free(w);		/* after the Redis connection (main.c) */
	dlb_luaw_free(w->lua);
	if (w->lua_next != NULL) {
		dlb_luaw_free(w->lua_next->lw);
		free(w->lua_next);
	}
	for (int i = 0; i < w->nlisteners; i++)
		dlb_listener_close(&w->listeners[i]);
	if (w->be != NULL)
		for (int b = 0; b < w->nbe; b++)
			dlb_backend_local_close(w, b);
	if (w->loop != NULL)
		dlb_backend_shared_close(w);
	dlb_slot_pool_deinit(&w->slots);
	if (w->rbuf != NULL)
		munmap(w->rbuf, (size_t)DLB_UDP_BATCH * DLB_RBUF_SIZE);
	dlb_frontend_worker_free(w);
	if (w->loop != NULL)
		ev_loop_destroy(w->loop);
	free(w->listeners);
	free(w->scratch);
	free(w->be);
	free(w->be_stats);
	free(w->qps);
	dlb_rings_free(w->rings);
	free(w);
}
