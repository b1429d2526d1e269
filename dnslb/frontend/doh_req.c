/*
 * doh_req.c - DNS over HTTPS requests as dnsdist 1.7 reads them (doh_req.h).
 */
#include "dnslb/frontend/doh_req.h"
#include "dnslb/core/netmask.h"
#include "dnslb/core/util.h"
#include "dnslb/core/wire.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DNS_HEADER 12

/*
 * What dnsdist 1.7 checks before it takes a DoH query: a header, then a
 * question name that parses, then its type (the class may be missing).
 */
static bool
looks_like_dns(const uint8_t *q, size_t len)
{
	uint8_t name[DLB_MAX_NAME];
	size_t next;

	if (len < DNS_HEADER)
		return false;
	if (dlb_wire_decode_name(q, len, DNS_HEADER, name, &next, NULL) < 0)
		return false;
	return next + 2 <= len;
}

static const struct {
	int status;
	const char *text;
} verdicts[DLB_DOH__COUNT] = {
	[DLB_DOH_QUERY] = { 200, "" },
	[DLB_DOH_NOT_FOUND] = { 404, "not found" },
	[DLB_DOH_NO_ENDPOINT] = { 404, "there is no endpoint configured for this path" },
	[DLB_DOH_BAD_REQUEST] = { 400, "Unable to parse the request" },
	[DLB_DOH_NO_DNS_PARAM] = { 400, "Unable to find the DNS parameter" },
	[DLB_DOH_BAD_BASE64] = { 400, "Unable to decode BASE64-URL" },
	[DLB_DOH_NOT_DNS] = { 400, "The DNS query could not be parsed" },
	[DLB_DOH_TOO_LARGE] = { 413, "Payload Too Large" },
};

int
dlb_doh_status(enum dlb_doh_verdict v)
{
	return (unsigned)v < DLB_DOH__COUNT ? verdicts[v].status : 500;
}

const char *
dlb_doh_text(enum dlb_doh_verdict v)
{
	return (unsigned)v < DLB_DOH__COUNT ? verdicts[v].text : "Internal Server Error";
}

/* ---- paths ------------------------------------------------------------------- */

static bool
unreserved(int c)
{
	return isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

size_t
dlb_doh_normalize(const char *path, size_t len, char *out, size_t cap)
{
	size_t n = 0;
	const char *q = memchr(path, '?', len);

	if (q != NULL)
		len = (size_t)(q - path);
	if (len == 0 || path[0] != '/' || cap < 2)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = path[i];

		if (c == '%' && i + 2 < len) {
			int hi = dlb_hexval(path[i + 1]), lo = dlb_hexval(path[i + 2]);

			if (hi >= 0 && lo >= 0 && unreserved(hi << 4 | lo)) {
				c = (char)(hi << 4 | lo);
				i += 2;
			}
		}
		if (n + 1 >= cap)
			return 0;
		out[n++] = c;
		/* a segment just ended (or the path did): resolve "." and ".." */
		if (c == '/' || i + 1 == len) {
			size_t end = c == '/' ? n - 1 : n;	/* the segment is out[start, end) */
			size_t start = end;

			while (start > 0 && out[start - 1] != '/')
				start--;
			if (end - start == 1 && out[start] == '.') {
				n = start;	/* "/./" -> "/" */
			} else if (end - start == 2 && out[start] == '.' && out[start + 1] == '.') {
				size_t prev = start > 0 ? start - 1 : 0;	/* the '/' before ".." */

				while (prev > 0 && out[prev - 1] != '/')
					prev--;
				n = prev > 0 ? prev : 1;	/* never above the root */
			}
		}
	}
	if (n == 0)
		out[n++] = '/';
	out[n] = '\0';
	return n;
}

bool
dlb_doh_route(const struct dlb_doh_paths *p, const char *norm, size_t len)
{
	for (size_t i = 0; i < p->n; i++) {
		size_t pl = strlen(p->paths[i]);

		if (pl > len || memcmp(p->paths[i], norm, pl) != 0)
			continue;
		/* "/a" takes "/a" and "/a/...", never "/ab"; "/a/" takes "/a/..." */
		if (pl == len || p->paths[i][pl - 1] == '/' || norm[pl] == '/')
			return true;
	}
	return false;
}

bool
dlb_doh_exact(const struct dlb_doh_paths *p, const char *norm, size_t len)
{
	if (!p->exact)
		return true;
	for (size_t i = 0; i < p->n; i++)
		if (strlen(p->paths[i]) == len && memcmp(p->paths[i], norm, len) == 0)
			return true;
	return false;
}

/* ---- the query ------------------------------------------------------------------ */

/*
 * One base64 character as dnsdist 1.7's decoder reads it: the standard
 * alphabet, '=' as zero, and, by the arithmetic of that decoder, a few
 * more: the bytes 0x00-0x2f read as 4-51, 0x5b-0x60 as 20-25 and 0xfc-0xff
 * as 0-3. -1: a byte it refuses (0x3a-0x40, 0x7b-0xfb).
 */
static int
b64_value(unsigned char c)
{
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	if (c == '=')
		return 0;
	if (c <= '9')
		return c + 4;
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 0x5b && c <= 'z')
		return c - 'a' + 26;
	if (c >= 0xfc)
		return c - 0xfc;
	return -1;
}

static bool
b64_space(unsigned char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r');
}

long
dlb_doh_base64url_decode(const char *in, size_t len, uint8_t *out, size_t cap)
{
	size_t n = 0, i = 0, total = len;
	unsigned pad = 0;

	/* '-' and '_' read as '+' and '/', and the padding a client may leave
	 * out is added back to a multiple of four: "==" or "=" */
	if (len % 4 == 2)
		total += 2;
	else if (len % 4 == 3)
		total += 1;
	while (i < total) {
		uint32_t group = 0;

		pad = 0;
		for (int k = 0; k < 4; k++) {
			unsigned char c = 0;
			int v = 0;

			if (i < total) {
				c = i < len ? (unsigned char)in[i] : '=';
				if (c == '=')
					pad++;
				while (b64_space(c)) {
					if (++i >= total)
						return -1;	/* dnsdist fails there too, without an answer */
					c = i < len ? (unsigned char)in[i] : '=';
				}
				i++;
				c = c == '-' ? '+' : c == '_' ? '/' : c;
				v = b64_value(c);
				if (v < 0)
					return -1;
			}
			group = group << 6 | (uint32_t)v;
		}
		if (n + 3 > cap)
			return -1;
		out[n++] = (uint8_t)(group >> 16);
		out[n++] = (uint8_t)(group >> 8);
		out[n++] = (uint8_t)group;
	}
	/* the last group's '=' take back as many bytes */
	if (pad > n)
		return -1;
	return (long)(n - pad);
}

enum dlb_doh_verdict
dlb_doh_query(const char *method, size_t mlen, const char *path, size_t len, const uint8_t *body,
	      size_t blen, uint8_t *out, size_t cap, size_t *outlen)
{
	const char *q, *param = NULL;
	size_t qat, plen;
	long got;

	*outlen = 0;
	if (mlen == 4 && memcmp(method, "POST", 4) == 0) {
		if (blen > cap)
			return DLB_DOH_TOO_LARGE;
		if (!looks_like_dns(body, blen))
			return DLB_DOH_NOT_DNS;
		memcpy(out, body, blen);
		*outlen = blen;
		return DLB_DOH_QUERY;
	}
	/* any other method reads as a GET: dnsdist 1.7 does not look at it */
	q = memchr(path, '?', len);
	if (q == NULL)
		return DLB_DOH_BAD_REQUEST;
	qat = (size_t)(q - path);
	if (len - qat <= 5)
		return DLB_DOH_BAD_REQUEST;	/* "?dns=" and nothing after it */
	for (size_t i = qat; i + 5 <= len; i++) {
		if (memcmp(path + i, "?dns=", 5) == 0) {
			param = path + i + 5;
			break;
		}
	}
	if (param == NULL) {
		for (size_t i = qat; i + 5 <= len; i++) {
			if (memcmp(path + i, "&dns=", 5) == 0) {
				param = path + i + 5;
				break;
			}
		}
	}
	if (param == NULL)
		return DLB_DOH_NO_DNS_PARAM;
	/* dnsdist decodes everything after "dns=", later parameters included */
	plen = len - (size_t)(param - path);
	if (plen > (cap / 3 + 2) * 4)
		return DLB_DOH_TOO_LARGE;
	got = dlb_doh_base64url_decode(param, plen, out, cap);
	if (got < 0)
		return DLB_DOH_BAD_BASE64;
	if (!looks_like_dns(out, (size_t)got))
		return DLB_DOH_NOT_DNS;
	*outlen = (size_t)got;
	return DLB_DOH_QUERY;
}

/* ---- answers ------------------------------------------------------------------------ */

uint32_t
dlb_doh_min_ttl(const uint8_t *pkt, size_t len)
{
	uint32_t min = UINT32_MAX;
	size_t off = DNS_HEADER;
	unsigned qd, nrec;

	if (len < DNS_HEADER)
		return min;
	qd = dlb_rd16(pkt + 4);
	nrec = (unsigned)dlb_rd16(pkt + 6) + dlb_rd16(pkt + 8) + dlb_rd16(pkt + 10);
	for (unsigned i = 0; i < qd; i++) {
		int next = dlb_wire_skip_name(pkt, len, off);

		if (next < 0 || (size_t)next + 4 > len)
			return min;
		off = (size_t)next + 4;
	}
	for (unsigned i = 0; i < nrec; i++) {
		int next = dlb_wire_skip_name(pkt, len, off);
		uint16_t type, class, rdlen;

		if (next < 0 || (size_t)next + 10 > len)
			return min;
		off = (size_t)next;
		type = dlb_rd16(pkt + off);
		class = dlb_rd16(pkt + off + 2);
		if (type == 41)
			break;	/* OPT: dnsdist stops there */
		if (class == 1 && dlb_rd32(pkt + off + 4) < min)
			min = dlb_rd32(pkt + off + 4);
		rdlen = dlb_rd16(pkt + off + 8);
		off += 10 + (size_t)rdlen;
		if (off > len)
			return min;
	}
	return min;
}

static void
add_header(struct dlb_doh_answer *a, const char *name, const char *value)
{
	if (a->nheaders < DLB_DOH_ANSWER_HEADERS)
		a->headers[a->nheaders++] = (struct dlb_doh_header){ (char *)name, (char *)value };
}

void
dlb_doh_answer_build(struct dlb_doh_answer *a, int status, const uint8_t *body, size_t len,
		     const struct dlb_doh_answer_opts *o)
{
	static const char text_plain[] = "text/plain; charset=utf-8";
	size_t ncustom = o->ncustom < DLB_DOH_MAX_CUSTOM ? o->ncustom : DLB_DOH_MAX_CUSTOM;
	size_t n;

	a->nheaders = 0;
	a->status = status;
	a->body = body;
	a->len = len;
	if (o->server != NULL)
		add_header(a, "server", o->server);
	if (o->date != NULL)
		add_header(a, "date", o->date);
	if (status == 200) {
		uint32_t ttl;

		for (size_t i = 0; i < ncustom; i++)
			add_header(a, o->custom[i].name, o->custom[i].value);
		if (o->add_content_type)
			add_header(a, "content-type", o->content_type ? o->content_type :
				   "application/dns-message");
		if (o->cache_control && len > DNS_HEADER &&
		    (ttl = dlb_doh_min_ttl(body, len)) != UINT32_MAX) {
			snprintf(a->value, sizeof(a->value), "max-age=%u", ttl);
			add_header(a, "cache-control", a->value);
		}
		return;
	}
	if (status >= 300 && status < 400) {
		/* the body is the URL; the page says so */
		static const char head[] = "<!DOCTYPE html><TITLE>Moved</TITLE><P>The document has moved <A HREF=\"";

		n = len < sizeof(a->value) - 1 ? len : sizeof(a->value) - 1;
		if (n > 0)
			memcpy(a->value, body, n);
		a->value[n] = '\0';
		add_header(a, "location", a->value);
		snprintf(a->text, sizeof(a->text), "%s%s\">here</A>", head, a->value);
		n = strlen(a->text);
		add_header(a, "content-type", "text/html; charset=utf-8");
		a->body = (const uint8_t *)a->text;
		a->len = n;
		return;
	}
	if (len > 0 || o->body_given) {
		for (size_t i = 0; i < ncustom; i++)
			add_header(a, o->custom[i].name, o->custom[i].value);
		add_header(a, "content-type", text_plain);
		return;
	}
	switch (status) {
	case 400:
		snprintf(a->text, sizeof(a->text), "invalid DNS query");
		break;
	case 403:
		snprintf(a->text, sizeof(a->text), "dns query not allowed");
		break;
	case 502:
		snprintf(a->text, sizeof(a->text), "no downstream server available");
		break;
	default:
		a->status = 500;
		snprintf(a->text, sizeof(a->text), "Internal Server Error");
		break;
	}
	add_header(a, "content-type", text_plain);
	a->body = (const uint8_t *)a->text;
	a->len = strlen(a->text);
}

void
dlb_doh_answer_verdict(struct dlb_doh_answer *a, enum dlb_doh_verdict v,
		       const struct dlb_doh_answer_opts *o)
{
	struct dlb_doh_answer_opts plain = *o;

	/* h2o's own errors: no custom field */
	plain.ncustom = 0;
	snprintf(a->text, sizeof(a->text), "%s", dlb_doh_text(v));
	dlb_doh_answer_build(a, dlb_doh_status(v), (const uint8_t *)a->text, strlen(a->text), &plain);
}

/* ---- X-Forwarded-For ---------------------------------------------------------------- */

bool
dlb_doh_forwarded_for(const char *value, size_t len, struct sockaddr_storage *out)
{
	char text[INET6_ADDRSTRLEN + 16];
	const char *v = value, *comma = NULL;
	socklen_t slen;

	for (size_t i = 0; i < len; i++)
		if (value[i] == ',')
			comma = value + i;
	if (comma != NULL) {
		const char *p = comma + 1;

		while (p < value + len && *p == ' ')
			p++;
		if (p < value + len) {
			len -= (size_t)(p - value);
			v = p;
		}
	}
	if (len == 0 || len >= sizeof(text))
		return false;
	memcpy(text, v, len);
	text[len] = '\0';
	/* the address forms a ComboAddress takes: "a.b.c.d[:port]", "[v6][:port]", "v6" */
	return dlb_sockaddr_parse(text, 0, out, &slen) == 0;
}
