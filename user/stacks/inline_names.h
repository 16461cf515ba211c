/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#ifndef D9_INLINE_NAMES_H
#define D9_INLINE_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <elfutils/libdwfl.h>

/*
 * The calls inlined at an address, named from the DWARF debug info of its libdwfl module (the
 * module's own, or the separate debug file libdwfl found for it). Both unwinding modes name
 * their frames here (through unwinder_inline_frames()), so each distinct (module, address) is
 * looked up in the DWARF once per run: a CU's functions are indexed by address on its first
 * lookup, and every result is cached. Not thread-safe.
 */
struct inline_names;

struct inline_frame {
	const char
	    *name;    /* demangled, owned by the inline_names, valid until inline_names_free() */
	bool inlined; /* an inlined call inside the next entry's function */
};

/* Returns NULL on ENOMEM. */
struct inline_names *inline_names_new(void);
void inline_names_free(struct inline_names *in);

/*
 * The functions at pc, a runtime address in mod (a return address already moved back into its
 * call): the inlined calls innermost first, then the function that contains them (inlined =
 * false). *n = 0 when the module has no debug info for pc. Returns 0, -ENOSPC when max was too
 * small (the innermost max entries are filled), -EINVAL, -ENOMEM.
 */
int inline_names_get(struct inline_names *in, Dwfl_Module *mod, uint64_t pc,
		     struct inline_frame *out, size_t max, size_t *n);

/* Indexes the CU of mod after *cu (the first when *cu is NULL) ahead of its first lookup, so
 * that a run's samples do not pay for it, and moves *cu on. Returns 1 when a CU was indexed, 0
 * past the last one, or -ENOMEM. */
int inline_names_index_next(struct inline_names *in, Dwfl_Module *mod, Dwarf_Die **cu);

/* The Dwfl holding the modules is about to end: drop what points into it. Names already handed
 * out stay valid. */
void inline_names_forget_modules(struct inline_names *in);

#endif /* D9_INLINE_NAMES_H */
