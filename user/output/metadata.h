/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* metadata.json: what was sampled, how, and what the sampler counted. */
#ifndef D9_METADATA_H
#define D9_METADATA_H

#include <stdbool.h>
#include <stdint.h>
#include "dial9_bpf.h"

struct options;
struct target;
struct collector;
struct arming;
struct worker_tls;
struct long_polls;
struct push_stats;
struct cpu_samples;

struct run_summary {
	uint64_t started_ns; /* CLOCK_MONOTONIC */
	uint64_t stopped_ns;
	uint64_t started_realtime_ns;
	uint64_t seed;
	const char *stop_reason;
	const char *task_id_layout;
	uint64_t counters[D9_CNT_MAX];
	double attach_ms;
	double detach_ms;
	uint64_t probes_attached;
	bool uprobe_multi;
	struct arming *arming;
	const struct worker_tls *worker_tls; /* workers found at the attach, or NULL */
	const struct long_polls *long_polls; /* or NULL */
	/* One folder of --rotate (rotate_s > 0): the epochs [epoch_lo, epoch_hi) of the run
	 * (epoch_hi 0: to its end), the arming totals at the folder's start and end (NULL: now)
	 * and the tool's CPU seconds at its start, its place in the run. */
	uint64_t rotate_s, interval, run_started_ns;
	uint64_t epoch_lo, epoch_hi;
	const struct arming_totals *arming_base, *arming_end;
	double tool_cpu_s0;
	const struct push_stats *push; /* --push, or NULL */
	const struct cpu_samples *cpu_samples; /* or NULL */
	/* --unwind ebpf's tables, or NULL */
	const struct unwind_tables *unwind_tables;
};

/* Whether epoch belongs to the run summary's part of the run. */
static inline bool run_has_epoch(const struct run_summary *r, uint64_t epoch)
{
	return epoch >= r->epoch_lo && (!r->epoch_hi || epoch < r->epoch_hi);
}

/* The tool's CPU seconds so far (user + system). */
double tool_cpu_s(void);

struct out_dir;

/* Writes DIR/metadata.json atomically (temporary file + rename); prints its own error.
 * Returns 0 or -errno. */
int metadata_write(const struct out_dir *dir, const struct options *o, const struct target *t,
		   const struct collector *c, const struct run_summary *r);

#endif
