/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Command line and environment options of dial9-bpf, validated in one place. */
#ifndef D9_OPTIONS_H
#define D9_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>
#include "debuginfo.h"

enum d9_command {
	D9_CMD_RECORD = 0,
	D9_CMD_REPORT, /* dial9-bpf report DIR */
};

enum d9_format {
	D9_FMT_JSONL = 1 << 0,
	D9_FMT_PERF = 1 << 1,
	D9_FMT_PPROF = 1 << 2,
	D9_FMT_FOLDED = 1 << 3,
	D9_FMT_FLAMEGRAPH = 1 << 4,
	D9_FMT_ALL = (1 << 5) - 1,
};

/* --push and its companions (user/push/push.h). */
#define D9_PUSH_MAX_LIST 16
struct push_opts {
	const char *url;		      /* --push: the server's base URL; NULL: off */
	unsigned int interval_s;	      /* --push-interval */
	const char *service;		      /* --service; NULL: the target's executable name */
	const char *labels[D9_PUSH_MAX_LIST]; /* --label k=v */
	size_t nlabels;
	const char *headers[D9_PUSH_MAX_LIST]; /* --push-header 'K: V' */
	size_t nheaders;
	uint64_t spool_mb;     /* --spool-mb */
	const char *spool_dir; /* --spool-dir; NULL: OUTPUT/push-spool */
};

struct options {
	enum d9_command command;
	int pid;
	double duration_s; /* 0 = until SIGINT/SIGTERM or target exit */
	const char *output_dir;
	unsigned int formats; /* enum d9_format bits */
	const char *report_dir;
	uint64_t per_worker_hz;
	uint64_t cap_burst; /* token bucket size in samples; default 2 x hz */
	bool seed_set;
	uint64_t seed;
	enum { D9_UNWIND_AUTO, D9_UNWIND_FP, D9_UNWIND_DWARF, D9_UNWIND_EBPF } unwind;
	uint32_t stack_size;	/* bytes of user stack copied for DWARF unwinding */
	double overhead_budget; /* percent of the target's CPU the probes may cost; 100 = always */
	bool verbose;
	bool quiet;
	bool no_task_root;  /* leave out the "task: FUTURE" root frame of every stack */
	bool inline_stacks; /* samples.jsonl in the inline layout (no stacks.jsonl) */
	uint64_t
	    long_poll_ms; /* polls holding a worker this long go to long_polls.jsonl; 0 = off */
	uint64_t cpu_hz;  /* on-CPU samples: clock ticks per second per CPU; 0 = off */
	/* --rotate: one complete output folder per rotate_s seconds in DIR/<start>/, the newest
	 * `keep` kept (rotate.h); 0 = one set of outputs in DIR. */
	uint64_t rotate_s;
	uint64_t keep;
	/* A stripped target's debug file: --symbols FILE|DIR, --debug-dir (debuginfo.h). */
	struct debuginfo_opts debuginfo;

	/* Supervisor mode (cgroup_watch.c) instead of --pid: every Tokio process in a cgroup. */
	const char *cgroup_path;  /* --cgroup */
	const char *container_id; /* --container: the cgroup found from /proc/PID/cgroup lines */

	struct push_opts push;
};

/* Largest per-worker rate accepted: beyond this a sample per eligible transition is the
 * whole stream and the "budget" no longer bounds anything. */
#define D9_MAX_HZ 100000ULL
#define D9_MAX_BURST 1000000ULL
#define D9_MAX_LONG_POLL_MS 3600000ULL
#define D9_MAX_ROTATE_S 604800ULL /* a week */
#define D9_MAX_KEEP 100000ULL
#define D9_DEFAULT_KEEP 24
#define D9_MAX_PUSH_INTERVAL 3600
#define D9_MAX_SPOOL_MB 1048576ULL
#define D9_MAX_CPU_HZ 10000ULL
/* On-CPU samples by default: ~20 a second per busy worker, each ~20 us in fp mode and ~250 us
 * with DWARF unwinding (bench/RESULTS.md): under 0.5% of a worker's CPU either way. */
#define D9_DEFAULT_CPU_HZ 19
/* Long polls by default: what blocks a worker for 10 ms is what users ask for first. */
#define D9_DEFAULT_LONG_POLL_MS 10

/*
 * Parses argv over defaults taken from DIAL9_TASK_SAMPLING_ENABLED and
 * DIAL9_TASK_SAMPLING_PER_WORKER_HZ (flags win). Returns 0 on success, or prints one line to
 * stderr and returns a non-zero exit code (2 for bad usage).
 */
int options_parse(int argc, char **argv, struct options *opts);

#endif
