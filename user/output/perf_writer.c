// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * perf.data: a file `perf report`, `perf script` and `perf buildid-list` (perf 6.1 and later)
 * read like one that `perf record` wrote.
 *
 * Events and periods. Two events (attrs) share one sample layout, and every TaskSampleEvent is
 * written once for each (and once more for task-sample-raw, below, when it has a raw stack):
 *   task-sample   period = weight_count:   estimated resumes the sample stands for;
 *   task-idle-ns  period = weight_idle_ns: estimated nanoseconds tasks sat parked there.
 * On-CPU samples (kind cpu) are written to a fourth event only, task-cpu-ns (period =
 * weight_cpu_ns: the clock tick's period), declared in files that have some.
 * perf report's Overhead and "Event count" are sums of periods, so they equal the sums of the
 * same fields in samples.jsonl, per event. Periods must be integers, which the weights are.
 *
 * Raw stacks for perf's own DWARF unwinding (--unwind dwarf). A sample that carries a raw_copy
 * is also written as a third event,
 *   task-sample-raw  period = weight_count,
 * whose records carry PERF_SAMPLE_REGS_USER (abi 64, BP SP IP) and PERF_SAMPLE_STACK_USER (the
 * copied bytes from sp up) like `perf record --call-graph dwarf` writes them, with an empty
 * callchain (nr = 0) and exclude_callchain_user set: perf script and perf report unwind them
 * themselves with the MMAP2 records and the binaries' .eh_frame (perf 6.1 lists inlined frames
 * too). Our own callchain stays on task-sample and task-idle-ns, unchanged. Why not one record
 * with both: perf 6.1 (thread__resolve_callchain) shows the record's callchain and then appends
 * its own unwinding of the dump whenever the attr has REGS_USER|STACK_USER and the dump is not
 * empty; no attr bit or command-line option picks one of the two, so a single record would
 * show every stack twice, ours above perf's. The event exists only in files with raw stacks:
 * the attrs and ids of all three are reserved at open, and finish() declares task-sample-raw
 * only if it has records, so fp-mode files declare two events (their data just starts 152
 * bytes later, after the unused reservation). A dump is capped at D9_PERF_STACK_DUMP_MAX (keeping
 * the end at sp) so the record stays under 64 KiB. task-sample-raw totals equal task-sample's over
 * the samples that had a raw stack, which in dwarf mode is normally all of them: compare the events
 * per (tid, time), never add them up.
 *
 * Task roots. A sample's "task: FUTURE" root frame (absent with --no-task-root) ends its chain
 * at an address that perf_task_dso.h gives each distinct name; finish() writes the ELF file
 * naming those addresses and the MMAP2 record mapping it (perf reads symbols only from files).
 * task-sample-raw has none: perf unwinds it itself.
 *
 * Metadata. Each sample carries PERF_SAMPLE_RAW with a NUL-terminated text such as
 * "worker=0 task_id=12 p=0.0123 epoch=... idle_ns=... capped=0 outcome=pending park=leaf",
 * which perf script prints as a "BPF string" (the events are SOFTWARE/BPF_OUTPUT for that
 * reason), and PERF_SAMPLE_CGROUP with one id per worker whose PERF_RECORD_CGROUP label,
 * "/worker-0/tokio-runtime-w", names the worker and the real comm of the first thread that ran
 * it: `perf report --sort cgroup` groups by worker. COMM records name a thread after the worker
 * it runs ("tokio-w0"; a worker moves between threads with block_in_place, so the name is
 * re-sent with the sample's time when it changes), so `--sort comm` and perf script tell
 * workers apart; each thread's real comm is also recorded at time 0 (perf script
 * --show-task-events shows it).
 *
 * The CPU field is 0: the sampler does not record the CPU.
 *
 * Layout and streaming. The header, the attrs and their ids are written at open, then samples
 * go straight into the data section through a stdio buffer (memory stays bounded). finish()
 * appends COMM (real thread names), MMAP2 (every file-backed mapping of the target) and CGROUP
 * records, all at time 0 so that perf, which sorts every record by time when there is no
 * FINISHED_ROUND, applies them before the first sample; then the feature sections (build ids, host,
 * events, clock), then rewrites the header with the data size and feature bits, and renames the
 * file from perf.data.tmp to perf.data: an interrupted run never leaves a perf.data perf chokes on.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#include "perf_format.h"
#include "perf_task_dso.h"
#include "proc_maps.h"
#include "symbolize.h"
#include "target.h"
#include "util_proc.h"
#include "writer.h"

_Static_assert(sizeof(struct perf_event_attr) >= D9_PERF_ATTR_SIZE, "perf_event_attr too small");
_Static_assert(sizeof(struct d9_perf_header) == 104, "perf file header is 104 bytes");
_Static_assert(sizeof(struct d9_perf_file_attr) == 144, "perf file attr is 144 bytes");

#define SAMPLE_TYPE                                                                                \
	(PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |            \
	 PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD | PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_RAW |          \
	 PERF_SAMPLE_CGROUP)
/* task-sample-raw: the same, plus what perf's DWARF unwinder reads (after RAW, before CGROUP). */
#define RAW_SAMPLE_TYPE (SAMPLE_TYPE | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER)

#define MAX_RECORD D9_PERF_MAX_RECORD
#define RAW_MAX 512
/* Everything of a task-sample-raw record but the stack bytes: header, IDENTIFIER..PERIOD,
 * callchain nr, RAW (u32 size + text), abi + 3 regs, size + dyn_size, CGROUP. */
#define RAW_REC_OVERHEAD (8 + 6 * 8 + 8 + (4 + RAW_MAX + 4) + 4 * 8 + 2 * 8 + 8)
_Static_assert(RAW_REC_OVERHEAD + D9_PERF_STACK_DUMP_MAX <= MAX_RECORD,
	       "a task-sample-raw record fits in 64 KiB");
_Static_assert(D9_PERF_STACK_DUMP_MAX % 8 == 0, "stack dumps are whole u64s");
/* Threads whose worker name was last written; a collision only costs a repeated COMM. */
#define COMM_CACHE 1024

static const char *const event_names[D9_PERF_NR_EVENTS] = {
    [D9_PERF_EV_SAMPLE] = "task-sample",
    [D9_PERF_EV_IDLE] = "task-idle-ns",
    [D9_PERF_EV_SAMPLE_RAW] = "task-sample-raw",
    [D9_PERF_EV_CPU] = "task-cpu-ns",
};

struct perf_writer {
	struct out_file out; /* perf.data.tmp until finish() */
	uint64_t data_offset;
	int err; /* first write error, sticky */
	uint32_t pid;
	int max_worker; /* cgroup labels to write: workers 0..max_worker */
	bool saw_no_worker;
	uint32_t *worker_tid; /* first thread seen running each worker, for its label */
	size_t worker_tid_cap;
	struct {
		uint32_t tid;
		int worker;
	} comm_cache[COMM_CACHE];
	uint64_t nsamples, first_time, last_time;
	bool have_raw; /* a task-sample-raw record was written: the file declares the event */
	bool have_cpu; /* a task-cpu-ns record was written: declared, and task-sample-raw too */
	struct perf_task_dso tasks; /* the "task: FUTURE" root frames' names, by address */
	uint8_t rec[MAX_RECORD];
};

/* Events the file declares: task-sample-raw and task-cpu-ns only when they have records (and
 * task-sample-raw before task-cpu-ns: attrs are declared in order). */
static int nr_events(const struct perf_writer *pw)
{
	return pw->have_cpu   ? D9_PERF_NR_EVENTS
	       : pw->have_raw ? D9_PERF_EV_CPU
			      : D9_PERF_EV_SAMPLE_RAW;
}

/* The events a sample is written to and its period in each: an on-CPU sample only to
 * task-cpu-ns, a park sample to the others (task-sample-raw when it has a raw stack). */
static bool sample_event(const struct task_sample *s, int ev, uint64_t *period)
{
	if (s->on_cpu)
		*period = s->weight_cpu_ns;
	else
		*period = ev == D9_PERF_EV_IDLE ? s->weight_idle_ns : s->weight_count;
	if (ev == D9_PERF_EV_CPU)
		return s->on_cpu;
	return !s->on_cpu && (ev != D9_PERF_EV_SAMPLE_RAW || s->raw);
}

/* Builds one record in pw->rec. */
struct rec {
	uint8_t *buf;
	size_t len;
};

static void put(struct rec *r, const void *p, size_t n)
{
	memcpy(r->buf + r->len, p, n);
	r->len += n;
}

static void put_u64(struct rec *r, uint64_t v)
{
	put(r, &v, sizeof(v));
}

static void put_u32x2(struct rec *r, uint32_t a, uint32_t b)
{
	put(r, &a, sizeof(a));
	put(r, &b, sizeof(b));
}

/* A NUL-terminated string padded with zeros to a multiple of 8. */
static void put_str8(struct rec *r, const char *s, size_t max)
{
	size_t n = strnlen(s, max);
	size_t padded = (n + 1 + 7) & ~(size_t)7;

	memset(r->buf + r->len, 0, padded);
	memcpy(r->buf + r->len, s, n);
	r->len += padded;
}

static void write_bytes(struct perf_writer *pw, const void *p, size_t n)
{
	if (pw->err || !n)
		return;
	if (fwrite(p, 1, n, pw->out.f) != n)
		pw->err = errno ? -errno : -EIO;
}

static void emit(struct perf_writer *pw, struct rec *r, uint32_t type, uint16_t misc)
{
	struct perf_event_header h = {.type = type, .misc = misc, .size = (uint16_t)r->len};

	memcpy(r->buf, &h, sizeof(h));
	write_bytes(pw, r->buf, r->len);
}

static struct rec rec_start(struct perf_writer *pw)
{
	struct rec r = {.buf = pw->rec, .len = sizeof(struct perf_event_header)};

	return r;
}

/* The sample_id_all trailer of non-sample records: TID, TIME, CPU, IDENTIFIER. Time 0 puts the
 * record before every sample once perf sorts by time. */
static void put_id_trailer(struct rec *r, uint32_t pid, uint32_t tid, uint64_t time)
{
	put_u32x2(r, pid, tid);
	put_u64(r, time);
	put_u32x2(r, 0, 0);
	put_u64(r, D9_PERF_EVENT_ID(D9_PERF_EV_SAMPLE));
}

static void fill_attr(struct perf_event_attr *a, int ev)
{
	memset(a, 0, sizeof(*a));
	/* BPF_OUTPUT: perf script prints the RAW payload of these, as a string when it is one. */
	a->type = PERF_TYPE_SOFTWARE;
	a->config = PERF_COUNT_SW_BPF_OUTPUT;
	a->size = D9_PERF_ATTR_SIZE;
	a->sample_period = 1;
	a->sample_type = SAMPLE_TYPE;
	a->exclude_kernel = 1;
	a->exclude_hv = 1;
	a->exclude_callchain_kernel = 1;
	a->sample_id_all = 1;
	a->use_clockid = 1;
	a->clockid = CLOCK_MONOTONIC;
	if (ev == D9_PERF_EV_SAMPLE_RAW) {
		/* As `perf record --call-graph dwarf` sets it: the user part of the chain is for
		 * perf to unwind from the registers and the stack dump. */
		a->sample_type = RAW_SAMPLE_TYPE;
		a->sample_regs_user = D9_PERF_REGS_MASK;
		a->sample_stack_user = D9_PERF_STACK_DUMP_MAX;
		a->exclude_callchain_user = 1;
	}
}

/* Decimal digits of v at p; returns the end. snprintf cost more than the rest of a sample. */
static char *put_dec(char *p, uint64_t v)
{
	char tmp[20];
	int n = 0;

	do
		tmp[n++] = (char)('0' + v % 10);
	while (v /= 10);
	while (n)
		*p++ = tmp[--n];
	return p;
}

static char *put_lit(char *p, const char *s)
{
	size_t n = strlen(s);

	memcpy(p, s, n);
	return p + n;
}

/* A probability in (0, 1] with 9 significant digits, like %.9g for these values. */
static char *put_prob(char *p, double prob)
{
	uint64_t digits;
	int zeros = 0;

	if (!(prob > 0) || prob >= 0.9999999995)
		return put_lit(p, prob > 0 ? "1" : "0");
	/* Scale into [1e8, 1e9): 9 significant digits, after `zeros` leading zeros. */
	while (prob < 0.1 && zeros < 30) {
		prob *= 10;
		zeros++;
	}
	digits = (uint64_t)(prob * 1e9 + 0.5);
	if (digits >= 1000000000ULL) { /* rounded up to the next power of ten */
		digits /= 10;
		if (zeros) {
			zeros--;
		} else {
			return put_lit(p, "1");
		}
	}
	while (digits && digits % 10 == 0)
		digits /= 10;
	p = put_lit(p, "0.");
	while (zeros--)
		*p++ = '0';
	return put_dec(p, digits);
}

static size_t raw_text(char *buf, size_t len, const struct task_sample *s)
{
	char tmp[512], *p = tmp;
	uint64_t poll_ns;
	size_t n;

	p = put_lit(p, "worker=");
	if (s->worker < 0)
		p = put_lit(p, "-1");
	else
		p = put_dec(p, (uint64_t)s->worker);
	p = put_lit(p, " task_id=");
	p = s->task_id_ok ? put_dec(p, s->task_id) : put_lit(p, "none");
	p = put_lit(p, " p=");
	p = put_prob(p, s->prob);
	p = put_lit(p, " epoch=");
	p = put_dec(p, s->epoch);
	p = put_lit(p, " idle_ns=");
	p = put_dec(p, s->idle_known ? s->idle_end_ns - s->idle_start_ns : 0);
	if (task_sample_poll_ns(s, &poll_ns)) {
		p = put_lit(p, " poll_ns=");
		p = put_dec(p, poll_ns);
	}
	p = put_lit(p, s->capped ? " capped=1 outcome=" : " capped=0 outcome=");
	p += snprintf(p, 64, "%.48s", s->outcome ? s->outcome : "unknown");
	p = put_lit(p, " park=");
	p += snprintf(p, 64, "%.48s", s->park_point ? s->park_point : "none");
	if (s->on_cpu)
		p = put_lit(p, " kind=cpu");
	if (s->stack_error) {
		p = put_lit(p, " stack_error=-");
		p = put_dec(p, (uint64_t)(-(int64_t)s->stack_error));
	}
	n = (size_t)(p - tmp);
	if (n >= len)
		n = len - 1;
	memcpy(buf, tmp, n);
	buf[n] = 0;
	return n;
}

static void write_comm(struct perf_writer *pw, uint32_t pid, uint32_t tid, const char *comm,
		       uint64_t time)
{
	struct rec r = rec_start(pw);

	put_u32x2(&r, pid, tid);
	put_str8(&r, comm, 15);
	put_id_trailer(&r, pid, tid, time);
	emit(pw, &r, PERF_RECORD_COMM, 0);
}

/*
 * Names the thread after the worker it runs from this sample on. Workers move between threads
 * (block_in_place hands the worker to another thread), so the name changes over time: a COMM at
 * the sample's time applies to the thread's later samples once perf sorts by time. A thread's
 * samples reach the writer in the order it ran them (nested polls aside), so a change in the
 * stream is a change in time.
 */
static void note_worker_thread(struct perf_writer *pw, const struct task_sample *s)
{
	size_t slot = (s->tid * 2654435761u) % COMM_CACHE;
	char name[24];

	if (pw->comm_cache[slot].tid == s->tid && pw->comm_cache[slot].worker == s->worker)
		return;
	pw->comm_cache[slot].tid = s->tid;
	pw->comm_cache[slot].worker = s->worker;
	if (s->worker >= 0)
		snprintf(name, sizeof(name), "tokio-w%d", s->worker);
	else if (read_comm((int)s->pid, s->tid, name, sizeof(name)))
		snprintf(name, sizeof(name), "unknown");
	write_comm(pw, s->pid, s->tid, name, s->timestamp_ns);
}

static void note_worker_tid(struct perf_writer *pw, const struct task_sample *s)
{
	size_t need = (size_t)s->worker + 1;

	if (need > pw->worker_tid_cap) {
		size_t ncap = need > 2 * pw->worker_tid_cap ? need + 8 : 2 * pw->worker_tid_cap;
		uint32_t *np = realloc(pw->worker_tid, ncap * sizeof(*np));

		if (!np)
			return; /* the label just lacks the thread name */
		memset(np + pw->worker_tid_cap, 0, (ncap - pw->worker_tid_cap) * sizeof(*np));
		pw->worker_tid = np;
		pw->worker_tid_cap = ncap;
	}
	if (!pw->worker_tid[s->worker])
		pw->worker_tid[s->worker] = s->tid;
}

/* PERF_SAMPLE_REGS_USER and PERF_SAMPLE_STACK_USER as the kernel writes them: abi, the
 * registers in ascending bit order, then size, the stack from sp up padded to size, and
 * dyn_size, the bytes actually copied. */
static void put_user_dump(struct rec *r, const struct raw_copy *raw)
{
	uint32_t len = raw->len > D9_PERF_STACK_DUMP_MAX ? D9_PERF_STACK_DUMP_MAX : raw->len;
	uint64_t size = ((uint64_t)len + 7) & ~7ULL;

	put_u64(r, D9_PERF_REGS_ABI_64);
	put_u64(r, raw->bp); /* bit 6 */
	put_u64(r, raw->sp); /* bit 7 */
	put_u64(r, raw->ip); /* bit 8 */
	put_u64(r, size);
	if (!size)
		return; /* the kernel writes no data and no dyn_size for an empty dump */
	memcpy(r->buf + r->len, raw->data, len);
	memset(r->buf + r->len + len, 0, size - len);
	r->len += size;
	put_u64(r, len);
}

static int perf_sample(struct writer *w, const struct task_sample *s)
{
	struct perf_writer *pw = w->priv;
	char raw[RAW_MAX];
	size_t raw_len = raw_text(raw, sizeof(raw), s);
	/* u32 size + text + NUL, padded so the payload ends 8-aligned. */
	uint32_t raw_size = (uint32_t)(((4 + raw_len + 1 + 7) & ~(size_t)7) - 4);
	uint64_t cgroup =
	    s->worker >= 0 ? D9_PERF_CGROUP_WORKER(s->worker) : D9_PERF_CGROUP_NO_WORKER;
	size_t fixed = sizeof(struct perf_event_header) + 8 * 8 + 4 + raw_size + 8;
	/* Physical frames (perf expands inlined calls itself), then the task root. */
	uint64_t addrs[MAX_RECORD / 8];
	size_t nframes = 0;

	if (pw->err)
		return pw->err;
	for (size_t i = 0; i < s->nframes && nframes < MAX_RECORD / 8; i++) {
		if (s->frames[i].task_root)
			addrs[nframes] = perf_task_dso_addr(&pw->tasks, s->frames[i].name);
		else if (!s->frames[i].inlined)
			addrs[nframes] = s->frames[i].addr;
		else
			continue;
		nframes += addrs[nframes] != 0 || !s->frames[i].task_root;
	}
	/* A record is < 64 KiB: keep the leaf end of an absurdly deep chain. */
	if (fixed + (nframes + 1) * 8 > MAX_RECORD)
		nframes = (MAX_RECORD - fixed) / 8 - 1;
	if (s->worker > pw->max_worker)
		pw->max_worker = s->worker;
	if (s->worker < 0)
		pw->saw_no_worker = true;
	else
		note_worker_tid(pw, s);
	note_worker_thread(pw, s);
	if (!pw->pid)
		pw->pid = s->pid;
	if (!pw->nsamples++ || s->timestamp_ns < pw->first_time)
		pw->first_time = s->timestamp_ns;
	if (s->timestamp_ns > pw->last_time)
		pw->last_time = s->timestamp_ns;

	for (int ev = 0; ev < D9_PERF_NR_EVENTS; ev++) {
		bool dump = ev == D9_PERF_EV_SAMPLE_RAW;
		/* perf unwinds the raw event itself: no frames of ours, the chain stays empty. */
		size_t n = dump ? 0 : nframes;
		struct rec r = rec_start(pw);
		uint64_t period;

		if (!sample_event(s, ev, &period))
			continue;
		pw->have_cpu |= ev == D9_PERF_EV_CPU;
		put_u64(&r, D9_PERF_EVENT_ID(ev));
		put_u64(&r, dump ? s->raw->ip : n ? addrs[0] : 0);
		put_u32x2(&r, s->pid, s->tid);
		put_u64(&r, s->timestamp_ns);
		put_u32x2(&r, 0, 0);
		put_u64(&r, period);
		/* Only user frames: mark the context so perf resolves them in the process. */
		put_u64(&r, n ? n + 1 : 0);
		if (n)
			put_u64(&r, PERF_CONTEXT_USER);
		put(&r, addrs, n * sizeof(*addrs));
		put(&r, &raw_size, sizeof(raw_size));
		memset(r.buf + r.len, 0, raw_size);
		memcpy(r.buf + r.len, raw, raw_len);
		r.len += raw_size;
		if (dump) {
			put_user_dump(&r, s->raw);
			pw->have_raw = true;
		}
		put_u64(&r, cgroup);
		emit(pw, &r, PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER);
	}
	if (pw->err)
		fprintf(stderr, "dial9-bpf: failed to write %s/perf.data.tmp: %s\n",
			pw->out.dir->path, strerror(-pw->err));
	return pw->err;
}

/* Every thread's own name at time 0, until its first sample renames it after its worker; the
 * leader's is the process name. */
static void write_comms(struct perf_writer *pw, const struct run_context *rc)
{
	bool leader_named = false;

	for (size_t i = 0; i < rc->nthreads; i++) {
		const struct run_thread *t = &rc->threads[i];

		write_comm(pw, t->pid, t->tid, t->comm[0] ? t->comm : "unknown", 0);
		leader_named |= t->tid == pw->pid;
	}
	if (!leader_named && pw->pid && rc->target)
		write_comm(pw, pw->pid, pw->pid, rc->target->comm, 0);
}

static uint32_t map_prot(const char *perms)
{
	return (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
	       (perms[2] == 'x' ? PROT_EXEC : 0);
}

static void write_mmaps(struct perf_writer *pw, const struct run_context *rc)
{
	const struct proc_map *maps;
	size_t n = 0;

	if (!rc->sym || !pw->pid)
		return;
	maps = symbolizer_maps(rc->sym, &n);
	for (size_t i = 0; maps && i < n; i++) {
		const struct proc_map *m = &maps[i];
		struct rec r;

		/* Files (r--p too: it holds .eh_frame_hdr of PIE binaries) and [vdso]. */
		if (!m->path || (!proc_map_is_file(m) && strcmp(m->path, "[vdso]")))
			continue;
		r = rec_start(pw);
		put_u32x2(&r, pw->pid, pw->pid);
		put_u64(&r, m->start);
		put_u64(&r, m->end - m->start);
		put_u64(&r, m->pgoff);
		put_u32x2(&r, m->dev_major, m->dev_minor);
		put_u64(&r, m->inode);
		put_u64(&r, 0); /* inode generation: unknown */
		put_u32x2(&r, map_prot(m->perms), m->perms[3] == 's' ? MAP_SHARED : MAP_PRIVATE);
		put_str8(&r, m->path, 4095);
		put_id_trailer(&r, pw->pid, pw->pid, 0);
		emit(pw, &r, PERF_RECORD_MMAP2, PERF_RECORD_MISC_USER);
	}
}

/* The file naming the task root frames, and the MMAP2 record that maps it at their addresses:
 * by its absolute path, which perf opens to read the names. */
static void write_task_dso(struct perf_writer *pw)
{
	struct out_file f;
	char link[64], path[PATH_MAX];
	ssize_t len;
	struct rec r;
	int err;

	if (!pw->tasks.n || !pw->pid)
		return;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", pw->out.dir->fd);
	len = readlink(link, path, sizeof(path) - sizeof(PERF_TASK_DSO_FILE) - 1);
	if (len <= 0) {
		fprintf(stderr,
			"dial9-bpf: failed to resolve %s: %s: perf.data has no task roots\n",
			pw->out.dir->path, strerror(errno));
		return;
	}
	snprintf(path + len, sizeof(path) - (size_t)len, "/%s", PERF_TASK_DSO_FILE);
	err = out_file_create(&f, pw->out.dir, PERF_TASK_DSO_FILE, false);
	if (!err && (err = perf_task_dso_write(&pw->tasks, f.f)))
		out_file_discard(&f);
	else if (!err)
		err = out_file_commit(&f);
	if (err) {
		fprintf(stderr,
			"dial9-bpf: failed to write %s/%s: %s: perf.data has no task roots\n",
			pw->out.dir->path, PERF_TASK_DSO_FILE, strerror(-err));
		return;
	}
	r = rec_start(pw);
	put_u32x2(&r, pw->pid, pw->pid);
	put_u64(&r, PERF_TASK_DSO_START);
	put_u64(&r, perf_task_dso_map_len(&pw->tasks));
	put_u64(&r, PERF_TASK_DSO_PGOFF);
	put_u32x2(&r, 0, 0); /* no device or inode: perf goes by the path */
	put_u64(&r, 0);
	put_u64(&r, 0);
	put_u32x2(&r, PROT_READ | PROT_EXEC, MAP_PRIVATE);
	put_str8(&r, path, 4095);
	put_id_trailer(&r, pw->pid, pw->pid, 0);
	emit(pw, &r, PERF_RECORD_MMAP2, PERF_RECORD_MISC_USER);
}

/* "/worker-N/<comm>": the worker to group by, and the real name of the first thread that ran
 * it, which the COMM records replace by the worker's. */
static void cgroup_label(struct perf_writer *pw, char *buf, size_t len,
			 const struct run_context *rc, int worker)
{
	uint32_t tid = (size_t)worker < pw->worker_tid_cap ? pw->worker_tid[worker] : 0;

	snprintf(buf, len, "/worker-%d", worker);
	for (size_t i = 0; tid && i < rc->nthreads; i++) {
		if (rc->threads[i].tid == tid && rc->threads[i].comm[0]) {
			snprintf(buf, len, "/worker-%d/%s", worker, rc->threads[i].comm);
			break;
		}
	}
}

static void write_cgroup(struct perf_writer *pw, uint64_t id, const char *label)
{
	struct rec r = rec_start(pw);

	put_u64(&r, id);
	put_str8(&r, label, 4095);
	put_id_trailer(&r, pw->pid, pw->pid, 0);
	emit(pw, &r, PERF_RECORD_CGROUP, 0);
}

static void write_cgroups(struct perf_writer *pw, const struct run_context *rc)
{
	char label[256];

	if (pw->saw_no_worker)
		write_cgroup(pw, D9_PERF_CGROUP_NO_WORKER, "/no-worker");
	for (int wk = 0; wk <= pw->max_worker; wk++) {
		cgroup_label(pw, label, sizeof(label), rc, wk);
		write_cgroup(pw, D9_PERF_CGROUP_WORKER(wk), label);
	}
}

/* perf's do_write_string(): u32 length including NUL and padding, then the bytes. */
static void feat_string(struct perf_writer *pw, const char *s)
{
	static const char zeros[D9_PERF_NAME_ALIGN];
	size_t n = strlen(s) + 1;
	uint32_t padded =
	    (uint32_t)((n + D9_PERF_NAME_ALIGN - 1) & ~(size_t)(D9_PERF_NAME_ALIGN - 1));

	write_bytes(pw, &padded, sizeof(padded));
	write_bytes(pw, s, n);
	write_bytes(pw, zeros, padded - n);
}

static void feat_u32(struct perf_writer *pw, uint32_t v)
{
	write_bytes(pw, &v, sizeof(v));
}

static void feat_u64(struct perf_writer *pw, uint64_t v)
{
	write_bytes(pw, &v, sizeof(v));
}

static void feat_build_ids(struct perf_writer *pw, const struct run_context *rc)
{
	static const char zeros[D9_PERF_NAME_ALIGN];
	struct sym_module m;
	size_t iter = 0;

	if (!rc->sym)
		return;
	while (!symbolizer_next_module(rc->sym, &iter, &m)) {
		struct perf_event_header h = {
		    .type = D9_PERF_RECORD_HEADER_BUILD_ID,
		    .misc = PERF_RECORD_MISC_USER | D9_PERF_MISC_BUILD_ID_SIZE,
		};
		uint8_t id[24] = {};
		size_t n, padded;
		int32_t pid = -1; /* the host machine */

		if (!m.build_id || !m.path)
			continue;
		memcpy(id, m.build_id, m.build_id_len > 20 ? 20 : m.build_id_len);
		id[20] = (uint8_t)(m.build_id_len > 20 ? 20 : m.build_id_len);
		n = strlen(m.path) + 1;
		padded = (n + D9_PERF_NAME_ALIGN - 1) & ~(size_t)(D9_PERF_NAME_ALIGN - 1);
		h.size = (uint16_t)(D9_PERF_BUILD_ID_REC_SIZE + padded);
		write_bytes(pw, &h, sizeof(h));
		write_bytes(pw, &pid, sizeof(pid));
		write_bytes(pw, id, sizeof(id));
		write_bytes(pw, m.path, n);
		write_bytes(pw, zeros, padded - n);
	}
}

static void feat_cmdline(struct perf_writer *pw)
{
	char buf[4096];
	uint32_t nargs = 0;
	ssize_t len = 0;
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		len = read(fd, buf, sizeof(buf) - 1);
		close(fd);
	}
	if (len <= 0) {
		strcpy(buf, "dial9-bpf");
		len = (ssize_t)strlen(buf) + 1;
	}
	buf[len] = 0;
	for (ssize_t i = 0; i < len; i += (ssize_t)strlen(buf + i) + 1)
		nargs++;
	feat_u32(pw, nargs);
	for (ssize_t i = 0; i < len; i += (ssize_t)strlen(buf + i) + 1)
		feat_string(pw, buf + i);
}

static void feat_event_desc(struct perf_writer *pw)
{
	struct perf_event_attr a;

	feat_u32(pw, (uint32_t)nr_events(pw));
	feat_u32(pw, D9_PERF_ATTR_SIZE);
	for (int ev = 0; ev < nr_events(pw); ev++) {
		fill_attr(&a, ev);
		write_bytes(pw, &a, D9_PERF_ATTR_SIZE);
		feat_u32(pw, 1);
		feat_string(pw, event_names[ev]);
		feat_u64(pw, D9_PERF_EVENT_ID(ev));
	}
}

static void write_feature(struct perf_writer *pw, int feat, const struct run_context *rc)
{
	struct utsname u;
	char host[256] = "unknown";
	struct timespec res = {0, 1};

	if (uname(&u))
		memset(&u, 0, sizeof(u));
	switch (feat) {
	case D9_PERF_FEAT_BUILD_ID:
		feat_build_ids(pw, rc);
		break;
	case D9_PERF_FEAT_HOSTNAME:
		gethostname(host, sizeof(host) - 1);
		feat_string(pw, host);
		break;
	case D9_PERF_FEAT_OSRELEASE:
		feat_string(pw, u.release);
		break;
	case D9_PERF_FEAT_VERSION:
		feat_string(pw, "dial9-bpf " DIAL9_VERSION);
		break;
	case D9_PERF_FEAT_ARCH:
		feat_string(pw, u.machine);
		break;
	case D9_PERF_FEAT_NRCPUS:
		feat_u32(pw, (uint32_t)sysconf(_SC_NPROCESSORS_CONF));
		feat_u32(pw, (uint32_t)sysconf(_SC_NPROCESSORS_ONLN));
		break;
	case D9_PERF_FEAT_CMDLINE:
		feat_cmdline(pw);
		break;
	case D9_PERF_FEAT_EVENT_DESC:
		feat_event_desc(pw);
		break;
	case D9_PERF_FEAT_SAMPLE_TIME:
		feat_u64(pw, pw->first_time);
		feat_u64(pw, pw->last_time);
		break;
	case D9_PERF_FEAT_CLOCKID:
		/* perf stores the clock's resolution here; the clock itself is in the attr. */
		clock_getres(CLOCK_MONOTONIC, &res);
		feat_u64(pw, (uint64_t)res.tv_sec * 1000000000ULL + (uint64_t)res.tv_nsec);
		break;
	case D9_PERF_FEAT_CLOCK_DATA:
		/* version, clockid, then one instant on both clocks: perf script -F +tod. */
		feat_u32(pw, 1);
		feat_u32(pw, CLOCK_MONOTONIC);
		feat_u64(pw, rc->started_ns + rc->realtime_offset_ns);
		feat_u64(pw, rc->started_ns);
		break;
	}
}

static const int features[] = {
    D9_PERF_FEAT_BUILD_ID, D9_PERF_FEAT_HOSTNAME,   D9_PERF_FEAT_OSRELEASE,
    D9_PERF_FEAT_VERSION,  D9_PERF_FEAT_ARCH,	    D9_PERF_FEAT_NRCPUS,
    D9_PERF_FEAT_CMDLINE,  D9_PERF_FEAT_EVENT_DESC, D9_PERF_FEAT_SAMPLE_TIME,
    D9_PERF_FEAT_CLOCKID,  D9_PERF_FEAT_CLOCK_DATA,
};
#define NR_FEATURES (sizeof(features) / sizeof(features[0]))

static int seek_to(struct perf_writer *pw, uint64_t off)
{
	if (!pw->err && fseeko(pw->out.f, (off_t)off, SEEK_SET))
		pw->err = -errno;
	return pw->err;
}

/*
 * The header as it stands: a placeholder (no data, no features) until finish(). Room for every
 * attr and id is reserved before the data, but the header declares task-sample-raw only once
 * it has records; perf reads attrs, ids and data at their offsets and skips the gap.
 */
static void write_header(struct perf_writer *pw, uint64_t data_size, const uint64_t feat[4])
{
	struct d9_perf_file_attr fa[D9_PERF_NR_EVENTS] = {};
	uint64_t ids[D9_PERF_NR_EVENTS] = {};
	struct d9_perf_header h = {
	    .size = sizeof(h),
	    .attr_size = sizeof(fa[0]),
	    .attrs = {sizeof(h), (uint64_t)nr_events(pw) * sizeof(fa[0])},
	    .data = {pw->data_offset, data_size},
	};
	struct perf_event_attr a;

	memcpy(h.magic, D9_PERF_MAGIC, sizeof(h.magic));
	memcpy(h.features, feat, sizeof(h.features));
	for (int ev = 0; ev < nr_events(pw); ev++) { /* the reserved rest stays zero */
		fill_attr(&a, ev);
		memcpy(fa[ev].attr, &a, D9_PERF_ATTR_SIZE);
		fa[ev].ids.offset = sizeof(h) + sizeof(fa) + (uint64_t)ev * sizeof(ids[0]);
		fa[ev].ids.size = sizeof(ids[0]);
		ids[ev] = D9_PERF_EVENT_ID(ev);
	}
	write_bytes(pw, &h, sizeof(h));
	write_bytes(pw, fa, sizeof(fa));
	write_bytes(pw, ids, sizeof(ids));
}

static int perf_finish(struct writer *w, const struct run_context *rc)
{
	struct perf_writer *pw = w->priv;
	struct d9_perf_section sec[NR_FEATURES] = {};
	uint64_t feat[4] = {}, data_size = 0, table;
	int err;

	if (!pw->pid && rc->target)
		pw->pid = (uint32_t)rc->target->pid;
	if (!pw->err) {
		write_comms(pw, rc);
		write_mmaps(pw, rc);
		write_task_dso(pw);
		write_cgroups(pw, rc);
		/* perf takes an empty data section for a crashed perf record: give it a no-op. */
		if ((uint64_t)ftello(pw->out.f) == pw->data_offset) {
			struct rec r = rec_start(pw);

			emit(pw, &r, D9_PERF_RECORD_FINISHED_ROUND, 0);
		}
	}
	if (!pw->err && fflush(pw->out.f))
		pw->err = -errno;
	if (!pw->err) {
		/* Features start right where the data ends: perf finds them there. */
		table = (uint64_t)ftello(pw->out.f);
		data_size = table - pw->data_offset;
		write_bytes(pw, sec, sizeof(sec));
		for (size_t i = 0; i < NR_FEATURES && !pw->err; i++) {
			sec[i].offset = (uint64_t)ftello(pw->out.f);
			write_feature(pw, features[i], rc);
			sec[i].size = (uint64_t)ftello(pw->out.f) - sec[i].offset;
			feat[features[i] / 64] |= 1ULL << (features[i] % 64);
		}
		if (!seek_to(pw, table))
			write_bytes(pw, sec, sizeof(sec));
		if (!seek_to(pw, 0))
			write_header(pw, data_size, feat);
	}
	if (pw->err) {
		err = pw->err;
		fprintf(stderr, "dial9-bpf: failed to write %s/perf.data: %s\n", pw->out.dir->path,
			strerror(-err));
		out_file_discard(&pw->out);
	} else {
		err = out_file_commit(&pw->out);
	}
	perf_task_dso_free(&pw->tasks);
	free(pw->worker_tid);
	free(pw);
	w->priv = NULL;
	return err;
}

static void perf_abort(struct writer *w)
{
	struct perf_writer *pw = w->priv;

	out_file_discard(&pw->out);
	perf_task_dso_free(&pw->tasks);
	free(pw->worker_tid);
	free(pw);
	w->priv = NULL;
}

int perf_writer_open(const struct out_dir *dir, struct writer *w)
{
	static const uint64_t no_features[4];
	struct perf_writer *pw = calloc(1, sizeof(*pw));
	int err;

	if (!pw)
		return -ENOMEM;
	pw->max_worker = -1;
	err = out_file_create(&pw->out, dir, "perf.data", false);
	if (err) {
		fprintf(stderr, "dial9-bpf: failed to create %s/perf.data.tmp: %s\n", dir->path,
			strerror(-err));
		free(pw);
		return err;
	}
	pw->data_offset = sizeof(struct d9_perf_header) +
			  D9_PERF_NR_EVENTS * (sizeof(struct d9_perf_file_attr) + sizeof(uint64_t));
	write_header(pw, 0, no_features);
	if (pw->err) {
		err = pw->err;
		fprintf(stderr, "dial9-bpf: failed to write %s/perf.data.tmp: %s\n", dir->path,
			strerror(-err));
		out_file_discard(&pw->out);
		free(pw);
		return err;
	}
	w->format = "perf";
	w->priv = pw;
	w->sample = perf_sample;
	w->finish = perf_finish;
	w->abort = perf_abort;
	return 0;
}
