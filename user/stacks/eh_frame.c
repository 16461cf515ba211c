// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * .eh_frame to unwind rows (eh_frame.h). Hand-written rather than through libdw: libdw's CFI
 * API (dwarf_cfi_addrframe) answers for one address at a time and cannot list the addresses
 * where the rules change, which is what a table the BPF side binary-searches needs; asking it
 * at every byte of .text would take seconds on a large binary. The subset interpreted is what
 * compilers emit on x86-64; anything else marks its range not covered rather than guessing.
 */
#include <errno.h>
#include <gelf.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "eh_frame.h"

#define REG_RBP 6
#define REG_RSP 7
#define MAX_REMEMBER 16

enum rule { R_SAME, R_OFFSET, R_UNDEF, R_OTHER };

struct cfa_state {
	int64_t cfa_reg; /* -1: none yet */
	int64_t cfa_off;
	bool cfa_expr;
	uint8_t rbp, ra; /* enum rule */
	int64_t rbp_off, ra_off;
};

struct reader {
	const uint8_t *start, *p, *end;
	uint64_t vaddr; /* of start */
	bool bad;
};

struct cie {
	uint64_t code_align;
	int64_t data_align;
	uint64_t ra_reg;
	uint8_t fde_enc;
	bool has_z;
	struct cfa_state init; /* after its initial instructions */
};

/* Rows before sorting: an FDE's end is a not-covered row that any row starting at the same pc
 * overrides (sorted first), and among rows at one pc the last emitted wins. */
struct raw_row {
	struct d9_unwind_row r;
	uint32_t seq;
	bool end;
};

struct raw_rows {
	struct raw_row *v;
	size_t n, cap;
	int err;
};

struct interp {
	const struct cie *cie;
	struct cfa_state cur, stack[MAX_REMEMBER];
	int depth;
	uint64_t loc;
	struct raw_rows *out; /* NULL while running a CIE's initial instructions */
};

static uint64_t rd_u(struct reader *r, size_t n)
{
	uint64_t v = 0;

	if ((size_t)(r->end - r->p) < n) {
		r->bad = true;
		r->p = r->end;
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		v |= (uint64_t)r->p[i] << (8 * i);
	r->p += n;
	return v;
}

static uint64_t rd_leb(struct reader *r, bool sign)
{
	uint64_t v = 0;
	unsigned shift = 0;

	while (r->p < r->end) {
		uint8_t b = *r->p++;

		if (shift < 64)
			v |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
		if (!(b & 0x80)) {
			if (sign && shift < 64 && (b & 0x40))
				v |= ~(uint64_t)0 << shift;
			return v;
		}
	}
	r->bad = true;
	return 0;
}

static uint64_t rd_uleb(struct reader *r)
{
	return rd_leb(r, false);
}

static int64_t rd_sleb(struct reader *r)
{
	return (int64_t)rd_leb(r, true);
}

/* A DW_EH_PE-encoded pointer; pcrel is the only application x86-64 .eh_frame uses. */
static uint64_t rd_encoded(struct reader *r, uint8_t enc, bool apply)
{
	uint64_t field = r->vaddr + (uint64_t)(r->p - r->start), v;

	switch (enc & 0x0f) {
	case 0x00:
	case 0x04:
	case 0x0c:
		v = rd_u(r, 8);
		break;
	case 0x01:
		v = rd_uleb(r);
		break;
	case 0x02:
		v = rd_u(r, 2);
		break;
	case 0x03:
		v = rd_u(r, 4);
		break;
	case 0x09:
		v = (uint64_t)rd_sleb(r);
		break;
	case 0x0a:
		v = (uint64_t)(int64_t)(int16_t)rd_u(r, 2);
		break;
	case 0x0b:
		v = (uint64_t)(int64_t)(int32_t)rd_u(r, 4);
		break;
	default:
		r->bad = true;
		return 0;
	}
	if (!apply || !(enc & 0x70))
		return v;
	if ((enc & 0x70) == 0x10)
		return v + field;
	r->bad = true;
	return 0;
}

/* A factored offset. Wrapping, not overflowing, on garbage: state_row() rejects what does not
 * fit a row. */
static int64_t scaled(uint64_t v, int64_t factor)
{
	return (int64_t)(v * (uint64_t)factor);
}

static void skip_block(struct reader *r)
{
	uint64_t len = rd_uleb(r);

	if (len > (uint64_t)(r->end - r->p))
		r->bad = true;
	else
		r->p += len;
}

/* What the walker evaluates of a state, or a not-covered row. */
static struct d9_unwind_row state_row(const struct cfa_state *s, uint64_t pc)
{
	struct d9_unwind_row row = {.pc = (uint32_t)pc, .cfa = D9_UNW_NONE};

	if (s->ra == R_UNDEF) {
		row.cfa = D9_UNW_END;
		return row;
	}
	if (s->cfa_expr || (s->cfa_reg != REG_RSP && s->cfa_reg != REG_RBP) || s->ra != R_OFFSET ||
	    s->ra_off != -8 || s->cfa_off < INT32_MIN || s->cfa_off > INT32_MAX)
		return row;
	if (s->rbp == R_OFFSET) {
		if (s->rbp_off == 0 || s->rbp_off < INT16_MIN || s->rbp_off > INT16_MAX)
			return row;
		row.rbp_off = (int16_t)s->rbp_off;
	} else if (s->rbp != R_SAME) {
		return row;
	}
	row.cfa = s->cfa_reg == REG_RSP ? D9_UNW_RSP : D9_UNW_RBP;
	row.cfa_off = (int32_t)s->cfa_off;
	return row;
}

static void push_row(struct raw_rows *o, struct d9_unwind_row row, bool end)
{
	if (o->err)
		return;
	if (o->n == o->cap) {
		size_t cap = o->cap ? o->cap * 2 : 4096;
		struct raw_row *v = realloc(o->v, cap * sizeof(*v));

		if (!v) {
			o->err = -ENOMEM;
			return;
		}
		o->v = v;
		o->cap = cap;
	}
	o->v[o->n] = (struct raw_row){row, (uint32_t)o->n, end};
	o->n++;
}

static void emit(struct interp *in)
{
	if (in->out)
		push_row(in->out, state_row(&in->cur, in->loc), false);
}

static void advance(struct interp *in, uint64_t delta)
{
	emit(in);
	in->loc += delta * in->cie->code_align;
}

static void set_rule(struct interp *in, uint64_t reg, uint8_t rule, int64_t off)
{
	if (reg == REG_RBP) {
		in->cur.rbp = rule;
		in->cur.rbp_off = off;
	} else if (reg == in->cie->ra_reg) {
		in->cur.ra = rule;
		in->cur.ra_off = off;
	}
}

static void restore_rule(struct interp *in, uint64_t reg)
{
	if (reg == REG_RBP)
		set_rule(in, reg, in->cie->init.rbp, in->cie->init.rbp_off);
	else if (reg == in->cie->ra_reg)
		set_rule(in, reg, in->cie->init.ra, in->cie->init.ra_off);
}

static void def_cfa(struct interp *in, int64_t reg, int64_t off)
{
	in->cur.cfa_reg = reg;
	in->cur.cfa_off = off;
	in->cur.cfa_expr = false;
}

/* The extended opcodes (low six bits zero in the primary encoding). false: stop here. */
static bool run_extended(struct interp *in, struct reader *r, uint8_t op)
{
	int64_t da = in->cie->data_align;
	uint64_t reg;

	switch (op) {
	case 0x00: /* nop */
		break;
	case 0x01: /* set_loc */
		emit(in);
		in->loc = rd_encoded(r, in->cie->fde_enc, true);
		break;
	case 0x02:
	case 0x03:
	case 0x04: /* advance_loc1/2/4 */
		advance(in, rd_u(r, op == 0x02 ? 1 : op == 0x03 ? 2 : 4));
		break;
	case 0x05: /* offset_extended */
		reg = rd_uleb(r);
		set_rule(in, reg, R_OFFSET, scaled(rd_uleb(r), da));
		break;
	case 0x06: /* restore_extended */
		restore_rule(in, rd_uleb(r));
		break;
	case 0x07: /* undefined */
		set_rule(in, rd_uleb(r), R_UNDEF, 0);
		break;
	case 0x08: /* same_value */
		set_rule(in, rd_uleb(r), R_SAME, 0);
		break;
	case 0x09: /* register */
		reg = rd_uleb(r);
		rd_uleb(r);
		set_rule(in, reg, R_OTHER, 0);
		break;
	case 0x0a: /* remember_state */
		if (in->depth == MAX_REMEMBER)
			return false;
		in->stack[in->depth++] = in->cur;
		break;
	case 0x0b: /* restore_state */
		if (!in->depth)
			return false;
		in->cur = in->stack[--in->depth];
		break;
	case 0x0c: /* def_cfa */
		reg = rd_uleb(r);
		def_cfa(in, (int64_t)reg, (int64_t)rd_uleb(r));
		break;
	case 0x0d: /* def_cfa_register */
		def_cfa(in, (int64_t)rd_uleb(r), in->cur.cfa_off);
		break;
	case 0x0e: /* def_cfa_offset */
		def_cfa(in, in->cur.cfa_reg, (int64_t)rd_uleb(r));
		break;
	case 0x0f: /* def_cfa_expression */
		skip_block(r);
		in->cur.cfa_expr = true;
		break;
	case 0x10: /* expression */
	case 0x16: /* val_expression */
		reg = rd_uleb(r);
		skip_block(r);
		set_rule(in, reg, R_OTHER, 0);
		break;
	case 0x11: /* offset_extended_sf */
		reg = rd_uleb(r);
		set_rule(in, reg, R_OFFSET, scaled((uint64_t)rd_sleb(r), da));
		break;
	case 0x12: /* def_cfa_sf */
		reg = rd_uleb(r);
		def_cfa(in, (int64_t)reg, scaled((uint64_t)rd_sleb(r), da));
		break;
	case 0x13: /* def_cfa_offset_sf */
		def_cfa(in, in->cur.cfa_reg, scaled((uint64_t)rd_sleb(r), da));
		break;
	case 0x14: /* val_offset */
	case 0x15: /* val_offset_sf */
		reg = rd_uleb(r);
		rd_uleb(r);
		set_rule(in, reg, R_OTHER, 0);
		break;
	case 0x2e: /* GNU_args_size */
		rd_uleb(r);
		break;
	case 0x2f: /* GNU_negative_offset_extended */
		reg = rd_uleb(r);
		set_rule(in, reg, R_OFFSET, scaled(-rd_uleb(r), da));
		break;
	default:
		return false;
	}
	return !r->bad;
}

/* Runs call frame instructions; on one it cannot follow, the rest is not covered. */
static void run(struct interp *in, struct reader *r)
{
	while (r->p < r->end) {
		uint8_t op = *r->p++;
		bool ok = true;

		switch (op & 0xc0) {
		case 0x40: /* advance_loc */
			advance(in, op & 0x3f);
			break;
		case 0x80: /* offset */
			set_rule(in, op & 0x3f, R_OFFSET, scaled(rd_uleb(r), in->cie->data_align));
			ok = !r->bad;
			break;
		case 0xc0: /* restore */
			restore_rule(in, op & 0x3f);
			break;
		default:
			ok = run_extended(in, r, op);
		}
		if (!ok) {
			in->cur.cfa_expr = true;
			break;
		}
	}
}

/* The CIE whose body (after its length) starts at body and ends at end. */
static bool read_cie(struct reader *sec, const uint8_t *body, const uint8_t *end, struct cie *c)
{
	struct reader r = {sec->start, body, end, sec->vaddr, false};
	const char *aug;
	uint8_t version;
	struct interp in = {.cie = c};

	memset(c, 0, sizeof(*c));
	if (rd_u(&r, 4) != 0)
		return false;
	version = (uint8_t)rd_u(&r, 1);
	aug = (const char *)r.p;
	while (r.p < r.end && *r.p)
		r.p++;
	if (r.p++ >= r.end || (version != 1 && version != 3) || strstr(aug, "eh"))
		return false;
	c->code_align = rd_uleb(&r);
	c->data_align = rd_sleb(&r);
	c->ra_reg = version == 1 ? rd_u(&r, 1) : rd_uleb(&r);
	if (aug[0] == 'z') {
		uint64_t len = rd_uleb(&r);
		const uint8_t *after = r.p + len;

		if (len > (uint64_t)(r.end - r.p))
			return false;
		c->has_z = true;
		for (const char *a = aug + 1; *a && !r.bad; a++) {
			if (*a == 'L')
				rd_u(&r, 1);
			else if (*a == 'P')
				rd_encoded(&r, (uint8_t)rd_u(&r, 1) & 0x7f, false);
			else if (*a == 'R')
				c->fde_enc = (uint8_t)rd_u(&r, 1);
		}
		r.p = after;
	} else if (aug[0]) {
		return false;
	}
	if (r.bad)
		return false;
	in.cur = (struct cfa_state){.cfa_reg = -1, .rbp = R_SAME, .ra = R_SAME};
	c->init = in.cur;
	run(&in, &r);
	c->init = in.cur;
	return true;
}

/* One FDE (its body from the CIE pointer to end): its rows, then its end. */
static bool read_fde(struct reader *sec, const uint8_t *body, const uint8_t *end,
		     struct raw_rows *out)
{
	struct reader r = {sec->start, body, end, sec->vaddr, false};
	uint32_t cie_ptr = (uint32_t)rd_u(&r, 4);
	const uint8_t *cie_at = body - cie_ptr, *cie_body;
	uint64_t pc, range, cie_len;
	struct interp in = {.out = out};
	struct cie c;

	if (cie_ptr > (size_t)(body - sec->start))
		return false;
	{
		struct reader cr = {sec->start, cie_at, sec->end, sec->vaddr, false};

		cie_len = rd_u(&cr, 4);
		cie_body = cr.p;
		if (cr.bad || cie_len == 0xffffffff || cie_len > (uint64_t)(sec->end - cie_body) ||
		    !read_cie(sec, cie_body, cie_body + cie_len, &c))
			return false;
	}
	pc = rd_encoded(&r, c.fde_enc, true);
	range = rd_encoded(&r, c.fde_enc & 0x0f, false);
	if (c.has_z)
		skip_block(&r);
	if (r.bad || range == 0 || pc + range > UINT32_MAX || pc + range < pc)
		return false;
	in.cie = &c;
	in.cur = c.init;
	in.loc = pc;
	run(&in, &r);
	emit(&in);
	push_row(out, (struct d9_unwind_row){.pc = (uint32_t)(pc + range)}, true);
	return true;
}

static int cmp_raw(const void *a, const void *b)
{
	const struct raw_row *x = a, *y = b;

	if (x->r.pc != y->r.pc)
		return x->r.pc < y->r.pc ? -1 : 1;
	if (x->end != y->end)
		return x->end ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static bool same_rule(const struct d9_unwind_row *a, const struct d9_unwind_row *b)
{
	return a->cfa == b->cfa && a->cfa_off == b->cfa_off && a->rbp_off == b->rbp_off;
}

/* Sorted, the last row at each pc kept, and rows that change nothing dropped. */
static int finish_rows(struct raw_rows *raw, struct unwind_rows *out)
{
	if (raw->n)
		qsort(raw->v, raw->n, sizeof(*raw->v), cmp_raw);
	out->rows = malloc((raw->n ? raw->n : 1) * sizeof(*out->rows));
	if (!out->rows)
		return -ENOMEM;
	out->cap = raw->n;
	out->n = 0;
	for (size_t i = 0; i < raw->n; i++) {
		const struct d9_unwind_row *row = &raw->v[i].r;

		if (i + 1 < raw->n && raw->v[i + 1].r.pc == row->pc)
			continue;
		if (out->n ? same_rule(&out->rows[out->n - 1], row) : row->cfa == D9_UNW_NONE)
			continue;
		out->rows[out->n++] = *row;
	}
	return 0;
}

static Elf_Scn *find_section(Elf *elf, const char *want, GElf_Shdr *shdr)
{
	Elf_Scn *scn = NULL;
	size_t shstrndx;

	if (elf_getshdrstrndx(elf, &shstrndx))
		return NULL;
	while ((scn = elf_nextscn(elf, scn))) {
		const char *name;

		if (!gelf_getshdr(scn, shdr))
			continue;
		name = elf_strptr(elf, shstrndx, shdr->sh_name);
		if (name && !strcmp(name, want) && shdr->sh_type == SHT_PROGBITS)
			return scn;
	}
	return NULL;
}

int eh_frame_rows(Elf *elf, struct unwind_rows *out)
{
	GElf_Shdr shdr;
	Elf_Data *d;
	Elf_Scn *scn = find_section(elf, ".eh_frame", &shdr);

	if (!scn)
		return -ENOENT;
	d = elf_getdata(scn, NULL);
	if (!d || !d->d_buf)
		return -EINVAL;
	return eh_frame_rows_mem(d->d_buf, d->d_size, shdr.sh_addr, out);
}

int eh_frame_rows_mem(const uint8_t *buf, size_t len, uint64_t vaddr, struct unwind_rows *out)
{
	struct reader sec = {buf, buf, buf + len, vaddr, false};
	struct raw_rows raw = {};
	int err;

	while (sec.p < sec.end && !raw.err) {
		uint64_t len = rd_u(&sec, 4);
		const uint8_t *body = sec.p;

		if (sec.bad || len == 0 || len == 0xffffffff || len > (uint64_t)(sec.end - body))
			break;
		sec.p = body + len;
		uint32_t id = 0;

		if (len >= 4)
			memcpy(&id, body, 4);
		if (!id)
			continue; /* a CIE: read with each FDE that names it */
		out->fdes++;
		if (!read_fde(&sec, body, body + len, &raw))
			out->skipped++;
	}
	err = raw.err ? raw.err : finish_rows(&raw, out);
	free(raw.v);
	return err;
}

const struct d9_unwind_row *unwind_rows_find(const struct d9_unwind_row *rows, size_t n,
					     uint64_t pc)
{
	size_t lo = 0, hi = n;

	if (pc > UINT32_MAX)
		return NULL;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (rows[mid].pc <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? &rows[lo - 1] : NULL;
}

void unwind_rows_free(struct unwind_rows *r)
{
	free(r->rows);
	memset(r, 0, sizeof(*r));
}
