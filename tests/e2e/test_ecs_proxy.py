"""EDNS Client Subnet (useClientSubnet, setECSSourcePrefixV4/V6,
setECSOverride) and PROXY protocol v2 towards backends (useProxyProtocol).

ECS: the responder records the OPT options of every query (Query.opt), so
the tests read the ECS option the backend saw; the answers it sends echo the
query's OPT (with the ECS), which dnslb must take out again. Clients bind to
other loopback addresses (127.0.0.2, 127.1.0.1, ...: all of 127/8 is usable
as a source on Linux) to be in different /24s.

PROXY: Responder(proxy_protocol=True) strips and parses the v2 header of each
UDP datagram and at the start of each TCP connection (Query.proxy).
"""

import os
import socket
import struct
import time

import dns.edns
import dns.message
import pytest

from dnslbtest import (DNSDIST, IMPL, a_addrs, build_query, console, console_head, lua_server,
                       lua_value, make_query, parse, tcp_query, udp_query, udp_raw,
                       wait_until)

FAST = "setUDPTimeout(0.5)\n"
ECS = 8
COOKIE = 10
CLIENT_COOKIE = bytes.fromhex("0102030405060708")


# ---------------------------------------------------------------------------
# helpers

def ecs_opt(wire_opts):
    """The ECS options in a responder-recorded option list, decoded:
    [(family, source, scope, address bytes)]."""
    out = []
    for code, data in wire_opts:
        if code == ECS:
            fam, src, scope = struct.unpack("!HBB", data[:4])
            out.append((fam, src, scope, bytes(data[4:])))
    return out


def ecs_data(family, source, addr_bytes, scope=0):
    return struct.pack("!HBB", family, source, scope) + addr_bytes


def backend_ecs(q):
    """The ECS options of a query the responder saw (asserts it had an OPT)."""
    assert q.opt is not None, "the backend saw no OPT RR: %r" % q.wire
    return ecs_opt(q.opt["options"])


def msg_options(msg):
    """[(code, data)] of a dnspython Message's OPT."""
    return [(o.otype, o.to_wire()) for o in msg.options]


def udp_from(src, port, wire, host="127.0.0.1", timeout=3.0):
    """Send @wire from a socket bound to @src; (answer or None, (src, sport))."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    try:
        s.bind((src, 0))
        s.settimeout(timeout)
        s.connect((host, port))
        name = s.getsockname()[:2]
        s.send(wire)
        try:
            return s.recv(65535), name
        except socket.timeout:
            return None, name
    finally:
        s.close()


def tcp_connect(src, port, host="127.0.0.1"):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(5.0)
    s.bind((src, 0))
    s.connect((host, port))
    return s


def tcp_send(s, wire):
    s.sendall(struct.pack("!H", len(wire)) + wire)


def tcp_recv(s):
    def exact(n):
        b = b""
        while len(b) < n:
            d = s.recv(n - len(b))
            if not d:
                return None
            b += d
        return b
    h = exact(2)
    if h is None:
        return None
    return exact(struct.unpack("!H", h)[0])


def ask_from(d, src, name, qtype="A", tcp=False, host="127.0.0.1", **kw):
    q = make_query(name, qtype, **kw)
    if tcp:
        s = tcp_connect(src, d.port, host)
        try:
            tcp_send(s, q.to_wire())
            wire = tcp_recv(s)
        finally:
            s.close()
    else:
        wire, _ = udp_from(src, d.port, q.to_wire(), host)
    assert wire is not None, "no answer to %s (from %s)" % (name, src)
    r = parse(wire)
    assert r.id == q.id
    return r


def ecs_conf(responder, extra="", **server):
    server.setdefault("useClientSubnet", True)
    return lua_server(responder, **server) + FAST + extra


def one_query(responder, prefix, n=1):
    qs = responder.wait_queries(prefix, n)
    assert len(qs) == n, "backend saw %d queries for %s, expected %d: %r" % (
        len(qs), prefix, n, qs)
    return qs[-1]


# ---------------------------------------------------------------------------
# (A) ECS

@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_ecs_added_without_edns(dnslb, responder, tcp):
    """A client without EDNS: the backend sees a new OPT (payload 512) with
    ECS 127.0.0.0/24 scope 0; the client's answer has no OPT."""
    d = dnslb(ecs_conf(responder))
    r = ask_from(d, "127.0.0.1", "noedns.ecs.test.", tcp=tcp)
    assert a_addrs(r) == ["192.0.2.1"]
    assert r.edns < 0, "the answer carries an OPT the client did not send: %s" % r
    q = one_query(responder, "noedns.")
    assert q.transport == ("tcp" if tcp else "udp")
    assert backend_ecs(q) == [(1, 24, 0, bytes([127, 0, 0]))]
    assert [c for c, _ in q.opt["options"]] == [ECS]
    assert not q.opt["do"]
    assert struct.unpack("!H", q.wire[10:12])[0] == 1     # arcount


def test_ecs_new_opt_payload_is_512(dnslb, responder):
    d = dnslb(ecs_conf(responder))
    ask_from(d, "127.0.0.1", "payload.ecs.test.")
    assert one_query(responder, "payload.").opt["payload"] == 512


@pytest.mark.parametrize("src,prefix,expect", [
    ("127.0.0.1", None, (24, bytes([127, 0, 0]))),
    ("127.0.0.1", 32, (32, bytes([127, 0, 0, 1]))),
    ("127.9.8.7", None, (24, bytes([127, 9, 8]))),
    ("127.9.8.255", 25, (25, bytes([127, 9, 8, 128]))),
    ("127.9.8.7", 12, (12, bytes([127, 0]))),
    ("127.9.8.7", 0, (0, b"")),
])
def test_ecs_source_prefix_v4(dnslb, responder, src, prefix, expect):
    extra = "" if prefix is None else "setECSSourcePrefixV4(%d)\n" % prefix
    d = dnslb(ecs_conf(responder, extra))
    r = ask_from(d, src, "prefix.ecs.test.")
    assert a_addrs(r) == ["192.0.2.1"]
    assert backend_ecs(one_query(responder, "prefix.")) == [(1, expect[0], 0, expect[1])]


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_ecs_client_edns_kept(dnslb, responder, tcp):
    """A client with EDNS (payload 4096, DO, a cookie): the backend sees its
    OPT plus our ECS; the client gets its OPT back without the ECS."""
    d = dnslb(ecs_conf(responder))
    opts = [dns.edns.GenericOption(COOKIE, CLIENT_COOKIE)]
    r = ask_from(d, "127.0.0.1", "cookie.ecs.test.", tcp=tcp, edns=0, payload=4096,
                 options=opts, want_dnssec=True)
    assert a_addrs(r) == ["192.0.2.1"]
    q = one_query(responder, "cookie.")
    assert q.opt["payload"] == 4096 and q.opt["do"]
    assert (COOKIE, CLIENT_COOKIE) in [(c, bytes(v)) for c, v in q.opt["options"]]
    assert backend_ecs(q) == [(1, 24, 0, bytes([127, 0, 0]))]
    assert r.edns == 0, "the client's OPT is gone from the answer: %s" % r
    assert r.payload == 4096
    assert msg_options(r) == [(COOKIE, CLIENT_COOKIE)], msg_options(r)


def test_ecs_client_edns_no_options(dnslb, responder):
    d = dnslb(ecs_conf(responder))
    r = ask_from(d, "127.0.0.1", "plainedns.ecs.test.", edns=0, payload=1400)
    q = one_query(responder, "plainedns.")
    assert backend_ecs(q) == [(1, 24, 0, bytes([127, 0, 0]))]
    assert q.opt["payload"] == 1400
    assert r.edns == 0 and msg_options(r) == []


def _client_ecs_query(name):
    opts = [dns.edns.GenericOption(ECS, ecs_data(1, 8, bytes([10]))),
            dns.edns.GenericOption(COOKIE, CLIENT_COOKIE)]
    return dict(edns=0, payload=1232, options=opts)


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_ecs_client_ecs_kept_without_override(dnslb, responder, tcp):
    d = dnslb(ecs_conf(responder))
    r = ask_from(d, "127.0.0.1", "keep.ecs.test.", tcp=tcp, **_client_ecs_query("keep"))
    assert a_addrs(r) == ["192.0.2.1"]
    q = one_query(responder, "keep.")
    assert backend_ecs(q) == [(1, 8, 0, bytes([10]))]
    # forwarded as is: the same options in the same order
    assert [(c, bytes(v)) for c, v in q.opt["options"]] == [
        (ECS, ecs_data(1, 8, bytes([10]))), (COOKIE, CLIENT_COOKIE)]
    # the client's own ECS comes back (the backend echoed it; dnslb added nothing)
    assert (ECS, ecs_data(1, 8, bytes([10]))) in msg_options(r)


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_ecs_client_ecs_replaced_with_override(dnslb, responder, tcp):
    d = dnslb(ecs_conf(responder, "setECSOverride(true)\n"))
    r = ask_from(d, "127.0.0.1", "override.ecs.test.", tcp=tcp, **_client_ecs_query("o"))
    assert a_addrs(r) == ["192.0.2.1"]
    q = one_query(responder, "override.")
    assert backend_ecs(q) == [(1, 24, 0, bytes([127, 0, 0]))]
    assert (COOKIE, CLIENT_COOKIE) in [(c, bytes(v)) for c, v in q.opt["options"]]
    assert r.edns == 0
    assert (COOKIE, CLIENT_COOKIE) in msg_options(r)


@pytest.mark.dnslb_only("spec: the ECS option is removed from the answer; 1.7.3 relays it")
def test_ecs_override_answer_has_no_ecs(dnslb, responder):
    d = dnslb(ecs_conf(responder, "setECSOverride(true)\n"))
    for tcp in (False, True):
        r = ask_from(d, "127.0.0.1", "override2.ecs.test.", tcp=tcp, **_client_ecs_query("o"))
        # what dnslb put in (127.0.0.0/24) does not leak to the client
        assert [c for c, _ in msg_options(r)] == [COOKIE], msg_options(r)


def test_ecs_not_added_without_use_client_subnet(dnslb, responder):
    d = dnslb(lua_server(responder) + FAST + "setECSSourcePrefixV4(32)\n")
    ask_from(d, "127.0.0.1", "plain.ecs.test.")
    q = one_query(responder, "plain.")
    assert q.opt is None
    ask_from(d, "127.0.0.1", "plain2.ecs.test.", edns=0)
    q = one_query(responder, "plain2.")
    assert backend_ecs(q) == []


def test_ecs_trailing_bytes_dropped(dnslb, responder):
    """A query with bytes after its last record loses them and gets the
    ECS option, as dnsdist 1.7.3 does."""
    d = dnslb(ecs_conf(responder))
    for i, opt in enumerate((None, True)):
        name = "trail%d.ecs.test." % i
        wire = build_query(name, opt=opt, trailing=b"\x00\x00\x00garbage")
        ans = udp_raw(d.port, wire)
        q = one_query(responder, "trail%d." % i)
        assert b"garbage" not in q.wire, q.wire
        assert backend_ecs(q) == [(1, 24, 0, bytes([127, 0, 0]))]
        assert ans is not None


@pytest.fixture
def v6_only():
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s.bind(("::1", 0))
        s.close()
    except OSError:
        pytest.skip("no IPv6 loopback")


@pytest.mark.parametrize("prefix,expect", [(None, (56, bytes(7))),
                                           (128, (128, bytes(15) + b"\x01")),
                                           (127, (127, bytes(16)))])
@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_ecs_ipv6_client(dnslb, make_responder, v6_only, prefix, expect, tcp):
    r6 = make_responder(host="::1")
    extra = "" if prefix is None else "setECSSourcePrefixV6(%d)\n" % prefix
    d = dnslb(ecs_conf(r6, extra), host="::1")
    r = ask_from(d, "::1", "v6.ecs.test.", tcp=tcp, host="::1")
    assert a_addrs(r) == ["192.0.2.1"]
    assert r.edns < 0
    assert backend_ecs(one_query(r6, "v6.")) == [(2, expect[0], 0, expect[1])]


def test_ecs_v4_client_v6_backend(dnslb, make_responder, v6_only):
    """The ECS family is the client's, not the backend's."""
    r6 = make_responder(host="::1")
    d = dnslb(ecs_conf(r6))
    ask_from(d, "127.0.0.1", "mixed.ecs.test.")
    assert backend_ecs(one_query(r6, "mixed.")) == [(1, 24, 0, bytes([127, 0, 0]))]


def _cache_conf(responder, extra=""):
    return (ecs_conf(responder, extra) + "pc = newPacketCache(1000)\n"
            + 'getPool(""):setCache(pc)\n')


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_ecs_cache_same_client_hits(dnslb, responder, tcp):
    d = dnslb(_cache_conf(responder))
    r1 = ask_from(d, "127.0.0.1", "cache.ecs.test.", tcp=tcp)
    r2 = ask_from(d, "127.0.0.1", "cache.ecs.test.", tcp=tcp)
    assert a_addrs(r1) == a_addrs(r2) == ["192.0.2.1"]
    assert r1.edns < 0 and r2.edns < 0, "a cache hit carries an OPT: %s" % r2
    time.sleep(0.2)
    assert len(responder.queries_for("cache.")) == 1


def test_ecs_cache_key_separates_subnets(dnslb, responder):
    """Same /24: one backend query; another /24: a second one."""
    d = dnslb(_cache_conf(responder))
    ask_from(d, "127.0.0.1", "subnet.ecs.test.")
    ask_from(d, "127.0.0.2", "subnet.ecs.test.")        # same /24: a hit
    ask_from(d, "127.0.0.200", "subnet.ecs.test.")
    time.sleep(0.2)
    assert len(responder.queries_for("subnet.")) == 1
    ask_from(d, "127.1.0.1", "subnet.ecs.test.")        # another /24: a miss
    qs = responder.wait_queries("subnet.", 2)
    assert len(qs) == 2
    assert backend_ecs(qs[1]) == [(1, 24, 0, bytes([127, 1, 0]))]
    ask_from(d, "127.1.0.99", "subnet.ecs.test.")       # a hit for 127.1.0/24
    ask_from(d, "127.0.0.5", "subnet.ecs.test.")        # still cached for 127.0.0/24
    time.sleep(0.2)
    assert len(responder.queries_for("subnet.")) == 2


def test_ecs_cache_key_prefix32(dnslb, responder):
    d = dnslb(_cache_conf(responder, "setECSSourcePrefixV4(32)\n"))
    ask_from(d, "127.0.0.1", "p32.ecs.test.")
    ask_from(d, "127.0.0.1", "p32.ecs.test.")
    ask_from(d, "127.0.0.2", "p32.ecs.test.")
    qs = responder.wait_queries("p32.", 2)
    time.sleep(0.2)
    assert len(responder.queries_for("p32.")) == 2
    assert backend_ecs(qs[1]) == [(1, 32, 0, bytes([127, 0, 0, 2]))]


def test_ecs_cache_client_ecs_hit(dnslb, responder):
    """With the client's own ECS kept, the entry is keyed by it; a repeat hits
    and still carries the client's ECS."""
    d = dnslb(_cache_conf(responder))
    kw = _client_ecs_query("c")
    r1 = ask_from(d, "127.0.0.1", "cecs.ecs.test.", **kw)
    r2 = ask_from(d, "127.0.0.1", "cecs.ecs.test.", **kw)
    time.sleep(0.2)
    assert len(responder.queries_for("cecs.")) == 1
    assert msg_options(r1) == msg_options(r2)


@pytest.mark.dnslb_only("runtime newServer through dnslb's console client")
def test_ecs_cache_server_joins_at_runtime(dnslb, make_responder):
    """A hit does not wait for server selection when no server of the pool
    adds ECS (docs/cache.md, "Lookup before selection"). A useClientSubnet
    server that joins the pool at runtime and is chosen puts the subnet in the
    key again (a miss, sent to it with ECS, as dnsdist); once it is removed,
    the entry without ECS answers again."""
    a, b = make_responder(), make_responder()
    d = dnslb(console_head() + lua_server(a, name="a", order=2, healthCheckMode="up") + FAST
              + 'pc = newPacketCache(1000)\ngetPool(""):setCache(pc)\n')
    for _ in range(2):
        assert a_addrs(ask_from(d, "127.0.0.1", "join.ecs.test.")) == ["192.0.2.1"]
    assert one_query(a, "join.").opt is None       # no ECS added

    console(d, 'newServer({address="%s", name="b", order=1, useClientSubnet=true, '
               'healthCheckMode="up"})' % b.address)
    for _ in range(2):
        assert a_addrs(ask_from(d, "127.0.0.1", "join.ecs.test.")) == ["192.0.2.1"]
    assert backend_ecs(one_query(b, "join.")) == [(1, 24, 0, bytes([127, 0, 0]))]

    console(d, "rmServer(1)")
    for _ in range(2):
        assert a_addrs(ask_from(d, "127.0.0.1", "join.ecs.test.")) == ["192.0.2.1"]
    time.sleep(0.2)
    assert len(a.queries_for("join.")) == 1
    assert len(b.queries_for("join.")) == 1


@pytest.mark.skipif(IMPL != "dnslb", reason="compares dnslb with dnsdist")
def test_ecs_same_as_dnsdist(dnslb, make_responder):
    """The ECS option the backend sees, and the OPT presence and options in
    the client's answer, are the same as with dnsdist 1.7.3."""
    if not os.path.exists(DNSDIST):
        pytest.skip("dnsdist is not installed (%s)" % DNSDIST)
    cases = [
        ("", "a", dict()),
        ("", "b", dict(edns=0, payload=4096,
                       options=[dns.edns.GenericOption(COOKIE, CLIENT_COOKIE)])),
        ("", "c", _client_ecs_query("c")),
        ("setECSSourcePrefixV4(32)\n", "d", dict()),
        ("setECSSourcePrefixV4(20)\n", "e", dict(edns=0)),
        ("setECSOverride(true)\n", "f", _client_ecs_query("f")),
    ]
    for extra, label, kw in cases:
        seen = {}
        answers = {}
        for impl in ("dnslb", "dnsdist"):
            resp = make_responder()
            conf = ecs_conf(resp, extra)
            if impl == "dnsdist":
                try:
                    d = dnslb(conf, impl="dnsdist", name="dnsdist-" + label)
                except Exception as e:
                    pytest.skip("dnsdist cannot be started here: %s" % e)
            else:
                d = dnslb(conf, name="dnslb-" + label)
            wait_until(lambda: resp.check_queries(), 3.0)
            r = ask_from(d, "127.0.0.1", "%s.cmp.ecs.test." % label, **kw)
            q = one_query(resp, "%s.cmp." % label)
            seen[impl] = backend_ecs(q)
            opts = msg_options(r)
            if label != "f":        # dnslb removes its ECS after override; 1.7.3 not
                answers[impl] = (r.edns, opts)
            d.stop()
        assert seen["dnslb"] == seen["dnsdist"], (label, extra, seen)
        if answers:
            assert answers["dnslb"] == answers["dnsdist"], (label, extra, answers)


# ---------------------------------------------------------------------------
# (B) PROXY protocol v2

@pytest.fixture
def pp(make_responder):
    return make_responder(proxy_protocol=True)


def _pp_conf(r, **opts):
    return lua_server(r, useProxyProtocol=True, **opts) + FAST


def _proxy_queries(r, prefix):
    qs = r.wait_queries(prefix)
    return qs


@pytest.mark.parametrize("src", ["127.0.0.1", "127.0.0.2"])
def test_proxy_udp(dnslb, pp, src):
    d = dnslb(_pp_conf(pp))
    q = make_query("ppudp.example.test.", "A")
    wire, (csrc, cport) = udp_from(src, d.port, q.to_wire())
    assert wire is not None, "no answer through a PROXY backend; errors: %r" % pp.proxy_errors
    r = parse(wire)
    assert r.id == q.id and a_addrs(r) == ["192.0.2.1"]
    qs = pp.queries_for("ppudp.")
    assert len(qs) == 1, qs
    h = qs[0].proxy
    assert h is not None, "datagram without a PROXY v2 header: %r" % (pp.proxy_errors,)
    assert h["version"] == 2 and h["command"] == "PROXY"
    assert h["family"] == 0x12
    assert h["length"] == 12 and h["tlvs"] == b""
    assert h["src"] == (csrc, cport)
    assert h["dst"] == ("127.0.0.1", d.port)
    assert pp.proxy_errors == []


def test_proxy_udp_each_datagram(dnslb, pp):
    """Every datagram carries a header naming its own client."""
    d = dnslb(_pp_conf(pp))
    srcs = []
    for i, src in enumerate(("127.0.0.3", "127.0.0.4", "127.0.0.3")):
        wire, name = udp_from(src, d.port, make_query("ppeach%d.example.test." % i).to_wire())
        assert wire is not None
        srcs.append(name)
    for i, name in enumerate(srcs):
        qs = pp.queries_for("ppeach%d." % i)
        assert len(qs) == 1 and qs[0].proxy is not None
        assert qs[0].proxy["src"] == name
    assert pp.proxy_errors == []


def test_proxy_tcp(dnslb, pp):
    d = dnslb(_pp_conf(pp))
    a = tcp_connect("127.0.0.5", d.port)
    b = tcp_connect("127.0.0.6", d.port)
    try:
        names = {}
        for s, tag in ((a, "a"), (b, "b"), (a, "a"), (b, "b")):
            q = make_query("pptcp-%s-%d.example.test." % (tag, len(names)), "A")
            names.setdefault(tag, []).append(q)
            tcp_send(s, q.to_wire())
            w = tcp_recv(s)
            assert w is not None, "no answer over TCP; errors: %r" % pp.proxy_errors
            r = parse(w)
            assert r.id == q.id and a_addrs(r) == ["192.0.2.1"]
        peers = {"a": a.getsockname()[:2], "b": b.getsockname()[:2]}
    finally:
        a.close()
        b.close()
    assert pp.proxy_errors == []
    by_conn = {}
    for q in pp.queries_for("pptcp-"):
        assert q.transport == "tcp"
        assert q.proxy is not None
        tag = q.qname.split("-")[1]
        h = q.proxy
        assert h["command"] == "PROXY" and h["family"] == 0x11
        assert h["src"] == peers[tag], (tag, h, peers)
        assert h["dst"] == ("127.0.0.1", d.port)
        by_conn.setdefault(q.src, set()).add(tag)
    assert len(pp.queries_for("pptcp-")) == 4
    # a backend connection carries the queries of one client connection only
    assert all(len(tags) == 1 for tags in by_conn.values()), by_conn
    # each backend connection starts with a header
    assert len(pp.tcp_proxy_headers) >= 2
    for peer, h in pp.tcp_proxy_headers:
        assert h["command"] in ("PROXY", "LOCAL")


def test_proxy_ipv6(dnslb, make_responder, v6_only):
    r6 = make_responder(host="::1", proxy_protocol=True)
    d = dnslb(_pp_conf(r6), host="::1")
    q = make_query("pp6udp.example.test.")
    wire, (csrc, cport) = udp_from("::1", d.port, q.to_wire(), host="::1")
    assert wire is not None and a_addrs(parse(wire)) == ["192.0.2.1"]
    h = r6.queries_for("pp6udp.")[0].proxy
    assert h is not None and h["family"] == 0x22 and h["length"] == 36
    assert h["src"] == (csrc, cport) and h["dst"] == ("::1", d.port)
    s = tcp_connect("::1", d.port, host="::1")
    try:
        q = make_query("pp6tcp.example.test.")
        tcp_send(s, q.to_wire())
        w = tcp_recv(s)
        peer = s.getsockname()[:2]
    finally:
        s.close()
    assert w is not None and a_addrs(parse(w)) == ["192.0.2.1"]
    h = r6.queries_for("pp6tcp.")[0].proxy
    assert h is not None and h["family"] == 0x21
    assert h["src"] == peer and h["dst"] == ("::1", d.port)
    assert r6.proxy_errors == []


@pytest.mark.parametrize("check_tcp", [False, True], ids=["udp", "tcp"])
def test_proxy_health_check_local(dnslb, pp, check_tcp):
    opts = {"checkInterval": 1}
    if check_tcp:
        opts["checkTCP"] = True
    d = dnslb(_pp_conf(pp, **opts))
    checks = wait_until(lambda: pp.check_queries(), 5.0)
    assert checks, "no health check reached the backend; errors: %r" % pp.proxy_errors
    for q in checks:
        assert q.transport == ("tcp" if check_tcp else "udp")
        h = q.proxy
        assert h is not None, "health check without a PROXY header"
        assert h["command"] == "LOCAL" and h["family"] == 0 and h["length"] == 0, h
        assert h["raw"] == b"\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00"
    # the backend answered them: it is up, and serves queries
    r = udp_query(d.port, "afterchk.example.test.")
    assert r is not None and a_addrs(r) == ["192.0.2.1"]
    assert pp.proxy_errors == []


def test_proxy_not_sent_without_key(dnslb, make_responder):
    """A plain backend gets plain DNS (the responder in proxy mode rejects it)."""
    r = make_responder(proxy_protocol=True)
    d = dnslb(lua_server(r) + FAST)
    udp_query(d.port, "plainpp.example.test.", timeout=1.0)
    assert wait_until(lambda: r.proxy_errors, 3.0), \
        "a datagram passed as PROXY v2 without useProxyProtocol"
    assert all(q.proxy is None for q in r.queries)
