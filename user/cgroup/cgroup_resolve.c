// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * --cgroup PATH / --container ID: which cgroup directory to watch. A container id is looked up
 * in every process's /proc/PID/cgroup (the id is a component of the path, or a hex prefix of a
 * 64-hex-digit id inside one), then found under a mounted cgroup file system via
 * /proc/self/mountinfo.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/magic.h>
#include "cgroup_resolve.h"

#define MATCHES_SHOWN 3
#define HEX_ID_LEN 64

static bool is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* The first run of exactly HEX_ID_LEN hex digits in [*c, end), or NULL; *c moves past it. */
static const char *next_hex_id(const char **c, const char *end)
{
	while (*c < end) {
		const char *run = *c;

		while (*c < end && is_hex(**c))
			(*c)++;
		if (*c - run == HEX_ID_LEN)
			return run;
		while (*c < end && !is_hex(**c))
			(*c)++;
	}
	return NULL;
}

/* Whether the component [c, end) holds a run of exactly HEX_ID_LEN hex digits starting with
 * id (case-insensitive). */
static bool component_has_hex_id(const char *c, const char *end, const char *id, size_t idlen)
{
	const char *run;

	while ((run = next_hex_id(&c, end)))
		if (!strncasecmp(run, id, idlen))
			return true;
	return false;
}

/* A Kubernetes pod uid in a component: "pod<uid>" (cgroupfs driver) or "...-pod<uid>.slice"
 * (systemd driver, '-' in the uid written '_'). */
static bool pod_uid_in(const char *c, const char *end, char *pod, size_t plen)
{
	enum { UID_LEN = 36 };
	const char *p = c;

	while ((p = memmem(p, (size_t)(end - p), "pod", 3))) {
		const char *u = p + 3;
		size_t n = 0;

		p = u;
		if (u != c + 3 && !strchr("/-_", u[-4]))
			continue;
		while (u + n < end && n < UID_LEN && (is_hex(u[n]) || u[n] == '-' || u[n] == '_'))
			n++;
		if (n != UID_LEN || plen <= UID_LEN)
			continue;
		for (size_t i = 0; i < n; i++)
			pod[i] = u[i] == '_' ? '-' : u[i];
		pod[n] = 0;
		return true;
	}
	return false;
}

void cgroup_path_ids(const char *path, char *container, size_t clen, char *pod, size_t plen)
{
	*container = *pod = 0;
	for (const char *c = path; *c;) {
		const char *end = strchrnul(c + 1, '/'), *p = c, *run;

		/* The innermost wins: a pod's cgroup holds its containers'. */
		while ((run = next_hex_id(&p, end)))
			snprintf(container, clen, "%.*s", HEX_ID_LEN, run);
		pod_uid_in(c, end, pod, plen);
		c = end;
	}
}

int cgroup_of_pid(int pid, char *out, size_t len)
{
	char path[64], line[PATH_MAX + 256];
	int err = -ENOENT;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/cgroup", pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	/* The v2 line ("0::PATH") when there is one, else the first hierarchy's. */
	while (fgets(line, sizeof(line), f)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		bool v2 = !strncmp(line, "0::", 3);

		if (!c2 || (!err && !v2))
			continue;
		c2[1 + strcspn(c2 + 1, "\n")] = 0;
		err = snprintf(out, len, "%s", c2 + 1) >= (int)len ? -ENAMETOOLONG : 0;
		if (v2)
			break;
	}
	fclose(f);
	return err;
}

bool cgroup_path_match(const char *path, const char *id, size_t *len)
{
	size_t idlen = strlen(id);
	const char *p;
	bool hex = idlen > 0 && idlen <= HEX_ID_LEN;

	if (!idlen || id[idlen - 1] == '/')
		return false; /* also "/": the root is no container */
	/* Whole components first: "d9test", "kubepods/burstable". */
	for (p = path; (p = strstr(p, id)); p++) {
		if ((p == path || p[-1] == '/') && (p[idlen] == '/' || !p[idlen])) {
			*len = (size_t)(p - path) + idlen;
			return true;
		}
	}
	for (size_t i = 0; hex && i < idlen; i++)
		hex = is_hex(id[i]);
	if (!hex)
		return false;
	for (p = path; *p;) {
		const char *end = strchrnul(p + 1, '/');

		if (component_has_hex_id(p, end, id, idlen)) {
			*len = (size_t)(end - path);
			return true;
		}
		p = end;
	}
	return false;
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape_octal(char *s)
{
	char *o = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = 0;
}

/* Whether the comma-separated lists a and b share an item. */
static bool lists_share(const char *a, const char *b)
{
	for (const char *p = a; *p;) {
		size_t n = strcspn(p, ",");

		for (const char *q = b; *q;) {
			size_t m = strcspn(q, ",");

			if (n && n == m && !strncmp(p, q, n))
				return true;
			q += m + (q[m] == ',');
		}
		p += n + (p[n] == ',');
	}
	return false;
}

int cgroup_find_mount(const char *mountinfo, const char *ctrls, char *dir, size_t dirlen,
		      char *root, size_t rootlen)
{
	char line[8192], mroot[PATH_MAX], mdir[PATH_MAX], fstype[64], opts[1024];
	int err = -ENOENT;
	FILE *f = fopen(mountinfo, "re");

	if (!f)
		return -errno;
	while (err == -ENOENT && fgets(line, sizeof(line), f)) {
		/* "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPT...] - FSTYPE SOURCE SUPEROPTS" */
		const char *sep = strstr(line, " - ");

		if (!sep || sscanf(line, "%*d %*d %*s %4095s %4095s", mroot, mdir) != 2 ||
		    sscanf(sep + 3, "%63s %*s %1023s", fstype, opts) != 2)
			continue;
		if (ctrls ? strcmp(fstype, "cgroup") || !lists_share(ctrls, opts)
			  : strcmp(fstype, "cgroup2"))
			continue;
		unescape_octal(mroot);
		unescape_octal(mdir);
		if (snprintf(dir, dirlen, "%s", mdir) >= (int)dirlen ||
		    snprintf(root, rootlen, "%s", mroot) >= (int)rootlen)
			err = -ENAMETOOLONG;
		else
			err = 0;
	}
	fclose(f);
	return err;
}

/* The directory of cgroup path cg (as /proc/PID/cgroup shows it) under a mount at dir that
 * shows cgroup root there. */
static int cgroup_dir_under(const char *dir, const char *root, const char *cg, char *out,
			    size_t outlen)
{
	size_t rl = strlen(root);

	if (strcmp(root, "/")) {
		if (strncmp(cg, root, rl) || (cg[rl] && cg[rl] != '/'))
			return -ENOENT; /* outside what this mount shows */
		cg += rl;
	}
	return snprintf(out, outlen, "%s%s", dir, cg) >= (int)outlen ? -ENAMETOOLONG : 0;
}

struct cg_match {
	bool v2;
	char ctrls[128];
	char path[PATH_MAX];
	int pid;
};

static void add_match(struct cg_match *m, size_t *n, size_t max, bool v2, const char *ctrls,
		      const char *path, size_t len, int pid, size_t *total)
{
	for (size_t i = 0; i < *n; i++)
		if (m[i].v2 == v2 && !strcmp(m[i].ctrls, ctrls) && strlen(m[i].path) == len &&
		    !strncmp(m[i].path, path, len))
			return;
	(*total)++;
	if (*n == max)
		return;
	m[*n].v2 = v2;
	snprintf(m[*n].ctrls, sizeof(m[*n].ctrls), "%s", ctrls);
	snprintf(m[*n].path, sizeof(m[*n].path), "%.*s", (int)len, path);
	m[*n].pid = pid;
	(*n)++;
}

/* Every distinct (hierarchy, cgroup) that /proc/ *\/cgroup lines name for the id. */
static size_t scan_container(const char *id, struct cg_match *m, size_t max, size_t *total,
			     size_t *nprocs)
{
	char path[64], line[PATH_MAX + 256];
	struct dirent *de;
	size_t n = 0;
	DIR *d = opendir("/proc");

	*total = *nprocs = 0;
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		int pid = atoi(de->d_name);
		FILE *f;

		if (pid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/cgroup", pid);
		f = fopen(path, "re");
		if (!f)
			continue; /* exited meanwhile */
		(*nprocs)++;
		while (fgets(line, sizeof(line), f)) {
			char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
			size_t len;

			if (!c2)
				continue;
			*c2 = 0;
			c2[1 + strcspn(c2 + 1, "\n")] = 0;
			if (cgroup_path_match(c2 + 1, id, &len))
				add_match(m, &n, max, !strncmp(line, "0:", 2) && !c1[1], c1 + 1,
					  c2 + 1, len, pid, total);
		}
		fclose(f);
	}
	closedir(d);
	return n;
}

/* --container: the one cgroup the id names, preferring the v2 hierarchy. */
int cgroup_resolve_container(const char *id, char *out, size_t outlen)
{
	enum { MAX_MATCHES = 64 }; /* a container shows in every hierarchy: v1 has about 12 */
	struct cg_match *m = calloc(MAX_MATCHES, sizeof(*m));
	size_t total, nprocs, n, k = 0;
	char dir[PATH_MAX], root[PATH_MAX], list[1024] = "";
	bool any_v2 = false;
	int err = -ENOENT;

	if (!m) {
		fprintf(stderr, "dial9-bpf: failed to allocate: %s\n", strerror(ENOMEM));
		return -ENOMEM;
	}
	n = scan_container(id, m, MAX_MATCHES, &total, &nprocs);

	for (size_t i = 0; i < n; i++)
		any_v2 |= m[i].v2;
	/* A container is in one cgroup per hierarchy (usually with the same path in each): keep
	 * one hierarchy's view, then distinct paths are distinct cgroups. */
	for (size_t i = 0; i < n; i++) {
		bool dup = false;

		if (m[i].v2 != any_v2)
			continue;
		for (size_t j = 0; j < k; j++)
			dup |= !strcmp(m[j].path, m[i].path);
		if (!dup)
			m[k++] = m[i];
	}
	if (!k) {
		fprintf(stderr,
			"dial9-bpf: --container %s matches no cgroup of the %zu processes in "
			"/proc/*/cgroup: give a running container's id (docker ps --no-trunc) or a "
			"component of its cgroup path (cat /proc/PID/cgroup)\n",
			id, nprocs);
		goto out;
	}
	if (k > 1 || total > n) {
		for (size_t j = 0; j < k && j < MATCHES_SHOWN; j++)
			snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s (pid %d)",
				 j ? ", " : "", m[j].path, m[j].pid);
		fprintf(stderr,
			"dial9-bpf: --container %s matches several cgroups: %s%s: give more of the "
			"id, or the cgroup with --cgroup\n",
			id, list, k > MATCHES_SHOWN || total > n ? ", ..." : "");
		err = -EEXIST;
		goto out;
	}
	/* v1: the hierarchies of every matching line with that path, until one is mounted. */
	for (size_t i = 0; i < n && err; i++) {
		struct stat st;

		if (m[i].v2 != any_v2 || strcmp(m[i].path, m[0].path))
			continue;
		err = cgroup_find_mount("/proc/self/mountinfo", any_v2 ? NULL : m[i].ctrls, dir,
					sizeof(dir), root, sizeof(root));
		if (!err)
			err = cgroup_dir_under(dir, root, m[i].path, out, outlen);
		if (!err && stat(out, &st))
			err = -errno;
	}
	if (err)
		fprintf(stderr,
			"dial9-bpf: --container %s is cgroup %s, which no mounted cgroup file "
			"system here shows: %s: mount cgroup2, or give the directory with "
			"--cgroup\n",
			id, m[0].path, strerror(-err));
out:
	free(m);
	return err;
}

/* --cgroup: a directory, or a path relative to the cgroup2 mount. */
int cgroup_resolve_path(const char *arg, char *out)
{
	char mnt[PATH_MAX] = "", root[PATH_MAX], buf[PATH_MAX];
	const char *path = arg;
	bool have_mnt =
	    !cgroup_find_mount("/proc/self/mountinfo", NULL, mnt, sizeof(mnt), root, sizeof(root));
	struct statfs sfs;
	struct stat st;

	if (stat(path, &st) && errno == ENOENT && have_mnt &&
	    snprintf(buf, sizeof(buf), "%s/%s", mnt, arg + (*arg == '/')) < (int)sizeof(buf) &&
	    !stat(buf, &st))
		path = buf;
	if (stat(path, &st)) {
		fprintf(stderr, "dial9-bpf: --cgroup %s: %s: give a cgroup directory%s%s%s\n", arg,
			strerror(errno), have_mnt ? " (cgroup2 is mounted at " : "", mnt,
			have_mnt ? ")" : "");
		return -ENOENT;
	}
	if (!S_ISDIR(st.st_mode) || statfs(path, &sfs) ||
	    (sfs.f_type != CGROUP2_SUPER_MAGIC && sfs.f_type != CGROUP_SUPER_MAGIC)) {
		fprintf(stderr, "dial9-bpf: --cgroup %s: not a cgroup directory: give one%s%s\n",
			arg, have_mnt ? " under the cgroup2 mount " : "", mnt);
		return -ENOTDIR;
	}
	if (!realpath(path, out)) {
		fprintf(stderr, "dial9-bpf: failed to resolve --cgroup %s: %s\n", arg,
			strerror(errno));
		return -errno;
	}
	return 0;
}
