/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What a probe hit costs inside the target, from the polls measured in sampling and lean
 * windows (arming.c, target_hit_cost), with its standard error. Pure arithmetic, tested on
 * its own.
 *
 * Busy time per poll is b = u + h x c in both kinds of window, so c = (b_full - b_lean) /
 * (h_full - h_lean). Each b is a ratio over windows (sum of busy / sum of polls), and its
 * polls are not independent: one window that met a burst of timers or a preemption moves all
 * of its polls together. So the unit drawn is the window, and the variance is the ratio
 * estimator's, by linearization: Var(b) = n / (n - 1) x sum (busy_w - b polls_w)^2 / polls^2.
 * A hit adds a few percent to a poll of tens of us, and with a handful of lean windows the
 * difference swings by as much as the hit itself; the caller uses the measurement only when
 * its error is small.
 */
#ifndef D9_HIT_COST_H
#define D9_HIT_COST_H

/* Sums over the windows of one kind: count, polls, busy ns, hits and the squares the
 * variance needs. */
struct hit_cost_sums {
	double n, polls, busy, hits;
	double busy_sq, busy_polls, polls_sq;
};

/* Adds one window's measured polls (none: nothing added). */
void hit_cost_add(struct hit_cost_sums *s, double polls, double busy_ns, double hits);

/* The extra hits a poll of the sampling windows takes over one of the lean windows. */
double hit_cost_extra_hits(const struct hit_cost_sums *full, const struct hit_cost_sums *lean);

/* The cost of a hit in ns and its standard error (*se), or 0 where the windows cannot say:
 * fewer than two windows of a kind, fewer than min_polls polls, or hits per poll that differ
 * by less than min_dh. */
double hit_cost_measure(const struct hit_cost_sums *full, const struct hit_cost_sums *lean,
			double min_polls, double min_dh, double *se);

#endif
