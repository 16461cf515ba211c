// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Root-safe outputs: nothing planted under an output's name is written through, and a
 * directory that others could swap files in is refused. Run as root. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include "out_dir.h"

#define OTHER_UID 54321

struct fixture {
	char top[64];	 /* holds the output directory and the victim */
	char dir[96];	 /* the output directory */
	char victim[96]; /* a file outside it that must never change */
};

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static void assert_content(const char *path, const char *text)
{
	char buf[256] = {};
	FILE *f = fopen(path, "r");

	assert_non_null(f);
	assert_true(fread(buf, 1, sizeof(buf) - 1, f) < sizeof(buf));
	fclose(f);
	assert_string_equal(buf, text);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	snprintf(f->top, sizeof(f->top), "/tmp/d9-outdir-XXXXXX");
	assert_non_null(mkdtemp(f->top));
	snprintf(f->dir, sizeof(f->dir), "%s/out", f->top);
	snprintf(f->victim, sizeof(f->victim), "%s/victim", f->top);
	write_file(f->victim, "precious\n");
	unsetenv("SUDO_UID");
	unsetenv("SUDO_GID");
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->top);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

static void plant(const struct fixture *f, const char *name, char kind)
{
	char path[160];

	snprintf(path, sizeof(path), "%s/%s", f->dir, name);
	switch (kind) {
	case 's':
		assert_int_equal(symlink(f->victim, path), 0);
		break;
	case 'h':
		assert_int_equal(link(f->victim, path), 0);
		break;
	case 'p':
		assert_int_equal(mkfifo(path, 0666), 0);
		break;
	}
}

static void write_output(const struct out_dir *d, const char *name, bool in_place)
{
	struct out_file o;

	assert_int_equal(out_file_create(&o, d, name, in_place), 0);
	fputs("output\n", o.f);
	assert_int_equal(out_file_commit(&o), 0);
}

/* Symlinks, hard links and FIFOs under the final and the temporary names: the victim keeps its
 * content, no open blocks, and each output ends up a regular file of one link. */
static void test_planted_names(void **state)
{
	static const struct {
		const char *name;
		bool in_place;
	} outs[] = {{"metadata.json", false}, {"perf.data", false}, {"samples.jsonl", true}};
	static const char kinds[] = "shp";
	struct fixture *f = *state;
	char path[160], tmp[200];
	struct out_dir d;
	struct stat st;
	bool created;

	assert_int_equal(mkdir(f->dir, 0755), 0);
	for (size_t k = 0; k < 3; k++) {
		for (size_t i = 0; i < 3; i++) {
			snprintf(path, sizeof(path), "%s.tmp", outs[i].name);
			plant(f, outs[i].name, kinds[k]);
			if (!outs[i].in_place)
				plant(f, path, kinds[(k + 1) % 3]);
		}
		assert_int_equal(out_dir_open(&d, f->dir, &created), 0);
		assert_false(created);
		for (size_t i = 0; i < 3; i++)
			write_output(&d, outs[i].name, outs[i].in_place);
		out_dir_close(&d);
		assert_content(f->victim, "precious\n");
		for (size_t i = 0; i < 3; i++) {
			snprintf(path, sizeof(path), "%s/%s", f->dir, outs[i].name);
			snprintf(tmp, sizeof(tmp), "%s.tmp", path);
			assert_int_equal(lstat(path, &st), 0);
			assert_true(S_ISREG(st.st_mode));
			assert_int_equal(st.st_nlink, 1);
			assert_content(path, "output\n");
			assert_int_equal(lstat(tmp, &st), -1);
			assert_int_equal(unlink(path), 0);
		}
	}
}

/* A second run's file is a new file: a hard link to the first run's keeps the old content. */
static void test_replaced_not_written_into(void **state)
{
	struct fixture *f = *state;
	char path[160], keep[160];
	struct out_dir d;
	bool created;

	assert_int_equal(out_dir_open(&d, f->dir, &created), 0);
	assert_true(created);
	write_output(&d, "stacks.folded", false);
	snprintf(path, sizeof(path), "%s/stacks.folded", f->dir);
	snprintf(keep, sizeof(keep), "%s/first", f->top);
	assert_int_equal(link(path, keep), 0);
	{
		struct out_file o;

		assert_int_equal(out_file_create(&o, &d, "stacks.folded", false), 0);
		fputs("second\n", o.f);
		assert_int_equal(out_file_commit(&o), 0);
	}
	out_dir_close(&d);
	assert_content(keep, "output\n");
	assert_content(path, "second\n");
}

static void assert_refused(const char *dir)
{
	struct out_dir d;
	bool created;

	assert_int_equal(out_dir_open(&d, dir, &created), -EPERM);
	assert_false(created);
	assert_int_equal(d.fd, -1);
}

static void test_unsafe_dirs_refused(void **state)
{
	struct fixture *f = *state;
	char link[160], other[160];
	struct out_dir d;
	bool created;

	assert_int_equal(mkdir(f->dir, 0755), 0);
	assert_int_equal(chmod(f->dir, 0777), 0);
	assert_refused(f->dir);
	assert_int_equal(chmod(f->dir, 0775), 0);
	assert_refused(f->dir);
	/* World-writable with the sticky bit, like /tmp: others cannot swap root's files. */
	assert_int_equal(chmod(f->dir, 01777), 0);
	assert_int_equal(out_dir_open(&d, f->dir, &created), 0);
	out_dir_close(&d);
	assert_int_equal(chmod(f->dir, 0755), 0);
	assert_int_equal(chown(f->dir, OTHER_UID, OTHER_UID), 0);
	assert_refused(f->dir);
	/* A symlink someone else made is not followed; one root made is. */
	snprintf(other, sizeof(other), "%s/real", f->top);
	assert_int_equal(mkdir(other, 0755), 0);
	snprintf(link, sizeof(link), "%s/link", f->top);
	assert_int_equal(symlink(other, link), 0);
	assert_int_equal(out_dir_open(&d, link, &created), 0);
	out_dir_close(&d);
	assert_int_equal(lchown(link, OTHER_UID, OTHER_UID), 0);
	assert_refused(link);
}

static void test_one_run_per_dir(void **state)
{
	struct fixture *f = *state;
	struct out_dir a, b;
	bool created;

	assert_int_equal(out_dir_open(&a, f->dir, &created), 0);
	assert_int_equal(out_dir_open(&b, f->dir, &created), -EBUSY);
	out_dir_close(&a);
	assert_int_equal(out_dir_open(&b, f->dir, &created), 0);
	out_dir_close(&b);
}

/* Through sudo, the directory made and every finished file belong to the invoking user. */
static void test_sudo_user_owns_outputs(void **state)
{
	struct fixture *f = *state;
	char path[160];
	struct out_dir d, sub;
	struct stat st;
	bool created;

	setenv("SUDO_UID", "54321", 1);
	setenv("SUDO_GID", "54322", 1);
	assert_int_equal(out_dir_open(&d, f->dir, &created), 0);
	write_output(&d, "profile.pb.gz", false);
	write_output(&d, "samples.jsonl", true);
	assert_int_equal(out_dir_open_at(&sub, &d, "pid-1", &created), 0);
	assert_true(created);
	out_dir_close(&sub);
	out_dir_close(&d);
	unsetenv("SUDO_UID");
	unsetenv("SUDO_GID");
	for (const char *const *n =
		 (const char *const[]){"", "/profile.pb.gz", "/samples.jsonl", "/pid-1", NULL};
	     *n; n++) {
		snprintf(path, sizeof(path), "%s%s", f->dir, *n);
		assert_int_equal(stat(path, &st), 0);
		assert_int_equal(st.st_uid, OTHER_UID);
		assert_int_equal(st.st_gid, OTHER_UID + 1);
	}
	assert_int_equal(stat(f->dir, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0755);
}

static void test_read_never_follows(void **state)
{
	struct fixture *f = *state;
	char path[160];
	int dfd, fd;

	assert_int_equal(mkdir(f->dir, 0755), 0);
	plant(f, "metadata.json", 's');
	plant(f, "samples.jsonl", 'p');
	snprintf(path, sizeof(path), "%s/stacks.folded", f->dir);
	write_file(path, "x 1\n");
	dfd = open(f->dir, O_RDONLY | O_DIRECTORY);
	assert_true(dfd >= 0);
	assert_int_equal(out_open_read(dfd, "metadata.json"), -ELOOP);
	assert_int_equal(out_open_read(dfd, "samples.jsonl"), -EINVAL);
	fd = out_open_read(dfd, "stacks.folded");
	assert_true(fd >= 0);
	close(fd);
	close(dfd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_planted_names, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_replaced_not_written_into, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_unsafe_dirs_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_one_run_per_dir, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_sudo_user_owns_outputs, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_read_never_follows, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
