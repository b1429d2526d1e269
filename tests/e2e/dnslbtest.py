"""Helpers for the dnslb end-to-end tests: start the daemon, read its
counters, send DNS queries (dnspython and raw bytes) over UDP and TCP.

Environment:
  DNSLB_BIN       the dnslb binary (ctest sets it)
  DNSLB_SRC       the source root (default: two levels above this file)
  DNSLB_E2E_IMPL  "dnslb" (default) or "dnsdist": run the suite against
                  Debian's dnsdist 1.7.3 instead, to debug the tests
                  themselves (counters then come from its console).
"""

import base64
import fcntl
import os
import re
import select
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time

import dns.edns
import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("DNSLB_SRC") or os.path.dirname(os.path.dirname(HERE))
IMPL = os.environ.get("DNSLB_E2E_IMPL", "dnslb")
DNSDIST = os.environ.get("DNSDIST_BIN", "/usr/bin/dnsdist")


def dnslb_bin():
    b = os.environ.get("DNSLB_BIN")
    if b:
        return os.path.abspath(b)
    for cand in ("build-e2e/dnslb", "build/dnslb"):
        p = os.path.join(SRC, cand)
        if os.path.exists(p):
            return p
    raise RuntimeError("DNSLB_BIN is not set and no dnslb binary found")


SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                     "LeakSanitizer has encountered a fatal error",
                     "runtime error:", "SUMMARY: UndefinedBehaviorSanitizer",
                     "WARNING: ThreadSanitizer", "ERROR: MemorySanitizer")

# ---------------------------------------------------------------------------
# ports


# Ports handed out by free_port come from below the kernel's ephemeral range
# (ip_local_port_range), so no outgoing connection made meanwhile (dnslb's to
# Redis, a health check, the test's own) can take a port between the test
# choosing it and the daemon binding it, as it could a port from bind(0). Each
# test process (ctest runs two at once) holds one of PORT_SLOTS slots, an
# flock()ed file, and hands out the ports of its own slice in turn.
PORT_BASE = 10000
PORT_SLOTS = 16
_port_slot = None           # (lock file, first port, slice size), once claimed
_port_next = 0


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _claim_port_slot():
    global _port_slot
    size = (_ephemeral_low() - PORT_BASE) // PORT_SLOTS
    if size < 64:
        return None         # no room below the ephemeral range: bind(0) it is
    for k in range(PORT_SLOTS):
        path = os.path.join(tempfile.gettempdir(), "dnslb-e2e-port-slot-%d.lock" % k)
        f = open(path, "a")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            continue
        _port_slot = (f, PORT_BASE + k * size, size)   # held until the process exits
        return _port_slot
    return None


def _bindable(fam, host, port):
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        s = socket.socket(fam, kind)
        try:
            s.bind((host, port))
        except OSError:
            return False
        finally:
            s.close()
    return True


def free_port(host="127.0.0.1"):
    """A port that is free for both UDP and TCP on @host right now (see above)."""
    global _port_next
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    slot = _port_slot or _claim_port_slot()
    if slot is not None:
        _, first, size = slot
        for _ in range(size):
            port = first + _port_next % size
            _port_next += 1
            if _bindable(fam, host, port):
                return port
    for _ in range(100):
        t = socket.socket(fam, socket.SOCK_STREAM)
        t.bind((host, 0))
        port = t.getsockname()[1]
        t.close()
        if _bindable(fam, host, port):
            return port
    raise RuntimeError("no free port")


def hostport(host, port):
    return "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)

# ---------------------------------------------------------------------------
# Lua config snippets


def lua_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "{" + ", ".join(lua_value(x) for x in v) + "}"
    if isinstance(v, dict):
        return "{" + ", ".join("%s=%s" % (k, lua_value(x)) for k, x in v.items()) + "}"
    return '"%s"' % str(v).replace("\\", "\\\\").replace('"', '\\"')


def lua_server(address, **opts):
    """newServer({address=..., opts...}); @address may be a Responder."""
    if hasattr(address, "address"):
        address = address.address
    d = {"address": address}
    d.update(opts)
    return "newServer(%s)\n" % lua_value(d)

# ---------------------------------------------------------------------------
# the daemon


class DaemonError(Exception):
    pass


class Daemon:
    """A running dnslb (or dnsdist, see IMPL).

    conf: the Lua config body. Unless listen=False, a setLocal() line for
    127.0.0.1:<port> is put in front of it (listen_opts become its option
    table). "@PORT@" in the body is replaced by the port.
    """

    def __init__(self, workdir, conf="", args=(), listen=True, listen_opts=None,
                 impl=None, name="dnslb", env=None, host="127.0.0.1", port=None):
        self.workdir = workdir
        self.body = conf
        self.args = list(args)
        self.listen = listen
        self.listen_opts = listen_opts
        self.impl = impl or IMPL
        self.name = name
        self.env = env
        self.host = host
        self.fixed_port = port
        self.port = None
        self.proc = None
        self.lines = []
        self._cond = threading.Condition()
        self._reader = None
        self.stopped_by_test = False
        self.returncode = None
        self.conf_path = os.path.join(workdir, "%s.conf" % name)
        self.stderr_path = os.path.join(workdir, "%s.stderr" % name)
        self.stdout_path = os.path.join(workdir, "%s.stdout" % name)
        self.console_port = None
        self.key = None

    # ---- config --------------------------------------------------------
    def render_conf(self):
        head = ""
        if self.impl == "dnsdist":
            head += 'setSecurityPollSuffix("")\n'
            self.console_port = free_port()
            self.key = base64.b64encode(os.urandom(32)).decode()
            head += 'controlSocket("127.0.0.1:%d")\nsetKey("%s")\n' % (self.console_port, self.key)
        if self.listen:
            if self.listen_opts:
                head += "setLocal(%s, %s)\n" % (lua_value(hostport(self.host, self.port)),
                                                lua_value(self.listen_opts))
            else:
                head += "setLocal(%s)\n" % lua_value(hostport(self.host, self.port))
        return head + self.body.replace("@PORT@", str(self.port))

    def command(self):
        if self.impl == "dnsdist":
            return [DNSDIST, "--supervised", "--disable-syslog", "-C", self.conf_path] + self.args
        return [dnslb_bin(), "-C", self.conf_path, "--supervised", "--disable-syslog"] + self.args

    # ---- lifecycle -----------------------------------------------------
    def start(self, wait=True, timeout=10.0):
        for attempt in range(4):
            self.port = self.fixed_port or free_port(self.host)
            with open(self.conf_path, "w") as f:
                f.write(self.render_conf())
            self._spawn()
            if not wait:
                return self
            try:
                self.wait_ready(timeout)
                return self
            except DaemonError:
                out = self.output()
                if (self.proc.poll() is not None and self.fixed_port is None
                        and re.search(r"in use|EADDRINUSE|bind", out, re.I) and attempt < 3):
                    continue        # lost a port race with a parallel test: retry
                raise
        return self

    def _spawn(self):
        self.lines = []
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        self._stderr = open(self.stderr_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=self._stderr,
                                     cwd=self.workdir, env=env)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        with open(self.stdout_path, "ab") as log:
            for raw in iter(self.proc.stdout.readline, b""):
                log.write(raw)
                log.flush()
                with self._cond:
                    self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
                    self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_line(self, pred, start=0, timeout=10.0):
        """Index of the first stdout line at or after @start matching @pred
        (a callable or a regex), or None at timeout / process exit."""
        if isinstance(pred, str):
            rx = re.compile(pred)
            pred = lambda l: rx.search(l) is not None  # noqa: E731
        end = time.monotonic() + timeout
        i = start
        with self._cond:
            while True:
                while i < len(self.lines):
                    if pred(self.lines[i]):
                        return i
                    i += 1
                left = end - time.monotonic()
                if left <= 0:
                    return None
                if not self._reader.is_alive():
                    return None
                self._cond.wait(min(left, 0.1))

    def wait_ready(self, timeout=10.0):
        if self.impl == "dnsdist":
            # its last startup line (the console is always configured here)
            if self.wait_line("Accepting control connections", 0, timeout) is None:
                raise DaemonError("dnsdist did not start:\n" + self.output())
            time.sleep(0.3)
            return
        idx = self.wait_line(lambda l: "dnslb" in l.lower() and "running" in l.lower(),
                             0, timeout)
        if idx is None:
            raise DaemonError("dnslb did not report running within %ss (exit %s):\n%s"
                              % (timeout, self.proc.poll(), self.output()))

    def output(self):
        with self._cond:
            out = "\n".join(self.lines)
        err = self.stderr()
        if err:
            out += "\n--- stderr ---\n" + err
        return out

    def stderr(self):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def send_signal(self, sig):
        self.proc.send_signal(sig)

    def reload(self, body):
        """Rewrite the config with @body, SIGHUP, wait for the reload's
        "Reloaded '...'" line; return the index of the first line after."""
        self.body = body
        with open(self.conf_path, "w") as f:
            f.write(self.render_conf())
        n = len(self.lines)
        self.send_signal(signal.SIGHUP)
        assert self.wait_line(r"Reloaded '", start=n) is not None, self.output()
        return n

    def stop(self, sig=signal.SIGTERM, timeout=5.0):
        """Send @sig, wait up to @timeout, return the exit status (negative
        for a signal, as subprocess does). Kills it after the timeout and
        raises DaemonError."""
        self.stopped_by_test = True
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self._finish()
                raise DaemonError("did not exit within %ss after signal %d" % (timeout, sig))
        self._finish()
        self.returncode = self.proc.returncode
        return self.returncode

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._finish()

    def _finish(self):
        if self._reader:
            self._reader.join(5)
        try:
            self._stderr.close()
        except Exception:
            pass

    def sanitizer_report(self):
        err = self.stderr()
        for m in SANITIZER_MARKERS:
            if m in err:
                return err
        return None

    # ---- counters ------------------------------------------------------
    def stats(self, timeout=5.0):
        """Counters as a dict {name: int}; per-backend counters under
        stats["backends"][name] = {"queries": n, ...}."""
        if self.impl == "dnsdist":
            return self._dnsdist_stats()
        with self._cond:
            start = len(self.lines)
        self.proc.send_signal(signal.SIGUSR1)
        end = self.wait_line(lambda l: l.strip() == "stat-end", start, timeout)
        if end is None:
            raise DaemonError("no stat-end line after SIGUSR1:\n" + self.output())
        with self._cond:
            block = self.lines[start:end]
        out = {"backends": {}}
        for l in block:
            parts = l.split()
            if len(parts) == 3 and parts[0] == "stat":
                out[parts[1]] = int(parts[2])
            elif len(parts) >= 2 and parts[0] == "backend":
                vals = parts[2:]
                out["backends"][parts[1]] = {vals[i]: int(vals[i + 1])
                                             for i in range(0, len(vals) - 1, 2)}
        return out

    def _dnsdist_stats(self):
        r = subprocess.run([DNSDIST, "-C", self.conf_path, "-c", "-e", "dumpStats()"],
                           capture_output=True, text=True, timeout=10, cwd=self.workdir)
        toks = r.stdout.split()
        out = {"backends": {}}
        i = 0
        while i + 1 < len(toks):
            try:
                out[toks[i]] = int(float(toks[i + 1]))
                i += 2
            except ValueError:
                i += 1
        r = subprocess.run([DNSDIST, "-C", self.conf_path, "-c", "-e",
                            'for _, s in ipairs(getServers()) do print("backend", s.name, '
                            '"outstanding", s:getOutstanding(), "drops", s:getDrops()) end'],
                           capture_output=True, text=True, timeout=10, cwd=self.workdir)
        for l in r.stdout.splitlines():
            parts = l.split()
            if len(parts) >= 2 and parts[0] == "backend":
                vals = parts[2:]
                out["backends"][parts[1]] = {vals[i]: int(vals[i + 1])
                                             for i in range(0, len(vals) - 1, 2)}
        return out

    def wait_stats(self, pred, timeout=5.0):
        """Poll the counters until pred(stats) is true; return the last
        stats (the caller asserts on them)."""
        end = time.monotonic() + timeout
        while True:
            s = self.stats()
            try:
                if pred(s):
                    return s
            except KeyError:
                pass
            if time.monotonic() >= end:
                return s
            time.sleep(0.1)

    def stat_at_least(self, name, n, timeout=5.0):
        s = self.wait_stats(lambda s: s.get(name, 0) >= n, timeout)
        return s.get(name, 0)

# ---------------------------------------------------------------------------
# wire helpers

QR, AA, TC, RD, RA = 0x8000, 0x0400, 0x0200, 0x0100, 0x0080


def encode_name(name):
    """Wire form of a presentation name, case kept (no escapes)."""
    if name in (".", ""):
        return b"\x00"
    out = b""
    for label in name.rstrip(".").split("."):
        b = label.encode("latin-1")
        assert 0 < len(b) <= 63, label
        out += bytes([len(b)]) + b
    return out + b"\x00"


def opt_rr(payload=1232, do=False, options=(), version=0, ext_rcode=0):
    rdata = b"".join(struct.pack("!HH", c, len(d)) + d for c, d in options)
    ttl = (ext_rcode << 24) | (version << 16) | (0x8000 if do else 0)
    return b"\x00" + struct.pack("!HHIH", 41, payload, ttl, len(rdata)) + rdata


def build_query(qname="example.test.", qtype=1, qclass=1, qid=0x1234, flags=RD,
                qdcount=None, ancount=0, nscount=0, arcount=None, opt=None,
                trailing=b"", name_wire=None, question=None):
    """Raw query bytes. @opt: None, True (payload 1232) or a dict for opt_rr()."""
    if question is None:
        nw = name_wire if name_wire is not None else encode_name(qname)
        question = nw + struct.pack("!HH", qtype, qclass)
    if opt is True:
        opt = {}
    optb = opt_rr(**opt) if opt is not None else b""
    if qdcount is None:
        qdcount = 1 if question else 0
    if arcount is None:
        arcount = 1 if optb else 0
    hdr = struct.pack("!HHHHHH", qid, flags, qdcount, ancount, nscount, arcount)
    return hdr + question + optb + trailing


class Header:
    def __init__(self, wire):
        (self.id, self.flags, self.qdcount, self.ancount, self.nscount,
         self.arcount) = struct.unpack("!HHHHHH", wire[:12])
        self.qr = bool(self.flags & QR)
        self.opcode = (self.flags >> 11) & 0xF
        self.aa = bool(self.flags & AA)
        self.tc = bool(self.flags & TC)
        self.rd = bool(self.flags & RD)
        self.ra = bool(self.flags & RA)
        self.rcode = self.flags & 0xF

    def __repr__(self):
        return ("<Header id=%d qr=%d op=%d aa=%d tc=%d rd=%d ra=%d rcode=%d qd=%d an=%d "
                "ns=%d ar=%d>" % (self.id, self.qr, self.opcode, self.aa, self.tc, self.rd,
                                  self.ra, self.rcode, self.qdcount, self.ancount,
                                  self.nscount, self.arcount))


def parse(wire):
    return dns.message.from_wire(wire, ignore_trailing=True)


def a_addrs(wire_or_msg):
    m = parse(wire_or_msg) if isinstance(wire_or_msg, (bytes, bytearray)) else wire_or_msg
    out = []
    for rrset in m.answer:
        if rrset.rdtype == dns.rdatatype.A:
            out += [r.address for r in rrset]
    return out


def question_bytes(wire):
    """The raw bytes of the first question (name as on the wire)."""
    pos = 12
    while wire[pos] != 0:
        pos += 1 + wire[pos]
    return bytes(wire[12:pos + 5])


def find_opt(wire):
    """(payload, ttl, options) of the OPT record in a message, or None."""
    m = parse(wire)
    if m.edns < 0:
        return None
    return {"payload": m.payload, "do": bool(m.ednsflags & dns.flags.DO),
            "version": m.edns, "options": [(o.otype, o.to_wire() if hasattr(o, "to_wire")
                                            else b"") for o in m.options]}

# ---------------------------------------------------------------------------
# UDP


def _family(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


class UdpClient:
    """A connected UDP socket to the proxy."""

    def __init__(self, port, host="127.0.0.1"):
        self.sock = socket.socket(_family(host), socket.SOCK_DGRAM)
        self.sock.connect((host, port))

    def send(self, wire):
        self.sock.send(wire)

    def recv(self, timeout):
        """One datagram, or None at timeout."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self.sock], [], [], left)
            if not r:
                return None
            try:
                return self.sock.recv(65535)
            except ConnectionRefusedError:
                continue            # ICMP port unreachable: nothing there (yet)

    def collect(self, wait):
        """All datagrams arriving within @wait seconds."""
        out = []
        end = time.monotonic() + wait
        while True:
            d = self.recv(end - time.monotonic())
            if d is None:
                return out
            out.append(d)

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


def udp_raw(port, wire, timeout=3.0, host="127.0.0.1"):
    """Send raw bytes, return the first datagram back or None."""
    with UdpClient(port, host) as c:
        c.send(wire)
        return c.recv(timeout)


def udp_collect(port, wire, wait, host="127.0.0.1"):
    with UdpClient(port, host) as c:
        c.send(wire)
        return c.collect(wait)


def make_query(qname, qtype="A", qid=None, rd=True, edns=-1, payload=1232, options=None,
               want_dnssec=False):
    q = dns.message.make_query(qname, qtype, use_edns=edns, payload=payload,
                               options=options, want_dnssec=want_dnssec)
    if qid is not None:
        q.id = qid
    if not rd:
        q.flags &= ~dns.flags.RD
    return q


def udp_query(port, qname, qtype="A", timeout=3.0, host="127.0.0.1", **kw):
    """dnspython query over UDP; returns the Message, or None at timeout."""
    q = qname if isinstance(qname, dns.message.Message) else make_query(qname, qtype, **kw)
    wire = udp_raw(port, q.to_wire(), timeout, host)
    if wire is None:
        return None
    r = parse(wire)
    assert r.id == q.id, "answer ID %d != query ID %d" % (r.id, q.id)
    return r

# ---------------------------------------------------------------------------
# TCP


class TcpClient:
    """A raw TCP connection with DNS length framing helpers."""

    def __init__(self, port, host="127.0.0.1", timeout=5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""
        self.eof = False

    def send_raw(self, data):
        self.sock.sendall(data)

    def send_msg(self, wire):
        self.sock.sendall(struct.pack("!H", len(wire)) + wire)

    def _fill(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        r, _, _ = select.select([self.sock], [], [], left)
        if not r:
            return False
        try:
            d = self.sock.recv(65536 + 2)
        except (ConnectionResetError, BrokenPipeError):
            d = b""
        if not d:
            self.eof = True
            return False
        self.buf += d
        return True

    def recv_msg(self, timeout=3.0):
        """One framed message; None at EOF or timeout (check .eof)."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buf) >= 2:
                ln = struct.unpack("!H", self.buf[:2])[0]
                if len(self.buf) >= 2 + ln:
                    m, self.buf = self.buf[2:2 + ln], self.buf[2 + ln:]
                    return m
            if self.eof or not self._fill(deadline):
                return None

    def wait_closed(self, timeout):
        """True if the peer closes (EOF or RST) within @timeout. Data that
        arrives meanwhile is kept in .buf."""
        deadline = time.monotonic() + timeout
        while not self.eof:
            if time.monotonic() >= deadline:
                return False
            self._fill(deadline)
        return True

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


def tcp_raw(port, wire, timeout=5.0, host="127.0.0.1"):
    with TcpClient(port, host) as c:
        c.send_msg(wire)
        return c.recv_msg(timeout)


def tcp_query(port, qname, qtype="A", timeout=5.0, host="127.0.0.1", **kw):
    q = qname if isinstance(qname, dns.message.Message) else make_query(qname, qtype, **kw)
    wire = tcp_raw(port, q.to_wire(), timeout, host)
    if wire is None:
        return None
    r = parse(wire)
    assert r.id == q.id
    return r


def wait_until(pred, timeout=5.0, interval=0.05):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= end:
            return v
        time.sleep(interval)

# ---------------------------------------------------------------------------
# comparing answers field by field (dnslb next to dnsdist)


def msg_fields(wire):
    """A comparable summary of a DNS message: every header bit, the
    question (case kept), each section's records as sorted (owner, ttl,
    class, type, rdata) tuples, and the EDNS fields and options."""
    import dns.rdataclass
    h = Header(wire)
    m = parse(wire)

    def section(sec):
        out = []
        for rrset in sec:
            for rd in rrset:
                out.append((rrset.name.to_text(), rrset.ttl, dns.rdataclass.to_text(rrset.rdclass),
                            dns.rdatatype.to_text(rrset.rdtype), rd.to_text()))
        return sorted(out)
    f = {"id": h.id, "qr": h.qr, "opcode": h.opcode, "aa": h.aa, "tc": h.tc, "rd": h.rd,
         "ra": h.ra, "z": bool(h.flags & 0x0040), "ad": bool(h.flags & 0x0020),
         "cd": bool(h.flags & 0x0010), "rcode": m.rcode(), "qdcount": h.qdcount,
         "ancount": h.ancount, "nscount": h.nscount, "arcount": h.arcount,
         "question": [(q.name.to_text(), dns.rdataclass.to_text(q.rdclass),
                       dns.rdatatype.to_text(q.rdtype)) for q in m.question],
         "answer": section(m.answer), "authority": section(m.authority),
         "additional": section(m.additional), "edns": m.edns}
    if m.edns >= 0:
        f["payload"] = m.payload
        f["do"] = bool(m.ednsflags & dns.flags.DO)
        f["ednsflags"] = m.ednsflags
        f["options"] = sorted((o.otype, o.to_wire() if hasattr(o, "to_wire") else b"")
                              for o in m.options)
    return f


def fields_diff(a, b):
    """{field: (a's, b's)} for the fields of two msg_fields() that differ."""
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


# ---------------------------------------------------------------------------
# the console, for tests that drive dnslb through it

def console_head():
    """controlSocket() on a free port and a fresh setKey(), to put in a config."""
    key = base64.b64encode(os.urandom(32)).decode()
    return 'controlSocket("127.0.0.1:%d")\nsetKey("%s")\n' % (free_port(), key)


def check_config_text(workdir, body):
    """dnslb --check-config on a file holding @body: (exit status, output)."""
    path = os.path.join(str(workdir), "check.conf")
    with open(path, "w") as f:
        f.write(body)
    r = subprocess.run([dnslb_bin(), "--check-config", "-C", path], capture_output=True,
                       text=True, timeout=30)
    return r.returncode, r.stdout + r.stderr


def console(d, cmd):
    """Run @cmd on daemon @d's console with `dnslb -c -e`; return what it printed."""
    r = subprocess.run([dnslb_bin(), "-C", d.conf_path, "-c", "-e", cmd],
                       capture_output=True, text=True, timeout=30, cwd=d.workdir)
    for m in SANITIZER_MARKERS:
        assert m not in r.stderr, r.stderr
    assert r.returncode == 0, (cmd, r.stdout, r.stderr)
    return r.stdout
