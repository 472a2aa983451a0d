/* SPDX-License-Identifier: MIT */
/*
 * What the CUDA attention files share: error reporting, the host-side
 * argument checks, and the device helpers that load 16 bytes of fp16 or
 * bf16 as eight floats.
 */
#ifndef KV_CUDA_INTERNAL_CUH
#define KV_CUDA_INTERNAL_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>

#include <kvshare/attn.h>

/*
 * Every kernel launch: KV_LAUNCH(grid, block, shared bytes, stream, kernel)(args).
 * Under nvcc it is kernel<<<grid, block, shared bytes, stream>>>(args); when
 * the tests compile these files as host C++ for the CPU stand-in
 * (tests/simt, -DKV_SIMT) it is the stand-in's launcher.  The kernel comes
 * last because template arguments carry commas.
 */
#ifdef KV_SIMT
#define KV_LAUNCH(grid, block, smem, stream, ...) \
	KV_SIMT_LAUNCH(grid, block, smem, stream, __VA_ARGS__)
#else
#define KV_LAUNCH(grid, block, smem, stream, ...) \
	__VA_ARGS__<<<(grid), (block), (smem), (stream)>>>
#endif

#define KV_LN2		0.69314718055994531f
#define KV_LOG2E	1.4426950408889634f

/* Record @e as the last error; its -errno. */
int kv_cuda_fail(cudaError_t e);
/* The current device's SM count (cached), or 0. */
int kv_cuda_sm_count(void);

/*
 * Host checks every CUDA entry point makes: fp16/bf16, head dims 64, 128
 * and 256, q heads a multiple of KV heads, 16-byte aligned memory (the
 * kernels move 16 bytes at a time), grid limits.
 */
int kv_cuda_check(const struct kv_attn_kv *kv, const struct kv_attn_batch *b,
		  const struct kv_attn_params *p);

static inline bool kv_aligned16(const void *p)
{
	return !((uintptr_t)p & 15);
}

/* The pool as the kernels see one layer of it. */
struct kv_dev_layer {
	const char *base;
	uint64_t page_bytes;
	uint64_t k_off, v_off;		/* (layer, K|V) block inside a page */
	uint64_t tok_stride;		/* bytes between token rows */
	uint32_t tpp;
	uint32_t n_kv;
};

static inline struct kv_dev_layer kv_dev_layer_of(const struct kv_attn_kv *kv)
{
	struct kv_dev_layer d;

	d.base = (const char *)kv->base;
	d.page_bytes = kv_page_bytes(&kv->geom);
	d.k_off = kv_block_offset(&kv->geom, kv->layer, KV_K);
	d.v_off = kv_block_offset(&kv->geom, kv->layer, KV_V);
	d.tok_stride = kv_token_stride(&kv->geom);
	d.tpp = kv->geom.tokens_per_page;
	d.n_kv = kv->geom.n_kv_heads;
	return d;
}

/* Byte offset of token @t's row of KV head @h (add k_off or v_off). */
static __device__ __forceinline__ uint64_t kv_dev_row(const struct kv_dev_layer &L,
						      const uint32_t *pages, uint32_t t,
						      uint32_t h, uint32_t row_bytes)
{
	return (uint64_t)pages[t / L.tpp] * L.page_bytes + (t % L.tpp) * L.tok_stride +
	       (uint64_t)h * row_bytes;
}

/* 2^x on the SFU; 2^-inf = 0. */
static __device__ __forceinline__ float kv_ex2(float x)
{
#ifdef KV_SIMT
	return kv_simt_ex2_approx_ftz(x);	/* the stand-in's C equivalent */
#else
	float y;

	asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
	return y;
#endif
}

/* Eight elements in 16 bytes, to and from float. */
template <typename T> struct kv_vec;

template <> struct kv_vec<__half> {
	static __device__ __forceinline__ void load(const uint4 &u, float f[8])
	{
		const uint32_t w[4] = { u.x, u.y, u.z, u.w };

#pragma unroll
		for (int i = 0; i < 4; i++) {
			f[2 * i] = __half2float(__ushort_as_half((unsigned short)(w[i] & 0xffff)));
			f[2 * i + 1] = __half2float(__ushort_as_half((unsigned short)(w[i] >> 16)));
		}
	}
	static __device__ __forceinline__ uint4 store(const float f[8])
	{
		uint32_t w[4];

#pragma unroll
		for (int i = 0; i < 4; i++)
			w[i] = (uint32_t)__half_as_ushort(__float2half_rn(f[2 * i])) |
			       (uint32_t)__half_as_ushort(__float2half_rn(f[2 * i + 1])) << 16;
		return make_uint4(w[0], w[1], w[2], w[3]);
	}
};

template <> struct kv_vec<__nv_bfloat16> {
	static __device__ __forceinline__ void load(const uint4 &u, float f[8])
	{
		const uint32_t w[4] = { u.x, u.y, u.z, u.w };

#pragma unroll
		for (int i = 0; i < 4; i++) {
			f[2 * i] = __uint_as_float(w[i] << 16);
			f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
		}
	}
	static __device__ __forceinline__ uint4 store(const float f[8])
	{
		uint32_t w[4];

#pragma unroll
		for (int i = 0; i < 4; i++)
			w[i] = (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(f[2 * i])) |
			       (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(f[2 * i + 1])) << 16;
		return make_uint4(w[0], w[1], w[2], w[3]);
	}
};

/* A read-only 16-byte load through the non-coherent cache. */
static __device__ __forceinline__ uint4 kv_ld16(const void *p)
{
	return __ldg(reinterpret_cast<const uint4 *>(p));
}

#endif /* KV_CUDA_INTERNAL_CUH */
