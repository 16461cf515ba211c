/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What one uprobe hit costs on this machine, measured at startup on a function of the tool
 * itself: the overhead budget is enforced as probe hits x this cost, so it must be measured
 * here, not assumed (it ranges from ~0.3 us on bare metal to several us in VMs).
 */
#ifndef D9_CALIBRATE_H
#define D9_CALIBRATE_H

#include <stdbool.h>

struct sampler_bpf;

struct probe_cost {
	double entry_ns; /* one uprobe hit on an emulated instruction (push), counting program */
	double xol_ns;	 /* one hit on an instruction the kernel single-steps */
	bool measured;
	bool xol_measured; /* only when some probe of the target is single-stepped */
};

/* Fills cost; on failure keeps conservative defaults and returns a negative errno. need_xol:
 * some probe of the target is single-stepped, so that kind of hit is measured too. */
int calibrate_probe_cost(struct sampler_bpf *skel, bool multi, bool need_xol,
			 struct probe_cost *cost);

#endif
