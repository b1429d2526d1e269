/*
 * tags.c - per-query tags: dnslb/core/tags.h.
 */
#include "dnslb/core/tags.h"

#include <string.h>

/* Offset of @key's pair in @t, or -1. */
static int
tags_find(const struct dlb_tags *t, const char *key, size_t *pairlen)
{
	size_t pos = 0;

	while (pos < t->used) {
		const char *k = t->buf + pos;
		size_t kl = strlen(k);
		size_t vl = strlen(k + kl + 1);

		if (strcmp(k, key) == 0) {
			*pairlen = kl + 1 + vl + 1;
			return (int)pos;
		}
		pos += kl + 1 + vl + 1;
	}
	return -1;
}

int
dlb_tags_set(struct dlb_tags *t, const char *key, const char *value)
{
	size_t kl = strlen(key), vl = strlen(value), oldlen = 0, need;
	int at = tags_find(t, key, &oldlen);

	need = t->used - oldlen + kl + 1 + vl + 1;
	if (need > DLB_TAGS_BYTES || (at < 0 && t->n == UINT8_MAX))
		return -1;	/* refused; the old value (if any) stays */
	if (at >= 0) {
		memmove(t->buf + at, t->buf + at + oldlen, t->used - (size_t)at - oldlen);
		t->used = (uint16_t)(t->used - oldlen);
		t->n--;
	}
	memcpy(t->buf + t->used, key, kl + 1);
	memcpy(t->buf + t->used + kl + 1, value, vl + 1);
	t->used = (uint16_t)(t->used + kl + 1 + vl + 1);
	t->n++;
	return 0;
}

const char *
dlb_tags_get(const struct dlb_tags *t, const char *key)
{
	size_t pairlen;
	int at = tags_find(t, key, &pairlen);

	return at < 0 ? NULL : t->buf + at + strlen(key) + 1;
}

bool
dlb_tags_next(const struct dlb_tags *t, size_t *pos, const char **key, const char **value)
{
	size_t kl;

	if (*pos >= t->used)
		return false;
	*key = t->buf + *pos;
	kl = strlen(*key);
	*value = *key + kl + 1;
	*pos += kl + 1 + strlen(*value) + 1;
	return true;
}
