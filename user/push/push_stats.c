// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* What pushing did: metadata.json's "push" and the exit line. */
#include <inttypes.h>
#include <stdio.h>
#include "json.h"
#include "push.h"

void push_stats_write_json(FILE *f, const struct push_stats *s)
{
	fputs("{\"url\": ", f);
	json_str(f, s->url);
	fputs(", \"name\": ", f);
	json_str(f, s->name);
	fprintf(f, ", \"format\": \"pprof\", \"interval_s\": %u", s->interval_s);
	fprintf(f,
		",\n    \"intervals\": %" PRIu64 ", \"sent\": %" PRIu64
		", \"sent_from_spool\": %" PRIu64 ", \"retries\": %" PRIu64
		", \"spooled\": %" PRIu64 ", \"spool_pending\": %" PRIu64
		", \"spool_bytes\": %" PRIu64 ",\n    \"dropped_spool_full\": %" PRIu64
		", \"dropped_rejected\": %" PRIu64 ", \"samples\": %" PRIu64
		", \"late_samples\": %" PRIu64 ", \"bytes_sent\": %" PRIu64
		", \"body_bytes_max\": %" PRIu64 ",\n    \"latency_ms_mean\": %.3f"
		", \"latency_ms_max\": %.3f, \"spool_dir\": ",
		s->intervals, s->sent, s->sent_from_spool, s->retries, s->spooled, s->spool_pending,
		s->spool_bytes, s->dropped_spool_full, s->dropped_rejected, s->samples,
		s->late_samples, s->bytes_sent, s->body_bytes_max,
		s->sent ? s->latency_ms_sum / (double)s->sent : 0.0, s->latency_ms_max);
	json_str(f, s->spool_dir);
	fputs(", \"last_error\": ", f);
	json_str(f, s->last_error[0] ? s->last_error : NULL);
	fputc('}', f);
}

void push_stats_print(const struct push_stats *s, bool quiet)
{
	bool clean = !s->spool_pending && !s->dropped_spool_full && !s->dropped_rejected;

	if (quiet && clean)
		return;
	fprintf(stderr,
		"dial9-bpf: push: %" PRIu64 " intervals to %s: %" PRIu64 " sent (%" PRIu64
		" from the spool), %" PRIu64 " left in %s, %" PRIu64 " dropped (%" PRIu64
		" spool full, %" PRIu64 " refused)%s%s\n",
		s->intervals, s->url, s->sent, s->sent_from_spool, s->spool_pending, s->spool_dir,
		s->dropped_spool_full + s->dropped_rejected, s->dropped_spool_full,
		s->dropped_rejected, s->last_error[0] && !clean ? "; last error: " : "",
		!clean ? s->last_error : "");
}
