// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * samples.jsonl: one TaskSampleEvent per line, streamed; a reader can stop at any line.
 *
 * Two layouts (docs/formats.md). "inline": each line an object with the whole stack. The
 * default, "stack_table": each line an array of the columns named in the first line of
 * stacks.jsonl, ending in a stack id; stacks.jsonl holds one record per distinct frame and one
 * per distinct stack (its frame ids, future, park point, how it was chosen and the poll's
 * outcome: what samples of one place share), each written before the first line that names it.
 * A stack's frames are ~95% of an inline line, so a sample shrinks from kilobytes to under 200
 * bytes, and stacks that share frames share their records.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "json.h"
#include "stack_agg.h"
#include "util_hash.h"
#include "writer.h"

/* stdio's default 4 KiB buffer would mean a write(2) for about every line. */
#define JSONL_BUF_SIZE (256 * 1024)
#define ROWS_FLUSH_NS 1000000000ULL

/*
 * JSONL_STACK_INDEX_MAX (writer.h): distinct stacks the stack-hash -> id index keeps (at most 3
 * MiB of slots). Only hashes are
 * kept, never frames: the table itself is the file. A run that meets more distinct stacks (a
 * long run of a program whose addresses keep changing, JIT-like) starts the index afresh: ids
 * keep counting up, and a stack seen again gets a new id and its record is written again. The
 * file then grows with the stacks met, as the inline layout would, but memory stays bounded.
 */

/* The columns of a stack_table sample line, and those whose null means "absent" in the inline
 * layout (the keys that are optional there). */
#define SAMPLE_COLUMNS                                                                             \
	"\"timestamp_ns\",\"pid\",\"tid\",\"ns_pid\",\"ns_tid\",\"worker\",\"worker_key\","        \
	"\"runtime\",\"runtime_key\",\"task_id\",\"task_id_ok\",\"inclusion_probability\","        \
	"\"epoch\",\"idle_start_ns\",\"idle_end_ns\",\"idle_ns\",\"idle_known\","                  \
	"\"poll_duration_ns\",\"capped\",\"also_pending\",\"weight_count\",\"weight_idle_ns\","    \
	"\"weight_cpu_ns\",\"kind\",\"stack_error\",\"window\",\"stack_id\""
#define ABSENT_WHEN_NULL "\"poll_duration_ns\",\"stack_error\",\"window\""

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
	/* stack_table layout only */
	bool table;
	struct out_file stacks; /* stacks.jsonl, through fbuf */
	/* Rows waiting for samples.jsonl: written (unbuffered) only after stacks.jsonl is flushed,
	 * so that the kernel has every record before a row that names it, at a write(2) per
	 * JSONL_BUF_SIZE of either file rather than per new stack. */
	struct json_buf rows;
	uint64_t rows_from_ns;	   /* timestamp_ns of the first of them */
	struct json_buf rec, frec; /* a stack record, a frame record */
	struct u64_index stack_ids, frame_ids;
	/* ids handed out before each index last started afresh */
	uint64_t id_base, frame_base;
	uint64_t *key; /* the words a stack's hash covers */
	size_t key_cap;
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
static void put_frame_str(struct jsonl_writer *jw, struct json_buf *b, const char *s)
{
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

/* A frame's keys, "addr" first, without the braces. */
static void put_frame(struct jsonl_writer *jw, struct json_buf *b, const struct task_frame *f)
{
	json_buf_lit(b, "\"addr\":\"0x");
	json_buf_hex(b, f->addr);
	json_buf_lit(b, "\",\"name\":");
	put_frame_str(jw, b, f->name);
	json_buf_lit(b, ",\"module\":");
	put_frame_str(jw, b, f->module);
	if (f->inlined)
		json_buf_lit(b, ",\"inlined\":true");
}

/* The frames, leaf first, as a JSON array; the task root is left out ("future" says it). */
static void put_stack(struct jsonl_writer *jw, struct json_buf *b, const struct task_sample *s)
{
	json_buf_lit(b, "[");
	for (size_t i = 0, k = 0; i < s->nframes; i++) {
		if (s->frames[i].task_root)
			continue;
		if (k++)
			json_buf_lit(b, ",");
		json_buf_lit(b, "{");
		put_frame(jw, b, &s->frames[i]);
		json_buf_lit(b, "}");
	}
	json_buf_lit(b, "]");
}

/*
 * The keys that samples taken at one place share (a stack record's), each preceded by a comma:
 * the poll's outcome and its park point, then (tail) the future. The inline layout has them in
 * that order, the first three among the sample's own keys, the tail before the stack.
 */
static void put_place(struct jsonl_writer *jw, struct json_buf *b, const struct task_sample *s,
		      bool tail)
{
	if (!tail) {
		json_buf_lit(b, ",\"outcome\":\"");
		put_raw_str(b, s->outcome);
		json_buf_lit(b, "\",\"park_point\":\"");
		put_raw_str(b, s->park_point);
		json_buf_lit(b, "\",\"park_decided\":\"");
		put_raw_str(b, s->park_decided ? s->park_decided : "none");
		json_buf_lit(b, "\"");
		return;
	}
	json_buf_lit(b, ",\"future\":");
	put_frame_str(jw, b, s->future);
}

/* Writes b's line to o whole, or nothing of it (the file stays line-aligned). */
static int put_line(struct json_buf *b, struct out_file *o)
{
	if (b->oom) {
		b->oom = false;
		return -ENOMEM;
	}
	fwrite(b->data, 1, b->len, o->f);
	return ferror(o->f) ? -EIO : 0;
}

/* A value's key in the inline layout (",\"KEY\":", or "{" and the key for the first), or the
 * comma before it in a stack_table row (nothing before the first: "[" is written by the caller).
 */
static void put_key(struct json_buf *b, bool row, const char *key, size_t n)
{
	if (!row)
		json_buf_raw(b, key, n);
	else if (b->len > 1)
		json_buf_lit(b, ",");
}
#define KEY(b, row, key) put_key((b), (row), (key), sizeof(key) - 1)

/* A value the inline layout leaves out when it is unknown: null in a row. */
static void put_opt_u64(struct json_buf *b, bool row, const char *key, size_t n, bool have,
			uint64_t v)
{
	if (!have && !row)
		return;
	put_key(b, row, key, n);
	if (have)
		json_buf_u64(b, v);
	else
		json_buf_lit(b, "null");
}
#define OPT_U64(b, row, key, have, v) put_opt_u64((b), (row), (key), sizeof(key) - 1, (have), (v))

/* The sample's own values, in SAMPLE_COLUMNS' order: an inline object's keys up to "future"
 * (the place's keys, put_place(), go in the middle of them), or a row's values. */
static void put_fields(struct jsonl_writer *jw, const struct task_sample *s, bool row)
{
	struct json_buf *b = &jw->line;
	uint64_t poll_ns = 0;
	bool has_poll = task_sample_poll_ns(s, &poll_ns);

	KEY(b, row, "{\"timestamp_ns\":");
	json_buf_u64(b, s->timestamp_ns);
	KEY(b, row, ",\"pid\":");
	json_buf_u64(b, s->pid);
	KEY(b, row, ",\"tid\":");
	json_buf_u64(b, s->tid);
	KEY(b, row, ",\"ns_pid\":");
	json_buf_u64(b, s->ns_pid);
	KEY(b, row, ",\"ns_tid\":");
	json_buf_u64(b, s->ns_tid);
	KEY(b, row, ",\"worker\":");
	json_buf_i64(b, s->worker);
	KEY(b, row, ",\"worker_key\":");
	json_buf_lit(b, "\"0x");
	json_buf_hex(b, s->worker_key);
	json_buf_lit(b, "\"");
	KEY(b, row, ",\"runtime\":");
	if (s->runtime >= 0)
		json_buf_i64(b, s->runtime);
	else
		json_buf_lit(b, "null");
	KEY(b, row, ",\"runtime_key\":");
	if (s->runtime >= 0) {
		json_buf_lit(b, "\"0x");
		json_buf_hex(b, s->runtime_key);
		json_buf_lit(b, "\"");
	} else {
		json_buf_lit(b, "null");
	}
	KEY(b, row, ",\"task_id\":");
	if (s->task_id_ok)
		json_buf_u64(b, s->task_id);
	else
		json_buf_lit(b, "null");
	KEY(b, row, ",\"task_id_ok\":");
	put_bool(b, s->task_id_ok);
	KEY(b, row, ",\"inclusion_probability\":");
	put_prob(jw, s->prob);
	KEY(b, row, ",\"epoch\":");
	json_buf_u64(b, s->epoch);
	KEY(b, row, ",\"idle_start_ns\":");
	json_buf_u64(b, s->idle_start_ns);
	KEY(b, row, ",\"idle_end_ns\":");
	json_buf_u64(b, s->idle_end_ns);
	KEY(b, row, ",\"idle_ns\":");
	json_buf_u64(b, s->idle_known ? s->idle_end_ns - s->idle_start_ns : 0);
	KEY(b, row, ",\"idle_known\":");
	put_bool(b, s->idle_known);
	OPT_U64(b, row, ",\"poll_duration_ns\":", has_poll, poll_ns);
	KEY(b, row, ",\"capped\":");
	put_bool(b, s->capped);
	if (!row)
		put_place(jw, b, s, false);
	KEY(b, row, ",\"also_pending\":");
	json_buf_u64(b, s->also_pending);
	KEY(b, row, ",\"weight_count\":");
	json_buf_u64(b, s->weight_count);
	KEY(b, row, ",\"weight_idle_ns\":");
	json_buf_u64(b, s->weight_idle_ns);
	KEY(b, row, ",\"weight_cpu_ns\":");
	json_buf_u64(b, s->weight_cpu_ns);
	KEY(b, row, ",\"kind\":");
	if (s->on_cpu)
		json_buf_lit(b, "\"cpu\"");
	else
		json_buf_lit(b, "\"park\"");
	if (s->stack_error || row) {
		KEY(b, row, ",\"stack_error\":");
		if (s->stack_error)
			json_buf_i64(b, s->stack_error);
		else
			json_buf_lit(b, "null");
	}
	OPT_U64(b, row, ",\"window\":", s->window != 0, s->window);
}

/* The inline layout: the line is built in memory and written with one fwrite(). */
static int jsonl_sample(struct writer *w, const struct task_sample *s)
{
	struct jsonl_writer *jw = w->priv;
	struct json_buf *b = &jw->line;

	b->len = 0;
	put_fields(jw, s, false);
	put_place(jw, b, s, true);
	json_buf_lit(b, ",\"stack\":");
	put_stack(jw, b, s);
	json_buf_lit(b, "}\n");
	return put_line(b, &jw->out);
}

/* The words that tell two stack records apart: the place's strings by pointer (the symbolizer's
 * and the collector's, fixed while the writers are open, see task_frame) and every frame's
 * address, name, module and inlined flag. */
static size_t stack_key(struct jsonl_writer *jw, const struct task_sample *s)
{
	size_t n = 4 + 4 * s->nframes, k = 0;

	if (n > jw->key_cap) {
		uint64_t *key = realloc(jw->key, n * sizeof(*key));

		if (!key)
			return 0;
		jw->key = key;
		jw->key_cap = n;
	}
	jw->key[k++] = (uintptr_t)s->future;
	jw->key[k++] = (uintptr_t)s->park_point;
	jw->key[k++] = (uintptr_t)s->park_decided;
	jw->key[k++] = (uintptr_t)s->outcome;
	for (size_t i = 0; i < s->nframes; i++) {
		if (s->frames[i].task_root)
			continue;
		jw->key[k++] = s->frames[i].addr;
		jw->key[k++] = (uintptr_t)s->frames[i].name;
		jw->key[k++] = (uintptr_t)s->frames[i].module;
		jw->key[k++] = s->frames[i].inlined;
	}
	return k;
}

/* KEY's id in IX (*base counts the ids of its earlier generations). Returns 0, or 1 when it is
 * new, with b started as its record ("OPEN" and the id); -ENOMEM. */
static int new_record(struct u64_index *ix, uint64_t *base, uint64_t key, uint64_t *id,
		      struct json_buf *b, const char *open)
{
	uint32_t dense;
	bool added;

	if (ix->n == JSONL_STACK_INDEX_MAX) {
		*base += ix->n;
		u64_index_free(ix);
	}
	if (u64_index_id(ix, key, &dense, &added))
		return -ENOMEM;
	*id = *base + dense;
	if (!added)
		return 0;
	b->len = 0;
	json_buf_puts(b, open);
	json_buf_u64(b, *id);
	return 1;
}

/* Writes REC's line (the record of a new ID) to stacks.jsonl; when it cannot, forgets every id
 * of IX, so that ID is handed out again with its record. */
static int put_record(struct jsonl_writer *jw, struct json_buf *rec, struct u64_index *ix,
		      uint64_t *base, uint64_t id)
{
	int err = put_line(rec, &jw->stacks);

	if (err) {
		u64_index_free(ix);
		*base = id;
	}
	return err;
}

/* Frame F's id in the frame records, writing its record first when it is new. */
static int frame_id(struct jsonl_writer *jw, const struct task_frame *f, uint64_t *id)
{
	uint64_t key[4] = {f->addr, (uintptr_t)f->name, (uintptr_t)f->module, f->inlined};
	struct json_buf *b = &jw->frec;
	int rc =
	    new_record(&jw->frame_ids, &jw->frame_base, hash_words(key, 4), id, b, "{\"frame\":");

	if (rc <= 0)
		return rc;
	json_buf_lit(b, ",");
	put_frame(jw, b, f);
	json_buf_lit(b, "}\n");
	return put_record(jw, b, &jw->frame_ids, &jw->frame_base, *id);
}

/*
 * The id of s's stack record, writing it (and the records of its frames new to the table)
 * first when it is new. A 64-bit hash stands for a stack or a frame (two sharing one among the
 * 2^17 an index holds: odds about 2^-31).
 */
static int stack_id(struct jsonl_writer *jw, const struct task_sample *s, uint64_t *id)
{
	size_t n = stack_key(jw, s);
	struct json_buf *b = &jw->rec;
	uint64_t fid = 0;
	int err, werr;

	if (!n)
		return -ENOMEM;
	err = new_record(&jw->stack_ids, &jw->id_base, hash_words(jw->key, n), id, b, "{\"id\":");
	if (err <= 0)
		return err;
	err = 0;
	put_place(jw, b, s, false);
	put_place(jw, b, s, true);
	json_buf_lit(b, ",\"frames\":[");
	for (size_t i = 0, k = 0; i < s->nframes && !err; i++) {
		if (s->frames[i].task_root)
			continue;
		err = frame_id(jw, &s->frames[i], &fid);
		if (k++)
			json_buf_lit(b, ",");
		json_buf_u64(b, fid);
	}
	json_buf_lit(b, "]}\n");
	if (err)
		b->oom = true; /* a frame went unwritten: forget this stack too */
	werr = put_record(jw, b, &jw->stack_ids, &jw->id_base, *id);
	return err ? err : werr;
}

/* The rows gathered so far to samples.jsonl, after every record they may name. */
static int flush_rows(struct jsonl_writer *jw)
{
	if (fflush(jw->stacks.f) || ferror(jw->stacks.f))
		return -EIO;
	if (jw->rows.len)
		fwrite(jw->rows.data, 1, jw->rows.len, jw->out.f);
	jw->rows.len = 0;
	return ferror(jw->out.f) ? -EIO : 0;
}

/* The stack_table layout: the values of SAMPLE_COLUMNS as a JSON array. */
static int table_sample(struct writer *w, const struct task_sample *s)
{
	struct jsonl_writer *jw = w->priv;
	struct json_buf *b = &jw->line;
	uint64_t id;
	int err = stack_id(jw, s, &id);

	if (err)
		return err;
	b->len = 0;
	json_buf_lit(b, "[");
	put_fields(jw, s, true);
	json_buf_lit(b, ",");
	json_buf_u64(b, id);
	json_buf_lit(b, "]\n");
	if (b->oom) {
		b->oom = false;
		return -ENOMEM;
	}
	if (!jw->rows.len)
		jw->rows_from_ns = s->timestamp_ns;
	json_buf_raw(&jw->rows, b->data, b->len);
	if (jw->rows.oom) {
		jw->rows.oom = false;
		return -ENOMEM;
	}
	/* Rows are ~50x smaller than inline lines: a full buffer can take minutes, so a second of
	 * samples goes out too, for readers following the run and for what a SIGKILL loses. */
	return jw->rows.len >= JSONL_BUF_SIZE || s->timestamp_ns - jw->rows_from_ns >= ROWS_FLUSH_NS
		   ? flush_rows(jw)
		   : 0;
}

static void jsonl_free(struct writer *w)
{
	struct jsonl_writer *jw = w->priv;

	json_buf_free(&jw->line);
	json_buf_free(&jw->scratch);
	json_buf_free(&jw->rec);
	json_buf_free(&jw->frec);
	json_buf_free(&jw->rows);
	for (size_t i = 0; i < jw->nstrs; i++)
		free(jw->strs[i].text);
	free(jw->strs);
	u64_index_free(&jw->str_of);
	u64_index_free(&jw->stack_ids);
	u64_index_free(&jw->frame_ids);
	free(jw->key);
	free(jw->fbuf);
	free(jw);
	w->priv = NULL;
}

/* The last rows, then stacks.jsonl is committed first: a reader that sees samples.jsonl
 * complete finds every record it names. */
static int jsonl_finish(struct writer *w, const struct run_context *rc)
{
	struct jsonl_writer *jw = w->priv;
	int err = jw->table ? flush_rows(jw) : 0;

	(void)rc;
	if (err) {
		fprintf(stderr, "dial9-bpf: failed to write %s/samples.jsonl: %s\n",
			jw->out.dir->path, strerror(-err));
		out_file_discard(&jw->stacks);
	} else if (jw->table) {
		err = out_file_commit(&jw->stacks);
	}
	if (err)
		out_file_discard(&jw->out);
	else
		err = out_file_commit(&jw->out);
	jsonl_free(w);
	return err;
}

static void jsonl_abort(struct writer *w)
{
	struct jsonl_writer *jw = w->priv;

	out_file_discard(&jw->out);
	if (jw->table)
		out_file_discard(&jw->stacks);
	jsonl_free(w);
}

/* Gives f, before any I/O on it, the writer's big buffer; without it (out of memory), stdio's
 * own does. */
static void set_buffer(struct jsonl_writer *jw, FILE *f)
{
	jw->fbuf = malloc(JSONL_BUF_SIZE);
	if (jw->fbuf && setvbuf(f, jw->fbuf, _IOFBF, JSONL_BUF_SIZE)) {
		free(jw->fbuf);
		jw->fbuf = NULL;
	}
}

/* stacks.jsonl (through fbuf) and its first line, which names samples.jsonl's columns; flushed
 * at once, so that a reader following the run finds it before any sample. */
static int open_stacks(struct jsonl_writer *jw, const struct out_dir *dir)
{
	int err = out_file_create(&jw->stacks, dir, "stacks.jsonl", true);

	if (err)
		return err;
	jw->table = true;
	set_buffer(jw, jw->stacks.f);
	fputs("{\"columns\":[" SAMPLE_COLUMNS "],\"absent_when_null\":[" ABSENT_WHEN_NULL "]}\n",
	      jw->stacks.f);
	if (fflush(jw->stacks.f) || ferror(jw->stacks.f)) {
		out_file_discard(&jw->stacks);
		jw->table = false;
		return -EIO;
	}
	return 0;
}

static int open_writer(const struct out_dir *dir, struct writer *w, bool table)
{
	struct jsonl_writer *jw = calloc(1, sizeof(*jw));
	int err;

	if (!jw)
		return -ENOMEM;
	/* In place, not renamed at the end: readers may follow them while the run goes on. An
	 * earlier run's stacks.jsonl beside an inline samples.jsonl would only mislead. */
	if (!table && unlinkat(dir->fd, "stacks.jsonl", 0) && errno != ENOENT)
		fprintf(stderr, "dial9-bpf: failed to remove an earlier %s/stacks.jsonl: %s\n",
			dir->path, strerror(errno));
	err = table ? open_stacks(jw, dir) : 0;
	if (!err)
		err = out_file_create(&jw->out, dir, "samples.jsonl", true);
	if (err) {
		if (jw->table)
			out_file_discard(&jw->stacks);
		free(jw->fbuf);
		free(jw);
		return err;
	}
	if (table)
		setvbuf(jw->out.f, NULL, _IONBF, 0); /* rows has the buffer */
	else
		set_buffer(jw, jw->out.f);
	w->format = "jsonl";
	w->priv = jw;
	w->sample = table ? table_sample : jsonl_sample;
	w->finish = jsonl_finish;
	w->abort = jsonl_abort;
	return 0;
}

int jsonl_writer_open(const struct out_dir *dir, struct writer *w)
{
	return open_writer(dir, w, true);
}

int jsonl_inline_writer_open(const struct out_dir *dir, struct writer *w)
{
	return open_writer(dir, w, false);
}
