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
 * through shared memory (the stages, no longer needed).  Each step is a
 * named device function: cuda_tc.cuh's for what the extend kernel shares,
 * kv_dec_tc_* below for the merge and the output.
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

/*
 * What the merge of the warps' partial softmaxes reads, laid over the
 * stages once every warp is done with them: each warp's O, maxima and
 * sums of the block's TC_ROWS rows.
 */
template <int D, int WARPS> struct tc_merge_smem {
	float o[WARPS][TC_ROWS][D];
	float m[WARPS][TC_ROWS];
	float l[WARPS][TC_ROWS];
};

/*
 * sync_state, the warp's half: its (m, l, O) of rows gid and gid + 8 into
 * @sm, @l summed over the quad first (each lane summed only its own
 * columns' P).  A barrier must follow before any warp merges.
 */
template <int D, int WARPS>
static __device__ __forceinline__ void kv_dec_tc_publish_state(struct tc_merge_smem<D, WARPS> *sm,
							       const float (*o)[4], const float m[2],
							       float l[2], int warp, int gid, int tig)
{
#pragma unroll
	for (int r = 0; r < 2; r++)
		l[r] = kv_quad_sum(l[r]);
#pragma unroll
	for (int j = 0; j < D / 8; j++)
#pragma unroll
		for (int i = 0; i < 4; i++)
			sm->o[warp][gid + (i >> 1) * 8][j * 8 + 2 * tig + (i & 1)] = o[j][i];
	if (!tig) {
		sm->m[warp][gid] = m[0];
		sm->m[warp][gid + 8] = m[1];
		sm->l[warp][gid] = l[0];
		sm->l[warp][gid + 8] = l[1];
	}
}

/*
 * sync_state, the block's half: the warps' partial softmaxes of (@row,
 * dim @d) merged by their maxima, each warp having seen its own 16 tokens
 * of every tile.  Returns O / l (0 for a row that saw nothing); *@mx the
 * row's maximum, *@sum its sum taken to that maximum.
 */
template <int D, int WARPS>
static __device__ __forceinline__ float kv_dec_tc_merge(const struct tc_merge_smem<D, WARPS> *sm,
							int row, int d, float *mx, float *sum)
{
	float mu, acc = 0;

	*mx = -INFINITY;
	*sum = 0;
#pragma unroll
	for (int w = 0; w < WARPS; w++)
		*mx = fmaxf(*mx, sm->m[w][row]);
	mu = *mx == -INFINITY ? 0.0f : *mx;
#pragma unroll
	for (int w = 0; w < WARPS; w++) {
		const float cw = kv_ex2(sm->m[w][row] - mu);

		*sum += sm->l[w][row] * cw;
		acc += sm->o[w][row][d] * cw;
	}
	return *sum > 0 ? acc / *sum : 0.0f;
}

/*
 * Dim @d of q head @orow (request-major): @val in T when the block is the
 * whole sequence, with the natural-log LSE; else the split's fp32 partial
 * and base-2 LSE, which kv_combine_kernel (cuda_decode.cu) merges.
 */
template <typename T, int D>
static __device__ __forceinline__ void kv_dec_tc_write_output(const struct dec_args &a,
							      size_t orow, uint32_t split, int d,
							      float val, float mx, float sum)
{
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

template <typename T, int D>
__global__ void __launch_bounds__(tc_shape<D>::THREADS)
kv_decode_tc_kernel(const struct dec_args a)
{
	using SH = tc_shape<D>;
	constexpr int TILE = SH::TILE, ROW = SH::ROW, WARPS = SH::WARPS;
	constexpr int CH = D / 8;				/* 16-byte chunks a row */
	constexpr int KSTEPS = D / 16, NTILES = D / 8;
	constexpr int PASS = SH::THREADS / CH;			/* rows a pass of copies */
	__shared__ uint4 sm_kv[SH::STAGES][2][TILE][ROW / 16];
	__shared__ uint32_t sm_pg[SH::STAGES][SH::PAGES];
	static_assert(SH::THREADS >= SH::PAGES, "a thread per staged page index");
	static_assert(TILE % PASS == 0, "whole passes of copies");
	static_assert(sizeof(tc_merge_smem<D, WARPS>) <= sizeof(sm_kv), "the merge fits in the stages");

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
	const uint32_t end[2] = { t1, t1 };			/* both rows see the split's tokens */
	const uint32_t shift = a.tpp_shift;
	const int n_tiles = (int)((t1 - t0 + TILE - 1) / TILE);
	/* This thread copies 16-byte chunk ch of rows r0, r0 + PASS, ... of a tile. */
	const int ch = threadIdx.x % CH, r0 = threadIdx.x / CH;
	const uint64_t head_off = (uint64_t)kvh * D * 2 + ch * 16;
	/* Q rows gid and gid + 8 of the block's q heads (zero past the group). */
	const uint32_t *q0 = (const uint32_t *)((const char *)a.q +
						((size_t)req * a.nq + hq0 + gid) * D * 2);
	const uint32_t *const q_rows[2] = { q0, q0 + 8 * D / 2 };
	const bool q_ok[2] = { gid < ng, gid + 8 < ng };
	uint32_t qa[KSTEPS][4], pg_next;
	float o[NTILES][4], m[2], l[2];

	kv_tc_load_q<KSTEPS>(qa, q_rows, q_ok, tig);
	kv_tc_init_state<NTILES>(o, m, l);

	/* The prologue: tile 0's pages staged and its copies issued, tile 1's pages fetched. */
	pg_next = kv_tc_stage_pages<TILE, SH::PAGES>(sm_pg[0],
						     kv_tc_page(pt, t0, t1, shift, TILE, threadIdx.x),
						     pt, t0 + TILE, t1, shift);
	__syncthreads();
	if (n_tiles > 0)
		kv_tc_issue_kv_tile<TILE, ROW, PASS>(sm_kv[0], sm_pg[0], t0, t1, shift, a.L,
						     head_off, ch, r0);
	kv_cp_async_commit();

	/* The trip count is the block's: every warp runs every mma and barrier. */
	for (int it = 0; it < n_tiles; it++) {
		const int st = it & 1;
		const uint32_t tb = t0 + (uint32_t)it * TILE;

		KV_MAIN_LOOP();
		/* Tile it + 1's page indices, loaded a tile ago; fetch tile it + 2's. */
		pg_next = kv_tc_stage_pages<TILE, SH::PAGES>(sm_pg[st ^ 1], pg_next, pt,
							     tb + 2 * TILE, t1, shift);
#if KV_MUTATE != 1
		__syncthreads();	/* stage st ^ 1 consumed (tile it - 1), its pages staged */
#endif
		if (it + 1 < n_tiles)
			kv_tc_issue_kv_tile<TILE, ROW, PASS>(sm_kv[st ^ 1], sm_pg[st ^ 1], tb + TILE,
							     t1, shift, a.L, head_off, ch, r0);
		kv_cp_async_commit();	/* every iteration, so that wait_group counts tiles */
#if KV_MUTATE == 2
		kv_cp_async_wait<2>();
#else
		kv_cp_async_wait<1>();	/* this thread's copies of tile it landed */
#endif
		__syncthreads();	/* and everyone's */

		/* This warp's 16 tokens of the tile: S (16 heads x 16 tokens), then O += P V. */
		const char *ks = (const char *)sm_kv[st][0] + warp * 16 * ROW;
		const char *vs = (const char *)sm_kv[st][1] + warp * 16 * ROW;
		float s[2][4], mx[2], c[2], mu[2];
		uint32_t ph[4], pl[4];

		kv_tc_compute_qk<T, KSTEPS, 2, ROW>(s, qa, ks, lane);
		kv_tc_mask_scores<2>(s, tb + warp * 16, end, a.scale2, tig, mx);
		kv_tc_online_softmax(mx, m, l, c, mu);
		kv_tc_p_frags<T>(s, mu, l, ph, pl);
#if KV_MUTATE == 3
		{
			uint32_t x = ph[1];

			ph[1] = ph[2];
			ph[2] = x;
		}
#endif
		kv_tc_scale_o<NTILES>(o, c);
		kv_tc_compute_sv<T, NTILES>(o, ph, pl, kv_tc_v_row<ROW>(vs, lane));
	}
	kv_cp_async_wait<0>();
	__syncthreads();	/* every warp is done with the stages: the merge reuses them */

	struct tc_merge_smem<D, WARPS> *sm = (struct tc_merge_smem<D, WARPS> *)sm_kv;

	kv_dec_tc_publish_state<D, WARPS>(sm, o, m, l, warp, gid, tig);
	__syncthreads();	/* every warp's state published */
	for (int e = threadIdx.x; e < ng * D; e += SH::THREADS) {
		const int row = e / D, d = e % D;
		float mx, sum;
		const float val = kv_dec_tc_merge<D, WARPS>(sm, row, d, &mx, &sum);

		kv_dec_tc_write_output<T, D>(a, (size_t)req * a.nq + hq0 + row, split, d, val, mx,
					     sum);
	}
}
