// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libFuzzer target for the ELF parser (user/target/elf_file.c), built with ASan and UBSan: the
 * input is parsed as an ELF image with elf_file_open_mem(), and whatever parsed is then queried
 * the way target discovery and the symbolizer do (symbols, aliases, loads, build id, address
 * translation both ways, lookups).
 *
 *   make build/fuzz/fuzz_elf_file
 *   build/fuzz/fuzz_elf_file -dict=tests/fuzz/elf_file.dict tests/fuzz/corpus/elf_file
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "elf_file.h"

static volatile size_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct elf_load *loads;
	const struct elf_sym *syms;
	const uint8_t *id;
	struct elf_file *ef;
	size_t n, nloads;
	uint64_t v;

	if (elf_file_open_mem(data, size, &ef))
		return 0;
	sink += elf_file_has_symtab(ef) + elf_file_type(ef);
	{
		const char *link;
		uint32_t crc;

		if (!elf_file_debuglink(ef, &link, &crc))
			sink += strlen(link) + crc;
	}
	n = elf_file_build_id(ef, &id);
	if (n > ELF_BUILD_ID_MAX)
		abort();
	for (size_t i = 0; i < n; i++)
		sink += id[i];

	syms = elf_file_syms(ef, &n);
	for (size_t i = 0; i < n; i++) {
		const struct elf_sym *s;

		sink += strlen(syms[i].name);
		if (i && syms[i].addr <= syms[i - 1].addr)
			abort(); /* documented: sorted, one per address */
		s = elf_file_lookup(ef, syms[i].addr);
		if (syms[i].size && s != &syms[i])
			abort(); /* a sized symbol's own address finds it (size 0: only inside a
				  * PT_LOAD segment, documented) */
		sink += (size_t)elf_file_lookup(ef, syms[i].addr + syms[i].size / 2);
		if (!elf_file_vaddr_to_offset(ef, syms[i].addr, &v))
			sink += (size_t)elf_file_offset_to_vaddr(ef, v, &v);
	}
	syms = elf_file_aliases(ef, &n);
	for (size_t i = 0; i < n; i++)
		sink += strlen(syms[i].name);

	loads = elf_file_loads(ef, &nloads);
	for (size_t i = 0; i < nloads; i++) {
		uint64_t probes[] = {loads[i].vaddr, loads[i].vaddr + loads[i].memsz,
				     loads[i].vaddr + loads[i].filesz - 1};

		for (size_t k = 0; k < sizeof(probes) / sizeof(probes[0]); k++) {
			sink += (size_t)elf_file_lookup(ef, probes[k]);
			sink += (size_t)elf_file_vaddr_to_offset(ef, probes[k], &v);
		}
		sink += (size_t)elf_file_offset_to_vaddr(ef, loads[i].offset, &v);
	}
	/* Arbitrary addresses taken from the input itself. */
	for (size_t off = 0; off + 8 <= size && off < 512; off += 8) {
		memcpy(&v, data + off, 8);
		sink += (size_t)elf_file_lookup(ef, v);
		sink += (size_t)elf_file_offset_to_vaddr(ef, v, &v);
	}
	elf_file_close(ef);
	return 0;
}
