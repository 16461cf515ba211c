// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Probe-point classification of demangled names, legacy and v0 forms. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <setjmp.h>
#include <cmocka.h>
#include "target.h"

static void expect_probe(const char *name, enum probe_kind want, uint32_t want_cookie)
{
	enum probe_kind kind;
	uint32_t cookie;

	assert_int_equal(target_classify_symbol(name, &kind, &cookie), 1);
	assert_int_equal(kind, want);
	assert_int_equal(cookie, want_cookie);
}

static void expect_none(const char *name)
{
	enum probe_kind kind;
	uint32_t cookie;

	assert_int_equal(target_classify_symbol(name, &kind, &cookie), 0);
}

static void test_legacy_names(void **state)
{
	(void)state;
	expect_probe("tokio::runtime::task::raw::poll", PROBE_POLL, 0);
	expect_probe("tokio::runtime::task::raw::dealloc", PROBE_DEALLOC, 0);
	expect_probe("tokio::runtime::scheduler::multi_thread::worker::run", PROBE_WORKER_RUN, 0);
	expect_probe(
	    "<tokio::runtime::task::join::JoinHandle<T> as core::future::future::Future>::poll",
	    PROBE_PARK, D9_PARK_LEAF);
	expect_probe("<tokio::task::yield_now::yield_now::{{closure}}::YieldNow as "
		     "core::future::future::Future>::poll",
		     PROBE_PARK, D9_PARK_YIELD);
	expect_probe("tokio::sync::task::atomic_waker::AtomicWaker::register_by_ref", PROBE_PARK,
		     D9_PARK_LEAF);
}

static void test_v0_names(void **state)
{
	(void)state;
	expect_probe(
	    "tokio::runtime::task::raw::poll::<dial9_demo::Counted<dial9_demo::cpu_kind_"
	    "task::{closure#0}>, alloc::sync::Arc<tokio::runtime::scheduler::multi_thread::"
	    "handle::Handle>>",
	    PROBE_POLL, 0);
	expect_probe("<tokio::sync::task::atomic_waker::AtomicWaker>::register_by_ref", PROBE_PARK,
		     D9_PARK_LEAF);
	expect_probe("<tokio::time::sleep::Sleep as core::future::future::Future>::poll",
		     PROBE_PARK, D9_PARK_LEAF);
}

/* Names that moved across Tokio releases (1.20 .. 1.53), in both manglings. */
static void test_release_names(void **state)
{
	(void)state;
	expect_probe("tokio::runtime::scheduler::multi_thread::worker::Context::park_timeout",
		     PROBE_IDLE, 0);
	expect_probe("tokio::runtime::scheduler::multi_thread::worker::Context::park_internal",
		     PROBE_IDLE, 0);
	expect_probe("<tokio::runtime::scheduler::multi_thread::worker::Context>::park_internal",
		     PROBE_IDLE, 0);
	expect_probe("tokio::runtime::scheduler::multi_thread::worker::Context::park_yield",
		     PROBE_IDLE, 0);
	expect_probe("tokio::runtime::scheduler::defer::Defer::defer", PROBE_PARK, D9_PARK_YIELD);
	expect_probe("<tokio::runtime::scheduler::defer::Defer>::defer", PROBE_PARK, D9_PARK_YIELD);
	expect_probe("tokio::runtime::context::defer", PROBE_PARK, D9_PARK_YIELD);
	expect_probe("<tokio::sync::notify::OwnedNotified as core::future::future::Future>::poll",
		     PROBE_PARK, D9_PARK_LEAF);
	expect_probe("tokio::sync::notify::NotifiedProject::poll_notified", PROBE_PARK,
		     D9_PARK_LEAF);
	expect_probe("<tokio::sync::notify::NotifiedProject>::poll_notified", PROBE_PARK,
		     D9_PARK_LEAF);
	expect_probe("tokio::sync::notify::Notified::poll_notified", PROBE_PARK, D9_PARK_LEAF);
	/* Before 1.21 (runtime::thread_pool, time::driver). */
	expect_probe("tokio::runtime::thread_pool::worker::Context::park_timeout", PROBE_IDLE, 0);
	expect_probe("<tokio::time::driver::sleep::Sleep as core::future::future::Future>::poll",
		     PROBE_PARK, D9_PARK_LEAF);
	/* A current_thread runtime parks its block_on thread too; defer's helpers are no yields. */
	expect_probe("tokio::runtime::scheduler::current_thread::Context::park_internal",
		     PROBE_IDLE, 0);
	expect_probe("tokio::runtime::scheduler::current_thread::Context::park_yield", PROBE_IDLE,
		     0);
	expect_none("tokio::runtime::scheduler::defer::Defer::is_empty");
	expect_none("tokio::runtime::scheduler::defer::Defer::wake");
	expect_none("tokio::runtime::context::defer::{{closure}}");
}

/* A group is missing when none of its functions is probed and it is required, or was found
 * in the executable but could not be probed. */
static void test_group_missing(void **state)
{
	struct probe_spec probes[] = {
	    {.kind = PROBE_POLL, .group = PG_POLL},
	    {.kind = PROBE_DEALLOC, .group = PG_DEALLOC},
	    {.kind = PROBE_WORKER_RUN, .group = PG_WORKER_RUN},
	    {.kind = PROBE_PARK, .cookie = D9_PARK_YIELD, .group = PG_YIELD},
	    {.kind = PROBE_PARK, .cookie = D9_PARK_LEAF, .group = PG_SLEEP},
	};
	struct target t = {.probes = probes, .nprobes = 5};

	(void)state;
	t.found[PG_NOTIFIED] = 1; /* found, then dropped as single-stepped */
	assert_true(target_group_missing(&t, PG_WORKER_PARK));
	assert_true(target_group_missing(&t, PG_NOTIFIED));
	assert_false(target_group_missing(&t, PG_IO)); /* not used by the program */
	assert_false(target_group_missing(&t, PG_YIELD));
	assert_false(target_group_missing(&t, PG_SLEEP));
	assert_false(target_group_missing(&t, PG_MAX));
	assert_int_equal(target_group_probes(&t, PG_YIELD), 1);
	assert_string_equal(probe_group_name(PG_WORKER_PARK), "worker_park");
}

static void test_near_misses(void **state)
{
	(void)state;
	expect_none("tokio::runtime::task::raw::poll_future");
	expect_none("tokio::runtime::task::raw::RawTask::poll");
	expect_none("tokio::runtime::scheduler::multi_thread::worker::run_task");
	expect_none("<tokio::time::sleep::Sleep>::poll_elapsed");
	expect_none("<<tokio::x as y>::z");
	expect_none("<");
	expect_none("tokio::runtime::task::waker::clone_waker");
	expect_none(
	    "<tokio::runtime::task::join::JoinHandle<T> as core::future::future::Future>::poll2");
	expect_none("");
}

/* YieldNow::poll from the demo built with frame pointers (Tokio 1.24, at 0x4ea50): its one
 * real call, to the defer path's LocalKey::with at 0x57d30, comes after two e8 bytes that are
 * displacements (-0x18(%rbp)), read as calls too. */
static void test_direct_calls(void **state)
{
	static const unsigned char code[] = {
	    0x55, 0x48, 0x89, 0xe5, 0x41, 0x56, 0x53, 0x48, 0x83, 0xec, 0x10, 0x48, 0x89,
	    0x75, 0xe8, 0x0f, 0xb6, 0x1f, 0x84, 0xdb, 0x75, 0x27, 0x49, 0x89, 0xf6, 0xc6,
	    0x07, 0x01, 0x48, 0x8d, 0x3d, 0x55, 0x76, 0x05, 0x00, 0x48, 0x8d, 0x75, 0xe8,
	    0xe8, 0xb4, 0x92, 0x00, 0x00, 0x84, 0xc0, 0x75, 0x0d, 0x49, 0x8b, 0x06, 0x48,
	    0x8b, 0x08, 0x48, 0x8b, 0x78, 0x08, 0xff, 0x51, 0x10, 0x80, 0xf3, 0x01, 0x89,
	    0xd8, 0x48, 0x83, 0xc4, 0x10, 0x5b, 0x41, 0x5e, 0x5d, 0xc3};
	uint64_t t[8];
	size_t n;
	bool found = false;

	(void)state;
	n = target_direct_calls(code, sizeof(code), 0x4ea50, t, 8);
	assert_int_equal(n, 3);
	for (size_t i = 0; i < n; i++)
		found |= t[i] == 0x57d30;
	assert_true(found);
	/* A call whose rel32 would run past the end is not read. */
	assert_int_equal(target_direct_calls(code, 43, 0x4ea50, t, 8), 2);
	assert_int_equal(target_direct_calls(code, sizeof(code), 0x4ea50, t, 1), 1);
	/* The one call to the callee; none to a neighbour. */
	assert_int_equal(target_count_calls_to(code, sizeof(code), 0x4ea50, 0x57d30), 1);
	assert_int_equal(target_count_calls_to(code, sizeof(code), 0x4ea50, 0x57d31), 0);
}

/* The first instructions of Tokio's functions in the demo: push in every build, and a jmp
 * rel32 opening each raw::poll of a release build without frame pointers. */
static void test_emulated_first_insns(void **state)
{
	static const unsigned char emulated[][4] = {
	    {0x55, 0x48, 0x89, 0xe5}, /* push %rbp */
	    {0x41, 0x56, 0x53, 0x50}, /* push %r14 */
	    {0xe9, 0x0b, 0x72, 0xff}, /* jmp rel32 */
	    {0xeb, 0x10, 0x90, 0x90}, /* jmp rel8 */
	    {0xe8, 0x00, 0x01, 0x00}, /* call rel32 */
	    {0x74, 0x05, 0x90, 0x90}, /* je rel8 */
	    {0x0f, 0x84, 0x10, 0x00}, /* je rel32 */
	    {0x90, 0x55, 0x48, 0x89}, /* nop */
	};
	static const unsigned char stepped[][4] = {
	    {0x48, 0x83, 0xec, 0x28}, /* sub $0x28,%rsp */
	    {0x48, 0x89, 0xf8, 0x90}, /* mov %rdi,%rax */
	    {0x0f, 0x1f, 0x44, 0x00}, /* nopl: only the one-byte nop is emulated */
	};

	(void)state;
	for (size_t i = 0; i < sizeof(emulated) / sizeof(emulated[0]); i++)
		assert_false(probe_insn_needs_xol(emulated[i], 4));
	for (size_t i = 0; i < sizeof(stepped) / sizeof(stepped[0]); i++)
		assert_true(probe_insn_needs_xol(stepped[i], 4));
	assert_true(probe_insn_needs_xol(emulated[0], 0));
}

static void test_yield_pending_callee(void **state)
{
	(void)state;
	assert_true(target_is_yield_pending_callee(
	    "<std::thread::local::LocalKey<tokio::runtime::context::Context>>::with::<tokio::"
	    "runtime::context::with_defer<(), <tokio::task::yield_now::yield_now::{closure#0}::"
	    "YieldNow as core::future::future::Future>::poll::{closure#0}>::{closure#0}, "
	    "core::option::Option<()>>"));
	assert_true(target_is_yield_pending_callee("std::thread::local::LocalKey<T>::with"));
	assert_false(target_is_yield_pending_callee("std::thread::local::LocalKey<T>::try_with"));
	assert_false(
	    target_is_yield_pending_callee("std::thread::local::LocalKey<T>::with_borrow"));
	/* Another closure through with_defer (v0 names it): not the yield's. */
	assert_false(target_is_yield_pending_callee(
	    "<std::thread::local::LocalKey<tokio::runtime::context::Context>>::with::<tokio::"
	    "runtime::context::with_defer<(), tokio::task::coop::poll_proceed::{closure#0}>>"));
	assert_false(target_is_yield_pending_callee("tokio::runtime::context::defer"));
	assert_false(target_is_yield_pending_callee("core::task::wake::Waker::wake_by_ref"));
	assert_false(target_is_yield_pending_callee(""));
}

/* Probes ranked by hits: most hit first, the ones hit about as often as the top one hot, a
 * quiet probe dropping out. */
static void test_rank_probes(void **state)
{
	struct probe_spec probes[5] = {
	    {.kind = PROBE_POLL, .hot = true},	/* hot by kind until counted */
	    {.kind = PROBE_DEALLOC},		/* never hit */
	    {.kind = PROBE_PARK, .hot = false}, /* the hottest */
	    {.kind = PROBE_PARK},		/* an eighth of the top one's hits */
	    {.kind = PROBE_IDLE},		/* rare: under 1% of the hits */
	};
	struct target t = {.probes = probes, .nprobes = 5};
	uint64_t none[5] = {0}, w1[5] = {6000, 0, 12000, 1500, 10}, w2[5] = {0, 0, 12000, 1500, 0};

	(void)state;
	/* Nothing counted yet: the order is as listed, hot stays by kind. */
	assert_int_equal(target_rank_probes(&t, none, 5), 0);
	assert_true(probes[0].hot);
	assert_false(probes[2].hot);
	for (size_t i = 0; i < 5; i++)
		assert_int_equal(t.order[i], i);

	assert_int_equal(target_rank_probes(&t, w1, 5), 0);
	assert_int_equal(t.order[0], 2);
	assert_int_equal(t.order[1], 0);
	assert_int_equal(t.order[2], 3);
	assert_int_equal(t.order[3], 4);
	assert_true(probes[2].hot && probes[0].hot);
	assert_false(probes[3].hot); /* in the cold link, put in before the hot ones */
	assert_false(probes[4].hot);
	assert_false(probes[1].hot);

	/* The poll probe goes quiet: its recent hits halve each window, and it leaves the hot
	 * link once under a quarter of the top one's. */
	assert_int_equal(target_rank_probes(&t, w2, 5), 0);
	assert_false(probes[0].hot); /* 1500 of 9000 */
	for (int i = 0; i < 13; i++)
		assert_int_equal(target_rank_probes(&t, w2, 5), 0);
	assert_int_equal(t.order[0], 2);
	assert_int_equal(t.order[1], 3);
	assert_false(probes[0].hot);
	assert_false(probes[4].hot);
	assert_true(probes[2].hot);
	assert_false(probes[3].hot);

	/* A lone probe hit at all is hot; a quiet one is not, however few the others. */
	{
		uint64_t w3[5] = {0, 0, 0, 0, 1};

		for (int i = 0; i < 20; i++)
			assert_int_equal(target_rank_probes(&t, w3, 5), 0);
		assert_true(probes[4].hot);
		assert_false(probes[2].hot);
	}
	free(t.order);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_legacy_names),
	    cmocka_unit_test(test_v0_names),
	    cmocka_unit_test(test_near_misses),
	    cmocka_unit_test(test_rank_probes),
	    cmocka_unit_test(test_direct_calls),
	    cmocka_unit_test(test_yield_pending_callee),
	    cmocka_unit_test(test_release_names),
	    cmocka_unit_test(test_group_missing),
	    cmocka_unit_test(test_emulated_first_insns),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
