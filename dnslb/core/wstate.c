/*
 * wstate.c - the data plane's own primitives on a worker's state
 * (dnslb/core/wstate.h): the park clock, batched receives, blocking receive and
 * wake-ups. The thread's creation and life are in worker.c.
 */
#include "dnslb/core/wstate.h"

#include <sched.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "dnslb/core/config.h"
#include "dnslb/core/log.h"
#include "dnslb/core/probe.h"

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
void
dlb_worker_init_recv(struct dlb_worker *w)
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

void
dlb_worker_wake_init(void)
{
	pthread_once(&wake_once, wake_install);
}
