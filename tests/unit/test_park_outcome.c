// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* How park points' outcomes are observed: methods by name, the returned tag read off code. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>
#include "park_outcome.h"
#include "target.h"

/* Stores of Registration::poll_ready (Tokio 1.24.2, rustc 1.95, frame pointers): Pending,
 * Err, a thread-local's flag, Ok, Pending; and a local in the frame, to be ignored. */
static const unsigned char poll_ready_stores[] = {
    0xc6, 0x43, 0x09, 0x03, 0x90, 0xc6, 0x43, 0x09, 0x02, 0x90, 0x41, 0xc6, 0x46, 0x58,
    0x01, 0x90, 0xc6, 0x43, 0x09, 0x00, 0x90, 0xc6, 0x43, 0x09, 0x03, 0x90, 0xc6, 0x45,
    0x0a, 0x07, 0x90, 0xc6, 0x45, 0x0a, 0x06, 0x90, 0xc6, 0x45, 0x0a, 0x05,
};

static void test_sret_tag(void **state)
{
	uint8_t off = 0, pending = 0;

	(void)state;
	assert_true(
	    park_outcome_sret_tag(poll_ready_stores, sizeof(poll_ready_stores), &off, &pending));
	assert_int_equal(off, 9);
	assert_int_equal(pending, 3);
}

static void test_sret_tag_unsure(void **state)
{
	/* Two values only: no niche after a Ready one to be sure of. */
	static const unsigned char two[] = {0xc6, 0x43, 0x09, 0x03, 0xc6, 0x43, 0x09, 0x00};
	/* Two offsets that fit: not sure which one is the tag. */
	static const unsigned char both[] = {0xc6, 0x43, 0x09, 0x03, 0xc6, 0x43, 0x09, 0x02,
					     0xc6, 0x43, 0x09, 0x00, 0xc6, 0x43, 0x01, 0x02,
					     0xc6, 0x43, 0x01, 0x01, 0xc6, 0x43, 0x01, 0x00};
	uint8_t off = 0, pending = 0;

	(void)state;
	assert_false(park_outcome_sret_tag(two, sizeof(two), &off, &pending));
	assert_false(park_outcome_sret_tag(both, sizeof(both), &off, &pending));
	assert_false(park_outcome_sret_tag(poll_ready_stores, 3, &off, &pending));
}

static struct probe_spec park(const char *name, bool at_callee)
{
	return (struct probe_spec){
	    .kind = PROBE_PARK, .name = (char *)name, .at_callee = at_callee};
}

static void test_methods_by_name(void **state)
{
	struct probe_spec p[] = {
	    park("<tokio::time::sleep::Sleep as core::future::future::Future>::poll", false),
	    park("<tokio::sync::batch_semaphore::Acquire as core::future::future::Future>::poll",
		 false),
	    park("tokio::sync::task::atomic_waker::AtomicWaker::register_by_ref", false),
	    park("<tokio::task::yield_now::yield_now::{{closure}}::YieldNow as "
		 "core::future::future::Future>::poll",
		 true),
	    park(
		"<tokio::runtime::task::join::JoinHandle<T> as core::future::future::Future>::poll",
		false),
	    /* No code to read (fd -1): the tag cannot be found, so not observable. */
	    park("tokio::runtime::io::registration::Registration::poll_ready", false),
	};
	struct target t = {.probes = p, .nprobes = sizeof(p) / sizeof(p[0])};

	(void)state;
	park_outcome_classify(&t, -1);
	assert_int_equal(p[0].outcome.method, D9_OUT_RET_AL);
	assert_int_equal(p[0].outcome.pending, 1);
	assert_int_equal(p[0].outcome.ready_mask, 1);
	assert_true(p[0].at_return);
	assert_int_equal(p[1].outcome.method, D9_OUT_RET_AL);
	assert_int_equal(p[1].outcome.pending, 2);
	assert_int_equal(p[1].outcome.ready_mask, 3);
	assert_int_equal(p[2].outcome.method, D9_OUT_NONE);
	assert_false(p[2].at_return);
	assert_int_equal(p[3].outcome.method, D9_OUT_ALWAYS);
	assert_false(p[3].at_return);
	assert_int_equal(p[4].outcome.method, D9_OUT_JOIN_STATE);
	assert_true(p[4].at_return);
	assert_int_equal(p[5].outcome.method, D9_OUT_NONE);
	assert_false(p[5].at_return);
	assert_string_equal(park_outcome_describe(&p[2].outcome),
			    "not observable: returns nothing, the caller decides");
	p[0].outcome.invalid = 1;
	assert_string_equal(park_outcome_describe(&p[0].outcome),
			    "not observable: an unexpected return value was seen");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sret_tag),
	    cmocka_unit_test(test_sret_tag_unsure),
	    cmocka_unit_test(test_methods_by_name),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
