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

/*
 * The stand-in reports a warp-collective instruction (mma, ldmatrix) by
 * the kernel's line: its wrappers below take the caller's site there.
 */
#ifdef KV_SIMT
#define KV_SITE_PARAM	, KV_SIMT_SITE
#define KV_SITE_ARGS	, file, line
#define KV_SIMT_SITE_OR_VOID	KV_SIMT_SITE
#else
#define KV_SIMT_SITE_OR_VOID	void
#define KV_SITE_PARAM
#define KV_SITE_ARGS
#endif

/*
 * The first statement of a kernel's main loop (the one over KV tiles):
 * a PTX comment that tests/ptx/ptx_check.py finds to count that loop's
 * instructions and loads, rather than guess the loop.  ptxas drops
 * comments, so nothing of it reaches the SASS; the stand-in has no PTX.
 */
#ifdef KV_SIMT
#define KV_MAIN_LOOP()	do { } while (0)
#else
#define KV_MAIN_LOOP()	asm volatile("// kvshare:main-loop")
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

/*
 * What decode and extend check first: kv_cuda_check(), then (unless the
 * batch is empty) their q and out.  1 for an empty batch (nothing to
 * launch), 0 to go on, or -errno.
 */
static inline int kv_cuda_check_io(const struct kv_attn_kv *kv, const struct kv_attn_batch *b,
				   const struct kv_attn_params *p, const void *q, const void *out)
{
	int ret = kv_cuda_check(kv, b, p);

	if (ret)
		return ret;
	if (!b->n_reqs)
		return 1;
	if (!q || !out || !kv_aligned16(q) || !kv_aligned16(out))
		return -EINVAL;
	return 0;
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

/*
 * The launch arguments decode and extend fill alike, in each one's own
 * struct @a (zeroed first): the layer, the page tables, q, out and lse,
 * the heads, log2 tokens_per_page and the softmax scale in base 2.
 */
template <typename A>
static inline void kv_args_common(A &a, const struct kv_attn_kv *kv,
				  const struct kv_attn_batch *b, const struct kv_attn_params *p,
				  const void *q, void *out, float *lse)
{
	float scale = p->scale ? p->scale : 1.0f / sqrtf((float)kv->geom.head_dim);

	memset(&a, 0, sizeof(a));
	a.L = kv_dev_layer_of(kv);
	a.page_indptr = b->page_indptr;
	a.pages = b->pages;
	a.seq_lens = b->seq_lens;
	a.q = q;
	a.out = out;
	a.lse = lse;
	a.nq = p->n_q_heads;
	a.group = p->n_q_heads / kv->geom.n_kv_heads;
	a.tpp_shift = (uint32_t)__builtin_ctz(kv->geom.tokens_per_page | 1u << 31);
	a.scale2 = scale * KV_LOG2E;
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

/*
 * Two elements in 32 bits, the first in the low half: pack() rounds two
 * floats to them (cvt.rn), elem(w, i) is element @i (0 or 1) of @w as a
 * float.  The one statement of each conversion, for kv_vec and kv_mma.
 */
template <typename T> struct kv_pair;

template <> struct kv_pair<__half> {
	static __device__ __forceinline__ uint32_t pack(float lo, float hi)
	{
		return (uint32_t)__half_as_ushort(__float2half_rn(lo)) |
		       (uint32_t)__half_as_ushort(__float2half_rn(hi)) << 16;
	}
	static __device__ __forceinline__ float elem(uint32_t w, int i)
	{
		return __half2float(__ushort_as_half((unsigned short)(i ? w >> 16 : w & 0xffff)));
	}
};

template <> struct kv_pair<__nv_bfloat16> {
	static __device__ __forceinline__ uint32_t pack(float lo, float hi)
	{
		return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
		       (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16;
	}
	/* A bf16 is the top half of an fp32: shifting it there is the conversion. */
	static __device__ __forceinline__ float elem(uint32_t w, int i)
	{
		return __uint_as_float(i ? w & 0xffff0000u : w << 16);
	}
};

/* Eight elements in 16 bytes, to and from float. */
template <typename T> struct kv_vec {
	static __device__ __forceinline__ void load(const uint4 &u, float f[8])
	{
		const uint32_t w[4] = { u.x, u.y, u.z, u.w };

#pragma unroll
		for (int i = 0; i < 4; i++) {
			f[2 * i] = kv_pair<T>::elem(w[i], 0);
			f[2 * i + 1] = kv_pair<T>::elem(w[i], 1);
		}
	}
	static __device__ __forceinline__ uint4 store(const float f[8])
	{
		uint32_t w[4];

#pragma unroll
		for (int i = 0; i < 4; i++)
			w[i] = kv_pair<T>::pack(f[2 * i], f[2 * i + 1]);
		return make_uint4(w[0], w[1], w[2], w[3]);
	}
};

/*
 * Tensor cores and asynchronous copies (sm_80 and later), as inline PTX
 * under nvcc and as the stand-in's implementations under -DKV_SIMT, which
 * model them as the PTX ISA defines them (tests/simt/simt.h).
 *
 * kv_mma_16816<T>: mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32, D = A B + C
 * for the warp; every lane passes its fragments: a[4] (A, 16x16, two
 * elements a register), b[2] (B, 16x8), c[4] and d[4] (16x8 f32), laid out
 * by groupID = lane >> 2 and threadID_in_group = lane % 4 as the PTX ISA's
 * "Matrix Fragments for mma.m16n8k16 with floating point type" says.
 */
template <typename T> struct kv_mma;

/*
 * The one mma statement of both kv_mma<T>::run, but for the PTX type name
 * @TY (pasted into the asm string, which must be a literal) and the
 * stand-in's @MODE.
 */
#ifdef KV_SIMT
#define KV_MMA_16816(TY, MODE, d, a, b, c) \
	kv_simt_mma_m16n8k16(MODE, d, a, b, c KV_SITE_ARGS)
#else
#define KV_MMA_16816(TY, MODE, d, a, b, c)					\
	asm("mma.sync.aligned.m16n8k16.row.col.f32." #TY "." #TY ".f32 "	\
	    "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"	\
	    : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])			\
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),	\
	      "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]))
#endif

/* pack() and elem() (kv_pair<T>) give the fragments' elements. */
template <> struct kv_mma<__nv_bfloat16> : kv_pair<__nv_bfloat16> {
	static __device__ __forceinline__ void run(float d[4], const uint32_t a[4],
						   const uint32_t b[2], const float c[4] KV_SITE_PARAM)
	{
		KV_MMA_16816(bf16, kv_simt::MMA_BF16, d, a, b, c);
	}
};

template <> struct kv_mma<__half> : kv_pair<__half> {
	static __device__ __forceinline__ void run(float d[4], const uint32_t a[4],
						   const uint32_t b[2], const float c[4] KV_SITE_PARAM)
	{
		KV_MMA_16816(f16, kv_simt::MMA_F16, d, a, b, c);
	}
};

/*
 * ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16: lane 8i + k passes the
 * address of row k (16 bytes) of matrix i; r[i] is this lane's fragment of
 * matrix i, as an mma operand wants it (row lane/4, columns 2 (lane%4) and
 * +1), or of its transpose with TRANS.
 */
template <bool TRANS>
static __device__ __forceinline__ void kv_ldmatrix_x4(uint32_t r[4],
						      const void *row KV_SITE_PARAM)
{
#ifdef KV_SIMT
	kv_simt_ldmatrix_x4(TRANS, r, row KV_SITE_ARGS);
#else
	const uint32_t a = (uint32_t)__cvta_generic_to_shared(row);

	if (TRANS)
		asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
			     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
	else
		asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
			     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
#endif
}

/*
 * cp.async.cg.shared.global: 16 bytes from global @src to shared @dst,
 * bypassing L1; @valid false writes 16 zero bytes and reads nothing
 * (src-size 0).  They land when cp.async.wait_group retires their group.
 */
static __device__ __forceinline__ void kv_cp_async16(void *dst, const void *src,
						     bool valid KV_SITE_PARAM)
{
#ifdef KV_SIMT
	kv_simt_cp_async(dst, src, 16, valid ? 16 : 0 KV_SITE_ARGS);
#else
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
		     :: "r"((uint32_t)__cvta_generic_to_shared(dst)), "l"(src),
			"r"(valid ? 16 : 0) : "memory");
#endif
}

/* cp.async.commit_group: this thread's copies since the last commit form a group. */
static __device__ __forceinline__ void kv_cp_async_commit(void)
{
#ifdef KV_SIMT
	kv_simt::cp_async_commit();
#else
	asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

/* cp.async.wait_group N: all but this thread's newest N groups have landed. */
template <int N>
static __device__ __forceinline__ void kv_cp_async_wait(KV_SIMT_SITE_OR_VOID)
{
#ifdef KV_SIMT
	kv_simt_cp_async_wait(N KV_SITE_ARGS);
#else
	asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
#endif
}

/* A read-only 16-byte load through the non-coherent cache. */
static __device__ __forceinline__ uint4 kv_ld16(const void *p)
{
	return __ldg(reinterpret_cast<const uint4 *>(p));
}

#endif /* KV_CUDA_INTERNAL_CUH */
