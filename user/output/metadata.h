/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* metadata.json: what was sampled, how, and what the sampler counted. */
#ifndef D9_METADATA_H
#define D9_METADATA_H

#include <stdint.h>
#include "dial9_bpf.h"

struct options;
struct target;
struct collector;
struct arming;
struct worker_tls;
struct long_polls;

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
	/* --unwind ebpf's tables, or NULL */
	const struct unwind_tables *unwind_tables;
};

struct out_dir;

/* Writes DIR/metadata.json atomically (temporary file + rename); prints its own error.
 * Returns 0 or -errno. */
int metadata_write(const struct out_dir *dir, const struct options *o, const struct target *t,
		   const struct collector *c, const struct run_summary *r);

#endif
