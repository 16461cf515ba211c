// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "arming.h"
#include "duty.h"
#include "privs.h"
#include "dial9_bpf.h"
#include "sampler.skel.h"
#include "target.h"
#include "tokio_layout.h"
#include "util_clock.h"
#include "util_proc.h"

#define NSEC 1000000000ULL
/* Each window costs the tool an attach and a detach (~1-1.5 ms of CPU), which a target using
 * every core pays for: at most this share of the budget goes to them. More, shorter windows
 * make each epoch's count steadier. */
#define WINDOW_BUDGET_SHARE 0.25
#define MIN_WINDOW_NS 20000000.0
/* After attaching, before the gate opens (see window()). Every hot probe is hit in it for
 * nothing, so it is short: at 1 ms it was a fifth of a window's hits on the hot demo, and at
 * 0.25 ms neither the estimates nor the threads' off-CPU time in the gate (window_wait_ms)
 * moved (bench/RESULTS.md, "Overhead"). */
#define SETTLE_NS 250000ULL
/* Where traps are slow (ARMING_SLOW_HIT_NS) the attach holds the workers up for longer, and
 * what it held up runs in a burst in the next millisecond or so: gates opened 0.25 ms after
 * the attach counted CPU-bound tasks low in gates of a few ms (the burst is other tasks'
 * work) and a current_thread runtime's wake chains high (bench/RESULTS.md, "A longer settle
 * where traps are slow"). */
#define SETTLE_SLOW_NS 1000000ULL
/* Until the program's run time is measured. */
#define DEFAULT_BPF_RUN_NS 400.0
/* One lean window (park-point probes left out, nothing sampled) in each of the first
 * LEAN_FIRST epochs, then every LEAN_EVERY until LEAN_SETTLED have run, then every
 * LEAN_EVERY_LATE: what a hit costs inside the target (see target_hit_cost). A lean window
 * costs ~60% of a sampling window on the hot demo at 10 Hz (fewer hits, the same attach and
 * detach): every fourth epoch added ~14% to a long run's cost. The measurement pools every
 * lean window's counts, so once a dozen are in, more of them change it little. */
#define LEAN_FIRST 3
#define LEAN_EVERY 4
#define LEAN_SETTLED 12
#define LEAN_EVERY_LATE 16
/* A lean window is no shorter than this, whatever the duty: its count of polls sets how
 * precise the hit's measured cost is, and windows of 1 ms (duty 0.1%) leave a short run with
 * too few lean polls to price a hit. */
#define LEAN_MIN_WINDOW_NS 2000000ULL
/* Polls each kind of window must have seen before the measured cost is used, the least
 * difference in hits per poll that says anything, and the largest standard error relative to
 * the cost at which the measurement replaces the calibration (target_hit_cost). */
#define LEAN_MIN_POLLS 500.0
/* Worker threads read from the worker_cpu map at each epoch's start. */
#define CPU_MAX_THREADS D9_MAX_WORKER_THREADS
/* The least span that gives a worker's CPU time per second (its first figure). */
#define FIRST_SPAN_MIN_NS (NSEC / 10)
#define REBASE_MIN_NS (FIRST_SPAN_MIN_NS + NSEC / 20)
#define COST_MIN_DH 0.3
#define COST_MAX_REL_SE 0.2
/* The least share of a sampling window's poll the extra hits must take, at the calibration's
 * price, for the comparison to price them: whatever else differs between the two kinds of
 * window moves a poll's time by a fraction of a percent, which against hits that are a
 * fraction of a percent of it is as large as the price itself (polls of the mix demo's
 * CPU-bound tasks, ~850 us: bench/RESULTS.md, "Windows short of the wait, and the price that
 * made them so"). */
#define COST_MIN_SHARE 0.05
/* Lean windows are left out where they could not price a hit (lean_unseen): judged on this
 * many polls of the sampling windows, with the calibration's price this many times over, a
 * lean poll's hits taken as this many (its entry's; 0.999 measured on the mix demo). */
#define LEAN_SKIP_MIN_POLLS 50.0
#define LEAN_SKIP_MARGIN 1.5
#define LEAN_KEPT_HITS 0.9
/* Kept probes (kept_update): a probe joins once its recent hits per window fall below
 * KEPT_MAX_HITS (none in the last ~5 windows), and the kept probes' hits between windows may
 * cost KEPT_BUDGET_SHARE of the budget, checked KEPT_CHECK_NS after the first hit and then at
 * most every KEPT_CHECK_NS while they keep being hit (sleep_until); above that, the probes
 * that were hit leave. */
#define KEPT_MAX_HITS 0.05
#define KEPT_BUDGET_SHARE 0.02
#define KEPT_CHECK_NS 50000000ULL

static uint64_t process_cpu_ns(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru))
		return 0;
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * NSEC +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000;
}

static void kept_check(struct arming *a);

/* The kept probes are watched between windows: none of them is in a window now. */
static bool kept_watched(const struct arming *a)
{
	return a->kept.n && !a->window_open && !a->continuous && a->kept_hits0;
}

static int on_kept_alarm(void *ctx, void *data, size_t size)
{
	struct arming *a = ctx;

	(void)data;
	(void)size;
	a->kept_alarmed = true;
	return 0;
}

/*
 * Sleeps until the monotonic time t or until asked to stop; returns false if stopping. Between
 * windows it also checks the kept probes' hits (kept_check): when one of them is hit (the BPF
 * program's kept_alarm wakes this thread), at most every KEPT_CHECK_NS. A thread that woke
 * every 50 ms to look at the counts cost the target more than the counts did: each wakeup of
 * this realtime thread preempts a worker. Without the alarm (its ring buffer could not be
 * made), it looks every KEPT_CHECK_NS.
 */
static bool sleep_until(struct arming *a, uint64_t t)
{
	for (;;) {
		struct pollfd p[2] = {{.fd = a->wake_fd, .events = POLLIN},
				      {.fd = -1, .events = POLLIN}};
		uint64_t now, wake = t;
		struct timespec ts;
		bool watch = kept_watched(a);

		if (a->stop)
			return false;
		if (a->kept_alarm) {
			bool was = a->kept_alarmed;

			ring_buffer__consume(a->kept_alarm);
			now = mono_ns();
			/* The first hit after a quiet spell starts the interval the hits are priced
			 * over: no kept probe was hit since the last check (the alarm was set), and
			 * a check now would see one hit over a long quiet interval. */
			if (watch && a->kept_alarmed && !was &&
			    now > a->kept_check_ns + KEPT_CHECK_NS)
				a->kept_check_ns = now;
			if (!watch) {
				a->skel->bss->kept_alarm_armed = 0;
				a->kept_alarmed = false;
			} else if (!a->kept_alarmed) {
				a->skel->bss->kept_alarm_armed = 1;
				p[1].fd = ring_buffer__epoll_fd(a->kept_alarm);
			} else if (now >= a->kept_check_ns + KEPT_CHECK_NS) {
				kept_check(a);
				a->kept_alarmed = false;
				continue; /* re-arms it */
			} else if (a->kept_check_ns + KEPT_CHECK_NS < wake) {
				wake = a->kept_check_ns + KEPT_CHECK_NS;
			}
		} else {
			kept_check(a);
			now = mono_ns();
			if (watch && t - now > KEPT_CHECK_NS)
				wake = now + KEPT_CHECK_NS;
		}
		now = mono_ns();
		if (now >= t)
			return true;
		if (wake > now) {
			ts.tv_sec = (time_t)((wake - now) / NSEC);
			ts.tv_nsec = (long)((wake - now) % NSEC);
			ppoll(p, 2, &ts, NULL);
		}
	}
}

static double uniform(struct arming *a)
{
	uint64_t x = a->rng;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	a->rng = x;
	return (double)((x * 0x2545f4914f6cdd1dULL) >> 11) * 0x1.0p-53;
}

/*
 * A window's length as a whole number of ticks: w rounded down or up at random, so that its
 * mean stays w (lengths under a tick are left alone). An attach ends just after a tick of the
 * kernel's clock whatever instant it began at (its first uprobe register waits out an RCU
 * grace period, and those end on ticks), so gates open at one phase of the tick. A gate of
 * whole ticks then still covers every phase of the tick alike, each instant with probability
 * exactly duty; one of 5.5 ticks would cover some phases six times in eleven and the others
 * five, and a runtime's millisecond timers, which keep a fixed phase to the tick, would be
 * counted high or low for a whole run.
 */
static uint64_t whole_ticks(struct arming *a, double w)
{
	double n;

	if (!(a->tick_ns > 0) || w < a->tick_ns)
		return (uint64_t)w;
	n = floor(w / a->tick_ns);
	if (uniform(a) < w / a->tick_ns - n)
		n += 1;
	return (uint64_t)(n * a->tick_ns);
}

static uint64_t settle_ns(struct arming *a)
{
	return arming_slow_traps(arming_hit_cost_ns(a), 100.0 * a->budget) ? SETTLE_SLOW_NS
									   : SETTLE_NS;
}

static void put_arming(struct arming *a)
{
	uint32_t zero = 0;

	bpf_map__update_elem(a->skel->maps.arming, &zero, sizeof(zero), &a->armed, sizeof(a->armed),
			     BPF_ANY);
}

static void set_window_kept(struct arming *a, uint64_t start, uint64_t end, double duty,
			    uint64_t armed_since, bool lean, bool kept_only)
{
	struct d9_arming w = {
	    .window_start = start,
	    .window_end = end,
	    .duty = duty >= 1.0 ? D9_PROB_ONE : (uint64_t)(duty * (double)D9_PROB_ONE),
	    .armed_since = armed_since,
	    .generation = a->generation,
	    .lean = lean,
	    .kept_only = kept_only,
	    .phase = end ? D9_PHASE_WINDOW : D9_PHASE_IDLE,
	};
	uint64_t next_id;

	/* Read as the window is armed: tasks with lower ids had their first poll before it. */
	if (a->next_id_addr && duty < 1.0 && !kept_only &&
	    !tokio_next_id_read(a->t->pid, a->next_id_addr, &next_id))
		w.next_task_id = next_id;
	a->armed = w;
	put_arming(a);
}

/* The window's phase alone, for the program's count of hits by phase. */
static void set_phase(struct arming *a, enum d9_arm_phase phase)
{
	a->armed.phase = phase;
	put_arming(a);
}

static void set_window(struct arming *a, uint64_t start, uint64_t end, double duty,
		       uint64_t armed_since, bool lean)
{
	set_window_kept(a, start, end, duty, armed_since, lean, false);
}

static uint64_t counter(struct arming *a, uint32_t idx)
{
	int ncpu = libbpf_num_possible_cpus();
	uint64_t vals[ncpu > 0 ? ncpu : 1], sum = 0;

	if (ncpu <= 0 ||
	    bpf_map__lookup_elem(a->skel->maps.counters, &idx, sizeof(idx), vals, sizeof(vals), 0))
		return 0;
	for (int i = 0; i < ncpu; i++)
		sum += vals[i];
	return sum;
}

static uint64_t target_cpu_ns(int pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut = 0, st = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	p = fgets(buf, sizeof(buf), f);
	fclose(f);
	if (!p || !(p = strrchr(buf, ')')))
		return 0;
	/* Fields after the comm: state is field 3, utime 14, stime 15. */
	if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return 0;
	return (ut + st) * (NSEC / (uint64_t)sysconf(_SC_CLK_TCK));
}

/* Averages of what one arming cycle costs the tool, for the schedule. */
static void note_cycle_cost(struct arming *a, uint64_t cpu, uint64_t wall)
{
	a->window_cpu_ns =
	    a->window_cpu_ns ? 0.8 * a->window_cpu_ns + 0.2 * (double)cpu : (double)cpu;
	a->window_wall_ns =
	    a->window_wall_ns ? 0.8 * a->window_wall_ns + 0.2 * (double)wall : (double)wall;
}

/* Hits on probe i so far (the program counts them by cookie index). */
static uint64_t probe_hits_now(struct arming *a, size_t i)
{
	return __atomic_load_n(&a->skel->bss->probe_hits[i], __ATOMIC_RELAXED);
}

/* One window's hits per probe, from the program's counters (cookie index), ranked (target.c):
 * the hot link is attached last and removed first, most hit offset first (attach.c). */
static void update_probe_order(struct arming *a)
{
	size_t n = a->t->nprobes < D9_MAX_PROBES ? a->t->nprobes : D9_MAX_PROBES;
	uint64_t *delta;

	if (!a->hits0 && !(a->hits0 = calloc(D9_MAX_PROBES, sizeof(*a->hits0))))
		return;
	if (!(delta = calloc(n ? n : 1, sizeof(*delta))))
		return;
	for (size_t i = 0; i < n; i++) {
		uint64_t h = probe_hits_now(a, i);

		delta[i] = h - a->hits0[i];
		a->hits0[i] = h;
	}
	target_rank_probes(a->t, delta, n);
	free(delta);
}

static int arm_group(struct arming *a, enum attach_group g)
{
	uint64_t t0 = mono_ns(), dt;
	int err;

	a->generation++;
	set_phase(a, D9_PHASE_ATTACH);
	err = attach_probes(a->skel, a->t, g, &a->links);
	dt = mono_ns() - t0;
	pthread_mutex_lock(&a->lock);
	a->attach_ns += dt;
	if (err)
		a->error = err;
	pthread_mutex_unlock(&a->lock);
	return err;
}

static int arm(struct arming *a)
{
	return arm_group(a, ATTACH_ARMED);
}

static void disarm(struct arming *a)
{
	/* Close the gate first: hits while the links are torn down must not count. */
	set_window(a, 0, 0, a->duty, 0, false);
	set_phase(a, D9_PHASE_DETACH);
	/* Synchronously: removing probes holds the target's mmap lock for writing, and a trap
	 * on a probe still in place then waits for it. A window opened while an earlier one is
	 * still being torn down sees the target slowed down, and fewer transitions than it
	 * should: estimates would be low. */
	detach_probes(&a->links);
	if (a->kept.n)
		set_window_kept(a, 0, 0, a->duty, 0, false, true);
	else
		set_phase(a, D9_PHASE_IDLE);
}

/* Replaces the kept link by one holding the probes marked kept now. */
static void kept_rebuild(struct arming *a)
{
	uint64_t t0 = mono_ns();
	size_t n = 0;
	int err = 0;

	detach_probes(&a->kept);
	for (size_t i = 0; i < a->t->nprobes; i++)
		n += a->t->probes[i].kept;
	if (n)
		err = attach_probes(a->skel, a->t, ATTACH_KEPT, &a->kept);
	if (err) {
		/* Back to putting every probe in for each window. */
		for (size_t i = 0; i < a->t->nprobes; i++)
			a->t->probes[i].kept = false;
		n = 0;
	}
	set_window_kept(a, 0, 0, a->duty, 0, false, n > 0);
	for (size_t i = 0; i < a->t->nprobes && i < D9_MAX_PROBES && a->kept_hits0; i++)
		a->kept_hits0[i] = probe_hits_now(a, i);
	a->kept_check_ns = mono_ns();
	pthread_mutex_lock(&a->lock);
	a->kept_probes = n;
	a->kept_rebuilds++;
	a->attach_ns += a->kept_check_ns - t0;
	pthread_mutex_unlock(&a->lock);
}

/*
 * Probes not hit in recent windows stay in place between windows: putting in and taking out
 * every armed probe for each window (~30 on the demo, most never hit there) would cost, for
 * each breakpoint written, a TLB shootdown, an IPI to the target's cores, both ways. A kept probe
 * costs only its hits, which are counted and priced like any other. Their poll ends are not taken
 * (d9_arming.kept_only), and a poll entered outside a window is no eligible transition, so
 * nothing sampled depends on them. Worker park probes are never kept: the gate's busy and
 * idle accounting takes a thread's first span in a window as idle after one. Runs between
 * windows, with a ranking from measured hits only.
 */
static void kept_update(struct arming *a)
{
	bool change = false;

	if (!a->t->ranked || a->continuous)
		return;
	if (!a->kept_hits0 && !(a->kept_hits0 = calloc(D9_MAX_PROBES, sizeof(*a->kept_hits0))))
		return;
	for (size_t i = 0; i < a->t->nprobes && i < D9_MAX_PROBES; i++) {
		struct probe_spec *p = &a->t->probes[i];
		bool want =
		    p->kind == PROBE_POLL || p->kind == PROBE_DEALLOC || p->kind == PROBE_PARK;

		if (want && !p->kept && p->hits < KEPT_MAX_HITS) {
			p->kept = true;
			change = true;
		}
	}
	if (change)
		kept_rebuild(a);
}

/* Between windows: the kept probes that were hit leave the kept link if their hits cost more
 * than the share of the budget they may take. */
static void kept_check(struct arming *a)
{
	uint64_t now = mono_ns(), total = 0, hits[D9_MAX_PROBES];
	size_t n = a->t->nprobes < D9_MAX_PROBES ? a->t->nprobes : D9_MAX_PROBES;
	bool evict;

	if (!kept_watched(a) || now < a->kept_check_ns + KEPT_CHECK_NS)
		return;
	for (size_t i = 0; i < n; i++) {
		hits[i] = probe_hits_now(a, i);
		if (a->t->probes[i].kept)
			total += hits[i] - a->kept_hits0[i];
	}
	pthread_mutex_lock(&a->lock);
	a->kept_hits += total;
	pthread_mutex_unlock(&a->lock);
	evict = (double)total > a->kept_max_rate * ((double)(now - a->kept_check_ns) / 1e9);
	for (size_t i = 0; i < n; i++) {
		struct probe_spec *p = &a->t->probes[i];
		uint64_t h = hits[i] - a->kept_hits0[i];

		if (evict && p->kept && h) {
			p->kept = false;
			a->kept_evictions++;
			/* Hot again: it rejoins only once its hits in windows have died down. */
			p->hits = p->hits > (double)h ? p->hits : (double)h;
		}
		a->kept_hits0[i] = hits[i];
	}
	a->kept_check_ns = now;
	if (evict)
		kept_rebuild(a);
}

/*
 * One window: attaches group g, opens the gate settle_ns() later for len ns, and removes the
 * probes when it ends. *cycle_ns gets the wall time of the attach and the detach.
 */
static int window(struct arming *a, enum attach_group g, uint64_t len, double duty,
		  uint64_t *cycle_ns)
{
	uint64_t t0 = mono_ns(), since, settle = settle_ns(a);

	a->window_open = 1;
	if (arm_group(a, g)) {
		a->window_open = 0;
		return a->error;
	}
	/* Installing breakpoints rewrites the target's text pages under its mmap lock, and
	 * threads that faulted meanwhile wait for it: let them catch up before the gate opens,
	 * or windows see the target slowed (with one link per group, the attach is over when
	 * link_create returns). The gate opens by itself at its start time: waking up to open it
	 * would take a core from a worker just as the window begins. */
	since = mono_ns();
	set_window(a, since + settle, since + settle + len, duty, since, g == ATTACH_ARMED_LEAN);
	sleep_until(a, since + settle + len);
	/* CLOCK_MONOTONIC, as a target's own clock: a target counting its work can tell what
	 * the windows saw from what it did (tools/window-truth.py). */
	if (a->verbose)
		fprintf(stderr,
			"dial9-bpf: window: %s, attach from %" PRIu64 ", gate %" PRIu64 "-%" PRIu64
			" ns\n",
			g == ATTACH_ARMED_LEAN ? "lean" : "sampling", t0,
			(uint64_t)(since + settle), (uint64_t)(since + settle + len));
	t0 = mono_ns() - (since - t0); /* the attach's wall time, plus the detach's below */
	disarm(a);
	a->window_open = 0;
	*cycle_ns = mono_ns() - t0;
	return 0;
}

static void target_hit_cost(struct arming *a, bool lean);

/* One second of the schedule: up to DUTY_MAX_WINDOWS slots, one window each at a uniform
 * offset, wrapping around the slot's end, so that every instant has coverage exactly duty.
 * In the run's first, partial epoch (first_at, now) one window of the same length opens at
 * once instead, cut at the epoch's end so that the next epoch's coverage stays duty. */
static int run_windows(struct arming *a, uint64_t epoch_start, double duty, uint64_t k,
		       uint64_t first_at, uint32_t *nwin, uint64_t *armed)
{
	struct {
		uint64_t a, b;
	} pieces[2 * DUTY_MAX_WINDOWS];
	size_t n = 0;
	uint64_t slot, w;

	slot = NSEC / k;
	w = whole_ticks(a, duty * (double)slot);
	duty = (double)w / (double)slot; /* each instant's coverage, for the weights */
	if (first_at && first_at < epoch_start + NSEC) {
		pieces[n].a = first_at;
		pieces[n++].b =
		    first_at + w < epoch_start + NSEC ? first_at + w : epoch_start + NSEC;
	}
	for (uint64_t i = 0; i < k && !first_at; i++) {
		uint64_t s0 = epoch_start + i * slot, u = (uint64_t)(uniform(a) * (double)slot);

		if (u + w <= slot) {
			pieces[n].a = s0 + u;
			pieces[n++].b = s0 + u + w;
		} else {
			pieces[n].a = s0;
			pieces[n++].b = s0 + u + w - slot;
			pieces[n].a = s0 + u;
			pieces[n++].b = s0 + slot;
		}
	}
	/* Time order; merge pieces that touch so they are one arming. */
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && pieces[j].a < pieces[j - 1].a; j--) {
			uint64_t ta = pieces[j].a, tb = pieces[j].b;

			pieces[j] = pieces[j - 1];
			pieces[j - 1].a = ta;
			pieces[j - 1].b = tb;
		}
	for (size_t i = 0; i < n; i++) {
		uint64_t start = pieces[i].a, end = pieces[i].b, cpu0, cycle;

		while (i + 1 < n && pieces[i + 1].a <= end)
			end = pieces[++i].b > end ? pieces[i].b : end;
		/* Attach at the planned start and open the gate when attached, for the planned
		 * length: the window moves by the attach latency, which does not depend on what
		 * the target does, so every instant keeps coverage probability duty. Attaching
		 * ahead instead would keep the probes in place, and paid for, before the gate. */
		if (!sleep_until(a, start))
			return 0;
		cpu0 = thread_cpu_ns();
		if (window(a, ATTACH_ARMED, end - start, duty, &cycle))
			return a->error;
		(*nwin)++;
		update_probe_order(a);
		kept_update(a);
		/* Sampling windows add polls to the measurement too: at high rates few are
		 * away from captures, and the count may reach its minimum between lean ones. */
		target_hit_cost(a, false);
		note_cycle_cost(a, thread_cpu_ns() - cpu0, cycle);
		if (a->notify_fd >= 0)
			eventfd_write(a->notify_fd, 1);
		*armed += end - start;
		if (a->stop)
			return 0;
	}
	return 0;
}

/* A hit's price as the calibration and the programs' run time give it; a->lock held. */
static double calibrated_hit_ns_locked(const struct arming *a)
{
	return a->cost.entry_ns + a->bpf_run_ns;
}

double arming_hit_cost_ns_locked(const struct arming *a)
{
	return a->target_hit_ns > 0 ? a->target_hit_ns : calibrated_hit_ns_locked(a);
}

/* How far the calibration may be from a hit's price in the target, as a relative standard
 * error: in-target prices have come out at 1.0-1.5 times it (bench/RESULTS.md, "A hit's price
 * far above the calibration is not used" and "On a VM whose probe hits cost 5-8 us"). It
 * reads low more often than high, so this is an allowance for a bias as much as for noise. */
#define CALIB_REL_SE 0.25

double arming_hit_cost_rel_se_locked(const struct arming *a)
{
	return a->target_hit_ns > 0 ? a->target_hit_se / a->target_hit_ns : CALIB_REL_SE;
}

void arming_hit_cost(struct arming *a, double *ns, double *rel_se)
{
	pthread_mutex_lock(&a->lock);
	*ns = arming_hit_cost_ns_locked(a);
	*rel_se = arming_hit_cost_rel_se_locked(a);
	pthread_mutex_unlock(&a->lock);
}

double arming_hit_cost_ns(struct arming *a)
{
	double c, rel_se;

	arming_hit_cost(a, &c, &rel_se);
	return c;
}

const char *arming_duty_limit(const struct arming_epoch *e)
{
	return e->duty >= 1.0 ? "always" : e->by_samples ? "samples" : "budget";
}

/* A window this much shorter than the wait counts as short: one a few percent short still
 * finds most workers, and the wait itself is a median over the last epoch. */
#define SHORT_WINDOW_SHARE 0.9

static int by_value(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return a < b ? -1 : a > b;
}

/* Sorts v. */
static double median_of(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), by_value);
	return n ? v[n / 2] : 0;
}

void arming_short_windows_locked(const struct arming *a, uint64_t first, uint64_t last,
				 struct arming_short *s)
{
	double *win = calloc(a->nlog + 1, sizeof(*win)), *wait = calloc(a->nlog + 1, sizeof(*wait));

	*s = (struct arming_short){0};
	for (size_t i = 0; win && wait && i < a->nlog; i++) {
		const struct arming_epoch *e = &a->log[i];
		double w = e->windows ? (double)e->gate_ns / e->windows : 0;

		if (e->epoch < first || e->epoch > last)
			continue;
		s->of++;
		if (e->duty >= 1.0 || e->by_samples || e->runq_gap_ns <= MIN_WINDOW_NS ||
		    w >= SHORT_WINDOW_SHARE * e->runq_gap_ns)
			continue;
		win[s->epochs] = w / 1e6;
		wait[s->epochs++] = e->runq_gap_ns / 1e6;
	}
	s->window_ms = win ? median_of(win, s->epochs) : 0;
	s->wait_ms = wait ? median_of(wait, s->epochs) : 0;
	free(win);
	free(wait);
}

void arming_totals_locked(const struct arming *a, struct arming_totals *t)
{
	*t = (struct arming_totals){a->windows,	     a->armed_ns,      a->attach_ns,
				    a->probe_cpu_ns, a->target_cpu_ns, a->tool_cpu_ns};
}

void arming_read_totals(struct arming *a, struct arming_totals *t)
{
	pthread_mutex_lock(&a->lock);
	arming_totals_locked(a, t);
	pthread_mutex_unlock(&a->lock);
}

void arming_trim_log(struct arming *a, uint64_t epoch)
{
	size_t k = 0;

	pthread_mutex_lock(&a->lock);
	for (size_t i = 0; i < a->nlog; i++)
		if (a->log[i].epoch >= epoch)
			a->log[k++] = a->log[i];
	a->nlog = k;
	pthread_mutex_unlock(&a->lock);
}

/*
 * What a hit costs inside the target, from all windows so far: busy time per poll is
 * b = u + h x c in a sampling window and in a lean one alike (u, the target's own work per poll;
 * h, hits per poll), and a lean window differs only by leaving out the park-point probes, so
 * c = (b_full - b_lean) / (h_full - h_lean) (hit_cost.c, with its standard error over the
 * windows). u is the same in both only for polls of one kind: the program counts polls of
 * tasks resumed from a yield (with every kind, the probes thin out the long polls more in
 * sampling windows than in lean ones, which reads low), and leaves out those near a capture (a
 * capture's cache footprint reads high). Unlike the calibration on the tool's own function,
 * this includes what the trap costs amid the target's work (its caches, the real program) and
 * what the target's code then runs slower, and the CPU-bound correction is that sensitive. But
 * a hit is a few percent of a poll of tens of us, and a few lean windows that met a burst of
 * timers or a preemption move the difference by as much as the hit: the measurement replaces
 * the calibration only once its standard error is within COST_MAX_REL_SE of it.
 */
/* The hit-cost counters' growth since the last call: a window's, as the gate counts only
 * inside windows (or an always-armed stretch's, which the caller drops). */
static void cost_deltas(struct arming *a, double d[6])
{
	static const enum d9_counter ids[6] = {D9_CNT_FULL_POLLS,   D9_CNT_FULL_BUSY_NS,
					       D9_CNT_FULL_HITS,    D9_CNT_LEAN_POLLS,
					       D9_CNT_LEAN_BUSY_NS, D9_CNT_LEAN_HITS};

	for (size_t i = 0; i < 6; i++) {
		uint64_t v = counter(a, ids[i]);

		d[i] = (double)(v - a->cost_counters0[i]);
		a->cost_counters0[i] = v;
	}
}

/* Whether extra_hits a poll at calib ns each are a large enough part of a sampling window's
 * poll (COST_MIN_SHARE) for the two kinds of window to price them. */
static bool hits_seen(const struct hit_cost_sums *full, double calib, double extra_hits)
{
	return calib * extra_hits >= COST_MIN_SHARE * full->busy / full->polls;
}

static void target_hit_cost(struct arming *a, bool lean)
{
	double d[6], c, se, calib, dh;
	bool seen;

	cost_deltas(a, d);
	if (lean)
		hit_cost_add(&a->cost_lean, d[3], d[4], d[5]);
	else
		hit_cost_add(&a->cost_full, d[0], d[1], d[2]);
	c = hit_cost_measure(&a->cost_full, &a->cost_lean, LEAN_MIN_POLLS, COST_MIN_DH, &se);
	if (c == 0)
		return;
	if (a->verbose)
		fprintf(stderr,
			"dial9-bpf: hit cost in the target: %.0f sampling and %.0f lean windows, "
			"%.0f and %.0f polls: %.0f +- %.0f ns a hit\n",
			a->cost_full.n, a->cost_lean.n, a->cost_full.polls, a->cost_lean.polls, c,
			se);
	pthread_mutex_lock(&a->lock);
	calib = calibrated_hit_ns_locked(a);
	a->target_hit_measured = c;
	a->target_hit_se = se;
	/* Far from the calibration: the two kinds of window saw different work, or a few lean
	 * windows gave a standard error, itself from those few, that reads small; keep it. In
	 * the target a hit costs at most about one and a half calibrations (bench/RESULTS.md).
	 * Nor where the hits are too small a part of a poll to be seen (COST_MIN_SHARE). */
	dh = hit_cost_extra_hits(&a->cost_full, &a->cost_lean);
	seen = hits_seen(&a->cost_full, calib, dh);
	a->target_hit_ns =
	    seen && c > 0.5 * calib && c < 2 * calib && se <= COST_MAX_REL_SE * c ? c : 0;
	pthread_mutex_unlock(&a->lock);
}

/* Whether the sampling windows already show that lean ones could not price a hit (the
 * visibility test of target_hit_cost, COST_MIN_SHARE): a lean window's polls keep their own
 * entry's hit, so the extra hits it leaves out are at most a sampling window's hits per poll
 * less LEAN_KEPT_HITS, and even those, at LEAN_SKIP_MARGIN times the calibration's price,
 * are too small a part of a poll (the mix demo's polls of tens of us and more, against ~1
 * extra hit of ~1 us). Each lean window would then cost an attach and a detach for nothing,
 * out of the budget that pays for the sampling windows (bench/RESULTS.md, "No lean windows
 * where they cannot price a hit"). cost_full is this thread's. */
static bool lean_unseen(struct arming *a)
{
	double calib, extra;

	if (a->cost_full.polls < LEAN_SKIP_MIN_POLLS)
		return false;
	pthread_mutex_lock(&a->lock);
	calib = calibrated_hit_ns_locked(a);
	pthread_mutex_unlock(&a->lock);
	extra = a->cost_full.hits / a->cost_full.polls - LEAN_KEPT_HITS;
	return !hits_seen(&a->cost_full, LEAN_SKIP_MARGIN * calib, extra);
}

static bool lean_due(struct arming *a, uint64_t nepochs)
{
	/* lean_windows is written by this thread only: no lock needed to read it here. */
	uint64_t every = a->lean_windows < LEAN_SETTLED ? LEAN_EVERY : LEAN_EVERY_LATE;

	return (nepochs < LEAN_FIRST || nepochs % every == 0) && !lean_unseen(a);
}

/* One lean window of the sampling windows' length (LEAN_MIN_WINDOW_NS at least) at a random
 * time in what is left of the epoch, if it fits: it covers no sampling, so its place does not
 * matter to estimates. */
static int run_lean_window(struct arming *a, uint64_t epoch, uint64_t w)
{
	uint64_t now = mono_ns(), end = (epoch + 1) * NSEC, start, cycle, need;

	if (w && w < LEAN_MIN_WINDOW_NS)
		w = LEAN_MIN_WINDOW_NS;
	need = w + settle_ns(a) + (uint64_t)a->window_wall_ns + 20000000ULL;
	if (!w || now + need >= end)
		return 0;
	start = now + (uint64_t)(uniform(a) * (double)(end - need - now));
	if (!sleep_until(a, start))
		return 0;
	if (window(a, ATTACH_ARMED_LEAN, w, a->duty, &cycle))
		return a->error;
	pthread_mutex_lock(&a->lock);
	a->lean_windows++;
	pthread_mutex_unlock(&a->lock);
	target_hit_cost(a, true);
	return 0;
}

/* Run count and time of the armed probes' programs: the entry program and, where park points
 * use sessions, the session program (their hits are hits like the others). */
static int probe_prog_stats(struct arming *a, struct bpf_prog_info *sum)
{
	struct bpf_program *progs[] = {a->skel->progs.probe_entry, a->skel->progs.park_session};

	for (size_t i = 0; i < sizeof(progs) / sizeof(progs[0]); i++) {
		struct bpf_prog_info info = {};
		uint32_t len = sizeof(info);
		int fd = bpf_program__fd(progs[i]);

		if (fd < 0)
			continue; /* not loaded: no sessions on this kernel */
		if (bpf_obj_get_info_by_fd(fd, &info, &len))
			return -1;
		sum->run_cnt += info.run_cnt;
		sum->run_time_ns += info.run_time_ns;
	}
	return 0;
}

/* The probe programs' mean run time since the last call, from the kernel's statistics: the
 * calibration's counting program is nearly free, the real one is not (~0.4 us). */
static void update_bpf_run_ns(struct arming *a)
{
	struct bpf_prog_info info = {};

	if (a->stats_fd < 0 || probe_prog_stats(a, &info))
		return;
	if (info.run_cnt >= a->run_cnt0 + 1000) {
		/* Captures are priced per sample (probe_cpu), not spread over the hits. */
		uint64_t cap = counter(a, D9_CNT_CAPTURE_NS), run = info.run_time_ns - a->run_time0;
		uint64_t dcap = cap >= a->capture0 ? cap - a->capture0 : 0;
		double ns;

		run -= dcap < run ? dcap : run;
		ns = (double)run / (double)(info.run_cnt - a->run_cnt0);
		a->capture0 = cap;

		pthread_mutex_lock(&a->lock);
		a->bpf_run_ns = ns;
		pthread_mutex_unlock(&a->lock);
		a->run_time0 = info.run_time_ns;
		a->run_cnt0 = info.run_cnt;
	}
}

/* CPU the probes cost the target: hits (polls, park points, deallocs) x one hit's cost, and
 * the stack captures as the program measured them. */
static double probe_cpu(struct arming *a, uint64_t dhits, uint64_t dxol, uint64_t dcapture)
{
	double xol = (double)(dxol < dhits ? dxol : dhits);

	return ((double)dhits - xol) * arming_hit_cost_ns(a) +
	       xol * (a->cost.xol_ns + a->bpf_run_ns) + (double)dcapture;
}

/* Workers that made an eligible transition in the last two epochs, or had CPU time in the
 * last one where that is followed (a window of a few ms misses most of them when there are
 * more workers than CPUs); and, for the sampler to start a worker it has not seen yet from
 * (worker_seed in sampler.bpf.c), the mean rates of those with one. Turns the sampler's carry
 * off when the last epoch's windows missed a busy worker, and on again after two epochs that
 * found every one (owed_add). */
static uint32_t active_workers(struct arming *a, uint64_t epoch)
{
	int fd = bpf_map__fd(a->skel->maps.workers);
	uint64_t key, next, *prev = NULL;
	struct d9_worker_state ws;
	uint32_t n = 0, nrated = 0, ncpu = 0, ncal = 0, seen = 0, busy;
	double rates = 0, cnt = 0, cpu = 0, ccnt = 0, ccpu = 0;

	while (!bpf_map_get_next_key(fd, prev, &next)) {
		key = next;
		prev = &key;
		if (bpf_map_lookup_elem(fd, &key, &ws) || ws.epoch + 2 < epoch)
			continue;
		n++;
		seen += ws.epoch + 1 >= epoch;
		if (ws.rate && !ws.calibrating) {
			rates += (double)ws.rate;
			nrated++;
		}
		if (ws.cpu_sm && ws.cpu_n) {
			cnt += (double)ws.cnt_sm;
			cpu += (double)ws.cpu_sm;
			ncpu++;
		} else if (ws.calibrating && ws.gate.oncpu_ns && !nrated) {
			/* The run's first epoch: what the calibrating workers' windows saw. */
			ccnt += (double)(ws.eligible << 8);
			ccpu += (double)ws.gate.oncpu_ns;
			ncal++;
		}
	}
	if (!ncpu && ncal) {
		cnt = ccnt;
		cpu = ccpu;
		ncpu = ncal;
	}
	if (nrated)
		a->skel->bss->seed_rate = (uint64_t)(rates / nrated);
	if (ncpu) {
		a->skel->bss->seed_cnt_sm = (uint64_t)(cnt / ncpu);
		a->skel->bss->seed_cpu_sm = (uint64_t)(cpu / ncpu);
	}
	busy = n > a->busy_workers ? n : a->busy_workers;
	a->all_seen = seen >= busy ? a->all_seen + 1 : 0;
	a->skel->bss->carry_on = a->all_seen >= 2;
	return busy;
}

static void log_epoch(struct arming *a, uint64_t epoch, uint32_t nwin, uint64_t gate_ns,
		      double overhead, bool by_samples)
{
	if (a->nlog == a->caplog) {
		size_t ncap = a->caplog ? a->caplog * 2 : 64;
		void *np = realloc(a->log, ncap * sizeof(*a->log));

		if (!np)
			return;
		a->log = np;
		a->caplog = ncap;
	}
	a->log[a->nlog++] = (struct arming_epoch){.epoch = epoch,
						  .duty = a->duty,
						  .windows = nwin,
						  .gate_ns = gate_ns,
						  .est_overhead = overhead,
						  .by_samples = by_samples,
						  .worker_cpu_ns = -1,
						  .runq_gap_ns = a->runq_gap_ns};
}

/* The counters at the start of an epoch: the next one's figures are differences from them.
 * side: run time of the programs that do not hang on the probes (long polls' clock tick and
 * scheduler switch), from the kernel's BPF statistics. */
struct reading {
	uint64_t at, hits, gate_hits, xol, elig, capture, cpu, tool, side;
};

static uint64_t prog_run_ns(const struct bpf_program *p)
{
	struct bpf_prog_info info = {};
	uint32_t len = sizeof(info);
	int fd = bpf_program__fd(p);

	if (fd < 0 || bpf_obj_get_info_by_fd(fd, &info, &len))
		return 0;
	return info.run_time_ns;
}

static void read_counters(struct arming *a, struct reading *r)
{
	r->at = mono_ns();
	r->hits = counter(a, D9_CNT_HITS);
	r->gate_hits = counter(a, D9_CNT_GATE_HITS);
	r->xol = counter(a, D9_CNT_HITS_XOL);
	r->elig = counter(a, D9_CNT_ELIGIBLE);
	r->capture = counter(a, D9_CNT_CAPTURE_NS);
	r->cpu = target_cpu_ns(a->t->pid);
	r->tool = process_cpu_ns();
	r->side = prog_run_ns(a->skel->progs.lp_tick) + prog_run_ns(a->skel->progs.lp_sched_tick) +
		  prog_run_ns(a->skel->progs.lp_switch) + prog_run_ns(a->skel->progs.cpu_tick);
}

static struct duty_limits duty_limits_of(struct arming *a)
{
	return (struct duty_limits){
	    .budget = a->budget,
	    .window_cpu_ns = a->window_cpu_ns,
	    .window_wall_ns = a->window_wall_ns,
	    .settle_ns = (double)settle_ns(a),
	    .min_window_ns = fmax(MIN_WINDOW_NS, a->runq_gap_ns),
	    .window_share = WINDOW_BUDGET_SHARE,
	};
}

/* Epochs in a row the tool spends the budget outside the gates before the user hears of it:
 * the first epochs' tool CPU includes its start-up. */
#define OUTSIDE_GATES_EPOCHS 3

/*
 * Where the target's threads switch often (dozens of mostly idle workers parking and waking),
 * the scheduler-switch program and the tool's own work can cost the whole budget before any
 * window opens: the windows then stay at their floor, and the workers get a fraction of the
 * samples asked for. Said once, with the two ways out.
 */
static void warn_outside_gates(struct arming *a)
{
	double share = duty_outside_gates(&a->plan);

	a->outside_epochs = share >= a->budget ? a->outside_epochs + 1 : 0;
	if (a->outside_epochs != OUTSIDE_GATES_EPOCHS || a->outside_warned)
		return;
	a->outside_warned = true;
	fprintf(stderr,
		"dial9-bpf: warning: outside its sampling windows the tool costs %.2f%% of the "
		"target's CPU (scheduler-switch programs and its own work), over the %.2g%% "
		"budget: windows stay at their floor and workers get fewer samples than asked; "
		"raise --overhead-budget, or set --long-poll-ms 0 to stop the switch programs\n",
		100 * share, 100 * a->budget);
}

/*
 * Prices the time from r0 to r1 (the last epoch: armed_ns in nwin windows), folds it into the
 * plan and sets a->duty for the next: the budget's duty, or less when the samples need less.
 */
static void plan_epoch(struct arming *a, const struct reading *r0, const struct reading *r1,
		       uint64_t armed_ns, uint32_t nwin, uint64_t epoch, bool *by_samples)
{
	uint64_t hits = r1->hits - r0->hits, gated = r1->gate_hits - r0->gate_hits;
	double capture = r1->capture >= r0->capture ? (double)(r1->capture - r0->capture) : 0;
	double side = r1->side >= r0->side ? (double)(r1->side - r0->side) : 0;
	double probe_ns = probe_cpu(a, hits, r1->xol - r0->xol, (uint64_t)capture) + side;
	double in_gate = hits ? (probe_ns - side - capture) * (double)gated / (double)hits : 0;
	double tool_ns = (double)(r1->tool - r0->tool), own_ns, duty, need, own_s;
	struct duty_limits l = duty_limits_of(a);
	struct duty_epoch e = {
	    .wall_ns = (double)(r1->at - r0->at),
	    .armed_ns = (double)armed_ns,
	    .probe_ns = in_gate + capture,
	    .fixed_ns = probe_ns - side - in_gate - capture,
	    .hits = gated,
	    .tool_other_ns = tool_ns - nwin * a->window_cpu_ns,
	    .windows_ns = nwin * a->window_cpu_ns,
	};

	own_ns = (double)(r1->cpu - r0->cpu) - probe_ns;
	e.own_ns = own_ns > 0 ? own_ns : 0;
	/* The first epoch's tool CPU includes the run's start-up, done once; its window put in
	 * every armed probe (none is kept yet), and the hits on those put in first while the rest
	 * went in say little of later windows. */
	if (!a->plan.seeded)
		e.startup_ns = fmax(0.0, e.tool_other_ns) + e.fixed_ns;
	if (e.tool_other_ns < 0 || !a->plan.seeded)
		e.tool_other_ns = 0;
	if (!a->plan.seeded)
		e.fixed_ns = 0;
	/* Long polls' programs cost every second, windows or not, as the tool's own CPU does. */
	e.tool_other_ns += side;
	/* Nothing armed yet (the thread's first pass): nothing to price. */
	if (armed_ns || e.wall_ns > (double)NSEC / 2)
		duty_observe(&a->plan, &e, a->budget);
	duty = duty_for_budget(&a->plan, &l, a->duty);
	if (a->verbose)
		fprintf(
		    stderr,
		    "dial9-bpf: epoch %" PRIu64 ": %.0f ms, armed %.1f ms, gate hits %" PRIu64
		    " (%.2f ms), other hits %.2f ms, own %.0f ms, tool %.2f ms (switch and tick "
		    "programs %.2f ms), debt %.2f ms: duty %.4f\n",
		    epoch - 1, e.wall_ns / 1e6, e.armed_ns / 1e6, e.hits, e.probe_ns / 1e6,
		    e.fixed_ns / 1e6, e.own_ns / 1e6, e.tool_other_ns / 1e6, side / 1e6,
		    a->plan.debt / 1e6, duty);
	warn_outside_gates(a);
	need = duty_for_samples(a->per_worker_hz, r1->elig - r0->elig, active_workers(a, epoch),
				(double)armed_ns);
	/* Not on the first window alone: it found only the workers on a CPU during its few ms,
	 * and where workers outnumber the CPUs their count, taken as all there are, made the
	 * transitions a worker makes look many times as many and cut the first whole epoch's
	 * window to a length that finds a third of them. */
	if (a->plan.epochs_seen <= 1)
		need = HUGE_VAL;
	*by_samples = need < duty;
	a->duty = duty_clamp(*by_samples ? need : duty, a->budget);
	own_s = e.wall_ns > 0 ? e.own_ns / (e.wall_ns / (double)NSEC) : 0;
	a->own_ns_per_s = own_s > 1e6 ? own_s : 1e6;
	a->kept_max_rate = KEPT_BUDGET_SHARE * a->budget * a->own_ns_per_s / arming_hit_cost_ns(a);

	pthread_mutex_lock(&a->lock);
	a->probe_cpu_ns += (uint64_t)probe_ns;
	a->target_cpu_ns += r1->cpu - r0->cpu;
	a->tool_cpu_ns += r1->tool - r0->tool;
	/* An idle target: a millisecond of CPU per second as the reference. */
	a->last_overhead = (probe_ns + tool_ns) / (own_ns > 1e6 ? own_ns : 1e6);
	if (a->nlog)
		a->log[a->nlog - 1].est_overhead = a->last_overhead;
	pthread_mutex_unlock(&a->lock);
}

/* An epoch always armed: the probes go in once and stay. Returns the armed time. */
static int continuous_epoch(struct arming *a, uint64_t now, uint32_t *nwin, uint64_t *armed)
{
	if (!a->continuous) {
		if (arm(a))
			return a->error;
		set_window(a, mono_ns(), UINT64_MAX, 1.0, mono_ns(), false);
		a->continuous = true;
		*nwin = 1;
	}
	*armed = (now / NSEC + 1) * NSEC - now;
	return 0;
}

/* An epoch of windows, and a lean one when due. */
static int windowed_epoch(struct arming *a, uint64_t epoch, uint64_t nepochs, uint32_t *nwin,
			  uint64_t *armed)
{
	struct duty_limits l = duty_limits_of(a);
	uint64_t k;

	if (a->continuous) {
		double d[6];

		disarm(a);
		a->continuous = false;
		/* Seconds always armed are no window: a unit of their own, they would outweigh
		 * every window in the hit cost's measurement. */
		cost_deltas(a, d);
	}
	k = duty_windows(&l, a->duty, a->own_ns_per_s);
	/* The first window opens at once: the workers, the task-id word that long polls and
	 * on-CPU samples wait for, and the first costs are all learned in it. Every worker's
	 * first epoch calibrates and is left out of the estimates, so where its window falls
	 * biases nothing. */
	if (run_windows(a, epoch * NSEC, a->duty, k, nepochs ? 0 : mono_ns(), nwin, armed))
		return a->error;
	/* The lean window measures a hit's price, not the workers: as long as a sampling window
	 * would be without the run queues' gap, which would make it cost as much as the epoch's
	 * whole sampling. */
	l.min_window_ns = MIN_WINDOW_NS;
	k = duty_windows(&l, a->duty, a->own_ns_per_s);
	if (lean_due(a, nepochs) &&
	    run_lean_window(a, epoch, (uint64_t)(a->duty * (double)NSEC / (double)k)))
		return a->error;
	return 0;
}

/* The worker_cpu map: each followed thread's CPU time as a worker (the part since its last
 * switch or tick goes to the next reading). */
static int read_worker_cpu(struct arming *a, struct arming_tid_cpu *out, size_t max)
{
	int fd = bpf_map__fd(a->skel->maps.worker_cpu);
	uint32_t key, next, *prev = NULL;
	size_t n = 0;

	if (fd < 0)
		return -1;
	while (n < max && !bpf_map_get_next_key(fd, prev, &next)) {
		struct d9_core_time v;

		if (!bpf_map_lookup_elem(fd, &next, &v)) {
			out[n].tid = next;
			out[n++].ns = v.ns;
		}
		key = next;
		prev = &key;
	}
	return (int)n;
}

/* The next worker of the map worker_ns after *key (the first one: from the start), with its
 * totals; entries evicted between the two calls are skipped. */
static bool worker_ns_next(int fd, bool first, uint64_t *key, struct d9_worker_ns *v)
{
	uint64_t next;

	while (fd >= 0 && !bpf_map_get_next_key(fd, first ? NULL : key, &next)) {
		*key = next;
		first = false;
		if (!bpf_map_lookup_elem(fd, key, v))
			return true;
	}
	return false;
}

/* One worker's figure from its total ns at now, against the last one (old) or, for a
 * worker without one, the time it is followed from; false where the span is too short. */
static bool share_of(const struct d9_worker_ns *v, const struct d9_worker_share *old, uint64_t now,
		     uint64_t epoch, struct d9_worker_share *s)
{
	bool evicted = v->ns < old->at_ns, first = !old->at_time || evicted;
	uint64_t since = first ? v->first_ns : old->at_time;
	uint64_t d = evicted ? v->ns : v->ns - old->at_ns;

	if (now < since + FIRST_SPAN_MIN_NS)
		return false;
	*s = (struct d9_worker_share){.epoch = epoch - 1, .at_ns = v->ns, .at_time = now};
	s->cpu_ns = (uint64_t)((double)d * (double)NSEC / (double)(now - since));
	/* Less than an epoch (the run's first, or a worker first followed in it) only stands
	 * in until a whole one's; the next is averaged in by half, then by 1/4. */
	s->whole = now - since >= NSEC - NSEC / 20;
	if (s->whole && old->whole && old->epoch + 2 == epoch) {
		s->cpu_ns = old->whole < 2 ? (old->cpu_ns + s->cpu_ns) / 2
					   : (3 * old->cpu_ns + s->cpu_ns) / 4;
		s->whole = 2;
	}
	return true;
}

/*
 * Each worker's CPU time per second over the epoch that just ended, for the sampler
 * (expected_by_cpu), and how many workers had some. Written before the next epoch's windows
 * open. Averaged over epochs (1/4 to the last): where workers outnumber CPUs their shares
 * change from epoch to epoch, and hz over a share that swings selects more than hz on average
 * (1/x is convex; bench/RESULTS.md).
 */
static uint32_t write_shares(struct arming *a, uint64_t epoch)
{
	int fd = bpf_map__fd(a->skel->maps.worker_ns),
	    sfd = bpf_map__fd(a->skel->maps.worker_share);
	uint64_t key, now = mono_ns();
	struct d9_worker_ns v;
	uint32_t busy = 0;

	for (bool first = true; sfd >= 0 && worker_ns_next(fd, first, &key, &v); first = false) {
		struct d9_worker_share old, s;

		if (bpf_map_lookup_elem(sfd, &key, &old))
			old = (struct d9_worker_share){0};
		if (!share_of(&v, &old, now, epoch, &s))
			continue;
		busy += s.cpu_ns >= D9_ACTIVE_CPU_NS;
		if (bpf_map_update_elem(sfd, &key, &s, BPF_ANY) && a->verbose)
			fprintf(stderr, "dial9-bpf: failed to write a worker's CPU time: %s\n",
				strerror(errno));
	}
	return busy;
}

/* Each thread the attach found running a worker (tls_workers), with its time on a CPU so
 * far; none where the map or /proc cannot be read. */
static void read_first_runs(struct arming *a)
{
	int fd = bpf_map__fd(a->skel->maps.tls_workers);
	uint32_t tid, next, *prev = NULL;
	uint64_t key, run, wait, slices;
	struct arming_first_run *f;
	size_t cap = 0;

	a->first_at = mono_ns();
	while (fd >= 0 && !bpf_map_get_next_key(fd, prev, &next)) {
		tid = next;
		prev = &tid;
		if (bpf_map_lookup_elem(fd, &tid, &key) ||
		    read_schedstat(a->t->pid, tid, &run, &wait, &slices))
			continue;
		if (a->nfirst == cap) {
			cap = cap ? 2 * cap : 64;
			f = realloc(a->first_runs, cap * sizeof(*f));
			if (!f)
				return;
			a->first_runs = f;
		}
		a->first_runs[a->nfirst++] = (struct arming_first_run){tid, key, run};
	}
}

/*
 * A worker without a figure at the first whole epoch gets one from its thread's time on a CPU
 * since the attach, as the kernel counts it. The tick and switch programs follow a worker only
 * once the task-id word is learned, in the first window: after an attach late in a second they
 * have followed most workers for a few ms, or not at all, by its end, and a worker with no
 * figure calibrates through the first whole epoch and selects nothing. Not counted busy.
 */
static void first_shares(struct arming *a, uint64_t epoch, uint64_t now)
{
	int fd = bpf_map__fd(a->skel->maps.worker_ns),
	    sfd = bpf_map__fd(a->skel->maps.worker_share);
	uint64_t run, wait, slices;
	struct d9_worker_share s;
	struct d9_worker_ns v;

	for (size_t i = 0; sfd >= 0 && now > a->first_at && i < a->nfirst; i++) {
		const struct arming_first_run *f = &a->first_runs[i];

		if ((!bpf_map_lookup_elem(sfd, &f->key, &s) && s.cpu_ns) ||
		    read_schedstat(a->t->pid, f->tid, &run, &wait, &slices) || run < f->run_ns)
			continue;
		s = (struct d9_worker_share){.epoch = epoch - 1, .at_time = now};
		s.cpu_ns = (uint64_t)((double)(run - f->run_ns) * (double)NSEC /
				      (double)(now - a->first_at));
		if (!bpf_map_lookup_elem(fd, &f->key, &v))
			s.at_ns = v.ns;
		bpf_map_update_elem(sfd, &f->key, &s, BPF_ANY);
	}
	free(a->first_runs);
	a->first_runs = NULL;
	a->nfirst = 0;
}

/* The run's first figures are taken from here on: the start-up (the first window puts in
 * every probe) takes CPU from the workers, and figures from before it read low, so that the
 * first whole epoch selected well over hz. Unless too little of the epoch is left (the
 * start-up ended late): a figure from the start-up beats none, which leaves the first whole
 * epoch calibrating. */
static void rebase_shares(struct arming *a, uint64_t epoch)
{
	int fd = bpf_map__fd(a->skel->maps.worker_ns),
	    sfd = bpf_map__fd(a->skel->maps.worker_share);
	uint64_t key, now = mono_ns();
	struct d9_worker_share s = {.epoch = epoch - 1, .at_time = now};
	struct d9_worker_ns v;

	if (now + REBASE_MIN_NS > (epoch + 1) * NSEC)
		return;
	for (bool first = true; sfd >= 0 && worker_ns_next(fd, first, &key, &v); first = false) {
		s.at_ns = v.ns;
		bpf_map_update_elem(sfd, &key, &s, BPF_ANY);
	}
}

/* A thread's CPU time since the last reading: all of it for a thread that reading did not
 * have (its entry began after it, or was evicted and begun again). */
static uint64_t tid_cpu_delta(const struct arming *a, const struct arming_tid_cpu *now)
{
	for (size_t j = 0; j < a->ncpu_prev; j++)
		if (a->cpu_prev[j].tid == now->tid)
			return now->ns >= a->cpu_prev[j].ns ? now->ns - a->cpu_prev[j].ns : now->ns;
	return now->ns;
}

/*
 * Where workers outnumber the CPUs, each waits its turn on a run queue between slices of a
 * tick or so: with 32 busy workers on 2 CPUs, ~60 ms. A window shorter than that finds a worker
 * on the CPU only by chance, and a window missing half of them in an epoch leaves those unsampled
 * for it (their budget comes later, or not within a short run); one as long as the gap finds
 * every one that is busy. So windows are no shorter than the busy workers' median gap, from
 * the kernel's per-thread scheduler statistics, over the epoch: fewer and longer at the same
 * duty, which also spends less of the budget on attaching. Reads cpu_now (whose CPU time
 * deltas say which workers were busy) against cpu_prev.
 */
static double runq_gap(struct arming *a, int n)
{
	double *gaps = malloc((size_t)(n > 0 ? n : 1) * sizeof(*gaps)), gap = 0;
	int k = 0;

	for (int i = 0; i < n; i++) {
		struct arming_tid_cpu *c = &a->cpu_now[i];
		uint64_t run;

		if (read_schedstat(a->t->pid, c->tid, &run, &c->wait_ns, &c->slices))
			c->slices = 0;
		for (size_t j = 0; gaps && c->slices && j < a->ncpu_prev; j++) {
			const struct arming_tid_cpu *p = &a->cpu_prev[j];

			if (p->tid != c->tid || !p->slices || c->slices <= p->slices ||
			    c->wait_ns < p->wait_ns || c->ns < p->ns + D9_ACTIVE_CPU_NS)
				continue;
			gaps[k++] =
			    (double)(c->wait_ns - p->wait_ns) / (double)(c->slices - p->slices);
		}
	}
	if (k)
		gap = median_of(gaps, (size_t)k);
	free(gaps);
	return gap;
}

/*
 * The workers' CPU time in the epoch that just ended, read here just after its boundary at
 * real-time priority, when the last reading was at its start too. Goes to that epoch's log
 * entry, and by worker to the sampler. The run's first epoch, begun at the attach, gives the
 * sampler its per-second rate, so that every worker is sampled from the first whole epoch.
 */
static void read_epoch_cpu(struct arming *a, uint64_t epoch, bool whole)
{
	int n = a->cpu_now ? read_worker_cpu(a, a->cpu_now, CPU_MAX_THREADS) : -1;
	struct arming_tid_cpu *swap;
	double sum = 0;

	if (n < 0)
		return;
	for (int i = 0; i < n; i++)
		sum += (double)tid_cpu_delta(a, &a->cpu_now[i]);
	a->busy_workers = write_shares(a, epoch);
	if (whole && a->first_runs)
		first_shares(a, epoch, mono_ns());
	a->runq_gap_ns = runq_gap(a, n);
	pthread_mutex_lock(&a->lock);
	if (n && a->cpu_prev_whole && a->nlog && a->log[a->nlog - 1].epoch + 1 == epoch)
		a->log[a->nlog - 1].worker_cpu_ns = sum;
	pthread_mutex_unlock(&a->lock);
	swap = a->cpu_prev;
	a->cpu_prev = a->cpu_now;
	a->cpu_now = swap;
	a->ncpu_prev = (size_t)n;
	a->cpu_prev_whole = whole;
}

double arming_worker_cpu(struct arming *a, uint64_t epoch)
{
	double ns = -1;

	pthread_mutex_lock(&a->lock);
	for (size_t i = a->nlog; i-- > 0;)
		if (a->log[i].epoch == epoch) {
			ns = a->log[i].worker_cpu_ns;
			break;
		}
	pthread_mutex_unlock(&a->lock);
	return ns;
}

static void free_cpu_readings(struct arming *a)
{
	free(a->cpu_now);
	free(a->cpu_prev);
	free(a->first_runs);
	a->cpu_now = a->cpu_prev = NULL;
	a->first_runs = NULL;
	a->ncpu_prev = a->nfirst = 0;
}

static void *arming_thread(void *arg)
{
	struct arming *a = arg;
	struct reading r0, r1;
	uint64_t armed_prev = 0, nepochs = 0;
	uint32_t nwin_prev = 0;
	struct sched_param sp = {.sched_priority = 1};

	/* The probes stay in place, and every hit is paid, from the planned end of a window
	 * until this thread wakes up to remove them. On a target that keeps every core busy a
	 * normal thread woke 15-40 ms late (the window itself is a few ms); at the lowest
	 * real-time priority it runs on time, for the ~1 ms of CPU an attach and detach take. */
	a->realtime = !pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
	/* Capabilities are per thread: this one gives up what the main thread gives up. */
	privs_drop(PRIVS_LOOP);
	read_first_runs(a);
	read_counters(a, &r0);

	while (!a->stop) {
		uint64_t now = mono_ns(), epoch = now / NSEC, armed = 0;
		uint32_t nwin = 0;
		bool by_samples, continuous;
		int err;

		/* Every pass but the first starts at an epoch's boundary. */
		read_epoch_cpu(a, epoch, nepochs > 0);
		update_bpf_run_ns(a);
		read_counters(a, &r1);
		plan_epoch(a, &r0, &r1, armed_prev, nwin_prev, epoch, &by_samples);
		r0 = r1;
		continuous = a->duty >= 1.0;
		err = continuous ? continuous_epoch(a, now, &nwin, &armed)
				 : windowed_epoch(a, epoch, nepochs++, &nwin, &armed);
		if (err)
			break;
		if (nepochs == 1)
			rebase_shares(a, epoch);
		pthread_mutex_lock(&a->lock);
		log_epoch(a, epoch, nwin, armed, 0, by_samples);
		a->armed_ns += armed;
		a->windows += nwin;
		pthread_mutex_unlock(&a->lock);
		armed_prev = armed;
		/* Always armed, no window was made: the tool's CPU is all "other". */
		nwin_prev = continuous ? 0 : nwin;
		sleep_until(a, (epoch + 1) * NSEC);
	}
	disarm(a);
	return NULL;
}

int arming_start(struct arming *a)
{
	int err;

	pthread_mutex_init(&a->lock, NULL);
	a->bpf_run_ns = DEFAULT_BPF_RUN_NS;
	a->tick_ns = (double)kernel_tick_ns();
	/* The sampler's carry starts on, until an epoch's windows miss a busy worker. */
	a->all_seen = 2;
	a->skel->bss->carry_on = 1;
	/* Off by default in the kernel; on while this fd is open, for this tool's programs. */
	a->stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	a->notify_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	a->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (a->wake_fd < 0) {
		err = -errno;
		fprintf(stderr, "dial9-bpf: failed to create an eventfd: %s\n", strerror(-err));
		return err;
	}
	/* Without it, the kept probes are looked at every KEPT_CHECK_NS instead. */
	a->kept_alarm =
	    ring_buffer__new(bpf_map__fd(a->skel->maps.kept_alarm), on_kept_alarm, a, NULL);
	a->rng = a->seed ^ 0x9e3779b97f4a7c15ULL;
	a->rng |= 1;
	a->duty = a->budget >= 1.0 ? 1.0 : DUTY_INITIAL;
	/* Without them the counts of yielded resumes are scaled by the duty alone. */
	a->cpu_now = calloc(CPU_MAX_THREADS, sizeof(*a->cpu_now));
	a->cpu_prev = calloc(CPU_MAX_THREADS, sizeof(*a->cpu_prev));
	if (!a->cpu_now || !a->cpu_prev)
		free_cpu_readings(a);
	/* Every attachment of the run is of the caller's kind (a->links). */
	a->kept.multi = a->hold.multi = a->links.multi;
	/* Without it (per-offset links, or the kernel refused), windows make their uprobes. */
	if (a->budget < 1.0)
		attach_probes(a->skel, a->t, ATTACH_HOLD, &a->hold);
	/* A first attach and detach in the caller's thread: a target that cannot be probed
	 * fails here, with its message, before any output is written. */
	err = arm(a);
	if (err)
		return err;
	disarm(a);
	/* Its hits rank the probes: unranked, every poll probe is hot by kind, and the first
	 * window would put them all in last, in one link of thirty, and be hit through it. */
	update_probe_order(a);
	err = pthread_create(&a->thread, NULL, arming_thread, a);
	if (err)
		return -err;
	a->started = true;
	return 0;
}

void arming_stop(struct arming *a)
{
	if (a->started) {
		a->stop = 1;
		eventfd_write(a->wake_fd, 1);
		pthread_join(a->thread, NULL);
		a->started = false;
	}
	detach_probes(&a->links);
	detach_probes(&a->kept);
	detach_probes(&a->hold);
}

void arming_free(struct arming *a)
{
	free(a->hits0);
	a->hits0 = NULL;
	free(a->kept_hits0);
	a->kept_hits0 = NULL;
	free(a->log);
	a->log = NULL;
	free_cpu_readings(a);
	if (a->notify_fd >= 0)
		close(a->notify_fd);
	a->notify_fd = -1;
	if (a->wake_fd >= 0)
		close(a->wake_fd);
	a->wake_fd = -1;
	ring_buffer__free(a->kept_alarm);
	a->kept_alarm = NULL;
	if (a->stats_fd >= 0)
		close(a->stats_fd);
	a->stats_fd = -1;
	a->nlog = a->caplog = 0;
}
