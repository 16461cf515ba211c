// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * `dial9-bpf report DIR`: a text summary of a previous run.
 *
 * DIR/metadata.json is read whole (it grows with workers x seconds, not with samples) and
 * DIR/samples.jsonl is streamed one line at a time into per-stack totals, so memory is bounded
 * by the number of distinct stacks: past max_stacks (or REPORT_MAX_KEY_BYTES of keys) new
 * stacks are counted as "other".
 *
 * Both files are untrusted: bad JSON, wrong types, absurd values, lines over REPORT_LINE_MAX
 * or binary data stop the report with one line naming the file, the line and the fix. One
 * exception: a last line without its newline that is an unfinished JSON object is what a run
 * killed mid-write leaves (stdio writes whole buffers, which end anywhere in a line), so it is
 * skipped with a warning rather than making the rest of the run unreadable.
 *
 * Stacks are grouped by what the report shows of them: the park point and the innermost
 * REPORT_SHOWN_FRAMES frames outside the runtime (tokio, std, core, alloc, libc), because two
 * stacks that differ only inside Tokio's scheduler are the same answer to "where do my tasks
 * park".
 */
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
#include <time.h>
#include <unistd.h>
#include <json-c/json.h>
#include "options.h"
#include "out_dir.h"
#include "report.h"

#define REPORT_MAX_KEY_BYTES (64u << 20)
#define REPORT_SHOWN_FRAMES 3
#define REPORT_TOP_STACKS 10
#define KEY_NAME_MAX 512 /* bytes of one frame name kept in a stack key */
#define PARK_NAME_MAX 64 /* park point names are short identifiers */
#define SHOW_COLUMNS 110 /* frame names are cut to this on output */
#define MAX_FRAMES 4096	 /* the sampler captures at most 127 */
#define MAX_WORKERS 4096
#define MAX_WORKER_INDEX 1000000
#define MAX_COUNTERS 64
#define JSON_DEPTH 16
/*
 * Plausibility limits. json-c clamps integers beyond 64 bits to the type's limit, so every
 * bound is below INT64_MAX / UINT64_MAX, which turns an overflowing number into an error.
 * weight_count is 1/p and p >= 2^-32; idle weights are nanoseconds / p.
 */
#define MAX_EPOCH (1ULL << 40)
#define MAX_WEIGHT_COUNT (1ULL << 53)
#define MAX_WEIGHT_IDLE (1ULL << 62)
#define MAX_NS ((uint64_t)INT64_MAX - 1)
#define MAX_U64 (UINT64_MAX - 1)

struct worker_sum {
	int64_t index;
	uint64_t tid;
	char comm[17];
	char detection[16];
	uint64_t samples_seen;	/* lines of samples.jsonl */
	uint64_t used;		/* complete, calibrated, inside the sampling interval */
	uint64_t used_selected; /* selections in those */
	uint64_t capped;
	uint64_t refused;
};

struct counter {
	char name[64];
	uint64_t value;
};

struct stack_ent {
	char *key; /* a tag, the park point, then the shown frames, each NUL-terminated */
	uint32_t keylen;
	uint64_t hash;
	uint64_t samples;
	double count;	/* sum of weight_count: estimated resumes */
	double idle_ns; /* sum of weight_idle_ns: estimated time parked */
};

/* Estimates by task type: the future each task was spawned with. */
#define MAX_TYPES 1024
struct type_sum {
	char *future; /* NULL: samples without one (no task type found) */
	uint64_t samples;
	double count, idle_ns;
};

/* One sample's part in the estimates, kept for their variance: samples of one armed window
 * share its random placement, so the window (not the sample) is the unit that was drawn. */
struct draw {
	int64_t cluster; /* the window; a number of its own for an always-armed sample */
	uint32_t type;	 /* index in types; MAX_TYPES: past the type table */
	double w;	 /* weight_count */
};

/* Stack key tags: what the shown frames are. */
#define TAG_USER 'u' /* innermost frames outside the runtime */
#define TAG_LEAF 'l' /* only runtime frames: the innermost named one */
#define TAG_NONE 'n' /* no stack captured */

struct report {
	/* metadata.json */
	bool have_meta;
	char tool_version[32];
	char kernel[96];
	char sampler[48];
	char comm[32];
	char exe[256];
	char stop_reason[32];
	char layout[160];
	char detection[32];
	char link[24];
	int64_t pid;
	uint64_t hz, cap_rate, burst, seed;
	uint64_t started_ns, stopped_ns, realtime_ns;
	uint64_t probes, poll_fns, park_fns;
	struct worker_sum *workers;
	size_t nworkers;
	struct counter counters[MAX_COUNTERS];
	size_t ncounters;
	bool have_samples_meta;
	uint64_t written, with_stack, stack_errors, task_id_ok;

	/* samples.jsonl */
	size_t max_stacks;
	struct stack_ent *ents;
	size_t nents, ents_cap;
	uint32_t *slots; /* open addressing: index into ents + 1, 0 when free */
	size_t nslots;
	size_t key_bytes;
	uint64_t nsamples, capped_samples, nostack_samples, unknown_worker_samples;
	double total_count, total_idle;
	uint64_t other_samples;
	double other_count, other_idle;
	uint64_t truncated_line; /* the skipped last line, 0 if none */
	struct type_sum *types;
	size_t ntypes;
	struct type_sum other_types; /* past MAX_TYPES */
	struct draw *draws;
	size_t ndraws, draws_cap;
	int64_t solo; /* clusters handed to always-armed samples, one each */

	struct json_tokener *tok;
	char *buf; /* line reader: REPORT_LINE_MAX + 1 bytes */
	char key[2 + PARK_NAME_MAX + REPORT_SHOWN_FRAMES * (KEY_NAME_MAX + 1)];
};

struct perr {
	char *buf;
	size_t len;
};

__attribute__((format(printf, 2, 3))) static int fail(struct perr *e, const char *fmt, ...)
{
	va_list ap;

	if (e->len) {
		va_start(ap, fmt);
		vsnprintf(e->buf, e->len, fmt, ap);
		va_end(ap);
	}
	return -1;
}

/* Copies untrusted text for printing: control characters (C0, DEL, C1) become '?' so that a
 * damaged or hostile file cannot drive the terminal. Cut at n - 1 bytes. */
static void copy_str(char *dst, size_t n, const char *src)
{
	const unsigned char *p = (const unsigned char *)(src ? src : "");
	size_t i = 0;

	for (; *p && i + 1 < n; p++) {
		if (*p < 0x20 || *p == 0x7f) {
			dst[i++] = '?';
		} else if (*p == 0xc2 && p[1] >= 0x80 && p[1] < 0xa0) {
			dst[i++] = '?';
			p++;
		} else {
			dst[i++] = (char)*p;
		}
	}
	/* Cut in the middle of a UTF-8 sequence: drop its start too. */
	if ((*p & 0xc0) == 0x80) {
		while (i && ((unsigned char)dst[i - 1] & 0xc0) == 0x80)
			i--;
		if (i)
			i--;
	}
	dst[i] = 0;
}

struct report *report_new(size_t max_stacks)
{
	struct report *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->max_stacks = max_stacks ? max_stacks : REPORT_MAX_STACKS;
	if (r->max_stacks > UINT32_MAX / 4)
		r->max_stacks = UINT32_MAX / 4;
	r->tok = json_tokener_new_ex(JSON_DEPTH);
	if (!r->tok) {
		free(r);
		return NULL;
	}
	json_tokener_set_flags(r->tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	return r;
}

void report_free(struct report *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->nents; i++)
		free(r->ents[i].key);
	free(r->ents);
	free(r->slots);
	free(r->workers);
	for (size_t i = 0; i < r->ntypes; i++)
		free(r->types[i].future);
	free(r->types);
	free(r->draws);
	free(r->buf);
	json_tokener_free(r->tok);
	free(r);
}

/* ---- typed access to json-c objects ---- */

static const char *kind(json_object *v)
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
	return fail(e, "missing " FIELD, FIELD_ARGS(where, key));
}

static int get_u64(struct perr *e, const char *where, json_object *obj, const char *key,
		   bool optional, uint64_t min, uint64_t max, uint64_t *out)
{
	json_object *v;
	int rc = member(e, where, obj, key, optional, &v);
	uint64_t u;

	if (rc <= 0)
		return rc;
	if (!json_object_is_type(v, json_type_int))
		return fail(e, FIELD " is %s, expected an integer", FIELD_ARGS(where, key),
			    kind(v));
	if (json_object_get_int64(v) < 0)
		return fail(e, FIELD " is negative", FIELD_ARGS(where, key));
	u = json_object_get_uint64(v);
	if (u == UINT64_MAX && max < UINT64_MAX)
		return fail(e, FIELD " is beyond 64 bits", FIELD_ARGS(where, key));
	if (u < min || u > max)
		return fail(e, FIELD " is %" PRIu64 ", outside %" PRIu64 "..%" PRIu64,
			    FIELD_ARGS(where, key), u, min, max);
	*out = u;
	return 0;
}

static int get_i64(struct perr *e, const char *where, json_object *obj, const char *key,
		   bool optional, int64_t min, int64_t max, int64_t *out)
{
	json_object *v;
	int rc = member(e, where, obj, key, optional, &v);
	int64_t i;

	if (rc <= 0)
		return rc;
	if (!json_object_is_type(v, json_type_int))
		return fail(e, FIELD " is %s, expected an integer", FIELD_ARGS(where, key),
			    kind(v));
	i = json_object_get_int64(v);
	if (i < min || i > max)
		return fail(e, FIELD " is %" PRId64 ", outside %" PRId64 "..%" PRId64,
			    FIELD_ARGS(where, key), i, min, max);
	*out = i;
	return 0;
}

/* A number in [lo, hi], or (lo, hi] when lo_open. */
static int get_num(struct perr *e, const char *where, json_object *obj, const char *key,
		   bool optional, double lo, double hi, bool lo_open, double *out)
{
	json_object *v;
	int rc = member(e, where, obj, key, optional, &v);
	double d;

	if (rc <= 0)
		return rc;
	if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
		return fail(e, FIELD " is %s, expected a number", FIELD_ARGS(where, key), kind(v));
	d = json_object_get_double(v);
	if (!isfinite(d) || d > hi || d < lo || (lo_open && d == lo))
		return fail(e, FIELD " is %g, outside %s%g, %g]", FIELD_ARGS(where, key), d,
			    lo_open ? "(" : "[", lo, hi);
	*out = d;
	return 0;
}

static int get_bool(struct perr *e, const char *where, json_object *obj, const char *key,
		    bool optional, bool *out)
{
	json_object *v;
	int rc = member(e, where, obj, key, optional, &v);

	if (rc <= 0)
		return rc;
	if (!json_object_is_type(v, json_type_boolean))
		return fail(e, FIELD " is %s, expected true or false", FIELD_ARGS(where, key),
			    kind(v));
	*out = json_object_get_boolean(v);
	return 0;
}

/* *out is NULL for JSON null when nullable, and left alone when absent and optional. */
static int get_str(struct perr *e, const char *where, json_object *obj, const char *key,
		   bool optional, bool nullable, const char **out)
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
		return fail(e, FIELD " is %s, expected a string", FIELD_ARGS(where, key), kind(v));
	*out = json_object_get_string(v);
	return 0;
}

static int get_typed(struct perr *e, const char *where, json_object *obj, const char *key,
		     bool optional, enum json_type type, json_object **out)
{
	json_object *v;
	int rc = member(e, where, obj, key, optional, &v);

	if (rc <= 0)
		return rc;
	if (!json_object_is_type(v, type))
		return fail(e, FIELD " is %s, expected %s", FIELD_ARGS(where, key), kind(v),
			    type == json_type_array ? "an array" : "an object");
	*out = v;
	return 0;
}

/* ---- metadata.json ---- */

static void line_col(const char *buf, size_t off, size_t *line, size_t *col)
{
	const char *nl;

	*line = 1;
	*col = off + 1;
	for (const char *p = buf; (nl = memchr(p, '\n', off - (size_t)(p - buf))); p = nl + 1) {
		(*line)++;
		*col = off - (size_t)(nl + 1 - buf) + 1;
	}
}

static bool blank(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
			return false;
	return true;
}

static int parse_epochs(struct worker_sum *w, json_object *arr, const char *wwhere,
			uint64_t start_s, uint64_t stop_s, struct perr *e)
{
	size_t n = json_object_array_length(arr);
	char where[64];

	for (size_t j = 0; j < n; j++) {
		json_object *ep = json_object_array_get_idx(arr, j);
		uint64_t epoch = 0, eligible = 0, selected = 0, refused = 0;
		bool capped = false, calibrating = false, complete = false;
		double prob = 0;

		snprintf(where, sizeof(where), "%s.epochs[%zu]", wwhere, j);
		if (!json_object_is_type(ep, json_type_object))
			return fail(e, "\"%s\" is %s, expected an object", where, kind(ep));
		if (get_u64(e, where, ep, "epoch", false, 0, MAX_EPOCH, &epoch) ||
		    get_u64(e, where, ep, "eligible", false, 0, MAX_U64, &eligible) ||
		    get_u64(e, where, ep, "selected", false, 0, eligible, &selected) ||
		    get_u64(e, where, ep, "refused_by_cap", false, 0, MAX_U64, &refused) ||
		    get_num(e, where, ep, "probability", false, 0, 1, false, &prob) ||
		    get_bool(e, where, ep, "capped", false, &capped) ||
		    get_bool(e, where, ep, "calibrating", false, &calibrating) ||
		    get_bool(e, where, ep, "complete", false, &complete))
			return -1;
		w->capped += capped;
		w->refused += refused;
		/* As the sampler's budget is per whole second, only epochs it ran from start to
		 * end say whether it kept to per_worker_hz. */
		if (complete && !calibrating && epoch > start_s && epoch < stop_s) {
			w->used++;
			w->used_selected += selected;
		}
	}
	return 0;
}

static int by_index(const void *a, const void *b)
{
	const struct worker_sum *x = a, *y = b;

	return x->index < y->index ? -1 : x->index > y->index;
}

static int parse_workers(struct report *r, json_object *arr, struct perr *e)
{
	size_t n = json_object_array_length(arr);
	uint64_t start_s = r->started_ns / 1000000000ULL, stop_s = r->stopped_ns / 1000000000ULL;
	char where[32];

	if (n > MAX_WORKERS)
		return fail(e, "\"workers\" has %zu entries, more than %d", n, MAX_WORKERS);
	r->workers = calloc(n ? n : 1, sizeof(*r->workers));
	if (!r->workers)
		return fail(e, "out of memory");
	for (size_t i = 0; i < n; i++) {
		json_object *wo = json_object_array_get_idx(arr, i), *epochs = NULL;
		struct worker_sum *w = &r->workers[i];
		const char *comm = NULL, *det = NULL;
		uint64_t written;

		snprintf(where, sizeof(where), "workers[%zu]", i);
		if (!json_object_is_type(wo, json_type_object))
			return fail(e, "\"%s\" is %s, expected an object", where, kind(wo));
		if (get_i64(e, where, wo, "worker", false, 0, MAX_WORKER_INDEX, &w->index) ||
		    get_u64(e, where, wo, "tid", true, 0, UINT32_MAX, &w->tid) ||
		    get_str(e, where, wo, "comm", true, true, &comm) ||
		    get_str(e, where, wo, "detection", true, false, &det) ||
		    get_u64(e, where, wo, "samples_written", true, 0, MAX_U64, &written) ||
		    get_typed(e, where, wo, "epochs", false, json_type_array, &epochs))
			return -1;
		copy_str(w->comm, sizeof(w->comm), comm);
		copy_str(w->detection, sizeof(w->detection), det);
		r->nworkers = i + 1;
		if (parse_epochs(w, epochs, where, start_s, stop_s, e))
			return -1;
	}
	/* Sorted, so that a sample finds its worker by binary search even when the indexes are
	 * not the positions (they are, as dial9-bpf writes them). */
	qsort(r->workers, n, sizeof(*r->workers), by_index);
	return 0;
}

static int parse_counters(struct report *r, json_object *obj, struct perr *e)
{
	json_object_object_foreach(obj, key, val)
	{
		struct counter *c;
		uint64_t v;

		if (r->ncounters == MAX_COUNTERS)
			return fail(e, "\"counters\" has more than %d entries", MAX_COUNTERS);
		if (strlen(key) >= sizeof(c->name))
			return fail(e, "a counter name is longer than %zu bytes",
				    sizeof(c->name) - 1);
		/* Through get_u64 so that the checks and messages are the same. */
		if (get_u64(e, "counters", obj, key, false, 0, MAX_NS, &v))
			return -1;
		(void)val;
		c = &r->counters[r->ncounters++];
		copy_str(c->name, sizeof(c->name), key);
		c->value = v;
	}
	return 0;
}

static int parse_meta_root(struct report *r, json_object *root, struct perr *e)
{
	json_object *sampler, *cap, *target, *workers, *counters, *probes = NULL, *samples = NULL;
	const char *tool = NULL, *s;

	if (!json_object_is_type(root, json_type_object))
		return fail(e, "the document is %s, expected an object", kind(root));
	if (get_str(e, "", root, "tool", false, false, &tool))
		return -1;
	if (strcmp(tool, "dial9-bpf"))
		return fail(e, "\"tool\" is not \"dial9-bpf\"");
#define OPT_STR(obj, where, key, dst)                                                              \
	do {                                                                                       \
		s = NULL;                                                                          \
		if (get_str(e, where, obj, key, true, true, &s))                                   \
			return -1;                                                                 \
		copy_str(dst, sizeof(dst), s);                                                     \
	} while (0)
	OPT_STR(root, "", "tool_version", r->tool_version);
	OPT_STR(root, "", "kernel_release", r->kernel);
	OPT_STR(root, "", "task_id_layout", r->layout);
	OPT_STR(root, "", "stop_reason", r->stop_reason);
	OPT_STR(root, "", "worker_detection", r->detection);
	if (get_typed(e, "", root, "sampler", false, json_type_object, &sampler) ||
	    get_u64(e, "sampler", sampler, "per_worker_hz", false, 1, D9_MAX_HZ, &r->hz) ||
	    get_u64(e, "sampler", sampler, "seed", true, 0, UINT64_MAX, &r->seed) ||
	    get_typed(e, "sampler", sampler, "cap", false, json_type_object, &cap) ||
	    get_u64(e, "sampler.cap", cap, "rate_hz", false, 0, MAX_NS, &r->cap_rate) ||
	    get_u64(e, "sampler.cap", cap, "burst", false, 0, MAX_NS, &r->burst))
		return -1;
	OPT_STR(sampler, "sampler", "name", r->sampler);
	if (get_typed(e, "", root, "target", false, json_type_object, &target) ||
	    get_i64(e, "target", target, "pid", false, 0, INT32_MAX, &r->pid))
		return -1;
	OPT_STR(target, "target", "comm", r->comm);
	OPT_STR(target, "target", "exe", r->exe);
	if (get_u64(e, "", root, "sampling_started_at_ns", false, 0, MAX_NS, &r->started_ns) ||
	    get_u64(e, "", root, "sampling_stopped_at_ns", false, r->started_ns, MAX_NS,
		    &r->stopped_ns) ||
	    get_u64(e, "", root, "started_realtime_ns", true, 0, MAX_NS, &r->realtime_ns))
		return -1;
	if (get_typed(e, "", root, "probes", true, json_type_object, &probes))
		return -1;
	if (probes) {
		if (get_u64(e, "probes", probes, "attached", true, 0, MAX_U64, &r->probes) ||
		    get_u64(e, "probes", probes, "poll_functions", true, 0, MAX_U64,
			    &r->poll_fns) ||
		    get_u64(e, "probes", probes, "park_points", true, 0, MAX_U64, &r->park_fns))
			return -1;
		OPT_STR(probes, "probes", "link", r->link);
	}
#undef OPT_STR
	if (get_typed(e, "", root, "workers", false, json_type_array, &workers) ||
	    parse_workers(r, workers, e))
		return -1;
	if (get_typed(e, "", root, "counters", false, json_type_object, &counters) ||
	    parse_counters(r, counters, e))
		return -1;
	if (get_typed(e, "", root, "samples", true, json_type_object, &samples))
		return -1;
	if (samples) {
		if (get_u64(e, "samples", samples, "written", false, 0, MAX_NS, &r->written) ||
		    get_u64(e, "samples", samples, "with_stack", true, 0, MAX_NS, &r->with_stack) ||
		    get_u64(e, "samples", samples, "stack_errors", true, 0, MAX_NS,
			    &r->stack_errors) ||
		    get_u64(e, "samples", samples, "task_id_ok", true, 0, MAX_NS, &r->task_id_ok))
			return -1;
		r->have_samples_meta = true;
	}
	return 0;
}

int report_parse_metadata(struct report *r, const char *buf, size_t len, char *err, size_t errlen)
{
	struct perr e = {err, errlen};
	struct json_tokener *tok;
	enum json_tokener_error jerr;
	json_object *root;
	const char *nul;
	size_t line, col, end;
	int rc;

	if (r->have_meta)
		return fail(&e, "metadata already parsed");
	if (len > REPORT_META_MAX)
		return fail(&e, "larger than %u MiB", REPORT_META_MAX >> 20);
	if (blank(buf, len))
		return fail(&e, "empty");
	nul = memchr(buf, 0, len);
	if (nul) {
		line_col(buf, (size_t)(nul - buf), &line, &col);
		return fail(&e, "line %zu: binary data (a NUL byte at column %zu)", line, col);
	}
	tok = json_tokener_new_ex(JSON_DEPTH);
	if (!tok)
		return fail(&e, "out of memory");
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	root = json_tokener_parse_ex(tok, buf, (int)len);
	jerr = json_tokener_get_error(tok);
	end = json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	if (jerr == json_tokener_continue) {
		line_col(buf, len, &line, &col);
		json_object_put(root);
		return fail(&e, "line %zu: the JSON document ends early (truncated)", line);
	}
	if (jerr != json_tokener_success || !root) {
		line_col(buf, end < len ? end : len, &line, &col);
		json_object_put(root);
		return fail(&e, "line %zu, column %zu: invalid JSON (%s)", line, col,
			    json_tokener_error_desc(jerr));
	}
	if (!blank(buf + end, len - end)) {
		line_col(buf, end, &line, &col);
		json_object_put(root);
		return fail(&e, "line %zu, column %zu: unexpected text after the JSON document",
			    line, col);
	}
	rc = parse_meta_root(r, root, &e);
	json_object_put(root);
	if (rc) {
		/* A half-read metadata must not be printed as if it were whole. */
		free(r->workers);
		r->workers = NULL;
		r->nworkers = 0;
		r->ncounters = 0;
		return -1;
	}
	r->have_meta = true;
	return 0;
}

/* ---- samples.jsonl ---- */

static bool prefixed(const char *s, size_t len, const char *prefix)
{
	size_t n = strlen(prefix);

	return len >= n && !memcmp(s, prefix, n);
}

static bool runtime_path(const char *s, size_t len)
{
	static const char *const prefixes[] = {"tokio::", "std::", "core::", "alloc::"};

	while (len && (*s == '&' || *s == '*')) {
		s++;
		len--;
	}
	for (int i = 0; i < 3 && len; i++) {
		if (prefixed(s, len, "mut ") || prefixed(s, len, "dyn ")) {
			s += 4;
			len -= 4;
		} else if (prefixed(s, len, "const ")) {
			s += 6;
			len -= 6;
		}
	}
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
		if (prefixed(s, len, prefixes[i]))
			return true;
	return false;
}

/*
 * Whether a demangled frame belongs to the runtime rather than the program. "<T as Trait>::f"
 * is the program's when T is a type of the program ("<app::Counted<F> as Future>::poll"),
 * and the runtime's when T is the runtime's, or a bare generic ("<&mut F as Future>::poll")
 * behind a runtime trait.
 */
static bool runtime_frame(const char *name)
{
	const char *self, *as = NULL;
	int depth = 0;

	if (name[0] != '<')
		return runtime_path(name, strlen(name));
	self = name + 1;
	for (const char *p = self; *p; p++) {
		if (*p == '<') {
			depth++;
		} else if (*p == '>') {
			if (!depth--)
				break;
		} else if (!depth && !strncmp(p, " as ", 4)) {
			as = p;
			break;
		}
	}
	if (!as)
		return runtime_path(self, strlen(self));
	if (runtime_path(self, (size_t)(as - self)))
		return true;
	if (memmem(self, (size_t)(as - self), "::", 2))
		return false;
	return runtime_path(as + 4, strlen(as + 4));
}

static bool c_runtime_module(const char *module)
{
	const char *base;

	if (!module)
		return false;
	base = strrchr(module, '/');
	base = base ? base + 1 : module;
	return !strncmp(base, "libc.so", 7) || !strncmp(base, "libc-", 5) ||
	       !strncmp(base, "ld-linux", 8) || !strncmp(base, "libpthread", 10);
}

static size_t key_put(char *key, size_t at, const char *s, size_t max)
{
	size_t n = strnlen(s, max);

	memcpy(key + at, s, n);
	key[at + n] = 0;
	return at + n + 1;
}

static uint64_t hash_bytes(const char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)p[i]) * 0x100000001b3ULL;
	h ^= h >> 31;
	h *= 0x94d049bb133111ebULL;
	return h ^ (h >> 29);
}

/* Builds the stack key in r->key; validates every frame. Returns its length or -1. */
static long build_key(struct report *r, json_object *stack, const char *park, int64_t stack_error,
		      struct perr *e)
{
	size_t n = json_object_array_length(stack), at = 1, shown = 0;
	const char *leaf_name = NULL, *leaf_module = NULL;
	char where[32];

	if (n > MAX_FRAMES)
		return fail(e, "\"stack\" has %zu frames, more than %d", n, MAX_FRAMES);
	at = key_put(r->key, at, park, PARK_NAME_MAX);
	for (size_t i = 0; i < n; i++) {
		json_object *fr = json_object_array_get_idx(stack, i);
		const char *name = NULL, *module = NULL;

		snprintf(where, sizeof(where), "stack[%zu]", i);
		if (!json_object_is_type(fr, json_type_object))
			return fail(e, "\"%s\" is %s, expected an object", where, kind(fr));
		if (get_str(e, where, fr, "name", false, true, &name) ||
		    get_str(e, where, fr, "module", true, true, &module))
			return -1;
		if (i == 0)
			leaf_module = module;
		if (!name || !*name)
			continue;
		if (!leaf_name)
			leaf_name = name;
		if (shown < REPORT_SHOWN_FRAMES && !runtime_frame(name) &&
		    !c_runtime_module(module)) {
			at = key_put(r->key, at, name, KEY_NAME_MAX);
			shown++;
		}
	}
	if (shown) {
		r->key[0] = TAG_USER;
	} else if (n) {
		char unknown[KEY_NAME_MAX];
		const char *base = leaf_module ? strrchr(leaf_module, '/') : NULL;

		r->key[0] = TAG_LEAF;
		if (!leaf_name) {
			snprintf(unknown, sizeof(unknown), "[%s]",
				 base	       ? base + 1
				 : leaf_module ? leaf_module
					       : "unknown");
			leaf_name = unknown;
		}
		at = key_put(r->key, at, leaf_name, KEY_NAME_MAX);
	} else {
		char why[48];

		r->key[0] = TAG_NONE;
		snprintf(why, sizeof(why), "(no stack%s%s)", stack_error ? ": error " : "",
			 stack_error ? strerror((int)-stack_error) : "");
		at = key_put(r->key, at, why, sizeof(why));
	}
	return (long)at;
}

static int slots_grow(struct report *r)
{
	size_t n = r->nslots ? r->nslots * 2 : 1024;
	uint32_t *slots = calloc(n, sizeof(*slots));

	if (!slots)
		return -1;
	for (size_t i = 0; i < r->nents; i++) {
		size_t j = r->ents[i].hash & (n - 1);

		while (slots[j])
			j = (j + 1) & (n - 1);
		slots[j] = (uint32_t)i + 1;
	}
	free(r->slots);
	r->slots = slots;
	r->nslots = n;
	return 0;
}

/* 0 and *out when found or added; 1 when the table is full (count it as other); -1 ENOMEM. */
static int stack_get(struct report *r, const char *key, size_t keylen, struct stack_ent **out)
{
	uint64_t h = hash_bytes(key, keylen);
	struct stack_ent *s;
	size_t i;

	if (!r->nslots && slots_grow(r))
		return -1;
	for (i = h & (r->nslots - 1); r->slots[i]; i = (i + 1) & (r->nslots - 1)) {
		s = &r->ents[r->slots[i] - 1];
		if (s->hash == h && s->keylen == keylen && !memcmp(s->key, key, keylen)) {
			*out = s;
			return 0;
		}
	}
	if (r->nents >= r->max_stacks || r->key_bytes + keylen > REPORT_MAX_KEY_BYTES)
		return 1;
	if (r->nents == r->ents_cap) {
		size_t ncap = r->ents_cap ? r->ents_cap * 2 : 256;
		void *np = realloc(r->ents, ncap * sizeof(*r->ents));

		if (!np)
			return -1;
		r->ents = np;
		r->ents_cap = ncap;
	}
	s = &r->ents[r->nents];
	memset(s, 0, sizeof(*s));
	s->key = malloc(keylen);
	if (!s->key)
		return -1;
	memcpy(s->key, key, keylen);
	s->keylen = (uint32_t)keylen;
	s->hash = h;
	r->nents++;
	r->key_bytes += keylen;
	/* Half full at most keeps probe chains short. */
	if (r->nents * 2 > r->nslots) {
		if (slots_grow(r)) {
			free(s->key);
			r->nents--;
			r->key_bytes -= keylen;
			return -1;
		}
	} else {
		r->slots[i] = (uint32_t)r->nents;
	}
	*out = s;
	return 0;
}

/* The sums of FUTURE's task type (NULL future: its own row); past MAX_TYPES, one "other" row. */
static struct type_sum *type_get(struct report *r, const char *future)
{
	struct type_sum *t;

	for (size_t i = 0; i < r->ntypes; i++) {
		t = &r->types[i];
		if (future ? t->future && !strcmp(t->future, future) : !t->future)
			return t;
	}
	if (r->ntypes == MAX_TYPES)
		return &r->other_types;
	t = realloc(r->types, (r->ntypes + 1) * sizeof(*t));
	if (!t)
		return &r->other_types;
	r->types = t;
	t = &r->types[r->ntypes];
	*t = (struct type_sum){.future = future ? strdup(future) : NULL};
	if (future && !t->future)
		return &r->other_types;
	r->ntypes++;
	return t;
}

/* Kept in cluster order as they come (samples come about in window order): half_width()
 * reads each window's draws together. */
static int add_draw(struct report *r, int64_t window, const struct type_sum *type, double w)
{
	struct draw d;
	size_t i;

	if (r->ndraws == r->draws_cap) {
		size_t cap = r->draws_cap ? 2 * r->draws_cap : 1024;
		struct draw *d = realloc(r->draws, cap * sizeof(*d));

		if (!d)
			return -ENOMEM;
		r->draws = d;
		r->draws_cap = cap;
	}
	d = (struct draw){
	    /* After every window, in the order they come. */
	    .cluster = window > 0 ? window : INT64_MAX / 2 + ++r->solo,
	    .type = type == &r->other_types ? MAX_TYPES : (uint32_t)(type - r->types),
	    .w = w,
	};
	for (i = r->ndraws++; i > 0 && r->draws[i - 1].cluster > d.cluster; i--)
		r->draws[i] = r->draws[i - 1];
	r->draws[i] = d;
	return 0;
}

static struct worker_sum *find_worker(struct report *r, int64_t index)
{
	struct worker_sum key = {.index = index};

	if (index >= 0 && (size_t)index < r->nworkers && r->workers[index].index == index)
		return &r->workers[index];
	if (!r->nworkers)
		return NULL;
	return bsearch(&key, r->workers, r->nworkers, sizeof(*r->workers), by_index);
}

static int take_sample(struct report *r, json_object *obj, struct perr *e)
{
	uint64_t epoch, wcount, widle;
	int64_t worker, stack_error = 0, window = 0;
	const char *park, *outcome = NULL, *future = NULL;
	struct stack_ent *ent = NULL;
	struct type_sum *type;
	struct worker_sum *w;
	json_object *stack;
	bool capped;
	double prob;
	long keylen;
	int rc;

	if (!json_object_is_type(obj, json_type_object))
		return fail(e, "the line is %s, expected a JSON object", kind(obj));
	if (get_i64(e, "", obj, "worker", false, -1, MAX_WORKER_INDEX, &worker) ||
	    get_num(e, "", obj, "inclusion_probability", false, 0, 1, true, &prob) ||
	    get_u64(e, "", obj, "epoch", false, 0, MAX_EPOCH, &epoch) ||
	    get_bool(e, "", obj, "capped", false, &capped) ||
	    get_str(e, "", obj, "outcome", true, false, &outcome) ||
	    get_str(e, "", obj, "park_point", false, false, &park) ||
	    get_u64(e, "", obj, "weight_count", false, 0, MAX_WEIGHT_COUNT, &wcount) ||
	    get_u64(e, "", obj, "weight_idle_ns", false, 0, MAX_WEIGHT_IDLE, &widle) ||
	    get_i64(e, "", obj, "stack_error", true, -4095, 0, &stack_error) ||
	    get_str(e, "", obj, "future", true, true, &future) ||
	    get_i64(e, "", obj, "window", true, 1, INT64_MAX / 4, &window) ||
	    get_typed(e, "", obj, "stack", false, json_type_array, &stack))
		return -1;
	if (strlen(park) > PARK_NAME_MAX)
		return fail(e, "\"park_point\" is longer than %d bytes", PARK_NAME_MAX);
	keylen = build_key(r, stack, park, stack_error, e);
	if (keylen < 0)
		return -1;
	rc = stack_get(r, r->key, (size_t)keylen, &ent);
	if (rc < 0)
		return fail(e, "out of memory after %zu distinct stacks", r->nents);

	r->nsamples++;
	r->total_count += (double)wcount;
	r->total_idle += (double)widle;
	r->capped_samples += capped;
	r->nostack_samples += r->key[0] == TAG_NONE;
	if (ent) {
		ent->samples++;
		ent->count += (double)wcount;
		ent->idle_ns += (double)widle;
	} else {
		r->other_samples++;
		r->other_count += (double)wcount;
		r->other_idle += (double)widle;
	}
	type = type_get(r, future);
	type->samples++;
	type->count += (double)wcount;
	type->idle_ns += (double)widle;
	if (add_draw(r, window, type, (double)wcount))
		return fail(e, "out of memory after %" PRIu64 " samples", r->nsamples);
	w = find_worker(r, worker);
	if (w)
		w->samples_seen++;
	else
		r->unknown_worker_samples++;
	return 0;
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
		return fail(&e, "longer than %u MiB", REPORT_LINE_MAX >> 20);
	nul = memchr(line, 0, len);
	if (nul)
		return fail(&e, "binary data (a NUL byte at column %zu)", (size_t)(nul - line) + 1);
	for (first = 0; first < len && blank(line + first, 1); first++)
		;
	if (first == len)
		return fail(&e, "empty line");
	json_tokener_reset(r->tok);
	obj = json_tokener_parse_ex(r->tok, line, (int)len);
	jerr = json_tokener_get_error(r->tok);
	end = json_tokener_get_parse_end(r->tok);
	if (jerr == json_tokener_continue) {
		json_object_put(obj);
		/* A bare number or an open array never ends without more input either: only an
		 * object, which every line is, counts as cut short. */
		if (line[first] != '{')
			return fail(&e, "not a JSON object");
		fail(&e, "the JSON object ends early (a truncated line)");
		return REPORT_INCOMPLETE;
	}
	if (jerr != json_tokener_success || !obj) {
		json_object_put(obj);
		return fail(&e, "invalid JSON at column %zu (%s)", (end < len ? end : len) + 1,
			    json_tokener_error_desc(jerr));
	}
	if (!blank(line + end, len - end)) {
		json_object_put(obj);
		return fail(&e, "unexpected text after the JSON object at column %zu", end + 1);
	}
	rc = take_sample(r, obj, &e);
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
			return fail(&e, "out of memory");
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
				return fail(&e, "line %" PRIu64 ": longer than %u MiB", lineno + 1,
					    REPORT_LINE_MAX >> 20);
			n = fread(r->buf + len, 1, cap - len, f);
			if (!n) {
				if (ferror(f))
					return fail(&e, "line %" PRIu64 ": read failed: %s",
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
		if (!blank(r->buf + start, n)) {
			rc = report_parse_sample(r, r->buf + start, n, msg, sizeof(msg));
			if (rc == REPORT_INCOMPLETE && !nl) {
				r->truncated_line = lineno;
				fail(&e, "line %" PRIu64 ": %s: skipped it", lineno, msg);
				return 1;
			}
			if (rc)
				return fail(&e, "line %" PRIu64 ": %s", lineno, msg);
		}
		start = nl ? (size_t)(nl - r->buf) + 1 : len;
	}
}

/* ---- the report ---- */

/* Prints untrusted text: control characters (C0, DEL, C1) become '?', and at most max bytes
 * are shown, cut at a character boundary. */
static void put_clean(FILE *out, const char *s, size_t max)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t len = strlen(s), n = len > max ? max : len;

	while (n < len && n && (p[n] & 0xc0) == 0x80)
		n--;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < 0x20 || p[i] == 0x7f) {
			fputc('?', out);
		} else if (p[i] == 0xc2 && i + 1 < n && p[i + 1] >= 0x80 && p[i + 1] < 0xa0) {
			fputc('?', out);
			i++;
		} else {
			fputc(p[i], out);
		}
	}
	if (n < len)
		fputs("...", out);
}

static double pct(double part, double whole)
{
	return whole > 0 ? 100.0 * part / whole : 0;
}

static int by_count(const void *a, const void *b)
{
	const struct stack_ent *x = *(const struct stack_ent *const *)a;
	const struct stack_ent *y = *(const struct stack_ent *const *)b;

	if (x->count != y->count)
		return x->count < y->count ? 1 : -1;
	if (x->samples != y->samples)
		return x->samples < y->samples ? 1 : -1;
	if (x->keylen != y->keylen)
		return x->keylen < y->keylen ? -1 : 1;
	return memcmp(x->key, y->key, x->keylen);
}

static void print_run(const struct report *r, const char *dir, FILE *out)
{
	char when[64] = "";
	time_t secs = (time_t)(r->realtime_ns / 1000000000ULL);
	struct tm tm;

	fputs("dial9-bpf report of ", out);
	put_clean(out, dir, 4096);
	if (r->realtime_ns && gmtime_r(&secs, &tm))
		strftime(when, sizeof(when), ", started %Y-%m-%d %H:%M:%S UTC", &tm);
	fprintf(out,
		"\n\n"
		"target     pid %" PRId64 " (%s) %s\n"
		"run        %.1f s%s, stopped by %s; dial9-bpf %s, kernel %s\n"
		"sampler    %s: %" PRIu64 " samples/s per worker, cap: token bucket %" PRIu64
		"/s burst %" PRIu64 ", seed %" PRIu64 "\n"
		"probes     %" PRIu64 " attached (%s): %" PRIu64 " poll functions, %" PRIu64
		" park points\n"
		"task ids   %s\n"
		"workers    %zu (detected by %s)\n",
		r->pid, r->comm, r->exe, (double)(r->stopped_ns - r->started_ns) / 1e9, when,
		r->stop_reason[0] ? r->stop_reason : "?",
		r->tool_version[0] ? r->tool_version : "?", r->kernel[0] ? r->kernel : "?",
		r->sampler[0] ? r->sampler : "?", r->hz, r->cap_rate, r->burst, r->seed, r->probes,
		r->link[0] ? r->link : "?", r->poll_fns, r->park_fns,
		r->layout[0] ? r->layout : "?", r->nworkers, r->detection[0] ? r->detection : "?");
}

static void print_stack_frames(const struct stack_ent *s, FILE *out)
{
	const char *p = s->key + 1, *end = s->key + s->keylen;

	fputs("at ", out);
	put_clean(out, p, PARK_NAME_MAX);
	fputc('\n', out);
	p += strlen(p) + 1;
	if (s->key[0] == TAG_LEAF)
		fputs("        (only runtime frames; the innermost:)\n", out);
	for (; p < end; p += strlen(p) + 1) {
		fputs("        ", out);
		put_clean(out, p, SHOW_COLUMNS);
		fputc('\n', out);
	}
}

static void print_stacks(const struct report *r, FILE *out)
{
	size_t n = r->nents < REPORT_TOP_STACKS ? r->nents : REPORT_TOP_STACKS;
	const struct stack_ent **order;
	double shown = 0;

	fprintf(out,
		"\nTop stacks by estimated resumes (sum of weight_count; idle = sum of "
		"weight_idle_ns),\ninnermost frames outside tokio/std/core/alloc first, %zu "
		"distinct:\n",
		r->nents);
	if (!r->nsamples) {
		fputs("  (no samples)\n", out);
		return;
	}
	order = malloc((r->nents ? r->nents : 1) * sizeof(*order));
	if (!order) {
		fputs("  (out of memory sorting stacks)\n", out);
		return;
	}
	for (size_t i = 0; i < r->nents; i++)
		order[i] = &r->ents[i];
	qsort(order, r->nents, sizeof(*order), by_count);
	fputs("  #   share  est. resumes  est. idle s  idle share  samples\n", out);
	for (size_t i = 0; i < n; i++) {
		const struct stack_ent *s = order[i];

		fprintf(out, "%3zu  %5.1f%%  %12.0f  %11.3f  %9.1f%%  %7" PRIu64 "  ", i + 1,
			pct(s->count, r->total_count), s->count, s->idle_ns / 1e9,
			pct(s->idle_ns, r->total_idle), s->samples);
		print_stack_frames(s, out);
		shown += s->count;
	}
	if (r->other_samples)
		fprintf(out,
			"  other: %" PRIu64 " samples (%.1f%% of resumes) in stacks past the "
			"%zu-stack table\n",
			r->other_samples, pct(r->other_count, r->total_count), r->max_stacks);
	fprintf(out, "  shown: %zu of %zu stacks, %.1f%% of estimated resumes\n", n, r->nents,
		pct(shown, r->total_count));
	free(order);
}

/*
 * Half the width of the 95% interval of an estimated total (the draws for which in() holds):
 * the drawn units are the windows, so with z_c the estimate from window c and m windows,
 * Var = m / (m - 1) * (sum z_c^2 - total^2 / m) (windows that drew nothing of it count,
 * with z_c = 0; a sample drawn on its own, always armed, is a window of one).
 */
static double half_width(const struct report *r, bool (*in)(const struct draw *, uint32_t),
			 uint32_t id)
{
	double total = 0, sq = 0, z = 0;
	size_t m = 0;

	for (size_t i = 0; i < r->ndraws; i++) {
		const struct draw *d = &r->draws[i];

		if (i && d->cluster != d[-1].cluster) {
			sq += z * z;
			z = 0;
		}
		m += !i || d->cluster != d[-1].cluster;
		if (in(d, id)) {
			z += d->w;
			total += d->w;
		}
	}
	sq += z * z;
	if (m < 2)
		return NAN;
	return 1.96 * sqrt(fmax(0, (double)m / (double)(m - 1) * (sq - total * total / (double)m)));
}

static bool of_type(const struct draw *d, uint32_t type)
{
	return d->type == type;
}

static int by_type_count(const void *a, const void *b)
{
	const struct type_sum *x = *(const struct type_sum *const *)a;
	const struct type_sum *y = *(const struct type_sum *const *)b;

	return x->count < y->count ? 1 : x->count > y->count ? -1 : 0;
}

static void print_type_row(const struct report *r, const struct type_sum *t, const char *name,
			   FILE *out)
{
	uint32_t id = t == &r->other_types ? MAX_TYPES : (uint32_t)(t - r->types);

	fprintf(out, "  %5.1f%%  %12.0f  %9.0f  %11.3f  %7" PRIu64 "  ",
		pct(t->count, r->total_count), t->count, half_width(r, of_type, id),
		t->idle_ns / 1e9, t->samples);
	put_clean(out, name, 160);
	fputc('\n', out);
}

/* Estimates per task type, most resumes first. Sorting a copy keeps the report const. */
static void print_types(const struct report *r, FILE *out)
{
	const struct type_sum **v;

	if (!r->ntypes || (r->ntypes == 1 && !r->types[0].future))
		return; /* no sample named a future: an older file, or no task types found */
	v = malloc(r->ntypes * sizeof(*v));
	if (!v)
		return;
	for (size_t i = 0; i < r->ntypes; i++)
		v[i] = &r->types[i];
	qsort(v, r->ntypes, sizeof(*v), by_type_count);
	fputs("\nBy task type (the future each task was spawned with; +-95%: half the 95% "
	      "interval\nof the estimate, over the armed windows drawn):\n"
	      "   share  est. resumes     +-95%  est. idle s  samples  future\n",
	      out);
	for (size_t i = 0; i < r->ntypes; i++)
		print_type_row(r, v[i], v[i]->future ? v[i]->future : "(unknown)", out);
	if (r->other_types.samples)
		print_type_row(r, &r->other_types, "(other types)", out);
	free(v);
}

static void print_workers(const struct report *r, FILE *out)
{
	fprintf(out,
		"\nPer-worker budget (target %" PRIu64 " samples/s; mean over complete epochs "
		"after calibration):\n",
		r->hz);
	fputs("  worker  tid      comm             detection       samples  epochs  "
	      "mean/epoch  of target  capped  refused\n",
	      out);
	for (size_t i = 0; i < r->nworkers; i++) {
		const struct worker_sum *w = &r->workers[i];

		fprintf(out, "  %-6" PRId64 "  %-7" PRIu64 "  ", w->index, w->tid);
		fprintf(out, "%-15s  %-14s  ", w->comm[0] ? w->comm : "?",
			w->detection[0] ? w->detection : "?");
		fprintf(out, "%7" PRIu64 "  %6" PRIu64, w->samples_seen, w->used);
		if (w->used)
			fprintf(out, "  %10.1f  %8.0f%%",
				(double)w->used_selected / (double)w->used,
				pct((double)w->used_selected / (double)w->used, (double)r->hz));
		else
			fprintf(out, "  %10s  %9s", "-", "-");
		fprintf(out, "  %6" PRIu64 "  %7" PRIu64 "\n", w->capped, w->refused);
	}
	if (r->unknown_worker_samples)
		fprintf(out,
			"  %" PRIu64 " samples name a worker that metadata.json does not list\n",
			r->unknown_worker_samples);
}

static uint64_t counter(const struct report *r, const char *name, bool *found)
{
	for (size_t i = 0; i < r->ncounters; i++) {
		if (!strcmp(r->counters[i].name, name)) {
			*found = true;
			return r->counters[i].value;
		}
	}
	*found = false;
	return 0;
}

static void print_counters(const struct report *r, FILE *out)
{
	fputs("\nCounters:\n", out);
	for (size_t i = 0; i < r->ncounters; i++) {
		fprintf(out, "  %-22s  %" PRIu64 "\n", r->counters[i].name, r->counters[i].value);
	}
	fprintf(out,
		"  samples.jsonl           %" PRIu64 " samples (%" PRIu64
		" without a stack, %" PRIu64 " from capped epochs)\n",
		r->nsamples, r->nostack_samples, r->capped_samples);
	if (r->have_samples_meta)
		fprintf(out,
			"  metadata                %" PRIu64 " written, %" PRIu64
			" with a stack, %" PRIu64 " stack errors, %" PRIu64 " with a task id\n",
			r->written, r->with_stack, r->stack_errors, r->task_id_ok);
}

static void print_warnings(const struct report *r, FILE *out)
{
	uint64_t capped = 0, refused = 0, workers = 0, drops;
	bool found;

	for (size_t i = 0; i < r->nworkers; i++) {
		capped += r->workers[i].capped;
		refused += r->workers[i].refused;
		workers += r->workers[i].capped > 0;
	}
	fputc('\n', out);
	if (capped || r->capped_samples)
		fprintf(out,
			"warning: %" PRIu64 " epochs on %" PRIu64 " workers were capped (%" PRIu64
			" selections refused; %" PRIu64 " samples come from capped epochs): "
			"estimates over those seconds are biased low, not unbiased; compare "
			"uncapped seconds or raise --cap-burst\n",
			capped, workers, refused, r->capped_samples);
	drops = counter(r, "ring_buffer_drops", &found);
	if (drops)
		fprintf(out,
			"warning: %" PRIu64 " samples were lost in the ring buffer: estimates are "
			"biased low; lower --per-worker-hz\n",
			drops);
	if (r->truncated_line)
		fprintf(out, "warning: samples.jsonl line %" PRIu64 " was cut short and skipped\n",
			r->truncated_line);
	if (r->have_samples_meta && r->written != r->nsamples)
		fprintf(out,
			"warning: samples.jsonl has %" PRIu64
			" samples but metadata.json says %" PRIu64 " were written\n",
			r->nsamples, r->written);
	if (!capped && !r->capped_samples && !drops && !r->truncated_line &&
	    (!r->have_samples_meta || r->written == r->nsamples))
		fputs("no capped epochs, no ring-buffer drops: the estimates are unbiased\n", out);
}

void report_print(const struct report *r, const char *dir, FILE *out)
{
	if (r->have_meta)
		print_run(r, dir, out);
	print_stacks(r, out);
	print_types(r, out);
	if (r->have_meta) {
		print_workers(r, out);
		print_counters(r, out);
	}
	print_warnings(r, out);
}

/* ---- the command ---- */

/* Opens a regular file for reading, as carefully as the outputs were written (no symlink
 * followed, no FIFO waited on); on failure fills err with "problem: fix". */
static FILE *open_regular(const char *path, off_t max, const char *fix, char *err, size_t errlen,
			  off_t *size)
{
	struct perr e = {err, errlen};
	struct stat st;
	FILE *f;
	int fd = out_open_read(AT_FDCWD, path);

	if (fd < 0) {
		fail(&e, "%s: %s",
		     fd == -EISDIR   ? "a directory, not a regular file"
		     : fd == -EINVAL ? "a special file, not a regular file"
		     : fd == -ELOOP  ? "a symlink, which dial9-bpf does not follow"
				     : strerror(-fd),
		     fix);
		return NULL;
	}
	if (fstat(fd, &st)) {
		fail(&e, "%s", strerror(errno));
		close(fd);
		return NULL;
	}
	if (max && st.st_size > max) {
		fail(&e, "larger than %lld MiB: not a file dial9-bpf writes",
		     (long long)(max >> 20));
		close(fd);
		return NULL;
	}
	f = fdopen(fd, "r");
	if (!f) {
		fail(&e, "%s", strerror(errno));
		close(fd);
		return NULL;
	}
	*size = st.st_size;
	return f;
}

static int load_metadata(struct report *r, const char *path)
{
	static const char fix[] = "give the --output directory of a finished dial9-bpf run "
				  "(metadata.json is written when the run ends)";
	char err[512];
	off_t size = 0;
	size_t n;
	char *buf;
	FILE *f;
	int rc;

	f = open_regular(path, REPORT_META_MAX, fix, err, sizeof(err), &size);
	if (!f) {
		fprintf(stderr, "dial9-bpf: %s: %s\n", path, err);
		return -1;
	}
	buf = malloc((size_t)size + 1);
	if (!buf) {
		fprintf(stderr, "dial9-bpf: %s: out of memory reading %lld bytes\n", path,
			(long long)size);
		fclose(f);
		return -1;
	}
	n = fread(buf, 1, (size_t)size + 1, f);
	if (ferror(f)) {
		fprintf(stderr, "dial9-bpf: %s: read failed: %s\n", path, strerror(errno));
		free(buf);
		fclose(f);
		return -1;
	}
	fclose(f);
	if (n > (size_t)size) /* grew since fstat: a run still writing it */
		n = (size_t)size;
	rc = report_parse_metadata(r, buf, n, err, sizeof(err));
	free(buf);
	if (rc)
		fprintf(stderr,
			"dial9-bpf: %s: %s: the file is damaged or not written by dial9-bpf; "
			"record the run again\n",
			path, err);
	return rc;
}

static int load_samples(struct report *r, const char *path)
{
	static const char fix[] = "record with --format jsonl (or all) to get a report";
	char err[512];
	off_t size = 0;
	FILE *f;
	int rc;

	f = open_regular(path, 0, fix, err, sizeof(err), &size);
	if (!f) {
		fprintf(stderr, "dial9-bpf: %s: %s\n", path, err);
		return -1;
	}
	rc = report_read_samples(r, f, err, sizeof(err));
	fclose(f);
	if (rc < 0) {
		fprintf(stderr,
			"dial9-bpf: %s: %s: the file is damaged or not written by dial9-bpf; "
			"record the run again\n",
			path, err);
		return -1;
	}
	if (!r->nsamples && r->written) {
		fprintf(stderr,
			"dial9-bpf: %s: no samples, but metadata.json says %" PRIu64 " were "
			"written: the file was truncated or replaced; record the run again\n",
			path, r->written);
		return -1;
	}
	if (rc > 0)
		fprintf(stderr,
			"dial9-bpf: warning: %s: %s (the run was interrupted while writing it)\n",
			path, err);
	return 0;
}

/* One --pid run's directory. */
static int report_run(const char *dir)
{
	char meta[4096], samples[4096];
	struct report *r;
	int rc = 1;

	if (snprintf(meta, sizeof(meta), "%s/metadata.json", dir) >= (int)sizeof(meta) ||
	    snprintf(samples, sizeof(samples), "%s/samples.jsonl", dir) >= (int)sizeof(samples)) {
		fprintf(stderr, "dial9-bpf: %s: path too long: give a shorter path\n", dir);
		return 1;
	}
	r = report_new(0);
	if (!r) {
		fprintf(stderr, "dial9-bpf: report: out of memory\n");
		return 1;
	}
	if (!load_metadata(r, meta) && !load_samples(r, samples)) {
		report_print(r, dir, stdout);
		if (fflush(stdout) || ferror(stdout))
			fprintf(stderr, "dial9-bpf: failed to write the report: %s\n",
				strerror(errno));
		else
			rc = 0;
	}
	report_free(r);
	return rc;
}

/* Reads and parses a JSON file whole; NULL after printing one line naming it and the fix. */
static json_object *load_json(const char *path, const char *fix)
{
	char err[512];
	struct perr e = {err, sizeof(err)};
	struct json_tokener *tok = NULL;
	json_object *root = NULL;
	off_t size = 0;
	char *buf = NULL;
	size_t n = 0;
	FILE *f;

	f = open_regular(path, REPORT_META_MAX, fix, err, sizeof(err), &size);
	if (!f)
		goto out;
	buf = malloc((size_t)size + 1);
	tok = json_tokener_new_ex(JSON_DEPTH);
	if (!buf || !tok) {
		fail(&e, "out of memory");
		goto out;
	}
	n = fread(buf, 1, (size_t)size, f);
	if (ferror(f)) {
		fail(&e, "read failed: %s", strerror(errno));
		goto out;
	}
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	root = json_tokener_parse_ex(tok, buf, (int)n);
	if (json_tokener_get_error(tok) != json_tokener_success || !root) {
		json_object_put(root);
		root = NULL;
		fail(&e, "invalid JSON (%s): the file is damaged or not written by dial9-bpf",
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

/*
 * A --cgroup/--container run: processes.json lists one --pid run directory per profile (see
 * cgroup_watch.c); each is reported in turn, under a header naming the process.
 */
static int report_processes(const char *dir, const char *path)
{
	char err[512], exe[256], reason[64], sub[4096];
	struct perr e = {err, sizeof(err)};
	json_object *root = load_json(path, "give the --output directory of a dial9-bpf run");
	json_object *procs;
	size_t n;
	int rc = 0;

	if (!root)
		return 1;
	if (get_typed(&e, "", root, "processes", false, json_type_array, &procs)) {
		fprintf(stderr,
			"dial9-bpf: %s: %s: the file is damaged or not written by "
			"dial9-bpf\n",
			path, err);
		json_object_put(root);
		return 1;
	}
	n = json_object_array_length(procs);
	if (!n)
		printf("%s: no Tokio process was profiled (%s lists none)\n", dir, path);
	for (size_t i = 0; i < n; i++) {
		json_object *p = json_object_array_get_idx(procs, i);
		const char *subdir, *exe_s, *why;
		int64_t pid, code;
		struct stat st;

		if (!json_object_is_type(p, json_type_object) ||
		    get_str(&e, "processes[]", p, "subdir", false, false, &subdir) ||
		    get_str(&e, "processes[]", p, "exe", false, true, &exe_s) ||
		    get_str(&e, "processes[]", p, "stop_reason", false, false, &why) ||
		    get_i64(&e, "processes[]", p, "pid", false, 1, INT32_MAX, &pid) ||
		    get_i64(&e, "processes[]", p, "exit_code", false, -1, 255, &code)) {
			if (!json_object_is_type(p, json_type_object))
				fail(&e, "processes[%zu] is not an object", i);
			fprintf(stderr,
				"dial9-bpf: %s: %s: the file is damaged or not written by "
				"dial9-bpf\n",
				path, err);
			rc = 1;
			break;
		}
		/* A name inside dir, never a path out of it. */
		if (!*subdir || strchr(subdir, '/') || !strcmp(subdir, ".") ||
		    !strcmp(subdir, "..") ||
		    snprintf(sub, sizeof(sub), "%s/%s", dir, subdir) >= (int)sizeof(sub)) {
			fprintf(stderr,
				"dial9-bpf: %s: processes[%zu].subdir is not a directory "
				"name: the file is damaged\n",
				path, i);
			rc = 1;
			break;
		}
		copy_str(exe, sizeof(exe), exe_s);
		copy_str(reason, sizeof(reason), why);
		printf("%s== %s: pid %" PRId64 " (%s), %s ==\n", i ? "\n" : "", subdir, pid, exe,
		       reason);
		fflush(stdout);
		if (stat(sub, &st) || !S_ISDIR(st.st_mode)) {
			printf("no profile: its profiler exited with %" PRId64
			       " before sampling (its messages were on stderr)\n",
			       code);
			continue;
		}
		rc |= report_run(sub);
	}
	json_object_put(root);
	return rc;
}

int report_main(const char *dir)
{
	char meta[4096], procs[4096];
	struct stat st;

	errno = 0;
	if (stat(dir, &st) || !S_ISDIR(st.st_mode)) {
		fprintf(stderr,
			"dial9-bpf: %s: %s: give the --output directory of a previous dial9-bpf "
			"run\n",
			dir, errno ? strerror(errno) : "not a directory");
		return 1;
	}
	/* A supervisor's directory (--cgroup, --container) has processes.json and no
	 * metadata.json of its own. */
	if (snprintf(meta, sizeof(meta), "%s/metadata.json", dir) < (int)sizeof(meta) &&
	    snprintf(procs, sizeof(procs), "%s/processes.json", dir) < (int)sizeof(procs) &&
	    access(meta, F_OK) && !access(procs, F_OK))
		return report_processes(dir, procs);
	return report_run(dir);
}
