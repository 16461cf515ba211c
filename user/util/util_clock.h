/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Clock readings in nanoseconds. */
#ifndef D9_UTIL_CLOCK_H
#define D9_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

/* clk's time in nanoseconds (CLOCK_MONOTONIC, CLOCK_REALTIME, ...). */
uint64_t now_ns(clockid_t clk);
/* CLOCK_MONOTONIC: the clock of the BPF program's timestamps and epochs. */
uint64_t mono_ns(void);
/* The CPU time of the calling thread. */
uint64_t thread_cpu_ns(void);
/* The kernel's tick (1 / CONFIG_HZ, 1-10 ms), by which the coarse clocks advance; 0 where it
 * cannot be read or is outside that range. */
uint64_t kernel_tick_ns(void);

#endif
