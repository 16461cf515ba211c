// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "attach.h"
#include "dial9_bpf.h"
#include "sampler.skel.h"
#include "target.h"

/* From the kernel's uapi (6.6+), absent from Debian 12's headers. */
#define D9_BPF_TRACE_UPROBE_MULTI 48
#define D9_BPF_TRACE_UPROBE_SESSION 57 /* 6.13+ */
#define D9_BPF_F_UPROBE_MULTI_RETURN 1U
#define D9_BPF_LINK_CREATE 28

/* The link_create member of union bpf_attr for uprobe_multi, padded to the union's size so
 * the kernel's check that unknown trailing bytes are zero holds. */
union d9_link_create_attr {
	struct {
		uint32_t prog_fd;
		uint32_t target_fd;
		uint32_t attach_type;
		uint32_t flags;
		uint64_t path;
		uint64_t offsets;
		uint64_t ref_ctr_offsets;
		uint64_t cookies;
		uint32_t cnt;
		uint32_t um_flags;
		uint32_t pid;
	} um;
	uint8_t pad[144];
};

/* Whether the running kernel is WANT_MAJOR.WANT_MINOR or later, unless the variable ENV is "0"
 * (which turns the feature off, to test the fallback). */
static bool kernel_has(const char *env, int want_major, int want_minor)
{
	const char *off = getenv(env);
	struct utsname u;
	int major, minor;

	if (off && !strcmp(off, "0"))
		return false;
	if (uname(&u) || sscanf(u.release, "%d.%d", &major, &minor) != 2)
		return false;
	return major > want_major || (major == want_major && minor >= want_minor);
}

bool attach_multi_supported(void)
{
	return kernel_has("DIAL9_UPROBE_MULTI", 6, 6);
}

/* Park points whose return says their outcome go in uprobe session links (set before load,
 * for every link of the run). */
static bool session_links;

/* Whether this kernel has uprobe sessions (6.13+); DIAL9_UPROBE_SESSION=0 uses a return
 * probe on every call instead. */
static bool session_supported(void)
{
	return kernel_has("DIAL9_UPROBE_SESSION", 6, 13);
}

bool attach_uses_sessions(void)
{
	return session_links;
}

void attach_prepare(struct sampler_bpf *skel, bool multi)
{
	struct bpf_program *prog;

	session_links = multi && session_supported();
	if (multi) {
		bpf_object__for_each_program(prog, skel->obj) if (bpf_program__type(prog) ==
								  BPF_PROG_TYPE_KPROBE)
		    bpf_program__set_expected_attach_type(prog, D9_BPF_TRACE_UPROBE_MULTI);
	}
	if (session_links)
		bpf_program__set_expected_attach_type(skel->progs.park_session,
						      D9_BPF_TRACE_UPROBE_SESSION);
	else
		bpf_program__set_autoload(skel->progs.park_session, false);
}

static int grow(struct attachment *a)
{
	size_t ncap;
	void *np;

	if (a->n < a->cap)
		return 0;
	ncap = a->cap ? a->cap * 2 : 64;
	if (a->multi)
		np = realloc(a->fds, ncap * sizeof(*a->fds));
	else
		np = realloc(a->links, ncap * sizeof(*a->links));
	if (!np)
		return -ENOMEM;
	if (a->multi)
		a->fds = np;
	else
		a->links = np;
	a->cap = ncap;
	return 0;
}

static uint64_t cookie_kind(const struct probe_spec *p)
{
	switch (p->kind) {
	case PROBE_POLL:
		return D9_COOKIE(D9_PK_POLL, 0);
	case PROBE_DEALLOC:
		return D9_COOKIE(D9_PK_DEALLOC, 0);
	case PROBE_PARK:
		return D9_COOKIE(D9_PK_PARK, p->cookie);
	case PROBE_IDLE:
		return D9_COOKIE(D9_PK_IDLE, 0);
	default:
		return 0;
	}
}

static uint64_t cookie_of(const struct target *t, const struct probe_spec *p, bool retprobe)
{
	return cookie_kind(p) | (p->xol ? D9_COOKIE_XOL : 0) |
	       (p->kind == PROBE_PARK && probe_group_task_to_task(p->group) ? D9_COOKIE_SYNC : 0) |
	       (p->at_callee ? D9_COOKIE_CALLEE : 0) | (p->at_return ? D9_COOKIE_AT_RETURN : 0) |
	       (retprobe ? D9_COOKIE_RETURN : 0) | D9_COOKIE_INDEX((uint64_t)(p - t->probes));
}

static int attach_one(struct attachment *a, struct bpf_program *prog, const struct target *t,
		      const struct probe_spec *p, bool retprobe)
{
	LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = retprobe,
		    .bpf_cookie = cookie_of(t, p, retprobe));
	struct bpf_link *l;
	int err;

	if ((err = grow(a)))
		return err;
	/* pid = the target: libbpf 1.1 opens a pid = -1 uprobe on CPU 0 only, and the pid
	 * filter keeps other processes that map the same binary out of the maps. */
	l = bpf_program__attach_uprobe_opts(prog, t->pid, t->exe_link, p->offset, &opts);
	if (!l) {
		err = -errno;
		fprintf(stderr, "dial9-bpf: failed to attach %s probe to %s at %s+0x%llx: %s\n",
			retprobe ? "return" : "entry", p->name, t->exe_path,
			(unsigned long long)p->offset, strerror(-err));
		return err;
	}
	a->links[a->n++] = l;
	a->probes++;
	return 0;
}

typedef bool (*probe_filter)(const struct probe_spec *p);

static bool is_armed_any(const struct probe_spec *p)
{
	return !p->dormant && (p->kind == PROBE_POLL || p->kind == PROBE_DEALLOC ||
			       p->kind == PROBE_PARK || p->kind == PROBE_IDLE);
}

/* Park points whose return says their outcome (park_outcome.c). */
static bool is_ret(const struct probe_spec *p)
{
	return p->kind == PROBE_PARK && p->at_return;
}

/* In an entry link: all but the park points a session link covers whole. */
static bool is_entry(const struct probe_spec *p)
{
	return is_armed_any(p) && !(session_links && is_ret(p));
}

/* The probes a window puts in: the armed ones not kept in place between windows. */
static bool is_armed(const struct probe_spec *p)
{
	return is_entry(p) && !p->kept;
}

static bool is_kept(const struct probe_spec *p)
{
	return is_entry(p) && p->kept;
}

/* Hot probes: the ones hit in recent windows (target_rank_probes() marks them from the
 * program's per-probe counts), or before any is known, by kind. */
static bool is_hot(const struct probe_spec *p)
{
	return is_armed(p) && p->hot;
}

static bool is_armed_cold(const struct probe_spec *p)
{
	return is_armed(p) && !p->hot;
}

static bool is_lean_cold(const struct probe_spec *p)
{
	return is_armed_cold(p) && p->kind != PROBE_PARK;
}

static bool is_lean_hot(const struct probe_spec *p)
{
	return is_hot(p) && p->kind != PROBE_PARK;
}

/* Their return (or session) links, by the same split as the entry links. */
static bool is_ret_cold(const struct probe_spec *p)
{
	return is_ret(p) && !p->kept && !p->hot;
}

static bool is_ret_hot(const struct probe_spec *p)
{
	return is_ret(p) && !p->kept && p->hot;
}

static bool is_ret_kept(const struct probe_spec *p)
{
	return is_ret(p) && p->kept;
}

static bool is_any(const struct probe_spec *p)
{
	(void)p;
	return true;
}

static bool is_worker_run(const struct probe_spec *p)
{
	return p->kind == PROBE_WORKER_RUN;
}

/* One uprobe_multi link: every probe the filter selects, entry or return. */
static int attach_multi(struct attachment *a, struct bpf_program *prog, const struct target *t,
			probe_filter want, bool retprobe, int pid, bool quiet)
{
	bool session = bpf_program__expected_attach_type(prog) == D9_BPF_TRACE_UPROBE_SESSION;
	union d9_link_create_attr attr;
	uint64_t *offs = calloc(t->nprobes, sizeof(*offs));
	uint64_t *cookies = calloc(t->nprobes, sizeof(*cookies));
	uint32_t cnt = 0;
	int fd, err = 0;

	if (!offs || !cookies) {
		err = -ENOMEM;
		goto out;
	}
	/* In the target's order of hotness: a link's offsets are removed in array order, and
	 * the most hit ones should go first (see D9_COOKIE_INDEX). */
	for (size_t j = 0; j < t->nprobes; j++) {
		size_t i = t->order ? t->order[j] : j;

		if (!want(&t->probes[i]))
			continue;
		offs[cnt] = t->probes[i].offset;
		cookies[cnt++] = cookie_of(t, &t->probes[i], retprobe);
	}
	if (!cnt || (err = grow(a)))
		goto out;
	memset(&attr, 0, sizeof(attr));
	attr.um.prog_fd = (uint32_t)bpf_program__fd(prog);
	attr.um.attach_type = session ? D9_BPF_TRACE_UPROBE_SESSION : D9_BPF_TRACE_UPROBE_MULTI;
	attr.um.path = (uint64_t)(uintptr_t)t->exe_link;
	attr.um.offsets = (uint64_t)(uintptr_t)offs;
	attr.um.cookies = (uint64_t)(uintptr_t)cookies;
	attr.um.cnt = cnt;
	attr.um.um_flags = retprobe ? D9_BPF_F_UPROBE_MULTI_RETURN : 0;
	attr.um.pid = (uint32_t)pid;
	fd = (int)syscall(__NR_bpf, D9_BPF_LINK_CREATE, &attr, sizeof(attr));
	if (fd < 0) {
		err = -errno;
		if (!quiet)
			fprintf(stderr, "dial9-bpf: failed to attach %u %s probes to %s: %s\n", cnt,
				session	   ? "session"
				: retprobe ? "return"
					   : "entry",
				t->exe_path, strerror(-err));
		goto out;
	}
	a->fds[a->n++] = fd;
	a->probes += cnt;
out:
	free(offs);
	free(cookies);
	return err;
}

static int attach_filtered(struct attachment *a, struct bpf_program *prog, const struct target *t,
			   probe_filter want, bool retprobe)
{
	int err = 0;

	if (a->multi)
		return attach_multi(a, prog, t, want, retprobe, t->pid, false);
	for (size_t i = 0; i < t->nprobes && !err; i++)
		if (want(&t->probes[i]))
			err = attach_one(a, prog, t, &t->probes[i], retprobe);
	return err;
}

int attach_probes_prog(struct bpf_program *prog, const struct target *t, bool retprobe,
		       struct attachment *a)
{
	int err = attach_filtered(a, prog, t, is_any, retprobe);

	if (err)
		detach_probes(a);
	return err;
}

/* The park points that want their return: a session link (entry and return in one) or a
 * return link beside their entry link. */
static int attach_ret(struct attachment *a, struct sampler_bpf *skel, const struct target *t,
		      probe_filter want)
{
	if (session_links)
		return attach_filtered(a, skel->progs.park_session, t, want, false);
	return attach_filtered(a, skel->progs.probe_entry, t, want, true);
}

int attach_probes(struct sampler_bpf *skel, const struct target *t, enum attach_group g,
		  struct attachment *a)
{
	int err;

	if (g == ATTACH_PERSISTENT) {
		err = attach_filtered(a, skel->progs.worker_run, t, is_worker_run, false);
	} else if (g == ATTACH_HOLD) {
		/* The program runs for the target's threads only (the kernel checks the link's
		 * process on each hit), and this process does not map the target's executable. */
		err = a->multi ? attach_multi(a, skel->progs.probe_entry, t, is_armed_any, false,
					      (int)getpid(), true)
			       : -EOPNOTSUPP;
	} else if (g == ATTACH_KEPT) {
		err = attach_ret(a, skel, t, is_ret_kept);
		if (!err)
			err = attach_filtered(a, skel->progs.probe_entry, t, is_kept, false);
	} else {
		/* No return probe on polls: see finish_frame() in bpf/sampler.bpf.c; park points
		 * whose outcome their return says get one (none in lean windows, which have no
		 * park points). Cold probes first and hot ones last (detach_probes takes every link
		 * out at once, the hot ones started first): installing takes milliseconds, and the
		 * target pays for every hit on a probe in place. A return link goes in before its
		 * entry link, so that no entry is hit without its return in place; a session link
		 * holds both, and those park points are in no entry link. */
		bool lean = g == ATTACH_ARMED_LEAN;

		err = lean ? 0 : attach_ret(a, skel, t, is_ret_cold);
		if (!err)
			err = attach_filtered(a, skel->progs.probe_entry, t,
					      lean ? is_lean_cold : is_armed_cold, false);
		if (!err)
			err = attach_filtered(a, skel->progs.probe_entry, t,
					      lean ? is_lean_hot : is_hot, false);
		if (!err && !lean)
			err = attach_ret(a, skel, t, is_ret_hot);
	}
	if (err)
		detach_probes(a);
	return err;
}

struct detach_slice {
	struct attachment *a;
	size_t lo, hi;
};

enum { DETACH_THREADS = 8 };

static void *detach_slice(void *arg)
{
	struct detach_slice *s = arg;

	for (size_t i = s->lo; i < s->hi; i++) {
		if (s->a->multi)
			close(s->a->fds[i]);
		else
			bpf_link__destroy(s->a->links[i]);
	}
	return NULL;
}

/* Closes each slice in a thread of its own, started in the order given; a slice whose
 * thread cannot start is closed here. */
static void detach_slices(struct detach_slice *slices, size_t n)
{
	pthread_t th[DETACH_THREADS];
	bool started[DETACH_THREADS] = {};

	for (size_t i = 0; i < n; i++) {
		if (slices[i].lo == slices[i].hi)
			continue;
		started[i] = !pthread_create(&th[i], NULL, detach_slice, &slices[i]);
		if (!started[i])
			detach_slice(&slices[i]);
	}
	for (size_t i = 0; i < n; i++)
		if (started[i])
			pthread_join(th[i], NULL);
}

void detach_probes(struct attachment *a)
{
	struct detach_slice slices[DETACH_THREADS];
	size_t per, n = 0;

	if (!a->n)
		goto out;
	if (a->multi) {
		/* Every link in a thread of its own, the hot ones (the last) started first:
		 * closing a link waits for an RCU tasks-trace grace period (~25 ms here) after
		 * taking its probes out, and a link closed after another keeps its probes in
		 * place, and hit, all that time: the cold links hold probes hit now and then,
		 * below the hot link's share (target_rank_probes), and they must not wait for each
		 * other (bench/RESULTS.md, "Where a window's hits fall"). Every removal takes the
		 * target's mmap lock for writing and a hit on a probe still in place waits for it,
		 * so the hot links, which hold only the few most hit offsets, go first. A hot park
		 * point's return link comes out with its entry link: while either is in, every
		 * call still traps. */
		for (size_t i = a->n; i > 0 && n < DETACH_THREADS; i--, n++)
			slices[n] = (struct detach_slice){a, i - 1, i};
		slices[n - 1].lo = 0; /* the coldest links together, past DETACH_THREADS */
		detach_slices(slices, n);
		goto out;
	}
	/* Each removal waits for an RCU grace period in the tool, not in the target; removing
	 * links from several threads overlaps those waits. */
	per = (a->n + DETACH_THREADS - 1) / DETACH_THREADS;
	for (; n < DETACH_THREADS; n++) {
		slices[n].a = a;
		slices[n].lo = n * per < a->n ? n * per : a->n;
		slices[n].hi = slices[n].lo + per < a->n ? slices[n].lo + per : a->n;
	}
	detach_slices(slices, n);
out:
	free(a->links);
	free(a->fds);
	a->links = NULL;
	a->fds = NULL;
	a->n = a->cap = 0;
}
