// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The .eh_frame interpreter (user/stacks/eh_frame.c) against libdw's own CFI answers. */
#include <fcntl.h>
#include <gelf.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/auxv.h>
#include <cmocka.h>
#include <dwarf.h>
#include <elfutils/libdw.h>

#include "eh_frame.h"
#include "unwind_tables.h"

#define REG_RBP 6
#define REG_RSP 7
#define REG_RA 16

/* The row libdw's answer at pc implies (only the fields compared). */
static struct d9_unwind_row libdw_row(Dwarf_CFI *cfi, uint64_t pc, bool *found)
{
	struct d9_unwind_row row = {.cfa = D9_UNW_NONE};
	Dwarf_Op mem[3], *ops;
	Dwarf_Frame *frame;
	size_t nops;

	*found = dwarf_cfi_addrframe(cfi, pc, &frame) == 0;
	if (!*found)
		return row;
	if (dwarf_frame_register(frame, REG_RA, mem, &ops, &nops) == 0 && nops == 0 && ops) {
		row.cfa = D9_UNW_END;
		goto out;
	}
	if (dwarf_frame_register(frame, REG_RA, mem, &ops, &nops) || nops != 2 ||
	    ops[0].atom != DW_OP_call_frame_cfa || ops[1].atom != DW_OP_plus_uconst ||
	    (int64_t)ops[1].number != -8)
		goto out;
	if (dwarf_frame_register(frame, REG_RBP, mem, &ops, &nops))
		goto out;
	if (nops == 2 && ops[0].atom == DW_OP_call_frame_cfa && ops[1].atom == DW_OP_plus_uconst)
		row.rbp_off = (int16_t)(int64_t)ops[1].number;
	else if (nops != 0 || ops)
		goto out;
	if (dwarf_frame_cfa(frame, &ops, &nops) || nops != 1 || ops[0].atom != DW_OP_bregx ||
	    (ops[0].number != REG_RSP && ops[0].number != REG_RBP)) {
		row.rbp_off = 0;
		goto out;
	}
	row.cfa = ops[0].number == REG_RSP ? D9_UNW_RSP : D9_UNW_RBP;
	row.cfa_off = (int32_t)(int64_t)ops[0].number2;
out:
	if (row.cfa == D9_UNW_NONE || row.cfa == D9_UNW_END)
		row.rbp_off = 0;
	free(frame);
	return row;
}

/* Every row start, the byte before it, and every 3rd byte of the text between. */
static void compare_file(const char *path, size_t min_rows)
{
	struct unwind_rows rows = {};
	size_t checked = 0, covered = 0, bad = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	Elf *elf;
	Dwarf_CFI *cfi;

	assert_true(fd >= 0);
	elf_version(EV_CURRENT);
	elf = elf_begin(fd, ELF_C_READ, NULL);
	assert_non_null(elf);
	assert_int_equal(eh_frame_rows(elf, &rows), 0);
	assert_true(rows.n >= min_rows);
	cfi = dwarf_getcfi_elf(elf);
	assert_non_null(cfi);
	for (size_t i = 0; i + 1 < rows.n; i++) {
		for (uint64_t pc = rows.rows[i].pc ? rows.rows[i].pc - 1 : 0;
		     pc < rows.rows[i + 1].pc; pc += pc == rows.rows[i].pc - 1 ? 1 : 3) {
			const struct d9_unwind_row *ours = unwind_rows_find(rows.rows, rows.n, pc);
			bool found;
			struct d9_unwind_row want = libdw_row(cfi, pc, &found);
			struct d9_unwind_row got = ours ? *ours : (struct d9_unwind_row){};

			checked++;
			covered += got.cfa != D9_UNW_NONE;
			if (got.cfa == want.cfa && got.cfa_off == want.cfa_off &&
			    got.rbp_off == want.rbp_off)
				continue;
			if (bad++ < 5)
				fprintf(
				    stderr,
				    "%s %#lx: ours cfa %u%+d rbp %d, libdw cfa %u%+d rbp %d%s\n",
				    path, (unsigned long)pc, got.cfa, got.cfa_off, got.rbp_off,
				    want.cfa, want.cfa_off, want.rbp_off, found ? "" : " (no FDE)");
		}
	}
	fprintf(stderr, "%s: %zu rows from %zu FDEs (%zu skipped), %zu addresses, %zu covered\n",
		path, rows.n, rows.fdes, rows.skipped, checked, covered);
	assert_int_equal(bad, 0);
	assert_true(covered > checked * 9 / 10);
	dwarf_cfi_end(cfi);
	elf_end(elf);
	close(fd);
	unwind_rows_free(&rows);
}

static void test_self(void **state)
{
	(void)state;
	compare_file("/proc/self/exe", 100);
}

/* Hand-written assembly, signal trampolines and the outermost frames. */
static void test_libc(void **state)
{
	(void)state;
	compare_file("/lib/x86_64-linux-gnu/libc.so.6", 1000);
}

/* Any other file, e.g. a Rust release build: D9_TEST_ELF=build/demo-nofp. */
static void test_env_file(void **state)
{
	const char *path = getenv("D9_TEST_ELF");

	(void)state;
	if (!path)
		skip();
	compare_file(path, 100);
}

/* The row covering addr in the process's tables, or NULL when no module holds it. */
static const struct d9_unwind_row *tables_find(const struct unwind_tables *t, uint64_t addr)
{
	for (size_t i = 0; i < t->nmods; i++) {
		const struct d9_unwind_module *m = &t->mods[i];

		if (addr >= m->start && addr < m->end)
			return unwind_rows_find(t->rows + m->first, m->count, addr - m->bias);
	}
	return NULL;
}

/* This process's own tables: load biases right for the binary (a covered row at one of its
 * functions), and the vDSO has a module. */
static void test_process_tables(void **state)
{
	uint64_t fn = (uint64_t)(uintptr_t)&compare_file, vdso = getauxval(AT_SYSINFO_EHDR);
	const struct d9_unwind_row *r;
	struct unwind_tables t;

	(void)state;
	assert_int_equal(unwind_tables_build(getpid(), &t), 0);
	assert_true(t.nmods >= 3 && t.nrows > 1000);
	r = tables_find(&t, fn);
	assert_non_null(r);
	assert_int_equal(r->cfa, D9_UNW_RSP);
	assert_int_equal(r->cfa_off, 8); /* at the entry: only the return address pushed */
	if (vdso) {
		bool found = false;

		for (size_t i = 0; i < t.nmods; i++)
			found |= vdso >= t.mods[i].start && vdso < t.mods[i].end;
		assert_true(found);
	}
	unwind_tables_free(&t);
}

static void test_lookup(void **state)
{
	const struct d9_unwind_row rows[] = {{.pc = 0x10, .cfa = D9_UNW_RSP, .cfa_off = 8},
					     {.pc = 0x14, .cfa = D9_UNW_RSP, .cfa_off = 16},
					     {.pc = 0x20, .cfa = D9_UNW_NONE}};

	(void)state;
	assert_null(unwind_rows_find(rows, 3, 0xf));
	assert_ptr_equal(unwind_rows_find(rows, 3, 0x10), &rows[0]);
	assert_ptr_equal(unwind_rows_find(rows, 3, 0x13), &rows[0]);
	assert_ptr_equal(unwind_rows_find(rows, 3, 0x14), &rows[1]);
	assert_ptr_equal(unwind_rows_find(rows, 3, 0x1000), &rows[2]);
	assert_null(unwind_rows_find(rows, 0, 0x10));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_lookup),	   cmocka_unit_test(test_self),
	    cmocka_unit_test(test_libc),	   cmocka_unit_test(test_env_file),
	    cmocka_unit_test(test_process_tables),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
