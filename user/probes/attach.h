/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Uprobe links of one target: attached together, detached together.
 *
 * On kernels with uprobe_multi (6.6+) each BPF program gets one link holding all its offsets:
 * attaching costs one syscall per program and detaching one RCU grace period per program,
 * instead of one per offset (seconds with dozens of probes). Older kernels get one perf-event
 * link per offset. Debian's libbpf 1.1 has no uprobe_multi API, so the link is created with
 * the bpf syscall directly.
 */
#ifndef D9_ATTACH_H
#define D9_ATTACH_H

#include <stdbool.h>
#include <stddef.h>

struct sampler_bpf;
struct target;
struct bpf_link;

struct attachment {
	bool multi;
	struct bpf_link **links; /* per-offset mode */
	int *fds;		 /* uprobe_multi mode: link fds */
	size_t n;
	size_t cap;
	size_t probes; /* uprobes (offset x entry/return) installed */
};

/* Whether this kernel has uprobe_multi links; DIAL9_UPROBE_MULTI=0 forces per-offset links. */
bool attach_multi_supported(void);
/* Must run between open and load: programs for uprobe_multi need their attach type set, and
 * park points whose return says their outcome use uprobe sessions where the kernel has them. */
void attach_prepare(struct sampler_bpf *skel, bool multi);
/* Whether those park points are in session links (else: a return probe on every call). */
bool attach_uses_sessions(void);
enum attach_group {
	ATTACH_PERSISTENT, /* worker::run: rare, always attached */
	ATTACH_ARMED,	   /* per-poll probes: raw::poll, dealloc, park points, worker park */
	ATTACH_ARMED_LEAN, /* the same without the park points: a lean window (arming.c) */
	ATTACH_KEPT,	   /* armed probes marked kept: in place between windows (arming.c) */
	/* Every armed probe, for this process rather than the target: no breakpoint is written,
	 * but the kernel keeps its uprobes for the windows to reuse (uprobe_multi only). */
	ATTACH_HOLD,
};

/* Attaches one group of the target's probes into a (which must be empty); on failure detaches
 * what it attached and returns a negative errno after printing one line. */
int attach_probes(struct sampler_bpf *skel, const struct target *t, enum attach_group g,
		  struct attachment *a);
/* Attaches every probe of t, whatever its kind, to one program (calibration). */
struct bpf_program;
int attach_probes_prog(struct bpf_program *prog, const struct target *t, bool retprobe,
		       struct attachment *a);
/* Removes every probe from the target. Idempotent. */
void detach_probes(struct attachment *a);

#endif
