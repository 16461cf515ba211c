/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Turns ring-buffer records into TaskSampleEvents: keeps per worker per epoch counts, names
 * workers, symbolizes stacks, and writes samples.jsonl once a sample's epoch is closed (so its
 * "capped" flag is final).
 */
#ifndef D9_COLLECTOR_H
#define D9_COLLECTOR_H

#include <stdbool.h>
#include <stdint.h>
#include "dial9_bpf.h"
#include "estimate_terms.h"
#include "folded_names.h"
#include "writer.h"

struct symbolizer;
struct task_types;
struct unwinder;

#include "unwind_dwarf.h"
#define UNWIND_STATS UNWIND_NSTOPS

struct epoch_stat {
	uint64_t epoch;
	uint64_t eligible;
	uint64_t selected;
	uint64_t refused;
	uint64_t prob;
	bool capped;
	bool calibrating;
	bool open; /* still running when the tool stopped: incomplete */
	struct d9_gate_time gate;
	double
	    slowdown; /* in-window rate / rate without probes, see collector_slowdown(); 1 = none */
};

/* The second moments of closed worker-epochs' whole waits, for the wake-chain factor's
 * standard error (collector_woken_rel_se): per worker-epoch with a whole wait, h its hits, k
 * its capture time and y its waits' length (d9_gate_time.woken_*). */
struct woken_moments {
	double n, hh, hk, kk, hy, ky, yy;
};

struct worker_info {
	uint64_t key;
	int index;
	uint32_t tid; /* latest thread seen running this worker */
	bool from_worker_run;
	/* Running at the attach: found in its thread's Tokio context (worker_tls.c). */
	bool from_tls;
	char comm[17];
	uint64_t samples;
	uint64_t samples_window; /* for the status line */
	/* Closed epochs' d9_gate_time.woken_*, pooled: their ratio is a property of the
	 * workload, which one epoch's few whole waits measure poorly. */
	uint64_t woken_chain_ns, woken_cycle_ns, woken_hits, woken_capture_ns;
	struct woken_moments woken_m;
	uint64_t runtime_key; /* of its samples (0 until one is seen) */
	/* Its open epoch as the BPF map held it at the collector's flush open_gen (epoch_view). */
	uint64_t open_gen;
	bool open_found;
	struct d9_worker_state open;
	struct epoch_stat *epochs;
	size_t nepochs;
	size_t cap;
};

/* A scheduler the sampled tasks belong to: a runtime, or a LocalSet (d9_sample.runtime). */
struct runtime_info {
	uint64_t key;
	int index;
	uint64_t samples;
	/* The worker of its first sample (another worker of a multi-thread runtime may follow). */
	int first_worker;
};

#define COLLECTOR_MAX_FRAMES 512

struct pending_sample;
struct raw_copy;

/* Reads a worker's still-open epoch from the BPF map; returns 0 when found. */
typedef int (*open_epoch_fn)(void *ctx, uint64_t worker, struct d9_worker_state *out);
/* The worker threads' CPU time while running a worker in a whole epoch, in ns; negative when
 * not known. */
typedef double (*worker_cpu_fn)(void *ctx, uint64_t epoch);

struct collector {
	int pid;
	struct writer *writers;
	size_t nwriters;
	struct writer *lasting; /* also gets every sample, across output folders (--push) */
	struct symbolizer *sym;
	struct unwinder *unw; /* DWARF: unwinds raw stacks (--unwind dwarf), names inlined calls */
	struct folded_names folded; /* names in folded code, after the instance that ran */
	uint64_t unwind_stops[UNWIND_STATS];
	uint64_t samples_dwarf, frames_fp, frames_dwarf;
	open_epoch_fn open_epoch;
	void *open_epoch_ctx;
	uint64_t flushes;
	uint64_t open_gen;  /* the flush under way (flushes); 0: none, open epochs read afresh */
	double hit_cost_ns; /* what one probe hit costs the target, kept current by the loader */
	double hit_cost_rel_se;	  /* and its relative standard error, kept with it */
	worker_cpu_fn worker_cpu; /* NULL: yielded resumes' counts scaled by the duty alone */
	void *worker_cpu_ctx;
	uint64_t coverage_epoch; /* collector_yield_coverage's last answer, for that epoch */
	double coverage;
	bool target_exec; /* the target exec'd (D9_REC_EXEC) */
	/* The target's task types, to name each sample's future; task_root: root every stack
	 * with a "task: FUTURE" frame (--no-task-root leaves it out). */
	struct task_types *types;
	bool task_root;
	struct long_polls *long_polls; /* D9_REC_LONG_POLL records go there; NULL: dropped */
	struct cpu_samples *cpu;       /* on-CPU samples are named there; NULL: none */

	struct worker_info *workers;
	size_t nworkers;
	size_t workers_cap;

	struct runtime_info *runtimes;
	size_t nruntimes;
	size_t runtimes_cap;

	struct pending_sample *head, *tail;
	size_t npending;
	/* Samples of this epoch or later wait (even in a flood) for the next output folder
	 * (--rotate); UINT64_MAX otherwise. */
	uint64_t epoch_limit;

	struct est_terms terms;	  /* the estimates' variance terms, for metadata */
	struct est_terms counted; /* the same of the in-window resume counts (resume_counts.c) */
	uint64_t counts_drained;  /* resume_counts entries read */
	uint64_t counts_before;	  /* the epochs before this one are drained */
	/* Written into earlier output folders (--rotate), for the run's status and summary. */
	uint64_t samples_earlier, with_stack_earlier;
	uint64_t samples_written;
	uint64_t loader_ns; /* handling records and writing samples: unwind, symbolize, write */
	uint64_t samples_with_stack;
	uint64_t samples_stack_errors;
	uint64_t samples_task_id_ok;
	uint64_t records;
	uint64_t write_errors;

	/* Raw stacks waiting for their thread's sample record. */
	struct raw_copy **raws;
	size_t nraws, raws_cap;

	/* Threads seen in samples, for COMM records and labels. */
	struct run_thread *threads;
	size_t nthreads;
	size_t threads_cap;
};

void collector_init(struct collector *c, int pid, struct writer *writers, size_t nwriters,
		    struct symbolizer *sym, open_epoch_fn fn, void *ctx);
/* ring_buffer callback: data is one record. */
int collector_handle(void *ctx, void *data, size_t size);
/* Writes every sample whose epoch ended before now_ns (monotonic); all of them if final. */
void collector_flush(struct collector *c, uint64_t now_ns, bool final);
/* Writes every pending sample of an epoch before `epoch`, whatever its place in the queue
 * (--rotate: the folder ending at that epoch gets them all). */
void collector_flush_before(struct collector *c, uint64_t epoch);
/* Adds each worker's open epoch from the map if it is before `before` (UINT64_MAX: at the end);
 * epochs from `ended` on were cut by the run's end (not `complete`). */
void collector_close_epochs(struct collector *c, uint64_t before, uint64_t ended);
/* Starts the counts of a new output folder (--rotate): the samples, unwind and estimate
 * figures restart from zero and the epochs before keep_from are forgotten. */
void collector_new_interval(struct collector *c, uint64_t keep_from);
struct worker_info *collector_worker(struct collector *c, uint64_t key);
/* A worker found running at the attach, in tid's Tokio thread-local context (worker_tls.c). */
void collector_note_tls_worker(struct collector *c, uint64_t key, uint32_t tid);
/* How the worker was first identified: "tls_context", "worker_run_arg" or "thread". */
const char *collector_worker_detection(const struct worker_info *w);
/* The in-window slowdown of a task woken by another task's poll on worker w (pooled over the
 * closed epochs of its runtime's workers; g, the open epoch's, when they have none). */
double collector_woken_factor(const struct collector *c, const struct worker_info *w,
			      const struct d9_gate_time *g);
/* The relative standard error of 1 / collector_woken_factor() from the waits it is measured
 * on, at the hit's price; 0 with fewer than two worker-epochs of whole waits. */
double collector_woken_rel_se(const struct collector *c, const struct worker_info *w);
/* What the in-window correction multiplies a resume's inclusion probability by, for a resume
 * of kind flags (D9_SF_WINDOWED, D9_SF_AFTER_YIELD, D9_SF_WOKEN_BY_TASK) on worker w in epoch;
 * *capped: whether the cap refused a selection in that worker-epoch; *run_rel_se (if not NULL):
 * the relative standard error the weight 1 / factor carries from figures measured over the
 * whole run, so alike in every epoch: the hit's price (times the weight's elasticity to it),
 * and for a woken resume the wake-chain factor's own error (its sampling error and its
 * model's). */
double collector_resume_factor(struct collector *c, struct worker_info *w, uint64_t epoch,
			       uint32_t flags, bool *capped, double *run_rel_se);
/* The share of the workers' CPU time in epoch that its windows covered, as the target would
 * have run it without probes; 0 when not known. */
double collector_yield_coverage(struct collector *c, uint64_t epoch);
/* The chance that a resume of kind flags in epoch fell inside a window of this duty (1 when
 * always armed): the duty, or for a yielded resume the coverage above where it is known. Both a
 * sample's weight and the in-window counts use it, so a type's stacks add up to its count. */
double collector_window_prob(struct collector *c, uint64_t epoch, uint32_t flags, double duty);
/* The runtime of scheduler key, added on first sight; NULL for 0 (unknown) or out of memory. */
struct runtime_info *collector_runtime(struct collector *c, uint64_t key);
void collector_free(struct collector *c);
/* Names a frame-pointer stack's pcs (leaf first) into frames, at most COLLECTOR_MAX_FRAMES
 * with inlined calls expanded; returns how many. */
struct task_frame;
size_t collector_symbolize(struct collector *c, const uint64_t *pcs, size_t n,
			   struct task_frame *frames);
/* Renames the frames in code folded for several functions after the one that ran: the one
 * that names future (the sample's task type) and its stack's scheduler (folded_names.h). */
void collector_name_folded_frames(struct collector *c, struct task_frame *frames, size_t n,
				  const char *future);
/* An epoch's in-window slowdown of the tasks that yielded (see collector.c); 1 = none. */
double collector_slowdown(const struct d9_gate_time *g, double hit_cost_ns);
/*
 * How much an error in the hit cost moves an epoch's correction: the % change of a yielded
 * task's sample weight (1 / slowdown) per 1% error in hit_cost_ns. 0 when there is no
 * correction, NAN when the factor is at its floor (probe hits took all the useful time).
 * Where hits take most of a window, the factor is a small difference of large numbers and
 * this is large: CPU-bound estimates there are only as good as the hit cost.
 */
double collector_slowdown_sensitivity(const struct d9_gate_time *g, double hit_cost_ns);
/* The median of it over the worker-epochs whose windows saw hits (floored ones count as
 * infinite); 0 when there are none. */
double collector_sensitivity_median(const struct collector *c);
/* Samples a worker-second over the whole epochs first..last that the collector still holds,
 * an epoch the windows missed a worker in counting as none, over the workers that sampled:
 * their mean and the least. False with fewer than 3 such epochs or no such worker. */
bool collector_delivery(const struct collector *c, uint64_t first, uint64_t last, double *mean,
			double *least);

#endif
