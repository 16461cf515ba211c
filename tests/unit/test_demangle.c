// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "demangle.h"

static void check(const char *mangled, const char *want)
{
	char *got = demangle(mangled);

	assert_non_null(got);
	assert_string_equal(got, want);
	free(got);
}

static void test_rust_legacy(void **state)
{
	(void)state;
	check("_ZN5tokio7runtime4task3raw4poll17h0123456789abcdefE",
	      "tokio::runtime::task::raw::poll");
	/* From nm of cargo: escapes ($LT$, $u20$, ..) are decoded too. */
	check("_ZN100_$LT$$RF$mut$u20$serde_json..ser..Serializer$LT$W$C$F$GT$$u20$as$u20$serde_"
	      "core..ser..Serializer$GT$13serialize_str17h087dcf4bf24cafe9E",
	      "<&mut serde_json::ser::Serializer<W,F> as "
	      "serde_core::ser::Serializer>::serialize_str");
}

static void test_rust_legacy_llvm_suffix(void **state)
{
	(void)state;
	check("_ZN5tokio7runtime4task3raw4poll17h0123456789abcdefE.llvm.123",
	      "tokio::runtime::task::raw::poll");
}

/* A hash libiberty's Rust demangler rejects (upper case) goes through the C++ demangler, which
 * keeps it as a path segment; it must still be stripped. */
static void test_rust_hash_stripped_on_cxx_fallback(void **state)
{
	(void)state;
	check("_ZN3foo17h0123456789ABCDEFE", "foo");
}

static void test_rust_v0(void **state)
{
	(void)state;
	/* From nm of cargo. */
	check("_RINvCs4w1Fb8GztIi_8pathdiff10diff_pathsNtNtCsjrHSEGnQ3l9_3std4path7PathBufRNtBD_"
	      "4PathECs26ezDKuLN16_5cargo",
	      "pathdiff::diff_paths::<std::path::PathBuf, &std::path::Path>");
	check("_RNvNtNtNtCs1234abcd_5tokio7runtime4task3raw4poll",
	      "tokio::runtime::task::raw::poll");
}

static void test_rust_v0_llvm_suffix(void **state)
{
	(void)state;
	check("_RINvCsiWrJ4LQdrzj_6strsim12generic_jaroNtB2_13StringWrapperBB_ccEB2_.llvm."
	      "4799728271173133378",
	      "strsim::generic_jaro::<strsim::StringWrapper, strsim::StringWrapper, char, char>");
}

static void test_cxx(void **state)
{
	(void)state;
	check("_ZNSt6vectorIiSaIiEE9push_backERKi",
	      "std::vector<int, std::allocator<int> >::push_back(int const&)");
	check("_ZN3foo3barEv", "foo::bar()");
	/* Not " [clone .llvm.42]". */
	check("_Z3foov.llvm.42", "foo()");
}

static void test_plain(void **state)
{
	(void)state;
	check("getpid", "getpid");
	check("helper.llvm.77", "helper");
	/* Not an LLVM suffix: kept. */
	check("foo.llvm.", "foo.llvm.");
	check("foo.llvm.xyz", "foo.llvm.xyz");
	check("foo.cold", "foo.cold");
	check("", "");
}

static void test_malformed(void **state)
{
	(void)state;
	check("_ZN", "_ZN");
	check("_R", "_R");
	check("_ZN5tokio", "_ZN5tokio");
	check("_RNvC999999999999_x", "_RNvC999999999999_x");
	check("_ZN5tokio4poll17h0123456789abcdeE", "_ZN5tokio4poll17h0123456789abcdeE");
	errno = 0;
	assert_null(demangle(NULL));
	assert_int_equal(errno, EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rust_legacy),
	    cmocka_unit_test(test_rust_legacy_llvm_suffix),
	    cmocka_unit_test(test_rust_hash_stripped_on_cxx_fallback),
	    cmocka_unit_test(test_rust_v0),
	    cmocka_unit_test(test_rust_v0_llvm_suffix),
	    cmocka_unit_test(test_cxx),
	    cmocka_unit_test(test_plain),
	    cmocka_unit_test(test_malformed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
