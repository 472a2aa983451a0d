// SPDX-License-Identifier: GPL-2.0
/*
 * GPU memory for pools: CUDA VMM with a POSIX file descriptor handle.
 *
 * The driver is loaded at run time (dlopen of libcuda.so.1), so the one
 * kvshared binary runs on machines without a GPU and reports there why a
 * memory=cuda pool cannot be made.  The sequence follows the driver API's
 * "Virtual Memory Management" group (research/gpu.md section 2.2):
 *
 *   cuInit; cuDeviceGet; check VMM and POSIX-fd support;
 *   prop = { PINNED, DEVICE ordinal, requestedHandleTypes = POSIX_FD };
 *   cuMemGetAllocationGranularity(MINIMUM) and round the size up to it;
 *   cuMemCreate; cuMemExportToShareableHandle -> fd; cuMemRelease.
 *
 * Releasing the handle at once is deliberate: cuMemRelease frees the
 * allocation only "when all outstanding references to the handle
 * (including its shareable counterparts) are also released", so the
 * exported fd alone keeps the memory alive, and the memory's lifetime is
 * exactly that of the fd the arbiter keeps and hands to attachers.
 *
 * The daemon never maps the memory, so it needs no context for its own
 * use; the primary context is retained only around the allocation calls
 * (allocations made by cuMemCreate belong to no context and survive it).
 *
 * Importers (libkv): cuMemImportFromShareableHandle(fd, POSIX_FD),
 * cuMemGetAllocationPropertiesFromHandle for the device and the
 * granularity, then reserve, map and set access over the size
 * round_up(n_pages * page_bytes, granularity).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cuda.h>

#include "kvshared.h"

#define KVSD_LIBCUDA	"libcuda.so.1"

/*
 * The driver entry points we use.  The names are cuda.h's macros expanded
 * (cuDevicePrimaryCtxRelease is cuDevicePrimaryCtxRelease_v2), so each
 * dlsym finds the ABI version this header describes.
 */
#define CU_FNS(X)					\
	X(cuGetErrorString)				\
	X(cuInit)					\
	X(cuDeviceGetCount)				\
	X(cuDeviceGet)					\
	X(cuDeviceGetAttribute)				\
	X(cuDevicePrimaryCtxRetain)			\
	X(cuDevicePrimaryCtxRelease)			\
	X(cuCtxSetCurrent)				\
	X(cuMemGetAllocationGranularity)		\
	X(cuMemCreate)					\
	X(cuMemExportToShareableHandle)			\
	X(cuMemRelease)

#define CU_STR_(x)	#x
#define CU_STR(x)	CU_STR_(x)
#define CU_PTR(fn)	__typeof__(fn) *fn;
#define CU_SYM(fn)	{ CU_STR(fn), offsetof(struct cu_api, fn) },

static struct cu_api {
	CU_FNS(CU_PTR)
} cu;

static const struct {
	const char *name;
	size_t off;
} cu_syms[] = {
	CU_FNS(CU_SYM)
};

static void *cu_lib;
static int cu_state;		/* 0 not tried, 1 ready, -1 failed */
static char cu_why[256];	/* why the driver is unusable */

static const char *cu_err(CUresult r)
{
	const char *s = NULL;

	if (cu.cuGetErrorString && cu.cuGetErrorString(r, &s) == CUDA_SUCCESS && s)
		return s;
	return "unknown CUDA error";
}

/* Load the driver once; on failure cu_why says why, for every pool. */
static int cu_load(void)
{
	CUresult r;
	size_t i;

	if (cu_state)
		return cu_state > 0 ? 0 : -ENODEV;
	cu_state = -1;
	cu_lib = dlopen(KVSD_LIBCUDA, RTLD_NOW | RTLD_LOCAL);
	if (!cu_lib) {
		snprintf(cu_why, sizeof(cu_why), "no CUDA driver (%s)", dlerror());
		return -ENODEV;
	}
	for (i = 0; i < ARRAY_SIZE(cu_syms); i++) {
		void *p = dlsym(cu_lib, cu_syms[i].name);

		if (!p) {
			snprintf(cu_why, sizeof(cu_why),
				 "CUDA driver too old (%s lacks %s)", KVSD_LIBCUDA,
				 cu_syms[i].name);
			return -ENODEV;
		}
		memcpy((char *)&cu + cu_syms[i].off, &p, sizeof(p));
	}
	r = cu.cuInit(0);
	if (r != CUDA_SUCCESS) {
		snprintf(cu_why, sizeof(cu_why), "cuInit: %s", cu_err(r));
		return -ENODEV;
	}
	cu_state = 1;
	return 0;
}

/* The device, checked for VMM and POSIX-fd export support. */
static int cu_device(int ordinal, CUdevice *dev, char *err, size_t err_len)
{
	int n = 0, vmm = 0, posix = 0;
	CUresult r;

	r = cu.cuDeviceGetCount(&n);
	if (r != CUDA_SUCCESS || ordinal >= n) {
		snprintf(err, err_len, "no CUDA device %d (%d present%s%s)", ordinal,
			 n, r != CUDA_SUCCESS ? ": " : "",
			 r != CUDA_SUCCESS ? cu_err(r) : "");
		return -ENODEV;
	}
	r = cu.cuDeviceGet(dev, ordinal);
	if (r == CUDA_SUCCESS)
		r = cu.cuDeviceGetAttribute(&vmm,
			CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, *dev);
	if (r == CUDA_SUCCESS)
		r = cu.cuDeviceGetAttribute(&posix,
			CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
			*dev);
	if (r != CUDA_SUCCESS) {
		snprintf(err, err_len, "device %d: %s", ordinal, cu_err(r));
		return -EIO;
	}
	if (!vmm || !posix) {
		snprintf(err, err_len, "device %d does not support %s", ordinal,
			 !vmm ? "virtual memory management" :
				"POSIX file descriptor export");
		return -EOPNOTSUPP;
	}
	return 0;
}

/* cuMemCreate + export + release, with the primary context current. */
static int cu_alloc(CUdevice dev, const CUmemAllocationProp *prop, size_t size,
		    int *fd, char *err, size_t err_len)
{
	CUmemGenericAllocationHandle h;
	CUcontext ctx;
	CUresult r;
	int ret = -ENOMEM;

	r = cu.cuDevicePrimaryCtxRetain(&ctx, dev);
	if (r != CUDA_SUCCESS) {
		snprintf(err, err_len, "cuDevicePrimaryCtxRetain: %s", cu_err(r));
		return -EIO;
	}
	r = cu.cuCtxSetCurrent(ctx);
	if (r == CUDA_SUCCESS)
		r = cu.cuMemCreate(&h, size, prop, 0);
	if (r != CUDA_SUCCESS) {
		snprintf(err, err_len, "cuMemCreate of %zu bytes: %s", size, cu_err(r));
		goto out;
	}
	r = cu.cuMemExportToShareableHandle(fd, h,
					    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	if (r != CUDA_SUCCESS) {
		snprintf(err, err_len, "cuMemExportToShareableHandle: %s", cu_err(r));
	} else {
		fcntl(*fd, F_SETFD, FD_CLOEXEC);
		ret = 0;
	}
	/* The exported fd now holds the allocation (see the top comment). */
	cu.cuMemRelease(h);
out:
	cu.cuCtxSetCurrent(NULL);
	cu.cuDevicePrimaryCtxRelease(dev);
	return ret;
}

int kvsd_cuda_create(const struct kvsd_pool_cfg *pc, uint64_t bytes,
		     struct kvsd_mem *mem, char *err, size_t err_len)
{
	CUmemAllocationProp prop;
	size_t gran = 0;
	CUdevice dev;
	CUresult r;
	int ret;

	ret = cu_load();
	if (ret) {
		snprintf(err, err_len, "%s", cu_why);
		return ret;
	}
	ret = cu_device(pc->cuda_device, &dev, err, err_len);
	if (ret)
		return ret;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = pc->cuda_device;
	r = cu.cuMemGetAllocationGranularity(&gran, &prop,
					     CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (r != CUDA_SUCCESS || !gran) {
		snprintf(err, err_len, "cuMemGetAllocationGranularity: %s", cu_err(r));
		return -EIO;
	}
	if (bytes > SIZE_MAX - (gran - 1)) {
		snprintf(err, err_len, "%llu bytes is too large",
			 (unsigned long long)bytes);
		return -EOVERFLOW;
	}
	mem->align = gran;
	mem->bytes = (bytes + gran - 1) / gran * gran;
	ret = cu_alloc(dev, &prop, mem->bytes, &mem->fd, err, err_len);
	if (ret)
		mem->fd = -1;
	return ret;
}
