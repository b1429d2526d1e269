/*
 * buf.c - the growable byte buffer. See buf.h.
 */
#include "dnslb/core/buf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnslb/core/dnslb.h"

void
dlb_buf_init(struct dlb_buf *b, size_t max)
{
	*b = DLB_BUF_INIT(max);
}

void
dlb_buf_deinit(struct dlb_buf *b)
{
	size_t max = b->max;

	free(b->p);
	*b = DLB_BUF_INIT(max);
}

void
dlb_buf_reset(struct dlb_buf *b)
{
	b->len = 0;
	b->err = DLB_OK;
	if (b->p != NULL)
		b->p[0] = '\0';
}

int
dlb_buf_reserve(struct dlb_buf *b, size_t n)
{
	size_t need, cap;
	char *p;

	if (b->err != DLB_OK)
		return b->err;
	if (n < b->cap - b->len && b->p != NULL)
		return DLB_OK;
	if (n > SIZE_MAX / 2 - b->len - 1 || (b->max != 0 && b->len + n + 1 > b->max)) {
		b->err = DLB_ESPACE;
		return b->err;
	}
	need = b->len + n + 1;
	cap = b->cap != 0 ? b->cap : DLB_BUF_MIN;
	while (cap < need)
		cap *= 2;
	if (b->max != 0 && cap > b->max)
		cap = b->max;	/* need <= max: the last step stops at the bound */
	p = realloc(b->p, cap);
	if (p == NULL) {
		b->err = DLB_ENOMEM;
		return b->err;
	}
	b->p = p;
	b->cap = cap;
	return DLB_OK;
}

int
dlb_buf_append(struct dlb_buf *b, const void *s, size_t n)
{
	int rc = dlb_buf_reserve(b, n);

	if (rc != DLB_OK)
		return rc;
	if (n > 0)
		memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
	return DLB_OK;
}

int
dlb_buf_puts(struct dlb_buf *b, const char *s)
{
	return dlb_buf_append(b, s, strlen(s));
}

int
dlb_buf_vprintf(struct dlb_buf *b, const char *fmt, va_list ap)
{
	va_list ap2;
	int n, rc;

	if (b->err != DLB_OK)
		return b->err;
	/* first into what is there; the rare long line formats twice */
	va_copy(ap2, ap);
	n = vsnprintf(b->p != NULL ? b->p + b->len : NULL, b->p != NULL ? b->cap - b->len : 0,
		      fmt, ap2);
	va_end(ap2);
	if (n < 0) {
		if (b->p != NULL)
			b->p[b->len] = '\0';
		b->err = DLB_EINVAL;
		return b->err;
	}
	if (b->p != NULL && (size_t)n < b->cap - b->len) {
		b->len += (size_t)n;
		return DLB_OK;
	}
	if (b->p != NULL)
		b->p[b->len] = '\0';	/* undo the cut-off attempt */
	rc = dlb_buf_reserve(b, (size_t)n);
	if (rc != DLB_OK)
		return rc;
	vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
	b->len += (size_t)n;
	return DLB_OK;
}

int
dlb_buf_printf(struct dlb_buf *b, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = dlb_buf_vprintf(b, fmt, ap);
	va_end(ap);
	return rc;
}

char *
dlb_buf_take(struct dlb_buf *b, size_t *len)
{
	char *p = b->err == DLB_OK ? b->p : NULL;

	if (len != NULL)
		*len = p != NULL ? b->len : 0;
	if (p == NULL)
		free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
	b->err = DLB_OK;
	return p;
}
