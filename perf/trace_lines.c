/*
 * dnslb-trace-lines: the data lines each cache-hit query touches, from
 * valgrind lackey's --trace-mem=yes output on stdin (perf/lines_per_query
 * runs it; a benchmark aid, never a test).
 *
 *   dnslb-trace-lines WAIT_IP QUERY_IP N
 *
 * The trace is cut into segments at each execution of WAIT_IP (the entry of
 * the worker's wait); a segment that executes QUERY_IP (the entry of the
 * per-datagram work) exactly once is a query's. The last N query segments of
 * the trace are measured: for each, the distinct 64-byte data lines it loads
 * or stores, and how many of them no query segment before it touched within
 * the last 1, 64 and 1000 queries ("cold": not left in any cache by the
 * queries before; a segment without a query, such as a timer's, counts as
 * part of the query before it). Prints those averages, then for the lines
 * cold within the last query, the instruction that touched each first, with
 * how many per query ("IP cold-per-query" lines, hex IP). Also per query:
 * the distinct code lines run, and the distinct 4 KiB pages of code and of
 * data (TLB entries the query needs).
 * Self-contained C11; no dnslb code.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TBITS 22
#define TSIZE (1u << TBITS)
#define MAXSEG 65536		/* distinct lines one segment may touch */

struct line {
	uint64_t line;		/* address >> 6, +1 (0: empty) */
	int64_t last;		/* the query segment that last touched it; -1: none */
	long stamp;		/* the segment that listed it last (segments counted from 1) */
};

static struct line *tab;
static uint32_t seg_lines[MAXSEG];	/* tab indexes touched in this segment */
static uint64_t seg_ip[MAXSEG];		/* the instruction that touched each first */
static unsigned nseg_lines;
static uint64_t seg_code[MAXSEG];	/* code lines (address >> 6) run in this segment */
static unsigned nseg_code;
static uint64_t seg_pages[2 * MAXSEG];	/* scratch: the segment's 4 KiB pages */

static int cmp_ip(const void *a, const void *b);

/* Distinct 4 KiB pages among @n line numbers (address >> 6). */
static unsigned
pages_of(const uint64_t *l, unsigned n)
{
	unsigned d = 0;

	for (unsigned i = 0; i < n; i++)
		seg_pages[i] = l[i] >> 6;
	qsort(seg_pages, n, sizeof(uint64_t), cmp_ip);
	for (unsigned i = 0; i < n; i++)
		d += i == 0 || seg_pages[i] != seg_pages[i - 1];
	return d;
}
static uint32_t nlines;			/* entries in tab */

/* The table entry of line @l, added (never touched) if new. The table is
 * not resized: 4M entries (256 MiB of distinct lines) is more than a server
 * under test touches; past 3M, stop rather than slow to a crawl. */
static uint32_t
slot_of(uint64_t l)
{
	uint32_t h = (uint32_t)((l * 0x9E3779B97F4A7C15ull) >> (64 - TBITS));

	while (tab[h].line != 0 && tab[h].line != l + 1)
		h = (h + 1) & (TSIZE - 1);
	if (tab[h].line == 0) {
		if (++nlines > TSIZE / 4 * 3) {
			fprintf(stderr, "dnslb-trace-lines: more than %u distinct lines\n", nlines - 1);
			exit(1);
		}
		tab[h].line = l + 1;
		tab[h].last = -1;
		tab[h].stamp = 0;
	}
	return h;
}

/* One measured query segment: its line counts and the first-touch
 * instructions of its lines cold within the last query. */
struct rec {
	unsigned lines, cold[3], ncold, cap;
	unsigned code_lines, code_pages, data_pages;
	uint64_t *cold_ip;			/* [cap] */
};

static int
cmp_ip(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int
main(int argc, char **argv)
{
	static const int64_t window[3] = { 1, 64, 1000 };
	uint64_t wait_ip, query_ip, ip = 0, *all;
	long n, qseg = 0, segs = 0, kept, nall = 0;
	unsigned queries_in_seg = 0;
	double lines = 0, cold[3] = { 0, 0, 0 }, code_lines = 0, code_pages = 0, data_pages = 0;
	struct rec *ring;
	char buf[256];
	int started = 0;

	if (argc != 4) {
		fprintf(stderr, "usage: %s WAIT_IP QUERY_IP N (lackey trace on stdin)\n", argv[0]);
		return 2;
	}
	wait_ip = strtoull(argv[1], NULL, 16);
	query_ip = strtoull(argv[2], NULL, 16);
	n = atol(argv[3]);
	if (n < 1)
		return 2;
	tab = calloc(TSIZE, sizeof(*tab));
	ring = calloc((size_t)n, sizeof(*ring));
	if (tab == NULL || ring == NULL)
		return 2;
	while (fgets(buf, sizeof(buf), stdin) != NULL) {
		char *p = buf;
		char t;
		uint64_t a;
		long sz;

		while (*p == ' ')
			p++;
		t = *p;
		if (t != 'I' && t != 'L' && t != 'S' && t != 'M')
			continue;	/* valgrind's own messages */
		a = strtoull(p + 1, &p, 16);
		if (t == 'I') {
			ip = a;
			if (started && nseg_code < MAXSEG &&
			    (nseg_code == 0 || seg_code[nseg_code - 1] != a >> 6)) {
				uint32_t h = slot_of((a >> 6) | 1ull << 60);

				if (tab[h].stamp != segs + 1) {
					tab[h].stamp = segs + 1;
					seg_code[nseg_code++] = a >> 6;
				}
			}
			if (a == query_ip)
				queries_in_seg++;
			if (a != wait_ip)
				continue;
			/* a segment ends: a query's if it handled exactly one */
			if (started && queries_in_seg == 1) {
				struct rec *r = &ring[qseg % n];

				memset(r->cold, 0, sizeof(r->cold));
				r->lines = nseg_lines;
				r->ncold = 0;
				r->code_lines = nseg_code;
				r->code_pages = pages_of(seg_code, nseg_code);
				for (unsigned i = 0; i < nseg_lines; i++)
					seg_code[i] = tab[seg_lines[i]].line - 1;
				r->data_pages = pages_of(seg_code, nseg_lines);
				if (r->cap < nseg_lines) {
					free(r->cold_ip);
					r->cold_ip = malloc(nseg_lines * sizeof(uint64_t));
					if (r->cold_ip == NULL)
						return 2;
					r->cap = nseg_lines;
				}
				for (unsigned i = 0; i < nseg_lines; i++) {
					struct line *e = &tab[seg_lines[i]];

					for (int w = 0; w < 3; w++)
						if (e->last < 0 || qseg - e->last > window[w])
							r->cold[w]++;
					if (e->last < 0 || qseg - e->last > 1)
						r->cold_ip[r->ncold++] = seg_ip[i];
					e->last = qseg;
				}
				qseg++;
			} else if (qseg > 0) {
				/* no query (a timer) or a batch: part of the query before */
				for (unsigned i = 0; i < nseg_lines; i++)
					tab[seg_lines[i]].last = qseg - 1;
			}
			started = 1;
			segs++;
			nseg_lines = 0;
			nseg_code = 0;
			queries_in_seg = 0;
			continue;
		}
		if (!started)
			continue;
		while (*p == ',')
			p++;
		sz = strtol(p, NULL, 10);
		if (sz < 1)
			sz = 1;
		for (uint64_t l = a >> 6; l <= (a + (uint64_t)sz - 1) >> 6; l++) {
			uint32_t h = slot_of(l);

			if (tab[h].stamp != segs + 1 && nseg_lines < MAXSEG) {
				tab[h].stamp = segs + 1;
				seg_ip[nseg_lines] = ip;
				seg_lines[nseg_lines++] = h;
			}
		}
	}
	kept = qseg < n ? qseg : n;
	printf("segments %ld, query segments %ld, measured the last %ld\n", segs, qseg, kept);
	if (kept == 0)
		return 1;
	for (long i = 0; i < kept; i++)
		nall += ring[i].ncold;
	all = malloc(((size_t)nall + 1) * sizeof(uint64_t));
	if (all == NULL)
		return 2;
	nall = 0;
	for (long i = 0; i < kept; i++) {
		const struct rec *r = &ring[i];

		lines += r->lines;
		code_lines += r->code_lines;
		code_pages += r->code_pages;
		data_pages += r->data_pages;
		for (int w = 0; w < 3; w++)
			cold[w] += r->cold[w];
		if (r->ncold > 0)
			memcpy(all + nall, r->cold_ip, r->ncold * sizeof(uint64_t));
		nall += r->ncold;
	}
	printf("data lines per query %.2f; not touched within the last 1 / 64 / 1000 queries: "
	       "%.2f / %.2f / %.2f\n",
	       lines / (double)kept, cold[0] / (double)kept, cold[1] / (double)kept,
	       cold[2] / (double)kept);
	printf("code lines per query %.2f; 4 KiB pages per query: code %.2f, data %.2f\n",
	       code_lines / (double)kept, code_pages / (double)kept, data_pages / (double)kept);
	qsort(all, (size_t)nall, sizeof(uint64_t), cmp_ip);
	for (long i = 0, j; i < nall; i = j) {
		for (j = i; j < nall && all[j] == all[i]; j++)
			;
		if ((double)(j - i) / (double)kept >= 0.05)
			printf("%llx %.3f\n", (unsigned long long)all[i], (double)(j - i) / (double)kept);
	}
	return 0;
}
