/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Minimal protocol buffers encoding into a growable buffer: varints, length-delimited fields,
 * packed repeated varints. Written by hand because pprof's schema is small and fixed:
 * protobuf-c would need a .proto, generated code and one more dependency for what is here ~100
 * lines of varint and length-prefix writing.
 *
 * Errors are sticky: after a failed allocation every call is a no-op and pb->err is -ENOMEM,
 * so callers encode a whole message and check once.
 */
#ifndef D9_PROTOBUF_H
#define D9_PROTOBUF_H

#include <stddef.h>
#include <stdint.h>

enum pb_wire {
	PB_VARINT = 0,
	PB_LEN = 2,
};

struct pb_buf {
	uint8_t *data;
	size_t len, cap;
	int err; /* 0 or -ENOMEM */
};

/* Empties the buffer but keeps its memory for the next message. */
void pb_reset(struct pb_buf *b);
void pb_free(struct pb_buf *b);

void pb_raw(struct pb_buf *b, const void *data, size_t len);
void pb_varint(struct pb_buf *b, uint64_t v);
void pb_tag(struct pb_buf *b, uint32_t field, enum pb_wire wire);
/* field = v as a varint (int64/uint64/bool all encode this way for non-negative values). */
void pb_uint(struct pb_buf *b, uint32_t field, uint64_t v);
/* Like pb_uint, but omits the field when v == 0: proto3 defaults need not be written. */
void pb_uint_opt(struct pb_buf *b, uint32_t field, uint64_t v);
void pb_bytes(struct pb_buf *b, uint32_t field, const void *data, size_t len);
void pb_str(struct pb_buf *b, uint32_t field, const char *s);
/* An embedded message already encoded in msg. */
void pb_msg(struct pb_buf *b, uint32_t field, const struct pb_buf *msg);
/* A packed repeated varint field; nothing is written when n == 0. */
void pb_packed(struct pb_buf *b, uint32_t field, const uint64_t *v, size_t n);

/* Number of bytes pb_varint(v) writes. */
size_t pb_varint_size(uint64_t v);

#endif /* D9_PROTOBUF_H */
