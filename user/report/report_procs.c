// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* report: a --cgroup/--container run directory, one --pid run per process. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <json-c/json.h>
#include "report.h"
#include "report_int.h"

/*
 * A --cgroup/--container run: processes.json lists one --pid run directory per profile (see
 * cgroup_watch.c); each is reported in turn, under a header naming the process.
 */
int rpt_processes(const char *dir, const char *path)
{
	char err[512], exe[256], reason[64], sub[4096];
	struct perr e = {err, sizeof(err)};
	json_object *root = rpt_load_json(path, "give the --output directory of a dial9-bpf run");
	json_object *procs;
	size_t n;
	int rc = 0;

	if (!root)
		return 1;
	if (rpt_get_typed(&e, "", root, "processes", false, json_type_array, &procs)) {
		fprintf(stderr,
			"dial9-bpf: %s: %s: the file is damaged or not written by "
			"dial9-bpf\n",
			path, err);
		json_object_put(root);
		return 1;
	}
	n = json_object_array_length(procs);
	if (!n)
		printf("%s: no Tokio process was profiled (%s lists none)\n", dir, path);
	for (size_t i = 0; i < n; i++) {
		json_object *p = json_object_array_get_idx(procs, i);
		const char *subdir, *exe_s, *why;
		int64_t pid, code;
		struct stat st;

		if (!json_object_is_type(p, json_type_object) ||
		    rpt_get_str(&e, "processes[]", p, "subdir", false, false, &subdir) ||
		    rpt_get_str(&e, "processes[]", p, "exe", false, true, &exe_s) ||
		    rpt_get_str(&e, "processes[]", p, "stop_reason", false, false, &why) ||
		    rpt_get_i64(&e, "processes[]", p, "pid", false, 1, INT32_MAX, &pid) ||
		    rpt_get_i64(&e, "processes[]", p, "exit_code", false, -1, 255, &code)) {
			if (!json_object_is_type(p, json_type_object))
				rpt_fail(&e, "processes[%zu] is not an object", i);
			fprintf(stderr,
				"dial9-bpf: %s: %s: the file is damaged or not written by "
				"dial9-bpf\n",
				path, err);
			rc = 1;
			break;
		}
		/* A name inside dir, never a path out of it. */
		if (!*subdir || strchr(subdir, '/') || !strcmp(subdir, ".") ||
		    !strcmp(subdir, "..") ||
		    snprintf(sub, sizeof(sub), "%s/%s", dir, subdir) >= (int)sizeof(sub)) {
			fprintf(stderr,
				"dial9-bpf: %s: processes[%zu].subdir is not a directory "
				"name: the file is damaged\n",
				path, i);
			rc = 1;
			break;
		}
		rpt_copy_str(exe, sizeof(exe), exe_s);
		rpt_copy_str(reason, sizeof(reason), why);
		printf("%s== %s: pid %" PRId64 " (%s), %s ==\n", i ? "\n" : "", subdir, pid, exe,
		       reason);
		fflush(stdout);
		if (stat(sub, &st) || !S_ISDIR(st.st_mode)) {
			printf("no profile: its profiler exited with %" PRId64
			       " before sampling (its messages were on stderr)\n",
			       code);
			continue;
		}
		rc |= rpt_run(sub);
	}
	json_object_put(root);
	return rc;
}
