/*
 * answer.c - answers built by query actions (RCodeAction, ERCodeAction,
 * TCAction, SpoofAction, SpoofCNAMEAction, SpoofRawAction,
 * NegativeAndSOAAction) and the record walkers used by response actions
 * (LimitTTL..., ClearRecordTypesResponseAction).
 *
 * What dnsdist 1.7.3 sends (Debian 1.7.3, observed over UDP on loopback
 * with dnspython, with and without EDNS/DO and RD); the builders reproduce it
 * byte for byte except where noted:
 *  - Header: the query's ID, opcode, RD, CD and Z bit; QR=1. AA stays as the
 *    query had it unless aa= was given; AD is cleared unless ad=true; RA
 *    copies RD unless ra= was given (setResponseHeadersFromConfig), for
 *    RCodeAction too. TCAction: TC=1, AA and AD cleared, RA = RD.
 *  - The first question, in the client's case; qdcount 1.
 *  - Record owners are a pointer to the question (0xc00c); class IN; TTL
 *    from ttl= (default 60).
 *  - SpoofAction: A records for qtype A, AAAA for AAAA, both for ANY, in a
 *    random order (std::random_shuffle over the matching addresses; ANY mixes
 *    the families). No address of the asked type (MX, TXT, ...): the action
 *    does nothing and the next rule runs - here: return 0, packet untouched.
 *  - SpoofCNAMEAction: one CNAME whatever the qtype (ANY and MX too), the
 *    target uncompressed.
 *  - SpoofRawAction: one record per rdata, shuffled like the addresses, of
 *    the query's type (even ANY); NO OPT RR even when the query had EDNS.
 *    (A CNAME query gets a broken empty CNAME from dnsdist 1.7.3 - its
 *    CNAME branch runs with no target - not reproduced.)
 *    dnsdist writes class IN; dnslb uses the query's class (rules.h), so a
 *    CH TXT version.bind answer is CH - the one deliberate difference.
 *  - NegativeAndSOAAction: rcode NXDOMAIN or NOERROR, no answer records,
 *    the SOA with owner = the zone (uncompressed, as are MNAME and RNAME),
 *    class IN, TTL = the action's ttl argument, in the ADDITIONAL section
 *    (dnsdist 1.7.3's setNegativeAndAdditionalSOA; 1.8 added
 *    soaInAuthoritySection), before the OPT RR.
 *  - OPT (all but SpoofRaw), only when the query had one and
 *    setAddEDNSToSelfGeneratedResponses is on: root owner, payload 1232
 *    (setPayloadSizeOnSelfGeneratedAnswers) whatever the client asked, the
 *    extended rcode (ERCodeAction), version 0, DO copied, no options.
 *  - ERCodeAction without EDNS in the query: only the low 4 bits remain.
 * Not reproduced: dnsdist's RCodeAction and TCAction only flip header bits,
 * so a query carrying answer/authority records (NOTIFY with its SOA, UPDATE)
 * or more than one additional record goes back whole, records and all; the
 * builders here always send header + question + OPT.
 *
 * Thread: any. The builders and walkers are pure over caller buffers except
 * for two per-thread scratch areas (the shuffle state and
 * dlb_wire_clear_types' output buffer).
 */
#include "rules/rules.h"

#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <netinet/in.h>

#define ANS_F_Z		0x0040		/* reserved header bit, echoed like dnsdist */
#define ANS_OPCODE_MASK	0x7800
#define ANS_RR_FIXED	10		/* type, class, TTL, RDLENGTH */
#define ANS_PTR_RR	(2 + ANS_RR_FIXED)	/* a record owned by a pointer to the qname */
#define ANS_OPT_LEN	11
#define ANS_MAX_MSG	65535
#define ANS_CLASS_IN	1
#define T_A		1
#define T_NS		2
#define T_MD		3
#define T_MF		4
#define T_CNAME		5
#define T_SOA		6
#define T_MB		7
#define T_MG		8
#define T_MR		9
#define T_PTR		12
#define T_MINFO		14
#define T_MX		15
#define T_RP		17
#define T_AFSDB		18
#define T_RT		21
#define T_PX		26
#define T_AAAA		28
#define T_SRV		33
#define T_NAPTR		35
#define T_KX		36
#define T_DNAME		39
#define T_ANY		255

static const struct dlb_answer_opts answer_defaults = { .ttl = 60 };
static const struct dlb_selfanswer_opts self_defaults = { .add_edns = true, .payload_size = 1232 };

/*
 * Where the records go: just past the first question, which stays where the
 * query had it (offset 12). Without a question: DLB_EINVAL when @need_q,
 * else right after the header (like dlb_wire_build_answer).
 */
static int
answer_base(size_t len, const struct dlb_dnsmsg *m, bool need_q)
{
	if (m->qdcount >= 1 && m->qname_off == DLB_DNS_HDR && m->question_end > m->qname_off &&
	    m->question_end <= len)
		return m->question_end;
	return need_q ? DLB_EINVAL : DLB_DNS_HDR;
}

static uint16_t
answer_flags(uint16_t q, const struct dlb_answer_opts *o, unsigned rcode)
{
	uint16_t f = (uint16_t)(DLB_F_QR | (q & (ANS_OPCODE_MASK | DLB_F_RD | ANS_F_Z | DLB_F_CD)) |
				(rcode & 0xf));
	bool aa = o->aa_set ? o->aa : (o->aa || (q & DLB_F_AA) != 0);
	bool ra = o->ra_set ? o->ra : (q & DLB_F_RD) != 0;

	if (aa)
		f |= DLB_F_AA;
	if (o->ad)
		f |= DLB_F_AD;
	if (ra)
		f |= DLB_F_RA;
	return f;
}

/*
 * Does the answer carry an OPT? As in dnsdist: for a spoofed answer
 * (@strict) only when the query's EDNS is what its queryHasEDNS() finds,
 * one question and an OPT as the only other record; for the others when
 * the query has an OPT at all.
 */
static bool
answer_opt(const struct dlb_dnsmsg *m, const struct dlb_selfanswer_opts *so, bool strict)
{
	if (!m->has_opt || !so->add_edns)
		return false;
	return !strict || (m->qdcount == 1 && m->ancount == 0 && m->nscount == 0 &&
			   m->arcount == 1);
}

/* Room for @need octets in total? Checked before anything is written. */
static bool
answer_fits(size_t need, size_t cap)
{
	return need <= cap && need <= ANS_MAX_MSG;
}

static void
answer_header(uint8_t *pkt, const struct dlb_dnsmsg *m, uint16_t flags, int base, unsigned an,
	      unsigned ns, unsigned ar)
{
	dlb_wr16(pkt, m->id);
	dlb_wr16(pkt + 2, flags);
	dlb_wr16(pkt + 4, base > DLB_DNS_HDR ? 1 : 0);
	dlb_wr16(pkt + 6, (uint16_t)an);
	dlb_wr16(pkt + 8, (uint16_t)ns);
	dlb_wr16(pkt + 10, (uint16_t)ar);
}

/* A record owned by a pointer to the qname at offset 12; @return the end. */
static size_t
put_ptr_rr(uint8_t *pkt, size_t o, uint16_t type, uint16_t cls, uint32_t ttl, const void *rdata,
	   uint16_t rdlen)
{
	pkt[o] = 0xc0;
	pkt[o + 1] = DLB_DNS_HDR;
	dlb_wr16(pkt + o + 2, type);
	dlb_wr16(pkt + o + 4, cls);
	dlb_wr32(pkt + o + 6, ttl);
	dlb_wr16(pkt + o + 10, rdlen);
	if (rdlen > 0)
		memcpy(pkt + o + ANS_PTR_RR, rdata, rdlen);
	return o + ANS_PTR_RR + rdlen;
}

static size_t
put_opt(uint8_t *pkt, size_t o, const struct dlb_dnsmsg *m, const struct dlb_selfanswer_opts *so,
	unsigned rcode)
{
	pkt[o] = 0;
	dlb_wr16(pkt + o + 1, DLB_TYPE_OPT);
	dlb_wr16(pkt + o + 3, so->payload_size);
	dlb_wr32(pkt + o + 5, (uint32_t)((rcode >> 4) & 0xff) << 24 | (m->do_bit ? 0x8000u : 0));
	dlb_wr16(pkt + o + 9, 0);
	return o + ANS_OPT_LEN;
}

/*
 * The query is one question and one OPT RR right after it, nothing else in
 * its sections (dnsdist's getEDNSOptionsStart): only then is its OPT (and
 * whatever follows) replaced in an answer made of the query.
 */
static bool
lone_opt(size_t len, const struct dlb_dnsmsg *m)
{
	return m->qdcount == 1 && m->ancount == 0 && m->nscount == 0 && m->arcount == 1 &&
	       m->has_opt && m->opt_off == m->question_end && m->question_end < len;
}

/*
 * RCodeAction, ERCodeAction, TCAction: as dnsdist 1.7, the query turned into
 * its answer by its header. A query of one question and one OPT RR loses
 * the OPT and anything after it (trailing data too), and gets a fresh OPT
 * (setAddEDNSToSelfGeneratedResponses); any other query keeps every record
 * and octet it had.
 */
static int
answer_empty(uint8_t *pkt, size_t len, size_t cap, const struct dlb_dnsmsg *m, unsigned rcode,
	     uint16_t extra_flags, const struct dlb_answer_opts *o,
	     const struct dlb_selfanswer_opts *so)
{
	int base = answer_base(len, m, false);
	bool opt;
	size_t end;

	if (o == NULL)
		o = &answer_defaults;
	if (so == NULL)
		so = &self_defaults;
	if (!lone_opt(len, m) && len >= DLB_DNS_HDR && (m->qdcount == 0 || base > DLB_DNS_HDR)) {
		dlb_wr16(pkt + 2, (uint16_t)(answer_flags(m->flags, o, rcode) | extra_flags));
		return (int)len;
	}
	opt = answer_opt(m, so, false);
	if (!answer_fits((size_t)base + (opt ? ANS_OPT_LEN : 0), cap))
		return DLB_ESPACE;
	end = (size_t)base;
	if (opt)
		end = put_opt(pkt, end, m, so, rcode);
	answer_header(pkt, m, (uint16_t)(answer_flags(m->flags, o, rcode) | extra_flags), base,
		      0, 0, opt ? 1 : 0);
	return (int)end;
}

int
dlb_answer_rcode(uint8_t *pkt, size_t len, size_t cap, const struct dlb_dnsmsg *m,
		 uint16_t rcode, const struct dlb_answer_opts *o,
		 const struct dlb_selfanswer_opts *so)
{
	return answer_empty(pkt, len, cap, m, rcode, 0, o, so);
}

int
dlb_answer_tc(uint8_t *pkt, size_t len, size_t cap, const struct dlb_dnsmsg *m,
	      const struct dlb_selfanswer_opts *so)
{
	/* dnsdist's Truncate: AA and AD cleared, RA = RD */
	static const struct dlb_answer_opts tc_opts = { .aa_set = true };

	return answer_empty(pkt, len, cap, m, DLB_RCODE_NOERROR, DLB_F_TC, &tc_opts, so);
}

/*
 * The shuffle of SpoofAction's addresses: a per-thread splitmix64 seeded
 * from the kernel on first use. Not for secrets; it only spreads clients
 * over the addresses as dnsdist's random_shuffle does.
 */
static _Thread_local uint64_t shuffle_state;

static uint32_t
shuffle_below(uint32_t n)
{
	uint64_t z;

	if (shuffle_state == 0) {
		struct timespec ts;

		if (getrandom(&shuffle_state, sizeof(shuffle_state), GRND_NONBLOCK) !=
		    (ssize_t)sizeof(shuffle_state)) {
			clock_gettime(CLOCK_MONOTONIC, &ts);
			shuffle_state = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^
					(uint64_t)(uintptr_t)&shuffle_state;
		}
		shuffle_state |= 1;
	}
	z = (shuffle_state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	z ^= z >> 31;
	return (uint32_t)(((z & 0xffffffffu) * (uint64_t)n) >> 32);
}

/* At most (65535 - 12 - 5) / 12 records fit a message. */
#define SPOOF_MAX_RR	5460

static _Thread_local uint16_t spoof_idx[SPOOF_MAX_RR];

/* Fisher-Yates over spoof_idx[0..k). */
static void
shuffle_idx(unsigned k)
{
	for (unsigned i = k > 0 ? k - 1 : 0; i > 0; i--) {
		unsigned j = shuffle_below(i + 1);
		uint16_t t = spoof_idx[i];

		spoof_idx[i] = spoof_idx[j];
		spoof_idx[j] = t;
	}
}

int
dlb_answer_spoof_addrs(uint8_t *pkt, size_t len, size_t cap, const struct dlb_dnsmsg *m,
		       const struct sockaddr_storage *addrs, int n,
		       const struct dlb_answer_opts *o, const struct dlb_selfanswer_opts *so)
{
	uint16_t *idx = spoof_idx;
	bool v4 = m->qtype == T_A || m->qtype == T_ANY;
	bool v6 = m->qtype == T_AAAA || m->qtype == T_ANY;
	int base = answer_base(len, m, true);
	size_t need, end;
	unsigned k = 0;
	bool opt;

	if (o == NULL)
		o = &answer_defaults;
	if (so == NULL)
		so = &self_defaults;
	if (base < 0)
		return base;
	opt = answer_opt(m, so, true);
	need = (size_t)base + (opt ? ANS_OPT_LEN : 0);
	for (int i = 0; i < n; i++) {
		sa_family_t fam = addrs[i].ss_family;

		if ((fam == AF_INET && v4) || (fam == AF_INET6 && v6)) {
			need += ANS_PTR_RR + (fam == AF_INET ? 4 : 16);
			if (k == SPOOF_MAX_RR)
				return DLB_ESPACE;
			idx[k++] = (uint16_t)i;
		}
	}
	if (k == 0)
		return 0;	/* dnsdist: nothing to spoof for this qtype, next rule */
	if (!answer_fits(need, cap))
		return DLB_ESPACE;
	shuffle_idx(k);
	end = (size_t)base;
	for (unsigned i = 0; i < k; i++) {
		const struct sockaddr_storage *ss = &addrs[idx[i]];

		const void *sa = ss;

		if (ss->ss_family == AF_INET) {
			const struct sockaddr_in *sin = sa;

			end = put_ptr_rr(pkt, end, T_A, ANS_CLASS_IN, o->ttl, &sin->sin_addr, 4);
		} else {
			const struct sockaddr_in6 *sin6 = sa;

			end = put_ptr_rr(pkt, end, T_AAAA, ANS_CLASS_IN, o->ttl, &sin6->sin6_addr,
					 16);
		}
	}
	if (opt)
		end = put_opt(pkt, end, m, so, 0);
	answer_header(pkt, m, answer_flags(m->flags, o, DLB_RCODE_NOERROR), base, k, 0,
		      opt ? 1 : 0);
	return (int)end;
}

int
dlb_answer_spoof_cname(uint8_t *pkt, size_t len, size_t cap, const struct dlb_dnsmsg *m,
		       const uint8_t *target, size_t target_len,
		       const struct dlb_answer_opts *o, const struct dlb_selfanswer_opts *so)
{
	int base = answer_base(len, m, true);
	size_t need, end;
	bool opt;

	if (o == NULL)
		o = &answer_defaults;
	if (so == NULL)
		so = &self_defaults;
	if (base < 0)
		return base;
	if (target_len == 0 || target_len > DLB_MAX_NAME)
		return DLB_EINVAL;
	opt = answer_opt(m, so, true);
	need = (size_t)base + ANS_PTR_RR + target_len + (opt ? ANS_OPT_LEN : 0);
	if (!answer_fits(need, cap))
		return DLB_ESPACE;
	end = put_ptr_rr(pkt, (size_t)base, T_CNAME, ANS_CLASS_IN, o->ttl, target,
			 (uint16_t)target_len);
	if (opt)
		end = put_opt(pkt, end, m, so, 0);
	answer_header(pkt, m, answer_flags(m->flags, o, DLB_RCODE_NOERROR), base, 1, 0,
		      opt ? 1 : 0);
	return (int)end;
}

int
dlb_answer_spoof_raw(uint8_t *pkt, size_t len, size_t cap, const struct dlb_dnsmsg *m,
		     uint8_t *const *rdata, const uint16_t *rdlen, int n,
		     const struct dlb_answer_opts *o, const struct dlb_selfanswer_opts *so)
{
	int base = answer_base(len, m, true);
	size_t need, end;

	(void)so;	/* dnsdist 1.7.3 adds no OPT to raw answers */
	if (o == NULL)
		o = &answer_defaults;
	if (base < 0)
		return base;
	if (n < 0 || n > SPOOF_MAX_RR)
		return n < 0 ? DLB_EINVAL : DLB_ESPACE;
	need = (size_t)base;
	for (int i = 0; i < n; i++) {
		need += ANS_PTR_RR + rdlen[i];
		spoof_idx[i] = (uint16_t)i;
	}
	if (!answer_fits(need, cap))
		return DLB_ESPACE;
	shuffle_idx((unsigned)n);
	end = (size_t)base;
	for (int i = 0; i < n; i++) {
		int j = spoof_idx[i];

		end = put_ptr_rr(pkt, end, m->qtype, m->qclass, o->ttl, rdata[j], rdlen[j]);
	}
	answer_header(pkt, m, answer_flags(m->flags, o, DLB_RCODE_NOERROR), base, (unsigned)n,
		      0, 0);
	return (int)end;
}

/* ---- SpoofSVCAction ----------------------------------------------------------- */

#define SVC_MAX_POS	512	/* label positions remembered for compression */

/* ASCII case-insensitive label bytes. */
static bool
label_eq(const uint8_t *a, const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint8_t x = a[i] >= 'A' && a[i] <= 'Z' ? a[i] + 32 : a[i];
		uint8_t y = b[i] >= 'A' && b[i] <= 'Z' ? b[i] + 32 : b[i];

		if (x != y)
			return false;
	}
	return true;
}

/* Does the name at @pos of @pkt (pointers followed) equal the wire name @w? */
static bool
name_at_eq(const uint8_t *pkt, size_t end, size_t pos, const uint8_t *w, size_t wlen)
{
	size_t i = 0;

	for (int hops = 0; hops < 64 && pos < end; hops++) {
		uint8_t l = pkt[pos];

		if ((l & 0xc0) == 0xc0) {
			if (pos + 1 >= end)
				return false;
			pos = (size_t)(l & 0x3f) << 8 | pkt[pos + 1];
			continue;
		}
		if (i >= wlen || w[i] != l || pos + 1 + l > end)
			return false;
		if (l == 0)
			return i + 1 == wlen;
		if (!label_eq(pkt + pos + 1, w + i + 1, l))
			return false;
		i += 1 + (size_t)l;
		pos += 1 + (size_t)l;
	}
	return false;
}

struct svc_comp {
	uint16_t pos[SVC_MAX_POS];	/* where labels of names written start */
	int n;
};

/*
 * Write the wire name @w at @o, compressed with the longest suffix already
 * written (the earliest place for it), as dnsdist's packet writer does;
 * remember its new labels. @return the end.
 */
static size_t
put_name(uint8_t *pkt, size_t o, const uint8_t *w, size_t wlen, struct svc_comp *c)
{
	size_t i = 0;

	while (i < wlen && w[i] != 0) {
		for (int k = 0; k < c->n; k++) {
			if (name_at_eq(pkt, o, c->pos[k], w + i, wlen - i)) {
				pkt[o] = (uint8_t)(0xc0 | c->pos[k] >> 8);
				pkt[o + 1] = (uint8_t)c->pos[k];
				return o + 2;
			}
		}
		if (o < 0x4000 && c->n < SVC_MAX_POS)
			c->pos[c->n++] = (uint16_t)o;
		memcpy(pkt + o, w + i, 1 + (size_t)w[i]);
		o += 1 + (size_t)w[i];
		i += 1 + (size_t)w[i];
	}
	pkt[o++] = 0;
	return o;
}

/*
 * dnsdist 1.7 writes SpoofSVCAction's answer as a new packet: its header has
 * QR and the query's RD and CD, and only the bits the options set (RA too: not
 * copied from RD).
 */
static uint16_t
svc_flags(uint16_t q, const struct dlb_answer_opts *o)
{
	uint16_t f = (uint16_t)(DLB_F_QR | (q & (DLB_F_RD | DLB_F_CD)));

	if (o->aa_set && o->aa)
		f |= DLB_F_AA;
	if (o->ad)
		f |= DLB_F_AD;
	if (o->ra_set && o->ra)
		f |= DLB_F_RA;
	return f;
}

int
dlb_answer_spoof_svc(uint8_t *pkt, size_t len, size_t cap, const struct dlb_dnsmsg *m,
		     uint8_t *const *rdata, const uint16_t *rdlen, int n,
		     const struct dlb_svc_additional *add, int nadd,
		     const struct dlb_answer_opts *o, const struct dlb_selfanswer_opts *so)
{
	int base = answer_base(len, m, true);
	struct svc_comp comp;
	size_t need, end;
	bool opt;

	if (o == NULL)
		o = &answer_defaults;
	if (so == NULL)
		so = &self_defaults;
	if (base < 0)
		return base;
	if (n < 0 || nadd < 0 || n + nadd > SPOOF_MAX_RR)
		return n < 0 || nadd < 0 ? DLB_EINVAL : DLB_ESPACE;
	opt = answer_opt(m, so, true);
	/* names written whole: the upper bound */
	need = (size_t)base + (opt ? ANS_OPT_LEN : 0);
	for (int i = 0; i < n; i++)
		need += ANS_PTR_RR + rdlen[i];
	for (int i = 0; i < nadd; i++)
		need += add[i].name_len + ANS_RR_FIXED + (add[i].type == T_A ? 4 : 16);
	if (!answer_fits(need, cap))
		return DLB_ESPACE;
	end = (size_t)base;
	for (int i = 0; i < n; i++)
		end = put_ptr_rr(pkt, end, m->qtype, ANS_CLASS_IN, o->ttl, rdata[i], rdlen[i]);
	/* the question's name first: the answers' owners point at it */
	comp.n = 0;
	for (size_t p = DLB_DNS_HDR; pkt[p] != 0 && comp.n < SVC_MAX_POS; p += 1 + (size_t)pkt[p])
		comp.pos[comp.n++] = (uint16_t)p;
	for (int i = 0; i < nadd; i++) {
		uint16_t alen = add[i].type == T_A ? 4 : 16;

		if (add[i].name_len <= 1) {
			pkt[end] = 0xc0;
			pkt[end + 1] = DLB_DNS_HDR;
			end += 2;
		} else {
			end = put_name(pkt, end, add[i].name, add[i].name_len, &comp);
		}
		dlb_wr16(pkt + end, add[i].type);
		dlb_wr16(pkt + end + 2, ANS_CLASS_IN);
		dlb_wr32(pkt + end + 4, o->ttl);
		dlb_wr16(pkt + end + 8, alen);
		memcpy(pkt + end + ANS_RR_FIXED, add[i].addr, alen);
		end += ANS_RR_FIXED + alen;
	}
	if (opt)
		end = put_opt(pkt, end, m, so, 0);
	answer_header(pkt, m, svc_flags(m->flags, o), base, (unsigned)n, 0,
		      (unsigned)nadd + (opt ? 1 : 0));
	return (int)end;
}

int
dlb_answer_negative_soa(uint8_t *pkt, size_t len, size_t cap, const struct dlb_dnsmsg *m,
			const struct dlb_act *a, const struct dlb_selfanswer_opts *so)
{
	int base = answer_base(len, m, true);
	unsigned rcode = a->u.soa.nxd ? DLB_RCODE_NXDOMAIN : DLB_RCODE_NOERROR;
	size_t rdlen = (size_t)a->u.soa.mname_len + a->u.soa.rname_len + 20, need, o;
	bool opt;

	if (so == NULL)
		so = &self_defaults;
	if (base < 0)
		return base;
	if (a->u.soa.zone_len == 0 || a->u.soa.mname_len == 0 || a->u.soa.rname_len == 0 ||
	    a->u.soa.zone_len > DLB_MAX_NAME || a->u.soa.mname_len > DLB_MAX_NAME ||
	    a->u.soa.rname_len > DLB_MAX_NAME)
		return DLB_EINVAL;
	opt = answer_opt(m, so, false);
	need = (size_t)base + a->u.soa.zone_len + ANS_RR_FIXED + rdlen + (opt ? ANS_OPT_LEN : 0);
	if (!answer_fits(need, cap))
		return DLB_ESPACE;
	o = (size_t)base;
	memcpy(pkt + o, a->u.soa.zone, a->u.soa.zone_len);
	o += a->u.soa.zone_len;
	dlb_wr16(pkt + o, T_SOA);
	dlb_wr16(pkt + o + 2, ANS_CLASS_IN);
	dlb_wr32(pkt + o + 4, a->u.soa.ttl);
	dlb_wr16(pkt + o + 8, (uint16_t)rdlen);
	o += ANS_RR_FIXED;
	memcpy(pkt + o, a->u.soa.mname, a->u.soa.mname_len);
	o += a->u.soa.mname_len;
	memcpy(pkt + o, a->u.soa.rname, a->u.soa.rname_len);
	o += a->u.soa.rname_len;
	dlb_wr32(pkt + o, a->u.soa.serial);
	dlb_wr32(pkt + o + 4, a->u.soa.refresh);
	dlb_wr32(pkt + o + 8, a->u.soa.retry);
	dlb_wr32(pkt + o + 12, a->u.soa.expire);
	dlb_wr32(pkt + o + 16, a->u.soa.minimum);
	o += 20;
	if (opt)
		o = put_opt(pkt, o, m, so, rcode);
	if (a->u.soa.soa_in_authority)
		answer_header(pkt, m, answer_flags(m->flags, &a->u.soa.o, rcode), base, 0, 1,
			      opt ? 1 : 0);
	else
		answer_header(pkt, m, answer_flags(m->flags, &a->u.soa.o, rcode), base, 0, 0,
			      opt ? 2 : 1);
	return (int)o;
}

/* ---- walking records ---------------------------------------------------- */

/* One resource record as found by rr_next(). */
struct rr {
	size_t owner;		/* offset of the owner name */
	size_t fixed;		/* offset of the type field */
	size_t rdata;
	size_t end;		/* just past the RDATA */
	uint16_t type, cls, rdlen;
	int section;		/* 1 answer, 2 authority, 3 additional */
};

struct rr_iter {
	const uint8_t *pkt;
	size_t len;
	size_t pos;
	size_t qend;		/* just past the question section */
	unsigned left[3];
	int sec;
};

/* Check the header's counts against the length and skip every question. */
static int
rr_iter_init(struct rr_iter *it, const uint8_t *pkt, size_t len)
{
	unsigned qd;

	if (len < DLB_DNS_HDR)
		return DLB_ETRUNC;
	if (len > ANS_MAX_MSG)
		return DLB_EMALF;
	qd = dlb_rd16(pkt + 4);
	it->pkt = pkt;
	it->len = len;
	it->left[0] = dlb_rd16(pkt + 6);
	it->left[1] = dlb_rd16(pkt + 8);
	it->left[2] = dlb_rd16(pkt + 10);
	it->sec = 0;
	/* every question needs >= 5 octets and every record >= 11: no loop runs on absurd counts */
	if ((size_t)qd * 5 + ((size_t)it->left[0] + it->left[1] + it->left[2]) * 11 >
	    len - DLB_DNS_HDR)
		return DLB_ETRUNC;
	it->pos = DLB_DNS_HDR;
	for (unsigned i = 0; i < qd; i++) {
		int r = dlb_wire_skip_name(pkt, len, it->pos);

		if (r < 0)
			return r;
		if (len - (size_t)r < 4)
			return DLB_ETRUNC;
		it->pos = (size_t)r + 4;
	}
	it->qend = it->pos;
	return DLB_OK;
}

/* @return 1 with *@rr filled, 0 after the last record, or a negative dlb_err. */
static int
rr_next(struct rr_iter *it, struct rr *rr)
{
	int r;

	while (it->sec < 3 && it->left[it->sec] == 0)
		it->sec++;
	if (it->sec == 3)
		return 0;
	it->left[it->sec]--;
	rr->owner = it->pos;
	r = dlb_wire_skip_name(it->pkt, it->len, it->pos);
	if (r < 0)
		return r;
	if (it->len - (size_t)r < ANS_RR_FIXED)
		return DLB_ETRUNC;
	rr->fixed = (size_t)r;
	rr->type = dlb_rd16(it->pkt + r);
	rr->cls = dlb_rd16(it->pkt + r + 2);
	rr->rdlen = dlb_rd16(it->pkt + r + 8);
	rr->rdata = (size_t)r + ANS_RR_FIXED;
	if (it->len - rr->rdata < rr->rdlen)
		return DLB_ETRUNC;
	rr->end = rr->rdata + rr->rdlen;
	rr->section = it->sec + 1;
	it->pos = rr->end;
	return 1;
}

int
dlb_wire_walk_rrs(uint8_t *pkt, size_t len, dlb_rr_visit_fn *fn, void *ud)
{
	struct rr_iter it;
	struct rr rr;
	int r;

	/* validate everything first, so that an error never leaves half the records visited */
	r = rr_iter_init(&it, pkt, len);
	if (r != DLB_OK)
		return r;
	while ((r = rr_next(&it, &rr)) > 0)
		;
	if (r < 0)
		return r;
	rr_iter_init(&it, pkt, len);
	while (rr_next(&it, &rr) > 0) {
		if (rr.type != DLB_TYPE_OPT)
			fn(ud, pkt, rr.section, rr.type, rr.cls, rr.fixed + 4);
	}
	return DLB_OK;
}

/* ---- SetEDNSOptionAction ------------------------------------------------- */

/* dnsdist 1.7.3's g_EdnsUDPPayloadSize: the OPT RR it adds to a query (observed) */
#define EDNS_ADDED_PAYLOAD	512

int
dlb_wire_set_edns_option(uint8_t *pkt, size_t *len, size_t cap, struct dlb_dnsmsg *m,
			 uint16_t code, const uint8_t *data, uint16_t dlen, bool *added)
{
	size_t optlen = 4 + (size_t)dlen;
	size_t end, at;

	*added = false;
	if (*len < DLB_DNS_HDR || m->parsed_end < DLB_DNS_HDR || m->parsed_end > *len)
		return DLB_EINVAL;
	/* a rewrite keeps the records, not what follows them */
	end = m->parsed_end;
	if (!m->has_opt) {
		/* no additional record: dnsdist appends to the message as it is */
		at = dlb_rd16(pkt + 10) == 0 ? *len : end;
		if (at + ANS_OPT_LEN + optlen > cap || at + ANS_OPT_LEN + optlen > ANS_MAX_MSG)
			return DLB_ESPACE;
		pkt[at] = 0;
		dlb_wr16(pkt + at + 1, DLB_TYPE_OPT);
		dlb_wr16(pkt + at + 3, EDNS_ADDED_PAYLOAD);
		dlb_wr32(pkt + at + 5, 0);
		dlb_wr16(pkt + at + 9, (uint16_t)optlen);
		dlb_wr16(pkt + at + 11, code);
		dlb_wr16(pkt + at + 13, dlen);
		if (dlen > 0)
			memcpy(pkt + at + 15, data, dlen);
		dlb_wr16(pkt + 10, (uint16_t)(dlb_rd16(pkt + 10) + 1));
		*len = at + ANS_OPT_LEN + optlen;
		*added = true;
	} else {
		size_t rdata = m->opt_rdata_off, rdlen = m->opt_rdlen, p = rdata;

		if (end + optlen > cap || end + optlen > ANS_MAX_MSG || rdlen + optlen > 65535)
			return DLB_ESPACE;
		/* the options of that code go (the parser checked their layout) */
		while (p + 4 <= rdata + rdlen) {
			size_t olen = 4 + (size_t)dlb_rd16(pkt + p + 2);

			if (dlb_rd16(pkt + p) == code) {
				memmove(pkt + p, pkt + p + olen, end - (p + olen));
				rdlen -= olen;
				end -= olen;
			} else {
				p += olen;
			}
		}
		/* the new one last */
		at = rdata + rdlen;
		memmove(pkt + at + optlen, pkt + at, end - at);
		dlb_wr16(pkt + at, code);
		dlb_wr16(pkt + at + 2, dlen);
		if (dlen > 0)
			memcpy(pkt + at + 4, data, dlen);
		rdlen += optlen;
		end += optlen;
		dlb_wr16(pkt + rdata - 2, (uint16_t)rdlen);
		*len = end;
	}
	/*
	 * The rules after this one see the new message. An OPT RR appended
	 * after trailing data makes one that does not parse: mark it so.
	 */
	if (dlb_wire_parse_query(pkt, *len, m) != DLB_OK)
		m->parsed_end = 0;
	return DLB_OK;
}

/* ---- removing records --------------------------------------------------- */

/*
 * dlb_wire_clear_types rebuilds the message into a per-thread buffer and
 * copies it back. Names are re-emitted label by label; "map" remembers, for
 * each label start of the input below 0x4000 (the reach of a compression
 * pointer), where that label now is in the output. A pointer in the input
 * becomes a pointer to the mapped place when there is one (the output there
 * spells the same suffix), else the name is decompressed from the input and
 * its labels are mapped in turn. Every input label is thus written out in
 * full at most once where compression is allowed, so the result is never
 * longer than the input unless the input compressed names where RFC 3597 §4
 * forbids it (SRV, DNAME, NAPTR, ...), which are written uncompressed.
 * Names inside the RDATA of types not listed in rdata_names() are copied
 * as opaque octets (RFC 3597: nobody may compress them).
 */
#define CT_PTR_REACH	0x4000

struct ct_scratch {
	uint8_t out[ANS_MAX_MSG + 1];
	uint16_t map[CT_PTR_REACH];
	uint8_t mapped[CT_PTR_REACH / 8];
};

static _Thread_local struct ct_scratch ct_buf;

struct ct {
	const uint8_t *pkt;
	size_t len;
	struct ct_scratch *s;
	size_t o;		/* output length */
	size_t work;		/* label and pointer visits left */
	int err;		/* sticky */
};

static bool
ct_is_mapped(const struct ct *c, size_t p)
{
	return p < CT_PTR_REACH && (c->s->mapped[p / 8] & (1u << (p % 8)));
}

static void
ct_map(struct ct *c, size_t p, size_t q)
{
	if (p < CT_PTR_REACH && q < CT_PTR_REACH && !ct_is_mapped(c, p)) {
		c->s->map[p] = (uint16_t)q;
		c->s->mapped[p / 8] |= (uint8_t)(1u << (p % 8));
	}
}

static void
ct_fail(struct ct *c, int err)
{
	if (c->err == DLB_OK)
		c->err = err;
}

static void
ct_copy(struct ct *c, size_t from, size_t n)
{
	if (c->err != DLB_OK)
		return;
	if (from > c->len || c->len - from < n) {
		ct_fail(c, DLB_EMALF);
		return;
	}
	if (ANS_MAX_MSG - c->o < n) {
		ct_fail(c, DLB_ESPACE);
		return;
	}
	memcpy(c->s->out + c->o, c->pkt + from, n);
	c->o += n;
}

/*
 * Write the name at input offset @src, compressed against what was already
 * written when @compress. The input part must end at or before @limit.
 * @return the input offset after the name (0 on error, see c->err).
 */
static size_t
ct_name(struct ct *c, size_t src, size_t limit, bool compress)
{
	size_t pos = src, seg = src, nlen = 0;
	unsigned hops = 0;
	int after;

	if (c->err != DLB_OK)
		return 0;
	after = dlb_wire_skip_name(c->pkt, c->len, src);
	if (after < 0 || (size_t)after > limit) {
		ct_fail(c, after < 0 ? after : DLB_EMALF);
		return 0;
	}
	/*
	 * Only a name that decodes (finite, <= 255 octets): a pointer back into
	 * the name itself would bring the walk below to one of its own labels,
	 * already mapped, and the pointer written there would make the output
	 * name loop (found by tests/fuzz/fuzz_clear_types.c).
	 */
	{
		uint8_t lc[DLB_MAX_NAME];
		size_t next;

		if (dlb_wire_decode_name(c->pkt, c->len, src, lc, &next, NULL) < 0) {
			ct_fail(c, DLB_EMALF);
			return 0;
		}
	}
	for (;;) {
		uint8_t b;

		if (pos >= c->len) {
			ct_fail(c, DLB_ETRUNC);
			return 0;
		}
		b = c->pkt[pos];
		if (c->work-- == 0) {
			ct_fail(c, DLB_EMALF);
			return 0;
		}
		if ((b & 0xc0) == 0xc0) {
			size_t t;

			if (c->len - pos < 2) {
				ct_fail(c, DLB_ETRUNC);
				return 0;
			}
			t = (size_t)(b & 0x3f) << 8 | c->pkt[pos + 1];
			if (t >= seg || t < DLB_DNS_HDR || ++hops > DLB_WIRE_MAX_HOPS) {
				ct_fail(c, DLB_EMALF);
				return 0;
			}
			pos = seg = t;
			continue;
		}
		if (b & 0xc0) {
			ct_fail(c, DLB_EMALF);
			return 0;
		}
		if (compress && b != 0 && ct_is_mapped(c, pos)) {
			uint16_t q = c->s->map[pos];

			if (ANS_MAX_MSG - c->o < 2) {
				ct_fail(c, DLB_ESPACE);
				return 0;
			}
			c->s->out[c->o++] = (uint8_t)(0xc0 | q >> 8);
			c->s->out[c->o++] = (uint8_t)q;
			return (size_t)after;
		}
		if (nlen + 1 + b > DLB_MAX_NAME) {
			ct_fail(c, DLB_EMALF);
			return 0;
		}
		nlen += 1 + (size_t)b;
		if (b != 0)
			ct_map(c, pos, c->o);
		ct_copy(c, pos, 1 + (size_t)b);
		if (c->err != DLB_OK || b == 0)
			return c->err == DLB_OK ? (size_t)after : 0;
		pos += 1 + (size_t)b;
	}
}

/* <character-string>s, as in NAPTR. */
static size_t
ct_string(struct ct *c, size_t src, size_t limit)
{
	if (c->err != DLB_OK)
		return 0;
	if (src >= limit || limit - src - 1 < c->pkt[src]) {
		ct_fail(c, DLB_EMALF);
		return 0;
	}
	ct_copy(c, src, 1 + (size_t)c->pkt[src]);
	return src + 1 + c->pkt[src];
}

static size_t
ct_fixed(struct ct *c, size_t src, size_t limit, size_t n)
{
	if (c->err != DLB_OK)
		return 0;
	if (src > limit || limit - src < n) {
		ct_fail(c, DLB_EMALF);
		return 0;
	}
	ct_copy(c, src, n);
	return src + n;
}

/*
 * The RDATA of @rr: types with names inside (RFC 1035 ones may be
 * compressed, the later ones must not be but are accepted compressed).
 */
static void
ct_rdata(struct ct *c, const struct rr *rr)
{
	size_t p = rr->rdata, end = rr->end;

	switch (rr->type) {
	case T_NS: case T_MD: case T_MF: case T_CNAME: case T_MB: case T_MG: case T_MR:
	case T_PTR:
		p = ct_name(c, p, end, true);
		break;
	case T_MINFO:
		p = ct_name(c, p, end, true);
		p = ct_name(c, p, end, true);
		break;
	case T_MX:
		p = ct_fixed(c, p, end, 2);
		p = ct_name(c, p, end, true);
		break;
	case T_SOA:
		p = ct_name(c, p, end, true);
		p = ct_name(c, p, end, true);
		p = ct_fixed(c, p, end, 20);
		break;
	case T_RP:
		p = ct_name(c, p, end, false);
		p = ct_name(c, p, end, false);
		break;
	case T_AFSDB: case T_RT: case T_KX:
		p = ct_fixed(c, p, end, 2);
		p = ct_name(c, p, end, false);
		break;
	case T_PX:
		p = ct_fixed(c, p, end, 2);
		p = ct_name(c, p, end, false);
		p = ct_name(c, p, end, false);
		break;
	case T_SRV:
		p = ct_fixed(c, p, end, 6);
		p = ct_name(c, p, end, false);
		break;
	case T_DNAME:
		p = ct_name(c, p, end, false);
		break;
	case T_NAPTR:
		p = ct_fixed(c, p, end, 4);
		for (int i = 0; i < 3; i++)
			p = ct_string(c, p, end);
		p = ct_name(c, p, end, false);
		break;
	default:
		ct_copy(c, p, rr->rdlen);
		return;
	}
	if (c->err == DLB_OK && p != end)
		ct_fail(c, DLB_EMALF);	/* names and fields must fill the RDATA exactly */
}

static bool
type_listed(uint16_t type, const uint16_t *types, int ntypes)
{
	for (int i = 0; i < ntypes; i++) {
		if (types[i] == type)
			return true;
	}
	return false;
}

int
dlb_wire_clear_types(uint8_t *pkt, size_t len, size_t cap, const uint16_t *types, int ntypes)
{
	struct ct c = { .pkt = pkt, .len = len, .s = &ct_buf };
	unsigned counts[3] = { 0, 0, 0 };
	struct rr_iter it;
	struct rr rr;
	bool any = false;
	int r;

	/* first pass: is the message sound, and is there anything to remove? (OPT never is) */
	r = rr_iter_init(&it, pkt, len);
	if (r != DLB_OK)
		return r;
	while ((r = rr_next(&it, &rr)) > 0) {
		if (rr.type != DLB_TYPE_OPT && type_listed(rr.type, types, ntypes))
			any = true;
	}
	if (r < 0)
		return r;
	if (!any)
		return (int)len;

	memset(c.s->mapped, 0, sizeof(c.s->mapped));
	c.work = DLB_WIRE_MAX_WORK + 4 * len;
	/* header and questions as they are; their labels stay where they were */
	ct_copy(&c, 0, it.qend);
	for (size_t q = DLB_DNS_HDR; q < it.qend;) {
		size_t p = q;

		while (pkt[p] != 0 && (pkt[p] & 0xc0) == 0) {
			ct_map(&c, p, p);
			p += 1 + (size_t)pkt[p];
		}
		q = (size_t)dlb_wire_skip_name(pkt, len, q) + 4;
	}
	rr_iter_init(&it, pkt, len);
	while (c.err == DLB_OK && rr_next(&it, &rr) > 0) {
		size_t rdlen_at;

		if (rr.type != DLB_TYPE_OPT && type_listed(rr.type, types, ntypes))
			continue;
		ct_name(&c, rr.owner, rr.fixed, true);
		ct_copy(&c, rr.fixed, ANS_RR_FIXED);
		rdlen_at = c.o - 2;
		ct_rdata(&c, &rr);
		if (c.err == DLB_OK)
			dlb_wr16(c.s->out + rdlen_at, (uint16_t)(c.o - rdlen_at - 2));
		counts[rr.section - 1]++;
	}
	/* bytes after the last record are not ours to judge: they stay */
	ct_copy(&c, it.pos, len - it.pos);
	if (c.err != DLB_OK)
		return c.err;
	if (c.o > cap)
		return DLB_ESPACE;
	dlb_wr16(c.s->out + 6, (uint16_t)counts[0]);
	dlb_wr16(c.s->out + 8, (uint16_t)counts[1]);
	dlb_wr16(c.s->out + 10, (uint16_t)counts[2]);
	memcpy(pkt, c.s->out, c.o);
	return (int)c.o;
}
