// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * bench-writers: throughput and peak memory of each output writer on synthetic samples.
 *
 * Generates STACKS distinct stacks of 10-40 frames named like demangled Rust (a Tokio scheduler
 * root, program frames, a Tokio leaf), then for each sample count N and each format pushes N
 * samples through that writer alone into a fresh directory, finish() included. Each writer runs
 * in its own forked child so that its peak RSS (ru_maxrss from wait4) is its own; the "none"
 * row runs the same generator into no writer, and "writer MiB" is a row's peak minus that
 * baseline, i.e. what the writer itself holds. Samples are generated on the fly, so nothing in
 * the baseline grows with N.
 *
 * Built against every user object but main.o (`make bench-writers`).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>
#include "options.h"
#include "target.h"
#include "util_clock.h"
#include "writer.h"

#define NWORKERS 4
#define RUNTIME_ROOT 7 /* scheduler frames every stack shares, libc's thread start included */
#define NPOOL 2000     /* distinct program function names */
#define SAMPLE_GAP_NS 50000ULL
#define BASE_NS 1000000000000ULL
#define EXE "/usr/local/bin/orders-service"
#define TEXT_BASE 0x555555554000ULL

struct result {
	int err;
	double gen_s, sample_s, finish_s;
	uint64_t bytes;
};

static const char *const root_names[RUNTIME_ROOT] = {
    /* root first; reversed into the leaf-first stacks */
    NULL, /* libc clone3: unnamed, like a stripped libc */
    "<std::sys::thread::unix::Thread>::new::thread_start",
    "core::ops::function::FnOnce::call_once{{vtable.shim}}",
    "std::sys::backtrace::__rust_begin_short_backtrace",
    "tokio::runtime::scheduler::multi_thread::worker::run",
    "tokio::runtime::scheduler::multi_thread::worker::Context::run_task",
    "tokio::runtime::task::harness::Harness<T,S>::poll",
};

static const char *const leaf_names[] = {
    "tokio::runtime::task::waker::clone_waker",
    "<tokio::time::sleep::Sleep as core::future::future::Future>::poll",
    "<tokio::sync::notify::Notified as core::future::future::Future>::poll",
    "tokio::sync::batch_semaphore::Acquire::poll",
    "tokio::runtime::io::scheduled_io::Readiness::poll",
};

static const char *const park_points[] = {"clone_waker", "resource_poll", "wake_by_ref",
					  "resource_poll", "resource_poll"};

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void)
{
	uint64_t x = rng_state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}

struct stack {
	size_t n;
	struct task_frame *frames; /* leaf first */
	int leaf;
};

static char *pool[NPOOL];
static struct stack *stacks;
static size_t nstacks;

/* Names like a service's demangled Rust: crate::module::fn::{{closure}} and Future impls. */
static void make_pool(void)
{
	static const char *const crates[] = {"orders_service", "billing", "inventory", "hyper",
					     "tower",	       "tonic",	  "sqlx",      "reqwest",
					     "tracing",	       "h2"};
	static const char *const mods[] = {
	    "handlers::orders",	   "db::pool",	 "cache::redis",     "client::conn",
	    "proto::h1::dispatch", "service",	 "middleware::auth", "codec::framed",
	    "retry::backoff",	   "query::exec"};
	static const char *const fns[] = {"create_order", "get_user", "fetch_rows", "send_request",
					  "poll_ready",	  "call",     "encode",	    "decode",
					  "acquire",	  "query_as", "handle",	    "read_frame"};
	static const char *const types[] = {"Instrumented", "MapResponseFuture", "PooledConn",
					    "Dispatcher",   "Timeout",		 "Retry"};
	char buf[256];

	for (size_t i = 0; i < NPOOL; i++) {
		const char *c = crates[rnd() % 10], *m = mods[rnd() % 10], *f = fns[rnd() % 12];

		switch (i % 3) {
		case 0:
			snprintf(buf, sizeof(buf), "%s::%s::%s_%zu::{{closure}}", c, m, f, i);
			break;
		case 1:
			snprintf(buf, sizeof(buf),
				 "<%s::%s::%s%zu<F> as core::future::future::Future>::poll", c, m,
				 types[rnd() % 6], i);
			break;
		default:
			snprintf(buf, sizeof(buf), "%s::%s::%s%zu<S,B>::%s", c, m, types[rnd() % 6],
				 i, f);
		}
		pool[i] = strdup(buf);
		if (!pool[i])
			exit(1);
	}
}

static void set_frame(struct task_frame *fr, const char *name, uint64_t fn, uint64_t site)
{
	fr->name = name;
	if (name) {
		fr->module = EXE;
		fr->addr = TEXT_BASE + 0x1000 + fn * 0x400 + (site % 64) * 8;
		fr->file_offset = fr->addr - TEXT_BASE;
	} else {
		fr->module = "/usr/lib/x86_64-linux-gnu/libc.so.6";
		fr->addr = 0x7ffff7c00000ULL + 0x291f4;
		fr->file_offset = 0x291f4;
	}
}

/* Distinct by construction: the frames above the root encode the stack's index. */
static int make_stacks(size_t count)
{
	stacks = calloc(count, sizeof(*stacks));
	if (!stacks)
		return -ENOMEM;
	for (size_t i = 0; i < count; i++) {
		struct stack *s = &stacks[i];
		size_t depth = 10 + rnd() % 31, user = depth - RUNTIME_ROOT - 1;
		uint64_t prev = 0;

		s->n = depth;
		s->frames = calloc(depth, sizeof(*s->frames));
		if (!s->frames)
			return -ENOMEM;
		s->leaf = (int)(rnd() % 5);
		set_frame(&s->frames[0], leaf_names[s->leaf], NPOOL + (uint64_t)s->leaf, i);
		for (size_t j = 0; j < user; j++) {
			/* The two outermost program frames spell i in base NPOOL. */
			uint64_t fn = j == user - 1   ? i % NPOOL
				      : j == user - 2 ? (i / NPOOL) % NPOOL
						      : rnd() % NPOOL;

			set_frame(&s->frames[1 + j], pool[fn], fn, prev);
			prev = fn;
		}
		for (size_t j = 0; j < RUNTIME_ROOT; j++)
			set_frame(&s->frames[depth - 1 - j], root_names[j], NPOOL + 8 + j, j);
	}
	nstacks = count;
	return 0;
}

static void make_sample(uint64_t i, struct task_sample *s)
{
	const struct stack *st = &stacks[rnd() % nstacks];
	static const double probs[] = {1.0, 0.5, 0.1, 0.02, 0.005};
	uint64_t idle = 1000 + rnd() % 2000000;

	memset(s, 0, sizeof(*s));
	s->worker = (int)(i % NWORKERS);
	s->pid = 999;
	s->tid = 1000 + (uint32_t)s->worker;
	s->worker_key = 0x7f0000001000ULL + (uint64_t)s->worker * 0x40;
	s->timestamp_ns = BASE_NS + i * SAMPLE_GAP_NS;
	s->idle_end_ns = s->timestamp_ns - 1000;
	s->idle_start_ns = s->idle_end_ns - idle;
	s->poll_end_ns = s->timestamp_ns + 5000;
	s->epoch = s->idle_end_ns / 1000000000ULL;
	s->task_id_ok = true;
	s->task_id = 1 + rnd() % 5000;
	s->prob = probs[rnd() % 5];
	s->capped = false;
	s->outcome = "pending";
	s->park_point = park_points[st->leaf];
	s->weight_count = (uint64_t)(1.0 / s->prob + 0.5);
	s->weight_idle_ns = (uint64_t)((double)idle / s->prob + 0.5);
	s->nframes = st->n;
	s->frames = st->frames;
}

static double now_s(void)
{
	return (double)mono_ns() / 1e9;
}

static uint64_t dir_bytes(const char *dir)
{
	uint64_t sum = 0;
	struct dirent *de;
	struct stat st;
	DIR *d = opendir(dir);

	while (d && (de = readdir(d))) {
		if (!fstatat(dirfd(d), de->d_name, &st, 0) && S_ISREG(st.st_mode))
			sum += (uint64_t)st.st_size;
	}
	if (d)
		closedir(d);
	return sum;
}

static void remove_dir(const char *dir)
{
	struct dirent *de;
	DIR *d = opendir(dir);

	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.' && (!de->d_name[1] || !strcmp(de->d_name, "..")))
			continue;
		unlinkat(dirfd(d), de->d_name, 0);
	}
	if (d)
		closedir(d);
	rmdir(dir);
}

static const struct {
	const char *name;
	int (*open)(const struct out_dir *dir, struct writer *w);
} formats[] = {
    {"none", NULL},
    {"jsonl", jsonl_writer_open},
    {"jsonl-inline", jsonl_inline_writer_open},
    {"perf", perf_writer_open},
    {"pprof", pprof_writer_open},
    {"folded", folded_writer_open},
    {"flamegraph", flamegraph_writer_open},
};

/* The child: one writer, n samples. */
static struct result run_one(int fmt, const char *dir, uint64_t n)
{
	static struct options o;
	static struct target t;
	struct run_thread threads[NWORKERS];
	struct result res = {};
	struct task_sample s;
	volatile uint64_t sink = 0;
	struct out_dir od;
	struct writer w;
	double t0, t1;
	bool created;

	if (!formats[fmt].open) {
		t0 = now_s();
		for (uint64_t i = 0; i < n; i++) {
			make_sample(i, &s);
			sink += s.weight_count + s.frames[0].addr;
		}
		res.gen_s = now_s() - t0;
		return res;
	}
	o.per_worker_hz = 10;
	o.cap_burst = 20;
	o.seed = 1;
	o.formats = D9_FMT_ALL;
	o.output_dir = dir;
	t.pid = 999;
	snprintf(t.comm, sizeof(t.comm), "orders-service");
	snprintf(t.exe_path, sizeof(t.exe_path), EXE);
	for (int i = 0; i < NWORKERS; i++) {
		threads[i] =
		    (struct run_thread){.pid = 999, .tid = 1000 + (uint32_t)i, .worker = i};
		snprintf(threads[i].comm, sizeof(threads[i].comm), "tokio-runtime-w");
	}
	struct run_context rc = {
	    .opts = &o,
	    .target = &t,
	    .sym = NULL, /* no live process: the writers skip build ids and mappings */
	    .started_ns = BASE_NS,
	    .stopped_ns = BASE_NS + n * SAMPLE_GAP_NS,
	    .realtime_offset_ns = 1700000000ULL * 1000000000ULL,
	    .stop_reason = "duration",
	    .nthreads = NWORKERS,
	    .threads = threads,
	};

	res.err = out_dir_open(&od, dir, &created);
	if (!res.err)
		res.err = formats[fmt].open(&od, &w);
	if (res.err) {
		out_dir_close(&od);
		return res;
	}
	t0 = now_s();
	for (uint64_t i = 0; i < n; i++) {
		make_sample(i, &s);
		if (w.sample(&w, &s) && !res.err)
			res.err = -EIO;
	}
	t1 = now_s();
	res.sample_s = t1 - t0;
	if (res.err)
		w.abort(&w);
	else
		res.err = w.finish(&w, &rc);
	res.finish_s = now_s() - t1;
	res.bytes = dir_bytes(dir);
	out_dir_close(&od);
	return res;
}

static void usage(void)
{
	fprintf(stderr, "usage: bench-writers [-n N[,N...]] [-s STACKS] [-f FORMAT[,FORMAT...]] "
			"[-d DIR] [-k]\n"
			"  -n  sample counts (default 100000,1000000)\n"
			"  -s  distinct stacks (default 10000)\n"
			"  -f  none,jsonl,jsonl-inline,perf,pprof,folded,flamegraph (default all)\n"
			"  -d  where the outputs go (default a new directory in $TMPDIR or /tmp)\n"
			"  -k  keep the outputs\n");
}

/* One format's run in a child of its own, so that its peak RSS is its own. Returns 0 with the
 * child's result (res->err set when it failed) or 1 when no child could run. */
static int run_in_child(size_t f, const char *dir, uint64_t n, struct result *res, double *mib)
{
	struct rusage ru;
	int pfd[2], status;
	pid_t pid;

	if (mkdir(dir, 0755) || pipe(pfd)) {
		fprintf(stderr, "bench-writers: %s: %s\n", dir, strerror(errno));
		return 1;
	}
	fflush(stdout);
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "bench-writers: fork: %s\n", strerror(errno));
		return 1;
	}
	if (!pid) {
		close(pfd[0]);
		*res = run_one((int)f, dir, n);
		if (write(pfd[1], res, sizeof(*res)) != sizeof(*res))
			_exit(1);
		_exit(0);
	}
	close(pfd[1]);
	if (read(pfd[0], res, sizeof(*res)) != sizeof(*res))
		res->err = -EPIPE;
	close(pfd[0]);
	if (wait4(pid, &status, 0, &ru) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
		res->err = res->err ? res->err : -ECHILD;
	*mib = (double)ru.ru_maxrss / 1024.0;
	return 0;
}

static void print_row(size_t f, uint64_t n, const struct result *res, double mib, double base_mib)
{
	double secs;

	if (res->err == -ENOSYS) {
		printf("| %s | %" PRIu64 " | not available | | | | | |\n", formats[f].name, n);
	} else if (res->err) {
		printf("| %s | %" PRIu64 " | failed: %s | | | | | |\n", formats[f].name, n,
		       strerror(-res->err));
	} else if (!f) {
		printf("| none (generator only) | %" PRIu64 " | %.0f | %.2f | | %.1f | | |\n", n,
		       (double)n / res->gen_s, res->gen_s, mib);
	} else {
		secs = res->sample_s + res->finish_s;
		printf("| %s | %" PRIu64 " | %.0f | %.2f | %.2f | %.1f | %.1f | %.1f |\n",
		       formats[f].name, n, (double)n / secs, res->sample_s, res->finish_s, mib,
		       mib - base_mib, (double)res->bytes / (1024.0 * 1024.0));
	}
	fflush(stdout);
}

int main(int argc, char **argv)
{
	const char *counts = "100000,1000000", *want = NULL, *tmp = getenv("TMPDIR");
	char top[PATH_MAX / 2], dir[PATH_MAX];
	size_t nstack = 10000;
	bool keep = false;
	double base_mib = 0;
	int opt;

	while ((opt = getopt(argc, argv, "n:s:f:d:kh")) != -1) {
		switch (opt) {
		case 'n':
			counts = optarg;
			break;
		case 's':
			nstack = strtoul(optarg, NULL, 10);
			break;
		case 'f':
			want = optarg;
			break;
		case 'd':
			tmp = optarg;
			break;
		case 'k':
			keep = true;
			break;
		default:
			usage();
			return opt == 'h' ? 0 : 2;
		}
	}
	if (!nstack || nstack > 100000000) {
		fprintf(stderr, "bench-writers: invalid -s: give 1 to 100000000 stacks\n");
		return 2;
	}
	if (snprintf(top, sizeof(top), "%s/bench-writers-XXXXXX", tmp && *tmp ? tmp : "/tmp") >=
		(int)sizeof(top) ||
	    !mkdtemp(top)) {
		fprintf(stderr, "bench-writers: cannot create a directory in %s: %s\n",
			tmp && *tmp ? tmp : "/tmp", strerror(errno));
		return 1;
	}
	make_pool();
	if (make_stacks(nstack)) {
		fprintf(stderr, "bench-writers: out of memory for %zu stacks\n", nstack);
		return 1;
	}
	printf("%zu distinct stacks of 10-40 frames, %d workers; outputs in %s\n\n", nstack,
	       NWORKERS, top);
	printf("| format | samples | samples/s | sample() s | finish() s | peak RSS MiB | writer "
	       "MiB | output MiB |\n");
	printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
	fflush(stdout);

	for (const char *p = counts; *p;) {
		char *end;
		uint64_t n = strtoull(p, &end, 10);

		if (end == p || !n || (*end && *end != ',')) {
			fprintf(stderr,
				"bench-writers: invalid -n '%s': give counts like "
				"100000,1000000\n",
				counts);
			return 2;
		}
		p = *end ? end + 1 : end;
		for (size_t f = 0; f < sizeof(formats) / sizeof(formats[0]); f++) {
			struct result res = {};
			double mib;

			/* The baseline always runs: writer MiB is relative to it. */
			if (want && f && !strstr(want, formats[f].name))
				continue;
			snprintf(dir, sizeof(dir), "%s/%s-%" PRIu64, top, formats[f].name, n);
			if (run_in_child(f, dir, n, &res, &mib))
				return 1;
			if (!f)
				base_mib = mib;
			print_row(f, n, &res, mib, base_mib);
			if (!keep)
				remove_dir(dir);
		}
	}
	if (!keep)
		rmdir(top);
	return 0;
}
