// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Sending intervals: one thread with one libcurl handle (connections are reused), so the
 * record loop never waits for the network, only for a list append.
 *
 * Order is kept: while the spool holds anything, new intervals go behind it on disk and the
 * spool's oldest is sent first. A connect error, a timeout, 429 or 5xx is retried after an
 * exponential backoff (1 s doubling to 30 s, jittered so that a fleet does not retry in step);
 * the interval that failed waits in the spool. Any other 4xx means the request itself is wrong
 * (resending cannot help): it is dropped with one line and counted.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <curl/curl.h>
#include "dial9_bpf.h"
#include "options.h"
#include "privs.h"
#include "push_send.h"
#include "util_clock.h"

#define CONNECT_TIMEOUT_MS 5000L
#define REQUEST_TIMEOUT_MS 15000L
#define BACKOFF_MIN_NS (1ULL * D9_NSEC_PER_SEC)
#define BACKOFF_MAX_NS (30ULL * D9_NSEC_PER_SEC)
/* While flushing at exit, retries come at least this often. */
#define FLUSH_BACKOFF_NS (500ULL * 1000 * 1000)

enum send_result { SEND_OK, SEND_RETRY, SEND_DROP };

struct push_sender {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* Under lock: handed over, not yet taken by the thread. */
	struct push_item *head, *tail;
	uint64_t queued_bytes, queue_dropped;
	bool stopping, done;
	uint64_t deadline_ns;
	int abort; /* atomic: the flush's time is up, end the transfer under way */

	/* The thread's own. */
	struct push_spool spool;
	struct push_stats *st;
	CURL *curl;
	struct curl_slist *user_headers;
	char *ingest; /* URL/ingest */
	uint64_t backoff_ns, next_try_ns;
	bool failing;
	char resp[160];
	size_t resp_len;
};

static size_t on_body(char *data, size_t size, size_t n, void *ctx)
{
	struct push_sender *s = ctx;
	size_t len = size * n, room = sizeof(s->resp) - 1 - s->resp_len;

	if (len < room)
		room = len;
	memcpy(s->resp + s->resp_len, data, room);
	s->resp_len += room;
	s->resp[s->resp_len] = 0;
	return len;
}

static int on_progress(void *ctx, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	struct push_sender *s = ctx;

	(void)dt, (void)dn, (void)ut, (void)un;
	return __atomic_load_n(&s->abort, __ATOMIC_RELAXED);
}

/* The first failure of a run of them, and the first success after: one line each. */
static void note_state(struct push_sender *s, bool ok, const char *what)
{
	if (ok && s->failing)
		fprintf(stderr,
			"dial9-bpf: push: %s answers again: sending the %zu spooled "
			"intervals in order\n",
			s->st->url, s->spool.n);
	else if (!ok && !s->failing)
		fprintf(stderr,
			"dial9-bpf: push: %s: %s: retrying with backoff, keeping intervals in %s "
			"(at most %" PRIu64 " MB)\n",
			s->st->url, what, s->spool.dir.path, s->spool.limit >> 20);
	s->failing = !ok;
}

static long request_timeout_ms(struct push_sender *s)
{
	uint64_t now = mono_ns();
	long left;

	pthread_mutex_lock(&s->lock);
	left = !s->stopping	      ? REQUEST_TIMEOUT_MS
	       : s->deadline_ns > now ? (long)((s->deadline_ns - now) / 1000000) + 1
				      : 1;
	pthread_mutex_unlock(&s->lock);
	return left < REQUEST_TIMEOUT_MS ? left : REQUEST_TIMEOUT_MS;
}

static enum send_result send_item(struct push_sender *s, const struct push_item *it)
{
	struct curl_slist *h = NULL;
	char *url = NULL, *ctype = NULL;
	curl_off_t us = 0;
	long code = 0;
	CURLcode res = CURLE_OUT_OF_MEMORY;

	/* curl_slist_append copies: the run's headers, then this body's type; no 100-continue
	 * round trip before large bodies. */
	for (struct curl_slist *u = s->user_headers; u; u = u->next)
		h = curl_slist_append(h, u->data);
	if (asprintf(&ctype, "Content-Type: %s", it->ctype) > 0 &&
	    (h = curl_slist_append(h, ctype)) && (h = curl_slist_append(h, "Expect:")) &&
	    asprintf(&url, "%s?%s", s->ingest, it->query) > 0) {
		s->resp_len = 0;
		s->resp[0] = 0;
		curl_easy_setopt(s->curl, CURLOPT_URL, url);
		curl_easy_setopt(s->curl, CURLOPT_HTTPHEADER, h);
		curl_easy_setopt(s->curl, CURLOPT_POSTFIELDS, it->body);
		curl_easy_setopt(s->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)it->len);
		curl_easy_setopt(s->curl, CURLOPT_TIMEOUT_MS, request_timeout_ms(s));
		res = curl_easy_perform(s->curl);
	}
	curl_slist_free_all(h);
	free(ctype);
	free(url);
	if (res != CURLE_OK) {
		snprintf(s->st->last_error, sizeof(s->st->last_error), "%s",
			 curl_easy_strerror(res));
		note_state(s, false, s->st->last_error);
		return SEND_RETRY;
	}
	curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_getinfo(s->curl, CURLINFO_TOTAL_TIME_T, &us);
	if (code >= 200 && code < 300) {
		note_state(s, true, NULL);
		s->st->sent++;
		s->st->sent_from_spool += it->from_spool;
		s->st->bytes_sent += it->len;
		s->st->latency_ms_sum += (double)us / 1e3;
		if ((double)us / 1e3 > s->st->latency_ms_max)
			s->st->latency_ms_max = (double)us / 1e3;
		return SEND_OK;
	}
	snprintf(s->st->last_error, sizeof(s->st->last_error), "HTTP %ld: %.120s", code, s->resp);
	if (code == 429 || code == 408 || code >= 500) {
		note_state(s, false, s->st->last_error);
		return SEND_RETRY;
	}
	fprintf(stderr,
		"dial9-bpf: push: %s/ingest refused an interval (%s): dropped it; check --push, "
		"--push-header and --label\n",
		s->st->url, s->st->last_error);
	s->st->dropped_rejected++;
	return SEND_DROP;
}

/* Waits, lock held, until there is something to send and the backoff is over. Returns false
 * when the thread should end. */
static bool wait_for_work(struct push_sender *s)
{
	for (;;) {
		uint64_t now = mono_ns(), until = s->next_try_ns;
		bool work = s->head || s->spool.n;
		struct timespec ts;

		if (s->stopping && (!work || __atomic_load_n(&s->abort, __ATOMIC_RELAXED) ||
				    now >= s->deadline_ns))
			return false;
		/* A backoff planned before the flush began is cut to the flush's. */
		if (s->stopping && s->next_try_ns > now + FLUSH_BACKOFF_NS)
			s->next_try_ns = until = now + FLUSH_BACKOFF_NS;
		if (work && now >= s->next_try_ns)
			return true;
		if (!work) {
			pthread_cond_wait(&s->cond, &s->lock);
			continue;
		}
		if (s->stopping && s->deadline_ns < until)
			until = s->deadline_ns;
		/* The condition variable waits on CLOCK_MONOTONIC (push_sender_start). */
		ts.tv_sec = (time_t)(until / D9_NSEC_PER_SEC);
		ts.tv_nsec = (long)(until % D9_NSEC_PER_SEC);
		pthread_cond_timedwait(&s->cond, &s->lock, &ts);
	}
}

/* Writes items (a list, oldest first) behind what the spool holds, and frees them. */
static void spool_items(struct push_sender *s, struct push_item *it)
{
	while (it) {
		struct push_item *next = it->next;
		int err = push_spool_add(&s->spool, it, s->st);

		if (err) {
			snprintf(s->st->last_error, sizeof(s->st->last_error),
				 "failed to write to the spool: %s", strerror(-err));
			fprintf(stderr,
				"dial9-bpf: push: failed to write to the spool %s: %s: an "
				"interval is lost\n",
				s->spool.dir.path, strerror(-err));
			s->st->dropped_spool_full++;
		}
		push_item_free(it);
		free(it);
		it = next;
	}
}

/* What follows a send: the spool's oldest goes once answered; a retried interval waits in the
 * spool. Returns when to try next (CLOCK_MONOTONIC; 0: now). */
static uint64_t after_send(struct push_sender *s, struct push_item *it, enum send_result r,
			   bool stopping)
{
	uint64_t cap = stopping ? FLUSH_BACKOFF_NS : BACKOFF_MAX_NS, r64 = 0;

	if (r != SEND_RETRY) {
		s->backoff_ns = 0;
		if (it->from_spool)
			push_spool_pop(&s->spool);
		return 0;
	}
	s->st->retries++;
	if (!it->from_spool) {
		/* The spool was empty: the item becomes its oldest. */
		struct push_item *copy = malloc(sizeof(*copy));

		if (copy) {
			*copy = *it;
			copy->next = NULL;
			memset(it, 0, sizeof(*it));
			spool_items(s, copy);
		}
	}
	s->backoff_ns = s->backoff_ns ? s->backoff_ns * 2 : BACKOFF_MIN_NS;
	if (s->backoff_ns > cap)
		s->backoff_ns = cap;
	if (getrandom(&r64, sizeof(r64), 0) != sizeof(r64))
		r64 = mono_ns();
	return mono_ns() + s->backoff_ns / 2 + r64 % (s->backoff_ns / 2 + 1);
}

/* Takes the next request, lock held: the spool's oldest (then what was handed over goes
 * behind it, written by the caller) or, with the spool empty, the oldest handed over. */
static struct push_item *take_next(struct push_sender *s, struct push_item **behind)
{
	struct push_item *mem = NULL;

	*behind = NULL;
	if (s->spool.n) {
		*behind = s->head;
		s->head = s->tail = NULL;
		s->queued_bytes = 0;
	} else {
		mem = s->head;
		s->head = mem->next;
		if (!s->head)
			s->tail = NULL;
		s->queued_bytes -= mem->len;
	}
	return mem;
}

static void *sender_main(void *arg)
{
	struct push_sender *s = arg;
	struct push_item *rest;

	/* Capabilities are per thread: this one needs none of setup's. */
	privs_drop(PRIVS_LOOP);
	pthread_mutex_lock(&s->lock);
	while (wait_for_work(s)) {
		struct push_item *behind, *mem = take_next(s, &behind), disk, *it = mem;
		bool stopping = s->stopping;
		uint64_t next;
		int err = 0;

		pthread_mutex_unlock(&s->lock);
		spool_items(s, behind);
		if (!mem) {
			it = &disk;
			err = push_spool_head(&s->spool, &disk);
			if (err && err != -ENOENT) {
				fprintf(stderr,
					"dial9-bpf: push: unreadable spool file in %s: %s: "
					"dropped it\n",
					s->spool.dir.path, strerror(-err));
				push_spool_pop(&s->spool);
			}
		}
		next = err ? 0 : after_send(s, it, send_item(s, it), stopping);
		if (!err)
			push_item_free(it);
		free(mem);
		pthread_mutex_lock(&s->lock);
		s->next_try_ns = next;
	}
	/* Out of time or stopped: what is still in memory waits on disk for a later run. */
	rest = s->head;
	s->head = s->tail = NULL;
	pthread_mutex_unlock(&s->lock);
	spool_items(s, rest);
	pthread_mutex_lock(&s->lock);
	s->done = true;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

static int sender_curl(struct push_sender *s, const struct push_opts *po)
{
	char ua[64];

	s->curl = curl_easy_init();
	if (!s->curl || asprintf(&s->ingest, "%s%singest", po->url,
				 po->url[strlen(po->url) - 1] == '/' ? "" : "/") < 0)
		return -ENOMEM;
	for (size_t i = 0; i < po->nheaders; i++) {
		struct curl_slist *h = curl_slist_append(s->user_headers, po->headers[i]);

		if (!h)
			return -ENOMEM;
		s->user_headers = h;
	}
	snprintf(ua, sizeof(ua), "dial9-bpf/%s", DIAL9_VERSION);
	curl_easy_setopt(s->curl, CURLOPT_USERAGENT, ua);
	curl_easy_setopt(s->curl, CURLOPT_NOSIGNAL, 1L); /* no SIGALRM for DNS timeouts */
	curl_easy_setopt(s->curl, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
	curl_easy_setopt(s->curl, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(s->curl, CURLOPT_WRITEDATA, s);
	curl_easy_setopt(s->curl, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(s->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(s->curl, CURLOPT_XFERINFODATA, s);
	return 0;
}

static void sender_free(struct push_sender *s)
{
	curl_easy_cleanup(s->curl);
	curl_slist_free_all(s->user_headers);
	free(s->ingest);
	push_spool_close(&s->spool);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

int push_sender_start(struct push_sender **out, const struct push_opts *po, struct push_spool *sp,
		      struct push_stats *st)
{
	struct push_sender *s = calloc(1, sizeof(*s));
	pthread_condattr_t ca;
	int err;

	*out = NULL;
	if (!s) {
		fprintf(stderr, "dial9-bpf: failed to start pushing: %s\n", strerror(ENOMEM));
		return -ENOMEM;
	}
	s->spool = *sp;
	s->st = st;
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cond, &ca);
	pthread_condattr_destroy(&ca);
	err = sender_curl(s, po);
	if (!err)
		err = -pthread_create(&s->thread, NULL, sender_main, s);
	if (!err)
		pthread_setname_np(s->thread, "d9-push"); /* for top -H and the figures */
	if (err) {
		fprintf(stderr, "dial9-bpf: failed to start pushing: %s\n", strerror(-err));
		sender_free(s);
		return err;
	}
	*out = s;
	return 0;
}

void push_sender_put(struct push_sender *s, struct push_item *it)
{
	pthread_mutex_lock(&s->lock);
	it->next = NULL;
	if (s->tail)
		s->tail->next = it;
	else
		s->head = it;
	s->tail = it;
	s->queued_bytes += it->len;
	/* A thread stuck in a request that never ends holds intervals in memory: the spool's
	 * bound applies to them too, oldest dropped first. */
	while (s->queued_bytes > s->spool.limit && s->head != it) {
		struct push_item *old = s->head;

		s->head = old->next;
		s->queued_bytes -= old->len;
		s->queue_dropped++;
		push_item_free(old);
		free(old);
	}
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

void push_sender_stop(struct push_sender *s, uint64_t wait_ns)
{
	struct timespec ts;

	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->stopping = true;
	s->deadline_ns = mono_ns() + wait_ns;
	pthread_cond_broadcast(&s->cond);
	ts.tv_sec = (time_t)(s->deadline_ns / D9_NSEC_PER_SEC);
	ts.tv_nsec = (long)(s->deadline_ns % D9_NSEC_PER_SEC);
	while (!s->done && pthread_cond_timedwait(&s->cond, &s->lock, &ts) != ETIMEDOUT)
		;
	/* Time is up: a transfer under way ends at its next progress call (within a second). */
	__atomic_store_n(&s->abort, 1, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->thread, NULL);
	s->st->dropped_spool_full += s->queue_dropped;
	s->st->spool_pending = s->spool.n;
	s->st->spool_bytes = s->spool.bytes;
	snprintf(s->st->spool_dir, sizeof(s->st->spool_dir), "%s", s->spool.dir.path);
	sender_free(s);
}
