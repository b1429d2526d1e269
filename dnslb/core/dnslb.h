/*
 * dnslb.h - process-wide limits, error codes and forward declarations.
 *
 * Every module may include this header; it includes nothing of dnslb's own.
 */
#ifndef DNSLB_DNSLB_H
#define DNSLB_DNSLB_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DLB_MAX_WORKERS		64
#define DLB_MAX_FRONTENDS	64
#define DLB_MAX_BACKENDS	256
#define DLB_MAX_POOLS		64
#define DLB_MAX_POOLS_PER_BACKEND 8
#define DLB_MAX_SOCKETS_PER_BACKEND 64
#define DLB_MAX_NAME		255	/* octets of a wire-format name */
#define DLB_MAX_LABEL		63
#define DLB_MAX_UDP_RESPONSE	65535	/* backend answers are read into a buffer this big */
#define DLB_MAX_TCP_MSG		65535
#define DLB_UDP_BATCH		64	/* recvmmsg/sendmmsg vector size */
#define DLB_RBUF_SIZE		65536	/* one receive buffer: any UDP datagram fits */
#define DLB_DEFAULT_PORT	53

/*
 * Code layout. DLB_HOT marks the functions a cache hit runs (receive, parse,
 * ACL, cache, rings, statistics, send): GCC puts them in .text.hot, which the
 * linker places together, so a hit runs code from a few pages instead of
 * from all over the daemon's text. Its counterpart is dlb_log (log.h),
 * declared cold: a call to it makes its branch unlikely, and GCC moves such
 * branches out of the hot functions (into their .cold parts).
 */
#define DLB_HOT		__attribute__((hot))

/*
 * Status codes: 0 or a negative enum dlb_err. System errors are -errno (Knot style);
 * DNS-specific errors start at -1000.
 */
enum dlb_err {
	DLB_OK = 0,
	DLB_ENOMEM = -ENOMEM,
	DLB_EINVAL = -EINVAL,
	DLB_EAGAIN = -EAGAIN,
	DLB_EMALF = -1000,	/* malformed DNS message */
	DLB_ETRUNC = -1001,	/* message ends before what its header promises */
	DLB_ESPACE = -1002,	/* output buffer too small */
	DLB_EEMPTY = -1003,	/* well-formed header, qdcount == 0 */
	DLB_EFULL = -1004,	/* table full */
	DLB_ENOTQUERY = -1005,	/* QR or TC set in a query */
};

const char *dlb_strerror(int err);

/** The structure of type @T whose member @m is at @p. */
#define container_of(p, T, m) ((T *)(void *)((char *)(p) - offsetof(T, m)))

struct dlb_config;
struct dlb_worker;
struct dlb_backend;
struct dlb_pool;
struct dlb_cache;

#endif
