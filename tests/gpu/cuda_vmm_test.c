// SPDX-License-Identifier: GPL-2.0
/*
 * The CUDA driver's VMM contract as kvshare relies on it: what the calls
 * accept, what they refuse and with which code, and how long memory lives.
 *
 * In `make test` this runs on the driver stand-in (tests/gpu/cudastub),
 * and is the stand-in's own test: it must check what the driver checks.
 * tools/gpu/gpu-checks.sh runs the same binary on the real driver, where it
 * checks the stand-in's claims instead: a case that fails there is a place
 * where the stand-in and NVIDIA's driver differ, to be fixed in the stand-in.
 *
 * Also the calls a CUDA engine's copies over a host pool rely on
 * (python/kvshare/devcopy.c): cuMemHostRegister of shared memory as a pool
 * maps it, its errors, cuPointerGetAttribute, and stream-ordered copies
 * waited for through an event.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cuda.h>

#include "kselftest_harness.h"

#define FNS(X)							\
	X(cuInit, cuInit)					\
	X(cuDeviceGetCount, cuDeviceGetCount)			\
	X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain)	\
	X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2) \
	X(cuCtxSetCurrent, cuCtxSetCurrent)			\
	X(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity) \
	X(cuMemCreate, cuMemCreate)				\
	X(cuMemRelease, cuMemRelease)				\
	X(cuMemExportToShareableHandle, cuMemExportToShareableHandle) \
	X(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle) \
	X(cuMemAddressReserve, cuMemAddressReserve)		\
	X(cuMemAddressFree, cuMemAddressFree)			\
	X(cuMemMap, cuMemMap)					\
	X(cuMemUnmap, cuMemUnmap)				\
	X(cuMemSetAccess, cuMemSetAccess)			\
	X(cuMemcpyHtoD, cuMemcpyHtoD_v2)			\
	X(cuMemcpyDtoH, cuMemcpyDtoH_v2)			\
	X(cuMemHostRegister, cuMemHostRegister_v2)		\
	X(cuMemHostUnregister, cuMemHostUnregister)		\
	X(cuPointerGetAttribute, cuPointerGetAttribute)		\
	X(cuStreamCreate, cuStreamCreate)			\
	X(cuStreamDestroy, cuStreamDestroy_v2)			\
	X(cuStreamSynchronize, cuStreamSynchronize)		\
	X(cuEventCreate, cuEventCreate)				\
	X(cuEventRecord, cuEventRecord)				\
	X(cuEventQuery, cuEventQuery)				\
	X(cuEventSynchronize, cuEventSynchronize)		\
	X(cuEventDestroy, cuEventDestroy_v2)			\
	X(cuMemcpy2DAsync, cuMemcpy2DAsync_v2)

#define PTR(fn, sym)	__typeof__(fn) *p_##fn;
static struct { FNS(PTR) } d;
static int standin;

static int load(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

	if (!lib)
		return -1;
#define SYM(fn, sym)							\
	d.p_##fn = (__typeof__(d.p_##fn))dlsym(lib, #sym);		\
	if (!d.p_##fn)							\
		return -1;
	FNS(SYM)
	standin = !!dlsym(lib, "kvs_cudastub_counts");
	return 0;
}

FIXTURE(vmm) {
	CUmemAllocationProp prop;
	size_t gran;
	CUcontext ctx;
};

FIXTURE_SETUP(vmm)
{
	int n = 0;

	self->ctx = NULL;
	if (load())
		SKIP(return, "no libcuda.so.1 (the stand-in is found through "
		     "build/tests/cuda_vmm_test, which sets LD_LIBRARY_PATH)");
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuInit(0));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuDeviceGetCount(&n));
	ASSERT_LE(1, n);
	memset(&self->prop, 0, sizeof(self->prop));
	self->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	self->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	self->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	self->prop.location.id = 0;
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemGetAllocationGranularity(&self->gran, &self->prop,
				CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	ASSERT_LT(0, self->gran);
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuDevicePrimaryCtxRetain(&self->ctx, 0));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuCtxSetCurrent(self->ctx));
}

FIXTURE_TEARDOWN(vmm)
{
	if (d.p_cuCtxSetCurrent && self->ctx) {
		d.p_cuCtxSetCurrent(NULL);
		d.p_cuDevicePrimaryCtxRelease(0);
	}
}

static CUmemAccessDesc rw(int dev)
{
	CUmemAccessDesc a;

	memset(&a, 0, sizeof(a));
	a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	a.location.id = dev;
	a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	return a;
}

TEST_F(vmm, create_needs_granularity_and_zero_flags)
{
	CUmemGenericAllocationHandle h;
	size_t g = self->gran;

	if (_metadata->skip)		/* SKIP in the setup still runs the body */
		return;

	EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, d.p_cuMemCreate(&h, g / 2, &self->prop, 0));
	EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, d.p_cuMemCreate(&h, g, &self->prop, 1));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemCreate(&h, 2 * g, &self->prop, 0));
	EXPECT_EQ(CUDA_SUCCESS, d.p_cuMemRelease(h));
}

TEST_F(vmm, release_twice_is_refused)
{
	CUmemGenericAllocationHandle h;

	if (_metadata->skip)		/* SKIP in the setup still runs the body */
		return;

	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemCreate(&h, self->gran, &self->prop, 0));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemRelease(h));
	EXPECT_NE(CUDA_SUCCESS, d.p_cuMemRelease(h));
}

TEST_F(vmm, export_needs_the_requested_type)
{
	CUmemAllocationProp p = self->prop;
	CUmemGenericAllocationHandle h;
	int fd = -1;

	if (_metadata->skip)		/* SKIP in the setup still runs the body */
		return;

	p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemCreate(&h, self->gran, &p, 0));
	EXPECT_NE(CUDA_SUCCESS, d.p_cuMemExportToShareableHandle(&fd, h,
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	EXPECT_EQ(CUDA_SUCCESS, d.p_cuMemRelease(h));
}

TEST_F(vmm, import_refuses_what_is_no_handle)
{
	CUmemGenericAllocationHandle h;
	int fd = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (_metadata->skip)		/* SKIP in the setup still runs the body */
		return;

	ASSERT_LE(0, fd);
	EXPECT_NE(CUDA_SUCCESS, d.p_cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	close(fd);
}

/* Reserve, map, access, unmap and free: each refuses a wrong range. */
TEST_F(vmm, ranges_are_checked)
{
	size_t g = self->gran;
	CUmemGenericAllocationHandle h;
	CUmemAccessDesc a = rw(0);
	CUdeviceptr va;

	if (_metadata->skip)		/* SKIP in the setup still runs the body */
		return;

	EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, d.p_cuMemAddressReserve(&va, g + 1, 0, 0, 0));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemCreate(&h, 2 * g, &self->prop, 0));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemAddressReserve(&va, 4 * g, 0, 0, 0));
	/*
	 * Unaligned address, size or offset; past the allocation's end.  The
	 * codes are the real driver's (H200, driver 580, CUDA 13.0: a size or
	 * offset off the granularity is NOT_SUPPORTED), which the stand-in
	 * must match: a difference seen on a GPU becomes a stand-in fix and
	 * a line here.
	 */
	EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, d.p_cuMemMap(va + 4096, g, 0, h, 0));
	EXPECT_EQ(CUDA_ERROR_NOT_SUPPORTED, d.p_cuMemMap(va, g + 4096, 0, h, 0));
	EXPECT_EQ(CUDA_ERROR_NOT_SUPPORTED, d.p_cuMemMap(va, g, 4096, h, 0));
	EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, d.p_cuMemMap(va, 2 * g, g, h, 0));
	EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, d.p_cuMemMap(va, g, 0, h, 1));
	/*
	 * Access to a range nothing is mapped in fails; unmapping it succeeds
	 * and does nothing (the real driver's answer: nobody may rely on an
	 * unmap to say whether something was mapped).
	 */
	EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, d.p_cuMemSetAccess(va, g, &a, 1));
	EXPECT_EQ(CUDA_SUCCESS, d.p_cuMemUnmap(va, g));

	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemMap(va, 2 * g, 0, h, 0));
	/* Over a mapped range. */
	EXPECT_NE(CUDA_SUCCESS, d.p_cuMemMap(va + g, g, 0, h, 0));
	/* Bad access flags or device. */
	a.flags = (CUmemAccess_flags)2;
	EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, d.p_cuMemSetAccess(va, 2 * g, &a, 1));
	a = rw(1 << 20);
	EXPECT_NE(CUDA_SUCCESS, d.p_cuMemSetAccess(va, 2 * g, &a, 1));
	a = rw(0);
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemSetAccess(va, 2 * g, &a, 1));
	/* Part of a mapping; a reservation still mapped; a wrong size. */
	EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, d.p_cuMemUnmap(va, g));
	EXPECT_NE(CUDA_SUCCESS, d.p_cuMemAddressFree(va, 4 * g));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemUnmap(va, 2 * g));
	EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, d.p_cuMemAddressFree(va, 2 * g));
	EXPECT_EQ(CUDA_SUCCESS, d.p_cuMemAddressFree(va, 4 * g));
	EXPECT_EQ(CUDA_SUCCESS, d.p_cuMemRelease(h));
}

/*
 * The lifetime kvshared relies on: after export and cuMemRelease, the fd
 * alone keeps the memory; an import of it, mapped, sees what was written
 * through another mapping; the mapping keeps the memory after the
 * imported handle is released and the fd closed.
 */
TEST_F(vmm, the_exported_fd_and_mappings_keep_the_memory)
{
	size_t g = self->gran;
	CUmemGenericAllocationHandle h, h2;
	CUmemAccessDesc a = rw(0);
	CUdeviceptr va, vb;
	char in[256], out[256];
	int fd = -1;

	if (_metadata->skip)		/* SKIP in the setup still runs the body */
		return;

	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemCreate(&h, g, &self->prop, 0));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemExportToShareableHandle(&fd, h,
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemAddressReserve(&va, g, 0, 0, 0));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemMap(va, g, 0, h, 0));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemRelease(h));
	/* Mapped but no access yet: copies fail. */
	memset(in, 0x5a, sizeof(in));
	EXPECT_NE(CUDA_SUCCESS, d.p_cuMemcpyHtoD(va, in, sizeof(in)));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemSetAccess(va, g, &a, 1));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemcpyHtoD(va + 100, in, sizeof(in)));

	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemImportFromShareableHandle(&h2, (void *)(intptr_t)fd,
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	close(fd);
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemAddressReserve(&vb, g, 0, 0, 0));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemMap(vb, g, 0, h2, 0));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemRelease(h2));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemSetAccess(vb, g, &a, 1));
	/* The first mapping gone, the second still holds the memory. */
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemUnmap(va, g));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemAddressFree(va, g));
	memset(out, 0, sizeof(out));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemcpyDtoH(out, vb + 100, sizeof(out)));
	EXPECT_EQ(0, memcmp(in, out, sizeof(in)));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemUnmap(vb, g));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemAddressFree(vb, g));
}

/* Shared memory as libkv maps a host pool: a memfd, MAP_SHARED, read-write. */
static char *pool_like(size_t size)
{
	int fd = memfd_create("cuda_vmm_test-pool", MFD_CLOEXEC);
	char *p;

	if (fd < 0 || ftruncate(fd, size)) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	return p == MAP_FAILED ? NULL : p;
}

TEST_F(vmm, host_register_pins_pool_memory_with_the_drivers_codes)
{
	size_t pg = sysconf(_SC_PAGESIZE), size = 16 * pg;
	unsigned int type = 0;
	CUdeviceptr start = 0;
	size_t rsize = 0;
	int ord = -1;
	char *p, *heap;

	if (_metadata->skip)		/* SKIP in the setup still runs the body */
		return;

	p = pool_like(size);
	ASSERT_NE(NULL, p);
	heap = malloc(4096);
	ASSERT_NE(NULL, heap);
	/* Memory the driver does not know: pageable. */
	EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, d.p_cuPointerGetAttribute(&type,
			CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)p));
	EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, d.p_cuPointerGetAttribute(&type,
			CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)heap));
	EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, d.p_cuMemHostRegister(p, 0, 0));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemHostRegister(p, size, CU_MEMHOSTREGISTER_PORTABLE));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuPointerGetAttribute(&type,
			CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)(p + 100)));
	EXPECT_EQ(CU_MEMORYTYPE_HOST, type);
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuPointerGetAttribute(&ord,
			CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)(uintptr_t)p));
	EXPECT_EQ(0, ord);
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuPointerGetAttribute(&start,
			CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)(uintptr_t)(p + pg)));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuPointerGetAttribute(&rsize,
			CU_POINTER_ATTRIBUTE_RANGE_SIZE, (CUdeviceptr)(uintptr_t)(p + pg)));
	EXPECT_EQ((CUdeviceptr)(uintptr_t)p, start);
	EXPECT_EQ(size, rsize);
	/* Twice, or a range sharing a page with it: registered already. */
	EXPECT_EQ(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
		  d.p_cuMemHostRegister(p, size, CU_MEMHOSTREGISTER_PORTABLE));
	EXPECT_EQ(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
		  d.p_cuMemHostRegister(p + size - 64, 128 + pg, 0));
	/* Only the base unregisters. */
	EXPECT_EQ(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, d.p_cuMemHostUnregister(p + pg));
	EXPECT_EQ(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, d.p_cuMemHostUnregister(heap));
	EXPECT_EQ(CUDA_SUCCESS, d.p_cuMemHostUnregister(p));
	EXPECT_EQ(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, d.p_cuMemHostUnregister(p));
	EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, d.p_cuPointerGetAttribute(&type,
			CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)p));
	/* Not page-aligned (the driver pins the pages it touches). */
	EXPECT_EQ(CUDA_SUCCESS, d.p_cuMemHostRegister(p + 8, 3 * pg, 0));
	EXPECT_EQ(CUDA_SUCCESS, d.p_cuMemHostUnregister(p + 8));
	free(heap);
	munmap(p, size);
}

TEST_F(vmm, async_copies_to_and_from_pinned_memory_land_by_the_event)
{
	size_t g = self->gran, pg = sysconf(_SC_PAGESIZE), size = 8 * pg;
	CUmemGenericAllocationHandle h;
	CUmemAccessDesc a = rw(0);
	unsigned int type = 0;
	CUDA_MEMCPY2D c;
	CUdeviceptr va;
	CUstream s;
	CUevent ev;
	char *host;
	size_t i;
	int ord = -1;

	if (_metadata->skip)		/* SKIP in the setup still runs the body */
		return;

	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemCreate(&h, g, &self->prop, 0));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemAddressReserve(&va, g, 0, 0, 0));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemMap(va, g, 0, h, 0));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemRelease(h));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemSetAccess(va, g, &a, 1));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuPointerGetAttribute(&type,
			CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + 64));
	EXPECT_EQ(CU_MEMORYTYPE_DEVICE, type);
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuPointerGetAttribute(&ord,
			CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, va + 64));
	EXPECT_EQ(0, ord);
	host = pool_like(size);
	ASSERT_NE(NULL, host);
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemHostRegister(host, size, CU_MEMHOSTREGISTER_PORTABLE));
	for (i = 0; i < size; i++)
		host[i] = (char)(i * 7 + 1);
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
	/* Host pages 0, 2, 4 (a page apart) -> 3 rows of the device, packed. */
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_HOST;
	c.srcHost = host;
	c.srcPitch = 2 * pg;
	c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	c.dstDevice = va;
	c.dstPitch = pg / 2;
	c.WidthInBytes = pg / 2;
	c.Height = 3;
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemcpy2DAsync(&c, s));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuEventRecord(ev, s));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuEventSynchronize(ev));
	EXPECT_EQ(CUDA_SUCCESS, d.p_cuEventQuery(ev));
	/* ... and back, packed, to host page 6, by the stream's wait. */
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
	c.srcDevice = va;
	c.srcPitch = 3 * (pg / 2);
	c.dstMemoryType = CU_MEMORYTYPE_HOST;
	c.dstHost = host + 6 * pg;
	c.dstPitch = 3 * (pg / 2);
	c.WidthInBytes = 3 * (pg / 2);
	c.Height = 1;
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemcpy2DAsync(&c, s));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuStreamSynchronize(s));
	for (i = 0; i < 3; i++)
		EXPECT_EQ(0, memcmp(host + 6 * pg + i * (pg / 2), host + 2 * i * pg, pg / 2));
	EXPECT_EQ(CUDA_SUCCESS, d.p_cuEventDestroy(ev));
	EXPECT_EQ(CUDA_SUCCESS, d.p_cuStreamDestroy(s));
	EXPECT_EQ(CUDA_SUCCESS, d.p_cuMemHostUnregister(host));
	munmap(host, size);
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemUnmap(va, g));
	ASSERT_EQ(CUDA_SUCCESS, d.p_cuMemAddressFree(va, g));
}

TEST_HARNESS_MAIN
