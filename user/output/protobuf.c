// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Protocol buffers encoding: see protobuf.h for why this is hand-written. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "protobuf.h"

static int pb_reserve(struct pb_buf *b, size_t extra)
{
	size_t ncap;
	uint8_t *nd;

	if (b->err)
		return b->err;
	if (b->len + extra <= b->cap)
		return 0;
	ncap = b->cap ? b->cap : 256;
	while (ncap < b->len + extra)
		ncap *= 2;
	nd = realloc(b->data, ncap);
	if (!nd) {
		b->err = -ENOMEM;
		return b->err;
	}
	b->data = nd;
	b->cap = ncap;
	return 0;
}

void pb_reset(struct pb_buf *b)
{
	b->len = 0;
}

void pb_free(struct pb_buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

void pb_raw(struct pb_buf *b, const void *data, size_t len)
{
	if (!len || pb_reserve(b, len))
		return;
	memcpy(b->data + b->len, data, len);
	b->len += len;
}

size_t pb_varint_size(uint64_t v)
{
	size_t n = 1;

	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

void pb_varint(struct pb_buf *b, uint64_t v)
{
	if (pb_reserve(b, 10))
		return;
	while (v >= 0x80) {
		b->data[b->len++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	b->data[b->len++] = (uint8_t)v;
}

void pb_tag(struct pb_buf *b, uint32_t field, enum pb_wire wire)
{
	pb_varint(b, ((uint64_t)field << 3) | wire);
}

void pb_uint(struct pb_buf *b, uint32_t field, uint64_t v)
{
	pb_tag(b, field, PB_VARINT);
	pb_varint(b, v);
}

void pb_uint_opt(struct pb_buf *b, uint32_t field, uint64_t v)
{
	if (v)
		pb_uint(b, field, v);
}

void pb_bytes(struct pb_buf *b, uint32_t field, const void *data, size_t len)
{
	pb_tag(b, field, PB_LEN);
	pb_varint(b, len);
	pb_raw(b, data, len);
}

void pb_str(struct pb_buf *b, uint32_t field, const char *s)
{
	pb_bytes(b, field, s, strlen(s));
}

void pb_msg(struct pb_buf *b, uint32_t field, const struct pb_buf *msg)
{
	if (msg->err) {
		if (!b->err)
			b->err = msg->err;
		return;
	}
	pb_bytes(b, field, msg->data, msg->len);
}

void pb_packed(struct pb_buf *b, uint32_t field, const uint64_t *v, size_t n)
{
	size_t len = 0;

	if (!n)
		return;
	for (size_t i = 0; i < n; i++)
		len += pb_varint_size(v[i]);
	pb_tag(b, field, PB_LEN);
	pb_varint(b, len);
	for (size_t i = 0; i < n; i++)
		pb_varint(b, v[i]);
}
