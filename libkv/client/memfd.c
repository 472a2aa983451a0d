// SPDX-License-Identifier: MIT
/*
 * Sealed host memory for pools (<kvshare/arbiter.h>: kv_pool_memfd()),
 * the one creator kvshared, kvctl and the Python extension share.  Its
 * own object file, so that kvshared, which links nothing else of libkv,
 * pulls in only this.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include <kvshare/arbiter.h>

#define KV_SEALS	(F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

static int kv_memfd_fail(int fd, char *err, size_t err_len, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Close @fd (if open) and say why, keeping errno's value: -errno. */
static int kv_memfd_fail(int fd, char *err, size_t err_len, const char *fmt, ...)
{
	int ret = -errno;
	va_list ap;

	if (err && err_len) {
		va_start(ap, fmt);
		vsnprintf(err, err_len, fmt, ap);
		va_end(ap);
	}
	if (fd >= 0)
		close(fd);
	return ret;
}

int kv_pool_memfd(const char *name, uint64_t bytes, unsigned int flags,
		  char *err, size_t err_len)
{
	unsigned int mfd = MFD_CLOEXEC | MFD_ALLOW_SEALING;
	bool huge = flags & KV_MEMFD_HUGETLB;
	int fd;

	if ((flags & ~KV_MEMFD_HUGETLB) || !bytes || (off_t)bytes < 0) {
		errno = EINVAL;
		return kv_memfd_fail(-1, err, err_len, "memory of %llu bytes%s: %s",
				     (unsigned long long)bytes,
				     flags & ~KV_MEMFD_HUGETLB ? " (unknown flags)" : "",
				     "invalid size or flags");
	}
	if (huge)
		mfd |= MFD_HUGETLB;
	fd = memfd_create(name, mfd);
	if (fd < 0)
		/* Kernels before 4.16 refuse MFD_ALLOW_SEALING with MFD_HUGETLB. */
		return kv_memfd_fail(-1, err, err_len, "memfd_create%s: %s%s",
				     huge ? " (MFD_HUGETLB | MFD_ALLOW_SEALING)" : "",
				     strerror(errno), huge && errno == EINVAL ?
				     " (hugetlbfs memfds can be sealed from Linux 4.16; "
				     "the arbiter takes only sealed memory)" : "");
	if (ftruncate(fd, (off_t)bytes))
		return kv_memfd_fail(fd, err, err_len, "ftruncate to %llu bytes: %s",
				     (unsigned long long)bytes, strerror(errno));
	if (huge && fallocate(fd, 0, 0, (off_t)bytes))
		return kv_memfd_fail(fd, err, err_len,
				     "cannot reserve %llu bytes of huge pages: %s "
				     "(see /proc/sys/vm/nr_hugepages)",
				     (unsigned long long)bytes, strerror(errno));
	if (fcntl(fd, F_ADD_SEALS, KV_SEALS))
		return kv_memfd_fail(fd, err, err_len,
				     "sealing the memfd%s against resizing: %s (the "
				     "arbiter takes only memory sealed with F_SEAL_SHRINK%s)",
				     huge ? " (MFD_HUGETLB)" : "", strerror(errno),
				     huge ? "; hugetlbfs memfds can be sealed from Linux 4.16" : "");
	return fd;
}
