/*
 * test_lua_rules.c - the Lua side of the rule engine (lua/rules_lua.c):
 * every catalog constructor with good and bad arguments, the descriptions
 * showRules prints (dnsdist 1.7.3's texts, observed with its console), chain
 * editing (addAction, mvRule, rmRule by position/name/UUID, clearRules,
 * setRules, ...), showRules/topRules output, makeRule shorthand, the
 * chain/action mismatch errors and the worker phase, in which nothing is
 * published or printed.
 *
 * Each test evaluates config text in a fresh config state. print() is
 * replaced by a function collecting lines into the global table `out`, so
 * show*() output is checked inside Lua; chains are checked from C through
 * dlb_rules_chain().
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dnslb/core/config.h"
#include "dnslb/core/rcu.h"
#include "lua/conf.h"
#include "lua/rules_lua.h"
#include "rules/rules.h"

struct fixture {
	struct dlb_config *cfg;
	struct dlb_lua_conf *lc;
	char err[2048];
};

static const char capture_print[] =
	"out = {}\n"
	"print = function(...)\n"
	"  local t = {}\n"
	"  for i = 1, select('#', ...) do t[i] = tostring((select(i, ...))) end\n"
	"  out[#out + 1] = table.concat(t, '\\t')\n"
	"end\n";

static struct fixture *
fixture_new(enum dlb_lua_phase phase)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->cfg = dlb_config_new();
	assert_non_null(f->cfg);
	f->lc = dlb_lua_conf_new(f->cfg, phase);
	assert_non_null(f->lc);
	assert_int_equal(dlb_lua_conf_load_string(f->lc, capture_print, "=setup", f->err,
						  sizeof(f->err)), 0);
	return f;
}

static void
fixture_free(struct fixture *f)
{
	dlb_lua_conf_free(f->lc);
	dlb_rules_shutdown();
	dlb_config_free(f->cfg);
	free(f);
}

static int
setup(void **state)
{
	*state = fixture_new(DLB_LUA_PHASE_CONFIG);
	return 0;
}

static int
teardown(void **state)
{
	fixture_free(*state);
	return 0;
}

/* Run @code (chunk "t"); fail the test with Lua's message if it raises. */
static void
run(struct fixture *f, const char *code)
{
	f->err[0] = '\0';
	if (dlb_lua_conf_load_string(f->lc, code, "=t", f->err, sizeof(f->err)) != 0)
		fail_msg("Lua error: %s\nin:\n%s", f->err, code);
}

/* @code must raise, at t:1, with a message containing @msg. */
static void
run_fails(struct fixture *f, const char *code, const char *msg)
{
	f->err[0] = '\0';
	if (dlb_lua_conf_load_string(f->lc, code, "=t", f->err, sizeof(f->err)) == 0)
		fail_msg("no error from: %s", code);
	if (strncmp(f->err, "t:1: ", 5) != 0)
		fail_msg("error without chunk:line: '%s' (from %s)", f->err, code);
	if (msg != NULL && strstr(f->err, msg) == NULL)
		fail_msg("error '%s' lacks '%s' (from %s)", f->err, msg, code);
}

static const struct dlb_chain *
chain(enum dlb_chain_kind k)
{
	return dlb_rules_chain(k);
}

/* ---- every catalog entry ------------------------------------------------------ */

static const struct ctor_case {
	const char *name;
	const char *good;	/* builds one */
	const char *bad;	/* must raise (NULL: takes no arguments) */
	const char *msg;	/* part of the error */
} ctor_cases[] = {
	{ "AllRule", "AllRule()", NULL, NULL },
	{ "AndRule", "AndRule({AllRule(), RDRule()})", "AndRule({1})", "AndRule: element #1" },
	{ "OrRule", "OrRule({AllRule()})", "OrRule(5)", "OrRule: argument #1" },
	{ "NotRule", "NotRule(RDRule())", "NotRule('x')",
	  "NotRule: argument #1 must be a selector" },
	{ "QNameRule", "QNameRule('Example.COM')", "QNameRule({})", "QNameRule:" },
	{ "QNameSetRule", "QNameSetRule(newDNSNameSet())", "QNameSetRule('a.')",
	  "QNameSetRule: argument #1 must be a DNSNameSet" },
	{ "SuffixMatchNodeRule", "SuffixMatchNodeRule(newSuffixMatchNode(), true)",
	  "SuffixMatchNodeRule('a.')",
	  "SuffixMatchNodeRule: argument #1 must be a SuffixMatchNode" },
	{ "QNameSuffixRule", "QNameSuffixRule({'a.example', 'b.example.'})",
	  "QNameSuffixRule({'a..b'})", "QNameSuffixRule: bad name" },
	{ "RegexRule", "RegexRule('^www[0-9]+\\\\.')", "RegexRule('(')",
	  "RegexRule: invalid regular expression '('" },
	{ "HTTPHeaderRule", "HTTPHeaderRule('X-Route', '^blue')", "HTTPHeaderRule('X-Route', '(')",
	  "HTTPHeaderRule: invalid regular expression '('" },
	{ "HTTPPathRule", "HTTPPathRule('/dns-query')", "HTTPPathRule()",
	  "HTTPPathRule: argument #1" },
	{ "HTTPPathRegexRule", "HTTPPathRegexRule('^/dns')", "HTTPPathRegexRule('(')",
	  "HTTPPathRegexRule: invalid regular expression '('" },
	{ "SNIRule", "SNIRule('dns.example')", "SNIRule()", "SNIRule: argument #1" },
	{ "QTypeRule", "QTypeRule('aaaa')", "QTypeRule('BOGUS')",
	  "QTypeRule: unknown type 'BOGUS'" },
	{ "QClassRule", "QClassRule(DNSClass.CHAOS)", "QClassRule(70000)", "QClassRule:" },
	{ "OpcodeRule", "OpcodeRule(DNSOpcode.Update)", "OpcodeRule(16)", "OpcodeRule:" },
	{ "RDRule", "RDRule()", NULL, NULL },
	{ "DNSSECRule", "DNSSECRule()", NULL, NULL },
	{ "NetmaskGroupRule", "NetmaskGroupRule({'192.0.2.0/24', '2001:db8::/32'}, false, true)",
	  "NetmaskGroupRule('192.0.2.0/33')", "NetmaskGroupRule: invalid netmask '192.0.2.0/33'" },
	{ "DSTPortRule", "DSTPortRule(53)", "DSTPortRule(70000)",
	  "DSTPortRule: 70000 is out of range" },
	{ "TCPRule", "TCPRule(true)", "TCPRule(1)", "TCPRule: argument #1 must be a boolean" },
	{ "MaxQPSIPRule", "MaxQPSIPRule(10, 24, 48, 20, 300, 60, 10)", "MaxQPSIPRule(10, 33)",
	  "MaxQPSIPRule: 33 is out of range" },
	{ "MaxQPSRule", "MaxQPSRule('100', 200)", "MaxQPSRule('x')",
	  "MaxQPSRule: argument #1 must be a number" },
	{ "ProbaRule", "ProbaRule(0.5)", "ProbaRule(2)", "ProbaRule:" },
	{ "RCodeRule", "RCodeRule(DNSRCode.NXDOMAIN)", "RCodeRule(16)", "RCodeRule:" },
	{ "ERCodeRule", "ERCodeRule(DNSRCode.BADVERS)", "ERCodeRule(4096)", "ERCodeRule:" },
	{ "EDNSOptionRule", "EDNSOptionRule(EDNSOptionCode.ECS)", "EDNSOptionRule(-1)",
	  "EDNSOptionRule:" },
	{ "EDNSVersionRule", "EDNSVersionRule(0)", "EDNSVersionRule(256)", "EDNSVersionRule:" },
	{ "PayloadSizeRule", "PayloadSizeRule('greater', 512)", "PayloadSizeRule('bigger', 512)",
	  "PayloadSizeRule: unsupported comparison 'bigger'" },
	{ "RecordsCountRule", "RecordsCountRule(DNSSection.Answer, 1, 5)",
	  "RecordsCountRule(4, 1, 5)",
	  "RecordsCountRule: 4 is out of range" },
	{ "RecordsTypeCountRule", "RecordsTypeCountRule(DNSSection.Additional, DNSQType.A, 1, 5)",
	  "RecordsTypeCountRule(1, 'NOPE', 1, 5)", "RecordsTypeCountRule: unknown type 'NOPE'" },
	{ "QNameLabelsCountRule", "QNameLabelsCountRule(2, 10)", "QNameLabelsCountRule(2)",
	  "QNameLabelsCountRule: argument #2 must be an integer" },
	{ "QNameWireLengthRule", "QNameWireLengthRule(2, 100)", "QNameWireLengthRule('a', 2)",
	  "QNameWireLengthRule: argument #1 must be an integer" },
	{ "TrailingDataRule", "TrailingDataRule()", NULL, NULL },
	{ "TagRule", "TagRule('k', 'v')", "TagRule()", "TagRule: argument #1 must be a string" },
	{ "PoolAvailableRule", "PoolAvailableRule('abuse')", "PoolAvailableRule(nil)",
	  "PoolAvailableRule: argument #1 must be a string" },
	{ "PoolOutstandingRule", "PoolOutstandingRule('abuse', 10)", "PoolOutstandingRule('abuse')",
	  "PoolOutstandingRule: argument #2 must be an integer" },
	{ "LuaRule", "LuaRule(function(dq) return true end)", "LuaRule('return true')",
	  "LuaRule: argument #1 must be a function" },
	{ "LuaFFIRule", "LuaFFIRule(function(dq) return true end)", "LuaFFIRule('return true')",
	  "LuaFFIRule: argument #1 must be a function" },
	{ "LuaFFIPerThreadRule", "LuaFFIPerThreadRule('return function(dq) return true end')",
	  "LuaFFIPerThreadRule('return 1')", "the code must return a function, not number" },
	{ "KeyValueStoreLookupRule",
	  "(function() setRedis('127.0.0.1:1') return KeyValueStoreLookupRule("
	  "newRedisKVStore({key='k'}), KeyValueLookupKeyQName()) end)()",
	  "KeyValueStoreLookupRule(newRedisKVStore({key='k'}), 1)",
	  "KeyValueStoreLookupRule: argument #2 must be a KeyValueLookupKey" },
	{ "makeRule", "makeRule({'a.example', 'b.example'})", "makeRule(5)", "makeRule:" },

	{ "PoolAction", "PoolAction('abuse', false)", "PoolAction()",
	  "PoolAction: argument #1 must be a string" },
	{ "DropAction", "DropAction()", NULL, NULL },
	{ "AllowAction", "AllowAction()", NULL, NULL },
	{ "NoneAction", "NoneAction()", NULL, NULL },
	{ "ContinueAction", "ContinueAction(PoolAction('x'))",
	  "ContinueAction(DropResponseAction())",
	  "ContinueAction: argument #1 must be a query action, not a response action" },
	{ "HTTPStatusAction", "HTTPStatusAction(418, 'teapot', 'text/plain', {aa=true})",
	  "HTTPStatusAction(70000, 'x')", "HTTPStatusAction:" },
	{ "RCodeAction", "RCodeAction(DNSRCode.REFUSED, {aa=true, ra=false})",
	  "RCodeAction(5, {aa=1})", "RCodeAction: 'aa' must be a boolean" },
	{ "ERCodeAction", "ERCodeAction(DNSRCode.BADVERS)", "ERCodeAction(5, 'x')",
	  "ERCodeAction: argument #2 must be a table of options" },
	{ "TCAction", "TCAction()", NULL, NULL },
	{ "SpoofAction", "SpoofAction({'192.0.2.1', '2001:db8::1'}, {ttl=30})",
	  "SpoofAction('bogus')",
	  "SpoofAction: invalid address 'bogus'" },
	{ "SpoofCNAMEAction", "SpoofCNAMEAction('target.example.', {aa=true})",
	  "SpoofCNAMEAction('a..b')", "SpoofCNAMEAction: bad name" },
	{ "SpoofRawAction", "SpoofRawAction({'\\192\\000\\002\\001'})", "SpoofRawAction({1})",
	  "SpoofRawAction: rdata #1 must be a string" },
	{ "SpoofSVCAction",
	  "SpoofSVCAction({newSVCRecordParameters(1, 'a.example.', {port=853, alpn={'dot'}})})",
	  "SpoofSVCAction({1})",
	  "SpoofSVCAction: element #1 must be a newSVCRecordParameters(), not number" },
	{ "NegativeAndSOAAction",
	  "NegativeAndSOAAction(true, 'example.', 300, 'ns.example.', 'host.example.', "
	  "1, 2, 3, 4, 5, {soaInAuthoritySection=true})",
	  "NegativeAndSOAAction(true, 'example.', 300, 'ns.example.', 'host.example.', 1, 2, 3, 4)",
	  "NegativeAndSOAAction: argument #10 must be an integer" },
	{ "QPSAction", "QPSAction(100)", "QPSAction(-1)", "QPSAction:" },
	{ "QPSPoolAction", "QPSPoolAction(100, 'abuse')", "QPSPoolAction(100)",
	  "QPSPoolAction: argument #2 must be a string" },
	{ "DelayAction", "DelayAction('10')", "DelayAction(-1)",
	  "DelayAction: -1 is out of range" },
	{ "SetNoRecurseAction", "SetNoRecurseAction()", NULL, NULL },
	{ "SetDisableValidationAction", "SetDisableValidationAction()", NULL, NULL },
	{ "SetEDNSOptionAction", "SetEDNSOptionAction(65001, 'abc')", "SetEDNSOptionAction(70000, 'x')",
	  "SetEDNSOptionAction:" },
	{ "SetSkipCacheAction", "SetSkipCacheAction()", NULL, NULL },
	{ "SetTempFailureCacheTTLAction", "SetTempFailureCacheTTLAction(10)",
	  "SetTempFailureCacheTTLAction(-5)", "SetTempFailureCacheTTLAction:" },
	{ "SetECSAction", "SetECSAction('192.0.2.0/24', '2001:db8::/56')", "SetECSAction('x')",
	  "SetECSAction: invalid netmask 'x'" },
	{ "SetECSPrefixLengthAction", "SetECSPrefixLengthAction(24, 56)",
	  "SetECSPrefixLengthAction(33, 56)", "SetECSPrefixLengthAction: 33 is out of range" },
	{ "SetECSOverrideAction", "SetECSOverrideAction(true)", "SetECSOverrideAction('yes')",
	  "SetECSOverrideAction: argument #1 must be a boolean" },
	{ "SetDisableECSAction", "SetDisableECSAction()", NULL, NULL },
	{ "SetTagAction", "SetTagAction('k', 'v')", "SetTagAction('k')",
	  "SetTagAction: argument #2 must be a string" },
	{ "SetMaxReturnedTTLAction", "SetMaxReturnedTTLAction(60)", "SetMaxReturnedTTLAction()",
	  "SetMaxReturnedTTLAction: argument #1 must be an integer" },
	{ "LogAction", "LogAction()", "LogAction('/nonexistent-dir/x.log')", "LogAction:" },
	{ "TeeAction", "TeeAction('127.0.0.1:9')", "TeeAction('127.0.0.1:9', true)",
	  "TeeAction: addECS is not supported" },
	{ "KeyValueStoreLookupAction",
	  "(function() setRedis('127.0.0.1:1') return KeyValueStoreLookupAction("
	  "newRedisKVStore({key='k'}), KeyValueLookupKeySuffix(), 't') end)()",
	  "KeyValueStoreLookupAction(newRedisKVStore({key='k'}), KeyValueLookupKeyQName())",
	  "KeyValueStoreLookupAction: argument #3 must be a string" },
	{ "LuaAction", "LuaAction(function(dq) return DNSAction.None end)", "LuaAction()",
	  "LuaAction: argument #1 must be a function" },
	{ "LuaFFIAction", "LuaFFIAction(function(dq) return DNSAction.None end)", "LuaFFIAction()",
	  "LuaFFIAction: argument #1 must be a function" },
	{ "LuaFFIPerThreadAction", "LuaFFIPerThreadAction('return function(dq) return 0 end')",
	  "LuaFFIPerThreadAction(1)", "LuaFFIPerThreadAction: argument #1 must be a string" },
	{ "NoRecurseAction", "NoRecurseAction()", NULL, NULL },
	{ "DisableValidationAction", "DisableValidationAction()", NULL, NULL },
	{ "SkipCacheAction", "SkipCacheAction()", NULL, NULL },
	{ "TempFailureCacheTTLAction", "TempFailureCacheTTLAction(5)",
	  "TempFailureCacheTTLAction()",
	  "SetTempFailureCacheTTLAction: argument #1" },
	{ "ECSOverrideAction", "ECSOverrideAction(false)", "ECSOverrideAction()",
	  "SetECSOverrideAction: argument #1" },
	{ "ECSPrefixLengthAction", "ECSPrefixLengthAction(16, 48)", "ECSPrefixLengthAction(16)",
	  "SetECSPrefixLengthAction: argument #2" },
	{ "DisableECSAction", "DisableECSAction()", NULL, NULL },
	{ "TagAction", "TagAction('a', 'b')", "TagAction()", "SetTagAction: argument #1" },
	{ "SetNegativeAndSOAAction",
	  "SetNegativeAndSOAAction(false, 'example.', 300, 'ns.example.', 'host.example.', "
	  "1, 2, 3, 4, 5)",
	  "SetNegativeAndSOAAction(false)", "NegativeAndSOAAction:" },

	{ "AllowResponseAction", "AllowResponseAction()", NULL, NULL },
	{ "DropResponseAction", "DropResponseAction()", NULL, NULL },
	{ "DelayResponseAction", "DelayResponseAction(10)", "DelayResponseAction('x')",
	  "DelayResponseAction: argument #1 must be an integer" },
	{ "LogResponseAction", "LogResponseAction('', true)", "LogResponseAction('', 'x')",
	  "LogResponseAction: argument #2 must be a boolean" },
	{ "SetSkipCacheResponseAction", "SetSkipCacheResponseAction()", NULL, NULL },
	{ "SetTagResponseAction", "SetTagResponseAction('a', 'b')", "SetTagResponseAction(1)",
	  "SetTagResponseAction: argument #1 must be a string" },
	{ "TagResponseAction", "TagResponseAction('a', 'b')", "TagResponseAction()",
	  "SetTagResponseAction: argument #1" },
	{ "LimitTTLResponseAction", "LimitTTLResponseAction(10, 3600, {DNSQType.A, 'AAAA'})",
	  "LimitTTLResponseAction(10, 20, {'NOPE'})",
	  "LimitTTLResponseAction: unknown type 'NOPE'" },
	{ "SetMinTTLResponseAction", "SetMinTTLResponseAction(10)", "SetMinTTLResponseAction(-1)",
	  "SetMinTTLResponseAction:" },
	{ "SetMaxTTLResponseAction", "SetMaxTTLResponseAction(3600)", "SetMaxTTLResponseAction()",
	  "SetMaxTTLResponseAction:" },
	{ "SetReducedTTLResponseAction", "SetReducedTTLResponseAction(50)",
	  "SetReducedTTLResponseAction(101)", "SetReducedTTLResponseAction: 101 is out of range" },
	{ "SetMaxReturnedTTLResponseAction", "SetMaxReturnedTTLResponseAction(60)",
	  "SetMaxReturnedTTLResponseAction('x')", "SetMaxReturnedTTLResponseAction:" },
	{ "ClearRecordTypesResponseAction",
	  "ClearRecordTypesResponseAction({DNSQType.HTTPS, 'SVCB'})",
	  "ClearRecordTypesResponseAction()", "ClearRecordTypesResponseAction: argument #1" },
	{ "LuaResponseAction", "LuaResponseAction(function(dr) return DNSResponseAction.None end)",
	  "LuaResponseAction(1)", "LuaResponseAction: argument #1 must be a function" },
	{ "LuaFFIResponseAction", "LuaFFIResponseAction(function(dr) return 5 end)",
	  "LuaFFIResponseAction(1)", "LuaFFIResponseAction: argument #1 must be a function" },
	{ "LuaFFIPerThreadResponseAction",
	  "LuaFFIPerThreadResponseAction('return function(dr) return 5 end')",
	  "LuaFFIPerThreadResponseAction('syntax error')", "LuaFFIPerThreadResponseAction: " },
};

static const struct ctor_case *
find_case(const char *name)
{
	for (size_t i = 0; i < sizeof(ctor_cases) / sizeof(ctor_cases[0]); i++)
		if (strcmp(ctor_cases[i].name, name) == 0)
			return &ctor_cases[i];
	return NULL;
}

/* Every constructor of the generated reference has a case here, and each case passes. */
static void
test_catalog(void **state)
{
	struct fixture *f = *state;
	char *ref = NULL, *line, *save = NULL;
	size_t reflen = 0;
	FILE *m = open_memstream(&ref, &reflen);
	int seen = 0;
	char code[1024];

	assert_non_null(m);
	dlb_lua_rules_write_reference(m);
	assert_int_equal(fclose(m), 0);
	for (line = strtok_r(ref, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		char name[64];
		size_t n;

		if (strncmp(line, "## Rule management", 18) == 0)
			break;
		if (strncmp(line, "| `", 3) != 0)
			continue;
		n = strcspn(line + 3, "(");
		assert_true(n < sizeof(name));
		memcpy(name, line + 3, n);
		name[n] = '\0';
		if (find_case(name) == NULL)
			fail_msg("catalog entry %s has no test case", name);
		seen++;
	}
	free(ref);
	assert_int_equal(seen, (int)(sizeof(ctor_cases) / sizeof(ctor_cases[0])));

	for (size_t i = 0; i < sizeof(ctor_cases) / sizeof(ctor_cases[0]); i++) {
		const struct ctor_case *c = &ctor_cases[i];

		snprintf(code, sizeof(code),
			 "local x = %s\n"
			 "assert(type(x) == 'userdata', '%s: not an object')\n"
			 "assert(type(tostring(x)) == 'string')\n", c->good, c->name);
		run(f, code);
		if (c->bad != NULL) {
			snprintf(code, sizeof(code), "local x = %s", c->bad);
			run_fails(f, code, c->msg);
		}
	}
	/* the objects are collected without leaks (ASan) and without touching freed memory */
	run(f, "collectgarbage() collectgarbage()");
}

/* ---- descriptions: dnsdist 1.7.3's showRules texts ------------------------------ */

static const struct {
	const char *expr, *desc;
} descs[] = {
	/* selectors (DNSRule:toString()) */
	{ "AllRule()", "All" },
	{ "AndRule({QTypeRule(DNSQType.A), RDRule()})", "(qtype==A) && (rd==1)" },
	{ "OrRule({QTypeRule('AAAA'), QClassRule(3)})", "(qtype==AAAA) || (qclass==3)" },
	{ "OrRule({})", "" },
	{ "AndRule({AndRule({AllRule(), AllRule()}), NotRule(AllRule())})",
	  "((All) && (All)) && (!(All))" },
	{ "NotRule(OpcodeRule(DNSOpcode.Notify))", "!(opcode==4)" },
	{ "QNameRule('Example.COM')", "qname==Example.COM." },
	{ "QNameRule('.')", "qname==." },
	{ "QNameSetRule(ns)", "qname in DNSNameSet(2 FQDNs)" },
	{ "SuffixMatchNodeRule(smn, true)", "qname==in-set" },
	{ "QNameSuffixRule({'b.example', 'A.Example', 'z.a.example', 'a.example', 'com', 'Com.'})",
	  "qname in A.Example., z.a.example., b.example., com." },
	{ "QNameSuffixRule('foo.bar', true)", "qname==in-set" },
	{ "RegexRule('^ex.*com$')", "Regex: ^ex.*com$" },
	{ "HTTPHeaderRule('X-Route', '^blue')", "http[X-Route] ~ ^blue" },
	{ "HTTPPathRule('/dns-query')", "url path == /dns-query" },
	{ "HTTPPathRegexRule('^/dns')", "http path ~ ^/dns" },
	{ "SNIRule('dns.example')", "SNI == dns.example" },
	{ "QTypeRule(65)", "qtype==HTTPS" },
	{ "QTypeRule(1234)", "qtype==TYPE1234" },
	{ "QTypeRule('TYPE99')", "qtype==SPF" },
	{ "QClassRule(1)", "qclass==1" },
	{ "OpcodeRule(0)", "opcode==0" },
	{ "RDRule()", "rd==1" },
	{ "DNSSECRule()", "DNSSEC" },
	{ "NetmaskGroupRule(nmg)", "Src: 192.0.2.0/24" },
	{ "NetmaskGroupRule(nmg, false, true)", "Dst: in-group" },
	{ "NetmaskGroupRule('192.0.2.1')", "Src: 192.0.2.1/32" },
	{ "NetmaskGroupRule({}, false)", "Dst: " },
	{ "DSTPortRule(53)", "dst port==53" },
	{ "TCPRule(true)", "TCP" },
	{ "TCPRule(false)", "UDP" },
	{ "MaxQPSIPRule(50)", "IP (/32, /64) match for QPS over 50 burst 50" },
	{ "MaxQPSIPRule(50, 24, 48, 100, 300, 60, 10)",
	  "IP (/24, /48) match for QPS over 50 burst 100" },
	{ "MaxQPSRule(100)", "Max 100 qps" },
	{ "MaxQPSRule(100, 200)", "Max 100 qps" },
	{ "ProbaRule(0.5)", "match with prob. 0.50" },
	{ "ProbaRule(0.123)", "match with prob. 0.12" },
	{ "RCodeRule(2)", "rcode==Server Failure" },
	{ "RCodeRule(DNSRCode.NXDOMAIN)", "rcode==Non-Existent domain" },
	{ "RCodeRule(11)", "rcode==Err#11" },
	{ "ERCodeRule(16)", "ercode==Bad OPT Version / TSIG Signature Failure" },
	{ "ERCodeRule(23)", "ercode==Bad/missing Server Cookie" },
	{ "ERCodeRule(24)", "ercode==Err#24" },
	{ "EDNSOptionRule(8)", "ednsoptcode==8" },
	{ "EDNSVersionRule(0)", "ednsversion>0" },
	{ "PayloadSizeRule('greaterOrEqual', 512)",
	  "payload size is equal to or greater than 512" },
	{ "PayloadSizeRule('smaller', 100)", "payload size is smaller than 100" },
	{ "RecordsCountRule(DNSSection.Answer, 1, 5)", "1 <= records in AN <= 5" },
	{ "RecordsCountRule(0, 0, 1)", "0 <= records in QD <= 1" },
	{ "RecordsCountRule(2, 0, 1)", "0 <= records in NS <= 1" },
	{ "RecordsTypeCountRule(DNSSection.Additional, DNSQType.A, 1, 5)",
	  "1 <= A records in AR <= 5" },
	{ "RecordsTypeCountRule(1, 9999, 0, 1)", "0 <= TYPE9999 records in AN <= 1" },
	{ "QNameLabelsCountRule(2, 10)", "labels count < 2 || labels count > 10" },
	{ "QNameWireLengthRule(2, 100)", "wire length < 2 || wire length > 100" },
	{ "TrailingDataRule()", "trailing data" },
	{ "TagRule('k')", "tag 'k' is set" },
	{ "TagRule('k', 'v')", "tag 'k' is set to 'v'" },
	{ "TagRule('x', '')", "tag 'x' is set to ''" },
	{ "PoolAvailableRule('abuse')", "pool 'abuse' is available" },
	{ "PoolOutstandingRule('abuse', 10)", "pool 'abuse' outstanding > 10" },
	{ "LuaRule(function() return true end)", "Lua script" },
	/* query actions (tostring) */
	{ "NoneAction()", "no op" },
	{ "DropAction()", "drop" },
	{ "AllowAction()", "allow" },
	{ "PoolAction('abuse')", "to pool abuse" },
	{ "PoolAction('')", "to pool " },
	{ "RCodeAction(DNSRCode.REFUSED)", "set rcode 5" },
	{ "HTTPStatusAction(418, 'teapot')", "return an HTTP status of 418" },
	{ "ERCodeAction(16)", "set ercode Bad OPT Version / TSIG Signature Failure" },
	{ "ERCodeAction(3)", "set ercode Non-Existent domain" },
	{ "TCAction()", "tc=1 answer" },
	{ "SpoofAction('192.0.2.1')", "spoof in 192.0.2.1 " },
	{ "SpoofAction({'192.0.2.1', '2001:db8::1'}, {ttl=30})",
	  "spoof in 192.0.2.1 2001:db8::1 " },
	{ "SpoofCNAMEAction('Target.Example')", "spoof in Target.Example. " },
	{ "SpoofRawAction({'\\001a', '\\001b'})", "spoof in raw bytes " },
	{ "NegativeAndSOAAction(true, 'example.', 300, 'ns.example.', 'host.example.', "
	  "1, 2, 3, 4, 5)", "NXD  with SOA" },
	{ "NegativeAndSOAAction(false, 'example.', 300, 'ns', 'host', 1, 2, 3, 4, 5, {aa=true})",
	  "NODATA with SOA" },
	{ "QPSAction(100)", "qps limit to 100" },
	{ "QPSPoolAction(100, 'abuse')", "max 100 to pool abuse" },
	{ "DelayAction(100)", "delay by 100 msec" },
	{ "SetNoRecurseAction()", "set rd=0" },
	{ "NoRecurseAction()", "set rd=0" },
	{ "SetDisableValidationAction()", "set cd=1" },
	{ "SetEDNSOptionAction(65001, 'abc')", "add EDNS Option (code=65001)" },
	{ "SetSkipCacheAction()", "skip cache" },
	{ "SetTempFailureCacheTTLAction(10)", "set tempfailure cache ttl to 10" },
	{ "SetECSAction('192.0.2.0/24')", "set ECS to 192.0.2.0/24" },
	{ "SetECSAction('192.0.2.0')", "set ECS to 192.0.2.0/32" },
	{ "SetECSAction('192.0.2.1/24', '2001:db8::1/56')",
	  "set ECS to 192.0.2.0/24 / 2001:db8::/56" },
	{ "SetECSPrefixLengthAction(24, 56)", "set ECS prefix length to 24/56" },
	{ "SetECSOverrideAction(true)", "set ECS override to 1" },
	{ "ECSOverrideAction(false)", "set ECS override to 0" },
	{ "SetDisableECSAction()", "disable ECS" },
	{ "SetTagAction('k', 'v')", "set tag 'k' to value 'v'" },
	{ "SetMaxReturnedTTLAction(60)", "cap the TTL of the returned response to 60" },
	{ "LogAction()", "log" },
	{ "LuaAction(function() end)", "Lua script" },
	{ "ContinueAction(PoolAction('x'))", "continue after: to pool x" },
	{ "ContinueAction(ContinueAction(NoneAction()))", "continue after: continue after: no op" },
	/* response actions */
	{ "AllowResponseAction()", "allow" },
	{ "DropResponseAction()", "drop" },
	{ "DelayResponseAction(10)", "delay by 10 msec" },
	{ "LogResponseAction()", "log" },
	{ "SetSkipCacheResponseAction()", "skip cache" },
	{ "SetTagResponseAction('a', 'b')", "set tag 'a' to value 'b'" },
	{ "LuaResponseAction(function() end)", "Lua response script" },
	{ "LimitTTLResponseAction(10, 3600, {DNSQType.A, 'AAAA'})",
	  "limit ttl (10 <= ttl <= 3600, types in [A AAAA])" },
	{ "SetMinTTLResponseAction(10)", "limit ttl (10 <= ttl <= 4294967295)" },
	{ "SetMaxTTLResponseAction(3600)", "limit ttl (0 <= ttl <= 3600)" },
	{ "SetReducedTTLResponseAction(50)", "reduce ttl to 50.000000 percent of its value" },
	{ "SetMaxReturnedTTLResponseAction(60)", "cap the TTL of the returned response to 60" },
	{ "ClearRecordTypesResponseAction(DNSQType.HTTPS)", "clear record types" },
};

static void
test_descriptions(void **state)
{
	struct fixture *f = *state;
	char code[1024];

	run(f, "ns = newDNSNameSet() ns:add(newDNSName('a.example.')) "
	       "ns:add(newDNSName('b.example.'))\n"
	       "smn = newSuffixMatchNode() smn:add('foo.example.')\n"
	       "nmg = newNMG() nmg:addMask('192.0.2.0/24')\n");
	for (size_t i = 0; i < sizeof(descs) / sizeof(descs[0]); i++) {
		snprintf(code, sizeof(code),
			 "local got = tostring(%s)\n"
			 "assert(got == [==[%s]==], 'got [' .. got .. ']')\n",
			 descs[i].expr, descs[i].desc);
		run(f, code);
	}
	/* DNSRule has toString() (dnsdist 1.7); actions do not */
	run(f, "assert(QTypeRule('A'):toString() == 'qtype==A')\n"
	       "assert(DropAction().toString == nil)\n"
	       "assert(type(DropAction().printStats) == 'function')\n"
	       "assert(DropAction():getStats()[''] == 0)\n"
	       "assert(DropResponseAction().printStats == nil)\n"
	       "assert(type(DropResponseAction().reload) == 'function')\n"
	       "DropAction():printStats() assert(out[#out] == '\\t0')\n");
	/* a SuffixMatchNode object: the rule copies it, later additions do not change it */
	run(f, "local s = newSuffixMatchNode() s:add('a.example.')\n"
	       "local r = SuffixMatchNodeRule(s)\n"
	       "s:add('b.example.')\n"
	       "assert(tostring(r) == 'qname in a.example.', tostring(r))\n");
}

/* ---- chains -------------------------------------------------------------------------- */

static void
expect_chain(enum dlb_chain_kind k, const char *const *names, int n)
{
	const struct dlb_chain *c = chain(k);

	assert_int_equal(c->n, n);
	for (int i = 0; i < n; i++)
		if (strcmp(c->v[i]->name, names[i]) != 0)
			fail_msg("rule #%d is '%s', expected '%s'", i, c->v[i]->name, names[i]);
}

static void
test_chain_editing(void **state)
{
	struct fixture *f = *state;
	const struct dlb_chain *c;
	char code[256];

	run(f, "addAction(AllRule(), NoneAction(), {name='a'})\n"
	       "addAction(QTypeRule('A'), DropAction(), {name='b', "
	       "uuid='9802EF76-862E-4456-AB07-41E7F9BFF8E3'})\n"
	       "addAction('example.org.', PoolAction('p'), {name='c'})\n"
	       "addAction({'192.0.2.0/24'}, AllowAction(), {name='d'})\n");
	{
		static const char *const want[] = { "a", "b", "c", "d" };

		expect_chain(DLB_CHAIN_QUERY, want, 4);
	}
	c = chain(DLB_CHAIN_QUERY);
	assert_string_equal(c->v[0]->sel->desc, "All");
	assert_string_equal(c->v[0]->act->desc, "no op");
	assert_string_equal(c->v[1]->uuid, "9802ef76-862e-4456-ab07-41e7f9bff8e3");
	assert_string_equal(c->v[2]->sel->desc, "qname in example.org.");
	assert_string_equal(c->v[2]->act->desc, "to pool p");
	assert_string_equal(c->v[3]->sel->desc, "Src: 192.0.2.0/24");
	assert_int_equal(strlen(c->v[0]->uuid), 36);
	assert_true(c->v[0]->creation < c->v[1]->creation);

	/* mvRule: dnsdist's semantics (to = count moves to the end) */
	run(f, "mvRule(0, 2)");
	{
		static const char *const want[] = { "b", "a", "c", "d" };

		expect_chain(DLB_CHAIN_QUERY, want, 4);
	}
	run(f, "mvRule(3, 0)");
	{
		static const char *const want[] = { "d", "b", "a", "c" };

		expect_chain(DLB_CHAIN_QUERY, want, 4);
	}
	run(f, "mvRule(0, 4)");
	{
		static const char *const want[] = { "b", "a", "c", "d" };

		expect_chain(DLB_CHAIN_QUERY, want, 4);
	}
	run(f, "mvRuleToTop()");
	{
		static const char *const want[] = { "d", "b", "a", "c" };

		expect_chain(DLB_CHAIN_QUERY, want, 4);
	}
	/* bad positions print dnsdist's message and change nothing */
	run(f, "local mv = 'Error: attempt to move rules from/to invalid index'\n"
	       "mvRule(4, 0) assert(out[#out] == mv)\n"
	       "mvRule(0, 5) assert(out[#out] == mv)\n"
	       "rmRule(4) assert(out[#out] == 'Error: attempt to delete non-existing rule')\n"
	       "rmRule('nosuch') assert(out[#out] == 'Error: no rule matched')\n"
	       "rmRule('00000000-0000-4000-8000-000000000000')\n"
	       "assert(out[#out] == 'Error: no rule matched')\n");
	assert_int_equal(chain(DLB_CHAIN_QUERY)->n, 4);
	run_fails(f, "mvRule(-1, 0)", "mvRule: -1 is out of range");
	run_fails(f, "rmRule({})", "rmRule: argument #1 must be a position, a name or a UUID");

	/* rmRule by position, by name, by UUID (any case) */
	run(f, "rmRule(1)");
	{
		static const char *const want[] = { "d", "a", "c" };

		expect_chain(DLB_CHAIN_QUERY, want, 3);
	}
	run(f, "rmRule('c')");
	{
		static const char *const want[] = { "d", "a" };

		expect_chain(DLB_CHAIN_QUERY, want, 2);
	}
	snprintf(code, sizeof(code), "rmRule(string.upper('%s'))",
		 chain(DLB_CHAIN_QUERY)->v[1]->uuid);
	run(f, code);
	{
		static const char *const want[] = { "d" };

		expect_chain(DLB_CHAIN_QUERY, want, 1);
	}
	/* every rule with the name goes (dnsdist) */
	run(f, "addAction(AllRule(), DropAction(), {name='x'})\n"
	       "addAction(AllRule(), DropAction(), {name='x'})\n"
	       "rmRule('x')");
	{
		static const char *const want[] = { "d" };

		expect_chain(DLB_CHAIN_QUERY, want, 1);
	}
	run(f, "clearRules()");
	assert_int_equal(chain(DLB_CHAIN_QUERY)->n, 0);
	run(f, "mvRuleToTop() clearRules()");
	assert_int_equal(chain(DLB_CHAIN_QUERY)->n, 0);

	/* options */
	run_fails(f, "addAction(AllRule(), DropAction(), {uuid='not-a-uuid'})",
		  "addAction: invalid uuid string 'not-a-uuid'");
	run_fails(f, "addAction(AllRule(), DropAction(), 'x')",
		  "addAction: argument #3 must be a table of options");
	run_fails(f, "addAction(AllRule())", "addAction: argument #2 must be an action");
	run_fails(f, "addAction(5, DropAction())", "addAction: a selector must be");
	run(f, "addAction(AllRule(), DropAction(), {name=5})");
	assert_string_equal(chain(DLB_CHAIN_QUERY)->v[0]->name, "5");
	run(f, "clearRules()");

	/* setRules / newRuleAction / getAction; the rule objects keep their counters */
	run(f, "local r1 = newRuleAction(AllRule(), DropAction(), {name='x'})\n"
	       "local r2 = newRuleAction('a.b', AllowAction())\n"
	       "setRules({r1, r2})\n"
	       "assert(tostring(getAction(0)) == 'drop')\n"
	       "assert(tostring(getAction(1)) == 'allow')\n"
	       "assert(getAction(2) == nil)\n");
	c = chain(DLB_CHAIN_QUERY);
	assert_int_equal(c->n, 2);
	assert_string_equal(c->v[0]->name, "x");
	assert_string_equal(c->v[1]->sel->desc, "qname in a.b.");
	run_fails(f, "setRules({AllRule()})", "setRules: element #1 must be a rule");
	run_fails(f, "setRules({newRuleAction(AllRule(), DropResponseAction())})",
		  "setRules() can only be called with query-related actions");
	run(f, "setResponseRules({newRuleAction(AllRule(), DropResponseAction(), {name='r'})})");
	assert_int_equal(chain(DLB_CHAIN_RESPONSE)->n, 1);
	assert_string_equal(chain(DLB_CHAIN_RESPONSE)->v[0]->name, "r");
	run(f, "setRules({})");
	assert_int_equal(chain(DLB_CHAIN_QUERY)->n, 0);

	/* the other chains */
	run(f, "addCacheHitResponseAction(AllRule(), AllowResponseAction(), {name='ch'})\n"
	       "addSelfAnsweredResponseAction(AllRule(), AllowResponseAction(), {name='sa'})\n"
	       "addCacheInsertedResponseAction(AllRule(), SetMaxReturnedTTLResponseAction(5), "
	       "{name='ci'})\n"
	       "addResponseAction(RCodeRule(DNSRCode.SERVFAIL), LogResponseAction(''), "
	       "{name='r2'})\n"
	       "mvResponseRule(1, 0) rmCacheHitResponseRule('ch') "
	       "mvSelfAnsweredResponseRuleToTop()\n");
	{
		static const char *const want[] = { "r2", "r" };

		expect_chain(DLB_CHAIN_RESPONSE, want, 2);
	}
	assert_int_equal(chain(DLB_CHAIN_CACHE_HIT)->n, 0);
	assert_int_equal(chain(DLB_CHAIN_SELF_ANSWERED)->n, 1);
	assert_string_equal(chain(DLB_CHAIN_CACHE_INSERTED)->v[0]->act->desc,
			    "cap the TTL of the returned response to 5");
	run(f, "clearResponseRules() clearSelfAnsweredResponseRules() "
	       "clearCacheInsertedResponseRules()");
	assert_int_equal(chain(DLB_CHAIN_RESPONSE)->n, 0);
	assert_int_equal(chain(DLB_CHAIN_SELF_ANSWERED)->n, 0);
	assert_int_equal(chain(DLB_CHAIN_CACHE_INSERTED)->n, 0);
}

static void
test_chain_action_mismatch(void **state)
{
	struct fixture *f = *state;

	run_fails(f, "addCacheHitResponseAction(AllRule(), NoneAction())",
		  "addCacheHitResponseAction() can only be called with response-related actions, "
		  "not query-related ones. Are you looking for addAction()?");
	run_fails(f, "addResponseAction(AllRule(), NoneAction())",
		  "addResponseAction() can only be called with response-related actions, not "
		  "query-related ones. Are you looking for addAction()?");
	run_fails(f, "addSelfAnsweredResponseAction(AllRule(), DropAction())",
		  "addSelfAnsweredResponseAction() can only be called with response-related "
		  "actions");
	run_fails(f, "addCacheInsertedResponseAction(AllRule(), DropAction())",
		  "addCacheInsertedResponseAction() can only be called with response-related "
		  "actions");
	run_fails(f, "addAction(AllRule(), DropResponseAction())",
		  "addAction() can only be called with query-related actions, not response-related "
		  "ones. Are you looking for addResponseAction()?");
	for (int k = 0; k < DLB_CHAIN__COUNT; k++)
		assert_int_equal(chain((enum dlb_chain_kind)k)->n, 0);
}

static void
test_show_rules(void **state)
{
	struct fixture *f = *state;

	run(f, "addAction(AllRule(), NoneAction())\n"
	       "addAction(AndRule({QTypeRule(DNSQType.A), RDRule()}), DropAction(), {name='andr', "
	       "uuid='1f7b940f-ed23-46bb-b42c-7d2005ab525e'})\n"
	       "addAction(QNameRule('Example.COM'), PoolAction('p2'))\n");
	/* dnsdist 1.7.3's layout, byte for byte */
	run(f, "out = {} showRules()\n"
	       "assert(#out == 4, #out)\n"
	       "assert(out[1] == '#   Name                             Matches Rule"
	       "                                                     Action', out[1])\n"
	       "assert(out[2] == '0                                          0 All"
	       "                                                      no op', out[2])\n"
	       "assert(out[3] == '1   andr                                   0 "
	       "(qtype==A) && (rd==1)                                    drop', out[3])\n"
	       "assert(out[4] == '2                                          0 qname==Example.COM."
	       "                                      to pool p2', out[4])\n");
	run(f, "out = {} showRules({truncateRuleWidth=20})\n"
	       "assert(out[3] == '1   andr                                   0 (qtype==A) && (rd==1"
	       "                                     drop', out[3])\n");
	run(f, "out = {} showRules({showUUIDs=true})\n"
	       "local h = '#   Name' .. (' '):rep(27) .. 'UUID' .. (' '):rep(35) ..\n"
	       "  'Cr. Order   Matches Rule' .. (' '):rep(53) .. 'Action'\n"
	       "assert(out[1] == h, out[1])\n"
	       "assert(out[3]:match('^1   andr                           '\n"
	       "  .. '1f7b940f%-ed23%-46bb%-b42c%-7d2005ab525e +%d+         0 '\n"
	       "  .. '%(qtype==A%) && %(rd==1%) +drop$'), out[3])\n");
	/* topRules returns the text (with its final newline) */
	run(f, "local t = topRules(2)\n"
	       "assert(type(t) == 'string')\n"
	       "local n = 0 for _ in t:gmatch('\\n') do n = n + 1 end\n"
	       "assert(n == 3, t)\n"
	       "assert(t:sub(1, 8) == '#   Name')\n"
	       "assert(t:find('0                                          0 All ', 1, true))\n"
	       "local g = getTopRules(1) assert(#g == 1)\n"
	       "assert(tostring(g[1]) == 'DNSDistRuleAction(All, no op)', tostring(g[1]))\n"
	       "assert(#getTopRules() == 3)\n"
	       "setRules(getTopRules(2))\n");
	assert_int_equal(chain(DLB_CHAIN_QUERY)->n, 2);
	run(f, "out = {} showResponseRules()\n"
	       "assert(#out == 1 and out[1]:sub(1, 8) == '#   Name')\n"
	       "out = {} showCacheHitResponseRules() showSelfAnsweredResponseRules()\n"
	       "showCacheInsertedResponseRules()\n"
	       "assert(#out == 3)\n");
	run_fails(f, "showRules(5)", "showRules: argument #1 must be a table of options");
}

static void
test_make_rule(void **state)
{
	struct fixture *f = *state;

	run(f, "assert(makeRule('Foo.Bar'):toString() == 'qname in Foo.Bar.')\n"
	       "assert(makeRule('192.0.2.0/24'):toString() == 'Src: 192.0.2.0/24')\n"
	       "assert(makeRule('::1'):toString() == 'Src: ::1/128')\n"
	       "assert(makeRule({'10.0.0.0/8', '192.0.2.1'}):toString() == "
	       "'Src: 10.0.0.0/8, 192.0.2.1/32')\n"
	       "assert(makeRule({'a.example', 'b.example'}):toString() == "
	       "'qname in a.example., b.example.')\n"
	       "assert(makeRule(newDNSName('x.example')):toString() == 'qname in x.example.')\n"
	       "assert(makeRule({newDNSName('x.example'), 'y.example'}):toString() == "
	       "'qname in x.example., y.example.')\n"
	       "assert(makeRule({}):toString() == 'qname in ')\n"
	       "local r = AllRule() assert(makeRule(r) == r)\n");
	run_fails(f, "makeRule({'a.example', '192.0.2.1'})",
		  "makeRule: a table of selectors must hold only netmasks or only names "
		  "('a.example' is not a netmask)");
	run_fails(f, "makeRule({'a..example'})", "makeRule: bad name");
	run_fails(f, "makeRule({{}})", "makeRule: element #1 must be a name");
	/* the shorthand everywhere a selector goes */
	run(f, "addAction('example.com', DropAction())\n"
	       "addAction({'192.0.2.0/24', '2001:db8::/32'}, DropAction())\n"
	       "addResponseAction('example.net.', AllowResponseAction())\n");
	assert_string_equal(chain(DLB_CHAIN_QUERY)->v[0]->sel->desc, "qname in example.com.");
	assert_int_equal(chain(DLB_CHAIN_QUERY)->v[0]->sel->type, DLB_SEL_SUFFIX);
	assert_int_equal(chain(DLB_CHAIN_QUERY)->v[1]->sel->type, DLB_SEL_NMG);
	assert_true(chain(DLB_CHAIN_QUERY)->v[1]->sel->u.nmg.src);
	assert_string_equal(chain(DLB_CHAIN_RESPONSE)->v[0]->sel->desc, "qname in example.net.");
}

/* The C objects the constructors build. */
static void
test_objects(void **state)
{
	struct fixture *f = *state;
	const struct dlb_chain *c;

	run(f, "addAction(QTypeRule('AAAA'), PoolAction('p', false))\n"
	       "addAction(MaxQPSIPRule(10, 24, 56), SpoofAction({'192.0.2.1', '2001:db8::1'}, "
	       "{aa=true, ra=false, ttl=30}))\n"
	       "addAction(NotRule(RDRule()), NegativeAndSOAAction(true, 'Example.', 300, "
	       "'ns.example.', 'host.example.', 1, 2, 3, 4, 5, {soaInAuthoritySection=true}))\n"
	       "addAction(LuaRule(function(dq) return true end), SetECSAction('192.0.2.0/24'))\n"
	       "addResponseAction(AllRule(), LimitTTLResponseAction(5, 50, {'A', 28}))\n");
	c = chain(DLB_CHAIN_QUERY);
	assert_int_equal(c->v[0]->sel->u.num, 28);
	assert_string_equal(c->v[0]->act->u.pool.name, "p");
	assert_false(c->v[0]->act->u.pool.stop);
	assert_non_null(c->v[1]->sel->u.qpsip);
	assert_int_equal(c->v[1]->act->u.spoof.naddrs, 2);
	assert_true(c->v[1]->act->u.spoof.o.aa);
	assert_true(c->v[1]->act->u.spoof.o.ra_set);
	assert_false(c->v[1]->act->u.spoof.o.ra);
	assert_int_equal(c->v[1]->act->u.spoof.o.ttl, 30);
	assert_int_equal(c->v[2]->sel->type, DLB_SEL_NOT);
	assert_int_equal(c->v[2]->sel->u.sub->type, DLB_SEL_RD);
	assert_true(c->v[2]->act->u.soa.nxd);
	assert_true(c->v[2]->act->u.soa.soa_in_authority);
	assert_int_equal(c->v[2]->act->u.soa.zone_len, 9);
	assert_memory_equal(c->v[2]->act->u.soa.zone, "\7Example\0", 9);
	assert_int_equal(c->v[2]->act->u.soa.minimum, 5);
	assert_true(c->v[3]->sel->u.lua.fn >= 1);
	assert_non_null(strstr(c->v[3]->sel->u.lua.src, "t:"));
	assert_int_equal(c->v[3]->act->u.ecs.bits4, 24);
	assert_int_equal(c->v[3]->act->u.ecs.v4.ss_family, AF_INET);
	assert_int_equal(c->v[3]->act->u.ecs.v6.ss_family, 0);
	c = chain(DLB_CHAIN_RESPONSE);
	assert_int_equal(c->v[0]->act->u.ttl.ntypes, 2);
	assert_int_equal(c->v[0]->act->u.ttl.types[0], 1);
	assert_int_equal(c->v[0]->act->u.ttl.types[1], 28);
	assert_true(c->v[0]->act->response);
	/* the default: the SOA in the additional section, as dnsdist */
	run(f, "setRules({newRuleAction(AllRule(), NegativeAndSOAAction(false, 'e.', 1, 'n.', "
	       "'h.', 1, 2, 3, 4, 5))})");
	assert_false(chain(DLB_CHAIN_QUERY)->v[0]->act->u.soa.soa_in_authority);
}

static void
test_log_action(void **state)
{
	struct fixture *f = *state;
	char dir[] = "/tmp/test_lua_rules.XXXXXX", code[2048], path[600];

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/q.log", dir);
	snprintf(code, sizeof(code),
		 "local a = LogAction('%s', false, true, false, false, true)\n"
		 "assert(tostring(a) == 'log to %s')\n"
		 "a:reload()\n"
		 "local r = LogResponseAction('%s', true)\n"
		 "r:reload()\n", path, path, path);
	run(f, code);
	assert_int_equal(access(path, F_OK), 0);
	run(f, "collectgarbage()");
	unlink(path);
	rmdir(dir);
}

/* A worker state replaying the config: objects are built, nothing is published or printed. */
static void
test_worker_phase(void **state)
{
	struct fixture *f = fixture_new(DLB_LUA_PHASE_WORKER);

	(void)state;
	run(f, "addAction(AllRule(), DropAction(), {name='w'})\n"
	       "addResponseAction('example.com', AllowResponseAction())\n"
	       "setRules({newRuleAction(AllRule(), DropAction())})\n"
	       "local r = LuaRule(function() return true end)\n"
	       "showRules() rmRule(5) mvRule(7, 9) clearRules() mvRuleToTop()\n"
	       "NoRecurseAction():printStats()\n"
	       "assert(#out == 0)\n"
	       "local l = LogAction('/nonexistent-dir/never-opened.log')\n");
	for (int k = 0; k < DLB_CHAIN__COUNT; k++)
		assert_int_equal(chain((enum dlb_chain_kind)k)->n, 0);
	/* arguments are still checked */
	run_fails(f, "addAction(AllRule(), DropResponseAction())",
		  "addAction() can only be called with query-related actions");
	run_fails(f, "addAction(AllRule(), DropAction(), {uuid='x'})", "invalid uuid string");
	run_fails(f, "QTypeRule('nope')", "unknown type");
	fixture_free(f);
}

/* At runtime (the console) the old chains are retired through the RCU record. */
static void
test_running_phase(void **state)
{
	struct fixture *f = fixture_new(DLB_LUA_PHASE_RUNNING);
	struct dlb_rcu_thread rt;

	(void)state;
	assert_int_equal(dlb_rcu_register(&rt), 0);
	dlb_lua_conf_set_rcu(f->lc, &rt);
	run(f, "addAction(AllRule(), DropAction(), {name='a'})\n"
	       "addAction(RDRule(), AllowAction(), {name='b'})\n"
	       "mvRule(1, 0) rmRule('a') addAction(AllRule(), NoneAction())\n"
	       "out = {} showRules() assert(#out == 3)\n");
	{
		static const char *const want[] = { "b", "" };

		expect_chain(DLB_CHAIN_QUERY, want, 2);
	}
	dlb_rcu_barrier(&rt);
	run(f, "clearRules()");
	dlb_rcu_barrier(&rt);
	dlb_lua_conf_set_rcu(f->lc, NULL);
	fixture_free(f);
	dlb_rcu_unregister(&rt);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_catalog, setup, teardown),
		cmocka_unit_test_setup_teardown(test_descriptions, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chain_editing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chain_action_mismatch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_show_rules, setup, teardown),
		cmocka_unit_test_setup_teardown(test_make_rule, setup, teardown),
		cmocka_unit_test_setup_teardown(test_objects, setup, teardown),
		cmocka_unit_test_setup_teardown(test_log_action, setup, teardown),
		cmocka_unit_test(test_worker_phase),
		cmocka_unit_test(test_running_phase),
	};

	dlb_rcu_init();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
