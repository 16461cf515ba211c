/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Layouts shared by bpf/sampler.bpf.c and the loader: ring-buffer records and the sampler's
 * per-worker state. Everything is fixed-size and little-endian so the loader can read records
 * straight out of the ring buffer.
 */
#ifndef DIAL9_BPF_H
#define DIAL9_BPF_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define D9_MAX_STACK_DEPTH 127
/* Poll nesting per thread: blocking task > worker loop > task poll, plus block_on inside
 * block_in_place. Deeper nesting is counted, not tracked. */
#define D9_MAX_NEST 8
/* Inclusion probabilities are fixed point: D9_PROB_ONE is p = 1. */
#define D9_PROB_SHIFT 32
#define D9_PROB_ONE (1ULL << D9_PROB_SHIFT)
/* Worker keys are either the ArcInner<Worker>* seen at worker::run (a user-space pointer, so
 * bit 63 is clear) or, when the tool attached after the worker started, the thread id with
 * this bit set. */
#define D9_WORKER_TID_FLAG (1ULL << 63)
#define D9_NSEC_PER_SEC 1000000000ULL

enum d9_record_type {
	D9_REC_SAMPLE = 1,
	D9_REC_EPOCH = 2,
	D9_REC_WORKER = 3,
	D9_REC_RAW_STACK = 4, /* precedes the D9_REC_SAMPLE of the same thread it belongs to */
	D9_REC_EXEC = 5,      /* the target exec'd: its maps no longer describe what was sampled */
	D9_REC_LONG_POLL = 6, /* a worker blocked inside a poll for at least --long-poll-ms */
};

struct d9_exec {
	__u32 type; /* D9_REC_EXEC */
	__u32 pid;
	__u64 ts_ns;
};

/* Raw user stack for DWARF unwinding in userspace: registers at the park point and whole
 * pages of stack from the page holding sp up (data[0] is at sp & ~(page - 1)), at most
 * D9_MAX_RAW_STACK; the end of the stack mapping stops the copy. */
#define D9_MAX_RAW_STACK 32768
#define D9_RAW_PAGE 4096
struct d9_raw_stack {
	__u32 type; /* D9_REC_RAW_STACK */
	__u32 tid;
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u32 len; /* bytes of data */
	__u32 pad;
	__u8 data[D9_MAX_RAW_STACK];
};
#define D9_RAW_STACK_HDR 40 /* offsetof(struct d9_raw_stack, data) */

/* Largest offset into a task cell taken for the task id's: the cell holds the future itself,
 * which Tokio boxes above 16 KiB only since 1.39. */
#define D9_MAX_CELL_OFFSET (1u << 20)

/* Tokio task state word bits (tokio/src/runtime/task/state.rs). */
#define D9_TASK_RUNNING 0x1ULL
#define D9_TASK_COMPLETE 0x2ULL
#define D9_TASK_JOIN_INTEREST 0x8ULL /* a JoinHandle exists */

enum d9_sample_flags {
	D9_SF_TASK_ID_OK = 1 << 0,    /* task_id was read and passed the sanity checks */
	D9_SF_STACK_AT_PARK = 1 << 1, /* stack captured at a park point inside the poll */
	D9_SF_PENDING = 1 << 2,	      /* the poll returned Pending */
	D9_SF_COMPLETE = 1 << 3,      /* the task completed in this poll */
	D9_SF_FREED = 1 << 4,	      /* the task was deallocated inside the poll */
	D9_SF_CAPPED = 1 << 5,	      /* the cap had refused a selection earlier in this epoch */
	D9_SF_IDLE_KNOWN = 1 << 6,    /* the previous Pending return was observed: idle is exact */
	D9_SF_WINDOWED = 1 << 7,      /* selected inside an armed window (duty < 1) */
	D9_SF_AFTER_YIELD = 1 << 8,   /* the task resumed after yielding: limited by the CPU */
	/* Woken from inside another task's poll, in a wake chain begun on this thread: its
	 * resumes come at the rate this thread runs it, which the probes slow like a yield's (a
	 * channel's consumer on a busy current_thread runtime). */
	D9_SF_WOKEN_BY_TASK = 1 << 9,
	/* A blocking-pool task (spawn_blocking, a worker's own thread): never sampled. */
	D9_SF_BLOCKING = 1 << 10,
	/* An on-CPU sample: a clock tick on a worker thread (bpf/cpu_samples.bpf.h), not a poll.
	 * task_id is the task being polled then (0: none, the scheduler) when
	 * D9_SF_TASK_ID_OK, unknown otherwise (Tokio's current_task_id not yet located). */
	D9_SF_CPU = 1 << 11,
};

/* Probe kinds in the upper byte of a uprobe's bpf cookie; the low byte is the park point. One
 * program (probe_entry) serves every armed probe, told apart by its cookie, so that probes of
 * any kinds can share a link and be grouped by how often they are hit (user/probes/attach.c). */
#define D9_COOKIE(kind, park) (((kind) << 8) | (park))
/* Set when the probed instruction cannot be emulated and is single-stepped: a second trap,
 * several times the cost of a hit on a "push" the kernel emulates (user/probes/calibrate.c). */
#define D9_COOKIE_XOL (1ULL << 16)
/* Set when the probe sits at the entry of a function the probe point calls: the stack is
 * its caller's, one return away (see move_yield_to_pending_path in user/target/target.c). */
#define D9_COOKIE_CALLEE (1ULL << 17)
/* Set on a park point whose outcome is read at its return (park_outcome[] in the program):
 * the entry leaves the decision, and the stack, to the return probe. */
#define D9_COOKIE_AT_RETURN (1ULL << 18)
/* The cookie of the return probe of such a park point on kernels without uprobe sessions
 * (same program, its own link). */
#define D9_COOKIE_RETURN (1ULL << 19)
/* Set on the park points of Tokio's task-to-task primitives (semaphore, Notify, channel
 * receive, JoinHandle): a task parked there is woken by another task's poll, as a rule. */
#define D9_COOKIE_SYNC (1ULL << 20)
#define D9_COOKIE_KIND(c) (((c) >> 8) & 0xff)
#define D9_COOKIE_PARK(c) ((c)&0xff)
/* Bits 32..: the probe's index in the loader's list, for the per-probe hit counts
 * (probe_hits in sampler.bpf.c). Removing the most hit probes first makes a window's end
 * fast: every hit while removal goes on waits for the target's mmap lock. */
#define D9_MAX_PROBES 4096
/* Worker threads whose CPU time is followed (worker_cpu in bpf/long_polls.bpf.h); the loader
 * reads them all at each epoch's start. */
#define D9_MAX_WORKER_THREADS 1024
#define D9_COOKIE_INDEX(i) ((__u64)(i) << 32)
#define D9_COOKIE_GET_INDEX(c) ((c) >> 32)
enum d9_probe_cookie_kind {
	D9_PK_POLL = 1,
	D9_PK_DEALLOC = 2,
	D9_PK_PARK = 3,
	D9_PK_IDLE = 4, /* the worker parks: every poll on its thread has returned */
};

/*
 * Armed windows (array map "arming", one entry, written by the loader). The per-poll probes
 * are attached only around randomly placed windows covering a fraction `duty` of the time;
 * only transitions inside [window_start, window_end) are eligible, and their inclusion
 * probability is duty x p. armed_since is when the probes were last attached: a Pending return
 * seen after it, with the probes attached since, gives an exact idle interval.
 */
struct d9_arming {
	__u64 window_start;
	__u64 window_end;
	__u64 duty; /* D9_PROB_ONE = always armed */
	__u64 armed_since;
	/* Bumped at every attach: a thread's poll nesting seen in an earlier arming is stale
	 * (the events that ended polls entered then came while the probes were out), so it
	 * restarts from zero. */
	__u64 generation;
	/* A measuring window (arming.c): the park-point probes are left out and nothing is
	 * sampled; its busy time and hits per poll, against the sampling windows', give what a
	 * hit costs inside the target. */
	__u64 lean;
	/* Only the kept probes are in place (between windows): the next event on a thread may
	 * come long after its poll returned, so the polls it finishes get no end time. */
	__u64 kept_only;
	/* Tokio's task id counter when the window was armed (0: unknown). A task first seen in
	 * the window with a lower id was spawned, and so first polled, before: its poll is a
	 * resume, however rarely it runs. */
	__u64 next_task_id;
	/* Where the window is (enum d9_arm_phase), so that the hits it costs outside the gate
	 * are counted by cause: putting the links in, settling, taking them out. */
	__u64 phase;
};

enum d9_arm_phase {
	D9_PHASE_IDLE = 0, /* between windows: only kept probes are in place */
	D9_PHASE_ATTACH,   /* a window's links going in */
	D9_PHASE_WINDOW,   /* settling before the gate (window_start), the gate, its end */
	D9_PHASE_DETACH,   /* the gate closed, the links coming out */
};

/*
 * How a park point's outcome (Ready or Pending) is observed, per probe (park_outcome[] in
 * sampler.bpf.c, filled by the loader from user/target/park_outcome.c). A value the method does not
 * expect makes the probe unobservable for the rest of the run (invalid): never a wrong name.
 */
enum d9_outcome_method {
	D9_OUT_NONE = 0,   /* not observable: the function returns () (AtomicWaker) */
	D9_OUT_ALWAYS = 1, /* on the Pending path only (yield) */
	D9_OUT_RET_AL = 2, /* Poll<small enum> in al */
	D9_OUT_SRET_BYTE =
	    3, /* returned through memory: rax = the hidden pointer; tag byte at off */
	D9_OUT_JOIN_STATE = 4, /* JoinHandle::poll: the joined task not COMPLETE at return */
};

struct d9_park_outcome {
	__u8 method;
	__u8 off;	  /* D9_OUT_SRET_BYTE: the tag's byte offset in the returned value */
	__u8 pending;	  /* the tag value of Pending */
	__u8 invalid;	  /* an unexpected value was seen: treated as D9_OUT_NONE from then on */
	__u32 ready_mask; /* tag values (< 32) that mean Ready */
	__u64 pending_n;  /* observed outcomes in selected polls, for metadata.json */
	__u64 ready_n;
	__u64 bad_n;
	__u64 bad_value; /* the first unexpected value */
};

/* How a sample's park point was decided (d9_sample.park_how). */
enum d9_park_how {
	D9_HOW_NONE = 0,       /* no park point was hit */
	D9_HOW_PENDING = 1,    /* the first leaf whose return said Pending */
	D9_HOW_ALWAYS = 2,     /* a leaf hit only on its Pending path (yield) */
	D9_HOW_UNOBSERVED = 3, /* no leaf was seen Pending: the first whose outcome is unknown */
};

/* Park points: which probe captured the stack (the uprobe's bpf cookie). */
enum d9_park_point {
	D9_PARK_NONE = 0,
	D9_PARK_LEAF = 4,  /* a Tokio resource's poll: Sleep, Acquire, Notified, ... */
	D9_PARK_YIELD = 5, /* tokio::task::yield_now */
	/* Not a park point: a task's waker fired (task::waker::wake_by_val / wake_by_ref),
	 * rdi = the woken task's Header*. Attached with the park points (not in lean windows). */
	D9_PARK_WAKE = 6,
};

struct d9_sample {
	__u32 type; /* D9_REC_SAMPLE */
	__u32 flags;
	__u32 pid;
	__u32 tid;
	__u64 worker;
	__u64 task_id;
	__u64 task_hdr;
	__u64 task_vtable; /* its task type's vtable; 0 when unread */
	__u64 window;	   /* the armed window it was selected in (arming generation) */
	__u64 epoch;	   /* CLOCK_MONOTONIC second */
	__u64 prob;	   /* inclusion probability (window duty x selection), D9_PROB_ONE = 1 */
	__u64 duty;	   /* the window's duty, D9_PROB_ONE = 1: prob / duty is the draw's */
	__u64 idle_start_ns;
	__u64 idle_end_ns; /* = start of the resuming poll */
	__u64 poll_end_ns;
	__u64 park_ns;
	__u32 park_point;
	__s32 stack_bytes;  /* bpf_get_stack result; negative errno on failure */
	__u32 park_how;	    /* enum d9_park_how */
	__u32 also_pending; /* other leaves seen Pending in the poll, after the one named */
	/* The entry of the named leaf when its stack was taken at its return (the stack starts
	 * at the call site in its caller): the loader puts it on top. 0 otherwise. */
	__u64 leaf_ip;
	/* The task's scheduler: the Arc of the runtime (or LocalSet) that runs it, which names
	 * the runtime in a process with several; 0 when unread. */
	__u64 runtime;
	__u64 stack[D9_MAX_STACK_DEPTH];
};

/*
 * What a worker did while a window's gate was open: the probes slow it down there (each hit
 * costs ~1 us), so a CPU-bound worker makes fewer transitions inside windows than outside,
 * and windows alone would under-estimate them. The loader turns these into the worker's
 * in-window slowdown: probe time (hits x cost per hit) that its idle time could not absorb,
 * as a share of its time (see collector.c).
 */
struct d9_gate_time {
	__u64 hits;    /* probe hits on the worker's thread */
	__u64 busy_ns; /* between events while not parked */
	__u64 idle_ns; /* parked (Context::park / park_timeout) */
	/* The part of busy_ns in polls of tasks that did not resume from a yield: work that comes
	 * at the rate its events do, which the probes' slowdown does not thin out. */
	__u64 clock_ns;
	__u64 clock_hits; /* the part of hits in those polls */
	/* Time between events the thread waited on a run queue for a CPU (its sched_info
	 * run_delay), not in busy_ns: a worker preempted by other threads makes no progress
	 * there, with or without probes, so that time is not the tasks' useful time. */
	__u64 wait_ns;
	/* Time the program spent capturing the selected polls' stacks and writing their
	 * samples (~9 us each on the demo, bench/RESULTS.md), in neither busy_ns nor idle_ns:
	 * lost to the tasks like the hits, but per sample, not per hit, so kept apart from the
	 * hits' cost. */
	__u64 capture_ns;
	/* In-window resumes of tasks woken by another task's poll whose previous return was
	 * seen on this thread: their idle intervals, the part of those since their wake chain
	 * began (the driver's wake that started it, see sampler.bpf.c on_wake), and the probe
	 * hits and captures of this thread during that part. The chain waited on this thread's
	 * polls, which the probes slowed by that much; the rest waited on a clock. */
	__u64 woken_cycle_ns;
	__u64 woken_chain_ns;
	__u64 woken_hits;
	__u64 woken_capture_ns;
	/* The thread's time on the CPU inside the gate, from the scheduler's switches and the
	 * probe events (gate_oncpu): busy_ns misses the part of a window after a thread's last
	 * event in it. 0 where switches are not followed (long polls off). */
	__u64 oncpu_ns;
};
/* Emitted when a worker moves to a new epoch: the closed epoch's counts. The loader reads the
 * still-open epoch of every worker from the map at exit. */
struct d9_epoch {
	__u32 type; /* D9_REC_EPOCH */
	__u32 capped;
	__u64 worker;
	__u64 epoch;
	__u64 eligible;
	__u64 selected;
	__u64 refused;
	__u64 prob;
	__u32 calibrating;
	__u32 last_tid;
	struct d9_gate_time gate;
};

/* A worker thread's time on the CPU while it runs a worker (bpf/long_polls.bpf.h, map
 * worker_cpu, key tid). */
struct d9_core_time {
	__u64 since;  /* on the CPU since, as last counted; 0: off the CPU */
	__u64 ns;     /* in all */
	__u64 worker; /* the worker key it ran at its last tick: its time goes there */
};

/* A worker with this much CPU time a second is one the windows are sized to sample. */
#define D9_ACTIVE_CPU_NS 1000000ULL

/* A worker's time on the CPU while running it per epoch, averaged over epochs: the loader
 * writes it at each epoch's boundary, from the map worker_ns, before the next epoch's windows
 * (user/probes/arming.c). */
struct d9_worker_share {
	__u64 epoch;   /* the last epoch in cpu_ns */
	__u64 cpu_ns;  /* per second; 0: none yet */
	__u64 at_ns;   /* worker_ns when it was taken */
	__u64 at_time; /* and the time then (CLOCK_MONOTONIC) */
	__u32 whole;   /* whole epochs in cpu_ns, saturating at 2 */
	__u32 pad;
};

/* A worker's time on the CPU while running it, in all (map worker_ns), and since when it is
 * followed. */
struct d9_worker_ns {
	__u64 ns;
	__u64 first_ns; /* bpf_ktime_get_ns (CLOCK_MONOTONIC) */
};

/*
 * Every eligible resume inside a window, counted per task type, worker, epoch, window and
 * kind of resume (resume_counts): a task type's resumes over the run are estimated from these
 * exact in-window counts, without the variance of drawing samples from them
 * (user/collect/resume_counts.c).
 */
struct d9_count_key {
	__u64 vtable; /* the task type */
	__u64 worker;
	__u32 epoch;
	__u32 window; /* the arming generation */
	__u32 flags;  /* D9_SF_WINDOWED, D9_SF_AFTER_YIELD, D9_SF_WOKEN_BY_TASK */
	__u32 pad;
};

struct d9_count_val {
	__u64 resumes;
	__u64 duty; /* the window's, as d9_arming.duty */
};

struct d9_worker_seen {
	__u32 type; /* D9_REC_WORKER */
	__u32 tid;
	__u64 worker;
	__u64 ts_ns;
};

/* Words of Tokio's context::CONTEXT thread-local searched for current_task_id. */
#define D9_LP_WORDS 32
/* lp_learn slots: matches per word, then the word before it being 1 (an Option<u64> tag)
 * per word, then the observations. */
#define D9_LP_LEARN_SLOTS (2 * D9_LP_WORDS + 1)
#define D9_LP_UNLEARNED 0xffffffffu
/* Words of the worker's Core hashed at each tick: any poll taken from a queue bumps its tick. */
#define D9_LP_CORE_WORDS 64

/* A worker thread off the CPU inside a poll (it switched out voluntarily while Tokio's
 * current_task_id was set) for at least lp_min_ns: from its switch out to its switch in. Or
 * (on_cpu) one poll seen running at clock ticks spanning at least lp_min_ns (a period
 * added): out_ns is the first tick, blocked_ns 0 and on_cpu_ns the span plus a period. */
struct d9_long_poll {
	__u32 type; /* D9_REC_LONG_POLL */
	__u32 tid;
	__u64 worker;
	__u64 task_id;
	__u64 out_ns; /* switched out (CLOCK_MONOTONIC) */
	__u64 blocked_ns;
	__u64 on_cpu_ns;
	__s32 stack_bytes; /* user stack at the switch out, or a negative errno */
	__u32 on_cpu;	   /* 1: seen running at clock ticks (blocked_ns is then 0) */
	__u32 host_tid;	   /* tid in the root pid namespace, as the BPF maps key threads */
	__u32 pad;
	__u64 stack[D9_MAX_STACK_DEPTH];
};

/* One thread of the target, as the thread_regs iterator writes it (user/target/worker_tls.c): its
 * TLS base and its last user stack pointer seen by the kernel. */
struct d9_thread_regs {
	__u32 tid; /* in the root pid namespace, as the threads map keys it */
	__u32 pad;
	__u64 fsbase;
	__u64 sp;
};

/* Per logical worker sampler state (BPF hash map, key = worker key). */
struct d9_worker_state {
	__u64 epoch;
	__u64 eligible;
	__u64 selected;
	__u64 refused;
	__u64 prob;
	__u64 tokens_ns; /* token bucket, in nanoseconds of hz's interval */
	__u64 rng;
	__u64 first_ns; /* when the worker was first seen: its calibrating epoch is partial */
	__u64 duty;	/* window duty of its last eligible transition */
	__u64 rate;	/* windows: eligible per epoch at full coverage, smoothed (x 2^16) */
	__u32 capped;
	__u32 calibrating;
	__u32 last_tid;
	__u32 rate_n; /* sampled epochs in rate, saturating */
	/* Windows, where the workers' CPU time is followed: eligible transitions (x 2^8) and
	 * time on the CPU inside the gate, each a running average over epochs (1/4 to the
	 * last), whose ratio is the worker's rate per CPU second. */
	__u64 cnt_sm;
	__u64 cpu_sm;
	__u32 cpu_n; /* sampled epochs in those, saturating */
	__s32 owed;  /* samples short of hz so far, bounded (sampler.bpf.c, owed_add) */
	struct d9_gate_time gate; /* this epoch's, emitted with it */
	/* The current block of the stratified draw (sampler.bpf.c, block_draw). */
	__u32 blk_len;
	__u32 blk_left;
	__u32 blk_pick;
	__u32 target; /* this epoch's samples to aim at: hz and half of what is owed */
};

/* Counters the loader reports in metadata.json (per-CPU array, index = enum value). */
enum d9_counter {
	D9_CNT_POLLS = 0,
	D9_CNT_ELIGIBLE,
	D9_CNT_RB_DROPS,
	D9_CNT_NEST_OVERFLOW,
	D9_CNT_THREAD_MAP_FULL,
	D9_CNT_TASK_ID_BAD,
	D9_CNT_PARK_HITS,
	D9_CNT_STACK_ERRORS,
	D9_CNT_HITS,	   /* every probe program run in the target: the cost driver */
	D9_CNT_HITS_XOL,   /* the part of those on single-stepped instructions */
	D9_CNT_CALIB_HITS, /* the loader's own calibration probe */
	/* In-gate polls, hits and busy ns (run-queue waits left out) of sampling windows and of
	 * lean ones, across threads: the measurement of a hit's cost in the target. Only polls
	 * of tasks resumed from a yield (one kind, in both kinds of window), and none that
	 * captured a stack or followed one that did. */
	D9_CNT_FULL_POLLS,
	D9_CNT_FULL_HITS,
	D9_CNT_FULL_BUSY_NS,
	D9_CNT_LEAN_POLLS,
	D9_CNT_LEAN_HITS,
	D9_CNT_LEAN_BUSY_NS,
	D9_CNT_CAPTURE_NS,     /* stack captures and sample writes, in windows or not */
	D9_CNT_RESUME_BY_ID,   /* first seen in a window, known a resume by its task id */
	D9_CNT_RET_HITS,       /* park-point return probes run (part of D9_CNT_HITS) */
	D9_CNT_RET_UNMATCHED,  /* a return with no matching entry (probe put in mid-call) */
	D9_CNT_BLOCKING_POLLS, /* polls of blocking-pool tasks, kept out of the sampling */
	/* Hits inside an open gate (part of D9_CNT_HITS): they scale with the gate's length; the
	 * rest come with each window's attach, settling and removal, and with kept probes. */
	D9_CNT_GATE_HITS,
	D9_CNT_COUNT_FULL, /* an eligible resume not counted: resume_counts was full */
	/* On-CPU samples: clock ticks on a target worker thread, those sent before the task id's
	 * word was learned (no task id), and those whose record did not fit the ring buffer. */
	D9_CNT_CPU_TICKS,
	D9_CNT_CPU_UNLEARNED,
	D9_CNT_CPU_DROPS,
	/* --unwind ebpf: how each walk ended (bpf/unwind.bpf.h). */
	D9_CNT_EBPF_UNWIND_END,	      /* at the outermost frame (its return address undefined) */
	D9_CNT_EBPF_UNWIND_UNCOVERED, /* at a pc no table row covers: the stack is truncated */
	D9_CNT_EBPF_UNWIND_ERRORS,    /* a stack read failed or the walk made no progress */
	D9_CNT_EBPF_UNWIND_DEPTH,     /* D9_MAX_STACK_DEPTH frames taken */
	D9_CNT_LP_SLEEPS, /* a worker slept inside a poll: its stack taken, in case it is long */
	/* The hits outside the gate (part of D9_CNT_HITS) by phase (enum d9_arm_phase): while a
	 * window's links go in, while it settles before the gate (and after the gate until the
	 * arming thread wakes to close it), while they come out. */
	D9_CNT_ATTACH_HITS,
	D9_CNT_SETTLE_HITS,
	D9_CNT_DETACH_HITS,
	D9_CNT_MAX,
};

/* Unwind tables for --unwind ebpf (user/stacks/unwind_tables.c builds them from .eh_frame,
 * bpf/unwind.bpf.h walks with them). A row holds from its pc to the next row's. */
enum d9_unwind_cfa {
	D9_UNW_NONE = 0, /* not covered: no CFI, or a rule the walker does not evaluate */
	D9_UNW_RSP = 1,	 /* CFA = rsp + cfa_off */
	D9_UNW_RBP = 2,	 /* CFA = rbp + cfa_off */
	D9_UNW_END = 3,	 /* the outermost frame: its return address is undefined */
};

struct d9_unwind_row {
	__u32 pc;      /* ELF virtual address in the module */
	__s32 cfa_off; /* CFA = register + cfa_off; the return address is at CFA - 8 */
	__s16 rbp_off; /* the caller's rbp is saved at CFA + rbp_off; 0: rbp is unchanged */
	__u8 cfa;      /* enum d9_unwind_cfa */
	__u8 pad;
};

/* One executable mapping of the target and its rows. */
#define D9_UNWIND_MAX_MODULES 128 /* sorted by start: binary-searched */
struct d9_unwind_module {
	__u64 start, end; /* the mapping: [start, end) */
	__u64 bias;	  /* runtime address - ELF virtual address */
	__u32 first;	  /* index of its first row in the rows map */
	__u32 count;	  /* its rows, sorted by pc */
};

#endif /* DIAL9_BPF_H */
