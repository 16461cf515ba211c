// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Probe-point classification of demangled names, legacy and v0 forms. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
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
	expect_probe("<tokio::runtime::task::join::JoinHandle<T> as core::future::future::Future>::poll",
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
	expect_probe("tokio::runtime::task::raw::poll::<dial9_demo::Counted<dial9_demo::cpu_kind_"
		     "task::{closure#0}>, alloc::sync::Arc<tokio::runtime::scheduler::multi_thread::"
		     "handle::Handle>>",
		     PROBE_POLL, 0);
	expect_probe("<tokio::sync::task::atomic_waker::AtomicWaker>::register_by_ref", PROBE_PARK,
		     D9_PARK_LEAF);
	expect_probe("<tokio::time::sleep::Sleep as core::future::future::Future>::poll", PROBE_PARK,
		     D9_PARK_LEAF);
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
	expect_none("<tokio::runtime::task::join::JoinHandle<T> as core::future::future::Future>::poll2");
	expect_none("");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_legacy_names),
		cmocka_unit_test(test_v0_names),
		cmocka_unit_test(test_near_misses),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
