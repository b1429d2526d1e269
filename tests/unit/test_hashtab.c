/*
 * test_hashtab.c - the open-addressing hash table (dnslb/core/hashtab.c):
 * insert, lookup, delete (backward shift), growth, collisions, the bound,
 * shrinking, byte keys; checked against a plain array model.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "dnslb/core/hash.h"
#include "dnslb/core/hashtab.h"

struct ent {
	uint64_t key;
	uint32_t val;
	uint32_t tag;		/* the table's */
};

static bool
ent_eq(const void *e, const void *key)
{
	return ((const struct ent *)e)->key == *(const uint64_t *)key;
}

/* A bad hash on purpose (@collide): every key at home 0, so one long cluster. */
static bool collide;

static uint64_t
hash_of(uint64_t k)
{
	return collide ? (k << 40) : dlb_fmix64(k);
}

static struct ent *
find(const struct dlb_hashtab *t, uint64_t k)
{
	struct ent *e = dlb_hashtab_find(t, hash_of(k), ent_eq, &k);

	/* the constant-size form finds the same */
	assert_ptr_equal(e, DLB_HASHTAB_FIND(t, hash_of(k), struct ent, tag, ent_eq, &k));
	return e;
}

static struct ent *
add(struct dlb_hashtab *t, uint64_t k, uint32_t v)
{
	struct ent *e = dlb_hashtab_add(t, hash_of(k));

	if (e != NULL) {
		assert_int_equal(e->key, 0);
		assert_int_equal(e->val, 0);
		e->key = k;
		e->val = v;
	}
	return e;
}

static void
init(struct dlb_hashtab *t, uint32_t min, uint32_t max)
{
	dlb_hashtab_init(t, sizeof(struct ent), offsetof(struct ent, tag), min, max);
}

static void
test_hashtab_basic(void **state)
{
	struct dlb_hashtab t;
	struct ent *e;

	(void)state;
	collide = false;
	init(&t, 16, 1024);
	assert_null(find(&t, 1));		/* no slots yet: no allocation */
	assert_int_equal(dlb_hashtab_slots(&t), 0);
	assert_non_null(add(&t, 1, 10));
	assert_non_null(add(&t, 2, 20));
	assert_int_equal(dlb_hashtab_slots(&t), 16);
	assert_int_equal(dlb_hashtab_count(&t), 2);
	e = find(&t, 1);
	assert_non_null(e);
	assert_int_equal(e->val, 10);
	assert_int_equal(find(&t, 2)->val, 20);
	assert_null(find(&t, 3));
	dlb_hashtab_remove(&t, e);
	assert_null(find(&t, 1));
	assert_int_equal(find(&t, 2)->val, 20);
	assert_int_equal(dlb_hashtab_check(&t), 0);
	dlb_hashtab_shrink(&t);			/* one left: kept */
	assert_int_equal(dlb_hashtab_slots(&t), 16);
	dlb_hashtab_remove(&t, find(&t, 2));
	dlb_hashtab_shrink(&t);			/* empty: freed */
	assert_int_equal(dlb_hashtab_slots(&t), 0);
	assert_int_equal(dlb_hashtab_memory(&t), 0);
	dlb_hashtab_deinit(&t);
}

/* Random adds and removes against a model, with @collide or a good hash. */
static void
churn(bool bad_hash, uint32_t nkeys, uint32_t rounds)
{
	struct dlb_hashtab t;
	uint32_t *model = calloc(nkeys, sizeof(*model));	/* 0: absent, else value */
	unsigned seed = 12345;

	assert_non_null(model);
	collide = bad_hash;
	init(&t, 4, 1u << 16);
	for (uint32_t r = 0; r < rounds; r++) {
		uint64_t k;
		struct ent *e;

		seed = seed * 1103515245u + 12345u;
		k = (seed >> 8) % nkeys;
		e = find(&t, k + 1);
		if (model[k] != 0) {
			assert_non_null(e);
			assert_int_equal(e->val, model[k]);
			if (seed & 1) {
				dlb_hashtab_remove(&t, e);
				model[k] = 0;
			}
		} else {
			assert_null(e);
			assert_non_null(add(&t, k + 1, r + 1));
			model[k] = r + 1;
		}
		if (r % 97 == 0)
			assert_int_equal(dlb_hashtab_check(&t), 0);
	}
	assert_int_equal(dlb_hashtab_check(&t), 0);
	for (uint32_t k = 0; k < nkeys; k++) {
		struct ent *e = find(&t, k + 1);

		if (model[k] == 0) {
			assert_null(e);
		} else {
			assert_non_null(e);
			assert_int_equal(e->val, model[k]);
		}
	}
	free(model);
	dlb_hashtab_deinit(&t);
}

static void
test_hashtab_churn(void **state)
{
	(void)state;
	churn(false, 5000, 100000);
}

static void
test_hashtab_collisions(void **state)
{
	(void)state;
	/* every key has the same home: deletion must keep the cluster reachable */
	churn(true, 200, 20000);
}

static void
test_hashtab_growth_and_bound(void **state)
{
	struct dlb_hashtab t;
	uint32_t n = 0;

	(void)state;
	collide = false;
	init(&t, 16, 256);
	/* doubling at load 1/2 */
	for (; n < 8; n++)
		assert_non_null(add(&t, n + 1, n));
	assert_int_equal(dlb_hashtab_slots(&t), 16);
	assert_true(dlb_hashtab_add_grows(&t));
	assert_non_null(add(&t, ++n, n));
	assert_int_equal(dlb_hashtab_slots(&t), 32);
	/* up to the bound, then filled to 3/4, then full */
	while (add(&t, n + 1, n) != NULL)
		n++;
	assert_int_equal(dlb_hashtab_slots(&t), 256);
	assert_int_equal(dlb_hashtab_count(&t), 192);
	assert_int_equal(dlb_hashtab_memory(&t), 256 * sizeof(struct ent));
	assert_null(add(&t, 100000, 0));	/* full: refused, nothing changed */
	assert_int_equal(dlb_hashtab_count(&t), 192);
	assert_int_equal(dlb_hashtab_check(&t), 0);
	for (uint32_t k = 1; k <= 192; k++)
		assert_non_null(find(&t, k));
	/* a removal makes room again */
	dlb_hashtab_remove(&t, find(&t, 5));
	assert_non_null(add(&t, 100000, 0));
	/* shrinking halves once per call, at load < 1/8 */
	for (uint32_t k = 1; k <= 192; k++) {
		struct ent *e = find(&t, k);

		if (e != NULL && k > 20)
			dlb_hashtab_remove(&t, e);
	}
	dlb_hashtab_shrink(&t);
	assert_int_equal(dlb_hashtab_slots(&t), 128);
	dlb_hashtab_shrink(&t);
	assert_int_equal(dlb_hashtab_slots(&t), 128);	/* 20 / 128: not under 1/8 */
	assert_int_equal(dlb_hashtab_check(&t), 0);
	for (uint32_t k = 1; k <= 20; k++)
		assert_true(k == 5 ? find(&t, k) == NULL : find(&t, k) != NULL);
	assert_non_null(find(&t, 100000));
	dlb_hashtab_clear(&t);
	assert_int_equal(dlb_hashtab_count(&t), 0);
	assert_null(find(&t, 1));
	dlb_hashtab_deinit(&t);
}

/* Sweeping while walking the slots: a shifted-in entry lands at i. */
static void
test_hashtab_sweep(void **state)
{
	struct dlb_hashtab t;

	(void)state;
	collide = true;
	init(&t, 16, 1024);
	for (uint32_t k = 1; k <= 100; k++)
		assert_non_null(add(&t, k, k));
	for (uint32_t i = 0; i < dlb_hashtab_slots(&t); i++) {
		struct ent *e;

		while ((e = dlb_hashtab_at(&t, i)) != NULL && e->val % 2 == 0)
			dlb_hashtab_remove(&t, e);
	}
	assert_int_equal(dlb_hashtab_count(&t), 50);
	assert_int_equal(dlb_hashtab_check(&t), 0);
	for (uint32_t k = 1; k <= 100; k++)
		assert_true(k % 2 == 0 ? find(&t, k) == NULL : find(&t, k) != NULL);
	dlb_hashtab_deinit(&t);
}

static void
test_hashtab_copy(void **state)
{
	struct dlb_hashtab t, c;

	(void)state;
	collide = false;
	init(&t, 16, 1024);
	init(&c, 2, 2);
	assert_int_equal(dlb_hashtab_copy(&c, &t), 0);	/* of an empty one */
	assert_int_equal(dlb_hashtab_slots(&c), 0);
	for (uint32_t k = 1; k <= 100; k++)
		assert_non_null(add(&t, k, k * 3));
	assert_int_equal(dlb_hashtab_copy(&c, &t), 0);
	assert_int_equal(dlb_hashtab_count(&c), 100);
	assert_int_equal(dlb_hashtab_slots(&c), dlb_hashtab_slots(&t));
	assert_int_equal(c.max_slots, 1024);
	dlb_hashtab_remove(&t, find(&t, 7));	/* the copy is its own */
	for (uint32_t k = 1; k <= 100; k++)
		assert_int_equal(find(&c, k)->val, k * 3);
	assert_int_equal(dlb_hashtab_check(&c), 0);
	dlb_hashtab_deinit(&t);
	dlb_hashtab_deinit(&c);
}

struct sent {
	char name[16];
	void *ptr;		/* a table of pointers: the value is a pointer */
	uint32_t tag;
};

static void
test_hashtab_bytes(void **state)
{
	struct dlb_hashtab t;
	const char *names[] = { "alpha", "beta", "gamma", "delta" };
	int vals[4];

	(void)state;
	dlb_hashtab_init(&t, sizeof(struct sent), offsetof(struct sent, tag), 2, 64);
	for (int i = 0; i < 4; i++) {
		char key[16] = { 0 };
		struct sent *e;

		strcpy(key, names[i]);
		e = dlb_hashtab_add(&t, dlb_hash_bytes(key, sizeof(key), 7));
		assert_non_null(e);
		memcpy(e->name, key, sizeof(key));
		e->ptr = &vals[i];
	}
	for (int i = 0; i < 4; i++) {
		char key[16] = { 0 };
		struct sent *e;

		strcpy(key, names[i]);
		e = dlb_hashtab_find_bytes(&t, dlb_hash_bytes(key, sizeof(key), 7), key, sizeof(key),
					   offsetof(struct sent, name));
		assert_non_null(e);
		assert_ptr_equal(e->ptr, &vals[i]);
	}
	{
		char key[16] = "epsilon";

		assert_null(dlb_hashtab_find_bytes(&t, dlb_hash_bytes(key, sizeof(key), 7), key,
						   sizeof(key), offsetof(struct sent, name)));
	}
	assert_int_equal(dlb_hashtab_slots(&t), 8);
	dlb_hashtab_deinit(&t);
}

static void
test_hash_helpers(void **state)
{
	(void)state;
	/* FNV-1a test vectors (Fowler, Noll, Vo) */
	assert_int_equal(dlb_fnv1a32("", 0, DLB_FNV1A32_INIT), 0x811c9dc5u);
	assert_int_equal(dlb_fnv1a32("a", 1, DLB_FNV1A32_INIT), 0xe40c292cu);
	assert_true(dlb_fnv1a64("a", 1, DLB_FNV1A64_INIT) == 0xaf63dc4c8601ec8cULL);
	assert_true(dlb_fnv1a64_str("foobar", DLB_FNV1A64_INIT) == 0x85944171f73967e8ULL);
	assert_true(dlb_hash_bytes("abc", 3, 0) == XXH3_64bits("abc", 3));
	assert_true(dlb_fmix64(0) == 0);
	assert_true(dlb_hash_key128(1, 2, 3, 4) != dlb_hash_key128(2, 1, 3, 4));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hashtab_basic),
		cmocka_unit_test(test_hashtab_churn),
		cmocka_unit_test(test_hashtab_collisions),
		cmocka_unit_test(test_hashtab_growth_and_bound),
		cmocka_unit_test(test_hashtab_sweep),
		cmocka_unit_test(test_hashtab_copy),
		cmocka_unit_test(test_hashtab_bytes),
		cmocka_unit_test(test_hash_helpers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
