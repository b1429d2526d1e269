"""Runtime server management from the console (issue 4): newServer() and
rmServer() while queries flow, against real responder backends.

  - a server added at runtime gets traffic (roundrobin), after its first
    health check marked it up; a server of a new pool serves that pool;
  - setDown(), rmServer() and newServer() under continuous load lose no
    answer (every query sent is answered);
  - chashed: a server added at runtime takes over only names of its own
    points, and removing it puts them back (the ring is rebuilt);
  - a server whose sockets cannot be opened (a source address that is not
    local) is refused with a clear error, stays listed, down, in no pool,
    and the daemon keeps serving.
"""

import re
import subprocess
import threading
import time

import pytest

from dnslbtest import (UdpClient, console, console_head, dnslb_bin, lua_server, make_query, parse,
                       wait_until)

pytestmark = pytest.mark.dnslb_only("runtime newServer through dnslb's console client")


class Load:
    """Queries in windows of 10 on one UDP socket, each window waited for
    (2 s) before the next: counts what was sent and answered."""

    def __init__(self, port, prefix="load"):
        self.port = port
        self.prefix = prefix
        self.sent = 0
        self.answered = 0
        self.lost = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *a):
        self._stop.set()
        self._t.join(30)

    def _run(self):
        i = 0
        with UdpClient(self.port) as c:
            while not self._stop.is_set():
                ids = {}
                for _ in range(10):
                    qid = i & 0xFFFF
                    name = "%s-%d.example." % (self.prefix, i)
                    ids[qid] = name
                    c.send(make_query(name, qid=qid).to_wire())
                    i += 1
                self.sent += len(ids)
                end = time.monotonic() + 2.0
                while ids:
                    w = c.recv(end - time.monotonic())
                    if w is None:
                        break
                    m = parse(w)
                    if ids.pop(m.id, None) is not None:
                        self.answered += 1
                self.lost.extend(ids.values())


def shows(d, name, state):
    """showServers() lists @name in @state."""
    out = console(d, "showServers()")
    return any(re.search(r"\b%s\b.*\b%s\b" % (re.escape(name), state), l)
               for l in out.splitlines())


def test_new_and_removed_servers_under_load(dnslb, make_responder):
    a, b, c = make_responder(), make_responder(), make_responder()
    d = dnslb(console_head() + "setServerPolicy(roundrobin)\n" +
              lua_server(a, name="a", checkTimeout=300))
    with Load(d.port) as load:
        assert wait_until(lambda: load.answered >= 100, 10)

        start = len(d.lines)
        out = console(d, 'newServer({address="%s", name="b", checkTimeout=300})' % b.address)
        assert out.strip() == "b"
        # its first health check decides, and is logged as the initial one is
        assert d.wait_line(r"Marking downstream b \(.*\) as 'up'", start, 5) is not None
        assert d.wait_line(r"Added downstream server " + re.escape(b.address), start, 5)
        assert wait_until(lambda: len(b.client_queries()) >= 50, 10)
        assert shows(d, "b", "up")

        # a server in a new pool, reached through a rule
        console(d, 'newServer({address="%s", name="c", pool="other"})' % c.address)
        console(d, 'addAction("other.example.", PoolAction("other"))')
        assert wait_until(lambda: any(
            udp_answer(d.port, "x%d.other.example." % i) for i in range(3)), 5)
        assert c.queries_for("x") and not a.queries_for("x") and not b.queries_for("x")

        # taken out while queries flow: in-flight answers still arrive
        console(d, "getServer(1):setDown()")
        n_b = len(b.client_queries())
        time.sleep(0.5)
        # at most the queries already in flight when it went down
        assert len(b.client_queries()) - n_b <= 10
        console(d, "rmServer(1)")
        out = console(d, "showServers()")
        assert re.search(r"\bb\b.*\bDOWN\b", out), out
        n_a = len(a.client_queries())
        assert wait_until(lambda: len(a.client_queries()) >= n_a + 50, 10)

        # and one more while the load runs
        console(d, 'newServer({address="%s", name="b2", checkTimeout=300})' % b.address)
        assert wait_until(lambda: shows(d, "b2", "up"), 5)
        time.sleep(0.5)
    assert load.sent >= 200
    assert load.lost == [] and load.answered == load.sent, \
        "%d of %d lost: %s" % (len(load.lost), load.sent, load.lost[:10])


def udp_answer(port, name):
    with UdpClient(port) as c:
        c.send(make_query(name, qid=7).to_wire())
        w = c.recv(2.0)
    return w is not None and parse(w).rcode() == 0


NAMES = ["name%d.example." % i for i in range(300)]


def owner_map(d, responders, names):
    """Ask each name once; {name: index of the responder that saw it}."""
    for r in responders:
        r.clear()
    with UdpClient(d.port) as c:
        for i in range(0, len(names), 20):
            ids = {}
            for j, n in enumerate(names[i:i + 20]):
                ids[j] = n
                c.send(make_query(n, qid=j).to_wire())
            end = time.monotonic() + 2.0
            while ids:
                w = c.recv(end - time.monotonic())
                assert w is not None, "unanswered: %s" % sorted(ids.values())
                ids.pop(parse(w).id, None)
    out = {}
    for k, r in enumerate(responders):
        for q in r.client_queries():
            out[q.qname.lower()] = k
    assert len(out) == len(names)
    return out


def test_chashed_ring_follows_runtime_servers(dnslb, make_responder):
    rs = [make_responder() for _ in range(3)]
    d = dnslb(console_head() + "setServerPolicy(chashed)\n" +
              "".join(lua_server(r, name="s%d" % i, id="00000000-0000-0000-0000-00000000000%d"
                                 % i, weight=100, healthCheckMode="up")
                      for i, r in enumerate(rs[:2])))
    before = owner_map(d, rs, NAMES)
    assert set(before.values()) == {0, 1}

    console(d, 'newServer({address="%s", name="s2", weight=100, healthCheckMode="up", '
               'id="00000000-0000-0000-0000-000000000002"})' % rs[2].address)
    after = owner_map(d, rs, NAMES)
    moved = [n for n in NAMES if after[n] != before[n]]
    # only names taken over by the new server move, and it takes a fair share
    assert all(after[n] == 2 for n in moved), moved
    assert len(NAMES) // 8 < len(moved) < len(NAMES) * 2 // 3, len(moved)

    console(d, "rmServer(2)")
    assert owner_map(d, rs, NAMES) == before


def test_runtime_server_that_cannot_open(dnslb, make_responder):
    a, b = make_responder(), make_responder()
    d = dnslb(console_head() + lua_server(a, name="a"))
    r = subprocess.run([dnslb_bin(), "-C", d.conf_path, "-c", "-e",
                        'newServer({address="%s", name="bad", source="192.0.2.77"})'
                        % b.address], capture_output=True, text=True, timeout=30,
                       cwd=d.workdir)
    assert "newServer:" in r.stdout + r.stderr and "could not open" in r.stdout + r.stderr, \
        (r.stdout, r.stderr)
    out = console(d, "showServers()")
    assert re.search(r"\bbad\b.*\bDOWN\b", out), out
    assert console(d, 'return #getPoolServers("")').strip() == "1"
    assert udp_answer(d.port, "still.example.")
    assert b.client_queries() == []
