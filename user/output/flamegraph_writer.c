// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * flamegraph.svg: a self-contained interactive flamegraph of task stacks weighted by estimated
 * resumes (weight_count), in the classic layout (root at the bottom, callees above, siblings in
 * name order). A small embedded script adds hover details, click to zoom, regex search with
 * the matched share, and a reset; "?s=REGEX" and "?z=REGEX" in the URL open a search or a zoom
 * (links to a view). Without scripts (image viewers) the static picture and the <title>
 * tooltips still work. Colours tell apart the user's async fn bodies, other user code,
 * the Tokio runtime, std/core/alloc and native or unknown frames; the legend documents them.
 * Stacks are aggregated in a trie while sampling; the SVG is written at finish into a temp file
 * renamed when complete.
 */
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "json.h"
#include "stack_agg.h"
#include "target.h"
#include "writer.h"

#define FG_WIDTH 1200
#define FG_PAD 10
#define FG_FRAME_H 16
#define FG_TOP 80    /* below title, subtitle and legend */
#define FG_BOTTOM 34 /* room for the details line */
#define FG_FONT_PX 11
/* DejaVu Sans Mono (and most monospace fonts) advance 0.6 em: labels are cut to fit. */
#define FG_CHAR_W (0.6 * FG_FONT_PX)
/* Frames narrower than this many pixels are not drawn: they would be invisible, yet in a big
 * profile they are most of the file. */
#define FG_MIN_PX 0.1

enum fg_category {
	FG_ASYNC,  /* async fn bodies and closures of the user's crates */
	FG_USER,   /* other code of the user's crates */
	FG_TOKIO,  /* tokio and tokio_* crates */
	FG_STD,	   /* std, core, alloc */
	FG_NATIVE, /* non-Rust symbols, unknown frames */
	FG_ROOT,   /* "all" and pseudo frames */
	FG_NCATEGORIES,
};

static const struct {
	const char *label;
	double hue, hue_span, sat, light;
} palette[FG_NCATEGORIES] = {
    [FG_ASYNC] = {"async fn bodies / closures (your crates)", 4, 22, 0.82, 0.60},
    [FG_USER] = {"other code of your crates", 38, 14, 0.90, 0.56},
    [FG_TOKIO] = {"Tokio runtime (tokio*)", 196, 22, 0.62, 0.64},
    [FG_STD] = {"std / core / alloc", 88, 40, 0.45, 0.58},
    [FG_NATIVE] = {"native or unknown ([module+0xoff])", 30, 0, 0.08, 0.66},
    [FG_ROOT] = {NULL, 250, 0, 0.10, 0.78},
};

struct flamegraph_writer {
	struct out_file out;
	struct stack_agg agg;
	int err;
	bool time; /* flamegraph-time.svg: running and waiting, in ns */
};

/* The first path segment of a demangled Rust name, skipping "<", "&", "mut " and the like so
 * that "<tokio::time::Sleep as core::future::Future>::poll" gives "tokio". Returns its length
 * (0 when the name is not a Rust path, such as a C symbol) and sets *crate. */
static size_t crate_of(const char *name, const char **crate)
{
	static const char *const skip_words[] = {"mut ", "const ", "dyn ", "impl "};
	const char *p = name;
	size_t n = 0;
	bool again = true;

	while (again) {
		again = false;
		while (*p == '<' || *p == '&' || *p == '*' || *p == '(' || *p == ' ') {
			p++;
			again = true;
		}
		for (size_t i = 0; i < sizeof(skip_words) / sizeof(skip_words[0]); i++) {
			size_t l = strlen(skip_words[i]);

			if (!strncmp(p, skip_words[i], l)) {
				p += l;
				again = true;
			}
		}
	}
	while ((p[n] >= 'a' && p[n] <= 'z') || (p[n] >= 'A' && p[n] <= 'Z') ||
	       (p[n] >= '0' && p[n] <= '9') || p[n] == '_')
		n++;
	if (!n || strncmp(p + n, "::", 2))
		return 0;
	*crate = p;
	return n;
}

/* Whether the last path segment is a closure or async body: "{{closure}}" (legacy mangling),
 * "{closure#0}" (v0), "{async_fn#0}"/"{async_block#0}" (newer compilers). */
static bool ends_in_closure(const char *name)
{
	size_t len = strlen(name);
	const char *open = strrchr(name, '{');

	if (len >= 11 && !strcmp(name + len - 11, "{{closure}}"))
		return true;
	if (!open || strchr(open, '}') != name + len - 1)
		return false;
	return !strncmp(open, "{closure#", 9) || !strncmp(open, "{async", 6);
}

static enum fg_category categorize(const char *name)
{
	const char *crate = NULL;
	size_t n;

	if (name[0] == '[')
		return FG_NATIVE;
	n = crate_of(name, &crate);
	if (!n)
		return strncmp(name, "__rust", 6) ? FG_NATIVE : FG_STD;
	if ((n == 3 && !strncmp(crate, "std", 3)) || (n == 4 && !strncmp(crate, "core", 4)) ||
	    (n == 5 && !strncmp(crate, "alloc", 5)))
		return FG_STD;
	if ((n == 5 && !strncmp(crate, "tokio", 5)) || !strncmp(crate, "tokio_", 6))
		return FG_TOKIO;
	return ends_in_closure(name) ? FG_ASYNC : FG_USER;
}

static void hsl_rgb(double h, double s, double l, int rgb[3])
{
	double c = (1 - (l > 0.5 ? 2 * l - 1 : 1 - 2 * l)) * s;
	double hp = h / 60, m = l - c / 2, r = 0, g = 0, b = 0;
	int k = (int)hp;
	double mod2 = hp - (double)(k - k % 2);
	double x = c * (1 - (mod2 > 1 ? mod2 - 1 : 1 - mod2));

	switch (k % 6) {
	case 0:
		r = c;
		g = x;
		break;
	case 1:
		r = x;
		g = c;
		break;
	case 2:
		g = c;
		b = x;
		break;
	case 3:
		g = x;
		b = c;
		break;
	case 4:
		r = x;
		b = c;
		break;
	default:
		r = c;
		b = x;
		break;
	}
	rgb[0] = (int)((r + m) * 255 + 0.5);
	rgb[1] = (int)((g + m) * 255 + 0.5);
	rgb[2] = (int)((b + m) * 255 + 0.5);
}

/* A stable colour per name: its category's hue band, varied by a hash of the name so that
 * neighbouring frames stay distinguishable and reruns keep their colours. */
static void frame_color(enum fg_category cat, const char *name, double vary, int rgb[3])
{
	uint32_t h = 2166136261u;
	double v1, v2;

	for (const char *p = name; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	v1 = (h & 0xffff) / 65535.0;
	v2 = (h >> 16) / 65535.0;
	if (vary < 0) /* the legend: the middle of the band */
		v1 = v2 = 0.5;
	hsl_rgb(palette[cat].hue + palette[cat].hue_span * v1, palette[cat].sat,
		palette[cat].light - 0.05 + 0.10 * v2, rgb);
}

/* Length of the valid UTF-8 sequence at s (at most avail bytes), or 0 if invalid: a broken
 * byte in a symbol must not make the whole SVG ill-formed XML. */
static size_t utf8_len(const unsigned char *s, size_t avail)
{
	size_t n;
	unsigned char lo = 0x80, hi = 0xbf;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4;
	else
		return 0;
	if (n > avail)
		return 0;
	if (s[0] == 0xe0)
		lo = 0xa0;
	else if (s[0] == 0xed)
		hi = 0x9f;
	else if (s[0] == 0xf0)
		lo = 0x90;
	else if (s[0] == 0xf4)
		hi = 0x8f;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return n;
}

/* Writes at most max_chars characters of s, XML-escaped; returns the characters written.
 * Runs of characters that need nothing go out with one fwrite(). */
static size_t xml_text(FILE *f, const char *s, size_t max_chars)
{
	const unsigned char *p = (const unsigned char *)s, *run = p;
	size_t avail = strlen(s), chars = 0;

	while (avail && chars < max_chars) {
		size_t n = *p < 0x80 ? 1 : utf8_len(p, avail);

		if (n > 1 ||
		    (n == 1 && *p >= 0x20 && *p != '<' && *p != '>' && *p != '&' && *p != '"')) {
			p += n;
			avail -= n;
			chars++;
			continue;
		}
		if (p > run)
			fwrite(run, 1, (size_t)(p - run), f);
		if (!n) {
			fputc('?', f);
			n = 1;
		} else if (*p == '<') {
			fputs("&lt;", f);
		} else if (*p == '>') {
			fputs("&gt;", f);
		} else if (*p == '&') {
			fputs("&amp;", f);
		} else if (*p == '"') {
			fputs("&quot;", f);
		} else {
			fputc(' ', f);
		}
		p += n;
		avail -= n;
		chars++;
		run = p;
	}
	if (p > run)
		fwrite(run, 1, (size_t)(p - run), f);
	return chars;
}

static size_t utf8_chars(const char *s)
{
	size_t n = 0;

	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		n += (*p & 0xc0) != 0x80;
	return n;
}

/* The label that fits in width pixels: the whole name, a prefix ending in "..", or nothing. */
static void fitted_label(FILE *f, const char *name, double width)
{
	size_t fit = width > 6 ? (size_t)((width - 6) / FG_CHAR_W) : 0;

	if (fit < 3)
		return;
	if (utf8_chars(name) <= fit) {
		xml_text(f, name, fit);
		return;
	}
	xml_text(f, name, fit - 2);
	fputs("..", f);
}

/* 1234567 -> "1,234,567" */
static const char *grouped(uint64_t v, char *buf, size_t size)
{
	char tmp[32];
	int len = snprintf(tmp, sizeof(tmp), "%" PRIu64, v);
	size_t o = 0;

	for (int i = 0; i < len && o + 2 < size; i++) {
		if (i && (len - i) % 3 == 0)
			buf[o++] = ',';
		buf[o++] = tmp[i];
	}
	buf[o] = 0;
	return buf;
}

/*
 * Numbers without printf, which dominates writing a big SVG otherwise (parsing the formats,
 * and formatting doubles through arbitrary precision): the output is the same.
 */
#define put_lit(f, s) fwrite((s), 1, sizeof(s) - 1, (f))

static void put_u64(FILE *f, uint64_t v)
{
	char tmp[20];
	size_t n;
	const char *d = u64_digits(tmp, v, &n);

	fwrite(d, 1, n, f);
}

static void put_int(FILE *f, int v)
{
	if (v < 0) {
		fputc('-', f);
		put_u64(f, -(uint64_t)(int64_t)v);
	} else {
		put_u64(f, (uint64_t)v);
	}
}

/* v as printf's "%.1f" (dec 1) or "%.2f" (dec 2). */
static void put_fixed(FILE *f, double v, int dec)
{
#if LDBL_MANT_DIG >= 64
	static const uint64_t pow10[] = {1, 10, 100};
	char tmp[24];
	size_t n = 0;
	uint64_t q, fp;
	long double t, frac;

	if (!(v >= 0 && v < 1e15) || signbit(v) || dec < 1 || dec > 2) {
		fprintf(f, "%.*f", dec, v);
		return;
	}
	/* A double's 53 significant bits times 10 or 100 fit the 64 of a long double: t is
	 * exact, so is its fraction, hence the rounding (to nearest, ties to even, as printf;
	 * ties cannot even occur, x.x5 having no binary representation). */
	t = (long double)v * (long double)pow10[dec];
	q = (uint64_t)t;
	frac = t - (long double)q;
	if (frac > 0.5L || (frac == 0.5L && (q & 1)))
		q++;
	fp = q % pow10[dec];
	q /= pow10[dec];
	tmp[sizeof(tmp) - ++n] = (char)('0' + fp % 10);
	if (dec == 2)
		tmp[sizeof(tmp) - ++n] = (char)('0' + fp / 10);
	tmp[sizeof(tmp) - ++n] = '.';
	do {
		tmp[sizeof(tmp) - ++n] = (char)('0' + q % 10);
		q /= 10;
	} while (q);
	fwrite(tmp + sizeof(tmp) - n, 1, n, f);
#else
	fprintf(f, "%.*f", dec, v);
#endif
}

/* A frame name's category and colour, computed once per name. */
struct name_style {
	bool done;
	int rgb[3];
};

struct layout {
	FILE *f;
	const struct stack_agg *a;
	double min_w; /* in weight units */
	double scale; /* pixels per weight unit */
	uint32_t max_depth;
	uint64_t total;
	struct name_style *styles; /* by intern id; NULL (out of memory): computed each time */
	const char *unit;	   /* of the weights: "resumes" or "ns" */
};

static void node_color(struct layout *l, uint32_t node, const char *name, int rgb[3])
{
	uint32_t id = l->a->nodes[node].name;
	struct name_style *st = node && l->styles ? &l->styles[id] : NULL;

	if (st && st->done) {
		memcpy(rgb, st->rgb, sizeof(st->rgb));
		return;
	}
	frame_color(node && strncmp(name, "[no stack", 9) ? categorize(name) : FG_ROOT, name, 1,
		    rgb);
	if (st) {
		memcpy(st->rgb, rgb, sizeof(st->rgb));
		st->done = true;
	}
}

static void measure(struct layout *l, uint32_t node)
{
	const struct stack_node *nd = &l->a->nodes[node];

	if (node && (double)nd->total < l->min_w)
		return;
	if (nd->depth > l->max_depth)
		l->max_depth = nd->depth;
	for (uint32_t c = nd->first_child; c; c = l->a->nodes[c].next_sibling)
		measure(l, c);
}

static void draw(struct layout *l, uint32_t node, uint64_t x)
{
	const struct stack_node *nd = &l->a->nodes[node];
	const char *name = stack_node_name(l->a, node);
	FILE *f = l->f;
	double px, pw, py;
	char num[32];
	int rgb[3];

	if (node && (double)nd->total < l->min_w)
		return;
	node_color(l, node, name, rgb);
	px = FG_PAD + (double)x * l->scale;
	pw = l->total ? (double)nd->total * l->scale : FG_WIDTH - 2 * FG_PAD;
	py = FG_TOP + (double)(l->max_depth - nd->depth) * FG_FRAME_H;
	/* <g class="f" data-x="X" data-w="W" data-d="D"><title>NAME (N resumes, P%)</title>
	 * <rect x="%.1f" y="%.1f" width="%.1f" height="H" fill="rgb(R,G,B)" rx="2"/>
	 * <text x="%.1f" y="%.1f">LABEL</text></g> */
	put_lit(f, "<g class=\"f\" data-x=\"");
	put_u64(f, x);
	put_lit(f, "\" data-w=\"");
	put_u64(f, nd->total);
	put_lit(f, "\" data-d=\"");
	put_u64(f, nd->depth);
	put_lit(f, "\"><title>");
	xml_text(f, name, SIZE_MAX);
	put_lit(f, " (");
	fputs(grouped(nd->total, num, sizeof(num)), f);
	fputc(' ', f);
	fputs(l->unit, f);
	put_lit(f, ", ");
	put_fixed(f, l->total ? 100.0 * (double)nd->total / (double)l->total : 0.0, 2);
	put_lit(f, "%)</title><rect x=\"");
	put_fixed(f, px, 1);
	put_lit(f, "\" y=\"");
	put_fixed(f, py, 1);
	put_lit(f, "\" width=\"");
	put_fixed(f, pw, 1);
	put_lit(f, "\" height=\"");
	put_int(f, FG_FRAME_H - 1);
	put_lit(f, "\" fill=\"rgb(");
	put_int(f, rgb[0]);
	fputc(',', f);
	put_int(f, rgb[1]);
	fputc(',', f);
	put_int(f, rgb[2]);
	put_lit(f, ")\" rx=\"2\"/><text x=\"");
	put_fixed(f, px + 3, 1);
	put_lit(f, "\" y=\"");
	put_fixed(f, py + FG_FRAME_H - 4.5, 1);
	put_lit(f, "\">");
	if (!node && !l->total)
		fputs("all (no samples)", f);
	else
		fitted_label(f, name, pw);
	put_lit(f, "</text></g>\n");
	for (uint32_t c = nd->first_child; c; c = l->a->nodes[c].next_sibling) {
		draw(l, c, x);
		x += l->a->nodes[c].total;
	}
}

/* The interactive part. Each frame <g> carries its offset, width (both in resumes) and depth,
 * so zooming only rescales; the name comes from the <title>. */
static const char script[] =
    "'use strict';\n"
    "var W, PAD, CW, UNIT, TOTAL = 0, frames = [], details, matched, resetBtn, searchBtn;\n"
    "var query = null;\n"
    "function $(id) { return document.getElementById(id); }\n"
    "function init() {\n"
    "  var svg = document.documentElement, gs = document.getElementsByClassName('f');\n"
    "  W = +svg.getAttribute('data-width'); PAD = +svg.getAttribute('data-pad');\n"
    "  CW = +svg.getAttribute('data-charw'); UNIT = svg.getAttribute('data-unit');\n"
    "  for (var i = 0; i < gs.length; i++) {\n"
    "    var g = gs[i], t = g.getElementsByTagName('title')[0].textContent;\n"
    "    var r = g.getElementsByTagName('rect')[0];\n"
    "    g.fi = i;\n"
    "    frames.push({g: g, x: +g.getAttribute('data-x'), w: +g.getAttribute('data-w'),\n"
    "      d: +g.getAttribute('data-d'), name: t.slice(0, t.lastIndexOf(' (')), rect: r,\n"
    "      text: g.getElementsByTagName('text')[0], fill: r.getAttribute('fill')});\n"
    "  }\n"
    "  if (frames.length) TOTAL = frames[0].w;\n"
    "  details = $('details'); matched = $('matched');\n"
    "  resetBtn = $('reset'); searchBtn = $('search');\n"
    "  svg.addEventListener('mouseover', function (e) {\n"
    "    var f = frameOf(e);\n"
    "    details.textContent = f ? f.name + ' \\u2014 ' + fmt(f.w) + ' ' + UNIT + ' (' + pct(f.w)\n"
    "      + '%)' : ' ';\n"
    "  });\n"
    "  svg.addEventListener('mouseout', function () { details.textContent = ' '; });\n"
    "  svg.addEventListener('click', function (e) {\n"
    "    if (e.target === resetBtn) return zoom(frames[0]);\n"
    "    if (e.target === searchBtn) return query === null ? ask() : clearSearch();\n"
    "    var f = frameOf(e);\n"
    "    if (f) zoom(f);\n"
    "  });\n"
    "  window.addEventListener('keydown', function (e) {\n"
    "    if ((e.ctrlKey || e.metaKey) && e.key === 'f') { e.preventDefault(); ask(); }\n"
    "    else if (e.key === 'Escape') { zoom(frames[0]); clearSearch(); }\n"
    "  });\n"
    "  var p = new URLSearchParams(location.search);\n"
    "  if (p.get('s')) search(p.get('s'));\n"
    "  if (p.get('z')) zoomTo(p.get('z'));\n"
    "}\n"
    "function frameOf(e) {\n"
    "  for (var n = e.target; n && n.nodeType === 1; n = n.parentNode)\n"
    "    if (n.fi !== undefined) return frames[n.fi];\n"
    "  return null;\n"
    "}\n"
    "function pct(w) { return TOTAL ? (100 * w / TOTAL).toFixed(2) : '0.00'; }\n"
    "function fmt(n) { return String(n).replace(/\\B(?=(\\d{3})+(?!\\d))/g, ','); }\n"
    "function fit(name, w) {\n"
    "  var n = Math.floor((w - 6) / CW);\n"
    "  if (n < 3) return '';\n"
    "  return name.length <= n ? name : name.slice(0, n - 2) + '..';\n"
    "}\n"
    "function place(f, x, w, ancestor) {\n"
    "  f.g.style.display = '';\n"
    "  f.g.classList.toggle('anc', ancestor);\n"
    "  f.rect.setAttribute('x', x.toFixed(1));\n"
    "  f.rect.setAttribute('width', w.toFixed(1));\n"
    "  f.text.setAttribute('x', (x + 3).toFixed(1));\n"
    "  f.text.textContent = f.d || TOTAL ? fit(f.name, w) : 'all (no samples)';\n"
    "}\n"
    "function zoom(z) {\n"
    "  if (!z || !z.w) return;\n"
    "  var scale = (W - 2 * PAD) / z.w;\n"
    "  frames.forEach(function (f) {\n"
    "    if (f.d >= z.d && f.x >= z.x && f.x + f.w <= z.x + z.w)\n"
    "      place(f, PAD + (f.x - z.x) * scale, f.w * scale, false);\n"
    "    else if (f.d < z.d && f.x <= z.x && f.x + f.w >= z.x + z.w)\n"
    "      place(f, PAD, W - 2 * PAD, true);\n"
    "    else\n"
    "      f.g.style.display = 'none';\n"
    "  });\n"
    "  resetBtn.style.display = z.d ? '' : 'none';\n"
    "}\n"
    "/* ?z=REGEX (a link to a view): zoom into the widest frame whose name matches. */\n"
    "function zoomTo(q) {\n"
    "  var re, best = null;\n"
    "  try { re = new RegExp(q); } catch (err) { return; }\n"
    "  frames.forEach(function (f) {\n"
    "    if (f.d > 0 && re.test(f.name) && (!best || f.w > best.w)) best = f;\n"
    "  });\n"
    "  if (best) zoom(best);\n"
    "}\n"
    "function ask() {\n"
    "  var q = prompt('Search frames (regular expression):', query || '');\n"
    "  if (q) search(q);\n"
    "}\n"
    "function search(q) {\n"
    "  var re, spans = [], sum = 0, end = -1;\n"
    "  try { re = new RegExp(q); } catch (err) { matched.textContent = 'Bad regex: ' + q; return; "
    "}\n"
    "  query = q;\n"
    "  frames.forEach(function (f) {\n"
    "    var hit = f.d > 0 && re.test(f.name);\n"
    "    f.rect.setAttribute('fill', hit ? 'rgb(224,40,224)' : f.fill);\n"
    "    if (hit) spans.push([f.x, f.x + f.w]);\n"
    "  });\n"
    "  /* Nested matches (a frame and its callee) count once: merge the intervals. */\n"
    "  spans.sort(function (a, b) { return a[0] - b[0]; });\n"
    "  spans.forEach(function (s) {\n"
    "    if (s[1] <= end) return;\n"
    "    sum += s[1] - Math.max(s[0], end);\n"
    "    end = s[1];\n"
    "  });\n"
    "  matched.textContent = 'Matched: ' + pct(sum) + '% (' + fmt(sum) + ' ' + UNIT + ') /' + q + "
    "'/';\n"
    "  searchBtn.textContent = 'Clear search';\n"
    "}\n"
    "function clearSearch() {\n"
    "  query = null;\n"
    "  frames.forEach(function (f) { f.rect.setAttribute('fill', f.fill); });\n"
    "  matched.textContent = ' ';\n"
    "  searchBtn.textContent = 'Search (Ctrl-F)';\n"
    "}\n";

/* The subtitle: what the widths are. */
static void write_subtitle(FILE *f, const struct layout *l, const struct run_context *rc, bool time)
{
	char num[32], num2[32];

	fprintf(f, "<text class=\"hd sub\" x=\"%d\" y=\"42\" text-anchor=\"middle\">",
		FG_WIDTH / 2);
	if (time)
		fprintf(f, "%.3f estimated task-seconds from %s samples", (double)l->total / 1e9,
			grouped(l->a->nsamples, num2, sizeof(num2)));
	else
		fprintf(f, "%s estimated resumes from %s samples",
			grouped(l->total, num, sizeof(num)),
			grouped(l->a->nsamples, num2, sizeof(num2)));
	if (rc && rc->stopped_ns > rc->started_ns)
		fprintf(f, " over %.1f s", (double)(rc->stopped_ns - rc->started_ns) / 1e9);
	if (time)
		fputs(" \xc2\xb7 width = ns running (on-CPU samples) or waiting (parked, "
		      "weight_idle_ns)"
		      " \xc2\xb7 click running or waiting to see one, the root for both</text>\n",
		      f);
	else
		fputs(
		    " \xc2\xb7 width = resumes (weight_count) \xc2\xb7 hover for details, click to "
		    "zoom</text>\n",
		    f);
}

static void write_svg(FILE *f, const struct stack_agg *a, const struct run_context *rc, bool time)
{
	struct layout l = {.f = f,
			   .a = a,
			   .total = a->nodes[0].total,
			   .styles = calloc(a->names.n ? a->names.n : 1, sizeof(struct name_style)),
			   .unit = time ? "ns" : "resumes"};
	double lx = FG_PAD;
	int height, rgb[3];

	l.scale = l.total ? (FG_WIDTH - 2.0 * FG_PAD) / (double)l.total : 0;
	l.min_w = l.total ? FG_MIN_PX / l.scale : 0;
	measure(&l, 0);
	height = FG_TOP + (int)(l.max_depth + 1) * FG_FRAME_H + FG_BOTTOM;

	fprintf(f,
		"<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"
		"<svg version=\"1.1\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
		"height=\"%d\" viewBox=\"0 0 %d %d\" data-width=\"%d\" data-pad=\"%d\" "
		"data-charw=\"%.2f\" data-unit=\"%s\" onload=\"init()\">\n",
		FG_WIDTH, height, FG_WIDTH, height, FG_WIDTH, FG_PAD, FG_CHAR_W, l.unit);
	fprintf(f,
		"<defs><linearGradient id=\"bg\" x1=\"0\" y1=\"0\" x2=\"0\" y2=\"1\">"
		"<stop stop-color=\"#f4f4f4\" offset=\"5%%\"/><stop stop-color=\"#e8e8d8\" "
		"offset=\"95%%\"/></linearGradient></defs>\n"
		"<style>\n"
		"text { font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace; "
		"font-size: %dpx; fill: #111; }\n"
		".hd { font-family: Verdana, 'DejaVu Sans', sans-serif; }\n"
		".title { font-size: 17px; }\n"
		".sub { font-size: 11px; fill: #555; }\n"
		".f { cursor: pointer; }\n"
		".f text { pointer-events: none; }\n"
		".f:hover rect { stroke: #222; stroke-width: 0.7; }\n"
		".anc rect { opacity: 0.55; }\n"
		".btn { cursor: pointer; fill: #1f4e9c; font-size: 12px; }\n"
		".btn:hover { text-decoration: underline; }\n"
		"</style>\n"
		"<script type=\"text/ecmascript\"><![CDATA[\n%s]]></script>\n"
		"<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"url(#bg)\"/>\n",
		FG_FONT_PX, script, FG_WIDTH, height);

	fprintf(f, "<text class=\"hd title\" x=\"%d\" y=\"24\" text-anchor=\"middle\">",
		FG_WIDTH / 2);
	if (rc && rc->target) {
		fputs("Tokio task stacks of ", f);
		xml_text(f, rc->target->comm, SIZE_MAX);
		fprintf(f, " (pid %d)", rc->target->pid);
	} else {
		fputs("Tokio task stacks", f);
	}
	fputs("</text>\n", f);
	write_subtitle(f, &l, rc, time);
	fprintf(f,
		"<text id=\"reset\" class=\"hd btn\" x=\"%d\" y=\"24\" style=\"display:none\">"
		"Reset zoom</text>\n",
		FG_PAD);
	fprintf(f,
		"<text id=\"search\" class=\"hd btn\" x=\"%d\" y=\"24\" text-anchor=\"end\">"
		"Search (Ctrl-F)</text>\n",
		FG_WIDTH - FG_PAD);

	/* Legend: what the colour bands mean. */
	fputs("<g class=\"legend\">\n", f);
	for (int c = 0; c < FG_NCATEGORIES; c++) {
		if (!palette[c].label)
			continue;
		frame_color(c, "", -1, rgb);
		fprintf(
		    f,
		    "<rect x=\"%.1f\" y=\"54\" width=\"12\" height=\"12\" rx=\"2\" "
		    "fill=\"rgb(%d,%d,%d)\"/><text class=\"hd\" x=\"%.1f\" y=\"64\">%s</text>\n",
		    lx, rgb[0], rgb[1], rgb[2], lx + 16, palette[c].label);
		lx += 16 + strlen(palette[c].label) * 6.4 + 22;
	}
	fputs("</g>\n<g id=\"frames\">\n", f);
	draw(&l, 0, 0);
	free(l.styles);
	fputs("</g>\n", f);
	fprintf(f, "<text id=\"details\" class=\"hd\" x=\"%d\" y=\"%d\"> </text>\n", FG_PAD,
		height - 12);
	fprintf(
	    f, "<text id=\"matched\" class=\"hd\" x=\"%d\" y=\"%d\" text-anchor=\"end\"> </text>\n",
	    FG_WIDTH - FG_PAD, height - 12);
	fputs("</svg>\n", f);
}

static int flamegraph_sample(struct writer *w, const struct task_sample *s)
{
	struct flamegraph_writer *fw = w->priv;
	int err = fw->time ? stack_agg_add_time(&fw->agg, s) : stack_agg_add_sample(&fw->agg, s);

	if (err && !fw->err)
		fw->err = err;
	return err;
}

static int flamegraph_finish(struct writer *w, const struct run_context *rc)
{
	struct flamegraph_writer *fw = w->priv;
	int err = fw->err;

	if (!err)
		err = stack_agg_sort(&fw->agg);
	if (err) {
		fprintf(stderr, "dial9-bpf: failed to aggregate stacks for %s/%s: %s\n",
			fw->out.dir->path, fw->out.name, strerror(-err));
		out_file_discard(&fw->out);
	} else {
		write_svg(fw->out.f, &fw->agg, rc, fw->time);
		err = out_file_commit(&fw->out);
	}
	stack_agg_free(&fw->agg);
	free(fw);
	w->priv = NULL;
	return err;
}

static void flamegraph_abort(struct writer *w)
{
	struct flamegraph_writer *fw = w->priv;

	out_file_discard(&fw->out);
	stack_agg_free(&fw->agg);
	free(fw);
	w->priv = NULL;
}

static int open_view(const struct out_dir *dir, struct writer *w, bool time)
{
	struct flamegraph_writer *fw = calloc(1, sizeof(*fw));
	int err;

	if (!fw)
		return -ENOMEM;
	fw->time = time;
	err = stack_agg_init(&fw->agg);
	if (!err) {
		err = out_file_create(&fw->out, dir,
				      time ? "flamegraph-time.svg" : "flamegraph.svg", false);
		if (err)
			stack_agg_free(&fw->agg);
	}
	if (err) {
		free(fw);
		return err;
	}
	w->format = "flamegraph";
	w->priv = fw;
	w->sample = flamegraph_sample;
	w->finish = flamegraph_finish;
	w->abort = flamegraph_abort;
	return 0;
}

int flamegraph_writer_open(const struct out_dir *dir, struct writer *w)
{
	return open_view(dir, w, false);
}

int flamegraph_time_writer_open(const struct out_dir *dir, struct writer *w)
{
	return open_view(dir, w, true);
}
