/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * A TaskSampleEvent as the writers see it: symbolized, with its sampling metadata and the
 * integer weights every output uses, so that all formats sum to the same estimates.
 */
#ifndef D9_TASK_SAMPLE_H
#define D9_TASK_SAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct task_frame {
	uint64_t addr; /* runtime address: the ip for the leaf, return addresses above */
	/* Demangled function, NULL when unknown. name and module stay valid and unchanged while
	 * the writers are open (owned by the symbolizer and unwinder): writers key caches on them.
	 */
	const char *name;
	const char *module;   /* mapped file path as the target sees it, NULL when anonymous */
	uint64_t file_offset; /* addr translated into module */
	bool inlined;	      /* a call inlined into the next frame's function (same addr) */
	/* The outermost pseudo frame "task: FUTURE" (no address): roots every view by task type. */
	bool task_root;
};

/* What BPF copied at the park point for DWARF unwinding (--unwind dwarf). */
struct raw_copy {
	uint32_t tid;
	uint64_t ip, sp, bp;
	uint32_t len;
	uint8_t data[]; /* user stack from sp up */
};

struct task_sample {
	uint64_t timestamp_ns; /* CLOCK_MONOTONIC capture time */
	uint32_t pid, tid;     /* as the tool sees them (its own pid namespace) */
	/* As the target sees them, in its innermost pid namespace (containers); equal to pid and
	 * tid when it shares the tool's namespace. */
	uint32_t ns_pid, ns_tid;
	int worker; /* index in metadata.json */
	uint64_t worker_key;
	/* The runtime (or LocalSet) whose task this is: index in metadata.json's "runtimes",
	 * -1 when unknown; runtime_key is its scheduler's address in the target. */
	int runtime;
	uint64_t runtime_key;
	bool task_id_ok;
	uint64_t task_id;
	double prob; /* inclusion probability */
	uint64_t epoch;
	/* poll_end_ns is 0 when the poll's end was not observed (the probes were detached
	 * before the next event on its thread): use task_sample_poll_ns, never the difference. */
	uint64_t idle_start_ns, idle_end_ns, poll_end_ns;
	/* False when the task's previous Pending return was not observed (it happened while the
	 * probes were detached, see arming.h): idle_start_ns is then 0 and weight_idle_ns 0. */
	bool idle_known;
	bool capped;
	const char *outcome; /* "pending", "complete", "unknown" */
	const char *future;  /* the task's future type (task_types.h), NULL when unknown */
	/* The armed window it was selected in (from 1): samples of one window share its random
	 * placement, so estimates' variance is taken over windows, not samples. 0: always armed
	 * (then every sample is drawn on its own). */
	uint64_t window;
	const char *park_point; /* which probe captured the stack */
	/* How the park point was decided: "returned_pending", "always_pending",
	 * "outcome_unknown" (no leaf seen Pending: the first whose outcome cannot be seen),
	 * "none". */
	const char *park_decided;
	uint32_t also_pending; /* other leaves seen Pending in the poll */
	int stack_error;       /* negative errno of the stack capture, 0 if fine */
	/*
	 * Horvitz-Thompson weights as integers (perf periods and folded counts must be
	 * integers): weight_count estimates resumes and is 1/p rounded stochastically (floor,
	 * plus one with probability of the fraction, from a hash of the sample), so it stays
	 * unbiased; weight_idle_ns estimates time spent parked, idle / p rounded.
	 */
	uint64_t weight_count;
	uint64_t weight_idle_ns;
	/* An on-CPU sample (kind "cpu"): a clock tick on the worker while it ran, weighing
	 * weight_cpu_ns (the tick's period) of CPU time; weight_count and weight_idle_ns are 0,
	 * so sums of resumes and idle time over all samples stay right. Park samples: 0. */
	bool on_cpu;
	uint64_t weight_cpu_ns;
	size_t nframes;
	const struct task_frame *frames; /* leaf first, inlined calls expanded */
	const struct raw_copy *raw;	 /* NULL unless the stack was copied for DWARF unwinding */
};

/* The poll's duration into *ns; false when its end was not observed (then unknown, and
 * writers leave it out rather than print a wrapped difference). */
static inline bool task_sample_poll_ns(const struct task_sample *s, uint64_t *ns)
{
	if (!s->poll_end_ns || s->poll_end_ns < s->idle_end_ns)
		return false;
	*ns = s->poll_end_ns - s->idle_end_ns;
	return true;
}

#endif
