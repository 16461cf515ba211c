/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * long_polls.jsonl: every poll that held its worker for --long-poll-ms or more, running (seen
 * at clock ticks) or blocked off the CPU (seen at sched_switch), whether or not a window is
 * open (bpf/long_polls.bpf.h).
 *
 * The BPF side needs the word of Tokio's context::CONTEXT that holds current_task_id. Park
 * points count, inside polls of known tasks, which word equals the task's id; the loader
 * checks the counts as they come and sets the word once one holds the id at nearly every
 * observation and no other does. Until then no long poll is seen.
 */
#ifndef D9_LONG_POLLS_H
#define D9_LONG_POLLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "clock_events.h"
#include "json.h"
#include "out_dir.h"

struct sampler_bpf;
struct target;
struct collector;
struct d9_long_poll;
struct worker_tls;

struct long_polls {
	/* "off", "no_context_symbol", "learning", "learned", "ambiguous" */
	const char *status;
	uint64_t min_ns;
	int64_t ctx_off;
	int word; /* the learned word of CONTEXT, -1 until learned */
	bool tagged;
	uint64_t observations;	/* park points that counted words */
	uint64_t learned_at_ns; /* CLOCK_MONOTONIC; 0 until learned */
	uint64_t next_check_ns;
	uint64_t written;
	struct out_file out;
	bool open;
	struct json_buf line;
	/* Polls held on the CPU: "off", "no_scheduler_context", "no_clock_event", "no_tick",
	 * "ticking". */
	const char *cpu_status;
	struct clock_events ticks;
	/* The ticks: the scheduler's (tick_link) where it serves, else clock events. */
	struct bpf_link *tick_link;
	bool sched_tick;	   /* prepared before load: the scheduler's tick will serve */
	const char *no_sched_tick; /* why it does not, in a word */
	uint64_t tick_ns;
	const char *ticks_follow; /* "scheduler_tick", "threads", "cpus" */
	/* Worker loops nested in a blocking task's poll since before the attach, found parked
	 * with that task current (not long polls): the map the sampler skips them by, and how
	 * many threads were added to it. */
	int run_tasks_fd;
	uint64_t nested_loops;
	/* The word is being learned: long polls or on-CPU samples read the running task. */
	bool learning;
};

/* Between open and load: the BPF constants (min_ns 0 leaves long polls off). read_task: the
 * on-CPU samples read the running task, so the word is learned even without long polls. */
void long_polls_configure(struct long_polls *lp, struct sampler_bpf *skel, const struct target *t,
			  uint64_t min_ns, bool read_task);
/* Creates long_polls.jsonl when long polls are on; 0 or a negative errno. */
int long_polls_open(struct long_polls *lp, const struct out_dir *d);
/* Checks the learning counts (at most every 100 ms) and sets the word once settled. */
void long_polls_learn(struct long_polls *lp, struct sampler_bpf *skel, uint64_t now_ns);
/* One D9_REC_LONG_POLL record: symbolized and written. */
int long_polls_handle(struct long_polls *lp, struct collector *c, const void *data, size_t size);
/* After worker_tls_resolve(): the clock ticks that find polls held on the CPU, through the
 * scheduler context it found (one line on stderr when they cannot run). */
void long_polls_start_ticks(struct long_polls *lp, struct sampler_bpf *skel,
			    const struct worker_tls *wt, int pid);
void long_polls_stop_ticks(struct long_polls *lp);
/* Commits the file; 0 or a negative errno. */
int long_polls_finish(struct long_polls *lp);
/* metadata.json's "long_polls" value. */
void long_polls_write_json(FILE *f, const struct long_polls *lp);

/* The word that holds the id in at least 80% of obs observations, no other word doing so;
 * -1 when none or several. Not all: a park point in a poll whose task is not known (begun
 * before the probes went in, or nested) may read another. counts has D9_LP_LEARN_SLOTS entries
 * (dial9_bpf.h). */
int long_polls_pick_word(const uint64_t *counts, uint64_t obs, bool *tagged);

#endif
