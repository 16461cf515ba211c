// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* report: typed access to json-c objects, reading one samples.jsonl line or a stream of
 * them, and opening the input files safely. See report_int.h. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <json-c/json.h>
#include "out_dir.h"
#include "report.h"
#include "report_int.h"

__attribute__((format(printf, 2, 3))) int rpt_fail(struct perr *e, const char *fmt, ...)
{
	va_list ap;

	if (e->len) {
		va_start(ap, fmt);
		vsnprintf(e->buf, e->len, fmt, ap);
		va_end(ap);
	}
	return -1;
}

const char *rpt_kind(json_object *v)
{
	switch (json_object_get_type(v)) {
	case json_type_null:
		return "null";
	case json_type_boolean:
		return "a boolean";
	case json_type_double:
		return "a fractional number";
	case json_type_int:
		return "an integer";
	case json_type_object:
		return "an object";
	case json_type_array:
		return "an array";
	case json_type_string:
		return "a string";
	}
	return "unknown";
}

#define FIELD "\"%s%s%s\""
#define FIELD_ARGS(where, key) (where), *(where) ? "." : "", (key)

/* 1 when present (v may be NULL for JSON null), 0 when absent but optional, -1 on error. */
static int member(struct perr *e, const char *where, json_object *obj, const char *key,
		  bool optional, json_object **v)
{
	if (json_object_object_get_ex(obj, key, v))
		return 1;
	*v = NULL;
	if (optional)
		return 0;
	return rpt_fail(e, "missing " FIELD, FIELD_ARGS(where, key));
}

/* member() of a value that must be of type (named what in the message). */
static int member_of(struct perr *e, const char *where, json_object *obj, const char *key,
		     bool optional, enum json_type type, const char *what, json_object **v)
{
	int rc = member(e, where, obj, key, optional, v);

	if (rc > 0 && !json_object_is_type(*v, type))
		return rpt_fail(e, FIELD " is %s, expected %s", FIELD_ARGS(where, key),
				rpt_kind(*v), what);
	return rc;
}

int rpt_get_u64(struct perr *e, const char *where, json_object *obj, const char *key, bool optional,
		uint64_t min, uint64_t max, uint64_t *out)
{
	json_object *v;
	int rc = member_of(e, where, obj, key, optional, json_type_int, "an integer", &v);
	uint64_t u;

	if (rc <= 0)
		return rc;
	if (json_object_get_int64(v) < 0)
		return rpt_fail(e, FIELD " is negative", FIELD_ARGS(where, key));
	u = json_object_get_uint64(v);
	if (u == UINT64_MAX && max < UINT64_MAX)
		return rpt_fail(e, FIELD " is beyond 64 bits", FIELD_ARGS(where, key));
	if (u < min || u > max)
		return rpt_fail(e, FIELD " is %" PRIu64 ", outside %" PRIu64 "..%" PRIu64,
				FIELD_ARGS(where, key), u, min, max);
	*out = u;
	return 0;
}

int rpt_get_i64(struct perr *e, const char *where, json_object *obj, const char *key, bool optional,
		int64_t min, int64_t max, int64_t *out)
{
	json_object *v;
	int rc = member_of(e, where, obj, key, optional, json_type_int, "an integer", &v);
	int64_t i;

	if (rc <= 0)
		return rc;
	i = json_object_get_int64(v);
	if (i < min || i > max)
		return rpt_fail(e, FIELD " is %" PRId64 ", outside %" PRId64 "..%" PRId64,
				FIELD_ARGS(where, key), i, min, max);
	*out = i;
	return 0;
}

/* A number in [lo, hi], or (lo, hi] when lo_open. */
int rpt_get_num(struct perr *e, const char *where, json_object *obj, const char *key, bool optional,
		double lo, double hi, bool lo_open, double *out)
{
	json_object *v;
	int rc = member(e, where, obj, key, optional, &v);
	double d;

	if (rc <= 0)
		return rc;
	if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
		return rpt_fail(e, FIELD " is %s, expected a number", FIELD_ARGS(where, key),
				rpt_kind(v));
	d = json_object_get_double(v);
	if (!isfinite(d) || d > hi || d < lo || (lo_open && d == lo))
		return rpt_fail(e, FIELD " is %g, outside %s%g, %g]", FIELD_ARGS(where, key), d,
				lo_open ? "(" : "[", lo, hi);
	*out = d;
	return 0;
}

int rpt_get_bool(struct perr *e, const char *where, json_object *obj, const char *key,
		 bool optional, bool *out)
{
	json_object *v;
	int rc = member_of(e, where, obj, key, optional, json_type_boolean, "true or false", &v);

	if (rc <= 0)
		return rc;
	*out = json_object_get_boolean(v);
	return 0;
}

/* *out is NULL for JSON null when nullable, and left alone when absent and optional. */
int rpt_get_str(struct perr *e, const char *where, json_object *obj, const char *key, bool optional,
		bool nullable, const char **out)
{
	json_object *v;
	int rc = member(e, where, obj, key, optional, &v);

	if (rc <= 0)
		return rc;
	if (nullable && !v) {
		*out = NULL;
		return 0;
	}
	if (!json_object_is_type(v, json_type_string))
		return rpt_fail(e, FIELD " is %s, expected a string", FIELD_ARGS(where, key),
				rpt_kind(v));
	*out = json_object_get_string(v);
	return 0;
}

int rpt_get_typed(struct perr *e, const char *where, json_object *obj, const char *key,
		  bool optional, enum json_type type, json_object **out)
{
	json_object *v;
	int rc = member_of(e, where, obj, key, optional, type,
			   type == json_type_array ? "an array" : "an object", &v);

	if (rc <= 0)
		return rc;
	*out = v;
	return 0;
}

void rpt_line_col(const char *buf, size_t off, size_t *line, size_t *col)
{
	const char *nl;

	*line = 1;
	*col = off + 1;
	for (const char *p = buf; (nl = memchr(p, '\n', off - (size_t)(p - buf))); p = nl + 1) {
		(*line)++;
		*col = off - (size_t)(nl + 1 - buf) + 1;
	}
}

bool rpt_blank(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
			return false;
	return true;
}

int report_parse_sample(struct report *r, const char *line, size_t len, char *err, size_t errlen)
{
	struct perr e = {err, errlen};
	enum json_tokener_error jerr;
	const char *nul;
	json_object *obj;
	size_t end, first;
	int rc;

	if (len > REPORT_LINE_MAX)
		return rpt_fail(&e, "longer than %u MiB", REPORT_LINE_MAX >> 20);
	nul = memchr(line, 0, len);
	if (nul)
		return rpt_fail(&e, "binary data (a NUL byte at column %zu)",
				(size_t)(nul - line) + 1);
	for (first = 0; first < len && rpt_blank(line + first, 1); first++)
		;
	if (first == len)
		return rpt_fail(&e, "empty line");
	json_tokener_reset(r->tok);
	obj = json_tokener_parse_ex(r->tok, line, (int)len);
	jerr = json_tokener_get_error(r->tok);
	end = json_tokener_get_parse_end(r->tok);
	if (jerr == json_tokener_continue) {
		json_object_put(obj);
		/* A bare number or an open array never ends without more input either: only what
		 * every line is, an object, or an array in the stack_table layout, counts as cut
		 * short. */
		if (line[first] != '{' && (line[first] != '[' || !r->columns))
			return rpt_fail(&e, "not a JSON object");
		rpt_fail(&e, "the JSON object ends early (a truncated line)");
		return REPORT_INCOMPLETE;
	}
	if (jerr != json_tokener_success || !obj) {
		json_object_put(obj);
		return rpt_fail(&e, "invalid JSON at column %zu (%s)", (end < len ? end : len) + 1,
				json_tokener_error_desc(jerr));
	}
	if (!rpt_blank(line + end, len - end)) {
		json_object_put(obj);
		return rpt_fail(&e, "unexpected text after the JSON object at column %zu", end + 1);
	}
	if (r->columns && json_object_is_type(obj, json_type_array)) {
		json_object *row = obj;

		obj = rpt_expand_row(r, row, &e);
		json_object_put(row);
		if (!obj)
			return -1;
	}
	rc = rpt_take_sample(r, obj, &e);
	json_object_put(obj);
	return rc;
}

/*
 * Streams f line by line through report_parse_sample. Returns 0; 1 when a truncated last line
 * was skipped (err holds the warning); -1 on error (err: "line N: problem").
 */
int report_read_samples(struct report *r, FILE *f, char *err, size_t errlen)
{
	const size_t cap = REPORT_LINE_MAX + 1; /* the longest line and its newline */
	struct perr e = {err, errlen};
	size_t len = 0, start = 0;
	uint64_t lineno = 0;
	char msg[256];
	bool eof = false;

	if (!r->buf) {
		r->buf = malloc(cap);
		if (!r->buf)
			return rpt_fail(&e, "out of memory");
	}
	for (;;) {
		char *nl = memchr(r->buf + start, '\n', len - start);
		size_t n;
		int rc;

		if (!nl && !eof) {
			memmove(r->buf, r->buf + start, len - start);
			len -= start;
			start = 0;
			if (len == cap)
				return rpt_fail(&e, "line %" PRIu64 ": longer than %u MiB",
						lineno + 1, REPORT_LINE_MAX >> 20);
			n = fread(r->buf + len, 1, cap - len, f);
			if (!n) {
				if (ferror(f))
					return rpt_fail(&e, "line %" PRIu64 ": read failed: %s",
							lineno + 1, strerror(errno ? errno : EIO));
				eof = true;
			}
			len += n;
			continue;
		}
		if (!nl && start == len)
			return 0;
		lineno++;
		n = nl ? (size_t)(nl - r->buf) - start : len - start;
		if (!rpt_blank(r->buf + start, n)) {
			rc = report_parse_sample(r, r->buf + start, n, msg, sizeof(msg));
			if (rc == REPORT_INCOMPLETE && !nl) {
				r->truncated_line = lineno;
				rpt_fail(&e, "line %" PRIu64 ": %s: skipped it", lineno, msg);
				return 1;
			}
			if (rc)
				return rpt_fail(&e, "line %" PRIu64 ": %s", lineno, msg);
		}
		start = nl ? (size_t)(nl - r->buf) + 1 : len;
	}
}

/* Opens a regular file for reading, as carefully as the outputs were written (no symlink
 * followed, no FIFO waited on); on failure fills err with "problem: fix". */
FILE *rpt_open_regular(const char *path, off_t max, const char *fix, char *err, size_t errlen,
		       off_t *size)
{
	struct perr e = {err, errlen};
	struct stat st;
	FILE *f;
	int fd = out_open_read(AT_FDCWD, path);

	if (fd < 0) {
		rpt_fail(&e, "%s: %s",
			 fd == -EISDIR	 ? "a directory, not a regular file"
			 : fd == -EINVAL ? "a special file, not a regular file"
			 : fd == -ELOOP	 ? "a symlink, which dial9-bpf does not follow"
					 : strerror(-fd),
			 fix);
		return NULL;
	}
	if (fstat(fd, &st)) {
		rpt_fail(&e, "%s", strerror(errno));
		close(fd);
		return NULL;
	}
	if (max && st.st_size > max) {
		rpt_fail(&e, "larger than %lld MiB: not a file dial9-bpf writes",
			 (long long)(max >> 20));
		close(fd);
		return NULL;
	}
	f = fdopen(fd, "r");
	if (!f) {
		rpt_fail(&e, "%s", strerror(errno));
		close(fd);
		return NULL;
	}
	*size = st.st_size;
	return f;
}

/* Reads and parses a JSON file whole; NULL after printing one line naming it and the fix. */
json_object *rpt_load_json(const char *path, const char *fix)
{
	char err[512];
	struct perr e = {err, sizeof(err)};
	struct json_tokener *tok = NULL;
	json_object *root = NULL;
	off_t size = 0;
	char *buf = NULL;
	size_t n = 0;
	FILE *f;

	f = rpt_open_regular(path, REPORT_META_MAX, fix, err, sizeof(err), &size);
	if (!f)
		goto out;
	buf = malloc((size_t)size + 1);
	tok = json_tokener_new_ex(JSON_DEPTH);
	if (!buf || !tok) {
		rpt_fail(&e, "out of memory");
		goto out;
	}
	n = fread(buf, 1, (size_t)size, f);
	if (ferror(f)) {
		rpt_fail(&e, "read failed: %s", strerror(errno));
		goto out;
	}
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	root = json_tokener_parse_ex(tok, buf, (int)n);
	if (json_tokener_get_error(tok) != json_tokener_success || !root) {
		json_object_put(root);
		root = NULL;
		rpt_fail(&e, "invalid JSON (%s): the file is damaged or not written by dial9-bpf",
			 json_tokener_error_desc(json_tokener_get_error(tok)));
	}
out:
	if (!root)
		fprintf(stderr, "dial9-bpf: %s: %s\n", path, err);
	if (f)
		fclose(f);
	json_tokener_free(tok);
	free(buf);
	return root;
}
