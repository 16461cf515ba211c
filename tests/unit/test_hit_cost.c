// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* A hit's cost in the target from sampling and lean windows, and its standard error. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include "hit_cost.h"

/* Windows of 100 polls of 40 us own work, h hits a poll at 700 ns, each window's busy time off
 * by jitter[i] ns a poll. */
static void windows(struct hit_cost_sums *s, double h, const double *jitter, int n)
{
	for (int i = 0; i < n; i++)
		hit_cost_add(s, 100, 100 * (40000 + h * 700 + jitter[i]), 100 * h);
}

static void test_exact_windows(void **state)
{
	const double none[4] = {0};
	struct hit_cost_sums full = {0}, lean = {0};
	double se, c;

	(void)state;
	windows(&full, 2, none, 4);
	windows(&lean, 1, none, 3);
	c = hit_cost_measure(&full, &lean, 100, 0.3, &se);
	assert_true(fabs(c - 700) < 1e-6);
	assert_true(se < 1e-6);
}

/* Windows that disagree by hundreds of ns a poll: the cost is still their mean difference,
 * and the error says how far it can be trusted. */
static void test_error_grows_with_spread(void **state)
{
	const double small[4] = {-10, 10, -10, 10}, large[4] = {-800, 800, -800, 800};
	struct hit_cost_sums f1 = {0}, l1 = {0}, f2 = {0}, l2 = {0};
	double se1, se2, c1, c2;

	(void)state;
	windows(&f1, 2, small, 4);
	windows(&l1, 1, small, 4);
	windows(&f2, 2, large, 4);
	windows(&l2, 1, large, 4);
	c1 = hit_cost_measure(&f1, &l1, 100, 0.3, &se1);
	c2 = hit_cost_measure(&f2, &l2, 100, 0.3, &se2);
	assert_true(fabs(c1 - 700) < 1e-6 && fabs(c2 - 700) < 1e-6);
	/* 4 windows a kind off by 10 ns a poll: Var(b) = 4/3 x 4 x (100 x 10)^2 / 400^2 = 33.3
	 * ns^2 in each kind, se = sqrt(2 x 33.3) / 1 hit a poll = 8.2 ns. */
	assert_true(fabs(se1 - sqrt(2 * 400.0 / 12)) < 1e-6);
	assert_true(fabs(se2 / se1 - 80) < 1e-6);
}

static void test_not_measurable(void **state)
{
	const double none[4] = {0};
	struct hit_cost_sums full = {0}, lean = {0}, same = {0};
	double se;

	(void)state;
	windows(&full, 2, none, 4);
	windows(&lean, 1, none, 1);
	assert_true(hit_cost_measure(&full, &lean, 100, 0.3, &se) == 0); /* one lean window */
	windows(&lean, 1, none, 1);
	assert_true(hit_cost_measure(&full, &lean, 500, 0.3, &se) == 0); /* too few polls */
	windows(&same, 2, none, 4);
	assert_true(hit_cost_measure(&full, &same, 100, 0.3, &se) == 0); /* no difference */
	hit_cost_add(&lean, 0, 5, 0);					 /* no polls: no window */
	assert_true(lean.n == 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_exact_windows),
	    cmocka_unit_test(test_error_grows_with_spread),
	    cmocka_unit_test(test_not_measurable),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
