// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <dwarf.h>
#include <gelf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>

#include "inline_names.h"
#include "proc_maps.h"
#include "unwind_dwarf.h"
#include "util_clock.h"

/* x86-64 DWARF register numbers (psABI figure 3.36). */
#define DWARF_REG_RBP 6
#define DWARF_REG_RSP 7

/*
 * Reads past the captured bytes but below this far above sp count as a truncated capture when
 * the maps do not say where the stack ends (a thread created after the last maps read). The
 * default main-thread stack limit; Tokio workers get 2 MiB.
 */
#define STACK_WINDOW_FALLBACK (8ull << 20)

/* One executable file mapping and the module reported for it. */
struct module_rec {
	uint32_t dev_major, dev_minor;
	uint64_t inode;
	uint64_t start, pgoff; /* of the executable mapping */
	bool is_vdso;
	uint64_t bias;
	Dwfl_Module *mod; /* NULL: not ELF or unreadable, remembered so it is not retried */
};

struct unwinder {
	int pid;
	Dwfl *dwfl;
	Elf *arch_elf; /* an ELF header saying x86-64, for dwfl_attach_state */
	Elf64_Ehdr arch_ehdr;
	unsigned int generation;
	struct module_rec *mods;
	size_t nmods;
	struct proc_map *maps;
	size_t nmaps;
	uint64_t last_refresh_ns;

	/* The sample being unwound, for the libdwfl callbacks. */
	const struct unwind_regs *regs;
	const uint8_t *stack;
	size_t stack_len;
	uint64_t stack_limit;
	/* What the memory reads of the frame being unwound ran into. */
	bool step_truncated, step_bad;

	/* Inlined calls by (module, pc), shared by both unwinding modes; reset with the Dwfl. */
	struct inline_names *inl;
	/* unwinder_load_debuginfo's indexing: when it began, and until when it may go on (mono_ns;
	 * lowered by unwinder_finish_loading from another thread). */
	uint64_t index_started;
	_Atomic uint64_t index_until;
	/* A stripped module's separate debug file (unwinder_set_debug_file), by build id. */
	char *debug_path;
	uint8_t debug_id[20];
	int debug_id_len;
};

/* Every module is reported with an open fd, so libdwfl never has to look a file up. */
static int find_elf_none(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
			 char **file_name, Elf **elfp)
{
	(void)mod;
	(void)userdata;
	(void)modname;
	(void)base;
	*file_name = NULL;
	*elfp = NULL;
	return -1;
}

/* The debug file given for a module's build id (each module's userdata is its unwinder), else
 * libdwfl's own search: build-id tree, .gnu_debuglink, debuginfod. */
static int find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
			  const char *file_name, const char *debuglink_file,
			  GElf_Word debuglink_crc, char **debuginfo_file_name)
{
	const struct unwinder *u = *userdata;
	const unsigned char *id;
	GElf_Addr id_vaddr;
	int len, fd;

	if (u && u->debug_path && (len = dwfl_module_build_id(mod, &id, &id_vaddr)) > 0 &&
	    len == u->debug_id_len && !memcmp(id, u->debug_id, (size_t)len)) {
		fd = open(u->debug_path, O_RDONLY | O_CLOEXEC);
		*debuginfo_file_name = fd >= 0 ? strdup(u->debug_path) : NULL;
		if (fd >= 0)
			return fd;
	}
	return dwfl_standard_find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file,
					    debuglink_crc, debuginfo_file_name);
}

static char *debuginfo_path;

static const Dwfl_Callbacks dwfl_callbacks = {
    .find_elf = find_elf_none,
    .find_debuginfo = find_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = &debuginfo_path,
};

/* ---- libdwfl thread callbacks: one thread, whose state is the sample being unwound ---- */

static pid_t cb_next_thread(Dwfl *dwfl, void *arg, void **thread_argp)
{
	if (*thread_argp)
		return 0;
	*thread_argp = arg;
	return dwfl_pid(dwfl);
}

static bool cb_get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_argp)
{
	(void)dwfl;
	(void)tid;
	*thread_argp = arg;
	return true;
}

/*
 * Reads an address that is not on the captured stack from the file behind it, which only
 * gives what the process sees for segments it cannot have written: read-only PT_LOADs.
 */
static bool read_file_word(Dwfl *dwfl, uint64_t addr, Dwarf_Word *out)
{
	Dwfl_Module *mod = dwfl_addrmodule(dwfl, addr);
	GElf_Addr bias;
	size_t phnum, size;
	Elf *elf;

	if (!mod)
		return false;
	elf = dwfl_module_getelf(mod, &bias);
	if (!elf || elf_getphdrnum(elf, &phnum) != 0)
		return false;
	for (size_t i = 0; i < phnum; i++) {
		GElf_Phdr mem, *ph = gelf_getphdr(elf, (int)i, &mem);
		uint64_t vaddr = addr - bias;

		if (!ph || ph->p_type != PT_LOAD || (ph->p_flags & PF_W))
			continue;
		if (vaddr < ph->p_vaddr || ph->p_filesz < sizeof(*out) ||
		    vaddr - ph->p_vaddr > ph->p_filesz - sizeof(*out))
			continue;
		const char *raw = elf_rawfile(elf, &size);
		uint64_t off = ph->p_offset + (vaddr - ph->p_vaddr);

		if (!raw || off > size || size - off < sizeof(*out))
			return false;
		memcpy(out, raw + off, sizeof(*out));
		return true;
	}
	return false;
}

static bool cb_memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
	struct unwinder *u = arg;
	uint64_t sp = u->regs->sp;

	if (addr >= sp && addr - sp <= u->stack_len &&
	    u->stack_len - (addr - sp) >= sizeof(*result)) {
		memcpy(result, u->stack + (addr - sp), sizeof(*result));
		return true;
	}
	if (read_file_word(dwfl, addr, result))
		return true;
	/*
	 * libdwfl does not say which register a failed read was for, and treats an unreadable
	 * return address as the end of the stack, so remember why reads failed to tell a
	 * truncated capture from a complete walk.
	 */
	if (addr >= sp && addr < u->stack_limit)
		u->step_truncated = true;
	else
		u->step_bad = true;
	return false;
}

static bool cb_set_initial_registers(Dwfl_Thread *thread, void *arg)
{
	struct unwinder *u = arg;
	Dwarf_Word regs[2] = {u->regs->bp, u->regs->sp}; /* DWARF 6, 7 */

	/*
	 * Only rsp (for the CFA), rbp (the CFA of frame-pointer functions) and rip are needed:
	 * registers left unset are "unknown", and x86-64 CFI does not compute a CFA from others.
	 */
	if (!dwfl_thread_state_registers(thread, DWARF_REG_RBP, 2, regs))
		return false;
	dwfl_thread_state_register_pc(thread, u->regs->ip);
	return true;
}

static const Dwfl_Thread_Callbacks thread_callbacks = {
    .next_thread = cb_next_thread,
    .get_thread = cb_get_thread,
    .memory_read = cb_memory_read,
    .set_initial_registers = cb_set_initial_registers,
};

/* ---- Module reporting ---- */

/* The kernel's vDSO, the same image in every x86-64 process: report our own copy. */
int vdso_memfd(void)
{
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)getauxval(AT_SYSINFO_EHDR);
	const Elf64_Phdr *ph;
	uint64_t size;
	int fd;

	if (!eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0)
		return -ENOENT;
	size = eh->e_shoff + (uint64_t)eh->e_shnum * eh->e_shentsize;
	ph = (const Elf64_Phdr *)((const char *)eh + eh->e_phoff);
	for (unsigned int i = 0; i < eh->e_phnum; i++)
		if (ph[i].p_type == PT_LOAD && ph[i].p_offset + ph[i].p_filesz > size)
			size = ph[i].p_offset + ph[i].p_filesz;
	if (size > (1u << 20))
		return -EINVAL;
	fd = memfd_create("dial9-vdso", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, eh, size) != (ssize_t)size) {
		int err = errno ? -errno : -EIO;

		close(fd);
		return err;
	}
	return fd;
}

static bool map_is_vdso(const struct proc_map *m)
{
	return m->path && strcmp(m->path, "[vdso]") == 0;
}

static bool map_wanted(const struct proc_map *m)
{
	return m->perms[2] == 'x' && (proc_map_is_file(m) || map_is_vdso(m));
}

static bool rec_matches(const struct module_rec *r, const struct proc_map *m)
{
	if (r->start != m->start || r->pgoff != m->pgoff)
		return false;
	if (r->is_vdso || map_is_vdso(m))
		return r->is_vdso && map_is_vdso(m);
	return r->inode == m->inode && r->dev_major == m->dev_major && r->dev_minor == m->dev_minor;
}

static bool same_file(const struct module_rec *a, const struct module_rec *b)
{
	if (a->is_vdso || b->is_vdso)
		return a->is_vdso && b->is_vdso;
	return a->inode == b->inode && a->dev_major == b->dev_major && a->dev_minor == b->dev_minor;
}

/*
 * The load bias of the ELF file mapped by executable mapping m: runtime address - p_vaddr. The
 * mapping's file offset falls into one PT_LOAD (rounded down to a page by mmap).
 */
static int elf_bias(Elf *elf, const struct proc_map *m, uint64_t *bias)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	GElf_Ehdr eh;
	size_t phnum;

	if (elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &eh))
		return -ENOEXEC;
	if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64 ||
	    (eh.e_type != ET_EXEC && eh.e_type != ET_DYN))
		return -ENOEXEC;
	if (elf_getphdrnum(elf, &phnum) != 0)
		return -ENOEXEC;
	for (size_t i = 0; i < phnum; i++) {
		GElf_Phdr mem, *ph = gelf_getphdr(elf, (int)i, &mem);

		if (!ph || ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
			continue;
		if (m->pgoff < (ph->p_offset & ~(page - 1)) ||
		    m->pgoff >= ph->p_offset + ph->p_filesz)
			continue;
		*bias = m->start - m->pgoff + ph->p_offset - ph->p_vaddr;
		return 0;
	}
	return -ENOENT;
}

/*
 * Reports the file behind executable mapping m to dwfl and fills rec. A file already reported
 * at the same bias (several executable mappings of one file) shares its module.
 */
static int report_mapping(struct unwinder *u, Dwfl *dwfl, const struct proc_map *m,
			  const struct module_rec *done, size_t ndone, struct module_rec *rec)
{
	const char *name = m->path;
	Dwfl_Module *mod;
	void **userdata;
	Elf *elf;
	int fd, err;

	memset(rec, 0, sizeof(*rec));
	rec->dev_major = m->dev_major;
	rec->dev_minor = m->dev_minor;
	rec->inode = m->inode;
	rec->start = m->start;
	rec->pgoff = m->pgoff;
	rec->is_vdso = map_is_vdso(m);

	fd = rec->is_vdso ? vdso_memfd() : proc_open_mapped_file(u->pid, m);
	if (fd < 0)
		return fd;
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf) {
		close(fd);
		return -ENOEXEC;
	}
	err = elf_bias(elf, m, &rec->bias);
	elf_end(elf);
	if (err) {
		close(fd);
		return err;
	}
	for (size_t i = 0; i < ndone; i++) {
		if (done[i].mod && same_file(&done[i], rec) && done[i].bias == rec->bias) {
			rec->mod = done[i].mod;
			close(fd);
			return 0;
		}
	}
	/* Consumes fd on success. */
	mod = dwfl_report_elf(dwfl, name, m->path, fd, rec->bias, true);
	if (!mod) {
		close(fd);
		return -EINVAL;
	}
	dwfl_module_info(mod, &userdata, NULL, NULL, NULL, NULL, NULL, NULL);
	*userdata = u;
	rec->mod = mod;
	return 0;
}

/*
 * Brings the modules in line with the maps. New executable mappings are added to the current
 * Dwfl, keeping everything parsed so far; a module that went away or moved means a new Dwfl
 * (libdwfl has no way to drop one module), which is rare: dlclose().
 */
static int refresh(struct unwinder *u, bool force, bool *changed)
{
	struct module_rec *recs = NULL;
	struct proc_map *maps;
	size_t nmaps, nrecs = 0, nwanted = 0;
	bool rebuild = !u->dwfl, added = false;
	uint64_t now = mono_ns();
	Dwfl *dwfl;
	int err;

	*changed = false;
	if (!force && u->dwfl && now - u->last_refresh_ns < UNWINDER_REFRESH_MS * 1000000ull)
		return 0;
	u->last_refresh_ns = now;
	err = proc_maps_read(u->pid, &maps, &nmaps);
	if (err)
		return err;

	for (size_t i = 0; i < nmaps; i++)
		nwanted += map_wanted(&maps[i]);
	recs = calloc(nwanted ? nwanted : 1, sizeof(*recs));
	if (!recs) {
		proc_maps_free(maps, nmaps);
		return -ENOMEM;
	}

	/* Which known modules are still mapped where they were. */
	for (size_t j = 0; j < u->nmods && !rebuild; j++) {
		bool found = false;

		for (size_t i = 0; i < nmaps && !found; i++)
			found = map_wanted(&maps[i]) && rec_matches(&u->mods[j], &maps[i]);
		if (!found && u->mods[j].mod)
			rebuild = true;
	}

	if (rebuild) {
		dwfl = dwfl_begin(&dwfl_callbacks);
		if (!dwfl) {
			err = -ENOMEM;
			goto out;
		}
		dwfl_report_begin(dwfl);
	} else {
		dwfl = u->dwfl;
		dwfl_report_begin_add(dwfl);
	}

	for (size_t i = 0; i < nmaps; i++) {
		const struct module_rec *old = NULL;

		if (!map_wanted(&maps[i]))
			continue;
		for (size_t j = 0; j < u->nmods && !rebuild && !old; j++)
			if (rec_matches(&u->mods[j], &maps[i]))
				old = &u->mods[j];
		if (old) {
			recs[nrecs++] = *old;
			continue;
		}
		/* Files that fail are kept as records without a module, so not retried. */
		report_mapping(u, dwfl, &maps[i], recs, nrecs, &recs[nrecs]);
		added |= recs[nrecs].mod != NULL;
		nrecs++;
	}

	if (dwfl_report_end(dwfl, NULL, NULL) != 0) {
		err = -EINVAL;
		if (rebuild)
			dwfl_end(dwfl);
		goto out;
	}
	if (rebuild) {
		if (!dwfl_attach_state(dwfl, u->arch_elf, u->pid, &thread_callbacks, u)) {
			dwfl_end(dwfl);
			err = -EINVAL;
			goto out;
		}
		inline_names_forget_modules(u->inl);
		dwfl_end(u->dwfl);
		u->dwfl = dwfl;
		u->generation++;
	}
	/* The inline cache is keyed by module: modules added beside the known ones leave it valid.
	 */
	*changed = rebuild || added;
	free(u->mods);
	u->mods = recs;
	u->nmods = nrecs;
	recs = NULL;
	proc_maps_free(u->maps, u->nmaps);
	u->maps = maps;
	u->nmaps = nmaps;
	maps = NULL;
	err = 0;
out:
	free(recs);
	if (maps)
		proc_maps_free(maps, nmaps);
	return err;
}

int unwinder_refresh(struct unwinder *u)
{
	bool changed;

	if (!u)
		return -EINVAL;
	return refresh(u, true, &changed);
}

struct unwinder *unwinder_new(int pid)
{
	struct unwinder *u;
	int err;

	if (pid <= 0) {
		errno = EINVAL;
		return NULL;
	}
	elf_version(EV_CURRENT);
	u = calloc(1, sizeof(*u));
	if (!u) {
		errno = ENOMEM;
		return NULL;
	}
	u->pid = pid;
	u->index_started = mono_ns();
	u->index_until = UINT64_MAX;
	u->inl = inline_names_new();
	if (!u->inl) {
		free(u);
		errno = ENOMEM;
		return NULL;
	}
	memcpy(u->arch_ehdr.e_ident, ELFMAG, SELFMAG);
	u->arch_ehdr.e_ident[EI_CLASS] = ELFCLASS64;
	u->arch_ehdr.e_ident[EI_DATA] = ELFDATA2LSB;
	u->arch_ehdr.e_ident[EI_VERSION] = EV_CURRENT;
	u->arch_ehdr.e_type = ET_EXEC;
	u->arch_ehdr.e_machine = EM_X86_64;
	u->arch_ehdr.e_version = EV_CURRENT;
	u->arch_ehdr.e_ehsize = sizeof(Elf64_Ehdr);
	/*
	 * Passing our own ELF to dwfl_attach_state makes the Dwfl own its backend; with NULL it
	 * borrows one module's, which would dangle once that module is gone.
	 */
	u->arch_elf = elf_memory((char *)&u->arch_ehdr, sizeof(u->arch_ehdr));
	if (!u->arch_elf) {
		inline_names_free(u->inl);
		free(u);
		errno = ENOMEM;
		return NULL;
	}
	err = unwinder_refresh(u);
	if (err) {
		unwinder_free(u);
		errno = -err;
		return NULL;
	}
	return u;
}

void unwinder_free(struct unwinder *u)
{
	if (!u)
		return;
	inline_names_free(u->inl);
	if (u->dwfl)
		dwfl_end(u->dwfl);
	elf_end(u->arch_elf);
	free(u->mods);
	proc_maps_free(u->maps, u->nmaps);
	free(u->debug_path);
	free(u);
}

int unwinder_set_debug_file(struct unwinder *u, const char *path, const uint8_t *build_id,
			    size_t len)
{
	if (!len || len > sizeof(u->debug_id))
		return -EINVAL;
	free(u->debug_path);
	u->debug_path = strdup(path);
	if (!u->debug_path)
		return -ENOMEM;
	memcpy(u->debug_id, build_id, len);
	u->debug_id_len = (int)len;
	return 0;
}

size_t unwinder_nmodules(const struct unwinder *u)
{
	size_t n = 0;

	for (size_t i = 0; u && i < u->nmods; i++) {
		bool dup = false;

		if (!u->mods[i].mod)
			continue;
		for (size_t j = 0; j < i && !dup; j++)
			dup = u->mods[j].mod == u->mods[i].mod;
		n += !dup;
	}
	return n;
}

unsigned int unwinder_generation(const struct unwinder *u)
{
	return u ? u->generation : 0;
}

/* ---- Unwinding ---- */

struct walk {
	struct unwinder *u;
	uint64_t *pcs;
	size_t max, n;
	uint64_t prev_sp;
	bool max_hit, sp_backwards, pc_failed, unknown_pc;
};

static int frame_cb(Dwfl_Frame *state, void *arg)
{
	struct walk *w = arg;
	Dwarf_Addr pc;
	Dwarf_Word sp;
	bool have_sp;

	if (!dwfl_frame_pc(state, &pc, NULL)) {
		w->pc_failed = true;
		return DWARF_CB_ABORT;
	}
	if (w->n == w->max) {
		w->max_hit = true;
		return DWARF_CB_ABORT;
	}
	/* Every call pushes a return address, so a caller's sp is above its callee's. */
	have_sp = dwfl_frame_reg(state, DWARF_REG_RSP, &sp) == 0;
	if (w->n > 0 && have_sp && sp <= w->prev_sp) {
		w->sp_backwards = true;
		return DWARF_CB_ABORT;
	}
	if (have_sp)
		w->prev_sp = sp;
	if (!dwfl_addrmodule(w->u->dwfl, w->n ? pc - 1 : pc))
		w->unknown_pc = true;
	w->pcs[w->n++] = pc;
	/* The reads libdwfl makes after this unwind the frame just recorded. */
	w->u->step_truncated = false;
	w->u->step_bad = false;
	return DWARF_CB_OK;
}

static bool has_cfi(Dwfl_Module *mod, uint64_t pc)
{
	Dwarf_CFI *cfi[2];
	Dwarf_Addr bias[2];

	cfi[0] = dwfl_module_eh_cfi(mod, &bias[0]);
	cfi[1] = dwfl_module_dwarf_cfi(mod, &bias[1]);
	for (int i = 0; i < 2; i++) {
		Dwarf_Frame *frame;

		if (cfi[i] && dwarf_cfi_addrframe(cfi[i], pc - bias[i], &frame) == 0) {
			free(frame);
			return true;
		}
	}
	return false;
}

static enum unwind_stop classify(struct unwinder *u, const struct walk *w, int ret)
{
	uint64_t pc;
	Dwfl_Module *mod;

	if (w->max_hit)
		return UNWIND_MAX_FRAMES;
	if (w->sp_backwards)
		return UNWIND_BAD_MEMORY;
	if (w->pc_failed || w->n == 0)
		return UNWIND_ERROR;
	/* Checked before ret == 0: an unreadable return address ends the walk "normally". */
	if (u->step_truncated)
		return UNWIND_TRUNCATED_STACK;
	if (ret == 0)
		return u->step_bad ? UNWIND_BAD_MEMORY : UNWIND_OK;

	pc = w->pcs[w->n - 1];
	if (w->n > 1)
		pc--;
	mod = dwfl_addrmodule(u->dwfl, pc);
	if (!mod)
		return UNWIND_UNKNOWN_PC;
	if (!has_cfi(mod, pc))
		return UNWIND_NO_CFI;
	return u->step_bad ? UNWIND_BAD_MEMORY : UNWIND_ERROR;
}

static int walk_once(struct unwinder *u, struct walk *w)
{
	*w = (struct walk){.u = u, .pcs = w->pcs, .max = w->max};
	u->step_truncated = false;
	u->step_bad = false;
	return dwfl_getthread_frames(u->dwfl, u->pid, frame_cb, w);
}

int unwinder_unwind(struct unwinder *u, const struct unwind_regs *regs, const uint8_t *stack,
		    size_t stack_len, uint64_t *pcs, size_t max_pcs, size_t *npcs,
		    enum unwind_stop *stop)
{
	struct walk w = {.u = u, .pcs = pcs, .max = max_pcs};
	const struct proc_map *sm;
	bool changed = false;
	int ret;

	if (!u || !regs || (!stack && stack_len) || !pcs || !max_pcs || !npcs || !stop)
		return -EINVAL;
	*npcs = 0;
	*stop = UNWIND_ERROR;
	if (!u->dwfl)
		return -EINVAL;
	if (regs->sp + stack_len < regs->sp)
		stack_len = UINT64_MAX - regs->sp;

	u->regs = regs;
	u->stack = stack;
	u->stack_len = stack_len;
	sm = proc_maps_find(u->maps, u->nmaps, regs->sp);
	if (sm && !sm->path) /* anonymous: a thread stack */
		u->stack_limit = sm->end;
	else if (sm && strcmp(sm->path, "[stack]") == 0)
		u->stack_limit = sm->end;
	else
		u->stack_limit = regs->sp + STACK_WINDOW_FALLBACK < regs->sp
				     ? UINT64_MAX
				     : regs->sp + STACK_WINDOW_FALLBACK;

	ret = walk_once(u, &w);
	/* A pc in no module may be in a library mapped since the last maps read. */
	if (w.unknown_pc && refresh(u, false, &changed) == 0 && changed)
		ret = walk_once(u, &w);

	*npcs = w.n;
	*stop = classify(u, &w, ret);
	u->regs = NULL;
	u->stack = NULL;
	return 0;
}

const char *unwind_stop_name(enum unwind_stop stop)
{
	switch (stop) {
	case UNWIND_OK:
		return "ok";
	case UNWIND_TRUNCATED_STACK:
		return "truncated-stack";
	case UNWIND_NO_CFI:
		return "no-cfi";
	case UNWIND_UNKNOWN_PC:
		return "unknown-pc";
	case UNWIND_BAD_MEMORY:
		return "bad-memory";
	case UNWIND_MAX_FRAMES:
		return "max-frames";
	case UNWIND_ERROR:
		return "error";
	}
	return "unknown";
}

/* ---- Inline frames: the module of the pc, then inline_names ---- */

/*
 * How long the start-up may spend indexing the modules' CUs for inline names. Indexed on the
 * first samples instead, the CUs they touch made the tool's CPU in a second of the run several
 * times its usual, spent against the target's budget (bench/RESULTS.md, "The always-on
 * programs' reads" and "The start-up's index of inline names on a busy target"); past these
 * bounds, a large program's other CUs are indexed on their first lookups. The indexing goes on
 * while the rest of the setup runs, and then until UNWIND_INDEX_NS from its start; and it stops
 * at UNWIND_INDEX_CPU_NS of its own CPU. A bound of wall time alone left most of a busy
 * target's program to its samples: with many more busy threads than CPUs the indexing gets a
 * few percent of a CPU.
 */
#define UNWIND_INDEX_NS 250000000ULL
#define UNWIND_INDEX_CPU_NS 250000000ULL

static bool index_time_left(struct unwinder *u, uint64_t cpu0)
{
	return mono_ns() < u->index_until && thread_cpu_ns() - cpu0 < UNWIND_INDEX_CPU_NS;
}

int unwinder_load_debuginfo(struct unwinder *u)
{
	uint64_t cpu0 = thread_cpu_ns();
	Dwarf_Addr bias;
	size_t n = 0;

	for (size_t i = 0; u && i < u->nmods; i++) {
		Dwarf_Die *cu = NULL;

		if (!u->mods[i].mod || !dwfl_module_getdwarf(u->mods[i].mod, &bias))
			continue;
		n++;
		while (index_time_left(u, cpu0) &&
		       inline_names_index_next(u->inl, u->mods[i].mod, &cu) > 0)
			;
	}
	return (int)n;
}

void unwinder_finish_loading(struct unwinder *u)
{
	uint64_t by = u->index_started + UNWIND_INDEX_NS;

	if (by < u->index_until)
		u->index_until = by;
}

int unwinder_inline_frames(struct unwinder *u, uint64_t pc, bool is_return_address,
			   struct inline_frame *out, size_t max, size_t *n)
{
	Dwfl_Module *mod;
	bool changed;

	if (!u || !n || (!out && max))
		return -EINVAL;
	*n = 0;
	if (!u->dwfl)
		return -EINVAL;
	if (is_return_address)
		pc--;
	mod = dwfl_addrmodule(u->dwfl, pc);
	if (!mod && refresh(u, false, &changed) == 0 && changed)
		mod = dwfl_addrmodule(u->dwfl, pc);
	if (!mod)
		return 0;
	return inline_names_get(u->inl, mod, pc, out, max, n);
}
