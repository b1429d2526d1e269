/*
 * kvs.c - KeyValueStoreLookupRule / KeyValueStoreLookupAction on the query
 * path: the keys a KeyValueLookupKey* makes from a query, looked up in a
 * store's mirror (dnslb/store/kvstore.h). No allocation, no lock, no Redis: one
 * hash and one probe sequence per key.
 *
 * Keys, as dnsdist 1.7 makes them (dnsdist-kvs.hh), with the text forms that
 * Redis members are written in:
 *  - qname: the lowercased name, wire format or text with the final dot
 *    ("www.example.com.", escapes as DNSName::toStringRootDot: "\." "\\"
 *    "\DDD"; the root is ".");
 *  - suffix: the qname, then its parents down to the TLD ("a.example.com.",
 *    "example.com.", "com."), or down to @min_labels labels; no key when the
 *    name has fewer labels, never the root. Each key is a tail of the one
 *    text (or wire) name, so nothing is copied;
 *  - source IP: the client's address masked to v4mask/v6mask bits, in text
 *    ("192.0.2.0", "2001:db8::"), with ":port" ("[2001:db8::]:53") when
 *    includePort (dnsdist uses the raw octets; Redis members are text);
 *  - tag: the value of the query's tag, when set.
 *
 * Thread: workers (inside their epoch section), or the main thread.
 */
#include "rules/rules.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "dnslb/store/kvstore.h"

/* The qname in text, with each label's offset in the text and in the wire name. */
struct kvs_name {
	int n;					/* labels (root excluded) */
	size_t tlen;				/* text length */
	uint16_t toff[DLB_QNAME_MAX_LABELS];
	uint8_t woff[DLB_QNAME_MAX_LABELS];
	char text[DLB_WIRE_NAME_TEXT_MAX];
};

/* @return 0, or -1 for a malformed name (no key then). */
static int
name_split(const uint8_t *lc, size_t len, bool want_text, struct kvs_name *nm)
{
	size_t pos = 0, o = 0;

	nm->n = 0;
	if (len == 0 || len > DLB_MAX_NAME)
		return -1;
	for (;;) {
		uint8_t c = lc[pos];

		if (c == 0)
			break;
		if (c > DLB_MAX_LABEL || pos + 1 + c >= len || nm->n == DLB_QNAME_MAX_LABELS)
			return -1;
		nm->woff[nm->n] = (uint8_t)pos;
		nm->toff[nm->n] = (uint16_t)o;
		nm->n++;
		for (size_t i = pos + 1; want_text && i <= pos + c; i++) {
			uint8_t ch = lc[i];

			if (ch == '.' || ch == '\\') {
				nm->text[o++] = '\\';
				nm->text[o++] = (char)ch;
			} else if (ch > 0x20 && ch < 0x7f) {
				nm->text[o++] = (char)ch;
			} else {
				nm->text[o++] = '\\';
				nm->text[o++] = (char)('0' + ch / 100);
				nm->text[o++] = (char)('0' + ch / 10 % 10);
				nm->text[o++] = (char)('0' + ch % 10);
			}
		}
		if (want_text)
			nm->text[o++] = '.';
		pos += 1 + (size_t)c;
	}
	if (pos != len - 1)
		return -1;
	if (want_text && nm->n == 0)
		nm->text[o++] = '.';
	nm->tlen = o;
	return 0;
}

bool
dlb_kvs_lookup_name(const struct dlb_kvmap *m, const struct dlb_kvs_key *k, const uint8_t *lc,
		    size_t len, const uint8_t **val, size_t *vlen)
{
	struct kvs_name nm;
	int count;

	if (k->type == DLB_KVK_QNAME && k->wire)
		return dlb_kvmap_get(m, lc, len, val, vlen);
	if (name_split(lc, len, !k->wire, &nm) != 0)
		return false;
	if (k->type == DLB_KVK_QNAME)
		return dlb_kvmap_get(m, nm.text, nm.tlen, val, vlen);
	/* suffixes: from the whole name down, never the root */
	count = nm.n;
	if (k->min_labels != 0) {
		if (nm.n < k->min_labels)
			return false;
		count = nm.n - (k->min_labels - 1);
	}
	for (int i = 0; i < count; i++) {
		if (k->wire ? dlb_kvmap_get(m, lc + nm.woff[i], len - nm.woff[i], val, vlen) :
			      dlb_kvmap_get(m, nm.text + nm.toff[i], nm.tlen - nm.toff[i], val,
					    vlen))
			return true;
	}
	return false;
}

/* Decimal @v into @p; @return the digits written. */
static size_t
put_dec(char *p, unsigned v)
{
	char d[10];
	size_t n = 0, i = 0;

	do {
		d[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	while (n > 0)
		p[i++] = d[--n];
	return i;
}

/* inet_ntop's IPv4 text, without its cost (this runs per query). */
static size_t
put_v4(char *p, uint32_t a)
{
	size_t o = 0;

	for (int sh = 24; sh >= 0; sh -= 8) {
		o += put_dec(p + o, (a >> sh) & 0xff);
		if (sh != 0)
			p[o++] = '.';
	}
	return o;
}

static bool
lookup_source(const struct dlb_kvmap *m, const struct dlb_kvs_key *k, const struct dlb_dq *dq,
	      const uint8_t **val, size_t *vlen)
{
	char addr[INET6_ADDRSTRLEN], key[INET6_ADDRSTRLEN + 10];
	unsigned port;
	int n;

	if (dq->remote == NULL)
		return false;
	if (dq->remote->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)(const void *)dq->remote;
		uint32_t a = ntohl(s4->sin_addr.s_addr);
		size_t o;

		if (k->v4mask < 32)
			a &= k->v4mask == 0 ? 0 : ~(uint32_t)0 << (32 - k->v4mask);
		o = put_v4(key, a);
		if (k->port) {
			key[o++] = ':';
			o += put_dec(key + o, ntohs(s4->sin_port));
		}
		n = (int)o;
	} else if (dq->remote->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 =
			(const struct sockaddr_in6 *)(const void *)dq->remote;
		struct in6_addr ia = s6->sin6_addr;

		for (int i = 0; i < 16; i++) {
			int keep = (int)k->v6mask - 8 * i;

			if (keep <= 0)
				ia.s6_addr[i] = 0;
			else if (keep < 8)
				ia.s6_addr[i] &= (uint8_t)(0xff << (8 - keep));
		}
		inet_ntop(AF_INET6, &ia, addr, sizeof(addr));
		port = ntohs(s6->sin6_port);
		n = k->port ? snprintf(key, sizeof(key), "[%s]:%u", addr, port) :
			      snprintf(key, sizeof(key), "%s", addr);
	} else {
		return false;
	}
	return n > 0 && (size_t)n < sizeof(key) && dlb_kvmap_get(m, key, (size_t)n, val, vlen);
}

bool
dlb_kvs_lookup(struct dlb_kvstore *kvs, const struct dlb_kvs_key *k, struct dlb_dq *dq,
	       const uint8_t **val, size_t *vlen)
{
	const struct dlb_kvmap *m = dlb_kvstore_map(kvs);
	const uint8_t *v = NULL;
	size_t vl = 0;
	bool found = false;

	if (m != NULL && dlb_kvmap_count(m) > 0) {
		switch (k->type) {
		case DLB_KVK_QNAME:
		case DLB_KVK_SUFFIX:
			found = dq->m != NULL && dlb_kvs_lookup_name(m, k, dq->m->qname_lc,
								   dq->m->qname_len, &v, &vl);
			break;
		case DLB_KVK_SOURCE_IP:
			found = lookup_source(m, k, dq, &v, &vl);
			break;
		case DLB_KVK_TAG: {
			const char *t = dlb_tags_get(&dq->tags, k->tag);

			found = t != NULL && dlb_kvmap_get(m, t, strlen(t), &v, &vl);
			break;
		}
		default:
			break;
		}
	}
	dlb_kvstore_count(kvs, dq->worker, found);
	if (found) {
		if (val != NULL)
			*val = v;
		if (vlen != NULL)
			*vlen = vl;
	}
	return found;
}

void
dlb_kvs_action(const struct dlb_act *a, struct dlb_dq *dq)
{
	const struct dlb_kvs_key *k = &a->u.kvs.key;
	char value[DLB_WIRE_NAME_TEXT_MAX];
	const uint8_t *v;
	size_t vl;

	if (a->u.kvs.store == NULL || a->u.kvs.tag == NULL)
		return;
	value[0] = '\0';
	if (dlb_kvs_lookup(a->u.kvs.store, k, dq, &v, &vl)) {
		bool set = dlb_kvstore_opts(a->u.kvs.store)->type == DLB_KVS_SET;

		if (set && k->wire && (k->type == DLB_KVK_QNAME || k->type == DLB_KVK_SUFFIX)) {
			/* a wire-format member: its text name is what a tag can hold */
			if (dlb_wire_name_to_text(v, vl, value, sizeof(value)) < 0)
				value[0] = '\0';
		} else if (vl < sizeof(value)) {
			memcpy(value, v, vl);	/* a NUL inside ends the value */
			value[vl] = '\0';
		} else {
			return;		/* longer than any tag space */
		}
	}
	(void)dlb_tags_set(&dq->tags, a->u.kvs.tag, value);
}

void
dlb_kvs_key_describe(const struct dlb_kvs_key *k, char *out, size_t outsz)
{
	switch (k->type) {
	case DLB_KVK_QNAME:
		snprintf(out, outsz, "qname");
		break;
	case DLB_KVK_SUFFIX:
		snprintf(out, outsz, "suffix");
		break;
	case DLB_KVK_SOURCE_IP:
		snprintf(out, outsz, "source IP (masked to %u (v4) / %u (v6) bits)%s",
			 (unsigned)k->v4mask, (unsigned)k->v6mask,
			 k->port ? " including the port" : "");
		break;
	case DLB_KVK_TAG:
		snprintf(out, outsz, "value of the tag named '%s'", k->tag);
		break;
	default:
		snprintf(out, outsz, "?");
		break;
	}
}
