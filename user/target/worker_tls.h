/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Worker identity of threads that entered multi_thread::worker::run before the attach.
 *
 * The sampler keys a worker by its Arc<Worker> (worker::run's argument). A worker running since
 * before the attach never shows that call, and a block_in_place after the attach hands it to a
 * thread that does: keyed by thread first, the worker would be split in two. Each such thread
 * keeps a pointer to its worker's scheduler context in Tokio's thread-local storage (the
 * multi_thread worker's CURRENT in 1.24, context::CONTEXT's scheduler field in 1.38-1.53): that
 * context, a local of worker::run on the thread's stack, holds the Arc<Worker>. The loader reads
 * each thread's TLS base through a BPF task iterator, follows TLS -> context -> Arc in the
 * target's memory, and gives the sampler tid -> key before the poll probes go in.
 *
 * Field offsets are not fixed by Rust, so they are learned from the threads themselves: the
 * word of the TLS variable that points into the thread's own stack, and the word of that
 * context that points to something shaped like ArcInner<Worker> ({strong, weak = 1, Worker {
 * handle: Arc shared by the runtime's workers, index: small and distinct, core }}), the pair
 * of offsets that finds the most distinct workers winning.
 */
#ifndef D9_WORKER_TLS_H
#define D9_WORKER_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct sampler_bpf;
struct target;
struct collector;

struct worker_tls {
	const char *status;  /* "resolved", "no_workers_found", "no_tls_symbol", ... */
	char symbol[160];    /* the TLS variable used, demangled */
	int64_t tp_offset;   /* its address minus the thread pointer (fsbase) */
	int context_word;    /* word of the variable pointing to the context; -1 if none */
	int worker_word;     /* word of the context holding the Arc<Worker>; -1 if none */
	uint32_t heap_words; /* words of the context pointing to the heap (a bit each) */
	size_t threads;	     /* threads of the target seen by the iterator */
	size_t readable;     /* of them, whose TLS variable could be read */
	size_t resolved;     /* of them, given a worker key */
	size_t workers;	     /* distinct workers among those */
	double ms;	     /* time taken, while the target ran on */
};

/* A read of the target's memory: true when all len bytes were read. */
typedef bool (*wt_read_fn)(void *ctx, uint64_t addr, void *buf, size_t len);

/* One thread's candidate: TLS word i -> context word j -> arc (ArcInner<Worker>*). */
struct wt_found {
	uint32_t tid;
	uint16_t i, j;
	uint64_t arc, handle, index;
};

/* Call after attach_prepare(): the iterator keeps its own attach type. */
void worker_tls_prepare(struct sampler_bpf *skel);

/*
 * Finds the worker of each thread of the target that runs one, writes tid -> key into the
 * sampler's tls_workers map and registers the workers with the collector. Call after
 * worker::run is probed (threads starting later are seen there) and before any poll probe.
 * Never fails the run: out->status says what happened.
 */
void worker_tls_resolve(struct sampler_bpf *skel, const struct target *t, struct collector *c,
			struct worker_tls *out);

/* Tokio's context::CONTEXT (current_task_id lives in it): its offset from the TLS base of
 * any of the target's threads; false when the executable has no such symbol. */
bool worker_tls_context_offset(const struct target *t, int64_t *off);

/* metadata.json's "worker_tls" value. */
void worker_tls_write_json(FILE *f, const struct worker_tls *w);

/*
 * The offset from the thread pointer of a TLS symbol of the executable (x86-64 variant II,
 * static TLS: the executable's block ends at the thread pointer, aligned as glibc places it).
 */
int64_t worker_tls_tp_offset(uint64_t st_value, uint64_t memsz, uint64_t align, uint64_t vaddr);

/* Whether arc points to an ArcInner<Worker>; sets the worker's handle and index. */
bool worker_tls_worker_at(wt_read_fn rd, void *ctx, uint64_t arc, uint64_t *handle,
			  uint64_t *index);

/*
 * The (i, j) that finds the most distinct workers among the candidates, with no two workers
 * of one runtime (handle) sharing an index; returns that count, 0 if none.
 */
size_t worker_tls_choose(const struct wt_found *f, size_t n, uint16_t *bi, uint16_t *bj);

#endif
