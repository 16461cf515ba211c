// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Which word of Tokio's CONTEXT holds current_task_id, from the park points' counts. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "dial9_bpf.h"
#include "long_polls.h"

static uint64_t counts[D9_LP_LEARN_SLOTS];

static void reset(void)
{
	memset(counts, 0, sizeof(counts));
}

/* One word holding the id at every observation, its tag word always 1: Option<Id(u64)>. */
static void test_tagged_word(void **state)
{
	bool tagged = false;

	(void)state;
	reset();
	counts[5] = 40;
	counts[D9_LP_WORDS + 5] = 40;
	counts[9] = 3; /* a counter that happened to equal an id */
	assert_int_equal(long_polls_pick_word(counts, 40, &tagged), 5);
	assert_true(tagged);
}

/* Option<NonZeroU64>: no tag; a word holding the id 90% of the time wins. */
static void test_untagged_word(void **state)
{
	bool tagged = true;

	(void)state;
	reset();
	counts[2] = 36;
	counts[D9_LP_WORDS + 2] = 4;
	assert_int_equal(long_polls_pick_word(counts, 40, &tagged), 2);
	assert_false(tagged);
}

/* Some park points are reached in polls whose task cannot be known (begun before the probes
 * went in, or nested): a word holding the id 80% of the time is still the one. */
static void test_word_among_unknown_polls(void **state)
{
	bool tagged = false;

	(void)state;
	reset();
	counts[5] = 33;
	counts[D9_LP_WORDS + 5] = 33;
	counts[23] = 2;
	assert_int_equal(long_polls_pick_word(counts, 40, &tagged), 5);
	assert_true(tagged);
}

/* The tag word matches too when task 1 makes most of the observations: the id is the word
 * after it. */
static void test_task_one_and_its_tag(void **state)
{
	bool tagged = false;

	(void)state;
	reset();
	counts[4] = 38; /* the tag, 1, equal to the id of task 1 */
	counts[5] = 40;
	counts[D9_LP_WORDS + 5] = 40;
	assert_int_equal(long_polls_pick_word(counts, 40, &tagged), 5);
	assert_true(tagged);
}

/* Too few observations, no word often enough, or two words alike: not settled. */
static void test_not_settled(void **state)
{
	bool tagged;

	(void)state;
	reset();
	counts[3] = 7;
	assert_int_equal(long_polls_pick_word(counts, 7, &tagged), -1);
	counts[3] = 30;
	assert_int_equal(long_polls_pick_word(counts, 40, &tagged), -1);
	counts[3] = 40;
	counts[7] = 40;
	assert_int_equal(long_polls_pick_word(counts, 40, &tagged), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_tagged_word),	  cmocka_unit_test(test_task_one_and_its_tag),
	    cmocka_unit_test(test_untagged_word), cmocka_unit_test(test_word_among_unknown_polls),
	    cmocka_unit_test(test_not_settled),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
