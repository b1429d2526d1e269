/*
 * config.c - the configuration structure: defaults, backends, pools,
 * listeners and the ACL.
 *
 * Thread: main only, except what config.h marks atomic.
 *
 * Pools never reallocate their member arrays: each one is sized for
 * DLB_MAX_BACKENDS pointers when the pool is created, and membership changes
 * shift entries in place and publish the count with an atomic store. A worker
 * that reads a pool while the console changes it may see a member twice or
 * miss one for that one selection, but never freed memory, because backends
 * and pools live until dlb_config_free(). (Proper snapshots come with the
 * reload work, docs/architecture.md#memory-reclamation.) Packet caches follow the same rule: a
 * pool's cache pointer may change at runtime, but every cache ever created
 * stays in cfg->caches until dlb_config_free().
 */
#include "dnslb/core/config.h"
#include "dnslb/core/doh_cfg.h"
#include "dnslb/core/tls.h"

#include <arpa/inet.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dnslb/core/cache.h"
#include "dnslb/core/hash.h"
#include "dnslb/core/log.h"
#include "dnslb/core/rcu.h"
#include "dnslb/core/util.h"

/* a.root-servers.net. in wire form: dnsdist's default health-check name */
static const uint8_t default_check_name[] = "\x01" "a" "\x0c" "root-servers" "\x03" "net";

static const char *const default_acl[] = {
	"10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
	"192.168.0.0/16", "::1/128", "fc00::/7", "fe80::/10",
};

const char *
dlb_config_policy_name(const struct dlb_config *cfg, int p)
{
	if (p >= DLB_POLICY_LUA && p < DLB_POLICY_LUA + cfg->set.nlua_policies)
		return cfg->set.lua_policies[p - DLB_POLICY_LUA].name;
	return dlb_policy_name((enum dlb_policy)p);
}

const char *
dlb_policy_name(enum dlb_policy p)
{
	switch (p) {
	case DLB_POLICY_LEAST_OUTSTANDING:
		return "leastOutstanding";
	case DLB_POLICY_FIRST_AVAILABLE:
		return "firstAvailable";
	case DLB_POLICY_ROUNDROBIN:
		return "roundrobin";
	case DLB_POLICY_WRANDOM:
		return "wrandom";
	case DLB_POLICY_WHASHED:
		return "whashed";
	case DLB_POLICY_CHASHED:
		return "chashed";
	case DLB_POLICY_LUA:
		return "lua";
	}
	return p > DLB_POLICY_LUA ? "lua" : "unknown";
}

void
dlb_config_default_acl(struct dlb_nmg *acl)
{
	dlb_nmg_clear(acl);
	for (size_t i = 0; i < sizeof(default_acl) / sizeof(default_acl[0]); i++) {
		struct dlb_netmask nm;

		if (dlb_netmask_parse(default_acl[i], &nm) == 0)
			dlb_nmg_add(acl, &nm);
	}
}

struct dlb_config *
dlb_config_new(void)
{
	struct dlb_config *cfg = calloc(1, sizeof(*cfg));

	if (cfg == NULL)
		return NULL;
	if (sodium_init() < 0) {
		free(cfg);
		return NULL;
	}
	dlb_nmg_init(&cfg->acl);
	dlb_config_default_acl(&cfg->acl);
	cfg->cache_opts = calloc(sizeof(cfg->caches) / sizeof(cfg->caches[0]),
				 sizeof(*cfg->cache_opts));
	if (cfg->acl.n == 0 || cfg->cache_opts == NULL || dlb_config_get_pool(cfg, "") == NULL) {
		dlb_config_free(cfg);
		return NULL;
	}

	cfg->workers = 0;
	cfg->set.policy = DLB_POLICY_LEAST_OUTSTANDING;
	cfg->set.udp_timeout_ms = 2000;
	cfg->set.max_udp_answer = 4096;
	cfg->max_udp_outstanding = 65535;
	cfg->set.selfans.add_edns = true;
	cfg->set.selfans.payload_size = 1232;
	cfg->set.tcp_recv_timeout = 2;
	cfg->set.tcp_send_timeout = 2;
	cfg->set.doh_max_idle_conns = 10;	/* dnsdist 1.7's DoH connection cache */
	cfg->set.doh_max_idle_time = 300;
	cfg->set.doh_cleanup_interval = 60;
	/* abuse limits (docs/abuse.md): dnsdist 2.0's defaults where it has the setting */
	cfg->tcp_conn_rate_interval = 5;
	cfg->tcp_ban_duration_rate = 10;
	cfg->max_tcp_read_ios_per_query = 50;
	cfg->tcp_ban_duration_read_ios = 60;
	cfg->tcp_conns_mask_v4 = 32;
	cfg->tcp_conns_mask_v6 = 128;
	cfg->tcp_overload_threshold = 90;
	cfg->max_tcp_out_bytes = 256 * 1024;
	cfg->oc_mask_v4 = 32;
	cfg->oc_mask_v6 = 64;
	cfg->max_tcp_client_threads = 10;
	cfg->udp_vector_size = DLB_UDP_BATCH;
	cfg->blocking_receive = true;
#ifdef DLB_RCU_TSAN
	/*
	 * ThreadSanitizer holds back a signal sent to a thread blocked in
	 * recvmmsg (not among its blocking interceptors) until the call returns.
	 * A parked worker is woken by such a signal (dlb_worker_wake), so it
	 * would sleep until the next datagram and a stop or a new listener
	 * would wait for traffic: under TSan workers wait in epoll instead.
	 */
	cfg->blocking_receive = false;
#endif
	cfg->set.cache_cleaning_delay = 60;
	cfg->set.cache_cleaning_pct = 100;
	cfg->set.failover_budget = 3.0;
	cfg->set.ecs_prefix_v4 = 24;
	cfg->set.ecs_prefix_v6 = 56;
	return cfg;
}

/* ---- publication (docs/architecture.md#publication) ------------------------ */

void
dlb_snapshot_free(struct dlb_snapshot *s)
{
	if (s == NULL)
		return;
	dlb_nmg_deinit(&s->acl);
	free(s->mbuf);
	free(s->wbuf);
	free(s);
}

/* Epoch callback: on the retiring (main) thread, in dlb_rcu_poll. */
static void
snapshot_reclaim(ck_epoch_entry_t *e)
{
	dlb_snapshot_free(container_of(e, struct dlb_snapshot, epoch));
}

/* A snapshot with room for @cap pool members and a copy of @acl. NULL on ENOMEM. */
static struct dlb_snapshot *
snapshot_new(struct dlb_config *cfg, const struct dlb_nmg *acl, int cap)
{
	struct dlb_snapshot *s = calloc(1, sizeof(*s));

	if (s == NULL)
		return NULL;
	dlb_nmg_init(&s->acl);
	s->live = cfg;
	s->cap = cap;
	s->mbuf = calloc(cap > 0 ? (size_t)cap : 1, sizeof(*s->mbuf));
	s->wbuf = calloc(cap > 0 ? (size_t)cap : 1, sizeof(*s->wbuf));
	if (s->mbuf == NULL || s->wbuf == NULL || dlb_nmg_copy(&s->acl, acl) != 0) {
		dlb_snapshot_free(s);
		return NULL;
	}
	return s;
}

/* Every pool's members (with their weights) and cache, from the builder's pools. */
static void
snapshot_fill_pools(struct dlb_snapshot *s, const struct dlb_config *cfg)
{
	int used = 0;

	s->npools = cfg->npools;
	for (int i = 0; i < cfg->npools; i++) {
		const struct dlb_pool *p = cfg->pools[i];
		struct dlb_pool_state *ps = &s->pools[i];
		int n = p->n <= s->cap - used ? p->n : s->cap - used;

		for (int k = 0; k < n; k++) {
			s->mbuf[used + k] = p->members[k];
			s->wbuf[used + k] = __atomic_load_n(&p->members[k]->weight, __ATOMIC_RELAXED);
		}
		ps->members = s->mbuf + used;
		ps->weights = s->wbuf + used;
		ps->n = n;
		ps->cache = p->cache;
		used += n;
	}
}

struct dlb_snapshot *
dlb_snapshot_build(struct dlb_config *cfg)
{
	struct dlb_snapshot *s;
	int cap = 0;

	for (int i = 0; i < cfg->npools; i++)
		cap += cfg->pools[i]->n;
	s = snapshot_new(cfg, &cfg->acl, cap);
	if (s == NULL)
		return NULL;
	s->set = cfg->set;
	s->rules = cfg->rules;
	snapshot_fill_pools(s, cfg);
	for (int i = 0; i < cfg->npools; i++)
		s->pools[i].policy = cfg->pools[i]->policy;
	return s;
}

const struct dlb_pool *
dlb_snapshot_find_pool(const struct dlb_snapshot *s, const char *name)
{
	for (int i = 0; i < s->npools; i++)
		if (strcmp(s->live->pools[i]->name, name) == 0)
			return s->live->pools[i];
	return NULL;
}

void
dlb_snapshot_publish(struct dlb_config *cfg, struct dlb_snapshot *s, struct dlb_rcu_thread *rt)
{
	struct dlb_snapshot *prev = cfg->snap;

	s->gen = prev != NULL ? prev->gen + 1 : 1;
	__atomic_store_n(&cfg->snap, s, __ATOMIC_RELEASE);
	if (prev == NULL)
		return;
	if (rt != NULL)
		dlb_rcu_defer(rt, &prev->epoch, snapshot_reclaim);
	else
		dlb_snapshot_free(prev);
}

int
dlb_config_publish(struct dlb_config *cfg, struct dlb_rcu_thread *rt)
{
	struct dlb_snapshot *s = dlb_snapshot_build(cfg);

	if (s == NULL)
		return -1;
	dlb_snapshot_publish(cfg, s, rt);
	return 0;
}

/* ---- reloads: prepare, then adopt (docs/architecture.md#publication) ------ */

/* Policy @p of a reload's file, numbered in the running ring from @base. */
static int
adopt_policy(int p, int base)
{
	if (p < DLB_POLICY_LUA)
		return p;
	return DLB_POLICY_LUA + (base + (p - DLB_POLICY_LUA)) % DLB_MAX_LUA_POLICIES;
}

/* @ncfg's new caches into @cfg, and every pool it names. @return 0, or -1 with @err. */
static int
adopt_caches_pools(struct dlb_config *cfg, const struct dlb_config *ncfg,
		   struct dlb_reload_plan *plan, char *err, size_t errlen)
{
	const int max = (int)(sizeof(cfg->caches) / sizeof(cfg->caches[0]));

	for (int k = 0; k < ncfg->ncaches; k++) {
		struct dlb_cache *c;

		if (plan->cache_map[k] >= 0)
			continue;
		if (cfg->ncaches >= max) {
			snprintf(err, errlen, "too many packet caches created by reloads (at most %d "
				 "in a process): restart dnslb", max);
			return -1;
		}
		c = dlb_cache_new(&ncfg->cache_opts[k]);
		if (c == NULL) {
			snprintf(err, errlen, "cannot create a packet cache of %u entries (out of "
				 "memory)", ncfg->cache_opts[k].max_entries);
			return -1;
		}
		cfg->cache_opts[cfg->ncaches] = ncfg->cache_opts[k];
		cfg->caches[cfg->ncaches] = c;
		plan->cache_map[k] = cfg->ncaches;
		__atomic_store_n(&cfg->ncaches, cfg->ncaches + 1, __ATOMIC_RELEASE);
	}
	for (int i = 0; i < ncfg->npools; i++) {
		if (dlb_config_get_pool(cfg, ncfg->pools[i]->name) == NULL) {
			snprintf(err, errlen, "too many pools (at most %d)", DLB_MAX_POOLS);
			return -1;
		}
	}
	return 0;
}

struct dlb_snapshot *
dlb_config_adopt_prepare(struct dlb_config *cfg, const struct dlb_config *ncfg,
			 struct dlb_reload_plan *plan, char *err, size_t errlen)
{
	int base = cfg->lua_policy_next, n = ncfg->set.nlua_policies, cap = 0;
	struct dlb_snapshot *s;

	if (n > DLB_MAX_LUA_POLICIES / 2) {
		snprintf(err, errlen, "too many Lua policies for a reload (at most %d)",
			 DLB_MAX_LUA_POLICIES / 2);
		return NULL;
	}
	if (adopt_caches_pools(cfg, ncfg, plan, err, errlen) != 0)
		return NULL;
	/* after dlb_config_adopt, each pool has the members its namesake in the
	 * file has (dlb_config_adopt fills them in) */
	for (int i = 0; i < ncfg->npools; i++)
		cap += ncfg->pools[i]->n;
	s = snapshot_new(cfg, &ncfg->acl, cap);
	if (s == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->set = ncfg->set;
	s->rules = cfg->rules;	/* the reload's own, once staged (the caller sets them) */
	/* the running generation's Lua policies stay where they are */
	memcpy(s->set.lua_policies, cfg->set.lua_policies, sizeof(s->set.lua_policies));
	for (int i = 0; i < n; i++)
		s->set.lua_policies[(base + i) % DLB_MAX_LUA_POLICIES] = ncfg->set.lua_policies[i];
	s->set.nlua_policies = cfg->set.nlua_policies;
	if (base + n > s->set.nlua_policies)
		s->set.nlua_policies = base + n < DLB_MAX_LUA_POLICIES ? base + n
								       : DLB_MAX_LUA_POLICIES;
	s->set.policy = adopt_policy(ncfg->set.policy, base);
	/* pools by name; those the file no longer has fall back to the global policy */
	s->npools = cfg->npools;
	for (int i = 0; i < cfg->npools; i++) {
		const struct dlb_pool *np = dlb_config_find_pool(ncfg, cfg->pools[i]->name);

		s->pools[i].policy = np != NULL && np->policy >= 0 ? adopt_policy(np->policy, base)
								   : -1;
	}
	return s;
}

static bool
pool_has(const struct dlb_pool *p, const struct dlb_backend *be)
{
	for (int i = 0; p != NULL && i < p->n; i++)
		if (p->members[i] == be)
			return true;
	return false;
}

/* Servers, pools and caches of @ncfg into the running @cfg (see dlb_config_adopt). */
static void
adopt_structure(struct dlb_config *cfg, const struct dlb_config *ncfg,
		const struct dlb_reload_plan *plan, struct dlb_rcu_thread *rt)
{
	bool kept[DLB_MAX_BACKENDS] = { false };

	for (int j = 0; j < ncfg->nbackends; j++) {
		const struct dlb_backend *nb = ncfg->backends[j];
		struct dlb_backend *be = cfg->backends[plan->be_map[j]];

		kept[be->index] = true;
		dlb_config_update_backend(be, nb);
		/* pools: those the file puts it in (the default one included) */
		for (int i = 0; i < cfg->npools; i++) {
			const char *name = cfg->pools[i]->name;

			if (!pool_has(dlb_config_find_pool(ncfg, name), nb))
				dlb_config_pool_remove(cfg, name, be);
		}
		for (int i = 0; i < ncfg->npools; i++)
			if (pool_has(ncfg->pools[i], nb))
				dlb_config_pool_add(cfg, ncfg->pools[i]->name, be);
	}
	for (int i = 0; i < cfg->nbackends; i++)
		if (!kept[i] && !cfg->backends[i]->removed) {
			dlb_info("Reload: downstream server %s is no longer configured: it takes "
				 "no more queries", cfg->backends[i]->name);
			dlb_config_retire_backend(cfg, cfg->backends[i]);
		}
	dlb_config_resort_pools(cfg);
	for (int i = 0; i < cfg->npools; i++) {
		const struct dlb_pool *np = dlb_config_find_pool(ncfg, cfg->pools[i]->name);
		struct dlb_cache *c = NULL;

		for (int k = 0; np != NULL && np->cache != NULL && k < ncfg->ncaches; k++)
			if (ncfg->caches[k] == np->cache)
				c = cfg->caches[plan->cache_map[k]];
		__atomic_store_n(&cfg->pools[i]->cache, c, __ATOMIC_RELEASE);
	}
	if (dlb_config_build_rings(cfg, rt) != 0)
		dlb_err("out of memory rebuilding the consistent-hashing rings");
}

void
dlb_config_adopt(struct dlb_config *cfg, struct dlb_config *ncfg,
		 const struct dlb_reload_plan *plan, struct dlb_snapshot *s,
		 struct dlb_rcu_thread *rt)
{
	struct dlb_nmg acl = cfg->acl;

	/* the builder values first: the rings hash with set.whashed_perturbation */
	cfg->set = s->set;
	cfg->lua_policy_next = (cfg->lua_policy_next + ncfg->set.nlua_policies) %
			       DLB_MAX_LUA_POLICIES;
	for (int i = 0; i < s->npools; i++)
		cfg->pools[i]->policy = s->pools[i].policy;
	cfg->acl = ncfg->acl;
	ncfg->acl = acl;
	cfg->rules = s->rules;
	adopt_structure(cfg, ncfg, plan, rt);
	snapshot_fill_pools(s, cfg);
	dlb_snapshot_publish(cfg, s, rt);
}

void
dlb_config_free(struct dlb_config *cfg)
{
	if (cfg == NULL)
		return;
	for (int i = 0; i < cfg->nbackends; i++)
		dlb_backend_free(cfg->backends[i]);
	for (int i = 0; i < cfg->nfrontends; i++)
	{
		dlb_tls_server_free(cfg->frontends[i].tls);
		dlb_doh_cfg_free(cfg->frontends[i].doh);
	}
	for (int i = 0; i < cfg->npools; i++) {
		free(cfg->pools[i]->members);
		free(cfg->pools[i]->ring);
		free(cfg->pools[i]);
	}
	/* caches last: pools point at them, and they are never freed earlier */
	for (int i = 0; i < cfg->ncaches; i++)
		dlb_cache_free(cfg->caches[i]);
	dlb_snapshot_free(cfg->snap);
	dlb_nmg_deinit(&cfg->acl);
	free(cfg->cache_opts);
	free(cfg);
}

void
dlb_backend_free(struct dlb_backend *be)
{
	if (be == NULL)
		return;
	dlb_tls_client_free(be->tls);
	free(be);
}

struct dlb_backend *
dlb_backend_new(void)
{
	struct dlb_backend *be = calloc(1, sizeof(*be));

	if (be == NULL)
		return NULL;
	if (sodium_init() < 0) {
		free(be);
		return NULL;
	}
	be->index = -1;
	dlb_uuid_v4(be->uuid, sizeof(be->uuid));
	be->order = 1;
	be->weight = 1;
	memcpy(be->check_name, default_check_name, sizeof(default_check_name));
	be->check_name_len = (int)sizeof(default_check_name);
	be->check_type = 1;	/* A */
	be->check_class = 1;	/* IN */
	be->check_interval = 1;
	be->check_timeout = 1000;
	be->max_check_failures = 1;
	be->rise = 1;
	be->lazy_sample_size = 100;
	be->lazy_min_samples = 1;
	be->lazy_threshold = 20;
	be->lazy_failed_interval = 30;
	be->lazy_max_backoff = 3600;
	be->sockets = 1;
	be->retries = 5;
	be->tcp_connect_timeout = 5;
	be->tcp_send_timeout = 30;
	be->tcp_recv_timeout = 30;
	be->max_in_flight = 1;
	be->admin = DLB_BE_AUTO;
	be->healthy = 1;
	return be;
}

struct dlb_pool *
dlb_config_find_pool(const struct dlb_config *cfg, const char *name)
{
	for (int i = 0; i < cfg->npools; i++)
		if (strcmp(cfg->pools[i]->name, name) == 0)
			return cfg->pools[i];
	return NULL;
}

struct dlb_pool *
dlb_config_get_pool(struct dlb_config *cfg, const char *name)
{
	struct dlb_pool *p = dlb_config_find_pool(cfg, name);

	if (p != NULL)
		return p;
	if (cfg->npools >= DLB_MAX_POOLS || strlen(name) >= sizeof(p->name))
		return NULL;
	p = calloc(1, sizeof(*p));
	if (p == NULL)
		return NULL;
	p->members = calloc(DLB_MAX_BACKENDS, sizeof(*p->members));
	if (p->members == NULL) {
		free(p);
		return NULL;
	}
	snprintf(p->name, sizeof(p->name), "%s", name);
	p->policy = -1;
	p->index = cfg->npools;
	cfg->pools[cfg->npools++] = p;
	return p;
}

/* Member order: (order, index), what firstAvailable and the tie-breaks walk. */
static bool
member_before(const struct dlb_backend *a, const struct dlb_backend *b)
{
	if (a->order != b->order)
		return a->order < b->order;
	return a->index < b->index;
}

static int
pool_member_pos(const struct dlb_pool *p, const struct dlb_backend *be)
{
	for (int i = 0; i < p->n; i++)
		if (p->members[i] == be)
			return i;
	return -1;
}

/* Insert @be at its sorted place. @return 0, or -1 when the pool is full. */
static int
pool_insert_member(struct dlb_pool *p, struct dlb_backend *be)
{
	int pos;

	if (pool_member_pos(p, be) >= 0)
		return 0;
	if (p->n >= DLB_MAX_BACKENDS)
		return -1;
	for (pos = p->n; pos > 0 && member_before(be, p->members[pos - 1]); pos--)
		p->members[pos] = p->members[pos - 1];
	p->members[pos] = be;
	if (be->use_ecs)
		__atomic_store_n(&p->necs, p->necs + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&p->n, p->n + 1, __ATOMIC_RELEASE);
	return 0;
}

static void
pool_remove_member(struct dlb_pool *p, const struct dlb_backend *be)
{
	int pos = pool_member_pos(p, be);

	if (pos < 0)
		return;
	if (be->use_ecs)
		__atomic_store_n(&p->necs, p->necs - 1, __ATOMIC_RELAXED);
	__atomic_store_n(&p->n, p->n - 1, __ATOMIC_RELEASE);
	for (int i = pos; i < p->n; i++)
		p->members[i] = p->members[i + 1];
	p->members[p->n] = NULL;
}

static bool
backend_has_pool(const struct dlb_backend *be, const char *name)
{
	for (int i = 0; i < be->npools; i++)
		if (strcmp(be->pools[i], name) == 0)
			return true;
	return false;
}

int
dlb_config_pool_add(struct dlb_config *cfg, const char *name, struct dlb_backend *be)
{
	struct dlb_pool *p;

	/* The default pool is implied by an empty list, never recorded in be->pools. */
	if (name[0] != '\0' && !backend_has_pool(be, name)) {
		if (be->npools >= DLB_MAX_POOLS_PER_BACKEND ||
		    strlen(name) >= sizeof(be->pools[0]))
			return -1;
	}
	p = dlb_config_get_pool(cfg, name);
	if (p == NULL || pool_insert_member(p, be) != 0)
		return -1;
	if (name[0] != '\0' && !backend_has_pool(be, name))
		snprintf(be->pools[be->npools++], sizeof(be->pools[0]), "%s", name);
	return 0;
}

void
dlb_config_pool_remove(struct dlb_config *cfg, const char *name, struct dlb_backend *be)
{
	struct dlb_pool *p = dlb_config_find_pool(cfg, name);

	if (p != NULL)
		pool_remove_member(p, be);
	for (int i = 0; i < be->npools; i++) {
		if (strcmp(be->pools[i], name) != 0)
			continue;
		for (int j = i; j + 1 < be->npools; j++)
			memcpy(be->pools[j], be->pools[j + 1], sizeof(be->pools[0]));
		be->npools--;
		break;
	}
}

void
dlb_config_resort_pools(struct dlb_config *cfg)
{
	for (int i = 0; i < cfg->npools; i++) {
		struct dlb_pool *p = cfg->pools[i];

		/* insertion sort in place: pools are small and nearly sorted */
		for (int j = 1; j < p->n; j++) {
			struct dlb_backend *be = p->members[j];
			int k;

			for (k = j; k > 0 && member_before(be, p->members[k - 1]); k--)
				p->members[k] = p->members[k - 1];
			p->members[k] = be;
		}
	}
}

int
dlb_config_append_backend(struct dlb_config *cfg, struct dlb_backend *be)
{
	if (cfg->nbackends >= DLB_MAX_BACKENDS)
		return -1;
	/* Every pool must exist (or be creatable) before anything is attached. */
	for (int i = 0; i < be->npools; i++)
		if (dlb_config_get_pool(cfg, be->pools[i]) == NULL)
			return -1;
	if (be->npools == 0 && dlb_config_get_pool(cfg, "") == NULL)
		return -1;

	if (be->addr_text[0] == '\0')
		dlb_sockaddr_format((const struct sockaddr *)&be->addr, be->addr_text,
				    sizeof(be->addr_text));
	if (be->name[0] == '\0')
		snprintf(be->name, sizeof(be->name), "%s", be->addr_text);
	be->index = cfg->nbackends;
	be->list_order = be->order;
	cfg->backends[cfg->nbackends] = be;
	/* workers running: they see the slot filled before the count */
	__atomic_store_n(&cfg->nbackends, cfg->nbackends + 1, __ATOMIC_RELEASE);
	return 0;
}

int
dlb_config_attach_backend(struct dlb_config *cfg, struct dlb_backend *be)
{
	if (be->npools == 0)
		return pool_insert_member(dlb_config_get_pool(cfg, ""), be);
	for (int i = 0; i < be->npools; i++) {
		struct dlb_pool *p = dlb_config_get_pool(cfg, be->pools[i]);

		if (p == NULL || pool_insert_member(p, be) != 0)
			return -1;
	}
	return 0;
}

int
dlb_config_backend_at(const struct dlb_config *cfg, int pos)
{
	int n = __atomic_load_n(&cfg->nbackends, __ATOMIC_ACQUIRE);

	if (pos < 0 || pos >= n)
		return -1;
	/* rank of each server: those of a lower order, then those of the same
	 * order added before it (n is at most DLB_MAX_BACKENDS) */
	for (int i = 0; i < n; i++) {
		int rank = 0;

		for (int k = 0; k < n; k++)
			if (cfg->backends[k]->list_order < cfg->backends[i]->list_order ||
			    (cfg->backends[k]->list_order == cfg->backends[i]->list_order && k < i))
				rank++;
		if (rank == pos)
			return i;
	}
	return -1;
}

int
dlb_config_add_backend(struct dlb_config *cfg, struct dlb_backend *be)
{
	if (dlb_config_append_backend(cfg, be) != 0)
		return -1;
	return dlb_config_attach_backend(cfg, be);
}

int
dlb_config_remove_backend(struct dlb_config *cfg, int idx)
{
	struct dlb_backend *be;

	if (idx < 0 || idx >= cfg->nbackends)
		return -1;
	be = cfg->backends[idx];
	for (int i = 0; i < cfg->npools; i++)
		pool_remove_member(cfg->pools[i], be);
	for (int i = idx; i + 1 < cfg->nbackends; i++) {
		cfg->backends[i] = cfg->backends[i + 1];
		cfg->backends[i]->index = i;
	}
	cfg->nbackends--;
	cfg->backends[cfg->nbackends] = NULL;
	dlb_backend_free(be);
	return 0;
}

/* Merge the options of a repeated listener into the existing one. */
static void
frontend_merge(struct dlb_frontend_cfg *dst, const struct dlb_frontend_cfg *src)
{
	dst->reuseport = dst->reuseport || src->reuseport;
	if (src->tcp_fastopen_qsize != 0)
		dst->tcp_fastopen_qsize = src->tcp_fastopen_qsize;
	if (src->tcp_listen_qsize != 0)
		dst->tcp_listen_qsize = src->tcp_listen_qsize;
	if (src->iface[0] != '\0')
		memcpy(dst->iface, src->iface, sizeof(dst->iface));
	if (src->max_in_flight != 0)
		dst->max_in_flight = src->max_in_flight;
	if (src->max_concurrent_tcp != 0)
		dst->max_concurrent_tcp = src->max_concurrent_tcp;
	for (int i = 0; i < src->ncpus; i++) {
		bool seen = false;

		for (int j = 0; j < dst->ncpus; j++)
			seen = seen || dst->cpus[j] == src->cpus[i];
		if (!seen && dst->ncpus < DLB_MAX_CPUS)
			dst->cpus[dst->ncpus++] = src->cpus[i];
	}
}

int
dlb_config_add_frontend(struct dlb_config *cfg, const struct dlb_frontend_cfg *fe)
{
	struct dlb_frontend_cfg *nf;

	for (int i = 0; i < cfg->nfrontends; i++) {
		if (dlb_sockaddr_equal((const struct sockaddr *)&cfg->frontends[i].addr,
				       (const struct sockaddr *)&fe->addr)) {
			if (dlb_frontend_stream_only(&cfg->frontends[i]) || dlb_frontend_stream_only(fe))
				return -2;	/* a DoT or DoH listener shares its address with nothing */
			frontend_merge(&cfg->frontends[i], fe);
			return 0;
		}
	}
	if (cfg->nfrontends >= DLB_MAX_FRONTENDS)
		return -1;
	nf = &cfg->frontends[cfg->nfrontends++];
	*nf = *fe;
	if (nf->text[0] == '\0')
		dlb_sockaddr_format((const struct sockaddr *)&nf->addr, nf->text, sizeof(nf->text));
	return 0;
}

uint32_t
dlb_name_hash_seeded(const uint8_t *lc, size_t len, uint32_t seed)
{
	/* FNV-1a: stable across restarts and machines, unlike the keyed hashes */
	return dlb_fnv1a32(lc, len, DLB_FNV1A32_INIT ^ seed);
}

#define BURTLE_MIX(a, b, c) do {						\
	a -= b; a -= c; a ^= (c >> 13);					\
	b -= c; b -= a; b ^= (a << 8);					\
	c -= a; c -= b; c ^= (b >> 13);					\
	a -= b; a -= c; a ^= (c >> 12);					\
	b -= c; b -= a; b ^= (a << 16);					\
	c -= a; c -= b; c ^= (b >> 5);					\
	a -= b; a -= c; a ^= (c >> 3);					\
	b -= c; b -= a; b ^= (a << 10);					\
	c -= a; c -= b; c ^= (b >> 15);					\
} while (0)

static inline uint32_t
lc8(const uint8_t *k, size_t i)
{
	uint8_t c = k[i];

	return c >= 'A' && c <= 'Z' ? (uint32_t)(c + 32) : c;
}

uint32_t
dlb_burtle_ci(const void *key, size_t length, uint32_t init)
{
	const uint8_t *k = key;
	uint32_t a = 0x9e3779b9u, b = 0x9e3779b9u, c = init;
	size_t len = length;

	while (len >= 12) {
		a += lc8(k, 0) + (lc8(k, 1) << 8) + (lc8(k, 2) << 16) + (lc8(k, 3) << 24);
		b += lc8(k, 4) + (lc8(k, 5) << 8) + (lc8(k, 6) << 16) + (lc8(k, 7) << 24);
		c += lc8(k, 8) + (lc8(k, 9) << 8) + (lc8(k, 10) << 16) + (lc8(k, 11) << 24);
		BURTLE_MIX(a, b, c);
		k += 12;
		len -= 12;
	}
	c += (uint32_t)length;
	/* the last 11 bytes; the first byte of c is the length's */
	switch (len) {
	case 11: c += lc8(k, 10) << 24;		/* FALLTHROUGH */
	case 10: c += lc8(k, 9) << 16;		/* FALLTHROUGH */
	case 9: c += lc8(k, 8) << 8;		/* FALLTHROUGH */
	case 8: b += lc8(k, 7) << 24;		/* FALLTHROUGH */
	case 7: b += lc8(k, 6) << 16;		/* FALLTHROUGH */
	case 6: b += lc8(k, 5) << 8;		/* FALLTHROUGH */
	case 5: b += lc8(k, 4);			/* FALLTHROUGH */
	case 4: a += lc8(k, 3) << 24;		/* FALLTHROUGH */
	case 3: a += lc8(k, 2) << 16;		/* FALLTHROUGH */
	case 2: a += lc8(k, 1) << 8;		/* FALLTHROUGH */
	case 1: a += lc8(k, 0);			/* FALLTHROUGH */
	default: break;
	}
	BURTLE_MIX(a, b, c);
	return c;
}

static int
cmp_points(const void *a, const void *b)
{
	const struct dlb_ch_point *x = a, *y = b;

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	/* equal hashes: order by backend so the ring is deterministic */
	return x->be->index - y->be->index;
}

static void
ring_reclaim(ck_epoch_entry_t *e)
{
	free(container_of(e, struct dlb_ch_ring, epoch));
}

/* @pool's ring from its current members. @return 0 (*out NULL: no points) or -1. */
/* The points of a server of @weight on a ring of pool weight @total (ring_build). */
static size_t
ring_points(int weight, uint64_t total)
{
	uint64_t v;

	if (total <= DLB_CH_MAX_POINTS)
		return (size_t)weight;
	v = (uint64_t)weight * DLB_CH_MAX_POINTS / total;
	return v > 0 ? (size_t)v : 1;
}

static int
ring_build(const struct dlb_pool *p, uint32_t seed, struct dlb_ch_ring **out)
{
	struct dlb_ch_ring *r;
	size_t n = 0, k = 0;
	uint64_t total = 0;

	*out = NULL;
	for (int j = 0; j < p->n; j++)
		total += (uint64_t)p->members[j]->weight;
	if (total == 0)
		return 0;
	/*
	 * Any weight up to 2^31 - 1 is valid (dnsdist takes it). Past
	 * DLB_CH_MAX_POINTS in a pool, each server gets points in proportion to
	 * its weight (at least one), so the ring keeps the weights' shares in a
	 * bounded size instead of a point per unit of weight.
	 */
	for (int j = 0; j < p->n; j++)
		n += ring_points(p->members[j]->weight, total);
	r = malloc(sizeof(*r) + n * sizeof(r->p[0]));
	if (r == NULL)
		return -1;
	for (int j = 0; j < p->n; j++) {
		struct dlb_backend *be = p->members[j];
		size_t points = ring_points(be->weight, total);

		/* dnsdist's points: the hashes of "<id>-<weight>" ... "<id>-1" */
		for (size_t w = points; w > 0; w--) {
			char id[sizeof(be->uuid) + 24];
			int len = snprintf(id, sizeof(id), "%s-%zu", be->uuid, w);

			r->p[k].hash = dlb_burtle_ci(id, (size_t)len, seed);
			r->p[k].be = be;
			k++;
		}
	}
	qsort(r->p, k, sizeof(r->p[0]), cmp_points);
	r->n = (int)k;
	*out = r;
	return 0;
}

int
dlb_config_build_rings(struct dlb_config *cfg, struct dlb_rcu_thread *rt)
{
	int rc = 0;

	for (int i = 0; i < cfg->npools; i++) {
		struct dlb_pool *p = cfg->pools[i];
		struct dlb_ch_ring *r, *prev;

		if (ring_build(p, cfg->set.whashed_perturbation, &r) != 0) {
			rc = -1;
			continue;
		}
		prev = __atomic_exchange_n(&p->ring, r, __ATOMIC_ACQ_REL);
		if (prev == NULL)
			continue;
		if (rt != NULL)
			dlb_rcu_defer(rt, &prev->epoch, ring_reclaim);
		else
			free(prev);
	}
	return rc;
}

static bool
sockaddr_same(const struct sockaddr_storage *a, socklen_t al, const struct sockaddr_storage *b,
	      socklen_t bl)
{
	return al == bl && (al == 0 || dlb_sockaddr_equal((const struct sockaddr *)a,
							  (const struct sockaddr *)b));
}

/* What a running server cannot change in place: a different one if these differ. */
static bool
backend_same_transport(const struct dlb_backend *a, const struct dlb_backend *b)
{
	if (b->id_given && strcasecmp(a->uuid, b->uuid) != 0)
		return false;
	return sockaddr_same(&a->addr, a->addrlen, &b->addr, b->addrlen) &&
	       sockaddr_same(&a->source, a->sourcelen, &b->source, b->sourcelen) &&
	       strcmp(a->name, b->name) == 0 && strcmp(a->source_iface, b->source_iface) == 0 &&
	       a->lazy == b->lazy && a->use_ecs == b->use_ecs &&
	       a->use_proxy_protocol == b->use_proxy_protocol && a->sockets == b->sockets &&
	       a->tcp_only == b->tcp_only && a->udp_timeout_ms == b->udp_timeout_ms &&
	       a->retries == b->retries && a->tcp_connect_timeout == b->tcp_connect_timeout &&
	       a->tcp_send_timeout == b->tcp_send_timeout &&
	       a->tcp_recv_timeout == b->tcp_recv_timeout && a->max_in_flight == b->max_in_flight &&
	       dlb_tls_client_same_opts(a->tls, b->tls) &&
	       strcmp(a->tls_subject_name, b->tls_subject_name) == 0 &&
	       strcmp(a->tls_subject_addr, b->tls_subject_addr) == 0 &&
	       strcmp(a->doh_path, b->doh_path) == 0 && a->doh_xff == b->doh_xff;
}

bool
dlb_cache_opts_same(const struct dlb_cache_opts *x, const struct dlb_cache_opts *y)
{
	return x->max_entries == y->max_entries && x->max_bytes == y->max_bytes &&
	       x->max_ttl == y->max_ttl && x->min_ttl == y->min_ttl &&
	       x->temp_failure_ttl == y->temp_failure_ttl &&
	       x->max_negative_ttl == y->max_negative_ttl && x->stale_ttl == y->stale_ttl &&
	       x->dont_age == y->dont_age && x->shards == y->shards &&
	       x->keep_stale_data == y->keep_stale_data && x->parse_ecs == y->parse_ecs &&
	       x->cookie_hashing == y->cookie_hashing && x->nskip == y->nskip &&
	       memcmp(x->skip_options, y->skip_options,
		      (size_t)x->nskip * sizeof(x->skip_options[0])) == 0 &&
	       x->maximum_entry_size == y->maximum_entry_size && x->nranks == y->nranks &&
	       memcmp(x->payload_ranks, y->payload_ranks,
		      (size_t)x->nranks * sizeof(x->payload_ranks[0])) == 0 &&
	       x->prefetch == y->prefetch && x->l2 == y->l2 && x->l2_budget == y->l2_budget &&
	       x->l2_max_in_flight == y->l2_max_in_flight &&
	       strcmp(x->l2_name, y->l2_name) == 0;
}

const char *
dlb_config_plan_reload(const struct dlb_config *a, const struct dlb_config *b,
		       struct dlb_reload_plan *plan)
{
	bool taken[DLB_MAX_POOLS * 2 > DLB_MAX_BACKENDS ? DLB_MAX_POOLS * 2 : DLB_MAX_BACKENDS];
	int nnew = 0;

	/* listeners: by address (addLocal merges repeats, so each is there once) */
	for (int j = 0; j < b->nfrontends; j++) {
		plan->fe_map[j] = -1;
		for (int i = 0; i < a->nfrontends; i++)
			if (sockaddr_same(&a->frontends[i].addr, a->frontends[i].addrlen,
					  &b->frontends[j].addr, b->frontends[j].addrlen))
				plan->fe_map[j] = i;
		nnew += plan->fe_map[j] < 0;
	}
	if (a->nfrontends + nnew > DLB_MAX_FRONTENDS)
		return "too many listeners over the life of the process (restart dnslb)";
	/* DNS over TLS and HTTPS listeners: kept as they are (their certificates
	 * are reloaded), or changed by a restart */
	for (int j = 0; j < b->nfrontends; j++) {
		const struct dlb_frontend_cfg *n = &b->frontends[j];
		const struct dlb_frontend_cfg *o = plan->fe_map[j] >= 0 ?
						   &a->frontends[plan->fe_map[j]] : NULL;

		if (!dlb_frontend_stream_only(n) && (o == NULL || !dlb_frontend_stream_only(o)))
			continue;
		if (o == NULL || !dlb_frontend_stream_only(o) || !dlb_frontend_stream_only(n) ||
		    (o->tls == NULL) != (n->tls == NULL) || (o->doh == NULL) != (n->doh == NULL) ||
		    __atomic_load_n(&o->removed, __ATOMIC_RELAXED))
			return "a reload cannot add a DNS over TLS or HTTPS listener, or turn a listener "
			       "into one or back (restart dnslb)";
		if ((n->tls != NULL && !dlb_tls_server_same_opts(o->tls, n->tls)) ||
		    (n->doh != NULL && !dlb_doh_cfg_same(o->doh, n->doh)))
			return "the options of a DNS over TLS or HTTPS listener changed (restart dnslb "
			       "to apply them; its certificates are reloaded when they do not change)";
	}
	for (int i = 0; i < a->nfrontends; i++) {
		bool kept = false;

		if (!dlb_frontend_stream_only(&a->frontends[i]) ||
		    __atomic_load_n(&a->frontends[i].removed, __ATOMIC_RELAXED))
			continue;
		for (int j = 0; j < b->nfrontends; j++)
			kept = kept || plan->fe_map[j] == i;
		if (!kept)
			return "a reload cannot remove a DNS over TLS or HTTPS listener (restart dnslb)";
	}

	/* servers: the first running one that is the same, each taken once */
	memset(taken, 0, sizeof(taken));
	for (int j = 0; j < b->nbackends; j++) {
		plan->be_map[j] = -1;
		for (int i = 0; i < a->nbackends; i++) {
			if (taken[i] || a->backends[i]->removed ||
			    !backend_same_transport(a->backends[i], b->backends[j]))
				continue;
			taken[i] = true;
			plan->be_map[j] = i;
			break;
		}
	}
	/* caches: the same by the options they were asked with */
	memset(taken, 0, sizeof(taken));
	for (int k = 0; k < b->ncaches; k++) {
		plan->cache_map[k] = -1;
		for (int i = 0; i < a->ncaches; i++) {
			if (taken[i] || !dlb_cache_opts_same(&a->cache_opts[i], &b->cache_opts[k]))
				continue;
			taken[i] = true;
			plan->cache_map[k] = i;
			break;
		}
	}
	return NULL;
}

void
dlb_config_update_backend(struct dlb_backend *be, const struct dlb_backend *nb)
{
	__atomic_store_n(&be->order, nb->order, __ATOMIC_RELAXED);
	__atomic_store_n(&be->weight, nb->weight, __ATOMIC_RELAXED);
	__atomic_store_n(&be->qps, nb->qps, __ATOMIC_RELAXED);
	__atomic_store_n(&be->qps_limit_rt, nb->qps, __ATOMIC_RELAXED);
	/* health checks: read by the main thread only, at the next check */
	memcpy(be->check_name, nb->check_name, sizeof(be->check_name));
	be->check_name_len = nb->check_name_len;
	be->check_type = nb->check_type;
	be->check_class = nb->check_class;
	be->check_interval = nb->check_interval;
	be->check_timeout = nb->check_timeout;
	be->max_check_failures = nb->max_check_failures;
	be->rise = nb->rise;
	be->must_resolve = nb->must_resolve;
	be->set_cd = nb->set_cd;
	be->check_tcp = nb->check_tcp;
	be->lazy_timeouts_only = nb->lazy_timeouts_only;
	be->lazy_backoff = nb->lazy_backoff;
	be->lazy_sample_size = nb->lazy_sample_size;
	be->lazy_min_samples = nb->lazy_min_samples;
	be->lazy_threshold = nb->lazy_threshold;
	be->lazy_failed_interval = nb->lazy_failed_interval;
	be->lazy_max_backoff = nb->lazy_max_backoff;
	if (nb->admin_file != be->admin_file) {
		be->admin_file = nb->admin_file;
		__atomic_store_n(&be->admin, nb->admin_file, __ATOMIC_RELAXED);
	}
}

void
dlb_config_retire_backend(struct dlb_config *cfg, struct dlb_backend *be)
{
	for (int i = 0; i < cfg->npools; i++)
		pool_remove_member(cfg->pools[i], be);
	be->npools = 0;
	be->removed = true;
	__atomic_store_n(&be->admin, DLB_BE_FORCED_DOWN, __ATOMIC_RELAXED);
}
