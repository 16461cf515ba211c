/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * --push URL: every --push-interval seconds, that interval's profile goes to a
 * Pyroscope-compatible server's /ingest (pprof in a multipart form), from a thread of its own,
 * retried with backoff and spooled on disk while the server does not take it. See docs/push.md.
 *
 * push_interval.c cuts the samples into intervals and encodes each (a writer the collector
 * feeds, closed by push_tick from the record loop); push_send.c sends them; push_spool.c keeps
 * what could not be sent; push_check.c validates the options.
 */
#ifndef D9_PUSH_H
#define D9_PUSH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "writer.h"

struct options;
struct push_opts;
struct target;

/* What a run's pushing did, for the exit line and metadata.json's "push". */
struct push_stats {
	char url[512];	      /* --push without user and password */
	char name[1024];      /* the name parameter: service{labels} */
	char spool_dir[4096]; /* where unsent intervals wait */
	unsigned int interval_s;
	uint64_t intervals;	  /* intervals handed to the sender */
	uint64_t sent;		  /* accepted by the server (2xx), including older spooled ones */
	uint64_t sent_from_spool; /* of them, sent from the spool (after a retry or a restart) */
	uint64_t retries;	  /* attempts that failed and will be retried */
	uint64_t spooled;	  /* intervals written to the spool */
	uint64_t spool_pending;	  /* left in the spool at exit: a later run with it sends them */
	uint64_t spool_bytes;	  /* their size */
	uint64_t dropped_spool_full; /* oldest dropped to keep the spool under --spool-mb */
	uint64_t dropped_rejected;   /* refused with a 4xx other than 429: never retried */
	uint64_t late_samples;	     /* samples that came after their interval was sent */
	uint64_t samples;	     /* samples pushed (every interval's) */
	uint64_t bytes_sent;	     /* request bodies accepted */
	uint64_t body_bytes_max;
	double latency_ms_sum, latency_ms_max; /* of accepted requests */
	char last_error[256];
};

/* Opens the pusher as a writer (format "push") that cuts samples into intervals; starts the
 * sending thread and the spool (DIR/push-spool or --spool-dir). Prints one line and returns a
 * negative errno on failure. stats must live until metadata.json is written. */
int push_writer_open(const struct options *o, const struct target *t, const struct out_dir *dir,
		     struct push_stats *stats, struct writer *w);
/* From the record loop: starts intervals as time passes and hands over those whose samples
 * are all in (now is CLOCK_MONOTONIC). w NULL: pushing is off. */
void push_tick(struct writer *w, const struct run_context *rc, uint64_t now);
void push_stats_write_json(FILE *f, const struct push_stats *s);
/* The exit line: what was sent, left in the spool, dropped (quiet: only when not all sent). */
void push_stats_print(const struct push_stats *s, bool quiet);

/* Option checks: NULL when fine, else what is wrong (for a one-line usage error). */
const char *push_check_url(const char *url);
const char *push_check_header(const char *h);
const char *push_check_label(const char *kv);
const char *push_check_service(const char *name);
/* The push options as a --cgroup child's arguments, its spool in SUBDIR of --spool-dir. Adds
 * at most PUSH_CHILD_ARGS entries to argv from *a on; strings go to buf (PATH_MAX + 64). */
#define PUSH_CHILD_ARGS 80
void push_child_argv(const struct push_opts *po, const char *subdir, char **argv, size_t *a,
		     char *buf, size_t buflen);

#endif
