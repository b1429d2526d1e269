/*
 * test_doh_req.c - DoH requests read as dnsdist 1.7.3 reads them
 * (dnslb/frontend/doh_req.c). The cases and the expected verdicts are what
 * Debian's dnsdist 1.7.3 answered, asked with curl over HTTP/2 (an
 * addDOHLocal without certificate, URLs "/dns-query" and "/other/").
 */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "dnslb/frontend/doh_req.h"

/* "www.example.com" A, ID 0, RD: 33 bytes, and its base64url (44 characters). */
static const uint8_t Q[] = "\0\0\1\0\0\1\0\0\0\0\0\0\3www\7example\3com\0\0\1\0\1";
#define QB64 "AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB"

static const char *const URLS[] = { "/dns-query", "/other/" };
static const struct dlb_doh_paths EP = { URLS, 2, true };

static enum dlb_doh_verdict
get(const char *method, const char *path, size_t *n, uint8_t *out, size_t cap)
{
	return dlb_doh_query(method, strlen(method), path, strlen(path), NULL, 0, out, cap, n);
}

/* GET @path: verdict @want and, for a query, @want_len bytes that begin
 * as Q does (as far as both go). */
static void
assert_get_n(const char *path, enum dlb_doh_verdict want, size_t want_len)
{
	uint8_t out[512];
	size_t n;
	enum dlb_doh_verdict v = get("GET", path, &n, out, sizeof(out));

	if (v != want)
		fail_msg("%s: verdict %d, want %d", path, v, want);
	if (want == DLB_DOH_QUERY) {
		if (n != want_len)
			fail_msg("%s: %zu bytes, want %zu", path, n, want_len);
		assert_memory_equal(out, Q, n < sizeof(Q) - 1 ? n : sizeof(Q) - 1);
	}
}

static void
assert_get(const char *path, enum dlb_doh_verdict want)
{
	assert_get_n(path, want, sizeof(Q) - 1);
}

static void
test_status_texts(void **state)
{
	(void)state;
	assert_int_equal(dlb_doh_status(DLB_DOH_QUERY), 200);
	assert_int_equal(dlb_doh_status(DLB_DOH_NOT_FOUND), 404);
	assert_string_equal(dlb_doh_text(DLB_DOH_NOT_FOUND), "not found");
	assert_string_equal(dlb_doh_text(DLB_DOH_NO_ENDPOINT),
			    "there is no endpoint configured for this path");
	assert_int_equal(dlb_doh_status(DLB_DOH_BAD_REQUEST), 400);
	assert_string_equal(dlb_doh_text(DLB_DOH_BAD_REQUEST), "Unable to parse the request");
	assert_string_equal(dlb_doh_text(DLB_DOH_NO_DNS_PARAM), "Unable to find the DNS parameter");
	assert_string_equal(dlb_doh_text(DLB_DOH_BAD_BASE64), "Unable to decode BASE64-URL");
	assert_string_equal(dlb_doh_text(DLB_DOH_NOT_DNS), "The DNS query could not be parsed");
	for (int v = 0; v < DLB_DOH__COUNT; v++)
		assert_non_null(dlb_doh_text((enum dlb_doh_verdict)v));
}

static void
route(const char *path, bool routed, bool exact)
{
	char norm[256];
	size_t n = dlb_doh_normalize(path, strlen(path), norm, sizeof(norm));

	assert_true(n > 0);
	if (dlb_doh_route(&EP, norm, n) != routed)
		fail_msg("%s: routed %d", path, !routed);
	if (routed && dlb_doh_exact(&EP, norm, n) != exact)
		fail_msg("%s: exact %d", path, !exact);
}

/* 404 "not found" where no URL is a prefix; 404 "no endpoint" where one is but
 * exactPathMatching wants the URL itself. */
static void
test_routing(void **state)
{
	struct dlb_doh_paths loose = { URLS, 2, false };
	char norm[64];
	size_t n;

	(void)state;
	route("/dns-query?dns=" QB64, true, true);
	route("/dns-query", true, true);
	route("/dns-query/sub?dns=" QB64, true, false);
	route("/other/x?dns=" QB64, true, false);
	route("/other/", true, true);
	route("/dns-queryx?dns=" QB64, false, false);
	route("/DNS-QUERY?dns=" QB64, false, false);
	route("/nope", false, false);
	route("/", false, false);
	/* dot segments and encoded unreserved characters are resolved first */
	route("/x/../dns-query", true, true);
	route("/./dns-query", true, true);
	route("/dns%2Dquery", true, true);
	route("/../../dns-query", true, true);
	/* without exactPathMatching every routed path is an endpoint */
	n = dlb_doh_normalize("/dns-query/sub", 14, norm, sizeof(norm));
	assert_true(dlb_doh_exact(&loose, norm, n));
	/* not a path */
	assert_int_equal(dlb_doh_normalize("dns-query", 9, norm, sizeof(norm)), 0);
	assert_int_equal(dlb_doh_normalize("", 0, norm, sizeof(norm)), 0);
	assert_int_equal(dlb_doh_normalize("/dns-query", 10, norm, 4), 0);
}

/* GET's dns= parameter, as dnsdist 1.7.3 decodes it: the lengths are those
 * its decoder gives (a query with trailing bytes, or one byte short, was
 * answered by it all the same). */
static void
test_get(void **state)
{
	(void)state;
	assert_get("/dns-query?dns=" QB64, DLB_DOH_QUERY);
	assert_get("/dns-query?foo=1&dns=" QB64, DLB_DOH_QUERY);
	/* "==" then "==" of padding: a group of four '=' takes back four bytes */
	assert_get_n("/dns-query?dns=" QB64 "==", DLB_DOH_QUERY, 32);
	/* '%' and '&' are characters of that decoder; the rest of the query string is decoded too */
	assert_get_n("/dns-query?dns=" QB64 "%3D", DLB_DOH_QUERY, 35);
	assert_get_n("/dns-query?dns=" QB64 "&dns=AAAA", DLB_DOH_QUERY, 42);
	assert_get_n("/dns-query?dns=" QB64 "/", DLB_DOH_QUERY, 36);
	assert_get_n("/dns-query?dns=" QB64 "AA[[", DLB_DOH_QUERY, 36);
	assert_get_n("/dns-query?dns=" QB64 "AA``", DLB_DOH_QUERY, 36);
	assert_get("/dns-query?dns=" QB64 "AA::", DLB_DOH_BAD_BASE64);
	assert_get("/dns-query", DLB_DOH_BAD_REQUEST);			/* no query string */
	assert_get("/dns-query?dns=", DLB_DOH_BAD_REQUEST);		/* nothing after "?dns=" */
	assert_get("/dns-query?dns=@@@", DLB_DOH_BAD_BASE64);
	assert_get("/dns-query?xdns=" QB64, DLB_DOH_NO_DNS_PARAM);
	assert_get("/dns-query?dns=AAAA", DLB_DOH_NOT_DNS);		/* 3 bytes */
}

/* Methods: POST takes the body; any other method reads as a GET. */
static void
test_methods(void **state)
{
	uint8_t out[512];
	size_t n;

	(void)state;
	assert_int_equal(dlb_doh_query("POST", 4, "/dns-query", 10, Q, sizeof(Q) - 1, out,
				       sizeof(out), &n), DLB_DOH_QUERY);
	assert_int_equal(n, sizeof(Q) - 1);
	assert_memory_equal(out, Q, n);
	assert_int_equal(dlb_doh_query("POST", 4, "/dns-query", 10, Q, 0, out, sizeof(out), &n),
			 DLB_DOH_NOT_DNS);
	/* a header alone, a name cut short, no type: not taken (the class may be missing) */
	assert_int_equal(dlb_doh_query("POST", 4, "/dns-query", 10, Q, 12, out, sizeof(out), &n),
			 DLB_DOH_NOT_DNS);
	assert_int_equal(dlb_doh_query("POST", 4, "/dns-query", 10, Q, 20, out, sizeof(out), &n),
			 DLB_DOH_NOT_DNS);
	assert_int_equal(dlb_doh_query("POST", 4, "/dns-query", 10, Q, 30, out, sizeof(out), &n),
			 DLB_DOH_NOT_DNS);
	assert_int_equal(dlb_doh_query("POST", 4, "/dns-query", 10, Q, 31, out, sizeof(out), &n),
			 DLB_DOH_QUERY);
	assert_int_equal(dlb_doh_query("POST", 4, "/dns-query", 10, Q, sizeof(Q) - 1, out, 20, &n),
			 DLB_DOH_TOO_LARGE);
	assert_int_equal(get("PUT", "/dns-query", &n, out, sizeof(out)), DLB_DOH_BAD_REQUEST);
	assert_int_equal(get("DELETE", "/dns-query", &n, out, sizeof(out)), DLB_DOH_BAD_REQUEST);
	assert_int_equal(get("HEAD", "/dns-query", &n, out, sizeof(out)), DLB_DOH_BAD_REQUEST);
	assert_int_equal(get("PUT", "/dns-query?dns=" QB64, &n, out, sizeof(out)), DLB_DOH_QUERY);
	/* a dns= parameter too long for the buffer */
	assert_int_equal(get("GET", "/dns-query?dns=" QB64, &n, out, 16), DLB_DOH_TOO_LARGE);
}

static void
test_base64url(void **state)
{
	uint8_t out[8];

	(void)state;
	assert_int_equal(dlb_doh_base64url_decode("", 0, out, sizeof(out)), 0);
	assert_int_equal(dlb_doh_base64url_decode("-_8", 3, out, sizeof(out)), 2);
	assert_int_equal(out[0], 0xfb);
	assert_int_equal(out[1], 0xff);
	assert_int_equal(dlb_doh_base64url_decode("+/8", 3, out, sizeof(out)), 2);	/* standard too */
	/* dnsdist's decoder reads bytes up to '9' as 4 + their value ('!' is 37) */
	assert_int_equal(dlb_doh_base64url_decode("!!!!", 4, out, sizeof(out)), 3);
	assert_int_equal(out[0], 37 << 2 | 37 >> 4);
	assert_int_equal(dlb_doh_base64url_decode("::::", 4, out, sizeof(out)), -1);
	assert_int_equal(dlb_doh_base64url_decode("@@@@", 4, out, sizeof(out)), -1);
	assert_int_equal(dlb_doh_base64url_decode("{AAA", 4, out, sizeof(out)), -1);
	assert_int_equal(dlb_doh_base64url_decode("\xff\xfc" "AA", 4, out, sizeof(out)), 3);
	assert_int_equal(dlb_doh_base64url_decode("\xfb" "AAA", 4, out, sizeof(out)), -1);
	/* spaces are skipped, but not at the end */
	assert_int_equal(dlb_doh_base64url_decode("A AAA", 5, out, sizeof(out)), 3);
	assert_int_equal(dlb_doh_base64url_decode("AAAA ", 5, out, sizeof(out)), -1);
	/* "====": three bytes, four taken back */
	assert_int_equal(dlb_doh_base64url_decode("====", 4, out, sizeof(out)), -1);
	assert_int_equal(dlb_doh_base64url_decode("AAAAAAAAAAAA", 12, out, sizeof(out)), -1);
}

static void
test_response_map(void **state)
{
	struct dlb_doh_map m = { 0 };
	struct dlb_doh_header h = { "X-Why", "policy" };
	const struct dlb_doh_map_entry *e;
	char err[160];

	(void)state;
	assert_int_equal(dlb_doh_map_add(&m, "^/blocked", 403, "go away", 7, &h, 1, err,
					 sizeof(err)), 0);
	assert_int_equal(dlb_doh_map_add(&m, "dns=AAAB", 200, "", 0, NULL, 0, err, sizeof(err)), 0);
	e = dlb_doh_map_match(&m, "/BLOCKED/x");		/* case-insensitive */
	assert_non_null(e);
	assert_int_equal(e->status, 403);
	assert_int_equal(e->content_len, 7);
	assert_memory_equal(e->content, "go away", 7);
	assert_int_equal(e->nheaders, 1);
	assert_string_equal(e->headers[0].name, "x-why");
	assert_string_equal(e->headers[0].value, "policy");
	e = dlb_doh_map_match(&m, "/dns-query?dns=AAAB" QB64);	/* the query string counts */
	assert_non_null(e);
	assert_int_equal(e->status, 200);
	assert_null(e->headers);
	assert_null(dlb_doh_map_match(&m, "/dns-query"));
	assert_int_equal(dlb_doh_map_add(&m, "(", 200, "", 0, NULL, 0, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "invalid regular expression '('"));
	assert_int_equal(dlb_doh_map_add(&m, "x", 42, "", 0, NULL, 0, err, sizeof(err)), -1);
	assert_string_equal(err, "invalid HTTP status code 42");
	assert_int_equal(m.n, 2);
	dlb_doh_map_clear(&m);
	assert_int_equal(m.n, 0);
	assert_null(dlb_doh_map_match(&m, "/blocked"));
}

static void
xff(const char *value, bool ok, const char *addr, unsigned port)
{
	struct sockaddr_storage ss;
	char text[64];
	const void *a;

	if (dlb_doh_forwarded_for(value, strlen(value), &ss) != ok)
		fail_msg("%s: parsed %d", value, !ok);
	if (!ok)
		return;
	if (ss.ss_family == AF_INET) {
		a = &((struct sockaddr_in *)&ss)->sin_addr;
		assert_int_equal(ntohs(((struct sockaddr_in *)&ss)->sin_port), port);
	} else {
		a = &((struct sockaddr_in6 *)&ss)->sin6_addr;
		assert_int_equal(ntohs(((struct sockaddr_in6 *)&ss)->sin6_port), port);
	}
	assert_non_null(inet_ntop(ss.ss_family, a, text, sizeof(text)));
	assert_string_equal(text, addr);
}

/* trustForwardedForHeader: the last address of the list. */
static void
test_forwarded_for(void **state)
{
	(void)state;
	xff("192.0.2.1", true, "192.0.2.1", 0);
	xff("10.0.0.1, 192.0.2.7", true, "192.0.2.7", 0);
	xff("10.0.0.1,192.0.2.8:5300", true, "192.0.2.8", 5300);
	xff("[2001:db8::1]:53", true, "2001:db8::1", 53);
	xff("2001:db8::2", true, "2001:db8::2", 0);
	xff("10.0.0.1,   2001:db8::3", true, "2001:db8::3", 0);
	xff("garbage", false, NULL, 0);
	xff("", false, NULL, 0);
	xff("192.0.2.1:99999", false, NULL, 0);
	xff("192.0.2.1:", false, NULL, 0);
	xff("[2001:db8::1", false, NULL, 0);
	xff("10.0.0.1,", false, NULL, 0);
}

/* The fields of @a, "name: value" one per line, for comparison. */
static const char *
fields(const struct dlb_doh_answer *a)
{
	static char out[1024];
	size_t n = 0;

	out[0] = '\0';
	for (size_t i = 0; i < a->nheaders; i++)
		n += (size_t)snprintf(out + n, sizeof(out) - n, "%s: %s\n", a->headers[i].name,
				      a->headers[i].value);
	return out;
}

static void
assert_body(const struct dlb_doh_answer *a, const char *text)
{
	if (a->len != strlen(text) || memcmp(a->body, text, a->len) != 0)
		fail_msg("body '%.*s', want '%s'", (int)a->len, (const char *)a->body, text);
}

/* Answers as dnsdist 1.7.3 sent them (serverTokens left at its default,
 * customResponseHeaders x-foo: bar; the date aside). */
static void
test_answers(void **state)
{
	static const struct dlb_doh_header foo = { "x-foo", "bar" }, why = { "x-why", "policy" };
	/* www.example.com A 192.0.2.1 TTL 60, then an OPT */
	static const uint8_t ans[] = "\0\0\x81\x80\0\1\0\1\0\0\0\1\3www\7example\3com\0\0\1\0\1"
				     "\xc0\x0c\0\1\0\1\0\0\0\x3c\0\4\xc0\0\2\1"
				     "\0\0\x29\x04\xd0\0\0\0\0\0\0";
	struct dlb_doh_answer_opts o = { .server = "h2o/dnsdist", .custom = &foo, .ncustom = 1,
					 .add_content_type = true, .cache_control = true };
	struct dlb_doh_answer a;

	(void)state;
	dlb_doh_answer_build(&a, 200, ans, sizeof(ans) - 1, &o);
	assert_int_equal(a.status, 200);
	assert_string_equal(fields(&a), "server: h2o/dnsdist\nx-foo: bar\n"
			    "content-type: application/dns-message\ncache-control: max-age=60\n");
	assert_int_equal(a.len, sizeof(ans) - 1);

	/* response map entries: a redirect, a refusal with its own fields, an
	 * empty 418, a 200 with plain content */
	dlb_doh_answer_build(&a, 302, (const uint8_t *)"https://example.net/", 20, &o);
	assert_int_equal(a.status, 302);
	assert_string_equal(fields(&a), "server: h2o/dnsdist\nlocation: https://example.net/\n"
			    "content-type: text/html; charset=utf-8\n");
	assert_body(&a, "<!DOCTYPE html><TITLE>Moved</TITLE><P>The document has moved "
		    "<A HREF=\"https://example.net/\">here</A>");
	assert_int_equal(a.len, 100);
	o.custom = &why;
	dlb_doh_answer_build(&a, 403, (const uint8_t *)"go away", 7, &o);
	assert_int_equal(a.status, 403);
	assert_string_equal(fields(&a), "server: h2o/dnsdist\nx-why: policy\n"
			    "content-type: text/plain; charset=utf-8\n");
	assert_body(&a, "go away");
	dlb_doh_answer_build(&a, 418, NULL, 0, &o);
	assert_int_equal(a.status, 500);
	assert_string_equal(fields(&a), "server: h2o/dnsdist\ncontent-type: text/plain; charset=utf-8\n");
	assert_body(&a, "Internal Server Error");
	o.custom = &foo;
	o.add_content_type = false;
	dlb_doh_answer_build(&a, 200, (const uint8_t *)"plain body", 10, &o);
	assert_string_equal(fields(&a), "server: h2o/dnsdist\nx-foo: bar\n");
	assert_body(&a, "plain body");
	o.add_content_type = true;

	/* the pipeline's refusals without a body */
	dlb_doh_answer_build(&a, 400, NULL, 0, &o);
	assert_body(&a, "invalid DNS query");
	dlb_doh_answer_build(&a, 403, NULL, 0, &o);
	assert_body(&a, "dns query not allowed");
	dlb_doh_answer_build(&a, 502, NULL, 0, &o);
	assert_body(&a, "no downstream server available");
	assert_int_equal(a.status, 502);

	/* the reader's verdicts: h2o's own errors, no custom field */
	dlb_doh_answer_verdict(&a, DLB_DOH_NOT_FOUND, &o);
	assert_int_equal(a.status, 404);
	assert_string_equal(fields(&a), "server: h2o/dnsdist\ncontent-type: text/plain; charset=utf-8\n");
	assert_body(&a, "not found");
	dlb_doh_answer_verdict(&a, DLB_DOH_BAD_BASE64, &o);
	assert_int_equal(a.status, 400);
	assert_body(&a, "Unable to decode BASE64-URL");

	/* no cache-control without a record, nor when turned off */
	o.cache_control = false;
	dlb_doh_answer_build(&a, 200, ans, sizeof(ans) - 1, &o);
	assert_null(strstr(fields(&a), "cache-control"));
}

static void
test_min_ttl(void **state)
{
	/* A (CH class, TTL 5: skipped), A TTL 300, OPT, A TTL 1 (after OPT: ignored) */
	static const uint8_t m[] = "\0\0\x81\x80\0\1\0\2\0\0\0\2\1a\0\0\1\0\1"
				   "\xc0\x0c\0\1\0\3\0\0\0\5\0\4\1\2\3\4"
				   "\xc0\x0c\0\1\0\1\0\0\1\x2c\0\4\1\2\3\4"
				   "\0\0\x29\x04\xd0\0\0\0\0\0\0"
				   "\xc0\x0c\0\1\0\1\0\0\0\1\0\4\1\2\3\4";

	(void)state;
	assert_int_equal(dlb_doh_min_ttl(m, sizeof(m) - 1), 300);
	assert_int_equal(dlb_doh_min_ttl(m, 17), UINT32_MAX);		/* the question only */
	assert_int_equal(dlb_doh_min_ttl(m, 40), UINT32_MAX);		/* the CH record, cut */
	assert_int_equal(dlb_doh_min_ttl(m, 5), UINT32_MAX);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_status_texts),
		cmocka_unit_test(test_routing),
		cmocka_unit_test(test_get),
		cmocka_unit_test(test_methods),
		cmocka_unit_test(test_base64url),
		cmocka_unit_test(test_response_map),
		cmocka_unit_test(test_forwarded_for),
		cmocka_unit_test(test_answers),
		cmocka_unit_test(test_min_ttl),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
