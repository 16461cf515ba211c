// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The fixtures are compiled at test time from a tiny C program, so no binaries are committed
 * and the expected addresses come from nm rather than being hard-coded.
 */
#include <errno.h>
#include <elf.h>
#include <fcntl.h>
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

#include "elf_file.h"
#include "proc_maps.h"

static const char prog_src[] =
    "__attribute__((noinline)) int dial9_known_fn(int x) { return x * 3 + 1; }\n"
    /* Aliases that must lose: more leading underscores, LOCAL binding. */
    "extern int __dial9_weak_alias(int) __attribute__((weak, alias(\"dial9_known_fn\")));\n"
    "static int dial9_a_local_alias(int) __attribute__((used, alias(\"dial9_known_fn\")));\n"
    "static __attribute__((noinline, used)) int dial9_local_fn(int x) { return x - 7; }\n"
    /* No .size: st_size is 0, as in much hand-written assembly. */
    "__asm__(\".text\\n.globl dial9_nosize\\n.type dial9_nosize,@function\\n"
    "dial9_nosize:\\n nop\\n nop\\n nop\\n ret\\n\");\n"
    "int main(int argc, char **argv) { (void)argv;"
    " return dial9_known_fn(argc) + dial9_local_fn(argc); }\n";

static const uint8_t fixture_build_id[] = {0x01, 0x23, 0x45, 0x67, 0x89,
					   0xab, 0xcd, 0xef, 0x00, 0x11};

static char dir[] = "/tmp/dial9-elf-XXXXXX";
static char pie[64], exe[64], stripped[64];

static int build(const char *out, const char *flags)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd),
		 "cc -O1 -o %s %s -Wl,--build-id=0x0123456789abcdef0011 %s/prog.c", out, flags,
		 dir);
	return system(cmd) == 0 ? 0 : -1;
}

static int setup(void **state)
{
	char src[64];
	FILE *f;

	(void)state;
	if (!mkdtemp(dir))
		return -1;
	snprintf(src, sizeof(src), "%s/prog.c", dir);
	f = fopen(src, "w");
	if (!f || fputs(prog_src, f) < 0 || fclose(f) != 0)
		return -1;
	snprintf(pie, sizeof(pie), "%s/pie", dir);
	snprintf(exe, sizeof(exe), "%s/exe", dir);
	snprintf(stripped, sizeof(stripped), "%s/stripped", dir);
	if (build(pie, "-fPIE -pie") || build(exe, "-fno-pie -no-pie") ||
	    build(stripped, "-fPIE -pie -rdynamic -s"))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* Address and size of name according to nm. */
static void nm_sym(const char *file, bool dynamic, const char *name, uint64_t *addr, uint64_t *size)
{
	char cmd[256], line[512], sname[256], type[8];
	unsigned long long a, s;
	bool found = false;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "nm -P %s %s", dynamic ? "-D" : "", file);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (fgets(line, sizeof(line), p)) {
		s = 0;
		if (sscanf(line, "%255s %7s %llx %llx", sname, type, &a, &s) >= 3 &&
		    strcmp(sname, name) == 0) {
			*addr = a;
			*size = s;
			found = true;
		}
	}
	pclose(p);
	if (!found)
		fail_msg("nm did not list %s in %s", name, file);
}

static const struct elf_sym *find_sym(const struct elf_sym *syms, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(syms[i].name, name) == 0)
			return &syms[i];
	return NULL;
}

static void check_known_fn(const char *file, uint16_t type, bool has_symtab)
{
	const struct elf_sym *syms, *s, *alias, *aliases;
	uint64_t addr, size, off, vaddr;
	struct elf_file *ef;
	const uint8_t *id;
	size_t n, naliases;

	assert_int_equal(elf_file_open(file, &ef), 0);
	assert_int_equal(elf_file_type(ef), type);
	assert_int_equal(elf_file_has_symtab(ef), has_symtab);
	assert_int_equal(elf_file_build_id(ef, &id), sizeof(fixture_build_id));
	assert_memory_equal(id, fixture_build_id, sizeof(fixture_build_id));

	syms = elf_file_syms(ef, &n);
	for (size_t i = 1; i < n; i++)
		assert_true(syms[i - 1].addr < syms[i].addr);

	nm_sym(file, !has_symtab, "dial9_known_fn", &addr, &size);
	/* Of the names at one address the preferred one is kept, the others set aside. */
	s = find_sym(syms, n, "dial9_known_fn");
	assert_non_null(s);
	assert_int_equal(s->addr, addr);
	assert_int_equal(s->size, size);
	assert_null(find_sym(syms, n, "__dial9_weak_alias"));
	assert_null(find_sym(syms, n, "dial9_a_local_alias"));
	aliases = elf_file_aliases(ef, &naliases);
	alias = find_sym(aliases, naliases, "__dial9_weak_alias");
	assert_non_null(alias);
	assert_int_equal(alias->addr, addr);
	alias = find_sym(aliases, naliases, "dial9_a_local_alias");
	/* .dynsym has no LOCAL symbols. */
	if (has_symtab) {
		assert_non_null(alias);
		assert_int_equal(alias->addr, addr);
	} else {
		assert_null(alias);
	}
	/* The aliases at the function's address: the weak one, and the local one from .symtab. */
	alias = elf_file_aliases_at(ef, addr, &naliases);
	assert_int_equal(naliases, has_symtab ? 2 : 1);
	for (size_t i = 0; i < naliases; i++)
		assert_int_equal(alias[i].addr, addr);
	elf_file_aliases_at(ef, addr + 1, &naliases);
	assert_int_equal(naliases, 0);

	assert_ptr_equal(elf_file_lookup(ef, addr), s);
	assert_ptr_equal(elf_file_lookup(ef, addr + size - 1), s);
	assert_true(elf_file_lookup(ef, addr + size) != s);
	assert_null(elf_file_lookup(ef, 0));
	assert_null(elf_file_lookup(ef, UINT64_MAX));

	assert_int_equal(elf_file_vaddr_to_offset(ef, addr, &off), 0);
	assert_int_equal(elf_file_offset_to_vaddr(ef, off, &vaddr), 0);
	assert_int_equal(vaddr, addr);
	assert_int_equal(elf_file_vaddr_to_offset(ef, UINT64_MAX, &off), -ENOENT);

	if (has_symtab) {
		nm_sym(file, false, "dial9_local_fn", &addr, &size);
		s = elf_file_lookup(ef, addr);
		assert_non_null(s);
		assert_string_equal(s->name, "dial9_local_fn");

		nm_sym(file, false, "dial9_nosize", &addr, &size);
		s = elf_file_lookup(ef, addr + 2);
		assert_non_null(s);
		assert_string_equal(s->name, "dial9_nosize");
		assert_int_equal(s->size, 0);
	} else {
		syms = elf_file_syms(ef, &n);
		assert_null(find_sym(syms, n, "dial9_local_fn"));
	}
	elf_file_close(ef);
}

static void test_pie(void **state)
{
	(void)state;
	check_known_fn(pie, ET_DYN, true);
}

static void test_exec(void **state)
{
	(void)state;
	check_known_fn(exe, ET_EXEC, true);
}

static void test_stripped_uses_dynsym(void **state)
{
	(void)state;
	check_known_fn(stripped, ET_DYN, false);
}

void dial9_test_elf_marker(void);
__attribute__((noinline)) void dial9_test_elf_marker(void)
{
	__asm__ volatile("");
}

/* The running test binary: runtime address -> file offset -> vaddr -> symbol, and the file
 * bytes at that offset are the code being executed. */
static void test_self_exe(void **state)
{
	uint64_t addr = (uint64_t)(uintptr_t)&dial9_test_elf_marker, off, vaddr, off2;
	const struct proc_map *m;
	const struct elf_sym *s;
	struct proc_map *maps;
	struct elf_file *ef;
	uint8_t code[8];
	size_t n;
	int fd;

	(void)state;
	assert_int_equal(elf_file_open("/proc/self/exe", &ef), 0);
	assert_int_equal(proc_maps_read(getpid(), &maps, &n), 0);
	m = proc_maps_find(maps, n, addr);
	assert_non_null(m);
	off = addr - m->start + m->pgoff;
	assert_int_equal(elf_file_offset_to_vaddr(ef, off, &vaddr), 0);
	s = elf_file_lookup(ef, vaddr);
	assert_non_null(s);
	assert_string_equal(s->name, "dial9_test_elf_marker");
	assert_int_equal(s->addr, vaddr);
	assert_int_equal(elf_file_vaddr_to_offset(ef, vaddr, &off2), 0);
	assert_int_equal(off2, off);

	fd = open("/proc/self/exe", O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, code, sizeof(code), (off_t)off), sizeof(code));
	assert_memory_equal(code, (const void *)(uintptr_t)addr, sizeof(code));
	close(fd);

	proc_maps_free(maps, n);
	elf_file_close(ef);
}

static uint8_t *slurp(const char *path, size_t *len)
{
	struct stat st;
	uint8_t *buf;
	int fd;

	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	buf = malloc((size_t)st.st_size);
	assert_non_null(buf);
	assert_int_equal(read(fd, buf, (size_t)st.st_size), st.st_size);
	close(fd);
	*len = (size_t)st.st_size;
	return buf;
}

static void write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

static void test_not_elf(void **state)
{
	static const char text[] = "#!/bin/sh\necho not an elf\n";
	uint8_t noise[4096];
	struct elf_file *ef = NULL;
	char path[128];

	(void)state;
	snprintf(path, sizeof(path), "%s/garbage", dir);
	write_file(path, text, sizeof(text));
	assert_int_equal(elf_file_open(path, &ef), -ENOEXEC);
	write_file(path, "", 0);
	assert_int_equal(elf_file_open(path, &ef), -ENOEXEC);
	write_file(path,
		   "\x7f"
		   "ELF",
		   4);
	assert_int_equal(elf_file_open(path, &ef), -ENOEXEC);
	srand(1);
	for (size_t i = 0; i < sizeof(noise); i++)
		noise[i] = (uint8_t)rand();
	memcpy(noise,
	       "\x7f"
	       "ELF\x02\x01\x01",
	       7);
	write_file(path, noise, sizeof(noise));
	assert_int_equal(elf_file_open(path, &ef), -ENOEXEC);
	assert_int_equal(elf_file_open_mem(noise, sizeof(noise), &ef), -ENOEXEC);
	assert_int_equal(elf_file_open_mem(noise, 0, &ef), -ENOEXEC);

	assert_int_equal(elf_file_open(dir, &ef), -EISDIR);
	snprintf(path, sizeof(path), "%s/missing", dir);
	assert_int_equal(elf_file_open(path, &ef), -ENOENT);
	/* An object file is ELF but not something a process maps. */
	snprintf(path, sizeof(path), "cc -c -o %s/prog.o %s/prog.c", dir, dir);
	assert_int_equal(system(path), 0);
	snprintf(path, sizeof(path), "%s/prog.o", dir);
	assert_int_equal(elf_file_open(path, &ef), -ENOEXEC);
	assert_null(ef);
}

static void test_truncated(void **state)
{
	struct elf_file *ef = NULL;
	char path[64];
	uint8_t *img;
	size_t len;

	(void)state;
	img = slurp(pie, &len);
	size_t cuts[] = {1, 4, 16, 52, 63, 64, 65, 100, 1000, len / 2, len - 64, len - 1};
	snprintf(path, sizeof(path), "%s/truncated", dir);
	for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
		write_file(path, img, cuts[i]);
		if (elf_file_open(path, &ef) != -ENOEXEC)
			fail_msg("truncated to %zu bytes: not -ENOEXEC", cuts[i]);
		if (elf_file_open_mem(img, cuts[i], &ef) != -ENOEXEC)
			fail_msg("truncated to %zu bytes in memory: not -ENOEXEC", cuts[i]);
	}
	free(img);
}

/* Whatever parses must also be safe to query. */
static void exercise(const struct elf_file *ef)
{
	const struct elf_sym *syms;
	const struct elf_load *loads;
	const uint8_t *id;
	uint64_t x;
	size_t n;

	syms = elf_file_syms(ef, &n);
	for (size_t i = 0; i < n; i++) {
		const struct elf_sym *s = elf_file_lookup(ef, syms[i].addr);

		assert_true(!s || s->addr <= syms[i].addr);
		(void)strlen(syms[i].name);
		if (elf_file_vaddr_to_offset(ef, syms[i].addr, &x) == 0)
			elf_file_offset_to_vaddr(ef, x, &x);
	}
	syms = elf_file_aliases(ef, &n);
	for (size_t i = 0; i < n; i++)
		(void)strlen(syms[i].name);
	loads = elf_file_loads(ef, &n);
	for (size_t i = 0; i < n; i++)
		elf_file_lookup(ef, loads[i].vaddr + loads[i].filesz / 2);
	assert_true(elf_file_build_id(ef, &id) <= ELF_BUILD_ID_MAX);
}

/*
 * Random byte corruption, aimed mostly at the headers and the section header table at the end
 * where parsing decisions are made. Not a fuzzer, but it runs on every `make unit`.
 */
static void test_mutations(void **state)
{
	uint8_t *img, *mut;
	struct elf_file *ef;
	uint32_t rng = 12345;
	char path[64];
	size_t len;
	int err;

	(void)state;
	img = slurp(pie, &len);
	mut = malloc(len);
	assert_non_null(mut);
	snprintf(path, sizeof(path), "%s/mutated", dir);
	for (int iter = 0; iter < 3000; iter++) {
		memcpy(mut, img, len);
		int nflips = 1 + (int)((rng = rng * 1103515245 + 12345) >> 16) % 8;
		for (int k = 0; k < nflips; k++) {
			rng = rng * 1103515245 + 12345;
			uint32_t r = rng >> 8;
			size_t pos;

			switch (r % 3) {
			case 0:
				pos = (r / 3) % 512;
				break;
			case 1:
				pos = len - 1 - (r / 3) % 2048;
				break;
			default:
				pos = (r / 3) % len;
			}
			rng = rng * 1103515245 + 12345;
			mut[pos] = (uint8_t)(rng >> 16);
		}
		if (iter % 10 == 0) {
			write_file(path, mut, len);
			err = elf_file_open(path, &ef);
		} else {
			err = elf_file_open_mem(mut, len, &ef);
		}
		if (err == 0) {
			exercise(ef);
			elf_file_close(ef);
		} else if (err != -ENOEXEC) {
			fail_msg("iteration %d: unexpected error %d", iter, err);
		}
	}
	free(mut);
	free(img);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pie),
	    cmocka_unit_test(test_exec),
	    cmocka_unit_test(test_stripped_uses_dynsym),
	    cmocka_unit_test(test_self_exe),
	    cmocka_unit_test(test_not_elf),
	    cmocka_unit_test(test_truncated),
	    cmocka_unit_test(test_mutations),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
