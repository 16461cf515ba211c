/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Checks the observed Tokio task layout (Header.vtable at +16, Vtable.id_offset at +72) against
 * the target binary before the BPF program relies on it to read task ids.
 */
#ifndef D9_TOKIO_LAYOUT_H
#define D9_TOKIO_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

struct elf_file;
struct target;

struct task_id_layout {
	bool valid;
	uint32_t hdr_vtable_off;
	uint32_t vtable_id_off;
	uint32_t vtables_found;
	uint32_t vtables_valid;
};

/* A task vtable of the executable (link-time addresses): one per task type, its future T and
 * scheduler S; its first entry is raw::poll<T,S>, its third raw::dealloc<T,S>. */
struct tokio_vtable {
	uint64_t vaddr, poll, dealloc; /* dealloc 0: not found */
};

struct tokio_vtables {
	struct tokio_vtable *v;
	size_t n, cap;
};

/* Every task vtable: the tables whose first entry is one of the target's raw::poll instances.
 * Returns 0 or a negative errno. */
int tokio_vtables_find(const struct target *t, struct tokio_vtables *v);
void tokio_vtables_free(struct tokio_vtables *v);

/* Finds the task vtables (the tables whose first entry is a raw::poll instance) and checks
 * their id_offset fields. Returns a description for metadata.json (static storage). */
const char *tokio_task_id_layout(const struct elf_file *ef, const struct target *t,
				 struct task_id_layout *out);

/*
 * Where Tokio's task id counter (Id::next's NEXT_ID) lives in the running target: ids are
 * handed out in spawn order from it, so a task whose id is below the value read at some time
 * was spawned before then. Returns 0 and sets *addr, or a negative errno (-ENOENT: no such
 * symbol).
 */
int tokio_next_id_addr(const struct elf_file *ef, const struct target *t, uint64_t *addr);
/* Reads the counter's current value. Returns 0 or a negative errno. */
int tokio_next_id_read(int pid, uint64_t addr, uint64_t *value);

#endif
