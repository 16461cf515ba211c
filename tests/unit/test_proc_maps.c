// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "proc_maps.h"

static void test_parse_file(void **state)
{
	struct proc_map m;

	(void)state;
	assert_int_equal(proc_maps_parse_line("7f1c2a021000-7f1c2a1b6000 r-xp 00028000 fd:01 "
					      "1234567                    "
					      "/usr/lib/x86_64-linux-gnu/libc.so.6\n",
					      &m),
			 0);
	assert_int_equal(m.start, 0x7f1c2a021000ull);
	assert_int_equal(m.end, 0x7f1c2a1b6000ull);
	assert_int_equal(m.pgoff, 0x28000);
	assert_int_equal(m.dev_major, 0xfd);
	assert_int_equal(m.dev_minor, 1);
	assert_int_equal(m.inode, 1234567);
	assert_string_equal(m.perms, "r-xp");
	assert_string_equal(m.path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
	assert_false(m.deleted);
	proc_map_clear(&m);
	assert_null(m.path);
}

static void test_parse_anon(void **state)
{
	struct proc_map m;

	(void)state;
	assert_int_equal(proc_maps_parse_line("7ffd0000-7ffd1000 rw-p 00000000 00:00 0\n", &m), 0);
	assert_null(m.path);
	assert_false(m.deleted);
	assert_false(proc_map_is_file(&m));
	/* Trailing padding with no name is still anonymous. */
	assert_int_equal(proc_maps_parse_line("7ffd0000-7ffd1000 rw-p 00000000 00:00 0    ", &m),
			 0);
	assert_null(m.path);
}

static void test_parse_pseudo(void **state)
{
	struct proc_map m;

	(void)state;
	assert_int_equal(proc_maps_parse_line("7ffc12345000-7ffc12347000 r-xp 00000000 00:00 0"
					      "                          [vdso]",
					      &m),
			 0);
	assert_string_equal(m.path, "[vdso]");
	assert_false(proc_map_is_file(&m));
	proc_map_clear(&m);
	assert_int_equal(
	    proc_maps_parse_line("ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0"
				 "                  [vsyscall]\n",
				 &m),
	    0);
	assert_string_equal(m.perms, "--xp");
	assert_int_equal(m.end, 0xffffffffff601000ull);
	proc_map_clear(&m);
}

static void test_parse_spaces_and_deleted(void **state)
{
	struct proc_map m;

	(void)state;
	assert_int_equal(proc_maps_parse_line("1000-2000 r--s 00001000 08:02 42 "
					      "/opt/my app/lib with  spaces.so\n",
					      &m),
			 0);
	assert_string_equal(m.path, "/opt/my app/lib with  spaces.so");
	assert_string_equal(m.perms, "r--s");
	assert_false(m.deleted);
	proc_map_clear(&m);

	assert_int_equal(proc_maps_parse_line("1000-2000 r-xp 00000000 08:02 42 "
					      "/srv/my app/bin (deleted)\n",
					      &m),
			 0);
	assert_string_equal(m.path, "/srv/my app/bin");
	assert_true(m.deleted);
	assert_true(proc_map_is_file(&m));
	proc_map_clear(&m);

	assert_int_equal(proc_maps_parse_line("1000-2000 rw-s 00000000 00:01 7 "
					      "/memfd:jit (deleted)",
					      &m),
			 0);
	assert_string_equal(m.path, "/memfd:jit");
	assert_true(m.deleted);
	proc_map_clear(&m);
}

static void test_parse_malformed(void **state)
{
	static const char *const bad[] = {
	    "",
	    "\n",
	    "garbage",
	    "1000",
	    "1000-",
	    "1000-2000",
	    "1000-2000 ",
	    "1000-2000 r-xp",
	    "1000-2000 r-xp 0",
	    "1000-2000 r-xp 0 08:02",
	    "1000-2000 r-xp 0 08:02 ",
	    "1000-2000 r-xp 0 0802 1 /x",
	    "1000-2000 rwxq 0 08:02 1 /x",
	    "1000-2000 r-x 0 08:02 1 /x",
	    "2000-1000 r-xp 0 08:02 1 /x",	     /* end before start */
	    "-1000-2000 r-xp 0 08:02 1 /x",	     /* sign */
	    "0x1000-0x2000 r-xp 0 08:02 1 /x",	     /* prefix */
	    " 1000-2000 r-xp 0 08:02 1 /x",	     /* leading blank */
	    "1000-2000 r-xp 0 08:02 1a /x",	     /* hex inode */
	    "1000-2000 r-xp 0 108:02:03 1 /x",	     /* extra colon */
	    "1000-2000 r-xp 0 100000000:02 1 /x",    /* major overflows 32 bits */
	    "10000000000000000-2 r-xp 0 08:02 1 /x", /* overflows 64 bits */
	    "1000-2000 r-xp 0 08:02 99999999999999999999 /x",
	    "1000-2000 r-xp 0 08:02 1\n/x", /* embedded newline */
	    "1000-2000 r-xp 0 08:02 1 /x\nmore",
	    "1000-2000  r-xp 0 08:02 1 /x",
	};
	struct proc_map m;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&m, 0xa5, sizeof(m));
		if (proc_maps_parse_line(bad[i], &m) != -EINVAL)
			fail_msg("accepted malformed line \"%s\"", bad[i]);
	}
	assert_int_equal(proc_maps_parse_line(NULL, &m), -EINVAL);
}

/* Every prefix of a valid line, and every single-byte corruption of it, parses or fails cleanly
 * (run under a sanitizer to see the difference). */
static void test_parse_mutations(void **state)
{
	static const char line[] = "55d0c6a00000-55d0c6a22000 r-xp 00002000 fe:00 247134     "
				   "/usr/bin/cat (deleted)\n";
	char buf[sizeof(line)];
	struct proc_map m;

	(void)state;
	for (size_t len = 0; len < sizeof(line); len++) {
		memcpy(buf, line, len);
		buf[len] = '\0';
		if (proc_maps_parse_line(buf, &m) == 0)
			proc_map_clear(&m);
	}
	for (size_t i = 0; i + 1 < sizeof(line); i++) {
		for (int c = 1; c < 256; c += 7) {
			memcpy(buf, line, sizeof(line));
			buf[i] = (char)c;
			if (proc_maps_parse_line(buf, &m) == 0)
				proc_map_clear(&m);
		}
	}
}

void dial9_test_maps_marker(void);
__attribute__((noinline)) void dial9_test_maps_marker(void)
{
	__asm__ volatile("");
}

static void test_read_self(void **state)
{
	uint64_t addr = (uint64_t)(uintptr_t)&dial9_test_maps_marker;
	const struct proc_map *m;
	char exe[PATH_MAX];
	struct proc_map *maps;
	struct stat st, fst;
	ssize_t len;
	size_t n;
	int fd;

	(void)state;
	len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	assert_true(len > 0);
	exe[len] = '\0';
	assert_int_equal(stat(exe, &st), 0);

	assert_int_equal(proc_maps_read(getpid(), &maps, &n), 0);
	assert_true(n > 3);
	for (size_t i = 1; i < n; i++)
		assert_true(maps[i - 1].start < maps[i].start);

	m = proc_maps_find(maps, n, addr);
	assert_non_null(m);
	assert_string_equal(m->path, exe);
	assert_int_equal(m->perms[2], 'x');
	assert_int_equal(m->inode, st.st_ino);
	assert_null(proc_maps_find(maps, n, 0));

	fd = proc_open_mapped_file(getpid(), m);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &fst), 0);
	assert_int_equal(fst.st_ino, st.st_ino);
	close(fd);

	/* The root/ fallback, used when map_files/ is not permitted: force it with bounds that
	 * name no mapping. */
	struct proc_map fake = *m;
	fake.start = 1;
	fake.end = 2;
	fd = proc_open_mapped_file(getpid(), &fake);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &fst), 0);
	assert_int_equal(fst.st_ino, st.st_ino);
	close(fd);
	/* A deleted file's path may name another file by now: no fallback. */
	fake.deleted = true;
	assert_int_equal(proc_open_mapped_file(getpid(), &fake), -ENOENT);

	proc_maps_free(maps, n);
}

/* A mapped file that was unlinked since (a redeployed binary) is still opened by inode. */
static void test_open_deleted(void **state)
{
	char path[] = "/tmp/dial9 maps-XXXXXX";
	const struct proc_map *m;
	struct proc_map *maps;
	struct stat st, fst;
	size_t n;
	void *p;
	int fd;

	(void)state;
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 8192), 0);
	assert_int_equal(fstat(fd, &st), 0);
	p = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 4096);
	assert_true(p != MAP_FAILED);
	close(fd);
	assert_int_equal(unlink(path), 0);

	assert_int_equal(proc_maps_read(getpid(), &maps, &n), 0);
	m = proc_maps_find(maps, n, (uint64_t)(uintptr_t)p);
	assert_non_null(m);
	assert_string_equal(m->path, path);
	assert_true(m->deleted);
	assert_int_equal(m->pgoff, 4096);
	assert_int_equal(m->inode, st.st_ino);

	fd = proc_open_mapped_file(getpid(), m);
	if (fd == -EPERM || fd == -EACCES) {
		/* map_files/ needs CAP_SYS_ADMIN; without it deleted files are out of reach. */
		proc_maps_free(maps, n);
		munmap(p, 8192);
		skip();
	}
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &fst), 0);
	assert_int_equal(fst.st_ino, st.st_ino);
	close(fd);
	proc_maps_free(maps, n);
	munmap(p, 8192);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse_file),	    cmocka_unit_test(test_parse_anon),
	    cmocka_unit_test(test_parse_pseudo),    cmocka_unit_test(test_parse_spaces_and_deleted),
	    cmocka_unit_test(test_parse_malformed), cmocka_unit_test(test_parse_mutations),
	    cmocka_unit_test(test_read_self),	    cmocka_unit_test(test_open_deleted),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
