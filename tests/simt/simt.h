/* SPDX-License-Identifier: MIT */
/*
 * The CPU stand-in for the GPU, kernel half: what CUDA C++ gives a .cu
 * file, for the exact libkv/attn/cuda_*.cu sources compiled as host C++
 * (g++ -DKV_SIMT -Itests/simt/include).  TEST-ONLY: never installed, never
 * linked into anything a user runs; the real build uses nvcc and the
 * real headers.
 *
 * The execution model (tests/simt/simt.cc):
 *   - every CUDA thread of a block is a fiber on one OS thread; blocks run
 *     one after another, so a kernel's `__shared__` array, which is a
 *     function-local `static` here, is exactly one copy per running block;
 *   - the threads run in rounds: each runnable thread runs until it waits
 *     (barrier, warp collective) or exits, in an order shuffled by the
 *     scheduling seed (KV_SIMT_SEED; 0 = in thread order);
 *   - a warp collective completes when every lane of its mask waits at
 *     the same one: all values are exchanged at once;
 *   - __syncthreads() releases when every live thread of the block waits
 *     at the same barrier; anything else is a deadlock or divergence,
 *     reported, and the launch fails;
 *   - the shared-memory checker (the kernel units are compiled with
 *     -fsanitize=thread for its instrumentation only; simt.cc defines the
 *     hooks) records per 4-byte word and barrier interval who wrote and
 *     read it, and reports write/write and read/write by different threads
 *     with no barrier between, and reads of words no thread of the block
 *     wrote;
 *   - every other access must be to the thread's own stack, the launch's
 *     parameters, or inside one device allocation (the runtime's): a
 *     kernel reading host memory or past an allocation is reported.
 *   A report fails the launch (cudaErrorLaunchFailure).
 *
 * What it cannot tell: timing, memory ordering between blocks or in
 * global memory, the SFU's rounding (ex2.approx is exp2f here), nvcc's
 * code generation.
 */
#ifndef KV_SIMT_H
#define KV_SIMT_H

#ifndef __cplusplus
#error "simt.h is the CUDA model for .cu files compiled as host C++"
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <tuple>
#include <type_traits>
#include <utility>

#ifndef KV_SIMT
#define KV_SIMT 1
#endif

/* ---- qualifiers ---- */
#define __global__
#define __device__
#define __host__
#define __forceinline__		inline __attribute__((always_inline))
#define __noinline__		__attribute__((noinline))
#define __launch_bounds__(...)
#define __restrict__		__restrict
/* One copy per running block: see above (blocks never overlap). */
#define __shared__		static __attribute__((aligned(16)))

/* ---- vector types ---- */
struct uint3 {
	unsigned int x, y, z;
};

struct dim3 {
	unsigned int x, y, z;
	constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
		: x(vx), y(vy), z(vz) {}
};

struct __attribute__((aligned(16))) uint4 {
	unsigned int x, y, z, w;
};

struct __attribute__((aligned(16))) float4 {
	float x, y, z, w;
};

static inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w)
{
	uint4 u = { x, y, z, w };

	return u;
}

static inline float4 make_float4(float x, float y, float z, float w)
{
	float4 f = { x, y, z, w };

	return f;
}

/* The running thread's coordinates: set by the scheduler on every switch. */
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
static constexpr int warpSize = 32;

/* ---- runtime types (the calls are in simt.cc) ---- */
typedef enum cudaError {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorInitializationError = 3,
	cudaErrorInvalidConfiguration = 9,
	cudaErrorInvalidDevicePointer = 17,
	cudaErrorInvalidMemcpyDirection = 21,
	cudaErrorInsufficientDriver = 35,
	cudaErrorNoDevice = 100,
	cudaErrorInvalidDevice = 101,
	cudaErrorInvalidResourceHandle = 400,
	cudaErrorIllegalAddress = 700,
	cudaErrorLaunchOutOfResources = 701,
	cudaErrorLaunchFailure = 719,
	cudaErrorNotSupported = 801,
	cudaErrorUnknown = 999,
} cudaError_t;

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;

enum cudaMemcpyKind {
	cudaMemcpyHostToHost = 0,
	cudaMemcpyHostToDevice = 1,
	cudaMemcpyDeviceToHost = 2,
	cudaMemcpyDeviceToDevice = 3,
	cudaMemcpyDefault = 4,
};

enum cudaDeviceAttr {
	cudaDevAttrMaxThreadsPerBlock = 1,
	cudaDevAttrMaxSharedMemoryPerBlock = 8,
	cudaDevAttrWarpSize = 10,
	cudaDevAttrMultiProcessorCount = 16,
	cudaDevAttrComputeCapabilityMajor = 75,
	cudaDevAttrComputeCapabilityMinor = 76,
};

struct cudaDeviceProp {
	char name[256];
	size_t totalGlobalMem, sharedMemPerBlock;
	int warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
	int major, minor, multiProcessorCount;
};

extern "C" {
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDevice(int *dev);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int dev);
cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr attr, int dev);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t s);
cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes,
			    enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemset(void *p, int byte, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int byte, size_t bytes, cudaStream_t s);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
}

/* ---- the execution model's entry points (simt.cc) ---- */
namespace kv_simt {

enum coll_kind { COLL_SHFL, COLL_SHFL_UP, COLL_SHFL_DOWN, COLL_SHFL_XOR,
		 COLL_BALLOT, COLL_ANY, COLL_ALL, COLL_SYNCWARP, COLL_MMA, COLL_LDMATRIX };

/* The operand types of mma.sync.aligned.m16n8k16.row.col.f32.<t>.<t>.f32. */
enum mma_type { MMA_BF16, MMA_F16 };

/*
 * One lane's fragments of an m16n8k16 mma (PTX ISA, "Matrix Fragments for
 * mma.m16n8k16 with floating point type"): a[4] and b[2] hold two 16-bit
 * elements each (the lower-numbered one in the low half), c[4]/d[4] one
 * f32 each.  The warp's 32 lanes together hold A (16x16), B (16x8), C and
 * D (16x8); the collective gathers them, computes D = A B + C, scatters D.
 */
struct mma_frag {
	uint32_t a[4], b[2];
	float c[4], d[4];
};
void mma_m16n8k16(mma_type t, mma_frag *f, const char *file, int line);

/*
 * ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16: lanes 8i .. 8i+7 give
 * the addresses of the 8 rows (16 bytes, 8 elements each) of matrix i;
 * every lane gets in r[i] two elements of matrix i: row lane/4, columns
 * 2 (lane%4) and 2 (lane%4) + 1; with .trans rows 2 (lane%4) and
 * 2 (lane%4) + 1 of column lane/4 (the lower-numbered in the low half).
 */
struct ldm_frag {
	const void *row;
	uint32_t r[4];
};
void ldmatrix_x4(bool trans, ldm_frag *f, const char *file, int line);

/*
 * cp.async.{ca,cg}.shared.global [dst], [src], bytes, src_bytes: the
 * source is read now (global memory does not change during a kernel), the
 * shared destination is written only when cp.async.wait_group retires the
 * copy's group; until then the checker reports any access to it.
 */
void cp_async(void *dst, const void *src, unsigned int bytes, unsigned int src_bytes,
	      const char *file, int line);
void cp_async_commit(void);
void cp_async_wait(int n, const char *file, int line);

/* cudaOccupancyMaxActiveBlocksPerMultiprocessor's model (simt.cc). */
int occupancy(const void *kernel, int block_threads, size_t dyn_smem);

/* A warp collective: this lane's @v in, the result out. */
uint64_t collective(coll_kind kind, unsigned int mask, uint64_t v, int arg, int width,
		    const char *file, int line);
void syncthreads(const char *file, int line);
/* The scheduling seed from now on (else KV_SIMT_SEED's, read at the first launch). */
void set_seed(uint64_t seed);

/* Between the execution model (simt.cc) and the runtime calls (simt_runtime.cc). */
/* The runtime's: a launch failed (@pending: cudaDeviceSynchronize reports it too). */
void record_error(cudaError_t e, bool pending);
/* The runtime's: the device allocation nearest @p at or below it (start, bytes), if any. */
bool device_range(const void *p, uintptr_t *start, size_t *bytes);
/* simt.cc's: the first report of the last failed launch. */
const char *launch_report(void);

/* Run @thunk(@ctx) as every thread of every block of the grid (@ctx_size: its bytes). */
void launch(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
	    void (*thunk)(void *), void *ctx, size_t ctx_size);

template <typename... P> struct launcher {
	const char *name;
	dim3 grid, block;
	size_t smem;
	cudaStream_t stream;
	void (*kernel)(P...);

	template <typename... A> void operator()(A &&...args) const
	{
		struct ctx {
			void (*k)(P...);
			std::tuple<typename std::decay<P>::type...> a;
		} c = { kernel, std::tuple<typename std::decay<P>::type...>(
					std::forward<A>(args)...) };

		launch(name, grid, block, smem, stream, [](void *p) {
			struct ctx *cp = (struct ctx *)p;

			/* Each thread gets its own copy of the parameters, as on a GPU. */
			std::apply(cp->k, cp->a);
		}, &c, sizeof(c));
	}
};

template <typename... P>
static inline launcher<P...> make_launcher(const char *name, dim3 grid, dim3 block,
					   size_t smem, cudaStream_t s, void (*k)(P...))
{
	return launcher<P...>{ name, grid, block, smem, s, k };
}

template <typename T> static inline uint64_t to_bits(T v)
{
	uint64_t u = 0;

	static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
	memcpy(&u, &v, sizeof(T));
	return u;
}

template <typename T> static inline T from_bits(uint64_t u)
{
	T v;

	memcpy(&v, &u, sizeof(T));
	return v;
}

} /* namespace kv_simt */

/* kernel<<<grid, block, smem, stream>>>(args), as libkv/attn/cuda_internal.cuh's KV_LAUNCH. */
#define KV_SIMT_LAUNCH(grid, block, smem, stream, ...) \
	::kv_simt::make_launcher(#__VA_ARGS__, grid, block, smem, stream, __VA_ARGS__)

#define __syncthreads()	::kv_simt::syncthreads(__FILE__, __LINE__)

/* ---- warp collectives ---- */
#define KV_SIMT_SITE	const char *file = __builtin_FILE(), int line = __builtin_LINE()

template <typename T>
static inline T __shfl_sync(unsigned int mask, T v, int src, int width = 32, KV_SIMT_SITE)
{
	return kv_simt::from_bits<T>(kv_simt::collective(kv_simt::COLL_SHFL, mask,
				     kv_simt::to_bits(v), src, width, file, line));
}

template <typename T>
static inline T __shfl_up_sync(unsigned int mask, T v, unsigned int d, int width = 32,
			       KV_SIMT_SITE)
{
	return kv_simt::from_bits<T>(kv_simt::collective(kv_simt::COLL_SHFL_UP, mask,
				     kv_simt::to_bits(v), (int)d, width, file, line));
}

template <typename T>
static inline T __shfl_down_sync(unsigned int mask, T v, unsigned int d, int width = 32,
				 KV_SIMT_SITE)
{
	return kv_simt::from_bits<T>(kv_simt::collective(kv_simt::COLL_SHFL_DOWN, mask,
				     kv_simt::to_bits(v), (int)d, width, file, line));
}

template <typename T>
static inline T __shfl_xor_sync(unsigned int mask, T v, int lane_mask, int width = 32,
				KV_SIMT_SITE)
{
	return kv_simt::from_bits<T>(kv_simt::collective(kv_simt::COLL_SHFL_XOR, mask,
				     kv_simt::to_bits(v), lane_mask, width, file, line));
}

static inline unsigned int __ballot_sync(unsigned int mask, int pred, KV_SIMT_SITE)
{
	return (unsigned int)kv_simt::collective(kv_simt::COLL_BALLOT, mask, pred != 0, 0, 32,
						 file, line);
}

static inline int __any_sync(unsigned int mask, int pred, KV_SIMT_SITE)
{
	return (int)kv_simt::collective(kv_simt::COLL_ANY, mask, pred != 0, 0, 32, file, line);
}

static inline int __all_sync(unsigned int mask, int pred, KV_SIMT_SITE)
{
	return (int)kv_simt::collective(kv_simt::COLL_ALL, mask, pred != 0, 0, 32, file, line);
}

static inline void __syncwarp(unsigned int mask = 0xffffffffu, KV_SIMT_SITE)
{
	kv_simt::collective(kv_simt::COLL_SYNCWARP, mask, 0, 0, 32, file, line);
}

/* ---- tensor cores and asynchronous copies (libkv/attn/cuda_internal.cuh wraps them) ---- */
static inline void kv_simt_mma_m16n8k16(kv_simt::mma_type t, float d[4], const uint32_t a[4],
					const uint32_t b[2], const float c[4], KV_SIMT_SITE)
{
	kv_simt::mma_frag f;

	memcpy(f.a, a, sizeof(f.a));
	memcpy(f.b, b, sizeof(f.b));
	memcpy(f.c, c, sizeof(f.c));
	kv_simt::mma_m16n8k16(t, &f, file, line);
	memcpy(d, f.d, sizeof(f.d));
}

static inline void kv_simt_ldmatrix_x4(bool trans, uint32_t r[4], const void *row,
				       KV_SIMT_SITE)
{
	kv_simt::ldm_frag f;

	f.row = row;
	kv_simt::ldmatrix_x4(trans, &f, file, line);
	memcpy(r, f.r, sizeof(f.r));
}

static inline void kv_simt_cp_async(void *dst, const void *src, unsigned int bytes,
				    unsigned int src_bytes, KV_SIMT_SITE)
{
	kv_simt::cp_async(dst, src, bytes, src_bytes, file, line);
}

static inline void kv_simt_cp_async_wait(int n, KV_SIMT_SITE)
{
	kv_simt::cp_async_wait(n, file, line);
}

/*
 * The blocks of @kernel one SM holds at once, from its block size and its
 * __shared__ arrays (found in the symbol table), as the driver computes
 * it for an H100/H200 (2048 threads, 32 blocks, 64 K registers, 228 KiB
 * shared memory with 1 KiB reserved per block).  The stand-in cannot know
 * the registers ptxas gives a thread: it assumes 64.
 */
template <typename K>
static inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, K kernel,
									int block_threads,
									size_t dyn_smem)
{
	if (!n || block_threads <= 0 || block_threads > 1024)
		return cudaErrorInvalidValue;
	*n = kv_simt::occupancy(reinterpret_cast<const void *>(kernel), block_threads, dyn_smem);
	return cudaSuccess;
}

/* ---- loads, bit casts, arithmetic ---- */
template <typename T> static inline T __ldg(const T *p)
{
	return *p;
}

static inline float __uint_as_float(unsigned int u)
{
	return kv_simt::from_bits<float>(u);
}

static inline unsigned int __float_as_uint(float f)
{
	return (unsigned int)kv_simt::to_bits(f);
}

static inline float __int_as_float(int i)
{
	return kv_simt::from_bits<float>((unsigned int)i);
}

static inline int __float_as_int(float f)
{
	return (int)kv_simt::to_bits(f);
}

static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
static inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long min(unsigned long long a, unsigned long long b)
{
	return a < b ? a : b;
}
static inline unsigned long long max(unsigned long long a, unsigned long long b)
{
	return a > b ? a : b;
}
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }

/* A float with a subnormal magnitude becomes a zero of its sign (.ftz). */
static inline float kv_simt_ftz(float x)
{
	return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x;
}

/*
 * ex2.approx.ftz.f32: 2^x with subnormal inputs and results flushed.  The
 * SFU's result is within 2 ulp of exp2; exp2f here is (nearly) exact, so
 * the stand-in's results differ from a GPU's in the last bits only.
 */
static inline float kv_simt_ex2_approx_ftz(float x)
{
	return kv_simt_ftz(exp2f(kv_simt_ftz(x)));
}

/* ---- fp16 and bf16: storage types with round-to-nearest-even conversions ---- */
static inline unsigned short kv_simt_f32_to_f16_rn(float f)
{
	uint32_t x = __float_as_uint(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
	uint32_t m, e, r;

	if (ax >= 0x7f800000u)					/* inf, NaN */
		return (unsigned short)(ax > 0x7f800000u ? 0x7fff : sign | 0x7c00);
	if (ax >= 0x477ff000u)					/* rounds past 65504 */
		return (unsigned short)(sign | 0x7c00);
	e = ax >> 23;
	if (e < 113) {						/* f16 subnormal or zero */
		int shift;

		if (e < 102)					/* below half the smallest */
			return (unsigned short)sign;
		m = (ax & 0x7fffffu) | 0x800000u;
		shift = 126 - (int)e;				/* 14 .. 24 */
		r = m >> shift;
		m &= (1u << shift) - 1;
		if (m > (1u << (shift - 1)) || (m == (1u << (shift - 1)) && (r & 1)))
			r++;
		return (unsigned short)(sign | r);
	}
	r = ((e - 112) << 10) | ((ax >> 13) & 0x3ffu);
	m = ax & 0x1fffu;
	if (m > 0x1000u || (m == 0x1000u && (r & 1)))
		r++;						/* may carry into the exponent: right */
	return (unsigned short)(sign | r);
}

static inline float kv_simt_f16_to_f32(unsigned short h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;

	if (e == 31)
		return __uint_as_float(sign | 0x7f800000u | (m << 13));
	if (e)
		return __uint_as_float(sign | ((e + 112) << 23) | (m << 13));
	/* Zero or subnormal: m * 2^-24, exact in float. */
	return __uint_as_float(sign) + (sign ? -1.0f : 1.0f) * (float)m * 0x1p-24f;
}

static inline unsigned short kv_simt_f32_to_bf16_rn(float f)
{
	uint32_t x = __float_as_uint(f);

	if ((x & 0x7fffffffu) > 0x7f800000u)
		return 0x7fff;					/* canonical NaN, as the GPU */
	x += 0x7fffu + ((x >> 16) & 1);
	return (unsigned short)(x >> 16);
}

struct __half {
	unsigned short __x;

	__half() = default;
	__half(float f) : __x(kv_simt_f32_to_f16_rn(f)) {}
	operator float() const { return kv_simt_f16_to_f32(__x); }
};

struct __nv_bfloat16 {
	unsigned short __x;

	__nv_bfloat16() = default;
	__nv_bfloat16(float f) : __x(kv_simt_f32_to_bf16_rn(f)) {}
	operator float() const { return __uint_as_float((uint32_t)__x << 16); }
};

typedef __half half;

static inline __half __ushort_as_half(unsigned short u)
{
	__half h;

	h.__x = u;
	return h;
}

static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline float __half2float(__half h) { return kv_simt_f16_to_f32(h.__x); }
static inline __half __float2half_rn(float f) { return __ushort_as_half(kv_simt_f32_to_f16_rn(f)); }
static inline __half __float2half(float f) { return __float2half_rn(f); }

static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u)
{
	__nv_bfloat16 b;

	b.__x = u;
	return b;
}

static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
static inline float __bfloat162float(__nv_bfloat16 b) { return (float)b; }
static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
	return __ushort_as_bfloat16(kv_simt_f32_to_bf16_rn(f));
}
static inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }

#endif /* KV_SIMT_H */
