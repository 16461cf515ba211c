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
static void check_vtable(int fd, const struct elf_file *ef, uint64_t vt, struct task_id_layout *l)
{
	uint64_t trailer, id;

	l->vtables_found++;
	if (!read_u64_at(fd, ef, vt + 56, &trailer) || !read_u64_at(fd, ef, vt + ID_OFF_FIELD, &id))
		return;
	if (plausible_offset(id) && id != trailer)
		l->vtables_valid++;
}

/* PIE: vtable entries are R_X86_64_RELATIVE relocations whose addend is the function. */
static void scan_relocs(int fd, Elf *elf, const struct elf_file *ef, const struct target *t,
			struct task_id_layout *l)
{
	Elf_Scn *scn = NULL;

	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *data;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_RELA || !sh.sh_entsize)
			continue;
		data = elf_getdata(scn, NULL);
		if (!data)
			continue;
		for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Rela r;

			if (!gelf_getrela(data, (int)i, &r))
				break;
			if (GELF_R_TYPE(r.r_info) == R_X86_64_RELATIVE &&
			    is_poll_addr(t, (uint64_t)r.r_addend))
				check_vtable(fd, ef, r.r_offset, l);
		}
	}
}

/* Non-PIE: the vtable holds the absolute address; look for it in read-only data. */
static void scan_data(int fd, Elf *elf, const struct elf_file *ef, const struct target *t,
		      struct task_id_layout *l)
{
	Elf_Scn *scn = NULL;
	size_t shstrndx;

	if (elf_getshdrstrndx(elf, &shstrndx))
		return;
	while ((scn = elf_nextscn(elf, scn))) {
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
		for (size_t off = 0; off + 8 <= data->d_size; off += 8) {
			uint64_t v;

			memcpy(&v, (char *)data->d_buf + off, 8);
			if (is_poll_addr(t, v))
				check_vtable(fd, ef, sh.sh_addr + off, l);
		}
	}
}

const char *tokio_task_id_layout(const struct elf_file *ef, const struct target *t,
				 struct task_id_layout *l)
{
	static char desc[160];
	Elf *elf;
	int fd;

	memset(l, 0, sizeof(*l));
	l->hdr_vtable_off = 16;
	l->vtable_id_off = ID_OFF_FIELD;
	fd = open(t->exe_link, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return "unverified: executable unreadable; task ids not read";
	elf_version(EV_CURRENT);
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (elf) {
		scan_relocs(fd, elf, ef, t, l);
		if (!l->vtables_found)
			scan_data(fd, elf, ef, t, l);
		elf_end(elf);
	}
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

static int find_next_id_vaddr(Elf *elf, uint64_t *vaddr)
{
	Elf_Scn *scn = NULL;

	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *data;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_SYMTAB || !sh.sh_entsize)
			continue;
		data = elf_getdata(scn, NULL);
		for (size_t i = 0; data && i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym sym;
			const char *name;

			if (!gelf_getsym(data, (int)i, &sym) ||
			    GELF_ST_TYPE(sym.st_info) != STT_OBJECT || sym.st_size != 8)
				continue;
			name = elf_strptr(elf, sh.sh_link, sym.st_name);
			if (name && is_next_id(name)) {
				*vaddr = sym.st_value;
				return 0;
			}
		}
	}
	return -ENOENT;
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
	Elf *elf;
	int fd, err = -ENOENT;

	fd = open(t->exe_link, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	elf_version(EV_CURRENT);
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (elf) {
		err = find_next_id_vaddr(elf, &vaddr);
		elf_end(elf);
	}
	close(fd);
	return err ? err : exe_data_addr(ef, t, vaddr, addr);
}

int tokio_next_id_read(int pid, uint64_t addr, uint64_t *value)
{
	struct iovec local = {.iov_base = value, .iov_len = sizeof(*value)};
	struct iovec remote = {.iov_base = (void *)(uintptr_t)addr, .iov_len = sizeof(*value)};

	return process_vm_readv(pid, &local, 1, &remote, 1, 0) == sizeof(*value) ? 0 : -errno;
}
