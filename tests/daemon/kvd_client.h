/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The client side of the daemon tests, over libkv and a raw socket, for
 * tests that start their kvshared with kvd_test.h:
 *
 *   kvd_start_ctl(&d, args, pool, &ctl, &id, why, len)
 *                         kvshared started, a control handle (socket only,
 *                         never attached) and the id of @pool on it
 *   kvd_stop_ctl(&d, kid, ctl, why, len)
 *                         the other way round, judged as kvd_stop() does
 *   kvd_pool_id(), kvd_open_attached(), kvd_raw_send()
 *   kvd_wait_readable()   poll() for POLLIN, bounded
 *   kvd_fd_kind()         what a doorbell is: "eventfd", "socket", "pipe"
 *   kvd_stuck_page(), kvd_wait_fault()
 *                         a page whose first touch never completes, as on
 *                         a FUSE mount that does not answer, and the
 *                         proof that someone is stuck on it
 *   kvd_read_into()       a thread's one-byte read into such a page
 *
 * Nothing here asserts, as in kvd_test.h.
 */
#ifndef KVD_CLIENT_H
#define KVD_CLIENT_H

#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include <kvshare/arbiter.h>

#include "kvd_test.h"
#include "../send_fds.h"

/* The id of pool @name on @a, or 0. */
static inline __u32 kvd_pool_id(struct kv_arbiter *a, const char *name)
{
	struct kvs_pool_desc d[16];
	struct kvs_pool_list l;
	__u32 i;

	memset(&l, 0, sizeof(l));
	l.count = 16;
	l.pools = (uintptr_t)d;
	if (kv_arbiter_call(a, KVS_IOC_POOL_LIST, &l))
		return 0;
	for (i = 0; i < l.count && i < 16; i++)
		if (!strcmp(d[i].name, name))
			return d[i].pool_id;
	return 0;
}

/* A handle on @sock attached to root's pool @name; *@a is NULL on failure. */
static inline int kvd_open_attached(const char *sock, const char *name, unsigned int flags,
				    struct kv_arbiter **a)
{
	int ret = kv_arbiter_open(sock, flags, a);

	if (ret)
		return ret;
	ret = kv_arbiter_attach(*a, name, 0, NULL);
	if (ret) {
		kv_arbiter_close(*a);
		*a = NULL;
	}
	return ret;
}

/* @len bytes of @buf on @fd in one sendmsg(), with descriptor @pass_fd unless -1. */
static inline int kvd_raw_send(int fd, const void *buf, size_t len, int pass_fd)
{
	ssize_t n = test_send_fds(fd, buf, len, &pass_fd, pass_fd >= 0, 0);

	if (n == (ssize_t)len)
		return 0;
	return n < 0 ? (int)n : -EIO;
}

/* 1 if @fd is readable within @ms, else 0. */
static inline int kvd_wait_readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* What @fd is, by its /proc/self/fd link: "eventfd", "socket", "pipe" or "other". */
static inline const char *kvd_fd_kind(int fd)
{
	char path[64], link[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n < 0)
		return "none";
	link[n] = '\0';
	if (!strcmp(link, "anon_inode:[eventfd]"))
		return "eventfd";
	if (!strncmp(link, "socket:[", 8))
		return "socket";
	if (!strncmp(link, "pipe:[", 6))
		return "pipe";
	return "other";
}

/*
 * A page whose first touch never completes: anonymous memory registered
 * with a userfaultfd (in *@uffd) that nobody resolves, the stand-in for
 * a page of a file on a FUSE mount that never answers.  Made as root:
 * faults taken inside the kernel (copy_to_user) need CAP_SYS_PTRACE
 * unless vm.unprivileged_userfaultfd is set; the page stays stuck after
 * a setuid().  The page, or NULL.
 */
static inline void *kvd_stuck_page(int *uffd)
{
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };
	void *p;

	*uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (*uffd < 0)
		return NULL;
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	reg.range.start = (uintptr_t)p;
	reg.range.len = 4096;
	if (ioctl(*uffd, UFFDIO_API, &api) || ioctl(*uffd, UFFDIO_REGISTER, &reg))
		return NULL;
	return p;
}

/* Wait (at most @ms) until a thread faults on @uffd's page: 0, else -ETIMEDOUT. */
static inline int kvd_wait_fault(int uffd, int ms)
{
	struct pollfd p = { .fd = uffd, .events = POLLIN };
	struct uffd_msg m;

	if (poll(&p, 1, ms) != 1 || read(uffd, &m, sizeof(m)) != sizeof(m) ||
	    m.event != UFFD_EVENT_PAGEFAULT)
		return -ETIMEDOUT;
	return 0;
}

/*
 * kvd_start() with @args, then a control handle (no shared ring, whose
 * bytes count against the daemon's budget) and the id of pool @pool.
 * 0, or -errno (-ENOENT: no such pool) with why in @why and nothing left
 * running: no teardown follows a failed fixture setup.
 */
static inline int kvd_start_ctl(struct kvd *d, const char *const *args, const char *pool,
				struct kv_arbiter **ctl, __u32 *pool_id, char *why, size_t len)
{
	int ret;

	*ctl = NULL;
	*pool_id = 0;
	ret = kvd_start(d, args, why, len);
	if (!ret)
		ret = kv_arbiter_open(d->sock, KV_ARBITER_NO_URING, ctl);
	if (!ret) {
		*pool_id = kvd_pool_id(*ctl, pool);
		if (!*pool_id) {
			snprintf(why, len, "pool '%s' not listed", pool);
			ret = -ENOENT;
		}
	}
	if (ret) {
		if (!why[0])
			snprintf(why, len, "%s", strerror(-ret));
		if (*ctl)
			kv_arbiter_close(*ctl);
		*ctl = NULL;
		d->failed = 1;
		kvd_fini(d);
	}
	return ret;
}

/*
 * The end of a test: SIGKILL its child @kid (0: none), SIGCONT a daemon
 * the test stopped, close @ctl, then kvd_stop(): 0 if kvshared ended well.
 */
static inline int kvd_stop_ctl(struct kvd *d, pid_t kid, struct kv_arbiter *ctl,
			       char *why, size_t len)
{
	if (kid > 0) {
		kill(kid, SIGKILL);
		waitpid(kid, NULL, 0);
	}
	if (d->pid > 0)
		kill(d->pid, SIGCONT);
	if (ctl)
		kv_arbiter_close(ctl);
	why[0] = '\0';
	return kvd_stop(d, why, len);
}

/*
 * A read of one byte from @fd into @page, in a thread of its own
 * (pthread_create(..., kvd_read_into, &r)): with kvd_stuck_page(), a
 * reader that stays inside the read.
 */
struct kvd_stuck_read {
	int fd;
	void *page;
};

static inline void *kvd_read_into(void *arg)
{
	struct kvd_stuck_read *r = arg;

	if (read(r->fd, r->page, 1) < 0)
		return NULL;
	return r;
}

#endif
