/*
 * rules.h - the rule engine (docs/architecture.md#rules-lua-states-and-reloads): selectors and actions
 * built from Lua into C objects, ordered chains of {selector, action,
 * counters} published as immutable snapshots, and their evaluation on the
 * query path.
 *
 * Objects and ownership
 *  - struct dlb_sel and struct dlb_act are built by the config Lua state
 *    (lua/rules_lua.c) on the main thread and are immutable afterwards, except
 *    for their own internal rate-limiter state (atomics or sharded locks).
 *    They are reference counted (main thread only): the Lua userdata holds
 *    one reference, every rule that uses them holds one.
 *  - struct dlb_rule = {sel, act, name, uuid, per-worker match counters}; a
 *    rule object survives mvRule (the counter moves with it).
 *  - struct dlb_chain is an immutable array of rule pointers. The main thread
 *    publishes a new chain with one atomic store (dlb_rules_publish) and the
 *    old one is released through the epoch (dlb_rcu_defer), dropping its
 *    references to rules once no worker can still be walking it.
 *
 * Threads: workers call dlb_rules_run_* on the chains they load with
 * dlb_rules_chain() inside their epoch section. Everything else is main
 * thread only.
 */
#ifndef DNSLB_RULES_RULES_H
#define DNSLB_RULES_RULES_H

#include <ck_epoch.h>
#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "dnslb/core/dnslb.h"
#include "dnslb/core/doh_cfg.h"
#include "dnslb/core/netmask.h"
#include "dnslb/core/wire.h"

struct dlb_pool;
struct dlb_config;
struct dlb_rcu_thread;
struct dlb_lua_worker;
struct dlb_suffix_set;
struct dlb_name_set;
struct dlb_qps_ip;
struct dlb_kvstore;
struct dlb_timed_ipset;

#include "dnslb/core/tags.h"

/* ---- the qname split into labels, once per query -------------------------- */

#define DLB_QNAME_MAX_LABELS 128	/* 255 octets: <= 127 labels + the root */

/*
 * The qname (m->qname_lc) split into labels, filled at most once per query
 * by the first selector that needs it (dlb_qname_labels_init) and shared by
 * every suffix set lookup of that query. The label hashes are the ones the
 * suffix sets key their child slots with (one process-wide seed, the same
 * for every set); they are computed lazily, from the root end, as far as a
 * lookup walks: hash[h..n-1] are valid.
 */
struct dlb_qname_labels {
	uint8_t n;				/* labels, root excluded (0: malformed too) */
	uint8_t h;				/* hash[h..n-1] computed */
	bool name_hashed;			/* name_hash computed */
	uint32_t name_hash;			/* the name sets' hash of the whole name */
	uint8_t off[DLB_QNAME_MAX_LABELS];	/* label i's length octet at lc + off[i] */
	uint32_t hash[DLB_QNAME_MAX_LABELS];
};

/** Split the lowercased wire name @lc (@len octets) into @l (no hash yet). */
void dlb_qname_labels_init(struct dlb_qname_labels *l, const uint8_t *lc, size_t len);

/* ---- what rules see of an encrypted query's transport --------------------- */

/*
 * A DNS over TLS or DNS over HTTPS query's transport, as dnsdist 1.7's
 * DNSQuestion shows it (its sni, and its DoH unit's HTTP request and
 * answer): HTTPHeaderRule, HTTPPathRule, HTTPPathRegexRule, SNIRule,
 * HTTPStatusAction and the dq:getHTTP*() methods read it.
 *
 * Owner: the frontend that read the query (dnslb/frontend/doh_conn.c for a
 * DoH request, tcp_client.c for a DoT connection); every pointer is valid
 * while the query rules run and until the frontend has sent a local answer.
 * A plain UDP or TCP query has none (dq->http NULL): no allocation and no
 * copy on their path.
 */
struct dlb_dq_http {
	/* --- the request: DoH only (doh) --- */
	bool doh;
	const char *path;		/* the request's path as sent (not normalised), its
					 * query string included; NUL-terminated */
	size_t path_len;
	size_t query_at;		/* offset of the '?' in path; path_len: none */
	const char *scheme;		/* "https", "http" */
	const char *host;		/* :authority or Host; without either, the listener's address */
	const struct dlb_doh_header *headers;	/* as the client sent them (lowercase names),
					 * the fields dnsdist's HTTP server hides included:
					 * dlb_dq_http_header skips those */
	size_t nheaders;
	/* --- DoT: the server name the client sent (dnsdist 1.7.3 has none for DoH) --- */
	const char *sni;		/* NULL: none */
	/* --- the HTTP answer the rules chose: DoH only --- */
	uint16_t status;		/* HTTPStatusAction, dq:setHTTPResponse; 0: none */
	size_t body_len;		/* the body, in body[] */
	uint8_t *body;			/* the frontend's buffer of body_cap bytes */
	size_t body_cap;
	char content_type[128];		/* "": the default */
};

/**
 * The header fields of @h as dnsdist 1.7.3's DoH frontend gives them to
 * rules and to dq:getHTTPHeaders(): those its HTTP server keeps apart
 * (host, content-length, transfer-encoding, upgrade, expect) are not there,
 * and a name sent twice has its first value. @return whether field @i is one
 * of them. Thread: any.
 */
bool dlb_dq_http_header_shown(const struct dlb_dq_http *h, size_t i);

/**
 * Set the HTTP answer of @h (dq:setHTTPResponse, HTTPStatusAction): @status,
 * @body (@len bytes, cut to the buffer), @ctype (NULL or "": the default).
 */
void dlb_dq_http_set_response(struct dlb_dq_http *h, uint16_t status, const uint8_t *body,
			      size_t len, const char *ctype);

/* ---- the query (dq) / response (dr) view -------------------------------- */

/*
 * What rules see and change. Built on the worker's stack for each query by
 * the pipeline (dnslb/pipeline/query.c) and for each response; never allocated.
 */
struct dlb_dq {
	/* --- the packet --- */
	uint8_t *pkt;			/* query, or response for response chains */
	size_t len;
	size_t cap;			/* bytes writable at pkt (answers are built in place) */
	uint8_t *spare;			/* NULL, or DLB_RBUF_SIZE bytes a response may move to
					 * to grow (dq:setTrailingData): pkt then points there */
	struct dlb_dnsmsg *m;		/* parsed query (response chains: the response's
					 * header and question, parsed by dlb_wire_parse_response_question) */
	/* --- who and how --- */
	const struct sockaddr *remote;	/* client */
	const struct sockaddr *local;	/* the address it asked (listener, or pktinfo) */
	struct dlb_dq_http *http;	/* DoT and DoH: the transport (above); NULL: plain */
	bool tcp;
	int worker;			/* worker id: counter slot, Lua state */
	struct dlb_lua_worker *lua;	/* this worker's Lua state; NULL: Lua rules don't match,
					 * Lua actions answer SERVFAIL (counted) */
	const struct dlb_config *cfg;	/* live objects: pools by name, backends' states */
	const struct dlb_snapshot *snap;	/* the worker's snapshot: pools (NULL: the
					 * builder's, main thread) */
	const struct dlb_settings *set;	/* its settings (NULL: defaults) */
	double now;			/* loop clock, s */
	double t_start;			/* when the query arrived (dr: latency) */
	struct dlb_rng *rng;		/* ProbaRule */
	/* --- decided by actions, read by the pipeline --- */
	const struct dlb_pool *pool;	/* with pool_set: the chosen pool (NULL: it does
					 * not exist, so no server: no-policy) */
	bool pool_set;			/* false: the default pool */
	bool skip_cache;
	bool edns_added;		/* SetEDNSOptionAction added the OPT RR: the
					 * backend's is removed from its answer */
	int32_t tempfail_ttl;		/* -1: the cache's temporaryFailureTTL */
	uint32_t delay_ms;		/* delay the answer to the client (UDP only) */
	int8_t use_ecs;			/* dq.useECS: 0 = no ECS (SetDisableECSAction); -1, 1: as the server */
	int8_t ecs_override;		/* -1: setECSOverride; 0/1 */
	int16_t ecs_prefix_v4;		/* -1: setECSSourcePrefixV4 */
	int16_t ecs_prefix_v6;		/* -1: setECSSourcePrefixV6 */
	struct sockaddr_storage ecs_fixed;	/* SetECSAction: family 0 = none */
	uint8_t ecs_fixed_bits;
	uint32_t max_returned_ttl;	/* SetMaxReturnedTTLAction: 0 = none */
	bool qlabels_ready;		/* qlabels holds m's qname (false: not yet split).
					 * Before tags, so that the memset up to tags of
					 * every dq construction clears it; also cleared by
					 * dlb_dq_reset_decisions and after Lua code (which
					 * may replace the message) */
	struct dlb_tags tags;
	/* --- response chains only --- */
	bool response;
	bool cache_hit;			/* cache-hit chain */
	int be_index;			/* the backend that answered, -1 */
	struct dlb_qname_labels qlabels;	/* valid when qlabels_ready (rules/rules.c) */
};

/** Defaults for every decided field (pool NULL, ttl -1, ...); keeps the packet fields. */
void dlb_dq_reset_decisions(struct dlb_dq *dq);

/* ---- key-value store lookups (rules/kvs.c, dnslb/store/kvstore.h) --------------- */

/* dnsdist 1.7's KeyValueLookupKey* objects: which keys of a query to look up. */
enum dlb_kvs_key_type {
	DLB_KVK_QNAME = 0,	/* KeyValueLookupKeyQName: the qname */
	DLB_KVK_SUFFIX,		/* KeyValueLookupKeySuffix: the qname, then each parent */
	DLB_KVK_SOURCE_IP,	/* KeyValueLookupKeySourceIP: the client's address, masked */
	DLB_KVK_TAG,		/* KeyValueLookupKeyTag: the value of a tag */
};

#define DLB_KVS_TAG_MAX	64	/* a tag name, NUL included */

struct dlb_kvs_key {
	uint8_t type;		/* enum dlb_kvs_key_type */
	bool wire;		/* QNAME/SUFFIX: lowercase wire-format keys; else lowercase
				 * text with the final dot ("www.example.com.") */
	bool port;		/* SOURCE_IP: ":port" appended ("192.0.2.1:53", "[::1]:53") */
	uint8_t min_labels;	/* SUFFIX: stop at names of this many labels (0: at the TLD) */
	uint8_t v4mask, v6mask;	/* SOURCE_IP: bits kept */
	char tag[DLB_KVS_TAG_MAX];	/* TAG */
};

/**
 * Look the keys @k makes from @dq up in @kvs's mirror, in order (a suffix
 * key: the longest name first), and count the lookup (per worker). @return
 * true at the first key found, its value in *@val and *@vlen (a hash field's
 * value; for a set, the member itself). Thread: a worker inside its epoch
 * section (or the main thread).
 */
bool dlb_kvs_lookup(struct dlb_kvstore *kvs, const struct dlb_kvs_key *k, struct dlb_dq *dq,
		    const uint8_t **val, size_t *vlen);
/**
 * The qname-based part of dlb_kvs_lookup (@k a QNAME or SUFFIX key) for the
 * lowercased wire name @lc, in the map @m (kvs:lookup(), kvs:lookupSuffix()).
 * Counts nothing.
 */
struct dlb_kvmap;
bool dlb_kvs_lookup_name(const struct dlb_kvmap *m, const struct dlb_kvs_key *k,
			 const uint8_t *lc, size_t len, const uint8_t **val, size_t *vlen);
/**
 * KeyValueStoreLookupAction: set the action's tag to the value found (a
 * set: the member, in text form), or to "" when no key is found (dnsdist
 * 1.7 creates the tag either way).
 */
struct dlb_act;
void dlb_kvs_action(const struct dlb_act *a, struct dlb_dq *dq);
/** dnsdist's description of the key ("qname", "suffix", "source IP (masked to ...)"). */
void dlb_kvs_key_describe(const struct dlb_kvs_key *k, char *out, size_t outsz);

/* ---- selectors ------------------------------------------------------------ */

enum dlb_sel_type {
	DLB_SEL_ALL = 0,
	DLB_SEL_AND,		/* u.list */
	DLB_SEL_OR,		/* u.list */
	DLB_SEL_NOT,		/* u.sub */
	DLB_SEL_QNAME,		/* u.name: exact, case-insensitive */
	DLB_SEL_QNAME_SET,	/* u.nameset */
	DLB_SEL_SUFFIX,		/* u.suffixes (SuffixMatchNodeRule, QNameSuffixRule, makeRule) */
	DLB_SEL_REGEX,		/* u.re */
	DLB_SEL_QTYPE,		/* u.num */
	DLB_SEL_QCLASS,		/* u.num */
	DLB_SEL_OPCODE,		/* u.num */
	DLB_SEL_RD,
	DLB_SEL_DNSSEC,		/* DO bit */
	DLB_SEL_NMG,		/* u.nmg: src (remote) or dst (local) */
	DLB_SEL_DSTPORT,	/* u.num */
	DLB_SEL_TCP,		/* u.flag */
	DLB_SEL_MAXQPSIP,	/* u.qpsip */
	DLB_SEL_MAXQPS,		/* u.bucket: matches while NOT over the rate */
	DLB_SEL_PROBA,		/* u.proba */
	DLB_SEL_RCODE,		/* u.num: low 4 bits */
	DLB_SEL_ERCODE,		/* u.num: 12-bit extended rcode */
	DLB_SEL_EDNS_OPTION,	/* u.num: option code present */
	DLB_SEL_EDNS_VERSION,	/* u.num: EDNS version greater than */
	DLB_SEL_PAYLOAD_SIZE,	/* u.cmp: packet length comparison */
	DLB_SEL_RECORDS_COUNT,	/* u.count: section, min, max */
	DLB_SEL_RECORDS_TYPE_COUNT,	/* u.count with type */
	DLB_SEL_LABELS_COUNT,	/* u.range: matches OUTSIDE [min, max] */
	DLB_SEL_WIRE_LENGTH,	/* u.range: matches OUTSIDE [min, max] */
	DLB_SEL_TRAILING_DATA,
	DLB_SEL_TAG,		/* u.tag */
	DLB_SEL_POOL_AVAILABLE,	/* u.pool */
	DLB_SEL_POOL_OUTSTANDING,	/* u.pool + limit */
	DLB_SEL_LUA,		/* u.lua */
	DLB_SEL_KVS,		/* u.kvs: KeyValueStoreLookupRule */
	DLB_SEL_TIMED_IPSET,	/* u.tips: TimedIPSetRule (one reference) */
	DLB_SEL_HTTP_HEADER,	/* u.hdr: HTTPHeaderRule */
	DLB_SEL_HTTP_PATH,	/* u.str: HTTPPathRule, the path without its query string */
	DLB_SEL_HTTP_PATH_REGEX,	/* u.re: HTTPPathRegexRule */
	DLB_SEL_SNI,		/* u.str: SNIRule */
	DLB_SEL__COUNT
};

enum dlb_cmp { DLB_CMP_EQ, DLB_CMP_NE, DLB_CMP_GT, DLB_CMP_GE, DLB_CMP_LT, DLB_CMP_LE };

/* A token bucket shared by all workers (MaxQPSRule, QPSAction, newQPSLimiter):
 * lock-free, one CAS per check. */
struct dlb_bucket {
	double rate, burst;
	uint64_t state;		/* atomic: packed tokens and last refill time */
};
void dlb_bucket_init(struct dlb_bucket *b, double rate, double burst);
/** Take one token at time @now (s, monotonic). @return true if there was one. */
bool dlb_bucket_take(struct dlb_bucket *b, double now);

struct dlb_sel {
	uint16_t type;			/* enum dlb_sel_type */
	bool quiet;			/* QNameSuffixRule/SuffixMatchNodeRule quiet: short description */
	int refs;			/* main thread */
	char *desc;			/* showRules' "Rule" column, malloc'ed */
	union {
		struct { struct dlb_sel **v; int n; } list;
		struct dlb_sel *sub;
		struct { uint8_t lc[DLB_MAX_NAME]; uint16_t len; } name;
		struct dlb_name_set *nameset;
		struct dlb_suffix_set *suffixes;
		regex_t *re;
		uint32_t num;
		bool flag;
		struct { struct dlb_nmg g; bool src; } nmg;
		struct dlb_qps_ip *qpsip;
		struct dlb_bucket *bucket;
		double proba;
		struct { int op; uint32_t size; } cmp;		/* enum dlb_cmp */
		struct { uint8_t section; uint16_t type; uint16_t min, max; } count;
		struct { uint32_t min, max; } range;
		struct { char *name; char *value; } tag;		/* value NULL: present */
		struct { char *name; uint64_t limit; } pool;
		struct { int fn; char src[96]; } lua;		/* see dlb_lua_worker */
		struct { struct dlb_kvstore *store; struct dlb_kvs_key key; } kvs;	/* one ref */
		struct dlb_timed_ipset *tips;
		char *str;
		struct { char *name; regex_t *re; } hdr;	/* name lowercased */
	} u;
};

/** Allocate a selector of @type with one reference; zeroed payload. NULL on ENOMEM. */
struct dlb_sel *dlb_sel_new(enum dlb_sel_type type);
void dlb_sel_ref(struct dlb_sel *s);
/** Drop a reference; frees (sub-selectors too) at zero. Main thread. */
void dlb_sel_unref(struct dlb_sel *s);
/**
 * RegexRule: compile @re (POSIX ERE, REG_ICASE|REG_NOSUB) into @s->u.re.
 * @return 0, or -1 with regerror's message in @err.
 */
int dlb_sel_set_regex(struct dlb_sel *s, const char *re, char *err, size_t errlen);
/**
 * HTTPHeaderRule: the header field @name (lowercased here) and @re (as
 * RegexRule's) into @s->u.hdr. @return 0, or -1 with the message in @err.
 */
int dlb_sel_set_http_header(struct dlb_sel *s, const char *name, const char *re, char *err,
			    size_t errlen);
/** Does @s match @dq? Thread: any worker. */
bool dlb_sel_match(const struct dlb_sel *s, struct dlb_dq *dq);
/**
 * @s's description (showRules' "Rule" column): s->desc, or for a selector
 * whose description changes (TimedIPSetRule's "Src: N ips") one written
 * into @buf. Thread: any.
 */
const char *dlb_sel_desc(const struct dlb_sel *s, char *buf, size_t bufsz);

/* ---- TimedIPSetRule's set (rules/timedipset.c) ------------------------------ */

/** A new empty set with one reference, or NULL (ENOMEM). */
struct dlb_timed_ipset *dlb_timed_ipset_new(void);
void dlb_timed_ipset_ref(struct dlb_timed_ipset *t);
/** Drop a reference; frees at zero. Thread: any. */
void dlb_timed_ipset_unref(struct dlb_timed_ipset *t);
/**
 * The @nth set of the configuration state @origin (a new reference): the
 * config state creates it (@create), the worker states replaying that
 * configuration find the same one. NULL when there is none (or ENOMEM).
 */
struct dlb_timed_ipset *dlb_timed_ipset_shared(unsigned long origin, long nth, bool create);
/**
 * Add @sa's address (not its port) until time(NULL) @ttd; an address already
 * there keeps the later time. @return 0, or -1 (not an IP address, or the
 * set is full of live entries, or ENOMEM).
 */
int dlb_timed_ipset_add(struct dlb_timed_ipset *t, const struct sockaddr *sa, int64_t ttd);
/** Is @sa's address in the set and not expired? Thread: any. */
bool dlb_timed_ipset_match(struct dlb_timed_ipset *t, const struct sockaddr *sa);
/** Remove the expired addresses. */
void dlb_timed_ipset_cleanup(struct dlb_timed_ipset *t);
/** Remove every address. */
void dlb_timed_ipset_clear(struct dlb_timed_ipset *t);
/** The addresses not expired. */
size_t dlb_timed_ipset_live(struct dlb_timed_ipset *t);

/* ---- actions -------------------------------------------------------------- */

enum dlb_act_type {
	/* query actions */
	DLB_ACT_POOL = 0,	/* u.pool: name and stop */
	DLB_ACT_DROP,
	DLB_ACT_ALLOW,
	DLB_ACT_NONE,
	DLB_ACT_CONTINUE,	/* u.sub: run it, then continue */
	DLB_ACT_RCODE,		/* u.rcode */
	DLB_ACT_ERCODE,		/* u.rcode (extended) */
	DLB_ACT_TC,
	DLB_ACT_SPOOF,		/* u.spoof: addresses */
	DLB_ACT_SPOOF_CNAME,	/* u.spoof: one name */
	DLB_ACT_SPOOF_RAW,	/* u.spoof: raw rdatas */
	DLB_ACT_SPOOF_SVC,	/* u.spoof: SVCB rdatas (raw) and their hints (add) */
	DLB_ACT_NEGATIVE_SOA,	/* u.soa */
	DLB_ACT_QPS,		/* u.bucket: over the rate: drop; under: continue */
	DLB_ACT_QPS_POOL,	/* u.qpspool: under the rate: to the pool (stop); over: continue */
	DLB_ACT_DELAY,		/* u.num: ms */
	DLB_ACT_NO_RECURSE,
	DLB_ACT_DISABLE_VALIDATION,
	DLB_ACT_SKIP_CACHE,
	DLB_ACT_TEMPFAIL_TTL,	/* u.num */
	DLB_ACT_ECS,		/* u.ecs */
	DLB_ACT_ECS_PREFIX,	/* u.ecsprefix */
	DLB_ACT_ECS_OVERRIDE,	/* u.flag */
	DLB_ACT_DISABLE_ECS,
	DLB_ACT_TAG,		/* u.tag */
	DLB_ACT_MAX_RETURNED_TTL,	/* u.num */
	DLB_ACT_LOG,		/* u.log */
	DLB_ACT_LUA,		/* u.lua */
	DLB_ACT_KVS,		/* u.kvs: KeyValueStoreLookupAction */
	DLB_ACT_SET_EDNS_OPTION,	/* u.ednsopt */
	DLB_ACT_TEE,		/* u.tee: TeeAction */
	DLB_ACT_HTTP_STATUS,	/* u.http: HTTPStatusAction */
	/* response actions */
	DLB_RACT_ALLOW,
	DLB_RACT_DROP,
	DLB_RACT_DELAY,		/* u.num: ms */
	DLB_RACT_LOG,		/* u.log */
	DLB_RACT_SKIP_CACHE,
	DLB_RACT_TAG,		/* u.tag */
	DLB_RACT_LIMIT_TTL,	/* u.ttl: min, max, types */
	DLB_RACT_REDUCED_TTL,	/* u.num: percent */
	DLB_RACT_MAX_RETURNED_TTL,	/* u.num */
	DLB_RACT_CLEAR_RECORD_TYPES,	/* u.types */
	DLB_RACT_LUA,		/* u.lua */
	DLB_ACT__COUNT
};

/** Options shared by the answering actions ({aa=, ad=, ra=, ttl=}). */
struct dlb_answer_opts {
	bool aa, ad, ra;	/* RA default: copied from RD (dnsdist); ra_set overrides */
	bool ra_set;
	bool aa_set;		/* aa= given; else AA stays as the query had it (dnsdist) */
	uint32_t ttl;		/* default 60 */
};

struct dlb_log;		/* LogAction / LogResponseAction file state (rules/log.c) */
struct dlb_tee;		/* TeeAction's socket and figures (rules/tee.h) */

struct dlb_act {
	uint16_t type;			/* enum dlb_act_type */
	bool response;			/* a response action */
	int refs;			/* main thread */
	char *desc;			/* showRules' "Action" column, malloc'ed */
	union {
		struct { char *name; bool stop; } pool;
		struct dlb_act *sub;
		struct { uint16_t rcode; struct dlb_answer_opts o; } rcode;
		struct {
			struct dlb_answer_opts o;
			/* SPOOF: addresses; SPOOF_CNAME: one wire name; SPOOF_RAW: rdatas */
			struct sockaddr_storage *addrs;
			int naddrs;
			uint8_t cname[DLB_MAX_NAME];
			uint16_t cname_len;
			uint8_t **raw;
			uint16_t *raw_len;
			int nraw;
			/* SPOOF_SVC: the address hints' records, in dnsdist's order */
			struct dlb_svc_additional *add;
			int nadd;
		} spoof;
		struct {
			bool nxd;
			uint8_t zone[DLB_MAX_NAME], mname[DLB_MAX_NAME], rname[DLB_MAX_NAME];
			uint16_t zone_len, mname_len, rname_len;
			uint32_t ttl, serial, refresh, retry, expire, minimum;
			struct dlb_answer_opts o;
			bool soa_in_authority;	/* default false: dnsdist 1.7.3 puts the SOA in the
						 * additional section (observed); true: authority
						 * (1.8's soaInAuthoritySection) */
		} soa;
		struct dlb_bucket *bucket;
		struct { struct dlb_bucket *bucket; char *pool; bool stop; } qpspool;
		uint32_t num;
		bool flag;
		struct { struct sockaddr_storage v4, v6; uint8_t bits4, bits6; } ecs;
		struct { uint16_t v4, v6; } ecsprefix;
		struct { char *name; char *value; } tag;
		struct { uint16_t code; uint16_t len; uint8_t *data; } ednsopt;
		struct { uint32_t min, max; uint16_t *types; int ntypes; } ttl;
		struct { uint16_t *types; int ntypes; } types;
		struct dlb_log *log;
		struct dlb_tee *tee;	/* NULL in a worker state's replay */
		struct {
			uint16_t status;
			uint8_t *body;
			size_t len;
			char *ctype;		/* "": the default */
			struct dlb_answer_opts o;	/* aa=, ad=, ra= */
		} http;
		struct { int fn; char src[96]; } lua;
		struct {
			struct dlb_kvstore *store;	/* one reference */
			struct dlb_kvs_key key;
			char *tag;			/* the destination tag */
		} kvs;
	} u;
};

struct dlb_act *dlb_act_new(enum dlb_act_type type);
void dlb_act_ref(struct dlb_act *a);
void dlb_act_unref(struct dlb_act *a);

/** What an action (or a whole chain) decided. */
enum dlb_verdict_r {
	DLB_R_CONTINUE = 0,	/* next rule */
	DLB_R_FORWARD,		/* stop: forward (Allow, Pool, NoRecurse) */
	DLB_R_DROP,		/* stop: drop */
	DLB_R_ANSWER,		/* stop: dq->pkt/len hold the answer (self-answered) */
	DLB_R_SERVFAIL,		/* stop: answer SERVFAIL (a Lua action failed) */
};

/**
 * Run one action. Query actions that answer build the answer in place in
 * dq->pkt (never beyond dq->cap). Response actions edit dq->pkt in place and
 * may shorten it (ClearRecordTypes); they never grow it.
 * Counters (rule-drop, rule-nxdomain, ...) are the caller's: see
 * dlb_rules_run_query.
 */
enum dlb_verdict_r dlb_act_run(const struct dlb_act *a, struct dlb_dq *dq);

/* ---- record-walking helpers used by response actions (rules/answer.c) ---- */

/**
 * SetEDNSOptionAction, as dnsdist 1.7 does it to query @pkt (*@len bytes,
 * room for @cap, parsed in @m, parsed again after a change): with an OPT
 * RR, the options of @code go and the new one is appended, and anything
 * after the last record goes; without one, an OPT RR (payload 512, the
 * option) is appended, *@added then set. A query it does not fit is left
 * alone. @return DLB_OK, DLB_EINVAL for a message that does not parse
 * (after an OPT RR appended to trailing data: dnsdist then drops the
 * query), or another negative dlb_err.
 */
int dlb_wire_set_edns_option(uint8_t *pkt, size_t *len, size_t cap, struct dlb_dnsmsg *m,
			     uint16_t code, const uint8_t *data, uint16_t dlen, bool *added);

/**
 * Walk every resource record of @pkt (answer, authority, additional; the OPT
 * RR excluded), calling @fn with its section (1..3), type, class, and the
 * offset of its TTL field. Linear in the packet, bounded name decoding.
 * @return 0, or a negative dlb_err for a packet that cannot be walked (then
 * nothing was called after the error point).
 */
typedef void dlb_rr_visit_fn(void *ud, uint8_t *pkt, int section, uint16_t type, uint16_t cls,
			     size_t ttl_off);
int dlb_wire_walk_rrs(uint8_t *pkt, size_t len, dlb_rr_visit_fn *fn, void *ud);

/**
 * Remove every record of the listed types from the answer, authority and
 * additional sections (never the OPT RR), re-pointing compression pointers
 * and decompressing the names whose pointers led into a removed record (or
 * anywhere but an earlier name); the result is never longer than @len for a
 * message whose pointers lead to earlier names and that follows RFC 3597 §4,
 * never longer than @cap in any case (response actions pass @len as @cap).
 * Nothing to remove: @len, packet untouched. Thread: any (a per-thread
 * scratch buffer). @return the new length, or a negative dlb_err (the packet
 * is then unchanged).
 */
int dlb_wire_clear_types(uint8_t *pkt, size_t len, size_t cap, const uint16_t *types, int ntypes);

/* ---- name sets (rules/names.c) ------------------------------------------ */

/*
 * A suffix set (SuffixMatchNode): lowercased wire names in a label tree,
 * lookup O(labels of the qname). A name set (DNSNameSet): exact names in an
 * open-addressing hash table. Both are built on the main thread and then
 * only read (any thread).
 */
struct dlb_suffix_set *dlb_suffix_set_new(void);
void dlb_suffix_set_free(struct dlb_suffix_set *s);
/** Add a lowercased wire name (the root "\0" matches everything). @return 0 or DLB_ENOMEM. */
int dlb_suffix_set_add(struct dlb_suffix_set *s, const uint8_t *lc, size_t len);
/** @return true when it was present. */
bool dlb_suffix_set_remove(struct dlb_suffix_set *s, const uint8_t *lc, size_t len);
/** Is the lowercased wire name @lc at or below one of the suffixes? */
bool dlb_suffix_set_match(const struct dlb_suffix_set *s, const uint8_t *lc, size_t len);
/**
 * The same for @lc already split into @l (dlb_qname_labels_init on that
 * very @lc): the labels' hashes it walks to are computed into @l once and
 * reused by later lookups of @l in any set.
 */
bool dlb_suffix_set_match_labels(const struct dlb_suffix_set *s, const uint8_t *lc,
				 struct dlb_qname_labels *l);
size_t dlb_suffix_set_count(const struct dlb_suffix_set *s);
/** Bytes allocated (docs: memory per name). */
size_t dlb_suffix_set_memory(const struct dlb_suffix_set *s);
struct dlb_suffix_set *dlb_suffix_set_copy(const struct dlb_suffix_set *s);
/** "a.example., b.example." (sorted, at most @outsz-1 bytes, "..." when cut). */
void dlb_suffix_set_format(const struct dlb_suffix_set *s, char *out, size_t outsz);

struct dlb_name_set *dlb_name_set_new(void);
void dlb_name_set_free(struct dlb_name_set *s);
int dlb_name_set_add(struct dlb_name_set *s, const uint8_t *lc, size_t len);
bool dlb_name_set_remove(struct dlb_name_set *s, const uint8_t *lc, size_t len);
bool dlb_name_set_match(const struct dlb_name_set *s, const uint8_t *lc, size_t len);
/** The same, the whole name's hash computed into @l once (@l from this @lc, @len). */
bool dlb_name_set_match_labels(const struct dlb_name_set *s, const uint8_t *lc, size_t len,
			       struct dlb_qname_labels *l);
size_t dlb_name_set_count(const struct dlb_name_set *s);
void dlb_name_set_clear(struct dlb_name_set *s);
struct dlb_name_set *dlb_name_set_copy(const struct dlb_name_set *s);
void dlb_name_set_format(const struct dlb_name_set *s, char *out, size_t outsz);

/* ---- per-subnet rate limits (rules/qps.c) ---------------------------------- */

/**
 * MaxQPSIPRule(qps, v4Mask, v6Mask, burst, expiration, cleanupDelay,
 * scanFraction): a token bucket per client subnet in a sharded hash table
 * (a spinlock per shard, never one lock for all workers); entries idle for
 * @expiration s are reclaimed by dlb_qps_ip_cleanup (main thread, every
 * @cleanup_delay s, 1/@scan_fraction of the table each time).
 */
struct dlb_qps_ip *dlb_qps_ip_new(double qps, int v4mask, int v6mask, double burst,
				  int expiration, int cleanup_delay, int scan_fraction);
void dlb_qps_ip_free(struct dlb_qps_ip *q);
/** Take a token for @sa's subnet at @now. @return true when the subnet is OVER its rate. */
bool dlb_qps_ip_over(struct dlb_qps_ip *q, const struct sockaddr *sa, double now);
/** Reclaim idle entries; @return how many were removed. */
size_t dlb_qps_ip_cleanup(struct dlb_qps_ip *q, double now);
size_t dlb_qps_ip_count(const struct dlb_qps_ip *q);
/** Bytes the table holds (its shard tables plus the header); 40 per slot, 2 to 4 slots per subnet. */
size_t dlb_qps_ip_memory(const struct dlb_qps_ip *q);

/* ---- locally built answers (rules/answer.c) -------------------------------- */

/*
 * Each builds the answer to the parsed query @m (packet @pkt, @len bytes)
 * in place, as dnsdist 1.7.3 does (rules/answer.c lists what was observed):
 * the query's ID, QR=1, opcode, RD, CD and Z copied, RA as @o says
 * (default: copied from RD), AA from @o when aa_set (else the query's AA,
 * or set when @o->aa), AD only when @o->ad, the question echoed in the
 * client's case, then the records (owner: a pointer to the question; class
 * IN), then an OPT RR as dlb_wire_build_answer does (@so; NULL: defaults).
 * @o NULL: the defaults (ttl 60). Never writes beyond @cap; on an error the
 * packet is unchanged.
 * @return the new length, or DLB_ESPACE (DLB_EINVAL: no question to answer).
 */
int dlb_answer_rcode(uint8_t *pkt, size_t len, size_t cap, const struct dlb_dnsmsg *m,
		     uint16_t rcode, const struct dlb_answer_opts *o,
		     const struct dlb_selfanswer_opts *so);
/** TC=1, no records (TCAction; AA and AD clear, RA copied from RD). */
int dlb_answer_tc(uint8_t *pkt, size_t len, size_t cap, const struct dlb_dnsmsg *m,
		  const struct dlb_selfanswer_opts *so);
/**
 * SpoofAction: A records for the IPv4 addresses when qtype is A, AAAA for
 * IPv6 when AAAA, both for ANY, in a random order (dnsdist shuffles them);
 * owner = the qname (compression pointer to the question).
 * @return 0 when no address matches the qtype (MX, TXT, ...; also n == 0):
 * the packet is untouched and, as in dnsdist, the action does nothing (the
 * next rule runs).
 */
int dlb_answer_spoof_addrs(uint8_t *pkt, size_t len, size_t cap, const struct dlb_dnsmsg *m,
			   const struct sockaddr_storage *addrs, int n,
			   const struct dlb_answer_opts *o, const struct dlb_selfanswer_opts *so);
/** SpoofCNAMEAction: one CNAME to the wire name @target. */
int dlb_answer_spoof_cname(uint8_t *pkt, size_t len, size_t cap, const struct dlb_dnsmsg *m,
			   const uint8_t *target, size_t target_len,
			   const struct dlb_answer_opts *o, const struct dlb_selfanswer_opts *so);
/**
 * SpoofRawAction: one record per rdata, in a random order (dnsdist
 * shuffles them), of the query's type and class (dnsdist 1.7.3 writes class
 * IN), and no OPT RR even when the query had EDNS (dnsdist 1.7.3; @so is
 * unused).
 */
int dlb_answer_spoof_raw(uint8_t *pkt, size_t len, size_t cap, const struct dlb_dnsmsg *m,
			 uint8_t *const *rdata, const uint16_t *rdlen, int n,
			 const struct dlb_answer_opts *o, const struct dlb_selfanswer_opts *so);
/* An A or AAAA record SpoofSVCAction adds for an ipv4hint/ipv6hint. */
struct dlb_svc_additional {
	uint8_t name[DLB_MAX_NAME];	/* the owner, wire; the root: the qname */
	uint16_t name_len;
	uint16_t type;			/* 1 (A) or 28 (AAAA) */
	uint8_t addr[16];
};

/**
 * SpoofSVCAction: one record per rdata, in order, of the query's type and
 * class IN, then the @nadd address records in the additional section
 * (owner names compressed against the question's and each other's, as
 * dnsdist's packet writer does), then an OPT RR when the query had one.
 */
int dlb_answer_spoof_svc(uint8_t *pkt, size_t len, size_t cap, const struct dlb_dnsmsg *m,
			 uint8_t *const *rdata, const uint16_t *rdlen, int n,
			 const struct dlb_svc_additional *add, int nadd,
			 const struct dlb_answer_opts *o, const struct dlb_selfanswer_opts *so);
/**
 * NegativeAndSOAAction: NXDOMAIN (@nxd) or NODATA with the SOA of @a->u.soa
 * (owner the zone, TTL u.soa.ttl, names uncompressed), in the additional
 * section before the OPT RR unless u.soa.soa_in_authority; flags from u.soa.o.
 */
int dlb_answer_negative_soa(uint8_t *pkt, size_t len, size_t cap, const struct dlb_dnsmsg *m,
			    const struct dlb_act *a, const struct dlb_selfanswer_opts *so);

/* ---- query/response logging (rules/log.c) ---------------------------------- */

/**
 * LogAction(file, binary, append, buffered, verboseOnly, includeTimestamp) /
 * LogResponseAction(file, append, buffered, verboseOnly, includeTimestamp).
 * An empty @path logs to the daemon's log (only with setVerbose when
 * @verbose_only). Each record is written with one write(2) on an O_APPEND
 * descriptor, so workers never lock; dlb_log_reload reopens the file (after
 * rotation) and swaps the descriptor atomically with dup2.
 * @return NULL with a message in @err.
 */
struct dlb_log *dlb_log_open(const char *path, bool binary, bool append, bool buffered,
			     bool verbose_only, bool timestamp, char *err, size_t errlen);
void dlb_log_free(struct dlb_log *l);
int dlb_log_reload(struct dlb_log *l);
/** Log the query (or, @dq->response, the response) of @dq. Thread: any. */
void dlb_log_write(struct dlb_log *l, const struct dlb_dq *dq, bool verbose);

/* ---- rules and chains ------------------------------------------------------ */

enum dlb_chain_kind {
	DLB_CHAIN_QUERY = 0,
	DLB_CHAIN_RESPONSE,
	DLB_CHAIN_CACHE_HIT,
	DLB_CHAIN_SELF_ANSWERED,
	DLB_CHAIN_CACHE_INSERTED,
	DLB_CHAIN__COUNT
};

/** One worker's match counter, alone on its cache line. */
struct dlb_rule_ctr {
	uint64_t hits;
	char pad[56];
};

struct dlb_rule {
	struct dlb_sel *sel;		/* one reference each */
	struct dlb_act *act;
	char name[64];			/* name=, "" if none */
	char uuid[40];			/* uuid=, else random (v4 text) */
	uint64_t creation;		/* creation order (showRules' #) */
	int refs;			/* main thread: Lua objects + chains */
	struct dlb_rule_ctr *ctr;	/* [DLB_MAX_WORKERS + 1]: one per worker, the last for
					 * any other thread (explainQuery, tests) */
};

/** New rule; takes a reference on @sel and @act. NULL on ENOMEM. */
struct dlb_rule *dlb_rule_new(struct dlb_sel *sel, struct dlb_act *act, const char *name,
			      const char *uuid);
void dlb_rule_ref(struct dlb_rule *r);
void dlb_rule_unref(struct dlb_rule *r);
/** Sum of the workers' match counters. Thread: any (relaxed loads). */
uint64_t dlb_rule_hits(const struct dlb_rule *r);

struct dlb_chain {
	int refs;			/* main thread: rulesets holding it */
	int n;
	struct dlb_rule *v[];		/* each holds one reference */
};

/*
 * The five chains in force, published together in the daemon's
 * configuration snapshot (one atomic store, with the settings: a reload
 * swaps them all at once; docs/architecture.md#publication) and retired
 * through the epoch. @gen is the
 * Lua generation the chains' Lua functions belong to: bumped by each reload,
 * which also hands every worker a new Lua state of that generation
 * (lua/worker.h); runtime edits keep it.
 */
struct dlb_ruleset {
	ck_epoch_entry_t epoch;
	uint64_t gen;
	struct dlb_chain *c[DLB_CHAIN__COUNT];
};

/**
 * The rules in force (never NULL): the builder's, main thread (and tests
 * without a daemon). Workers read the ruleset of their configuration
 * snapshot instead (w->snap->rules, docs/architecture.md#publication). On
 * the main thread during a reload's evaluation, the staged ones.
 */
const struct dlb_ruleset *dlb_rules_current(void);

/**
 * Publishes a ruleset to the workers: the daemon puts @rs in a new
 * configuration snapshot and swaps it in. @return 0, or -1 (no memory:
 * nothing published).
 */
typedef int dlb_rules_publish_fn(const struct dlb_ruleset *rs, struct dlb_rcu_thread *rt);
/**
 * Once the workers read snapshots: every later change of the rules in force
 * goes through @fn before the ruleset it replaces is retired (NULL: none,
 * before the workers start and after they stop). Main thread.
 */
void dlb_rules_set_publish_hook(dlb_rules_publish_fn *fn);

/** dlb_rules_current()->c[@kind]. */
const struct dlb_chain *dlb_rules_chain(enum dlb_chain_kind kind);

/**
 * Publish @v[0..n) as the chain of @kind (references are taken; the caller
 * keeps its own): a new ruleset sharing the other chains. The old ruleset is
 * retired through @rt (NULL: before any worker runs, freed at once). While a
 * reload is being evaluated (dlb_rules_stage_begin) the staged ruleset is
 * changed instead. Main thread. @return 0 or DLB_ENOMEM.
 */
int dlb_rules_publish(enum dlb_chain_kind kind, struct dlb_rule *const *v, int n,
		      struct dlb_rcu_thread *rt);

/**
 * Reloads: from stage_begin to stage_end, the calling (main) thread reads and
 * publishes chains in a new, empty, private ruleset; then either commit it
 * (it becomes live with Lua generation @gen, atomically for all five chains)
 * or discard it. NULL on ENOMEM.
 */
struct dlb_ruleset *dlb_rules_stage_begin(void);
void dlb_rules_stage_end(void);
void dlb_rules_stage_commit(struct dlb_ruleset *rs, uint64_t gen, struct dlb_rcu_thread *rt);
void dlb_rules_stage_discard(struct dlb_ruleset *rs);
/**
 * A reload's commit when the caller publishes @rs itself (in its
 * configuration snapshot, dlb_config_adopt): @rs becomes the rules in force
 * with generation @gen, keeping the counters of unchanged rules; the
 * publish hook is not called. @return the ruleset it replaces, for
 * dlb_rules_retire once @rs is published. Main thread.
 */
struct dlb_ruleset *dlb_rules_stage_take(struct dlb_ruleset *rs, uint64_t gen);
/** Retire @old (from dlb_rules_stage_take) through @rt. Main thread. */
void dlb_rules_retire(struct dlb_ruleset *old, struct dlb_rcu_thread *rt);

/**
 * Housekeeping of the published rules, every second (main thread): idle
 * subnets of the MaxQPSIPRule tables are reclaimed (each table throttles
 * itself to its cleanupDelay). @now: the workers' loop clock.
 */
void dlb_rules_maintenance(double now);

/** Drop every chain (shutdown; no worker may run). */
void dlb_rules_shutdown(void);

struct dlb_stats;

/**
 * Walk the query chain: each matching rule's counter is bumped and its action
 * run; the first stopping action decides. Counters: rule-drop, rule-nxdomain,
 * rule-refused, rule-servfail, rule-truncated, self-answered, lua-errors.
 * @return DLB_R_FORWARD (no rule stopped it, or Allow/Pool/NoRecurse: forward
 * to dq->pool), DLB_R_DROP, DLB_R_ANSWER (dq->pkt/len hold the answer) or
 * DLB_R_SERVFAIL (the caller answers SERVFAIL).
 */
enum dlb_verdict_r dlb_rules_run_query(const struct dlb_chain *c, struct dlb_dq *dq,
				       struct dlb_stats *st);

/**
 * Walk a response chain over dq->pkt (a response): @return DLB_R_FORWARD
 * (send it; TTLs or records may have been edited and dq->len shortened),
 * DLB_R_DROP (do not send), DLB_R_SERVFAIL (send SERVFAIL instead).
 */
enum dlb_verdict_r dlb_rules_run_response(const struct dlb_chain *c, struct dlb_dq *dq,
					  struct dlb_stats *st);

/* ---- the Lua leaf interface (implemented by lua/worker.c) ------------------ */

/*
 * LuaRule, LuaAction and LuaResponseAction keep the number of their Lua
 * function (u.lua.fn, in creation order; see docs/lua.md) and where it was
 * defined (u.lua.src, "file:line"), and run it in the calling worker's own
 * state dq->lua. These return -1 on a Lua error (counted by the caller).
 */

/**
 * Run Lua policy function @fn (newServerPolicy, setServerPolicyLua) as
 * f(servers, dq), servers being @pool's members in order. It returns a
 * Server, its 1-based position, or nil.
 * @return the chosen backend's index, -2 for "none" (nil, or a server not in
 * the pool), -1 on error (logged).
 */
int dlb_luaw_policy(struct dlb_lua_worker *lw, int fn, const char *src, const struct dlb_pool *pool,
		    struct dlb_dq *dq);

/** LuaRule: 1 match, 0 no match, -1 error. */
int dlb_luaw_rule(struct dlb_lua_worker *lw, int fn, const char *src, struct dlb_dq *dq);

/**
 * setQueryCountFilter's function: f(dq) returns (count, name), a boolean and
 * a string (or a number, converted). @return 1 (count @name: NUL-terminated
 * in @out, its length in *@outlen; longer than @outsz-1: -1), 0 (do not
 * count), or -1 on an error or other values (dnsdist then drops the query).
 */
int dlb_luaw_qcount_filter(struct dlb_lua_worker *lw, int fn, struct dlb_dq *dq, char *out,
			   size_t outsz, size_t *outlen);

/**
 * LuaAction / LuaResponseAction: the DNSAction (or DNSResponseAction) value
 * the function returned, its optional string in @arg (NUL-terminated,
 * truncated to @argsz-1, its length in *@arglen: SpoofPacket's may hold
 * NULs), or -1 on error. Changes the function made through dq
 * methods (tags, header bits, skipCache, pool, dq:spoof, setContent) are
 * already applied to @dq.
 */
int dlb_luaw_action(struct dlb_lua_worker *lw, int fn, const char *src, struct dlb_dq *dq,
		    bool response, char *arg, size_t argsz, size_t *arglen);

/* dnsdist 1.7's DNSAction::Action values (lua/conf.c exports the same table) */
enum dlb_dnsaction {
	DLB_DA_DROP = 0, DLB_DA_NXDOMAIN, DLB_DA_REFUSED, DLB_DA_SPOOF, DLB_DA_ALLOW,
	DLB_DA_HEADER_MODIFY, DLB_DA_POOL, DLB_DA_DELAY, DLB_DA_TRUNCATE, DLB_DA_SERVFAIL,
	DLB_DA_NONE, DLB_DA_NOOP, DLB_DA_NO_RECURSE, DLB_DA_SPOOF_RAW, DLB_DA_SPOOF_PACKET,
	DLB_DA_SET_TAG,
};

/* dnsdist 1.7's DNSResponseAction::Action values */
enum dlb_dnsresponseaction {
	DLB_DRA_ALLOW = 0, DLB_DRA_DELAY, DLB_DRA_DROP, DLB_DRA_HEADER_MODIFY, DLB_DRA_SERVFAIL,
	DLB_DRA_NONE,
};

#endif
