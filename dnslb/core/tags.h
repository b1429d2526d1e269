/*
 * tags.h - per-query tags (SetTagAction, dq:setTag): key/value pairs that a
 * query carries from its rules into its in-flight slot and response rules.
 * A leaf: the rules set and read them, the in-flight slot keeps a copy.
 *
 * Thread: the owning worker (a query's tags belong to its query).
 */
#ifndef DNSLB_TAGS_H
#define DNSLB_TAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DLB_TAGS_BYTES 240	/* key\0value\0 pairs; a set that does not fit is refused */

struct dlb_tags {
	uint16_t used;		/* bytes of buf in use */
	uint8_t n;		/* pairs */
	char buf[DLB_TAGS_BYTES];
};

static inline void
dlb_tags_clear(struct dlb_tags *t)
{
	t->used = 0;
	t->n = 0;
}
/** Set (replace) @key to @value. @return 0, or -1 when it does not fit. */
int dlb_tags_set(struct dlb_tags *t, const char *key, const char *value);
/** @return the value, or NULL. */
const char *dlb_tags_get(const struct dlb_tags *t, const char *key);
/** Iterate: @pos starts at 0; @return false at the end. */
bool dlb_tags_next(const struct dlb_tags *t, size_t *pos, const char **key, const char **value);

#endif
