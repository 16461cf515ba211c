// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* samples.jsonl: one TaskSampleEvent per line, streamed; a reader can stop at any line. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "json.h"
#include "stack_agg.h"
#include "writer.h"

/* stdio's default 4 KiB buffer would mean a write(2) for about every line. */
#define JSONL_BUF_SIZE (256 * 1024)

struct jsonl_writer {
	FILE *f;
	char *fbuf; /* f's buffer */
	struct json_buf line;
	/* inclusion_probability as printf's %.9g, by the double's bits: a run has few distinct
	 * probabilities, and formatting a double costs more than the rest of the line. */
	struct {
		uint64_t bits;
		uint8_t len; /* 0 = empty */
		char text[31];
	} probs[16];
	/* Frame names and modules escaped once, by pointer: task_frame promises they stay put
	 * while the writers are open, and escaping long Rust names was the line's largest cost. */
	struct u64_index str_of;
	struct {
		char *text; /* quoted and escaped */
		size_t len;
	} * strs;
	size_t nstrs, strs_cap;
	struct json_buf scratch;
	struct out_file out;
};

static void put_prob(struct jsonl_writer *jw, double p)
{
	uint64_t bits;
	size_t i;

	memcpy(&bits, &p, sizeof(bits));
	i = (size_t)((bits * 0x9e3779b97f4a7c15ULL) >> 60);
	if (!jw->probs[i].len || jw->probs[i].bits != bits) {
		int n = snprintf(jw->probs[i].text, sizeof(jw->probs[i].text), "%.9g", p);

		if (n <= 0 || n >= (int)sizeof(jw->probs[i].text)) {
			char big[64];

			/* Not cacheable (cannot happen with %.9g); write it as is. */
			jw->probs[i].len = 0;
			snprintf(big, sizeof(big), "%.9g", p);
			json_buf_puts(&jw->line, big);
			return;
		}
		jw->probs[i].bits = bits;
		jw->probs[i].len = (uint8_t)n;
	}
	json_buf_raw(&jw->line, jw->probs[i].text, jw->probs[i].len);
}

/* s as a JSON string, escaped on first sight of its pointer and copied from then on. Out of
 * memory for the cache, it is escaped in place: the line is the same either way. */
static void put_frame_str(struct jsonl_writer *jw, const char *s)
{
	struct json_buf *b = &jw->line;
	uint32_t id;
	bool added;

	if (!s) {
		json_buf_lit(b, "null");
		return;
	}
	/* Room for a new entry first, so that an id the index hands out always has one. */
	if (jw->nstrs == jw->strs_cap) {
		size_t ncap = jw->strs_cap ? 2 * jw->strs_cap : 256;
		void *n = realloc(jw->strs, ncap * sizeof(*jw->strs));

		if (!n) {
			json_buf_str(b, s);
			return;
		}
		jw->strs = n;
		jw->strs_cap = ncap;
	}
	if (u64_index_id(&jw->str_of, (uintptr_t)s, &id, &added)) {
		json_buf_str(b, s);
		return;
	}
	if (added) {
		jw->scratch.len = 0;
		json_buf_str(&jw->scratch, s);
		jw->strs[id].text = jw->scratch.oom ? NULL : malloc(jw->scratch.len);
		jw->strs[id].len = jw->scratch.len;
		if (jw->strs[id].text)
			memcpy(jw->strs[id].text, jw->scratch.data, jw->scratch.len);
		jw->scratch.oom = false;
		jw->nstrs++;
	}
	if (jw->strs[id].text)
		json_buf_raw(b, jw->strs[id].text, jw->strs[id].len);
	else
		json_buf_str(b, s);
}

/* A name printed unescaped between quotes, as printf's %s would (NULL as "(null)"). */
static void put_raw_str(struct json_buf *b, const char *s)
{
	json_buf_puts(b, s ? s : "(null)");
}

static void put_bool(struct json_buf *b, bool v)
{
	if (v)
		json_buf_lit(b, "true");
	else
		json_buf_lit(b, "false");
}

/* The line is built in memory and written with one fwrite(). */
static int jsonl_sample(struct writer *w, const struct task_sample *s)
{
	struct jsonl_writer *jw = w->priv;
	struct json_buf *b = &jw->line;
	uint64_t poll_ns;

	b->len = 0;
	json_buf_lit(b, "{\"timestamp_ns\":");
	json_buf_u64(b, s->timestamp_ns);
	json_buf_lit(b, ",\"pid\":");
	json_buf_u64(b, s->pid);
	json_buf_lit(b, ",\"tid\":");
	json_buf_u64(b, s->tid);
	json_buf_lit(b, ",\"ns_pid\":");
	json_buf_u64(b, s->ns_pid);
	json_buf_lit(b, ",\"ns_tid\":");
	json_buf_u64(b, s->ns_tid);
	json_buf_lit(b, ",\"worker\":");
	json_buf_i64(b, s->worker);
	json_buf_lit(b, ",\"worker_key\":\"0x");
	json_buf_hex(b, s->worker_key);
	json_buf_lit(b, "\",\"runtime\":");
	if (s->runtime >= 0) {
		json_buf_i64(b, s->runtime);
		json_buf_lit(b, ",\"runtime_key\":\"0x");
		json_buf_hex(b, s->runtime_key);
		json_buf_lit(b, "\"");
	} else {
		json_buf_lit(b, "null,\"runtime_key\":null");
	}
	json_buf_lit(b, ",\"task_id\":");
	if (s->task_id_ok)
		json_buf_u64(b, s->task_id);
	else
		json_buf_lit(b, "null");
	json_buf_lit(b, ",\"task_id_ok\":");
	put_bool(b, s->task_id_ok);
	json_buf_lit(b, ",\"inclusion_probability\":");
	put_prob(jw, s->prob);
	json_buf_lit(b, ",\"epoch\":");
	json_buf_u64(b, s->epoch);
	json_buf_lit(b, ",\"idle_start_ns\":");
	json_buf_u64(b, s->idle_start_ns);
	json_buf_lit(b, ",\"idle_end_ns\":");
	json_buf_u64(b, s->idle_end_ns);
	json_buf_lit(b, ",\"idle_ns\":");
	json_buf_u64(b, s->idle_known ? s->idle_end_ns - s->idle_start_ns : 0);
	json_buf_lit(b, ",\"idle_known\":");
	put_bool(b, s->idle_known);
	if (task_sample_poll_ns(s, &poll_ns)) {
		json_buf_lit(b, ",\"poll_duration_ns\":");
		json_buf_u64(b, poll_ns);
	}
	json_buf_lit(b, ",\"capped\":");
	put_bool(b, s->capped);
	json_buf_lit(b, ",\"outcome\":\"");
	put_raw_str(b, s->outcome);
	json_buf_lit(b, "\",\"park_point\":\"");
	put_raw_str(b, s->park_point);
	json_buf_lit(b, "\",\"park_decided\":\"");
	put_raw_str(b, s->park_decided ? s->park_decided : "none");
	json_buf_lit(b, "\",\"also_pending\":");
	json_buf_u64(b, s->also_pending);
	json_buf_lit(b, ",\"weight_count\":");
	json_buf_u64(b, s->weight_count);
	json_buf_lit(b, ",\"weight_idle_ns\":");
	json_buf_u64(b, s->weight_idle_ns);
	json_buf_lit(b, ",\"weight_cpu_ns\":");
	json_buf_u64(b, s->weight_cpu_ns);
	if (s->on_cpu)
		json_buf_lit(b, ",\"kind\":\"cpu\"");
	else
		json_buf_lit(b, ",\"kind\":\"park\"");
	if (s->stack_error) {
		json_buf_lit(b, ",\"stack_error\":");
		json_buf_i64(b, s->stack_error);
	}
	if (s->window) {
		json_buf_lit(b, ",\"window\":");
		json_buf_u64(b, s->window);
	}
	json_buf_lit(b, ",\"future\":");
	put_frame_str(jw, s->future);
	json_buf_lit(b, ",\"stack\":[");
	for (size_t i = 0, k = 0; i < s->nframes; i++) {
		if (s->frames[i].task_root)
			continue; /* "future" says it */
		if (k++)
			json_buf_lit(b, ",");
		json_buf_lit(b, "{\"addr\":\"0x");
		json_buf_hex(b, s->frames[i].addr);
		json_buf_lit(b, "\",\"name\":");
		put_frame_str(jw, s->frames[i].name);
		json_buf_lit(b, ",\"module\":");
		put_frame_str(jw, s->frames[i].module);
		if (s->frames[i].inlined)
			json_buf_lit(b, ",\"inlined\":true");
		json_buf_lit(b, "}");
	}
	json_buf_lit(b, "]}\n");
	if (b->oom) {
		/* Nothing of the line is written: the file stays line-aligned. */
		b->oom = false;
		return -ENOMEM;
	}
	fwrite(b->data, 1, b->len, jw->out.f);
	return ferror(jw->out.f) ? -EIO : 0;
}

static void jsonl_free(struct writer *w)
{
	struct jsonl_writer *jw = w->priv;

	json_buf_free(&jw->line);
	json_buf_free(&jw->scratch);
	for (size_t i = 0; i < jw->nstrs; i++)
		free(jw->strs[i].text);
	free(jw->strs);
	u64_index_free(&jw->str_of);
	free(jw->fbuf);
	free(jw);
	w->priv = NULL;
}

static int jsonl_finish(struct writer *w, const struct run_context *rc)
{
	struct jsonl_writer *jw = w->priv;
	int err;

	(void)rc;
	err = out_file_commit(&jw->out);
	jsonl_free(w);
	return err;
}

static void jsonl_abort(struct writer *w)
{
	struct jsonl_writer *jw = w->priv;

	out_file_discard(&jw->out);
	jsonl_free(w);
}

int jsonl_writer_open(const struct out_dir *dir, struct writer *w)
{
	struct jsonl_writer *jw = calloc(1, sizeof(*jw));
	int err;

	if (!jw)
		return -ENOMEM;
	/* In place, not renamed at the end: readers may follow it while the run goes on. */
	err = out_file_create(&jw->out, dir, "samples.jsonl", true);
	if (err) {
		free(jw);
		return err;
	}
	/* Without the bigger buffer (out of memory), stdio's own does. */
	jw->fbuf = malloc(JSONL_BUF_SIZE);
	if (jw->fbuf && setvbuf(jw->out.f, jw->fbuf, _IOFBF, JSONL_BUF_SIZE)) {
		free(jw->fbuf);
		jw->fbuf = NULL;
	}
	w->format = "jsonl";
	w->priv = jw;
	w->sample = jsonl_sample;
	w->finish = jsonl_finish;
	w->abort = jsonl_abort;
	return 0;
}
