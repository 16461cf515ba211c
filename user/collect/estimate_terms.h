/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The terms of the estimates' variance, per epoch and task type, for metadata.json: with the
 * armed windows as the units drawn (docs/design.md, "Intervals"), an estimate's variance needs
 * per window the total z_c of the weights drawn in it. Kept here as sum z_c and sum z_c^2 per
 * (epoch, future), so that runs, or any set of epochs, can be combined: add the terms and the
 * window counts, and Var = m / (m - 1) x (sum z^2 - (sum z)^2 / m).
 *
 * Counts carry one term more, edge_sq: each count of a window (one per worker and kind of
 * resume, each its own stream), an integer, taken as uncertain by one resume either way at the
 * window's edges (a standard error of 1/2 in counts, the most a periodic stream's count in a
 * window of random phase has), over its inclusion probability. The gates open just after a
 * tick of the kernel's clock, and a runtime's timers keep a phase to it, so work on a timer is
 * counted alike in every window: the windows' spread is then zero while an epoch's truth is
 * not, and the edges' errors of an epoch's windows, all at one phase, are alike too. So they
 * add within an epoch before they are squared: edge_sq = (sum of 1/2 / p over the epoch's
 * counts)^2. Epochs apart, the phase has moved: the term is added to Var as it is.
 *
 * And price_se: the sum of each count's estimate times its elasticity to the price of a probe
 * hit (collector_resume_factor), which scales the counts of tasks the probes slow, times the
 * relative standard error of the price it was weighted with (the calibration's early in a run,
 * the one measured in the target later), and for a resume woken in a wake chain the
 * wake-chain factor's own error (its sampling error and its model's: collector_resume_factor)
 * in quadrature with it. An error in either moves every epoch's estimate the same way, so their
 * part of the variance is (sum of price_se over the epochs combined)^2, not a sum of squares over
 * epochs.
 */
#ifndef D9_ESTIMATE_TERMS_H
#define D9_ESTIMATE_TERMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct est_cell {
	uint64_t epoch;
	const char *future; /* owned by the task types; NULL: no task type */
	uint64_t window;    /* 0: drawn always armed, each weight a unit of its own */
	double z;
	/* Window 0 only: the units' squares and count, so that an always-armed flood of
	 * samples keeps one cell per epoch and type, not one per sample. */
	double sq;
	uint64_t draws;
	double edge;  /* counts only: sum of 1/2 / p over the counts added */
	double price; /* counts only: sum of n / p x its run-level relative error (price_rel) */
};

struct est_terms {
	struct est_cell *cells;
	size_t n, cap;
};

/* Adds a sample's weight to its window's total. Returns 0 or -ENOMEM. */
int est_terms_add(struct est_terms *t, uint64_t epoch, const char *future, uint64_t window,
		  double w);
/* Adds a count n (>= 1) of inclusion probability p to its window's total, and its edge and
 * price terms (price_rel: the relative standard error of 1 / p from run-level figures). Returns 0
 * or -ENOMEM. */
int est_terms_add_count(struct est_terms *t, uint64_t epoch, const char *future, uint64_t window,
			double n, double p, double price_rel);
/* Writes [{"epoch": E, "future": F, "windows_drawn": n, "sum": s, "sum_sq": q}, ...] sorted
 * by epoch and future (windows that drew nothing of F are left out: they add 0 to both), with
 * "edge_sq" and "price_se" too for the terms of counts (`counts`). */
void est_terms_write_json(const struct est_terms *t, bool counts, FILE *f);
void est_terms_free(struct est_terms *t);

#endif
