/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * --rotate SECS --keep N: continuous local mode. The probes and the BPF side stay as they are;
 * only the outputs roll. Every SECS seconds the outputs of that interval are completed into
 * DIR/<UTC start>/ (written as a hidden DIR/.part-N and renamed once complete, DIR/latest
 * pointing at the newest), and the oldest folders beyond N are removed.
 */
#ifndef D9_ROTATE_H
#define D9_ROTATE_H

#include <stdbool.h>
#include <stdint.h>
#include "arming.h"
#include "dial9_bpf.h"
#include "out_dir.h"

struct record;

struct rotation {
	struct out_dir cur; /* the folder being written, under its temporary name */
	char part[NAME_MAX + 1];
	bool open;
	uint64_t index;			 /* of the folder being written, from 0 */
	uint64_t first_epoch, end_epoch; /* its epochs: [first, end); end 0 until the run starts */
	uint64_t start_ns;		 /* CLOCK_MONOTONIC where its part of the run begins */
	uint64_t counters0[D9_CNT_MAX];	 /* the BPF counters at its start */
	struct arming_totals arm0;
	double cpu0; /* the tool's CPU seconds at its start */
	bool failed; /* a folder could not be completed (printed) */
	/* The handovers (completing one folder, opening the next): the longest, and their CPU. */
	double max_handover_ms, handover_cpu_s;
};

/* In setup: opens the first folder and its writers. Returns 0 or 1 (printed). */
int rotate_open_first(struct record *r);
/* From the loop, after a whole read of the ring buffer: once the folder's last epoch is over
 * (plus a grace for records in flight), completes it and opens the next. Returns 0, or 1 when
 * the next folder cannot be written (printed; the run should stop). */
int rotate_if_due(struct record *r, uint64_t now_ns);
/* At the end of the run, after the final drain: completes the last folder. Returns 0 or 1. */
int rotate_finish(struct record *r);
/* Removes a folder left incomplete (a run that did not start) and releases the rest. */
void rotate_free(struct record *r);

#endif
