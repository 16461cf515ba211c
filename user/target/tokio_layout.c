// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <gelf.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "demangle.h"
#include "dial9_bpf.h"
#include "elf_file.h"
#include "proc_maps.h"
#include "target.h"
#include "tokio_layout.h"

#define VTABLE_FNS                                                                                 \
	7 /* poll, schedule, dealloc, try_read_output, drop_join_handle_slow,                      \
	     drop_abort_handle, shutdown (1.24) */
#define ID_OFF_FIELD 72
#define VTABLE_DEALLOC 16 /* the third entry */

static bool is_poll_addr(const struct target *t, uint64_t v)
{
	for (size_t i = 0; i < t->nprobes; i++)
		if (t->probes[i].kind == PROBE_POLL && t->probes[i].vaddr == v)
			return true;
	return false;
}

static bool read_u64_at(int fd, const struct elf_file *ef, uint64_t vaddr, uint64_t *out)
{
	uint64_t off;

	if (elf_file_vaddr_to_offset(ef, vaddr, &off))
		return false;
	return pread(fd, out, sizeof(*out), (off_t)off) == sizeof(*out);
}

/* Offsets into a task cell lie past the Header and are 8-aligned; a large future (or a stage
 * laid out before the id) puts them far out, up to D9_MAX_CELL_OFFSET. */
static bool plausible_offset(uint64_t v)
{
	return v >= 24 && v < D9_MAX_CELL_OFFSET && !(v & 7);
}

/* Only the id offset is read by the sampler, so only it decides; the trailer offset beside it
 * is another field of the same cell, which tells a table of offsets from a misread one. (The
 * scheduler may be a zero-sized type, with the id's offset: blocking tasks.) */
static bool vtable_valid(int fd, const struct elf_file *ef, uint64_t vt)
{
	uint64_t trailer, id;

	if (!read_u64_at(fd, ef, vt + 56, &trailer) || !read_u64_at(fd, ef, vt + ID_OFF_FIELD, &id))
		return false;
	return plausible_offset(id) && id != trailer;
}

static int add_vtable(struct tokio_vtables *v, uint64_t vaddr, uint64_t poll, uint64_t dealloc)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? 2 * v->cap : 32;
		struct tokio_vtable *p = realloc(v->v, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		v->v = p;
		v->cap = cap;
	}
	v->v[v->n++] = (struct tokio_vtable){vaddr, poll, dealloc};
	return 0;
}

static int cmp_rela(const void *a, const void *b)
{
	const GElf_Rela *x = a, *y = b;

	return x->r_offset < y->r_offset ? -1 : x->r_offset > y->r_offset;
}

/* The RELATIVE relocation at OFFSET (an entry of a PIE's vtable), or NULL. */
static const GElf_Rela *rela_at(const GElf_Rela *r, size_t n, uint64_t offset)
{
	GElf_Rela key = {.r_offset = offset};

	return bsearch(&key, r, n, sizeof(*r), cmp_rela);
}

/* PIE: every RELATIVE relocation, sorted by the address it fills. */
static int read_relocs(Elf *elf, GElf_Rela **out, size_t *nout)
{
	GElf_Rela *r = NULL;
	size_t n = 0, cap = 0;
	Elf_Scn *scn = NULL;

	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *data;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_RELA || !sh.sh_entsize)
			continue;
		data = elf_getdata(scn, NULL);
		for (size_t i = 0; data && i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Rela e;

			if (!gelf_getrela(data, (int)i, &e))
				break;
			if (GELF_R_TYPE(e.r_info) != R_X86_64_RELATIVE)
				continue;
			if (n == cap) {
				GElf_Rela *p =
				    realloc(r, (cap = cap ? 2 * cap : 1024) * sizeof(*r));

				if (!p) {
					free(r);
					return -ENOMEM;
				}
				r = p;
			}
			r[n++] = e;
		}
	}
	qsort(r, n, sizeof(*r), cmp_rela);
	*out = r;
	*nout = n;
	return 0;
}

/* PIE: vtable entries are R_X86_64_RELATIVE relocations whose addend is the function. */
static int scan_relocs(Elf *elf, const struct target *t, struct tokio_vtables *v)
{
	GElf_Rela *r = NULL;
	size_t n = 0;
	int err = read_relocs(elf, &r, &n);

	for (size_t i = 0; !err && i < n; i++) {
		const GElf_Rela *d;

		if (!is_poll_addr(t, (uint64_t)r[i].r_addend))
			continue;
		d = rela_at(r, n, r[i].r_offset + VTABLE_DEALLOC);
		err = add_vtable(v, r[i].r_offset, (uint64_t)r[i].r_addend,
				 d ? (uint64_t)d->r_addend : 0);
	}
	free(r);
	return err;
}

/* Non-PIE: the vtable holds the absolute address; look for it in read-only data. */
static int scan_data(Elf *elf, const struct target *t, struct tokio_vtables *v)
{
	Elf_Scn *scn = NULL;
	size_t shstrndx;
	int err = 0;

	if (elf_getshdrstrndx(elf, &shstrndx))
		return -EINVAL;
	while (!err && (scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *data;
		const char *name;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_PROGBITS)
			continue;
		name = elf_strptr(elf, shstrndx, sh.sh_name);
		if (!name || (strcmp(name, ".data.rel.ro") && strcmp(name, ".rodata")))
			continue;
		data = elf_getdata(scn, NULL);
		if (!data || !data->d_buf)
			continue;
		for (size_t off = 0; !err && off + 8 <= data->d_size; off += 8) {
			uint64_t poll, dealloc = 0;

			memcpy(&poll, (char *)data->d_buf + off, 8);
			if (!is_poll_addr(t, poll))
				continue;
			if (off + VTABLE_DEALLOC + 8 <= data->d_size)
				memcpy(&dealloc, (char *)data->d_buf + off + VTABLE_DEALLOC, 8);
			err = add_vtable(v, sh.sh_addr + off, poll, dealloc);
		}
	}
	return err;
}

/* Runs SCAN over the target's executable opened with libelf; -EINVAL when it is no ELF. */
static int scan_exe(const struct target *t,
		    int (*scan)(Elf *elf, const struct target *t, void *ctx), void *ctx)
{
	Elf *elf;
	int fd, err = -EINVAL;

	fd = open(t->exe_link, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	elf_version(EV_CURRENT);
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (elf) {
		err = scan(elf, t, ctx);
		elf_end(elf);
	}
	close(fd);
	return err;
}

static int scan_vtables(Elf *elf, const struct target *t, void *ctx)
{
	struct tokio_vtables *v = ctx;
	int err = scan_relocs(elf, t, v);

	return !err && !v->n ? scan_data(elf, t, v) : err;
}

int tokio_vtables_find(const struct target *t, struct tokio_vtables *v)
{
	int err;

	*v = (struct tokio_vtables){0};
	err = scan_exe(t, scan_vtables, v);
	if (err)
		tokio_vtables_free(v);
	return err;
}

void tokio_vtables_free(struct tokio_vtables *v)
{
	free(v->v);
	*v = (struct tokio_vtables){0};
}

const char *tokio_task_id_layout(const struct elf_file *ef, const struct target *t,
				 struct task_id_layout *l)
{
	static char desc[160];
	struct tokio_vtables v;
	int fd;

	memset(l, 0, sizeof(*l));
	l->hdr_vtable_off = 16;
	l->vtable_id_off = ID_OFF_FIELD;
	fd = open(t->exe_link, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || tokio_vtables_find(t, &v)) {
		if (fd >= 0)
			close(fd);
		return "unverified: executable unreadable; task ids not read";
	}
	for (size_t i = 0; i < v.n; i++)
		l->vtables_valid += vtable_valid(fd, ef, v.v[i].vaddr);
	l->vtables_found = (uint32_t)v.n;
	tokio_vtables_free(&v);
	close(fd);
	/* Every vtable must agree: one odd table means the layout is not what we think. */
	l->valid = l->vtables_found > 0 && l->vtables_valid == l->vtables_found;
	snprintf(desc, sizeof(desc),
		 "%s: %u of %u task vtables have a plausible id_offset at +%u%s",
		 l->valid ? "validated" : "unverified", l->vtables_valid, l->vtables_found,
		 ID_OFF_FIELD, l->valid ? "" : "; task ids not read");
	return desc;
}

/* Tokio's task id counter, `static NEXT_ID` in Id::next (1.x): a data symbol. */
static bool is_next_id(const char *mangled)
{
	char *name;
	bool yes;

	if (!strstr(mangled, "NEXT_ID"))
		return false;
	name = demangle(mangled);
	yes = name && strstr(name, "tokio::runtime::task::") && strstr(name, "Id") &&
	      strlen(name) > 15 && !strcmp(name + strlen(name) - 15, "::next::NEXT_ID");
	free(name);
	return yes;
}

static bool match_next_id(const struct elf_sym *s, void *ctx)
{
	if (s->size != 8 || !is_next_id(s->name))
		return false;
	*(uint64_t *)ctx = s->addr;
	return true;
}

/* The runtime address of VADDR in the executable's writable data. Segments share file pages
 * at their edges, so the mapping is the one with the data's permission, not merely one that
 * holds its file offset. */
static int exe_data_addr(const struct elf_file *ef, const struct target *t, uint64_t vaddr,
			 uint64_t *addr)
{
	struct proc_map *maps;
	uint64_t off;
	size_t n;
	int err = elf_file_vaddr_to_offset(ef, vaddr, &off);

	if (!err)
		err = proc_maps_read(t->pid, &maps, &n);
	if (err)
		return err;
	err = -ENOENT;
	for (size_t i = 0; i < n; i++) {
		const struct proc_map *m = &maps[i];

		if (!m->path || m->inode != t->exe_ino || m->perms[1] != 'w' || off < m->pgoff ||
		    off >= m->pgoff + (m->end - m->start))
			continue;
		*addr = m->start + (off - m->pgoff);
		err = 0;
		break;
	}
	proc_maps_free(maps, n);
	return err;
}

int tokio_next_id_addr(const struct elf_file *ef, const struct target *t, uint64_t *addr)
{
	uint64_t vaddr = 0;
	int err = elf_symtab_each(target_symbols_file(t), STT_OBJECT, match_next_id, &vaddr);

	if (!err && !vaddr)
		err = -ENOENT;
	return err ? err : exe_data_addr(ef, t, vaddr, addr);
}

int tokio_next_id_read(int pid, uint64_t addr, uint64_t *value)
{
	struct iovec local = {.iov_base = value, .iov_len = sizeof(*value)};
	struct iovec remote = {.iov_base = (void *)(uintptr_t)addr, .iov_len = sizeof(*value)};

	return process_vm_readv(pid, &local, 1, &remote, 1, 0) == sizeof(*value) ? 0 : -errno;
}
