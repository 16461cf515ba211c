// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Small reads of /proc: see util_proc.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include "util_proc.h"

int read_comm(int pid, uint32_t tid, char *buf, size_t len)
{
	char path[64];
	int err = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%u/comm", pid, tid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	if (fgets(buf, (int)len, f))
		buf[strcspn(buf, "\n")] = 0;
	else
		err = -EIO;
	fclose(f);
	return err;
}

int read_schedstat(int pid, uint32_t tid, uint64_t *run_ns, uint64_t *wait_ns, uint64_t *slices)
{
	char path[64];
	int n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%u/schedstat", pid, tid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	n = fscanf(f, "%" SCNu64 " %" SCNu64 " %" SCNu64, run_ns, wait_ns, slices);
	fclose(f);
	return n == 3 ? 0 : -EIO;
}
