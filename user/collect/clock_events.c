// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <linux/perf_event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/libbpf.h>

#include "clock_events.h"

int clock_events_open(struct clock_events *ce, struct bpf_program *prog, uint64_t period_ns)
{
	struct perf_event_attr attr = {
	    .type = PERF_TYPE_SOFTWARE,
	    .size = sizeof(attr),
	    .config = PERF_COUNT_SW_CPU_CLOCK,
	    .sample_period = period_ns,
	};
	int ncpu = libbpf_num_possible_cpus(), err = -ENODEV;

	memset(ce, 0, sizeof(*ce));
	if (ncpu <= 0)
		return ncpu ? ncpu : -ENODEV;
	ce->links = calloc((size_t)ncpu, sizeof(*ce->links));
	if (!ce->links)
		return -ENOMEM;
	for (int cpu = 0; cpu < ncpu; cpu++) {
		int fd =
		    (int)syscall(SYS_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);

		if (fd < 0) {
			if (errno != ENODEV) /* ENODEV: an offline CPU */
				err = -errno;
			continue;
		}
		ce->links[ce->n] = bpf_program__attach_perf_event(prog, fd);
		if (!ce->links[ce->n]) {
			err = -errno;
			close(fd);
			continue;
		}
		ce->n++;
	}
	return ce->n ? 0 : err;
}

void clock_events_close(struct clock_events *ce)
{
	for (size_t i = 0; i < ce->n; i++)
		bpf_link__destroy(ce->links[i]);
	free(ce->links);
	memset(ce, 0, sizeof(*ce));
}
