/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The kernel's scheduler tick as the long polls' clock: the tick is an hrtimer on each busy
 * CPU, and a BPF program on hrtimer_expire_entry that keeps only the tick's handler runs at
 * each tick, in the context of the thread it interrupted. The tick interrupts the CPU whether or
 * not anyone watches, so the program's run is all it costs; a software clock event of our own
 * is one more interrupt per period, which on a VM costs the thread many times the program
 * (bench/RESULTS.md, "Long polls on the scheduler tick").
 *
 * It serves when the tick is an hrtimer (high-resolution timers, the common case) whose handler
 * kallsyms names, its period (1 / CONFIG_HZ) is short enough for the threshold, and no CPU runs
 * tickless while busy (nohz_full).
 */
#ifndef D9_SCHED_TICK_H
#define D9_SCHED_TICK_H

#include <stdint.h>

/* Whether the tick serves a period of at most max_period_ns: 0 with the address of its
 * hrtimer's handler and its period, or a negative errno with *why saying why in a word.
 * DIAL9_SCHED_TICK=0 in the environment says no. */
int sched_tick_find(uint64_t max_period_ns, uint64_t *handler, uint64_t *period_ns,
		    const char **why);

#endif
