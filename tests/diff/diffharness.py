"""The differential harness: Debian's dnsdist 1.7.3 and dnslb, started with
the same Lua configuration in front of identical scripted backends, fed the
same input, their whole outputs compared.

A `Pair` starts both daemons. Each gets its own copy of every backend (two
`Responder`s built with the same arguments, see tests/e2e/responder.py), so
what each backend received can be compared too. The config body is the
same text for both; only the ports the harness adds differ (listener,
console, web server).

What is compared, and how:

  pair.query(wire, "udp"|"tcp")   the answer bytes, ID aside (both must
                                  answer, or both stay silent), and the
                                  queries each backend received since the
                                  last call (ID aside)
  pair.console(cmd)               the text `-c -e cmd` prints, each client
                                  talking to its own daemon
  pair.stats()                    dumpStats() as {name: value}; the volatile
                                  names (time, memory, kernel counters) are
                                  left out, and so are dnslb's own counters,
                                  each listed in docs/dnsdist-differences.md
  pair.json(path)                 a web server document (JSON), volatile
                                  fields replaced by a marker
  check_config(conf)              `--check-config`: stdout, stderr and exit
                                  status of both, byte for byte (the file
                                  name is the same)

A deliberate difference is written in the test as `known("anchor")`: the
anchor must be a heading in docs/dnsdist-differences.md (checked by
test_differences_doc.py), and the test then asserts the documented
behaviour instead of equality.
"""

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "e2e"))

import dnslbtest  # noqa: E402
from dnslbtest import (DNSDIST, RD, TcpClient, UdpClient, build_query, dnslb_bin,  # noqa: E402,F401
                       free_port, hostport, lua_value)
from responder import Responder  # noqa: E402

SRC = dnslbtest.SRC
DIFF_DOC = os.path.join(SRC, "docs", "dnsdist-differences.md")

# dumpStats() names whose value depends on time, the process or the host,
# never on the traffic: left out of every comparison (docs/dnsdist-differences.md,
# "Counters that measure the process").
VOLATILE_STATS = {
    "uptime", "real-memory-usage", "special-memory-usage", "fd-usage",
    "cpu-iowait", "cpu-steal", "cpu-sys-msec", "cpu-user-msec",
    "latency-avg100", "latency-avg1000", "latency-avg10000", "latency-avg1000000",
    "latency-sum", "latency-slow", "latency0-1", "latency1-10", "latency10-50",
    "latency50-100", "latency100-1000",
    "udp-in-csum-errors", "udp-in-errors", "udp-noport-errors", "udp-recvbuf-errors",
    "udp-sndbuf-errors", "udp6-in-csum-errors", "udp6-in-errors", "udp6-noport-errors",
    "udp6-recvbuf-errors", "udp6-sndbuf-errors", "security-status", "tcp-listen-overflows",
}

# dumpStats() names dnslb adds (each documented in docs/counters.md and
# listed in docs/dnsdist-differences.md, "Counters dnslb adds").
DNSLB_ONLY_STATS = {
    "blocking-receive-wakeups", "blocking-receives", "cache-entries", "cache-evictions",
    "cache-prefetches", "cache-stale-hits", "cache-ttl-too-shorts",
    "client-outstanding-exceeded", "coalesced-receives", "dyn-block-drops",
    "failover-retries", "inflight-full", "lua-errors", "tcp-client-banned",
    "tcp-client-connections", "tcp-client-rate-exceeded", "tcp-client-rejected",
    "tcp-client-timeouts", "tcp-downstream-connections", "tcp-downstream-failures",
    "tcp-output-buffer-full", "tcp-overloaded-connections", "tcp-too-many-read-ios",
    "tls-downstream-failures",
}


def have_dnsdist():
    return os.access(DNSDIST, os.X_OK)


def known(anchor):
    """A deliberate difference: @anchor is the heading's text in
    docs/dnsdist-differences.md. Fails the test if it is not there."""
    with open(DIFF_DOC) as f:
        heads = [l.lstrip("#").strip() for l in f if l.startswith("#")]
    assert anchor in heads, "difference %r is not listed in docs/dnsdist-differences.md" % anchor
    # DLB_DIFF_KNOWN_LOG=FILE: one line per case that meets a difference (for the count)
    log = os.environ.get("DLB_DIFF_KNOWN_LOG")
    if log:
        with open(log, "a") as f:
            f.write("%s\t%s\n" % (os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0], anchor))
    return True


def strip_id(wire):
    return None if wire is None else b"\0\0" + wire[2:]


class Side:
    """One daemon of a pair, with its backends, console and web server."""

    def __init__(self, impl, workdir, body, responders, listen_opts, args, web):
        self.impl = impl
        self.responders = responders
        self.key = base64.b64encode(os.urandom(32)).decode()
        self.console_port = free_port()
        self.web_port = free_port() if web else None
        head = 'setSecurityPollSuffix("")\n'
        head += 'controlSocket("127.0.0.1:%d")\nsetKey("%s")\n' % (self.console_port, self.key)
        if web:
            head += ('webserver("127.0.0.1:%d")\nsetWebserverConfig({password="pw", '
                     'apiKey="key", acl="127.0.0.0/8"})\n' % self.web_port)
        for i, r in enumerate(responders):
            body = body.replace("@B%d@" % i, r.address)
        # @TLSPORT@, @TLSPORT1@...: more listening ports of this side's own (addTLSLocal)
        self.tls_ports = {}
        for tag in sorted(set(re.findall(r"@TLSPORT\d*@", body))):
            self.tls_ports[tag] = free_port()
            body = body.replace(tag, str(self.tls_ports[tag]))
        self.tls_port = self.tls_ports.get("@TLSPORT@")
        self.daemon = dnslbtest.Daemon(workdir, head + body, args, listen=True,
                                       listen_opts=listen_opts, impl=impl, name=impl)
        self.seen = [0] * len(responders)   # per backend: queries already compared

    @property
    def port(self):
        return self.daemon.port

    def start(self):
        self.daemon.start()
        if self.impl == "dnslb":
            # dnsdist's "Accepting control connections" comes last; dnslb's
            # "running" line after the console too. The health checks' first
            # round and the web server need the same short moment on both.
            time.sleep(0.3)

    def backend_queries(self):
        return [list(r.client_queries()) for r in self.responders]

    def console(self, cmd, timeout=10):
        if self.impl == "dnsdist":
            argv = [DNSDIST, "-C", self.daemon.conf_path, "-c", "-e", cmd]
        else:
            argv = [dnslb_bin(), "-C", self.daemon.conf_path, "-c", "-e", cmd]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                           cwd=self.daemon.workdir)
        return r.stdout

    def web(self, path, key=True):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.web_port, path))
        if key:
            req.add_header("X-API-Key", "key")
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()


class ClockStraddle(AssertionError):
    """Answers (or the queries the backends received) differ after an
    exchange of this pair crossed a wall-clock second. Both servers stamp
    cache entries and rates with whole seconds (dnsdist: time(nullptr)), so
    when an exchange straddles a boundary the two may have stamped it one
    second apart, and a later cache hit's TTLs then differ by one, or an
    entry expires one second apart, without any difference in behaviour. The diff tests
    run with `--reruns 2 --only-rerun ClockStraddle` (tests/CMakeLists.txt):
    such a test is run again from scratch, and a difference that is still
    there on the third run fails it."""


class Pair:
    """dnsdist and dnslb with the same config. @body may name backends as
    @B0@, @B1@, ...; @backends is a list of Responder keyword dicts (one
    Responder per entry and per side)."""

    def __init__(self, workdir, body, backends=({},), listen_opts=None, args=(),
                 dnslb_args=(), web=False):
        self.sides = {}
        for impl in ("dnsdist", "dnslb"):
            rs = [Responder(**kw).start() for kw in backends]
            d = os.path.join(workdir, impl)
            os.makedirs(d, exist_ok=True)
            a = list(args) + (list(dnslb_args) if impl == "dnslb" else [])
            self.sides[impl] = Side(impl, d, body, rs, listen_opts, a, web)
        self.theirs = self.sides["dnsdist"]
        self.ours = self.sides["dnslb"]
        self.straddled = None   # the first exchange that crossed a second (text)

    def start(self):
        for s in self.sides.values():
            s.start()
        return self

    def stop(self):
        for s in self.sides.values():
            if s.daemon.proc is not None:
                s.daemon.stopped_by_test = True
                s.daemon.kill()
            for r in s.responders:
                r.stop()

    def sanitizer_report(self):
        return self.ours.daemon.sanitizer_report()

    # ---- traffic -------------------------------------------------------
    def exchange(self, side, wire, proto="udp", timeout=2.0):
        if proto == "udp":
            with UdpClient(side.port) as c:
                c.send(wire)
                return c.recv(timeout)
        with TcpClient(side.port) as c:
            c.send_msg(wire)
            return c.recv_msg(timeout)

    def answers(self, wire, proto="udp", timeout=2.0):
        """(dnsdist's answer, dnslb's answer), each None when it sent none.

        Both are asked at once, and never in the last 80 ms of a wall-clock
        second: both servers age cached answers and count rates by whole
        seconds, so the same second must stamp the query on both sides (asked
        one after the other, a second boundary between the two asks gave a
        cache hit's TTL one apart about once per CI run). An exchange that
        still crosses a second (a loaded machine) is remembered: see
        ClockStraddle."""
        frac = time.time() % 1.0
        if frac > 0.92:
            time.sleep(1.0 - frac + 0.01)
        out = [None, None]
        done = [0.0, 0.0]

        def ask(i, side):
            out[i] = self.exchange(side, wire, proto, timeout)
            done[i] = time.time()

        t0 = time.time()
        t = threading.Thread(target=ask, args=(0, self.theirs))
        t.start()
        ask(1, self.ours)
        t.join()
        if self.straddled is None and int(max(done)) != int(t0):
            self.straddled = "%s over %s: asked at %.3f, answered at %.3f (dnsdist) and %.3f (dnslb)" % (
                wire.hex(), proto, t0, done[0], done[1])
        return out[0], out[1]

    def new_backend_queries(self, side):
        """The queries @side's backends received since the last call, the
        first backend's first: [(transport, wire with ID 0)]."""
        return [q for b in self.new_queries_per_backend(side) for q in b]

    def new_queries_per_backend(self, side):
        """Per backend, the queries it received since the last call."""
        out = []
        for i, qs in enumerate(side.backend_queries()):
            out.append([(q.transport, strip_id(q.wire)) for q in qs[side.seen[i]:]])
            side.seen[i] = len(qs)
        return out

    def query(self, wire, proto="udp", timeout=2.0, settle=0.05):
        """Send @wire to both; assert the same answer (ID aside) and the same
        backend traffic. Returns dnsdist's answer."""
        a, b = self.answers(wire, proto, timeout)
        if strip_id(a) != strip_id(b):
            msg = ("answers differ over %s\n dnsdist: %s\n dnslb:   %s"
                   % (proto, a and a.hex(), b and b.hex()))
            if self.straddled:
                raise ClockStraddle(msg + "\n after an exchange that crossed a second: "
                                    + self.straddled)
            raise AssertionError(msg)
        time.sleep(settle)
        self.assert_same_backend_traffic()
        return a

    def assert_same_backend_traffic(self):
        """The same queries reached both sides' backends since the last
        check. A difference after an exchange crossed a second is a
        ClockStraddle (a cache entry that expired in one daemon's second and
        not yet in the other's), rerun like a differing answer."""
        qa = self.new_queries_per_backend(self.theirs)
        qb = self.new_queries_per_backend(self.ours)
        if qa == qb:
            return
        msg = "the backends received different queries\n dnsdist: %r\n dnslb:   %r" % (
            [[(t, w.hex()) for t, w in b] for b in qa], [[(t, w.hex()) for t, w in b] for b in qb])
        if self.straddled:
            raise ClockStraddle(msg + "\n after an exchange that crossed a second: "
                                + self.straddled)
        raise AssertionError(msg)

    # ---- console, counters, web ---------------------------------------
    def console(self, cmd):
        """Both consoles' output of @cmd; asserts they are equal."""
        a, b = self.theirs.console(cmd), self.ours.console(cmd)
        assert a == b, "console output of %s differs\n--- dnsdist\n%s--- dnslb\n%s" % (cmd, a, b)
        return a

    @staticmethod
    def parse_dumpstats(text):
        toks = text.split()
        out = {}
        i = 0
        while i + 1 < len(toks):
            try:
                float(toks[i + 1])
                out[toks[i]] = toks[i + 1]
                i += 2
            except ValueError:
                i += 1
        return out

    def stats(self):
        """Both dumpStats() outputs, compared: the same names (dnslb's own
        left out) with the same values (the volatile ones left out)."""
        a = self.parse_dumpstats(self.theirs.console("dumpStats()"))
        b = self.parse_dumpstats(self.ours.console("dumpStats()"))
        b_only = set(b) - set(a)
        assert b_only <= DNSLB_ONLY_STATS, "dnslb has undocumented counters %s" % sorted(
            b_only - DNSLB_ONLY_STATS)
        missing = set(a) - set(b)
        assert not missing, "dnslb lacks dnsdist's counters %s" % sorted(missing)
        diff = {k: (a[k], b[k]) for k in a if k not in VOLATILE_STATS and a[k] != b[k]}
        assert not diff, "counters differ (dnsdist, dnslb): %r" % diff
        return a

    def json(self, path, normalize=None):
        """Both web servers' @path as parsed JSON, normalized by
        @normalize(doc) (volatile fields), compared."""
        (sa, a), (sb, b) = self.theirs.web(path), self.ours.web(path)
        assert sa == sb, "HTTP status of %s: dnsdist %d, dnslb %d" % (path, sa, sb)
        ja, jb = json.loads(a), json.loads(b)
        if normalize:
            ja, jb = normalize(ja), normalize(jb)
        assert ja == jb, "%s differs\n dnsdist: %s\n dnslb:   %s" % (
            path, json.dumps(ja, sort_keys=True), json.dumps(jb, sort_keys=True))
        return ja


def same_counters(p, skip=()):
    """dumpStats() of both: every counter both have is equal, but the
    volatile ones and @skip (names a test leaves to another area)."""
    a = p.parse_dumpstats(p.theirs.console("dumpStats()"))
    b = p.parse_dumpstats(p.ours.console("dumpStats()"))
    leave = VOLATILE_STATS | set(skip)
    diff = {k: (a[k], b[k]) for k in a if k in b and k not in leave and a[k] != b[k]}
    assert not diff, "counters differ (dnsdist, dnslb): %r" % diff


def check_config(workdir, conf, name="dnsdist.conf", extra_files=None):
    """Run `--check-config` of both on the same file (same name, each in its
    own directory, so relative includes work). Returns
    {impl: (rc, stdout, stderr)}."""
    out = {}
    for impl in ("dnsdist", "dnslb"):
        d = os.path.join(workdir, "cc-" + impl)
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)
        for rel, text in (extra_files or {}).items():
            p = os.path.join(d, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write(text)
        with open(os.path.join(d, name), "w") as f:
            f.write(conf)
        binary = DNSDIST if impl == "dnsdist" else dnslb_bin()
        r = subprocess.run([binary, "--check-config", "-C", name], capture_output=True,
                           text=True, timeout=30, cwd=d)
        out[impl] = (r.returncode, r.stdout, r.stderr)
    return out


def same_check_config(workdir, conf, **kw):
    """Assert both print the same bytes and exit alike; return dnsdist's."""
    r = check_config(workdir, conf, **kw)
    assert r["dnsdist"] == r["dnslb"], (
        "--check-config differs\n dnsdist: %r\n dnslb:   %r" % (r["dnsdist"], r["dnslb"]))
    return r["dnsdist"]


def normalize_rx(text, patterns):
    for rx, rep in patterns:
        text = re.sub(rx, rep, text)
    return text
