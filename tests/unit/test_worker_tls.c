// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Finding a running worker's Arc<Worker> from its thread's TLS: offsets, shape, choice. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>
#include "worker_tls.h"

/* A fake address space: words at BASE.. */
#define BASE 0x7f0000000000ULL
#define NWORDS 64
static uint64_t mem[NWORDS];

static bool fake_read(void *ctx, uint64_t addr, void *buf, size_t len)
{
	(void)ctx;
	if (addr < BASE || addr + len > BASE + sizeof(mem))
		return false;
	memcpy(buf, (char *)mem + (addr - BASE), len);
	return true;
}

static uint64_t at(size_t word)
{
	return BASE + word * 8;
}

static void test_tp_offset(void **state)
{
	(void)state;
	/* The demo (Tokio 1.24, glibc): PT_TLS memsz 0x110, align 8; CURRENT at 0x30. */
	assert_int_equal(worker_tls_tp_offset(0x30, 0x110, 8, 0xa9fc0), 0x30 - 0x110);
	/* memsz rounded up to the alignment */
	assert_int_equal(worker_tls_tp_offset(0, 0x104, 16, 0x1000), -0x110);
	/* a segment not aligned in the file: glibc keeps its start's misalignment */
	assert_int_equal(worker_tls_tp_offset(0, 0x100, 16, 0x1008), -0x108);
	assert_int_equal(worker_tls_tp_offset(8, 0x20, 0, 0), 8 - 0x20);
}

/* ArcInner<Worker> at word w: {strong, weak, handle, index, core} in the given order. */
static void put_worker(size_t w, uint64_t strong, uint64_t weak, const uint64_t fields[3])
{
	mem[w] = strong;
	mem[w + 1] = weak;
	memcpy(&mem[w + 2], fields, 3 * sizeof(uint64_t));
}

static void test_worker_shape(void **state)
{
	uint64_t handle, index;

	(void)state;
	memset(mem, 0, sizeof(mem));
	mem[40] = 3; /* ArcInner<Handle>: strong 3, weak 1 */
	mem[41] = 1;
	put_worker(0, 1, 1, (uint64_t[]){at(40), 1, 0});
	assert_true(worker_tls_worker_at(fake_read, NULL, at(0), &handle, &index));
	assert_int_equal(handle, at(40));
	assert_int_equal(index, 1);
	/* another field order; index 0 beside an empty core slot */
	put_worker(8, 2, 1, (uint64_t[]){0, 0, at(40)});
	assert_true(worker_tls_worker_at(fake_read, NULL, at(8), &handle, &index));
	assert_int_equal(index, 0);
	/* the core parked in the slot (a handoff in flight) */
	put_worker(16, 2, 1, (uint64_t[]){at(48), at(40), 5});
	assert_true(worker_tls_worker_at(fake_read, NULL, at(16), &handle, &index));
	assert_int_equal(index, 5);
	/* Weak references: not an Arc<Worker> */
	put_worker(24, 1, 2, (uint64_t[]){at(40), 1, 0});
	assert_false(worker_tls_worker_at(fake_read, NULL, at(24), &handle, &index));
	/* no Arc among the fields */
	put_worker(24, 1, 1, (uint64_t[]){7, 1, 0});
	assert_false(worker_tls_worker_at(fake_read, NULL, at(24), &handle, &index));
	/* unaligned, unreadable, null */
	assert_false(worker_tls_worker_at(fake_read, NULL, at(0) + 4, &handle, &index));
	assert_false(worker_tls_worker_at(fake_read, NULL, at(NWORDS), &handle, &index));
	assert_false(worker_tls_worker_at(fake_read, NULL, 0, &handle, &index));
}

static void test_choose_most_distinct(void **state)
{
	/* (i, j) = (0, 0) finds two workers on three threads (one mid-handoff: both threads
	 * have worker A); (0, 2) finds the same Arc on every thread (a runtime-wide one). */
	const struct wt_found f[] = {
	    {.tid = 1, .i = 0, .j = 2, .arc = 0x900, .handle = 0x50, .index = 0},
	    {.tid = 1, .i = 0, .j = 0, .arc = 0xa00, .handle = 0x50, .index = 0},
	    {.tid = 2, .i = 0, .j = 0, .arc = 0xb00, .handle = 0x50, .index = 1},
	    {.tid = 3, .i = 0, .j = 0, .arc = 0xa00, .handle = 0x50, .index = 0},
	    {.tid = 2, .i = 0, .j = 2, .arc = 0x900, .handle = 0x50, .index = 0},
	    {.tid = 3, .i = 0, .j = 2, .arc = 0x900, .handle = 0x50, .index = 0},
	};
	uint16_t i = UINT16_MAX, j = UINT16_MAX;

	(void)state;
	assert_int_equal(worker_tls_choose(f, 6, &i, &j), 2);
	assert_int_equal(i, 0);
	assert_int_equal(j, 0);
}

static void test_choose_rejects_shared_index(void **state)
{
	/* Two different Arcs of one runtime with one index: not workers. Two runtimes may. */
	const struct wt_found bad[] = {
	    {.tid = 1, .i = 1, .j = 3, .arc = 0xa00, .handle = 0x50, .index = 0},
	    {.tid = 2, .i = 1, .j = 3, .arc = 0xb00, .handle = 0x50, .index = 0},
	};
	const struct wt_found two_runtimes[] = {
	    {.tid = 1, .i = 1, .j = 3, .arc = 0xa00, .handle = 0x50, .index = 0},
	    {.tid = 2, .i = 1, .j = 3, .arc = 0xb00, .handle = 0x60, .index = 0},
	};
	uint16_t i = UINT16_MAX, j = UINT16_MAX;

	(void)state;
	assert_int_equal(worker_tls_choose(bad, 2, &i, &j), 0);
	assert_int_equal(worker_tls_choose(two_runtimes, 2, &i, &j), 2);
	assert_int_equal(i, 1);
	assert_int_equal(j, 3);
	assert_int_equal(worker_tls_choose(NULL, 0, &i, &j), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_tp_offset),
	    cmocka_unit_test(test_worker_shape),
	    cmocka_unit_test(test_choose_most_distinct),
	    cmocka_unit_test(test_choose_rejects_shared_index),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
