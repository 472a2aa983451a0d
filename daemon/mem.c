// SPDX-License-Identifier: GPL-2.0
/*
 * Host memory for pools: a memfd, optionally on hugetlbfs, made by
 * libkv's kv_pool_memfd() (the one creator of pool memory).
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

#include <kvshare/arbiter.h>

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

static int memfd_pool(const struct kvsd_pool_cfg *pc, uint64_t bytes,
		      bool huge, struct kvsd_mem *mem, char *err, size_t err_len)
{
	char name[KVS_NAME_MAX + 16];
	int fd;

	mem->align = huge ? huge_page_bytes() : (uint64_t)sysconf(_SC_PAGESIZE);
	if (round_up(bytes, mem->align, &mem->bytes) || (off_t)mem->bytes < 0) {
		snprintf(err, err_len, "%llu bytes is too large",
			 (unsigned long long)bytes);
		return -EOVERFLOW;
	}
	snprintf(name, sizeof(name), "kvshare:%s", pc->name);
	fd = kv_pool_memfd(name, mem->bytes, huge ? KV_MEMFD_HUGETLB : 0,
			   err, err_len);
	if (fd < 0)
		return fd;
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
