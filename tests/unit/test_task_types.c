// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The future a task type runs, read off the generic arguments of a demangled name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>
#include "task_types.h"

/* got (malloc'd, freed here) is want, or NULL where want is. */
static void assert_got(char *got, const char *want)
{
	if (!want) {
		assert_null(got);
		return;
	}
	assert_non_null(got);
	assert_string_equal(got, want);
	free(got);
}

static void assert_arg(const char *name, const char *key, const char *want)
{
	assert_got(task_types_first_arg(name, key), want);
}

static void test_first_arg(void **state)
{
	(void)state;
	/* legacy drop glue of the whole cell (Tokio 1.24) */
	assert_arg(
	    "core::ptr::drop_in_place<tokio::runtime::task::core::Cell<app::Counted<app::"
	    "handler::{{closure}}>,alloc::sync::Arc<tokio::runtime::scheduler::multi_thread::"
	    "handle::Handle>>>",
	    "task::core::Cell<", "app::Counted<app::handler::{{closure}}>");
	/* v0 raw::poll with its generics */
	assert_arg("tokio::runtime::task::raw::poll::<app::serve::{closure#0}, alloc::sync::Arc<"
		   "tokio::runtime::scheduler::current_thread::Handle>>",
		   "raw::poll", "app::serve::{closure#0}");
	/* an fn type's "->" is no closing bracket; a tuple's comma is no separator */
	assert_arg("core::ptr::drop_in_place<app::Map<app::F, fn(u8, u16) -> u32>>",
		   "drop_in_place<", "app::Map<app::F, fn(u8, u16) -> u32>");
	/* legacy raw::poll: no generics in the name */
	assert_arg("tokio::runtime::task::raw::poll", "raw::poll", NULL);
	assert_arg("core::ptr::drop_in_place<>", "drop_in_place<", NULL);
	assert_arg("core::ptr::drop_in_place<a::B", "drop_in_place<", NULL);
}

static void assert_nth(const char *name, const char *key, unsigned idx, const char *want)
{
	assert_got(task_types_arg(name, key, idx), want);
}

static void test_nth_arg(void **state)
{
	static const char harness[] =
	    "<tokio::runtime::task::harness::Harness<app::Wrap<(u8, u16)>, alloc::sync::Arc<"
	    "tokio::runtime::scheduler::multi_thread::handle::Handle>>>::poll";

	(void)state;
	assert_nth(harness, "Harness<", 0, "app::Wrap<(u8, u16)>");
	/* The scheduler: past the comma inside the tuple, its spaces left out. */
	assert_nth(harness, "Harness<", 1,
		   "alloc::sync::Arc<tokio::runtime::scheduler::multi_thread::handle::Handle>");
	assert_nth(harness, "Harness<", 2, NULL);
	assert_nth("app::F<fn() -> u8, u16>::poll", "F<", 1, "u16");
	assert_nth("app::F<>::poll", "F<", 0, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_first_arg),
	    cmocka_unit_test(test_nth_arg),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
