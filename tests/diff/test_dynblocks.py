"""Dynamic blocks, dnsdist 1.7.3 next to dnslb: the same rules, the same
traffic sent to both at the same moment, the decisions compared.

Each client is a source address of its own (127.0.0.x). A burst is sent to
both daemons query by query (dnsdist, then dnslb), then both are left to run
their once-a-second maintenance() and `showDynBlocks()` is compared. The two
daemons' maintenance runs are not in phase (each runs once a second from its
own start), so a decision is compared once both have had a round after the
burst, and once more a round later if they differ then (the same round, give
or take the one-second tick); nothing asserts how fast a daemon is.

What is normalized, and why: the `Seconds` column of `showDynBlocks()` and
the `seconds` of `/jsonstat?command=dynblocklist` (whole seconds left until
the block's end, which each daemon sets at the round that last saw the
client over the rate: the rounds are out of phase, and the whole-second
truncation of both the end and the time of the reading moves it by one).
They must be within 2 of each other; every other field is compared exactly.
"""

import re
import socket
import time

from diffharness import build_query, known  # noqa: F401

ROUND = 1.0     # dnsdist's maintenance(): once a second


def bind(src, impl):
    """A UDP socket bound to @src: an address, or (address, port) where
    dnsdist's client uses port and dnslb's port + 1 (the same port range)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if isinstance(src, tuple):
        s.bind((src[0], src[1] + (impl == "dnslb")))
    else:
        s.bind((src, 0))
    return s


def burst(p, plan, name="www.example.test.", qtype=1, drain=0.4):
    """Send @plan ([(src, count[, name])]) to both daemons at the same moment,
    each query to dnsdist then to dnslb. Returns {impl: {src: answers}}."""
    socks = {}
    for impl, side in (("dnsdist", p.theirs), ("dnslb", p.ours)):
        for entry in plan:
            s = bind(entry[0], impl)
            s.setblocking(False)
            socks[(impl, entry[0])] = (s, side.port)
    qid = 0
    for entry in plan:
        src, count = entry[0], entry[1]
        qn = entry[2] if len(entry) > 2 else name
        for i in range(count):
            qid += 1
            n = qn(i) if callable(qn) else qn
            wire = build_query(n, qtype=qtype, qid=qid & 0xffff)
            for impl in ("dnsdist", "dnslb"):
                s, port = socks[(impl, src)]
                s.sendto(wire, ("127.0.0.1", port))
    got = {"dnsdist": {}, "dnslb": {}}
    end = time.monotonic() + drain
    while time.monotonic() < end:
        for (impl, src), (s, _) in socks.items():
            try:
                while True:
                    s.recv(65535)
                    got[impl][src] = got[impl].get(src, 0) + 1
            except BlockingIOError:
                pass
        time.sleep(0.01)
    for s, _ in socks.values():
        s.close()
    return got


def ask(side, src, name="www.example.test.", qtype=1, timeout=0.5):
    """One query from @src (see bind) to one daemon: the answer (bytes) or None."""
    s = bind(src, side.impl)
    try:
        s.settimeout(timeout)
        s.sendto(build_query(name, qtype=qtype, qid=4242), ("127.0.0.1", side.port))
        try:
            return s.recv(65535)
        except (socket.timeout, ConnectionRefusedError):
            return None
    finally:
        s.close()


def same_answer(p, src, name="www.example.test.", qtype=1):
    """Ask both from @src: the same answer (ID aside) or both silent.
    Returns dnsdist's."""
    a, b = ask(p.theirs, src, name, qtype), ask(p.ours, src, name, qtype)
    strip = lambda w: None if w is None else w[2:]  # noqa: E731
    assert strip(a) == strip(b), "answers to %s differ\n dnsdist: %s\n dnslb:   %s" % (
        src, a and a.hex(), b and b.hex())
    return a


ROW = re.compile(r"^(\S+\s+)(\d+)(\s+.*)$")


def rows(text):
    """showDynBlocks() as (header, {what: (seconds, rest of the line)})."""
    lines = text.rstrip("\n").split("\n")
    # (before it: what the console client printed running the config)
    lines = lines[[i for i, l in enumerate(lines) if l.startswith("What ")][0]:]
    out = {}
    for line in lines[1:]:
        m = ROW.match(line)
        assert m, "unexpected showDynBlocks() line %r" % line
        out[m.group(1).strip()] = (int(m.group(2)), m.group(1) + "%S%" + m.group(3))
    return lines[0], out


def shown(p):
    """Both showDynBlocks(), compared: every line equal but Seconds, which
    must be within 2 (see the module docstring). Returns False (no assert)
    when they differ, else dnsdist's {what: line with %S%}."""
    ha, a = rows(p.theirs.console("showDynBlocks()"))
    hb, b = rows(p.ours.console("showDynBlocks()"))
    assert ha == hb, "showDynBlocks() headers differ: %r %r" % (ha, hb)
    if set(a) != set(b):
        return False, a, b
    for k in a:
        if a[k][1] != b[k][1] or abs(a[k][0] - b[k][0]) > 2:
            return False, a, b
    return True, a, b


def decided(p, wait=1.3):
    """The blocks both daemons show once each has had a maintenance round
    after the traffic (a round later if they differ: the ticks are not in
    phase). Returns {what: line with the Seconds column as %S%}."""
    time.sleep(wait)
    ok, a, b = shown(p)
    if not ok:
        time.sleep(ROUND)
        ok, a, b = shown(p)
    assert ok, "showDynBlocks() differs\n dnsdist: %r\n dnslb:   %r" % (a, b)
    return {k: v[1] for k, v in a.items()}


def norm_json(doc):
    """dynblocklist with `seconds` replaced by a marker (checked apart)."""
    out = {}
    for k, v in doc.items():
        v = dict(v)
        v["seconds"] = "S"
        out[k] = v
    return out


def same_dynblocklist(p):
    (sa, a), (sb, b) = p.theirs.web("/jsonstat?command=dynblocklist"), \
        p.ours.web("/jsonstat?command=dynblocklist")
    import json
    ja, jb = json.loads(a), json.loads(b)
    assert sa == sb == 200
    assert set(ja) == set(jb), (ja, jb)
    for k in ja:
        assert abs(ja[k]["seconds"] - jb[k]["seconds"]) <= 2, (k, ja[k], jb[k])
    assert norm_json(ja) == norm_json(jb), (ja, jb)
    return ja


DYN_STATS = ("dyn-blocked", "dyn-block-nmg-size", "queries", "responses", "self-answered",
             "rule-refused", "rule-nxdomain", "frontend-noerror", "frontend-nxdomain",
             "frontend-servfail", "acl-drops", "rule-drop")


def same_counters(p):
    """The counters dynamic blocks move, from both dumpStats() (the whole
    list is the counters area's: compared there)."""
    a = p.parse_dumpstats(p.theirs.console("dumpStats()"))
    b = p.parse_dumpstats(p.ours.console("dumpStats()"))
    a = {k: a.get(k) for k in DYN_STATS}
    b = {k: b.get(k) for k in DYN_STATS}
    assert a == b, "counters differ\n dnsdist: %r\n dnslb:   %r" % (a, b)
    return a


GROUP = """newServer({address="@B0@"})
local dbr = dynBlockRulesGroup()
%s
function maintenance() dbr:apply() end
"""


def group(rules):
    return GROUP % rules


# ---- query rate ---------------------------------------------------------------


def test_query_rate_boundary(pair):
    """setQueryRate(10, 2): over 20 queries in the last 2 s blocks, 20 does
    not (dnsdist: count > rate * seconds); blocked clients are dropped."""
    p = pair(group('dbr:setQueryRate(10, 2, "Exceeded query rate", 60)'))
    time.sleep(0.5)
    burst(p, [("127.0.0.2", 20), ("127.0.0.3", 21), ("127.0.0.4", 60)])
    blocks = decided(p)
    assert sorted(blocks) == ["127.0.0.3/32", "127.0.0.4/32"]
    assert same_answer(p, "127.0.0.3") is None
    assert same_answer(p, "127.0.0.2") is not None
    burst(p, [("127.0.0.4", 5)])
    decided(p, wait=0.2)  # the Blocks counts (6 each: 5 + the one above)
    same_counters(p)


def test_query_rate_just_after_start(pair):
    """Queries sent before the first maintenance round count (dnsdist's
    rings hold them): the reported bug."""
    p = pair(group('dbr:setQueryRate(10, 2, "Exceeded query rate", 60)'))
    burst(p, [("127.0.0.2", 21), ("127.0.0.3", 20)])
    assert sorted(decided(p)) == ["127.0.0.2/32"]


def test_exceed_qrate_legacy(pair):
    """addDynBlocks(exceedQRate(10, 2), ...) from maintenance(), the same
    boundary, from the start."""
    p = pair('newServer({address="@B0@"})\n'
             'function maintenance() addDynBlocks(exceedQRate(10, 2), '
             '"Exceeded query rate", 60) end\n')
    burst(p, [("127.0.0.2", 20), ("127.0.0.3", 21)])
    assert sorted(decided(p)) == ["127.0.0.3/32"]


def test_query_rate_spread_over_two_seconds(pair):
    """11 queries, then 10 more a second later: 21 within 2 s blocks in
    both; 10 and 10 do not."""
    p = pair(group('dbr:setQueryRate(10, 2, "Exceeded query rate", 60)'))
    time.sleep(0.5)
    burst(p, [("127.0.0.2", 11), ("127.0.0.3", 10)], drain=0.1)
    time.sleep(0.6)
    burst(p, [("127.0.0.2", 10), ("127.0.0.3", 10)], drain=0.1)
    assert sorted(decided(p)) == ["127.0.0.2/32"]


def test_block_lifted_in_the_same_round(pair):
    """A 3-second block ends in both within a round of each other: the last
    round that saw the client over the rate is the same, give or take the
    tick."""
    p = pair(group('dbr:setQueryRate(10, 1, "Exceeded query rate", 3)'))
    time.sleep(0.5)
    burst(p, [("127.0.0.2", 30)])
    assert sorted(decided(p)) == ["127.0.0.2/32"]
    ends = {}
    t0 = time.monotonic()
    while len(ends) < 2 and time.monotonic() - t0 < 10:
        for impl, side in (("dnsdist", p.theirs), ("dnslb", p.ours)):
            if impl not in ends and "127.0.0.2/32" not in side.console("showDynBlocks()"):
                ends[impl] = time.monotonic() - t0
        time.sleep(0.1)
    assert len(ends) == 2, ends
    assert abs(ends["dnsdist"] - ends["dnslb"]) <= ROUND + 0.5, ends
    assert same_answer(p, "127.0.0.2") is not None


# ---- exclusions, actions, warnings ------------------------------------------------


def test_exclude_range(pair):
    p = pair(group('dbr:setQueryRate(10, 2, "Exceeded query rate", 60)\n'
                   'dbr:excludeRange({"127.0.0.3/32", "127.0.1.0/24"})'))
    time.sleep(0.5)
    burst(p, [("127.0.0.2", 30), ("127.0.0.3", 30), ("127.0.1.7", 30)])
    assert sorted(decided(p)) == ["127.0.0.2/32"]
    assert same_answer(p, "127.0.0.3") is not None


def test_noop_action_and_refused(pair):
    """NoOp: listed ("Do nothing"), still answered; Refused: answered REFUSED."""
    p = pair(group('dbr:setQueryRate(10, 2, "noop", 60, DNSAction.NoOp)\n'
                   'dbr:excludeRange({"127.0.0.3/32"})\n'
                   'local d2 = dynBlockRulesGroup()\n'
                   'd2:setQueryRate(15, 2, "refused", 60, DNSAction.Refused)\n'
                   'd2:excludeRange({"127.0.0.2/32"})\n'
                   'local m = function() d2:apply() end'
                   ).replace("dbr:apply()", "dbr:apply() m()"))
    time.sleep(0.5)
    burst(p, [("127.0.0.2", 25), ("127.0.0.3", 35)])
    blocks = decided(p)
    assert sorted(blocks) == ["127.0.0.2/32", "127.0.0.3/32"]
    assert same_answer(p, "127.0.0.2") is not None
    ans = same_answer(p, "127.0.0.3")
    assert ans is not None and ans[3] & 0xf == 5
    decided(p, wait=0)  # the Blocks counts: NoOp counts none
    same_counters(p)


def test_warning_rate(pair):
    """setQueryRate(30, 2, ..., Drop, 10): over 20 queries a warning (listed,
    answered), over 60 the block."""
    p = pair(group('dbr:setQueryRate(30, 2, "Exceeded query rate", 60, '
                   'DNSAction.Drop, 10)'), web=True)
    time.sleep(0.5)
    burst(p, [("127.0.0.2", 20), ("127.0.0.3", 40), ("127.0.0.4", 70)])
    blocks = decided(p)
    assert sorted(blocks) == ["127.0.0.3/32", "127.0.0.4/32"]
    assert " true " in blocks["127.0.0.3/32"] and " false " in blocks["127.0.0.4/32"]
    assert same_answer(p, "127.0.0.3") is not None
    assert same_answer(p, "127.0.0.4") is None
    same_dynblocklist(p)
    same_counters(p)


def test_dynblocklist_json(pair):
    p = pair(group('dbr:setQueryRate(10, 2, "Exceeded query rate", 60, DNSAction.Nxdomain)\n'
                   'dbr:setRCodeRate(DNSRCode.NXDOMAIN, 2, 2, "Exceeded NXD rate", 120)'),
             web=True)
    time.sleep(0.5)
    burst(p, [("127.0.0.2", 25), ("127.0.0.3", 5, "nx.example.test.")])
    decided(p)
    burst(p, [("127.0.0.2", 3)])
    doc = same_dynblocklist(p)
    assert sorted(doc) == ["127.0.0.2/32", "127.0.0.3/32"]


# ---- rcode rate and ratio, response bytes -----------------------------------------


def test_rcode_rate(pair):
    """setRCodeRate(NXDOMAIN, 5, 2): 11 NXDOMAIN answers block, 10 do not."""
    p = pair(group('dbr:setRCodeRate(DNSRCode.NXDOMAIN, 5, 2, "Exceeded NXD rate", 60)'))
    time.sleep(0.5)
    nx = lambda i: "nx%d.example.test." % i  # noqa: E731
    burst(p, [("127.0.0.2", 10, lambda i: "nx.q%d.example.test." % i),
              ("127.0.0.3", 11, lambda i: "nx.q%d.example.test." % i),
              ("127.0.0.4", 30, nx)])
    # (nx%d: the responder answers by the first label: NOERROR)
    assert sorted(decided(p)) == ["127.0.0.3/32"]


def test_rcode_rate_ignores_cache_hits(pair):
    """1.7.3 puts no cache hit in the response ring: 20 queries for one
    NXDOMAIN name through a packet cache are one backend answer."""
    p = pair('newServer({address="@B0@"})\n'
             'pc = newPacketCache(100)\ngetPool(""):setCache(pc)\n'
             'local dbr = dynBlockRulesGroup()\n'
             'dbr:setRCodeRate(DNSRCode.NXDOMAIN, 2, 2, "Exceeded NXD rate", 60)\n'
             'function maintenance() dbr:apply() end\n')
    time.sleep(0.5)
    same_answer(p, "127.0.0.2", "nxdomain-300.cached.example.test.")
    burst(p, [("127.0.0.2", 20, "nxdomain-300.cached.example.test."),
              ("127.0.0.3", 6, lambda i: "nx.u%d.example.test." % i)])
    assert sorted(decided(p)) == ["127.0.0.3/32"]


def test_rcode_ratio(pair):
    """setRCodeRatio(SERVFAIL, 0.2, 2, ..., 10): 3 of 10 blocks; 3 of 9 (too
    few answers) and 4 of 20 (not over 0.2) do not."""
    p = pair(group('dbr:setRCodeRatio(DNSRCode.SERVFAIL, 0.2, 2, "Exceeded SF ratio", 60, 10)'))
    time.sleep(0.5)

    def mix(bad):
        return lambda i: ("servfail.q%d.example.test." % i) if i < bad else (
            "ok%d.example.test." % i)
    burst(p, [("127.0.0.2", 10, mix(3)), ("127.0.0.3", 9, mix(3)),
              ("127.0.0.4", 20, mix(4)), ("127.0.0.5", 20, mix(5))])
    assert sorted(decided(p)) == ["127.0.0.2/32", "127.0.0.5/32"]


def test_response_byte_rate(pair):
    """setResponseByteRate(500, 2): over 1000 bytes of backend answers in
    2 s blocks (here 30 answers of some 50 bytes; 5 of them do not)."""
    p = pair(group('dbr:setResponseByteRate(500, 2, "Exceeded resp BW rate", 60)'))
    time.sleep(0.5)
    burst(p, [("127.0.0.2", 5), ("127.0.0.3", 30)])
    assert sorted(decided(p)) == ["127.0.0.3/32"]


def test_rules_order_and_reasons(pair):
    """One client over several rules: the reason shown is the one dnsdist's
    order leaves (query rate first, its block ends the client's turn)."""
    p = pair(group('dbr:setRCodeRate(DNSRCode.NXDOMAIN, 1, 2, "nxd", 60)\n'
                   'dbr:setQueryRate(5, 2, "qps", 60)\n'
                   'dbr:setResponseByteRate(100, 2, "bytes", 60)'))
    time.sleep(0.5)
    nx = lambda i: "nx.r%d.example.test." % i  # noqa: E731
    burst(p, [("127.0.0.2", 15, nx), ("127.0.0.3", 8, nx)])
    assert sorted(decided(p)) == ["127.0.0.2/32", "127.0.0.3/32"]


# ---- masks ------------------------------------------------------------------------


def test_set_masks_prefix(pair):
    """setMasks(24, 128, 0): two clients of one /24, 12 queries each, are one
    client of 24 queries: 127.0.0.0/24 is blocked, for both of them."""
    p = pair(group('dbr:setQueryRate(10, 2, "Exceeded query rate", 60)\n'
                   'dbr:setMasks(24, 128, 0)'))
    time.sleep(0.5)
    burst(p, [("127.0.0.2", 12), ("127.0.0.3", 12), ("127.0.1.2", 12)])
    assert sorted(decided(p)) == ["127.0.0.0/24"]
    assert same_answer(p, "127.0.0.9") is None
    assert same_answer(p, "127.0.1.2") is not None


def free_pair(lo):
    """A port P of the range starting at @lo (16384 wide) with P and P + 1
    free on 127.0.0.2."""
    import random
    for _ in range(100):
        port = lo + random.randrange(100, 16000)
        try:
            for k in (0, 1):
                t = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                t.bind(("127.0.0.2", port + k))
                t.close()
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair")


def test_set_masks_port_range(pair):
    """setMasks(32, 128, 2): one address, four port ranges of 16384 ports
    (CGNAT); only the range over the rate is blocked, shown as
    address:first-port/bits."""
    p = pair(group('dbr:setQueryRate(10, 2, "Exceeded query rate", 60)\n'
                   'dbr:setMasks(32, 128, 2)'), web=True)
    time.sleep(0.5)
    r1, r2, r3 = (("127.0.0.2", free_pair(lo)) for lo in (16384, 32768, 49152))
    burst(p, [(r1, 15), (r2, 15), (r3, 25)])
    assert sorted(decided(p)) == ["127.0.0.2:49152/2"]
    same_dynblocklist(p)
    assert same_answer(p, r3) is None
    assert same_answer(p, r1) is not None
    decided(p, wait=0)
    same_counters(p)


def test_rcode_ratio_counts_udp_timeouts(pair):
    """A backend's UDP timeout is a response of the client's (dnsdist 1.7's
    ring: a NOERROR of 0 bytes): 3 SERVFAIL and 2 unanswered queries are 3
    of 5 answers (> 0.5, at least 4 of them) once the two time out."""
    p = pair(group('dbr:setRCodeRatio(DNSRCode.SERVFAIL, 0.5, 10, "Exceeded SF ratio", 60, 4)'))
    time.sleep(0.5)
    burst(p, [("127.0.0.2", 3, lambda i: "servfail.t%d.example.test." % i),
              ("127.0.0.2", 2, lambda i: "drop.t%d.example.test." % i),
              ("127.0.0.3", 3, lambda i: "servfail.u%d.example.test." % i)])
    assert decided(p, wait=0.3) == {}
    # (both time a UDP query out after 2 s, then a maintenance round sees it)
    assert sorted(decided(p, wait=3.5)) == ["127.0.0.2/32"]


def test_exceed_nxdomains_and_servfails_legacy(pair):
    """exceedNXDOMAINs() and exceedServFails() see the answers from before
    their first call (dnsdist's rings)."""
    p = pair('newServer({address="@B0@"})\n'
             'function maintenance()\n'
             '  addDynBlocks(exceedNXDOMAINs(2, 2), "Exceeded NXD rate", 60)\n'
             '  addDynBlocks(exceedServFails(2, 2), "Exceeded SF rate", 60, DNSAction.Refused)\n'
             'end\n')
    burst(p, [("127.0.0.2", 5, lambda i: "nx.l%d.example.test." % i),
              ("127.0.0.3", 5, lambda i: "servfail.l%d.example.test." % i),
              ("127.0.0.4", 4, lambda i: "nx.m%d.example.test." % i)])
    assert sorted(decided(p)) == ["127.0.0.2/32", "127.0.0.3/32"]


def test_set_masks_bad_arguments(workdir):
    """setMasks' checks: both refuse the same calls with the same words
    (each daemon frames the error its own way)."""
    from diffharness import check_config
    known("Errors in the configuration name the file and line")
    for args, msg in (
            ("33, 128, 0", "Trying to set an invalid IPv4 mask (33) to a Dynamic Block object"),
            ("32, 129, 0", "Trying to set an invalid IPv6 mask (129) to a Dynamic Block object"),
            ("32, 128, 17", "Trying to set an invalid port mask (17) to a Dynamic Block object"),
            ("24, 128, 2", "Setting a non-zero port mask for Dynamic Blocks while only "
                           "considering parts of IPv4 addresses does not make sense")):
        conf = ('local dbr = dynBlockRulesGroup()\n'
                'dbr:setMasks(%s)\n' % args)
        r = check_config(workdir, conf)
        assert r["dnsdist"][0] == 1 and r["dnsdist"][1].startswith(
            'Fatal Lua error: [string "chunk"]:2: Caught exception: %s\n' % msg), r["dnsdist"]
        assert r["dnslb"] == (1, "Error while parsing the configuration file 'dnsdist.conf': "
                              "dnsdist.conf:2: %s\n" % msg, ""), r["dnslb"]


def tcp_ask(side, src, name):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((src, 0))
        s.settimeout(2)
        s.connect(("127.0.0.1", side.port))
        q = build_query(name, qid=99)
        s.sendall(len(q).to_bytes(2, "big") + q)
        buf = b""
        while len(buf) < 2 or len(buf) < 2 + int.from_bytes(buf[:2], "big"):
            chunk = s.recv(65535)
            if not chunk:
                return None
            buf += chunk
        return buf[2:]
    except (socket.timeout, ConnectionError):
        return None
    finally:
        s.close()


def test_rcode_rate_over_tcp(pair):
    """TCP queries and their backends' answers count as UDP ones do."""
    p = pair(group('dbr:setRCodeRate(DNSRCode.NXDOMAIN, 5, 2, "Exceeded NXD rate", 60)'))
    time.sleep(0.5)
    for src, n in (("127.0.0.2", 11), ("127.0.0.3", 10)):
        for i in range(n):
            name = "nx.t%d.example.test." % i
            a, b = tcp_ask(p.theirs, src, name), tcp_ask(p.ours, src, name)
            assert a is not None and b is not None and a[2:] == b[2:]
    assert sorted(decided(p)) == ["127.0.0.2/32"]


def test_qtype_rate(pair):
    """setQTypeRate(ANY, 2, 2): 5 ANY queries block, 4 do not, A queries
    do not count."""
    p = pair(group('dbr:setQTypeRate(DNSQType.ANY, 2, 2, "Exceeded ANY rate", 60)'))
    time.sleep(0.5)
    burst(p, [("127.0.0.2", 5), ("127.0.0.3", 4)], qtype=255)
    burst(p, [("127.0.0.4", 30)])
    assert sorted(decided(p)) == ["127.0.0.2/32"]


def test_exceed_qtype_rate_legacy(pair):
    """exceedQTypeRate() sees its qtype from its first call on (dnsdist:
    whatever its rings hold); other traffic decides alike."""
    p = pair('newServer({address="@B0@"})\n'
             'function maintenance()\n'
             '  addDynBlocks(exceedQTypeRate(DNSQType.ANY, 2, 2), "Exceeded ANY rate", 60)\n'
             '  addDynBlocks(exceedRespByterate(200, 2), "Exceeded resp BW rate", 60)\n'
             'end\n')
    burst(p, [("127.0.0.2", 5)], qtype=255)
    burst(p, [("127.0.0.3", 30), ("127.0.0.4", 3)])
    time.sleep(1.3)
    a, b = rows(p.theirs.console("showDynBlocks()"))[1], rows(p.ours.console("showDynBlocks()"))[1]
    assert sorted(a) == ["127.0.0.2/32", "127.0.0.3/32"]
    known("Dynamic blocks: exceedQTypeRate measures from its first call")
    assert sorted(b) == ["127.0.0.3/32"]
    # from then on, alike
    burst(p, [("127.0.0.5", 5)], qtype=255)
    assert "127.0.0.5/32" in decided_pair(p)


def decided_pair(p, wait=1.3):
    """Both showDynBlocks() keys, asserted equal but for 127.0.0.2 (the
    documented difference above)."""
    time.sleep(wait)
    a = set(rows(p.theirs.console("showDynBlocks()"))[1]) - {"127.0.0.2/32"}
    b = set(rows(p.ours.console("showDynBlocks()"))[1]) - {"127.0.0.2/32"}
    if a != b:
        time.sleep(ROUND)
        a = set(rows(p.theirs.console("showDynBlocks()"))[1]) - {"127.0.0.2/32"}
        b = set(rows(p.ours.console("showDynBlocks()"))[1]) - {"127.0.0.2/32"}
    assert a == b, (a, b)
    return a


def test_no_warning_inside_a_block(pair):
    """A client over a warning rate inside a blocked /24 gets no warning of
    its own: dnsdist weighs the entry covering it (the /24's)."""
    p = pair('newServer({address="@B0@"})\n'
             'local net = dynBlockRulesGroup()\n'
             'net:setQueryRate(50, 2, "net", 60)\n'
             'net:setMasks(24, 128, 0)\n'
             'local one = dynBlockRulesGroup()\n'
             'one:setQueryRate(1000, 2, "one", 60, DNSAction.Drop, 5)\n'
             'function maintenance() net:apply() one:apply() end\n')
    time.sleep(0.5)
    burst(p, [("127.0.0.2", 120)])
    assert sorted(decided(p)) == ["127.0.0.0/24"]
    assert same_answer(p, "127.0.0.2") is None
    assert same_answer(p, "127.0.0.3") is None
    decided(p, wait=0)


def test_expired_entry_shadows_a_wider_block(pair):
    """dnsdist acts on the most specific entry only: once a client's own
    short block has expired (until it is purged), the /24 block around it
    does not apply to it."""
    p = pair('newServer({address="@B0@"})\n'
             'local one = dynBlockRulesGroup()\n'
             'one:setQueryRate(10, 1, "one", 2)\n'
             'local net = dynBlockRulesGroup()\n'
             'net:setQueryRate(10, 1, "net", 60)\n'
             'net:setMasks(24, 128, 0)\n'
             'function maintenance() one:apply() net:apply() end\n')
    time.sleep(0.5)
    burst(p, [("127.0.0.2", 30)])
    assert sorted(decided(p)) == ["127.0.0.0/24", "127.0.0.2/32"]
    time.sleep(3.5)
    assert sorted(decided(p, wait=0)) == ["127.0.0.0/24"]
    assert same_answer(p, "127.0.0.3") is None
    assert same_answer(p, "127.0.0.2") is not None
    decided(p, wait=0)


SMT = """newServer({address="@B0@"})
%s
local dbr = dynBlockRulesGroup()
dbr:setSuffixMatchRule(10, "Random subdomains", 60, DNSAction.Drop,
  function(node, self, children)
    if node.fullname == "victim.test." and children.nxdomains > 20 then return true end
    if node.fullname == "slow.test." and children.drops >= 3 then return true end
    return false
  end)
function maintenance() dbr:apply() end
"""


def test_suffix_match_rule(pair):
    """setSuffixMatchRule: the visitor sees the backends' answers of the
    window (a timeout as a drop); the name and everything under it is
    dropped for every client."""
    p = pair(SMT % "")
    time.sleep(0.5)
    burst(p, [("127.0.0.2", 21, lambda i: "nx.r%d.victim.test." % i),
              ("127.0.0.3", 3, lambda i: "drop.r%d.slow.test." % i)], drain=0.1)
    assert sorted(decided(p)) == ["victim.test."]
    assert sorted(decided(p, wait=3)) == ["slow.test.", "victim.test."]
    assert same_answer(p, "127.0.0.4", "www.victim.test.") is None
    assert same_answer(p, "127.0.0.4", "www.example.test.") is not None
    same_counters(p)


def test_suffix_match_rule_ignores_cache_hits(pair):
    """1.7.3: cache hits are not in the response ring, so not in the stat
    tree: 25 NXDOMAINs for one cached name are one answer."""
    p = pair(SMT % 'pc = newPacketCache(100)\ngetPool(""):setCache(pc)')
    time.sleep(0.5)
    same_answer(p, "127.0.0.2", "nxdomain-300.victim.test.")
    burst(p, [("127.0.0.2", 25, "nxdomain-300.victim.test.")])
    assert decided(p) == {}
    burst(p, [("127.0.0.2", 21, lambda i: "nxdomain-300.r%d.victim.test." % i)])
    assert sorted(decided(p)) == ["victim.test."]


TOPS = '''newServer{address="@B0@"}
addDynBlocks({[newCA("127.0.0.1")]=1, [newCA("127.0.0.3")]=1}, "nm reason", 300)
addDynBlockSMT({"example.test.", "other.test."}, "smt reason", 300)
addDynBlockSMT({"third.test."}, "another", 300)
'''

TOP_FAMILIES = ("dnsdist_dynblocks_nmg_top_offenders_hits_per_second",
                "dnsdist_dynblocks_smt_top_offenders_hits_per_second")


def top_lines(side):
    """The lines of the two top-offender families in /metrics, in order."""
    text = side.web("/metrics")[1].decode()
    return [line for line in text.splitlines()
            if any(f in line for f in TOP_FAMILIES)]


def paced(p, src, name, count):
    """@count queries from @src to both daemons, paced so that no socket
    buffer overflows (every one must reach the block)."""
    socks = [(bind(src, impl), side.port)
             for impl, side in (("dnsdist", p.theirs), ("dnslb", p.ours))]
    for i in range(count):
        wire = build_query(name, qid=i & 0xffff)
        for s, port in socks:
            s.sendto(wire, ("127.0.0.1", port))
        if i % 10 == 9:
            time.sleep(0.005)
    for s, _ in socks:
        s.close()


def test_top_offenders_metrics(pair):
    """dnsdist_dynblocks_{nmg,smt}_top_offenders_hits_per_second: HELP and
    TYPE lines only before the first generation (60 s after the start); then
    round(hits / 60) per block over the snapshots taken every 10 s. The
    hits are sent where both daemons' periods agree: the netmask ones in
    the middle of the minute, counted in full; the suffix ones in the middle
    of the minute (example.test.) and in its last 10 s (other.test.), of
    which dnsdist 1.7 counts only the last interval's: 0 and 3."""
    p = pair(TOPS, web=True)
    t0 = time.time()
    before = top_lines(p.theirs)
    assert [line.startswith("#") for line in before] == [True] * 4
    assert top_lines(p.ours) == before
    time.sleep(max(0, t0 + 25 - time.time()))
    paced(p, "127.0.0.1", "www.example.test.", 330)     # 5.5 -> 6
    paced(p, "127.0.0.2", "a.example.test.", 90)
    time.sleep(0.5)
    assert shown(p)[0]
    time.sleep(max(0, t0 + 54 - time.time()))
    paced(p, "127.0.0.2", "x.other.test.", 150)         # 2.5 -> 3
    time.sleep(0.5)
    assert shown(p)[0]
    time.sleep(max(0, t0 + 61 - time.time()))
    while True:
        a, b = top_lines(p.theirs), top_lines(p.ours)
        if (len(a) > 4 and len(b) > 4) or time.time() > t0 + 68:
            break
        time.sleep(0.5)
    assert a == [
        before[0], before[1],
        'dnsdist_dynblocks_nmg_top_offenders_hits_per_second'
        '{reason="nm reason",netmask="127.0.0.3/32"} 0',
        'dnsdist_dynblocks_nmg_top_offenders_hits_per_second'
        '{reason="nm reason",netmask="127.0.0.1/32"} 6',
        before[2], before[3],
        'dnsdist_dynblocks_smt_top_offenders_hits_per_second'
        '{reason="another",suffix="third.test."} 0',
        'dnsdist_dynblocks_smt_top_offenders_hits_per_second'
        '{reason="smt reason",suffix="example.test."} 0',
        'dnsdist_dynblocks_smt_top_offenders_hits_per_second'
        '{reason="smt reason",suffix="other.test."} 3',
    ]
    assert b == a
