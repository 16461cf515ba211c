// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Task types' resumes estimated from exact in-window counts (the BPF map resume_counts).
 *
 * Inside a window every eligible resume is seen: the sampler draws a few of them for stacks,
 * but counts them all, per task type, worker, epoch, window and kind of resume. A window's
 * count over its inclusion probability (collector_window_prob, times the in-window correction
 * of that worker-epoch for resumes limited by the worker's speed, as a sample's) estimates the
 * type's resumes as the samples do, with the same expectation, but without the variance of the
 * draw: a type resuming a thousand times in a second's windows is known from a thousand
 * resumes, not from the one or two of them drawn. What is left is the windows' placement,
 * which the variance terms (count_terms in metadata.json) carry as estimate_terms do.
 *
 * Entries are read and deleted once their epoch is as old as the samples the collector writes
 * (so the correction uses the same closed-epoch view), those of a folder's epochs at its
 * handover (--rotate), and all of them at the end.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/bpf.h>
#include "collector.h"
#include "resume_counts.h"
#include "task_types.h"

/* Read per drain at most: the map holds 16384; the rest waits for the next drain. */
#define DRAIN_MAX 16384
struct drained {
	struct d9_count_key k;
	struct d9_count_val v;
};

static int by_cell(const void *a, const void *b)
{
	const struct d9_count_key *x = &((const struct drained *)a)->k;
	const struct d9_count_key *y = &((const struct drained *)b)->k;

	if (x->epoch != y->epoch)
		return x->epoch < y->epoch ? -1 : 1;
	if (x->window != y->window)
		return x->window < y->window ? -1 : 1;
	return x->vtable < y->vtable ? -1 : x->vtable > y->vtable;
}

/* Reads and deletes the entries of epochs before `before` into v, key by key. */
static size_t take_by_key(int fd, uint64_t before, struct drained *v)
{
	struct d9_count_key key, next, *prev = NULL;
	struct d9_count_key *keys = malloc(DRAIN_MAX * sizeof(*keys));
	size_t n = 0, got = 0;

	if (!keys)
		return 0;
	while (n < DRAIN_MAX && !bpf_map_get_next_key(fd, prev, &next)) {
		if (next.epoch < before)
			keys[n++] = next;
		key = next;
		prev = &key;
	}
	for (size_t i = 0; i < n; i++)
		if (!bpf_map_lookup_and_delete_elem(fd, &keys[i], &v[got].v))
			v[got++].k = keys[i];
	free(keys);
	return got;
}

/* Entries read per batch: a hash map's batch stops at a bucket boundary, and its buckets hold a
 * few entries each. */
#define BATCH 1024

/* Deletes the n keys of v, in one call where it can: an entry left behind would be counted
 * again at the next drain. */
static void delete_taken(int fd, const struct drained *v, size_t n)
{
	struct d9_count_key *keys = n ? malloc(n * sizeof(*keys)) : NULL;
	__u32 count = (__u32)n;

	if (!n)
		return;
	for (size_t i = 0; keys && i < n; i++)
		keys[i] = v[i].k;
	if (!keys || bpf_map_delete_batch(fd, keys, &count, NULL))
		for (size_t i = keys ? count : 0; i < n; i++)
			bpf_map_delete_elem(fd, &v[i].k);
	free(keys);
}

/*
 * take_by_key with the map read in batches: a drain walked every key of the map, two
 * syscalls a key (the next key, then the entry), some 280 a second with 32 workers. Entries
 * of epochs that ended are final, so reading them and then deleting them loses nothing.
 * Returns -1 where the kernel has no batch operations on the map (before 5.6), having taken
 * nothing.
 */
static long take_batched(int fd, uint64_t before, struct drained *v)
{
	struct d9_count_key *keys = malloc(BATCH * sizeof(*keys));
	struct d9_count_val *vals = malloc(BATCH * sizeof(*vals));
	struct d9_count_key token; /* a hash map's is a bucket index: the key's size is room */
	bool ok = keys && vals;
	void *in = NULL;
	size_t n = 0;
	int err = 0;

	while (ok && n < DRAIN_MAX) {
		__u32 count = BATCH;

		err = bpf_map_lookup_batch(fd, in, &token, keys, vals, &count, NULL);
		if (err && err != -ENOENT)
			break;
		for (__u32 i = 0; i < count && n < DRAIN_MAX; i++)
			if (keys[i].epoch < before)
				v[n++] = (struct drained){keys[i], vals[i]};
		if (err) /* -ENOENT: the last batch */
			break;
		in = &token;
	}
	free(keys);
	free(vals);
	delete_taken(fd, v, n);
	if (!n && (!ok || (err && err != -ENOENT)))
		return -1;
	return (long)n;
}

static size_t take(int fd, uint64_t before, struct drained *v)
{
	long n = take_batched(fd, before, v);

	return n >= 0 ? (size_t)n : take_by_key(fd, before, v);
}

static void add_count(struct collector *c, const struct drained *d)
{
	const struct task_type *type = c->types ? task_types_find(c->types, d->k.vtable) : NULL;
	double p = collector_window_prob(c, d->k.epoch, d->k.flags,
					 (double)d->v.duty / (double)D9_PROB_ONE);
	bool capped;
	double rel;
	double f = collector_resume_factor(c, collector_worker(c, d->k.worker), d->k.epoch,
					   d->k.flags, &capped, &rel);

	if (!(p * f > 0))
		return;
	if (d->v.resumes && est_terms_add_count(&c->counted, d->k.epoch, type ? type->name : NULL,
						d->k.window, (double)d->v.resumes, p * f, rel))
		c->write_errors++;
}

int resume_counts_drain(struct collector *c, int fd, uint64_t before)
{
	struct drained *v;
	size_t n;

	/* Once per epoch: each drain walks the map's keys, a syscall each. */
	if (fd < 0 || (before != UINT64_MAX && before <= c->counts_before))
		return 0;
	if (before != UINT64_MAX)
		c->counts_before = before;
	c->coverage_epoch = 0; /* the epochs' records may have closed since */
	v = malloc(DRAIN_MAX * sizeof(*v));
	if (!v)
		return -ENOMEM;
	do {
		n = take(fd, before, v);
		/* Cells in order, so that a window's counts of one type meet in one cell. */
		qsort(v, n, sizeof(*v), by_cell);
		for (size_t i = 0; i < n; i++)
			add_count(c, &v[i]);
		c->counts_drained += n;
	} while (n == DRAIN_MAX);
	free(v);
	return 0;
}
