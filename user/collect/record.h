/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* `dial9-bpf --pid PID`: one recording of one process, from setup to its outputs. */
#ifndef D9_RECORD_H
#define D9_RECORD_H

struct options;

/* Whether this process may load BPF and attach uprobes on this kernel; prints one line naming
 * what is missing and the fix. Returns 0 or 1 (the exit code). */
int record_check_system(void);

/* Records o->pid until the duration ends, a signal comes or the target exits or execs, then
 * writes the outputs and the exit summary. Returns the process exit code. */
int record_main(struct options *o);

#endif
