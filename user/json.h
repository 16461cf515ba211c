/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Minimal JSON emitting: the outputs are flat enough that a writer library would add more
 * code than it saves. */
#ifndef D9_JSON_H
#define D9_JSON_H

#include <stdio.h>

/* Writes s as a JSON string literal (quoted, escaped); NULL is written as null. */
void json_str(FILE *f, const char *s);

#endif
