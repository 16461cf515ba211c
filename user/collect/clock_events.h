/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * A software clock event (PERF_COUNT_SW_CPU_CLOCK) on every online CPU, each running a BPF
 * perf_event program every period: what the long polls' ticks and the on-CPU samples run on.
 * A software clock, since many VMs have no hardware PMU.
 */
#ifndef D9_CLOCK_EVENTS_H
#define D9_CLOCK_EVENTS_H

#include <stddef.h>
#include <stdint.h>

struct bpf_program;
struct bpf_link;

struct clock_events {
	struct bpf_link **links; /* one per CPU whose event opened */
	size_t n;
};

/* Opens and attaches the events; returns 0, or a negative errno when none could be (the
 * events of offline CPUs are skipped). */
int clock_events_open(struct clock_events *ce, struct bpf_program *prog, uint64_t period_ns);
void clock_events_close(struct clock_events *ce);

#endif
