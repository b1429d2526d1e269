/*
 * bench_kvstore.c - in-process micro-benchmark of the Redis-backed lookup
 * stores' mirror (dnslb/store/kvstore.h) and of KeyValueStoreLookupRule's lookup
 * (rules/kvs.c). A benchmark, never a test: it prints figures.
 *
 * A set of @names members "domain<i>.com." (text, as an operator writes
 * them in Redis) is built the way a mirror builds it (dlb_kvmap_put, one
 * member at a time, then seal): build time, bytes per name
 * (dlb_kvmap_memory / count, and VmRSS growth), and the build time of a
 * re-mirror (the size of the last map reserved first). Then, on one thread, the
 * cost per lookup in random order over 65,536 prepared queries, half hits:
 *
 *   map get            dlb_kvmap_get of the text key alone
 *   QName text         KeyValueStoreLookupRule(kvs, KeyValueLookupKeyQName()):
 *                      the qname turned into text, hashed, probed, counted
 *   QName wire         KeyValueLookupKeyQName(true) over a wire-format set
 *   Suffix text        KeyValueLookupKeySuffix() for "www.domain<i>.com.":
 *                      up to three keys (a hit is found at the second)
 *   SourceIP           KeyValueLookupKeySourceIP() over 1,000,000 addresses
 *
 * Each figure is the median of @runs runs, in ns per lookup (and the fastest
 * run: on a shared machine, the closer to the uncontended cost).
 *
 *   dnslb-bench-kvstore [runs (5)] [names (1000000)]
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/store/kvstore.h"
#include "dnslb/core/wire.h"
#include "perf/bench_util.h"
#include "rules/rules.h"

#define MAXRUNS	15
#define NPROBE	65536

struct probe {
	struct dlb_dnsmsg m;
	struct sockaddr_in sin;
	char text[40];
	size_t tlen;
};

static struct probe *probes;
static volatile size_t sink;
static double last_min;		/* the fastest run of the last timing */

/* The probe's qname: the wire form of its text. */
static void
name_of(struct probe *p, const char *text)
{
	int n = dlb_wire_name_from_text(text, p->m.qname_lc, sizeof(p->m.qname_lc));

	if (n < 0)
		abort();
	p->m.qname_len = (uint16_t)n;
}

static struct dlb_kvstore *
store_with(struct dlb_kvmap *m, const char *name)
{
	struct dlb_kvstore_opts o;
	struct dlb_kvstore *s;

	dlb_kvstore_opts_init(&o);
	snprintf(o.name, sizeof(o.name), "%s", name);
	snprintf(o.key, sizeof(o.key), "%s", name);
	s = dlb_kvstore_get(&o);
	dlb_kvstore_publish(s, m, NULL);
	return s;
}

/* Median ns per lookup of @k in @s over the probes, @runs times. */
static double
time_rule(struct dlb_kvstore *s, const struct dlb_kvs_key *k, int runs)
{
	double t[MAXRUNS];
	struct dlb_dq dq;

	memset(&dq, 0, sizeof(dq));
	for (int r = 0; r < runs; r++) {
		double t0 = mono();
		size_t hits = 0;

		for (int i = 0; i < NPROBE; i++) {
			/* what query.c sets per query; the lookup reads m, remote, worker, tags */
			dq.m = &probes[i].m;
			dq.remote = (const struct sockaddr *)&probes[i].sin;
			hits += dlb_kvs_lookup(s, k, &dq, NULL, NULL);
		}
		t[r] = (mono() - t0) * 1e9 / NPROBE;
		sink += hits;
	}
	qsort(t, (size_t)runs, sizeof(t[0]), cmp_double);
	last_min = t[0];
	return t[runs / 2];
}

static double
time_get(const struct dlb_kvmap *m, int runs)
{
	double t[MAXRUNS];

	for (int r = 0; r < runs; r++) {
		double t0 = mono();
		size_t hits = 0;

		for (int i = 0; i < NPROBE; i++)
			hits += dlb_kvmap_get(m, probes[i].text, probes[i].tlen, NULL, NULL);
		t[r] = (mono() - t0) * 1e9 / NPROBE;
		sink += hits;
	}
	qsort(t, (size_t)runs, sizeof(t[0]), cmp_double);
	last_min = t[0];
	return t[runs / 2];
}

int
main(int argc, char **argv)
{
	int runs = argc > 1 ? atoi(argv[1]) : 5;
	unsigned names = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 1000000;
	struct dlb_kvmap *text = dlb_kvmap_new(false), *wire = dlb_kvmap_new(false),
			 *ips = dlb_kvmap_new(false);
	struct dlb_kvstore *st, *sw, *si;
	struct dlb_kvs_key k = { 0 };
	uint64_t seed = 0x9e3779b97f4a7c15ULL;
	long rss0;
	double t0, build, med;
	char key[64];

	if (runs < 1 || runs > MAXRUNS || names < 2)
		return 2;
	probes = calloc(NPROBE, sizeof(*probes));
	if (probes == NULL || text == NULL || wire == NULL || ips == NULL)
		return 1;

	rss0 = vmrss_kib();
	t0 = mono();
	for (unsigned i = 0; i < names; i++) {
		int n = snprintf(key, sizeof(key), "domain%07u.com.", i);

		if (dlb_kvmap_put(text, key, (size_t)n, NULL, 0) != 0)
			return 1;
	}
	dlb_kvmap_seal(text);
	build = mono() - t0;
	printf("set of %u names \"domain<i>.com.\": built in %.3f s (%.0f ns a name), "
	       "%.1f bytes per name (map), VmRSS +%.1f bytes per name\n", names, build,
	       build * 1e9 / names, (double)dlb_kvmap_memory(text) / names,
	       (double)(vmrss_kib() - rss0) * 1024 / names);
	{
		/* a re-mirror: the build reserves the size of the map it replaces */
		struct dlb_kvmap *again = dlb_kvmap_new(false);

		t0 = mono();
		if (again == NULL || dlb_kvmap_reserve(again, names + names / 16,
							dlb_kvmap_memory(text)) != 0)
			return 1;
		for (unsigned i = 0; i < names; i++) {
			int n = snprintf(key, sizeof(key), "domain%07u.com.", i);

			if (dlb_kvmap_put(again, key, (size_t)n, NULL, 0) != 0)
				return 1;
		}
		dlb_kvmap_seal(again);
		build = mono() - t0;
		printf("the same set built again with the last size reserved (a re-mirror): "
		       "%.3f s (%.0f ns a name)\n", build, build * 1e9 / names);
		dlb_kvmap_free(again);
	}
	for (unsigned i = 0; i < names; i++) {
		uint8_t w[DLB_MAX_NAME];
		int n;
		struct in_addr a = { htonl(0x0a000000u + i) };

		snprintf(key, sizeof(key), "domain%07u.com.", i);
		n = dlb_wire_name_from_text(key, w, sizeof(w));
		if (dlb_kvmap_put(wire, w, (size_t)n, NULL, 0) != 0)
			return 1;
		inet_ntop(AF_INET, &a, key, sizeof(key));
		if (dlb_kvmap_put(ips, key, strlen(key), NULL, 0) != 0)
			return 1;
	}
	dlb_kvmap_seal(wire);
	dlb_kvmap_seal(ips);
	printf("wire-format set: %.1f bytes per name; address set: %.1f bytes per address\n",
	       (double)dlb_kvmap_memory(wire) / names, (double)dlb_kvmap_memory(ips) / names);

	/* probes: random members (even i) and names not listed (odd i) */
	for (int i = 0; i < NPROBE; i++) {
		unsigned v = (unsigned)(rnd(&seed) % names);
		bool hit = (i & 1) == 0;
		struct probe *p = &probes[i];

		p->tlen = (size_t)snprintf(p->text, sizeof(p->text), hit ? "domain%07u.com." :
					   "other%07u.com.", v);
		name_of(p, p->text);
		p->sin.sin_family = AF_INET;
		p->sin.sin_addr.s_addr = htonl(hit ? 0x0a000000u + v : 0x0b000000u + v);
	}
	st = store_with(text, "text");
	sw = store_with(wire, "wire");
	si = store_with(ips, "ips");

	printf("lookups, ns (median of %d runs, %d queries, half hits):\n", runs, NPROBE);
	med = time_get(text, runs);
	printf("  map get (text key)   %6.1f  (fastest run %6.1f)\n", med, last_min);
	k.type = DLB_KVK_QNAME;
	med = time_rule(st, &k, runs);
	printf("  QName text           %6.1f  (fastest run %6.1f)\n", med, last_min);
	k.wire = true;
	med = time_rule(sw, &k, runs);
	printf("  QName wire           %6.1f  (fastest run %6.1f)\n", med, last_min);
	k.wire = false;
	k.type = DLB_KVK_SOURCE_IP;
	k.v4mask = 32;
	k.v6mask = 128;
	med = time_rule(si, &k, runs);
	printf("  SourceIP             %6.1f  (fastest run %6.1f)\n", med, last_min);
	/* suffix: "www." in front, so a hit is the second key and a miss tries three */
	for (int i = 0; i < NPROBE; i++) {
		struct probe *p = &probes[i];
		char t[64];

		snprintf(t, sizeof(t), "www.%s", p->text);
		name_of(p, t);
	}
	k = (struct dlb_kvs_key){ .type = DLB_KVK_SUFFIX };
	med = time_rule(st, &k, runs);
	printf("  Suffix text (www.)   %6.1f  (fastest run %6.1f)\n", med, last_min);

	dlb_kvstore_unref(st);
	dlb_kvstore_unref(sw);
	dlb_kvstore_unref(si);
	free(probes);
	return sink == 42 ? 3 : 0;
}
