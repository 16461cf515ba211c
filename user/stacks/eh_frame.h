/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Unwind rows of one ELF file from its .eh_frame, for --unwind ebpf: at each pc where the
 * call frame rules change, the CFA (rsp or rbp plus an offset) and where the caller's rbp was
 * saved. Only what the BPF walker evaluates is covered; every other rule (CFA expressions, a
 * CFA in another register, a return address not at CFA - 8) makes its range not covered.
 */
#ifndef D9_EH_FRAME_H
#define D9_EH_FRAME_H

#include <libelf.h>
#include <stddef.h>
#include <stdint.h>

#include "dial9_bpf.h"

struct unwind_rows {
	struct d9_unwind_row *rows; /* sorted by pc, no two neighbours alike */
	size_t n, cap;
	size_t fdes;	/* FDEs read */
	size_t skipped; /* FDEs left out: unreadable, or beyond 4 GiB of address space */
};

/*
 * Appends the rows of elf's .eh_frame to out, sorted by pc, merged with nothing already
 * there (call it on an empty out). Returns 0, -ENOENT when there is no .eh_frame, -EINVAL
 * when it cannot be read, -ENOMEM.
 */
int eh_frame_rows(Elf *elf, struct unwind_rows *out);

/* The same from the bytes of an .eh_frame loaded at vaddr. */
int eh_frame_rows_mem(const uint8_t *buf, size_t len, uint64_t vaddr, struct unwind_rows *out);

/* The row that holds at pc (the last one at or below it), or NULL. */
const struct d9_unwind_row *unwind_rows_find(const struct d9_unwind_row *rows, size_t n,
					     uint64_t pc);

void unwind_rows_free(struct unwind_rows *r);

#endif /* D9_EH_FRAME_H */
