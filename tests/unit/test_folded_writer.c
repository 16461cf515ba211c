// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Stack aggregation, stacks.folded and flamegraph.svg from synthetic task samples. */
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

#include "stack_agg.h"
#include "test_out.h"
#include "writer.h"

/* Leaf-first frames, as the collector gives them. */
static struct task_frame fr_leaf = {0x1000, "tokio::runtime::task::waker::clone_waker", "/app",
				    0x1000, false, false};
static struct task_frame fr_cpu = {0x2005, "app::cpu_task::{{closure}}", "/app", 0x2005, false, false};
static struct task_frame fr_timer = {0x2105, "app::timer_task::{closure#0}", "/app", 0x2105, false, false};
static struct task_frame fr_semi = {0x3005, "<[u8; 4] as app::Foo>::bar\nx", "/app", 0x3005, false, false};
static struct task_frame fr_libc = {0x7f0000001234, NULL, "/usr/lib/libc.so.6", 0x1234, false, false};
static struct task_frame fr_anon = {0x5000, NULL, NULL, 0, false, false};

struct samples {
	struct task_frame a[4], b[4], c[3];
	struct task_sample s[5];
};

static void make_samples(struct samples *x)
{
	memcpy(x->a, (struct task_frame[]){fr_leaf, fr_cpu, fr_libc, fr_anon}, sizeof(x->a));
	memcpy(x->b, (struct task_frame[]){fr_leaf, fr_timer, fr_libc, fr_anon}, sizeof(x->b));
	memcpy(x->c, (struct task_frame[]){fr_semi, fr_cpu, fr_libc}, sizeof(x->c));
	x->s[0] = (struct task_sample){.weight_count = 10, .nframes = 4, .frames = x->a};
	x->s[1] = (struct task_sample){.weight_count = 5, .nframes = 4, .frames = x->a};
	x->s[2] = (struct task_sample){.weight_count = 7, .nframes = 4, .frames = x->b};
	x->s[3] = (struct task_sample){.weight_count = 3, .nframes = 3, .frames = x->c};
	x->s[4] = (struct task_sample){.weight_count = 2, .stack_error = -EFAULT};
}

static char *run_writer(int (*open)(const struct out_dir *, struct writer *), const char *file,
			const struct task_sample *s, size_t n)
{
	char dir[] = "/tmp/d9-folded-XXXXXX", path[256];
	struct run_context rc = {.started_ns = 1, .stopped_ns = 2000000001};
	struct writer w = {};
	char *text;

	assert_non_null(mkdtemp(dir));
	assert_int_equal(open(test_out_dir(dir), &w), 0);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(w.sample(&w, &s[i]), 0);
	snprintf(path, sizeof(path), "%s/%s.tmp", dir, file);
	assert_int_equal(access(path, F_OK), 0);
	assert_int_equal(w.finish(&w, &rc), 0);
	assert_int_equal(access(path, F_OK), -1);
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	text = read_all(path);
	unlink(path);
	assert_int_equal(rmdir(dir), 0);
	return text;
}

static void test_folded_aggregates(void **state)
{
	struct samples x;
	char *text;

	(void)state;
	make_samples(&x);
	text = run_writer(folded_writer_open, "stacks.folded", x.s, 5);
	/* Root first, one line per distinct stack, sorted, weights summed; unknown frames named
	 * by module and offset; ';' and newlines never reach the output. */
	assert_string_equal(
	    text, "[libc.so.6+0x1234];app::cpu_task::{{closure}};<[u8, 4] as app::Foo>::bar x 3\n"
		  "[no stack: fault reading it] 2\n"
		  "[unknown];[libc.so.6+0x1234];app::cpu_task::{{closure}};"
		  "tokio::runtime::task::waker::clone_waker 15\n"
		  "[unknown];[libc.so.6+0x1234];app::timer_task::{closure#0};"
		  "tokio::runtime::task::waker::clone_waker 7\n");
	free(text);
}

/* The time view: cpu samples under "running" by weight_cpu_ns, park samples under "waiting" by
 * weight_idle_ns; the resume view leaves the cpu samples out. */
static void test_folded_time_view(void **state)
{
	struct task_frame a[2] = {fr_leaf, fr_cpu}, b[1] = {fr_timer};
	struct task_sample s[3] = {
	    {.on_cpu = true, .weight_cpu_ns = 5000000, .nframes = 2, .frames = a},
	    {.on_cpu = true, .weight_cpu_ns = 5000000, .nframes = 2, .frames = a},
	    {.weight_count = 4, .weight_idle_ns = 700, .nframes = 1, .frames = b},
	};
	char *text;

	(void)state;
	text = run_writer(folded_time_writer_open, "stacks-time.folded", s, 3);
	assert_string_equal(text,
			    "running;app::cpu_task::{{closure}};"
			    "tokio::runtime::task::waker::clone_waker 10000000\n"
			    "waiting;app::timer_task::{closure#0} 700\n");
	free(text);
	text = run_writer(folded_writer_open, "stacks.folded", s, 3);
	assert_string_equal(text, "app::timer_task::{closure#0} 4\n");
	free(text);
}

static void test_folded_every_line_parses(void **state)
{
	struct samples x;
	char *text, *line, *save = NULL;
	unsigned long long sum = 0;

	(void)state;
	make_samples(&x);
	text = run_writer(folded_writer_open, "stacks.folded", x.s, 5);
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *sp = strrchr(line, ' '), *end;

		assert_non_null(sp);
		sum += strtoull(sp + 1, &end, 10);
		assert_true(*end == 0 && end > sp + 1);
	}
	assert_int_equal(sum, 10 + 5 + 7 + 3 + 2);
	free(text);
}

static void test_folded_empty_and_weightless(void **state)
{
	struct task_frame fr[] = {fr_leaf};
	struct task_sample s = {.weight_count = 0, .nframes = 1, .frames = fr};
	char *text;

	(void)state;
	text = run_writer(folded_writer_open, "stacks.folded", &s, 1);
	assert_string_equal(text, "");
	free(text);
	text = run_writer(folded_writer_open, "stacks.folded", NULL, 0);
	assert_string_equal(text, "");
	free(text);
}

static void test_folded_abort_removes(void **state)
{
	char dir[] = "/tmp/d9-folded-XXXXXX";
	const struct out_dir *od;
	struct samples x;
	struct writer w = {};

	(void)state;
	make_samples(&x);
	assert_non_null(mkdtemp(dir));
	od = test_out_dir(dir);
	assert_int_equal(folded_writer_open(od, &w), 0);
	assert_int_equal(w.sample(&w, &x.s[0]), 0);
	w.abort(&w);
	assert_int_equal(rmdir(dir), 0);
	assert_int_equal(flamegraph_writer_open(od, &w), -ENOENT);
}

/* Memory follows distinct stacks: a million samples over three stacks make three paths. */
static void test_agg_bounded(void **state)
{
	struct stack_agg a;
	struct samples x;
	size_t nodes;

	(void)state;
	make_samples(&x);
	assert_int_equal(stack_agg_init(&a), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(stack_agg_add_sample(&a, &x.s[i]), 0);
	nodes = a.nnodes;
	for (int i = 0; i < 1000000; i++)
		assert_int_equal(stack_agg_add_sample(&a, &x.s[i % 4]), 0);
	assert_int_equal(a.nnodes, nodes);
	assert_int_equal(a.names.n, 1 + 6);
	assert_int_equal(a.nsamples, 1000004);
	assert_int_equal(stack_agg_sort(&a), 0); /* sums the totals */
	assert_int_equal(a.nodes[0].total, (10 + 5 + 7 + 3) * 250001ULL);
	stack_agg_free(&a);
}

/* Adds s to a the slow way: display names built and interned one by one, then the trie walk,
 * which is what the caches of stack_agg_add_sample() stand in for. */
static void add_uncached(struct stack_agg *a, const struct task_sample *s)
{
	uint32_t names[D9_AGG_MAX_DEPTH];
	size_t n = s->nframes < D9_AGG_MAX_DEPTH ? s->nframes : D9_AGG_MAX_DEPTH;
	char *buf = NULL;
	size_t cap = 0;

	a->nsamples++;
	if (!s->weight_count)
		return;
	if (!n) {
		const char *m = stack_missing_name(s->stack_error);

		assert_int_equal(intern_id(&a->names, m, strlen(m), &names[0]), 0);
		assert_int_equal(stack_agg_add(a, names, 1, s->weight_count), 0);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		int len = stack_frame_name(&s->frames[n - 1 - i], &buf, &cap);

		assert_true(len >= 0);
		assert_int_equal(intern_id(&a->names, buf, (size_t)len, &names[i]), 0);
	}
	free(buf);
	assert_int_equal(stack_agg_add(a, names, n, s->weight_count), 0);
}

static void assert_same_tries(struct stack_agg *x, struct stack_agg *y)
{
	assert_int_equal(stack_agg_sort(x), 0);
	assert_int_equal(stack_agg_sort(y), 0);
	assert_int_equal(x->nnodes, y->nnodes);
	assert_int_equal(x->nsamples, y->nsamples);
	for (size_t i = 0; i < x->nnodes; i++) {
		assert_string_equal(stack_node_name(x, (uint32_t)i),
				    stack_node_name(y, (uint32_t)i));
		assert_int_equal(x->nodes[i].parent, y->nodes[i].parent);
		assert_int_equal(x->nodes[i].self, y->nodes[i].self);
		assert_int_equal(x->nodes[i].total, y->nodes[i].total);
	}
}

/* The frame and stack caches change nothing: equal text at other addresses, names that only
 * differ by ';', unnamed frames told apart by offset, stacks deeper than the trie keeps, and
 * sorting midway (weights gathered in the cache are moved into the trie, once). */
static void test_agg_caches_match_walk(void **state)
{
	static const char *const texts[] = {"a::f", "a;f", "a,f", "b::g\x01", "c::h", "a::f"};
	char *names[6];
	const char *mods[] = {"/lib/libc.so.6", "/lib/x;y.so", NULL};
	struct task_frame pool[40], stacks[64][300];
	size_t depth[64];
	struct stack_agg x, y;
	uint64_t r = 12345;

	(void)state;
	for (int i = 0; i < 6; i++)
		names[i] = strdup(texts[i]); /* "a::f" twice, at two addresses */
	for (int i = 0; i < 40; i++) {
		pool[i] = (struct task_frame){.addr = 0x1000 + (uint64_t)i};
		if (i < 24) {
			pool[i].name = names[i % 6];
			pool[i].module = mods[i % 3];
		} else {
			pool[i].module = mods[i % 3];
			pool[i].file_offset = (uint64_t)(i % 5) * 0x10;
		}
	}
	for (int k = 0; k < 64; k++) {
		depth[k] = k == 0 ? 300 : k == 1 ? 0 : 1 + (size_t)k % 9;
		for (size_t j = 0; j < depth[k]; j++) {
			r = r * 6364136223846793005ULL + 1442695040888963407ULL;
			stacks[k][j] = pool[(r >> 33) % 40];
		}
	}
	/* Stacks that differ only in the offset of an unnamed frame (same module). */
	stacks[2][0] = stacks[4][0] = pool[24];
	stacks[3][0] = stacks[5][0] = pool[27];
	stacks[4][1] = stacks[5][1] = pool[0];
	depth[2] = depth[3] = 1;
	depth[4] = depth[5] = 2;
	assert_int_equal(stack_agg_init(&x), 0);
	assert_int_equal(stack_agg_init(&y), 0);
	for (int i = 0; i < 20000; i++) {
		int k = (int)((uint64_t)i * 2654435761u % 64);
		struct task_sample s = {.weight_count = (uint64_t)(i % 7),
					.stack_error = i % 3 ? 0 : -EFAULT,
					.nframes = depth[k],
					.frames = stacks[k]};

		assert_int_equal(stack_agg_add_sample(&x, &s), 0);
		add_uncached(&y, &s);
		if (i == 10000)
			assert_same_tries(&x, &y);
	}
	assert_same_tries(&x, &y);
	assert_same_tries(&x, &y);
	stack_agg_free(&x);
	stack_agg_free(&y);
	for (int i = 0; i < 6; i++)
		free(names[i]);
}

static void test_intern_and_index(void **state)
{
	struct intern t = {};
	struct u64_index m = {};
	uint32_t id;
	bool added;
	char buf[32];

	(void)state;
	for (int i = 0; i < 5000; i++) {
		snprintf(buf, sizeof(buf), "s%d", i);
		assert_int_equal(intern_id(&t, buf, strlen(buf), &id), 0);
		assert_int_equal(id, i);
		assert_int_equal(u64_index_id(&m, (uint64_t)i * 0x1000, &id, &added), 0);
		assert_true(added);
		assert_int_equal(id, i);
	}
	assert_int_equal(intern_id(&t, "s4321", 5, &id), 0);
	assert_int_equal(id, 4321);
	assert_int_equal(intern_id(&t, "s43210", 4, &id), 0); /* "s432" */
	assert_int_equal(id, 432);
	assert_string_equal(intern_str(&t, 17), "s17");
	assert_int_equal(u64_index_id(&m, 77 * 0x1000, &id, &added), 0);
	assert_false(added);
	assert_int_equal(id, 77);
	intern_free(&t);
	u64_index_free(&m);
}

/* The fill of the first frame whose title starts with name. */
static void fill_of(const char *svg, const char *name, int rgb[3])
{
	char key[256];
	const char *p;

	snprintf(key, sizeof(key), "<title>%s (", name);
	p = strstr(svg, key);
	assert_non_null(p);
	p = strstr(p, "fill=\"rgb(");
	assert_non_null(p);
	assert_int_equal(sscanf(p, "fill=\"rgb(%d,%d,%d)", &rgb[0], &rgb[1], &rgb[2]), 3);
}

static void test_flamegraph_svg(void **state)
{
	struct task_frame bad[] = {{0x1, "bad\xff\xfe<utf8>&", "/app", 1, false, false}};
	struct samples x;
	struct task_sample s[6];
	char *svg;
	int rgb[3];

	(void)state;
	make_samples(&x);
	memcpy(s, x.s, sizeof(x.s));
	s[5] = (struct task_sample){.weight_count = 1, .nframes = 1, .frames = bad};
	svg = run_writer(flamegraph_writer_open, "flamegraph.svg", s, 6);
	assert_non_null(strstr(svg, "<?xml"));
	assert_non_null(strstr(svg, "</svg>\n"));
	assert_non_null(strstr(svg, "<![CDATA["));
	/* Names are escaped, broken UTF-8 replaced. */
	assert_non_null(strstr(svg, "<title>&lt;[u8, 4] as app::Foo&gt;::bar x (3 resumes"));
	assert_non_null(strstr(svg, "<title>bad??&lt;utf8&gt;&amp; (1 resumes"));
	assert_null(strstr(svg, "\xff"));
	/* Totals in the title and the root. */
	assert_non_null(strstr(svg, "28 estimated resumes from 6 samples over 2.0 s"));
	assert_non_null(strstr(svg, "<title>all (28 resumes, 100.00%)"));
	assert_non_null(strstr(svg, "<title>app::cpu_task::{{closure}} (15 resumes, 53.57%)"));
	/* Palette: async bodies warm red, Tokio blue, unknown grey. */
	fill_of(svg, "app::cpu_task::{{closure}}", rgb);
	assert_true(rgb[0] > rgb[1] && rgb[0] > rgb[2] + 60);
	fill_of(svg, "app::timer_task::{closure#0}", rgb);
	assert_true(rgb[0] > rgb[1] && rgb[0] > rgb[2] + 60);
	fill_of(svg, "tokio::runtime::task::waker::clone_waker", rgb);
	assert_true(rgb[2] > rgb[0] + 40);
	fill_of(svg, "[libc.so.6+0x1234]", rgb);
	assert_true(abs(rgb[0] - rgb[2]) < 40 && abs(rgb[1] - rgb[2]) < 40);
	free(svg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_folded_aggregates),
	    cmocka_unit_test(test_folded_time_view),
	    cmocka_unit_test(test_folded_every_line_parses),
	    cmocka_unit_test(test_folded_empty_and_weightless),
	    cmocka_unit_test(test_folded_abort_removes),
	    cmocka_unit_test(test_agg_bounded),
	    cmocka_unit_test(test_agg_caches_match_walk),
	    cmocka_unit_test(test_intern_and_index),
	    cmocka_unit_test(test_flamegraph_svg),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
