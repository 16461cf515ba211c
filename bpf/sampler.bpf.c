// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Per-worker task sampler for Tokio, on uprobes.
 *
 * Programs:
 *  - probe_entry: the entry uprobe of every armed probe, told apart by its cookie:
 *    tokio::runtime::task::raw::poll (rdi = Header*), raw::dealloc (a task freed inside its
 *    own poll must not be read when the poll ends), the worker's park (every poll of the
 *    thread has ended), the wakers' wake (which task woke which) and park points (leaf
 *    resource polls, yields) where the stack of a parking task is captured. On kernels without
 *    uprobe sessions it also runs as the return probe of park points whose return value says
 *    Ready or Pending. raw::poll has no return probe: a poll ends when the same thread enters
 *    a poll at the same or a shallower stack depth, or parks (finish_frame).
 *  - park_session: those park points in a uprobe session link (6.13+), so that only a
 *    selected poll's call pays for the return.
 *  - worker_run: the entry of worker::run (rdi = ArcInner<Worker>*, the logical worker).
 *  - calib_probe: the loader's measurement of what one hit costs.
 *  - target_exec: the target exec'd; the loader must stop.
 *  - thread_regs: a task iterator giving each target thread's TLS base and sp, for workers
 *    that entered worker::run before the attach (user/target/worker_tls.c).
 *
 * Map design:
 *  - threads (LRU hash, key tid): the poll nesting stack of each thread. Only the owning thread
 *    touches its entry, so no locking. LRU so that dead threads age out under thread churn; an
 *    evicted live entry only costs the polls in flight.
 *  - tasks (LRU hash, key Header*): when the task last returned Pending. A resume is eligible
 *    only when this is known, which is dial9's "resume after Pending" transition.
 *  - workers (hash, key worker key): the sampler of each logical worker: epoch counts, the
 *    probability in force, the token bucket of the cap and the PRNG. Keyed by worker, not by
 *    thread or CPU, because block_in_place moves a worker to another thread mid-epoch. Updates
 *    are plain read-modify-write: a worker runs on one thread at a time, and the rare race
 *    during a handoff costs at most a miscounted transition.
 *  - stacks, raw_stacks (key tid): the frame-pointer stack and, for DWARF unwinding, the
 *    registers and raw user stack captured at a selected poll's park point, until the poll
 *    ends. Per thread, not per CPU: the thread can migrate between the park and the end.
 *  - counters (per-CPU array): statistics only, summed by the loader.
 *  - events (ring buffer): samples, closed epochs and worker bindings, in order per CPU.
 *  - kept_alarm (ring buffer): the first hit on a kept probe between windows.
 *  - arming (array): the current armed window, written by the loader (include/dial9_bpf.h).
 *  - tls_workers (hash, key tid): the worker key of threads that ran worker::run before the
 *    attach, found by the loader in Tokio's thread-local context (user/target/worker_tls.c); read
 *    when a thread's state is made.
 *
 * Every poll of a task but its first is a resume after Pending, so a task seen polled once is
 * "known" and its later polls are eligible transitions even when the probes were detached in
 * between (armed windows); only the idle interval needs the previous Pending to be observed.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "dial9_bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile __u32 targ_tgid = 0;
const volatile __u64 per_worker_hz = 10;
const volatile __u64 token_interval_ns = D9_NSEC_PER_SEC / 10; /* 1e9 / hz */
const volatile __u64 bucket_ns = 2 * D9_NSEC_PER_SEC;	       /* burst x interval */
const volatile __u64 seed = 0x9e3779b97f4a7c15ULL;
/* Hits per probe (cookie index), read by the loader through the skeleton's mmap of .bss. */
__u64 probe_hits[D9_MAX_PROBES];
/* How each park point's outcome is read (by cookie index), written by the loader before the
 * probes go in; the program counts outcomes there and marks a probe invalid when a value does
 * not fit its method. */
struct d9_park_outcome park_outcome[D9_MAX_PROBES];
/* Set by the loader between windows while only kept probes are in place (arming.c,
 * sleep_until): the next hit on one of them clears it and wakes the arming thread through
 * kept_alarm, which otherwise sleeps until the next window instead of polling the counts. */
__u64 kept_alarm_armed;
/* Header/vtable layout observed in Tokio 1.24 (include/ and the reference notes); the loader
 * validates it against the binary before setting read_task_id. */
const volatile __u32 read_task_id = 1;
const volatile __u32 hdr_vtable_off = 16;
const volatile __u32 vtable_id_off = 72;
/* The scheduler offset in the vtable, just before the id offset (same layout notes). */
const volatile __u32 vtable_sched_off = 64;
/* The tool's own pid namespace: pids in samples are as the tool (and its --pid) sees them,
 * also when the tool itself runs in a container's pid namespace. */
const volatile __u64 pidns_dev = 0;
const volatile __u64 pidns_ino = 0;
/* Bytes of user stack copied for DWARF unwinding; 0 = frame pointers only. */
const volatile __u32 raw_stack_bytes = 0;
/* BPF_RB_NO_WAKEUP: the loader reads the ring on its own schedule, outside armed windows.
 * A wakeup per record would run the loader, on a core a worker needs, while the window is
 * open: with 2 busy workers on 2 cores that halves the CPU-bound tasks' poll rate inside
 * windows, and every estimate built on it. */
const volatile __u64 rb_flags = 0;

/* A point in a thread's time: its probe hits and capture time so far (thread_state.*_total),
 * so that the probes' share of a later interval on the same thread is known. */
struct mark {
	__u64 ns;
	__u64 hits;
	__u64 capture_ns;
	__u32 tid;
	/* An origin's: the chain began at a clock's event (the driver's wake of a timer or
	 * I/O, or a resume neither after a yield nor woken by a task), not at a yielded
	 * task's resume. */
	__u32 clock;
};

struct frame {
	__u64 hdr;
	__u64 entry_sp;
	__u64 entry_ns;
	__u64 idle_start_ns;
	__u64 prob;
	__u64 duty; /* the window's, when selected */
	__u64 epoch;
	__u64 worker;
	__u64 task_id;
	__u64 park_ns;
	__u64 runtime; /* the task's scheduler (task_scheduler), 0 when unknown */
	/* Where the wake chain that resumed this task began (on_wake): the tasks it wakes
	 * inherit it. */
	struct mark origin;
	__u32 selected;
	__u32 flags;
	__u32 park_point;
	__s32 stack_bytes;
	__u32 last_park; /* the last park point hit in this poll, selected or not */
	__u32 window;	 /* the arming generation it was selected in: its cluster */
	__u32 park_how;	 /* how park_point was decided (enum d9_park_how) */
	__u32 also_pending;
	/* The kinds of park point hit in this poll: 1 a task-to-task primitive's (D9_COOKIE_SYNC),
	 * 2 any other. A Sleep registers its waker through the same AtomicWaker::register_by_ref
	 * as a channel's receive, inside Sleep::poll: only a poll that hit nothing but such
	 * primitives waits on another task. */
	__u32 park_kinds;
	__u64 vtable; /* the task's, when selected */
	__u64 leaf_ip;
	/* A resume that a task woke: its wait's terms (d9_gate_time.woken_*, chain_account),
	 * and in a chain a clock began (chain_defer) its count's key, both kept until the poll
	 * ends; D9_CHAIN_*. */
	__u32 chain;
	__u64 chain_cycle_ns, chain_ns, chain_hits, chain_capture_ns;
	struct d9_count_key count_key;
};

#define D9_CHAIN_KEPT 1	   /* decided when the poll ends (chain_defer) */
#define D9_CHAIN_WOKE 2	   /* this poll woke a task (on_wake) */
#define D9_CHAIN_COUNTED 4 /* count_key holds the resume's count */
#define D9_CHAIN_TERMS 8   /* chain_* hold its wait's terms */

/* A park point entered in a selected poll whose outcome its return says: what the return
 * probe needs from the entry. Park points do not nest, so one per thread. */
struct open_leaf {
	__u64 sp;    /* at entry: the return finds sp + 8 */
	__u64 ip;    /* the function's entry, the sample's leaf frame */
	__u64 sret;  /* rdi: the hidden return pointer, returned in rax */
	__u64 hdr;   /* JoinHandle::poll: the joined task */
	__u64 probe; /* cookie index */
};

struct thread_state {
	__u32 depth;
	__u32 run_depth; /* frames enclosing the worker loop (its blocking-task poll) */
	/* The task being polled when the thread entered the worker loop: after block_in_place,
	 * the blocking task that runs it; 0 for a worker thread's own loop, or unknown. */
	__u64 run_task;
	__u64 generation;
	__u64 worker_ptr;
	/* In-gate time of this thread not yet handed to its worker's epoch (d9_gate_time). */
	__u64 last_event_ns;
	/* On the CPU since, as the gate's on-CPU time last counted it (its switch in, or its
	 * last probe event); 0 while off the CPU or not known. */
	__u64 on_since;
	__u64 last_run_delay; /* the thread's sched_info.run_delay at that event */
	__u32 parked;
	/* The task now polled resumed neither from a yield nor by another task's wake: its
	 * resumes come at the rate of its events, not at the rate its thread runs. */
	__u32 clock_driven;
	__u32 after_yield; /* the task now polled resumed from a yield */
	/* Taken as woken by the poll it ran behind (resume_kind): a chain for its weight, but
	 * clock-driven for the slowdown of the yielded tasks, whose useful time it is not. */
	__u32 guessed_chain;
	__u64 capture_ns; /* spent capturing since the last event (gate_account) */
	/* This poll is left out of the hit-cost measurement (D9_CNT_FULL_*): it captured a
	 * stack or follows one that did, and what a capture leaves in the caches is no hit's. */
	__u32 cost_skip;
	/* Where the wake chain of the poll that returned at this thread's latest poll entry
	 * began: a task resumed right behind it was most likely woken by it (see resume_kind).
	 * ns 0 when the thread parked or no poll returned there. */
	struct mark behind;
	__u64 hits_total;	/* every probe event on the thread */
	__u64 capture_total_ns; /* every capture on the thread */
	struct d9_gate_time gate;
	struct open_leaf leaf;
	struct frame frames[D9_MAX_NEST];
};

struct task_state {
	__u64 pending_ns;
	__u32 last_park;    /* where its last Pending poll parked (D9_PARK_*) */
	__u32 flags;	    /* D9_TS_* */
	__u64 runtime;	    /* its scheduler (task_scheduler), 0 when unknown */
	struct mark origin; /* the wake chain that woke it began there (on_wake); ns 0 = not seen */
	struct mark pending; /* where its last Pending return was seen */
};

/* Woken from inside another task's poll since it last resumed (on_wake). */
#define D9_TS_WOKEN_BY_TASK 1
/* Its last Pending poll parked last at a task-to-task primitive (D9_COOKIE_SYNC). */
#define D9_TS_SYNC_PARK 2

/* Set at the first wake probe hit, in any process of the run: from then on which task woke
 * which is known, not guessed (resume_kind). */
__u32 wakes_seen = 0;

struct stack_buf {
	__u64 ips[D9_MAX_STACK_DEPTH];
};

/* Threads that ran a probed function: the workers and the blocking pool (512 threads at
 * Tokio's default) fit four times over. Not more: an LRU map is preallocated whole at load,
 * some 1.6 KB an entry, in kernel memory per profiled process and in the run's start. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 2048);
	__type(key, __u32);
	__type(value, struct thread_state);
} threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct task_state);
} tasks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct d9_worker_state);
} workers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct stack_buf);
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, D9_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} kept_alarm SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct d9_arming);
} arming SEC(".maps");

/* Per-thread raw stack of the selected poll's last park point, until the poll ends. Not
 * preallocated: 32 KiB per thread, for the few threads that had a selected poll. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct d9_raw_stack);
} raw_stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} tls_workers SEC(".maps");

/* Never written: a zero value to insert from (per-CPU arrays cap values at 32 KiB). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct d9_raw_stack);
} zero_raw SEC(".maps");

/* Zeroed templates for map inserts (BPF stack is 512 bytes: too small for these). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct thread_state);
} zero_thread SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stack_buf);
} zero_stack SEC(".maps");

/* Drained by the loader a few epochs behind (user/collect/resume_counts.c): types x workers x
 * windows of those epochs fit, with room for a loader that falls behind. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct d9_count_key);
	__type(value, struct d9_count_val);
} resume_counts SEC(".maps");

static __always_inline void count_add(__u32 idx, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);

	if (v)
		*v += n;
}

static __always_inline void count(__u32 idx)
{
	count_add(idx, 1);
}

/* A worker running since before the attach entered worker::run unseen: its key, when the
 * loader found it in the thread's Tokio context; 0 otherwise (keyed by thread). */
static __always_inline __u64 tls_worker_of(__u32 tid)
{
	__u64 *key = bpf_map_lookup_elem(&tls_workers, &tid);

	return key ? *key : 0;
}

static __always_inline struct thread_state *thread_get(__u32 tid, bool create)
{
	struct thread_state *t = bpf_map_lookup_elem(&threads, &tid);
	__u32 zero = 0;

	if (t || !create)
		return t;
	t = bpf_map_lookup_elem(&zero_thread, &zero);
	if (!t)
		return NULL;
	if (bpf_map_update_elem(&threads, &tid, t, BPF_NOEXIST) &&
	    bpf_map_update_elem(&threads, &tid, t, BPF_ANY)) {
		count(D9_CNT_THREAD_MAP_FULL);
		return NULL;
	}
	t = bpf_map_lookup_elem(&threads, &tid);
	if (t)
		t->worker_ptr = tls_worker_of(tid);
	return t;
}

/* splitmix64: seeds each worker's generator from the global seed and its key. */
static __always_inline __u64 mix64(__u64 x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* xorshift64*: the upper 32 bits are a uniform draw for the Bernoulli decision. */
static __always_inline __u32 next_rand(struct d9_worker_state *ws)
{
	__u64 x = ws->rng;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	ws->rng = x;
	return (x * 0x2545f4914f6cdd1dULL) >> 32;
}

static __always_inline __u64 prob_for(__u64 target, __u64 expected)
{
	__u64 p = expected ? (target << D9_PROB_SHIFT) / expected : D9_PROB_ONE;

	return p > D9_PROB_ONE ? D9_PROB_ONE : p;
}

/*
 * The p of the worker's next block: the epoch's, or, once the worker has made half as many
 * eligible transitions again this epoch as that p expects (hz / p), 1.5 hz over its count so
 * far. Work that moves between workers (Tokio's stealing) lands on a worker whose p was set
 * for its quiet epochs; such an epoch then selects about 1.5 hz x (1 + ln(count / 1.5
 * expected)) instead of count x p, which only the cap bounded. Not from 1 x expected: epochs
 * of ordinary swings above it would be trimmed too, and a worker deliver under hz on average.
 * The count so far does not depend on the draws, and each selected transition carries the
 * 1/L of its own block, so the weights stay exact.
 */
static __always_inline __u64 burst_prob(const struct d9_worker_state *ws)
{
	__u64 p = prob_for(per_worker_hz, 2 * ws->eligible / 3);

	return p < ws->prob ? p : ws->prob;
}

/* Blocks longer than this are cut: p below 2^-30 selects nothing in any real run. */
#define D9_MAX_BLOCK (1U << 30)

/*
 * A stratified draw. A worker's eligible transitions fall into blocks of L consecutive ones,
 * L the floor or the ceiling of 1/prob at random so that blocks select at rate prob, and each
 * block selects exactly one, at a uniformly random place. Each transition is selected with
 * probability 1/L, known when it is drawn, so weights stay exact; but a worker's count per
 * epoch is its eligible count x prob give or take one, where independent draws spread it
 * binomially (+-32% an epoch at 10 a second, +-7% over a 20 s run). Returns L for the
 * selected transition, 0 for the others.
 */
static __always_inline __u32 block_draw(struct d9_worker_state *ws)
{
	__u32 at;

	if (!ws->blk_left) {
		__u64 prob = burst_prob(ws);
		__u64 inv = prob ? (D9_PROB_ONE << 16) / prob : (__u64)D9_MAX_BLOCK << 16;
		__u64 len = inv >> 16;

		if ((next_rand(ws) & 0xffff) < (inv & 0xffff))
			len++;
		if (len < 1)
			len = 1;
		if (len > D9_MAX_BLOCK)
			len = D9_MAX_BLOCK;
		ws->blk_len = (__u32)len;
		ws->blk_left = (__u32)len;
		ws->blk_pick = next_rand(ws) % (__u32)len;
	}
	at = ws->blk_len - ws->blk_left;
	ws->blk_left--;
	return at == ws->blk_pick ? ws->blk_len : 0;
}

/* A ring-buffer record, or NULL with the drop counted. */
static __always_inline void *rb_reserve(__u64 size)
{
	void *r = bpf_ringbuf_reserve(&events, size, 0);

	if (!r)
		count(D9_CNT_RB_DROPS);
	return r;
}

/* The current task's pid and tid as the tool's pid namespace sees them (the root namespace's
 * when the translation fails: then false). */
static __always_inline bool current_pid_tid(__u32 *pid, __u32 *tid)
{
	__u64 id = bpf_get_current_pid_tgid();

	*pid = id >> 32;
	*tid = (__u32)id;
	if (pidns_ino) {
		struct bpf_pidns_info ns = {};

		if (bpf_get_ns_current_pid_tgid(pidns_dev, pidns_ino, &ns, sizeof(ns)))
			return false;
		*pid = ns.tgid;
		*tid = ns.pid;
	}
	return true;
}

#include "unwind.bpf.h"
/* The one field read from the kernel's task_struct, relocated by CO-RE; a local type keeps
 * the object's BTF from pulling in task_struct and everything it refers to. */
#include "gate.bpf.h"
#include "long_polls.bpf.h"

static __always_inline void emit_epoch(__u64 key, struct d9_worker_state *ws)
{
	struct d9_epoch *e = rb_reserve(sizeof(*e));

	if (!e)
		return;
	e->type = D9_REC_EPOCH;
	e->capped = ws->capped;
	e->worker = key;
	e->epoch = ws->epoch;
	e->eligible = ws->eligible;
	e->selected = ws->selected;
	e->refused = ws->refused;
	e->prob = ws->prob;
	e->calibrating = ws->calibrating;
	e->last_tid = ws->last_tid;
	e->gate = ws->gate;
	bpf_ringbuf_submit(e, rb_flags);
}

/* The eligible transitions a worker of this full-coverage rate (x 2^16) makes in windows of
 * this duty. */
static __always_inline __u64 windowed_count(__u64 rate, __u64 duty)
{
	return ((rate >> 16) * (duty >> 16)) >> 16;
}

/* Folds the closing epoch's eligible count and time on the CPU inside the gate into the
 * worker's running sums: a calibrating epoch's only seeds them, the first sampled epoch
 * replaces that, the next is averaged in by half, then by 1/4 (as the duty's rate below). */
static __always_inline void cpu_rate_add(struct d9_worker_state *ws, __u64 count)
{
	__u64 cnt = count << 8, cpu = ws->gate.oncpu_ns;

	if (!ws->cpu_n || !ws->cpu_sm) {
		ws->cnt_sm = cnt;
		ws->cpu_sm = cpu;
	} else if (ws->cpu_n < 2) {
		ws->cnt_sm = (ws->cnt_sm + cnt) / 2;
		ws->cpu_sm = (ws->cpu_sm + cpu) / 2;
	} else {
		ws->cnt_sm = (3 * ws->cnt_sm + cnt) / 4;
		ws->cpu_sm = (3 * ws->cpu_sm + cpu) / 4;
	}
	if (!ws->calibrating && ws->cpu_n < 2)
		ws->cpu_n++;
}

/*
 * The eligible transitions the worker will make in this epoch's windows: its rate per second on
 * the CPU (the running sums) times its CPU time in the last whole epoch (the loader's
 * worker_share) times the duty. Windows of a few ms find a worker on the CPU or not: with more
 * workers than CPUs its count per window swings between nothing and many times its share,
 * and a rate taken over the duty follows those swings (workers delivered well under hz, and
 * took seconds to reach it). Over its own time on the CPU the rate is steady,
 * and the scheduler's switches say how much of that time it gets. False where either is
 * unknown (long polls off) or the worker had no CPU time.
 */
static __always_inline bool expected_by_cpu(__u64 key, const struct d9_worker_state *ws,
					    __u64 epoch, __u64 duty, __u64 *expected)
{
	struct d9_worker_share *s = bpf_map_lookup_elem(&worker_share, &key);
	__u64 rate;

	if (!s || !ws->cpu_sm || !s->cpu_ns || s->epoch + 3 < epoch)
		return false;
	rate = (ws->cnt_sm << 24) / ws->cpu_sm; /* per ns, x 2^32 */
	*expected = windowed_count((rate * s->cpu_ns) >> 16, duty);
	return *expected > 0;
}

/* Set by the loader each epoch: on at the start, off after an epoch whose windows missed a
 * busy worker, on again after two that found every one (user/probes/arming.c, active_workers). */
__u32 carry_on = 0;

/* Whether the worker was busy up to the epoch before this one (the loader's worker_share, a
 * running average): the epochs the windows missed it in were busy ones, not idle. */
static __always_inline bool busy_until(__u64 key, __u64 epoch)
{
	struct d9_worker_share *s = bpf_map_lookup_elem(&worker_share, &key);

	return s && s->cpu_ns >= D9_ACTIVE_CPU_NS && s->epoch + 1 >= epoch;
}

/* What a worker may owe or be owed, in epochs' worth of hz (owed_add); and, while windows miss
 * some workers, the epochs it may go unseen and still owe them. */
#define OWED_MAX 2
#define OWED_SLOW_MAX 4
#define OWED_MISSED_MAX 8

/*
 * The worker's next target: hz plus a share of what it owes, which is what its epochs at p < 1
 * selected short of hz (or over it), bounded. Windows see a worker's transitions through a few
 * ms a second, so an epoch's count lands anywhere from a quarter to twice what its p expects,
 * and a worker's mean over a run wanders off hz by that noise over the square root of its
 * epochs; carrying the difference keeps it at hz instead. An epoch at p = 1 drew all there
 * was, and a capped one is left out of unbiased figures: each ends the carry.
 *
 * While the windows find every busy worker every epoch (carry_on), half of what is owed is
 * repaid each epoch, and an epoch the worker was not seen in drew nothing: it ends the carry.
 * Where workers outnumber CPUs the windows miss some workers in some epochs, and p is set so
 * that a worker selects hz on average over the epochs that find it and those that miss it
 * (expected_by_cpu): it selects well over hz in the first kind and nothing in the second. Then
 * an epoch it was missed in (up to OWED_MISSED_MAX of them, while it was busy: busy_until)
 * owes hz, and a quarter is repaid each epoch, bounded by OWED_SLOW_MAX x hz: halves would
 * chase each miss with an overshoot. Without it, which epochs' windows happened to find a
 * worker left single workers at half or one and a half of hz over a run (bench/RESULTS.md).
 * Fixed before the epoch's draws: weights stay exact.
 */
static __always_inline void owed_add(__u64 key, struct d9_worker_state *ws, __u64 epoch)
{
	__s64 hz = (__s64)per_worker_hz, owed = ws->owed, bound = OWED_MAX * hz;
	__s64 missed = (__s64)(epoch - ws->epoch) - 1;
	bool slow = !carry_on;

	if (slow)
		bound = OWED_SLOW_MAX * hz;
	if (ws->calibrating || ws->capped || !ws->eligible || ws->prob >= D9_PROB_ONE ||
	    missed < 0 ||
	    (missed && (!slow || missed > OWED_MISSED_MAX || !busy_until(key, epoch))))
		owed = 0;
	else
		owed += hz - (__s64)ws->selected + missed * hz;
	if (owed > bound)
		owed = bound;
	if (owed < -bound)
		owed = -bound;
	ws->owed = (__s32)owed;
	/* BPF has no signed division */
	ws->target = (__u32)(hz + (slow ? owed >> 2 : owed >> 1));
}

/*
 * dial9's per_worker_bernoulli_v1: the first epoch a worker is seen in calibrates (p = 0;
 * with windows, only before any worker has sampled: worker_seed);
 * after that p = min(1, hz / eligible transitions of the previous epoch), and p = 1 when the
 * previous epoch was idle or further back than one epoch.
 */
static __always_inline void epoch_roll(__u64 key, struct d9_worker_state *ws, __u64 epoch,
				       __u64 duty)
{
	__u64 prev = ws->eligible;
	bool consecutive = epoch == ws->epoch + 1;

	emit_epoch(key, ws);
	owed_add(key, ws, epoch);
	/* A block drawn at the last epoch's p would hold this one to it: cut it. Where a block
	 * ends does not depend on its pick, so each of its transitions still had 1/L. */
	ws->blk_left = 0;
	/* The calibrating epoch began when the worker was first seen, mid-second: scale its
	 * count to a whole second, or the next epoch selects up to twice its budget. However
	 * short the part it covered: unscaled, the few transitions of a worker first seen just
	 * before the second's end set the next epoch's p at a hundred times what a second
	 * needs, and the cap cut it; scaled, a short part's noise moves p either way, and a p
	 * too low only selects less for one epoch. Not with windows: the worker was first seen
	 * in a window, and windows cover the rest. */
	if (ws->calibrating && consecutive && prev > 0 && ws->duty == D9_PROB_ONE) {
		__u64 covered = (epoch * D9_NSEC_PER_SEC) - ws->first_ns;

		if (covered > 0 && covered < D9_NSEC_PER_SEC)
			prev = prev * D9_NSEC_PER_SEC / covered;
	}
	/* Windows: an epoch's count is seen through a few short windows, whose duty the loader
	 * changes from epoch to epoch, and swings with what the worker happened to do in them:
	 * p from the last count alone then delivers well under hz on average (the cap trims the
	 * high epochs, nothing fills the low ones). So the expected count comes from a running
	 * average of counts at full coverage, through the current duty. Weighted 1/4 to the last
	 * epoch: hz over a noisy average is high on average (1/x is convex), and with the mix
	 * demo's bursty windows a weight of 1/2 delivers 116-121% of hz where the cap does not
	 * trim it, 1/4 99-102%. The calibrating epoch's count only seeds it: made with no
	 * captures, it runs ~30% high at 99 Hz, where windows capture every other transition,
	 * and a 1/4 weight would take seconds to wash it out. So the first sampled epoch
	 * replaces it, the next is averaged in by half, then 1/4. */
	if (duty < D9_PROB_ONE) {
		/* A worker seen in no window for a while (more threads than CPUs: a window of a
		 * few ms finds most of them waiting for a CPU) made zero transitions in those
		 * epochs' windows: averaging only the epochs it was seen in would set p for a
		 * count it reaches only sometimes, and deliver a fraction of hz. */
		consecutive = ws->epoch < epoch;
		if (consecutive && ws->duty < D9_PROB_ONE && ws->gate.oncpu_ns)
			cpu_rate_add(ws, prev);
		if (consecutive && ws->duty) {
			__u64 full = (prev << 16) / ((ws->duty >> 16) | 1) << 16;

			if (ws->calibrating || !ws->rate || !ws->rate_n)
				ws->rate = full;
			else if (ws->rate_n < 2)
				ws->rate = (ws->rate + full) / 2;
			else
				ws->rate = (3 * ws->rate + full) / 4;
			if (!ws->calibrating && ws->rate_n < 2)
				ws->rate_n++;
		}
		for (int i = 0; i < 8 && epoch > ws->epoch + 1 + i && ws->rate_n >= 2; i++)
			ws->rate = ws->rate - ws->rate / 4;
		prev = windowed_count(ws->rate, duty);
		consecutive = ws->rate > 0;
		if (expected_by_cpu(key, ws, epoch, duty, &prev))
			consecutive = true;
	}
	ws->prob = consecutive && prev > 0 ? prob_for(ws->target, prev) : D9_PROB_ONE;
	ws->tokens_ns = bucket_ns;
	ws->epoch = epoch;
	ws->eligible = 0;
	ws->selected = 0;
	ws->refused = 0;
	ws->capped = 0;
	ws->calibrating = 0;
	__builtin_memset(&ws->gate, 0, sizeof(ws->gate));
}

/* A new worker's state is made here, not on the stack: the park points' unwinder needs the
 * stack of the programs that reach worker_get (512 bytes across their calls). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct d9_worker_state);
} worker_init SEC(".maps");

/* Windows: the full-coverage rate (x 2^16) of the run's sampled workers, set by the loader
 * each epoch once one has sampled (user/probes/arming.c); 0 before. */
__u64 seed_rate = 0;
/* And the mean running sums of eligible transitions and time on the CPU behind them (see
 * expected_by_cpu), where the workers' CPU time is followed; 0 before. */
__u64 seed_cnt_sm = 0, seed_cpu_sm = 0;

/*
 * A worker first seen in a window after others have sampled starts from their rate instead of
 * calibrating. With many more workers than CPUs a window of a few ms finds a worker seldom,
 * and its first sighting may come seconds into the run: a calibrating epoch selects nothing,
 * so every resume it made before that sighting would have had no chance of a sample, and
 * estimates over those epochs would come out low. Any p fixed before the draw keeps the
 * estimator unbiased; one far off is what the cap is for.
 */
static __always_inline void worker_seed(__u64 key, struct d9_worker_state *ws, __u64 epoch,
					__u64 duty)
{
	__u64 expected;

	ws->calibrating = 1;
	if (duty >= D9_PROB_ONE)
		return;
	ws->cnt_sm = seed_cnt_sm;
	ws->cpu_sm = seed_cpu_sm;
	if (expected_by_cpu(key, ws, epoch, duty, &expected)) {
		ws->prob = prob_for(per_worker_hz, expected);
		ws->calibrating = 0;
	}
	if (!seed_rate)
		return;
	ws->rate = seed_rate;
	ws->rate_n = 1;
	if (ws->calibrating)
		ws->prob = prob_for(per_worker_hz, windowed_count(seed_rate, duty));
	ws->calibrating = 0;
}

static __always_inline struct d9_worker_state *worker_get(__u64 key, __u64 epoch, __u64 now,
							  __u64 duty)
{
	struct d9_worker_state *ws = bpf_map_lookup_elem(&workers, &key), *init;
	__u32 zero = 0;

	if (ws)
		return ws;
	init = bpf_map_lookup_elem(&worker_init, &zero);
	if (!init)
		return NULL;
	__builtin_memset(init, 0, sizeof(*init));
	init->epoch = epoch;
	init->target = per_worker_hz;
	worker_seed(key, init, epoch, duty);
	init->tokens_ns = bucket_ns;
	init->first_ns = now;
	init->rng = mix64(seed ^ key) | 1;
	bpf_map_update_elem(&workers, &key, init, BPF_NOEXIST);
	return bpf_map_lookup_elem(&workers, &key);
}

/*
 * The hard cap, against a p made stale by a burst of work: a bucket of bucket_ns / interval
 * tokens, refilled whole at each epoch (epoch_roll), so it caps a worker-epoch at the burst
 * (4 x hz by default). Refilled at hz with time instead, it would sit near empty after one
 * stale epoch: a p set right selects ~hz a second, so the level then walks with no drift
 * and caps about every other epoch after it, each one lost to unbiased estimates. In
 * windows the same holds within the second: an epoch's selections all come in a few ms.
 */
static __always_inline bool cap_admit(struct d9_worker_state *ws)
{
	if (ws->tokens_ns < token_interval_ns)
		return false;
	ws->tokens_ns -= token_interval_ns;
	return true;
}

/* The task's id, and its vtable (one per task type: userspace names its future by it). */
static __always_inline __u64 read_task_id_of(__u64 hdr, bool *ok, __u64 *vtable_out)
{
	__u64 vtable = 0, id_off = 0, id = 0;

	*ok = false;
	*vtable_out = 0;
	if (bpf_probe_read_user(&vtable, sizeof(vtable), (void *)(hdr + hdr_vtable_off)))
		return 0;
	*vtable_out = vtable;
	if (!read_task_id ||
	    bpf_probe_read_user(&id_off, sizeof(id_off), (void *)(vtable + vtable_id_off)))
		return 0;
	/* The id lives in the task's Core, after the Header; ids come from a global counter. */
	if (id_off < 24 || id_off >= D9_MAX_CELL_OFFSET || (id_off & 7))
		return 0;
	if (bpf_probe_read_user(&id, sizeof(id), (void *)(hdr + id_off)))
		return 0;
	if (id == 0 || id > (1ULL << 48))
		return 0;
	*ok = true;
	return id;
}

static __always_inline void emit_sample(struct frame *f, __u32 tid, __u64 end_ns)
{
	struct stack_buf *sb;
	struct d9_sample *s;
	__u32 pid, ns_tid;

	if (raw_stack_bytes && (f->flags & D9_SF_STACK_AT_PARK)) {
		struct d9_raw_stack *raw = bpf_map_lookup_elem(&raw_stacks, &tid);

		if (raw) {
			__u32 len = raw->len;

			if (len > D9_MAX_RAW_STACK)
				len = D9_MAX_RAW_STACK;
			if (bpf_ringbuf_output(&events, raw, D9_RAW_STACK_HDR + len, rb_flags))
				count(D9_CNT_RB_DROPS);
		}
	}

	s = rb_reserve(sizeof(*s));
	if (!s)
		return;
	s->type = D9_REC_SAMPLE;
	s->flags = f->flags;
	current_pid_tid(&pid, &ns_tid);
	s->pid = pid;
	s->tid = ns_tid;
	s->worker = f->worker;
	s->task_id = f->task_id;
	s->task_hdr = f->hdr;
	s->task_vtable = f->vtable;
	s->window = f->window;
	s->epoch = f->epoch;
	s->prob = f->prob;
	s->duty = f->duty;
	s->idle_start_ns = f->idle_start_ns;
	s->idle_end_ns = f->entry_ns;
	s->poll_end_ns = end_ns;
	s->park_ns = f->park_ns;
	s->park_point = f->park_point;
	s->park_how = f->park_how;
	s->also_pending = f->also_pending;
	s->leaf_ip = f->leaf_ip;
	s->stack_bytes = f->stack_bytes;
	s->runtime = f->runtime;
	sb = f->stack_bytes > 0 ? bpf_map_lookup_elem(&stacks, &tid) : NULL;
	if (sb)
		__builtin_memcpy(s->stack, sb->ips, sizeof(s->stack));
	else
		s->stack_bytes = s->stack_bytes > 0 ? 0 : s->stack_bytes;
	bpf_ringbuf_submit(s, rb_flags);
}

static __always_inline void set_mark(struct mark *m, const struct thread_state *t, __u32 tid,
				     __u64 ns)
{
	m->ns = ns;
	m->hits = t->hits_total;
	m->capture_ns = t->capture_total_ns;
	m->tid = tid;
}

/* Its previous entry may already hold a wake from another thread, which came after the
 * return but before this thread's next event saw it: updated, not replaced. */
static __always_inline void task_went_pending(struct thread_state *t, struct frame *f, __u32 tid,
					      __u64 end_ns)
{
	struct task_state *ts = bpf_map_lookup_elem(&tasks, &f->hdr);
	struct task_state pending = {.pending_ns = end_ns,
				     .last_park = f->last_park,
				     .flags = f->park_kinds == 1 ? D9_TS_SYNC_PARK : 0,
				     .runtime = f->runtime};

	if (!ts) {
		bpf_map_update_elem(&tasks, &f->hdr, &pending, BPF_ANY);
		ts = bpf_map_lookup_elem(&tasks, &f->hdr);
		if (!ts)
			return;
	}
	ts->pending_ns = end_ns;
	ts->last_park = f->last_park;
	ts->flags = f->park_kinds == 1 ? ts->flags | D9_TS_SYNC_PARK : ts->flags & ~D9_TS_SYNC_PARK;
	set_mark(&ts->pending, t, tid, end_ns);
}

/* Adds n (may wrap: -1 takes one back) to k's count in resume_counts. */
static __always_inline void count_key_add(const struct d9_count_key *k, __u64 duty, __u64 n)
{
	struct d9_count_val *v, fresh = {.resumes = n, .duty = duty};

	v = bpf_map_lookup_elem(&resume_counts, k);
	if (v) {
		__sync_fetch_and_add(&v->resumes, n);
		return;
	}
	if (!bpf_map_update_elem(&resume_counts, k, &fresh, BPF_NOEXIST))
		return;
	/* Another CPU put it in first, or the map is full. */
	v = bpf_map_lookup_elem(&resume_counts, k);
	if (v)
		__sync_fetch_and_add(&v->resumes, n);
	else
		count(D9_CNT_COUNT_FULL);
}

/*
 * A task woken by another task's poll, in a chain that a clock began (a timer's or I/O's
 * wake, mark.clock), is slowed by the probes only if its own poll carries the chain on: a
 * consumer that wakes its producer is part of the loop that sets how often the producer's
 * timer is armed again, and every delay in it is a delay of the next round; one whose poll
 * wakes no task hangs off that loop, its resumes come as often as the clock's, later by the
 * probes' time but no fewer: the chain's factor would count it high. Which it is shows when
 * the poll ends (chain_settle), so its wait's terms and its count's key wait in the frame.
 * Only with the wake probes live: a guessed chain (resume_kind) knows no wakes.
 */
static __always_inline void chain_defer(struct thread_state *t, struct frame *f)
{
	if (!t->clock_driven && !t->after_yield && !t->guessed_chain && f->origin.clock)
		f->chain = D9_CHAIN_KEPT;
}

/* Adds the frame's wait terms (chain_account), if it has them, to the thread's gate. */
static __always_inline void chain_commit(struct thread_state *t, struct frame *f)
{
	if (!(f->chain & D9_CHAIN_TERMS))
		return;
	t->gate.woken_cycle_ns += f->chain_cycle_ns;
	t->gate.woken_chain_ns += f->chain_ns;
	t->gate.woken_hits += f->chain_hits;
	t->gate.woken_capture_ns += f->chain_capture_ns;
}

static __always_inline void chain_settle(struct thread_state *t, struct frame *f)
{
	struct d9_count_key k;
	struct d9_count_val *v;

	if (!(f->chain & D9_CHAIN_KEPT))
		return;
	if (f->chain & D9_CHAIN_WOKE) {
		chain_commit(t, f);
		return;
	}
	/* Off the loop: as a clock's resume. */
	f->flags &= ~D9_SF_WOKEN_BY_TASK;
	if (!(f->chain & D9_CHAIN_COUNTED))
		return;
	k = f->count_key;
	v = bpf_map_lookup_elem(&resume_counts, &k);
	if (!v)
		return;
	__sync_fetch_and_add(&v->resumes, (__u64)-1);
	k.flags &= ~D9_SF_WOKEN_BY_TASK;
	count_key_add(&k, v->duty, 1);
}

/*
 * A poll has returned: its task went Pending (state not COMPLETE) or completed. There is no
 * return probe (a uretprobe costs a second trap per poll, and re-attaching one in a busy
 * target takes tens of ms, which armed windows cannot afford): a poll is known to have
 * returned when the same thread enters a poll at the same or a shallower stack depth, or
 * parks. end_ns is then the time of that next event, a few hundred ns after the real return
 * on a busy worker; 0 when unknown.
 *
 * Global, not inlined: pop_frames' loop reaches it at each of up to D9_MAX_NEST depths from
 * three call sites, and inlined, the verifier walked the sample's writing in every one.
 */
__noinline int finish_frame(struct thread_state *t, struct frame *f, __u32 tid, __u64 end_ns)
{
	__u64 state = 0;

	if (!t || !f)
		return 0;
	if (!(f->flags & D9_SF_FREED) &&
	    !bpf_probe_read_user(&state, sizeof(state), (void *)f->hdr)) {
		if (state & D9_TASK_COMPLETE) {
			f->flags |= D9_SF_COMPLETE;
			bpf_map_delete_elem(&tasks, &f->hdr);
		} else {
			/* RUNNING may be set again: another worker already picked up the
			 * notified task. It still went Pending. */
			f->flags |= D9_SF_PENDING;
			if (end_ns && !(f->flags & D9_SF_BLOCKING))
				task_went_pending(t, f, tid, end_ns);
		}
	}
	chain_settle(t, f);
	if (f->selected)
		emit_sample(f, tid, end_ns);
	f->selected = 0;
	return 0;
}

/* The time since t0 went to a capture (see d9_gate_time.capture_ns). */
static __always_inline void capture_done(struct thread_state *t, __u64 t0)
{
	__u64 ns = bpf_ktime_get_ns() - t0;

	t->capture_ns += ns;
	t->capture_total_ns += ns;
	count_add(D9_CNT_CAPTURE_NS, ns);
}

/*
 * Finishes the thread's polls from the innermost out while they are no deeper on the stack
 * than sp and above depth floor, and times the samples written for them (capture_done).
 * Returns whether one was.
 */
static __always_inline bool pop_frames(struct thread_state *t, __u32 tid, __u64 sp, __u32 floor,
				       __u64 end_ns)
{
	__u64 t0 = 0;

	for (int i = 0; i < D9_MAX_NEST; i++) {
		__u32 d = t->depth;
		struct frame *f;

		if (d <= floor || d > D9_MAX_NEST)
			break;
		/* The mask is a no-op after the check; the verifier needs it as a bound. */
		f = &t->frames[(d - 1) & (D9_MAX_NEST - 1)];
		if (f->entry_sp > sp)
			break;
		if (f->selected && !t0)
			t0 = bpf_ktime_get_ns();
		finish_frame(t, f, tid, end_ns);
		t->depth = d - 1;
	}
	if (t0)
		capture_done(t, t0);
	return t0 != 0;
}

/* The thread's frames from an earlier arming: their polls ended unobserved. */
static __always_inline void drop_stale_frames(struct thread_state *t, __u32 tid, __u64 gen)
{
	if (t->generation == gen)
		return;
	pop_frames(t, tid, ~0ULL, 0, 0);
	t->depth = 0;
	t->run_depth = 0;
	t->generation = gen;
}

/*
 * The task's scheduler, from the cell's layout (Core is repr(C): the scheduler, then the task
 * id): a runtime's or a LocalSet's tasks hold one Arc to it, the same pointer for all its
 * tasks, which names the runtime. The blocking pool's BlockingSchedule is no pointer (empty in
 * 1.24, hooks in later releases): such a task is a spawn_blocking closure or a worker's own
 * thread. 0 when the layout is not validated or the field does not read as a pointer.
 */
static __always_inline __u64 task_scheduler(__u64 hdr, bool *blocking)
{
	__u64 vtable = 0, sched_off = 0, id_off = 0, sched = 0;

	*blocking = false;
	if (!read_task_id)
		return 0;
	if (bpf_probe_read_user(&vtable, sizeof(vtable), (void *)(hdr + hdr_vtable_off)) ||
	    bpf_probe_read_user(&sched_off, sizeof(sched_off),
				(void *)(vtable + vtable_sched_off)) ||
	    bpf_probe_read_user(&id_off, sizeof(id_off), (void *)(vtable + vtable_id_off)))
		return 0;
	if (sched_off < 24 || sched_off >= D9_MAX_CELL_OFFSET || (sched_off & 7) ||
	    id_off < sched_off || id_off >= D9_MAX_CELL_OFFSET)
		return 0;
	if (id_off != sched_off + 8) {
		*blocking = true;
		return 0;
	}
	if (bpf_probe_read_user(&sched, sizeof(sched), (void *)(hdr + sched_off)) || !sched ||
	    (sched & 7) || sched >= (1ULL << 47))
		return 0;
	return sched;
}

/*
 * A task not in the tasks map: remembered with its scheduler, unless it is a blocking-pool
 * task. Those run once to completion (a spawn_blocking closure) or hold the thread for a
 * worker's life: never a resume, and their thread's time until then is nobody's. Returns
 * whether it is one.
 */
static __always_inline bool task_first_seen(struct thread_state *t, struct frame *f, __u64 hdr,
					    struct task_state *fresh)
{
	bool blocking;

	fresh->runtime = task_scheduler(hdr, &blocking);
	if (!blocking) {
		bpf_map_update_elem(&tasks, &hdr, fresh, BPF_ANY);
		f->runtime = fresh->runtime;
		return false;
	}
	count(D9_CNT_BLOCKING_POLLS);
	f->flags |= D9_SF_BLOCKING;
	t->clock_driven = 1;
	t->after_yield = 0;
	t->guessed_chain = 0;
	/* A pool thread starting a task of its own: not a worker until worker::run says so,
	 * and its time so far goes to no worker. */
	if (t->depth == 1) {
		t->worker_ptr = 0;
		__builtin_memset(&t->gate, 0, sizeof(t->gate));
	}
	return true;
}

/*
 * How the task now polled came to resume. A task that yielded is resumed as soon as its thread
 * gets to it, and so is one woken from another task's poll (a channel's consumer behind its
 * producer): their resumes come at the rate the thread runs, and the probes' slowdown thins
 * them out. A task woken by a timer or I/O (from the driver, while its worker parks) or by a
 * blocking-pool thread resumes at the rate its events come. The wake is consumed here, except
 * in lean windows, which have no wake probes to renew it.
 */
static __always_inline void resume_kind(struct thread_state *t, struct frame *f,
					struct task_state *ts, bool lean, __u32 tid, __u64 now)
{
	bool woken = ts && (ts->flags & D9_TS_WOKEN_BY_TASK);
	/* Without wake probes, a task parked at a task-to-task primitive and resumed right
	 * behind another task's poll on this thread, with no park between, is taken as woken
	 * by that poll: a multi-thread worker runs the task a poll woke next (Tokio's LIFO
	 * slot), and one woken by the driver runs after the worker's park or maintenance,
	 * which empties behind. The wake probes cost a hit per wake, and a yield wakes its own
	 * task, so they stay dormant on multi-thread runtimes (target.c). */
	bool behind =
	    !woken && ts && (ts->flags & D9_TS_SYNC_PARK) && t->behind.ns && t->behind.tid == tid;

	t->after_yield = ts && ts->last_park == D9_PARK_YIELD;
	if (ts && ts->origin.ns) {
		f->origin = ts->origin;
	} else if (behind) {
		f->origin = t->behind;
	} else {
		set_mark(&f->origin, t, tid, now);
		f->origin.clock = !t->after_yield && !woken;
	}
	/* A yield's waker may run after the poll, outside any (Tokio's defer): its chain is
	 * the yielded task's, whatever the wake looked like. */
	if (t->after_yield)
		f->origin.clock = 0;
	woken |= behind;
	/* Only a chain that began on this thread: its slowdown is measured here (chain_account).
	 * One that began on another worker ran partly in parallel with this one, and is left
	 * clock-driven. */
	t->clock_driven = !t->after_yield && !(woken && f->origin.tid == tid);
	t->guessed_chain = behind && !t->clock_driven;
	if (ts && !lean) {
		ts->flags &= ~D9_TS_WOKEN_BY_TASK;
		ts->origin.ns = 0;
	}
}

/* A task woken by another task resumed in a window, its previous return seen: how long it
 * waited, how much of that since its wake chain began, and the probes' hits and captures on
 * this thread since (d9_gate_time.woken_*). Only when the chain's start was on this thread:
 * another thread's counts say nothing of this one's. */
static __always_inline void chain_account(struct thread_state *t, struct frame *f,
					  const struct task_state *ts, __u32 tid, __u64 now)
{
	const struct mark *from = f->origin.ns > ts->pending.ns ? &f->origin : &ts->pending;
	__u64 idle_start = ts->pending.ns;

	if (t->clock_driven || t->after_yield || now <= idle_start || from->ns > now ||
	    from->tid != tid || t->hits_total < from->hits ||
	    t->capture_total_ns < from->capture_ns)
		return;
	f->chain_cycle_ns = now - idle_start;
	f->chain_ns = now - from->ns;
	f->chain_hits = t->hits_total - from->hits;
	f->chain_capture_ns = t->capture_total_ns - from->capture_ns;
	f->chain |= D9_CHAIN_TERMS;
	if (!(f->chain & D9_CHAIN_KEPT))
		chain_commit(t, f);
}

/* Ids come from a global counter in spawn order, and a task is polled soon after its spawn:
 * one whose id is below the counter's value when the window was armed had its first poll
 * before. (A task spawned but not yet polled then is miscounted: a queue's worth of fresh
 * tasks per window at most.) */
static __always_inline bool spawned_before_window(__u64 hdr, const struct d9_arming *arm)
{
	__u64 id, vtable;
	bool ok;

	if (!arm->next_task_id)
		return false;
	id = read_task_id_of(hdr, &ok, &vtable);
	return ok && id < arm->next_task_id;
}

/* A poll's frame, pushed at its entry: nothing known yet of its task, park or sample. */
static __always_inline void frame_init(struct thread_state *t, struct frame *f, __u64 hdr, __u64 sp,
				       __u64 now)
{
	f->hdr = hdr;
	f->entry_sp = sp;
	f->entry_ns = now;
	f->selected = 0;
	f->flags = 0;
	f->park_point = D9_PARK_NONE;
	f->stack_bytes = 0;
	f->last_park = D9_PARK_NONE;
	f->park_how = D9_HOW_NONE;
	f->also_pending = 0;
	f->park_kinds = 0;
	f->leaf_ip = 0;
	t->leaf.sp = 0;
	f->runtime = 0;
	f->chain = 0;
}

/* Counts an eligible resume in resume_counts, by task type, worker, epoch, window and kind; a
 * resume whose kind its poll's end decides keeps its key in the frame (chain_defer). */
static __always_inline void count_resume(const struct thread_state *t, struct frame *f,
					 const struct d9_arming *arm, __u64 worker, __u64 epoch)
{
	struct d9_count_key k = {.worker = worker, .epoch = (__u32)epoch};

	if (bpf_probe_read_user(&k.vtable, sizeof(k.vtable), (void *)(f->hdr + hdr_vtable_off)))
		return;
	k.window = (__u32)arm->generation;
	if (arm->duty < D9_PROB_ONE)
		k.flags |= D9_SF_WINDOWED;
	if (t->after_yield)
		k.flags |= D9_SF_AFTER_YIELD;
	else if (!t->clock_driven)
		k.flags |= D9_SF_WOKEN_BY_TASK;
	count_key_add(&k, arm->duty, 1);
	if (f->chain & D9_CHAIN_KEPT) {
		f->count_key = k;
		f->chain |= D9_CHAIN_COUNTED;
	}
}

/*
 * An eligible resume in a sampling window: counted in its worker's epoch, then drawn with the
 * epoch's probability and admitted by the cap. A selected frame gets what its sample will
 * carry; the stack and the park point are added as the poll goes on.
 */
static __always_inline void select_sample(struct thread_state *t, struct frame *f,
					  const struct d9_arming *arm, __u64 idle_start, __u32 tid,
					  __u64 now)
{
	__u64 key, epoch;
	struct d9_worker_state *ws;
	bool ok;

	count(D9_CNT_ELIGIBLE);
	key = t->worker_ptr ? t->worker_ptr : (tid | D9_WORKER_TID_FLAG);
	epoch = now / D9_NSEC_PER_SEC;
	ws = worker_get(key, epoch, now, arm->duty);
	if (!ws)
		return;
	ws->last_tid = tid;
	/* The thread's in-gate time since its last eligible transition: mostly this epoch's,
	 * so handed over before a roll closes it. */
	gate_move(&ws->gate, &t->gate);
	if (ws->epoch != epoch)
		epoch_roll(key, ws, epoch, arm->duty);
	ws->duty = arm->duty;
	ws->eligible++;
	count_resume(t, f, arm, key, epoch);
	if (ws->calibrating || !block_draw(ws))
		return;
	if (!cap_admit(ws)) {
		ws->refused++;
		ws->capped = 1;
		return;
	}
	ws->selected++;

	/* Counted above as a poll of the cost measurement: take it back (per-CPU counters sum
	 * modulo 2^64). */
	if (cost_measured(t))
		count_add(D9_CNT_FULL_POLLS, (__u64)-1);
	t->cost_skip = 1;
	f->selected = 1;
	/* Both fixed point with 32 fractional bits and <= 1, so up to 2^32 each: their product
	 * would overflow 64 bits at 1 x 1. Drop one bit of each first. */
	/* The selected transition's block is the worker's current one: its p is 1/blk_len (BPF
	 * divides by 0 as 0, never the case here). */
	f->prob = (((D9_PROB_ONE / ws->blk_len) >> 1) * (arm->duty >> 1)) >> (D9_PROB_SHIFT - 2);
	f->duty = arm->duty;
	if (arm->duty < D9_PROB_ONE)
		f->flags |= D9_SF_WINDOWED;
	if (t->after_yield)
		f->flags |= D9_SF_AFTER_YIELD;
	else if (!t->clock_driven)
		f->flags |= D9_SF_WOKEN_BY_TASK;
	f->epoch = epoch;
	f->worker = key;
	f->window = (__u32)arm->generation;
	/* Exact only when the probes stayed attached since that return was observed. */
	if (idle_start && idle_start >= arm->armed_since) {
		f->idle_start_ns = idle_start;
		f->flags |= D9_SF_IDLE_KNOWN;
	} else {
		f->idle_start_ns = 0;
	}
	f->task_id = read_task_id_of(f->hdr, &ok, &f->vtable);
	if (ok)
		f->flags |= D9_SF_TASK_ID_OK;
	else
		count(D9_CNT_TASK_ID_BAD);
	if (ws->capped)
		f->flags |= D9_SF_CAPPED;
}

/* The chain of the innermost poll that this entry shows has returned (see resume_kind); none
 * once the wake probes say which task woke which. */
static __always_inline void note_behind(struct thread_state *t, __u64 sp)
{
	__u32 d = t->depth;
	struct frame *f;

	t->behind.ns = 0;
	if (wakes_seen || d <= t->run_depth || d > D9_MAX_NEST)
		return;
	f = &t->frames[(d - 1) & (D9_MAX_NEST - 1)];
	if (f->entry_sp <= sp && !(f->flags & D9_SF_BLOCKING))
		t->behind = f->origin;
}

static __always_inline int on_poll_entry(struct pt_regs *ctx, __u64 hdr)
{
	__u64 now = bpf_ktime_get_ns(), sp = PT_REGS_SP(ctx);
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct task_state fresh = {};
	struct thread_state *t;
	struct task_state *ts;
	struct d9_arming *arm;
	struct frame *f;
	__u64 idle_start;
	__u32 depth, zero = 0;
	bool gated;

	count(D9_CNT_POLLS);
	t = thread_get(tid, true);
	arm = bpf_map_lookup_elem(&arming, &zero);
	if (!t || !arm)
		return 0;
	drop_stale_frames(t, tid, arm->generation);
	gate_account(t, arm, now, false);
	note_behind(t, sp);
	t->cost_skip = pop_frames(t, tid, sp, 0, arm->kept_only ? 0 : now);
	depth = t->depth;
	if (depth >= D9_MAX_NEST) {
		count(D9_CNT_NEST_OVERFLOW);
		return 0;
	}
	t->depth = depth + 1;
	f = &t->frames[depth & (D9_MAX_NEST - 1)];
	frame_init(t, f, hdr, sp, now);

	ts = bpf_map_lookup_elem(&tasks, &hdr);
	if (!ts && task_first_seen(t, f, hdr, &fresh))
		return 0; /* a blocking-pool task */
	resume_kind(t, f, ts, arm->lean, tid, now);
	gated = in_gate(arm, now);
	if (gated && cost_measured(t))
		count(arm->lean ? D9_CNT_LEAN_POLLS : D9_CNT_FULL_POLLS);
	if (arm->lean) {
		/* No park-point probe will say where this poll parks: the task keeps the
		 * kind it had, and nothing is sampled. */
		if (ts) {
			f->last_park = ts->last_park;
			f->park_kinds = ts->flags & D9_TS_SYNC_PARK ? 1 : 2;
		}
		return 0;
	}
	if (!ts) {
		/* First sight (task_first_seen remembered it): the task's first poll, which is no
		 * resume, unless its id says it was spawned before the window (a task resuming
		 * once a second is almost never polled inside two windows). */
		if (!spawned_before_window(hdr, arm))
			return 0;
		ts = bpf_map_lookup_elem(&tasks, &hdr);
		if (!ts)
			return 0;
		count(D9_CNT_RESUME_BY_ID);
	}
	f->runtime = ts->runtime;
	if (!gated)
		return 0;
	chain_defer(t, f);
	idle_start = ts->pending_ns;
	if (idle_start && idle_start >= arm->armed_since && ts->pending.ns == idle_start)
		chain_account(t, f, ts, tid, now);
	ts->pending_ns = 0;

	select_sample(t, f, arm, idle_start, tid, now);
	return 0;
}

/*
 * A task's waker fired. Woken from inside a task's poll on this thread (the innermost frame, not
 * a blocking-pool task's), the task resumes behind that one: see resume_kind. The hit is
 * accounted like any other, and a thread parked in its driver stays parked.
 */
static __always_inline int on_wake(__u64 hdr)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid(), zero = 0;
	struct thread_state *t = thread_get(tid, false);
	struct d9_arming *arm = bpf_map_lookup_elem(&arming, &zero);
	struct task_state *ts = bpf_map_lookup_elem(&tasks, &hdr);
	__u64 now = bpf_ktime_get_ns();
	struct frame *f;
	__u32 d;

	wakes_seen = 1;
	if (t && arm)
		gate_account(t, arm, now, t->parked);
	if (!ts)
		return 0;
	/* By the driver, a blocking-pool thread or a thread the sampler does not follow: a
	 * chain begins. */
	if (!t) {
		ts->origin.ns = now;
		ts->origin.tid = 0;
		ts->origin.clock = 1;
		return 0;
	}
	set_mark(&ts->origin, t, tid, now);
	ts->origin.clock = 1;
	d = t->depth;
	if (d <= t->run_depth || d > D9_MAX_NEST)
		return 0;
	f = &t->frames[(d - 1) & (D9_MAX_NEST - 1)];
	if (f->flags & D9_SF_BLOCKING)
		return 0;
	ts->flags |= D9_TS_WOKEN_BY_TASK;
	/* A yield wakes its own task: that carries no chain on. */
	if (f->hdr != hdr)
		f->chain |= D9_CHAIN_WOKE;
	if (f->origin.ns)
		ts->origin = f->origin;
	return 0;
}

/* The worker found no task to run: every poll on this thread has returned. */
static __always_inline int on_worker_park(void)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 tid = (__u32)bpf_get_current_pid_tgid(), zero = 0;
	struct thread_state *t = thread_get(tid, false);
	struct d9_arming *arm = bpf_map_lookup_elem(&arming, &zero);

	if (!t || !arm)
		return 0;
	drop_stale_frames(t, tid, arm->generation);
	gate_account(t, arm, now, true);
	/* Every task poll of this thread has returned; the worker's own blocking-task poll,
	 * which encloses the worker loop, has not. */
	pop_frames(t, tid, ~0ULL, t->run_depth, arm->kept_only ? 0 : now);
	return 0;
}

static __always_inline int on_dealloc(__u64 hdr)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct thread_state *t;
	__u32 i;

	bpf_map_delete_elem(&tasks, &hdr);
	t = thread_get(tid, false);
	if (!t)
		return 0;
	for (i = 0; i < D9_MAX_NEST; i++) {
		if (i < t->depth && t->frames[i].hdr == hdr)
			t->frames[i].flags |= D9_SF_FREED;
	}
	return 0;
}

/* map[key]'s raw stack buffer, inserted zeroed when missing; NULL when the map is full. */
static __always_inline struct d9_raw_stack *raw_slot(void *map, __u32 key)
{
	struct d9_raw_stack *raw = bpf_map_lookup_elem(map, &key);
	__u32 z = 0;

	if (raw)
		return raw;
	raw = bpf_map_lookup_elem(&zero_raw, &z);
	if (!raw)
		return NULL;
	bpf_map_update_elem(map, &key, raw, BPF_ANY);
	return bpf_map_lookup_elem(map, &key);
}

/* Whole pages of user stack from the one holding sp: constant-size reads the verifier
 * accepts, and the first read cannot run past the page where the stack may end (the end of
 * the mapping ends the copy instead of failing it whole). data[0] is then the byte at sp
 * rounded down to a page; userspace skips sp & (page - 1) bytes. Returns the bytes copied. */
static __always_inline __u32 copy_stack_pages(struct d9_raw_stack *raw, __u64 sp)
{
	__u64 addr = sp & ~(__u64)(D9_RAW_PAGE - 1);
	__u32 len = 0;

	for (int i = 0; i < D9_MAX_RAW_STACK / D9_RAW_PAGE; i++) {
		if (len + D9_RAW_PAGE > raw_stack_bytes + D9_RAW_PAGE || len >= D9_MAX_RAW_STACK)
			break;
		if (bpf_probe_read_user(raw->data + (len & (D9_MAX_RAW_STACK - 1)), D9_RAW_PAGE,
					(void *)addr))
			break;
		len += D9_RAW_PAGE;
		addr += D9_RAW_PAGE;
	}
	return len;
}

/* Registers and the top of the user stack, for DWARF unwinding in the loader. */
static __always_inline void capture_raw_stack(struct pt_regs *ctx, __u32 tid, bool at_callee,
					      __u64 leaf_ip)
{
	__u64 sp = PT_REGS_SP(ctx), ip = PT_REGS_IP(ctx);
	struct d9_raw_stack *raw;
	bool unreadable = false;

	/* At a callee's entry nothing is pushed yet: its caller's frame is one return away, at
	 * the call (the return address - 1: what is unwound and symbolized is the call site). */
	if (at_callee) {
		unreadable = bpf_probe_read_user(&ip, sizeof(ip), (void *)sp) != 0;
		ip -= 1;
		sp += 8;
	}
	/* At a leaf's return: the registers as they were at its entry (ip its first instruction,
	 * its return address at [sp]), so that any unwinder, perf's too, starts in the leaf.
	 * The copy gets the return address back at [sp] below (a return probe replaced it). */
	if (leaf_ip) {
		ip = leaf_ip;
		sp -= 8;
	}
	raw = raw_slot(&raw_stacks, tid);
	if (!raw)
		return;
	raw->type = D9_REC_RAW_STACK;
	raw->tid = tid;
	if (unreadable) {
		raw->len = 0; /* nothing to unwind: not an earlier poll's stack either */
		return;
	}
	raw->ip = ip;
	raw->sp = sp;
	raw->bp = PT_REGS_FP(ctx);
	raw->len = copy_stack_pages(raw, sp);
	/* sp is 8-aligned: the slot lies whole in the first page. */
	if (leaf_ip && raw->len)
		*(__u64 *)(raw->data + (sp & (D9_RAW_PAGE - 8))) = PT_REGS_IP(ctx);
}

/* The park point's stack unwound in BPF, starting where bpf_get_stack's chain does: at the
 * caller's call site at a callee's entry or at a leaf's return, else at the probed pc. */
static __always_inline __s32 park_unwind(struct pt_regs *ctx, __u64 *ips, bool at_callee,
					 bool at_return)
{
	__u64 pc = PT_REGS_IP(ctx), sp = PT_REGS_SP(ctx);

	if (at_callee) {
		if (bpf_probe_read_user(&pc, sizeof(pc), (void *)sp))
			return -14; /* -EFAULT, as bpf_get_stack would say */
		sp += 8;
	}
	if (at_callee || at_return)
		pc -= 1;
	return ebpf_unwind_from(pc, sp, PT_REGS_FP(ctx), ips) * 8;
}

/* The stack of a selected poll at the park point that names it. at_callee: at the entry of a
 * function the park point calls; leaf_ip: at the return of the park point entered there, in
 * its caller. */
static __always_inline void capture_park(struct pt_regs *ctx, struct thread_state *t,
					 struct frame *f, __u32 tid, __u32 park_point,
					 bool at_callee, __u64 leaf_ip)
{
	bool at_return = leaf_ip != 0;
	struct stack_buf *sb;
	__u64 t0;

	t0 = bpf_ktime_get_ns();
	sb = bpf_map_lookup_elem(&stacks, &tid);
	if (!sb) {
		struct stack_buf *zero;
		__u32 z = 0;

		zero = bpf_map_lookup_elem(&zero_stack, &z);
		if (!zero)
			return;
		bpf_map_update_elem(&stacks, &tid, zero, BPF_ANY);
		sb = bpf_map_lookup_elem(&stacks, &tid);
		if (!sb)
			return;
	}
	if (unwind_ebpf) {
		f->stack_bytes = park_unwind(ctx, sb->ips, at_callee, at_return);
	} else {
		/* At a callee's entry the kernel puts the return address at [sp] after the entry's
		 * own address (x86 perf_callchain_user at a uprobe on push %rbp): skipping one
		 * frame leaves the caller on top. At a return the caller's return address is on
		 * top already. */
		f->stack_bytes = bpf_get_stack(ctx, sb->ips, sizeof(sb->ips),
					       BPF_F_USER_STACK | (at_callee ? 1 : 0));
		/* A return address on top: the call site is the instruction before it. */
		if ((at_callee || at_return) && f->stack_bytes >= 8)
			sb->ips[0] -= 1;
	}
	if (f->stack_bytes < 0)
		count(D9_CNT_STACK_ERRORS);
	f->park_point = park_point;
	f->park_ns = bpf_ktime_get_ns();
	f->flags |= D9_SF_STACK_AT_PARK;
	f->leaf_ip = leaf_ip;
	if (raw_stack_bytes)
		capture_raw_stack(ctx, tid, at_callee, leaf_ip);
	capture_done(t, t0);
}

/* A park probe's outcome method (callers check outcome_known first: the mask is only the
 * verifier's bound). */
static __always_inline struct d9_park_outcome *outcome_spec(__u64 cookie)
{
	return &park_outcome[D9_COOKIE_GET_INDEX(cookie) & (D9_MAX_PROBES - 1)];
}

static __always_inline bool outcome_known(__u64 cookie)
{
	return D9_COOKIE_GET_INDEX(cookie) < D9_MAX_PROBES;
}

/* The innermost poll on this thread, if it is a selected one. */
static __always_inline struct frame *selected_frame(struct thread_state *t)
{
	__u32 depth;

	if (t->depth == 0 || t->depth > D9_MAX_NEST)
		return NULL;
	depth = (t->depth - 1) & (D9_MAX_NEST - 1);
	return t->frames[depth].selected ? &t->frames[depth] : NULL;
}

/* A park point's entry: counted as the poll's last park, and in a selected poll either the
 * place it parks (yield; or, while no leaf was seen Pending, the first leaf whose outcome
 * cannot be seen), or an open leaf whose return decides (D9_COOKIE_AT_RETURN): then 1, the
 * return is wanted. */
static __always_inline int on_park(struct pt_regs *ctx, __u32 park_point, __u64 cookie)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct thread_state *t = thread_get(tid, false);
	struct d9_park_outcome *o;
	struct d9_arming *arm;
	struct frame *f;
	__u32 zero = 0;

	if (!t)
		return 0;
	arm = bpf_map_lookup_elem(&arming, &zero);
	if (!arm)
		return 0;
	gate_account(t, arm, bpf_ktime_get_ns(), false);
	/* A poll under way when the probes went in left its frame with an earlier arming's
	 * task: a park point it reaches is not that task's, nor one to learn the id word from. */
	drop_stale_frames(t, tid, arm->generation);
	if (t->depth == 0 || t->depth > D9_MAX_NEST)
		return 0;
	f = &t->frames[(t->depth - 1) & (D9_MAX_NEST - 1)];
	f->last_park = park_point;
	f->park_kinds |= cookie & D9_COOKIE_SYNC ? 1 : 2;
	if (f->flags & D9_SF_TASK_ID_OK) {
		lp_learn_word(f->task_id);
	} else if (lp_read_task && lp_id_word == D9_LP_UNLEARNED) {
		/* Until the word is learned any park point teaches it, not only selected ones:
		 * long polls and on-CPU samples wait for it, and a worker's first epoch, in the
		 * run's first window, calibrates and selects nothing. */
		__u64 vt = 0, id;
		bool ok = false;

		id = read_task_id_of(f->hdr, &ok, &vt);
		if (ok)
			lp_learn_word(id);
	}
	f = selected_frame(t);
	if (!f)
		return 0;
	count(D9_CNT_PARK_HITS);
	/* Inside a leaf whose return decides (Sleep::poll registers its timer's AtomicWaker):
	 * that return says whether the task parks there, whatever this one does. */
	if (t->leaf.sp && PT_REGS_SP(ctx) < t->leaf.sp)
		return 0;
	o = outcome_spec(cookie);
	if ((cookie & D9_COOKIE_AT_RETURN) && outcome_known(cookie) && !o->invalid) {
		__u64 self = PT_REGS_PARM2(ctx), hdr = 0;

		if (o->method == D9_OUT_JOIN_STATE &&
		    bpf_probe_read_user(&hdr, sizeof(hdr), (void *)self))
			hdr = 0;
		t->leaf.sp = PT_REGS_SP(ctx);
		t->leaf.ip = PT_REGS_IP(ctx);
		t->leaf.sret = PT_REGS_PARM1(ctx);
		t->leaf.hdr = hdr;
		t->leaf.probe = D9_COOKIE_GET_INDEX(cookie);
		return 1;
	}
	if (outcome_known(cookie) && o->method == D9_OUT_ALWAYS && !o->invalid) {
		if (f->park_how == D9_HOW_PENDING || f->park_how == D9_HOW_ALWAYS) {
			f->also_pending++;
			return 0;
		}
		capture_park(ctx, t, f, tid, park_point, cookie & D9_COOKIE_CALLEE, 0);
		f->park_how = D9_HOW_ALWAYS;
		return 0;
	}
	/* Outcome unknown: named only while nothing better is known, and only the first. */
	if (f->park_how != D9_HOW_NONE)
		return 0;
	capture_park(ctx, t, f, tid, park_point, cookie & D9_COOKIE_CALLEE, 0);
	f->park_how = D9_HOW_UNOBSERVED;
	return 0;
}

/* 1 Pending, 0 Ready, -1 a value the method does not expect (*val says which). */
static __always_inline int leaf_outcome(struct pt_regs *ctx, const struct d9_park_outcome *o,
					const struct open_leaf *l, __u64 *val)
{
	__u64 rax = PT_REGS_RC(ctx), state = 0;
	__u8 tag = 0;

	*val = rax;
	switch (o->method) {
	case D9_OUT_RET_AL:
		tag = rax & 0xff;
		break;
	case D9_OUT_SRET_BYTE:
		/* The hidden pointer comes back in rax: the ABI is the one assumed. */
		if (rax != l->sret || bpf_probe_read_user(&tag, 1, (void *)(rax + o->off)))
			return -1;
		break;
	case D9_OUT_JOIN_STATE:
		/* COMPLETE only ever gets set: clear at the return, it was clear when the handle
		 * looked, so no output was read. Set, the poll is taken as Ready (it may have run
		 * out of budget: then Pending goes unnamed, never the other way). */
		if (rax != l->sret || !l->hdr ||
		    bpf_probe_read_user(&state, sizeof(state), (void *)l->hdr)) {
			*val = l->hdr;
			return -1;
		}
		*val = state;
		if (!(state & D9_TASK_JOIN_INTEREST))
			return -1;
		return !(state & D9_TASK_COMPLETE);
	default:
		return -1;
	}
	*val = tag;
	if (tag == o->pending)
		return 1;
	if (tag < 32 && ((o->ready_mask >> tag) & 1))
		return 0;
	return -1;
}

/* A park point returned: in a selected poll, the first leaf that returned Pending names it;
 * later ones are counted. */
static __always_inline int on_park_return(struct pt_regs *ctx, __u32 park_point, __u64 cookie)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct thread_state *t = thread_get(tid, false);
	struct d9_park_outcome *o = outcome_spec(cookie);
	struct d9_arming *arm;
	struct frame *f;
	__u32 zero = 0;
	__u64 val = 0;
	int r;

	count(D9_CNT_RET_HITS);
	if (!t || !outcome_known(cookie))
		return 0;
	arm = bpf_map_lookup_elem(&arming, &zero);
	if (!arm)
		return 0;
	gate_account(t, arm, bpf_ktime_get_ns(), false);
	drop_stale_frames(t, tid, arm->generation);
	f = selected_frame(t);
	if (!f || o->invalid)
		return 0;
	if (t->leaf.probe != D9_COOKIE_GET_INDEX(cookie) || t->leaf.sp + 8 != PT_REGS_SP(ctx)) {
		count(D9_CNT_RET_UNMATCHED);
		return 0;
	}
	t->leaf.sp = 0;
	r = leaf_outcome(ctx, o, &t->leaf, &val);
	if (r < 0) {
		if (!o->bad_n)
			o->bad_value = val;
		o->bad_n++;
		o->invalid = 1;
		return 0;
	}
	if (!r) {
		o->ready_n++;
		return 0;
	}
	o->pending_n++;
	if (f->park_how == D9_HOW_PENDING || f->park_how == D9_HOW_ALWAYS) {
		f->also_pending++;
		return 0;
	}
	capture_park(ctx, t, f, tid, park_point, false, t->leaf.ip);
	f->park_how = D9_HOW_PENDING;
	return 0;
}

/* A hit counted by where the window was (enum d9_arm_phase): the gate's hits scale with its
 * length, the others come with every window. */
static __always_inline void count_hit_phase(void)
{
	__u32 zero = 0;
	struct d9_arming *arm = bpf_map_lookup_elem(&arming, &zero);
	__u64 now;

	if (!arm)
		return;
	if (arm->phase == D9_PHASE_ATTACH) {
		count(D9_CNT_ATTACH_HITS);
	} else if (arm->phase == D9_PHASE_DETACH) {
		count(D9_CNT_DETACH_HITS);
	} else if (arm->phase == D9_PHASE_WINDOW) {
		now = bpf_ktime_get_ns();
		count(in_gate(arm, now) ? D9_CNT_GATE_HITS : D9_CNT_SETTLE_HITS);
	}
}

#ifdef D9_EMULATE_HIT_NS
/* A build for experiments only (`touch bpf/sampler.bpf.c && make CLANG="clang
 * -DD9_EMULATE_HIT_NS=4500"`): every hit spins that many ns more, as a trap does on machines
 * where it costs several us, so that what the tool does there can be reproduced on one where
 * it costs under one. */
static long emulate_step(__u64 i, void *until)
{
	return bpf_ktime_get_ns() >= *(__u64 *)until;
}
#endif

/* Every armed probe's hit: counted (the cost driver), per probe (ranking), and the kept
 * probes' alarm. */
static __always_inline void count_hit(__u64 cookie)
{
	__u64 idx = D9_COOKIE_GET_INDEX(cookie);
#ifdef D9_EMULATE_HIT_NS
	__u64 until = bpf_ktime_get_ns() + D9_EMULATE_HIT_NS;

	bpf_loop(1 << 16, emulate_step, &until, 0);
#endif

	count(D9_CNT_HITS);
	if (idx < D9_MAX_PROBES)
		__sync_fetch_and_add(&probe_hits[idx], 1);
	count_hit_phase();
	if (cookie & D9_COOKIE_XOL)
		count(D9_CNT_HITS_XOL);
	/* Worker-park probes are never kept, and are not what the alarm watches. Two CPUs may
	 * both see it set: a second record is harmless. */
	if (kept_alarm_armed && D9_COOKIE_KIND(cookie) != D9_PK_IDLE) {
		__u64 one = 1;

		kept_alarm_armed = 0;
		bpf_ringbuf_output(&kept_alarm, &one, sizeof(one), BPF_RB_FORCE_WAKEUP);
	}
}

/* The one program of the armed probes: raw::poll, raw::dealloc, park points (and their
 * return probes where sessions are not available), worker park. */
SEC("uprobe")
int BPF_KPROBE(probe_entry, __u64 arg0)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);

	count_hit(cookie);
	switch (D9_COOKIE_KIND(cookie)) {
	case D9_PK_POLL:
		return on_poll_entry(ctx, arg0);
	case D9_PK_IDLE:
		return on_worker_park();
	case D9_PK_DEALLOC:
		return on_dealloc(arg0);
	case D9_PK_PARK:
		if (D9_COOKIE_PARK(cookie) == D9_PARK_WAKE)
			return on_wake(arg0);
		if (cookie & D9_COOKIE_RETURN)
			on_park_return(ctx, D9_COOKIE_PARK(cookie), cookie);
		else
			on_park(ctx, D9_COOKIE_PARK(cookie), cookie);
		return 0;
	}
	return 0;
}

extern bool bpf_session_is_return(void) __ksym __weak;

/*
 * Park points whose return says their outcome, in a uprobe session link (6.13+): the entry
 * returns 1 unless it opened a leaf of a selected poll, and the kernel then sets no return
 * probe for that call. A return costs about a hit, so only selected polls pay it, instead of
 * every call in a window.
 */
SEC("uprobe")
int BPF_KPROBE(park_session)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);

	count_hit(cookie);
	if (bpf_session_is_return()) {
		on_park_return(ctx, D9_COOKIE_PARK(cookie), cookie);
		return 0;
	}
	return on_park(ctx, D9_COOKIE_PARK(cookie), cookie) ? 0 : 1;
}

/*
 * The target exec'd. An exec of another file leaves the probes on an inode it no longer maps,
 * and the loader sees /proc/PID/exe change; an exec of the same file keeps them firing, but
 * in a new address space: the loader must stop either way, and only this event tells it.
 * A raw tracepoint, attached by name: tracefs need not be mounted, and kernels may lack the
 * BTF typedef tp_btf needs (this project's 6.18 does).
 */
SEC("raw_tp/sched_process_exec")
int target_exec(struct bpf_raw_tracepoint_args *ctx)
{
	struct d9_exec *e;
	__u32 tgid, tid;

	if (!current_pid_tid(&tgid, &tid) || tgid != targ_tgid)
		return 0;
	e = rb_reserve(sizeof(*e));
	if (!e)
		return 0;
	e->type = D9_REC_EXEC;
	e->pid = tgid;
	e->ts_ns = bpf_ktime_get_ns();
	bpf_ringbuf_submit(e, 0); /* wake the loader: it stops at once */
	return 0;
}

/* The loader's calibration probe: measures what one uprobe hit costs on this machine. */
SEC("uprobe")
int BPF_KPROBE(calib_probe)
{
	count(D9_CNT_CALIB_HITS);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(worker_run, __u64 worker)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct thread_state *t = thread_get(tid, true);
	struct d9_worker_seen *w;

	if (t) {
		__u32 zero = 0;
		struct d9_arming *arm = bpf_map_lookup_elem(&arming, &zero);

		t->worker_ptr = worker;
		/* What the loader found at the attach no longer holds for this thread. */
		bpf_map_delete_elem(&tls_workers, &tid);
		/* Time the thread spent before it ran this worker is not the worker's. */
		__builtin_memset(&t->gate, 0, sizeof(t->gate));
		if (arm)
			drop_stale_frames(t, tid, arm->generation);
		t->run_depth = t->depth;
		t->run_task = lp_current_task();
	}
	w = rb_reserve(sizeof(*w));
	if (!w)
		return 0;
	w->type = D9_REC_WORKER;
	w->tid = tid;
	w->worker = worker;
	w->ts_ns = bpf_ktime_get_ns();
	bpf_ringbuf_submit(w, rb_flags);
	return 0;
}

/* Local flavours, relocated by CO-RE: the fields the thread_regs iterator reads. */
struct bpf_iter_meta___d9 {
	void *seq;
} __attribute__((preserve_access_index));

struct task_struct___d9tls {
	int pid;
	struct {
		unsigned long fsbase;
	} thread;
} __attribute__((preserve_access_index));

/* The helpers by number, with void pointers: their declarations name task_struct and seq_file,
 * whose whole type graphs the compiler would then put into the object's debug info. */
static long (*task_pt_regs)(void *task) = (void *)BPF_FUNC_task_pt_regs;
static long (*seq_write)(void *m, const void *data, __u32 len) = (void *)BPF_FUNC_seq_write;

struct bpf_iter__task___d9 {
	struct bpf_iter_meta___d9 *meta;
	struct task_struct___d9tls *task;
} __attribute__((preserve_access_index));

/*
 * Task iterator over the target's threads (the loader limits it to the target's pid): each
 * thread's TLS base and user stack pointer, from which the loader finds the Tokio context of
 * workers that entered worker::run before the probes were attached. The kernel keeps the TLS
 * base in thread.fsbase; the user registers saved at its last kernel entry give the sp.
 */
SEC("iter/task")
int thread_regs(struct bpf_iter__task___d9 *ctx)
{
	struct task_struct___d9tls *task = ctx->task;
	struct d9_thread_regs r = {};
	struct pt_regs *regs;

	if (!task)
		return 0;
	r.tid = BPF_CORE_READ(task, pid);
	r.fsbase = BPF_CORE_READ(task, thread.fsbase);
	regs = (struct pt_regs *)task_pt_regs(task);
	if (regs)
		r.sp = BPF_CORE_READ(regs, sp);
	seq_write(ctx->meta->seq, &r, sizeof(r));
	return 0;
}

#include "cpu_samples.bpf.h"
