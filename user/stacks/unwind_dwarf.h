/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#ifndef D9_UNWIND_DWARF_H
#define D9_UNWIND_DWARF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "inline_names.h"

/*
 * Offline DWARF CFI unwinding (elfutils libdwfl) of a user stack captured by BPF: the registers
 * at the sample and a copy of the top of the stack from sp. Code needs no frame pointers, only
 * .eh_frame (every default build has it) or .debug_frame.
 *
 * One unwinder per target process. It reports the process's executable file mappings to one
 * Dwfl, opened through /proc/PID/map_files (or the process's root), so containers and deleted
 * binaries work; the Dwfl and everything parsed from the files (CFI, DWARF) are kept across
 * calls and extended when a new mapping appears (maps re-read at most every
 * UNWINDER_REFRESH_MS, when a pc falls outside every module). Only the captured stack bytes and
 * the files are read, never /proc/PID/mem: the target has moved on since the sample. Once a
 * module is reported, unwinding through it works after the target exits. Not thread-safe.
 *
 * x86-64 only.
 */
struct unwinder;

#define UNWINDER_REFRESH_MS 100

/*
 * Registers at the sample, as in the user pt_regs. x86-64 CFI computes every CFA from rsp or
 * rbp, so these three suffice; bp is not optional even without frame pointers: the vDSO, Rust's
 * std (built with frame pointers) and functions that realign their stack define the CFA by rbp.
 */
struct unwind_regs {
	uint64_t ip, sp, bp;
};

enum unwind_stop {
	UNWIND_OK,		/* reached the outermost frame (its return address is undefined) */
	UNWIND_TRUNCATED_STACK, /* needed bytes above the captured ones */
	UNWIND_NO_CFI,		/* the pc's module has no CFI for it */
	UNWIND_UNKNOWN_PC,	/* the pc is in no module (JIT code, anonymous memory, garbage) */
	UNWIND_BAD_MEMORY,	/* a read outside the stack and files, or sp went backwards */
	UNWIND_MAX_FRAMES,	/* more frames than pcs */
	UNWIND_ERROR,		/* anything else libdwfl reported */
};
#define UNWIND_NSTOPS (UNWIND_ERROR + 1)

/*
 * Reads /proc/PID/maps and reports the modules now, while the process is alive. Returns NULL
 * with errno set (ESRCH-like errors from reading the maps, ENOMEM).
 */
struct unwinder *unwinder_new(int pid);
void unwinder_free(struct unwinder *u);

/*
 * The separate debug file (debuginfo.h) of the module with that GNU build id: its DWARF names
 * inlined calls; CFI is still read from the module's own .eh_frame. Call before the first
 * inline lookup. Returns 0 or a negative errno.
 */
int unwinder_set_debug_file(struct unwinder *u, const char *path, const uint8_t *build_id,
			    size_t len);

/*
 * Unwinds one stack. stack holds stack_len bytes copied from regs->sp upwards. pcs[0] = ip,
 * then the return addresses (not adjusted: look their callers up at pc - 1), at most max_pcs.
 * Always sets *npcs (>= 1 when max_pcs >= 1) and *stop and returns 0, whatever stopped the
 * walk; returns -EINVAL for bad arguments.
 */
int unwinder_unwind(struct unwinder *u, const struct unwind_regs *regs, const uint8_t *stack,
		    size_t stack_len, uint64_t *pcs, size_t max_pcs, size_t *npcs,
		    enum unwind_stop *stop);

/*
 * The functions at pc from the DWARF debug info (inline_names.h), for the pcs of either
 * unwinding mode: the inlined calls innermost first, then the function that contains them
 * (inlined = false); names valid until unwinder_free(). is_return_address looks pc - 1 up, as
 * the pcs of unwinder_unwind() after the first need. *n = 0 when pc is in no module, or its
 * module has no debug info (stripped, or no line tables). Results are cached per module and
 * address. Returns 0, -ENOSPC when max was too small (the innermost max entries are filled),
 * -EINVAL, -ENOMEM.
 */
int unwinder_inline_frames(struct unwinder *u, uint64_t pc, bool is_return_address,
			   struct inline_frame *out, size_t max, size_t *n);

/*
 * Reads the debug info of every module reported so far (decompressing it, and searching for
 * separate debug files) and indexes its units for inline names, for a bounded time, which the
 * first inline lookups in each module would do otherwise: done before sampling, that cost
 * stays out of the sampling windows. It may run in a thread of its own while the caller sets
 * up the rest, and goes on until unwinder_finish_loading. Returns how many modules have debug
 * info.
 */
int unwinder_load_debuginfo(struct unwinder *u);

/* The caller's setup is done and waits for unwinder_load_debuginfo, from another thread: it
 * ends within its time from the start (unwind_dwarf.c). */
void unwinder_finish_loading(struct unwinder *u);

/*
 * Re-read the maps now, ignoring the rate limit, reporting new modules (the Dwfl is rebuilt
 * from scratch only when a module went away or moved). Returns 0 or a negative errno (the
 * previous modules are kept).
 */
int unwinder_refresh(struct unwinder *u);

/* How many modules are reported; how many times the Dwfl was built (1 + rebuilds). */
size_t unwinder_nmodules(const struct unwinder *u);
unsigned int unwinder_generation(const struct unwinder *u);

const char *unwind_stop_name(enum unwind_stop stop);

/* The kernel's vDSO image (the same in every x86-64 process: this one's) in a memfd, for
 * libelf; or a negative errno. */
int vdso_memfd(void);

#endif /* D9_UNWIND_DWARF_H */
