// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * stacks.folded: "root;...;leaf WEIGHT", one line per distinct stack, WEIGHT the summed integer
 * weight_count (estimated resumes). flamegraph.pl, inferno and speedscope read it; they find
 * the weight after the last space, so spaces in Rust names ("<T as Trait>::poll") are kept, and
 * speedscope drops fractional weights, hence integers. Stacks are aggregated in a trie as they
 * arrive and written at the end, sorted, into a temp file renamed when complete.
 *
 * stacks-time.folded is the time view: running (on-CPU samples, weight_cpu_ns) and waiting
 * (park samples, weight_idle_ns) in estimated nanoseconds, each stack under a "running" or
 * "waiting" root frame and then its "task: FUTURE" frame.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "stack_agg.h"
#include "writer.h"

struct folded_writer {
	struct out_file out;
	struct stack_agg agg;
	int err;   /* first error of sample(), reported once at finish */
	bool time; /* stacks-time.folded */
};

static int folded_sample(struct writer *w, const struct task_sample *s)
{
	struct folded_writer *fw = w->priv;
	int err = fw->time ? stack_agg_add_time(&fw->agg, s) : stack_agg_add_sample(&fw->agg, s);

	if (err && !fw->err)
		fw->err = err;
	return err;
}

/* Depth-first in sorted order, so that equal prefixes are adjacent as flamegraph.pl expects. */
static void write_node(FILE *f, const struct stack_agg *a, uint32_t node, uint32_t *path,
		       size_t depth)
{
	const struct stack_node *nd = &a->nodes[node];

	if (node) {
		path[depth - 1] = node;
		if (nd->self) {
			char num[24];
			uint64_t v = nd->self;
			size_t n = 0;

			for (size_t i = 0; i < depth; i++) {
				uint32_t id = a->nodes[path[i]].name;

				if (i)
					fputc(';', f);
				fwrite(intern_str(&a->names, id), 1, a->names.lens[id], f);
			}
			/* " WEIGHT\n" without printf. */
			num[sizeof(num) - ++n] = '\n';
			do {
				num[sizeof(num) - ++n] = (char)('0' + v % 10);
				v /= 10;
			} while (v);
			num[sizeof(num) - ++n] = ' ';
			fwrite(num + sizeof(num) - n, 1, n, f);
		}
	}
	for (uint32_t c = nd->first_child; c; c = a->nodes[c].next_sibling)
		write_node(f, a, c, path, depth + 1);
}

static int folded_finish(struct writer *w, const struct run_context *rc)
{
	struct folded_writer *fw = w->priv;
	uint32_t *path = NULL;
	int err = fw->err;

	(void)rc;
	if (!err)
		err = stack_agg_sort(&fw->agg);
	if (!err) {
		path = calloc(fw->agg.max_depth + 1, sizeof(*path));
		if (!path)
			err = -ENOMEM;
	}
	if (err) {
		fprintf(stderr, "dial9-bpf: failed to aggregate stacks for %s/%s: %s\n",
			fw->out.dir->path, fw->out.name, strerror(-err));
		out_file_discard(&fw->out);
	} else {
		write_node(fw->out.f, &fw->agg, 0, path, 0);
		err = out_file_commit(&fw->out);
	}
	free(path);
	stack_agg_free(&fw->agg);
	free(fw);
	w->priv = NULL;
	return err;
}

static void folded_abort(struct writer *w)
{
	struct folded_writer *fw = w->priv;

	out_file_discard(&fw->out);
	stack_agg_free(&fw->agg);
	free(fw);
	w->priv = NULL;
}

static int open_view(const struct out_dir *dir, struct writer *w, bool time)
{
	struct folded_writer *fw = calloc(1, sizeof(*fw));
	int err;

	if (!fw)
		return -ENOMEM;
	fw->time = time;
	err = stack_agg_init(&fw->agg);
	if (!err) {
		err = out_file_create(&fw->out, dir, time ? "stacks-time.folded" : "stacks.folded",
				      false);
		if (err)
			stack_agg_free(&fw->agg);
	}
	if (err) {
		free(fw);
		return err;
	}
	w->format = "folded";
	w->priv = fw;
	w->sample = folded_sample;
	w->finish = folded_finish;
	w->abort = folded_abort;
	return 0;
}

int folded_writer_open(const struct out_dir *dir, struct writer *w)
{
	return open_view(dir, w, false);
}

int folded_time_writer_open(const struct out_dir *dir, struct writer *w)
{
	return open_view(dir, w, true);
}
