"""Abuse limits (docs/abuse.md): the TCP connection rate and its ban, read
IOs per query, the output bound for clients that never read, a flood of
slow TCP connections next to UDP (latency measured and printed, never
asserted), and the per-client outstanding cap (setMaxOutstandingPerClient).

Traffic goes to 127.0.0.1 only; the "other client" binds 127.0.0.2.
Counts and durations are bounded."""

import resource
import select
import socket
import struct
import time

import pytest

from dnslbtest import (Header, TcpClient, a_addrs, build_query, lua_server, parse,
                       wait_until)

pytestmark = pytest.mark.dnslb_only("dnsdist 1.7.3 has none of these limits")


# ---- helpers -------------------------------------------------------------------

def tcp_from(src, port, timeout=3.0):
    """A TcpClient whose socket is bound to source address @src."""
    c = TcpClient.__new__(TcpClient)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    c.sock, c.buf, c.eof = s, b"", False
    return c


def tcp_ask(src, port, name, timeout=3.0):
    """One query over a new connection from @src: the answer's wire, or None
    (refused: closed without an answer)."""
    try:
        c = tcp_from(src, port)
    except OSError:
        return None
    try:
        c.send_msg(build_query(name, qid=0x4242))
        return c.recv_msg(timeout)
    except OSError:
        return None
    finally:
        c.close()


def udp_from(src):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((src, 0))
    return s


def udp_ask(sock, port, wire, timeout=2.0):
    sock.sendto(wire, ("127.0.0.1", port))
    r, _, _ = select.select([sock], [], [], timeout)
    return sock.recv(65535) if r else None


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p / 100.0))]


# ---- TCP connection rate ---------------------------------------------------------

def test_tcp_connection_rate_ban(dnslb, responder):
    """Over 1 connection/s on average over a 1-minute window (60 at once),
    the client is banned for 2 s; 127.0.0.2 connects fine meanwhile. After
    the ban the client is judged by its rate again (still over: refused
    as over the rate, no longer as banned)."""
    d = dnslb(lua_server(responder) + "setMaxTCPConnectionRatePerClient(1)\n"
              "setTCPConnectionRateInterval(1)\n"
              "setBanDurationForExceedingTCPTLSRate(2)\n")
    opened = 0
    socks = []
    try:
        for _ in range(70):
            s = socket.create_connection(("127.0.0.1", d.port), timeout=3)
            socks.append(s)
            opened += 1
    finally:
        for s in socks:
            s.close()
    assert opened == 70
    s = d.wait_stats(lambda s: s["tcp-client-rate-exceeded"] + s["tcp-client-banned"] >= 10)
    assert s["tcp-client-rate-exceeded"] == 1, "the first refusal starts the ban"
    assert s["tcp-client-banned"] == 70 - 60 - 1
    # banned: refused; the other client is served
    assert tcp_ask("127.0.0.1", d.port, "banned.example.test.") is None
    r = tcp_ask("127.0.0.2", d.port, "other.example.test.")
    assert r is not None and a_addrs(parse(r)) == ["192.0.2.1"]
    assert d.stats()["tcp-client-banned"] == 70 - 60
    # after the ban: judged by the rate again
    time.sleep(2.3)
    assert tcp_ask("127.0.0.1", d.port, "after.example.test.") is None
    s = d.stats()
    assert s["tcp-client-rate-exceeded"] == 2 and s["tcp-client-banned"] == 10
    assert responder.queries_for("banned.") == [] and responder.queries_for("after.") == []


# ---- read IOs per query -------------------------------------------------------------

def test_tcp_read_ios_per_query(dnslb, responder):
    """A query dribbled byte by byte is closed after 5 reads and its client
    banned for 2 s; another client is served; after the ban, so is it."""
    d = dnslb(lua_server(responder) + "setTCPRecvTimeout(10)\n"
              "setMaxTCPReadIOsPerQuery(5)\n"
              "setBanDurationForExceedingMaxReadIOsPerQuery(2)\n")
    wire = build_query("dribble.example.test.", qid=7)
    framed = struct.pack("!H", len(wire)) + wire
    with TcpClient(d.port) as c:
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sent = 0
        for b in framed:
            try:
                c.send_raw(bytes([b]))
            except OSError:
                break
            sent += 1
            if c.wait_closed(0.05):
                break
        assert c.wait_closed(3.0), "dribbling connection not closed"
        assert c.buf == b""
    assert sent < len(framed), "the whole query went through"
    assert d.stat_at_least("tcp-too-many-read-ios", 1) == 1
    assert responder.queries_for("dribble.") == []
    # a query in one or two writes is fine, from another client
    c2 = tcp_from("127.0.0.2", d.port)
    try:
        w2 = build_query("split.example.test.", qid=8)
        f2 = struct.pack("!H", len(w2)) + w2
        c2.send_raw(f2[:5])
        time.sleep(0.05)
        c2.send_raw(f2[5:])
        a = c2.recv_msg(3.0)
        assert a is not None and Header(a).id == 8
    finally:
        c2.close()
    # the dribbler is banned for 2 s, then served again
    assert tcp_ask("127.0.0.1", d.port, "during.example.test.") is None
    assert d.stat_at_least("tcp-client-banned", 1) >= 1
    time.sleep(2.2)
    r = tcp_ask("127.0.0.1", d.port, "afterban.example.test.")
    assert r is not None and a_addrs(parse(r)) == ["192.0.2.1"]


# ---- output bound -------------------------------------------------------------------

def test_tcp_client_that_never_reads_is_closed(dnslb, responder):
    """A client pipelining queries for 30 kB answers and never reading is
    closed once more than 128 KiB wait for it; other clients are served."""
    d = dnslb(lua_server(responder) + "setTCPSendTimeout(30)\nsetTCPRecvTimeout(30)\n"
              "setMaxTCPOutputBufferSize(131072)\n")
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", d.port))
    s.setblocking(False)
    closed = False
    sent = 0
    try:
        for i in range(400):
            w = build_query("big-30000.q%d.example.test." % i, qtype=16, qid=i)
            try:
                s.send(struct.pack("!H", len(w)) + w)
            except (BlockingIOError, InterruptedError):
                time.sleep(0.01)
                continue
            except OSError:
                closed = True
                break
            sent += 1
            if i % 20 == 19 and d.stats()["tcp-output-buffer-full"] >= 1:
                closed = True
                break
            time.sleep(0.005)
        st = d.wait_stats(lambda st: st["tcp-output-buffer-full"] >= 1, 10.0)
        assert st["tcp-output-buffer-full"] == 1, "the slow reader was not closed (sent %d)" % sent
        assert st["tcp-client-timeouts"] == 0
        # others unaffected
        r = tcp_ask("127.0.0.2", d.port, "other.example.test.")
        assert r is not None and a_addrs(parse(r)) == ["192.0.2.1"]
        u = udp_from("127.0.0.1")
        try:
            a = udp_ask(u, d.port, build_query("udp.example.test.", qid=3))
            assert a is not None and Header(a).id == 3
        finally:
            u.close()
    finally:
        s.close()
    assert closed or sent > 0


# ---- a flood of slow connections next to UDP ---------------------------------------------

def raise_fd_limit(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n if hard == resource.RLIM_INFINITY else min(n, hard)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def udp_latencies(port, n, tag):
    u = udp_from("127.0.0.1")
    out = []
    try:
        for i in range(n):
            w = build_query("lat%d.%s.example.test." % (i, tag), qid=i)
            t0 = time.perf_counter()
            a = udp_ask(u, port, w, 2.0)
            dt = time.perf_counter() - t0
            assert a is not None and Header(a).id == i, "UDP query %d (%s) not answered" % (i, tag)
            out.append(dt * 1e6)
    finally:
        u.close()
    return out


def test_slow_tcp_flood_and_udp_latency(dnslb, responder):
    """500 slow TCP connections (a length byte, then nothing) plus a client
    that never reads: UDP and another TCP client keep being answered. The
    UDP latency before and during the flood is printed (p50/p99), not
    asserted."""
    limit = raise_fd_limit(4096)
    if limit < 1200:
        pytest.skip("fd limit %d is too low for 500 connections" % limit)
    d = dnslb(lua_server(responder) + "setTCPRecvTimeout(30)\nsetTCPSendTimeout(30)\n")
    n = 200
    udp_latencies(d.port, 20, "warm")
    before = udp_latencies(d.port, n, "before")
    slow = []
    reader = None
    try:
        for i in range(500):
            s = socket.create_connection(("127.0.0.1", d.port), timeout=5)
            s.send(b"\x00")     # half a length prefix, then silence
            slow.append(s)
        reader = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.connect(("127.0.0.1", d.port))
        for i in range(50):
            w = build_query("big-8000.r%d.example.test." % i, qtype=16, qid=i)
            reader.sendall(struct.pack("!H", len(w)) + w)
        assert wait_until(lambda: d.stats()["tcp-client-connections"] >= 501, 10.0)
        during = udp_latencies(d.port, n, "during")
        r = tcp_ask("127.0.0.2", d.port, "tcp-during.example.test.")
        assert r is not None and a_addrs(parse(r)) == ["192.0.2.1"], "TCP client starved"
        st = d.stats()
        assert st["tcp-client-timeouts"] == 0
    finally:
        for s in slow:
            s.close()
        if reader is not None:
            reader.close()
    print("\nUDP latency through dnslb (us, %d sequential queries each, python client):" % n)
    print("  idle:                         p50 %7.0f  p99 %7.0f  max %7.0f"
          % (pct(before, 50), pct(before, 99), max(before)))
    print("  500 slow TCP + slow reader:   p50 %7.0f  p99 %7.0f  max %7.0f"
          % (pct(during, 50), pct(during, 99), max(during)))


# ---- per-client outstanding cap ----------------------------------------------------------

@pytest.mark.parametrize("action", ["refused", "drop"])
def test_outstanding_cap_udp(dnslb, responder, action):
    """3 queries in flight to a backend that never answers; the 4th to 6th
    from the same client get the configured answer at once and are
    counted; 127.0.0.2 is served; once the first 3 time out, the client is
    served again (its count went back to 0). DNSLB_CHECK_OUTSTANDING makes
    dnslb check its accounting at every query (it aborts on a mismatch)."""
    d = dnslb(lua_server(responder) + "setUDPTimeout(2)\n"
              'setMaxOutstandingPerClient(3, {action="%s"})\n' % action,
              env={"DNSLB_CHECK_OUTSTANDING": "1"})
    u = udp_from("127.0.0.1")       # one socket: one 4-tuple, so one worker
    other = udp_from("127.0.0.2")
    try:
        for i in range(3):
            u.sendto(build_query("drop.q%d.example.test." % i, qid=i), ("127.0.0.1", d.port))
        assert wait_until(lambda: len(responder.queries_for("drop.")) == 3, 3.0)
        got = []
        for i in range(3, 6):
            got.append(udp_ask(u, d.port, build_query("cap%d.example.test." % i, qid=i),
                               0.2 if action == "drop" else 1.0))
        st = d.stats()
        assert st["client-outstanding-exceeded"] == 3
        if action == "refused":
            assert all(g is not None for g in got)
            assert [Header(g).rcode for g in got] == [5, 5, 5]
            assert sorted(Header(g).id for g in got) == [3, 4, 5]
            assert st["self-answered"] == 3
        else:
            assert got == [None, None, None]
        assert responder.queries_for("cap") == []
        a = udp_ask(other, d.port, build_query("other.example.test.", qid=77))
        assert a is not None and Header(a).rcode == 0 and a_addrs(parse(a)) == ["192.0.2.1"]
        # the three time out (2 s): the client's places come back
        assert d.stat_at_least("downstream-timeouts", 3, 5.0) == 3
        for i in range(3):
            a = udp_ask(u, d.port, build_query("back%d.example.test." % i, qid=100 + i))
            assert a is not None and Header(a).rcode == 0, "client still capped after timeouts"
        assert d.stats()["client-outstanding-exceeded"] == 3
    finally:
        u.close()
        other.close()
    assert d.alive()


def test_outstanding_cap_tcp(dnslb, responder):
    """Over TCP with maxInFlight: 2 queries in flight, the next 3 pipelined
    ones are answered SERVFAIL at once on the same connection."""
    d = dnslb(lua_server(responder, tcpRecvTimeout=1) +
              'setMaxOutstandingPerClient(2, {action="servfail"})\nsetTCPRecvTimeout(10)\n',
              listen_opts={"maxInFlight": 16}, env={"DNSLB_CHECK_OUTSTANDING": "1"})
    with TcpClient(d.port) as c:
        wires = [build_query("drop.t%d.example.test." % i, qid=i) for i in range(2)]
        wires += [build_query("capped%d.example.test." % i, qid=10 + i) for i in range(3)]
        c.send_raw(b"".join(struct.pack("!H", len(w)) + w for w in wires))
        got = [c.recv_msg(3.0) for _ in range(3)]
        assert all(g is not None for g in got), "over-cap queries not answered"
        assert sorted(Header(g).id for g in got) == [10, 11, 12]
        assert all(Header(g).rcode == 2 for g in got)
        assert d.stats()["client-outstanding-exceeded"] == 3
        # the two in flight fail at the backend timeout (1 s): the connection
        # is closed without an answer, as dnsdist closes it
        assert c.recv_msg(5.0) is None and c.eof
    # and the client's places are back
    with TcpClient(d.port) as c:
        c.send_msg(build_query("fine.example.test.", qid=99))
        a = c.recv_msg(3.0)
        assert a is not None and Header(a).id == 99 and a_addrs(parse(a)) == ["192.0.2.1"]
    assert responder.queries_for("capped") == []
