/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#ifndef D9_SYMBOLIZE_H
#define D9_SYMBOLIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "elf_file.h"
#include "proc_maps.h"

/*
 * Per-process address -> function name resolution. Maps are read on first use and re-read
 * (at most every SYMBOLIZER_REFRESH_MS) when an address falls outside every known mapping;
 * each distinct file is parsed once, and each symbol demangled once. Not thread-safe.
 *
 * Everything already resolved stays valid after the process exits, so to symbolize a process
 * that may be gone by then, walk symbolizer_next_module() while it is alive: that opens every
 * mapped file.
 */
struct symbolizer;

#define SYMBOLIZER_REFRESH_MS 100

struct sym_info {
	const char *name;     /* demangled, owned by the symbolizer; NULL if unknown */
	uint64_t sym_offset;  /* addr - function start */
	const char *module;   /* path as in maps ("[vdso]", ...), owned; NULL if anonymous */
	uint64_t file_offset; /* addr translated to an offset in module */
	bool merged;	      /* other names share the function's code (symbolizer_name_with) */
};

/* Returns NULL with errno set on failure. */
struct symbolizer *symbolizer_new(int pid);
void symbolizer_free(struct symbolizer *s);

/* A separate debug file (debuginfo.h): a stripped module of the same GNU build id is named from
 * its symbols. Call before the first resolve. Returns 0 or a negative errno. */
int symbolizer_set_debug_file(struct symbolizer *s, const char *path);

/*
 * Returns 0 when a function was found; -ENOENT when no mapping or no symbol covers addr, in
 * which case module and file_offset are still filled if a mapping does; other negative errnos
 * (-ENOMEM, or why the maps could not be read) otherwise. Strings stay valid until
 * symbolizer_free().
 */
int symbolizer_resolve(struct symbolizer *s, uint64_t addr, struct sym_info *out);

/*
 * Of the names of the function containing addr (its own and those of functions folded into the
 * same code, when sym_info.merged says there are such), the first whose demangled form holds
 * type as a whole type (a generic argument, or the type of a trait impl), and also too where
 * one holds both (also may be NULL); NULL if none holds type. The compiler folds generic
 * functions whose machine code came out the same (a wrapper's poll for several task types, a
 * task's Core<T, S>::poll for both schedulers), and the symbol table then names them all with
 * one of their names: a caller that knows what ran there (the task's type, its scheduler) picks
 * the right one. Valid until symbolizer_free().
 */
const char *symbolizer_name_with(struct symbolizer *s, uint64_t addr, const char *type,
				 const char *also);
/* Whether name[at..at+len) stands alone as a type: a generic argument, an element of a tuple,
 * array or slice, or the type of a trait impl ("<T as ...>", "<T>", "<A, T>", "(T,", "[T; 4]"),
 * not part of a longer name ("app::Foo" in "app::FooBar", "app::Foo::new"). */
bool symbolizer_whole_type_at(const char *name, size_t at, size_t len);

/* Re-read the maps now, ignoring the rate limit. Returns 0 or a negative errno (the previous
 * maps are kept). */
int symbolizer_refresh(struct symbolizer *s);

/* The current maps (read on first use), valid until the next refresh; NULL if unreadable. */
const struct proc_map *symbolizer_maps(struct symbolizer *s, size_t *n);

/* The parsed ELF file of the mapping containing addr, or NULL (anonymous, not ELF, unreadable).
 * addr must be a runtime address; translate with the mapping's start and pgoff. */
const struct elf_file *symbolizer_module_elf(struct symbolizer *s, uint64_t addr);

/* A distinct mapped object: one file (by device and inode) or pseudo mapping ("[vdso]"). */
struct sym_module {
	const char *path; /* as in maps, owned by the symbolizer */
	uint32_t dev_major, dev_minor;
	uint64_t inode;
	bool deleted;
	const struct elf_file *elf; /* NULL if not an ELF file, or unreadable */
	const uint8_t *build_id;    /* NULL if none */
	size_t build_id_len;
};

/*
 * Iterate over every module seen so far, opening each module's file on the way: start with
 * *iter = 0; returns 0 and fills *out, or -ENOENT past the last module.
 */
int symbolizer_next_module(struct symbolizer *s, size_t *iter, struct sym_module *out);

#endif /* D9_SYMBOLIZE_H */
