// SPDX-License-Identifier: MIT
/*
 * The CPU stand-in for the GPU (test-only; see simt.h): the CUDA runtime
 * calls the project's host code makes, over malloc, with the real error
 * codes.  Launches are simt.cc's; they report here (record_error).  A
 * fuller runtime and driver stand-in may replace this file: it must
 * provide kv_simt::record_error() and kv_simt::device_range().
 *
 * Device memory is what cudaMalloc gave, and the mappings of the CUDA
 * driver stand-in (tests/gpu/cudastub: a device pool a process imported
 * and mapped, which the kernels read and write in place), when that is
 * the libcuda.so.1 the process loaded.
 */
#include "simt.h"

#include <dlfcn.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <map>

namespace {

cudaError_t last_err, pending_err;

cudaError_t set_err(cudaError_t e)
{
	if (e != cudaSuccess)
		last_err = e;
	return e;
}


std::map<uintptr_t, size_t> allocs;	/* device memory: start, bytes */

/* Is [p, p + n) inside one allocation? */
bool on_device(const void *p, size_t n)
{
	auto it = allocs.upper_bound((uintptr_t)p);

	if (it == allocs.begin())
		return false;
	--it;
	return (uintptr_t)p >= it->first && (uintptr_t)p - it->first + n <= it->second;
}

bool touches_device(const void *p)
{
	return on_device(p, 1);
}

}

void kv_simt::record_error(cudaError_t e, bool pending)
{
	set_err(e);
	if (pending)
		pending_err = e;
}

/*
 * Binaries with the kernels' stand-in carry this name (kvserve's report
 * looks it up, weakly, to say where its kernels ran).
 */
extern "C" {
extern const char kv_simt_runtime[];
const char kv_simt_runtime[] = "CUDA kernels on the CPU stand-in (tests/simt)";
}

namespace {

typedef int (*mapping_fn)(const void *p, uintptr_t *base, size_t *size);

/* The driver stand-in's mapping holding @p, once the process loaded it. */
bool driver_mapping(const void *p, uintptr_t *start, size_t *bytes)
{
	static mapping_fn fn;
	void *h;

	if (!fn) {
		/* Kept open: the mapping function must outlive this call. */
		h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
		fn = h ? (mapping_fn)dlsym(h, "kvs_cudastub_mapping") : NULL;
		if (!fn)
			return false;
	}
	return fn(p, start, bytes);
}

}

/* The allocation holding @p; else the last one before it, for "past its end". */
bool kv_simt::device_range(const void *p, uintptr_t *start, size_t *bytes)
{
	auto it = allocs.upper_bound((uintptr_t)p);
	bool before = it != allocs.begin();

	if (before) {
		--it;
		*start = it->first;
		*bytes = it->second;
		if ((uintptr_t)p - it->first < it->second)
			return true;
	}
	if (driver_mapping(p, start, bytes))
		return true;
	if (before) {
		*start = it->first;
		*bytes = it->second;
	}
	return before;
}

extern "C" cudaError_t cudaGetDeviceCount(int *n)
{
	if (!n)
		return set_err(cudaErrorInvalidValue);
	*n = 1;
	return cudaSuccess;
}

extern "C" cudaError_t cudaGetDevice(int *dev)
{
	if (!dev)
		return set_err(cudaErrorInvalidValue);
	*dev = 0;
	return cudaSuccess;
}

extern "C" cudaError_t cudaSetDevice(int dev)
{
	return dev ? set_err(cudaErrorInvalidDevice) : cudaSuccess;
}

extern "C" cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int dev)
{
	if (!prop)
		return set_err(cudaErrorInvalidValue);
	if (dev)
		return set_err(cudaErrorInvalidDevice);
	memset(prop, 0, sizeof(*prop));
	snprintf(prop->name, sizeof(prop->name), "CPU stand-in (tests/simt, not a GPU)");
	prop->totalGlobalMem = 80ull << 30;
	prop->sharedMemPerBlock = 48 << 10;
	prop->warpSize = 32;
	prop->maxThreadsPerBlock = 1024;
	prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
	prop->maxThreadsDim[2] = 64;
	prop->maxGridSize[0] = 0x7fffffff;
	prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
	prop->major = 9;
	prop->minor = 0;
	/* An H100 SXM's: the host code plans its KV splits from it. */
	prop->multiProcessorCount = 132;
	return cudaSuccess;
}

extern "C" cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr attr, int dev)
{
	struct cudaDeviceProp p;

	if (!v)
		return set_err(cudaErrorInvalidValue);
	if (cudaGetDeviceProperties(&p, dev))
		return cudaErrorInvalidDevice;
	switch (attr) {
	case cudaDevAttrMaxThreadsPerBlock:
		*v = p.maxThreadsPerBlock;
		break;
	case cudaDevAttrMaxSharedMemoryPerBlock:
		*v = (int)p.sharedMemPerBlock;
		break;
	case cudaDevAttrWarpSize:
		*v = p.warpSize;
		break;
	case cudaDevAttrMultiProcessorCount:
		*v = p.multiProcessorCount;
		break;
	case cudaDevAttrComputeCapabilityMajor:
		*v = p.major;
		break;
	case cudaDevAttrComputeCapabilityMinor:
		*v = p.minor;
		break;
	default:
		return set_err(cudaErrorInvalidValue);
	}
	return cudaSuccess;
}

extern "C" cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last_err;

	last_err = cudaSuccess;
	return e;
}

extern "C" cudaError_t cudaPeekAtLastError(void)
{
	return last_err;
}

extern "C" const char *cudaGetErrorName(cudaError_t e)
{
	switch (e) {
#define N(x) case x: return #x;
	N(cudaSuccess) N(cudaErrorInvalidValue) N(cudaErrorMemoryAllocation)
	N(cudaErrorInitializationError) N(cudaErrorInvalidConfiguration)
	N(cudaErrorInvalidDevicePointer) N(cudaErrorInvalidMemcpyDirection)
	N(cudaErrorInsufficientDriver) N(cudaErrorNoDevice) N(cudaErrorInvalidDevice)
	N(cudaErrorInvalidResourceHandle) N(cudaErrorIllegalAddress)
	N(cudaErrorLaunchOutOfResources) N(cudaErrorLaunchFailure) N(cudaErrorNotSupported)
	N(cudaErrorUnknown)
#undef N
	}
	return "cudaErrorUnknown";
}

extern "C" const char *cudaGetErrorString(cudaError_t e)
{
	static char buf[640];

	switch (e) {
	case cudaSuccess:
		return "no error";
	case cudaErrorInvalidValue:
		return "invalid argument";
	case cudaErrorMemoryAllocation:
		return "out of memory";
	case cudaErrorInvalidConfiguration:
		return "invalid configuration argument";
	case cudaErrorInvalidDevice:
		return "invalid device ordinal";
	case cudaErrorNoDevice:
		return "no CUDA-capable device is detected";
	case cudaErrorLaunchFailure:
		/* The stand-in says why: the first report of the failed launch. */
		snprintf(buf, sizeof(buf), "unspecified launch failure [stand-in: %s]",
			 kv_simt::launch_report());
		return buf;
	default:
		return "unknown error";
	}
}

extern "C" cudaError_t cudaMalloc(void **p, size_t bytes)
{
	void *m;

	if (!p)
		return set_err(cudaErrorInvalidValue);
	*p = NULL;
	if (!bytes)
		return cudaSuccess;
	if (bytes > (80ull << 30))
		return set_err(cudaErrorMemoryAllocation);
	m = aligned_alloc(256, (bytes + 255) & ~(size_t)255);
	if (!m)
		return set_err(cudaErrorMemoryAllocation);
	/* Fresh device memory is garbage: NaN here, so reading it unwritten shows. */
	memset(m, 0xff, bytes);
	allocs[(uintptr_t)m] = bytes;
	*p = m;
	return cudaSuccess;
}

extern "C" cudaError_t cudaFree(void *p)
{
	if (!p)
		return cudaSuccess;
	if (!allocs.erase((uintptr_t)p))
		return set_err(cudaErrorInvalidValue);
	free(p);
	return cudaSuccess;
}

extern "C" cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t s)
{
	(void)s;
	return cudaMalloc(p, bytes);
}

extern "C" cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
	(void)s;
	return cudaFree(p);
}

extern "C" cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes,
				  enum cudaMemcpyKind kind)
{
	bool dd, sd;

	if ((unsigned int)kind > cudaMemcpyDefault)
		return set_err(cudaErrorInvalidMemcpyDirection);
	if (!bytes)
		return cudaSuccess;
	if (!dst || !src)
		return set_err(cudaErrorInvalidValue);
	dd = on_device(dst, bytes);
	sd = on_device(src, bytes);
	/* A range that starts on the device must end in the same allocation. */
	if ((!dd && touches_device(dst)) || (!sd && touches_device(src)))
		return set_err(cudaErrorInvalidValue);
	if (((kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) && !dd) ||
	    ((kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice) && !sd))
		return set_err(cudaErrorInvalidValue);
	memmove(dst, src, bytes);
	return cudaSuccess;
}

extern "C" cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes,
				       enum cudaMemcpyKind kind, cudaStream_t s)
{
	(void)s;
	return cudaMemcpy(dst, src, bytes, kind);
}

extern "C" cudaError_t cudaMemset(void *p, int byte, size_t bytes)
{
	if (!bytes)
		return cudaSuccess;
	if (!on_device(p, bytes))
		return set_err(cudaErrorInvalidValue);
	memset(p, byte, bytes);
	return cudaSuccess;
}

extern "C" cudaError_t cudaMemsetAsync(void *p, int byte, size_t bytes, cudaStream_t s)
{
	(void)s;
	return cudaMemset(p, byte, bytes);
}

/* Launches run to completion when made: a sync reports what they left. */
extern "C" cudaError_t cudaDeviceSynchronize(void)
{
	cudaError_t e = pending_err;

	pending_err = cudaSuccess;
	return set_err(e);
}

extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	(void)s;
	return cudaDeviceSynchronize();
}

extern "C" cudaError_t cudaStreamCreate(cudaStream_t *s)
{
	if (!s)
		return set_err(cudaErrorInvalidValue);
	*s = (cudaStream_t)malloc(1);
	return *s ? cudaSuccess : set_err(cudaErrorMemoryAllocation);
}

extern "C" cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	if (!s)
		return set_err(cudaErrorInvalidResourceHandle);
	free(s);
	return cudaSuccess;
}

struct CUevent_st {
	double ms;
};

extern "C" cudaError_t cudaEventCreate(cudaEvent_t *e)
{
	if (!e)
		return set_err(cudaErrorInvalidValue);
	*e = (cudaEvent_t)calloc(1, sizeof(struct CUevent_st));
	return *e ? cudaSuccess : set_err(cudaErrorMemoryAllocation);
}

extern "C" cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	if (!e)
		return set_err(cudaErrorInvalidResourceHandle);
	free(e);
	return cudaSuccess;
}

extern "C" cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	struct timespec ts;

	(void)s;
	if (!e)
		return set_err(cudaErrorInvalidResourceHandle);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	e->ms = ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
	return cudaSuccess;
}

extern "C" cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	return e ? cudaSuccess : set_err(cudaErrorInvalidResourceHandle);
}

extern "C" cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
	if (!ms)
		return set_err(cudaErrorInvalidValue);
	if (!a || !b)
		return set_err(cudaErrorInvalidResourceHandle);
	*ms = (float)(b->ms - a->ms);
	return cudaSuccess;
}
