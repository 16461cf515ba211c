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
#include "test_out.h"
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

/* A task-sample-raw record as read back. */
struct raw_rec {
	uint64_t ip, period, nr, abi, regs[3], size, dyn_size;
	uint32_t tid;
	const uint8_t *data; /* size bytes */
	size_t rec_size;
};

struct parsed {
	size_t samples[D9_PERF_NR_EVENTS], comms, mmaps, cgroups, other;
	struct raw_rec raw[8];
	size_t nraw;
	size_t max_rec_size;
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
		frames[i].inlined = false;
		frames[i].task_root = false;
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
	/* IDENTIFIER IP TID TIME CPU PERIOD CALLCHAIN RAW [REGS_USER STACK_USER] CGROUP */
	const uint8_t *q = r + sizeof(struct perf_event_header);
	uint64_t id = u64_at(q), ip = u64_at(q + 8), nr;
	struct raw_rec rr = {.rec_size = size};
	uint32_t raw_size;
	int ev;

	assert_true(id >= D9_PERF_EVENT_ID(0) && id < D9_PERF_EVENT_ID(D9_PERF_NR_EVENTS));
	ev = (int)id - 1;
	p->samples[ev]++;
	if (size > p->max_rec_size)
		p->max_rec_size = size;
	assert_int_equal(u32_at(q + 16), PID);
	rr.tid = u32_at(q + 20);
	rr.ip = ip;
	rr.period = u64_at(q + 40);
	p->period[ev] += rr.period;
	nr = rr.nr = u64_at(q + 48);
	q += 56;
	if (ev == D9_PERF_EV_SAMPLE_RAW) {
		assert_int_equal(nr, 0); /* perf unwinds it; a chain would be shown on top */
	} else if (nr) {
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
	if (ev == D9_PERF_EV_SAMPLE_RAW) {
		/* abi, then regs[popcount(mask)] in ascending bit order: BP, SP, IP. */
		rr.abi = u64_at(q);
		assert_int_equal(rr.abi, D9_PERF_REGS_ABI_64);
		for (int i = 0; i < 3; i++)
			rr.regs[i] = u64_at(q + 8 + 8 * i);
		q += 32;
		/* size, data[size], dyn_size; an empty dump is only the size, as perf reads it. */
		rr.size = u64_at(q);
		q += 8;
		assert_int_equal(rr.size % 8, 0);
		assert_true(rr.size <= D9_PERF_STACK_DUMP_MAX);
		if (rr.size) {
			rr.data = q;
			q += rr.size;
			rr.dyn_size = u64_at(q);
			q += 8;
			assert_true(rr.dyn_size <= rr.size && rr.dyn_size > rr.size - 8);
		}
		if (p->nraw < sizeof(p->raw) / sizeof(p->raw[0]))
			p->raw[p->nraw++] = rr;
	}
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

/* nev: the events the file declares, task-sample-raw only with raw stacks. */
static void check_header(const struct file *f, int nev)
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
	assert_int_equal(h->attrs.size, (uint64_t)nev * 144);
	assert_int_equal(h->data.offset % 8, 0);
	assert_true(h->data.offset >= h->attrs.offset + h->attrs.size);
	assert_int_equal(h->event_types.size, 0);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		bits[want[i] / 64] |= 1ULL << (want[i] % 64);
	assert_memory_equal(h->features, bits, sizeof(bits));

	fa = (const void *)(f->buf + h->attrs.offset);
	for (int ev = 0; ev < nev; ev++) {
		uint64_t type = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID |
				PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD |
				PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_RAW | PERF_SAMPLE_CGROUP;
		struct perf_event_attr a = {};

		memcpy(&a, fa[ev].attr, D9_PERF_ATTR_SIZE);
		assert_int_equal(a.size, 128); /* perf 6.1 refuses larger */
		assert_int_equal(a.type, PERF_TYPE_SOFTWARE);
		assert_int_equal(a.config, PERF_COUNT_SW_BPF_OUTPUT);
		if (ev == D9_PERF_EV_SAMPLE_RAW) {
			/* As perf record --call-graph dwarf: x86 BP|SP|IP, a user stack dump, no
			 * user callchain from the "kernel". */
			type |= PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
			assert_int_equal(a.sample_regs_user, 0x1c0);
			assert_int_equal(a.sample_stack_user, D9_PERF_STACK_DUMP_MAX);
			assert_true(a.exclude_callchain_user);
		} else {
			assert_int_equal(a.sample_regs_user, 0);
			assert_int_equal(a.sample_stack_user, 0);
			assert_false(a.exclude_callchain_user);
		}
		assert_int_equal(a.sample_type, type);
		assert_true(a.exclude_callchain_kernel);
		assert_true(a.sample_id_all);
		assert_true(a.use_clockid);
		assert_int_equal(a.clockid, CLOCK_MONOTONIC);
		assert_int_equal(fa[ev].ids.size, 8);
		assert_true(fa[ev].ids.offset + 8 <= h->data.offset);
		assert_int_equal(u64_at(f->buf + fa[ev].ids.offset), D9_PERF_EVENT_ID(ev));
	}
	/* Slots reserved for events the file does not declare stay zero. */
	for (int ev = nev; ev < D9_PERF_NR_EVENTS; ev++) {
		static const uint8_t zeros[144];

		assert_memory_equal(f->buf + h->attrs.offset + (uint64_t)ev * 144, zeros, 144);
	}
	/* Feature payloads lie after the table, inside the file. */
	assert_true(h->data.offset + h->data.size + 11 * 16 <= f->len);
}

static void check_features(const struct file *f, int nev, uint64_t first, uint64_t last)
{
	static const char *const names[] = {"task-sample", "task-idle-ns", "task-sample-raw",
					    "task-cpu-ns"};
	const struct d9_perf_header *h = (const void *)f->buf;
	const uint8_t *p;
	uint64_t size, off;

	p = feature(f, D9_PERF_FEAT_EVENT_DESC, &size);
	assert_non_null(p);
	assert_int_equal(u32_at(p), nev);
	assert_int_equal(u32_at(p + 4), 128);
	off = 8;
	for (int ev = 0; ev < nev; ev++) {
		uint32_t slen;

		/* The same attr as in the attrs section. */
		assert_memory_equal(p + off, f->buf + h->attrs.offset + (uint64_t)ev * 144, 128);
		off += 128;
		assert_int_equal(u32_at(p + off), 1); /* one id */
		slen = u32_at(p + off + 4);
		assert_int_equal(slen % D9_PERF_NAME_ALIGN, 0);
		assert_string_equal((const char *)p + off + 8, names[ev]);
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
	assert_int_equal(perf_writer_open(test_out_dir(f.dir), &w), 0);
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
	check_header(&f, 2); /* no raw stacks: no task-sample-raw */
	walk_data(&f, &p);
	assert_int_equal(p.samples[D9_PERF_EV_SAMPLE], 4);
	assert_int_equal(p.samples[D9_PERF_EV_SAMPLE_RAW], 0);
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
	check_features(&f, 2, 2 * STARTED_NS, 5 * STARTED_NS);
	cleanup(&f);
}

static struct raw_copy *make_raw(uint32_t tid, uint32_t len, uint8_t seed)
{
	struct raw_copy *r = malloc(sizeof(*r) + len);

	assert_non_null(r);
	r->tid = tid;
	r->ip = 0x7f0000001234ULL + seed;
	r->sp = 0x7ffd00001000ULL - 8 * seed;
	r->bp = 0x7ffd00002000ULL + seed;
	r->len = len;
	for (uint32_t i = 0; i < len; i++)
		r->data[i] = (uint8_t)(i * 7 + seed);
	return r;
}

static void check_raw_rec(const struct raw_rec *rr, const struct raw_copy *raw, uint64_t period)
{
	uint32_t len = raw->len > D9_PERF_STACK_DUMP_MAX ? D9_PERF_STACK_DUMP_MAX : raw->len;

	assert_int_equal(rr->tid, raw->tid);
	assert_int_equal(rr->ip, raw->ip);
	assert_int_equal(rr->period, period);
	assert_int_equal(rr->nr, 0);
	assert_int_equal(rr->abi, D9_PERF_REGS_ABI_64);
	/* Ascending bit order of the mask 0x1c0: BP (6), SP (7), IP (8). */
	assert_int_equal(rr->regs[0], raw->bp);
	assert_int_equal(rr->regs[1], raw->sp);
	assert_int_equal(rr->regs[2], raw->ip);
	assert_int_equal(rr->size, (len + 7) & ~7u);
	assert_true(rr->rec_size <= D9_PERF_MAX_RECORD);
	if (!len) {
		assert_null(rr->data);
		return;
	}
	assert_int_equal(rr->dyn_size, len);
	assert_memory_equal(rr->data, raw->data, len);
	for (uint64_t i = len; i < rr->size; i++)
		assert_int_equal(rr->data[i], 0);
}

/* --unwind dwarf: samples with a raw stack are written a third time, as task-sample-raw. */
static void test_raw_stacks(void **state)
{
	struct task_frame frames[D9_MAX_STACK_DEPTH];
	struct run_context rc = {.started_ns = STARTED_NS, .realtime_offset_ns = RT_OFFSET_NS};
	struct raw_copy *odd = make_raw(4001, 4093, 1);	  /* not a multiple of 8: padded */
	struct raw_copy *empty = make_raw(4002, 0, 2);	  /* nothing copied: size 0 alone */
	struct raw_copy *huge = make_raw(4001, 70000, 3); /* over the cap: the sp end kept */
	struct task_sample s;
	struct writer w = {};
	struct parsed p;
	struct file f = {};

	(void)state;
	make_dir(&f);
	assert_int_equal(perf_writer_open(test_out_dir(f.dir), &w), 0);
	fill_sample(&s, frames, 3, 4001, 0, 2 * STARTED_NS);
	s.raw = odd;
	assert_int_equal(w.sample(&w, &s), 0);
	fill_sample(&s, frames, 2, 4002, 1, 3 * STARTED_NS); /* no raw copy: no raw record */
	assert_int_equal(w.sample(&w, &s), 0);
	fill_sample(&s, frames, 1, 4002, 1, 4 * STARTED_NS);
	s.raw = empty;
	s.weight_count = 9;
	assert_int_equal(w.sample(&w, &s), 0);
	/* The deepest chain on task-sample and the largest dump on task-sample-raw. */
	fill_sample(&s, frames, D9_MAX_STACK_DEPTH, 4001, 0, 5 * STARTED_NS);
	s.raw = huge;
	s.weight_count = 11;
	assert_int_equal(w.sample(&w, &s), 0);
	assert_int_equal(w.finish(&w, &rc), 0);

	read_back(&f);
	check_header(&f, 3);
	walk_data(&f, &p);
	assert_int_equal(p.samples[D9_PERF_EV_SAMPLE], 4);
	assert_int_equal(p.samples[D9_PERF_EV_IDLE], 4);
	assert_int_equal(p.samples[D9_PERF_EV_SAMPLE_RAW], 3);
	assert_int_equal(p.period[D9_PERF_EV_SAMPLE], 4 + 4 + 9 + 11);
	assert_int_equal(p.period[D9_PERF_EV_SAMPLE_RAW], 4 + 9 + 11);
	assert_int_equal(p.nraw, 3);
	check_raw_rec(&p.raw[0], odd, 4);
	assert_int_equal(p.raw[0].size, 4096);
	check_raw_rec(&p.raw[1], empty, 9);
	check_raw_rec(&p.raw[2], huge, 11);
	assert_int_equal(p.raw[2].size, D9_PERF_STACK_DUMP_MAX);
	assert_true(p.max_rec_size <= D9_PERF_MAX_RECORD);
	assert_int_equal(p.other, 0);
	check_features(&f, 3, 2 * STARTED_NS, 5 * STARTED_NS);
	cleanup(&f);
	free(odd);
	free(empty);
	free(huge);
}

/* On-CPU samples go to task-cpu-ns only, park samples never: the file then declares all four
 * events (task-sample-raw empty in fp mode). */
static void write_park_and_cpu(struct file *f)
{
	struct task_frame frames[4];
	struct run_context rc = {.started_ns = STARTED_NS, .realtime_offset_ns = RT_OFFSET_NS};
	struct writer w = {};
	struct task_sample s;

	make_dir(f);
	assert_int_equal(perf_writer_open(test_out_dir(f->dir), &w), 0);
	fill_sample(&s, frames, 3, 4001, 0, 2 * STARTED_NS);
	assert_int_equal(w.sample(&w, &s), 0);
	for (int i = 0; i < 2; i++) {
		fill_sample(&s, frames, 2, 4001, 0, (3 + i) * STARTED_NS);
		s.on_cpu = true;
		s.weight_count = s.weight_idle_ns = 0;
		s.weight_cpu_ns = 5000000;
		assert_int_equal(w.sample(&w, &s), 0);
	}
	assert_int_equal(w.finish(&w, &rc), 0);
}

static void test_cpu_samples(void **state)
{
	struct parsed p;
	struct file f = {};

	(void)state;
	write_park_and_cpu(&f);

	read_back(&f);
	check_header(&f, D9_PERF_NR_EVENTS);
	walk_data(&f, &p);
	assert_int_equal(p.samples[D9_PERF_EV_SAMPLE], 1);
	assert_int_equal(p.samples[D9_PERF_EV_IDLE], 1);
	assert_int_equal(p.samples[D9_PERF_EV_SAMPLE_RAW], 0);
	assert_int_equal(p.samples[D9_PERF_EV_CPU], 2);
	assert_int_equal(p.period[D9_PERF_EV_CPU], 10000000);
	check_features(&f, D9_PERF_NR_EVENTS, 2 * STARTED_NS, 4 * STARTED_NS);
	cleanup(&f);
}

/* Inlined calls (dwarf mode expands them) share the address of the physical frame after them:
 * the callchain holds physical frames only, perf expands inlines itself. */
static void test_inlined_frames_skipped(void **state)
{
	struct task_frame frames[4];
	struct run_context rc = {.started_ns = STARTED_NS};
	const struct d9_perf_header *h;
	struct task_sample s;
	struct writer w = {};
	struct parsed p;
	struct file f = {};
	const uint8_t *r;

	(void)state;
	make_dir(&f);
	assert_int_equal(perf_writer_open(test_out_dir(f.dir), &w), 0);
	fill_sample(&s, frames, 4, 4001, 0, STARTED_NS);
	frames[0].inlined = true; /* inlined into frames[1], at its address */
	frames[1].addr = frames[0].addr;
	frames[2].inlined = true; /* inlined into frames[3] */
	frames[2].addr = frames[3].addr;
	assert_int_equal(w.sample(&w, &s), 0);
	assert_int_equal(w.finish(&w, &rc), 0);
	read_back(&f);
	check_header(&f, 2);
	walk_data(&f, &p);
	assert_int_equal(p.samples[D9_PERF_EV_SAMPLE], 1);
	/* The first sample is task-sample: IDENTIFIER IP TID TIME CPU PERIOD, then the chain. */
	h = (const void *)f.buf;
	r = f.buf + h->data.offset;
	while (u32_at(r) != PERF_RECORD_SAMPLE)
		r += ((const struct perf_event_header *)r)->size;
	r += sizeof(struct perf_event_header);
	assert_int_equal(u64_at(r), D9_PERF_EVENT_ID(D9_PERF_EV_SAMPLE));
	assert_int_equal(u64_at(r + 8), 0x400000);
	assert_int_equal(u64_at(r + 48), 3);
	assert_int_equal(u64_at(r + 56), PERF_CONTEXT_USER);
	assert_int_equal(u64_at(r + 64), 0x400000);
	assert_int_equal(u64_at(r + 72), 0x400030);
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
	assert_int_equal(perf_writer_open(test_out_dir(f.dir), &w), 0);
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
	assert_int_equal(perf_writer_open(test_out_dir(f.dir), &w), 0);
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
	assert_int_equal(perf_writer_open(test_out_dir(f.dir), &w), 0);
	assert_int_equal(w.finish(&w, &rc), 0);
	read_back(&f);
	check_header(&f, 2);
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
	char dir[] = "/tmp/d9-perf-gone-XXXXXX";
	const struct out_dir *od;
	struct writer w = {};

	(void)state;
	assert_non_null(mkdtemp(dir));
	od = test_out_dir(dir);
	assert_non_null(od);
	assert_int_equal(rmdir(dir), 0);
	assert_int_equal(perf_writer_open(od, &w), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_synthetic_samples),
	    cmocka_unit_test(test_raw_stacks),
	    cmocka_unit_test(test_cpu_samples),
	    cmocka_unit_test(test_inlined_frames_skipped),
	    cmocka_unit_test(test_own_maps_and_build_id),
	    cmocka_unit_test(test_abort_removes),
	    cmocka_unit_test(test_no_samples),
	    cmocka_unit_test(test_unwritable_dir),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
