/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Task types' resumes from the exact in-window counts of resume_counts (resume_counts.c). */
#ifndef D9_RESUME_COUNTS_H
#define D9_RESUME_COUNTS_H

#include <stdint.h>

struct collector;

/* Moves the entries of epochs before `before` (UINT64_MAX: all) from the map fd into
 * c->counted. Returns 0 or -ENOMEM. */
int resume_counts_drain(struct collector *c, int fd, uint64_t before);

/* Epochs this far behind the clock are drained: as collector_flush's grace, the epoch's record
 * has come by then or its worker is idle. */
#define RESUME_COUNTS_AGE 2

#endif
