/*
 * ck_pr.h for ThreadSanitizer builds only. tests/CMakeLists.txt puts this
 * directory first on the include path of dnslb_core and of the tests when
 * DLB_SANITIZE contains "thread"; no other build sees it.
 *
 * Concurrency Kit implements ck_pr_* on x86-64 with inline assembly, which
 * TSan cannot see: every lock-free publication, every ck_spinlock section
 * and every epoch section would be reported as a data race. This wrapper
 * includes the real header, then redefines the operations that dnslb and the
 * CK headers it uses (ck_spinlock fas, ck_epoch, ck_stack) call, with the
 * compiler's __atomic built-ins and the ordering x86-64 gives them: loads
 * acquire, stores release, read-modify-writes sequentially consistent. TSan
 * then models what the hardware does. CK's fences are left alone (TSan
 * ignores fences).
 *
 * What this cannot make visible: ck_epoch's grace-period detection, which
 * runs inside libck.so (not instrumented). tests/stress/cache_torture.c
 * models it (see its DLB_TSAN notes).
 */
#ifndef DLB_TSAN_CK_PR_H
#define DLB_TSAN_CK_PR_H

#include_next <ck_pr.h>

#undef ck_pr_load_ptr
#undef ck_pr_load_uint
#undef ck_pr_load_int
#undef ck_pr_load_64
#undef ck_pr_load_32
#undef ck_pr_load_16
#undef ck_pr_load_8
#undef ck_pr_store_ptr
#undef ck_pr_store_uint
#undef ck_pr_store_int
#undef ck_pr_store_64
#undef ck_pr_store_32
#undef ck_pr_store_16
#undef ck_pr_store_8

#define ck_pr_load_ptr(SRC)	__atomic_load_n((SRC), __ATOMIC_ACQUIRE)
#define ck_pr_load_uint(SRC)	__atomic_load_n((SRC), __ATOMIC_ACQUIRE)
#define ck_pr_load_int(SRC)	__atomic_load_n((SRC), __ATOMIC_ACQUIRE)
#define ck_pr_load_64(SRC)	__atomic_load_n((SRC), __ATOMIC_ACQUIRE)
#define ck_pr_load_32(SRC)	__atomic_load_n((SRC), __ATOMIC_ACQUIRE)
#define ck_pr_load_16(SRC)	__atomic_load_n((SRC), __ATOMIC_ACQUIRE)
#define ck_pr_load_8(SRC)	__atomic_load_n((SRC), __ATOMIC_ACQUIRE)
#define ck_pr_store_ptr(DST, VAL)	__atomic_store_n((DST), (VAL), __ATOMIC_RELEASE)
#define ck_pr_store_uint(DST, VAL)	__atomic_store_n((DST), (VAL), __ATOMIC_RELEASE)
#define ck_pr_store_int(DST, VAL)	__atomic_store_n((DST), (VAL), __ATOMIC_RELEASE)
#define ck_pr_store_64(DST, VAL)	__atomic_store_n((DST), (VAL), __ATOMIC_RELEASE)
#define ck_pr_store_32(DST, VAL)	__atomic_store_n((DST), (VAL), __ATOMIC_RELEASE)
#define ck_pr_store_16(DST, VAL)	__atomic_store_n((DST), (VAL), __ATOMIC_RELEASE)
#define ck_pr_store_8(DST, VAL)		__atomic_store_n((DST), (VAL), __ATOMIC_RELEASE)

static inline bool
dlb_tsan_cas_ptr_value(void *target, void *compare, void *set, void *v)
{
	bool ok = __atomic_compare_exchange_n((void **)target, &compare, set, false,
					      __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);

	*(void **)v = compare;
	return ok;
}

static inline bool
dlb_tsan_cas_8(uint8_t *target, uint8_t compare, uint8_t set)
{
	return __atomic_compare_exchange_n(target, &compare, set, false, __ATOMIC_SEQ_CST,
					   __ATOMIC_SEQ_CST);
}

static inline bool
dlb_tsan_cas_uint(unsigned int *target, unsigned int compare, unsigned int set)
{
	return __atomic_compare_exchange_n(target, &compare, set, false, __ATOMIC_SEQ_CST,
					   __ATOMIC_SEQ_CST);
}

#define ck_pr_fas_uint(T, V)	__atomic_exchange_n((T), (V), __ATOMIC_SEQ_CST)
#define ck_pr_fas_ptr(T, V)	__atomic_exchange_n((void **)(T), (void *)(V), __ATOMIC_SEQ_CST)
#define ck_pr_cas_ptr(T, C, S)	dlb_tsan_cas_ptr_value((void *)(T), (void *)(C), (void *)(S), \
						       &(void *){ NULL })
#define ck_pr_cas_ptr_value(T, C, S, V) \
	dlb_tsan_cas_ptr_value((void *)(T), (void *)(C), (void *)(S), (void *)(V))
#define ck_pr_cas_8(T, C, S)	dlb_tsan_cas_8((T), (C), (S))
#define ck_pr_cas_uint(T, C, S)	dlb_tsan_cas_uint((T), (C), (S))
#define ck_pr_inc_uint(T)	((void)__atomic_fetch_add((T), 1u, __ATOMIC_SEQ_CST))
#define ck_pr_dec_uint(T)	((void)__atomic_fetch_sub((T), 1u, __ATOMIC_SEQ_CST))

#endif
