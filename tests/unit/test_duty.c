// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The arming schedule's arithmetic: duty from measured costs, windows per second, need. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include "duty.h"

static const struct duty_limits limits = {
    .budget = 0.01,
    .window_cpu_ns = 1e6,
    .window_wall_ns = 2e6,
    .settle_ns = 250e3,
    .min_window_ns = 20e6,
    .window_share = 0.25,
};

/* One second, 1 s of target CPU, 5 ms armed costing 2 ms of hits. */
static struct duty_epoch epoch_of(double armed_ms, double probe_ms, double other_ms)
{
	return (struct duty_epoch){.wall_ns = 1e9,
				   .armed_ns = armed_ms * 1e6,
				   .probe_ns = probe_ms * 1e6,
				   .hits = 1000,
				   .own_ns = 1e9,
				   .tool_other_ns = other_ms * 1e6};
}

static void test_budget_duty(void **state)
{
	struct duty_state s = {0};
	struct duty_epoch e = epoch_of(5, 2, 3);
	double d;

	(void)state;
	assert_true(duty_for_budget(&s, &limits, 0.005) == 0.005); /* nothing known yet */
	duty_observe(&s, &e, limits.budget);
	/* 10 ms budget - 3 ms other - one 1 ms window = 6 ms at 0.4 ms per armed ms (the 5 ms
	 * left unspent are not spent later). */
	d = duty_for_budget(&s, &limits, 0.005);
	assert_true(fabs(d - 0.015) < 1e-9);
}

/* A partial first epoch prices like a whole one: figures are per second. */
static void test_partial_epoch(void **state)
{
	struct duty_state s = {0};
	struct duty_epoch e = epoch_of(5, 2, 3);

	(void)state;
	e.wall_ns = 0.3e9;
	e.own_ns = 0.3e9;
	e.tool_other_ns = 0.9e6;
	duty_observe(&s, &e, limits.budget);
	/* 3 ms other a second: (10 - 3 - 1) / 0.4. */
	assert_true(fabs(duty_for_budget(&s, &limits, 0.005) - 0.015) < 1e-9);
}

/* Hits outside the gate are a cost per second, not per armed second. */
static void test_fixed_cost(void **state)
{
	struct duty_state s = {0};
	struct duty_epoch e = epoch_of(5, 2, 0);

	(void)state;
	e.fixed_ns = 3e6;
	duty_observe(&s, &e, limits.budget);
	assert_true(fabs(duty_for_budget(&s, &limits, 0.005) - 0.015) < 1e-9);
}

/* An epoch over the budget is paid back by the next; one that spends exactly the budget
 * leaves the plan where it is. */
static void test_debt(void **state)
{
	struct duty_state s = {0}, over = {0};
	struct duty_epoch e = epoch_of(5, 2, 3), burst = epoch_of(5, 2, 3);
	double d0;

	(void)state;
	e.fixed_ns = 4e6; /* 2 + 3 + 4 + 1 ms of windows: exactly 10 ms */
	e.windows_ns = 1e6;
	burst.fixed_ns = 12e6;
	burst.windows_ns = 1e6;
	duty_observe(&s, &e, limits.budget);
	d0 = duty_for_budget(&s, &limits, 0.005);
	for (int i = 0; i < 5; i++)
		duty_observe(&s, &e, limits.budget);
	assert_true(fabs(duty_for_budget(&s, &limits, 0.005) - d0) < 1e-9);
	assert_true(fabs(s.debt) < 1e-3);
	duty_observe(&over, &burst, limits.budget);
	duty_observe(&over, &e, limits.budget);
	duty_observe(&s, &e, limits.budget);
	assert_true(duty_for_budget(&over, &limits, 0.005) < duty_for_budget(&s, &limits, 0.005));
	assert_true(over.debt > 0);
}

/* Two plans warmed on four epochs like e; then s sees spike and calm sees e again: their
 * duties after it. */
static void spike_against_calm(struct duty_state *s, struct duty_epoch e, struct duty_epoch spike,
			       double *d_calm, double *d_spike)
{
	struct duty_state calm = {0};

	for (int i = 0; i < 4; i++) {
		duty_observe(s, &e, limits.budget);
		duty_observe(&calm, &e, limits.budget);
	}
	duty_observe(s, &spike, limits.budget);
	duty_observe(&calm, &e, limits.budget);
	*d_calm = duty_for_budget(&calm, &limits, 0.005);
	*d_spike = duty_for_budget(s, &limits, 0.005);
}

/* One epoch of the tool's 10 times its usual CPU (its first symbols, a drain) leaves the
 * windows open: the excess goes to the debt, paid back over the next seconds, and what it
 * takes from the next epoch is a quarter of the excess at most, not the whole spike. */
static void test_tool_spike(void **state)
{
	struct duty_state s = {0};
	double d_calm, d_spike;

	(void)state;
	spike_against_calm(&s, epoch_of(5, 2, 2), epoch_of(5, 2, 20), &d_calm, &d_spike);
	assert_true(d_spike > 0.3 * d_calm);
	assert_true(d_spike < d_calm);
	assert_true(s.debt > 10e6);
}

/* Where the tool's usual CPU is most of the budget (many workers' stacks and switches), a
 * lone spike of it costs the next epoch at most the half of its windows a repayment may take;
 * a second spike in a row reaches the plan. */
static void test_lone_tool_spike(void **state)
{
	struct duty_state s = {0};
	struct duty_epoch spike = epoch_of(5, 2, 70);
	double d_calm, d_spike;

	(void)state;
	spike_against_calm(&s, epoch_of(5, 2, 6), spike, &d_calm, &d_spike);
	assert_true(d_calm > 0);
	assert_true(d_spike >= 0.5 * d_calm - 1e-12);
	duty_observe(&s, &spike, limits.budget);
	assert_true(duty_for_budget(&s, &limits, 0.005) < 0.5 * d_calm);
}

/* However much is owed, a repayment takes at most half of what the windows would get: an
 * epoch at the floor duty weighs its few resumes thousands of times each. */
static void test_debt_share(void **state)
{
	struct duty_state s = {0}, calm = {0};
	struct duty_epoch e = epoch_of(5, 2, 3), burst = epoch_of(5, 2, 3);
	double d_calm, d_owing;

	(void)state;
	burst.fixed_ns = 200e6;
	duty_observe(&s, &burst, limits.budget);
	duty_observe(&s, &e, limits.budget);
	duty_observe(&calm, &e, limits.budget);
	duty_observe(&calm, &e, limits.budget);
	s.fixed = calm.fixed; /* the plan alike but for the debt */
	d_calm = duty_for_budget(&calm, &limits, 0.005);
	d_owing = duty_for_budget(&s, &limits, 0.005);
	/* held to 2 s of the 10 ms budget, less the 5 ms the next epoch left */
	assert_true(fabs(s.debt - 15e6) < 1e-3);
	assert_true(fabs(d_owing - 0.5 * d_calm) < 1e-9);
}

/* The debt does not fade: epochs that spend exactly the budget leave it whole, to be paid back
 * by the plan's smaller duty, so a run's cost comes back to the budget. */
static void test_debt_kept(void **state)
{
	struct duty_state s = {0};
	struct duty_epoch e = epoch_of(5, 2, 3), burst = epoch_of(5, 2, 3);
	double owed;

	(void)state;
	e.fixed_ns = 4e6; /* 2 + 3 + 4 + 1 ms of windows: exactly 10 ms */
	e.windows_ns = 1e6;
	burst = e;
	burst.fixed_ns = 10e6;
	duty_observe(&s, &burst, limits.budget);
	owed = s.debt;
	for (int i = 0; i < 20; i++)
		duty_observe(&s, &e, limits.budget);
	assert_true(fabs(owed - 6e6) < 1e-3);
	assert_true(fabs(s.debt - owed) < 1e-3);
}

/* The run's start-up (the first epoch's tool CPU) is owed, not planned on: the plan after it
 * is the one without it, less the repayment. */
static void test_startup_owed(void **state)
{
	struct duty_state s = {0}, plain = {0};
	struct duty_epoch e = epoch_of(5, 2, 3), first = epoch_of(5, 2, 3);

	(void)state;
	first.startup_ns = 8e6;
	duty_observe(&s, &first, limits.budget);
	duty_observe(&plain, &e, limits.budget);
	assert_true(fabs(s.debt - 3e6) < 1e-3); /* 2 + 3 + 8 ms against 10 */
	assert_true(fabs(s.tool_other - plain.tool_other) < 1e-3);
	/* 6 ms for the gates without the debt; a quarter of the 3 ms owed goes to it. */
	assert_true(fabs(duty_for_budget(&s, &limits, 0.005) - (6e6 - 0.75e6) / 0.4e6 / 1e3) <
		    1e-9);
}

/* Few hits: growth is bounded, since a short window says little of a longer one. */
static void test_thin_growth(void **state)
{
	struct duty_state s = {0};
	struct duty_epoch e = epoch_of(5, 0.01, 0);

	(void)state;
	e.hits = 5;
	duty_observe(&s, &e, limits.budget);
	assert_true(fabs(duty_for_budget(&s, &limits, 0.005) - 0.02) < 1e-12);
}

/* Over budget before any probe: a negative duty, which must not wrap the window count. Not
 * from the first, partial epoch alone, whose start-up may have made it dear: the duty in
 * force holds one more epoch. */
static void test_negative_duty(void **state)
{
	struct duty_state s = {0};
	struct duty_epoch e = epoch_of(5, 2, 50);

	(void)state;
	duty_observe(&s, &e, limits.budget);
	assert_true(duty_for_budget(&s, &limits, 0.005) == 0.005);
	duty_observe(&s, &e, limits.budget);
	assert_true(duty_for_budget(&s, &limits, 0.005) < 0);
	assert_int_equal(duty_windows(&limits, -0.5, 1e9), 1);
	assert_true(duty_clamp(-0.5, 0.01) == DUTY_MIN);
}

/* What the budget leaves the windows: the share of the target spent outside the gates, the
 * tool's CPU and the hits around windows over the target's own CPU a second; none before a
 * measurement. */
static void test_outside_gates(void **state)
{
	struct duty_state s = {0};
	struct duty_epoch e = epoch_of(5, 2, 8);

	(void)state;
	assert_true(duty_outside_gates(&s) == 0);
	e.fixed_ns = 4e6;
	duty_observe(&s, &e, limits.budget);
	duty_observe(&s, &e, limits.budget);
	assert_true(fabs(duty_outside_gates(&s) - 0.012) < 1e-12);
	assert_true(duty_for_budget(&s, &limits, 0.005) < 0);
}

static void test_windows(void **state)
{
	(void)state;
	/* 0.25 x 10 ms / 1 ms pays for 2; 20 ms at least each: 1% makes 0 -> 1. */
	assert_int_equal(duty_windows(&limits, 0.01, 1e9), 1);
	assert_int_equal(duty_windows(&limits, 0.05, 1e9), 2);
	assert_int_equal(duty_windows(&limits, 0.2, 8e9), DUTY_MAX_WINDOWS);
}

static void test_need(void **state)
{
	(void)state;
	assert_true(duty_transitions_needed(10) == 160);
	assert_true(duty_transitions_needed(1) == 16);
	assert_true(duty_transitions_needed(200) == 400);
	/* 2 workers, 400 transitions in 10 ms armed: 20,000/s each; 160 wanted. */
	assert_true(fabs(duty_for_samples(10, 400, 2, 10e6) - 0.008) < 1e-12);
	assert_true(isinf(duty_for_samples(10, 0, 2, 10e6)));
	assert_true(duty_clamp(0.6, 0.01) == 1.0);
	assert_true(duty_clamp(0.001, 1.0) == 1.0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_budget_duty),	  cmocka_unit_test(test_partial_epoch),
	    cmocka_unit_test(test_fixed_cost),	  cmocka_unit_test(test_debt),
	    cmocka_unit_test(test_tool_spike),	  cmocka_unit_test(test_lone_tool_spike),
	    cmocka_unit_test(test_debt_share),	  cmocka_unit_test(test_thin_growth),
	    cmocka_unit_test(test_negative_duty), cmocka_unit_test(test_outside_gates),
	    cmocka_unit_test(test_windows),	  cmocka_unit_test(test_need),
	    cmocka_unit_test(test_debt_kept),	  cmocka_unit_test(test_startup_owed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
