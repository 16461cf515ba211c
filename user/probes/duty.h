/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The arithmetic of the arming schedule, apart from the thread that runs it (arming.c): how
 * much of each second the per-poll probes may be attached (the duty) so that the target pays
 * at most the budget, how many windows that time is cut into, and how much of it the samples
 * actually need. Pure functions of measured figures, so they can be tested on their own.
 *
 * Figures are rates per wall second, not per epoch: the first epoch of a run is a fraction of
 * a second, and a window's fixed cost (its attach and detach) against a partial epoch's CPU
 * read as several times the budget, which collapsed the duty and left the run to ramp back up.
 */
#ifndef D9_DUTY_H
#define D9_DUTY_H

#include <stdbool.h>
#include <stdint.h>

/* Windows per second at most: each costs an attach and a detach. */
#define DUTY_MAX_WINDOWS 4
/* The duty at which the probes are left attached for good (windows save too little). */
#define DUTY_CONTINUOUS 0.5
/* A floor only: what the samples need normally sets the duty. */
#define DUTY_MIN 0.0005
/* The duty of the first, partial epoch, before anything is measured. */
#define DUTY_INITIAL 0.005

/* What the last epochs cost: sums decayed by half each epoch (duty_observe), so that a burst
 * in one epoch moves the plan by half; and what was spent beyond the budget since the start
 * (debt, bounded), so that epochs over it are paid back by the next ones. Taking the dearest recent
 * epoch instead collapsed the duty whenever a burst of work met a window, and the run ramped up
 * again for seconds. */
struct duty_state {
	double wall, armed, probe, own, tool_other, fixed; /* ns, decayed */
	double hits;					   /* decayed */
	uint32_t epochs_seen;				   /* in all */
	double debt;					   /* ns */
	bool tool_spiked; /* the last epoch's tool CPU was a spike (tool_for_plan) */
	bool seeded;
};

/* One epoch's measurement: wall time it covers and what happened in it. */
struct duty_epoch {
	double wall_ns;	 /* since the last measurement */
	double armed_ns; /* time the per-poll probes were attached */
	double probe_ns; /* CPU the probes cost the target inside the gate */
	/* and outside it: hits while a window's probes go in, settle and come out, and on kept
	 * probes between windows. They come with the windows, not with the gate's length, and
	 * priced per armed second they made short windows look dear, so that the duty shrank,
	 * the windows with it, and the price rose again. */
	double fixed_ns;
	uint64_t hits; /* probe hits behind probe_ns */
	double own_ns; /* the target's own CPU (its CPU minus probe_ns) */
	double tool_other_ns;
	double windows_ns; /* the tool's CPU for the windows' attach and detach */
	/* What the run's start-up cost beyond the above (the first epoch's tool CPU and hits
	 * outside its gate): paid back, not planned on, as it is not spent again. */
	double startup_ns;
};

/* What a window costs the tool, and the limits the plan must keep. */
struct duty_limits {
	double budget;	      /* share of the target's own CPU, e.g. 0.01 */
	double window_cpu_ns; /* the tool's CPU for one window's attach and detach */
	double window_wall_ns;
	double settle_ns;     /* between attach and the gate opening */
	double min_window_ns; /* no window shorter than this */
	double window_share;  /* share of the budget windows' fixed costs may take */
};

/* Folds one epoch into the state; budget as in struct duty_limits. */
void duty_observe(struct duty_state *s, const struct duty_epoch *e, double budget);
/* The duty that spends the budget, from the state; prev is the duty in force. */
double duty_for_budget(const struct duty_state *s, const struct duty_limits *l, double prev);
/* Windows per second for a duty. */
uint64_t duty_windows(const struct duty_limits *l, double duty, double own_ns_per_s);
/* Eligible transitions per worker per second windows must see for hz samples each. */
double duty_transitions_needed(double hz);
/* The duty at which windows see that many, from the last epoch's count; +inf if unknown. */
double duty_for_samples(double hz, uint64_t eligible, uint32_t workers, double armed_ns);
/* The share of the target's own CPU spent outside the gates (the tool's CPU beyond windows,
 * its always-on programs, hits around windows), from the state; 0 before it is seeded. */
double duty_outside_gates(const struct duty_state *s);
/* The duty to use: the lower of the two, floored, or 1.0 once continuous pays. */
double duty_clamp(double duty, double budget);

#endif
