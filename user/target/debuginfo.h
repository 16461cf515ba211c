/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The separate debug file of a stripped executable, found the way gdb and perf find it: a file
 * or directory given with --symbols, the build-id tree under the debug directory, the
 * .gnu_debuglink file (CRC32 checked), then a debuginfod server (DEBUGINFOD_URLS). Whatever
 * is found must carry the executable's GNU build id.
 */
#ifndef D9_DEBUGINFO_H
#define D9_DEBUGINFO_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct elf_file;

#define DEBUGINFO_DEFAULT_DIR "/usr/lib/debug"
/* Bound on a debuginfod lookup, in seconds, when DEBUGINFOD_TIMEOUT does not set one. */
#define DEBUGINFO_DEBUGINFOD_TIMEOUT_S 20

enum debuginfo_method {
	DEBUGINFO_SYMTAB,	 /* the executable's own .symtab */
	DEBUGINFO_OPTION,	 /* --symbols FILE or DIR */
	DEBUGINFO_BUILD_ID_TREE, /* DIR/.build-id/xx/yyyy.debug */
	DEBUGINFO_DEBUGLINK,	 /* .gnu_debuglink */
	DEBUGINFO_DEBUGINFOD,	 /* a debuginfod server's file, in its client cache */
};

struct debuginfo_opts {
	const char *symbols;   /* --symbols FILE|DIR, or NULL */
	const char *debug_dir; /* --debug-dir, or NULL for DEBUGINFO_DEFAULT_DIR */
	bool quiet;	       /* print nothing: the caller says what failed */
};

/* Where the symbols came from, for metadata.json. */
struct debuginfo {
	enum debuginfo_method method;
	char path[PATH_MAX]; /* the file read for symbols */
	double ms;	     /* time the search took */
};

const char *debuginfo_method_name(enum debuginfo_method m);

/*
 * Finds the debug file of exe, the parsed stripped executable at exe_path as the target sees
 * it; root prefixes exe_path's directory where it is read (/proc/PID/root for a target in
 * another mount namespace, else ""). Searches as this header says. Returns 0 and fills *out;
 * otherwise prints one line (unless o->quiet) naming the problem and every way to give the
 * symbols, and returns -ENOENT (nothing found) or -EBADMSG (--symbols names another build).
 */
int debuginfo_find(const struct elf_file *exe, const char *root, const char *exe_path,
		   const struct debuginfo_opts *o, struct debuginfo *out);

/* The build id as lower-case hex into buf (2 * len + 1 bytes). */
void debuginfo_build_id_hex(const uint8_t *id, size_t len, char *buf);

/* DIR/.build-id/xx/yyyy.debug for build id id. Returns 0, or -ENAMETOOLONG / -EINVAL. */
int debuginfo_build_id_path(const char *dir, const uint8_t *id, size_t len, char *buf, size_t size);

/*
 * The i-th place (from 0) a .gnu_debuglink file named link is looked for, gdb's order: beside
 * the executable in bin_dir, in bin_dir/.debug/, then under debug_dir as debug_dir/bin_dir/.
 * Returns 0, -ENOENT past the last, or -ENAMETOOLONG.
 */
int debuginfo_link_path(int i, const char *bin_dir, const char *debug_dir, const char *link,
			char *buf, size_t size);

/* The CRC32 (zlib's, as .gnu_debuglink stores it) of the file at path. Returns 0 or -errno. */
int debuginfo_file_crc(const char *path, uint32_t *crc);

/* Whether the ELF file at path has build id id: 0 yes, -EBADMSG another (or none), or another
 * negative errno when it cannot be read. */
int debuginfo_check_build_id(const char *path, const uint8_t *id, size_t len);

#endif /* D9_DEBUGINFO_H */
