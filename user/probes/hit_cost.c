/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#include "hit_cost.h"

#include <math.h>

void hit_cost_add(struct hit_cost_sums *s, double polls, double busy_ns, double hits)
{
	if (polls <= 0)
		return;
	s->n += 1;
	s->polls += polls;
	s->busy += busy_ns;
	s->hits += hits;
	s->busy_sq += busy_ns * busy_ns;
	s->busy_polls += busy_ns * polls;
	s->polls_sq += polls * polls;
}

/* Busy time per poll over the windows, and the variance of that ratio. */
static double per_poll(const struct hit_cost_sums *s, double *var)
{
	double b = s->busy / s->polls;
	double resid = s->busy_sq - 2 * b * s->busy_polls + b * b * s->polls_sq;

	*var = s->n / (s->n - 1) * (resid > 0 ? resid : 0) / (s->polls * s->polls);
	return b;
}

double hit_cost_extra_hits(const struct hit_cost_sums *full, const struct hit_cost_sums *lean)
{
	return full->hits / full->polls - lean->hits / lean->polls;
}

double hit_cost_measure(const struct hit_cost_sums *full, const struct hit_cost_sums *lean,
			double min_polls, double min_dh, double *se)
{
	double dh, bf, bl, vf, vl;

	*se = 0;
	if (full->n < 2 || lean->n < 2 || full->polls < min_polls || lean->polls < min_polls)
		return 0;
	dh = hit_cost_extra_hits(full, lean);
	if (dh < min_dh)
		return 0;
	bf = per_poll(full, &vf);
	bl = per_poll(lean, &vl);
	*se = sqrt(vf + vl) / dh;
	return (bf - bl) / dh;
}
