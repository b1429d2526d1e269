#!/usr/bin/python3
"""Write the seed corpora of fuzz_cache, fuzz_l2, fuzz_ecs and fuzz_clear_types.

Each file: a control byte (fuzz_cache.c, fuzz_l2.c), the query's length (2
bytes, big endian), the query, then a backend's answer to it (cache), or that
answer as a second-level cache value for the query's key (l2, "v_*"), or the
answer again with the round-trip bit set (l2, "rt_*"); for ecs, a client's
query and a backend's answer to it as dnslb forwarded it, with an ECS option;
for clear_types, a byte of types to clear and an answer. The seeds cover what
answers look like: positive with compression, CNAME chains, negative with a
SOA, temporary failures, EDNS options in the query, TC, a question that is
not the query's, and one answer too big for a client without EDNS.

    /usr/bin/python3 tests/fuzz/make_corpus.py
"""
import os
import random
import struct

import dns.edns
import dns.flags
import dns.message
import dns.rcode
import dns.rrset

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "cache")
OUT_L2 = os.path.join(HERE, "corpus", "l2")
OUT_ECS = os.path.join(HERE, "corpus", "ecs")
OUT_CT = os.path.join(HERE, "corpus", "clear_types")

# dnslb/core/cache.h, dnslb/pipeline/l2cache.c
CK_RD, CK_CD, CK_DO, CK_TCP, CK_EDNS = 0x01, 0x02, 0x04, 0x08, 0x10
L2_MAGIC = b"DL2\x01"
SKIPPED_OPTIONS = (10, 12)  # COOKIE, PADDING: not in a key (no cookieHashing)


def l2_value(q, tcp, answer_wire, inserted_ms=1700000000500):
    """dlb_l2_encode of @answer_wire for the key dlb_cache_key_make gives @q."""
    qw = q.to_wire()
    flags = (CK_RD if q.flags & dns.flags.RD else 0) | (CK_CD if q.flags & dns.flags.CD else 0)
    flags |= CK_TCP if tcp else 0
    payload_class, opts = 0, b""
    if q.edns >= 0:
        flags |= CK_EDNS | (CK_DO if q.ednsflags & dns.flags.DO else 0)
        payload_class = max(q.payload, 512)
        for o in q.options:
            if o.otype not in SKIPPED_OPTIONS:
                data = o.to_wire()
                opts += struct.pack("!HH", o.otype, len(data)) + data
    name = q.question[0].name.canonicalize().to_wire()
    qtype, qclass = q.question[0].rdtype, q.question[0].rdclass
    return (L2_MAGIC + struct.pack("!QHHHBBBBH", inserted_ms, qtype, qclass, payload_class, flags,
                                   len(name), len(opts), 0, len(answer_wire))
            + name + opts + answer_wire), qw

def query(name, rdtype="A", edns=True, options=(), payload=1232, want_dnssec=False, cd=False):
    q = dns.message.make_query(name, rdtype, use_edns=0 if edns else False, payload=payload,
                               options=list(options), want_dnssec=want_dnssec)
    q.id = 0x1234
    if cd:
        q.flags |= dns.flags.CD
    return q


def answer(q, records=(), rcode=dns.rcode.NOERROR, authority=(), tc=False):
    r = dns.message.make_response(q)
    r.id = 0xbeef  # the backend's ID (dnslb's rewritten one), not the client's
    r.set_rcode(rcode)
    for rr in records:
        r.answer.append(dns.rrset.from_text(*rr))
    for rr in authority:
        r.authority.append(dns.rrset.from_text(*rr))
    if tc:
        r.flags |= dns.flags.TC
    return r


def write(path, ctl, qw, rest):
    with open(path, "wb") as f:
        f.write(bytes([ctl]) + struct.pack("!H", len(qw)) + qw + rest)


def seed(fname, ctl, q, a):
    qw, aw = q.to_wire(), a.to_wire()
    write(os.path.join(OUT, fname), ctl, qw, aw)
    value, _ = l2_value(q, ctl & 1, aw)
    write(os.path.join(OUT_L2, "v_" + fname), ctl & 1, qw, value)
    write(os.path.join(OUT_L2, "rt_" + fname), (ctl & 1) | 2, qw, aw)
    with open(os.path.join(OUT_CT, fname), "wb") as f:
        f.write(bytes([0x15]) + aw)  # A, CNAME, SOA


def clear_types_seeds():
    """Answers with names compressed across sections, for fuzz_clear_types."""
    q = query("example.org", "MX")
    r = answer(q, [("example.org.", 300, "IN", "MX", "10 mail.example.org.", "20 mx2.example.org.")])
    r.authority.append(dns.rrset.from_text("example.org.", 300, "IN", "NS", "ns1.example.org.",
                                           "ns2.example.net."))
    r.additional.append(dns.rrset.from_text("mail.example.org.", 300, "IN", "A", "192.0.2.25"))
    r.additional.append(dns.rrset.from_text("ns1.example.org.", 300, "IN", "AAAA", "2001:db8::53"))
    wire = r.to_wire()
    # A, AAAA, NS, MX, A+NS; NS with the whole buffer as capacity
    for ctl in (0x01, 0x02, 0x08, 0x20, 0x09, 0x88):
        with open(os.path.join(OUT_CT, "mx_ns_glue_%02x.bin" % ctl), "wb") as f:
            f.write(bytes([ctl]) + wire)
    q = query("www.example.org", "A", want_dnssec=True)
    r = answer(q, [("www.example.org.", 300, "IN", "CNAME", "web.example.org."),
                   ("web.example.org.", 300, "IN", "A", "192.0.2.80"),
                   ("web.example.org.", 300, "IN", "RRSIG", "A 13 3 300 20261231000000 "
                    "20261201000000 12345 example.org. AAAA")])
    r.authority.append(dns.rrset.from_text("example.org.", 300, "IN", "SOA", "ns1.example.org. "
                                           "host.example.org. 1 7200 900 1209600 300"))
    with open(os.path.join(OUT_CT, "cname_rrsig_soa_40.bin"), "wb") as f:
        f.write(bytes([0x44]) + r.to_wire())   # CNAME, RRSIG


def main():
    os.makedirs(OUT, exist_ok=True)
    os.makedirs(OUT_L2, exist_ok=True)
    os.makedirs(OUT_CT, exist_ok=True)
    q = query("www.Example.com")
    seed("a_edns.bin", 0, q, answer(q, [("www.example.com.", 300, "IN", "A", "192.0.2.1",
                                          "192.0.2.2")]))
    seed("a_edns_expunge.bin", 8, q, answer(q, [("www.example.com.", 300, "IN", "A",
                                                  "192.0.2.1")]))
    q = query("WWW.example.COM", "AAAA", edns=False)
    seed("aaaa_noedns_tcp.bin", 1, q, answer(q, [("www.example.com.", 60, "IN", "AAAA",
                                                   "2001:db8::1")]))
    q = query("alias.example.net", want_dnssec=True)
    seed("cname_chain_do.bin", 2, q, answer(q, [
        ("alias.example.net.", 600, "IN", "CNAME", "target.example.org."),
        ("target.example.org.", 120, "IN", "A", "198.51.100.7")]))
    q = query("nope.example.com")
    seed("nxdomain_soa.bin", 0, q, answer(q, rcode=dns.rcode.NXDOMAIN, authority=[
        ("example.com.", 3600, "IN", "SOA", "ns1.example.com. host.example.com. 1 7200 900 "
         "1209600 300")]))
    q = query("nodata.example.com", "MX")
    seed("nodata_soa_opts.bin", 2, q, answer(q, authority=[
        ("example.com.", 3600, "IN", "SOA", "ns1.example.com. host.example.com. 1 7200 900 "
         "1209600 30")]))
    q = query("fail.example.com")
    seed("servfail_tempttl.bin", 4, q, answer(q, rcode=dns.rcode.SERVFAIL))
    q = query("cookie.example.com", options=[dns.edns.GenericOption(10, b"\x01" * 8)])
    seed("cookie_opt.bin", 2, q, answer(q, [("cookie.example.com.", 300, "IN", "A",
                                              "192.0.2.9")]))
    q = query("ecs.example.com", options=[dns.edns.ECSOption("192.0.2.0", 24)])
    seed("ecs_opt.bin", 2, q, answer(q, [("ecs.example.com.", 300, "IN", "A", "192.0.2.10")]))
    q = query("tc.example.com")
    seed("tc.bin", 0, q, answer(q, [("tc.example.com.", 300, "IN", "A", "192.0.2.11")], tc=True))
    q = query("other.example.com")
    o = query("otheR.example.coM")
    seed("question_case_only.bin", 0, q, answer(o, [("other.example.com.", 300, "IN", "A",
                                                      "192.0.2.12")]))
    x = query("xther.example.com")
    seed("question_not_the_query.bin", 0, q, answer(x, [("xther.example.com.", 300, "IN", "A",
                                                          "192.0.2.13")]))
    q = query("big.example.com", "TXT", edns=False)
    a = answer(q, [("big.example.com.", 300, "IN", "TXT",
                    " ".join('"%s%d"' % ("y" * 150, i) for i in range(4)))])
    seed("too_big_for_512.bin", 0, q, a)


def ecs_seeds():
    """Client queries, and answers to them as forwarded with ECS (dnslb's 192.0.2.0/24)."""
    os.makedirs(OUT_ECS, exist_ok=True)
    ecs = dns.edns.ECSOption("192.0.2.0", 24)
    cases = [
        # name, the client's EDNS (None: none), its options, control byte
        ("plain.example.com", None, [], 24 << 2),
        ("edns.example.com", 1232, [], 24 << 2),
        ("cookie.example.com", 4096, [dns.edns.GenericOption(10, b"\x02" * 8)], 16 << 2),
        ("client-ecs.example.com", 1232, [dns.edns.ECSOption("198.51.100.0", 24)], 24 << 2),
        ("client-ecs-override.example.com", 1232, [dns.edns.ECSOption("198.51.100.0", 24)],
         (24 << 2) | 1),
        ("v6.example.com", 1232, [], (28 << 2) | 2),
    ]
    for name, payload, options, ctl in cases:
        if payload is None:
            q = dns.message.make_query(name, "A", use_edns=False)
        else:
            q = dns.message.make_query(name, "A", use_edns=0, payload=payload, options=options)
        q.id = 0x4242
        fwd = dns.message.make_query(name, "A", use_edns=0, payload=payload or 1232,
                                     options=[o for o in options if o.otype != 8] + [ecs])
        fwd.id = 0x4242
        r = answer(fwd, [(name + ".", 60, "IN", "A", "192.0.2.80")])
        write(os.path.join(OUT_ECS, name.split(".")[0] + ".bin"), ctl, q.to_wire(), r.to_wire())


if __name__ == "__main__":
    random.seed(0)  # dnspython shuffles an rdataset's records when rendering
    main()
    ecs_seeds()
    clear_types_seeds()
