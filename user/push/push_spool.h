/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Intervals the server did not take yet, on disk in order, bounded (push_spool.c). */
#ifndef D9_PUSH_SPOOL_H
#define D9_PUSH_SPOOL_H

#include <stddef.h>
#include <stdint.h>
#include "out_dir.h"
#include "push.h"

/* One request, as sent and as spooled: the query after "ingest?", the body's content type,
 * the body. */
struct push_item {
	struct push_item *next;
	char *query, *ctype;
	char *body;
	size_t len;
	bool from_spool;
};

struct push_spool {
	struct out_dir dir;
	uint64_t limit, bytes;
	struct spool_file {
		uint64_t seq, size;
	} * files; /* oldest first */
	size_t n, cap;
	uint64_t next_seq;
};

/* Opens (making it) the spool: spool_dir, else OUTDIR/push-spool; lists what a previous run
 * left there. Prints one line and returns a negative errno on failure. */
int push_spool_open(struct push_spool *sp, const struct out_dir *outdir, const char *spool_dir,
		    uint64_t limit_bytes);
/* Appends it, dropping the oldest files while the spool would exceed its limit (counted in
 * st). Returns 0 or a negative errno. */
int push_spool_add(struct push_spool *sp, const struct push_item *it, struct push_stats *st);
/* Reads the oldest into *it (freed with push_item_free). Returns 0, -ENOENT when empty, or
 * another negative errno (the file is then dropped as unreadable). */
int push_spool_head(struct push_spool *sp, struct push_item *it);
void push_spool_pop(struct push_spool *sp);
void push_spool_close(struct push_spool *sp);
void push_item_free(struct push_item *it);

#endif
