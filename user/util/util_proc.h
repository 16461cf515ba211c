/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Small reads of /proc. */
#ifndef D9_UTIL_PROC_H
#define D9_UTIL_PROC_H

#include <stddef.h>
#include <stdint.h>

/* The name of thread tid of process pid (/proc/PID/task/TID/comm; tid = pid: the process's),
 * without its newline. Returns 0, or a negative errno with buf left as it was. */
int read_comm(int pid, uint32_t tid, char *buf, size_t len);

/* Thread tid's scheduler statistics (/proc/PID/task/TID/schedstat): time on a CPU and time
 * waiting on a run queue, in ns, and the number of times it was given a CPU. Returns 0 or a
 * negative errno. */
int read_schedstat(int pid, uint32_t tid, uint64_t *run_ns, uint64_t *wait_ns, uint64_t *slices);

#endif
