// SPDX-License-Identifier: MIT
/*
 * Paged extend (prefill with a cached prefix) on CUDA, with causal masking.
 *
 * One block of 128 threads per (request, KV head, tile of 16 query
 * vectors), a query vector being one (new token, q head of the group)
 * pair, token-major: the q heads of a group share every K/V tile.  Eight
 * threads own one query vector, each 8 dims per 64 (16-byte chunks
 * interleaved so that the eight read 128 contiguous bytes of shared
 * memory).  K and V tiles of 32 tokens are gathered from their pages into
 * shared memory; per tile each vector computes 32 scores, rescales its
 * online softmax once, and accumulates V.  Token j is visible to the new
 * token at position pos when j <= pos; tiles past the block's last
 * position are never loaded, and slots past it are zero, not read.
 *
 * This CUDA-core kernel serves head dim 256 and page sizes that are not a
 * power of two; the others run on tensor cores (cuda_extend_tc.cuh).
 *
 * KV_SIMT_DROP_BARRIER and KV_SIMT_BAD_SHUFFLE break it on purpose, only in
 * the CPU stand-in's test build (tests/simt), to prove that its suite fails.
 */
#include "cuda_internal.cuh"

#define EXT_THREADS	128
#define EXT_VECS	16	/* query vectors per block */
#define EXT_BK		32	/* KV tokens per tile */

struct ext_args {
	struct kv_dev_layer L;
	const uint32_t *page_indptr, *pages, *seq_lens, *q_indptr;
	const void *q;
	void *out;
	float *lse;
	uint32_t nq, group;
	uint32_t tpp_shift;	/* log2 tokens_per_page (tensor-core kernel) */
	float scale2;
};

#include "cuda_extend_tc.cuh"

template <typename T, int D>
__global__ void __launch_bounds__(EXT_THREADS) kv_extend_kernel(const struct ext_args a)
{
	constexpr int CH = D / 64;		/* 16-byte chunks per thread */
	constexpr int VPR = D / 8;		/* 16-byte vectors per token row */
	constexpr uint32_t ROW_BYTES = D * 2;
	__shared__ uint4 sk[EXT_BK][VPR], sv[EXT_BK][VPR];

	const uint32_t req = blockIdx.z, kvh = blockIdx.y;
	const uint32_t q0 = a.q_indptr ? a.q_indptr[req] : req;
	const uint32_t n_new = a.q_indptr ? a.q_indptr[req + 1] - q0 : 1;
	const uint32_t G = a.group, n_vecs = n_new * G;
	const uint32_t v0 = blockIdx.x * EXT_VECS;
	const uint32_t seq = a.seq_lens[req], prefix = seq - n_new;
	const uint32_t *pt = a.pages + a.page_indptr[req];
	const int grp = threadIdx.x / 8, t8 = threadIdx.x % 8;
	float q[CH][8], acc[CH][8], m = -INFINITY, l = 0;

	if (v0 >= n_vecs)
		return;			/* the whole block: before any barrier */

	const uint32_t vi = v0 + grp;
	const bool vec_ok = vi < n_vecs;
	const uint32_t tok = vec_ok ? vi / G : 0, g = vi % G;
	/* Tokens [0, visible) are this vector's; the block needs [0, kv_end). */
	const uint32_t visible = vec_ok ? prefix + tok + 1 : 0;
	const uint32_t last = min(v0 + EXT_VECS, n_vecs) - 1;
	const uint32_t kv_end = prefix + last / G + 1;
	const size_t qrow = ((size_t)(q0 + tok) * a.nq + kvh * G + g) * D;

#pragma unroll
	for (int c = 0; c < CH; c++) {
#pragma unroll
		for (int i = 0; i < 8; i++) {
			q[c][i] = 0;
			acc[c][i] = 0;
		}
		if (vec_ok) {
			kv_vec<T>::load(kv_ld16((const char *)a.q + (qrow + c * 64 + t8 * 8) * 2), q[c]);
#pragma unroll
			for (int i = 0; i < 8; i++)
				q[c][i] *= a.scale2;
		}
	}

	for (uint32_t kt = 0; kt < kv_end; kt += EXT_BK) {
		float s[EXT_BK], mt = -INFINITY;

		KV_MAIN_LOOP();
#if !(defined(KV_SIMT) && defined(KV_SIMT_DROP_BARRIER))
		__syncthreads();	/* the previous tile is consumed */
#endif
		for (int e = threadIdx.x; e < EXT_BK * VPR; e += EXT_THREADS) {
			int j = e / VPR, x = e % VPR;
			uint32_t t = kt + j;
			uint4 kz = make_uint4(0, 0, 0, 0), vz = kz;

			if (t < kv_end) {
				uint64_t off = kv_dev_row(a.L, pt, t, kvh, ROW_BYTES) + x * 16;

				kz = kv_ld16(a.L.base + a.L.k_off + off);
				vz = kv_ld16(a.L.base + a.L.v_off + off);
			}
			sk[j][x] = kz;
			sv[j][x] = vz;
		}
		__syncthreads();

#pragma unroll
		for (int j = 0; j < EXT_BK; j++) {
			float x = 0;

#pragma unroll
			for (int c = 0; c < CH; c++) {
				float k[8];

				kv_vec<T>::load(sk[j][c * 8 + t8], k);
#pragma unroll
				for (int i = 0; i < 8; i++)
					x += q[c][i] * k[i];
			}
			x += __shfl_xor_sync(0xffffffffu, x, 4);
#if defined(KV_SIMT) && defined(KV_SIMT_BAD_SHUFFLE)
			x += __shfl_xor_sync(0xffffffffu, x, 1);	/* wrong on purpose */
#else
			x += __shfl_xor_sync(0xffffffffu, x, 2);
#endif
			x += __shfl_xor_sync(0xffffffffu, x, 1);
			s[j] = x;
			if (kt + j < visible)
				mt = fmaxf(mt, x);
		}
		if (mt == -INFINITY)
			continue;	/* nothing visible in this tile */

		const float mn = fmaxf(m, mt), c0 = kv_ex2(m - mn);

		l *= c0;
#pragma unroll
		for (int c = 0; c < CH; c++)
#pragma unroll
			for (int i = 0; i < 8; i++)
				acc[c][i] *= c0;
#pragma unroll
		for (int j = 0; j < EXT_BK; j++) {
			float pr = kt + j < visible ? kv_ex2(s[j] - mn) : 0.0f;

			l += pr;
#pragma unroll
			for (int c = 0; c < CH; c++) {
				float v[8];

				kv_vec<T>::load(sv[j][c * 8 + t8], v);
#pragma unroll
				for (int i = 0; i < 8; i++)
					acc[c][i] += pr * v[i];
			}
		}
		m = mn;
	}

	if (!vec_ok)
		return;
	{
		const float inv = l > 0 ? 1.0f / l : 0.0f;

#pragma unroll
		for (int c = 0; c < CH; c++) {
			float o[8];

#pragma unroll
			for (int i = 0; i < 8; i++)
				o[i] = acc[c][i] * inv;
			*reinterpret_cast<uint4 *>((char *)a.out + (qrow + c * 64 + t8 * 8) * 2) =
				kv_vec<T>::store(o);
		}
		if (a.lse && !t8)
			a.lse[qrow / D] = l > 0 ? (m + log2f(l)) * KV_LN2 : -INFINITY;
	}
}

/* Head dims 64 and 128 with power-of-two pages: the tensor-core kernel. */
static bool ext_tc_fits(const struct kv_attn_kv *kv)
{
	uint32_t tpp = kv->geom.tokens_per_page;

	return kv->geom.head_dim <= 128 && tpp && !(tpp & (tpp - 1));
}

template <typename T>
static void launch(const struct ext_args &a, uint32_t dim, bool tc, uint64_t max_vecs,
		   uint32_t n_kv, uint32_t n_reqs, cudaStream_t s)
{
	const uint32_t vecs = tc ? EXT_TC_VECS : EXT_VECS;
	const dim3 grid((uint32_t)((max_vecs + vecs - 1) / vecs), n_kv, n_reqs);

	if (tc && dim == 64)
		KV_LAUNCH(grid, EXT_TC_THREADS, 0, s, kv_extend_tc_kernel<T, 64>)(a);
	else if (tc)
		KV_LAUNCH(grid, EXT_TC_THREADS, 0, s, kv_extend_tc_kernel<T, 128>)(a);
	else if (dim == 64)
		KV_LAUNCH(grid, EXT_THREADS, 0, s, kv_extend_kernel<T, 64>)(a);
	else if (dim == 128)
		KV_LAUNCH(grid, EXT_THREADS, 0, s, kv_extend_kernel<T, 128>)(a);
	else
		KV_LAUNCH(grid, EXT_THREADS, 0, s, kv_extend_kernel<T, 256>)(a);
}

extern "C" int kv_attn_extend_cuda(const struct kv_attn_kv *kv, const struct kv_attn_batch *b,
				   const struct kv_attn_params *p, const void *q,
				   void *out, float *lse)
{
	struct ext_args a;
	uint64_t max_vecs;
	cudaError_t err;
	int ret;

	ret = kv_cuda_check_io(kv, b, p, q, out);
	if (ret)
		return ret > 0 ? 0 : ret;
	/* The grid is sized from the bound: without it there is no grid. */
	if (b->q_indptr && !b->max_q_len)
		return -EINVAL;
	kv_args_common(a, kv, b, p, q, out, lse);
	a.q_indptr = b->q_indptr;
	max_vecs = (uint64_t)(b->q_indptr ? b->max_q_len : 1) * a.group;
	/*
	 * The kernels count query vectors (n_new * group, a block's first
	 * plus up to EXT_TC_VECS) in 32 bits: past that they would wrap,
	 * silently, long before the grid's own limit.
	 */
	if (max_vecs > UINT32_MAX - EXT_TC_VECS)
		return -E2BIG;
	if (kv->geom.dtype == KVS_DTYPE_BF16)
		launch<__nv_bfloat16>(a, kv->geom.head_dim, ext_tc_fits(kv), max_vecs,
				      kv->geom.n_kv_heads, b->n_reqs, (cudaStream_t)p->stream);
	else
		launch<__half>(a, kv->geom.head_dim, ext_tc_fits(kv), max_vecs,
			       kv->geom.n_kv_heads, b->n_reqs, (cudaStream_t)p->stream);
	err = cudaGetLastError();
	return err == cudaSuccess ? 0 : kv_cuda_fail(err);
}
