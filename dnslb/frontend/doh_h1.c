/*
 * doh_h1.c - the HTTP/1.1 server side of one DoH connection (doh_h1.h).
 */
#include "dnslb/frontend/doh_h1.h"
#include "dnslb/core/buf.h"
#include "dnslb/core/dnslb.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define OUT_MAX		(256 * 1024)	/* answers waiting to be sent */

static const char bad_request[] =
	"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
	"Connection: close\r\nContent-Length: 11\r\n\r\nBad Request";

struct dlb_doh_h1 {
	struct dlb_doh_h2_limits lim;
	struct dlb_doh_h2_cb cb;
	void *ud;
	uint8_t *in;			/* bytes read, not yet consumed */
	size_t in_len, in_cap, in_max;
	struct dlb_buf out;		/* bytes to send, from out_off */
	size_t out_off;
	uint8_t *body;			/* a chunked body, decoded */
	size_t body_cap;
	char *head;			/* the current request's line and fields, NUL-split */
	size_t head_cap;
	int32_t next_id, cur_id;
	bool busy;			/* the current request waits for its answer */
	bool keep_alive;		/* ... and the connection lives on after it */
	bool continue_sent;		/* "100 Continue" sent for the request being read */
	bool closing;			/* nothing more is read; close once sent */
	bool in_feed;
};

const char *
dlb_doh_reason(int status)
{
	static const struct {
		int status;
		const char *text;
	} reasons[] = {
		{ 200, "OK" }, { 301, "Moved Permanently" }, { 302, "Found" }, { 303, "See Other" },
		{ 304, "Not Modified" }, { 305, "Use Proxy" }, { 306, "Switch Proxy" },
		{ 307, "Temporary Redirect" }, { 308, "Permanent Redirect" }, { 400, "Bad Request" },
		{ 401, "Unauthorized" }, { 402, "Payment Required" }, { 403, "Forbidden" },
		{ 404, "Not Found" }, { 405, "Method Not Allowed" }, { 406, "Not Acceptable" },
		{ 407, "Proxy Authentication Required" }, { 408, "Request Timeout" },
		{ 409, "Conflict" }, { 410, "Gone" }, { 411, "Length Required" },
		{ 412, "Precondition Failed" }, { 413, "Payload Too Large" }, { 414, "URI Too Long" },
		{ 415, "Unsupported Media Type" }, { 416, "Range Not Satisfiable" },
		{ 417, "Expectation Failed" }, { 418, "I'm a teapot" },
		{ 451, "Unavailable For Legal Reasons" }, { 500, "Internal Server Error" },
		{ 501, "Not Implemented" }, { 502, "Bad Gateway" }, { 503, "Service Unavailable" },
		{ 504, "Gateway Timeout" }, { 505, "HTTP Version Not Supported" },
	};

	for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++)
		if (reasons[i].status == status)
			return reasons[i].text;
	return "Unknown";
}

bool
dlb_doh_h1_is_h2_preface(const uint8_t *p, size_t len)
{
	static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
	size_t n = len < sizeof(preface) - 1 ? len : sizeof(preface) - 1;

	return memcmp(p, preface, n) == 0;
}

struct dlb_doh_h1 *
dlb_doh_h1_new(const struct dlb_doh_h2_limits *l, const struct dlb_doh_h2_cb *cb, void *ud)
{
	struct dlb_doh_h1 *h = calloc(1, sizeof(*h));

	if (h == NULL)
		return NULL;
	h->lim = *l;
	h->cb = *cb;
	h->ud = ud;
	/* a whole request fits, with its chunk framing */
	h->in_max = (size_t)l->max_header_list + (size_t)l->max_body * 2 + 4096;
	h->next_id = 1;
	dlb_buf_init(&h->out, OUT_MAX);
	return h;
}

void
dlb_doh_h1_free(struct dlb_doh_h1 *h)
{
	if (h == NULL)
		return;
	free(h->in);
	dlb_buf_deinit(&h->out);
	free(h->body);
	free(h->head);
	free(h);
}

/* ---- output ------------------------------------------------------------------------ */

/* Everything queued was sent: start the buffer over. */
static void
out_compact(struct dlb_doh_h1 *h)
{
	if (h->out_off > 0 && h->out_off == h->out.len) {
		dlb_buf_reset(&h->out);
		h->out_off = 0;
	}
}

/* Queue @len bytes to send; false when past OUT_MAX or out of memory (sticky). */
static bool
out_put(struct dlb_doh_h1 *h, const void *p, size_t len)
{
	out_compact(h);
	return dlb_buf_append(&h->out, p, len) == DLB_OK;
}

#define out_printf(h, ...) (dlb_buf_printf(&(h)->out, __VA_ARGS__) == DLB_OK)

/* The fixed 400 of a request h2o cannot parse, then the end. */
static int
fail_request(struct dlb_doh_h1 *h)
{
	out_put(h, bad_request, sizeof(bad_request) - 1);
	h->closing = true;
	return -1;
}

size_t
dlb_doh_h1_send(struct dlb_doh_h1 *h, uint8_t *out, size_t cap)
{
	size_t n = h->out.len - h->out_off;

	if (n > cap)
		n = cap;
	if (n > 0)
		memcpy(out, h->out.p + h->out_off, n);
	h->out_off += n;
	return n;
}

bool
dlb_doh_h1_busy(const struct dlb_doh_h1 *h)
{
	return h->busy;
}

bool
dlb_doh_h1_done(const struct dlb_doh_h1 *h)
{
	return h->closing && !h->busy && h->out_off == h->out.len;
}

/* ---- parsing ----------------------------------------------------------------------- */

static bool
tchar(int c)
{
	return isalnum(c) || (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* The end of the header block (after its empty line) in h->in, or 0. */
static size_t
head_end(const struct dlb_doh_h1 *h)
{
	for (size_t i = 3; i < h->in_len; i++)
		if (memcmp(h->in + i - 3, "\r\n\r\n", 4) == 0)
			return i + 1;
	return 0;
}

/* A chunked body starting at h->in[@off]: decoded into h->body. @return the
 * offset after it, 0 when incomplete, -1 malformed, -2 too large. */
static long
chunked(struct dlb_doh_h1 *h, size_t off, size_t *blen)
{
	size_t total = 0;

	for (;;) {
		size_t line_end = off, size = 0;
		bool digits = false;

		while (line_end + 1 < h->in_len && memcmp(h->in + line_end, "\r\n", 2) != 0)
			line_end++;
		if (line_end + 1 >= h->in_len)
			return 0;
		for (size_t i = off; i < line_end && h->in[i] != ';'; i++) {
			int c = tolower(h->in[i]), v;

			if (c >= '0' && c <= '9')
				v = c - '0';
			else if (c >= 'a' && c <= 'f')
				v = c - 'a' + 10;
			else
				return -1;
			size = size * 16 + (size_t)v;
			digits = true;
			if (size > h->lim.max_body)
				return -2;
		}
		if (!digits)
			return -1;
		off = line_end + 2;
		if (size == 0) {
			/* trailers (ignored) up to the empty line */
			for (;;) {
				size_t e = off;

				while (e + 1 < h->in_len && memcmp(h->in + e, "\r\n", 2) != 0)
					e++;
				if (e + 1 >= h->in_len)
					return 0;
				if (e == off) {
					*blen = total;
					return (long)(e + 2);
				}
				off = e + 2;
			}
		}
		if (total + size > h->lim.max_body)
			return -2;
		if (off + size + 2 > h->in_len)
			return 0;
		if (memcmp(h->in + off + size, "\r\n", 2) != 0)
			return -1;
		if (total + size > h->body_cap) {
			uint8_t *b = realloc(h->body, h->lim.max_body ? h->lim.max_body : 1);

			if (b == NULL)
				return -1;
			h->body = b;
			h->body_cap = h->lim.max_body;
		}
		memcpy(h->body + total, h->in + off, size);
		total += size;
		off += size + 2;
	}
}

/* Answer 413 to the request being read, then close. */
static int
too_large(struct dlb_doh_h1 *h)
{
	static const char text[] = "Payload Too Large";

	out_compact(h);
	(void)out_printf(h, "HTTP/1.1 413 Payload Too Large\r\nConnection: close\r\nContent-Length: %zu\r\n"
		   "content-type: text/plain; charset=utf-8\r\n\r\n", sizeof(text) - 1);
	out_put(h, text, sizeof(text) - 1);
	h->closing = true;
	return -1;
}

/*
 * The next request of h->in, if complete: handed to the callback, its bytes
 * consumed. @return 1 handed on, 0 incomplete, -1 the connection ends.
 */
static int
parse_one(struct dlb_doh_h1 *h)
{
	struct dlb_doh_request rq;
	size_t hend = head_end(h), blen = 0, consumed, clen = 0;
	char *p, *line, *end, *method, *target, *version;
	bool has_clen = false, is_chunked = false, keep_alive, expect_continue = false;
	const uint8_t *body = NULL;

	if (hend == 0) {
		if (h->in_len > h->lim.max_header_list)
			return fail_request(h);
		return 0;
	}
	if (hend > h->lim.max_header_list + 4 || memchr(h->in, '\0', hend) != NULL)
		return fail_request(h);	/* too long, or a NUL the string parsing below cannot see past */
	if (hend + 1 > h->head_cap) {
		char *n = realloc(h->head, hend + 1);

		if (n == NULL)
			return fail_request(h);
		h->head = n;
		h->head_cap = hend + 1;
	}
	memcpy(h->head, h->in, hend);
	h->head[hend] = '\0';
	memset(&rq, 0, sizeof(rq));

	/* the request line: METHOD SP target SP HTTP/1.x */
	line = h->head;
	end = strstr(line, "\r\n");
	*end = '\0';
	method = line;
	for (p = method; tchar((unsigned char)*p); p++)
		;
	if (p == method || *p != ' ')
		return fail_request(h);
	*p++ = '\0';
	target = p;
	for (; (unsigned char)*p > ' ' && *p != 0x7f; p++)
		;
	if (p == target || *p != ' ')
		return fail_request(h);
	*p++ = '\0';
	version = p;
	if (strncmp(version, "HTTP/1.", 7) != 0 || !isdigit((unsigned char)version[7]) ||
	    version[8] != '\0')
		return fail_request(h);
	keep_alive = version[7] != '0';

	/* the fields */
	for (line = end + 2; *line != '\r'; line = end + 2) {
		char *name = line, *value, *v_end;

		end = strstr(line, "\r\n");
		*end = '\0';
		for (p = name; tchar((unsigned char)*p); p++)
			*p = (char)tolower((unsigned char)*p);
		if (p == name || *p != ':')
			return fail_request(h);	/* obs-fold, a space before ':', no name */
		*p++ = '\0';
		while (*p == ' ' || *p == '\t')
			p++;
		value = p;
		v_end = end;
		while (v_end > value && (v_end[-1] == ' ' || v_end[-1] == '\t'))
			v_end--;
		*v_end = '\0';
		for (p = value; *p; p++)
			if ((unsigned char)*p < ' ' && *p != '\t')
				return fail_request(h);
		if (strcmp(name, "content-length") == 0) {
			char *e;
			unsigned long long n = strtoull(value, &e, 10);

			if (!isdigit((unsigned char)*value) || *e != '\0' || (has_clen && n != clen))
				return fail_request(h);
			has_clen = true;
			clen = n > SIZE_MAX / 2 ? SIZE_MAX / 2 : (size_t)n;
		} else if (strcmp(name, "transfer-encoding") == 0) {
			if (strcasecmp(value, "chunked") != 0)
				return fail_request(h);
			is_chunked = true;
		} else if (strcmp(name, "connection") == 0) {
			if (strcasecmp(value, "close") == 0)
				keep_alive = false;
			else if (strcasecmp(value, "keep-alive") == 0)
				keep_alive = true;
		} else if (strcmp(name, "expect") == 0) {
			expect_continue = strcasecmp(value, "100-continue") == 0;
		} else if (strcmp(name, "host") == 0) {
			rq.authority = value;
		}
		if (rq.nheaders < DLB_DOH_MAX_HEADERS) {
			rq.headers[rq.nheaders].name = name;
			rq.headers[rq.nheaders].value = value;
			rq.nheaders++;
		}
	}
	if (has_clen && is_chunked)
		return fail_request(h);

	/* the body */
	if (is_chunked || (has_clen && clen > 0)) {
		if (has_clen && clen > h->lim.max_body)
			return too_large(h);
		if (expect_continue && !h->continue_sent) {
			out_put(h, "HTTP/1.1 100 Continue\r\n\r\n", 25);
			h->continue_sent = true;
		}
	}
	if (is_chunked) {
		long r = chunked(h, hend, &blen);

		if (r == -2)
			return too_large(h);
		if (r < 0)
			return fail_request(h);
		if (r == 0)
			return h->in_len >= h->in_max ? fail_request(h) : 0;
		consumed = (size_t)r;
		body = h->body;
	} else {
		if (h->in_len < hend + clen)
			return 0;
		blen = clen;
		body = h->in + hend;
		consumed = hend + clen;
	}

	rq.stream_id = h->next_id;
	h->next_id += 2;
	rq.method = method;
	rq.path = target;
	rq.path_len = strlen(target);
	rq.scheme = "";
	rq.has_authority = rq.authority != NULL;
	if (rq.authority == NULL)
		rq.authority = "";
	rq.body = body;
	rq.body_len = blen;
	h->cur_id = rq.stream_id;
	h->busy = true;
	h->keep_alive = keep_alive;
	h->continue_sent = false;
	h->cb.request(h->ud, &rq);
	/* the request's bytes go (the callback is done with them) */
	memmove(h->in, h->in + consumed, h->in_len - consumed);
	h->in_len -= consumed;
	return 1;
}

static int
parse_loop(struct dlb_doh_h1 *h)
{
	int r = 0;

	while (!h->busy && !h->closing && h->in_len > 0) {
		r = parse_one(h);
		if (r <= 0)
			break;
	}
	return r < 0 ? -1 : 0;
}

int
dlb_doh_h1_feed(struct dlb_doh_h1 *h, const uint8_t *in, size_t len)
{
	int r;

	if (h->closing)
		return -1;
	if (len > 0) {
		if (h->in_len + len > h->in_max) {
			fail_request(h);
			return -1;
		}
		if (h->in_len + len > h->in_cap) {
			size_t cap = h->in_cap ? h->in_cap : 4096;
			uint8_t *n;

			while (cap < h->in_len + len)
				cap *= 2;
			if (cap > h->in_max)
				cap = h->in_max;
			n = realloc(h->in, cap);
			if (n == NULL)
				return fail_request(h);
			h->in = n;
			h->in_cap = cap;
		}
		memcpy(h->in + h->in_len, in, len);
		h->in_len += len;
	}
	h->in_feed = true;
	r = parse_loop(h);
	h->in_feed = false;
	return r;
}

int
dlb_doh_h1_respond(struct dlb_doh_h1 *h, int32_t id, int status, const char *reason,
		   const struct dlb_doh_header *hdrs, size_t nh, const uint8_t *body, size_t len)
{
	const char *server = NULL, *date = NULL;
	bool ok;

	if (!h->busy || id != h->cur_id)
		return -1;
	for (size_t i = 0; i < nh; i++) {
		if (strcmp(hdrs[i].name, "server") == 0)
			server = hdrs[i].value;
		else if (strcmp(hdrs[i].name, "date") == 0)
			date = hdrs[i].value;
	}
	/* h2o's order: the status line, Date, Connection, Content-Length, Server, the rest */
	out_compact(h);
	ok = out_printf(h, "HTTP/1.1 %d %s\r\n", status, reason ? reason : dlb_doh_reason(status));
	if (date != NULL)
		ok = ok && out_printf(h, "Date: %s\r\n", date);
	ok = ok && out_printf(h, "Connection: %s\r\n", h->keep_alive ? "keep-alive" : "close");
	ok = ok && out_printf(h, "Content-Length: %zu\r\n", len);
	if (server != NULL)
		ok = ok && out_printf(h, "Server: %s\r\n", server);
	for (size_t i = 0; i < nh; i++) {
		if (hdrs[i].value == server || hdrs[i].value == date)
			continue;
		ok = ok && out_printf(h, "%s: %s\r\n", hdrs[i].name, hdrs[i].value);
	}
	ok = ok && out_put(h, "\r\n", 2) && (len == 0 || out_put(h, body, len));
	h->busy = false;
	if (!ok || !h->keep_alive) {
		h->closing = true;
		return ok ? 0 : -1;
	}
	if (!h->in_feed)
		parse_loop(h);
	return 0;
}
