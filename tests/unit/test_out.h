/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Writers take an open output directory: one for a test's temporary path, and the file a writer
 * wrote read back. Include after <cmocka.h>. */
#ifndef D9_TEST_OUT_H
#define D9_TEST_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include "out_dir.h"

/* Opens PATH as the output directory; the one opened by the previous call is closed. */
static inline const struct out_dir *test_out_dir(const char *path)
{
	static struct out_dir d = {.fd = -1};
	bool created;

	out_dir_close(&d);
	return out_dir_open(&d, path, &created) ? NULL : &d;
}

/* The whole of PATH, NUL-terminated; the caller frees it. */
static inline char *read_all(const char *path)
{
	FILE *f = fopen(path, "re");
	char *buf;
	long n;

	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = 0;
	fclose(f);
	return buf;
}

#endif /* D9_TEST_OUT_H */
