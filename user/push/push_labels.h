/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* A pushed series' name and labels, and its sample types (push_labels.c). */
#ifndef D9_PUSH_LABELS_H
#define D9_PUSH_LABELS_H

#include <stddef.h>

struct push_opts;
struct target;

/* "service{host=..,pid=..,...}" into name. Returns 0 or -ENAMETOOLONG. */
int push_series_name(const struct push_opts *po, const struct target *t, char *name, size_t len);
/* The sample_type_config form part (JSON) for pprof_sample_types. */
void push_sample_type_config(char *buf, size_t len);

#endif
