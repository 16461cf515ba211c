/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The unwind tables of a process for --unwind ebpf: the rows of every executable mapping of a
 * file (the binary, libc, the loader, ...) or of the vDSO, from its .eh_frame (eh_frame.h), in
 * one array, and per mapping its address range, load bias and slice of rows: what
 * bpf/unwind.bpf.h walks with.
 * Built once at start: libraries mapped later (dlopen) are not covered.
 */
#ifndef D9_UNWIND_TABLES_H
#define D9_UNWIND_TABLES_H

#include <stddef.h>
#include <stdint.h>

#include "dial9_bpf.h"

struct bpf_map;

struct unwind_tables {
	struct d9_unwind_module mods[D9_UNWIND_MAX_MODULES];
	size_t nmods;
	struct d9_unwind_row *rows;
	size_t nrows;
	size_t files;	  /* distinct files read */
	size_t uncovered; /* executable mappings without tables (no .eh_frame, or past the max) */
};

/* Builds the tables of process pid. Returns 0 or a negative errno (-ENOENT: no mapping had
 * .eh_frame). */
int unwind_tables_build(int pid, struct unwind_tables *t);

/* Before the BPF object loads: sizes the rows map to the tables. */
int unwind_tables_size_map(const struct unwind_tables *t, struct bpf_map *rows);

/* After it loads: fills both maps. Returns 0 or a negative errno. */
int unwind_tables_fill(const struct unwind_tables *t, struct bpf_map *rows,
		       struct bpf_map *modules);

void unwind_tables_free(struct unwind_tables *t);

#endif /* D9_UNWIND_TABLES_H */
