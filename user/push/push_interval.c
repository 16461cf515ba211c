// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The pusher as a writer: samples go, by their capture time, into intervals [from, until) of
 * whole Unix seconds, aligned to multiples of --push-interval (the first starts when the run
 * does), each encoded as it fills by the same pprof code as profile.pb.gz. The collector hands
 * a sample over only once its epoch (one second) has ended, so an interval is closed
 * PUSH_LAG_NS after its end, when its samples are all in; the rare one arriving later (a
 * flood, a stalled loop) goes into the oldest open interval and is counted, so the pushed
 * weights still add up to the run's. Closing an interval encodes its tables, builds the
 * request and hands it to the sending thread: the only work the record loop does for it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/random.h>
#include <curl/curl.h>
#include "cgroup_resolve.h"
#include "dial9_bpf.h"
#include "options.h"
#include "pprof_profile.h"
#include "push.h"
#include "push_labels.h"
#include "push_send.h"
#include "target.h"
#include "util_clock.h"

/* One epoch, the collector's flush grace and a read period of the loader. */
#define PUSH_LAG_NS (2500ULL * 1000 * 1000)
/* Intervals open at once: the current one and those waiting for PUSH_LAG_NS (1 s at least). */
#define PUSH_OPEN_MAX 8
/* How long the end of a run waits for the server. */
#define PUSH_FLUSH_NS (5ULL * D9_NSEC_PER_SEC)

struct push_interval {
	uint64_t from_s, until_s;   /* Unix seconds */
	uint64_t from_ns, until_ns; /* CLOCK_MONOTONIC */
	FILE *mem;
	char *buf;
	size_t len;
	struct pprof_writer *enc;
	uint64_t samples;
};

struct pusher {
	const struct options *o;
	struct push_stats *st;
	struct push_sender *snd;
	int64_t real_off_ns; /* CLOCK_REALTIME - CLOCK_MONOTONIC */
	char *name_q;	     /* the name parameter, URL-encoded */
	/* On the heap: an open memstream keeps the addresses of buf and len. */
	struct push_interval *open[PUSH_OPEN_MAX];
	size_t nopen;
	uint64_t closed;
	bool enc_failed;
	char sample_types[512]; /* the sample_type_config part */
};

static void interval_free(struct push_interval *iv)
{
	pprof_profile_free(iv->enc);
	if (iv->mem)
		fclose(iv->mem);
	free(iv->buf);
	free(iv);
}

/* Opens the interval starting at from_s (the next after the last open one when 0). */
static void interval_start(struct pusher *p, uint64_t from_s)
{
	unsigned int every = p->o->push.interval_s;
	struct push_interval *iv;

	if (p->nopen == PUSH_OPEN_MAX || !(iv = calloc(1, sizeof(*iv))))
		return;
	iv->from_s = from_s ? from_s : p->open[p->nopen - 1]->until_s;
	iv->until_s = (iv->from_s / every + 1) * every;
	iv->from_ns = iv->from_s * D9_NSEC_PER_SEC - p->real_off_ns;
	iv->until_ns = iv->until_s * D9_NSEC_PER_SEC - p->real_off_ns;
	iv->mem = open_memstream(&iv->buf, &iv->len);
	iv->enc = iv->mem ? pprof_profile_new(iv->mem, true) : NULL;
	p->open[p->nopen++] = iv;
}

static int push_sample(struct writer *w, const struct task_sample *s)
{
	struct pusher *p = w->priv;
	struct push_interval *iv = p->open[0];

	if (!iv)
		return -ENOMEM;
	if (s->timestamp_ns < iv->from_ns && p->closed)
		p->st->late_samples++;
	for (size_t i = 1; i < p->nopen && s->timestamp_ns >= p->open[i]->from_ns; i++)
		iv = p->open[i];
	iv->samples++;
	return iv->enc ? pprof_profile_sample(iv->enc, s) : -ENOMEM;
}

/* The request body: the profile and its sample types, as a multipart form. */
static struct push_item *build_item(struct pusher *p, const struct push_interval *iv)
{
	struct push_item *it = calloc(1, sizeof(*it));
	uint64_t r = 0;
	char b[48];
	FILE *f;

	if (!it)
		return NULL;
	if (getrandom(&r, sizeof(r), 0) != sizeof(r))
		r = mono_ns();
	snprintf(b, sizeof(b), "dial9-bpf-%016" PRIx64, r);
	f = open_memstream(&it->body, &it->len);
	if (!f || asprintf(&it->ctype, "multipart/form-data; boundary=%s", b) < 0 ||
	    asprintf(&it->query,
		     "name=%s&from=%" PRIu64 "&until=%" PRIu64 "&format=pprof&spyName=dial9-bpf"
		     "&sampleRate=%" PRIu64,
		     p->name_q, iv->from_s, iv->until_s, p->o->per_worker_hz) < 0) {
		if (f)
			fclose(f);
		push_item_free(it);
		free(it);
		return NULL;
	}
	fprintf(f,
		"--%s\r\nContent-Disposition: form-data; name=\"profile\"; "
		"filename=\"profile.pb.gz\"\r\nContent-Type: application/octet-stream\r\n\r\n",
		b);
	fwrite(iv->buf, 1, iv->len, f);
	fprintf(f,
		"\r\n--%s\r\nContent-Disposition: form-data; name=\"sample_type_config\"; "
		"filename=\"sample_type_config.json\"\r\nContent-Type: application/json\r\n\r\n"
		"%s\r\n--%s--\r\n",
		b, p->sample_types, b);
	if (fclose(f)) {
		push_item_free(it);
		free(it);
		return NULL;
	}
	return it;
}

/* Encodes the oldest open interval's tables and hands it to the sender. */
static void interval_close(struct pusher *p, const struct run_context *rc)
{
	struct push_interval *iv = p->open[0];
	struct run_context irc = *rc;
	struct push_item *it = NULL;
	int err = -ENOMEM;

	irc.started_ns = iv->from_ns;
	irc.stopped_ns = iv->until_ns;
	irc.realtime_offset_ns = (uint64_t)p->real_off_ns;
	irc.stop_reason = NULL;
	if (iv->enc && !(err = pprof_profile_finish(iv->enc, &irc)))
		err = fflush(iv->mem) ? -errno : 0;
	if (!err && !(it = build_item(p, iv)))
		err = -ENOMEM;
	if (err && !p->enc_failed) {
		fprintf(stderr,
			"dial9-bpf: push: failed to encode the interval [%" PRIu64 ", %" PRIu64
			"): %s: it is not sent\n",
			iv->from_s, iv->until_s, strerror(-err));
		p->enc_failed = true;
	}
	if (it) {
		p->st->intervals++;
		p->st->samples += iv->samples;
		if (it->len > p->st->body_bytes_max)
			p->st->body_bytes_max = it->len;
		push_sender_put(p->snd, it);
	}
	interval_free(iv);
	memmove(&p->open[0], &p->open[1], --p->nopen * sizeof(p->open[0]));
	p->closed++;
}

void push_tick(struct writer *w, const struct run_context *rc, uint64_t now)
{
	struct pusher *p;

	if (!w)
		return;
	p = w->priv;
	while (p->nopen < PUSH_OPEN_MAX && now >= p->open[p->nopen - 1]->until_ns)
		interval_start(p, 0);
	while (p->nopen > 1 && now >= p->open[0]->until_ns + PUSH_LAG_NS)
		interval_close(p, rc);
}

static int push_finish(struct writer *w, const struct run_context *rc)
{
	struct pusher *p = w->priv;
	struct push_interval *last;
	uint64_t stop_s =
	    (rc->stopped_ns + (uint64_t)p->real_off_ns + D9_NSEC_PER_SEC - 1) / D9_NSEC_PER_SEC;

	while (p->nopen < PUSH_OPEN_MAX && rc->stopped_ns >= p->open[p->nopen - 1]->until_ns)
		interval_start(p, 0);
	/* The last interval ends with the run, on a whole second. */
	last = p->open[p->nopen - 1];
	if (stop_s < last->until_s) {
		last->until_s = stop_s > last->from_s ? stop_s : last->from_s + 1;
		last->until_ns = last->until_s * D9_NSEC_PER_SEC - p->real_off_ns;
	}
	while (p->nopen)
		interval_close(p, rc);
	push_sender_stop(p->snd, PUSH_FLUSH_NS);
	push_stats_print(p->st, p->o->quiet);
	curl_free(p->name_q);
	free(p);
	w->priv = NULL;
	return 0;
}

static void push_abort(struct writer *w)
{
	struct pusher *p = w->priv;

	push_sender_stop(p->snd, 0);
	while (p->nopen)
		interval_free(p->open[--p->nopen]);
	curl_free(p->name_q);
	free(p);
	w->priv = NULL;
}

/* --push without the user and password a URL may carry: for messages and metadata. */
static void url_for_display(const char *url, char *out, size_t len)
{
	CURLU *u = curl_url();
	char *shown = NULL;

	if (u && !curl_url_set(u, CURLUPART_URL, url, 0) &&
	    !curl_url_set(u, CURLUPART_USER, NULL, 0) &&
	    !curl_url_set(u, CURLUPART_PASSWORD, NULL, 0) &&
	    !curl_url_get(u, CURLUPART_URL, &shown, 0))
		snprintf(out, len, "%s", shown);
	else
		snprintf(out, len, "(unparsable URL)");
	curl_free(shown);
	curl_url_cleanup(u);
}

int push_writer_open(const struct options *o, const struct target *t, const struct out_dir *dir,
		     struct push_stats *st, struct writer *w)
{
	struct pusher *p = calloc(1, sizeof(*p));
	struct push_spool sp;
	int err;

	if (!p)
		return -ENOMEM;
	memset(st, 0, sizeof(*st));
	st->interval_s = o->push.interval_s;
	url_for_display(o->push.url, st->url, sizeof(st->url));
	err = push_series_name(&o->push, t, st->name, sizeof(st->name));
	if (err) {
		fprintf(stderr,
			"dial9-bpf: push: the series name is too long: use fewer --label\n");
		free(p);
		return err;
	}
	p->o = o;
	p->st = st;
	push_sample_type_config(p->sample_types, sizeof(p->sample_types));
	p->name_q = curl_easy_escape(NULL, st->name, 0);
	p->real_off_ns = (int64_t)(now_ns(CLOCK_REALTIME) - now_ns(CLOCK_MONOTONIC));
	/* Once, before any thread: libcurl's global state is not thread-safe to set up. */
	if (!p->name_q || curl_global_init(CURL_GLOBAL_DEFAULT)) {
		fprintf(stderr, "dial9-bpf: failed to set up libcurl\n");
		curl_free(p->name_q);
		free(p);
		return -ENOMEM;
	}
	err = push_spool_open(&sp, dir, o->push.spool_dir, o->push.spool_mb << 20);
	if (!err)
		err = push_sender_start(&p->snd, &o->push, &sp, st);
	else
		push_spool_close(&sp);
	if (err) {
		curl_free(p->name_q);
		free(p);
		return err;
	}
	interval_start(p, now_ns(CLOCK_REALTIME) / D9_NSEC_PER_SEC);
	if (!p->nopen) {
		push_sender_stop(p->snd, 0);
		curl_free(p->name_q);
		free(p);
		return -ENOMEM;
	}
	w->priv = p;
	w->format = "push";
	w->sample = push_sample;
	w->finish = push_finish;
	w->abort = push_abort;
	return 0;
}
