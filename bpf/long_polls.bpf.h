/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Long polls, blocked (lp_switch) or running (lp_tick, below); included by sampler.bpf.c,
 * whose maps it shares.
 *
 * Tokio keeps the id of the task being polled in its thread-local context::CONTEXT
 * (current_task_id, set around every poll), so a worker thread switching out voluntarily
 * while that word is set is blocked inside a poll, whether or not a window is open. No poll
 * ends while its thread is off the CPU: one such interval of at least lp_min_ns is a long
 * poll on its own. The word's place in CONTEXT is not fixed by Rust: park points, which run
 * inside a poll of a known task, count which word equals its id (lp_learn_word) and the
 * loader sets lp_id_word once one word stands out (user/collect/long_polls.c).
 *
 *  - lp_switch (raw_tp sched_switch): at a worker's blocking switch out inside a poll, the
 *    time, task and user stack go into lp_blocked; at its switch back in, an interval of at
 *    least lp_min_ns is sent as a D9_REC_LONG_POLL.
 */
#ifndef D9_LONG_POLLS_BPF_H
#define D9_LONG_POLLS_BPF_H

const volatile __u64 lp_min_ns = 0; /* 0: long polls off */
/* The running task is read (long polls or on-CPU samples): the word is learned. */
const volatile __u32 lp_read_task = 0;
const volatile __s64 lp_ctx_off = 0; /* context::CONTEXT's address minus the TLS base */
/* Set by the loader once learned: the word of CONTEXT holding the id and, for Tokio's
 * 16-byte Option<Id(u64)>, whether the word before it is the tag (1 = Some). */
__u32 lp_id_word = D9_LP_UNLEARNED;
__u32 lp_id_tagged = 0;

struct lp_words {
	__u64 w[D9_LP_WORDS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, D9_LP_LEARN_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} lp_learn SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lp_words);
} lp_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct d9_long_poll);
} lp_blocked SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct d9_long_poll);
} lp_zero SEC(".maps");

/* The user stack at one tick of a thread's run, drawn as lp_tick says. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct stack_buf);
} lp_stacks SEC(".maps");

struct task_struct___d9lp {
	unsigned int __state; /* 5.14+ */
	int pid;
	int tgid;
	struct {
		unsigned long fsbase;
	} thread;
} __attribute__((preserve_access_index));

/* The current thread's context::CONTEXT, 0 when no view reads the running task. */
static __always_inline __u64 lp_context(void)
{
	struct task_struct___d9lp *task = (void *)bpf_get_current_task();

	if (!lp_read_task)
		return 0;
	return BPF_CORE_READ(task, thread.fsbase) + lp_ctx_off;
}

/* The task of this CPU's last observation: one task's park points in a row count once. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lp_last_obs SEC(".maps");

static __always_inline void lp_bump(__u32 slot)
{
	__u64 *v = bpf_map_lookup_elem(&lp_learn, &slot);

	if (v)
		__sync_fetch_and_add(v, 1);
}

/* Called inside a poll of task_id (a park point in a window) until the word is learned.
 * Global, not inlined, so that the verifier checks its loop once, not at every park point's
 * path. */
__noinline int lp_learn_word(__u64 task_id)
{
	__u64 ctx = lp_id_word == D9_LP_UNLEARNED ? lp_context() : 0, *last;
	struct lp_words *sw;
	__u32 zero = 0;

	if (!ctx || !task_id)
		return 0;
	/* Otherwise a window whose park points are mostly one task's (a yield loop) would
	 * teach any word that happens to equal that id, a small integer as often as not. */
	last = bpf_map_lookup_elem(&lp_last_obs, &zero);
	if (!last || *last == task_id)
		return 0;
	*last = task_id;
	sw = bpf_map_lookup_elem(&lp_scratch, &zero);
	if (!sw || bpf_probe_read_user(sw, sizeof(*sw), (void *)ctx))
		return 0;
	for (__u32 j = 0; j < D9_LP_WORDS; j++) {
		if (sw->w[j] != task_id)
			continue;
		lp_bump(j);
		if (j > 0 && sw->w[j - 1] == 1)
			lp_bump(D9_LP_WORDS + j);
	}
	lp_bump(2 * D9_LP_WORDS);
	return 0;
}

/* The id of the task the current thread is polling, 0 when none or not learned. */
static __always_inline __u64 lp_current_task(void)
{
	__u32 word = lp_id_word;
	__u64 ctx = word < D9_LP_WORDS ? lp_context() : 0;
	__u64 w[2] = {};

	if (!ctx)
		return 0;
	if (word == 0) /* no tag word before it */
		return lp_id_tagged || bpf_probe_read_user(w, 8, (void *)ctx) ? 0 : w[0];
	if (bpf_probe_read_user(w, sizeof(w), (void *)(ctx + (word - 1) * 8)))
		return 0;
	if (lp_id_tagged && w[0] != 1)
		return 0;
	return w[1];
}

/* Threads whose worker loop runs inside a blocking task's poll since before the attach (their
 * worker::run was not seen): that task's id, written by the loader once such a thread was seen
 * parked in the scheduler with it current (user/collect/long_polls.c). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} lp_run_tasks SEC(".maps");

/* The task whose poll the current thread is in, 0 when none. A worker loop run inside a
 * blocking task's poll (the thread took a worker over from block_in_place) is between polls,
 * parked or stealing, while that blocking task's id is current. */
static __always_inline __u64 lp_polled_task(__u32 tid)
{
	__u64 id = lp_current_task(), *nested;
	struct thread_state *t = id ? thread_get(tid, false) : NULL;

	if (t && t->run_task == id)
		return 0;
	nested = id ? bpf_map_lookup_elem(&lp_run_tasks, &tid) : NULL;
	return nested && *nested == id ? 0 : id;
}

/* The worker the current thread runs, 0 when it runs none (a blocking-pool thread). */
static __always_inline __u64 lp_worker(__u32 tid)
{
	struct thread_state *t = thread_get(tid, false);
	__u64 key = tls_worker_of(tid);

	if (key)
		return key;
	return t ? t->worker_ptr : 0;
}

/* A thread that runs a current_thread runtime is its worker (key: its tid | D9_WORKER_TID_FLAG),
 * known once its polls gave it a worker state; it has no worker context for lp_worker. */
static __always_inline __u64 lp_thread_worker(__u32 tid)
{
	__u64 key = tid | D9_WORKER_TID_FLAG;

	return bpf_map_lookup_elem(&workers, &key) ? key : 0;
}

/* The scheduler context (user/target/worker_tls.c found it at the attach): the TLS variable
 * at lp_sched_off, its word lp_sched_word; lp_heap_words marks its word holding the Core. */
__s64 lp_sched_off = 0;
__u64 lp_tick_ns = 0; /* the ticks' period */
__u32 lp_sched_word = D9_LP_UNLEARNED;
__u32 lp_heap_words = 0; /* words of that context pointing to the Core (and deferred wakers) */

/* The current thread's scheduler context, 0 when it has none or it is not known. */
static __always_inline __u64 lp_sched_context(void)
{
	struct task_struct___d9lp *task = (void *)bpf_get_current_task();
	__u64 ctx;

	if (lp_sched_word >= D9_LP_WORDS || !lp_heap_words)
		return 0;
	ctx = BPF_CORE_READ(task, thread.fsbase) + lp_sched_off + lp_sched_word * 8;
	if (bpf_probe_read_user(&ctx, sizeof(ctx), (void *)ctx))
		return 0;
	return ctx;
}

/* The Core the current thread holds, 0 when it holds none or that cannot be read;
 * LP_CORE_UNKNOWN when there is no scheduler context to tell. Read once per program run and
 * passed on: each read of the target's memory is a good part of a tick's cost. */
#define LP_CORE_UNKNOWN 1ULL
static __always_inline __u64 lp_core(void)
{
	__u32 mask = lp_heap_words;
	__u64 ctx, core = 0;
	int w = 0;

	if (lp_sched_word >= D9_LP_WORDS || !mask)
		return LP_CORE_UNKNOWN;
	ctx = lp_sched_context();
	if (!ctx)
		return 0;
	for (; w < 16 && !(mask & (1u << w)); w++)
		;
	return bpf_probe_read_user(&core, sizeof(core), (void *)(ctx + w * 8)) ? 0 : core;
}

/*
 * Each worker thread's time on the CPU while it runs a worker, counted at its switches and
 * scheduler ticks: the loader reads it at each epoch's boundary and scales the in-window
 * counts of yielded resumes by the share of it the windows saw (collector_yield_coverage),
 * and sums it by worker (worker_share) for the sampler's probabilities.
 * A poll going on without the Core is block_in_place's blocking work, no worker's: Tokio keeps
 * the Core in the thread's context while it polls a task or parks, and in a local between
 * tasks, when no task id is set.
 * LRU: threads that exit (block_in_place hands workers to new threads all the time) make room
 * for new ones; a live one evicted is missed for one epoch (the loader takes the threads of
 * two readings).
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, D9_MAX_WORKER_THREADS);
	__type(key, __u32);
	__type(value, struct d9_core_time);
} worker_cpu SEC(".maps");

/* The same by worker (key: the worker key), in all: a thread that runs one worker and then
 * another (block_in_place hands Cores between threads) gives each its part. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct d9_worker_ns);
} worker_ns SEC(".maps");

/* The loader's per-epoch figures from worker_ns, for the sampler's probabilities
 * (expected_by_cpu). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct d9_worker_share);
} worker_share SEC(".maps");

static __always_inline void worker_ns_add(__u64 worker, __u64 ns, __u64 now)
{
	struct d9_worker_ns *v, fresh = {0, now};

	if (!worker)
		return;
	v = bpf_map_lookup_elem(&worker_ns, &worker);
	if (v)
		__sync_fetch_and_add(&v->ns, ns);
	else
		bpf_map_update_elem(&worker_ns, &worker, &fresh, BPF_NOEXIST);
}

/* Whether a thread in a poll of task_id (0: none) with that Core (lp_core) runs its worker.
 * A poll run through block_in_place gave its Core to another thread: however long it
 * blocks, no worker waits for it, and such threads sleep inside polls all the time. */
static __always_inline bool lp_runs_worker(__u64 task_id, __u64 core)
{
	return !task_id || core;
}

/* The current thread at a scheduler tick, or leaving the CPU (leaves): the time since the
 * last count is a worker's if it runs one now (runs), the worker it ran at its last tick
 * (worker: the one it runs at this tick, 0 at a switch). Followed from its first tick as a
 * worker. */
static __always_inline void worker_cpu_count(__u32 tid, __u64 now, bool leaves, bool runs,
					     __u64 worker)
{
	struct d9_core_time *c = bpf_map_lookup_elem(&worker_cpu, &tid);

	if (!c && leaves)
		return;
	if (!c) {
		struct d9_core_time fresh = {now, 0, worker};

		if (runs)
			bpf_map_update_elem(&worker_cpu, &tid, &fresh, BPF_NOEXIST);
		return;
	}
	if (c->since && runs && now > c->since) {
		c->ns += now - c->since;
		worker_ns_add(c->worker ? c->worker : worker, now - c->since, now);
	}
	c->since = leaves ? 0 : now;
	if (worker)
		c->worker = worker;
}

/* A followed thread gets the CPU. */
static __always_inline void worker_cpu_in(__u32 tid, __u64 now)
{
	struct d9_core_time *c = bpf_map_lookup_elem(&worker_cpu, &tid);

	if (c)
		c->since = now;
}

static __always_inline void lp_switch_out(void *ctx, __u64 now, __u64 task_id, __u64 core)
{
	__u64 id = bpf_get_current_pid_tgid(), worker;
	__u32 tid = (__u32)id, pid, ns_tid, zero = 0;
	struct d9_long_poll *z, *b;

	if (!current_pid_tid(&pid, &ns_tid) || pid != targ_tgid)
		return;
	worker = task_id && core ? lp_worker(tid) : 0;
	if (!worker)
		return;
	z = bpf_map_lookup_elem(&lp_zero, &zero);
	if (!z)
		return;
	bpf_map_update_elem(&lp_blocked, &tid, z, BPF_ANY);
	b = bpf_map_lookup_elem(&lp_blocked, &tid);
	if (!b)
		return;
	b->type = D9_REC_LONG_POLL;
	b->tid = ns_tid;
	b->host_tid = tid;
	b->worker = worker;
	b->task_id = task_id;
	b->out_ns = now;
	/* lp_zero is also lp_run_end's scratch: what it left there is not this record's. */
	b->on_cpu = 0;
	b->on_cpu_ns = 0;
	b->stack_bytes = user_stack_from_kernel(ctx, b->stack);
	count(D9_CNT_LP_SLEEPS);
}

static __always_inline void lp_switch_in(struct task_struct___d9lp *next, __u64 now)
{
	__u32 tid = BPF_CORE_READ(next, pid);
	struct d9_long_poll *b;

	/* Every switch of the machine comes here: another process's thread leaves before the
	 * map lookup (tgids are the root namespace's unless pidns_ino says otherwise). */
	if (!pidns_ino && (__u32)BPF_CORE_READ(next, tgid) != targ_tgid)
		return;
	b = bpf_map_lookup_elem(&lp_blocked, &tid);
	if (!b)
		return;
	b->blocked_ns = now - b->out_ns;
	if (b->blocked_ns >= lp_min_ns && bpf_ringbuf_output(&events, b, sizeof(*b), 0))
		count(D9_CNT_RB_DROPS);
	bpf_map_delete_elem(&lp_blocked, &tid);
}

SEC("raw_tp/sched_switch")
int lp_switch(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct___d9lp *prev, *next = (void *)ctx->args[2];
	__u32 pid, tid, prev_tid = 0, next_tid = 0;
	__u64 now, task_id = 0, core = 0;
	bool runs;

	if (!lp_min_ns)
		return 0;
	if (current_pid_tid(&pid, &tid) && pid == targ_tgid)
		prev_tid = (__u32)bpf_get_current_pid_tgid();
	/* In a pid namespace the tgid cannot be compared: the maps' keys tell. */
	if (pidns_ino || (__u32)BPF_CORE_READ(next, tgid) == targ_tgid)
		next_tid = BPF_CORE_READ(next, pid);
	/* Most switches of the machine are no target thread's: they leave before the clock. */
	if (!prev_tid && !next_tid)
		return 0;
	now = bpf_ktime_get_ns();
	if (lp_id_word == D9_LP_UNLEARNED) {
		gate_switch(prev_tid, true, next_tid, now);
		return 0;
	}
	if (prev_tid) {
		task_id = lp_polled_task(prev_tid);
		core = task_id ? lp_core() : 0;
	}
	runs = prev_tid && lp_runs_worker(task_id, core);
	gate_switch(prev_tid, runs, next_tid, now);
	if (prev_tid)
		worker_cpu_count(prev_tid, now, true, runs, 0);
	if (next_tid)
		worker_cpu_in(next_tid, now);
	/* sched_switch(preempt, prev, next): prev is the current task, and a state other than
	 * TASK_RUNNING means it went to sleep; a running one was preempted, not blocked
	 * (preempt alone misses preemption on the way back to user mode). */
	prev = (void *)ctx->args[1];
	if (prev_tid && !ctx->args[0] && BPF_CORE_READ(prev, __state))
		lp_switch_out(ctx, now, task_id, core);
	lp_switch_in(next, now);
	return 0;
}

/*
 * On the CPU: a tick (the scheduler's, or a software clock event, below) finds the worker's current
 * task and a hash of its Core (Tokio bumps Core.tick for every task it takes from a queue, so two
 * polls of one task differ in it). The same task and Core at consecutive ticks is one poll going
 * on; when it ends (another task, another Core, none), a run spanning lp_min_ns or more is
 * sent. The scheduler context is found as user/target/worker_tls.c found it at the attach: the TLS
 * variable at lp_sched_off, its word lp_sched_word; the hash covers what that context's heap
 * words (lp_heap_words) point to.
 */

struct lp_run {
	__u64 task_id, hash, first_ns, last_ns;
	__u32 ticks;
	__u32 long_ticks;  /* ticks since it spanned lp_min_ns */
	__s32 stack_bytes; /* of its stack in lp_stacks */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct lp_run);
} lp_runs SEC(".maps");

struct lp_core {
	__u64 w[D9_LP_CORE_WORDS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lp_core);
} lp_core_scratch SEC(".maps");

#define LP_TARGET_WORDS (D9_LP_CORE_WORDS - 16)

/* FNV-1a over n of the scratch's words from word from (0 or 1). */
static __always_inline __u64 lp_hash_words(const struct lp_core *c, __u64 h, __u32 n, __u32 from)
{
	for (__u32 i = 0; i < LP_TARGET_WORDS && i < n; i++)
		h = (h ^ c->w[(i + from) & (D9_LP_CORE_WORDS - 1)]) * 0x100000001b3ULL;
	return h;
}

/* A hash of the Core (lp_core), the object only: the heap beyond it changes with everything
 * else. glibc's malloc keeps the chunk size in the word before the object, so one read from
 * there gives both (this runs at most ticks, and every read it skips counts); where that
 * read fails (the object near the end of a mapping), its first 8 words. 0 when it cannot be
 * read. */
static __always_inline __u64 lp_core_hash(__u64 core)
{
	__u64 h = 0x9e3779b97f4a7c15ULL, chunk;
	struct lp_core *c;
	__u32 zero = 0, n = 8;

	c = core && core != LP_CORE_UNKNOWN ? bpf_map_lookup_elem(&lp_core_scratch, &zero) : NULL;
	if (!c)
		return 0;
	if (!bpf_probe_read_user(c, (LP_TARGET_WORDS + 1) * 8, (void *)(core - 8))) {
		chunk = c->w[0] & ~7ULL;
		if (chunk >= 32 && chunk <= (LP_TARGET_WORDS + 1) * 8)
			n = (__u32)(chunk / 8) - 1;
		return lp_hash_words(c, h, n, 1) | 1;
	}
	if (bpf_probe_read_user(c, n * 8, (void *)core))
		return 0;
	return lp_hash_words(c, h, n, 0) | 1;
}

static __always_inline void lp_run_end(void *ctx, struct lp_run *r, __u32 tid, __u32 ns_tid,
				       __u64 worker)
{
	struct d9_long_poll *b;
	struct stack_buf *sb;
	__u32 zero = 0;

	/* Its first and last ticks fall a period inside it on average (half at each end). */
	if (r->ticks < 2 || r->last_ns - r->first_ns + lp_tick_ns < lp_min_ns)
		return;
	b = bpf_map_lookup_elem(&lp_zero, &zero);
	if (!b)
		return;
	b->type = D9_REC_LONG_POLL;
	b->tid = ns_tid;
	b->host_tid = tid;
	b->worker = worker;
	b->task_id = r->task_id;
	b->out_ns = r->first_ns;
	b->blocked_ns = 0;
	b->on_cpu_ns = r->last_ns - r->first_ns + lp_tick_ns;
	b->on_cpu = 1;
	b->stack_bytes = r->stack_bytes;
	sb = r->stack_bytes > 0 ? bpf_map_lookup_elem(&lp_stacks, &tid) : NULL;
	if (sb)
		__builtin_memcpy(b->stack, sb->ips, sizeof(b->stack));
	else
		b->stack_bytes = 0;
	if (bpf_ringbuf_output(&events, b, sizeof(*b), 0))
		count(D9_CNT_RB_DROPS);
	b->stack_bytes = 0;
	b->on_cpu = 0;
	b->on_cpu_ns = 0;
}

static __always_inline __s32 lp_take_stack(void *ctx, __u32 tid)
{
	struct stack_buf *sb = bpf_map_lookup_elem(&lp_stacks, &tid);
	__u32 zero = 0;

	if (!sb) {
		struct stack_buf *z = bpf_map_lookup_elem(&zero_stack, &zero);

		if (!z)
			return 0;
		bpf_map_update_elem(&lp_stacks, &tid, z, BPF_ANY);
		sb = bpf_map_lookup_elem(&lp_stacks, &tid);
		if (!sb)
			return 0;
	}
	return user_stack_from_kernel(ctx, sb->ips);
}

static __always_inline int lp_tick_body(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid(), now, task_id, core, hash, worker;
	__u32 tid = (__u32)id, pid, ns_tid;
	struct lp_run *r, fresh = {};
	bool runs;

	if (!lp_min_ns || lp_id_word == D9_LP_UNLEARNED)
		return 0;
	if (!current_pid_tid(&pid, &ns_tid) || pid != targ_tgid)
		return 0;
	/* Without a scheduler context (a current_thread runtime's) only the worker's CPU time is
	 * followed: a long poll needs the Core's hash to tell one poll from the next. */
	worker = lp_heap_words ? lp_worker(tid) : lp_thread_worker(tid);
	if (!worker)
		return 0;
	now = bpf_ktime_get_ns();
	task_id = lp_polled_task(tid);
	core = task_id ? lp_core() : 0;
	runs = lp_runs_worker(task_id, core);
	worker_cpu_count(tid, now, false, runs, worker);
	gate_tick(tid, runs, now);
	if (!lp_heap_words)
		return 0;
	hash = task_id ? lp_core_hash(core) : 0;
	r = bpf_map_lookup_elem(&lp_runs, &tid);
	if (r && r->ticks && task_id && r->task_id == task_id && r->hash == hash) {
		r->last_ns = now;
		r->ticks++;
		/* What the poll is doing: the stack of one of its ticks once it spans lp_min_ns,
		 * each as likely (kept with chance 1/k at the k-th), so the poll's own work rather
		 * than the code that runs as it returns, and in proportion to where its time goes
		 * past the threshold. Not earlier: a stack is most of the tick's cost, and most
		 * runs end short of the threshold, where no record needs it. */
		if (now - r->first_ns + lp_tick_ns < lp_min_ns)
			return 0;
		r->long_ticks++;
		if (bpf_get_prandom_u32() % r->long_ticks == 0)
			r->stack_bytes = lp_take_stack(ctx, tid);
		return 0;
	}
	if (r)
		lp_run_end(ctx, r, tid, ns_tid, worker);
	if (!task_id || !hash) {
		if (r)
			r->ticks = 0; /* ended; the thread's entry stays for its next run */
		return 0;
	}
	fresh.task_id = task_id;
	fresh.hash = hash;
	fresh.first_ns = fresh.last_ns = now;
	fresh.ticks = 1;
	/* In place when the thread has an entry: an update of an LRU map takes its locks and
	 * costs more than the rest of the tick, and a worker of short polls starts a run at
	 * nearly every tick. */
	if (r)
		*r = fresh;
	else
		bpf_map_update_elem(&lp_runs, &tid, &fresh, BPF_ANY);
	return 0;
}

/* The kernel's own scheduler tick, where its period suits the threshold: it interrupts a busy
 * CPU anyway, so the tick costs the program's run and nothing more, where a clock event of
 * our own is an interrupt of its own, dear on VMs. The tick is an
 * hrtimer whose handler (lp_tick_fn, from kallsyms: user/collect/sched_tick.c) runs in the
 * interrupted thread's context; every hrtimer of every CPU comes here, others leaving at the
 * function check and other processes' threads at the tgid check. */
const volatile __u64 lp_tick_fn = 0;

struct hrtimer___d9 {
	void *function;
} __attribute__((preserve_access_index));

SEC("raw_tp/hrtimer_expire_entry")
int lp_sched_tick(struct bpf_raw_tracepoint_args *ctx)
{
	struct hrtimer___d9 *t = (void *)ctx->args[0];

	if (!lp_tick_fn || (__u64)BPF_CORE_READ(t, function) != lp_tick_fn)
		return 0;
	return lp_tick_body(ctx);
}

/* Where the scheduler tick cannot serve: a software clock event per target thread. */
SEC("perf_event")
int lp_tick(void *ctx)
{
	return lp_tick_body(ctx);
}

#endif
