// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>
#include "arming.h"
#include "collector.h"
#include "debuginfo.h"
#include "elf_file.h"
#include "json.h"
#include "cpu_samples.h"
#include "long_polls.h"
#include "push.h"
#include "metadata.h"
#include "worker_tls.h"
#include "options.h"
#include "attach.h"
#include "out_dir.h"
#include "park_outcome.h"
#include "privs.h"
#include "task_types.h"
#include "target.h"
#include "unwind_dwarf.h"
#include "unwind_tables.h"

static const char *const counter_names[D9_CNT_MAX] = {
    [D9_CNT_POLLS] = "polls",
    [D9_CNT_ELIGIBLE] = "eligible_transitions",
    [D9_CNT_RB_DROPS] = "ring_buffer_drops",
    [D9_CNT_NEST_OVERFLOW] = "nesting_overflows",
    [D9_CNT_THREAD_MAP_FULL] = "thread_map_full",
    [D9_CNT_TASK_ID_BAD] = "task_id_unreadable",
    [D9_CNT_PARK_HITS] = "park_point_captures",
    [D9_CNT_STACK_ERRORS] = "stack_capture_errors",
    [D9_CNT_HITS] = "probe_hits",
    [D9_CNT_HITS_XOL] = "probe_hits_single_stepped",
    [D9_CNT_CALIB_HITS] = "calibration_hits",
    [D9_CNT_FULL_POLLS] = "window_yield_polls",
    [D9_CNT_FULL_HITS] = "window_yield_hits",
    [D9_CNT_FULL_BUSY_NS] = "window_yield_busy_ns",
    [D9_CNT_LEAN_POLLS] = "lean_window_yield_polls",
    [D9_CNT_LEAN_HITS] = "lean_window_yield_hits",
    [D9_CNT_LEAN_BUSY_NS] = "lean_window_yield_busy_ns",
    [D9_CNT_CAPTURE_NS] = "capture_ns",
    [D9_CNT_RESUME_BY_ID] = "resumes_known_by_task_id",
    [D9_CNT_RET_HITS] = "park_return_hits",
    [D9_CNT_RET_UNMATCHED] = "park_returns_unmatched",
    [D9_CNT_BLOCKING_POLLS] = "blocking_task_polls",
    [D9_CNT_GATE_HITS] = "probe_hits_in_gate",
    [D9_CNT_COUNT_FULL] = "resumes_not_counted",
    [D9_CNT_CPU_TICKS] = "cpu_ticks_on_workers",
    [D9_CNT_CPU_UNLEARNED] = "cpu_samples_task_unknown",
    [D9_CNT_CPU_DROPS] = "cpu_sample_drops",
    [D9_CNT_EBPF_UNWIND_END] = "ebpf_unwind_complete",
    [D9_CNT_EBPF_UNWIND_UNCOVERED] = "ebpf_unwind_uncovered",
    [D9_CNT_EBPF_UNWIND_ERRORS] = "ebpf_unwind_errors",
    [D9_CNT_EBPF_UNWIND_DEPTH] = "ebpf_unwind_max_depth",
    [D9_CNT_LP_SLEEPS] = "sleeps_in_polls",
    [D9_CNT_ATTACH_HITS] = "probe_hits_attaching",
    [D9_CNT_SETTLE_HITS] = "probe_hits_settling",
    [D9_CNT_DETACH_HITS] = "probe_hits_detaching",
};

/* --unwind ebpf: the tables the BPF walker used, and how its walks ended. */
static void write_unwind_tables(FILE *f, const struct options *o, const struct run_summary *r)
{
	const struct unwind_tables *u = r->unwind_tables;

	if (o->unwind != D9_UNWIND_EBPF || !u)
		return;
	fprintf(f,
		", \"ebpf\": {\"modules\": %zu, \"files\": %zu, \"rows\": %zu, "
		"\"mappings_uncovered\": %zu, \"walks\": {\"complete\": %" PRIu64
		", \"uncovered\": %" PRIu64 ", \"errors\": %" PRIu64 ", \"max_depth\": %" PRIu64
		"}}",
		u->nmods, u->files, u->nrows, u->uncovered, r->counters[D9_CNT_EBPF_UNWIND_END],
		r->counters[D9_CNT_EBPF_UNWIND_UNCOVERED], r->counters[D9_CNT_EBPF_UNWIND_ERRORS],
		r->counters[D9_CNT_EBPF_UNWIND_DEPTH]);
}

/* The workers' detection method when they share one, else "mixed". */
static const char *worker_detection(const struct collector *c)
{
	const char *first;

	if (!c->nworkers)
		return "none";
	first = collector_worker_detection(&c->workers[0]);
	for (size_t i = 1; i < c->nworkers; i++)
		if (strcmp(collector_worker_detection(&c->workers[i]), first))
			return "mixed";
	return first;
}

/* A finite number as JSON, else null. */
static const char *num_or_null(char *buf, size_t len, double x)
{
	if (!isfinite(x))
		return "null";
	snprintf(buf, len, "%.3f", x);
	return buf;
}

static void write_workers(FILE *f, const struct collector *c, const struct run_summary *r)
{
	fputs("  \"workers\": [", f);
	for (size_t i = 0; i < c->nworkers; i++) {
		const struct worker_info *w = &c->workers[i];
		char share[32];

		fprintf(f,
			"%s\n    {\"worker\": %d, \"key\": \"0x%" PRIx64
			"\", \"detection\": \"%s\", \"worker_run_seen\": %s, "
			"\"tid\": %u, \"comm\": ",
			i ? "," : "", w->index, w->key, collector_worker_detection(w),
			w->from_worker_run ? "true" : "false", w->tid);
		json_str(f, w->comm);
		fprintf(f,
			", \"samples_written\": %" PRIu64
			", \"woken_factor\": %.4f, \"woken_factor_rel_se\": %.4f, "
			"\"woken_chain_share\": %s",
			w->samples, collector_woken_factor(c, w, &(struct d9_gate_time){}),
			collector_woken_rel_se(c, w),
			num_or_null(share, sizeof(share),
				    w->woken_cycle_ns
					? (double)w->woken_chain_ns / (double)w->woken_cycle_ns
					: NAN));
		fputs(",\n     \"epochs\": [", f);
		for (size_t j = 0, n = 0; j < w->nepochs; j++) {
			const struct epoch_stat *e = &w->epochs[j];
			double x = collector_slowdown_sensitivity(&e->gate, c->hit_cost_ns);
			char sens[32];

			if (!run_has_epoch(r, e->epoch))
				continue;
			fprintf(
			    f,
			    "%s\n       {\"epoch\": %" PRIu64 ", \"eligible\": %" PRIu64
			    ", \"selected\": %" PRIu64 ", \"refused_by_cap\": %" PRIu64
			    ", \"probability\": %.9g, \"capped\": %s, \"calibrating\": %s, "
			    "\"complete\": %s, \"window_hits\": %" PRIu64
			    ", \"window_busy_ms\": %.3f, \"window_idle_ms\": %.3f, "
			    "\"window_clock_ms\": %.3f, \"window_wait_ms\": %.3f, "
			    "\"window_capture_ms\": %.3f, "
			    "\"window_slowdown\": %.4f, \"window_cost_sensitivity\": %s, "
			    "\"window_woken_chain_share\": %s, \"window_oncpu_ms\": %.3f}",
			    n++ ? "," : "", e->epoch, e->eligible, e->selected, e->refused,
			    (double)e->prob / (double)D9_PROB_ONE, e->capped ? "true" : "false",
			    e->calibrating ? "true" : "false", e->open ? "false" : "true",
			    (uint64_t)e->gate.hits, e->gate.busy_ns / 1e6, e->gate.idle_ns / 1e6,
			    e->gate.clock_ns / 1e6, e->gate.wait_ns / 1e6, e->gate.capture_ns / 1e6,
			    e->slowdown > 0 ? e->slowdown : 1.0, num_or_null(sens, sizeof(sens), x),
			    num_or_null(share, sizeof(share),
					e->gate.woken_cycle_ns ? (double)e->gate.woken_chain_ns /
								     (double)e->gate.woken_cycle_ns
							       : NAN),
			    e->gate.oncpu_ns / 1e6);
		}
		fputs("]}", f);
	}
	fputs("\n  ],\n", f);
}

/* How a park point's outcome is observed, and what its returns said in sampled polls. */
static void write_park_outcome(FILE *f, const struct d9_park_outcome *o)
{
	fputs(", \"outcome\": ", f);
	json_str(f, park_outcome_describe(o));
	if (o->method < D9_OUT_RET_AL)
		return;
	if (o->method == D9_OUT_SRET_BYTE)
		fprintf(f, ", \"tag_offset\": %u", o->off);
	if (o->method != D9_OUT_JOIN_STATE)
		fprintf(f, ", \"pending_value\": %u", o->pending);
	fprintf(f,
		", \"seen_pending\": %" PRIu64 ", \"seen_ready\": %" PRIu64
		", \"seen_unexpected\": %" PRIu64,
		(uint64_t)o->pending_n, (uint64_t)o->ready_n, (uint64_t)o->bad_n);
	if (o->bad_n)
		fprintf(f, ", \"first_unexpected\": \"0x%" PRIx64 "\"", (uint64_t)o->bad_value);
}

/* The schedulers (runtimes, LocalSets) the samples' tasks belong to, by samples.jsonl's
 * "runtime" index. */
static void write_runtimes(FILE *f, const struct collector *c)
{
	fputs("  \"runtimes\": [", f);
	for (size_t i = 0; i < c->nruntimes; i++) {
		const struct runtime_info *r = &c->runtimes[i];

		fprintf(f,
			"%s\n    {\"runtime\": %d, \"key\": \"0x%" PRIx64
			"\", \"samples\": %" PRIu64 ", \"first_worker\": %d}",
			i ? "," : "", r->index, r->key, r->samples, r->first_worker);
	}
	fputs(c->nruntimes ? "\n  ],\n" : "],\n", f);
}

static void write_probes(FILE *f, const struct target *t, const struct run_summary *r)
{
	fprintf(f,
		"  \"probes\": {\"attached\": %" PRIu64
		", \"link\": \"%s\", \"attach_ms\": %.1f, \"detach_ms\": %.1f, "
		"\"poll_functions\": %zu, \"dealloc_functions\": %zu, \"worker_run\": %zu, "
		"\"park_points\": %zu, \"park_returns\": \"%s\",\n    \"symbols\": [",
		r->probes_attached, r->uprobe_multi ? "uprobe_multi" : "perf_event", r->attach_ms,
		r->detach_ms, t->count[PROBE_POLL], t->count[PROBE_DEALLOC],
		t->count[PROBE_WORKER_RUN], t->count[PROBE_PARK],
		attach_uses_sessions() ? "uprobe_session" : "uretprobe");
	for (size_t i = 0; i < t->nprobes; i++) {
		fprintf(f, "%s\n      {\"kind\": \"%s\", \"offset\": \"0x%" PRIx64 "\", \"name\": ",
			i ? "," : "", probe_kind_name(t->probes[i].kind), t->probes[i].offset);
		json_str(f, t->probes[i].name);
		/* Probed at the callee that only its Pending path reaches (target.c). */
		if (t->probes[i].at_callee)
			fputs(", \"pending_path_only\": true", f);
		if (t->probes[i].kind == PROBE_PARK)
			write_park_outcome(f, &t->probes[i].outcome);
		fputc('}', f);
	}
	fputs("]},\n", f);
}

double tool_cpu_s(void)
{
	struct rusage ru = {};

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* The arming totals of the run summary's part of the run: all of it, or one --rotate folder. */
static void overhead_totals(const struct arming *a, const struct run_summary *r,
			    struct arming_totals *d)
{
	const struct arming_totals *b = r->arming_base;

	if (r->arming_end)
		*d = *r->arming_end;
	else
		arming_totals_locked(a, d);
	if (!b)
		return;
	d->windows -= b->windows;
	d->armed_ns -= b->armed_ns;
	d->attach_ns -= b->attach_ns;
	d->probe_cpu_ns -= b->probe_cpu_ns;
	d->target_cpu_ns -= b->target_cpu_ns;
	d->tool_cpu_ns -= b->tool_cpu_ns;
}

static void write_overhead(FILE *f, const struct options *o, const struct collector *c,
			   const struct run_summary *r)
{
	char sens[32], tgt[32], tgm[32], tgs[32], xol[32], wcpu[32];

	struct arming *a = r->arming;
	double run_s = (double)(r->stopped_ns - r->started_ns) / 1e9;
	struct arming_totals d;
	struct arming_short sw;
	struct rusage ru = {};

	getrusage(RUSAGE_SELF, &ru);
	pthread_mutex_lock(&a->lock);
	overhead_totals(a, r, &d);
	arming_short_windows_locked(a, r->started_ns / D9_NSEC_PER_SEC + 1,
				    r->stopped_ns / D9_NSEC_PER_SEC - 1, &sw);
	fprintf(
	    f,
	    "  \"overhead\": {\"budget_pct\": %.3g, \"mode\": \"%s\",\n"
	    "    \"probe_hit_cost_ns\": {\"emulated\": %.0f, \"single_stepped\": %s, "
	    "\"measured\": %s, \"program_run\": %.0f, \"in_target\": %s, \"in_target_measured\": "
	    "%s, "
	    "\"in_target_se\": %s, \"lean_windows\": %" PRIu64 ", \"lean_polls\": %.0f, "
	    "\"sampling_polls\": %.0f, \"per_hit\": %.0f, \"per_hit_rel_se\": %.3f},\n"
	    "    \"slow_traps\": %s, \"windows_short_of_wait\": {\"epochs\": %u, \"of\": %u, "
	    "\"window_ms\": %.1f, \"wait_ms\": %.1f, \"noted\": %s},\n"
	    "    \"windows\": %" PRIu64 ", \"kept_probes\": %zu, \"kept_rebuilds\": %" PRIu64
	    ", \"kept_hits\": %" PRIu64 ", \"kept_evictions\": %" PRIu64
	    ", \"armed_fraction\": %.6f, \"attach_ms_total\": %.1f, "
	    "\"tool_cpu_ms_per_window\": %.2f, \"arming_realtime\": %s,\n"
	    "    \"target_cpu_s\": %.3f, \"probe_cpu_s_est\": %.4f, "
	    "\"tool_cpu_s_while_sampling\": %.4f, \"est_overhead_pct\": %.3f,\n"
	    "    \"tool_cpu_s\": %.3f, \"tool_max_rss_kb\": %ld,\n"
	    "    \"cost_sensitivity_median\": %s,\n    \"epochs\": [",
	    o->overhead_budget, o->overhead_budget >= 100 ? "always_armed" : "armed_windows",
	    a->cost.entry_ns,
	    a->cost.xol_measured ? num_or_null(xol, sizeof(xol), a->cost.xol_ns) : "null",
	    a->cost.measured ? "true" : "false", a->bpf_run_ns,
	    a->target_hit_ns > 0 ? num_or_null(tgt, sizeof(tgt), a->target_hit_ns) : "null",
	    a->target_hit_measured > 0 ? num_or_null(tgm, sizeof(tgm), a->target_hit_measured)
				       : "null",
	    a->target_hit_measured > 0 ? num_or_null(tgs, sizeof(tgs), a->target_hit_se) : "null",
	    a->lean_windows, a->cost_lean.polls, a->cost_full.polls, arming_hit_cost_ns_locked(a),
	    arming_hit_cost_rel_se_locked(a),
	    arming_slow_traps(arming_hit_cost_ns_locked(a), o->overhead_budget) ? "true" : "false",
	    sw.epochs, sw.of, sw.window_ms, sw.wait_ms, arming_short_noted(&sw) ? "true" : "false",
	    d.windows, a->kept_probes, a->kept_rebuilds, a->kept_hits, a->kept_evictions,
	    run_s > 0 ? (double)d.armed_ns / 1e9 / run_s : 0, (double)d.attach_ns / 1e6,
	    a->window_cpu_ns / 1e6, a->realtime ? "true" : "false", (double)d.target_cpu_ns / 1e9,
	    (double)d.probe_cpu_ns / 1e9, (double)d.tool_cpu_ns / 1e9,
	    d.target_cpu_ns > d.probe_cpu_ns ? 100.0 * (double)(d.probe_cpu_ns + d.tool_cpu_ns) /
						   (double)(d.target_cpu_ns - d.probe_cpu_ns)
					     : 0.0,
	    tool_cpu_s() - r->tool_cpu_s0, ru.ru_maxrss,
	    num_or_null(sens, sizeof(sens), collector_sensitivity_median(c)));
	for (size_t i = 0, n = 0; i < a->nlog; i++) {
		if (!run_has_epoch(r, a->log[i].epoch))
			continue;
		fprintf(f,
			"%s{\"epoch\": %" PRIu64 ", \"duty\": %.6f, \"windows\": %u, "
			"\"gate_ms\": %.2f, \"est_overhead_pct\": %.3f, \"duty_limit\": \"%s\", "
			"\"worker_cpu_ms\": %s, \"runq_gap_ms\": %.1f}",
			n++ ? ", " : "", a->log[i].epoch, a->log[i].duty, a->log[i].windows,
			a->log[i].gate_ns / 1e6, 100.0 * a->log[i].est_overhead,
			arming_duty_limit(&a->log[i]),
			a->log[i].worker_cpu_ns >= 0
			    ? num_or_null(wcpu, sizeof(wcpu), a->log[i].worker_cpu_ns / 1e6)
			    : "null",
			a->log[i].runq_gap_ns / 1e6);
	}
	fputs("]},\n", f);
	pthread_mutex_unlock(&a->lock);
}

/* Where a --rotate folder sits in its run: its epochs and the run's start. */
static void write_rotation(FILE *f, const struct run_summary *r)
{
	if (!r->rotate_s)
		return;
	fprintf(f,
		"  \"rotation\": {\"interval_s\": %" PRIu64 ", \"index\": %" PRIu64
		", \"first_epoch\": %" PRIu64 ", \"end_epoch\": ",
		r->rotate_s, r->interval, r->epoch_lo);
	if (r->epoch_hi)
		fprintf(f, "%" PRIu64, r->epoch_hi);
	else
		fputs("null", f);
	fprintf(f, ", \"run_started_at_ns\": %" PRIu64 "},\n", r->run_started_ns);
}

/* Each task type: its vtable, the future it runs and how that was named. */
static void write_task_types(FILE *f, const struct task_types *tt)
{
	fputs("  \"task_types\": [", f);
	for (size_t i = 0; tt && i < tt->n; i++) {
		const struct task_type *y = &tt->v[i];

		fprintf(f,
			"%s\n    {\"vtable\": \"0x%" PRIx64 "\", \"poll\": \"0x%" PRIx64
			"\", \"future\": ",
			i ? "," : "", y->vtable, y->poll);
		json_str(f, y->name);
		fprintf(f, ", \"named_by\": \"%s\", \"samples\": %" PRIu64 "}", y->method,
			y->samples);
	}
	fputs("\n  ],\n", f);
}

/* What the sampling loop still held, and who the outputs were handed to. */
static void write_privileges(FILE *f, const struct out_dir *dir)
{
	char caps[1024];

	if (privs_describe(caps, sizeof(caps)))
		snprintf(caps, sizeof(caps), "null");
	fprintf(f, "  \"privileges\": {\"loop_capabilities\": %s, \"outputs_owner\": ", caps);
	if (dir->give)
		fprintf(f, "{\"uid\": %u, \"gid\": %u}},\n", (unsigned)dir->uid,
			(unsigned)dir->gid);
	else
		fputs("null},\n", f);
}

/* Where the target's symbols came from: its own .symtab, or which separate debug file. */
static void write_symbols(FILE *f, const struct target *t)
{
	char hex[2 * ELF_BUILD_ID_MAX + 1];
	const uint8_t *id;
	size_t len = elf_file_build_id(t->elf, &id);

	debuginfo_build_id_hex(id, len, hex);
	fprintf(f, ", \"build_id\": ");
	json_str(f, len ? hex : NULL);
	fprintf(f, ",\n    \"symbols\": {\"method\": \"%s\", \"path\": ",
		debuginfo_method_name(t->symbols.method));
	json_str(f, t->symbols.method == DEBUGINFO_SYMTAB ? t->exe_path : t->symbols.path);
	fprintf(f, ", \"search_ms\": %.1f}", t->symbols.ms);
}

int metadata_write(const struct out_dir *dir, const struct options *o, const struct target *t,
		   const struct collector *c, const struct run_summary *r)
{
	struct out_file out;
	struct utsname u;
	FILE *f;
	int err = out_file_create(&out, dir, "metadata.json", false);

	if (err) {
		fprintf(stderr, "dial9-bpf: failed to create %s/metadata.json.tmp: %s\n", dir->path,
			strerror(-err));
		return err;
	}
	f = out.f;
	if (uname(&u))
		memset(&u, 0, sizeof(u));
	fputs("{\n  \"tool\": \"dial9-bpf\",\n  \"tool_version\": \"" DIAL9_VERSION "\",\n", f);
	fputs("  \"kernel_release\": ", f);
	json_str(f, u.release);
	fprintf(f,
		",\n  \"sampler\": {\"name\": \"per_worker_stratified_v1\", \"version\": 1, "
		"\"per_worker_hz\": %" PRIu64 ", \"epoch\": \"CLOCK_MONOTONIC whole seconds\", "
		"\"seed\": %" PRIu64
		",\n    \"cap\": {\"kind\": \"token_bucket\", \"rate_hz\": %" PRIu64
		", \"burst\": %" PRIu64 ", \"refill\": \"whole at each epoch\"}},\n",
		o->per_worker_hz, r->seed, o->per_worker_hz, o->cap_burst);
	fprintf(f, "  \"target\": {\"pid\": %d, \"comm\": ", t->pid);
	json_str(f, t->comm);
	fputs(", \"exe\": ", f);
	json_str(f, t->exe_path);
	write_symbols(f, t);
	fputs("},\n  \"task_id_layout\": ", f);
	json_str(f, r->task_id_layout);
	fprintf(f,
		",\n  \"unwind\": {\"mode\": \"%s\", \"stack_size\": %u, "
		"\"target_keeps_frame_pointers\": %s, \"samples\": %" PRIu64
		", \"frames_fp\": %" PRIu64 ", \"frames_dwarf\": %" PRIu64 ", \"stops\": {",
		o->unwind == D9_UNWIND_DWARF  ? "dwarf"
		: o->unwind == D9_UNWIND_EBPF ? "ebpf"
					      : "fp",
		o->stack_size, t->keeps_frame_pointers ? "true" : "false", c->samples_dwarf,
		c->frames_fp, c->frames_dwarf);
	for (int i = 0; i < UNWIND_STATS; i++)
		fprintf(f, "%s\"%s\": %" PRIu64, i ? ", " : "",
			unwind_stop_name((enum unwind_stop)i), c->unwind_stops[i]);
	fputc('}', f);
	write_unwind_tables(f, o, r);
	fputc('}', f);
	fprintf(f,
		",\n  \"sampling_started_at_ns\": %" PRIu64 ", \"sampling_stopped_at_ns\": %" PRIu64
		", \"started_realtime_ns\": %" PRIu64 ",\n  \"stop_reason\": ",
		r->started_ns, r->stopped_ns, r->started_realtime_ns);
	json_str(f, r->stop_reason);
	fprintf(f, ",\n  \"worker_detection\": \"%s\",\n", worker_detection(c));
	write_rotation(f, r);
	if (r->worker_tls) {
		fputs("  \"worker_tls\": ", f);
		worker_tls_write_json(f, r->worker_tls);
		fputs(",\n", f);
	}
	if (r->long_polls) {
		fputs("  \"long_polls\": ", f);
		long_polls_write_json(f, r->long_polls);
		fputs(",\n", f);
	}
	if (r->push) {
		fputs("  \"push\": ", f);
		push_stats_write_json(f, r->push);
		fputs(",\n", f);
	}
	if (r->cpu_samples) {
		fputs("  \"cpu_samples\": ", f);
		cpu_samples_write_json(f, r->cpu_samples);
		fputs(",\n", f);
	}
	write_probes(f, t, r);
	write_privileges(f, dir);
	write_task_types(f, c->types);
	fputs("  ", f);
	target_discovery_json(f, t);
	fputs(",\n", f);
	if (r->arming)
		write_overhead(f, o, c, r);
	write_workers(f, c, r);
	write_runtimes(f, c);
	fputs("  \"counters\": {", f);
	for (int i = 0; i < D9_CNT_MAX; i++)
		fprintf(f, "%s\"%s\": %" PRIu64, i ? ", " : "", counter_names[i], r->counters[i]);
	fprintf(f,
		"},\n  \"samples\": {\"written\": %" PRIu64 ", \"with_stack\": %" PRIu64
		", \"stack_errors\": %" PRIu64 ", \"task_id_ok\": %" PRIu64
		", \"loader_ns\": %" PRIu64 ", \"layout\": \"%s\"},\n",
		c->samples_written, c->samples_with_stack, c->samples_stack_errors,
		c->samples_task_id_ok, c->loader_ns,
		!(o->formats & D9_FMT_JSONL) ? "none"
		: o->inline_stacks	     ? "inline"
					     : "stack_table");
	fputs("  \"estimate_terms\": ", f);
	est_terms_write_json(&c->terms, false, f);
	fputs(",\n  \"count_terms\": ", f);
	est_terms_write_json(&c->counted, true, f);
	fputs("\n}\n", f);
	return out_file_commit(&out);
}
