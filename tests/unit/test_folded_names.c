// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "folded_names.h"
#include "symbolize.h"
#include "task_sample.h"

/* One copy of code with two Rust names, as the compiler leaves Core<T, S>::poll folded for two
 * schedulers: "dial9::Cell<u8, A>::poll" and "dial9::Cell<u8, B>::poll" (legacy mangling). */
int dial9_cell_a(int x) __asm__("_ZN5dial923Cell$LT$u8$C$$u20$A$GT$4poll17h0123456789abcdefE");
__attribute__((noinline)) int dial9_cell_a(int x)
{
	__asm__ volatile("" : "+r"(x));
	return x + 17;
}
extern int
dial9_cell_b(int x) __asm__("_ZN5dial923Cell$LT$u8$C$$u20$B$GT$4poll17h0123456789abcdefE")
    __attribute__((alias("_ZN5dial923Cell$LT$u8$C$$u20$A$GT$4poll17h0123456789abcdefE")));

static void test_scheduler_from_harness(void **state)
{
	struct symbolizer *s = symbolizer_new(getpid());
	struct folded_names fn = {0};
	uint64_t addr = (uint64_t)(uintptr_t)dial9_cell_a + 1;
	struct sym_info si;
	const char *other, *inl;

	(void)state;
	assert_non_null(s);
	assert_int_equal(symbolizer_resolve(s, addr, &si), 0);
	assert_true(si.merged);
	/* Whichever name the table kept, the stack's Harness names the other scheduler. */
	other = strstr(si.name, ", A>") ? "B" : "A";
	inl = strstr(si.name, ", A>") ? "dial9::Cell<u8, A>::poll::{closure#0}"
				      : "dial9::Cell<u8, B>::poll::{closure#0}";
	char harness[128], want[64], want_inl[64];

	snprintf(harness, sizeof(harness), "<tokio::runtime::task::harness::Harness<u8, %s>>::poll",
		 other);
	snprintf(want, sizeof(want), "dial9::Cell<u8, %s>::poll", other);
	snprintf(want_inl, sizeof(want_inl), "dial9::Cell<u8, %s>::poll::{closure#0}", other);
	struct task_frame frames[] = {
	    {.addr = addr, .name = inl, .inlined = true},
	    {.addr = addr, .name = si.name},
	    {.addr = addr + 64, .name = harness},
	};

	folded_names_apply(&fn, s, frames, 3, "u8");
	assert_string_equal(frames[1].name, want);
	assert_string_equal(frames[0].name, want_inl);
	assert_string_equal(frames[2].name, harness);
	/* Without a scheduler to go by, any name holding the task's type will do: unchanged. */
	frames[0].name = inl;
	frames[1].name = si.name;
	folded_names_apply(&fn, s, frames, 2, "u8");
	assert_ptr_equal(frames[1].name, si.name);
	assert_ptr_equal(frames[0].name, inl);
	folded_names_free(&fn);
	symbolizer_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_scheduler_from_harness),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
