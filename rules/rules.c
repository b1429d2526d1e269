/*
 * rules.c - selectors, actions, rules and chains (rules.h, docs/architecture.md):
 * reference counting and teardown of the C objects the Lua side builds,
 * their evaluation (one switch per selector and per action), the published
 * chains, and the query and response chain walks with their counters.
 *
 * Hot path: dlb_sel_match, dlb_act_run and dlb_rules_run_* allocate nothing,
 * make no system call and take no lock, except MaxQPSIPRule's shard
 * spinlock (qps.c, which also grows its tables now and then), and what
 * RegexRule's regexec, LogAction's write(2) and Lua functions do.
 *
 * Thread: the dlb_rules_run_*, match and run functions and dlb_rules_chain
 * from any worker (inside its epoch section); everything else main thread.
 */
#include "rules/rules.h"
#include "rules/tee.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/core/config.h"
#include "dnslb/store/kvstore.h"
#include "dnslb/core/rcu.h"
#include "dnslb/core/stats.h"
#include "dnslb/core/util.h"

/*
 * The packet and the who/how fields are left alone. The response-only
 * fields get a query's values (response false, cache_hit false, be_index
 * -1): a response view sets them after this call.
 */
void
dlb_dq_reset_decisions(struct dlb_dq *dq)
{
	dq->pool = NULL;
	dq->pool_set = false;
	dq->skip_cache = false;
	dq->tempfail_ttl = -1;
	dq->delay_ms = 0;
	dq->use_ecs = -1;
	dq->ecs_override = -1;
	dq->ecs_prefix_v4 = -1;
	dq->ecs_prefix_v6 = -1;
	memset(&dq->ecs_fixed, 0, sizeof(dq->ecs_fixed));
	dq->ecs_fixed_bits = 0;
	dq->max_returned_ttl = 0;
	dlb_tags_clear(&dq->tags);
	dq->response = false;
	dq->cache_hit = false;
	dq->be_index = -1;
	dq->qlabels_ready = false;
}

/*
 * The qname split into labels for this query: split at the first call,
 * shared by every suffix / name set lookup until the dq is rebuilt (the
 * memset up to tags, dlb_dq_reset_decisions) or Lua code ran (dq_lua_ran).
 */
static struct dlb_qname_labels *
dq_qlabels(struct dlb_dq *dq)
{
	if (!dq->qlabels_ready) {
		dlb_qname_labels_init(&dq->qlabels, dq->m->qname_lc, dq->m->qname_len);
		dq->qlabels_ready = true;
	}
	return &dq->qlabels;
}

/* Lua code ran on @dq: it may have replaced the message (dq:setContent). */
static inline void
dq_lua_ran(struct dlb_dq *dq)
{
	dq->qlabels_ready = false;
}

/* ---- message walking (responses, record counts) ------------------------------ */

/* What one bounded pass over a message found. */
struct msg_scan {
	int section;		/* in: count records of @type in this section (0..3), -1: none */
	uint16_t type;
	uint32_t count;		/* out */
	bool has_opt;		/* the first OPT RR of the additional section */
	uint32_t opt_ttl;	/* ext rcode << 24 | version << 16 | DO ... */
	size_t opt_rdata, opt_rdlen;
	size_t end;		/* offset just past the last record */
};

/*
 * Walk the question and the three record sections of @pkt. Linear in @len:
 * names are skipped without following pointers, and every record consumes
 * at least 11 octets. @return 0, or a negative dlb_err for a message that
 * cannot be walked (what was found before the error point is kept).
 */
static int
scan_msg(const uint8_t *pkt, size_t len, struct msg_scan *s)
{
	size_t pos = DLB_DNS_HDR;
	int n;

	s->count = 0;
	s->has_opt = false;
	s->end = 0;
	if (len < DLB_DNS_HDR)
		return DLB_ETRUNC;
	for (unsigned i = dlb_rd16(pkt + 4); i > 0; i--) {
		if ((n = dlb_wire_skip_name(pkt, len, pos)) < 0)
			return n;
		pos = (size_t)n;
		if (len - pos < 4)
			return DLB_ETRUNC;
		if (s->section == 0 && dlb_rd16(pkt + pos) == s->type)
			s->count++;
		pos += 4;
	}
	for (int sec = 1; sec <= 3; sec++) {
		for (unsigned i = dlb_rd16(pkt + 4 + 2 * sec); i > 0; i--) {
			uint16_t type, rdlen;

			if ((n = dlb_wire_skip_name(pkt, len, pos)) < 0)
				return n;
			pos = (size_t)n;
			if (len - pos < 10)
				return DLB_ETRUNC;
			type = dlb_rd16(pkt + pos);
			rdlen = dlb_rd16(pkt + pos + 8);
			if (len - pos - 10 < rdlen)
				return DLB_ETRUNC;
			if (sec == s->section && type == s->type)
				s->count++;
			if (sec == 3 && type == DLB_TYPE_OPT && !s->has_opt) {
				s->has_opt = true;
				s->opt_ttl = dlb_rd32(pkt + pos + 4);
				s->opt_rdata = pos + 10;
				s->opt_rdlen = rdlen;
			}
			pos += 10 + (size_t)rdlen;
		}
	}
	s->end = pos;
	return 0;
}

/* The OPT RR of @dq's packet: from the parse for queries, by a walk for responses. */
static bool
find_opt(const struct dlb_dq *dq, uint32_t *ttl, size_t *rdata, size_t *rdlen)
{
	const struct dlb_dnsmsg *m = dq->m;
	struct msg_scan s = { .section = -1 };

	if (!dq->response) {
		if (!m->has_opt)
			return false;
		*ttl = (uint32_t)m->ext_rcode << 24 | (uint32_t)m->edns_version << 16 |
		       (m->do_bit ? 0x8000u : 0);
		*rdata = m->opt_rdata_off;
		*rdlen = m->opt_rdlen;
		return true;
	}
	(void)scan_msg(dq->pkt, dq->len, &s);
	if (!s.has_opt)
		return false;
	*ttl = s.opt_ttl;
	*rdata = s.opt_rdata;
	*rdlen = s.opt_rdlen;
	return true;
}

static bool
opt_has_option(const uint8_t *pkt, size_t rdata, size_t rdlen, uint16_t code)
{
	size_t pos = 0;

	while (rdlen - pos >= 4) {
		uint16_t olen = dlb_rd16(pkt + rdata + pos + 2);

		if (dlb_rd16(pkt + rdata + pos) == code)
			return true;
		pos += 4 + (size_t)olen;
		if (pos > rdlen)
			break;
	}
	return false;
}

/* ---- selectors ------------------------------------------------------------------ */

struct dlb_sel *
dlb_sel_new(enum dlb_sel_type type)
{
	struct dlb_sel *s = calloc(1, sizeof(*s));

	if (s == NULL)
		return NULL;
	s->type = (uint16_t)type;
	s->refs = 1;
	if (type == DLB_SEL_NMG)
		dlb_nmg_init(&s->u.nmg.g);
	return s;
}

static void
free_regex(regex_t *r)
{
	if (r != NULL) {
		regfree(r);
		free(r);
	}
}

void
dlb_sel_ref(struct dlb_sel *s)
{
	s->refs++;
}

void
dlb_sel_unref(struct dlb_sel *s)
{
	if (s == NULL || --s->refs > 0)
		return;
	switch (s->type) {
	case DLB_SEL_AND:
	case DLB_SEL_OR:
		for (int i = 0; i < s->u.list.n; i++)
			dlb_sel_unref(s->u.list.v[i]);
		free(s->u.list.v);
		break;
	case DLB_SEL_NOT:
		dlb_sel_unref(s->u.sub);
		break;
	case DLB_SEL_QNAME_SET:
		dlb_name_set_free(s->u.nameset);
		break;
	case DLB_SEL_SUFFIX:
		dlb_suffix_set_free(s->u.suffixes);
		break;
	case DLB_SEL_REGEX:
		free_regex(s->u.re);
		break;
	case DLB_SEL_NMG:
		dlb_nmg_deinit(&s->u.nmg.g);
		break;
	case DLB_SEL_MAXQPSIP:
		dlb_qps_ip_free(s->u.qpsip);
		break;
	case DLB_SEL_MAXQPS:
		free(s->u.bucket);
		break;
	case DLB_SEL_TAG:
		free(s->u.tag.name);
		free(s->u.tag.value);
		break;
	case DLB_SEL_POOL_AVAILABLE:
	case DLB_SEL_POOL_OUTSTANDING:
		free(s->u.pool.name);
		break;
	case DLB_SEL_KVS:
		dlb_kvstore_unref(s->u.kvs.store);
		break;
	case DLB_SEL_TIMED_IPSET:
		dlb_timed_ipset_unref(s->u.tips);
		break;
	case DLB_SEL_HTTP_PATH_REGEX:
		free_regex(s->u.re);
		break;
	case DLB_SEL_HTTP_HEADER:
		free(s->u.hdr.name);
		free_regex(s->u.hdr.re);
		break;
	case DLB_SEL_HTTP_PATH:
	case DLB_SEL_SNI:
		free(s->u.str);
		break;
	default:
		break;
	}
	free(s->desc);
	free(s);
}

/* dnsdist's Regex: POSIX extended, case-insensitive. NULL with regerror's message in @err. */
static regex_t *
compile_regex(const char *re, char *err, size_t errlen)
{
	regex_t *r = malloc(sizeof(*r));
	int rc;

	if (r == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	rc = regcomp(r, re, REG_EXTENDED | REG_ICASE | REG_NOSUB);
	if (rc != 0) {
		regerror(rc, r, err, errlen);
		free(r);
		return NULL;
	}
	return r;
}

int
dlb_sel_set_regex(struct dlb_sel *s, const char *re, char *err, size_t errlen)
{
	regex_t *r = compile_regex(re, err, errlen);

	if (r == NULL)
		return -1;
	free_regex(s->u.re);
	s->u.re = r;
	return 0;
}

int
dlb_sel_set_http_header(struct dlb_sel *s, const char *name, const char *re, char *err,
			size_t errlen)
{
	regex_t *r = compile_regex(re, err, errlen);
	char *n = strdup(name);

	if (r == NULL || n == NULL) {
		if (r == NULL)
			free(n);
		else
			snprintf(err, errlen, "out of memory");
		free_regex(r);
		return -1;
	}
	/* HTTP/2 sends names in lowercase, and HTTP/1's are lowercased on reading */
	for (char *p = n; *p; p++)
		if (*p >= 'A' && *p <= 'Z')
			*p = (char)(*p - 'A' + 'a');
	free(s->u.hdr.name);
	free_regex(s->u.hdr.re);
	s->u.hdr.name = n;
	s->u.hdr.re = r;
	return 0;
}

static bool
cmp_op(int op, uint64_t a, uint64_t b)
{
	switch (op) {
	case DLB_CMP_EQ: return a == b;
	case DLB_CMP_NE: return a != b;
	case DLB_CMP_GT: return a > b;
	case DLB_CMP_GE: return a >= b;
	case DLB_CMP_LT: return a < b;
	case DLB_CMP_LE: return a <= b;
	default: return false;
	}
}

static bool
match_regex(const regex_t *re, const struct dlb_dnsmsg *m)
{
	char text[DLB_WIRE_NAME_TEXT_MAX];
	int n;

	if (re == NULL)
		return false;
	n = dlb_wire_name_to_text(m->qname_lc, m->qname_len, text, sizeof(text));
	if (n <= 0)
		return false;
	/* dnsdist matches the name without its trailing dot; the root is "" */
	if (text[n - 1] == '.')
		text[n - 1] = '\0';
	return regexec(re, text, 0, NULL, 0) == 0;
}

/* ---- the HTTP and SNI view ------------------------------------------------------- */

/* The fields dnsdist 1.7.3's HTTP server (h2o) keeps out of a request's
 * header list: it reads them itself. */
static bool
h2o_special(const char *name)
{
	static const char *const special[] = {
		"host", "content-length", "transfer-encoding", "upgrade", "expect",
	};

	for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++)
		if (strcmp(name, special[i]) == 0)
			return true;
	return false;
}

bool
dlb_dq_http_header_shown(const struct dlb_dq_http *h, size_t i)
{
	const char *name = h->headers[i].name;

	if (h2o_special(name))
		return false;
	/* dnsdist puts them in a map that keeps the first value of a name */
	for (size_t j = 0; j < i; j++)
		if (strcmp(h->headers[j].name, name) == 0)
			return false;
	return true;
}

void
dlb_dq_http_set_response(struct dlb_dq_http *h, uint16_t status, const uint8_t *body,
			 size_t len, const char *ctype)
{
	size_t n = ctype != NULL ? strlen(ctype) : 0;

	h->status = status;
	h->body_len = len < h->body_cap ? len : h->body_cap;
	if (h->body_len > 0)
		memcpy(h->body, body, h->body_len);
	if (n >= sizeof(h->content_type))
		n = sizeof(h->content_type) - 1;
	memcpy(h->content_type, ctype != NULL ? ctype : "", n);
	h->content_type[n] = '\0';
}

/* HTTPHeaderRule: the first value of the name matches (a search, not anchored). */
static bool
match_http_header(const struct dlb_sel *s, const struct dlb_dq_http *h)
{
	if (h == NULL || !h->doh)
		return false;
	for (size_t i = 0; i < h->nheaders; i++)
		if (strcmp(h->headers[i].name, s->u.hdr.name) == 0 && !h2o_special(s->u.hdr.name))
			return regexec(s->u.hdr.re, h->headers[i].value, 0, NULL, 0) == 0;
	return false;
}

/* HTTPPathRegexRule: the path without its query string matches. */
static bool
match_http_path(const regex_t *re, const struct dlb_dq_http *h)
{
	regmatch_t range[1];

	if (h == NULL || !h->doh || re == NULL)
		return false;
	range[0].rm_so = 0;
	range[0].rm_eo = (regoff_t)h->query_at;
	return regexec(re, h->path, 1, range, REG_STARTEND) == 0;
}

static unsigned
label_count(const uint8_t *name, size_t len)
{
	unsigned n = 0;

	for (size_t pos = 0; pos < len && name[pos] != 0; pos += 1 + (size_t)name[pos])
		n++;
	return n;
}

static int
sockaddr_port(const struct sockaddr *sa)
{
	if (sa == NULL)
		return -1;
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)(const void *)sa)->sin_port);
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)(const void *)sa)->sin6_port);
	return -1;
}

/* Pool @name in the dq's snapshot (or, with none, the builder's). */
static const struct dlb_pool *
dq_find_pool(const struct dlb_dq *dq, const char *name)
{
	if (dq->snap != NULL)
		return dlb_snapshot_find_pool(dq->snap, name);
	return dq->cfg != NULL ? dlb_config_find_pool(dq->cfg, name) : NULL;
}

static bool
pool_available(const struct dlb_dq *dq, const char *name)
{
	const struct dlb_pool_state *ps;
	struct dlb_pool_state tmp;
	const struct dlb_pool *p;

	if (name == NULL || (p = dq_find_pool(dq, name)) == NULL)
		return false;
	ps = dlb_pool_state(dq->snap, p, &tmp);
	for (int i = 0; i < ps->n; i++) {
		if (dlb_backend_is_up(ps->members[i]))
			return true;
	}
	return false;
}

static uint64_t
pool_outstanding(const struct dlb_dq *dq, const char *name)
{
	const struct dlb_config *cfg = dq->cfg;
	const struct dlb_pool_state *ps;
	struct dlb_pool_state tmp;
	const struct dlb_pool *p;
	uint64_t sum = 0;

	if (cfg == NULL || name == NULL || cfg->be_totals == NULL ||
	    (p = dq_find_pool(dq, name)) == NULL)
		return 0;
	ps = dlb_pool_state(dq->snap, p, &tmp);
	for (int i = 0; i < ps->n; i++) {
		struct dlb_be_totals t;

		memset(&t, 0, sizeof(t));
		cfg->be_totals(ps->members[i]->index, &t);
		sum += t.outstanding;
	}
	return sum;
}

/* @st: where LuaRule errors are counted (NULL: not counted). */
static bool sel_match_slow(const struct dlb_sel *s, struct dlb_dq *dq, struct dlb_stats *st);

/*
 * The chain walk's test: the commonest cheap selectors inline, the rest
 * through the switch (a chain of 100 QTypeRule is a loop of loads and
 * compares, with no call).
 */
static inline bool
sel_match(const struct dlb_sel *s, struct dlb_dq *dq, struct dlb_stats *st)
{
	switch (s->type) {
	case DLB_SEL_QTYPE:
		return dq->m->qtype == s->u.num;
	case DLB_SEL_ALL:
		return true;
	default:
		return sel_match_slow(s, dq, st);
	}
}

static bool
sel_match_slow(const struct dlb_sel *s, struct dlb_dq *dq, struct dlb_stats *st)
{
	const struct dlb_dnsmsg *m = dq->m;

	switch ((enum dlb_sel_type)s->type) {
	case DLB_SEL_ALL:
		return true;
	case DLB_SEL_AND:
		for (int i = 0; i < s->u.list.n; i++) {
			if (!sel_match(s->u.list.v[i], dq, st))
				return false;
		}
		return true;
	case DLB_SEL_OR:
		for (int i = 0; i < s->u.list.n; i++) {
			if (sel_match(s->u.list.v[i], dq, st))
				return true;
		}
		return false;
	case DLB_SEL_NOT:
		return !sel_match(s->u.sub, dq, st);
	case DLB_SEL_QNAME:
		return dlb_wire_name_equal_ci(m->qname_lc, m->qname_len, s->u.name.lc,
					      s->u.name.len);
	case DLB_SEL_QNAME_SET:
		return s->u.nameset != NULL &&
		       dlb_name_set_match_labels(s->u.nameset, m->qname_lc, m->qname_len,
						 dq_qlabels(dq));
	case DLB_SEL_SUFFIX:
		return s->u.suffixes != NULL &&
		       dlb_suffix_set_match_labels(s->u.suffixes, m->qname_lc, dq_qlabels(dq));
	case DLB_SEL_REGEX:
		return match_regex(s->u.re, m);
	case DLB_SEL_QTYPE:
		return m->qtype == s->u.num;
	case DLB_SEL_QCLASS:
		return m->qclass == s->u.num;
	case DLB_SEL_OPCODE:
		/* from the packet: Lua or an earlier action may have changed the header */
		return ((dq->pkt[2] >> 3) & 0xf) == s->u.num;
	case DLB_SEL_RD:
		return (dq->pkt[2] & 0x01) != 0;
	case DLB_SEL_DNSSEC: {
		uint32_t ttl;
		size_t rd, rl;

		if (!dq->response)
			return m->has_opt && m->do_bit;
		return find_opt(dq, &ttl, &rd, &rl) && (ttl & 0x8000u) != 0;
	}
	case DLB_SEL_NMG: {
		const struct sockaddr *sa = s->u.nmg.src ? dq->remote : dq->local;

		return sa != NULL && dlb_nmg_match(&s->u.nmg.g, sa);
	}
	case DLB_SEL_DSTPORT:
		return sockaddr_port(dq->local) == (int)s->u.num;
	case DLB_SEL_TCP:
		return s->u.flag == dq->tcp;
	case DLB_SEL_MAXQPSIP:
		return s->u.qpsip != NULL && dq->remote != NULL &&
		       dlb_qps_ip_over(s->u.qpsip, dq->remote, dq->now);
	case DLB_SEL_MAXQPS:
		return s->u.bucket != NULL && dlb_bucket_take(s->u.bucket, dq->now);
	case DLB_SEL_PROBA:
		if (s->u.proba >= 1.0)
			return true;
		if (!(s->u.proba > 0.0) || dq->rng == NULL)
			return false;
		return (double)dlb_rng_u32(dq->rng) < s->u.proba * 4294967296.0;
	case DLB_SEL_RCODE:
		return dq->len >= DLB_DNS_HDR && (dq->pkt[3] & 0xf) == s->u.num;
	case DLB_SEL_ERCODE: {
		uint32_t ttl = 0, rcode;
		size_t rd, rl;

		if (dq->len < DLB_DNS_HDR)
			return false;
		rcode = dq->pkt[3] & 0xf;
		if (find_opt(dq, &ttl, &rd, &rl))
			rcode |= (ttl >> 24) << 4;
		return rcode == s->u.num;
	}
	case DLB_SEL_EDNS_OPTION: {
		uint32_t ttl;
		size_t rd, rl;

		return find_opt(dq, &ttl, &rd, &rl) &&
		       opt_has_option(dq->pkt, rd, rl, (uint16_t)s->u.num);
	}
	case DLB_SEL_EDNS_VERSION: {
		uint32_t ttl;
		size_t rd, rl;

		return find_opt(dq, &ttl, &rd, &rl) && ((ttl >> 16) & 0xff) > s->u.num;
	}
	case DLB_SEL_PAYLOAD_SIZE:
		return cmp_op(s->u.cmp.op, dq->len, s->u.cmp.size);
	case DLB_SEL_RECORDS_COUNT: {
		uint16_t c;

		if (s->u.count.section > 3 || dq->len < DLB_DNS_HDR)
			return false;
		c = dlb_rd16(dq->pkt + 4 + 2 * s->u.count.section);
		return c >= s->u.count.min && c <= s->u.count.max;
	}
	case DLB_SEL_RECORDS_TYPE_COUNT: {
		struct msg_scan sc = { .section = s->u.count.section, .type = s->u.count.type };

		if (s->u.count.section > 3 || scan_msg(dq->pkt, dq->len, &sc) < 0)
			return false;
		return sc.count >= s->u.count.min && sc.count <= s->u.count.max;
	}
	case DLB_SEL_LABELS_COUNT: {
		unsigned n = label_count(m->qname_lc, m->qname_len);

		return n < s->u.range.min || n > s->u.range.max;
	}
	case DLB_SEL_WIRE_LENGTH:
		return m->qname_len < s->u.range.min || m->qname_len > s->u.range.max;
	case DLB_SEL_TRAILING_DATA: {
		struct msg_scan sc = { .section = -1 };

		if (!dq->response)
			return m->trailing;
		return scan_msg(dq->pkt, dq->len, &sc) == 0 && sc.end < dq->len;
	}
	case DLB_SEL_TAG: {
		const char *v = s->u.tag.name ? dlb_tags_get(&dq->tags, s->u.tag.name) : NULL;

		return v != NULL && (s->u.tag.value == NULL || strcmp(v, s->u.tag.value) == 0);
	}
	case DLB_SEL_POOL_AVAILABLE:
		return pool_available(dq, s->u.pool.name);
	case DLB_SEL_POOL_OUTSTANDING:
		return pool_outstanding(dq, s->u.pool.name) > s->u.pool.limit;
	case DLB_SEL_LUA: {
		int rc;

		if (dq->lua == NULL)
			return false;
		rc = dlb_luaw_rule(dq->lua, s->u.lua.fn, s->u.lua.src, dq);
		dq_lua_ran(dq);
		if (rc < 0) {
			if (st != NULL)
				st->lua_errors++;
			return false;
		}
		return rc > 0;
	}
	case DLB_SEL_KVS:
		return s->u.kvs.store != NULL &&
		       dlb_kvs_lookup(s->u.kvs.store, &s->u.kvs.key, dq, NULL, NULL);
	case DLB_SEL_TIMED_IPSET:
		return s->u.tips != NULL && dlb_timed_ipset_match(s->u.tips, dq->remote);
	case DLB_SEL_HTTP_HEADER:
		return match_http_header(s, dq->http);
	case DLB_SEL_HTTP_PATH:
		/* the path before its query string, exactly (case-sensitive) */
		return dq->http != NULL && dq->http->doh &&
		       strlen(s->u.str) == dq->http->query_at &&
		       memcmp(s->u.str, dq->http->path, dq->http->query_at) == 0;
	case DLB_SEL_HTTP_PATH_REGEX:
		return match_http_path(s->u.re, dq->http);
	case DLB_SEL_SNI:
		/* dnsdist compares its SNI string, "" when there is none: SNIRule("")
		 * matches every query without one, plain UDP and TCP included */
		return strcmp(s->u.str, dq->http != NULL && dq->http->sni != NULL ? dq->http->sni
										 : "") == 0;
	case DLB_SEL__COUNT:
		break;
	}
	return false;
}

bool
dlb_sel_match(const struct dlb_sel *s, struct dlb_dq *dq)
{
	return sel_match(s, dq, NULL);
}

const char *
dlb_sel_desc(const struct dlb_sel *s, char *buf, size_t bufsz)
{
	if (s->type == DLB_SEL_TIMED_IPSET && s->u.tips != NULL) {
		/* dnsdist counts the live addresses each time it is shown */
		snprintf(buf, bufsz, "Src: %zu ips", dlb_timed_ipset_live(s->u.tips));
		return buf;
	}
	return s->desc != NULL ? s->desc : "";
}

/* ---- actions -------------------------------------------------------------------- */

struct dlb_act *
dlb_act_new(enum dlb_act_type type)
{
	struct dlb_act *a = calloc(1, sizeof(*a));

	if (a == NULL)
		return NULL;
	a->type = (uint16_t)type;
	a->response = type >= DLB_RACT_ALLOW;
	a->refs = 1;
	return a;
}

void
dlb_act_ref(struct dlb_act *a)
{
	a->refs++;
}

void
dlb_act_unref(struct dlb_act *a)
{
	if (a == NULL || --a->refs > 0)
		return;
	switch (a->type) {
	case DLB_ACT_POOL:
		free(a->u.pool.name);
		break;
	case DLB_ACT_CONTINUE:
		dlb_act_unref(a->u.sub);
		break;
	case DLB_ACT_SPOOF:
	case DLB_ACT_SPOOF_CNAME:
	case DLB_ACT_SPOOF_RAW:
	case DLB_ACT_SPOOF_SVC:
		free(a->u.spoof.add);
		free(a->u.spoof.addrs);
		for (int i = 0; i < a->u.spoof.nraw; i++)
			free(a->u.spoof.raw[i]);
		free(a->u.spoof.raw);
		free(a->u.spoof.raw_len);
		break;
	case DLB_ACT_QPS:
		free(a->u.bucket);
		break;
	case DLB_ACT_QPS_POOL:
		free(a->u.qpspool.bucket);
		free(a->u.qpspool.pool);
		break;
	case DLB_ACT_TAG:
	case DLB_RACT_TAG:
		free(a->u.tag.name);
		free(a->u.tag.value);
		break;
	case DLB_ACT_LOG:
	case DLB_RACT_LOG:
		dlb_log_free(a->u.log);
		break;
	case DLB_ACT_TEE:
		dlb_tee_free(a->u.tee);
		break;
	case DLB_ACT_HTTP_STATUS:
		free(a->u.http.body);
		free(a->u.http.ctype);
		break;
	case DLB_RACT_LIMIT_TTL:
		free(a->u.ttl.types);
		break;
	case DLB_RACT_CLEAR_RECORD_TYPES:
		free(a->u.types.types);
		break;
	case DLB_ACT_SET_EDNS_OPTION:
		free(a->u.ednsopt.data);
		break;
	case DLB_ACT_KVS:
		dlb_kvstore_unref(a->u.kvs.store);
		free(a->u.kvs.tag);
		break;
	default:
		break;
	}
	free(a->desc);
	free(a);
}

/*
 * What a query action's outcome counts, applied by dlb_rules_run_query only
 * when that outcome is the chain's (a ContinueAction swallows its action's
 * drop, for instance).
 */
enum {
	C_DROP = 1 << 0,	/* rule-drop */
	C_NXDOMAIN = 1 << 1,	/* rule-nxdomain */
	C_REFUSED = 1 << 2,	/* rule-refused */
	C_SERVFAIL = 1 << 3,	/* rule-servfail */
	C_TRUNC = 1 << 4,	/* rule-truncated */
	C_SELF = 1 << 5,	/* self-answered */
};

static unsigned
rcode_counter(unsigned rcode)
{
	switch (rcode) {
	case DLB_RCODE_NXDOMAIN: return C_NXDOMAIN;
	case DLB_RCODE_REFUSED: return C_REFUSED;
	case DLB_RCODE_SERVFAIL: return C_SERVFAIL;
	default: return 0;
	}
}

static inline const struct dlb_selfanswer_opts *
selfans(const struct dlb_dq *dq)
{
	return dq->set != NULL ? &dq->set->selfans : NULL;
}

/*
 * An answer builder returned @n: the answer is in place (DLB_R_ANSWER), or
 * it did not fit in dq->cap and the caller answers SERVFAIL (still a
 * self-answered query).
 */
static enum dlb_verdict_r
answered(struct dlb_dq *dq, int n, unsigned bits, unsigned *out)
{
	if (n < 0) {
		*out = C_SELF;
		return DLB_R_SERVFAIL;
	}
	dq->len = (size_t)n;
	*out = bits | C_SELF;
	return DLB_R_ANSWER;
}

static void
set_pool(struct dlb_dq *dq, const char *name)
{
	dq->pool_set = true;
	dq->pool = dq_find_pool(dq, name ? name : "");
}

static void
clear_rd(struct dlb_dq *dq)
{
	dq->pkt[2] &= (uint8_t)~0x01;
	dq->m->flags &= (uint16_t)~DLB_F_RD;
}

static uint32_t
parse_ms(const char *s)
{
	unsigned long v = strtoul(s, NULL, 10);

	return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

/* "192.0.2.1", "2001:db8::1", "192.0.2.1, 192.0.2.2": @return how many, 0 if any is not an IP. */
static int
parse_addrs(const char *s, struct sockaddr_storage *out, int max)
{
	int n = 0;

	while (*s != '\0') {
		char tok[INET6_ADDRSTRLEN + 1];
		size_t l;

		while (*s == ' ' || *s == ',')
			s++;
		if (*s == '\0')
			break;
		l = strcspn(s, ", ");
		if (l >= sizeof(tok))
			return 0;
		memcpy(tok, s, l);
		tok[l] = '\0';
		s += l;
		if (n < max) {
			struct sockaddr_storage *ss = &out[n];

			memset(ss, 0, sizeof(*ss));
			if (inet_pton(AF_INET, tok,
				      &((struct sockaddr_in *)(void *)ss)->sin_addr) == 1)
				ss->ss_family = AF_INET;
			else if (inet_pton(AF_INET6, tok,
					   &((struct sockaddr_in6 *)(void *)ss)->sin6_addr) == 1)
				ss->ss_family = AF_INET6;
			else
				return 0;
			n++;
		}
	}
	return n;
}

#define LUA_SPOOF_MAX_ADDRS 16

/*
 * The string a Lua action returns with its value (SpoofPacket's can be a
 * whole message): per thread, so the query path needs no allocation and no
 * 64 KiB stack frame.
 */
static _Thread_local char lua_arg[DLB_MAX_UDP_RESPONSE + 1];

/*
 * A query the function turned into its response (QR set, HeaderModify):
 * as dnsdist 1.7.3's fixUpQueryTurnedResponse, the header as the function
 * left it, and a lone OPT RR made the self-generated answers' one (payload
 * 1232): what RCodeAction does with the header's own bits.
 */
static enum dlb_verdict_r
turned_response(struct dlb_dq *dq, unsigned *out)
{
	struct dlb_dnsmsg m = *dq->m;
	uint16_t f = dlb_rd16(dq->pkt + 2);
	struct dlb_answer_opts o = {
		.aa = (f & DLB_F_AA) != 0, .aa_set = true,
		.ad = (f & DLB_F_AD) != 0,
		.ra = (f & DLB_F_RA) != 0, .ra_set = true,
		.ttl = 60,
	};

	if (f & DLB_F_TC)
		return answered(dq, (int)dq->len, 0, out);	/* kept as it is */
	m.flags = f;
	return answered(dq, dlb_answer_rcode(dq->pkt, dq->len, dq->cap, &m, f & 0x0f, &o,
					     selfans(dq)),
			0, out);
}

/* LuaAction: map the DNSAction the function returned. */
static enum dlb_verdict_r
run_lua_query(const struct dlb_act *a, struct dlb_dq *dq, struct dlb_stats *st, unsigned *out)
{
	static const struct dlb_answer_opts spoof_opts = { .ttl = 60 };
	size_t arglen = 0;
	int rc;

	lua_arg[0] = '\0';
	rc = dq->lua == NULL ? -1 :
	     dlb_luaw_action(dq->lua, a->u.lua.fn, a->u.lua.src, dq, false, lua_arg,
			     sizeof(lua_arg), &arglen);
	dq_lua_ran(dq);
	if (arglen >= sizeof(lua_arg))
		arglen = sizeof(lua_arg) - 1;

	switch (rc) {
	case DLB_DA_DROP:
		*out = C_DROP;
		return DLB_R_DROP;
	case DLB_DA_NXDOMAIN:
	case DLB_DA_REFUSED:
	case DLB_DA_SERVFAIL: {
		uint16_t rcode = rc == DLB_DA_NXDOMAIN ? DLB_RCODE_NXDOMAIN :
				 rc == DLB_DA_REFUSED ? DLB_RCODE_REFUSED : DLB_RCODE_SERVFAIL;
		/*
		 * dnsdist only sets QR and the rcode here: AA, AD and RA stay as the
		 * query had them (RCodeAction's RA-from-RD does not apply).
		 */
		struct dlb_answer_opts o = {
			.aa = (dq->pkt[2] & 0x04) != 0,
			.ad = (dq->pkt[3] & 0x20) != 0,
			.ra = (dq->pkt[3] & 0x80) != 0,
			.ra_set = true,
			.ttl = 60,
		};

		return answered(dq, dlb_answer_rcode(dq->pkt, dq->len, dq->cap, dq->m, rcode, &o,
						     selfans(dq)),
				rcode_counter(rcode), out);
	}
	case DLB_DA_SPOOF: {
		struct sockaddr_storage addrs[LUA_SPOOF_MAX_ADDRS];
		uint8_t name[DLB_MAX_NAME];
		int n = parse_addrs(lua_arg, addrs, LUA_SPOOF_MAX_ADDRS);

		if (n > 0) {
			n = dlb_answer_spoof_addrs(dq->pkt, dq->len, dq->cap, dq->m, addrs, n,
						   &spoof_opts, selfans(dq));
			/*
			 * No address of the query's type: dnsdist 1.7 ignores what its
			 * SpoofAction did and the query, unanswered, is forwarded.
			 */
			return n == 0 ? DLB_R_FORWARD : answered(dq, n, 0, out);
		}
		n = dlb_wire_name_from_text(lua_arg, name, sizeof(name));
		if (n <= 0)
			break;	/* neither an address nor a name: the function's error */
		return answered(dq, dlb_answer_spoof_cname(dq->pkt, dq->len, dq->cap, dq->m, name,
							   (size_t)n, &spoof_opts, selfans(dq)),
				0, out);
	}
	case DLB_DA_SPOOF_RAW: {
		uint8_t *rd = (uint8_t *)lua_arg;
		uint16_t rdlen = (uint16_t)(arglen > UINT16_MAX ? UINT16_MAX : arglen);

		return answered(dq, dlb_answer_spoof_raw(dq->pkt, dq->len, dq->cap, dq->m, &rd,
							 &rdlen, 1, &spoof_opts, selfans(dq)),
				0, out);
	}
	case DLB_DA_SPOOF_PACKET:
		if (arglen < DLB_DNS_HDR || arglen > dq->cap)
			return answered(dq, DLB_ESPACE, 0, out);
		memcpy(dq->pkt, lua_arg, arglen);
		return answered(dq, (int)arglen, 0, out);
	case DLB_DA_ALLOW:
		return DLB_R_FORWARD;
	case DLB_DA_HEADER_MODIFY:
		/*
		 * The rules stop. As dnsdist 1.7: a message with QR set (dq:spoof(),
		 * dq:setContent(), dq.dh:setQR(true)) is the answer; otherwise the
		 * query, as the function left it (dq.rcode, dq.dh:setRD(false)), is
		 * forwarded.
		 */
		if ((dq->pkt[2] & 0x80) == 0)
			return DLB_R_FORWARD;
		return turned_response(dq, out);
	case DLB_DA_POOL:
		set_pool(dq, lua_arg);
		return DLB_R_FORWARD;
	case DLB_DA_DELAY:
		if (!dq->tcp)
			dq->delay_ms = parse_ms(lua_arg);
		return DLB_R_CONTINUE;
	case DLB_DA_TRUNCATE:
		if (dq->tcp)
			return DLB_R_CONTINUE;
		return answered(dq, dlb_answer_tc(dq->pkt, dq->len, dq->cap, dq->m, selfans(dq)),
				C_TRUNC, out);
	case DLB_DA_NO_RECURSE:
		clear_rd(dq);
		return DLB_R_FORWARD;
	case DLB_DA_NONE:
	case DLB_DA_NOOP:
	case DLB_DA_SET_TAG:
		return DLB_R_CONTINUE;
	default:
		if (rc >= 0)
			return DLB_R_CONTINUE;	/* a value dnsdist 1.7 does not know */
		break;
	}
	/* the function failed: SERVFAIL, counted as a rule's SERVFAIL */
	if (st != NULL)
		st->lua_errors++;
	*out = C_SERVFAIL | C_SELF;
	return DLB_R_SERVFAIL;
}

/*
 * HTTPStatusAction, as dnsdist 1.7.3: a query that did not come over DoH
 * goes on to the next rule. A DoH query is answered with the status, body
 * and content type (the frontend sends them; an empty body: the query
 * turned into a response), the query turned into its response as
 * RCodeAction turns it (its own rcode kept): QR, aa= when given, AD as ad=
 * (else clear), RA as ra= (else as RD), a lone OPT RR made the
 * self-generated answers' one.
 */
static int
http_status(const struct dlb_act *a, struct dlb_dq *dq, unsigned *out)
{
	if (dq->http == NULL || !dq->http->doh)
		return DLB_R_CONTINUE;
	dlb_dq_http_set_response(dq->http, a->u.http.status, a->u.http.body, a->u.http.len,
				 a->u.http.ctype);
	return answered(dq, dlb_answer_rcode(dq->pkt, dq->len, dq->cap, dq->m,
					     (uint16_t)(dq->pkt[3] & 0x0f), &a->u.http.o,
					     selfans(dq)),
			0, out);
}

/*
 * Internal verdict of a ContinueAction whose action answered: the packet is
 * an answer now, and the chain goes on.
 */
#define R_ANSWER_CONTINUE 0x100

/*
 * A query action. @st: lua-errors (NULL: not counted); *@out: see C_*.
 * @return an enum dlb_verdict_r or R_ANSWER_CONTINUE.
 */
static int
run_query_action(const struct dlb_act *a, struct dlb_dq *dq, struct dlb_stats *st, unsigned *out)
{
	*out = 0;
	switch ((enum dlb_act_type)a->type) {
	case DLB_ACT_POOL:
		set_pool(dq, a->u.pool.name);
		return a->u.pool.stop ? DLB_R_FORWARD : DLB_R_CONTINUE;
	case DLB_ACT_DROP:
		*out = C_DROP;
		return DLB_R_DROP;
	case DLB_ACT_ALLOW:
		return DLB_R_FORWARD;
	case DLB_ACT_NONE:
		return DLB_R_CONTINUE;
	case DLB_ACT_CONTINUE: {
		unsigned sub = 0;
		int v;

		if (a->u.sub == NULL)
			return DLB_R_CONTINUE;
		v = run_query_action(a->u.sub, dq, st, &sub);
		/*
		 * Only an answer survives (the packet is an answer now, as dnsdist's
		 * QR bit would say): the chain goes on, and answers if nothing
		 * else stops it. A drop or a forward is swallowed.
		 */
		if (v == DLB_R_ANSWER) {
			*out = sub;
			return R_ANSWER_CONTINUE;
		}
		return DLB_R_CONTINUE;
	}
	case DLB_ACT_RCODE:
		return answered(dq, dlb_answer_rcode(dq->pkt, dq->len, dq->cap, dq->m,
						     a->u.rcode.rcode, &a->u.rcode.o, selfans(dq)),
				0, out);	/* dnsdist counts only self-answered */
	case DLB_ACT_ERCODE:
		return answered(dq, dlb_answer_rcode(dq->pkt, dq->len, dq->cap, dq->m,
						     a->u.rcode.rcode, &a->u.rcode.o, selfans(dq)),
				0, out);
	case DLB_ACT_TC:
		if (dq->tcp)
			return DLB_R_CONTINUE;	/* UDP only since 1.7 */
		return answered(dq, dlb_answer_tc(dq->pkt, dq->len, dq->cap, dq->m, selfans(dq)),
				C_TRUNC, out);
	case DLB_ACT_SPOOF: {
		int n = dlb_answer_spoof_addrs(dq->pkt, dq->len, dq->cap, dq->m, a->u.spoof.addrs,
					       a->u.spoof.naddrs, &a->u.spoof.o, selfans(dq));

		/* no address of the query's type: dnsdist 1.7's SpoofAction does nothing */
		return n == 0 ? DLB_R_CONTINUE : answered(dq, n, 0, out);
	}
	case DLB_ACT_SPOOF_CNAME:
		return answered(dq, dlb_answer_spoof_cname(dq->pkt, dq->len, dq->cap, dq->m,
							   a->u.spoof.cname, a->u.spoof.cname_len,
							   &a->u.spoof.o, selfans(dq)),
				0, out);
	case DLB_ACT_SPOOF_RAW:
		return answered(dq, dlb_answer_spoof_raw(dq->pkt, dq->len, dq->cap, dq->m,
							 a->u.spoof.raw, a->u.spoof.raw_len,
							 a->u.spoof.nraw, &a->u.spoof.o,
							 selfans(dq)),
				0, out);
	case DLB_ACT_SPOOF_SVC:
		return answered(dq, dlb_answer_spoof_svc(dq->pkt, dq->len, dq->cap, dq->m,
							 a->u.spoof.raw, a->u.spoof.raw_len,
							 a->u.spoof.nraw, a->u.spoof.add,
							 a->u.spoof.nadd, &a->u.spoof.o,
							 selfans(dq)),
				0, out);
	case DLB_ACT_NEGATIVE_SOA:
		/* dnsdist answers one question only, else goes on with the chain */
		if (dq->m->qdcount != 1)
			return DLB_R_CONTINUE;
		return answered(dq, dlb_answer_negative_soa(dq->pkt, dq->len, dq->cap, dq->m, a,
							    selfans(dq)),
				0, out);
	case DLB_ACT_QPS:
		if (a->u.bucket == NULL || dlb_bucket_take(a->u.bucket, dq->now))
			return DLB_R_CONTINUE;
		*out = C_DROP;
		return DLB_R_DROP;
	case DLB_ACT_QPS_POOL:
		if (a->u.qpspool.bucket == NULL || !dlb_bucket_take(a->u.qpspool.bucket, dq->now))
			return DLB_R_CONTINUE;
		set_pool(dq, a->u.qpspool.pool);
		return a->u.qpspool.stop ? DLB_R_FORWARD : DLB_R_CONTINUE;
	case DLB_ACT_DELAY:
		if (!dq->tcp)
			dq->delay_ms = a->u.num;
		return DLB_R_CONTINUE;
	case DLB_ACT_NO_RECURSE:
		clear_rd(dq);
		return DLB_R_CONTINUE;
	case DLB_ACT_DISABLE_VALIDATION:
		dq->pkt[3] |= 0x10;
		dq->m->flags |= DLB_F_CD;
		return DLB_R_CONTINUE;
	case DLB_ACT_SET_EDNS_OPTION: {
		bool added = false;
		int rc = dlb_wire_set_edns_option(dq->pkt, &dq->len, dq->cap, dq->m,
						  a->u.ednsopt.code, a->u.ednsopt.data,
						  a->u.ednsopt.len, &added);

		if (rc == DLB_EINVAL)
			return DLB_R_DROP;	/* dnsdist's rewrite throws: the query is lost */
		if (rc == DLB_OK && added)
			dq->edns_added = true;
		return DLB_R_CONTINUE;
	}
	case DLB_ACT_SKIP_CACHE:
		dq->skip_cache = true;
		return DLB_R_CONTINUE;
	case DLB_ACT_TEMPFAIL_TTL:
		dq->tempfail_ttl = a->u.num > INT32_MAX ? INT32_MAX : (int32_t)a->u.num;
		return DLB_R_CONTINUE;
	case DLB_ACT_ECS: {
		/* SetECSAction(v4[, v6]): the v6 value for v6 clients when there is
		 * one. Only the value: as in dnsdist, a server without
		 * useClientSubnet (or a pool without setECS) still gets none */
		bool v6 = a->u.ecs.v6.ss_family != 0 && dq->remote != NULL &&
			  dq->remote->sa_family == AF_INET6;

		dq->ecs_fixed = v6 ? a->u.ecs.v6 : a->u.ecs.v4;
		dq->ecs_fixed_bits = v6 ? a->u.ecs.bits6 : a->u.ecs.bits4;
		return DLB_R_CONTINUE;
	}
	case DLB_ACT_ECS_PREFIX:
		dq->ecs_prefix_v4 = (int16_t)a->u.ecsprefix.v4;
		dq->ecs_prefix_v6 = (int16_t)a->u.ecsprefix.v6;
		return DLB_R_CONTINUE;
	case DLB_ACT_ECS_OVERRIDE:
		dq->ecs_override = a->u.flag ? 1 : 0;
		return DLB_R_CONTINUE;
	case DLB_ACT_DISABLE_ECS:
		dq->use_ecs = 0;
		return DLB_R_CONTINUE;
	case DLB_ACT_TAG:
		if (a->u.tag.name != NULL)
			(void)dlb_tags_set(&dq->tags, a->u.tag.name,
					   a->u.tag.value ? a->u.tag.value : "");
		return DLB_R_CONTINUE;
	case DLB_ACT_MAX_RETURNED_TTL:
		dq->max_returned_ttl = a->u.num;
		return DLB_R_CONTINUE;
	case DLB_ACT_LOG:
		if (a->u.log != NULL)
			dlb_log_write(a->u.log, dq, dq->cfg != NULL && dq->cfg->verbose);
		return DLB_R_CONTINUE;
	case DLB_ACT_LUA:
		return run_lua_query(a, dq, st, out);
	case DLB_ACT_KVS:
		dlb_kvs_action(a, dq);
		return DLB_R_CONTINUE;
	case DLB_ACT_TEE:
		if (a->u.tee != NULL)
			dlb_tee_send(a->u.tee, dq->pkt, dq->len, dq->tcp);
		return DLB_R_CONTINUE;
	case DLB_ACT_HTTP_STATUS:
		return http_status(a, dq, out);
	default:
		/* a response action in a query chain (the Lua side prevents it) */
		return DLB_R_CONTINUE;
	}
}

/* ---- response actions ------------------------------------------------------------ */

struct ttl_edit {
	const struct dlb_act *a;
	bool reduce;
};

static bool
type_listed(const uint16_t *types, int n, uint16_t type)
{
	if (n <= 0)
		return true;	/* no list: every type */
	for (int i = 0; i < n; i++) {
		if (types[i] == type)
			return true;
	}
	return false;
}

static void
ttl_visit(void *ud, uint8_t *pkt, int section, uint16_t type, uint16_t cls, size_t ttl_off)
{
	const struct ttl_edit *e = ud;
	uint32_t ttl = dlb_rd32(pkt + ttl_off), nttl = ttl;

	(void)section;
	(void)cls;
	if (e->reduce) {
		nttl = (uint32_t)((uint64_t)ttl * e->a->u.num / 100);
	} else {
		if (!type_listed(e->a->u.ttl.types, e->a->u.ttl.ntypes, type))
			return;
		if (nttl < e->a->u.ttl.min)
			nttl = e->a->u.ttl.min;
		if (nttl > e->a->u.ttl.max)
			nttl = e->a->u.ttl.max;
	}
	if (nttl != ttl)
		dlb_wr32(pkt + ttl_off, nttl);
}

static enum dlb_verdict_r
run_lua_response(const struct dlb_act *a, struct dlb_dq *dq, struct dlb_stats *st)
{
	size_t arglen = 0;
	int rc;

	lua_arg[0] = '\0';
	rc = dq->lua == NULL ? -1 :
	     dlb_luaw_action(dq->lua, a->u.lua.fn, a->u.lua.src, dq, true, lua_arg,
			     sizeof(lua_arg), &arglen);
	dq_lua_ran(dq);
	switch (rc) {
	case DLB_DRA_ALLOW:
	case DLB_DRA_HEADER_MODIFY:
		return DLB_R_FORWARD;
	case DLB_DRA_DELAY:
		if (!dq->tcp)
			dq->delay_ms = parse_ms(lua_arg);
		return DLB_R_CONTINUE;
	case DLB_DRA_DROP:
		return DLB_R_DROP;
	case DLB_DRA_SERVFAIL:
		return DLB_R_SERVFAIL;
	case DLB_DRA_NONE:
		return DLB_R_CONTINUE;
	default:
		if (rc >= 0)
			return DLB_R_CONTINUE;
		if (st != NULL)
			st->lua_errors++;
		return DLB_R_SERVFAIL;
	}
}

static enum dlb_verdict_r
run_response_action(const struct dlb_act *a, struct dlb_dq *dq, struct dlb_stats *st)
{
	switch ((enum dlb_act_type)a->type) {
	case DLB_RACT_ALLOW:
		return DLB_R_FORWARD;
	case DLB_RACT_DROP:
		return DLB_R_DROP;
	case DLB_RACT_DELAY:
		if (!dq->tcp)
			dq->delay_ms = a->u.num;
		return DLB_R_CONTINUE;
	case DLB_RACT_LOG:
		if (a->u.log != NULL)
			dlb_log_write(a->u.log, dq, dq->cfg != NULL && dq->cfg->verbose);
		return DLB_R_CONTINUE;
	case DLB_RACT_SKIP_CACHE:
		dq->skip_cache = true;
		return DLB_R_CONTINUE;
	case DLB_RACT_TAG:
		if (a->u.tag.name != NULL)
			(void)dlb_tags_set(&dq->tags, a->u.tag.name,
					   a->u.tag.value ? a->u.tag.value : "");
		return DLB_R_CONTINUE;
	case DLB_RACT_LIMIT_TTL:
	case DLB_RACT_REDUCED_TTL: {
		struct ttl_edit e = { .a = a, .reduce = a->type == DLB_RACT_REDUCED_TTL };

		/* a packet that cannot be walked keeps what was edited before the error */
		(void)dlb_wire_walk_rrs(dq->pkt, dq->len, ttl_visit, &e);
		return DLB_R_CONTINUE;
	}
	case DLB_RACT_MAX_RETURNED_TTL:
		dq->max_returned_ttl = a->u.num;
		return DLB_R_CONTINUE;
	case DLB_RACT_CLEAR_RECORD_TYPES: {
		int n;

		if (a->u.types.ntypes <= 0)
			return DLB_R_CONTINUE;
		n = dlb_wire_clear_types(dq->pkt, dq->len, dq->cap, a->u.types.types,
					 a->u.types.ntypes);
		if (n >= 0)
			dq->len = (size_t)n;
		return DLB_R_CONTINUE;
	}
	case DLB_RACT_LUA:
		return run_lua_response(a, dq, st);
	default:
		/* a query action in a response chain (the Lua side prevents it) */
		return DLB_R_CONTINUE;
	}
}

enum dlb_verdict_r
dlb_act_run(const struct dlb_act *a, struct dlb_dq *dq)
{
	unsigned out;
	int v;

	if (a->type >= DLB_RACT_ALLOW)
		return run_response_action(a, dq, NULL);
	v = run_query_action(a, dq, NULL, &out);
	/* ContinueAction continues, whatever its action did to the packet */
	return v == R_ANSWER_CONTINUE ? DLB_R_CONTINUE : (enum dlb_verdict_r)v;
}

/* ---- rules ------------------------------------------------------------------------ */

/* Slot DLB_MAX_WORKERS is for the main thread (and any caller outside the workers). */
#define RULE_CTR_SLOTS (DLB_MAX_WORKERS + 1)
/*
 * One more slot past them holds the number of rules sharing the counters
 * (main thread only): a reload's unchanged rule takes over its predecessor's
 * (rules_keep_counters), so workers still on the old ruleset count into the
 * same slots.
 */
#define RULE_CTR_REFS(r) ((r)->ctr[RULE_CTR_SLOTS].hits)

static uint64_t rule_creation;	/* main thread */


struct dlb_rule *
dlb_rule_new(struct dlb_sel *sel, struct dlb_act *act, const char *name, const char *uuid)
{
	struct dlb_rule *r;
	size_t ctrsz = (RULE_CTR_SLOTS + 1) * sizeof(struct dlb_rule_ctr);

	if (sodium_init() < 0)
		return NULL;
	r = calloc(1, sizeof(*r));
	if (r == NULL)
		return NULL;
	/* each worker's counter alone on its cache line */
	r->ctr = aligned_alloc(64, (ctrsz + 63) & ~(size_t)63);
	if (r->ctr == NULL) {
		free(r);
		return NULL;
	}
	memset(r->ctr, 0, ctrsz);
	RULE_CTR_REFS(r) = 1;
	if (name != NULL)
		snprintf(r->name, sizeof(r->name), "%s", name);
	if (uuid != NULL && uuid[0] != '\0')
		snprintf(r->uuid, sizeof(r->uuid), "%s", uuid);
	else
		dlb_uuid_v4(r->uuid, sizeof(r->uuid));
	r->creation = rule_creation++;
	r->refs = 1;
	r->sel = sel;
	r->act = act;
	if (sel != NULL)
		dlb_sel_ref(sel);
	if (act != NULL)
		dlb_act_ref(act);
	return r;
}

void
dlb_rule_ref(struct dlb_rule *r)
{
	r->refs++;
}

void
dlb_rule_unref(struct dlb_rule *r)
{
	if (r == NULL || --r->refs > 0)
		return;
	dlb_sel_unref(r->sel);
	dlb_act_unref(r->act);
	if (--RULE_CTR_REFS(r) == 0)
		free(r->ctr);
	free(r);
}

DLB_HOT uint64_t
dlb_rule_hits(const struct dlb_rule *r)
{
	uint64_t sum = 0;

	for (int i = 0; i < RULE_CTR_SLOTS; i++)
		sum += __atomic_load_n(&r->ctr[i].hits, __ATOMIC_RELAXED);
	return sum;
}

/* One writer per slot: a relaxed load and store, no locked instruction. */
static inline void
rule_hit(const struct dlb_rule *r, int worker)
{
	uint64_t *h = &r->ctr[(unsigned)worker < DLB_MAX_WORKERS ? worker : DLB_MAX_WORKERS].hits;

	__atomic_store_n(h, __atomic_load_n(h, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

/* ---- chains ------------------------------------------------------------------------ */

/* Shared by every kind until something is published; never freed. */
static struct dlb_chain empty_chain = { .refs = 1 };
static struct dlb_ruleset empty_ruleset = {
	.c = { &empty_chain, &empty_chain, &empty_chain, &empty_chain, &empty_chain },
};
_Static_assert(DLB_CHAIN__COUNT == 5, "one initializer per chain kind");

static struct dlb_ruleset *live = &empty_ruleset;	/* atomic */
static dlb_rules_publish_fn *publish_hook;	/* main thread */
/* main thread: while set, chains are read from and published to this one */
static _Thread_local struct dlb_ruleset *staging;

DLB_HOT const struct dlb_ruleset *
dlb_rules_current(void)
{
	if (staging != NULL)
		return staging;
	return __atomic_load_n(&live, __ATOMIC_ACQUIRE);
}

const struct dlb_chain *
dlb_rules_chain(enum dlb_chain_kind kind)
{
	return dlb_rules_current()->c[kind];
}

static void
chain_unref(struct dlb_chain *c)
{
	if (c == &empty_chain || --c->refs > 0)
		return;
	for (int i = 0; i < c->n; i++)
		dlb_rule_unref(c->v[i]);
	free(c);
}

static void
ruleset_free(struct dlb_ruleset *rs)
{
	if (rs == &empty_ruleset || rs == NULL)
		return;
	for (int k = 0; k < DLB_CHAIN__COUNT; k++)
		chain_unref(rs->c[k]);
	free(rs);
}

/* Epoch callback: runs on the retiring (main) thread, in dlb_rcu_poll. */
static void
ruleset_reclaim(ck_epoch_entry_t *e)
{
	ruleset_free((struct dlb_ruleset *)(void *)((char *)e -
						     offsetof(struct dlb_ruleset, epoch)));
}

/* A copy of @from sharing its chains (references taken). NULL on ENOMEM. */
static struct dlb_ruleset *
ruleset_copy(const struct dlb_ruleset *from)
{
	struct dlb_ruleset *rs = calloc(1, sizeof(*rs));

	if (rs == NULL)
		return NULL;
	rs->gen = from->gen;
	for (int k = 0; k < DLB_CHAIN__COUNT; k++) {
		rs->c[k] = from->c[k];
		if (rs->c[k] != &empty_chain)
			rs->c[k]->refs++;
	}
	return rs;
}

void
dlb_rules_set_publish_hook(dlb_rules_publish_fn *fn)
{
	publish_hook = fn;
}

void
dlb_rules_retire(struct dlb_ruleset *old, struct dlb_rcu_thread *rt)
{
	if (old == &empty_ruleset || old == NULL)
		return;
	if (rt == NULL)
		ruleset_free(old);
	else
		dlb_rcu_defer(rt, &old->epoch, ruleset_reclaim);
}

/*
 * Make @rs live and publish it to the workers (the hook: in a new
 * configuration snapshot); the old one is retired through @rt (NULL: freed
 * now) once no snapshot being published holds it. @return 0, or DLB_ENOMEM
 * (nothing changed; @rs is still the caller's).
 */
static int
ruleset_publish(struct dlb_ruleset *rs, struct dlb_rcu_thread *rt)
{
	struct dlb_ruleset *old = live;

	if (publish_hook != NULL && publish_hook(rs, rt) != 0)
		return DLB_ENOMEM;
	__atomic_store_n(&live, rs, __ATOMIC_RELEASE);
	dlb_rules_retire(old, rt);
	return 0;
}

int
dlb_rules_publish(enum dlb_chain_kind kind, struct dlb_rule *const *v, int n,
		  struct dlb_rcu_thread *rt)
{
	struct dlb_chain *c = &empty_chain;
	struct dlb_ruleset *rs;

	if (n > 0) {
		c = malloc(sizeof(*c) + (size_t)n * sizeof(c->v[0]));
		if (c == NULL)
			return DLB_ENOMEM;
		c->refs = 1;
		c->n = n;
		for (int i = 0; i < n; i++) {
			c->v[i] = v[i];
			dlb_rule_ref(v[i]);
		}
	}
	if (staging != NULL) {
		/* a reload being evaluated: nothing is live yet */
		chain_unref(staging->c[kind]);
		staging->c[kind] = c;
		return 0;
	}
	rs = ruleset_copy(live);
	if (rs == NULL) {
		chain_unref(c);
		return DLB_ENOMEM;
	}
	chain_unref(rs->c[kind]);
	rs->c[kind] = c;
	if (ruleset_publish(rs, rt) != 0) {
		ruleset_free(rs);
		return DLB_ENOMEM;
	}
	return 0;
}

struct dlb_ruleset *
dlb_rules_stage_begin(void)
{
	struct dlb_ruleset *rs = calloc(1, sizeof(*rs));

	if (rs == NULL)
		return NULL;
	for (int k = 0; k < DLB_CHAIN__COUNT; k++)
		rs->c[k] = &empty_chain;
	staging = rs;
	return rs;
}

void
dlb_rules_stage_end(void)
{
	staging = NULL;
}

/* Is @b the same rule as @a: same name, selector and action text? */
static bool
rule_same(const struct dlb_rule *a, const struct dlb_rule *b)
{
	const char *sa = a->sel != NULL && a->sel->desc != NULL ? a->sel->desc : "";
	const char *sb = b->sel != NULL && b->sel->desc != NULL ? b->sel->desc : "";
	const char *aa = a->act != NULL && a->act->desc != NULL ? a->act->desc : "";
	const char *ab = b->act != NULL && b->act->desc != NULL ? b->act->desc : "";

	return strcmp(a->name, b->name) == 0 && strcmp(sa, sb) == 0 && strcmp(aa, ab) == 0 &&
	       (a->sel != NULL) == (b->sel != NULL) && (a->act != NULL) == (b->act != NULL) &&
	       (a->sel == NULL || a->sel->type == b->sel->type) &&
	       (a->act == NULL || a->act->type == b->act->type);
}

/*
 * A reload's rules keep the match counters of the running rules they repeat
 * unchanged (rule_same, in the same chain; repeated rules pair up in order):
 * the new rule shares the old one's counter slots.
 */
static void
rules_keep_counters(struct dlb_ruleset *rs, const struct dlb_ruleset *old)
{
	for (int k = 0; k < DLB_CHAIN__COUNT; k++) {
		const struct dlb_chain *oc = old->c[k];
		bool *taken = oc->n > 0 ? calloc((size_t)oc->n, sizeof(*taken)) : NULL;

		if (taken == NULL)
			continue;	/* nothing to keep, or no memory: counters start at 0 */
		for (int i = 0; i < rs->c[k]->n; i++) {
			struct dlb_rule *r = rs->c[k]->v[i];

			/* the same position first: most reloads change few rules */
			for (int n = 0; n < oc->n; n++) {
				int j = (i + n) % oc->n;
				struct dlb_rule *o = oc->v[j];

				if (taken[j] || o->ctr == r->ctr || !rule_same(o, r))
					continue;
				taken[j] = true;
				if (--RULE_CTR_REFS(r) == 0)
					free(r->ctr);
				r->ctr = o->ctr;
				RULE_CTR_REFS(r)++;
				break;
			}
		}
		free(taken);
	}
}

void
dlb_rules_stage_commit(struct dlb_ruleset *rs, uint64_t gen, struct dlb_rcu_thread *rt)
{
	rules_keep_counters(rs, live);
	rs->gen = gen;
	if (ruleset_publish(rs, rt) != 0)
		ruleset_free(rs);	/* no memory for a snapshot: the running rules stay */
}

struct dlb_ruleset *
dlb_rules_stage_take(struct dlb_ruleset *rs, uint64_t gen)
{
	struct dlb_ruleset *old = live;

	rules_keep_counters(rs, live);
	rs->gen = gen;
	__atomic_store_n(&live, rs, __ATOMIC_RELEASE);
	return old;
}

void
dlb_rules_stage_discard(struct dlb_ruleset *rs)
{
	ruleset_free(rs);
}

void
dlb_rules_shutdown(void)
{
	struct dlb_ruleset *old = live;

	__atomic_store_n(&live, &empty_ruleset, __ATOMIC_RELEASE);
	ruleset_free(old);
}

/*
 * Counters, each bumped at most once per query:
 *  - Drop, QPSAction over its rate, Lua Drop: rule-drop;
 *  - RCodeAction and Lua Nxdomain/Refused/ServFail: rule-nxdomain,
 *    rule-refused or rule-servfail for those three rcodes (other rcodes and
 *    ERCodeAction: none), plus self-answered;
 *  - TCAction and Lua Truncate over UDP: rule-truncated + self-answered;
 *  - every other local answer (ERCode, Spoof*, NegativeAndSOA, Lua Spoof,
 *    SpoofRaw, SpoofPacket, HeaderModify): self-answered;
 *  - a LuaAction error (or dq->lua NULL, or a Spoof string that is neither
 *    addresses nor a name): lua-errors + rule-servfail + self-answered, and
 *    DLB_R_SERVFAIL (the caller only builds the SERVFAIL packet);
 *  - an answer that does not fit in dq->cap: self-answered and
 *    DLB_R_SERVFAIL;
 *  - a LuaRule error: lua-errors (the rule does not match);
 *  - a ContinueAction's action counts only if it answered (a swallowed drop
 *    is not a drop); its Lua errors always count.
 * The chain's verdict when something answered under ContinueAction and no
 * later rule stopped is DLB_R_ANSWER.
 */
enum dlb_verdict_r
dlb_rules_run_query(const struct dlb_chain *c, struct dlb_dq *dq, struct dlb_stats *st)
{
	enum dlb_verdict_r v = DLB_R_FORWARD;
	unsigned bits = 0, cont_bits = 0;
	bool cont_answer = false;

	for (int i = 0; i < c->n; i++) {
		const struct dlb_rule *r = c->v[i];
		unsigned out = 0;
		int rv;

		if (!sel_match(r->sel, dq, st))
			continue;
		rule_hit(r, dq->worker);
		rv = run_query_action(r->act, dq, st, &out);
		if (rv == R_ANSWER_CONTINUE) {
			cont_answer = true;
			cont_bits = out;
			continue;
		}
		if (rv != DLB_R_CONTINUE) {
			v = (enum dlb_verdict_r)rv;
			bits = out;
			break;
		}
	}
	if (v == DLB_R_FORWARD && cont_answer) {
		v = DLB_R_ANSWER;
		bits = cont_bits;
	}
	if (st != NULL && bits != 0) {
		st->rule_drop += (bits & C_DROP) != 0;
		st->rule_nxdomain += (bits & C_NXDOMAIN) != 0;
		st->rule_refused += (bits & C_REFUSED) != 0;
		st->rule_servfail += (bits & C_SERVFAIL) != 0;
		st->rule_truncated += (bits & C_TRUNC) != 0;
		st->self_answered += (bits & C_SELF) != 0;
	}
	return v;
}

/*
 * Counters: lua-errors for LuaRule and LuaResponseAction errors (the latter
 * also give DLB_R_SERVFAIL); nothing else (a dropped response is not a
 * rule-drop in dnsdist).
 */
enum dlb_verdict_r
dlb_rules_run_response(const struct dlb_chain *c, struct dlb_dq *dq, struct dlb_stats *st)
{
	for (int i = 0; i < c->n; i++) {
		const struct dlb_rule *r = c->v[i];
		enum dlb_verdict_r v;

		if (!sel_match(r->sel, dq, st))
			continue;
		rule_hit(r, dq->worker);
		v = run_response_action(r->act, dq, st);
		if (v != DLB_R_CONTINUE)
			return v;
	}
	return DLB_R_FORWARD;
}

/* Cleanup of the per-subnet tables of every MaxQPSIPRule in @s (and its subs). */
static void
sel_maintenance(const struct dlb_sel *s, double now)
{
	switch (s->type) {
	case DLB_SEL_AND:
	case DLB_SEL_OR:
		for (int i = 0; i < s->u.list.n; i++)
			sel_maintenance(s->u.list.v[i], now);
		break;
	case DLB_SEL_NOT:
		sel_maintenance(s->u.sub, now);
		break;
	case DLB_SEL_MAXQPSIP:
		dlb_qps_ip_cleanup(s->u.qpsip, now);
		break;
	default:
		break;
	}
}

void
dlb_rules_maintenance(double now)
{
	for (int k = 0; k < DLB_CHAIN__COUNT; k++) {
		const struct dlb_chain *c = dlb_rules_chain((enum dlb_chain_kind)k);

		for (int i = 0; i < c->n; i++)
			sel_maintenance(c->v[i]->sel, now);
	}
}
