/*
 * doh_req.h - DNS over HTTPS requests read as dnsdist 1.7 reads them, with
 * no socket and no HTTP/2 session: which endpoint a path reaches, the query
 * a GET or a POST carries, the response map (newDOHResponseMapEntry) and the
 * client address of X-Forwarded-For. The DoH listener feeds these functions
 * the request's method, path and body and answers with the status and body
 * they return (docs/doh.md states each status and its text).
 *
 * A request goes through them in dnsdist's order:
 *   1. dlb_doh_route: does the path reach an endpoint at all (the HTTP
 *      server's prefix routing)? If not: 404 "not found".
 *   2. the caller: X-Forwarded-For (dlb_doh_forwarded_for) and the ACL (403).
 *   3. dlb_doh_exact: with exactPathMatching (the default), the path must
 *      be one of the endpoint's URLs: else 404 "there is no endpoint
 *      configured for this path".
 *   4. dlb_doh_map_match: a response map entry whose regex matches the
 *      path (query string included) answers with its status and content.
 *   5. dlb_doh_query: the DNS query of a POST body or of a GET's dns=
 *      parameter (base64url), or a 400.
 *
 * Thread: any; the functions keep no state. A response map is immutable
 * once built and may be read by any thread.
 */
#ifndef DNSLB_DOH_REQ_H
#define DNSLB_DOH_REQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "dnslb/core/doh_cfg.h"

/* What a request gets (the 4xx carry dnsdist's status and body text). */
enum dlb_doh_verdict {
	DLB_DOH_QUERY = 0,		/* the DNS query is in the caller's buffer */
	DLB_DOH_NOT_FOUND,		/* 404 "not found" */
	DLB_DOH_NO_ENDPOINT,		/* 404 "there is no endpoint configured for this path" */
	DLB_DOH_BAD_REQUEST,		/* 400 "Unable to parse the request" */
	DLB_DOH_NO_DNS_PARAM,		/* 400 "Unable to find the DNS parameter" */
	DLB_DOH_BAD_BASE64,		/* 400 "Unable to decode BASE64-URL" */
	DLB_DOH_NOT_DNS,		/* 400 "The DNS query could not be parsed": no header,
					 * question name and type */
	DLB_DOH_TOO_LARGE,		/* 413: the query would not fit a DNS message (dnslb) */
	DLB_DOH__COUNT
};

/** The HTTP status of @v (200 for DLB_DOH_QUERY). */
int dlb_doh_status(enum dlb_doh_verdict v);
/** The text/plain body dnsdist sends with @v ("" for DLB_DOH_QUERY). */
const char *dlb_doh_text(enum dlb_doh_verdict v);

/**
 * The path part of @path (@len bytes: up to '?' or the end), normalised as
 * the HTTP server normalises it before routing: "." and ".." segments
 * resolved, "%XX" of unreserved characters decoded. Writes at most @cap - 1
 * bytes and a NUL to @out. @return its length, or 0 when it does not fit or
 * is not a path (does not begin with '/').
 */
size_t dlb_doh_normalize(const char *path, size_t len, char *out, size_t cap);

/** Step 1: does the normalised path @norm reach one of @p's URLs by prefix
 * (a URL "/a" takes "/a", "/a/..."; a URL "/a/" takes "/a/...")? */
bool dlb_doh_route(const struct dlb_doh_paths *p, const char *norm, size_t len);

/** Step 3: is @norm exactly one of @p's URLs (always true without exactPathMatching)? */
bool dlb_doh_exact(const struct dlb_doh_paths *p, const char *norm, size_t len);

/**
 * Step 5: the DNS query of a request. @method "POST": @body as is; "GET"
 * (any other method: DLB_DOH_BAD_REQUEST): the first "?dns=" parameter, else
 * the first "&dns=", of @path (@len bytes, query string included), decoded
 * from base64url (the missing padding added back; the standard alphabet is
 * accepted too, as dnsdist's decoder does). The query goes to @out (@cap
 * bytes), its length to *@outlen. A query longer than @cap: DLB_DOH_TOO_LARGE;
 * one without a header, a question name that parses and a type (dnsdist's
 * check; the class may be missing, and so may the question count):
 * DLB_DOH_NOT_DNS.
 */
enum dlb_doh_verdict dlb_doh_query(const char *method, size_t mlen, const char *path, size_t len,
				   const uint8_t *body, size_t blen, uint8_t *out, size_t cap,
				   size_t *outlen);

/**
 * Decode base64url @in (@len bytes) into @out (@cap bytes) as dnsdist does:
 * '-' and '_' read as '+' and '/', padding added back to a multiple of four,
 * then standard base64. @return the decoded length, or -1 when it is not
 * base64 or does not fit.
 */
long dlb_doh_base64url_decode(const char *in, size_t len, uint8_t *out, size_t cap);

/* ---- answers ------------------------------------------------------------------ */

#define DLB_DOH_ANSWER_HEADERS	(DLB_DOH_MAX_CUSTOM + 4)

/* An answer as dnsdist 1.7 sends it: status, header fields, body. */
struct dlb_doh_answer {
	int status;
	struct dlb_doh_header headers[DLB_DOH_ANSWER_HEADERS];	/* content-length aside */
	size_t nheaders;
	const uint8_t *body;
	size_t len;
	char text[384];			/* a body built here */
	char value[256];		/* a field value built here (location, cache-control) */
};

/* What shapes an answer besides its status and body. */
struct dlb_doh_answer_opts {
	const char *server;		/* serverTokens ("h2o/dnsdist", dnsdist's default); NULL: none */
	const char *date;		/* the Date field's value; NULL: none */
	const struct dlb_doh_header *custom;	/* customResponseHeaders, or a map entry's */
	size_t ncustom;
	const char *content_type;	/* a 200's type (setHTTPResponse); NULL: application/dns-message */
	bool add_content_type;		/* false for a response map entry's 200 */
	bool body_given;		/* a status other than 200 or 3xx with an empty body
					 * keeps it empty (the rules'): no text of ours */
	bool cache_control;		/* sendCacheControlHeaders (default true) */
};

/**
 * Build in @a the answer dnsdist 1.7 gives for @status and @body (@len):
 *   - 200: the custom fields, content-type, cache-control "max-age=<the
 *     smallest TTL of the records before any OPT, class IN>" when the body
 *     is a DNS message with such a record, and the body;
 *   - 3xx: "location: <body>" and a short HTML page, no custom field;
 *   - anything else with a body: that status, the custom fields, the body
 *     as text/plain;
 *   - anything else without: 400 "invalid DNS query", 403 "dns query not
 *     allowed", 502 "no downstream server available", or 500 "Internal
 *     Server Error" for any other status; no custom field.
 * @body is borrowed (must live until the answer is sent), except for the
 * texts built in @a.
 */
void dlb_doh_answer_build(struct dlb_doh_answer *a, int status, const uint8_t *body, size_t len,
			  const struct dlb_doh_answer_opts *o);

/** The answer of a reader's verdict (dlb_doh_query, routing): its status and text. */
void dlb_doh_answer_verdict(struct dlb_doh_answer *a, enum dlb_doh_verdict v,
			    const struct dlb_doh_answer_opts *o);

/** dnsdist's getDNSPacketMinTTL: the smallest TTL of the records of class IN
 * before the first OPT; UINT32_MAX when none (or @pkt is malformed before one). */
uint32_t dlb_doh_min_ttl(const uint8_t *pkt, size_t len);

/* ---- X-Forwarded-For --------------------------------------------------------- */

/**
 * The client address of an X-Forwarded-For value (@len bytes), as dnsdist's
 * trustForwardedForHeader reads it: the last address of the list (after the
 * last ',' and its spaces), with or without a port ("192.0.2.1:53",
 * "[2001:db8::1]:53"). @return true with *@out (its port 0 when none)
 * filled, false when the value is not an address (the connection's address
 * stays).
 */
bool dlb_doh_forwarded_for(const char *value, size_t len, struct sockaddr_storage *out);

#endif
