// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * --rotate: one complete set of outputs per interval, the newest --keep of them kept.
 *
 * Folders end on epoch boundaries. The sampler draws each worker-epoch (a CLOCK_MONOTONIC
 * second) with its own probability and cap, and the estimate terms are per epoch and window:
 * an epoch split between two folders would leave each with part of a draw whose probability
 * was set for the whole, and the "capped" flag of a sample is only final once its epoch is
 * over. Cut at an epoch boundary, every folder is a whole number of epochs and its weights,
 * intervals and variance terms are those of a run over exactly those epochs. So a folder
 * covers epochs [first, first + SECS); it is completed once its last epoch is over plus a
 * grace for records still in flight, and samples of the next epochs wait in the collector
 * (collector.epoch_limit) meanwhile. The first folder starts with the run (mid-second), the
 * last ends with it. Long polls are written as they come: their file rolls at the handover.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include "options.h"
#include "park_outcome.h"
#include "record_int.h"
#include "resume_counts.h"
#include "rotate.h"
#include "sampler.skel.h"
#include "util_clock.h"

/* Beyond the flush grace of collector.c: a sample is submitted when its poll ends, so one
 * selected just before the boundary can come in a little after it. */
#define ROTATE_GRACE_NS (500ULL * 1000 * 1000)
#define PART_PREFIX ".part-"
#define STAMP_LEN 16 /* 20261205T013000Z */

/* "20261205T013000Z": the UTC second a folder's part of the run began. */
static void folder_stamp(uint64_t realtime_ns, char *buf, size_t len)
{
	time_t t = (time_t)(realtime_ns / D9_NSEC_PER_SEC);
	struct tm tm;

	if (!gmtime_r(&t, &tm) || !strftime(buf, len, "%Y%m%dT%H%M%SZ", &tm))
		snprintf(buf, len, "%" PRIu64, realtime_ns / (uint64_t)D9_NSEC_PER_SEC);
}

/* A folder this mode made: a stamp, then "-N" when another folder had that stamp. */
static bool is_folder_name(const char *s)
{
	for (int i = 0; i < STAMP_LEN - 1; i++)
		if (i == 8 ? s[i] != 'T' : (s[i] < '0' || s[i] > '9'))
			return false;
	if (s[STAMP_LEN - 1] != 'Z')
		return false;
	s += STAMP_LEN;
	if (!*s)
		return true;
	if (*s++ != '-' || !*s)
		return false;
	return strspn(s, "0123456789") == strlen(s);
}

/* Oldest first: by stamp, then by suffix (none before -2 before -10). */
static int by_age(const void *a, const void *b)
{
	const char *x = *(char *const *)a, *y = *(char *const *)b;
	int c = strncmp(x, y, STAMP_LEN);

	if (c)
		return c;
	x += STAMP_LEN;
	y += STAMP_LEN;
	return (*x ? atoi(x + 1) : 0) - (*y ? atoi(y + 1) : 0);
}

/* Removes DIR/name and the files in it (never following a symlink). Returns 0 or -errno. */
static int remove_folder(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct dirent *de;
	DIR *d;

	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			unlinkat(fd, de->d_name, 0);
	closedir(d);
	return unlinkat(dirfd, name, AT_REMOVEDIR) ? -errno : 0;
}

static void remove_or_say(const struct out_dir *dir, const char *name)
{
	int err = remove_folder(dir->fd, name);

	if (err && err != -ENOENT)
		fprintf(stderr, "dial9-bpf: failed to remove %s/%s: %s: remove it by hand\n",
			dir->path, name, strerror(-err));
}

/*
 * The disk bound: the newest --keep folders stay, older ones go oldest first, so DIR holds at
 * most keep complete folders plus the one being written. Folders of earlier runs into the same
 * DIR count too, and an incomplete one (.part-N) is a killed run's: it goes as well (at the
 * start, when parts_only).
 */
static void prune(const struct record *r, bool parts_only)
{
	const struct out_dir *dir = &r->outdir;
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	int fd = dup(dir->fd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

	if (!d) {
		fprintf(stderr, "dial9-bpf: failed to list %s: %s\n", dir->path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return;
	}
	rewinddir(d);
	while ((de = readdir(d))) {
		bool stale = !strncmp(de->d_name, PART_PREFIX, strlen(PART_PREFIX)) &&
			     !(r->rot.open && !strcmp(de->d_name, r->rot.part));
		char **np;

		if (stale)
			remove_or_say(dir, de->d_name);
		if (parts_only || !is_folder_name(de->d_name))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			np = realloc(names, cap * sizeof(*names));
			if (!np)
				break;
			names = np;
		}
		if (!(names[n] = strdup(de->d_name)))
			break;
		n++;
	}
	closedir(d);
	qsort(names, n, sizeof(*names), by_age);
	for (size_t i = 0; i < n; i++) {
		if (i + r->o->keep < n)
			remove_or_say(dir, names[i]);
		free(names[i]);
	}
	free(names);
}

/* DIR/latest -> name, replaced in one rename so that it always names a complete folder. */
static void link_latest(const struct out_dir *dir, const char *name)
{
	static bool said;

	unlinkat(dir->fd, ".latest.tmp", 0);
	if (!symlinkat(name, dir->fd, ".latest.tmp") &&
	    (!dir->give ||
	     !fchownat(dir->fd, ".latest.tmp", dir->uid, dir->gid, AT_SYMLINK_NOFOLLOW)) &&
	    !renameat(dir->fd, ".latest.tmp", dir->fd, "latest"))
		return;
	if (!said)
		fprintf(stderr,
			"dial9-bpf: failed to point %s/latest at %s: %s: the folders are "
			"complete all the same\n",
			dir->path, name, strerror(errno));
	said = true;
	unlinkat(dir->fd, ".latest.tmp", 0);
}

/* renameat that never replaces: renameat2's flag where the filesystem has it, else a check
 * first (DIR is locked, and nobody else may write into it). Returns 0 or -errno. */
static int rename_new(int dirfd, const char *from, const char *to)
{
	if (!renameat2(dirfd, from, dirfd, to, RENAME_NOREPLACE))
		return 0;
	if (errno != EINVAL && errno != ENOSYS)
		return -errno;
	if (!faccessat(dirfd, to, F_OK, AT_SYMLINK_NOFOLLOW))
		return -EEXIST;
	return renameat(dirfd, from, dirfd, to) ? -errno : 0;
}

/* Renames the complete folder to its stamp (with -N if taken); 0 or -errno. */
static int commit_folder(struct record *r, uint64_t realtime_ns, char *name, size_t len)
{
	char stamp[32];
	int err = -EEXIST;

	folder_stamp(realtime_ns, stamp, sizeof(stamp));
	for (int i = 1; i < 1000 && err == -EEXIST; i++) {
		if (i == 1)
			snprintf(name, len, "%s", stamp);
		else
			snprintf(name, len, "%s-%d", stamp, i);
		err = rename_new(r->outdir.fd, r->rot.part, name);
	}
	if (err)
		fprintf(stderr, "dial9-bpf: failed to rename %s/%s to %s: %s\n", r->outdir.path,
			r->rot.part, name, strerror(-err));
	return err;
}

/* Opens the next folder, under a name no reader takes for a complete one. */
static int open_folder(struct record *r)
{
	struct rotation *rot = &r->rot;
	bool created;

	snprintf(rot->part, sizeof(rot->part), PART_PREFIX "%" PRIu64, rot->index);
	if (out_dir_open_at(&rot->cur, &r->outdir, rot->part, &created))
		return 1;
	rot->open = true;
	return record_open_outputs(r, &rot->cur);
}

/* Completes the current folder: every output, metadata.json, the rename, latest, the prune. */
static int close_folder(struct record *r, struct run_summary *run)
{
	struct rotation *rot = &r->rot;
	char name[NAME_MAX + 1];
	int err = record_write_outputs(r, &rot->cur, run);

	r->lp.written = 0;
	out_dir_close(&rot->cur);
	if (!err)
		err = commit_folder(r, run->started_realtime_ns, name, sizeof(name));
	rot->open = false;
	if (err) {
		remove_or_say(&r->outdir, rot->part);
		return 1;
	}
	link_latest(&r->outdir, name);
	prune(r, false);
	return 0;
}

/* The run summary of the current folder: its part of the run, its share of the counters. */
static void folder_summary(struct record *r, struct run_summary *run, uint64_t stop_ns,
			   const char *reason, const uint64_t *cnt,
			   const struct arming_totals *arm_end)
{
	const struct rotation *rot = &r->rot;

	*run = r->run;
	run->started_ns = rot->start_ns;
	run->started_realtime_ns = r->run.started_realtime_ns + (rot->start_ns - r->run.started_ns);
	run->stopped_ns = stop_ns;
	run->stop_reason = reason;
	for (int i = 0; i < D9_CNT_MAX; i++)
		run->counters[i] = cnt[i] - rot->counters0[i];
	run->long_polls = &r->lp;
	run->arming = &r->arm;
	run->rotate_s = r->o->rotate_s;
	run->interval = rot->index;
	run->run_started_ns = r->run.started_ns;
	run->epoch_lo = rot->first_epoch;
	run->epoch_hi = arm_end ? rot->end_epoch : 0;
	run->arming_base = &rot->arm0;
	run->arming_end = arm_end;
	run->tool_cpu_s0 = rot->cpu0;
}

/* The first folder's epochs, once the run's start is known. */
static void start_first(struct record *r)
{
	struct rotation *rot = &r->rot;

	rot->start_ns = r->run.started_ns;
	rot->first_epoch = r->run.started_ns / D9_NSEC_PER_SEC;
	rot->end_epoch = rot->first_epoch + r->o->rotate_s;
	r->col.epoch_limit = rot->end_epoch;
}

int rotate_open_first(struct record *r)
{
	prune(r, true); /* a killed run's incomplete folder */
	return open_folder(r);
}

/* The handover: completes the folder of epochs before end, starts the next one at end. */
static int rotate_next(struct record *r)
{
	struct rotation *rot = &r->rot;
	uint64_t end = rot->end_epoch, t0 = mono_ns(), cnt[D9_CNT_MAX];
	struct arming_totals arm_end;
	struct run_summary run;
	double cpu, ms;

	collector_flush_before(&r->col, end);
	collector_close_epochs(&r->col, end, end);
	resume_counts_drain(&r->col, bpf_map__fd(r->skel->maps.resume_counts), end);
	record_read_counters(r->skel, cnt);
	arming_read_totals(&r->arm, &arm_end);
	cpu = tool_cpu_s();
	park_outcome_read(r->skel, r->t);
	folder_summary(r, &run, end * D9_NSEC_PER_SEC, "rotated", cnt, &arm_end);
	rot->failed |= close_folder(r, &run);
	/* The next folder counts from here: epochs, samples, counters and arming totals. The
	 * closed folder's epochs stay one folder longer, so that a sample whose poll outlasted the
	 * grace (it is submitted when its poll ends) still finds its epoch's cap and slowdown; it
	 * goes into the next folder with its own epoch. */
	collector_new_interval(&r->col, rot->first_epoch);
	arming_trim_log(&r->arm, end);
	memcpy(rot->counters0, cnt, sizeof(cnt));
	rot->arm0 = arm_end;
	rot->cpu0 = cpu;
	rot->start_ns = end * D9_NSEC_PER_SEC;
	rot->first_epoch = end;
	rot->end_epoch = end + r->o->rotate_s;
	rot->index++;
	r->col.epoch_limit = rot->end_epoch;
	if (open_folder(r))
		return 1;
	ms = (double)(mono_ns() - t0) / 1e6;
	rot->handover_cpu_s += tool_cpu_s() - cpu;
	if (ms > rot->max_handover_ms)
		rot->max_handover_ms = ms;
	return 0;
}

int rotate_if_due(struct record *r, uint64_t now_ns)
{
	struct rotation *rot = &r->rot;

	if (!r->o->rotate_s || !rot->open)
		return 0;
	if (!rot->end_epoch)
		start_first(r);
	/* Not while a window is open: writing a folder would take a core from the workers
	 * exactly while their transitions are counted. */
	if (now_ns < rot->end_epoch * D9_NSEC_PER_SEC + ROTATE_GRACE_NS ||
	    arming_window_open(&r->arm))
		return 0;
	return rotate_next(r);
}

int rotate_finish(struct record *r)
{
	struct rotation *rot = &r->rot;
	struct run_summary run;
	int err;

	if (!rot->open)
		return 1;
	if (!rot->end_epoch)
		start_first(r);
	folder_summary(r, &run, r->run.stopped_ns, r->run.stop_reason, r->run.counters, NULL);
	err = close_folder(r, &run);
	if (!r->o->quiet)
		fprintf(stderr,
			"dial9-bpf: %" PRIu64 " folders of %" PRIu64 " s written into %s/ (the "
			"newest %" PRIu64 " kept); a handover took %.1f ms of CPU on average, "
			"%.1f ms of wall time at most\n",
			rot->index + 1, r->o->rotate_s, r->outdir.path, r->o->keep,
			rot->index ? 1e3 * rot->handover_cpu_s / (double)rot->index : 0,
			rot->max_handover_ms);
	return err || rot->failed;
}

void rotate_free(struct record *r)
{
	struct rotation *rot = &r->rot;

	if (!rot->open)
		return;
	out_dir_close(&rot->cur);
	remove_or_say(&r->outdir, rot->part);
	rot->open = false;
}
