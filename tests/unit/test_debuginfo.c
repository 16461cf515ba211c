// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The debug-file search: build-id tree paths, .gnu_debuglink places and CRC, build-id checks,
 * and the order of the search, on a tiny program stripped at test time with binutils.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "debuginfo.h"
#include "elf_file.h"

static const uint8_t prog_id[] = {0xd9, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd};

static char dir[] = "/tmp/dial9-debuginfo-XXXXXX";

static void path_in(char *buf, size_t size, const char *name)
{
	snprintf(buf, size, "%s/%s", dir, name);
}

static int run(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd) == 0 ? 0 : -1;
}

/* bin/prog (stripped, .gnu_debuglink prog.debug), dbg/prog.debug, and other.debug of a build
 * with another build id. */
static int setup(void **state)
{
	(void)state;
	unsetenv("DEBUGINFOD_URLS");
	if (!mkdtemp(dir))
		return -1;
	return run("cd %s && mkdir bin dbg empty && "
		   "printf 'int dial9_fn(int x){return x+1;}\\nint main(int c,char**v){(void)v;"
		   "return dial9_fn(c);}\\n' > prog.c && "
		   "cc -O1 -g -o full -Wl,--build-id=0xd90123456789abcd prog.c && "
		   "cc -O1 -g -o other -Wl,--build-id=0xd90123456789ffff prog.c && "
		   "objcopy --only-keep-debug full dbg/prog.debug && "
		   "objcopy --only-keep-debug other other.debug && "
		   "strip --strip-all -o bin/prog full && "
		   "objcopy --add-gnu-debuglink=dbg/prog.debug bin/prog",
		   dir);
}

static int teardown(void **state)
{
	(void)state;
	return run("rm -rf %s", dir);
}

static void build_id_path(void **state)
{
	char buf[128];

	(void)state;
	assert_int_equal(
	    debuginfo_build_id_path("/usr/lib/debug", prog_id, sizeof(prog_id), buf, sizeof(buf)),
	    0);
	assert_string_equal(buf, "/usr/lib/debug/.build-id/d9/0123456789abcd.debug");
	assert_int_equal(debuginfo_build_id_path("/d", prog_id, 1, buf, sizeof(buf)), -EINVAL);
	assert_int_equal(
	    debuginfo_build_id_path("/usr/lib/debug", prog_id, sizeof(prog_id), buf, 20),
	    -ENAMETOOLONG);
}

static void debuglink_places(void **state)
{
	static const char *const want[] = {"/opt/app/bin/app.debug",
					   "/opt/app/bin/.debug/app.debug",
					   "/usr/lib/debug/opt/app/bin/app.debug"};
	char buf[128];

	(void)state;
	for (int i = 0; i < 3; i++) {
		assert_int_equal(debuginfo_link_path(i, "/opt/app/bin", "/usr/lib/debug",
						     "app.debug", buf, sizeof(buf)),
				 0);
		assert_string_equal(buf, want[i]);
	}
	assert_int_equal(
	    debuginfo_link_path(3, "/opt/app/bin", "/usr/lib/debug", "app.debug", buf, sizeof(buf)),
	    -ENOENT);
}

static void crc_of_file(void **state)
{
	char path[128];
	uint32_t crc = 0;
	FILE *f;

	(void)state;
	path_in(path, sizeof(path), "crc.txt");
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("123456789", f);
	fclose(f);
	/* The CRC-32 check value. */
	assert_int_equal(debuginfo_file_crc(path, &crc), 0);
	assert_int_equal(crc, 0xcbf43926u);
	path_in(path, sizeof(path), "missing");
	assert_int_equal(debuginfo_file_crc(path, &crc), -ENOENT);
}

/* The stripped binary's .gnu_debuglink names the debug file and carries its CRC; the debug
 * file carries the binary's build id, another build's does not. */
static void debuglink_and_build_id(void **state)
{
	char bin[128], dbg[128], other[128];
	struct elf_file *ef;
	const char *name;
	uint32_t crc, file_crc;

	(void)state;
	path_in(bin, sizeof(bin), "bin/prog");
	path_in(dbg, sizeof(dbg), "dbg/prog.debug");
	path_in(other, sizeof(other), "other.debug");
	assert_int_equal(elf_file_open(bin, &ef), 0);
	assert_false(elf_file_has_symtab(ef));
	assert_int_equal(elf_file_debuglink(ef, &name, &crc), 0);
	assert_string_equal(name, "prog.debug");
	assert_int_equal(debuginfo_file_crc(dbg, &file_crc), 0);
	assert_int_equal(crc, file_crc);
	elf_file_close(ef);
	assert_int_equal(debuginfo_check_build_id(dbg, prog_id, sizeof(prog_id)), 0);
	assert_int_equal(debuginfo_check_build_id(other, prog_id, sizeof(prog_id)), -EBADMSG);
}

/* Symbols taken from the debug file are placed by the binary's program headers. */
static void take_syms(void **state)
{
	char bin[128], dbg[128];
	struct elf_file *ef, *d;
	const struct elf_sym *syms;
	size_t n;
	uint64_t off = 0;
	bool found = false;

	(void)state;
	path_in(bin, sizeof(bin), "bin/prog");
	path_in(dbg, sizeof(dbg), "dbg/prog.debug");
	assert_int_equal(elf_file_open(bin, &ef), 0);
	assert_int_equal(elf_file_open(dbg, &d), 0);
	elf_file_take_syms(ef, d);
	elf_file_close(d);
	assert_true(elf_file_has_symtab(ef));
	syms = elf_file_syms(ef, &n);
	for (size_t i = 0; i < n; i++) {
		if (strcmp(syms[i].name, "dial9_fn"))
			continue;
		found = true;
		assert_ptr_equal(elf_file_lookup(ef, syms[i].addr), &syms[i]);
		assert_int_equal(elf_file_vaddr_to_offset(ef, syms[i].addr, &off), 0);
		assert_true(off > 0);
	}
	assert_true(found);
	elf_file_close(ef);
}

static int find(const char *debug_dir, const char *symbols, struct debuginfo *out)
{
	struct debuginfo_opts o = {.symbols = symbols, .debug_dir = debug_dir};
	char bin[128];
	struct elf_file *ef;
	int err;

	path_in(bin, sizeof(bin), "bin/prog");
	assert_int_equal(elf_file_open(bin, &ef), 0);
	err = debuginfo_find(ef, "", bin, &o, out);
	elf_file_close(ef);
	return err;
}

/* --symbols first; then the build-id tree; then the debuglink, CRC checked. */
static void search_order(void **state)
{
	char empty[128], tree[128], path[256], other[128];
	struct debuginfo di;

	(void)state;
	path_in(empty, sizeof(empty), "empty");
	path_in(other, sizeof(other), "other.debug");
	assert_int_equal(find(empty, NULL, &di), -ENOENT);

	/* Beside the binary, intact, then with one byte more (CRC mismatch). */
	assert_int_equal(run("cp %s/dbg/prog.debug %s/bin/", dir, dir), 0);
	assert_int_equal(find(empty, NULL, &di), 0);
	assert_int_equal(di.method, DEBUGINFO_DEBUGLINK);
	assert_int_equal(run("printf x >> %s/bin/prog.debug", dir), 0);
	assert_int_equal(find(empty, NULL, &di), -ENOENT);

	/* The build-id tree wins over the debuglink. */
	path_in(tree, sizeof(tree), "tree");
	assert_int_equal(run("mkdir -p %s/.build-id/d9 && cp %s/dbg/prog.debug "
			     "%s/.build-id/d9/0123456789abcd.debug && cp %s/dbg/prog.debug %s/bin/",
			     tree, dir, tree, dir, dir),
			 0);
	assert_int_equal(find(tree, NULL, &di), 0);
	assert_int_equal(di.method, DEBUGINFO_BUILD_ID_TREE);
	snprintf(path, sizeof(path), "%s/.build-id/d9/0123456789abcd.debug", tree);
	assert_string_equal(di.path, path);

	/* --symbols wins over both, and another build's file is refused, not skipped. */
	path_in(path, sizeof(path), "dbg");
	assert_int_equal(find(tree, path, &di), 0);
	assert_int_equal(di.method, DEBUGINFO_OPTION);
	assert_int_equal(find(tree, other, &di), -EBADMSG);
	assert_int_equal(find(tree, empty, &di), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(build_id_path), cmocka_unit_test(debuglink_places),
	    cmocka_unit_test(crc_of_file),   cmocka_unit_test(debuglink_and_build_id),
	    cmocka_unit_test(take_syms),     cmocka_unit_test(search_order),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
