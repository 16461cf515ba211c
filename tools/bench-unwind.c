// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * bench-unwind: DWARF unwinding throughput and peak memory of dial9-bpf's unwinder
 * (user/stacks/unwind_dwarf.c) on the raw stacks of a dial9-bpf perf.data, for comparison with
 * `perf script` on the same file (bench/RESULTS.md, "Unwinding").
 *
 *   bench-unwind [-I] [-n REPEAT] [-w RAW_ONLY_OUT] PERF_DATA PID
 *
 * Reads every task-sample-raw record (PERF_SAMPLE_REGS_USER BP SP IP and PERF_SAMPLE_STACK_USER,
 * see user/output/perf_writer.c) into memory, opens one unwinder on the LIVE process PID (the
 * unwinder reads its maps and binaries; the records must come from that process), then unwinds
 * every record with unwinder_unwind() and expands each pc with unwinder_inline_frames(), as
 * `perf script --inline` does. Only the unwinding loop is timed. The first pass over the set
 * is reported on its own ("cold": CFI and DWARF parsed, inline cache filled, what a one-shot
 * run pays), then REPEAT more passes ("warm"). Peak RSS is ru_maxrss of this process, the
 * records in memory included (their size is printed).
 *
 * -I skips unwinder_inline_frames() (physical frames only, like perf script --no-inline).
 *
 * -w writes a copy of PERF_DATA that holds only the task-sample-raw samples (the task-sample and
 * task-idle-ns samples dropped, every other record and the feature sections kept), so that
 * `perf script` on it does only the raw-stack work.
 *
 * Built against every user object but main.o (`make build/bench-unwind`).
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <inttypes.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include "perf_format.h"
#include "unwind_dwarf.h"
#include "util_clock.h"

#define MAX_PCS 128 /* perf's default --max-stack is 127 */
#define MAX_INLINE 64

struct raw_rec {
	struct unwind_regs regs;
	const uint8_t *stack;
	size_t stack_len;
};

static double now_s(void)
{
	return (double)mono_ns() / 1e9;
}

static uint8_t *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
		goto out;
	buf = malloc((size_t)n ? (size_t)n : 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	*len = (size_t)n;
out:
	fclose(f);
	return buf;
}

static uint64_t get_u64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

/*
 * Parses one task-sample-raw record body (after the perf_event_header); layout of
 * perf_writer.c: IDENTIFIER IP TID TIME CPU PERIOD CALLCHAIN RAW REGS_USER STACK_USER CGROUP.
 */
static int parse_raw(const uint8_t *p, size_t len, struct raw_rec *r)
{
	size_t off = 6 * 8;
	uint64_t nr, abi, size;
	uint32_t raw_size;

	if (off + 8 > len)
		return -1;
	nr = get_u64(p + off);
	off += 8 + nr * 8;
	if (off + 4 > len)
		return -1;
	memcpy(&raw_size, p + off, 4);
	off += 4 + raw_size;
	if (off + 8 > len)
		return -1;
	abi = get_u64(p + off);
	off += 8;
	if (!abi)
		return -1;
	if (off + 4 * 8 > len)
		return -1;
	r->regs.bp = get_u64(p + off);
	r->regs.sp = get_u64(p + off + 8);
	r->regs.ip = get_u64(p + off + 16);
	size = get_u64(p + off + 24);
	off += 32;
	if (!size) {
		r->stack = NULL;
		r->stack_len = 0;
		return 0;
	}
	if (off + size + 8 > len)
		return -1;
	r->stack = p + off;
	r->stack_len = get_u64(p + off + size);
	if (r->stack_len > size)
		return -1;
	return 0;
}

/* Rewrites the file without the task-sample and task-idle-ns samples (see the top). */
static int write_raw_only(const char *out, const uint8_t *buf, size_t len,
			  const struct d9_perf_header *h)
{
	uint8_t *o = malloc(len);
	size_t w, ds = h->data.offset, de = h->data.offset + h->data.size;
	uint64_t delta;
	struct d9_perf_header nh;
	int nfeat = 0;
	FILE *f;

	if (!o)
		return -1;
	memcpy(o, buf, ds);
	w = ds;
	for (size_t off = ds; off + sizeof(struct perf_event_header) <= de;) {
		const struct perf_event_header *eh = (const void *)(buf + off);

		if (!eh->size)
			break;
		if (!(eh->type == PERF_RECORD_SAMPLE &&
		      get_u64(buf + off + sizeof(*eh)) !=
			  D9_PERF_EVENT_ID(D9_PERF_EV_SAMPLE_RAW))) {
			memcpy(o + w, buf + off, eh->size);
			w += eh->size;
		}
		off += eh->size;
	}
	delta = de - w;
	/* The feature section table follows the data, then the payloads: shift both. */
	memcpy(o + w, buf + de, len - de);
	for (int i = 0; i < 256; i++)
		if (h->features[i / 64] & (1ULL << (i % 64)))
			nfeat++;
	for (int i = 0; i < nfeat; i++) {
		struct d9_perf_section s;

		memcpy(&s, o + w + i * sizeof(s), sizeof(s));
		s.offset -= delta;
		memcpy(o + w + i * sizeof(s), &s, sizeof(s));
	}
	nh = *h;
	nh.data.size = w - ds;
	memcpy(o, &nh, sizeof(nh));
	f = fopen(out, "wb");
	if (!f || fwrite(o, 1, len - delta, f) != len - delta || fclose(f)) {
		free(o);
		return -1;
	}
	free(o);
	return 0;
}

struct pass {
	double secs;
	uint64_t pcs, frames, inlined, nodebug;
	uint64_t stops[UNWIND_NSTOPS];
};

static bool no_inline; /* -I: unwinder_unwind() only, like perf script --no-inline */

static void run_pass(struct unwinder *u, const struct raw_rec *recs, size_t n, struct pass *p)
{
	uint64_t pcs[MAX_PCS];
	struct inline_frame inl[MAX_INLINE];
	double t0;

	memset(p, 0, sizeof(*p));
	t0 = now_s();
	for (size_t i = 0; i < n; i++) {
		size_t npcs = 0;
		enum unwind_stop stop;

		unwinder_unwind(u, &recs[i].regs, recs[i].stack, recs[i].stack_len, pcs, MAX_PCS,
				&npcs, &stop);
		p->stops[stop]++;
		p->pcs += npcs;
		if (no_inline)
			p->frames += npcs;
		for (size_t k = 0; k < npcs && !no_inline; k++) {
			size_t ni = 0;

			unwinder_inline_frames(u, pcs[k], k > 0, inl, MAX_INLINE, &ni);
			if (!ni) {
				p->nodebug++;
				p->frames++; /* still one frame, named from the symbol table */
				continue;
			}
			p->frames += ni;
			for (size_t j = 0; j < ni; j++)
				p->inlined += inl[j].inlined;
		}
	}
	p->secs = now_s() - t0;
}

static void print_pass(const char *name, const struct pass *p, size_t n)
{
	printf("%-5s %8zu stacks %8.3f s %10.0f stacks/s %8.2f us/stack  %5.1f pcs/stack  "
	       "%5.1f frames/stack (%4.1f inlined, %4.1f pcs without debug info)\n",
	       name, n, p->secs, (double)n / p->secs, p->secs * 1e6 / (double)n,
	       (double)p->pcs / (double)n, (double)p->frames / (double)n,
	       (double)p->inlined / (double)n, (double)p->nodebug / (double)n);
}

/* The task-sample-raw records of a perf.data held in buf. Returns them (NULL with *nrecs set
 * when out of memory), with the count of every sample and the stack bytes of the records. */
static struct raw_rec *collect_raw(const uint8_t *buf, const struct d9_perf_header *h,
				   size_t *nrecs, size_t *nsamples, size_t *stack_bytes)
{
	struct raw_rec *recs = NULL;
	size_t cap = 0;

	for (size_t off = h->data.offset;
	     off + sizeof(struct perf_event_header) <= h->data.offset + h->data.size;) {
		const struct perf_event_header *eh = (const void *)(buf + off);

		if (eh->size < sizeof(*eh))
			break;
		if (eh->type == PERF_RECORD_SAMPLE && eh->size >= sizeof(*eh) + 8) {
			const uint8_t *body = buf + off + sizeof(*eh);

			(*nsamples)++;
			if (get_u64(body) == D9_PERF_EVENT_ID(D9_PERF_EV_SAMPLE_RAW)) {
				if (*nrecs == cap) {
					cap = cap ? 2 * cap : 1024;
					recs = realloc(recs, cap * sizeof(*recs));
					if (!recs)
						return NULL;
				}
				if (!parse_raw(body, eh->size - sizeof(*eh), &recs[*nrecs])) {
					*stack_bytes += recs[*nrecs].stack_len;
					(*nrecs)++;
				}
			}
		}
		off += eh->size;
	}
	return recs;
}

/* repeat passes over the records with the unwinder's caches warm; prints their mean. */
static void warm_passes(struct unwinder *u, const struct raw_rec *recs, size_t nrecs, int repeat)
{
	struct pass warm, sum = {};

	for (int r = 0; r < repeat; r++) {
		run_pass(u, recs, nrecs, &warm);
		sum.secs += warm.secs;
		sum.pcs += warm.pcs;
		sum.frames += warm.frames;
		sum.inlined += warm.inlined;
		sum.nodebug += warm.nodebug;
	}
	if (repeat <= 0)
		return;
	sum.pcs /= (uint64_t)repeat;
	sum.frames /= (uint64_t)repeat;
	sum.inlined /= (uint64_t)repeat;
	sum.nodebug /= (uint64_t)repeat;
	sum.secs /= repeat;
	print_pass("warm", &sum, nrecs);
	printf("      (mean of %d passes)\n", repeat);
}

int main(int argc, char **argv)
{
	int repeat = 10, opt, pid;
	const char *raw_out = NULL;
	uint8_t *buf;
	size_t len, nrecs = 0, nsamples = 0, stack_bytes = 0;
	struct raw_rec *recs = NULL;
	struct d9_perf_header h;
	struct unwinder *u;
	struct pass cold;
	struct rusage ru;
	double t0, t_new;

	while ((opt = getopt(argc, argv, "In:w:h")) != -1) {
		switch (opt) {
		case 'n':
			repeat = atoi(optarg);
			break;
		case 'I':
			no_inline = true;
			break;
		case 'w':
			raw_out = optarg;
			break;
		default:
			fprintf(stderr,
				"usage: %s [-I] [-n REPEAT] [-w RAW_ONLY_OUT] PERF_DATA PID\n",
				argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	if (argc - optind != 2) {
		fprintf(stderr, "usage: %s [-I] [-n REPEAT] [-w RAW_ONLY_OUT] PERF_DATA PID\n",
			argv[0]);
		return 2;
	}
	pid = atoi(argv[optind + 1]);
	buf = read_file(argv[optind], &len);
	if (!buf || len < sizeof(h)) {
		fprintf(stderr, "bench-unwind: cannot read %s\n", argv[optind]);
		return 1;
	}
	memcpy(&h, buf, sizeof(h));
	if (memcmp(h.magic, D9_PERF_MAGIC, 8) || h.data.offset + h.data.size > len) {
		fprintf(stderr, "bench-unwind: %s is not a perf.data\n", argv[optind]);
		return 1;
	}
	recs = collect_raw(buf, &h, &nrecs, &nsamples, &stack_bytes);
	if (!recs && nrecs)
		return 1;
	printf("%s: %zu samples, %zu task-sample-raw records, %.1f KiB of stack each on average "
	       "(file %.1f MiB, held in memory)\n",
	       argv[optind], nsamples, nrecs,
	       nrecs ? (double)stack_bytes / 1024.0 / (double)nrecs : 0.0, (double)len / 1048576.0);
	if (raw_out) {
		if (write_raw_only(raw_out, buf, len, &h)) {
			fprintf(stderr, "bench-unwind: cannot write %s\n", raw_out);
			return 1;
		}
		printf("wrote %s: the task-sample-raw samples only\n", raw_out);
	}
	if (!nrecs)
		return 1;

	t0 = now_s();
	u = unwinder_new(pid);
	t_new = now_s() - t0;
	if (!u) {
		fprintf(stderr, "bench-unwind: unwinder_new(%d): %s (the target must be alive)\n",
			pid, strerror(errno));
		return 1;
	}
	printf("unwinder_new(%d): %.3f s, %zu modules\n", pid, t_new, unwinder_nmodules(u));

	run_pass(u, recs, nrecs, &cold);
	print_pass("cold", &cold, nrecs);
	warm_passes(u, recs, nrecs, repeat);
	printf("stops:");
	for (int s = 0; s < UNWIND_NSTOPS; s++)
		if (cold.stops[s])
			printf(" %s=%" PRIu64, unwind_stop_name(s), cold.stops[s]);
	printf("\n");
	getrusage(RUSAGE_SELF, &ru);
	printf("peak RSS %.1f MiB (file in memory: %.1f MiB)\n", (double)ru.ru_maxrss / 1024.0,
	       (double)len / 1048576.0);
	printf("cold total incl. unwinder_new: %.3f s = %.2f us/stack\n", t_new + cold.secs,
	       (t_new + cold.secs) * 1e6 / (double)nrecs);
	unwinder_free(u);
	free(recs);
	free(buf);
	return 0;
}
