// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <elf.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "perf_task_dso.h"

/* Bytes of code per name; a callchain address points one byte in, so perf finds the symbol
 * whether or not it moves a return address back into its call. */
#define SYM_SIZE 4
/* Up to the default vm.mmap_min_addr. */
#define MAX_NAMES ((0x10000ull - PERF_TASK_DSO_START) / SYM_SIZE)

enum { SEC_NULL, SEC_TEXT, SEC_SYMTAB, SEC_STRTAB, SEC_SHSTRTAB, NSECS };

static const char shstrtab[] = "\0.text\0.symtab\0.strtab\0.shstrtab";

uint64_t perf_task_dso_addr(struct perf_task_dso *t, const char *name)
{
	size_t i;

	for (i = 0; i < t->n; i++)
		if (t->names[i] == name || !strcmp(t->names[i], name))
			break;
	if (i == t->n) {
		if (t->n == MAX_NAMES)
			return 0;
		if (t->n == t->cap) {
			size_t cap = t->cap ? 2 * t->cap : 16;
			const char **names = realloc(t->names, cap * sizeof(*names));

			if (!names)
				return 0;
			t->names = names;
			t->cap = cap;
		}
		t->names[t->n++] = name;
	}
	return PERF_TASK_DSO_START + i * SYM_SIZE + 1;
}

uint64_t perf_task_dso_map_len(const struct perf_task_dso *t)
{
	return (t->n * SYM_SIZE + 0xfff) & ~0xfffull;
}

static int put(FILE *f, const void *p, size_t n)
{
	return fwrite(p, 1, n, f) == n ? 0 : -EIO;
}

/* The symbol table and its strings; the code (int3 bytes) is never read. */
static int write_syms(const struct perf_task_dso *t, FILE *f)
{
	Elf64_Sym sym = {0};
	uint32_t name_off = 1;
	int err = put(f, &sym, sizeof(sym));

	for (size_t i = 0; i < t->n && !err; i++) {
		sym = (Elf64_Sym){
		    .st_name = name_off,
		    .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC),
		    .st_shndx = SEC_TEXT,
		    .st_value = PERF_TASK_DSO_PGOFF + i * SYM_SIZE,
		    .st_size = SYM_SIZE,
		};
		name_off += (uint32_t)strlen(t->names[i]) + 1;
		err = put(f, &sym, sizeof(sym));
	}
	err = err ?: put(f, "", 1);
	for (size_t i = 0; i < t->n && !err; i++)
		err = put(f, t->names[i], strlen(t->names[i]) + 1);
	return err;
}

/*
 * Layout: ELF header, one PT_LOAD (vaddr = file offset, so no symbol needs adjusting), .text at
 * PERF_TASK_DSO_PGOFF, .symtab, .strtab, .shstrtab, the section headers.
 */
int perf_task_dso_write(const struct perf_task_dso *t, FILE *f)
{
	uint64_t text_size = t->n * SYM_SIZE, symtab_off = PERF_TASK_DSO_PGOFF + text_size;
	uint64_t symtab_size = (t->n + 1) * sizeof(Elf64_Sym), strtab_size = 1;
	uint64_t strtab_off = symtab_off + symtab_size, shstr_off, shdr_off;
	Elf64_Ehdr eh = {0};
	Elf64_Phdr ph = {0};
	Elf64_Shdr sh[NSECS] = {0};
	uint8_t pad[PERF_TASK_DSO_PGOFF] = {0};
	int err;

	for (size_t i = 0; i < t->n; i++)
		strtab_size += strlen(t->names[i]) + 1;
	shstr_off = strtab_off + strtab_size;
	shdr_off = (shstr_off + sizeof(shstrtab) + 7) & ~7ull;

	memcpy(eh.e_ident, ELFMAG, SELFMAG);
	eh.e_ident[EI_CLASS] = ELFCLASS64;
	eh.e_ident[EI_DATA] = ELFDATA2LSB;
	eh.e_ident[EI_VERSION] = EV_CURRENT;
	eh.e_type = ET_DYN;
	eh.e_machine = EM_X86_64;
	eh.e_version = EV_CURRENT;
	eh.e_phoff = sizeof(eh);
	eh.e_shoff = shdr_off;
	eh.e_ehsize = sizeof(eh);
	eh.e_phentsize = sizeof(ph);
	eh.e_phnum = 1;
	eh.e_shentsize = sizeof(Elf64_Shdr);
	eh.e_shnum = NSECS;
	eh.e_shstrndx = SEC_SHSTRTAB;
	ph = (Elf64_Phdr){.p_type = PT_LOAD,
			  .p_flags = PF_R | PF_X,
			  .p_filesz = symtab_off,
			  .p_memsz = symtab_off,
			  .p_align = 0x1000};
	sh[SEC_TEXT] = (Elf64_Shdr){.sh_name = 1,
				    .sh_type = SHT_PROGBITS,
				    .sh_flags = SHF_ALLOC | SHF_EXECINSTR,
				    .sh_addr = PERF_TASK_DSO_PGOFF,
				    .sh_offset = PERF_TASK_DSO_PGOFF,
				    .sh_size = text_size,
				    .sh_addralign = 1};
	sh[SEC_SYMTAB] = (Elf64_Shdr){.sh_name = 7,
				      .sh_type = SHT_SYMTAB,
				      .sh_offset = symtab_off,
				      .sh_size = symtab_size,
				      .sh_link = SEC_STRTAB,
				      .sh_info = 1,
				      .sh_addralign = 8,
				      .sh_entsize = sizeof(Elf64_Sym)};
	sh[SEC_STRTAB] = (Elf64_Shdr){.sh_name = 15,
				      .sh_type = SHT_STRTAB,
				      .sh_offset = strtab_off,
				      .sh_size = strtab_size,
				      .sh_addralign = 1};
	sh[SEC_SHSTRTAB] = (Elf64_Shdr){.sh_name = 23,
					.sh_type = SHT_STRTAB,
					.sh_offset = shstr_off,
					.sh_size = sizeof(shstrtab),
					.sh_addralign = 1};

	err = put(f, &eh, sizeof(eh));
	err = err ?: put(f, &ph, sizeof(ph));
	err = err ?: put(f, pad, PERF_TASK_DSO_PGOFF - sizeof(eh) - sizeof(ph));
	memset(pad, 0xcc, text_size < sizeof(pad) ? text_size : sizeof(pad));
	for (uint64_t left = text_size; left && !err;
	     left -= left < sizeof(pad) ? left : sizeof(pad))
		err = put(f, pad, left < sizeof(pad) ? left : sizeof(pad));
	err = err ?: write_syms(t, f);
	err = err ?: put(f, shstrtab, sizeof(shstrtab));
	memset(pad, 0, 8);
	err = err ?: put(f, pad, shdr_off - shstr_off - sizeof(shstrtab));
	return err ?: put(f, sh, sizeof(sh));
}

void perf_task_dso_free(struct perf_task_dso *t)
{
	free(t->names);
	*t = (struct perf_task_dso){0};
}
