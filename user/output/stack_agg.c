// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Interning, u64 index and stack trie: see stack_agg.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "stack_agg.h"
#include "util_hash.h"

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
	free(a->frames);
	free(a->stacks);
	free(a->seqs);
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

static int add_path(struct stack_agg *a, const uint32_t *names, size_t n, uint64_t weight,
		    uint32_t *leaf)
{
	uint32_t cur = 0;

	/* Find or add the whole path first, so that a failed allocation leaves the weights
	 * consistent. */
	for (size_t i = 0; i < n; i++) {
		cur = child(a, cur, names[i]);
		if (!cur)
			return -ENOMEM;
	}
	/* Totals are summed from the selves at the end: no walk to the root per sample. */
	a->nodes[cur].self += weight;
	*leaf = cur;
	return 0;
}

int stack_agg_add(struct stack_agg *a, const uint32_t *names, size_t n, uint64_t weight)
{
	uint32_t leaf;

	return add_path(a, names, n, weight, &leaf);
}

enum {
	FRAME_KEY_NAME = 1,   /* by name pointer */
	FRAME_KEY_MODULE = 2, /* by module pointer and file offset */
	FRAME_KEY_UNKNOWN = 3,
};

static size_t frame_hash(const char *ptr, uint64_t off, uint32_t kind)
{
	return (size_t)mix64((uintptr_t)ptr ^ off * 0x9e3779b97f4a7c15ULL ^ kind);
}

static int grow_frames(struct stack_agg *a)
{
	size_t nslots = a->nframe_slots ? a->nframe_slots * 2 : 1024;
	struct frame_slot *slots = calloc(nslots, sizeof(*slots));

	if (!slots)
		return -ENOMEM;
	for (size_t j = 0; j < a->nframe_slots; j++) {
		const struct frame_slot *o = &a->frames[j];
		size_t i;

		if (!o->kind)
			continue;
		for (i = frame_hash(o->ptr, o->off, o->kind) & (nslots - 1); slots[i].kind;
		     i = (i + 1) & (nslots - 1))
			;
		slots[i] = *o;
	}
	free(a->frames);
	a->frames = slots;
	a->nframe_slots = nslots;
	return 0;
}

/* The intern id of a frame's display name (stack_frame_name()), built and interned only the
 * first time its name pointer (or module pointer and offset) is seen. The keys here and in
 * stack_key() must cover every field stack_frame_name() reads. */
static int frame_id(struct stack_agg *a, const struct task_frame *f, uint32_t *id)
{
	const char *ptr = f->name ? f->name : f->module;
	uint32_t kind = f->name ? FRAME_KEY_NAME : f->module ? FRAME_KEY_MODULE : FRAME_KEY_UNKNOWN;
	uint64_t off = kind == FRAME_KEY_MODULE ? f->file_offset : 0;
	struct frame_slot *slot;
	size_t i;
	int len;

	if ((a->nframes + 1) * 2 > a->nframe_slots && grow_frames(a))
		return -ENOMEM;
	for (i = frame_hash(ptr, off, kind) & (a->nframe_slots - 1); a->frames[i].kind;
	     i = (i + 1) & (a->nframe_slots - 1)) {
		slot = &a->frames[i];
		if (slot->ptr == ptr && slot->off == off && slot->kind == kind) {
			*id = slot->id;
			return 0;
		}
	}
	len = stack_frame_name(f, &a->scratch, &a->scratch_cap);
	if (len < 0 || intern_id(&a->names, a->scratch, (size_t)len, id))
		return -ENOMEM;
	slot = &a->frames[i];
	slot->ptr = ptr;
	slot->off = off;
	slot->id = *id;
	slot->kind = kind;
	a->nframes++;
	return 0;
}

static int grow_stacks(struct stack_agg *a)
{
	size_t nslots = a->nstack_slots ? a->nstack_slots * 2 : 1024;
	struct stack_slot *slots = calloc(nslots, sizeof(*slots));

	if (!slots)
		return -ENOMEM;
	for (size_t j = 0; j < a->nstack_slots; j++) {
		size_t i;

		if (!a->stacks[j].leaf)
			continue;
		for (i = a->stacks[j].hash & (nslots - 1); slots[i].leaf;
		     i = (i + 1) & (nslots - 1))
			;
		slots[i] = a->stacks[j];
	}
	free(a->stacks);
	a->stacks = slots;
	a->nstack_slots = nslots;
	return 0;
}

/*
 * A stack's key, root first: a named frame is its name pointer, any other frame the three
 * words 0 (no name pointer is NULL), module pointer, file offset (both 0 for "[unknown]"), so
 * that equal keys are equal stacks. Returns the length in words.
 */
static size_t stack_key(const struct task_frame *frames, size_t n, uint64_t *key)
{
	size_t len = 0;

	while (n--) {
		const struct task_frame *f = &frames[n];

		if (f->name) {
			key[len++] = (uintptr_t)f->name;
		} else {
			key[len++] = 0;
			key[len++] = (uintptr_t)f->module;
			key[len++] = f->module ? f->file_offset : 0;
		}
	}
	return len;
}

/* Moves the weight a cached stack gathered into its leaf. */
static void flush_stack(struct stack_agg *a, const struct stack_slot *slot)
{
	a->nodes[slot->leaf].self += a->seqs[slot->seq + 1];
	a->seqs[slot->seq + 1] = 0;
}

/* The words the keys' copies may take: as much as the trie itself (a node takes 40 bytes), at
 * least 1 MiB. Stacks that share long prefixes need few nodes but as long keys, so this bounds
 * the cache to at most doubling the memory; the stacks seen first, usually the hot ones, get
 * the room, and a stack without a copy is simply looked up frame by frame each time. */
#define SEQS_WORDS_PER_NODE 5
#define SEQS_MIN_WORDS (128 * 1024)

/* Remembers key[0..len) in slot, within the budget above. */
static void cache_stack(struct stack_agg *a, struct stack_slot *slot, uint64_t h, uint32_t leaf,
			const uint64_t *key, size_t len)
{
	size_t need = a->nseqs + 2 + len, budget = a->nnodes * SEQS_WORDS_PER_NODE;

	if (budget < SEQS_MIN_WORDS)
		budget = SEQS_MIN_WORDS;
	if (need > budget || need > UINT32_MAX)
		return;
	if (need > a->seqs_cap) {
		size_t ncap = a->seqs_cap ? a->seqs_cap * 2 : 4096;
		uint64_t *np;

		while (ncap < need)
			ncap *= 2;
		np = realloc(a->seqs, ncap * sizeof(*np));
		if (!np)
			return;
		a->seqs = np;
		a->seqs_cap = ncap;
	}
	/* A hash collision replaces the other stack's entry: that stack is then looked up frame
	 * by frame again, and recached, when next seen. */
	if (slot->leaf)
		flush_stack(a, slot);
	else
		a->nstacks++;
	slot->hash = h;
	slot->leaf = leaf;
	slot->seq = (uint32_t)a->nseqs;
	a->seqs[a->nseqs] = len;
	a->seqs[a->nseqs + 1] = 0;
	memcpy(&a->seqs[a->nseqs + 2], key, len * sizeof(*key));
	a->nseqs = need;
}

/* A stack (leaf first) with its weight. */
static int add_frames(struct stack_agg *a, const struct task_frame *frames, size_t nframes,
		      int stack_error, uint64_t weight)
{
	uint64_t key[3 * D9_AGG_MAX_DEPTH], h;
	uint32_t names[D9_AGG_MAX_DEPTH];
	/* The innermost frames are kept when a stack is longer than the trie allows. */
	size_t n = nframes < D9_AGG_MAX_DEPTH ? nframes : D9_AGG_MAX_DEPTH, len, i;
	struct stack_slot *slot;
	uint32_t leaf;

	if (!weight)
		return 0;
	if (!n) {
		const char *m = stack_missing_name(stack_error);

		if (intern_id(&a->names, m, strlen(m), &names[0]))
			return -ENOMEM;
		return stack_agg_add(a, names, 1, weight);
	}

	/* A stack seen before: one hash probe and a compare, instead of a probe per frame and a
	 * walk down the trie (one dependent cache miss per level). The key is built backwards,
	 * which defeats some hardware prefetchers: ask for every frame first. */
	for (i = 0; i < n; i += 2)
		__builtin_prefetch(&frames[i]);
	len = stack_key(frames, n, key);
	if ((a->nstacks + 1) * 2 > a->nstack_slots && grow_stacks(a))
		return -ENOMEM;
	h = hash_words(key, len);
	for (i = h & (a->nstack_slots - 1); a->stacks[i].leaf && a->stacks[i].hash != h;
	     i = (i + 1) & (a->nstack_slots - 1))
		;
	slot = &a->stacks[i];
	if (slot->leaf && a->seqs[slot->seq] == len &&
	    !memcmp(&a->seqs[slot->seq + 2], key, len * sizeof(*key))) {
		/* Kept next to the key, already in cache, until stack_agg_sort(). */
		a->seqs[slot->seq + 1] += weight;
		return 0;
	}

	/* Root first. */
	for (i = 0; i < n; i++)
		if (frame_id(a, &frames[n - 1 - i], &names[i]))
			return -ENOMEM;
	if (add_path(a, names, n, weight, &leaf))
		return -ENOMEM;
	cache_stack(a, slot, h, leaf, key, len);
	return 0;
}

int stack_agg_add_sample(struct stack_agg *a, const struct task_sample *s)
{
	if (s->on_cpu)
		return 0; /* no resumes: the time view has them */
	a->nsamples++;
	return add_frames(a, s->frames, s->nframes, s->stack_error, s->weight_count);
}

int stack_agg_add_time(struct stack_agg *a, const struct task_sample *s)
{
	static const char running[] = "running", waiting[] = "waiting";
	struct task_frame frames[D9_AGG_MAX_DEPTH];
	/* The innermost frames, and the view's frame at the root. */
	size_t n = s->nframes < D9_AGG_MAX_DEPTH - 1 ? s->nframes : D9_AGG_MAX_DEPTH - 1;

	a->nsamples++;
	memcpy(frames, s->frames, n * sizeof(*frames));
	frames[n++] = (struct task_frame){.name = s->on_cpu ? running : waiting, .task_root = true};
	return add_frames(a, frames, n, s->stack_error,
			  s->on_cpu ? s->weight_cpu_ns : s->weight_idle_ns);
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

	for (size_t i = 0; i < a->nstack_slots; i++)
		if (a->stacks[i].leaf)
			flush_stack(a, &a->stacks[i]);
	/* A child is always added after its parent, so one backward pass sums every subtree. */
	for (size_t i = 0; i < a->nnodes; i++)
		a->nodes[i].total = a->nodes[i].self;
	for (size_t i = a->nnodes; i-- > 1;)
		a->nodes[a->nodes[i].parent].total += a->nodes[i].total;
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
