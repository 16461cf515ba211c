// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * profile.pb.gz: pprof's profile.proto, gzipped, for `go tool pprof` and other pprof readers.
 *
 * Samples are encoded and deflated as they arrive instead of being aggregated: with a task_id
 * label nearly every sample is distinct (ids are per task), so aggregation by (stack, labels)
 * would not bound memory, while streaming keeps in memory only the tables that grow with
 * distinct addresses, functions and strings. Protobuf lets a message's fields come in any
 * order, so the tables (mappings, locations, functions, strings) follow the samples, written
 * at finish when they are complete; pprof resolves every id and string index after decoding.
 * Everything goes to a temp file renamed when complete.
 *
 * Values: resumes/count = weight_count, idle/nanoseconds = weight_idle_ns, cpu/nanoseconds =
 * weight_cpu_ns (on-CPU samples; 0 in park samples, which carry the other two), so that pprof
 * totals equal the sums of samples.jsonl (`-sample_index=cpu` shows where workers ran). Locations
 * are addresses (the leaf's ip, return address - 1 above it, so that a location lands on the call);
 * their mappings are marked has_functions, so pprof trusts our names and never re-symbolizes
 * against whatever binary it finds locally.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "options.h"
#include "pprof_profile.h"
#include "protobuf.h"
#include "stack_agg.h"
#include "symbolize.h"
#include "target.h"
#include "util_hash.h"
#include "writer.h"

/* profile.proto field numbers. */
enum {
	PROFILE_SAMPLE_TYPE = 1,
	PROFILE_SAMPLE = 2,
	PROFILE_MAPPING = 3,
	PROFILE_LOCATION = 4,
	PROFILE_FUNCTION = 5,
	PROFILE_STRING_TABLE = 6,
	PROFILE_TIME_NANOS = 9,
	PROFILE_DURATION_NANOS = 10,
	PROFILE_PERIOD_TYPE = 11,
	PROFILE_PERIOD = 12,
	PROFILE_COMMENT = 13,
	PROFILE_DEFAULT_SAMPLE_TYPE = 14,
	VALUE_TYPE_TYPE = 1,
	VALUE_TYPE_UNIT = 2,
	SAMPLE_LOCATION_ID = 1,
	SAMPLE_VALUE = 2,
	SAMPLE_LABEL = 3,
	LABEL_KEY = 1,
	LABEL_STR = 2,
	LABEL_NUM = 3,
	MAPPING_ID = 1,
	MAPPING_START = 2,
	MAPPING_LIMIT = 3,
	MAPPING_FILE_OFFSET = 4,
	MAPPING_FILENAME = 5,
	MAPPING_BUILD_ID = 6,
	MAPPING_HAS_FUNCTIONS = 7,
	LOCATION_ID = 1,
	LOCATION_MAPPING_ID = 2,
	LOCATION_ADDRESS = 3,
	LOCATION_LINE = 4,
	LINE_FUNCTION_ID = 1,
	FUNCTION_ID = 1,
	FUNCTION_NAME = 2,
};

const struct pprof_sample_type pprof_sample_types[PPROF_NSAMPLE_TYPES] = {
    {"resumes", "count"},
    {"idle", "nanoseconds"},
    {"cpu", "nanoseconds"},
};

/* Pseudo locations (a sample without a stack) are keyed apart from frames, whose keys (a hash
 * of address and name) have the top bit cleared. */
#define PSEUDO_LOC_KEY (1ULL << 63)
/* Mapping keys: an index in the symbolizer's maps, or this bit | a module's string id when
 * the address is no longer in the maps (a library unloaded before the end). */
#define MODULE_MAP_KEY (1ULL << 32)

struct ploc {
	uint64_t addr;
	uint64_t file_offset;
	uint32_t func; /* function id, 0 if unknown */
	/* Calls inlined at addr, innermost first: function ids at inl[inl_start...]. */
	uint32_t inl_start, ninl;
	uint32_t module;  /* string id, 0 if anonymous */
	uint32_t mapping; /* mapping index + 1 at finish, 0 if none */
};

struct pmapping {
	uint64_t start, limit, offset;
	uint32_t filename;
	uint32_t build_id;
	bool from_maps; /* false for a mapping rebuilt from a module's locations */
	uint32_t dev_major, dev_minor;
	uint64_t inode;
	uint32_t id;
};

struct pprof_writer {
	FILE *f;	     /* where the gzipped profile goes */
	bool push_labels;    /* only labels that are fine as a backend's series (worker) */
	struct out_file out; /* profile.pb.gz (the file writer only) */
	z_stream z;
	bool z_ready;
	unsigned char zout[65536];
	/* Messages are gathered here and deflated 64 KiB at a time: one deflate() call per
	 * sample costs more than compressing it (the output is the same). */
	unsigned char zin[65536];
	size_t zin_len;
	struct pb_buf msg, sub, top;
	struct intern strings;	  /* the string table; id 0 is "" */
	struct u64_index func_of; /* name string id -> function index */
	uint32_t *func_name;	  /* function index -> name string id */
	size_t nfuncs, funcs_cap;
	struct u64_index loc_of; /* a frame's key (location_id) -> location index */
	struct ploc *locs;
	size_t locs_cap;
	uint64_t *ids;
	size_t ids_cap;
	uint32_t *inl; /* function ids of the locations' inlined calls */
	size_t ninl, inl_cap;
	uint32_t key_worker, key_task_id, key_park_point, key_outcome, key_capped;
	uint32_t key_runtime;
	uint64_t nsamples;
	int err;
};

static uint32_t str_id(struct pprof_writer *pw, const char *s)
{
	uint32_t id = 0;

	if (intern_id(&pw->strings, s, strlen(s), &id) && !pw->err)
		pw->err = -ENOMEM;
	return id;
}

/* Feeds the deflate stream; flush is Z_NO_FLUSH or Z_FINISH. */
static int gz_deflate(struct pprof_writer *pw, const void *data, size_t len, int flush)
{
	pw->z.next_in = (Bytef *)data;
	pw->z.avail_in = (uInt)len;
	do {
		size_t have;

		pw->z.next_out = pw->zout;
		pw->z.avail_out = sizeof(pw->zout);
		if (deflate(&pw->z, flush) == Z_STREAM_ERROR)
			return -EIO;
		have = sizeof(pw->zout) - pw->z.avail_out;
		errno = 0;
		if (have && fwrite(pw->zout, 1, have, pw->f) != have)
			return errno ? -errno : -EIO;
	} while (pw->z.avail_out == 0);
	return 0;
}

/* Like gz_deflate(), through pw->zin. */
static int gz_write(struct pprof_writer *pw, const void *data, size_t len, int flush)
{
	int err;

	if (flush == Z_NO_FLUSH && len <= sizeof(pw->zin) - pw->zin_len) {
		memcpy(pw->zin + pw->zin_len, data, len);
		pw->zin_len += len;
		return 0;
	}
	err = gz_deflate(pw, pw->zin, pw->zin_len, Z_NO_FLUSH);
	pw->zin_len = 0;
	if (err)
		return err;
	if (flush == Z_NO_FLUSH && len <= sizeof(pw->zin)) {
		memcpy(pw->zin, data, len);
		pw->zin_len = len;
		return 0;
	}
	return gz_deflate(pw, data, len, flush);
}

/* Appends one top-level Profile field holding the message in pw->msg. */
static int emit_msg(struct pprof_writer *pw, uint32_t field)
{
	pb_reset(&pw->top);
	pb_msg(&pw->top, field, &pw->msg);
	if (pw->top.err)
		return pw->top.err;
	return gz_write(pw, pw->top.data, pw->top.len, Z_NO_FLUSH);
}

static uint32_t function_id(struct pprof_writer *pw, const char *name)
{
	uint32_t sid = str_id(pw, name), idx;
	bool added;

	if (u64_index_id(&pw->func_of, sid, &idx, &added)) {
		pw->err = -ENOMEM;
		return 0;
	}
	if (added) {
		if (pw->nfuncs == pw->funcs_cap) {
			size_t ncap = pw->funcs_cap ? pw->funcs_cap * 2 : 256;
			uint32_t *np = realloc(pw->func_name, ncap * sizeof(*np));

			if (!np) {
				pw->err = -ENOMEM;
				return 0;
			}
			pw->func_name = np;
			pw->funcs_cap = ncap;
		}
		pw->func_name[pw->nfuncs++] = sid;
	}
	return idx + 1;
}

/* Records the calls inlined at a new location (frames f[0..n), innermost first). */
static void add_inlined(struct pprof_writer *pw, struct ploc *l, const struct task_frame *f,
			size_t n)
{
	if (pw->ninl + n > pw->inl_cap) {
		size_t ncap = (pw->ninl + n) * 2;
		uint32_t *np = realloc(pw->inl, ncap * sizeof(*np));

		if (!np) {
			pw->err = -ENOMEM;
			return;
		}
		pw->inl = np;
		pw->inl_cap = ncap;
	}
	l->inl_start = (uint32_t)pw->ninl;
	for (size_t i = 0; i < n; i++)
		if (f[i].name)
			pw->inl[pw->ninl++] = function_id(pw, f[i].name);
	l->ninl = (uint32_t)pw->ninl - l->inl_start;
}

/* The location id of a frame (depth 0 = leaf) with the ninl calls inlined at it just before it
 * in the array, or of a pseudo frame when f is NULL. */
static uint64_t location_id(struct pprof_writer *pw, const struct task_frame *f, size_t depth,
			    size_t ninl, const char *pseudo)
{
	uint64_t addr, key;
	uint32_t idx;
	bool added;
	struct ploc *l;

	if (f) {
		/* A return address points after the call; -1 lands on the call's line. Keyed by
		 * the name as well: code folded for several functions is named by the sample's
		 * task (collector_name_folded_frames), so one address can stand for several of
		 * them. */
		uint64_t w[2] = {f->addr, (uintptr_t)f->name};

		addr = depth && f->addr ? f->addr - 1 : f->addr;
		key = hash_words(w, 2) & ~PSEUDO_LOC_KEY;
	} else {
		addr = 0;
		key = PSEUDO_LOC_KEY | str_id(pw, pseudo);
	}
	if (u64_index_id(&pw->loc_of, key, &idx, &added)) {
		pw->err = -ENOMEM;
		return 0;
	}
	if (!added)
		return idx + 1;
	if (idx == pw->locs_cap) {
		size_t ncap = pw->locs_cap ? pw->locs_cap * 2 : 1024;
		struct ploc *np = realloc(pw->locs, ncap * sizeof(*np));

		if (!np) {
			pw->err = -ENOMEM;
			return 0;
		}
		pw->locs = np;
		pw->locs_cap = ncap;
	}
	l = &pw->locs[idx];
	memset(l, 0, sizeof(*l));
	l->addr = addr;
	if (f) {
		l->file_offset = f->file_offset - (f->addr - addr);
		l->module = f->module ? str_id(pw, f->module) : 0;
		l->func = f->name ? function_id(pw, f->name) : 0;
		add_inlined(pw, l, f - ninl, ninl);
	} else {
		l->func = function_id(pw, pseudo);
	}
	return idx + 1;
}

static void label_str(struct pprof_writer *pw, uint32_t key, const char *val)
{
	pb_reset(&pw->sub);
	pb_uint(&pw->sub, LABEL_KEY, key);
	pb_uint(&pw->sub, LABEL_STR, str_id(pw, val));
	pb_msg(&pw->msg, SAMPLE_LABEL, &pw->sub);
}

int pprof_profile_sample(struct pprof_writer *pw, const struct task_sample *s)
{
	uint64_t values[PPROF_NSAMPLE_TYPES] = {s->weight_count, s->weight_idle_ns,
						s->weight_cpu_ns};
	size_t n = s->nframes ? s->nframes : 1;
	char worker[32];

	if (pw->err)
		return pw->err;
	if (n > pw->ids_cap) {
		uint64_t *np = realloc(pw->ids, n * sizeof(*np));

		if (!np) {
			pw->err = -ENOMEM;
			return pw->err;
		}
		pw->ids = np;
		pw->ids_cap = n;
	}
	if (s->nframes) {
		n = 0;
		/* One location per address: the calls inlined there become its first lines. */
		for (size_t i = 0, ninl = 0; i < s->nframes; i++) {
			const struct task_frame *f = &s->frames[i];

			if (f->inlined) {
				ninl++;
				continue;
			}
			pw->ids[n] = f->task_root ? location_id(pw, NULL, n, 0, f->name)
						  : location_id(pw, f, n, ninl, NULL);
			n++;
			ninl = 0;
		}
	} else {
		pw->ids[0] = location_id(pw, NULL, 0, 0, stack_missing_name(s->stack_error));
	}

	pb_reset(&pw->msg);
	pb_packed(&pw->msg, SAMPLE_LOCATION_ID, pw->ids, n);
	pb_packed(&pw->msg, SAMPLE_VALUE, values, PPROF_NSAMPLE_TYPES);
	if (s->worker >= 0)
		snprintf(worker, sizeof(worker), "w%d", s->worker);
	else
		snprintf(worker, sizeof(worker), "unknown");
	label_str(pw, pw->key_worker, worker);
	/* A backend makes a series of each distinct label set: per-task ids would make one
	 * series per task. */
	if (pw->push_labels)
		goto done;
	if (s->runtime >= 0) {
		char rt[16];

		snprintf(rt, sizeof(rt), "rt%d", s->runtime);
		label_str(pw, pw->key_runtime, rt);
	}
	/* pprof drops a numeric label whose value is 0 and has no unit; Tokio task ids are
	 * NonZeroU64, so a 0 can only be a failed read and is left out like one. */
	if (s->task_id_ok && s->task_id) {
		pb_reset(&pw->sub);
		pb_uint(&pw->sub, LABEL_KEY, pw->key_task_id);
		pb_uint(&pw->sub, LABEL_NUM, s->task_id);
		pb_msg(&pw->msg, SAMPLE_LABEL, &pw->sub);
	}
	if (s->park_point)
		label_str(pw, pw->key_park_point, s->park_point);
	if (s->outcome)
		label_str(pw, pw->key_outcome, s->outcome);
	label_str(pw, pw->key_capped, s->capped ? "true" : "false");
done:
	if (!pw->err)
		pw->err = pw->msg.err ? pw->msg.err : pw->sub.err;
	if (!pw->err)
		pw->err = emit_msg(pw, PROFILE_SAMPLE);
	pw->nsamples++;
	return pw->err;
}

static void value_type(struct pprof_writer *pw, const char *type, const char *unit)
{
	pb_reset(&pw->msg);
	pb_uint(&pw->msg, VALUE_TYPE_TYPE, str_id(pw, type));
	pb_uint(&pw->msg, VALUE_TYPE_UNIT, str_id(pw, unit));
}

/* Main executable first (pprof takes the first mapping as the main binary), then by address. */
static int cmp_mappings(const void *pa, const void *pb, void *ctx)
{
	const struct pmapping *x = pa, *y = pb;
	uint32_t exe = *(const uint32_t *)ctx;
	bool xe = exe && x->filename == exe, ye = exe && y->filename == exe;

	if (xe != ye)
		return xe ? -1 : 1;
	return x->start < y->start ? -1 : x->start > y->start;
}

static uint32_t build_id_str(struct pprof_writer *pw, struct symbolizer *sym,
			     const struct pmapping *m)
{
	const char *path = intern_str(&pw->strings, m->filename);
	struct sym_module mod;
	size_t it = 0;

	while (sym && !symbolizer_next_module(sym, &it, &mod)) {
		char hex[2 * 64 + 1];

		if (!mod.path || strcmp(mod.path, path) || !mod.build_id || !mod.build_id_len)
			continue;
		if (m->from_maps && (mod.inode != m->inode || mod.dev_major != m->dev_major ||
				     mod.dev_minor != m->dev_minor))
			continue;
		for (size_t i = 0; i < mod.build_id_len && i < 64; i++)
			snprintf(hex + 2 * i, 3, "%02x", mod.build_id[i]);
		return str_id(pw, hex);
	}
	return 0;
}

/*
 * Groups locations into mappings: the maps line (segment) containing each address when the
 * symbolizer still has it, else one mapping per module spanning its locations. Returns the
 * mappings sorted and numbered, or NULL with *n = 0 when there are none.
 */
static struct pmapping *build_mappings(struct pprof_writer *pw, const struct run_context *rc,
				       size_t *n)
{
	const struct proc_map *maps = NULL;
	struct u64_index idx = {};
	struct pmapping *ms = NULL;
	uint32_t *remap = NULL, exe = 0;
	size_t nmaps = 0, cap = 0;

	*n = 0;
	if (rc->sym)
		maps = symbolizer_maps(rc->sym, &nmaps);
	for (size_t i = 0; i < pw->loc_of.n; i++) {
		struct ploc *l = &pw->locs[i];
		const struct proc_map *m;
		uint32_t mi;
		bool added;
		uint64_t key;

		if (!l->module)
			continue;
		m = maps ? proc_maps_find(maps, nmaps, l->addr) : NULL;
		if (m && (!m->path || strcmp(m->path, intern_str(&pw->strings, l->module))))
			m = NULL;
		key = m ? (uint64_t)(m - maps) : MODULE_MAP_KEY | l->module;
		if (u64_index_id(&idx, key, &mi, &added))
			goto nomem;
		if (added) {
			if (mi == cap) {
				size_t ncap = cap ? cap * 2 : 16;
				void *np = realloc(ms, ncap * sizeof(*ms));

				if (!np)
					goto nomem;
				ms = np;
				cap = ncap;
			}
			memset(&ms[mi], 0, sizeof(ms[mi]));
			ms[mi].filename = l->module;
			if (m) {
				ms[mi].from_maps = true;
				ms[mi].dev_major = m->dev_major;
				ms[mi].dev_minor = m->dev_minor;
				ms[mi].inode = m->inode;
			}
			ms[mi].start = m ? m->start : l->addr;
			ms[mi].limit = m ? m->end : l->addr + 1;
			ms[mi].offset = m ? m->pgoff : l->file_offset;
			(*n)++;
		} else if (!m) {
			if (l->addr < ms[mi].start) {
				ms[mi].start = l->addr;
				ms[mi].offset = l->file_offset;
			}
			if (l->addr >= ms[mi].limit)
				ms[mi].limit = l->addr + 1;
		}
		l->mapping = mi + 1;
	}
	if (!*n)
		goto out;
	for (size_t i = 0; i < *n; i++) {
		ms[i].build_id = build_id_str(pw, rc->sym, &ms[i]);
		ms[i].id = (uint32_t)i;
	}
	if (rc->target && rc->target->exe_path[0])
		exe = str_id(pw, rc->target->exe_path);
	qsort_r(ms, *n, sizeof(*ms), cmp_mappings, &exe);
	/* Sorting moved the mappings: point the locations at their new ids. */
	remap = malloc(*n * sizeof(*remap));
	if (!remap)
		goto nomem;
	for (size_t i = 0; i < *n; i++)
		remap[ms[i].id] = (uint32_t)i + 1;
	for (size_t i = 0; i < pw->loc_of.n; i++)
		if (pw->locs[i].mapping)
			pw->locs[i].mapping = remap[pw->locs[i].mapping - 1];
	for (size_t i = 0; i < *n; i++)
		ms[i].id = (uint32_t)i + 1;
	free(remap);
out:
	u64_index_free(&idx);
	return ms;
nomem:
	u64_index_free(&idx);
	free(ms);
	*n = 0;
	pw->err = -ENOMEM;
	return NULL;
}

static void comment(struct pprof_writer *pw, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void comment(struct pprof_writer *pw, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	pb_uint(&pw->top, PROFILE_COMMENT, str_id(pw, buf));
}

/* Everything after the samples: tables, sample types, times; strings last. */
static int write_trailer(struct pprof_writer *pw, const struct run_context *rc)
{
	struct pmapping *maps;
	size_t nmaps;
	int err = 0;

	for (size_t i = 0; i < PPROF_NSAMPLE_TYPES && !err; i++) {
		value_type(pw, pprof_sample_types[i].type, pprof_sample_types[i].unit);
		err = emit_msg(pw, PROFILE_SAMPLE_TYPE);
	}
	if (err)
		return err;
	/* Each sample's values are already estimates (1/p per resume), so one resume per unit. */
	value_type(pw, "resumes", "count");
	err = emit_msg(pw, PROFILE_PERIOD_TYPE);
	if (err)
		return err;

	maps = build_mappings(pw, rc, &nmaps);
	if (pw->err)
		return pw->err;
	for (size_t i = 0; i < nmaps && !err; i++) {
		pb_reset(&pw->msg);
		pb_uint(&pw->msg, MAPPING_ID, maps[i].id);
		pb_uint_opt(&pw->msg, MAPPING_START, maps[i].start);
		pb_uint_opt(&pw->msg, MAPPING_LIMIT, maps[i].limit);
		pb_uint_opt(&pw->msg, MAPPING_FILE_OFFSET, maps[i].offset);
		pb_uint(&pw->msg, MAPPING_FILENAME, maps[i].filename);
		pb_uint_opt(&pw->msg, MAPPING_BUILD_ID, maps[i].build_id);
		pb_uint(&pw->msg, MAPPING_HAS_FUNCTIONS, 1);
		err = emit_msg(pw, PROFILE_MAPPING);
	}
	free(maps);
	for (size_t i = 0; i < pw->loc_of.n && !err; i++) {
		const struct ploc *l = &pw->locs[i];

		pb_reset(&pw->msg);
		pb_uint(&pw->msg, LOCATION_ID, i + 1);
		pb_uint_opt(&pw->msg, LOCATION_MAPPING_ID, l->mapping);
		pb_uint_opt(&pw->msg, LOCATION_ADDRESS, l->addr);
		for (uint32_t k = 0; k < l->ninl; k++) {
			pb_reset(&pw->sub);
			pb_uint(&pw->sub, LINE_FUNCTION_ID, pw->inl[l->inl_start + k]);
			pb_msg(&pw->msg, LOCATION_LINE, &pw->sub);
		}
		if (l->func) {
			pb_reset(&pw->sub);
			pb_uint(&pw->sub, LINE_FUNCTION_ID, l->func);
			pb_msg(&pw->msg, LOCATION_LINE, &pw->sub);
		}
		err = emit_msg(pw, PROFILE_LOCATION);
	}
	for (size_t i = 0; i < pw->nfuncs && !err; i++) {
		pb_reset(&pw->msg);
		pb_uint(&pw->msg, FUNCTION_ID, i + 1);
		/* No system_name: pprof "simplifies" a function whose name equals its system name
		 * by cutting <...>, which turns "<T as Future>::poll" into "::poll". */
		pb_uint(&pw->msg, FUNCTION_NAME, pw->func_name[i]);
		err = emit_msg(pw, PROFILE_FUNCTION);
	}
	if (err)
		return err;

	pb_reset(&pw->top);
	pb_uint(&pw->top, PROFILE_TIME_NANOS, rc->started_ns + rc->realtime_offset_ns);
	pb_uint(&pw->top, PROFILE_DURATION_NANOS,
		rc->stopped_ns > rc->started_ns ? rc->stopped_ns - rc->started_ns : 0);
	pb_uint(&pw->top, PROFILE_PERIOD, 1);
	pb_uint(&pw->top, PROFILE_DEFAULT_SAMPLE_TYPE, str_id(pw, "resumes"));
	comment(pw, "dial9-bpf %s: Tokio task resumes and idle time, sampled per worker",
		DIAL9_VERSION);
	if (rc->target)
		comment(pw, "target: pid %d (%s) %s", rc->target->pid, rc->target->comm,
			rc->target->exe_path);
	comment(pw, "values are Horvitz-Thompson estimates: resumes = weight_count, idle = "
		    "weight_idle_ns of samples.jsonl; cpu = weight_cpu_ns, clock ticks");
	if (rc->opts)
		comment(pw, "per-worker-hz %" PRIu64 ", seed %" PRIu64 ", %" PRIu64 " samples",
			rc->opts->per_worker_hz, rc->opts->seed, pw->nsamples);
	if (rc->stop_reason)
		comment(pw, "stopped: %s", rc->stop_reason);
	if (pw->err || pw->top.err)
		return pw->err ? pw->err : pw->top.err;
	err = gz_write(pw, pw->top.data, pw->top.len, Z_NO_FLUSH);

	/* The string table goes last: it is complete only now. */
	for (size_t i = 0; i < pw->strings.n && !err; i++) {
		pb_reset(&pw->top);
		pb_bytes(&pw->top, PROFILE_STRING_TABLE, pw->strings.strs[i], pw->strings.lens[i]);
		err =
		    pw->top.err ? pw->top.err : gz_write(pw, pw->top.data, pw->top.len, Z_NO_FLUSH);
	}
	if (!err)
		err = gz_write(pw, NULL, 0, Z_FINISH);
	return err;
}

void pprof_profile_free(struct pprof_writer *pw)
{
	if (!pw)
		return;
	if (pw->z_ready)
		deflateEnd(&pw->z);
	pb_free(&pw->msg);
	pb_free(&pw->sub);
	pb_free(&pw->top);
	intern_free(&pw->strings);
	u64_index_free(&pw->func_of);
	u64_index_free(&pw->loc_of);
	free(pw->func_name);
	free(pw->locs);
	free(pw->ids);
	free(pw->inl);
	free(pw);
}

int pprof_profile_finish(struct pprof_writer *pw, const struct run_context *rc)
{
	return pw->err ? pw->err : write_trailer(pw, rc);
}

struct pprof_writer *pprof_profile_new(FILE *f, bool push_labels)
{
	struct pprof_writer *pw = calloc(1, sizeof(*pw));

	if (!pw)
		return NULL;
	pw->f = f;
	pw->push_labels = push_labels;
	/* gzip framing (15 + 16): pprof reads gzip, not a raw zlib stream. */
	if (deflateInit2(&pw->z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8,
			 Z_DEFAULT_STRATEGY) != Z_OK) {
		pprof_profile_free(pw);
		return NULL;
	}
	pw->z_ready = true;
	/* string_table[0] must be "". */
	str_id(pw, "");
	pw->key_worker = str_id(pw, "worker");
	pw->key_runtime = str_id(pw, "runtime");
	pw->key_task_id = str_id(pw, "task_id");
	pw->key_park_point = str_id(pw, "park_point");
	pw->key_outcome = str_id(pw, "outcome");
	pw->key_capped = str_id(pw, "capped");
	if (pw->err) {
		pprof_profile_free(pw);
		return NULL;
	}
	return pw;
}

static int pprof_sample(struct writer *w, const struct task_sample *s)
{
	return pprof_profile_sample(w->priv, s);
}

static int pprof_finish(struct writer *w, const struct run_context *rc)
{
	struct pprof_writer *pw = w->priv;
	int err = pprof_profile_finish(pw, rc);

	if (err) {
		fprintf(stderr, "dial9-bpf: failed to write %s/%s: %s\n", pw->out.dir->path,
			pw->out.name, strerror(-err));
		out_file_discard(&pw->out);
	} else {
		err = out_file_commit(&pw->out);
	}
	pprof_profile_free(pw);
	w->priv = NULL;
	return err;
}

static void pprof_abort(struct writer *w)
{
	struct pprof_writer *pw = w->priv;

	out_file_discard(&pw->out);
	pprof_profile_free(pw);
	w->priv = NULL;
}

int pprof_writer_open(const struct out_dir *dir, struct writer *w)
{
	struct pprof_writer *pw = pprof_profile_new(NULL, false);
	int err;

	if (!pw)
		return -ENOMEM;
	err = out_file_create(&pw->out, dir, "profile.pb.gz", false);
	if (err) {
		pprof_profile_free(pw);
		return err;
	}
	pw->f = pw->out.f;
	w->priv = pw;
	w->format = "pprof";
	w->sample = pprof_sample;
	w->finish = pprof_finish;
	w->abort = pprof_abort;
	return 0;
}
