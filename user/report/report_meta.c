// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* report: the metadata.json model (run, sampler, workers and their epochs, counters). */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <json-c/json.h>
#include "options.h"
#include "report.h"
#include "report_int.h"

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
			return rpt_fail(e, "\"%s\" is %s, expected an object", where, rpt_kind(ep));
		if (rpt_get_u64(e, where, ep, "epoch", false, 0, MAX_EPOCH, &epoch) ||
		    rpt_get_u64(e, where, ep, "eligible", false, 0, MAX_U64, &eligible) ||
		    rpt_get_u64(e, where, ep, "selected", false, 0, eligible, &selected) ||
		    rpt_get_u64(e, where, ep, "refused_by_cap", false, 0, MAX_U64, &refused) ||
		    rpt_get_num(e, where, ep, "probability", false, 0, 1, false, &prob) ||
		    rpt_get_bool(e, where, ep, "capped", false, &capped) ||
		    rpt_get_bool(e, where, ep, "calibrating", false, &calibrating) ||
		    rpt_get_bool(e, where, ep, "complete", false, &complete))
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
		return rpt_fail(e, "\"workers\" has %zu entries, more than %d", n, MAX_WORKERS);
	r->workers = calloc(n ? n : 1, sizeof(*r->workers));
	if (!r->workers)
		return rpt_fail(e, "out of memory");
	for (size_t i = 0; i < n; i++) {
		json_object *wo = json_object_array_get_idx(arr, i), *epochs = NULL;
		struct worker_sum *w = &r->workers[i];
		const char *comm = NULL, *det = NULL;
		uint64_t written;

		snprintf(where, sizeof(where), "workers[%zu]", i);
		if (!json_object_is_type(wo, json_type_object))
			return rpt_fail(e, "\"%s\" is %s, expected an object", where, rpt_kind(wo));
		if (rpt_get_i64(e, where, wo, "worker", false, 0, MAX_WORKER_INDEX, &w->index) ||
		    rpt_get_u64(e, where, wo, "tid", true, 0, UINT32_MAX, &w->tid) ||
		    rpt_get_str(e, where, wo, "comm", true, true, &comm) ||
		    rpt_get_str(e, where, wo, "detection", true, false, &det) ||
		    rpt_get_u64(e, where, wo, "samples_written", true, 0, MAX_U64, &written) ||
		    rpt_get_typed(e, where, wo, "epochs", false, json_type_array, &epochs))
			return -1;
		rpt_copy_str(w->comm, sizeof(w->comm), comm);
		rpt_copy_str(w->detection, sizeof(w->detection), det);
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
			return rpt_fail(e, "\"counters\" has more than %d entries", MAX_COUNTERS);
		if (strlen(key) >= sizeof(c->name))
			return rpt_fail(e, "a counter name is longer than %zu bytes",
					sizeof(c->name) - 1);
		/* Through get_u64 so that the checks and messages are the same. */
		if (rpt_get_u64(e, "counters", obj, key, false, 0, MAX_NS, &v))
			return -1;
		(void)val;
		c = &r->counters[r->ncounters++];
		rpt_copy_str(c->name, sizeof(c->name), key);
		c->value = v;
	}
	return 0;
}

/* count_terms: each task type's estimate from the in-window resume counts, and its terms. */
static int parse_count_terms(struct report *r, json_object *arr, struct perr *e)
{
	size_t n = json_object_array_length(arr);
	char where[48];

	for (size_t i = 0; i < n; i++) {
		json_object *c = json_object_array_get_idx(arr, i);
		const char *future = NULL;
		double sum = 0, sq = 0, edge = 0, price = 0;
		struct type_sum *t;

		snprintf(where, sizeof(where), "count_terms[%zu]", i);
		if (!json_object_is_type(c, json_type_object))
			return rpt_fail(e, "\"%s\" is %s, expected an object", where, rpt_kind(c));
		if (rpt_get_str(e, where, c, "future", true, true, &future) ||
		    rpt_get_num(e, where, c, "sum", false, 0, 1e300, false, &sum) ||
		    rpt_get_num(e, where, c, "sum_sq", false, 0, 1e300, false, &sq) ||
		    rpt_get_num(e, where, c, "edge_sq", true, 0, 1e300, false, &edge) ||
		    rpt_get_num(e, where, c, "price_se", true, 0, 1e300, false, &price))
			return -1;
		t = rpt_type_get(r, future);
		t->counted += sum;
		t->counted_sq += sq;
		t->counted_edge += edge;
		t->counted_price += price;
		r->total_counted += sum;
	}
	r->have_counted = true;
	return 0;
}

static int parse_meta_root(struct report *r, json_object *root, struct perr *e)
{
	json_object *sampler, *cap, *target, *workers, *counters, *probes = NULL, *samples = NULL;
	json_object *overhead = NULL, *count_terms = NULL;
	const char *tool = NULL, *s;

	if (!json_object_is_type(root, json_type_object))
		return rpt_fail(e, "the document is %s, expected an object", rpt_kind(root));
	if (rpt_get_str(e, "", root, "tool", false, false, &tool))
		return -1;
	if (strcmp(tool, "dial9-bpf"))
		return rpt_fail(e, "\"tool\" is not \"dial9-bpf\"");
#define OPT_STR(obj, where, key, dst)                                                              \
	do {                                                                                       \
		s = NULL;                                                                          \
		if (rpt_get_str(e, where, obj, key, true, true, &s))                               \
			return -1;                                                                 \
		rpt_copy_str(dst, sizeof(dst), s);                                                 \
	} while (0)
	OPT_STR(root, "", "tool_version", r->tool_version);
	OPT_STR(root, "", "kernel_release", r->kernel);
	OPT_STR(root, "", "task_id_layout", r->layout);
	OPT_STR(root, "", "stop_reason", r->stop_reason);
	OPT_STR(root, "", "worker_detection", r->detection);
	if (rpt_get_typed(e, "", root, "sampler", false, json_type_object, &sampler) ||
	    rpt_get_u64(e, "sampler", sampler, "per_worker_hz", false, 1, D9_MAX_HZ, &r->hz) ||
	    rpt_get_u64(e, "sampler", sampler, "seed", true, 0, UINT64_MAX, &r->seed) ||
	    rpt_get_typed(e, "sampler", sampler, "cap", false, json_type_object, &cap) ||
	    rpt_get_u64(e, "sampler.cap", cap, "rate_hz", false, 0, MAX_NS, &r->cap_rate) ||
	    rpt_get_u64(e, "sampler.cap", cap, "burst", false, 0, MAX_NS, &r->burst))
		return -1;
	OPT_STR(sampler, "sampler", "name", r->sampler);
	if (rpt_get_typed(e, "", root, "target", false, json_type_object, &target) ||
	    rpt_get_i64(e, "target", target, "pid", false, 0, INT32_MAX, &r->pid))
		return -1;
	OPT_STR(target, "target", "comm", r->comm);
	OPT_STR(target, "target", "exe", r->exe);
	if (rpt_get_u64(e, "", root, "sampling_started_at_ns", false, 0, MAX_NS, &r->started_ns) ||
	    rpt_get_u64(e, "", root, "sampling_stopped_at_ns", false, r->started_ns, MAX_NS,
			&r->stopped_ns) ||
	    rpt_get_u64(e, "", root, "started_realtime_ns", true, 0, MAX_NS, &r->realtime_ns))
		return -1;
	if (rpt_get_typed(e, "", root, "probes", true, json_type_object, &probes))
		return -1;
	if (probes) {
		if (rpt_get_u64(e, "probes", probes, "attached", true, 0, MAX_U64, &r->probes) ||
		    rpt_get_u64(e, "probes", probes, "poll_functions", true, 0, MAX_U64,
				&r->poll_fns) ||
		    rpt_get_u64(e, "probes", probes, "park_points", true, 0, MAX_U64, &r->park_fns))
			return -1;
		OPT_STR(probes, "probes", "link", r->link);
	}
	if (rpt_get_typed(e, "", root, "overhead", true, json_type_object, &overhead) ||
	    (overhead &&
	     rpt_get_u64(e, "overhead", overhead, "windows", true, 0, MAX_NS, &r->windows)))
		return -1;
	if (rpt_get_typed(e, "", root, "workers", false, json_type_array, &workers) ||
	    parse_workers(r, workers, e))
		return -1;
	if (rpt_get_typed(e, "", root, "counters", false, json_type_object, &counters) ||
	    parse_counters(r, counters, e))
		return -1;
	if (rpt_get_typed(e, "", root, "count_terms", true, json_type_array, &count_terms) ||
	    (count_terms && parse_count_terms(r, count_terms, e)))
		return -1;
	if (rpt_get_typed(e, "", root, "samples", true, json_type_object, &samples))
		return -1;
	if (samples) {
		if (rpt_get_u64(e, "samples", samples, "written", false, 0, MAX_NS, &r->written) ||
		    rpt_get_u64(e, "samples", samples, "with_stack", true, 0, MAX_NS,
				&r->with_stack) ||
		    rpt_get_u64(e, "samples", samples, "stack_errors", true, 0, MAX_NS,
				&r->stack_errors) ||
		    rpt_get_u64(e, "samples", samples, "task_id_ok", true, 0, MAX_NS,
				&r->task_id_ok))
			return -1;
		OPT_STR(samples, "samples", "layout", r->samples_layout);
		r->have_samples_meta = true;
	}
#undef OPT_STR
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
		return rpt_fail(&e, "metadata already parsed");
	if (len > REPORT_META_MAX)
		return rpt_fail(&e, "larger than %u MiB", REPORT_META_MAX >> 20);
	if (rpt_blank(buf, len))
		return rpt_fail(&e, "empty");
	nul = memchr(buf, 0, len);
	if (nul) {
		rpt_line_col(buf, (size_t)(nul - buf), &line, &col);
		return rpt_fail(&e, "line %zu: binary data (a NUL byte at column %zu)", line, col);
	}
	tok = json_tokener_new_ex(JSON_DEPTH);
	if (!tok)
		return rpt_fail(&e, "out of memory");
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	root = json_tokener_parse_ex(tok, buf, (int)len);
	jerr = json_tokener_get_error(tok);
	end = json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	if (jerr == json_tokener_continue) {
		rpt_line_col(buf, len, &line, &col);
		json_object_put(root);
		return rpt_fail(&e, "line %zu: the JSON document ends early (truncated)", line);
	}
	if (jerr != json_tokener_success || !root) {
		rpt_line_col(buf, end < len ? end : len, &line, &col);
		json_object_put(root);
		return rpt_fail(&e, "line %zu, column %zu: invalid JSON (%s)", line, col,
				json_tokener_error_desc(jerr));
	}
	if (!rpt_blank(buf + end, len - end)) {
		rpt_line_col(buf, end, &line, &col);
		json_object_put(root);
		return rpt_fail(&e, "line %zu, column %zu: unexpected text after the JSON document",
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

struct worker_sum *rpt_find_worker(struct report *r, int64_t index)
{
	struct worker_sum key = {.index = index};

	if (index >= 0 && (size_t)index < r->nworkers && r->workers[index].index == index)
		return &r->workers[index];
	if (!r->nworkers)
		return NULL;
	return bsearch(&key, r->workers, r->nworkers, sizeof(*r->workers), by_index);
}
