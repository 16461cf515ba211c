/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The task types of a Tokio program and the future each one runs: every spawned future type
 * T (with its scheduler S) has a vtable of its own, found once at start, so a sample names its
 * task's future by the vtable its header points to.
 */
#ifndef D9_TASK_TYPES_H
#define D9_TASK_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct elf_file;
struct target;
struct task_frame;

struct task_type {
	uint64_t vtable;       /* link-time address */
	uint64_t poll;	       /* its raw::poll instance */
	uint64_t harness_poll; /* the Harness<T, S>::poll raw::poll calls, 0 when inlined */
	char *name;	       /* the future T, demangled; "task-type-N" when no name can be had */
	char *root;	       /* "task: NAME", the root frame of its samples */
	/* How the name was found: "poll_generics" (raw::poll<T,S>'s own v0 name),
	 * "drop_glue" (the drop_in_place its raw::dealloc calls: of Cell<T,S> or of T), "none". */
	const char *method;
	uint64_t samples; /* written, counted by the collector */
};

struct task_types {
	struct task_type *v; /* by vtable address */
	size_t n;
	uint64_t bias; /* runtime address - link-time address of the executable */
};

/* Finds and names every task type of the target. Returns 0 or a negative errno. */
int task_types_load(const struct elf_file *ef, const struct target *t, struct task_types *out);
/* The type whose vtable is at runtime address VTABLE, or NULL. */
struct task_type *task_types_find(const struct task_types *tt, uint64_t vtable);
void task_types_free(struct task_types *tt);

/* The first generic argument of the generic named right before the first "<" after KEY in
 * NAME (e.g. T in "...Cell<T,S>>" for KEY "Cell<"): malloc'd, or NULL. */
char *task_types_first_arg(const char *name, const char *key);
/* The same for the generic argument IDX (0 the first), e.g. S in "...Harness<T, S>>" for KEY
 * "Harness<" and IDX 1. */
char *task_types_arg(const char *name, const char *key, unsigned idx);
/* Whether name[i] opens or closes a bracket of a type's name ('<', '(', '['; not the '>' of
 * an fn type's "->"). */
static inline bool task_types_opens(const char *name, size_t i)
{
	return name[i] == '<' || name[i] == '(' || name[i] == '[';
}
static inline bool task_types_closes(const char *name, size_t i)
{
	return (name[i] == '>' && !(i > 0 && name[i - 1] == '-')) || name[i] == ')' ||
	       name[i] == ']';
}

/* The future of the innermost task on a stack (leaf first), from Harness<T, S>::poll's generics
 * (v0 mangling; legacy names carry none): malloc'd, or NULL. */
char *task_types_stack_future(const struct task_frame *fr, size_t n);
/* The scheduler of that task, S of the same frame's generics: malloc'd, or NULL. Harness is
 * never folded across schedulers (it schedules), unlike Core<T, S>::poll. */
char *task_types_stack_scheduler(const struct task_frame *fr, size_t n);
/* The types whose raw::poll (or Harness::poll) instance starts at runtime address POLL_START,
 * at most MAX into OUT; returns how many. Several when the compiler merged identical instances
 * (futures whose polls compile to the same code). */
size_t task_types_by_poll(const struct task_types *tt, uint64_t poll_start, struct task_type **out,
			  size_t max);

#endif /* D9_TASK_TYPES_H */
