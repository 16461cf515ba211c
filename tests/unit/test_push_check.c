// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* --push option checks, and the push options a --cgroup supervisor hands its children. */
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>
#include "options.h"
#include "push.h"

static void test_checks(void **state)
{
	(void)state;
	assert_null(push_check_url("http://pyroscope:4040"));
	assert_null(push_check_url("https://u:p@prof.example.com/base/"));
	assert_non_null(push_check_url("ftp://host"));
	assert_non_null(push_check_url("not a url"));
	assert_non_null(push_check_url("http://host/?q=1"));
	assert_null(push_check_header("X-Scope-OrgID: team"));
	assert_null(push_check_header("Authorization: Bearer abc.def"));
	assert_non_null(push_check_header("NoColon"));
	assert_non_null(push_check_header(": value"));
	assert_non_null(push_check_header("X-A:   "));
	assert_non_null(push_check_header("Bad Name: v"));
	assert_non_null(push_check_header("Content-Type: text/plain"));
	assert_null(push_check_label("env=prod"));
	assert_null(push_check_label("_k9=a.b-c/d:e@f+g"));
	assert_non_null(push_check_label("env"));
	assert_non_null(push_check_label("9k=v"));
	assert_non_null(push_check_label("k=a,b"));
	assert_non_null(push_check_label("k={x}"));
	assert_non_null(push_check_label("k="));
	assert_non_null(push_check_label("service_name=x"));
	assert_non_null(push_check_label("__name__=x"));
	assert_null(push_check_service("api-v2.prod"));
	assert_non_null(push_check_service("a b"));
}

static void test_child_argv(void **state)
{
	struct push_opts po = {.url = "http://p:4040",
			       .interval_s = 30,
			       .service = "api",
			       .labels = {"env=prod", "team=x"},
			       .nlabels = 2,
			       .headers = {"X-Scope-OrgID: t"},
			       .nheaders = 1,
			       .spool_mb = 8,
			       .spool_dir = "/var/spool/d9"};
	const char *want[] = {"--push",		 "http://p:4040",
			      "--push-interval", "30",
			      "--spool-mb",	 "8",
			      "--service",	 "api",
			      "--label",	 "env=prod",
			      "--label",	 "team=x",
			      "--push-header",	 "X-Scope-OrgID: t",
			      "--spool-dir",	 "/var/spool/d9/pid-42"};
	char *argv[PUSH_CHILD_ARGS + 1], buf[PATH_MAX + 64];
	size_t a = 0;

	(void)state;
	push_child_argv(&po, "pid-42", argv, &a, buf, sizeof(buf));
	assert_int_equal(a, sizeof(want) / sizeof(want[0]));
	for (size_t i = 0; i < a; i++)
		assert_string_equal(argv[i], want[i]);
	a = 0;
	po.url = NULL;
	push_child_argv(&po, "pid-42", argv, &a, buf, sizeof(buf));
	assert_int_equal(a, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_checks),
	    cmocka_unit_test(test_child_argv),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
