/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "folded_names.h"
#include "symbolize.h"
#include "task_sample.h"
#include "task_types.h"

/* The generic argument of name that holds offset at: [*lo, *hi), from after the bracket or
 * comma (and spaces) that opens it to the bracket or comma that ends it. */
static void arg_around(const char *name, size_t at, size_t *lo, size_t *hi)
{
	size_t i;
	int depth = 0;

	for (i = at; i > 0; i--) {
		if (task_types_closes(name, i - 1))
			depth++;
		else if (task_types_opens(name, i - 1) && !depth--)
			break;
		else if (name[i - 1] == ',' && !depth)
			break;
	}
	while (name[i] == ' ')
		i++;
	*lo = i;
	depth = 0;
	for (i = at; name[i]; i++) {
		if (task_types_opens(name, i))
			depth++;
		else if (task_types_closes(name, i) && !depth--)
			break;
		else if (name[i] == ',' && !depth)
			break;
	}
	*hi = i;
}

/* The one generic argument in which two names of one code differ: a's at [r[0], r[1]), b's at
 * [r[2], r[3]); false where they differ in more than one. */
static bool differing_arg(const char *a, const char *b, size_t r[4])
{
	size_t la = strlen(a), lb = strlen(b), p = 0, q = 0;

	while (p < la && p < lb && a[p] == b[p])
		p++;
	while (q < la - p && q < lb - p && a[la - 1 - q] == b[lb - 1 - q])
		q++;
	if (p == la && p == lb)
		return false;
	arg_around(a, p, &r[0], &r[1]);
	arg_around(b, p, &r[2], &r[3]);
	return r[1] >= la - q && r[3] >= lb - q && r[1] > r[0] && r[3] > r[2];
}

/* name with each whole occurrence of from[0..flen) replaced by to[0..tlen), interned; name
 * itself where there is none, or where the copy cannot be made. */
static const char *rewritten(struct folded_names *fn, const char *name, const char *from,
			     size_t flen, const char *to, size_t tlen)
{
	size_t len = strlen(name), n = 0, done = 0;
	char *buf = malloc(len / flen * tlen + len + 1);
	const char *out = name;
	uint32_t id;

	if (!buf)
		return name;
	/* from is a part of another name, not a string of its own: searched by its length. */
	for (const char *p = memmem(name, len, from, flen); p;
	     p = memmem(p + 1, len - (size_t)(p + 1 - name), from, flen)) {
		size_t at = (size_t)(p - name);

		if (at < done || !symbolizer_whole_type_at(name, at, flen))
			continue;
		memcpy(buf + n, name + done, at - done);
		n += at - done;
		memcpy(buf + n, to, tlen);
		n += tlen;
		done = at + flen;
	}
	if (done) {
		memcpy(buf + n, name + done, len - done);
		n += len - done;
		if (!intern_id(&fn->names, buf, n, &id))
			out = intern_str(&fn->names, id);
	}
	free(buf);
	return out;
}

/* The calls inlined into frames[i] (the frames before it at its address) are named from the
 * debug info of the instance the table named (was): the argument that tells it from the one
 * that ran (is) is rewritten in theirs. */
static void rename_inlined(struct folded_names *fn, struct task_frame *frames, size_t i,
			   const char *was, const char *is)
{
	size_t r[4];

	if (!differing_arg(was, is, r))
		return;
	for (size_t j = i; j > 0 && frames[j - 1].inlined && frames[j - 1].addr == frames[i].addr;
	     j--)
		if (frames[j - 1].name)
			frames[j - 1].name = rewritten(fn, frames[j - 1].name, was + r[0],
						       r[1] - r[0], is + r[2], r[3] - r[2]);
}

void folded_names_apply(struct folded_names *fn, struct symbolizer *s, struct task_frame *frames,
			size_t n, const char *future)
{
	char *sched;

	if (!future)
		return;
	sched = task_types_stack_scheduler(frames, n);
	for (size_t i = 0; i < n; i++) {
		struct sym_info si;
		const char *name;

		if (frames[i].inlined || frames[i].task_root || !frames[i].name ||
		    symbolizer_resolve(s, frames[i].addr, &si) || !si.merged ||
		    si.name != frames[i].name)
			continue;
		name = symbolizer_name_with(s, frames[i].addr, future, sched);
		if (!name || name == frames[i].name)
			continue;
		rename_inlined(fn, frames, i, frames[i].name, name);
		frames[i].name = name;
	}
	free(sched);
}

void folded_names_free(struct folded_names *fn)
{
	intern_free(&fn->names);
}
