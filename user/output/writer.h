/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Output writers. Each receives every TaskSampleEvent once, in capture order per worker, and
 * writes one file in DIR. Writers stream or keep bounded state; finish() completes the file
 * (trailers, headers, atomic renames) and abort() removes what a failed run started.
 */
#ifndef D9_WRITER_H
#define D9_WRITER_H

#include <stdint.h>
#include "out_dir.h"
#include "task_sample.h"

struct symbolizer;
struct options;
struct target;

/* What a writer may need at the end of the run. */
struct run_context {
	const struct options *opts;
	const struct target *target;
	struct symbolizer *sym;		 /* modules and build ids of the target */
	uint64_t started_ns, stopped_ns; /* CLOCK_MONOTONIC */
	uint64_t realtime_offset_ns;	 /* CLOCK_REALTIME - CLOCK_MONOTONIC at start */
	const char *stop_reason;
	/* Threads seen in samples: tid -> name ("tokio-runtime-w" etc., worker index). */
	size_t nthreads;
	const struct run_thread *threads;
};

struct run_thread {
	uint32_t pid, tid;
	int worker;		 /* -1 if the thread ran no sampled worker */
	char comm[17];		 /* as in /proc */
	uint32_t ns_pid, ns_tid; /* in the target's own pid namespace */
};

struct writer {
	const char *format; /* "jsonl", "perf", "pprof", "folded", "flamegraph" */
	void *priv;
	int (*sample)(struct writer *w, const struct task_sample *s);
	/* Returns 0 or a negative errno; prints its own one-line error. Frees priv. */
	int (*finish)(struct writer *w, const struct run_context *rc);
	/* Removes the partial output and frees priv. */
	void (*abort)(struct writer *w);
};

/* Constructors: create <file> in DIR; return 0 and fill *w, or a negative errno. */
/* samples.jsonl and stacks.jsonl (the stack_table layout); the inline layout: samples.jsonl */
#define JSONL_STACK_INDEX_MAX (1u << 17) /* stacks given ids before the index starts afresh */
int jsonl_writer_open(const struct out_dir *dir, struct writer *w);
int jsonl_inline_writer_open(const struct out_dir *dir, struct writer *w);
int perf_writer_open(const struct out_dir *dir, struct writer *w);	 /* perf.data */
int pprof_writer_open(const struct out_dir *dir, struct writer *w);	 /* profile.pb.gz */
int folded_writer_open(const struct out_dir *dir, struct writer *w);	 /* stacks.folded */
int flamegraph_writer_open(const struct out_dir *dir, struct writer *w); /* flamegraph.svg */
/* The time views, running and waiting in nanoseconds (stack_agg_add_time): */
int folded_time_writer_open(const struct out_dir *dir, struct writer *w); /* stacks-time.folded */
int flamegraph_time_writer_open(const struct out_dir *dir,
				struct writer *w); /* flamegraph-time.svg */

#endif
