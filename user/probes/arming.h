/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Bounds what the per-poll probes cost the target. A uprobe costs its hit whatever the BPF
 * program decides, so the sampling budget alone cannot bound the overhead of probing every
 * poll. Instead the per-poll probes are attached only during randomly placed windows covering
 * a fraction `duty` of each second (planned in duty.c), and each sample's inclusion
 * probability is duty x p: window placement is uniform over each slot, so every instant is
 * covered with probability exactly duty and estimates stay unbiased.
 *
 * This file runs the schedule in a SCHED_FIFO thread (so that it removes probes on time on a
 * target that keeps every core busy): windows, "lean" windows that measure a hit's cost
 * inside the target, and kept probes (rarely hit probes left in place between windows, since
 * every breakpoint written costs a TLB shootdown). docs/design.md, "Armed windows and the cost
 * model", explains each part and why.
 */
#ifndef D9_ARMING_H
#define D9_ARMING_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include "attach.h"
#include "calibrate.h"
#include "dial9_bpf.h"
#include "duty.h"
#include "hit_cost.h"

struct sampler_bpf;
struct target;

struct arming_epoch {
	uint64_t epoch;
	double duty;
	uint32_t windows;
	uint64_t gate_ns;    /* time the gate was really open in this epoch's windows */
	double est_overhead; /* (probe CPU + tool CPU) / target's own CPU, this epoch */
	bool by_samples;     /* duty set by what the samples need, not by the budget */
	/* The worker threads' CPU time while running a worker in this epoch (worker_cpu in
	 * bpf/long_polls.bpf.h); negative when not known. */
	double worker_cpu_ns;
	double runq_gap_ns; /* the windows' floor from the run queues (runq_gap); 0: none */
};

/* A thread, its CPU time as a worker so far, and its scheduler statistics (read_schedstat):
 * time waiting on a run queue and slices of CPU, for runq_gap(). */
struct arming_tid_cpu {
	uint32_t tid;
	uint64_t ns;
	uint64_t wait_ns, slices;
};

/* A thread the attach found running a worker, and its time on a CPU then (schedstat). */
struct arming_first_run {
	uint32_t tid;
	uint64_t key, run_ns;
};

struct arming {
	/* set before arming_start */
	struct sampler_bpf *skel;
	struct target *t;	/* its probes' hit counts and order are updated here */
	uint64_t next_id_addr;	/* Tokio's task id counter in the target; 0: unknown */
	double budget;		/* fraction of the target's CPU, 1.0 = always armed */
	uint32_t per_worker_hz; /* samples wanted per worker per second: duty needs no more */
	struct probe_cost cost;
	uint64_t seed;
	bool verbose; /* each epoch's plan on stderr */

	/* owned by the arming thread */
	pthread_t thread;
	bool started;
	bool realtime; /* the arming thread runs SCHED_FIFO: it wakes on time to disarm */
	volatile int stop;
	struct attachment links;
	/* Every armed probe for this process, not the target (ATTACH_HOLD), for the whole run:
	 * the kernel then keeps its uprobes between windows instead of making and freeing them
	 * in each (a kworker wakeup on the target's cores per probe and window). */
	struct attachment hold;
	/* The kept link: armed probes not hit in recent windows, left in place between windows
	 * (arming.c, kept_update). */
	struct attachment kept;
	uint64_t *kept_hits0;		/* probe_hits of the kept probes at the last check */
	uint64_t kept_check_ns;		/* when they were last checked */
	double kept_max_rate;		/* hits per second the kept probes may take in all */
	struct ring_buffer *kept_alarm; /* wakes the thread when a kept probe is hit */
	bool kept_alarmed;		/* it did, and they were not checked since */
	int wake_fd;			/* eventfd: arming_stop wakes the thread */
	bool continuous;		/* always armed this epoch: the gate stays open */
	uint64_t generation;
	double duty;
	struct duty_state plan; /* what the last epochs cost (duty.c) */
	double own_ns_per_s;	/* the target's own CPU per second, last epoch */
	uint64_t rng;
	int stats_fd; /* keeps the kernel's BPF run-time statistics on */
	uint64_t run_time0, run_cnt0, capture0;
	uint64_t *hits0;       /* probe_hits at the last read, per probe */
	double window_cpu_ns;  /* the tool's CPU to attach and detach for one window */
	double window_wall_ns; /* and the wall time those take */
	double tick_ns;	       /* the kernel's tick: windows are whole ticks (whole_ticks) */
	/* The hit-cost measurement's polls, per kind of window, and the counters (D9_CNT_FULL_*
	 * then D9_CNT_LEAN_*) as of the last window's end. */
	struct hit_cost_sums cost_full, cost_lean;
	uint64_t cost_counters0[6];
	/* The worker_cpu map as read at the last epoch start, and whether that was at an
	 * epoch's start (the first reading is not). */
	struct arming_tid_cpu *cpu_now, *cpu_prev;
	size_t ncpu_prev;
	bool cpu_prev_whole;
	/* Workers with D9_ACTIVE_CPU_NS or more of it in the last epoch (write_shares). */
	uint32_t busy_workers;
	/* The attach's workers (tls_workers) and when their time was read, until the first whole
	 * epoch has its figures (first_shares). */
	struct arming_first_run *first_runs;
	size_t nfirst;
	uint64_t first_at;
	/* The busy workers' median wait on a run queue between two slices of CPU, over the last
	 * epoch (runq_gap); 0 when not known. */
	double runq_gap_ns;
	/* Epochs in a row whose windows found every busy worker (active_workers). */
	uint32_t all_seen;
	/* Epochs in a row the budget went outside the gates, and whether the user was told. */
	uint32_t outside_epochs;
	bool outside_warned;

	/* Set while per-poll probes are attached for a window (not when always armed): the
	 * loader then leaves the ring buffer alone, since running it would take a core from a
	 * worker exactly while transitions are counted. Written after each window closes. */
	volatile int window_open;
	/* What the arming map holds: set_phase() changes the phase alone. */
	struct d9_arming armed;
	int notify_fd; /* eventfd, -1 if none */

	/* read by the main thread under lock */
	pthread_mutex_t lock;
	double bpf_run_ns; /* mean run time of the probe program, measured while running */
	/* A hit's cost measured in the target (lean windows), 0 until known precisely enough to
	 * use; the last measurement and its standard error, used or not. */
	double target_hit_ns;
	double target_hit_measured, target_hit_se;
	uint64_t lean_windows;
	size_t kept_probes;	 /* in the kept link now */
	uint64_t kept_rebuilds;	 /* times the kept link was replaced */
	uint64_t kept_hits;	 /* on kept probes while kept, as of the last check */
	uint64_t kept_evictions; /* kept probes taken out for being hit */
	uint64_t tool_cpu_ns;
	int error; /* negative errno of a failed attach: the run stops */
	uint64_t windows;
	uint64_t armed_ns;
	uint64_t attach_ns;
	uint64_t probe_cpu_ns; /* estimated CPU the probes cost the target */
	uint64_t target_cpu_ns;
	double last_overhead;
	struct arming_epoch *log;
	size_t nlog, caplog;
};

/* The epochs whose windows the budget held shorter than the workers' wait on a run queue
 * (runq_gap in arming.c): a window then finds only the workers whose turn on a CPU falls in
 * it, and each worker's samples a second spread with the epochs that found it. */
struct arming_short {
	uint32_t epochs, of;	   /* short ones, of the epochs in the span */
	double window_ms, wait_ms; /* their medians over the short epochs */
};
/* Over epochs first to last, with a->lock held by the caller. */
void arming_short_windows_locked(const struct arming *a, uint64_t first, uint64_t last,
				 struct arming_short *s);
/* Whether that is a third of the span or more, where the least-sampled worker falls well
 * short of its rate (bench/RESULTS.md, "Windows short of the wait, and the price that made
 * them so"): the run says so (metadata, the exit summary). */
static inline bool arming_short_noted(const struct arming_short *s)
{
	return s->of > 1 && 3 * s->epochs >= s->of;
}

/* The run's running totals: a part of the run (an output folder of --rotate) reports the
 * differences of two readings. */
struct arming_totals {
	uint64_t windows, armed_ns, attach_ns, probe_cpu_ns, target_cpu_ns, tool_cpu_ns;
};

/* Attaches once (checks the probes work) and starts the arming thread. */
int arming_start(struct arming *a);
/* Stops the thread and removes every armed probe. Idempotent. */
void arming_stop(struct arming *a);
void arming_free(struct arming *a);
/* What one probe hit costs the target: as measured inside it (lean windows) once known, until
 * then the trap (calibrated) plus the program's run time. */
double arming_hit_cost_ns(struct arming *a);
/* The same, with a->lock held by the caller. */
double arming_hit_cost_ns_locked(const struct arming *a);
/* A hit dearer than this is a trap through a hypervisor (PVM or nested virtualization; most
 * machines price one under 1.5 us): it takes as long as a short poll, and a window slows the
 * workers enough to change what they do (timers fire late, wakes bunch up), which no weight
 * corrects. The run says so (metadata "slow_traps", the exit summary). */
#define ARMING_SLOW_HIT_NS 3000.0
static inline bool arming_slow_traps(double hit_ns, double budget_pct)
{
	return budget_pct < 100 && hit_ns > ARMING_SLOW_HIT_NS;
}
/* The relative standard error of that price: the in-target measurement's, or CALIB_REL_SE
 * for the calibration. With a->lock held. */
double arming_hit_cost_rel_se_locked(const struct arming *a);
/* Both, as one reading. */
void arming_hit_cost(struct arming *a, double *ns, double *rel_se);
/* What set an epoch's duty: "always" (armed throughout), "samples" (what the samples need) or
 * "budget". */
const char *arming_duty_limit(const struct arming_epoch *e);
/* The totals now; the _locked one with a->lock held by the caller. */
void arming_read_totals(struct arming *a, struct arming_totals *t);
void arming_totals_locked(const struct arming *a, struct arming_totals *t);
/* Forgets the per-epoch log before `epoch` (--rotate: an earlier folder has it), so that a
 * run without end keeps a bounded log. */
void arming_trim_log(struct arming *a, uint64_t epoch);
/* The worker threads' CPU time while running a worker in epoch, ns; negative when not known
 * (no long polls' scheduler switch, or the epoch not over). */
double arming_worker_cpu(struct arming *a, uint64_t epoch);
/* Whether a window is open now: the loader should not compete with the target for CPU. */
static inline bool arming_window_open(const struct arming *a)
{
	return a->started && a->window_open;
}

#endif
