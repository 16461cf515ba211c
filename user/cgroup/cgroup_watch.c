// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * --cgroup PATH / --container ID: a supervisor that profiles every Tokio process in a cgroup
 * and its descendants, including processes that start or exec while it runs.
 *
 * One child `dial9-bpf --pid PID` (this executable, /proc/self/exe) per process, each writing
 * OUTDIR/pid-PID[-N]/, rather than one sampler attached to many processes, because:
 * - everything after the BPF program is per process: the uprobes sit on one executable's
 *   inode, and the symbolizer, DWARF unwinder, task-id layout check, perf.data mmap events and
 *   pprof mappings all describe one address space. Each process has its own binary, mappings
 *   and build ids, so per-process directories keep every format consistent; samples.jsonl
 *   carries pid and tid for anyone who wants to merge them;
 * - the --pid run already handles the target exiting, exec'ing and signals, and finishes its
 *   outputs in each case; a failure profiling one process costs only that process's profile;
 * - the price is one BPF object, ring buffer and calibration (about a second) per process:
 *   right for the few Tokio processes of a container or service, not for hundreds.
 * Discovery polls cgroup.procs of the cgroup and every descendant every POLL_MS rather than
 * following fork/exec events (a BPF tracepoint, the netlink proc connector): it needs no more
 * privilege or kernel support than --pid, and a process living less than POLL_MS would not
 * outlive its profiler's start anyway. An exec is found the same way: the child stops with
 * stop_reason target_exec (or a skipped process's /proc/PID/exe names another inode) and the
 * pid is classified again; its next profile goes to pid-PID-2, -3, ...
 *
 * Children run in their own process group, so a terminal's Ctrl-C reaches only the
 * supervisor, which forwards it to each child once that child catches the signal (SigCgt in
 * /proc/CHILD/status): a child still starting would otherwise die of the default action and
 * leave *.tmp files. Their stderr is relayed line by line with a [pid-PID] prefix.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/magic.h>
#include <json-c/json.h>
#include "cgroup_resolve.h"
#include "cgroup_watch.h"
#include "json.h"
#include "options.h"
#include "out_dir.h"
#include "privs.h"
#include "push.h"
#include "target.h"
#include "util_clock.h"
#include "util_proc.h"

#define POLL_MS 250
/* No new profile this close to the end: it would not get past its start (~1 s). */
#define MIN_PROFILE_NS (500ULL * 1000 * 1000)
#define RELAY_LINE_MAX 1024
#define TREE_DEPTH_MAX 64 /* v2 nesting is bounded by cgroup.max.depth, v1 by nothing */
#define SKIPPED_MAX 1000  /* listed in processes.json; a busy cgroup forks more, counted */

struct profile {
	int pid, ns_pid;
	pid_t child; /* 0 once reaped */
	int relay_fd;
	bool signalled;
	char subdir[32];
	char comm[17];
	char *exe, *cgroup;
	uint64_t started_real_ns, stopped_real_ns;
	int exit_code; /* 128 + signal when killed */
	bool failed;   /* non-zero exit while its target still ran */
	char stop_reason[32];
	uint64_t samples;
	size_t linelen;
	char line[RELAY_LINE_MAX];
};

struct proc_ent {
	int pid;
	uint64_t start_ticks;	   /* /proc/PID/stat starttime: tells a reused pid apart */
	uint64_t exe_dev, exe_ino; /* the executable last classified; 0: classify again */
	bool running, seen;
};

struct skipped {
	int pid;
	char *exe;
	const char *why;
};

/* Classification per executable inode: processes of one binary are checked once. */
struct exe_class {
	uint64_t dev, ino;
	int tokio;
	const char *why;
};

struct watch {
	const struct options *o;
	const char *argv0;
	char cgroup[PATH_MAX];
	int cgroup_fd;
	uint64_t deadline_ns; /* CLOCK_MONOTONIC; UINT64_MAX: none */
	struct profile *prof;
	size_t nprof, profcap;
	struct proc_ent *procs;
	size_t nprocs, proccap;
	struct skipped *skip;
	size_t nskip, skipcap, nskip_total;
	struct exe_class *cls;
	size_t ncls, clscap;
	int errors;
	struct out_dir out;
};

static volatile sig_atomic_t last_signal, nsignals;

static void on_signal(int sig)
{
	last_signal = sig;
	nsignals++;
}

/* Grows an array of elem-sized items to hold one more; false when out of memory. */
static bool grow(void **arr, size_t *cap, size_t n, size_t elem)
{
	size_t ncap = *cap ? *cap * 2 : 16;
	void *p;

	if (n < *cap)
		return true;
	p = realloc(*arr, ncap * elem);
	if (!p)
		return false;
	*arr = p;
	*cap = ncap;
	return true;
}

/* --- processes ------------------------------------------------------------------------ */

static uint64_t proc_start_ticks(int pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ticks = 0;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	p = strrchr(buf, ')');
	/* After the comm: state is field 3, starttime field 22. */
	if (!p || sscanf(p + 1,
			 " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
			 "%*d %*d %*d %llu",
			 &ticks) != 1)
		return 0;
	return ticks;
}

/* The pid as the process's own (innermost) pid namespace sees it; 0 if unknown. */
static int proc_ns_pid(int pid)
{
	char path[64], line[256];
	int ns = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "NSpid:", 6)) {
			char *last = strrchr(line, '\t');

			ns = last ? atoi(last + 1) : 0;
			break;
		}
	}
	fclose(f);
	return ns;
}

/* Whether the child has installed a handler for sig: forwarding before that would kill it
 * mid-start. */
static bool catches(pid_t child, int sig)
{
	char path[64], line[256];
	unsigned long long mask = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)child);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "SigCgt: %llx", &mask) == 1)
			break;
	fclose(f);
	return mask & (1ULL << (sig - 1));
}

static struct proc_ent *proc_get(struct watch *w, int pid, bool add)
{
	for (size_t i = 0; i < w->nprocs; i++)
		if (w->procs[i].pid == pid)
			return &w->procs[i];
	if (!add || !grow((void **)&w->procs, &w->proccap, w->nprocs, sizeof(*w->procs)))
		return NULL;
	w->procs[w->nprocs] = (struct proc_ent){.pid = pid, .start_ticks = proc_start_ticks(pid)};
	return &w->procs[w->nprocs++];
}

static bool is_our_child(const struct watch *w, int pid)
{
	for (size_t i = 0; i < w->nprof; i++)
		if (w->prof[i].child == pid)
			return true;
	return pid == getpid();
}

static int classify(struct watch *w, const struct stat *st, const char *exe_link, const char **why)
{
	int r;

	for (size_t i = 0; i < w->ncls; i++)
		if (w->cls[i].dev == st->st_dev && w->cls[i].ino == st->st_ino) {
			*why = w->cls[i].why;
			return w->cls[i].tokio;
		}
	*why = NULL;
	r = target_exe_is_tokio(exe_link, &w->o->debuginfo, why);
	if (r >= 0 && grow((void **)&w->cls, &w->clscap, w->ncls, sizeof(*w->cls)))
		w->cls[w->ncls++] = (struct exe_class){st->st_dev, st->st_ino, r, *why};
	return r;
}

static char *read_link(const char *link)
{
	char buf[PATH_MAX];
	ssize_t n = readlink(link, buf, sizeof(buf) - 1);

	if (n < 0)
		return strdup("?");
	buf[n] = 0;
	return strdup(buf);
}

static void note_skipped(struct watch *w, int pid, const char *exe_link, const char *why)
{
	char *exe = read_link(exe_link);
	bool stripped = !strncmp(why, "stripped", 8);

	/* A stripped Tokio program is most likely one the user meant to profile: always say. */
	if ((w->o->verbose || stripped) && exe)
		fprintf(stderr, "dial9-bpf: pid %d (%s) in the cgroup: %s; skipped%s\n", pid, exe,
			why,
			stripped ? " (give its debug file: --symbols, --debug-dir, .gnu_debuglink "
				   "or DEBUGINFOD_URLS)"
				 : "");
	w->nskip_total++;
	if (exe && w->nskip < SKIPPED_MAX &&
	    grow((void **)&w->skip, &w->skipcap, w->nskip, sizeof(*w->skip)))
		w->skip[w->nskip++] = (struct skipped){pid, exe, why};
	else
		free(exe);
}

/* The user's options for one child; strings live in store. */
static void child_argv(const struct watch *w, const struct profile *p, const char *outdir,
		       char store[][48], char **argv, char *pushbuf, size_t pushlen)
{
	/* In enum d9_format bit order. */
	static const char *const fmt_names[] = {"jsonl", "perf", "pprof", "folded", "flamegraph"};
	const struct options *o = w->o;
	size_t a = 0, s = 0;
	char *fmts;

	argv[a++] = (char *)w->argv0;
#define ARG(...)                                                                                   \
	do {                                                                                       \
		snprintf(store[s], sizeof(store[s]), __VA_ARGS__);                                 \
		argv[a++] = store[s++];                                                            \
	} while (0)
	argv[a++] = "--pid";
	ARG("%d", p->pid);
	argv[a++] = "--output";
	argv[a++] = (char *)outdir;
	argv[a++] = "--per-worker-hz";
	ARG("%" PRIu64, o->per_worker_hz);
	argv[a++] = "--cap-burst";
	ARG("%" PRIu64, o->cap_burst);
	argv[a++] = "--stack-size";
	ARG("%u", o->stack_size);
	argv[a++] = "--overhead-budget";
	ARG("%.17g", o->overhead_budget);
	argv[a++] = "--unwind";
	argv[a++] = o->unwind == D9_UNWIND_FP	   ? "fp"
		    : o->unwind == D9_UNWIND_DWARF ? "dwarf"
						   : "auto";
	argv[a++] = "--format";
	fmts = store[s];
	argv[a++] = store[s++];
	fmts[0] = 0;
	for (size_t i = 0; i < sizeof(fmt_names) / sizeof(fmt_names[0]); i++)
		if (o->formats & (1u << i))
			snprintf(fmts + strlen(fmts), 48 - strlen(fmts), "%s%s", *fmts ? "," : "",
				 fmt_names[i]);
	if (o->seed_set) {
		argv[a++] = "--seed";
		ARG("%" PRIu64, o->seed);
	}
	if (w->deadline_ns != UINT64_MAX) {
		uint64_t now = now_ns(CLOCK_MONOTONIC);

		/* Never 0, which would mean "until Ctrl-C". */
		argv[a++] = "--duration";
		ARG("%.3f",
		    (double)(now < w->deadline_ns ? w->deadline_ns - now : 0) / 1e9 + 0.001);
	}
	if (o->quiet)
		argv[a++] = "--quiet";
	if (o->verbose)
		argv[a++] = "--verbose";
	if (o->no_task_root)
		argv[a++] = "--no-task-root";
	if (o->inline_stacks)
		argv[a++] = "--inline-stacks";
	if (o->debuginfo.symbols) {
		argv[a++] = "--symbols";
		argv[a++] = (char *)o->debuginfo.symbols;
	}
	if (o->debuginfo.debug_dir) {
		argv[a++] = "--debug-dir";
		argv[a++] = (char *)o->debuginfo.debug_dir;
	}
	push_child_argv(&o->push, p->subdir, argv, &a, pushbuf, pushlen);
	argv[a] = NULL;
#undef ARG
}

static int make_subdir(const struct watch *w, const char *name)
{
	struct out_dir sub;
	bool created;
	int err = out_dir_open_at(&sub, &w->out, name, &created);

	out_dir_close(&sub);
	return err;
}

static int start_profile(struct watch *w, int pid, const char *rel)
{
	char outdir[PATH_MAX + 64], store[12][48], *argv[32 + PUSH_CHILD_ARGS], link[64];
	char pushbuf[PATH_MAX + 64];
	struct profile *p;
	int fds[2], n = 1;
	pid_t child;

	if (!grow((void **)&w->prof, &w->profcap, w->nprof, sizeof(*w->prof))) {
		fprintf(stderr, "dial9-bpf: failed to allocate: %s\n", strerror(ENOMEM));
		return -ENOMEM;
	}
	p = &w->prof[w->nprof];
	*p = (struct profile){.pid = pid, .relay_fd = -1, .ns_pid = proc_ns_pid(pid)};
	for (size_t i = 0; i < w->nprof; i++)
		n += w->prof[i].pid == pid;
	if (n == 1)
		snprintf(p->subdir, sizeof(p->subdir), "pid-%d", pid);
	else
		snprintf(p->subdir, sizeof(p->subdir), "pid-%d-%d", pid, n);
	snprintf(outdir, sizeof(outdir), "%s/%s", w->o->output_dir, p->subdir);
	/* Made here, in the directory already checked; the child checks it again. */
	if (make_subdir(w, p->subdir))
		goto failed;
	snprintf(link, sizeof(link), "/proc/%d/exe", pid);
	p->exe = read_link(link);
	p->cgroup = malloc(strlen(w->cgroup) + strlen(rel) + 1);
	if (p->cgroup)
		strcat(strcpy(p->cgroup, w->cgroup), rel);
	read_comm(pid, (uint32_t)pid, p->comm, sizeof(p->comm));
	p->started_real_ns = now_ns(CLOCK_REALTIME);
	snprintf(p->stop_reason, sizeof(p->stop_reason), "running");
	w->nprof++;
	if (!p->exe || !p->cgroup) {
		fprintf(stderr, "dial9-bpf: failed to allocate: %s\n", strerror(ENOMEM));
		goto failed;
	}
	child_argv(w, p, outdir, store, argv, pushbuf, sizeof(pushbuf));
	if (pipe2(fds, O_CLOEXEC)) {
		fprintf(stderr, "dial9-bpf: failed to create a pipe: %s\n", strerror(errno));
		goto failed;
	}
	if (!w->o->quiet)
		fprintf(stderr, "dial9-bpf: pid %d (%s) in %s: profiling into %s/\n", pid, p->exe,
			p->cgroup, outdir);
	fflush(NULL);
	child = fork();
	if (child == 0) {
		pid_t parent = getppid();

		/* Only async-signal-safe calls between fork and exec. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(1);
		setpgid(0, 0);
		dup2(fds[1], STDERR_FILENO);
		signal(SIGPIPE, SIG_DFL);
		execv("/proc/self/exe", argv);
		dprintf(STDERR_FILENO, "dial9-bpf: failed to run /proc/self/exe: %s\n",
			strerror(errno));
		_exit(127);
	}
	close(fds[1]);
	if (child < 0) {
		fprintf(stderr, "dial9-bpf: failed to fork a profiler for pid %d: %s\n", pid,
			strerror(errno));
		close(fds[0]);
		goto failed;
	}
	fcntl(fds[0], F_SETFL, O_NONBLOCK);
	p->child = child;
	p->relay_fd = fds[0];
	return 0;
failed:
	p->failed = true;
	p->exit_code = -1;
	p->stopped_real_ns = now_ns(CLOCK_REALTIME);
	snprintf(p->stop_reason, sizeof(p->stop_reason), "failed");
	w->errors++;
	return -1;
}

static void handle_pid(struct watch *w, int pid, const char *rel)
{
	struct proc_ent *e;
	const char *why;
	char link[64];
	struct stat st;
	uint64_t ticks;
	int r;

	if (is_our_child(w, pid))
		return;
	e = proc_get(w, pid, true);
	if (!e)
		return;
	e->seen = true;
	if (e->running)
		return;
	snprintf(link, sizeof(link), "/proc/%d/exe", pid);
	/* No executable: a kernel thread, a zombie, or gone; nothing to profile. */
	if (stat(link, &st))
		return;
	ticks = proc_start_ticks(pid);
	if (ticks != e->start_ticks) { /* the pid was reused */
		e->start_ticks = ticks;
		e->exe_dev = e->exe_ino = 0;
	}
	if (e->exe_dev == st.st_dev && e->exe_ino == st.st_ino)
		return; /* classified, and no exec since */
	if (now_ns(CLOCK_MONOTONIC) + MIN_PROFILE_NS > w->deadline_ns)
		return;
	r = classify(w, &st, link, &why);
	if (r < 0)
		return; /* exited or exec'd meanwhile: the next poll looks again */
	e->exe_dev = st.st_dev;
	e->exe_ino = st.st_ino;
	if (!r)
		note_skipped(w, pid, link, why);
	else if (!start_profile(w, pid, rel))
		e->running = true;
}

/* Reads one cgroup's cgroup.procs, then its descendants. -ENOENT: dfd's cgroup is gone. */
static int scan_tree(struct watch *w, int dfd, char *rel, size_t rellen, int depth)
{
	int fd = openat(dfd, "cgroup.procs", O_RDONLY | O_CLOEXEC), pid, err = 0;
	struct dirent *de;
	DIR *d;
	FILE *f;

	if (fd < 0)
		return -errno;
	f = fdopen(fd, "r");
	if (!f) {
		err = -errno;
		close(fd);
		return err;
	}
	while (fscanf(f, "%d", &pid) == 1)
		handle_pid(w, pid, rel);
	if (ferror(f))
		err = -errno;
	fclose(f);
	if (err || depth >= TREE_DEPTH_MAX)
		return err;
	fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		err = -errno;
		if (fd >= 0)
			close(fd);
		return err;
	}
	while ((de = readdir(d))) {
		size_t n = strlen(de->d_name);
		int sub;

		if (de->d_type != DT_DIR || de->d_name[0] == '.' || rellen + n + 2 > PATH_MAX)
			continue;
		sub = openat(dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (sub < 0)
			continue; /* removed meanwhile */
		rel[rellen] = '/';
		memcpy(rel + rellen + 1, de->d_name, n + 1);
		scan_tree(w, sub, rel, rellen + 1 + n, depth + 1); /* a removed child is fine */
		rel[rellen] = 0;
		close(sub);
	}
	closedir(d);
	return 0;
}

static int scan(struct watch *w)
{
	char rel[PATH_MAX] = "";
	size_t j = 0;
	int err;

	for (size_t i = 0; i < w->nprocs; i++)
		w->procs[i].seen = false;
	err = scan_tree(w, w->cgroup_fd, rel, 0, 0);
	if (err)
		return err;
	/* Forget processes that left: their pids may come back as other processes. */
	for (size_t i = 0; i < w->nprocs; i++)
		if (w->procs[i].seen || w->procs[i].running)
			w->procs[j++] = w->procs[i];
	w->nprocs = j;
	return 0;
}

/* --- children ------------------------------------------------------------------------- */

static void relay_flush(struct profile *p)
{
	fprintf(stderr, "[%s] %.*s\n", p->subdir, (int)p->linelen, p->line);
	p->linelen = 0;
}

static void relay_read(struct profile *p)
{
	char buf[4096];
	ssize_t n;

	while ((n = read(p->relay_fd, buf, sizeof(buf))) > 0) {
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] == '\n' || p->linelen == sizeof(p->line)) {
				relay_flush(p);
				if (buf[i] == '\n')
					continue;
			}
			p->line[p->linelen++] = buf[i];
		}
	}
	if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
		if (p->linelen)
			relay_flush(p);
		close(p->relay_fd);
		p->relay_fd = -1;
	}
}

/* What the child's metadata.json says: stop reason and samples written. */
static bool read_child_metadata(const struct watch *w, struct profile *p)
{
	char path[sizeof(p->subdir) + 16];
	json_object *root, *v, *s;
	bool ok = false;
	int fd;

	snprintf(path, sizeof(path), "%s/metadata.json", p->subdir);
	fd = out_open_read(w->out.fd, path);
	if (fd < 0)
		return false;
	root = json_object_from_fd(fd);
	close(fd);
	if (!root)
		return false;
	if (json_object_object_get_ex(root, "stop_reason", &v) &&
	    json_object_is_type(v, json_type_string)) {
		snprintf(p->stop_reason, sizeof(p->stop_reason), "%s", json_object_get_string(v));
		ok = true;
	}
	if (json_object_object_get_ex(root, "samples", &s) &&
	    json_object_object_get_ex(s, "written", &v))
		p->samples = (uint64_t)json_object_get_int64(v);
	json_object_put(root);
	return ok;
}

static void reap(struct watch *w)
{
	int status;
	pid_t c;

	while ((c = waitpid(-1, &status, WNOHANG)) > 0) {
		struct profile *p = NULL;
		struct proc_ent *e;
		bool target_alive;

		for (size_t i = 0; i < w->nprof && !p; i++)
			if (w->prof[i].child == c)
				p = &w->prof[i];
		if (!p)
			continue;
		if (p->relay_fd >= 0)
			relay_read(p); /* the rest of its output; EOF now that it exited */
		if (p->relay_fd >= 0) {
			close(p->relay_fd);
			p->relay_fd = -1;
		}
		p->child = 0;
		p->stopped_real_ns = now_ns(CLOCK_REALTIME);
		p->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		e = proc_get(w, p->pid, false);
		target_alive = !(kill(p->pid, 0) && errno == ESRCH) && e &&
			       proc_start_ticks(p->pid) == e->start_ticks;
		if (!read_child_metadata(w, p))
			/* It stopped before sampling: a target that exited first is no error. */
			snprintf(p->stop_reason, sizeof(p->stop_reason), "%s",
				 target_alive ? "failed" : "target_exited_before_start");
		if (p->exit_code && target_alive) {
			p->failed = true;
			w->errors++;
		}
		if (e) {
			e->running = false;
			if (!strcmp(p->stop_reason, "target_exec"))
				e->exe_dev = e->exe_ino = 0; /* profile what it exec'd */
		}
	}
}

static size_t running(const struct watch *w)
{
	size_t n = 0;

	for (size_t i = 0; i < w->nprof; i++)
		n += w->prof[i].child > 0;
	return n;
}

/* Relays the children's stderr for up to timeout_ms, forwards a stop signal, reaps. */
static void tend_children(struct watch *w, int timeout_ms)
{
	struct pollfd pf[w->nprof + 1];
	struct profile *pp[w->nprof + 1];
	size_t n = 0;

	for (size_t i = 0; i < w->nprof; i++) {
		if (w->prof[i].relay_fd < 0)
			continue;
		pf[n] = (struct pollfd){.fd = w->prof[i].relay_fd, .events = POLLIN};
		pp[n++] = &w->prof[i];
	}
	if (poll(pf, n, timeout_ms) > 0)
		for (size_t i = 0; i < n; i++)
			if (pf[i].revents)
				relay_read(pp[i]);
	if (nsignals)
		for (size_t i = 0; i < w->nprof; i++) {
			struct profile *p = &w->prof[i];

			if (p->child > 0 && !p->signalled && catches(p->child, last_signal)) {
				kill(p->child, last_signal);
				p->signalled = true;
			}
		}
	reap(w);
}

/* --- processes.json ------------------------------------------------------------------- */

/* Written as processes.json.tmp and renamed, like every output; prints its own error. */
static int write_processes(const struct watch *w, uint64_t started_real, uint64_t stopped_real,
			   const char *stop_reason)
{
	struct out_file out;
	FILE *f;
	int err = out_file_create(&out, &w->out, "processes.json", false);

	if (err) {
		fprintf(stderr, "dial9-bpf: failed to create %s/processes.json.tmp: %s\n",
			w->out.path, strerror(-err));
		return err;
	}
	f = out.f;
	fputs("{\n  \"tool\": \"dial9-bpf\",\n  \"tool_version\": \"" DIAL9_VERSION "\",\n", f);
	fputs("  \"cgroup\": ", f);
	json_str(f, w->cgroup);
	fputs(",\n  \"container\": ", f);
	json_str(f, w->o->container_id);
	fprintf(f,
		",\n  \"started_realtime_ns\": %" PRIu64 ", \"stopped_realtime_ns\": %" PRIu64
		",\n  \"stop_reason\": ",
		started_real, stopped_real);
	json_str(f, stop_reason);
	fputs(",\n  \"processes\": [", f);
	for (size_t i = 0; i < w->nprof; i++) {
		const struct profile *p = &w->prof[i];

		fprintf(f, "%s\n    {\"pid\": %d, \"ns_pid\": %d, \"subdir\": ", i ? "," : "",
			p->pid, p->ns_pid);
		json_str(f, p->subdir);
		fputs(", \"exe\": ", f);
		json_str(f, p->exe);
		fputs(", \"comm\": ", f);
		json_str(f, p->comm);
		fputs(",\n     \"cgroup\": ", f);
		json_str(f, p->cgroup);
		fprintf(f,
			", \"started_realtime_ns\": %" PRIu64 ", \"stopped_realtime_ns\": %" PRIu64
			",\n     \"stop_reason\": ",
			p->started_real_ns, p->stopped_real_ns);
		json_str(f, p->stop_reason);
		fprintf(f, ", \"exit_code\": %d, \"failed\": %s, \"samples\": %" PRIu64 "}",
			p->exit_code, p->failed ? "true" : "false", p->samples);
	}
	fprintf(f, "\n  ],\n  \"skipped_total\": %zu,\n  \"skipped\": [", w->nskip_total);
	for (size_t i = 0; i < w->nskip; i++) {
		fprintf(f, "%s\n    {\"pid\": %d, \"exe\": ", i ? "," : "", w->skip[i].pid);
		json_str(f, w->skip[i].exe);
		fputs(", \"reason\": ", f);
		json_str(f, w->skip[i].why);
		fputc('}', f);
	}
	fputs("\n  ]\n}\n", f);
	return out_file_commit(&out);
}

/* The cgroup, checked before the output directory so that a bad one leaves no directory
 * behind; then the capabilities the children do not need go, and the stop signals are caught. */
static int watch_setup(struct watch *w)
{
	const struct options *o = w->o;
	struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: wake poll() */
	bool created;
	int err;

	err = o->container_id
		  ? cgroup_resolve_container(o->container_id, w->cgroup, sizeof(w->cgroup))
		  : cgroup_resolve_path(o->cgroup_path, w->cgroup);
	if (err)
		return 1;
	w->cgroup_fd = open(w->cgroup, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (w->cgroup_fd < 0 || faccessat(w->cgroup_fd, "cgroup.procs", R_OK, 0)) {
		fprintf(stderr,
			"dial9-bpf: failed to read %s/cgroup.procs: %s: give a cgroup directory\n",
			w->cgroup, strerror(errno));
		return 1;
	}
	if (out_dir_open(&w->out, o->output_dir, &created))
		return 1;
	/* The children exec with what is left: all they need to start a profile. */
	if (privs_drop(PRIVS_SETUP) && o->verbose)
		fprintf(stderr, "dial9-bpf: failed to drop capabilities: %s\n", strerror(errno));
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

/* Scans the cgroup and tends the children until the deadline, a signal or the cgroup's
 * removal; then waits for every child to finish its outputs. Returns the stop reason. */
static const char *watch_loop(struct watch *w)
{
	const struct options *o = w->o;
	const char *stop_reason = "duration";
	int err;

	for (;;) {
		uint64_t now = now_ns(CLOCK_MONOTONIC);
		int wait_ms = POLL_MS;

		if (nsignals) {
			stop_reason = last_signal == SIGINT    ? "sigint"
				      : last_signal == SIGTERM ? "sigterm"
							       : "signal";
			break;
		}
		if (now >= w->deadline_ns)
			break;
		err = scan(w);
		if (err == -ENOENT) {
			stop_reason = "cgroup_removed";
			if (!o->quiet)
				fprintf(stderr, "dial9-bpf: cgroup %s was removed; finishing\n",
					w->cgroup);
			break;
		}
		if (err) {
			stop_reason = "error";
			fprintf(stderr, "dial9-bpf: failed to read %s: %s\n", w->cgroup,
				strerror(-err));
			w->errors++;
			break;
		}
		if (w->deadline_ns - now < (uint64_t)wait_ms * 1000000)
			wait_ms = (int)((w->deadline_ns - now) / 1000000) + 1;
		tend_children(w, wait_ms);
	}
	/* Children stop at the same deadline, or on the signal forwarded as soon as they
	 * catch it: wait for each to finish its outputs. */
	while (running(w))
		tend_children(w, POLL_MS);
	return stop_reason;
}

/* processes.json and the exit summary. */
static void watch_finish(struct watch *w, uint64_t t0, uint64_t t0_real, const char *stop_reason)
{
	const struct options *o = w->o;
	size_t failed = 0, pids = 0;
	uint64_t samples = 0;

	for (size_t i = 0; i < w->nprof; i++) {
		bool first = true;

		for (size_t j = 0; j < i; j++)
			first &= w->prof[j].pid != w->prof[i].pid;
		pids += first;
		samples += w->prof[i].samples;
		failed += w->prof[i].failed;
	}
	if (write_processes(w, t0_real, now_ns(CLOCK_REALTIME), stop_reason))
		w->errors++;
	if (!o->quiet)
		fprintf(stderr,
			"dial9-bpf: %s after %.1fs: %zu profiles of %zu Tokio processes, %" PRIu64
			" samples; %zu non-Tokio processes skipped; %zu profiles failed; wrote "
			"%s/processes.json and a pid-* directory per profile\n",
			stop_reason, (double)(now_ns(CLOCK_MONOTONIC) - t0) / 1e9, w->nprof, pids,
			samples, w->nskip_total, failed, o->output_dir);
}

static void watch_free(struct watch *w)
{
	out_dir_close(&w->out);
	if (w->cgroup_fd >= 0)
		close(w->cgroup_fd);
	for (size_t i = 0; i < w->nprof; i++) {
		free(w->prof[i].exe);
		free(w->prof[i].cgroup);
	}
	for (size_t i = 0; i < w->nskip; i++)
		free(w->skip[i].exe);
	free(w->prof);
	free(w->procs);
	free(w->skip);
	free(w->cls);
}

int cgroup_watch_main(const struct options *o, const char *argv0)
{
	struct watch w = {
	    .o = o, .argv0 = argv0, .cgroup_fd = -1, .deadline_ns = UINT64_MAX, .out = {.fd = -1}};
	const char *stop_reason;
	uint64_t t0, t0_real;
	int err;

	err = watch_setup(&w);
	if (!err) {
		t0 = now_ns(CLOCK_MONOTONIC);
		t0_real = now_ns(CLOCK_REALTIME);
		if (o->duration_s > 0)
			w.deadline_ns = t0 + (uint64_t)(o->duration_s * 1e9);
		if (!o->quiet)
			fprintf(stderr,
				"dial9-bpf: watching cgroup %s%s%s%s and its descendants for Tokio "
				"processes; Ctrl-C to stop\n",
				w.cgroup, o->container_id ? " (container " : "",
				o->container_id ? o->container_id : "", o->container_id ? ")" : "");
		stop_reason = watch_loop(&w);
		watch_finish(&w, t0, t0_real, stop_reason);
		err = w.errors ? 1 : 0;
	}
	watch_free(&w);
	return err;
}
