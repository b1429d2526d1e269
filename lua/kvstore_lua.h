/*
 * kvstore_lua.h - the Lua side of Redis-backed key-value stores
 * (dnslb/store/kvstore.h, docs/fleet.md): newRedisKVStore{} and its
 * KeyValueStore objects (lookup, lookupSuffix, reload, getStats,
 * printStats), showKVStores(), and dnsdist 1.7's KeyValueLookupKeyQName,
 * KeyValueLookupKeySuffix, KeyValueLookupKeySourceIP and
 * KeyValueLookupKeyTag, whose objects KeyValueStoreLookupRule and
 * KeyValueStoreLookupAction (lua/rules_lua.c) take.
 *
 * A KeyValueStore userdata holds one reference on the shared store; the
 * config state, every worker state replaying the config and a reload's
 * state get the same store for the same {name, type, key, channel}.
 *
 * Thread: the thread using the lua_State (stores are made on the main
 * thread: worker states are built there).
 */
#ifndef DNSLB_LUA_KVSTORE_LUA_H
#define DNSLB_LUA_KVSTORE_LUA_H

#include <lua.h>

struct dlb_kvstore;
struct dlb_kvs_key;

/** Register the constructors, showKVStores() and the metatables in @L. */
void dlb_lua_kvstore_register(lua_State *L);

/** The store of the KeyValueStore at @idx, or NULL when it is not one. Borrowed. */
struct dlb_kvstore *dlb_lua_to_kvstore(lua_State *L, int idx);
/** The key of the KeyValueLookupKey at @idx, or NULL when it is not one. Borrowed. */
const struct dlb_kvs_key *dlb_lua_to_kvkey(lua_State *L, int idx);

#endif
