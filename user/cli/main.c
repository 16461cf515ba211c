// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * dial9-bpf: samples where the tasks of a running Tokio process run and park.
 * main() only dispatches: `report DIR` (report.h), --cgroup/--container (cgroup_watch.h), or
 * one --pid recording (record.h).
 */
#include "cgroup_watch.h"
#include "options.h"
#include "record.h"
#include "report.h"

int main(int argc, char **argv)
{
	struct options o;
	int err;

	err = options_parse(argc, argv, &o);
	if (err)
		return err;
	if (o.command == D9_CMD_REPORT)
		return report_main(o.report_dir);
	err = record_check_system();
	if (err)
		return err;
	if (o.cgroup_path || o.container_id)
		return cgroup_watch_main(&o, argv[0]);
	return record_main(&o);
}
