/*
 * cache_torture.c - readers and writers hammering one small packet cache
 * (CK regressions/validate style). Run under ThreadSanitizer by tests/run-all.
 *
 * Readers look names up and copy answers out inside RCU sections, and check
 * every hit: the answer must be for the name and type looked up (each
 * record's RDATA carries the name's index, its type is the question's), well
 * formed, and aged sanely. Writers insert fresh answers (replacing entries),
 * and now and then expunge a name, a suffix, expired entries or most of the
 * cache. The cache is small (4 shards, 256 entries, 64 KiB) so evictions,
 * replacements and retirements happen all the time on the same sets.
 *
 *   stress_cache [threads [seconds [ops per thread]]]    (default 4 2 200000)
 *
 * Threads alternate reader, writer, reader, ... (at least one of each).
 * Exit status: 0, or 1 on any mismatch.
 *
 * DLB_TSAN: ThreadSanitizer sees the cache's atomics and spinlocks (through
 * tests/stress/tsan/ck_pr.h) but not ck_epoch's grace periods, which are
 * detected inside libck.so. Under TSan the test therefore models them with
 * a rwlock: sections hold it shared, and dlb_rcu_poll() (where retired
 * entries are freed) runs only when it can be taken exclusively. Lookups,
 * inserts, replacements and retirements still all run concurrently; only
 * the free()s are ordered after the sections. Other builds poll freely.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dnslb/core/cache.h"
#include "dnslb/core/rcu.h"
#include "dnslb/core/wire.h"

#define NNAMES		1024
#define NZONES		16
#define MAX_REC		8
#define MAX_TTL		4	/* s: entries expire during a run */
#define STALE_TTL	9
#define BUF		4096
#define CLOCK_SPEED	50	/* cache seconds per real second */

struct name {
	uint8_t q[2][512];		/* the query, per type (A, AAAA), in mixed case */
	size_t qlen[2];
	struct dlb_dnsmsg m[2];
	uint8_t lc[DLB_MAX_NAME];	/* lowercase wire name */
	size_t lclen;
};

static const uint16_t qtypes[2] = { 1, 28 };
static struct name names[NNAMES];
static uint8_t zones[NZONES][DLB_MAX_NAME];
static size_t zonelen[NZONES];
static struct dlb_cache *cache;
static struct timespec start;
static double run_seconds = 2;
static unsigned long max_ops = 200000;
static pthread_barrier_t finish;
static atomic_ulong mismatches, hits, misses, stales, inserts, refused, expunged;

#if defined(__SANITIZE_THREAD__)
#define DLB_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DLB_TSAN 1
#endif
#endif

#ifdef DLB_TSAN
static pthread_rwlock_t grace = PTHREAD_RWLOCK_INITIALIZER;
#endif

static void
section_enter(struct dlb_rcu_thread *rt)
{
#ifdef DLB_TSAN
	pthread_rwlock_rdlock(&grace);
#endif
	dlb_rcu_enter(rt);
}

static void
section_exit(struct dlb_rcu_thread *rt)
{
	dlb_rcu_exit(rt);
#ifdef DLB_TSAN
	pthread_rwlock_unlock(&grace);
#endif
}

/* Free what this thread retired and is safe (outside any section). */
static void
reclaim(struct dlb_rcu_thread *rt)
{
#ifdef DLB_TSAN
	if (pthread_rwlock_trywrlock(&grace) != 0)
		return;
	dlb_rcu_poll(rt);
	pthread_rwlock_unlock(&grace);
#else
	dlb_rcu_poll(rt);
#endif
}

static double
elapsed(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)(ts.tv_sec - start.tv_sec) + (double)(ts.tv_nsec - start.tv_nsec) / 1e9;
}

/*
 * Wall-clock seconds the cache sees: a fixed epoch plus the run's time, sped
 * up so that entries expire, go stale and reach their prefetch window many
 * times in a short run.
 */
static double
now_s(void)
{
	return 1700000000.0 + elapsed() * CLOCK_SPEED;
}

static uint64_t
rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* "n<i>.z<i % NZONES>.torture.test" as wire, lowercase or in a random case. */
static size_t
make_name(unsigned i, uint8_t *out, uint64_t *seed)
{
	char text[64], *s = text;
	size_t n = 0;

	snprintf(text, sizeof(text), "n%u.z%u.torture.test", i, i % NZONES);
	while (*s != '\0') {
		char *dot = strchr(s, '.');
		size_t l = dot != NULL ? (size_t)(dot - s) : strlen(s);

		out[n++] = (uint8_t)l;
		for (size_t j = 0; j < l; j++) {
			char ch = s[j];

			if (seed != NULL && ch >= 'a' && ch <= 'z' && (rnd(seed) & 1))
				ch = (char)(ch - 'a' + 'A');
			out[n++] = (uint8_t)ch;
		}
		s += l;
		if (*s == '.')
			s++;
	}
	out[n++] = 0;
	return n;
}

static void
setup_names(void)
{
	uint64_t seed = 0x9e3779b97f4a7c15ull;

	for (unsigned i = 0; i < NNAMES; i++) {
		struct name *nm = &names[i];

		nm->lclen = make_name(i, nm->lc, NULL);
		for (int t = 0; t < 2; t++) {
			uint8_t *p = nm->q[t];
			size_t n;

			memset(p, 0, 12);
			dlb_wr16(p, (uint16_t)i);
			dlb_wr16(p + 2, DLB_F_RD);
			dlb_wr16(p + 4, 1);
			dlb_wr16(p + 10, 1);
			n = 12 + make_name(i, p + 12, &seed);
			dlb_wr16(p + n, qtypes[t]);
			dlb_wr16(p + n + 2, 1);
			n += 4;
			/* OPT: 1232 bytes, no options */
			p[n] = 0;
			dlb_wr16(p + n + 1, DLB_TYPE_OPT);
			dlb_wr16(p + n + 3, 1232);
			dlb_wr32(p + n + 5, 0);
			dlb_wr16(p + n + 9, 0);
			n += 11;
			nm->qlen[t] = n;
			if (dlb_wire_parse_query(p, n, &nm->m[t]) != DLB_OK) {
				fprintf(stderr, "bad query %u\n", i);
				exit(2);
			}
		}
	}
	for (unsigned z = 0; z < NZONES; z++) {
		char text[32];
		const char *s = text;
		size_t n = 0;

		snprintf(text, sizeof(text), "z%u.torture.test", z);
		while (*s != '\0') {
			const char *dot = strchr(s, '.');
			size_t l = dot != NULL ? (size_t)(dot - s) : strlen(s);

			zones[z][n++] = (uint8_t)l;
			memcpy(&zones[z][n], s, l);
			n += l;
			s += l;
			if (*s == '.')
				s++;
		}
		zones[z][n++] = 0;
		zonelen[z] = n;
	}
}

/* A backend's answer for name @i, type @t: @nrec records whose RDATA holds @i. */
static size_t
make_answer(unsigned i, int t, unsigned nrec, uint32_t ttl, uint16_t id, uint8_t *out)
{
	const struct name *nm = &names[i];
	size_t n = nm->qlen[t] - 11;	/* header and question, without the OPT */

	memcpy(out, nm->q[t], n);
	dlb_wr16(out, id);
	dlb_wr16(out + 2, DLB_F_QR | DLB_F_RD | DLB_F_RA);
	dlb_wr16(out + 6, (uint16_t)nrec);
	for (unsigned r = 0; r < nrec; r++) {
		uint16_t rdlen = t == 0 ? 4 : 16;

		dlb_wr16(out + n, 0xc00c);
		dlb_wr16(out + n + 2, qtypes[t]);
		dlb_wr16(out + n + 4, 1);
		dlb_wr32(out + n + 6, ttl);
		dlb_wr16(out + n + 10, rdlen);
		memset(out + n + 12, 0, rdlen);
		dlb_wr32(out + n + 12 + rdlen - 4, i);
		n += 12 + rdlen;
	}
	out[n] = 0;
	dlb_wr16(out + n + 1, DLB_TYPE_OPT);
	dlb_wr16(out + n + 3, 1232);
	dlb_wr32(out + n + 5, 0);
	dlb_wr16(out + n + 9, 0);
	return n + 11;
}

static void
mismatch(const char *what, unsigned i, int t, size_t len)
{
	atomic_fetch_add(&mismatches, 1);
	if (atomic_load(&mismatches) <= 10)
		fprintf(stderr, "MISMATCH: %s (name %u, type %u, answer %zu bytes)\n", what, i,
			qtypes[t], len);
}

/* Is @out (@len bytes) a sane answer to name @i, type @t as the client asked? */
static void
check_answer(unsigned i, int t, const uint8_t *out, size_t len, enum dlb_cache_result res)
{
	const struct name *nm = &names[i];
	size_t qend = nm->qlen[t] - 11, n = qend;
	uint16_t rdlen = t == 0 ? 4 : 16;
	unsigned an;

	if (len < qend + 11 || dlb_rd16(out) != (uint16_t)i ||
	    memcmp(out + 2, "\x81\x80\x00\x01", 4) != 0 ||
	    memcmp(out + 12, nm->q[t] + 12, qend - 12) != 0) {
		mismatch("header or question", i, t, len);
		return;
	}
	an = dlb_rd16(out + 6);
	if (an < 1 || an > MAX_REC || len != qend + an * (12u + rdlen) + 11) {
		mismatch("record count or length", i, t, len);
		return;
	}
	for (unsigned r = 0; r < an; r++, n += 12u + rdlen) {
		uint32_t ttl = dlb_rd32(out + n + 6);

		if (dlb_rd16(out + n) != 0xc00c || dlb_rd16(out + n + 2) != qtypes[t] ||
		    dlb_rd16(out + n + 10) != rdlen || dlb_rd32(out + n + 12 + rdlen - 4) != i) {
			mismatch("record of another name or type", i, t, len);
			return;
		}
		if (res == DLB_CACHE_STALE ? ttl != STALE_TTL : ttl > MAX_TTL) {
			mismatch("TTL", i, t, len);
			return;
		}
	}
	if (out[n] != 0 || dlb_rd16(out + n + 1) != DLB_TYPE_OPT)
		mismatch("OPT", i, t, len);
}

struct worker {
	pthread_t th;
	int id;
	bool writer;
	unsigned long ops;
};

/* One lookup + copy-out of a random name; @rt is inside a section. */
static void
read_one(struct dlb_rcu_thread *rt, int wid, uint64_t *seed, uint8_t *out)
{
	/* half the lookups go to 64 hot names: more hits, more prefetch races */
	unsigned i = (unsigned)(rnd(seed) % ((rnd(seed) & 1) ? 64 : NNAMES));
	int t = (int)(rnd(seed) & 1);
	uint32_t stale = (rnd(seed) & 3) == 0 ? 2 : 0;
	struct dlb_cache_key k;
	enum dlb_cache_result res;
	size_t len = 0;
	bool pf;

	if (dlb_cache_key_make(cache, names[i].q[t], &names[i].m[t], false, &k) != 0) {
		mismatch("key", i, t, 0);
		return;
	}
	if (k.qname_len != names[i].lclen || memcmp(k.qname_lc, names[i].lc, k.qname_len) != 0) {
		mismatch("key name", i, t, 0);
		return;
	}
	section_enter(rt);
	res = dlb_cache_get(cache, &k, (uint16_t)i, names[i].q[t] + 12, now_s(), stale, out, BUF,
			    &len, &pf, wid);
	section_exit(rt);
	if (res == DLB_CACHE_MISS) {
		atomic_fetch_add(&misses, 1);
		if (len != 0)
			mismatch("length on a miss", i, t, len);
		return;
	}
	atomic_fetch_add(res == DLB_CACHE_HIT ? &hits : &stales, 1);
	check_answer(i, t, out, len, res);
}

static void
write_one(struct dlb_rcu_thread *rt, uint64_t *seed, uint8_t *buf, unsigned long op)
{
	unsigned i = (unsigned)(rnd(seed) % NNAMES);
	int t = (int)(rnd(seed) & 1);
	struct dlb_cache_key k;
	size_t len;

	if (op % 997 == 996) {
		atomic_fetch_add(&expunged, dlb_cache_expunge_by_name(cache, rt, names[i].lc,
								      names[i].lclen,
								      (rnd(seed) & 1) ? 255 : qtypes[t],
								      false));
		return;
	}
	if (op % 4999 == 4998) {
		unsigned z = (unsigned)(rnd(seed) % NZONES);

		atomic_fetch_add(&expunged, dlb_cache_expunge_by_name(cache, rt, zones[z],
								      zonelen[z], 255, true));
		return;
	}
	if (op % 1999 == 1998) {
		atomic_fetch_add(&expunged, dlb_cache_purge_expired(cache, rt, 64, now_s()));
		return;
	}
	if (op % 9973 == 9972) {
		atomic_fetch_add(&expunged, dlb_cache_expunge(cache, rt, 128));
		return;
	}
	if (op % 499 == 498) {
		struct dlb_cache_stats st;

		dlb_cache_get_stats(cache, &st);
		(void)dlb_cache_is_full(cache);
		if (st.entries > st.max_entries)
			mismatch("entries over the bound", 0, 0, (size_t)st.entries);
		if (st.bytes > dlb_cache_get_opts(cache)->max_bytes)
			mismatch("bytes over the bound", 0, 0, (size_t)st.bytes);
		return;
	}
	if (dlb_cache_key_make(cache, names[i].q[t], &names[i].m[t], false, &k) != 0) {
		mismatch("key", i, t, 0);
		return;
	}
	len = make_answer(i, t, 1 + (unsigned)(rnd(seed) % MAX_REC),
			  1 + (uint32_t)(rnd(seed) % MAX_TTL), (uint16_t)rnd(seed), buf);
	/* inserts are allowed inside a section too */
	if (op & 1)
		section_enter(rt);
	if (dlb_cache_insert(cache, rt, &k, buf, len, now_s(), -1))
		atomic_fetch_add(&inserts, 1);
	else
		atomic_fetch_add(&refused, 1);
	if (op & 1)
		section_exit(rt);
}

static void *
worker_main(void *arg)
{
	struct worker *w = arg;
	struct dlb_rcu_thread rt;
	uint64_t seed = 0x2545f4914f6cdd1dull * (uint64_t)(w->id + 1);
	uint8_t *buf = malloc(BUF);

	if (buf == NULL || dlb_rcu_register(&rt) != 0) {
		fprintf(stderr, "out of memory\n");
		exit(2);	/* the others would wait at the barrier */
	}
	for (w->ops = 0; w->ops < max_ops; w->ops++) {
		if ((w->ops & 255) == 0 && elapsed() >= run_seconds)
			break;
		if (w->writer)
			write_one(&rt, &seed, buf, w->ops);
		else
			read_one(&rt, w->id, &seed, buf);
		if ((w->ops & 15) == 15)
			reclaim(&rt);
	}
	/* everyone is out of their sections before anyone reclaims the rest */
	pthread_barrier_wait(&finish);
	dlb_rcu_unregister(&rt);
	free(buf);
	return NULL;
}

/* Single-threaded afterwards: every entry left is still right. */
static void
final_check(void)
{
	struct dlb_rcu_thread rt;
	struct dlb_cache_stats st;
	uint8_t *buf = malloc(BUF);
	unsigned found = 0;
	double now = now_s();

	if (buf == NULL || dlb_rcu_register(&rt) != 0) {
		atomic_fetch_add(&mismatches, 1);
		free(buf);
		return;
	}
	for (unsigned i = 0; i < NNAMES; i++) {
		for (int t = 0; t < 2; t++) {
			struct dlb_cache_key k;
			enum dlb_cache_result res;
			size_t len;
			bool pf;

			if (dlb_cache_key_make(cache, names[i].q[t], &names[i].m[t], false, &k) != 0)
				continue;
			dlb_rcu_enter(&rt);
			res = dlb_cache_get(cache, &k, (uint16_t)i, names[i].q[t] + 12, now, 3600, buf,
					    BUF, &len, &pf, DLB_MAX_WORKERS);
			dlb_rcu_exit(&rt);
			if (res != DLB_CACHE_MISS) {
				found++;
				check_answer(i, t, buf, len, res);
			}
		}
	}
	dlb_cache_get_stats(cache, &st);
	if (st.entries > st.max_entries || st.bytes > dlb_cache_get_opts(cache)->max_bytes ||
	    found != st.entries) {
		fprintf(stderr, "final: %llu entries (max %llu), %llu bytes, %u found\n",
			(unsigned long long)st.entries, (unsigned long long)st.max_entries,
			(unsigned long long)st.bytes, found);
		atomic_fetch_add(&mismatches, 1);
	}
	printf("cache: %llu entries, %llu bytes, %llu evictions, %llu lookup collisions, "
	       "%llu prefetches\n", (unsigned long long)st.entries, (unsigned long long)st.bytes,
	       (unsigned long long)st.evictions, (unsigned long long)st.lookup_collisions,
	       (unsigned long long)st.prefetches);
	dlb_rcu_unregister(&rt);
	free(buf);
}

int
main(int argc, char **argv)
{
	struct dlb_cache_opts o;
	struct worker *w;
	int nthreads = argc > 1 ? atoi(argv[1]) : 4;
	unsigned long total = 0;

	if (argc > 2)
		run_seconds = atof(argv[2]);
	if (argc > 3)
		max_ops = strtoul(argv[3], NULL, 10);
	if (nthreads < 2)
		nthreads = 2;
	if (nthreads > DLB_MAX_WORKERS)
		nthreads = DLB_MAX_WORKERS;

	dlb_rcu_init();
	setup_names();
	dlb_cache_opts_default(&o);
	o.max_entries = 256;
	o.shards = 4;
	o.max_bytes = 64 * 1024;
	o.stale_ttl = STALE_TTL;
	o.prefetch = 0.5;
	cache = dlb_cache_new(&o);
	w = calloc((size_t)nthreads, sizeof(*w));
	if (cache == NULL || w == NULL) {
		fprintf(stderr, "out of memory\n");
		return 2;
	}
	pthread_barrier_init(&finish, NULL, (unsigned)nthreads);
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (int i = 0; i < nthreads; i++) {
		w[i].id = i;
		w[i].writer = (i & 1) == 1;
		if (pthread_create(&w[i].th, NULL, worker_main, &w[i]) != 0) {
			fprintf(stderr, "pthread_create failed\n");
			return 2;
		}
	}
	for (int i = 0; i < nthreads; i++) {
		pthread_join(w[i].th, NULL);
		total += w[i].ops;
	}
	final_check();
	printf("%d threads, %.2f s, %lu ops: %lu hits, %lu stale, %lu misses, %lu inserts, "
	       "%lu refused, %lu expunged\n", nthreads, elapsed(), total, atomic_load(&hits),
	       atomic_load(&stales), atomic_load(&misses), atomic_load(&inserts),
	       atomic_load(&refused), atomic_load(&expunged));
	dlb_cache_free(cache);
	pthread_barrier_destroy(&finish);
	free(w);
	if (atomic_load(&mismatches) != 0) {
		fprintf(stderr, "FAIL: %lu mismatches\n", atomic_load(&mismatches));
		return 1;
	}
	printf("ok\n");
	return 0;
}
