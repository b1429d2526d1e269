/*
 * dynblock.h - dynamic blocks (docs/dynblocks.md): the block store, the
 * per-worker rate tracking it is fed from, and the rule groups that turn
 * rates into blocks (dnsdist 1.7's DynBlockRulesGroup).
 *
 * The store
 *   Client netmask blocks and qname-suffix blocks, each with an expiry
 *   (wall-clock seconds, the loop clock of ev_time()), a reason, an action
 *   (DNSAction numbers: Drop, Nxdomain, Refused, Truncate, NoOp, NoRecurse,
 *   or None for the setDynBlocksAction default), a warning flag and a hit
 *   counter. The main thread keeps the master list; workers read an
 *   immutable snapshot (per-prefix-length open-addressing tables for the
 *   netmasks, a hash set of names probed suffix by suffix for the SMT)
 *   published with one atomic pointer store, the old one retired through
 *   the epoch. A lookup costs one probe per distinct prefix length present
 *   (per label count for names), whatever the number of blocks. Expired
 *   entries are skipped at once by the readers and purged by the main
 *   thread (setDynBlocksPurgeInterval).
 *
 * The tracking
 *   Each worker counts, per client address (masked to the finest mask any
 *   group asks for) and per qname, what the rules need, in a table of the
 *   current window written by that worker only. Once a second the main
 *   thread flips the worker to its other window and, once the worker is
 *   known to have left the old one (it acknowledged the flip, or an epoch
 *   grace period passed), copies the old window into a one-second bucket
 *   and clears it. Rules sum the buckets of their last N seconds: the
 *   measurement does not depend on ring-buffer sizes. No lock, no atomic
 *   read-modify-write and no allocation on the query path.
 *
 * Thread: main for everything but the functions marked "Thread: worker".
 */
#ifndef DNSLB_DYNBLOCK_H
#define DNSLB_DYNBLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "dnslb/core/netmask.h"

struct dlb_worker;
struct dlb_rcu_thread;
struct cJSON;

/* dnsdist 1.7's DNSAction::Action numbers (lua/conf.c, DNSAction table). */
enum dlb_dyn_action {
	DLB_DYN_DROP = 0,
	DLB_DYN_NXDOMAIN = 1,
	DLB_DYN_REFUSED = 2,
	DLB_DYN_TRUNCATE = 8,
	DLB_DYN_NONE = 10,		/* the default of setDynBlocksAction */
	DLB_DYN_NOOP = 11,
	DLB_DYN_NORECURSE = 12,
};

/** Is @a an action a dynamic block can take (DNSAction.None included)? */
bool dlb_dyn_action_valid(int a);
/** DNSAction::typeToString of @a ("Drop", "Send NXDomain", "Send Refused", ...). */
const char *dlb_dyn_action_name(int a);

/** The clock of the store: wall-clock seconds, as the workers' ev_now(). */
double dlb_dyn_now(void);

/* ---- the store (main thread) ------------------------------------------------ */

/** A block as the readers of the control plane see it (copied out). */
struct dlb_dyn_info {
	bool smt;			/* a qname-suffix block (else a netmask one) */
	struct dlb_netmask nm;		/* !smt */
	uint16_t port;			/* !smt, pbits > 0: the first port of the range */
	uint8_t pbits;			/* !smt: port bits (CGNAT ranges, IPv4 /32 only); 0: none */
	uint8_t name[256];		/* smt: lowercase wire name */
	uint8_t namelen;
	double until;			/* dlb_dyn_now() seconds */
	int action;			/* as set (DLB_DYN_NONE: the default) */
	bool warning;
	uint64_t blocks;		/* queries it acted on */
	const char *reason;		/* borrowed: valid until the store changes */
	const char *origin;		/* borrowed: the fleet node it came from; NULL: this node */
};

/**
 * Add or refresh the block of netmask @nm, as dnsdist's addOrRefreshBlock:
 * an active block lasting longer is kept; an active one is extended keeping
 * its count; a warning never replaces a real block, and a real block
 * replaces a warning. Nothing for an excluded range (the caller checks).
 * @reason is copied. @quiet: no log line. Not published until
 * dlb_dyn_publish() (or the maintenance). @return true if the store changed.
 */
/**
 * The same for the port range of @pbits bits (1..16) starting at @port of
 * the IPv4 address @nm (a /32): dnsdist's AddressAndPortRange (setMasks'
 * third argument). @pbits 0: dlb_dyn_block_nm.
 */
bool dlb_dyn_block_range(const struct dlb_netmask *nm, uint16_t port, unsigned pbits,
			 const char *reason, double until, int action, bool warning, bool quiet,
			 double now);
bool dlb_dyn_block_nm(const struct dlb_netmask *nm, const char *reason, double until, int action,
		      bool warning, bool quiet, double now);
/** The same for qname suffix @name (wire, any case; lowercased here). */
bool dlb_dyn_block_smt(const uint8_t *name, size_t namelen, const char *reason, double until,
		       int action, bool quiet, double now);
/**
 * clearDynBlocks(): remove every block raised by this node (all of them
 * without a fleet) and publish; blocks received from other nodes of the
 * fleet stay (docs/fleet.md). The hook gets DLB_DYN_EV_CLEARING first.
 */
void dlb_dyn_clear(void);
/** Remove every block, whatever its origin, and publish (no hook). */
void dlb_dyn_clear_all(void);
/** Remove the blocks received from fleet node @origin and publish. @return how many. */
size_t dlb_dyn_clear_origin(const char *origin);

/*
 * The fleet (dnslb/control/fleet.c) hooks into the store without dynblock.c knowing
 * about Redis: it is told of the blocks this node raises, and of
 * clearDynBlocks(), and inserts the blocks other nodes raised with
 * dlb_dyn_block_fleet(), which does not call the hook (no echo).
 */
enum dlb_dyn_event {
	DLB_DYN_EV_RAISED,		/* @b: a block of this node added or refreshed */
	DLB_DYN_EV_CLEARING,		/* @b NULL: clearDynBlocks(), before the removal */
};
typedef void dlb_dyn_hook_fn(enum dlb_dyn_event ev, const struct dlb_dyn_info *b, void *ud);
/** Set (or with NULL, remove) the hook. Warnings are not handed to it. */
void dlb_dyn_set_hook(dlb_dyn_hook_fn *fn, void *ud);
/**
 * Add or refresh block @b (its key, until, action, warning, reason) received
 * from the fleet, with dnsdist's refresh rules, marked as coming from
 * @origin (copied; NULL: this node's own, reloaded from Redis). Quiet, and
 * no hook. Not published until dlb_dyn_publish(). @return true if the
 * store changed (false too when the same block is already there).
 */
bool dlb_dyn_block_fleet(const struct dlb_dyn_info *b, const char *origin, double now);
/** Publish the master list as a new snapshot if it changed. */
void dlb_dyn_publish(void);
/** Drop entries expired at @now from the master list (publishes). @return entries dropped. */
size_t dlb_dyn_purge(double now);
/** setDynBlocksAction(): the action of blocks whose action is None. */
void dlb_dyn_set_default_action(int a);
int dlb_dyn_default_action(void);
/** setDynBlocksPurgeInterval(): seconds between purges, 0 = never. */
void dlb_dyn_set_purge_interval(unsigned s);

/**
 * Visit the blocks (netmask ones first, then suffix ones), active at @now
 * only when @active_only. @return how many were visited.
 */
typedef void dlb_dyn_visit_fn(const struct dlb_dyn_info *b, void *ud);
size_t dlb_dyn_visit(double now, bool active_only, dlb_dyn_visit_fn *fn, void *ud);
/** Entries in the netmask and suffix parts of the published snapshot (gauges). */
size_t dlb_dyn_nmg_size(void);
size_t dlb_dyn_smt_size(void);
#define DLB_DYN_KEY_TEXT 1024	/* room for any key text */
/** Text form of a block's key: "192.0.2.1/32", "www.example.com.". */
void dlb_dyn_key_text(const struct dlb_dyn_info *b, char *out, size_t outsz);

/**
 * showDynBlocks() as dnsdist 1.7 prints it (header, then one line per active
 * block) into a malloc'ed string the caller frees. NULL when out of memory.
 */
char *dlb_dyn_show(double now);
/**
 * /jsonstat?command=dynblocklist: fill @obj (a cJSON object) with dnsdist
 * 1.7's shape, keyed by netmask ("reason", "seconds", "blocks", "action",
 * "warning") and by domain (the same but "warning"). @return 0, -1 when out
 * of memory.
 */
int dlb_dyn_fill_json(struct cJSON *obj, double now);

/** Once a second (main.c maintenance): track, harvest, purge. Thread: main. */
void dlb_dynblock_maintenance(void);

/* ---- top offenders (dyntop.c; docs/dynblocks.md) ---------------------------- */

/** A published top offender: dnsdist_dynblocks_{nmg,smt}_top_offenders_hits_per_second. */
struct dlb_dyn_top {
	char *reason;
	char key[DLB_DYN_KEY_TEXT];	/* dlb_dyn_key_text() */
	uint32_t value;			/* hits per second over the last minute, rounded */
};

/**
 * The top offenders of the last generation, netmask blocks (@smt false) or
 * suffix ones, in dnsdist's order (reasons in byte order, then ascending
 * values). Valid until the next maintenance. @return how many (0 until the
 * first generation, a minute after the start).
 */
size_t dlb_dyn_tops(bool smt, const struct dlb_dyn_top **out);
/** The timers start at @now (the daemon's start). */
void dlb_dyn_top_start(double now);
/** Once a second from the maintenance: collect every 10 s, generate every 60 s. */
void dlb_dyn_top_tick(double now);
void dlb_dyn_top_reset(void);

/* Lower level, for tests: a snapshot entry. */
struct dlb_dyn_top_ent {
	bool smt;
	struct dlb_netmask nm;
	uint16_t port;
	uint8_t pbits;
	uint8_t name[256];
	uint8_t namelen;
	uint32_t value;			/* the block's hit count */
	unsigned age;			/* scratch */
	char *reason;			/* malloc'ed */
};
/**
 * Push a snapshot of @n entries @v (taken, with their reasons: freed here),
 * cut to the top 100 per kind and reason; the oldest beyond 7 is dropped.
 * @return 0, -1 when out of memory.
 */
int dlb_dyn_top_push(struct dlb_dyn_top_ent *v, size_t n);
/** Compute the published tops from the kept snapshots. @return 0 or -1. */
int dlb_dyn_top_generate(void);

/* ---- the query path (Thread: worker) ----------------------------------------- */

/** A snapshot entry: immutable once published, but for the hit counter. */
struct dlb_dyn_rec;

/** What a worker must do with a query (dlb_dyn_query). */
struct dlb_dyn_verdict {
	int action;			/* effective: never DLB_DYN_NONE */
	bool smt;
};

/**
 * Account query @qname/@qtype of @client in the worker's window (when some
 * rule tracks), then look the client and the name up in the published
 * blocks. @return true, with *@v set, when an active, non-warning block
 * applies: the caller carries out the action (dyn-blocked is counted here,
 * and the block's hit count). Truncate over TCP does not apply (dnsdist).
 * Thread: worker, inside its epoch section. No lock, no allocation.
 */
bool dlb_dyn_query(struct dlb_worker *w, const struct sockaddr *client, const uint8_t *qname_lc,
		   size_t qname_len, uint16_t qtype, bool tcp, struct dlb_dyn_verdict *v);
/** Where an answer came from (dlb_dyn_answer). */
enum dlb_dyn_from {
	DLB_DYN_FROM_BACKEND,		/* a backend's answer, over UDP or TCP */
	DLB_DYN_FROM_LOCAL,		/* the cache's, or made by a rule */
	DLB_DYN_FROM_TIMEOUT,		/* none: the backend timed out (UDP) */
};

/**
 * Account an answer of @len bytes with rcode @rcode sent to @client for
 * @qname_lc. The client rules (rcode, ratio, response bytes) see what
 * dnsdist 1.7's response ring holds: backends' answers, and their UDP
 * timeouts as a NOERROR of 0 bytes, not the cache's nor the rules'; the
 * name statistics (suffix rules) see the same, a timeout as a drop.
 * Thread: worker.
 */
void dlb_dyn_answer(struct dlb_worker *w, const struct sockaddr *client, const uint8_t *qname_lc,
		    size_t qname_len, unsigned rcode, size_t len, enum dlb_dyn_from from);

/* Lower level, for tests and the micro-benchmark: a lookup in the published
 * snapshot at @now, ignoring expired and warning entries. @return the
 * effective action, or -1 when no block applies. */
int dlb_dyn_lookup(const struct sockaddr *client, const uint8_t *qname_lc, size_t qname_len,
		   double now);

/* ---- rate tracking and rule groups (main thread) ----------------------------- */

/** Window counters of one client (a masked address), summed over workers and seconds. */
struct dlb_dyn_counts {
	uint64_t queries, responses, bytes;
	uint64_t rcode[16];
	uint64_t qtype;			/* of the qtype asked about (exceedQTypeRate, rules) */
};

/** Per-suffix statistics of the stat tree (dnsdist's StatNode::Stat). */
struct dlb_dyn_stat {
	uint64_t queries, noerrors, nxdomains, servfails, drops, bytes;
};

/** A node of the stat tree given to a suffix visitor (dnsdist's StatNode). */
struct dlb_dyn_node {
	const char *fullname;		/* "www.example.com." */
	unsigned labels_count;
	unsigned nchildren;
	const uint8_t *name;		/* lowercase wire */
	size_t namelen;
};

enum dlb_dyn_rule_kind {
	DLB_DYN_R_QRATE = 0,
	DLB_DYN_R_RESPBYTES,
	DLB_DYN_R_QTYPE,
	DLB_DYN_R_RCODE,
	DLB_DYN_R_RATIO,
};

struct dlb_dyn_rule {
	enum dlb_dyn_rule_kind kind;
	uint16_t code;			/* qtype or rcode */
	double rate;			/* per second, or a ratio */
	double warning;			/* warning rate or ratio; 0 = none */
	unsigned seconds;		/* window */
	unsigned block_seconds;
	unsigned min_responses;		/* ratio rules */
	int action;
	char *reason;			/* owned */
};

/**
 * A rule group (dynBlockRulesGroup()). Built by lua/dynblock_lua.c; the
 * suffix visitor is a callback so that Lua stays out of dnslb/.
 * Ownership: dlb_dyn_group_free().
 */
struct dlb_dyn_group;

/**
 * A suffix visitor: @return true to block @node (its name), with an
 * optional reason (malloc'ed, taken) in *@reason.
 */
typedef bool dlb_dyn_visitor_fn(void *ud, const struct dlb_dyn_node *node,
				const struct dlb_dyn_stat *self, const struct dlb_dyn_stat *children,
				char **reason);

struct dlb_dyn_group *dlb_dyn_group_new(void);
void dlb_dyn_group_free(struct dlb_dyn_group *g);
/** Set a rule (a rule of the same kind and code replaces it). Ownership of r->reason: taken. */
void dlb_dyn_group_set_rule(struct dlb_dyn_group *g, const struct dlb_dyn_rule *r);
/** setSuffixMatchRule: the visitor is called by dlb_dyn_group_apply. */
void dlb_dyn_group_set_suffix(struct dlb_dyn_group *g, unsigned seconds, const char *reason,
			      unsigned block_seconds, int action, dlb_dyn_visitor_fn *fn);
/** excludeRange (@include false) / includeRange. @return 0, -1 when out of memory. */
int dlb_dyn_group_range(struct dlb_dyn_group *g, const struct dlb_netmask *nm, bool include);
/** excludeDomains. @return 0, -1 when out of memory. */
int dlb_dyn_group_exclude_domain(struct dlb_dyn_group *g, const uint8_t *name, size_t len);
/** setMasks (bits of the v4 and v6 client aggregation). */
void dlb_dyn_group_set_masks(struct dlb_dyn_group *g, unsigned v4, unsigned v6, unsigned port);
void dlb_dyn_group_set_quiet(struct dlb_dyn_group *g, bool quiet);
/** Is @sa excluded by the group's ranges (most specific of exclude/include wins)? */
bool dlb_dyn_group_excluded(const struct dlb_dyn_group *g, const struct dlb_netmask *nm);
/**
 * Make the workers measure what @g needs from now on (apply() does it too;
 * the config state does it when the group is made). Until
 * dlb_dyn_group_free().
 */
void dlb_dyn_group_register(struct dlb_dyn_group *g);
/**
 * Evaluate the group at @now over the harvested buckets and add or refresh
 * blocks (published before returning). @ud goes to the suffix visitor.
 * The first apply registers the group's needs with the workers' tracking,
 * so rates build up from then on. @return the number of blocks added or
 * refreshed.
 */
size_t dlb_dyn_group_apply(struct dlb_dyn_group *g, double now, void *ud);
/** QType::toString (lua/ has it: dnslb/ never calls into lua/). */
typedef const char *dlb_dyn_qtype_text_fn(unsigned qtype, char *buf, size_t bufsz);
/** toString(), dnsdist 1.7's text. Malloc'ed; NULL when out of memory. */
char *dlb_dyn_group_text(const struct dlb_dyn_group *g, dlb_dyn_qtype_text_fn *qtype_text);
/**
 * How many distinct codes of @kind (qtypes; or rcodes, rate and ratio rules
 * together) @g would have with @code: at most DLB_DYN_TRACKED are allowed.
 */
size_t dlb_dyn_group_codes(const struct dlb_dyn_group *g, enum dlb_dyn_rule_kind kind,
			   uint16_t code);

/**
 * The legacy exceed* functions: visit every client address (full /32 or
 * /128) whose count of @kind (a rule kind; @code the rcode or qtype) over
 * the last @seconds exceeds @rate per second. Registers what they measure
 * with the tracking (a qtype or rcode from its first call on).
 * @return clients visited, or -1 when too many qtypes/rcodes are tracked.
 */
typedef void dlb_dyn_exceed_fn(const struct dlb_netmask *client, uint64_t count, void *ud);
long dlb_dyn_exceed(enum dlb_dyn_rule_kind kind, uint16_t code, double rate, unsigned seconds,
		    double now, dlb_dyn_exceed_fn *fn, void *ud);
/**
 * Can @kind/@code be tracked (at most DLB_DYN_TRACKED qtypes and rcodes at a
 * time)? Registers it when it can. Rules are checked when set.
 */
bool dlb_dyn_track_code(enum dlb_dyn_rule_kind kind, uint16_t code, double now);

#define DLB_DYN_TRACKED 4		/* distinct qtypes, and rcodes, tracked at a time */
#define DLB_DYN_MAX_SECONDS 3600	/* the longest window */

/* ---- tests: drive the tracking without a daemon ------------------------------ */

/**
 * Attach tracking to worker @w now (the maintenance does it lazily for the
 * daemon's workers). @return 0 or -1 (out of memory).
 */
int dlb_dyn_attach_worker(struct dlb_worker *w);
/**
 * Before the workers start: attach tracking to them when some rule group
 * exists, or when the config has a maintenance() function (@maintenance),
 * where exceed*() may be called: dnsdist's rings hold every query from the
 * start. Thread: main.
 */
void dlb_dyn_track_start(struct dlb_worker *const *ws, int n, bool maintenance, double now);
/** One maintenance step at @now over @n workers @ws (tests; the daemon's in production). */
void dlb_dyn_tick(struct dlb_worker *const *ws, int n, double now);
/** Forget everything: blocks, groups' registrations, buckets, defaults (tests). */
void dlb_dyn_reset(void);

#endif
