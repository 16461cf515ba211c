// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <stdlib.h>
#include "json.h"

/* Bytes a JSON string must escape: '"', '\\' and the control characters. */
static bool needs_escape(unsigned char c)
{
	return c < 0x20 || c == '"' || c == '\\';
}

/* The escape of c (needs_escape(c)) into out; returns its length. */
static size_t escape(unsigned char c, char out[6])
{
	static const char hex[] = "0123456789abcdef";

	switch (c) {
	case '"':
	case '\\':
		out[0] = '\\';
		out[1] = (char)c;
		return 2;
	case '\n':
		out[0] = '\\';
		out[1] = 'n';
		return 2;
	case '\t':
		out[0] = '\\';
		out[1] = 't';
		return 2;
	default:
		memcpy(out, "\\u00", 4);
		out[4] = hex[c >> 4];
		out[5] = hex[c & 15];
		return 6;
	}
}

void json_str(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s, *run;
	char esc[6];

	if (!s) {
		fputs("null", f);
		return;
	}
	fputc('"', f);
	/* Runs of bytes that need no escape go out in one fwrite. */
	for (;;) {
		for (run = p; *p && !needs_escape(*p); p++)
			;
		if (p > run)
			fwrite(run, 1, (size_t)(p - run), f);
		if (!*p)
			break;
		fwrite(esc, 1, escape(*p++, esc), f);
	}
	fputc('"', f);
}

bool json_buf_reserve(struct json_buf *b, size_t extra)
{
	size_t ncap;
	char *nd;

	if (b->oom)
		return false;
	if (b->cap - b->len >= extra)
		return true;
	ncap = b->cap ? b->cap : 4096;
	while (ncap - b->len < extra)
		ncap *= 2;
	nd = realloc(b->data, ncap);
	if (!nd) {
		b->oom = true;
		return false;
	}
	b->data = nd;
	b->cap = ncap;
	return true;
}

void json_buf_free(struct json_buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

void json_buf_u64(struct json_buf *b, uint64_t v)
{
	char tmp[20];
	size_t n;
	const char *d = u64_digits(tmp, v, &n);

	json_buf_raw(b, d, n);
}

void json_buf_i64(struct json_buf *b, int64_t v)
{
	if (v < 0) {
		json_buf_lit(b, "-");
		json_buf_u64(b, -(uint64_t)v);
	} else {
		json_buf_u64(b, (uint64_t)v);
	}
}

void json_buf_hex(struct json_buf *b, uint64_t v)
{
	static const char hex[] = "0123456789abcdef";
	char tmp[16];
	size_t n = 0;

	do {
		tmp[sizeof(tmp) - ++n] = hex[v & 15];
		v >>= 4;
	} while (v);
	json_buf_raw(b, tmp + sizeof(tmp) - n, n);
}

void json_buf_str(struct json_buf *b, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t len;
	char *o;

	if (!s) {
		json_buf_lit(b, "null");
		return;
	}
	len = strlen(s);
	/* At worst every byte becomes \u00XX. */
	if (!json_buf_reserve(b, 6 * len + 2))
		return;
	o = b->data + b->len;
	*o++ = '"';
	for (size_t i = 0; i < len; i++) {
		if (needs_escape(p[i]))
			o += escape(p[i], o);
		else
			*o++ = (char)p[i];
	}
	*o++ = '"';
	b->len = (size_t)(o - b->data);
}
