// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "attach.h"
#include "calibrate.h"
#include "elf_file.h"
#include "dial9_bpf.h"
#include "sampler.skel.h"
#include "target.h"
#include "util_clock.h"

/* A round of 1000 hits takes 0.5-5 ms of thread CPU, a few interrupts' worth of noise, which
 * the best of three rounds leaves out; more rounds or hits make the calibration a large part
 * of a run's start-up CPU, and the hits measured inside the target (lean windows) refine it
 * anyway. A single-stepped hit costs some 30 times an emulated one: 500 of them still take
 * several milliseconds a round, enough to time. */
#define CALIB_CALLS 1000
#define CALIB_CALLS_XOL 500

/* The probed functions, in assembly so their first instruction is known: the cost of a hit
 * depends on it. A frame-pointer prologue (push, emulated) and a "sub rsp" one (stepped). */
int d9_calib_push(int x);
int d9_calib_xol(int x);
__asm__(".text\n"
	".globl d9_calib_push\n.type d9_calib_push,@function\n"
	"d9_calib_push:\n\tpush %rbp\n\tmov %rsp,%rbp\n\tlea 1(%rdi),%eax\n\tpop %rbp\n\tret\n"
	".size d9_calib_push, .-d9_calib_push\n"
	".globl d9_calib_xol\n.type d9_calib_xol,@function\n"
	"d9_calib_xol:\n\tsub $8,%rsp\n\tlea 1(%rdi),%eax\n\tadd $8,%rsp\n\tret\n"
	".size d9_calib_xol, .-d9_calib_xol\n");

/* Thread CPU time, not wall time: the trap is charged to the calling thread, and other load
 * on the machine does not change it. Best of three against scheduler noise. */
static double time_calls(int (*fn)(int), int calls)
{
	double best = 1e30;

	for (int r = 0; r < 3; r++) {
		double t0 = (double)thread_cpu_ns();
		int x = 0;

		for (int i = 0; i < calls; i++)
			x = fn(x);
		double dt = (double)thread_cpu_ns() - t0;
		if (x == calls && dt < best)
			best = dt;
	}
	return best / calls;
}

static int self_probe(struct target *self, const char *name)
{
	const struct elf_sym *syms;
	size_t n;

	syms = elf_file_syms(self->elf, &n);
	for (size_t i = 0; i < n; i++) {
		if (strcmp(syms[i].name, name))
			continue;
		if (elf_file_vaddr_to_offset(self->elf, syms[i].addr, &self->probes[0].offset))
			return -ENOENT;
		self->probes[0].vaddr = syms[i].addr;
		return 0;
	}
	return -ENOENT;
}

/* Thread CPU per call of fn with a counting uprobe on its first instruction, minus without. */
static int hit_cost(struct sampler_bpf *skel, struct target *self, bool multi, const char *name,
		    int (*fn)(int), int calls, double *cost)
{
	struct attachment a = {.multi = multi};
	double base, with;
	int err;

	err = self_probe(self, name);
	if (err)
		return err;
	base = time_calls(fn, calls);
	err = attach_probes_prog(skel->progs.calib_probe, self, false, &a);
	if (err)
		return err;
	with = time_calls(fn, calls);
	detach_probes(&a);
	if (with <= base)
		return -EAGAIN;
	*cost = with - base;
	return 0;
}

int calibrate_probe_cost(struct sampler_bpf *skel, bool multi, bool need_xol,
			 struct probe_cost *cost)
{
	struct probe_spec spec = {.kind = PROBE_POLL, .name = "calibration"};
	struct target self = {.probes = &spec, .nprobes = 1};
	double push, xol;
	int err;

	/* For when the calibration cannot run: high for an emulated hit, of the order of a
	 * single-stepped one. */
	cost->entry_ns = 3000;
	cost->xol_ns = 6000;
	cost->measured = false;
	cost->xol_measured = false;
	self.pid = getpid();
	snprintf(self.exe_link, sizeof(self.exe_link), "/proc/%d/exe", self.pid);
	snprintf(self.exe_path, sizeof(self.exe_path), "/proc/self/exe");
	err = elf_file_open(self.exe_link, &self.elf);
	if (err)
		return err;
	err = hit_cost(skel, &self, multi, "d9_calib_push", d9_calib_push, CALIB_CALLS, &push);
	if (!err) {
		cost->entry_ns = push;
		cost->measured = true;
	}
	if (!err && need_xol) {
		err = hit_cost(skel, &self, multi, "d9_calib_xol", d9_calib_xol, CALIB_CALLS_XOL,
			       &xol);
		if (!err) {
			cost->xol_ns = xol > push ? xol : push;
			cost->xol_measured = true;
		}
	}
	elf_file_close(self.elf);
	return err;
}
