#!/bin/bash
# What a uprobe costs by the first instruction of the probed function:
#   tools/probe-insn-cost.sh
# Builds a program whose four functions differ only in their first instruction (push, jmp
# rel32, sub from %rsp, a multi-byte nop), times 200,000 calls of each, three times, with a
# perf probe on each function's entry (the kernel emulates some instructions and single-steps
# the others out of line), and removes the probes. Root; needs perf and a C compiler.
set -eu
dir=$(mktemp -d /tmp/d9-insn-XXXXXX)
trap 'perf probe -q -d "probe_insncost:*" 2>/dev/null || true; rm -rf "$dir"' EXIT
cat >"$dir/insncost.c" <<'EOF'
#include <stdio.h>
#include <time.h>
int f_push(int x);
int f_jmp(int x);
int f_sub(int x);
int f_nopl(int x);
#define FN(name, body)                                                                       \
	".globl " #name "\n.type " #name ",@function\n" #name ":\n" body ".size " #name ",.-" #name "\n"
__asm__(".text\n" FN(f_push, "\tpush %rbx\n\tlea 1(%rdi),%eax\n\tpop %rbx\n\tret\n")
	FN(f_jmp, "\tjmp 1f\n1:\tlea 1(%rdi),%eax\n\tret\n")
	FN(f_sub, "\tsub $8,%rsp\n\tlea 1(%rdi),%eax\n\tadd $8,%rsp\n\tret\n")
	FN(f_nopl, "\tnopl 0(%rax,%rax,1)\n\tlea 1(%rdi),%eax\n\tret\n"));
static double per_call(int (*f)(int))
{
	struct timespec a, b;
	volatile int s = 0;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < 200000; i++)
		s += f(i);
	clock_gettime(CLOCK_MONOTONIC, &b);
	return ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / 200000;
}
int main(void)
{
	for (int r = 0; r < 3; r++)
		printf("push %.0f  jmp %.0f  sub %.0f  nopl %.0f  ns a call\n", per_call(f_push),
		       per_call(f_jmp), per_call(f_sub), per_call(f_nopl));
	return 0;
}
EOF
cc -O1 -o "$dir/insncost" "$dir/insncost.c"
echo "unprobed:"
"$dir/insncost" | tail -1
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
for f in f_push f_jmp f_sub f_nopl; do
	perf probe -q -x "$dir/insncost" -a "$f"
done
echo "probed:"
perf stat -o /dev/null -e 'probe_insncost:*' "$dir/insncost"
