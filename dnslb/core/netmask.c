/*
 * netmask.c - IPv4/IPv6 netmasks, netmask groups and socket addresses.
 *
 * A group is a sorted array (family, then address, then prefix length), so
 * duplicates are found by binary search and showACL() prints a stable order.
 * Matching is a linear scan: ACLs hold a handful of entries, and a scan over
 * a small contiguous array beats a trie at that size.
 *
 * An IPv4-mapped IPv6 source (::ffff:192.0.2.1, seen on dual-stack sockets)
 * matches IPv4 netmasks as if it were the IPv4 address.
 *
 * Thread: building is main-thread only; matching is pure over read-only data.
 */
#include "dnslb/core/netmask.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/core/dnslb.h"

/* Parse a decimal number no larger than @max: digits only, no sign or spaces. */
static int
parse_uint(const char *s, unsigned long max, unsigned long *out)
{
	unsigned long v = 0;

	if (*s == '\0')
		return -1;
	for (; *s; s++) {
		if (!isdigit((unsigned char)*s))
			return -1;
		v = v * 10 + (unsigned long)(*s - '0');
		if (v > max)
			return -1;
	}
	*out = v;
	return 0;
}

static void
zero_host_bits(uint8_t *addr, size_t len, unsigned bits)
{
	for (size_t i = 0; i < len; i++) {
		unsigned lo = (unsigned)i * 8;

		if (bits >= lo + 8)
			continue;
		if (bits <= lo)
			addr[i] = 0;
		else
			addr[i] &= (uint8_t)(0xff << (8 - (bits - lo)));
	}
}

int
dlb_netmask_parse(const char *s, struct dlb_netmask *out)
{
	char buf[INET6_ADDRSTRLEN + 8];
	const char *slash;
	size_t alen;
	unsigned long bits = 0;
	bool have_bits = false;

	if (s == NULL)
		return -1;
	slash = strchr(s, '/');
	alen = slash ? (size_t)(slash - s) : strlen(s);
	if (alen == 0 || alen >= sizeof(buf))
		return -1;
	memcpy(buf, s, alen);
	buf[alen] = '\0';
	if (slash) {
		if (parse_uint(slash + 1, 128, &bits) != 0)
			return -1;
		have_bits = true;
	}

	memset(out, 0, sizeof(*out));
	if (inet_pton(AF_INET, buf, out->addr) == 1) {
		if (bits > 32)
			return -1;
		out->family = AF_INET;
		out->bits = have_bits ? (uint8_t)bits : 32;
		zero_host_bits(out->addr, 4, out->bits);
		return 0;
	}
	if (inet_pton(AF_INET6, buf, out->addr) == 1) {
		out->family = AF_INET6;
		out->bits = have_bits ? (uint8_t)bits : 128;
		zero_host_bits(out->addr, 16, out->bits);
		return 0;
	}
	return -1;
}

void
dlb_netmask_format(const struct dlb_netmask *nm, char *out, size_t outsz)
{
	char a[INET6_ADDRSTRLEN];

	if (inet_ntop(nm->family, nm->addr, a, sizeof(a)) == NULL)
		snprintf(a, sizeof(a), "?");
	snprintf(out, outsz, "%s/%u", a, nm->bits);
}

/* Does @addr (the family's width) lie inside @nm? 32 bits a step, so an
 * IPv4 check is one compare (the ACL is checked for every query); reads
 * only the bytes the prefix covers, rounded up to 4 (bits <= the width). */
static bool
prefix_match(const struct dlb_netmask *nm, const uint8_t *addr)
{
	unsigned bits = nm->bits;

	for (size_t i = 0; bits > 0; i += 4) {
		uint32_t a, n, mask = bits >= 32 ? UINT32_MAX : ~(UINT32_MAX >> bits);

		memcpy(&a, addr + i, 4);
		memcpy(&n, nm->addr + i, 4);
		if ((ntohl(a ^ n) & mask) != 0)
			return false;
		bits = bits >= 32 ? bits - 32 : 0;
	}
	return true;
}

/*
 * Point @addr at the address bytes of @sa, as seen by a netmask of family
 * @family. @return false when the families cannot match.
 */
static bool
sockaddr_bytes(const struct sockaddr *sa, int family, const uint8_t **addr)
{
	static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	if (sa->sa_family == AF_INET) {
		if (family != AF_INET)
			return false;
		*addr = (const uint8_t *)&((const struct sockaddr_in *)(const void *)sa)->sin_addr;
		return true;
	}
	if (sa->sa_family == AF_INET6) {
		const uint8_t *a6 =
			((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr.s6_addr;

		if (family == AF_INET6) {
			*addr = a6;
			return true;
		}
		if (family == AF_INET && memcmp(a6, v4mapped, sizeof(v4mapped)) == 0) {
			*addr = a6 + 12;
			return true;
		}
	}
	return false;
}

bool
dlb_netmask_match(const struct dlb_netmask *nm, const struct sockaddr *sa)
{
	const uint8_t *addr;

	if (!sockaddr_bytes(sa, nm->family, &addr))
		return false;
	return prefix_match(nm, addr);
}

void
dlb_nmg_init(struct dlb_nmg *g)
{
	g->v = NULL;
	g->n = 0;
	g->cap = 0;
	g->n4 = 0;
}

/* Repeat the first IPv4 netmasks of @g in fast4 (after every change). */
static void
nmg_index(struct dlb_nmg *g)
{
	uint32_t k = 0;

	for (; k < g->n && k < DLB_NMG_FAST4 && g->v[k].family == AF_INET; k++) {
		unsigned bits = g->v[k].bits;
		uint32_t n;

		memcpy(&n, g->v[k].addr, 4);
		g->fast4[k][0] = ntohl(n);
		g->fast4[k][1] = bits == 0 ? 0 : 0xffffffffu << (32 - bits);
	}
	g->n4 = k;
}

void
dlb_nmg_deinit(struct dlb_nmg *g)
{
	free(g->v);
	dlb_nmg_init(g);
}

void
dlb_nmg_clear(struct dlb_nmg *g)
{
	g->n = 0;
	g->n4 = 0;
}

/* Group order: family, address, prefix length. */
static int
netmask_cmp(const struct dlb_netmask *a, const struct dlb_netmask *b)
{
	int c;

	if (a->family != b->family)
		return a->family == AF_INET ? -1 : 1;
	c = memcmp(a->addr, b->addr, sizeof(a->addr));
	if (c != 0)
		return c;
	return (int)a->bits - (int)b->bits;
}

/* Index of @nm in @g, or the insertion point (*@found false). */
static size_t
nmg_search(const struct dlb_nmg *g, const struct dlb_netmask *nm, bool *found)
{
	size_t lo = 0, hi = g->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = netmask_cmp(&g->v[mid], nm);

		if (c == 0) {
			*found = true;
			return mid;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = false;
	return lo;
}

/* A copy of @nm that compares equal byte for byte to any equal netmask. */
static void
normalise(const struct dlb_netmask *nm, struct dlb_netmask *clean)
{
	memset(clean, 0, sizeof(*clean));
	clean->family = nm->family;
	clean->bits = nm->bits;
	memcpy(clean->addr, nm->addr, nm->family == AF_INET ? 4 : 16);
	zero_host_bits(clean->addr, sizeof(clean->addr), clean->bits);
}

int
dlb_nmg_add(struct dlb_nmg *g, const struct dlb_netmask *nm)
{
	struct dlb_netmask clean;
	bool found;
	size_t pos;

	normalise(nm, &clean);

	pos = nmg_search(g, &clean, &found);
	if (found)
		return 0;
	if (g->n == g->cap) {
		size_t ncap = g->cap ? g->cap * 2 : 16;
		struct dlb_netmask *nv = realloc(g->v, ncap * sizeof(*nv));

		if (nv == NULL)
			return -1;
		g->v = nv;
		g->cap = ncap;
	}
	memmove(&g->v[pos + 1], &g->v[pos], (g->n - pos) * sizeof(*g->v));
	g->v[pos] = clean;
	g->n++;
	nmg_index(g);
	return 0;
}

bool
dlb_nmg_remove(struct dlb_nmg *g, const struct dlb_netmask *nm)
{
	struct dlb_netmask clean;
	bool found;
	size_t pos;

	normalise(nm, &clean);

	pos = nmg_search(g, &clean, &found);
	if (!found)
		return false;
	memmove(&g->v[pos], &g->v[pos + 1], (g->n - pos - 1) * sizeof(*g->v));
	g->n--;
	nmg_index(g);
	return true;
}

DLB_HOT bool
dlb_nmg_match(const struct dlb_nmg *g, const struct sockaddr *sa)
{
	const uint8_t *a4 = NULL, *a6 = NULL;
	size_t i = 0;

	/* the address as each family's netmasks see it, found once */
	if (!sockaddr_bytes(sa, AF_INET, &a4))
		a4 = NULL;
	if (!sockaddr_bytes(sa, AF_INET6, &a6))
		a6 = NULL;
	if (a4 != NULL) {
		/* IPv4 netmasks come first (netmask_cmp): one masked compare each,
		 * the first ones from fast4 */
		uint32_t a;

		memcpy(&a, a4, 4);
		a = ntohl(a);
		for (; i < g->n4; i++)
			if ((a & g->fast4[i][1]) == g->fast4[i][0])
				return true;
		for (; i < g->n && g->v[i].family == AF_INET; i++) {
			unsigned bits = g->v[i].bits;
			uint32_t n;

			memcpy(&n, g->v[i].addr, 4);
			if (bits == 0 || ((ntohl(n) ^ a) >> (32 - bits)) == 0)
				return true;
		}
	}
	for (; i < g->n; i++) {
		const uint8_t *addr = g->v[i].family == AF_INET ? a4 : a6;

		if (addr != NULL && prefix_match(&g->v[i], addr))
			return true;
	}
	return false;
}

int
dlb_nmg_copy(struct dlb_nmg *dst, const struct dlb_nmg *src)
{
	struct dlb_netmask *nv = NULL;

	if (src->n > 0) {
		nv = malloc(src->n * sizeof(*nv));
		if (nv == NULL)
			return -1;
		memcpy(nv, src->v, src->n * sizeof(*nv));
	}
	free(dst->v);
	dst->v = nv;
	dst->n = src->n;
	dst->cap = src->n;
	nmg_index(dst);
	return 0;
}

/*
 * "fe80::1%eth0" / "fe80::1%2": the scope is an interface name or index.
 * @return 0, or -1 for an unknown interface.
 */
static int
parse_v6_scope(char *addr, uint32_t *scope)
{
	char *pct = strchr(addr, '%');
	unsigned long idx;

	*scope = 0;
	if (pct == NULL)
		return 0;
	*pct++ = '\0';
	if (parse_uint(pct, UINT32_MAX, &idx) == 0) {
		*scope = (uint32_t)idx;
		return 0;
	}
	idx = if_nametoindex(pct);
	if (idx == 0)
		return -1;
	*scope = (uint32_t)idx;
	return 0;
}

int
dlb_sockaddr_parse(const char *s, uint16_t default_port, struct sockaddr_storage *ss,
		   socklen_t *len)
{
	char host[INET6_ADDRSTRLEN + IF_NAMESIZE + 2];
	const char *port = NULL;
	unsigned long portnum = default_port;
	size_t hlen;

	if (s == NULL || *s == '\0')
		return -1;
	memset(ss, 0, sizeof(*ss));

	if (s[0] == '[') {
		const char *end = strchr(s, ']');

		if (end == NULL)
			return -1;
		hlen = (size_t)(end - s - 1);
		if (end[1] == ':')
			port = end + 2;
		else if (end[1] != '\0')
			return -1;
		if (hlen == 0 || hlen >= sizeof(host))
			return -1;
		memcpy(host, s + 1, hlen);
		host[hlen] = '\0';
	} else {
		const char *colon = strchr(s, ':');

		/* One colon: "a.b.c.d:port". More: a bare IPv6 address without a port. */
		if (colon != NULL && strchr(colon + 1, ':') == NULL) {
			hlen = (size_t)(colon - s);
			port = colon + 1;
		} else {
			hlen = strlen(s);
		}
		if (hlen == 0 || hlen >= sizeof(host))
			return -1;
		memcpy(host, s, hlen);
		host[hlen] = '\0';
	}
	if (port != NULL && parse_uint(port, 65535, &portnum) != 0)
		return -1;

	if (s[0] != '[') {
		struct sockaddr_in *sin = (struct sockaddr_in *)(void *)ss;

		if (inet_pton(AF_INET, host, &sin->sin_addr) == 1) {
			sin->sin_family = AF_INET;
			sin->sin_port = htons((uint16_t)portnum);
			*len = sizeof(*sin);
			return 0;
		}
		/* "::1:53" would be read as "::1" port 53: refuse a port without brackets. */
		if (port != NULL)
			return -1;
	}

	{
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)(void *)ss;
		uint32_t scope;

		if (parse_v6_scope(host, &scope) != 0)
			return -1;
		if (inet_pton(AF_INET6, host, &sin6->sin6_addr) != 1)
			return -1;
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons((uint16_t)portnum);
		sin6->sin6_scope_id = scope;
		*len = sizeof(*sin6);
	}
	return 0;
}

void
dlb_sockaddr_format(const struct sockaddr *sa, char *out, size_t outsz)
{
	char a[INET6_ADDRSTRLEN];

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)(const void *)sa;

		inet_ntop(AF_INET, &sin->sin_addr, a, sizeof(a));
		snprintf(out, outsz, "%s:%u", a, ntohs(sin->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)(const void *)sa;

		inet_ntop(AF_INET6, &sin6->sin6_addr, a, sizeof(a));
		if (sin6->sin6_scope_id != 0)
			snprintf(out, outsz, "[%s%%%u]:%u", a, (unsigned)sin6->sin6_scope_id,
				 ntohs(sin6->sin6_port));
		else
			snprintf(out, outsz, "[%s]:%u", a, ntohs(sin6->sin6_port));
	} else {
		snprintf(out, outsz, "(unknown family %d)", sa->sa_family);
	}
}

bool
dlb_sockaddr_equal(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET) {
		const struct sockaddr_in *x = (const struct sockaddr_in *)(const void *)a;
		const struct sockaddr_in *y = (const struct sockaddr_in *)(const void *)b;

		return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	if (a->sa_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const struct sockaddr_in6 *)(const void *)a;
		const struct sockaddr_in6 *y = (const struct sockaddr_in6 *)(const void *)b;

		return x->sin6_port == y->sin6_port && x->sin6_scope_id == y->sin6_scope_id &&
		       memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
	}
	return false;
}

static inline uint64_t
be64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

/* High @bits of a 64-bit word (0..64). */
static inline uint64_t
mask64(int bits)
{
	return bits <= 0 ? 0 : bits >= 64 ? ~0ULL : ~0ULL << (64 - bits);
}

bool
dlb_sockaddr_subnet_key(const struct sockaddr *sa, int v4mask, int v6mask, uint64_t *k0,
			uint64_t *k1, int *fam)
{
	static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	const uint8_t *a;

	if (sa == NULL)
		return false;
	if (sa->sa_family == AF_INET) {
		a = (const uint8_t *)&((const struct sockaddr_in *)(const void *)sa)->sin_addr;
		goto v4;
	}
	if (sa->sa_family != AF_INET6)
		return false;
	a = ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr.s6_addr;
	if (memcmp(a, v4mapped, sizeof(v4mapped)) == 0) {
		a += 12;
		goto v4;
	}
	*k0 = be64(a) & mask64(v6mask);
	*k1 = be64(a + 8) & mask64(v6mask - 64);
	*fam = AF_INET6;
	return true;
v4:
	*k0 = 0;
	*k1 = ((uint64_t)a[0] << 24 | (uint64_t)a[1] << 16 | (uint64_t)a[2] << 8 | a[3]) &
	      (mask64(v4mask) >> 32);
	*fam = AF_INET;
	return true;
}
