/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* What one recording holds, for the files that run its phases (record.c, rotate.c). */
#ifndef D9_RECORD_INT_H
#define D9_RECORD_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "arming.h"
#include "attach.h"
#include "collector.h"
#include "cpu_samples.h"
#include "long_polls.h"
#include "metadata.h"
#include "out_dir.h"
#include "push.h"
#include "rotate.h"
#include "task_types.h"
#include "unwind_tables.h"
#include "worker_tls.h"
#include "writer.h"

struct options;
struct target;
struct sampler_bpf;
struct ring_buffer;
struct symbolizer;

struct rb_slice {
	struct collector *col;
	const struct arming *arm;
	uint64_t deadline_ns;
	unsigned int n;
};

/* Everything one recording holds, from setup to free. */
struct record {
	struct options *o;
	struct target *t;
	struct sampler_bpf *skel;
	struct attachment links;
	struct bpf_link *exec_link;
	struct bpf_link *lp_link;
	struct long_polls lp;
	struct cpu_samples cpu;
	struct arming arm;
	struct run_summary run;
	struct worker_tls wtls;
	struct unwind_tables utab; /* --unwind ebpf */
	struct ring_buffer *rb;
	struct rb_slice slice;
	struct symbolizer *sym;
	struct collector col;
	/* The DWARF reader, loading in a thread of its own while the BPF object loads, until
	 * setup_collector hands it to col. */
	struct unwinder *unw;
	pthread_t unw_thread;
	bool unw_loading;
	int unw_errno;
	struct task_types types;
	struct out_dir outdir;
	struct writer writers[8];
	size_t nwriters;
	/* --push: outlives the output folders of --rotate, so it is not among writers. */
	struct writer push_w, *push; /* push: &push_w while open, else NULL */
	struct push_stats push_stats;
	bool dir_created, running, tty;
	int pidfd;
	struct rotation rot; /* --rotate */
};

/* Opens one writer per --format and long_polls.jsonl in d; prints one line on failure.
 * Returns 0 or 1. */
int record_open_outputs(struct record *r, const struct out_dir *d);
/* Completes the writers and long_polls.jsonl, then writes d/metadata.json for run. Returns 0
 * or 1 (each failure printed). */
int record_write_outputs(struct record *r, const struct out_dir *d, struct run_summary *run);
/* The BPF counters, summed over CPUs. */
void record_read_counters(struct sampler_bpf *skel, uint64_t out[D9_CNT_MAX]);

#endif
