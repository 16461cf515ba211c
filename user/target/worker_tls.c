// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Worker identity of threads already running at the attach: see worker_tls.h. */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "collector.h"
#include "demangle.h"
#include "elf_file.h"
#include "json.h"
#include "proc_maps.h"
#include "sampler.skel.h"
#include "target.h"
#include "util_clock.h"
#include "worker_tls.h"

/* Words read of a TLS variable (context::CONTEXT is ~13) and of a scheduler context (the
 * Arc<Worker> sits among its first few words, after an enum tag in newer releases). */
#define WT_TLS_WORDS 32
#define WT_CTX_WORDS 16
#define WT_MAX_SYMS 8
#define WT_USER_MIN 0x10000ULL
#define WT_USER_END 0x800000000000ULL
/* Arc<Worker>: one strong reference per thread running it (two during a handoff), no Weak. */
#define WT_MAX_STRONG 64
#define WT_MAX_INDEX 4096
#define WT_MAX_REFS (1ULL << 24)
#define WT_STACK_NEAR (1ULL << 20)
/* Words of a multi_thread worker context from its Arc<Worker> on: the core's RefCell and the
 * deferred wakers' RefCell<Vec>; the stack beyond holds other frames' locals. */
#define WT_CTX_FIELDS 8

/* Tokio's thread-local pointer to the running worker's context, newest last: tried in order. */
static const char *const tls_vars[] = {
    "tokio::runtime::scheduler::multi_thread::worker::CURRENT",
    "tokio::runtime::thread_pool::worker::CURRENT",
    "tokio::runtime::context::CONTEXT",
};

struct tls_sym {
	int rank;
	uint64_t value, size;
	char name[160];
};

struct tls_image {
	uint64_t vaddr, memsz, align;
	struct tls_sym syms[WT_MAX_SYMS];
	size_t nsyms;
};

void worker_tls_prepare(struct sampler_bpf *skel)
{
	bpf_program__set_expected_attach_type(skel->progs.thread_regs, BPF_TRACE_ITER);
}

int64_t worker_tls_tp_offset(uint64_t st_value, uint64_t memsz, uint64_t align, uint64_t vaddr)
{
	uint64_t a = align > 1 ? align : 1;
	/* glibc's _dl_determine_tlsoffset for the first module (TLS_TCB_AT_TP). */
	uint64_t firstbyte = (0 - (vaddr & (a - 1))) & (a - 1);
	uint64_t off = (memsz - firstbyte + a - 1) / a * a + firstbyte;

	return (int64_t)st_value - (int64_t)off;
}

static int tls_var_rank(const char *demangled)
{
	for (size_t i = 0; i < sizeof(tls_vars) / sizeof(tls_vars[0]); i++) {
		size_t n = strlen(tls_vars[i]);

		if (!strncmp(demangled, tls_vars[i], n) &&
		    (demangled[n] == ':' || demangled[n] == 0))
			return (int)i;
	}
	return -1;
}

static bool add_sym(const struct elf_sym *s, void *ctx)
{
	struct tls_image *img = ctx;
	char *d = strstr(s->name, "tokio") ? demangle(s->name) : NULL;
	int rank = d ? tls_var_rank(d) : -1;

	if (rank >= 0 && s->size >= 8 && img->nsyms < WT_MAX_SYMS) {
		struct tls_sym *t = &img->syms[img->nsyms++];

		t->rank = rank;
		t->value = s->addr;
		t->size = s->size;
		snprintf(t->name, sizeof(t->name), "%s", d);
	}
	free(d);
	return false;
}

static int by_rank(const void *a, const void *b)
{
	return ((const struct tls_sym *)a)->rank - ((const struct tls_sym *)b)->rank;
}

/* The executable's PT_TLS segment and Tokio's TLS variables in it, named in the symbols file
 * (the executable, or its separate debug file); 0 or a negative errno. */
static int read_tls_image(const char *exe, const char *symbols, struct tls_image *img)
{
	int fd = open(exe, O_RDONLY | O_CLOEXEC);
	size_t nph = 0;
	Elf *e;

	memset(img, 0, sizeof(*img));
	if (fd < 0)
		return -errno;
	elf_version(EV_CURRENT);
	e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (e && !elf_getphdrnum(e, &nph)) {
		for (size_t i = 0; i < nph; i++) {
			GElf_Phdr ph;

			if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_TLS) {
				img->vaddr = ph.p_vaddr;
				img->memsz = ph.p_memsz;
				img->align = ph.p_align;
			}
		}
	}
	elf_end(e);
	close(fd);
	if (img->memsz) {
		elf_symtab_each(symbols, STT_TLS, add_sym, img);
		qsort(img->syms, img->nsyms, sizeof(img->syms[0]), by_rank);
	}
	return 0;
}

/* The target's memory, and why the last read of it failed. */
struct target_mem {
	int pid;
	int err;
};

static bool read_target(void *ctx, uint64_t addr, void *buf, size_t len)
{
	struct target_mem *m = ctx;
	struct iovec local = {.iov_base = buf, .iov_len = len};
	struct iovec remote = {.iov_base = (void *)(uintptr_t)addr, .iov_len = len};
	ssize_t r = process_vm_readv(m->pid, &local, 1, &remote, 1, 0);

	if (r != (ssize_t)len)
		m->err = r < 0 ? errno : EIO;
	return r == (ssize_t)len;
}

static bool user_ptr(uint64_t p)
{
	return p >= WT_USER_MIN && p < WT_USER_END && !(p & 7);
}

/* An ArcInner<T>: plausible strong and weak counts at the pointer. */
static bool arc_like(wt_read_fn rd, void *ctx, uint64_t p)
{
	uint64_t c[2];

	return user_ptr(p) && rd(ctx, p, c, sizeof(c)) && c[0] >= 1 && c[0] < WT_MAX_REFS &&
	       c[1] >= 1 && c[1] < WT_MAX_REFS;
}

bool worker_tls_worker_at(wt_read_fn rd, void *ctx, uint64_t arc, uint64_t *handle, uint64_t *index)
{
	uint64_t w[5], rest[2];
	int h = -1, n = 0;

	if (!user_ptr(arc) || !rd(ctx, arc, w, sizeof(w)))
		return false;
	if (w[0] < 1 || w[0] > WT_MAX_STRONG || w[1] != 1)
		return false;
	/* Worker {handle, index, core} in an order Rust chose: one Arc, one small index, and
	 * the core slot, empty (0) while a thread runs the worker, else a pointer. */
	for (int k = 2; k < 5; k++) {
		if (h < 0 && arc_like(rd, ctx, w[k]))
			h = k;
		else if (n < 2)
			rest[n++] = w[k];
	}
	if (h < 0 || n != 2)
		return false;
	if (rest[0] < WT_MAX_INDEX && (rest[0] || rest[1] >= WT_MAX_INDEX) &&
	    (rest[1] == 0 || user_ptr(rest[1]))) {
		*index = rest[0];
	} else if (rest[1] < WT_MAX_INDEX && (rest[0] == 0 || user_ptr(rest[0]))) {
		*index = rest[1];
	} else {
		return false;
	}
	*handle = w[h];
	return true;
}

/* Distinct workers found at (i, j); 0 when two of one runtime claim the same index. */
static size_t score(const struct wt_found *f, size_t n, uint16_t i, uint16_t j, size_t *threads)
{
	size_t distinct = 0;

	*threads = 0;
	for (size_t a = 0; a < n; a++) {
		bool first = true;

		if (f[a].i != i || f[a].j != j)
			continue;
		++*threads;
		for (size_t b = 0; b < a; b++) {
			if (f[b].i != i || f[b].j != j)
				continue;
			if (f[b].arc == f[a].arc)
				first = false;
			else if (f[b].handle == f[a].handle && f[b].index == f[a].index)
				return 0;
		}
		distinct += first;
	}
	return distinct;
}

size_t worker_tls_choose(const struct wt_found *f, size_t n, uint16_t *bi, uint16_t *bj)
{
	size_t best = 0, best_threads = 0;

	for (size_t a = 0; a < n; a++) {
		size_t threads, s = score(f, n, f[a].i, f[a].j, &threads);
		bool lower = f[a].i < *bi || (f[a].i == *bi && f[a].j < *bj);

		if (s > best || (s && s == best && threads > best_threads) ||
		    (s && s == best && threads == best_threads && lower)) {
			best = s;
			best_threads = threads;
			*bi = f[a].i;
			*bj = f[a].j;
		}
	}
	return best;
}

struct found_list {
	struct wt_found *v;
	size_t n, cap;
};

static int push_found(struct found_list *l, const struct wt_found *x)
{
	if (l->n == l->cap) {
		size_t ncap = l->cap ? l->cap * 2 : 32;
		void *np = realloc(l->v, ncap * sizeof(*l->v));

		if (!np)
			return -ENOMEM;
		l->v = np;
		l->cap = ncap;
	}
	l->v[l->n++] = *x;
	return 0;
}

/* The thread's stack: the mapping holding its last user sp the kernel saw. That sp may be
 * older than worker::run's frame (a thread woken from the blocking pool runs without entering
 * the kernel for a while), so the context is looked for in the whole mapping, not above sp. */
static void stack_bounds(const struct proc_map *maps, size_t nmaps, uint64_t sp, uint64_t *lo,
			 uint64_t *hi)
{
	const struct proc_map *m = sp ? proc_maps_find(maps, nmaps, sp) : NULL;

	*lo = m ? m->start : WT_USER_MIN;
	*hi = m ? m->end : WT_USER_END;
}

/* Every (i, j) of one thread that reaches something shaped like a worker. Returns whether its
 * TLS variable could be read, or -ENOMEM. */
static int scan_thread(struct target_mem *mem, const struct d9_thread_regs *th,
		       const uint64_t stack[2], uint64_t var, uint64_t size, struct found_list *out)
{
	uint64_t obj[WT_TLS_WORDS], cx[WT_CTX_WORDS];
	size_t words = size / 8 < WT_TLS_WORDS ? size / 8 : WT_TLS_WORDS;
	struct wt_found f = {.tid = th->tid};

	if (!th->fsbase || !read_target(mem, var, obj, words * 8))
		return 0;
	for (size_t i = 0; i < words; i++) {
		if (!user_ptr(obj[i]) || obj[i] < stack[0] || obj[i] >= stack[1] ||
		    !read_target(mem, obj[i], cx, sizeof(cx)))
			continue;
		for (size_t j = 0; j < WT_CTX_WORDS; j++) {
			if (!worker_tls_worker_at(read_target, mem, cx[j], &f.handle, &f.index))
				continue;
			f.i = (uint16_t)i;
			f.j = (uint16_t)j;
			f.arc = cx[j];
			if (push_found(out, &f))
				return -ENOMEM;
		}
	}
	return 1;
}

/* Every thread of the target through the thread_regs iterator; a negative errno on failure. */
static int list_threads(struct sampler_bpf *skel, int pid, struct d9_thread_regs **out, size_t *n)
{
	union bpf_iter_link_info info = {.task.pid = (uint32_t)pid};
	LIBBPF_OPTS(bpf_iter_attach_opts, opts, .link_info = &info, .link_info_len = sizeof(info));
	struct bpf_link *link = bpf_program__attach_iter(skel->progs.thread_regs, &opts);
	size_t cap = 0, len = 0;
	char *buf = NULL;
	int fd, err = 0;
	ssize_t r;

	if (!link)
		return -errno;
	fd = bpf_iter_create(bpf_link__fd(link));
	if (fd < 0)
		err = -errno;
	while (!err) {
		if (cap - len < 4096) {
			void *np = realloc(buf, cap += 16384);

			if (!np) {
				err = -ENOMEM;
				break;
			}
			buf = np;
		}
		r = read(fd, buf + len, cap - len);
		if (r < 0 && errno != EINTR)
			err = -errno;
		if (r == 0)
			break;
		len += r > 0 ? (size_t)r : 0;
	}
	if (fd >= 0)
		close(fd);
	bpf_link__destroy(link);
	*out = (struct d9_thread_regs *)buf;
	*n = err ? 0 : len / sizeof(**out);
	return err;
}

static void note_worker(struct sampler_bpf *skel, struct collector *c, const struct wt_found *f)
{
	if (bpf_map__update_elem(skel->maps.tls_workers, &f->tid, sizeof(f->tid), &f->arc,
				 sizeof(f->arc), BPF_ANY)) {
		fprintf(stderr, "dial9-bpf: failed to key thread %u by its worker: %s\n", f->tid,
			strerror(errno));
		return;
	}
	collector_note_tls_worker(c, f->arc, f->tid);
}

/* Every candidate of every thread for the TLS variable at tp + off; the threads whose
 * variable could be read go to out->readable. */
static int scan_threads(struct target_mem *mem, int64_t off, uint64_t size,
			const struct d9_thread_regs *th, size_t nth, struct found_list *l,
			struct worker_tls *out)
{
	struct proc_map *maps = NULL;
	size_t nmaps = 0;
	int r = 0;

	if (proc_maps_read(mem->pid, &maps, &nmaps))
		nmaps = 0;
	out->readable = 0;
	for (size_t k = 0; k < nth && r >= 0; k++) {
		uint64_t stack[2];

		stack_bounds(maps, nmaps, th[k].sp, &stack[0], &stack[1]);
		r = scan_thread(mem, &th[k], stack, th[k].fsbase + (uint64_t)off, size, l);
		out->readable += r > 0;
	}
	proc_maps_free(maps, nmaps);
	return r < 0 ? r : 0;
}

/*
 * The word of the scheduler context holding the worker's Box<Core> (core: RefCell<Option<Box<
 * Core>>>; Tokio keeps the core there while it polls a task and while it parks): the word
 * nearest the Arc<Worker> that points to the heap in the resolved threads' contexts (or is
 * empty: a worker between two tasks holds its core elsewhere). Core.tick
 * changes between two polls taken from a queue and nothing in the Core changes within a poll
 * that wakes or spawns nothing, so the long-poll tick hashes it (bpf/long_polls.bpf.h). A bit
 * for the word; 0 if none.
 */
static uint32_t find_heap_words(struct target_mem *mem, const struct d9_thread_regs *th, size_t nth,
				int64_t off, const struct wt_found *f, size_t n, uint16_t bi,
				uint16_t bj)
{
	unsigned votes[WT_CTX_WORDS] = {0}, empty[WT_CTX_WORDS] = {0}, threads = 0;
	uint32_t mask = 0;

	for (size_t a = 0; a < n; a++) {
		uint64_t ctx = 0, cx[WT_CTX_WORDS];

		if (f[a].i != bi || f[a].j != bj)
			continue;
		for (size_t k = 0; k < nth; k++)
			if (th[k].tid == f[a].tid &&
			    !read_target(mem, th[k].fsbase + (uint64_t)off + bi * 8, &ctx, 8))
				ctx = 0;
		if (!ctx || !read_target(mem, ctx, cx, sizeof(cx)))
			continue;
		threads++;
		/* The stack the context is on is not the heap: a pointer near it is left out. */
		for (int w = 0; w < WT_CTX_WORDS && w < bj + WT_CTX_FIELDS; w++) {
			votes[w] += w != bj && user_ptr(cx[w]) &&
				    (cx[w] + WT_STACK_NEAR < ctx || cx[w] > ctx + WT_STACK_NEAR);
			empty[w] += !cx[w];
		}
	}
	/* The nearest to the worker: the core, whose RefCell follows it in every release. Words
	 * further on may be the stack's other locals, changing all the time. */
	for (int d = 1; d < WT_CTX_FIELDS && threads && !mask; d++) {
		if (bj + d < WT_CTX_WORDS && votes[bj + d] &&
		    votes[bj + d] + empty[bj + d] == threads)
			mask = 1u << (bj + d);
		else if (bj >= d && votes[bj - d] && votes[bj - d] + empty[bj - d] == threads)
			mask = 1u << (bj - d);
	}
	return mask;
}

/* Tries one TLS variable: true when it gave workers (then out says which). */
static bool try_symbol(struct sampler_bpf *skel, struct target_mem *mem, struct collector *c,
		       const struct tls_image *img, const struct tls_sym *s,
		       const struct d9_thread_regs *th, size_t nth, struct worker_tls *out)
{
	int64_t off = worker_tls_tp_offset(s->value, img->memsz, img->align, img->vaddr);
	uint16_t bi = UINT16_MAX, bj = UINT16_MAX;
	struct found_list l = {0};
	size_t workers = 0;

	if (!scan_threads(mem, off, s->size, th, nth, &l, out))
		workers = worker_tls_choose(l.v, l.n, &bi, &bj);
	if (workers) {
		snprintf(out->symbol, sizeof(out->symbol), "%s", s->name);
		out->tp_offset = off;
		out->context_word = bi;
		out->worker_word = bj;
		out->workers = workers;
		out->heap_words = find_heap_words(mem, th, nth, off, l.v, l.n, bi, bj);
		for (size_t a = 0; a < l.n; a++) {
			if (l.v[a].i == bi && l.v[a].j == bj) {
				note_worker(skel, c, &l.v[a]);
				out->resolved++;
			}
		}
	}
	free(l.v);
	return workers > 0;
}

bool worker_tls_context_offset(const struct target *t, int64_t *off)
{
	struct tls_image img;

	if (read_tls_image(t->exe_link, target_symbols_file(t), &img))
		return false;
	for (size_t i = 0; i < img.nsyms; i++) {
		if (!strcmp(tls_vars[img.syms[i].rank], "tokio::runtime::context::CONTEXT")) {
			*off = worker_tls_tp_offset(img.syms[i].value, img.memsz, img.align,
						    img.vaddr);
			return true;
		}
	}
	return false;
}

void worker_tls_resolve(struct sampler_bpf *skel, const struct target *t, struct collector *c,
			struct worker_tls *out)
{
	struct target_mem mem = {.pid = t->pid};
	struct d9_thread_regs *th = NULL;
	uint64_t t0;
	struct tls_image img;
	size_t nth = 0;
	int err;

	memset(out, 0, sizeof(*out));
	out->context_word = out->worker_word = -1;
	t0 = mono_ns();
	if (read_tls_image(t->exe_link, target_symbols_file(t), &img) || !img.nsyms) {
		out->status = "no_tls_symbol";
		return;
	}
	err = list_threads(skel, t->pid, &th, &nth);
	if (err) {
		fprintf(stderr,
			"dial9-bpf: failed to list the target's threads: %s: workers already "
			"running are keyed by thread, and a block_in_place splits them\n",
			strerror(-err));
		out->status = "no_thread_iterator";
		free(th);
		return;
	}
	out->threads = nth;
	out->status = "no_worker_context";
	for (size_t i = 0; i < img.nsyms; i++) {
		if (try_symbol(skel, &mem, c, &img, &img.syms[i], th, nth, out)) {
			out->status = "resolved";
			break;
		}
	}
	out->ms = (double)(mono_ns() - t0) / 1e6;
	if (nth && !out->readable) {
		fprintf(stderr,
			"dial9-bpf: failed to read the target's thread-local storage: %s: workers "
			"already running are keyed by thread, and a block_in_place splits them\n",
			strerror(mem.err));
		out->status = "tls_unreadable";
	}
	free(th);
}

void worker_tls_write_json(FILE *f, const struct worker_tls *w)
{
	fputs("{\"status\": ", f);
	json_str(f, w->status ? w->status : "not_run");
	fputs(", \"symbol\": ", f);
	json_str(f, w->symbol[0] ? w->symbol : NULL);
	fprintf(f,
		", \"tp_offset\": %" PRId64 ", \"context_word\": %d, \"worker_word\": %d, "
		"\"heap_words\": \"0x%x\", \"threads\": %zu, \"threads_readable\": %zu, "
		"\"threads_resolved\": %zu, \"workers\": %zu, \"ms\": %.1f}",
		w->tp_offset, w->context_word, w->worker_word, w->heap_words, w->threads,
		w->readable, w->resolved, w->workers, w->ms);
}
