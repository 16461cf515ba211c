/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The thread that sends intervals to URL/ingest, retrying and spooling (push_send.c). */
#ifndef D9_PUSH_SEND_H
#define D9_PUSH_SEND_H

#include <stdint.h>
#include "push_spool.h"

struct push_opts;
struct push_sender;

/* Starts the thread; it owns sp from now on (and sends what sp already holds first). Returns
 * 0 or a negative errno (printed). */
int push_sender_start(struct push_sender **out, const struct push_opts *po, struct push_spool *sp,
		      struct push_stats *st);
/* Hands over one request (heap-allocated; the sender frees it). Never waits for the network:
 * a lock held for a list append. */
void push_sender_put(struct push_sender *s, struct push_item *it);
/* Sends what is pending for at most wait_ns, spools the rest, stops the thread and frees s.
 * The stats are final afterwards. */
void push_sender_stop(struct push_sender *s, uint64_t wait_ns);

#endif
