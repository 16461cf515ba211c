/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The perf.data file layout (tools/perf/util/header.h) that the kernel uapi headers do not
 * carry: the file header, sections, feature bits and perf's own record types. Shared by
 * perf_writer.c and its unit test, which reads files back.
 */
#ifndef D9_PERF_FORMAT_H
#define D9_PERF_FORMAT_H

#include <stdint.h>

#define D9_PERF_MAGIC "PERFILE2"
/* perf 6.1 refuses attr.size > 128 ("more recent and unsupported ABI"). */
#define D9_PERF_ATTR_SIZE 128

struct d9_perf_section {
	uint64_t offset, size;
};

struct d9_perf_header {
	char magic[8];
	uint64_t size;	    /* sizeof(struct d9_perf_header) */
	uint64_t attr_size; /* sizeof(struct d9_perf_file_attr) */
	struct d9_perf_section attrs, data, event_types;
	uint64_t features[4];
};

/* One entry of the attrs section: the event attribute, then where its sample ids are. */
struct d9_perf_file_attr {
	uint8_t attr[D9_PERF_ATTR_SIZE];
	struct d9_perf_section ids;
};

/* Feature bits; a payload per set bit follows the data section, in bit order. */
enum d9_perf_feature {
	D9_PERF_FEAT_BUILD_ID = 2,
	D9_PERF_FEAT_HOSTNAME = 3,
	D9_PERF_FEAT_OSRELEASE = 4,
	D9_PERF_FEAT_VERSION = 5,
	D9_PERF_FEAT_ARCH = 6,
	D9_PERF_FEAT_NRCPUS = 7,
	D9_PERF_FEAT_CMDLINE = 11,
	D9_PERF_FEAT_EVENT_DESC = 12,
	D9_PERF_FEAT_SAMPLE_TIME = 21,
	D9_PERF_FEAT_CLOCKID = 23,
	D9_PERF_FEAT_CLOCK_DATA = 29,
};

/* Records perf itself defines beyond the kernel's. */
#define D9_PERF_RECORD_HEADER_BUILD_ID 67
#define D9_PERF_RECORD_FINISHED_ROUND 68
/* In a build-id record: the size byte is valid (else perf assumes 20). */
#define D9_PERF_MISC_BUILD_ID_SIZE (1 << 15)
/* Strings in feature payloads are padded to this, as perf writes them. */
#define D9_PERF_NAME_ALIGN 64
/* Fixed part of a build-id record: header, pid, 24-byte id area (20 bytes, size, padding). */
#define D9_PERF_BUILD_ID_REC_SIZE 36

/* The events dial9-bpf writes; ids are their PERF_SAMPLE_IDENTIFIER values. */
enum d9_perf_event {
	D9_PERF_EV_SAMPLE = 0, /* "task-sample": period = weight_count */
	D9_PERF_EV_IDLE = 1,   /* "task-idle-ns": period = weight_idle_ns */
	/* "task-sample-raw": period = weight_count, registers and stack for perf's own DWARF
	 * unwinding; only in files whose samples carried raw stacks (--unwind dwarf). */
	D9_PERF_EV_SAMPLE_RAW = 2,
	/* "task-cpu-ns": period = weight_cpu_ns, the on-CPU samples (and only they); declared only
	 * in files that have them, after task-sample-raw (then declared too, maybe empty). */
	D9_PERF_EV_CPU = 3,
	D9_PERF_NR_EVENTS,
};
#define D9_PERF_EVENT_ID(ev) ((uint64_t)(ev) + 1)

/* The record size is a u16 and a multiple of 8. */
#define D9_PERF_MAX_RECORD 65528

/* PERF_SAMPLE_REGS_USER of task-sample-raw: x86-64 registers by their perf_regs.h bit, dumped
 * in ascending bit order after the ABI word. */
#define D9_PERF_REG_BP 6
#define D9_PERF_REG_SP 7
#define D9_PERF_REG_IP 8
#define D9_PERF_REGS_MASK                                                                          \
	((1ULL << D9_PERF_REG_BP) | (1ULL << D9_PERF_REG_SP) | (1ULL << D9_PERF_REG_IP))
#define D9_PERF_REGS_ABI_64 2 /* PERF_SAMPLE_REGS_ABI_64 */
/* PERF_SAMPLE_STACK_USER: the largest dump (attr.sample_stack_user); longer copies keep the
 * bytes nearest sp. The rest of a task-sample-raw record takes < 1 KiB. */
#define D9_PERF_STACK_DUMP_MAX 61440

/* PERF_SAMPLE_CGROUP values: one label per worker. */
#define D9_PERF_CGROUP_NO_WORKER 1
#define D9_PERF_CGROUP_WORKER(w) ((uint64_t)(w) + 2)

#endif /* D9_PERF_FORMAT_H */
