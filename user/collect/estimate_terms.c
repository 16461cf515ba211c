// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <stdbool.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "estimate_terms.h"
#include "json.h"

/* Samples come in about window order: a new one's cell is among the last few. */
#define RECENT 64

static bool same_cell(const struct est_cell *c, uint64_t epoch, const char *future, uint64_t window)
{
	return c->epoch == epoch && c->window == window &&
	       (c->future == future || (c->future && future && !strcmp(c->future, future)));
}

static int add(struct est_terms *t, uint64_t epoch, const char *future, uint64_t window, double w,
	       double edge, double price)
{
	size_t i = t->n, stop = t->n > RECENT ? t->n - RECENT : 0;

	while (i-- > stop)
		if (same_cell(&t->cells[i], epoch, future, window)) {
			t->cells[i].z += w;
			/* Always armed: every sample is a draw of its own. */
			t->cells[i].sq += window ? 0 : w * w;
			t->cells[i].draws++;
			t->cells[i].edge += edge;
			t->cells[i].price += price;
			return 0;
		}
	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 256;
		struct est_cell *c = realloc(t->cells, cap * sizeof(*c));

		if (!c)
			return -ENOMEM;
		t->cells = c;
		t->cap = cap;
	}
	t->cells[t->n++] =
	    (struct est_cell){epoch, future, window, w, window ? 0 : w * w, 1, edge, price};
	return 0;
}

int est_terms_add(struct est_terms *t, uint64_t epoch, const char *future, uint64_t window,
		  double w)
{
	return add(t, epoch, future, window, w, 0, 0);
}

int est_terms_add_count(struct est_terms *t, uint64_t epoch, const char *future, uint64_t window,
			double n, double p, double price_rel)
{
	/* Always armed (window 0), every resume is counted: no edges. */
	return add(t, epoch, future, window, n / p, window ? 0.5 / p : 0, n / p * price_rel);
}

static int by_epoch_future(const void *a, const void *b)
{
	const struct est_cell *x = a, *y = b;

	if (x->epoch != y->epoch)
		return x->epoch < y->epoch ? -1 : 1;
	if (x->future != y->future)
		return !x->future ? -1 : !y->future ? 1 : strcmp(x->future, y->future);
	return 0;
}

void est_terms_write_json(const struct est_terms *t, bool counts, FILE *f)
{
	struct est_cell *v = malloc((t->n ? t->n : 1) * sizeof(*v));
	size_t i = 0, groups = 0;

	if (!v) {
		fputs("null", f);
		return;
	}
	memcpy(v, t->cells, t->n * sizeof(*v));
	qsort(v, t->n, sizeof(*v), by_epoch_future);
	fputc('[', f);
	while (i < t->n) {
		const struct est_cell *g = &v[i];
		double sum = 0, sq = 0, edge = 0, price = 0;
		size_t n = 0;

		for (; i < t->n && !by_epoch_future(&v[i], g); i++) {
			sum += v[i].z;
			sq += v[i].window ? v[i].z * v[i].z : v[i].sq;
			n += v[i].window ? 1 : v[i].draws;
			edge += v[i].edge;
			price += v[i].price;
		}
		fprintf(f, "%s\n    {\"epoch\": %" PRIu64 ", \"future\": ", groups++ ? "," : "",
			g->epoch);
		if (g->future)
			json_str(f, g->future);
		else
			fputs("null", f);
		fprintf(f, ", \"windows_drawn\": %zu, \"sum\": %.0f, \"sum_sq\": %.0f", n, sum, sq);
		if (counts)
			fprintf(f, ", \"edge_sq\": %.0f, \"price_se\": %.0f", edge * edge, price);
		fputc('}', f);
	}
	fputs(groups ? "\n  ]" : "]", f);
	free(v);
}

void est_terms_free(struct est_terms *t)
{
	free(t->cells);
	*t = (struct est_terms){0};
}
