// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* --container matching against /proc/PID/cgroup paths, and cgroup mounts from mountinfo. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <setjmp.h>
#include <cmocka.h>
#include "cgroup_resolve.h"

#define ID64 "3f2a9c1b7d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8"

static void expect_match(const char *path, const char *id, const char *cgroup)
{
	size_t len = 0;

	assert_true(cgroup_path_match(path, id, &len));
	assert_int_equal(len, strlen(cgroup));
	assert_memory_equal(path, cgroup, len);
}

static void expect_no_match(const char *path, const char *id)
{
	size_t len;

	assert_false(cgroup_path_match(path, id, &len));
}

static void test_whole_components(void **state)
{
	(void)state;
	expect_match("/d9test-1/sub", "d9test-1", "/d9test-1");
	expect_match("/a/kubepods/burstable/pod1", "kubepods/burstable", "/a/kubepods/burstable");
	expect_match("/system.slice/api.service", "api.service", "/system.slice/api.service");
	expect_match("/system.slice/api.service", "/system.slice", "/system.slice");
	/* The outermost occurrence: the container's own cgroup, not a namesake inside it. */
	expect_match("/x/app/y/app", "app", "/x/app");
	expect_no_match("/d9test-12/sub", "d9test-1");
	expect_no_match("/xd9test-1", "d9test-1");
	expect_no_match("/d9test-1", "test");
	expect_no_match("/", "/");
	expect_no_match("/a/b", "a/");
	expect_no_match("/a/b", "");
}

static void test_hex_id_prefixes(void **state)
{
	(void)state;
	expect_match("/system.slice/docker-" ID64 ".scope", "3f2a9c1b7d4e",
		     "/system.slice/docker-" ID64 ".scope");
	expect_match("/docker/" ID64 "/init", ID64, "/docker/" ID64);
	expect_match("/kubepods/pod1/cri-containerd-" ID64 ".scope", "3F2A9C",
		     "/kubepods/pod1/cri-containerd-" ID64 ".scope");
	/* Only a prefix of the id, never the middle; only a full 64-digit run counts. */
	expect_no_match("/docker/" ID64, "9c1b7d4e");
	expect_no_match("/docker/3f2a9c1b7d4e", "3f2a9c");
	expect_no_match("/docker/" ID64 "0", "3f2a9c");
	expect_no_match("/docker/" ID64, "3f2a9x");
}

static const char mountinfo[] =
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
    "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n"
    "41 31 0:38 /ctr /sys/fs/cgroup/uni\\040fied rw,relatime - cgroup2 cgroup2 rw\n";

static void with_mountinfo(const char *ctrls, int want, const char *dir, const char *root)
{
	char path[] = "/tmp/d9-mountinfo-XXXXXX", d[PATH_MAX], r[PATH_MAX];
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, mountinfo, sizeof(mountinfo) - 1), sizeof(mountinfo) - 1);
	close(fd);
	assert_int_equal(cgroup_find_mount(path, ctrls, d, sizeof(d), r, sizeof(r)), want);
	unlink(path);
	if (want)
		return;
	assert_string_equal(d, dir);
	assert_string_equal(r, root);
}

static void test_mounts(void **state)
{
	(void)state;
	with_mountinfo(NULL, 0, "/sys/fs/cgroup/uni fied", "/ctr");
	with_mountinfo("cpuacct,cpu", 0, "/sys/fs/cgroup/cpu,cpuacct", "/");
	with_mountinfo("name=systemd", 0, "/sys/fs/cgroup/systemd", "/");
	with_mountinfo("memory", -ENOENT, NULL, NULL);
}

static void expect_ids(const char *path, const char *container, const char *pod)
{
	char c[80], p[40];

	cgroup_path_ids(path, c, sizeof(c), p, sizeof(p));
	assert_string_equal(c, container);
	assert_string_equal(p, pod);
}

/* Labels for --push: docker, containerd (both cgroup drivers) and CRI-O paths. */
static void test_path_ids(void **state)
{
	(void)state;
	expect_ids("/system.slice/docker-" ID64 ".scope", ID64, "");
	expect_ids("/docker/" ID64, ID64, "");
	expect_ids("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b3c4d_"
		   "0000_1111_2222_333344445555.slice/cri-containerd-" ID64 ".scope",
		   ID64, "1a2b3c4d-0000-1111-2222-333344445555");
	expect_ids("/kubepods/besteffort/pod1a2b3c4d-0000-1111-2222-333344445555/" ID64, ID64,
		   "1a2b3c4d-0000-1111-2222-333344445555");
	expect_ids("/user.slice/user-0.slice/session-3.scope", "", "");
	expect_ids("/system.slice/pod-manager.service", "", "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_whole_components),
	    cmocka_unit_test(test_hex_id_prefixes),
	    cmocka_unit_test(test_mounts),
	    cmocka_unit_test(test_path_ids),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
