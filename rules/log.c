/*
 * log.c - LogAction and LogResponseAction: one record per query or response
 * to a file, or to the daemon's log.
 *
 * Formats (dnsdist 1.7.3, observed with the Debian build and read in its
 * dnsdist-lua-actions.cc):
 *  - query, text:  "Packet from 127.0.0.1:33026 for spoof.test. A with id 13330\n"
 *  - response:     "Answer to 127.0.0.1:33026 for spoof.test. A (No Error) with id 13330\n"
 *  - with includeTimestamp, "[<sec>.<nsec>] " first: the query's arrival in
 *    real time, nanoseconds printed with %lu (not zero-padded).
 *  - the qname in the client's case with its final dot; the qtype by name
 *    ("TYPE<n>" when dnsdist has none, e.g. TYPE0, TYPE250, TYPE65280); the
 *    rcode of the header's low 4 bits in RCode::to_s's words.
 *  - "with id": dnsdist prints the ID field as the two octets of the packet
 *    read in host order, so 0x1234 shows as 13330 on x86. Reproduced (every
 *    dnsdist version since does the same, and log readers expect it).
 *  - query, binary (LogAction's binary=true, its default): [u64 seconds,
 *    u32 nanoseconds, both host order, when includeTimestamp], the ID's two
 *    octets as in the packet, the qname in wire form (client's case), the
 *    qtype (u16 host order), the address family (u16 host order), the
 *    address (4 or 16 octets), the port (network order). No separator.
 *    LogResponseAction has no binary form.
 *  - An empty file name logs through the daemon's log at info level, when
 *    verboseOnly is false or setVerbose is on.
 * Differences: dnsdist writes through stdio (buffered by default); here every
 * record is one write(2) on an O_APPEND descriptor, so workers share the
 * file without a lock and records never interleave; "buffered" is accepted
 * and ignored.
 *
 * Thread: dlb_log_write from any worker; open/free/reload on the main thread
 * (reload swaps the file under the same descriptor number with dup3, which
 * the kernel does atomically with respect to concurrent writes).
 */
#include "rules/rules.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <netinet/in.h>

#include "dnslb/core/log.h"
#include "dnslb/core/netmask.h"

struct dlb_log {
	char *path;		/* NULL: the daemon's log */
	int fd;			/* -1 with path NULL */
	bool binary;
	bool append;
	bool verbose_only;
	bool timestamp;
};

/* dnsdist 1.7.3's QType names (the complete list it printed for 0..69, 99..109, 249..260, ...) */
static const char *const qtype_low[] = {
	[1] = "A", [2] = "NS", [5] = "CNAME", [6] = "SOA", [7] = "MB", [8] = "MG", [9] = "MR",
	[12] = "PTR", [13] = "HINFO", [14] = "MINFO", [15] = "MX", [16] = "TXT", [17] = "RP",
	[18] = "AFSDB", [24] = "SIG", [25] = "KEY", [28] = "AAAA", [29] = "LOC", [33] = "SRV",
	[35] = "NAPTR", [36] = "KX", [37] = "CERT", [38] = "A6", [39] = "DNAME", [41] = "OPT",
	[42] = "APL", [43] = "DS", [44] = "SSHFP", [45] = "IPSECKEY", [46] = "RRSIG", [47] = "NSEC",
	[48] = "DNSKEY", [49] = "DHCID", [50] = "NSEC3", [51] = "NSEC3PARAM", [52] = "TLSA",
	[53] = "SMIMEA", [57] = "RKEY", [59] = "CDS", [60] = "CDNSKEY", [61] = "OPENPGPKEY",
	[62] = "CSYNC", [64] = "SVCB", [65] = "HTTPS", [99] = "SPF", [104] = "NID", [105] = "L32",
	[106] = "L64", [107] = "LP", [108] = "EUI48", [109] = "EUI64",
};

static const struct {
	uint16_t type;
	const char *name;
} qtype_high[] = {
	{ 249, "TKEY" }, { 251, "IXFR" }, { 252, "AXFR" }, { 253, "MAILB" }, { 254, "MAILA" },
	{ 255, "ANY" }, { 256, "URI" }, { 257, "CAA" }, { 32769, "DLV" }, { 65400, "ADDR" },
	{ 65401, "ALIAS" }, { 65402, "LUA" },
};

static const char *
qtype_name(uint16_t t, char *buf, size_t bufsz)
{
	if (t < sizeof(qtype_low) / sizeof(qtype_low[0]) && qtype_low[t] != NULL)
		return qtype_low[t];
	for (size_t i = 0; i < sizeof(qtype_high) / sizeof(qtype_high[0]); i++) {
		if (qtype_high[i].type == t)
			return qtype_high[i].name;
	}
	snprintf(buf, bufsz, "TYPE%u", (unsigned)t);
	return buf;
}

static int
log_open_fd(const char *path, bool append)
{
	return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (append ? 0 : O_TRUNC), 0644);
}

struct dlb_log *
dlb_log_open(const char *path, bool binary, bool append, bool buffered, bool verbose_only,
	     bool timestamp, char *err, size_t errlen)
{
	struct dlb_log *l = calloc(1, sizeof(*l));

	(void)buffered;		/* one write(2) per record, see the file comment */
	if (l == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	l->fd = -1;
	l->binary = binary;
	l->append = append;
	l->verbose_only = verbose_only;
	l->timestamp = timestamp;
	if (path == NULL || path[0] == '\0')
		return l;
	l->path = strdup(path);
	if (l->path == NULL) {
		snprintf(err, errlen, "out of memory");
		free(l);
		return NULL;
	}
	l->fd = log_open_fd(path, append);
	if (l->fd == -1) {
		snprintf(err, errlen, "Unable to open file '%s' for logging: %s", path,
			 strerror(errno));
		free(l->path);
		free(l);
		return NULL;
	}
	return l;
}

void
dlb_log_free(struct dlb_log *l)
{
	if (l == NULL)
		return;
	if (l->fd != -1)
		close(l->fd);
	free(l->path);
	free(l);
}

int
dlb_log_reload(struct dlb_log *l)
{
	int fd;

	if (l->path == NULL)
		return DLB_OK;
	/* as dnsdist's reload: reopened the way it was opened (append or truncate) */
	fd = log_open_fd(l->path, l->append);
	if (fd == -1)
		return -errno;
	if (dup3(fd, l->fd, O_CLOEXEC) == -1) {
		int e = errno;

		close(fd);
		return -e;
	}
	close(fd);
	return DLB_OK;
}

/*
 * When the query arrived, in real time (dnsdist logs the query's time, for
 * responses too): the real time now, less the age of the query on the loop
 * clock (dq->now - dq->t_start: one clock, whichever it is).
 */
static struct timespec
log_query_time(const struct dlb_dq *dq)
{
	struct timespec ts;
	double age = dq->t_start > 0 ? dq->now - dq->t_start : 0;

	clock_gettime(CLOCK_REALTIME, &ts);
	if (age > 0 && age < 86400) {
		int64_t ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec - (int64_t)(age * 1e9);

		ts.tv_sec = (time_t)(ns / 1000000000);
		ts.tv_nsec = (long)(ns % 1000000000);
	}
	return ts;
}

/* The qname in wire form as the packet has it (client's case), or NULL. */
static const uint8_t *
log_qname(const struct dlb_dq *dq, size_t *len)
{
	const struct dlb_dnsmsg *m = dq->m;

	if (m == NULL || m->qdcount == 0 || m->qname_len == 0)
		return NULL;
	*len = m->qname_len;
	if ((size_t)m->qname_off + m->qname_len <= dq->len)
		return dq->pkt + m->qname_off;
	return m->qname_lc;
}

static void
log_emit(const struct dlb_log *l, const void *buf, size_t n)
{
	ssize_t w = write(l->fd, buf, n);

	if (w != (ssize_t)n)
		dlb_log_ratelimited(DLB_LOG_WARN, "log action: writing to %s failed: %s", l->path,
				    w == -1 ? strerror(errno) : "short write");
}

static void
log_binary(const struct dlb_log *l, const struct dlb_dq *dq)
{
	uint8_t buf[12 + 2 + DLB_MAX_NAME + 2 + 2 + 16 + 2];
	const uint8_t *qn;
	size_t n = 0, qlen = 0;
	uint16_t qtype = dq->m != NULL ? dq->m->qtype : 0, fam;

	if (l->timestamp) {
		struct timespec ts = log_query_time(dq);
		uint64_t sec = (uint64_t)ts.tv_sec;
		uint32_t nsec = (uint32_t)ts.tv_nsec;

		memcpy(buf + n, &sec, 8);
		memcpy(buf + n + 8, &nsec, 4);
		n += 12;
	}
	memcpy(buf + n, dq->pkt, 2);
	n += 2;
	qn = log_qname(dq, &qlen);
	if (qn == NULL) {
		buf[n++] = 0;
	} else {
		memcpy(buf + n, qn, qlen);
		n += qlen;
	}
	memcpy(buf + n, &qtype, 2);
	n += 2;
	fam = dq->remote != NULL ? dq->remote->sa_family : AF_UNSPEC;
	memcpy(buf + n, &fam, 2);
	n += 2;
	if (fam == AF_INET) {
		const struct sockaddr_in *sin = (const void *)dq->remote;

		memcpy(buf + n, &sin->sin_addr, 4);
		memcpy(buf + n + 4, &sin->sin_port, 2);
		n += 6;
	} else if (fam == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const void *)dq->remote;

		memcpy(buf + n, &sin6->sin6_addr, 16);
		memcpy(buf + n + 16, &sin6->sin6_port, 2);
		n += 18;
	}
	log_emit(l, buf, n);
}

/* The text line, without the newline; @return its length. */
static size_t
log_text(const struct dlb_log *l, const struct dlb_dq *dq, char *out, size_t outsz)
{
	char remote[96], name[DLB_WIRE_NAME_TEXT_MAX], tbuf[16], stamp[48] = "";
	const uint8_t *qn;
	size_t qlen = 0;
	uint16_t rawid = 0, qtype = dq->m != NULL ? dq->m->qtype : 0;
	int n;

	if (dq->remote != NULL)
		dlb_sockaddr_format(dq->remote, remote, sizeof(remote));
	else
		snprintf(remote, sizeof(remote), "(unknown)");
	qn = log_qname(dq, &qlen);
	if (qn == NULL || dlb_wire_name_to_text(qn, qlen, name, sizeof(name)) < 0)
		snprintf(name, sizeof(name), "-");
	if (dq->len >= 2)
		memcpy(&rawid, dq->pkt, 2);	/* dnsdist's byte order, see the file comment */
	if (l->timestamp) {
		struct timespec ts = log_query_time(dq);

		snprintf(stamp, sizeof(stamp), "[%llu.%lu] ", (unsigned long long)ts.tv_sec,
			 (unsigned long)ts.tv_nsec);
	}
	if (dq->response)
		n = snprintf(out, outsz, "%sAnswer to %s for %s %s (%s) with id %d", stamp, remote,
			     name, qtype_name(qtype, tbuf, sizeof(tbuf)),
			     dlb_wire_rcode_text(dq->len >= 4 ? dq->pkt[3] & 0xfu : 0), (int)rawid);
	else
		n = snprintf(out, outsz, "%sPacket from %s for %s %s with id %d", stamp, remote,
			     name, qtype_name(qtype, tbuf, sizeof(tbuf)), (int)rawid);
	if (n < 0)
		return 0;
	return (size_t)n < outsz ? (size_t)n : outsz - 1;
}

void
dlb_log_write(struct dlb_log *l, const struct dlb_dq *dq, bool verbose)
{
	char line[DLB_WIRE_NAME_TEXT_MAX + 256];
	size_t n;

	if (l->fd == -1) {
		if (l->verbose_only && !verbose)
			return;
		log_text(l, dq, line, sizeof(line));
		dlb_log(DLB_LOG_INFO, "%s", line);
		return;
	}
	if (l->binary && !dq->response) {
		log_binary(l, dq);
		return;
	}
	n = log_text(l, dq, line, sizeof(line) - 1);
	line[n++] = '\n';
	log_emit(l, line, n);
}
