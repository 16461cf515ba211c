// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * gapmeter: what a sampling profiler's interrupts cost the threads they sample, measured in the
 * threads themselves. THREADS threads spin on the monotonic clock, each from under a deep stack
 * (frame pointers kept, as for `perf record -g`, and more than `--call-graph dwarf` copies), and
 * count every gap between two successive clock reads longer than MIN_NS. A gap during which the
 * thread was switched out is another task's CPU; any other gap is time taken from the thread
 * without a switch: an interrupt, and what perf's sample handler does in it. Whatever perf then
 * costs the thread shows as extra in-thread gap time per second, against unprofiled seconds.
 *
 * Once a second (whole seconds of CLOCK_MONOTONIC), one JSON line of cumulative counts summed
 * over the threads: {"t":SEC,"irq_n":N,"irq_ns":NS,"cs_n":N,"cs_ns":NS,"loops":N,
 * "hist":[...]} (hist: in-thread gaps by length, bucket i holding [2^i, 2^(i+1)) us; bucket 0
 * also holds those under 1 us when MIN_NS is below 1000, and the last one everything longer).
 *
 *   build/gapmeter [THREADS [SECONDS [MIN_NS [SHOOT]]]]    (SECONDS 0: until killed)
 *
 * SHOOT (0, or 10 and up) adds a thread that SHOOT times a second, in ten bursts, takes write
 * access to a page away and gives it back: each time a TLB shootdown IPI or two to the cores
 * running the other threads (count them in /proc/interrupts), what a breakpoint written into a
 * running target sends its other cores.
 *
 * tools/bench-perf-cost.py runs it under perf record, interleaved with unprofiled segments.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include "util_clock.h"

#define NSEC 1000000000ULL
#define MAX_THREADS 64
#define NHIST 12
/* 48 frames of ~220 bytes (spin is not inlined into them): ~11 KB of stack above the spin
 * loop, more than the 8 KB that `perf record --call-graph dwarf` copies by default, as under a
 * Tokio worker's poll. */
#define DEPTH 48

struct counts {
	_Atomic uint64_t irq_n, irq_ns, cs_n, cs_ns, loops;
	_Atomic uint64_t hist[NHIST];
	char pad[64];
};

static struct counts counts[MAX_THREADS];
static uint64_t min_gap_ns = 1000;
static long shoot_per_sec;
static atomic_bool stop;

static long switches(void)
{
	struct rusage ru;

	getrusage(RUSAGE_THREAD, &ru);
	return ru.ru_nvcsw + ru.ru_nivcsw;
}

static __attribute__((noinline)) void spin(struct counts *c)
{
	uint64_t last = mono_ns(), loops = 0;
	long sw = switches();

	while (!stop) {
		uint64_t now = mono_ns(), gap = now - last;

		loops++;
		if (gap >= min_gap_ns) {
			long sw2 = switches();

			if (sw2 != sw) {
				atomic_fetch_add_explicit(&c->cs_n, 1, memory_order_relaxed);
				atomic_fetch_add_explicit(&c->cs_ns, gap, memory_order_relaxed);
			} else {
				int b = 0;

				for (uint64_t us = gap / 1000; us > 1 && b < NHIST - 1; us >>= 1)
					b++;
				atomic_fetch_add_explicit(&c->irq_n, 1, memory_order_relaxed);
				atomic_fetch_add_explicit(&c->irq_ns, gap, memory_order_relaxed);
				atomic_fetch_add_explicit(&c->hist[b], 1, memory_order_relaxed);
			}
			atomic_store_explicit(&c->loops, loops, memory_order_relaxed);
			/* The getrusage above is the meter's own time, not the gap's; a switch
			 * during it shows in the next gap's count. */
			now = mono_ns();
			sw = sw2;
		}
		last = now;
	}
}

/* Recursion keeps real frames on the stack: each touches its pad, so none is elided. */
static __attribute__((noinline)) void descend(struct counts *c, int depth)
{
	volatile char pad[200];

	pad[0] = (char)depth;
	if (depth > 0)
		descend(c, depth - 1);
	else
		spin(c);
	pad[1] = pad[0];
}

static void *thread_main(void *arg)
{
	descend(arg, DEPTH);
	return NULL;
}

static void *shooter_main(void *arg)
{
	volatile char *page = arg;
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	while (!stop) {
		/* Bursts, not a steady pace: each wakeup is a timer interrupt on some core, and
		 * ten a second are lost among the ticks. */
		for (long i = 0; i < shoot_per_sec / 10; i++) {
			page[0]++;
			mprotect((void *)page, 4096, PROT_READ);
			mprotect((void *)page, 4096, PROT_READ | PROT_WRITE);
		}
		ts.tv_nsec += 100000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_nsec -= 1000000000L;
			ts.tv_sec++;
		}
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
	}
	return NULL;
}

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void print_line(long long nthreads, uint64_t sec)
{
	uint64_t irq_n = 0, irq_ns = 0, cs_n = 0, cs_ns = 0, loops = 0, hist[NHIST] = {0};

	for (int i = 0; i < nthreads; i++) {
		irq_n += atomic_load(&counts[i].irq_n);
		irq_ns += atomic_load(&counts[i].irq_ns);
		cs_n += atomic_load(&counts[i].cs_n);
		cs_ns += atomic_load(&counts[i].cs_ns);
		loops += atomic_load(&counts[i].loops);
		for (int b = 0; b < NHIST; b++)
			hist[b] += atomic_load(&counts[i].hist[b]);
	}
	printf("{\"t\":%llu,\"irq_n\":%llu,\"irq_ns\":%llu,\"cs_n\":%llu,\"cs_ns\":%llu,"
	       "\"loops\":%llu,\"hist\":[",
	       (unsigned long long)sec, (unsigned long long)irq_n, (unsigned long long)irq_ns,
	       (unsigned long long)cs_n, (unsigned long long)cs_ns, (unsigned long long)loops);
	for (int b = 0; b < NHIST; b++)
		printf("%s%llu", b ? "," : "", (unsigned long long)hist[b]);
	printf("]}\n");
	fflush(stdout);
}

/* A whole decimal number in [lo, hi], or -1. */
static long long arg(const char *s, long long lo, long long hi)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	return errno || end == s || *end || v < lo || v > hi ? -1 : v;
}

int main(int argc, char **argv)
{
	long long nthreads = argc > 1 ? arg(argv[1], 1, MAX_THREADS) : 2;
	long long seconds = argc > 2 ? arg(argv[2], 0, 1LL << 40) : 0;
	long long min_ns = argc > 3 ? arg(argv[3], 100, 1000000000) : 1000;
	long long shoot = argc > 4 ? arg(argv[4], 0, 10000000) : 0;
	pthread_t th[MAX_THREADS], shooter;
	void *page = NULL;
	uint64_t start = mono_ns() / NSEC;
	sigset_t block;

	if (nthreads < 0 || seconds < 0 || min_ns < 0 || shoot < 0 || (shoot && shoot < 10) ||
	    argc > 5) {
		fprintf(
		    stderr,
		    "usage: gapmeter [THREADS (1-%d) [SECONDS (0: until killed) [MIN_NS (>= 100) "
		    "[SHOOT (0 or >= 10)]]]]\n",
		    MAX_THREADS);
		return 2;
	}
	min_gap_ns = (uint64_t)min_ns;
	shoot_per_sec = (long)shoot;
	/* Signals go to this thread only: a spinner would see stop only after its next gap. */
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &block, NULL);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	for (int i = 0; i < nthreads; i++) {
		int err = pthread_create(&th[i], NULL, thread_main, &counts[i]);

		if (err) {
			fprintf(stderr, "gapmeter: failed to start a thread: %s\n", strerror(err));
			return 1;
		}
	}
	if (shoot_per_sec) {
		int err;

		page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (page == MAP_FAILED) {
			perror("gapmeter: failed to map a page");
			return 1;
		}
		err = pthread_create(&shooter, NULL, shooter_main, page);
		if (err) {
			fprintf(stderr, "gapmeter: failed to start a thread: %s\n", strerror(err));
			return 1;
		}
	}
	pthread_sigmask(SIG_UNBLOCK, &block, NULL);
	for (uint64_t sec = start + 1; !stop && (!seconds || sec <= start + (uint64_t)seconds);
	     sec++) {
		struct timespec ts = {.tv_sec = (time_t)sec};

		while (!stop && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL))
			;
		if (!stop) /* a partial second is not printed as a whole one */
			print_line(nthreads, sec);
	}
	stop = 1;
	for (int i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	if (shoot_per_sec)
		pthread_join(shooter, NULL);
	return 0;
}
