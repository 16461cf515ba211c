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
