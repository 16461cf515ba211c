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

/* Finds the task vtables (the tables whose first entry is a raw::poll instance) and checks
 * their id_offset fields. Returns a description for metadata.json (static storage). */
const char *tokio_task_id_layout(const struct elf_file *ef, const struct target *t,
				 struct task_id_layout *out);

#endif
