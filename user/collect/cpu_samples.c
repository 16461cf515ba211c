// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* On-CPU samples: the clock events and the naming of each sample's task (cpu_samples.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_samples.h"
#include "dial9_bpf.h"
#include "sampler.skel.h"
#include "symbolize.h"
#include "task_sample.h"
#include "task_types.h"
#include "util_hash.h"

static const char SCHEDULER_ROOT[] = "scheduler/idle";

void cpu_samples_configure(struct cpu_samples *cs, struct sampler_bpf *skel, uint64_t hz)
{
	memset(cs, 0, sizeof(*cs));
	cs->status = "off";
	if (!hz)
		return;
	cs->hz = hz;
	cs->period_ns = 1000000000ULL / hz;
	skel->rodata->cpu_period_ns = cs->period_ns;
}

void cpu_samples_start(struct cpu_samples *cs, struct sampler_bpf *skel, int pid)
{
	if (!cs->hz)
		return;
	cs->error = clock_events_open(&cs->ev, skel->progs.cpu_tick, cs->period_ns, pid);
	cs->status = cs->error ? "no_clock_event" : "sampling";
	cs->nevents = cs->ev.n;
	cs->per_thread = cs->ev.per_thread;
	if (cs->error)
		fprintf(stderr,
			"dial9-bpf: the on-CPU view is unavailable: no software clock event "
			"(perf_event_open cpu-clock) could be opened: %s; park samples go on\n",
			strerror(-cs->error));
}

void cpu_samples_stop(struct cpu_samples *cs)
{
	clock_events_close(&cs->ev);
}

void cpu_samples_free(struct cpu_samples *cs)
{
	cpu_samples_stop(cs);
	intern_free(&cs->names);
}

static size_t id_slot(uint64_t id)
{
	return (size_t)(splitmix64(id) & (CPU_ID_SLOTS - 1));
}

void cpu_samples_note_task(struct cpu_samples *cs, uint64_t id, struct task_type *type)
{
	size_t i = id_slot(id);

	cs->ids[i].id = id;
	cs->ids[i].type = type;
}

#define MAX_MERGED 16

/* A multi-thread runtime's worker loop runs inside a blocking-pool task of its own
 * (BlockingTask<Launch::launch's closure>, or block_in_place's for a worker handed to another
 * thread), whose id stays in current_task_id between polls: that task innermost on the stack
 * is the scheduler, not a task. */
static bool is_worker_launch(const char *future)
{
	return future && strstr(future, "BlockingTask<") &&
	       (strstr(future, "worker::Launch") || strstr(future, "worker::block_in_place"));
}

/* Of types sharing one merged poll instance, the one whose future names a function called
 * inside it (its async fn's poll, leafward of the instance: FR[0..n)); NULL when not one. */
static struct task_type *by_callee(struct task_type **cand, size_t ncand,
				   const struct task_frame *fr, size_t n)
{
	struct task_type *found = NULL;
	size_t launches = 0;

	for (size_t c = 0; c < ncand; c++)
		launches += is_worker_launch(cand[c]->name);
	if (launches == ncand)
		return cand[0]; /* the workers' own, named alike */
	for (size_t c = 0; c < ncand; c++) {
		for (size_t i = 0; i < n; i++) {
			const char *name = fr[i].name;

			if (!name || strlen(name) < 12 || !strncmp(name, "tokio::", 7) ||
			    !strstr(cand[c]->name, name))
				continue;
			if (found && found != cand[c])
				return NULL;
			found = cand[c];
			break;
		}
	}
	return found;
}

/* The type whose raw::poll or Harness::poll instance is on the stack (it runs the task's poll;
 * raw::poll tail-calls Harness::poll, so usually only the latter is there). */
static struct task_type *type_on_stack(struct symbolizer *sym, const struct task_types *tt,
				       const struct task_frame *fr, size_t n)
{
	struct task_type *cand[MAX_MERGED];

	for (size_t i = 0; i < n; i++) {
		struct sym_info si;
		size_t nc;

		if (fr[i].inlined || !fr[i].name ||
		    (!strstr(fr[i].name, "task::raw::poll") && !strstr(fr[i].name, "Harness<")))
			continue;
		if (symbolizer_resolve(sym, fr[i].addr, &si))
			continue;
		nc = task_types_by_poll(tt, fr[i].addr - si.sym_offset, cand, MAX_MERGED);
		if (nc)
			return nc == 1 ? cand[0] : by_callee(cand, nc, fr, i);
	}
	return NULL;
}

/* A stable copy of "task: NAME" and NAME. */
static void harness_names(struct cpu_samples *cs, const char *name, const char **future,
			  const char **root)
{
	size_t len = strlen(name);
	char *r = malloc(len + 7);
	uint32_t fid, rid;

	if (r) {
		memcpy(r, "task: ", 6);
		memcpy(r + 6, name, len + 1);
		if (!intern_id(&cs->names, name, len, &fid) &&
		    !intern_id(&cs->names, r, len + 6, &rid)) {
			*future = intern_str(&cs->names, fid);
			*root = intern_str(&cs->names, rid);
		}
	}
	free(r);
}

bool cpu_samples_name(struct cpu_samples *cs, struct symbolizer *sym, const struct task_types *tt,
		      const struct task_frame *fr, size_t n, bool task_known, uint64_t task_id,
		      const char **future, const char **root)
{
	struct task_type *type = tt ? type_on_stack(sym, tt, fr, n) : NULL;
	const char *name = NULL;
	char *harness = NULL;

	*future = *root = NULL;
	cs->written++;
	cs->task_unknown += !task_known;
	if (type) {
		cs->by_poll++;
		if (task_id)
			cpu_samples_note_task(cs, task_id, type);
	} else if (task_known && !task_id) {
		name = SCHEDULER_ROOT; /* no task: current_thread's block_on, or between polls */
	} else if (task_id && cs->ids[id_slot(task_id)].id == task_id) {
		type = cs->ids[id_slot(task_id)].type;
		cs->by_id++;
	} else if ((harness = task_types_stack_future(fr, n))) {
		cs->by_harness++;
		name = harness;
	}
	if (type)
		name = type->name;
	if (name == SCHEDULER_ROOT || is_worker_launch(name)) {
		cs->scheduler++;
		*root = SCHEDULER_ROOT;
	} else if (type) {
		*future = type->name;
		*root = type->root;
	} else if (harness) {
		harness_names(cs, harness, future, root);
	} else {
		cs->unnamed++;
	}
	free(harness);
	return *root == SCHEDULER_ROOT;
}

void cpu_samples_write_json(FILE *f, const struct cpu_samples *cs)
{
	fprintf(f,
		"{\"status\": \"%s\", \"hz\": %" PRIu64 ", \"period_ns\": %" PRIu64
		", \"clock_events\": %zu, \"events_follow\": \"%s\", \"error\": \"%s\", "
		"\"written\": %" PRIu64 ", \"future_from_stack_poll\": %" PRIu64
		", \"future_from_task_id\": %" PRIu64 ", \"future_from_harness\": %" PRIu64
		", \"future_unknown\": %" PRIu64 ", \"scheduler\": %" PRIu64
		", \"task_id_unknown\": %" PRIu64 "}",
		cs->status, cs->hz, cs->period_ns, cs->nevents, cs->per_thread ? "threads" : "cpus",
		cs->error ? strerror(-cs->error) : "", cs->written, cs->by_poll, cs->by_id,
		cs->by_harness, cs->unnamed, cs->scheduler, cs->task_unknown);
}
