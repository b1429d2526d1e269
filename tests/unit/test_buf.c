/*
 * test_buf.c - the growable byte buffer (dnslb/core/buf.c): appends,
 * growth, the bound, sticky errors, reset and take.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "dnslb/core/buf.h"
#include "dnslb/core/dnslb.h"

static void
test_buf_empty(void **state)
{
	struct dlb_buf b = DLB_BUF_INIT(0);

	(void)state;
	assert_null(b.p);
	assert_int_equal(b.len, 0);
	assert_false(dlb_buf_failed(&b));
	assert_null(dlb_buf_take(&b, NULL));
	assert_int_equal(dlb_buf_append(&b, "", 0), DLB_OK);
	assert_non_null(b.p);
	assert_string_equal(b.p, "");
	dlb_buf_deinit(&b);
	assert_null(b.p);
}

static void
test_buf_append_grows(void **state)
{
	struct dlb_buf b;
	char expect[10001];

	(void)state;
	dlb_buf_init(&b, 0);
	for (int i = 0; i < 10000; i++) {
		expect[i] = (char)('a' + i % 26);
		assert_int_equal(dlb_buf_append(&b, &expect[i], 1), DLB_OK);
		assert_true(b.cap > b.len);
	}
	expect[10000] = '\0';
	assert_int_equal(b.len, 10000);
	assert_string_equal(b.p, expect);
	/* doubling: the capacity is a power of two times the minimum */
	assert_int_equal(b.cap, DLB_BUF_MIN * 256);
	dlb_buf_deinit(&b);
}

static void
test_buf_printf(void **state)
{
	struct dlb_buf b = DLB_BUF_INIT(0);
	char big[3000];

	(void)state;
	assert_int_equal(dlb_buf_printf(&b, "%d-%s", 42, "x"), DLB_OK);
	assert_int_equal(dlb_buf_puts(&b, "/"), DLB_OK);
	assert_string_equal(b.p, "42-x/");
	/* a line longer than what is left: formatted again after growing */
	memset(big, 'z', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(dlb_buf_printf(&b, "[%s]", big), DLB_OK);
	assert_int_equal(b.len, 5 + 2 + sizeof(big) - 1);
	assert_int_equal(b.p[5], '[');
	assert_int_equal(b.p[b.len - 1], ']');
	assert_int_equal(b.p[b.len], '\0');
	dlb_buf_deinit(&b);
}

static void
test_buf_max_bound(void **state)
{
	struct dlb_buf b = DLB_BUF_INIT(100);
	char s[60];

	(void)state;
	memset(s, 'q', sizeof(s));
	assert_int_equal(dlb_buf_append(&b, s, 60), DLB_OK);
	assert_int_equal(dlb_buf_append(&b, s, 39), DLB_OK);	/* 99 + NUL = 100 */
	assert_true(b.cap <= 100);
	assert_int_equal(dlb_buf_append(&b, "x", 1), DLB_ESPACE);
	/* sticky: nothing more goes in, what was there stays */
	assert_int_equal(dlb_buf_append(&b, "", 0), DLB_ESPACE);
	assert_int_equal(dlb_buf_printf(&b, "%d", 1), DLB_ESPACE);
	assert_true(dlb_buf_failed(&b));
	assert_int_equal(b.len, 99);
	assert_int_equal(b.p[99], '\0');
	assert_null(dlb_buf_take(&b, NULL));	/* a failed buffer hands nothing over */
	assert_null(b.p);

	/* printf over the bound fails whole */
	b = DLB_BUF_INIT(16);
	assert_int_equal(dlb_buf_puts(&b, "abc"), DLB_OK);
	assert_int_equal(dlb_buf_printf(&b, "%s", "0123456789abcdef"), DLB_ESPACE);
	assert_string_equal(b.p, "abc");
	dlb_buf_deinit(&b);
}

static void
test_buf_reset_take(void **state)
{
	struct dlb_buf b = DLB_BUF_INIT(32);
	size_t cap, len;
	char *p;

	(void)state;
	assert_int_equal(dlb_buf_puts(&b, "hello"), DLB_OK);
	cap = b.cap;
	assert_int_equal(dlb_buf_append(&b, "0123456789012345678901234567890", 31), DLB_ESPACE);
	dlb_buf_reset(&b);
	assert_false(dlb_buf_failed(&b));
	assert_int_equal(b.len, 0);
	assert_int_equal(b.cap, cap);	/* memory kept */
	assert_string_equal(b.p, "");
	assert_int_equal(dlb_buf_reserve(&b, 20), DLB_OK);
	assert_true(b.cap >= 21);
	assert_int_equal(b.len, 0);
	assert_int_equal(dlb_buf_puts(&b, "world"), DLB_OK);
	p = dlb_buf_take(&b, &len);
	assert_non_null(p);
	assert_int_equal(len, 5);
	assert_string_equal(p, "world");
	free(p);
	assert_null(b.p);
	assert_int_equal(b.max, 32);	/* the bound stays */
	assert_int_equal(dlb_buf_reserve(&b, 40), DLB_ESPACE);
	dlb_buf_deinit(&b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buf_empty),
		cmocka_unit_test(test_buf_append_grows),
		cmocka_unit_test(test_buf_printf),
		cmocka_unit_test(test_buf_max_bound),
		cmocka_unit_test(test_buf_reset_take),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
