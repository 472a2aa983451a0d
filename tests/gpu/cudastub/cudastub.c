// SPDX-License-Identifier: GPL-2.0
/*
 * A STAND-IN FOR THE CUDA DRIVER, FOR TESTS ONLY.
 *
 * This is not NVIDIA's driver and runs nothing on a GPU.  It is built as
 * build/tests/gpu/libcuda.so.1, never installed and never linked into what
 * users run: the tests put build/tests/gpu first in LD_LIBRARY_PATH, so
 * that kvshared and libkv, which dlopen("libcuda.so.1") exactly as they do
 * on a machine with a GPU, find it instead of the real driver.
 *
 * It implements the driver entry points the project calls (daemon/mem_cuda.c
 * and libkv/client/pool_cuda.c): initialisation, devices and their attributes,
 * primary contexts, the virtual memory management group (cuMemCreate,
 * export and import of POSIX-fd handles, address reservation, map, access,
 * unmap, release) and the synchronous copies the tests check contents with
 * (cuMemcpyHtoD, cuMemcpyDtoH), streams, events and the cuMemcpy2DAsync
 * copies, host memory registration and pointer attributes that
 * python/kvshare/devcopy.c uses, over memfd and mmap:
 *
 *   - an allocation is a memfd named "kvshare-cudastub:<device>", sealed
 *     against resizing (a device allocation never changes size; the
 *     arbiter takes a memfd as device memory only sealed so); its exported
 *     POSIX fd is a dup of that memfd, and an import accepts only such a
 *     memfd (CUDA_ERROR_INVALID_VALUE otherwise), as the real driver
 *     accepts only its own handles;
 *   - a reservation is a PROT_NONE anonymous mapping; cuMemMap puts the
 *     memfd there (MAP_SHARED | MAP_FIXED) still PROT_NONE, and
 *     cuMemSetAccess gives it PROT_READ or PROT_READ|PROT_WRITE, so that a
 *     caller that forgets to set access faults as it would on the device;
 *   - a stream is a token with a queue: asynchronous work (cuMemcpy2DAsync
 *     between pinned host and device memory, in any direction, and
 *     cuEventRecord) runs only when the stream is synchronised or an event
 *     recorded after it is waited on, so a missing wait reads stale bytes;
 *     a copy from or to pageable host memory (not cuMemHostRegister'ed) is
 *     done within the call, as the driver does, and counted;
 *   - cuMemHostRegister / cuMemHostUnregister keep a table of pinned
 *     ranges, with the driver's errors (CUDA_ERROR_HOST_MEMORY_ALREADY_
 *     REGISTERED for a range sharing a page with a registered one,
 *     CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED for a pointer that is not the
 *     base of one); cuPointerGetAttribute answers memory type, device
 *     ordinal and range of device mappings and registered host memory,
 *     and CUDA_ERROR_INVALID_VALUE for memory the driver does not know
 *     (pageable host memory);
 *   - "device" pointers are host addresses: host code can read them, which
 *     the real driver never allows (the tests use this to check contents).
 *
 * It checks what the driver documents (cuda.h): sizes, addresses and
 * offsets multiple of the granularity, flags zero, a mapping inside a
 * reservation and inside the allocation, no map over a mapped range,
 * unmap and set-access only over whole mapped ranges, address free only of
 * a whole reservation, handle types requested at create, released or
 * unknown handles, access flags and locations; and it returns the codes
 * cuda.h lists for those calls (CUDA_ERROR_INVALID_VALUE for nearly all,
 * CUDA_ERROR_NOT_INITIALIZED before cuInit, CUDA_ERROR_INVALID_DEVICE,
 * CUDA_ERROR_NOT_SUPPORTED for a handle type not requested).  Where cuda.h
 * names no specific code for a case (freeing a reservation that is still
 * mapped, say) it returns CUDA_ERROR_INVALID_VALUE: the real driver may
 * differ there, and tools/gpu/gpu-checks.sh runs the same suites on it.
 *
 * STANDING RULE: any difference seen on a real GPU becomes a fix here, with
 * a test in tests/gpu/cuda_vmm_test.c that the real driver passes too.  So
 * far (H200, driver 580, CUDA 13.0, issue 20): cuMemMap with a size or an
 * offset not a multiple of the granularity returns CUDA_ERROR_NOT_SUPPORTED,
 * and cuMemUnmap of a range with nothing mapped in it returns CUDA_SUCCESS.
 *
 * Test knobs (environment, read at each call):
 *   KVS_CUDASTUB_DEVICES=N       devices present (default 1; 0: none)
 *   KVS_CUDASTUB_FAIL=fn:N[:code][,fn:N[:code]...]
 *                                the N-th call (from 1) of entry point fn
 *                                in this process fails with code (default
 *                                CUDA_ERROR_OUT_OF_MEMORY), doing nothing
 *
 * And functions the real driver does not have, which tests look up with
 * dlsym and libkv uses to know it is not on a real GPU:
 *   kvs_cudastub_counts(&allocs, &handles, &reservations, &mappings)
 *   kvs_cudastub_version()
 *   kvs_cudastub_counter(name)     syncs, pageable copies, registrations,
 *                                  queued work (see there)
 *   kvs_cudastub_mapping(p, &base, &size)  the readable mapping holding p,
 *                                  for the kernels' stand-in (tests/simt),
 *                                  whose illegal-address check takes it as
 *                                  device memory
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cuda.h>

#define STUB_NAME	"kvshare-cudastub"
#define STUB_GRAN	(2ul << 20)	/* as the driver reports on H100 */
#define STUB_MAX_DEV	8
#define STUB_EXPORT	__attribute__((visibility("default")))

struct stub_alloc {
	int fd;
	size_t size;
	int dev;
	unsigned long long types;	/* requestedHandleTypes */
	int refs;			/* live handles + mappings */
};

struct stub_handle {
	struct stub_alloc *a;		/* NULL once released */
};

struct stub_range {
	uintptr_t base;
	size_t size;
	struct stub_alloc *a;		/* mappings only */
	int prot;			/* mappings: PROT_* cuMemSetAccess gave */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int inited;
static struct stub_handle *handles;	/* index = handle value - 1; never reused */
static size_t n_handles, cap_handles;
static struct stub_range *resv, *maps;
static size_t n_resv, cap_resv, n_maps, cap_maps;
static int n_allocs;
static int ctx_refs[STUB_MAX_DEV];
static __thread CUcontext cur_ctx;
static unsigned long call_count[64];

/* ---- knobs ---- */

static int stub_devices(void)
{
	const char *s = getenv("KVS_CUDASTUB_DEVICES");
	int n = s && *s ? atoi(s) : 1;

	return n < 0 ? 0 : n > STUB_MAX_DEV ? STUB_MAX_DEV : n;
}

/*
 * Whether this call of @fn (its @slot-th counter) is one KVS_CUDASTUB_FAIL
 * names; *code gets the code to return.  Called with the lock held.
 */
static int stub_fail(const char *fn, unsigned int slot, CUresult *code)
{
	const char *spec = getenv("KVS_CUDASTUB_FAIL");
	size_t len = strlen(fn);
	unsigned long n = ++call_count[slot];

	while (spec && *spec) {
		if (!strncmp(spec, fn, len) && spec[len] == ':') {
			char *end;
			unsigned long want = strtoul(spec + len + 1, &end, 10);

			if (want == n) {
				*code = *end == ':' ? (CUresult)strtoul(end + 1, NULL, 10)
						    : CUDA_ERROR_OUT_OF_MEMORY;
				return 1;
			}
		}
		spec = strchr(spec, ',');
		if (spec)
			spec++;
	}
	return 0;
}

enum {
	S_INIT, S_DEVCOUNT, S_DEVGET, S_ATTR, S_CTXRETAIN, S_CTXRELEASE, S_CTXSET,
	S_CTXGET, S_GRAN, S_CREATE, S_EXPORT, S_IMPORT, S_PROPS, S_RESERVE,
	S_FREE, S_MAP, S_UNMAP, S_ACCESS, S_RELEASE, S_HTOD, S_DTOH,
	S_STREAMCREATE, S_STREAMDESTROY, S_STREAMSYNC, S_COPY2D, S_CTXSYNC, S_EVCREATE,
	S_EVDESTROY, S_EVRECORD, S_EVQUERY, S_EVSYNC, S_HOSTREG, S_HOSTUNREG, S_PTRATTR,
};

/* Every entry point: lock, injected failure, initialised. */
#define ENTER(fn, slot)						\
	CUresult _r;						\
	pthread_mutex_lock(&lock);				\
	if (stub_fail(#fn, slot, &_r))				\
		goto out;					\
	_r = CUDA_ERROR_NOT_INITIALIZED;			\
	if (!inited)						\
		goto out
#define LEAVE(code)	do { _r = (code); goto out; } while (0)
#define EXIT							\
out:								\
	pthread_mutex_unlock(&lock);				\
	return _r

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
	void *p;
	size_t n;

	if (need <= *cap)
		return 0;
	n = *cap ? *cap * 2 : 16;
	while (n < need)
		n *= 2;
	p = realloc(*arr, n * elem);
	if (!p)
		return -1;
	*arr = p;
	*cap = n;
	return 0;
}

static void alloc_put(struct stub_alloc *a)
{
	if (--a->refs)
		return;
	close(a->fd);
	free(a);
	n_allocs--;
}

static struct stub_alloc *handle_get(CUmemGenericAllocationHandle h)
{
	if (!h || h > n_handles)
		return NULL;
	return handles[h - 1].a;
}

static CUresult handle_new(struct stub_alloc *a, CUmemGenericAllocationHandle *h)
{
	if (grow((void **)&handles, &cap_handles, n_handles + 1, sizeof(*handles)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	handles[n_handles++].a = a;
	a->refs++;
	*h = n_handles;
	return CUDA_SUCCESS;
}

static int dev_ok(int dev)
{
	return dev >= 0 && dev < stub_devices();
}

/* ---- errors, init, devices, contexts ---- */

static const struct stub_err {
	CUresult r;
	const char *name, *str;
} errs[] = {
	{ CUDA_SUCCESS, "CUDA_SUCCESS", "no error" },
	{ CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument" },
	{ CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory" },
	{ CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error" },
	{ CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected" },
	{ CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal" },
	{ CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context" },
	{ CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle" },
	{ CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted" },
	{ CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported" },
	{ CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready" },
	{ CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered" },
	{ CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped" },
	{ CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region" },
	{ CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS" },
	{ CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error" },
};

/* The entry of errs[] for @error, or NULL: the driver answers INVALID_VALUE then. */
static const struct stub_err *err_find(CUresult error)
{
	size_t i;

	for (i = 0; i < sizeof(errs) / sizeof(errs[0]); i++)
		if (errs[i].r == error)
			return &errs[i];
	return NULL;
}

STUB_EXPORT CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
	const struct stub_err *e = err_find(error);

	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	*pStr = e ? e->str : NULL;
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

STUB_EXPORT CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
	const struct stub_err *e = err_find(error);

	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	*pStr = e ? e->name : NULL;
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

STUB_EXPORT CUresult CUDAAPI cuDriverGetVersion(int *v)
{
	if (!v)
		return CUDA_ERROR_INVALID_VALUE;
	*v = CUDA_VERSION;
	return CUDA_SUCCESS;
}

STUB_EXPORT CUresult CUDAAPI cuInit(unsigned int flags)
{
	CUresult _r;

	pthread_mutex_lock(&lock);
	if (stub_fail("cuInit", S_INIT, &_r))
		goto out;
	_r = CUDA_ERROR_INVALID_VALUE;
	if (flags)
		goto out;
	_r = CUDA_ERROR_NO_DEVICE;
	if (!stub_devices())
		goto out;
	inited = 1;
	_r = CUDA_SUCCESS;
	EXIT;
}

STUB_EXPORT CUresult CUDAAPI cuDeviceGetCount(int *count)
{
	ENTER(cuDeviceGetCount, S_DEVCOUNT);
	if (!count)
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	*count = stub_devices();
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

STUB_EXPORT CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
	ENTER(cuDeviceGet, S_DEVGET);
	if (!device)
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	if (!dev_ok(ordinal))
		LEAVE(CUDA_ERROR_INVALID_DEVICE);
	*device = ordinal;
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

STUB_EXPORT CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib,
						  CUdevice dev)
{
	ENTER(cuDeviceGetAttribute, S_ATTR);
	if (!pi)
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	if (!dev_ok(dev))
		LEAVE(CUDA_ERROR_INVALID_DEVICE);
	switch (attrib) {
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
		*pi = 1;
		break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
		*pi = 9;
		break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
		*pi = 0;
		break;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
		*pi = 132;
		break;
	case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
		*pi = 32;
		break;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
		*pi = 1024;
		break;
	default:
		/* Not modelled: a caller must not act on a value we made up. */
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	}
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

/* A primary context is (CUcontext)(dev + 1): never dereferenced. */
static int ctx_dev(CUcontext ctx)
{
	uintptr_t v = (uintptr_t)ctx;

	return v >= 1 && v <= STUB_MAX_DEV && ctx_refs[v - 1] ? (int)v - 1 : -1;
}

STUB_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	ENTER(cuDevicePrimaryCtxRetain, S_CTXRETAIN);
	if (!pctx)
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	if (!dev_ok(dev))
		LEAVE(CUDA_ERROR_INVALID_DEVICE);
	ctx_refs[dev]++;
	*pctx = (CUcontext)(uintptr_t)(dev + 1);
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

/* cuda.h spells it cuDevicePrimaryCtxRelease_v2: the name defined here. */
STUB_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
	ENTER(cuDevicePrimaryCtxRelease, S_CTXRELEASE);
	if (!dev_ok(dev))
		LEAVE(CUDA_ERROR_INVALID_DEVICE);
	if (!ctx_refs[dev])
		LEAVE(CUDA_ERROR_INVALID_CONTEXT);	/* released more than retained */
	ctx_refs[dev]--;
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

STUB_EXPORT CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
	ENTER(cuCtxSetCurrent, S_CTXSET);
	if (ctx && ctx_dev(ctx) < 0)
		LEAVE(CUDA_ERROR_INVALID_CONTEXT);
	cur_ctx = ctx;
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

STUB_EXPORT CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
	ENTER(cuCtxGetCurrent, S_CTXGET);
	if (!pctx)
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	*pctx = cur_ctx;
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

/* ---- virtual memory management ---- */

static CUresult prop_check(const CUmemAllocationProp *prop)
{
	if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	if (prop->requestedHandleTypes & ~(unsigned long long)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;	/* Linux: POSIX fds only */
	if (!dev_ok(prop->location.id))
		return CUDA_ERROR_INVALID_DEVICE;
	return CUDA_SUCCESS;
}

STUB_EXPORT CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity,
	const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags option)
{
	ENTER(cuMemGetAllocationGranularity, S_GRAN);
	if (!granularity || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
			     option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	_r = prop_check(prop);
	if (_r)
		goto out;
	*granularity = STUB_GRAN;
	EXIT;
}

STUB_EXPORT CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
					 const CUmemAllocationProp *prop,
					 unsigned long long flags)
{
	struct stub_alloc *a;
	char name[48];
	int fd;

	ENTER(cuMemCreate, S_CREATE);
	if (!handle || flags || !size || size % STUB_GRAN)
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	_r = prop_check(prop);
	if (_r)
		goto out;
	snprintf(name, sizeof(name), STUB_NAME ":%d", prop->location.id);
	fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	if (ftruncate(fd, size) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		close(fd);
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	}
	a = calloc(1, sizeof(*a));
	if (!a) {
		close(fd);
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	}
	a->fd = fd;
	a->size = size;
	a->dev = prop->location.id;
	a->types = prop->requestedHandleTypes;
	n_allocs++;
	_r = handle_new(a, handle);
	if (_r) {
		a->refs = 1;
		alloc_put(a);
	}
	EXIT;
}

STUB_EXPORT CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
	struct stub_alloc *a;

	ENTER(cuMemRelease, S_RELEASE);
	a = handle_get(handle);
	if (!a)
		LEAVE(CUDA_ERROR_INVALID_VALUE);	/* unknown, or released twice */
	handles[handle - 1].a = NULL;
	alloc_put(a);				/* mappings keep the memory */
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

STUB_EXPORT CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle,
	CUmemGenericAllocationHandle handle, CUmemAllocationHandleType handleType,
	unsigned long long flags)
{
	struct stub_alloc *a;
	int fd;

	ENTER(cuMemExportToShareableHandle, S_EXPORT);
	a = handle_get(handle);
	if (!shareableHandle || flags || !a)
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	if (!(a->types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
		LEAVE(CUDA_ERROR_NOT_SUPPORTED);	/* not requested at create */
	fd = dup(a->fd);			/* no FD_CLOEXEC, as the driver's */
	if (fd < 0)
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	*(int *)shareableHandle = fd;
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

/* The device of a stand-in export, or -1 if @fd is not one. */
static int stub_fd_dev(int fd)
{
	static const char prefix[] = "/memfd:" STUB_NAME ":";
	char path[32], link[128];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n < (ssize_t)sizeof(prefix) || memcmp(link, prefix, sizeof(prefix) - 1))
		return -1;
	link[n] = '\0';
	return atoi(link + sizeof(prefix) - 1);
}

STUB_EXPORT CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
	void *osHandle, CUmemAllocationHandleType shHandleType)
{
	int fd = (int)(intptr_t)osHandle, dev, dfd;
	struct stub_alloc *a;
	struct stat st;

	ENTER(cuMemImportFromShareableHandle, S_IMPORT);
	if (!handle || shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	dev = stub_fd_dev(fd);
	if (dev < 0 || fstat(fd, &st) || !dev_ok(dev) || !st.st_size ||
	    st.st_size % STUB_GRAN)
		LEAVE(CUDA_ERROR_INVALID_VALUE);	/* not one of ours */
	dfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (dfd < 0)
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	a = calloc(1, sizeof(*a));
	if (!a) {
		close(dfd);
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	}
	a->fd = dfd;
	a->size = st.st_size;
	a->dev = dev;
	a->types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	n_allocs++;
	_r = handle_new(a, handle);
	if (_r) {
		a->refs = 1;
		alloc_put(a);
	}
	EXIT;
}

STUB_EXPORT CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
	CUmemGenericAllocationHandle handle)
{
	struct stub_alloc *a;

	ENTER(cuMemGetAllocationPropertiesFromHandle, S_PROPS);
	a = handle_get(handle);
	if (!prop || !a)
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	memset(prop, 0, sizeof(*prop));
	prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop->requestedHandleTypes = a->types;
	prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop->location.id = a->dev;
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

static struct stub_range *range_find(struct stub_range *r, size_t n, uintptr_t p)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (p >= r[i].base && p - r[i].base < r[i].size)
			return &r[i];
	return NULL;
}

static int overlaps(const struct stub_range *r, size_t n, uintptr_t p, size_t size)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (p < r[i].base + r[i].size && r[i].base < p + size)
			return 1;
	return 0;
}

STUB_EXPORT CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size,
						 size_t alignment, CUdeviceptr addr,
						 unsigned long long flags)
{
	size_t align;
	uintptr_t base;
	char *p;

	ENTER(cuMemAddressReserve, S_RESERVE);
	if (!ptr || !size || size % STUB_GRAN || flags ||
	    (alignment & (alignment - 1)) || addr % STUB_GRAN)
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	/* addr is a hint the driver may ignore; so do we. */
	align = alignment > STUB_GRAN ? alignment : STUB_GRAN;
	if (grow((void **)&resv, &cap_resv, n_resv + 1, sizeof(*resv)))
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	p = mmap(NULL, size + align, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	base = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
	if (base > (uintptr_t)p)
		munmap(p, base - (uintptr_t)p);
	munmap((void *)(base + size), (uintptr_t)p + size + align - (base + size));
	resv[n_resv].base = base;
	resv[n_resv].size = size;
	resv[n_resv].a = NULL;
	n_resv++;
	*ptr = (CUdeviceptr)base;
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

STUB_EXPORT CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	struct stub_range *r;

	ENTER(cuMemAddressFree, S_FREE);
	r = range_find(resv, n_resv, ptr);
	/* Exactly a whole reservation, and nothing mapped in it any more. */
	if (!r || r->base != ptr || r->size != size || overlaps(maps, n_maps, ptr, size))
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	munmap((void *)r->base, r->size);
	*r = resv[--n_resv];
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

STUB_EXPORT CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
				      CUmemGenericAllocationHandle handle,
				      unsigned long long flags)
{
	struct stub_alloc *a;
	struct stub_range *r;
	void *p;

	ENTER(cuMemMap, S_MAP);
	a = handle_get(handle);
	r = range_find(resv, n_resv, ptr);
	if (!a || flags || !size || ptr % STUB_GRAN)
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	/* Seen on an H200 (driver 580, CUDA 13.0): NOT_SUPPORTED, not INVALID_VALUE. */
	if (size % STUB_GRAN || offset % STUB_GRAN)
		LEAVE(CUDA_ERROR_NOT_SUPPORTED);
	/* Inside one reservation, inside the allocation, over nothing mapped. */
	if (!r || ptr + size > r->base + r->size || offset > a->size ||
	    size > a->size - offset || overlaps(maps, n_maps, ptr, size))
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	if (grow((void **)&maps, &cap_maps, n_maps + 1, sizeof(*maps)))
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	p = mmap((void *)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, a->fd, offset);
	if (p == MAP_FAILED)
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	maps[n_maps].base = ptr;
	maps[n_maps].size = size;
	maps[n_maps].a = a;
	maps[n_maps].prot = PROT_NONE;
	n_maps++;
	a->refs++;
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

/*
 * Whether [ptr, ptr + size) is exactly a run of whole, adjacent mappings
 * ("the entire contiguous address range that was mapped to").
 */
static int whole_mappings(uintptr_t ptr, size_t size)
{
	uintptr_t p = ptr;

	if (!size)
		return 0;
	while (p < ptr + size) {
		struct stub_range *m = range_find(maps, n_maps, p);

		if (!m || m->base != p || m->base + m->size > ptr + size)
			return 0;
		p += m->size;
	}
	return 1;
}

STUB_EXPORT CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	uintptr_t p;

	ENTER(cuMemUnmap, S_UNMAP);
	/* Nothing mapped there: success, doing nothing (the real driver's answer). */
	if (size && !overlaps(maps, n_maps, ptr, size))
		LEAVE(CUDA_SUCCESS);
	if (!whole_mappings(ptr, size))
		LEAVE(CUDA_ERROR_INVALID_VALUE);	/* part of a mapping */
	for (p = ptr; p < ptr + size;) {
		struct stub_range *m = range_find(maps, n_maps, p);
		struct stub_alloc *a = m->a;

		p += m->size;
		/* Back to reserved, inaccessible address space. */
		mmap((void *)m->base, m->size, PROT_NONE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
		*m = maps[--n_maps];
		alloc_put(a);
	}
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

STUB_EXPORT CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size,
					    const CUmemAccessDesc *desc, size_t count)
{
	int prot = PROT_NONE;
	size_t i;

	ENTER(cuMemSetAccess, S_ACCESS);
	if (!desc || !count || !whole_mappings(ptr, size))
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	for (i = 0; i < count; i++) {
		if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
			LEAVE(CUDA_ERROR_INVALID_VALUE);
		if (!dev_ok(desc[i].location.id))
			LEAVE(CUDA_ERROR_INVALID_DEVICE);
		switch (desc[i].flags) {
		case CU_MEM_ACCESS_FLAGS_PROT_NONE:
			break;
		case CU_MEM_ACCESS_FLAGS_PROT_READ:
			prot |= PROT_READ;
			break;
		case CU_MEM_ACCESS_FLAGS_PROT_READWRITE:
			prot |= PROT_READ | PROT_WRITE;
			break;
		default:
			LEAVE(CUDA_ERROR_INVALID_VALUE);
		}
	}
	if (mprotect((void *)ptr, size, prot))
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	for (i = 0; i < n_maps; i++)
		if (maps[i].base >= ptr && maps[i].base < ptr + size)
			maps[i].prot = prot;
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

/* Whether [p, p + n) is mapped throughout with at least @prot access. */
static int accessible(uintptr_t p, size_t n, int prot)
{
	uintptr_t end = p + n;

	if (!n || end < p)
		return 0;
	while (p < end) {
		struct stub_range *m = range_find(maps, n_maps, p);

		if (!m || (m->prot & prot) != prot)
			return 0;
		p = m->base + m->size;
	}
	return 1;
}

/* Whether each of @height rows of @width bytes, @pitch apart from @p, is mapped. */
static int rows_ok(uintptr_t p, size_t pitch, size_t width, size_t height, int prot)
{
	size_t i;

	for (i = 0; i < height; i++) {
		if (i && __builtin_add_overflow(p, pitch, &p))
			return 0;
		if (!accessible(p, width, prot))
			return 0;
	}
	return 1;
}

struct stub_event;
static void drain(CUstream s, int all, const struct stub_event *ev);

/*
 * Synchronous copies, as the driver's (they need a current context): on the
 * legacy default stream, which waits for the work of every blocking stream
 * first.
 */
STUB_EXPORT CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n)
{
	ENTER(cuMemcpyHtoD, S_HTOD);
	if (!cur_ctx)
		LEAVE(CUDA_ERROR_INVALID_CONTEXT);
	if (!src || !accessible(dst, n, PROT_WRITE))
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	drain(NULL, 1, NULL);
	memcpy((void *)dst, src, n);
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

STUB_EXPORT CUresult CUDAAPI cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n)
{
	ENTER(cuMemcpyDtoH, S_DTOH);
	if (!cur_ctx)
		LEAVE(CUDA_ERROR_INVALID_CONTEXT);
	if (!dst || !accessible(src, n, PROT_READ))
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	drain(NULL, 1, NULL);
	memcpy(dst, (const void *)src, n);
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

/* ---- streams, events and asynchronous copies ---- */

/*
 * Work on a stream is queued, not done: a copy lands only when its stream
 * is synchronised (cuStreamSynchronize, cuCtxSynchronize) or when an event
 * recorded after it is waited on (cuEventSynchronize), as if the GPU had
 * not started yet.  So a caller that forgets a wait reads stale bytes
 * here, where on a GPU it would read them only sometimes.  Work runs in
 * stream order; nothing ever progresses on its own (cuEventQuery answers
 * CUDA_ERROR_NOT_READY until a wait ran the work).  The legacy default
 * stream (0 or CU_STREAM_LEGACY) is one stream, the per-thread default
 * another.  A copy that fails when it runs (its memory was unmapped or
 * unregistered meanwhile) leaves CUDA_ERROR_ILLEGAL_ADDRESS on its stream,
 * which every later wait on that stream returns, as the driver's sticky
 * errors.
 *
 * Host operands: a row inside memory registered with cuMemHostRegister is
 * pinned and queued like device work; any other host memory is pageable,
 * and the copy is done at once after draining its stream (the driver
 * stages a pageable source at the call, and returns from a copy to
 * pageable memory only when it is done): counted as pageable_copies.
 */
struct stub_stream {
	CUstream h;
	CUresult err;			/* sticky: the first failure of its work */
};

struct stub_event {
	unsigned long gen;		/* of the last cuEventRecord */
	unsigned long done;		/* the gen that completed */
	CUstream s;			/* where it was last recorded */
};

enum { OP_COPY, OP_EVENT };

struct stub_op {
	int kind;
	CUstream s;
	/* OP_COPY: rows of width bytes; *_host: a pinned host operand */
	uintptr_t dst, src;
	size_t dpitch, spitch, width, height;
	int dst_host, src_host;
	/* OP_EVENT */
	struct stub_event *ev;
	unsigned long gen;
};

struct stub_hostreg {
	uintptr_t base;			/* as given to cuMemHostRegister */
	size_t size;
	uintptr_t pbase, pend;		/* the pages it pinned */
	unsigned int flags;
	int dev;
};

static struct stub_stream *streams;	/* the defaults, then cuStreamCreate's */
static size_t n_streams, cap_streams;
static struct stub_event **events;
static size_t n_events, cap_events;
static struct stub_op *ops;		/* queued work, in submission order */
static size_t n_ops, cap_ops;
static struct stub_hostreg *hostregs;
static size_t n_hostregs, cap_hostregs;
static unsigned long n_syncs, n_pageable, n_registers, n_async;

/* The one name of a stream: 0 and CU_STREAM_LEGACY are the same. */
static CUstream stream_key(CUstream s)
{
	return s ? s : CU_STREAM_LEGACY;
}

/* The stream @s names (the defaults exist from the start), or NULL. */
static struct stub_stream *stream_get(CUstream s)
{
	size_t i;

	s = stream_key(s);
	if (!n_streams) {
		if (grow((void **)&streams, &cap_streams, 2, sizeof(*streams)))
			return NULL;
		streams[0] = (struct stub_stream){ CU_STREAM_LEGACY, CUDA_SUCCESS };
		streams[1] = (struct stub_stream){ CU_STREAM_PER_THREAD, CUDA_SUCCESS };
		n_streams = 2;
	}
	for (i = 0; i < n_streams; i++)
		if (streams[i].h == s)
			return &streams[i];
	return NULL;
}

static struct stub_event *event_get(CUevent e)
{
	size_t i;

	for (i = 0; i < n_events; i++)
		if ((CUevent)events[i] == e)
			return events[i];
	return NULL;
}

/* The registration holding [p, p + n), or NULL: pageable memory. */
static struct stub_hostreg *hostreg_find(uintptr_t p, size_t n)
{
	size_t i;

	for (i = 0; i < n_hostregs; i++)
		if (p >= hostregs[i].base && n <= hostregs[i].size &&
		    p - hostregs[i].base <= hostregs[i].size - n)
			return &hostregs[i];
	return NULL;
}

/* Whether [p, p + n) touches device address space (a reservation). */
static int is_device_va(uintptr_t p, size_t n)
{
	return overlaps(resv, n_resv, p, n);
}

/* The span of @height rows of @width bytes, @pitch apart, or 0 if it wraps. */
static size_t span_of(uintptr_t p, size_t pitch, size_t width, size_t height)
{
	size_t span;

	if (__builtin_mul_overflow(height - 1, pitch, &span) ||
	    __builtin_add_overflow(span, width, &span) || p + span < p)
		return 0;
	return span;
}

/* Run one queued copy; 0, or -1 when its memory is gone. */
static int op_run(const struct stub_op *o)
{
	size_t i, ds = span_of(o->dst, o->dpitch, o->width, o->height),
	       ss = span_of(o->src, o->spitch, o->width, o->height);

	if (o->dst_host ? !hostreg_find(o->dst, ds)
			: !rows_ok(o->dst, o->dpitch, o->width, o->height, PROT_WRITE))
		return -1;
	if (o->src_host ? !hostreg_find(o->src, ss)
			: !rows_ok(o->src, o->spitch, o->width, o->height, PROT_READ))
		return -1;
	for (i = 0; i < o->height; i++)
		memmove((void *)(o->dst + i * o->dpitch),
			(const void *)(o->src + i * o->spitch), o->width);
	return 0;
}

/*
 * Run the queued work of stream @s (all streams when @all) in order, up to
 * and including the record of @ev (everything when NULL).  Called with the
 * lock held.
 */
static void drain(CUstream s, int all, const struct stub_event *ev)
{
	size_t i, kept = 0;
	int stop = 0;

	s = stream_key(s);
	for (i = 0; i < n_ops; i++) {
		struct stub_op *o = &ops[i];

		if (stop || (!all && o->s != s)) {
			ops[kept++] = *o;
			continue;
		}
		if (o->kind == OP_COPY) {
			struct stub_stream *st = stream_get(o->s);

			if (op_run(o) && st && st->err == CUDA_SUCCESS)
				st->err = CUDA_ERROR_ILLEGAL_ADDRESS;
		} else if (o->ev) {
			if (o->gen > o->ev->done)
				o->ev->done = o->gen;
			if (o->ev == ev && o->gen == ev->gen)
				stop = 1;
		}
	}
	n_ops = kept;
}

static CUresult op_push(const struct stub_op *o)
{
	if (grow((void **)&ops, &cap_ops, n_ops + 1, sizeof(*ops)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	ops[n_ops] = *o;
	ops[n_ops].s = stream_key(o->s);
	n_ops++;
	return CUDA_SUCCESS;
}

STUB_EXPORT CUresult CUDAAPI cuStreamCreate(CUstream *ph, unsigned int flags)
{
	CUstream s;

	ENTER(cuStreamCreate, S_STREAMCREATE);
	if (!cur_ctx)
		LEAVE(CUDA_ERROR_INVALID_CONTEXT);
	if (!ph || (flags & ~CU_STREAM_NON_BLOCKING))
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	if (!stream_get(NULL) ||
	    grow((void **)&streams, &cap_streams, n_streams + 1, sizeof(*streams)))
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	s = malloc(1);			/* a unique address, never dereferenced */
	if (!s)
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	streams[n_streams++] = (struct stub_stream){ s, CUDA_SUCCESS };
	*ph = s;
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

/* The driver lets queued work finish after a destroy; here it runs first. */
STUB_EXPORT CUresult CUDAAPI cuStreamDestroy(CUstream s)
{
	size_t i;

	ENTER(cuStreamDestroy, S_STREAMDESTROY);
	for (i = 2; s && i < n_streams; i++)
		if (streams[i].h == s) {
			drain(s, 0, NULL);
			free(s);
			streams[i] = streams[--n_streams];
			LEAVE(CUDA_SUCCESS);
		}
	LEAVE(CUDA_ERROR_INVALID_HANDLE);
	EXIT;
}

STUB_EXPORT CUresult CUDAAPI cuStreamSynchronize(CUstream s)
{
	struct stub_stream *st;

	ENTER(cuStreamSynchronize, S_STREAMSYNC);
	if (!cur_ctx)
		LEAVE(CUDA_ERROR_INVALID_CONTEXT);
	st = stream_get(s);
	if (!st)
		LEAVE(CUDA_ERROR_INVALID_HANDLE);
	n_syncs++;
	drain(s, 0, NULL);
	LEAVE(st->err);
	EXIT;
}

STUB_EXPORT CUresult CUDAAPI cuCtxSynchronize(void)
{
	size_t i;

	ENTER(cuCtxSynchronize, S_CTXSYNC);
	if (!cur_ctx)
		LEAVE(CUDA_ERROR_INVALID_CONTEXT);
	n_syncs++;
	drain(NULL, 1, NULL);
	_r = CUDA_SUCCESS;
	for (i = 0; i < n_streams && !_r; i++)
		_r = streams[i].err;
	EXIT;
}

STUB_EXPORT CUresult CUDAAPI cuEventCreate(CUevent *ph, unsigned int flags)
{
	struct stub_event *e;

	ENTER(cuEventCreate, S_EVCREATE);
	if (!cur_ctx)
		LEAVE(CUDA_ERROR_INVALID_CONTEXT);
	if (!ph || (flags & ~(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING)))
		LEAVE(CUDA_ERROR_INVALID_VALUE);	/* interprocess: not modelled */
	if (grow((void **)&events, &cap_events, n_events + 1, sizeof(*events)))
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	e = calloc(1, sizeof(*e));
	if (!e)
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	events[n_events++] = e;
	*ph = (CUevent)e;
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

STUB_EXPORT CUresult CUDAAPI cuEventDestroy(CUevent ev)
{
	struct stub_event *e;
	size_t i;

	ENTER(cuEventDestroy, S_EVDESTROY);
	e = event_get(ev);
	if (!e)
		LEAVE(CUDA_ERROR_INVALID_HANDLE);
	for (i = 0; i < n_ops; i++)
		if (ops[i].ev == e)
			ops[i].ev = NULL;
	for (i = 0; i < n_events; i++)
		if (events[i] == e)
			events[i] = events[--n_events];
	free(e);
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

STUB_EXPORT CUresult CUDAAPI cuEventRecord(CUevent ev, CUstream s)
{
	struct stub_op o = { .kind = OP_EVENT, .s = s };
	struct stub_event *e;

	ENTER(cuEventRecord, S_EVRECORD);
	if (!cur_ctx)
		LEAVE(CUDA_ERROR_INVALID_CONTEXT);
	e = event_get(ev);
	if (!e || !stream_get(s))
		LEAVE(CUDA_ERROR_INVALID_HANDLE);
	o.ev = e;
	o.gen = e->gen + 1;
	_r = op_push(&o);
	if (_r)
		goto out;
	e->gen = o.gen;
	e->s = stream_key(s);
	EXIT;
}

/* Done: never recorded, or its last record ran. */
STUB_EXPORT CUresult CUDAAPI cuEventQuery(CUevent ev)
{
	struct stub_event *e;

	ENTER(cuEventQuery, S_EVQUERY);
	e = event_get(ev);
	if (!e)
		LEAVE(CUDA_ERROR_INVALID_HANDLE);
	LEAVE(e->done == e->gen ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY);
	EXIT;
}

STUB_EXPORT CUresult CUDAAPI cuEventSynchronize(CUevent ev)
{
	struct stub_event *e;

	ENTER(cuEventSynchronize, S_EVSYNC);
	e = event_get(ev);
	if (!e)
		LEAVE(CUDA_ERROR_INVALID_HANDLE);
	n_syncs++;
	if (e->gen == e->done)			/* never recorded, or done */
		LEAVE(CUDA_SUCCESS);
	drain(e->s, 0, e);
	LEAVE(stream_get(e->s)->err);
	EXIT;
}

/*
 * One operand of a 2D copy: its address and whether it is host memory
 * (*host), pinned (*pinned); CUDA_ERROR_INVALID_VALUE for arrays, for
 * device operands not mapped with @prot, and for "host" memory that is
 * device address space.  CU_MEMORYTYPE_UNIFIED is resolved by the address.
 */
static CUresult operand(CUmemorytype type, const void *host, CUdeviceptr dev, size_t x,
			size_t pitch, size_t width, size_t height, int prot,
			uintptr_t *p, int *is_host, int *pinned)
{
	size_t span;

	if (type == CU_MEMORYTYPE_UNIFIED) {
		type = is_device_va(dev, 1) ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
		host = (const void *)(uintptr_t)dev;
	}
	switch (type) {
	case CU_MEMORYTYPE_DEVICE:
		*p = dev + x;
		*is_host = 0;
		*pinned = 1;
		return rows_ok(*p, pitch, width, height, prot) ? CUDA_SUCCESS
							       : CUDA_ERROR_INVALID_VALUE;
	case CU_MEMORYTYPE_HOST:
		*p = (uintptr_t)host + x;
		*is_host = 1;
		span = span_of(*p, pitch, width, height);
		if (!host || !span || is_device_va(*p, span))
			return CUDA_ERROR_INVALID_VALUE;
		*pinned = !!hostreg_find(*p, span);
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;	/* arrays: not modelled */
	}
}

/*
 * Any direction between host and device memory.  The pitches are checked
 * against the width, as the driver does, and every row of a device
 * operand against the mappings and their access; rows are never offset
 * (srcY, dstY), which kvshare does not use.
 */
STUB_EXPORT CUresult CUDAAPI cuMemcpy2DAsync(const CUDA_MEMCPY2D *c, CUstream s)
{
	struct stub_op o = { .kind = OP_COPY, .s = s };
	int src_pinned, dst_pinned;
	struct stub_stream *st;
	size_t i;

	ENTER(cuMemcpy2DAsync, S_COPY2D);
	if (!cur_ctx)
		LEAVE(CUDA_ERROR_INVALID_CONTEXT);
	st = stream_get(s);
	if (!st)
		LEAVE(CUDA_ERROR_INVALID_HANDLE);
	if (!c || !c->WidthInBytes || !c->Height ||
	    c->srcPitch < c->WidthInBytes + c->srcXInBytes ||
	    c->dstPitch < c->WidthInBytes + c->dstXInBytes || c->srcY || c->dstY)
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	o.width = c->WidthInBytes;
	o.height = c->Height;
	o.spitch = c->srcPitch;
	o.dpitch = c->dstPitch;
	_r = operand(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, o.spitch,
		     o.width, o.height, PROT_READ, &o.src, &o.src_host, &src_pinned);
	if (_r)
		goto out;
	_r = operand(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, o.dpitch,
		     o.width, o.height, PROT_WRITE, &o.dst, &o.dst_host, &dst_pinned);
	if (_r)
		goto out;
	n_async++;
	if (src_pinned && dst_pinned)
		LEAVE(op_push(&o));
	/* Pageable: staged or waited for within the call, after what is queued. */
	n_pageable++;
	drain(s, 0, NULL);
	if (st->err)
		LEAVE(st->err);
	for (i = 0; i < o.height; i++)
		memmove((void *)(o.dst + i * o.dpitch), (const void *)(o.src + i * o.spitch),
			o.width);
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

/* ---- host memory registration and pointer attributes ---- */

#define STUB_HOSTREG_FLAGS	(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | \
				 CU_MEMHOSTREGISTER_READ_ONLY)

/*
 * The driver page-locks the pages the range touches (no alignment is
 * required since CUDA 4.1), so a range that shares a page with a
 * registered one is CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED.  Memory
 * that is not mapped in the process, or device address space, is
 * CUDA_ERROR_INVALID_VALUE; I/O memory (CU_MEMHOSTREGISTER_IOMEMORY) is
 * not modelled (CUDA_ERROR_NOT_SUPPORTED).
 */
STUB_EXPORT CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytesize, unsigned int flags)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), pbase, pend;
	unsigned char vec;
	size_t i;

	ENTER(cuMemHostRegister, S_HOSTREG);
	if (!cur_ctx)
		LEAVE(CUDA_ERROR_INVALID_CONTEXT);
	if (!p || !bytesize || (uintptr_t)p + bytesize < (uintptr_t)p)
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	if (flags & CU_MEMHOSTREGISTER_IOMEMORY)
		LEAVE(CUDA_ERROR_NOT_SUPPORTED);
	if (flags & ~STUB_HOSTREG_FLAGS)
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	pbase = (uintptr_t)p & ~(pg - 1);
	pend = ((uintptr_t)p + bytesize + pg - 1) & ~(pg - 1);
	if (is_device_va(pbase, pend - pbase))
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	for (i = 0; i < n_hostregs; i++)
		if (pbase < hostregs[i].pend && hostregs[i].pbase < pend)
			LEAVE(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
	for (i = pbase; i < pend; i += pg)	/* mapped throughout */
		if (mincore((void *)i, pg, &vec))
			LEAVE(CUDA_ERROR_INVALID_VALUE);
	if (grow((void **)&hostregs, &cap_hostregs, n_hostregs + 1, sizeof(*hostregs)))
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	hostregs[n_hostregs++] = (struct stub_hostreg){
		(uintptr_t)p, bytesize, pbase, pend, flags, ctx_dev(cur_ctx) };
	n_registers++;
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

/* Only the base address given to cuMemHostRegister unregisters. */
STUB_EXPORT CUresult CUDAAPI cuMemHostUnregister(void *p)
{
	size_t i;

	ENTER(cuMemHostUnregister, S_HOSTUNREG);
	if (!cur_ctx)
		LEAVE(CUDA_ERROR_INVALID_CONTEXT);
	for (i = 0; i < n_hostregs; i++)
		if (hostregs[i].base == (uintptr_t)p) {
			hostregs[i] = hostregs[--n_hostregs];
			LEAVE(CUDA_SUCCESS);
		}
	LEAVE(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
	EXIT;
}

/*
 * Device memory is a mapping (its range the reservation it lies in, its
 * device the allocation's); host memory is a registration (its range the
 * registered bytes); anything else is unknown to the driver:
 * CUDA_ERROR_INVALID_VALUE, as the driver answers for pageable memory.
 */
STUB_EXPORT CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute,
						   CUdeviceptr ptr)
{
	struct stub_range *m, *r;
	struct stub_hostreg *h;
	unsigned int type;
	uintptr_t base;
	size_t size;
	int dev;

	ENTER(cuPointerGetAttribute, S_PTRATTR);
	if (!data)
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	m = range_find(maps, n_maps, ptr);
	h = m ? NULL : hostreg_find(ptr, 1);
	if (m) {
		r = range_find(resv, n_resv, ptr);
		type = CU_MEMORYTYPE_DEVICE;
		dev = m->a->dev;
		base = r->base;
		size = r->size;
	} else if (h) {
		type = CU_MEMORYTYPE_HOST;
		dev = h->dev;
		base = h->base;
		size = h->size;
	} else {
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	}
	switch (attribute) {
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned int *)data = type;
		break;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		*(int *)data = dev;
		break;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		*(CUdeviceptr *)data = base;
		break;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		*(size_t *)data = size;
		break;
	default:
		LEAVE(CUDA_ERROR_INVALID_VALUE);	/* not modelled */
	}
	LEAVE(CUDA_SUCCESS);
	EXIT;
}

/* ---- the stand-in's own ---- */

/* Live objects of this process, for leak checks. */
STUB_EXPORT void kvs_cudastub_counts(int *allocs, int *live_handles, int *reservations,
				     int *mappings)
{
	size_t i;
	int h = 0;

	pthread_mutex_lock(&lock);
	for (i = 0; i < n_handles; i++)
		h += !!handles[i].a;
	if (allocs)
		*allocs = n_allocs;
	if (live_handles)
		*live_handles = h;
	if (reservations)
		*reservations = (int)n_resv;
	if (mappings)
		*mappings = (int)n_maps;
	pthread_mutex_unlock(&lock);
}

/* 1 and the mapping's range when @p is in a mapping with read access, else 0. */
STUB_EXPORT int kvs_cudastub_mapping(const void *p, uintptr_t *base, size_t *size)
{
	struct stub_range *m;
	int found = 0;

	pthread_mutex_lock(&lock);
	m = range_find(maps, n_maps, (uintptr_t)p);
	if (m && (m->prot & PROT_READ)) {
		*base = m->base;
		*size = m->size;
		found = 1;
	}
	pthread_mutex_unlock(&lock);
	return found;
}

/*
 * What the tests count, since the process started: "syncs" (stream, event
 * and context synchronisations), "async_copies" (cuMemcpy2DAsync calls),
 * "pageable_copies" (those with a host operand not registered),
 * "host_registers" (successful cuMemHostRegister calls), "host_registered"
 * (registrations live now), "queued" (work not run yet), "events" (live).
 * (unsigned long)-1 for an unknown name.
 */
STUB_EXPORT unsigned long kvs_cudastub_counter(const char *name)
{
	static const char *const names[] = { "syncs", "async_copies", "pageable_copies",
		"host_registers", "host_registered", "queued", "events" };
	unsigned long v[7], r = (unsigned long)-1;
	size_t i;

	pthread_mutex_lock(&lock);
	v[0] = n_syncs, v[1] = n_async, v[2] = n_pageable, v[3] = n_registers;
	v[4] = n_hostregs, v[5] = n_ops, v[6] = n_events;
	for (i = 0; name && i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(name, names[i]))
			r = v[i];
	pthread_mutex_unlock(&lock);
	return r;
}

STUB_EXPORT const char *kvs_cudastub_version(void)
{
	return "kvshare CUDA driver stand-in (tests only; memfd and mmap, no GPU)";
}
