// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Finding a stripped executable's separate debug file: see debuginfo.h. */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <elfutils/debuginfod.h>
#include <zlib.h>

#include "debuginfo.h"
#include "elf_file.h"

/* What the search knows of the executable, and what it has seen go wrong so far. */
struct search {
	const uint8_t *id;
	size_t id_len;
	char id_hex[2 * ELF_BUILD_ID_MAX + 1];
	const char *debug_dir;
	char skipped[PATH_MAX + 128]; /* the last candidate refused, and why, for the message */
	char remote[256];	      /* what debuginfod said, when it was asked */
	bool quiet;
};

/* The one line of a failed search, unless the caller asked for none. */
__attribute__((format(printf, 2, 3))) static void say(const struct search *s, const char *fmt, ...)
{
	va_list ap;

	if (s->quiet)
		return;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

const char *debuginfo_method_name(enum debuginfo_method m)
{
	static const char *const names[] = {"symtab", "symbols_option", "build_id_tree",
					    "debuglink", "debuginfod"};

	return m <= DEBUGINFO_DEBUGINFOD ? names[m] : "?";
}

void debuginfo_build_id_hex(const uint8_t *id, size_t len, char *buf)
{
	for (size_t i = 0; i < len; i++)
		sprintf(buf + 2 * i, "%02x", id[i]);
	buf[2 * len] = '\0';
}

int debuginfo_build_id_path(const char *dir, const uint8_t *id, size_t len, char *buf, size_t size)
{
	char hex[2 * ELF_BUILD_ID_MAX + 1];

	if (len < 2 || len > ELF_BUILD_ID_MAX)
		return -EINVAL;
	debuginfo_build_id_hex(id, len, hex);
	if (snprintf(buf, size, "%s/.build-id/%.2s/%s.debug", dir, hex, hex + 2) >= (int)size)
		return -ENAMETOOLONG;
	return 0;
}

int debuginfo_link_path(int i, const char *bin_dir, const char *debug_dir, const char *link,
			char *buf, size_t size)
{
	int n;

	switch (i) {
	case 0:
		n = snprintf(buf, size, "%s/%s", bin_dir, link);
		break;
	case 1:
		n = snprintf(buf, size, "%s/.debug/%s", bin_dir, link);
		break;
	case 2:
		n = snprintf(buf, size, "%s%s%s/%s", debug_dir, *bin_dir == '/' ? "" : "/", bin_dir,
			     link);
		break;
	default:
		return -ENOENT;
	}
	return n < (int)size ? 0 : -ENAMETOOLONG;
}

int debuginfo_file_crc(const char *path, uint32_t *crc)
{
	unsigned char buf[65536];
	uLong c = crc32(0L, Z_NULL, 0);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		c = crc32(c, buf, (uInt)n);
	if (n < 0) {
		n = -errno;
		close(fd);
		return (int)n;
	}
	close(fd);
	*crc = (uint32_t)c;
	return 0;
}

int debuginfo_check_build_id(const char *path, const uint8_t *id, size_t len)
{
	struct elf_file *ef;
	const uint8_t *got;
	size_t got_len;
	int err = elf_file_open(path, &ef);

	if (err)
		return err;
	got_len = elf_file_build_id(ef, &got);
	err = len && got_len == len && !memcmp(got, id, len) ? 0 : -EBADMSG;
	elf_file_close(ef);
	return err;
}

static bool is_file(const char *path)
{
	struct stat st;

	return !stat(path, &st) && S_ISREG(st.st_mode);
}

/* Whether the file at path, if there is one, is the debug file: remembers why not in s. */
static bool try_candidate(struct search *s, const char *path)
{
	int err;

	if (!is_file(path))
		return false;
	err = debuginfo_check_build_id(path, s->id, s->id_len);
	if (err)
		snprintf(s->skipped, sizeof(s->skipped), "; skipped %s: %s", path,
			 err == -EBADMSG ? "another build" : strerror(-err));
	return !err;
}

static int found(struct debuginfo *out, enum debuginfo_method m, const char *path)
{
	out->method = m;
	if (snprintf(out->path, sizeof(out->path), "%s", path) >= (int)sizeof(out->path))
		return -ENAMETOOLONG;
	return 0;
}

/* --symbols FILE: it or nothing. */
static int option_file(struct search *s, const char *file, struct debuginfo *out)
{
	int err = debuginfo_check_build_id(file, s->id, s->id_len);
	char hex[2 * ELF_BUILD_ID_MAX + 1] = "none";
	struct elf_file *ef;
	const uint8_t *id;
	size_t len;

	if (!err)
		return found(out, DEBUGINFO_OPTION, file);
	if (err != -EBADMSG) {
		say(s,
		    "dial9-bpf: failed to read --symbols %s: %s: give the ELF debug file of "
		    "the target's executable\n",
		    file, err == -ENOEXEC ? "not an ELF file" : strerror(-err));
		return -ENOENT;
	}
	if (!elf_file_open(file, &ef)) {
		len = elf_file_build_id(ef, &id);
		if (len)
			debuginfo_build_id_hex(id, len, hex);
		elf_file_close(ef);
	}
	if (!s->id_len)
		say(s,
		    "dial9-bpf: --symbols %s cannot be checked: the target's executable has no GNU "
		    "build id; keep the debug file beside it under its .gnu_debuglink name "
		    "instead (its CRC is checked)\n",
		    file);
	else
		say(s,
		    "dial9-bpf: --symbols %s is the debug file of another build (build id %s, the "
		    "target's is %s): give the debug file of the build that is running\n",
		    file, hex, s->id_hex);
	return -EBADMSG;
}

/* --symbols DIR: a build-id tree, or files named after the executable or its debuglink. */
static int option_dir(struct search *s, const char *dir, const char *exe_name, const char *link,
		      struct debuginfo *out)
{
	const char *fmts[] = {"%s/%s.debug", "%s/%s", "%s/%s"};
	const char *names[] = {exe_name, exe_name, link};
	char path[PATH_MAX];

	if (!debuginfo_build_id_path(dir, s->id, s->id_len, path, sizeof(path)) &&
	    try_candidate(s, path))
		return found(out, DEBUGINFO_OPTION, path);
	for (size_t i = 0; i < 3; i++) {
		if (!names[i] ||
		    snprintf(path, sizeof(path), fmts[i], dir, names[i]) >= (int)sizeof(path))
			continue;
		if (try_candidate(s, path))
			return found(out, DEBUGINFO_OPTION, path);
	}
	/* The debuglink is usually NAME.debug: name it once. */
	if (link && snprintf(path, sizeof(path), "%s.debug", exe_name) < (int)sizeof(path) &&
	    !strcmp(link, path))
		link = NULL;
	say(s,
	    "dial9-bpf: --symbols %s holds no debug file with build id %s (looked for "
	    ".build-id/%.2s/%s.debug, %s.debug, %s%s%s)%s: give the directory or file that "
	    "has it\n",
	    dir, s->id_hex, s->id_hex, s->id_hex + 2, exe_name, exe_name, link ? ", " : "",
	    link ? link : "", s->skipped);
	return -ENOENT;
}

/* .gnu_debuglink: the name must be a plain file name, and the CRC must match. */
static int by_debuglink(struct search *s, const struct elf_file *exe, const char *root,
			const char *bin_dir, struct debuginfo *out)
{
	char path[PATH_MAX], rooted[PATH_MAX];
	const char *link;
	uint32_t want, crc;

	if (elf_file_debuglink(exe, &link, &want) || strchr(link, '/') || !strcmp(link, "..") ||
	    snprintf(rooted, sizeof(rooted), "%s%s", root, bin_dir) >= (int)sizeof(rooted))
		return -ENOENT;
	for (int i = 0; !debuginfo_link_path(i, i < 2 ? rooted : bin_dir, s->debug_dir, link, path,
					     sizeof(path));
	     i++) {
		if (!is_file(path))
			continue;
		if (debuginfo_file_crc(path, &crc) || crc != want) {
			snprintf(s->skipped, sizeof(s->skipped),
				 "; skipped %s: its CRC is not the .gnu_debuglink's", path);
			continue;
		}
		/* Without a build id the CRC is all there is to go by, as in gdb. */
		if (!s->id_len || try_candidate(s, path))
			return found(out, DEBUGINFO_DEBUGLINK, path);
	}
	return -ENOENT;
}

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* libdebuginfod calls this while it waits: non-zero aborts the transfer. */
static int debuginfod_progress(debuginfod_client *c, long done, long total)
{
	const double *deadline = debuginfod_get_user_data(c);

	(void)done;
	(void)total;
	return mono_s() > *deadline;
}

/* The bound on one lookup: DEBUGINFOD_TIMEOUT seconds when set (libdebuginfod reads it as
 * the time without progress; here it bounds the whole lookup too), else our default. */
static double debuginfod_timeout_s(void)
{
	const char *v = getenv("DEBUGINFOD_TIMEOUT");
	char *end;
	long t = v ? strtol(v, &end, 10) : 0;

	return v && *v && !*end && t > 0 ? (double)t : DEBUGINFO_DEBUGINFOD_TIMEOUT_S;
}

static int by_debuginfod(struct search *s, struct debuginfo *out)
{
	const char *urls = getenv("DEBUGINFOD_URLS");
	double t0 = mono_s(), deadline = t0 + debuginfod_timeout_s();
	debuginfod_client *c;
	char *path = NULL;
	int fd, err;

	if (!urls || !*urls) {
		snprintf(s->remote, sizeof(s->remote), "; DEBUGINFOD_URLS is not set");
		return -ENOENT;
	}
	if (!s->id_len)
		return -ENOENT;
	c = debuginfod_begin();
	if (!c) {
		snprintf(s->remote, sizeof(s->remote), "; failed to start a debuginfod client");
		return -ENOENT;
	}
	debuginfod_set_user_data(c, &deadline);
	debuginfod_set_progressfn(c, debuginfod_progress);
	fd = debuginfod_find_debuginfo(c, s->id, (int)s->id_len, &path);
	debuginfod_end(c);
	if (fd < 0) {
		snprintf(s->remote, sizeof(s->remote), "; debuginfod (%s): %s after %.1f s", urls,
			 mono_s() > deadline ? "timed out" : strerror(-fd), mono_s() - t0);
		return -ENOENT;
	}
	close(fd);
	err = try_candidate(s, path) ? found(out, DEBUGINFO_DEBUGINFOD, path) : -ENOENT;
	free(path);
	return err;
}

/* The directory part of path, "/" for a file at the root. */
static void dir_of(const char *path, char *buf, size_t size)
{
	const char *slash = strrchr(path, '/');
	size_t n = slash ? (size_t)(slash - path) : 0;

	if (n == 0 || n >= size)
		snprintf(buf, size, "%s", slash && n < size ? "/" : ".");
	else
		snprintf(buf, size, "%.*s", (int)n, path);
}

static int search(struct search *s, const struct elf_file *exe, const char *root,
		  const char *exe_path, const struct debuginfo_opts *o, struct debuginfo *out)
{
	const char *exe_name = strrchr(exe_path, '/') ? strrchr(exe_path, '/') + 1 : exe_path;
	char path[PATH_MAX], bin_dir[PATH_MAX];
	const char *link = NULL;
	uint32_t crc;
	struct stat st;

	elf_file_debuglink(exe, &link, &crc);
	if (o->symbols) {
		if (stat(o->symbols, &st)) {
			say(s,
			    "dial9-bpf: failed to read --symbols %s: %s: give a "
			    "debug file or a directory of them\n",
			    o->symbols, strerror(errno));
			return -ENOENT;
		}
		if (!S_ISDIR(st.st_mode))
			return option_file(s, o->symbols, out);
		return option_dir(s, o->symbols, exe_name, link, out);
	}
	if (s->id_len &&
	    !debuginfo_build_id_path(s->debug_dir, s->id, s->id_len, path, sizeof(path)) &&
	    try_candidate(s, path))
		return found(out, DEBUGINFO_BUILD_ID_TREE, path);
	dir_of(exe_path, bin_dir, sizeof(bin_dir));
	if (!by_debuglink(s, exe, root, bin_dir, out))
		return 0;
	if (!by_debuginfod(s, out))
		return 0;
	debuginfo_build_id_path(s->debug_dir, s->id, s->id_len, path, sizeof(path));
	say(s,
	    "dial9-bpf: %s is stripped (no .symtab) and its debug file (build id %s) was not "
	    "found: give it with --symbols FILE|DIR, install it as %s (--debug-dir DIR sets "
	    "the build-id tree's root), keep its .gnu_debuglink file %s beside the binary, or "
	    "set DEBUGINFOD_URLS to a debuginfod server that has it%s%s\n",
	    exe_path, s->id_len ? s->id_hex : "none", s->id_len ? path : "(no build id)",
	    link ? link : "(none in this binary)", s->skipped, s->remote);
	return -ENOENT;
}

int debuginfo_find(const struct elf_file *exe, const char *root, const char *exe_path,
		   const struct debuginfo_opts *o, struct debuginfo *out)
{
	struct search s = {.debug_dir = o->debug_dir ? o->debug_dir : DEBUGINFO_DEFAULT_DIR,
			   .quiet = o->quiet};
	double t0 = mono_s();
	int err;

	memset(out, 0, sizeof(*out));
	s.id_len = elf_file_build_id(exe, &s.id);
	debuginfo_build_id_hex(s.id, s.id_len, s.id_hex);
	err = search(&s, exe, root, exe_path, o, out);
	out->ms = (mono_s() - t0) * 1e3;
	return err;
}
