/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* --cgroup / --container: profile every Tokio process of a cgroup subtree, one child
 * `dial9-bpf --pid` per process (see cgroup_watch.c for why). */
#ifndef D9_CGROUP_WATCH_H
#define D9_CGROUP_WATCH_H

struct options;

/* Runs the supervisor until --duration ends or SIGINT/SIGTERM; returns the exit code. argv0
 * names the tool in the children's argv (they run /proc/self/exe). */
int cgroup_watch_main(const struct options *o, const char *argv0);

#endif
