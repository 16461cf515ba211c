// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Clock readings in nanoseconds: see util_clock.h. */
#include "util_clock.h"

uint64_t now_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

uint64_t mono_ns(void)
{
	return now_ns(CLOCK_MONOTONIC);
}

uint64_t thread_cpu_ns(void)
{
	return now_ns(CLOCK_THREAD_CPUTIME_ID);
}

/* The kernel ticks every 1-10 ms (CONFIG_HZ 1000-100). */
#define TICK_MIN_NS 1000000L
#define TICK_MAX_NS 10000000L

/* The coarse clocks' resolution is the tick whatever the kernel's configuration, and reading it
 * needs neither /proc/config.gz nor /boot. */
uint64_t kernel_tick_ns(void)
{
	struct timespec res;

	if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) || res.tv_sec || res.tv_nsec < TICK_MIN_NS ||
	    res.tv_nsec > TICK_MAX_NS)
		return 0;
	return (uint64_t)res.tv_nsec;
}
