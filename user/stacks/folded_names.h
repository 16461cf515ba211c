/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Names for frames in code the compiler folded for several functions. Generic functions whose
 * machine code came out the same are kept once (a wrapper's poll that calls its future through
 * a pointer, for every task type; Tokio's Core<T, S>::poll, for both schedulers), and the
 * symbol table and the debug info then name that code after one of them only. A sample knows
 * what ran there: its task's type, and its scheduler from Harness<T, S>::poll, which is kept
 * apart for each. So a Tokio service on the multi-thread runtime shows its tasks' Core frames
 * as current_thread's, unless renamed.
 */
#ifndef D9_FOLDED_NAMES_H
#define D9_FOLDED_NAMES_H

#include <stddef.h>
#include "stack_agg.h"

struct symbolizer;
struct task_frame;

struct folded_names {
	struct intern names; /* inlined calls' names rewritten for the instance that ran */
};

/* Renames the frames of frames[0..n) (leaf first) that are in folded code after the instance
 * that ran: the one whose name holds future (the sample's task type) and, where one does, the
 * stack's scheduler; the calls inlined into such a frame get that scheduler or type in their
 * names too. Names stay valid until folded_names_free() and symbolizer_free(). */
void folded_names_apply(struct folded_names *fn, struct symbolizer *s, struct task_frame *frames,
			size_t n, const char *future);
void folded_names_free(struct folded_names *fn);

#endif
