// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>

#include "demangle.h"
#include "inline_names.h"
#include "util_hash.h"

struct pc_slot {
	Dwfl_Module *mod;
	uint64_t pc;	/* the looked-up address (pc - 1 for return addresses) */
	uint32_t first; /* index into frames */
	uint32_t n;	/* frames at pc; UINT32_MAX marks an empty slot */
};

/* One address range of a function defined in a CU. */
struct cu_func {
	uint64_t lo, hi; /* [lo, hi), DWARF addresses */
	Dwarf_Die die;
};

/*
 * The functions of one CU sorted by address, built on the first lookup in it, so each later
 * lookup walks one function's DIEs rather than the whole CU.
 */
struct cu_index {
	Dwfl_Module *mod; /* NULL: empty slot */
	Dwarf_Off off;	  /* of the CU DIE */
	struct cu_func *funcs;
	size_t n;
};

struct inline_names {
	/* Interned names: open addressing, NULL = empty. */
	char **names;
	size_t names_cap, names_n;
	/* (module, pc) -> inline frames; dropped with the Dwfl that owns the modules. */
	struct pc_slot *slots;
	size_t slots_cap, slots_n;
	struct inline_frame *frames;
	size_t frames_n, frames_cap;
	/* CU indexes, open addressing; they hold DIEs, so are dropped with the Dwfl too. */
	struct cu_index *cus;
	size_t cus_cap, cus_n;
};

/* Takes ownership of s; returns the interned copy, or NULL (s freed) on ENOMEM. */
static const char *intern(struct inline_names *in, char *s)
{
	size_t mask, i;

	if ((in->names_n + 1) * 2 > in->names_cap) {
		size_t cap = in->names_cap ? in->names_cap * 2 : 256;
		char **names = calloc(cap, sizeof(*names));

		if (!names) {
			free(s);
			return NULL;
		}
		for (size_t j = 0; j < in->names_cap; j++) {
			if (!in->names[j])
				continue;
			for (i = hash_bytes(in->names[j], strlen(in->names[j])) & (cap - 1);
			     names[i]; i = (i + 1) & (cap - 1))
				;
			names[i] = in->names[j];
		}
		free(in->names);
		in->names = names;
		in->names_cap = cap;
	}
	mask = in->names_cap - 1;
	for (i = hash_bytes(s, strlen(s)) & mask; in->names[i]; i = (i + 1) & mask) {
		if (strcmp(in->names[i], s) == 0) {
			free(s);
			return in->names[i];
		}
	}
	in->names[i] = s;
	in->names_n++;
	return s;
}

static uint64_t slot_hash(const Dwfl_Module *mod, uint64_t pc)
{
	return mix64(pc ^ (uint64_t)(uintptr_t)mod);
}

static struct pc_slot *slot_find(struct inline_names *in, Dwfl_Module *mod, uint64_t pc)
{
	size_t mask = in->slots_cap - 1;

	if (!in->slots_cap)
		return NULL;
	for (size_t i = slot_hash(mod, pc) & mask; in->slots[i].n != UINT32_MAX; i = (i + 1) & mask)
		if (in->slots[i].pc == pc && in->slots[i].mod == mod)
			return &in->slots[i];
	return NULL;
}

static int slot_add(struct inline_names *in, Dwfl_Module *mod, uint64_t pc, uint32_t first,
		    uint32_t n)
{
	size_t mask, i;

	if ((in->slots_n + 1) * 2 > in->slots_cap) {
		size_t cap = in->slots_cap ? in->slots_cap * 2 : 1024;
		struct pc_slot *slots = malloc(cap * sizeof(*slots));

		if (!slots)
			return -ENOMEM;
		for (size_t j = 0; j < cap; j++)
			slots[j].n = UINT32_MAX;
		for (size_t j = 0; j < in->slots_cap; j++) {
			if (in->slots[j].n == UINT32_MAX)
				continue;
			for (i = slot_hash(in->slots[j].mod, in->slots[j].pc) & (cap - 1);
			     slots[i].n != UINT32_MAX; i = (i + 1) & (cap - 1))
				;
			slots[i] = in->slots[j];
		}
		free(in->slots);
		in->slots = slots;
		in->slots_cap = cap;
	}
	mask = in->slots_cap - 1;
	for (i = slot_hash(mod, pc) & mask; in->slots[i].n != UINT32_MAX; i = (i + 1) & mask)
		;
	in->slots[i] = (struct pc_slot){.mod = mod, .pc = pc, .first = first, .n = n};
	in->slots_n++;
	return 0;
}

static int push_frame(struct inline_names *in, const char *name, bool inlined)
{
	if (in->frames_n == in->frames_cap) {
		size_t cap = in->frames_cap ? in->frames_cap * 2 : 256;
		struct inline_frame *f = realloc(in->frames, cap * sizeof(*f));

		if (!f)
			return -ENOMEM;
		in->frames = f;
		in->frames_cap = cap;
	}
	in->frames[in->frames_n++] = (struct inline_frame){.name = name, .inlined = inlined};
	return 0;
}

static bool is_c_family(Dwarf_Die *die)
{
	Dwarf_Die cu;

	switch (dwarf_diecu(die, &cu, NULL, NULL) ? dwarf_srclang(&cu) : -1) {
	case DW_LANG_C89:
	case DW_LANG_C:
	case DW_LANG_C99:
	case DW_LANG_C11:
		return true;
	default:
		return false;
	}
}

/*
 * "a::b::name" from the namespaces, types and functions enclosing the declaration of die, for
 * DWARF without linkage names (line-tables-only builds).
 */
static char *qualified_name(Dwarf_Die *die, const char *name)
{
	Dwarf_Die decl = *die, *scopes = NULL;
	Dwarf_Attribute attr;
	size_t len = strlen(name) + 1;
	char *out;
	int n;

	/* The declaration sits in the namespace; instances and definitions point to it. */
	for (int hops = 0; hops < 8; hops++) {
		Dwarf_Die next;

		if (!dwarf_attr(&decl, DW_AT_abstract_origin, &attr) &&
		    !dwarf_attr(&decl, DW_AT_specification, &attr))
			break;
		if (!dwarf_formref_die(&attr, &next))
			break;
		decl = next;
	}
	if (is_c_family(&decl))
		return strdup(name);
	n = dwarf_getscopes_die(&decl, &scopes);
	for (int i = n - 1; i >= 1; i--) {
		const char *s = dwarf_diename(&scopes[i]);

		switch (dwarf_tag(&scopes[i])) {
		case DW_TAG_namespace:
		case DW_TAG_structure_type:
		case DW_TAG_class_type:
		case DW_TAG_union_type:
		case DW_TAG_enumeration_type:
		case DW_TAG_subprogram:
			if (s)
				len += strlen(s) + 2;
			break;
		default:
			break;
		}
	}
	out = malloc(len);
	if (!out) {
		free(scopes);
		return NULL;
	}
	out[0] = '\0';
	for (int i = n - 1; i >= 1; i--) {
		const char *s = dwarf_diename(&scopes[i]);
		int tag = dwarf_tag(&scopes[i]);

		if (s && (tag == DW_TAG_namespace || tag == DW_TAG_structure_type ||
			  tag == DW_TAG_class_type || tag == DW_TAG_union_type ||
			  tag == DW_TAG_enumeration_type || tag == DW_TAG_subprogram)) {
			strcat(out, s);
			strcat(out, "::");
		}
	}
	strcat(out, name);
	free(scopes);
	return out;
}

/* The demangled name of a subprogram or inlined subroutine, or NULL if it has none. */
static const char *die_function_name(struct inline_names *in, Dwarf_Die *die)
{
	Dwarf_Attribute attr;
	const char *s;
	char *name;

	s = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &attr));
	if (!s)
		s = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr));
	if (s) {
		name = demangle(s);
	} else {
		s = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_name, &attr));
		if (!s)
			return NULL;
		name = qualified_name(die, s);
	}
	return name ? intern(in, name) : NULL;
}

#define SCOPE_DEPTH_MAX 64

/* The chain of functions containing a pc, outermost first. */
struct scope_path {
	Dwarf_Die dies[SCOPE_DEPTH_MAX];
	int n;
};

/*
 * Finds the inlined subroutines and lexical blocks under parent (a function) that contain pc,
 * recording the inlined calls. dwarf_getscopes() would do the whole search, but it does not
 * look inside DIEs without addresses, and Rust (LLVM) nests function definitions in
 * DW_TAG_namespace ones; it also walks the whole CU on every lookup.
 * Returns whether pc was found.
 */
static bool find_pc(Dwarf_Die *parent, Dwarf_Addr pc, struct scope_path *p, int depth)
{
	Dwarf_Die child;

	if (depth >= SCOPE_DEPTH_MAX || dwarf_child(parent, &child) != 0)
		return false;
	do {
		switch (dwarf_tag(&child)) {
		case DW_TAG_subprogram:
		case DW_TAG_inlined_subroutine:
		case DW_TAG_lexical_block:
			if (dwarf_haspc(&child, pc) <= 0)
				break;
			if (dwarf_tag(&child) != DW_TAG_lexical_block && p->n < SCOPE_DEPTH_MAX)
				p->dies[p->n++] = child;
			find_pc(&child, pc, p, depth + 1);
			return true;
		case DW_TAG_namespace:
		case DW_TAG_module:
			if (find_pc(&child, pc, p, depth + 1))
				return true;
			break;
		default:
			break;
		}
	} while (dwarf_siblingof(&child, &child) == 0);
	return false;
}

static int cu_func_cmp(const void *a, const void *b)
{
	const struct cu_func *x = a, *y = b;

	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Collects the address ranges of the function definitions under parent. */
static int index_scope(struct cu_index *ci, size_t *cap, Dwarf_Die *parent, int depth)
{
	Dwarf_Die child;
	int err = 0;

	if (depth >= SCOPE_DEPTH_MAX || dwarf_child(parent, &child) != 0)
		return 0;
	do {
		switch (dwarf_tag(&child)) {
		case DW_TAG_subprogram: {
			Dwarf_Addr base, lo, hi;
			ptrdiff_t off = 0;

			while ((off = dwarf_ranges(&child, off, &base, &lo, &hi)) > 0) {
				/* Functions the linker dropped keep their DWARF at address 0. */
				if (lo == 0 || lo >= hi)
					continue;
				if (ci->n == *cap) {
					size_t ncap = *cap ? *cap * 2 : 64;
					struct cu_func *f = realloc(ci->funcs, ncap * sizeof(*f));

					if (!f)
						return -ENOMEM;
					ci->funcs = f;
					*cap = ncap;
				}
				ci->funcs[ci->n++] =
				    (struct cu_func){.lo = lo, .hi = hi, .die = child};
			}
			break;
		}
		case DW_TAG_namespace:
		case DW_TAG_module:
			err = index_scope(ci, cap, &child, depth + 1);
			break;
		default:
			break;
		}
	} while (!err && dwarf_siblingof(&child, &child) == 0);
	return err;
}

/* The index of cu in mod, built on first use; NULL on ENOMEM. */
static struct cu_index *cu_index_get(struct inline_names *in, Dwfl_Module *mod, Dwarf_Die *cu)
{
	Dwarf_Off off = dwarf_dieoffset(cu);
	uint64_t h = mix64((uint64_t)(uintptr_t)mod ^ off);
	struct cu_index *ci;
	size_t mask, i, cap = 0;

	if (in->cus_cap) {
		mask = in->cus_cap - 1;
		for (i = h & mask; in->cus[i].mod; i = (i + 1) & mask)
			if (in->cus[i].mod == mod && in->cus[i].off == off)
				return &in->cus[i];
	}
	if ((in->cus_n + 1) * 2 > in->cus_cap) {
		size_t ncap = in->cus_cap ? in->cus_cap * 2 : 64;
		struct cu_index *cus = calloc(ncap, sizeof(*cus));

		if (!cus)
			return NULL;
		for (size_t j = 0; j < in->cus_cap; j++) {
			if (!in->cus[j].mod)
				continue;
			h = mix64((uint64_t)(uintptr_t)in->cus[j].mod ^ in->cus[j].off);
			for (i = h & (ncap - 1); cus[i].mod; i = (i + 1) & (ncap - 1))
				;
			cus[i] = in->cus[j];
		}
		free(in->cus);
		in->cus = cus;
		in->cus_cap = ncap;
		h = mix64((uint64_t)(uintptr_t)mod ^ off);
	}
	mask = in->cus_cap - 1;
	for (i = h & mask; in->cus[i].mod; i = (i + 1) & mask)
		;
	ci = &in->cus[i];
	*ci = (struct cu_index){.mod = mod, .off = off};
	if (index_scope(ci, &cap, cu, 0) != 0) {
		free(ci->funcs);
		*ci = (struct cu_index){0};
		return NULL;
	}
	if (ci->n)
		qsort(ci->funcs, ci->n, sizeof(*ci->funcs), cu_func_cmp);
	in->cus_n++;
	return ci;
}

static const struct cu_func *cu_index_find(const struct cu_index *ci, uint64_t pc)
{
	size_t lo = 0, hi = ci->n;

	/* The last range starting at or below pc; ranges of distinct functions do not overlap. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (ci->funcs[mid].lo <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo && pc < ci->funcs[lo - 1].hi ? &ci->funcs[lo - 1] : NULL;
}

/* Looks pc up in the DWARF and appends its frames to in->frames. */
static int compute_inline(struct inline_names *in, Dwfl_Module *mod, uint64_t pc)
{
	const struct cu_func *fn;
	struct cu_index *ci;
	struct scope_path *path;
	Dwarf_Addr bias;
	Dwarf_Die *cu;
	int err = 0;

	cu = dwfl_module_addrdie(mod, pc, &bias);
	if (!cu)
		return 0;
	ci = cu_index_get(in, mod, cu);
	if (!ci)
		return -ENOMEM;
	fn = cu_index_find(ci, pc - bias);
	if (!fn)
		return 0;
	path = malloc(sizeof(*path));
	if (!path)
		return -ENOMEM;
	path->dies[0] = fn->die;
	path->n = 1;
	find_pc(&path->dies[0], pc - bias, path, 1);
	for (int i = path->n - 1; i >= 0; i--) {
		Dwarf_Die *die = &path->dies[i];
		bool inlined = dwarf_tag(die) == DW_TAG_inlined_subroutine;
		const char *name = die_function_name(in, die);

		if (!name)
			name = intern(in, strdup("??"));
		if (!name) {
			err = -ENOMEM;
			break;
		}
		err = push_frame(in, name, inlined);
		/* A function nested in another is not inlined into it: stop at the first. */
		if (err || !inlined)
			break;
	}
	free(path);
	return err;
}

int inline_names_index_next(struct inline_names *in, Dwfl_Module *mod, Dwarf_Die **cu)
{
	Dwarf_Addr bias;

	*cu = dwfl_module_nextcu(mod, *cu, &bias);
	if (!*cu)
		return 0;
	return cu_index_get(in, mod, *cu) ? 1 : -ENOMEM;
}

struct inline_names *inline_names_new(void)
{
	return calloc(1, sizeof(struct inline_names));
}

void inline_names_forget_modules(struct inline_names *in)
{
	if (!in)
		return;
	for (size_t i = 0; i < in->cus_cap; i++)
		free(in->cus[i].funcs);
	free(in->cus);
	in->cus = NULL;
	in->cus_cap = 0;
	in->cus_n = 0;
	for (size_t i = 0; i < in->slots_cap; i++)
		in->slots[i].n = UINT32_MAX;
	in->slots_n = 0;
	in->frames_n = 0;
}

void inline_names_free(struct inline_names *in)
{
	if (!in)
		return;
	inline_names_forget_modules(in);
	for (size_t i = 0; i < in->names_cap; i++)
		free(in->names[i]);
	free(in->names);
	free(in->slots);
	free(in->frames);
	free(in);
}

int inline_names_get(struct inline_names *in, Dwfl_Module *mod, uint64_t pc,
		     struct inline_frame *out, size_t max, size_t *n)
{
	struct pc_slot *slot;
	size_t first;
	int err;

	if (!in || !mod || !n || (!out && max))
		return -EINVAL;
	*n = 0;
	slot = slot_find(in, mod, pc);
	if (!slot) {
		first = in->frames_n;
		err = compute_inline(in, mod, pc);
		if (!err)
			err = slot_add(in, mod, pc, (uint32_t)first,
				       (uint32_t)(in->frames_n - first));
		if (err) {
			in->frames_n = first;
			return err;
		}
		slot = slot_find(in, mod, pc);
	}
	*n = slot->n < max ? slot->n : max;
	if (*n)
		memcpy(out, in->frames + slot->first, *n * sizeof(*out));
	return slot->n > max ? -ENOSPC : 0;
}
