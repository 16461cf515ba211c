/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Inside `dial9-bpf report`: the model the files are read into and the functions its parts
 * share. report_read.c reads JSON and files, report_meta.c metadata.json, report_stacks.c groups
 * the samples, report_print.c prints, report_procs.c walks a --cgroup run, report.c runs it.
 */
#ifndef D9_REPORT_INT_H
#define D9_REPORT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <json-c/json.h>

#define REPORT_MAX_KEY_BYTES (64u << 20)
#define REPORT_SHOWN_FRAMES 3
#define REPORT_TOP_STACKS 10
#define REPORT_TOP_LONG_POLLS 10
#define KEY_NAME_MAX 512 /* bytes of one frame name kept in a stack key */
#define PARK_NAME_MAX 64 /* park point names are short identifiers */
#define SHOW_COLUMNS 110 /* frame names are cut to this on output */
#define MAX_FRAMES 4096	 /* the sampler captures at most 127 */
#define MAX_WORKERS 4096
#define MAX_WORKER_INDEX 1000000
#define MAX_COUNTERS 64
#define JSON_DEPTH 16
#define REPORT_RECORD_CACHE 64 /* parsed stack records kept, by id */
/*
 * Plausibility limits. json-c clamps integers beyond 64 bits to the type's limit, so every
 * bound is below INT64_MAX / UINT64_MAX, which turns an overflowing number into an error.
 * weight_count is 1/p and p >= 2^-32; idle weights are nanoseconds / p.
 */
#define MAX_EPOCH (1ULL << 40)
#define MAX_WEIGHT_COUNT (1ULL << 53)
#define MAX_WEIGHT_IDLE (1ULL << 62)
#define MAX_NS ((uint64_t)INT64_MAX - 1)
#define MAX_U64 (UINT64_MAX - 1)

struct worker_sum {
	int64_t index;
	uint64_t tid;
	char comm[17];
	char detection[16];
	uint64_t samples_seen;	/* lines of samples.jsonl */
	uint64_t used;		/* complete, calibrated, inside the sampling interval */
	uint64_t used_selected; /* selections in those */
	uint64_t capped;
	uint64_t refused;
};

struct counter {
	char name[64];
	uint64_t value;
};

struct stack_ent {
	char *key; /* a tag, the park point, then the shown frames, each NUL-terminated */
	uint32_t keylen;
	uint64_t hash;
	uint64_t samples;
	double count;	/* sum of weight_count: estimated resumes */
	double idle_ns; /* sum of weight_idle_ns: estimated time parked */
};

/* Where each record of one kind starts in stacks.jsonl, by id. */
struct rec_index {
	size_t *off;
	size_t n, cap;
};

/* Estimates by task type: the future each task was spawned with. */
#define MAX_TYPES 1024
struct type_sum {
	char *future; /* NULL: samples without one (no task type found) */
	uint64_t samples;
	double count, idle_ns;
	/* From metadata's count_terms: estimated resumes from the exact in-window counts, the
	 * sum of its windows' squared totals, the counts' edge terms and their part that moves
	 * with the hit's price (for its interval). */
	double counted, counted_sq, counted_edge, counted_price;
};

/* On-CPU samples by future: estimated CPU time (sum of weight_cpu_ns). */
/* One of the longest polls of long_polls.jsonl. */
struct long_poll_top {
	double duration_ns, on_cpu_ns, blocked_ns;
	int64_t worker;
	bool lower_bound;
	char *future; /* NULL: unknown */
	char *frames; /* the innermost frames outside the runtime, " <- " between them */
};

struct cpu_sum {
	char *future; /* or "scheduler/idle", "(unknown)" */
	uint64_t samples;
	double ns;
};

/* One sample's part in the estimates, kept for their variance: samples of one armed window
 * share its random placement, so the window (not the sample) is the unit that was drawn. */
struct draw {
	int64_t cluster; /* the window; a number of its own for an always-armed sample */
	uint32_t type;	 /* index in types; MAX_TYPES: past the type table */
	uint32_t stack;	 /* index in ents; NO_STACK_ENT: past the stack table */
	double w;	 /* weight_count */
};
#define NO_STACK_ENT UINT32_MAX

/* Stack key tags: what the shown frames are. */
#define TAG_USER 'u' /* innermost frames outside the runtime */
#define TAG_LEAF 'l' /* only runtime frames: the innermost named one */
#define TAG_NONE 'n' /* no stack captured */

struct report {
	/* metadata.json */
	bool have_meta;
	char tool_version[32];
	char kernel[96];
	char sampler[48];
	char comm[32];
	char exe[256];
	char stop_reason[32];
	char layout[160];
	char detection[32];
	char link[24];
	int64_t pid;
	uint64_t hz, cap_rate, burst, seed;
	uint64_t windows; /* armed windows of the run (overhead.windows), drawn from or not */
	uint64_t started_ns, stopped_ns, realtime_ns;
	uint64_t probes, poll_fns, park_fns;
	struct worker_sum *workers;
	size_t nworkers;
	struct counter counters[MAX_COUNTERS];
	size_t ncounters;
	bool have_samples_meta;
	uint64_t written, with_stack, stack_errors, task_id_ok;

	/* samples.jsonl */
	size_t max_stacks;
	struct stack_ent *ents;
	size_t nents, ents_cap;
	uint32_t *slots; /* open addressing: index into ents + 1, 0 when free */
	size_t nslots;
	size_t key_bytes;
	uint64_t nsamples, capped_samples, nostack_samples, unknown_worker_samples;
	double total_count, total_idle;
	uint64_t other_samples;
	double other_count, other_idle;
	uint64_t truncated_line; /* the skipped last line, 0 if none */
	struct type_sum *types;
	size_t ntypes;
	struct type_sum other_types; /* past MAX_TYPES */
	bool have_counted;	     /* metadata had count_terms */
	double total_counted;
	struct draw *draws;
	size_t ndraws, draws_cap;
	int64_t solo; /* clusters handed to always-armed samples, one each */
	/* On-CPU samples (kind "cpu"): kept apart from the park samples' estimates. */
	struct cpu_sum *cpu;
	size_t ncpu;
	/* long_polls.jsonl, when the run wrote it */
	bool have_long_polls;
	uint64_t long_polls_total, long_polls_bad;
	struct long_poll_top long_polls_top[REPORT_TOP_LONG_POLLS];
	size_t nlong_polls_top;
	uint64_t cpu_samples;
	double cpu_total_ns;

	/* stacks.jsonl (report_table.c), when samples.jsonl has the stack_table layout */
	char samples_layout[16];   /* metadata.json's samples.layout; empty: inline */
	json_object *columns;	   /* names of a row's values */
	size_t stack_col;	   /* which of them is "stack_id" */
	uint64_t absent_when_null; /* bit i: column i's null means absent */
	char *table;		   /* the file */
	size_t table_len;
	struct rec_index stack_recs, frame_recs; /* id -> offset of its line in table */
	json_object *cache[REPORT_RECORD_CACHE];
	uint64_t cache_id[REPORT_RECORD_CACHE];

	struct json_tokener *tok;
	char *buf; /* line reader: REPORT_LINE_MAX + 1 bytes */
	char key[2 + PARK_NAME_MAX + REPORT_SHOWN_FRAMES * (KEY_NAME_MAX + 1)];
};

struct perr {
	char *buf;
	size_t len;
};

/* Formats the message into e (when it has room) and returns -1. */
__attribute__((format(printf, 2, 3))) int rpt_fail(struct perr *e, const char *fmt, ...);
/* What a JSON value is, for messages ("an integer", "a string", ...). */
const char *rpt_kind(json_object *v);
/*
 * Typed members of a JSON object, named in messages as WHERE.KEY. Each returns 0 (found and
 * valid, or absent and optional: *out untouched) or -1 with the message in e.
 */
int rpt_get_u64(struct perr *e, const char *where, json_object *obj, const char *key, bool optional,
		uint64_t min, uint64_t max, uint64_t *out);
int rpt_get_i64(struct perr *e, const char *where, json_object *obj, const char *key, bool optional,
		int64_t min, int64_t max, int64_t *out);
int rpt_get_num(struct perr *e, const char *where, json_object *obj, const char *key, bool optional,
		double lo, double hi, bool lo_open, double *out);
int rpt_get_bool(struct perr *e, const char *where, json_object *obj, const char *key,
		 bool optional, bool *out);
int rpt_get_str(struct perr *e, const char *where, json_object *obj, const char *key, bool optional,
		bool nullable, const char **out);
int rpt_get_typed(struct perr *e, const char *where, json_object *obj, const char *key,
		  bool optional, enum json_type type, json_object **out);
/* Line and column (1-based) of byte off in buf. */
void rpt_line_col(const char *buf, size_t off, size_t *line, size_t *col);
/* Whether s holds only JSON white space. */
bool rpt_blank(const char *s, size_t len);
FILE *rpt_open_regular(const char *path, off_t max, const char *fix, char *err, size_t errlen,
		       off_t *size);
json_object *rpt_load_json(const char *path, const char *fix);

/* The worker with that index in metadata.json, or NULL. */
struct worker_sum *rpt_find_worker(struct report *r, int64_t index);
/* The sums of FUTURE's task type (NULL future: its own row); past MAX_TYPES, one "other" row. */
struct type_sum *rpt_type_get(struct report *r, const char *future);
/* Whether a demangled frame name is the runtime's (tokio, std, core, alloc), not the program's. */
bool rpt_runtime_frame(const char *name);
/* Writes s, at most max bytes, with control characters escaped. */
void rpt_put_clean(FILE *out, const char *s, size_t max);
/* Reads DIR/long_polls.jsonl's longest polls, if the run wrote it; 0 or a negative errno. */
int rpt_read_long_polls(struct report *r, const char *dir);
void rpt_print_long_polls(const struct report *r, FILE *out);
void rpt_long_polls_free(struct report *r);
/* Adds one parsed samples.jsonl object to the totals: 0, or -1 with the message in e. */
int rpt_take_sample(struct report *r, json_object *obj, struct perr *e);
void rpt_copy_str(char *dst, size_t n, const char *src);
/* A stack_table row as the inline layout's object (a new reference), or NULL with the message
 * in e. */
json_object *rpt_expand_row(struct report *r, json_object *row, struct perr *e);
void rpt_table_free(struct report *r);
/* The report of one --pid run's directory, to stdout; returns the exit code. */
int rpt_run(const char *dir);
/* The report of a --cgroup/--container run's directory; returns the exit code. */
int rpt_processes(const char *dir, const char *path);

#endif
