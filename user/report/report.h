/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* `dial9-bpf report DIR`: a text summary of a previous run's output. */
#ifndef D9_REPORT_H
#define D9_REPORT_H

#include <stddef.h>
#include <stdio.h>

/* Returns the process exit code; prints one clear line on bad or damaged input. */
int report_main(const char *dir);

/* The parsing underneath, on buffers, for the unit tests and the fuzz target. Errors return -1
 * with one line ("problem" or "line N: problem") in err; nothing is printed. */
#define REPORT_LINE_MAX (1u << 20)  /* longest samples.jsonl line accepted */
#define REPORT_META_MAX (64u << 20) /* largest metadata.json accepted */
#define REPORT_MAX_STACKS 100000    /* distinct stacks kept; the rest count as "other" */
#define REPORT_INCOMPLETE 1	    /* report_parse_sample: an unfinished JSON object */

struct report;
struct report *report_new(size_t max_stacks); /* 0: REPORT_MAX_STACKS */
void report_free(struct report *r);
int report_parse_metadata(struct report *r, const char *buf, size_t len, char *err, size_t errlen);
int report_parse_sample(struct report *r, const char *line, size_t len, char *err, size_t errlen);
/* Streams a samples.jsonl: 0; 1 when a truncated last line was skipped (err: the warning); -1. */
int report_read_samples(struct report *r, FILE *f, char *err, size_t errlen);
/* Loads a stacks.jsonl, which a samples.jsonl of the stack_table layout needs first: 0 or -1. */
int report_read_stacks(struct report *r, FILE *f, char *err, size_t errlen);
void report_print(const struct report *r, const char *dir, FILE *out);

#endif
