// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* PLACEHOLDER: being written (issue 3). */
#include <stdio.h>
#include "report.h"

int report_main(const char *dir)
{
	fprintf(stderr, "dial9-bpf: report of %s is not implemented yet\n", dir);
	return 1;
}
