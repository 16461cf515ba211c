// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The count terms metadata.json carries per epoch and task type: the windows' sums and
 * squares, the edge term (alike within an epoch, so added before it is squared) and the
 * run-level price term. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>
#include "estimate_terms.h"

static char *written(const struct est_terms *t)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	est_terms_write_json(t, true, f);
	fclose(f);
	return buf;
}

static void test_edges_add_within_an_epoch(void **state)
{
	struct est_terms t = {0};
	char *json;

	(void)state;
	/* Epoch 5: two windows, two workers' counts in the first; each count's edge is 1/2 / p. */
	assert_int_equal(est_terms_add_count(&t, 5, "a", 1, 10, 0.1, 0.02), 0);
	assert_int_equal(est_terms_add_count(&t, 5, "a", 1, 20, 0.1, 0.02), 0);
	assert_int_equal(est_terms_add_count(&t, 5, "a", 2, 10, 0.1, 0.02), 0);
	/* Epoch 6: one count; always armed (window 0) has no edges. */
	assert_int_equal(est_terms_add_count(&t, 6, "a", 1, 4, 0.5, 0), 0);
	assert_int_equal(est_terms_add_count(&t, 6, "a", 0, 7, 1.0, 0), 0);
	json = written(&t);
	/* (5 + 5 + 5)^2, not 3 x 25; price: 400 x 0.02 */
	assert_non_null(strstr(json, "{\"epoch\": 5, \"future\": \"a\", \"windows_drawn\": 2, "
				     "\"sum\": 400, \"sum_sq\": 100000, \"edge_sq\": 225, "
				     "\"price_se\": 8}"));
	/* one count at p = 1/2: (1)^2; the always-armed count is a draw of its own */
	assert_non_null(strstr(json, "{\"epoch\": 6, \"future\": \"a\", \"windows_drawn\": 2, "
				     "\"sum\": 15, \"sum_sq\": 113, \"edge_sq\": 1, "
				     "\"price_se\": 0}"));
	free(json);
	est_terms_free(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_edges_add_within_an_epoch),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
