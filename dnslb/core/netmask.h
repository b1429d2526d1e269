/*
 * netmask.h - addresses and netmask groups (ACLs, NetmaskGroupRule later).
 *
 * A group is built on the main thread, then read-only: any thread may call
 * dlb_nmg_match() on a group that is no longer modified.
 */
#ifndef DNSLB_NETMASK_H
#define DNSLB_NETMASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct dlb_netmask {
	uint8_t family;		/* AF_INET or AF_INET6 */
	uint8_t bits;		/* prefix length */
	uint8_t addr[16];	/* network address, host bits zeroed */
};

/* IPv4 netmasks a group also keeps as (network, mask) pairs: dnsdist's
 * default ACL has 6; with n4 they take 60 bytes, one or two cache lines
 * (a group is not 64-byte aligned) instead of three. */
#define DLB_NMG_FAST4 7

/*
 * A group is a sorted array searched per family (IPv4 first); sizes are
 * small (ACLs). Its first IPv4 netmasks are repeated in fast4, so an IPv4
 * client that one of them matches reads no netmask record.
 */
struct dlb_nmg {
	uint32_t n4;				/* netmasks in fast4: v[0..n4) */
	uint32_t fast4[DLB_NMG_FAST4][2];	/* network, mask (host order) */
	struct dlb_netmask *v;
	size_t n, cap;
};

/**
 * Parse "192.0.2.0/24", "2001:db8::/32", "127.0.0.1" (host), "::1".
 * A bare address gets /32 or /128. Host bits are zeroed.
 * @return 0, or -1 for an invalid netmask (bad address, prefix too long).
 */
int dlb_netmask_parse(const char *s, struct dlb_netmask *out);
/** Text form "a.b.c.d/n" or "x::/n" into @out (>= 64 bytes). */
void dlb_netmask_format(const struct dlb_netmask *nm, char *out, size_t outsz);
bool dlb_netmask_match(const struct dlb_netmask *nm, const struct sockaddr *sa);

void dlb_nmg_init(struct dlb_nmg *g);
void dlb_nmg_deinit(struct dlb_nmg *g);
void dlb_nmg_clear(struct dlb_nmg *g);
/** Add (duplicates are ignored). @return 0 or -1 on allocation failure. */
int dlb_nmg_add(struct dlb_nmg *g, const struct dlb_netmask *nm);
/** Remove an exact entry. @return true when it was present. */
bool dlb_nmg_remove(struct dlb_nmg *g, const struct dlb_netmask *nm);
/** Thread: any, once the group is no longer modified. */
bool dlb_nmg_match(const struct dlb_nmg *g, const struct sockaddr *sa);
int dlb_nmg_copy(struct dlb_nmg *dst, const struct dlb_nmg *src);

/**
 * Parse "1.2.3.4", "1.2.3.4:53", "[2001:db8::1]:53", "2001:db8::1" (no port
 * for a bare IPv6 address) into @ss. @default_port applies when none is given.
 * @return 0, or -1 when invalid (bad address, port > 65535).
 */
int dlb_sockaddr_parse(const char *s, uint16_t default_port, struct sockaddr_storage *ss,
		       socklen_t *len);
/** "1.2.3.4:53" or "[::1]:53" into @out (>= 64 bytes). */
void dlb_sockaddr_format(const struct sockaddr *sa, char *out, size_t outsz);
bool dlb_sockaddr_equal(const struct sockaddr *a, const struct sockaddr *b);

/**
 * The subnet of @sa as the key of a per-client table: the address masked to
 * @v4mask or @v6mask bits, as two words (IPv4 in the low 32 bits of *@k1,
 * *@k0 = 0); a v4-mapped IPv6 address counts as its IPv4 address (a v4
 * client on a dual-stack listener). *@fam: AF_INET or AF_INET6. @return
 * false for NULL or a non-IP address.
 */
bool dlb_sockaddr_subnet_key(const struct sockaddr *sa, int v4mask, int v6mask, uint64_t *k0,
			     uint64_t *k1, int *fam);

#endif
