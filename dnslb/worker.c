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

#include "dnslb/pipeline/abuse.h"
#include "dnslb/upstream/backend.h"
#include "dnslb/core/config.h"
#include "dnslb/pipeline/forward.h"
#include "dnslb/frontend/frontend.h"
#include "dnslb/pipeline/l2cache.h"
#include "dnslb/core/log.h"
#include "dnslb/pipeline/policy.h"
#include "dnslb/core/probe.h"
#include "dnslb/store/redis.h"
#include "dnslb/pipeline/rings.h"
#include "dnslb/frontend/doh_conn.h"
#include "dnslb/frontend/tcp_client.h"
#include "dnslb/upstream/doh_upstream.h"
#include "dnslb/upstream/tcp_upstream.h"
#include "lua/worker.h"

static void
stop_cb(struct ev_loop *loop, ev_async *a, int revents)
{
	struct dlb_worker *w = ev_userdata(loop);

	w->stopping = true;
	ev_break(loop, EVBREAK_ALL);
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

	dlb_worker_enter(w);
	ev_invoke_pending(loop);
	dlb_worker_exit(w);
	dlb_rcu_poll(&w->rcu);
	/* about to block in epoll_wait: wait in the UDP socket instead if it may */
	if (w->park != NULL && !w->stopping && dlb_worker_quiet(w))
		dlb_frontend_park(w, w->park);
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
	dlb_worker_init_recv(w);
	ev_set_userdata(w->loop, w);
	/* the one-way path: dnslb/core/sink.h */
	w->up_sink = &dlb_forward_sink;
	w->client_sink[DLB_CLIENT_UDP] = &dlb_frontend_udp_sink;
	w->client_sink[DLB_CLIENT_TCP] = &dlb_tcp_client_sink;
	w->client_sink[DLB_CLIENT_INTERNAL] = &dlb_forward_internal_sink;
	w->client_sink[DLB_CLIENT_DOH] = &dlb_doh_client_sink;
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
	ev_init(&w->delay_timer, dlb_forward_delay_cb);
	ev_async_init(&w->stop, stop_cb);
	ev_async_start(w->loop, &w->stop);
	ev_set_invoke_pending_cb(w->loop, invoke_in_section);
	return w;
}

/*
 * Close every TCP connection of @w (shutdown): the clients' first, so the
 * backends' queries then end (through the sink) for clients already gone;
 * then free the per-client outstanding table (dnslb/pipeline/abuse.h).
 */
static void
worker_close_streams(struct dlb_worker *w)
{
	dlb_tcp_clients_close_all(w);
	dlb_doh_close_all(w);
	dlb_doh_up_close_all(w);
	dlb_tcp_up_close_all(w);	/* last: drops the kept TLS sessions, DoH servers' too */
	dlb_oc_worker_free(w);	/* the worker is ending: its UDP slots are freed without release */
}

static void *
worker_main(void *arg)
{
	struct dlb_worker *w = arg;
	const struct dlb_config *cfg = w->cfg;

	/* cpus= of the first frontend that has some: pin round robin over them
	 * (a reload may append listeners meanwhile: nfrontends is atomic) */
	for (int i = 0; i < __atomic_load_n(&cfg->nfrontends, __ATOMIC_ACQUIRE); i++) {
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
	worker_close_streams(w);
	dlb_rcu_unregister(&w->rcu);
	return NULL;
}

int
dlb_worker_start(struct dlb_worker *w)
{
	char name[16];

	dlb_worker_wake_init();
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
		worker_close_streams(w);
		ev_timer_stop(w->loop, &w->timeout_timer);
		ev_timer_stop(w->loop, &w->delay_timer);
		ev_timer_stop(w->loop, &w->fe_grace);
	}
	dlb_forward_delay_free_all(w);
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
