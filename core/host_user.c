// SPDX-License-Identifier: GPL-2.0
/*
 * The user-space host hooks of the arbiter core: group membership from
 * the credentials the daemon read off its peer, pool memory as a
 * duplicated file descriptor, randomness from getrandom(2).
 */
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>
#include "core_internal.h"

int kvs_host_in_group(const struct kvs_cred *cred, u32 gid)
{
	u32 i;

	if (cred->gid == gid)
		return 1;
	for (i = 0; i < cred->n_groups; i++)
		if (cred->groups[i] == gid)
			return 1;
	return 0;
}

/*
 * Memory is a reference-counted box around a private dup of the fd, so
 * that the pool and every ATTACH that hands it out share one fd.
 */
struct kvs_umem {
	refcount_t ref;
	int fd;
};

/*
 * Pool memory must be a memfd (shmem, or hugetlbfs with MFD_HUGETLB):
 * every attacher gets the same file, so one that could shrink it would
 * make every other mapping fault.  F_GET_SEALS answers only for shmem and
 * hugetlbfs files, and a file on either that was not made by memfd_create()
 * carries F_SEAL_SEAL without F_SEAL_SHRINK, so it is refused below too.
 */
static bool kvs_is_memfd(int fd)
{
	static const char prefix[] = "/memfd:";
	char path[32], link[sizeof(prefix)];
	ssize_t n;

	/*
	 * The module tells a memfd by its kernel-internal mount; user space
	 * sees that mount only in the name the kernel gives the file.  A file
	 * of a mounted tmpfs or hugetlbfs has its path there instead.
	 */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link));
	return n == (ssize_t)sizeof(link) &&
	       !memcmp(link, prefix, sizeof(prefix) - 1);
}

static int kvs_mem_check(int fd, u64 bytes)
{
	struct statfs sfs;
	struct stat st;
	int seals;

	if (fcntl(fd, F_GETFD) < 0)
		return -EBADF;
	/*
	 * F_GET_SEALS first: it calls into no file system, and refuses all
	 * but shmem and hugetlbfs, so that fstatfs() and fstat() never reach
	 * one a client serves (FUSE), which need never answer.
	 */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0)
		return -EINVAL;
	if (fstatfs(fd, &sfs))
		return -EINVAL;
	if (sfs.f_type != TMPFS_MAGIC &&
	    sfs.f_type != (typeof(sfs.f_type))HUGETLBFS_MAGIC)
		return -EINVAL;
	if (!kvs_is_memfd(fd))
		return -EINVAL;
	/* As the module's kvs_mem_seals_ok(): see there. */
	if ((seals & KVS_MEM_SEALS_REQUIRED) != KVS_MEM_SEALS_REQUIRED ||
	    (seals & KVS_MEM_SEALS_FORBIDDEN))
		return -EPERM;
	/* Sealed first, measured after: the size can only have grown since. */
	if (fstat(fd, &st) || !S_ISREG(st.st_mode))
		return -EINVAL;
	if ((u64)st.st_size < bytes)
		return -ERANGE;
	return 0;
}

/* Whether readlink(/proc/self/fd/@fd) starts with @prefix. */
static bool kvs_fd_link_is(int fd, const char *prefix)
{
	char path[32], link[64];
	size_t len = strlen(prefix);
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link));
	return n >= (ssize_t)len && !memcmp(link, prefix, len);
}

/*
 * Device memory (KVS_POOL_DEVICE_MEM), as the module's kvs_device_mem_check():
 * accepted by exclusion, since what file a driver exports is the driver's
 * business.  Refused: sockets (a descriptor in flight through one could
 * hold the arbiter), pipes (a client holding the pipe's lock through a
 * copy from a page of its FUSE file would hold the release), directories, io_uring files, a kvshare device file
 * (a pool holding its own arbiter), and regular files other than memfds;
 * a memfd (the test stand-in's handles) must pass the host-memory rules.
 * An O_PATH descriptor is refused as the kernel's fget() refuses it.
 */
static int kvs_device_mem_check(int fd, u64 bytes)
{
	struct statx stx;
	struct stat dev;
	int fl = fcntl(fd, F_GETFL);

	/* The type as the kernel knows it: fstat() may wait on a FUSE server. */
	if (fl < 0 || (fl & O_PATH) ||
	    statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_TYPE, &stx))
		return -EBADF;
	if (S_ISSOCK(stx.stx_mode) || S_ISDIR(stx.stx_mode) || S_ISFIFO(stx.stx_mode))
		return -EINVAL;
	if (S_ISREG(stx.stx_mode))
		return kvs_mem_check(fd, bytes);
	if (kvs_fd_link_is(fd, "anon_inode:[io_uring]"))
		return -EINVAL;
	if (S_ISCHR(stx.stx_mode) && !stat("/dev/" KVS_DEVICE_NAME, &dev) &&
	    S_ISCHR(dev.st_mode) &&
	    dev.st_rdev == makedev(stx.stx_rdev_major, stx.stx_rdev_minor))
		return -EINVAL;
	return 0;
}

int kvs_host_mem_get(int fd, u64 bytes, enum kvs_mem_kind kind, void **mem)
{
	struct kvs_umem *m;
	int dup_fd, ret;

	if (kind == KVS_MEM_DEVICE)
		ret = kvs_device_mem_check(fd, bytes);
	else
		ret = kvs_mem_check(fd, bytes);
	if (ret)
		return ret;
	dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (dup_fd < 0)
		return errno == EBADF ? -EBADF : -EMFILE;
	m = kzalloc(sizeof(*m), GFP_KERNEL);
	if (!m) {
		close(dup_fd);
		return -ENOMEM;
	}
	refcount_set(&m->ref, 1);
	m->fd = dup_fd;
	*mem = m;
	return 0;
}

void kvs_host_mem_dup(void *mem)
{
	refcount_inc(&((struct kvs_umem *)mem)->ref);
}

void kvs_host_mem_put(void *mem)
{
	struct kvs_umem *m = mem;

	if (refcount_dec_and_test(&m->ref)) {
		close(m->fd);
		kfree(m);
	}
}

int kvs_host_mem_fd(void *mem)
{
	return ((struct kvs_umem *)mem)->fd;
}

u64 kvs_host_random(void)
{
	u64 r = 0;

	if (getrandom(&r, sizeof(r), 0) != sizeof(r))
		r = (u64)(uintptr_t)&r ^ 0x5bd1e995u;
	return r;
}
