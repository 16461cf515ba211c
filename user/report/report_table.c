// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * report: the stack_table layout (docs/formats.md). stacks.jsonl is read whole first: its first
 * line names samples.jsonl's columns, every other line is a stack or a frame record. A sample
 * line is then an array of those columns, turned back into the object the inline layout has (the
 * stack record's keys in place of "stack_id", its frame ids replaced by the frames), so that
 * everything downstream reads one layout.
 *
 * Records are kept as text (memory: the file's size) and parsed when a sample names them; a
 * small cache by id saves re-parsing the few stacks most samples share.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <json-c/json.h>
#include "report.h"
#include "report_int.h"

#define MAX_COLUMNS 64
#define STACK_TABLE_MAX (4ull << 30) /* a stacks.jsonl larger than this is not ours */

static json_object *parse_line(struct report *r, const char *s, size_t len, struct perr *e)
{
	json_object *obj;

	if (len > REPORT_LINE_MAX) {
		rpt_fail(e, "longer than %u MiB", REPORT_LINE_MAX >> 20);
		return NULL;
	}
	json_tokener_reset(r->tok);
	obj = json_tokener_parse_ex(r->tok, s, (int)len);
	if (json_tokener_get_error(r->tok) != json_tokener_success || !obj ||
	    !rpt_blank(s + json_tokener_get_parse_end(r->tok),
		       len - json_tokener_get_parse_end(r->tok))) {
		json_object_put(obj);
		rpt_fail(e, "invalid JSON (%s)",
			 json_tokener_error_desc(json_tokener_get_error(r->tok)));
		return NULL;
	}
	return obj;
}

/* {"columns":[...],"absent_when_null":[...]}: names every column once, "stack_id" among them. */
static int take_header(struct report *r, json_object *h, struct perr *e)
{
	json_object *cols, *absent = NULL;
	size_t n;

	if (!json_object_is_type(h, json_type_object))
		return rpt_fail(e, "the first line is %s, expected an object", rpt_kind(h));
	if (rpt_get_typed(e, "", h, "columns", false, json_type_array, &cols) ||
	    rpt_get_typed(e, "", h, "absent_when_null", true, json_type_array, &absent))
		return -1;
	n = json_object_array_length(cols);
	if (!n || n > MAX_COLUMNS)
		return rpt_fail(e, "\"columns\" has %zu names, expected 1 to %d", n, MAX_COLUMNS);
	r->stack_col = SIZE_MAX;
	for (size_t i = 0; i < n; i++) {
		json_object *c = json_object_array_get_idx(cols, i);
		const char *name = json_object_get_string(c);

		if (!json_object_is_type(c, json_type_string) || !*name)
			return rpt_fail(e, "\"columns[%zu]\" is not a name", i);
		if (!strcmp(name, "stack_id"))
			r->stack_col = i;
		for (size_t j = 0; absent && j < json_object_array_length(absent); j++) {
			const char *a =
			    json_object_get_string(json_object_array_get_idx(absent, j));

			if (a && !strcmp(name, a))
				r->absent_when_null |= 1ull << i;
		}
	}
	if (r->stack_col == SIZE_MAX)
		return rpt_fail(e, "\"columns\" has no \"stack_id\"");
	r->columns = json_object_get(cols);
	return 0;
}

static int push_offset(struct rec_index *ix, size_t off)
{
	if (ix->n == ix->cap) {
		size_t ncap = ix->cap ? 2 * ix->cap : 256;
		size_t *n = realloc(ix->off, ncap * sizeof(*n));

		if (!n)
			return -1;
		ix->off = n;
		ix->cap = ncap;
	}
	ix->off[ix->n++] = off;
	return 0;
}

/* Where each stack and frame record's line starts; each kind's ids must be 0, 1, 2, ... in
 * file order (checked when a record is read). */
static int index_records(struct report *r, struct perr *e)
{
	char *p = r->table, *end = r->table + r->table_len, *nl;
	size_t lineno = 1;

	for (; p < end; p = nl + 1, lineno++) {
		struct rec_index *ix;

		nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl)
			return rpt_fail(
			    e, "line %zu: no newline at its end (the run was cut short)", lineno);
		if (lineno == 1)
			continue;
		if (!strncmp(p, "{\"id\":", 6))
			ix = &r->stack_recs;
		else if (!strncmp(p, "{\"frame\":", 9))
			ix = &r->frame_recs;
		else
			return rpt_fail(e, "line %zu: neither a stack nor a frame record", lineno);
		if (push_offset(ix, (size_t)(p - r->table)))
			return rpt_fail(e, "out of memory");
	}
	return 0;
}

/* Reads all of f into r->table. */
static int slurp(struct report *r, FILE *f, struct perr *e)
{
	size_t cap = 0;

	for (;;) {
		size_t n;

		if (r->table_len == cap) {
			char *t;

			if (cap >= STACK_TABLE_MAX)
				return rpt_fail(e, "larger than %llu GiB", STACK_TABLE_MAX >> 30);
			cap = cap ? 2 * cap : 1 << 20;
			t = realloc(r->table, cap);
			if (!t)
				return rpt_fail(e, "out of memory");
			r->table = t;
		}
		n = fread(r->table + r->table_len, 1, cap - r->table_len, f);
		r->table_len += n;
		if (ferror(f))
			return rpt_fail(e, "read failed: %s", strerror(errno ? errno : EIO));
		if (!n)
			return 0;
	}
}

int report_read_stacks(struct report *r, FILE *f, char *err, size_t errlen)
{
	struct perr e = {err, errlen};
	char msg[256];
	json_object *h;
	char *nl;
	int rc;

	if (r->table || slurp(r, f, &e))
		return r->table_len ? -1 : rpt_fail(&e, "%s", r->table ? err : "read twice");
	if (memchr(r->table, 0, r->table_len))
		return rpt_fail(&e, "binary data (a NUL byte)");
	nl = memchr(r->table, '\n', r->table_len);
	if (!nl)
		return rpt_fail(&e, "line 1: no header line");
	h = parse_line(r, r->table, (size_t)(nl - r->table), &(struct perr){msg, sizeof(msg)});
	rc = h ? take_header(r, h, &(struct perr){msg, sizeof(msg)}) : -1;
	json_object_put(h);
	if (rc)
		return rpt_fail(&e, "line 1: %s", msg);
	return index_records(r, &e);
}

/* Record ID of kind KEY ("id" or "frame") in IX, parsed and checked; NULL with "line N: problem"
 * in msg. */
static json_object *read_record(struct report *r, const struct rec_index *ix, const char *key,
				uint64_t id, char *msg, size_t msglen)
{
	struct perr e = {msg, msglen};
	size_t start = ix->off[id], len, line, col;
	json_object *rec;
	uint64_t got;

	len = (size_t)((char *)memchr(r->table + start, '\n', r->table_len - start) -
		       (r->table + start));
	rec = parse_line(r, r->table + start, len, &e);
	if (rec && (!json_object_is_type(rec, json_type_object) ||
		    rpt_get_u64(&e, "", rec, key, false, 0, MAX_U64, &got) ||
		    (got != id &&
		     rpt_fail(&e, "\"%s\" is %" PRIu64 ", expected %" PRIu64, key, got, id)))) {
		json_object_put(rec);
		rec = NULL;
	}
	if (!rec) {
		char why[200];

		snprintf(why, sizeof(why), "%s", msg);
		rpt_line_col(r->table, start, &line, &col);
		rpt_fail(&e, "stacks.jsonl line %zu: %s", line, why);
	}
	return rec;
}

/* The record's "frames" (frame ids) turned into "stack" (the frames' objects, without their
 * "frame" key), as the inline layout has it. */
static int expand_frames(struct report *r, json_object *rec, char *msg, size_t msglen)
{
	struct perr e = {msg, msglen};
	json_object *ids, *stack;
	size_t n;

	if (rpt_get_typed(&e, "", rec, "frames", false, json_type_array, &ids))
		return -1;
	n = json_object_array_length(ids);
	if (n > MAX_FRAMES)
		return rpt_fail(&e, "\"frames\" has %zu ids, more than %d", n, MAX_FRAMES);
	stack = json_object_new_array_ext((int)n);
	if (!stack)
		return rpt_fail(&e, "out of memory");
	json_object_object_add(rec, "stack", stack);
	for (size_t i = 0; i < n; i++) {
		json_object *v = json_object_array_get_idx(ids, i), *f;
		int64_t fid = json_object_get_int64(v);

		if (!json_object_is_type(v, json_type_int) || fid < 0 ||
		    (size_t)fid >= r->frame_recs.n)
			return rpt_fail(&e, "\"frames[%zu]\" is not a frame id of the table", i);
		f = read_record(r, &r->frame_recs, "frame", (uint64_t)fid, msg, msglen);
		if (!f)
			return -1;
		json_object_object_del(f, "frame");
		json_object_array_add(stack, f);
	}
	json_object_object_del(rec, "frames");
	return 0;
}

/* Stack record ID with its frames, checked; NULL with the message in e. */
static json_object *record(struct report *r, uint64_t id, struct perr *e)
{
	size_t slot = id % REPORT_RECORD_CACHE;
	char msg[300];
	json_object *rec;

	if (r->cache[slot] && r->cache_id[slot] == id)
		return r->cache[slot];
	if (id >= r->stack_recs.n) {
		rpt_fail(e, "\"stack_id\" %" PRIu64 " is not in stacks.jsonl (%zu stacks)", id,
			 r->stack_recs.n);
		return NULL;
	}
	rec = read_record(r, &r->stack_recs, "id", id, msg, sizeof(msg));
	if (rec && expand_frames(r, rec, msg, sizeof(msg))) {
		json_object_put(rec);
		rec = NULL;
	}
	if (!rec) {
		rpt_fail(e, "stack %" PRIu64 ": %s", id, msg);
		return NULL;
	}
	json_object_put(r->cache[slot]);
	r->cache[slot] = rec;
	r->cache_id[slot] = id;
	return rec;
}

json_object *rpt_expand_row(struct report *r, json_object *row, struct perr *e)
{
	size_t n = json_object_array_length(row), ncols;
	json_object *obj, *id_val, *rec;
	int64_t id;

	ncols = json_object_array_length(r->columns);
	if (n != ncols) {
		rpt_fail(e, "the row has %zu values, stacks.jsonl names %zu columns", n, ncols);
		return NULL;
	}
	id_val = json_object_array_get_idx(row, r->stack_col);
	if (!json_object_is_type(id_val, json_type_int) ||
	    (id = json_object_get_int64(id_val)) < 0) {
		rpt_fail(e, "\"stack_id\" is %s, expected an integer from 0", rpt_kind(id_val));
		return NULL;
	}
	rec = record(r, (uint64_t)id, e);
	obj = rec ? json_object_new_object() : NULL;
	if (!obj)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		json_object *v = json_object_array_get_idx(row, i);

		if (i == r->stack_col || (!v && (r->absent_when_null >> i & 1)))
			continue;
		json_object_object_add(
		    obj, json_object_get_string(json_object_array_get_idx(r->columns, i)),
		    json_object_get(v));
	}
	json_object_object_foreach(rec, key, val)
	{
		if (strcmp(key, "id"))
			json_object_object_add(obj, key, json_object_get(val));
	}
	return obj;
}

void rpt_table_free(struct report *r)
{
	for (size_t i = 0; i < REPORT_RECORD_CACHE; i++)
		json_object_put(r->cache[i]);
	json_object_put(r->columns);
	free(r->stack_recs.off);
	free(r->frame_recs.off);
	free(r->table);
}
