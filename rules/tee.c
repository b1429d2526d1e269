/*
 * tee.c - TeeAction: a copy of each matching UDP query goes to another
 * server, whose answers are only counted (dnsdist 1.7.3's figures). The
 * copies leave from the workers on one connected UDP socket (send() on it
 * is thread-safe); one thread per action reads the answers, as dnsdist's.
 */
#include "rules/tee.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dnslb/core/wire.h"

struct dlb_tee {
	int fd;
	pthread_t thread;
	bool stop;
	uint64_t v[DLB_TEE__COUNT];	/* relaxed atomics */
};

const char *const dlb_tee_names[DLB_TEE__COUNT] = {
	[DLB_TEE_QUERIES] = "queries",
	[DLB_TEE_RESPONSES] = "responses",
	[DLB_TEE_RECV_ERRORS] = "recv-errors",
	[DLB_TEE_SEND_ERRORS] = "send-errors",
	[DLB_TEE_NOERRORS] = "noerrors",
	[DLB_TEE_NXDOMAINS] = "nxdomains",
	[DLB_TEE_REFUSEDS] = "refuseds",
	[DLB_TEE_SERVFAILS] = "servfails",
	[DLB_TEE_OTHER_RCODE] = "other-rcode",
	[DLB_TEE_TCP_DROPS] = "tcp-drops",
};

static void
bump(struct dlb_tee *t, enum dlb_tee_stat s)
{
	__atomic_fetch_add(&t->v[s], 1, __ATOMIC_RELAXED);
}

/* The reader: counts the answers by rcode until dlb_tee_free. */
static void *
tee_reader(void *arg)
{
	struct dlb_tee *t = arg;
	uint8_t buf[1500];

	while (!__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE)) {
		struct pollfd p = { .fd = t->fd, .events = POLLIN };
		ssize_t n;

		/* a quarter of a second at most between looks at t->stop */
		if (poll(&p, 1, 250) <= 0)
			continue;
		n = recv(t->fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n < DLB_DNS_HDR) {
			bump(t, DLB_TEE_RECV_ERRORS);
			continue;
		}
		bump(t, DLB_TEE_RESPONSES);
		switch (DLB_RCODE(buf[3])) {
		case DLB_RCODE_NOERROR: bump(t, DLB_TEE_NOERRORS); break;
		case DLB_RCODE_NXDOMAIN: bump(t, DLB_TEE_NXDOMAINS); break;
		case DLB_RCODE_REFUSED: bump(t, DLB_TEE_REFUSEDS); break;
		case DLB_RCODE_SERVFAIL: bump(t, DLB_TEE_SERVFAILS); break;
		default: bump(t, DLB_TEE_OTHER_RCODE); break;
		}
	}
	return NULL;
}

struct dlb_tee *
dlb_tee_new(const struct sockaddr_storage *ss, socklen_t len, char *err, size_t errlen)
{
	struct dlb_tee *t = calloc(1, sizeof(*t));

	if (t == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	t->fd = socket(ss->ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (t->fd == -1 || connect(t->fd, (const struct sockaddr *)ss, len) == -1) {
		snprintf(err, errlen, "%s", strerror(errno));
		if (t->fd != -1)
			close(t->fd);
		free(t);
		return NULL;
	}
	if (pthread_create(&t->thread, NULL, tee_reader, t) != 0) {
		snprintf(err, errlen, "cannot start its thread");
		close(t->fd);
		free(t);
		return NULL;
	}
	return t;
}

void
dlb_tee_send(struct dlb_tee *t, const uint8_t *pkt, size_t len, bool tcp)
{
	if (tcp) {
		/* dnsdist copies UDP queries only */
		bump(t, DLB_TEE_TCP_DROPS);
		return;
	}
	bump(t, DLB_TEE_QUERIES);
	if (send(t->fd, pkt, len, MSG_DONTWAIT) <= 0)
		bump(t, DLB_TEE_SEND_ERRORS);
}

uint64_t
dlb_tee_stat(const struct dlb_tee *t, enum dlb_tee_stat s)
{
	return __atomic_load_n(&t->v[s], __ATOMIC_RELAXED);
}

void
dlb_tee_free(struct dlb_tee *t)
{
	if (t == NULL)
		return;
	__atomic_store_n(&t->stop, true, __ATOMIC_RELEASE);
	pthread_join(t->thread, NULL);
	close(t->fd);
	free(t);
}
