// SPDX-License-Identifier: GPL-2.0
/*
 * kvshare.ko unload: refused while any file of the device is open (in
 * this process, another open of it, or another process), allowed once all
 * are closed even with idle pools left (the module destroys them), and
 * the module comes back clean.
 *
 * The module is reloaded from $KVS_MODULE (default /lib/modules/kvshare.ko,
 * where the VM's initramfs puts it) so that later suites still find the
 * device.  Run this suite last anyway.
 */
#include <sys/mman.h>
#include <sys/syscall.h>

#include "kvs_test.h"

#define KVS_MODULE_DEFAULT	"/lib/modules/kvshare.ko"

static int unload(void)
{
	return syscall(__NR_delete_module, "kvshare", O_NONBLOCK) ? -errno : 0;
}

#define ASSERT_UNLOAD_REFUSED() do { \
	int __r = unload(); \
	ASSERT_TRUE(__r == -EWOULDBLOCK || __r == -EAGAIN || __r == -EBUSY) \
		TH_LOG("delete_module returned %d", __r); \
} while (0)

/* A fixture only because the 6.1 TEST() wrapper is not -Wextra clean. */
FIXTURE(unload) {
	pid_t child;		/* killed by teardown if the test fails early */
};

FIXTURE_SETUP(unload)
{
	self->child = 0;
}

FIXTURE_TEARDOWN(unload)
{
	if (self->child > 0 && waitpid(self->child, NULL, WNOHANG) == 0) {
		kill(self->child, SIGKILL);
		waitpid(self->child, NULL, 0);
	}
}

TEST_F(unload, refused_while_open_then_reload)
{
	const char *ko = getenv("KVS_MODULE");
	struct kvs_pool_create pc;
	struct kvs_info in1, in2;
	struct kvs_conn c, d, e;
	char reason[192];
	__u32 p[2];
	int kfd, mfd, sync[2];
	char ch = 0;
	long r0, gid;
	pid_t pid;

	if (!kvs_available(reason, sizeof(reason)))
		SKIP(return, "%s", reason);
	c.fd = -1;
	if (!(kvs_conn_caps(&c) & KVS_CAP_MODULE))
		SKIP(return, "the arbiter is not kvshare.ko");
	if (geteuid() != 0)
		SKIP(return, "needs root to unload and load modules");
	if (!ko || !*ko)
		ko = KVS_MODULE_DEFAULT;
	kfd = open(ko, O_RDONLY | O_CLOEXEC);
	if (kfd < 0)
		SKIP(return, "cannot reload the module afterwards: %s: %s", ko, strerror(errno));
	r0 = kvs_module_refcnt();
	if (r0 < 0)
		SKIP(return, "kvshare is not an unloadable module (no /sys/module/kvshare/refcnt)");

	/* One file open: refused, and the file still works. */
	ASSERT_EQ(0, kvs_conn_open(&c));
	ASSERT_EQ(r0 + 1, kvs_module_refcnt());
	ASSERT_UNLOAD_REFUSED();
	ASSERT_EQ(0, kvs_info(&c, &in1));

	/* An attached file with holdings, in a pool with memory. */
	mfd = kvs_pool_memfd(4);
	ASSERT_LE(0, mfd);
	kvs_pool_args(&pc, "", 4);
	snprintf(pc.name, sizeof(pc.name), "unload-%d", (int)getpid());
	pc.mem_fd = mfd;
	ASSERT_EQ(0, kvs_pool_create(&c, &pc));
	close(mfd);
	ASSERT_EQ(0, kvs_attach(&c, pc.name, 0, 0, NULL));
	ASSERT_EQ(0, kvs_alloc(&c, 2, p));
	ASSERT_EQ(0, kvs_publish_chain(&c, p, 1, KVS_NO_PAGE, 1, 0, NULL, NULL));
	ASSERT_UNLOAD_REFUSED();

	/* Two files, then only the second. */
	ASSERT_EQ(0, kvs_conn_open(&d));
	ASSERT_EQ(r0 + 2, kvs_module_refcnt());
	kvs_conn_close(&c);
	ASSERT_EQ(r0 + 1, kvs_module_refcnt());
	ASSERT_UNLOAD_REFUSED();
	kvs_conn_close(&d);

	/* A file open in another process only. */
	ASSERT_EQ(0, pipe(sync));
	pid = fork();
	ASSERT_LE(0, pid);
	self->child = pid;
	if (pid == 0) {
		struct kvs_conn x;

		close(sync[0]);
		KVS_CHILD_EQ(0, kvs_conn_open(&x));
		KVS_CHILD_EQ(0, kvs_attach(&x, pc.name, 0, 0, NULL));
		KVS_CHILD_EQ(0, kvs_alloc(&x, 1, p));
		KVS_CHILD_EQ(0, kvs_sync_write(sync[1], &ch, 1));
		for (;;)
			pause();
	}
	close(sync[1]);
	ASSERT_EQ(0, kvs_sync_read(sync[0], &ch, 1));
	close(sync[0]);
	ASSERT_EQ(r0 + 1, kvs_module_refcnt());
	ASSERT_UNLOAD_REFUSED();
	ASSERT_KILL9(pid);
	self->child = 0;
	ASSERT_EQ(r0, kvs_module_refcnt());

	/* Nothing open: the idle pool does not keep the module. */
	gid = kvs_dev_group();
	ASSERT_LE(0, gid);
	ASSERT_EQ(0, unload());
	ASSERT_NE(0, access("/sys/module/kvshare", F_OK));
	ASSERT_EQ(-ENOENT, kvs_conn_open(&e));

	/* Back, and empty. */
	ASSERT_EQ(0, syscall(__NR_finit_module, kfd, "", 0)) TH_LOG("finit_module: %s", strerror(errno));
	close(kfd);
	/* No udev in the VM: give the new node the old one's group. */
	ASSERT_EQ(0, kvs_dev_set_group(gid));
	ASSERT_EQ(0, kvs_conn_open(&e));
	ASSERT_EQ(0, kvs_info(&e, &in1));
	ASSERT_EQ(KVS_ABI_VERSION, in1.abi_version);
	ASSERT_EQ(0, in1.n_pools);
	ASSERT_EQ(0, kvs_conn_open(&d));
	ASSERT_EQ(0, kvs_info(&e, &in2));
	/* The only objects are the open files themselves: one each. */
	ASSERT_EQ(in1.n_objects, in2.n_objects - in1.n_objects);
	kvs_conn_close(&d);
	/* The pool left behind went with the old module. */
	ASSERT_EQ(-ENOENT, kvs_attach(&e, pc.name, 0, 0, NULL));
	kvs_conn_close(&e);
}

TEST_HARNESS_MAIN
