// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* report: the text report, from the totals. Every string from the input is printed through
 * put_clean or rpt_copy_str, so a damaged or hostile file cannot drive the terminal. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "report.h"
#include "report_int.h"

/* Copies untrusted text for printing: control characters (C0, DEL, C1) become '?' so that a
 * damaged or hostile file cannot drive the terminal. Cut at n - 1 bytes. */
void rpt_copy_str(char *dst, size_t n, const char *src)
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

/* Prints untrusted text: control characters (C0, DEL, C1) become '?', and at most max bytes
 * are shown, cut at a character boundary. */
void rpt_put_clean(FILE *out, const char *s, size_t max)
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
	rpt_put_clean(out, dir, 4096);
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
	rpt_put_clean(out, p, PARK_NAME_MAX);
	fputc('\n', out);
	p += strlen(p) + 1;
	if (s->key[0] == TAG_LEAF)
		fputs("        (only runtime frames; the innermost:)\n", out);
	for (; p < end; p += strlen(p) + 1) {
		fputs("        ", out);
		rpt_put_clean(out, p, SHOW_COLUMNS);
		fputc('\n', out);
	}
}

static double half_width(const struct report *r, bool (*in)(const struct draw *, uint32_t),
			 uint32_t id);
static bool of_stack(const struct draw *d, uint32_t stack);

/* A half width, or "-" when fewer than two windows were drawn. */
static void put_half_width(FILE *out, double hw)
{
	if (isnan(hw))
		fprintf(out, "%9s", "-");
	else
		fprintf(out, "%9.0f", hw);
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
	fputs("  #   share  est. resumes     +-95%  est. idle s  idle share  samples\n", out);
	for (size_t i = 0; i < n; i++) {
		const struct stack_ent *s = order[i];

		fprintf(out, "%3zu  %5.1f%%  %12.0f  ", i + 1, pct(s->count, r->total_count),
			s->count);
		put_half_width(out, half_width(r, of_stack, (uint32_t)(s - r->ents)));
		fprintf(out, "  %11.3f  %9.1f%%  %7" PRIu64 "  ", s->idle_ns / 1e9,
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

/* Student's t at 97.5% for df degrees of freedom: with a few windows, 1.96 would give
 * intervals that cover the truth far less often than 95%. */
static double t975(size_t df)
{
	static const double t[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
				   2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
				   2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
				   2.060,  2.056, 2.052, 2.048, 2.045, 2.042};

	return df <= sizeof(t) / sizeof(t[0]) ? t[df - 1] : 1.96 + 2.4 / (double)df;
}

/* The 95% half width of a total over m windows drawn, from the total and the sum of the
 * windows' squared totals: Var = m / (m - 1) x (sq - total^2 / m) + edge (the counts' edge
 * terms, estimate_terms.h), times t(m - 1). */
static double cluster_half_width(size_t m, double total, double sq, double edge)
{
	if (m < 2)
		return NAN;
	return t975(m - 1) *
	       sqrt(fmax(0, (double)m / (double)(m - 1) * (sq - total * total / (double)m)) + edge);
}

/* The relative standard error that the hit price's error gives a task type's weights: its
 * counts' (count_terms' price_se over their sum), which the samples' weights share; 0 where
 * the type was not counted. */
static double type_price_rel(const struct report *r, uint32_t type)
{
	const struct type_sum *t = type < r->ntypes ? &r->types[type] : NULL;

	return t && t->counted > 0 ? t->counted_price / t->counted : 0;
}

/*
 * Half the width of the 95% interval of an estimated total (the draws for which in() holds):
 * the drawn units are the windows, so with z_c the estimate from window c and m windows,
 * Var = m / (m - 1) * (sum z_c^2 - total^2 / m), and the half width t(m - 1) x sqrt(Var).
 * Every window of the run counts, with z_c = 0 for those that drew nothing of it (all of
 * them: metadata's overhead.windows); a sample drawn on its own, always armed, is a window of
 * one. The hit price's error moves the weights of all draws of a type together: each adds its
 * weight times its type's share of it, and the square of that sum is added to Var.
 */
static double half_width(const struct report *r, bool (*in)(const struct draw *, uint32_t),
			 uint32_t id)
{
	double total = 0, sq = 0, z = 0, price = 0;
	size_t m = 0, solo = 0;

	for (size_t i = 0; i < r->ndraws; i++) {
		const struct draw *d = &r->draws[i];

		if (i && d->cluster != d[-1].cluster) {
			sq += z * z;
			z = 0;
		}
		m += !i || d->cluster != d[-1].cluster;
		solo += d->cluster > INT64_MAX / 2;
		if (in(d, id)) {
			z += d->w;
			total += d->w;
			price += d->w * type_price_rel(r, d->type);
		}
	}
	sq += z * z;
	if (r->windows + solo > m)
		m = r->windows + solo;
	return cluster_half_width(m, total, sq, price * price);
}

static bool of_stack(const struct draw *d, uint32_t stack)
{
	return d->stack == stack;
}

static bool of_type(const struct draw *d, uint32_t type)
{
	return d->type == type;
}

static int by_type_count(const void *a, const void *b)
{
	const struct type_sum *x = *(const struct type_sum *const *)a;
	const struct type_sum *y = *(const struct type_sum *const *)b;
	double ex = x->counted > 0 ? x->counted : x->count;
	double ey = y->counted > 0 ? y->counted : y->count;

	return ex < ey ? 1 : ex > ey ? -1 : 0;
}

/* The 95% half width of a type's estimate from the in-window counts: its windows' totals
 * are in counted_sq, every window of the run is a unit drawn (those that saw none of it add
 * 0), each count's edges add counted_edge, and the hit price's error moves the whole run's
 * corrected counts together: counted_price^2. */
static double counted_half_width(const struct report *r, const struct type_sum *t)
{
	return cluster_half_width(r->windows, t->counted, t->counted_sq,
				  t->counted_edge + t->counted_price * t->counted_price);
}

static void print_type_row(const struct report *r, const struct type_sum *t, const char *name,
			   FILE *out)
{
	uint32_t id = t == &r->other_types ? MAX_TYPES : (uint32_t)(t - r->types);

	if (r->have_counted) {
		fprintf(out, "  %5.1f%%  %12.0f  ", pct(t->counted, r->total_counted), t->counted);
		put_half_width(out, counted_half_width(r, t));
		fprintf(out, "  %12.0f", t->count);
	} else {
		fprintf(out, "  %5.1f%%  %12.0f  ", pct(t->count, r->total_count), t->count);
		put_half_width(out, half_width(r, of_type, id));
	}
	fprintf(out, "  %11.3f  %7" PRIu64 "  ", t->idle_ns / 1e9, t->samples);
	rpt_put_clean(out, name, 160);
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
	if (r->have_counted)
		fputs("\nBy task type (the future each task was spawned with; est. resumes from "
		      "every resume\ncounted in the windows; +-95%: half the 95% interval over the "
		      "windows and the\nprobe hit's price; from samples: the samples' estimate of "
		      "the same):\n"
		      "   share  est. resumes     +-95%  from samples  est. idle s  samples  "
		      "future\n",
		      out);
	else
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

static int by_cpu_ns(const void *a, const void *b)
{
	const struct cpu_sum *x = *(const struct cpu_sum *const *)a;
	const struct cpu_sum *y = *(const struct cpu_sum *const *)b;

	return x->ns < y->ns ? 1 : x->ns > y->ns ? -1 : 0;
}

/* The futures that held the workers' CPU, most first: every clock tick on a worker is a
 * sample, so these are totals, not weighted draws. */
static void print_cpu_tasks(const struct report *r, FILE *out)
{
	const struct cpu_sum **v;
	size_t n = r->ncpu < REPORT_TOP_STACKS ? r->ncpu : REPORT_TOP_STACKS;

	if (!r->cpu_samples)
		return;
	v = malloc(r->ncpu * sizeof(*v));
	if (!v)
		return;
	for (size_t i = 0; i < r->ncpu; i++)
		v[i] = &r->cpu[i];
	qsort(v, r->ncpu, sizeof(*v), by_cpu_ns);
	fprintf(out,
		"\nTop tasks by CPU (on-CPU samples: %" PRIu64 " clock ticks on workers, %.3f "
		"CPU-seconds):\n   share   est. CPU s  samples  future\n",
		r->cpu_samples, r->cpu_total_ns / 1e9);
	for (size_t i = 0; i < n; i++) {
		fprintf(out, "  %5.1f%%  %11.3f  %7" PRIu64 "  ", pct(v[i]->ns, r->cpu_total_ns),
			v[i]->ns / 1e9, v[i]->samples);
		rpt_put_clean(out, v[i]->future, 160);
		fputc('\n', out);
	}
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
	if (r->have_samples_meta && r->written != r->nsamples + r->cpu_samples)
		fprintf(out,
			"warning: samples.jsonl has %" PRIu64
			" samples but metadata.json says %" PRIu64 " were written\n",
			r->nsamples + r->cpu_samples, r->written);
	if (!capped && !r->capped_samples && !drops && !r->truncated_line &&
	    (!r->have_samples_meta || r->written == r->nsamples + r->cpu_samples))
		fputs("no capped epochs, no ring-buffer drops: the estimates are unbiased\n", out);
}

void report_print(const struct report *r, const char *dir, FILE *out)
{
	if (r->have_meta)
		print_run(r, dir, out);
	print_stacks(r, out);
	print_types(r, out);
	print_cpu_tasks(r, out);
	rpt_print_long_polls(r, out);
	if (r->have_meta) {
		print_workers(r, out);
		print_counters(r, out);
	}
	print_warnings(r, out);
}
