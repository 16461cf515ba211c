// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <dirent.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/libbpf.h>

#include "clock_events.h"

#define THREAD_EVENTS_MAX 4096 /* a target with more threads gets per-CPU events */

static int add_link(struct clock_events *ce, struct bpf_program *prog, int fd)
{
	struct bpf_link *l;

	if (ce->n == ce->cap) {
		size_t ncap = ce->cap ? ce->cap * 2 : 16;
		void *p = realloc(ce->links, ncap * sizeof(*ce->links));

		if (!p) {
			close(fd);
			return -ENOMEM;
		}
		ce->links = p;
		ce->cap = ncap;
	}
	l = bpf_program__attach_perf_event(prog, fd);
	if (!l) {
		int err = -errno;

		close(fd);
		return err;
	}
	ce->links[ce->n++] = l;
	return 0;
}

static int open_event(struct perf_event_attr *attr, int tid, int cpu)
{
	return (int)syscall(SYS_perf_event_open, attr, tid, cpu, -1, PERF_FLAG_FD_CLOEXEC);
}

/* One inherited event per thread of pid. Threads made while the list is read are made by
 * threads already listed, or seen on the next pass: passes go on until one adds nothing. A
 * thread that exits in between is skipped (ESRCH). */
static int open_threads(struct clock_events *ce, struct bpf_program *prog,
			struct perf_event_attr *attr, int pid)
{
	int *seen = NULL, added = 1, err = 0;
	size_t nseen = 0;
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	while (added && !err) {
		DIR *d = opendir(path);
		struct dirent *e;

		if (!d)
			return -errno;
		added = 0;
		while (!err && (e = readdir(d))) {
			int tid = atoi(e->d_name), fd;
			bool known = false;

			for (size_t i = 0; i < nseen && !known; i++)
				known = seen[i] == tid;
			if (tid <= 0 || known)
				continue;
			if (nseen >= THREAD_EVENTS_MAX) {
				err = -E2BIG;
				break;
			}
			int *p = realloc(seen, (nseen + 1) * sizeof(*seen));
			if (!p) {
				err = -ENOMEM;
				break;
			}
			seen = p;
			seen[nseen++] = tid;
			fd = open_event(attr, tid, -1);
			if (fd < 0) {
				if (errno != ESRCH)
					err = -errno;
				continue;
			}
			err = add_link(ce, prog, fd);
			added++;
		}
		closedir(d);
	}
	free(seen);
	return err;
}

static int open_cpus(struct clock_events *ce, struct bpf_program *prog,
		     struct perf_event_attr *attr)
{
	int ncpu = libbpf_num_possible_cpus(), err = -ENODEV;

	if (ncpu <= 0)
		return ncpu ? ncpu : -ENODEV;
	for (int cpu = 0; cpu < ncpu; cpu++) {
		int fd = open_event(attr, -1, cpu), e;

		if (fd < 0) {
			if (errno != ENODEV) /* ENODEV: an offline CPU */
				err = -errno;
			continue;
		}
		e = add_link(ce, prog, fd);
		if (e)
			err = e;
	}
	return ce->n ? 0 : err;
}

int clock_events_open(struct clock_events *ce, struct bpf_program *prog, uint64_t period_ns,
		      int pid)
{
	struct perf_event_attr attr = {
	    .type = PERF_TYPE_SOFTWARE,
	    .size = sizeof(attr),
	    .config = PERF_COUNT_SW_CPU_CLOCK,
	    .sample_period = period_ns,
	    .inherit = 1,
	};

	memset(ce, 0, sizeof(*ce));
	if (pid > 0 && !open_threads(ce, prog, &attr, pid) && ce->n) {
		ce->per_thread = true;
		return 0;
	}
	clock_events_close(ce);
	attr.inherit = 0;
	return open_cpus(ce, prog, &attr);
}

void clock_events_close(struct clock_events *ce)
{
	for (size_t i = 0; i < ce->n; i++)
		bpf_link__destroy(ce->links[i]);
	free(ce->links);
	memset(ce, 0, sizeof(*ce));
}
