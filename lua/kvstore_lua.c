/*
 * kvstore_lua.c - newRedisKVStore{}, KeyValueStore objects, showKVStores()
 * and the KeyValueLookupKey* constructors (kvstore_lua.h, docs/fleet.md).
 *
 * dnsdist 1.7 names (KeyValueStore, KeyValueLookupKey*, lookup,
 * lookupSuffix, reload) keep their meaning; what differs because the store
 * is Redis, not a CDB/LMDB file: the qname keys are text by default (Redis
 * members are typed by people and scripts), wireFormat=true asks for
 * dnsdist's wire-format keys; source IP keys are text; lookup() of a set
 * returns the member found (a set has no values).
 */
#include "lua/kvstore_lua.h"

#include <arpa/inet.h>
#include <lauxlib.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "dnslb/store/kvstore.h"
#include "dnslb/store/redis.h"
#include "dnslb/core/wire.h"
#include "lua/args.h"
#include "lua/conf.h"
#include "lua/objects.h"
#include "rules/rules.h"

#define MT_KVS		"KeyValueStore"
#define MT_KVKEY	"KeyValueLookupKey"

struct kvs_box {
	struct dlb_kvstore *s;		/* one reference; NULL while being built */
};

static const char *const kvs_options[] = {
	"name", "type", "key", "refresh", "channel", "keyspace", "scanCount", NULL,
};

struct dlb_kvstore *
dlb_lua_to_kvstore(lua_State *L, int idx)
{
	struct kvs_box *b = luaL_testudata(L, idx, MT_KVS);

	return b != NULL ? b->s : NULL;
}

const struct dlb_kvs_key *
dlb_lua_to_kvkey(lua_State *L, int idx)
{
	return luaL_testudata(L, idx, MT_KVKEY);
}

/* The methods that touch the mirroring (main thread) cannot run in a worker's rule. */
static void
not_in_rule(lua_State *L, const char *fn)
{
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);

	if (lc != NULL && dlb_lua_conf_phase(lc) == DLB_LUA_PHASE_RULES)
		luaL_error(L, "%s cannot be called from a rule", fn);
}

static struct dlb_kvstore *
check_kvs(lua_State *L, int idx)
{
	struct kvs_box *b = luaL_checkudata(L, idx, MT_KVS);

	if (b->s == NULL)
		luaL_error(L, "this KeyValueStore is gone");
	return b->s;
}

/* Option @key of @t as a string into @out (@cap octets, NUL included). */
static void
opt_str(lua_State *L, int t, const char *fn, const char *key, char *out, size_t cap)
{
	const char *v = dlb_lua_opt_string_push(L, t, fn, key);

	if (v == NULL)
		return;
	if (strlen(v) >= cap)
		luaL_error(L, "%s: '%s' is too long (at most %d octets)", fn, key, (int)cap - 1);
	snprintf(out, cap, "%s", v);
	lua_pop(L, 1);
}

/*
 * newRedisKVStore({key=, type="set"|"hash", name=key, refresh=60,
 * channel=, keyspace=true, scanCount=10000})
 */
static int
l_new_redis_kvstore(lua_State *L)
{
	static const char fn[] = "newRedisKVStore";
	struct dlb_kvstore_opts o;
	const char *type;
	struct kvs_box *b;
	lua_Integer count = 10000;
	int t;

	/* a worker state replaying the config, or `dnslb -c` reading it: setRedis only checked */
	if (!dlb_redis_settings.enabled && !dlb_lua_replaying(L))
		return luaL_error(L, "%s: Redis is not configured: call setRedis() before it, at "
				  "the top of the configuration", fn);
	t = dlb_lua_opt_table(L, 1, fn);
	if (t == 0)
		return luaL_error(L, "%s: expected an options table ({key=\"...\", type=\"set\"})",
				  fn);
	lua_pushnil(L);
	while (lua_next(L, t) != 0) {
		lua_pop(L, 1);
		if (lua_type(L, -1) != LUA_TSTRING ||
		    !dlb_lua_name_in(lua_tostring(L, -1), kvs_options))
			return luaL_error(L, "%s: unknown option '%s'", fn,
					  luaL_tolstring(L, -1, NULL));
	}
	dlb_kvstore_opts_init(&o);
	opt_str(L, t, fn, "key", o.key, sizeof(o.key));
	if (o.key[0] == '\0')
		return luaL_error(L, "%s: 'key' (the Redis key of the set or hash) is required", fn);
	snprintf(o.name, sizeof(o.name), "%.*s", (int)sizeof(o.name) - 1, o.key);
	opt_str(L, t, fn, "name", o.name, sizeof(o.name));
	if (o.name[0] == '\0')
		return luaL_error(L, "%s: 'name' must not be empty", fn);
	type = dlb_lua_opt_string_push(L, t, fn, "type");
	if (type != NULL) {
		if (strcmp(type, "set") == 0)
			o.type = DLB_KVS_SET;
		else if (strcmp(type, "hash") == 0)
			o.type = DLB_KVS_HASH;
		else
			return luaL_error(L, "%s: 'type' must be \"set\" or \"hash\", not '%s'", fn,
					  type);
		lua_pop(L, 1);
	}
	opt_str(L, t, fn, "channel", o.channel, sizeof(o.channel));
	dlb_lua_opt_bool(L, t, fn, "keyspace", &o.keyspace);
	if (lua_getfield(L, t, "refresh") != LUA_TNIL) {
		lua_Number r;

		if (!dlb_lua_to_number(L, -1, &r))
			return luaL_error(L, "%s: 'refresh' must be a number of seconds", fn);
		if (!(r == 0 || (r >= 1 && r <= 86400)))
			return luaL_error(L, "%s: 'refresh' must be 0 (never) or 1..86400 seconds",
					  fn);
		o.refresh = r;
	}
	lua_pop(L, 1);
	dlb_lua_opt_integer(L, t, fn, "scanCount", 10, 1000000, &count);
	o.scan_count = (unsigned)count;

	b = lua_newuserdatauv(L, sizeof(*b), 0);
	b->s = NULL;
	luaL_setmetatable(L, MT_KVS);
	b->s = dlb_kvstore_get(&o);
	if (b->s == NULL)
		return luaL_error(L, "%s: out of memory", fn);
	return 1;
}

static int
l_kvs_gc(lua_State *L)
{
	struct kvs_box *b = luaL_checkudata(L, 1, MT_KVS);

	if (b->s != NULL)
		dlb_kvstore_unref(b->s);
	b->s = NULL;
	return 0;
}

static int
l_kvs_tostring(lua_State *L)
{
	struct kvs_box *b = luaL_checkudata(L, 1, MT_KVS);
	const struct dlb_kvstore_opts *o;

	if (b->s == NULL) {
		lua_pushstring(L, "KeyValueStore (gone)");
		return 1;
	}
	o = dlb_kvstore_opts(b->s);
	lua_pushfstring(L, "KeyValueStore \"%s\" (Redis %s '%s', %I entries)", o->name,
			o->type == DLB_KVS_HASH ? "hash" : "set", o->key,
			(lua_Integer)dlb_kvmap_count(dlb_kvstore_map(b->s)));
	return 1;
}

static void
push_value(lua_State *L, bool found, const uint8_t *v, size_t vl)
{
	if (found)
		lua_pushlstring(L, (const char *)v, vl);
	else
		lua_pushliteral(L, "");
}

/*
 * kvs:lookup(key[, wireFormat=false]): a string is looked up as it is; a
 * DNSName as its lowercased text with the final dot (or wire format); a
 * ComboAddress as its address in text. @return the value, "" if absent.
 */
static int
l_kvs_lookup(lua_State *L)
{
	const struct dlb_kvmap *m = dlb_kvstore_map(check_kvs(L, 1));
	bool wire = dlb_lua_opt_arg_bool(L, 3, "lookup", false);
	const struct sockaddr_storage *ca = dlb_lua_to_ca(L, 2);
	const uint8_t *v = NULL;
	size_t vl = 0, len;
	bool found;

	if (lua_type(L, 2) == LUA_TSTRING) {
		const char *k = lua_tolstring(L, 2, &len);

		found = dlb_kvmap_get(m, k, len, &v, &vl);
	} else if (ca != NULL) {
		char a[INET6_ADDRSTRLEN];
		const void *p = ca->ss_family == AF_INET6 ?
			(const void *)&((const struct sockaddr_in6 *)(const void *)ca)->sin6_addr :
			(const void *)&((const struct sockaddr_in *)(const void *)ca)->sin_addr;

		if (inet_ntop(ca->ss_family, p, a, sizeof(a)) == NULL)
			a[0] = '\0';
		found = dlb_kvmap_get(m, a, strlen(a), &v, &vl);
	} else if (dlb_lua_to_dnsname(L, 2, &len) != NULL) {
		uint8_t lc[DLB_MAX_NAME];
		struct dlb_kvs_key k = { .type = DLB_KVK_QNAME, .wire = wire };

		len = dlb_lua_check_name_lc(L, 2, "lookup", lc);
		found = dlb_kvs_lookup_name(m, &k, lc, len, &v, &vl);
	} else {
		return luaL_error(L, "lookup: the key must be a string, a DNSName or a "
				  "ComboAddress, not %s", luaL_typename(L, 2));
	}
	push_value(L, found, v, vl);
	return 1;
}

/* kvs:lookupSuffix(name[, minLabels=0[, wireFormat=false]]): as KeyValueLookupKeySuffix. */
static int
l_kvs_lookup_suffix(lua_State *L)
{
	const struct dlb_kvmap *m = dlb_kvstore_map(check_kvs(L, 1));
	uint8_t lc[DLB_MAX_NAME];
	size_t len = dlb_lua_check_name_lc(L, 2, "lookupSuffix", lc), vl = 0;
	struct dlb_kvs_key k = { .type = DLB_KVK_SUFFIX };
	const uint8_t *v = NULL;
	bool found;

	k.min_labels = (uint8_t)dlb_lua_opt_arg_int(L, 3, "lookupSuffix", 0, 127, 0);
	k.wire = dlb_lua_opt_arg_bool(L, 4, "lookupSuffix", false);
	found = dlb_kvs_lookup_name(m, &k, lc, len, &v, &vl);
	push_value(L, found, v, vl);
	return 1;
}

/* kvs:reload(): mirror the Redis key again now (dnsdist: reopen the database). */
static int
l_kvs_reload(lua_State *L)
{
	struct dlb_kvstore *s = check_kvs(L, 1);

	not_in_rule(L, "reload");
	if (!dlb_lua_replaying(L))
		dlb_kvstore_reload(s);
	return 0;
}

static int
l_kvs_get_stats(lua_State *L)
{
	struct dlb_kvstore_stats st;
	const struct dlb_kvstore_opts *o;
	struct dlb_kvstore *s = check_kvs(L, 1);

	not_in_rule(L, "getStats");
	dlb_kvstore_get_stats(s, &st);
	o = dlb_kvstore_opts(s);
	lua_createtable(L, 0, 16);
	lua_pushstring(L, o->name);
	lua_setfield(L, -2, "name");
	lua_pushstring(L, o->type == DLB_KVS_HASH ? "hash" : "set");
	lua_setfield(L, -2, "type");
	lua_pushstring(L, o->key);
	lua_setfield(L, -2, "key");
#define SETI(field, v) (lua_pushinteger(L, (lua_Integer)(v)), lua_setfield(L, -2, field))
	SETI("entries", st.entries);
	SETI("memory", st.memory);
	SETI("lookups", st.lookups);
	SETI("hits", st.hits);
	SETI("refreshes", st.refreshes);
	SETI("refreshErrors", st.refresh_errors);
	SETI("notifications", st.notifications);
	SETI("skipped", st.skipped);
#undef SETI
	lua_pushnumber(L, st.age);
	lua_setfield(L, -2, "lastRefreshAge");
	lua_pushnumber(L, st.last_duration);
	lua_setfield(L, -2, "lastRefreshDuration");
	lua_pushboolean(L, st.mirroring);
	lua_setfield(L, -2, "mirroring");
	lua_pushstring(L, st.last_error);
	lua_setfield(L, -2, "lastError");
	return 1;
}

static void
stats_line(lua_State *L, struct dlb_kvstore *s)
{
	const struct dlb_kvstore_opts *o = dlb_kvstore_opts(s);
	struct dlb_kvstore_stats st;
	char age[32], line[1024];

	dlb_kvstore_get_stats(s, &st);
	if (st.age < 0)
		snprintf(age, sizeof(age), "never");
	else
		snprintf(age, sizeof(age), "%.1fs ago", st.age);
	snprintf(line, sizeof(line),
		 "%-16s %-4s %-24s %10zu %10zu %12llu %10llu %8llu %6llu %-12s %s", o->name,
		 o->type == DLB_KVS_HASH ? "hash" : "set", o->key, st.entries, st.memory,
		 (unsigned long long)st.lookups, (unsigned long long)st.hits,
		 (unsigned long long)st.refreshes, (unsigned long long)st.refresh_errors, age,
		 st.mirroring ? "(mirroring)" : st.last_error);
	dlb_lua_print(L, line);
}

static void
stats_header(lua_State *L)
{
	char line[256];

	snprintf(line, sizeof(line), "%-16s %-4s %-24s %10s %10s %12s %10s %8s %6s %-12s %s",
		 "Name", "Type", "Key", "Entries", "Bytes", "Lookups", "Hits", "Mirrors",
		 "Errors", "Mirrored", "Last error");
	dlb_lua_print(L, line);
}

static int
l_kvs_print_stats(lua_State *L)
{
	struct dlb_kvstore *s = check_kvs(L, 1);

	not_in_rule(L, "printStats");
	stats_header(L);
	stats_line(L, s);
	return 0;
}

struct show_ctx {
	lua_State *L;
	struct dlb_kvstore **v;
	size_t n, cap;
};

static void
collect(struct dlb_kvstore *s, void *ud)
{
	struct show_ctx *c = ud;

	if (c->n < c->cap)
		c->v[c->n++] = s;
}

/* showKVStores(): one line per store. */
static int
l_show_kvstores(lua_State *L)
{
	struct dlb_kvstore *v[256];
	struct show_ctx c = { L, v, 0, sizeof(v) / sizeof(v[0]) };

	/* collected first: printing runs Lua (print), which must not see a half walk */
	dlb_kvstore_visit(collect, &c);
	stats_header(L);
	for (size_t i = 0; i < c.n; i++)
		stats_line(L, v[i]);
	return 0;
}

/* ---- KeyValueLookupKey ------------------------------------------------------------ */

static struct dlb_kvs_key *
push_key(lua_State *L, enum dlb_kvs_key_type type)
{
	struct dlb_kvs_key *k = lua_newuserdatauv(L, sizeof(*k), 0);

	memset(k, 0, sizeof(*k));
	k->type = (uint8_t)type;
	luaL_setmetatable(L, MT_KVKEY);
	return k;
}

/* KeyValueLookupKeyQName([wireFormat=false]) */
static int
l_key_qname(lua_State *L)
{
	bool wire = dlb_lua_opt_arg_bool(L, 1, "KeyValueLookupKeyQName", false);

	push_key(L, DLB_KVK_QNAME)->wire = wire;
	return 1;
}

/* KeyValueLookupKeySuffix([minLabels=0[, wireFormat=false]]) */
static int
l_key_suffix(lua_State *L)
{
	lua_Integer min = dlb_lua_opt_arg_int(L, 1, "KeyValueLookupKeySuffix", 0, 127, 0);
	bool wire = dlb_lua_opt_arg_bool(L, 2, "KeyValueLookupKeySuffix", false);
	struct dlb_kvs_key *k = push_key(L, DLB_KVK_SUFFIX);

	k->min_labels = (uint8_t)min;
	k->wire = wire;
	return 1;
}

/* KeyValueLookupKeySourceIP([v4Mask=32[, v6Mask=128[, includePort=false]]]) */
static int
l_key_source_ip(lua_State *L)
{
	static const char fn[] = "KeyValueLookupKeySourceIP";
	lua_Integer v4 = dlb_lua_opt_arg_int(L, 1, fn, 0, 32, 32);
	lua_Integer v6 = dlb_lua_opt_arg_int(L, 2, fn, 0, 128, 128);
	bool port = dlb_lua_opt_arg_bool(L, 3, fn, false);
	struct dlb_kvs_key *k = push_key(L, DLB_KVK_SOURCE_IP);

	k->v4mask = (uint8_t)v4;
	k->v6mask = (uint8_t)v6;
	k->port = port;
	return 1;
}

/* KeyValueLookupKeyTag(tag) */
static int
l_key_tag(lua_State *L)
{
	const char *tag = dlb_lua_arg_string(L, 1, "KeyValueLookupKeyTag");
	struct dlb_kvs_key *k;

	if (strlen(tag) >= DLB_KVS_TAG_MAX)
		return luaL_error(L, "KeyValueLookupKeyTag: the tag name is too long (at most %d "
				  "octets)", DLB_KVS_TAG_MAX - 1);
	k = push_key(L, DLB_KVK_TAG);
	snprintf(k->tag, sizeof(k->tag), "%s", tag);
	return 1;
}

static int
l_key_tostring(lua_State *L)
{
	const struct dlb_kvs_key *k = luaL_checkudata(L, 1, MT_KVKEY);
	char d[128];

	dlb_kvs_key_describe(k, d, sizeof(d));
	lua_pushstring(L, d);
	return 1;
}

/* ---- registration ------------------------------------------------------------------- */

void
dlb_lua_kvstore_register(lua_State *L)
{
	static const luaL_Reg kvs_methods[] = {
		{ "lookup", l_kvs_lookup },
		{ "lookupSuffix", l_kvs_lookup_suffix },
		{ "reload", l_kvs_reload },
		{ "getStats", l_kvs_get_stats },
		{ "printStats", l_kvs_print_stats },
		{ NULL, NULL },
	};
	static const luaL_Reg globals[] = {
		{ "newRedisKVStore", l_new_redis_kvstore },
		{ "showKVStores", l_show_kvstores },
		{ "KeyValueLookupKeyQName", l_key_qname },
		{ "KeyValueLookupKeySuffix", l_key_suffix },
		{ "KeyValueLookupKeySourceIP", l_key_source_ip },
		{ "KeyValueLookupKeyTag", l_key_tag },
		{ NULL, NULL },
	};

	luaL_newmetatable(L, MT_KVS);
	lua_newtable(L);
	luaL_setfuncs(L, kvs_methods, 0);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, l_kvs_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pushcfunction(L, l_kvs_gc);
	lua_setfield(L, -2, "__gc");
	lua_pop(L, 1);

	luaL_newmetatable(L, MT_KVKEY);
	lua_newtable(L);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, l_key_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pop(L, 1);

	lua_pushglobaltable(L);
	luaL_setfuncs(L, globals, 0);
	lua_pop(L, 1);
}
