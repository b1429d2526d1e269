"""Blocking receive (setWorkerBlockingReceive, dnslb/worker.c): a worker
with nothing in flight waits in recvmmsg on its UDP socket instead of
epoll_wait; a wake signal ends that wait for anything else (a TCP
connection, a console command that needs the worker, shutdown) and loses
no datagram the kernel had already handed over. With
setWorkerReceiveCoalescing, a worker whose wake-ups find several datagrams
sleeps before each receive instead, and a wake signal ends that sleep too."""

import ctypes
import os
import platform
import signal
import threading
import time

import dns.rcode
import pytest

from dnslbtest import (Header, TcpClient, UdpClient, a_addrs, build_query, console, console_head, free_port,
                       lua_server, parse, tcp_query, udp_query, wait_until)

# the system call a blocked thread is in (/proc/PID/task/TID/syscall)
SYSCALLS = {"x86_64": {"recvmmsg": 299, "epoll_wait": 232, "tgkill": 234},
            "aarch64": {"recvmmsg": 243, "epoll_pwait": 22, "tgkill": 131}}
NR = SYSCALLS.get(platform.machine())
WAKE = signal.SIGURG            # DLB_WAKE_SIGNAL

pytestmark = pytest.mark.dnslb_only("a dnslb feature (dnsdist always waits in epoll)")


def worker_tid(d):
    for tid in os.listdir("/proc/%d/task" % d.proc.pid):
        with open("/proc/%d/task/%s/comm" % (d.proc.pid, tid)) as f:
            if f.read().strip() == "dnslb/w0":
                return int(tid)
    raise AssertionError("no dnslb/w0 thread")


def blocked_in(d, tid):
    """Number of the system call thread @tid is blocked in, or None (running)."""
    try:
        with open("/proc/%d/task/%d/syscall" % (d.proc.pid, tid)) as f:
            first = f.read().split()[0]
    except (OSError, IndexError):
        return None
    return int(first) if first.lstrip("-").isdigit() else None


def idle_in_epoll(d, tid):
    """Wait until the worker waits in its event loop (epoll) instead."""
    want = NR.get("epoll_wait", NR.get("epoll_pwait"))
    return wait_until(lambda: blocked_in(d, tid) == want, timeout=2.0, interval=0.01)


def conf(responder, extra=""):
    return (console_head() + lua_server(responder) + "setWorkerThreads(1)\n"
            + 'pc = newPacketCache(1000)\ngetPool(""):setCache(pc)\n' + extra)


def parked(d, tid):
    """Ask once (a cache hit) and wait until the worker waits in recvmmsg."""
    r = udp_query(d.port, "park.example.test.")
    assert r is not None and a_addrs(r) == ["192.0.2.1"]
    return wait_until(lambda: blocked_in(d, tid) == NR["recvmmsg"], timeout=0.5, interval=0.002)


def watch_or_skip(d):
    """The worker's thread ID, if this machine shows what it is blocked in."""
    if NR is None:
        pytest.skip("no system call table for %s" % platform.machine())
    tid = worker_tid(d)
    try:
        with open("/proc/%d/task/%d/syscall" % (d.proc.pid, tid)) as f:
            f.read()
    except OSError as e:            # e.g. Yama ptrace_scope 2 or 3
        pytest.skip("/proc/PID/task/TID/syscall is not readable here: %s" % e)
    return tid


def park_or_skip(d):
    tid = watch_or_skip(d)
    # the first wait may end at once (a wake signal from startup): try a few times
    for _ in range(20):
        if parked(d, tid):
            return tid
    raise AssertionError("the idle worker never waited in recvmmsg (it is in system call %s)"
                         % blocked_in(d, tid))


def test_idle_worker_waits_in_its_udp_socket(dnslb, responder):
    d = dnslb(conf(responder))
    park_or_skip(d)
    for i in range(20):
        r = udp_query(d.port, "park.example.test.")
        assert r is not None and a_addrs(r) == ["192.0.2.1"]
    st = d.stats()
    # every answered query went through a blocking receive (one per batch)
    assert st["blocking-receives"] >= 20
    assert st["cache-hits"] >= 20
    assert st["coalesced-receives"] == 0       # off by default


def test_idle_worker_is_woken_by_the_main_thread(dnslb, responder):
    """The socket has no receive timeout: the safety net is the main thread,
    which once a second wakes a worker that waits in its UDP socket and has
    started no receive since the second before (dlb_worker_wake_idle). With
    no traffic at all, the wait is ended by a wake signal within two
    seconds; the worker then waits in its event loop (epoll), where nothing
    wakes it again, and the next query finds it there and parks it again."""
    d = dnslb(conf(responder))
    tid = park_or_skip(d)
    before = d.stats()
    # no query from here on: only the main thread's wake can end the wait
    assert wait_until(lambda: d.stats()["blocking-receive-wakeups"]
                      >= before["blocking-receive-wakeups"] + 1, timeout=4.0, interval=0.1)
    assert idle_in_epoll(d, tid)
    mid = d.stats()
    time.sleep(2.5)                 # not parked: no more wake signals
    st = d.stats()
    assert st["blocking-receive-wakeups"] == mid["blocking-receive-wakeups"]
    assert st["queries"] == before["queries"]
    assert blocked_in(d, tid) == NR.get("epoll_wait", NR.get("epoll_pwait"))
    assert parked(d, tid)           # a query, then back in recvmmsg
    assert d.stats()["queries"] == before["queries"] + 1


def test_tcp_connection_wakes_a_waiting_worker(dnslb, responder):
    """The TCP listener signals its worker (O_ASYNC): the connection is
    served at once, not after the main thread's once-a-second wake, and the
    wait is counted as ended by a wake signal."""
    d = dnslb(conf(responder))
    tid = park_or_skip(d)
    before = d.stats()["blocking-receive-wakeups"]
    assert parked(d, tid)
    r = tcp_query(d.port, "tcp.example.test.")
    assert r is not None and r.rcode() == dns.rcode.NOERROR and a_addrs(r) == ["192.0.2.1"]
    assert [q.transport for q in responder.queries_for("tcp.example.test.")] == ["tcp"]
    st = d.stats()
    assert st["blocking-receive-wakeups"] >= before + 1


def test_tcp_connection_queued_at_startup_is_served_at_once(dnslb, responder):
    """The listeners are bound before the workers start; a connection that
    the kernel queues before a worker has set its TCP listener's wake-up
    signal sends none. The worker's first wait must not be in its UDP
    socket (dlb_worker_wake_self): such a connection is served at once, not
    when the main thread's safety net wakes the worker about two seconds
    after startup. The client connects as soon as the port accepts, i.e.
    usually before the worker runs; a few starts make the race likely."""
    for attempt in range(4):
        d = dnslb(conf(responder), wait=False)
        c = None
        end = time.monotonic() + 10.0
        while c is None and time.monotonic() < end and d.proc.poll() is None:
            try:
                c = TcpClient(d.port)
            except ConnectionRefusedError:
                time.sleep(0.0005)
        assert c is not None, "dnslb never accepted a TCP connection:\n" + d.output()
        with c:
            c.send_msg(build_query("startup%d.example.test." % attempt))
            wire = c.recv_msg(1.5)  # the safety net would answer after ~2 s
        assert wire is not None, "attempt %d: no answer within 1.5 s" % attempt
        r = parse(wire)
        assert r.rcode() == dns.rcode.NOERROR and a_addrs(r) == ["192.0.2.1"]
        d.wait_ready()
        assert d.stop(signal.SIGTERM, 5.0) == 0


def test_console_new_server_wakes_a_waiting_worker(dnslb, responder, make_responder):
    """newServer at runtime needs every worker to open sockets (an ev_async):
    the waiting worker is woken for it, and uses the server at once."""
    d = dnslb(conf(responder))
    tid = park_or_skip(d)
    other = make_responder()
    before = d.stats()["blocking-receive-wakeups"]
    assert parked(d, tid)
    out = console(d, 'newServer({address="%s", name="late", pool="late"})\n'
                     'addAction("late.example.test.", PoolAction("late"))' % other.address)
    assert "rror" not in out
    st = d.stats()
    assert st["blocking-receive-wakeups"] >= before + 1
    r = udp_query(d.port, "late.example.test.")
    assert r is not None and a_addrs(r) == ["192.0.2.1"]
    assert len(other.queries_for("late.example.test.")) == 1


def stopped_burst(d, c, wires):
    """Send @wires while dnslb is stopped (SIGSTOP): its worker then takes
    them all in one receive, and a batch that large starts coalescing."""
    d.send_signal(signal.SIGSTOP)
    try:
        for w in wires:
            c.send(w)
    finally:
        d.send_signal(signal.SIGCONT)


def test_coalescing_batches_a_steady_stream(dnslb, responder):
    """setWorkerReceiveCoalescing: after a wake-up that found two or more
    datagrams the worker sleeps before its next receive and takes what
    arrived meanwhile; every query is answered exactly once."""
    d = dnslb(conf(responder, "setWorkerReceiveCoalescing(1000)\n"))
    names = ["c%d.example.test." % i for i in range(16)]
    for n in names:                     # cached: answers do not wait on the backend
        assert udp_query(d.port, n) is not None
    before = d.stats()
    answered = {}

    def take(wires):
        for wire in wires:
            h = Header(wire)
            assert h.id not in answered, "two answers for ID %d" % h.id
            assert a_addrs(wire) == ["192.0.2.1"]
            answered[h.id] = wire
    with UdpClient(d.port) as c:
        stopped_burst(d, c, [build_query(names[j], qid=j + 1) for j in range(16)])
        qid = 16
        for k in range(100):            # then a steady stream, 4 every ~0.5 ms
            for j in range(4):
                qid += 1
                c.send(build_query(names[qid % 16], qid=qid))
            take(c.collect(0.0005))     # (reading as it goes: the socket buffer is small)
        take(c.collect(1.0))
    missing = sorted(set(range(1, qid + 1)) - set(answered))
    assert not missing, "%d queries not answered, e.g. %s" % (len(missing), missing[:5])
    st = d.stats()
    assert st["cache-hits"] - before["cache-hits"] == qid
    assert st["coalesced-receives"] > before["coalesced-receives"]
    assert d.alive()


@pytest.mark.parametrize("coalescing", [False, True], ids=["blocking", "coalescing"])
def test_wake_signals_lose_no_datagram(dnslb, responder, coalescing):
    """Wake signals aimed at the worker while bursts of queries arrive end
    its waits at every point (before the call, inside it, after it received
    some datagrams; with coalescing, in its sleep before a receive too):
    every query is still answered exactly once."""
    d = dnslb(conf(responder, "setWorkerReceiveCoalescing(200)\n" if coalescing else ""))
    tid = park_or_skip(d)
    libc = ctypes.CDLL(None, use_errno=True)
    names = ["w%d.example.test." % i for i in range(16)]
    for n in names:                     # cached: answers do not wait on the backend
        assert udp_query(d.port, n) is not None
    stop = threading.Event()
    quiet = threading.Event()
    sent = [0]

    def pelt():
        while not stop.is_set():
            if quiet.is_set():
                time.sleep(0.0002)
                continue
            libc.syscall(NR["tgkill"], d.proc.pid, tid, int(WAKE))
            sent[0] += 1
            time.sleep(0.0002)
    t = threading.Thread(target=pelt)
    before = d.stats()
    t.start()
    answered = {}
    try:
        with UdpClient(d.port) as c:
            qid = 0
            burst = 0
            # with coalescing, more bursts (at most 300 in all, the count read
            # every 20) until one has coalesced
            while burst < 60 or (coalescing and burst < 300 and (
                    burst % 20 != 0 or
                    d.stats()["coalesced-receives"] == before["coalesced-receives"])):
                burst += 1
                wires = [build_query(names[j], qid=qid + 1 + j) for j in range(16)]
                qid += 16
                if coalescing:
                    # no wake signal pending while stopped: the first receive
                    # after SIGCONT takes the whole burst; the signals resume at
                    # once and land in the coalescing sleep and receives after it
                    quiet.set()
                    time.sleep(0.001)
                    stopped_burst(d, c, wires)
                    quiet.clear()
                else:
                    for w in wires:
                        c.send(w)
                for wire in c.collect(0.05):
                    h = Header(wire)
                    assert h.id not in answered, "two answers for ID %d" % h.id
                    answered[h.id] = wire
            for wire in c.collect(1.0):
                h = Header(wire)
                assert h.id not in answered, "two answers for ID %d" % h.id
                answered[h.id] = wire
    finally:
        stop.set()
        t.join()
    assert sent[0] > 100
    missing = sorted(set(range(1, qid + 1)) - set(answered))
    assert not missing, "%d queries not answered, e.g. %s" % (len(missing), missing[:5])
    for q, wire in answered.items():
        assert a_addrs(wire) == ["192.0.2.1"]
    st = d.stats()
    assert st["cache-hits"] - before["cache-hits"] == qid
    assert st["queries"] - before["queries"] == qid
    assert st["blocking-receive-wakeups"] > before["blocking-receive-wakeups"]
    if coalescing:
        assert st["coalesced-receives"] > before["coalesced-receives"]
    assert d.alive()


def test_off_waits_in_epoll(dnslb, responder):
    # coalescing only changes how a blocking receive waits: nothing to do here
    d = dnslb(conf(responder, "setWorkerBlockingReceive(false)\nsetWorkerReceiveCoalescing(100)\n"))
    tid = watch_or_skip(d)
    for i in range(5):
        r = udp_query(d.port, "off.example.test.")
        assert r is not None and a_addrs(r) == ["192.0.2.1"]
    r = tcp_query(d.port, "off.example.test.")
    assert r is not None and a_addrs(r) == ["192.0.2.1"]
    assert idle_in_epoll(d, tid), "idle worker is in system call %s" % blocked_in(d, tid)
    st = d.stats()
    assert st["blocking-receives"] == 0 and st["blocking-receive-wakeups"] == 0
    assert st["coalesced-receives"] == 0


def test_two_listeners_wait_in_epoll(dnslb, responder):
    """A worker with two UDP sockets cannot wait in one of them."""
    p2 = free_port()
    d = dnslb(conf(responder, 'addLocal("127.0.0.1:%d")\n' % p2))
    for port in (d.port, p2):
        r = udp_query(port, "two.example.test.")
        assert r is not None and a_addrs(r) == ["192.0.2.1"]
    st = d.stats()
    assert st["blocking-receives"] == 0


def test_reload_adding_a_listener_moves_the_wait_to_epoll(dnslb, responder):
    """A reload that adds a second listener wakes the waiting worker (its
    listeners change), which then waits in epoll_wait for both sockets."""
    d = dnslb(conf(responder))
    tid = park_or_skip(d)
    before = d.stats()["blocking-receive-wakeups"]
    p2 = free_port()
    assert parked(d, tid)
    d.body += 'addLocal("127.0.0.1:%d")\n' % p2
    with open(d.conf_path, "w") as f:
        f.write(d.render_conf())
    start = len(d.lines)
    d.send_signal(signal.SIGHUP)
    assert d.wait_line(r"Reloaded '", start=start, timeout=10) is not None, d.output()
    for port in (d.port, p2):
        r = udp_query(port, "reload.example.test.")
        assert r is not None and a_addrs(r) == ["192.0.2.1"]
    assert idle_in_epoll(d, tid), "idle worker is in system call %s" % blocked_in(d, tid)
    st = d.stats()
    assert st["blocking-receive-wakeups"] >= before + 1


def udp_socket_fds(d):
    """The fd numbers of dnslb's UDP sockets bound to its listening port."""
    inodes = set()
    for path in ("/proc/%d/net/udp" % d.proc.pid, "/proc/%d/net/udp6" % d.proc.pid):
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if int(fields[1].split(":")[1], 16) == d.port:
                        inodes.add(fields[9])
        except OSError:
            pass
    fds = set()
    for fd in os.listdir("/proc/%d/fd" % d.proc.pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (d.proc.pid, fd))
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            fds.add(int(fd))
    return fds


def epoll_watched_fds(d):
    """Every fd some epoll instance of dnslb's watches (from /proc/PID/fdinfo)."""
    watched = set()
    for fd in os.listdir("/proc/%d/fd" % d.proc.pid):
        try:
            if os.readlink("/proc/%d/fd/%s" % (d.proc.pid, fd)) != "anon_inode:[eventpoll]":
                continue
            with open("/proc/%d/fdinfo/%s" % (d.proc.pid, fd)) as f:
                for line in f:
                    if line.startswith("tfd:"):
                        watched.add(int(line.split()[1]))
        except OSError:
            continue
    return watched


def test_parked_socket_leaves_epoll_and_comes_back(dnslb, responder):
    """While the worker waits in its UDP socket, the socket is out of the
    loop's epoll set (frontend.c, unpoll_udp: its sends then skip the epoll
    entry's wake-up); once a query is at a backend the worker waits in epoll,
    and the socket must be back in the set, or a client's datagram would wait
    until the backend answered."""
    d = dnslb(conf(responder))
    tid = park_or_skip(d)
    fds = udp_socket_fds(d)
    assert fds, "no UDP socket on port %d" % d.port
    assert not fds & epoll_watched_fds(d), "parked, yet the UDP socket is in an epoll set"
    slow = {}

    def ask_slow():
        slow["r"] = udp_query(d.port, "delay-1500.slow.test.", timeout=5)
        slow["at"] = time.monotonic()

    t = threading.Thread(target=ask_slow)
    t.start()
    try:
        assert idle_in_epoll(d, tid), "with a query at a backend the worker should wait in epoll"
        assert fds <= epoll_watched_fds(d), "waiting in epoll without its UDP socket"
        r = udp_query(d.port, "fast.example.test.", timeout=3)
        fast_at = time.monotonic()
        assert r is not None and a_addrs(r) == ["192.0.2.1"]
    finally:
        t.join()
    assert slow["r"] is not None and a_addrs(slow["r"]) == ["192.0.2.1"]
    # unwatched, the socket would be read only once the slow answer had woken
    # the worker and gone out: the fast query, sent later, must come back first
    assert fast_at < slow["at"], "the fast answer came after the slow one: the socket was not watched"
    # the slow answer came: quiet again, parked again, out of the set again
    assert wait_until(lambda: blocked_in(d, tid) == NR["recvmmsg"], timeout=2.0, interval=0.01)
    assert not fds & epoll_watched_fds(d)
