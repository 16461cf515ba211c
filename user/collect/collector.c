// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "collector.h"
#include "cpu_samples.h"
#include "long_polls.h"
#include "task_types.h"
#include "symbolize.h"
#include "unwind_dwarf.h"
#include "util_clock.h"
#include "target.h"
#include "util_hash.h"
#include "util_proc.h"

#define MAX_INLINE 16
#define MAX_PENDING 4096
#define MAX_FRAMES_OUT COLLECTOR_MAX_FRAMES

/* An epoch's refusals are final once the epoch is over: the sampler decides at the time of
 * the transition. The grace covers records still in the ring buffer. */
#define FLUSH_GRACE_NS (200ULL * 1000 * 1000)

struct pending_sample {
	struct pending_sample *next;
	struct raw_copy *raw; /* registers and stack bytes for DWARF unwinding, or NULL */
	struct d9_sample s;   /* stack trimmed to the captured frames */
};

/* Takes the raw stack the thread's last D9_REC_RAW_STACK left, if any. */
static struct raw_copy *take_raw(struct collector *c, uint32_t tid)
{
	for (size_t i = 0; i < c->nraws; i++) {
		struct raw_copy *r = c->raws[i];

		if (r->tid == tid) {
			c->raws[i] = c->raws[--c->nraws];
			return r;
		}
	}
	return NULL;
}

static int handle_raw(struct collector *c, const struct d9_raw_stack *rs, size_t size)
{
	struct raw_copy *r;
	size_t len;

	if (size < D9_RAW_STACK_HDR)
		return 0;
	size_t skip = rs->sp & (D9_RAW_PAGE - 1);

	len = rs->len;
	if (len > size - D9_RAW_STACK_HDR)
		len = size - D9_RAW_STACK_HDR;
	/* BPF copied whole pages: keep the bytes from sp up. */
	len = len > skip ? len - skip : 0;
	free(take_raw(c, rs->tid));
	r = malloc(sizeof(*r) + len);
	if (!r)
		return -ENOMEM;
	r->tid = rs->tid;
	r->ip = rs->ip;
	r->sp = rs->sp;
	r->bp = rs->bp;
	r->len = (uint32_t)len;
	memcpy(r->data, rs->data + skip, len);
	if (c->nraws == c->raws_cap) {
		size_t ncap = c->raws_cap ? c->raws_cap * 2 : 16;
		void *np = realloc(c->raws, ncap * sizeof(*c->raws));

		if (!np) {
			free(r);
			return -ENOMEM;
		}
		c->raws = np;
		c->raws_cap = ncap;
	}
	c->raws[c->nraws++] = r;
	return 0;
}

void collector_init(struct collector *c, int pid, struct writer *writers, size_t nwriters,
		    struct symbolizer *sym, open_epoch_fn fn, void *ctx)
{
	memset(c, 0, sizeof(*c));
	c->pid = pid;
	c->writers = writers;
	c->nwriters = nwriters;
	c->sym = sym;
	c->open_epoch = fn;
	c->open_epoch_ctx = ctx;
	c->epoch_limit = UINT64_MAX;
}

struct worker_info *collector_worker(struct collector *c, uint64_t key)
{
	struct worker_info *w;

	for (size_t i = 0; i < c->nworkers; i++)
		if (c->workers[i].key == key)
			return &c->workers[i];
	if (c->nworkers == c->workers_cap) {
		size_t ncap = c->workers_cap ? c->workers_cap * 2 : 16;
		void *np = realloc(c->workers, ncap * sizeof(*c->workers));

		if (!np)
			return NULL;
		c->workers = np;
		c->workers_cap = ncap;
	}
	w = &c->workers[c->nworkers];
	memset(w, 0, sizeof(*w));
	w->key = key;
	w->index = (int)c->nworkers++;
	if (key & D9_WORKER_TID_FLAG) {
		w->tid = (uint32_t)key;
		read_comm(c->pid, w->tid, w->comm, sizeof(w->comm));
	}
	return w;
}

void collector_note_tls_worker(struct collector *c, uint64_t key, uint32_t tid)
{
	struct worker_info *w = collector_worker(c, key);

	if (!w)
		return;
	w->from_tls = true;
	w->tid = tid;
	read_comm(c->pid, tid, w->comm, sizeof(w->comm));
}

const char *collector_worker_detection(const struct worker_info *w)
{
	if (w->from_tls)
		return "tls_context";
	return w->from_worker_run ? "worker_run_arg" : "thread";
}

struct runtime_info *collector_runtime(struct collector *c, uint64_t key)
{
	struct runtime_info *r;

	if (!key)
		return NULL;
	for (size_t i = 0; i < c->nruntimes; i++)
		if (c->runtimes[i].key == key)
			return &c->runtimes[i];
	if (c->nruntimes == c->runtimes_cap) {
		size_t ncap = c->runtimes_cap ? c->runtimes_cap * 2 : 4;
		void *np = realloc(c->runtimes, ncap * sizeof(*c->runtimes));

		if (!np)
			return NULL;
		c->runtimes = np;
		c->runtimes_cap = ncap;
	}
	r = &c->runtimes[c->nruntimes];
	*r = (struct runtime_info){.key = key, .index = (int)c->nruntimes++, .first_worker = -1};
	return r;
}

static struct epoch_stat *worker_epoch(struct worker_info *w, uint64_t epoch)
{
	for (size_t i = w->nepochs; i-- > 0;)
		if (w->epochs[i].epoch == epoch)
			return &w->epochs[i];
	if (w->nepochs == w->cap) {
		size_t ncap = w->cap ? w->cap * 2 : 16;
		void *np = realloc(w->epochs, ncap * sizeof(*w->epochs));

		if (!np)
			return NULL;
		w->epochs = np;
		w->cap = ncap;
	}
	memset(&w->epochs[w->nepochs], 0, sizeof(w->epochs[0]));
	w->epochs[w->nepochs].epoch = epoch;
	return &w->epochs[w->nepochs++];
}

/*
 * How much fewer resumes a CPU-limited task made inside this epoch's windows than it would
 * have without the probes. Each hit takes ~1-5 us of the worker's time; time the worker would
 * have spent parked absorbs it, but a worker with no idle time loses that much work, and
 * loses it from the tasks whose resumes come at the rate it runs: those that yielded
 * (D9_SF_AFTER_YIELD). Tasks woken by a timer or another task resume at the rate their events
 * come, which the probes do not change as long as the worker keeps up. So the lost time
 * (probe time not absorbed by idle time) would have gone to the CPU-limited tasks, whose
 * useful time inside the windows was what is left of the busy time after the clock-driven
 * polls (gate.clock_ns) and the CPU-limited polls' own hits: factor = useful / (useful +
 * lost). Time the worker's thread waited for a CPU while other threads ran (gate.wait_ns,
 * the kernel's run_delay) is in none of these: it is lost with or without probes, and counted
 * as useful it would make the factor too high. Stack captures and sample writes (gate.capture_ns,
 * measured by the program) are lost time too, per sample rather than per hit. On a machine with
 * more runnable threads than cores such waits are a real share of a worker's time, and leaving
 * them out would overstate CPU-bound estimates. Windowed inclusion probabilities of yielded tasks
 * are multiplied by the factor, so that estimates are of the target as it runs without probes. One
 * factor per worker per epoch: it assumes the CPU-limited tasks share the loss as they share the
 * worker, and a task that the cooperative budget forces to yield through a resource (no yield_now)
 * counts as clock-driven.
 */
/* The two terms of the factor: the CPU-limited tasks' useful time and the lost time. */
static void slowdown_terms(const struct d9_gate_time *g, double hit_cost_ns, double *useful,
			   double *lost)
{
	/* Busy time misses the part of a window after a thread's last event in it; the time on
	 * the CPU, where the switches are followed, does not (less the captures, lost below). */
	double on = (double)g->oncpu_ns - (double)g->capture_ns;
	double busy = on > (double)g->busy_ns ? on : (double)g->busy_ns;

	*lost = (double)g->hits * hit_cost_ns + (double)g->capture_ns - (double)g->idle_ns;
	*useful = busy - (double)g->clock_ns - (double)(g->hits - g->clock_hits) * hit_cost_ns;
}

#define SLOWDOWN_FLOOR 0.05

double collector_slowdown(const struct d9_gate_time *g, double hit_cost_ns)
{
	double useful, lost, s;

	slowdown_terms(g, hit_cost_ns, &useful, &lost);
	if (hit_cost_ns <= 0 || lost <= 0)
		return 1.0;
	s = useful > 0 ? useful / (useful + lost) : 0;
	return s < SLOWDOWN_FLOOR ? SLOWDOWN_FLOOR : s;
}

/* With U = useful, L = lost, H = hits, Hy = hits of yielded polls, the weight is
 * w = (U + L) / U, U' = -Hy, L' = H per ns of hit cost: (c / w) dw/dc = c (H U + L Hy) / (U (U +
 * L)). */
double collector_slowdown_sensitivity(const struct d9_gate_time *g, double hit_cost_ns)
{
	double h = (double)g->hits, hy = (double)(g->hits - g->clock_hits), useful, lost;

	slowdown_terms(g, hit_cost_ns, &useful, &lost);
	if (hit_cost_ns <= 0 || lost <= 0)
		return 0;
	if (useful <= 0 || useful / (useful + lost) <= SLOWDOWN_FLOOR)
		return NAN;
	return hit_cost_ns * (h * useful + lost * hy) / (useful * (useful + lost));
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double collector_sensitivity_median(const struct collector *c)
{
	size_t n = 0, k = 0;
	double *v, m;

	for (size_t i = 0; i < c->nworkers; i++)
		n += c->workers[i].nepochs;
	v = malloc((n ? n : 1) * sizeof(*v));
	if (!v)
		return 0;
	for (size_t i = 0; i < c->nworkers; i++)
		for (size_t j = 0; j < c->workers[i].nepochs; j++) {
			const struct epoch_stat *e = &c->workers[i].epochs[j];
			double x;

			if (!e->gate.hits)
				continue;
			x = collector_slowdown_sensitivity(&e->gate, c->hit_cost_ns);
			v[k++] = isnan(x) ? HUGE_VAL : x;
		}
	qsort(v, k, sizeof(*v), cmp_double);
	m = k ? (k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2) : 0;
	free(v);
	return m;
}

/* The earliest of the epochs from first on that any worker's record still holds (rotation
 * drops the older ones). */
static uint64_t first_held_epoch(const struct collector *c, uint64_t first)
{
	uint64_t from = UINT64_MAX;

	for (size_t i = 0; i < c->nworkers; i++)
		for (size_t j = 0; j < c->workers[i].nepochs; j++) {
			uint64_t e = c->workers[i].epochs[j].epoch;

			if (e >= first && e < from)
				from = e;
		}
	return from;
}

bool collector_delivery(const struct collector *c, uint64_t first, uint64_t last, double *mean,
			double *least)
{
	uint64_t from = first_held_epoch(c, first);
	double sum = 0;
	size_t n = 0;

	if (from == UINT64_MAX || last < from + 2)
		return false;
	*least = HUGE_VAL;
	for (size_t i = 0; i < c->nworkers; i++) {
		const struct worker_info *w = &c->workers[i];
		uint64_t sel = 0;
		bool seen = false;
		double r;

		for (size_t j = 0; j < w->nepochs; j++)
			if (w->epochs[j].epoch >= from && w->epochs[j].epoch <= last) {
				sel += w->epochs[j].selected;
				seen = true;
			}
		if (!seen)
			continue;
		r = (double)sel / (double)(last - from + 1);
		sum += r;
		n++;
		*least = r < *least ? r : *least;
	}
	*mean = n ? sum / (double)n : 0;
	return n > 0;
}

static void set_epoch(struct epoch_stat *e, uint64_t eligible, uint64_t selected, uint64_t refused,
		      uint64_t prob, bool capped, bool calibrating, bool open)
{
	e->eligible = eligible;
	e->selected = selected;
	e->refused = refused;
	e->prob = prob;
	e->capped = capped;
	e->calibrating = calibrating;
	e->open = open;
}

static int handle_sample(struct collector *c, const struct d9_sample *s, size_t size)
{
	size_t nframes = s->stack_bytes > 0 ? (size_t)s->stack_bytes / 8 : 0;
	struct pending_sample *p;
	struct worker_info *w;

	if (size < sizeof(*s))
		return 0;
	if (nframes > D9_MAX_STACK_DEPTH)
		nframes = D9_MAX_STACK_DEPTH;
	p = malloc(sizeof(*p) - sizeof(p->s.stack) + nframes * sizeof(p->s.stack[0]));
	if (!p)
		return -ENOMEM;
	memcpy(&p->s, s, sizeof(*s) - sizeof(s->stack) + nframes * sizeof(s->stack[0]));
	p->s.stack_bytes = s->stack_bytes > 0 ? (int32_t)(nframes * 8) : s->stack_bytes;
	p->next = NULL;
	p->raw = take_raw(c, s->tid);
	if (c->tail)
		c->tail->next = p;
	else
		c->head = p;
	c->tail = p;
	c->npending++;
	w = collector_worker(c, s->worker);
	if (w) {
		w->tid = s->tid;
		w->samples_window++;
	}
	return 0;
}

static int handle_record(struct collector *c, void *data, size_t size);

/* Timed: the loader's cost per sample (samples.loader_ns) is read beside the BPF side's. */
int collector_handle(void *ctx, void *data, size_t size)
{
	struct collector *c = ctx;
	uint64_t t0 = mono_ns();
	int err = handle_record(c, data, size);

	c->loader_ns += mono_ns() - t0;
	return err;
}

static void woken_moments_add(struct woken_moments *m, const struct d9_gate_time *g)
{
	double h = (double)g->woken_hits, k = (double)g->woken_capture_ns,
	       y = (double)g->woken_cycle_ns;

	if (!g->woken_cycle_ns)
		return;
	m->n++;
	m->hh += h * h;
	m->hk += h * k;
	m->kk += k * k;
	m->hy += h * y;
	m->ky += k * y;
	m->yy += y * y;
}

static int handle_record(struct collector *c, void *data, size_t size)
{
	uint32_t type;

	if (size < sizeof(type))
		return 0;
	c->records++;
	memcpy(&type, data, sizeof(type));
	switch (type) {
	case D9_REC_SAMPLE:
		return handle_sample(c, data, size);
	case D9_REC_RAW_STACK:
		return handle_raw(c, data, size);
	case D9_REC_EPOCH: {
		const struct d9_epoch *e = data;
		struct worker_info *w;
		struct epoch_stat *es;

		if (size < sizeof(*e))
			return 0;
		w = collector_worker(c, e->worker);
		es = w ? worker_epoch(w, e->epoch) : NULL;
		if (!es)
			return -ENOMEM;
		set_epoch(es, e->eligible, e->selected, e->refused, e->prob, e->capped,
			  e->calibrating, false);
		es->gate = e->gate;
		es->slowdown = collector_slowdown(&e->gate, c->hit_cost_ns);
		w->woken_chain_ns += e->gate.woken_chain_ns;
		w->woken_cycle_ns += e->gate.woken_cycle_ns;
		w->woken_hits += e->gate.woken_hits;
		w->woken_capture_ns += e->gate.woken_capture_ns;
		woken_moments_add(&w->woken_m, &e->gate);
		return 0;
	}
	case D9_REC_EXEC:
		c->target_exec = true;
		return 0;
	case D9_REC_LONG_POLL:
		return c->long_polls ? long_polls_handle(c->long_polls, c, data, size) : 0;
	case D9_REC_WORKER: {
		const struct d9_worker_seen *ws = data;
		struct worker_info *w;

		if (size < sizeof(*ws))
			return 0;
		w = collector_worker(c, ws->worker);
		if (!w)
			return -ENOMEM;
		w->from_worker_run = true;
		w->tid = ws->tid;
		read_comm(c->pid, ws->tid, w->comm, sizeof(w->comm));
		return 0;
	}
	default:
		return 0;
	}
}

/* A worker's open epoch from the BPF map (0 when found), read once a flush: a flush writes
 * samples of epochs that ended, whose state no window changes any more, and hundreds of them
 * a worker where the epoch's record has not come yet (the worker's next window sends it). */
static int open_epoch_of(struct collector *c, struct worker_info *w, struct d9_worker_state *ws)
{
	if (!w || !c->open_gen)
		return c->open_epoch(c->open_epoch_ctx, w ? w->key : 0, ws);
	if (w->open_gen != c->open_gen) {
		w->open_found = !c->open_epoch(c->open_epoch_ctx, w->key, &w->open);
		w->open_gen = c->open_gen;
	}
	*ws = w->open;
	return w->open_found ? 0 : -1;
}

/* What a sample needs of its worker's epoch: whether the cap refused a selection in it, and
 * the worker's in-window slowdown. From the closed epoch's record, else the open one's state
 * in the map; with neither, not capped and no slowdown. */
static void epoch_view(struct collector *c, struct worker_info *w, uint64_t epoch, bool *capped,
		       double *slowdown, struct d9_gate_time *gate)
{
	struct d9_worker_state ws;

	*capped = false;
	*slowdown = 1.0;
	memset(gate, 0, sizeof(*gate));
	for (size_t i = 0; w && i < w->nepochs; i++)
		if (w->epochs[i].epoch == epoch) {
			*capped = w->epochs[i].capped;
			if (w->epochs[i].slowdown > 0)
				*slowdown = w->epochs[i].slowdown;
			*gate = w->epochs[i].gate;
			return;
		}
	if (c->open_epoch && !open_epoch_of(c, w, &ws) && ws.epoch == epoch) {
		*capped = ws.capped;
		*slowdown = collector_slowdown(&ws.gate, c->hit_cost_ns);
		*gate = ws.gate;
	}
}

/* The wake-chain correction taken as right to within its own size at this z (95%). */
#define WOKEN_MODEL_Z 1.96

static bool same_runtime(const struct worker_info *u, const struct worker_info *w)
{
	return !u->runtime_key || !w->runtime_key || u->runtime_key == w->runtime_key;
}

/*
 * The in-window slowdown of a task woken by another task's poll (D9_SF_WOKEN_BY_TASK): the part
 * of its wait since its wake chain began (a driver's wake: a timer, I/O) ran behind the
 * thread's polls, and the probes lengthened it by their own time there (hits x cost, plus
 * captures), counted in BPF between the chain's start and the resume on the same thread; the
 * rest waited on a clock, which they do not lengthen. The factor is the waits without that
 * time over the waits as seen. The worker's s does not serve here: it prices the hits of a
 * yielding task's own polls, and a chain of tiny polls is slowed far more than one poll's hits
 * (a channel task fed by a producer paced by a clock is underestimated uncorrected and
 * overestimated corrected by s).
 *
 * Pooled over the closed epochs of all the workers of w's runtime, which run the same kinds of
 * chain: one epoch has few whole waits, and where workers outnumber CPUs one worker's whole
 * run may have one or two, whose hits can price above the chain's length (the price is an
 * average) and put its factor at the floor, so that its few samples weigh twenty times their
 * due (bench/RESULTS.md, "The wake-chain factor pooled over a runtime's workers"). The open
 * epoch's g when none has any; 1 when no wait was seen whole.
 */
double collector_woken_factor(const struct collector *c, const struct worker_info *w,
			      const struct d9_gate_time *g)
{
	struct d9_gate_time sum = {};
	double lost, f;

	for (size_t i = 0; w && i < c->nworkers; i++) {
		const struct worker_info *u = &c->workers[i];

		if (!same_runtime(u, w))
			continue;
		sum.woken_cycle_ns += u->woken_cycle_ns;
		sum.woken_hits += u->woken_hits;
		sum.woken_capture_ns += u->woken_capture_ns;
	}
	if (!sum.woken_cycle_ns)
		sum = *g;
	if (!sum.woken_cycle_ns || c->hit_cost_ns <= 0)
		return 1.0;
	lost = (double)sum.woken_hits * c->hit_cost_ns + (double)sum.woken_capture_ns;
	f = 1.0 - lost / (double)sum.woken_cycle_ns;
	return f < SLOWDOWN_FLOOR ? SLOWDOWN_FLOOR : f > 1.0 ? 1.0 : f;
}

/*
 * The factor is 1 - R, R = sum l / sum y over the worker-epochs whose waits it pools, l = h x
 * price + k the probes' time in an epoch's waits and y their length: a ratio estimator, whose
 * variance is n / (n - 1) x sum (l - R y)^2 / (sum y)^2. Its error is the same in every epoch
 * the factor weighs, so it adds to an interval as the price's does (price_se in count_terms),
 * not as the windows' spread: on a workload of wake chains paced by a clock, every window
 * counts alike and that spread says nothing of it.
 */
double collector_woken_rel_se(const struct collector *c, const struct worker_info *w)
{
	struct woken_moments m = {};
	double p = c->hit_cost_ns, h = 0, k = 0, y = 0, r, ss, f;

	for (size_t i = 0; w && i < c->nworkers; i++) {
		const struct worker_info *u = &c->workers[i];

		if (!same_runtime(u, w))
			continue;
		m.n += u->woken_m.n;
		m.hh += u->woken_m.hh;
		m.hk += u->woken_m.hk;
		m.kk += u->woken_m.kk;
		m.hy += u->woken_m.hy;
		m.ky += u->woken_m.ky;
		m.yy += u->woken_m.yy;
		h += (double)u->woken_hits;
		k += (double)u->woken_capture_ns;
		y += (double)u->woken_cycle_ns;
	}
	if (m.n < 2 || y <= 0 || p <= 0)
		return 0;
	r = (h * p + k) / y;
	/* sum (l - r y)^2, expanded over the moments */
	ss = p * p * m.hh + 2 * p * m.hk + m.kk - 2 * r * (p * m.hy + m.ky) + r * r * m.yy;
	f = 1 - r;
	if (ss <= 0 || f < SLOWDOWN_FLOOR)
		return 0;
	return sqrt(m.n / (m.n - 1) * ss) / y / f;
}

/* floor(x) plus one with probability frac(x): an integer whose expectation is x. The draw is
 * a hash of the sample so that reruns of the same input write the same weights. */
static uint64_t stochastic_round(double x, uint64_t h)
{
	double fl = (double)(uint64_t)x;
	double u = (double)(splitmix64(h) >> 11) * 0x1.0p-53;

	return (uint64_t)fl + (u < x - fl ? 1 : 0);
}

/* The innermost pids of NSpid: "NSpid:\t<host> ... <innermost>". */
static void read_ns_ids(int pid, uint32_t tid, uint32_t *ns_pid, uint32_t *ns_tid)
{
	char path[64], line[256];
	FILE *f;

	*ns_pid = (uint32_t)pid;
	*ns_tid = tid;
	snprintf(path, sizeof(path), "/proc/%d/task/%u/status", pid, tid);
	f = fopen(path, "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		const char *key = !strncmp(line, "NStgid:", 7)	? "t"
				  : !strncmp(line, "NSpid:", 6) ? "p"
								: NULL;
		char *last;

		if (!key)
			continue;
		last = strrchr(line, '\t');
		if (!last)
			continue;
		if (*key == 't')
			*ns_pid = (uint32_t)strtoul(last + 1, NULL, 10);
		else
			*ns_tid = (uint32_t)strtoul(last + 1, NULL, 10);
	}
	fclose(f);
}

static struct run_thread *note_thread(struct collector *c, uint32_t tid, int worker)
{
	struct run_thread *t;

	for (size_t i = 0; i < c->nthreads; i++) {
		if (c->threads[i].tid == tid) {
			c->threads[i].worker = worker;
			return &c->threads[i];
		}
	}
	if (c->nthreads == c->threads_cap) {
		size_t ncap = c->threads_cap ? c->threads_cap * 2 : 16;
		void *np = realloc(c->threads, ncap * sizeof(*c->threads));

		if (!np)
			return NULL;
		c->threads = np;
		c->threads_cap = ncap;
	}
	t = &c->threads[c->nthreads++];
	memset(t, 0, sizeof(*t));
	t->pid = (uint32_t)c->pid;
	t->tid = tid;
	t->worker = worker;
	read_comm(c->pid, tid, t->comm, sizeof(t->comm));
	read_ns_ids(c->pid, tid, &t->ns_pid, &t->ns_tid);
	return t;
}

static const char *park_decided_name(uint32_t how)
{
	static const char *const names[] = {
	    [D9_HOW_NONE] = "none",
	    [D9_HOW_PENDING] = "returned_pending",
	    [D9_HOW_ALWAYS] = "always_pending",
	    [D9_HOW_UNOBSERVED] = "outcome_unknown",
	};

	return how < sizeof(names) / sizeof(names[0]) ? names[how] : "none";
}

static void sample_runtime(struct collector *c, const struct d9_sample *s, struct task_sample *ts)
{
	struct runtime_info *r = collector_runtime(c, s->runtime);

	ts->runtime = r ? r->index : -1;
	ts->runtime_key = s->runtime;
	if (!r)
		return;
	r->samples++;
	if (r->first_worker < 0)
		r->first_worker = ts->worker;
}

/* The sample's program counters, innermost first: the DWARF unwind of its raw stack copy when
 * that found more than the frame-pointer chain, else the chain with the leaf on top. */
static const uint64_t *sample_pcs(struct collector *c, const struct d9_sample *s,
				  const struct raw_copy *raw, uint64_t *dwarf_pcs,
				  uint64_t *leaf_pcs, size_t *nframes)
{
	const uint64_t *pcs = (const uint64_t *)s->stack;

	*nframes = s->stack_bytes > 0 ? (size_t)s->stack_bytes / 8 : 0;
	if (c->unw && raw) {
		struct unwind_regs regs = {.ip = raw->ip, .sp = raw->sp, .bp = raw->bp};
		enum unwind_stop stop = UNWIND_ERROR;
		size_t npcs = 0;

		unwinder_unwind(c->unw, &regs, raw->data, raw->len, dwarf_pcs, D9_MAX_STACK_DEPTH,
				&npcs, &stop);
		c->unwind_stops[stop < UNWIND_STATS ? stop : UNWIND_STATS - 1]++;
		c->frames_fp += *nframes;
		c->frames_dwarf += npcs;
		c->samples_dwarf++;
		/* Keep the frame-pointer chain when DWARF found less (no CFI, foreign code). The
		 * raw copy starts in the leaf (its registers are as at its entry). */
		if (npcs >= *nframes + (s->leaf_ip != 0)) {
			pcs = dwarf_pcs;
			*nframes = npcs;
		}
	}
	/* A frame-pointer chain taken at the leaf's return starts at its call site: the leaf
	 * goes on top. */
	if (s->leaf_ip && *nframes && pcs == (const uint64_t *)s->stack) {
		leaf_pcs[0] = s->leaf_ip;
		memcpy(leaf_pcs + 1, pcs, *nframes * sizeof(*pcs));
		pcs = leaf_pcs;
		(*nframes)++;
	}
	return pcs;
}

/* Names the pcs, inlined calls expanded; returns the number of frames. */
static size_t symbolize_frames(struct collector *c, const uint64_t *pcs, size_t nframes,
			       struct task_frame *frames)
{
	size_t n = 0;

	for (size_t i = 0; i < nframes && n < MAX_FRAMES_OUT; i++) {
		struct inline_frame inl[MAX_INLINE];
		struct sym_info si = {};
		size_t ninl = 0;
		const char *name = symbolizer_resolve(c->sym, pcs[i], &si) ? NULL : si.name;

		if (c->unw)
			unwinder_inline_frames(c->unw, pcs[i], i > 0, inl, MAX_INLINE, &ninl);
		/* Innermost inlined call first, the function that contains them last. */
		for (size_t k = 0; k + 1 < ninl && n < MAX_FRAMES_OUT; k++)
			frames[n++] = (struct task_frame){pcs[i],	  inl[k].name, si.module,
							  si.file_offset, true,	       false};
		if (n < MAX_FRAMES_OUT)
			frames[n++] = (struct task_frame){
			    pcs[i],    name ? name : ninl ? inl[ninl - 1].name : NULL,
			    si.module, si.file_offset,
			    false,     false};
	}
	return n;
}

void collector_name_folded_frames(struct collector *c, struct task_frame *frames, size_t n,
				  const char *future)
{
	folded_names_apply(&c->folded, c->sym, frames, n, future);
}

size_t collector_symbolize(struct collector *c, const uint64_t *pcs, size_t n,
			   struct task_frame *frames)
{
	return symbolize_frames(c, pcs, n, frames);
}

double collector_resume_factor(struct collector *c, struct worker_info *w, uint64_t epoch,
			       uint32_t flags, bool *capped, double *run_rel_se)
{
	struct d9_gate_time gate;
	double slowdown, f, e, own;

	epoch_view(c, w, epoch, capped, &slowdown, &gate);
	if (run_rel_se)
		*run_rel_se = 0;
	if (!(flags & D9_SF_WINDOWED))
		return 1.0;
	if (flags & D9_SF_AFTER_YIELD) {
		/* At the floor the factor no longer follows the price, but it is off by as
		 * much as the floor allows: that, not 0. */
		e = collector_slowdown_sensitivity(&gate, c->hit_cost_ns);
		if (run_rel_se)
			*run_rel_se = (isfinite(e) ? e : (1 - SLOWDOWN_FLOOR) / SLOWDOWN_FLOOR) *
				      c->hit_cost_rel_se;
		return slowdown;
	}
	if (flags & D9_SF_WOKEN_BY_TASK) {
		f = collector_woken_factor(c, w, &gate);
		/* f = 1 - (hits x cost + captures) / cycle: 1/f grows by (1 - f) / f per unit of
		 * the cost's relative error (less the captures' part, left in: an upper bound). */
		e = f > SLOWDOWN_FLOOR && f < 1 ? (1 - f) / f : 0;
		/* The factor is a model of how the probes' time in a chain delays its resumes:
		 * a chain guessed on a multi-thread runtime may not be one, and a resume paced
		 * by a timer's whole ticks is delayed by a tick or not at all. Its bias is taken
		 * as within its own size (1/f - 1) at 95% (bench/RESULTS.md, "The wake-chain
		 * correction's own error"). */
		if (run_rel_se) {
			own = hypot(collector_woken_rel_se(c, w), e / WOKEN_MODEL_Z);
			*run_rel_se = hypot(e * c->hit_cost_rel_se, own);
		}
		return f;
	}
	return 1.0;
}

/* A worker's time on the CPU inside the windows, as it would have been without the probes:
 * less the hits' and captures' cost where idle time absorbed it (a worker with time to spare
 * would have been idle for it); where it did not, a busy worker would have spent that time on
 * its tasks. */
static double unprobed_busy_ns(const struct d9_gate_time *g, double hit_cost_ns)
{
	double probe = (double)g->hits * hit_cost_ns + (double)g->capture_ns;
	double absorbed = probe < (double)g->idle_ns ? probe : (double)g->idle_ns;
	/* Time on the CPU where the switches were followed; busy time misses a window's end. */
	double on = g->oncpu_ns ? (double)g->oncpu_ns : (double)g->busy_ns + (double)g->capture_ns;
	double b = on - absorbed;

	return b > 0 ? b : 0;
}

/*
 * A task that yielded is resumed at the rate its worker runs, so its resumes in an epoch are
 * in proportion to the time its worker spent on the CPU. Where workers outnumber free CPUs,
 * which of them hold a CPU during a window of a few ms, and for how long, varies from window
 * to window far more than the tasks' mix does, and a window's count over the duty spreads
 * with it. Over the share of the workers' CPU time the windows saw (a ratio estimator; that
 * time counted by the long polls' scheduler switch and tick, per thread while it runs a
 * worker) that spread is gone (bench/RESULTS.md). Pooled over workers, so that a worker off
 * the CPU for a whole window counts with its CPU time, not as lost.
 */
double collector_yield_coverage(struct collector *c, uint64_t epoch)
{
	double in = 0, all;

	if (!c->worker_cpu)
		return 0;
	if (c->coverage_epoch == epoch)
		return c->coverage;
	all = c->worker_cpu(c->worker_cpu_ctx, epoch);
	for (size_t i = 0; all > 0 && i < c->nworkers; i++) {
		struct d9_gate_time g;
		double slowdown;
		bool capped;

		epoch_view(c, &c->workers[i], epoch, &capped, &slowdown, &g);
		in += unprobed_busy_ns(&g, c->hit_cost_ns);
	}
	c->coverage_epoch = epoch;
	c->coverage = all > 0 && in > 0 ? in / all : 0;
	return c->coverage;
}

/*
 * A task that yielded is resumed at the rate its worker runs: over the share of the workers'
 * CPU time the epoch's windows saw, its in-window resumes spread far less from window to
 * window than over the duty (collector_yield_coverage). The ratio assumes the windows' mix of
 * work is the epoch's, as the in-window correction already does.
 */
double collector_window_prob(struct collector *c, uint64_t epoch, uint32_t flags, double duty)
{
	double cov;

	if (!(flags & D9_SF_WINDOWED) || !(flags & D9_SF_AFTER_YIELD) || !(duty < 1))
		return duty;
	cov = collector_yield_coverage(c, epoch);
	return cov > 0 ? cov : duty;
}

/* The inclusion probability as the run's cost corrected it, and the weights it gives: the
 * draw's (1 / its block) times the chance of being in a window, times the correction. */
static void sample_weights(struct collector *c, const struct d9_sample *s, struct worker_info *w,
			   struct task_sample *ts)
{
	double p = (double)s->prob / (double)D9_PROB_ONE;
	double duty = (double)s->duty / (double)D9_PROB_ONE;
	bool capped;

	if (duty > 0 && duty < 1)
		p = p / duty * collector_window_prob(c, s->epoch, s->flags, duty);
	ts->prob = p * collector_resume_factor(c, w, s->epoch, s->flags, &capped, NULL);
	if (!(ts->prob > 0))
		ts->prob = 1.0 / (double)D9_PROB_ONE; /* never divide by zero below */
	ts->capped = (s->flags & D9_SF_CAPPED) || capped;
	ts->weight_count =
	    stochastic_round(1.0 / ts->prob, s->idle_end_ns ^ ((uint64_t)s->tid << 32));
	ts->idle_known = s->flags & D9_SF_IDLE_KNOWN;
	ts->weight_idle_ns =
	    ts->idle_known
		? (uint64_t)((double)(s->idle_end_ns - s->idle_start_ns) / ts->prob + 0.5)
		: 0;
}

static void count_sample(struct collector *c, const struct task_sample *ts, struct worker_info *w,
			 const struct d9_sample *s)
{
	for (size_t i = 0; i < c->nwriters; i++)
		if (c->writers[i].sample(&c->writers[i], ts))
			c->write_errors++;
	if (c->lasting && c->lasting->sample(c->lasting, ts))
		c->write_errors++;
	c->samples_written++;
	if (!ts->on_cpu &&
	    est_terms_add(&c->terms, ts->epoch, ts->future, ts->window, (double)ts->weight_count))
		c->write_errors++;
	if (ts->nframes)
		c->samples_with_stack++;
	if (s->stack_bytes < 0)
		c->samples_stack_errors++;
	if (ts->task_id_ok)
		c->samples_task_id_ok++;
	if (w)
		w->samples++;
}

/* What park and cpu samples share: thread, worker, task id, stack. */
static void sample_common(struct collector *c, const struct d9_sample *s, struct worker_info *w,
			  struct task_sample *ts)
{
	struct run_thread *rt = note_thread(c, s->tid, w ? w->index : -1);

	ts->pid = s->pid;
	ts->tid = s->tid;
	ts->ns_pid = rt ? rt->ns_pid : s->pid;
	ts->ns_tid = rt ? rt->ns_tid : s->tid;
	ts->worker = w ? w->index : -1;
	ts->worker_key = s->worker;
	if (w && s->runtime)
		w->runtime_key = s->runtime;
	ts->task_id_ok = s->flags & D9_SF_TASK_ID_OK;
	ts->task_id = s->task_id;
	ts->epoch = s->epoch;
	ts->stack_error = s->stack_bytes < 0 ? s->stack_bytes : 0;
}

/* A clock tick on a worker: one period of its CPU time, named after the task it ran. */
static void write_cpu_sample(struct collector *c, const struct d9_sample *s,
			     const struct raw_copy *raw)
{
	struct worker_info *w = collector_worker(c, s->worker);
	struct task_frame frames[MAX_FRAMES_OUT];
	uint64_t dwarf_pcs[D9_MAX_STACK_DEPTH];
	uint64_t leaf_pcs[D9_MAX_STACK_DEPTH + 1];
	struct task_sample ts = {};
	const char *root = NULL;
	const uint64_t *pcs;
	bool scheduler;
	size_t n;

	pcs = sample_pcs(c, s, raw, dwarf_pcs, leaf_pcs, &n);
	n = symbolize_frames(c, pcs, n, frames);
	scheduler = cpu_samples_name(c->cpu, c->sym, c->types, frames, n,
				     s->flags & D9_SF_TASK_ID_OK, s->task_id, &ts.future, &root);
	collector_name_folded_frames(c, frames, n, ts.future);
	if (root && c->task_root && n < MAX_FRAMES_OUT)
		frames[n++] = (struct task_frame){.name = root, .task_root = true};
	sample_common(c, s, w, &ts);
	/* The worker's own launch task is not a task being polled: id 0, as when none is. */
	if (scheduler) {
		ts.task_id_ok = true;
		ts.task_id = 0;
	}
	ts.runtime = -1;
	ts.timestamp_ns = s->park_ns;
	ts.prob = 1.0;
	ts.on_cpu = true;
	ts.weight_cpu_ns = c->cpu->period_ns;
	ts.outcome = "unknown";
	ts.park_point = park_point_name(D9_PARK_NONE);
	ts.park_decided = "none";
	ts.nframes = n;
	ts.frames = frames;
	ts.raw = raw;
	count_sample(c, &ts, w, s);
}

static void write_sample(struct collector *c, const struct d9_sample *s, const struct raw_copy *raw)
{
	struct worker_info *w = collector_worker(c, s->worker);
	struct task_frame frames[MAX_FRAMES_OUT];
	uint64_t dwarf_pcs[D9_MAX_STACK_DEPTH];
	uint64_t leaf_pcs[D9_MAX_STACK_DEPTH + 1];
	struct task_sample ts = {};
	struct task_type *type;
	const uint64_t *pcs;
	size_t n;

	if (s->flags & D9_SF_CPU) {
		if (c->cpu)
			write_cpu_sample(c, s, raw);
		return;
	}
	pcs = sample_pcs(c, s, raw, dwarf_pcs, leaf_pcs, &n);
	n = symbolize_frames(c, pcs, n, frames);
	type = c->types && s->task_vtable ? task_types_find(c->types, s->task_vtable) : NULL;
	if (type) {
		ts.future = type->name;
		collector_name_folded_frames(c, frames, n, type->name);
		type->samples++;
		if (c->cpu && (s->flags & D9_SF_TASK_ID_OK))
			cpu_samples_note_task(c->cpu, s->task_id, type);
		if (c->task_root && n < MAX_FRAMES_OUT)
			frames[n++] = (struct task_frame){.name = type->root, .task_root = true};
	}
	sample_common(c, s, w, &ts);
	ts.timestamp_ns = (s->flags & D9_SF_STACK_AT_PARK) ? s->park_ns : s->idle_end_ns;
	sample_runtime(c, s, &ts);
	sample_weights(c, s, w, &ts);
	ts.window = (s->flags & D9_SF_WINDOWED) ? s->window : 0;
	ts.idle_start_ns = s->idle_start_ns;
	ts.idle_end_ns = s->idle_end_ns;
	ts.poll_end_ns = s->poll_end_ns;
	ts.outcome = (s->flags & D9_SF_COMPLETE)  ? "complete"
		     : (s->flags & D9_SF_PENDING) ? "pending"
						  : "unknown";
	ts.park_point = park_point_name(s->park_point);
	ts.park_decided = park_decided_name(s->park_how);
	ts.also_pending = s->also_pending;
	ts.nframes = n;
	ts.frames = frames;
	ts.raw = raw;
	count_sample(c, &ts, w, s);
}

/* Writes the sample *pp points to and unlinks it; prev is the one before it, or NULL. */
static void write_pending(struct collector *c, struct pending_sample **pp,
			  struct pending_sample *prev)
{
	struct pending_sample *p = *pp;

	write_sample(c, &p->s, p->raw);
	*pp = p->next;
	if (c->tail == p)
		c->tail = prev;
	c->npending--;
	free(p->raw);
	free(p);
}

void collector_flush(struct collector *c, uint64_t now_ns, bool final)
{
	uint64_t t0 = mono_ns();

	/* A final flush writes samples of epochs still open: their state is read afresh. */
	c->open_gen = final ? 0 : ++c->flushes;
	while (c->head) {
		struct pending_sample *p = c->head;

		/* Wait for the epoch to end so "capped" is final, unless the queue is so long
		 * (a flood) that waiting would grow memory without bound. */
		if (!final && (p->s.epoch >= c->epoch_limit ||
			       (c->npending <= MAX_PENDING &&
				(p->s.epoch + 1) * D9_NSEC_PER_SEC + FLUSH_GRACE_NS > now_ns)))
			break;
		write_pending(c, &c->head, NULL);
	}
	c->open_gen = 0;
	c->loader_ns += mono_ns() - t0;
}

void collector_flush_before(struct collector *c, uint64_t epoch)
{
	struct pending_sample **pp = &c->head, *prev = NULL;

	while (*pp) {
		if ((*pp)->s.epoch < epoch) {
			write_pending(c, pp, prev);
			continue;
		}
		prev = *pp;
		pp = &(*pp)->next;
	}
}

void collector_new_interval(struct collector *c, uint64_t keep_from)
{
	for (size_t i = 0; i < c->nworkers; i++) {
		struct worker_info *w = &c->workers[i];
		size_t k = 0;

		for (size_t j = 0; j < w->nepochs; j++)
			if (w->epochs[j].epoch >= keep_from)
				w->epochs[k++] = w->epochs[j];
		w->nepochs = k;
		w->samples = 0;
	}
	for (size_t i = 0; i < c->nruntimes; i++)
		c->runtimes[i].samples = 0;
	for (size_t i = 0; c->types && i < c->types->n; i++)
		c->types->v[i].samples = 0;
	c->samples_earlier += c->samples_written;
	c->with_stack_earlier += c->samples_with_stack;
	memset(c->unwind_stops, 0, sizeof(c->unwind_stops));
	c->samples_dwarf = c->frames_fp = c->frames_dwarf = 0;
	c->samples_written = c->samples_with_stack = c->samples_stack_errors = 0;
	c->samples_task_id_ok = 0;
	est_terms_free(&c->terms);
	est_terms_free(&c->counted);
}

void collector_close_epochs(struct collector *c, uint64_t before, uint64_t ended)
{
	for (size_t i = 0; i < c->nworkers; i++) {
		struct worker_info *w = &c->workers[i];
		struct d9_worker_state ws;
		struct epoch_stat *e;

		if (!c->open_epoch || c->open_epoch(c->open_epoch_ctx, w->key, &ws) ||
		    ws.epoch >= before)
			continue;
		e = worker_epoch(w, ws.epoch);
		if (!e)
			continue;
		/* Not rolled over (no window saw the worker after it), but over all the same. */
		set_epoch(e, ws.eligible, ws.selected, ws.refused, ws.prob, ws.capped,
			  ws.calibrating, ws.epoch >= ended);
		e->gate = ws.gate;
		e->slowdown = collector_slowdown(&ws.gate, c->hit_cost_ns);
	}
}

void collector_free(struct collector *c)
{
	while (c->head) {
		struct pending_sample *p = c->head;

		c->head = p->next;
		free(p->raw);
		free(p);
	}
	for (size_t i = 0; i < c->nraws; i++)
		free(c->raws[i]);
	free(c->raws);
	for (size_t i = 0; i < c->nworkers; i++)
		free(c->workers[i].epochs);
	free(c->workers);
	free(c->runtimes);
	free(c->threads);
	est_terms_free(&c->terms);
	est_terms_free(&c->counted);
	folded_names_free(&c->folded);
	memset(c, 0, sizeof(*c));
}
