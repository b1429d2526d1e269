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
 * Cost when on: two TSC reads per batch and two per sendmmsg. When off, the
 * macros are empty.
 */
#ifndef DNSLB_PROBE_H
#define DNSLB_PROBE_H

#ifdef DLB_CYCLE_PROBE
#include <stdint.h>
#include <x86intrin.h>

struct dlb_worker;

#define DLB_PROBE_REPORT_BATCHES 4096

/* TSC cycles the calling thread has spent inside sendmmsg. */
extern __thread uint64_t dlb_probe_send_cycles;
/* Add one batch of @n datagrams that took @cycles, sendmmsg excluded. */
void dlb_probe_batch_done(const struct dlb_worker *w, uint64_t cycles, unsigned n);

#define DLB_PROBE_SEND_BEGIN() uint64_t dlb_probe_s0_ = __rdtsc()
#define DLB_PROBE_SEND_END() (dlb_probe_send_cycles += __rdtsc() - dlb_probe_s0_)
#define DLB_PROBE_BATCH_BEGIN()                                                               \
	uint64_t dlb_probe_b0_ = __rdtsc(), dlb_probe_bs_ = dlb_probe_send_cycles
#define DLB_PROBE_BATCH_END(w, n)                                                             \
	dlb_probe_batch_done((w), __rdtsc() - dlb_probe_b0_ - (dlb_probe_send_cycles - dlb_probe_bs_), \
			     (n))
#else
#define DLB_PROBE_SEND_BEGIN() ((void)0)
#define DLB_PROBE_SEND_END() ((void)0)
#define DLB_PROBE_BATCH_BEGIN() ((void)0)
#define DLB_PROBE_BATCH_END(w, n) ((void)0)
#endif

#endif /* DNSLB_PROBE_H */
