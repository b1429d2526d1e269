/*
 * redis.h - fleet state through Redis (docs/fleet.md):
 * the settings (setRedis), and asynchronous connections driven by libev
 * through hiredis's adapter, one per loop that needs one: each worker's
 * data connection, and the main thread's control and pub/sub connections.
 *
 * A connection reconnects on its own with exponential backoff (100 ms
 * doubling to 5 s, with jitter), sends AUTH and SELECT first, and fails a
 * command at once (callback with NULL) while it is down, over its cap of
 * commands in flight, or when the command's own timeout passes before the
 * reply: the caller then goes on from local state. Request records come
 * from a per-connection free list: no allocation per command once warm.
 *
 * Counters (summed over every connection on read, metrics.c):
 * redis-commands, redis-errors (error replies, failed sends, connection
 * failures), redis-timeouts, redis-reconnects, and the gauge
 * redis-connections-up.
 *
 * Thread: a connection is used only on the thread running its loop.
 * dlb_redis_settings is written at config time only.
 */
#ifndef DNSLB_REDIS_H
#define DNSLB_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ev_loop;
struct redisReply;
struct dlb_redis;

/** setRedis{}: where Redis is and how to talk to it. */
struct dlb_redis_settings {
	bool enabled;
	char host[256];			/* "127.0.0.1", or "" with a unix socket */
	int port;			/* default 6379 */
	char unix_path[108];		/* "/run/redis/redis.sock" */
	char user[64];			/* ACL user (Redis 6+), "" = none */
	char password[256];		/* "" = no AUTH */
	int db;				/* SELECT, default 0 */
	double connect_timeout;		/* s, default 1 */
	double command_timeout;		/* s, default 0.5, for control commands */
	unsigned max_in_flight;		/* per connection, default 1000 */
	char ns[64];			/* key namespace, default "dnslb" */
	char node[64];			/* this node's name, default the host name */
};

extern struct dlb_redis_settings dlb_redis_settings;

/** Defaults (enabled = false). Config time. */
void dlb_redis_settings_reset(void);

/**
 * Reply callback: @reply is NULL when the command failed (connection down,
 * over the cap, timed out, disconnected before the reply); an error reply
 * is passed as it is (type REDIS_REPLY_ERROR) and counted. @reply belongs
 * to hiredis: copy what you keep.
 */
typedef void dlb_redis_reply_fn(struct redisReply *reply, void *ud);

/**
 * Called on the connection's thread each time it is (re)connected and
 * authenticated; on a connection with subscriptions, once Redis has
 * confirmed them all, so that anything published after the call reaches it.
 */
typedef void dlb_redis_up_fn(struct dlb_redis *r, void *ud);

/**
 * A connection on @loop (not yet started: dlb_redis_start). @role names it
 * in the log and showRedis() ("worker 0", "control", "pubsub"). @return
 * NULL when out of memory.
 */
struct dlb_redis *dlb_redis_new(struct ev_loop *loop, const char *role);
/** Connect now and keep reconnecting. Thread: the loop's. */
void dlb_redis_start(struct dlb_redis *r);
/** Close and free (pending callbacks get NULL). Thread: the loop's, or after it stopped. */
void dlb_redis_free(struct dlb_redis *r);

void dlb_redis_on_up(struct dlb_redis *r, dlb_redis_up_fn *fn, void *ud);

/** Connected and authenticated. */
bool dlb_redis_is_up(const struct dlb_redis *r);
/** Up, and every subscription of this connection confirmed by Redis (none: as up). */
bool dlb_redis_subscribed(const struct dlb_redis *r);
/**
 * Nothing may arrive on @r unasked: no command in flight, no subscription,
 * no connection or reconnection under way (dlb_worker_quiet). Thread: its loop's.
 */
bool dlb_redis_quiet(const struct dlb_redis *r);

/**
 * Send a command (binary-safe arguments). @timeout: seconds until @fn gets
 * NULL if no reply came (0: the settings' command_timeout). @fn may be
 * NULL (fire and forget). @return 0 when sent; -1 when it could not be
 * (down, over the cap): @fn is then NOT called.
 */
int dlb_redis_command(struct dlb_redis *r, dlb_redis_reply_fn *fn, void *ud, double timeout,
		      int argc, const char **argv, const size_t *argvlen);

/**
 * Subscribe @r (a connection used for nothing else) to @channel: @fn gets
 * each message's payload; subscriptions are renewed on every reconnect.
 * At most 8 channels. @return 0 or -1.
 */
typedef void dlb_redis_message_fn(const char *channel, const char *payload, size_t len,
				  void *ud);
int dlb_redis_subscribe(struct dlb_redis *r, const char *channel, dlb_redis_message_fn *fn,
			void *ud);

/** A connection's counters (single writer: its thread; read with relaxed loads). */
struct dlb_redis_stats {
	uint64_t commands, errors, timeouts, reconnects;
	uint32_t in_flight;
	int up;
};
void dlb_redis_get_stats(const struct dlb_redis *r, struct dlb_redis_stats *out);
const char *dlb_redis_role(const struct dlb_redis *r);

/** Every connection made, for the counters and showRedis(). Thread: main. */
typedef void dlb_redis_visit_fn(const struct dlb_redis *r, void *ud);
void dlb_redis_visit(dlb_redis_visit_fn *fn, void *ud);

/** "<ns>:<what>" into @out. @return the length (truncated to @outsz - 1). */
size_t dlb_redis_key(char *out, size_t outsz, const char *what);

#endif
