// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The task-root ELF file of perf.data: one address per distinct name, and the file it writes
 * read back with the profiler's own ELF reader, each address naming its root.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "elf_file.h"
#include "perf_task_dso.h"

static void test_addresses_and_symbols(void **state)
{
	char path[] = "/tmp/d9-task-dso-XXXXXX";
	const char *names[] = {"task: a::b::{closure#0}", "task: c", "task: <d as e>::f"};
	struct perf_task_dso t = {0};
	char copy[] = "task: c";
	struct elf_file *ef;
	uint64_t addr[3];
	FILE *f;
	int fd;

	(void)state;
	for (int i = 0; i < 3; i++)
		addr[i] = perf_task_dso_addr(&t, names[i]);
	assert_true(addr[0] != addr[1] && addr[1] != addr[2] && addr[0] != addr[2]);
	/* The same name again, even from another copy of the string, maps to the same address. */
	assert_int_equal(perf_task_dso_addr(&t, copy), addr[1]);
	assert_int_equal(t.n, 3);
	assert_true(addr[0] >= PERF_TASK_DSO_START);
	assert_true(addr[2] < PERF_TASK_DSO_START + perf_task_dso_map_len(&t));

	fd = mkstemp(path);
	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	assert_non_null(f);
	assert_int_equal(perf_task_dso_write(&t, f), 0);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(elf_file_open(path, &ef), 0);
	for (int i = 0; i < 3; i++) {
		/* perf maps an address to a file offset, then to a symbol (vaddr = offset here). */
		const struct elf_sym *s =
		    elf_file_lookup(ef, addr[i] - PERF_TASK_DSO_START + PERF_TASK_DSO_PGOFF);

		assert_non_null(s);
		assert_string_equal(s->name, names[i]);
	}
	elf_file_close(ef);
	unlink(path);
	perf_task_dso_free(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_addresses_and_symbols),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
