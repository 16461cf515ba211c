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
	char harness[128], want[64], inl[2][64], want_inl[2][64];
	struct sym_info si;
	char kept, other;

	(void)state;
	assert_non_null(s);
	assert_int_equal(symbolizer_resolve(s, addr, &si), 0);
	assert_true(si.merged);
	/* Whichever name the table kept, the stack's Harness names the other scheduler. */
	kept = strstr(si.name, ", A>") ? 'A' : 'B';
	other = kept == 'A' ? 'B' : 'A';
	snprintf(harness, sizeof(harness), "<tokio::runtime::task::harness::Harness<u8, %c>>::poll",
		 other);
	snprintf(want, sizeof(want), "dial9::Cell<u8, %c>::poll", other);
	/* Calls inlined into it, named after the kept copy: its argument rewritten wherever it
	 * stands as a whole type, whatever follows; not inside another name ("dial9::AB"). */
	snprintf(inl[0], sizeof(inl[0]), "dial9::Cell<u8, %c>::poll::{closure#0}", kept);
	snprintf(inl[1], sizeof(inl[1]), "dial9::Wrap<dial9::AB, %c>::call::<%c>", kept, kept);
	snprintf(want_inl[0], sizeof(want_inl[0]), "dial9::Cell<u8, %c>::poll::{closure#0}", other);
	snprintf(want_inl[1], sizeof(want_inl[1]), "dial9::Wrap<dial9::AB, %c>::call::<%c>", other,
		 other);
	struct task_frame frames[] = {
	    {.addr = addr, .name = inl[1], .inlined = true},
	    {.addr = addr, .name = inl[0], .inlined = true},
	    {.addr = addr, .name = si.name},
	    {.addr = addr + 64, .name = harness},
	};

	folded_names_apply(&fn, s, frames, 4, "u8");
	assert_string_equal(frames[2].name, want);
	assert_string_equal(frames[1].name, want_inl[0]);
	assert_string_equal(frames[0].name, want_inl[1]);
	assert_string_equal(frames[3].name, harness);
	/* Without a scheduler to go by, any name holding the task's type will do: unchanged. */
	frames[1].name = inl[0];
	frames[2].name = si.name;
	folded_names_apply(&fn, s, frames + 1, 2, "u8");
	assert_ptr_equal(frames[2].name, si.name);
	assert_ptr_equal(frames[1].name, inl[0]);
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
