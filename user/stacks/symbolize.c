// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/auxv.h>

#include "demangle.h"
#include "symbolize.h"
#include "util_clock.h"

struct module {
	char *path;
	uint32_t dev_major, dev_minor;
	uint64_t inode;
	bool deleted;
	bool is_vdso;
	bool tried; /* ELF open attempted; failures are not retried on every sample */
	struct elf_file *elf;
	char **names; /* demangled name per elf_file_syms() index, filled on first use */
	size_t nnames;
	char **alias_names; /* the same per elf_file_aliases() index */
	size_t nalias_names;
};

/*
 * Addresses already resolved, direct-mapped by address: a service's samples repeat the same
 * few hundred return addresses, and each lookup otherwise searches the maps and then the
 * symbol table (~9% of the loader's CPU at 99 Hz per worker). An entry is good for the maps
 * it was resolved against (gen): a re-read may have moved anything.
 */
#define SYM_CACHE_BITS 12

struct sym_cache_entry {
	uint64_t addr;
	uint64_t gen; /* 0: empty */
	int rc;
	struct sym_info info;
};

struct symbolizer {
	int pid;
	struct proc_map *maps;
	size_t nmaps;
	struct module **map_mod; /* module of maps[i], NULL for anonymous */
	struct module **mods;	 /* pointers, so module strings survive growth */
	size_t nmods, capmods;
	uint64_t last_read_ns;
	bool read_once;
	uint64_t gen; /* maps read so far */
	struct sym_cache_entry *cache;
	/* A stripped module's separate debug file (symbolizer_set_debug_file), by build id. */
	char *debug_path;
	uint8_t debug_id[ELF_BUILD_ID_MAX];
	size_t debug_id_len;
};

struct symbolizer *symbolizer_new(int pid)
{
	struct symbolizer *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->pid = pid;
	/* Without it, every address is looked up anew. */
	s->cache = calloc((size_t)1 << SYM_CACHE_BITS, sizeof(*s->cache));
	return s;
}

static void module_free(struct module *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->nnames; i++)
		free(m->names[i]);
	free(m->names);
	for (size_t i = 0; i < m->nalias_names; i++)
		free(m->alias_names[i]);
	free(m->alias_names);
	elf_file_close(m->elf);
	free(m->path);
	free(m);
}

void symbolizer_free(struct symbolizer *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nmods; i++)
		module_free(s->mods[i]);
	free(s->mods);
	free(s->map_mod);
	proc_maps_free(s->maps, s->nmaps);
	free(s->cache);
	free(s->debug_path);
	free(s);
}

int symbolizer_set_debug_file(struct symbolizer *s, const char *path)
{
	struct elf_file *ef;
	const uint8_t *id;
	int err = elf_file_open(path, &ef);

	if (err)
		return err;
	s->debug_id_len = elf_file_build_id(ef, &id);
	memcpy(s->debug_id, id, s->debug_id_len);
	elf_file_close(ef);
	free(s->debug_path);
	s->debug_path = strdup(path);
	return s->debug_path ? 0 : -ENOMEM;
}

/* A stripped module takes its function symbols from the debug file of its build id. */
static void use_debug_file(struct symbolizer *s, struct elf_file *ef)
{
	struct elf_file *dbg;
	const uint8_t *id;
	size_t len;

	if (!s->debug_path || elf_file_has_symtab(ef))
		return;
	len = elf_file_build_id(ef, &id);
	if (!len || len != s->debug_id_len || memcmp(id, s->debug_id, len))
		return;
	if (elf_file_open(s->debug_path, &dbg))
		return;
	elf_file_take_syms(ef, dbg);
	elf_file_close(dbg);
}

static bool module_matches(const struct module *mod, const struct proc_map *m)
{
	if (mod->inode != m->inode || mod->dev_major != m->dev_major ||
	    mod->dev_minor != m->dev_minor)
		return false;
	/* Without an inode (pseudo mappings) only the name tells them apart. */
	return m->inode != 0 || strcmp(mod->path, m->path) == 0;
}

static struct module *get_module(struct symbolizer *s, const struct proc_map *m)
{
	struct module *mod;

	for (size_t i = 0; i < s->nmods; i++)
		if (module_matches(s->mods[i], m))
			return s->mods[i];

	if (s->nmods == s->capmods) {
		size_t ncap = s->capmods ? s->capmods * 2 : 16;
		struct module **tmp = realloc(s->mods, ncap * sizeof(*tmp));

		if (!tmp)
			return NULL;
		s->mods = tmp;
		s->capmods = ncap;
	}
	mod = calloc(1, sizeof(*mod));
	if (!mod)
		return NULL;
	mod->path = strdup(m->path);
	if (!mod->path) {
		free(mod);
		return NULL;
	}
	mod->dev_major = m->dev_major;
	mod->dev_minor = m->dev_minor;
	mod->inode = m->inode;
	mod->deleted = m->deleted;
	mod->is_vdso = strcmp(m->path, "[vdso]") == 0;
	s->mods[s->nmods++] = mod;
	return mod;
}

int symbolizer_refresh(struct symbolizer *s)
{
	struct proc_map *maps;
	struct module **map_mod;
	size_t n;
	int err;

	s->last_read_ns = mono_ns();
	s->read_once = true;
	err = proc_maps_read(s->pid, &maps, &n);
	if (err)
		return err;
	map_mod = calloc(n ? n : 1, sizeof(*map_mod));
	if (!map_mod) {
		proc_maps_free(maps, n);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		if (!maps[i].path)
			continue;
		map_mod[i] = get_module(s, &maps[i]);
		if (!map_mod[i]) {
			free(map_mod);
			proc_maps_free(maps, n);
			return -ENOMEM;
		}
	}
	proc_maps_free(s->maps, s->nmaps);
	free(s->map_mod);
	s->maps = maps;
	s->nmaps = n;
	s->map_mod = map_mod;
	s->gen++;
	return 0;
}

/* Finds addr's mapping, re-reading the maps if it is unknown and the last read is old enough:
 * covers libraries dlopen()ed after the first read without a read per unknown sample. */
static const struct proc_map *find_map(struct symbolizer *s, uint64_t addr, int *err)
{
	const struct proc_map *m;

	*err = 0;
	if (!s->read_once)
		*err = symbolizer_refresh(s);
	m = proc_maps_find(s->maps, s->nmaps, addr);
	if (m || !s->read_once)
		return m;
	if (mono_ns() - s->last_read_ns < SYMBOLIZER_REFRESH_MS * 1000000ull)
		return NULL;
	*err = symbolizer_refresh(s);
	return proc_maps_find(s->maps, s->nmaps, addr);
}

/*
 * The vDSO (clock_gettime() behind Instant::now()) has no file; the kernel gives every process
 * of one ABI the same image, so parse our own copy. A differing size means a different ABI
 * (a 32-bit target), whose image we do not have.
 */
static int open_vdso(struct symbolizer *s, struct elf_file **out)
{
	uint64_t base = getauxval(AT_SYSINFO_EHDR), target_size = 0;
	const struct proc_map *own;
	struct proc_map *maps;
	size_t n;
	int err;

	if (!base)
		return -ENOENT;
	for (size_t i = 0; i < s->nmaps; i++) {
		if (s->maps[i].path && strcmp(s->maps[i].path, "[vdso]") == 0) {
			target_size = s->maps[i].end - s->maps[i].start;
			break;
		}
	}
	err = proc_maps_read(getpid(), &maps, &n);
	if (err)
		return err;
	own = proc_maps_find(maps, n, base);
	if (!own || own->start != base || own->end - own->start != target_size)
		err = -ENOENT;
	else
		err = elf_file_open_mem((const void *)(uintptr_t)base, own->end - own->start, out);
	proc_maps_free(maps, n);
	return err;
}

static struct elf_file *module_elf(struct symbolizer *s, struct module *mod,
				   const struct proc_map *m)
{
	int fd, err;

	if (mod->tried)
		return mod->elf;
	mod->tried = true;
	if (mod->is_vdso) {
		err = open_vdso(s, &mod->elf);
	} else if (proc_map_is_file(m)) {
		fd = proc_open_mapped_file(s->pid, m);
		err = fd < 0 ? fd : elf_file_open_fd(fd, &mod->elf);
	} else {
		err = -ENOENT;
	}
	if (err)
		mod->elf = NULL;
	else
		use_debug_file(s, mod->elf);
	return mod->elf;
}

/* The demangled name of entry idx of a symbol table of total entries, whose names are cached in
 * *names (allocated on first use). */
static const char *cached_name(char ***names, size_t *nnames, size_t total,
			       const struct elf_sym *sym, size_t idx)
{
	if (!*names) {
		*names = calloc(total ? total : 1, sizeof(**names));
		if (!*names)
			return NULL;
		*nnames = total;
	}
	if (!(*names)[idx])
		(*names)[idx] = demangle(sym->name);
	return (*names)[idx];
}

/* The demangled name of symbol idx of mod, demangling it on first use. */
static const char *sym_name(struct module *mod, const struct elf_sym *sym, size_t idx)
{
	size_t n;

	elf_file_syms(mod->elf, &n);
	return cached_name(&mod->names, &mod->nnames, n, sym, idx);
}

/* The function symbol containing addr, its module and vaddr; fills out's module and
 * file_offset. Returns 0, or -ENOENT (or why the maps could not be read). */
static int locate(struct symbolizer *s, uint64_t addr, struct sym_info *out, struct module **modp,
		  const struct elf_sym **symp, uint64_t *vaddr)
{
	const struct proc_map *m;
	struct module *mod;
	struct elf_file *ef;
	int err;

	memset(out, 0, sizeof(*out));
	m = find_map(s, addr, &err);
	if (!m)
		return err ? err : -ENOENT;
	mod = s->map_mod[m - s->maps];
	out->file_offset = addr - m->start + m->pgoff;
	if (!mod)
		return -ENOENT;
	out->module = mod->path;

	ef = module_elf(s, mod, m);
	if (!ef || elf_file_offset_to_vaddr(ef, out->file_offset, vaddr))
		return -ENOENT;
	*symp = elf_file_lookup(ef, *vaddr);
	*modp = mod;
	return *symp ? 0 : -ENOENT;
}

static int resolve_uncached(struct symbolizer *s, uint64_t addr, struct sym_info *out)
{
	const struct elf_sym *sym, *syms;
	struct module *mod;
	uint64_t vaddr;
	size_t nsyms, nal;
	int err = locate(s, addr, out, &mod, &sym, &vaddr);

	if (err)
		return err;
	syms = elf_file_syms(mod->elf, &nsyms);
	out->name = sym_name(mod, sym, (size_t)(sym - syms));
	if (!out->name)
		return -ENOMEM;
	out->sym_offset = vaddr - sym->addr;
	elf_file_aliases_at(mod->elf, sym->addr, &nal);
	out->merged = nal > 0;
	return 0;
}

bool symbolizer_whole_type_at(const char *name, size_t at, size_t len)
{
	return at > 0 && strchr("<(,[& ", name[at - 1]) && name[at + len] &&
	       strchr(">),]; ", name[at + len]);
}

/* Whether name holds type as a whole type (symbolizer_whole_type_at). */
static bool holds_type(const char *name, const char *type)
{
	size_t len = strlen(type);

	for (const char *p = strstr(name, type); p && len; p = strstr(p + 1, type))
		if (symbolizer_whole_type_at(name, (size_t)(p - name), len))
			return true;
	return false;
}

/* Of the names offered one by one: the first that holds type and also (if any), returned
 * at once (true); else the first that holds type, kept in *first. */
static bool pick_name(const char *name, const char *type, const char *also, const char **first)
{
	if (!name || !holds_type(name, type))
		return false;
	if (!also || holds_type(name, also)) {
		*first = name;
		return true;
	}
	if (!*first)
		*first = name;
	return false;
}

const char *symbolizer_name_with(struct symbolizer *s, uint64_t addr, const char *type,
				 const char *also)
{
	const struct elf_sym *sym, *syms, *al;
	const char *name, *first = NULL;
	struct sym_info si;
	struct module *mod;
	uint64_t vaddr;
	size_t n, nal;

	if (locate(s, addr, &si, &mod, &sym, &vaddr))
		return NULL;
	syms = elf_file_syms(mod->elf, &n);
	name = sym_name(mod, sym, (size_t)(sym - syms));
	if (pick_name(name, type, also, &first))
		return first;
	syms = elf_file_aliases(mod->elf, &n);
	al = elf_file_aliases_at(mod->elf, sym->addr, &nal);
	for (size_t i = 0; i < nal; i++) {
		name = cached_name(&mod->alias_names, &mod->nalias_names, n, &al[i],
				   (size_t)(al + i - syms));
		if (pick_name(name, type, also, &first))
			return first;
	}
	return first;
}

int symbolizer_resolve(struct symbolizer *s, uint64_t addr, struct sym_info *out)
{
	struct sym_cache_entry *e;
	int rc;

	e = s->cache ? &s->cache[(addr * 0x9e3779b97f4a7c15ULL) >> (64 - SYM_CACHE_BITS)] : NULL;
	if (e && e->gen && e->gen == s->gen && e->addr == addr) {
		*out = e->info;
		return e->rc;
	}
	rc = resolve_uncached(s, addr, out);
	/* Not an address outside every mapping: a later re-read may find its library. Nor an
	 * error, which may pass. */
	if (e && (rc == 0 || (rc == -ENOENT && out->module))) {
		e->addr = addr;
		e->gen = s->gen;
		e->rc = rc;
		e->info = *out;
	}
	return rc;
}

const struct proc_map *symbolizer_maps(struct symbolizer *s, size_t *n)
{
	if (!s->read_once)
		symbolizer_refresh(s);
	*n = s->nmaps;
	return s->maps;
}

const struct elf_file *symbolizer_module_elf(struct symbolizer *s, uint64_t addr)
{
	const struct proc_map *m;
	struct module *mod;
	int err;

	m = find_map(s, addr, &err);
	if (!m)
		return NULL;
	mod = s->map_mod[m - s->maps];
	return mod ? module_elf(s, mod, m) : NULL;
}

int symbolizer_next_module(struct symbolizer *s, size_t *iter, struct sym_module *out)
{
	struct module *mod;

	if (!s->read_once)
		symbolizer_refresh(s);
	if (*iter >= s->nmods)
		return -ENOENT;
	mod = s->mods[(*iter)++];

	/* Opening needs a current mapping of the module (map_files/ is per mapping). */
	for (size_t i = 0; i < s->nmaps && !mod->tried; i++)
		if (s->map_mod[i] == mod)
			module_elf(s, mod, &s->maps[i]);

	memset(out, 0, sizeof(*out));
	out->path = mod->path;
	out->dev_major = mod->dev_major;
	out->dev_minor = mod->dev_minor;
	out->inode = mod->inode;
	out->deleted = mod->deleted;
	out->elf = mod->elf;
	if (mod->elf) {
		out->build_id_len = elf_file_build_id(mod->elf, &out->build_id);
		if (!out->build_id_len)
			out->build_id = NULL;
	}
	return 0;
}
