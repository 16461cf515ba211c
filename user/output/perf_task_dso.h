/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#ifndef D9_PERF_TASK_DSO_H
#define D9_PERF_TASK_DSO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/*
 * The "task: FUTURE" root frames of perf.data. perf names a callchain address from the file its
 * MMAP record maps there, so each distinct root name gets an address in a small ELF file written
 * next to perf.data, whose symbol table holds one function per name. The file is mapped below
 * vm.mmap_min_addr (64 KiB by default), where no process maps anything, so the addresses never
 * collide with the target's code. Names are compared as strings; the caller keeps them alive.
 */
struct perf_task_dso {
	const char **names;
	size_t n, cap;
};

#define PERF_TASK_DSO_FILE "perf-tasks.elf"
/* Where the file's code is mapped, and the file offset mapped there. */
#define PERF_TASK_DSO_START 0x1000ull
#define PERF_TASK_DSO_PGOFF 0x1000ull

/* The address standing for name (added on first use), or 0 when the names no longer fit or on
 * ENOMEM (the sample then has no root frame in perf.data). */
uint64_t perf_task_dso_addr(struct perf_task_dso *t, const char *name);

/* Bytes the MMAP record maps: whole pages holding every name's code. */
uint64_t perf_task_dso_map_len(const struct perf_task_dso *t);

/* Writes the ELF file. Returns 0 or a negative errno. */
int perf_task_dso_write(const struct perf_task_dso *t, FILE *f);

void perf_task_dso_free(struct perf_task_dso *t);

#endif /* D9_PERF_TASK_DSO_H */
