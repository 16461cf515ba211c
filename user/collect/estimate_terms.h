/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The terms of the estimates' variance, per epoch and task type, for metadata.json: with the
 * armed windows as the units drawn (docs/design.md, "Intervals"), an estimate's variance needs
 * per window the total z_c of the weights drawn in it. Kept here as sum z_c and sum z_c^2 per
 * (epoch, future), so that runs, or any set of epochs, can be combined: add the terms and the
 * window counts, and Var = m / (m - 1) x (sum z^2 - (sum z)^2 / m).
 */
#ifndef D9_ESTIMATE_TERMS_H
#define D9_ESTIMATE_TERMS_H

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
};

struct est_terms {
	struct est_cell *cells;
	size_t n, cap;
};

/* Adds a sample's weight to its window's total. Returns 0 or -ENOMEM. */
int est_terms_add(struct est_terms *t, uint64_t epoch, const char *future, uint64_t window,
		  double w);
/* Writes [{"epoch": E, "future": F, "windows_drawn": n, "sum": s, "sum_sq": q}, ...] sorted
 * by epoch and future (windows that drew nothing of F are left out: they add 0 to both). */
void est_terms_write_json(const struct est_terms *t, FILE *f);
void est_terms_free(struct est_terms *t);

#endif
