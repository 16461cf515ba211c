// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* A process's unwind tables for the BPF walker (unwind_tables.h). */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <gelf.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eh_frame.h"
#include "proc_maps.h"
#include "unwind_dwarf.h"
#include "unwind_tables.h"

/* The load bias of mapping m of elf: where its file offset pgoff lands against the virtual
 * address the executable segment gives that offset. */
static int mapping_bias(Elf *elf, const struct proc_map *m, __u64 *bias)
{
	size_t n;

	if (elf_getphdrnum(elf, &n))
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD || !(ph.p_flags & PF_X))
			continue;
		if (m->pgoff < (ph.p_offset & ~(uint64_t)0xfff) ||
		    m->pgoff >= ph.p_offset + ph.p_filesz)
			continue;
		*bias = m->start - (ph.p_vaddr - ph.p_offset + m->pgoff);
		return 0;
	}
	return -ENOENT;
}

static int append_rows(struct unwind_tables *t, const struct unwind_rows *r)
{
	struct d9_unwind_row *rows = realloc(t->rows, (t->nrows + r->n) * sizeof(*rows));

	if (!rows)
		return -ENOMEM;
	memcpy(rows + t->nrows, r->rows, r->n * sizeof(*rows));
	t->rows = rows;
	t->nrows += r->n;
	return 0;
}

/* A module already read from the same file (another executable mapping of it), or NULL. */
static const struct d9_unwind_module *same_file(const struct unwind_tables *t,
						const struct proc_map *maps, const size_t *map_of,
						const struct proc_map *m)
{
	for (size_t i = 0; i < t->nmods; i++) {
		const struct proc_map *o = &maps[map_of[i]];

		if (o->inode == m->inode && o->dev_major == m->dev_major &&
		    o->dev_minor == m->dev_minor)
			return &t->mods[i];
	}
	return NULL;
}

static bool is_vdso(const struct proc_map *m)
{
	return m->path && !strcmp(m->path, "[vdso]");
}

/* The rows of mapping m, appended (or shared with an earlier mapping of the same file). */
static int add_mapping(struct unwind_tables *t, int pid, const struct proc_map *m,
		       const struct d9_unwind_module *prev)
{
	struct d9_unwind_module *mod = &t->mods[t->nmods];
	struct unwind_rows rows = {};
	int fd = is_vdso(m) ? vdso_memfd() : proc_open_mapped_file(pid, m), err;
	Elf *elf;

	if (fd < 0)
		return fd;
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	err = elf ? mapping_bias(elf, m, &mod->bias) : -EINVAL;
	if (!err && prev) {
		mod->first = prev->first;
		mod->count = prev->count;
	} else if (!err && !(err = eh_frame_rows(elf, &rows))) {
		mod->first = (uint32_t)t->nrows;
		mod->count = (uint32_t)rows.n;
		err = append_rows(t, &rows);
		t->files++;
	}
	mod->start = m->start;
	mod->end = m->end;
	unwind_rows_free(&rows);
	if (elf)
		elf_end(elf);
	close(fd);
	return err;
}

int unwind_tables_build(int pid, struct unwind_tables *t)
{
	size_t map_of[D9_UNWIND_MAX_MODULES];
	struct proc_map *maps;
	size_t n;
	int err;

	memset(t, 0, sizeof(*t));
	elf_version(EV_CURRENT);
	err = proc_maps_read(pid, &maps, &n);
	if (err)
		return err;
	for (size_t i = 0; i < n && !err; i++) {
		const struct proc_map *m = &maps[i];
		int e;

		if (m->perms[2] != 'x' || !(proc_map_is_file(m) || is_vdso(m)))
			continue;
		if (t->nmods == D9_UNWIND_MAX_MODULES) {
			t->uncovered++;
			continue;
		}
		e = add_mapping(t, pid, m, same_file(t, maps, map_of, m));
		if (e == -ENOMEM)
			err = e;
		else if (e)
			t->uncovered++;
		else
			map_of[t->nmods++] = i;
	}
	proc_maps_free(maps, n);
	if (!err && !t->nrows)
		err = -ENOENT;
	if (err)
		unwind_tables_free(t);
	return err;
}

int unwind_tables_size_map(const struct unwind_tables *t, struct bpf_map *rows)
{
	return bpf_map__set_max_entries(rows, t->nrows ? (uint32_t)t->nrows : 1);
}

/* Rows go in batches: one syscall a row was most of the table's load time. */
#define FILL_BATCH 4096

static int fill_array(int fd, const void *values, size_t size, uint32_t n)
{
	uint32_t keys[FILL_BATCH];

	for (uint32_t at = 0; at < n;) {
		uint32_t count = n - at < FILL_BATCH ? n - at : FILL_BATCH;

		for (uint32_t i = 0; i < count; i++)
			keys[i] = at + i;
		if (bpf_map_update_batch(fd, keys, (const char *)values + (size_t)at * size, &count,
					 NULL))
			return -errno;
		at += count;
	}
	return 0;
}

int unwind_tables_fill(const struct unwind_tables *t, struct bpf_map *rows, struct bpf_map *modules)
{
	int err = fill_array(bpf_map__fd(modules), t->mods, sizeof(t->mods[0]), t->nmods);

	return err ? err : fill_array(bpf_map__fd(rows), t->rows, sizeof(t->rows[0]), t->nrows);
}

void unwind_tables_free(struct unwind_tables *t)
{
	free(t->rows);
	t->rows = NULL;
	t->nrows = 0;
}
