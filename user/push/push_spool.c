// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The spool: one file per unsent request, NNNNNNNNNNNN.req (a sequence number, so names sort
 * in sending order, across runs too), written whole (temporary file, fsync, rename) so a
 * crash leaves either the request or nothing. A file holds a version line, the query, the
 * content type and the body. The total is kept under --spool-mb by dropping the oldest: in an
 * outage the latest profiles are the ones worth having.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "push_spool.h"

#define SPOOL_MAGIC "D9PUSH 1\n"
#define SPOOL_NAME_FMT "%012" PRIu64 ".req"

void push_item_free(struct push_item *it)
{
	free(it->query);
	free(it->ctype);
	free(it->body);
	memset(it, 0, sizeof(*it));
}

static int spool_append(struct push_spool *sp, uint64_t seq, uint64_t size)
{
	if (sp->n == sp->cap) {
		size_t ncap = sp->cap ? sp->cap * 2 : 64;
		struct spool_file *f = realloc(sp->files, ncap * sizeof(*f));

		if (!f)
			return -ENOMEM;
		sp->files = f;
		sp->cap = ncap;
	}
	sp->files[sp->n++] = (struct spool_file){seq, size};
	sp->bytes += size;
	if (seq >= sp->next_seq)
		sp->next_seq = seq + 1;
	return 0;
}

static int cmp_seq(const void *a, const void *b)
{
	uint64_t x = ((const struct spool_file *)a)->seq, y = ((const struct spool_file *)b)->seq;

	return x < y ? -1 : x > y;
}

/* What a previous run left, oldest first. */
static int spool_scan(struct push_spool *sp)
{
	int fd = dup(sp->dir.fd), err = 0;
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;

	if (!d) {
		err = -errno;
		if (fd >= 0)
			close(fd);
		return err;
	}
	while ((de = readdir(d)) && !err) {
		uint64_t seq;
		char tail[8];
		struct stat st;

		if (sscanf(de->d_name, "%" SCNu64 ".%7s", &seq, tail) != 2 || strcmp(tail, "req") ||
		    fstatat(sp->dir.fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
		    !S_ISREG(st.st_mode))
			continue;
		err = spool_append(sp, seq, (uint64_t)st.st_size);
	}
	closedir(d);
	/* readdir's order is the directory's. */
	qsort(sp->files, sp->n, sizeof(*sp->files), cmp_seq);
	return err;
}

int push_spool_open(struct push_spool *sp, const struct out_dir *outdir, const char *spool_dir,
		    uint64_t limit_bytes)
{
	bool created;
	int err;

	memset(sp, 0, sizeof(*sp));
	sp->dir.fd = -1;
	sp->limit = limit_bytes;
	err = spool_dir ? out_dir_open(&sp->dir, spool_dir, &created)
			: out_dir_open_at(&sp->dir, outdir, "push-spool", &created);
	if (err)
		return err; /* out_dir printed why */
	err = spool_scan(sp);
	if (err)
		fprintf(stderr, "dial9-bpf: failed to read the push spool %s: %s\n", sp->dir.path,
			strerror(-err));
	return err;
}

static void spool_drop_oldest(struct push_spool *sp)
{
	char name[32];

	snprintf(name, sizeof(name), SPOOL_NAME_FMT, sp->files[0].seq);
	unlinkat(sp->dir.fd, name, 0);
	sp->bytes -= sp->files[0].size;
	sp->n--;
	memmove(sp->files, sp->files + 1, sp->n * sizeof(*sp->files));
}

void push_spool_pop(struct push_spool *sp)
{
	if (sp->n)
		spool_drop_oldest(sp);
}

int push_spool_add(struct push_spool *sp, const struct push_item *it, struct push_stats *st)
{
	uint64_t size =
	    sizeof(SPOOL_MAGIC) - 1 + strlen(it->query) + strlen(it->ctype) + 2 + it->len;
	struct out_file f;
	char name[32];
	int err;

	if (size > sp->limit) {
		st->dropped_spool_full++;
		return 0;
	}
	while (sp->n && sp->bytes + size > sp->limit) {
		spool_drop_oldest(sp);
		st->dropped_spool_full++;
	}
	snprintf(name, sizeof(name), SPOOL_NAME_FMT, sp->next_seq);
	err = out_file_create(&f, &sp->dir, name, false);
	if (err)
		return err;
	fputs(SPOOL_MAGIC, f.f);
	fprintf(f.f, "%s\n%s\n", it->query, it->ctype);
	fwrite(it->body, 1, it->len, f.f);
	if (ferror(f.f)) {
		out_file_discard(&f);
		return -EIO;
	}
	err = out_file_commit(&f);
	if (err)
		return err;
	st->spooled++;
	return spool_append(sp, sp->next_seq, size);
}

/* Splits the next line off *p (up to end) into a new string. */
static char *take_line(char **p, char *end)
{
	char *nl = memchr(*p, '\n', (size_t)(end - *p)), *s;

	if (!nl)
		return NULL;
	s = strndup(*p, (size_t)(nl - *p));
	*p = nl + 1;
	return s;
}

int push_spool_head(struct push_spool *sp, struct push_item *it)
{
	char name[32], *buf = NULL, *p;
	struct stat st;
	int fd, err = 0;

	memset(it, 0, sizeof(*it));
	if (!sp->n)
		return -ENOENT;
	snprintf(name, sizeof(name), SPOOL_NAME_FMT, sp->files[0].seq);
	fd = out_open_read(sp->dir.fd, name);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) || !(buf = malloc((size_t)st.st_size + 1)) ||
	    read(fd, buf, (size_t)st.st_size) != st.st_size)
		err = errno ? -errno : -EIO;
	close(fd);
	if (!err && (st.st_size < (off_t)sizeof(SPOOL_MAGIC) - 1 ||
		     memcmp(buf, SPOOL_MAGIC, sizeof(SPOOL_MAGIC) - 1)))
		err = -EINVAL;
	if (!err) {
		p = buf + sizeof(SPOOL_MAGIC) - 1;
		it->query = take_line(&p, buf + st.st_size);
		it->ctype = it->query ? take_line(&p, buf + st.st_size) : NULL;
		if (!it->ctype || !(it->body = malloc((size_t)(buf + st.st_size - p) + 1)))
			err = -EINVAL;
		else
			memcpy(it->body, p, it->len = (size_t)(buf + st.st_size - p));
	}
	free(buf);
	if (err)
		push_item_free(it);
	it->from_spool = true;
	return err;
}

void push_spool_close(struct push_spool *sp)
{
	free(sp->files);
	out_dir_close(&sp->dir);
	sp->files = NULL;
	sp->n = 0;
}
