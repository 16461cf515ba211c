// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Naming each task type's future without debug info. raw::poll<T,S> says what T is only in
 * v0 mangling; in legacy mangling (the default) its name has no generics. Its sibling
 * raw::dealloc<T,S> (the vtable's third entry) calls drop_in_place<Cell<T,S>>, and drop glue
 * is named after its type in both manglings: that names T in a plain release build.
 */
#include "task_sample.h"
#include "task_types.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "demangle.h"
#include "elf_file.h"
#include "proc_maps.h"
#include "target.h"
#include "tokio_layout.h"

/* raw::dealloc is a few instructions: its call to the drop glue comes early. */
#define DEALLOC_CODE_MAX 256
#define DEALLOC_CALLS_MAX 8

char *task_types_arg(const char *name, const char *key, unsigned idx)
{
	const char *p = strstr(name, key), *start;
	int depth = 0;

	if (!p)
		return NULL;
	p = strchr(p + strlen(key) - 1, '<');
	if (!p)
		return NULL;
	start = ++p;
	for (; *p; p++) {
		if (task_types_opens(name, (size_t)(p - name)))
			depth++;
		else if (task_types_closes(name, (size_t)(p - name)))
			depth--;
		if (depth < 0)
			break;
		if (depth == 0 && *p == ',') {
			if (!idx)
				break;
			idx--;
			start = p + 1;
			while (*start == ' ')
				start++;
		}
	}
	if (!*p || p <= start || idx)
		return NULL;
	return strndup(start, (size_t)(p - start));
}

char *task_types_first_arg(const char *name, const char *key)
{
	return task_types_arg(name, key, 0);
}

static char *demangled_at(const struct elf_file *ef, uint64_t addr)
{
	const struct elf_sym *s = elf_file_lookup(ef, addr);

	return s && s->addr == addr ? demangle(s->name) : NULL;
}

static char *name_from_poll(const struct elf_file *ef, uint64_t poll)
{
	char *name = demangled_at(ef, poll), *t = NULL;

	if (name && strstr(name, "raw::poll"))
		t = task_types_first_arg(name, "raw::poll");
	free(name);
	return t;
}

/* The future a drop glue's name shows: its cell's or stage's T (Tokio up to ~1.4x drops the
 * whole Cell<T,S>), or the dropped type itself when it is the user's (later releases inline
 * the cell's drop and call drop_in_place<T> for the future alone). */
static char *future_dropped(const char *glue)
{
	static const char *const holders[] = {"task::core::Cell<", "task::core::Stage<",
					      "task::core::CoreStage<"};
	static const char *const runtime[] = {"tokio::", "alloc::", "core::", "std::"};
	char *t;

	for (size_t i = 0; i < sizeof(holders) / sizeof(holders[0]); i++)
		if (strstr(glue, holders[i]))
			return task_types_first_arg(glue, holders[i]);
	t = task_types_first_arg(glue, "drop_in_place<");
	for (size_t i = 0; t && i < sizeof(runtime) / sizeof(runtime[0]); i++) {
		if (!strncmp(t, runtime[i], strlen(runtime[i]))) {
			free(t);
			t = NULL;
		}
	}
	return t;
}

/* The direct call (and with jumps, jump) targets in the first bytes of the function at addr. */
static size_t code_targets(int fd, const struct elf_file *ef, uint64_t addr, bool jumps,
			   uint64_t *out, size_t max)
{
	unsigned char code[DEALLOC_CODE_MAX];
	const struct elf_sym *s = elf_file_lookup(ef, addr);
	uint64_t off;
	size_t len;
	ssize_t got;

	if (!s || s->addr != addr || elf_file_vaddr_to_offset(ef, addr, &off))
		return 0;
	len = s->size && s->size < sizeof(code) ? s->size : sizeof(code);
	got = pread(fd, code, len, (off_t)off);
	if (got <= 0)
		return 0;
	return jumps ? target_branch_targets(code, (size_t)got, addr, out, max)
		     : target_direct_calls(code, (size_t)got, addr, out, max);
}

static char *name_from_dealloc(int fd, const struct elf_file *ef, uint64_t dealloc)
{
	uint64_t calls[DEALLOC_CALLS_MAX];
	size_t n = code_targets(fd, ef, dealloc, false, calls, DEALLOC_CALLS_MAX);

	for (size_t i = 0; i < n; i++) {
		char *callee = demangled_at(ef, calls[i]);
		char *t = callee && strstr(callee, "drop_in_place") ? future_dropped(callee) : NULL;

		free(callee);
		if (t)
			return t;
	}
	return NULL;
}

/* The Harness<T, S>::poll instance raw::poll calls or jumps to (a tail call leaves raw::poll
 * off the stack, so a stack shows the task type by this one); 0 when inlined. */
static uint64_t harness_of_poll(int fd, const struct elf_file *ef, uint64_t poll)
{
	uint64_t calls[DEALLOC_CALLS_MAX], found = 0;
	size_t n = code_targets(fd, ef, poll, true, calls, DEALLOC_CALLS_MAX);

	for (size_t i = 0; i < n && !found; i++) {
		char *callee = demangled_at(ef, calls[i]);

		if (callee && strstr(callee, "harness::Harness<") && strstr(callee, "::poll"))
			found = calls[i];
		free(callee);
	}
	return found;
}

static int name_type(int fd, const struct elf_file *ef, const struct tokio_vtable *vt, size_t index,
		     struct task_type *tt)
{
	*tt = (struct task_type){.vtable = vt->vaddr, .poll = vt->poll, .method = "poll_generics"};
	tt->harness_poll = harness_of_poll(fd, ef, vt->poll);
	tt->name = name_from_poll(ef, vt->poll);
	if (!tt->name && vt->dealloc) {
		tt->method = "drop_glue";
		tt->name = name_from_dealloc(fd, ef, vt->dealloc);
	}
	if (!tt->name) {
		char buf[32];

		tt->method = "none";
		snprintf(buf, sizeof(buf), "task-type-%zu", index);
		tt->name = strdup(buf);
	}
	if (tt->name && asprintf(&tt->root, "task: %s", tt->name) < 0)
		tt->root = NULL;
	return tt->name && tt->root ? 0 : -ENOMEM;
}

/* Runtime minus link-time address of the executable: from its lowest mapping. */
static int exe_bias(const struct elf_file *ef, const struct target *t, uint64_t *bias)
{
	struct proc_map *maps;
	size_t n;
	int err = proc_maps_read(t->pid, &maps, &n);

	if (err)
		return err;
	err = -ENOENT;
	for (size_t i = 0; i < n && err; i++) {
		uint64_t va;

		if (maps[i].path && maps[i].inode == t->exe_ino &&
		    !elf_file_offset_to_vaddr(ef, maps[i].pgoff, &va)) {
			*bias = maps[i].start - va;
			err = 0;
		}
	}
	proc_maps_free(maps, n);
	return err;
}

static int cmp_vtable(const void *a, const void *b)
{
	const struct task_type *x = a, *y = b;

	return x->vtable < y->vtable ? -1 : x->vtable > y->vtable;
}

int task_types_load(const struct elf_file *ef, const struct target *t, struct task_types *out)
{
	struct tokio_vtables vt;
	int fd, err;

	*out = (struct task_types){0};
	err = exe_bias(ef, t, &out->bias);
	if (!err)
		err = tokio_vtables_find(t, &vt);
	if (err)
		return err;
	fd = open(t->exe_link, O_RDONLY | O_CLOEXEC);
	out->v = calloc(vt.n ? vt.n : 1, sizeof(*out->v));
	if (fd < 0 || !out->v)
		err = fd < 0 ? -errno : -ENOMEM;
	for (size_t i = 0; !err && i < vt.n; i++, out->n++)
		err = name_type(fd, ef, &vt.v[i], i, &out->v[i]);
	if (fd >= 0)
		close(fd);
	tokio_vtables_free(&vt);
	if (err) {
		task_types_free(out);
		return err;
	}
	qsort(out->v, out->n, sizeof(*out->v), cmp_vtable);
	return 0;
}

struct task_type *task_types_find(const struct task_types *tt, uint64_t vtable)
{
	struct task_type key = {.vtable = vtable - tt->bias};

	if (!tt->n)
		return NULL;
	return bsearch(&key, tt->v, tt->n, sizeof(*tt->v), cmp_vtable);
}

void task_types_free(struct task_types *tt)
{
	for (size_t i = 0; i < tt->n; i++) {
		free(tt->v[i].name);
		free(tt->v[i].root);
	}
	free(tt->v);
	*tt = (struct task_types){0};
}

/* The innermost Harness<T, S>::poll frame's name on a stack (leaf first), or NULL. */
static const char *stack_harness(const struct task_frame *fr, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (fr[i].name && strstr(fr[i].name, "::harness::Harness<"))
			return fr[i].name;
	return NULL;
}

char *task_types_stack_future(const struct task_frame *fr, size_t n)
{
	const char *h = stack_harness(fr, n);

	return h ? task_types_arg(h, "Harness<", 0) : NULL;
}

char *task_types_stack_scheduler(const struct task_frame *fr, size_t n)
{
	const char *h = stack_harness(fr, n);

	return h ? task_types_arg(h, "Harness<", 1) : NULL;
}

size_t task_types_by_poll(const struct task_types *tt, uint64_t poll_start, struct task_type **out,
			  size_t max)
{
	size_t n = 0;

	for (size_t i = 0; i < tt->n && n < max; i++)
		if ((tt->v[i].poll && tt->v[i].poll + tt->bias == poll_start) ||
		    (tt->v[i].harness_poll && tt->v[i].harness_poll + tt->bias == poll_start))
			out[n++] = &tt->v[i];
	return n;
}
