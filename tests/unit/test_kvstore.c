/*
 * test_kvstore.c - the mirrored map of Redis-backed stores (dnslb/store/kvstore.h)
 * and the KVS rule and action (rules/kvs.c): lookups by every key type,
 * text and wire forms, masks and ports, tags, the swap of a published map
 * (through the epoch), counters, references, and the Lua constructors
 * (newRedisKVStore's errors, shared stores, descriptions). No Redis: maps
 * are built here and published with dlb_kvstore_publish.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <lauxlib.h>
#include <lua.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/core/config.h"
#include "dnslb/store/kvstore.h"
#include "dnslb/core/rcu.h"
#include "dnslb/store/redis.h"
#include "dnslb/core/wire.h"
#include "lua/conf.h"
#include "rules/rules.h"

/* ---- helpers ---------------------------------------------------------------- */

static struct dlb_dnsmsg M;
static struct dlb_dq DQ;
static struct sockaddr_storage REMOTE;

static void
set_qname(const char *text)
{
	int n = dlb_wire_name_from_text(text, M.qname_lc, sizeof(M.qname_lc));

	assert_true(n > 0);
	for (int i = 0; i < n; i++)
		if (M.qname_lc[i] >= 'A' && M.qname_lc[i] <= 'Z')
			M.qname_lc[i] = (uint8_t)(M.qname_lc[i] + 32);
	M.qname_len = (uint16_t)n;
}

static void
set_remote(const char *ip, uint16_t port)
{
	memset(&REMOTE, 0, sizeof(REMOTE));
	if (strchr(ip, ':') != NULL) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&REMOTE;

		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		assert_int_equal(inet_pton(AF_INET6, ip, &s6->sin6_addr), 1);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&REMOTE;

		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		assert_int_equal(inet_pton(AF_INET, ip, &s4->sin_addr), 1);
	}
}

static void
dq_reset(const char *qname)
{
	memset(&DQ, 0, sizeof(DQ));
	DQ.m = &M;
	DQ.remote = (const struct sockaddr *)&REMOTE;
	DQ.worker = 0;
	dlb_dq_reset_decisions(&DQ);
	set_qname(qname);
}

static struct dlb_kvstore *
store(const char *name, enum dlb_kvstore_type type)
{
	struct dlb_kvstore_opts o;
	struct dlb_kvstore *s;

	dlb_kvstore_opts_init(&o);
	snprintf(o.name, sizeof(o.name), "%s", name);
	snprintf(o.key, sizeof(o.key), "k:%s", name);
	o.type = type;
	s = dlb_kvstore_get(&o);
	assert_non_null(s);
	return s;
}

/* A set of the NULL-terminated @members. */
static struct dlb_kvmap *
set_of(const char *const *members)
{
	struct dlb_kvmap *m = dlb_kvmap_new(false);

	assert_non_null(m);
	for (; *members != NULL; members++)
		assert_int_equal(dlb_kvmap_put(m, *members, strlen(*members), NULL, 0), DLB_OK);
	dlb_kvmap_seal(m);
	return m;
}

static bool
found(struct dlb_kvstore *s, struct dlb_kvs_key k, const char *qname, const char **val)
{
	static char buf[1100];
	const uint8_t *v;
	size_t vl;
	bool f;

	dq_reset(qname);
	f = dlb_kvs_lookup(s, &k, &DQ, &v, &vl);
	if (f && val != NULL) {
		memcpy(buf, v, vl);
		buf[vl] = '\0';
		*val = buf;
	}
	return f;
}

/* ---- the map ---------------------------------------------------------------- */

static void
test_map_basics(void **state)
{
	struct dlb_kvmap *set = dlb_kvmap_new(false), *hash = dlb_kvmap_new(true);
	const uint8_t *v;
	size_t vl;
	char big[DLB_KVMAP_KEY_MAX + 2];

	(void)state;
	assert_false(dlb_kvmap_get(NULL, "a", 1, NULL, NULL));
	assert_false(dlb_kvmap_get(set, "a", 1, NULL, NULL));
	assert_int_equal(dlb_kvmap_put(set, "a.example.", 10, NULL, 0), DLB_OK);
	assert_int_equal(dlb_kvmap_put(set, "a.example.", 10, NULL, 0), DLB_OK);	/* SSCAN repeats */
	assert_int_equal(dlb_kvmap_count(set), 1);
	assert_true(dlb_kvmap_get(set, "a.example.", 10, &v, &vl));
	assert_int_equal(vl, 10);
	assert_memory_equal(v, "a.example.", 10);	/* a set's value is the member */
	assert_false(dlb_kvmap_get(set, "a.example", 9, NULL, NULL));
	assert_int_equal(dlb_kvmap_put(set, "", 0, NULL, 0), DLB_EINVAL);
	memset(big, 'x', sizeof(big));
	assert_int_equal(dlb_kvmap_put(set, big, DLB_KVMAP_KEY_MAX + 1, NULL, 0), DLB_EINVAL);
	assert_int_equal(dlb_kvmap_put(set, big, DLB_KVMAP_KEY_MAX, NULL, 0), DLB_OK);
	assert_true(dlb_kvmap_get(set, big, DLB_KVMAP_KEY_MAX, &v, &vl));
	assert_int_equal(vl, DLB_KVMAP_KEY_MAX);	/* two length octets */

	assert_int_equal(dlb_kvmap_put(hash, "f", 1, "v1", 2), DLB_OK);
	assert_int_equal(dlb_kvmap_put(hash, "g", 1, "", 0), DLB_OK);
	assert_int_equal(dlb_kvmap_put(hash, "f", 1, "value2", 6), DLB_OK);	/* replaced */
	assert_int_equal(dlb_kvmap_count(hash), 2);
	assert_true(dlb_kvmap_get(hash, "f", 1, &v, &vl));
	assert_int_equal(vl, 6);
	assert_memory_equal(v, "value2", 6);
	assert_true(dlb_kvmap_get(hash, "g", 1, &v, &vl));
	assert_int_equal(vl, 0);
	assert_int_equal(dlb_kvmap_put(hash, "h", 1, big, DLB_KVMAP_VALUE_MAX + 1), DLB_EINVAL);
	assert_true(dlb_kvmap_has_values(hash));
	assert_false(dlb_kvmap_has_values(set));
	dlb_kvmap_free(set);
	dlb_kvmap_free(hash);
}

static void
test_map_many(void **state)
{
	struct dlb_kvmap *m = dlb_kvmap_new(true);
	char k[32], v[32];
	const uint8_t *p;
	size_t vl;

	(void)state;
	for (int i = 0; i < 200000; i++) {
		int kl = snprintf(k, sizeof(k), "domain%07d.com.", i);
		int n = snprintf(v, sizeof(v), "%d", i * 7);

		assert_int_equal(dlb_kvmap_put(m, k, (size_t)kl, v, (size_t)n), DLB_OK);
	}
	dlb_kvmap_seal(m);
	assert_int_equal(dlb_kvmap_count(m), 200000);
	for (int i = 0; i < 200000; i += 997) {
		int kl = snprintf(k, sizeof(k), "domain%07d.com.", i);
		int n = snprintf(v, sizeof(v), "%d", i * 7);

		assert_true(dlb_kvmap_get(m, k, (size_t)kl, &p, &vl));
		assert_int_equal(vl, (size_t)n);
		assert_memory_equal(p, v, vl);
	}
	assert_false(dlb_kvmap_get(m, "domain0200000.com.", 18, NULL, NULL));
	{
		/* a re-mirror reserves the last size: smaller and larger builds both work */
		struct dlb_kvmap *r = dlb_kvmap_new(true);

		assert_int_equal(dlb_kvmap_reserve(r, 100, 64), DLB_OK);
		for (int i = 0; i < 5000; i++) {
			int kl = snprintf(k, sizeof(k), "r%d.", i);

			assert_int_equal(dlb_kvmap_put(r, k, (size_t)kl, "v", 1), DLB_OK);
		}
		assert_int_equal(dlb_kvmap_count(r), 5000);
		assert_true(dlb_kvmap_get(r, "r4999.", 6, &p, &vl));
		assert_true(dlb_kvmap_get(r, "r0.", 3, &p, &vl));
		dlb_kvmap_free(r);
	}
	/* slots (8 octets, load > 3/8) plus entries: well under 64 octets a name */
	assert_true(dlb_kvmap_memory(m) / 200000 < 64);
	dlb_kvmap_free(m);
}

/* ---- lookups by key type ------------------------------------------------------ */

static void
test_qname_keys(void **state)
{
	static const char *const members[] = { "www.example.com.", "a\\.b.example.", ".", NULL };
	struct dlb_kvstore *s = store("qname", DLB_KVS_SET);
	struct dlb_kvmap *wire = dlb_kvmap_new(false);
	struct dlb_kvs_key k = { .type = DLB_KVK_QNAME };
	uint8_t w[DLB_MAX_NAME];
	const char *v;
	int n;

	(void)state;
	set_remote("192.0.2.1", 5300);
	assert_false(found(s, k, "www.example.com.", NULL));	/* nothing mirrored yet */
	dlb_kvstore_publish(s, set_of(members), NULL);
	assert_true(found(s, k, "www.example.com.", &v));
	assert_string_equal(v, "www.example.com.");
	assert_true(found(s, k, "WWW.Example.COM", NULL));	/* lowercased, final dot */
	assert_false(found(s, k, "example.com.", NULL));
	assert_false(found(s, k, "x.www.example.com.", NULL));
	assert_true(found(s, k, "a\\.b.example.", NULL));	/* dnsdist's escapes */
	assert_true(found(s, k, ".", NULL));			/* the root is "." */

	/* wireFormat=true: members in lowercase wire format */
	n = dlb_wire_name_from_text("www.example.com.", w, sizeof(w));
	assert_int_equal(dlb_kvmap_put(wire, w, (size_t)n, NULL, 0), DLB_OK);
	dlb_kvstore_publish(s, wire, NULL);
	k.wire = true;
	assert_true(found(s, k, "www.EXAMPLE.com.", NULL));
	k.wire = false;
	assert_false(found(s, k, "www.example.com.", NULL));
	dlb_kvstore_unref(s);
}

static void
test_suffix_keys(void **state)
{
	static const char *const members[] = { "example.com.", "net.", NULL };
	struct dlb_kvstore *s = store("suffix", DLB_KVS_SET);
	struct dlb_kvs_key k = { .type = DLB_KVK_SUFFIX };
	struct dlb_kvmap *wire = dlb_kvmap_new(false);
	uint8_t w[DLB_MAX_NAME];
	const char *v;
	int n;

	(void)state;
	dlb_kvstore_publish(s, set_of(members), NULL);
	assert_true(found(s, k, "a.b.example.com.", &v));
	assert_string_equal(v, "example.com.");
	assert_true(found(s, k, "example.com.", NULL));
	assert_false(found(s, k, "com.", NULL));
	assert_false(found(s, k, "notexample.com.", NULL));
	assert_true(found(s, k, "anything.net.", NULL));	/* down to the TLD by default */
	assert_false(found(s, k, ".", NULL));			/* never the root */
	/* minLabels: stop at names of that many labels */
	k.min_labels = 2;
	assert_true(found(s, k, "a.b.example.com.", NULL));
	assert_false(found(s, k, "x.net.", NULL));		/* "net." has 1 label */
	k.min_labels = 3;
	assert_false(found(s, k, "a.b.example.com.", NULL));	/* a.b.example.com, b.example.com */
	assert_false(found(s, k, "example.com.", NULL));	/* fewer labels: no key at all */
	/* wire format */
	n = dlb_wire_name_from_text("example.com.", w, sizeof(w));
	assert_int_equal(dlb_kvmap_put(wire, w, (size_t)n, NULL, 0), DLB_OK);
	dlb_kvstore_publish(s, wire, NULL);
	k.min_labels = 0;
	k.wire = true;
	assert_true(found(s, k, "x.y.Example.com.", NULL));
	dlb_kvstore_unref(s);
}

static void
test_source_ip_keys(void **state)
{
	static const char *const members[] = {
		"192.0.2.1", "198.51.100.0", "203.0.113.7:5300", "2001:db8:1::", "[2001:db8::1]:53",
		NULL,
	};
	struct dlb_kvstore *s = store("ip", DLB_KVS_SET);
	struct dlb_kvs_key k = { .type = DLB_KVK_SOURCE_IP, .v4mask = 32, .v6mask = 128 };
	const char *v;

	(void)state;
	dlb_kvstore_publish(s, set_of(members), NULL);
	set_remote("192.0.2.1", 40000);
	assert_true(found(s, k, "x.", &v));
	assert_string_equal(v, "192.0.2.1");
	set_remote("198.51.100.9", 40000);
	assert_false(found(s, k, "x.", NULL));
	k.v4mask = 24;
	assert_true(found(s, k, "x.", NULL));			/* 198.51.100.0 */
	k.v4mask = 32;
	k.port = true;
	set_remote("203.0.113.7", 5300);
	assert_true(found(s, k, "x.", NULL));
	set_remote("203.0.113.7", 5301);
	assert_false(found(s, k, "x.", NULL));
	set_remote("2001:db8::1", 53);
	assert_true(found(s, k, "x.", &v));
	assert_string_equal(v, "[2001:db8::1]:53");
	k.port = false;
	set_remote("2001:db8:1::77", 53);
	assert_false(found(s, k, "x.", NULL));
	k.v6mask = 48;
	assert_true(found(s, k, "x.", NULL));			/* 2001:db8:1:: */
	k.v6mask = 44;						/* not on an octet boundary */
	set_remote("2001:db8:f::1", 53);
	assert_false(found(s, k, "x.", NULL));			/* 2001:db8::, not listed */
	dlb_kvstore_unref(s);
}

static void
test_tag_key_and_action(void **state)
{
	struct dlb_kvstore *s = store("tags", DLB_KVS_HASH);
	struct dlb_kvmap *m = dlb_kvmap_new(true);
	struct dlb_act *a = dlb_act_new(DLB_ACT_KVS);
	struct dlb_kvs_key k = { .type = DLB_KVK_TAG };

	(void)state;
	assert_int_equal(dlb_kvmap_put(m, "gold", 4, "pool-a", 6), DLB_OK);
	assert_int_equal(dlb_kvmap_put(m, "www.example.com.", 16, "blocked", 7), DLB_OK);
	dlb_kvstore_publish(s, m, NULL);
	snprintf(k.tag, sizeof(k.tag), "customer");
	dq_reset("www.example.com.");
	assert_false(dlb_kvs_lookup(s, &k, &DQ, NULL, NULL));	/* no tag: no key */
	assert_int_equal(dlb_tags_set(&DQ.tags, "customer", "gold"), 0);
	assert_true(dlb_kvs_lookup(s, &k, &DQ, NULL, NULL));

	/* the action: the value found, "" when none (dnsdist creates the tag anyway) */
	dlb_kvstore_ref(s);
	a->u.kvs.store = s;
	a->u.kvs.key.type = DLB_KVK_QNAME;
	a->u.kvs.tag = strdup("verdict");
	dq_reset("www.example.com.");
	assert_int_equal(dlb_act_run(a, &DQ), DLB_R_CONTINUE);
	assert_string_equal(dlb_tags_get(&DQ.tags, "verdict"), "blocked");
	dq_reset("other.example.com.");
	assert_int_equal(dlb_act_run(a, &DQ), DLB_R_CONTINUE);
	assert_string_equal(dlb_tags_get(&DQ.tags, "verdict"), "");
	dlb_act_unref(a);
	dlb_kvstore_unref(s);
}

/* A set looked up with wire keys: the tag gets the member's text name. */
static void
test_action_wire_member(void **state)
{
	struct dlb_kvstore *s = store("wireset", DLB_KVS_SET);
	struct dlb_kvmap *m = dlb_kvmap_new(false);
	struct dlb_act *a = dlb_act_new(DLB_ACT_KVS);
	uint8_t w[DLB_MAX_NAME];
	int n = dlb_wire_name_from_text("example.org.", w, sizeof(w));

	(void)state;
	assert_int_equal(dlb_kvmap_put(m, w, (size_t)n, NULL, 0), DLB_OK);
	dlb_kvstore_publish(s, m, NULL);
	a->u.kvs.store = s;	/* takes our reference */
	a->u.kvs.key.type = DLB_KVK_SUFFIX;
	a->u.kvs.key.wire = true;
	a->u.kvs.tag = strdup("t");
	dq_reset("deep.www.example.org.");
	dlb_act_run(a, &DQ);
	assert_string_equal(dlb_tags_get(&DQ.tags, "t"), "example.org.");
	dlb_act_unref(a);
}

/* The selector, the swap of the published map through the epoch, the counters. */
static void
test_selector_swap_counters(void **state)
{
	static const char *const v1[] = { "blocked.example.", NULL };
	static const char *const v2[] = { "other.example.", NULL };
	struct dlb_kvstore *s = store("swap", DLB_KVS_SET);
	struct dlb_sel *sel = dlb_sel_new(DLB_SEL_KVS);
	struct dlb_rcu_thread rt;
	struct dlb_kvstore_stats st;

	(void)state;
	assert_int_equal(dlb_rcu_register(&rt), 0);
	sel->u.kvs.store = s;	/* takes our reference */
	sel->u.kvs.key.type = DLB_KVK_QNAME;
	dq_reset("blocked.example.");
	assert_false(dlb_sel_match(sel, &DQ));
	dlb_kvstore_publish(s, set_of(v1), &rt);
	assert_true(dlb_sel_match(sel, &DQ));
	/* a reader holding the old map across the swap still sees it whole */
	dlb_rcu_enter(&rt);
	{
		const struct dlb_kvmap *old = dlb_kvstore_map(s);

		dlb_kvstore_publish(s, set_of(v2), &rt);
		assert_true(dlb_kvmap_get(old, "blocked.example.", 16, NULL, NULL));
	}
	dlb_rcu_exit(&rt);
	assert_false(dlb_sel_match(sel, &DQ));
	dq_reset("other.example.");
	DQ.worker = 3;
	assert_true(dlb_sel_match(sel, &DQ));
	DQ.worker = -1;		/* explainQuery, tests: the spare slot */
	assert_true(dlb_sel_match(sel, &DQ));
	dlb_kvstore_get_stats(s, &st);
	assert_int_equal(st.lookups, 5);
	assert_int_equal(st.hits, 3);
	assert_int_equal(st.entries, 1);
	assert_true(st.memory > 0);
	dlb_rcu_barrier(&rt);	/* the retired maps are freed (ASan checks) */
	dlb_sel_unref(sel);	/* the last reference: the store goes (not running) */
	dlb_rcu_unregister(&rt);
}

/* ---- Lua --------------------------------------------------------------------------- */

static struct dlb_config *cfg;

static struct dlb_lua_conf *
conf(void)
{
	if (cfg == NULL)
		cfg = dlb_config_new();
	return dlb_lua_conf_new(cfg, DLB_LUA_PHASE_CONFIG);
}

static void
test_lua_needs_set_redis(void **state)
{
	struct dlb_lua_conf *lc = conf();
	char err[512];

	(void)state;
	dlb_redis_settings.enabled = false;
	assert_int_not_equal(dlb_lua_conf_load_string(lc, "kvs = newRedisKVStore({key='b'})",
						      "=t", err, sizeof(err)), 0);
	assert_non_null(strstr(err, "newRedisKVStore: Redis is not configured"));
	dlb_lua_conf_free(lc);
}

static void
test_lua_objects(void **state)
{
	static const char code[] =
		"setRedis('127.0.0.1:1')\n"
		"kvs = newRedisKVStore({name='bl', key='dnslb:blocked', refresh=5})\n"
		"same = newRedisKVStore({name='bl', key='dnslb:blocked', refresh=10})\n"
		"other = newRedisKVStore({key='dnslb:routes', type='hash'})\n"
		"r1 = tostring(KeyValueStoreLookupRule(kvs, KeyValueLookupKeyQName()))\n"
		"r2 = tostring(KeyValueStoreLookupRule(kvs, KeyValueLookupKeySourceIP(24, 64, true)))\n"
		"r3 = tostring(KeyValueStoreLookupAction(other, KeyValueLookupKeySuffix(2), 'route'))\n"
		"r4 = tostring(KeyValueStoreLookupRule(kvs, KeyValueLookupKeyTag('cust')))\n"
		"addAction(KeyValueStoreLookupRule(kvs, KeyValueLookupKeyQName()), DropAction())\n"
		"st = kvs:getStats()\n"
		"v = kvs:lookup('nothing')\n";
	static const struct {
		const char *code, *err;
	} bad[] = {
		{ "newRedisKVStore({type='set'})", "'key' (the Redis key of the set or hash) is required" },
		{ "newRedisKVStore({key='k', type='list'})", "'type' must be \"set\" or \"hash\"" },
		{ "newRedisKVStore({key='k', nosuch=1})", "unknown option 'nosuch'" },
		{ "newRedisKVStore({key='k', refresh=0.5})", "'refresh' must be 0 (never) or 1..86400" },
		{ "KeyValueStoreLookupRule(1, KeyValueLookupKeyQName())", "argument #1 must be a KeyValueStore" },
		{ "KeyValueStoreLookupRule(newRedisKVStore({key='k'}), 'qname')", "argument #2 must be a KeyValueLookupKey" },
		{ "KeyValueLookupKeySourceIP(33)", "out of range" },
	};
	struct dlb_lua_conf *lc = conf();
	lua_State *L;
	char err[512];

	(void)state;
	if (dlb_lua_conf_load_string(lc, code, "=t", err, sizeof(err)) != 0)
		fail_msg("%s", err);
	L = dlb_lua_conf_state(lc);
	lua_getglobal(L, "r1");
	assert_string_equal(lua_tostring(L, -1), "lookup key-value store based on 'qname'");
	lua_getglobal(L, "r2");
	assert_string_equal(lua_tostring(L, -1), "lookup key-value store based on 'source IP "
			    "(masked to 24 (v4) / 64 (v6) bits) including the port'");
	lua_getglobal(L, "r3");
	assert_string_equal(lua_tostring(L, -1), "lookup key-value store based on 'suffix' and "
			    "set the result in tag 'route'");
	lua_getglobal(L, "r4");
	assert_string_equal(lua_tostring(L, -1),
			    "lookup key-value store based on 'value of the tag named 'cust''");
	lua_settop(L, 0);
	/* the same name, type and key: one store, shared */
	assert_int_equal(dlb_lua_conf_load_string(lc, "assert(kvs:getStats().name == 'bl')\n"
						  "assert(other:getStats().type == 'hash')\n"
						  "assert(v == '')", "=t2", err, sizeof(err)), 0);
	lua_getglobal(L, "kvs");
	lua_getglobal(L, "same");
	{
		void *a = *(void **)lua_touserdata(L, -1), *b = *(void **)lua_touserdata(L, -2);

		assert_ptr_equal(a, b);
	}
	lua_settop(L, 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (dlb_lua_conf_load_string(lc, bad[i].code, "=bad", err, sizeof(err)) == 0)
			fail_msg("'%s' did not fail", bad[i].code);
		if (strstr(err, bad[i].err) == NULL)
			fail_msg("'%s': '%s' lacks '%s'", bad[i].code, err, bad[i].err);
	}
	dlb_lua_conf_free(lc);
	dlb_rules_shutdown();
	dlb_redis_settings.enabled = false;
}

static int
teardown_all(void **state)
{
	(void)state;
	dlb_config_free(cfg);
	cfg = NULL;
	return 0;
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_map_basics),
		cmocka_unit_test(test_map_many),
		cmocka_unit_test(test_qname_keys),
		cmocka_unit_test(test_suffix_keys),
		cmocka_unit_test(test_source_ip_keys),
		cmocka_unit_test(test_tag_key_and_action),
		cmocka_unit_test(test_action_wire_member),
		cmocka_unit_test(test_selector_swap_counters),
		cmocka_unit_test(test_lua_needs_set_redis),
		cmocka_unit_test(test_lua_objects),
	};

	dlb_rcu_init();
	return cmocka_run_group_tests(tests, NULL, teardown_all);
}
