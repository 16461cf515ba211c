/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Target discovery: the process, its executable, and the Tokio functions to probe in it. */
#ifndef D9_TARGET_H
#define D9_TARGET_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "debuginfo.h"
#include "dial9_bpf.h"

struct elf_file;

enum probe_kind {
	PROBE_POLL,	  /* raw::poll, entry and return */
	PROBE_DEALLOC,	  /* raw::dealloc */
	PROBE_WORKER_RUN, /* multi_thread::worker::run */
	PROBE_PARK,	  /* park points; cookie = enum d9_park_point */
	PROBE_IDLE,	  /* the worker parks: its thread's polls have all returned */
};

/* What a probe stands for, to say what discovery found and what it missed (one line at start,
 * "discovery" in metadata.json). */
enum probe_group {
	PG_POLL,
	PG_DEALLOC,
	PG_WORKER_RUN,
	PG_WORKER_PARK,
	PG_BLOCK_ON_PARK, /* a current_thread runtime's park: not every program has one */
	PG_YIELD,
	PG_SLEEP,
	PG_ACQUIRE,
	PG_NOTIFIED,
	PG_ATOMIC_WAKER,
	PG_IO,
	PG_JOIN,
	PG_WAKE, /* task::waker::wake_by_val/wake_by_ref (D9_PARK_WAKE) */
	PG_MAX,
};

struct probe_spec {
	enum probe_kind kind;
	uint32_t cookie;
	enum probe_group group;
	uint64_t vaddr;
	uint64_t offset; /* uprobe file offset */
	char *name;	 /* demangled */
	bool xol;	 /* the probed instruction is single-stepped, not emulated */
	bool hot;	 /* among the most hit: attached last, removed first */
	double hits;	 /* recent hits per window (arming.c), to order the probes */
	/* In the kept link (arming.c): not hit in recent windows, so left in place between
	 * windows instead of being put in and taken out for each. */
	bool kept;
	/* At the entry of a function the probe point calls (vaddr, offset are the callee's):
	 * the stack is taken from its caller. */
	bool at_callee;
	/* Park points: how the outcome is observed (park_outcome.c); at_return when by a
	 * return probe, which then takes the stack. */
	struct d9_park_outcome outcome;
	bool at_return;
	/* Not attached until needed: the wake probes (D9_PARK_WAKE) cost a hit per wake, yields
	 * included, and correct only chains run on one thread, so they wait until a
	 * current_thread runtime is seen parking (target_rank_probes). */
	bool dormant;
};

struct target {
	int pid;
	char exe_link[64];	 /* /proc/PID/exe: attaches and reads the inode really mapped */
	char exe_path[PATH_MAX]; /* the path as the target sees it, for messages */
	char comm[17];
	struct elf_file *elf;	  /* function symbols from symbols.path when stripped */
	struct debuginfo symbols; /* where the symbols came from */
	struct probe_spec *probes;
	size_t nprobes;
	size_t *order; /* probes by recent hits, most first (NULL: as listed) */
	bool ranked;   /* some window's hits were counted: hot and cold are measured, not guessed */
	size_t count[PROBE_IDLE + 1];
	size_t found[PG_MAX];	    /* functions found per group, probed or not */
	size_t park_points_skipped; /* single-stepped instructions: too costly per hit */
	bool keeps_frame_pointers;  /* its functions set up rbp: frame-pointer stacks are whole */
	uint64_t exe_dev, exe_ino;  /* the executable at open: a change means the target exec'd */
	int lock_fd;		    /* target_lock(); -1 if none */
	int lock_dir_fd;	    /* the directory holding it, while held */
	char lock_path[96];
	char lock_name[24];
};

/* Checks the process and finds the probe points, in the symbols of its separate debug file
 * (found as debuginfo.h says, by o) when the executable is stripped. On failure prints one
 * line naming the problem and the fix, and returns a negative errno. */
int target_open(int pid, const struct debuginfo_opts *o, struct target **out);
/* The file whose .symtab names the target's code and data: the executable, or its debug file. */
const char *target_symbols_file(const struct target *t);
void target_close(struct target *t);
/*
 * Folds one armed window's hits per probe (window_hits[i] for probe i, n of them) into the
 * probes' recent hits (halved each window), orders them most hit first (t->order) and marks
 * hot the ones hit recently about as often as the most hit one (at least a quarter of its
 * recent hits). A few offsets take nearly every hit (on the hot demo: yield_now and one
 * raw::poll instance): the hot link is attached last and removed first, most hit offset
 * first, so hits are in place, and paid for, for the shortest time around each window, and
 * few of them wait on the installing or removal of the others.
 */
int target_rank_probes(struct target *t, const uint64_t *window_hits, size_t n);

/*
 * Whether the executable at exe (/proc/PID/exe) is a Tokio program target_open() would accept
 * with the same options o, without printing: 1 yes; 0 no, with *why set to a short static
 * reason ("not a Tokio program", "stripped ...", ...); a negative errno when it cannot be read
 * (the process is gone, a kernel thread). For watching many processes, where most are not
 * Tokio programs.
 */
int target_exe_is_tokio(const char *exe, const struct debuginfo_opts *o, const char **why);

/*
 * Whether the target has exec'd another executable since target_open(): /proc/PID/exe now
 * names another file (device and inode). The probes sit on the old file, so they no longer
 * fire. false while the answer is unknown (the process is gone: see pidfd).
 */
bool target_exe_changed(const struct target *t);

/*
 * Claims the target for this tool, so that two tools do not profile one process at once: an
 * exclusive flock on DIR/PID.lock (DIR: $DIAL9_LOCK_DIR, default /run/dial9-bpf), holding this
 * tool's pid, kept until target_close(), which removes it. Returns 0, also when no lock
 * directory can be made (nothing to coordinate through); -EBUSY after printing one line naming
 * the pid of the tool holding it. Scope: tools that share the lock directory and see the target
 * under the same pid. A lock directory others could swap files in is refused: -EPERM after one
 * line.
 */
int target_lock(struct target *t);
const char *probe_kind_name(enum probe_kind k);
const char *probe_group_name(enum probe_group g);
/* Whether group g's park points are Tokio's task-to-task primitives' (a semaphore's Acquire,
 * Notify, a channel's receive, a JoinHandle): a task parked there is woken by another task's
 * poll, as a rule (D9_COOKIE_SYNC). */
bool probe_group_task_to_task(enum probe_group g);

/* Probes kept in group g. */
size_t target_group_probes(const struct target *t, enum probe_group g);
/* Whether group g is missing: none of its functions is probed, and it is one every
 * multi-thread Tokio program has, or one found in this executable but not probed. */
bool target_group_missing(const struct target *t, enum probe_group g);
/* Writes the "discovery" member of metadata.json (no trailing comma or newline): missing
 * groups, functions found and probed per group, what still works. */
void target_discovery_json(FILE *f, const struct target *t);
const char *park_point_name(uint32_t cookie);

/* Whether the kernel single-steps the instruction starting with these bytes when probed (x86
 * uprobes emulate push of a register, the first instruction of most functions, and relative
 * jumps, calls and nop, the first of many in a release build without frame pointers; they
 * step the rest). */
bool probe_insn_needs_xol(const unsigned char *insn, size_t len);

/* Direct call targets (e8 rel32) among code's bytes at vaddr, at most max. Every e8 byte is
 * read as a call: callers accept only targets that start a known function. */
size_t target_direct_calls(const unsigned char *code, size_t len, uint64_t vaddr, uint64_t *targets,
			   size_t max);
/* The same for calls and jumps (e8, e9): where a function's tail call goes too. */
size_t target_branch_targets(const unsigned char *code, size_t len, uint64_t vaddr,
			     uint64_t *targets, size_t max);
/* Whether a callee of YieldNow::poll by that name is the one its Pending path calls (the
 * runtime's defer in Tokio 1.x); in legacy mangling the name fits every LocalKey::with, and
 * the caller also requires a single call site. */
bool target_is_yield_pending_callee(const char *demangled);
/* Direct calls or jumps (e8/e9 rel32) to callee among code's bytes at vaddr, every such byte
 * read as one. */
size_t target_count_calls_to(const unsigned char *code, size_t len, uint64_t vaddr,
			     uint64_t callee);

/* Classifies a demangled symbol; returns 1 and fills kind/cookie when it is a probe point. */
int target_classify_symbol(const char *demangled, enum probe_kind *kind, uint32_t *cookie);

#endif
