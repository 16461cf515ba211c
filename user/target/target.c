// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "demangle.h"
#include "elf_file.h"
#include "json.h"
#include "out_dir.h"
#include "park_outcome.h"
#include "target.h"
#include "util_proc.h"

/* Names after demangling without the hash. Generic functions demangle the same for every
 * instance in legacy mangling, and with "::<...>" appended in v0 mangling. Several Tokio
 * releases are covered: a name absent from a release is simply not found. */
static const struct {
	const char *name;
	enum probe_kind kind;
	uint32_t cookie;
	enum probe_group group;
	int prefix; /* match "name" or "name::<" / "name<" */
} probe_names[] = {
    {"tokio::runtime::task::raw::poll", PROBE_POLL, 0, PG_POLL, 1},
    {"tokio::runtime::task::raw::dealloc", PROBE_DEALLOC, 0, PG_DEALLOC, 1},
    {"tokio::runtime::scheduler::multi_thread::worker::run", PROBE_WORKER_RUN, 0, PG_WORKER_RUN, 0},
    {"tokio::runtime::thread_pool::worker::run", PROBE_WORKER_RUN, 0, PG_WORKER_RUN, 0},
    /* The worker parks: park_timeout up to 1.48, park_internal (the same function renamed)
     * from 1.49; park and park_yield call one of them, and are probed where not inlined.
     * Before 1.21 the scheduler was runtime::thread_pool. */
    {"tokio::runtime::scheduler::multi_thread::worker::Context::park", PROBE_IDLE, 0,
     PG_WORKER_PARK, 0},
    {"tokio::runtime::scheduler::multi_thread::worker::Context::park_timeout", PROBE_IDLE, 0,
     PG_WORKER_PARK, 0},
    {"tokio::runtime::scheduler::multi_thread::worker::Context::park_internal", PROBE_IDLE, 0,
     PG_WORKER_PARK, 0},
    {"tokio::runtime::scheduler::multi_thread::worker::Context::park_yield", PROBE_IDLE, 0,
     PG_WORKER_PARK, 0},
    {"tokio::runtime::thread_pool::worker::Context::park", PROBE_IDLE, 0, PG_WORKER_PARK, 0},
    {"tokio::runtime::thread_pool::worker::Context::park_timeout", PROBE_IDLE, 0, PG_WORKER_PARK,
     0},
    /* A current_thread runtime parks its block_on thread here: park_yield when tasks yielded
     * (it then runs the drivers without blocking), park when it has nothing to run. Outside
     * every task poll either way; a park seen twice (park, then park_internal) is harmless. */
    {"tokio::runtime::scheduler::current_thread::Context::park", PROBE_IDLE, 0, PG_BLOCK_ON_PARK,
     0},
    {"tokio::runtime::scheduler::current_thread::Context::park_yield", PROBE_IDLE, 0,
     PG_BLOCK_ON_PARK, 0},
    /* 1.5x: both call this one, and may be inlined into block_on. */
    {"tokio::runtime::scheduler::current_thread::Context::park_internal", PROBE_IDLE, 0,
     PG_BLOCK_ON_PARK, 0},
    /* Park points: the outermost Tokio resource polls, where a task stores its waker and
     * returns Pending. Not the waker functions themselves: clone_waker single-steps (about
     * 18x the cost of a hit here) and wake_* mostly run on behalf of other tasks. */
    {"<tokio::time::sleep::Sleep as core::future::future::Future>::poll", PROBE_PARK, D9_PARK_LEAF,
     PG_SLEEP, 0},
    /* Sleep's module before 1.21. */
    {"<tokio::time::driver::sleep::Sleep as core::future::future::Future>::poll", PROBE_PARK,
     D9_PARK_LEAF, PG_SLEEP, 0},
    {"<tokio::sync::batch_semaphore::Acquire as core::future::future::Future>::poll", PROBE_PARK,
     D9_PARK_LEAF, PG_ACQUIRE, 0},
    /* Notified::poll and OwnedNotified::poll (1.47+) start with an instruction the kernel
     * single-steps (dropped as too costly), and both go through poll_notified: a method of
     * Notified up to 1.46, of NotifiedProject, shared by the two, from 1.47. */
    {"<tokio::sync::notify::Notified as core::future::future::Future>::poll", PROBE_PARK,
     D9_PARK_LEAF, PG_NOTIFIED, 0},
    {"<tokio::sync::notify::OwnedNotified as core::future::future::Future>::poll", PROBE_PARK,
     D9_PARK_LEAF, PG_NOTIFIED, 0},
    {"tokio::sync::notify::Notified::poll_notified", PROBE_PARK, D9_PARK_LEAF, PG_NOTIFIED, 0},
    {"tokio::sync::notify::NotifiedProject::poll_notified", PROBE_PARK, D9_PARK_LEAF, PG_NOTIFIED,
     0},
    {"tokio::sync::task::atomic_waker::AtomicWaker::register_by_ref", PROBE_PARK, D9_PARK_LEAF,
     PG_ATOMIC_WAKER, 0},
    {"tokio::runtime::io::registration::Registration::poll_ready", PROBE_PARK, D9_PARK_LEAF, PG_IO,
     0},
    {"<tokio::runtime::task::join::JoinHandle<*> as core::future::future::Future>::poll",
     PROBE_PARK, D9_PARK_LEAF, PG_JOIN, 0},
    /* Yields: YieldNow::poll up to 1.49 (a poll_fn closure inlined into the caller from 1.50);
     * the runtime's defer, which only a yield's Pending path enters: context::defer from 1.29
     * (also on cooperative budget exhaustion from 1.44, a yield too), and the scheduler's
     * Defer::defer that it ends in (place_yield_probes chooses one). */
    {"<tokio::task::yield_now::yield_now::*::YieldNow as core::future::future::Future>::poll",
     PROBE_PARK, D9_PARK_YIELD, PG_YIELD, 0},
    {"tokio::runtime::scheduler::defer::Defer::defer", PROBE_PARK, D9_PARK_YIELD, PG_YIELD, 0},
    {"tokio::runtime::context::defer", PROBE_PARK, D9_PARK_YIELD, PG_YIELD, 0},
    /* Not park points: where a task is woken, to tell a task woken by another task's poll
     * from one woken by the driver (sampler.bpf.c, resume_kind). Optional like them. */
    {"tokio::runtime::task::waker::wake_by_val", PROBE_PARK, D9_PARK_WAKE, PG_WAKE, 0},
    {"tokio::runtime::task::waker::wake_by_ref", PROBE_PARK, D9_PARK_WAKE, PG_WAKE, 0},
};

/* What a missing group costs, for the one line at start and metadata. Required groups are
 * in every multi-thread Tokio program; the others only in programs that use them. */
static const struct {
	const char *name;
	bool required;
	const char *without;
} groups[PG_MAX] = {
    [PG_POLL] = {"task_poll", true, "nothing can be sampled"},
    [PG_DEALLOC] = {"task_dealloc", true, "freed tasks stay in the task map until it fills"},
    [PG_WORKER_RUN] = {"worker_run", true, "workers are told apart by thread only"},
    [PG_WORKER_PARK] = {"worker_park", true,
			"a worker's idle time is not seen: a poll lasts until its thread's next"},
    /* Every Tokio program has current_thread's code (block_on), so finding it says nothing of
     * the multi-thread workers' park: a group of its own. */
    [PG_BLOCK_ON_PARK] = {"current_thread_park", false,
			  "a current_thread runtime's idle time is not seen"},
    [PG_YIELD] = {"yield", true, "resumes after a yield have no park point or stack"},
    [PG_SLEEP] = {"sleep", false, "Sleep parks have no park point or stack"},
    [PG_ACQUIRE] = {"acquire", false, "semaphore, mutex and bounded channel parks have no stack"},
    [PG_NOTIFIED] = {"notified", false, "Notify parks have no park point or stack"},
    [PG_ATOMIC_WAKER] = {"atomic_waker", false, "channel receive parks have no stack"},
    [PG_IO] = {"io", false, "I/O parks have no park point or stack"},
    [PG_JOIN] = {"join_handle", false, "JoinHandle parks have no park point or stack"},
    [PG_WAKE] = {"wake", true,
		 "tasks woken by another task's poll get no in-window slowdown correction"},
};

const char *probe_group_name(enum probe_group g)
{
	return g < PG_MAX ? groups[g].name : "?";
}

bool probe_group_task_to_task(enum probe_group g)
{
	return g == PG_ACQUIRE || g == PG_NOTIFIED || g == PG_ATOMIC_WAKER || g == PG_JOIN;
}

const char *probe_kind_name(enum probe_kind k)
{
	static const char *const names[] = {"raw::poll", "raw::dealloc", "worker::run", "park",
					    "worker_park"};

	return k <= PROBE_IDLE ? names[k] : "?";
}

const char *park_point_name(uint32_t cookie)
{
	switch (cookie) {
	case D9_PARK_LEAF:
		return "resource_poll";
	case D9_PARK_YIELD:
		return "yield";
	case D9_PARK_WAKE:
		return "wake";
	default:
		return "none";
	}
}

/* v0 mangling demangles inherent methods as "<Type>::method", legacy as "Type::method":
 * rewrite the first form to the second so one table serves both. */
static const char *normalize(const char *dm, char *buf, size_t len)
{
	const char *p;
	int depth = 0;

	if (dm[0] != '<')
		return dm;
	for (p = dm; *p; p++) {
		depth += *p == '<';
		depth -= *p == '>';
		if (!depth)
			break;
	}
	if (!*p || strncmp(p + 1, "::", 2) || memmem(dm, (size_t)(p - dm), " as ", 4))
		return dm;
	if (snprintf(buf, len, "%.*s%s", (int)(p - dm - 1), dm + 1, p + 1) >= (int)len)
		return dm;
	return buf;
}

/* The probe_names entry a demangled name matches, or -1. */
static int classify(const char *name)
{
	char buf[512];
	const char *dm = normalize(name, buf, sizeof(buf));

	for (size_t i = 0; i < sizeof(probe_names) / sizeof(probe_names[0]); i++) {
		const char *star = strchr(probe_names[i].name, '*');
		size_t n = strlen(probe_names[i].name);

		if (star) {
			/* "prefix*suffix": generic parameters or closure names in between. */
			size_t pre = (size_t)(star - probe_names[i].name), suf = n - pre - 1;
			size_t len = strlen(dm);

			if (len < pre + suf || strncmp(dm, probe_names[i].name, pre) ||
			    strcmp(dm + len - suf, star + 1))
				continue;
			return (int)i;
		}
		if (strncmp(dm, probe_names[i].name, n))
			continue;
		if (dm[n] &&
		    !(probe_names[i].prefix && (dm[n] == '<' || !strncmp(dm + n, "::<", 3))))
			continue;
		return (int)i;
	}
	return -1;
}

int target_classify_symbol(const char *name, enum probe_kind *kind, uint32_t *cookie)
{
	int i = classify(name);

	if (i < 0)
		return 0;
	*kind = probe_names[i].kind;
	*cookie = probe_names[i].cookie;
	return 1;
}

/* Cheap filter before demangling: only symbols that can name a tokio item. */
static int maybe_tokio(const char *mangled)
{
	return strstr(mangled, "tokio") != NULL;
}

static int read_proc_state(int pid, char *state)
{
	char path[64], line[256];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	*state = '?';
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "State:", 6)) {
			char *p = line + 6;

			while (*p == ' ' || *p == '\t')
				p++;
			*state = *p;
			break;
		}
	}
	fclose(f);
	return 0;
}

static int check_process(struct target *t)
{
	char state = '?';
	ssize_t n;

	if (kill(t->pid, 0) && errno == ESRCH) {
		fprintf(stderr, "dial9-bpf: no process with pid %d: check the pid with `ps -e`\n",
			t->pid);
		return -ESRCH;
	}
	if (read_proc_state(t->pid, &state)) {
		fprintf(stderr, "dial9-bpf: cannot read /proc/%d/status: %s: is /proc mounted?\n",
			t->pid, strerror(errno));
		return -ESRCH;
	}
	if (state == 'Z' || state == 'X') {
		fprintf(stderr,
			"dial9-bpf: process %d is a zombie (exited, not reaped): profile a "
			"live process\n",
			t->pid);
		return -ESRCH;
	}
	read_comm(t->pid, (uint32_t)t->pid, t->comm, sizeof(t->comm));
	snprintf(t->exe_link, sizeof(t->exe_link), "/proc/%d/exe", t->pid);
	n = readlink(t->exe_link, t->exe_path, sizeof(t->exe_path) - 1);
	if (n < 0) {
		if (errno == ENOENT)
			fprintf(stderr,
				"dial9-bpf: pid %d (%s) has no executable: it is a kernel "
				"thread; give the pid of a Tokio program\n",
				t->pid, t->comm);
		else
			fprintf(stderr, "dial9-bpf: failed to read %s: %s: run as root\n",
				t->exe_link, strerror(errno));
		return -ENOENT;
	}
	t->exe_path[n] = 0;
	{
		struct stat st;

		if (!stat(t->exe_link, &st)) {
			t->exe_dev = st.st_dev;
			t->exe_ino = st.st_ino;
		}
	}
	return 0;
}

static int add_probe(struct target *t, size_t *cap, const struct elf_sym *sym, const char *dm,
		     int entry)
{
	enum probe_kind kind = probe_names[entry].kind;
	uint32_t cookie = probe_names[entry].cookie;
	struct probe_spec *p;
	uint64_t off;

	if (elf_file_vaddr_to_offset(t->elf, sym->addr, &off))
		return 0; /* not in a loaded segment: nothing to probe */
	t->found[probe_names[entry].group]++;
	for (size_t i = 0; i < t->nprobes; i++)
		if (t->probes[i].offset == off && t->probes[i].kind == kind)
			return 0; /* aliases of one function */
	if (t->nprobes == *cap) {
		size_t ncap = *cap ? *cap * 2 : 32;
		void *np = realloc(t->probes, ncap * sizeof(*t->probes));

		if (!np)
			return -ENOMEM;
		t->probes = np;
		*cap = ncap;
	}
	p = &t->probes[t->nprobes++];
	*p = (struct probe_spec){
	    .kind = kind,
	    .cookie = cookie,
	    .group = probe_names[entry].group,
	    .vaddr = sym->addr,
	    .offset = off,
	    /* Until the hit counts say otherwise (arming.c). */
	    .hot = kind == PROBE_POLL || (kind == PROBE_PARK && cookie == D9_PARK_YIELD),
	    .dormant = kind == PROBE_PARK && cookie == D9_PARK_WAKE,
	};
	p->name = strdup(dm);
	if (!p->name)
		return -ENOMEM;
	t->count[kind]++;
	return 0;
}

static int scan_syms(struct target *t, const struct elf_sym *syms, size_t n, size_t *cap)
{
	for (size_t i = 0; i < n; i++) {
		int entry, err;
		char *dm;

		if (!maybe_tokio(syms[i].name))
			continue;
		dm = demangle(syms[i].name);
		if (!dm)
			return -ENOMEM;
		entry = classify(dm);
		err = entry >= 0 ? add_probe(t, cap, &syms[i], dm, entry) : 0;
		free(dm);
		if (err)
			return err;
	}
	return 0;
}

/* Aliases too: a function folded with an identical one keeps only one name in the sorted
 * table, and the probe point may be the other name. */
static int find_probes(struct target *t)
{
	const struct elf_sym *syms;
	size_t n, cap = 0;
	int err;

	syms = elf_file_syms(t->elf, &n);
	err = scan_syms(t, syms, n, &cap);
	if (err)
		return err;
	syms = elf_file_aliases(t->elf, &n);
	return scan_syms(t, syms, n, &cap);
}

/* A stripped binary has no symbols to say whether it is a Tokio program; Tokio's panic
 * locations and thread names leave "tokio" in its read-only data. */
static bool file_mentions_tokio(const char *path)
{
	struct stat st;
	bool found = false;
	void *p;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	if (!fstat(fd, &st) && st.st_size > 0) {
		p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (p != MAP_FAILED) {
			found = memmem(p, (size_t)st.st_size, "tokio", 5) != NULL;
			munmap(p, (size_t)st.st_size);
		}
	}
	close(fd);
	return found;
}

static void report_no_tokio(const struct target *t)
{
	fprintf(stderr,
		"dial9-bpf: %s (pid %d) has no tokio::runtime::task::raw::poll: it is not a "
		"Tokio program (or links Tokio from a shared library); give the pid of a "
		"Tokio program\n",
		t->exe_path, t->pid);
}

/* The forms arch/x86/kernel/uprobes.c emulates (push_setup_xol_ops, branch_setup_xol_ops),
 * without the prefixes it also takes: a function's first instruction has none. */
bool probe_insn_needs_xol(const unsigned char *b, size_t len)
{
	if (len < 1)
		return true;
	if (b[0] >= 0x50 && b[0] <= 0x57)
		return false; /* push r64 */
	if (len >= 2 && b[0] == 0x41 && b[1] >= 0x50 && b[1] <= 0x57)
		return false; /* push r8-r15 */
	if (b[0] == 0xe9 || b[0] == 0xeb || b[0] == 0xe8 || b[0] == 0x90)
		return false; /* jmp rel32, jmp rel8, call rel32, nop */
	if (b[0] >= 0x70 && b[0] <= 0x7f)
		return false; /* jcc rel8 */
	if (len >= 2 && b[0] == 0x0f && b[1] >= 0x80 && b[1] <= 0x8f)
		return false; /* jcc rel32 */
	return true;
}

/* Where the call or jump with a rel32 operand at code[i] (loaded at vaddr) goes. */
static uint64_t rel32_dest(const unsigned char *code, size_t i, uint64_t vaddr)
{
	int32_t rel;

	memcpy(&rel, code + i + 1, sizeof(rel));
	return vaddr + i + 5 + (uint64_t)(int64_t)rel;
}

size_t target_direct_calls(const unsigned char *code, size_t len, uint64_t vaddr, uint64_t *targets,
			   size_t max)
{
	size_t n = 0;

	for (size_t i = 0; i + 5 <= len && n < max; i++)
		if (code[i] == 0xe8)
			targets[n++] = rel32_dest(code, i, vaddr);
	return n;
}

size_t target_branch_targets(const unsigned char *code, size_t len, uint64_t vaddr,
			     uint64_t *targets, size_t max)
{
	size_t n = 0;

	for (size_t i = 0; i + 5 <= len && n < max; i++)
		if (code[i] == 0xe8 || code[i] == 0xe9)
			targets[n++] = rel32_dest(code, i, vaddr);
	return n;
}

bool target_is_yield_pending_callee(const char *demangled)
{
	/* v0 names the closure (with_defer, from YieldNow::poll); legacy mangling only
	 * LocalKey<T>::with, the same for every instance: the call-site count decides then. */
	return (strstr(demangled, "with_defer") && strstr(demangled, "YieldNow")) ||
	       !strcmp(demangled, "std::thread::local::LocalKey<T>::with");
}

size_t target_count_calls_to(const unsigned char *code, size_t len, uint64_t vaddr, uint64_t callee)
{
	size_t n = 0;

	for (size_t i = 0; i + 5 <= len; i++)
		n += (code[i] == 0xe8 || code[i] == 0xe9) && rel32_dest(code, i, vaddr) == callee;
	return n;
}

/* Direct calls and jumps to vaddr in the executable's code, as bytes read (a byte that only
 * looks like one counts too: a false count refuses the move, which is the safe side). */
static size_t calls_in_text(const struct target *t, int fd, uint64_t vaddr)
{
	const struct elf_load *ld;
	size_t nld, n = 0;
	struct stat st;
	unsigned char *map;

	if (fstat(fd, &st) || st.st_size <= 0)
		return SIZE_MAX;
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED)
		return SIZE_MAX;
	ld = elf_file_loads(t->elf, &nld);
	for (size_t i = 0; i < nld; i++) {
		if (!(ld[i].flags & 1 /* PF_X */) || ld[i].offset > (uint64_t)st.st_size ||
		    ld[i].filesz > (uint64_t)st.st_size - ld[i].offset)
			continue;
		n += target_count_calls_to(map + ld[i].offset, ld[i].filesz, ld[i].vaddr, vaddr);
	}
	munmap(map, (size_t)st.st_size);
	return n;
}

/* The function starting exactly at vaddr, if no other name shares its code. */
static const struct elf_sym *sole_function_at(const struct elf_file *ef, uint64_t vaddr)
{
	const struct elf_sym *s = elf_file_lookup(ef, vaddr);
	size_t n;

	if (!s || s->addr != vaddr)
		return NULL;
	elf_file_aliases_at(ef, vaddr, &n);
	return n ? NULL : s;
}

/* Whether a probe at the entry of the function at vaddr can stand for its call site in the
 * caller (at_callee): its first instruction is one the kernel emulates, and push %rbp where
 * stacks come from frame pointers, the one at which x86's perf_callchain_user adds the return
 * address at [sp] (bpf_get_stack then skips the callee's own frame). */
static bool callee_probe_ok(const struct target *t, int fd, uint64_t vaddr, uint64_t *off)
{
	unsigned char first[4];

	return !elf_file_vaddr_to_offset(t->elf, vaddr, off) &&
	       pread(fd, first, sizeof(first), (off_t)*off) == (ssize_t)sizeof(first) &&
	       !probe_insn_needs_xol(first, sizeof(first)) &&
	       !(t->keeps_frame_pointers && first[0] != 0x55);
}

static void remove_probe(struct target *t, size_t i)
{
	t->count[t->probes[i].kind]--;
	free(t->probes[i].name);
	memmove(&t->probes[i], &t->probes[i + 1], (t->nprobes - i - 1) * sizeof(*t->probes));
	t->nprobes--;
}

/*
 * YieldNow::poll is entered twice per yield: once to return Pending, and again when the task
 * resumes, to return Ready. Its entry probe costs a third of all hits on a worker that yields,
 * and the Ready hit says nothing. Only the Pending path hands the waker to the runtime's defer
 * list, through a call of its own (LocalKey::with for with_defer's closure in Tokio 1.24); the
 * park point moves to that callee's entry, and the program steps out of it (D9_COOKIE_CALLEE).
 * The callee is found among the direct calls in YieldNow::poll's code and must be a function
 * of its own (merged functions share names), called from nowhere else in the executable (other
 * callers would count as yields), that callee_probe_ok() accepts. Otherwise the probe stays at
 * the entry.
 */
static void move_yield_to_pending_path(struct target *t, int fd)
{
	for (size_t i = 0; i < t->nprobes; i++) {
		struct probe_spec *p = &t->probes[i];
		const struct elf_sym *fn = elf_file_lookup(t->elf, p->vaddr), *callee;
		unsigned char code[512];
		uint64_t targets[8], off;
		size_t len, n;

		if (p->kind != PROBE_PARK || p->cookie != D9_PARK_YIELD || !fn ||
		    fn->addr != p->vaddr || !fn->size)
			continue;
		len = fn->size < sizeof(code) ? fn->size : sizeof(code);
		if (pread(fd, code, len, (off_t)p->offset) != (ssize_t)len)
			continue;
		n = target_direct_calls(code, len, p->vaddr, targets, 8);
		for (size_t k = 0; k < n; k++) {
			char *dm;
			bool ok;

			callee = sole_function_at(t->elf, targets[k]);
			if (!callee || !callee_probe_ok(t, fd, callee->addr, &off))
				continue;
			dm = demangle(callee->name);
			ok = dm && target_is_yield_pending_callee(dm);
			free(dm);
			if (!ok || calls_in_text(t, fd, callee->addr) != 1)
				continue;
			p->vaddr = callee->addr;
			p->offset = off;
			p->xol = false;
			p->at_callee = true;
			break;
		}
	}
}

/* probe_names' index of the runtime's defer function a probe is on, innermost first: 0 for
 * Defer::defer, 1 for context::defer; -1 for any other probe. */
static int defer_rank(const struct probe_spec *p)
{
	static const char *const defers[] = {"tokio::runtime::scheduler::defer::Defer::defer",
					     "tokio::runtime::context::defer"};
	int i = classify(p->name);

	for (int r = 0; i >= 0 && r < 2; r++)
		if (!strcmp(probe_names[i].name, defers[r]))
			return r;
	return -1;
}

/*
 * One yield park point per yield. Tokio 1.29+ hands a yielding task's waker to the runtime's
 * defer (context::defer, then the scheduler's Defer::defer), entered on nothing but a yield's
 * Pending path: yield_now, and from 1.44 cooperative budget exhaustion, which resumes the same
 * way. From 1.50 yield_now is a poll_fn closure inlined into its caller, with no function of
 * its own to probe. So the park point is Defer::defer's entry where it can stand for its call
 * site (callee_probe_ok), else context::defer's: every defer ends in Defer::defer, even from
 * the callers into which context::defer is inlined, and the stack is taken from the caller.
 * Then YieldNow::poll and the other defer would only count the same yield twice. Without
 * either (Tokio 1.24 inlines the defer into a LocalKey::with closure), YieldNow::poll's probe
 * moves to its Pending path's callee (move_yield_to_pending_path).
 */
static void place_yield_probes(struct target *t, int fd)
{
	ssize_t chosen = -1;
	uint64_t off;

	for (int r = 0; r < 2 && chosen < 0; r++)
		for (size_t i = 0; i < t->nprobes && chosen < 0; i++)
			if (t->probes[i].kind == PROBE_PARK && defer_rank(&t->probes[i]) == r &&
			    callee_probe_ok(t, fd, t->probes[i].vaddr, &off))
				chosen = (ssize_t)i;
	for (size_t i = t->nprobes; i-- > 0;) {
		struct probe_spec *p = &t->probes[i];

		if (p->kind != PROBE_PARK || p->cookie != D9_PARK_YIELD)
			continue;
		if ((ssize_t)i == chosen) {
			p->xol = false;
			p->at_callee = true;
		} else if (chosen >= 0 || defer_rank(p) >= 0) {
			remove_probe(t, i);
			chosen -= chosen > (ssize_t)i;
		}
	}
	if (chosen < 0)
		move_yield_to_pending_path(t, fd);
}

static void classify_insns(struct target *t)
{
	int fd = open(t->exe_link, O_RDONLY | O_CLOEXEC);
	size_t fp = 0;

	for (size_t i = 0; i < t->nprobes; i++) {
		unsigned char b[4] = {};
		bool ok = fd >= 0 &&
			  pread(fd, b, sizeof(b), (off_t)t->probes[i].offset) == (ssize_t)sizeof(b);

		t->probes[i].xol = !ok || probe_insn_needs_xol(b, sizeof(b));
		/* push %rbp; mov %rsp,%rbp: the function keeps a frame pointer. */
		fp += ok && b[0] == 0x55 && b[1] == 0x48 && b[2] == 0x89 && b[3] == 0xe5;
	}
	/* Tokio's own functions are a fair sample of how the crates were built: the demo built
	 * with force-frame-pointers has them on every one, a default release build on none. */
	t->keeps_frame_pointers = t->nprobes && fp * 10 >= t->nprobes * 9;
	if (fd >= 0) {
		place_yield_probes(t, fd);
		park_outcome_classify(t, fd);
		close(fd);
	}
}

/* A park point is optional (several cover the same parks); one the kernel must single-step
 * costs an order of magnitude more per hit than one it emulates: leave it out. */
static void drop_costly_park_points(struct target *t)
{
	size_t j = 0;

	for (size_t i = 0; i < t->nprobes; i++) {
		if (t->probes[i].kind == PROBE_PARK && t->probes[i].xol) {
			t->count[PROBE_PARK]--;
			t->park_points_skipped++;
			free(t->probes[i].name);
			continue;
		}
		t->probes[j++] = t->probes[i];
	}
	t->nprobes = j;
}

size_t target_group_probes(const struct target *t, enum probe_group g)
{
	size_t n = 0;

	for (size_t i = 0; i < t->nprobes; i++)
		n += t->probes[i].group == g;
	return n;
}

bool target_group_missing(const struct target *t, enum probe_group g)
{
	return g < PG_MAX && !target_group_probes(t, g) && (groups[g].required || t->found[g]);
}

/* Appends to buf (size bytes, *len used), cutting what does not fit. */
static void append(char *buf, size_t size, size_t *len, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (*len + 1 >= size)
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf + *len, size - *len, fmt, ap);
	va_end(ap);
	if (n > 0)
		*len = *len + (size_t)n < size ? *len + (size_t)n : size - 1;
}

/* One line when a group is missing, naming what each costs and what still works, rather
 * than sampling without it silently: a Tokio release this tool does not know yet. */
static void report_discovery(const struct target *t)
{
	char line[2048] = "";
	size_t len = 0;
	const char *sep = "";

	for (int g = 0; g < PG_MAX; g++) {
		if (!target_group_missing(t, (enum probe_group)g))
			continue;
		append(line, sizeof(line), &len, "%s%s (%s)", sep, groups[g].name,
		       groups[g].without);
		sep = ", ";
	}
	if (!len)
		return;
	sep = "";
	append(line, sizeof(line), &len, "; still working:");
	for (int g = 0; g < PG_MAX; g++) {
		if (!target_group_probes(t, (enum probe_group)g))
			continue;
		append(line, sizeof(line), &len, "%s %s", sep, groups[g].name);
		sep = ",";
	}
	fprintf(stderr,
		"dial9-bpf: %s (pid %d): Tokio functions not found, an unknown Tokio release? "
		"missing %s\n",
		t->exe_path, t->pid, line);
}

void target_discovery_json(FILE *f, const struct target *t)
{
	const char *sep = "";

	fputs("\"discovery\": {\"missing\": [", f);
	for (int g = 0; g < PG_MAX; g++) {
		if (!target_group_missing(t, (enum probe_group)g))
			continue;
		fprintf(f, "%s{\"group\": \"%s\", \"effect\": ", sep, groups[g].name);
		json_str(f, groups[g].without);
		fputc('}', f);
		sep = ", ";
	}
	fputs("],\n    \"groups\": {", f);
	for (int g = 0; g < PG_MAX; g++)
		fprintf(f, "%s\"%s\": {\"found\": %zu, \"probed\": %zu, \"required\": %s}",
			g ? ", " : "", groups[g].name, t->found[g],
			target_group_probes(t, (enum probe_group)g),
			groups[g].required ? "true" : "false");
	fputs("},\n    \"yield_park_point\": ", f);
	sep = NULL;
	for (size_t i = 0; i < t->nprobes && !sep; i++)
		if (t->probes[i].group == PG_YIELD)
			sep = t->probes[i].name;
	json_str(f, sep);
	fputc('}', f);
}

/* The target's files beside its executable are read through /proc/PID/root when it lives in
 * another mount namespace (a container); else by their own paths, which read better. */
static void target_root(int pid, char *root, size_t size)
{
	struct stat theirs, ours;

	snprintf(root, size, "/proc/%d/root", pid);
	if (!stat(root, &theirs) && !stat("/", &ours) && theirs.st_dev == ours.st_dev &&
	    theirs.st_ino == ours.st_ino)
		root[0] = '\0';
}

/* A stripped executable: function symbols from its separate debug file. */
static int load_debug_symbols(struct target *t, const struct debuginfo_opts *o)
{
	struct elf_file *dbg;
	char root[32];
	int err;

	target_root(t->pid, root, sizeof(root));
	err = debuginfo_find(t->elf, root, t->exe_path, o, &t->symbols);
	if (err)
		return err;
	err = elf_file_open(t->symbols.path, &dbg);
	if (err && !o->quiet) {
		fprintf(stderr,
			"dial9-bpf: failed to read the debug file %s: %s: give a whole "
			"one with --symbols\n",
			t->symbols.path, err == -ENOEXEC ? "not a valid ELF file" : strerror(-err));
	}
	if (err)
		return err;
	elf_file_take_syms(t->elf, dbg);
	elf_file_close(dbg);
	return 0;
}

const char *target_symbols_file(const struct target *t)
{
	return t->symbols.method == DEBUGINFO_SYMTAB ? t->exe_link : t->symbols.path;
}

int target_open(int pid, const struct debuginfo_opts *o, struct target **out)
{
	struct target *t = calloc(1, sizeof(*t));
	int err;

	if (!t) {
		fprintf(stderr, "dial9-bpf: failed to allocate: %s\n", strerror(ENOMEM));
		return -ENOMEM;
	}
	t->pid = pid;
	t->lock_fd = -1;
	err = check_process(t);
	if (err)
		goto fail;
	err = elf_file_open(t->exe_link, &t->elf);
	if (err) {
		fprintf(stderr,
			"dial9-bpf: failed to read the executable %s of pid %d: %s: give the "
			"pid of a native (ELF) Tokio program\n",
			t->exe_path, pid,
			err == -ENOEXEC ? "not a valid ELF file" : strerror(-err));
		goto fail;
	}
	if (!elf_file_has_symtab(t->elf) && !file_mentions_tokio(t->exe_link)) {
		report_no_tokio(t);
		err = -ENOENT;
		goto fail;
	}
	if (!elf_file_has_symtab(t->elf)) {
		err = load_debug_symbols(t, o);
		if (err)
			goto fail;
	}
	err = find_probes(t);
	if (err) {
		fprintf(stderr, "dial9-bpf: failed to scan symbols of %s: %s\n", t->exe_path,
			strerror(-err));
		goto fail;
	}
	if (!t->count[PROBE_POLL]) {
		report_no_tokio(t);
		err = -ENOENT;
		goto fail;
	}
	classify_insns(t);
	drop_costly_park_points(t);
	report_discovery(t);
	*out = t;
	return 0;
fail:
	target_close(t);
	return err;
}

/* A stripped executable's debug file, looked for without a word: for the --cgroup supervisor,
 * which says itself why it skips a process. exe is /proc/PID/exe. */
static int quiet_debug_symbols(struct target *t, const char *exe, const struct debuginfo_opts *o)
{
	struct debuginfo_opts quiet = *o;
	ssize_t n;

	quiet.quiet = true;
	if (sscanf(exe, "/proc/%d/exe", &t->pid) != 1 ||
	    (n = readlink(exe, t->exe_path, sizeof(t->exe_path) - 1)) < 0)
		return -ENOENT;
	t->exe_path[n] = '\0';
	return load_debug_symbols(t, &quiet);
}

int target_exe_is_tokio(const char *exe, const struct debuginfo_opts *o, const char **why)
{
	struct target *t = calloc(1, sizeof(*t));
	int err;

	if (!t)
		return -ENOMEM;
	t->lock_fd = -1;
	err = elf_file_open(exe, &t->elf);
	if (err == -ENOEXEC) {
		*why = "not an ELF executable";
		err = 0;
	} else if (!err && !elf_file_has_symtab(t->elf) && !file_mentions_tokio(exe)) {
		*why = "not a Tokio program";
	} else if (!err && !elf_file_has_symtab(t->elf) && quiet_debug_symbols(t, exe, o)) {
		*why = "stripped (no .symtab) and no debug file found: its Tokio functions cannot "
		       "be found";
	} else if (!err) {
		err = find_probes(t);
		if (!err && t->count[PROBE_POLL])
			err = 1;
		else if (!err)
			*why = "not a Tokio program";
	}
	target_close(t);
	return err;
}

static int by_hits_desc(const void *x, const void *y, void *arg)
{
	const struct target *t = arg;
	double hx = t->probes[*(const size_t *)x].hits, hy = t->probes[*(const size_t *)y].hits;

	return hx < hy ? 1 : hx > hy ? -1 : 0;
}

/* A probe hit at least this share as often as the most hit one goes in the hot link. */
#define HOT_SHARE 0.25

/* A current_thread runtime parked in the last window: its chains of wakes run on one thread,
 * where the wake probes measure their slowdown (sampler.bpf.c, resume_kind). */
static void wake_wake_probes(struct target *t, const uint64_t *window_hits, size_t n)
{
	bool seen = false;
	double top = 0;

	for (size_t i = 0; i < t->nprobes && i < n && !seen; i++)
		seen = t->probes[i].kind == PROBE_IDLE && window_hits[i] && t->probes[i].name &&
		       strstr(t->probes[i].name, "::current_thread::");
	for (size_t i = 0; i < n && seen; i++)
		top = top > (double)window_hits[i] ? top : (double)window_hits[i];
	for (size_t i = 0; i < t->nprobes && seen; i++) {
		/* Never attached so far, so never hit: counted as hit as often as the most hit
		 * probe (twice this window's, halved below) until windows show otherwise. Taken
		 * as cold, the kept link (arming.c) took every wake probe at once and left the
		 * hottest in place between windows until its hits evicted it; and in the cold
		 * link a hot one stays in place through each window's detach (tens of ms). */
		if (t->probes[i].dormant)
			t->probes[i].hits = 2.0 * (top > 1.0 ? top : 1.0);
		t->probes[i].dormant = false;
	}
}

int target_rank_probes(struct target *t, const uint64_t *window_hits, size_t n)
{
	double total = 0, top;

	wake_wake_probes(t, window_hits, n);

	if (!t->order && !(t->order = calloc(t->nprobes ? t->nprobes : 1, sizeof(*t->order))))
		return -ENOMEM;
	for (size_t i = 0; i < t->nprobes; i++) {
		/* Halved each window: a probe that went quiet drops out of the hot link soon. */
		t->probes[i].hits =
		    0.5 * t->probes[i].hits + 0.5 * (double)(i < n ? window_hits[i] : 0);
		total += t->probes[i].hits;
		t->order[i] = i;
	}
	if (total <= 0)
		return 0; /* nothing known yet: hot by kind, as listed */
	t->ranked = true;
	/* Stable enough: ties keep no particular order, and none is needed. */
	qsort_r(t->order, t->nprobes, sizeof(*t->order), by_hits_desc, t);
	top = t->probes[t->order[0]].hits;
	for (size_t j = 0; j < t->nprobes; j++) {
		struct probe_spec *p = &t->probes[t->order[j]];

		/* Only the offsets hit about as often as the most hit one. Each breakpoint is put
		 * in and taken out under the target's mmap lock, and a hit on a probe already in
		 * place waits for it: with every probe hit in recent windows in the hot link, most
		 * hit first, each of the link's other eight installs stalled a worker on the hot
		 * demo (~10 stalls a window; 0.7 with this split, and a third less CPU per window
		 * in the tool). The cold link goes in first and comes out alongside the hot one
		 * (detach_probes). */
		p->hot = p->hits >= 0.5 && p->hits >= HOT_SHARE * top;
	}
	return 0;
}

void target_close(struct target *t)
{
	if (!t)
		return;
	if (t->lock_fd >= 0) {
		/* Unlinked while still held: a tool waiting on this inode re-checks the name. */
		unlinkat(t->lock_dir_fd, t->lock_name, 0);
		close(t->lock_dir_fd);
		close(t->lock_fd);
	}
	for (size_t i = 0; i < t->nprobes; i++)
		free(t->probes[i].name);
	free(t->probes);
	free(t->order);
	if (t->elf)
		elf_file_close(t->elf);
	free(t);
}

bool target_exe_changed(const struct target *t)
{
	struct stat st;

	if (!t->exe_ino || stat(t->exe_link, &st))
		return false;
	return (uint64_t)st.st_dev != t->exe_dev || (uint64_t)st.st_ino != t->exe_ino;
}

/* Opens the lock file NAME in DFD without following or writing through what another user
 * may have planted there: only a regular file of ours, of one link, is used; anything else is
 * removed first. */
static int open_lock_file(int dfd, const char *name)
{
	for (int tries = 0; tries < 4; tries++) {
		struct stat st;
		int fd =
		    openat(dfd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);

		if (fd >= 0 && !fstat(fd, &st) && S_ISREG(st.st_mode) && st.st_nlink == 1 &&
		    st.st_uid == geteuid())
			return fd;
		if (fd >= 0)
			close(fd);
		if (unlinkat(dfd, name, 0) && errno != ENOENT)
			return -errno;
	}
	return -EEXIST;
}

static int lock_dir_open(const char *dir)
{
	int dfd, err;

	if (mkdir(dir, 0700) && errno != EEXIST)
		return -errno;
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	err = out_dir_check(dfd, dir, "lock directory (DIAL9_LOCK_DIR)");
	if (err) {
		close(dfd);
		return err;
	}
	return dfd;
}

int target_lock(struct target *t)
{
	const char *dir = getenv("DIAL9_LOCK_DIR");
	char buf[32], name[24];
	ssize_t n;
	int fd, dfd;

	if (!dir || !*dir)
		dir = "/run/dial9-bpf";
	dfd = lock_dir_open(dir);
	if (dfd == -EPERM)
		return -EPERM;
	if (dfd < 0)
		return 0; /* nothing to coordinate through */
	snprintf(name, sizeof(name), "%d.lock", t->pid);
	if (snprintf(t->lock_path, sizeof(t->lock_path), "%s/%s", dir, name) >=
	    (int)sizeof(t->lock_path)) {
		close(dfd);
		return 0;
	}
	for (int tries = 0; tries < 10; tries++) {
		struct stat held, named;

		fd = open_lock_file(dfd, name);
		if (fd < 0)
			break;
		if (flock(fd, LOCK_EX | LOCK_NB)) {
			int holder = 0;

			n = pread(fd, buf, sizeof(buf) - 1, 0);
			if (n > 0) {
				buf[n] = 0;
				holder = atoi(buf);
			}
			close(fd);
			close(dfd);
			if (holder > 0)
				fprintf(stderr,
					"dial9-bpf: pid %d is already being profiled by dial9-bpf "
					"pid %d (lock %s): stop that one first\n",
					t->pid, holder, t->lock_path);
			else
				fprintf(stderr,
					"dial9-bpf: pid %d is already being profiled by another "
					"dial9-bpf (lock %s): stop that one first\n",
					t->pid, t->lock_path);
			return -EBUSY;
		}
		/* The holder we waited for may have unlinked the file we locked: lock the one
		 * the name gives now. */
		if (!fstat(fd, &held) && !fstatat(dfd, name, &named, AT_SYMLINK_NOFOLLOW) &&
		    held.st_ino == named.st_ino && held.st_dev == named.st_dev) {
			n = snprintf(buf, sizeof(buf), "%d\n", (int)getpid());
			if (ftruncate(fd, 0) || pwrite(fd, buf, (size_t)n, 0) != n) {
				/* Still locked; only the holder's pid is missing from messages. */
			}
			t->lock_fd = fd;
			t->lock_dir_fd = dfd;
			snprintf(t->lock_name, sizeof(t->lock_name), "%s", name);
			return 0;
		}
		close(fd);
	}
	close(dfd);
	return 0;
}
