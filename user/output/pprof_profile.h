/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * One pprof profile (profile.proto, gzipped) encoded into a stream: profile.pb.gz writes the
 * whole run's into its file, --push each interval's into memory (pprof_writer.c).
 */
#ifndef D9_PPROF_PROFILE_H
#define D9_PPROF_PROFILE_H

#include <stdbool.h>
#include <stdio.h>
#include "task_sample.h"
#include "writer.h"

/* The sample types, in the order of every sample's values. */
#define PPROF_NSAMPLE_TYPES 3
struct pprof_sample_type {
	const char *type, *unit;
};
extern const struct pprof_sample_type pprof_sample_types[PPROF_NSAMPLE_TYPES];

struct pprof_writer;

/* A profile written to f as samples come. push_labels: label samples with their worker only
 * (a backend makes one series per distinct label set). NULL when out of memory. */
struct pprof_writer *pprof_profile_new(FILE *f, bool push_labels);
/* Returns 0 or a negative errno (sticky). */
int pprof_profile_sample(struct pprof_writer *pw, const struct task_sample *s);
/* Writes the tables and ends the gzip stream; rc's times are the profile's. Does not close f.
 * Returns 0 or a negative errno. */
int pprof_profile_finish(struct pprof_writer *pw, const struct run_context *rc);
void pprof_profile_free(struct pprof_writer *pw);

#endif
