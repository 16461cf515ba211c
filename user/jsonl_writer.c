// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* samples.jsonl: one TaskSampleEvent per line, streamed; a reader can stop at any line. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "json.h"
#include "writer.h"

struct jsonl_writer {
	FILE *f;
	char path[4096];
};

static int jsonl_sample(struct writer *w, const struct task_sample *s)
{
	struct jsonl_writer *jw = w->priv;
	FILE *f = jw->f;

	fprintf(f,
		"{\"timestamp_ns\":%" PRIu64 ",\"pid\":%u,\"tid\":%u,\"ns_pid\":%u,\"ns_tid\":%u,"
		"\"worker\":%d,"
		"\"worker_key\":\"0x%" PRIx64 "\",\"task_id\":",
		s->timestamp_ns, s->pid, s->tid, s->ns_pid, s->ns_tid, s->worker, s->worker_key);
	if (s->task_id_ok)
		fprintf(f, "%" PRIu64, s->task_id);
	else
		fputs("null", f);
	fprintf(
	    f,
	    ",\"task_id_ok\":%s,\"inclusion_probability\":%.9g,\"epoch\":%" PRIu64
	    ",\"idle_start_ns\":%" PRIu64 ",\"idle_end_ns\":%" PRIu64 ",\"idle_ns\":%" PRIu64
	    ",\"idle_known\":%s,\"poll_duration_ns\":%" PRIu64 ",\"capped\":%s,\"outcome\":\"%s\","
	    "\"park_point\":\"%s\",\"weight_count\":%" PRIu64 ",\"weight_idle_ns\":%" PRIu64,
	    s->task_id_ok ? "true" : "false", s->prob, s->epoch, s->idle_start_ns, s->idle_end_ns,
	    s->idle_known ? s->idle_end_ns - s->idle_start_ns : 0, s->idle_known ? "true" : "false",
	    s->poll_end_ns - s->idle_end_ns, s->capped ? "true" : "false", s->outcome,
	    s->park_point, s->weight_count, s->weight_idle_ns);
	if (s->stack_error)
		fprintf(f, ",\"stack_error\":%d", s->stack_error);
	fputs(",\"stack\":[", f);
	for (size_t i = 0; i < s->nframes; i++) {
		fprintf(f, "%s{\"addr\":\"0x%" PRIx64 "\",\"name\":", i ? "," : "",
			s->frames[i].addr);
		json_str(f, s->frames[i].name);
		fputs(",\"module\":", f);
		json_str(f, s->frames[i].module);
		fputc('}', f);
	}
	fputs("]}\n", f);
	return ferror(f) ? -EIO : 0;
}

static int jsonl_finish(struct writer *w, const struct run_context *rc)
{
	struct jsonl_writer *jw = w->priv;
	int err = 0;

	(void)rc;
	if (fflush(jw->f) || ferror(jw->f) || fsync(fileno(jw->f)))
		err = errno ? -errno : -EIO;
	if (fclose(jw->f) && !err)
		err = -errno;
	if (err)
		fprintf(stderr, "dial9-bpf: failed to write %s: %s\n", jw->path, strerror(-err));
	free(jw);
	w->priv = NULL;
	return err;
}

static void jsonl_abort(struct writer *w)
{
	struct jsonl_writer *jw = w->priv;

	fclose(jw->f);
	unlink(jw->path);
	free(jw);
	w->priv = NULL;
}

int jsonl_writer_open(const char *dir, struct writer *w)
{
	struct jsonl_writer *jw = calloc(1, sizeof(*jw));

	if (!jw)
		return -ENOMEM;
	snprintf(jw->path, sizeof(jw->path), "%s/samples.jsonl", dir);
	jw->f = fopen(jw->path, "we");
	if (!jw->f) {
		int err = -errno;

		free(jw);
		return err;
	}
	w->format = "jsonl";
	w->priv = jw;
	w->sample = jsonl_sample;
	w->finish = jsonl_finish;
	w->abort = jsonl_abort;
	return 0;
}
