/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * How each park point's outcome (Ready or Pending) is observed, so that a sample names the
 * leaf that returned Pending in its poll, never one that returned Ready. Per park point, from
 * its name and its code: the return value in al (Poll of a small enum), a tag byte of a value
 * returned through memory (its offset read off the function's own stores), the joined task's
 * state (JoinHandle::poll), only on the Pending path (yield moved there), or not observable.
 */
#ifndef D9_PARK_OUTCOME_H
#define D9_PARK_OUTCOME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "dial9_bpf.h"

struct target;
struct sampler_bpf;

/* Sets each park probe's outcome method (probe_spec.outcome, .at_return); fd reads the
 * executable's code. */
void park_outcome_classify(struct target *t, int fd);
/* The method in words, for metadata.json and messages. */
const char *park_outcome_describe(const struct d9_park_outcome *o);
/* Hands the methods to the program (before any probe goes in), and reads back what it
 * observed (at the end). */
void park_outcome_load(struct sampler_bpf *skel, const struct target *t);
void park_outcome_read(const struct sampler_bpf *skel, struct target *t);

/* The tag byte of a value returned through memory: among code's byte stores of constants at
 * small offsets (movb $imm, disp8(%reg)), the one offset that takes at least three values,
 * the largest of them Pending and one less a Ready one (Rust gives Pending the niche after
 * the last Ready value). Returns false when no single offset fits. */
bool park_outcome_sret_tag(const unsigned char *code, size_t len, uint8_t *off, uint8_t *pending);

#endif
