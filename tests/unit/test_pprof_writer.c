// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * protobuf encoding against the byte sequences of the protobuf documentation, and the pprof
 * writer decoded back with a small decoder written here (independent of the encoder).
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <cmocka.h>

#include "protobuf.h"
#include "symbolize.h"
#include "test_out.h"
#include "writer.h"

static void expect_bytes(const struct pb_buf *b, const uint8_t *want, size_t n)
{
	assert_int_equal(b->err, 0);
	assert_int_equal(b->len, n);
	assert_memory_equal(b->data, want, n);
}

static void test_pb_known_bytes(void **state)
{
	struct pb_buf b = {};
	static const uint8_t v150[] = {0x08, 0x96, 0x01};
	static const uint8_t str[] = {0x12, 0x07, 't', 'e', 's', 't', 'i', 'n', 'g'};
	static const uint8_t packed[] = {0x22, 0x06, 0x03, 0x8e, 0x02, 0x9e, 0xa7, 0x05};
	static const uint8_t zero[] = {0x08, 0x00};
	static const uint8_t max[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
	uint64_t vals[] = {3, 270, 86942};

	(void)state;
	pb_uint(&b, 1, 150);
	expect_bytes(&b, v150, sizeof(v150));
	pb_reset(&b);
	pb_str(&b, 2, "testing");
	expect_bytes(&b, str, sizeof(str));
	pb_reset(&b);
	pb_packed(&b, 4, vals, 3);
	expect_bytes(&b, packed, sizeof(packed));
	pb_reset(&b);
	pb_uint(&b, 1, 0);
	expect_bytes(&b, zero, sizeof(zero));
	pb_reset(&b);
	pb_uint_opt(&b, 1, 0);
	pb_packed(&b, 4, vals, 0);
	assert_int_equal(b.len, 0);
	pb_varint(&b, UINT64_MAX);
	expect_bytes(&b, max, sizeof(max));
	assert_int_equal(pb_varint_size(UINT64_MAX), 10);
	assert_int_equal(pb_varint_size(127), 1);
	assert_int_equal(pb_varint_size(128), 2);
	pb_free(&b);
}

static void test_pb_nested(void **state)
{
	struct pb_buf outer = {}, inner = {};
	static const uint8_t want[] = {0x1a, 0x03, 0x08, 0x96, 0x01};

	(void)state;
	pb_uint(&inner, 1, 150);
	pb_msg(&outer, 3, &inner);
	expect_bytes(&outer, want, sizeof(want));
	pb_free(&outer);
	pb_free(&inner);
}

/* ---- a minimal decoder for the test ---- */

struct rd {
	const uint8_t *p, *end;
};

static uint64_t rd_varint(struct rd *r)
{
	uint64_t v = 0;

	for (int shift = 0; shift < 64; shift += 7) {
		uint8_t b;

		assert_true(r->p < r->end);
		b = *r->p++;
		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			return v;
	}
	fail_msg("varint too long");
	return 0;
}

/* Next field: returns 0 at the end; sets field, and either *v (varint) or *sub (bytes). */
static int rd_field(struct rd *r, uint32_t *field, uint64_t *v, struct rd *sub)
{
	uint64_t key;

	if (r->p >= r->end)
		return 0;
	key = rd_varint(r);
	*field = (uint32_t)(key >> 3);
	switch (key & 7) {
	case 0:
		*v = rd_varint(r);
		sub->p = sub->end = NULL;
		return 1;
	case 2: {
		uint64_t len = rd_varint(r);

		assert_true(len <= (uint64_t)(r->end - r->p));
		sub->p = r->p;
		sub->end = r->p + len;
		r->p += len;
		return 2;
	}
	default:
		fail_msg("unexpected wire type %u", (unsigned)(key & 7));
		return 0;
	}
}

/* Values of a packed (or single, unpacked) repeated varint field. */
static size_t rd_packed(int kind, uint64_t v, struct rd *sub, uint64_t *out, size_t cap)
{
	size_t n = 0;

	if (kind == 1) {
		out[0] = v;
		return 1;
	}
	while (sub->p < sub->end && n < cap)
		out[n++] = rd_varint(sub);
	return n;
}

#define MAXN 64

struct dlabel {
	uint64_t key, str, num;
};

struct dsample {
	uint64_t locs[MAXN];
	size_t nlocs;
	uint64_t values[4];
	size_t nvalues;
	struct dlabel labels[8];
	size_t nlabels;
};

struct dprofile {
	char *strings[256];
	size_t nstrings;
	uint64_t sample_type[4][2];
	size_t nsample_types;
	struct dsample samples[16];
	size_t nsamples;
	uint64_t mapping[8][7]; /* by field number - 1 */
	size_t nmappings;
	uint64_t location[MAXN][4]; /* id, mapping, address, function id of the line */
	size_t nlocations;
	uint64_t function[MAXN][3]; /* id, name, system_name */
	size_t nfunctions;
	uint64_t time_nanos, duration_nanos, period, default_sample_type;
	uint64_t period_type[2];
	size_t ncomments;
};

static void decode_value_type(struct rd r, uint64_t out[2])
{
	struct rd sub;
	uint32_t f;
	uint64_t v;

	while (rd_field(&r, &f, &v, &sub))
		if (f == 1 || f == 2)
			out[f - 1] = v;
}

static void decode_profile(const uint8_t *data, size_t len, struct dprofile *p)
{
	struct rd r = {data, data + len}, sub, s2, s3;
	uint32_t f, f2, f3;
	uint64_t v, v2, v3;
	int k, k2;

	memset(p, 0, sizeof(*p));
	while ((k = rd_field(&r, &f, &v, &sub))) {
		switch (f) {
		case 1:
			assert_true(p->nsample_types < 4);
			decode_value_type(sub, p->sample_type[p->nsample_types++]);
			break;
		case 2: {
			struct dsample *s = &p->samples[p->nsamples++];

			assert_true(p->nsamples <= 16);
			while ((k2 = rd_field(&sub, &f2, &v2, &s2))) {
				if (f2 == 1)
					s->nlocs += rd_packed(k2, v2, &s2, s->locs + s->nlocs,
							      MAXN - s->nlocs);
				else if (f2 == 2)
					s->nvalues += rd_packed(k2, v2, &s2, s->values + s->nvalues,
								4 - s->nvalues);
				else if (f2 == 3) {
					struct dlabel *l = &s->labels[s->nlabels++];

					while (rd_field(&s2, &f3, &v3, &s3)) {
						if (f3 == 1)
							l->key = v3;
						else if (f3 == 2)
							l->str = v3;
						else if (f3 == 3)
							l->num = v3;
					}
				}
			}
			break;
		}
		case 3:
			assert_true(p->nmappings < 8);
			while (rd_field(&sub, &f2, &v2, &s2))
				if (f2 >= 1 && f2 <= 7)
					p->mapping[p->nmappings][f2 - 1] = v2;
			p->nmappings++;
			break;
		case 4:
			assert_true(p->nlocations < MAXN);
			while ((k2 = rd_field(&sub, &f2, &v2, &s2))) {
				if (f2 >= 1 && f2 <= 3)
					p->location[p->nlocations][f2 - 1] = v2;
				if (f2 == 4)
					while (rd_field(&s2, &f3, &v3, &s3))
						if (f3 == 1)
							p->location[p->nlocations][3] = v3;
			}
			p->nlocations++;
			break;
		case 5:
			assert_true(p->nfunctions < MAXN);
			while (rd_field(&sub, &f2, &v2, &s2))
				if (f2 >= 1 && f2 <= 3)
					p->function[p->nfunctions][f2 - 1] = v2;
			p->nfunctions++;
			break;
		case 6:
			assert_int_equal(k, 2);
			assert_true(p->nstrings < 256);
			p->strings[p->nstrings++] = strndup((const char *)sub.p, sub.end - sub.p);
			break;
		case 9:
			p->time_nanos = v;
			break;
		case 10:
			p->duration_nanos = v;
			break;
		case 11:
			decode_value_type(sub, p->period_type);
			break;
		case 12:
			p->period = v;
			break;
		case 13:
			p->ncomments++;
			break;
		case 14:
			p->default_sample_type = v;
			break;
		default:
			fail_msg("unexpected Profile field %u", f);
		}
	}
}

static void free_profile(struct dprofile *p)
{
	for (size_t i = 0; i < p->nstrings; i++)
		free(p->strings[i]);
}

static const char *S(const struct dprofile *p, uint64_t idx)
{
	assert_true(idx < p->nstrings);
	return p->strings[idx];
}

/* gunzips a whole file */
static uint8_t *gunzip_file(const char *path, size_t *len)
{
	gzFile gz = gzopen(path, "rb");
	size_t cap = 1 << 16;
	uint8_t *buf = malloc(cap);
	int n;

	assert_non_null(gz);
	assert_non_null(buf);
	*len = 0;
	while ((n = gzread(gz, buf + *len, (unsigned)(cap - *len))) > 0) {
		*len += (size_t)n;
		if (*len == cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
	}
	assert_int_equal(n, 0);
	gzclose(gz);
	return buf;
}

static const struct dlabel *find_label(const struct dprofile *p, const struct dsample *s,
				       const char *key)
{
	for (size_t i = 0; i < s->nlabels; i++)
		if (!strcmp(S(p, s->labels[i].key), key))
			return &s->labels[i];
	return NULL;
}

static const uint64_t *location(const struct dprofile *p, uint64_t id)
{
	for (size_t i = 0; i < p->nlocations; i++)
		if (p->location[i][0] == id)
			return p->location[i];
	fail_msg("location %llu missing", (unsigned long long)id);
	return NULL;
}

static const char *function_name(const struct dprofile *p, uint64_t id)
{
	for (size_t i = 0; i < p->nfunctions; i++)
		if (p->function[i][0] == id)
			return S(p, p->function[i][1]);
	fail_msg("function %llu missing", (unsigned long long)id);
	return NULL;
}

/* Writes three samples (two stacks sharing frames, one stackless) to DIR's profile.pb.gz, whose
 * name goes to PATH, and decodes it into P. */
static void write_roundtrip_profile(char *dir, char *path, size_t path_size, struct dprofile *p)
{
	struct writer w = {};
	struct task_frame a[] = {
	    {0x401000, "tokio::runtime::task::waker::clone_waker", "/bin/app", 0x1000, false,
	     false},
	    {0x402005, "app::work::{{closure}}", "/bin/app", 0x2005, false, false},
	    {0x402105, "app::work::{{closure}}", "/bin/app", 0x2105, false, false},
	    {0x7f0000001234, NULL, "/lib/libc.so.6", 0x1234, false, false},
	};
	struct task_frame b[] = {
	    {0x401000, "tokio::runtime::task::waker::clone_waker", "/bin/app", 0x1000, false,
	     false},
	    {0x403001, "<app::Counted<F> as core::future::future::Future>::poll", "/bin/app",
	     0x3001, false, false},
	    {0x7f0000001234, NULL, "/lib/libc.so.6", 0x1234, false, false},
	};
	struct task_sample s1 = {.worker = 0,
				 .task_id_ok = true,
				 .task_id = 42,
				 .park_point = "clone_waker",
				 .outcome = "pending",
				 .weight_count = 63,
				 .weight_idle_ns = 2000000,
				 .nframes = 4,
				 .frames = a};
	struct task_sample s2 = {.worker = 1,
				 .task_id_ok = false,
				 .park_point = "clone_waker",
				 .outcome = "complete",
				 .capped = true,
				 .weight_count = 7,
				 .weight_idle_ns = 5,
				 .nframes = 3,
				 .frames = b};
	struct task_sample s3 = {.worker = -1,
				 .stack_error = -EFAULT,
				 .park_point = "none",
				 .outcome = "unknown",
				 .weight_count = 1,
				 .weight_idle_ns = 1};
	struct run_context rc = {.started_ns = 1000,
				 .stopped_ns = 5000,
				 .realtime_offset_ns = 1700000000000000000ULL,
				 .stop_reason = "duration"};
	uint8_t *data;
	size_t len;

	assert_non_null(mkdtemp(dir));
	assert_int_equal(pprof_writer_open(test_out_dir(dir), &w), 0);
	assert_string_equal(w.format, "pprof");
	assert_int_equal(w.sample(&w, &s1), 0);
	assert_int_equal(w.sample(&w, &s2), 0);
	assert_int_equal(w.sample(&w, &s3), 0);
	assert_int_equal(w.finish(&w, &rc), 0);
	snprintf(path, path_size, "%s/profile.pb.gz.tmp", dir);
	assert_int_equal(access(path, F_OK), -1);
	snprintf(path, path_size, "%s/profile.pb.gz", dir);
	data = gunzip_file(path, &len);
	decode_profile(data, len, p);
	free(data);
}

static void check_roundtrip_header(const struct dprofile *p)
{
	assert_true(p->nstrings > 0);
	assert_string_equal(p->strings[0], "");
	assert_int_equal(p->nsample_types, 3);
	assert_string_equal(S(p, p->sample_type[0][0]), "resumes");
	assert_string_equal(S(p, p->sample_type[0][1]), "count");
	assert_string_equal(S(p, p->sample_type[1][0]), "idle");
	assert_string_equal(S(p, p->sample_type[1][1]), "nanoseconds");
	assert_string_equal(S(p, p->sample_type[2][0]), "cpu");
	assert_string_equal(S(p, p->sample_type[2][1]), "nanoseconds");
	assert_string_equal(S(p, p->default_sample_type), "resumes");
	assert_string_equal(S(p, p->period_type[0]), "resumes");
	assert_int_equal(p->time_nanos, 1700000000000001000ULL);
	assert_int_equal(p->duration_nanos, 4000);
	assert_true(p->ncomments >= 2);

	assert_int_equal(p->nsamples, 3);
	assert_int_equal(p->samples[0].nvalues, 3);
	assert_int_equal(p->samples[0].values[2], 0); /* a park sample: no CPU time */
	assert_int_equal(p->samples[0].values[0], 63);
	assert_int_equal(p->samples[0].values[1], 2000000);
	assert_int_equal(p->samples[1].values[0], 7);
	assert_int_equal(p->samples[1].values[1], 5);
}

static void check_roundtrip_labels(const struct dprofile *p)
{
	const struct dlabel *l;

	/* Labels: worker always, task_id only when read. */
	l = find_label(p, &p->samples[0], "worker");
	assert_non_null(l);
	assert_string_equal(S(p, l->str), "w0");
	l = find_label(p, &p->samples[0], "task_id");
	assert_non_null(l);
	assert_int_equal(l->num, 42);
	assert_int_equal(l->str, 0);
	assert_null(find_label(p, &p->samples[1], "task_id"));
	assert_string_equal(S(p, find_label(p, &p->samples[1], "worker")->str), "w1");
	assert_string_equal(S(p, find_label(p, &p->samples[1], "capped")->str), "true");
	assert_string_equal(S(p, find_label(p, &p->samples[0], "capped")->str), "false");
	assert_string_equal(S(p, find_label(p, &p->samples[1], "outcome")->str), "complete");
	assert_string_equal(S(p, find_label(p, &p->samples[0], "park_point")->str), "clone_waker");
	assert_string_equal(S(p, find_label(p, &p->samples[2], "worker")->str), "unknown");
}

static void check_roundtrip_locations(const struct dprofile *p)
{
	const uint64_t *loc;

	/* Locations: leaf first, leaf at its ip, return addresses - 1, shared ones deduped. */
	assert_int_equal(p->samples[0].nlocs, 4);
	assert_int_equal(location(p, p->samples[0].locs[0])[2], 0x401000);
	assert_int_equal(location(p, p->samples[0].locs[1])[2], 0x402004);
	assert_int_equal(location(p, p->samples[0].locs[2])[2], 0x402104);
	assert_int_equal(p->samples[1].locs[0], p->samples[0].locs[0]);
	assert_int_equal(p->samples[1].locs[2], p->samples[0].locs[3]);
	/* 4 + 1 new addresses + the pseudo frame of the stackless sample */
	assert_int_equal(p->nlocations, 6);
	/* Functions deduped by name: two addresses in app::work::{{closure}} share one. */
	assert_int_equal(location(p, p->samples[0].locs[1])[3],
			 location(p, p->samples[0].locs[2])[3]);
	assert_string_equal(function_name(p, location(p, p->samples[0].locs[1])[3]),
			    "app::work::{{closure}}");
	/* No system_name: pprof would otherwise cut "<...>" out of Rust names. */
	for (size_t i = 0; i < p->nfunctions; i++)
		assert_int_equal(p->function[i][2], 0);
	/* clone_waker, closure, Counted::poll, [no stack...] */
	assert_int_equal(p->nfunctions, 4);
	/* The unknown libc frame: an address in a mapping, no line. */
	loc = location(p, p->samples[0].locs[3]);
	assert_int_equal(loc[2], 0x7f0000001233);
	assert_int_equal(loc[3], 0);
	assert_int_not_equal(loc[1], 0);
	/* The stackless sample: one pseudo location naming why. */
	assert_int_equal(p->samples[2].nlocs, 1);
	loc = location(p, p->samples[2].locs[0]);
	assert_int_equal(loc[1], 0);
	assert_string_equal(function_name(p, loc[3]), "[no stack: fault reading it]");
}

static void check_roundtrip_mappings(const struct dprofile *p)
{
	/* Mappings (no symbolizer here: rebuilt from the modules), all has_functions. */
	assert_int_equal(p->nmappings, 2);
	for (size_t i = 0; i < p->nmappings; i++) {
		const char *fn = S(p, p->mapping[i][4]);

		assert_int_equal(p->mapping[i][6], 1);
		assert_int_equal(p->mapping[i][0], i + 1);
		if (!strcmp(fn, "/bin/app")) {
			assert_int_equal(p->mapping[i][1], 0x401000);
			assert_int_equal(p->mapping[i][2], 0x403001);
			assert_int_equal(p->mapping[i][3], 0x1000);
		} else {
			assert_string_equal(fn, "/lib/libc.so.6");
			assert_int_equal(p->mapping[i][1], 0x7f0000001233);
			assert_int_equal(p->mapping[i][2], 0x7f0000001234);
			assert_int_equal(p->mapping[i][3], 0x1233);
			assert_int_equal(location(p, p->samples[0].locs[3])[1], i + 1);
		}
	}
}

static void test_pprof_roundtrip(void **state)
{
	char dir[] = "/tmp/d9-pprof-XXXXXX", path[256];
	struct dprofile *p = calloc(1, sizeof(*p));

	(void)state;
	assert_non_null(p);
	write_roundtrip_profile(dir, path, sizeof(path), p);
	check_roundtrip_header(p);
	check_roundtrip_labels(p);
	check_roundtrip_locations(p);
	check_roundtrip_mappings(p);
	free_profile(p);
	free(p);
	unlink(path);
	rmdir(dir);
}

static void test_pprof_build_id_from_symbolizer(void **state)
{
	char dir[] = "/tmp/d9-pprof-XXXXXX", path[256], exe[4096];
	struct symbolizer *sym = symbolizer_new(getpid());
	struct sym_info si = {};
	struct writer w = {};
	struct task_frame fr[1];
	struct task_sample s = {.weight_count = 1, .nframes = 1, .frames = fr};
	struct run_context rc = {.sym = sym};
	struct dprofile *p = calloc(1, sizeof(*p));
	uint64_t addr = (uint64_t)(uintptr_t)&test_pprof_roundtrip;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	uint8_t *data;
	size_t len;

	(void)state;
	assert_non_null(p);
	assert_non_null(sym);
	assert_true(n > 0);
	exe[n] = 0;
	assert_int_equal(symbolizer_resolve(sym, addr, &si), 0);
	fr[0] = (struct task_frame){addr, si.name, si.module, si.file_offset, false, false};
	assert_non_null(mkdtemp(dir));
	assert_int_equal(pprof_writer_open(test_out_dir(dir), &w), 0);
	assert_int_equal(w.sample(&w, &s), 0);
	assert_int_equal(w.finish(&w, &rc), 0);
	snprintf(path, sizeof(path), "%s/profile.pb.gz", dir);
	data = gunzip_file(path, &len);
	decode_profile(data, len, p);
	assert_int_equal(p->nmappings, 1);
	assert_string_equal(S(p, p->mapping[0][4]), exe);
	assert_true(p->mapping[0][1] <= addr && addr < p->mapping[0][2]);
	/* gcc on Debian links with --build-id: 20 bytes, 40 hex digits */
	assert_int_equal(strlen(S(p, p->mapping[0][5])), 40);
	assert_string_equal(function_name(p, p->location[0][3]), "test_pprof_roundtrip");
	free(data);
	free_profile(p);
	free(p);
	unlink(path);
	rmdir(dir);
	symbolizer_free(sym);
}

static void test_pprof_abort_leaves_nothing(void **state)
{
	char dir[] = "/tmp/d9-pprof-XXXXXX";
	struct task_frame fr[] = {{0x1000, "f", "/bin/app", 0x1000, false, false}};
	struct task_sample s = {.weight_count = 1, .nframes = 1, .frames = fr};
	const struct out_dir *od;
	struct writer w = {};

	(void)state;
	assert_non_null(mkdtemp(dir));
	od = test_out_dir(dir);
	assert_int_equal(pprof_writer_open(od, &w), 0);
	assert_int_equal(w.sample(&w, &s), 0);
	w.abort(&w);
	assert_null(w.priv);
	/* rmdir succeeds only when the directory is empty: no temp file, no profile */
	assert_int_equal(rmdir(dir), 0);
	assert_int_equal(pprof_writer_open(od, &w), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pb_known_bytes),
	    cmocka_unit_test(test_pb_nested),
	    cmocka_unit_test(test_pprof_roundtrip),
	    cmocka_unit_test(test_pprof_build_id_from_symbolizer),
	    cmocka_unit_test(test_pprof_abort_leaves_nothing),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
