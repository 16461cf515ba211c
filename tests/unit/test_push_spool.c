// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The push spool: order kept across a reopen, the bound kept by dropping the oldest. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <setjmp.h>
#include <cmocka.h>
#include "push_spool.h"

static struct push_item item(int n)
{
	struct push_item it = {};

	assert_true(asprintf(&it.query, "name=a&from=%d", n) > 0);
	it.ctype = strdup("multipart/form-data; boundary=x");
	it.len = 100;
	it.body = calloc(1, it.len);
	memset(it.body, 'a' + n, it.len);
	return it;
}

static void add(struct push_spool *sp, int n, struct push_stats *st)
{
	struct push_item it = item(n);

	assert_int_equal(push_spool_add(sp, &it, st), 0);
	push_item_free(&it);
}

static void expect_head(struct push_spool *sp, int n)
{
	struct push_item it, want = item(n);

	assert_int_equal(push_spool_head(sp, &it), 0);
	assert_true(it.from_spool);
	assert_string_equal(it.query, want.query);
	assert_string_equal(it.ctype, want.ctype);
	assert_int_equal(it.len, want.len);
	assert_memory_equal(it.body, want.body, want.len);
	push_item_free(&it);
	push_item_free(&want);
	push_spool_pop(sp);
}

static void test_order_and_bound(void **state)
{
	char dir[] = "/tmp/d9-spool-XXXXXX", cmd[64];
	struct push_stats st = {};
	struct push_spool sp;
	struct push_item it;
	uint64_t one;

	(void)state;
	assert_non_null(mkdtemp(dir));
	/* Room for three requests of this size. */
	assert_int_equal(push_spool_open(&sp, NULL, dir, 1 << 20), 0);
	add(&sp, 0, &st);
	one = sp.bytes;
	push_spool_close(&sp);
	assert_int_equal(push_spool_open(&sp, NULL, dir, 3 * one + one / 2), 0);
	assert_int_equal(sp.n, 1); /* what an earlier run left */
	for (int i = 1; i < 5; i++)
		add(&sp, i, &st);
	assert_int_equal(sp.n, 3);
	assert_true(sp.bytes <= 3 * one + one / 2);
	assert_int_equal(st.spooled, 5);
	assert_int_equal(st.dropped_spool_full, 2);
	push_spool_close(&sp);
	/* A later run sends them oldest first. */
	assert_int_equal(push_spool_open(&sp, NULL, dir, 1 << 20), 0);
	for (int i = 2; i < 5; i++)
		expect_head(&sp, i);
	assert_int_equal(push_spool_head(&sp, &it), -ENOENT);
	assert_int_equal(sp.bytes, 0);
	push_spool_close(&sp);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_order_and_bound),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
