/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Target discovery: the process, its executable, and the Tokio functions to probe in it. */
#ifndef D9_TARGET_H
#define D9_TARGET_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "dial9_bpf.h"

struct elf_file;

enum probe_kind {
	PROBE_POLL,	  /* raw::poll, entry and return */
	PROBE_DEALLOC,	  /* raw::dealloc */
	PROBE_WORKER_RUN, /* multi_thread::worker::run */
	PROBE_PARK,	  /* park points; cookie = enum d9_park_point */
	PROBE_IDLE,	  /* the worker parks: its thread's polls have all returned */
};

struct probe_spec {
	enum probe_kind kind;
	uint32_t cookie;
	uint64_t vaddr;
	uint64_t offset; /* uprobe file offset */
	char *name;	 /* demangled */
	bool xol;	 /* the probed instruction is single-stepped, not emulated */
};

struct target {
	int pid;
	char exe_link[64];	 /* /proc/PID/exe: attaches and reads the inode really mapped */
	char exe_path[PATH_MAX]; /* the path as the target sees it, for messages */
	char comm[17];
	struct elf_file *elf;
	struct probe_spec *probes;
	size_t nprobes;
	size_t count[PROBE_IDLE + 1];
	size_t park_points_skipped; /* single-stepped instructions: too costly per hit */
};

/* Checks the process and finds the probe points. On failure prints one line naming the
 * problem and the fix, and returns a negative errno. */
int target_open(int pid, struct target **out);
void target_close(struct target *t);
const char *probe_kind_name(enum probe_kind k);
const char *park_point_name(uint32_t cookie);

/* Whether the kernel single-steps the instruction starting with these bytes when probed (x86
 * uprobes emulate push, the first instruction of most functions, and step the rest). */
bool probe_insn_needs_xol(const unsigned char *insn, size_t len);

/* Classifies a demangled symbol; returns 1 and fills kind/cookie when it is a probe point. */
int target_classify_symbol(const char *demangled, enum probe_kind *kind, uint32_t *cookie);

#endif
