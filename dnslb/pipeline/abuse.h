/*
 * abuse.h - per-client state against abusive clients (docs/abuse.md):
 *
 * - The TCP client table, shared by the workers and touched on accept and
 *   close only (never per query): per client subnet (setTCPConnectionsMaskV4/
 *   V6), the open connections (setMaxTCPConnectionsPerClient), the rate of new
 *   connections (setMaxTCPConnectionRatePerClient over
 *   setTCPConnectionRateInterval) and a temporary ban
 *   (setBanDurationForExceedingTCPTLSRate,
 *   setBanDurationForExceedingMaxReadIOsPerQuery). Sharded, one spinlock per
 *   shard, bounded memory; entries go when nothing is left to remember.
 *
 * - The per-client outstanding table (setMaxOutstandingPerClient): one per
 *   worker, no lock, counts the queries of each client subnet in flight
 *   towards backends. An entry exists only while its count is above 0.
 *
 * Thread: the TCP client table from any worker; a dlb_coc only from its
 * worker.
 */
#ifndef DNSLB_ABUSE_H
#define DNSLB_ABUSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct dlb_config;
struct dlb_worker;
struct dlb_slot;

/* ---- TCP client table ---------------------------------------------------------- */

enum dlb_tcp_admit {
	DLB_TCP_ADMIT_OK = 0,		/* accepted (see *@counted) */
	DLB_TCP_ADMIT_BANNED,		/* the client is banned now */
	DLB_TCP_ADMIT_RATE,		/* over its connection rate: refused, and banned from now */
	DLB_TCP_ADMIT_TOO_MANY,		/* at setMaxTCPConnectionsPerClient */
};

/** Bytes per tracked client subnet in the TCP client table. */
#define DLB_TCP_CLIENT_ENTRY_BYTES 48

/**
 * A new connection from @sa at @now (s, any worker's loop clock): check the
 * ban, the connection rate and the per-client cap of @cfg. *@counted is set
 * when the connection holds a place in the per-client cap: give it back with
 * dlb_tcp_client_release. A client the table has no room for is admitted
 * uncounted (fail open: a full table must not lock out new clients).
 * *@prior: the client's counted connections before this one.
 */
enum dlb_tcp_admit dlb_tcp_client_admit(const struct dlb_config *cfg, const struct sockaddr *sa,
					double now, bool *counted, uint32_t *prior);
/** A counted connection of @sa closed. */
void dlb_tcp_client_release(const struct dlb_config *cfg, const struct sockaddr *sa, double now);
/** Refuse new connections from @sa's subnet until @now + @seconds (longer bans stay). */
void dlb_tcp_client_ban(const struct dlb_config *cfg, const struct sockaddr *sa, double now,
			double seconds);
/** @sa's subnet is banned at @now. */
bool dlb_tcp_client_banned(const struct dlb_config *cfg, const struct sockaddr *sa, double now);
/**
 * Forget idle entries of one shard, at most once a second whoever calls
 * (the workers call it on accept, so a full cycle takes about a minute).
 */
void dlb_tcp_clients_maintain(const struct dlb_config *cfg, double now);
/** Tracked subnets, and the bytes their tables hold. */
size_t dlb_tcp_clients_count(void);
size_t dlb_tcp_clients_memory(void);
/** Forget everything (tests). Not while workers run. */
void dlb_tcp_clients_reset(void);

/* ---- per-client outstanding queries (one table per worker) ----------------------- */

struct dlb_coc;

/** Bytes per client subnet with queries in flight. */
#define DLB_COC_ENTRY_BYTES 24
/** The most slots a worker's table grows to (it then fails open). */
#define DLB_COC_MAX_SLOTS (1u << 18)

enum dlb_coc_result {
	DLB_COC_UNTRACKED = -1,		/* no room, or not an IP client: forward uncounted */
	DLB_COC_OVER = 0,		/* the subnet already has @max in flight */
	DLB_COC_ACQUIRED = 1,		/* counted: release it once */
};

/** A table for subnets of @v4mask / @v6mask bits. @return NULL when out of memory. */
struct dlb_coc *dlb_coc_new(int v4mask, int v6mask);
void dlb_coc_free(struct dlb_coc *t);
/** One more query in flight for @sa's subnet, unless it already has @max. */
enum dlb_coc_result dlb_coc_acquire(struct dlb_coc *t, const struct sockaddr *sa, uint32_t max);
/** One query of @sa's subnet (acquired before) is no longer in flight; at 0 the entry goes. */
void dlb_coc_release(struct dlb_coc *t, const struct sockaddr *sa);
/** Queries in flight for @sa's subnet. */
uint32_t dlb_coc_get(const struct dlb_coc *t, const struct sockaddr *sa);
/** Subnets with queries in flight, the queries in flight, and the table's bytes. */
uint32_t dlb_coc_clients(const struct dlb_coc *t);
uint64_t dlb_coc_total(const struct dlb_coc *t);
size_t dlb_coc_memory(const struct dlb_coc *t);
/**
 * Check the table's invariants (each entry at its probe position, counts
 * above 0, the sums). @return 0, or -1 (tests assert on it).
 */
int dlb_coc_check(const struct dlb_coc *t);

/* ---- the worker's side ------------------------------------------------------------ */

enum dlb_oc_action {
	DLB_OC_DROP = 0,
	DLB_OC_REFUSED,
	DLB_OC_SERVFAIL,
};

/**
 * setMaxOutstandingPerClient: may a query of client @sa be forwarded by
 * worker @w? On DLB_COC_ACQUIRED the caller marks the slot
 * (client_counted = 1), and dlb_oc_release gives the place back when the
 * slot is released. DLB_COC_OVER: counted in client-outstanding-exceeded;
 * the caller answers by cfg->oc_action. Always DLB_COC_UNTRACKED when the
 * cap is off.
 */
enum dlb_coc_result dlb_oc_acquire(struct dlb_worker *w, const struct sockaddr *sa);

/** Release slot @s's place, if it holds one (clears the mark: safe to call twice). */
void dlb_oc_release(struct dlb_worker *w, struct dlb_slot *s);

/**
 * Consistency check of worker @w: the per-client counts add up to the
 * marked slots in its UDP in-flight tables and TCP backend requests.
 * @return 0, or -1 with a logged error. Thread: the worker.
 */
int dlb_oc_check_worker(const struct dlb_worker *w, uint64_t tcp_marked);

/** Free worker @w's table (at its end). */
void dlb_oc_worker_free(struct dlb_worker *w);

#endif
