/*
 * fleet.h - what the nodes of a fleet share through Redis beyond the
 * connections of redis.h (docs/fleet.md):
 *
 * Shared dynamic blocks
 *   A block this node raises (dynblock.c's hook) is written to
 *   "<ns>:block:<node>:<n|s>:<key>" with PX expiry at its end, and announced
 *   on "<ns>:blocks". Every other node applies what it hears, marked with
 *   its origin, and never re-announces it; a node ignores its own
 *   announcements. On each (re)connection, and every FLEET_RESYNC seconds,
 *   a node re-writes its own blocks in force and loads the fleet's (SCAN
 *   MATCH "<ns>:block:*" COUNT, then MGET, all asynchronous).
 *
 * Fleet view
 *   Once a second a node writes its figures to the hash "<ns>:node:<node>"
 *   (expiring after 5 s), and refreshes its copy of every node's hash (SCAN
 *   "<ns>:node:*" + HGETALL). showFleet(), getFleet() and /api/v1/fleet read
 *   the copy: they never wait on Redis.
 *
 * The encoding of a block (the value of its key, and the announcement):
 *   "1|B|<n|s>|<key>|<until ms>|<action>|<warning 0|1>|<origin>|<reason>"
 *   key: a netmask ("192.0.2.0/24") or the hex of a lowercase wire name;
 *   origin: the node name, %XX-escaped outside [A-Za-z0-9._-]; reason: the
 *   rest, verbatim (at most DLB_FLEET_REASON_MAX bytes, no NUL).
 * Control announcements: "1|C|<origin>" (that node's clearDynBlocks()),
 * "1|X|<origin>" (clearFleetDynBlocks(): every node drops every block).
 * Anything else read from Redis is ignored and counted as malformed.
 *
 * Thread: main only.
 */
#ifndef DNSLB_FLEET_H
#define DNSLB_FLEET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dnslb/pipeline/dynblock.h"

struct ev_loop;
struct cJSON;

#define DLB_FLEET_REASON_MAX	255	/* bytes of a shared reason (longer ones are cut) */
#define DLB_FLEET_NODE_MAX	64	/* bytes of a node name, NUL included */
#define DLB_FLEET_MSG_MAX	1024	/* bytes of an encoded block, at most */

enum dlb_fleet_msg_kind {
	DLB_FLEET_MSG_BLOCK,		/* a block raised by .origin */
	DLB_FLEET_MSG_CLEAR,		/* .origin cleared its blocks */
	DLB_FLEET_MSG_CLEARALL,		/* .origin cleared every block of the fleet */
};

/** A decoded announcement or key value. */
struct dlb_fleet_msg {
	enum dlb_fleet_msg_kind kind;
	struct dlb_dyn_info b;		/* BLOCK; b.reason, b.origin point below */
	char origin[DLB_FLEET_NODE_MAX];
	char reason[DLB_FLEET_REASON_MAX + 1];
};

/**
 * Encode block @b raised by node @origin into @out.
 * @return the length (NUL-terminated), or -1 when @outsz is too small or @b
 * is not a valid block.
 */
int dlb_fleet_encode_block(const struct dlb_dyn_info *b, const char *origin, char *out,
			   size_t outsz);
/** Encode a control announcement (CLEAR or CLEARALL) of @origin. @return as above. */
int dlb_fleet_encode_control(enum dlb_fleet_msg_kind kind, const char *origin, char *out,
			     size_t outsz);
/**
 * Decode @len bytes at @p (binary: anything Redis hands over) into @m.
 * @return 0, or -1 for anything malformed (@m is then undefined).
 */
int dlb_fleet_decode(const char *p, size_t len, struct dlb_fleet_msg *m);
/**
 * The Redis key of block @b raised by @origin: "<ns>:block:<origin>:n:<netmask>"
 * or "<ns>:block:<origin>:s:<name>". @return its length, or -1 when it does
 * not fit.
 */
int dlb_fleet_block_key(const struct dlb_dyn_info *b, const char *origin, char *out,
			size_t outsz);

/**
 * Start sharing blocks and the fleet view on @loop (the main loop) over
 * dlb_daemon.redis_ctl and redis_sub. Nothing when Redis is not configured.
 * Ownership: until dlb_fleet_stop().
 */
void dlb_fleet_start(struct ev_loop *loop);
/** Stop: timers, the dynblock hook, the copies. Before the connections are freed. */
void dlb_fleet_stop(void);

/** Counters (shown with the redis-* ones). */
struct dlb_fleet_stats {
	uint64_t published;		/* blocks of this node written and announced */
	uint64_t received;		/* blocks of other nodes applied (announced or loaded) */
	uint64_t malformed;		/* values and announcements ignored as malformed */
};
void dlb_fleet_get_stats(struct dlb_fleet_stats *out);

/** One node of the fleet view, as last read from Redis. */
struct dlb_fleet_node {
	char node[DLB_FLEET_NODE_MAX];
	char version[32];
	double uptime;			/* s */
	double queries;
	double qps;			/* over the node's last second */
	double cache_hits, cache_misses;
	double hit_rate;		/* %, cache hits over lookups since the node started */
	double backends_up, backends;
	double blocks;			/* dynamic blocks in force */
	double updated;			/* wall-clock s of the node's last write */
};

/**
 * The fleet view: the copy refreshed every second. @return the number of
 * nodes, *@nodes pointing to them (valid until the next refresh: copy what
 * you keep), *@as_of the wall-clock time of the copy (0: never read).
 */
size_t dlb_fleet_nodes(const struct dlb_fleet_node **nodes, double *as_of);
/** The totals of @n nodes (node = "Total", updated = the oldest). */
void dlb_fleet_total(const struct dlb_fleet_node *nodes, size_t n, struct dlb_fleet_node *out);
/** showFleet()'s text (malloc'ed, the caller frees; NULL when out of memory). */
char *dlb_fleet_show(double now);
/** /api/v1/fleet: {"nodes": [...], "total": {...}, "as_of": ...}. NULL when out of memory. */
struct cJSON *dlb_fleet_json(double now);
/**
 * clearFleetDynBlocks(): drop every block here, delete every block key of
 * the namespace, and tell every node to drop all of theirs. @return 0, or
 * -1 when Redis is not configured or the control connection is down (the
 * local blocks are cleared all the same).
 */
int dlb_fleet_clear_all(void);

#endif
