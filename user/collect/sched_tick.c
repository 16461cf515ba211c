// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_tick.h"
#include "util_clock.h"

/* A CPU in nohz_full stops its tick while it runs one task: a spinning poll there has none. */
static bool some_cpu_tickless(void)
{
	char buf[64] = "";
	FILE *f = fopen("/sys/devices/system/cpu/nohz_full", "r");
	bool set;

	if (!f)
		return false;
	set = fgets(buf, sizeof(buf), f) && buf[0] != '\n' && strncmp(buf, "(null)", 6);
	fclose(f);
	return set;
}

/* The handler of the tick's hrtimer as /proc/timer_list names it on the CPUs' queues
 * (tick_nohz_handler from 6.9, tick_sched_timer before); NULL when the tick is no hrtimer
 * (a kernel without high-resolution timers), where the tracepoint would never see it. */
static const char *tick_handler(void)
{
	static const char *const names[] = {"tick_nohz_handler", "tick_sched_timer"};
	const char *found = NULL;
	char line[256];
	FILE *f = fopen("/proc/timer_list", "r");

	if (!f)
		return NULL;
	while (!found && fgets(line, sizeof(line), f))
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (strstr(line, names[i]))
				found = names[i];
	fclose(f);
	return found;
}

/* A kernel function's address from /proc/kallsyms; 0 when absent or hidden (kptr_restrict). */
static uint64_t kallsyms_addr(const char *name)
{
	unsigned long long addr;
	char line[512], sym[256], type;
	uint64_t found = 0;
	FILE *f = fopen("/proc/kallsyms", "r");

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f))
		if (sscanf(line, "%llx %c %255s", &addr, &type, sym) == 3 && !strcmp(sym, name))
			found = addr;
	fclose(f);
	return found;
}

int sched_tick_find(uint64_t max_period_ns, uint64_t *handler, uint64_t *period_ns,
		    const char **why)
{
	const char *name, *env = getenv("DIAL9_SCHED_TICK");

	if (env && !strcmp(env, "0")) {
		*why = "disabled";
		return -ECANCELED;
	}
	name = tick_handler();
	if (!name) {
		*why = "no_hrtimer_tick";
		return -ENOENT;
	}
	*handler = kallsyms_addr(name);
	if (!*handler) {
		*why = "no_kallsyms";
		return -ENOENT;
	}
	*period_ns = kernel_tick_ns();
	if (!*period_ns) {
		*why = "hz_unknown";
		return -ENOENT;
	}
	if (*period_ns > max_period_ns) {
		*why = "tick_too_slow";
		return -ERANGE;
	}
	if (some_cpu_tickless()) {
		*why = "nohz_full";
		return -EOPNOTSUPP;
	}
	return 0;
}
