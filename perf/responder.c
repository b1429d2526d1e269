/*
 * dnslb-perf-responder: the backend behind both proxies in perf/run.
 *
 * A small authoritative-style responder that must never be the bottleneck.
 * It answers every well-formed query itself, with no zone:
 *   - first label starting with "nx" (any case): NXDOMAIN, with an SOA in the
 *     authority section (owner: the parent name; minimum 60) so caches can
 *     store the negative answer;
 *   - QTYPE AAAA: 2001:db8::1, MX: "10 <qname>", TXT: "dnslb perf";
 *   - anything else: A 192.0.2.1.
 * Every answer has TTL 300 and AA set; RD and CD are copied; a query with an
 * EDNS OPT record gets an OPT back (payload 1232, DO copied).  Malformed
 * datagrams are dropped; opcodes other than QUERY get NOTIMP.
 *
 * UDP: N threads (-t N), each with its own SO_REUSEPORT socket, blocking
 * recvmmsg(MSG_WAITFORONE) and sendmmsg() in batches of 64.
 * TCP: one extra thread, epoll, non-blocking, length-framed, pipelined
 * queries answered in order, with back-pressure on slow readers.
 *
 * Usage: dnslb-perf-responder <addr:port> [-t threads]
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <pthread.h>
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

#define BATCH		64
#define UDP_BUFSZ	4096
#define HDRLEN		12
#define RESP_SLACK	128	/* a response is at most the question plus this */
#define TCP_MAXMSG	65535
#define TCP_OUT_HIGH	(256 * 1024)	/* stop reading a connection above this backlog */

static struct sockaddr_storage listen_addr;
static socklen_t listen_len;

static inline void
put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline void
put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static inline uint16_t
get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

/* Skip a (possibly compressed) name starting at @off; return the offset after it, 0 if bad. */
static size_t
skip_name(const uint8_t *p, size_t len, size_t off)
{
	while (off < len) {
		uint8_t l = p[off];
		if (l == 0)
			return off + 1;
		if ((l & 0xc0) == 0xc0)
			return off + 2 <= len ? off + 2 : 0;
		if (l & 0xc0)
			return 0;
		off += (size_t)l + 1;
	}
	return 0;
}

/* Append an RR header (owner pointer, type, class IN, ttl, rdlength) at @o; return bytes. */
static size_t
put_rr(uint8_t *o, uint16_t owner_ptr, uint16_t type, uint32_t ttl, uint16_t rdlen)
{
	put16(o, (uint16_t)(0xc000 | owner_ptr));
	put16(o + 2, type);
	put16(o + 4, 1);
	put32(o + 6, ttl);
	put16(o + 10, rdlen);
	return 12;
}

/*
 * Turn the query in @p (@len bytes, buffer of at least @len + RESP_SLACK) into
 * the response in place.  @return the response length, or 0 to drop.
 */
static size_t
respond(uint8_t *p, size_t len)
{
	size_t qend, off, o;
	uint16_t qtype, an = 0, ns = 0, ar = 0;
	bool edns = false, do_bit = false, nx;
	uint8_t rcode = 0;

	if (len < HDRLEN || (p[2] & 0x80))	/* too short, or a response */
		return 0;
	if (get16(p + 4) != 1) {
		rcode = 1;	/* FORMERR, header only */
		len = HDRLEN;
		goto header_only;
	}
	/* The question name: labels only, no compression. */
	off = HDRLEN;
	while (off < len && p[off] != 0) {
		if (p[off] & 0xc0)
			return 0;
		off += (size_t)p[off] + 1;
	}
	qend = off + 1 + 4;
	if (qend > len || qend - HDRLEN - 4 > 255)
		return 0;
	qtype = get16(p + qend - 4);

	/* An OPT record in the additional section (only when AN and NS are empty). */
	if (get16(p + 6) == 0 && get16(p + 8) == 0) {
		unsigned arcount = get16(p + 10);
		off = qend;
		for (unsigned i = 0; i < arcount; i++) {
			off = skip_name(p, len, off);
			if (off == 0 || off + 10 > len)
				break;
			if (get16(p + off) == 41) {
				edns = true;
				do_bit = (p[off + 6] & 0x80) != 0;
			}
			off += 10 + (size_t)get16(p + off + 8);
		}
	}

	if (((p[2] >> 3) & 0x0f) != 0) {	/* opcode other than QUERY */
		rcode = 4;	/* NOTIMP */
		len = qend;
		goto finish;
	}

	nx = p[HDRLEN] >= 2 && (p[HDRLEN + 1] | 0x20) == 'n' && (p[HDRLEN + 2] | 0x20) == 'x';
	o = qend;
	if (nx) {
		/* SOA owned by the parent name: offset of the second label, or the root byte. */
		uint16_t parent = (uint16_t)(HDRLEN + 1 + p[HDRLEN]);
		rcode = 3;
		o += put_rr(p + o, parent, 6, 60, 2 + 2 + 20);
		put16(p + o, (uint16_t)(0xc000 | parent));	/* MNAME */
		put16(p + o + 2, (uint16_t)(0xc000 | parent));	/* RNAME */
		put32(p + o + 4, 1);	/* serial */
		put32(p + o + 8, 3600);
		put32(p + o + 12, 600);
		put32(p + o + 16, 86400);
		put32(p + o + 20, 60);	/* minimum: negative TTL */
		o += 24;
		ns = 1;
	} else if (qtype == 28) {
		static const uint8_t v6[16] = { 0x20, 0x01, 0x0d, 0xb8, [15] = 1 };
		o += put_rr(p + o, HDRLEN, 28, 300, 16);
		memcpy(p + o, v6, 16);
		o += 16;
		an = 1;
	} else if (qtype == 15) {
		o += put_rr(p + o, HDRLEN, 15, 300, 4);
		put16(p + o, 10);
		put16(p + o + 2, 0xc000 | HDRLEN);
		o += 4;
		an = 1;
	} else if (qtype == 16) {
		static const char txt[] = "dnslb perf";
		o += put_rr(p + o, HDRLEN, 16, 300, (uint16_t)sizeof(txt));
		p[o] = (uint8_t)(sizeof(txt) - 1);
		memcpy(p + o + 1, txt, sizeof(txt) - 1);
		o += sizeof(txt);
		an = 1;
	} else {
		o += put_rr(p + o, HDRLEN, 1, 300, 4);
		p[o] = 192, p[o + 1] = 0, p[o + 2] = 2, p[o + 3] = 1;
		o += 4;
		an = 1;
	}
	len = o;

finish:
	if (edns) {
		p[len] = 0;	/* root owner */
		put16(p + len + 1, 41);
		put16(p + len + 3, 1232);
		p[len + 5] = 0;	/* extended rcode */
		p[len + 6] = 0;	/* version */
		p[len + 7] = do_bit ? 0x80 : 0;
		p[len + 8] = 0;
		put16(p + len + 9, 0);
		len += 11;
		ar = 1;
	}
	put16(p + 6, an);
	put16(p + 8, ns);
	put16(p + 10, ar);
header_only:
	/* QR, opcode and RD kept, AA set, TC clear; RA clear, CD kept, rcode. */
	p[2] = (uint8_t)(0x80 | (p[2] & 0x79) | 0x04);
	p[3] = (uint8_t)((p[3] & 0x10) | rcode);
	if (len == HDRLEN)
		memset(p + 4, 0, 8);
	return len;
}

static int
open_socket(int type)
{
	int one = 1, buf = 4 << 20;
	int fd = socket(listen_addr.ss_family, type | SOCK_CLOEXEC, 0);

	if (fd == -1) {
		perror("socket");
		exit(1);
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	if (type == SOCK_DGRAM) {
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	}
	if (bind(fd, (struct sockaddr *)&listen_addr, listen_len) == -1) {
		perror("bind");
		exit(1);
	}
	return fd;
}

/* ---- UDP ---------------------------------------------------------------- */

static void *
udp_thread(void *arg)
{
	int fd = (int)(intptr_t)arg;
	uint8_t (*bufs)[UDP_BUFSZ] = malloc(BATCH * UDP_BUFSZ);
	struct sockaddr_storage peers[BATCH];
	struct iovec rx_iov[BATCH], tx_iov[BATCH];
	struct mmsghdr rx[BATCH], tx[BATCH];

	if (bufs == NULL) {
		perror("malloc");
		exit(1);
	}
	memset(rx, 0, sizeof(rx));
	memset(tx, 0, sizeof(tx));
	for (int i = 0; i < BATCH; i++) {
		rx_iov[i].iov_base = bufs[i];
		rx[i].msg_hdr.msg_iov = &rx_iov[i];
		rx[i].msg_hdr.msg_iovlen = 1;
		rx[i].msg_hdr.msg_name = &peers[i];
		tx[i].msg_hdr.msg_iov = &tx_iov[i];
		tx[i].msg_hdr.msg_iovlen = 1;
	}
	for (;;) {
		for (int i = 0; i < BATCH; i++) {
			rx_iov[i].iov_len = UDP_BUFSZ - RESP_SLACK;
			rx[i].msg_hdr.msg_namelen = sizeof(peers[i]);
		}
		int n = recvmmsg(fd, rx, BATCH, MSG_WAITFORONE, NULL);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			perror("recvmmsg");
			exit(1);
		}
		int m = 0;
		for (int i = 0; i < n; i++) {
			size_t len = respond(bufs[i], rx[i].msg_len);
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
				done++;	/* drop the datagram that failed */
				continue;
			}
			done += s;
		}
	}
	return NULL;
}

/* ---- TCP ---------------------------------------------------------------- */

struct conn {
	int fd;
	uint32_t events;
	size_t inlen;
	size_t outoff, outlen, outcap;
	uint8_t *out;
	uint8_t in[2 + TCP_MAXMSG];
};

static int epfd;

static void
conn_close(struct conn *c)
{
	close(c->fd);	/* also removes it from the epoll set */
	free(c->out);
	free(c);
}

static void
conn_set_events(struct conn *c, uint32_t ev)
{
	if (ev == c->events)
		return;
	struct epoll_event e = { .events = ev, .data.ptr = c };
	epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &e);
	c->events = ev;
}

/* Try to write the backlog; return false if the connection is dead. */
static bool
conn_flush(struct conn *c)
{
	while (c->outoff < c->outlen) {
		ssize_t w = send(c->fd, c->out + c->outoff, c->outlen - c->outoff, MSG_NOSIGNAL);
		if (w == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			return false;
		}
		c->outoff += (size_t)w;
	}
	if (c->outoff == c->outlen)
		c->outoff = c->outlen = 0;
	return true;
}

static void
conn_queue(struct conn *c, const uint8_t *msg, size_t len)
{
	if (c->outlen + 2 + len > c->outcap) {
		if (c->outoff > 0) {
			memmove(c->out, c->out + c->outoff, c->outlen - c->outoff);
			c->outlen -= c->outoff;
			c->outoff = 0;
		}
		while (c->outlen + 2 + len > c->outcap)
			c->outcap = c->outcap ? c->outcap * 2 : 16384;
		c->out = realloc(c->out, c->outcap);
		if (c->out == NULL) {
			perror("realloc");
			exit(1);
		}
	}
	put16(c->out + c->outlen, (uint16_t)len);
	memcpy(c->out + c->outlen + 2, msg, len);
	c->outlen += 2 + len;
}

/*
 * Read once (epoll is level-triggered, so more data wakes us again) and answer
 * every complete frame.  @return false to close the connection.
 */
static bool
conn_read(struct conn *c)
{
	static uint8_t scratch[TCP_MAXMSG + RESP_SLACK];
	ssize_t r;

	do
		r = recv(c->fd, c->in + c->inlen, sizeof(c->in) - c->inlen, 0);
	while (r == -1 && errno == EINTR);
	if (r == 0)
		return false;
	if (r == -1)
		return errno == EAGAIN || errno == EWOULDBLOCK;
	c->inlen += (size_t)r;

	size_t off = 0;
	while (c->inlen - off >= 2) {
		size_t mlen = get16(c->in + off);
		if (c->inlen - off < 2 + mlen)
			break;
		memcpy(scratch, c->in + off + 2, mlen);
		size_t rlen = respond(scratch, mlen);
		if (rlen > 0 && rlen <= TCP_MAXMSG)
			conn_queue(c, scratch, rlen);
		off += 2 + mlen;
	}
	if (off > 0) {
		memmove(c->in, c->in + off, c->inlen - off);
		c->inlen -= off;
	}
	return conn_flush(c);
}

static void *
tcp_thread(void *arg)
{
	int lfd = (int)(intptr_t)arg;
	struct epoll_event evs[64];

	epfd = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event le = { .events = EPOLLIN, .data.ptr = NULL };
	epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &le);
	for (;;) {
		int n = epoll_wait(epfd, evs, 64, -1);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			perror("epoll_wait");
			exit(1);
		}
		for (int i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;
			if (c == NULL) {
				int fd;
				while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) != -1) {
					int one = 1;
					setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
					c = calloc(1, sizeof(*c));
					if (c == NULL) {
						close(fd);
						continue;
					}
					c->fd = fd;
					c->events = EPOLLIN;
					struct epoll_event e = { .events = EPOLLIN, .data.ptr = c };
					epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &e);
				}
				continue;
			}
			bool ok = true;
			if (evs[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
				ok = conn_flush(c);
			if (ok && (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) &&
			    c->outlen - c->outoff <= TCP_OUT_HIGH)
				ok = conn_read(c);
			if (!ok) {
				conn_close(c);
				continue;
			}
			size_t backlog = c->outlen - c->outoff;
			uint32_t want = (backlog > 0 ? EPOLLOUT : 0) | (backlog <= TCP_OUT_HIGH ? EPOLLIN : 0);
			conn_set_events(c, want);
		}
	}
	return NULL;
}

int
main(int argc, char **argv)
{
	const char *addr = NULL;
	int threads = 1;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-t") == 0 && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (addr == NULL && argv[i][0] != '-')
			addr = argv[i];
		else
			addr = NULL, i = argc;
	}
	if (addr == NULL || threads < 1 || threads > 256 ||
	    parse_addr(addr, &listen_addr, &listen_len) == -1) {
		fprintf(stderr, "usage: %s <addr:port> [-t threads]\n", argv[0]);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);

	/* Bind everything before announcing readiness. */
	int *ufds = calloc((size_t)threads, sizeof(int));
	for (int i = 0; i < threads; i++)
		ufds[i] = open_socket(SOCK_DGRAM);
	int lfd = open_socket(SOCK_STREAM | SOCK_NONBLOCK);
	if (listen(lfd, 1024) == -1) {
		perror("listen");
		return 1;
	}

	pthread_t t;
	if (pthread_create(&t, NULL, tcp_thread, (void *)(intptr_t)lfd) != 0) {
		fprintf(stderr, "pthread_create failed\n");
		return 1;
	}
	for (int i = 1; i < threads; i++) {
		if (pthread_create(&t, NULL, udp_thread, (void *)(intptr_t)ufds[i]) != 0) {
			fprintf(stderr, "pthread_create failed\n");
			return 1;
		}
	}
	printf("dnslb-perf-responder running on %s (%d UDP thread%s, 1 TCP thread)\n", addr, threads,
	       threads == 1 ? "" : "s");
	fflush(stdout);
	udp_thread((void *)(intptr_t)ufds[0]);
	return 0;
}
