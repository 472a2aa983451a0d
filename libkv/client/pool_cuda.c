// SPDX-License-Identifier: MIT
/*
 * Device memory of a pool (KVS_POOL_DEVICE_MEM): a CUDA VMM allocation the
 * arbiter hands over as a POSIX-fd handle, imported and mapped on the
 * client's device (research/gpu.md section 2.2):
 *
 *   cuMemImportFromShareableHandle(fd, POSIX_FD) -> handle;
 *   cuMemGetAllocationPropertiesFromHandle -> the device it lives on;
 *   cuMemGetAllocationGranularity; size = round_up(pool bytes, granularity);
 *   cuMemAddressReserve; cuMemMap; cuMemSetAccess(READWRITE on that device).
 *
 * Undone in reverse (cuMemUnmap, cuMemAddressFree, cuMemRelease) at close
 * and on every error path, so that a failed open leaves nothing mapped or
 * held.  The mapping holds the memory by itself (the driver frees an
 * allocation when its last handle and mapping go), so it stays valid when
 * the daemon that exported it exits, until kv_pool_close().
 *
 * The driver is loaded at run time (dlopen of libcuda.so.1, as kvshared
 * does), so libkv needs no GPU, no driver and no CUDA library to link or
 * to run host pools; a device pool on a machine without the driver fails
 * with -ENODEV.  The tests put a stand-in of the driver first in
 * LD_LIBRARY_PATH (tests/gpu/cudastub); kv_cuda_driver() tells it apart by
 * a symbol only it has, so that nobody runs CUDA kernels on it.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cuda.h>

#include "pool_cuda.h"

#define KV_LIBCUDA	"libcuda.so.1"

#define KV_CU_FNS(X)					\
	X(cuGetErrorName)				\
	X(cuInit)					\
	X(cuDevicePrimaryCtxRetain)			\
	X(cuDevicePrimaryCtxRelease)			\
	X(cuMemImportFromShareableHandle)		\
	X(cuMemGetAllocationPropertiesFromHandle)	\
	X(cuMemGetAllocationGranularity)		\
	X(cuMemAddressReserve)				\
	X(cuMemAddressFree)				\
	X(cuMemMap)					\
	X(cuMemUnmap)					\
	X(cuMemSetAccess)				\
	X(cuMemRelease)

#define KV_CU_STR_(x)	#x
#define KV_CU_STR(x)	KV_CU_STR_(x)
#define KV_CU_PTR(fn)	__typeof__(fn) *fn;
#define KV_CU_SYM(fn)	{ KV_CU_STR(fn), offsetof(struct kv_cu_api, fn) },

static struct kv_cu_api {
	KV_CU_FNS(KV_CU_PTR)
} cu;

static const struct {
	const char *name;
	size_t off;
} kv_cu_syms[] = {
	KV_CU_FNS(KV_CU_SYM)
};

static pthread_once_t kv_cu_once = PTHREAD_ONCE_INIT;
static int kv_cu_state;		/* 1 real driver, 0 stand-in, -errno unusable */
static char kv_cu_why[160];
static __thread char kv_cu_err[256];

const char *kv_cuda_last_error(void)
{
	return kv_cu_err;
}

static const char *kv_cu_name(CUresult r)
{
	const char *s = NULL;

	if (cu.cuGetErrorName && cu.cuGetErrorName(r, &s) == CUDA_SUCCESS && s)
		return s;
	return "unknown CUDA error";
}

static void kv_cu_load(void)
{
	void *lib = dlopen(KV_LIBCUDA, RTLD_NOW | RTLD_LOCAL);
	CUresult r;
	size_t i;

	kv_cu_state = -ENODEV;
	if (!lib) {
		snprintf(kv_cu_why, sizeof(kv_cu_why), "no CUDA driver (%s)", dlerror());
		return;
	}
	for (i = 0; i < sizeof(kv_cu_syms) / sizeof(kv_cu_syms[0]); i++) {
		void *p = dlsym(lib, kv_cu_syms[i].name);

		if (!p) {
			snprintf(kv_cu_why, sizeof(kv_cu_why), "CUDA driver too old "
				 "(%s lacks %s)", KV_LIBCUDA, kv_cu_syms[i].name);
			return;
		}
		memcpy((char *)&cu + kv_cu_syms[i].off, &p, sizeof(p));
	}
	r = cu.cuInit(0);
	if (r != CUDA_SUCCESS) {
		snprintf(kv_cu_why, sizeof(kv_cu_why), "cuInit: %s", kv_cu_name(r));
		return;
	}
	/* The lib stays loaded for the process: mappings outlive any pool. */
	kv_cu_state = dlsym(lib, "kvs_cudastub_counts") ? 0 : 1;
}

int kv_cuda_driver(void)
{
	pthread_once(&kv_cu_once, kv_cu_load);
	if (kv_cu_state < 0)
		snprintf(kv_cu_err, sizeof(kv_cu_err), "%s", kv_cu_why);
	return kv_cu_state;
}

static int kv_cu_errno(CUresult r)
{
	switch (r) {
	case CUDA_ERROR_OUT_OF_MEMORY:
		return -ENOMEM;
	case CUDA_ERROR_INVALID_VALUE:
	case CUDA_ERROR_INVALID_HANDLE:
		return -EINVAL;
	case CUDA_ERROR_NOT_SUPPORTED:
		return -EOPNOTSUPP;
	case CUDA_ERROR_NOT_PERMITTED:
		return -EPERM;
	case CUDA_ERROR_INVALID_DEVICE:
	case CUDA_ERROR_NO_DEVICE:
		return -ENODEV;
	default:
		return -EIO;
	}
}

static int kv_cu_fail(const char *what, CUresult r)
{
	snprintf(kv_cu_err, sizeof(kv_cu_err), "%s: %s", what, kv_cu_name(r));
	return kv_cu_errno(r);
}

void kv_cuda_unmap(struct kv_cuda_map *m)
{
	if (m->mapped)
		cu.cuMemUnmap(m->ptr, m->size);
	if (m->ptr)
		cu.cuMemAddressFree(m->ptr, m->size);
	if (m->handle)
		cu.cuMemRelease(m->handle);
	if (m->ctx)
		cu.cuDevicePrimaryCtxRelease(m->dev);
	memset(m, 0, sizeof(*m));
}

int kv_cuda_map(int fd, size_t bytes, struct kv_cuda_map *m)
{
	CUmemGenericAllocationHandle h = 0;
	CUmemAllocationProp prop;
	CUmemAccessDesc access;
	CUcontext ctx;
	size_t gran = 0;
	CUresult r;
	int ret;

	memset(m, 0, sizeof(*m));
	ret = kv_cuda_driver();
	if (ret < 0)
		return ret;
	r = cu.cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
					      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (r != CUDA_SUCCESS)
		return kv_cu_fail("cuMemImportFromShareableHandle", r);
	m->handle = h;
	r = cu.cuMemGetAllocationPropertiesFromHandle(&prop, h);
	if (r != CUDA_SUCCESS) {
		ret = kv_cu_fail("cuMemGetAllocationPropertiesFromHandle", r);
		goto fail;
	}
	m->dev = prop.location.id;
	/* Kernels run in the primary context; keep it while mapped. */
	r = cu.cuDevicePrimaryCtxRetain(&ctx, m->dev);
	if (r != CUDA_SUCCESS) {
		ret = kv_cu_fail("cuDevicePrimaryCtxRetain", r);
		goto fail;
	}
	m->ctx = 1;
	r = cu.cuMemGetAllocationGranularity(&gran, &prop,
					     CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (r != CUDA_SUCCESS || !gran) {
		ret = r ? kv_cu_fail("cuMemGetAllocationGranularity", r) : -EIO;
		goto fail;
	}
	if (bytes > SIZE_MAX - (gran - 1)) {
		ret = -EOVERFLOW;
		goto fail;
	}
	m->size = (bytes + gran - 1) / gran * gran;
	r = cu.cuMemAddressReserve(&m->ptr, m->size, gran, 0, 0);
	if (r != CUDA_SUCCESS) {
		m->ptr = 0;
		ret = kv_cu_fail("cuMemAddressReserve", r);
		goto fail;
	}
	/*
	 * A handle shorter than the pool fails here: any code is a failure
	 * (the real driver answers NOT_SUPPORTED where the stand-in once said
	 * INVALID_VALUE), and kv_cuda_unmap() below unmaps only what mapped.
	 */
	r = cu.cuMemMap(m->ptr, m->size, 0, h, 0);
	if (r != CUDA_SUCCESS) {
		ret = kv_cu_fail("cuMemMap", r);
		goto fail;
	}
	m->mapped = 1;
	memset(&access, 0, sizeof(access));
	access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	access.location.id = m->dev;
	access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	r = cu.cuMemSetAccess(m->ptr, m->size, &access, 1);
	if (r != CUDA_SUCCESS) {
		ret = kv_cu_fail("cuMemSetAccess", r);
		goto fail;
	}
	return 0;
fail:
	kv_cuda_unmap(m);
	return ret;
}
