// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <libiberty/demangle.h>

#include "demangle.h"

#define RUST_HASH_LEN 16

static bool all_hex(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		char c = s[i];

		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
			return false;
	}
	return true;
}

/* Length of name without a trailing ".llvm.<hex digits>" that ThinLTO appends to promoted
 * local symbols. */
static size_t strip_llvm_suffix(const char *name, size_t len)
{
	static const char sfx[] = ".llvm.";
	const char *p = NULL, *q = name;

	/* The last occurrence wins: the suffix is appended after everything else. */
	while ((q = strstr(q, sfx)) != NULL) {
		p = q;
		q++;
	}
	if (!p)
		return len;
	size_t digits = len - (size_t)(p - name) - (sizeof(sfx) - 1);
	if (digits == 0 || !all_hex(p + sizeof(sfx) - 1, digits))
		return len;
	return (size_t)(p - name);
}

/* libiberty already drops the legacy hash unless DMGL_VERBOSE is set; keep this in case a
 * libiberty version or an odd name leaves it in. */
static void strip_rust_hash(char *s)
{
	size_t len = strlen(s);
	size_t tail = 3 + RUST_HASH_LEN; /* "::h" + hash */

	if (len <= tail)
		return;
	char *p = s + len - tail;
	if (memcmp(p, "::h", 3) == 0 && all_hex(p + 3, RUST_HASH_LEN))
		*p = '\0';
}

char *demangle(const char *mangled)
{
	char *name, *res;
	size_t len;

	if (!mangled) {
		errno = EINVAL;
		return NULL;
	}

	/* Strip the LTO suffix up front: the C++ demangler would otherwise render it as
	 * " [clone .llvm.N]". */
	len = strip_llvm_suffix(mangled, strlen(mangled));
	name = strndup(mangled, len);
	if (!name)
		return NULL;

	/* DMGL_RUST alone restricts libiberty to the Rust schemes, so C++ needs a second try in
	 * auto mode. Rust goes first because legacy Rust names are also valid C++ names whose C++
	 * rendering keeps the hash. */
	res = cplus_demangle(name, DMGL_PARAMS | DMGL_ANSI | DMGL_RUST);
	if (!res && name[0] == '_' && name[1] == 'Z')
		res = cplus_demangle(name, DMGL_PARAMS | DMGL_ANSI);
	if (!res)
		return name;
	free(name);
	strip_rust_hash(res);
	return res;
}
