// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "elf_file.h"
#include "proc_maps.h"
#include "symbolize.h"
#include "unwind_dwarf.h"

#define CAPTURE_MAX 16384
#define MAX_PCS 128

/*
 * The fixture: main -> a -> b -> c, d always inlined into c, built without frame pointers.
 * Inside d it captures ip, sp, bp and the stack above sp, as the BPF program will at a park
 * point, and writes them to stdout; then it changes its maps on command and waits to be killed.
 * With an argument, c spins on clock_gettime() instead (the vDSO) to be sampled with ptrace.
 */
static const char fixture_src[] =
    "#define _GNU_SOURCE\n"
    "#include <dlfcn.h>\n"
    "#include <pthread.h>\n"
    "#include <stdint.h>\n"
    "#include <string.h>\n"
    "#include <time.h>\n"
    "#include <unistd.h>\n"
    "#define CAP 16384\n"
    "static unsigned char buf[CAP];\n"
    "static uint64_t stack_end;\n"
    "static int spin;\n"
    "volatile int sink;\n"
    "static void put(const void *p, size_t n)\n"
    "{\n"
    "	const char *c = p;\n"
    "	while (n) {\n"
    "		ssize_t w = write(1, c, n);\n"
    "		if (w <= 0)\n"
    "			_exit(3);\n"
    "		c += w;\n"
    "		n -= (size_t)w;\n"
    "	}\n"
    "}\n"
    "static inline __attribute__((always_inline)) void d(int x)\n"
    "{\n"
    "	uint64_t hdr[4];\n"
    "	__asm__ volatile(\"lea 0(%%rip), %0\\n\\tmov %%rsp, %1\\n\\tmov %%rbp, %2\"\n"
    "			 : \"=r\"(hdr[0]), \"=r\"(hdr[1]), \"=r\"(hdr[2]) : : \"memory\");\n"
    "	hdr[3] = stack_end - hdr[1] < CAP ? stack_end - hdr[1] : CAP;\n"
    "	memcpy(buf, (const void *)(uintptr_t)hdr[1], hdr[3]);\n"
    "	put(hdr, sizeof(hdr));\n"
    "	put(buf, hdr[3]);\n"
    "	sink = x;\n"
    "}\n"
    "__attribute__((noinline, noclone)) int c(int x)\n"
    "{\n"
    "	if (spin) {\n"
    "		put(\"r\", 1);\n"
    "		for (;;) {\n"
    "			struct timespec ts;\n"
    "			clock_gettime(CLOCK_MONOTONIC, &ts);\n"
    "			sink = (int)ts.tv_nsec;\n"
    "		}\n"
    "	}\n"
    "	d(x);\n"
    "	sink = x;\n"
    "	return x + 3;\n"
    "}\n"
    "__attribute__((noinline, noclone)) int b(int x)\n"
    "{\n"
    "	int r = c(x + 1);\n"
    "	sink = r;\n"
    "	return r * 2;\n"
    "}\n"
    "__attribute__((noinline, noclone)) int a(int x)\n"
    "{\n"
    "	int r = b(x + 1);\n"
    "	sink = r;\n"
    "	return r - 1;\n"
    "}\n"
    "int main(int argc, char **argv)\n"
    "{\n"
    "	pthread_attr_t attr;\n"
    "	void *addr, *lib = NULL;\n"
    "	size_t size;\n"
    "	char cmd;\n"
    "	(void)argv;\n"
    "	if (pthread_getattr_np(pthread_self(), &attr) || pthread_attr_getstack(&attr, &addr, "
    "&size))\n"
    "		return 2;\n"
    "	stack_end = (uint64_t)(uintptr_t)addr + size;\n"
    "	spin = argc > 1;\n"
    "	sink = a(argc);\n"
    "	/* Commands on stdin change the maps: 'o' dlopen()s a library, 'c' dlclose()s it. */\n"
    "	while (read(0, &cmd, 1) == 1) {\n"
    "		if (cmd == 'o')\n"
    "			lib = dlopen(\"libz.so.1\", RTLD_NOW);\n"
    "		else if (cmd == 'c' && lib)\n"
    "			dlclose(lib);\n"
    "		put(lib ? \"y\" : \"n\", 1);\n"
    "	}\n"
    "	for (;;)\n"
    "		pause();\n"
    "}\n";

static struct {
	char dir[64], bin[128];
	pid_t pid, spin_pid; /* killed by the teardown if a test fails before it does */
	int cmd_fd, out_fd;  /* the child's stdin and stdout */
	struct unwind_regs regs;
	uint8_t stack[CAPTURE_MAX];
	size_t stack_len;
	struct unwinder *u;
	struct symbolizer *sym;
} fx;

static int read_full(int fd, void *buf, size_t n)
{
	char *p = buf;

	while (n) {
		ssize_t r = read(fd, p, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static int setup_fixture(void **state)
{
	char src[128], cmd[512];
	uint64_t hdr[4];
	int in[2], out[2];
	FILE *f;

	(void)state;
	snprintf(fx.dir, sizeof(fx.dir), "/tmp/d9-unwind-XXXXXX");
	if (!mkdtemp(fx.dir))
		return -1;
	snprintf(src, sizeof(src), "%s/fixture.c", fx.dir);
	snprintf(fx.bin, sizeof(fx.bin), "%s/fixture", fx.dir);
	f = fopen(src, "w");
	if (!f)
		return -1;
	fputs(fixture_src, f);
	fclose(f);
	snprintf(cmd, sizeof(cmd),
		 "cc -O2 -g -fomit-frame-pointer -fasynchronous-unwind-tables -o %s %s", fx.bin,
		 src);
	if (system(cmd) != 0)
		return -1;

	if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC))
		return -1;
	fx.pid = fork();
	if (fx.pid < 0)
		return -1;
	if (fx.pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		execl(fx.bin, fx.bin, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	fx.cmd_fd = in[1];
	fx.out_fd = out[0];
	if (read_full(fx.out_fd, hdr, sizeof(hdr)) || hdr[3] > CAPTURE_MAX ||
	    read_full(fx.out_fd, fx.stack, hdr[3]))
		return -1;
	fx.regs = (struct unwind_regs){.ip = hdr[0], .sp = hdr[1], .bp = hdr[2]};
	fx.stack_len = hdr[3];
	fx.u = unwinder_new(fx.pid);
	fx.sym = symbolizer_new(fx.pid);
	return fx.u && fx.sym ? 0 : -1;
}

static int teardown_fixture(void **state)
{
	char cmd[128];

	(void)state;
	unwinder_free(fx.u);
	symbolizer_free(fx.sym);
	close(fx.cmd_fd);
	close(fx.out_fd);
	if (fx.pid > 0) {
		kill(fx.pid, SIGKILL);
		waitpid(fx.pid, NULL, 0);
	}
	if (fx.spin_pid > 0) {
		kill(fx.spin_pid, SIGKILL);
		waitpid(fx.spin_pid, NULL, 0);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf %s", fx.dir);
	return system(cmd) == 0 ? 0 : -1;
}

/*
 * The registers of thread tid and up to CAPTURE_MAX bytes of its stack from sp (less at the
 * top of the stack mapping), grabbed with ptrace and /proc/PID/mem as the BPF program will
 * grab them at a park point.
 */
static int grab_thread(pid_t pid, pid_t tid, struct unwind_regs *regs, uint8_t *stack, size_t *len)
{
	struct user_regs_struct ur;
	struct proc_map *maps;
	const struct proc_map *m;
	size_t nmaps, want = CAPTURE_MAX;
	char path[64];
	ssize_t r;
	int status, fd, err = -1;

	if (ptrace(PTRACE_SEIZE, tid, 0, 0) != 0)
		return -1;
	if (ptrace(PTRACE_INTERRUPT, tid, 0, 0) != 0 || waitpid(tid, &status, __WALL) != tid)
		goto out;
	if (ptrace(PTRACE_GETREGS, tid, 0, &ur) != 0)
		goto out;
	*regs = (struct unwind_regs){.ip = ur.rip, .sp = ur.rsp, .bp = ur.rbp};
	if (proc_maps_read(pid, &maps, &nmaps) != 0)
		goto out;
	m = proc_maps_find(maps, nmaps, regs->sp);
	if (m && m->end - regs->sp < want)
		want = m->end - regs->sp;
	proc_maps_free(maps, nmaps);
	snprintf(path, sizeof(path), "/proc/%d/mem", pid);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		goto out;
	r = pread(fd, stack, want, (off_t)regs->sp);
	close(fd);
	if (r <= 0)
		goto out;
	*len = (size_t)r;
	err = 0;
out:
	ptrace(PTRACE_DETACH, tid, 0, 0);
	return err;
}

static double cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* The function at pcs[i], looking return addresses up at pc - 1. */
static const char *fn_at(struct symbolizer *s, const uint64_t *pcs, size_t i)
{
	struct sym_info si;

	if (symbolizer_resolve(s, i ? pcs[i] - 1 : pcs[i], &si) != 0 || !si.name)
		return "?";
	return si.name;
}

static void test_chain(void **state)
{
	uint64_t pcs[MAX_PCS];
	enum unwind_stop stop;
	size_t n;

	(void)state;
	assert_int_equal(
	    unwinder_unwind(fx.u, &fx.regs, fx.stack, fx.stack_len, pcs, MAX_PCS, &n, &stop), 0);
	for (size_t i = 0; i < n; i++)
		print_message("  #%zu 0x%llx %s\n", i, (unsigned long long)pcs[i],
			      fn_at(fx.sym, pcs, i));
	print_message("  stop: %s, %zu bytes of stack captured\n", unwind_stop_name(stop),
		      fx.stack_len);
	assert_true(n >= 4);
	assert_int_equal(pcs[0], fx.regs.ip);
	assert_string_equal(fn_at(fx.sym, pcs, 0), "c");
	assert_string_equal(fn_at(fx.sym, pcs, 1), "b");
	assert_string_equal(fn_at(fx.sym, pcs, 2), "a");
	assert_string_equal(fn_at(fx.sym, pcs, 3), "main");
	/* On through libc's start code to _start, whose return address CFI marks undefined. */
	assert_int_equal(stop, UNWIND_OK);
	assert_string_equal(fn_at(fx.sym, pcs, n - 1), "_start");
}

static void test_inline_frames(void **state)
{
	struct inline_frame fr[16];
	uint64_t pcs[MAX_PCS];
	enum unwind_stop stop;
	const char *first;
	size_t n, nf;

	(void)state;
	assert_int_equal(
	    unwinder_unwind(fx.u, &fx.regs, fx.stack, fx.stack_len, pcs, MAX_PCS, &n, &stop), 0);
	assert_true(n >= 4);

	assert_int_equal(unwinder_inline_frames(fx.u, pcs[0], false, fr, 16, &nf), 0);
	for (size_t i = 0; i < nf; i++)
		print_message("  %s%s\n", fr[i].name, fr[i].inlined ? " (inlined)" : "");
	assert_int_equal(nf, 2);
	assert_string_equal(fr[0].name, "d");
	assert_true(fr[0].inlined);
	assert_string_equal(fr[1].name, "c");
	assert_false(fr[1].inlined);

	/* Cached: the same interned strings come back. */
	first = fr[0].name;
	assert_int_equal(unwinder_inline_frames(fx.u, pcs[0], false, fr, 16, &nf), 0);
	assert_ptr_equal(fr[0].name, first);

	/* Too small an array: the innermost entries, and -ENOSPC. */
	assert_int_equal(unwinder_inline_frames(fx.u, pcs[0], false, fr, 1, &nf), -ENOSPC);
	assert_int_equal(nf, 1);
	assert_string_equal(fr[0].name, "d");

	/* Return addresses: nothing inlined at the calls. */
	assert_int_equal(unwinder_inline_frames(fx.u, pcs[1], true, fr, 16, &nf), 0);
	assert_int_equal(nf, 1);
	assert_string_equal(fr[0].name, "b");
	assert_false(fr[0].inlined);
	assert_int_equal(unwinder_inline_frames(fx.u, pcs[3], true, fr, 16, &nf), 0);
	assert_int_equal(nf, 1);
	assert_string_equal(fr[0].name, "main");

	/* libc has no debug info here: no frames, not an error. */
	assert_int_equal(unwinder_inline_frames(fx.u, pcs[n - 2], true, fr, 16, &nf), 0);
	print_message("  %s: %zu inline frames\n", fn_at(fx.sym, pcs, n - 2), nf);

	/* In no module at all. */
	assert_int_equal(unwinder_inline_frames(fx.u, 0x10, false, fr, 16, &nf), 0);
	assert_int_equal(nf, 0);
}

static void test_truncated(void **state)
{
	uint64_t pcs[MAX_PCS];
	enum unwind_stop stop;
	size_t n;

	(void)state;
	assert_int_equal(unwinder_unwind(fx.u, &fx.regs, fx.stack, 64, pcs, MAX_PCS, &n, &stop), 0);
	print_message("  64 bytes: %zu frames, stop %s\n", n, unwind_stop_name(stop));
	assert_int_equal(stop, UNWIND_TRUNCATED_STACK);
	assert_true(n >= 1);
	assert_int_equal(pcs[0], fx.regs.ip);

	/* Nothing captured at all. */
	assert_int_equal(unwinder_unwind(fx.u, &fx.regs, NULL, 0, pcs, MAX_PCS, &n, &stop), 0);
	assert_int_equal(stop, UNWIND_TRUNCATED_STACK);
	assert_int_equal(n, 1);
}

static void test_max_frames(void **state)
{
	uint64_t pcs[MAX_PCS];
	enum unwind_stop stop;
	size_t n;

	(void)state;
	assert_int_equal(unwinder_unwind(fx.u, &fx.regs, fx.stack, fx.stack_len, pcs, 2, &n, &stop),
			 0);
	assert_int_equal(stop, UNWIND_MAX_FRAMES);
	assert_int_equal(n, 2);
}

static void test_garbage(void **state)
{
	struct unwind_regs regs;
	uint64_t pcs[MAX_PCS], seed = 0x9e3779b97f4a7c15ull;
	uint8_t junk[4096] = {0};
	enum unwind_stop stop;
	size_t n, nmaps, counts[UNWIND_ERROR + 1] = {0};
	const struct proc_map *maps;
	uint64_t base = 0;

	(void)state;
	/* A pc in no module. */
	regs = (struct unwind_regs){.ip = 0x1234, .sp = 0xdeadbeef, .bp = 7};
	assert_int_equal(unwinder_unwind(fx.u, &regs, junk, 0, pcs, MAX_PCS, &n, &stop), 0);
	assert_int_equal(n, 1);
	assert_int_equal(stop, UNWIND_UNKNOWN_PC);

	/* A pc in the executable but outside any FDE: its ELF header. */
	maps = symbolizer_maps(fx.sym, &nmaps);
	assert_non_null(maps);
	for (size_t i = 0; i < nmaps && !base; i++)
		if (maps[i].path && strcmp(maps[i].path, fx.bin) == 0 && maps[i].pgoff == 0)
			base = maps[i].start;
	assert_true(base != 0);
	regs = (struct unwind_regs){.ip = base + 0x10, .sp = fx.regs.sp, .bp = 0};
	assert_int_equal(
	    unwinder_unwind(fx.u, &regs, fx.stack, fx.stack_len, pcs, MAX_PCS, &n, &stop), 0);
	assert_int_equal(n, 1);
	assert_int_equal(stop, UNWIND_NO_CFI);

	/*
	 * Real pcs around the capture point on stacks of random words, of words pointing back
	 * into the stack, or of return addresses into c.
	 */
	for (int iter = 0; iter < 2000; iter++) {
		for (size_t i = 0; i < sizeof(junk); i += 8) {
			uint64_t v;

			seed ^= seed << 13;
			seed ^= seed >> 7;
			seed ^= seed << 17;
			v = iter % 2 ? seed : fx.regs.sp + (seed % sizeof(junk));
			if (iter % 3 == 0)
				v = fx.regs.ip + (seed % 64);
			memcpy(junk + i, &v, 8);
		}
		regs = fx.regs;
		if (iter % 5 == 0)
			regs.sp = seed;
		if (iter % 7 == 0)
			regs.ip = fx.regs.ip - 2048 + seed % 4096;
		assert_int_equal(
		    unwinder_unwind(fx.u, &regs, junk, sizeof(junk), pcs, MAX_PCS, &n, &stop), 0);
		assert_true(n >= 1 && n <= MAX_PCS);
		assert_true(stop <= UNWIND_ERROR);
		counts[stop]++;
	}
	print_message("  2000 garbage stacks:");
	for (int s = 0; s <= UNWIND_ERROR; s++)
		if (counts[s])
			print_message(" %s %zu", unwind_stop_name((enum unwind_stop)s), counts[s]);
	print_message("\n");

	assert_int_equal(unwinder_unwind(NULL, &regs, junk, 0, pcs, MAX_PCS, &n, &stop), -EINVAL);
	assert_int_equal(unwinder_unwind(fx.u, &regs, junk, 0, pcs, 0, &n, &stop), -EINVAL);
}

static void test_throughput(void **state)
{
	struct inline_frame fr[16];
	uint64_t pcs[MAX_PCS];
	enum unwind_stop stop;
	size_t n, nf, frames = 0;
	const int iters = 10000;
	double t0, t1;

	(void)state;
	t0 = cpu_ns();
	for (int i = 0; i < iters; i++) {
		assert_int_equal(unwinder_unwind(fx.u, &fx.regs, fx.stack, fx.stack_len, pcs,
						 MAX_PCS, &n, &stop),
				 0);
		assert_int_equal(stop, UNWIND_OK);
		frames += n;
	}
	t1 = cpu_ns();
	print_message("  %d unwinds of %zu frames: %.0f stacks/s, %.2f us/stack, %.0f ns/frame "
		      "(CPU time)\n",
		      iters, frames / iters, iters * 1e9 / (t1 - t0), (t1 - t0) / iters / 1e3,
		      (t1 - t0) / (double)frames);

	t0 = cpu_ns();
	for (int i = 0; i < iters; i++)
		for (size_t j = 0; j < n; j++)
			unwinder_inline_frames(fx.u, pcs[j], j > 0, fr, 16, &nf);
	t1 = cpu_ns();
	print_message("  inline lookups (cached): %.0f ns/pc\n",
		      (t1 - t0) / ((double)iters * (double)n));
}

static void command(char cmd)
{
	char ack;

	assert_int_equal(write(fx.cmd_fd, &cmd, 1), 1);
	assert_int_equal(read_full(fx.out_fd, &ack, 1), 0);
	assert_int_equal(ack, 'y');
}

/*
 * A library mapped later is added to the Dwfl; one unmapped makes a new Dwfl. Names handed out
 * before stay valid.
 */
static void test_maps_change(void **state)
{
	unsigned int gen = unwinder_generation(fx.u);
	size_t nmods = unwinder_nmodules(fx.u), n, nf;
	struct inline_frame fr[16];
	uint64_t pcs[MAX_PCS];
	enum unwind_stop stop;
	const char *d_name;

	(void)state;
	assert_int_equal(unwinder_inline_frames(fx.u, fx.regs.ip, false, fr, 16, &nf), 0);
	assert_int_equal(nf, 2);
	d_name = fr[0].name;

	command('o');
	assert_int_equal(unwinder_refresh(fx.u), 0);
	assert_int_equal(unwinder_nmodules(fx.u), nmods + 1);
	assert_int_equal(unwinder_generation(fx.u), gen);

	command('c');
	assert_int_equal(unwinder_refresh(fx.u), 0);
	assert_int_equal(unwinder_nmodules(fx.u), nmods);
	assert_int_equal(unwinder_generation(fx.u), gen + 1);

	assert_int_equal(
	    unwinder_unwind(fx.u, &fx.regs, fx.stack, fx.stack_len, pcs, MAX_PCS, &n, &stop), 0);
	assert_int_equal(stop, UNWIND_OK);
	assert_string_equal(fn_at(fx.sym, pcs, 3), "main");
	assert_int_equal(unwinder_inline_frames(fx.u, fx.regs.ip, false, fr, 16, &nf), 0);
	assert_int_equal(nf, 2);
	assert_ptr_equal(fr[0].name, d_name);
	assert_string_equal(d_name, "d");
}

/* Through the vDSO: a second fixture spinning on clock_gettime(), sampled with ptrace. */
static void test_vdso(void **state)
{
	static uint8_t stack[CAPTURE_MAX];
	struct unwind_regs regs;
	struct proc_map *maps;
	const struct proc_map *m;
	struct unwinder *u;
	struct symbolizer *s;
	uint64_t pcs[MAX_PCS];
	enum unwind_stop stop;
	size_t nmaps, len, n = 0;
	bool in_vdso = false;
	int fd, out[2], grabs = 0;
	char ready;
	pid_t pid;

	(void)state;
	assert_int_equal(pipe2(out, O_CLOEXEC), 0);
	pid = fx.spin_pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		fd = open("/dev/null", O_RDWR);
		dup2(fd, 0);
		dup2(out[1], 1);
		dup2(fd, 2);
		execl(fx.bin, fx.bin, "spin", (char *)NULL);
		_exit(127);
	}
	close(out[1]);
	/* Spinning, so the maps are final. */
	assert_int_equal(read_full(out[0], &ready, 1), 0);
	close(out[0]);
	u = unwinder_new(pid);
	s = symbolizer_new(pid);
	assert_non_null(u);
	assert_non_null(s);
	assert_int_equal(proc_maps_read(pid, &maps, &nmaps), 0);
	/* The thread is rarely stopped inside the vDSO, and 1000 tries can miss it; each try is a
	 * ptrace stop of ~0.1 ms, so 5000 still take well under a second. */
	for (int tries = 0; tries < 5000 && !in_vdso; tries++) {
		if (grab_thread(pid, pid, &regs, stack, &len) != 0)
			continue;
		grabs++;
		m = proc_maps_find(maps, nmaps, regs.ip);
		in_vdso = m && m->path && strcmp(m->path, "[vdso]") == 0;
	}
	proc_maps_free(maps, nmaps);
	if (!in_vdso) {
		print_message("  never caught in the vDSO in %d samples\n", grabs);
	} else {
		assert_int_equal(unwinder_unwind(u, &regs, stack, len, pcs, MAX_PCS, &n, &stop), 0);
		print_message("  %zu frames, %s\n", n, unwind_stop_name(stop));
		for (size_t i = 0; i < n; i++)
			print_message("    #%zu 0x%llx %s\n", i, (unsigned long long)pcs[i],
				      fn_at(s, pcs, i));
		assert_int_equal(stop, UNWIND_OK);
		for (size_t i = 0; i + 3 < n; i++) {
			if (strcmp(fn_at(s, pcs, i), "c") != 0)
				continue;
			assert_string_equal(fn_at(s, pcs, i + 1), "b");
			assert_string_equal(fn_at(s, pcs, i + 2), "a");
			assert_string_equal(fn_at(s, pcs, i + 3), "main");
			n = 0;
		}
		assert_int_equal(n, 0); /* c was found */
	}
	symbolizer_free(s);
	unwinder_free(u);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	fx.spin_pid = 0;
	assert_true(in_vdso);
}

/* Module state outlives the process: unwinding after it exited still works. */
static void test_after_exit(void **state)
{
	unsigned int gen = unwinder_generation(fx.u);
	size_t nmods = unwinder_nmodules(fx.u), n;
	uint64_t pcs[MAX_PCS];
	enum unwind_stop stop;

	(void)state;
	assert_true(nmods >= 3); /* fixture, libc, ld.so (and the vDSO) */
	assert_int_equal(unwinder_refresh(fx.u), 0);
	assert_int_equal(unwinder_generation(fx.u), gen);
	assert_int_equal(unwinder_nmodules(fx.u), nmods);

	kill(fx.pid, SIGKILL);
	waitpid(fx.pid, NULL, 0);
	fx.pid = 0;
	assert_true(unwinder_refresh(fx.u) < 0);
	assert_int_equal(
	    unwinder_unwind(fx.u, &fx.regs, fx.stack, fx.stack_len, pcs, MAX_PCS, &n, &stop), 0);
	assert_int_equal(stop, UNWIND_OK);
	assert_true(n >= 4);
	assert_int_equal(unwinder_generation(fx.u), gen);
}

/* ---- The Rust demo: a default release build, no frame pointers ---- */

#define DEMO "build/demo-nofp"

static pid_t demo_pid;

static int count_threads(pid_t pid)
{
	char path[64];
	struct dirent *de;
	DIR *dir;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	dir = opendir(path);
	if (!dir)
		return 0;
	while ((de = readdir(dir)))
		n += de->d_name[0] != '.';
	closedir(dir);
	return n;
}

static pid_t start_demo(void)
{
	pid_t pid;
	int fd;

	if (access(DEMO, X_OK) != 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		fd = open("/dev/null", O_WRONLY);
		dup2(fd, 1);
		dup2(fd, 2);
		execl(DEMO, DEMO, "--workers", "2", "--duration", "10", (char *)NULL);
		_exit(127);
	}
	demo_pid = pid;
	/* Up once its workers (main + 2 + the reporter) exist. */
	for (int i = 0; i < 300 && count_threads(pid) < 4; i++)
		usleep(10 * 1000);
	usleep(50 * 1000);
	return pid;
}

static void stop_demo(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	demo_pid = 0;
}

static int teardown_demo(void **state)
{
	(void)state;
	if (demo_pid > 0)
		stop_demo(demo_pid);
	return 0;
}

/* The runtime address of the first function whose mangled name contains needle. */
static uint64_t demo_fn(pid_t pid, const char *needle, uint64_t *size)
{
	struct elf_file *ef;
	const struct elf_sym *syms;
	struct proc_map *maps;
	size_t n, nmaps;
	uint64_t vaddr = 0, off, addr = 0;

	assert_int_equal(elf_file_open(DEMO, &ef), 0);
	syms = elf_file_syms(ef, &n);
	for (size_t i = 0; i < n && !vaddr; i++) {
		if (strstr(syms[i].name, needle)) {
			vaddr = syms[i].addr;
			*size = syms[i].size;
		}
	}
	assert_true(vaddr != 0);
	assert_int_equal(elf_file_vaddr_to_offset(ef, vaddr, &off), 0);
	elf_file_close(ef);

	assert_int_equal(proc_maps_read(pid, &maps, &nmaps), 0);
	for (size_t i = 0; i < nmaps; i++) {
		const struct proc_map *m = &maps[i];

		if (m->path && strstr(m->path, "demo-nofp") && m->perms[2] == 'x' &&
		    off >= m->pgoff && off < m->pgoff + (m->end - m->start))
			addr = m->start + (off - m->pgoff);
	}
	proc_maps_free(maps, nmaps);
	assert_true(addr != 0);
	return addr;
}

static void test_rust_inline(void **state)
{
	struct inline_frame fr[32];
	struct unwinder *u;
	uint64_t addr, size;
	size_t nf, with_inlines = 0, with_frames = 0;
	pid_t pid;
	int err;

	(void)state;
	pid = start_demo();
	if (pid < 0)
		skip();
	u = unwinder_new(pid);
	assert_non_null(u);
	print_message("  %zu modules\n", unwinder_nmodules(u));
	assert_true(unwinder_nmodules(u) >= 3);

	addr = demo_fn(pid, "cpu_kind_work", &size);
	for (uint64_t pc = addr; pc < addr + size; pc++) {
		err = unwinder_inline_frames(u, pc, false, fr, 32, &nf);
		assert_true(err == 0 || err == -ENOSPC);
		if (!nf)
			continue;
		with_frames++;
		assert_string_equal(fr[nf - 1].name, "dial9_demo::cpu_kind_work");
		assert_false(fr[nf - 1].inlined);
		if (nf > 1) {
			if (!with_inlines) {
				print_message("  at +0x%llx:\n", (unsigned long long)(pc - addr));
				for (size_t i = 0; i < nf; i++)
					print_message("    %s%s\n", fr[i].name,
						      fr[i].inlined ? " (inlined)" : "");
			}
			with_inlines++;
			assert_true(fr[0].inlined);
		}
	}
	print_message("  cpu_kind_work: %llu bytes, %zu with frames, %zu with inlined calls\n",
		      (unsigned long long)size, with_frames, with_inlines);
	assert_true(with_frames > 0);
	assert_true(with_inlines > 0);

	/* A closure (the async fn's state machine): names come out demangled. */
	addr = demo_fn(pid, "cpu_kind_task28_$u7b$$u7b$closure", &size);
	err = unwinder_inline_frames(u, addr + size / 2, false, fr, 32, &nf);
	assert_true(err == 0 || err == -ENOSPC);
	for (size_t i = 0; i < nf; i++)
		print_message("    %s%s\n", fr[i].name, fr[i].inlined ? " (inlined)" : "");
	assert_true(nf >= 1);
	assert_non_null(strstr(fr[nf - 1].name, "cpu_kind_task::{{closure}}"));

	unwinder_free(u);
	stop_demo(pid);
}

/* Stacks of the demo's threads: unwound and symbolized after it exited. */
#define DEMO_THREADS_MAX 16

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void test_rust_stacks(void **state)
{
	static struct {
		pid_t tid;
		char comm[32];
		struct unwind_regs regs;
		uint8_t stack[CAPTURE_MAX];
		size_t len;
	} th[DEMO_THREADS_MAX];
	struct inline_frame fr[32];
	struct sym_module sm;
	struct unwinder *u;
	struct symbolizer *s;
	uint64_t pcs[MAX_PCS];
	enum unwind_stop stop;
	struct dirent *de;
	size_t n, nf, nth = 0, workers_ok = 0, iter = 0;
	char path[64];
	double t0, t1, inline_ns[1024], total = 0;
	size_t inline_pcs = 0;
	DIR *dir;
	pid_t pid;

	(void)state;
	pid = start_demo();
	if (pid < 0)
		skip();
	t0 = cpu_ns();
	u = unwinder_new(pid);
	t1 = cpu_ns();
	assert_non_null(u);
	print_message("  unwinder_new: %.2f ms CPU, %zu modules\n", (t1 - t0) / 1e6,
		      unwinder_nmodules(u));
	s = symbolizer_new(pid);
	assert_non_null(s);
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	dir = opendir(path);
	assert_non_null(dir);
	while ((de = readdir(dir)) && nth < DEMO_THREADS_MAX) {
		pid_t tid = atoi(de->d_name);
		FILE *f;

		if (tid <= 0)
			continue;
		th[nth].tid = tid;
		snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", pid, tid);
		f = fopen(path, "r");
		if (!f || !fgets(th[nth].comm, sizeof(th[nth].comm), f))
			th[nth].comm[0] = '\0';
		if (f)
			fclose(f);
		th[nth].comm[strcspn(th[nth].comm, "\n")] = '\0';
		if (grab_thread(pid, tid, &th[nth].regs, th[nth].stack, &th[nth].len) == 0)
			nth++;
	}
	closedir(dir);
	while (symbolizer_next_module(s, &iter, &sm) == 0)
		;
	/* Everything from here on runs on what was captured and the cached modules. */
	stop_demo(pid);

	for (size_t t = 0; t < nth; t++) {
		bool tokio = false, worker = strncmp(th[t].comm, "tokio-runtime-w", 15) == 0;

		t0 = cpu_ns();
		assert_int_equal(unwinder_unwind(u, &th[t].regs, th[t].stack, th[t].len, pcs,
						 MAX_PCS, &n, &stop),
				 0);
		t1 = cpu_ns();
		print_message("  thread %d (%s): %zu frames, %s, %zu bytes captured, first unwind "
			      "%.1f us\n",
			      th[t].tid, th[t].comm, n, unwind_stop_name(stop), th[t].len,
			      (t1 - t0) / 1e3);
		for (size_t i = 0; i < n; i++) {
			const char *name = fn_at(s, pcs, i);
			int err;

			t0 = cpu_ns();
			err = unwinder_inline_frames(u, pcs[i], i > 0, fr, 32, &nf);
			if (inline_pcs < sizeof(inline_ns) / sizeof(inline_ns[0]))
				inline_ns[inline_pcs++] = cpu_ns() - t0;
			assert_true(err == 0 || err == -ENOSPC);
			for (size_t j = 0; j + 1 < nf; j++)
				print_message("    #%-2zu %*s%s (inlined)\n", i, 14, "",
					      fr[j].name);
			print_message("    #%-2zu 0x%012llx %s\n", i, (unsigned long long)pcs[i],
				      name);
			tokio |= strstr(name, "tokio::") != NULL;
		}
		if (worker && stop == UNWIND_OK && tokio && n >= 5)
			workers_ok++;

		if (worker && stop == UNWIND_OK) {
			size_t n2;

			t0 = cpu_ns();
			for (int i = 0; i < 10000; i++)
				unwinder_unwind(u, &th[t].regs, th[t].stack, th[t].len, pcs,
						MAX_PCS, &n2, &stop);
			t1 = cpu_ns();
			print_message(
			    "  10000 unwinds of this stack: %.0f stacks/s, %.2f us/stack, "
			    "%.0f ns/frame (CPU time)\n",
			    1e13 / (t1 - t0), (t1 - t0) / 1e7, (t1 - t0) / 1e4 / (double)n);
		}
	}
	print_message("  %zu threads, %zu Tokio workers unwound to the thread start\n", nth,
		      workers_ok);
	/* The first lookup loads the module's DWARF, the first in each CU indexes it. */
	for (size_t i = 0; i < inline_pcs; i++)
		total += inline_ns[i];
	print_message("  inline lookups of %zu new pcs: %.1f ms, the first %.1f ms", inline_pcs,
		      total / 1e6, inline_ns[0] / 1e6);
	qsort(inline_ns, inline_pcs, sizeof(inline_ns[0]), cmp_double);
	print_message(", median %.1f us (CPU time)\n", inline_ns[inline_pcs / 2] / 1e3);
	assert_true(workers_ok >= 1);
	symbolizer_free(s);
	unwinder_free(u);
}

int main(void)
{
	const struct CMUnitTest fixture_tests[] = {
	    cmocka_unit_test(test_chain),	cmocka_unit_test(test_inline_frames),
	    cmocka_unit_test(test_truncated),	cmocka_unit_test(test_max_frames),
	    cmocka_unit_test(test_garbage),	cmocka_unit_test(test_throughput),
	    cmocka_unit_test(test_maps_change), cmocka_unit_test(test_vdso),
	    cmocka_unit_test(test_after_exit),
	};
	const struct CMUnitTest demo_tests[] = {
	    cmocka_unit_test(test_rust_inline),
	    cmocka_unit_test(test_rust_stacks),
	};
	int failed;

	failed = cmocka_run_group_tests_name("unwind_dwarf_fixture", fixture_tests, setup_fixture,
					     teardown_fixture);
	failed += cmocka_run_group_tests_name("unwind_dwarf_demo", demo_tests, NULL, teardown_demo);
	return failed;
}
