/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The output directory, written by root into a place a user names: held open as a directory
 * fd, and every file created relative to it, never through a name somebody else planted. A
 * symlink, FIFO, device or hard link found under an output's name is removed, not written
 * through; a finished file is put in place with renameat, so it replaces whatever had its name.
 */
#ifndef D9_OUT_DIR_H
#define D9_OUT_DIR_H

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

struct out_dir {
	int fd;
	char path[PATH_MAX]; /* as named, for messages */
	/* Run through sudo: finished files (and a directory the tool made) go to that user. */
	bool give;
	uid_t uid;
	gid_t gid;
};

/* Whom finished outputs belong to: SUDO_UID/SUDO_GID when root was reached through sudo. */
void out_owner(bool *give, uid_t *uid, gid_t *gid);

/* Opens DIR (making it and its parents with mode 0755 when missing), refuses one that is not
 * safe for root to write into, and takes a lock so that two runs never write one directory.
 * Prints one line naming the path, the problem and the fix; returns 0 or a negative errno. */
int out_dir_open(struct out_dir *d, const char *path, bool *created);
/* Refuses (one line naming ROLE, PATH, the problem and the fix; -EPERM) a directory that
 * another non-root user owns or that is group- or world-writable without the sticky bit:
 * whoever can swap its entries could make root write elsewhere. */
int out_dir_check(int fd, const char *path, const char *role);
/* The same for NAME inside an open output directory (one per process with --cgroup). */
int out_dir_open_at(struct out_dir *d, const struct out_dir *parent, const char *name,
		    bool *created);
void out_dir_close(struct out_dir *d);

/* One output file. in_place files (samples.jsonl, read while the run goes on) are created
 * fresh under their own name; the others are written as NAME.tmp and renamed when complete. */
struct out_file {
	FILE *f;
	const struct out_dir *dir;
	bool in_place;
	char name[NAME_MAX + 1];
	char tmp[NAME_MAX + 1];
};

/* Returns 0 or a negative errno; prints nothing (callers name the file). */
int out_file_create(struct out_file *o, const struct out_dir *d, const char *name, bool in_place);
/* Flushes, syncs, hands over, closes and puts in place; prints its own error. Returns 0 or a
 * negative errno (the partial file is then removed). */
int out_file_commit(struct out_file *o);
/* Closes and removes the partial file. */
void out_file_discard(struct out_file *o);

/* Opens DIR/NAME for reading when it is a regular file (never a FIFO: no hang), without
 * following a symlink. Returns an fd or a negative errno (-EINVAL: not a regular file). */
int out_open_read(int dirfd, const char *name);

#endif /* D9_OUT_DIR_H */
