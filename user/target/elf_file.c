// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * ELF parsing for symbolization and uprobe attachment. Input may be hostile (a binary inside a
 * container), so every offset and size from the file is checked against the file's length before
 * libelf is asked to read or allocate anything.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <gelf.h>
#include <libelf.h>

#include "elf_file.h"

/* Real notes segments are a few hundred bytes; this bounds what a hostile one makes us read. */
#define MAX_NOTES_SIZE (1u << 20)
/* Nested sized functions (assembly entry points inside a bigger symbol) are looked for only
 * this far back, to keep lookups logarithmic on crafted symbol tables. */
#define LOOKBACK 16

struct elf_file {
	struct elf_sym *syms;
	size_t nsyms;
	struct elf_sym *aliases;
	size_t naliases;
	struct elf_load *loads;
	size_t nloads;
	char *strtab; /* copy of the string table that all names point into */
	uint16_t type;
	bool has_symtab;
	uint8_t build_id[ELF_BUILD_ID_MAX];
	size_t build_id_len;
	char *debuglink; /* .gnu_debuglink's file name, or NULL */
	uint32_t debuglink_crc;
};

struct raw_sym {
	uint64_t addr, size;
	size_t name; /* offset into strtab */
	int rank;    /* binding preference, lower is better */
};

/* Whether [off, off + size) lies within a file of file_size bytes. */
static bool in_file(uint64_t off, uint64_t size, uint64_t file_size)
{
	return off <= file_size && size <= file_size - off;
}

static bool scan_notes(Elf_Data *data, struct elf_file *ef)
{
	size_t off = 0, name_off, desc_off, next;
	GElf_Nhdr nh;

	if (!data || !data->d_buf)
		return false;
	while (off < data->d_size && (next = gelf_getnote(data, off, &nh, &name_off, &desc_off))) {
		const char *base = data->d_buf;

		/* gelf_getnote() already checked name and desc lie inside data. */
		if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == sizeof(ELF_NOTE_GNU) &&
		    memcmp(base + name_off, ELF_NOTE_GNU, sizeof(ELF_NOTE_GNU)) == 0 &&
		    nh.n_descsz > 0) {
			size_t len =
			    nh.n_descsz < ELF_BUILD_ID_MAX ? nh.n_descsz : ELF_BUILD_ID_MAX;

			memcpy(ef->build_id, base + desc_off, len);
			ef->build_id_len = len;
			return true;
		}
		if (next <= off)
			break;
		off = next;
	}
	return false;
}

static int parse_phdrs(Elf *elf, const GElf_Ehdr *eh, uint64_t file_size, struct elf_file *ef)
{
	size_t phnum, n = 0;
	GElf_Phdr ph;

	if (elf_getphdrnum(elf, &phnum) != 0)
		return -ENOEXEC;
	if (phnum == 0)
		return -ENOEXEC;
	if (eh->e_phentsize != gelf_fsize(elf, ELF_T_PHDR, 1, EV_CURRENT) ||
	    phnum > file_size / eh->e_phentsize || phnum > INT_MAX ||
	    !in_file(eh->e_phoff, (uint64_t)phnum * eh->e_phentsize, file_size))
		return -ENOEXEC;

	ef->loads = calloc(phnum, sizeof(*ef->loads));
	if (!ef->loads)
		return -ENOMEM;
	for (size_t i = 0; i < phnum; i++) {
		if (!gelf_getphdr(elf, (int)i, &ph))
			return -ENOEXEC;
		if (ph.p_type == PT_LOAD) {
			/* Segments must be in the file, or it was truncated. */
			if (!in_file(ph.p_offset, ph.p_filesz, file_size))
				return -ENOEXEC;
			ef->loads[n++] = (struct elf_load){
			    .offset = ph.p_offset,
			    .vaddr = ph.p_vaddr,
			    .filesz = ph.p_filesz,
			    .memsz = ph.p_memsz,
			    .flags = ph.p_flags,
			};
		} else if (ph.p_type == PT_NOTE && !ef->build_id_len &&
			   in_file(ph.p_offset, ph.p_filesz, file_size) &&
			   ph.p_filesz <= MAX_NOTES_SIZE) {
			Elf_Data *d =
			    elf_getdata_rawchunk(elf, (int64_t)ph.p_offset, ph.p_filesz,
						 ph.p_align == 8 ? ELF_T_NHDR8 : ELF_T_NHDR);

			scan_notes(d, ef);
		}
	}
	if (n == 0)
		return -ENOEXEC;
	ef->nloads = n;
	return 0;
}

static int bind_rank(unsigned char bind)
{
	/* WEAK ranks with GLOBAL: glibc exports its public names ("getpid") as weak aliases of
	 * global internal ones ("__getpid"). */
	switch (bind) {
	case STB_GLOBAL:
	case STB_WEAK:
	case STB_GNU_UNIQUE:
		return 0;
	default:
		return 1;
	}
}

static size_t leading_underscores(const char *s)
{
	size_t n = 0;

	while (s[n] == '_')
		n++;
	return n;
}

static int cmp_raw_sym(const void *a, const void *b, void *arg)
{
	const struct raw_sym *x = a, *y = b;
	const char *strtab = arg;
	size_t ux, uy;

	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	if (x->rank != y->rank)
		return x->rank - y->rank;
	if (x->size != y->size)
		return x->size > y->size ? -1 : 1;
	/* "getpid" reads better than "__getpid" or "__libc_getpid" for the same code. */
	ux = leading_underscores(strtab + x->name);
	uy = leading_underscores(strtab + y->name);
	if (ux != uy)
		return ux < uy ? -1 : 1;
	return strcmp(strtab + x->name, strtab + y->name);
}

/* Reads the function symbols of a SHT_SYMTAB or SHT_DYNSYM section. */
static int read_syms(Elf *elf, Elf_Scn *scn, const GElf_Shdr *sh, uint64_t file_size,
		     struct elf_file *ef)
{
	struct raw_sym *raw = NULL;
	size_t n, cnt = 0, nsyms = 0, naliases = 0;
	Elf_Data *data, *sdata;
	GElf_Shdr ssh;
	Elf_Scn *sscn;
	GElf_Sym sym;
	int err = -ENOEXEC;

	if (sh->sh_entsize != gelf_fsize(elf, ELF_T_SYM, 1, EV_CURRENT) ||
	    !in_file(sh->sh_offset, sh->sh_size, file_size))
		return -ENOEXEC;
	sscn = elf_getscn(elf, sh->sh_link);
	if (!sscn || !gelf_getshdr(sscn, &ssh) || ssh.sh_type != SHT_STRTAB ||
	    (ssh.sh_flags & SHF_COMPRESSED) || !in_file(ssh.sh_offset, ssh.sh_size, file_size))
		return -ENOEXEC;
	data = elf_getdata(scn, NULL);
	sdata = elf_getdata(sscn, NULL);
	if (!data || !sdata || (data->d_size && !data->d_buf) || (sdata->d_size && !sdata->d_buf))
		return -ENOEXEC;

	/* Names point into one copy of the string table: one allocation, and bounded by the file
	 * size however many symbols share a name. The extra NUL terminates every name. */
	free(ef->strtab);
	ef->strtab = malloc(sdata->d_size + 1);
	if (!ef->strtab)
		return -ENOMEM;
	if (sdata->d_size)
		memcpy(ef->strtab, sdata->d_buf, sdata->d_size);
	ef->strtab[sdata->d_size] = '\0';

	n = data->d_size / sh->sh_entsize;
	if (n > INT_MAX)
		return -ENOEXEC;
	raw = calloc(n ? n : 1, sizeof(*raw));
	if (!raw)
		return -ENOMEM;
	/* Index 0 is the reserved null symbol. */
	for (size_t i = 1; i < n; i++) {
		if (!gelf_getsym(data, (int)i, &sym))
			goto out;
		if (GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF ||
		    sym.st_value == 0 || sym.st_name == 0 || sym.st_name >= sdata->d_size ||
		    ef->strtab[sym.st_name] == '\0')
			continue;
		raw[cnt++] = (struct raw_sym){
		    .addr = sym.st_value,
		    .size = sym.st_size,
		    .name = sym.st_name,
		    .rank = bind_rank(GELF_ST_BIND(sym.st_info)),
		};
	}
	qsort_r(raw, cnt, sizeof(*raw), cmp_raw_sym, ef->strtab);

	for (size_t i = 0; i < cnt; i++) {
		if (i == 0 || raw[i].addr != raw[i - 1].addr)
			nsyms++;
		else
			naliases++;
	}
	free(ef->syms);
	free(ef->aliases);
	ef->nsyms = ef->naliases = 0;
	ef->syms = calloc(nsyms ? nsyms : 1, sizeof(*ef->syms));
	ef->aliases = calloc(naliases ? naliases : 1, sizeof(*ef->aliases));
	if (!ef->syms || !ef->aliases) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < cnt; i++) {
		struct elf_sym s = {
		    .addr = raw[i].addr,
		    .size = raw[i].size,
		    .name = ef->strtab + raw[i].name,
		};

		if (i == 0 || raw[i].addr != raw[i - 1].addr)
			ef->syms[ef->nsyms++] = s;
		else if (strcmp(s.name, ef->syms[ef->nsyms - 1].name) != 0)
			ef->aliases[ef->naliases++] = s;
	}
	err = 0;
out:
	free(raw);
	return err;
}

/* .gnu_debuglink: a file name, NUL padded to 4 bytes, then the CRC32 of the debug file in the
 * file's byte order. */
static int read_debuglink(Elf_Scn *scn, const GElf_Shdr *sh, const GElf_Ehdr *eh,
			  uint64_t file_size, struct elf_file *ef)
{
	Elf_Data *data;
	const char *buf;
	size_t len, crc_off;
	unsigned char c[4];

	if (sh->sh_type != SHT_PROGBITS || (sh->sh_flags & SHF_COMPRESSED) ||
	    !in_file(sh->sh_offset, sh->sh_size, file_size))
		return 0;
	data = elf_getdata(scn, NULL);
	if (!data || !data->d_buf)
		return 0;
	buf = data->d_buf;
	len = strnlen(buf, data->d_size);
	crc_off = (len + 4) & ~(size_t)3;
	if (len == 0 || crc_off + 4 > data->d_size)
		return 0;
	memcpy(c, buf + crc_off, 4);
	ef->debuglink_crc = eh->e_ident[EI_DATA] == ELFDATA2MSB
				? (uint32_t)c[0] << 24 | (uint32_t)c[1] << 16 | c[2] << 8 | c[3]
				: (uint32_t)c[3] << 24 | (uint32_t)c[2] << 16 | c[1] << 8 | c[0];
	ef->debuglink = strndup(buf, len);
	return ef->debuglink ? 0 : -ENOMEM;
}

static int parse(Elf *elf, uint64_t file_size, struct elf_file *ef)
{
	Elf_Scn *scn = NULL, *symtab = NULL, *dynsym = NULL;
	GElf_Shdr sh, symtab_sh, dynsym_sh;
	size_t shnum, shstrndx = 0;
	GElf_Ehdr eh;
	int err;

	if (elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &eh))
		return -ENOEXEC;
	if (eh.e_type != ET_EXEC && eh.e_type != ET_DYN)
		return -ENOEXEC;
	ef->type = eh.e_type;

	err = parse_phdrs(elf, &eh, file_size, ef);
	if (err)
		return err;

	if (elf_getshdrnum(elf, &shnum) != 0)
		return -ENOEXEC;
	/* libelf quietly treats a section header table past the end of the file as absent; that
	 * is a truncated file, not a stripped one. */
	if (eh.e_shoff != 0 && shnum == 0)
		return -ENOEXEC;
	if (shnum > 0 && (eh.e_shentsize != gelf_fsize(elf, ELF_T_SHDR, 1, EV_CURRENT) ||
			  shnum > file_size / eh.e_shentsize ||
			  !in_file(eh.e_shoff, (uint64_t)shnum * eh.e_shentsize, file_size)))
		return -ENOEXEC;

	if (shnum > 0 && elf_getshdrstrndx(elf, &shstrndx) != 0)
		shstrndx = 0;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		const char *name;

		if (!gelf_getshdr(scn, &sh))
			return -ENOEXEC;
		name = shstrndx ? elf_strptr(elf, shstrndx, sh.sh_name) : NULL;
		if (name && !ef->debuglink && !strcmp(name, ".gnu_debuglink")) {
			err = read_debuglink(scn, &sh, &eh, file_size, ef);
			if (err)
				return err;
		} else if (sh.sh_type == SHT_SYMTAB && !symtab) {
			symtab = scn;
			symtab_sh = sh;
		} else if (sh.sh_type == SHT_DYNSYM && !dynsym) {
			dynsym = scn;
			dynsym_sh = sh;
		} else if (sh.sh_type == SHT_NOTE && !ef->build_id_len &&
			   !(sh.sh_flags & SHF_COMPRESSED) &&
			   in_file(sh.sh_offset, sh.sh_size, file_size) &&
			   sh.sh_size <= MAX_NOTES_SIZE) {
			/* Only reached when no PT_NOTE carried the build id. */
			scan_notes(elf_getdata(scn, NULL), ef);
		}
	}

	if (symtab) {
		ef->has_symtab = true;
		err = read_syms(elf, symtab, &symtab_sh, file_size, ef);
		if (err)
			return err;
	}
	/* A .symtab without functions is as good as none (some strip modes leave one). */
	if (dynsym && ef->nsyms == 0) {
		err = read_syms(elf, dynsym, &dynsym_sh, file_size, ef);
		if (err)
			return err;
	}
	return 0;
}

static int open_elf(Elf *elf, uint64_t file_size, struct elf_file **out)
{
	struct elf_file *ef;
	int err;

	if (!elf)
		return -ENOEXEC;
	ef = calloc(1, sizeof(*ef));
	if (!ef)
		return -ENOMEM;
	err = parse(elf, file_size, ef);
	if (err) {
		elf_file_close(ef);
		return err;
	}
	*out = ef;
	return 0;
}

int elf_file_open_fd(int fd, struct elf_file **out)
{
	struct stat st;
	Elf *elf;
	int err;

	if (fd < 0)
		return -EBADF;
	if (fstat(fd, &st) != 0) {
		err = -errno;
		close(fd);
		return err;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return S_ISDIR(st.st_mode) ? -EISDIR : -ENOEXEC;
	}
	elf_version(EV_CURRENT);
	/* ELF_C_READ, not _MMAP: libelf then pread()s what it needs, so a file truncated under us
	 * yields a read error rather than SIGBUS. */
	elf = elf_begin(fd, ELF_C_READ, NULL);
	err = open_elf(elf, (uint64_t)st.st_size, out);
	elf_end(elf);
	close(fd);
	return err;
}

int elf_file_open(const char *path, struct elf_file **out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	return elf_file_open_fd(fd, out);
}

int elf_file_open_mem(const void *buf, size_t len, struct elf_file **out)
{
	char *copy;
	Elf *elf;
	int err;

	/* elf_memory() takes a mutable image, and buf may be read-only (the vDSO). */
	copy = malloc(len ? len : 1);
	if (!copy)
		return -ENOMEM;
	if (len)
		memcpy(copy, buf, len);
	elf_version(EV_CURRENT);
	elf = elf_memory(copy, len);
	err = open_elf(elf, len, out);
	elf_end(elf);
	free(copy);
	return err;
}

void elf_file_close(struct elf_file *ef)
{
	if (!ef)
		return;
	free(ef->syms);
	free(ef->aliases);
	free(ef->loads);
	free(ef->strtab);
	free(ef->debuglink);
	free(ef);
}

void elf_file_take_syms(struct elf_file *ef, struct elf_file *from)
{
	free(ef->syms);
	free(ef->aliases);
	free(ef->strtab);
	ef->syms = from->syms;
	ef->nsyms = from->nsyms;
	ef->aliases = from->aliases;
	ef->naliases = from->naliases;
	ef->strtab = from->strtab;
	ef->has_symtab = from->has_symtab;
	from->syms = from->aliases = NULL;
	from->strtab = NULL;
	from->nsyms = from->naliases = 0;
}

static const struct elf_load *load_of_vaddr(const struct elf_file *ef, uint64_t vaddr,
					    bool file_backed)
{
	for (size_t i = 0; i < ef->nloads; i++) {
		const struct elf_load *l = &ef->loads[i];

		if (vaddr >= l->vaddr && vaddr - l->vaddr < (file_backed ? l->filesz : l->memsz))
			return l;
	}
	return NULL;
}

const struct elf_sym *elf_file_lookup(const struct elf_file *ef, uint64_t vaddr)
{
	size_t lo = 0, hi, i;
	const struct elf_sym *s;

	if (!ef)
		return NULL;
	/* First symbol above vaddr. */
	hi = ef->nsyms;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (ef->syms[mid].addr <= vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	i = lo - 1;
	s = &ef->syms[i];

	if (s->size == 0) {
		/* Assembly often omits .size; assume it runs to the next symbol, but not across
		 * segments (that would attribute e.g. all of .text to _init). */
		const struct elf_load *l = load_of_vaddr(ef, s->addr, false);

		return l && l == load_of_vaddr(ef, vaddr, false) ? s : NULL;
	}
	for (size_t k = 0; k < LOOKBACK && k <= i; k++) {
		s = &ef->syms[i - k];
		if (s->size && vaddr - s->addr < s->size)
			return s;
	}
	return NULL;
}

const struct elf_sym *elf_file_syms(const struct elf_file *ef, size_t *n)
{
	*n = ef->nsyms;
	return ef->syms;
}

const struct elf_sym *elf_file_aliases(const struct elf_file *ef, size_t *n)
{
	*n = ef->naliases;
	return ef->aliases;
}

const struct elf_sym *elf_file_aliases_at(const struct elf_file *ef, uint64_t vaddr, size_t *n)
{
	size_t lo = 0, hi = ef->naliases, end;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (ef->aliases[mid].addr < vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (end = lo; end < ef->naliases && ef->aliases[end].addr == vaddr; end++)
		;
	*n = end - lo;
	return ef->aliases + lo;
}

bool elf_file_has_symtab(const struct elf_file *ef)
{
	return ef->has_symtab;
}

int elf_file_debuglink(const struct elf_file *ef, const char **name, uint32_t *crc)
{
	if (!ef->debuglink)
		return -ENOENT;
	*name = ef->debuglink;
	*crc = ef->debuglink_crc;
	return 0;
}

uint16_t elf_file_type(const struct elf_file *ef)
{
	return ef->type;
}

size_t elf_file_build_id(const struct elf_file *ef, const uint8_t **id)
{
	*id = ef->build_id;
	return ef->build_id_len;
}

const struct elf_load *elf_file_loads(const struct elf_file *ef, size_t *n)
{
	*n = ef->nloads;
	return ef->loads;
}

int elf_file_vaddr_to_offset(const struct elf_file *ef, uint64_t vaddr, uint64_t *off)
{
	const struct elf_load *l = load_of_vaddr(ef, vaddr, true);

	if (!l)
		return -ENOENT;
	*off = vaddr - l->vaddr + l->offset;
	return 0;
}

int elf_file_offset_to_vaddr(const struct elf_file *ef, uint64_t off, uint64_t *vaddr)
{
	for (size_t i = 0; i < ef->nloads; i++) {
		const struct elf_load *l = &ef->loads[i];

		if (off >= l->offset && off - l->offset < l->filesz) {
			*vaddr = off - l->offset + l->vaddr;
			return 0;
		}
	}
	return -ENOENT;
}

/* The first section of type type, or NULL. */
static Elf_Scn *section_of_type(Elf *elf, uint32_t type, GElf_Shdr *sh)
{
	Elf_Scn *scn = NULL;

	while ((scn = elf_nextscn(elf, scn)))
		if (gelf_getshdr(scn, sh) && sh->sh_type == type && sh->sh_entsize)
			return scn;
	return NULL;
}

/* The .symtab's symbols of one type, handed to fn until it returns true. */
static int walk_symtab(Elf *elf, int type, bool (*fn)(const struct elf_sym *, void *), void *ctx)
{
	GElf_Shdr sh;
	Elf_Scn *scn = section_of_type(elf, SHT_SYMTAB, &sh);
	Elf_Data *data = scn ? elf_getdata(scn, NULL) : NULL;
	size_t n = data ? data->d_size / sh.sh_entsize : 0;

	if (!scn)
		return -ENOENT;
	for (size_t i = 0; i < n && i <= INT_MAX; i++) {
		struct elf_sym s;
		GElf_Sym sym;

		if (!gelf_getsym(data, (int)i, &sym) || GELF_ST_TYPE(sym.st_info) != type)
			continue;
		s.name = elf_strptr(elf, sh.sh_link, sym.st_name);
		s.addr = sym.st_value;
		s.size = sym.st_size;
		if (s.name && fn(&s, ctx))
			break;
	}
	return 0;
}

int elf_symtab_each(const char *path, int type, bool (*fn)(const struct elf_sym *, void *),
		    void *ctx)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), err = -ENOEXEC;
	Elf *elf;

	if (fd < 0)
		return -errno;
	elf_version(EV_CURRENT);
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (elf && elf_kind(elf) == ELF_K_ELF)
		err = walk_symtab(elf, type, fn, ctx);
	elf_end(elf);
	close(fd);
	return err;
}
