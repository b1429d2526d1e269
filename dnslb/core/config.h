/*
 * config.h - the configuration the Lua config builds: listeners, ACL,
 * backends, pools and global settings.
 *
 * Ownership and threads: the main thread builds one struct dlb_config while
 * evaluating the Lua config (lua/conf.c), and owns it afterwards: the
 * console and reloads change its builder values (set, acl, the pools'
 * members, policies and caches), then publish them as one immutable struct
 * dlb_snapshot (dlb_config_publish). Workers read settings, the ACL and pools
 * only from a snapshot (w->snap), and the rest of the structure (servers,
 * pools' identities, caches, listeners: the live objects) through it or
 * w->cfg; fields marked "atomic" are read and written with __atomic builtins
 * by any thread. docs/architecture.md#publication.
 */
#ifndef DNSLB_CONFIG_H
#define DNSLB_CONFIG_H

#include <ck_epoch.h>
#include <net/if.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "dnslb/core/dnslb.h"
#include "dnslb/core/netmask.h"
#include "dnslb/core/wire.h"

struct dlb_cache_opts;
struct dlb_ruleset;

#define DLB_MAX_CPUS 64

struct dlb_tls_server;
struct dlb_doh_cfg;
struct dlb_tls_client;

/** One addLocal()/setLocal() listener: UDP and TCP on the same address; or
 * one addTLSLocal() listener: DNS over TLS, TCP only. */
struct dlb_frontend_cfg {
	struct sockaddr_storage addr;
	socklen_t addrlen;
	char text[64];			/* as formatted by dlb_sockaddr_format */
	bool reuseport;			/* reusePort: another process may share the address
					 * (dnslb's own workers always share it) */
	int tcp_fastopen_qsize;		/* 0 = off */
	int tcp_listen_qsize;		/* listen() backlog; 0 = SOMAXCONN */
	char iface[16];			/* SO_BINDTODEVICE; "" = none (IFNAMSIZ) */
	int max_in_flight;		/* pipelined TCP queries processed out of order; 0 = in order */
	int max_concurrent_tcp;		/* per frontend and worker; 0 = unlimited */
	int cpus[DLB_MAX_CPUS];		/* affinity hint for the workers serving it */
	int ncpus;
	bool removed;			/* atomic: gone from the file at a reload; workers
					 * stop listening (the slot stays, with its counters) */
	struct dlb_tls_server *tls;	/* addTLSLocal: DNS over TLS, TCP only; NULL: plain
					 * DNS over UDP and TCP. Owned by the config */
	struct dlb_doh_cfg *doh;	/* addDOHLocal: DNS over HTTPS (over TLS when tls is
					 * set, else plain HTTP), TCP only. Owned by the config */
};

/** Does @fe serve DNS over TLS or over HTTPS (TCP only, a listener of its own)? */
static inline bool
dlb_frontend_stream_only(const struct dlb_frontend_cfg *fe)
{
	return fe->tls != NULL || fe->doh != NULL;
}

enum dlb_be_admin {
	DLB_BE_AUTO = 0,	/* health checks decide */
	DLB_BE_FORCED_UP,
	DLB_BE_FORCED_DOWN,
};

enum dlb_policy {
	DLB_POLICY_LEAST_OUTSTANDING = 0,
	DLB_POLICY_FIRST_AVAILABLE,
	DLB_POLICY_ROUNDROBIN,
	DLB_POLICY_WRANDOM,
	DLB_POLICY_WHASHED,
	DLB_POLICY_CHASHED,
	/* DLB_POLICY_LUA + k: cfg->lua_policies[k] (newServerPolicy, setServerPolicyLua) */
	DLB_POLICY_LUA = 100,
};

#define DLB_MAX_LUA_POLICIES 32
#define DLB_RECV_COALESCE_MAX_US 1000	/* setWorkerReceiveCoalescing's bound */

/** A Lua policy: its function's number in every Lua state (lua/worker.h). */
struct dlb_lua_policy {
	char name[64];
	int fn;
	char src[96];			/* "file:line" of the function */
	bool ffi;			/* setServerPolicyLuaFFI: f(servers, dq) returns a 0-based index */
};

/** Name of a built-in policy ("leastOutstanding", ...); "lua" for Lua ones. */
const char *dlb_policy_name(enum dlb_policy p);

/** One newServer(). Lives until process exit. */
struct dlb_backend {
	int index;				/* position in cfg->backends[], getServer(n) */
	char name[128];				/* name=, else the address text */
	char addr_text[64];			/* "192.0.2.1:53" */
	char uuid[40];				/* id=, else random */
	struct sockaddr_storage addr;
	socklen_t addrlen;
	struct sockaddr_storage source;		/* source= address, family 0 if unset */
	socklen_t sourcelen;
	char source_iface[IF_NAMESIZE];		/* source= "addr@iface" or "iface" */

	char pools[DLB_MAX_POOLS_PER_BACKEND][64];
	int npools;				/* 0 = default pool "" */
	bool named_default;			/* "" was among newServer's pools */
	int order;				/* default 1 */
	int list_order;				/* order when added: the list's (dlb_config_backend_at) */
	int weight;				/* default 1, >= 1 */
	int qps;				/* 0 = unlimited; only firstAvailable reads it */

	/* health checks (docs/server-selection.md; behaviour comes with the backends issue) */
	uint8_t check_name[DLB_MAX_NAME];	/* wire form, default a.root-servers.net. */
	int check_name_len;
	uint16_t check_type;			/* default A */
	uint16_t check_class;			/* default IN */
	bool check_fn;				/* checkFunction= (dlb_health_check_hook) */
	int check_interval;			/* s, default 1 */
	int check_timeout;			/* ms, default 1000 */
	int max_check_failures;			/* default 1 */
	int rise;				/* default 1 */
	bool must_resolve;
	bool set_cd;
	bool check_tcp;
	/* healthCheckMode="lazy": judged by real traffic, probed only once down */
	bool lazy;
	bool lazy_timeouts_only;		/* lazyHealthCheckMode "TimeoutOnly" */
	bool disable_zero_scope;		/* disableZeroScope: no zero-scope caching */
	bool lazy_backoff;			/* lazyHealthCheckUseExponentialBackOff */
	int lazy_sample_size;			/* lazyHealthCheckSampleSize, default 100 */
	int lazy_min_samples;			/* lazyHealthCheckMinSampleCount, default 1 */
	int lazy_threshold;			/* lazyHealthCheckThreshold, %, default 20 */
	int lazy_failed_interval;		/* lazyHealthCheckFailedInterval, s, default 30 */
	int lazy_max_backoff;			/* lazyHealthCheckMaxBackOff, s, default 3600 */

	bool use_ecs;				/* useClientSubnet: add the client's subnet (ECS) */
	bool use_proxy_protocol;		/* useProxyProtocol: PROXY v2 header before each
						 * UDP query / at the start of each TCP connection */

	/* transport */
	int sockets;				/* UDP sockets per worker towards it, default 1 */
	bool tcp_only;				/* everything over TCP (tls and dohPath set it) */
	/* DNS over TLS (tls="openssl"): every query and health check over TLS
	 * streams (docs/tls.md#backends) */
	struct dlb_tls_client *tls;		/* a counted reference (a reload's copy of the
						 * server holds its own); NULL: in clear */
	char tls_subject_name[256];		/* subjectName: SNI, the name checked; "" none */
	char tls_subject_addr[64];		/* subjectAddr, else the server's address: the
						 * certificate's when there is no subjectName */
	/* DNS over HTTPS (dohPath=): every query and health check as an HTTP/2
	 * POST on a connection of dnslb/upstream/doh_upstream.c, over TLS when
	 * tls= is given (docs/tls.md#doh-backends) */
	char doh_path[256];			/* dohPath; "" for DNS over TCP/UDP/TLS */
	bool doh_xff;				/* addXForwardedHeaders */
	int udp_timeout_ms;			/* 0 = global setUDPTimeout */
	int retries;				/* TCP connection attempts, default 5 */
	int tcp_connect_timeout;		/* s, default 5 */
	int tcp_send_timeout;			/* s, default 30 */
	int tcp_recv_timeout;			/* s, default 30 */
	int max_in_flight;			/* pipelined queries per TCP connection, default 1 (0 read as 1) */

	bool id_given;				/* id= was in the config (reloads match on it) */
	int admin_file;				/* the mode the config file asked (reloads) */
	bool removed;				/* rmServer at runtime, or gone from the file at a
						 * reload: listed, down, in no pool (main thread) */

	/* runtime state: atomic */
	int admin;				/* enum dlb_be_admin */
	int healthy;				/* last health-check verdict, 1 until checks say otherwise */
	int qps_limit_rt;			/* setQPS() at runtime */
	/* TCP connections to it over all workers (tcp_upstream.c, when one opens or closes) */
	uint32_t tcp_current, tcp_max;
	double tcp_avg_queries, tcp_avg_duration;	/* dnsdist's running averages (ms) */
	/* a DoH server's health checks, each on a connection of its own, which
	 * dnsdist counts among the server's connections (doh_upstream.c) */
	uint64_t check_conns, check_tls_resumptions;
};

/** A point of a pool's consistent-hashing ring (chashed). */
struct dlb_ch_point {
	uint32_t hash;
	struct dlb_backend *be;
};

/** The most points a pool's ring holds (16 bytes each): see ring_build. */
#define DLB_CH_MAX_POINTS	(1u << 20)

/**
 * A pool's consistent-hashing ring: `weight` points per member (in
 * proportion to it past DLB_CH_MAX_POINTS in all), sorted by hash. Immutable once published; a membership or weight change at runtime
 * publishes a new one and retires the old through the epoch.
 */
struct dlb_ch_ring {
	ck_epoch_entry_t epoch;
	int n;
	struct dlb_ch_point p[];
};

/** One backend's figures summed over the workers (for Lua and the console). */
struct dlb_be_totals {
	uint64_t queries, responses, drops, send_errors, outstanding, servfails, refused;
	/* TCP (struct dlb_be_stats) */
	uint64_t tcp_new, tcp_reused, tcp_died_sending, tcp_died_reading, tcp_gave_up;
	uint64_t tcp_connect_timeouts, tcp_read_timeouts, tcp_write_timeouts;
	uint64_t tls_resumptions;
	double latency_us;		/* mean of the workers' EWMAs that saw answers */
	double qps, drate;		/* over the last second */
};

/** Filled in by the daemon once its workers exist; zeros before. */
typedef void dlb_be_totals_fn(int be_index, struct dlb_be_totals *out);

/** A pool of backends; built at config time, policy per pool or global. */
struct dlb_pool {
	char name[64];				/* "" is the default pool */
	struct dlb_backend **members;		/* sorted by (order, index) */
	int n;
	int index;				/* position in cfg->pools (pools are never removed) */
	int policy;				/* -1 = use the global policy. Main thread; workers
						 * read the snapshot's (struct dlb_pool_state) */
	int necs;				/* atomic: members with useClientSubnet */
	bool use_ecs;				/* atomic: setECS(), ECS when no server is up */
	struct dlb_cache *cache;		/* setCache(); NULL = none. Owned by cfg->caches */
	struct dlb_ch_ring *ring;		/* chashed (atomic): NULL = no points */
};

/**
 * The settings workers read while serving, that the console and reloads
 * change: plain values, copied whole into each snapshot. A new one is a
 * field here, its setter in lua/conf.c (which publishes at runtime) and its
 * readers (through w->snap); reloads take it from the file with no code.
 */
struct dlb_settings {
	int policy;				/* enum dlb_policy, global */
	struct dlb_lua_policy lua_policies[DLB_MAX_LUA_POLICIES];
	int nlua_policies;			/* slots in use; config time: appended */
	uint32_t stale_cache_ttl;		/* setStaleCacheEntriesTTL, s; 0 = off */
	bool stale_on_timeout;			/* setServeStaleOnTimeout (dnslb, RFC 8767) */
	/* setFailover{} (dnslb): retry a UDP query once on another server */
	bool failover_on_timeout;
	bool failover_on_servfail;
	char failover_pool[64];			/* retry in this pool; "" = the query's own */
	bool failover_other_pool;
	double failover_budget;			/* s since the query arrived, default 3 */
	int cache_cleaning_delay;		/* setCacheCleaningDelay, s, default 60 */
	int cache_cleaning_pct;			/* setCacheCleaningPercentage, default 100 */
	int udp_timeout_ms;			/* setUDPTimeout, default 2000 */
	bool servfail_when_no_server;
	bool drop_empty_queries;
	bool allow_empty_response;
	uint16_t max_udp_answer;		/* setMaxUDPAnswerSize, default 4096 */
	bool truncate_tc;			/* truncateTC: a TC=1 answer loses its records (UDP) */
	bool roundrobin_fail_on_no_server;
	bool fixup_case;			/* fixupCase: the client's qname case in answers */
	/* idle connections to DoH servers (dnslb/upstream/doh_upstream.c), per
	 * worker and server */
	uint32_t doh_max_idle_conns;		/* setMaxIdleDoHConnectionsPerDownstream, default 10 */
	uint32_t doh_max_idle_time;		/* setDoHDownstreamMaxIdleTime, s, default 300 */
	uint32_t doh_cleanup_interval;		/* setDoHDownstreamCleanupInterval, s, default 60 */
	struct dlb_selfanswer_opts selfans;
	uint32_t whashed_perturbation;
	int ecs_prefix_v4;			/* setECSSourcePrefixV4, default 24 */
	int ecs_prefix_v6;			/* setECSSourcePrefixV6, default 56 */
	bool ecs_override;			/* setECSOverride: replace the client's own ECS */
	double weighted_balancing_factor;	/* setWeightedBalancingFactor, 0 = off */
	double ch_balancing_factor;		/* setConsistentHashingBalancingFactor, 0 = off */
	int tcp_recv_timeout;			/* s, default 2 */
	int tcp_send_timeout;			/* s, default 2 */
	bool verbose_health_checks;
};

struct dlb_config;

/**
 * A pool as a snapshot has it. The pool itself (struct dlb_pool: name,
 * index, ring, ECS flags) is a live object; what a reload or the console
 * changes of it is here, immutable.
 */
struct dlb_pool_state {
	struct dlb_backend *const *members;	/* sorted by (order, index); referenced servers */
	const int *weights;			/* each member's weight when published */
	int n;
	int policy;				/* -1 = the global policy */
	struct dlb_cache *cache;		/* referenced; NULL = none */
};

/**
 * One published configuration (docs/architecture.md#publication): immutable
 * once published, swapped in whole with one atomic store of cfg->snap and
 * retired through the epoch. Copied into it: the settings, the ACL, each
 * pool's members, weights, policy and cache. Referenced, not copied: the
 * objects whose identity outlives a reload (servers and their counters,
 * pools, caches and their entries, listeners), all reached through @live.
 *
 * Thread: built and published by the main thread; workers load it once per
 * loop iteration into w->snap (dnslb/core/wstate.h) and read it inside that
 * epoch section only.
 */
struct dlb_snapshot {
	ck_epoch_entry_t epoch;
	uint64_t gen;				/* 1 for the first, +1 for each publication */
	struct dlb_config *live;		/* referenced: servers, pools, caches, listeners */
	struct dlb_settings set;
	const struct dlb_ruleset *rules;	/* referenced: the five rule chains (rules/rules.h),
						 * retired by the rules module when replaced */
	struct dlb_nmg acl;			/* owned */
	int npools;				/* pools[] entries filled: live->pools[0..npools) */
	struct dlb_pool_state pools[DLB_MAX_POOLS];	/* by pool index */
	struct dlb_backend **mbuf;		/* owned: every pool's members, one after another */
	int *wbuf;				/* owned: their weights */
	int cap;				/* entries in mbuf and wbuf */
};

struct dlb_config {
	struct dlb_frontend_cfg frontends[DLB_MAX_FRONTENDS];
	int nfrontends;				/* atomic at runtime: a reload appends */
	unsigned fe_gen;			/* atomic: bumped when listeners must be synced */

	struct dlb_backend *backends[DLB_MAX_BACKENDS];
	int nbackends;
	struct dlb_pool *pools[DLB_MAX_POOLS];	/* created by getPool() or a backend's pool= */
	int npools;

	struct dlb_nmg acl;			/* default: dnsdist's private ranges. The main
						 * thread's copy, edited by setACL & co.; workers
						 * read the snapshot's */

	struct dlb_cache *caches[DLB_MAX_POOLS * 2];	/* every newPacketCache(), freed with cfg */
	struct dlb_cache_opts *cache_opts;	/* [DLB_MAX_POOLS * 2]: the options each was asked
						 * with (a reload's caches are built tiny) */
	int ncaches;

	int workers;				/* 0 = number of CPUs */
	int lua_policy_next;			/* reloads: the next slot of set.lua_policies,
						 * as a ring (main thread) */
	int max_udp_outstanding;		/* setMaxUDPOutstanding, per backend and worker, default 65535 */
	dlb_be_totals_fn *be_totals;		/* NULL until the workers run */

	int max_tcp_queries_per_conn;		/* 0 = unlimited */
	int max_tcp_conns_per_client;		/* 0 = unlimited */
	int max_tcp_conn_duration;		/* s, 0 = unlimited */
	int max_tcp_client_threads;		/* accepted for compatibility; workers serve TCP */
	/* abuse limits (dnslb/pipeline/abuse.h, docs/abuse.md; lua/abuse_lua.c sets them) */
	int max_tcp_conn_rate_per_client;	/* setMaxTCPConnectionRatePerClient, /s; 0 = off */
	int tcp_conn_rate_interval;		/* setTCPConnectionRateInterval, min, default 5 */
	int tcp_ban_duration_rate;		/* setBanDurationForExceedingTCPTLSRate, s, default 10 */
	int max_tcp_read_ios_per_query;		/* setMaxTCPReadIOsPerQuery, default 50; 0 = off */
	int tcp_ban_duration_read_ios;		/* setBanDurationForExceedingMaxReadIOsPerQuery, s, 60 */
	int tcp_conns_mask_v4, tcp_conns_mask_v6;	/* setTCPConnectionsMaskV4/V6, 32 / 128 */
	int tcp_overload_threshold;		/* setTCPConnectionsOverloadThreshold, %, default 90 */
	size_t max_tcp_out_bytes;		/* setMaxTCPOutputBufferSize, default 256 KiB */
	int max_outstanding_per_client;		/* setMaxOutstandingPerClient, per worker; 0 = off */
	int oc_action;				/* enum dlb_oc_action (drop, REFUSED, SERVFAIL) */
	int oc_mask_v4, oc_mask_v6;		/* its client masks, default 32 / 64 */

	int udp_vector_size;			/* recvmmsg batch, default DLB_UDP_BATCH */
	bool blocking_receive;			/* setWorkerBlockingReceive, default true */
	int recv_coalesce_us;			/* setWorkerReceiveCoalescing, 0 = off */
	int udp_rcvbuf, udp_sndbuf;		/* setUDPSocketBufferSizes, 0 = kernel default */

	bool verbose;

	/* What workers read while running: the builder's copy here (main thread),
	 * published to them as a snapshot (struct dlb_snapshot) */
	struct dlb_settings set;
	const struct dlb_ruleset *rules;	/* the rules in force (main thread: the rules
						 * module's publish hook sets it); NULL: none yet */
	struct dlb_snapshot *snap;		/* atomic: the published one; NULL before the
						 * first dlb_config_publish */
};

/** Name of policy @p: a built-in's, or the Lua policy's own name. */
const char *dlb_config_policy_name(const struct dlb_config *cfg, int p);

struct dlb_rcu_thread;

/**
 * A snapshot of @cfg's builder values (set, acl, pools' policies), not yet
 * published. Main thread. @return NULL on ENOMEM. Ownership: the caller's,
 * until dlb_snapshot_publish (or dlb_snapshot_free).
 */
struct dlb_snapshot *dlb_snapshot_build(struct dlb_config *cfg);
/**
 * Make @s the one workers read (one release store of cfg->snap); the one
 * before is retired through @rt (NULL: freed at once: no worker runs).
 * Cannot fail. Main thread. Ownership: @s is cfg's from here.
 */
void dlb_snapshot_publish(struct dlb_config *cfg, struct dlb_snapshot *s,
			  struct dlb_rcu_thread *rt);
void dlb_snapshot_free(struct dlb_snapshot *s);
/**
 * Build and publish: after the builder values changed (startup, console).
 * @return 0, or -1 (no memory: the running snapshot stays).
 */
int dlb_config_publish(struct dlb_config *cfg, struct dlb_rcu_thread *rt);

/** The published snapshot (NULL before the first). Thread: any, in an epoch section. */
static inline const struct dlb_snapshot *
dlb_config_snapshot(const struct dlb_config *cfg)
{
	return __atomic_load_n(&cfg->snap, __ATOMIC_ACQUIRE);
}

/** The builder's policy of @pool: its own, else the global one. Main thread. */
static inline int
dlb_config_pool_policy(const struct dlb_config *cfg, const struct dlb_pool *pool)
{
	return pool->policy >= 0 ? pool->policy : cfg->set.policy;
}

/**
 * @pool's members, weights, policy and cache as snapshot @s has them (a
 * pool created after @s: none). @s NULL: the builder's, filled into @tmp
 * (main thread, or no worker running: explainQuery, tests).
 */
static inline const struct dlb_pool_state *
dlb_pool_state(const struct dlb_snapshot *s, const struct dlb_pool *pool,
	       struct dlb_pool_state *tmp)
{
	static const struct dlb_pool_state none = { .policy = -1 };

	if (s != NULL)
		return pool->index < s->npools ? &s->pools[pool->index] : &none;
	tmp->members = pool->members;
	tmp->weights = NULL;	/* the builder has none apart: dlb_pool_weight reads the servers */
	tmp->n = pool->n;
	tmp->policy = pool->policy;
	tmp->cache = pool->cache;
	return tmp;
}

/** Member @i's weight in @ps (the server's own when @ps is the builder's). */
static inline int
dlb_pool_weight(const struct dlb_pool_state *ps, int i)
{
	return ps->weights != NULL ? ps->weights[i] : ps->members[i]->weight;
}

/** The policy of @pool in @s: its own, else the global one. */
static inline int
dlb_snapshot_pool_policy(const struct dlb_snapshot *s, const struct dlb_pool *pool)
{
	int p = pool->index < s->npools ? s->pools[pool->index].policy : -1;

	return p >= 0 ? p : s->set.policy;
}

/** Pool @name among those @s knows, or NULL. Thread: any, in an epoch section. */
const struct dlb_pool *dlb_snapshot_find_pool(const struct dlb_snapshot *s, const char *name);

/**
 * How a reload's configuration @b maps onto the running one @a: which
 * running server each of @b's servers is (or -1: a new one), and which
 * running packet cache each of @b's caches is (or -1: a new one).
 *
 * A server is the same when its address, source, name, transport settings
 * (sockets, tcpOnly, timeouts, retries, maxInFlight, useClientSubnet,
 * useProxyProtocol) and lazy mode are, and, when the file gives `id=`, its
 * UUID; the rest (order, weight, qps, pools, health-check settings,
 * healthCheckMode) is changed in place (dlb_config_update_backend). Servers
 * removed at runtime are never matched. A cache is the same when it was
 * asked with the same options (size included).
 */
struct dlb_reload_plan {
	int fe_map[DLB_MAX_FRONTENDS];		/* running listener of the same address, or -1 */
	int be_map[DLB_MAX_BACKENDS];
	int cache_map[DLB_MAX_POOLS * 2];
};

/**
 * Fill @plan (a listener is the same when its address is; a removed one is
 * revived). @return NULL, or a phrase naming what a reload cannot do.
 */
const char *dlb_config_plan_reload(const struct dlb_config *a, const struct dlb_config *b,
				   struct dlb_reload_plan *plan);

/**
 * Give running server @be the in-place settings of @nb (its match in a
 * reload): order, weight, qps, health-check settings, and the forced state
 * when the file's healthCheckMode changed (a setUp/setDown from the console
 * otherwise stays). Pool membership is the caller's. Main thread.
 */
void dlb_config_update_backend(struct dlb_backend *be, const struct dlb_backend *nb);

/**
 * Take @be out of service for good at runtime: out of every pool, forced
 * down, marked removed (its index stays). Rings are the caller's. Main thread.
 */
void dlb_config_retire_backend(struct dlb_config *cfg, struct dlb_backend *be);

/**
 * A reload, first step (after dlb_config_plan_reload, before anything of it
 * is committed): create @ncfg's new packet caches in @cfg (@plan's -1
 * cache entries become their indexes), make every pool it names exist, and
 * build the snapshot it would publish: its settings, ACL and policies, Lua
 * policies renumbered into the slots of cfg's ring that follow the running
 * generation's (at most half the ring per generation, so the running one is
 * never overwritten), pools' policies by running pool. Main thread.
 * @return the snapshot (not published; the caller's), or NULL with @err:
 * nothing is published, the running configuration stays.
 */
struct dlb_snapshot *dlb_config_adopt_prepare(struct dlb_config *cfg, const struct dlb_config *ncfg,
					      struct dlb_reload_plan *plan, char *err, size_t errlen);

/**
 * A reload, commit (nothing fails from here): the running servers @ncfg
 * still has take its in-place settings and pool lists, its new ones (opened
 * by the caller, @plan) join their pools, the others are retired; every pool
 * gets its cache (or none); rings are rebuilt; the builder values (settings,
 * ACL, policies) become @s's, and @s is published (one pointer swap; the
 * previous snapshot retired through @rt). @ncfg's ACL is taken (left empty).
 * Main thread.
 */
void dlb_config_adopt(struct dlb_config *cfg, struct dlb_config *ncfg,
		      const struct dlb_reload_plan *plan, struct dlb_snapshot *s,
		      struct dlb_rcu_thread *rt);

/** Do options @x and @y build the same cache? */
bool dlb_cache_opts_same(const struct dlb_cache_opts *x, const struct dlb_cache_opts *y);

/** Defaults as dnsdist 1.7.3 has them. Ownership: caller frees with dlb_config_free. */
struct dlb_config *dlb_config_new(void);
void dlb_config_free(struct dlb_config *cfg);

/** Backend with defaults filled in; the caller sets the address. Not yet attached. */
struct dlb_backend *dlb_backend_new(void);
/** Free @be and drop its TLS context reference. NULL: nothing. Main thread. */
void dlb_backend_free(struct dlb_backend *be);
/** Attach @be: index, default name, pool membership. @return 0 or -1 (too many). */
int dlb_config_add_backend(struct dlb_config *cfg, struct dlb_backend *be);
/**
 * The two halves of dlb_config_add_backend, for a server added at runtime:
 * append @be to cfg->backends (index, default name; nbackends published
 * with a release store, so workers can open their sockets towards it), and
 * later put it in its pools (be->pools, or the default pool). @return 0 or
 * -1 (too many servers or pools).
 */
int dlb_config_append_backend(struct dlb_config *cfg, struct dlb_backend *be);
int dlb_config_attach_backend(struct dlb_config *cfg, struct dlb_backend *be);
/**
 * The index in cfg->backends of the server shown at position @pos: dnsdist
 * lists its servers sorted by order (a stable sort at each newServer: equal
 * orders keep the order they were added in; a later change of a server's
 * order does not move it), and numbers them so in showServers(),
 * getServer(n), rmServer(n) and the web API. @return -1 past the end.
 */
int dlb_config_backend_at(const struct dlb_config *cfg, int pos);
/** Detach and free backend @idx, re-indexing the rest (config time only). */
int dlb_config_remove_backend(struct dlb_config *cfg, int idx);
/** Find or create a pool. @return NULL when there are too many. */
struct dlb_pool *dlb_config_get_pool(struct dlb_config *cfg, const char *name);
struct dlb_pool *dlb_config_find_pool(const struct dlb_config *cfg, const char *name);
/** Add/remove backend @be to/from pool @name (membership array kept sorted). */
int dlb_config_pool_add(struct dlb_config *cfg, const char *name, struct dlb_backend *be);
void dlb_config_pool_remove(struct dlb_config *cfg, const char *name, struct dlb_backend *be);
/** Re-sort every pool's members by (order, index), after a backend's order changed. */
void dlb_config_resort_pools(struct dlb_config *cfg);
/**
 * dnsdist's numbering of binds (showBinds, getBind, the web API): a plain
 * listener is two binds, UDP then TCP; a DNS over TLS or HTTPS listener is
 * one (TCP).
 * Bind @n of @cfg: @return its listener's index (*@tcp: whether it is TCP),
 * or -1 when there is none.
 */
static inline int
dlb_config_bind(const struct dlb_config *cfg, int n, bool *tcp)
{
	int nf = __atomic_load_n(&cfg->nfrontends, __ATOMIC_ACQUIRE);

	for (int i = 0; i < nf && n >= 0; i++) {
		int k = dlb_frontend_stream_only(&cfg->frontends[i]) ? 1 : 2;

		if (n < k) {
			*tcp = k == 1 || n == 1;
			return i;
		}
		n -= k;
	}
	return -1;
}

/** dnsdist's name of bind protocol of @fe ("UDP", "TCP", "TCP (DNS over TLS)",
 * "TCP (DNS over HTTPS)", "TCP (DNS over HTTP)" for DoH without TLS). */
static inline const char *
dlb_frontend_proto(const struct dlb_frontend_cfg *fe, bool tcp)
{
	if (fe->doh != NULL)
		return fe->tls != NULL ? "TCP (DNS over HTTPS)" : "TCP (DNS over HTTP)";
	if (fe->tls != NULL)
		return "TCP (DNS over TLS)";
	return tcp ? "TCP" : "UDP";
}

/** How many binds @cfg has (dlb_config_bind). */
static inline int
dlb_config_nbinds(const struct dlb_config *cfg)
{
	int nf = __atomic_load_n(&cfg->nfrontends, __ATOMIC_ACQUIRE), n = 0;

	for (int i = 0; i < nf; i++)
		n += dlb_frontend_stream_only(&cfg->frontends[i]) ? 1 : 2;
	return n;
}

/** Add a listener; an identical address is merged (repeating addLocal with
 * reusePort). The config takes @fe->tls. @return 0, -1 when there are too
 * many, -2 when a TLS listener and another share the address (@fe->tls is
 * then still the caller's). */
int dlb_config_add_frontend(struct dlb_config *cfg, const struct dlb_frontend_cfg *fe);
/**
 * Build every pool's consistent-hashing ring from its members' weights and
 * IDs (stable across restarts with id=) and publish it. Before the workers
 * start @rt is NULL and old rings are freed at once; at runtime (a server
 * added, removed, re-weighted or moved between pools) they are retired
 * through @rt. Main thread. @return 0 or -1 (no memory: the old rings stay).
 */
int dlb_config_build_rings(struct dlb_config *cfg, struct dlb_rcu_thread *rt);

/** The published ring of @pool, or NULL. Thread: any, in an epoch section. */
static inline const struct dlb_ch_ring *
dlb_pool_ring(const struct dlb_pool *pool)
{
	return __atomic_load_n(&pool->ring, __ATOMIC_ACQUIRE);
}

/** Hash of a lowercased wire name for whashed/chashed (not keyed: stable across restarts). */
uint32_t dlb_name_hash_seeded(const uint8_t *lc, size_t len, uint32_t seed);
/**
 * dnsdist's burtleCI: Bob Jenkins' lookup2 hash of @len bytes of @k, ASCII
 * letters taken as lowercase, from @init. whashed and chashed hash the
 * query name's wire form with it, and chashed places a server's points at
 * the hashes of "<id>-<n>", as dnsdist does.
 */
uint32_t dlb_burtle_ci(const void *k, size_t len, uint32_t init);

/** dnsdist's default ACL (RFC 1918, CGNAT, loopback, link-local, ULA). */
void dlb_config_default_acl(struct dlb_nmg *acl);

/** Is @be eligible for traffic (forced up, or auto and healthy)? Thread: any. */
static inline bool
dlb_backend_is_up(const struct dlb_backend *be)
{
	int admin = __atomic_load_n(&be->admin, __ATOMIC_RELAXED);

	if (admin == DLB_BE_FORCED_UP)
		return true;
	if (admin == DLB_BE_FORCED_DOWN)
		return false;
	return __atomic_load_n(&be->healthy, __ATOMIC_RELAXED) != 0;
}

#endif
