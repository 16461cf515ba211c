// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The in-window slowdown factor and how sensitive it is to the measured cost of a hit; the
 * flushes that cut --rotate folders on epoch boundaries; the samples a worker-second the exit
 * summary reports; the wake-chain factor's standard error. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <setjmp.h>
#include <cmocka.h>
#include "collector.h"

#define MS 1000000ULL

/* A worker's window: hits, busy and idle ms, a tenth of the busy time and of the hits in
 * clock-driven polls. */
static struct d9_gate_time gate(uint64_t hits, uint64_t busy_ms, uint64_t idle_ms)
{
	struct d9_gate_time g = {.hits = hits, .busy_ns = busy_ms * MS, .idle_ns = idle_ms * MS};

	g.clock_ns = g.busy_ns / 10;
	g.clock_hits = hits / 10;
	return g;
}

/* The elasticity of the weight 1/s, by finite differences of collector_slowdown(). */
static double numeric(const struct d9_gate_time *g, double c)
{
	double h = c * 1e-4;
	double w1 = 1 / collector_slowdown(g, c - h), w2 = 1 / collector_slowdown(g, c + h);

	return (w2 - w1) / (2 * h) * c / (1 / collector_slowdown(g, c));
}

static void test_matches_finite_differences(void **state)
{
	struct d9_gate_time mix = gate(2000, 20, 0), hot = gate(3000, 20, 0);

	(void)state;
	/* mix-like: hits take half the window; hot-like: most of it */
	assert_true(fabs(collector_slowdown_sensitivity(&mix, 5000) - numeric(&mix, 5000)) < 1e-3);
	assert_true(fabs(collector_slowdown_sensitivity(&hot, 5000) - numeric(&hot, 5000)) < 1e-3);
	assert_true(collector_slowdown_sensitivity(&mix, 5000) < 2);
	assert_true(collector_slowdown_sensitivity(&hot, 5000) > 3);
}

static void test_no_correction_no_sensitivity(void **state)
{
	struct d9_gate_time none = {0}, absorbed = gate(100, 20, 10);

	(void)state;
	/* no hits, or idle time that absorbs every hit: the factor is 1 whatever the cost */
	assert_true(collector_slowdown(&none, 5000) == 1.0);
	assert_true(collector_slowdown_sensitivity(&none, 5000) == 0);
	assert_true(collector_slowdown(&absorbed, 5000) == 1.0);
	assert_true(collector_slowdown_sensitivity(&absorbed, 5000) == 0);
}

static void test_floored_is_undefined(void **state)
{
	/* hits cost more than the busy time: the factor sits at its floor, the weights mean
	 * nothing, and no sensitivity can say how much */
	struct d9_gate_time g = gate(5000, 20, 0);

	(void)state;
	assert_true(collector_slowdown(&g, 5000) <= 0.05);
	assert_true(isnan(collector_slowdown_sensitivity(&g, 5000)));
}

/* Captures are lost time, not the tasks' useful time (the program keeps them out of busy
 * time): useful U = 20 - 2 - 1800 x 5 us = 9 ms either way, lost L = 2000 x 5 us = 10 ms, plus
 * 2 ms of captures. The finite differences still hold: captures do not scale with the hit's
 * cost. */
static void test_captures_are_lost_time(void **state)
{
	struct d9_gate_time g = gate(2000, 20, 0);

	(void)state;
	assert_true(fabs(collector_slowdown(&g, 5000) - 9.0 / 19.0) < 1e-9);
	g.capture_ns = 2 * MS;
	assert_true(fabs(collector_slowdown(&g, 5000) - 9.0 / 21.0) < 1e-9);
	assert_true(fabs(collector_slowdown_sensitivity(&g, 5000) - numeric(&g, 5000)) < 1e-3);
}

/* A writer that notes the epoch of each sample it is given. */
struct seen {
	uint64_t epochs[16];
	size_t n;
};

static int seen_sample(struct writer *w, const struct task_sample *s)
{
	struct seen *v = w->priv;

	if (v->n < 16)
		v->epochs[v->n++] = s->epoch;
	return 0;
}

static void queue(struct collector *c, uint64_t epoch)
{
	static struct d9_sample s;

	s = (struct d9_sample){.type = D9_REC_SAMPLE,
			       .pid = (uint32_t)getpid(),
			       .tid = (uint32_t)getpid(),
			       .worker = 1,
			       .epoch = epoch,
			       .prob = D9_PROB_ONE,
			       .idle_end_ns = epoch * D9_NSEC_PER_SEC};
	assert_int_equal(collector_handle(c, &s, sizeof(s)), 0);
}

/* A folder ending at epoch 11 gets every sample of epochs before 11 whatever its place in the
 * queue, none of 11 or later even in a flood, and the queue keeps its order. */
static void test_flush_stops_at_the_folder_end(void **state)
{
	struct seen v = {};
	struct writer w = {.format = "seen", .priv = &v, .sample = seen_sample};
	struct collector c;

	(void)state;
	collector_init(&c, getpid(), &w, 1, NULL, NULL, NULL);
	c.epoch_limit = 11;
	queue(&c, 10);
	queue(&c, 11);
	queue(&c, 10);
	queue(&c, 12);
	collector_flush(&c, UINT64_MAX - D9_NSEC_PER_SEC, false);
	assert_int_equal(v.n, 1);
	collector_flush_before(&c, 11);
	assert_int_equal(v.n, 2);
	assert_int_equal(v.epochs[1], 10);
	assert_int_equal(c.npending, 2);
	queue(&c, 13); /* the tail was kept right */
	collector_new_interval(&c, 11);
	assert_int_equal(c.samples_written, 0);
	assert_int_equal(c.samples_earlier, 2);
	collector_flush(&c, UINT64_MAX, true);
	assert_int_equal(v.n, 5);
	assert_int_equal(v.epochs[2], 11);
	assert_int_equal(v.epochs[3], 12);
	assert_int_equal(v.epochs[4], 13);
	assert_int_equal(c.samples_written, 3);
	collector_free(&c);
}

/* Two workers over epochs 10-13: one seen in every epoch, one in two of them (the windows
 * missed it in the others, which count as none); epochs before the first asked for, or that
 * rotation dropped, are not in the span. */
static void test_delivery_counts_missed_epochs_as_none(void **state)
{
	struct epoch_stat a[] = {{.epoch = 9, .selected = 40},
				 {.epoch = 10, .selected = 10},
				 {.epoch = 11, .selected = 8},
				 {.epoch = 12, .selected = 12},
				 {.epoch = 13, .selected = 10}};
	struct epoch_stat b[] = {{.epoch = 11, .selected = 20}, {.epoch = 13, .selected = 4}};
	struct worker_info w[2] = {{.epochs = a, .nepochs = 5}, {.epochs = b, .nepochs = 2}};
	struct collector c = {.workers = w, .nworkers = 2};
	double mean, least;

	(void)state;
	assert_true(collector_delivery(&c, 10, 13, &mean, &least));
	assert_true(fabs(least - 6.0) < 1e-9);
	assert_true(fabs(mean - (10.0 + 6.0) / 2) < 1e-9);
	/* Rotation kept epochs 12 on: the span starts there. */
	w[0].epochs = a + 3;
	w[0].nepochs = 2;
	w[1].epochs = b + 1;
	w[1].nepochs = 1;
	assert_false(collector_delivery(&c, 10, 13, &mean, &least));
	assert_true(collector_delivery(&c, 10, 14, &mean, &least));
	assert_true(fabs(mean - ((22.0 / 3 + 4.0 / 3) / 2)) < 1e-9);
	c.nworkers = 0;
	assert_false(collector_delivery(&c, 10, 14, &mean, &least));
}

/* Closed epochs of two workers of one runtime, each with its waits' hits, captures and length:
 * the factor's relative error is the ratio estimator's over all of them, computed here from
 * the epochs themselves; one epoch alone gives none, and waits all slowed alike give ~0. */
static void test_woken_rel_se_is_the_ratio_estimators(void **state)
{
	const uint64_t hits[] = {120, 80, 200, 40, 150, 90}, cap[] = {0, 50000, 0, 0, 20000, 0};
	const uint64_t len[] = {2 * MS, 3 * MS, 4 * MS, 1 * MS, 2 * MS, 5 * MS};
	const double price = 1000;
	struct collector c = {.hit_cost_ns = price};
	double sl = 0, sy = 0, ss = 0, r, want;
	size_t n = sizeof(hits) / sizeof(hits[0]);

	(void)state;
	for (size_t i = 0; i < n; i++) {
		struct d9_epoch e = {.type = D9_REC_EPOCH, .worker = 1 + i % 2, .epoch = 10 + i};

		e.gate.woken_hits = hits[i];
		e.gate.woken_capture_ns = cap[i];
		e.gate.woken_cycle_ns = len[i];
		assert_int_equal(collector_handle(&c, &e, sizeof(e)), 0);
		if (i == 0)
			assert_true(collector_woken_rel_se(&c, &c.workers[0]) == 0);
		sl += (double)hits[i] * price + (double)cap[i];
		sy += (double)len[i];
	}
	r = sl / sy;
	for (size_t i = 0; i < n; i++) {
		double d = (double)hits[i] * price + (double)cap[i] - r * (double)len[i];

		ss += d * d;
	}
	want = sqrt((double)n / (double)(n - 1) * ss) / sy / (1 - r);
	assert_true(fabs(collector_woken_rel_se(&c, &c.workers[1]) - want) < 1e-9 * want);
	assert_true(fabs(collector_woken_factor(&c, &c.workers[0], &(struct d9_gate_time){}) -
			 (1 - r)) < 1e-12);
	collector_free(&c);

	c = (struct collector){.hit_cost_ns = price};
	for (size_t i = 0; i < 4; i++) {
		struct d9_epoch e = {.type = D9_REC_EPOCH, .worker = 1, .epoch = 10 + i};

		e.gate.woken_hits = 100 * (i + 1);
		e.gate.woken_cycle_ns = 2 * MS * (i + 1);
		assert_int_equal(collector_handle(&c, &e, sizeof(e)), 0);
	}
	assert_true(collector_woken_rel_se(&c, &c.workers[0]) < 1e-6);
	collector_free(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_matches_finite_differences),
	    cmocka_unit_test(test_no_correction_no_sensitivity),
	    cmocka_unit_test(test_floored_is_undefined),
	    cmocka_unit_test(test_captures_are_lost_time),
	    cmocka_unit_test(test_flush_stops_at_the_folder_end),
	    cmocka_unit_test(test_delivery_counts_missed_epochs_as_none),
	    cmocka_unit_test(test_woken_rel_se_is_the_ratio_estimators),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
