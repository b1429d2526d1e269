"""A programmable DNS test backend for the end-to-end tests.

One thread serves UDP and TCP on the same port of 127.0.0.1 (or ::1); bind
to port 0 and read `.port`.  Every query it receives is recorded (see
`Query`), and the answer depends on the first label of the question name
(case-insensitive):

  (anything else)    A 192.0.2.1 / AAAA 2001:db8::1 / TXT "hello" /
                     MX 10 mail.example. ; other types: NOERROR, no data
  nx                 NXDOMAIN
  servfail, refused, formerr, notimp
                     that rcode, question echoed
  drop               never answers (TCP: keeps the connection open)
  close              TCP: closes the connection without answering; UDP: drop
  delay-<ms>, ooo-<ms>
                     normal answer after <ms> milliseconds (per query, so
                     pipelined TCP queries are answered out of order)
  late               normal answer after `late_ms`
  wrongid            first an answer with another ID (A 6.6.6.6), then the
                     real one
  wrongname          first an answer for another qname (A 6.6.6.6), then real
  wrongtype, wrongclass
                     first an answer with another qtype / qclass, then real
  qr0                first a copy of the answer with QR=0 (A 6.6.6.6), then real
  short              first an 8-byte datagram, then the real answer
  otherport          UDP: first an answer (A 6.6.6.6) from another source port,
                     then the real answer from the right one
  empty-noerror, empty-nxdomain
                     first a header-only (qdcount=0) answer with that rcode,
                     then (after 100 ms) the real answer
  empty-refused, empty-servfail
                     only a header-only answer with that rcode
  tc                 TC=1, question only
  big                UDP: TC=1; TCP: ~60 kB of TXT records
  big-<n>            TCP: an answer of exactly <n> bytes (TXT); UDP: TC=1
  twice              A 192.0.2.1, then 50 ms later a second answer A 192.0.2.2
  ttl-<n>            the normal answer with every record's TTL set to <n>
  seq-<n>            A 198.51.100.<k>, TTL <n>, where k counts the queries seen
                     so far for this qname (case-insensitive, any transport):
                     tells a refreshed answer from an older one
  nxdomain-<ttl>[-<min>], nodata-<ttl>[-<min>]
                     NXDOMAIN / NOERROR-no-data with a SOA in the authority
                     section: RR TTL <ttl>, SOA MINIMUM <min> (default <ttl>)
  tcdata             TC=1 but with the normal records (TTL 300)
  lowercase          the normal answer, its question name in lower case

  trailing           the normal answer followed by 4 octets (de ad be ef)
                     after its last record
  withopt            the normal answer with an OPT RR (payload 4096, DO,
                     option 65002 "opt") whether the query had one or not
  noopt              the normal answer without an OPT RR, whatever the query
  axfr-<n>           AXFR/IXFR over TCP: <n> messages (n >= 1), the first
                     starting with the zone's SOA (serial 2024010101), the
                     last ending with it, A records between; UDP: TC=1
  huge-<n>           an answer of exactly <n> bytes (TXT) over UDP and TCP
  size-<n>           UDP and TCP: an answer of exactly <n> bytes (TXT), TTL 300
  ecsscope-<n>       the normal answer, its OPT's echoed ECS option (if the
                     query had one) with SCOPE PREFIX-LENGTH <n>

Health-check queries (qname in `check_names`, by default
{"a.root-servers.net."}, case-insensitive) get the normal answer unless
`set_check_mode(mode)` was called; it can be changed at any time while the
responder runs, without touching the labels above:

  set_check_mode("answer")      the normal answer (the default)
  set_check_mode("servfail"|"nxdomain"|"refused"|"formerr"|"notimp")
                                that rcode, question echoed
  set_check_mode("drop")        no answer at all
  set_check_mode(mode, names=["health.example."])
                                also replace the set of check names

`set_answer_mode(mode)` does the same for every other query, overriding the
labels: "normal" (the default: the labels decide), "servfail" (or another
rcode name above: that rcode for everything), "drop" (answer nothing), or
"answer" (the normal answer whatever the label); a backend that fails real
traffic while its health checks still pass, or the reverse.

Each check query records the mode it was handled with in `Query.check`
(None for other queries); `check_queries(mode=None, transport=None)` lists
them.  `Responder(port=N)` binds a fixed port, and `restart()` after
`stop()` serves again on the same port with the same records (a backend
killed and restarted).

`Responder(proxy_protocol=True)` expects a PROXY protocol v2 header (a
backend with useProxyProtocol): at the start of each UDP datagram (stripped
before the DNS message is parsed) and of each TCP connection. The parsed
header is recorded in `Query.proxy` (see `parse_proxy_v2`; TCP: the
connection's header, also listed in `.tcp_proxy_headers` as (peer, header));
a datagram or connection without a valid header is recorded with
`Query.proxy = None` / closed, and never answered.  Answers are plain DNS.

Spoofed/forged answers always carry A 6.6.6.6 so a test can tell them
apart from the real answer (192.0.2.1).  If the query has an OPT record the
answer carries one too, echoing the query's payload size, DO bit and options.
"""

import heapq
import itertools
import re
import selectors
import socket
import struct
import threading
import time

SPOOF_ADDR = bytes([6, 6, 6, 6])
REAL_ADDR = bytes([192, 0, 2, 1])
SECOND_ADDR = bytes([192, 0, 2, 2])
REAL_AAAA = bytes.fromhex("20010db8000000000000000000000001")

QR = 0x8000
TC = 0x0200
AA = 0x0400
RD = 0x0100

RCODES = {"noerror": 0, "formerr": 1, "servfail": 2, "nxdomain": 3, "nx": 3,
          "notimp": 4, "refused": 5}


class Query:
    """One query as the responder saw it."""

    __slots__ = ("transport", "src", "id", "flags", "qdcount", "qname",
                 "qname_wire", "qtype", "qclass", "wire", "opt", "time", "check",
                 "proxy")

    def __repr__(self):
        return "<Query %s id=%d %s %s/%s len=%d>" % (
            self.transport, self.id, self.qname, self.qtype, self.qclass, len(self.wire))


def parse_question(wire):
    """Parse header, first question and a trailing OPT (if it directly
    follows the question).  Returns a Query or None if unparseable."""
    if len(wire) < 12:
        return None
    q = Query()
    q.wire = bytes(wire)
    q.id, q.flags, q.qdcount, an, ns, ar = struct.unpack("!HHHHHH", wire[:12])
    q.qname = None
    q.qname_wire = None
    q.qtype = q.qclass = None
    q.opt = None
    if q.qdcount == 0:
        return q
    pos = 12
    labels = []
    while True:
        if pos >= len(wire):
            return q
        ln = wire[pos]
        if ln == 0:
            pos += 1
            break
        if ln & 0xC0:
            return q            # no compression expected in the question
        if pos + 1 + ln > len(wire):
            return q
        labels.append(bytes(wire[pos + 1:pos + 1 + ln]))
        pos += 1 + ln
    if pos + 4 > len(wire):
        return q
    q.qname_wire = bytes(wire[12:pos])
    q.qname = ".".join(l.decode("latin-1") for l in labels) + "."
    q.qtype, q.qclass = struct.unpack("!HH", wire[pos:pos + 4])
    pos += 4
    # OPT immediately after the question (the common case for queries)
    if q.qdcount == 1 and an == 0 and ns == 0 and ar >= 1 and pos + 11 <= len(wire):
        if wire[pos] == 0 and struct.unpack("!H", wire[pos + 1:pos + 3])[0] == 41:
            payload, ttl, rdlen = struct.unpack("!HIH", wire[pos + 3:pos + 11])
            rdata = bytes(wire[pos + 11:pos + 11 + rdlen])
            opts = []
            p = 0
            while p + 4 <= len(rdata):
                code, olen = struct.unpack("!HH", rdata[p:p + 4])
                opts.append((code, rdata[p + 4:p + 4 + olen]))
                p += 4 + olen
            q.opt = {"payload": payload, "ttl": ttl, "do": bool(ttl & 0x8000),
                     "options": opts, "rdata": rdata}
    return q


PROXY_V2_SIG = b"\r\n\r\n\x00\r\nQUIT\n"


def parse_proxy_v2(data):
    """Parse a PROXY protocol v2 header at the start of @data.
    Returns (header dict, its length), (None, 0) if @data is too short to
    tell yet, or raises ValueError if it is not a valid v2 header.
    The dict: version, command ("LOCAL"/"PROXY"), family (the raw octet, e.g.
    0x11 TCP/IPv4, 0x12 UDP/IPv4, 0x21 TCP/IPv6, 0x22 UDP/IPv6, 0x00),
    length (of the address block + TLVs), src/dst ((address, port) or None),
    tlvs (bytes after the addresses), raw (the whole header)."""
    if len(data) < 16:
        if not PROXY_V2_SIG.startswith(bytes(data[:12])):
            raise ValueError("no PROXY v2 signature")
        return None, 0
    if bytes(data[:12]) != PROXY_V2_SIG:
        raise ValueError("no PROXY v2 signature")
    vc, fam, ln = data[12], data[13], struct.unpack("!H", data[14:16])[0]
    if vc >> 4 != 2 or (vc & 0xF) not in (0, 1):
        raise ValueError("bad PROXY version/command 0x%02x" % vc)
    if len(data) < 16 + ln:
        return None, 0
    body = bytes(data[16:16 + ln])
    h = {"version": vc >> 4, "command": "PROXY" if vc & 0xF else "LOCAL", "family": fam,
         "length": ln, "src": None, "dst": None, "tlvs": body,
         "raw": bytes(data[:16 + ln])}
    if h["command"] == "PROXY":
        if fam >> 4 == 1:
            alen, af = 4, socket.AF_INET
        elif fam >> 4 == 2:
            alen, af = 16, socket.AF_INET6
        else:
            raise ValueError("unsupported PROXY family 0x%02x" % fam)
        if (fam & 0xF) not in (1, 2) or ln < 2 * alen + 4:
            raise ValueError("bad PROXY family/length 0x%02x/%d" % (fam, ln))
        sp, dp = struct.unpack("!HH", body[2 * alen:2 * alen + 4])
        h["src"] = (socket.inet_ntop(af, body[:alen]), sp)
        h["dst"] = (socket.inet_ntop(af, body[alen:2 * alen]), dp)
        h["tlvs"] = body[2 * alen + 4:]
    return h, 16 + ln


def _rr(rtype, rdata, rclass=1, ttl=300, name=b"\xc0\x0c"):
    return name + struct.pack("!HHIH", rtype, rclass, ttl, len(rdata)) + rdata


def _opt_rr(q):
    if q.opt is None:
        return b""
    return b"\x00" + struct.pack("!HHIH", 41, q.opt["payload"], q.opt["ttl"] & 0xFFFF8000,
                                 len(q.opt["rdata"])) + q.opt["rdata"]


def build_answer(q, rcode=0, answers=(), flags_set=0, flags_clear=0, qid=None,
                 question=None, with_question=True, with_opt=True):
    """Build an answer for query @q (raw bytes)."""
    flags = QR | AA | (q.flags & (RD | 0x7800)) | rcode
    flags = (flags | flags_set) & ~flags_clear & 0xFFFF
    qd = b""
    if with_question:
        qd = question if question is not None else q.qname_wire + struct.pack("!HH", q.qtype, q.qclass)
    opt = _opt_rr(q) if with_opt else b""
    hdr = struct.pack("!HHHHHH", q.id if qid is None else qid, flags,
                      1 if with_question else 0, len(answers) if with_question else 0,
                      0, 1 if opt else 0)
    return hdr + qd + (b"".join(answers) if with_question else b"") + opt


def _with_ecs_scope(q, scope):
    """A copy of query @q whose OPT's ECS options carry scope @scope (what
    build_answer echoes)."""
    if q.opt is None:
        return q
    c = Query()
    for k in Query.__slots__:
        setattr(c, k, getattr(q, k, None))
    rdata = b""
    for code, data in q.opt["options"]:
        if code == 8 and len(data) >= 4:
            data = data[:3] + bytes([scope & 0xFF]) + data[4:]
        rdata += struct.pack("!HH", code, len(data)) + data
    c.opt = dict(q.opt, rdata=rdata)
    return c


def _normal_records(q, addr=REAL_ADDR, ttl=300):
    if q.qtype == 1:
        return [_rr(1, addr, ttl=ttl)]
    if q.qtype == 28:
        return [_rr(28, REAL_AAAA, ttl=ttl)]
    if q.qtype == 16:
        return [_rr(16, b"\x05hello", ttl=ttl)]
    if q.qtype == 15:
        return [_rr(15, b"\x00\x0a\x04mail\x07example\x00", ttl=ttl)]
    return []


def _soa_rr(ttl, minimum):
    """A SOA for the question name (owner: a pointer to it)."""
    rdata = (b"\x02ns\x07example\x00" + b"\x0ahostmaster\x07example\x00"
             + struct.pack("!IIIII", 2024010101, 3600, 600, 86400, minimum))
    return _rr(6, rdata, ttl=ttl)


def _txt_fill(q, total):
    """TXT records so that the whole answer is exactly @total bytes."""
    base = len(build_answer(q))
    remaining = total - base
    recs = []
    i = 0
    while remaining - 268 >= 13 or remaining == 268:
        recs.append(_rr(16, b"\xff" + (b"%06d" % i) + b"x" * 249))   # 268 bytes, distinct
        remaining -= 268
        i += 1
    if remaining > 0:
        # one RR of 12 bytes overhead + rdata of `remaining - 12` bytes
        rdlen = remaining - 12
        if rdlen < 1:
            raise ValueError("cannot build an answer of exactly %d bytes" % total)
        rdata = b""
        while rdlen > 0:
            chunk = min(rdlen, 256)
            rdata += bytes([chunk - 1]) + b"y" * (chunk - 1)
            rdlen -= chunk
        recs.append(_rr(16, rdata))
    out = build_answer(q, answers=recs)
    assert len(out) == total, (len(out), total)
    return out


def _xfr_messages(q, n):
    """A zone transfer of @n messages for query @q: SOA, A records, SOA."""
    soa = _soa_rr(3600, 300)
    msgs = []
    for i in range(max(1, n)):
        recs = [_rr(1, bytes([192, 0, 2, 10 + i]))]
        if i == 0:
            recs.insert(0, soa)
        if i == max(1, n) - 1:
            recs.append(soa)
        ans = build_answer(q, answers=recs, with_opt=False)
        msgs.append(ans)
    return msgs


class _TcpConn:
    def __init__(self, sock, peer):
        self.sock = sock
        self.peer = peer
        self.rbuf = b""
        self.wbuf = b""
        self.closed = False
        self.proxy = None           # the PROXY v2 header (proxy_protocol=True)


class Responder:
    """Test backend. Use as a context manager or call start()/stop()."""

    def __init__(self, host="127.0.0.1", late_ms=1500, udp=True, tcp=True, port=0,
                 proxy_protocol=False):
        self.host = host
        self.proxy_protocol = proxy_protocol
        self.tcp_proxy_headers = []     # (peer, header) per TCP connection (proxy_protocol)
        self.proxy_errors = []          # (transport, peer, reason, data)
        self.fixed_port = port
        self.check_names = {"a.root-servers.net."}
        self.check_mode = "answer"
        self.answer_mode = "normal"     # set_answer_mode(): non-check queries
        self.late_ms = late_ms
        self.family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.port = None
        self._lock = threading.Lock()
        self._queries = []
        self._sent = []                 # (time, transport, label, bytes)
        self._timers = []
        self._seq = itertools.count()
        self._stop = False
        self._conns = {}
        self.tcp_accepted = 0
        self._want_udp = udp
        self._want_tcp = tcp
        self.behaviours = {}            # label -> callable(q, transport) -> [(delay_s, bytes|None)]
        self._seq_counts = {}           # qname (lowercase) -> queries seen (label seq-<n>)
        self.udp = self.tcp = self.spoof = None
        self._thread = None

    # ---- lifecycle -------------------------------------------------------
    def start(self):
        for _ in range(50):
            udp = socket.socket(self.family, socket.SOCK_DGRAM)
            try:
                udp.bind((self.host, self.fixed_port))
            except OSError:
                udp.close()
                if not self.fixed_port:
                    raise
                time.sleep(0.1)         # a fixed port: wait for it to be free
                continue
            port = udp.getsockname()[1]
            tcp = socket.socket(self.family, socket.SOCK_STREAM)
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                tcp.bind((self.host, port))
            except OSError:
                udp.close()
                tcp.close()
                if self.fixed_port:
                    time.sleep(0.1)
                continue
            break
        else:
            raise RuntimeError("no free port for the responder")
        tcp.listen(128)
        udp.setblocking(False)
        tcp.setblocking(False)
        udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.udp, self.tcp, self.port = udp, tcp, port
        self.spoof = socket.socket(self.family, socket.SOCK_DGRAM)
        self.spoof.bind((self.host, 0))
        self.sel = selectors.DefaultSelector()
        if self._want_udp:
            self.sel.register(udp, selectors.EVENT_READ, ("udp", None))
        if self._want_tcp:
            self.sel.register(tcp, selectors.EVENT_READ, ("accept", None))
        self._thread = threading.Thread(target=self._run, name="responder", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._stop = True
        if self._thread:
            self._thread.join(5)
        for c in list(self._conns.values()):
            c.sock.close()
        for s in (self.udp, self.tcp, self.spoof):
            if s:
                s.close()

    def restart(self):
        """Serve again on the same port after stop(); the records are kept."""
        self.fixed_port = self.port
        self._stop = False
        self._conns = {}
        self._timers = []
        return self.start()

    def __enter__(self):
        return self.start()

    def __exit__(self, *a):
        self.stop()

    @property
    def address(self):
        if self.family == socket.AF_INET6:
            return "[%s]:%d" % (self.host, self.port)
        return "%s:%d" % (self.host, self.port)

    # ---- inspection ------------------------------------------------------
    @property
    def queries(self):
        with self._lock:
            return list(self._queries)

    def queries_for(self, prefix):
        """Queries whose qname starts with @prefix (case-insensitive)."""
        p = prefix.lower()
        return [q for q in self.queries if q.qname and q.qname.lower().startswith(p)]

    def client_queries(self):
        """Queries other than health checks (qnames in check_names, by
        default a.root-servers.net.)."""
        names = self.check_names | {"a.root-servers.net."}
        return [q for q in self.queries
                if not (q.qname and q.qname.lower() in names)]

    def check_queries(self, mode=None, transport=None):
        """Health-check queries seen (qname in check_names); only those
        handled with @mode / received over @transport if given."""
        return [q for q in self.queries
                if q.check is not None and (mode is None or q.check == mode)
                and (transport is None or q.transport == transport)]

    def set_check_mode(self, mode, names=None):
        """How to answer health-check queries from now on (see the module
        docstring); @names replaces check_names."""
        if mode not in ("answer", "drop") and mode not in RCODES:
            raise ValueError("unknown check mode %r" % mode)
        with self._lock:
            if names is not None:
                self.check_names = {n.lower() if n.endswith(".") else n.lower() + "."
                                    for n in names}
            self.check_mode = mode

    def set_answer_mode(self, mode):
        """How to answer queries other than health checks from now on:
        "normal" (the labels decide), "answer", "drop" or an rcode name."""
        if mode not in ("normal", "answer", "drop") and mode not in RCODES:
            raise ValueError("unknown answer mode %r" % mode)
        with self._lock:
            self.answer_mode = mode

    def sent(self, label=None):
        with self._lock:
            return [s for s in self._sent if label is None or s[2] == label]

    def clear(self):
        with self._lock:
            self._queries.clear()
            self._sent.clear()

    def wait_queries(self, prefix, n=1, timeout=5.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            qs = self.queries_for(prefix)
            if len(qs) >= n:
                return qs
            time.sleep(0.02)
        return self.queries_for(prefix)

    # ---- behaviour -------------------------------------------------------
    def plan(self, q, transport):
        """[(delay_s, payload or None (=close), kind)] for query @q."""
        if q.qname is None:
            if q.qdcount == 0 and len(q.wire) >= 12:
                hdr = struct.pack("!HHHHHH", q.id, QR | 1, 0, 0, 0, 0)   # FORMERR
                return [(0, hdr, "formerr")]
            return []
        mode = getattr(q, "check", None)    # decided in _record()
        if mode is not None:
            if mode == "drop":
                return []
            if mode != "answer":
                return [(0, build_answer(q, rcode=RCODES[mode]), "check-" + mode)]
        amode = self.answer_mode if mode is None else "normal"
        if amode == "drop":
            return []
        if amode == "answer":
            return [(0, build_answer(q, answers=_normal_records(q)), "normal")]
        if amode != "normal":
            return [(0, build_answer(q, rcode=RCODES[amode]), amode)]
        label = q.qname.split(".")[0].lower()
        if label in self.behaviours:
            return self.behaviours[label](q, transport)
        normal = build_answer(q, answers=_normal_records(q))
        spoof_recs = [_rr(1, SPOOF_ADDR)]
        m = re.fullmatch(r"(?:delay|ooo)-(\d+)", label)
        if m:
            return [(int(m.group(1)) / 1000.0, normal, "normal")]
        if label == "late":
            return [(self.late_ms / 1000.0, normal, "late")]
        if label == "drop":
            return []
        if label == "close":
            return [(0, None, "close")] if transport == "tcp" else []
        if label in ("nx", "servfail", "refused", "formerr", "notimp"):
            return [(0, build_answer(q, rcode=RCODES[label]), label)]
        if label == "wrongid":
            return [(0, build_answer(q, answers=spoof_recs, qid=q.id ^ 0x5A5A), "spoof"),
                    (0.05, normal, "normal")]
        if label == "wrongname":
            other = b"\x07spoofed" + q.qname_wire
            return [(0, build_answer(q, answers=spoof_recs,
                                     question=other + struct.pack("!HH", q.qtype, q.qclass)),
                     "spoof"), (0.05, normal, "normal")]
        if label == "wrongtype":
            qt = 28 if q.qtype != 28 else 1
            return [(0, build_answer(q, answers=spoof_recs,
                                     question=q.qname_wire + struct.pack("!HH", qt, q.qclass)),
                     "spoof"), (0.05, normal, "normal")]
        if label == "wrongclass":
            qc = 3 if q.qclass != 3 else 1
            return [(0, build_answer(q, answers=spoof_recs,
                                     question=q.qname_wire + struct.pack("!HH", q.qtype, qc)),
                     "spoof"), (0.05, normal, "normal")]
        if label == "qr0":
            return [(0, build_answer(q, answers=spoof_recs, flags_clear=QR), "spoof"),
                    (0.05, normal, "normal")]
        if label == "short":
            return [(0, normal[:8], "spoof"), (0.05, normal, "normal")]
        if label == "otherport":
            if transport != "udp":
                return [(0, normal, "normal")]
            return [(0, build_answer(q, answers=spoof_recs), "spoof-otherport"),
                    (0.05, normal, "normal")]
        m = re.fullmatch(r"empty-(noerror|nxdomain|refused|servfail)", label)
        if m:
            rc = RCODES[m.group(1)]
            empty = build_answer(q, rcode=rc, with_question=False, with_opt=False)
            if m.group(1) in ("noerror", "nxdomain"):
                return [(0, empty, "empty"), (0.1, normal, "normal")]
            return [(0, empty, "empty")]
        if label == "tc":
            return [(0, build_answer(q, flags_set=TC), "tc")]
        m = re.fullmatch(r"big(?:-(\d+))?", label)
        if m:
            if transport == "udp":
                return [(0, build_answer(q, flags_set=TC), "tc")]
            size = int(m.group(1)) if m.group(1) else 60000
            return [(0, _txt_fill(q, size), "big")]
        m = re.fullmatch(r"ttl-(\d+)", label)
        if m:
            return [(0, build_answer(q, answers=_normal_records(q, ttl=int(m.group(1)))),
                     "normal")]
        m = re.fullmatch(r"seq-(\d+)", label)
        if m:
            with self._lock:
                k = self._seq_counts.get(q.qname.lower(), 0) + 1
                self._seq_counts[q.qname.lower()] = k
            recs = [_rr(1, bytes([198, 51, 100, k & 0xFF]), ttl=int(m.group(1)))] \
                if q.qtype == 1 else []
            return [(0, build_answer(q, answers=recs), "normal")]
        m = re.fullmatch(r"(nxdomain|nodata)-(\d+)(?:-(\d+))?", label)
        if m:
            ttl = int(m.group(2))
            minimum = int(m.group(3)) if m.group(3) else ttl
            rc = RCODES["nxdomain"] if m.group(1) == "nxdomain" else 0
            ans = build_answer(q, rcode=rc)
            # one authority record: bump NSCOUNT, put the SOA before the OPT
            opt = _opt_rr(q)
            body = ans[:len(ans) - len(opt)] if opt else ans
            ans = body[:8] + struct.pack("!H", 1) + body[10:] + _soa_rr(ttl, minimum) + opt
            return [(0, ans, m.group(1))]
        if label == "lowercase":
            lower = q.qname_wire.lower() + struct.pack("!HH", q.qtype, q.qclass)
            return [(0, build_answer(q, answers=_normal_records(q), question=lower), "normal")]

        if label == "trailing":
            return [(0, normal + b"\xde\xad\xbe\xef", "normal")]
        if label in ("withopt", "noopt"):
            ans = build_answer(q, answers=_normal_records(q), with_opt=False)
            if label == "withopt":
                rdata = struct.pack("!HH", 65002, 3) + b"opt"
                ans = (ans[:10] + struct.pack("!H", 1) + ans[12:] + b"\x00"
                       + struct.pack("!HHIH", 41, 4096, 0x8000, len(rdata)) + rdata)
            return [(0, ans, "normal")]
        m = re.fullmatch(r"axfr-(\d+)", label)
        if m:
            if transport == "udp":
                return [(0, build_answer(q, flags_set=TC), "tc")]
            return [(0.01 * i, msg, "xfr") for i, msg in enumerate(_xfr_messages(q, int(m.group(1))))]
        m = re.fullmatch(r"huge-(\d+)", label)
        if m:
            return [(0, _txt_fill(q, int(m.group(1))), "big")]
        m = re.fullmatch(r"size-(\d+)", label)
        if m:
            return [(0, _txt_fill(q, int(m.group(1))), "big")]
        m = re.fullmatch(r"ecsscope-(\d+)", label)
        if m:
            return [(0, build_answer(_with_ecs_scope(q, int(m.group(1))),
                                     answers=_normal_records(q)), "normal")]
        if label == "tcdata":
            return [(0, build_answer(q, answers=_normal_records(q), flags_set=TC), "tc")]
        if label == "twice":
            second = build_answer(q, answers=[_rr(1, SECOND_ADDR)] if q.qtype == 1 else [])
            return [(0, normal, "normal"), (0.05, second, "second")]
        return [(0, normal, "normal")]

    # ---- event loop ------------------------------------------------------
    def _at(self, delay, fn):
        heapq.heappush(self._timers, (time.monotonic() + delay, next(self._seq), fn))

    def _run(self):
        while not self._stop:
            timeout = 0.05
            if self._timers:
                timeout = max(0.0, min(timeout, self._timers[0][0] - time.monotonic()))
            for key, ev in self.sel.select(timeout):
                kind, conn = key.data
                try:
                    if kind == "udp":
                        self._on_udp()
                    elif kind == "accept":
                        self._on_accept()
                    elif kind == "tcp":
                        if ev & selectors.EVENT_READ:
                            self._on_tcp_read(conn)
                        if ev & selectors.EVENT_WRITE and not conn.closed:
                            self._flush(conn)
                except OSError:
                    if conn is not None:
                        self._close(conn)
            now = time.monotonic()
            while self._timers and self._timers[0][0] <= now:
                _, _, fn = heapq.heappop(self._timers)
                try:
                    fn()
                except OSError:
                    pass

    def _record(self, q, transport, src, proxy=None):
        q.transport = transport
        q.src = src
        q.proxy = proxy
        q.time = time.monotonic()
        with self._lock:
            # a health-check query: the check mode in force when it arrived
            q.check = (self.check_mode if q.qname and q.qname.lower() in self.check_names
                       else None)
            self._queries.append(q)

    def _on_udp(self):
        for _ in range(64):
            try:
                data, src = self.udp.recvfrom(65535)
            except BlockingIOError:
                return
            proxy = None
            if self.proxy_protocol:
                try:
                    proxy, hlen = parse_proxy_v2(data)
                    if proxy is None:
                        raise ValueError("truncated PROXY v2 header")
                except ValueError as e:
                    with self._lock:
                        self.proxy_errors.append(("udp", src, str(e), data))
                    self._record_raw(parse_question(data), data, "udp", src)
                    continue            # a PROXY backend drops it
                data = data[hlen:]
            q = parse_question(data)
            if q is None:
                q = Query()
                q.wire, q.id, q.flags, q.qdcount = data, None, None, None
                q.qname = q.qname_wire = q.qtype = q.qclass = q.opt = None
                self._record(q, "udp", src, proxy)
                continue
            self._record(q, "udp", src, proxy)
            for delay, payload, kind in self.plan(q, "udp"):
                if payload is None:
                    continue
                sock = self.spoof if kind == "spoof-otherport" else self.udp
                self._at(delay, self._udp_sender(sock, payload, src, kind))

    def _record_raw(self, q, data, transport, src):
        """Record a message that had no valid PROXY header (never answered)."""
        if q is None:
            q = Query()
            q.wire, q.id, q.flags, q.qdcount = bytes(data), None, None, None
            q.qname = q.qname_wire = q.qtype = q.qclass = q.opt = None
        self._record(q, transport, src, None)
        q.check = None

    def _udp_sender(self, sock, payload, dst, kind):
        def send():
            if len(payload) > 65507:
                return
            sock.sendto(payload, dst)
            with self._lock:
                self._sent.append((time.monotonic(), "udp", kind, payload))
        return send

    def _on_accept(self):
        while True:
            try:
                s, peer = self.tcp.accept()
            except BlockingIOError:
                return
            s.setblocking(False)
            c = _TcpConn(s, peer)
            self._conns[s.fileno()] = c
            self.tcp_accepted += 1
            self.sel.register(s, selectors.EVENT_READ, ("tcp", c))

    def _on_tcp_read(self, c):
        try:
            data = c.sock.recv(131072)
        except BlockingIOError:
            return
        if not data:
            self._close(c)
            return
        c.rbuf += data
        if self.proxy_protocol and c.proxy is None:
            try:
                h, hlen = parse_proxy_v2(c.rbuf)
            except ValueError as e:
                with self._lock:
                    self.proxy_errors.append(("tcp", c.peer, str(e), c.rbuf))
                self._close(c)
                return
            if h is None:
                return
            c.proxy, c.rbuf = h, c.rbuf[hlen:]
            with self._lock:
                self.tcp_proxy_headers.append((c.peer, h))
        while len(c.rbuf) >= 2:
            ln = struct.unpack("!H", c.rbuf[:2])[0]
            if len(c.rbuf) < 2 + ln:
                break
            msg, c.rbuf = c.rbuf[2:2 + ln], c.rbuf[2 + ln:]
            q = parse_question(msg)
            if q is None:
                self._close(c)
                return
            self._record(q, "tcp", c.peer, c.proxy)
            for delay, payload, kind in self.plan(q, "tcp"):
                self._at(delay, self._tcp_sender(c, payload, kind))

    def _tcp_sender(self, c, payload, kind):
        def send():
            if c.closed:
                return
            if payload is None:
                self._close(c)
                return
            c.wbuf += struct.pack("!H", len(payload)) + payload
            with self._lock:
                self._sent.append((time.monotonic(), "tcp", kind, payload))
            self._flush(c)
        return send

    def _flush(self, c):
        try:
            while c.wbuf:
                n = c.sock.send(c.wbuf)
                c.wbuf = c.wbuf[n:]
        except BlockingIOError:
            pass
        except OSError:
            self._close(c)
            return
        ev = selectors.EVENT_READ | (selectors.EVENT_WRITE if c.wbuf else 0)
        self.sel.modify(c.sock, ev, ("tcp", c))

    def _close(self, c):
        if c.closed:
            return
        c.closed = True
        try:
            self.sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        self._conns.pop(c.sock.fileno(), None)
        c.sock.close()
