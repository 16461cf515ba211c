/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * A software clock event (PERF_COUNT_SW_CPU_CLOCK) running a BPF perf_event program every
 * period: what the long polls' ticks and the on-CPU samples run on. A software clock, since
 * many VMs have no hardware PMU.
 *
 * The events follow the target's threads (one per thread, inherited by the threads each
 * creates), so they fire only while the target runs: a target using a tenth of the machine
 * costs a tenth of the interrupts, and a fleet of mostly idle processes (--cgroup) costs about
 * nothing. Where per-thread events cannot be opened, one per online CPU does the same work,
 * the programs leaving other processes' ticks at once.
 */
#ifndef D9_CLOCK_EVENTS_H
#define D9_CLOCK_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bpf_program;
struct bpf_link;

struct clock_events {
	struct bpf_link **links; /* one per event opened */
	size_t n, cap;
	bool per_thread; /* the target's threads; else every online CPU */
};

/* Opens and attaches the events for process pid; returns 0, or a negative errno when none
 * could be (the events of offline CPUs are skipped). */
int clock_events_open(struct clock_events *ce, struct bpf_program *prog, uint64_t period_ns,
		      int pid);
void clock_events_close(struct clock_events *ce);

#endif
