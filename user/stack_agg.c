// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Interning, u64 index and stack trie: see stack_agg.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "stack_agg.h"

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

static uint64_t hash_bytes(const char *s, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)s[i];
		h *= 0x100000001b3ULL;
	}
	return mix64(h);
}

/* Grows a table of power-of-two slots to keep the load under 1/2, so probes stay short. */
static int intern_grow(struct intern *t)
{
	size_t nslots = t->nslots ? t->nslots * 2 : 64;
	uint32_t *slots = calloc(nslots, sizeof(*slots));

	if (!slots)
		return -ENOMEM;
	for (size_t id = 0; id < t->n; id++) {
		size_t i = hash_bytes(t->strs[id], t->lens[id]) & (nslots - 1);

		while (slots[i])
			i = (i + 1) & (nslots - 1);
		slots[i] = (uint32_t)id + 1;
	}
	free(t->slots);
	t->slots = slots;
	t->nslots = nslots;
	return 0;
}

int intern_id(struct intern *t, const char *s, size_t len, uint32_t *id)
{
	size_t i;
	char *copy;

	if ((t->n + 1) * 2 > t->nslots && intern_grow(t))
		return -ENOMEM;
	for (i = hash_bytes(s, len) & (t->nslots - 1); t->slots[i]; i = (i + 1) & (t->nslots - 1)) {
		uint32_t cand = t->slots[i] - 1;

		if (t->lens[cand] == len && !memcmp(t->strs[cand], s, len)) {
			*id = cand;
			return 0;
		}
	}
	if (t->n == t->cap) {
		size_t ncap = t->cap ? t->cap * 2 : 64;
		char **ns = realloc(t->strs, ncap * sizeof(*ns));
		size_t *nl;

		if (!ns)
			return -ENOMEM;
		t->strs = ns;
		nl = realloc(t->lens, ncap * sizeof(*nl));
		if (!nl)
			return -ENOMEM;
		t->lens = nl;
		t->cap = ncap;
	}
	copy = malloc(len + 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, s, len);
	copy[len] = 0;
	t->strs[t->n] = copy;
	t->lens[t->n] = len;
	t->slots[i] = (uint32_t)t->n + 1;
	*id = (uint32_t)t->n++;
	return 0;
}

void intern_free(struct intern *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->strs[i]);
	free(t->strs);
	free(t->lens);
	free(t->slots);
	memset(t, 0, sizeof(*t));
}

static int u64_index_grow(struct u64_index *m)
{
	size_t nslots = m->nslots ? m->nslots * 2 : 64;
	uint64_t *keys = calloc(nslots, sizeof(*keys));
	uint32_t *ids = calloc(nslots, sizeof(*ids));

	if (!keys || !ids) {
		free(keys);
		free(ids);
		return -ENOMEM;
	}
	for (size_t j = 0; j < m->nslots; j++) {
		size_t i;

		if (!m->ids[j])
			continue;
		i = mix64(m->keys[j]) & (nslots - 1);
		while (ids[i])
			i = (i + 1) & (nslots - 1);
		keys[i] = m->keys[j];
		ids[i] = m->ids[j];
	}
	free(m->keys);
	free(m->ids);
	m->keys = keys;
	m->ids = ids;
	m->nslots = nslots;
	return 0;
}

int u64_index_id(struct u64_index *m, uint64_t key, uint32_t *id, bool *added)
{
	size_t i;

	if ((m->n + 1) * 2 > m->nslots && u64_index_grow(m))
		return -ENOMEM;
	for (i = mix64(key) & (m->nslots - 1); m->ids[i]; i = (i + 1) & (m->nslots - 1)) {
		if (m->keys[i] == key) {
			*id = m->ids[i] - 1;
			if (added)
				*added = false;
			return 0;
		}
	}
	m->keys[i] = key;
	m->ids[i] = (uint32_t)m->n + 1;
	*id = (uint32_t)m->n++;
	if (added)
		*added = true;
	return 0;
}

void u64_index_free(struct u64_index *m)
{
	free(m->keys);
	free(m->ids);
	memset(m, 0, sizeof(*m));
}

static int reserve(char **buf, size_t *cap, size_t need)
{
	char *nb;
	size_t ncap;

	if (need <= *cap)
		return 0;
	ncap = *cap ? *cap : 256;
	while (ncap < need)
		ncap *= 2;
	nb = realloc(*buf, ncap);
	if (!nb)
		return -ENOMEM;
	*buf = nb;
	*cap = ncap;
	return 0;
}

int stack_frame_name(const struct task_frame *f, char **buf, size_t *cap)
{
	size_t len;

	if (f->name) {
		len = strlen(f->name);
		if (reserve(buf, cap, len + 1))
			return -ENOMEM;
		for (size_t i = 0; i < len; i++) {
			unsigned char c = (unsigned char)f->name[i];

			/* Rust array types ("[u8; 4]") carry the one byte folded stacks reserve. */
			(*buf)[i] = c == ';' ? ',' : c < 0x20 || c == 0x7f ? ' ' : (char)c;
		}
		(*buf)[len] = 0;
		return (int)len;
	}
	if (f->module) {
		const char *base = strrchr(f->module, '/');
		int n;

		base = base ? base + 1 : f->module;
		len = strlen(base) + 32;
		if (reserve(buf, cap, len))
			return -ENOMEM;
		n = snprintf(*buf, len, "[%s+0x%" PRIx64 "]", base, f->file_offset);
		for (int i = 0; i < n; i++)
			if ((*buf)[i] == ';' || (unsigned char)(*buf)[i] < 0x20)
				(*buf)[i] = '_';
		return n;
	}
	if (reserve(buf, cap, sizeof("[unknown]")))
		return -ENOMEM;
	strcpy(*buf, "[unknown]");
	return (int)strlen(*buf);
}

const char *stack_missing_name(int stack_error)
{
	switch (stack_error) {
	case 0:
		return "[no stack]";
	case -EFAULT:
		return "[no stack: fault reading it]";
	case -ENOENT:
		return "[no stack: not found]";
	default:
		return "[no stack: capture failed]";
	}
}

int stack_agg_init(struct stack_agg *a)
{
	uint32_t root;

	memset(a, 0, sizeof(*a));
	a->cap = 256;
	a->nodes = calloc(a->cap, sizeof(*a->nodes));
	if (!a->nodes)
		return -ENOMEM;
	if (intern_id(&a->names, "all", 3, &root)) {
		stack_agg_free(a);
		return -ENOMEM;
	}
	a->nodes[0].name = root;
	a->nnodes = 1;
	return 0;
}

void stack_agg_free(struct stack_agg *a)
{
	intern_free(&a->names);
	free(a->slots);
	free(a->nodes);
	free(a->scratch);
	memset(a, 0, sizeof(*a));
}

static size_t edge_hash(uint32_t parent, uint32_t name)
{
	return (size_t)mix64((uint64_t)parent << 32 | name);
}

static int grow_slots(struct stack_agg *a)
{
	size_t nslots = a->nslots ? a->nslots * 2 : 1024;
	uint32_t *slots = calloc(nslots, sizeof(*slots));

	if (!slots)
		return -ENOMEM;
	for (size_t n = 1; n < a->nnodes; n++) {
		size_t i = edge_hash(a->nodes[n].parent, a->nodes[n].name) & (nslots - 1);

		while (slots[i])
			i = (i + 1) & (nslots - 1);
		slots[i] = (uint32_t)n;
	}
	free(a->slots);
	a->slots = slots;
	a->nslots = nslots;
	return 0;
}

/* The child of parent named name, added if missing; 0 on allocation failure. */
static uint32_t child(struct stack_agg *a, uint32_t parent, uint32_t name)
{
	struct stack_node *nd;
	size_t i;

	if (a->nnodes * 2 > a->nslots && grow_slots(a))
		return 0;
	for (i = edge_hash(parent, name) & (a->nslots - 1); a->slots[i];
	     i = (i + 1) & (a->nslots - 1)) {
		nd = &a->nodes[a->slots[i]];
		if (nd->parent == parent && nd->name == name)
			return a->slots[i];
	}
	if (a->nnodes == a->cap) {
		size_t ncap = a->cap * 2;
		void *np = realloc(a->nodes, ncap * sizeof(*a->nodes));

		if (!np)
			return 0;
		a->nodes = np;
		a->cap = ncap;
	}
	nd = &a->nodes[a->nnodes];
	memset(nd, 0, sizeof(*nd));
	nd->name = name;
	nd->parent = parent;
	nd->depth = a->nodes[parent].depth + 1;
	if (nd->depth > a->max_depth)
		a->max_depth = nd->depth;
	a->slots[i] = (uint32_t)a->nnodes;
	return (uint32_t)a->nnodes++;
}

int stack_agg_add(struct stack_agg *a, const uint32_t *names, size_t n, uint64_t weight)
{
	uint32_t cur = 0;

	/* Find or add the whole path first, so that a failed allocation leaves the weights
	 * consistent. */
	for (size_t i = 0; i < n; i++) {
		cur = child(a, cur, names[i]);
		if (!cur)
			return -ENOMEM;
	}
	a->nodes[cur].self += weight;
	for (;;) {
		a->nodes[cur].total += weight;
		if (!cur)
			break;
		cur = a->nodes[cur].parent;
	}
	return 0;
}

int stack_agg_add_sample(struct stack_agg *a, const struct task_sample *s)
{
	uint32_t names[D9_AGG_MAX_DEPTH];
	size_t n = 0;

	a->nsamples++;
	if (!s->weight_count)
		return 0;
	if (!s->nframes) {
		const char *m = stack_missing_name(s->stack_error);

		if (intern_id(&a->names, m, strlen(m), &names[0]))
			return -ENOMEM;
		n = 1;
	}
	/* Root first: the innermost frames are kept when a stack is longer than the trie allows. */
	for (size_t i = s->nframes < D9_AGG_MAX_DEPTH ? s->nframes : D9_AGG_MAX_DEPTH; i-- > 0;) {
		int len = stack_frame_name(&s->frames[i], &a->scratch, &a->scratch_cap);

		if (len < 0 || intern_id(&a->names, a->scratch, (size_t)len, &names[n]))
			return -ENOMEM;
		n++;
	}
	return stack_agg_add(a, names, n, s->weight_count);
}

/* Orders siblings by parent, then by name descending, so that pushing each onto its parent's
 * list head leaves every list ascending. */
static int cmp_nodes(const void *pa, const void *pb, void *ctx)
{
	const struct stack_agg *a = ctx;
	const struct stack_node *x = &a->nodes[*(const uint32_t *)pa];
	const struct stack_node *y = &a->nodes[*(const uint32_t *)pb];

	if (x->parent != y->parent)
		return x->parent < y->parent ? -1 : 1;
	return -strcmp(intern_str(&a->names, x->name), intern_str(&a->names, y->name));
}

int stack_agg_sort(struct stack_agg *a)
{
	uint32_t *order;

	if (a->nnodes < 2)
		return 0;
	order = malloc((a->nnodes - 1) * sizeof(*order));
	if (!order)
		return -ENOMEM;
	for (size_t i = 1; i < a->nnodes; i++)
		order[i - 1] = (uint32_t)i;
	qsort_r(order, a->nnodes - 1, sizeof(*order), cmp_nodes, a);
	for (size_t i = 0; i < a->nnodes; i++)
		a->nodes[i].first_child = 0;
	for (size_t i = 0; i < a->nnodes - 1; i++) {
		struct stack_node *nd = &a->nodes[order[i]];

		nd->next_sibling = a->nodes[nd->parent].first_child;
		a->nodes[nd->parent].first_child = order[i];
	}
	free(order);
	return 0;
}

int tmp_output_open(struct tmp_output *o, const char *dir, const char *name)
{
	memset(o, 0, sizeof(*o));
	if (snprintf(o->path, sizeof(o->path), "%s/%s", dir, name) >= (int)sizeof(o->path) ||
	    snprintf(o->tmp_path, sizeof(o->tmp_path), "%s.tmp", o->path) >=
		(int)sizeof(o->tmp_path))
		return -ENAMETOOLONG;
	o->f = fopen(o->tmp_path, "we");
	if (!o->f)
		return -errno;
	return 0;
}

int tmp_output_commit(struct tmp_output *o)
{
	int err = 0;

	errno = 0;
	if (fflush(o->f) || ferror(o->f) || fsync(fileno(o->f)))
		err = errno ? -errno : -EIO;
	if (fclose(o->f) && !err)
		err = -errno;
	o->f = NULL;
	if (!err && rename(o->tmp_path, o->path))
		err = -errno;
	if (err) {
		fprintf(stderr, "dial9-bpf: failed to write %s: %s\n", o->path, strerror(-err));
		unlink(o->tmp_path);
	}
	return err;
}

void tmp_output_discard(struct tmp_output *o)
{
	if (o->f)
		fclose(o->f);
	o->f = NULL;
	unlink(o->tmp_path);
}
