/*
 * sendbatch.h - an outgoing sendmmsg batch on one socket, shared by the UDP
 * frontend (replies) and the UDP backend transport (queries).
 *
 * Thread: the owning worker.
 */
#ifndef DNSLB_SENDBATCH_H
#define DNSLB_SENDBATCH_H

#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "dnslb/core/dnslb.h"
#include "dnslb/core/inflight.h"

/* An outgoing sendmmsg batch on one socket. Buffers are borrowed (they point
 * into receive buffers that stay valid until the batch is flushed). Its
 * messages point into its own arrays (dlb_sendbatch_init): initialise one in
 * place, never copy one. */
struct dlb_sendbatch {
	int fd;
	unsigned n;
	struct mmsghdr msgs[DLB_UDP_BATCH];
	struct iovec iov[DLB_UDP_BATCH];
	union dlb_sockaddr addr[DLB_UDP_BATCH];
	char cmsg[DLB_UDP_BATCH][CMSG_SPACE(sizeof(struct in6_pktinfo))];
};

/*
 * recvmmsg/sendmmsg without glibc's cancellation-point wrappers (workers are
 * never cancelled): the wrappers' bookkeeping shows in per-query profiles.
 */
static inline int
dlb_recvmmsg(int fd, struct mmsghdr *v, unsigned n, int flags)
{
	return (int)syscall(SYS_recvmmsg, fd, v, n, flags, NULL);
}

static inline int
dlb_sendmmsg(int fd, struct mmsghdr *v, unsigned n, int flags)
{
	return (int)syscall(SYS_sendmmsg, fd, v, n, flags);
}

/** Make @b empty, its messages pointing into its own arrays, for socket @fd. */
void dlb_sendbatch_init(struct dlb_sendbatch *b, int fd);
/**
 * Send every queued message; a message the kernel refuses is skipped
 * (logged, rate-limited). @return how many failed; the first @maxfailed of
 * their positions in the batch go to @failed_tags (NULL: not wanted).
 */
unsigned dlb_sendbatch_flush(struct dlb_sendbatch *b, uint32_t *failed_tags, unsigned maxfailed);

#endif
