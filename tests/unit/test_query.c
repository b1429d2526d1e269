/*
 * test_query.c - the query pipeline's stages (dnslb/pipeline/query.c) on a
 * real worker, with no socket and no event: a query goes in through
 * dlb_query_process as a frontend would hand it, and the verdict, the
 * answer built in place and the counters come out. Stages in the order a
 * query meets them: parse and header checks, dynamic blocks, query rules,
 * the packet cache, server selection.
 */
#include "pkt.h"

#include <arpa/inet.h>
#include <stdlib.h>

#include "dnslb/core/cache.h"
#include "dnslb/core/config.h"
#include "dnslb/core/netmask.h"
#include "dnslb/pipeline/dynblock.h"
#include "dnslb/pipeline/query.h"
#include "dnslb/worker.h"
#include "rules/rules.h"
#include "worker_fx.h"

struct fx {
	struct dlb_config *cfg;
	struct dlb_worker *w;
	struct dlb_cache *cache;
	struct sockaddr_in client;
	struct pb p;			/* the query, answered in place */
	struct dlb_query q;
};

static struct fx *
fx_new(bool with_cache)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct sockaddr_in be = { .sin_family = AF_INET, .sin_port = htons(53) };
	struct dlb_config *cfg;

	assert_non_null(f);
	inet_pton(AF_INET, "127.0.0.1", &be.sin_addr);
	cfg = wfx_config(&be, 0, 0);
	if (with_cache) {
		struct dlb_cache_opts o;

		dlb_cache_opts_default(&o);
		o.max_entries = 100;
		f->cache = dlb_cache_new(&o);
		assert_non_null(f->cache);
		cfg->caches[cfg->ncaches++] = f->cache;
		dlb_config_get_pool(cfg, "")->cache = f->cache;
	}
	f->w = wfx_worker_on(cfg);
	f->cfg = cfg;
	f->client.sin_family = AF_INET;
	f->client.sin_port = htons(40000);
	inet_pton(AF_INET, "192.0.2.10", &f->client.sin_addr);
	return f;
}

static int
setup(void **state)
{
	*state = fx_new(false);
	return 0;
}

static int
setup_cache(void **state)
{
	*state = fx_new(true);
	return 0;
}

static int
teardown(void **state)
{
	struct fx *f = *state;

	dlb_rules_publish(DLB_CHAIN_QUERY, NULL, 0, NULL);
	dlb_dyn_clear_all();
	wfx_free(f->w, f->cfg);
	free(f);
	return 0;
}

/* "www.example.com" @qtype, ID @id, RD set. */
static void
ask(struct fx *f, uint16_t id, uint16_t qtype)
{
	pb_hdr(&f->p, id, 0x0100, 1, 0, 0, 0);
	pb_question(&f->p, "www.example.com", qtype, 1);
}

/* Run the pipeline over f->p (@tcp: a TCP client's query). */
static enum dlb_verdict
run(struct fx *f, bool tcp)
{
	memset(&f->q, 0, sizeof(f->q));
	f->q.pkt = f->p.b;
	f->q.len = f->p.n;
	f->q.cap = sizeof(f->p.b);
	f->q.client = (const struct sockaddr *)&f->client;
	f->q.tcp = tcp;
	return dlb_query_process(f->w, &f->q);
}

static uint16_t
ans_id(const struct fx *f)
{
	return (uint16_t)(f->q.pkt[0] << 8 | f->q.pkt[1]);
}

static unsigned
ans_rcode(const struct fx *f)
{
	return f->q.pkt[3] & 0x0f;
}

static bool
ans_qr(const struct fx *f)
{
	return (f->q.pkt[2] & 0x80) != 0;
}

/* ---- parse and header checks ------------------------------------------------ */

/* Too short to be a header: dropped over UDP, the connection closed over TCP;
 * counted once each as non-compliant. */
static void
test_malformed(void **state)
{
	struct fx *f = *state;

	f->p.n = 0;
	pb_u32(&f->p, 0x12340100);
	assert_int_equal(run(f, false), DLB_V_DROP);
	assert_int_equal(run(f, true), DLB_V_CLOSE);
	assert_int_equal(f->w->stats.noncompliant_queries, 2);
}

/* A response (QR=1) offered as a query is never answered. */
static void
test_response_as_query(void **state)
{
	struct fx *f = *state;

	pb_hdr(&f->p, 7, 0x8100, 1, 0, 0, 0);
	pb_question(&f->p, "www.example.com", 1, 1);
	assert_int_equal(run(f, false), DLB_V_DROP);
	assert_int_equal(f->w->stats.noncompliant_queries, 1);
}

/* No question: NOTIMP, built in place, ID and RD kept, as dnsdist 1.7.3. */
static void
test_empty_query_notimp(void **state)
{
	struct fx *f = *state;

	pb_hdr(&f->p, 0x4242, 0x0100, 0, 0, 0, 0);
	assert_int_equal(run(f, false), DLB_V_ANSWER);
	assert_int_equal(f->q.len, DLB_DNS_HDR);
	assert_int_equal(ans_id(f), 0x4242);
	assert_true(ans_qr(f));
	assert_int_equal(ans_rcode(f), DLB_RCODE_NOTIMP);
	assert_true(f->q.pkt[2] & 0x01);	/* RD */
	assert_int_equal(f->w->stats.empty_queries, 1);
	assert_int_equal(f->w->stats.noncompliant_queries, 0);
}

/* ---- server selection -------------------------------------------------------- */

/* A well-formed query with nothing in its way goes to the pool's one server,
 * and it is not cacheable without a cache. */
static void
test_forward_to_server(void **state)
{
	struct fx *f = *state;

	ask(f, 1, 1);
	assert_int_equal(run(f, false), DLB_V_FORWARD);
	assert_ptr_equal(f->q.be, f->cfg->backends[0]);
	assert_null(f->q.cache);
	assert_int_equal(f->q.key.qtype, 1);
	assert_int_equal(f->q.udp_max, 512);	/* no EDNS */
}

/* No server up (setDown): nothing to forward to; the verdict (a drop, or
 * SERVFAIL with setServFailWhenNoServer) is the frontend's to send. */
static void
test_no_server_up(void **state)
{
	struct fx *f = *state;
	enum dlb_verdict v;

	__atomic_store_n(&f->cfg->backends[0]->admin, DLB_BE_FORCED_DOWN, __ATOMIC_RELAXED);
	ask(f, 2, 1);
	v = run(f, false);
	assert_int_not_equal(v, DLB_V_FORWARD);
	assert_null(f->q.be);
}

/* ---- dynamic blocks --------------------------------------------------------- */

static void
block(const char *mask, int action)
{
	struct dlb_netmask nm;

	assert_int_equal(dlb_netmask_parse(mask, &nm), 0);
	assert_true(dlb_dyn_block_nm(&nm, "test", dlb_dyn_now() + 60, action, false, true,
				     dlb_dyn_now()));
	dlb_dyn_publish();
}

/* A client under a Refused block gets REFUSED; another client is forwarded. */
static void
test_dynblock(void **state)
{
	struct fx *f = *state;

	block("192.0.2.10/32", DLB_DYN_REFUSED);
	ask(f, 3, 1);
	assert_int_equal(run(f, false), DLB_V_ANSWER);
	assert_int_equal(ans_id(f), 3);
	assert_true(ans_qr(f));
	assert_int_equal(ans_rcode(f), DLB_RCODE_REFUSED);
	assert_int_equal(f->w->stats.dyn_blocked, 1);

	inet_pton(AF_INET, "192.0.2.11", &f->client.sin_addr);
	ask(f, 4, 1);
	assert_int_equal(run(f, false), DLB_V_FORWARD);
	assert_int_equal(f->w->stats.dyn_blocked, 1);
}

/* A Drop block drops over UDP. */
static void
test_dynblock_drop(void **state)
{
	struct fx *f = *state;

	block("192.0.2.0/24", DLB_DYN_DROP);
	ask(f, 5, 1);
	assert_int_equal(run(f, false), DLB_V_DROP);
	assert_int_equal(f->w->stats.dyn_blocked, 1);
}

/* ---- query rules ------------------------------------------------------------ */

/* QTypeRule(TXT) -> RCodeAction(REFUSED): TXT answered locally, A forwarded. */
static void
test_rule_rcode(void **state)
{
	struct fx *f = *state;
	struct dlb_sel *s = dlb_sel_new(DLB_SEL_QTYPE);
	struct dlb_act *a = dlb_act_new(DLB_ACT_RCODE);
	struct dlb_rule *r;

	assert_non_null(s);
	assert_non_null(a);
	s->u.num = 16;
	a->u.rcode.rcode = DLB_RCODE_REFUSED;
	r = dlb_rule_new(s, a, NULL, NULL);
	assert_non_null(r);
	dlb_sel_unref(s);
	dlb_act_unref(a);
	assert_int_equal(dlb_rules_publish(DLB_CHAIN_QUERY, &r, 1, NULL), 0);
	dlb_rule_unref(r);

	ask(f, 6, 16);
	assert_int_equal(run(f, false), DLB_V_ANSWER);
	assert_int_equal(ans_id(f), 6);
	assert_int_equal(ans_rcode(f), DLB_RCODE_REFUSED);
	ask(f, 7, 1);
	assert_int_equal(run(f, false), DLB_V_FORWARD);
}

/* ---- the packet cache -------------------------------------------------------- */

/* A miss is forwarded with the pool's cache and the key; once the answer is in
 * the cache, the same question under another ID is answered from it, with the
 * client's ID, and counted as a hit. */
static void
test_cache_miss_then_hit(void **state)
{
	struct fx *f = *state;
	struct pb ans;
	static const uint8_t addr[4] = { 192, 0, 2, 1 };

	ask(f, 10, 1);
	assert_int_equal(run(f, false), DLB_V_FORWARD);
	assert_ptr_equal(f->q.cache, f->cache);
	assert_int_equal(f->w->stats.cache_hits, 0);

	pb_hdr(&ans, 10, 0x8180, 1, 1, 0, 0);
	pb_question(&ans, "www.example.com", 1, 1);
	pb_rr_at(&ans, 12, 1, 300, addr, sizeof(addr));
	assert_true(dlb_cache_insert(f->cache, &f->w->rcu, &f->q.key, ans.b, ans.n, f->q.now, -1));

	ask(f, 11, 1);
	assert_int_equal(run(f, false), DLB_V_ANSWER);
	assert_int_equal(f->q.len, ans.n);
	assert_int_equal(ans_id(f), 11);
	assert_memory_equal(f->q.pkt + 2, ans.b + 2, ans.n - 2);
	assert_int_equal(f->w->stats.cache_hits, 1);

	/* another type is another key: a miss */
	ask(f, 12, 28);
	assert_int_equal(run(f, false), DLB_V_FORWARD);
	assert_int_equal(f->w->stats.cache_hits, 1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_malformed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_response_as_query, setup, teardown),
		cmocka_unit_test_setup_teardown(test_empty_query_notimp, setup, teardown),
		cmocka_unit_test_setup_teardown(test_forward_to_server, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_server_up, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dynblock, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dynblock_drop, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rule_rcode, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache_miss_then_hit, setup_cache, teardown),
	};

	return WFX_RUN(tests);
}
