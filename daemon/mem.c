// SPDX-License-Identifier: GPL-2.0
/*
 * Host memory for pools: a memfd, optionally on hugetlbfs.
 *
 * The memfd is sized to n_pages * page_bytes (rounded up to the huge page
 * size for hugetlb) and sealed against shrinking and growing, so that no
 * attacher can truncate it under the others (they would take SIGBUS).
 * The arbiter (module and core alike) refuses memory without
 * F_SEAL_SHRINK, so a memfd that cannot be sealed (hugetlbfs before Linux
 * 4.16) fails the pool here, with the reason, rather than at CREATE.
 * Ordinary memfd pages are allocated on first touch; hugetlb pages are
 * allocated now with fallocate(), because a hugetlb mapping that cannot
 * be backed fails only at fault time, in some client, with SIGBUS.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include "kvshared.h"

/* The default huge page size, from /proc/meminfo; 2 MiB if unreadable. */
static uint64_t huge_page_bytes(void)
{
	unsigned long long kb = 0;
	char line[256];
	FILE *f = fopen("/proc/meminfo", "re");

	if (f) {
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "Hugepagesize: %llu kB", &kb) == 1)
				break;
		fclose(f);
	}
	return kb ? kb << 10 : 2ull << 20;
}

static int round_up(uint64_t bytes, uint64_t align, uint64_t *out)
{
	if (bytes > UINT64_MAX - (align - 1))
		return -EOVERFLOW;
	*out = (bytes + align - 1) / align * align;
	return 0;
}

/* 0, or -errno with the reason in @err. */
static int seal_size(int fd, bool huge, char *err, size_t err_len)
{
	int ret;

	if (!fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL))
		return 0;
	ret = -errno;
	snprintf(err, err_len, "sealing the memfd%s against resizing: %s (the "
		 "arbiter takes only memory sealed with F_SEAL_SHRINK%s)",
		 huge ? " (MFD_HUGETLB)" : "", strerror(errno),
		 huge ? "; hugetlbfs memfds can be sealed from Linux 4.16" : "");
	return ret;
}

static int memfd_pool(const struct kvsd_pool_cfg *pc, uint64_t bytes,
		      bool huge, struct kvsd_mem *mem, char *err, size_t err_len)
{
	unsigned int flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
	char name[KVS_NAME_MAX + 16];
	int fd, ret;

	mem->align = huge ? huge_page_bytes() : (uint64_t)sysconf(_SC_PAGESIZE);
	if (round_up(bytes, mem->align, &mem->bytes) || (off_t)mem->bytes < 0) {
		snprintf(err, err_len, "%llu bytes is too large",
			 (unsigned long long)bytes);
		return -EOVERFLOW;
	}
	if (huge)
		flags |= MFD_HUGETLB;
	snprintf(name, sizeof(name), "kvshare:%s", pc->name);
	fd = memfd_create(name, flags);
	if (fd < 0) {
		ret = -errno;
		/* Kernels before 4.16 refuse MFD_ALLOW_SEALING with MFD_HUGETLB. */
		snprintf(err, err_len, "memfd_create%s: %s%s",
			 huge ? " (MFD_HUGETLB | MFD_ALLOW_SEALING)" : "",
			 strerror(errno), huge && errno == EINVAL ?
			 " (hugetlbfs memfds can be sealed from Linux 4.16; the "
			 "arbiter takes only sealed memory)" : "");
		return ret;
	}
	if (ftruncate(fd, mem->bytes)) {
		ret = -errno;
		snprintf(err, err_len, "ftruncate to %llu bytes: %s",
			 (unsigned long long)mem->bytes, strerror(errno));
		close(fd);
		return ret;
	}
	if (huge && fallocate(fd, 0, 0, mem->bytes)) {
		ret = -errno;
		snprintf(err, err_len,
			 "cannot reserve %llu huge pages of %llu KiB: %s "
			 "(see /proc/sys/vm/nr_hugepages)",
			 (unsigned long long)(mem->bytes / mem->align),
			 (unsigned long long)(mem->align >> 10), strerror(errno));
		close(fd);
		return ret;
	}
	ret = seal_size(fd, huge, err, err_len);
	if (ret) {
		close(fd);
		return ret;
	}
	mem->fd = fd;
	return 0;
}

int kvsd_mem_create(const struct kvsd_pool_cfg *pc, uint64_t page_bytes,
		    struct kvsd_mem *mem, char *err, size_t err_len)
{
	uint64_t bytes = pc->n_pages * page_bytes;	/* <= 2^22 * 2^30 */

	mem->fd = -1;
	mem->bytes = 0;
	mem->align = 0;
	switch (pc->mem) {
	case KVSD_MEM_NONE:
		return 0;
	case KVSD_MEM_HOST:
		return memfd_pool(pc, bytes, false, mem, err, err_len);
	case KVSD_MEM_HUGETLB:
		return memfd_pool(pc, bytes, true, mem, err, err_len);
	case KVSD_MEM_CUDA:
		return kvsd_cuda_create(pc, bytes, mem, err, err_len);
	}
	snprintf(err, err_len, "unknown memory kind");
	return -EINVAL;
}

void kvsd_mem_close(struct kvsd_mem *mem)
{
	if (mem->fd >= 0)
		close(mem->fd);
	mem->fd = -1;
}
