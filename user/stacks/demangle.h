/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#ifndef D9_DEMANGLE_H
#define D9_DEMANGLE_H

/*
 * Demangles a Rust (legacy "_ZN...17h<hash>E" or v0 "_R...") or C++ symbol name.
 *
 * The result never carries the legacy Rust "::h<16 hex>" hash nor an LLVM ".llvm.<N>" suffix:
 * both differ between builds of the same code and would split one function into several rows
 * of a profile. Names that are not mangled (C functions) come back as a copy.
 *
 * Returns a malloc'd string the caller frees, or NULL with errno set (EINVAL for a NULL
 * argument, ENOMEM).
 */
char *demangle(const char *mangled);

#endif /* D9_DEMANGLE_H */
