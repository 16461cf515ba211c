/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * User stacks unwound in BPF (--unwind ebpf) from tables the loader builds at start out of
 * each executable mapping's .eh_frame (user/stacks/unwind_tables.c): per mapping its range,
 * load bias and a slice of rows sorted by pc; a row says how to find the CFA (rsp or rbp plus
 * an offset) and where the caller's rbp was saved. A frame costs a module scan, a binary
 * search and two 8-byte user reads, against copying 16 KiB of stack for userspace DWARF.
 *
 * The walk stops where no row covers a pc (code without CFI, PLT entries, CFA expressions,
 * JIT code): the stack is truncated there, counted in D9_CNT_EBPF_UNWIND_UNCOVERED, not
 * completed from a raw copy: copying the stack at every sample "in case" would bring back
 * the cost this mode removes, and the tables cover all but a few entries of the binary and
 * libc (bench/RESULTS.md, "Unwinding").
 *
 * Included by sampler.bpf.c after count() and struct stack_buf. ebpf_unwind() is for any
 * program holding the user registers of the current task.
 */
#ifndef D9_UNWIND_BPF_H
#define D9_UNWIND_BPF_H

/* Set by the loader: 1 when the stacks of park points are unwound here. */
const volatile __u32 unwind_ebpf = 0;
const volatile __u32 unwind_nmodules = 0;

/* Sized by the loader to the tables' rows before load (bpf_map__set_max_entries). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct d9_unwind_row);
} unwind_rows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, D9_UNWIND_MAX_MODULES);
	__type(key, __u32);
	__type(value, struct d9_unwind_module);
} unwind_modules SEC(".maps");

/* The walk's state, on the caller's stack, handed to each bpf_loop step. */
struct unwind_walk {
	__u64 pc;     /* recorded as the frame's address */
	__u64 lookup; /* where its rules are looked up: pc, or the call before a return address */
	__u64 sp, bp;
	__u64 *ips;
	__u32 n;
	__u32 stop; /* D9_CNT_EBPF_UNWIND_*, 0 while walking */
};

/* Both searches run as bpf_loop callbacks: the verifier checks each body once instead of
 * every path through an unrolled search, which multiplies with the frames' loop. */
struct unwind_find {
	__u64 key;    /* pc (module search) or ELF virtual address (row search) */
	__u32 lo, hi; /* the last entry at or below key is lo - 1 once lo == hi */
};

/* The modules (sorted by start, not overlapping): the last starting at or below key. */
static long module_step(__u32 i, void *arg)
{
	struct unwind_find *f = arg;
	__u32 mid = f->lo + (f->hi - f->lo) / 2;
	const struct d9_unwind_module *m;

	if (f->lo >= f->hi)
		return 1;
	m = bpf_map_lookup_elem(&unwind_modules, &mid);
	if (!m)
		return 1;
	if (m->start <= f->key)
		f->lo = mid + 1;
	else
		f->hi = mid;
	return 0;
}

static long row_step(__u32 i, void *arg)
{
	struct unwind_find *f = arg;
	__u32 mid = f->lo + (f->hi - f->lo) / 2;
	const struct d9_unwind_row *r;

	if (f->lo >= f->hi)
		return 1;
	r = bpf_map_lookup_elem(&unwind_rows, &mid);
	if (!r)
		return 1;
	if (r->pc <= f->key)
		f->lo = mid + 1;
	else
		f->hi = mid;
	return 0;
}

/* The row that holds at pc, or NULL. 8 halvings over the modules (D9_UNWIND_MAX_MODULES),
 * 24 over a module's rows (up to 16M). */
static __always_inline const struct d9_unwind_row *unwind_row(__u64 pc)
{
	struct unwind_find f = {.key = pc, .hi = unwind_nmodules};
	const struct d9_unwind_module *m;
	__u32 k;

	bpf_loop(8, module_step, &f, 0);
	if (f.lo != f.hi || !f.lo)
		return NULL;
	k = f.lo - 1;
	m = bpf_map_lookup_elem(&unwind_modules, &k);
	if (!m || pc >= m->end || pc - m->bias > 0xffffffffULL)
		return NULL;
	f.key = pc - m->bias;
	f.lo = m->first;
	f.hi = m->first + m->count;
	bpf_loop(24, row_step, &f, 0);
	if (f.lo != f.hi || f.lo == m->first)
		return NULL;
	k = f.lo - 1;
	return bpf_map_lookup_elem(&unwind_rows, &k);
}

/* One frame: record its pc, then find its caller's pc, sp and rbp. */
static long unwind_step(__u32 i, void *arg)
{
	struct unwind_walk *w = arg;
	const struct d9_unwind_row *r;
	__u64 cfa, ra;
	__u32 n = w->n;

	if (n >= D9_MAX_STACK_DEPTH) {
		w->stop = D9_CNT_EBPF_UNWIND_DEPTH;
		return 1;
	}
	w->ips[n] = w->pc;
	w->n = n + 1;
	r = unwind_row(w->lookup);
	if (!r || r->cfa == D9_UNW_NONE) {
		w->stop = D9_CNT_EBPF_UNWIND_UNCOVERED;
		return 1;
	}
	if (r->cfa == D9_UNW_END) {
		w->stop = D9_CNT_EBPF_UNWIND_END;
		return 1;
	}
	cfa = (r->cfa == D9_UNW_RSP ? w->sp : w->bp) + (__s64)r->cfa_off;
	if (bpf_probe_read_user(&ra, sizeof(ra), (void *)(cfa - 8)) ||
	    (r->rbp_off &&
	     bpf_probe_read_user(&w->bp, sizeof(w->bp), (void *)(cfa + (__s64)r->rbp_off)))) {
		w->stop = D9_CNT_EBPF_UNWIND_ERRORS;
		return 1;
	}
	/* A zero return address ends the chain (thread entry points clear it); a CFA that does
	 * not move up the stack is a bad row or a corrupt stack. */
	if (!ra) {
		w->stop = D9_CNT_EBPF_UNWIND_END;
		return 1;
	}
	if (cfa <= w->sp) {
		w->stop = D9_CNT_EBPF_UNWIND_ERRORS;
		return 1;
	}
	w->sp = cfa;
	w->pc = ra;
	w->lookup = ra - 1;
	return 0;
}

/* A global function's pointer argument reaches only the size of its pointee type. */
struct d9_ips {
	__u64 ip[D9_MAX_STACK_DEPTH];
};

/*
 * Unwinds from pc, sp, bp into out (D9_MAX_STACK_DEPTH entries), innermost first: ip[0] = pc,
 * then return addresses. pc is looked up as is (an exact pc, or a call site the caller already
 * took 1 from). Returns the number of frames and counts how the walk ended.
 *
 * Global, not inlined: the verifier checks a global function once per program, whatever its
 * callers' states, where inlined it walked the frames' loop again at each call site and for
 * each state reaching it (capture_park alone has three).
 */
__noinline int d9_unwind_walk(__u64 pc, __u64 sp, __u64 bp, struct d9_ips *out)
{
	struct unwind_walk w = {.pc = pc, .lookup = pc, .sp = sp, .bp = bp};

	if (!out)
		return 0;
	w.ips = out->ip;
	bpf_loop(D9_MAX_STACK_DEPTH + 1, unwind_step, &w, 0);
	count(w.stop ? w.stop : D9_CNT_EBPF_UNWIND_DEPTH);
	return (int)w.n;
}

static __always_inline int ebpf_unwind_from(__u64 pc, __u64 sp, __u64 bp, __u64 *ips)
{
	return d9_unwind_walk(pc, sp, bp, (struct d9_ips *)ips);
}

/* From the user registers of the current task in a uprobe's ctx, stopped at an exact pc. */
static __always_inline int ebpf_unwind(struct pt_regs *regs, __u64 *ips)
{
	return ebpf_unwind_from(PT_REGS_IP(regs), PT_REGS_SP(regs), PT_REGS_FP(regs), ips);
}

/* From a kernel event in the current task (a timer tick, a scheduler switch): its user
 * registers as it entered the kernel. Returns bytes of ips, as bpf_get_stack would. */
static __always_inline __s32 ebpf_unwind_user(__u64 *ips)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());

	return ebpf_unwind_from(PT_REGS_IP_CORE(regs), PT_REGS_SP_CORE(regs), PT_REGS_FP_CORE(regs),
				ips) *
	       8;
}

/* The user stack of the current task from a kernel event, in bytes of ips (127 entries): the
 * BPF walk under --unwind ebpf, else the frame-pointer walk of bpf_get_stack. */
static __always_inline __s32 user_stack_from_kernel(void *ctx, __u64 *ips)
{
	if (unwind_ebpf)
		return ebpf_unwind_user(ips);
	return bpf_get_stack(ctx, ips, D9_MAX_STACK_DEPTH * sizeof(__u64), BPF_F_USER_STACK);
}

#endif /* D9_UNWIND_BPF_H */
