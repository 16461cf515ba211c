// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "elf_file.h"
#include "park_outcome.h"
#include "sampler.skel.h"
#include "target.h"

/* Park points by a distinctive part of their demangled name (legacy or v0 mangling). */
static const struct {
	const char *has, *and_has;
	enum d9_outcome_method method;
	uint8_t pending;
	uint32_t ready_mask;
} known[] = {
    /* Poll<()>: Ready 0, Pending 1. */
    {"sleep::Sleep as core::future::future::Future>::poll", NULL, D9_OUT_RET_AL, 1, 1u << 0},
    {"notify::Notified as core::future::future::Future>::poll", NULL, D9_OUT_RET_AL, 1, 1u << 0},
    {"notify::OwnedNotified as core::future::future::Future>::poll", NULL, D9_OUT_RET_AL, 1,
     1u << 0},
    {"YieldNow as core::future::future::Future>::poll", NULL, D9_OUT_RET_AL, 1, 1u << 0},
    /* Poll<Result<(), AcquireError>>, AcquireError a unit: Ok 0, Err 1, Pending 2. */
    {"batch_semaphore::Acquire as core::future::future::Future>::poll", NULL, D9_OUT_RET_AL, 2,
     (1u << 0) | (1u << 1)},
    /* Poll<io::Result<ReadyEvent>>: larger than two registers, its tag read off the code. */
    {"Registration", "::poll_ready", D9_OUT_SRET_BYTE, 0, 0},
    {"JoinHandle<", "as core::future::future::Future>::poll", D9_OUT_JOIN_STATE, 0, 0},
};

bool park_outcome_sret_tag(const unsigned char *code, size_t len, uint8_t *off, uint8_t *pending)
{
	uint32_t seen[24] = {}; /* per offset: values < 32 stored there */
	int found = -1;

	for (size_t i = 0; i + 4 <= len; i++) {
		unsigned char modrm = code[i + 1], rm = modrm & 7;

		/* c6 /0 with mod 01: movb $imm8, disp8(%reg); not %rsp (SIB) or %rbp (locals). */
		if (code[i] != 0xc6 || (modrm & 0xf8) != 0x40 || rm == 4 || rm == 5)
			continue;
		if (code[i + 2] < sizeof(seen) / sizeof(seen[0]) && code[i + 3] < 32)
			seen[code[i + 2]] |= 1u << code[i + 3];
	}
	for (int d = 0; d < (int)(sizeof(seen) / sizeof(seen[0])); d++) {
		int top = seen[d] ? 31 - __builtin_clz(seen[d]) : 0;

		if (__builtin_popcount(seen[d]) < 3 || !(seen[d] & (1u << (top - 1))))
			continue;
		if (found >= 0)
			return false; /* two candidates: not sure which one */
		found = d;
		*pending = (uint8_t)top;
	}
	if (found < 0)
		return false;
	*off = (uint8_t)found;
	return true;
}

static void classify_sret(struct target *t, struct probe_spec *p, int fd)
{
	const struct elf_sym *fn = t->elf && fd >= 0 ? elf_file_lookup(t->elf, p->vaddr) : NULL;
	unsigned char code[4096];
	size_t len;

	p->outcome.method = D9_OUT_NONE;
	if (!fn || fn->addr != p->vaddr || !fn->size)
		return;
	len = fn->size < sizeof(code) ? fn->size : sizeof(code);
	if (pread(fd, code, len, (off_t)p->offset) != (ssize_t)len ||
	    !park_outcome_sret_tag(code, len, &p->outcome.off, &p->outcome.pending))
		return;
	p->outcome.method = D9_OUT_SRET_BYTE;
	p->outcome.ready_mask = (1u << p->outcome.pending) - 1;
}

static void classify_one(struct target *t, struct probe_spec *p, int fd)
{
	memset(&p->outcome, 0, sizeof(p->outcome));
	p->at_return = false;
	/* Moved to the call only its Pending path makes (target.c): every hit is a Pending. */
	if (p->at_callee) {
		p->outcome.method = D9_OUT_ALWAYS;
		return;
	}
	for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++) {
		if (!strstr(p->name, known[k].has) ||
		    (known[k].and_has && !strstr(p->name, known[k].and_has)))
			continue;
		p->outcome.method = known[k].method;
		p->outcome.pending = known[k].pending;
		p->outcome.ready_mask = known[k].ready_mask;
		if (known[k].method == D9_OUT_SRET_BYTE)
			classify_sret(t, p, fd);
		break;
	}
	p->at_return = p->outcome.method >= D9_OUT_RET_AL;
}

void park_outcome_classify(struct target *t, int fd)
{
	for (size_t i = 0; i < t->nprobes; i++)
		if (t->probes[i].kind == PROBE_PARK)
			classify_one(t, &t->probes[i], fd);
}

const char *park_outcome_describe(const struct d9_park_outcome *o)
{
	if (o->invalid)
		return "not observable: an unexpected return value was seen";
	switch (o->method) {
	case D9_OUT_ALWAYS:
		return "always pending (probed on the Pending path only)";
	case D9_OUT_RET_AL:
		return "return value in al";
	case D9_OUT_SRET_BYTE:
		return "return value in memory (tag byte at the returned pointer)";
	case D9_OUT_JOIN_STATE:
		return "joined task's state at return (not complete: Pending)";
	default:
		return "not observable: returns nothing, the caller decides";
	}
}

void park_outcome_load(struct sampler_bpf *skel, const struct target *t)
{
	for (size_t i = 0; i < t->nprobes && i < D9_MAX_PROBES; i++)
		skel->bss->park_outcome[i] = t->probes[i].outcome;
}

void park_outcome_read(const struct sampler_bpf *skel, struct target *t)
{
	for (size_t i = 0; i < t->nprobes && i < D9_MAX_PROBES; i++)
		if (t->probes[i].kind == PROBE_PARK)
			t->probes[i].outcome = skel->bss->park_outcome[i];
}
