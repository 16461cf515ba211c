/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* --cgroup / --container: the cgroup directory a supervisor watches. */
#ifndef D9_CGROUP_RESOLVE_H
#define D9_CGROUP_RESOLVE_H

#include <stdbool.h>
#include <stddef.h>

/* --cgroup: ARG is a cgroup directory, or a path relative to the cgroup2 mount. Sets out
 * (PATH_MAX bytes) to its real path; prints one line naming the problem and the fix and
 * returns a negative errno when it is not a cgroup. */
int cgroup_resolve_path(const char *arg, char *out);
/* --container: the one cgroup the id names (the v2 hierarchy's when there is one), as a
 * directory under a mounted cgroup file system. Prints one line and returns a negative errno
 * when the id names no cgroup, several, or one no mount shows. */
int cgroup_resolve_container(const char *id, char *out, size_t outlen);

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

/*
 * What a cgroup path (as /proc/PID/cgroup shows it) says of a container: its id (the innermost
 * 64-hex-digit run: docker, containerd, CRI-O) into container, and a Kubernetes pod's uid
 * ("pod<uid>" components, either cgroup driver) into pod; "" when the path shows none. Pod
 * names and namespaces are not in cgroup paths.
 */
void cgroup_path_ids(const char *path, char *container, size_t clen, char *pod, size_t plen);
/* Process pid's cgroup path: the v2 hierarchy's, else the first listed. Returns 0 or a
 * negative errno. */
int cgroup_of_pid(int pid, char *out, size_t len);

#endif
