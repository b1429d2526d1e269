/*
 * buf.h - a growable byte buffer with an upper bound: the one behind every
 * text the control side builds (HTTP bodies, Prometheus and Carbon text,
 * console replies) and the byte strings Lua dumps.
 *
 * The buffer doubles as it grows (from DLB_BUF_MIN), never past @max bytes
 * including the terminating NUL (0: no bound), and always keeps its bytes
 * NUL-terminated once anything was added, so @p reads as a C string. An
 * error is sticky: once an append fails (out of memory, or over @max) the
 * buffer keeps what it had, ignores further appends and reports the error
 * in @err until dlb_buf_reset; a writer appends everything and checks once
 * at the end (the wire cursor's convention).
 *
 * Thread: the owner only.  Ownership: the buffer owns @p; dlb_buf_take
 * hands it over.
 */
#ifndef DNSLB_CORE_BUF_H
#define DNSLB_CORE_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#define DLB_BUF_MIN	64	/* the first allocation, bytes */

struct dlb_buf {
	char *p;		/* NULL until the first append */
	size_t len;		/* bytes held, not counting the NUL */
	size_t cap;		/* bytes allocated */
	size_t max;		/* the most @cap may be; 0: no bound */
	int err;		/* sticky: DLB_OK, DLB_ENOMEM, or DLB_ESPACE (over @max) */
};

/** An empty buffer bounded to @max bytes (0: unbounded; a zeroed struct is one). */
#define DLB_BUF_INIT(bound)	((struct dlb_buf){ .max = (bound) })

/** Make @b empty, bounded to @max bytes (0: unbounded). Allocates nothing. */
void dlb_buf_init(struct dlb_buf *b, size_t max);
/** Free @b's memory; it is empty (and still usable) afterwards. */
void dlb_buf_deinit(struct dlb_buf *b);
/** Empty @b and clear its error, keeping its memory. */
void dlb_buf_reset(struct dlb_buf *b);

/**
 * Make room for @n more bytes plus the NUL.
 * @return DLB_OK, or the sticky error (DLB_ENOMEM, DLB_ESPACE).
 */
int dlb_buf_reserve(struct dlb_buf *b, size_t n);
/** Append @n bytes at @s. @return DLB_OK or the sticky error (nothing appended). */
int dlb_buf_append(struct dlb_buf *b, const void *s, size_t n);
/** Append the C string @s. */
int dlb_buf_puts(struct dlb_buf *b, const char *s);
/** Append printf output. @return as dlb_buf_append. */
int dlb_buf_printf(struct dlb_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int dlb_buf_vprintf(struct dlb_buf *b, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));

/**
 * Hand @b's bytes over to the caller (free() them), setting *@len to their
 * length when @len is not NULL; @b is empty afterwards. @return the bytes
 * (NUL-terminated), or NULL when @b holds nothing or has an error.
 */
char *dlb_buf_take(struct dlb_buf *b, size_t *len);

/** Whether an append has failed since the last reset. */
static inline bool
dlb_buf_failed(const struct dlb_buf *b)
{
	return b->err != 0;
}

/** Fail @b with @err (< 0) as an append would, e.g. when a helper allocation fails. */
static inline void
dlb_buf_set_error(struct dlb_buf *b, int err)
{
	if (b->err == 0)
		b->err = err;
}

#endif
