/*
 * test_config.c - the Lua configuration (lua/conf.c) and the structure it
 * builds (dnslb/config.c): each test evaluates config text and checks
 * struct dlb_config. Many checks run inside Lua with assert(), which fails
 * the load with the line of the failed assertion.
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
#include <unistd.h>

#include "dnslb/config.h"
#include "dnslb/netmask.h"
#include "lua/conf.h"

struct fixture {
	struct dlb_config *cfg;
	struct dlb_lua_conf *lc;
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
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	dlb_lua_conf_free(f->lc);
	dlb_config_free(f->cfg);
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
	assert_int_equal(cfg->policy, DLB_POLICY_LEAST_OUTSTANDING);
	assert_int_equal(cfg->udp_timeout_ms, 2000);
	assert_int_equal(cfg->max_udp_outstanding, 65535);
	assert_true(cfg->selfans.add_edns);
	assert_int_equal(cfg->selfans.payload_size, 1232);
	assert_int_equal(cfg->tcp_recv_timeout, 2);
	assert_int_equal(cfg->tcp_send_timeout, 2);
	assert_int_equal(cfg->udp_vector_size, 64);
	assert_false(cfg->servfail_when_no_server);
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

	/* bare IPv6, string numbers, legacy boolean doTCP argument, unknown option */
	run(f, "addLocal('::1', {tcpFastOpenQueueSize='8', reusePort='true', bogus=1})\n"
	       "addLocal('127.0.0.2:5353', true)");
	assert_int_equal(cfg->nfrontends, 4);
	assert_string_equal(cfg->frontends[2].text, "[::1]:53");
	assert_int_equal(cfg->frontends[2].tcp_fastopen_qsize, 8);
	assert_true(cfg->frontends[2].reuseport);
	assert_string_equal(cfg->frontends[3].text, "127.0.0.2:5353");

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
	       " tcpRecvTimeout=6, maxInFlight=16, source='192.0.2.99@eth0'})");
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
	assert_string_equal(be->source_iface, "eth0");

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
	/* random ids are distinct */
	assert_string_not_equal(cfg->backends[1]->uuid, cfg->backends[2]->uuid);
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
		{ "\n\nnewServer({address='192.0.2.1', weight=0})",
		  "test:3: newServer: 'weight' is out of range" },
		{ "newServer({address='192.0.2.1', weight='0'})", "'weight' is out of range" },
		{ "newServer({address='192.0.2.1', order=-1})", "'order' is out of range" },
		{ "newServer({address='192.0.2.1', qps=-5})", "'qps' is out of range" },
		{ "newServer({address='192.0.2.1', qps='many'})", "'qps' must be an integer" },
		{ "newServer({address='192.0.2.1', qps=1.5})", "'qps' must be an integer" },
		{ "newServer({address='192.0.2.1', sockets=0})", "'sockets' is out of range" },
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
		{ "newServer({address='192.0.2.1', source='999.1.1.1@eth0'})",
		  "invalid source address" },
		{ "newServer({address='192.0.2.1', source='::1'})", "family" },
		{ "newServer({address='192.0.2.1', source='averyveryverylongiface'})",
		  "invalid source interface" },
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
	run(f, "s = getServer(0)\ns:addPool('b')\ns:addPool('b')\ns:rmPool('a')\n"
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
	run(f, "getServer(2).order = 0\nassert(getServer(2).order == 0)");
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
	assert_int_equal(cfg->policy, DLB_POLICY_FIRST_AVAILABLE);
	assert_int_equal(dlb_config_find_pool(cfg, "abuse")->policy, DLB_POLICY_ROUNDROBIN);
	assert_int_equal(dlb_config_find_pool(cfg, "")->policy, -1);
	assert_true(cfg->roundrobin_fail_on_no_server);
	assert_int_equal(cfg->whashed_perturbation, 12345);

	run(f, "setServerPolicy(whashed)");
	assert_int_equal(cfg->policy, DLB_POLICY_WHASHED);
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
	       "setSecurityPollSuffix('')\n"
	       "setSecurityPollInterval(3600)\n"
	       "setSyslogFacility(3)\n"
	       "setSyslogFacility('local0')\n"
	       "setVerbose(true)\n"
	       "assert(getVerbose() == true)\n"
	       "setVerbose(false)\n"
	       "assert(getVerbose() == false)");
	assert_int_equal(cfg->udp_timeout_ms, 5000);
	assert_int_equal(cfg->max_udp_outstanding, 1024);
	assert_true(cfg->servfail_when_no_server);
	assert_true(cfg->drop_empty_queries);
	assert_true(cfg->allow_empty_response);
	assert_int_equal(cfg->selfans.payload_size, 1400);
	assert_false(cfg->selfans.add_edns);
	assert_int_equal(cfg->tcp_recv_timeout, 7);
	assert_int_equal(cfg->tcp_send_timeout, 8);
	assert_int_equal(cfg->max_tcp_queries_per_conn, 100);
	assert_int_equal(cfg->max_tcp_conns_per_client, 10);
	assert_int_equal(cfg->max_tcp_conn_duration, 60);
	assert_int_equal(cfg->max_tcp_client_threads, 20);
	assert_int_equal(cfg->udp_vector_size, 32);
	assert_int_equal(cfg->udp_rcvbuf, 1048576);
	assert_int_equal(cfg->udp_sndbuf, 2097152);
	assert_true(cfg->verbose_health_checks);
	assert_int_equal(cfg->workers, 4);
	assert_false(cfg->verbose);

	/* fractional seconds, string numbers and booleans, payload clamping */
	run(f, "setUDPTimeout(0.5)\nsetMaxUDPOutstanding('2048')\n"
	       "setServFailWhenNoServer('false')\nsetPayloadSizeOnSelfGeneratedAnswers(100)");
	assert_int_equal(cfg->udp_timeout_ms, 500);
	assert_int_equal(cfg->max_udp_outstanding, 2048);
	assert_false(cfg->servfail_when_no_server);
	assert_int_equal(cfg->selfans.payload_size, 512);
	run(f, "setPayloadSizeOnSelfGeneratedAnswers(100000)\nsetWorkerThreads(0)");
	assert_int_equal(cfg->selfans.payload_size, 65535);
	assert_int_equal(cfg->workers, 0);

	run_fail(f, "setMaxUDPOutstanding(0)", "test:1: setMaxUDPOutstanding: 0 is out of range");
	run_fail(f, "setMaxUDPOutstanding(65536)", "out of range");
	run_fail(f, "setUDPMultipleMessagesVectorSize(65)", "out of range");
	run_fail(f, "setUDPMultipleMessagesVectorSize(0)", "out of range");
	run_fail(f, "setWorkerThreads(65)", "out of range");
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

	run(f, "assert(io == nil and require == nil and package == nil)\n"
	       "assert(os.execute == nil and os.remove == nil and os.exit == nil)\n"
	       "assert(type(os.getenv('PATH')) == 'string')\n"
	       "assert(type(os.time()) == 'number' and type(os.date('%Y')) == 'string')\n"
	       "assert(string.format('%d', 3) == '3' and math.max(1, 2) == 2)\n"
	       "assert(utf8.char(72) == 'H' and table.concat({'a', 'b'}) == 'ab')\n"
	       "out = {} print = function(s) out[#out + 1] = s end\n"
	       "showVersion()\n"
	       "assert(out[1]:match('^dnslb '))\n"
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
	assert_int_equal(f->cfg->policy, DLB_POLICY_ROUNDROBIN);

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

	run_fail(f, "includeDirectory('/nonexistent/dnslb-test')", "cannot open directory");

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
			 "newServer({address='192.0.2.1', weight=0})\n");
	assert_int_equal(dlb_lua_conf_load_file(f->lc, path, f->err, sizeof(f->err)), -1);
	snprintf(expect, sizeof(expect),
		 "%s:2: newServer: 'weight' is out of range (1..2147483647)", path);
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
		"setWorkerThreads(1)",
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

	/* what dnsdist allows at runtime still works */
	run(f, "newServer('192.0.2.1')\ngetServer(0):setDown()\nsetServerPolicy(wrandom)\n"
	       "addACL('192.0.2.0/24')\nsetUDPTimeout(3)\nsetServFailWhenNoServer(true)");
	assert_int_equal(f->cfg->nbackends, 1);
	assert_int_equal(f->cfg->policy, DLB_POLICY_WRANDOM);
	assert_int_equal(f->cfg->udp_timeout_ms, 3000);

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

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_defaults, setup, teardown),
		cmocka_unit_test_setup_teardown(test_listeners, setup, teardown),
		cmocka_unit_test_setup_teardown(test_acl, setup, teardown),
		cmocka_unit_test_setup_teardown(test_new_server_string, setup, teardown),
		cmocka_unit_test_setup_teardown(test_new_server_table, setup, teardown),
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
		cmocka_unit_test_setup_teardown(test_default_config_file, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
