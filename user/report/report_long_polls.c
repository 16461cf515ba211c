// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * report: the longest polls of long_polls.jsonl (--long-poll-ms), each with what it was doing
 * while it held its worker: its innermost frames outside the runtime. A run without the file
 * (long polls off) has no such section. Lines that do not parse are counted, not fatal: the
 * file is written in place and a killed run may leave its last line cut.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <json-c/json.h>
#include "report_int.h"

#define LP_LINE_MAX (1u << 20)

static void lp_entry_free(struct long_poll_top *e)
{
	free(e->future);
	free(e->frames);
	memset(e, 0, sizeof(*e));
}

void rpt_long_polls_free(struct report *r)
{
	for (size_t i = 0; i < r->nlong_polls_top; i++)
		lp_entry_free(&r->long_polls_top[i]);
	r->nlong_polls_top = 0;
}

static const char *str_of(json_object *o, const char *key)
{
	json_object *v;

	return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string)
		   ? json_object_get_string(v)
		   : NULL;
}

static double num_of(json_object *o, const char *key)
{
	json_object *v;

	return json_object_object_get_ex(o, key, &v) ? json_object_get_double(v) : 0;
}

/* The innermost REPORT_SHOWN_FRAMES frames outside the runtime, " <- " between them; the leaf
 * when every frame is the runtime's. */
static char *shown_frames(json_object *stack)
{
	size_t n = stack ? json_object_array_length(stack) : 0, shown = 0, len = 0;
	char buf[3 * SHOW_COLUMNS + 16] = "";
	const char *leaf = NULL;

	for (size_t i = 0; i < n && shown < REPORT_SHOWN_FRAMES; i++) {
		const char *name = str_of(json_object_array_get_idx(stack, i), "name");

		if (!name)
			continue;
		if (!leaf)
			leaf = name;
		if (rpt_runtime_frame(name))
			continue;
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%.*s", shown ? " <- " : "",
					SHOW_COLUMNS, name);
		if (len >= sizeof(buf))
			len = sizeof(buf) - 1;
		shown++;
	}
	if (!shown && leaf)
		snprintf(buf, sizeof(buf), "(runtime only) %.*s", SHOW_COLUMNS, leaf);
	return strdup(buf);
}

/* Keeps the line if it is among the longest so far (the table sorted, longest first). */
static void consider(struct report *r, json_object *o)
{
	struct long_poll_top e = {0}, *t = r->long_polls_top;
	size_t at = r->nlong_polls_top;
	json_object *v;

	e.duration_ns = num_of(o, "duration_ns");
	while (at > 0 && t[at - 1].duration_ns < e.duration_ns)
		at--;
	if (at >= REPORT_TOP_LONG_POLLS)
		return;
	e.on_cpu_ns = num_of(o, "on_cpu_ns");
	e.blocked_ns = num_of(o, "blocked_ns");
	e.worker = (int64_t)num_of(o, "worker");
	e.lower_bound = json_object_object_get_ex(o, "duration_is_lower_bound", &v) &&
			json_object_get_boolean(v);
	e.future = str_of(o, "future") ? strdup(str_of(o, "future")) : NULL;
	e.frames = shown_frames(json_object_object_get_ex(o, "stack", &v) &&
					json_object_is_type(v, json_type_array)
				    ? v
				    : NULL);
	if (r->nlong_polls_top == REPORT_TOP_LONG_POLLS)
		lp_entry_free(&t[--r->nlong_polls_top]);
	memmove(&t[at + 1], &t[at], (r->nlong_polls_top - at) * sizeof(*t));
	t[at] = e;
	r->nlong_polls_top++;
}

int rpt_read_long_polls(struct report *r, const char *dir)
{
	char path[4096], *line = NULL;
	size_t cap = 0;
	ssize_t n;
	FILE *f;

	if (snprintf(path, sizeof(path), "%s/long_polls.jsonl", dir) >= (int)sizeof(path))
		return 0;
	f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? 0 : -errno;
	r->have_long_polls = true;
	while ((n = getline(&line, &cap, f)) > 0) {
		json_object *o = (size_t)n < LP_LINE_MAX ? json_tokener_parse(line) : NULL;

		if (!o || !json_object_is_type(o, json_type_object)) {
			r->long_polls_bad++;
		} else {
			r->long_polls_total++;
			consider(r, o);
		}
		json_object_put(o);
	}
	free(line);
	fclose(f);
	return 0;
}

void rpt_print_long_polls(const struct report *r, FILE *out)
{
	if (!r->have_long_polls)
		return;
	fprintf(out,
		"\nLongest polls (long_polls.jsonl: %" PRIu64 " polls held a worker past "
		"--long-poll-ms; >= marks a lower bound):\n",
		r->long_polls_total);
	if (!r->nlong_polls_top)
		fputs("  (none)\n", out);
	else
		fputs("   held ms  on-CPU ms  blocked ms  worker  future\n", out);
	for (size_t i = 0; i < r->nlong_polls_top; i++) {
		const struct long_poll_top *e = &r->long_polls_top[i];

		fprintf(out, "  %s%8.1f  %9.1f  %10.1f  %6" PRId64 "  ",
			e->lower_bound ? ">=" : "  ", e->duration_ns / 1e6, e->on_cpu_ns / 1e6,
			e->blocked_ns / 1e6, e->worker);
		rpt_put_clean(out, e->future ? e->future : "(unknown)", SHOW_COLUMNS);
		fputs("\n        ", out);
		rpt_put_clean(out, e->frames ? e->frames : "", 3 * SHOW_COLUMNS + 16);
		fputc('\n', out);
	}
	if (r->long_polls_bad)
		fprintf(out, "  (%" PRIu64 " lines unreadable: a run cut short)\n",
			r->long_polls_bad);
}
