/*
 * fuzz_doh.c - libFuzzer target for the DoH request reader
 * (dnslb/frontend/doh_req.c): the path, the query string and its base64url
 * dns= parameter, the response map's matching and X-Forwarded-For, all
 * untrusted. Checks:
 *
 *   - a normalised path fits its buffer, is NUL-terminated, begins with '/'
 *     and has no "." or ".." segment left; normalising it again changes
 *     nothing;
 *   - a path exactly one of the URLs is routed;
 *   - a query never exceeds its buffer, and every verdict has a status and
 *     a text;
 *   - the base64url decoder gives at most 3 bytes per 4 characters (padding
 *     included) and never more than its buffer;
 *   - X-Forwarded-For gives an IPv4 or IPv6 address or nothing;
 *   - an answer built from the input as body (status from the control byte)
 *     has a status, at most its fields, and a body within bounds;
 *     dlb_doh_min_ttl reads only the message.
 *
 * Input: a control byte (bit 0: POST, bit 1: exactPathMatching off), then
 * the path; for a POST the path ends at the first NUL and the body follows.
 *
 * Thread: single.  Ownership: borrows @data.
 */
#include <string.h>
#include <sys/socket.h>

#include "dnslb/frontend/doh_req.h"
#include "tests/fuzz/fuzz.h"

#define CAP	4096

static const char *const URLS[] = { "/dns-query", "/other/", "/" "a/b" };
static struct dlb_doh_map map;
static bool map_ready;
static uint8_t out[CAP];
static char norm[1024], again[1024], text[8192];

static void
check_norm(const char *path, size_t len)
{
	size_t n = dlb_doh_normalize(path, len, norm, sizeof(norm));

	if (n == 0)
		return;
	CHECK(n < sizeof(norm) && norm[n] == '\0' && norm[0] == '/');
	CHECK(strstr(norm, "/./") == NULL && strstr(norm, "/../") == NULL);
	CHECK(!(n >= 2 && strcmp(norm + n - 2, "/.") == 0));
	CHECK(!(n >= 3 && strcmp(norm + n - 3, "/..") == 0));
	CHECK(dlb_doh_normalize(norm, n, again, sizeof(again)) == n || memchr(norm, '%', n) != NULL);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dlb_doh_paths ep = { URLS, 3, true };
	struct sockaddr_storage ss;
	const char *path;
	size_t plen, blen = 0, n;
	const uint8_t *body = NULL;
	enum dlb_doh_verdict v;
	long got;
	bool post;
	char err[128];

	if (!map_ready) {
		CHECK(dlb_doh_map_add(&map, "^/blocked", 403, "no", 2, NULL, 0, err, sizeof(err)) == 0);
		CHECK(dlb_doh_map_add(&map, "dns=A{4}B", 200, "", 0, NULL, 0, err, sizeof(err)) == 0);
		map_ready = true;
	}
	if (size < 1 || size > sizeof(text) - 1)
		return 0;
	post = data[0] & 1;
	ep.exact = !(data[0] & 2);
	path = (const char *)data + 1;
	plen = size - 1;
	if (post) {
		const char *nul = memchr(path, '\0', plen);

		if (nul != NULL) {
			body = (const uint8_t *)nul + 1;
			blen = plen - (size_t)(nul - path) - 1;
			plen = (size_t)(nul - path);
		}
	}
	check_norm(path, plen);
	n = dlb_doh_normalize(path, plen, norm, sizeof(norm));
	if (n > 0) {
		bool routed = dlb_doh_route(&ep, norm, n);

		if (dlb_doh_exact(&ep, norm, n) && ep.exact)
			CHECK(routed);
	}
	v = dlb_doh_query(post ? "POST" : "GET", post ? 4 : 3, path, plen, body, blen, out, sizeof(out),
			  &n);
	CHECK((unsigned)v < DLB_DOH__COUNT);
	CHECK(dlb_doh_status(v) >= 200 && dlb_doh_text(v) != NULL);
	CHECK(n <= sizeof(out));
	CHECK(v != DLB_DOH_QUERY || n >= 12);

	got = dlb_doh_base64url_decode(path, plen, out, sizeof(out));
	CHECK(got <= (long)sizeof(out));
	CHECK(got < 0 || (size_t)got <= (plen + 3) / 4 * 3);

	memcpy(text, path, plen);
	text[plen] = '\0';
	(void)dlb_doh_map_match(&map, text);

	if (dlb_doh_forwarded_for(path, plen, &ss))
		CHECK(ss.ss_family == AF_INET || ss.ss_family == AF_INET6);

	{
		static const int statuses[] = { 200, 302, 403, 418, 400, 502 };
		struct dlb_doh_answer_opts o = { .server = "h2o/dnsdist", .add_content_type = true,
						 .cache_control = true };
		struct dlb_doh_answer a;

		dlb_doh_answer_build(&a, statuses[(data[0] >> 2) % 6], (const uint8_t *)path, plen, &o);
		CHECK(a.status >= 200 && a.status < 600);
		CHECK(a.nheaders <= DLB_DOH_ANSWER_HEADERS);
		CHECK(a.len <= plen || a.body == (const uint8_t *)a.text);
		(void)dlb_doh_min_ttl((const uint8_t *)path, plen);
	}
	return 0;
}
