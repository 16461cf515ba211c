/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Writers take an open output directory: one for a test's temporary path. */
#ifndef D9_TEST_OUT_H
#define D9_TEST_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include "out_dir.h"

/* Opens PATH as the output directory; the one opened by the previous call is closed. */
static inline const struct out_dir *test_out_dir(const char *path)
{
	static struct out_dir d = {.fd = -1};
	bool created;

	out_dir_close(&d);
	return out_dir_open(&d, path, &created) ? NULL : &d;
}

#endif /* D9_TEST_OUT_H */
