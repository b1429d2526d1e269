/*
 * test_rules.c - the rule engine (rules/rules.c, rules/qps.c): query tags,
 * every selector on hand-built wire messages, AND/OR/NOT short-circuit,
 * per-worker rule counters, chain publication and retirement, the query
 * chain's terminal/continue semantics and its counters, the response chain
 * (TTL clamping, drop, SetMaxReturnedTTL, ...), the token bucket (exact,
 * deterministic times, and under two hammering threads) and the per-subnet
 * rate limiter (masks, cleanup).
 *
 * Lua leaves (LuaRule/LuaAction with a real state) are tested with lua/;
 * here only their dq->lua == NULL paths.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/core/config.h"
#include "dnslb/core/rcu.h"
#include "dnslb/core/stats.h"
#include "dnslb/core/util.h"
#include "dnslb/core/wire.h"
#include "lua/conf.h"
#include "lua/worker.h"
#include "rules/rules.h"

/* ---- a small DNS message builder ------------------------------------------ */

#define PB_MAX 2048
#include "pkt.h"

/* An OPT RR: payload 1232, @ext rcode, @version, DO, one option @code (0: none). */
static void
pb_edns(struct pb *p, uint8_t ext, uint8_t version, bool dobit, uint16_t code)
{
	uint32_t ttl = (uint32_t)ext << 24 | (uint32_t)version << 16 | (dobit ? 0x8000u : 0);
	uint8_t opt[6];

	if (code == 0) {
		pb_opt(p, 1232, ttl, NULL, 0);
		return;
	}
	dlb_wr16(opt, code);
	dlb_wr16(opt + 2, 2);
	dlb_wr16(opt + 4, 0xabcd);
	pb_opt(p, 1232, ttl, opt, sizeof(opt));
}

/* What a query looks like. */
struct qspec {
	const char *qname;
	uint16_t qtype, qclass;
	uint16_t flags;
	bool edns;
	uint8_t ext, version;
	bool dobit;
	uint16_t optcode;
	size_t trailing;	/* junk octets after the message */
};

/* ---- the test environment ------------------------------------------------------ */

#define PKT_CAP 4096

struct env {
	uint8_t pkt[PKT_CAP];
	struct dlb_dnsmsg m;
	struct dlb_dq dq;
	struct sockaddr_in remote, local;
	struct dlb_config *cfg;
	struct dlb_rng rng;
	struct dlb_stats st;
};

static struct env E;

static void
set_v4(struct sockaddr_in *sin, const char *ip, uint16_t port)
{
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons(port);
	assert_int_equal(inet_pton(AF_INET, ip, &sin->sin_addr), 1);
}

/* The dq's common fields; the packet is set by the callers. */
static void
dq_init(void)
{
	struct dlb_dq *dq = &E.dq;

	memset(dq, 0, sizeof(*dq));
	dq->pkt = E.pkt;
	dq->cap = PKT_CAP;
	dq->m = &E.m;
	dq->remote = (const struct sockaddr *)&E.remote;
	dq->local = (const struct sockaddr *)&E.local;
	dq->worker = 0;
	dq->cfg = E.cfg;
	dq->now = 1000.0;
	dq->rng = &E.rng;
	dq->be_index = -1;
	dlb_dq_reset_decisions(dq);
}

/* Build and parse the query @q into E (a fresh dq). */
static void
load_query(const struct qspec *q)
{
	struct pb p;
	int rc;

	pb_hdr(&p, 0x1234, q->flags, 1, 0, 0, q->edns ? 1 : 0);
	pb_question(&p, q->qname, q->qtype ? q->qtype : 1, q->qclass ? q->qclass : 1);
	if (q->edns)
		pb_edns(&p, q->ext, q->version, q->dobit, q->optcode);
	for (size_t i = 0; i < q->trailing; i++)
		pb_u8(&p, 0x55);
	memcpy(E.pkt, p.b, p.n);
	rc = dlb_wire_parse_query(E.pkt, p.n, &E.m);
	assert_int_equal(rc, DLB_OK);
	dq_init();
	E.dq.len = p.n;
}

static void
load_simple(const char *qname, uint16_t qtype)
{
	struct qspec q = { .qname = qname, .qtype = qtype, .flags = DLB_F_RD };

	load_query(&q);
}

/*
 * A response to "www.example.com A": @rcode, two answers (A TTL 300, AAAA
 * TTL 30), and an OPT with ext rcode @ext and option 10 (COOKIE).
 */
static void
load_response(uint8_t rcode, uint8_t ext)
{
	static const uint8_t a[4] = { 192, 0, 2, 1 };
	static const uint8_t aaaa[16] = { 0x20, 0x01, 0x0d, 0xb8, [15] = 1 };
	struct pb p;
	int rc;

	pb_hdr(&p, 0x1234, (uint16_t)(DLB_F_QR | DLB_F_RD | DLB_F_RA | rcode), 1, 2, 0, 1);
	pb_question(&p, "www.example.com", 1, 1);
	pb_rr_at(&p, DLB_DNS_HDR, 1, 300, a, 4);
	pb_rr_at(&p, DLB_DNS_HDR, 28, 30, aaaa, 16);
	pb_edns(&p, ext, 0, true, DLB_EDNS_OPT_COOKIE);
	memcpy(E.pkt, p.b, p.n);
	rc = dlb_wire_parse_response_question(E.pkt, p.n, &E.m);
	assert_int_equal(rc, DLB_OK);
	dq_init();
	E.dq.len = p.n;
	E.dq.cap = p.n;
	E.dq.response = true;
}

/* TTL of answer record @i (0 or 1) of load_response()'s message. */
static uint32_t
resp_ttl(int i)
{
	size_t off = 12 + 17 + 4;	/* header, question: the first answer */

	if (i == 1)
		off += 2 + 2 + 2 + 4 + 2 + 4;	/* the A record */
	return dlb_rd32(E.pkt + off + 6);
}

static int
setup(void **state)
{
	struct dlb_backend *be;

	(void)state;
	memset(&E, 0, sizeof(E));
	dlb_rng_init(&E.rng);
	set_v4(&E.remote, "192.0.2.10", 40000);
	set_v4(&E.local, "198.51.100.1", 53);
	E.cfg = dlb_config_new();
	assert_non_null(E.cfg);
	be = dlb_backend_new();
	assert_non_null(be);
	snprintf(be->pools[0], sizeof(be->pools[0]), "p1");
	be->npools = 1;
	set_v4((struct sockaddr_in *)&be->addr, "192.0.2.53", 53);
	be->addrlen = sizeof(struct sockaddr_in);
	assert_int_equal(dlb_config_add_backend(E.cfg, be), 0);
	assert_non_null(dlb_config_get_pool(E.cfg, "empty"));
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	dlb_rules_shutdown();
	dlb_config_free(E.cfg);
	E.cfg = NULL;
	return 0;
}

/* ---- object helpers ---------------------------------------------------------------- */

static struct dlb_sel *
sel_num(enum dlb_sel_type t, uint32_t num)
{
	struct dlb_sel *s = dlb_sel_new(t);

	assert_non_null(s);
	s->u.num = num;
	return s;
}

static struct dlb_sel *
sel_list(enum dlb_sel_type t, struct dlb_sel *a, struct dlb_sel *b)
{
	struct dlb_sel *s = dlb_sel_new(t);

	assert_non_null(s);
	s->u.list.v = calloc(2, sizeof(*s->u.list.v));
	assert_non_null(s->u.list.v);
	s->u.list.v[0] = a;	/* the list takes the references */
	s->u.list.v[1] = b;
	s->u.list.n = 2;
	return s;
}

static struct dlb_sel *
sel_bucket(double rate, double burst)
{
	struct dlb_sel *s = dlb_sel_new(DLB_SEL_MAXQPS);

	assert_non_null(s);
	s->u.bucket = malloc(sizeof(*s->u.bucket));
	assert_non_null(s->u.bucket);
	dlb_bucket_init(s->u.bucket, rate, burst);
	return s;
}

static struct dlb_act *
act_new(enum dlb_act_type t)
{
	struct dlb_act *a = dlb_act_new(t);

	assert_non_null(a);
	return a;
}

static struct dlb_act *
act_pool(const char *name, bool stop)
{
	struct dlb_act *a = act_new(DLB_ACT_POOL);

	a->u.pool.name = strdup(name);
	a->u.pool.stop = stop;
	return a;
}

static struct dlb_act *
act_rcode(uint16_t rcode)
{
	struct dlb_act *a = act_new(DLB_ACT_RCODE);

	a->u.rcode.rcode = rcode;
	a->u.rcode.o.ttl = 60;
	return a;
}

/* A rule of @s and @a; the rule takes its own references, ours are dropped. */
static struct dlb_rule *
rule(struct dlb_sel *s, struct dlb_act *a)
{
	struct dlb_rule *r = dlb_rule_new(s, a, NULL, NULL);

	assert_non_null(r);
	dlb_sel_unref(s);
	dlb_act_unref(a);
	return r;
}

#define NRULES_MAX 128

/* Publish @n rules as the chain @kind; our references are dropped (the chain keeps its own). */
static const struct dlb_chain *
publish(enum dlb_chain_kind kind, struct dlb_rule **v, int n)
{
	assert_int_equal(dlb_rules_publish(kind, v, n, NULL), 0);
	for (int i = 0; i < n; i++)
		dlb_rule_unref(v[i]);
	return dlb_rules_chain(kind);
}

static bool
match(struct dlb_sel *s)
{
	return dlb_sel_match(s, &E.dq);
}

/* Evaluate selector @s (consumed) on the current dq. */
static bool
match1(struct dlb_sel *s)
{
	bool r = match(s);

	dlb_sel_unref(s);
	return r;
}

/* ---- tags ---------------------------------------------------------------------------- */

static void
test_tags(void **state)
{
	struct dlb_tags t;
	char key[16], big[200];
	size_t pos = 0;
	const char *k, *v;
	int n;

	(void)state;
	dlb_tags_clear(&t);
	assert_null(dlb_tags_get(&t, "a"));
	assert_false(dlb_tags_next(&t, &pos, &k, &v));
	assert_int_equal(dlb_tags_set(&t, "a", "1"), 0);
	assert_int_equal(dlb_tags_set(&t, "bb", ""), 0);
	assert_string_equal(dlb_tags_get(&t, "a"), "1");
	assert_string_equal(dlb_tags_get(&t, "bb"), "");
	assert_null(dlb_tags_get(&t, "b"));
	/* replace keeps one pair per key */
	assert_int_equal(dlb_tags_set(&t, "a", "two"), 0);
	assert_int_equal(t.n, 2);
	assert_string_equal(dlb_tags_get(&t, "a"), "two");
	assert_string_equal(dlb_tags_get(&t, "bb"), "");
	assert_true(dlb_tags_next(&t, &pos, &k, &v));
	assert_string_equal(k, "bb");
	assert_true(dlb_tags_next(&t, &pos, &k, &v));
	assert_string_equal(k, "a");
	assert_string_equal(v, "two");
	assert_false(dlb_tags_next(&t, &pos, &k, &v));

	/* overflow: refused, the old value stays */
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(dlb_tags_set(&t, "a", big), 0);
	assert_int_equal(dlb_tags_set(&t, "c", big), -1);
	big[60] = '\0';
	assert_int_equal(dlb_tags_set(&t, "a", big), 0);
	assert_int_equal(strlen(dlb_tags_get(&t, "a")), 60);
	memset(big, 'c', 150);
	big[150] = '\0';
	assert_int_equal(dlb_tags_set(&t, "c", big), 0);	/* 4 + 63 + 153 = 220 octets */
	memset(big, 'y', 100);
	big[100] = '\0';
	assert_int_equal(dlb_tags_set(&t, "a", big), -1);	/* would need 260 */
	assert_int_equal(strlen(dlb_tags_get(&t, "a")), 60);
	assert_int_equal(strlen(dlb_tags_get(&t, "c")), 150);
	assert_int_equal(t.n, 3);
	assert_true(t.used <= DLB_TAGS_BYTES);

	/* fill with small pairs until refused; everything set is readable */
	dlb_tags_clear(&t);
	for (n = 0;; n++) {
		snprintf(key, sizeof(key), "k%d", n);
		if (dlb_tags_set(&t, key, "v") != 0)
			break;
	}
	assert_true(n > 20);
	assert_int_equal(t.n, n);
	for (int i = 0; i < n; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		assert_string_equal(dlb_tags_get(&t, key), "v");
	}
}

static void
test_reset_decisions(void **state)
{
	(void)state;
	load_simple("www.example.com", 1);
	E.dq.pool_set = true;
	E.dq.skip_cache = true;
	E.dq.delay_ms = 5;
	E.dq.response = true;
	E.dq.cache_hit = true;
	E.dq.be_index = 3;
	E.dq.tcp = true;
	dlb_tags_set(&E.dq.tags, "a", "b");
	dlb_dq_reset_decisions(&E.dq);
	assert_false(E.dq.pool_set);
	assert_null(E.dq.pool);
	assert_false(E.dq.skip_cache);
	assert_int_equal(E.dq.delay_ms, 0);
	assert_int_equal(E.dq.tempfail_ttl, -1);
	assert_int_equal(E.dq.use_ecs, -1);
	assert_int_equal(E.dq.ecs_override, -1);
	assert_int_equal(E.dq.ecs_prefix_v4, -1);
	assert_int_equal(E.dq.ecs_prefix_v6, -1);
	assert_int_equal(E.dq.ecs_fixed.ss_family, 0);
	assert_int_equal(E.dq.max_returned_ttl, 0);
	assert_int_equal(E.dq.tags.n, 0);
	/* the response-only fields: a query's (a response view sets them after) */
	assert_false(E.dq.response);
	assert_false(E.dq.cache_hit);
	assert_int_equal(E.dq.be_index, -1);
	/* not decisions: kept */
	assert_true(E.dq.tcp);
	assert_ptr_equal(E.dq.pkt, E.pkt);
	assert_ptr_equal(E.dq.m, &E.m);
	assert_int_equal(E.dq.len, 33);
}

/* ---- selectors -------------------------------------------------------------------------- */

static void
test_sel_header(void **state)
{
	struct dlb_sel *s;
	struct qspec q = { .qname = "www.example.com", .qtype = 28, .qclass = 3,
			   .flags = DLB_F_RD | (2 << 11) };

	(void)state;
	load_query(&q);
	assert_true(match1(dlb_sel_new(DLB_SEL_ALL)));
	assert_true(match1(sel_num(DLB_SEL_QTYPE, 28)));
	assert_false(match1(sel_num(DLB_SEL_QTYPE, 1)));
	assert_true(match1(sel_num(DLB_SEL_QCLASS, 3)));
	assert_false(match1(sel_num(DLB_SEL_QCLASS, 1)));
	assert_true(match1(sel_num(DLB_SEL_OPCODE, 2)));
	assert_false(match1(sel_num(DLB_SEL_OPCODE, 0)));
	assert_true(match1(dlb_sel_new(DLB_SEL_RD)));
	assert_false(match1(dlb_sel_new(DLB_SEL_DNSSEC)));	/* no EDNS */
	assert_true(match1(sel_num(DLB_SEL_RCODE, 0)));
	assert_true(match1(sel_num(DLB_SEL_ERCODE, 0)));
	assert_false(match1(sel_num(DLB_SEL_EDNS_VERSION, 0)));	/* no OPT: no match */
	assert_false(match1(sel_num(DLB_SEL_EDNS_OPTION, DLB_EDNS_OPT_COOKIE)));
	assert_false(match1(dlb_sel_new(DLB_SEL_TRAILING_DATA)));

	q.flags = 0;
	q.qtype = 1;
	q.qclass = 1;
	load_query(&q);
	assert_false(match1(dlb_sel_new(DLB_SEL_RD)));
	assert_true(match1(sel_num(DLB_SEL_OPCODE, 0)));

	/* TCP, destination port */
	s = dlb_sel_new(DLB_SEL_TCP);
	s->u.flag = true;
	assert_false(match(s));
	E.dq.tcp = true;
	assert_true(match(s));
	s->u.flag = false;
	assert_false(match(s));
	dlb_sel_unref(s);
	assert_true(match1(sel_num(DLB_SEL_DSTPORT, 53)));
	assert_false(match1(sel_num(DLB_SEL_DSTPORT, 5353)));
	E.dq.local = NULL;
	assert_false(match1(sel_num(DLB_SEL_DSTPORT, 53)));
}

/* The HTTP and SNI selectors and HTTPStatusAction on a DoH, a DoT and a plain query. */
static void
test_sel_http(void **state)
{
	static const struct dlb_doh_header hdrs[] = {
		{ "host", "dns.example" }, { "x-route", "Blue-1" }, { "x-route", "red" },
		{ "user-agent", "t" },
	};
	static const char path[] = "/dns-query/x?dns=AAAA";
	uint8_t body[16];
	struct dlb_dq_http h = {
		.doh = true, .path = path, .path_len = sizeof(path) - 1, .query_at = 12,
		.scheme = "https", .host = "dns.example", .headers = hdrs, .nheaders = 4,
		.body = body, .body_cap = sizeof(body),
	};
	struct dlb_dq_http dot = { .sni = "dns.example" };
	struct dlb_sel *hdr = dlb_sel_new(DLB_SEL_HTTP_HEADER);
	struct dlb_sel *hosth = dlb_sel_new(DLB_SEL_HTTP_HEADER);
	struct dlb_sel *pathr = dlb_sel_new(DLB_SEL_HTTP_PATH_REGEX);
	struct dlb_sel *pth = dlb_sel_new(DLB_SEL_HTTP_PATH);
	struct dlb_sel *sni = dlb_sel_new(DLB_SEL_SNI), *nosni = dlb_sel_new(DLB_SEL_SNI);
	struct dlb_act *a = dlb_act_new(DLB_ACT_HTTP_STATUS);
	char err[128];

	(void)state;
	assert_int_equal(dlb_sel_set_http_header(hdr, "X-Route", "^blue", err, sizeof(err)), 0);
	assert_int_equal(dlb_sel_set_http_header(hosth, "Host", ".", err, sizeof(err)), 0);
	assert_int_equal(dlb_sel_set_regex(pathr, "^/DNS-QUERY/x$", err, sizeof(err)), 0);
	pth->u.str = strdup("/dns-query/x");
	sni->u.str = strdup("dns.example");
	nosni->u.str = strdup("");
	a->u.http.status = 418;
	a->u.http.body = (uint8_t *)strdup("teapot");
	a->u.http.len = 6;
	a->u.http.ctype = strdup("text/x");

	load_simple("www.example.com", 1);
	/* plain: nothing matches but SNIRule(""); the action goes on */
	assert_false(match(hdr) || match(pathr) || match(pth) || match(sni));
	assert_true(match(nosni));
	assert_int_equal(dlb_act_run(a, &E.dq), DLB_R_CONTINUE);

	/* DoH: the first x-route, never host; the path without its query string */
	E.dq.http = &h;
	assert_true(match(hdr) && match(pathr) && match(pth));
	assert_false(match(hosth));
	assert_false(match(sni));
	assert_true(match(nosni));
	assert_true(dlb_dq_http_header_shown(&h, 1));
	assert_false(dlb_dq_http_header_shown(&h, 0) || dlb_dq_http_header_shown(&h, 2));
	h.query_at = 11;
	assert_false(match(pth) || match(pathr));
	h.query_at = 12;
	assert_int_equal(dlb_act_run(a, &E.dq), DLB_R_ANSWER);
	assert_int_equal(h.status, 418);
	assert_int_equal(h.body_len, 6);
	assert_memory_equal(h.body, "teapot", 6);
	assert_string_equal(h.content_type, "text/x");
	assert_true(E.pkt[2] & 0x80);

	/* DoT: the server name only */
	load_simple("www.example.com", 1);
	E.dq.http = &dot;
	assert_true(match(sni));
	assert_false(match(nosni) || match(hdr) || match(pth) || match(pathr));
	assert_int_equal(dlb_act_run(a, &E.dq), DLB_R_CONTINUE);

	dlb_sel_unref(hdr);
	dlb_sel_unref(hosth);
	dlb_sel_unref(pathr);
	dlb_sel_unref(pth);
	dlb_sel_unref(sni);
	dlb_sel_unref(nosni);
	dlb_act_unref(a);
}

static void
test_sel_edns(void **state)
{
	struct qspec q = { .qname = "example.org", .qtype = 1, .edns = true, .ext = 1,
			   .version = 1, .dobit = true, .optcode = DLB_EDNS_OPT_COOKIE,
			   .trailing = 3 };

	(void)state;
	load_query(&q);
	assert_true(E.m.trailing);
	assert_true(match1(dlb_sel_new(DLB_SEL_DNSSEC)));
	assert_true(match1(sel_num(DLB_SEL_EDNS_OPTION, DLB_EDNS_OPT_COOKIE)));
	assert_false(match1(sel_num(DLB_SEL_EDNS_OPTION, DLB_EDNS_OPT_ECS)));
	assert_true(match1(sel_num(DLB_SEL_EDNS_VERSION, 0)));
	assert_false(match1(sel_num(DLB_SEL_EDNS_VERSION, 1)));
	assert_true(match1(sel_num(DLB_SEL_ERCODE, 16)));	/* ext 1 << 4 | 0 */
	assert_false(match1(sel_num(DLB_SEL_ERCODE, 0)));
	assert_true(match1(sel_num(DLB_SEL_RCODE, 0)));
	assert_true(match1(dlb_sel_new(DLB_SEL_TRAILING_DATA)));

	q.dobit = false;
	q.optcode = 0;
	q.version = 0;
	q.trailing = 0;
	load_query(&q);
	assert_false(match1(dlb_sel_new(DLB_SEL_DNSSEC)));
	assert_false(match1(sel_num(DLB_SEL_EDNS_OPTION, DLB_EDNS_OPT_COOKIE)));
	assert_false(match1(sel_num(DLB_SEL_EDNS_VERSION, 0)));
	assert_false(match1(dlb_sel_new(DLB_SEL_TRAILING_DATA)));
}

/* The same selectors on a response: the OPT RR is found by a walk. */
static void
test_sel_response(void **state)
{
	struct dlb_sel *s;

	(void)state;
	load_response(DLB_RCODE_NXDOMAIN, 0);
	assert_false(E.m.has_opt);	/* the question-only parse does not see it */
	assert_true(match1(sel_num(DLB_SEL_RCODE, DLB_RCODE_NXDOMAIN)));
	assert_false(match1(sel_num(DLB_SEL_RCODE, 0)));
	assert_true(match1(sel_num(DLB_SEL_ERCODE, DLB_RCODE_NXDOMAIN)));
	assert_true(match1(dlb_sel_new(DLB_SEL_DNSSEC)));
	assert_true(match1(sel_num(DLB_SEL_EDNS_OPTION, DLB_EDNS_OPT_COOKIE)));
	assert_false(match1(sel_num(DLB_SEL_EDNS_OPTION, DLB_EDNS_OPT_ECS)));
	assert_false(match1(dlb_sel_new(DLB_SEL_TRAILING_DATA)));

	load_response(0, 1);
	assert_true(match1(sel_num(DLB_SEL_ERCODE, 16)));	/* BADVERS */
	assert_false(match1(sel_num(DLB_SEL_ERCODE, 0)));

	/* record counts: qd 1, an 2, ns 0, ar 1 */
	s = dlb_sel_new(DLB_SEL_RECORDS_COUNT);
	s->u.count.section = 1;
	s->u.count.min = 2;
	s->u.count.max = 5;
	assert_true(match(s));
	s->u.count.section = 2;
	assert_false(match(s));
	s->u.count.min = 0;
	assert_true(match(s));
	s->u.count.section = 4;	/* no such section */
	assert_false(match(s));
	dlb_sel_unref(s);

	s = dlb_sel_new(DLB_SEL_RECORDS_TYPE_COUNT);
	s->u.count.section = 1;
	s->u.count.type = 28;
	s->u.count.min = 1;
	s->u.count.max = 1;
	assert_true(match(s));
	s->u.count.type = 5;	/* no CNAME */
	assert_false(match(s));
	s->u.count.min = 0;
	assert_true(match(s));
	s->u.count.section = 0;	/* the question: one A */
	s->u.count.type = 1;
	s->u.count.min = 1;
	assert_true(match(s));
	s->u.count.section = 3;	/* the OPT counts as a record of the additional section */
	s->u.count.type = DLB_TYPE_OPT;
	assert_true(match(s));
	dlb_sel_unref(s);

	/* trailing octets after a response */
	E.pkt[E.dq.len] = 0;
	E.dq.len++;
	assert_true(match1(dlb_sel_new(DLB_SEL_TRAILING_DATA)));
}

static void
test_sel_names(void **state)
{
	struct dlb_sel *s;
	uint8_t w[DLB_MAX_NAME];
	char err[128];
	int n;

	(void)state;
	load_simple("WWW.Example.COM", 1);

	/* QNameRule: exact, case-insensitive */
	s = dlb_sel_new(DLB_SEL_QNAME);
	n = dlb_wire_name_from_text("www.example.com.", s->u.name.lc, sizeof(s->u.name.lc));
	assert_true(n > 0);
	s->u.name.len = (uint16_t)n;
	assert_true(match(s));
	n = dlb_wire_name_from_text("example.com.", s->u.name.lc, sizeof(s->u.name.lc));
	s->u.name.len = (uint16_t)n;
	assert_false(match(s));
	dlb_sel_unref(s);

	/* suffixes */
	s = dlb_sel_new(DLB_SEL_SUFFIX);
	s->u.suffixes = dlb_suffix_set_new();
	assert_non_null(s->u.suffixes);
	n = dlb_wire_name_from_text("example.com.", w, sizeof(w));
	assert_int_equal(dlb_suffix_set_add(s->u.suffixes, w, (size_t)n), 0);
	assert_true(match(s));
	dlb_sel_unref(s);
	s = dlb_sel_new(DLB_SEL_SUFFIX);
	s->u.suffixes = dlb_suffix_set_new();
	n = dlb_wire_name_from_text("example.net.", w, sizeof(w));
	assert_int_equal(dlb_suffix_set_add(s->u.suffixes, w, (size_t)n), 0);
	assert_false(match(s));
	dlb_sel_unref(s);

	/* name sets */
	s = dlb_sel_new(DLB_SEL_QNAME_SET);
	s->u.nameset = dlb_name_set_new();
	assert_non_null(s->u.nameset);
	n = dlb_wire_name_from_text("example.com.", w, sizeof(w));
	assert_int_equal(dlb_name_set_add(s->u.nameset, w, (size_t)n), 0);
	assert_false(match(s));
	n = dlb_wire_name_from_text("www.example.com.", w, sizeof(w));
	assert_int_equal(dlb_name_set_add(s->u.nameset, w, (size_t)n), 0);
	assert_true(match(s));
	dlb_sel_unref(s);

	/* regex: no trailing dot, case-insensitive */
	s = dlb_sel_new(DLB_SEL_REGEX);
	assert_int_equal(dlb_sel_set_regex(s, "^www\\.example\\.com$", err, sizeof(err)), 0);
	assert_true(match(s));
	assert_int_equal(dlb_sel_set_regex(s, "^WWW\\.", err, sizeof(err)), 0);
	assert_true(match(s));
	assert_int_equal(dlb_sel_set_regex(s, "\\.com\\.$", err, sizeof(err)), 0);
	assert_false(match(s));
	assert_int_equal(dlb_sel_set_regex(s, "(", err, sizeof(err)), -1);
	assert_true(err[0] != '\0');
	assert_false(match(s));		/* the old expression stays */
	assert_int_equal(dlb_sel_set_regex(s, "^$", err, sizeof(err)), 0);
	assert_false(match(s));
	load_simple(".", 2);		/* the root is "" */
	assert_true(match(s));
	dlb_sel_unref(s);

	/* label count and wire length match OUTSIDE [min, max] */
	load_simple("a.b.example.com", 1);	/* 4 labels, wire length 17 */
	s = dlb_sel_new(DLB_SEL_LABELS_COUNT);
	s->u.range.min = 1;
	s->u.range.max = 4;
	assert_false(match(s));
	s->u.range.max = 3;
	assert_true(match(s));
	s->u.range.min = 5;
	s->u.range.max = 10;
	assert_true(match(s));
	dlb_sel_unref(s);
	s = dlb_sel_new(DLB_SEL_WIRE_LENGTH);
	s->u.range.min = 17;
	s->u.range.max = 17;
	assert_false(match(s));
	s->u.range.min = 18;
	s->u.range.max = 255;
	assert_true(match(s));
	dlb_sel_unref(s);
	load_simple(".", 1);
	s = dlb_sel_new(DLB_SEL_LABELS_COUNT);	/* the root has no label */
	s->u.range.min = 1;
	s->u.range.max = 10;
	assert_true(match(s));
	dlb_sel_unref(s);
}

static void
test_sel_nmg_tag_payload(void **state)
{
	struct dlb_sel *s;
	struct dlb_netmask nm;

	(void)state;
	load_simple("www.example.com", 1);

	s = dlb_sel_new(DLB_SEL_NMG);
	s->u.nmg.src = true;
	assert_int_equal(dlb_netmask_parse("192.0.2.0/24", &nm), 0);
	assert_int_equal(dlb_nmg_add(&s->u.nmg.g, &nm), 0);
	assert_true(match(s));
	s->u.nmg.src = false;	/* the destination 198.51.100.1 */
	assert_false(match(s));
	assert_int_equal(dlb_netmask_parse("198.51.100.0/30", &nm), 0);
	assert_int_equal(dlb_nmg_add(&s->u.nmg.g, &nm), 0);
	assert_true(match(s));
	set_v4(&E.remote, "203.0.113.1", 1);
	s->u.nmg.src = true;
	assert_false(match(s));
	dlb_sel_unref(s);

	/* tags */
	s = dlb_sel_new(DLB_SEL_TAG);
	s->u.tag.name = strdup("color");
	assert_false(match(s));
	dlb_tags_set(&E.dq.tags, "color", "red");
	assert_true(match(s));
	s->u.tag.value = strdup("red");
	assert_true(match(s));
	free(s->u.tag.value);
	s->u.tag.value = strdup("blue");
	assert_false(match(s));
	dlb_sel_unref(s);

	/* payload size: the query is 33 octets */
	assert_int_equal(E.dq.len, 33);
	s = dlb_sel_new(DLB_SEL_PAYLOAD_SIZE);
	s->u.cmp.size = 33;
	s->u.cmp.op = DLB_CMP_EQ;
	assert_true(match(s));
	s->u.cmp.op = DLB_CMP_NE;
	assert_false(match(s));
	s->u.cmp.op = DLB_CMP_GE;
	assert_true(match(s));
	s->u.cmp.op = DLB_CMP_LE;
	assert_true(match(s));
	s->u.cmp.op = DLB_CMP_GT;
	assert_false(match(s));
	s->u.cmp.op = DLB_CMP_LT;
	assert_false(match(s));
	s->u.cmp.size = 32;
	s->u.cmp.op = DLB_CMP_GT;
	assert_true(match(s));
	dlb_sel_unref(s);
}

static void
test_sel_proba(void **state)
{
	struct dlb_sel *s = dlb_sel_new(DLB_SEL_PROBA);
	int hits = 0;

	(void)state;
	load_simple("www.example.com", 1);
	s->u.proba = 0.0;
	for (int i = 0; i < 1000; i++)
		assert_false(match(s));
	s->u.proba = 1.0;
	for (int i = 0; i < 1000; i++)
		assert_true(match(s));
	s->u.proba = 0.25;
	for (int i = 0; i < 20000; i++)
		hits += match(s);
	assert_true(hits > 4500 && hits < 5500);
	dlb_sel_unref(s);
}

static uint64_t fake_outstanding = 7;

static void
fake_totals(int be_index, struct dlb_be_totals *out)
{
	(void)be_index;
	memset(out, 0, sizeof(*out));
	out->outstanding = fake_outstanding;
}

static void
test_sel_pools(void **state)
{
	struct dlb_sel *s;
	struct dlb_backend *be = E.cfg->backends[0];

	(void)state;
	load_simple("www.example.com", 1);
	s = dlb_sel_new(DLB_SEL_POOL_AVAILABLE);
	s->u.pool.name = strdup("p1");
	be->admin = DLB_BE_AUTO;
	be->healthy = 1;
	assert_true(match(s));
	be->healthy = 0;
	assert_false(match(s));
	be->admin = DLB_BE_FORCED_UP;
	assert_true(match(s));
	be->admin = DLB_BE_FORCED_DOWN;
	assert_false(match(s));
	be->admin = DLB_BE_AUTO;
	be->healthy = 1;
	free(s->u.pool.name);
	s->u.pool.name = strdup("empty");
	assert_false(match(s));
	free(s->u.pool.name);
	s->u.pool.name = strdup("nosuchpool");
	assert_false(match(s));
	dlb_sel_unref(s);

	s = dlb_sel_new(DLB_SEL_POOL_OUTSTANDING);
	s->u.pool.name = strdup("p1");
	s->u.pool.limit = 5;
	assert_false(match(s));		/* be_totals NULL: 0 */
	E.cfg->be_totals = fake_totals;
	assert_true(match(s));		/* 7 > 5 */
	s->u.pool.limit = 7;
	assert_false(match(s));
	fake_outstanding = 8;
	assert_true(match(s));
	E.cfg->be_totals = NULL;
	dlb_sel_unref(s);
}

static void
test_sel_lua_without_state(void **state)
{
	struct dlb_sel *s = dlb_sel_new(DLB_SEL_LUA);

	(void)state;
	load_simple("www.example.com", 1);
	s->u.lua.fn = 1;
	assert_false(match(s));
	dlb_sel_unref(s);
}

/* AND/OR/NOT evaluate left to right and stop early: a MaxQPSRule with one token shows it. */
static void
test_sel_logic(void **state)
{
	struct dlb_sel *tok, *s;

	(void)state;
	load_simple("www.example.com", 1);

	tok = sel_bucket(0.001, 1);
	dlb_sel_ref(tok);
	s = sel_list(DLB_SEL_AND, sel_num(DLB_SEL_QTYPE, 28), tok);
	assert_false(match(s));		/* QTYPE fails: the token is not taken */
	assert_false(match(s));
	dlb_sel_unref(s);
	s = sel_list(DLB_SEL_OR, sel_num(DLB_SEL_QTYPE, 1), tok);
	dlb_sel_ref(tok);
	assert_true(match(s));		/* QTYPE matches: not taken either */
	dlb_sel_unref(s);
	assert_true(match(tok));	/* the one token */
	assert_false(match(tok));
	dlb_sel_unref(tok);

	s = sel_list(DLB_SEL_AND, sel_num(DLB_SEL_QTYPE, 1), dlb_sel_new(DLB_SEL_RD));
	assert_true(match(s));
	dlb_sel_unref(s);
	s = sel_list(DLB_SEL_OR, sel_num(DLB_SEL_QTYPE, 2), sel_num(DLB_SEL_QTYPE, 3));
	assert_false(match(s));
	dlb_sel_unref(s);
	s = dlb_sel_new(DLB_SEL_NOT);
	s->u.sub = sel_num(DLB_SEL_QTYPE, 1);
	assert_false(match(s));
	dlb_sel_unref(s);
	s = dlb_sel_new(DLB_SEL_NOT);
	s->u.sub = sel_num(DLB_SEL_QTYPE, 2);
	assert_true(match(s));
	dlb_sel_unref(s);
	/* empty AND is true, empty OR false */
	s = dlb_sel_new(DLB_SEL_AND);
	assert_true(match(s));
	s->type = DLB_SEL_OR;
	assert_false(match(s));
	dlb_sel_unref(s);
}

/* ---- rules and chains -------------------------------------------------------------------- */

static void
test_rule_objects(void **state)
{
	struct dlb_sel *s = dlb_sel_new(DLB_SEL_ALL);
	struct dlb_act *a = act_new(DLB_ACT_NONE);
	struct dlb_rule *r1, *r2;

	(void)state;
	r1 = dlb_rule_new(s, a, "first", NULL);
	r2 = dlb_rule_new(s, a, NULL, "my-uuid");
	assert_non_null(r1);
	assert_non_null(r2);
	assert_int_equal(s->refs, 3);
	assert_int_equal(a->refs, 3);
	assert_string_equal(r1->name, "first");
	assert_string_equal(r2->name, "");
	assert_string_equal(r2->uuid, "my-uuid");
	/* a random v4 UUID */
	assert_int_equal(strlen(r1->uuid), 36);
	assert_int_equal(r1->uuid[14], '4');
	assert_true(strchr("89ab", r1->uuid[19]) != NULL);
	assert_int_equal(r1->uuid[8], '-');
	assert_true(r2->creation > r1->creation);
	assert_int_equal((uintptr_t)r1->ctr % 64, 0);
	dlb_rule_unref(r1);
	dlb_rule_unref(r2);
	assert_int_equal(s->refs, 1);
	dlb_sel_unref(s);
	dlb_act_unref(a);
}

static void
test_chain_publish(void **state)
{
	struct dlb_rule *r[2], *keep;
	const struct dlb_chain *c;
	struct dlb_rcu_thread rt;

	(void)state;
	for (int k = 0; k < DLB_CHAIN__COUNT; k++) {
		c = dlb_rules_chain((enum dlb_chain_kind)k);
		assert_non_null(c);
		assert_int_equal(c->n, 0);
	}
	r[0] = rule(sel_num(DLB_SEL_QTYPE, 1), act_new(DLB_ACT_DROP));
	r[1] = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_ACT_NONE));
	keep = r[0];
	dlb_rule_ref(keep);
	assert_int_equal(dlb_rules_publish(DLB_CHAIN_QUERY, r, 2, NULL), 0);
	assert_int_equal(keep->refs, 3);	/* ours, r[0]'s, the chain's */
	dlb_rule_unref(r[0]);
	dlb_rule_unref(r[1]);
	c = dlb_rules_chain(DLB_CHAIN_QUERY);
	assert_int_equal(c->n, 2);
	assert_ptr_equal(c->v[0], keep);
	assert_int_equal(dlb_rules_chain(DLB_CHAIN_RESPONSE)->n, 0);

	/* replace (mvRule-style: the same rule in a new chain); rt NULL frees at once */
	assert_int_equal(dlb_rules_publish(DLB_CHAIN_QUERY, &keep, 1, NULL), 0);
	assert_int_equal(keep->refs, 2);	/* the old chain let go */
	c = dlb_rules_chain(DLB_CHAIN_QUERY);
	assert_int_equal(c->n, 1);
	assert_ptr_equal(c->v[0], keep);

	/* through the epoch: released at the barrier */
	dlb_rcu_init();
	assert_int_equal(dlb_rcu_register(&rt), 0);
	assert_int_equal(dlb_rules_publish(DLB_CHAIN_QUERY, NULL, 0, &rt), 0);
	assert_int_equal(dlb_rules_chain(DLB_CHAIN_QUERY)->n, 0);
	dlb_rcu_barrier(&rt);
	assert_int_equal(keep->refs, 1);
	dlb_rcu_unregister(&rt);

	/* shutdown drops every chain */
	assert_int_equal(dlb_rules_publish(DLB_CHAIN_CACHE_HIT, &keep, 1, NULL), 0);
	assert_int_equal(keep->refs, 2);
	dlb_rules_shutdown();
	assert_int_equal(keep->refs, 1);
	assert_int_equal(dlb_rules_chain(DLB_CHAIN_CACHE_HIT)->n, 0);
	dlb_rule_unref(keep);
}

/* A named rule (rule() with a name). */
static struct dlb_rule *
named_rule(const char *name, struct dlb_sel *s, struct dlb_act *a)
{
	struct dlb_rule *r = dlb_rule_new(s, a, name, NULL);

	assert_non_null(r);
	dlb_sel_unref(s);
	dlb_act_unref(a);
	return r;
}

/*
 * A reload's rule that repeats a running one (name, selector and action)
 * shares its counters, wherever it moved in the chain; a changed one starts
 * at 0.
 */
static void
test_ruleset_reload_keeps_counters(void **state)
{
	struct dlb_rule *old[2], *neu[2];
	struct dlb_ruleset *rs;

	(void)state;
	old[0] = named_rule("a", sel_num(DLB_SEL_QTYPE, 1), act_new(DLB_ACT_DROP));
	old[1] = named_rule("b", dlb_sel_new(DLB_SEL_ALL), act_new(DLB_ACT_NONE));
	assert_int_equal(dlb_rules_publish(DLB_CHAIN_QUERY, old, 2, NULL), 0);
	old[0]->ctr[0].hits = 5;
	old[1]->ctr[1].hits = 3;

	/* "b" unchanged but first now; "a" with another action */
	neu[0] = named_rule("b", dlb_sel_new(DLB_SEL_ALL), act_new(DLB_ACT_NONE));
	neu[1] = named_rule("a", sel_num(DLB_SEL_QTYPE, 1), act_new(DLB_ACT_NONE));
	rs = dlb_rules_stage_begin();
	assert_non_null(rs);
	assert_int_equal(dlb_rules_publish(DLB_CHAIN_QUERY, neu, 2, NULL), 0);
	dlb_rules_stage_end();
	dlb_rules_stage_commit(rs, 1, NULL);
	assert_int_equal(dlb_rule_hits(neu[0]), 3);
	assert_int_equal(dlb_rule_hits(neu[1]), 0);
	/* shared slots: a worker still on the old rule counts for the new one */
	old[1]->ctr[0].hits++;
	assert_int_equal(dlb_rule_hits(neu[0]), 4);
	dlb_rules_shutdown();
	dlb_rule_unref(old[0]);
	dlb_rule_unref(old[1]);			/* the new "b" keeps the slots */
	assert_int_equal(dlb_rule_hits(neu[0]), 4);
	dlb_rule_unref(neu[0]);
	dlb_rule_unref(neu[1]);
}

/* Reload staging: chains published while staging go to the staged ruleset only. */
static void
test_ruleset_staging(void **state)
{
	struct dlb_rule *live_r, *staged_r;
	struct dlb_ruleset *rs;
	const struct dlb_ruleset *cur;

	(void)state;
	live_r = rule(sel_num(DLB_SEL_QTYPE, 1), act_new(DLB_ACT_DROP));
	staged_r = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_ACT_NONE));
	assert_int_equal(dlb_rules_publish(DLB_CHAIN_QUERY, &live_r, 1, NULL), 0);
	assert_int_equal(dlb_rules_publish(DLB_CHAIN_RESPONSE, &live_r, 1, NULL), 0);
	assert_int_equal(dlb_rules_current()->gen, 0);

	/* discarded: nothing changes */
	rs = dlb_rules_stage_begin();
	assert_non_null(rs);
	assert_int_equal(dlb_rules_chain(DLB_CHAIN_QUERY)->n, 0);	/* a staged ruleset starts empty */
	assert_int_equal(dlb_rules_publish(DLB_CHAIN_QUERY, &staged_r, 1, NULL), 0);
	assert_ptr_equal(dlb_rules_chain(DLB_CHAIN_QUERY)->v[0], staged_r);
	dlb_rules_stage_end();
	assert_ptr_equal(dlb_rules_chain(DLB_CHAIN_QUERY)->v[0], live_r);
	dlb_rules_stage_discard(rs);
	assert_int_equal(staged_r->refs, 1);

	/* committed: every chain at once, with the new generation */
	rs = dlb_rules_stage_begin();
	assert_int_equal(dlb_rules_publish(DLB_CHAIN_CACHE_HIT, &staged_r, 1, NULL), 0);
	dlb_rules_stage_end();
	dlb_rules_stage_commit(rs, 7, NULL);
	cur = dlb_rules_current();
	assert_int_equal(cur->gen, 7);
	assert_int_equal(cur->c[DLB_CHAIN_QUERY]->n, 0);	/* not in the new file: gone */
	assert_int_equal(cur->c[DLB_CHAIN_RESPONSE]->n, 0);
	assert_ptr_equal(cur->c[DLB_CHAIN_CACHE_HIT]->v[0], staged_r);
	assert_int_equal(live_r->refs, 1);			/* the old ruleset let go */

	/* a runtime edit keeps the generation and the other chains */
	assert_int_equal(dlb_rules_publish(DLB_CHAIN_QUERY, &live_r, 1, NULL), 0);
	assert_int_equal(dlb_rules_current()->gen, 7);
	assert_ptr_equal(dlb_rules_chain(DLB_CHAIN_CACHE_HIT)->v[0], staged_r);
	dlb_rules_shutdown();
	assert_int_equal(live_r->refs, 1);
	assert_int_equal(staged_r->refs, 1);
	dlb_rule_unref(live_r);
	dlb_rule_unref(staged_r);
}

static void
test_rule_counters(void **state)
{
	struct dlb_rule *r[2];
	const struct dlb_chain *c;
	static const int workers[] = { 0, 1, 5, 63, -1, 64, 1000, 1, 1 };

	(void)state;
	r[0] = rule(sel_num(DLB_SEL_QTYPE, 1), act_new(DLB_ACT_NONE));
	r[1] = rule(sel_num(DLB_SEL_QTYPE, 28), act_new(DLB_ACT_NONE));
	dlb_rule_ref(r[0]);
	dlb_rule_ref(r[1]);
	c = publish(DLB_CHAIN_QUERY, r, 2);
	load_simple("www.example.com", 1);
	for (size_t i = 0; i < sizeof(workers) / sizeof(workers[0]); i++) {
		E.dq.worker = workers[i];
		assert_int_equal(dlb_rules_run_query(c, &E.dq, &E.st), DLB_R_FORWARD);
	}
	assert_int_equal(dlb_rule_hits(r[0]), 9);
	assert_int_equal(dlb_rule_hits(r[1]), 0);
	assert_int_equal(r[0]->ctr[1].hits, 3);
	assert_int_equal(r[0]->ctr[DLB_MAX_WORKERS - 1].hits, 1);
	/* a rule in two chains shares its counter (it moves with mvRule) */
	assert_int_equal(dlb_rules_publish(DLB_CHAIN_QUERY, r, 1, NULL), 0);
	E.dq.worker = 2;
	dlb_rules_run_query(dlb_rules_chain(DLB_CHAIN_QUERY), &E.dq, &E.st);
	assert_int_equal(dlb_rule_hits(r[0]), 10);
	dlb_rule_unref(r[0]);
	dlb_rule_unref(r[1]);
	dlb_rules_shutdown();
}

/* ---- the query chain ------------------------------------------------------------------ */

/* Run @n rules once on the current dq; the chain is dropped after. */
static enum dlb_verdict_r
run_q(struct dlb_rule **v, int n)
{
	const struct dlb_chain *c = publish(DLB_CHAIN_QUERY, v, n);
	enum dlb_verdict_r r = dlb_rules_run_query(c, &E.dq, &E.st);

	return r;
}

static void
test_query_terminal(void **state)
{
	struct dlb_rule *r[4];
	struct dlb_rule *tail;
	enum dlb_verdict_r v;

	(void)state;
	/* no rule: forward to the default pool */
	load_simple("www.example.com", 1);
	assert_int_equal(run_q(NULL, 0), DLB_R_FORWARD);
	assert_false(E.dq.pool_set);

	/* Drop: terminal, rule-drop, the next rule is not reached */
	memset(&E.st, 0, sizeof(E.st));
	tail = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_ACT_NONE));
	dlb_rule_ref(tail);
	r[0] = rule(sel_num(DLB_SEL_QTYPE, 1), act_new(DLB_ACT_DROP));
	r[1] = tail;
	assert_int_equal(run_q(r, 2), DLB_R_DROP);
	assert_int_equal(E.st.rule_drop, 1);
	assert_int_equal(E.st.self_answered, 0);
	assert_int_equal(dlb_rule_hits(tail), 0);

	/* Allow: forward, stop */
	dlb_rule_ref(tail);
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_ACT_ALLOW));
	r[1] = tail;
	assert_int_equal(run_q(r, 2), DLB_R_FORWARD);
	assert_int_equal(dlb_rule_hits(tail), 0);

	/* RCode NXDOMAIN: an answer built in place, self-answered only (as dnsdist) */
	memset(&E.st, 0, sizeof(E.st));
	load_simple("www.example.com", 1);
	dlb_rule_ref(tail);
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), act_rcode(DLB_RCODE_NXDOMAIN));
	r[1] = tail;
	assert_int_equal(run_q(r, 2), DLB_R_ANSWER);
	assert_int_equal(E.st.rule_nxdomain, 0);
	assert_int_equal(E.st.self_answered, 1);
	assert_int_equal(E.st.rule_drop, 0);
	assert_int_equal(dlb_rd16(E.pkt), 0x1234);
	assert_true(E.pkt[2] & 0x80);		/* QR */
	assert_int_equal(E.pkt[3] & 0xf, DLB_RCODE_NXDOMAIN);
	assert_true(E.dq.len >= 12 + 21);
	assert_int_equal(dlb_rule_hits(tail), 0);

	/* REFUSED, SERVFAIL and NOTIMP: self-answered only */
	memset(&E.st, 0, sizeof(E.st));
	load_simple("www.example.com", 1);
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), act_rcode(DLB_RCODE_REFUSED));
	assert_int_equal(run_q(r, 1), DLB_R_ANSWER);
	load_simple("www.example.com", 1);
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), act_rcode(DLB_RCODE_SERVFAIL));
	assert_int_equal(run_q(r, 1), DLB_R_ANSWER);
	load_simple("www.example.com", 1);
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), act_rcode(DLB_RCODE_NOTIMP));
	assert_int_equal(run_q(r, 1), DLB_R_ANSWER);
	assert_int_equal(E.pkt[3] & 0xf, DLB_RCODE_NOTIMP);
	assert_int_equal(E.st.rule_refused, 0);
	assert_int_equal(E.st.rule_servfail, 0);
	assert_int_equal(E.st.rule_nxdomain, 0);
	assert_int_equal(E.st.self_answered, 3);

	/* Pool stop=false continues to the next rule, whose pool wins */
	memset(&E.st, 0, sizeof(E.st));
	load_simple("www.example.com", 1);
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), act_pool("p1", false));
	r[1] = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_ACT_SKIP_CACHE));
	assert_int_equal(run_q(r, 2), DLB_R_FORWARD);
	assert_true(E.dq.pool_set);
	assert_ptr_equal(E.dq.pool, dlb_config_find_pool(E.cfg, "p1"));
	assert_true(E.dq.skip_cache);
	load_simple("www.example.com", 1);
	dlb_rule_ref(tail);
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), act_pool("p1", false));
	r[1] = rule(dlb_sel_new(DLB_SEL_ALL), act_pool("nosuchpool", true));
	r[2] = tail;
	assert_int_equal(run_q(r, 3), DLB_R_FORWARD);
	assert_true(E.dq.pool_set);
	assert_null(E.dq.pool);			/* a missing pool: no server */
	assert_int_equal(dlb_rule_hits(tail), 0);	/* stop=true stopped */

	/* TC: over TCP a no-op that continues; over UDP an answer */
	memset(&E.st, 0, sizeof(E.st));
	load_simple("www.example.com", 1);
	E.dq.tcp = true;
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_ACT_TC));
	r[1] = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_ACT_DROP));
	assert_int_equal(run_q(r, 2), DLB_R_DROP);
	assert_int_equal(E.st.rule_truncated, 0);
	assert_int_equal(E.st.rule_drop, 1);
	load_simple("www.example.com", 1);
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_ACT_TC));
	r[1] = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_ACT_DROP));
	assert_int_equal(run_q(r, 2), DLB_R_ANSWER);
	assert_int_equal(E.st.rule_truncated, 1);
	assert_int_equal(E.st.self_answered, 1);
	assert_true(E.pkt[2] & 0x02);		/* TC */
	assert_true(E.pkt[2] & 0x80);

	/* Spoof: self-answered only */
	memset(&E.st, 0, sizeof(E.st));
	load_simple("www.example.com", 1);
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_ACT_SPOOF));
	r[0]->act->u.spoof.o.ttl = 60;
	r[0]->act->u.spoof.addrs = calloc(1, sizeof(struct sockaddr_storage));
	r[0]->act->u.spoof.naddrs = 1;
	set_v4((struct sockaddr_in *)r[0]->act->u.spoof.addrs, "192.0.2.99", 0);
	v = run_q(r, 1);
	assert_int_equal(v, DLB_R_ANSWER);
	assert_int_equal(E.st.self_answered, 1);
	assert_int_equal(E.st.rule_nxdomain + E.st.rule_drop + E.st.rule_truncated, 0);
	assert_int_equal(dlb_rd16(E.pkt + 6), 1);	/* one answer */

	/* SpoofAction with no address of the query's type does nothing (dnsdist 1.7) */
	memset(&E.st, 0, sizeof(E.st));
	for (int qt = 0; qt < 2; qt++) {
		load_simple("www.example.com", qt == 0 ? 16 : 28);	/* TXT, AAAA */
		r[0] = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_ACT_SPOOF));
		r[0]->act->u.spoof.addrs = calloc(1, sizeof(struct sockaddr_storage));
		r[0]->act->u.spoof.naddrs = 1;
		set_v4((struct sockaddr_in *)r[0]->act->u.spoof.addrs, "192.0.2.99", 0);
		r[1] = rule(dlb_sel_new(DLB_SEL_ALL), act_pool("p1", true));
		assert_int_equal(run_q(r, 2), DLB_R_FORWARD);
		assert_true(E.dq.pool_set);		/* the next rule ran */
		assert_false(E.pkt[2] & 0x80);		/* still the query */
		assert_int_equal(E.dq.len, 33);
	}
	assert_int_equal(E.st.self_answered, 0);

	/* LuaAction without a Lua state: SERVFAIL, counted */
	memset(&E.st, 0, sizeof(E.st));
	load_simple("www.example.com", 1);
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_ACT_LUA));
	assert_int_equal(run_q(r, 1), DLB_R_SERVFAIL);
	assert_int_equal(E.st.lua_errors, 1);
	assert_int_equal(E.st.rule_servfail, 1);
	assert_int_equal(E.st.self_answered, 1);

	dlb_rule_unref(tail);
	dlb_rules_shutdown();
}

static void
test_query_continue(void **state)
{
	struct dlb_rule *r[16];
	struct dlb_act *a;
	int n = 0;

	(void)state;
	memset(&E.st, 0, sizeof(E.st));
	load_simple("www.example.com", 1);
	assert_true(E.pkt[2] & 0x01);

	r[n++] = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_ACT_NONE));
	r[n++] = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_ACT_NO_RECURSE));
	r[n++] = rule(dlb_sel_new(DLB_SEL_RD), act_new(DLB_ACT_DROP));	/* RD is gone now */
	r[n++] = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_ACT_DISABLE_VALIDATION));
	a = act_new(DLB_ACT_DELAY);
	a->u.num = 250;
	r[n++] = rule(dlb_sel_new(DLB_SEL_ALL), a);
	a = act_new(DLB_ACT_TEMPFAIL_TTL);
	a->u.num = 7;
	r[n++] = rule(dlb_sel_new(DLB_SEL_ALL), a);
	a = act_new(DLB_ACT_ECS_PREFIX);
	a->u.ecsprefix.v4 = 20;
	a->u.ecsprefix.v6 = 48;
	r[n++] = rule(dlb_sel_new(DLB_SEL_ALL), a);
	a = act_new(DLB_ACT_ECS_OVERRIDE);
	a->u.flag = true;
	r[n++] = rule(dlb_sel_new(DLB_SEL_ALL), a);
	a = act_new(DLB_ACT_ECS);
	set_v4((struct sockaddr_in *)&a->u.ecs.v4, "10.0.0.0", 0);
	a->u.ecs.bits4 = 8;
	r[n++] = rule(dlb_sel_new(DLB_SEL_ALL), a);
	a = act_new(DLB_ACT_TAG);
	a->u.tag.name = strdup("t");
	a->u.tag.value = strdup("v");
	r[n++] = rule(dlb_sel_new(DLB_SEL_ALL), a);
	a = act_new(DLB_ACT_MAX_RETURNED_TTL);
	a->u.num = 42;
	r[n++] = rule(dlb_sel_new(DLB_SEL_ALL), a);
	/* ContinueAction(Drop): swallowed */
	a = act_new(DLB_ACT_CONTINUE);
	a->u.sub = act_new(DLB_ACT_DROP);
	r[n++] = rule(dlb_sel_new(DLB_SEL_ALL), a);
	/* the tag set above is visible to later rules */
	{
		struct dlb_sel *s = dlb_sel_new(DLB_SEL_TAG);

		s->u.tag.name = strdup("t");
		s->u.tag.value = strdup("v");
		r[n++] = rule(s, act_pool("p1", true));
	}
	r[n++] = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_ACT_DROP));

	assert_int_equal(run_q(r, n), DLB_R_FORWARD);
	assert_false(E.pkt[2] & 0x01);		/* RD cleared in the packet */
	assert_false(E.m.flags & DLB_F_RD);
	assert_true(E.pkt[3] & 0x10);		/* CD */
	assert_true(E.m.flags & DLB_F_CD);
	assert_int_equal(E.dq.delay_ms, 250);
	assert_int_equal(E.dq.tempfail_ttl, 7);
	assert_int_equal(E.dq.ecs_prefix_v4, 20);
	assert_int_equal(E.dq.ecs_prefix_v6, 48);
	assert_int_equal(E.dq.ecs_override, 1);
	assert_int_equal(E.dq.use_ecs, -1);	/* SetECSAction sets only the value */
	assert_int_equal(E.dq.ecs_fixed.ss_family, AF_INET);
	assert_int_equal(E.dq.ecs_fixed_bits, 8);
	assert_string_equal(dlb_tags_get(&E.dq.tags, "t"), "v");
	assert_int_equal(E.dq.max_returned_ttl, 42);
	assert_true(E.dq.pool_set);
	assert_non_null(E.dq.pool);
	assert_int_equal(E.st.rule_drop, 0);

	/* DisableECS; Delay is UDP only */
	load_simple("www.example.com", 1);
	E.dq.tcp = true;
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_ACT_DISABLE_ECS));
	a = act_new(DLB_ACT_DELAY);
	a->u.num = 250;
	r[1] = rule(dlb_sel_new(DLB_SEL_ALL), a);
	assert_int_equal(run_q(r, 2), DLB_R_FORWARD);
	assert_int_equal(E.dq.use_ecs, 0);
	assert_int_equal(E.dq.delay_ms, 0);

	/* ContinueAction(RCode): the answer stands unless a later rule stops */
	memset(&E.st, 0, sizeof(E.st));
	load_simple("www.example.com", 1);
	a = act_new(DLB_ACT_CONTINUE);
	a->u.sub = act_rcode(DLB_RCODE_REFUSED);
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), a);
	r[1] = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_ACT_NONE));
	assert_int_equal(run_q(r, 2), DLB_R_ANSWER);
	assert_int_equal(E.pkt[3] & 0xf, DLB_RCODE_REFUSED);
	assert_int_equal(E.st.rule_refused, 0);
	assert_int_equal(E.st.self_answered, 1);

	dlb_rules_shutdown();
}

/* ---- suffix rules sharing the dq's qname labels ----------------------------------------- */

/* A suffix selector of the names in @csv (comma-separated, any case). */
static struct dlb_sel *
sel_suffixes(const char *csv)
{
	struct dlb_sel *s = dlb_sel_new(DLB_SEL_SUFFIX);
	char buf[256], *save = NULL;

	s->u.suffixes = dlb_suffix_set_new();
	assert_non_null(s->u.suffixes);
	snprintf(buf, sizeof(buf), "%s", csv);
	for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
		uint8_t w[DLB_MAX_NAME];
		int n = dlb_wire_name_from_text(t, w, sizeof(w));

		assert_true(n > 0);
		assert_int_equal(dlb_suffix_set_add(s->u.suffixes, w, (size_t)n), 0);
	}
	return s;
}

static struct dlb_act *
act_tag(const char *name)
{
	struct dlb_act *a = act_new(DLB_ACT_TAG);

	a->u.tag.name = strdup(name);
	a->u.tag.value = strdup("1");
	return a;
}

/* The tags set, in chain order, as "a,c,d". */
static const char *
tags_set(char *out, size_t outsz)
{
	size_t pos = 0;
	const char *k, *v;

	out[0] = '\0';
	for (size_t it = 0; dlb_tags_next(&E.dq.tags, &it, &k, &v);)
		pos += (size_t)snprintf(out + pos, outsz - pos, "%s%s", pos ? "," : "", k);
	return out;
}

/*
 * Re-use E.dq for a new query @qname: the packet is parsed again into E.m
 * and the dq rebuilt as @how says: 0 the way dnslb/pipeline/query.c's dq_init does
 * (memset up to tags, then dlb_dq_reset_decisions), 1 the memset alone,
 * 2 dlb_dq_reset_decisions alone. The labels of the previous query must
 * never be seen again.
 */
static void
requery(const char *qname, int how)
{
	struct pb p;
	struct dlb_dq keep = E.dq;

	pb_hdr(&p, 0x4321, DLB_F_RD, 1, 0, 0, 0);
	pb_question(&p, qname, 1, 1);
	memcpy(E.pkt, p.b, p.n);
	assert_int_equal(dlb_wire_parse_query(E.pkt, p.n, &E.m), DLB_OK);
	if (how == 0 || how == 1) {
		memset(&E.dq, 0, offsetof(struct dlb_dq, tags));
		E.dq.pkt = keep.pkt;
		E.dq.cap = keep.cap;
		E.dq.m = keep.m;
		E.dq.remote = keep.remote;
		E.dq.local = keep.local;
		E.dq.cfg = keep.cfg;
		E.dq.now = keep.now;
		E.dq.rng = keep.rng;
		E.dq.be_index = -1;
	}
	if (how == 0 || how == 2)
		dlb_dq_reset_decisions(&E.dq);
	dlb_tags_clear(&E.dq.tags);
	E.dq.len = p.n;
}

static void
test_suffix_rules_shared_labels(void **state)
{
	struct dlb_rule *r[12];
	const struct dlb_chain *c;
	struct dlb_sel *ns;
	uint8_t w[DLB_MAX_NAME];
	char got[128];
	int n = 0, len;

	(void)state;
	r[n++] = rule(sel_suffixes("com"), act_tag("a"));			/* the TLD only */
	r[n++] = rule(sel_suffixes("net,org"), act_tag("b"));
	r[n++] = rule(sel_suffixes("Example.COM"), act_tag("c"));		/* added lowercased */
	r[n++] = rule(sel_suffixes("www.example.com"), act_tag("d"));		/* 3 labels deep */
	r[n++] = rule(sel_suffixes("other.example.com,x.www.example.com"), act_tag("e"));
	ns = dlb_sel_new(DLB_SEL_QNAME_SET);
	ns->u.nameset = dlb_name_set_new();
	len = dlb_wire_name_from_text("www.example.com.", w, sizeof(w));
	assert_int_equal(dlb_name_set_add(ns->u.nameset, w, (size_t)len), 0);
	r[n++] = rule(ns, act_tag("f"));
	r[n++] = rule(sel_suffixes("example.net"), act_tag("g"));
	r[n++] = rule(sel_suffixes("www.example.net,mail.example.org"), act_tag("h"));
	r[n++] = rule(sel_suffixes("com"), act_tag("i"));			/* again, all hashed */
	c = publish(DLB_CHAIN_QUERY, r, n);

	/* qname_lc is lowercase whatever the client wrote */
	load_simple("WWW.Example.COM", 1);
	assert_int_equal(dlb_rules_run_query(c, &E.dq, &E.st), DLB_R_FORWARD);
	assert_string_equal(tags_set(got, sizeof(got)), "a,c,d,f,i");
	assert_true(E.dq.qlabels_ready);

	/*
	 * The same dq for a second query of the same length and label count
	 * (offsets that would still fit): rebuilt each way the dq is rebuilt.
	 */
	for (int how = 0; how < 3; how++) {
		requery("www.EXAMPLE.net", how);
		assert_false(E.dq.qlabels_ready);
		assert_int_equal(dlb_rules_run_query(c, &E.dq, &E.st), DLB_R_FORWARD);
		assert_string_equal(tags_set(got, sizeof(got)), "b,g,h");

		requery("a.b.c.mail.Example.ORG", how);
		assert_int_equal(dlb_rules_run_query(c, &E.dq, &E.st), DLB_R_FORWARD);
		assert_string_equal(tags_set(got, sizeof(got)), "b,h");

		requery("x.www.example.com", how);
		assert_int_equal(dlb_rules_run_query(c, &E.dq, &E.st), DLB_R_FORWARD);
		assert_string_equal(tags_set(got, sizeof(got)), "a,c,d,e,i");

		requery(".", how);
		assert_int_equal(dlb_rules_run_query(c, &E.dq, &E.st), DLB_R_FORWARD);
		assert_string_equal(tags_set(got, sizeof(got)), "");

		requery("www.example.com", how);
		assert_int_equal(dlb_rules_run_query(c, &E.dq, &E.st), DLB_R_FORWARD);
		assert_string_equal(tags_set(got, sizeof(got)), "a,c,d,f,i");
	}

	/* dlb_sel_match on its own shares them too */
	requery("www.example.com", 0);
	assert_true(match(r[3]->sel));
	assert_true(match(r[0]->sel));
	assert_false(match(r[6]->sel));
	dlb_rules_shutdown();
}

static void
test_query_qps_actions(void **state)
{
	struct dlb_rule *r[2];
	struct dlb_act *a;
	const struct dlb_chain *c;
	int fwd = 0, drop = 0, pooled = 0;

	(void)state;
	memset(&E.st, 0, sizeof(E.st));
	/* QPSAction(2): 2 pass per second (burst 2), the rest dropped */
	a = act_new(DLB_ACT_QPS);
	a->u.bucket = malloc(sizeof(*a->u.bucket));
	dlb_bucket_init(a->u.bucket, 2, 2);
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), a);
	c = publish(DLB_CHAIN_QUERY, r, 1);
	for (int i = 0; i < 10; i++) {
		load_simple("www.example.com", 1);
		E.dq.now = 50.0;
		if (dlb_rules_run_query(c, &E.dq, &E.st) == DLB_R_DROP)
			drop++;
		else
			fwd++;
	}
	assert_int_equal(fwd, 2);
	assert_int_equal(drop, 8);
	assert_int_equal(E.st.rule_drop, 8);

	/* QPSPoolAction(3, "p1"): to p1 while under the rate, then on to the next rule */
	a = act_new(DLB_ACT_QPS_POOL);
	a->u.qpspool.bucket = malloc(sizeof(*a->u.qpspool.bucket));
	dlb_bucket_init(a->u.qpspool.bucket, 3, 3);
	a->u.qpspool.pool = strdup("p1");
	a->u.qpspool.stop = true;
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), a);
	r[1] = rule(dlb_sel_new(DLB_SEL_ALL), act_pool("empty", true));
	c = publish(DLB_CHAIN_QUERY, r, 2);
	for (int i = 0; i < 10; i++) {
		load_simple("www.example.com", 1);
		E.dq.now = 60.0;
		assert_int_equal(dlb_rules_run_query(c, &E.dq, &E.st), DLB_R_FORWARD);
		assert_true(E.dq.pool_set);
		if (E.dq.pool == dlb_config_find_pool(E.cfg, "p1"))
			pooled++;
	}
	assert_int_equal(pooled, 3);
	dlb_rules_shutdown();
}

/* ---- response chains ---------------------------------------------------------------------- */

static enum dlb_verdict_r
run_r(struct dlb_rule **v, int n)
{
	const struct dlb_chain *c = publish(DLB_CHAIN_RESPONSE, v, n);

	return dlb_rules_run_response(c, &E.dq, &E.st);
}

static struct dlb_act *
ract_limit(uint32_t min, uint32_t max, uint16_t type)
{
	struct dlb_act *a = act_new(DLB_RACT_LIMIT_TTL);

	a->u.ttl.min = min;
	a->u.ttl.max = max;
	if (type != 0) {
		a->u.ttl.types = malloc(sizeof(uint16_t));
		a->u.ttl.types[0] = type;
		a->u.ttl.ntypes = 1;
	}
	return a;
}

static void
test_response_chain(void **state)
{
	struct dlb_rule *r[4];
	struct dlb_act *a;
	uint8_t opt_before[11];

	(void)state;
	memset(&E.st, 0, sizeof(E.st));

	/* LimitTTL(60, 120): 300 -> 120, 30 -> 60; the OPT RR is not touched */
	load_response(0, 0);
	memcpy(opt_before, E.pkt + E.dq.len - 17, sizeof(opt_before));
	assert_int_equal(resp_ttl(0), 300);
	assert_int_equal(resp_ttl(1), 30);
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), ract_limit(60, 120, 0));
	assert_int_equal(run_r(r, 1), DLB_R_FORWARD);
	assert_int_equal(resp_ttl(0), 120);
	assert_int_equal(resp_ttl(1), 60);
	assert_memory_equal(opt_before, E.pkt + E.dq.len - 17, sizeof(opt_before));

	/* SetMinTTL(100) on AAAA only */
	load_response(0, 0);
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), ract_limit(100, UINT32_MAX, 28));
	assert_int_equal(run_r(r, 1), DLB_R_FORWARD);
	assert_int_equal(resp_ttl(0), 300);
	assert_int_equal(resp_ttl(1), 100);

	/* SetReducedTTL(50) then SetMaxTTL(100), in order */
	load_response(0, 0);
	a = act_new(DLB_RACT_REDUCED_TTL);
	a->u.num = 50;
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), a);
	r[1] = rule(dlb_sel_new(DLB_SEL_ALL), ract_limit(0, 100, 0));
	assert_int_equal(run_r(r, 2), DLB_R_FORWARD);
	assert_int_equal(resp_ttl(0), 100);
	assert_int_equal(resp_ttl(1), 15);

	/* MaxReturnedTTL, SkipCache, tag, delay: fields; then Drop stops */
	load_response(DLB_RCODE_NXDOMAIN, 0);
	a = act_new(DLB_RACT_MAX_RETURNED_TTL);
	a->u.num = 33;
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), a);
	r[1] = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_RACT_SKIP_CACHE));
	a = act_new(DLB_RACT_DELAY);
	a->u.num = 10;
	r[2] = rule(dlb_sel_new(DLB_SEL_ALL), a);
	r[3] = rule(sel_num(DLB_SEL_RCODE, DLB_RCODE_NXDOMAIN), act_new(DLB_RACT_DROP));
	assert_int_equal(run_r(r, 4), DLB_R_DROP);
	assert_int_equal(E.dq.max_returned_ttl, 33);
	assert_true(E.dq.skip_cache);
	assert_int_equal(E.dq.delay_ms, 10);
	assert_int_equal(E.st.rule_drop, 0);	/* not a query rule's drop */

	/* Allow stops before the Drop */
	load_response(0, 0);
	a = act_new(DLB_RACT_TAG);
	a->u.tag.name = strdup("seen");
	a->u.tag.value = strdup("1");
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), a);
	r[1] = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_RACT_ALLOW));
	r[2] = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_RACT_DROP));
	assert_int_equal(run_r(r, 3), DLB_R_FORWARD);
	assert_string_equal(dlb_tags_get(&E.dq.tags, "seen"), "1");

	/* a query action in a response chain is skipped; no rule: forward */
	load_response(0, 0);
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_ACT_DROP));
	assert_int_equal(run_r(r, 1), DLB_R_FORWARD);
	assert_int_equal(run_r(NULL, 0), DLB_R_FORWARD);

	/* LuaResponseAction without a Lua state: SERVFAIL, lua-errors */
	memset(&E.st, 0, sizeof(E.st));
	load_response(0, 0);
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), act_new(DLB_RACT_LUA));
	assert_int_equal(run_r(r, 1), DLB_R_SERVFAIL);
	assert_int_equal(E.st.lua_errors, 1);

	/* ClearRecordTypes(AAAA): one answer left, the packet shorter */
	load_response(0, 0);
	{
		size_t before = E.dq.len;

		a = act_new(DLB_RACT_CLEAR_RECORD_TYPES);
		a->u.types.types = malloc(sizeof(uint16_t));
		a->u.types.types[0] = 28;
		a->u.types.ntypes = 1;
		r[0] = rule(dlb_sel_new(DLB_SEL_ALL), a);
		assert_int_equal(run_r(r, 1), DLB_R_FORWARD);
		assert_true(E.dq.len < before);
		assert_int_equal(dlb_rd16(E.pkt + 6), 1);
	}
	dlb_rules_shutdown();
}

/* ---- token bucket ------------------------------------------------------------------------- */

static void
test_bucket(void **state)
{
	struct dlb_bucket b;
	int n;

	(void)state;
	/* rate 10/s, burst 5: full at first */
	dlb_bucket_init(&b, 10, 5);
	for (int i = 0; i < 5; i++)
		assert_true(dlb_bucket_take(&b, 100.0));
	assert_false(dlb_bucket_take(&b, 100.0));
	assert_false(dlb_bucket_take(&b, 100.05));
	assert_true(dlb_bucket_take(&b, 100.1));	/* one token per 0.1 s */
	assert_false(dlb_bucket_take(&b, 100.15));
	assert_true(dlb_bucket_take(&b, 100.2));
	/* a long pause refills to the burst, never beyond */
	for (n = 0; dlb_bucket_take(&b, 200.0); n++)
		;
	assert_int_equal(n, 5);

	/* over one second at a fine step: rate * t + burst, exactly */
	dlb_bucket_init(&b, 100, 10);
	n = 0;
	for (int i = 0; i <= 10000; i++)
		n += dlb_bucket_take(&b, 10.0 + i * 1e-4);
	assert_true(n >= 109 && n <= 110);

	/* a zero rate never grants */
	dlb_bucket_init(&b, 0, 5);
	assert_false(dlb_bucket_take(&b, 1.0));
	/* burst < 1 never grants */
	dlb_bucket_init(&b, 10, 0.5);
	assert_false(dlb_bucket_take(&b, 1.0));
	assert_false(dlb_bucket_take(&b, 2.0));
}

#define HAMMER_TAKES 400000

struct hammer {
	struct dlb_bucket *b;
	uint64_t granted;
};

static void *
hammer_main(void *arg)
{
	struct hammer *h = arg;

	for (int i = 0; i < HAMMER_TAKES; i++)
		h->granted += dlb_bucket_take(h->b, dlb_now());
	return NULL;
}

/* Two threads on one bucket over a measured window: never more than rate*t + burst. */
static void
test_bucket_threads(void **state)
{
	struct dlb_bucket b;
	struct hammer h[2] = { { .b = &b }, { .b = &b } };
	pthread_t th[2];
	double t0, t1, rate = 5000, burst = 20;
	uint64_t total;

	(void)state;
	dlb_bucket_init(&b, rate, burst);
	t0 = dlb_now();
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, hammer_main, &h[i]), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);
	t1 = dlb_now();
	total = h[0].granted + h[1].granted;
	print_message("bucket: %llu granted in %.3f s (bound %.0f)\n", (unsigned long long)total,
		      t1 - t0, rate * (t1 - t0) + burst);
	assert_true((double)total <= rate * (t1 - t0) + burst);
	assert_true(total >= (uint64_t)burst);
}

/* ---- per-subnet limits ---------------------------------------------------------------------- */

static void
set_v6(struct sockaddr_in6 *sin6, const char *ip)
{
	memset(sin6, 0, sizeof(*sin6));
	sin6->sin6_family = AF_INET6;
	assert_int_equal(inet_pton(AF_INET6, ip, &sin6->sin6_addr), 1);
}

static void
test_qps_ip(void **state)
{
	struct dlb_qps_ip *q;
	struct sockaddr_in a, b, c;
	struct sockaddr_in6 x, y, z, mapped;
	int over = 0;

	(void)state;
	/* 2 qps, burst 2, per /24 and /64; expire after 10 s idle, scan all shards */
	q = dlb_qps_ip_new(2, 24, 64, 2, 10, 60, 1);
	assert_non_null(q);
	set_v4(&a, "192.0.2.1", 1);
	set_v4(&b, "192.0.2.200", 2);	/* same /24 as a */
	set_v4(&c, "192.0.3.1", 3);
	assert_false(dlb_qps_ip_over(q, (struct sockaddr *)&a, 10.0));
	assert_false(dlb_qps_ip_over(q, (struct sockaddr *)&b, 10.0));
	assert_true(dlb_qps_ip_over(q, (struct sockaddr *)&a, 10.0));	/* the /24 is spent */
	assert_true(dlb_qps_ip_over(q, (struct sockaddr *)&b, 10.0));
	assert_false(dlb_qps_ip_over(q, (struct sockaddr *)&c, 10.0));	/* another /24 */
	assert_false(dlb_qps_ip_over(q, (struct sockaddr *)&a, 10.5));	/* refilled one */
	assert_true(dlb_qps_ip_over(q, (struct sockaddr *)&b, 10.5));
	assert_int_equal(dlb_qps_ip_count(q), 2);

	/* v6 /64; a v4-mapped address is its v4 /24 */
	set_v6(&x, "2001:db8:1:2::1");
	set_v6(&y, "2001:db8:1:2:ffff::9");
	set_v6(&z, "2001:db8:1:3::1");
	set_v6(&mapped, "::ffff:192.0.3.77");
	assert_false(dlb_qps_ip_over(q, (struct sockaddr *)&x, 20.0));
	assert_false(dlb_qps_ip_over(q, (struct sockaddr *)&y, 20.0));
	assert_true(dlb_qps_ip_over(q, (struct sockaddr *)&x, 20.0));
	assert_false(dlb_qps_ip_over(q, (struct sockaddr *)&z, 20.0));
	assert_int_equal(dlb_qps_ip_count(q), 4);
	assert_false(dlb_qps_ip_over(q, (struct sockaddr *)&mapped, 20.0));
	assert_int_equal(dlb_qps_ip_count(q), 4);	/* c's entry */

	/* cleanup: a, b's /24 idle since 10.5, c's since 20, the v6 ones since 20 */
	assert_int_equal(dlb_qps_ip_cleanup(q, 25.0), 1);
	assert_int_equal(dlb_qps_ip_count(q), 3);
	assert_int_equal(dlb_qps_ip_cleanup(q, 40.0), 0);	/* before cleanup_delay */
	assert_int_equal(dlb_qps_ip_cleanup(q, 85.0), 3);
	assert_int_equal(dlb_qps_ip_count(q), 0);
	/* a removed subnet starts with a full bucket again */
	assert_false(dlb_qps_ip_over(q, (struct sockaddr *)&a, 90.0));
	assert_false(dlb_qps_ip_over(q, (struct sockaddr *)&a, 90.0));
	assert_true(dlb_qps_ip_over(q, (struct sockaddr *)&a, 90.0));
	dlb_qps_ip_free(q);

	/* many subnets: the tables grow, all are tracked, cleanup takes them all */
	q = dlb_qps_ip_new(1, 32, 128, 1, 10, 0, 4);
	for (int i = 0; i < 20000; i++) {
		struct sockaddr_in s;

		memset(&s, 0, sizeof(s));
		s.sin_family = AF_INET;
		s.sin_addr.s_addr = htonl(0x0a000000u + (uint32_t)i);
		assert_false(dlb_qps_ip_over(q, (struct sockaddr *)&s, 1.0));
		over += dlb_qps_ip_over(q, (struct sockaddr *)&s, 1.0);
	}
	assert_int_equal(over, 20000);
	assert_int_equal(dlb_qps_ip_count(q), 20000);
	{
		size_t removed = 0;

		/* scan fraction 4: a quarter of the shards per call */
		for (int i = 0; i < 4; i++)
			removed += dlb_qps_ip_cleanup(q, 100.0);
		assert_int_equal(removed, 20000);
	}
	assert_int_equal(dlb_qps_ip_count(q), 0);
	dlb_qps_ip_free(q);

	/* rate 0: everything is over */
	q = dlb_qps_ip_new(0, 32, 64, 0, 10, 0, 1);
	assert_true(dlb_qps_ip_over(q, (struct sockaddr *)&a, 1.0));
	dlb_qps_ip_free(q);
}

struct qhammer {
	struct dlb_qps_ip *q;
	int id;
	uint64_t granted;
};

static void *
qhammer_main(void *arg)
{
	struct qhammer *h = arg;
	struct sockaddr_in shared, own;

	set_v4(&shared, "192.0.2.1", 1);
	memset(&own, 0, sizeof(own));
	own.sin_family = AF_INET;
	for (int i = 0; i < 20000; i++) {
		h->granted += !dlb_qps_ip_over(h->q, (struct sockaddr *)&shared, dlb_now());
		/* new subnets of our own meanwhile: the shards grow under the other thread */
		own.sin_addr.s_addr = htonl(0x0a000000u | (uint32_t)h->id << 16 | (uint32_t)i);
		(void)dlb_qps_ip_over(h->q, (struct sockaddr *)&own, dlb_now());
	}
	return NULL;
}

/* Two threads on one subnet's bucket while tables grow: never more than rate*t + burst. */
static void
test_qps_ip_threads(void **state)
{
	struct qhammer h[2];
	pthread_t th[2];
	double t0, t1, rate = 2000, burst = 10;
	uint64_t total;
	struct dlb_qps_ip *q = dlb_qps_ip_new(rate, 24, 64, burst, 300, 0, 1);

	(void)state;
	assert_non_null(q);
	t0 = dlb_now();
	for (int i = 0; i < 2; i++) {
		h[i] = (struct qhammer){ .q = q, .id = i };
		assert_int_equal(pthread_create(&th[i], NULL, qhammer_main, &h[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);
	t1 = dlb_now();
	total = h[0].granted + h[1].granted;
	assert_true((double)total <= rate * (t1 - t0) + burst);
	assert_true(total >= (uint64_t)burst);
	/* 192.0.2.0/24 and 10.0.x.0/24 for 0x0a00xxxx: 2 * 20000 / 256 subnets + 1 */
	assert_int_equal(dlb_qps_ip_count(q), 1 + 2 * ((20000 + 255) / 256));
	assert_int_equal(dlb_qps_ip_cleanup(q, t1 + 1000), 1 + 2 * ((20000 + 255) / 256));
	assert_int_equal(dlb_qps_ip_count(q), 0);
	dlb_qps_ip_free(q);
}

/* MaxQPSIPRule as a selector: matches the clients over their rate. */
static void
test_sel_qps(void **state)
{
	struct dlb_sel *s;
	int hits = 0;

	(void)state;
	load_simple("www.example.com", 1);
	s = dlb_sel_new(DLB_SEL_MAXQPSIP);
	s->u.qpsip = dlb_qps_ip_new(5, 32, 64, 5, 300, 60, 10);
	for (int i = 0; i < 8; i++)
		hits += match(s);
	assert_int_equal(hits, 3);
	dlb_sel_unref(s);

	/* MaxQPSRule matches while NOT over */
	s = sel_bucket(5, 5);
	hits = 0;
	for (int i = 0; i < 8; i++)
		hits += match(s);
	assert_int_equal(hits, 5);
	dlb_sel_unref(s);
}

/* ---- Lua leaves: how DNSAction / DNSResponseAction values become verdicts -------------------- */

/*
 * One Lua function per line; its number is its line's rank (every line
 * creates exactly one), its source "cfg:<line>".
 */
static const char lua_text[] =
	"x = LuaAction(function(dq) return DNSAction.Drop end)\n"			/* 1 */
	"x = LuaAction(function(dq) return DNSAction.Nxdomain end)\n"			/* 2 */
	"x = LuaAction(function(dq) return DNSAction.Refused end)\n"			/* 3 */
	"x = LuaAction(function(dq) return DNSAction.ServFail end)\n"			/* 4 */
	"x = LuaAction(function(dq) return DNSAction.Spoof, '192.0.2.7' end)\n"	/* 5 */
	"x = LuaAction(function(dq) return DNSAction.Spoof, '192.0.2.7, 192.0.2.8' end)\n"
	"x = LuaAction(function(dq) return DNSAction.Spoof, 'target.example.' end)\n"	/* 7 */
	"x = LuaAction(function(dq) return DNSAction.SpoofRaw, '\\192\\0\\2\\8' end)\n"
	"x = LuaAction(function(dq) return DNSAction.SpoofPacket, "
	"'\\18\\52\\129\\131\\0\\0\\0\\0\\0\\0\\0\\0' end)\n"				/* 9 */
	"x = LuaAction(function(dq) return DNSAction.Allow end)\n"			/* 10 */
	"x = LuaAction(function(dq) return DNSAction.HeaderModify end)\n"		/* 11 */
	"x = LuaAction(function(dq) return DNSAction.Pool, 'p1' end)\n"		/* 12 */
	"x = LuaAction(function(dq) return DNSAction.Delay, '50' end)\n"		/* 13 */
	"x = LuaAction(function(dq) return DNSAction.Truncate end)\n"			/* 14 */
	"x = LuaAction(function(dq) return DNSAction.None end)\n"			/* 15 */
	"x = LuaAction(function(dq) return DNSAction.NoRecurse end)\n"		/* 16 */
	"x = LuaAction(function(dq) error('boom') end)\n"				/* 17 */
	"x = LuaRule(function(dq) return dq.qtype == 1 end)\n"				/* 18 */
	"x = LuaRule(function(dq) error('rule boom') end)\n"				/* 19 */
	"x = LuaResponseAction(function(dr) return DNSResponseAction.Allow end)\n"	/* 20 */
	"x = LuaResponseAction(function(dr) return DNSResponseAction.Drop end)\n"	/* 21 */
	"x = LuaResponseAction(function(dr) return DNSResponseAction.ServFail end)\n"	/* 22 */
	"x = LuaResponseAction(function(dr) return DNSResponseAction.Delay, 30 end)\n"	/* 23 */
	"x = LuaResponseAction(function(dr) return DNSResponseAction.None end)\n"	/* 24 */
	"x = LuaResponseAction(function(dr) error('resp boom') end)\n"		/* 25 */
	"x = LuaAction(function(dq) dq:setContent("
	"'\\18\\52\\1\\0\\0\\1\\0\\0\\0\\0\\0\\0\\3www\\7example\\3net\\0\\0\\1\\0\\1') "
	"return DNSAction.None end)\n";						/* 26 */

enum {
	L_DROP = 1, L_NXD, L_REFUSED, L_SERVFAIL, L_SPOOF_IP, L_SPOOF_IPS, L_SPOOF_NAME,
	L_SPOOF_RAW, L_SPOOF_PACKET, L_ALLOW, L_HEADER_MODIFY, L_POOL, L_DELAY, L_TRUNCATE,
	L_NONE, L_NO_RECURSE, L_ERROR, L_RULE_A, L_RULE_ERROR, L_R_ALLOW, L_R_DROP,
	L_R_SERVFAIL, L_R_DELAY, L_R_NONE, L_R_ERROR, L_SET_CONTENT,
};

static struct dlb_lua_conf *lua_lc;
static struct dlb_lua_worker *lua_w;

static int
setup_lua(void **state)
{
	char err[512];

	setup(state);
	lua_lc = dlb_lua_conf_new(E.cfg, DLB_LUA_PHASE_CONFIG);
	assert_non_null(lua_lc);
	if (dlb_lua_conf_load_string(lua_lc, lua_text, "=cfg", err, sizeof(err)) != 0)
		fail_msg("config: %s", err);
	lua_w = dlb_luaw_new(lua_lc, E.cfg, 0, err, sizeof(err));
	if (lua_w == NULL)
		fail_msg("worker: %s", err);
	return 0;
}

static int
teardown_lua(void **state)
{
	dlb_luaw_free(lua_w);
	dlb_lua_conf_free(lua_lc);
	lua_w = NULL;
	lua_lc = NULL;
	return teardown(state);
}

static struct dlb_act *
act_lua(int fn)
{
	struct dlb_act *a = act_new(fn >= L_R_ALLOW && fn <= L_R_ERROR ? DLB_RACT_LUA : DLB_ACT_LUA);

	a->u.lua.fn = fn;
	snprintf(a->u.lua.src, sizeof(a->u.lua.src), "cfg:%d", fn);
	return a;
}

static struct dlb_sel *
sel_lua(int fn)
{
	struct dlb_sel *s = dlb_sel_new(DLB_SEL_LUA);

	s->u.lua.fn = fn;
	snprintf(s->u.lua.src, sizeof(s->u.lua.src), "cfg:%d", fn);
	return s;
}

/* Run LuaAction @fn then DelayAction(1) on a fresh www.example.com/A query. */
static enum dlb_verdict_r
run_lua_q(int fn, bool tcp)
{
	struct dlb_rule *r[2];
	struct dlb_act *d = act_new(DLB_ACT_DELAY);

	d->u.num = 1;
	load_simple("www.example.com", 1);
	E.dq.lua = lua_w;
	E.dq.tcp = tcp;
	memset(&E.st, 0, sizeof(E.st));
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), act_lua(fn));
	r[1] = rule(dlb_sel_new(DLB_SEL_ALL), d);
	return run_q(r, 2);
}

/* The type of the first answer record (owner compressed: 2 octets). */
static uint16_t
first_answer_type(void)
{
	return dlb_rd16(E.pkt + 12 + 17 + 4 + 2);
}

static void
test_lua_query_actions(void **state)
{
	(void)state;
	assert_int_equal(run_lua_q(L_DROP, false), DLB_R_DROP);
	assert_int_equal(E.st.rule_drop, 1);

	assert_int_equal(run_lua_q(L_NXD, false), DLB_R_ANSWER);
	assert_int_equal(E.pkt[3] & 0xf, DLB_RCODE_NXDOMAIN);
	assert_true(E.pkt[2] & 0x80);
	assert_int_equal(E.st.rule_nxdomain, 1);
	assert_int_equal(E.st.self_answered, 1);
	assert_true(E.pkt[2] & 0x01);		/* RD copied */
	assert_false(E.pkt[3] & 0x80);		/* RA as the query had it (dnsdist) */
	assert_int_equal(run_lua_q(L_REFUSED, false), DLB_R_ANSWER);
	assert_int_equal(E.pkt[3] & 0xf, DLB_RCODE_REFUSED);
	assert_int_equal(E.st.rule_refused, 1);
	assert_int_equal(run_lua_q(L_SERVFAIL, false), DLB_R_ANSWER);
	assert_int_equal(E.pkt[3] & 0xf, DLB_RCODE_SERVFAIL);
	assert_int_equal(E.st.rule_servfail, 1);
	assert_int_equal(E.st.lua_errors, 0);

	assert_int_equal(run_lua_q(L_SPOOF_IP, false), DLB_R_ANSWER);
	assert_int_equal(dlb_rd16(E.pkt + 6), 1);
	assert_int_equal(first_answer_type(), 1);
	assert_memory_equal(E.pkt + 12 + 21 + 12, "\xc0\x00\x02\x07", 4);
	assert_int_equal(E.st.self_answered, 1);
	/* an AAAA query and only a v4 address: dnsdist forwards it (and stops) */
	{
		struct dlb_rule *r[2];
		struct dlb_act *d = act_new(DLB_ACT_DELAY);

		d->u.num = 1;
		load_simple("www.example.com", 28);
		E.dq.lua = lua_w;
		memset(&E.st, 0, sizeof(E.st));
		r[0] = rule(dlb_sel_new(DLB_SEL_ALL), act_lua(L_SPOOF_IP));
		r[1] = rule(dlb_sel_new(DLB_SEL_ALL), d);
		assert_int_equal(run_q(r, 2), DLB_R_FORWARD);
		assert_false(E.pkt[2] & 0x80);
		assert_int_equal(E.dq.delay_ms, 0);
		assert_int_equal(E.st.self_answered, 0);
	}
	assert_int_equal(run_lua_q(L_SPOOF_IPS, false), DLB_R_ANSWER);
	assert_int_equal(dlb_rd16(E.pkt + 6), 2);
	assert_int_equal(run_lua_q(L_SPOOF_NAME, false), DLB_R_ANSWER);
	assert_int_equal(dlb_rd16(E.pkt + 6), 1);
	assert_int_equal(first_answer_type(), 5);	/* CNAME */
	assert_int_equal(run_lua_q(L_SPOOF_RAW, false), DLB_R_ANSWER);
	assert_int_equal(dlb_rd16(E.pkt + 6), 1);
	assert_int_equal(first_answer_type(), 1);
	assert_memory_equal(E.pkt + 12 + 21 + 12, "\xc0\x00\x02\x08", 4);
	assert_int_equal(E.st.self_answered, 1);

	/* SpoofPacket: the string is the answer, untouched */
	assert_int_equal(run_lua_q(L_SPOOF_PACKET, false), DLB_R_ANSWER);
	assert_int_equal(E.dq.len, 12);
	assert_memory_equal(E.pkt, "\x12\x34\x81\x83\0\0\0\0\0\0\0\0", 12);
	assert_int_equal(E.st.self_answered, 1);
	assert_int_equal(E.st.rule_nxdomain, 0);

	/* Allow stops before the DelayAction; None goes on to it */
	assert_int_equal(run_lua_q(L_ALLOW, false), DLB_R_FORWARD);
	assert_int_equal(E.dq.delay_ms, 0);
	assert_int_equal(run_lua_q(L_NONE, false), DLB_R_FORWARD);
	assert_int_equal(E.dq.delay_ms, 1);

	/*
	 * HeaderModify stops the rules: a message with QR set is the answer, a
	 * query (this one: untouched) is forwarded as it is, as dnsdist 1.7
	 */
	assert_int_equal(run_lua_q(L_HEADER_MODIFY, false), DLB_R_FORWARD);
	assert_false(E.pkt[2] & 0x80);
	assert_int_equal(E.dq.len, 33);
	assert_int_equal(E.dq.delay_ms, 0);
	assert_int_equal(E.st.self_answered, 0);

	assert_int_equal(run_lua_q(L_POOL, false), DLB_R_FORWARD);
	assert_true(E.dq.pool_set);
	assert_ptr_equal(E.dq.pool, dlb_config_find_pool(E.cfg, "p1"));
	assert_int_equal(E.dq.delay_ms, 0);

	/* Delay continues; its value is overwritten by the next DelayAction(1) */
	assert_int_equal(run_lua_q(L_DELAY, false), DLB_R_FORWARD);
	assert_int_equal(E.dq.delay_ms, 1);

	assert_int_equal(run_lua_q(L_TRUNCATE, false), DLB_R_ANSWER);
	assert_true(E.pkt[2] & 0x02);
	assert_int_equal(E.st.rule_truncated, 1);
	assert_int_equal(E.st.self_answered, 1);
	assert_int_equal(run_lua_q(L_TRUNCATE, true), DLB_R_FORWARD);	/* TCP: ignored */
	assert_int_equal(E.st.rule_truncated, 0);

	assert_int_equal(run_lua_q(L_NO_RECURSE, false), DLB_R_FORWARD);
	assert_false(E.pkt[2] & 0x01);
	assert_int_equal(E.dq.delay_ms, 0);	/* NoRecurse stops */

	assert_int_equal(run_lua_q(L_ERROR, false), DLB_R_SERVFAIL);
	assert_int_equal(E.st.lua_errors, 1);
	assert_int_equal(E.st.rule_servfail, 1);
	assert_int_equal(E.st.self_answered, 1);

	/* a worker state with another function under that number: an error too */
	{
		struct dlb_rule *r = rule(dlb_sel_new(DLB_SEL_ALL), act_lua(L_DROP));

		snprintf(r->act->u.lua.src, sizeof(r->act->u.lua.src), "cfg:999");
		load_simple("www.example.com", 1);
		E.dq.lua = lua_w;
		memset(&E.st, 0, sizeof(E.st));
		assert_int_equal(run_q(&r, 1), DLB_R_SERVFAIL);
		assert_int_equal(E.st.lua_errors, 1);
	}
	dlb_rules_shutdown();
}

static void
test_lua_rules_and_responses(void **state)
{
	struct dlb_rule *r[3];
	struct dlb_act *d;

	(void)state;
	/* LuaRule: a match, no match, and an error (no match, counted) */
	load_simple("www.example.com", 1);
	E.dq.lua = lua_w;
	memset(&E.st, 0, sizeof(E.st));
	r[0] = rule(sel_lua(L_RULE_ERROR), act_new(DLB_ACT_DROP));
	r[1] = rule(sel_lua(L_RULE_A), act_pool("p1", true));
	assert_int_equal(run_q(r, 2), DLB_R_FORWARD);
	assert_true(E.dq.pool_set);
	assert_int_equal(E.st.lua_errors, 1);
	assert_int_equal(E.st.rule_drop, 0);
	load_simple("www.example.com", 28);
	E.dq.lua = lua_w;
	r[0] = rule(sel_lua(L_RULE_A), act_new(DLB_ACT_DROP));
	assert_int_equal(run_q(r, 1), DLB_R_FORWARD);

	/* LuaResponseAction */
	load_response(0, 0);
	E.dq.lua = lua_w;
	memset(&E.st, 0, sizeof(E.st));
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), act_lua(L_R_DELAY));
	r[1] = rule(dlb_sel_new(DLB_SEL_ALL), act_lua(L_R_NONE));
	r[2] = rule(dlb_sel_new(DLB_SEL_ALL), act_lua(L_R_ALLOW));
	assert_int_equal(run_r(r, 3), DLB_R_FORWARD);
	assert_int_equal(E.dq.delay_ms, 30);

	load_response(0, 0);
	E.dq.lua = lua_w;
	d = act_new(DLB_RACT_DELAY);
	d->u.num = 5;
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), act_lua(L_R_ALLOW));
	r[1] = rule(dlb_sel_new(DLB_SEL_ALL), d);
	assert_int_equal(run_r(r, 2), DLB_R_FORWARD);
	assert_int_equal(E.dq.delay_ms, 0);	/* Allow stopped */

	load_response(0, 0);
	E.dq.lua = lua_w;
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), act_lua(L_R_DROP));
	assert_int_equal(run_r(r, 1), DLB_R_DROP);
	load_response(0, 0);
	E.dq.lua = lua_w;
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), act_lua(L_R_SERVFAIL));
	assert_int_equal(run_r(r, 1), DLB_R_SERVFAIL);
	assert_int_equal(E.st.lua_errors, 0);
	load_response(0, 0);
	E.dq.lua = lua_w;
	r[0] = rule(dlb_sel_new(DLB_SEL_ALL), act_lua(L_R_ERROR));
	assert_int_equal(run_r(r, 1), DLB_R_SERVFAIL);
	assert_int_equal(E.st.lua_errors, 1);
	dlb_rules_shutdown();
}

/* ---- cost of a chain of non-matching rules --------------------------------------------------- */

/* A LuaAction that replaces the message (dq:setContent): later suffix rules see the new qname. */
static void
test_lua_set_content_labels(void **state)
{
	struct dlb_rule *r[5];
	char got[64];

	(void)state;
	load_simple("www.example.com", 1);
	E.dq.lua = lua_w;
	r[0] = rule(sel_suffixes("example.com"), act_tag("c1"));
	r[1] = rule(dlb_sel_new(DLB_SEL_ALL), act_lua(L_SET_CONTENT));	/* -> www.example.net */
	r[2] = rule(sel_suffixes("example.com"), act_tag("c2"));
	r[3] = rule(sel_suffixes("example.net"), act_tag("n2"));
	r[4] = rule(sel_suffixes("www.example.net"), act_tag("w2"));
	assert_int_equal(run_q(r, 5), DLB_R_FORWARD);
	assert_int_equal(E.st.lua_errors, 0);
	assert_int_equal(E.m.qname_lc[13], 'n');
	assert_string_equal(tags_set(got, sizeof(got)), "c1,n2,w2");
	dlb_rules_shutdown();
}

static void
test_chain_cost(void **state)
{
	struct dlb_rule *r[100];
	const struct dlb_chain *c;
	double t0, t1;
	int iters = 20000;

	(void)state;
	for (int i = 0; i < 100; i++)
		r[i] = rule(sel_num(DLB_SEL_QTYPE, (uint32_t)(1000 + i)), act_new(DLB_ACT_DROP));
	c = publish(DLB_CHAIN_QUERY, r, 100);
	load_simple("www.example.com", 1);
	t0 = dlb_now();
	for (int i = 0; i < iters; i++)
		assert_int_equal(dlb_rules_run_query(c, &E.dq, &E.st), DLB_R_FORWARD);
	t1 = dlb_now();
	print_message("100 non-matching QTypeRule: %.2f ns per rule\n",
		      (t1 - t0) * 1e9 / iters / 100);
	dlb_rules_shutdown();
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tags),
		cmocka_unit_test(test_ruleset_staging),
		cmocka_unit_test(test_ruleset_reload_keeps_counters),
		cmocka_unit_test_setup_teardown(test_reset_decisions, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sel_header, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sel_http, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sel_edns, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sel_response, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sel_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sel_nmg_tag_payload, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sel_proba, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sel_pools, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sel_lua_without_state, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sel_logic, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sel_qps, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rule_objects, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chain_publish, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rule_counters, setup, teardown),
		cmocka_unit_test_setup_teardown(test_query_terminal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_query_continue, setup, teardown),
		cmocka_unit_test_setup_teardown(test_query_qps_actions, setup, teardown),
		cmocka_unit_test_setup_teardown(test_suffix_rules_shared_labels, setup, teardown),
		cmocka_unit_test_setup_teardown(test_response_chain, setup, teardown),
		cmocka_unit_test(test_bucket),
		cmocka_unit_test(test_bucket_threads),
		cmocka_unit_test(test_qps_ip),
		cmocka_unit_test(test_qps_ip_threads),
		cmocka_unit_test_setup_teardown(test_lua_query_actions, setup_lua, teardown_lua),
		cmocka_unit_test_setup_teardown(test_lua_rules_and_responses, setup_lua,
						teardown_lua),
		cmocka_unit_test_setup_teardown(test_lua_set_content_labels, setup_lua, teardown_lua),
		cmocka_unit_test_setup_teardown(test_chain_cost, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
