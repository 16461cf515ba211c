/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * On-CPU samples (cpu_tick): a software clock event per CPU (PERF_COUNT_SW_CPU_CLOCK, a fixed
 * period of cpu_period_ns) whose every tick on a target worker thread becomes a D9_REC_SAMPLE
 * flagged D9_SF_CPU: the worker, the task being polled then (Tokio's current_task_id, read as
 * the long polls read it, long_polls.bpf.h; 0 = none, the scheduler) and the user stack (frame
 * pointers; walked from .eh_frame tables for --unwind ebpf; for --unwind dwarf the registers
 * and stack copy park samples send, through a per-CPU slot so that a park sample's copy in
 * raw_stacks is left alone). A thread gets
 * ticks in proportion to its time on the CPU, so each sample stands for one period of it:
 * every tick is kept, no inclusion probability. Included by sampler.bpf.c (its maps).
 */
#ifndef D9_CPU_SAMPLES_BPF_H
#define D9_CPU_SAMPLES_BPF_H

const volatile __u64 cpu_period_ns = 0; /* 0: on-CPU samples off */

/* The raw stack copy of the tick on each CPU goes into raw_stacks under a key no thread id
 * takes (pid_max is at most 2^22), not the thread's: that slot holds a selected poll's park
 * stack until the poll ends. */
#define CPU_RAW_KEY(cpu) (0xffff0000u | (cpu))

/* The user registers (task_pt_regs: also right when the tick lands in a system call) and stack,
 * sent just before the sample of the same thread. */
static __always_inline void cpu_send_raw(__u32 tid)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	struct d9_raw_stack *raw = raw_slot(&raw_stacks, CPU_RAW_KEY(bpf_get_smp_processor_id()));
	__u64 ip, sp, bp;
	__u32 len;

	if (!raw || bpf_probe_read_kernel(&ip, sizeof(ip), &regs->ip) ||
	    bpf_probe_read_kernel(&sp, sizeof(sp), &regs->sp) ||
	    bpf_probe_read_kernel(&bp, sizeof(bp), &regs->bp))
		return;
	raw->type = D9_REC_RAW_STACK;
	raw->tid = tid;
	raw->ip = ip;
	raw->sp = sp;
	raw->bp = bp;
	len = copy_stack_pages(raw, sp);
	raw->len = len;
	if (len > D9_MAX_RAW_STACK)
		len = D9_MAX_RAW_STACK;
	if (bpf_ringbuf_output(&events, raw, D9_RAW_STACK_HDR + len, rb_flags))
		count(D9_CNT_CPU_DROPS);
}

SEC("perf_event")
int cpu_tick(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid(), worker, now;
	__u32 tid = (__u32)id, pid, ns_tid;
	bool learned = lp_id_word != D9_LP_UNLEARNED;
	struct d9_sample *s;

	if (!cpu_period_ns || !current_pid_tid(&pid, &ns_tid) || pid != targ_tgid)
		return 0;
	worker = lp_worker(tid);
	if (!worker)
		return 0;
	count(D9_CNT_CPU_TICKS);
	if (!learned)
		count(D9_CNT_CPU_UNLEARNED);
	now = bpf_ktime_get_ns();
	if (raw_stack_bytes)
		cpu_send_raw(tid);
	s = bpf_ringbuf_reserve(&events, sizeof(*s), 0);
	if (!s) {
		count(D9_CNT_CPU_DROPS);
		return 0;
	}
	s->type = D9_REC_SAMPLE;
	s->flags = D9_SF_CPU | (learned ? D9_SF_TASK_ID_OK : 0);
	s->pid = pid;
	s->tid = ns_tid;
	s->worker = worker;
	s->task_id = learned ? lp_polled_task(tid) : 0;
	s->task_hdr = 0;
	s->task_vtable = 0;
	s->window = 0;
	s->epoch = now / D9_NSEC_PER_SEC;
	s->prob = D9_PROB_ONE;
	s->duty = D9_PROB_ONE;
	s->idle_start_ns = 0;
	s->idle_end_ns = 0;
	s->poll_end_ns = 0;
	s->park_ns = now;
	s->park_point = D9_PARK_NONE;
	s->park_how = D9_HOW_NONE;
	s->also_pending = 0;
	s->leaf_ip = 0;
	s->runtime = 0;
	s->stack_bytes = user_stack_from_kernel(ctx, s->stack);
	bpf_ringbuf_submit(s, rb_flags);
	return 0;
}

#endif
