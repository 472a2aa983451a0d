/* SPDX-License-Identifier: MIT */
/*
 * Paged extend on tensor cores (sm_80 and later: mma.sync m16n8k16,
 * ldmatrix, cp.async), for head dims 64 and 128 and power-of-two page
 * sizes.  Included by cuda_extend.cu, which launches it.
 *
 * One block of 4 warps per (request, KV head, 64 query vectors), a query
 * vector being one (new token, q head of the group) pair, token-major as
 * in the SIMT kernel; each warp owns 16 of them, the 16 rows (M) of its
 * mma.  Every KV tile (from token 0, so that a vector's arithmetic does
 * not depend on how its request's new tokens were cut) is shared by the
 * four warps:
 *   S (16 vectors x TILE tokens) = Q K^T, K fragments by ldmatrix;
 *   causal mask per row (token j is visible to the new token at position
 *   pos when j <= pos), one online-softmax rescale per tile;
 *   O (16 x D) += P V, P from S's accumulators as high and low 16-bit
 *   parts, V fragments by ldmatrix.trans.
 * K and V come through a two-stage cp.async pipeline (tile i + 1 in
 * flight while tile i is computed), each tile's page indices staged in
 * shared memory a tile ahead.  A warp skips the arithmetic of tiles none
 * of its rows can see (a fully masked tile would leave its bits as they
 * are anyway), never the barriers.  The per-tile steps are the named
 * device functions of cuda_tc.cuh, P V's k-steps kv_ext_tc_compute_sv.
 *
 * KV_MUTATE (tests/simt only) breaks it on purpose: 4 drops the barrier
 * after the wait for a tile's copies, 5 swaps two of the four 8x8 blocks
 * of a V ldmatrix (wrong fragment registers).
 */
#if defined(KV_MUTATE) && !defined(KV_SIMT)
#error "KV_MUTATE breaks the kernels on purpose: stand-in test builds only"
#endif

#include "cuda_tc.cuh"

#define EXT_TC_WARPS	4
#define EXT_TC_THREADS	(32 * EXT_TC_WARPS)
#define EXT_TC_VECS	(16 * EXT_TC_WARPS)	/* query vectors a block */

template <int D> struct ext_tc_shape {
	static constexpr int TILE = 4096 / D;		/* KV tokens a tile: 64 or 32 */
	static constexpr int ROW = D * 2 + 16;		/* padded: conflict-free ldmatrix */
	static constexpr int PAGES = TILE + 1;		/* most pages a tile spans */
};

/*
 * Rows gid and gid + 8 of the warp whose first query vector is @wv: row r
 * exists (@ok[r]) when its vector is one of the request's @n_vecs; it sees
 * tokens [0, @visible[r]) (0 for a missing row: every score masked), and
 * @qrow[r] is the element offset of its Q and O rows.  Vectors are
 * token-major: vector vi is q head vi % G of new token vi / G.
 */
template <int D>
static __device__ __forceinline__ void kv_ext_tc_rows(const struct ext_args &a, uint32_t wv,
						      uint32_t q0, uint32_t kvh, uint32_t n_vecs,
						      uint32_t prefix, int gid, bool ok[2],
						      uint32_t visible[2], size_t qrow[2])
{
	const uint32_t G = a.group;

#pragma unroll
	for (int r = 0; r < 2; r++) {
		const uint32_t vi = wv + gid + 8 * r, tok = vi / G;

		ok[r] = vi < n_vecs;
		visible[r] = ok[r] ? prefix + tok + 1 : 0;
		qrow[r] = ((size_t)(q0 + tok) * a.nq + kvh * G + vi % G) * D;
	}
}

/*
 * O += P V over the whole tile, PK k-steps of 16 tokens: each takes its
 * two n-tiles of S (@s) to P's A fragments, then multiplies them into O
 * with V from @vs (rows ROW bytes apart).  P is made a k-step at a time so
 * that only one k-step's fragments are live.
 */
template <typename T, int NTILES, int PK, int ROW>
static __device__ __forceinline__ void kv_ext_tc_compute_sv(float (*o)[4], const float (*s)[4],
							    const float mu[2], float l[2],
							    const char *vs, int lane)
{
#pragma unroll
	for (int pk = 0; pk < PK; pk++) {
		uint32_t ph[4], pl[4];
#if KV_MUTATE == 5
		/* wrong on purpose: blocks 1 and 2 of the x4 swapped */
		const char *vr = vs + (pk * 16 + (lane >> 4) * 8 + (lane & 7)) * ROW +
				 (lane >> 3 & 1) * 16;
#else
		const char *vr = kv_tc_v_row<ROW>(vs + pk * 16 * ROW, lane);
#endif

		kv_tc_p_frags<T>(s + 2 * pk, mu, l, ph, pl);
		kv_tc_compute_sv<T, NTILES>(o, ph, pl, vr);
	}
}

/*
 * Rows gid and gid + 8 are whole in this warp (it saw every token they
 * see), their columns spread over this lane's quad: the sums over the
 * quad, then O / l straight to global as T pairs, no merge, and the
 * natural-log LSE; a missing row writes nothing.
 */
template <typename T, int D>
static __device__ __forceinline__ void kv_ext_tc_write_output(const struct ext_args &a,
							      const float (*o)[4], const float m[2],
							      float l[2], const size_t qrow[2],
							      const bool ok[2], int tig)
{
#pragma unroll
	for (int r = 0; r < 2; r++) {
		float inv;

		l[r] = kv_quad_sum(l[r]);
		inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;
		if (!ok[r])
			continue;
#pragma unroll
		for (int j = 0; j < D / 8; j++)
			*(uint32_t *)((char *)a.out + (qrow[r] + j * 8 + 2 * tig) * 2) =
				kv_mma<T>::pack(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
		if (a.lse && !tig)
			a.lse[qrow[r] / D] = l[r] > 0 ? (m[r] + log2f(l[r])) * KV_LN2 : -INFINITY;
	}
}

template <typename T, int D>
__global__ void __launch_bounds__(EXT_TC_THREADS)
kv_extend_tc_kernel(const struct ext_args a)
{
	using SH = ext_tc_shape<D>;
	constexpr int TILE = SH::TILE, ROW = SH::ROW;
	constexpr int CH = D / 8;			/* 16-byte chunks a row */
	constexpr int KSTEPS = D / 16, NTILES = D / 8;	/* QK k-steps, PV n-tiles */
	constexpr int SN = TILE / 8, PK = TILE / 16;	/* S n-tiles, PV k-steps */
	constexpr int PASS = EXT_TC_THREADS / CH;
	__shared__ uint4 sm_kv[2][2][TILE][ROW / 16];
	__shared__ uint32_t sm_pg[2][SH::PAGES];
	static_assert(EXT_TC_THREADS >= SH::PAGES, "a thread per staged page index");
	static_assert(TILE % PASS == 0 && KSTEPS % 2 == 0 && NTILES % 2 == 0, "shapes");

	const uint32_t req = blockIdx.z, kvh = blockIdx.y;
	const uint32_t q0 = a.q_indptr ? a.q_indptr[req] : req;
	const uint32_t n_new = a.q_indptr ? a.q_indptr[req + 1] - q0 : 1;
	const uint32_t G = a.group, n_vecs = n_new * G;
	const uint32_t v0 = blockIdx.x * EXT_TC_VECS;
	const uint32_t seq = a.seq_lens[req], prefix = seq - n_new;
	const uint32_t *pt = a.pages + a.page_indptr[req];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int gid = lane >> 2, tig = lane & 3;
	const uint32_t shift = a.tpp_shift;

	if (v0 >= n_vecs)
		return;			/* the whole block: before any barrier */

	/* The block needs tokens [0, kv_end); this warp's rows [0, w_end). */
	const uint32_t kv_end = prefix + (min(v0 + EXT_TC_VECS, n_vecs) - 1) / G + 1;
	const uint32_t wv = v0 + warp * 16;
	const uint32_t w_end = wv < n_vecs ? prefix + (min(wv + 16, n_vecs) - 1) / G + 1 : 0;
	const int n_tiles = (int)((kv_end + TILE - 1) / TILE);
	const int ch = threadIdx.x % CH, r0 = threadIdx.x / CH;
	const uint64_t head_off = (uint64_t)kvh * D * 2 + ch * 16;
	uint32_t qa[KSTEPS][4], visible[2], pg_next;
	size_t qrow[2];
	bool row_ok[2];
	float o[NTILES][4], m[2], l[2];

	kv_ext_tc_rows<D>(a, wv, q0, kvh, n_vecs, prefix, gid, row_ok, visible, qrow);
	{
		const uint32_t *const q_rows[2] = {
			(const uint32_t *)((const char *)a.q + qrow[0] * 2),
			(const uint32_t *)((const char *)a.q + qrow[1] * 2),
		};

		kv_tc_load_q<KSTEPS>(qa, q_rows, row_ok, tig);
	}
	kv_tc_init_state<NTILES>(o, m, l);

	/* The prologue: tile 0's pages staged and its copies issued, tile 1's pages fetched. */
	pg_next = kv_tc_stage_pages<TILE, SH::PAGES>(sm_pg[0],
						     kv_tc_page(pt, 0, kv_end, shift, TILE, threadIdx.x),
						     pt, TILE, kv_end, shift);
	__syncthreads();
	kv_tc_issue_kv_tile<TILE, ROW, PASS>(sm_kv[0], sm_pg[0], 0, kv_end, shift, a.L, head_off,
					     ch, r0);
	kv_cp_async_commit();

	for (int it = 0; it < n_tiles; it++) {
		const int st = it & 1;
		const uint32_t tb = (uint32_t)it * TILE;

		KV_MAIN_LOOP();
		pg_next = kv_tc_stage_pages<TILE, SH::PAGES>(sm_pg[st ^ 1], pg_next, pt,
							     tb + 2 * TILE, kv_end, shift);
		__syncthreads();	/* stage st ^ 1 consumed (tile it - 1), its pages staged */
		if (it + 1 < n_tiles)
			kv_tc_issue_kv_tile<TILE, ROW, PASS>(sm_kv[st ^ 1], sm_pg[st ^ 1], tb + TILE,
							     kv_end, shift, a.L, head_off, ch, r0);
		kv_cp_async_commit();
		kv_cp_async_wait<1>();	/* this thread's copies of tile it landed */
#if KV_MUTATE != 4
		__syncthreads();	/* and everyone's */
#endif
		if (tb >= w_end)
			continue;	/* no row of this warp sees the tile: warp-uniform */

		/* S (16 vectors x TILE tokens), causally masked, then O += P V. */
		float s[SN][4], mx[2], c[2], mu[2];

		kv_tc_compute_qk<T, KSTEPS, SN, ROW>(s, qa, (const char *)sm_kv[st][0], lane);
		kv_tc_mask_scores<SN>(s, tb, visible, a.scale2, tig, mx);
		kv_tc_online_softmax(mx, m, l, c, mu);
		kv_tc_scale_o<NTILES>(o, c);
		kv_ext_tc_compute_sv<T, NTILES, PK, ROW>(o, s, mu, l, (const char *)sm_kv[st][1],
							 lane);
	}
	kv_cp_async_wait<0>();
	kv_ext_tc_write_output<T, D>(a, o, m, l, qrow, row_ok, tig);
}
