// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <linux/openat2.h>

#include "proc_maps.h"

static const char deleted_sfx[] = " (deleted)";

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* strtoull() would accept signs, "0x" and leading blanks, and saturate on overflow; maps
 * fields are plain digits, so anything else means the line is not what we think it is. */
static int parse_num(const char **pp, int base, uint64_t max, uint64_t *out)
{
	const char *p = *pp;
	uint64_t v = 0;
	int d;

	if ((d = hexval(*p)) < 0 || d >= base)
		return -EINVAL;
	while ((d = hexval(*p)) >= 0 && d < base) {
		if (v > (max - (uint64_t)d) / (uint64_t)base)
			return -EINVAL;
		v = v * (uint64_t)base + (uint64_t)d;
		p++;
	}
	*pp = p;
	*out = v;
	return 0;
}

static int expect(const char **pp, char c)
{
	if (**pp != c)
		return -EINVAL;
	(*pp)++;
	return 0;
}

int proc_maps_parse_line(const char *line, struct proc_map *out)
{
	const char *p = line;
	struct proc_map m = {};
	uint64_t maj, min;
	size_t len;

	if (!line || !out)
		return -EINVAL;

	if (parse_num(&p, 16, UINT64_MAX, &m.start) || expect(&p, '-') ||
	    parse_num(&p, 16, UINT64_MAX, &m.end) || expect(&p, ' '))
		return -EINVAL;
	if (m.end < m.start)
		return -EINVAL;

	static const char perm_chars[4][2] = {{'r', '-'}, {'w', '-'}, {'x', '-'}, {'p', 's'}};
	for (int i = 0; i < 4; i++, p++) {
		if (*p != perm_chars[i][0] && *p != perm_chars[i][1])
			return -EINVAL;
		m.perms[i] = *p;
	}
	m.perms[4] = '\0';

	if (expect(&p, ' ') || parse_num(&p, 16, UINT64_MAX, &m.pgoff) || expect(&p, ' ') ||
	    parse_num(&p, 16, UINT32_MAX, &maj) || expect(&p, ':') ||
	    parse_num(&p, 16, UINT32_MAX, &min) || expect(&p, ' ') ||
	    parse_num(&p, 10, UINT64_MAX, &m.inode))
		return -EINVAL;
	m.dev_major = (uint32_t)maj;
	m.dev_minor = (uint32_t)min;

	/* The kernel pads the path column with spaces; an anonymous mapping ends right here. */
	if (*p != '\0' && *p != '\n' && *p != ' ')
		return -EINVAL;
	while (*p == ' ')
		p++;
	len = strcspn(p, "\n");
	if (p[len] == '\n' && p[len + 1] != '\0')
		return -EINVAL;
	if (len == 0) {
		*out = m;
		return 0;
	}

	/* Spaces inside the path are kept as is; only the kernel's own suffix is special. */
	if (len >= sizeof(deleted_sfx) - 1 && memcmp(p + len - (sizeof(deleted_sfx) - 1),
						     deleted_sfx, sizeof(deleted_sfx) - 1) == 0) {
		m.deleted = true;
		len -= sizeof(deleted_sfx) - 1;
	}
	m.path = strndup(p, len);
	if (!m.path)
		return -ENOMEM;
	*out = m;
	return 0;
}

void proc_map_clear(struct proc_map *m)
{
	if (!m)
		return;
	free(m->path);
	m->path = NULL;
}

int proc_maps_read(int pid, struct proc_map **maps, size_t *n)
{
	struct proc_map *arr = NULL, m;
	size_t cnt = 0, cap = 0, linecap = 0;
	char path[64], *line = NULL;
	int err = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;

	errno = 0;
	while (getline(&line, &linecap, f) >= 0) {
		err = proc_maps_parse_line(line, &m);
		if (err == -EINVAL) {
			err = 0;
			continue;
		}
		if (err)
			goto fail;
		if (cnt == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			struct proc_map *tmp = realloc(arr, ncap * sizeof(*arr));

			if (!tmp) {
				proc_map_clear(&m);
				err = -ENOMEM;
				goto fail;
			}
			arr = tmp;
			cap = ncap;
		}
		arr[cnt++] = m;
	}
	/* getline() returns -1 both at EOF and on error; a vanished process reads as ESRCH. */
	if (ferror(f)) {
		err = errno ? -errno : -EIO;
		goto fail;
	}
	free(line);
	fclose(f);
	*maps = arr;
	*n = cnt;
	return 0;

fail:
	free(line);
	fclose(f);
	proc_maps_free(arr, cnt);
	return err;
}

void proc_maps_free(struct proc_map *maps, size_t n)
{
	if (!maps)
		return;
	for (size_t i = 0; i < n; i++)
		free(maps[i].path);
	free(maps);
}

const struct proc_map *proc_maps_find(const struct proc_map *maps, size_t n, uint64_t addr)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (addr < maps[mid].start)
			hi = mid;
		else if (addr >= maps[mid].end)
			lo = mid + 1;
		else
			return &maps[mid];
	}
	return NULL;
}

bool proc_map_is_file(const struct proc_map *m)
{
	/* Pseudo paths ("[heap]", "[vdso]", "[anon:name]") are bracketed; real ones are absolute
	 * (memfd and SysV shm show up as "/memfd:x" and "/SYSV...", which still open fine). */
	return m->path && m->path[0] == '/';
}

/*
 * Only regular files are parsed: a path swapped for a FIFO would block open() (and the run
 * with it, probes still attached), a device node may act on open or read. O_NONBLOCK makes
 * the open of a FIFO return at once; the check closes anything else.
 */
static int regular_or_close(int fd)
{
	struct stat st;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return -EINVAL;
	}
	return fd;
}

int proc_open_mapped_file(int pid, const struct proc_map *m)
{
	char path[PATH_MAX + 64];
	struct stat st;
	int fd;

	if (!proc_map_is_file(m))
		return -EINVAL;

	/*
	 * map_files/ is preferred: it opens the very inode the process mapped, so it works for
	 * deleted or replaced binaries (the usual state after a redeploy), and the kernel resolves
	 * it without walking the path, so symlinks planted inside a container root cannot redirect
	 * a privileged profiler to some other file. It needs CAP_SYS_ADMIN (or
	 * CAP_CHECKPOINT_RESTORE), hence the fallback.
	 */
	snprintf(path, sizeof(path), "/proc/%d/map_files/%llx-%llx", pid,
		 (unsigned long long)m->start, (unsigned long long)m->end);
	if (!stat(path, &st) && !S_ISREG(st.st_mode))
		return -EINVAL; /* a mapped device: never opened */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd >= 0)
		return regular_or_close(fd);

	/* The path now names some other file (or none), which would give wrong symbols. */
	if (m->deleted)
		return -ENOENT;

	/*
	 * root/ resolves the path in the process's mount namespace, so containers work. Absolute
	 * symlinks met on the way would still be followed from our own root, though, so resolve
	 * them inside the container's root where the kernel can (openat2, Linux 5.6).
	 */
	snprintf(path, sizeof(path), "/proc/%d/root", pid);
	int rootfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		return -errno;
	struct open_how how = {
	    .flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK,
	    .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};
	fd = (int)syscall(SYS_openat2, rootfd, m->path, &how, sizeof(how));
	if (fd < 0 && (errno == ENOSYS || errno == EPERM)) {
		/*
		 * Older kernel, or a seccomp filter that rejects unknown syscalls: openat()
		 * would follow an absolute symlink out of the container to one of our own
		 * files, so keep the result only if it is the very inode the maps line names
		 * (which overlayfs, reporting the underlying inode in maps, can defeat: then
		 * the module goes unsymbolized rather than read from a wrong file).
		 */
		fd = openat(rootfd, m->path + 1, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
		if (fd >= 0 && (fstat(fd, &st) || st.st_ino != m->inode ||
				major(st.st_dev) != m->dev_major ||
				minor(st.st_dev) != m->dev_minor)) {
			close(fd);
			fd = -1;
			errno = ESTALE;
		}
	}
	fd = regular_or_close(fd);
	close(rootfd);
	return fd;
}
