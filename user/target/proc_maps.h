/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#ifndef D9_PROC_MAPS_H
#define D9_PROC_MAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One line of /proc/PID/maps. */
struct proc_map {
	uint64_t start, end; /* [start, end) */
	uint64_t pgoff;	     /* file offset of start */
	uint64_t inode;
	uint32_t dev_major, dev_minor;
	char perms[5]; /* "r-xp", NUL-terminated */
	char *path;    /* malloc'd; NULL for anonymous; without the " (deleted)" suffix */
	bool deleted;  /* the path carried " (deleted)": the file was unlinked or replaced */
};

/*
 * Parses one maps line (a trailing newline is allowed). On success fills *out, whose path the
 * caller releases with proc_map_clear(). Returns 0, -EINVAL for a malformed line, -ENOMEM.
 */
int proc_maps_parse_line(const char *line, struct proc_map *out);

void proc_map_clear(struct proc_map *m);

/*
 * Reads /proc/PID/maps into a malloc'd array in file order (ascending start). Lines that do not
 * parse are skipped rather than failing the whole process. Returns 0 or a negative errno.
 */
int proc_maps_read(int pid, struct proc_map **maps, size_t *n);

void proc_maps_free(struct proc_map *maps, size_t n);

/* The mapping containing addr in an array from proc_maps_read(), or NULL; binary search. */
const struct proc_map *proc_maps_find(const struct proc_map *maps, size_t n, uint64_t addr);

/* Whether m maps a regular file (not anonymous, and not a "[heap]"-style pseudo path). */
bool proc_map_is_file(const struct proc_map *m);

/*
 * Opens, read-only and close-on-exec, the file behind a file-backed mapping of process pid.
 * Returns an fd or a negative errno.
 */
int proc_open_mapped_file(int pid, const struct proc_map *m);

#endif /* D9_PROC_MAPS_H */
