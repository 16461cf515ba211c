// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libFuzzer target for `dial9-bpf report`'s parsing, built with ASan and UBSan over the files
 * of user/report themselves. Each input is read three ways: as a metadata.json; as a
 * samples.jsonl (line splitting, the truncated-last-line rule, every field check) after a valid
 * metadata.json, so that sample lines reach the per-worker and per-stack code; as a single
 * samples.jsonl line; and, split at its first blank line, as a stacks.jsonl and the
 * samples.jsonl rows that name its records (the stack_table layout). Whatever parsed is then
 * printed, as the report would.
 *
 *   make build/fuzz/fuzz_report
 *   build/fuzz/fuzz_report -dict=tests/fuzz/report.dict tests/fuzz/corpus/report
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

/* Two workers, one capped epoch, so that samples exercise every column. */
static const char META[] =
    "{\"tool\":\"dial9-bpf\",\"sampler\":{\"per_worker_hz\":10,\"cap\":{\"rate_hz\":10,"
    "\"burst\":20}},\"target\":{\"pid\":1,\"comm\":\"app\",\"exe\":\"/bin/app\"},"
    "\"sampling_started_at_ns\":0,\"sampling_stopped_at_ns\":5000000000,"
    "\"started_realtime_ns\":1700000000000000000,\"workers\":["
    "{\"worker\":0,\"tid\":5,\"comm\":\"w\",\"epochs\":[{\"epoch\":1,\"eligible\":50,"
    "\"selected\":10,\"refused_by_cap\":2,\"probability\":0.2,\"capped\":true,"
    "\"calibrating\":false,\"complete\":true}]},"
    "{\"worker\":1,\"epochs\":[]}],"
    "\"counters\":{\"ring_buffer_drops\":1},\"samples\":{\"written\":2}}";

/* Small, so that "other" (stacks past the table) is reached. */
#define FUZZ_MAX_STACKS 8

/* DATA split at its first blank line: stacks.jsonl, then samples.jsonl. */
static void fuzz_stack_table(const uint8_t *data, size_t size, FILE *null)
{
	const uint8_t *cut = memmem(data, size, "\n\n", 2);
	struct report *r;
	char err[512];
	FILE *f;

	if (!cut)
		return;
	r = report_new(FUZZ_MAX_STACKS);
	if (!r)
		return;
	if (report_parse_metadata(r, META, sizeof(META) - 1, err, sizeof(err)))
		abort();
	f = fmemopen((void *)data, (size_t)(cut - data) + 1, "r");
	if (f && !report_read_stacks(r, f, err, sizeof(err))) {
		fclose(f);
		f = (size_t)(cut - data) + 2 < size
			? fmemopen((void *)(cut + 2), size - (size_t)(cut - data) - 2, "r")
			: NULL;
		if (f)
			report_read_samples(r, f, err, sizeof(err));
		report_print(r, "fuzz", null);
	}
	if (f)
		fclose(f);
	report_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static FILE *null;
	char err[512];
	struct report *r;
	FILE *f;

	if (!null)
		null = fopen("/dev/null", "w");
	if (!null)
		abort();

	r = report_new(FUZZ_MAX_STACKS);
	if (!r)
		return 0;
	if (!report_parse_metadata(r, (const char *)data, size, err, sizeof(err)))
		report_print(r, "fuzz", null);
	report_free(r);

	r = report_new(FUZZ_MAX_STACKS);
	if (!r)
		return 0;
	if (report_parse_metadata(r, META, sizeof(META) - 1, err, sizeof(err)))
		abort(); /* the fixture itself must parse */
	/* fmemopen refuses a zero size. */
	f = size ? fmemopen((void *)data, size, "r") : NULL;
	if (f) {
		report_read_samples(r, f, err, sizeof(err));
		fclose(f);
	}
	report_print(r, "fuzz", null);
	report_free(r);

	r = report_new(FUZZ_MAX_STACKS);
	if (!r)
		return 0;
	report_parse_sample(r, (const char *)data, size, err, sizeof(err));
	report_print(r, "fuzz", null);
	report_free(r);

	fuzz_stack_table(data, size, null);
	return 0;
}
