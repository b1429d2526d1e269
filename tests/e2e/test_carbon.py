"""carbonServer() (issue 6; docs/web.md, "Carbon"): Graphite plaintext pushes
to a listener in the test, their paths and values, the defaults (host name,
namespace, instance, port 2003 is not used here), and that a carbon server
that refuses, or accepts nothing at all, never stalls the daemon.
"""

import re
import socket
import threading
import time

import pytest

from dnslbtest import lua_server, make_query, udp_query, wait_until
from test_web import quiet

pytestmark = pytest.mark.dnslb_only("carbon pushes")

LINE = re.compile(r"^(\S+) (-?[0-9][0-9.e+-]*) (\d+)$")


class CarbonListener:
    """Accepts connections on 127.0.0.1 and keeps each one's complete text."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.pushes = []
        self.lock = threading.Lock()
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while self.running:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            c.settimeout(5)
            data = b""
            try:
                while True:
                    chunk = c.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            except OSError:
                pass
            c.close()
            with self.lock:
                self.pushes.append(data.decode("utf-8", "replace"))

    def stop(self):
        self.running = False
        self.sock.close()
        self.thread.join(5)

    def parsed(self):
        """Each push as {path: (value, timestamp)}; every line must be well formed."""
        with self.lock:
            pushes = list(self.pushes)
        out = []
        for p in pushes:
            assert p.endswith("\r\n"), p[-200:]
            m = {}
            for line in p.split("\r\n")[:-1]:
                g = LINE.match(line)
                assert g, repr(line)
                m[g.group(1)] = (float(g.group(2)), int(g.group(3)))
            out.append(m)
        return out


@pytest.fixture
def carbon():
    c = CarbonListener()
    yield c
    c.stop()


def test_carbon_push(dnslb, responder, carbon):
    conf = (lua_server(responder, name="back.end")
            + 'getPool(""):setCache(newPacketCache(10000))\n'
            + 'getPool("second.pool")\n'
            + 'carbonServer("127.0.0.1:%d", "test.host", 1, "myns", "inst")\n' % carbon.port)
    d = dnslb(conf)
    for n in ["c1.example.", "c2.example.", "c1.example."]:
        assert udp_query(d.port, make_query(n)) is not None
    quiet(d)
    stats = d.stats()
    base = "myns.test.host.inst."     # ourname is used as given (dnsdist)
    assert wait_until(lambda: any(p.get(base + "queries", (0,))[0] == 3
                                  for p in carbon.parsed()), 10.0, 0.2), carbon.pushes[-1:]
    push = [p for p in carbon.parsed() if p.get(base + "queries", (0,))[0] == 3][-1]
    now = time.time()
    for path, (value, ts) in push.items():
        assert path.startswith(base), path
        assert abs(ts - now) < 120
    for k in ("queries", "responses", "cache-hits", "cache-misses", "latency0-1",
              "frontend-noerror", "rdqueries"):
        assert push[base + k][0] == stats[k], k
    assert push[base + "cache-hits"][0] == 1
    assert base + "uptime" in push and base + "latency-avg100" in push
    srv = base + "servers.back_end."
    for k in ("queries", "responses", "drops", "latency", "senderrors", "outstanding"):
        assert srv + k in push, k
    assert push[srv + "queries"][0] == stats["backends"]["back.end"]["queries"] == 2
    assert push[srv + "responses"][0] == 2
    fe = base + "frontends.127_0_0_1:%d_udp." % d.port
    assert push[fe + "queries"][0] == 3
    assert base + "frontends.127_0_0_1:%d_tcp.tcpcurrentconnections" % d.port in push
    pool = base + "pools._default_."
    assert push[pool + "servers"][0] == 1 and push[pool + "servers-up"][0] == 1
    for k in ("cache-size", "cache-entries", "cache-hits", "cache-misses",
              "cache-deferred-inserts", "cache-deferred-lookups", "cache-lookup-collisions",
              "cache-insert-collisions", "cache-ttl-too-shorts"):
        assert pool + k in push, k
    assert push[pool + "cache-size"][0] == 10000 and push[pool + "cache-entries"][0] == 2
    assert push[base + "pools.second_pool.servers"][0] == 0
    assert base + "pools.second_pool.cache-size" not in push      # no cache there
    # pushes keep coming, one a second
    n = len(carbon.pushes)
    assert wait_until(lambda: len(carbon.pushes) >= n + 2, 10.0, 0.2)


def test_carbon_defaults(dnslb, carbon):
    d = dnslb('carbonServer("127.0.0.1:%d", nil, 1)\n' % carbon.port)
    assert wait_until(lambda: len(carbon.pushes) >= 1, 10.0, 0.1)
    push = carbon.parsed()[0]
    host = socket.gethostname().replace(".", "_")
    assert "dnsdist.%s.main.queries" % host in push, sorted(push)[:5]
    assert d.alive()


def test_carbon_two_targets(dnslb, carbon):
    other = CarbonListener()
    try:
        dnslb('carbonServer("127.0.0.1:%d", "a", 1)\n'
              'carbonServer("127.0.0.1:%d", "b", 1, "other")\n' % (carbon.port, other.port))
        assert wait_until(lambda: carbon.pushes and other.pushes, 10.0, 0.1)
        assert "dnsdist.a.main.queries" in carbon.parsed()[0]
        assert "other.b.main.queries" in other.parsed()[0]
    finally:
        other.stop()


def test_carbon_server_down(dnslb, responder):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()       # nothing listens there
    d = dnslb(lua_server(responder) + 'carbonServer("127.0.0.1:%d", "h", 1)\n' % port)
    assert d.wait_line("Unable to connect to the carbon server 127.0.0.1:%d" % port, 0, 10)
    for i in range(5):
        assert udp_query(d.port, make_query("down%d.example." % i)) is not None
    assert d.alive()


def test_carbon_server_never_accepts(dnslb, responder):
    """A carbon server whose accept queue is full: connects hang, the loop does not."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(0)
    port = s.getsockname()[1]
    fillers = []
    try:
        # fill the accept queue so that further handshakes are not completed
        for _ in range(4):
            f = socket.socket()
            f.setblocking(False)
            try:
                f.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            fillers.append(f)
        d = dnslb(lua_server(responder) + 'carbonServer("127.0.0.1:%d", "h", 1)\n' % port)
        assert d.wait_line(r"carbon server 127\.0\.0\.1:%d.*(timeout|did not finish)" % port,
                           0, 15) is not None, d.output()
        for i in range(5):
            assert udp_query(d.port, make_query("stall%d.example." % i)) is not None
        assert d.alive()
    finally:
        for f in fillers:
            f.close()
        s.close()
