// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libFuzzer target for the /proc/PID/maps parser (user/target/proc_maps.c), built with ASan and
 * UBSan. The input is split at newlines like a maps file; each line goes through
 * proc_maps_parse_line(), whose documented contract is checked (start <= end, perms
 * NUL-terminated, path without the " (deleted)" suffix and non-empty); the parsed lines are then
 * searched with proc_maps_find() as the symbolizer does. The whole input is also parsed as a
 * single line, so that embedded newlines and missing terminators are covered.
 *
 *   make build/fuzz/fuzz_proc_maps
 *   build/fuzz/fuzz_proc_maps -dict=tests/fuzz/proc_maps.dict tests/fuzz/corpus/proc_maps
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proc_maps.h"

#define MAX_LINES 64

static void check(const struct proc_map *m)
{
	size_t len;

	if (m->end < m->start || strlen(m->perms) != 4)
		abort();
	if (!m->path)
		return;
	len = strlen(m->path);
	if (len == 0 || strchr(m->path, '\n'))
		abort();
	(void)proc_map_is_file(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct proc_map maps[MAX_LINES], m;
	size_t n = 0;
	char *buf = malloc(size + 1), *line, *save = NULL;
	int err;

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = 0;

	err = proc_maps_parse_line(buf, &m);
	if (err && err != -EINVAL && err != -ENOMEM)
		abort();
	if (!err) {
		check(&m);
		proc_map_clear(&m);
	}

	for (line = strtok_r(buf, "\n", &save); line && n < MAX_LINES;
	     line = strtok_r(NULL, "\n", &save)) {
		if (proc_maps_parse_line(line, &maps[n]))
			continue;
		check(&maps[n]);
		/* proc_maps_find() wants ascending, non-overlapping mappings, as the kernel
		 * prints them: keep only lines that extend the array that way. */
		if (n && maps[n].start < maps[n - 1].end) {
			proc_map_clear(&maps[n]);
			continue;
		}
		n++;
	}
	for (size_t i = 0; i < n; i++) {
		const struct proc_map *f = proc_maps_find(maps, n, maps[i].start);

		if (maps[i].end > maps[i].start && f != &maps[i])
			abort();
		f = proc_maps_find(maps, n, maps[i].end);
		if (f && (maps[i].end < f->start || maps[i].end >= f->end))
			abort();
	}
	for (size_t i = 0; i < n; i++)
		proc_map_clear(&maps[i]);
	free(buf);
	return 0;
}
