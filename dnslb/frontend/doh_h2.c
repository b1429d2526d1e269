/*
 * doh_h2.c - the HTTP/2 server side of one DoH connection (doh_h2.h).
 */
#include "dnslb/frontend/doh_h2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nghttp2/nghttp2.h>

/* A header field of a stream, as offsets into its arena. */
struct field {
	uint32_t name, name_len, value, value_len;
};

struct stream {
	struct stream *prev, *next;	/* the session's open streams (h->streams) */
	int32_t id;
	char *arena;			/* pseudo-header values and fields, grown to the limit */
	size_t used, cap;
	size_t list_bytes;		/* the header list's size as HTTP/2 counts it */
	uint32_t method, method_len, path, path_len, scheme, scheme_len, authority, authority_len;
	bool has_method, has_path, has_scheme, has_authority;
	struct field fields[DLB_DOH_MAX_HEADERS];
	size_t nfields;
	uint8_t *body;
	size_t body_len, body_cap;
	bool too_big;			/* the body passed the limit: 413 */
	bool delivered;			/* handed to the request callback */
	bool answered;
	uint8_t *resp;			/* the answer's body, sent by resp_read */
	size_t resp_len, resp_off;
};

struct dlb_doh_h2 {
	nghttp2_session *s;
	struct dlb_doh_h2_limits lim;
	struct dlb_doh_h2_cb cb;
	void *ud;
	const uint8_t *pending;		/* nghttp2's output not yet copied out */
	size_t pending_len;
	struct stream *streams;		/* open streams with storage: freed with the session,
					 * whose deletion calls no close callback */
	size_t nstreams;
	time_t reset_window;		/* the second the resets are counted in */
	uint32_t resets;
	bool fatal;
};

void
dlb_doh_h2_limits_default(struct dlb_doh_h2_limits *l)
{
	l->max_streams = 100;
	l->max_header_list = 16 * 1024;
	l->max_body = 65535;
	l->max_resets_per_s = 100;
}

/* ---- a stream's storage ------------------------------------------------------ */

static void
stream_free(struct stream *st)
{
	free(st->arena);
	free(st->body);
	free(st->resp);
	free(st);
}

/* Copy @len bytes of @p into the arena; @return their offset, or -1 when the
 * arena would pass @limit. */
static long
arena_put(struct stream *st, const uint8_t *p, size_t len, size_t limit)
{
	size_t off = st->used;

	if (st->used + len + 1 > st->cap) {
		size_t cap = st->cap ? st->cap : 256;
		char *a;

		while (cap < st->used + len + 1)
			cap *= 2;
		if (cap > limit + 1)
			cap = limit + 1;
		if (st->used + len + 1 > cap)
			return -1;
		a = realloc(st->arena, cap);
		if (a == NULL)
			return -1;
		st->arena = a;
		st->cap = cap;
	}
	memcpy(st->arena + off, p, len);
	st->arena[off + len] = '\0';
	st->used += len + 1;
	return (long)off;
}

static const char *
at(const struct stream *st, bool has, uint32_t off)
{
	return has ? st->arena + off : "";
}

/* ---- nghttp2's callbacks ---------------------------------------------------------- */

static int
on_begin_headers(nghttp2_session *s, const nghttp2_frame *frame, void *ud)
{
	struct dlb_doh_h2 *h = ud;
	struct stream *st;

	if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	st = calloc(1, sizeof(*st));
	if (st == NULL)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;	/* the stream is reset */
	st->id = frame->hd.stream_id;
	nghttp2_session_set_stream_user_data(s, st->id, st);
	st->next = h->streams;
	if (h->streams != NULL)
		h->streams->prev = st;
	h->streams = st;
	h->nstreams++;
	return 0;
}

static int
on_header(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
	  const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
	struct dlb_doh_h2 *h = ud;
	struct stream *st;
	long nv, vv;

	(void)flags;
	if (frame->hd.type != NGHTTP2_HEADERS)
		return 0;
	st = nghttp2_session_get_stream_user_data(s, frame->hd.stream_id);
	if (st == NULL)
		return 0;	/* trailers of a stream we do not keep */
	/* RFC 9113's accounting: each field costs its name, its value and 32 */
	st->list_bytes += namelen + valuelen + 32;
	if (st->list_bytes > h->lim.max_header_list)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	vv = arena_put(st, value, valuelen, h->lim.max_header_list * 2);
	if (vv < 0)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	if (namelen > 0 && name[0] == ':') {
#define PSEUDO(lit, field)								\
		if (namelen == sizeof(lit) - 1 && memcmp(name, lit, namelen) == 0) {	\
			st->field = (uint32_t)vv;					\
			st->field##_len = (uint32_t)valuelen;				\
			st->has_##field = true;						\
			return 0;							\
		}
		PSEUDO(":method", method)
		PSEUDO(":path", path)
		PSEUDO(":scheme", scheme)
		PSEUDO(":authority", authority)
#undef PSEUDO
		return 0;	/* nghttp2 has checked the pseudo-headers already */
	}
	if (st->nfields == DLB_DOH_MAX_HEADERS)
		return 0;	/* kept: the first 64; the rest count against the limit only */
	nv = arena_put(st, name, namelen, h->lim.max_header_list * 2);
	if (nv < 0)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	st->fields[st->nfields++] = (struct field){ (uint32_t)nv, (uint32_t)namelen, (uint32_t)vv,
						    (uint32_t)valuelen };
	return 0;
}

static int
on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t stream_id, const uint8_t *data, size_t len,
	      void *ud)
{
	struct dlb_doh_h2 *h = ud;
	struct stream *st = nghttp2_session_get_stream_user_data(s, stream_id);

	(void)flags;
	if (st == NULL || st->too_big)
		return 0;
	if (st->body_len + len > h->lim.max_body) {
		st->too_big = true;	/* answered 413 at the end of the stream */
		free(st->body);
		st->body = NULL;
		st->body_len = st->body_cap = 0;
		return 0;
	}
	if (st->body_len + len > st->body_cap) {
		size_t cap = st->body_cap ? st->body_cap : 512;
		uint8_t *b;

		while (cap < st->body_len + len)
			cap *= 2;
		if (cap > h->lim.max_body)
			cap = h->lim.max_body;
		b = realloc(st->body, cap);
		if (b == NULL)
			return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
		st->body = b;
		st->body_cap = cap;
	}
	memcpy(st->body + st->body_len, data, len);
	st->body_len += len;
	return 0;
}

static void
deliver(struct dlb_doh_h2 *h, struct stream *st)
{
	struct dlb_doh_request rq;

	st->delivered = true;
	if (st->too_big) {
		static const char text[] = "Payload Too Large";
		static const struct dlb_doh_header ct = { "content-type", "text/plain; charset=utf-8" };

		dlb_doh_h2_respond(h, st->id, 413, &ct, 1, (const uint8_t *)text, sizeof(text) - 1);
		return;
	}
	memset(&rq, 0, sizeof(rq));
	rq.stream_id = st->id;
	rq.method = at(st, st->has_method, st->method);
	rq.path = at(st, st->has_path, st->path);
	rq.path_len = st->has_path ? st->path_len : 0;
	rq.scheme = at(st, st->has_scheme, st->scheme);
	rq.authority = at(st, st->has_authority, st->authority);
	rq.has_authority = st->has_authority;
	for (size_t i = 0; i < st->nfields; i++) {
		rq.headers[i].name = st->arena + st->fields[i].name;
		rq.headers[i].value = st->arena + st->fields[i].value;
	}
	rq.nheaders = st->nfields;
	rq.body = st->body;
	rq.body_len = st->body_len;
	h->cb.request(h->ud, &rq);
}

/* A client's resets, counted per second: over the limit, the connection
 * ends (RFC 9113's ENHANCE_YOUR_CALM). */
static void
count_reset(struct dlb_doh_h2 *h)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	if (ts.tv_sec != h->reset_window) {
		h->reset_window = ts.tv_sec;
		h->resets = 0;
	}
	if (++h->resets > h->lim.max_resets_per_s) {
		nghttp2_session_terminate_session(h->s, NGHTTP2_ENHANCE_YOUR_CALM);
		h->fatal = true;
	}
}

static int
on_frame_recv(nghttp2_session *s, const nghttp2_frame *frame, void *ud)
{
	struct dlb_doh_h2 *h = ud;
	struct stream *st;

	switch (frame->hd.type) {
	case NGHTTP2_RST_STREAM:
		count_reset(h);
		return 0;
	case NGHTTP2_HEADERS:
	case NGHTTP2_DATA:
		if (!(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
			return 0;
		st = nghttp2_session_get_stream_user_data(s, frame->hd.stream_id);
		if (st != NULL && !st->delivered)
			deliver(h, st);
		return 0;
	default:
		return 0;
	}
}

static int
on_stream_close(nghttp2_session *s, int32_t stream_id, uint32_t error_code, void *ud)
{
	struct dlb_doh_h2 *h = ud;
	struct stream *st = nghttp2_session_get_stream_user_data(s, stream_id);

	(void)error_code;
	if (st == NULL)
		return 0;
	if (st->delivered && !st->answered && h->cb.gone != NULL)
		h->cb.gone(h->ud, stream_id);
	nghttp2_session_set_stream_user_data(s, stream_id, NULL);
	if (st->prev != NULL)
		st->prev->next = st->next;
	else
		h->streams = st->next;
	if (st->next != NULL)
		st->next->prev = st->prev;
	stream_free(st);
	h->nstreams--;
	return 0;
}

static ssize_t
resp_read(nghttp2_session *s, int32_t stream_id, uint8_t *buf, size_t length, uint32_t *flags,
	  nghttp2_data_source *src, void *ud)
{
	struct stream *st = src->ptr;
	size_t n = st->resp_len - st->resp_off;

	(void)s;
	(void)stream_id;
	(void)ud;
	if (n > length)
		n = length;
	if (n > 0)
		memcpy(buf, st->resp + st->resp_off, n);
	st->resp_off += n;
	if (st->resp_off == st->resp_len)
		*flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)n;
}

/* ---- the session ---------------------------------------------------------------------- */

struct dlb_doh_h2 *
dlb_doh_h2_new(const struct dlb_doh_h2_limits *l, const struct dlb_doh_h2_cb *cb, void *ud)
{
	struct dlb_doh_h2 *h = calloc(1, sizeof(*h));
	nghttp2_session_callbacks *cbs = NULL;
	nghttp2_option *opt = NULL;
	nghttp2_settings_entry iv[2];
	int rc;

	if (h == NULL)
		return NULL;
	h->lim = *l;
	h->cb = *cb;
	h->ud = ud;
	if (nghttp2_session_callbacks_new(&cbs) != 0 || nghttp2_option_new(&opt) != 0)
		goto bad;
	nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
	/* nghttp2's own flood bounds: queued ACKs (SETTINGS, PING) and settings per frame */
	nghttp2_option_set_max_outbound_ack(opt, 1000);
	nghttp2_option_set_max_settings(opt, 32);
	rc = nghttp2_session_server_new2(&h->s, cbs, h, opt);
	nghttp2_session_callbacks_del(cbs);
	nghttp2_option_del(opt);
	cbs = NULL;
	opt = NULL;
	if (rc != 0)
		goto bad;
	iv[0] = (nghttp2_settings_entry){ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, l->max_streams };
	iv[1] = (nghttp2_settings_entry){ NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, l->max_header_list };
	if (nghttp2_submit_settings(h->s, NGHTTP2_FLAG_NONE, iv, 2) != 0)
		goto bad;
	return h;
bad:
	if (cbs != NULL)
		nghttp2_session_callbacks_del(cbs);
	if (opt != NULL)
		nghttp2_option_del(opt);
	dlb_doh_h2_free(h);
	return NULL;
}

void
dlb_doh_h2_free(struct dlb_doh_h2 *h)
{
	if (h == NULL)
		return;
	/* the streams still open: nghttp2_session_del calls no close callback
	 * for them, so their storage goes here; nobody hears of them */
	h->cb.gone = NULL;
	while (h->streams != NULL) {
		struct stream *st = h->streams;

		h->streams = st->next;
		if (h->s != NULL)
			nghttp2_session_set_stream_user_data(h->s, st->id, NULL);
		stream_free(st);
	}
	nghttp2_session_del(h->s);
	free(h);
}

int
dlb_doh_h2_feed(struct dlb_doh_h2 *h, const uint8_t *in, size_t len)
{
	ssize_t rc;

	if (h->fatal)
		return -1;
	rc = nghttp2_session_mem_recv(h->s, in, len);
	if (rc < 0) {
		/* a bad preface, a flood, no memory: nghttp2 stops reading */
		h->fatal = true;
		nghttp2_session_terminate_session(h->s, rc == NGHTTP2_ERR_FLOODED ?
						  NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_PROTOCOL_ERROR);
		return -1;
	}
	return h->fatal ? -1 : 0;
}

int
dlb_doh_h2_respond(struct dlb_doh_h2 *h, int32_t stream_id, int status,
		   const struct dlb_doh_header *hdrs, size_t nh, const uint8_t *body, size_t len)
{
	struct stream *st = nghttp2_session_get_stream_user_data(h->s, stream_id);
	nghttp2_nv nva[DLB_DOH_MAX_HEADERS + 2];
	char status_text[8], length_text[24];
	nghttp2_data_provider prd;
	size_t n = 0;

	if (st == NULL || st->answered)
		return -1;
	if (nh > DLB_DOH_MAX_HEADERS)
		nh = DLB_DOH_MAX_HEADERS;
	snprintf(status_text, sizeof(status_text), "%d", status);
	snprintf(length_text, sizeof(length_text), "%zu", len);
#define NV(n_, v_) ((nghttp2_nv){ (uint8_t *)(n_), (uint8_t *)(v_), strlen(n_), strlen(v_), \
				 NGHTTP2_NV_FLAG_NONE })
	nva[n++] = NV(":status", status_text);
	for (size_t i = 0; i < nh; i++)
		nva[n++] = NV(hdrs[i].name, hdrs[i].value);
	nva[n++] = NV("content-length", length_text);
#undef NV
	st->resp = malloc(len ? len : 1);
	if (st->resp == NULL)
		return -1;
	if (len > 0)
		memcpy(st->resp, body, len);
	st->resp_len = len;
	st->resp_off = 0;
	prd.source.ptr = st;
	prd.read_callback = resp_read;
	/* nghttp2 copies the header fields */
	if (nghttp2_submit_response(h->s, stream_id, nva, n, &prd) != 0)
		return -1;
	st->answered = true;
	return 0;
}

ssize_t
dlb_doh_h2_send(struct dlb_doh_h2 *h, uint8_t *out, size_t cap)
{
	size_t n = 0;

	while (n < cap) {
		size_t take;

		if (h->pending_len == 0) {
			const uint8_t *data;
			ssize_t got = nghttp2_session_mem_send(h->s, &data);

			if (got < 0)
				return -1;
			if (got == 0)
				break;
			h->pending = data;
			h->pending_len = (size_t)got;
		}
		take = h->pending_len < cap - n ? h->pending_len : cap - n;
		memcpy(out + n, h->pending, take);
		h->pending += take;
		h->pending_len -= take;
		n += take;
	}
	return (ssize_t)n;
}

bool
dlb_doh_h2_done(const struct dlb_doh_h2 *h)
{
	return h->pending_len == 0 && !nghttp2_session_want_read(h->s) &&
	       !nghttp2_session_want_write(h->s);
}

size_t
dlb_doh_h2_streams(const struct dlb_doh_h2 *h)
{
	return h->nstreams;
}
