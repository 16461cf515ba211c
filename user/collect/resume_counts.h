/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Task types' resumes from the exact in-window counts of resume_counts (resume_counts.c). */
#ifndef D9_RESUME_COUNTS_H
#define D9_RESUME_COUNTS_H

#include <stdbool.h>
#include <stdint.h>

struct collector;

/* Moves the entries of epochs old enough to be closed (every one when final) from the map fd
 * into c->counted. Returns 0 or -ENOMEM. */
int resume_counts_drain(struct collector *c, int fd, uint64_t now_ns, bool final);

#endif
