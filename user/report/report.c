// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * `dial9-bpf report DIR`: a text summary of a previous run.
 *
 * DIR/metadata.json is read whole (it grows with workers x seconds, not with samples) and
 * DIR/samples.jsonl is streamed one line at a time into per-stack totals, so memory is bounded
 * by the number of distinct stacks (report_stacks.c).
 *
 * Both files are untrusted: bad JSON, wrong types, absurd values, lines over REPORT_LINE_MAX
 * or binary data stop the report with one line naming the file, the line and the fix. One
 * exception: a last line without its newline that is an unfinished JSON object is what a run
 * killed mid-write leaves (stdio writes whole buffers, which end anywhere in a line), so it is
 * skipped with a warning rather than making the rest of the run unreadable.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <json-c/json.h>
#include "report.h"
#include "report_int.h"

struct report *report_new(size_t max_stacks)
{
	struct report *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->max_stacks = max_stacks ? max_stacks : REPORT_MAX_STACKS;
	if (r->max_stacks > UINT32_MAX / 4)
		r->max_stacks = UINT32_MAX / 4;
	r->tok = json_tokener_new_ex(JSON_DEPTH);
	if (!r->tok) {
		free(r);
		return NULL;
	}
	json_tokener_set_flags(r->tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	return r;
}

void report_free(struct report *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->nents; i++)
		free(r->ents[i].key);
	free(r->ents);
	free(r->slots);
	free(r->workers);
	for (size_t i = 0; i < r->ntypes; i++)
		free(r->types[i].future);
	free(r->types);
	for (size_t i = 0; i < r->ncpu; i++)
		free(r->cpu[i].future);
	free(r->cpu);
	free(r->draws);
	free(r->buf);
	rpt_table_free(r);
	rpt_long_polls_free(r);
	json_tokener_free(r->tok);
	free(r);
}

static int load_metadata(struct report *r, const char *path)
{
	static const char fix[] = "give the --output directory of a finished dial9-bpf run "
				  "(metadata.json is written when the run ends), or with --rotate "
				  "one of its folders, such as DIR/latest";
	char err[512];
	off_t size = 0;
	size_t n;
	char *buf;
	FILE *f;
	int rc;

	f = rpt_open_regular(path, REPORT_META_MAX, fix, err, sizeof(err), &size);
	if (!f) {
		fprintf(stderr, "dial9-bpf: %s: %s\n", path, err);
		return -1;
	}
	buf = malloc((size_t)size + 1);
	if (!buf) {
		fprintf(stderr, "dial9-bpf: %s: out of memory reading %lld bytes\n", path,
			(long long)size);
		fclose(f);
		return -1;
	}
	n = fread(buf, 1, (size_t)size + 1, f);
	if (ferror(f)) {
		fprintf(stderr, "dial9-bpf: %s: read failed: %s\n", path, strerror(errno));
		free(buf);
		fclose(f);
		return -1;
	}
	fclose(f);
	if (n > (size_t)size) /* grew since fstat: a run still writing it */
		n = (size_t)size;
	rc = report_parse_metadata(r, buf, n, err, sizeof(err));
	free(buf);
	if (rc)
		fprintf(stderr,
			"dial9-bpf: %s: %s: the file is damaged or not written by dial9-bpf; "
			"record the run again\n",
			path, err);
	return rc;
}

/* Opens PATH and streams it through READ; prints one line naming the file on failure. Returns
 * READ's result (err then holds its warning when positive). */
static int read_input(struct report *r, const char *path, const char *fix,
		      int (*read)(struct report *, FILE *, char *, size_t), char *err,
		      size_t errlen)
{
	off_t size = 0;
	FILE *f;
	int rc;

	f = rpt_open_regular(path, 0, fix, err, errlen, &size);
	if (!f) {
		fprintf(stderr, "dial9-bpf: %s: %s\n", path, err);
		return -1;
	}
	rc = read(r, f, err, errlen);
	fclose(f);
	if (rc < 0)
		fprintf(stderr,
			"dial9-bpf: %s: %s: the file is damaged or not written by dial9-bpf; "
			"record the run again\n",
			path, err);
	return rc;
}

static int load_stacks(struct report *r, const char *dir)
{
	static const char fix[] = "metadata.json says samples.jsonl names its stacks there; "
				  "copy the run's directory whole";
	char path[4096], err[512];

	if (snprintf(path, sizeof(path), "%s/stacks.jsonl", dir) >= (int)sizeof(path)) {
		fprintf(stderr, "dial9-bpf: %s: path too long: give a shorter path\n", dir);
		return -1;
	}
	return read_input(r, path, fix, report_read_stacks, err, sizeof(err));
}

static int load_samples(struct report *r, const char *path)
{
	static const char fix[] = "record with --format jsonl (or all) to get a report";
	char err[512];
	int rc = read_input(r, path, fix, report_read_samples, err, sizeof(err));

	if (rc < 0)
		return -1;
	if (!r->nsamples && r->written) {
		fprintf(stderr,
			"dial9-bpf: %s: no samples, but metadata.json says %" PRIu64 " were "
			"written: the file was truncated or replaced; record the run again\n",
			path, r->written);
		return -1;
	}
	if (rc > 0)
		fprintf(stderr,
			"dial9-bpf: warning: %s: %s (the run was interrupted while writing it)\n",
			path, err);
	return 0;
}

/* One --pid run's directory. */
int rpt_run(const char *dir)
{
	char meta[4096], samples[4096];
	struct report *r;
	int rc = 1;

	if (snprintf(meta, sizeof(meta), "%s/metadata.json", dir) >= (int)sizeof(meta) ||
	    snprintf(samples, sizeof(samples), "%s/samples.jsonl", dir) >= (int)sizeof(samples)) {
		fprintf(stderr, "dial9-bpf: %s: path too long: give a shorter path\n", dir);
		return 1;
	}
	r = report_new(0);
	if (!r) {
		fprintf(stderr, "dial9-bpf: report: out of memory\n");
		return 1;
	}
	if (!load_metadata(r, meta) &&
	    (strcmp(r->samples_layout, "stack_table") || !load_stacks(r, dir)) &&
	    !load_samples(r, samples)) {
		int lp = rpt_read_long_polls(r, dir);

		if (lp)
			fprintf(stderr,
				"dial9-bpf: warning: %s/long_polls.jsonl: unreadable: %s: the "
				"report leaves long polls out\n",
				dir, strerror(-lp));
		report_print(r, dir, stdout);
		if (fflush(stdout) || ferror(stdout))
			fprintf(stderr, "dial9-bpf: failed to write the report: %s\n",
				strerror(errno));
		else
			rc = 0;
	}
	report_free(r);
	return rc;
}

int report_main(const char *dir)
{
	char meta[4096], procs[4096];
	struct stat st;

	errno = 0;
	if (stat(dir, &st) || !S_ISDIR(st.st_mode)) {
		fprintf(stderr,
			"dial9-bpf: %s: %s: give the --output directory of a previous dial9-bpf "
			"run\n",
			dir, errno ? strerror(errno) : "not a directory");
		return 1;
	}
	/* A supervisor's directory (--cgroup, --container) has processes.json and no
	 * metadata.json of its own. */
	if (snprintf(meta, sizeof(meta), "%s/metadata.json", dir) < (int)sizeof(meta) &&
	    snprintf(procs, sizeof(procs), "%s/processes.json", dir) < (int)sizeof(procs) &&
	    access(meta, F_OK) && !access(procs, F_OK))
		return rpt_processes(dir, procs);
	return rpt_run(dir);
}
