/*
 * objects.c - dnsdist's helper objects for Lua (lua/objects.h): DNSName,
 * ComboAddress, Netmask, NetmaskGroup, SuffixMatchNode, DNSNameSet and
 * QPSLimiter, in the config state and in every worker state.
 *
 * Each object is a full userdata with its metatable's methods as __index.
 * DNSName, ComboAddress and Netmask hold their value; NetmaskGroup holds a
 * struct dlb_nmg, SuffixMatchNode and DNSNameSet a pointer to the C set
 * (rules.h), freed by __gc. dlb_lua_to_smn/_nmg/_nameset lend those to the
 * selector constructors, which copy what they keep.
 *
 * Behaviour follows dnsdist 1.7.3 as observed with its --check-config
 * (docs/lua.md lists the differences: where 1.7.3 only took a DNSName or a
 * ComboAddress, a string is accepted too; DNSName == compares names, which
 * 1.7.3 does not; hash() is dnsdist's, burtleCI over the wire form).
 *
 * QPSLimiter buckets are process-global and shared: the config state's n-th
 * newQPSLimiter() makes bucket n; a worker state replaying that config takes
 * bucket n instead of making one (so the limit is one for all workers); a
 * limiter made inside a rule is private to its state. Buckets live until the
 * process exits (they are tiny and workers may hold them).
 *
 * Thread: a lua_State is used by one thread at a time; the bucket table is
 * touched only while building states (main thread).
 */
#include "lua/objects.h"

#include <arpa/inet.h>
#include <lauxlib.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dnslb/core/config.h"
#include "dnslb/core/ipcipher.h"
#include "dnslb/core/wire.h"
#include "lua/conf.h"
#include "rules/rules.h"

#define MT_NAME		"DNSName"
#define MT_CA		"ComboAddress"
#define MT_NETMASK	"Netmask"
#define MT_NMG		"NetmaskGroup"
#define MT_SMN		"SuffixMatchNode"
#define MT_NAMESET	"DNSNameSet"
#define MT_QPS		"QPSLimiter"

/* A DNSName: the wire name, case kept. */
struct lname {
	uint16_t len;
	uint8_t wire[DLB_MAX_NAME];
};

struct lsmn {
	struct dlb_suffix_set *s;	/* owned */
};

struct lnameset {
	struct dlb_name_set *s;		/* owned */
};

struct lqps {
	struct dlb_bucket *b;		/* a shared bucket, or &own */
	struct dlb_bucket own;
};

/* ---- names ---------------------------------------------------------------- */

static void
lower_wire(uint8_t *w, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (w[i] >= 'A' && w[i] <= 'Z')
			w[i] = (uint8_t)(w[i] - 'A' + 'a');
}

/* Is the wire name @n (@len) at or below @p (@plen)? Case-insensitive. */
static bool
name_is_part_of(const uint8_t *n, size_t len, const uint8_t *p, size_t plen)
{
	size_t pos = 0;

	for (;;) {
		if (len - pos == plen && dlb_wire_name_equal_ci(n + pos, len - pos, p, plen))
			return true;
		if (pos >= len || n[pos] == 0)
			return false;
		pos += 1 + (size_t)n[pos];
	}
}

/*
 * A name argument: a DNSName, or a string ("" is the root, as in dnsdist).
 * Wire form, case kept, into @wire (DLB_MAX_NAME bytes). @return its length.
 */
static size_t
arg_name(lua_State *L, int idx, const char *fn, uint8_t *wire)
{
	const struct lname *n = luaL_testudata(L, idx, MT_NAME);
	const char *s;
	size_t slen;
	int len;

	if (n != NULL) {
		memcpy(wire, n->wire, n->len);
		return n->len;
	}
	if (lua_type(L, idx) != LUA_TSTRING) {
		luaL_error(L, "%s: expected a DNSName or a string, got %s", fn,
			   luaL_typename(L, idx));
		return 0;
	}
	s = lua_tolstring(L, idx, &slen);
	if (slen == 0) {
		wire[0] = 0;
		return 1;
	}
	len = strlen(s) == slen ? dlb_wire_name_from_text(s, wire, DLB_MAX_NAME) : -1;
	if (len <= 0)
		luaL_error(L, "%s: bad name '%s'", fn, s);
	return (size_t)len;
}

size_t
dlb_lua_check_name_lc(lua_State *L, int idx, const char *fn, uint8_t *lc)
{
	size_t len = arg_name(L, idx, fn, lc);

	lower_wire(lc, len);
	return len;
}

void
dlb_lua_push_dnsname(lua_State *L, const uint8_t *wire, size_t len)
{
	struct lname *n;

	if (len == 0 || len > DLB_MAX_NAME)
		luaL_error(L, "invalid DNS name");
	n = lua_newuserdatauv(L, sizeof(*n), 0);
	n->len = (uint16_t)len;
	memcpy(n->wire, wire, len);
	luaL_setmetatable(L, MT_NAME);
}

const uint8_t *
dlb_lua_to_dnsname(lua_State *L, int idx, size_t *len)
{
	const struct lname *n = luaL_testudata(L, idx, MT_NAME);

	if (n == NULL)
		return NULL;
	*len = n->len;
	return n->wire;
}

static struct lname *
check_lname(lua_State *L, int idx)
{
	return luaL_checkudata(L, idx, MT_NAME);
}

static int
l_new_dnsname(lua_State *L)
{
	uint8_t wire[DLB_MAX_NAME];
	size_t len;

	luaL_checktype(L, 1, LUA_TSTRING);
	len = arg_name(L, 1, "newDNSName", wire);
	dlb_lua_push_dnsname(L, wire, len);
	return 1;
}

/* newDNSNameFromRaw(wire): the first name of @wire; what follows it is ignored. */
static int
l_new_dnsname_from_raw(lua_State *L)
{
	size_t rawlen, pos = 0;
	const uint8_t *raw = (const uint8_t *)luaL_checklstring(L, 1, &rawlen);

	for (;;) {
		if (pos >= rawlen || pos >= DLB_MAX_NAME)
			return luaL_error(L, "newDNSNameFromRaw: invalid wire name");
		if (raw[pos] == 0)
			break;
		if (raw[pos] > DLB_MAX_LABEL)
			return luaL_error(L, "newDNSNameFromRaw: invalid label length in name");
		pos += 1 + (size_t)raw[pos];
	}
	dlb_lua_push_dnsname(L, raw, pos + 1);
	return 1;
}

static void
push_name_text(lua_State *L, const struct lname *n, bool dot)
{
	char text[DLB_WIRE_NAME_TEXT_MAX];
	int len = dlb_wire_name_to_text(n->wire, n->len, text, sizeof(text));

	if (len <= 0) {
		lua_pushliteral(L, "");
		return;
	}
	/* pdns' toStringNoDot() of the root is "" */
	if (!dot && text[len - 1] == '.')
		len--;
	lua_pushlstring(L, text, (size_t)len);
}

static int
l_name_to_string(lua_State *L)
{
	push_name_text(L, check_lname(L, 1), true);
	return 1;
}

static int
l_name_to_string_no_dot(lua_State *L)
{
	push_name_text(L, check_lname(L, 1), false);
	return 1;
}

static int
l_name_to_dns_string(lua_State *L)
{
	const struct lname *n = check_lname(L, 1);

	lua_pushlstring(L, (const char *)n->wire, n->len);
	return 1;
}

static int
l_name_is_part_of(lua_State *L)
{
	const struct lname *n = check_lname(L, 1);
	uint8_t p[DLB_MAX_NAME];
	size_t plen = arg_name(L, 2, "isPartOf", p);

	lua_pushboolean(L, name_is_part_of(n->wire, n->len, p, plen));
	return 1;
}

static int
l_name_count_labels(lua_State *L)
{
	const struct lname *n = check_lname(L, 1);
	lua_Integer count = 0;

	for (size_t pos = 0; pos < n->len && n->wire[pos] != 0; pos += 1 + (size_t)n->wire[pos])
		count++;
	lua_pushinteger(L, count);
	return 1;
}

static int
l_name_wirelength(lua_State *L)
{
	lua_pushinteger(L, check_lname(L, 1)->len);
	return 1;
}

/* chopOff(): drop the leftmost label in place; false (unchanged) for the root. */
static int
l_name_chop_off(lua_State *L)
{
	struct lname *n = check_lname(L, 1);
	size_t skip;

	if (n->len <= 1 || n->wire[0] == 0) {
		lua_pushboolean(L, 0);
		return 1;
	}
	skip = 1 + (size_t)n->wire[0];
	memmove(n->wire, n->wire + skip, n->len - skip);
	n->len = (uint16_t)(n->len - skip);
	lua_pushboolean(L, 1);
	return 1;
}

static int
l_name_hash(lua_State *L)
{
	const struct lname *n = check_lname(L, 1);
	uint32_t init = (uint32_t)luaL_optinteger(L, 2, 0);

	lua_pushinteger(L, (lua_Integer)dlb_burtle_ci(n->wire, n->len, init));
	return 1;
}

static int
l_name_empty(lua_State *L)
{
	lua_pushboolean(L, check_lname(L, 1)->len == 0);
	return 1;
}

static int
l_name_is_root(lua_State *L)
{
	const struct lname *n = check_lname(L, 1);

	lua_pushboolean(L, n->len == 1 && n->wire[0] == 0);
	return 1;
}

static int
l_name_equal(lua_State *L)
{
	const struct lname *n = check_lname(L, 1);
	uint8_t o[DLB_MAX_NAME];
	size_t olen = arg_name(L, 2, "equal", o);

	lua_pushboolean(L, dlb_wire_name_equal_ci(n->wire, n->len, o, olen));
	return 1;
}

static int
l_name_eq(lua_State *L)
{
	const struct lname *a = luaL_testudata(L, 1, MT_NAME);
	const struct lname *b = luaL_testudata(L, 2, MT_NAME);

	lua_pushboolean(L, a != NULL && b != NULL &&
			   dlb_wire_name_equal_ci(a->wire, a->len, b->wire, b->len));
	return 1;
}

static const luaL_Reg name_methods[] = {
	{ "toString", l_name_to_string },
	{ "tostring", l_name_to_string },
	{ "toStringNoDot", l_name_to_string_no_dot },
	{ "toDNSString", l_name_to_dns_string },
	{ "isPartOf", l_name_is_part_of },
	{ "countLabels", l_name_count_labels },
	{ "wirelength", l_name_wirelength },
	{ "wireLength", l_name_wirelength },
	{ "chopOff", l_name_chop_off },
	{ "hash", l_name_hash },
	{ "empty", l_name_empty },
	{ "isRoot", l_name_is_root },
	{ "equal", l_name_equal },
	{ NULL, NULL },
};

/* ---- ComboAddress ----------------------------------------------------------- */

void
dlb_lua_push_ca(lua_State *L, const struct sockaddr *sa)
{
	struct sockaddr_storage *ss = lua_newuserdatauv(L, sizeof(*ss), 0);

	memset(ss, 0, sizeof(*ss));
	if (sa != NULL && sa->sa_family == AF_INET)
		memcpy(ss, sa, sizeof(struct sockaddr_in));
	else if (sa != NULL && sa->sa_family == AF_INET6)
		memcpy(ss, sa, sizeof(struct sockaddr_in6));
	luaL_setmetatable(L, MT_CA);
}

const struct sockaddr_storage *
dlb_lua_to_ca(lua_State *L, int idx)
{
	return luaL_testudata(L, idx, MT_CA);
}

static struct sockaddr_storage *
check_ca(lua_State *L, int idx)
{
	return luaL_checkudata(L, idx, MT_CA);
}

/* The address octets of @ss and their count (0 for an unset address). */
static size_t
ca_bytes(struct sockaddr_storage *ss, uint8_t **addr)
{
	if (ss->ss_family == AF_INET) {
		*addr = (uint8_t *)&((struct sockaddr_in *)(void *)ss)->sin_addr;
		return 4;
	}
	if (ss->ss_family == AF_INET6) {
		*addr = ((struct sockaddr_in6 *)(void *)ss)->sin6_addr.s6_addr;
		return 16;
	}
	*addr = NULL;
	return 0;
}

static uint16_t
ca_port(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)(const void *)ss)->sin_port);
	if (ss->ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)(const void *)ss)->sin6_port);
	return 0;
}

/* An address argument: a ComboAddress, or a string ("192.0.2.1", "[::1]:53"). */
static void
arg_address(lua_State *L, int idx, const char *fn, struct sockaddr_storage *out)
{
	const struct sockaddr_storage *ca = dlb_lua_to_ca(L, idx);
	socklen_t len;

	if (ca != NULL) {
		*out = *ca;
		return;
	}
	if (lua_type(L, idx) == LUA_TSTRING) {
		if (dlb_sockaddr_parse(lua_tostring(L, idx), 0, out, &len) == 0)
			return;
		luaL_error(L, "%s: invalid address '%s'", fn, lua_tostring(L, idx));
	}
	luaL_error(L, "%s: expected a ComboAddress or an address string, got %s", fn,
		   luaL_typename(L, idx));
}

static int
l_new_ca(lua_State *L)
{
	const char *s = luaL_checkstring(L, 1);
	struct sockaddr_storage ss;
	socklen_t len;

	if (dlb_sockaddr_parse(s, 0, &ss, &len) != 0)
		return luaL_error(L, "Unable to convert presentation address '%s'", s);
	dlb_lua_push_ca(L, (const struct sockaddr *)&ss);
	return 1;
}

/* newCAFromRaw(raw, port): 4 octets (IPv4) or 16 (IPv6), network order. */
static int
l_new_ca_from_raw(lua_State *L)
{
	size_t len;
	const char *raw = luaL_checklstring(L, 1, &len);
	lua_Integer port = luaL_optinteger(L, 2, 0);
	struct sockaddr_storage ss;

	if (port < 0 || port > 65535)
		return luaL_error(L, "newCAFromRaw: invalid port %I", port);
	memset(&ss, 0, sizeof(ss));
	if (len == 4) {
		struct sockaddr_in *sin = (struct sockaddr_in *)(void *)&ss;

		sin->sin_family = AF_INET;
		sin->sin_port = htons((uint16_t)port);
		memcpy(&sin->sin_addr, raw, 4);
	} else if (len == 16) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)(void *)&ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons((uint16_t)port);
		memcpy(&sin6->sin6_addr, raw, 16);
	} else {
		return luaL_error(L, "newCAFromRaw: a raw address is 4 or 16 octets, not %d",
				  (int)len);
	}
	dlb_lua_push_ca(L, (const struct sockaddr *)&ss);
	return 1;
}

static int
l_ca_to_string(lua_State *L)
{
	struct sockaddr_storage *ss = check_ca(L, 1);
	char buf[INET6_ADDRSTRLEN];
	uint8_t *a;

	if (ca_bytes(ss, &a) == 0 || inet_ntop(ss->ss_family, a, buf, sizeof(buf)) == NULL)
		lua_pushliteral(L, "");
	else
		lua_pushstring(L, buf);
	return 1;
}

static int
l_ca_to_string_with_port(lua_State *L)
{
	struct sockaddr_storage *ss = check_ca(L, 1);
	char buf[64];

	if (ss->ss_family != AF_INET && ss->ss_family != AF_INET6) {
		lua_pushliteral(L, "");
		return 1;
	}
	dlb_sockaddr_format((const struct sockaddr *)ss, buf, sizeof(buf));
	lua_pushstring(L, buf);
	return 1;
}

static int
l_ca_get_port(lua_State *L)
{
	lua_pushinteger(L, ca_port(check_ca(L, 1)));
	return 1;
}

static int
l_ca_is_ipv4(lua_State *L)
{
	lua_pushboolean(L, check_ca(L, 1)->ss_family == AF_INET);
	return 1;
}

static int
l_ca_is_ipv6(lua_State *L)
{
	lua_pushboolean(L, check_ca(L, 1)->ss_family == AF_INET6);
	return 1;
}

/* Zero every bit of @a (@n octets) after the first @bits. */
static void
zero_after(uint8_t *a, size_t n, lua_Integer bits)
{
	for (size_t i = 0; i < n; i++) {
		lua_Integer keep = bits - (lua_Integer)i * 8;

		if (keep >= 8)
			continue;
		a[i] = keep <= 0 ? 0 : (uint8_t)(a[i] & (0xff << (8 - keep)));
	}
}

/* truncate(bits): keep the first @bits of the address, in place (the port stays). */
static int
l_ca_truncate(lua_State *L)
{
	struct sockaddr_storage *ss = check_ca(L, 1);
	lua_Integer bits = luaL_checkinteger(L, 2);
	uint8_t *a;
	size_t n = ca_bytes(ss, &a);

	if (bits < 0)
		return luaL_error(L, "truncate: invalid number of bits %I", bits);
	zero_after(a, n, bits);
	return 0;
}

static bool
ca_is_mapped(struct sockaddr_storage *ss)
{
	return ss->ss_family == AF_INET6 &&
	       IN6_IS_ADDR_V4MAPPED(&((struct sockaddr_in6 *)(void *)ss)->sin6_addr);
}

static int
l_ca_is_mapped_ipv4(lua_State *L)
{
	lua_pushboolean(L, ca_is_mapped(check_ca(L, 1)));
	return 1;
}

static int
l_ca_map_to_ipv4(lua_State *L)
{
	struct sockaddr_storage *ss = check_ca(L, 1);
	struct sockaddr_in sin;

	if (!ca_is_mapped(ss))
		return luaL_error(L, "ComboAddress can't map non-mapped IPv6 address back to IPv4");
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = ((struct sockaddr_in6 *)(void *)ss)->sin6_port;
	memcpy(&sin.sin_addr, ((struct sockaddr_in6 *)(void *)ss)->sin6_addr.s6_addr + 12, 4);
	dlb_lua_push_ca(L, (const struct sockaddr *)&sin);
	return 1;
}

static int
l_ca_eq(lua_State *L)
{
	const struct sockaddr_storage *a = dlb_lua_to_ca(L, 1);
	const struct sockaddr_storage *b = dlb_lua_to_ca(L, 2);

	lua_pushboolean(L, a != NULL && b != NULL &&
			   dlb_sockaddr_equal((const struct sockaddr *)a,
					      (const struct sockaddr *)b));
	return 1;
}

/* :ipencrypt(key) / :ipdecrypt(key): ipcipher (dnslb/core/ipcipher.h); the port is kept. */
static int
ca_ipcipher(lua_State *L, bool decrypt)
{
	struct sockaddr_storage ss = *check_ca(L, 1);
	size_t klen;
	const char *key = luaL_checklstring(L, 2, &klen);

	if (klen != DLB_IPCIPHER_KEY)
		return luaL_error(L, "Need 128 bits of key for ipcrypt");
	if (ss.ss_family == AF_INET)
		dlb_ipcipher((const uint8_t *)key, (uint8_t *)&((struct sockaddr_in *)&ss)->sin_addr,
			     4, decrypt);
	else
		dlb_ipcipher((const uint8_t *)key,
			     ((struct sockaddr_in6 *)&ss)->sin6_addr.s6_addr, 16, decrypt);
	dlb_lua_push_ca(L, (const struct sockaddr *)&ss);
	return 1;
}

static int
l_ca_ipencrypt(lua_State *L)
{
	return ca_ipcipher(L, false);
}

static int
l_ca_ipdecrypt(lua_State *L)
{
	return ca_ipcipher(L, true);
}

static const luaL_Reg ca_methods[] = {
	{ "toString", l_ca_to_string },
	{ "tostring", l_ca_to_string },
	{ "toStringWithPort", l_ca_to_string_with_port },
	{ "tostringWithPort", l_ca_to_string_with_port },
	{ "getPort", l_ca_get_port },
	{ "isIPv4", l_ca_is_ipv4 },
	{ "isIPv6", l_ca_is_ipv6 },
	{ "truncate", l_ca_truncate },
	{ "isMappedIPv4", l_ca_is_mapped_ipv4 },
	{ "mapToIPv4", l_ca_map_to_ipv4 },
	{ "ipencrypt", l_ca_ipencrypt },
	{ "ipdecrypt", l_ca_ipdecrypt },
	{ NULL, NULL },
};

/* ---- Netmask ------------------------------------------------------------------ */

static struct dlb_netmask *
check_netmask(lua_State *L, int idx)
{
	return luaL_checkudata(L, idx, MT_NETMASK);
}

/* A netmask argument: a Netmask, or a string ("192.0.2.0/24", "::1"). */
static void
arg_netmask(lua_State *L, int idx, const char *fn, struct dlb_netmask *out)
{
	const struct dlb_netmask *nm = luaL_testudata(L, idx, MT_NETMASK);
	const char *s;

	if (nm != NULL) {
		*out = *nm;
		return;
	}
	if (lua_type(L, idx) != LUA_TSTRING) {
		luaL_error(L, "%s: expected a Netmask or a netmask string, got %s", fn,
			   luaL_typename(L, idx));
		return;
	}
	s = lua_tostring(L, idx);
	if (s[0] == '!')
		luaL_error(L, "%s: negated netmasks ('%s') are not supported", fn, s);
	if (dlb_netmask_parse(s, out) != 0)
		luaL_error(L, "Unable to convert '%s' to a netmask", s);
}

static void
push_netmask(lua_State *L, const struct dlb_netmask *nm)
{
	struct dlb_netmask *u = lua_newuserdatauv(L, sizeof(*u), 0);

	*u = *nm;
	luaL_setmetatable(L, MT_NETMASK);
}

/* newNetmask("192.0.2.0/24") or newNetmask(ComboAddress, bits) */
static int
l_new_netmask(lua_State *L)
{
	const struct sockaddr_storage *ca = dlb_lua_to_ca(L, 1);
	struct dlb_netmask nm;

	if (ca != NULL) {
		struct sockaddr_storage ss = *ca;
		lua_Integer bits = luaL_checkinteger(L, 2);
		uint8_t *a;
		size_t n = ca_bytes(&ss, &a);

		if (n == 0 || bits < 0 || bits > (lua_Integer)n * 8)
			return luaL_error(L, "newNetmask: invalid prefix length %I", bits);
		memset(&nm, 0, sizeof(nm));
		nm.family = (uint8_t)ss.ss_family;
		nm.bits = (uint8_t)bits;
		memcpy(nm.addr, a, n);
		zero_after(nm.addr, n, bits);
	} else {
		luaL_checktype(L, 1, LUA_TSTRING);
		arg_netmask(L, 1, "newNetmask", &nm);
	}
	push_netmask(L, &nm);
	return 1;
}

static void
push_netmask_network(lua_State *L, const struct dlb_netmask *nm)
{
	struct sockaddr_storage ss;

	memset(&ss, 0, sizeof(ss));
	if (nm->family == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)(void *)&ss;

		sin->sin_family = AF_INET;
		memcpy(&sin->sin_addr, nm->addr, 4);
	} else {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)(void *)&ss;

		sin6->sin6_family = AF_INET6;
		memcpy(&sin6->sin6_addr, nm->addr, 16);
	}
	dlb_lua_push_ca(L, (const struct sockaddr *)&ss);
}

/* The address is stored with its host bits zeroed, so both are the same. */
static int
l_netmask_get_network(lua_State *L)
{
	push_netmask_network(L, check_netmask(L, 1));
	return 1;
}

static int
l_netmask_get_bits(lua_State *L)
{
	lua_pushinteger(L, check_netmask(L, 1)->bits);
	return 1;
}

static int
l_netmask_match(lua_State *L)
{
	const struct dlb_netmask *nm = check_netmask(L, 1);
	struct sockaddr_storage ss;

	arg_address(L, 2, "match", &ss);
	lua_pushboolean(L, dlb_netmask_match(nm, (const struct sockaddr *)&ss));
	return 1;
}

static int
l_netmask_is_ipv4(lua_State *L)
{
	lua_pushboolean(L, check_netmask(L, 1)->family == AF_INET);
	return 1;
}

static int
l_netmask_is_ipv6(lua_State *L)
{
	lua_pushboolean(L, check_netmask(L, 1)->family == AF_INET6);
	return 1;
}

static int
l_netmask_to_string(lua_State *L)
{
	char buf[64];

	dlb_netmask_format(check_netmask(L, 1), buf, sizeof(buf));
	lua_pushstring(L, buf);
	return 1;
}

static int
l_netmask_empty(lua_State *L)
{
	check_netmask(L, 1);
	lua_pushboolean(L, 0);
	return 1;
}

static int
l_netmask_eq(lua_State *L)
{
	const struct dlb_netmask *a = luaL_testudata(L, 1, MT_NETMASK);
	const struct dlb_netmask *b = luaL_testudata(L, 2, MT_NETMASK);

	lua_pushboolean(L, a != NULL && b != NULL && a->family == b->family &&
			   a->bits == b->bits &&
			   memcmp(a->addr, b->addr, a->family == AF_INET ? 4 : 16) == 0);
	return 1;
}

static const luaL_Reg netmask_methods[] = {
	{ "getNetwork", l_netmask_get_network },
	{ "getMaskedNetwork", l_netmask_get_network },
	{ "getBits", l_netmask_get_bits },
	{ "match", l_netmask_match },
	{ "isIPv4", l_netmask_is_ipv4 },
	{ "isIPv6", l_netmask_is_ipv6 },
	{ "toString", l_netmask_to_string },
	{ "empty", l_netmask_empty },
	{ NULL, NULL },
};

/* ---- NetmaskGroup --------------------------------------------------------------- */

struct dlb_nmg *
dlb_lua_to_nmg(lua_State *L, int idx)
{
	return luaL_testudata(L, idx, MT_NMG);
}

static struct dlb_nmg *
check_nmg(lua_State *L, int idx)
{
	return luaL_checkudata(L, idx, MT_NMG);
}

static int
l_new_nmg(lua_State *L)
{
	struct dlb_nmg *g = lua_newuserdatauv(L, sizeof(*g), 0);

	dlb_nmg_init(g);
	luaL_setmetatable(L, MT_NMG);
	return 1;
}

static int
l_nmg_gc(lua_State *L)
{
	dlb_nmg_deinit(check_nmg(L, 1));
	return 0;
}

static int
l_nmg_add_mask(lua_State *L)
{
	struct dlb_nmg *g = check_nmg(L, 1);
	struct dlb_netmask nm;

	arg_netmask(L, 2, "addMask", &nm);
	if (dlb_nmg_add(g, &nm) != 0)
		return luaL_error(L, "addMask: out of memory");
	return 0;
}

/*
 * addMasks(t): an array of netmasks (strings or Netmasks), or, as dnsdist
 * 1.7 takes it, a table whose keys are addresses or netmasks.
 */
static int
l_nmg_add_masks(lua_State *L)
{
	struct dlb_nmg *g = check_nmg(L, 1);

	luaL_checktype(L, 2, LUA_TTABLE);
	for (int pass = 0; pass < 2; pass++) {	/* check everything, then add */
		lua_pushnil(L);
		while (lua_next(L, 2) != 0) {
			int at = lua_absindex(L, lua_type(L, -2) == LUA_TNUMBER ? -1 : -2);
			const struct sockaddr_storage *ca = dlb_lua_to_ca(L, at);
			struct dlb_netmask nm;

			if (ca != NULL) {
				char text[64];
				uint8_t *a;
				struct sockaddr_storage ss = *ca;

				if (ca_bytes(&ss, &a) == 0 ||
				    inet_ntop(ss.ss_family, a, text, sizeof(text)) == NULL ||
				    dlb_netmask_parse(text, &nm) != 0)
					return luaL_error(L, "addMasks: invalid address");
			} else {
				arg_netmask(L, at, "addMasks", &nm);
			}
			if (pass == 1 && dlb_nmg_add(g, &nm) != 0)
				return luaL_error(L, "addMasks: out of memory");
			lua_pop(L, 1);
		}
	}
	return 0;
}

static int
l_nmg_match(lua_State *L)
{
	const struct dlb_nmg *g = check_nmg(L, 1);
	struct sockaddr_storage ss;

	arg_address(L, 2, "match", &ss);
	lua_pushboolean(L, dlb_nmg_match(g, (const struct sockaddr *)&ss));
	return 1;
}

static int
l_nmg_size(lua_State *L)
{
	lua_pushinteger(L, (lua_Integer)check_nmg(L, 1)->n);
	return 1;
}

static int
l_nmg_clear(lua_State *L)
{
	dlb_nmg_clear(check_nmg(L, 1));
	return 0;
}

/* "NetmaskGroup 10.0.0.0/8, 192.0.2.0/24, 2001:db8::/32", as dnsdist prints it */
static int
l_nmg_to_string(lua_State *L)
{
	const struct dlb_nmg *g = check_nmg(L, 1);
	luaL_Buffer b;

	luaL_buffinit(L, &b);
	luaL_addstring(&b, "NetmaskGroup ");
	for (size_t i = 0; i < g->n; i++) {
		char buf[64];

		dlb_netmask_format(&g->v[i], buf, sizeof(buf));
		if (i > 0)
			luaL_addstring(&b, ", ");
		luaL_addstring(&b, buf);
	}
	luaL_pushresult(&b);
	return 1;
}

static const luaL_Reg nmg_methods[] = {
	{ "addMask", l_nmg_add_mask },
	{ "addMasks", l_nmg_add_masks },
	{ "match", l_nmg_match },
	{ "size", l_nmg_size },
	{ "clear", l_nmg_clear },
	{ "toString", l_nmg_to_string },
	{ NULL, NULL },
};

/* ---- SuffixMatchNode and DNSNameSet ------------------------------------------------ */

struct dlb_suffix_set *
dlb_lua_to_smn(lua_State *L, int idx)
{
	struct lsmn *u = luaL_testudata(L, idx, MT_SMN);

	return u != NULL ? u->s : NULL;
}

struct dlb_name_set *
dlb_lua_to_nameset(lua_State *L, int idx)
{
	struct lnameset *u = luaL_testudata(L, idx, MT_NAMESET);

	return u != NULL ? u->s : NULL;
}

/* (NULL once finalized: a script may call __gc itself through getmetatable) */
static struct dlb_suffix_set *
check_smn(lua_State *L, int idx)
{
	struct dlb_suffix_set *s = ((struct lsmn *)luaL_checkudata(L, idx, MT_SMN))->s;

	if (s == NULL)
		luaL_error(L, "this SuffixMatchNode was finalized");
	return s;
}

static struct dlb_name_set *
check_nameset(lua_State *L, int idx)
{
	struct dlb_name_set *s = ((struct lnameset *)luaL_checkudata(L, idx, MT_NAMESET))->s;

	if (s == NULL)
		luaL_error(L, "this DNSNameSet was finalized");
	return s;
}

typedef void name_op_fn(lua_State *L, void *set, const uint8_t *lc, size_t len);

/*
 * Apply @op to the name at @idx, or to every name of the table at @idx
 * (all checked before the first is applied).
 */
static void
each_name(lua_State *L, int idx, const char *fn, void *set, name_op_fn *op)
{
	uint8_t lc[DLB_MAX_NAME];
	size_t len;

	if (lua_type(L, idx) != LUA_TTABLE) {
		len = dlb_lua_check_name_lc(L, idx, fn, lc);
		op(L, set, lc, len);
		return;
	}
	for (int pass = 0; pass < 2; pass++) {
		lua_pushnil(L);
		while (lua_next(L, idx) != 0) {
			len = dlb_lua_check_name_lc(L, lua_gettop(L), fn, lc);
			if (pass == 1)
				op(L, set, lc, len);
			lua_pop(L, 1);
		}
	}
}

static void
smn_add_op(lua_State *L, void *set, const uint8_t *lc, size_t len)
{
	if (dlb_suffix_set_add(set, lc, len) != 0)
		luaL_error(L, "add: out of memory");
}

static void
smn_remove_op(lua_State *L, void *set, const uint8_t *lc, size_t len)
{
	(void)L;
	dlb_suffix_set_remove(set, lc, len);
}

static int
l_new_smn(lua_State *L)
{
	struct lsmn *u = lua_newuserdatauv(L, sizeof(*u), 0);

	u->s = NULL;
	luaL_setmetatable(L, MT_SMN);	/* from here __gc frees whatever u->s holds */
	u->s = dlb_suffix_set_new();
	if (u->s == NULL)
		return luaL_error(L, "newSuffixMatchNode: out of memory");
	return 1;
}

static int
l_smn_gc(lua_State *L)
{
	struct lsmn *u = luaL_checkudata(L, 1, MT_SMN);

	dlb_suffix_set_free(u->s);
	u->s = NULL;
	return 0;
}

static int
l_smn_add(lua_State *L)
{
	each_name(L, 2, "add", check_smn(L, 1), smn_add_op);
	return 0;
}

static int
l_smn_remove(lua_State *L)
{
	each_name(L, 2, "remove", check_smn(L, 1), smn_remove_op);
	return 0;
}

static int
l_smn_check(lua_State *L)
{
	const struct dlb_suffix_set *s = check_smn(L, 1);
	uint8_t lc[DLB_MAX_NAME];
	size_t len = dlb_lua_check_name_lc(L, 2, "check", lc);

	lua_pushboolean(L, dlb_suffix_set_match(s, lc, len));
	return 1;
}

static int
l_smn_size(lua_State *L)
{
	lua_pushinteger(L, (lua_Integer)dlb_suffix_set_count(check_smn(L, 1)));
	return 1;
}

static int
l_smn_to_string(lua_State *L)
{
	const struct dlb_suffix_set *s = check_smn(L, 1);
	char buf[4096];

	dlb_suffix_set_format(s, buf, sizeof(buf));
	lua_pushfstring(L, "SuffixMatchNode %s", buf);
	return 1;
}

static const luaL_Reg smn_methods[] = {
	{ "add", l_smn_add },
	{ "remove", l_smn_remove },
	{ "check", l_smn_check },
	{ "size", l_smn_size },
	{ NULL, NULL },
};

static void
nameset_add_op(lua_State *L, void *set, const uint8_t *lc, size_t len)
{
	if (dlb_name_set_add(set, lc, len) != 0)
		luaL_error(L, "add: out of memory");
}

static int
l_new_nameset(lua_State *L)
{
	struct lnameset *u = lua_newuserdatauv(L, sizeof(*u), 0);

	u->s = NULL;
	luaL_setmetatable(L, MT_NAMESET);
	u->s = dlb_name_set_new();
	if (u->s == NULL)
		return luaL_error(L, "newDNSNameSet: out of memory");
	return 1;
}

static int
l_nameset_gc(lua_State *L)
{
	struct lnameset *u = luaL_checkudata(L, 1, MT_NAMESET);

	dlb_name_set_free(u->s);
	u->s = NULL;
	return 0;
}

static int
l_nameset_add(lua_State *L)
{
	each_name(L, 2, "add", check_nameset(L, 1), nameset_add_op);
	return 0;
}

static int
l_nameset_check(lua_State *L)
{
	const struct dlb_name_set *s = check_nameset(L, 1);
	uint8_t lc[DLB_MAX_NAME];
	size_t len = dlb_lua_check_name_lc(L, 2, "check", lc);

	lua_pushboolean(L, dlb_name_set_match(s, lc, len));
	return 1;
}

/* delete(name): @return how many were removed (1 or 0), as dnsdist */
static int
l_nameset_delete(lua_State *L)
{
	struct dlb_name_set *s = check_nameset(L, 1);
	uint8_t lc[DLB_MAX_NAME];
	size_t len = dlb_lua_check_name_lc(L, 2, "delete", lc);

	lua_pushinteger(L, dlb_name_set_remove(s, lc, len) ? 1 : 0);
	return 1;
}

static int
l_nameset_size(lua_State *L)
{
	lua_pushinteger(L, (lua_Integer)dlb_name_set_count(check_nameset(L, 1)));
	return 1;
}

static int
l_nameset_clear(lua_State *L)
{
	dlb_name_set_clear(check_nameset(L, 1));
	return 0;
}

static int
l_nameset_empty(lua_State *L)
{
	lua_pushboolean(L, dlb_name_set_count(check_nameset(L, 1)) == 0);
	return 1;
}

/*
 * toString(): each name without its final dot, followed by a newline, as
 * dnsdist prints it (sorted here; dnsdist's order is its hash table's).
 * Built from dlb_name_set_format's "a.example., b.example." (names never
 * contain ", ": the space is escaped as \032).
 */
static int
l_nameset_to_string(lua_State *L)
{
	const struct dlb_name_set *s = check_nameset(L, 1);
	size_t n = dlb_name_set_count(s), sz = n * 300 + 64;
	char *buf, *p;
	luaL_Buffer b;

	if (sz > (size_t)4 << 20)
		sz = (size_t)4 << 20;
	buf = lua_newuserdatauv(L, sz, 0);
	dlb_name_set_format(s, buf, sz);
	luaL_buffinit(L, &b);
	for (p = buf; n > 0 && *p != '\0';) {
		char *end = strstr(p, ", ");
		size_t len = end != NULL ? (size_t)(end - p) : strlen(p);

		if (len > 1 && p[len - 1] == '.')
			luaL_addlstring(&b, p, len - 1);
		else
			luaL_addlstring(&b, p, len);
		luaL_addchar(&b, '\n');
		if (end == NULL)
			break;
		p = end + 2;
	}
	luaL_pushresult(&b);
	return 1;
}

static const luaL_Reg nameset_methods[] = {
	{ "add", l_nameset_add },
	{ "check", l_nameset_check },
	{ "delete", l_nameset_delete },
	{ "size", l_nameset_size },
	{ "clear", l_nameset_clear },
	{ "empty", l_nameset_empty },
	{ "toString", l_nameset_to_string },
	{ NULL, NULL },
};

/* ---- QPSLimiter ------------------------------------------------------------------ */

/* The process-wide buckets, in creation order per config state (origin). */
struct qps_slot {
	unsigned long origin;
	struct dlb_bucket *b;
};

static struct qps_slot *qps_slots;
static size_t qps_nslots, qps_capslots;
/* registry key of this state's count of newQPSLimiter() calls */
static const char qps_count_key = 'q';

static double
mono_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The @k-th (from 1) shared bucket of @origin, or NULL. */
static struct dlb_bucket *
qps_slot_find(unsigned long origin, lua_Integer k)
{
	for (size_t i = 0; i < qps_nslots; i++)
		if (qps_slots[i].origin == origin && --k == 0)
			return qps_slots[i].b;
	return NULL;
}

static struct dlb_bucket *
qps_slot_add(unsigned long origin, double rate, double burst)
{
	struct dlb_bucket *b;

	if (qps_nslots == qps_capslots) {
		size_t ncap = qps_capslots ? qps_capslots * 2 : 16;
		struct qps_slot *v = realloc(qps_slots, ncap * sizeof(*v));

		if (v == NULL)
			return NULL;
		qps_slots = v;
		qps_capslots = ncap;
	}
	b = malloc(sizeof(*b));
	if (b == NULL)
		return NULL;
	dlb_bucket_init(b, rate, burst);
	qps_slots[qps_nslots].origin = origin;
	qps_slots[qps_nslots].b = b;
	qps_nslots++;
	return b;
}

static int
l_new_qps_limiter(lua_State *L)
{
	lua_Integer rate = luaL_checkinteger(L, 1), burst = luaL_checkinteger(L, 2), k;
	struct dlb_lua_conf *lc = dlb_lua_conf_of(L);
	enum dlb_lua_phase phase = lc != NULL ? dlb_lua_conf_phase(lc) : DLB_LUA_PHASE_CONFIG;
	struct lqps *u;

	if (rate < 0 || burst < 0)
		return luaL_error(L, "newQPSLimiter: rate and burst must not be negative");
	u = lua_newuserdatauv(L, sizeof(*u), 0);
	dlb_bucket_init(&u->own, (double)rate, (double)burst);
	u->b = &u->own;
	luaL_setmetatable(L, MT_QPS);
	if (phase == DLB_LUA_PHASE_RULES || lc == NULL)
		return 1;	/* made by a rule: private to this state */

	lua_rawgetp(L, LUA_REGISTRYINDEX, &qps_count_key);
	k = lua_tointeger(L, -1) + 1;
	lua_pop(L, 1);
	lua_pushinteger(L, k);
	lua_rawsetp(L, LUA_REGISTRYINDEX, &qps_count_key);

	if (phase == DLB_LUA_PHASE_WORKER) {
		struct dlb_bucket *b = qps_slot_find(dlb_lua_conf_origin(lc), k);

		/* none (or not the same limiter): a config that is not deterministic */
		if (b != NULL && b->rate == (double)rate && b->burst == (double)burst)
			u->b = b;
		return 1;
	}
	u->b = qps_slot_add(dlb_lua_conf_origin(lc), (double)rate, (double)burst);
	if (u->b == NULL) {
		u->b = &u->own;
		return luaL_error(L, "newQPSLimiter: out of memory");
	}
	return 1;
}

static int
l_qps_check(lua_State *L)
{
	struct lqps *u = luaL_checkudata(L, 1, MT_QPS);

	lua_pushboolean(L, dlb_bucket_take(u->b, mono_now()));
	return 1;
}

static int
l_qps_to_string(lua_State *L)
{
	struct lqps *u = luaL_checkudata(L, 1, MT_QPS);

	lua_pushfstring(L, "QPSLimiter(%I, %I)", (lua_Integer)u->b->rate,
			(lua_Integer)u->b->burst);
	return 1;
}

static const luaL_Reg qps_methods[] = {
	{ "check", l_qps_check },
	{ NULL, NULL },
};

/* ---- registration ------------------------------------------------------------------ */

static const struct {
	const char *name;
	const luaL_Reg *methods;
	lua_CFunction tostring, eq, gc;
} object_types[] = {
	{ MT_NAME, name_methods, l_name_to_string, l_name_eq, NULL },
	{ MT_CA, ca_methods, l_ca_to_string, l_ca_eq, NULL },
	{ MT_NETMASK, netmask_methods, l_netmask_to_string, l_netmask_eq, NULL },
	{ MT_NMG, nmg_methods, l_nmg_to_string, NULL, l_nmg_gc },
	{ MT_SMN, smn_methods, l_smn_to_string, NULL, l_smn_gc },
	{ MT_NAMESET, nameset_methods, l_nameset_to_string, NULL, l_nameset_gc },
	{ MT_QPS, qps_methods, l_qps_to_string, NULL, NULL },
};

static const luaL_Reg constructors[] = {
	{ "newDNSName", l_new_dnsname },
	{ "newDNSNameFromRaw", l_new_dnsname_from_raw },
	{ "newCA", l_new_ca },
	{ "newCAFromRaw", l_new_ca_from_raw },
	{ "newNetmask", l_new_netmask },
	{ "newNMG", l_new_nmg },
	{ "newSuffixMatchNode", l_new_smn },
	{ "newDNSNameSet", l_new_nameset },
	{ "newQPSLimiter", l_new_qps_limiter },
	{ NULL, NULL },
};

void
dlb_lua_objects_register(lua_State *L)
{
	for (size_t i = 0; i < sizeof(object_types) / sizeof(object_types[0]); i++) {
		luaL_newmetatable(L, object_types[i].name);
		lua_newtable(L);
		luaL_setfuncs(L, object_types[i].methods, 0);
		lua_setfield(L, -2, "__index");
		lua_pushcfunction(L, object_types[i].tostring);
		lua_setfield(L, -2, "__tostring");
		if (object_types[i].eq != NULL) {
			lua_pushcfunction(L, object_types[i].eq);
			lua_setfield(L, -2, "__eq");
		}
		if (object_types[i].gc != NULL) {
			lua_pushcfunction(L, object_types[i].gc);
			lua_setfield(L, -2, "__gc");
		}
		lua_pop(L, 1);
	}
	lua_pushglobaltable(L);
	luaL_setfuncs(L, constructors, 0);
	lua_pop(L, 1);
}
