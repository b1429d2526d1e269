"""Startup and the command line, dnsdist 1.7.3 against dnslb: what
`--check-config` prints for good and bad configurations (the whole stdout,
stderr and exit status), the legacy and tuning calls old configurations
still make, a corpus of real-world-style configurations (configs/*.conf),
the example configurations of docs/ and conf/, and listeners that cannot
be bound (another process holds the address, reusePort)."""

import glob
import os
import re
import subprocess
import time

import pytest

from diffharness import (DNSDIST, SRC, check_config, dnslb_bin, free_port, known,
                         same_check_config)

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = sorted(glob.glob(os.path.join(HERE, "configs", "*.conf")))

CHECK_NAME = "dnsdist.conf"      # the file name check_config() gives both

# headings of docs/dnsdist-differences.md
ERRORS = "Errors in the configuration name the file and line"
NOT_YET = "Features dnslb does not have are refused"
XPF = "XPF is refused"
INVALID = "Invalid values are refused"
EXTRA = "Calls dnsdist 1.7.3 refuses that dnslb accepts"
TLS_CHECK = "--check-config loads the certificates of addTLSLocal"
DOT = "DNS over TLS backends"


def ok(name=CHECK_NAME):
    return "Configuration '%s' OK!\n" % name


def lb_error(line, msg, name=CHECK_NAME):
    """dnslb's whole --check-config output for an error at @line."""
    return "Error while parsing the configuration file '%s': %s:%d: %s\n" % (name, name, line, msg)


# ---- good configurations: the same bytes -----------------------------------

# One call each: legacy and tuning calls (accepted, and silent as in dnsdist),
# console commands run by the configuration (their output is dropped),
# dnsdist's warnings (printed in --check-config), and dnsdist's fallbacks.
SAME = [
    'truncateTC(true)',
    'truncateTC(false)',
    # a factor below 1 (0 too) is reported and leaves the setting as it was
    'setWeightedBalancingFactor(0.5)',
    'setWeightedBalancingFactor(0)',
    'setConsistentHashingBalancingFactor(-1)',
    'setConsistentHashingBalancingFactor(1.5) setConsistentHashingBalancingFactor(0)',
    'setMaxTCPClientThreads(4)',
    'setMaxTCPClientThreads(0)',
    'setMaxTCPQueuedConnections(100)',
    'setTCPRecvTimeout(5)',
    'setTCPSendTimeout(5)',
    'setUDPMultipleMessagesVectorSize(16)',
    'setUDPMultipleMessagesVectorSize(0)',
    'setSyslogFacility(3)',
    'setSyslogFacility("local0")',
    'addCapabilitiesToRetain("CAP_NET_ADMIN")',
    'addCapabilitiesToRetain({"CAP_NET_ADMIN", "CAP_NET_RAW"})',
    'addLocal("127.0.0.1:5300", {doTCP=true})',
    'setLocal("127.0.0.1:5300", {doTCP=true, reusePort=true})',
    'setSecurityPollInterval(3600)',
    'setSecurityPollInterval(0)',
    'setSecurityPollInterval(-1)',
    'setSecurityPollSuffix("")',
    'setMaxUDPOutstanding(65535)',
    'setMaxCachedTCPConnectionsPerDownstream(5)',
    'setTCPDownstreamCleanupInterval(10)',
    'setTCPDownstreamMaxIdleTime(10)',
    'setTCPInternalPipeBufferSize(100000)',
    'setOutgoingDoHWorkerThreads(2)',
    'setMaxIdleDoHConnectionsPerDownstream(5)',
    'setDoHDownstreamCleanupInterval(5)',
    'setDoHDownstreamMaxIdleTime(5)',
    'setOutgoingTLSSessionsCacheMaxTicketsPerBackend(5)',
    'setOutgoingTLSSessionsCacheCleanupDelay(5)',
    'setOutgoingTLSSessionsCacheMaxTicketValidity(5)',
    'setProxyProtocolMaximumPayloadSize(1000)',
    'setMaxTCPQueriesPerConnection(10)',
    'setMaxTCPConnectionDuration(10)',
    'setMaxTCPConnectionsPerClient(10)',
    'setUDPSocketBufferSizes(1000000, 1000000)',
    'setRingBuffersSize(1000, 4)',
    'setVerboseHealthChecks(true)',
    # no "Added downstream server" line in --check-config
    'newServer("127.0.0.1:5301")',
    'newServer({address="127.0.0.1:5301", name="x", pool={"a", "b"}})',
    # unknown keys: silent in 1.7
    'newServer({address="127.0.0.1:5301", foo=1})',
    'newServer({address="127.0.0.1:5301", qps="10", bogusKey=1})',
    'newServer({address="127.0.0.1:5301", cpus={0}, ipBindAddrNoPort=true, '
    'tcpFastOpen=true, reconnectOnUp=true, disableZeroScope=true})',
    # console commands: their output goes nowhere
    'showServers()',
    'makeKey()',
    'showVersion()',
    'newServer("127.0.0.1:5301") showServers() showPools() showACL()',
    # what prints
    'print("x")',
    'infolog("i") warnlog("w") errlog("e")',
    'setWebserverConfig({password="pw"})',
    'setWebserverConfig({apiKey="k"})',
    'setWebserverConfig({password="pw", apiKey="k", hashPlaintextCredentials=true})',
    'webserver("127.0.0.1:8083", "pw", "key")',
    'newPacketCache(10)',
    'newPacketCache(19)',
    'newPacketCache(20)',
    'newPacketCache(10, {numberOfShards=1})',
    'setDynBlocksAction(DNSAction.Spoof)',
    # dnsdist's fallbacks, with its messages
    'newServer({address="127.0.0.1:5301", sockets=0})',
    'newServer({address="127.0.0.1:5301", source="nonexist0"})',
    'newServer({address="127.0.0.1:5301", source="127.0.0.1@nonexist0"})',
    'includeDirectory("/nonexistent-dnslb-test")',
    'includeDirectory("/etc/passwd")',
    'setAPIWritable(false)',
    'setAPIWritable(false, "/tmp")',
    'fixupCase(true)',
    # DNS over TLS servers
    'newServer({address="9.9.9.9:853", tls="openssl", subjectName="dns.quad9.net"})',
    'newServer({address="127.0.0.1:853", tls="openssl", subjectName="dns.test", '
    'validateCertificates=false, ciphers="ECDHE-ECDSA-AES128-GCM-SHA256", releaseBuffers=false, '
    'enableRenegotiation=false})',
    # DNS over HTTPS servers: over TLS or in clear, with or without X-Forwarded-*
    'newServer({address="1.1.1.1:443", tls="openssl", dohPath="/dns-query"})',
    'newServer({address="127.0.0.1:443", tls="openssl", subjectName="dns.test", '
    'dohPath="/dns-query", addXForwardedHeaders=true, validateCertificates=false})',
    'newServer({address="127.0.0.1:8053", dohPath="/dns-query", addXForwardedHeaders=false})',
    'newServer({address="127.0.0.1:443", dohPath="/q", useProxyProtocol=true})',
    'newServer({address="127.0.0.1:5301", addXForwardedHeaders=true})',
]


@pytest.mark.parametrize("conf", SAME)
def test_check_config_same(workdir, conf):
    same_check_config(workdir, conf + "\n")


def test_check_config_many_lines(workdir):
    """A whole configuration: every line's output in order, then OK."""
    conf = "\n".join(SAME[:40] + ['infolog("end")']) + "\n"
    rc, out, err = same_check_config(workdir, conf)
    assert rc == 0 and out.endswith("end\n" + ok()) and err == ""


# ---- bad configurations: both refuse ---------------------------------------

# (config, line, dnslb's message): dnsdist says `Fatal Lua error: [string
# "chunk"]:LINE: ...` (or `Fatal error:` for a syntax error) in LuaJIT's
# words, dnslb `Error while parsing ...: FILE:LINE: ...`.
REFUSED_BY_BOTH = [
    ('local x = = 1\n', 1, "unexpected symbol near '='"),
    ('setLocal("127.0.0.1:5300")\n\nfrobnicate(1)\n', 3,
     "attempt to call a nil value (global 'frobnicate')"),
    ('x = dnsdist.NXDOMAIN\n', 1, "attempt to index a nil value (global 'dnsdist')"),
    ('-- 1.7.3 has no such function\nsetTCPUseSinglePipe(true)\n', 2,
     "attempt to call a nil value (global 'setTCPUseSinglePipe')"),
    ('setMaxUDPOutstanding(100000)\n', 1, "setMaxUDPOutstanding: 100000 is out of range (1..65535)"),
    ('setMaxUDPOutstanding(65536)\n', 1, "setMaxUDPOutstanding: 65536 is out of range (1..65535)"),
    ('addCacheHitResponseAction(AllRule(), NoneAction())\n', 1,
     "addCacheHitResponseAction() can only be called with response-related actions, not "
     "query-related ones. Are you looking for addAction()?"),
    ('getServer(0)\n', 1, "getServer: no server with index 0"),
    ('addLocal("127.0.0.1:5300", true)\n', 1, "addLocal: argument #2 must be a table of options"),
    ('newServer({address="9.9.9.9:853", tls="openssl", caStore="/nonexistent/ca.pem"})\n', 1,
     "newServer: unable to read the CA store /nonexistent/ca.pem: No such file or directory"),
]


@pytest.mark.parametrize("conf,line,msg", REFUSED_BY_BOTH,
                         ids=["refused%d" % i for i in range(len(REFUSED_BY_BOTH))])
def test_check_config_refused_by_both(workdir, conf, line, msg):
    r = check_config(workdir, conf)
    rc, out, err = r["dnsdist"]
    assert rc == 1 and err == "", r["dnsdist"]
    assert re.match(r'Fatal (Lua )?error: \[string "chunk"\]:%d: ' % line, out), out
    assert known(ERRORS)
    assert r["dnslb"] == (1, lb_error(line, msg), "")


# ---- deliberate differences --------------------------------------------------

# (config, heading, dnsdist's whole stdout, dnslb's whole stdout)
DIFFERENT = [
    # what dnslb cannot do yet: never started without it
    # the certificates are loaded and checked at --check-config already
    ('addTLSLocal("127.0.0.1:853", "/x.pem", "/x.key")\n', TLS_CHECK, ok(),
     lb_error(1, "addTLSLocal: unable to read the certificate file '/x.pem': No such file or "
                 "directory")),
    ('\naddDOHLocal("127.0.0.1:443", "/x.pem", "/x.key")\n', TLS_CHECK, ok(),
     lb_error(2, "addDOHLocal: unable to read the certificate file '/x.pem': No such file or "
                 "directory")),
    ('snmpAgent(false)\n', NOT_YET, ok(), lb_error(1, "snmpAgent: SNMP is not supported by dnslb")),
    ('rl = newRemoteLogger("127.0.0.1:4242")\n', NOT_YET, ok(),
     lb_error(1, "newRemoteLogger: protobuf and dnstap logging are not supported by dnslb")),
    ('bpf = newBPFFilter(1024, 1024, 1024)\n', NOT_YET, ok(),
     lb_error(1, "newBPFFilter: eBPF filtering is not supported by dnslb")),
    ('setAPIWritable(true, "/tmp")\n', NOT_YET, ok(),
     lb_error(1, "setAPIWritable: a writable HTTP API is not supported by dnslb")),
    # DNS over TLS servers: OpenSSL only, and every option checked at once
    ('newServer({address="9.9.9.9:853", tls="gnutls"})\n', DOT, ok(),
     lb_error(1, "newServer: the TLS provider 'gnutls' is not supported by dnslb (use "
                 "\"openssl\")")),
    ('newServer({address="9.9.9.9:853", tls="openssl", ciphersTLS13="BOGUS"})\n', DOT, ok(),
     lb_error(1, "newServer: invalid ciphersTLS13 BOGUS: error:0A0000B9:SSL routines::no "
                 "cipher match")),
    ('newServer({address="127.0.0.1:5301", addXPF=65280})\n', XPF, ok(),
     lb_error(1, "newServer: 'addXPF': XPF records are not supported by dnslb")),
    # dnsdist logs these and goes on without the server or with a value that breaks it
    ('newServer({address="bla"})\n', INVALID,
     "Error creating new server with address bla: Unable to convert presentation address "
     "'bla'\n" + ok(), lb_error(1, "newServer: invalid address 'bla'")),
    ('newServer({address="0.0.0.0"})\n', INVALID,
     "Error creating new server: 0.0.0.0 is not a valid address for a downstream server\n" + ok(),
     lb_error(1, "newServer: invalid address '0.0.0.0' for a downstream server")),
    ('setKey("!!!")\n', INVALID, ok(), lb_error(1, "Unable to decode !!! as Base64")),
    ('setMaxUDPOutstanding(0)\n', INVALID, ok(),
     lb_error(1, "setMaxUDPOutstanding: 0 is out of range (1..65535)")),
    ('setUDPTimeout(0)\n', INVALID, ok(),
     lb_error(1, "setUDPTimeout: expected a number of seconds (0..3600]")),
    ('setECSSourcePrefixV4(33)\n', INVALID, ok(),
     lb_error(1, "setECSSourcePrefixV4: 33 is out of range (0..32)")),
    ('setECSSourcePrefixV6(129)\n', INVALID, ok(),
     lb_error(1, "setECSSourcePrefixV6: 129 is out of range (0..128)")),
    # dnsdist converts any number: -1 wraps, 1.5 is cut to 1
    ('setTCPRecvTimeout(-1)\n', INVALID, ok(),
     lb_error(1, "setTCPRecvTimeout: -1 is out of range (0..2147483647)")),
    ('setMaxTCPQueriesPerConnection(1.5)\n', INVALID, ok(),
     lb_error(1, "setMaxTCPQueriesPerConnection: argument #1 must be an integer")),
    ('setMaxTCPQueuedConnections(4294967296)\n', INVALID, ok(),
     lb_error(1, "setMaxTCPQueuedConnections: 4294967296 is out of range (0..2147483647)")),
]


@pytest.mark.parametrize("conf,heading,theirs,ours", DIFFERENT,
                         ids=["diff%d" % i for i in range(len(DIFFERENT))])
def test_check_config_documented_difference(workdir, conf, heading, theirs, ours):
    r = check_config(workdir, conf)
    assert r["dnsdist"] == (0, theirs, ""), r["dnsdist"]
    assert known(heading)
    assert r["dnslb"] == (1, ours, "")


# dnsdist 1.7.3 refuses; dnslb accepts (older and newer dnsdist forms)
ACCEPTED_BY_DNSLB = [
    ('newPacketCache(1000, 86400, 0, 60, 60)\n',
     "newPacketCache: the positional form is deprecated, use newPacketCache(maxEntries, "
     "{options})\n" + ok()),
    ('setVerbose(false)\n', ok()),
]


@pytest.mark.parametrize("conf,ours", ACCEPTED_BY_DNSLB, ids=["extra0", "extra1"])
def test_check_config_accepted_by_dnslb(workdir, conf, ours):
    r = check_config(workdir, conf)
    assert r["dnsdist"][0] == 1 and r["dnsdist"][1].startswith("Fatal Lua error: "), r["dnsdist"]
    assert known(EXTRA)
    assert r["dnslb"] == (0, ours, "")


# ---- the corpus -----------------------------------------------------------------

# corpus files dnslb refuses: file -> (heading, line, dnslb's message)
CORPUS_REFUSED = {
    "26-doh-server.conf": (TLS_CHECK, 3, "addDOHLocal: unable to read the certificate file "
                                         "'/etc/letsencrypt/live/doh.example/fullchain.pem': "
                                         "No such file or directory"),
    "27-dot-server.conf": (TLS_CHECK, 2, "addTLSLocal: unable to read the certificate file "
                                         "'/etc/ssl/dot.example/cert.pem': No such file or "
                                         "directory"),
    "37-xpf.conf": (XPF, 2, "newServer: 'addXPF': XPF records are not supported by dnslb"),
    "38-dnscrypt.conf": (NOT_YET, 2, "addDNSCryptBind: DNSCrypt is not supported by dnslb"),
    "40-dnstap-logging.conf": (NOT_YET, 3, "newFrameStreamUnixLogger: protobuf and dnstap "
                                           "logging are not supported by dnslb"),
    "41-ebpf.conf": (NOT_YET, 3, "newBPFFilter: eBPF filtering is not supported by dnslb"),
}


def test_corpus_size():
    assert len(CONFIGS) >= 30
    names = {os.path.basename(c) for c in CONFIGS}
    assert set(CORPUS_REFUSED) <= names


def corpus_extra_files(path):
    """configs/NAME.d/* is the conf.d/ directory NAME.conf includes."""
    d = path[:-len(".conf")] + ".d"
    files = {}
    for p in sorted(glob.glob(os.path.join(d, "*"))):
        with open(p) as f:
            files[os.path.join("conf.d", os.path.basename(p))] = f.read()
    return files


@pytest.mark.parametrize("path", CONFIGS, ids=[os.path.basename(c) for c in CONFIGS])
def test_corpus(workdir, path):
    with open(path) as f:
        conf = f.read()
    name = os.path.basename(path)
    extra = corpus_extra_files(path)
    if name not in CORPUS_REFUSED:
        rc, out, err = same_check_config(workdir, conf, extra_files=extra)
        assert rc == 0 and out.endswith(ok()), out
        return
    heading, line, msg = CORPUS_REFUSED[name]
    r = check_config(workdir, conf, extra_files=extra)
    assert r["dnsdist"][0] == 0 and r["dnsdist"][1].endswith(ok()), r["dnsdist"]
    assert known(heading)
    assert r["dnslb"] == (1, lb_error(line, msg), "")


def test_missing_config_file(workdir):
    """dnsdist says it cannot read the file, then OK; dnslb refuses."""
    path = os.path.join(workdir, "missing.conf")
    rs = {}
    for impl, exe in (("dnsdist", DNSDIST), ("dnslb", dnslb_bin())):
        r = subprocess.run([exe, "--check-config", "-C", path], capture_output=True, text=True,
                           timeout=30)
        rs[impl] = (r.returncode, r.stdout, r.stderr)
    assert rs["dnsdist"] == (0, "Unable to read configuration from '%s'\n" % path + ok(path), "")
    assert known(INVALID)
    assert rs["dnslb"] == (1, "Error while parsing the configuration file '%s': cannot open %s: "
                              "No such file or directory\n" % (path, path), "")


def test_shipped_dnsdist_example(workdir):
    """Debian's commented example configuration."""
    path = "/usr/share/doc/dnsdist/examples/dnsdist.conf"
    if not os.path.exists(path):
        pytest.skip("no %s" % path)
    with open(path) as f:
        same_check_config(workdir, f.read())


# ---- the example configurations of docs/ and conf/ ---------------------------

# In docs/*.md, a ```lua block is a whole dnsdist configuration both load
# alike; ```lua dnslb marks one that uses dnslb's own functions (dnslb loads
# it), ```lua fragment one that is not a whole configuration (a signature, a
# part of a larger example, placeholders such as setKey("...")).
def doc_blocks():
    out = []
    for p in sorted(glob.glob(os.path.join(SRC, "docs", "*.md"))):
        with open(p) as f:
            text = f.read()
        for m in re.finditer(r"^```lua( [a-z]+)?\n(.*?)^```", text, re.S | re.M):
            line = text.count("\n", 0, m.start()) + 1
            out.append(("%s:%d" % (os.path.basename(p), line), (m.group(1) or "").strip(),
                        m.group(2)))
    return out


DOC_BLOCKS = doc_blocks()


def test_doc_blocks_marked():
    kinds = {k for _, k, _ in DOC_BLOCKS}
    assert kinds <= {"", "dnslb", "fragment"}, kinds
    assert any(k == "" for _, k, _ in DOC_BLOCKS)


@pytest.mark.parametrize("where,kind,conf", [b for b in DOC_BLOCKS if b[1] != "fragment"],
                         ids=[b[0] for b in DOC_BLOCKS if b[1] != "fragment"])
def test_doc_example(workdir, where, kind, conf):
    if kind == "":
        rc, out, _ = same_check_config(workdir, conf)
        assert rc == 0, out
        return
    r = check_config(workdir, conf)
    assert r["dnslb"][0] == 0, r["dnslb"]
    assert r["dnslb"][1].endswith(ok()), r["dnslb"]


def test_shipped_conf():
    """conf/dnslb.conf uses dnslb's own functions: dnslb loads it, printing
    nothing else than the OK line."""
    path = os.path.join(SRC, "conf", "dnslb.conf")
    r = subprocess.run([dnslb_bin(), "--check-config", "-C", path], capture_output=True,
                       text=True, timeout=30)
    assert (r.returncode, r.stdout, r.stderr) == (0, ok(path), "")


# ---- listeners that cannot be bound --------------------------------------------

def start(impl, workdir, name, conf):
    path = os.path.join(workdir, name + ".conf")
    with open(path, "w") as f:
        f.write(conf)
    if impl == "dnsdist":
        argv = [DNSDIST, "--supervised", "--disable-syslog", "-C", path]
    else:
        argv = [dnslb_bin(), "--supervised", "--disable-syslog", "-C", path]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, cwd=workdir)


def listener_conf(port, reuse):
    opts = ", {reusePort=true}" if reuse else ""
    return ('setSecurityPollSuffix("")\nsetLocal("127.0.0.1:%d"%s)\n'
            'newServer({address="192.0.2.1:53", healthCheckMode="up"})\n' % (port, opts))


def second_instance(impl, workdir, first_reuse, second_reuse):
    """Start one daemon, then a second on the same address: (rc, stdout,
    stderr) of the second, or None when it is still running after 2 s."""
    port = free_port()
    first = start(impl, workdir, impl + "-1", listener_conf(port, first_reuse))
    try:
        time.sleep(1.0)
        assert first.poll() is None, first.communicate()
        second = start(impl, workdir, impl + "-2", listener_conf(port, second_reuse))
        try:
            out, err = second.communicate(timeout=2.0)
            return second.returncode, out.replace(str(port), "PORT"), err
        except subprocess.TimeoutExpired:
            return None
        finally:
            if second.poll() is None:
                second.kill()
                second.communicate()
    finally:
        first.kill()
        first.communicate()


@pytest.mark.parametrize("first_reuse,second_reuse", [(False, False), (True, False),
                                                      (False, True)])
def test_address_in_use_is_fatal(workdir, first_reuse, second_reuse):
    """A second daemon on an address the first holds: dnsdist exits 1 with
    `Fatal error: binding socket to ADDR: Address already in use` unless both
    have reusePort=true; so does dnslb, whose own workers share the address."""
    theirs = second_instance("dnsdist", workdir, first_reuse, second_reuse)
    ours = second_instance("dnslb", workdir, first_reuse, second_reuse)
    if (first_reuse, second_reuse) == (False, True):
        # dnsdist's first listener has no SO_REUSEPORT, dnslb's has (its workers
        # share it): the second, which asks to share, joins dnslb's
        assert theirs is not None and theirs[0] == 1, theirs
        assert known("A listener with reusePort=true can join one without it")
        assert ours is None
        return
    assert theirs is not None and ours is not None, (theirs, ours)
    assert theirs == ours, "dnsdist: %r\ndnslb:   %r" % (theirs, ours)
    assert theirs[1].endswith("Fatal error: binding socket to 127.0.0.1:PORT: "
                              "Address already in use\n")


def test_reuseport_both_start(workdir):
    for impl in ("dnsdist", "dnslb"):
        assert second_instance(impl, workdir, True, True) is None, impl


# ---- legacy calls with a behaviour ---------------------------------------------

@pytest.mark.parametrize("on", [False, True])
def test_fixup_case(pair, on):
    """fixupCase(true): the answer's question name is the query's, whatever
    case the backend answered with (the backend lowercases it here)."""
    from diffharness import build_query
    p = pair('newServer({address="@B0@"})\nfixupCase(%s)\n' % ("true" if on else "false"))
    for proto in ("udp", "tcp"):
        a = p.query(build_query("LowerCase.Example.TEST.", qid=5), proto)
        assert (b"\x09LowerCase" in a) == on, a


def test_listener_on_an_address_not_on_the_host(workdir):
    """dnsdist binds with IP_FREEBIND: a listener on an address the host does
    not have (yet) starts all the same (a virtual address of a failover pair).
    So does dnslb's."""
    port = free_port()
    conf = ('setSecurityPollSuffix("")\nsetLocal("192.0.2.1:%d")\n'
            'newServer({address="192.0.2.2:53", healthCheckMode="up"})\n' % port)
    for impl in ("dnsdist", "dnslb"):
        proc = start(impl, workdir, impl + "-freebind", conf)
        try:
            time.sleep(1.0)
            assert proc.poll() is None, (impl, proc.communicate())
        finally:
            proc.kill()
            proc.communicate()


def test_set_acl_from_file(pair, workdir):
    """setACLFromFile: one netmask a line, '#' comments, blank lines."""
    path = os.path.join(workdir, "acl.txt")
    with open(path, "w") as f:
        f.write("# the clients\n192.0.2.0/24\n\n  10.0.0.0/8  \n2001:db8::/32 # v6\n127.0.0.1\n")
    p = pair('newServer({address="@B0@"})\nsetACLFromFile("%s")\n' % path)
    assert p.console("showACL()") == "10.0.0.0/8\n127.0.0.1/32\n192.0.2.0/24\n2001:db8::/32\n"
    same_check_config(workdir, 'setACLFromFile("%s")\n' % path)
    bad = os.path.join(workdir, "bad.txt")
    with open(bad, "w") as f:
        f.write("192.0.2.0/24\nbogus\n")
    r = check_config(workdir, 'setACLFromFile("%s")\n' % bad)
    assert r["dnsdist"][0] == 1 and "Unable to convert 'bogus' to a netmask" in r["dnsdist"][1]
    assert known(ERRORS)
    assert r["dnslb"] == (1, lb_error(1, "setACLFromFile: %s:2: invalid netmask 'bogus'" % bad), "")


def test_listener_interface(pair):
    """interface="lo": SO_BINDTODEVICE, queries on it answered alike."""
    from diffharness import build_query
    p = pair('newServer({address="@B0@"})\n', listen_opts={"interface": "lo",
                                                            "tcpListenQueueSize": 64})
    for proto in ("udp", "tcp"):
        p.query(build_query("www.example.test.", qid=9), proto)


def test_listener_interface_missing(workdir):
    """An interface that does not exist: dnsdist logs `Error setting up the
    interface ...` and listens on every interface; dnslb refuses to start."""
    port = free_port()
    conf = ('setSecurityPollSuffix("")\nsetLocal("127.0.0.1:%d", {interface="nonexist0"})\n'
            'newServer({address="192.0.2.2:53", healthCheckMode="up"})\n' % port)
    proc = start("dnsdist", workdir, "dnsdist-if", conf)
    try:
        time.sleep(1.0)
        assert proc.poll() is None
    finally:
        proc.kill()
        out, _ = proc.communicate()
    assert ("Error setting up the interface on local address '127.0.0.1:%d': No such device"
            % port) in out.splitlines()
    assert known(INVALID)
    proc = start("dnslb", workdir, "dnslb-if", conf)
    out, err = proc.communicate(timeout=10)
    assert (proc.returncode, out, err) == (
        1, "Added downstream server 192.0.2.2:53\nFatal error: binding socket to 127.0.0.1:%d: "
           "No such device\n" % port, "")


def test_unknown_keys_logged_at_startup(pair):
    """dnsdist 1.7 is silent about an unknown key; the daemon dnslb logs it
    (and --check-config says nothing, see SAME)."""
    p = pair('newServer({address="@B0@", tcpReceiveTimeout=5})\n')
    line = "newServer: unknown key 'tcpReceiveTimeout'"
    assert not any("tcpReceiveTimeout" in l for l in p.theirs.daemon.output().splitlines())
    assert known("Unknown option keys are logged at startup")
    assert line in p.ours.daemon.output().splitlines()


IGNORED_TUNING = ['setMaxCachedTCPConnectionsPerDownstream(20)',
                  'setTCPDownstreamCleanupInterval(30)', 'setTCPDownstreamMaxIdleTime(120)',
                  'addCapabilitiesToRetain({"CAP_NET_BIND_SERVICE"})',
                  'setMaxTCPClientThreads(20)', 'setMaxTCPQueuedConnections(1000)',
                  'setTCPInternalPipeBufferSize(1048576)']


def test_ignored_tuning_calls(pair):
    """Accepted without a word, as dnsdist; no effect in dnslb (documented):
    traffic goes through alike."""
    from diffharness import build_query
    assert known("Tuning calls dnslb accepts and ignores")
    p = pair('newServer({address="@B0@"})\n' + "\n".join(IGNORED_TUNING) + "\n")
    for proto in ("udp", "tcp"):
        p.query(build_query("www.example.test.", qid=3), proto)
