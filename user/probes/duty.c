// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <math.h>
#include "duty.h"

#define NSEC 1e9
/* Hits an epoch's cost must rest on before the duty may grow past DUTY_GROWTH_THIN x: a
 * window of a few polls says little about what a longer one costs. */
#define DUTY_TRUSTED_HITS 200.0
#define DUTY_GROWTH_THIN 4.0
/* The first epoch's measurement replaces nothing; later ones are averaged in by this. */
#define DUTY_DECAY 0.5
/* Share of the debt paid back each second. The debt is everything spent over the budget since
 * the start: the run's start-up (its first window puts in every probe and the tool reads the
 * target's symbols), the first epochs' plans made before the windows' fixed costs and the
 * tool's usual CPU are known, and the steady overspend of a plan that divides by a noisy
 * price (few hits a window where traps are slow), by E[1 / price]. Kept whole, it is all paid
 * back, so the run's cost converges on the budget; a debt fading 5% an epoch forgave a sixth
 * of the steady overspend and the start-up, and left 20 s runs 3-8% over the budget
 * (bench/RESULTS.md, "The whole debt"). */
#define DEBT_GAIN 0.25
/* The debt is held to this many seconds of the budget: a stretch of workers outside the
 * windows' reach (the budget gone before any gate) runs it up while no repayment can be made,
 * and without a bound it would hold the windows down for as long afterwards. */
#define DEBT_MAX_S 2.0
/* The most of the windows' allowance a repayment may take: an estimate's variance grows with
 * the sum of 1 / duty over its epochs, so an epoch whose debt took its windows to the floor
 * (a window of 0.5 ms whose few resumes weigh 2000 each) cost the run's estimates more than
 * the duty the repayment bought back. Half keeps every epoch's duty within 2x of the plan. */
#define DEBT_SHARE 0.5
/* An epoch's tool CPU above this many times its running mean goes to the debt, paid back
 * over the next seconds, rather than into the mean the next duty is planned on: one slow
 * epoch of the tool's (its first symbols, a drain, a rotation) would otherwise take the
 * windows to the floor for the next two or three. */
#define TOOL_SPIKE 2.0

/* The epoch's tool CPU as the plan takes it: a lone spike as the running mean (the decayed
 * sum is 1 / (1 - k) epochs' worth); a second in a row as TOOL_SPIKE x the mean, so that a
 * lasting step in the tool's CPU still reaches the plan. Taken at TOOL_SPIKE x, a lone spike
 * would double the planned cost, which leaves the windows nothing where the tool's usual CPU
 * is half the budget. */
static double tool_for_plan(struct duty_state *s, double tool_ns, double k)
{
	double mean = (1 - k) * s->tool_other;
	bool spike = s->seeded && mean > 0 && tool_ns > TOOL_SPIKE * mean;
	bool lone = spike && !s->tool_spiked;

	s->tool_spiked = spike;
	return lone ? mean : spike ? TOOL_SPIKE * mean : tool_ns;
}

/* The target's own CPU per second, with an idle target counted as a millisecond a second. */
static double own_per_s(const struct duty_state *s)
{
	double own = s->wall > 0 ? s->own / (s->wall / NSEC) : 0;

	return own < 1e6 ? 1e6 : own;
}

void duty_observe(struct duty_state *s, const struct duty_epoch *e, double budget)
{
	double k = s->seeded ? DUTY_DECAY : 0.0;
	double spent = e->probe_ns + e->fixed_ns + e->tool_other_ns + e->windows_ns + e->startup_ns;

	if (e->wall_ns <= 0)
		return;
	s->wall = k * s->wall + e->wall_ns;
	s->armed = k * s->armed + e->armed_ns;
	s->probe = k * s->probe + e->probe_ns;
	s->own = k * s->own + e->own_ns;
	s->tool_other = k * s->tool_other + tool_for_plan(s, e->tool_other_ns, k);
	s->fixed = k * s->fixed + e->fixed_ns;
	s->hits = k * s->hits + (double)e->hits;
	s->epochs_seen++;
	/* Only overspending is carried: what an epoch left unspent is not spent later, since the
	 * budget bounds every stretch of the run, not just its average. */
	s->debt = fmax(0.0, s->debt + spent - budget * e->own_ns);
	s->debt = fmin(s->debt, DEBT_MAX_S * budget * own_per_s(s));
	s->seeded = true;
}

uint64_t duty_windows(const struct duty_limits *l, double duty, double own_ns_per_s)
{
	double afford = l->window_cpu_ns > 0
			    ? l->window_share * l->budget * own_ns_per_s / l->window_cpu_ns
			    : 1;
	uint64_t k = afford < 1			 ? 1
		     : afford > DUTY_MAX_WINDOWS ? DUTY_MAX_WINDOWS
						 : (uint64_t)afford;

	if (!(duty > 0))
		return 1;
	if ((double)k > duty * NSEC / l->min_window_ns)
		k = (uint64_t)(duty * NSEC / l->min_window_ns);
	k = k < 1 ? 1 : k;
	/* The windows, their attach and detach and the settling must fit in the second. */
	while (k > 1 && (double)k * (duty * NSEC / (double)k + l->window_wall_ns + l->settle_ns) >
			    0.8 * NSEC)
		k--;
	return k;
}

/* What the budget leaves per second for windows and gates: its share of the target's CPU,
 * less the tool's CPU beyond windows and the hits outside gates. */
static double avail_per_s(const struct duty_state *s, const struct duty_limits *l)
{
	return l->budget * own_per_s(s) - (s->tool_other + s->fixed) / (s->wall / NSEC);
}

double duty_outside_gates(const struct duty_state *s)
{
	if (!s->seeded || s->wall <= 0)
		return 0;
	return (s->tool_other + s->fixed) / (s->wall / NSEC) / own_per_s(s);
}

/* What goes to the debt this second, from what the gates would get without it. */
static double repay_per_s(const struct duty_state *s, double for_gates)
{
	return fmin(DEBT_GAIN * s->debt, DEBT_SHARE * fmax(0.0, for_gates));
}

double duty_for_budget(const struct duty_state *s, const struct duty_limits *l, double prev)
{
	double avail, cost, duty, gates;

	if (!s->seeded || s->armed <= 0)
		return prev;
	cost = s->probe / (s->armed / NSEC);
	if (cost <= 0)
		return prev * DUTY_GROWTH_THIN; /* nothing hit the probes: arm more to learn */
	avail = avail_per_s(s, l);
	duty = (avail - l->window_cpu_ns) / cost;
	gates = avail - (double)duty_windows(l, duty, own_per_s(s)) * l->window_cpu_ns;
	duty = (gates - repay_per_s(s, gates)) / cost;
	if (s->hits < DUTY_TRUSTED_HITS && duty > DUTY_GROWTH_THIN * prev)
		duty = DUTY_GROWTH_THIN * prev;
	/* Planned on the first, partial epoch alone, which carries the run's start-up (the
	 * always-on programs' first runs, the tool's first symbols), the duty stays at least
	 * where it was for one more epoch: cut to the floor, the second epoch's window of half a
	 * millisecond counted each kind as none or as thousands. */
	if (s->epochs_seen == 1 && duty < prev)
		duty = prev;
	return duty;
}

double duty_transitions_needed(double hz)
{
	/* Up to 10 Hz, 16 transitions per sample (p <= 1/16): a worker-epoch's selections then
	 * come from over a hundred transitions and the in-window count that sets p is steady.
	 * Above, no fewer than at 10 Hz and at least 2 per sample (p <= 1/2): each transition
	 * seen costs a few hits, against one capture per sample. */
	double low = 16.0 * (hz < 10.0 ? hz : 10.0);

	return low > 2.0 * hz ? low : 2.0 * hz;
}

double duty_for_samples(double hz, uint64_t eligible, uint32_t workers, double armed_ns)
{
	double per_worker_s;

	if (hz <= 0 || armed_ns <= 0 || !eligible || !workers)
		return HUGE_VAL;
	per_worker_s = (double)eligible / workers / (armed_ns / NSEC);
	return duty_transitions_needed(hz) / per_worker_s;
}

double duty_clamp(double duty, double budget)
{
	if (budget >= 1.0 || duty >= DUTY_CONTINUOUS)
		return 1.0;
	return duty < DUTY_MIN ? DUTY_MIN : duty;
}
