// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * What a pushed series is called: Pyroscope's name parameter, "service{k=v,...}". The labels
 * find the process again in a fleet: host, pid, the container id and Kubernetes pod uid its
 * cgroup path shows, then --label (which wins over the automatic ones). Values the name
 * parameter could misread (it has no escaping) have such characters replaced by '_'.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <curl/curl.h>
#include "cgroup_resolve.h"
#include "options.h"
#include "pprof_profile.h"
#include "push.h"
#include "push_labels.h"
#include "target.h"

static void sanitize(char *s)
{
	for (; *s; s++)
		if (push_check_service((char[]){*s, 0}))
			*s = '_';
}

/* Appends ",key=value" (or "key=value" first) unless --label sets key. */
static void add_label(char *name, size_t len, const struct push_opts *po, const char *key,
		      const char *value)
{
	size_t klen = strlen(key), n = strlen(name);
	char v[256];

	for (size_t i = 0; i < po->nlabels; i++)
		if (!strncmp(po->labels[i], key, klen) && po->labels[i][klen] == '=')
			return;
	if (!*value)
		return;
	snprintf(v, sizeof(v), "%s", value);
	sanitize(v);
	snprintf(name + n, len - n, "%s%s=%s", name[n - 1] == '{' ? "" : ",", key, v);
}

int push_series_name(const struct push_opts *po, const struct target *t, char *name, size_t len)
{
	char host[256] = "", pid[16], cg[PATH_MAX], container[80], pod[40];
	const char *exe = strrchr(t->exe_path, '/');
	size_t n;

	snprintf(name, len, "%s", po->service ? po->service : exe ? exe + 1 : t->comm);
	sanitize(name);
	n = strlen(name);
	snprintf(name + n, len - n, "{");
	gethostname(host, sizeof(host) - 1);
	snprintf(pid, sizeof(pid), "%d", t->pid);
	container[0] = pod[0] = 0;
	if (!cgroup_of_pid(t->pid, cg, sizeof(cg)))
		cgroup_path_ids(cg, container, sizeof(container), pod, sizeof(pod));
	add_label(name, len, po, "host", host);
	add_label(name, len, po, "pid", pid);
	add_label(name, len, po, "container_id", container);
	add_label(name, len, po, "pod_uid", pod);
	for (size_t i = 0; i < po->nlabels; i++) {
		n = strlen(name);
		snprintf(name + n, len - n, "%s%s", name[n - 1] == '{' ? "" : ",", po->labels[i]);
	}
	n = strlen(name);
	if (snprintf(name + n, len - n, "}") >= (int)(len - n))
		return -ENAMETOOLONG;
	return 0;
}

/* Pyroscope knows the units samples, objects and bytes only: durations go as counts (their
 * names say nanoseconds). The values are already estimates, not samples to scale. */
void push_sample_type_config(char *buf, size_t len)
{
	size_t n = 0;

	n += (size_t)snprintf(buf, len, "{");
	for (size_t i = 0; i < PPROF_NSAMPLE_TYPES && n < len; i++)
		n +=
		    (size_t)snprintf(buf + n, len - n,
				     "%s\"%s\": {\"units\": \"samples\", \"aggregation\": \"sum\", "
				     "\"display-name\": \"tokio_%s_%s\", \"sampled\": false}",
				     i ? ", " : "", pprof_sample_types[i].type,
				     pprof_sample_types[i].type, pprof_sample_types[i].unit);
	if (n < len)
		snprintf(buf + n, len - n, "}");
}
