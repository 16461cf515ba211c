// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Root-safe output files. The tool runs as root and writes where a user says, often under a
 * shared path: anyone who can write into that directory could otherwise plant a symlink or a
 * hard link named like an output and have root truncate the file it points at. So the
 * directory is opened once (not following a planted symlink) and checked; every file is made
 * with O_CREAT|O_EXCL|O_NOFOLLOW relative to it after removing whatever had its name, and put
 * in place with renameat.
 */
#include "out_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* Removing a planted name and creating ours can race with the planter: a few tries, then the
 * run stops rather than write through what it finds. */
#define CREATE_TRIES 4

static bool parse_id(const char *s, unsigned long *out)
{
	char *end;

	if (!s || !*s)
		return false;
	errno = 0;
	*out = strtoul(s, &end, 10);
	return !errno && !*end && *out < (unsigned long)(uid_t)-1;
}

void out_owner(bool *give, uid_t *uid, gid_t *gid)
{
	unsigned long u, g;

	*give = false;
	*uid = geteuid();
	*gid = getegid();
	if (geteuid() != 0 || !parse_id(getenv("SUDO_UID"), &u) || u == 0)
		return;
	*uid = (uid_t)u;
	*gid = parse_id(getenv("SUDO_GID"), &g) ? (gid_t)g : (gid_t)u;
	*give = true;
}

/* mkdir -p of every component before the last: a path's parents are the user's choice (they
 * may be symlinks, as /var/run is); only the directory written into is checked. */
static int make_parents(const char *path)
{
	char buf[PATH_MAX];
	size_t n = strlen(path);

	if (n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, n + 1);
	while (n > 1 && buf[n - 1] == '/')
		buf[--n] = 0;
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, 0755) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	return 0;
}

static bool trusted_owner(uid_t owner, uid_t me)
{
	return owner == 0 || owner == me;
}

int out_dir_check(int fd, const char *path, const char *role)
{
	uid_t me;
	gid_t gid;
	bool give;
	struct stat st;

	out_owner(&give, &me, &gid);
	if (fstat(fd, &st)) {
		fprintf(stderr, "dial9-bpf: failed to inspect %s '%s': %s\n", role, path,
			strerror(errno));
		return -errno;
	}
	if (!trusted_owner(st.st_uid, me)) {
		fprintf(stderr,
			"dial9-bpf: refusing %s '%s': it belongs to uid %u, not to you or root, so "
			"its owner could swap the files root writes there: choose another "
			"directory or chown it\n",
			role, path, (unsigned)st.st_uid);
		return -EPERM;
	}
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX)) {
		fprintf(stderr,
			"dial9-bpf: refusing %s '%s': it is %s-writable without the sticky bit, so "
			"others could swap the files root writes there: chmod go-w it or choose "
			"another directory\n",
			role, path, (st.st_mode & S_IWOTH) ? "world" : "group");
		return -EPERM;
	}
	return 0;
}

/* Opens NAME in DIRFD as a directory. A symlink is followed only when its owner is trusted:
 * that is one the user made, not one planted for them. */
static int open_dir_at(int dirfd, const char *name, const char *shown, uid_t me)
{
	struct stat st;
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd >= 0 || (errno != ELOOP && errno != ENOTDIR))
		return fd >= 0 ? fd : -errno;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISLNK(st.st_mode)) {
		fprintf(stderr,
			"dial9-bpf: refusing output directory '%s': it is not a directory: choose "
			"another --output directory\n",
			shown);
		return -ENOTDIR;
	}
	if (!trusted_owner(st.st_uid, me)) {
		fprintf(
		    stderr,
		    "dial9-bpf: refusing output directory '%s': it is a symlink made by uid %u, "
		    "not by you or root: give the real directory as --output\n",
		    shown, (unsigned)st.st_uid);
		return -EPERM;
	}
	fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return fd >= 0 ? fd : -errno;
}

static int lock_dir(const struct out_dir *d)
{
	if (!flock(d->fd, LOCK_EX | LOCK_NB))
		return 0;
	if (errno == EWOULDBLOCK)
		fprintf(stderr,
			"dial9-bpf: output directory '%s' is in use by another dial9-bpf run: wait "
			"for it to finish or choose another --output directory\n",
			d->path);
	else
		fprintf(stderr, "dial9-bpf: failed to lock output directory '%s': %s\n", d->path,
			strerror(errno));
	return -EBUSY;
}

/* Creates NAME in DIRFD (mode 0755 whatever the umask, handed to the sudo user) and opens it. */
static int open_or_make(struct out_dir *d, int dirfd, const char *name, uid_t me, bool *created)
{
	int err;

	*created = false;
	if (!mkdirat(dirfd, name, 0755))
		*created = true;
	else if (errno != EEXIST)
		return -errno;
	d->fd = open_dir_at(dirfd, name, d->path, me);
	if (d->fd < 0)
		return d->fd;
	if (*created && (fchmod(d->fd, 0755) || (d->give && fchown(d->fd, d->uid, d->gid)))) {
		err = -errno;
		fprintf(stderr, "dial9-bpf: failed to set the owner and mode of '%s': %s\n",
			d->path, strerror(errno));
		return err;
	}
	err = out_dir_check(d->fd, d->path, "output directory");
	return err ? err : lock_dir(d);
}

/* Splits PATH into the directory holding its last component and that component's name. */
static int split_last(const char *path, char *parent, size_t plen, const char **name)
{
	size_t n = strlen(path);
	const char *slash;

	while (n > 1 && path[n - 1] == '/')
		n--;
	if (n >= plen)
		return -ENAMETOOLONG;
	memcpy(parent, path, n);
	parent[n] = 0;
	slash = strrchr(parent, '/');
	if (!slash) {
		*name = parent;
		return AT_FDCWD;
	}
	*name = slash + 1;
	if (slash == parent)
		return open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	parent[slash - parent] = 0;
	return open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

static void say_cannot(const char *path, int err)
{
	if (err != -EPERM && err != -EBUSY && err != -ENOTDIR)
		fprintf(stderr,
			"dial9-bpf: failed to create output directory '%s': %s: give a writable "
			"--output directory\n",
			path, strerror(-err));
}

int out_dir_open(struct out_dir *d, const char *path, bool *created)
{
	char parent[PATH_MAX];
	const char *name;
	uid_t me;
	int pfd, err;

	*d = (struct out_dir){.fd = -1};
	*created = false;
	out_owner(&d->give, &d->uid, &d->gid);
	me = d->uid;
	if (snprintf(d->path, sizeof(d->path), "%s", path) >= (int)sizeof(d->path))
		err = -ENAMETOOLONG;
	else if ((err = make_parents(path)) == 0) {
		pfd = split_last(path, parent, sizeof(parent), &name);
		if (pfd == AT_FDCWD || pfd >= 0) {
			err = !*name ? -EINVAL : open_or_make(d, pfd, name, me, created);
			if (pfd >= 0)
				close(pfd);
		} else {
			err = pfd;
		}
	}
	if (err) {
		say_cannot(path, err);
		if (*created)
			rmdir(path);
		out_dir_close(d);
	}
	return err;
}

int out_dir_open_at(struct out_dir *d, const struct out_dir *parent, const char *name,
		    bool *created)
{
	int err;

	*d = (struct out_dir){
	    .fd = -1, .give = parent->give, .uid = parent->uid, .gid = parent->gid};
	if (snprintf(d->path, sizeof(d->path), "%s/%s", parent->path, name) >= (int)sizeof(d->path))
		err = -ENAMETOOLONG;
	else
		err = open_or_make(d, parent->fd, name, d->uid, created);
	if (err) {
		say_cannot(d->path, err);
		out_dir_close(d);
	}
	return err;
}

void out_dir_close(struct out_dir *d)
{
	if (d->fd >= 0)
		close(d->fd);
	d->fd = -1;
}

/* Creates NAME afresh: whatever had the name (a planted link, FIFO or device, or an earlier
 * run's file) is unlinked, never opened, so nothing outside the directory is written. */
static int create_fresh(int dirfd, const char *name)
{
	for (int i = 0; i < CREATE_TRIES; i++) {
		int fd =
		    openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);

		if (fd >= 0)
			return fd;
		if (errno != EEXIST)
			return -errno;
		if (unlinkat(dirfd, name, 0) && errno != ENOENT)
			return errno == EISDIR ? -EISDIR : -errno;
	}
	return -EEXIST;
}

int out_file_create(struct out_file *o, const struct out_dir *d, const char *name, bool in_place)
{
	int fd;

	*o = (struct out_file){.dir = d, .in_place = in_place};
	if (snprintf(o->name, sizeof(o->name), "%s", name) >= (int)sizeof(o->name) ||
	    snprintf(o->tmp, sizeof(o->tmp), in_place ? "%s" : "%s.tmp", name) >=
		(int)sizeof(o->tmp))
		return -ENAMETOOLONG;
	fd = create_fresh(d->fd, o->tmp);
	if (fd < 0)
		return fd;
	/* Readable by its owner while the run goes on (samples.jsonl is followed live). */
	if (d->give && fchown(fd, d->uid, d->gid)) {
		int err = -errno;

		close(fd);
		unlinkat(d->fd, o->tmp, 0);
		return err;
	}
	o->f = fdopen(fd, "w");
	if (!o->f) {
		int err = -errno;

		close(fd);
		unlinkat(d->fd, o->tmp, 0);
		return err;
	}
	return 0;
}

int out_file_commit(struct out_file *o)
{
	int err = 0;

	errno = 0;
	if (fflush(o->f) || ferror(o->f) || fsync(fileno(o->f)))
		err = errno ? -errno : -EIO;
	if (fclose(o->f) && !err)
		err = -errno;
	o->f = NULL;
	if (!err && !o->in_place && renameat(o->dir->fd, o->tmp, o->dir->fd, o->name))
		err = -errno;
	if (err) {
		fprintf(stderr, "dial9-bpf: failed to write %s/%s: %s\n", o->dir->path, o->name,
			strerror(-err));
		unlinkat(o->dir->fd, o->tmp, 0);
	}
	return err;
}

void out_file_discard(struct out_file *o)
{
	if (!o->dir)
		return;
	if (o->f)
		fclose(o->f);
	o->f = NULL;
	unlinkat(o->dir->fd, o->tmp, 0);
}

int out_open_read(int dirfd, const char *name)
{
	struct stat st;
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		int err = fstat(fd, &st) ? -errno : S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;

		close(fd);
		return err;
	}
	return fd;
}
