/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Minimal JSON emitting: the outputs are flat enough that a writer library would add more
 * code than it saves. */
#ifndef D9_JSON_H
#define D9_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Writes s as a JSON string literal (quoted, escaped); NULL is written as null. */
void json_str(FILE *f, const char *s);

/*
 * A line (or any text) built in memory and written with one fwrite(), for writers that emit
 * many small fields per record: no stdio call per field or character. Allocation failures are
 * sticky (oom), so a record is built whole and checked once.
 */
struct json_buf {
	char *data;
	size_t len, cap;
	bool oom;
};

/* Makes room for extra more bytes; returns false (and sets oom) when out of memory. */
bool json_buf_reserve(struct json_buf *b, size_t extra);
void json_buf_free(struct json_buf *b);

static inline void json_buf_raw(struct json_buf *b, const char *s, size_t n)
{
	if (b->cap - b->len >= n || json_buf_reserve(b, n)) {
		memcpy(b->data + b->len, s, n);
		b->len += n;
	}
}

/* A string literal: json_buf_lit(b, "...") with the length known at compile time. */
#define json_buf_lit(b, s) json_buf_raw((b), (s), sizeof(s) - 1)

static inline void json_buf_puts(struct json_buf *b, const char *s)
{
	json_buf_raw(b, s, strlen(s));
}

/* v in decimal at the end of tmp, without printf; returns where the digits start. */
static inline const char *u64_digits(char tmp[20], uint64_t v, size_t *len)
{
	size_t n = 0;

	do {
		tmp[20 - ++n] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	*len = n;
	return tmp + 20 - n;
}

/* Decimal, like printf's PRIu64 and %d; lowercase hex without prefix, like PRIx64. */
void json_buf_u64(struct json_buf *b, uint64_t v);
void json_buf_i64(struct json_buf *b, int64_t v);
void json_buf_hex(struct json_buf *b, uint64_t v);
/* s as a JSON string literal, escaped exactly as json_str() does; NULL as null. */
void json_buf_str(struct json_buf *b, const char *s);

#endif
