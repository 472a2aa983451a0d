/* SPDX-License-Identifier: MIT */
/*
 * Paged decode on tensor cores, for GQA groups of 4 q heads a KV head or
 * more (sm_80 and later: mma.sync m16n8k16, cp.async).  Included by
 * cuda_decode.cu, which plans, launches and merges the splits.
 *
 * One block per (request, KV split, KV head, 16 q heads of its group).
 * The group's q heads are the 16 rows (M) of every m16n8k16 mma, padded
 * with zero rows; a warp takes 16 tokens of each KV tile, its K and V
 * fragments read from shared memory by ldmatrix (V transposed):
 *   S (16 heads x 16 tokens) = Q K^T: two n8 tiles, D/16 k-steps each;
 *   one online-softmax rescale per tile (row maxima across the 4 lanes of
 *   a quad by two shuffles);
 *   O (16 x D) += P V: P straight from S's accumulators (the C fragment of
 *   S is the A fragment of P), as a high and a low 16-bit part so that P
 *   keeps f32-like precision (the reference is fp32; the tensor cores
 *   have time to spare in decode).
 * K and V tiles come through a two-stage cp.async pipeline: tile i+1 is
 * in flight while tile i is computed.  The page indices a tile needs are
 * staged in shared memory once per tile (loaded one tile earlier still);
 * tokens_per_page is a power of two, so a token's page and slot are a
 * shift and a mask.  At the end the warps' partial softmaxes are merged
 * through shared memory (the stages, no longer needed).
 *
 * KV_MUTATE (tests/simt only, never in a real build) breaks the kernel on
 * purpose so that tests can prove the suites notice: 1 drops the barrier
 * that frees a stage before it is refilled, 2 waits for one cp.async group
 * too few, 3 swaps two registers of P's A fragment.
 */
#if defined(KV_MUTATE) && !defined(KV_SIMT)
#error "KV_MUTATE breaks the kernels on purpose: stand-in test builds only"
#endif

#include "cuda_tc.cuh"

#define TC_ROWS		16	/* q heads a block: the M of m16n8k16 */
#define TC_MIN_GROUP	4	/* smaller groups waste too much of M: the SIMT kernel */

template <int D> struct tc_shape {
	static constexpr int WARPS = D == 64 ? 4 : 2;
	static constexpr int THREADS = 32 * WARPS;
	static constexpr int TILE = 16 * WARPS;		/* tokens a tile: 16 a warp */
	static constexpr int STAGES = 2;
	static constexpr int ROW = D * 2 + 16;		/* a token row in shared memory,
							 * padded: conflict-free fragments */
	static constexpr int PAGES = TILE + 1;		/* most pages a tile spans */
};

template <typename T, int D>
__global__ void __launch_bounds__(tc_shape<D>::THREADS)
kv_decode_tc_kernel(const struct dec_args a)
{
	using SH = tc_shape<D>;
	constexpr int TILE = SH::TILE, ROW = SH::ROW, WARPS = SH::WARPS;
	constexpr int CH = D / 8;				/* 16-byte chunks a row */
	constexpr int KSTEPS = D / 16, NTILES = D / 8;
	constexpr int PASS = SH::THREADS / CH;			/* rows a pass of copies */
	constexpr int COPIES = TILE / PASS;			/* K (and V) copies a thread a tile */
	__shared__ uint4 sm_kv[SH::STAGES][2][TILE][ROW / 16];
	__shared__ uint32_t sm_pg[SH::STAGES][SH::PAGES];
	static_assert(SH::THREADS >= SH::PAGES, "a thread per staged page index");
	static_assert(TILE % PASS == 0, "whole passes of copies");
	static_assert((WARPS * TC_ROWS * (D + 2)) * sizeof(float) <= sizeof(sm_kv),
		      "the merge fits in the stages");

	const uint32_t req = blockIdx.x / a.n_splits, split = blockIdx.x % a.n_splits;
	const uint32_t kvh = blockIdx.y / a.n_qchunks;
	const uint32_t g0 = (blockIdx.y % a.n_qchunks) * TC_ROWS;
	const int ng = min(TC_ROWS, (int)(a.group - g0));
	const uint32_t hq0 = kvh * a.group + g0;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int gid = lane >> 2, tig = lane & 3;		/* groupID, threadID_in_group */
	const uint32_t seq = a.seq_lens[req];
	const uint32_t *pt = a.pages + a.page_indptr[req];
	const uint32_t t0 = min(split * a.chunk, seq);
	const uint32_t t1 = split + 1 == a.n_splits ? seq : min(seq, t0 + a.chunk);
	const uint32_t shift = a.tpp_shift, in_page = (1u << shift) - 1;
	const int n_tiles = (int)((t1 - t0 + TILE - 1) / TILE);
	/* This thread copies 16-byte chunk ch of rows r0, r0 + PASS, ... of a tile. */
	const int ch = threadIdx.x % CH, r0 = threadIdx.x / CH;
	const uint64_t head_off = (uint64_t)kvh * D * 2 + ch * 16;
	uint32_t qa[KSTEPS][4], pg_next;
	float o[NTILES][4], m[2] = { -INFINITY, -INFINITY }, l[2] = { 0, 0 };

	/* Q as A fragments: rows gid and gid + 8 (zero past the group), unscaled. */
	{
		const uint32_t *q0 = (const uint32_t *)((const char *)a.q +
			((size_t)req * a.nq + hq0 + gid) * D * 2);
		const uint32_t *q1 = q0 + 8 * D / 2;
		const bool v0 = gid < ng, v1 = gid + 8 < ng;

#pragma unroll
		for (int kk = 0; kk < KSTEPS; kk++) {
			qa[kk][0] = v0 ? q0[kk * 8 + tig] : 0;
			qa[kk][1] = v1 ? q1[kk * 8 + tig] : 0;
			qa[kk][2] = v0 ? q0[kk * 8 + 4 + tig] : 0;
			qa[kk][3] = v1 ? q1[kk * 8 + 4 + tig] : 0;
		}
	}
#pragma unroll
	for (int j = 0; j < NTILES; j++)
		o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0;

	/* Issue tile k's K and V rows into stage st (zeros past t1). */
	auto issue = [&](int k, int st) {
		const uint32_t tb = t0 + (uint32_t)k * TILE, p0 = tb >> shift;

#pragma unroll
		for (int i = 0; i < COPIES; i++) {
			const int r = r0 + i * PASS;
			const uint32_t t = tb + r;
			const bool ok = t < t1;
			const uint64_t off = ok ? (uint64_t)sm_pg[st][(t >> shift) - p0] * a.L.page_bytes +
						  (uint64_t)(t & in_page) * a.L.tok_stride + head_off : 0;

			kv_cp_async16(&sm_kv[st][0][r][ch], a.L.base + a.L.k_off + off, ok);
			kv_cp_async16(&sm_kv[st][1][r][ch], a.L.base + a.L.v_off + off, ok);
		}
	};

	pg_next = kv_tc_page(pt, t0, t1, shift, TILE, threadIdx.x);
	if (threadIdx.x < SH::PAGES)
		sm_pg[0][threadIdx.x] = pg_next;
	pg_next = kv_tc_page(pt, t0 + TILE, t1, shift, TILE, threadIdx.x);
	__syncthreads();
	if (n_tiles > 0)
		issue(0, 0);
	kv_cp_async_commit();

	/* The trip count is the block's: every warp runs every mma and barrier. */
	for (int it = 0; it < n_tiles; it++) {
		const int st = it & 1;
		const uint32_t tb = t0 + (uint32_t)it * TILE;

		KV_MAIN_LOOP();
		/* Tile it + 1's page indices, loaded a tile ago; fetch tile it + 2's. */
		if (threadIdx.x < SH::PAGES)
			sm_pg[st ^ 1][threadIdx.x] = pg_next;
		pg_next = kv_tc_page(pt, tb + 2 * TILE, t1, shift, TILE, threadIdx.x);
#if KV_MUTATE != 1
		__syncthreads();	/* stage st ^ 1 consumed (tile it - 1), its pages staged */
#endif
		if (it + 1 < n_tiles)
			issue(it + 1, st ^ 1);
		kv_cp_async_commit();	/* every iteration, so that wait_group counts tiles */
#if KV_MUTATE == 2
		kv_cp_async_wait<2>();
#else
		kv_cp_async_wait<1>();	/* this thread's copies of tile it landed */
#endif
		__syncthreads();	/* and everyone's */

		const char *ks = (const char *)sm_kv[st][0] + warp * 16 * ROW;
		const char *vs = (const char *)sm_kv[st][1] + warp * 16 * ROW;
		float s[2][4], mx[2] = { -INFINITY, -INFINITY }, c[2], mu[2];
		uint32_t ph[4], pl[4];

		/* S = Q K^T, tokens nt * 8.. of the warp's 16. */
#pragma unroll
		for (int nt = 0; nt < 2; nt++)
			kv_tc_qk<T, KSTEPS>(s[nt], qa, ks + (nt * 8 + (lane & 7)) * ROW +
						       (lane >> 3) * 16);
		/* Scores in base 2; tokens past t1 are -inf.  c_i: rows gid, gid + 8. */
#pragma unroll
		for (int nt = 0; nt < 2; nt++)
#pragma unroll
			for (int i = 0; i < 4; i++) {
				const uint32_t t = tb + warp * 16 + nt * 8 + 2 * tig + (i & 1);

				s[nt][i] = t < t1 ? s[nt][i] * a.scale2 : -INFINITY;
				mx[i >> 1] = fmaxf(mx[i >> 1], s[nt][i]);
			}
		kv_tc_rescale(mx, m, l, c, mu);
		/* P, its high and low 16-bit parts as A fragments; O rescaled once. */
		kv_tc_p_frags<T>(s, mu, l, ph, pl);
#if KV_MUTATE == 3
		{
			uint32_t x = ph[1];

			ph[1] = ph[2];
			ph[2] = x;
		}
#endif
		/*
		 * O += P V.  B fragments by ldmatrix.x4.trans: the 8x8 blocks
		 * (tokens 0.., 8.. x dims 8 j, 8 j + 8) transposed are b[0..1] of
		 * n-tiles j and j + 1.
		 */
		const char *vr = vs + ((lane >> 3 & 1) * 8 + (lane & 7)) * ROW + (lane >> 4) * 16;

#pragma unroll
		for (int j = 0; j < NTILES; j += 2) {
			uint32_t b[4];

			kv_ldmatrix_x4<true>(b, vr + j * 16);
#pragma unroll
			for (int h = 0; h < 2; h++) {
				o[j + h][0] *= c[0];
				o[j + h][1] *= c[0];
				o[j + h][2] *= c[1];
				o[j + h][3] *= c[1];
				kv_mma<T>::run(o[j + h], ph, b + 2 * h, o[j + h]);
				kv_mma<T>::run(o[j + h], pl, b + 2 * h, o[j + h]);
			}
		}
	}
	kv_cp_async_wait<0>();
	__syncthreads();	/* every warp is done with the stages: the merge reuses them */

	/* Each warp's (m, l, O) for the 16 rows, then every (row, dim) merged. */
	float *sm_o = (float *)sm_kv;				/* [WARPS][16][D] */
	float *sm_m = sm_o + WARPS * TC_ROWS * D, *sm_l = sm_m + WARPS * TC_ROWS;

#pragma unroll
	for (int r = 0; r < 2; r++)
		l[r] = kv_quad_sum(l[r]);
#pragma unroll
	for (int j = 0; j < NTILES; j++)
#pragma unroll
		for (int i = 0; i < 4; i++)
			sm_o[(warp * TC_ROWS + gid + (i >> 1) * 8) * D + j * 8 + 2 * tig + (i & 1)] = o[j][i];
	if (!tig) {
		sm_m[warp * TC_ROWS + gid] = m[0];
		sm_m[warp * TC_ROWS + gid + 8] = m[1];
		sm_l[warp * TC_ROWS + gid] = l[0];
		sm_l[warp * TC_ROWS + gid + 8] = l[1];
	}
	__syncthreads();
	for (int e = threadIdx.x; e < ng * D; e += SH::THREADS) {
		const int row = e / D, d = e % D;
		const size_t orow = (size_t)req * a.nq + hq0 + row;
		float mx = -INFINITY, mu, sum = 0, acc = 0, val;

#pragma unroll
		for (int w = 0; w < WARPS; w++)
			mx = fmaxf(mx, sm_m[w * TC_ROWS + row]);
		mu = mx == -INFINITY ? 0.0f : mx;
#pragma unroll
		for (int w = 0; w < WARPS; w++) {
			const float cw = kv_ex2(sm_m[w * TC_ROWS + row] - mu);

			sum += sm_l[w * TC_ROWS + row] * cw;
			acc += sm_o[(w * TC_ROWS + row) * D + d] * cw;
		}
		val = sum > 0 ? acc / sum : 0.0f;
		if (a.n_splits == 1) {
			reinterpret_cast<T *>(a.out)[orow * D + d] = T(val);
			if (a.lse && !d)
				a.lse[orow] = sum > 0 ? (mx + log2f(sum)) * KV_LN2 : -INFINITY;
		} else {
			const size_t ps = orow * a.n_splits + split;

			a.part_o[ps * D + d] = val;
			if (!d)
				a.part_lse[ps] = sum > 0 ? mx + log2f(sum) : -INFINITY;
		}
	}
}
