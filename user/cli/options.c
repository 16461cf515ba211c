// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <argp.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "options.h"
#include "push.h"

const char *argp_program_version = "dial9-bpf " DIAL9_VERSION;

static const char doc[] =
    "Sample where the tasks of a running Tokio process run and park, under per-worker budgets.\n"
    "\n"
    "USAGE: dial9-bpf --pid PID [-d SECS] [-o DIR] [-F HZ] [--rotate SECS]\n"
    "       dial9-bpf --cgroup PATH | --container ID [-d SECS] [-o DIR] [-F HZ]\n"
    "       dial9-bpf report DIR\n"
    "\n"
    "EXAMPLES:\n"
    "  sudo dial9-bpf --pid 1234                 # until Ctrl-C, into ./dial9-out\n"
    "  sudo dial9-bpf --pid 1234 -d 10 -o /tmp/run1\n"
    "  sudo dial9-bpf --pid 1234 -F 50 --cap-burst 200   # 50 samples/s/worker\n"
    "  sudo dial9-bpf --pid 1234 --seed 42       # reproducible selection\n"
    "  sudo dial9-bpf --pid 1234 --format perf,folded\n"
    "  sudo dial9-bpf --pid 1234 --inline-stacks  # whole stacks in each\n"
    "                     # samples.jsonl line, for jq (no stacks.jsonl)\n"
    "  sudo dial9-bpf --pid 1234 --long-poll-ms 50   # only polls that hold a\n"
    "                     # worker 50 ms or more in long_polls.jsonl\n"
    "  sudo dial9-bpf --pid 1234 --overhead-budget 100  # every poll: costly\n"
    "  sudo dial9-bpf --cgroup system.slice/api.service -d 30 -o /tmp/svc\n"
    "                     # each Tokio process in it (and later ones) into\n"
    "                     # /tmp/svc/pid-PID/, a list in /tmp/svc/processes.json\n"
    "  sudo dial9-bpf --container 3f2a9c1b7d4e   # docker/containerd id or prefix\n"
    "  sudo dial9-bpf --pid 1234 --rotate 3600 --keep 24 -o /var/lib/dial9\n"
    "                     # until Ctrl-C, one complete folder per hour in\n"
    "                     # /var/lib/dial9/<UTC start>/, the newest 24 kept,\n"
    "                     # /var/lib/dial9/latest links to the newest\n"
    "  dial9-bpf report /var/lib/dial9/latest    # the last complete hour\n"
    "  dial9-bpf report /tmp/run1                # summary of a previous run\n"
    "\n"
    "PUSH (to a Grafana Pyroscope server, or Alloy's pyroscope.receive_http):\n"
    "  sudo dial9-bpf --pid 1234 --push http://pyroscope:4040\n"
    "                     # every 15 s, that interval's profile to URL/ingest\n"
    "  sudo dial9-bpf --pid 1234 --push https://prof.example.com --service api \\\n"
    "    --label env=prod --push-header 'X-Scope-OrgID: team-a' \\\n"
    "    --push-header 'Authorization: Bearer TOKEN' --push-interval 30\n"
    "  sudo dial9-bpf --cgroup system.slice/api.service \\\n"
    "    --push http://pyroscope:4040   # one series per process (label pid)\n"
    "  Unsent intervals wait in OUTPUT/push-spool (--spool-dir, at most\n"
    "  --spool-mb) and go, oldest first, once the server answers.\n"
    "\n"
    "STRIPPED BINARIES (symbols from a separate debug file, build id checked):\n"
    "  sudo dial9-bpf --pid 1234 --symbols /tmp/app.debug\n"
    "  sudo dial9-bpf --pid 1234 --debug-dir /opt/debug\n"
    "                     # /opt/debug/.build-id/xx/yyyy.debug, as /usr/lib/debug\n"
    "  DEBUGINFOD_URLS=https://debuginfod.example.com \\\n"
    "    sudo --preserve-env=DEBUGINFOD_URLS dial9-bpf --pid 1234\n"
    "  Searched in order: --symbols, the build-id tree under --debug-dir\n"
    "  (default /usr/lib/debug), the .gnu_debuglink file beside the binary\n"
    "  (CRC checked), a debuginfod server (DEBUGINFOD_URLS; DEBUGINFOD_TIMEOUT\n"
    "  bounds the wait, default 20 s; DEBUGINFOD_CACHE_PATH its cache).\n"
    "\n"
    "OUTPUT:\n"
    "  Run through sudo, the files (and the directory, if the run made it)\n"
    "  belong to the invoking user (SUDO_UID/SUDO_GID), who reads them\n"
    "  without root. DIR must belong to you or root and not be group- or\n"
    "  world-writable without the sticky bit; a file planted under an\n"
    "  output's name is replaced, never written through.\n"
    "\n"
    "ENVIRONMENT (flags win):\n"
    "  DIAL9_TASK_SAMPLING_ENABLED=0|1         0 refuses to sample\n"
    "  DIAL9_TASK_SAMPLING_PER_WORKER_HZ=N     default for --per-worker-hz\n";

enum {
	OPT_CAP_BURST = 0x100,
	OPT_SEED,
	OPT_FORMAT,
	OPT_OVERHEAD,
	OPT_UNWIND,
	OPT_STACK_SIZE,
	OPT_CGROUP,
	OPT_CONTAINER,
	OPT_NO_TASK_ROOT,
	OPT_INLINE_STACKS,
	OPT_SYMBOLS,
	OPT_DEBUG_DIR,
	OPT_LONG_POLL_MS,
	OPT_ROTATE,
	OPT_KEEP,
	OPT_PUSH,
	OPT_PUSH_INTERVAL,
	OPT_SERVICE,
	OPT_LABEL,
	OPT_PUSH_HEADER,
	OPT_SPOOL_MB,
	OPT_SPOOL_DIR,
	OPT_CPU_HZ,
};

static const struct argp_option argp_opts[] = {
    {"pid", 'p', "PID", 0, "Process to sample (this, --cgroup or --container is required)", 0},
    {"cgroup", OPT_CGROUP, "PATH", 0,
     "Sample every Tokio process in this cgroup v2 and its descendants, including processes "
     "started or exec'd later (PATH: a directory, or relative to the cgroup2 mount)",
     0},
    {"container", OPT_CONTAINER, "ID", 0,
     "Like --cgroup, for the cgroup whose path in /proc/*/cgroup has the component ID (or a "
     "64-hex id starting with ID): a docker/containerd id, a pod or unit name",
     0},
    {"duration", 'd', "SECS", 0, "Stop after SECS seconds (default: until Ctrl-C)", 0},
    {"output", 'o', "DIR", 0, "Output directory (default: dial9-out)", 0},
    {"rotate", OPT_ROTATE, "SECS", 0,
     "Continuous mode: every SECS seconds, a complete set of outputs in DIR/<UTC start>/ "
     "(each one readable by `dial9-bpf report`), until --duration ends or Ctrl-C",
     0},
    {"keep", OPT_KEEP, "N", 0,
     "With --rotate: keep the newest N folders, removing the oldest once a new one is "
     "complete (default 24); disk use is at most N + 1 intervals' outputs",
     0},
    {"per-worker-hz", 'F', "N", 0, "Samples per second per worker (default 10)", 0},
    {"long-poll-ms", OPT_LONG_POLL_MS, "MS", 0,
     "Write every poll that holds its worker MS or more to long_polls.jsonl (default 10; "
     "0: off; the kernel's scheduler tick and a scheduler hook, counted in the budget)",
     0},
    {"cpu-hz", OPT_CPU_HZ, "N", 0,
     "On-CPU samples (default 19; 0: off): clock ticks per second of a target thread's CPU "
     "time, each tick on a worker a sample of kind cpu naming the task it ran",
     0},
    {"cap-burst", OPT_CAP_BURST, "N", 0, "Hard cap: token bucket burst (default 4 x hz)", 0},
    {"seed", OPT_SEED, "N", 0, "Seed for the sampler's random selection", 0},
    {"overhead-budget", OPT_OVERHEAD, "PCT", 0,
     "Max share of the target's CPU that probe hits and this tool may cost; probes are "
     "attached in random windows to keep to it (default 1; 100 = probe every poll)",
     0},
    {"unwind", OPT_UNWIND, "MODE", 0,
     "fp, dwarf, ebpf or auto (default: fp if the target keeps frame pointers, else ebpf); "
     "ebpf walks the stack in the kernel with tables built at start from .eh_frame: "
     "whole stacks without frame pointers at a few us a sample; dwarf copies the stack "
     "for libdw and perf to unwind",
     0},
    {"stack-size", OPT_STACK_SIZE, "BYTES", 0,
     "User stack copied per sample for dwarf unwinding (default 16384, max 32768)", 0},
    {"format", OPT_FORMAT, "LIST", 0,
     "Outputs, comma separated: jsonl,perf,pprof,folded,flamegraph or all (default all)", 0},
    {"no-task-root", OPT_NO_TASK_ROOT, NULL, 0,
     "Leave out the root frame naming each sample's task future (\"task: my_app::handler::"
     "{{closure}}\") in pprof, folded and the flamegraph",
     0},
    {"inline-stacks", OPT_INLINE_STACKS, NULL, 0,
     "Write samples.jsonl as one JSON object per sample with its whole stack (~4-16 KB a "
     "sample) instead of rows naming stacks.jsonl's records (~200 B a sample)",
     0},
    {"symbols", OPT_SYMBOLS, "FILE|DIR", 0,
     "A stripped target's debug file, or a directory of debug files searched by build id "
     "(.build-id/xx/yyyy.debug) and name (NAME.debug); it must carry the target's build id",
     0},
    {"debug-dir", OPT_DEBUG_DIR, "DIR", 0,
     "Root of the build-id tree and of .gnu_debuglink's global directory (default "
     "/usr/lib/debug)",
     0},
    {"push", OPT_PUSH, "URL", 0,
     "Send each interval's profile to a Pyroscope-compatible server at URL/ingest (http or "
     "https; see docs/push.md)",
     0},
    {"push-interval", OPT_PUSH_INTERVAL, "SECS", 0,
     "Seconds per pushed profile, from 1 to 3600 (default 15)", 0},
    {"service", OPT_SERVICE, "NAME", 0,
     "The pushed series' service_name (default: the target's executable name)", 0},
    {"label", OPT_LABEL, "K=V", 0,
     "Add a label to the pushed series (repeatable; host, pid, container_id and pod_uid "
     "are set already)",
     0},
    {"push-header", OPT_PUSH_HEADER, "'K: V'", 0,
     "Send this HTTP header with every push, e.g. 'X-Scope-OrgID: team' or "
     "'Authorization: Bearer TOKEN' (repeatable)",
     0},
    {"spool-mb", OPT_SPOOL_MB, "MB", 0,
     "Keep at most MB of unsent intervals on disk, dropping the oldest (default 64)", 0},
    {"spool-dir", OPT_SPOOL_DIR, "DIR", 0,
     "Where unsent intervals wait (default OUTPUT/push-spool); a later run with the same "
     "spool sends what is left",
     0},
    {"verbose", 'v', NULL, 0, "Print probe and symbol details", 0},
    {"quiet", 'q', NULL, 0, "No status line", 0},
    {},
};

/* Strict unsigned parse: digits only, no sign, no trailing junk, no overflow. */
static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end)
		return -EINVAL;
	*out = v;
	return 0;
}

/* One line naming the problem and the fix; argp_error would add a second "Try --help" line. */
#define bad_usage(...)                                                                             \
	do {                                                                                       \
		fprintf(stderr, "dial9-bpf: " __VA_ARGS__);                                        \
		fputc('\n', stderr);                                                               \
		return EINVAL;                                                                     \
	} while (0)

static int parse_formats(const char *arg, unsigned int *out)
{
	static const struct {
		const char *name;
		unsigned int bit;
	} names[] = {
	    {"jsonl", D9_FMT_JSONL},	       {"perf", D9_FMT_PERF},
	    {"pprof", D9_FMT_PPROF},	       {"folded", D9_FMT_FOLDED},
	    {"flamegraph", D9_FMT_FLAMEGRAPH}, {"all", D9_FMT_ALL},
	};
	const char *p = arg;

	*out = 0;
	while (*p) {
		size_t len = strcspn(p, ",");
		size_t i;

		for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (strlen(names[i].name) == len && !strncmp(p, names[i].name, len))
				break;
		if (i == sizeof(names) / sizeof(names[0]))
			return -EINVAL;
		*out |= names[i].bit;
		p += len;
		if (*p == ',')
			p++;
	}
	return *out ? 0 : -EINVAL;
}

/* Strict decimal parse: the whole string, no overflow; the caller checks the range. */
static int parse_f64(const char *s, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(s, &end);
	return errno || *end || end == s ? -EINVAL : 0;
}

/* What to sample: one process or a cgroup's, and where a stripped one's symbols are. */
static error_t parse_target_arg(int key, char *arg, struct options *o)
{
	uint64_t v;

	switch (key) {
	case 'p':
		if (parse_u64(arg, &v) || v == 0 || v > 4194304)
			bad_usage("invalid --pid '%s': give the numeric id of a running process",
				  arg);
		o->pid = (int)v;
		break;
	case OPT_CGROUP:
		if (!*arg)
			bad_usage("invalid --cgroup '': give a cgroup directory");
		o->cgroup_path = arg;
		break;
	case OPT_CONTAINER:
		if (!*arg || strchr(arg, '\n'))
			bad_usage("invalid --container '%s': give a container id or a cgroup path "
				  "component",
				  arg);
		o->container_id = arg;
		break;
	case OPT_SYMBOLS:
		if (!*arg)
			bad_usage("invalid --symbols '': give a debug file or a directory of them");
		o->debuginfo.symbols = arg;
		break;
	case OPT_DEBUG_DIR:
		if (!*arg)
			bad_usage(
			    "invalid --debug-dir '': give a directory such as /usr/lib/debug");
		o->debuginfo.debug_dir = arg;
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

/* How much and how long: the sampling rate, its cap, the seed, the overhead budget. */
static error_t parse_sampling_arg(int key, char *arg, struct options *o)
{
	uint64_t v;

	switch (key) {
	case 'd':
		if (parse_f64(arg, &o->duration_s) || !(o->duration_s >= 0) || o->duration_s > 1e7)
			bad_usage("invalid --duration '%s': give seconds (0 = until Ctrl-C)", arg);
		break;
	case 'F':
		if (parse_u64(arg, &v) || v == 0 || v > D9_MAX_HZ)
			bad_usage("invalid --per-worker-hz '%s': give an integer from 1 to %llu",
				  arg, D9_MAX_HZ);
		o->per_worker_hz = v;
		break;
	case OPT_CAP_BURST:
		if (parse_u64(arg, &v) || v == 0 || v > D9_MAX_BURST)
			bad_usage("invalid --cap-burst '%s': give an integer from 1 to %llu", arg,
				  D9_MAX_BURST);
		o->cap_burst = v;
		break;
	case OPT_LONG_POLL_MS:
		if (parse_u64(arg, &v) || v > D9_MAX_LONG_POLL_MS)
			bad_usage("invalid --long-poll-ms '%s': give milliseconds from 0 (off) to "
				  "%llu",
				  arg, D9_MAX_LONG_POLL_MS);
		o->long_poll_ms = v;
		break;
	case OPT_CPU_HZ:
		if (parse_u64(arg, &v) || v > D9_MAX_CPU_HZ)
			bad_usage("invalid --cpu-hz '%s': give an integer from 0 (off) to %llu",
				  arg, D9_MAX_CPU_HZ);
		o->cpu_hz = v;
		break;
	case OPT_SEED:
		if (parse_u64(arg, &v))
			bad_usage("invalid --seed '%s': give a non-negative integer", arg);
		o->seed = v;
		o->seed_set = true;
		break;
	case OPT_OVERHEAD:
		if (parse_f64(arg, &o->overhead_budget) || !(o->overhead_budget > 0) ||
		    o->overhead_budget > 100)
			bad_usage("invalid --overhead-budget '%s': give a percentage in (0, 100]",
				  arg);
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

/* What a sample carries and where it is written: stacks, formats, the output directory. */
static error_t parse_output_arg(int key, char *arg, struct options *o)
{
	uint64_t v;

	switch (key) {
	case 'o':
		if (!*arg)
			bad_usage("invalid --output '': give a directory path");
		o->output_dir = arg;
		break;
	case OPT_UNWIND:
		if (!strcmp(arg, "fp"))
			o->unwind = D9_UNWIND_FP;
		else if (!strcmp(arg, "dwarf"))
			o->unwind = D9_UNWIND_DWARF;
		else if (!strcmp(arg, "ebpf"))
			o->unwind = D9_UNWIND_EBPF;
		else if (!strcmp(arg, "auto"))
			o->unwind = D9_UNWIND_AUTO;
		else
			bad_usage("invalid --unwind '%s': use fp, dwarf, ebpf or auto", arg);
		break;
	case OPT_STACK_SIZE:
		if (parse_u64(arg, &v) || v < 512 || v > 32768 || (v & 7))
			bad_usage(
			    "invalid --stack-size '%s': give a multiple of 8 from 512 to 32768",
			    arg);
		o->stack_size = (uint32_t)v;
		break;
	case OPT_FORMAT:
		if (parse_formats(arg, &o->formats))
			bad_usage(
			    "invalid --format '%s': use a comma-separated list of jsonl, perf, "
			    "pprof, folded, flamegraph or all",
			    arg);
		break;
	case OPT_NO_TASK_ROOT:
		o->no_task_root = true;
		break;
	case OPT_ROTATE:
		if (parse_u64(arg, &v) || v == 0 || v > D9_MAX_ROTATE_S)
			bad_usage("invalid --rotate '%s': give seconds per folder from 1 to %llu",
				  arg, D9_MAX_ROTATE_S);
		o->rotate_s = v;
		break;
	case OPT_KEEP:
		if (parse_u64(arg, &v) || v == 0 || v > D9_MAX_KEEP)
			bad_usage("invalid --keep '%s': give a number of folders from 1 to %llu",
				  arg, D9_MAX_KEEP);
		o->keep = v;
		break;
	case OPT_INLINE_STACKS:
		o->inline_stacks = true;
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

/* Appends arg to a repeatable option's list. */
static int add_listed(const char **list, size_t *n, const char *arg)
{
	if (*n == D9_PUSH_MAX_LIST)
		return -E2BIG;
	list[(*n)++] = arg;
	return 0;
}

/* --push and its companions: where profiles go, how they are labelled and kept. */
static error_t parse_push_arg(int key, char *arg, struct options *o)
{
	struct push_opts *p = &o->push;
	const char *why;
	uint64_t v;

	switch (key) {
	case OPT_PUSH:
		if ((why = push_check_url(arg)))
			bad_usage("invalid --push '%s': %s", arg, why);
		p->url = arg;
		break;
	case OPT_PUSH_INTERVAL:
		if (parse_u64(arg, &v) || v == 0 || v > D9_MAX_PUSH_INTERVAL)
			bad_usage("invalid --push-interval '%s': give whole seconds from 1 to %d",
				  arg, D9_MAX_PUSH_INTERVAL);
		p->interval_s = (unsigned int)v;
		break;
	case OPT_SERVICE:
		if ((why = push_check_service(arg)))
			bad_usage("invalid --service '%s': %s", arg, why);
		p->service = arg;
		break;
	case OPT_LABEL:
		if ((why = push_check_label(arg)))
			bad_usage("invalid --label '%s': %s", arg, why);
		if (add_listed(p->labels, &p->nlabels, arg))
			bad_usage("too many --label: at most %d", D9_PUSH_MAX_LIST);
		break;
	case OPT_PUSH_HEADER:
		if ((why = push_check_header(arg)))
			bad_usage("invalid --push-header '%s': %s", arg, why);
		if (add_listed(p->headers, &p->nheaders, arg))
			bad_usage("too many --push-header: at most %d", D9_PUSH_MAX_LIST);
		break;
	case OPT_SPOOL_MB:
		if (parse_u64(arg, &v) || v == 0 || v > D9_MAX_SPOOL_MB)
			bad_usage("invalid --spool-mb '%s': give megabytes from 1 to %llu", arg,
				  D9_MAX_SPOOL_MB);
		p->spool_mb = v;
		break;
	case OPT_SPOOL_DIR:
		if (!*arg)
			bad_usage("invalid --spool-dir '': give a directory path");
		p->spool_dir = arg;
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

static error_t parse_arg(int key, char *arg, struct argp_state *state)
{
	static error_t (*const groups[])(int, char *, struct options *) = {
	    parse_target_arg, parse_sampling_arg, parse_output_arg, parse_push_arg};
	struct options *o = state->input;
	size_t i;

	for (i = 0; i < sizeof(groups) / sizeof(groups[0]); i++) {
		error_t err = groups[i](key, arg, o);

		if (err != ARGP_ERR_UNKNOWN)
			return err;
	}
	switch (key) {
	case 'v':
		o->verbose = true;
		break;
	case 'q':
		o->quiet = true;
		break;
	case ARGP_KEY_ARG:
		bad_usage("unexpected argument '%s'", arg);
		break;
	case ARGP_KEY_END:
		if (!!o->pid + !!o->cgroup_path + !!o->container_id > 1)
			bad_usage("--pid, --cgroup and --container exclude each other: give one");
		if (!o->push.url && (o->push.service || o->push.nlabels || o->push.nheaders ||
				     o->push.spool_dir || o->push.spool_mb || o->push.interval_s))
			bad_usage("--service, --label, --push-header, --push-interval and the "
				  "spool options need --push URL");
		if (!o->pid && !o->cgroup_path && !o->container_id)
			bad_usage("missing --pid: give the process id of the Tokio program (or "
				  "--cgroup PATH or --container ID for every Tokio process in a "
				  "cgroup)");
		if (o->keep && !o->rotate_s)
			bad_usage("--keep needs --rotate SECS: give both, or neither");
		if (o->rotate_s && (o->cgroup_path || o->container_id))
			bad_usage("--rotate works with --pid only: run one dial9-bpf --pid PID "
				  "--rotate per process");
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

/* Environment defaults. A bad value is an error, not silently ignored: the user set it. */
static int env_defaults(struct options *o)
{
	const char *en = getenv("DIAL9_TASK_SAMPLING_ENABLED");
	const char *hz = getenv("DIAL9_TASK_SAMPLING_PER_WORKER_HZ");
	uint64_t v;

	if (en && *en) {
		if (!strcmp(en, "0") || !strcasecmp(en, "false")) {
			fprintf(stderr,
				"dial9-bpf: task sampling is disabled by "
				"DIAL9_TASK_SAMPLING_ENABLED=%s: unset it or set it to 1\n",
				en);
			return 1;
		}
		if (strcmp(en, "1") && strcasecmp(en, "true")) {
			fprintf(stderr,
				"dial9-bpf: invalid DIAL9_TASK_SAMPLING_ENABLED='%s': use 1 or 0\n",
				en);
			return 2;
		}
	}
	if (hz && *hz) {
		if (parse_u64(hz, &v) || v == 0 || v > D9_MAX_HZ) {
			fprintf(stderr,
				"dial9-bpf: invalid DIAL9_TASK_SAMPLING_PER_WORKER_HZ='%s': use an "
				"integer from 1 to %llu\n",
				hz, D9_MAX_HZ);
			return 2;
		}
		o->per_worker_hz = v;
	}
	return 0;
}

int options_parse(int argc, char **argv, struct options *o)
{
	static const struct argp argp = {argp_opts, parse_arg, NULL, doc, NULL, NULL, NULL};
	int err;

	memset(o, 0, sizeof(*o));
	o->output_dir = "dial9-out";
	o->formats = D9_FMT_ALL;
	if (argc >= 2 && !strcmp(argv[1], "report")) {
		if (argc != 3 || argv[2][0] == '-') {
			fprintf(stderr, "dial9-bpf: usage: dial9-bpf report DIR (the --output "
					"directory of a previous run)\n");
			return 2;
		}
		o->command = D9_CMD_REPORT;
		o->report_dir = argv[2];
		return 0;
	}
	o->per_worker_hz = 10;
	/* Its clock tick and scheduler hook cost every second, windows or not, about 0.1% of a
	 * busy CPU (bench/RESULTS.md, "The defaults"): cheap enough that no blocking poll is
	 * missed by default. */
	o->long_poll_ms = D9_DEFAULT_LONG_POLL_MS;
	o->cpu_hz = D9_DEFAULT_CPU_HZ;
	o->stack_size = 16384;
	/* A busy worker polls 100k+ times a second and every probe hit costs ~1 us: probing
	 * every poll can double what a poll costs, so by default the probes are attached only
	 * in random windows that cost at most 1% (see arming.h). */
	o->overhead_budget = 1;
	err = env_defaults(o);
	if (err)
		return err;
	err = argp_parse(&argp, argc, argv, 0, NULL, o);
	if (err)
		return 2;
	if (!o->cap_burst)
		o->cap_burst = 4 * o->per_worker_hz;
	if (o->rotate_s && !o->keep)
		o->keep = D9_DEFAULT_KEEP;
	if (!o->push.interval_s)
		o->push.interval_s = 15;
	if (!o->push.spool_mb)
		o->push.spool_mb = 64;
	return 0;
}
