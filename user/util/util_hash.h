/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Hashing for the in-memory tables and the deterministic draws: one copy, inline because the
 * tables call it for every frame of every sample. */
#ifndef D9_UTIL_HASH_H
#define D9_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>

/* The golden-ratio increment of splitmix64's state. */
#define D9_GOLDEN_GAMMA 0x9e3779b97f4a7c15ULL

/*
 * A 64-bit finalizer: splitmix64's output function (Stafford's Mix13, the constants tuned from
 * MurmurHash3's fmix64). A bijection in which every input bit flips each output bit with
 * probability about 1/2, so the low bits that pick a power-of-two table slot depend on all of
 * the key. It has no state step: mix64(0) is 0, which does not matter for slots; a caller that
 * needs a uniform draw from a value that may be 0 hashes splitmix64(x) instead.
 */
static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

/* One splitmix64 step from state x: the golden-ratio increment, then mix64. The increment keeps
 * x = 0 from mapping to 0 (a draw of exactly 0 would always round up). */
static inline uint64_t splitmix64(uint64_t x)
{
	return mix64(x + D9_GOLDEN_GAMMA);
}

/* FNV-1a over the bytes, finished by mix64: FNV-1a alone leaves the low bits weak. */
static inline uint64_t hash_bytes(const char *s, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)s[i];
		h *= 0x100000001b3ULL;
	}
	return mix64(h);
}

/* The same over 64-bit words (pointers, addresses): a multiply and a shift a word, then mix64;
 * the length seeds it so that a key and its zero-extended copy differ. */
static inline uint64_t hash_words(const uint64_t *w, size_t n)
{
	uint64_t h = n;

	for (size_t i = 0; i < n; i++) {
		h = (h ^ w[i]) * D9_GOLDEN_GAMMA;
		h ^= h >> 29;
	}
	return mix64(h);
}

#endif
