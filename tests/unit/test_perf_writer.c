// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * perf.data written through the writer API with synthetic samples, read back field by field:
 * what perf needs to find (header, attrs, ids, record sizes, sample layout, feature sections)
 * without needing perf itself.
 */
#include <errno.h>
#include <limits.h>
#include <linux/perf_event.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "dial9_bpf.h"
#include "perf_format.h"
#include "symbolize.h"
#include "writer.h"

#define PID 4000
#define STARTED_NS 1000000000ULL
#define RT_OFFSET_NS 1700000000000000000ULL

struct file {
	uint8_t *buf;
	size_t len;
	char dir[64];
	char path[128];
};

struct parsed {
	size_t samples[D9_PERF_NR_EVENTS], comms, mmaps, cgroups, other;
	uint64_t period[D9_PERF_NR_EVENTS];
	char cgroup_label[2][64];
	size_t nstreamed_comms; /* COMMs with a time: renames after workers */
	char comm_names[8][16];
	size_t ncomm_names;
};

static void make_dir(struct file *f)
{
	snprintf(f->dir, sizeof(f->dir), "/tmp/d9-perf-test-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/perf.data", f->dir);
}

static void read_back(struct file *f)
{
	FILE *fp = fopen(f->path, "rb");
	long len;

	assert_non_null(fp);
	assert_int_equal(fseek(fp, 0, SEEK_END), 0);
	len = ftell(fp);
	assert_true(len > 0);
	rewind(fp);
	f->len = (size_t)len;
	f->buf = malloc(f->len);
	assert_non_null(f->buf);
	assert_int_equal(fread(f->buf, 1, f->len, fp), f->len);
	fclose(fp);
}

static void cleanup(struct file *f)
{
	char tmp[160];

	free(f->buf);
	if (getenv("D9_KEEP_PERF_DATA")) {
		fprintf(stderr, "kept %s\n", f->path);
		return;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", f->path);
	unlink(f->path);
	unlink(tmp);
	rmdir(f->dir);
}

static uint64_t u64_at(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static uint32_t u32_at(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static void fill_sample(struct task_sample *s, struct task_frame *frames, size_t nframes,
			uint32_t tid, int worker, uint64_t t)
{
	memset(s, 0, sizeof(*s));
	for (size_t i = 0; i < nframes; i++) {
		frames[i].addr = 0x400000 + 0x10 * i;
		frames[i].name = "f";
		frames[i].module = "/bin/x";
	}
	s->timestamp_ns = t;
	s->pid = PID;
	s->tid = tid;
	s->worker = worker;
	s->task_id_ok = true;
	s->task_id = 42;
	s->prob = 0.25;
	s->epoch = t / 1000000000ULL;
	s->idle_start_ns = t - 1000;
	s->idle_end_ns = t;
	s->poll_end_ns = t + 500;
	s->outcome = "pending";
	s->park_point = "leaf";
	s->weight_count = 4;
	s->weight_idle_ns = 4000;
	s->nframes = nframes;
	s->frames = frames;
}

static void check_sample(const uint8_t *r, size_t size, struct parsed *p)
{
	/* IDENTIFIER IP TID TIME CPU PERIOD CALLCHAIN RAW CGROUP */
	const uint8_t *q = r + sizeof(struct perf_event_header);
	uint64_t id = u64_at(q), ip = u64_at(q + 8), nr;
	uint32_t raw_size;
	int ev;

	assert_true(id == D9_PERF_EVENT_ID(D9_PERF_EV_SAMPLE) ||
		    id == D9_PERF_EVENT_ID(D9_PERF_EV_IDLE));
	ev = (int)id - 1;
	p->samples[ev]++;
	assert_int_equal(u32_at(q + 16), PID);
	p->period[ev] += u64_at(q + 40);
	nr = u64_at(q + 48);
	q += 56;
	if (nr) {
		assert_int_equal(u64_at(q), PERF_CONTEXT_USER);
		assert_int_equal(u64_at(q + 8), ip);
		assert_int_equal(ip, 0x400000);
	} else {
		assert_int_equal(ip, 0);
	}
	q += nr * 8;
	raw_size = u32_at(q);
	assert_int_equal((4 + raw_size) % 8, 0);
	assert_memory_equal(q + 4, "worker=", 7);
	assert_int_equal(q[4 + raw_size - 1], 0); /* NUL-terminated, perf prints it as a string */
	q += 4 + raw_size;
	assert_true(u64_at(q) == D9_PERF_CGROUP_WORKER(0) || u64_at(q) == D9_PERF_CGROUP_WORKER(1));
	q += 8;
	assert_ptr_equal(q, r + size);
}

/* Walks the data section: every record 8-aligned, in bounds, and of the expected layout. */
static void walk_data(const struct file *f, struct parsed *p)
{
	const struct d9_perf_header *h = (const void *)f->buf;
	uint64_t off = h->data.offset, end = h->data.offset + h->data.size;

	memset(p, 0, sizeof(*p));
	assert_true(end <= f->len);
	while (off < end) {
		struct perf_event_header eh;
		const uint8_t *r = f->buf + off;

		memcpy(&eh, r, sizeof(eh));
		assert_true(eh.size >= sizeof(eh));
		assert_int_equal(eh.size % 8, 0);
		assert_true(off + eh.size <= end);
		switch (eh.type) {
		case PERF_RECORD_SAMPLE:
			assert_int_equal(eh.misc, PERF_RECORD_MISC_USER);
			check_sample(r, eh.size, p);
			break;
		case PERF_RECORD_COMM: {
			/* pid tid comm... trailer: pid tid time cpu res id */
			uint64_t time = u64_at(r + eh.size - 24);

			assert_int_equal(u64_at(r + eh.size - 8), D9_PERF_EVENT_ID(0));
			p->comms++;
			if (time)
				p->nstreamed_comms++;
			if (p->ncomm_names < 8)
				snprintf(p->comm_names[p->ncomm_names++], 16, "%s", r + 16);
			break;
		}
		case PERF_RECORD_MMAP2:
			assert_int_equal(eh.misc, PERF_RECORD_MISC_USER);
			assert_int_equal(u64_at(r + eh.size - 24), 0); /* time 0: before samples */
			p->mmaps++;
			break;
		case PERF_RECORD_CGROUP: {
			uint64_t id = u64_at(r + 8);

			assert_true(id == D9_PERF_CGROUP_WORKER(0) ||
				    id == D9_PERF_CGROUP_WORKER(1));
			snprintf(p->cgroup_label[id - D9_PERF_CGROUP_WORKER(0)], 64, "%s", r + 16);
			p->cgroups++;
			break;
		}
		default:
			p->other++;
		}
		off += eh.size;
	}
	assert_int_equal(off, end);
}

/* The feature payload for bit feat, or NULL. */
static const uint8_t *feature(const struct file *f, int feat, uint64_t *size)
{
	const struct d9_perf_header *h = (const void *)f->buf;
	const struct d9_perf_section *sec = (const void *)(f->buf + h->data.offset + h->data.size);
	size_t idx = 0;

	if (!(h->features[feat / 64] & (1ULL << (feat % 64))))
		return NULL;
	for (int b = 0; b < feat; b++)
		idx += !!(h->features[b / 64] & (1ULL << (b % 64)));
	assert_true(sec[idx].offset + sec[idx].size <= f->len);
	*size = sec[idx].size;
	return f->buf + sec[idx].offset;
}

static void check_header(const struct file *f)
{
	const struct d9_perf_header *h = (const void *)f->buf;
	const struct d9_perf_file_attr *fa;
	static const int want[] = {2, 3, 4, 5, 6, 7, 11, 12, 21, 23, 29};
	uint64_t bits[4] = {};

	assert_true(f->len >= sizeof(*h));
	assert_memory_equal(h->magic, "PERFILE2", 8);
	assert_int_equal(h->size, 104);
	assert_int_equal(h->attr_size, 144);
	assert_int_equal(h->attrs.offset, 104);
	assert_int_equal(h->attrs.size, D9_PERF_NR_EVENTS * 144);
	assert_int_equal(h->data.offset % 8, 0);
	assert_true(h->data.offset >= h->attrs.offset + h->attrs.size);
	assert_int_equal(h->event_types.size, 0);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		bits[want[i] / 64] |= 1ULL << (want[i] % 64);
	assert_memory_equal(h->features, bits, sizeof(bits));

	fa = (const void *)(f->buf + h->attrs.offset);
	for (int ev = 0; ev < D9_PERF_NR_EVENTS; ev++) {
		struct perf_event_attr a = {};

		memcpy(&a, fa[ev].attr, D9_PERF_ATTR_SIZE);
		assert_int_equal(a.size, 128); /* perf 6.1 refuses larger */
		assert_int_equal(a.type, PERF_TYPE_SOFTWARE);
		assert_int_equal(a.config, PERF_COUNT_SW_BPF_OUTPUT);
		assert_int_equal(a.sample_type,
				 PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID |
				     PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD |
				     PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_RAW | PERF_SAMPLE_CGROUP);
		assert_true(a.sample_id_all);
		assert_true(a.use_clockid);
		assert_int_equal(a.clockid, CLOCK_MONOTONIC);
		assert_int_equal(fa[ev].ids.size, 8);
		assert_true(fa[ev].ids.offset + 8 <= h->data.offset);
		assert_int_equal(u64_at(f->buf + fa[ev].ids.offset), D9_PERF_EVENT_ID(ev));
	}
	/* Feature payloads lie after the table, inside the file. */
	assert_true(h->data.offset + h->data.size + 11 * 16 <= f->len);
}

static void check_features(const struct file *f, uint64_t first, uint64_t last)
{
	const uint8_t *p;
	uint64_t size, off;

	p = feature(f, D9_PERF_FEAT_EVENT_DESC, &size);
	assert_non_null(p);
	assert_int_equal(u32_at(p), D9_PERF_NR_EVENTS);
	assert_int_equal(u32_at(p + 4), 128);
	off = 8;
	for (int ev = 0; ev < D9_PERF_NR_EVENTS; ev++) {
		uint32_t slen;

		off += 128;
		assert_int_equal(u32_at(p + off), 1); /* one id */
		slen = u32_at(p + off + 4);
		assert_int_equal(slen % D9_PERF_NAME_ALIGN, 0);
		assert_string_equal((const char *)p + off + 8, ev ? "task-idle-ns" : "task-sample");
		off += 8 + slen;
		assert_int_equal(u64_at(p + off), D9_PERF_EVENT_ID(ev));
		off += 8;
	}
	assert_int_equal(off, size);

	p = feature(f, D9_PERF_FEAT_CLOCK_DATA, &size);
	assert_non_null(p);
	assert_int_equal(size, 24);
	assert_int_equal(u32_at(p), 1);
	assert_int_equal(u32_at(p + 4), CLOCK_MONOTONIC);
	assert_int_equal(u64_at(p + 8), STARTED_NS + RT_OFFSET_NS);
	assert_int_equal(u64_at(p + 16), STARTED_NS);

	p = feature(f, D9_PERF_FEAT_SAMPLE_TIME, &size);
	assert_non_null(p);
	assert_int_equal(size, 16);
	assert_int_equal(u64_at(p), first);
	assert_int_equal(u64_at(p + 8), last);

	p = feature(f, D9_PERF_FEAT_NRCPUS, &size);
	assert_int_equal(size, 8);
	assert_true(u32_at(p) >= 1 && u32_at(p + 4) >= 1);

	p = feature(f, D9_PERF_FEAT_VERSION, &size);
	assert_string_equal((const char *)p + 4, "dial9-bpf " DIAL9_VERSION);
	p = feature(f, D9_PERF_FEAT_CMDLINE, &size);
	assert_true(u32_at(p) >= 1);
}

static void test_synthetic_samples(void **state)
{
	struct task_frame frames[D9_MAX_STACK_DEPTH];
	struct run_thread threads[] = {
	    {.pid = PID, .tid = 4001, .worker = 0, .comm = "tokio-runtime-w"},
	    {.pid = PID, .tid = 4002, .worker = 1, .comm = "my-worker"},
	};
	struct run_context rc = {
	    .started_ns = STARTED_NS,
	    .realtime_offset_ns = RT_OFFSET_NS,
	    .nthreads = 2,
	    .threads = threads,
	};
	struct task_sample s;
	struct writer w = {};
	struct parsed p;
	struct file f = {};
	struct stat st;
	char tmp[160];

	(void)state;
	make_dir(&f);
	assert_int_equal(perf_writer_open(f.dir, &w), 0);
	assert_string_equal(w.format, "perf");
	snprintf(tmp, sizeof(tmp), "%s.tmp", f.path);
	/* Until finish() only the temporary exists: no half-written perf.data for perf. */
	assert_int_equal(stat(tmp, &st), 0);
	assert_int_equal(stat(f.path, &st), -1);

	fill_sample(&s, frames, 2, 4001, 0, 3 * STARTED_NS);
	assert_int_equal(w.sample(&w, &s), 0);
	fill_sample(&s, frames, D9_MAX_STACK_DEPTH, 4002, 1, 2 * STARTED_NS);
	assert_int_equal(w.sample(&w, &s), 0);
	fill_sample(&s, frames, 0, 4002, 0, 4 * STARTED_NS); /* stack capture failed */
	s.stack_error = -EFAULT;
	s.weight_count = 7;
	s.weight_idle_ns = 0;
	assert_int_equal(w.sample(&w, &s), 0);
	fill_sample(&s, frames, 1, 4002, 0, 5 * STARTED_NS); /* same worker: no new name */
	assert_int_equal(w.sample(&w, &s), 0);
	assert_int_equal(w.finish(&w, &rc), 0);
	assert_null(w.priv);
	assert_int_equal(stat(tmp, &st), -1);

	read_back(&f);
	check_header(&f);
	walk_data(&f, &p);
	assert_int_equal(p.samples[D9_PERF_EV_SAMPLE], 4);
	assert_int_equal(p.samples[D9_PERF_EV_IDLE], 4);
	assert_int_equal(p.period[D9_PERF_EV_SAMPLE], 4 + 4 + 7 + 4);
	assert_int_equal(p.period[D9_PERF_EV_IDLE], 4000 + 4000 + 0 + 4000);
	/* Streamed: 4001 -> w0, 4002 -> w1, 4002 -> w0; at finish one per thread, time 0. */
	assert_int_equal(p.nstreamed_comms, 3);
	assert_int_equal(p.comms, 5);
	assert_string_equal(p.comm_names[0], "tokio-w0");
	assert_string_equal(p.comm_names[1], "tokio-w1");
	assert_string_equal(p.comm_names[2], "tokio-w0");
	assert_string_equal(p.comm_names[3], "tokio-runtime-w");
	assert_string_equal(p.comm_names[4], "my-worker");
	assert_int_equal(p.mmaps, 0); /* no symbolizer */
	assert_int_equal(p.cgroups, 2);
	assert_string_equal(p.cgroup_label[0], "/worker-0/tokio-runtime-w");
	assert_string_equal(p.cgroup_label[1], "/worker-1/my-worker");
	assert_int_equal(p.other, 0);
	check_features(&f, 2 * STARTED_NS, 5 * STARTED_NS);
	cleanup(&f);
}

/* MMAP2 records, all of this process; *found if one maps path. */
static size_t count_mmaps_of(const struct file *f, const char *path, bool *found)
{
	const struct d9_perf_header *h = (const void *)f->buf;
	uint64_t off = h->data.offset;
	size_t n = 0;

	*found = false;
	while (off < h->data.offset + h->data.size) {
		struct perf_event_header eh;

		memcpy(&eh, f->buf + off, sizeof(eh));
		if (eh.type == PERF_RECORD_MMAP2) {
			n++;
			assert_int_equal(u32_at(f->buf + off + 8), getpid());
			/* The file name follows the 72-byte fixed part. */
			if (!strcmp((const char *)f->buf + off + 72, path))
				*found = true;
		}
		off += eh.size;
	}
	return n;
}

/* The test process as target: MMAP2 for its files and a build id for this executable. */
static void test_own_maps_and_build_id(void **state)
{
	struct symbolizer *sym = symbolizer_new(getpid());
	struct task_frame frames[1];
	struct run_context rc = {.started_ns = STARTED_NS};
	struct task_sample s;
	struct writer w = {};
	size_t mmaps;
	struct file f = {};
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	const uint8_t *bid, *want_id = NULL;
	uint64_t size, off = 0;
	bool found = false;
	struct sym_module m;
	size_t iter = 0;

	(void)state;
	assert_non_null(sym);
	assert_true(n > 0);
	exe[n] = 0;
	while (!symbolizer_next_module(sym, &iter, &m))
		if (!strcmp(m.path, exe))
			want_id = m.build_id;
	assert_non_null(want_id); /* cc links with --build-id */

	make_dir(&f);
	assert_int_equal(perf_writer_open(f.dir, &w), 0);
	fill_sample(&s, frames, 1, (uint32_t)getpid(), 0, STARTED_NS);
	s.pid = (uint32_t)getpid();
	frames[0].addr = (uint64_t)(uintptr_t)test_own_maps_and_build_id;
	rc.sym = sym;
	assert_int_equal(w.sample(&w, &s), 0);
	assert_int_equal(w.finish(&w, &rc), 0);
	read_back(&f);

	mmaps = count_mmaps_of(&f, exe, &found);
	assert_true(mmaps >= 4); /* r--p, r-xp, ... of the executable and of libc */
	assert_true(found);

	bid = feature(&f, D9_PERF_FEAT_BUILD_ID, &size);
	assert_non_null(bid);
	found = false;
	while (off < size) {
		struct perf_event_header eh;

		memcpy(&eh, bid + off, sizeof(eh));
		assert_int_equal(eh.type, D9_PERF_RECORD_HEADER_BUILD_ID);
		assert_int_equal(eh.misc, PERF_RECORD_MISC_USER | D9_PERF_MISC_BUILD_ID_SIZE);
		assert_int_equal((int32_t)u32_at(bid + off + 8), -1);
		if (!strcmp((const char *)bid + off + D9_PERF_BUILD_ID_REC_SIZE, exe)) {
			assert_memory_equal(bid + off + 12, want_id, bid[off + 32]);
			found = true;
		}
		off += eh.size;
	}
	assert_int_equal(off, size);
	assert_true(found);
	cleanup(&f);
	symbolizer_free(sym);
}

static void test_abort_removes(void **state)
{
	struct task_frame frames[3];
	struct task_sample s;
	struct writer w = {};
	struct file f = {};
	struct stat st;
	char tmp[160];

	(void)state;
	make_dir(&f);
	assert_int_equal(perf_writer_open(f.dir, &w), 0);
	fill_sample(&s, frames, 3, 4001, 0, STARTED_NS);
	assert_int_equal(w.sample(&w, &s), 0);
	w.abort(&w);
	assert_null(w.priv);
	snprintf(tmp, sizeof(tmp), "%s.tmp", f.path);
	assert_int_equal(stat(tmp, &st), -1);
	assert_int_equal(stat(f.path, &st), -1);
	assert_int_equal(rmdir(f.dir), 0);
}

/* No samples, no threads: still a file perf opens, not one it takes for a crashed record. */
static void test_no_samples(void **state)
{
	struct run_context rc = {.started_ns = STARTED_NS};
	const struct d9_perf_header *h;
	struct writer w = {};
	struct parsed p;
	struct file f = {};

	(void)state;
	make_dir(&f);
	assert_int_equal(perf_writer_open(f.dir, &w), 0);
	assert_int_equal(w.finish(&w, &rc), 0);
	read_back(&f);
	check_header(&f);
	h = (const void *)f.buf;
	assert_int_equal(h->data.size, 8);
	assert_int_equal(u32_at(f.buf + h->data.offset), D9_PERF_RECORD_FINISHED_ROUND);
	walk_data(&f, &p);
	assert_int_equal(p.other, 1);
	assert_int_equal(p.samples[0] + p.comms + p.mmaps + p.cgroups, 0);
	cleanup(&f);
}

static void test_unwritable_dir(void **state)
{
	struct writer w = {};

	(void)state;
	assert_int_equal(perf_writer_open("/nonexistent/d9", &w), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_synthetic_samples), cmocka_unit_test(test_own_maps_and_build_id),
	    cmocka_unit_test(test_abort_removes),     cmocka_unit_test(test_no_samples),
	    cmocka_unit_test(test_unwritable_dir),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
