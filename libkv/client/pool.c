// SPDX-License-Identifier: MIT
/*
 * A pool as an engine sees it: attached through either arbiter, its memory
 * mapped shared, a page index turned into an address.  The layout inside a
 * page is the attention code's business; here a page is page_bytes long
 * and pages are laid out back to back.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arbiter_internal.h"
#include "pool_cuda.h"

struct kv_pool {
	struct kv_arbiter *arb;
	struct kvs_pool_attach info;
	void *base;
	size_t size;
	struct kv_cuda_map cuda;	/* KVS_POOL_DEVICE_MEM pools */
};

/*
 * The arbiter refuses pool memory that is not a memfd sealed as
 * KVS_MEM_SEALS_* say and as long as the pool; check again before mapping, because
 * a mapping past the end of a file that shrank faults (SIGBUS) on the
 * first touch, and a library should fail here with an errno instead.
 */
static int kv_pool_check_mem(int fd, size_t size)
{
	struct stat st;
	int seals;

	if (fstat(fd, &st))
		return -errno;
	/* Not a file to mmap (device memory comes as KVS_POOL_DEVICE_MEM). */
	if (!S_ISREG(st.st_mode))
		return -ENODEV;
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0)
		return -EINVAL;		/* not a memfd: it cannot be sealed */
	if ((seals & KVS_MEM_SEALS_REQUIRED) != KVS_MEM_SEALS_REQUIRED ||
	    (seals & KVS_MEM_SEALS_FORBIDDEN))
		return -EPERM;
	if ((uint64_t)st.st_size < size)
		return -ERANGE;
	return 0;
}

static int kv_pool_map(struct kv_pool *pool)
{
	size_t size;
	void *base;
	int ret;

	if (__builtin_mul_overflow(pool->info.n_pages, pool->info.geom.page_bytes, &size))
		return -EOVERFLOW;
	/* An arbiter that answered KVS_ATTACH_MEM_FD without an fd. */
	if (pool->info.mem_fd < 0)
		return -ENODATA;
	if (pool->info.pool_flags & KVS_POOL_DEVICE_MEM) {
		/* A driver handle: imported and mapped on the device. */
		ret = kv_cuda_map(pool->info.mem_fd, size, &pool->cuda);
		if (ret)
			return ret;
		pool->base = (void *)(uintptr_t)pool->cuda.ptr;
		pool->size = size;
		return 0;
	}
	ret = kv_pool_check_mem(pool->info.mem_fd, size);
	if (ret)
		return ret;
	base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED,
		    pool->info.mem_fd, 0);
	if (base == MAP_FAILED)
		return -errno;
	pool->base = base;
	pool->size = size;
	return 0;
}

/* @owner NULL: the default owner of the handle (kv_arbiter_attach()). */
static int kv_pool_open_as(const char *arbiter, const uint32_t *owner,
			   const char *name, uint64_t ns, unsigned int flags,
			   struct kv_pool **out)
{
	struct kv_pool *pool = calloc(1, sizeof(*pool));
	int ret;

	if (!pool)
		return -ENOMEM;
	pool->info.mem_fd = -1;
	ret = kv_arbiter_open(arbiter, flags, &pool->arb);
	if (ret)
		goto fail;
	pool->info.flags = KVS_ATTACH_MEM_FD;
	if (owner)
		ret = kv_arbiter_attach_owner(pool->arb, *owner, name, ns, &pool->info);
	else
		ret = kv_arbiter_attach(pool->arb, name, ns, &pool->info);
	if (ret)
		goto fail;
	ret = kv_pool_map(pool);
	if (ret)
		goto fail;
	*out = pool;
	return 0;
fail:
	kv_pool_close(pool);
	return ret;
}

int kv_pool_open_owner(const char *arbiter, uint32_t owner, const char *name,
		       uint64_t ns, unsigned int flags, struct kv_pool **out)
{
	return kv_pool_open_as(arbiter, &owner, name, ns, flags, out);
}

int kv_pool_open(const char *arbiter, const char *name, uint64_t ns,
		 unsigned int flags, struct kv_pool **out)
{
	return kv_pool_open_as(arbiter, NULL, name, ns, flags, out);
}

void kv_pool_close(struct kv_pool *pool)
{
	if (!pool)
		return;
	if (pool->info.pool_flags & KVS_POOL_DEVICE_MEM)
		kv_cuda_unmap(&pool->cuda);
	else if (pool->base)
		munmap(pool->base, pool->size);
	if (pool->info.mem_fd >= 0)
		close(pool->info.mem_fd);
	kv_arbiter_close(pool->arb);
	free(pool);
}

struct kv_arbiter *kv_pool_arbiter(struct kv_pool *pool)
{
	return pool->arb;
}

const struct kvs_pool_attach *kv_pool_info(const struct kv_pool *pool)
{
	return &pool->info;
}

void *kv_page_addr(const struct kv_pool *pool, uint32_t page)
{
	if (page >= pool->info.n_pages)
		return NULL;
	return (char *)pool->base + (size_t)page * pool->info.geom.page_bytes;
}

int kv_pool_is_device(const struct kv_pool *pool)
{
	return !!(pool->info.pool_flags & KVS_POOL_DEVICE_MEM);
}

int kv_pool_device(const struct kv_pool *pool)
{
	return kv_pool_is_device(pool) ? pool->cuda.dev : -1;
}
