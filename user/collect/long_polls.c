// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* long_polls.jsonl: learning where Tokio keeps the current task id, and writing each long
 * poll the BPF side reports (see long_polls.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "clock_events.h"
#include "collector.h"
#include "dial9_bpf.h"
#include "long_polls.h"
#include "sched_tick.h"
#include "sampler.skel.h"
#include "task_sample.h"
#include "task_types.h"
#include "worker_tls.h"

/* Park points seen inside polls before the word is trusted. */
#define LP_MIN_OBSERVATIONS 8
#define LP_CHECK_NS 100000000ULL
/* Clock ticks per second of a worker thread's CPU time, for polls held on the CPU. A worker
 * sharing its CPU runs a poll in slices and sees few ticks per poll; lower rates missed and
 * shortened more polls under load. A tick costs about a microsecond. */
#define LP_TICK_HZ 1000

void long_polls_configure(struct long_polls *lp, struct sampler_bpf *skel, const struct target *t,
			  uint64_t min_ns, bool read_task)
{
	uint64_t handler = 0;

	memset(lp, 0, sizeof(*lp));
	lp->word = -1;
	lp->run_tasks_fd = -1;
	lp->status = "off";
	bpf_program__set_autoload(skel->progs.lp_sched_tick, false);
	if (!min_ns && !read_task)
		return;
	if (!worker_tls_context_offset(t, &lp->ctx_off)) {
		fprintf(stderr,
			"dial9-bpf: the running task cannot be read: the target has no Tokio "
			"context::CONTEXT thread-local (Tokio older than 1.24?): %s\n",
			min_ns ? "long polls are off, on-CPU samples name no task id"
			       : "on-CPU samples name no task id");
		lp->status = "no_context_symbol";
		return;
	}
	lp->min_ns = min_ns;
	lp->learning = true;
	lp->status = "learning";
	skel->rodata->lp_min_ns = min_ns;
	skel->rodata->lp_read_task = 1;
	skel->rodata->lp_ctx_off = lp->ctx_off;
	/* A run is written when its ticks span the threshold: two at least, so a period of
	 * half of it. */
	if (min_ns && !sched_tick_find(min_ns / 2, &handler, &lp->tick_ns, &lp->no_sched_tick)) {
		lp->sched_tick = true;
		skel->rodata->lp_tick_fn = handler;
		bpf_program__set_autoload(skel->progs.lp_sched_tick, true);
		bpf_program__set_autoload(skel->progs.lp_tick, false);
	}
}

int long_polls_open(struct long_polls *lp, const struct out_dir *d)
{
	int err;

	if (!lp->min_ns)
		return 0;
	err = out_file_create(&lp->out, d, "long_polls.jsonl", true);
	if (err)
		return err;
	lp->open = true;
	return 0;
}

/* Whether word j held the id with a 1 (Some's tag) before it nearly every time. */
static bool tag_before(const uint64_t *counts, int j)
{
	return counts[D9_LP_WORDS + j] * 10 >= counts[j] * 9;
}

int long_polls_pick_word(const uint64_t *counts, uint64_t obs, bool *tagged)
{
	int best = -1;

	if (obs < LP_MIN_OBSERVATIONS)
		return -1;
	for (int j = 0; j < D9_LP_WORDS; j++) {
		if (counts[j] * 5 < obs * 4)
			continue;
		/* A tag word equals the id when the id is 1: a window whose park points are
		 * mostly task 1's makes both words match. The word after the tag is the id. */
		if (best == j - 1 && tag_before(counts, j)) {
			best = j;
			continue;
		}
		if (best >= 0)
			return -1; /* two words hold the id: neither can be told to be it */
		best = j;
	}
	if (best >= 0)
		*tagged = tag_before(counts, best);
	return best;
}

void long_polls_learn(struct long_polls *lp, struct sampler_bpf *skel, uint64_t now_ns)
{
	uint64_t counts[D9_LP_LEARN_SLOTS];
	int fd = bpf_map__fd(skel->maps.lp_learn);
	bool tagged = false;
	int word;

	if (!lp->learning || lp->word >= 0 || now_ns < lp->next_check_ns)
		return;
	lp->next_check_ns = now_ns + LP_CHECK_NS;
	for (uint32_t i = 0; i < D9_LP_LEARN_SLOTS; i++)
		if (bpf_map_lookup_elem(fd, &i, &counts[i]))
			return;
	lp->observations = counts[2 * D9_LP_WORDS];
	word = long_polls_pick_word(counts, lp->observations, &tagged);
	if (word < 0) {
		if (lp->observations >= 100 * LP_MIN_OBSERVATIONS)
			lp->status = "ambiguous";
		return;
	}
	lp->word = word;
	lp->tagged = tagged;
	lp->status = "learned";
	lp->learned_at_ns = now_ns;
	skel->bss->lp_id_tagged = tagged;
	skel->data->lp_id_word = (uint32_t)word;
}

static void put_stack(struct json_buf *b, const struct task_frame *fr, size_t n)
{
	json_buf_lit(b, ",\"stack\":[");
	for (size_t i = 0; i < n; i++) {
		if (i)
			json_buf_lit(b, ",");
		json_buf_lit(b, "{\"addr\":\"0x");
		json_buf_hex(b, fr[i].addr);
		json_buf_lit(b, "\",\"name\":");
		json_buf_str(b, fr[i].name);
		json_buf_lit(b, ",\"module\":");
		json_buf_str(b, fr[i].module);
		if (fr[i].inlined)
			json_buf_lit(b, ",\"inlined\":true");
		json_buf_lit(b, "}");
	}
	json_buf_lit(b, "]}\n");
}

/* Whether a stack is a multi-thread worker parking: its Parker or its Context's park. */
static bool worker_parks(const struct task_frame *fr, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const char *s = fr[i].name;

		if (s && strstr(s, "scheduler::multi_thread::") &&
		    (strstr(s, "park::Parker") || strstr(s, "park::Inner") ||
		     (strstr(s, "worker::Context") && strstr(s, "::park"))))
			return true;
	}
	return false;
}

/* A thread seen blocked "inside a poll" while its worker parks: its worker loop runs in that
 * task's poll (a block_in_place handoff from before the attach). The sampler is told, so
 * that its parks cost no stack again, and no long poll is written. */
static void note_nested_loop(struct long_polls *lp, const struct d9_long_poll *r)
{
	uint32_t tid = r->host_tid;
	uint64_t id = r->task_id;

	if (lp->run_tasks_fd >= 0 && !bpf_map_update_elem(lp->run_tasks_fd, &tid, &id, BPF_ANY))
		lp->nested_loops++;
}

int long_polls_handle(struct long_polls *lp, struct collector *c, const void *data, size_t size)
{
	static struct task_frame frames[COLLECTOR_MAX_FRAMES];
	const struct d9_long_poll *r = data;
	struct json_buf *b = &lp->line;
	struct worker_info *w;
	char *future;
	size_t n = 0;

	if (!lp->open || size < sizeof(*r))
		return 0;
	if (r->stack_bytes > 0)
		n = collector_symbolize(c, (const uint64_t *)r->stack, (size_t)r->stack_bytes / 8,
					frames);
	if (!r->on_cpu && worker_parks(frames, n)) {
		note_nested_loop(lp, r);
		return 0;
	}
	w = collector_worker(c, r->worker);
	future = task_types_stack_future(frames, n);
	collector_name_folded_frames(c, frames, n, future);
	b->len = 0;
	json_buf_lit(b, "{\"timestamp_ns\":");
	json_buf_u64(b, r->out_ns);
	json_buf_lit(b, ",\"tid\":");
	json_buf_u64(b, r->tid);
	json_buf_lit(b, ",\"worker\":");
	json_buf_i64(b, w ? w->index : -1);
	json_buf_lit(b, ",\"task_id\":");
	json_buf_u64(b, r->task_id);
	json_buf_lit(b, ",\"future\":");
	json_buf_str(b, future);
	free(future);
	json_buf_lit(b, ",\"duration_ns\":");
	json_buf_u64(b, r->blocked_ns + r->on_cpu_ns);
	/* Ticks give an estimate (half a period lost at each end on average); a switch out to
	 * the switch in, a part of the poll. */
	if (r->on_cpu)
		json_buf_lit(b, ",\"duration_is_lower_bound\":false,\"found_by\":\"clock_ticks\"");
	else
		json_buf_lit(b, ",\"duration_is_lower_bound\":true,\"found_by\":\"sched_switch\"");
	json_buf_lit(b, ",\"on_cpu_ns\":");
	json_buf_u64(b, r->on_cpu_ns);
	json_buf_lit(b, ",\"blocked_ns\":");
	json_buf_u64(b, r->blocked_ns);
	put_stack(b, frames, n);
	if (b->oom) {
		b->oom = false;
		return -ENOMEM;
	}
	fwrite(b->data, 1, b->len, lp->out.f);
	lp->written++;
	return ferror(lp->out.f) ? -EIO : 0;
}

static void start_sched_tick(struct long_polls *lp, struct sampler_bpf *skel)
{
	skel->bss->lp_tick_ns = lp->tick_ns;
	lp->tick_link = bpf_program__attach(skel->progs.lp_sched_tick);
	if (lp->tick_link) {
		lp->cpu_status = "ticking";
		lp->ticks_follow = "scheduler_tick";
		return;
	}
	fprintf(stderr,
		"dial9-bpf: failed to attach to hrtimer_expire_entry: %s: long polls on the CPU "
		"are off\n",
		strerror(errno));
	lp->cpu_status = "no_tick";
	lp->sched_tick = false;
	lp->no_sched_tick = "attach_failed";
}

void long_polls_start_ticks(struct long_polls *lp, struct sampler_bpf *skel,
			    const struct worker_tls *wt, int pid)
{
	bool context;
	int err;

	if (!lp->min_ns)
		return;
	lp->run_tasks_fd = bpf_map__fd(skel->maps.lp_run_tasks);
	context = !strcmp(wt->status, "resolved") && wt->heap_words;
	if (context) {
		skel->bss->lp_sched_off = wt->tp_offset;
		skel->bss->lp_heap_words = wt->heap_words;
		skel->data->lp_sched_word = (uint32_t)wt->context_word;
	} else {
		fprintf(stderr, "dial9-bpf: long polls on the CPU are off: the workers' scheduler "
				"context was not found at the attach (metadata.json worker_tls)\n");
	}
	/* Without the context the scheduler's tick still follows a current_thread runtime's
	 * worker (which has none): its CPU time is what its yielded tasks' counts are taken over
	 * (lp_thread_worker in bpf/long_polls.bpf.h). Clock events of the tool's own, dear on
	 * VMs, are opened only for long polls. */
	if (lp->sched_tick) {
		start_sched_tick(lp, skel);
	} else if (context) {
		lp->tick_ns = 1000000000ULL / LP_TICK_HZ;
		skel->bss->lp_tick_ns = lp->tick_ns;
		err = clock_events_open(&lp->ticks, skel->progs.lp_tick, lp->tick_ns, pid);
		lp->cpu_status = err ? "no_clock_event" : "ticking";
		lp->ticks_follow = lp->ticks.per_thread ? "threads" : "cpus";
		if (err)
			fprintf(stderr,
				"dial9-bpf: long polls on the CPU are off: no software clock event "
				"could be opened: %s\n",
				strerror(-err));
	}
	if (!context)
		lp->cpu_status = "no_scheduler_context";
}

void long_polls_stop_ticks(struct long_polls *lp)
{
	bpf_link__destroy(lp->tick_link);
	lp->tick_link = NULL;
	clock_events_close(&lp->ticks);
}

int long_polls_finish(struct long_polls *lp)
{
	json_buf_free(&lp->line);
	if (!lp->open)
		return 0;
	lp->open = false;
	return out_file_commit(&lp->out);
}

void long_polls_write_json(FILE *f, const struct long_polls *lp)
{
	fprintf(
	    f,
	    "{\"status\": \"%s\", \"on_cpu\": \"%s\", \"tick_hz\": %.0f, \"ticks_follow\": \"%s\", "
	    "\"scheduler_tick\": \"%s\", "
	    "\"min_ns\": %" PRIu64 ", \"context_tp_offset\": %" PRId64
	    ", \"id_word\": %d, \"id_tagged\": %s, \"observations\": %" PRIu64
	    ", \"learned_at_ns\": %" PRIu64 ", \"written\": %" PRIu64
	    ", \"nested_worker_loops\": %" PRIu64 "}",
	    lp->status, lp->cpu_status ? lp->cpu_status : "off",
	    lp->tick_ns ? 1e9 / (double)lp->tick_ns : 0.0,
	    lp->ticks_follow ? lp->ticks_follow : "none",
	    lp->sched_tick ? "used" : (lp->no_sched_tick ? lp->no_sched_tick : "off"), lp->min_ns,
	    lp->ctx_off, lp->word, lp->tagged ? "true" : "false", lp->observations,
	    lp->learned_at_ns, lp->written, lp->nested_loops);
}
