/*
 * test_config.c - the Lua configuration (lua/conf.c) and the structure it
 * builds (dnslb/core/config.c): each test evaluates config text and checks
 * struct dlb_config. Many checks run inside Lua with assert(), which fails
 * the load with the line of the failed assertion. Packet-cache tests put
 * entries in with the engine's own API (dlb_cache_insert) and check what the
 * Lua methods see and remove.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dnslb/core/cache.h"
#include "dnslb/core/config.h"
#include "dnslb/core/netmask.h"
#include "dnslb/core/rcu.h"
#include "dnslb/core/tls.h"
#include "dnslb/core/wire.h"
#include "lua/conf.h"

struct fixture {
	struct dlb_config *cfg;
	struct dlb_lua_conf *lc;
	struct dlb_rcu_thread rt;	/* the "main thread" record the cache methods use */
	char err[1024];
};

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->cfg = dlb_config_new();
	assert_non_null(f->cfg);
	f->lc = dlb_lua_conf_new(f->cfg, DLB_LUA_PHASE_CONFIG);
	assert_non_null(f->lc);
	assert_int_equal(dlb_rcu_register(&f->rt), 0);
	dlb_lua_conf_set_rcu(f->lc, &f->rt);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	dlb_lua_conf_free(f->lc);
	dlb_config_free(f->cfg);
	dlb_rcu_unregister(&f->rt);	/* frees what expunges retired */
	free(f);
	return 0;
}

/* Evaluate @code; it must succeed. */
static void
run(struct fixture *f, const char *code)
{
	f->err[0] = '\0';
	if (dlb_lua_conf_load_string(f->lc, code, "=test", f->err, sizeof(f->err)) != 0)
		fail_msg("config failed: %s\n--- code:\n%s", f->err, code);
}

/* Evaluate @code; it must fail with a message containing @expect. */
static void
run_fail(struct fixture *f, const char *code, const char *expect)
{
	f->err[0] = '\0';
	if (dlb_lua_conf_load_string(f->lc, code, "=test", f->err, sizeof(f->err)) == 0)
		fail_msg("config unexpectedly succeeded:\n%s", code);
	if (strstr(f->err, expect) == NULL)
		fail_msg("error '%s' does not contain '%s' (code: %s)", f->err, expect, code);
}

static void
write_file(const char *path, const char *text)
{
	FILE *fp = fopen(path, "w");

	assert_non_null(fp);
	assert_int_equal(fputs(text, fp) >= 0, 1);
	assert_int_equal(fclose(fp), 0);
}

static uint16_t
port_of(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)(const void *)ss)->sin_port);
	return ntohs(((const struct sockaddr_in6 *)(const void *)ss)->sin6_port);
}

static bool
in_pool(struct dlb_config *cfg, const char *pool, const struct dlb_backend *be)
{
	struct dlb_pool *p = dlb_config_find_pool(cfg, pool);

	if (p == NULL)
		return false;
	for (int i = 0; i < p->n; i++)
		if (p->members[i] == be)
			return true;
	return false;
}

/* ---- defaults ----------------------------------------------------------- */

static void
test_defaults(void **state)
{
	static const char *const acl[] = {
		"10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
		"192.168.0.0/16", "::1/128", "fc00::/7", "fe80::/10",
	};
	static const uint8_t root_a[] = "\x01" "a" "\x0c" "root-servers" "\x03" "net";
	struct fixture *f = *state;
	struct dlb_config *cfg = f->cfg;
	struct dlb_backend *be;
	char buf[64];

	assert_int_equal(cfg->nfrontends, 0);
	assert_int_equal(cfg->nbackends, 0);
	assert_int_equal(cfg->workers, 0);
	assert_int_equal(cfg->set.policy, DLB_POLICY_LEAST_OUTSTANDING);
	assert_int_equal(cfg->set.udp_timeout_ms, 2000);
	assert_int_equal(cfg->max_udp_outstanding, 65535);
	assert_true(cfg->set.selfans.add_edns);
	assert_int_equal(cfg->set.selfans.payload_size, 1232);
	assert_int_equal(cfg->set.tcp_recv_timeout, 2);
	assert_int_equal(cfg->set.tcp_send_timeout, 2);
	assert_int_equal(cfg->udp_vector_size, 64);
	assert_true(cfg->blocking_receive);
	assert_int_equal(cfg->recv_coalesce_us, 0);
	assert_false(cfg->set.servfail_when_no_server);
	assert_non_null(dlb_config_find_pool(cfg, ""));

	assert_int_equal(cfg->acl.n, 9);
	for (size_t i = 0; i < 9; i++) {
		dlb_netmask_format(&cfg->acl.v[i], buf, sizeof(buf));
		assert_string_equal(buf, acl[i]);
	}

	assert_string_equal(dlb_policy_name(DLB_POLICY_LEAST_OUTSTANDING), "leastOutstanding");
	assert_string_equal(dlb_policy_name(DLB_POLICY_FIRST_AVAILABLE), "firstAvailable");
	assert_string_equal(dlb_policy_name(DLB_POLICY_ROUNDROBIN), "roundrobin");
	assert_string_equal(dlb_policy_name(DLB_POLICY_WRANDOM), "wrandom");
	assert_string_equal(dlb_policy_name(DLB_POLICY_WHASHED), "whashed");

	be = dlb_backend_new();
	assert_non_null(be);
	assert_int_equal(be->order, 1);
	assert_int_equal(be->weight, 1);
	assert_int_equal(be->check_name_len, sizeof(root_a));
	assert_memory_equal(be->check_name, root_a, sizeof(root_a));
	assert_int_equal(be->check_type, 1);
	assert_int_equal(be->check_class, 1);
	assert_int_equal(be->check_interval, 1);
	assert_int_equal(be->check_timeout, 1000);
	assert_int_equal(be->max_check_failures, 1);
	assert_int_equal(be->rise, 1);
	assert_int_equal(be->sockets, 1);
	assert_int_equal(be->retries, 5);
	assert_int_equal(be->tcp_connect_timeout, 5);
	assert_int_equal(be->tcp_send_timeout, 30);
	assert_int_equal(be->tcp_recv_timeout, 30);
	assert_int_equal(be->healthy, 1);
	assert_int_equal(be->admin, DLB_BE_AUTO);
	/* random v4 UUID: 8-4-4-4-12, version nibble 4, variant 8..b */
	assert_int_equal(strlen(be->uuid), 36);
	assert_int_equal(be->uuid[14], '4');
	assert_non_null(strchr("89ab", be->uuid[19]));
	for (int i = 0; i < 36; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23)
			assert_int_equal(be->uuid[i], '-');
		else
			assert_true(isxdigit((unsigned char)be->uuid[i]));
	}
	free(be);
}

/* ---- listeners ---------------------------------------------------------- */

static void
test_listeners(void **state)
{
	struct fixture *f = *state;
	struct dlb_config *cfg = f->cfg;

	run(f, "addLocal('192.0.2.1')");
	assert_int_equal(cfg->nfrontends, 1);
	assert_string_equal(cfg->frontends[0].text, "192.0.2.1:53");
	assert_int_equal(port_of(&cfg->frontends[0].addr), 53);

	run(f, "addLocal('[2001:db8::1]:5300', {reusePort=true, tcpFastOpenQueueSize=64,"
	       " maxInFlight=10, maxConcurrentTCPConnections=100, cpus={0, 2}, doTCP=true})");
	assert_int_equal(cfg->nfrontends, 2);
	assert_string_equal(cfg->frontends[1].text, "[2001:db8::1]:5300");
	assert_int_equal(cfg->frontends[1].addr.ss_family, AF_INET6);
	assert_true(cfg->frontends[1].reuseport);
	assert_int_equal(cfg->frontends[1].tcp_fastopen_qsize, 64);
	assert_int_equal(cfg->frontends[1].max_in_flight, 10);
	assert_int_equal(cfg->frontends[1].max_concurrent_tcp, 100);
	assert_int_equal(cfg->frontends[1].ncpus, 2);
	assert_int_equal(cfg->frontends[1].cpus[1], 2);

	/* a repeated address is merged (dnsdist's reusePort idiom) */
	run(f, "addLocal('[2001:db8::1]:5300', {reusePort=true, cpus={3}})\n"
	       "addLocal('192.0.2.1:53', {reusePort=true})");
	assert_int_equal(cfg->nfrontends, 2);
	assert_int_equal(cfg->frontends[1].ncpus, 3);
	assert_true(cfg->frontends[0].reuseport);

	/* bare IPv6, string numbers, doTCP (ignored), unknown option */
	run(f, "addLocal('::1', {tcpFastOpenQueueSize='8', reusePort='true', bogus=1})\n"
	       "addLocal('127.0.0.2:5353', {doTCP=true})");
	assert_int_equal(cfg->nfrontends, 4);
	assert_string_equal(cfg->frontends[2].text, "[::1]:53");
	assert_int_equal(cfg->frontends[2].tcp_fastopen_qsize, 8);
	assert_true(cfg->frontends[2].reuseport);
	assert_string_equal(cfg->frontends[3].text, "127.0.0.2:5353");

	/* interface (SO_BINDTODEVICE) and the listen() backlog */
	run(f, "setLocal('127.0.0.1:5300', {interface='lo', tcpListenQueueSize=64})");
	assert_string_equal(cfg->frontends[0].iface, "lo");
	assert_int_equal(cfg->frontends[0].tcp_listen_qsize, 64);
	run_fail(f, "setLocal('127.0.0.1:5300', {interface='a-very-long-interface-name'})",
		 "invalid interface");

	/* setLocal replaces everything */
	run(f, "setLocal('127.0.0.1:5300')");
	assert_int_equal(cfg->nfrontends, 1);
	assert_string_equal(cfg->frontends[0].text, "127.0.0.1:5300");
	assert_false(cfg->frontends[0].reuseport);
	run(f, "setLocal('0.0.0.0', {reusePort=true})\naddLocal('[::]:53')");
	assert_int_equal(cfg->nfrontends, 2);
	assert_string_equal(cfg->frontends[0].text, "0.0.0.0:53");
	assert_string_equal(cfg->frontends[1].text, "[::]:53");

	run_fail(f, "\naddLocal('127.0.0.355')", "test:2: addLocal: invalid address '127.0.0.355'");
	run_fail(f, "setLocal('1.2.3.4:99999')", "test:1: setLocal: invalid address");
	run_fail(f, "setLocal('::1::53')", "invalid address");
	run_fail(f, "addLocal('1.2.3.4', {maxInFlight=-1})", "'maxInFlight' is out of range");
	run_fail(f, "addLocal('1.2.3.4', {reusePort='yes'})", "'reusePort' must be a boolean");
	run_fail(f, "addLocal('1.2.3.4', {cpus={'x'}})", "invalid CPU number");
	run_fail(f, "addLocal('1.2.3.4', {cpus=3})", "'cpus' must be a table");
	run_fail(f, "addLocal('1.2.3.4', 5)", "must be a table of options");
	run_fail(f, "addLocal()", "must be a string");
	/* failures left the listeners alone */
	assert_int_equal(cfg->nfrontends, 2);
}

/* ---- ACL ---------------------------------------------------------------- */

static void
test_acl(void **state)
{
	struct fixture *f = *state;
	struct dlb_config *cfg = f->cfg;
	struct sockaddr_storage ss;
	socklen_t len;
	char buf[64];

	run(f, "out = {} print = function(s) out[#out + 1] = s end\n"
	       "showACL()\n"
	       "assert(#out == 9 and out[1] == '10.0.0.0/8' and out[9] == 'fe80::/10')");

	run(f, "setACL('192.0.2.0/24')");
	assert_int_equal(cfg->acl.n, 1);
	run(f, "setACL({'198.51.100.0/24', '2001:db8::/32', '203.0.113.7'})");
	assert_int_equal(cfg->acl.n, 3);
	dlb_netmask_format(&cfg->acl.v[1], buf, sizeof(buf));
	assert_string_equal(buf, "203.0.113.7/32");
	assert_int_equal(dlb_sockaddr_parse("198.51.100.9", 53, &ss, &len), 0);
	assert_true(dlb_nmg_match(&cfg->acl, (struct sockaddr *)&ss));
	assert_int_equal(dlb_sockaddr_parse("10.0.0.1", 53, &ss, &len), 0);
	assert_false(dlb_nmg_match(&cfg->acl, (struct sockaddr *)&ss));

	run(f, "addACL('10.0.0.0/8')\naddACL('10.0.0.0/8')");
	assert_int_equal(cfg->acl.n, 4);
	assert_true(dlb_nmg_match(&cfg->acl, (struct sockaddr *)&ss));
	run(f, "rmACL('10.0.0.0/8')\nrmACL('10.0.0.0/8')");
	assert_int_equal(cfg->acl.n, 3);
	assert_false(dlb_nmg_match(&cfg->acl, (struct sockaddr *)&ss));

	run(f, "out = {}\nshowACL()\nassert(out[1] == '198.51.100.0/24' and out[3] == "
	       "'2001:db8::/32')");

	run_fail(f, "\n\nsetACL({'192.0.2.0/24', '10.0.0.0/33'})",
		 "test:3: setACL: invalid netmask '10.0.0.0/33'");
	assert_int_equal(cfg->acl.n, 3);	/* unchanged */
	run_fail(f, "addACL('garbage')", "test:1: addACL: invalid netmask 'garbage'");
	run_fail(f, "addACL('::1/129')", "invalid netmask");
	run_fail(f, "rmACL('127.0.0.355')", "invalid netmask");
	run_fail(f, "setACL({'192.0.2.0/24', 5})", "expected a netmask string");
	run_fail(f, "setACL(5)", "table expected");

	run(f, "setACL({})");
	assert_int_equal(cfg->acl.n, 0);
}

/* ---- newServer ---------------------------------------------------------- */

static void
test_new_server_string(void **state)
{
	struct fixture *f = *state;
	struct dlb_config *cfg = f->cfg;

	run(f, "s = newServer('192.0.2.1')\n"
	       "assert(tostring(s) == '192.0.2.1:53')\n"
	       "assert(s:getName() == '192.0.2.1:53' and s.name == '192.0.2.1:53')\n"
	       "assert(s:getNameWithAddr() == '192.0.2.1:53')\n"
	       "newServer('[2001:db8::53]:5300')\n"
	       "newServer('2001:db8::54')");
	assert_int_equal(cfg->nbackends, 3);
	assert_string_equal(cfg->backends[0]->addr_text, "192.0.2.1:53");
	assert_string_equal(cfg->backends[0]->name, "192.0.2.1:53");
	assert_int_equal(cfg->backends[0]->index, 0);
	assert_int_equal(cfg->backends[0]->npools, 0);
	assert_true(in_pool(cfg, "", cfg->backends[0]));
	assert_string_equal(cfg->backends[1]->addr_text, "[2001:db8::53]:5300");
	assert_int_equal(cfg->backends[1]->addr.ss_family, AF_INET6);
	assert_string_equal(cfg->backends[2]->addr_text, "[2001:db8::54]:53");
	assert_int_equal(cfg->backends[2]->index, 2);
	assert_int_equal(dlb_config_find_pool(cfg, "")->n, 3);
}

static void
test_new_server_table(void **state)
{
	static const uint8_t example[] = "\x07" "example" "\x03" "com";
	struct fixture *f = *state;
	struct dlb_config *cfg = f->cfg;
	struct dlb_backend *be;

	run(f, "newServer({address='192.0.2.10:5353', name='ns1', pool={'abuse', 'slow'},"
	       " order=3, weight=20, qps=100, id='1B4E28BA-2FA1-11D2-883F-0016D3CCA427',"
	       " checkName='example.com', checkType='AAAA', checkClass=3, checkInterval=5,"
	       " checkTimeout=1500, maxCheckFailures=3, rise=2, mustResolve=true, setCD=true,"
	       " checkTCP=true, healthCheckMode='down', sockets=8, tcpOnly=true,"
	       " udpTimeout=1.5, retries=2, tcpConnectTimeout=3, tcpSendTimeout=4,"
	       " tcpRecvTimeout=6, maxInFlight=16, source='192.0.2.99@lo'})");
	assert_int_equal(cfg->nbackends, 1);
	be = cfg->backends[0];
	assert_string_equal(be->name, "ns1");
	assert_string_equal(be->addr_text, "192.0.2.10:5353");
	assert_int_equal(port_of(&be->addr), 5353);
	assert_int_equal(be->npools, 2);
	assert_string_equal(be->pools[0], "abuse");
	assert_string_equal(be->pools[1], "slow");
	assert_true(in_pool(cfg, "abuse", be));
	assert_true(in_pool(cfg, "slow", be));
	assert_false(in_pool(cfg, "", be));
	assert_int_equal(be->order, 3);
	assert_int_equal(be->weight, 20);
	assert_int_equal(be->qps, 100);
	assert_int_equal(be->qps_limit_rt, 100);
	assert_string_equal(be->uuid, "1b4e28ba-2fa1-11d2-883f-0016d3cca427");
	assert_int_equal(be->check_name_len, sizeof(example));
	assert_memory_equal(be->check_name, example, sizeof(example));
	assert_int_equal(be->check_type, 28);
	assert_int_equal(be->check_class, 3);
	assert_int_equal(be->check_interval, 5);
	assert_int_equal(be->check_timeout, 1500);
	assert_int_equal(be->max_check_failures, 3);
	assert_int_equal(be->rise, 2);
	assert_true(be->must_resolve);
	assert_true(be->set_cd);
	assert_true(be->check_tcp);
	assert_int_equal(be->admin, DLB_BE_FORCED_DOWN);
	assert_int_equal(be->sockets, 8);
	assert_true(be->tcp_only);
	assert_int_equal(be->udp_timeout_ms, 1500);
	assert_int_equal(be->retries, 2);
	assert_int_equal(be->tcp_connect_timeout, 3);
	assert_int_equal(be->tcp_send_timeout, 4);
	assert_int_equal(be->tcp_recv_timeout, 6);
	assert_int_equal(be->max_in_flight, 16);
	assert_int_equal(be->source.ss_family, AF_INET);
	assert_string_equal(be->source_iface, "lo");

	/* other spellings: checkType number, checkClass name, source forms, modes */
	run(f, "newServer({address='[2001:db8::1]', checkType=DNSQType.SOA, checkClass='CH',"
	       " healthCheckMode='up', source='2001:db8::99'})\n"
	       "newServer({address='192.0.2.11', checkType='soa', checkClass='IN',"
	       " healthCheckMode='lazy', source='lo', pool='', checkName='.'})\n"
	       "newServer({address='192.0.2.12', checkType='28', healthCheckMode='auto',"
	       " pool={'', 'extra'}})");
	be = cfg->backends[1];
	assert_int_equal(be->check_type, 6);
	assert_int_equal(be->check_class, 3);
	assert_int_equal(be->admin, DLB_BE_FORCED_UP);
	assert_int_equal(be->source.ss_family, AF_INET6);
	assert_string_equal(be->source_iface, "");
	be = cfg->backends[2];
	assert_int_equal(be->check_type, 6);
	assert_int_equal(be->check_class, 1);
	assert_int_equal(be->admin, DLB_BE_AUTO);
	assert_int_equal(be->source.ss_family, 0);
	assert_string_equal(be->source_iface, "lo");
	assert_true(in_pool(cfg, "", be));
	assert_int_equal(be->check_name_len, 1);
	be = cfg->backends[3];
	assert_int_equal(be->check_type, 28);
	assert_true(in_pool(cfg, "", be));
	assert_true(in_pool(cfg, "extra", be));
	/* dnsdist's fallbacks: no source for an interface that does not exist, 1 socket for 0 */
	run(f, "newServer({address='192.0.2.13', source='192.0.2.99@nonexist0', sockets=0})");
	be = cfg->backends[4];
	assert_int_equal(be->source.ss_family, 0);
	assert_string_equal(be->source_iface, "");
	assert_int_equal(be->sockets, 1);
	/* random ids are distinct */
	assert_string_not_equal(cfg->backends[1]->uuid, cfg->backends[2]->uuid);
}

/* DNS over TLS servers: a context, streams only, the name or address checked */
static void
test_new_server_tls(void **state)
{
	struct fixture *f = *state;
	struct dlb_backend *be;

	run(f, "newServer({address='192.0.2.1:853', tls='openssl', subjectName='dns.test',"
	       " validateCertificates=false, tcpOnly=false})\n"
	       "newServer({address='[2001:db8::1]:853', tls='openssl'})\n"
	       "newServer({address='192.0.2.2:853', tls='openssl', subjectAddr='192.0.2.9'})\n"
	       "newServer({address='192.0.2.3', subjectName='x.test'})\n"
	       "newServer({address='192.0.2.4', tls='openssl'})");
	be = f->cfg->backends[0];
	assert_non_null(be->tls);
	assert_true(be->tcp_only);
	assert_string_equal(be->tls_subject_name, "dns.test");
	be = f->cfg->backends[1];
	assert_non_null(be->tls);
	assert_string_equal(be->tls_subject_name, "");
	assert_string_equal(be->tls_subject_addr, "2001:db8::1");
	be = f->cfg->backends[2];
	assert_string_equal(be->tls_subject_addr, "192.0.2.9");
	be = f->cfg->backends[3];
	assert_null(be->tls);
	assert_false(be->tcp_only);
	/* dnsdist 1.7.3's port stays 53 without one, tls or not */
	assert_string_equal(f->cfg->backends[4]->addr_text, "192.0.2.4:53");
	assert_false(dlb_tls_client_same_opts(f->cfg->backends[0]->tls, f->cfg->backends[1]->tls));
	assert_true(dlb_tls_client_same_opts(f->cfg->backends[1]->tls, f->cfg->backends[2]->tls));
}

static void
test_new_server_coercion(void **state)
{
	struct fixture *f = *state;
	struct dlb_backend *be;

	/* dnsdist 1.7 reads most option values as strings; unknown keys only warn */
	run(f, "newServer({address='127.0.0.1:5398', qps='10', order='2', weight='7',"
	       " sockets='4', mustResolve='true', setCD='false', tcpOnly=false,"
	       " udpTimeout='0.25', checkInterval='2', bogusKey=1, useClientSubnet=true})");
	be = f->cfg->backends[0];
	assert_int_equal(be->qps, 10);
	assert_int_equal(be->order, 2);
	assert_int_equal(be->weight, 7);
	assert_int_equal(be->sockets, 4);
	assert_true(be->must_resolve);
	assert_false(be->set_cd);
	assert_false(be->tcp_only);
	assert_int_equal(be->udp_timeout_ms, 250);
	assert_int_equal(be->check_interval, 2);
}

static void
test_new_server_invalid(void **state)
{
	static const struct {
		const char *code, *expect;
	} cases[] = {
		{ "\nnewServer('127.0.0.355')",
		  "test:2: newServer: invalid address '127.0.0.355'" },
		{ "newServer('0.0.0.0')", "test:1: newServer: invalid address" },
		{ "newServer('192.0.2.1:0')", "invalid address" },
		{ "newServer('192.0.2.1:70000')", "invalid address" },
		{ "newServer({name='x'})", "test:1: newServer: 'address' is mandatory" },
		{ "newServer({address=5})", "'address' must be a string" },
		/* weight=0: logged, no server, not an error (dnsdist 1.7.3) */
		{ "newServer({address='192.0.2.1', order=-1})", "'order' is out of range" },
		{ "newServer({address='192.0.2.1', qps=-5})", "'qps' is out of range" },
		{ "newServer({address='192.0.2.1', qps='many'})", "'qps' must be an integer" },
		{ "newServer({address='192.0.2.1', qps=1.5})", "'qps' must be an integer" },
		{ "newServer({address='192.0.2.1', sockets=-1})", "'sockets' is out of range" },
		{ "newServer({address='192.0.2.1', sockets=65})", "'sockets' is out of range" },
		{ "newServer({address='192.0.2.1', checkName='a..b'})",
		  "test:1: newServer: invalid checkName 'a..b'" },
		{ "newServer({address='192.0.2.1', checkName=string.rep('a', 64) .. '.com'})",
		  "invalid checkName" },
		{ "newServer({address='192.0.2.1', checkType='BOGUS'})", "unknown checkType" },
		{ "newServer({address='192.0.2.1', checkType=70000})",
		  "'checkType' is out of range" },
		{ "newServer({address='192.0.2.1', checkClass='XX'})", "unknown checkClass" },
		{ "newServer({address='192.0.2.1', mustResolve='yes'})",
		  "'mustResolve' must be a boolean" },
		{ "newServer({address='192.0.2.1', healthCheckMode='sometimes'})",
		  "unknown healthCheckMode" },
		{ "newServer({address='192.0.2.1', udpTimeout='soon'})", "'udpTimeout'" },
		{ "newServer({address='192.0.2.1', udpTimeout=-1})", "'udpTimeout'" },
		{ "newServer({address='192.0.2.1', id='not-a-uuid'})", "invalid id" },
		{ "newServer({address='192.0.2.1', pool=5})", "'pool' must be a string" },
		{ "newServer({address='192.0.2.1', pool={'a', 5}})",
		  "'pool' must contain strings" },
		{ "newServer({address='192.0.2.1', pool=string.rep('p', 64)})", "too long" },
		{ "newServer({address='192.0.2.1', pool={'1','2','3','4','5','6','7','8','9'}})",
		  "at most 8 pools" },
		{ "newServer({address='192.0.2.1', name=string.rep('n', 200)})", "too long" },
		{ "newServer({address='192.0.2.1', source='999.1.1.1@lo'})",
		  "invalid source address" },
		{ "newServer({address='192.0.2.1', source='::1'})", "family" },
		{ "newServer({address='192.0.2.1', tls='gnutls'})",
		  "the TLS provider 'gnutls' is not supported by dnslb" },
		{ "newServer({address='192.0.2.1', tls='openssl', caStore='/nonexistent/ca'})",
		  "unable to read the CA store /nonexistent/ca: No such file" },
		{ "newServer({address='192.0.2.1', tls='openssl', subjectAddr='x.test'})",
		  "invalid subjectAddr 'x.test'" },
		{ "newServer({address='192.0.2.1', dohPath=5})", "'dohPath' must be a string" },
		{ "newServer({address='192.0.2.1', addXPF=65280})", "'addXPF': XPF records" },
		{ "addLocal('127.0.0.2:5353', true)", "argument #2 must be a table of options" },
		{ "setDOHResponseMapEntries({})",
		  "setDOHResponseMapEntries: no DNS over HTTPS listener (call it after addDOHLocal)" },
		{ "addTLSLocal('127.0.0.1:853', '/nonexistent/c', 'k')",
		  "unable to read the certificate file '/nonexistent/c'" },
		{ "addTLSLocal('127.0.0.1:853', {}, {})", "between 1 and 8 certificate" },
		{ "addTLSLocal('127.0.0.1:853', '/dev/null', '/dev/null', {provider='gnutls'})",
		  "the TLS provider 'gnutls' is not supported by dnslb" },
		{ "addTLSLocal('127.0.0.1:853', '/dev/null', '/dev/null', {minTLSVersion='ssl3'})",
		  "unknown minTLSVersion 'ssl3'" },
		{ "addTLSLocal('127.0.0.1:853', {'/dev/null', '/dev/null'}, '/dev/null')",
		  "2 certificates but 1 keys" },
		{ "newServer({address='192.0.2.1', checkInterval=0})", "'checkInterval'" },
		{ "newServer({address='192.0.2.1', retries=-1})", "'retries'" },
		{ "newServer({address='192.0.2.1', maxInFlight=70000})", "'maxInFlight'" },
		{ "newServer(5)", "expected an address string or a table" },
	};
	struct fixture *f = *state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run_fail(f, cases[i].code, cases[i].expect);
	assert_int_equal(f->cfg->nbackends, 0);
	assert_int_equal(dlb_config_find_pool(f->cfg, "")->n, 0);
}

/* ---- pools -------------------------------------------------------------- */

static void
test_pools(void **state)
{
	struct fixture *f = *state;
	struct dlb_config *cfg = f->cfg;
	struct dlb_pool *p;

	run(f, "newServer({address='192.0.2.1', pool='a', order=5})\n"
	       "newServer({address='192.0.2.2', pool='a', order=1})\n"
	       "newServer({address='192.0.2.3', pool={'a', 'b'}, order=5})\n"
	       "newServer({address='192.0.2.4', pool='b', order=1})\n"
	       "p = getPool('empty')\n"
	       "assert(p:getName() == 'empty' and tostring(p) == 'ServerPool \"empty\"')\n"
	       "assert(#getPoolServers('empty') == 0 and #getPoolServers('nonexistent') == 0)\n"
	       "local a = getPoolServers('a')\n"
	       "assert(#a == 3 and a[1]:getName() == '192.0.2.2:53')\n"
	       "assert(a[2]:getName() == '192.0.2.1:53' and a[3]:getName() == '192.0.2.3:53')");
	assert_non_null(dlb_config_find_pool(cfg, "empty"));
	assert_null(dlb_config_find_pool(cfg, "nonexistent"));
	/* members sorted by (order, index) */
	p = dlb_config_find_pool(cfg, "a");
	assert_int_equal(p->n, 3);
	assert_ptr_equal(p->members[0], cfg->backends[1]);
	assert_ptr_equal(p->members[1], cfg->backends[0]);
	assert_ptr_equal(p->members[2], cfg->backends[2]);
	p = dlb_config_find_pool(cfg, "b");
	assert_int_equal(p->n, 2);
	assert_ptr_equal(p->members[0], cfg->backends[3]);
	assert_int_equal(dlb_config_find_pool(cfg, "")->n, 0);

	/* addPool / rmPool on the Server object */
	/* dnsdist's numbering, by order: .2, .4, .1, .3 */
	run(f, "s = getServer(2)\ns:addPool('b')\ns:addPool('b')\ns:rmPool('a')\n"
	       "s:addPool('')");
	assert_false(in_pool(cfg, "a", cfg->backends[0]));
	assert_true(in_pool(cfg, "b", cfg->backends[0]));
	assert_true(in_pool(cfg, "", cfg->backends[0]));
	assert_int_equal(cfg->backends[0]->npools, 1);
	assert_string_equal(cfg->backends[0]->pools[0], "b");
	p = dlb_config_find_pool(cfg, "b");
	assert_int_equal(p->n, 3);
	assert_ptr_equal(p->members[0], cfg->backends[3]);
	assert_ptr_equal(p->members[1], cfg->backends[0]);
	assert_ptr_equal(p->members[2], cfg->backends[2]);

	/* changing order re-sorts pools */
	run(f, "getServer(3).order = 0\nassert(getServer(3).order == 0)");
	assert_ptr_equal(p->members[0], cfg->backends[2]);

	run_fail(f, "getPool(string.rep('x', 64))", "cannot create pool");
	run_fail(f, "getServer(0):addPool(string.rep('x', 64))", "addPool");
}

/* ---- Server objects ----------------------------------------------------- */

static void
test_server_object(void **state)
{
	struct fixture *f = *state;
	struct dlb_config *cfg = f->cfg;
	struct dlb_backend *be;

	run(f, "newServer({address='192.0.2.1', name='one'})\n"
	       "newServer({address='192.0.2.2', name='two',"
	       " id='11111111-2222-4333-8444-555555555555'})\n"
	       "local s = getServer(0)\n"
	       "assert(s:isUp() and s.upStatus == true)\n"
	       "s:setDown()\n"
	       "assert(not s:isUp() and s.upStatus == false)\n"
	       "s:setUp()\nassert(s:isUp())\n"
	       "s:setAuto(false)\nassert(not s:isUp())\n"
	       "s:setAuto(true)\nassert(s:isUp())\n"
	       "s:setAuto()\n"
	       "assert(s:getName() == 'one' and s.name == 'one')\n"
	       "assert(s:getNameWithAddr() == 'one (192.0.2.1:53)')\n"
	       "assert(tostring(s) == 'one (192.0.2.1:53)')\n"
	       "assert(#s:getID() == 36)\n"
	       "s.weight = 30\ns.order = '4'\n"
	       "assert(s.weight == 30 and s.order == 4)\n"
	       "s:setQPS(50)\n"
	       "local t = getServer('11111111-2222-4333-8444-555555555555')\n"
	       "assert(t:getName() == 'two')\n"
	       "assert(getServer('00000000-0000-4000-8000-000000000000') == nil)\n"
	       "assert(getServer(0) == getServer(0) and getServer(0) ~= t)\n"
	       "local all = getServers()\n"
	       "assert(#all == 2 and all[2]:getName() == 'two')\n"
	       "assert(s.nosuchfield == nil)\n"
	       "getServer(1):setDown()");
	be = cfg->backends[0];
	assert_int_equal(be->admin, DLB_BE_AUTO);
	assert_int_equal(be->healthy, 1);
	assert_int_equal(be->weight, 30);
	assert_int_equal(be->order, 4);
	assert_int_equal(be->qps, 50);
	assert_int_equal(be->qps_limit_rt, 50);
	assert_int_equal(cfg->backends[1]->admin, DLB_BE_FORCED_DOWN);
	assert_false(dlb_backend_is_up(cfg->backends[1]));

	run_fail(f, "getServer(0).weight = 0", "test:1: weight: 0 is out of range");
	run_fail(f, "getServer(0).order = -1", "out of range");
	run_fail(f, "getServer(0).name = 'x'", "read-only");
	run_fail(f, "getServer(5)", "test:1: getServer: no server with index 5");
	run_fail(f, "getServer(0):setQPS(-1)", "setQPS");
	run_fail(f, "getServer(0).setUp(42)", "DownstreamState expected");
	assert_int_equal(be->weight, 30);
}

static void
test_rm_server(void **state)
{
	struct fixture *f = *state;
	struct dlb_config *cfg = f->cfg;

	run(f, "for i = 1, 5 do newServer({address='192.0.2.' .. i, pool={'', 'p'}}) end\n"
	       "keep = getServer(4)\n"
	       "gone = getServer(1)\n"
	       "rmServer(1)\n"
	       "assert(#getServers() == 4 and getServer(1):getName() == '192.0.2.3:53')\n"
	       "assert(keep:getName() == '192.0.2.5:53')\n"
	       "rmServer(getServer(0):getID())\n"
	       "rmServer(keep)\n"
	       "assert(#getServers() == 2)");
	assert_int_equal(cfg->nbackends, 2);
	assert_string_equal(cfg->backends[0]->addr_text, "192.0.2.3:53");
	assert_int_equal(cfg->backends[0]->index, 0);
	assert_string_equal(cfg->backends[1]->addr_text, "192.0.2.4:53");
	assert_int_equal(cfg->backends[1]->index, 1);
	assert_int_equal(dlb_config_find_pool(cfg, "")->n, 2);
	assert_int_equal(dlb_config_find_pool(cfg, "p")->n, 2);

	run_fail(f, "gone:getName()", "removed with rmServer()");
	run_fail(f, "rmServer(7)", "no server with index 7");
	run_fail(f, "rmServer('nope')", "no server with id 'nope'");

	/* at runtime the backend stays listed, leaves every pool and is forced down */
	dlb_lua_conf_set_phase(f->lc, DLB_LUA_PHASE_RUNNING);
	run(f, "rmServer(0)\nassert(#getServers() == 2)\nassert(not getServer(0):isUp())\n"
	       "assert(#getPoolServers('') == 1 and #getPoolServers('p') == 1)");
	assert_int_equal(cfg->nbackends, 2);
	assert_int_equal(cfg->backends[0]->admin, DLB_BE_FORCED_DOWN);
	assert_int_equal(cfg->backends[0]->npools, 0);
	assert_false(in_pool(cfg, "", cfg->backends[0]));
	assert_false(in_pool(cfg, "p", cfg->backends[0]));
	assert_true(in_pool(cfg, "p", cfg->backends[1]));
}

/* ---- policies ----------------------------------------------------------- */

static void
test_policies(void **state)
{
	struct fixture *f = *state;
	struct dlb_config *cfg = f->cfg;

	run(f, "out = {} print = function(s) out[#out + 1] = s end\n"
	       "assert(leastOutstanding.name == 'leastOutstanding')\n"
	       "assert(tostring(firstAvailable) == 'firstAvailable')\n"
	       "assert(roundrobin.name == 'roundrobin' and wrandom.name == 'wrandom')\n"
	       "assert(whashed.name == 'whashed' and whashed.other == nil)\n"
	       "showServerPolicy()\n"
	       "setServerPolicy(firstAvailable)\n"
	       "showServerPolicy()\n"
	       "showPoolServerPolicy('abuse')\n"
	       "setPoolServerPolicy(roundrobin, 'abuse')\n"
	       "showPoolServerPolicy('abuse')\n"
	       "assert(out[1] == 'leastOutstanding' and out[2] == 'firstAvailable')\n"
	       "assert(out[3] == 'firstAvailable' and out[4] == 'roundrobin')\n"
	       "setRoundRobinFailOnNoServer(true)\n"
	       "setWHashedPertubation(12345)");
	assert_int_equal(cfg->set.policy, DLB_POLICY_FIRST_AVAILABLE);
	assert_int_equal(dlb_config_find_pool(cfg, "abuse")->policy, DLB_POLICY_ROUNDROBIN);
	assert_int_equal(dlb_config_find_pool(cfg, "")->policy, -1);
	assert_true(cfg->set.roundrobin_fail_on_no_server);
	assert_int_equal(cfg->set.whashed_perturbation, 12345);

	run(f, "setServerPolicy(whashed)");
	assert_int_equal(cfg->set.policy, DLB_POLICY_WHASHED);
	run_fail(f, "setServerPolicy('roundrobin')", "ServerPolicy expected");
	run_fail(f, "setServerPolicy(nil)", "ServerPolicy expected");
	run_fail(f, "setPoolServerPolicy(wrandom)", "setPoolServerPolicy");
}

/* ---- settings ----------------------------------------------------------- */

static void
test_settings(void **state)
{
	struct fixture *f = *state;
	struct dlb_config *cfg = f->cfg;

	run(f, "setUDPTimeout(5)\n"
	       "setMaxUDPOutstanding(1024)\n"
	       "setServFailWhenNoServer(true)\n"
	       "setDropEmptyQueries(true)\n"
	       "setAllowEmptyResponse(true)\n"
	       "setPayloadSizeOnSelfGeneratedAnswers(1400)\n"
	       "setAddEDNSToSelfGeneratedResponses(false)\n"
	       "setTCPRecvTimeout(7)\n"
	       "setTCPSendTimeout(8)\n"
	       "setMaxTCPQueriesPerConnection(100)\n"
	       "setMaxTCPConnectionsPerClient(10)\n"
	       "setMaxTCPConnectionDuration(60)\n"
	       "setMaxTCPClientThreads(20)\n"
	       "setUDPMultipleMessagesVectorSize(32)\n"
	       "setUDPSocketBufferSizes(1048576, 2097152)\n"
	       "setVerboseHealthChecks(true)\n"
	       "setWorkerThreads(4)\n"
	       "setWorkerBlockingReceive(false)\n"
	       "setWorkerReceiveCoalescing(150)\n"
	       "setSecurityPollSuffix('')\n"
	       "setSecurityPollInterval(3600)\n"
	       "setSyslogFacility(3)\n"
	       "setSyslogFacility('local0')\n"
	       "setVerbose(true)\n"
	       "assert(getVerbose() == true)\n"
	       "setVerbose(false)\n"
	       "assert(getVerbose() == false)");
	assert_int_equal(cfg->set.udp_timeout_ms, 5000);
	assert_int_equal(cfg->max_udp_outstanding, 1024);
	assert_true(cfg->set.servfail_when_no_server);
	assert_true(cfg->set.drop_empty_queries);
	assert_true(cfg->set.allow_empty_response);
	assert_int_equal(cfg->set.selfans.payload_size, 1400);
	assert_false(cfg->set.selfans.add_edns);
	assert_int_equal(cfg->set.tcp_recv_timeout, 7);
	assert_int_equal(cfg->set.tcp_send_timeout, 8);
	assert_int_equal(cfg->max_tcp_queries_per_conn, 100);
	assert_int_equal(cfg->max_tcp_conns_per_client, 10);
	assert_int_equal(cfg->max_tcp_conn_duration, 60);
	assert_int_equal(cfg->max_tcp_client_threads, 20);
	assert_int_equal(cfg->udp_vector_size, 32);
	assert_int_equal(cfg->udp_rcvbuf, 1048576);
	assert_int_equal(cfg->udp_sndbuf, 2097152);
	assert_true(cfg->set.verbose_health_checks);
	assert_int_equal(cfg->workers, 4);
	assert_false(cfg->blocking_receive);
	assert_int_equal(cfg->recv_coalesce_us, 150);
	assert_false(cfg->verbose);

	/* fractional seconds, string numbers and booleans, payload clamping */
	run(f, "setUDPTimeout(0.5)\nsetMaxUDPOutstanding('2048')\n"
	       "setServFailWhenNoServer('false')\nsetPayloadSizeOnSelfGeneratedAnswers(100)");
	assert_int_equal(cfg->set.udp_timeout_ms, 500);
	assert_int_equal(cfg->max_udp_outstanding, 2048);
	assert_false(cfg->set.servfail_when_no_server);
	assert_int_equal(cfg->set.selfans.payload_size, 512);
	run(f, "setPayloadSizeOnSelfGeneratedAnswers(100000)\nsetWorkerThreads(0)");
	assert_int_equal(cfg->set.selfans.payload_size, 1500);	/* dnsdist 1.7's cap */
	assert_int_equal(cfg->workers, 0);

	run_fail(f, "setMaxUDPOutstanding(0)", "test:1: setMaxUDPOutstanding: 0 is out of range");
	run_fail(f, "setMaxUDPOutstanding(65536)", "out of range");
	run_fail(f, "setUDPMultipleMessagesVectorSize(65)", "out of range");
	run(f, "setUDPMultipleMessagesVectorSize(0)");	/* dnsdist: 0 and 1 are off */
	assert_int_equal(f->cfg->udp_vector_size, 1);
	run_fail(f, "setUDPMultipleMessagesVectorSize(-1)", "out of range");
	run_fail(f, "setWorkerThreads(65)", "out of range");
	run_fail(f, "setWorkerReceiveCoalescing(1001)",
		 "test:1: setWorkerReceiveCoalescing: 1001 is out of range (0..1000)");
	run_fail(f, "setWorkerReceiveCoalescing(-1)", "out of range");
	run_fail(f, "setWorkerReceiveCoalescing('x')", "argument #1 must be an integer");
	run_fail(f, "setUDPTimeout(0)", "setUDPTimeout");
	run_fail(f, "setUDPTimeout('x')", "setUDPTimeout");
	run_fail(f, "setServFailWhenNoServer(1)", "must be a boolean");
	run_fail(f, "setTCPRecvTimeout(-1)", "out of range");
	run_fail(f, "setUDPSocketBufferSizes(1)", "argument #2 must be an integer");
	run_fail(f, "setSyslogFacility({})", "setSyslogFacility");
	assert_int_equal(cfg->max_udp_outstanding, 2048);
}

static void
test_constants(void **state)
{
	struct fixture *f = *state;

	run(f, "assert(DNSQType.A == 1 and DNSQType.NS == 2 and DNSQType.CNAME == 5)\n"
	       "assert(DNSQType.SOA == 6 and DNSQType.PTR == 12 and DNSQType.MX == 15)\n"
	       "assert(DNSQType.TXT == 16 and DNSQType.AAAA == 28 and DNSQType.SRV == 33)\n"
	       "assert(DNSQType.NAPTR == 35 and DNSQType.OPT == 41 and DNSQType.DS == 43)\n"
	       "assert(DNSQType.RRSIG == 46 and DNSQType.NSEC == 47 and DNSQType.DNSKEY == 48)\n"
	       "assert(DNSQType.NSEC3 == 50 and DNSQType.TLSA == 52 and DNSQType.CDS == 59)\n"
	       "assert(DNSQType.CDNSKEY == 60 and DNSQType.SVCB == 64 and DNSQType.HTTPS == 65)\n"
	       "assert(DNSQType.SPF == 99 and DNSQType.IXFR == 251 and DNSQType.AXFR == 252)\n"
	       "assert(DNSQType.ANY == 255 and DNSQType.CAA == 257)\n"
	       "assert(DNSClass.IN == 1 and DNSClass.CHAOS == 3 and DNSClass.NONE == 254"
	       " and DNSClass.ANY == 255)\n"
	       "assert(DNSRCode.NOERROR == 0 and DNSRCode.SERVFAIL == 2)\n"
	       "assert(DNSRCode.NXDOMAIN == 3 and DNSRCode.REFUSED == 5)\n"
	       "assert(DNSRCode.NOTZONE == 10 and DNSRCode.BADVERS == 16)\n"
	       "assert(DNSRCode.BADCOOKIE == 23)\n"
	       "assert(DNSOpcode.Query == 0 and DNSOpcode.IQuery == 1 and DNSOpcode.Status == 2)\n"
	       "assert(DNSOpcode.Notify == 4 and DNSOpcode.Update == 5)\n"
	       "assert(DNSSection.Question == 0 and DNSSection.Answer == 1)\n"
	       "assert(DNSSection.Authority == 2 and DNSSection.Additional == 3)\n"
	       "assert(DNSAction.Drop == 0 and DNSAction.Nxdomain == 1)\n"
	       "assert(DNSAction.Refused == 2 and DNSAction.Spoof == 3)\n"
	       "assert(DNSAction.Allow == 4 and DNSAction.HeaderModify == 5)\n"
	       "assert(DNSAction.Pool == 6 and DNSAction.Delay == 7 and DNSAction.Truncate == 8)\n"
	       "assert(DNSAction.ServFail == 9 and DNSAction.None == 10 and DNSAction.NoOp == 11)\n"
	       "assert(DNSAction.NoRecurse == 12 and DNSAction.SpoofRaw == 13)\n"
	       "assert(DNSAction.SpoofPacket == 14 and DNSAction.SetTag == 15)\n"
	       "assert(DNSResponseAction.Allow == 0 and DNSResponseAction.Delay == 1)\n"
	       "assert(DNSResponseAction.Drop == 2 and DNSResponseAction.HeaderModify == 3)\n"
	       "assert(DNSResponseAction.ServFail == 4 and DNSResponseAction.None == 5)\n"
	       "assert(EDNSOptionCode.NSID == 3 and EDNSOptionCode.ECS == 8)\n"
	       "assert(EDNSOptionCode.COOKIE == 10 and EDNSOptionCode.PADDING == 12)\n"
	       "assert(EDNSOptionCode.KEYTAG == 14)\n"
	       "assert(dnsdist == nil)");
}

static void
test_libraries(void **state)
{
	struct fixture *f = *state;

	/* every standard library, as dnsdist's config state has */
	run(f, "assert(type(io.open) == 'function' and type(require) == 'function')\n"
	       "assert(type(package.path) == 'string' and type(coroutine.wrap) == 'function')\n"
	       "assert(type(os.execute) == 'function' and type(debug.traceback) == 'function')\n"
	       "assert(unpack == table.unpack and loadstring == load and table.getn({1, 2}) == 2)\n"
	       "assert(bit.band(0xff, 0x0f) == 15 and require('bit') == bit)\n"
	       "assert(type(require('ffi').C.dnsdist_ffi_dnsquestion_get_qtype) == 'function')\n"
	       "assert(type(os.getenv('PATH')) == 'string')\n"
	       "assert(type(os.time()) == 'number' and type(os.date('%Y')) == 'string')\n"
	       "assert(string.format('%d', 3) == '3' and math.max(1, 2) == 2)\n"
	       "assert(utf8.char(72) == 'H' and table.concat({'a', 'b'}) == 'ab')\n"
	       "out = {} print = function(s) out[#out + 1] = s end\n"
	       "showVersion()\n"
	       "assert(out[1]:match('^dnsdist 1%.7%.3 %(dnslb '))\n"
	       "infolog('info from test')\nwarnlog('warning from test')\n"
	       "errlog('error from test')");
	run_fail(f, "infolog()", "bad argument #1 to 'infolog'");
}

/* ---- includeDirectory, getResolvers, files ------------------------------ */

static void
test_include_directory(void **state)
{
	struct fixture *f = *state;
	char dir[] = "/tmp/dlb_test_incXXXXXX";
	char path[256], code[512], expect[400];

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/20-second.conf", dir);
	write_file(path, "newServer({address='192.0.2.2', name='second'})\n");
	snprintf(path, sizeof(path), "%s/10-first.conf", dir);
	write_file(path, "-- first\nnewServer({address='192.0.2.1', name='first'})\n"
			 "setServerPolicy(roundrobin)\n");
	snprintf(path, sizeof(path), "%s/.hidden.conf", dir);
	write_file(path, "newServer('192.0.2.99')\n");
	snprintf(path, sizeof(path), "%s/notes.txt", dir);
	write_file(path, "this is not Lua\n");
	snprintf(path, sizeof(path), "%s/sub.conf", dir);
	assert_int_equal(mkdir(path, 0700), 0);

	snprintf(code, sizeof(code), "includeDirectory('%s')", dir);
	run(f, code);
	assert_int_equal(f->cfg->nbackends, 2);
	assert_string_equal(f->cfg->backends[0]->name, "first");
	assert_string_equal(f->cfg->backends[1]->name, "second");
	assert_int_equal(f->cfg->set.policy, DLB_POLICY_ROUNDROBIN);

	/* an error in an included file carries that file's name and line */
	snprintf(path, sizeof(path), "%s/30-bad.conf", dir);
	write_file(path, "\n\nnewServer('127.0.0.355')\n");
	snprintf(expect, sizeof(expect), "%s:3: newServer: invalid address", path);
	run_fail(f, code, expect);
	unlink(path);

	/* a syntax error too */
	write_file(path, "newServer(\n");
	snprintf(expect, sizeof(expect), "%s:2:", path);
	run_fail(f, code, expect);
	unlink(path);

	/* no recursion */
	snprintf(path, sizeof(path), "%s/40-rec.conf", dir);
	snprintf(code, sizeof(code), "includeDirectory('%s')", dir);
	write_file(path, code);
	snprintf(expect, sizeof(expect), "%s:1: includeDirectory() cannot be used recursively",
		 path);
	run_fail(f, code, expect);
	unlink(path);

	/* the flag was reset: it works again (each failed run above had loaded 2 servers) */
	snprintf(code, sizeof(code), "includeDirectory('%s/')", dir);
	run(f, code);
	assert_int_equal(f->cfg->nbackends, 10);

	/* as dnsdist: logged, nothing included */
	run(f, "includeDirectory('/nonexistent/dnslb-test')");
	assert_int_equal(f->cfg->nbackends, 10);

	snprintf(path, sizeof(path), "%s/sub.conf", dir);
	rmdir(path);
	snprintf(path, sizeof(path), "%s/10-first.conf", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/20-second.conf", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/.hidden.conf", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/notes.txt", dir);
	unlink(path);
	assert_int_equal(rmdir(dir), 0);
}

static void
test_get_resolvers(void **state)
{
	struct fixture *f = *state;
	char path[] = "/tmp/dlb_test_resolvXXXXXX";
	char code[512];
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	close(fd);
	write_file(path, "# generated\n"
			 "search example.com\n"
			 "nameserver 192.0.2.53\n"
			 "; nameserver 192.0.2.54\n"
			 "#nameserver 192.0.2.55\n"
			 "  nameserver\t2001:db8::53   # trailing comment\n"
			 "nameserver fe80::1%eth0\n"
			 "nameserver not-an-address\n"
			 "nameserver\n"
			 "options edns0\n"
			 "nameserver 198.51.100.53\n");
	snprintf(code, sizeof(code),
		 "local r = getResolvers('%s')\n"
		 "assert(#r == 3, #r)\n"
		 "assert(r[1] == '192.0.2.53' and r[2] == '2001:db8::53')\n"
		 "assert(r[3] == '198.51.100.53')\n"
		 "for _, a in ipairs(r) do newServer(a) end\n"
		 "assert(#getResolvers('/nonexistent/resolv.conf') == 0)", path);
	run(f, code);
	assert_int_equal(f->cfg->nbackends, 3);
	assert_string_equal(f->cfg->backends[1]->addr_text, "[2001:db8::53]:53");
	unlink(path);
}

static void
test_load_file_errors(void **state)
{
	struct fixture *f = *state;
	char path[] = "/tmp/dlb_test_confXXXXXX";
	char expect[300];
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	close(fd);

	write_file(path, "setLocal('127.0.0.1:5300')\n\n"
			 "newServer({address = '192.0.2.1' weight = 3})\n");
	assert_int_equal(dlb_lua_conf_load_file(f->lc, path, f->err, sizeof(f->err)), -1);
	snprintf(expect, sizeof(expect), "%s:3: '}' expected", path);
	if (strncmp(f->err, expect, strlen(expect)) != 0)
		fail_msg("'%s' does not start with '%s'", f->err, expect);

	write_file(path, "setLocal('127.0.0.1:5300')\n"
			 "newServer({address='192.0.2.1', qps=-5})\n");
	assert_int_equal(dlb_lua_conf_load_file(f->lc, path, f->err, sizeof(f->err)), -1);
	snprintf(expect, sizeof(expect),
		 "%s:2: newServer: 'qps' is out of range (0..2147483647)", path);
	assert_string_equal(f->err, expect);

	write_file(path, "setLocal('127.0.0.1:5300')\nnewServer('192.0.2.1')\n");
	assert_int_equal(dlb_lua_conf_load_file(f->lc, path, f->err, sizeof(f->err)), 0);
	assert_int_equal(f->cfg->nbackends, 1);
	assert_int_equal(f->cfg->nfrontends, 1);
	unlink(path);

	assert_int_equal(dlb_lua_conf_load_file(f->lc, "/nonexistent/dnslb.conf", f->err,
						sizeof(f->err)), -1);
	assert_non_null(strstr(f->err, "cannot open"));

	/* a non-string error object and a NULL err buffer */
	assert_int_equal(dlb_lua_conf_load_string(f->lc, "error({})", "=t", f->err,
						  sizeof(f->err)), -1);
	assert_int_equal(dlb_lua_conf_load_string(f->lc, "error('x')", "=t", NULL, 0), -1);
}

/* ---- phases ------------------------------------------------------------- */

static void
test_runtime_phase(void **state)
{
	static const char *const config_only[] = {
		"setLocal('127.0.0.1')", "addLocal('127.0.0.1')", "setMaxUDPOutstanding(10)",
		"setMaxTCPQueriesPerConnection(1)", "setMaxTCPConnectionsPerClient(1)",
		"setMaxTCPConnectionDuration(1)", "setMaxTCPClientThreads(1)",
		"setUDPMultipleMessagesVectorSize(1)", "setUDPSocketBufferSizes(1, 1)",
		"includeDirectory('/tmp')", "setSecurityPollSuffix('')", "setSyslogFacility(1)",
		"setWorkerThreads(1)", "setWorkerBlockingReceive(false)",
		"setWorkerReceiveCoalescing(100)",
	};
	struct fixture *f = *state;

	dlb_lua_conf_set_phase(f->lc, DLB_LUA_PHASE_RUNNING);
	for (size_t i = 0; i < sizeof(config_only) / sizeof(config_only[0]); i++) {
		char expect[128];
		size_t n = strcspn(config_only[i], "(");

		snprintf(expect, sizeof(expect), "test:1: %.*s cannot be altered at runtime",
			 (int)n, config_only[i]);
		run_fail(f, config_only[i], expect);
	}
	assert_int_equal(f->cfg->nfrontends, 0);
	assert_int_equal(f->cfg->max_udp_outstanding, 65535);

	/* without running workers a runtime newServer is attached as at config time
	 * (the daemon's path is tested end to end in test_runtime_servers.py) */
	run(f, "newServer('192.0.2.1')");
	assert_int_equal(f->cfg->nbackends, 1);

	/* what dnsdist allows at runtime still works */
	run(f, "getServer(0):setDown()\nsetServerPolicy(wrandom)\n"
	       "addACL('192.0.2.0/24')\nsetUDPTimeout(3)\nsetServFailWhenNoServer(true)");
	assert_int_equal(f->cfg->nbackends, 1);
	assert_int_equal(f->cfg->set.policy, DLB_POLICY_WRANDOM);
	assert_int_equal(f->cfg->set.udp_timeout_ms, 3000);

	/* --check-config behaves as config time */
	dlb_lua_conf_set_phase(f->lc, DLB_LUA_PHASE_CHECK);
	run(f, "setLocal('127.0.0.1:5300')");
	assert_int_equal(f->cfg->nfrontends, 1);
}

/* ---- config.c directly -------------------------------------------------- */

static void
test_config_api(void **state)
{
	struct fixture *f = *state;
	struct dlb_config *cfg = f->cfg;
	struct dlb_frontend_cfg fe;
	struct dlb_backend *be;
	socklen_t len;

	memset(&fe, 0, sizeof(fe));
	assert_int_equal(dlb_sockaddr_parse("127.0.0.1:1", 53, &fe.addr, &len), 0);
	fe.addrlen = len;
	for (int i = 0; i < DLB_MAX_FRONTENDS; i++) {
		((struct sockaddr_in *)&fe.addr)->sin_port = htons((uint16_t)(1000 + i));
		fe.text[0] = '\0';
		assert_int_equal(dlb_config_add_frontend(cfg, &fe), 0);
	}
	assert_string_equal(cfg->frontends[0].text, "127.0.0.1:1000");
	((struct sockaddr_in *)&fe.addr)->sin_port = htons(999);
	assert_int_equal(dlb_config_add_frontend(cfg, &fe), -1);
	((struct sockaddr_in *)&fe.addr)->sin_port = htons(1000);
	assert_int_equal(dlb_config_add_frontend(cfg, &fe), 0);	/* merged */

	for (int i = 0; i < DLB_MAX_BACKENDS; i++) {
		be = dlb_backend_new();
		assert_non_null(be);
		assert_int_equal(dlb_sockaddr_parse("192.0.2.1", 53, &be->addr, &len), 0);
		be->addrlen = len;
		assert_int_equal(dlb_config_add_backend(cfg, be), 0);
	}
	be = dlb_backend_new();
	assert_int_equal(dlb_config_add_backend(cfg, be), -1);
	free(be);
	assert_int_equal(cfg->backends[255]->index, 255);
	assert_string_equal(cfg->backends[0]->name, "192.0.2.1:53");
	assert_int_equal(dlb_config_find_pool(cfg, "")->n, DLB_MAX_BACKENDS);
	run_fail(f, "newServer('192.0.2.1')", "too many servers");

	assert_int_equal(dlb_config_remove_backend(cfg, 300), -1);
	assert_int_equal(dlb_config_remove_backend(cfg, 0), 0);
	assert_int_equal(cfg->nbackends, DLB_MAX_BACKENDS - 1);
	assert_int_equal(cfg->backends[0]->index, 0);

	for (int i = cfg->npools; i < DLB_MAX_POOLS; i++) {
		char name[16];

		snprintf(name, sizeof(name), "p%d", i);
		assert_non_null(dlb_config_get_pool(cfg, name));
	}
	assert_null(dlb_config_get_pool(cfg, "one-too-many"));
	assert_non_null(dlb_config_get_pool(cfg, "p5"));

	be = cfg->backends[0];
	for (int i = 0; i < DLB_MAX_POOLS_PER_BACKEND; i++) {
		char name[16];

		snprintf(name, sizeof(name), "p%d", i + 10);
		assert_int_equal(dlb_config_pool_add(cfg, name, be), 0);
	}
	assert_int_equal(dlb_config_pool_add(cfg, "p30", be), -1);
	assert_int_equal(dlb_config_pool_add(cfg, "p10", be), 0);	/* already in */
	dlb_config_pool_remove(cfg, "p10", be);
	assert_int_equal(be->npools, DLB_MAX_POOLS_PER_BACKEND - 1);
	assert_false(in_pool(cfg, "p10", be));
	dlb_config_pool_remove(cfg, "nonexistent", be);
}

/* ---- packet caches ------------------------------------------------------ */

/*
 * Put a NOERROR answer (one record of @qtype, TTL @ttl, received at @now)
 * for the wire name @wire into @c, as a worker would after a backend reply.
 */
static void
cache_put(struct fixture *f, struct dlb_cache *c, const char *wire, uint16_t qtype, uint32_t ttl,
	  double now)
{
	static const uint8_t hdr[DLB_DNS_HDR] = { 0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0 };
	size_t wlen = strlen(wire) + 1, qlen = 0, alen;
	uint8_t q[300], a[350];
	struct dlb_dnsmsg m;
	struct dlb_cache_key k;
	const uint8_t rr[] = {
		0xc0, 0x0c, (uint8_t)(qtype >> 8), (uint8_t)qtype, 0, 1,
		(uint8_t)(ttl >> 24), (uint8_t)(ttl >> 16), (uint8_t)(ttl >> 8), (uint8_t)ttl,
		0, 4, 3, 'a', 'b', 'c',		/* fits A (192.0.2.1 would do) and TXT */
	};

	memcpy(q, hdr, sizeof(hdr));
	qlen = sizeof(hdr);
	memcpy(q + qlen, wire, wlen);
	qlen += wlen;
	q[qlen++] = (uint8_t)(qtype >> 8);
	q[qlen++] = (uint8_t)qtype;
	q[qlen++] = 0;
	q[qlen++] = 1;
	assert_int_equal(dlb_wire_parse_query(q, qlen, &m), DLB_OK);
	assert_int_equal(dlb_cache_key_make(c, q, &m, false, &k), 0);

	memcpy(a, q, qlen);
	a[2] = 0x81;	/* QR, RD */
	a[3] = 0x80;	/* RA, NOERROR */
	a[7] = 1;	/* ancount */
	alen = qlen;
	memcpy(a + alen, rr, sizeof(rr));
	alen += sizeof(rr);
	assert_true(dlb_cache_insert(c, &f->rt, &k, a, alen, now, -1));
}

static void
test_cache_settings(void **state)
{
	struct fixture *f = *state;
	struct dlb_config *cfg = f->cfg;

	assert_int_equal(cfg->set.cache_cleaning_delay, 60);
	assert_int_equal(cfg->set.cache_cleaning_pct, 100);
	assert_int_equal(cfg->set.stale_cache_ttl, 0);
	assert_false(cfg->set.stale_on_timeout);
	assert_int_equal(cfg->ncaches, 0);

	run(f, "setStaleCacheEntriesTTL(600)\n"
	       "setServeStaleOnTimeout(true)\n"
	       "setCacheCleaningDelay('30')\n"
	       "setCacheCleaningPercentage(20)");
	assert_int_equal(cfg->set.stale_cache_ttl, 600);
	assert_true(cfg->set.stale_on_timeout);
	assert_int_equal(cfg->set.cache_cleaning_delay, 30);
	assert_int_equal(cfg->set.cache_cleaning_pct, 20);

	run(f, "setStaleCacheEntriesTTL(0)\nsetServeStaleOnTimeout(false)\n"
	       "setCacheCleaningPercentage(0)\nsetCacheCleaningPercentage(100)");
	assert_int_equal(cfg->set.stale_cache_ttl, 0);
	assert_false(cfg->set.stale_on_timeout);
	assert_int_equal(cfg->set.cache_cleaning_pct, 100);

	run_fail(f, "\nsetStaleCacheEntriesTTL(-1)",
		 "test:2: setStaleCacheEntriesTTL: -1 is out of range");
	run_fail(f, "setStaleCacheEntriesTTL(4294967296)", "out of range");
	run_fail(f, "setServeStaleOnTimeout(1)", "setServeStaleOnTimeout: argument #1 must be a "
		 "boolean");
	run_fail(f, "setCacheCleaningDelay(0)", "setCacheCleaningDelay: 0 is out of range");
	run_fail(f, "setCacheCleaningPercentage(101)", "setCacheCleaningPercentage: 101 is out of "
		 "range (0..100)");
	run_fail(f, "setCacheCleaningPercentage('x')", "must be an integer");
	assert_int_equal(cfg->set.cache_cleaning_delay, 30);
	assert_int_equal(cfg->set.cache_cleaning_pct, 100);

	/* all of them may change at runtime */
	dlb_lua_conf_set_phase(f->lc, DLB_LUA_PHASE_RUNNING);
	run(f, "setStaleCacheEntriesTTL(5)\nsetServeStaleOnTimeout(true)\n"
	       "setCacheCleaningDelay(10)\nsetCacheCleaningPercentage(50)");
	assert_int_equal(cfg->set.stale_cache_ttl, 5);
	assert_int_equal(cfg->set.cache_cleaning_delay, 10);
	assert_int_equal(cfg->set.cache_cleaning_pct, 50);
}

static void
test_cache_new_defaults(void **state)
{
	struct fixture *f = *state;
	struct dlb_config *cfg = f->cfg;
	const struct dlb_cache_opts *o;

	run(f, "pc = newPacketCache(10000)\n"
	       "assert(tostring(pc) == '0/10000' and pc:toString() == '0/10000')\n"
	       "assert(pc:isFull() == false)");
	assert_int_equal(cfg->ncaches, 1);
	o = dlb_cache_get_opts(cfg->caches[0]);
	assert_int_equal(o->max_entries, 10000);
	assert_int_equal(o->max_bytes, 0);
	assert_int_equal(o->max_ttl, 86400);
	assert_int_equal(o->min_ttl, 0);
	assert_int_equal(o->temp_failure_ttl, 60);
	assert_int_equal(o->max_negative_ttl, 3600);
	assert_int_equal(o->stale_ttl, 60);
	assert_false(o->dont_age);
	assert_int_equal(o->shards, 32);	/* dnsdist's 20, rounded up to a power of 2 */
	assert_false(o->keep_stale_data);
	assert_false(o->parse_ecs);
	assert_false(o->cookie_hashing);
	assert_int_equal(o->nskip, 0);
	assert_int_equal(o->maximum_entry_size, 4096);
	assert_int_equal(o->nranks, 0);
	assert_true(o->prefetch == 0);
	assert_true(o->deferrable_insert_lock);

	/* fewer entries than shards: the shards shrink (dnsdist warns and does the same) */
	run(f, "newPacketCache(3)\nnewPacketCache(1, {numberOfShards=8})");
	assert_int_equal(cfg->ncaches, 3);
	assert_true(dlb_cache_get_opts(cfg->caches[1])->shards <= 3);
	assert_int_equal(dlb_cache_get_opts(cfg->caches[2])->shards, 1);
	/* an empty table and a nil table are the defaults */
	run(f, "newPacketCache(100, {})\nnewPacketCache(100, nil)\nnewPacketCache('100')");
	assert_int_equal(cfg->ncaches, 6);
	assert_int_equal(dlb_cache_get_opts(cfg->caches[5])->max_entries, 100);
	assert_int_equal(dlb_cache_get_opts(cfg->caches[4])->max_ttl, 86400);
}

static void
test_cache_new_options(void **state)
{
	struct fixture *f = *state;
	struct dlb_config *cfg = f->cfg;
	const struct dlb_cache_opts *o;

	run(f, "pc = newPacketCache(5000, {maxTTL=3600, minTTL='5', temporaryFailureTTL=10,\n"
	       "  maxNegativeTTL=300, staleTTL=30, dontAge=true, numberOfShards=4,\n"
	       "  keepStaleData=true, parseECS='true', cookieHashing=true,\n"
	       "  skipOptions={EDNSOptionCode.NSID, 65001, 3}, maximumEntrySize=1500,\n"
	       "  deferrableInsertLock=false, maxMemory='64M',\n"
	       "  payloadRanks={4096, 512, 1232, 1232},\n"
	       "  prefetch=0.1, someFutureOption=1})\n"
	       "assert(tostring(pc) == '0/5000')");
	assert_int_equal(cfg->ncaches, 1);
	o = dlb_cache_get_opts(cfg->caches[0]);
	assert_int_equal(o->max_entries, 5000);
	assert_int_equal(o->max_ttl, 3600);
	assert_int_equal(o->min_ttl, 5);
	assert_int_equal(o->temp_failure_ttl, 10);
	assert_int_equal(o->max_negative_ttl, 300);
	assert_int_equal(o->stale_ttl, 30);
	assert_true(o->dont_age);
	assert_int_equal(o->shards, 4);
	assert_true(o->keep_stale_data);
	assert_true(o->parse_ecs);
	assert_true(o->cookie_hashing);
	assert_int_equal(o->nskip, 2);		/* duplicates dropped */
	assert_int_equal(o->skip_options[0], 3);
	assert_int_equal(o->skip_options[1], 65001);
	assert_int_equal(o->maximum_entry_size, 1500);
	assert_false(o->deferrable_insert_lock);
	assert_int_equal(o->max_bytes, 64ull * 1024 * 1024);
	assert_int_equal(o->nranks, 3);		/* sorted, duplicates dropped */
	assert_int_equal(o->payload_ranks[0], 512);
	assert_int_equal(o->payload_ranks[1], 1232);
	assert_int_equal(o->payload_ranks[2], 4096);
	assert_true(o->prefetch > 0.0999 && o->prefetch < 0.1001);

	/* maxMemory forms; minTTL above maxTTL is accepted, as in dnsdist */
	run(f, "newPacketCache(10, {maxMemory=1048576})\n"
	       "newPacketCache(10, {maxMemory='512k'})\n"
	       "newPacketCache(10, {maxMemory='2G'})\n"
	       "newPacketCache(10, {maxMemory='4096'})\n"
	       "newPacketCache(10, {maxMemory=0, minTTL=100, maxTTL=10, prefetch='0.5'})");
	assert_int_equal(dlb_cache_get_opts(cfg->caches[1])->max_bytes, 1048576);
	assert_int_equal(dlb_cache_get_opts(cfg->caches[2])->max_bytes, 512 * 1024);
	assert_int_equal(dlb_cache_get_opts(cfg->caches[3])->max_bytes, 2ull << 30);
	assert_int_equal(dlb_cache_get_opts(cfg->caches[4])->max_bytes, 4096);
	o = dlb_cache_get_opts(cfg->caches[5]);
	assert_int_equal(o->max_bytes, 0);
	assert_int_equal(o->min_ttl, 100);
	assert_int_equal(o->max_ttl, 10);
	assert_true(o->prefetch == 0.5);
}

static void
test_cache_new_positional(void **state)
{
	struct fixture *f = *state;
	struct dlb_config *cfg = f->cfg;
	const struct dlb_cache_opts *o;

	/* maxEntries, maxTTL, minTTL, temporaryFailureTTL, staleTTL, dontAge,
	 * numberOfShards, deferrableInsertLock, maxNegativeTTL, parseECS */
	run(f, "newPacketCache(1000, 600, 2, 30, 15, true, 2, false, 120, true)\n"
	       "newPacketCache(1000, 86400, 1)\n"
	       "newPacketCache(1000, nil, 7, nil, nil, 'true')");
	assert_int_equal(cfg->ncaches, 3);
	o = dlb_cache_get_opts(cfg->caches[0]);
	assert_int_equal(o->max_entries, 1000);
	assert_int_equal(o->max_ttl, 600);
	assert_int_equal(o->min_ttl, 2);
	assert_int_equal(o->temp_failure_ttl, 30);
	assert_int_equal(o->stale_ttl, 15);
	assert_true(o->dont_age);
	assert_int_equal(o->shards, 2);
	assert_false(o->deferrable_insert_lock);
	assert_int_equal(o->max_negative_ttl, 120);
	assert_true(o->parse_ecs);

	o = dlb_cache_get_opts(cfg->caches[1]);
	assert_int_equal(o->min_ttl, 1);
	assert_int_equal(o->temp_failure_ttl, 60);
	assert_false(o->dont_age);

	o = dlb_cache_get_opts(cfg->caches[2]);
	assert_int_equal(o->max_ttl, 86400);
	assert_int_equal(o->min_ttl, 7);
	assert_true(o->dont_age);

	run_fail(f, "\n\nnewPacketCache(10, -5)",
		 "test:3: newPacketCache: 'maxTTL' (argument #2) is out of range (0..4294967295)");
	run_fail(f, "newPacketCache(10, 1, 0, 1, 1, 'yes')",
		 "test:1: newPacketCache: 'dontAge' (argument #6) must be a boolean");
	run_fail(f, "newPacketCache(10, 1, 0, 1, 1, true, 0)",
		 "'numberOfShards' (argument #7) is out of range");
	run_fail(f, "newPacketCache(10, 1, 0, 1, 1, true, 1, true, 1, false, 1)",
		 "newPacketCache: at most 10 arguments");
	assert_int_equal(cfg->ncaches, 3);
}

static void
test_cache_new_invalid(void **state)
{
	static const struct {
		const char *code, *expect;
	} bad[] = {
		{ "newPacketCache()", "maxEntries must be an integer" },
		{ "newPacketCache(0)", "maxEntries is out of range (1..4294967295)" },
		{ "newPacketCache(-1)", "maxEntries is out of range" },
		{ "newPacketCache(1.5)", "maxEntries must be an integer" },
		{ "newPacketCache('many')", "maxEntries must be an integer" },
		{ "newPacketCache(4294967296)", "maxEntries is out of range" },
		{ "newPacketCache(10, {maxTTL=-1})",
		  "'maxTTL' is out of range (0..4294967295)" },
		{ "newPacketCache(10, {minTTL='abc'})", "'minTTL' must be an integer" },
		{ "newPacketCache(10, {temporaryFailureTTL=-60})",
		  "'temporaryFailureTTL' is out of range" },
		{ "newPacketCache(10, {maxNegativeTTL=1e10})", "'maxNegativeTTL' is out of range" },
		{ "newPacketCache(10, {staleTTL={}})", "'staleTTL' must be an integer" },
		{ "newPacketCache(10, {dontAge=1})", "'dontAge' must be a boolean" },
		{ "newPacketCache(10, {keepStaleData='yes'})", "'keepStaleData' must be a boolean" },
		{ "newPacketCache(10, {numberOfShards=0})",
		  "'numberOfShards' is out of range (1..1024)" },
		{ "newPacketCache(10, {maximumEntrySize=11})",
		  "'maximumEntrySize' is out of range (12..65535)" },
		{ "newPacketCache(10, {maximumEntrySize=65536})", "'maximumEntrySize' is out of range" },
		{ "newPacketCache(10, {skipOptions=10})", "'skipOptions' must be a table" },
		{ "newPacketCache(10, {skipOptions={70000}})",
		  "'skipOptions' entry is out of range (0..65535)" },
		{ "newPacketCache(10, {skipOptions={'COOKIE'}})",
		  "'skipOptions' entry must be an integer" },
		{ "newPacketCache(10, {skipOptions={1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17}})",
		  "at most 16 codes in 'skipOptions'" },
		{ "newPacketCache(10, {payloadRanks=1232})", "'payloadRanks' must be a table" },
		{ "newPacketCache(10, {payloadRanks={100, 1232}})",
		  "'payloadRanks' entry is out of range (512..65535)" },
		{ "newPacketCache(10, {payloadRanks={512, 70000}})", "'payloadRanks' entry is out of" },
		{ "newPacketCache(10, {payloadRanks={512,600,700,800,900,1000,1100,1200,1300}})",
		  "at most 8 sizes in 'payloadRanks'" },
		{ "newPacketCache(10, {maxMemory='64X'})", "'maxMemory' must be a number of bytes" },
		{ "newPacketCache(10, {maxMemory='M'})", "'maxMemory' must be a number of bytes" },
		{ "newPacketCache(10, {maxMemory='64MB'})", "'maxMemory' must be a number of bytes" },
		{ "newPacketCache(10, {maxMemory=-1})", "'maxMemory' must be a number of bytes" },
		{ "newPacketCache(10, {maxMemory=1.5})", "'maxMemory' must be a number of bytes" },
		{ "newPacketCache(10, {maxMemory=true})", "'maxMemory' must be a number of bytes" },
		{ "newPacketCache(10, {maxMemory='99999999999999999999G'})", "'maxMemory'" },
		{ "newPacketCache(10, {prefetch=1})", "'prefetch' must be a fraction of the TTL" },
		{ "newPacketCache(10, {prefetch=-0.1})", "'prefetch' must be a fraction" },
		{ "newPacketCache(10, {prefetch='soon'})", "'prefetch' must be a fraction" },
		{ "newPacketCache(10, {prefetch=0/0})", "'prefetch' must be a fraction" },
		{ "newPacketCache(10, {}, 5)", "newPacketCache: expected (maxEntries, {options})" },
	};
	struct fixture *f = *state;
	char code[256], expect[256];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		/* every error carries the caller's line */
		snprintf(code, sizeof(code), "local x = 1\n\n%s", bad[i].code);
		run_fail(f, code, bad[i].expect);
		snprintf(expect, sizeof(expect), "test:3: newPacketCache: ");
		run_fail(f, code, expect);
	}
	assert_int_equal(f->cfg->ncaches, 0);
}

static void
test_cache_too_many(void **state)
{
	struct fixture *f = *state;
	int max = (int)(sizeof(f->cfg->caches) / sizeof(f->cfg->caches[0]));
	char code[128], expect[128];

	snprintf(code, sizeof(code), "for i = 1, %d do newPacketCache(10) end", max);
	run(f, code);
	assert_int_equal(f->cfg->ncaches, max);
	snprintf(expect, sizeof(expect), "test:1: newPacketCache: too many packet caches "
		 "(at most %d)", max);
	run_fail(f, "newPacketCache(10)", expect);
	assert_int_equal(f->cfg->ncaches, max);
}

static void
test_pool_cache(void **state)
{
	struct fixture *f = *state;
	struct dlb_config *cfg = f->cfg;

	run(f, "pc = newPacketCache(100)\n"
	       "other = newPacketCache(200)\n"
	       "p = getPool('')\n"
	       "assert(p:getCache() == nil)\n"
	       "p:setCache(pc)\n"
	       "assert(p:getCache() == pc and rawequal(getPool(''):getCache(), pc))\n"
	       "getPool('abuse'):setCache(pc)\n"		/* one cache, two pools */
	       "assert(rawequal(getPool('abuse'):getCache(), pc))\n"
	       "assert(getPool('abuse'):getCache():toString() == '0/100')\n"
	       "getPool('slow'):setCache(other)\n"
	       "getPool('slow'):unsetCache()\n"
	       "assert(getPool('slow'):getCache() == nil)\n"
	       "getPool('slow'):unsetCache()");
	assert_int_equal(cfg->ncaches, 2);
	assert_ptr_equal(dlb_config_find_pool(cfg, "")->cache, cfg->caches[0]);
	assert_ptr_equal(dlb_config_find_pool(cfg, "abuse")->cache, cfg->caches[0]);
	assert_null(dlb_config_find_pool(cfg, "slow")->cache);

	run_fail(f, "\ngetPool(''):setCache('pc')", "test:2: bad argument #1 to 'setCache' "
		 "(PacketCache expected, got string)");
	run_fail(f, "getPool(''):setCache()", "PacketCache expected");
	run_fail(f, "getPool(''):setCache(getPool('x'))", "PacketCache expected");
	assert_ptr_equal(dlb_config_find_pool(cfg, "")->cache, cfg->caches[0]);

	/* the console may swap caches; the old one stays allocated until exit */
	dlb_lua_conf_set_phase(f->lc, DLB_LUA_PHASE_RUNNING);
	run(f, "getPool(''):setCache(other)\n"
	       "third = newPacketCache(300)\n"
	       "getPool('abuse'):setCache(third)\n"
	       "assert(getPool('abuse'):getCache() == third)");
	assert_int_equal(cfg->ncaches, 3);
	assert_ptr_equal(dlb_config_find_pool(cfg, "")->cache, cfg->caches[1]);
	assert_ptr_equal(dlb_config_find_pool(cfg, "abuse")->cache, cfg->caches[2]);
}

static void
test_show_pools(void **state)
{
	struct fixture *f = *state;

	/*
	 * dnsdist's boost format "%1$-20.20s %|25t|%2$20s %|25t|%3$20s %|50t|%4%":
	 * the name in 20 columns and up to column 25, then cache and policy
	 * right-aligned in 20 columns, one space each, then the servers.
	 */
	run(f, "out = {} print = function(s) out[#out + 1] = s end\n"
	       "newServer({address='192.0.2.1', name='ns1'})\n"
	       "newServer('192.0.2.2')\n"
	       "newServer({address='192.0.2.3', pool='abuse'})\n"
	       "pc = newPacketCache(100)\n"
	       "getPool(''):setCache(pc)\n"
	       "getPool('a-pool-with-a-long-name')\n"
	       "setPoolServerPolicy(roundrobin, 'abuse')\n"
	       "showPools()\n"
	       "assert(#out == 4)\n"
	       "assert(out[1] == 'Name' .. (' '):rep(36) .. 'Cache' .. (' '):rep(9) ..\n"
	       "  'ServerPolicy Servers')\n"
	       "assert(out[2] == (' '):rep(40) .. '0/100' .. (' '):rep(5) ..\n"
	       "  'leastOutstanding ns1 192.0.2.1:53, 192.0.2.2:53 192.0.2.2:53', out[2])\n"
	       "assert(out[3] == 'a-pool-with-a-long-n' .. (' '):rep(5) .. (' '):rep(20) ..\n"
	       "  ' ' .. (' '):rep(4) .. 'leastOutstanding ', out[3])\n"
	       "assert(out[4] == 'abuse' .. (' '):rep(40) .. (' '):rep(11) .. 'roundrobin ' ..\n"
	       "  '192.0.2.3:53 192.0.2.3:53', out[4])");
}

static void
test_cache_stats(void **state)
{
	struct fixture *f = *state;
	struct dlb_cache *c;

	run(f, "out = {} print = function(s) out[#out + 1] = s end\n"
	       "pc = newPacketCache(100)\n"
	       "pc:printStats()\n"
	       "local want = {'Entries: 0/100', 'Hits: 0', 'Misses: 0', 'Deferred inserts: 0',\n"
	       "  'Deferred lookups: 0', 'Lookup Collisions: 0', 'Insert Collisions: 0',\n"
	       "  'TTL Too Shorts: 0', 'Stale hits: 0', 'Prefetches: 0', 'Evictions: 0',\n"
	       "  'Memory: 0 bytes'}\n"
	       "assert(#out == #want)\n"
	       "for i = 1, #want do assert(out[i] == want[i], out[i]) end\n"
	       "local st = pc:getStats()\n"
	       "local keys = {'entries', 'maxEntries', 'hits', 'misses', 'deferredInserts',\n"
	       "  'deferredLookups', 'lookupCollisions', 'insertCollisions', 'ttlTooShorts',\n"
	       "  'staleHits', 'prefetches', 'evictions', 'bytes'}\n"
	       "local n = 0 for _ in pairs(st) do n = n + 1 end\n"
	       "assert(n == #keys)\n"
	       "for _, k in ipairs(keys) do assert(math.type(st[k]) == 'integer', k) end\n"
	       "assert(st.maxEntries == 100 and st.entries == 0 and st.hits == 0)");

	/* with entries: the counts and bytes follow */
	c = f->cfg->caches[0];
	cache_put(f, c, "\x03www\x07" "example\x03" "com", 1, 300, (double)time(NULL));
	cache_put(f, c, "\x04mail\x07" "example\x03" "com", 1, 300, (double)time(NULL));
	run(f, "out = {}\n"
	       "pc:printStats()\n"
	       "assert(out[1] == 'Entries: 2/100')\n"
	       "local st = pc:getStats()\n"
	       "assert(st.entries == 2 and st.bytes > 0 and pc:toString() == '2/100')\n"
	       "assert(out[12] == 'Memory: ' .. st.bytes .. ' bytes')");
}

static void
test_cache_expunge(void **state)
{
	struct fixture *f = *state;
	struct dlb_cache *c;
	double now = (double)time(NULL);

	run(f, "out = {} print = function(s) out[#out + 1] = s end\n"
	       "pc = newPacketCache(100)\n"
	       "assert(pc:expunge(0) == 0)\n"
	       "assert(pc:purgeExpired(0) == 0)\n"
	       "assert(pc:expungeByName('example.com') == nil)\n"
	       "assert(out[1] == 'Expunged 0 records')");
	c = f->cfg->caches[0];

	cache_put(f, c, "\x03www\x07" "Example\x03" "COM", 1, 300, now);
	cache_put(f, c, "\x03www\x07" "example\x03" "com", 16, 300, now);
	cache_put(f, c, "\x04mail\x07" "example\x03" "com", 1, 300, now);
	cache_put(f, c, "\x0a" "notexample\x03" "com", 1, 300, now);
	cache_put(f, c, "\x07" "example\x03" "org", 1, 300, now);
	run(f, "out = {}\n"
	       "assert(pc:getStats().entries == 5)\n"
	       /* the text name's case and final dot do not matter */
	       "pc:expungeByName('WWW.EXAMPLE.COM.', DNSQType.A) assert(out[#out] == 'Expunged 1 records')\n"
	       "pc:expungeByName('example.com', DNSQType.A) assert(out[#out] == 'Expunged 0 records')\n"
	       /* a suffix match stops at label boundaries: notexample.com stays */
	       "pc:expungeByName('example.com', DNSQType.ANY, true) assert(out[#out] == 'Expunged 2 records')\n"
	       "pc:expungeByName('example.org', 'TXT') assert(out[#out] == 'Expunged 0 records')\n"
	       "pc:expungeByName('example.org', 'A', false) assert(out[#out] == 'Expunged 1 records')\n"
	       "assert(pc:getStats().entries == 1)\n"
	       "pc:expungeByName('.', nil, true) assert(out[#out] == 'Expunged 1 records')\n"
	       "assert(pc:getStats().entries == 0)");

	run_fail(f, "\npc:expungeByName('a..b')", "test:2: expungeByName: bad name 'a..b'");
	run_fail(f, "pc:expungeByName(5)", "expungeByName: expected a DNSName or a string, got number");
	run_fail(f, "pc:expungeByName('x', 'BOGUS')", "expungeByName: unknown qtype 'BOGUS'");
	run_fail(f, "pc:expungeByName('x', 70000)", "expungeByName: 'qtype' is out of range");
	run_fail(f, "pc:expungeByName('x', 1, 'yes')",
		 "expungeByName: suffixMatch must be a boolean");

	/* purgeExpired removes only expired entries, down to n */
	cache_put(f, c, "\x01" "a\x04test", 1, 300, now - 1000);
	cache_put(f, c, "\x01" "b\x04test", 1, 300, now - 1000);
	cache_put(f, c, "\x01" "c\x04test", 1, 300, now - 1000);
	cache_put(f, c, "\x01" "d\x04test", 1, 300, now);
	cache_put(f, c, "\x01" "e\x04test", 1, 300, now);
	run(f, "assert(pc:getStats().entries == 5)\n"
	       "assert(pc:purgeExpired(4) == 1)\n"
	       "assert(pc:purgeExpired(0) == 2)\n"
	       "assert(pc:purgeExpired(0) == 0)\n"
	       "assert(pc:getStats().entries == 2)\n"
	       /* expunge(n) removes anything down to n */
	       "assert(pc:expunge(1) == 1)\n"
	       "assert(pc:expunge('0') == 1)\n"
	       "assert(pc:getStats().entries == 0)");
	run_fail(f, "\npc:expunge(-1)", "test:2: expunge: argument #1 is out of range");
	run_fail(f, "pc:expunge()", "expunge: argument #1 must be an integer");
	run_fail(f, "pc:purgeExpired('x')", "purgeExpired: argument #1 must be an integer");
	run_fail(f, "pc.expunge(getPool(''), 0)", "PacketCache expected");

	/* isFull */
	run(f, "small = newPacketCache(1, {numberOfShards=1})\nassert(not small:isFull())");
	cache_put(f, f->cfg->caches[1], "\x01" "a\x04test", 1, 300, now);
	run(f, "assert(small:isFull() and small:toString() == '1/1')");

	/* without an RCU record the methods that remove entries refuse */
	dlb_lua_conf_set_rcu(f->lc, NULL);
	run_fail(f, "pc:expunge(0)", "expunge: not available");
	run_fail(f, "pc:purgeExpired(0)", "purgeExpired: not available");
	run_fail(f, "pc:expungeByName('a.test')", "expungeByName: not available");
	run_fail(f, "pc:dump('/nonexistent/x')", "dump: not available");
	run(f, "pc:printStats()\nassert(pc:getStats().entries == 0)");
	dlb_lua_conf_set_rcu(f->lc, &f->rt);
}

static void
test_cache_dump(void **state)
{
	struct fixture *f = *state;
	char dir[] = "/tmp/dnslb-test-dump-XXXXXX";
	char path[256], code[1024], line[512];
	FILE *fp;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/cache.txt", dir);

	run(f, "out = {} print = function(s) out[#out + 1] = s end\npc = newPacketCache(100)");
	cache_put(f, f->cfg->caches[0], "\x03www\x07" "example\x03" "com", 1, 300,
		  (double)time(NULL));
	snprintf(code, sizeof(code), "assert(pc:dump('%s') == nil)\n"
		 "assert(out[1] == 'Dumped 1 records', out[1])\n"
		 "pc:dump('%s')\n"
		 "assert(out[2] == 'Error opening dump file for writing: File exists', out[2])",
		 path, path);
	run(f, code);

	fp = fopen(path, "r");
	assert_non_null(fp);
	assert_non_null(fgets(line, sizeof(line), fp));
	assert_int_equal(strncmp(line, "www.example.com. ", 17), 0);
	assert_non_null(strstr(line, " A ; rcode 0, key "));
	assert_non_null(strstr(line, "received over UDP 1, added "));
	assert_null(fgets(line, sizeof(line), fp));	/* the second dump wrote nothing */
	fclose(fp);

	snprintf(code, sizeof(code), "pc:dump('%s/no/such/dir')\n"
		 "assert(out[3] == 'Error opening dump file for writing: No such file or "
		 "directory', out[3])", dir);
	run(f, code);
	run_fail(f, "pc:dump()", "dump: the file name must be a string");

	assert_int_equal(unlink(path), 0);
	assert_int_equal(rmdir(dir), 0);
}

/* conf/dnslb.conf, found from this file's path (CMake compiles with absolute paths). */
static void
test_default_config_file(void **state)
{
	struct fixture *f = *state;
	const char *me = __FILE__, *cut = strstr(me, "tests/unit/test_config.c");
	char path[1024];
	struct stat st;

	snprintf(path, sizeof(path), "%.*sconf/dnslb.conf", cut ? (int)(cut - me) : 0, me);
	if (stat(path, &st) != 0)
		skip();
	assert_int_equal(dlb_lua_conf_load_file(f->lc, path, f->err, sizeof(f->err)), 0);
	assert_int_equal(f->cfg->nfrontends, 1);
	assert_string_equal(f->cfg->frontends[0].text, "127.0.0.1:5300");
	for (int i = 0; i < f->cfg->nbackends; i++)
		assert_int_equal(port_of(&f->cfg->backends[i]->addr), 53);
	assert_int_equal(f->cfg->acl.n, 9);
}

/* ---- reload plans ---------------------------------------------------------- */

static struct dlb_backend *
plan_server(struct dlb_config *cfg, const char *addr, const char *name, const char *pool)
{
	struct dlb_backend *be = dlb_backend_new();

	assert_non_null(be);
	assert_int_equal(dlb_sockaddr_parse(addr, 53, &be->addr, &be->addrlen), 0);
	snprintf(be->name, sizeof(be->name), "%s", name);
	if (pool != NULL)
		snprintf(be->pools[be->npools++], sizeof(be->pools[0]), "%s", pool);
	assert_int_equal(dlb_config_add_backend(cfg, be), 0);
	return be;
}

static void
test_reload_plan(void **state)
{
	struct dlb_config *a = dlb_config_new(), *b = dlb_config_new();
	struct dlb_reload_plan plan;
	struct dlb_backend *nb;

	(void)state;
	assert_non_null(a);
	assert_non_null(b);
	plan_server(a, "192.0.2.1", "one", NULL);
	plan_server(a, "192.0.2.2", "two", "p");
	plan_server(a, "192.0.2.3", "three", NULL);
	a->backends[2]->removed = true;		/* rmServer at runtime */
	dlb_cache_opts_default(&a->cache_opts[0]);
	a->cache_opts[0].max_entries = 1000;
	a->ncaches = 1;

	/* the file: two moved to another pool with another weight (same server),
	 * one with a new source port count (a new server), three back (new: the
	 * removed one is never reused), a new cache size */
	nb = plan_server(b, "192.0.2.2", "two", "q");
	nb->weight = 7;
	nb = plan_server(b, "192.0.2.1", "one", NULL);
	nb->sockets = 4;
	plan_server(b, "192.0.2.3", "three", NULL);
	dlb_cache_opts_default(&b->cache_opts[0]);
	b->cache_opts[0].max_entries = 2000;
	dlb_cache_opts_default(&b->cache_opts[1]);
	b->cache_opts[1].max_entries = 1000;
	b->ncaches = 2;

	assert_null(dlb_config_plan_reload(a, b, &plan));
	assert_int_equal(plan.be_map[0], 1);
	assert_int_equal(plan.be_map[1], -1);
	assert_int_equal(plan.be_map[2], -1);
	assert_int_equal(plan.cache_map[0], -1);
	assert_int_equal(plan.cache_map[1], 0);

	/* an id= in the file must match too */
	b->backends[0]->id_given = true;
	snprintf(b->backends[0]->uuid, sizeof(b->backends[0]->uuid), "%s",
		 "1b4e28ba-2fa1-11d2-883f-0016d3cca427");
	assert_null(dlb_config_plan_reload(a, b, &plan));
	assert_int_equal(plan.be_map[0], -1);

	/* in-place settings; the forced state only when the file's mode changed */
	__atomic_store_n(&a->backends[1]->admin, DLB_BE_FORCED_DOWN, __ATOMIC_RELAXED);
	dlb_config_update_backend(a->backends[1], b->backends[0]);
	assert_int_equal(a->backends[1]->weight, 7);
	assert_int_equal(a->backends[1]->admin, DLB_BE_FORCED_DOWN);
	b->backends[0]->admin_file = DLB_BE_FORCED_UP;
	dlb_config_update_backend(a->backends[1], b->backends[0]);
	assert_int_equal(a->backends[1]->admin, DLB_BE_FORCED_UP);

	/* listeners by address: a new one, a kept one; at most DLB_MAX_FRONTENDS ever */
	assert_int_equal(dlb_sockaddr_parse("127.0.0.1:53", 53, &a->frontends[0].addr,
					    &a->frontends[0].addrlen), 0);
	a->nfrontends = 1;
	assert_int_equal(dlb_sockaddr_parse("127.0.0.1:5300", 53, &b->frontends[0].addr,
					    &b->frontends[0].addrlen), 0);
	b->frontends[1] = a->frontends[0];
	b->nfrontends = 2;
	assert_null(dlb_config_plan_reload(a, b, &plan));
	assert_int_equal(plan.fe_map[0], -1);
	assert_int_equal(plan.fe_map[1], 0);
	a->nfrontends = DLB_MAX_FRONTENDS;
	assert_non_null(dlb_config_plan_reload(a, b, &plan));
	a->ncaches = b->ncaches = 0;	/* no cache objects behind the options */
	dlb_config_free(a);
	dlb_config_free(b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_defaults, setup, teardown),
		cmocka_unit_test_setup_teardown(test_listeners, setup, teardown),
		cmocka_unit_test_setup_teardown(test_acl, setup, teardown),
		cmocka_unit_test_setup_teardown(test_new_server_string, setup, teardown),
		cmocka_unit_test_setup_teardown(test_new_server_table, setup, teardown),
		cmocka_unit_test_setup_teardown(test_new_server_tls, setup, teardown),
		cmocka_unit_test_setup_teardown(test_new_server_coercion, setup, teardown),
		cmocka_unit_test_setup_teardown(test_new_server_invalid, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pools, setup, teardown),
		cmocka_unit_test_setup_teardown(test_server_object, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rm_server, setup, teardown),
		cmocka_unit_test_setup_teardown(test_policies, setup, teardown),
		cmocka_unit_test_setup_teardown(test_settings, setup, teardown),
		cmocka_unit_test_setup_teardown(test_constants, setup, teardown),
		cmocka_unit_test_setup_teardown(test_libraries, setup, teardown),
		cmocka_unit_test_setup_teardown(test_include_directory, setup, teardown),
		cmocka_unit_test_setup_teardown(test_get_resolvers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_file_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_runtime_phase, setup, teardown),
		cmocka_unit_test_setup_teardown(test_config_api, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache_settings, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache_new_defaults, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache_new_options, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache_new_positional, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache_new_invalid, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache_too_many, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_cache, setup, teardown),
		cmocka_unit_test_setup_teardown(test_show_pools, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache_stats, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache_expunge, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache_dump, setup, teardown),
		cmocka_unit_test_setup_teardown(test_default_config_file, setup, teardown),
		cmocka_unit_test(test_reload_plan),
	};

	dlb_rcu_init();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
