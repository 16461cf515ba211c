/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * On-CPU samples (--cpu-hz): a clock tick per CPU every period, each tick on a target worker
 * thread a sample (bpf/cpu_samples.bpf.h) of kind "cpu" in the outputs, weighing one period of
 * CPU time. Here: the events, and the future each sample's task runs.
 *
 * The task's future comes from the stack first: the raw::poll<T, S> instance on it is the
 * task type's own (task_types.h), whatever the mangling. Then from the task id, by the park
 * samples that named the same task; then from Harness<T, S>'s generics on the stack.
 */
#ifndef D9_CPU_SAMPLES_H
#define D9_CPU_SAMPLES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "clock_events.h"
#include "stack_agg.h"

struct sampler_bpf;
struct symbolizer;
struct task_types;
struct task_type;
struct task_frame;

#define CPU_ID_SLOTS 4096

struct cpu_samples {
	const char *status; /* "off", "sampling", "no_clock_event" */
	uint64_t hz, period_ns;
	int error; /* why the events could not be opened: a negative errno */
	struct clock_events ev;
	size_t nevents;	 /* clock events opened */
	bool per_thread; /* they follow the target's threads, else CPUs */
	struct {
		uint64_t id;
		struct task_type *type;
	} ids[CPU_ID_SLOTS]; /* task id -> type, by hash, the latest park sample's */
	struct intern names; /* futures named from Harness generics, and their root frames */
	/* Written samples, by how the future was named. */
	uint64_t written, by_poll, by_id, by_harness, unnamed, scheduler, task_unknown;
};

/* Between open and load (hz 0: off). */
void cpu_samples_configure(struct cpu_samples *cs, struct sampler_bpf *skel, uint64_t hz);
/* Opens the clock events; one line on stderr when it cannot, and the run goes on. */
void cpu_samples_start(struct cpu_samples *cs, struct sampler_bpf *skel, int pid);
void cpu_samples_stop(struct cpu_samples *cs);
void cpu_samples_free(struct cpu_samples *cs);
/* A park sample named task ID's type. */
void cpu_samples_note_task(struct cpu_samples *cs, uint64_t id, struct task_type *type);

/* What a cpu sample's task runs: its future and root frame name (stable strings), both NULL
 * when unknown. task_known: the id was read (0 = no task: the scheduler). True when the worker
 * ran no task (the scheduler: root "scheduler/idle", no future). */
bool cpu_samples_name(struct cpu_samples *cs, struct symbolizer *sym, const struct task_types *tt,
		      const struct task_frame *fr, size_t n, bool task_known, uint64_t task_id,
		      const char **future, const char **root);
/* metadata.json's "cpu_samples" value. */
void cpu_samples_write_json(FILE *f, const struct cpu_samples *cs);

#endif
