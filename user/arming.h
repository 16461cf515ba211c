/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Bounds what the per-poll probes cost the target. A uprobe costs its hit whatever the BPF
 * program decides, so the sampling budget alone cannot bound the overhead of probing every
 * poll. Instead the per-poll probes are attached only during randomly placed windows covering
 * a fraction `duty` of each second; duty = budget x target CPU / cost of an armed second, with
 * the cost from probe hits x the measured cost of one hit. Eligible transitions are only those
 * inside windows, and each sample's inclusion probability is duty x p, so estimates stay
 * unbiased: window placement is random (uniform over each slot, wrapping inside the slot), so
 * every instant is covered with probability exactly duty.
 *
 * The budget is a ceiling, not a target: duty is also capped at what the samples need
 * (windows seeing 16 eligible transitions per worker for each sample up to 10 Hz, and
 * max(160, 2 x hz) above, from the last epoch's in-window count, floor 0.05%), so a busy
 * worker, whose budget duty would see thousands of transitions for 10 samples, pays a
 * fraction of the budget.
 *
 * The budget covers probe hits (hits x the calibrated trap cost + the program's measured run
 * time) and the tool's own CPU (an attach and detach per window, reading samples), which a
 * target using every core pays for as much. While a window is open the loader neither wakes
 * up for samples (they are submitted without wakeups) nor reads them: doing so took a core
 * from a worker exactly while transitions were counted, and halved the CPU-bound tasks' count.
 *
 * Inside windows the probes slow a saturated worker (x2-x7 CPU per poll on the demo's 3.5 us
 * polls, depending on the machine's trap cost). The time they take would have gone to the
 * tasks that resumed from a yield, whose resumes come at the rate the worker runs; the
 * probabilities of those samples are corrected by it (collector.c, collector_slowdown), those of
 * tasks woken by timers or other tasks are not. Mix demo at hz 400: timers and channels
 * within 20%, CPU-bound 0.64-0.99 in 10 s runs, 0.90 on a stationary mix (with
 * --overhead-budget 100, probes always attached: within 4%). Known limit: where hits take
 * most of a window (the hot demo, ~90% of it) the factor is a small difference of large
 * numbers, 1% off in the hit's cost moves it by ~13% (metadata: cost_sensitivity_median), and
 * CPU-bound tasks there came out at 1.02-1.75 of their count, median 1.20 (0.48-0.59 at the
 * calibrated cost).
 *
 * A hit is priced at its cost inside the target, measured there: some extra windows leave
 * the park-point probes out and sample nothing ("lean" windows, in each of the first three
 * epochs and then every fourth), and busy time per poll against hits per poll, lean against
 * sampling windows, gives the cost of a hit with the target's caches and its real program
 * (target_hit_cost). On the hot demo it found 6378 ns where probing every poll cost 6329 ns
 * per hit and the calibration on the tool's own function said 5711 ns; before it, the
 * tool's estimate of its own cost was a third low there, and CPU-bound estimates 0.5.
 *
 * Every hit is priced, in the gate or not (attaching, settling, removal), so what a window
 * costs beyond its gate is in the estimate; keeping it small took two things (measured on
 * the hot demo, bench/RESULTS.md): the arming thread runs SCHED_FIFO, or it woke 15-40 ms
 * late to remove the probes of a 3 ms gate; and the most hit probes are removed first, one
 * link after the other (attach.c), or removal took 30-60 ms with every hit waiting on the
 * target's mmap lock. The target then paid ~3x the budget; now it pays about the estimate.
 *
 * Only the probes hit in recent windows are put in and taken out for each window. The others
 * (most of them: ~29 of ~37 on the hot demo) stay in place in a kept link, since each
 * breakpoint written costs a TLB shootdown both ways; their hits between windows are priced
 * like any other, and one whose hits cost more than 2% of the budget leaves the kept link at
 * the next check, 50 ms at most between windows (kept_update, kept_check).
 */
#ifndef D9_ARMING_H
#define D9_ARMING_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include "attach.h"
#include "calibrate.h"
#include "duty.h"

struct sampler_bpf;
struct target;

struct arming_epoch {
	uint64_t epoch;
	double duty;
	uint32_t windows;
	uint64_t gate_ns;    /* time the gate was really open in this epoch's windows */
	double est_overhead; /* (probe CPU + tool CPU) / target's own CPU, this epoch */
	bool by_samples;     /* duty set by what the samples need, not by the budget */
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

	/* Set while per-poll probes are attached for a window (not when always armed): the
	 * loader then leaves the ring buffer alone, since running it would take a core from a
	 * worker exactly while transitions are counted. Written after each window closes. */
	volatile int window_open;
	int notify_fd; /* eventfd, -1 if none */

	/* read by the main thread under lock */
	pthread_mutex_t lock;
	double bpf_run_ns; /* mean run time of the probe program, measured while running */
	/* A hit's cost measured in the target (lean windows), 0 until known. */
	double target_hit_ns;
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
/* Whether a window is open now: the loader should not compete with the target for CPU. */
static inline bool arming_window_open(const struct arming *a)
{
	return a->started && a->window_open;
}

#endif
