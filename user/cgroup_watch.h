/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* --cgroup / --container: profile every Tokio process of a cgroup subtree, one child
 * `dial9-bpf --pid` per process (see cgroup_watch.c for why). */
#ifndef D9_CGROUP_WATCH_H
#define D9_CGROUP_WATCH_H

#include <stdbool.h>
#include <stddef.h>

struct options;

/* Runs the supervisor until --duration ends or SIGINT/SIGTERM; returns the exit code. argv0
 * names the tool in the children's argv (they run /proc/self/exe). */
int cgroup_watch_main(const struct options *o, const char *argv0);

/*
 * Whether a cgroup path as /proc/PID/cgroup shows it ("/system.slice/docker-<id>.scope")
 * names the container id: id equals one or more whole path components ("a", "a/b"), or id is
 * hex and a prefix of a 64-hex-digit run inside a component (docker, containerd and CRI-O ids
 * inside unit names). On a match *len is the length of the path up to the end of the matched
 * component: that prefix is the container's cgroup, whatever sub-cgroup the process is in.
 */
bool cgroup_path_match(const char *path, const char *id, size_t *len);

/*
 * Finds a cgroup mount in a mountinfo file (/proc/self/mountinfo): the cgroup2 one when ctrls
 * is NULL, else a v1 hierarchy mounted with one of the comma-separated controllers ctrls (as
 * in /proc/PID/cgroup: "cpu,cpuacct", "name=systemd"). Sets dir (mount point) and root (the
 * cgroup path the mount shows at dir). Returns 0, -ENOENT or another negative errno.
 */
int cgroup_find_mount(const char *mountinfo, const char *ctrls, char *dir, size_t dirlen,
		      char *root, size_t rootlen);

#endif
