// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include "privs.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/prctl.h>

/* The loop's capabilities, and why each stays. */
static const cap_value_t loop_caps[] = {
    CAP_BPF,		    /* windows attach and detach probe links, read maps */
    CAP_PERFMON,	    /* uprobe links and per-offset perf events */
    CAP_SYS_PTRACE,	    /* the target's /proc files and memory */
    CAP_CHECKPOINT_RESTORE, /* /proc/PID/map_files, for libraries mapped later */
    CAP_DAC_READ_SEARCH,    /* the target's files, wherever they are */
    CAP_DAC_OVERRIDE,	    /* finishing outputs in the invoking user's directory */
    CAP_FOWNER,		    /* replacing names others made in a sticky directory */
    CAP_CHOWN,		    /* handing finished outputs to the sudo user */
};

/* Only needed to start a profiler: BPF statistics and map_files on kernels without
 * CAP_CHECKPOINT_RESTORE (SYS_ADMIN), the memlock limit, the arming thread's real-time
 * priority, and dropping the bounding set in the children of a --cgroup supervisor. */
static const cap_value_t setup_caps[] = {
    CAP_SYS_ADMIN, CAP_SYS_RESOURCE, CAP_SYS_NICE, CAP_SETPCAP, CAP_IPC_LOCK,
};

static bool kept(cap_value_t c, enum privs_stage stage)
{
	for (size_t i = 0; i < sizeof(loop_caps) / sizeof(loop_caps[0]); i++)
		if (loop_caps[i] == c)
			return true;
	for (size_t i = 0; stage == PRIVS_SETUP && i < sizeof(setup_caps) / sizeof(setup_caps[0]);
	     i++)
		if (setup_caps[i] == c)
			return true;
	return false;
}

int privs_drop(enum privs_stage stage)
{
	cap_t caps = cap_get_proc();
	int err = 0;

	if (!caps)
		return -errno;
	/* The bounding set first, while CAP_SETPCAP is still held. */
	for (cap_value_t c = 0; c <= CAP_LAST_CAP; c++) {
		cap_flag_value_t v = CAP_CLEAR;

		if (kept(c, stage) && !cap_get_flag(caps, c, CAP_PERMITTED, &v) && v == CAP_SET)
			continue;
		if (CAP_IS_SUPPORTED(c) && prctl(PR_CAPBSET_READ, c) == 1)
			prctl(PR_CAPBSET_DROP, c, 0, 0, 0);
		cap_set_flag(caps, CAP_EFFECTIVE, 1, &c, CAP_CLEAR);
		cap_set_flag(caps, CAP_PERMITTED, 1, &c, CAP_CLEAR);
		cap_set_flag(caps, CAP_INHERITABLE, 1, &c, CAP_CLEAR);
	}
	if (cap_set_proc(caps))
		err = -errno;
	cap_free(caps);
	if (!err && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		err = -errno;
	if (err)
		errno = -err;
	return err;
}

int privs_describe(char *buf, size_t len)
{
	cap_t caps = cap_get_proc();
	size_t n = 0;

	if (!caps || len < 3)
		return -errno;
	buf[n++] = '[';
	for (cap_value_t c = 0; c <= CAP_LAST_CAP && n + 64 < len; c++) {
		cap_flag_value_t v;
		char *name;

		if (cap_get_flag(caps, c, CAP_EFFECTIVE, &v) || v != CAP_SET)
			continue;
		name = cap_to_name(c);
		if (!name)
			continue;
		n += (size_t)snprintf(buf + n, len - n, "%s\"%s\"", n > 1 ? ", " : "", name);
		cap_free(name);
	}
	cap_free(caps);
	if (n + 2 > len)
		return -ENOSPC;
	buf[n++] = ']';
	buf[n] = 0;
	return 0;
}
