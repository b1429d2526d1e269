"""DNS over TCP: forwarding, pipelining and out-of-order answers, 65,535-byte
messages, the framing faults of bad-inputs §3.2 C, connection limits,
tcpOnly backends, a backend that never answers."""

import socket
import struct
import threading
import time

import dns.rcode
import pytest

from dnslbtest import (QR, RD, Header, TcpClient, UdpClient, a_addrs, build_query,
                       lua_server, parse, question_bytes, tcp_query, udp_query)

QTQC = struct.pack("!HH", 1, 1)


def test_tcp_forward(dnslb, responder):
    d = dnslb(lua_server(responder))
    r = tcp_query(d.port, "tcp.example.test.")
    assert r is not None and a_addrs(r) == ["192.0.2.1"]
    qs = responder.queries_for("tcp.example.test.")
    assert len(qs) == 1 and qs[0].transport == "tcp", "TCP client not forwarded over TCP"


def test_tcp_sequential_queries_one_connection(dnslb, responder):
    d = dnslb(lua_server(responder))
    with TcpClient(d.port) as c:
        for i in range(5):
            c.send_msg(build_query("seq%d.example.test." % i, qid=100 + i))
            a = c.recv_msg(5.0)
            assert a is not None, "query %d not answered" % i
            assert Header(a).id == 100 + i
            assert parse(a).question[0].name.to_text() == "seq%d.example.test." % i


def test_tcp_pipelined_one_segment(dnslb, responder):
    d = dnslb(lua_server(responder))
    n = 5
    wires = [build_query("pipe%d.example.test." % i, qid=200 + i) for i in range(n)]
    with TcpClient(d.port) as c:
        c.send_raw(b"".join(struct.pack("!H", len(w)) + w for w in wires))
        got = [c.recv_msg(5.0) for _ in range(n)]
    assert None not in got, "only %d of %d answered" % (n - got.count(None), n)
    by_id = {Header(a).id: a for a in got}
    assert sorted(by_id) == [200 + i for i in range(n)]
    for i in range(n):
        assert parse(by_id[200 + i]).question[0].name.to_text() == "pipe%d.example.test." % i


def test_tcp_out_of_order_answers(dnslb, responder):
    """With maxInFlight, a fast answer is not held back behind a slow one."""
    d = dnslb(lua_server(responder), listen_opts={"maxInFlight": 16})
    slow = build_query("ooo-2000.slow.example.test.", qid=1)
    fast = build_query("ooo-0.fast.example.test.", qid=2)
    with TcpClient(d.port) as c:
        c.send_raw(struct.pack("!H", len(slow)) + slow + struct.pack("!H", len(fast)) + fast)
        first = c.recv_msg(5.0)
        second = c.recv_msg(5.0)
    assert first is not None and second is not None
    assert Header(first).id == 2, "answers came back in order"
    assert Header(second).id == 1
    assert a_addrs(first) == a_addrs(second) == ["192.0.2.1"]


def test_tcp_many_clients(dnslb, responder):
    d = dnslb(lua_server(responder))
    errors = []

    def client(k):
        try:
            with TcpClient(d.port) as c:
                for i in range(5):
                    c.send_msg(build_query("m%d-%d.example.test." % (k, i), qid=i))
                    a = c.recv_msg(10.0)
                    if a is None or Header(a).id != i or a_addrs(a) != ["192.0.2.1"]:
                        errors.append((k, i, a))
        except OSError as e:
            errors.append((k, e))
    ts = [threading.Thread(target=client, args=(k,)) for k in range(20)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert errors == []


def test_tcp_query_65535_bytes(dnslb, responder):
    """A 65,535-byte query (a question plus trailing bytes) is accepted."""
    d = dnslb(lua_server(responder))
    base = build_query("max.example.test.", qid=0x6565)
    wire = base + b"\x00" * (65535 - len(base))
    assert len(wire) == 65535
    with TcpClient(d.port) as c:
        c.send_msg(wire)
        a = c.recv_msg(10.0)
    assert a is not None, "65,535-byte query not answered"
    assert Header(a).id == 0x6565 and a_addrs(a) == ["192.0.2.1"]
    assert len(responder.queries_for("max.example.test.")) == 1


@pytest.mark.parametrize("label,size", [("big", None), ("big-65535", 65535)])
def test_tcp_large_answer(dnslb, responder, label, size):
    d = dnslb(lua_server(responder))
    with TcpClient(d.port) as c:
        c.send_msg(build_query("%s.example.test." % label, qtype=16, qid=0x7070))
        a = c.recv_msg(10.0)
    assert a is not None, "large answer not relayed"
    if size:
        assert len(a) == size
    else:
        assert len(a) >= 59000
    h = Header(a)
    assert h.id == 0x7070 and h.ancount > 200 and not h.tc
    m = parse(a)
    assert sum(len(rr) for rr in m.answer) == h.ancount


def test_tcp_tc_answer_relayed(dnslb, responder):
    d = dnslb(lua_server(responder))
    with TcpClient(d.port) as c:
        c.send_msg(build_query("tc.example.test.", qid=0x7171))
        a = c.recv_msg(5.0)
    assert a is not None
    h = Header(a)
    assert h.tc and h.id == 0x7171


# ---- framing faults (bad-inputs §3.2 C) -----------------------------------

SLOW = "setTCPRecvTimeout(1)\n"
PATIENT = "setTCPRecvTimeout(10)\n"


def still_serving(d):
    r = tcp_query(d.port, "alive.example.test.")
    assert r is not None and a_addrs(r) == ["192.0.2.1"], "dnslb stopped answering over TCP"


@pytest.mark.parametrize("case", ["nothing", "one-byte", "partial-message"])
def test_tcp_stalled_connection_closed(dnslb, responder, case):
    """#52, #53, #56: closed at the receive timeout (1 s here)."""
    d = dnslb(lua_server(responder) + SLOW)
    with TcpClient(d.port) as c:
        if case == "one-byte":
            c.send_raw(b"\x00")
        elif case == "partial-message":
            c.send_raw(struct.pack("!H", 100) + build_query("p.example.test.")[:20])
        assert c.wait_closed(8.0), "stalled connection (%s) not closed" % case
        assert c.buf == b""
    still_serving(d)


@pytest.mark.parametrize("case", ["length-0", "length-5", "length-11", "malformed", "qr-set",
                                  "pointer-loop"])
def test_tcp_bad_message_closes(dnslb, responder, case):
    """#54, #55, #59: closed at once (the receive timeout here is 10 s), no answer."""
    d = dnslb(lua_server(responder) + PATIENT)
    msgs = {
        "length-0": b"\x00\x00",
        "length-5": b"\x00\x05" + b"\x12\x34\x01\x00\x00",
        "length-11": b"\x00\x0b" + b"\x00" * 11,
        "malformed": None,
        "qr-set": None,
        "pointer-loop": None,
    }
    with TcpClient(d.port) as c:
        if case == "malformed":
            w = struct.pack("!HHHHHH", 9, RD, 1, 0, 0, 0) + b"\x3f" + b"a" * 10
            c.send_msg(w)
        elif case == "qr-set":
            c.send_msg(build_query("qr.example.test.", flags=QR | RD, qid=9))
        elif case == "pointer-loop":
            c.send_msg(struct.pack("!HHHHHH", 9, RD, 1, 0, 0, 0) + b"\xc0\x0c" + QTQC)
        else:
            c.send_raw(msgs[case])
        assert c.wait_closed(4.0), "connection not closed after %s" % case
        assert c.buf == b"", "got an answer to a bad message"
    assert [q for q in responder.client_queries() if q.qname != "alive.example.test."] == []
    still_serving(d)


def test_tcp_empty_query_notimp_connection_kept(dnslb, responder):
    """#60: qdcount=0 gets NOTIMP and the connection stays usable."""
    d = dnslb(lua_server(responder) + PATIENT)
    with TcpClient(d.port) as c:
        c.send_msg(struct.pack("!HHHHHH", 0x3131, RD, 0, 0, 0, 0))
        a = c.recv_msg(5.0)
        assert a is not None, "no NOTIMP over TCP"
        h = Header(a)
        assert h.qr and h.rcode == 4 and h.id == 0x3131 and h.rd and h.qdcount == 0
        c.send_msg(build_query("after.example.test.", qid=0x3232))
        a = c.recv_msg(5.0)
        assert a is not None, "connection not kept after NOTIMP"
        assert Header(a).id == 0x3232 and a_addrs(a) == ["192.0.2.1"]


@pytest.mark.dnslb_only("1.7.3 answers n+1 queries")
def test_tcp_max_queries_per_connection(dnslb, responder):
    """#63: after n answers the connection is closed."""
    d = dnslb(lua_server(responder) + PATIENT + "setMaxTCPQueriesPerConnection(3)\n")
    with TcpClient(d.port) as c:
        for i in range(3):
            c.send_msg(build_query("mq%d.example.test." % i, qid=i))
            a = c.recv_msg(5.0)
            assert a is not None and Header(a).id == i
        try:
            c.send_msg(build_query("mq3.example.test.", qid=3))
        except OSError:
            pass
        a = c.recv_msg(4.0)
        assert a is None, "4th query answered"
        assert c.eof, "connection not closed after 3 queries"
    assert responder.queries_for("mq3.") == []


def test_tcp_max_connections_per_client(dnslb, responder):
    d = dnslb(lua_server(responder) + PATIENT + "setMaxTCPConnectionsPerClient(2)\n")
    c1, c2 = TcpClient(d.port), TcpClient(d.port)
    try:
        for c in (c1, c2):
            c.send_msg(build_query("ok.example.test.", qid=1))
            assert c.recv_msg(5.0) is not None
        c3 = TcpClient(d.port)
        try:
            try:
                c3.send_msg(build_query("third.example.test.", qid=3))
            except OSError:
                pass
            assert c3.recv_msg(4.0) is None, "third connection served"
            assert c3.eof or c3.wait_closed(4.0), "third connection not closed"
        finally:
            c3.close()
    finally:
        c1.close()
        c2.close()
    # the slots are free again once the first two are closed
    time.sleep(0.3)
    still_serving(d)


def test_tcp_max_connection_duration(dnslb, responder):
    d = dnslb(lua_server(responder) + PATIENT + "setMaxTCPConnectionDuration(1)\n")
    with TcpClient(d.port) as c:
        closed = False
        end = time.monotonic() + 8
        i = 0
        while time.monotonic() < end:
            try:
                c.send_msg(build_query("dur%d.example.test." % i, qid=i))
            except OSError:
                closed = True
                break
            if c.recv_msg(3.0) is None:
                closed = c.eof
                break
            i += 1
            time.sleep(0.2)
        assert closed, "connection kept beyond setMaxTCPConnectionDuration"
        assert i >= 1


def test_tcp_client_closes_with_query_pending(dnslb, responder):
    """#65: the client goes away while the backend is still working."""
    d = dnslb(lua_server(responder))
    for i in range(10):
        c = TcpClient(d.port)
        c.send_msg(build_query("delay-300.gone%d.example.test." % i, qid=i))
        c.close()
    time.sleep(0.6)
    still_serving(d)
    assert udp_query(d.port, "udp.example.test.") is not None


# ---- backends over TCP ------------------------------------------------------

def test_tcp_only_backend_for_udp_client(dnslb, responder):
    d = dnslb(lua_server(responder, tcpOnly=True))
    with UdpClient(d.port) as c:
        w = build_query("tcponly.example.test.", qid=0x4444)
        c.send(w)
        a = c.recv(5.0)
    assert a is not None, "UDP client of a tcpOnly backend not answered"
    assert Header(a).id == 0x4444 and a_addrs(a) == ["192.0.2.1"]
    assert question_bytes(a) == question_bytes(w)
    qs = responder.queries_for("tcponly.")
    assert len(qs) == 1 and qs[0].transport == "tcp", "tcpOnly backend got the query over UDP"


def test_tcp_backend_never_answers(dnslb, responder):
    """#47: the query fails or the connection closes eventually; other
    clients are served meanwhile."""
    d = dnslb(lua_server(responder, tcpRecvTimeout=1) + "setTCPRecvTimeout(2)\n")
    with TcpClient(d.port) as c:
        c.send_msg(build_query("drop.example.test.", qid=0x5151))
        # others are not held up
        assert tcp_query(d.port, "other.example.test.") is not None
        assert udp_query(d.port, "other-udp.example.test.") is not None
        a = c.recv_msg(15.0)
        if a is not None:
            h = Header(a)
            assert h.id == 0x5151 and h.rcode == dns.rcode.SERVFAIL, \
                "unexpected answer %r" % h
        else:
            assert c.eof, "no answer and connection still open after 15 s"
    still_serving(d)


def test_tcp_backend_not_listening(dnslb, responder):
    """A backend port where nothing listens: the TCP client's query fails
    (SERVFAIL or close), no hang."""
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    port = dead.getsockname()[1]     # bound, not listening: connect is refused
    try:
        d = dnslb(lua_server("127.0.0.1:%d" % port, tcpConnectTimeout=1, retries=1) +
                  "setTCPRecvTimeout(2)\n")
        with TcpClient(d.port) as c:
            c.send_msg(build_query("x.example.test.", qid=0x5252))
            a = c.recv_msg(15.0)
            if a is not None:
                assert Header(a).rcode == dns.rcode.SERVFAIL
            else:
                assert c.eof
        assert d.alive()
    finally:
        dead.close()
