/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Giving up root's powers once they are no longer needed: after setup, a run keeps only the
 * capabilities its sampling loop and its outputs use, in every thread that runs on.
 */
#ifndef D9_PRIVS_H
#define D9_PRIVS_H

#include <stddef.h>

enum privs_stage {
	/* What a profiler still needs to start: a --cgroup supervisor's children do. */
	PRIVS_SETUP,
	/* What the sampling loop and finishing the outputs use. */
	PRIVS_LOOP,
};

/* Drops every capability that STAGE does not use from the calling thread (effective,
 * permitted, inheritable, bounding) and sets no_new_privs. Capabilities are per thread: each
 * thread that runs on calls it, and threads created later inherit the result. Returns 0 or a
 * negative errno; a run without CAP_SETPCAP keeps its bounding set. */
int privs_drop(enum privs_stage stage);

/* The calling thread's effective capabilities as a JSON array of names, for metadata. */
int privs_describe(char *buf, size_t len);

#endif /* D9_PRIVS_H */
