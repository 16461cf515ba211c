// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The report's parsing: metadata.json and samples.jsonl on buffers, good and damaged. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "report.h"

/* Two workers at 50 Hz: worker 0 has three usable epochs (101..103; 100 calibrates, 104 is
 * still open), one of them capped; worker 1 only calibrated. */
static const char META[] =
    "{\"tool\": \"dial9-bpf\", \"tool_version\": \"0.1.0\", \"kernel_release\": \"6.1.0\",\n"
    " \"sampler\": {\"name\": \"per_worker_bernoulli_v1\", \"version\": 1, \"per_worker_hz\": "
    "50, \"seed\": 7,\n  \"cap\": {\"kind\": \"token_bucket\", \"rate_hz\": 50, \"burst\": "
    "100}},\n"
    " \"target\": {\"pid\": 4242, \"comm\": \"app\", \"exe\": \"/usr/bin/app\"},\n"
    " \"task_id_layout\": \"validated\",\n"
    " \"sampling_started_at_ns\": 100500000000, \"sampling_stopped_at_ns\": 104500000000,\n"
    " \"started_realtime_ns\": 1700000000000000000, \"stop_reason\": \"duration\",\n"
    " \"worker_detection\": \"worker_run_arg\",\n"
    " \"probes\": {\"attached\": 44, \"link\": \"uprobe_multi\", \"poll_functions\": 12, "
    "\"park_points\": 7, \"symbols\": []},\n"
    " \"workers\": [\n"
    "  {\"worker\": 0, \"key\": \"0x1\", \"detection\": \"worker_run_arg\", \"tid\": 11, "
    "\"comm\": \"tokio-runtime-w\", \"samples_written\": 3, \"epochs\": [\n"
    "   {\"epoch\": 100, \"eligible\": 900, \"selected\": 0, \"refused_by_cap\": 0, "
    "\"probability\": 0, \"capped\": false, \"calibrating\": true, \"complete\": true},\n"
    "   {\"epoch\": 101, \"eligible\": 1000, \"selected\": 48, \"refused_by_cap\": 0, "
    "\"probability\": 0.05, \"capped\": false, \"calibrating\": false, \"complete\": true},\n"
    "   {\"epoch\": 102, \"eligible\": 1000, \"selected\": 52, \"refused_by_cap\": 3, "
    "\"probability\": 0.05, \"capped\": true, \"calibrating\": false, \"complete\": true},\n"
    "   {\"epoch\": 103, \"eligible\": 1000, \"selected\": 50, \"refused_by_cap\": 0, "
    "\"probability\": 0.05, \"capped\": false, \"calibrating\": false, \"complete\": true},\n"
    "   {\"epoch\": 104, \"eligible\": 500, \"selected\": 20, \"refused_by_cap\": 0, "
    "\"probability\": 0.05, \"capped\": false, \"calibrating\": false, \"complete\": false}]},\n"
    "  {\"worker\": 1, \"key\": \"0x2\", \"detection\": \"thread\", \"tid\": 12, \"comm\": null, "
    "\"samples_written\": 0, \"epochs\": [\n"
    "   {\"epoch\": 100, \"eligible\": 10, \"selected\": 0, \"refused_by_cap\": 0, "
    "\"probability\": 0, \"capped\": false, \"calibrating\": true, \"complete\": true}]}\n"
    " ],\n"
    " \"counters\": {\"polls\": 5000, \"ring_buffer_drops\": 0, \"stack_capture_errors\": 1},\n"
    " \"samples\": {\"written\": 3, \"with_stack\": 2, \"stack_errors\": 1, \"task_id_ok\": 3}\n"
    "}\n";

/* Leaf first, like the sampler's stacks: the park point's frame, a Tokio future, the program,
 * then the scheduler down to the thread start. */
#define APP_STACK                                                                                  \
	"[{\"addr\":\"0x10\",\"name\":\"tokio::runtime::task::waker::clone_waker\","               \
	"\"module\":\"/usr/bin/app\"},"                                                            \
	"{\"addr\":\"0x11\",\"name\":\"<tokio::time::sleep::Sleep as "                             \
	"core::future::future::Future>::poll\",\"module\":\"/usr/bin/app\"},"                      \
	"{\"addr\":\"0x12\",\"name\":\"app::db::query::{{closure}}\",\"module\":\"/usr/bin/"       \
	"app\"},"                                                                                  \
	"{\"addr\":\"0x13\",\"name\":\"<&mut F as core::future::future::Future>::poll\","          \
	"\"module\":\"/usr/bin/app\"},"                                                            \
	"{\"addr\":\"0x14\",\"name\":\"<app::Traced<F> as core::future::future::Future>::poll\","  \
	"\"module\":\"/usr/bin/app\"},"                                                            \
	"{\"addr\":\"0x15\",\"name\":\"app::handler::{{closure}}\",\"module\":\"/usr/bin/app\"},"  \
	"{\"addr\":\"0x16\",\"name\":\"app::serve::{{closure}}\",\"module\":\"/usr/bin/app\"},"    \
	"{\"addr\":\"0x17\",\"name\":\"tokio::runtime::task::harness::Harness<T,S>::poll\","       \
	"\"module\":\"/usr/bin/app\"},"                                                            \
	"{\"addr\":\"0x18\",\"name\":\"std::sys::backtrace::__rust_begin_short_backtrace\","       \
	"\"module\":\"/usr/bin/app\"},"                                                            \
	"{\"addr\":\"0x19\",\"name\":\"start_thread\",\"module\":\"/usr/lib/libc.so.6\"},"         \
	"{\"addr\":\"0x1a\",\"name\":null,\"module\":\"/usr/lib/libc.so.6\"}]"

static char *sample(int worker, const char *prob, int capped, const char *park, uint64_t count,
		    uint64_t idle, const char *stack)
{
	static char buf[8192];

	snprintf(
	    buf, sizeof(buf),
	    "{\"timestamp_ns\":101000000000,\"pid\":4242,\"tid\":11,\"worker\":%d,"
	    "\"worker_key\":\"0x1\",\"task_id\":5,\"task_id_ok\":true,"
	    "\"inclusion_probability\":%s,\"epoch\":101,\"idle_start_ns\":1,\"idle_end_ns\":2,"
	    "\"idle_ns\":1,\"poll_duration_ns\":3,\"capped\":%s,\"outcome\":\"pending\","
	    "\"park_point\":\"%s\",\"weight_count\":%llu,\"weight_idle_ns\":%llu,\"stack\":%s}",
	    worker, prob, capped ? "true" : "false", park, (unsigned long long)count,
	    (unsigned long long)idle, stack);
	return buf;
}

static struct report *with_meta_text(const char *meta, size_t max_stacks)
{
	struct report *r = report_new(max_stacks);
	char err[256];

	assert_non_null(r);
	if (report_parse_metadata(r, meta, strlen(meta), err, sizeof(err)))
		fail_msg("metadata: %s", err);
	return r;
}

static struct report *with_meta(size_t max_stacks)
{
	return with_meta_text(META, max_stacks);
}

static void add(struct report *r, const char *line)
{
	char err[256];

	if (report_parse_sample(r, line, strlen(line), err, sizeof(err)))
		fail_msg("sample: %s", err);
}

/* The printed report, malloc'd. */
static char *printed(const struct report *r)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	assert_non_null(f);
	report_print(r, "/tmp/run", f);
	fclose(f);
	return text;
}

static void assert_contains(const char *hay, const char *needle)
{
	if (!strstr(hay, needle))
		fail_msg("'%s' not in:\n%s", needle, hay);
}

static void test_metadata_summary(void **state)
{
	struct report *r = with_meta(0);
	char *text;

	(void)state;
	text = printed(r);
	assert_contains(text, "pid 4242 (app) /usr/bin/app");
	assert_contains(text, "4.0 s, started 2023-11-14 22:13:20 UTC, stopped by duration");
	assert_contains(text, "50 samples/s per worker, cap: token bucket 50/s burst 100, seed 7");
	/* Worker 0: (48 + 52 + 50) / 3 usable epochs; one capped, 3 refused. */
	assert_contains(text, "  0       11       tokio-runtime-w  worker_run_arg        0  "
			      "     3        50.0       100%       1        3");
	assert_contains(text, "  1       12       ?                thread                0  "
			      "     0           -          -       0        0");
	assert_contains(text, "polls                   5000");
	assert_contains(text, "warning: 1 epochs on 1 workers were capped (3 selections refused");
	assert_contains(text, "metadata.json says 3 were written");
	free(text);
	report_free(r);
}

static void test_stacks_grouped_and_weighted(void **state)
{
	struct report *r = with_meta(0);
	char *text;

	(void)state;
	add(r, sample(0, "0.05", 0, "clone_waker", 20, 4000000000ULL, APP_STACK));
	add(r, sample(0, "0.05", 1, "clone_waker", 20, 2000000000ULL, APP_STACK));
	add(r, sample(1, "0.1", 0, "resource_poll", 10, 0, "[]"));
	text = printed(r);
	/* The two app samples are one stack: 40 of 50 resumes, 6 of 6 idle seconds. */
	assert_contains(text, "2 distinct");
	/* Three samples drawn one by one: the app stack's 3/2 * (20^2 + 20^2 - 40^2/3) = 400,
	 * +-t(2) * 20 = 86; the other's 3/2 * (10^2 - 10^2/3) = 100, +-43. */
	assert_contains(text,
			"  1   80.0%            40         86        6.000      100.0%        2  "
			"at clone_waker\n"
			"        app::db::query::{{closure}}\n"
			"        <app::Traced<F> as core::future::future::Future>::poll\n"
			"        app::handler::{{closure}}\n"
			"  2   20.0%            10         43        0.000        0.0%        1  "
			"at resource_poll\n"
			"        (no stack)\n");
	assert_null(strstr(text, "&mut F"));
	assert_null(strstr(text, "app::serve"));
	assert_contains(text, "3 samples (1 without a stack, 1 from capped epochs)");
	free(text);
	report_free(r);
}

/* A sample line naming its future (and its window, or "" for an always-armed sample): the
 * sample() line with those added before "stack". */
static char *with_future(const char *line, const char *future, const char *window)
{
	static char buf[8400];
	const char *at = strstr(line, ",\"stack\":");

	snprintf(buf, sizeof(buf), "%.*s%s,\"future\":%s%s", (int)(at - line), line, window, future,
		 at);
	return buf;
}

static void test_by_task_type(void **state)
{
	static const char handler[] = "\"app::handler::{{closure}}\"";
	struct report *r = with_meta(0);
	char *text;

	(void)state;
	add(r,
	    with_future(sample(0, "0.05", 0, "sleep", 20, 4000000000ULL, APP_STACK), handler, ""));
	add(r, with_future(sample(0, "0.05", 0, "sleep", 30, 0, APP_STACK), handler, ""));
	add(r, with_future(sample(1, "0.1", 0, "yield", 10, 0, "[]"), "\"task-type-3\"", ""));
	add(r, with_future(sample(1, "0.1", 0, "yield", 40, 0, "[]"), "null", ""));
	text = printed(r);
	/* Four samples drawn one by one: handler's variance 4/3 * (20^2 + 30^2 - 50^2/4) = 30^2,
	 * +-t(3) * 30 = 3.182 * 30; the unknown row's 4/3 * (40^2 - 40^2/4) = 40^2. */
	assert_contains(text,
			"   share  est. resumes     +-95%  est. idle s  samples  future\n"
			"   50.0%            50         95        4.000        2  "
			"app::handler::{{closure}}\n"
			"   40.0%            40        127        0.000        1  (unknown)\n"
			"   10.0%            10         32        0.000        1  task-type-3\n");
	free(text);
	report_free(r);
	/* The handler's two samples in one window (7) are one draw: 3/2 * (50^2 - 50^2/3) = 50^2,
	 * +-t(2) * 50 = 4.303 * 50; windows come out of order and are grouped all the same. */
	r = with_meta(0);
	add(r,
	    with_future(sample(0, "0.05", 0, "sleep", 20, 0, APP_STACK), handler, ",\"window\":7"));
	add(r, with_future(sample(1, "0.1", 0, "yield", 40, 0, "[]"), "null", ",\"window\":8"));
	add(r, with_future(sample(1, "0.1", 0, "yield", 10, 0, "[]"), "\"task-type-3\"",
			   ",\"window\":9"));
	add(r,
	    with_future(sample(0, "0.05", 0, "sleep", 30, 0, APP_STACK), handler, ",\"window\":7"));
	text = printed(r);
	assert_contains(text, "   50.0%            50        215        0.000        2  "
			      "app::handler::{{closure}}\n");
	free(text);
	report_free(r);
	/* Files written before "future" existed: no table. */
	r = with_meta(0);
	add(r, sample(0, "0.05", 0, "sleep", 20, 0, APP_STACK));
	text = printed(r);
	assert_null(strstr(text, "By task type"));
	free(text);
	report_free(r);
}

/* META with four windows and the count terms of one type counted 16 times in each window of
 * 4 ms (p = 0.004, z = 4000): every window alike, so only the counts' edges give the interval
 * a width, 0.25 / 0.004^2 = 15625 each; with `price`, the hit price's error moves each
 * epoch's estimate by 100 (one standard error), all four the same way. */
static char *counted_meta(bool edges, bool price)
{
	static char buf[sizeof(META) + 1024];
	size_t n = strlen(META) - 2; /* before the closing "}\n" */
	char cell[256];

	memcpy(buf, META, n);
	buf[n] = 0;
	strcat(buf, ",\n \"overhead\": {\"windows\": 4},\n \"count_terms\": [");
	for (int e = 101; e <= 104; e++) {
		snprintf(cell, sizeof(cell),
			 "%s{\"epoch\": %d, \"future\": \"app::tick::{{closure}}\", "
			 "\"windows_drawn\": 1, \"sum\": 4000, \"sum_sq\": 16000000%s%s}",
			 e > 101 ? ", " : "", e, edges ? ", \"edge_sq\": 15625" : "",
			 price ? ", \"price_se\": 100" : "");
		strcat(buf, cell);
	}
	strcat(buf, "]}\n");
	return buf;
}

static void test_counted_interval_edges(void **state)
{
	struct report *r;
	char *text;

	(void)state;
	/* Var = 4/3 x (4 x 4000^2 - 16000^2 / 4) + 4 x 15625 = 250^2: +-t(3) x 250. */
	r = with_meta_text(counted_meta(true, false), 0);
	text = printed(r);
	assert_contains(text,
			"  100.0%         16000        796             0        0.000        0"
			"  app::tick::{{closure}}\n");
	free(text);
	report_free(r);
	/* Files from before edge_sq: the windows' spread alone. */
	r = with_meta_text(counted_meta(false, false), 0);
	text = printed(r);
	assert_contains(text, "         16000          0");
	free(text);
	report_free(r);
	/* The price's part moves all four epochs together: (4 x 100)^2 = 400^2 more, so
	 * +-t(3) x sqrt(250^2 + 400^2). */
	r = with_meta_text(counted_meta(true, true), 0);
	text = printed(r);
	assert_contains(text, "         16000       1501");
	free(text);
	report_free(r);
	/* Samples of the type share its price error (400 of 16000): a stack of two samples of
	 * 8000 in windows 1 and 2 of 4 gets t(3) x sqrt(4/3 x (2 x 8000^2 - 16000^2 / 4) +
	 * (16000 x 0.025)^2) = 29422, against 29394 without. */
	r = with_meta_text(counted_meta(true, true), 0);
	add(r, with_future(sample(0, "0.001", 0, "sleep", 8000, 0, APP_STACK),
			   "\"app::tick::{{closure}}\"", ",\"window\":1"));
	add(r, with_future(sample(0, "0.001", 0, "sleep", 8000, 0, APP_STACK),
			   "\"app::tick::{{closure}}\"", ",\"window\":2"));
	text = printed(r);
	assert_contains(text, "        16000      29422");
	free(text);
	report_free(r);
}

static void test_runtime_only_stack_shows_leaf(void **state)
{
	struct report *r = report_new(0);
	char *text;

	(void)state;
	add(r, sample(0, "1", 0, "wake_by_ref", 1, 0,
		      "[{\"name\":\"tokio::sync::notify::Notified::poll\"},"
		      "{\"name\":\"std::rt::lang_start\"}]"));
	add(r, sample(0, "1", 0, "none", 1, 0,
		      "[{\"addr\":\"0x1\",\"name\":null,\"module\":\"/opt/lib/libfoo.so\"}]"));
	add(r, sample(0, "1", 0, "none", 1, 0, "[]"));
	text = printed(r);
	assert_contains(text, "at wake_by_ref\n        (only runtime frames; the innermost:)\n"
			      "        tokio::sync::notify::Notified::poll\n");
	assert_contains(text, "        [libfoo.so]\n");
	free(text);
	report_free(r);
}

static void test_stack_table_cap(void **state)
{
	struct report *r = with_meta(2);
	char stack[128], *text;

	(void)state;
	for (int i = 0; i < 5; i++) {
		snprintf(stack, sizeof(stack), "[{\"name\":\"app::f%d\"}]", i % 3);
		add(r, sample(0, "0.5", 0, "clone_waker", 2, 0, stack));
	}
	text = printed(r);
	/* f0 and f1 fill the table; both samples of f2 are "other". */
	assert_contains(text, "other: 1 samples (20.0% of resumes) in stacks past the 2-stack");
	free(text);
	report_free(r);
}

static void test_control_characters_neutralized(void **state)
{
	struct report *r = report_new(0);
	char *text;

	(void)state;
	add(r, sample(0, "1", 0, "none", 1, 0,
		      "[{\"name\":\"app::\\u001b]0;title\\u0007x\"},{\"name\":\"app::"
		      "\\u00c2\\u0085y\"}]"));
	text = printed(r);
	assert_null(strchr(text, '\033'));
	assert_null(strchr(text, '\007'));
	assert_contains(text, "app::?]0;title?x");
	free(text);
	report_free(r);
}

static void expect_meta_error(const char *json, const char *needle)
{
	struct report *r = report_new(0);
	char err[256] = "";

	assert_int_equal(report_parse_metadata(r, json, strlen(json), err, sizeof(err)), -1);
	if (!strstr(err, needle))
		fail_msg("for %.60s: '%s' not in '%s'", json, needle, err);
	/* Nothing half-read is printed. */
	free(printed(r));
	report_free(r);
}

/* META with the first occurrence of from replaced by to. */
static char *meta_with(const char *from, const char *to)
{
	static char buf[sizeof(META) + 256];
	const char *at = strstr(META, from);

	assert_non_null(at);
	snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(at - META), META, to, at + strlen(from));
	return buf;
}

static void test_workers_by_index(void **state)
{
	struct report *r = report_new(0);
	char meta[sizeof(META) + 256], err[256], *text;

	(void)state;
	/* Workers 9 and 2, listed in that order: samples still find theirs. */
	snprintf(meta, sizeof(meta), "%s", meta_with("\"worker\": 1,", "\"worker\": 2,"));
	memcpy(strstr(meta, "\"worker\": 0,"), "\"worker\": 9,", 12);
	if (report_parse_metadata(r, meta, strlen(meta), err, sizeof(err)))
		fail_msg("metadata: %s", err);
	add(r, sample(2, "1", 0, "none", 1, 0, "[]"));
	add(r, sample(9, "1", 0, "none", 1, 0, "[]"));
	add(r, sample(9, "1", 0, "none", 1, 0, "[]"));
	add(r, sample(4, "1", 0, "none", 1, 0, "[]"));
	text = printed(r);
	assert_contains(text, "  2       12       ?                thread                1");
	assert_contains(text, "  9       11       tokio-runtime-w  worker_run_arg        2");
	assert_contains(text, "1 samples name a worker that metadata.json does not list");
	/* Listed by index. */
	assert_true(strstr(text, "  2       12") < strstr(text, "  9       11"));
	free(text);
	report_free(r);
}

static void test_metadata_errors(void **state)
{
	(void)state;
	expect_meta_error("", "empty");
	expect_meta_error(" \n\t", "empty");
	expect_meta_error("[]", "the document is an array, expected an object");
	expect_meta_error("{\"tool\": \"other\"}", "not \"dial9-bpf\"");
	expect_meta_error("{\"tool\": 5}", "\"tool\" is an integer, expected a string");
	expect_meta_error("{\"tool\": \"dial9-bpf\"}", "missing \"sampler\"");
	expect_meta_error("{\"a\":\n1,,}", "line 2, column 3: invalid JSON");
	expect_meta_error("{\"a\": 1} x", "invalid JSON");
	expect_meta_error("{\"a\": 1}\n{}", "line 2, column 1: invalid JSON");
	expect_meta_error("{\"a\":\n\n[1,", "line 3: the JSON document ends early");
	expect_meta_error("{\"a\":\"\xff\"}", "invalid utf-8");
	expect_meta_error(meta_with("\"per_worker_hz\": 50", "\"per_worker_hz\": 0"),
			  "\"sampler.per_worker_hz\" is 0, outside 1..100000");
	expect_meta_error(meta_with("\"per_worker_hz\": 50", "\"per_worker_hz\": \"50\""),
			  "\"sampler.per_worker_hz\" is a string, expected an integer");
	expect_meta_error(meta_with("\"pid\": 4242", "\"pid\": -1"), "\"target.pid\" is -1");
	expect_meta_error(
	    meta_with("\"sampling_stopped_at_ns\": 104500000000", "\"sampling_stopped_at_ns\": 1"),
	    "\"sampling_stopped_at_ns\" is 1, outside 100500000000..");
	expect_meta_error(meta_with("\"selected\": 48", "\"selected\": 4800"),
			  "\"workers[0].epochs[1].selected\" is 4800, outside 0..1000");
	expect_meta_error(meta_with("\"probability\": 0.05", "\"probability\": 1e999"),
			  "\"workers[0].epochs[1].probability\" is inf");
	expect_meta_error(meta_with("\"capped\": false", "\"capped\": 0"),
			  "\"workers[0].epochs[0].capped\" is an integer, expected true or false");
	expect_meta_error(meta_with("\"epochs\": [", "\"epochs\": [1, "),
			  "\"workers[0].epochs[0]\" is an integer, expected an object");
	expect_meta_error(meta_with("\"polls\": 5000", "\"polls\": 99999999999999999999999"),
			  "\"counters.polls\" is beyond 64 bits");
	expect_meta_error(meta_with("\"workers\": [\n", "\"workers\": 3, \"w\": [\n"),
			  "\"workers\" is an integer, expected an array");
}

static void test_metadata_nul_and_depth(void **state)
{
	struct report *r = report_new(0);
	static const char nul[] = "{\n\"tool\"\0: 1}";
	char deep[256], err[256] = "";
	size_t n = 0;

	(void)state;
	assert_int_equal(report_parse_metadata(r, nul, sizeof(nul) - 1, err, sizeof(err)), -1);
	assert_string_equal(err, "line 2: binary data (a NUL byte at column 7)");
	for (int i = 0; i < 40; i++)
		deep[n++] = '[';
	deep[n] = 0;
	assert_int_equal(report_parse_metadata(r, deep, n, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "nesting too deep"));
	report_free(r);
}

static void expect_sample_error(const char *line, const char *needle)
{
	struct report *r = with_meta(0);
	char err[256] = "";

	assert_int_equal(report_parse_sample(r, line, strlen(line), err, sizeof(err)), -1);
	if (!strstr(err, needle))
		fail_msg("for %.80s: '%s' not in '%s'", line, needle, err);
	report_free(r);
}

static void test_sample_errors(void **state)
{
	char line[8192 + 64];

	(void)state;
	expect_sample_error("", "empty line");
	expect_sample_error("12345", "not a JSON object");
	expect_sample_error("[1, 2", "not a JSON object");
	expect_sample_error("[]", "the line is an array, expected a JSON object");
	expect_sample_error("{\"worker\": 0}}", "invalid JSON");
	expect_sample_error("{'worker': 0,}", "invalid JSON");
	expect_sample_error("{}", "missing \"worker\"");
	expect_sample_error(sample(0, "0", 0, "none", 1, 0, "[]"),
			    "\"inclusion_probability\" is 0, outside (0, 1]");
	expect_sample_error(sample(0, "1.5", 0, "none", 1, 0, "[]"),
			    "\"inclusion_probability\" is 1.5");
	expect_sample_error(sample(0, "NaN", 0, "none", 1, 0, "[]"),
			    "\"inclusion_probability\" is nan");
	expect_sample_error(sample(0, "\"0.5\"", 0, "none", 1, 0, "[]"),
			    "\"inclusion_probability\" is a string, expected a number");
	expect_sample_error(sample(-2, "1", 0, "none", 1, 0, "[]"), "\"worker\" is -2");
	expect_sample_error(sample(0, "1", 0, "none", 1ULL << 60, 0, "[]"),
			    "\"weight_count\" is 1152921504606846976, outside");
	expect_sample_error(sample(0, "1", 0, "none", 1, 0, "{}"),
			    "\"stack\" is an object, expected an array");
	expect_sample_error(sample(0, "1", 0, "none", 1, 0, "[{\"name\":5}]"),
			    "\"stack[0].name\" is an integer, expected a string");
	expect_sample_error(sample(0, "1", 0, "none", 1, 0, "[{\"module\":\"x\"}]"),
			    "missing \"stack[0].name\"");
	expect_sample_error(sample(0, "1", 0, "none", 1, 0, "[null]"),
			    "\"stack[0]\" is null, expected an object");
	snprintf(line, sizeof(line), "%s x", sample(0, "1", 0, "none", 1, 0, "[]"));
	expect_sample_error(line, "invalid JSON");
	snprintf(line, sizeof(line), "%s", sample(0, "1", 0, "none", 1, 0, "[]"));
	strstr(line, "\"capped\":false")[10] = '0';
	expect_sample_error(line, "invalid JSON");
	snprintf(line, sizeof(line), "%s", sample(0, "1", 0, "none", 1, 0, "[]"));
	memcpy(strstr(line, "\"capped\":false"), "\"capped\":null ", 14);
	expect_sample_error(line, "\"capped\" is null, expected true or false");
	snprintf(line, sizeof(line), "%s",
		 sample(0, "1", 0,
			"a_park_point_name_that_is_far_too_long_to_be_one_of_ours_"
			"really_much_too_long",
			1, 0, "[]"));
	expect_sample_error(line, "\"park_point\" is longer than 64 bytes");
	snprintf(line, sizeof(line), "%s", sample(0, "1", 0, "none", 10, 0, "[]"));
	memcpy(strstr(line, "\"weight_count\":10,"), "\"weight_count\":-1,", 18);
	expect_sample_error(line, "\"weight_count\" is negative");
}

static void test_sample_binary_and_huge(void **state)
{
	struct report *r = with_meta(0);
	static const char nul[] = "{\"worker\"\0:0}";
	char err[256] = "";
	char *big;

	(void)state;
	assert_int_equal(report_parse_sample(r, nul, sizeof(nul) - 1, err, sizeof(err)), -1);
	assert_string_equal(err, "binary data (a NUL byte at column 10)");
	big = malloc(REPORT_LINE_MAX + 2);
	assert_non_null(big);
	memset(big, ' ', REPORT_LINE_MAX + 1);
	big[0] = '{';
	assert_int_equal(report_parse_sample(r, big, REPORT_LINE_MAX + 1, err, sizeof(err)), -1);
	assert_string_equal(err, "longer than 1 MiB");
	free(big);
	report_free(r);
}

static void test_sample_incomplete(void **state)
{
	struct report *r = with_meta(0);
	const char *line = sample(0, "1", 0, "none", 1, 0, APP_STACK);
	char err[256];

	(void)state;
	for (size_t n = 1; n < strlen(line); n += 7)
		assert_int_equal(report_parse_sample(r, line, n, err, sizeof(err)),
				 REPORT_INCOMPLETE);
	report_free(r);
}

/* report_read_samples over an in-memory file. */
static int read_text(struct report *r, const char *text, size_t len, char *err, size_t errlen)
{
	FILE *f = fmemopen((void *)text, len, "r");
	int rc;

	assert_non_null(f);
	rc = report_read_samples(r, f, err, errlen);
	fclose(f);
	return rc;
}

static void test_read_samples(void **state)
{
	char text[32768], err[256] = "";
	struct report *r;
	char *out;
	size_t n;

	(void)state;
	/* Blank lines and CRLF are accepted. */
	n = (size_t)snprintf(text, sizeof(text), "%s\r\n\n",
			     sample(0, "0.5", 0, "none", 2, 0, APP_STACK));
	n += (size_t)snprintf(text + n, sizeof(text) - n, "%s\n",
			      sample(1, "0.5", 0, "none", 2, 0, APP_STACK));
	r = with_meta(0);
	assert_int_equal(read_text(r, text, n, err, sizeof(err)), 0);
	out = printed(r);
	assert_contains(out, "2 samples (0 without a stack");
	free(out);
	report_free(r);

	/* The last line cut short, without a newline: skipped with a warning. */
	r = with_meta(0);
	assert_int_equal(read_text(r, text, n - 40, err, sizeof(err)), 1);
	assert_string_equal(err,
			    "line 3: the JSON object ends early (a truncated line): skipped it");
	out = printed(r);
	assert_contains(out, "warning: samples.jsonl line 3 was cut short and skipped");
	free(out);
	report_free(r);

	/* A line cut short in the middle is damage. */
	memmove(text + 100, text + n - 300, 300);
	r = with_meta(0);
	assert_int_equal(read_text(r, text, 400, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "line 1: invalid JSON"));
	report_free(r);

	/* The last line complete but without its newline is fine. */
	n = (size_t)snprintf(text, sizeof(text), "%s", sample(0, "1", 0, "none", 1, 0, "[]"));
	r = with_meta(0);
	assert_int_equal(read_text(r, text, n, err, sizeof(err)), 0);
	report_free(r);

	/* Garbage as the last line is not excused. */
	n = (size_t)snprintf(text, sizeof(text), "%s\n[1,", sample(0, "1", 0, "none", 1, 0, "[]"));
	r = with_meta(0);
	assert_int_equal(read_text(r, text, n, err, sizeof(err)), -1);
	assert_string_equal(err, "line 2: not a JSON object");
	report_free(r);

	/* An empty file reads as no samples. */
	r = with_meta(0);
	assert_int_equal(read_text(r, "\n", 1, err, sizeof(err)), 0);
	report_free(r);
}

static void test_read_samples_long_line(void **state)
{
	size_t n = 2 * REPORT_LINE_MAX + 100;
	char *text = malloc(n), err[256] = "";
	struct report *r = with_meta(0);
	int len;

	(void)state;
	assert_non_null(text);
	len = snprintf(text, n, "%s\n", sample(0, "1", 0, "none", 1, 0, "[]"));
	memset(text + len, 'x', n - (size_t)len);
	assert_int_equal(read_text(r, text, n, err, sizeof(err)), -1);
	assert_string_equal(err, "line 2: longer than 1 MiB");
	report_free(r);
	free(text);
}

/* report_main on a directory: exit codes only (its output goes to stdout and stderr). */
static int run_main(const char *dir)
{
	int out = dup(1), errfd = dup(2), null = open("/dev/null", O_WRONLY);
	int rc;

	fflush(stdout);
	dup2(null, 1);
	dup2(null, 2);
	rc = report_main(dir);
	fflush(stdout);
	dup2(out, 1);
	dup2(errfd, 2);
	close(out);
	close(errfd);
	close(null);
	return rc;
}

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_report_main(void **state)
{
	char dir[] = "/tmp/d9-test-report-XXXXXX", path[512];

	(void)state;
	assert_non_null(mkdtemp(dir));
	assert_int_equal(run_main(dir), 1); /* neither file */
	write_file(dir, "metadata.json", META);
	assert_int_equal(run_main(dir), 1); /* no samples.jsonl */
	write_file(dir, "samples.jsonl", "");
	assert_int_equal(run_main(dir), 1); /* empty, but 3 were written */
	write_file(dir, "samples.jsonl", sample(0, "1", 0, "none", 1, 0, APP_STACK));
	assert_int_equal(run_main(dir), 0);
	write_file(dir, "metadata.json", meta_with("\"written\": 3", "\"written\": 0"));
	write_file(dir, "samples.jsonl", "");
	assert_int_equal(run_main(dir), 0); /* a run that sampled nothing */
	snprintf(path, sizeof(path), "%s/metadata.json", dir);
	assert_int_equal(run_main(path), 1); /* not a directory */
	unlink(path);
	snprintf(path, sizeof(path), "%s/samples.jsonl", dir);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_metadata_summary),
	    cmocka_unit_test(test_stacks_grouped_and_weighted),
	    cmocka_unit_test(test_by_task_type),
	    cmocka_unit_test(test_counted_interval_edges),
	    cmocka_unit_test(test_runtime_only_stack_shows_leaf),
	    cmocka_unit_test(test_stack_table_cap),
	    cmocka_unit_test(test_workers_by_index),
	    cmocka_unit_test(test_control_characters_neutralized),
	    cmocka_unit_test(test_metadata_errors),
	    cmocka_unit_test(test_metadata_nul_and_depth),
	    cmocka_unit_test(test_sample_errors),
	    cmocka_unit_test(test_sample_binary_and_huge),
	    cmocka_unit_test(test_sample_incomplete),
	    cmocka_unit_test(test_read_samples),
	    cmocka_unit_test(test_read_samples_long_line),
	    cmocka_unit_test(test_report_main),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
