/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* `dial9-bpf report DIR`: a text summary of a previous run's output. */
#ifndef D9_REPORT_H
#define D9_REPORT_H

/* Returns the process exit code; prints one clear line on bad or damaged input. */
int report_main(const char *dir);

#endif
