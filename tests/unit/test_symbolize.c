// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <cmocka.h>

#include "symbolize.h"

int dial9_test_sym_target(int x);
__attribute__((noinline)) int dial9_test_sym_target(int x)
{
	__asm__ volatile("" : "+r"(x));
	return x * 7 + 3;
}

/* A Rust legacy-mangled name, to see the demangled form come out. */
int dial9_rust_named(int x) __asm__("_ZN5dial94test6target17h0123456789abcdefE");
__attribute__((noinline)) int dial9_rust_named(int x)
{
	__asm__ volatile("" : "+r"(x));
	return x + 11;
}

/* Two Rust names for one copy of code, as the compiler leaves a generic function folded for two
 * types: the table keeps one name, the other is an alias. */
int dial9_folded(int x) __asm__("_ZN5dial916Folded$LT$u8$GT$4poll17h0123456789abcdefE");
__attribute__((noinline)) int dial9_folded(int x)
{
	__asm__ volatile("" : "+r"(x));
	return x + 13;
}
extern int dial9_folded_too(int x) __asm__("_ZN5dial917Folded$LT$u16$GT$4poll17h0123456789abcdefE")
    __attribute__((alias("_ZN5dial916Folded$LT$u8$GT$4poll17h0123456789abcdefE")));

static uint64_t addr_of(const void *p)
{
	return (uint64_t)(uintptr_t)p;
}

static void self_exe(char *buf, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", buf, len - 1);

	assert_true(n > 0);
	buf[n] = '\0';
}

static void test_own_function(void **state)
{
	struct symbolizer *s = symbolizer_new(getpid());
	struct sym_info si, si2;
	char exe[PATH_MAX];

	(void)state;
	assert_non_null(s);
	self_exe(exe, sizeof(exe));

	assert_int_equal(symbolizer_resolve(s, addr_of(dial9_test_sym_target), &si), 0);
	assert_string_equal(si.name, "dial9_test_sym_target");
	assert_int_equal(si.sym_offset, 0);
	assert_string_equal(si.module, exe);

	assert_int_equal(symbolizer_resolve(s, addr_of(dial9_test_sym_target) + 2, &si2), 0);
	assert_int_equal(si2.sym_offset, 2);
	assert_int_equal(si2.file_offset, si.file_offset + 2);
	/* Demangled once, then served from the cache. */
	assert_ptr_equal(si2.name, si.name);

	assert_int_equal(symbolizer_resolve(s, addr_of(dial9_rust_named) + 1, &si), 0);
	assert_string_equal(si.name, "dial9::test::target");
	assert_int_equal(si.sym_offset, 1);

	assert_non_null(symbolizer_module_elf(s, addr_of(dial9_test_sym_target)));
	symbolizer_free(s);
}

static void test_folded_names(void **state)
{
	struct symbolizer *s = symbolizer_new(getpid());
	uint64_t addr = addr_of(dial9_folded) + 1;
	struct sym_info si;

	(void)state;
	assert_non_null(s);
	assert_int_equal(symbolizer_resolve(s, addr, &si), 0);
	assert_true(si.merged);
	/* Whichever name the table kept, each is found by the type that only it has, and only as
	 * a whole type: "u1" is not "u16". */
	assert_string_equal(symbolizer_name_with(s, addr, "u8", NULL), "dial9::Folded<u8>::poll");
	assert_string_equal(symbolizer_name_with(s, addr, "u16", NULL), "dial9::Folded<u16>::poll");
	assert_null(symbolizer_name_with(s, addr, "u32", NULL));
	assert_null(symbolizer_name_with(s, addr, "u1", NULL));
	assert_null(symbolizer_name_with(s, addr, "Folded", NULL));
	assert_int_equal(symbolizer_resolve(s, addr_of(dial9_test_sym_target), &si), 0);
	assert_false(si.merged);
	symbolizer_free(s);
}

static void test_libc_function(void **state)
{
	struct symbolizer *s = symbolizer_new(getpid());
	struct sym_info si;
	void *libc, *fn;

	(void)state;
	/* Ask libc itself: in a non-PIE build &getpid could be the executable's PLT stub. */
	libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
	assert_non_null(libc);
	fn = dlsym(libc, "getpid");
	assert_non_null(fn);

	assert_int_equal(symbolizer_resolve(s, addr_of(fn), &si), 0);
	assert_non_null(strstr(si.name, "getpid"));
	assert_int_equal(si.sym_offset, 0);
	assert_non_null(strstr(si.module, "libc"));
	dlclose(libc);
	symbolizer_free(s);
}

static void test_vdso(void **state)
{
	uint64_t base = getauxval(AT_SYSINFO_EHDR), vaddr = 0, off;
	struct symbolizer *s = symbolizer_new(getpid());
	const struct elf_sym *syms;
	const struct proc_map *maps, *m;
	struct elf_file *ef;
	struct sym_info si;
	size_t n;

	(void)state;
	if (!base) {
		symbolizer_free(s); /* no vDSO (under valgrind, say) */
		skip();
	}
	maps = symbolizer_maps(s, &n);
	m = proc_maps_find(maps, n, base);
	assert_non_null(m);
	assert_int_equal(elf_file_open_mem((void *)(uintptr_t)base, m->end - m->start, &ef), 0);
	syms = elf_file_syms(ef, &n);
	for (size_t i = 0; i < n; i++)
		if (strstr(syms[i].name, "clock_gettime"))
			vaddr = syms[i].addr;
	assert_true(vaddr != 0);
	assert_int_equal(elf_file_vaddr_to_offset(ef, vaddr, &off), 0);
	elf_file_close(ef);

	assert_int_equal(symbolizer_resolve(s, base + off + 1, &si), 0);
	assert_non_null(strstr(si.name, "clock_gettime"));
	assert_int_equal(si.sym_offset, 1);
	assert_string_equal(si.module, "[vdso]");
	symbolizer_free(s);
}

/* Re-reads the maps, then addr must be outside every mapping (anonymous memory, or nothing). */
static void expect_unmapped_after_refresh(struct symbolizer *s, uint64_t addr)
{
	struct sym_info si;

	assert_int_equal(symbolizer_refresh(s), 0);
	assert_int_equal(symbolizer_resolve(s, addr, &si), -ENOENT);
	assert_null(si.name);
	assert_null(si.module);
}

static void test_unknown(void **state)
{
	struct symbolizer *s = symbolizer_new(getpid());
	struct sym_info si;
	void *anon;

	(void)state;
	assert_int_equal(symbolizer_resolve(s, 0, &si), -ENOENT);
	assert_null(si.name);
	assert_null(si.module);
	assert_int_equal(symbolizer_resolve(s, UINT64_MAX - 4096, &si), -ENOENT);

	anon = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(anon != MAP_FAILED);
	/* Force the new mapping in; the rate limit would otherwise hide it for a while. */
	expect_unmapped_after_refresh(s, addr_of(anon) + 8);
	munmap(anon, 4096);
	symbolizer_free(s);

	/* A process that does not exist: an error, not a crash. */
	s = symbolizer_new(INT_MAX);
	assert_non_null(s);
	assert_true(symbolizer_resolve(s, addr_of(dial9_test_sym_target), &si) < 0);
	symbolizer_free(s);
}

static void sleep_ms(long ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* Compiles one C function into dir/NAME.so (the source is removed); its path goes to so. */
static void build_lib(const char *dir, const char *name, const char *src, char *so, size_t len)
{
	char path[128], cmd[384];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s.c", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(src, f);
	fclose(f);
	snprintf(so, len, "%s/%s.so", dir, name);
	snprintf(cmd, sizeof(cmd), "cc -O1 -shared -fPIC -o %s %s", so, path);
	assert_int_equal(system(cmd), 0);
	unlink(path);
}

/*
 * A library loaded after the maps were read is picked up by the rate-limited re-read, and is
 * resolved even though its file was deleted meanwhile (as after a redeploy).
 */
static void test_late_deleted_library(void **state)
{
	char dir[] = "/tmp/dial9-sym-XXXXXX", path[128];
	struct symbolizer *s = symbolizer_new(getpid());
	struct sym_info si;
	void *lib, *fn;
	int err;

	(void)state;
	assert_non_null(mkdtemp(dir));
	build_lib(dir, "late",
		  "__attribute__((noinline)) int dial9_late_fn(int x) { return x * 5 + 2; }\n",
		  path, sizeof(path));

	/* Read the maps before the library exists. */
	assert_int_equal(symbolizer_resolve(s, addr_of(dial9_test_sym_target), &si), 0);

	lib = dlopen(path, RTLD_NOW);
	assert_non_null(lib);
	fn = dlsym(lib, "dial9_late_fn");
	assert_non_null(fn);
	unlink(path);
	rmdir(dir);

	sleep_ms(SYMBOLIZER_REFRESH_MS + 20);
	err = symbolizer_resolve(s, addr_of(fn), &si);
	assert_non_null(si.module);
	assert_string_equal(si.module, path);
	if (err == -ENOENT && geteuid() != 0) {
		/* map_files/ needs CAP_SYS_ADMIN: deleted files cannot be opened without it. */
		dlclose(lib);
		symbolizer_free(s);
		skip();
	}
	assert_int_equal(err, 0);
	assert_string_equal(si.name, "dial9_late_fn");
	dlclose(lib);
	symbolizer_free(s);
}

/*
 * Repeated addresses come from the cache, and the cache follows the maps: once a library is
 * unloaded and its addresses reused, a re-read must not give its old names back.
 */
static void test_cache_follows_maps(void **state)
{
	char dir[] = "/tmp/dial9-symc-XXXXXX", path[128];
	struct symbolizer *s = symbolizer_new(getpid());
	struct sym_info si, again;
	uint64_t page;
	void *lib, *fn, *anon;

	(void)state;
	assert_int_equal(symbolizer_resolve(s, 0, &si), -ENOENT); /* an empty slot is no hit */
	assert_null(si.module);
	assert_non_null(mkdtemp(dir));
	build_lib(dir, "gone",
		  "__attribute__((noinline)) int dial9_gone_fn(int x) { return x * 3 + 1; }\n",
		  path, sizeof(path));
	lib = dlopen(path, RTLD_NOW);
	assert_non_null(lib);
	fn = dlsym(lib, "dial9_gone_fn");
	assert_non_null(fn);

	assert_int_equal(symbolizer_refresh(s), 0);
	assert_int_equal(symbolizer_resolve(s, addr_of(fn) + 1, &si), 0);
	assert_string_equal(si.name, "dial9_gone_fn");
	assert_int_equal(symbolizer_resolve(s, addr_of(fn) + 1, &again), 0);
	assert_ptr_equal(again.name, si.name);
	assert_ptr_equal(again.module, si.module);
	assert_int_equal(again.sym_offset, 1);
	assert_int_equal(again.file_offset, si.file_offset);

	/* Unloaded, and something else mapped where its code was. */
	assert_int_equal(dlclose(lib), 0);
	unlink(path);
	rmdir(dir);
	page = addr_of(fn) & ~(uint64_t)4095;
	anon = mmap((void *)(uintptr_t)page, 4096, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (anon == MAP_FAILED) {
		symbolizer_free(s);
		skip(); /* still mapped (another user of the library), or taken */
	}
	expect_unmapped_after_refresh(s, addr_of(fn) + 1);
	munmap(anon, 4096);
	symbolizer_free(s);
}

static void test_modules(void **state)
{
	struct symbolizer *s = symbolizer_new(getpid());
	bool saw_exe = false, saw_libc = false;
	struct sym_module mod;
	char exe[PATH_MAX];
	size_t iter = 0;

	(void)state;
	self_exe(exe, sizeof(exe));
	while (symbolizer_next_module(s, &iter, &mod) == 0) {
		assert_non_null(mod.path);
		if (strcmp(mod.path, exe) == 0) {
			saw_exe = true;
			assert_non_null(mod.elf);
			/* Debian's gcc always passes --build-id. */
			assert_int_equal(mod.build_id_len, 20);
			assert_non_null(mod.build_id);
		}
		if (strstr(mod.path, "/libc.so")) {
			saw_libc = true;
			assert_non_null(mod.elf);
			assert_true(mod.build_id_len > 0);
		}
		if (mod.path[0] == '[' && strcmp(mod.path, "[vdso]") != 0)
			assert_null(mod.elf);
	}
	assert_true(saw_exe);
	assert_true(saw_libc);
	assert_int_equal(symbolizer_next_module(s, &iter, &mod), -ENOENT);
	symbolizer_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_own_function),  cmocka_unit_test(test_folded_names),
	    cmocka_unit_test(test_libc_function), cmocka_unit_test(test_vdso),
	    cmocka_unit_test(test_unknown),	  cmocka_unit_test(test_late_deleted_library),
	    cmocka_unit_test(test_modules),	  cmocka_unit_test(test_cache_follows_maps),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
