// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* samples.jsonl from synthetic task samples: exact lines, escapes, and the per-pointer cache
 * of escaped frame names giving the same text as escaping each time; the stack_table layout
 * read back by the report's reader equals the inline layout. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <json-c/json.h>

#include "report.h"
#include "report_int.h"
#include "test_out.h"
#include "writer.h"

/* samples.jsonl of the inline layout, or (stacks not NULL) of the stack_table layout with its
 * stacks.jsonl in *stacks. */
static char *run_layout(const struct task_sample *s, size_t n, char **stacks)
{
	char dir[] = "/tmp/d9-jsonl-XXXXXX", path[256];
	struct run_context rc = {.started_ns = 1, .stopped_ns = 2};
	struct writer w = {};
	char *text;

	assert_non_null(mkdtemp(dir));
	assert_int_equal(
	    (stacks ? jsonl_writer_open : jsonl_inline_writer_open)(test_out_dir(dir), &w), 0);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(w.sample(&w, &s[i]), 0);
	assert_int_equal(w.finish(&w, &rc), 0);
	snprintf(path, sizeof(path), "%s/samples.jsonl", dir);
	text = read_all(path);
	unlink(path);
	snprintf(path, sizeof(path), "%s/stacks.jsonl", dir);
	if (stacks)
		*stacks = read_all(path);
	else
		assert_int_equal(access(path, F_OK), -1);
	unlink(path);
	assert_int_equal(rmdir(dir), 0);
	return text;
}

static char *run_jsonl(const struct task_sample *s, size_t n)
{
	return run_layout(s, n, NULL);
}

static const struct task_sample base = {
    .timestamp_ns = 1000,
    .pid = 7,
    .tid = 8,
    .ns_pid = 1,
    .ns_tid = 2,
    .worker = 0,
    .worker_key = 0xabc,
    .runtime = 1,
    .runtime_key = 0x5000,
    .task_id_ok = true,
    .task_id = 42,
    .prob = 0.25,
    .epoch = 5,
    .idle_start_ns = 100,
    .idle_end_ns = 300,
    .poll_end_ns = 350,
    .idle_known = true,
    .outcome = "pending",
    .park_point = "sleep",
    .park_decided = "returned_pending",
    .also_pending = 1,
    .weight_count = 4,
    .weight_idle_ns = 800,
};

static void test_line(void **state)
{
	struct task_frame fr[] = {
	    {0x10, "a::b", "/app", 0x10, true, false},
	    {0x7f01, NULL, NULL, 0, false, false},
	};
	struct task_sample s = base;
	char *text;

	(void)state;
	s.nframes = 2;
	s.frames = fr;
	text = run_jsonl(&s, 1);
	assert_string_equal(
	    text,
	    "{\"timestamp_ns\":1000,\"pid\":7,\"tid\":8,\"ns_pid\":1,\"ns_tid\":2,\"worker\":0,"
	    "\"worker_key\":\"0xabc\",\"runtime\":1,\"runtime_key\":\"0x5000\",\"task_id\":42,"
	    "\"task_id_ok\":true,"
	    "\"inclusion_probability\":0.25,\"epoch\":5,\"idle_start_ns\":100,"
	    "\"idle_end_ns\":300,\"idle_ns\":200,\"idle_known\":true,\"poll_duration_ns\":50,"
	    "\"capped\":false,\"outcome\":\"pending\",\"park_point\":\"sleep\","
	    "\"park_decided\":\"returned_pending\",\"also_pending\":1,"
	    "\"weight_count\":4,\"weight_idle_ns\":800,\"weight_cpu_ns\":0,\"kind\":\"park\","
	    "\"future\":null,\"stack\":["
	    "{\"addr\":\"0x10\",\"name\":\"a::b\",\"module\":\"/app\",\"inlined\":true},"
	    "{\"addr\":\"0x7f01\",\"name\":null,\"module\":null}]}\n");
	free(text);
}

/* A poll whose end was not observed (poll_end_ns 0): no poll_duration_ns at all, never the
 * wrapped difference. */
static void test_poll_end_unknown(void **state)
{
	struct task_sample s = base;
	char *text;

	(void)state;
	s.poll_end_ns = 0;
	text = run_jsonl(&s, 1);
	assert_null(strstr(text, "poll_duration_ns"));
	assert_non_null(strstr(text, "\"idle_known\":true,\"capped\":false,"));
	free(text);
}

/* Names that need escapes, seen again by the same pointer and by another pointer with the
 * same text, and a buffer reused with new text at a new pointer: every frame must read as
 * its own escaped text. */
static void test_escapes_cached_by_pointer(void **state)
{
	static const char odd[] = "<T as \"q\">::f\\g\n\t\x01";
	static const char odd_esc[] = "\"<T as \\\"q\\\">::f\\\\g\\n\\t\\u0001\"";
	char *copy = strdup(odd), *other = strdup("plain::name");
	struct task_frame f1[] = {{1, odd, "/a b", 1, false, false},
				  {2, copy, "/a b", 2, false, false}};
	struct task_frame f2[] = {{3, other, "/a b", 3, false, false},
				  {4, odd, "/a b", 4, false, false}};
	struct task_sample s[3] = {base, base, base};
	char expect[1024], *text, *line;

	(void)state;
	s[0].nframes = s[1].nframes = 2;
	s[0].frames = f1;
	s[1].frames = f2;
	s[2].nframes = 2;
	s[2].frames = f1;
	text = run_jsonl(s, 3);
	line = text;
	for (int i = 0; i < 3; i++) {
		char *nl = strchr(line, '\n'), *st;

		assert_non_null(nl);
		*nl = 0;
		st = strstr(line, "\"stack\":[");
		assert_non_null(st);
		if (i == 1)
			snprintf(expect, sizeof(expect),
				 "\"stack\":[{\"addr\":\"0x3\",\"name\":\"plain::name\","
				 "\"module\":\"/a b\"},{\"addr\":\"0x4\",\"name\":%s,"
				 "\"module\":\"/a b\"}]}",
				 odd_esc);
		else
			snprintf(expect, sizeof(expect),
				 "\"stack\":[{\"addr\":\"0x1\",\"name\":%s,\"module\":\"/a b\"},"
				 "{\"addr\":\"0x2\",\"name\":%s,\"module\":\"/a b\"}]}",
				 odd_esc, odd_esc);
		assert_string_equal(st, expect);
		line = nl + 1;
	}
	assert_string_equal(line, "");
	free(text);
	free(copy);
	free(other);
}

/* Many distinct names: the cache grows past its first sizes and keeps each text apart. */
static void test_many_names(void **state)
{
	enum { N = 3000 };
	static char names[N][24];
	struct task_frame fr[N];
	struct task_sample s = base;
	char *text, *p, want[64];

	(void)state;
	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "f%d\"x", i);
		fr[i] = (struct task_frame){(uint64_t)i + 1, names[i], "/m", 0, false, false};
	}
	s.nframes = N;
	s.frames = fr;
	text = run_jsonl((struct task_sample[]){s, s}, 2);
	p = text;
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < N; i++) {
			snprintf(want, sizeof(want), "\"name\":\"f%d\\\"x\",", i);
			p = strstr(p, want);
			assert_non_null(p);
		}
	}
	free(text);
}

/* Samples of every shape in both layouts: each row, expanded by the report's reader with the
 * stack table, is the inline layout's object; ids are 0, 1, ... in first-seen order. */
static void test_table_equals_inline(void **state)
{
	struct task_frame fa[] = {{0x10, "a::b", "/app", 0x10, true, false},
				  {0x7f01, NULL, NULL, 0, false, false},
				  {0, "task: F", NULL, 0, false, true}};
	struct task_frame fb[] = {{0x20, "c\"d", "/app", 0x20, false, false}};
	struct task_sample s[6];
	static const uint64_t want_ids[] = {0, 1, 0, 2, 0, 3};
	char *stacks, *rows, *inl, *row, *line, *rsave, *isave, err[256];
	struct report *r = report_new(0);
	FILE *f;

	(void)state;
	for (int i = 0; i < 6; i++) {
		s[i] = base;
		s[i].timestamp_ns += (uint64_t)i;
		s[i].frames = i % 2 ? fb : fa;
		s[i].nframes = i % 2 ? 1 : 3;
		s[i].future = i % 2 ? NULL : "F";
	}
	s[2].runtime = -1; /* same stack: the runtime is the sample's */
	s[2].task_id_ok = false;
	s[3].outcome = "complete"; /* another record for the same frames */
	s[4].poll_end_ns = 0;	   /* poll_duration_ns absent */
	s[4].window = 9;
	s[5].stack_error = -14;
	s[5].nframes = 0;
	rows = run_layout(s, 6, &stacks);
	inl = run_jsonl(s, 6);
	f = fmemopen(stacks, strlen(stacks), "r");
	assert_int_equal(report_read_stacks(r, f, err, sizeof(err)), 0);
	fclose(f);
	assert_int_equal(r->stack_recs.n, 4);
	assert_int_equal(r->frame_recs.n, 3);
	row = strtok_r(rows, "\n", &rsave);
	line = strtok_r(inl, "\n", &isave);
	for (int i = 0; i < 6;
	     i++, row = strtok_r(NULL, "\n", &rsave), line = strtok_r(NULL, "\n", &isave)) {
		json_object *jr = json_tokener_parse(row), *ji = json_tokener_parse(line), *got;
		struct perr e = {err, sizeof(err)};

		assert_non_null(jr);
		assert_non_null(ji);
		assert_int_equal(json_object_get_int64(json_object_array_get_idx(
				     jr, json_object_array_length(jr) - 1)),
				 want_ids[i]);
		got = rpt_expand_row(r, jr, &e);
		assert_non_null(got);
		if (!json_object_equal(got, ji))
			fail_msg("sample %d: %s\nvs inline %s", i, json_object_to_json_string(got),
				 line);
		json_object_put(got);
		json_object_put(jr);
		json_object_put(ji);
	}
	assert_null(row);
	report_free(r);
	free(stacks);
	free(rows);
	free(inl);
}

/* Past JSONL_STACK_INDEX_MAX distinct stacks the index starts afresh: ids keep counting, and
 * the first stack, met again, gets a new id and a second record. */
static void test_index_starts_afresh(void **state)
{
	enum { N = JSONL_STACK_INDEX_MAX + 1 };
	struct task_sample *s = calloc(N + 1, sizeof(*s));
	struct task_frame *fr = calloc(N, sizeof(*fr));
	char *stacks, *rows, *last;
	size_t nrec = 0;

	(void)state;
	assert_non_null(s);
	assert_non_null(fr);
	for (size_t i = 0; i <= N; i++) {
		s[i] = base;
		s[i].nframes = 1;
		s[i].frames = &fr[i % N];
		if (i < N)
			fr[i] = (struct task_frame){.addr = i + 1, .name = "f"};
	}
	rows = run_layout(s, N + 1, &stacks);
	for (char *p = stacks; (p = strchr(p, '\n')); p++)
		nrec++;
	/* The header, N frames and N stacks, the first frame and stack again. */
	assert_int_equal(nrec, 1 + 2 * N + 2);
	last = strrchr(rows, '[');
	assert_non_null(strstr(last, ",131073]\n"));
	assert_non_null(
	    strstr(stacks, "\n{\"frame\":131073,\"addr\":\"0x1\",\"name\":\"f\",\"module\":null}\n"
			   "{\"id\":131073,\"outcome\":\"pending\",\"park_point\":\"sleep\","
			   "\"park_decided\":\"returned_pending\",\"future\":null,"
			   "\"frames\":[131073]}\n"));
	free(stacks);
	free(rows);
	free(s);
	free(fr);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_line),
	    cmocka_unit_test(test_poll_end_unknown),
	    cmocka_unit_test(test_escapes_cached_by_pointer),
	    cmocka_unit_test(test_many_names),
	    cmocka_unit_test(test_table_equals_inline),
	    cmocka_unit_test(test_index_starts_afresh),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
