"""Routing and health: server weights as newServer reads them, consistent
hashing with large weights, the record-count selectors on every section,
the ACL's answer to a refused client and the TCP per-client and
per-connection limits, compared with dnsdist 1.7.3."""

import json
import socket
import struct
import time

import pytest

from diffharness import TcpClient, build_query, known, same_check_config, strip_id
from dnslbtest import encode_name


@pytest.mark.parametrize("weight", ["0", "-1", "2147483647", "2147483648", '"abc"', "1.5",
                                    '"5"', '"0x10"', "1e3", '" 7x"', "true", "{}"])
def test_newserver_weight(workdir, weight):
    conf = ('newServer({address="127.0.0.1:5300", weight=%s})\n'
            'newServer({address="127.0.0.1:5301"})\n'
            'print(#getServers(), getServer(0):getName())\n' % weight)
    same_check_config(workdir, conf)


def backends_of(p):
    """For each side, which backend received which names (by their order)."""
    return {s.impl: [[q.wire[12:] for q in r.client_queries()] for r in s.responders]
            for s in (p.theirs, p.ours)}


@pytest.mark.parametrize("policy,weights", [
    ("chashed", (100000, 100000, 100000)),
    ("chashed", (1, 50, 1000)),
    ("whashed", (1, 2, 3)),
    ("whashed", (2147483647, 2147483647, 5)),
])
def test_hashed_policies(pair, policy, weights):
    # dnsdist draws its perturbation at random unless it is set
    assert known("The hash perturbation defaults to 0")
    body = "setWHashedPertubation(42)\nsetServerPolicy(%s)\n" % policy
    for i, w in enumerate(weights):
        body += ('newServer({address="@B%d@", weight=%d, '
                 'id="6c4d7a0e-43a4-4a6c-9c63-00000000000%d"})\n' % (i, w, i + 1))
    p = pair(body, backends=({}, {}, {}))
    for i in range(40):
        for proto in ("udp", "tcp"):
            a, b = p.answers(build_query("N%d.Example.test." % i, qid=i), proto)
            assert strip_id(a) == strip_id(b)
    time.sleep(0.1)
    got = backends_of(p)
    assert got["dnsdist"] == got["dnslb"]
    if len(set(weights)) == 1:
        assert all(got["dnslb"])
    if weights[0] == 2147483647:
        # dnsdist's sum of weights stops at 2^31 - 1: all to the first
        assert got["dnslb"][1:] == [[], []]
    p.stats()


def rr(name, rtype, rdata=b"\x7f\x00\x00\x01"):
    return encode_name(name) + struct.pack("!HHIH", rtype, 1, 60, len(rdata)) + rdata


def crafted(qname, qd=1, an=(), ns=(), ar=()):
    """A query with @qd questions and the given records in each section."""
    question = b"".join(encode_name(qname) + struct.pack("!HH", 1, 1) for _ in range(qd))
    body = b"".join(an) + b"".join(ns) + b"".join(ar)
    return build_query(qname, qid=0x4242, question=question, qdcount=qd, ancount=len(an),
                       nscount=len(ns), arcount=len(ar), trailing=body)


# Each rule sends its queries to a pool of its own backend, so what each
# backend received tells which rule matched (the answers are the backends').
RECORDS_RULES = [
    '''
addAction(RecordsCountRule(0, 2, 3), PoolAction("p1"))
addAction(RecordsCountRule(1, 1, 1), PoolAction("p2"))
addAction(RecordsTypeCountRule(1, DNSQType.TXT, 2, 3), PoolAction("p3"))
addAction(RecordsCountRule(2, 2, 65535), PoolAction("p4"))
''',
    '''
addAction(RecordsTypeCountRule(2, DNSQType.NS, 1, 1), PoolAction("p1"))
addAction(RecordsTypeCountRule(3, DNSQType.OPT, 1, 1), PoolAction("p2"))
addAction(RecordsCountRule(3, 2, 2), PoolAction("p3"))
addAction(RecordsTypeCountRule(3, DNSQType.A, 3, 5), PoolAction("p4"))
addAction(RecordsCountRule(0, 0, 0), DropAction())
''',
]
POOLS = '''
newServer({address="@B0@"})
newServer({address="@B1@", pool="p1"})
newServer({address="@B2@", pool="p2"})
newServer({address="@B3@", pool="p3"})
newServer({address="@B4@", pool="p4"})
'''


def record_cases():
    a = rr("a.example.test.", 1)
    txt = rr("t.example.test.", 16, b"\x02hi")
    ns = rr("example.test.", 2, encode_name("ns.example.test."))
    opt = b"\x00" + struct.pack("!HHIH", 41, 1232, 0, 0)
    return [
        crafted("plain.example.test."),
        crafted("two.example.test.", qd=2),
        crafted("three.example.test.", qd=3),
        crafted("four.example.test.", qd=4),
        crafted("zero.example.test.", qd=0),
        crafted("an1.example.test.", an=(a,)),
        crafted("an2.example.test.", an=(a, a)),
        crafted("an-txt2.example.test.", an=(txt, txt)),
        crafted("an-txt-a.example.test.", an=(txt, a, txt)),
        crafted("an-txt4.example.test.", an=(txt,) * 4),
        crafted("ns1.example.test.", ns=(ns,)),
        crafted("ns-a.example.test.", ns=(a,)),
        crafted("ns2.example.test.", ns=(ns, a)),
        crafted("ar-opt.example.test.", ar=(opt,)),
        crafted("ar-opt-a.example.test.", ar=(a, opt)),
        crafted("ar-a2.example.test.", ar=(a, a)),
        crafted("ar-a3.example.test.", ar=(a, a, a)),
        crafted("ar-a6.example.test.", ar=(a,) * 6),
        crafted("mixed.example.test.", an=(txt,), ns=(ns,), ar=(opt,)),
        build_query("edns.example.test.", qid=7, opt=True),
    ]


@pytest.mark.parametrize("rules", RECORDS_RULES)
def test_records_count_rules_on_every_section(pair, rules):
    p = pair(POOLS + rules, backends=({},) * 5)
    for wire in record_cases():
        for proto in ("udp", "tcp"):
            a, b = p.answers(wire, proto, timeout=1.0)
            assert strip_id(a) == strip_id(b), (wire.hex(), proto)
    time.sleep(0.1)
    got = backends_of(p)
    assert got["dnsdist"] == got["dnslb"]
    assert all(got["dnslb"][1:])   # every rule matched something
    p.stats()


def test_acl_refuses_the_client(pair):
    p = pair('newServer({address="@B0@"})\nsetACL({"192.0.2.0/24"})\n', backends=({},))
    for proto in ("udp", "tcp"):
        for name in ("www.example.test.", "nx.example.test."):
            assert p.query(build_query(name, qid=5), proto, timeout=0.5) is None
    p.stats()


def tcp_session(port, queries, gap=0.0, timeout=1.0):
    """Send @queries on one TCP connection, @gap seconds apart; the answers
    read (None where none came) and whether the server closed."""
    out = []
    with TcpClient(port) as c:
        for q in queries:
            try:
                c.send_msg(q)
                out.append(c.recv_msg(timeout))
            except (OSError, socket.timeout, ConnectionError):
                out.append(None)
            time.sleep(gap)
    return out


def strip(answers):
    return [a if a is None else b"\0\0" + a[2:] for a in answers]


def test_tcp_queries_per_connection(pair):
    p = pair('newServer({address="@B0@"})\nsetMaxTCPQueriesPerConnection(2)\n',
             backends=({},))
    qs = [build_query("q%d.example.test." % i, qid=i) for i in range(4)]
    a = strip(tcp_session(p.theirs.port, qs))
    b = strip(tcp_session(p.ours.port, qs))
    assert None not in a[:3] and a[3] is None
    assert known("setMaxTCPQueriesPerConnection(n) means n")
    assert b == a[:2] + [None, None]
    time.sleep(0.1)
    got = backends_of(p)
    assert got["dnslb"] == [got["dnsdist"][0][:2]]


def test_tcp_connections_per_client(pair):
    p = pair('newServer({address="@B0@"})\nsetMaxTCPConnectionsPerClient(1)\n',
             backends=({},))
    q = build_query("www.example.test.", qid=9)
    got = {}
    for side in (p.theirs, p.ours):
        first = TcpClient(side.port)
        first.send_msg(q)
        one = first.recv_msg(1.0)
        try:
            second = tcp_session(side.port, [q], timeout=0.5)
        finally:
            first.close()
        time.sleep(0.2)
        third = tcp_session(side.port, [q])
        got[side.impl] = strip([one] + second + third)
    assert got["dnsdist"] == got["dnslb"]
    assert got["dnsdist"][1] is None and got["dnsdist"][2] is not None
    p.assert_same_backend_traffic()
    p.stats()


def test_tcp_connection_duration(pair):
    p = pair('newServer({address="@B0@"})\nsetMaxTCPConnectionDuration(1)\n',
             backends=({},))
    qs = [build_query("d%d.example.test." % i, qid=i) for i in range(2)]
    a = strip(tcp_session(p.theirs.port, qs, gap=1.5))
    b = strip(tcp_session(p.ours.port, qs, gap=1.5))
    assert a == b
    assert a[0] is not None and a[1] is None
    p.assert_same_backend_traffic()
    p.stats()


def test_check_function(pair):
    p = pair('''
function cf(qname, qtype, qclass, dh)
  dh:setCD(true)
  dh:setRD(false)
  return newDNSName("health." .. qname:toString()), DNSQType.TXT, qclass
end
newServer({address="@B0@", checkFunction=cf, checkName="probe.example.test."})
newServer({address="@B1@", checkFunction=function(n, t, c, dh) return n, t, c end,
           checkType="AAAA"})
newServer({address="@B2@", checkFunction=function(n, t, c, dh) error("no") end})
''', backends=({}, {}, {}))
    time.sleep(2.5)
    got = {}
    for s in (p.theirs, p.ours):
        # the first checks each backend received (ID aside), and the states
        got[s.impl] = ([[strip_id(q.wire) for q in r.client_queries()][:2] for r in s.responders],
                       [l.split()[3] for l in s.console("showServers()").splitlines()[1:-1]])
    assert got["dnsdist"] == got["dnslb"]
    assert got["dnslb"][1] == ["up", "up", "down"]
    assert got["dnslb"][0][0][0][2:4] == b"\x00\x10"   # CD, no RD


def quiet(text):
    """dnsdist's console client evaluates the configuration too, and prints
    its warnings about the web server's plain-text credentials first."""
    return "".join(l for l in text.splitlines(True) if not l.startswith("Passing a plain-text"))


def test_tee_action(pair):
    p = pair('''
newServer({address="@B0@"})
tee = TeeAction("@B1@")
addAction("tee.example.test.", tee)
addAction(makeRule("nx.example.test."), TeeAction("@B1@"))
''', backends=({}, {}), web=True)
    for name in ("tee.example.test.", "www.example.test.", "nx.example.test.", "tee.example.test."):
        for proto in ("udp", "tcp"):
            a, b = p.answers(build_query(name, qid=0x4444, opt=True), proto)
            assert strip_id(a) == strip_id(b)
    time.sleep(0.5)
    got = {s.impl: [[(q.transport, strip_id(q.wire)) for q in s.responders[0].client_queries()],
                    [(q.transport, q.wire) for q in s.responders[1].client_queries()]]
           for s in (p.theirs, p.ours)}
    # the copies keep the client's ID: compare them whole
    assert got["dnsdist"] == got["dnslb"]
    assert len(got["dnslb"][1]) == 3
    stats = ("local t = {} for k, v in pairs(tee:getStats()) do t[#t + 1] = k .. '=' .. v end "
             "table.sort(t) return table.concat(t, ' ')")
    a, b = quiet(p.theirs.console(stats)), p.ours.console(stats)
    assert a == b
    assert "queries=2" in b and "tcp-drops=2" in b
    a, b = (json.loads(s.web("/api/v1/servers/localhost")[1])["rules"] for s in (p.theirs, p.ours))
    assert [r["action-stats"] for r in a] == [r["action-stats"] for r in b]
    assert b[0]["action-stats"]["queries"] == 2
    a, b = quiet(p.theirs.console("showRules()")), p.ours.console("showRules()")
    assert a.replace(p.theirs.responders[1].address, "T") == \
        b.replace(p.ours.responders[1].address, "T")
    p.stats()
