/*
 * lua_reference.c - the one table of the Lua objects (lua_reference.h) and
 * the writer of docs/lua-reference.md.
 *
 * A member added to an object in lua/worker.c, lua/objects.c or lua/conf.c
 * needs a line here: tests/unit/test_lua_reference.c compares this table
 * with the metatables (and, for the objects whose __index is a function,
 * with the names their C dispatch compares), and the docs_lua_reference test
 * compares docs/lua-reference.md with the writer's output.
 *
 * Texts follow docs/lua.md, docs/configuration.md and docs/cache.md, shortened
 * to one line; the narrative (limits, errors, return values) stays there.
 */
#include "lua/lua_reference.h"

#include <stdbool.h>
#include <stdio.h>

#define OBJ(obj, mt, inst, intro)	{ obj, mt, DLB_LREF_OBJECT, inst, intro }
#define CTOR(obj, n, sig, doc)		{ obj, n, DLB_LREF_CONSTRUCTOR, sig, doc }
#define FUNC(obj, n, sig, doc)		{ obj, n, DLB_LREF_FUNCTION, sig, doc }
#define FR(obj, n, type, doc)		{ obj, n, DLB_LREF_FIELD_R, type, doc }
#define FRW(obj, n, type, doc)		{ obj, n, DLB_LREF_FIELD_RW, type, doc }
#define METH(obj, n, sig, doc)		{ obj, n, DLB_LREF_METHOD, sig, doc }
#define OP(obj, n, use, doc)		{ obj, n, DLB_LREF_OPERATOR, use, doc }

const struct dlb_lref dlb_lua_reference[] = {
	/* ---- lua/worker.c ---- */
	OBJ("dq and dr", "DNSQuestion", "dq",
	    "The object a `LuaRule`, `LuaAction` or `LuaResponseAction` function receives: `dq` "
	    "for queries, `dr` for responses (the same type; the response methods make sense "
	    "on `dr` only). Valid only during the call: a `dq` kept and used later raises "
	    "`this DNSQuestion is gone`. Reading an unknown field gives `nil`; writing a "
	    "read-only or unknown field raises `dq.<name> is read-only or unknown`."),
	FR("dq and dr", "qname", "DNSName",
	   "The name asked, in the client's case (a new object each time)."),
	FR("dq and dr", "qtype", "number", "The query type; compare with `DNSQType.A`, ..."),
	FR("dq and dr", "qclass", "number", "The query class; compare with `DNSClass.IN`, ..."),
	FR("dq and dr", "remoteaddr", "ComboAddress", "The client."),
	FR("dq and dr", "localaddr", "ComboAddress or nil",
	   "The address the query was sent to, when known."),
	FR("dq and dr", "dh", "DNSHeader", "The header (see [dq.dh](#dqdh))."),
	FRW("dq and dr", "rcode", "number",
	    "The header's rcode; writing sets it in the packet (use with `HeaderModify`)."),
	FR("dq and dr", "opcode", "number", "`DNSOpcode.Query`, ..."),
	FR("dq and dr", "len", "number", "The message length."),
	FR("dq and dr", "size", "number", "The buffer size: how long the message may grow."),
	FR("dq and dr", "tcp", "boolean", "Received over TCP."),
	FRW("dq and dr", "skipCache", "boolean",
	    "Do not look up or store this query in the packet cache."),
	FRW("dq and dr", "tempFailureTTL", "number or nil",
	    "The cache TTL of a SERVFAIL/REFUSED answer to this query; nil: the cache's."),
	FRW("dq and dr", "pool", "string",
	    "The pool chosen so far (`\"\"`: the default); writing chooses one (as `PoolAction`, "
	    "but the rules go on)."),
	FRW("dq and dr", "useECS", "boolean",
	    "Add EDNS Client Subnet if the server wants it (default true)."),
	FRW("dq and dr", "ecsOverride", "boolean", "Replace the client's own ECS option."),
	FRW("dq and dr", "ecsPrefixLength", "number",
	    "The ECS prefix length for the client's address family."),
	METH("dq and dr", "getTag", "(key)", "The tag's value, `\"\"` when not set (as dnsdist 1.7)."),
	METH("dq and dr", "setTag", "(key, value)",
	     "Sets a tag (strings; a number is turned into a string). Tags go with the query to "
	     "its response rules; they hold 240 bytes in all, a tag that does not fit raises."),
	METH("dq and dr", "unsetTag", "(key)", "Removes a tag."),
	METH("dq and dr", "getTagArray", "()", "All tags as a table `{key = value}`."),
	METH("dq and dr", "setTagArray", "(t)",
	     "Sets every `key = value` of `t` (all, or none if they do not fit)."),
	METH("dq and dr", "getDO", "()",
	     "The DO bit of the query's EDNS (in response rules, of the response's OPT RR)."),
	METH("dq and dr", "getProtocol", "()",
	     "`\"Do53 UDP\"`, `\"Do53 TCP\"`, `\"DNS over TLS\"` or `\"DNS over HTTPS\"` (query "
	     "rules; response rules see DoT and DoH as Do53 TCP)."),
	METH("dq and dr", "getHTTPPath", "()",
	     "DNS over HTTPS, query rules: the request's path as the client sent it, without its "
	     "query string; `\"\"` for any other query (doh.md)."),
	METH("dq and dr", "getHTTPQueryString", "()",
	     "DNS over HTTPS: the query string with its `?` (`\"\"` without one); else `\"\"`."),
	METH("dq and dr", "getHTTPScheme", "()",
	     "DNS over HTTPS: `\"https\"` or `\"http\"` (HTTP/2: the request's `:scheme`); else "
	     "`\"\"`."),
	METH("dq and dr", "getHTTPHost", "()",
	     "DNS over HTTPS: `:authority` or `Host` (without either, the listener's address "
	     "without its port); else `\"\"`."),
	METH("dq and dr", "getHTTPHeaders", "()",
	     "DNS over HTTPS: the request's header fields as `{name = value}`, names in "
	     "lowercase, the first value of a name sent twice, without `host`, `content-length`, "
	     "`transfer-encoding`, `upgrade` and `expect` (as dnsdist 1.7.3); else `{}`."),
	METH("dq and dr", "setHTTPResponse", "(status, body[, contentType])",
	     "DNS over HTTPS, query rules: the HTTP answer the query gets once the rules answer "
	     "it (`dq.dh:setQR(true)` and `return DNSAction.HeaderModify`), as "
	     "HTTPStatusAction's; does nothing for any other query."),
	METH("dq and dr", "getServerNameIndication", "()",
	     "DNS over TLS: the server name the client sent (TLS SNI); `\"\"` without one, and "
	     "for any other query (DNS over HTTPS included, as dnsdist 1.7.3)."),
	METH("dq and dr", "getContent", "()", "The whole message as a string."),
	METH("dq and dr", "setContent", "(s)",
	     "Replaces the whole message; it must fit in `size` and parse (as a query, or as a "
	     "response in response rules). The fields then describe the new message."),
	METH("dq and dr", "getElapsedUs", "()", "Microseconds since the query arrived."),
	METH("dq and dr", "getEDNSOptions", "()", "A table of EDNSOptionView keyed by option code (`:count()`, `:getValues()`: the values of the options of that code); empty without an OPT RR."),
	METH("dq and dr", "getTrailingData", "()", "The octets after the last record (`\"\"` if none)."),
	METH("dq and dr", "setTrailingData", "(s)", "Replace the octets after the last record by `s` (`\"\"` removes them); false if the message would pass 65535 bytes."),
	METH("dq and dr", "spoof", "(x)",
	     "Queries only: turns the query into an answer in place, then `return "
	     "DNSAction.HeaderModify`. `x`: an address (ComboAddress or string) or a table of "
	     "them (A/AAAA records), a name (a CNAME), or a table of raw rdatas. TTL 60."),
	METH("dq and dr", "editTTLs", "(f)",
	     "Responses only: calls `f(section, qclass, qtype, ttl)` for every record but OPT "
	     "(section 1 answer, 2 authority, 3 additional) and sets the TTL to what it returns "
	     "(`nil`: unchanged)."),
	METH("dq and dr", "getSelectedBackend", "()",
	     "Responses: the name of the server that answered, or nil."),
	OP("dq and dr", "__tostring", "tostring(dq)", "`\"DNSQuestion\"`."),

	OBJ("dq.dh", "DNSHeader", "dq.dh",
	    "The header of the message. The setters change the packet itself: "
	    "`dq.dh:setRD(false)` sends the query on without RD. Like `dq`, valid only during "
	    "the call."),
	METH("dq.dh", "getRD", "()", "Recursion desired."),
	METH("dq.dh", "setRD", "(bool)", "Sets or clears RD."),
	METH("dq.dh", "getCD", "()", "Checking disabled."),
	METH("dq.dh", "setCD", "(bool)", "Sets or clears CD."),
	METH("dq.dh", "getAD", "()", "Authentic data."),
	METH("dq.dh", "setAD", "(bool)", "Sets or clears AD."),
	METH("dq.dh", "getAA", "()", "Authoritative answer."),
	METH("dq.dh", "setAA", "(bool)", "Sets or clears AA."),
	METH("dq.dh", "getRA", "()", "Recursion available."),
	METH("dq.dh", "setRA", "(bool)", "Sets or clears RA."),
	METH("dq.dh", "getTC", "()", "Truncated."),
	METH("dq.dh", "setTC", "(bool)", "Sets or clears TC."),
	METH("dq.dh", "getQR", "()", "The message is a response."),
	METH("dq.dh", "setQR", "(bool)", "Sets or clears QR."),
	METH("dq.dh", "getID", "()", "The message ID."),
	OP("dq.dh", "__tostring", "tostring(dq.dh)", "`\"DNSHeader\"`."),

	/* ---- lua/objects.c ---- */
	OBJ("DNSName", "DNSName", "n",
	    "A domain name. The case is kept; comparisons ignore it. Where a method takes a "
	    "name, a string works too."),
	CTOR("DNSName", "newDNSName", "(text)",
	     "`\"www.example.com\"`; the final dot is optional, `\"\"` is the root; `\\.` and "
	     "`\\DDD` escapes are understood."),
	CTOR("DNSName", "newDNSNameFromRaw", "(wire)", "From wire format."),
	METH("DNSName", "toString", "()", "`\"www.example.com.\"`, `\".\"` for the root."),
	METH("DNSName", "tostring", "()", "Same as `toString()`."),
	METH("DNSName", "toStringNoDot", "()", "`\"www.example.com\"` (`\"\"` for the root)."),
	METH("DNSName", "toDNSString", "()", "The wire form."),
	METH("DNSName", "isPartOf", "(name)", "At or below `name` (a DNSName or a string)."),
	METH("DNSName", "countLabels", "()", "The number of labels: `3` for www.example.com."),
	METH("DNSName", "wirelength", "()", "The length of the wire form: `17` for www.example.com."),
	METH("DNSName", "wireLength", "()", "Same as `wirelength()`."),
	METH("DNSName", "chopOff", "()",
	     "Removes the first label in place; `false` (unchanged) for the root."),
	METH("DNSName", "hash", "([init])",
	     "dnsdist's case-insensitive hash of the name (the same numbers, for consistent "
	     "hashing in Lua)."),
	METH("DNSName", "equal", "(name)", "Same name, ignoring case (a DNSName or a string)."),
	METH("DNSName", "isRoot", "()", "The root."),
	METH("DNSName", "empty", "()", "Always `false` for a name made from text."),
	OP("DNSName", "__eq", "n1 == n2",
	   "Same name, ignoring case; two DNSNames only (`dq.qname == \"a.example.\"` is always "
	   "false, use `equal`)."),
	OP("DNSName", "__tostring", "tostring(n)", "Same as `toString()`."),

	OBJ("ComboAddress", "ComboAddress", "ca",
	    "An IP address and a port. `dq.remoteaddr` and `dq.localaddr` are ComboAddresses."),
	CTOR("ComboAddress", "newCA", "(text)",
	     "`\"192.0.2.1\"`, `\"192.0.2.1:53\"`, `\"[2001:db8::1]:53\"`."),
	CTOR("ComboAddress", "newCAFromRaw", "(raw[, port])",
	     "4 or 16 octets in network order (other lengths raise)."),
	METH("ComboAddress", "toString", "()", "`\"192.0.2.1\"`, `\"2001:db8::1\"`."),
	METH("ComboAddress", "tostring", "()", "Same as `toString()`."),
	METH("ComboAddress", "toStringWithPort", "()", "`\"192.0.2.1:53\"`, `\"[2001:db8::1]:53\"`."),
	METH("ComboAddress", "tostringWithPort", "()", "Same as `toStringWithPort()`."),
	METH("ComboAddress", "getPort", "()", "The port."),
	METH("ComboAddress", "isIPv4", "()", "An IPv4 address."),
	METH("ComboAddress", "isIPv6", "()", "An IPv6 address."),
	METH("ComboAddress", "truncate", "(bits)", "Keeps the first `bits` of the address, in place."),
	METH("ComboAddress", "isMappedIPv4", "()", "An IPv4-mapped IPv6 address (`::ffff:192.0.2.1`)."),
	METH("ComboAddress", "mapToIPv4", "()", "`::ffff:192.0.2.1` as `192.0.2.1`."),
	METH("ComboAddress", "ipencrypt", "(key)",
	     "The address pseudonymised with ipcipher (`makeIPCipherKey`; IPv4: ipcrypt, IPv6: "
	     "AES-128), the port kept; a key that is not 16 bytes raises."),
	METH("ComboAddress", "ipdecrypt", "(key)", "The reverse of `ipencrypt`."),
	OP("ComboAddress", "__eq", "a == b", "Same address and port."),
	OP("ComboAddress", "__tostring", "tostring(ca)", "Same as `toString()`."),

	OBJ("Netmask", "Netmask", "nm", "An address and a prefix length."),
	CTOR("Netmask", "newNetmask", "(text) / (ca, bits)",
	     "`newNetmask(\"192.0.2.0/24\")` or `newNetmask(ca, bits)`; a bad length raises."),
	METH("Netmask", "getNetwork", "()", "The network (a ComboAddress)."),
	METH("Netmask", "getMaskedNetwork", "()", "Same as `getNetwork()`."),
	METH("Netmask", "getBits", "()", "The prefix length."),
	METH("Netmask", "match", "(ca)", "The address (a ComboAddress or a string) is in the netmask."),
	METH("Netmask", "isIPv4", "()", "An IPv4 netmask."),
	METH("Netmask", "isIPv6", "()", "An IPv6 netmask."),
	METH("Netmask", "toString", "()", "`\"192.0.2.0/24\"`."),
	METH("Netmask", "empty", "()", "Always `false`."),
	OP("Netmask", "__eq", "a == b", "Same network and length."),
	OP("Netmask", "__tostring", "tostring(nm)", "Same as `toString()`."),

	OBJ("NetmaskGroup", "NetmaskGroup", "nmg",
	    "A set of netmasks. Negated masks (`\"!10.1.0.0/16\"`) are not supported and raise. "
	    "Its memory is C memory, outside `setLuaMemoryLimit`."),
	CTOR("NetmaskGroup", "newNMG", "()", "An empty group."),
	METH("NetmaskGroup", "addMask", "(mask)", "Adds `\"192.0.2.0/24\"` (or a Netmask)."),
	METH("NetmaskGroup", "addMasks", "(t)",
	     "Adds a list `{\"10.0.0.0/8\", ...}`, or a table whose keys are masks or "
	     "ComboAddresses (as dnsdist 1.7 takes it)."),
	METH("NetmaskGroup", "match", "(ca)", "The address (a ComboAddress or a string) is in a mask."),
	METH("NetmaskGroup", "size", "()", "The number of masks."),
	METH("NetmaskGroup", "clear", "()", "Removes every mask."),
	METH("NetmaskGroup", "toString", "()", "`\"NetmaskGroup 10.0.0.0/8, 192.0.2.0/24\"`."),
	OP("NetmaskGroup", "__tostring", "tostring(nmg)", "Same as `toString()`."),

	OBJ("SuffixMatchNode", "SuffixMatchNode", "smn",
	    "A set of names matched by suffix; lookups take O(labels of the name). Give one to "
	    "`SuffixMatchNodeRule`, which copies it. Its memory is C memory."),
	CTOR("SuffixMatchNode", "newSuffixMatchNode", "()", "An empty set."),
	METH("SuffixMatchNode", "add", "(x)", "Adds a name (string or DNSName) or a table of names."),
	METH("SuffixMatchNode", "remove", "(x)", "Removes a name or a table of names."),
	METH("SuffixMatchNode", "check", "(name)", "The name is at or below one of the names."),
	METH("SuffixMatchNode", "size", "()", "The number of names."),
	OP("SuffixMatchNode", "__tostring", "tostring(smn)", "`\"SuffixMatchNode \"` and the names."),

	OBJ("DNSNameSet", "DNSNameSet", "set",
	    "A set of exact names, for `QNameSetRule`. Its memory is C memory."),
	CTOR("DNSNameSet", "newDNSNameSet", "()", "An empty set."),
	METH("DNSNameSet", "add", "(x)", "Adds a name (string or DNSName) or a table of names."),
	METH("DNSNameSet", "check", "(name)", "The name is in the set."),
	METH("DNSNameSet", "delete", "(name)", "Removes the name; returns 1, or 0 when absent."),
	METH("DNSNameSet", "size", "()", "The number of names."),
	METH("DNSNameSet", "clear", "()", "Removes every name."),
	METH("DNSNameSet", "empty", "()", "The set is empty."),
	METH("DNSNameSet", "toString", "()",
	     "One name per line, without the final dot, sorted."),
	OP("DNSNameSet", "__tostring", "tostring(set)", "Same as `toString()`."),

	OBJ("QPSLimiter", "QPSLimiter", "q",
	    "A token bucket. Limiters made at the top level of the config are shared by all "
	    "workers (one limit in total); one made inside a rule belongs to its worker."),
	CTOR("QPSLimiter", "newQPSLimiter", "(rate, burst)",
	     "`rate` tokens per second, bursts of `burst`; negative values raise."),
	METH("QPSLimiter", "check", "()", "Takes a token: `true` while under the rate."),
	OP("QPSLimiter", "__tostring", "tostring(q)", "`\"QPSLimiter(rate, burst)\"`."),

	/* ---- lua/rules_lua.c ---- */
	OBJ("TimedIPSetRule", "TimedIPSetRule", "t",
	    "Client addresses, each until a time, for a rule: `addAction(t:slice(), ...)`. Made at "
	    "the top of the config, one set is shared by every worker's Lua state (a `LuaAction` "
	    "that adds in one worker feeds the rule in all); one made inside a rule is its "
	    "state's own."),
	CTOR("TimedIPSetRule", "TimedIPSetRule", "()", "An empty set."),
	METH("TimedIPSetRule", "add", "(ca, seconds)",
	     "The address of `ca` (a ComboAddress or an address string; the port does not "
	     "count) matches for the next `seconds` s; re-adding keeps the later time."),
	METH("TimedIPSetRule", "cleanup", "()", "Removes the expired addresses."),
	METH("TimedIPSetRule", "clear", "()", "Removes every address."),
	METH("TimedIPSetRule", "slice", "()",
	     "The selector (a DNSRule; `Src: N ips`, N the addresses not expired)."),

	OBJ("SVCRecordParameters", "SVCRecordParameters", "svc",
	    "One SVCB/HTTPS record for `SpoofSVCAction` (no methods): its rdata, built when it is "
	    "made, and its address hints."),
	CTOR("SVCRecordParameters", "newSVCRecordParameters",
	     "(priority, target[, {mandatory=, alpn=, noDefaultAlpn=, port=, ipv4hint=, ipv6hint=, "
	     "ech=, keyN=}])",
	     "See the [rules reference](rules-reference.md)."),

	/* ---- lua/globals_lua.c ---- */
	OBJ("ClientState", "ClientState", "bind",
	    "A listener, as `showBinds()` numbers them: a plain frontend twice, UDP then TCP; a "
	    "DNS over TLS one once. The console prints it as its address."),
	CTOR("ClientState", "getBind", "(n)",
	     "Listener number `n` (from 0), or nil; `getBindCount()` gives how many there are."),
	METH("ClientState", "toString", "()", "The address, `\"127.0.0.1:53\"`."),
	METH("ClientState", "getEffectiveTLSProvider", "()",
	     "`\"openssl\"` for a DNS over TLS listener, `\"\"` for a plain one."),
	METH("ClientState", "attachFilter", "(bpf)",
	     "Raises: eBPF filtering is not supported by dnslb."),
	METH("ClientState", "detachFilter", "()", "Does nothing: no filter can be attached."),
	OP("ClientState", "__tostring", "tostring(bind)", "Same as `toString()`."),

	/* ---- lua/kvstore_lua.c ---- */
	OBJ("KeyValueStore", "KeyValueStore", "kvs",
	    "A Redis set or hash mirrored in memory by every node, for `KeyValueStoreLookupRule` "
	    "and `KeyValueStoreLookupAction`; see [fleet.md](fleet.md#redis-backed-lookup-rules). "
	    "Needs `setRedis` first. The same name, type, key and channel give the same store "
	    "(worker states, reloads)."),
	CTOR("KeyValueStore", "newRedisKVStore",
	     "({key=, type=\"set\", name=key, refresh=60, channel=, keyspace=true, "
	     "scanCount=10000})",
	     "A store mirroring the Redis key (a set or a hash), refreshed on keyspace "
	     "notifications, channel messages, reconnects and every `refresh` seconds."),
	FUNC("KeyValueStore", "showKVStores", "()",
	     "One line per store: entries, bytes, lookups, hits, mirrors, errors, last mirror."),
	METH("KeyValueStore", "lookup", "(key[, wireFormat=false])",
	     "The value of `key` (a string as is, a DNSName as lowercase text with the final dot, "
	     "or wire format; a ComboAddress as its address): a hash's value, a set's member; "
	     "`\"\"` when absent. Works in `LuaRule`/`LuaAction` too."),
	METH("KeyValueStore", "lookupSuffix", "(name[, minLabels=0[, wireFormat=false]])",
	     "The value of the longest suffix of `name` that is present, as "
	     "`KeyValueLookupKeySuffix` looks it up; `\"\"` when none is."),
	METH("KeyValueStore", "reload", "()", "Mirror the Redis key again now. Not from a rule."),
	METH("KeyValueStore", "getStats", "()",
	     "A table: name, type, key, entries, memory, lookups, hits, refreshes, "
	     "refreshErrors, notifications, skipped, lastRefreshAge, lastRefreshDuration, "
	     "mirroring, lastError. Not from a rule."),
	METH("KeyValueStore", "printStats", "()",
	     "The store's line of `showKVStores()`. Not from a rule."),
	OP("KeyValueStore", "__tostring", "tostring(kvs)",
	   "`KeyValueStore \"name\" (Redis set 'key', N entries)`."),

	OBJ("KeyValueLookupKey", "KeyValueLookupKey", "lookupKey",
	    "Which keys of a query `KeyValueStoreLookupRule`/`Action` look up (dnsdist 1.7). "
	    "Names are lowercase text with the final dot unless `wireFormat` is true."),
	CTOR("KeyValueLookupKey", "KeyValueLookupKeyQName", "([wireFormat=false])",
	     "The qname: `\"www.example.com.\"`."),
	CTOR("KeyValueLookupKey", "KeyValueLookupKeySuffix", "([minLabels=0[, wireFormat=false]])",
	     "The qname, then each parent down to the TLD, or down to `minLabels` labels."),
	CTOR("KeyValueLookupKey", "KeyValueLookupKeySourceIP",
	     "([v4Mask=32[, v6Mask=128[, includePort=false]]])",
	     "The client's address, masked, as text (`\"192.0.2.0\"`, `\"[2001:db8::1]:53\"` with "
	     "the port)."),
	CTOR("KeyValueLookupKey", "KeyValueLookupKeyTag", "(tag)", "The value of the query's tag."),
	OP("KeyValueLookupKey", "__tostring", "tostring(lookupKey)",
	   "dnsdist's description: `qname`, `suffix`, `source IP (masked to ...)`, ..."),

	/* ---- lua/conf.c ---- */
	OBJ("Server", "DownstreamState", "s",
	    "A backend (metatable `DownstreamState`, like dnsdist's). In a rule, only the "
	    "methods that read or store one value (`setUp`, `setDown`, `setAuto`, `setQPS`, "
	    "`weight`) work. See [configuration.md](configuration.md#server-objects)."),
	CTOR("Server", "newServer", "({options}) / (address)",
	     "Adds a server; see [configuration.md](configuration.md)."),
	CTOR("Server", "getServer", "(n)", "The n-th server (from 0)."),
	CTOR("Server", "getServers", "()", "An array of every server."),
	CTOR("Server", "getPoolServers", "(name)",
	     "An array of the pool's servers in member order; empty for an unknown pool."),
	FR("Server", "name", "string", "The name."),
	FRW("Server", "order", "number",
	    "The order (>= 0); pools are re-sorted on change. Not from a rule."),
	FRW("Server", "weight", "number", "The weight (>= 1)."),
	FR("Server", "upStatus", "boolean", "Same as `s:isUp()`."),
	METH("Server", "setUp", "()",
	     "Forces the server up: it receives traffic whatever the health checks say."),
	METH("Server", "setDown", "()", "Forces it down: no traffic."),
	METH("Server", "setAuto", "([status])",
	     "Back to health-checked mode; with `status`, also sets the current verdict."),
	METH("Server", "isUp", "()",
	     "`true` when the server may receive traffic (forced up, or auto and healthy)."),
	METH("Server", "getName", "()", "The name (`name=` or the address)."),
	METH("Server", "getNameWithAddr", "()",
	     "`\"name (192.0.2.1:53)\"`, or just the address for an unnamed server."),
	METH("Server", "getID", "()", "The UUID."),
	METH("Server", "setQPS", "(n)", "Changes the `qps` limit live (0 = none)."),
	METH("Server", "addPool", "(name)",
	     "Adds the server to a pool (created if needed). Not from a rule."),
	METH("Server", "rmPool", "(name)", "Removes it from a pool. Not from a rule."),
	METH("Server", "getOutstanding", "()", "Queries in flight to the server now (all workers)."),
	METH("Server", "getLatency", "()",
	     "Latency in µs: the mean of the workers' moving averages."),
	METH("Server", "getDrops", "()", "Queries the server did not answer in time."),
	METH("Server", "getQueries", "()", "Queries sent to the server."),
	OP("Server", "__eq", "s1 == s2", "The same server."),
	OP("Server", "__tostring", "tostring(s)", "Same as `s:getNameWithAddr()`."),

	OBJ("ServerPool", "ServerPool", "p",
	    "A pool of servers. See [configuration.md](configuration.md#pools)."),
	CTOR("ServerPool", "getPool", "(name)",
	     "The pool, created if needed (at most 64); in a rule, an unknown pool raises."),
	METH("ServerPool", "getName", "()", "The name."),
	METH("ServerPool", "setCache", "(pc)",
	     "Attaches a packet cache (replacing the previous one). Not from a rule."),
	METH("ServerPool", "getCache", "()", "The pool's `PacketCache`, or `nil`."),
	METH("ServerPool", "unsetCache", "()", "Detaches the pool's cache. Not from a rule."),
	METH("ServerPool", "setECS", "(bool)",
	     "With `true`, a query that finds no server available still gets the client's ECS "
	     "option in its cache key (stale entries of `useClientSubnet` servers)."),
	METH("ServerPool", "getECS", "()", "What `setECS` set (default `false`)."),
	OP("ServerPool", "__tostring", "tostring(p)", "`ServerPool \"name\"`."),

	OBJ("PacketCache", "PacketCache", "pc",
	    "A packet cache. The methods that remove or dump entries need the main thread and "
	    "raise in a rule. See [cache.md](cache.md)."),
	CTOR("PacketCache", "newPacketCache", "(maxEntries[, {options}])",
	     "A cache; the options are in [cache.md](cache.md)."),
	METH("PacketCache", "printStats", "()",
	     "Prints dnsdist's statistics lines, then stale hits, prefetches, evictions and bytes."),
	METH("PacketCache", "getStats", "()", "The same as a table of integers."),
	METH("PacketCache", "expunge", "(n)",
	     "Removes entries until at most `n` remain; returns the number removed."),
	METH("PacketCache", "expungeByName", "(name[, qtype[, suffixMatch]])",
	     "Removes the entries for `name` (of type `qtype`, default every type; with "
	     "`suffixMatch`, also the names under it)."),
	METH("PacketCache", "purgeExpired", "(n)",
	     "Removes expired entries until at most `n` remain; returns the number removed."),
	METH("PacketCache", "dump", "(file)",
	     "Writes one line per entry in dnsdist 1.7.3's format; never overwrites a file."),
	METH("PacketCache", "isFull", "()", "The cache holds `maxEntries` entries."),
	METH("PacketCache", "toString", "()", "`\"entries/maxEntries\"`, e.g. `\"10/10000\"`."),
	OP("PacketCache", "__tostring", "tostring(pc)", "Same as `toString()`."),

	OBJ("ServerPolicy", "ServerPolicy", "policy",
	    "A load-balancing policy: the globals `firstAvailable`, `roundrobin`, `wrandom`, "
	    "`whashed`, `chashed`, `leastOutstanding`, ..., or a Lua one. See "
	    "[server-selection.md](server-selection.md)."),
	CTOR("ServerPolicy", "newServerPolicy", "(name, f)",
	     "A Lua policy: `f(servers, dq)` returns a Server, its 1-based position, or nil."),
	FR("ServerPolicy", "name", "string", "The name."),
	FR("ServerPolicy", "policy", "function or nil", "A Lua policy's function."),
	OP("ServerPolicy", "__tostring", "tostring(policy)", "The name."),

	/* ---- lua/dynblock_lua.c ---- */
	OBJ("Dynamic blocks", "DynBlockRulesGroup", "dbr",
	    "A group of rate rules evaluated together (dnsdist 1.7's `DynBlockRulesGroup`), and "
	    "the global functions of dynamic blocks. Rates are measured by the workers per "
	    "client and per name over windows of whole seconds, whatever the ring-buffer "
	    "size; `apply()` (normally from `maintenance()`) turns them into blocks. "
	    "Rates are per second over the rule's `seconds`; `action` is a `DNSAction` "
	    "(`Drop`, `Nxdomain`, `Refused`, `Truncate`, `NoOp`, `NoRecurse`; `None` or absent: "
	    "the `setDynBlocksAction()` default). See [dynblocks.md](dynblocks.md)."),
	CTOR("Dynamic blocks", "dynBlockRulesGroup", "()", "A new, empty rule group."),
	METH("Dynamic blocks", "setQueryRate",
	     "(rate, seconds, reason, blockingTime[, action[, warningRate]])",
	     "Block a client sending more than `rate` queries a second over `seconds`; over "
	     "`warningRate`, log and show a warning entry without blocking."),
	METH("Dynamic blocks", "setRCodeRate",
	     "(rcode, rate, seconds, reason, blockingTime[, action[, warningRate]])",
	     "The same for answers with `rcode` (`DNSRCode.NXDOMAIN`, ...) the client got from a "
	     "backend (dnsdist 1.7: not from the cache nor from a rule; a backend's UDP timeout "
	     "counts as a NOERROR of 0 bytes)."),
	METH("Dynamic blocks", "setRCodeRatio",
	     "(rcode, ratio, seconds, reason, blockingTime, minimumNumberOfResponses[, action[, "
	     "warningRatio]])",
	     "Block when answers with `rcode` exceed `ratio` of the client's answers from backends "
	     "(at least `minimumNumberOfResponses` of them; counted as for `setRCodeRate`)."),
	METH("Dynamic blocks", "setQTypeRate",
	     "(qtype, rate, seconds, reason, blockingTime[, action[, warningRate]])",
	     "The same for queries of `qtype` (`DNSQType.ANY`, ...)."),
	METH("Dynamic blocks", "setResponseByteRate",
	     "(rate, seconds, reason, blockingTime[, action[, warningRate]])",
	     "The same for the bytes of the answers the client got from backends (counted as for "
	     "`setRCodeRate`)."),
	METH("Dynamic blocks", "setSuffixMatchRule", "(seconds, reason, blockingTime, action, visitor)",
	     "Calls `visitor(node, self, children)` for every name and parent seen over `seconds`; "
	     "returning `true[, reason]` blocks that name and everything under it."),
	METH("Dynamic blocks", "excludeRange", "(netmasks)",
	     "Never block these clients: a netmask string, a table of them or a NetmaskGroup."),
	METH("Dynamic blocks", "includeRange", "(netmasks)",
	     "Exceptions to `excludeRange()` (the most specific range decides)."),
	METH("Dynamic blocks", "excludeDomains", "(names)",
	     "Never block these names or names under them (a name or a table of names)."),
	METH("Dynamic blocks", "setMasks", "(v4, v6[, port])",
	     "Measure and block clients by prefix (default 32 and 128), and IPv4 addresses by "
	     "ranges of ports: `port` bits (0..16, default 0; needs `v4` = 32), for CGNAT."),
	METH("Dynamic blocks", "setQuiet", "(bool)", "Do not log the blocks this group inserts."),
	METH("Dynamic blocks", "apply", "()", "Evaluate the rules now and insert the blocks."),
	METH("Dynamic blocks", "toString", "()", "The rules, in dnsdist 1.7's words."),
	FUNC("Dynamic blocks", "exceedQRate", "(rate, seconds)",
	     "`{ComboAddress = queries}` of the clients over `rate` queries a second."),
	FUNC("Dynamic blocks", "exceedServFails", "(rate, seconds)",
	     "The same for SERVFAIL answers."),
	FUNC("Dynamic blocks", "exceedNXDOMAINs", "(rate, seconds)",
	     "The same for NXDOMAIN answers."),
	FUNC("Dynamic blocks", "exceedRespByterate", "(rate, seconds)",
	     "The same for answer bytes."),
	FUNC("Dynamic blocks", "exceedQTypeRate", "(qtype, rate, seconds)",
	     "The same for queries of `qtype`."),
	FUNC("Dynamic blocks", "addDynBlocks", "(clients, reason[, seconds[, action]])",
	     "Block every key of `clients` (what `exceed*()` returns) for `seconds` (default 10)."),
	FUNC("Dynamic blocks", "addDynBlockSMT", "(names, reason[, seconds[, action]])",
	     "Block queries for these names and the names under them."),
	FUNC("Dynamic blocks", "addDynamicBlock",
	     "(address, reason[, action[, seconds[, clientIPMask[, clientIPPortMask]]]])",
	     "Block one client (a ComboAddress, an address or a netmask string), for `seconds` "
	     "(default 10), masked to `clientIPMask` bits; the port mask must be 0."),
	FUNC("Dynamic blocks", "setDynBlocksAction", "(action)",
	     "The action of blocks whose action is `None` (default `Drop`); config time only."),
	FUNC("Dynamic blocks", "setDynBlocksPurgeInterval", "(seconds)",
	     "How often expired blocks are removed (default 60; 0: never)."),
	FUNC("Dynamic blocks", "showDynBlocks", "()",
	     "Print the active blocks: What, Seconds, Blocks, Warning, Action, Reason."),
	FUNC("Dynamic blocks", "clearDynBlocks", "()",
	     "Remove every block; with `setRedis`, the blocks this node raised (here, in Redis "
	     "and on the other nodes), those received from other nodes stay."),
	FUNC("Dynamic blocks", "getDynamicBlocks", "()",
	     "The active netmask blocks: `{netmask = {reason, until, blocks, action, warning, "
	     "bpf, domain}}`."),
	FUNC("Dynamic blocks", "getDynamicBlocksSMT", "()", "The same for the name blocks."),

	/* ---- lua/fleet_lua.c ---- */
	OBJ("Fleet", "", "",
	    "With `setRedis`, the nodes of a fleet share their dynamic blocks and publish their "
	    "figures through Redis. These functions read the copy of the fleet view the main "
	    "thread refreshes every second: they never wait on Redis. See [fleet.md](fleet.md)."),
	FUNC("Fleet", "showFleet", "()",
	     "Print one line per node (Node, Uptime, QPS, Queries, Hit rate, Backends up, Blocks, "
	     "Age), then the totals."),
	FUNC("Fleet", "getFleet", "()",
	     "The same as a list of tables sorted by node: `{node, version, uptime, qps, queries, "
	     "cacheHits, cacheMisses, hitRate, backendsUp, backends, blocks, updated, age}`."),
	FUNC("Fleet", "clearFleetDynBlocks", "()",
	     "Remove every dynamic block on every node and in Redis; `true` when the fleet was "
	     "told, `false` when Redis is unreachable (cleared on this node only)."),

	/* ---- lua/abuse_lua.c ---- */
	OBJ("Abuse limits", "", "",
	    "Global settings against abusive clients: TCP connection rate, bans, read IOs per "
	    "query, output bound, overload threshold (dnsdist 2.0's names) and the per-client "
	    "outstanding cap. No object: each is a global function, config-time only (from the "
	    "console they raise `<name> cannot be altered at runtime`). See [abuse.md](abuse.md)."),
	FUNC("Abuse limits", "setMaxTCPConnectionRatePerClient", "(n)",
	     "New TCP connections a client (subnet) may open per second, on average over "
	     "`setTCPConnectionRateInterval`; over it, refused and banned. 0 (default): off."),
	FUNC("Abuse limits", "setTCPConnectionRateInterval", "(minutes)",
	     "The window of the connection rate (1..1440, default 5)."),
	FUNC("Abuse limits", "setBanDurationForExceedingTCPTLSRate", "(seconds)",
	     "How long a client over its connection rate is refused (default 10)."),
	FUNC("Abuse limits", "setMaxTCPReadIOsPerQuery", "(n)",
	     "Reads one query may take; a client needing more is closed and banned (default 50, "
	     "0: off)."),
	FUNC("Abuse limits", "setBanDurationForExceedingMaxReadIOsPerQuery", "(seconds)",
	     "How long such a client is refused new connections (default 60, 0: no ban)."),
	FUNC("Abuse limits", "setTCPConnectionsMaskV4", "(bits)",
	     "IPv4 prefix length that makes one client for the TCP limits (default 32)."),
	FUNC("Abuse limits", "setTCPConnectionsMaskV6", "(bits)",
	     "IPv6 prefix length for the same (default 128)."),
	FUNC("Abuse limits", "setTCPConnectionsOverloadThreshold", "(percent)",
	     "Past this share of `maxConcurrentTCPConnections` or `setMaxTCPConnectionsPerClient`, "
	     "new connections get one query, a 0.5 s receive timeout and 5 s of life (default 90, "
	     "0: off)."),
	FUNC("Abuse limits", "setMaxTCPOutputBufferSize", "(bytes)",
	     "dnslb: answers queued for a client that does not read, beyond which it is closed "
	     "(65537..2^30, default 262144)."),
	FUNC("Abuse limits", "setMaxOutstandingPerClient", "(n[, {action=, maskV4=, maskV6=}])",
	     "dnslb: queries a client (subnet, default /32 and /64) may have in flight towards "
	     "backends, per worker; beyond, `action` `\"drop\"` (default), `\"refused\"` or "
	     "`\"servfail\"`. 0 (default): off."),
};

const size_t dlb_lua_nreference = sizeof(dlb_lua_reference) / sizeof(dlb_lua_reference[0]);

static void
md_cell(FILE *f, const char *s)
{
	for (; *s != '\0'; s++) {
		if (*s == '|')
			fputc('\\', f);
		fputc(*s, f);
	}
}

/* "dq and dr" -> "dq-and-dr", "dq.dh" -> "dqdh": GitHub's heading anchors */
static void
md_anchor(FILE *f, const char *s)
{
	for (; *s != '\0'; s++) {
		if (*s == ' ')
			fputc('-', f);
		else if ((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-')
			fputc(*s, f);
		else if (*s >= 'A' && *s <= 'Z')
			fputc(*s - 'A' + 'a', f);
	}
}

static const char *const kind_text[] = {
	[DLB_LREF_CONSTRUCTOR] = "constructor",
	[DLB_LREF_FIELD_R] = "field, read-only",
	[DLB_LREF_FIELD_RW] = "field, read-write",
	[DLB_LREF_METHOD] = "method",
	[DLB_LREF_OPERATOR] = "operator",
	[DLB_LREF_FUNCTION] = "function",
};

void
dlb_lua_write_reference(FILE *f)
{
	const char *inst = "";
	bool first = true;

	fputs("# Lua objects reference\n\n"
	      "<!-- Generated by gen_rules_reference lua (lua/gen_reference.c) from the table in\n"
	      "     lua/lua_reference.c; the docs_lua_reference test fails when they differ, and\n"
	      "     unit_lua_reference fails when the table and the code disagree.\n"
	      "     Regenerate: <build>/tests/gen_rules_reference lua > docs/lua-reference.md -->\n\n"
	      "Every field, method and constructor of the Lua objects a configuration or a rule\n"
	      "sees. `[...]` marks optional arguments. How Lua rules run, their limits, errors\n"
	      "and return values are in [lua.md](lua.md); the selectors and actions in the\n"
	      "[rules reference](rules-reference.md).\n\n",
	      f);
	fputs("Objects:", f);
	for (size_t i = 0; i < dlb_lua_nreference; i++) {
		if (dlb_lua_reference[i].kind != DLB_LREF_OBJECT)
			continue;
		fprintf(f, "%s [%s](#", first ? "" : " ·", dlb_lua_reference[i].object);
		md_anchor(f, dlb_lua_reference[i].object);
		fputc(')', f);
		first = false;
	}
	fputs("\n", f);
	for (size_t i = 0; i < dlb_lua_nreference; i++) {
		const struct dlb_lref *r = &dlb_lua_reference[i];

		switch (r->kind) {
		case DLB_LREF_OBJECT:
			inst = r->sig;
			fprintf(f, "\n## %s\n\n%s\n\n| Member | Kind | Description |\n|---|---|---|\n",
				r->object, r->doc);
			continue;
		case DLB_LREF_CONSTRUCTOR:
		case DLB_LREF_FUNCTION:
			fprintf(f, "| `%s", r->name);
			md_cell(f, r->sig);
			fputs("` |", f);
			break;
		case DLB_LREF_FIELD_R:
		case DLB_LREF_FIELD_RW:
			fprintf(f, "| `%s.%s` | ", inst, r->name);
			md_cell(f, r->sig);
			fputs(";", f);
			break;
		case DLB_LREF_METHOD:
			fprintf(f, "| `%s:%s", inst, r->name);
			md_cell(f, r->sig);
			fputs("` |", f);
			break;
		case DLB_LREF_OPERATOR:
			fputs("| `", f);
			md_cell(f, r->sig);
			fputs("` |", f);
			break;
		}
		fprintf(f, " %s | ", kind_text[r->kind]);
		md_cell(f, r->doc);
		fputs(" |\n", f);
	}
}
