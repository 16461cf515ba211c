// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * dial9-bpf: samples where the tasks of a running Tokio process run and park.
 * Flow: target discovery -> BPF sampler on uprobes -> ring buffer -> collector (symbolize,
 * TaskSampleEvents) -> samples.jsonl + metadata.json.
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
#include "cgroup_watch.h"
#include "collector.h"
#include "metadata.h"
#include "park_outcome.h"
#include "options.h"
#include "out_dir.h"
#include "privs.h"
#include "report.h"
#include "sampler.skel.h"
#include "symbolize.h"
#include "target.h"
#include "task_types.h"
#include "tokio_layout.h"
#include "unwind_dwarf.h"
#include "worker_tls.h"

static volatile sig_atomic_t exiting;

static void on_signal(int sig)
{
	exiting = sig;
}

static uint64_t now_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * D9_NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	if (level == LIBBPF_DEBUG)
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

static int check_system(void)
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

static int read_open_epoch(void *ctx, uint64_t worker, struct d9_worker_state *out)
{
	struct sampler_bpf *skel = ctx;

	return bpf_map__lookup_elem(skel->maps.workers, &worker, sizeof(worker), out, sizeof(*out),
				    0);
}

static void read_counters(struct sampler_bpf *skel, uint64_t out[D9_CNT_MAX])
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

	read_counters(skel, cnt);
	fprintf(stderr, "%sdial9-bpf: %.0fs", tty ? "\r\033[K" : "", elapsed);
	for (size_t i = 0; i < c->nworkers && i < 16; i++) {
		fprintf(stderr, " w%d %.1f/s", c->workers[i].index,
			c->workers[i].samples_window / window_s);
		c->workers[i].samples_window = 0;
	}
	fprintf(stderr, " | samples %" PRIu64 " | drops %" PRIu64 "%s",
		c->samples_written + c->npending, cnt[D9_CNT_RB_DROPS], tty ? "" : "\n");
}

/*
 * libbpf keeps consuming while records keep coming, so under a flood one ring_buffer__poll()
 * would never return and the run could not stop (duration, signals, target exit). The
 * callback ends a poll once its time slice is used up; the loop then polls again.
 */
#define RB_SLICE_NS (200ULL * 1000 * 1000)
#define RB_SLICE_OVER (-ETIME)

struct rb_slice {
	struct collector *col;
	const struct arming *arm;
	uint64_t deadline_ns;
	unsigned int n;
};

/* How often the loader reads the ring buffer while always armed. Records are submitted
 * without wakeups (see rb_flags in the BPF program): one read per period instead of a wakeup
 * per sample. With windows, a window's end wakes the loader (notify_fd) and between windows
 * nothing but a worker's first record comes in, so it sleeps up to RB_IDLE_PERIOD_MS (or to
 * the run's end or the next status line): every wakeup takes a core from a busy worker, and
 * the 10 per second of a fixed 100 ms period were a measurable part of the tool's cost. */
#define RB_PERIOD_MS 100
#define RB_IDLE_PERIOD_MS 1000

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
 * target's exit or a signal, whichever comes first. */
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
	/* Measured on the bundled demo: at 1.1 (mix) a 13% costlier hit moved CPU-bound
	 * estimates by 14%; at ~7 (hot) from 0.48 to 2.36 of the truth. */
	if (o->overhead_budget < 100 && sens > 3)
		fprintf(stderr,
			"dial9-bpf: note: probe hits took most of the windows' time, so estimates "
			"of tasks that yield are only as good as the hit cost (1%% off moves their "
			"weights by %s%.0f%%); --overhead-budget 100 counts them exactly\n",
			isfinite(sens) ? "" : ">", isfinite(sens) ? sens : 100.0);
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
	} all[] = {
	    {D9_FMT_JSONL, jsonl_writer_open},		 {D9_FMT_PERF, perf_writer_open},
	    {D9_FMT_PPROF, pprof_writer_open},		 {D9_FMT_FOLDED, folded_writer_open},
	    {D9_FMT_FLAMEGRAPH, flamegraph_writer_open},
	};

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		int err;

		if (!(o->formats & all[i].bit))
			continue;
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

int main(int argc, char **argv)
{
	struct attachment links = {};
	struct bpf_link *exec_link = NULL;
	struct arming arm = {.notify_fd = -1, .stats_fd = -1, .wake_fd = -1};
	struct run_summary run = {};
	struct worker_tls wtls = {0};
	struct sampler_bpf *skel = NULL;
	struct ring_buffer *rb = NULL;
	struct symbolizer *sym = NULL;
	struct target *t = NULL;
	struct collector col = {};
	struct rb_slice slice = {.col = &col, .arm = &arm, .deadline_ns = UINT64_MAX};
	struct out_dir outdir = {.fd = -1};
	struct task_types types = {0};
	struct writer writers[8];
	size_t nwriters = 0;
	bool dir_created = false, running = false, need_xol, tty = isatty(STDERR_FILENO);
	struct options o;
	int err, pidfd = -1, status_every;
	uint64_t last_status, end_ns, t0;

	err = options_parse(argc, argv, &o);
	if (err)
		return err;
	if (o.command == D9_CMD_REPORT)
		return report_main(o.report_dir);
	err = check_system();
	if (err)
		return err;
	if (o.cgroup_path || o.container_id)
		return cgroup_watch_main(&o, argv[0]);
	libbpf_set_print(libbpf_print);

	err = target_open(o.pid, &o.debuginfo, &t);
	if (err)
		return 1;
	/* The target's debug file is fetched now, once. libdw would otherwise ask the server for
	 * every library without local debug info, from the sampling loop, where a slow server
	 * stalls the ring buffer's reader for up to libdebuginfod's own timeout. */
	unsetenv("DEBUGINFOD_URLS");
	if (target_lock(t)) {
		target_close(t);
		return 1;
	}
	if (!o.seed_set && getrandom(&o.seed, sizeof(o.seed), 0) != sizeof(o.seed))
		o.seed = now_ns(CLOCK_MONOTONIC);
	run.seed = o.seed;

	skel = sampler_bpf__open();
	if (!skel) {
		fprintf(stderr, "dial9-bpf: failed to open BPF object: %s\n", strerror(errno));
		err = 1;
		goto cleanup;
	}
	if (o.unwind == D9_UNWIND_AUTO)
		o.unwind = t->keeps_frame_pointers ? D9_UNWIND_FP : D9_UNWIND_DWARF;
	links.multi = attach_multi_supported();
	attach_prepare(skel, links.multi);
	worker_tls_prepare(skel);
	skel->rodata->targ_tgid = (uint32_t)o.pid;
	skel->rodata->per_worker_hz = o.per_worker_hz;
	skel->rodata->token_interval_ns = D9_NSEC_PER_SEC / o.per_worker_hz;
	skel->rodata->bucket_ns = o.cap_burst * (D9_NSEC_PER_SEC / o.per_worker_hz);
	skel->rodata->seed = o.seed;
	skel->rodata->raw_stack_bytes = o.unwind == D9_UNWIND_DWARF ? o.stack_size : 0;
	skel->rodata->rb_flags = BPF_RB_NO_WAKEUP;
	{
		struct stat ns;

		if (!stat("/proc/self/ns/pid", &ns)) {
			skel->rodata->pidns_dev = ns.st_dev;
			skel->rodata->pidns_ino = ns.st_ino;
		}
	}
	{
		struct task_id_layout tl;

		run.task_id_layout = tokio_task_id_layout(t->elf, t, &tl);
		skel->rodata->read_task_id = tl.valid;
		skel->rodata->hdr_vtable_off = tl.hdr_vtable_off;
		skel->rodata->vtable_id_off = tl.vtable_id_off;
	}
	err = sampler_bpf__load(skel);
	if (err) {
		fprintf(stderr,
			"dial9-bpf: failed to load BPF programs: %s: check that the kernel "
			"supports BPF ring buffers and uprobes (5.15+)\n",
			strerror(-err));
		err = 1;
		goto cleanup;
	}

	park_outcome_load(skel, t);
	err = out_dir_open(&outdir, o.output_dir, &dir_created);
	if (err) {
		err = 1;
		goto cleanup;
	}
	err = open_writers(&o, &outdir, writers, &nwriters);
	if (err) {
		fprintf(stderr,
			"dial9-bpf: failed to create output in '%s': %s: give a writable "
			"--output directory\n",
			o.output_dir, strerror(-err));
		err = 1;
		goto cleanup;
	}

	sym = symbolizer_new(o.pid);
	if (!sym) {
		fprintf(stderr, "dial9-bpf: failed to create symbolizer: %s\n", strerror(errno));
		err = 1;
		goto cleanup;
	}
	if (t->symbols.method != DEBUGINFO_SYMTAB &&
	    (err = symbolizer_set_debug_file(sym, t->symbols.path)))
		fprintf(stderr,
			"dial9-bpf: failed to read the debug file %s: %s: frames of %s go "
			"unnamed\n",
			t->symbols.path, strerror(-err), t->exe_path);
	collector_init(&col, o.pid, writers, nwriters, sym, read_open_epoch, skel);
	err = task_types_load(t->elf, t, &types);
	if (err)
		fprintf(stderr,
			"dial9-bpf: failed to find the task types: %s: samples name no future\n",
			strerror(-err));
	col.types = &types;
	col.task_root = !o.no_task_root;
	if (o.unwind == D9_UNWIND_DWARF) {
		col.unw = unwinder_new(o.pid);
		if (col.unw && t->symbols.method != DEBUGINFO_SYMTAB) {
			const uint8_t *id;
			size_t len = elf_file_build_id(t->elf, &id);

			unwinder_set_debug_file(col.unw, t->symbols.path, id, len);
		}
		if (!col.unw)
			fprintf(stderr,
				"dial9-bpf: failed to set up DWARF unwinding: %s: stacks fall "
				"back to frame pointers\n",
				strerror(errno));
	}
	rb = ring_buffer__new(bpf_map__fd(skel->maps.events), on_record, &slice, NULL);
	if (!rb) {
		fprintf(stderr, "dial9-bpf: failed to create ring buffer: %s\n", strerror(errno));
		err = 1;
		goto cleanup;
	}

	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	signal(SIGPIPE, SIG_IGN);
	pidfd = (int)syscall(SYS_pidfd_open, o.pid, 0);

	need_xol = false;
	for (size_t i = 0; i < t->nprobes; i++)
		need_xol |= t->probes[i].xol;
	err = calibrate_probe_cost(skel, links.multi, need_xol, &arm.cost);
	if (err && o.verbose)
		fprintf(stderr, "dial9-bpf: probe cost calibration failed (%s): assuming %.0f ns\n",
			strerror(-err), arm.cost.entry_ns);
	/* Windows need fast attach and detach: per-offset links take seconds to remove. */
	if (!links.multi && o.overhead_budget < 100) {
		fprintf(stderr, "dial9-bpf: this kernel has no uprobe_multi links (6.6+): probing "
				"every poll, the overhead budget is not enforced\n");
		o.overhead_budget = 100;
	}
	t0 = now_ns(CLOCK_MONOTONIC);
	err = attach_probes(skel, t, ATTACH_PERSISTENT, &links);
	/* worker::run is probed: a worker starting from now is seen there. */
	if (!err) {
		worker_tls_resolve(skel, t, &col, &wtls);
		run.worker_tls = &wtls;
	}
	if (!err) {
		exec_link = bpf_program__attach(skel->progs.target_exec);
		if (!exec_link)
			fprintf(stderr,
				"dial9-bpf: failed to watch for exec: %s: an exec of the "
				"same executable will not stop the run\n",
				strerror(errno));
	}
	/* Open every mapped file now, while the target lives: build ids and symbols of
	 * libraries no sample hit yet stay available if it exits before the end. Before the
	 * arming thread starts, whose first epoch would count this one-time work against the
	 * budget and cut the duty it plans. */
	for (size_t it = 0; !err && !symbolizer_next_module(sym, &it, &(struct sym_module){});)
		;
	if (!err) {
		arm.skel = skel;
		arm.t = t;
		arm.budget = o.overhead_budget / 100.0;
		arm.per_worker_hz = o.per_worker_hz;
		if (skel->rodata->read_task_id &&
		    tokio_next_id_addr(t->elf, t, &arm.next_id_addr) && o.verbose)
			fprintf(stderr, "dial9-bpf: Tokio's task id counter not found: a task "
					"first seen in a window is taken for a new one\n");
		arm.seed = o.seed;
		arm.links.multi = links.multi;
		err = arming_start(&arm);
	}
	if (err) {
		err = 1;
		goto cleanup;
	}
	run.attach_ms = (now_ns(CLOCK_MONOTONIC) - t0) / 1e6;
	if (privs_drop(PRIVS_LOOP) && o.verbose)
		fprintf(stderr, "dial9-bpf: failed to drop capabilities: %s\n", strerror(errno));
	run.probes_attached = links.probes + t->count[PROBE_POLL] + t->count[PROBE_DEALLOC] +
			      t->count[PROBE_PARK] + t->count[PROBE_IDLE];
	run.uprobe_multi = links.multi;
	run.started_ns = now_ns(CLOCK_MONOTONIC);
	run.started_realtime_ns = now_ns(CLOCK_REALTIME);
	running = true;
	if (!o.quiet)
		fprintf(stderr,
			"dial9-bpf: sampling pid %d (%s): %zu poll functions, %zu park points, "
			"%" PRIu64 " samples/s per worker; Ctrl-C to stop\n",
			o.pid, t->comm, t->count[PROBE_POLL], t->count[PROBE_PARK],
			o.per_worker_hz);

	run.stop_reason = "duration";
	last_status = run.started_ns;
	status_every = tty ? 1 : 5;
	end_ns = o.duration_s > 0 ? run.started_ns + (uint64_t)(o.duration_s * 1e9) : 0;
	err = 0;
	while (!exiting) {
		uint64_t now;

		now = now_ns(CLOCK_MONOTONIC);
		/* Straight on after a read cut short by its time slice: records are waiting. */
		wait_for_read(
		    pidfd, arm.notify_fd, ring_buffer__epoll_fd(rb),
		    err == RB_SLICE_OVER
			? 0
			: read_timeout_ms(&arm, now, end_ns,
					  o.quiet ? 0
						  : last_status + status_every * D9_NSEC_PER_SEC));
		err = 0;
		col.hit_cost_ns = arming_hit_cost_ns(&arm);
		if (!arming_window_open(&arm)) {
			slice.deadline_ns = now_ns(CLOCK_MONOTONIC) + RB_SLICE_NS;
			err = ring_buffer__consume(rb);
			if (err < 0 && err != -EINTR && err != RB_SLICE_OVER) {
				fprintf(stderr, "dial9-bpf: failed to read ring buffer: %s\n",
					strerror(-err));
				run.stop_reason = "error";
				break;
			}
			if (!arming_window_open(&arm))
				collector_flush(&col, now_ns(CLOCK_MONOTONIC), false);
		}
		now = now_ns(CLOCK_MONOTONIC);
		if (arm.error) {
			run.stop_reason = "attach_failed";
			break;
		}
		if (target_gone(pidfd, o.pid)) {
			run.stop_reason = "target_exited";
			if (!o.quiet)
				fprintf(stderr,
					"%sdial9-bpf: target pid %d exited; finishing outputs\n",
					tty ? "\n" : "", o.pid);
			break;
		}
		/* After an exec the maps no longer describe what was sampled (and after an exec
		 * into another file the probes, on the old inode, never fire again). */
		if (col.target_exec || target_exe_changed(t)) {
			run.stop_reason = "target_exec";
			if (!o.quiet)
				fprintf(stderr,
					"%sdial9-bpf: target pid %d exec'd a new program image; "
					"finishing outputs\n",
					tty ? "\n" : "", o.pid);
			break;
		}
		if (end_ns && now >= end_ns)
			break;
		if (!o.quiet && now - last_status >= status_every * D9_NSEC_PER_SEC) {
			print_status(&col, skel, (now - run.started_ns) / 1e9,
				     (now - last_status) / 1e9, tty);
			last_status = now;
		}
	}
	if (exiting)
		run.stop_reason = exiting == SIGINT    ? "sigint"
				  : exiting == SIGTERM ? "sigterm"
						       : "signal";
	err = 0;

cleanup:
	/* One exit path: probes first, so the target runs unprobed as early as possible. */
	t0 = now_ns(CLOCK_MONOTONIC);
	arming_stop(&arm);
	detach_probes(&links);
	bpf_link__destroy(exec_link);
	run.detach_ms = (now_ns(CLOCK_MONOTONIC) - t0) / 1e6;
	if (running) {
		run.stopped_ns = now_ns(CLOCK_MONOTONIC);
		slice.deadline_ns = UINT64_MAX; /* probes are gone: the rest is finite */
		ring_buffer__consume(rb);
		read_counters(skel, run.counters);
		park_outcome_read(skel, t);
		collector_close_epochs(&col);
		collector_flush(&col, UINT64_MAX, true);
		if (finish_writers(&o, t, sym, &col, &run, writers, nwriters))
			err = 1;
		nwriters = 0;
		run.arming = &arm;
		if (metadata_write(&outdir, &o, t, &col, &run))
			err = 1;
		if (!o.quiet) {
			if (tty)
				fputc('\n', stderr);
			fprintf(stderr,
				"dial9-bpf: %s after %.1fs: %" PRIu64 " samples from %zu workers "
				"(%" PRIu64 " with stacks), %" PRIu64 " polls probed, %" PRIu64
				" ring-buffer drops; wrote %s/\n",
				run.stop_reason, (run.stopped_ns - run.started_ns) / 1e9,
				col.samples_written, col.nworkers, col.samples_with_stack,
				run.counters[D9_CNT_POLLS], run.counters[D9_CNT_RB_DROPS],
				o.output_dir);
			print_overhead(&arm, &o, &col, &run);
		}
	}
	/* Never leave a half-written output behind a run that did not start. */
	for (size_t i = 0; i < nwriters; i++)
		writers[i].abort(&writers[i]);
	if (!running && dir_created)
		rmdir(o.output_dir);
	out_dir_close(&outdir);
	if (pidfd >= 0)
		close(pidfd);
	ring_buffer__free(rb);
	unwinder_free(col.unw);
	collector_free(&col);
	task_types_free(&types);
	symbolizer_free(sym);
	sampler_bpf__destroy(skel);
	target_close(t);
	arming_free(&arm);
	return err;
}
