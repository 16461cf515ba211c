// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * report: one sample into the totals. Stacks are grouped by what the report shows of them: the
 * park point and the innermost REPORT_SHOWN_FRAMES frames outside the runtime (tokio, std, core,
 * alloc, libc), because two stacks that differ only inside Tokio's scheduler are the same answer
 * to "where do my tasks park". Past max_stacks (or REPORT_MAX_KEY_BYTES of keys) new stacks count
 * as "other".
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <json-c/json.h>
#include "report.h"
#include "report_int.h"
#include "util_hash.h"

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
bool rpt_runtime_frame(const char *name)
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

/* Builds the stack key in r->key; validates every frame. Returns its length or -1. */
static long build_key(struct report *r, json_object *stack, const char *park, int64_t stack_error,
		      struct perr *e)
{
	size_t n = json_object_array_length(stack), at = 1, shown = 0;
	const char *leaf_name = NULL, *leaf_module = NULL;
	char where[32];

	if (n > MAX_FRAMES)
		return rpt_fail(e, "\"stack\" has %zu frames, more than %d", n, MAX_FRAMES);
	at = key_put(r->key, at, park, PARK_NAME_MAX);
	for (size_t i = 0; i < n; i++) {
		json_object *fr = json_object_array_get_idx(stack, i);
		const char *name = NULL, *module = NULL;

		snprintf(where, sizeof(where), "stack[%zu]", i);
		if (!json_object_is_type(fr, json_type_object))
			return rpt_fail(e, "\"%s\" is %s, expected an object", where, rpt_kind(fr));
		if (rpt_get_str(e, where, fr, "name", false, true, &name) ||
		    rpt_get_str(e, where, fr, "module", true, true, &module))
			return -1;
		if (i == 0)
			leaf_module = module;
		if (!name || !*name)
			continue;
		if (!leaf_name)
			leaf_name = name;
		if (shown < REPORT_SHOWN_FRAMES && !rpt_runtime_frame(name) &&
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

struct type_sum *rpt_type_get(struct report *r, const char *future)
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
static int add_draw(struct report *r, int64_t window, const struct type_sum *type,
		    const struct stack_ent *ent, double w)
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
	    .stack = ent ? (uint32_t)(ent - r->ents) : NO_STACK_ENT,
	    .w = w,
	};
	for (i = r->ndraws++; i > 0 && r->draws[i - 1].cluster > d.cluster; i--)
		r->draws[i] = r->draws[i - 1];
	r->draws[i] = d;
	return 0;
}

static struct cpu_sum *cpu_get(struct report *r, const char *future)
{
	struct cpu_sum *c;

	for (size_t i = 0; i < r->ncpu; i++)
		if (!strcmp(r->cpu[i].future, future))
			return &r->cpu[i];
	if (r->ncpu == MAX_TYPES)
		future = "(other futures)";
	c = realloc(r->cpu, (r->ncpu + 1) * sizeof(*c));
	if (!c)
		return NULL;
	r->cpu = c;
	c = &r->cpu[r->ncpu];
	*c = (struct cpu_sum){.future = strdup(future)};
	if (!c->future)
		return NULL;
	r->ncpu++;
	return c;
}

/* An on-CPU sample: its CPU time goes to its future's (task id 0: the scheduler's). */
static int take_cpu_sample(struct report *r, json_object *obj, struct perr *e)
{
	const char *future = NULL;
	uint64_t ns, task_id = 1;
	json_object *id;
	struct cpu_sum *c;

	if (rpt_get_u64(e, "", obj, "weight_cpu_ns", false, 0, MAX_NS, &ns) ||
	    rpt_get_str(e, "", obj, "future", true, true, &future))
		return -1;
	if (json_object_object_get_ex(obj, "task_id", &id) &&
	    json_object_is_type(id, json_type_int))
		task_id = (uint64_t)json_object_get_int64(id);
	c = cpu_get(r, future ? future : task_id ? "(unknown)" : "scheduler/idle");
	if (!c)
		return rpt_fail(e, "out of memory after %zu futures", r->ncpu);
	c->samples++;
	c->ns += (double)ns;
	r->cpu_samples++;
	r->cpu_total_ns += (double)ns;
	return 0;
}

int rpt_take_sample(struct report *r, json_object *obj, struct perr *e)
{
	const char *kind = NULL;
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
		return rpt_fail(e, "the line is %s, expected a JSON object", rpt_kind(obj));
	if (rpt_get_str(e, "", obj, "kind", true, false, &kind))
		return -1;
	if (kind && !strcmp(kind, "cpu"))
		return take_cpu_sample(r, obj, e);
	if (rpt_get_i64(e, "", obj, "worker", false, -1, MAX_WORKER_INDEX, &worker) ||
	    rpt_get_num(e, "", obj, "inclusion_probability", false, 0, 1, true, &prob) ||
	    rpt_get_u64(e, "", obj, "epoch", false, 0, MAX_EPOCH, &epoch) ||
	    rpt_get_bool(e, "", obj, "capped", false, &capped) ||
	    rpt_get_str(e, "", obj, "outcome", true, false, &outcome) ||
	    rpt_get_str(e, "", obj, "park_point", false, false, &park) ||
	    rpt_get_u64(e, "", obj, "weight_count", false, 0, MAX_WEIGHT_COUNT, &wcount) ||
	    rpt_get_u64(e, "", obj, "weight_idle_ns", false, 0, MAX_WEIGHT_IDLE, &widle) ||
	    rpt_get_i64(e, "", obj, "stack_error", true, -4095, 0, &stack_error) ||
	    rpt_get_str(e, "", obj, "future", true, true, &future) ||
	    rpt_get_i64(e, "", obj, "window", true, 1, INT64_MAX / 4, &window) ||
	    rpt_get_typed(e, "", obj, "stack", false, json_type_array, &stack))
		return -1;
	if (strlen(park) > PARK_NAME_MAX)
		return rpt_fail(e, "\"park_point\" is longer than %d bytes", PARK_NAME_MAX);
	keylen = build_key(r, stack, park, stack_error, e);
	if (keylen < 0)
		return -1;
	rc = stack_get(r, r->key, (size_t)keylen, &ent);
	if (rc < 0)
		return rpt_fail(e, "out of memory after %zu distinct stacks", r->nents);

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
	type = rpt_type_get(r, future);
	type->samples++;
	type->count += (double)wcount;
	type->idle_ns += (double)widle;
	if (add_draw(r, window, type, ent, (double)wcount))
		return rpt_fail(e, "out of memory after %" PRIu64 " samples", r->nsamples);
	w = rpt_find_worker(r, worker);
	if (w)
		w->samples_seen++;
	else
		r->unknown_worker_samples++;
	return 0;
}
