/*
 * objects.h - the helper objects of dnsdist's Lua API, usable in the config
 * state and in every worker state: DNSName (newDNSName, newDNSNameFromRaw),
 * ComboAddress (newCA, newCAFromRaw), Netmask (newNetmask), NetmaskGroup
 * (newNMG), SuffixMatchNode (newSuffixMatchNode), DNSNameSet
 * (newDNSNameSet), QPSLimiter (newQPSLimiter).
 *
 * QPSLimiter objects are shared by all states: the n-th newQPSLimiter() of
 * a worker state's replay of the config returns the bucket the config state
 * created n-th, so a limit is global, not per worker (docs/lua.md).
 *
 * Thread: a lua_State is used by one thread at a time.
 */
#ifndef DNSLB_LUA_OBJECTS_H
#define DNSLB_LUA_OBJECTS_H

#include <lua.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "dnslb/core/netmask.h"

struct dlb_suffix_set;
struct dlb_name_set;

/** Metatables and the constructor globals. Under lua_pcall (may raise). */
void dlb_lua_objects_register(lua_State *L);

/** Push a DNSName holding the wire name @wire (case kept). */
void dlb_lua_push_dnsname(lua_State *L, const uint8_t *wire, size_t len);
/** The wire name of the DNSName at @idx (case kept), or NULL when it is not one. */
const uint8_t *dlb_lua_to_dnsname(lua_State *L, int idx, size_t *len);
/**
 * A name argument: a DNSName or a string ("www.example.com", with or without
 * the final dot). Raises "<fn>: bad name" otherwise. Lowercased wire into
 * @lc (DLB_MAX_NAME bytes). @return its length.
 */
size_t dlb_lua_check_name_lc(lua_State *L, int idx, const char *fn, uint8_t *lc);

void dlb_lua_push_ca(lua_State *L, const struct sockaddr *sa);
/** The ComboAddress at @idx, or NULL. */
const struct sockaddr_storage *dlb_lua_to_ca(lua_State *L, int idx);

/** The object at @idx, or NULL when it is not of that type. Borrowed. */
struct dlb_suffix_set *dlb_lua_to_smn(lua_State *L, int idx);
struct dlb_nmg *dlb_lua_to_nmg(lua_State *L, int idx);
struct dlb_name_set *dlb_lua_to_nameset(lua_State *L, int idx);

#endif
