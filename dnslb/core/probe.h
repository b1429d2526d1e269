/*
 * probe.h - the cycle probe: a build option for measuring the hit path's own
 * time, off unless the build asks for it (cmake -DDLB_CYCLE_PROBE=ON, x86-64
 * only; perf/user_cycles builds and runs it).
 *
 * At 30k qps about 90% of a worker's CPU time is the kernel's, receiving,
 * sending and waking, and it varies between runs by more than a change to
 * dnslb's own code moves the total. The probe reads the TSC around each UDP
 * receive batch's handling and sending, takes the time spent inside
 * sendmmsg out, and every DLB_PROBE_REPORT_BATCHES batches logs the worker's
 * cumulative figures at INFO:
 *
 *   cycle probe: worker 0: 1234567 queries, 234567 batches, 1234.5 cycles per query
 *
 * With it, from the stage marks (DLB_PROBE_STAGE), where those cycles went:
 * the cumulative cycles of each stage of the hit path since the start,
 *
 *   stage probe: worker 0: 1234567 queries: acl 131234567 parse ... flush 83456789
 *
 * and, by the number of datagrams a batch had (1 to 7, 8 for 8 or more), the
 * batches and their cycles since the start, from which a batch's fixed cost
 * and each further query's cost can be fitted,
 *
 *   size probe: worker 0: batches of n (8: 8 or more): 1:1071:3470910 2:3494:5894838 ...
 *
 * A mark charges the cycles since the previous mark (or the batch's start) to
 * its stage; the flush stage is the batch's end, sendmmsg excluded. The
 * marks are placed where a UDP query passes (frontend.c, query.c): a query
 * that stops early (dropped, answered by a rule) leaves its cycles to the
 * next mark that runs.
 *
 * Around the batches, the wake probe counts the worker's own time from a
 * parked receive's return (dlb_worker_park_recv) to its next receive,
 * sendmmsg excluded: the batch and everything a wake-up adds to it (the loop
 * clock, the epoch section, the receive's setup), over the receives that
 * follow one another in dlb_frontend_park (a return to the event loop in
 * between is not counted):
 *
 *   wake probe: worker 0: 1234567 queries, 234567 receives, 345678901 cycles
 *
 * Cost when on: two TSC reads per batch, per receive and per sendmmsg, and
 * one per stage mark. When off, the macros are empty.
 */
#ifndef DNSLB_PROBE_H
#define DNSLB_PROBE_H

#ifdef DLB_CYCLE_PROBE
#include <stdint.h>
#include <x86intrin.h>

struct dlb_worker;

#define DLB_PROBE_REPORT_BATCHES 4096

/* The stages of a batch's handling, in the order a cache hit passes them. */
enum dlb_probe_stage {
	DLB_PROBE_ACL,		/* batch start, or the query before, to its ACL check done */
	DLB_PROBE_PARSE,	/* query fields set, parsed */
	DLB_PROBE_RULES,	/* query ring record, dynamic blocks, query rules */
	DLB_PROBE_KEY,		/* cache key made, its set prefetched */
	DLB_PROBE_BATCH,	/* with more queries: the rest of the batch's first pass */
	DLB_PROBE_HIT,		/* cache lookup to the answer patched (or the server chosen) */
	DLB_PROBE_REPLY,	/* response ring, accounting, the reply queued */
	DLB_PROBE_FLUSH,	/* the batch's accounting and sends, sendmmsg excluded */
	DLB_PROBE_NSTAGES
};

/* TSC cycles the calling thread has spent inside sendmmsg. */
extern __thread uint64_t dlb_probe_send_cycles;
/* The TSC at the last stage mark (0 outside a UDP batch: marks then count
 * nothing), and the cycles charged to each stage. */
extern __thread uint64_t dlb_probe_stage_last, dlb_probe_stage_cycles[DLB_PROBE_NSTAGES];
/* The wake probe's TSC at the last parked receive's return (0: none to
 * count from), sendmmsg cycles then, and its totals. */
extern __thread uint64_t dlb_probe_wake_t0, dlb_probe_wake_s0, dlb_probe_wake_cycles,
	dlb_probe_wakes;
/* Add one batch of @n datagrams that took @cycles, sendmmsg excluded. */
void dlb_probe_batch_done(const struct dlb_worker *w, uint64_t cycles, unsigned n);

#define DLB_PROBE_SEND_BEGIN() uint64_t dlb_probe_s0_ = __rdtsc()
#define DLB_PROBE_SEND_END() (dlb_probe_send_cycles += __rdtsc() - dlb_probe_s0_)
#define DLB_PROBE_BATCH_BEGIN()                                                               \
	uint64_t dlb_probe_b0_ = __rdtsc(), dlb_probe_bs_ = dlb_probe_send_cycles;               \
	dlb_probe_stage_last = dlb_probe_b0_
#define DLB_PROBE_STAGE(st)                                                                   \
	do {                                                                                  \
		uint64_t dlb_probe_t_ = __rdtsc();                                            \
		if (dlb_probe_stage_last != 0) { /* in a UDP batch */                         \
			dlb_probe_stage_cycles[(st)] += dlb_probe_t_ - dlb_probe_stage_last;  \
			dlb_probe_stage_last = dlb_probe_t_;                                  \
		}                                                                             \
	} while (0)
#define DLB_PROBE_BATCH_END(w, n)                                                             \
	do {                                                                                  \
		uint64_t dlb_probe_t_ = __rdtsc(),                                            \
			 dlb_probe_s_ = dlb_probe_send_cycles - dlb_probe_bs_;                 \
		dlb_probe_stage_cycles[DLB_PROBE_FLUSH] +=                                    \
			dlb_probe_t_ - dlb_probe_stage_last - dlb_probe_s_;                    \
		dlb_probe_stage_last = 0;                                                     \
		dlb_probe_batch_done((w), dlb_probe_t_ - dlb_probe_b0_ - dlb_probe_s_, (n));   \
	} while (0)
/* A parked receive returned: count from here. */
#define DLB_PROBE_WAKE_BEGIN()                                                                \
	(dlb_probe_wake_t0 = __rdtsc(), dlb_probe_wake_s0 = dlb_probe_send_cycles)
/* About to receive again: add the time since the last return, sends excluded. */
#define DLB_PROBE_WAKE_END()                                                                  \
	do {                                                                                  \
		if (dlb_probe_wake_t0 != 0) {                                                 \
			dlb_probe_wake_cycles += __rdtsc() - dlb_probe_wake_t0 -                  \
						 (dlb_probe_send_cycles - dlb_probe_wake_s0);    \
			dlb_probe_wakes++;                                                    \
			dlb_probe_wake_t0 = 0;                                                \
		}                                                                             \
	} while (0)
/* Leaving the park loop: the next receive follows the event loop's work. */
#define DLB_PROBE_WAKE_CANCEL() (dlb_probe_wake_t0 = 0)
#else
#define DLB_PROBE_WAKE_BEGIN() ((void)0)
#define DLB_PROBE_WAKE_END() ((void)0)
#define DLB_PROBE_WAKE_CANCEL() ((void)0)
#define DLB_PROBE_SEND_BEGIN() ((void)0)
#define DLB_PROBE_SEND_END() ((void)0)
#define DLB_PROBE_BATCH_BEGIN() ((void)0)
#define DLB_PROBE_BATCH_END(w, n) ((void)0)
#define DLB_PROBE_STAGE(st) ((void)0)
#endif

#endif /* DNSLB_PROBE_H */
