/*
 * sendbatch.c - one sendmmsg batch on one socket: dnslb/core/sendbatch.h.
 */
#include "dnslb/core/sendbatch.h"

#include <errno.h>
#include <string.h>

#include "dnslb/core/log.h"
#include "dnslb/core/probe.h"

void
dlb_sendbatch_init(struct dlb_sendbatch *b, int fd)
{
	b->fd = fd;
	b->n = 0;
	/* what every message keeps: a reply sets only its buffer, address and
	 * (from a wildcard listener) its control data (fill_reply) */
	for (unsigned i = 0; i < DLB_UDP_BATCH; i++) {
		struct msghdr *mh = &b->msgs[i].msg_hdr;

		mh->msg_name = &b->addr[i];
		mh->msg_iov = &b->iov[i];
		mh->msg_iovlen = 1;
		mh->msg_control = NULL;
		mh->msg_controllen = 0;
		mh->msg_flags = 0;
	}
}

DLB_HOT unsigned
dlb_sendbatch_flush(struct dlb_sendbatch *b, uint32_t *failed_tags, unsigned maxfailed)
{
	unsigned done = 0, failed = 0;

	while (done < b->n) {
		DLB_PROBE_SEND_BEGIN();
		int r = dlb_sendmmsg(b->fd, b->msgs + done, b->n - done, MSG_DONTWAIT);

		DLB_PROBE_SEND_END();

		if (r == -1) {
			if (errno == EINTR)
				continue;
			/* the message at `done` failed: skip it, try the rest */
			dlb_log_ratelimited(DLB_LOG_WARN, "sendmmsg: %s", strerror(errno));
			if (failed < maxfailed && failed_tags != NULL)
				failed_tags[failed] = done;
			failed++;
			done++;
			continue;
		}
		done += (unsigned)r;
	}
	b->n = 0;
	return failed;
}
