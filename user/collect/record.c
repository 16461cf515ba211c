// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * A --pid recording, in phases: setup (target, BPF object, outputs, collector), attach (probes,
 * arming thread), loop (read the ring buffer until the run ends), then detach, finish (drain,
 * write the outputs and the exit summary) and free (release whatever was set up). With
 * --rotate the loop also completes the outputs into a new folder every interval (rotate.c).
 * Flow: target discovery -> BPF sampler on uprobes -> ring buffer -> collector (symbolize,
 * TaskSampleEvents) -> samples.jsonl + metadata.json and the other formats.
 */
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "arming.h"
#include "attach.h"
#include "calibrate.h"
#include "collector.h"
#include "cpu_samples.h"
#include "long_polls.h"
#include "metadata.h"
#include "park_outcome.h"
#include "options.h"
#include "out_dir.h"
#include "privs.h"
#include "push.h"
#include "record.h"
#include "record_int.h"
#include "resume_counts.h"
#include "rotate.h"
#include "sampler.skel.h"
#include "symbolize.h"
#include "target.h"
#include "task_types.h"
#include "tokio_layout.h"
#include "unwind_dwarf.h"
#include "unwind_tables.h"
#include "util_clock.h"
#include "worker_tls.h"

/* The initial pid namespace's inode (include/linux/proc_ns.h), fixed by the kernel. */
#define PROC_PID_INIT_INO 0xEFFFFFFCU

/*
 * libbpf keeps consuming while records keep coming, so under a flood one ring_buffer__poll()
 * would never return and the run could not stop (duration, signals, target exit). The
 * callback ends a poll once its time slice is used up; the loop then polls again.
 */
#define RB_SLICE_NS (200ULL * 1000 * 1000)
#define RB_SLICE_OVER (-ETIME)

/* How often the loader reads the ring buffer while always armed. Records are submitted
 * without wakeups (see rb_flags in the BPF program): one read per period instead of a wakeup
 * per sample. With windows, a window's end wakes the loader (notify_fd) and between windows
 * nothing but a worker's first record comes in, so it sleeps up to RB_IDLE_PERIOD_MS (or to
 * the run's end or the next status line): every wakeup takes a core from a busy worker, so an
 * idle loader wakes as seldom as the run's end and the status line allow. */
#define RB_PERIOD_MS 100
#define RB_IDLE_PERIOD_MS 1000
/* Under this share of --per-worker-hz a worker-second, the exit summary says why. */
#define DELIVERY_NOTE_SHARE 0.8

static volatile sig_atomic_t exiting;
static bool libbpf_verbose;

static void on_signal(int sig)
{
	exiting = sig;
}

/* libbpf's debug messages (how the object was opened, relocated and loaded): shown with -v,
 * so a rejected load can be followed step by step; hidden otherwise. */
static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	if (level == LIBBPF_DEBUG && !libbpf_verbose)
		return 0;
	return vfprintf(stderr, fmt, args);
}
static bool has_caps(void)
{
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct data[2] = {};
	uint64_t eff;

	if (geteuid() == 0)
		return true;
	if (syscall(SYS_capget, &hdr, data))
		return false;
	eff = data[0].effective | ((uint64_t)data[1].effective << 32);
	if (eff & (1ULL << CAP_SYS_ADMIN))
		return true;
	return (eff & (1ULL << 39 /* CAP_BPF */)) && (eff & (1ULL << 38 /* CAP_PERFMON */));
}

int record_check_system(void)
{
	if (!has_caps()) {
		fprintf(stderr,
			"dial9-bpf: needs root (or CAP_BPF, CAP_PERFMON and "
			"CAP_SYS_PTRACE) to load BPF and attach uprobes: run it with sudo\n");
		return 1;
	}
	if (access("/sys/kernel/btf/vmlinux", R_OK)) {
		fprintf(stderr,
			"dial9-bpf: this kernel has no BTF (/sys/kernel/btf/vmlinux: %s): "
			"use a kernel built with CONFIG_DEBUG_INFO_BTF=y\n",
			strerror(errno));
		return 1;
	}
	return 0;
}

static double read_worker_cpu(void *ctx, uint64_t epoch)
{
	return arming_worker_cpu(ctx, epoch);
}

static int read_open_epoch(void *ctx, uint64_t worker, struct d9_worker_state *out)
{
	struct sampler_bpf *skel = ctx;

	return bpf_map__lookup_elem(skel->maps.workers, &worker, sizeof(worker), out, sizeof(*out),
				    0);
}

void record_read_counters(struct sampler_bpf *skel, uint64_t out[D9_CNT_MAX])
{
	int ncpu = libbpf_num_possible_cpus();
	uint64_t vals[ncpu > 0 ? ncpu : 1];

	for (uint32_t i = 0; i < D9_CNT_MAX; i++) {
		out[i] = 0;
		if (ncpu <= 0 ||
		    bpf_map__lookup_elem(skel->maps.counters, &i, sizeof(i), vals, sizeof(vals), 0))
			continue;
		for (int c = 0; c < ncpu; c++)
			out[i] += vals[c];
	}
}

static void print_status(struct collector *c, struct sampler_bpf *skel, double elapsed,
			 double window_s, bool tty)
{
	uint64_t cnt[D9_CNT_MAX];

	record_read_counters(skel, cnt);
	fprintf(stderr, "%sdial9-bpf: %.0fs", tty ? "\r\033[K" : "", elapsed);
	for (size_t i = 0; i < c->nworkers && i < 16; i++) {
		fprintf(stderr, " w%d %.1f/s", c->workers[i].index,
			c->workers[i].samples_window / window_s);
		c->workers[i].samples_window = 0;
	}
	fprintf(stderr, " | samples %" PRIu64 " | drops %" PRIu64 "%s",
		c->samples_earlier + c->samples_written + c->npending, cnt[D9_CNT_RB_DROPS],
		tty ? "" : "\n");
}

static int read_timeout_ms(const struct arming *a, uint64_t now, uint64_t end_ns,
			   uint64_t status_ns)
{
	bool continuous = __atomic_load_n(&a->continuous, __ATOMIC_RELAXED);
	uint64_t next = now + (continuous ? RB_PERIOD_MS : RB_IDLE_PERIOD_MS) * 1000000ULL;

	if (end_ns && end_ns < next)
		next = end_ns;
	if (status_ns && status_ns < next)
		next = status_ns;
	return next <= now ? 0 : (int)((next - now + 999999) / 1000000);
}

static int on_record(void *ctx, void *data, size_t size)
{
	struct rb_slice *r = ctx;
	int err = collector_handle(r->col, data, size);

	if (err)
		return err;
	if (++r->n % 64 == 0 &&
	    (now_ns(CLOCK_MONOTONIC) >= r->deadline_ns || arming_window_open(r->arm)))
		return RB_SLICE_OVER;
	return 0;
}

/* Sleeps until the next read of the ring buffer: a period, the end of an armed window, the
 * target's exit or a signal, whichever comes first. rb_fd < 0: records that ask for a wakeup
 * wait for one of those. */
static void wait_for_read(int pidfd, int notify_fd, int rb_fd, int timeout_ms)
{
	struct pollfd p[3] = {
	    {.fd = pidfd, .events = POLLIN},
	    {.fd = notify_fd, .events = POLLIN},
	    {.fd = rb_fd, .events = POLLIN}}; /* records submitted with a wakeup */
	eventfd_t v;

	poll(p, 3, timeout_ms);
	if (notify_fd >= 0)
		eventfd_read(notify_fd, &v);
}

/* The exit summary's cost line: what the run cost the target, against the budget. */
static void print_overhead(struct arming *a, const struct options *o, const struct collector *c,
			   const struct run_summary *r)
{
	double run_s = (double)(r->stopped_ns - r->started_ns) / 1e9, own;
	double sens = collector_sensitivity_median(c);

	pthread_mutex_lock(&a->lock);
	own = (double)a->target_cpu_ns - (double)a->probe_cpu_ns;
	if (own > 0)
		fprintf(stderr,
			"dial9-bpf: cost %.2f%% of the target's CPU (probe hits %.2f%%, this tool "
			"%.2f%%; budget %g%%), probes armed %.1f%% of the time in %" PRIu64
			" windows\n",
			100.0 * ((double)a->probe_cpu_ns + (double)a->tool_cpu_ns) / own,
			100.0 * (double)a->probe_cpu_ns / own, 100.0 * (double)a->tool_cpu_ns / own,
			o->overhead_budget,
			run_s > 0 ? 100.0 * (double)a->armed_ns / 1e9 / run_s : 0, a->windows);
	pthread_mutex_unlock(&a->lock);
	/* The sensitivity is how far a 1% error in the hit cost moves the estimates of tasks
	 * that yield: past 3, the calibrated cost is not precise enough for them. */
	if (o->overhead_budget < 100 && sens > 3)
		fprintf(stderr,
			"dial9-bpf: note: probe hits took most of the windows' time, so estimates "
			"of tasks that yield are only as good as the hit cost (1%% off moves their "
			"weights by %s%.0f%%); --overhead-budget 100 counts them exactly\n",
			isfinite(sens) ? "" : ">", isfinite(sens) ? sens : 100.0);
}

/* Epochs from first to last whose duty the budget set (not the samples' need, nor always
 * armed). */
static uint32_t budget_bound_epochs(struct arming *a, uint64_t first, uint64_t last, uint32_t *of)
{
	uint32_t n = 0;

	*of = 0;
	pthread_mutex_lock(&a->lock);
	for (size_t i = 0; i < a->nlog; i++) {
		if (a->log[i].epoch < first || a->log[i].epoch > last)
			continue;
		(*of)++;
		n += !strcmp(arming_duty_limit(&a->log[i]), "budget");
	}
	pthread_mutex_unlock(&a->lock);
	return n;
}

/*
 * The exit summary's delivery line, where the workers got well under --per-worker-hz while the
 * budget bounded the windows: with traps of several us, or many more workers than CPUs, the
 * windows a budget pays for hold fewer of a worker's polls than it has samples to take, and p
 * = 1 takes all there are. Weights stay exact, so the estimates hold, but they are wider than
 * the rate asked for suggests, and a user who asked for it should hear why.
 */
static void print_delivery(struct arming *a, const struct options *o, const struct collector *c,
			   const struct run_summary *r)
{
	uint64_t first = r->started_ns / D9_NSEC_PER_SEC + 1,
		 last = r->stopped_ns / D9_NSEC_PER_SEC;
	double mean, least;
	uint32_t bound, of;

	if (o->overhead_budget >= 100 || last < first + 1 ||
	    !collector_delivery(c, first, last - 1, &mean, &least) ||
	    mean >= DELIVERY_NOTE_SHARE * (double)o->per_worker_hz)
		return;
	bound = budget_bound_epochs(a, first, last - 1, &of);
	if (!of || 2 * bound < of)
		return;
	fprintf(stderr,
		"dial9-bpf: note: the workers got %.1f samples a second of the %" PRIu64
		" asked (the least %.1f): the windows a %g%% budget pays for, at %.1f us a probe "
		"hit, held too few of their polls; weights stay exact and the estimates wider; a "
		"larger --overhead-budget gives more\n",
		mean, (uint64_t)o->per_worker_hz, least, o->overhead_budget,
		arming_hit_cost_ns(a) / 1e3);
}

/*
 * The exit summary's line for runs whose windows the budget held shorter than the workers'
 * wait on a run queue in a third of the epochs or more (arming_short_noted): many more busy
 * workers than CPUs, each on a CPU for a slice every few tens of ms. A window then finds a
 * worker only when its slice falls in it, and each worker's samples a second follow how many
 * epochs found it. Weights stay exact; the suggested budget scales the whole cost with the
 * window, so it is an upper bound.
 */
static void print_short_windows(struct arming *a, const struct options *o,
				const struct collector *c, const struct run_summary *r)
{
	uint64_t first = r->started_ns / D9_NSEC_PER_SEC + 1,
		 last = r->stopped_ns / D9_NSEC_PER_SEC;
	struct arming_short s;
	double mean, least;

	if (last < first + 1 || !collector_delivery(c, first, last - 1, &mean, &least))
		return;
	pthread_mutex_lock(&a->lock);
	arming_short_windows_locked(a, first, last - 1, &s);
	pthread_mutex_unlock(&a->lock);
	if (!arming_short_noted(&s))
		return;
	fprintf(stderr,
		"dial9-bpf: note: in %u of %u epochs the windows a %g%% budget pays for (%.0f ms) "
		"were shorter than the %.0f ms the workers wait for a CPU, so each found only some "
		"of them: the workers' samples a second spread more (%.1f on average, the least "
		"%.1f, of the %" PRIu64 " asked); weights stay exact; raising --overhead-budget to "
		"%.1f at most pays for windows as long as the wait\n",
		s.epochs, s.of, o->overhead_budget, s.window_ms, s.wait_ms, mean, least,
		(uint64_t)o->per_worker_hz,
		ceil(10 * o->overhead_budget * s.wait_ms / fmax(s.window_ms, 1.0)) / 10);
}

/* The exit summary's line for machines whose probe hits cost as much as a short poll: there the
 * windows change what the workers do, beyond what the weights correct (ARMING_SLOW_HIT_NS). */
static void print_slow_traps(struct arming *a, const struct options *o)
{
	double ns = arming_hit_cost_ns(a);

	if (!arming_slow_traps(ns, o->overhead_budget))
		return;
	fprintf(stderr,
		"dial9-bpf: note: a probe hit costs %.1f us on this machine (under 1.5 us on "
		"most; more under PVM or nested virtualization): the windows slow the workers "
		"enough to change what they do, so the counts of the tasks they slow or hold up "
		"may be off by up to a quarter, beyond their intervals; --overhead-budget 100 "
		"probes every poll and counts them exactly, at many times the cost\n",
		ns / 1e3);
}

static bool target_gone(int pidfd, int pid)
{
	struct pollfd p = {.fd = pidfd, .events = POLLIN};

	if (pidfd >= 0)
		return poll(&p, 1, 0) > 0;
	return kill(pid, 0) && errno == ESRCH;
}

static int open_writers(const struct options *o, const struct out_dir *dir, struct writer *w,
			size_t *n)
{
	static const struct {
		unsigned int bit;
		int (*open)(const struct out_dir *dir, struct writer *w);
		bool time; /* a view of running and waiting: only with on-CPU samples */
	} all[] = {
	    {D9_FMT_JSONL, jsonl_writer_open, false},
	    {D9_FMT_PERF, perf_writer_open, false},
	    {D9_FMT_PPROF, pprof_writer_open, false},
	    {D9_FMT_FOLDED, folded_writer_open, false},
	    {D9_FMT_FLAMEGRAPH, flamegraph_writer_open, false},
	    {D9_FMT_FOLDED, folded_time_writer_open, true},
	    {D9_FMT_FLAMEGRAPH, flamegraph_time_writer_open, true},
	};

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		int err;

		if (!(o->formats & all[i].bit) || (all[i].time && !o->cpu_hz))
			continue;
		if (all[i].bit == D9_FMT_JSONL && o->inline_stacks)
			err = jsonl_inline_writer_open(dir, &w[*n]);
		else
			err = all[i].open(dir, &w[*n]);
		if (err)
			return err;
		(*n)++;
	}
	return 0;
}

static int finish_writers(const struct options *o, const struct target *t, struct symbolizer *sym,
			  const struct collector *col, const struct run_summary *run,
			  struct writer *w, size_t n)
{
	struct run_context rc = {
	    .opts = o,
	    .target = t,
	    .sym = sym,
	    .started_ns = run->started_ns,
	    .stopped_ns = run->stopped_ns,
	    .realtime_offset_ns = run->started_realtime_ns - run->started_ns,
	    .stop_reason = run->stop_reason,
	    .nthreads = col->nthreads,
	    .threads = col->threads,
	};
	int failed = 0;

	for (size_t i = 0; i < n; i++)
		failed |= w[i].finish(&w[i], &rc) != 0;
	return failed || col->write_errors;
}

int record_write_outputs(struct record *r, const struct out_dir *d, struct run_summary *run)
{
	int err = 0;

	if (finish_writers(r->o, r->t, r->sym, &r->col, run, r->writers, r->nwriters))
		err = 1;
	r->nwriters = r->col.nwriters = 0;
	if (long_polls_finish(&r->lp))
		err = 1;
	if (metadata_write(d, r->o, r->t, &r->col, run))
		err = 1;
	return err;
}

/* Sampler parameters the BPF program reads as constants: set between open and load. */
static void configure_bpf(struct record *r)
{
	struct sampler_bpf *skel = r->skel;
	const struct options *o = r->o;
	struct task_id_layout tl;
	struct stat ns;

	attach_prepare(skel, r->links.multi);
	worker_tls_prepare(skel);
	skel->rodata->targ_tgid = (uint32_t)o->pid;
	skel->rodata->per_worker_hz = o->per_worker_hz;
	skel->rodata->token_interval_ns = D9_NSEC_PER_SEC / o->per_worker_hz;
	skel->rodata->bucket_ns = o->cap_burst * (D9_NSEC_PER_SEC / o->per_worker_hz);
	skel->rodata->seed = o->seed;
	skel->rodata->raw_stack_bytes = o->unwind == D9_UNWIND_DWARF ? o->stack_size : 0;
	skel->rodata->unwind_ebpf = o->unwind == D9_UNWIND_EBPF;
	skel->rodata->unwind_nmodules = (uint32_t)r->utab.nmods;
	unwind_tables_size_map(&r->utab, skel->maps.unwind_rows);
	skel->rodata->rb_flags = BPF_RB_NO_WAKEUP;
	/* In the initial pid namespace the kernel's own tgids and tids are the tool's: the
	 * programs then compare them directly, and the scheduler switch's filter drops other
	 * processes' switches before any map lookup. */
	if (!stat("/proc/self/ns/pid", &ns) && ns.st_ino != PROC_PID_INIT_INO) {
		skel->rodata->pidns_dev = ns.st_dev;
		skel->rodata->pidns_ino = ns.st_ino;
	}
	r->run.task_id_layout = tokio_task_id_layout(r->t->elf, r->t, &tl);
	skel->rodata->read_task_id = tl.valid;
	skel->rodata->hdr_vtable_off = tl.hdr_vtable_off;
	skel->rodata->vtable_id_off = tl.vtable_id_off;
	long_polls_configure(&r->lp, skel, r->t, o->long_poll_ms * 1000000ULL, o->cpu_hz > 0);
	cpu_samples_configure(&r->cpu, skel, o->cpu_hz);
}

static void *load_debuginfo(void *unw)
{
	unwinder_load_debuginfo(unw);
	return NULL;
}

/* The target's DWARF, read and indexed for inline names before sampling so that the windows
 * do not pay for it (unwinder_load_debuginfo bounds it), which needs only the target's modules
 * and debug file, so it runs in a thread of its own while the BPF object loads. The thread
 * shares no libelf or libdw handle with the rest of the setup. */
static void start_debuginfo(struct record *r)
{
	r->unw = unwinder_new(r->o->pid);
	r->unw_errno = errno;
	if (!r->unw)
		return;
	if (r->t->symbols.method != DEBUGINFO_SYMTAB) {
		const uint8_t *id;
		size_t len = elf_file_build_id(r->t->elf, &id);

		unwinder_set_debug_file(r->unw, r->t->symbols.path, id, len);
	}
	r->unw_loading = !pthread_create(&r->unw_thread, NULL, load_debuginfo, r->unw);
	if (!r->unw_loading)
		unwinder_load_debuginfo(r->unw);
}

/* The DWARF reader once loaded (NULL if it could not be made). */
static struct unwinder *join_debuginfo(struct record *r)
{
	if (r->unw_loading) {
		unwinder_finish_loading(r->unw);
		pthread_join(r->unw_thread, NULL);
	}
	r->unw_loading = false;
	return r->unw;
}

/* The target, locked against a second run, and the BPF object, loaded. */
static int setup_bpf(struct record *r)
{
	struct options *o = r->o;
	int err;

	if (target_open(o->pid, &o->debuginfo, &r->t))
		return 1;
	/* The target's debug file is fetched now, once. libdw would otherwise ask the server for
	 * every library without local debug info, from the sampling loop, where a slow server
	 * stalls the ring buffer's reader for up to libdebuginfod's own timeout. */
	unsetenv("DEBUGINFOD_URLS");
	if (target_lock(r->t))
		return 1;
	start_debuginfo(r);
	if (!o->seed_set && getrandom(&o->seed, sizeof(o->seed), 0) != sizeof(o->seed))
		o->seed = mono_ns();
	r->run.seed = o->seed;

	r->skel = sampler_bpf__open();
	if (!r->skel) {
		fprintf(stderr, "dial9-bpf: failed to open BPF object: %s\n", strerror(errno));
		return 1;
	}
	if (o->unwind == D9_UNWIND_AUTO)
		o->unwind = r->t->keeps_frame_pointers ? D9_UNWIND_FP : D9_UNWIND_EBPF;
	if (o->unwind == D9_UNWIND_EBPF && (err = unwind_tables_build(o->pid, &r->utab))) {
		fprintf(stderr,
			"dial9-bpf: failed to build unwind tables from the target's .eh_frame: %s: "
			"unwinding with dwarf instead\n",
			strerror(-err));
		o->unwind = D9_UNWIND_DWARF;
	}
	r->links.multi = attach_multi_supported();
	configure_bpf(r);
	err = sampler_bpf__load(r->skel);
	if (err) {
		fprintf(stderr,
			"dial9-bpf: failed to load BPF programs: %s: check that the kernel "
			"supports BPF ring buffers and uprobes (5.15+)\n",
			strerror(-err));
		return 1;
	}
	if (o->unwind == D9_UNWIND_EBPF &&
	    (err = unwind_tables_fill(&r->utab, r->skel->maps.unwind_rows,
				      r->skel->maps.unwind_modules))) {
		fprintf(stderr, "dial9-bpf: failed to load the unwind tables: %s\n",
			strerror(-err));
		return 1;
	}
	r->run.unwind_tables = &r->utab;
	park_outcome_load(r->skel, r->t);
	return 0;
}

int record_open_outputs(struct record *r, const struct out_dir *d)
{
	int err = open_writers(r->o, d, r->writers, &r->nwriters);

	if (!err)
		err = long_polls_open(&r->lp, d);
	if (err) {
		fprintf(stderr,
			"dial9-bpf: failed to create output in '%s': %s: give a writable "
			"--output directory\n",
			d->path, strerror(-err));
		return 1;
	}
	r->col.nwriters = r->nwriters;
	return 0;
}

/* The output directory and one writer per --format (in its first folder with --rotate). */
static int setup_outputs(struct record *r)
{
	const struct options *o = r->o;

	if (out_dir_open(&r->outdir, o->output_dir, &r->dir_created))
		return 1;
	if (o->push.url) {
		if (push_writer_open(o, r->t, &r->outdir, &r->push_stats, &r->push_w))
			return 1;
		r->push = &r->push_w;
	}
	return o->rotate_s ? rotate_open_first(r) : record_open_outputs(r, &r->outdir);
}

/* What turns ring-buffer records into samples: symbolizer, task types, unwinder, collector. */
static int setup_collector(struct record *r)
{
	const struct options *o = r->o;
	struct collector *col = &r->col;
	int err;

	r->sym = symbolizer_new(o->pid);
	if (!r->sym) {
		fprintf(stderr, "dial9-bpf: failed to create symbolizer: %s\n", strerror(errno));
		return 1;
	}
	if (r->t->symbols.method != DEBUGINFO_SYMTAB &&
	    (err = symbolizer_set_debug_file(r->sym, r->t->symbols.path)))
		fprintf(stderr,
			"dial9-bpf: failed to read the debug file %s: %s: frames of %s go "
			"unnamed\n",
			r->t->symbols.path, strerror(-err), r->t->exe_path);
	collector_init(col, o->pid, r->writers, r->nwriters, r->sym, read_open_epoch, r->skel);
	col->lasting = r->push;
	col->worker_cpu = read_worker_cpu;
	col->worker_cpu_ctx = &r->arm;
	err = task_types_load(r->t->elf, r->t, &r->types);
	if (err)
		fprintf(stderr,
			"dial9-bpf: failed to find the task types: %s: samples name no future\n",
			strerror(-err));
	col->types = &r->types;
	col->task_root = !o->no_task_root;
	col->long_polls = &r->lp;
	col->cpu = &r->cpu;
	/* In fp mode too: DWARF names the calls inlined at each return address. */
	col->unw = join_debuginfo(r);
	r->unw = NULL;
	if (!col->unw)
		fprintf(stderr,
			"dial9-bpf: failed to read the target's modules for DWARF: %s: %s\n",
			strerror(r->unw_errno),
			o->unwind == D9_UNWIND_DWARF
			    ? "stacks fall back to frame pointers, inlined calls go unnamed"
			    : "inlined calls go unnamed");
	r->rb = ring_buffer__new(bpf_map__fd(r->skel->maps.events), on_record, &r->slice, NULL);
	if (!r->rb) {
		fprintf(stderr, "dial9-bpf: failed to create ring buffer: %s\n", strerror(errno));
		return 1;
	}
	return 0;
}

static int record_setup(struct record *r)
{
	if (setup_bpf(r) || setup_outputs(r) || setup_collector(r))
		return 1;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	signal(SIGPIPE, SIG_IGN);
	r->pidfd = (int)syscall(SYS_pidfd_open, r->o->pid, 0);
	return 0;
}

/* The probe-hit cost the arming thread budgets with, and whether windows can be used. */
static void calibrate(struct record *r)
{
	struct options *o = r->o;
	bool need_xol = false;
	int err;

	for (size_t i = 0; i < r->t->nprobes; i++)
		need_xol |= r->t->probes[i].xol;
	err = calibrate_probe_cost(r->skel, r->links.multi, need_xol, &r->arm.cost);
	if (err && o->verbose)
		fprintf(stderr, "dial9-bpf: probe cost calibration failed (%s): assuming %.0f ns\n",
			strerror(-err), r->arm.cost.entry_ns);
	/* Windows need fast attach and detach: per-offset links take seconds to remove. */
	if (!r->links.multi && o->overhead_budget < 100) {
		fprintf(stderr, "dial9-bpf: this kernel has no uprobe_multi links (6.6+): probing "
				"every poll, the overhead budget is not enforced\n");
		o->overhead_budget = 100;
	}
}

static int start_arming(struct record *r)
{
	const struct options *o = r->o;
	struct arming *arm = &r->arm;

	arm->skel = r->skel;
	arm->t = r->t;
	arm->budget = o->overhead_budget / 100.0;
	arm->per_worker_hz = o->per_worker_hz;
	if (r->skel->rodata->read_task_id &&
	    tokio_next_id_addr(r->t->elf, r->t, &arm->next_id_addr) && o->verbose)
		fprintf(stderr, "dial9-bpf: Tokio's task id counter not found: a task "
				"first seen in a window is taken for a new one\n");
	arm->seed = o->seed;
	arm->verbose = o->verbose;
	arm->links.multi = r->links.multi;
	return arming_start(arm);
}

/* Attaches the persistent probes and starts the arming thread; the run starts here. */
static int record_attach(struct record *r)
{
	const struct options *o = r->o;
	const struct target *t = r->t;
	uint64_t t0;

	calibrate(r);
	t0 = mono_ns();
	if (attach_probes(r->skel, t, ATTACH_PERSISTENT, &r->links))
		return 1;
	/* worker::run is probed: a worker starting from now is seen there. */
	worker_tls_resolve(r->skel, t, &r->col, &r->wtls);
	r->run.worker_tls = &r->wtls;
	r->exec_link = bpf_program__attach(r->skel->progs.target_exec);
	if (!r->exec_link)
		fprintf(stderr,
			"dial9-bpf: failed to watch for exec: %s: an exec of the "
			"same executable will not stop the run\n",
			strerror(errno));
	long_polls_start_ticks(&r->lp, r->skel, &r->wtls, t->pid);
	cpu_samples_start(&r->cpu, r->skel, t->pid);
	if (r->lp.min_ns && !(r->lp_link = bpf_program__attach(r->skel->progs.lp_switch))) {
		fprintf(stderr,
			"dial9-bpf: failed to attach to sched_switch: %s: long polls are off\n",
			strerror(errno));
		r->lp.status = "no_sched_switch";
	}
	/* The gate's on-CPU time follows the switches from now (bpf/gate.bpf.h). */
	if (r->lp_link)
		r->skel->bss->gate_switches = 1;
	/* Open every mapped file now, while the target lives: build ids and symbols of
	 * libraries no sample hit yet stay available if it exits before the end. Before the
	 * arming thread starts, whose first epoch would count this one-time work against the
	 * budget and cut the duty it plans. */
	for (size_t it = 0; !symbolizer_next_module(r->sym, &it, &(struct sym_module){});)
		;
	if (start_arming(r))
		return 1;
	r->run.attach_ms = (mono_ns() - t0) / 1e6;
	if (privs_drop(PRIVS_LOOP) && o->verbose)
		fprintf(stderr, "dial9-bpf: failed to drop capabilities: %s\n", strerror(errno));
	r->run.probes_attached = r->links.probes + t->count[PROBE_POLL] + t->count[PROBE_DEALLOC] +
				 t->count[PROBE_PARK] + t->count[PROBE_IDLE];
	r->run.uprobe_multi = r->links.multi;
	r->run.started_ns = now_ns(CLOCK_MONOTONIC);
	r->run.started_realtime_ns = now_ns(CLOCK_REALTIME);
	r->running = true;
	if (!o->quiet)
		fprintf(stderr,
			"dial9-bpf: sampling pid %d (%s): %zu poll functions, %zu park points, "
			"%" PRIu64 " samples/s per worker; Ctrl-C to stop\n",
			o->pid, t->comm, t->count[PROBE_POLL], t->count[PROBE_PARK],
			o->per_worker_hz);
	return 0;
}

/* One read of the ring buffer, unless a window is open (the arming thread reads then).
 * Returns 0, RB_SLICE_OVER when the read was cut short, or a negative errno. */
static int read_records(struct record *r)
{
	int err = 0;

	arming_hit_cost(&r->arm, &r->col.hit_cost_ns, &r->col.hit_cost_rel_se);
	if (!arming_window_open(&r->arm)) {
		r->slice.deadline_ns = mono_ns() + RB_SLICE_NS;
		err = ring_buffer__consume(r->rb);
		if (err == -EINTR || err > 0)
			err = 0;
		if (err < 0 && err != RB_SLICE_OVER) {
			fprintf(stderr, "dial9-bpf: failed to read ring buffer: %s\n",
				strerror(-err));
			r->run.stop_reason = "error";
			return err;
		}
		if (!arming_window_open(&r->arm)) {
			collector_flush(&r->col, mono_ns(), false);
			resume_counts_drain(&r->col, bpf_map__fd(r->skel->maps.resume_counts),
					    mono_ns() / D9_NSEC_PER_SEC - RESUME_COUNTS_AGE);
		}
	}
	return err;
}

/* The stop reason when the run must end now (other than by its duration or a signal). */
static const char *must_stop(struct record *r)
{
	const struct options *o = r->o;

	if (r->arm.error)
		return "attach_failed";
	if (target_gone(r->pidfd, o->pid)) {
		if (!o->quiet)
			fprintf(stderr, "%sdial9-bpf: target pid %d exited; finishing outputs\n",
				r->tty ? "\n" : "", o->pid);
		return "target_exited";
	}
	/* After an exec the maps no longer describe what was sampled (and after an exec
	 * into another file the probes, on the old inode, never fire again). */
	if (r->col.target_exec || target_exe_changed(r->t)) {
		if (!o->quiet)
			fprintf(stderr,
				"%sdial9-bpf: target pid %d exec'd a new program image; "
				"finishing outputs\n",
				r->tty ? "\n" : "", o->pid);
		return "target_exec";
	}
	return NULL;
}

/* Reads the ring buffer until the duration ends, a signal comes or the target goes. */
static void record_loop(struct record *r)
{
	const struct options *o = r->o;
	uint64_t last_status = r->run.started_ns, status_ns, end_ns = 0;
	int status_every = r->tty ? 1 : 5, err = 0;
	const char *why;

	r->run.stop_reason = "duration";
	if (o->duration_s > 0)
		end_ns = r->run.started_ns + (uint64_t)(o->duration_s * 1e9);
	while (!exiting) {
		uint64_t now = mono_ns();

		status_ns = o->quiet ? 0 : last_status + status_every * D9_NSEC_PER_SEC;
		/* Straight on after a read cut short by its time slice: records are waiting. Not
		 * woken by the ring while a window is open: read_records leaves it alone then, and
		 * a record that asked for a wakeup (a long poll) keeps its fd readable until it is
		 * read, so the loop spun through the rest of the window, taking a CPU from the
		 * workers the window measures (bench/RESULTS.md, "The loader spinning through a
		 * window"). The window's end wakes it. */
		wait_for_read(
		    r->pidfd, r->arm.notify_fd,
		    arming_window_open(&r->arm) ? -1 : ring_buffer__epoll_fd(r->rb),
		    err == RB_SLICE_OVER ? 0 : read_timeout_ms(&r->arm, now, end_ns, status_ns));
		err = read_records(r);
		if (err < 0 && err != RB_SLICE_OVER)
			break;
		now = mono_ns();
		long_polls_learn(&r->lp, r->skel, now);
		/* Only what an interval's profile tables need. */
		push_tick(r->push, &(struct run_context){.opts = o, .target = r->t, .sym = r->sym},
			  now);
		why = must_stop(r);
		if (why) {
			r->run.stop_reason = why;
			break;
		}
		if (end_ns && now >= end_ns)
			break;
		/* Not after a read cut short: records of the closing epochs may still wait. */
		if (err != RB_SLICE_OVER && rotate_if_due(r, now)) {
			r->run.stop_reason = "error";
			break;
		}
		if (!o->quiet && now - last_status >= status_every * D9_NSEC_PER_SEC) {
			print_status(&r->col, r->skel, (now - r->run.started_ns) / 1e9,
				     (now - last_status) / 1e9, r->tty);
			last_status = now;
		}
	}
	if (exiting)
		r->run.stop_reason = exiting == SIGINT	  ? "sigint"
				     : exiting == SIGTERM ? "sigterm"
							  : "signal";
}

/* Probes first, on every path, so the target runs unprobed as early as possible. */
static void record_detach(struct record *r)
{
	uint64_t t0 = mono_ns();

	arming_stop(&r->arm);
	detach_probes(&r->links);
	bpf_link__destroy(r->exec_link);
	r->exec_link = NULL;
	bpf_link__destroy(r->lp_link);
	r->lp_link = NULL;
	long_polls_stop_ticks(&r->lp);
	cpu_samples_stop(&r->cpu);
	r->run.detach_ms = (mono_ns() - t0) / 1e6;
}

static void print_summary(struct record *r)
{
	const struct options *o = r->o;
	const struct run_summary *run = &r->run;

	if (r->tty)
		fputc('\n', stderr);
	fprintf(stderr,
		"dial9-bpf: %s after %.1fs: %" PRIu64 " samples (%" PRIu64
		" on-CPU) from %zu workers "
		"(%" PRIu64 " with stacks), %" PRIu64 " polls probed, %" PRIu64
		" ring-buffer drops; wrote %s/\n",
		run->stop_reason, (run->stopped_ns - run->started_ns) / 1e9,
		r->col.samples_earlier + r->col.samples_written, r->cpu.written, r->col.nworkers,
		r->col.with_stack_earlier + r->col.samples_with_stack, run->counters[D9_CNT_POLLS],
		run->counters[D9_CNT_RB_DROPS], o->output_dir);
	print_overhead(&r->arm, o, &r->col, run);
	print_delivery(&r->arm, o, &r->col, run);
	print_short_windows(&r->arm, o, &r->col, run);
	print_slow_traps(&r->arm, o);
}

/* Sends what is pending (a bounded wait) and closes the pusher; 0 or 1. */
static int finish_push(struct record *r)
{
	int err;

	if (!r->push)
		return 0;
	err = finish_writers(r->o, r->t, r->sym, &r->col, &r->run, r->push, 1);
	r->push = r->col.lasting = NULL;
	r->run.push = &r->push_stats;
	return err;
}

/* After the detach: drains what the probes left, writes every output and the summary.
 * Returns the exit code. */
static int record_finish(struct record *r)
{
	int err;

	r->run.stopped_ns = mono_ns();
	r->slice.deadline_ns = UINT64_MAX; /* probes are gone: the rest is finite */
	ring_buffer__consume(r->rb);
	record_read_counters(r->skel, r->run.counters);
	park_outcome_read(r->skel, r->t);
	collector_close_epochs(&r->col, UINT64_MAX, r->run.stopped_ns / D9_NSEC_PER_SEC);
	collector_flush(&r->col, UINT64_MAX, true);
	resume_counts_drain(&r->col, bpf_map__fd(r->skel->maps.resume_counts), UINT64_MAX);
	/* Before metadata, which reports what it sent; its wait for the server is bounded. */
	err = finish_push(r);
	r->run.long_polls = &r->lp;
	r->run.cpu_samples = &r->cpu;
	r->run.arming = &r->arm;
	err |= r->o->rotate_s ? rotate_finish(r) : record_write_outputs(r, &r->outdir, &r->run);
	if (!r->o->quiet)
		print_summary(r);
	return err;
}

/* Releases what setup made; a run that did not start leaves no half-written output. */
static void record_free(struct record *r)
{
	for (size_t i = 0; i < r->nwriters; i++)
		r->writers[i].abort(&r->writers[i]);
	if (r->push)
		r->push->abort(r->push);
	if (r->lp.open)
		out_file_discard(&r->lp.out);
	json_buf_free(&r->lp.line);
	rotate_free(r);
	if (!r->running && r->dir_created)
		rmdir(r->o->output_dir);
	out_dir_close(&r->outdir);
	if (r->pidfd >= 0)
		close(r->pidfd);
	ring_buffer__free(r->rb);
	unwinder_free(join_debuginfo(r));
	unwinder_free(r->col.unw);
	unwind_tables_free(&r->utab);
	collector_free(&r->col);
	cpu_samples_free(&r->cpu);
	task_types_free(&r->types);
	symbolizer_free(r->sym);
	sampler_bpf__destroy(r->skel);
	target_close(r->t);
	arming_free(&r->arm);
}

int record_main(struct options *o)
{
	struct record r = {
	    .o = o,
	    .arm = {.notify_fd = -1, .stats_fd = -1, .wake_fd = -1},
	    .outdir = {.fd = -1},
	    .pidfd = -1,
	    .tty = isatty(STDERR_FILENO),
	};
	int err;

	r.slice = (struct rb_slice){.col = &r.col, .arm = &r.arm, .deadline_ns = UINT64_MAX};
	libbpf_verbose = o->verbose;
	libbpf_set_print(libbpf_print);
	err = record_setup(&r);
	if (!err)
		err = record_attach(&r);
	if (!err)
		record_loop(&r);
	record_detach(&r);
	if (r.running)
		err = record_finish(&r);
	record_free(&r);
	return err;
}
