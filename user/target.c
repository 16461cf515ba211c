// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "demangle.h"
#include "elf_file.h"
#include "park_outcome.h"
#include "target.h"

/* Names after demangling without the hash. Generic functions demangle the same for every
 * instance in legacy mangling, and with "::<...>" appended in v0 mangling. */
static const struct {
	const char *name;
	enum probe_kind kind;
	uint32_t cookie;
	int prefix; /* match "name" or "name::<" / "name<" */
} probe_names[] = {
    {"tokio::runtime::task::raw::poll", PROBE_POLL, 0, 1},
    {"tokio::runtime::task::raw::dealloc", PROBE_DEALLOC, 0, 1},
    {"tokio::runtime::scheduler::multi_thread::worker::run", PROBE_WORKER_RUN, 0, 0},
    {"tokio::runtime::thread_pool::worker::run", PROBE_WORKER_RUN, 0, 0},
    {"tokio::runtime::scheduler::multi_thread::worker::Context::park", PROBE_IDLE, 0, 0},
    {"tokio::runtime::scheduler::multi_thread::worker::Context::park_timeout", PROBE_IDLE, 0, 0},
    /* Park points: the outermost Tokio resource polls, where a task stores its waker and
     * returns Pending. Not the waker functions themselves: clone_waker single-steps (about
     * 18x the cost of a hit here) and wake_* mostly run on behalf of other tasks. */
    {"<tokio::time::sleep::Sleep as core::future::future::Future>::poll", PROBE_PARK, D9_PARK_LEAF,
     0},
    {"<tokio::sync::batch_semaphore::Acquire as core::future::future::Future>::poll", PROBE_PARK,
     D9_PARK_LEAF, 0},
    {"<tokio::sync::notify::Notified as core::future::future::Future>::poll", PROBE_PARK,
     D9_PARK_LEAF, 0},
    {"tokio::sync::task::atomic_waker::AtomicWaker::register_by_ref", PROBE_PARK, D9_PARK_LEAF, 0},
    {"tokio::runtime::io::registration::Registration::poll_ready", PROBE_PARK, D9_PARK_LEAF, 0},
    {"<tokio::runtime::task::join::JoinHandle<*> as core::future::future::Future>::poll",
     PROBE_PARK, D9_PARK_LEAF, 0},
    {"<tokio::task::yield_now::yield_now::*::YieldNow as core::future::future::Future>::poll",
     PROBE_PARK, D9_PARK_YIELD, 0},
};

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

int target_classify_symbol(const char *name, enum probe_kind *kind, uint32_t *cookie)
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
			*kind = probe_names[i].kind;
			*cookie = probe_names[i].cookie;
			return 1;
		}
		if (strncmp(dm, probe_names[i].name, n))
			continue;
		if (dm[n] &&
		    !(probe_names[i].prefix && (dm[n] == '<' || !strncmp(dm + n, "::<", 3))))
			continue;
		*kind = probe_names[i].kind;
		*cookie = probe_names[i].cookie;
		return 1;
	}
	return 0;
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
	char path[64], state = '?';
	ssize_t n;
	FILE *f;

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
	snprintf(path, sizeof(path), "/proc/%d/comm", t->pid);
	f = fopen(path, "re");
	if (f) {
		if (fgets(t->comm, sizeof(t->comm), f))
			t->comm[strcspn(t->comm, "\n")] = 0;
		fclose(f);
	}
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
		     enum probe_kind kind, uint32_t cookie)
{
	struct probe_spec *p;
	uint64_t off;

	if (elf_file_vaddr_to_offset(t->elf, sym->addr, &off))
		return 0; /* not in a loaded segment: nothing to probe */
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
	    .vaddr = sym->addr,
	    .offset = off,
	    /* Until the hit counts say otherwise (arming.c). */
	    .hot = kind == PROBE_POLL || (kind == PROBE_PARK && cookie == D9_PARK_YIELD),
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
		enum probe_kind kind;
		uint32_t cookie;
		char *dm;
		int err;

		if (!maybe_tokio(syms[i].name))
			continue;
		dm = demangle(syms[i].name);
		if (!dm)
			return -ENOMEM;
		err = target_classify_symbol(dm, &kind, &cookie)
			  ? add_probe(t, cap, &syms[i], dm, kind, cookie)
			  : 0;
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

bool probe_insn_needs_xol(const unsigned char *b, size_t len)
{
	if (len >= 1 && b[0] >= 0x50 && b[0] <= 0x57)
		return false; /* push r64 */
	if (len >= 2 && (b[0] == 0x41) && b[1] >= 0x50 && b[1] <= 0x57)
		return false; /* push r8-r15 */
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
	const struct elf_sym *s = elf_file_lookup(ef, vaddr), *al;
	size_t n;

	if (!s || s->addr != vaddr)
		return NULL;
	al = elf_file_aliases(ef, &n);
	for (size_t i = 0; i < n; i++)
		if (al[i].addr == vaddr)
			return NULL;
	return s;
}

/*
 * YieldNow::poll is entered twice per yield: once to return Pending, and again when the task
 * resumes, to return Ready. Its entry probe costs a third of all hits on a worker that yields,
 * and the Ready hit says nothing. Only the Pending path hands the waker to the runtime's defer
 * list, through a call of its own (LocalKey::with for with_defer's closure in Tokio 1.x); the
 * park point moves to that callee's entry, and the program steps out of it (D9_COOKIE_CALLEE).
 * The callee is found among the direct calls in YieldNow::poll's code and must be a function
 * of its own (merged functions share names), called from nowhere else in the executable (other
 * callers would count as yields), whose first instruction the kernel emulates: push %rbp where
 * stacks come from frame pointers, the one at which x86's perf_callchain_user adds the return
 * address at [sp] (bpf_get_stack then skips the callee's own frame). Otherwise the probe stays at
 * the entry.
 */
static void move_yield_to_pending_path(struct target *t, int fd)
{
	for (size_t i = 0; i < t->nprobes; i++) {
		struct probe_spec *p = &t->probes[i];
		const struct elf_sym *fn = elf_file_lookup(t->elf, p->vaddr), *callee;
		unsigned char code[512], first[4];
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
			if (!callee || elf_file_vaddr_to_offset(t->elf, callee->addr, &off) ||
			    pread(fd, first, sizeof(first), (off_t)off) != (ssize_t)sizeof(first) ||
			    probe_insn_needs_xol(first, sizeof(first)) ||
			    (t->keeps_frame_pointers && first[0] != 0x55))
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
		move_yield_to_pending_path(t, fd);
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

int target_open(int pid, struct target **out)
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
		fprintf(stderr,
			"dial9-bpf: %s (pid %d) is stripped (no .symtab), so Tokio's poll "
			"functions cannot be found: build it with `strip = false` (or keep a "
			"copy with symbols) and restart it\n",
			t->exe_path, pid);
		err = -ENOENT;
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
	*out = t;
	return 0;
fail:
	target_close(t);
	return err;
}

int target_exe_is_tokio(const char *exe, const char **why)
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
	} else if (!err && !elf_file_has_symtab(t->elf)) {
		*why = file_mentions_tokio(exe) ? "stripped (no .symtab): its Tokio functions "
						  "cannot be found"
						: "not a Tokio program";
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

int target_rank_probes(struct target *t, const uint64_t *window_hits, size_t n)
{
	double total = 0, top;

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
		/* Unlinked while still held: a tool waiting on this inode re-checks the path. */
		unlink(t->lock_path);
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

int target_lock(struct target *t)
{
	const char *dir = getenv("DIAL9_LOCK_DIR");
	char buf[32];
	ssize_t n;
	int fd;

	if (!dir || !*dir)
		dir = "/run/dial9-bpf";
	if (mkdir(dir, 0700) && errno != EEXIST)
		return 0;
	if (snprintf(t->lock_path, sizeof(t->lock_path), "%s/%d.lock", dir, t->pid) >=
	    (int)sizeof(t->lock_path))
		return 0;
	for (int tries = 0; tries < 10; tries++) {
		struct stat held, named;

		fd = open(t->lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0)
			return 0;
		if (flock(fd, LOCK_EX | LOCK_NB)) {
			int holder = 0;

			n = pread(fd, buf, sizeof(buf) - 1, 0);
			if (n > 0) {
				buf[n] = 0;
				holder = atoi(buf);
			}
			close(fd);
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
		 * the path names now. */
		if (!fstat(fd, &held) && !stat(t->lock_path, &named) &&
		    held.st_ino == named.st_ino && held.st_dev == named.st_dev) {
			n = snprintf(buf, sizeof(buf), "%d\n", (int)getpid());
			if (ftruncate(fd, 0) || pwrite(fd, buf, (size_t)n, 0) != n) {
				/* Still locked; only the holder's pid is missing from messages. */
			}
			t->lock_fd = fd;
			return 0;
		}
		close(fd);
	}
	return 0;
}
