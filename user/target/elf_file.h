/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#ifndef D9_ELF_FILE_H
#define D9_ELF_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ELF_BUILD_ID_MAX 20

/* A function symbol. */
struct elf_sym {
	uint64_t addr; /* st_value: link-time virtual address */
	uint64_t size;
	const char *name; /* mangled, owned by the elf_file */
};

/* A PT_LOAD program header. */
struct elf_load {
	uint64_t offset, vaddr, filesz, memsz;
	uint32_t flags; /* PF_R | PF_W | PF_X */
};

/*
 * What the profiler needs from one ELF file, parsed eagerly so the file itself is closed when
 * elf_file_open*() returns.
 */
struct elf_file;

/*
 * Parse the ELF file at path / behind fd / in buf. elf_file_open_fd() takes ownership of fd
 * (closed even on error); elf_file_open_mem() does not keep buf. Return 0 and set *out, or a
 * negative errno: -ENOEXEC for anything not a well-formed ET_EXEC or ET_DYN ELF file.
 */
int elf_file_open(const char *path, struct elf_file **out);
int elf_file_open_fd(int fd, struct elf_file **out);
int elf_file_open_mem(const void *buf, size_t len, struct elf_file **out);
void elf_file_close(struct elf_file *ef);

/*
 * The function containing vaddr: addr <= vaddr < addr + size, or for a symbol of size 0, the
 * nearest preceding one if vaddr lies before the next symbol and in the same PT_LOAD segment.
 * NULL if none. Binary search.
 */
const struct elf_sym *elf_file_lookup(const struct elf_file *ef, uint64_t vaddr);

/*
 * Function symbols sorted by address, one per address: of several names at one address
 * (aliases) the GLOBAL or WEAK over LOCAL, then the larger size, then the fewer leading
 * underscores, then the alphabetically first is kept. Taken from .symtab, or from .dynsym when
 * there is no .symtab or it has no functions.
 */
const struct elf_sym *elf_file_syms(const struct elf_file *ef, size_t *n);

/*
 * The names dropped by that deduplication, sorted by address. A caller looking for every
 * function by name (uprobe attachment) checks these too; their addresses are all present in
 * elf_file_syms(), so attaching per distinct address never probes one address twice.
 */
const struct elf_sym *elf_file_aliases(const struct elf_file *ef, size_t *n);

/* The aliases of the function starting at vaddr: *n of them from the one returned (*n = 0: the
 * code has only the name elf_file_syms() keeps). Binary search. */
const struct elf_sym *elf_file_aliases_at(const struct elf_file *ef, uint64_t vaddr, size_t *n);

/* Whether the file has a .symtab (false: stripped, only exported .dynsym names). */
bool elf_file_has_symtab(const struct elf_file *ef);

/*
 * Moves from's function symbols and aliases into ef, leaving from without any. For a stripped
 * binary ef and its separate debug file from (same build id): the names come from the debug
 * file and the program headers from the running binary, since a debug file's sections are
 * NOBITS and its segments say nothing of where code lies in the binary.
 */
void elf_file_take_syms(struct elf_file *ef, struct elf_file *from);

/* The .gnu_debuglink section: the separate debug file's name (owned by ef) and CRC32. Return 0,
 * or -ENOENT when there is none. */
int elf_file_debuglink(const struct elf_file *ef, const char **name, uint32_t *crc);

/*
 * Calls fn with every .symtab symbol of ELF type stt (STT_OBJECT, STT_TLS, ...) of the ELF file
 * at path, name and all, until fn returns true; the symbol and its name are valid only during
 * the call. For data symbols, which elf_file keeps none of. Returns 0, -ENOENT when the file
 * has no .symtab, or another negative errno.
 */
int elf_symtab_each(const char *path, int stt, bool (*fn)(const struct elf_sym *sym, void *ctx),
		    void *ctx);

/* ET_EXEC or ET_DYN. */
uint16_t elf_file_type(const struct elf_file *ef);

/* GNU build id: returns its length (0 if none, at most ELF_BUILD_ID_MAX) and sets *id. */
size_t elf_file_build_id(const struct elf_file *ef, const uint8_t **id);

const struct elf_load *elf_file_loads(const struct elf_file *ef, size_t *n);

/* Translate through the PT_LOAD segments' file-backed parts. Return 0 or -ENOENT. */
int elf_file_vaddr_to_offset(const struct elf_file *ef, uint64_t vaddr, uint64_t *off);
int elf_file_offset_to_vaddr(const struct elf_file *ef, uint64_t off, uint64_t *vaddr);

#endif /* D9_ELF_FILE_H */
