/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Bounded-memory aggregation shared by the folded, flamegraph and pprof writers: string
 * interning, a u64 -> dense id index, and a trie of stacks (root first) whose nodes carry
 * summed weights. Memory grows with distinct strings, keys and stacks, never with the number
 * of samples added.
 */
#ifndef D9_STACK_AGG_H
#define D9_STACK_AGG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "task_sample.h"

/* Frames kept per stack (the innermost ones); the sampler captures at most 127. */
#define D9_AGG_MAX_DEPTH 256

/* Strings -> dense ids 0, 1, ... in first-seen order; each string copied once. */
struct intern {
	char **strs;
	size_t *lens;
	size_t n, cap;
	uint32_t *slots; /* open addressing; id + 1, 0 = empty */
	size_t nslots;
};

/* Finds or adds s[0..len); returns 0 and sets *id, or -ENOMEM. */
int intern_id(struct intern *t, const char *s, size_t len, uint32_t *id);
static inline const char *intern_str(const struct intern *t, uint32_t id)
{
	return t->strs[id];
}
void intern_free(struct intern *t);

/* u64 keys -> dense ids 0, 1, ... in first-seen order. */
struct u64_index {
	uint64_t *keys;
	uint32_t *ids; /* id + 1, 0 = empty */
	size_t nslots, n;
};

/* Finds or adds key; returns 0 and sets *id (and *added when new), or -ENOMEM. */
int u64_index_id(struct u64_index *m, uint64_t key, uint32_t *id, bool *added);
void u64_index_free(struct u64_index *m);

/*
 * The name a frame gets in folded stacks and flamegraphs: the function name with ';' (the
 * frame separator) made ',' and control characters made ' ', else "[module+0xoffset]" with the
 * module's base name, else "[unknown]". Writes into *buf (grown with realloc as needed) and
 * returns the length, or -ENOMEM.
 */
int stack_frame_name(const struct task_frame *f, char **buf, size_t *cap);

/* The single pseudo frame given to a sample without a stack, naming why. */
const char *stack_missing_name(int stack_error);

struct stack_node {
	uint32_t name;			    /* intern id in stack_agg.names */
	uint32_t parent;		    /* node index; the root (0) is its own parent */
	uint32_t first_child, next_sibling; /* 0 = none; valid after stack_agg_sort() */
	uint32_t depth;			    /* root = 0 */
	uint64_t total;			    /* weight of every stack through this node; valid
					     * after stack_agg_sort() */
	uint64_t self;			    /* weight of stacks ending here; valid after
					     * stack_agg_sort() */
};

/*
 * Caches of stack_agg_add_sample(), keyed by the frames' string pointers rather than their
 * text: a frame is its function name pointer, or the module pointer and file offset of an
 * unnamed one. This relies on a task_frame's name and module strings being immutable and
 * staying at the same address for the aggregator's lifetime, which holds for the symbolizer's
 * and the unwinder's strings (owned until symbolizer_free() and unwinder_free(), after every
 * writer finished). Equal text at two addresses only costs a second lookup: names are still
 * interned by text. Should stack_frame_name() read another field (inlined), the keys must
 * include it.
 *
 * Frame -> name id, so that a frame seen before costs one hash probe instead of rebuilding,
 * hashing and comparing its display name.
 */
struct frame_slot {
	const char *ptr; /* name, or module when name is NULL; NULL for "[unknown]" */
	uint64_t off;	 /* file_offset when keyed by module, else 0 */
	uint32_t id;	 /* intern id in stack_agg.names */
	uint32_t kind;	 /* 0 = free slot, else FRAME_KEY_* (stack_agg.c) */
};

/* A stack seen before (by its frames' string pointers, see stack_key() in stack_agg.c) ->
 * its trie leaf, to skip both the frame lookups and the walk (a chain of dependent cache
 * misses) on every later sample of it. A hit is checked against a copy of the key. */
struct stack_slot {
	uint64_t hash;
	uint32_t leaf; /* 0 = free slot */
	uint32_t seq;  /* offset of the key's copy in stack_agg.seqs */
};

/* Trie of root-first stacks; node 0 is the root ("all"). */
struct stack_agg {
	struct intern names;
	struct stack_node *nodes;
	size_t nnodes, cap;
	/* (parent, name) -> child: open addressing over node indexes (0, the root, is never a
	 * child, so it marks a free slot); 4 bytes a slot keeps big tries small. */
	uint32_t *slots;
	size_t nslots;
	uint64_t nsamples; /* samples added, including weightless ones */
	uint32_t max_depth;
	char *scratch;
	size_t scratch_cap;
	/* Caches; both grow with distinct frames and stacks only. */
	struct frame_slot *frames;
	size_t nframes, nframe_slots;
	struct stack_slot *stacks;
	size_t nstacks, nstack_slots;
	/* The keys' copies, each as its length, the weight gathered since the last
	 * stack_agg_sort() and its words; capped at the trie's size (stacks beyond that are not
	 * cached). */
	uint64_t *seqs;
	size_t nseqs, seqs_cap;
};

int stack_agg_init(struct stack_agg *a);
void stack_agg_free(struct stack_agg *a);
/* Adds a stack given root first as interned names; returns 0 or -ENOMEM. */
int stack_agg_add(struct stack_agg *a, const uint32_t *names, size_t n, uint64_t weight);
/* Adds a park sample's stack (leaf first in s) with weight s->weight_count; on-CPU samples
 * (no resumes) are left out. */
int stack_agg_add_sample(struct stack_agg *a, const struct task_sample *s);
/* The time view: a sample's stack under a root frame "running" (on-CPU samples, weight
 * weight_cpu_ns) or "waiting" (park samples, weight_idle_ns). */
int stack_agg_add_time(struct stack_agg *a, const struct task_sample *s);
/* Sums the totals, and links every node's children in ascending name order (byte-wise), for
 * stable output. */
int stack_agg_sort(struct stack_agg *a);
static inline const char *stack_node_name(const struct stack_agg *a, uint32_t node)
{
	return intern_str(&a->names, a->nodes[node].name);
}

#endif /* D9_STACK_AGG_H */
