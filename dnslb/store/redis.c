/*
 * redis.c - asynchronous Redis connections on libev loops (redis.h).
 *
 * hiredis 0.14 has no timeouts for asynchronous contexts: the connect
 * timeout and each command's timeout are ev_timers of ours. A command that
 * times out gets its callback with NULL at once; its record stays pending
 * (marked done) until hiredis hands its reply, or NULL on a disconnect,
 * then goes back to the free list. A connection whose replies stop coming
 * (more than max_in_flight outstanding) refuses new commands, so a slow
 * Redis costs each query at most its budget.
 */
#include "dnslb/store/redis.h"

#include <ev.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <hiredis/adapters/libev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dnslb/core/log.h"
#include "dnslb/core/util.h"

struct dlb_redis_settings dlb_redis_settings;

#define BACKOFF_MIN	0.1
#define BACKOFF_MAX	5.0
#define MAX_CHANNELS	8

struct req {
	struct dlb_redis *r;
	struct req *next_free;
	dlb_redis_reply_fn *fn;
	void *ud;
	ev_timer timer;
	bool done;			/* the callback ran (timeout): only recycle */
};

struct chan {
	char name[128];
	dlb_redis_message_fn *fn;
	void *ud;
	struct dlb_redis *r;
};

struct dlb_redis {
	struct ev_loop *loop;
	char role[32];
	redisAsyncContext *ac;		/* NULL while down */
	bool up;			/* connected and AUTH/SELECT sent */
	bool stopping;
	double backoff;
	ev_timer retry;			/* reconnect */
	ev_timer connect_timer;		/* connect timeout */
	struct req *free_reqs;
	dlb_redis_up_fn *on_up;
	void *on_up_ud;
	struct chan chans[MAX_CHANNELS];
	int nchans;
	int sub_wait;			/* SUBSCRIBEs of this connection not yet confirmed */
	struct dlb_redis_stats st;
	struct dlb_redis *next_all;
};

static struct dlb_redis *all_conns;

void
dlb_redis_settings_reset(void)
{
	char host[64];

	memset(&dlb_redis_settings, 0, sizeof(dlb_redis_settings));
	snprintf(dlb_redis_settings.host, sizeof(dlb_redis_settings.host), "127.0.0.1");
	dlb_redis_settings.port = 6379;
	dlb_redis_settings.connect_timeout = 1.0;
	dlb_redis_settings.command_timeout = 0.5;
	dlb_redis_settings.max_in_flight = 1000;
	snprintf(dlb_redis_settings.ns, sizeof(dlb_redis_settings.ns), "dnslb");
	if (gethostname(host, sizeof(host)) != 0)
		snprintf(host, sizeof(host), "dnslb");
	host[sizeof(host) - 1] = '\0';
	snprintf(dlb_redis_settings.node, sizeof(dlb_redis_settings.node), "%s", host);
}

size_t
dlb_redis_key(char *out, size_t outsz, const char *what)
{
	int n = snprintf(out, outsz, "%s:%s", dlb_redis_settings.ns, what);

	if (n < 0)
		return 0;
	return (size_t)n < outsz ? (size_t)n : outsz - 1;
}

static void
stat_add(uint64_t *c)
{
	__atomic_store_n(c, *c + 1, __ATOMIC_RELAXED);
}

/* ---- requests ------------------------------------------------------------ */

static struct req *
req_get(struct dlb_redis *r)
{
	struct req *q = r->free_reqs;

	if (q != NULL) {
		r->free_reqs = q->next_free;
	} else {
		q = calloc(1, sizeof(*q));
		if (q == NULL)
			return NULL;
	}
	q->r = r;
	q->done = false;
	return q;
}

static void
req_put(struct dlb_redis *r, struct req *q)
{
	ev_timer_stop(r->loop, &q->timer);
	q->next_free = r->free_reqs;
	r->free_reqs = q;
}

static void
req_timeout_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct req *q = (struct req *)((char *)t - offsetof(struct req, timer));

	if (q->done)
		return;
	q->done = true;
	stat_add(&q->r->st.timeouts);
	if (q->fn != NULL)
		q->fn(NULL, q->ud);
}

/* hiredis: the reply of a command, or NULL (disconnected, freed). */
static void
reply_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct req *q = privdata;
	struct dlb_redis *r = q->r;
	redisReply *rep = reply;

	__atomic_store_n(&r->st.in_flight, r->st.in_flight - 1, __ATOMIC_RELAXED);
	if (rep != NULL && rep->type == REDIS_REPLY_ERROR)
		stat_add(&r->st.errors);
	if (!q->done) {
		q->done = true;
		if (q->fn != NULL)
			q->fn(rep, q->ud);
	}
	req_put(r, q);
}

int
dlb_redis_command(struct dlb_redis *r, dlb_redis_reply_fn *fn, void *ud, double timeout,
		  int argc, const char **argv, const size_t *argvlen)
{
	struct req *q;

	if (!r->up || r->ac == NULL || r->st.in_flight >= dlb_redis_settings.max_in_flight)
		return -1;
	q = req_get(r);
	if (q == NULL)
		return -1;
	q->fn = fn;
	q->ud = ud;
	if (redisAsyncCommandArgv(r->ac, reply_cb, q, argc, argv, argvlen) != REDIS_OK) {
		stat_add(&r->st.errors);
		req_put(r, q);
		return -1;
	}
	stat_add(&r->st.commands);
	__atomic_store_n(&r->st.in_flight, r->st.in_flight + 1, __ATOMIC_RELAXED);
	if (fn != NULL) {
		ev_timer_init(&q->timer, req_timeout_cb,
			      timeout > 0 ? timeout : dlb_redis_settings.command_timeout, 0.);
		ev_timer_start(r->loop, &q->timer);
	}
	return 0;
}

/* ---- connection ------------------------------------------------------------ */

static void conn_start(struct dlb_redis *r);

static void
schedule_retry(struct dlb_redis *r)
{
	double jitter;

	if (r->stopping)
		return;
	jitter = r->backoff * (0.5 + (double)(rand() % 1000) / 2000.0);
	ev_timer_stop(r->loop, &r->retry);
	ev_timer_set(&r->retry, jitter, 0.);
	ev_timer_start(r->loop, &r->retry);
	r->backoff = r->backoff * 2 < BACKOFF_MAX ? r->backoff * 2 : BACKOFF_MAX;
}

static void
retry_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct dlb_redis *r = (struct dlb_redis *)((char *)t - offsetof(struct dlb_redis, retry));

	stat_add(&r->st.reconnects);
	conn_start(r);
}

/* One SUBSCRIBE of @r's connection @ac answered: after the last, it is up for its owner. */
static void
sub_confirmed(struct dlb_redis *r, const redisAsyncContext *ac)
{
	if (r->ac == ac && r->sub_wait > 0 && --r->sub_wait == 0 && r->on_up != NULL)
		r->on_up(r, r->on_up_ud);
}

static void
message_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct chan *c = privdata;
	redisReply *rep = reply;

	/* ["message", channel, payload]; the subscribe confirmation is ["subscribe", ...] */
	if (rep != NULL && rep->type == REDIS_REPLY_ERROR) {
		/* a refused SUBSCRIBE (ACL): counted, and no longer waited for */
		stat_add(&c->r->st.errors);
		dlb_log_ratelimited(DLB_LOG_ERR, "Redis (%s): SUBSCRIBE %s: %s", c->r->role, c->name,
				    rep->str);
		sub_confirmed(c->r, ac);
		return;
	}
	if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements != 3 ||
	    rep->element[0]->type != REDIS_REPLY_STRING)
		return;
	if (strcmp(rep->element[0]->str, "subscribe") == 0) {
		sub_confirmed(c->r, ac);
		return;
	}
	if (strcmp(rep->element[0]->str, "message") != 0 ||
	    rep->element[2]->type != REDIS_REPLY_STRING)
		return;
	c->fn(c->name, rep->element[2]->str, rep->element[2]->len, c->ud);
}

static void
auth_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct dlb_redis *r = privdata;
	redisReply *rep = reply;

	if (rep != NULL && rep->type == REDIS_REPLY_ERROR) {
		stat_add(&r->st.errors);
		dlb_log_ratelimited(DLB_LOG_ERR, "Redis (%s): %s", r->role, rep->str);
	}
}

static void
connect_cb(const redisAsyncContext *cac, int status)
{
	struct dlb_redis *r = cac->data;
	redisAsyncContext *ac = (redisAsyncContext *)(uintptr_t)cac;

	ev_timer_stop(r->loop, &r->connect_timer);
	if (status != REDIS_OK) {
		/* hiredis frees the context after this callback */
		dlb_log_ratelimited(DLB_LOG_WARN, "Redis (%s): cannot connect: %s", r->role,
				    cac->errstr);
		stat_add(&r->st.errors);
		r->ac = NULL;
		schedule_retry(r);
		return;
	}
	/* commands are pipelined: AUTH and SELECT go before anything else */
	if (dlb_redis_settings.password[0] != '\0') {
		if (dlb_redis_settings.user[0] != '\0')
			redisAsyncCommand(ac, auth_cb, r, "AUTH %s %s", dlb_redis_settings.user,
					  dlb_redis_settings.password);
		else
			redisAsyncCommand(ac, auth_cb, r, "AUTH %s", dlb_redis_settings.password);
	}
	if (dlb_redis_settings.db != 0)
		redisAsyncCommand(ac, auth_cb, r, "SELECT %d", dlb_redis_settings.db);
	for (int i = 0; i < r->nchans; i++)
		redisAsyncCommand(ac, message_cb, &r->chans[i], "SUBSCRIBE %s", r->chans[i].name);
	r->sub_wait = r->nchans;
	r->up = true;
	__atomic_store_n(&r->st.up, 1, __ATOMIC_RELAXED);
	r->backoff = BACKOFF_MIN;
	dlb_info("Redis (%s): connected", r->role);
	/* with subscriptions: once Redis confirms them (message_cb); a resync made before
	 * that could miss what another node publishes in between */
	if (r->nchans == 0 && r->on_up != NULL)
		r->on_up(r, r->on_up_ud);
}

static void
disconnect_cb(const redisAsyncContext *cac, int status)
{
	struct dlb_redis *r = cac->data;

	/* hiredis frees the context after this callback (pending replies got NULL) */
	r->ac = NULL;
	if (r->up)
		dlb_log_ratelimited(DLB_LOG_WARN, "Redis (%s): disconnected%s%s", r->role,
				    status != REDIS_OK ? ": " : "",
				    status != REDIS_OK ? cac->errstr : "");
	r->up = false;
	__atomic_store_n(&r->st.up, 0, __ATOMIC_RELAXED);
	if (status != REDIS_OK)
		stat_add(&r->st.errors);
	schedule_retry(r);
}

static void
connect_timeout_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct dlb_redis *r = (struct dlb_redis *)((char *)t -
						   offsetof(struct dlb_redis, connect_timer));

	if (r->ac != NULL && !r->up) {
		dlb_log_ratelimited(DLB_LOG_WARN, "Redis (%s): connect timed out", r->role);
		stat_add(&r->st.timeouts);
		/* disconnect_cb runs (status OK): it schedules the retry */
		redisAsyncDisconnect(r->ac);
	}
}

static void
conn_start(struct dlb_redis *r)
{
	const struct dlb_redis_settings *s = &dlb_redis_settings;
	redisAsyncContext *ac;

	if (r->stopping || r->ac != NULL)
		return;
	if (s->unix_path[0] != '\0')
		ac = redisAsyncConnectUnix(s->unix_path);
	else
		ac = redisAsyncConnect(s->host, s->port);
	if (ac == NULL || ac->err) {
		dlb_log_ratelimited(DLB_LOG_WARN, "Redis (%s): cannot connect: %s", r->role,
				    ac != NULL ? ac->errstr : "out of memory");
		if (ac != NULL)
			redisAsyncFree(ac);
		stat_add(&r->st.errors);
		schedule_retry(r);
		return;
	}
	ac->data = r;
	if (redisLibevAttach(r->loop, ac) != REDIS_OK) {
		redisAsyncFree(ac);
		schedule_retry(r);
		return;
	}
	redisAsyncSetConnectCallback(ac, connect_cb);
	redisAsyncSetDisconnectCallback(ac, disconnect_cb);
	r->ac = ac;
	ev_timer_set(&r->connect_timer, s->connect_timeout > 0 ? s->connect_timeout : 1.0, 0.);
	ev_timer_start(r->loop, &r->connect_timer);
}

struct dlb_redis *
dlb_redis_new(struct ev_loop *loop, const char *role)
{
	struct dlb_redis *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return NULL;
	r->loop = loop;
	snprintf(r->role, sizeof(r->role), "%s", role);
	r->backoff = BACKOFF_MIN;
	ev_init(&r->retry, retry_cb);
	ev_init(&r->connect_timer, connect_timeout_cb);
	r->next_all = all_conns;
	all_conns = r;
	return r;
}

void
dlb_redis_start(struct dlb_redis *r)
{
	conn_start(r);
}

void
dlb_redis_on_up(struct dlb_redis *r, dlb_redis_up_fn *fn, void *ud)
{
	r->on_up = fn;
	r->on_up_ud = ud;
}

bool
dlb_redis_is_up(const struct dlb_redis *r)
{
	return r != NULL && r->up;
}

bool
dlb_redis_subscribed(const struct dlb_redis *r)
{
	return dlb_redis_is_up(r) && r->sub_wait == 0;
}

bool
dlb_redis_quiet(const struct dlb_redis *r)
{
	return r->up && r->st.in_flight == 0 && r->nchans == 0 && !ev_is_active(&r->retry) &&
	       !ev_is_active(&r->connect_timer);
}

int
dlb_redis_subscribe(struct dlb_redis *r, const char *channel, dlb_redis_message_fn *fn, void *ud)
{
	struct chan *c;

	if (r->nchans == MAX_CHANNELS || strlen(channel) >= sizeof(r->chans[0].name))
		return -1;
	c = &r->chans[r->nchans++];
	snprintf(c->name, sizeof(c->name), "%s", channel);
	c->fn = fn;
	c->ud = ud;
	c->r = r;
	if (r->up && r->ac != NULL) {
		/* while the connection's own SUBSCRIBEs are unconfirmed, this one's
		 * confirmation must not count as theirs */
		if (r->sub_wait > 0)
			r->sub_wait++;
		redisAsyncCommand(r->ac, message_cb, c, "SUBSCRIBE %s", c->name);
	}
	return 0;
}

void
dlb_redis_free(struct dlb_redis *r)
{
	struct dlb_redis **pp;

	if (r == NULL)
		return;
	r->stopping = true;
	ev_timer_stop(r->loop, &r->retry);
	ev_timer_stop(r->loop, &r->connect_timer);
	if (r->ac != NULL) {
		/* pending callbacks get NULL now; disconnect_cb sees stopping */
		redisAsyncFree(r->ac);
		r->ac = NULL;
	}
	while (r->free_reqs != NULL) {
		struct req *q = r->free_reqs;

		r->free_reqs = q->next_free;
		free(q);
	}
	for (pp = &all_conns; *pp != NULL; pp = &(*pp)->next_all)
		if (*pp == r) {
			*pp = r->next_all;
			break;
		}
	free(r);
}

void
dlb_redis_get_stats(const struct dlb_redis *r, struct dlb_redis_stats *out)
{
	out->commands = __atomic_load_n(&r->st.commands, __ATOMIC_RELAXED);
	out->errors = __atomic_load_n(&r->st.errors, __ATOMIC_RELAXED);
	out->timeouts = __atomic_load_n(&r->st.timeouts, __ATOMIC_RELAXED);
	out->reconnects = __atomic_load_n(&r->st.reconnects, __ATOMIC_RELAXED);
	out->in_flight = __atomic_load_n(&r->st.in_flight, __ATOMIC_RELAXED);
	out->up = __atomic_load_n(&r->st.up, __ATOMIC_RELAXED);
}

const char *
dlb_redis_role(const struct dlb_redis *r)
{
	return r->role;
}

void
dlb_redis_visit(dlb_redis_visit_fn *fn, void *ud)
{
	for (const struct dlb_redis *r = all_conns; r != NULL; r = r->next_all)
		fn(r, ud);
}
