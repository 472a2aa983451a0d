// SPDX-License-Identifier: MIT
/*
 * Paged decode on CUDA, flash-decoding style.
 *
 * One block of 128 threads per (request, KV split, KV head, chunk of 1, 2,
 * 4 or GMAX q heads of its group).  D / 8 threads cover one token row of the
 * head with 16-byte loads, so a block has 128 / (D / 8) token rows in
 * flight, U of them per thread per step; every thread keeps an online
 * softmax (max, sum, 8 output dims) for each q head of the chunk, which
 * therefore share every K and V load.  At the end the rows are merged by
 * their maxima: inside a warp by shuffles, across warps through shared
 * memory.  Long contexts are split along the KV length so that small
 * batches still fill the GPU; a second kernel merges the splits by their
 * log-sum-exp.
 *
 * Scores are kept in base 2 (the scale folded with log2 e into q), so the
 * exponentials are single ex2.approx instructions.
 *
 * GQA groups of TC_MIN_GROUP or more at head dims 64 and 128, with a
 * power-of-two page size, run the tensor-core kernel instead
 * (cuda_decode_tc.cuh); the merge of the splits is the same.
 */
#include "cuda_internal.cuh"

#define DEC_THREADS	128
#define GMAX		8	/* most q heads per block sharing the loads */

struct dec_args {
	struct kv_dev_layer L;
	const uint32_t *page_indptr, *pages, *seq_lens;
	const void *q;
	void *out;
	float *lse;
	float *part_o;		/* [req][nq][split][D] when split */
	float *part_lse;	/* [req][nq][split], base 2 */
	uint32_t nq, group, n_qchunks;
	uint32_t n_splits, chunk;
	uint32_t tpp_shift;	/* log2 tokens_per_page (tensor-core kernel) */
	float scale2;
};

#include "cuda_decode_tc.cuh"

/* Fold state (m2, l2, a2) into (m, l, a): both are partial softmaxes. */
static __device__ __forceinline__ void merge_state(float &m, float &l, float a[8],
						   float m2, float l2, const float a2[8])
{
	float mn = fmaxf(m, m2), c1, c2;

	if (mn == -INFINITY)
		return;			/* both empty */
	c1 = kv_ex2(m - mn);
	c2 = kv_ex2(m2 - mn);
	l = l * c1 + l2 * c2;
#pragma unroll
	for (int i = 0; i < 8; i++)
		a[i] = a[i] * c1 + a2[i] * c2;
	m = mn;
}

/*
 * Token rows a thread loads per step: 4 where registers allow, 2 for
 * GMAX heads.  On sm_80 f16 at 4 heads takes 3: its conversions need a
 * few more registers than 4 blocks an SM leave (128), and 4 rows spilled
 * 24 bytes (ptxas; tests/ptx).  The stand-in (KV_SIMT) runs the 3 too, so
 * that both step sizes are checked on the CPU (bf16 keeps the 4).
 */
template <typename T> struct dec_is_f16 { static constexpr bool value = false; };
template <> struct dec_is_f16<__half> { static constexpr bool value = true; };

template <typename T, int GC> __host__ __device__ constexpr int dec_unroll()
{
#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900) || defined(KV_SIMT)
	if (GC == 4 && dec_is_f16<T>::value)
		return 3;
#endif
	return GC <= 4 ? 4 : 2;
}

/*
 * GC: q heads per block (1, 2, 4 or GMAX), the smallest that holds the
 * group, so that registers go to loads in flight rather than to unused
 * heads; UNROLL token rows per thread per step where registers allow.
 */
template <typename T, int D, int GC>
__global__ void __launch_bounds__(DEC_THREADS, GC <= 4 ? 4 : 2)
kv_decode_kernel(const struct dec_args a)
{
	constexpr int UNROLL = dec_unroll<T, GC>();
	constexpr int LANES = D / 8;			/* threads per token row */
	constexpr int ROWS = DEC_THREADS / LANES;	/* rows in flight per step */
	constexpr int WARPS = DEC_THREADS / 32;
	constexpr uint32_t ROW_BYTES = D * 2;
	__shared__ float sm_acc[WARPS][GC][D];
	__shared__ float sm_m[WARPS][GC], sm_l[WARPS][GC];

	const uint32_t req = blockIdx.x / a.n_splits, split = blockIdx.x % a.n_splits;
	const uint32_t kvh = blockIdx.y / a.n_qchunks;
	const uint32_t g0 = (blockIdx.y % a.n_qchunks) * GC;
	const int ng = min(GC, (int)(a.group - g0));
	const uint32_t hq0 = kvh * a.group + g0;
	const int lane = threadIdx.x % LANES, slot = threadIdx.x / LANES;
	const int warp = threadIdx.x / 32;
	const uint32_t seq = a.seq_lens[req];
	const uint32_t *pt = a.pages + a.page_indptr[req];
	uint32_t t0 = min(split * a.chunk, seq);
	uint32_t t1 = split + 1 == a.n_splits ? seq : min(seq, t0 + a.chunk);
	float q[GC][8], acc[GC][8], m[GC], l[GC];

#pragma unroll
	for (int g = 0; g < GC; g++) {
		m[g] = -INFINITY;
		l[g] = 0;
#pragma unroll
		for (int i = 0; i < 8; i++) {
			acc[g][i] = 0;
			q[g][i] = 0;
		}
		if (g < ng) {
			const char *qp = (const char *)a.q +
				(((size_t)req * a.nq + hq0 + g) * D + lane * 8) * 2;

			kv_vec<T>::load(kv_ld16(qp), q[g]);
#pragma unroll
			for (int i = 0; i < 8; i++)
				q[g][i] *= a.scale2;
		}
	}

	/* Every thread runs the same steps, so the shuffles below are whole-warp. */
	for (uint32_t base = t0; base < t1; base += ROWS * UNROLL) {
		uint4 kr[UNROLL], vr[UNROLL];
		bool ok[UNROLL];

		KV_MAIN_LOOP();
#pragma unroll
		for (int u = 0; u < UNROLL; u++) {
			uint32_t t = base + u * ROWS + slot;

			ok[u] = t < t1;
			kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
			if (ok[u]) {
				uint64_t off = kv_dev_row(a.L, pt, t, kvh, ROW_BYTES) + lane * 16;

				kr[u] = kv_ld16(a.L.base + a.L.k_off + off);
				vr[u] = kv_ld16(a.L.base + a.L.v_off + off);
			}
		}
#pragma unroll
		for (int u = 0; u < UNROLL; u++) {
			float k[8], v[8];

			kv_vec<T>::load(kr[u], k);
			kv_vec<T>::load(vr[u], v);
#pragma unroll
			for (int g = 0; g < GC; g++) {
				float x = 0, mn, c, pr;

				if (g >= ng)
					break;
#pragma unroll
				for (int i = 0; i < 8; i++)
					x += q[g][i] * k[i];
#pragma unroll
				for (int o = LANES / 2; o > 0; o >>= 1)
					x += __shfl_xor_sync(0xffffffffu, x, o);
				if (!ok[u])
					continue;
				mn = fmaxf(m[g], x);
				c = kv_ex2(m[g] - mn);
				pr = kv_ex2(x - mn);
				l[g] = l[g] * c + pr;
#pragma unroll
				for (int i = 0; i < 8; i++)
					acc[g][i] = acc[g][i] * c + pr * v[i];
				m[g] = mn;
			}
		}
	}

	/* Merge the token rows of a warp (lanes LANES apart hold the same dims). */
#pragma unroll
	for (int o = LANES; o < 32; o <<= 1) {
#pragma unroll
		for (int g = 0; g < GC; g++) {
			float m2 = __shfl_xor_sync(0xffffffffu, m[g], o);
			float l2 = __shfl_xor_sync(0xffffffffu, l[g], o);
			float a2[8];

#pragma unroll
			for (int i = 0; i < 8; i++)
				a2[i] = __shfl_xor_sync(0xffffffffu, acc[g][i], o);
			merge_state(m[g], l[g], acc[g], m2, l2, a2);
		}
	}
	/* Then the warps, through shared memory, into the first row of warp 0. */
	if (threadIdx.x % 32 < LANES) {
#pragma unroll
		for (int g = 0; g < GC; g++) {
#pragma unroll
			for (int i = 0; i < 8; i++)
				sm_acc[warp][g][lane * 8 + i] = acc[g][i];
			if (!lane) {
				sm_m[warp][g] = m[g];
				sm_l[warp][g] = l[g];
			}
		}
	}
	__syncthreads();
	if (threadIdx.x >= LANES)
		return;
	for (int w = 1; w < WARPS; w++) {
#pragma unroll
		for (int g = 0; g < GC; g++) {
			float a2[8];

#pragma unroll
			for (int i = 0; i < 8; i++)
				a2[i] = sm_acc[w][g][lane * 8 + i];
			merge_state(m[g], l[g], acc[g], sm_m[w][g], sm_l[w][g], a2);
		}
	}

#pragma unroll
	for (int g = 0; g < GC; g++) {
		size_t row = (size_t)req * a.nq + hq0 + g;
		float inv = l[g] > 0 ? 1.0f / l[g] : 0.0f, o[8];

		if (g >= ng)
			break;
#pragma unroll
		for (int i = 0; i < 8; i++)
			o[i] = acc[g][i] * inv;
		if (a.n_splits == 1) {
			char *op = (char *)a.out + (row * D + lane * 8) * 2;

			*reinterpret_cast<uint4 *>(op) = kv_vec<T>::store(o);
			if (a.lse && !lane)
				a.lse[row] = l[g] > 0 ? (m[g] + log2f(l[g])) * KV_LN2 : -INFINITY;
		} else {
			size_t ps = row * a.n_splits + split;
			float4 *pp = reinterpret_cast<float4 *>(a.part_o + ps * D + lane * 8);

			pp[0] = make_float4(o[0], o[1], o[2], o[3]);
			pp[1] = make_float4(o[4], o[5], o[6], o[7]);
			if (!lane)
				a.part_lse[ps] = l[g] > 0 ? m[g] + log2f(l[g]) : -INFINITY;
		}
	}
}

/* Merge the splits of one (request, q head): block of D threads, one dim each. */
template <typename T>
__global__ void kv_combine_kernel(const float *part_o, const float *part_lse,
				  uint32_t n_splits, uint32_t dim, void *out, float *lse)
{
	const size_t row = blockIdx.x;
	const float *pl = part_lse + row * n_splits;
	float mx = -INFINITY, sum = 0, o = 0;
	uint32_t s;

	for (s = 0; s < n_splits; s++)
		mx = fmaxf(mx, pl[s]);
	for (s = 0; s < n_splits; s++) {
		float w = mx == -INFINITY ? 0.0f : kv_ex2(pl[s] - mx);

		sum += w;
		o += w * part_o[(row * n_splits + s) * dim + threadIdx.x];
	}
	o = sum > 0 ? o / sum : 0.0f;
	reinterpret_cast<T *>(out)[row * dim + threadIdx.x] = T(o);
	if (lse && !threadIdx.x)
		lse[row] = sum > 0 ? (mx + log2f(sum)) * KV_LN2 : -INFINITY;
}

struct dec_plan {
	bool tc;		/* the tensor-core kernel */
	uint32_t gc;		/* q heads per block */
	uint32_t n_qchunks, n_splits, chunk;
};

/* Does (dtype, head dim, group, page size) run on the tensor-core kernel? */
static bool tc_fits(const struct kv_attn_kv *kv, uint32_t group)
{
	uint32_t tpp = kv->geom.tokens_per_page;

	return group >= TC_MIN_GROUP && kv->geom.head_dim <= 128 && tpp && !(tpp & (tpp - 1));
}

template <typename T> static int tc_blocks_per_sm_t(uint32_t dim)
{
	int n = 0;
	cudaError_t e;

	if (dim == 64)
		e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kv_decode_tc_kernel<T, 64>,
								  tc_shape<64>::THREADS, 0);
	else
		e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kv_decode_tc_kernel<T, 128>,
								  tc_shape<128>::THREADS, 0);
	return e == cudaSuccess ? n : 0;
}

/*
 * Blocks of the tensor-core kernel one SM runs at once, from the occupancy
 * API (registers and shared memory as compiled), cached per (dtype, dim).
 */
static int tc_blocks_per_sm(uint32_t dtype, uint32_t dim)
{
	static int cache[2][2];
	int *c = &cache[dtype == KVS_DTYPE_BF16][dim == 128];

	if (!*c) {
		int n = dtype == KVS_DTYPE_BF16 ? tc_blocks_per_sm_t<__nv_bfloat16>(dim)
						: tc_blocks_per_sm_t<__half>(dim);

		cudaGetLastError();	/* no device: not an error of the launch to come */
		*c = n > 0 ? n : 4;
	}
	return *c;
}

/*
 * The tensor-core kernel's split, sized to whole waves: slots = blocks an
 * SM runs at once (occupancy API) x SMs, wave efficiency = CTAs / (waves x
 * slots).  Chunks are multiples of the 16 tokens a warp takes (TC_GRAIN)
 * and at least TC_MERGE_RATIO x group tokens: a split writes, and the
 * merge reads back, group x D floats against the chunk's 4 x D bytes of
 * K and V (2 x group / chunk of it), so splitting stays within a quarter
 * of the K/V traffic.  Of the split counts 1, 2, ... (each with the
 * smallest chunk that gives it: splits of equal length), take the first
 * whose grid fills its last wave to >= 85% (FA3's rule, fewest splits:
 * least merging), else the best one.  Where even one 16-token tile a CTA
 * cannot fill 85% of a wave (batch 1, 1k context), the best is taken.
 */
#define TC_GRAIN	16	/* tokens: a warp's share of a tile */
#define TC_MERGE_RATIO	8	/* chunk >= 8 x group: merge <= 1/4 of K/V bytes */
#define TC_MAX_SPLITS	256
#define TC_WAVE_GOAL	0.85

static void tc_plan_split(struct dec_plan *pl, const struct kv_attn_kv *kv,
			  const struct kv_attn_batch *b, uint64_t blocks, uint32_t group)
{
	uint32_t max_seq = b->max_seq_len, s, prev = 0;
	uint32_t rows = group < TC_ROWS ? group : TC_ROWS;	/* q heads a block */
	uint32_t least = (TC_MERGE_RATIO * rows + TC_GRAIN - 1) / TC_GRAIN * TC_GRAIN;
	uint64_t slots = (uint64_t)tc_blocks_per_sm(kv->geom.dtype, kv->geom.head_dim) *
			 (kv_cuda_sm_count() ? kv_cuda_sm_count() : 132);
	double best = 0;

	for (s = 1; s <= TC_MAX_SPLITS; s++) {
		uint32_t chunk = ((max_seq + s - 1) / s + TC_GRAIN - 1) / TC_GRAIN * TC_GRAIN;
		uint32_t n = (max_seq + chunk - 1) / chunk;
		uint64_t ctas = blocks * n;
		double eff = (double)ctas / (double)(((ctas + slots - 1) / slots) * slots);

		if (s > 1 && chunk < least)
			break;
		if (n == prev)
			continue;	/* the same split as a smaller s */
		prev = n;
		if (eff > best + 1e-9) {
			best = eff;
			pl->n_splits = n;
			pl->chunk = chunk;
		}
		if (eff >= TC_WAVE_GOAL)
			break;
	}
}

static struct dec_plan dec_plan_for(const struct kv_attn_kv *kv, const struct kv_attn_batch *b,
				    const struct kv_attn_params *p)
{
	struct dec_plan pl;
	uint32_t group = p->n_q_heads / kv->geom.n_kv_heads, max_seq = b->max_seq_len;
	uint64_t blocks, target;

	pl.tc = tc_fits(kv, group);
	pl.gc = pl.tc ? TC_ROWS : group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : GMAX;
	pl.n_qchunks = (group + pl.gc - 1) / pl.gc;
	pl.n_splits = 1;
	pl.chunk = UINT32_MAX;
	if (!max_seq)
		return pl;
	blocks = (uint64_t)b->n_reqs * kv->geom.n_kv_heads * pl.n_qchunks;
	if (p->kv_split) {
		pl.chunk = p->kv_split;
	} else if (pl.tc) {
		tc_plan_split(&pl, kv, b, blocks, group);
	} else {
		target = 4ull * (kv_cuda_sm_count() ? kv_cuda_sm_count() : 132);
		if (blocks >= target || max_seq <= 512)
			return pl;
		pl.n_splits = (uint32_t)((target + blocks - 1) / blocks);
		if (pl.n_splits > (max_seq + 255) / 256)
			pl.n_splits = (max_seq + 255) / 256;
		pl.chunk = ((max_seq + pl.n_splits - 1) / pl.n_splits + 63) / 64 * 64;
	}
	pl.n_splits = (uint32_t)(((uint64_t)max_seq + pl.chunk - 1) / pl.chunk);
	if (pl.n_splits > 4096) {
		pl.n_splits = 4096;
		pl.chunk = (max_seq + 4095) / 4096;
	}
	if (pl.n_splits <= 1) {
		pl.n_splits = 1;
		pl.chunk = UINT32_MAX;
	}
	return pl;
}

static size_t ws_bytes(const struct kv_attn_kv *kv, const struct kv_attn_batch *b,
		       const struct kv_attn_params *p, const struct dec_plan &pl)
{
	size_t rows = (size_t)b->n_reqs * p->n_q_heads * pl.n_splits;

	if (pl.n_splits == 1)
		return 0;
	return rows * kv->geom.head_dim * sizeof(float) + ((rows * sizeof(float) + 255) & ~(size_t)255);
}

extern "C" size_t kv_attn_decode_cuda_workspace(const struct kv_attn_kv *kv,
						const struct kv_attn_batch *b,
						const struct kv_attn_params *p)
{
	if (kv_cuda_check(kv, b, p))
		return 0;
	return ws_bytes(kv, b, p, dec_plan_for(kv, b, p));
}

template <typename T, int D>
static void launch(const struct dec_args &a, bool tc, uint32_t gc, uint32_t n_reqs,
		   uint32_t n_kv, cudaStream_t s)
{
	dim3 grid(n_reqs * a.n_splits, n_kv * a.n_qchunks);

	if (tc) {
		/* tc_fits(): head dims 64 and 128 only (no instance past them) */
		if constexpr (D <= 128)
			KV_LAUNCH(grid, tc_shape<D>::THREADS, 0, s, kv_decode_tc_kernel<T, D>)(a);
	} else if (gc == 1)
		KV_LAUNCH(grid, DEC_THREADS, 0, s, kv_decode_kernel<T, D, 1>)(a);
	else if (gc == 2)
		KV_LAUNCH(grid, DEC_THREADS, 0, s, kv_decode_kernel<T, D, 2>)(a);
	else if (gc == 4)
		KV_LAUNCH(grid, DEC_THREADS, 0, s, kv_decode_kernel<T, D, 4>)(a);
	else
		KV_LAUNCH(grid, DEC_THREADS, 0, s, kv_decode_kernel<T, D, GMAX>)(a);
	if (a.n_splits > 1)
		KV_LAUNCH((unsigned int)((size_t)n_reqs * a.nq), D, 0, s, kv_combine_kernel<T>)(
			a.part_o, a.part_lse, a.n_splits, D, a.out, a.lse);
}

template <typename T>
static void launch_dim(const struct dec_args &a, uint32_t dim, bool tc, uint32_t gc,
		       uint32_t n_reqs, uint32_t n_kv, cudaStream_t s)
{
	if (dim == 64)
		launch<T, 64>(a, tc, gc, n_reqs, n_kv, s);
	else if (dim == 128)
		launch<T, 128>(a, tc, gc, n_reqs, n_kv, s);
	else
		launch<T, 256>(a, tc, gc, n_reqs, n_kv, s);
}

extern "C" int kv_attn_decode_cuda(const struct kv_attn_kv *kv, const struct kv_attn_batch *b,
				   const struct kv_attn_params *p, const void *q,
				   void *out, float *lse)
{
	cudaStream_t stream;
	struct dec_plan pl;
	struct dec_args a;
	cudaError_t err;
	void *ws = NULL;
	size_t need, rows;
	int ret;

	ret = kv_cuda_check_io(kv, b, p, q, out);
	if (ret)
		return ret > 0 ? 0 : ret;
	stream = (cudaStream_t)p->stream;
	pl = dec_plan_for(kv, b, p);
	/* Grids: the split kernel's x and y, and the combine's x (a block per
	 * (request, q head)), checked before anything is launched. */
	if ((uint64_t)b->n_reqs * pl.n_splits > INT32_MAX ||
	    (uint64_t)kv->geom.n_kv_heads * pl.n_qchunks > 65535 ||
	    (pl.n_splits > 1 && (uint64_t)b->n_reqs * p->n_q_heads > INT32_MAX))
		return -E2BIG;

	kv_args_common(a, kv, b, p, q, out, lse);
	a.n_qchunks = pl.n_qchunks;
	a.n_splits = pl.n_splits;
	a.chunk = pl.chunk;

	need = ws_bytes(kv, b, p, pl);
	if (need) {
		if (p->workspace && p->workspace_bytes >= need && kv_aligned16(p->workspace)) {
			ws = p->workspace;
		} else {
			err = cudaMallocAsync(&ws, need, stream);
			if (err != cudaSuccess)
				return kv_cuda_fail(err);
		}
		rows = (size_t)b->n_reqs * p->n_q_heads * pl.n_splits;
		a.part_lse = (float *)ws;
		a.part_o = (float *)((char *)ws + ((rows * sizeof(float) + 255) & ~(size_t)255));
	}
	if (kv->geom.dtype == KVS_DTYPE_BF16)
		launch_dim<__nv_bfloat16>(a, kv->geom.head_dim, pl.tc, pl.gc, b->n_reqs,
					  kv->geom.n_kv_heads, stream);
	else
		launch_dim<__half>(a, kv->geom.head_dim, pl.tc, pl.gc, b->n_reqs,
				   kv->geom.n_kv_heads, stream);
	err = cudaGetLastError();
	if (ws && ws != p->workspace)
		cudaFreeAsync(ws, stream);
	return err == cudaSuccess ? 0 : kv_cuda_fail(err);
}
