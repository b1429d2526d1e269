/*
 * dnslb-reflector: the floor of docs/performance.md.
 *
 * A bare single-threaded UDP reflector.  It receives datagrams in batches of
 * 64 with recvmmsg(), turns each into a response in place (QR set, the
 * question kept, a fixed answer "A 192.0.2.1" appended with a compression
 * pointer to the qname, ancount = 1) and sends the batch back with
 * sendmmsg().  There is no DNS logic beyond finding the end of the question,
 * so its CPU per query is what the kernel alone costs for one receive and one
 * send over the socket API: no proxy can use less.
 *
 * Usage: dnslb-reflector [--epoll] <addr:port>   (IPv4 "a.b.c.d:p" or "[v6]:p")
 *
 * --epoll: the event-loop floor. Wait in epoll_wait() for the socket, then
 * recvmmsg(MSG_DONTWAIT), as any server with one event loop for many sockets
 * does (dnslb's workers, through libev): what that wait costs over blocking
 * in recvmmsg itself is the part of the floor gap no proxy built that way
 * can close.
 *
 * Thread: one.  It runs until SIGINT/SIGTERM.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "perfutil.h"

#define BATCH	64
#define BUFSZ	4096	/* room for any UDP query we expect plus the 16-byte answer */
#define HDRLEN	12

/* NAME (pointer to offset 12), TYPE A, CLASS IN, TTL 300, RDLENGTH 4, 192.0.2.1 */
static const uint8_t answer[16] = {
	0xc0, 0x0c, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00, 0x01, 0x2c, 0x00, 0x04, 192, 0, 2, 1,
};

static volatile sig_atomic_t stop;

static void
on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

/*
 * Make the response in place; return its length, or 0 to drop the datagram.
 * Anything after the question (EDNS OPT, ...) is cut off so the message stays
 * well formed.
 */
static size_t
reflect(uint8_t *p, size_t len)
{
	size_t off = HDRLEN;

	if (len < HDRLEN + 5 || p[4] != 0 || p[5] != 1)
		return 0;
	while (off < len && p[off] != 0) {
		if (p[off] >= 0x40)	/* a pointer or reserved bits in a query: give up */
			return 0;
		off += (size_t)p[off] + 1;
	}
	off += 1 + 4;	/* root label, QTYPE, QCLASS */
	if (off > len)
		return 0;
	p[2] |= 0x80;	/* QR */
	p[3] &= 0xf0;	/* RCODE NOERROR */
	p[6] = 0;
	p[7] = 1;	/* ANCOUNT 1 */
	memset(p + 8, 0, 4);	/* NSCOUNT, ARCOUNT 0 */
	memcpy(p + off, answer, sizeof(answer));
	return off + sizeof(answer);
}

int
main(int argc, char **argv)
{
	static uint8_t bufs[BATCH][BUFSZ];
	static struct sockaddr_storage peers[BATCH];
	static struct iovec rx_iov[BATCH], tx_iov[BATCH];
	static struct mmsghdr rx[BATCH], tx[BATCH];
	struct sockaddr_storage ss;
	socklen_t sslen;
	int fd, one = 1, rcvbuf = 4 << 20, ep = -1;
	bool use_epoll = argc == 3 && strcmp(argv[1], "--epoll") == 0;

	if (argc != 2 + use_epoll || parse_addr(argv[argc - 1], &ss, &sslen) == -1) {
		fprintf(stderr, "usage: %s [--epoll] <addr:port>\n", argv[0]);
		return 2;
	}
	fd = socket(ss.ss_family, SOCK_DGRAM, 0);
	if (fd == -1) {
		perror("socket");
		return 1;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &rcvbuf, sizeof(rcvbuf));
	if (bind(fd, (struct sockaddr *)&ss, sslen) == -1) {
		perror("bind");
		return 1;
	}

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;	/* no SA_RESTART: interrupt recvmmsg */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	for (int i = 0; i < BATCH; i++) {
		rx_iov[i].iov_base = bufs[i];
		rx[i].msg_hdr.msg_iov = &rx_iov[i];
		rx[i].msg_hdr.msg_iovlen = 1;
		rx[i].msg_hdr.msg_name = &peers[i];
		tx[i].msg_hdr.msg_iov = &tx_iov[i];
		tx[i].msg_hdr.msg_iovlen = 1;
	}
	if (use_epoll) {
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };

		ep = epoll_create1(0);
		if (ep == -1 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == -1) {
			perror("epoll");
			return 1;
		}
	}
	printf("dnslb-reflector running on %s%s\n", argv[argc - 1], use_epoll ? " (epoll)" : "");
	fflush(stdout);

	while (!stop) {
		for (int i = 0; i < BATCH; i++) {
			rx_iov[i].iov_len = BUFSZ - sizeof(answer);
			rx[i].msg_hdr.msg_namelen = sizeof(peers[i]);
		}
		int n;

		if (use_epoll) {
			struct epoll_event ev;

			if (epoll_wait(ep, &ev, 1, -1) < 1)
				continue;	/* EINTR: look at stop */
			n = recvmmsg(fd, rx, BATCH, MSG_DONTWAIT, NULL);
		} else {
			/* MSG_WAITFORONE: block for the first datagram, then take what is queued. */
			n = recvmmsg(fd, rx, BATCH, MSG_WAITFORONE, NULL);
		}
		if (n == -1) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			perror("recvmmsg");
			return 1;
		}
		int m = 0;
		for (int i = 0; i < n; i++) {
			size_t len = reflect(bufs[i], rx[i].msg_len);
			if (len == 0)
				continue;
			tx_iov[m].iov_base = bufs[i];
			tx_iov[m].iov_len = len;
			tx[m].msg_hdr.msg_name = &peers[i];
			tx[m].msg_hdr.msg_namelen = rx[i].msg_hdr.msg_namelen;
			m++;
		}
		for (int done = 0; done < m;) {
			int s = sendmmsg(fd, tx + done, (unsigned)(m - done), 0);
			if (s == -1) {
				if (errno == EINTR)
					continue;
				/* A full socket buffer or an ICMP error: drop that one datagram. */
				done++;
				continue;
			}
			done += s;
		}
	}
	close(fd);
	return 0;
}
