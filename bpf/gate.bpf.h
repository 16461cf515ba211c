/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The gate: a thread's time inside the armed window, charged at each probe event to busy, idle,
 * CPU wait or captures, and handed to its worker's epoch (d9_gate_time), from which the loader
 * derives the probes' cost and the samples' slowdown correction (docs/design.md, "Armed
 * windows and the cost model"). Also the hit-cost measurement's counters (D9_CNT_FULL_*,
 * D9_CNT_LEAN_*).
 *
 * Part of sampler.bpf.c, included after its maps, struct thread_state and count().
 */
#ifndef D9_GATE_BPF_H
#define D9_GATE_BPF_H

struct task_struct___d9 {
	struct {
		unsigned long long run_delay;
	} sched_info;
} __attribute__((preserve_access_index));

/* Whether the poll now on this thread counts in the hit-cost measurement (D9_CNT_FULL_* and
 * D9_CNT_LEAN_*): one kind of poll in both kinds of window, those resumed from a yield (the
 * probes thin them out in sampling windows more than in lean ones, so a mix of kinds would
 * differ in its own work per poll), and none near a capture (cost_skip). */
static __always_inline bool cost_measured(const struct thread_state *t)
{
	return t->after_yield && !t->cost_skip;
}

static __always_inline bool in_gate(const struct d9_arming *arm, __u64 now)
{
	return now >= arm->window_start && now < arm->window_end;
}

/* Set by the loader once the scheduler's switches are followed (lp_switch attached): then each
 * thread's time on the CPU inside the gate is counted exactly (oncpu_ns). */
__u32 gate_switches = 0;

/* The part of [from, to) inside the sampling gate (none in a lean window). */
static __always_inline __u64 gate_overlap(const struct d9_arming *arm, __u64 from, __u64 to)
{
	__u64 a = from > arm->window_start ? from : arm->window_start;
	__u64 b = to < arm->window_end ? to : arm->window_end;

	return !arm->lean && b > a ? b - a : 0;
}

/* Counts the thread's time on the CPU since on_since into the gate if it ran a worker
 * (runs; block_in_place's blocking work is no worker's, as in worker_cpu), as it leaves the
 * CPU (leaves), or at a probe event or tick (it is on the CPU: the count goes on from now). */
static __always_inline void gate_oncpu(struct thread_state *t, const struct d9_arming *arm,
				       __u64 now, bool leaves, bool runs)
{
	if (!gate_switches)
		return;
	if (t->on_since && runs)
		t->gate.oncpu_ns += gate_overlap(arm, t->on_since, now);
	t->on_since = leaves ? 0 : now;
}

/* A thread of the target leaves the CPU (prev_tid, the current one; prev_runs: running a
 * worker) or gets it (next_tid); 0: not the target's. */
static __always_inline void gate_switch(__u32 prev_tid, bool prev_runs, __u32 next_tid, __u64 now)
{
	__u32 zero = 0;
	struct d9_arming *arm;
	struct thread_state *t;

	/* Most switches of the machine are no target thread's: they leave before any lookup. */
	if (!gate_switches || (!prev_tid && !next_tid))
		return;
	arm = bpf_map_lookup_elem(&arming, &zero);
	if (!arm)
		return;
	if (prev_tid && (t = bpf_map_lookup_elem(&threads, &prev_tid)))
		gate_oncpu(t, arm, now, true, prev_runs);
	if (next_tid && (t = bpf_map_lookup_elem(&threads, &next_tid)))
		t->on_since = now;
}

/* The current thread at a scheduler tick: what it ran since the last count goes to the gate
 * as gate_oncpu says, so that block_in_place's work is left out within a tick. */
static __always_inline void gate_tick(__u32 tid, bool runs, __u64 now)
{
	__u32 zero = 0;
	struct d9_arming *arm = bpf_map_lookup_elem(&arming, &zero);
	struct thread_state *t = bpf_map_lookup_elem(&threads, &tid);

	if (arm && t)
		gate_oncpu(t, arm, now, false, runs);
}

/* Charges the time since the thread's previous probe event, clipped to the gate, to busy or
 * idle, and counts the hit. parks: this event is the worker parking. */
static __always_inline void gate_account(struct thread_state *t, const struct d9_arming *arm,
					 __u64 now, bool parks)
{
	/* Up to date while the thread runs (the kernel adds each wait when it gets a CPU); 0
	 * where the kernel keeps no sched_info, and then no wait is seen. */
	__u64 run_delay =
	    BPF_CORE_READ((struct task_struct___d9 *)bpf_get_current_task(), sched_info.run_delay);
	__u64 waited =
	    t->last_event_ns && run_delay > t->last_run_delay ? run_delay - t->last_run_delay : 0;
	__u64 captured = t->capture_ns;

	/* At a probe the thread runs a worker (or a pool thread's task: no worker's gate). */
	gate_oncpu(t, arm, now, false, true);
	t->capture_ns = 0;
	if (in_gate(arm, now)) {
		__u64 from =
		    t->last_event_ns > arm->window_start ? t->last_event_ns : arm->window_start;
		__u64 span = now - from;

		/* Captures since the last event are not the thread's busy or idle time. They
		 * follow that event at once: if it came before the gate, so did they. */
		if (t->last_event_ns < arm->window_start)
			captured = 0;
		captured = captured < span ? captured : span;
		span -= captured;
		if (!arm->lean)
			t->gate.capture_ns += captured;

		/* A wait may have begun before the gate: at most the span counts. */
		waited = waited < span ? waited : span;
		/* A lean window's time goes to the cost measurement only: its hits per poll
		 * differ from a sampling window's, and so would the slowdown. */
		if (t->parked) {
			/* A parked worker that was woken, or one whose park_timeout(0) (a yield's
			 * deferred wake in Tokio) was preempted, waits for a CPU with work to do:
			 * counted as idle, that wait would absorb the probes' cost in the slowdown
			 * factor, and a worker cycling through yields looks unslowed. */
			if (!arm->lean) {
				t->gate.idle_ns += span - waited;
				t->gate.wait_ns += waited;
			}
		} else {
			if (cost_measured(t))
				count_add(arm->lean ? D9_CNT_LEAN_BUSY_NS : D9_CNT_FULL_BUSY_NS,
					  span - waited);
			if (!arm->lean) {
				t->gate.wait_ns += waited;
				t->gate.busy_ns += span - waited;
				if (t->clock_driven || t->guessed_chain) {
					t->gate.clock_ns += span - waited;
					t->gate.clock_hits++;
				}
			}
		}
		if (!t->parked && cost_measured(t))
			count(arm->lean ? D9_CNT_LEAN_HITS : D9_CNT_FULL_HITS);
		if (!arm->lean)
			t->gate.hits++;
	}
	t->hits_total++;
	t->last_event_ns = now;
	t->last_run_delay = run_delay;
	t->parked = parks;
}

/* Hands a thread's in-gate time over to its worker's epoch. */
static __always_inline void gate_move(struct d9_gate_time *to, struct d9_gate_time *from)
{
	to->hits += from->hits;
	to->busy_ns += from->busy_ns;
	to->idle_ns += from->idle_ns;
	to->clock_ns += from->clock_ns;
	to->clock_hits += from->clock_hits;
	to->wait_ns += from->wait_ns;
	to->capture_ns += from->capture_ns;
	to->woken_cycle_ns += from->woken_cycle_ns;
	to->woken_chain_ns += from->woken_chain_ns;
	to->woken_hits += from->woken_hits;
	to->woken_capture_ns += from->woken_capture_ns;
	to->oncpu_ns += from->oncpu_ns;
	__builtin_memset(from, 0, sizeof(*from));
}

#endif /* D9_GATE_BPF_H */
