/* SPDX-License-Identifier: MIT */
/*
 * The steps the two tensor-core kernels (cuda_decode_tc.cuh,
 * cuda_extend_tc.cuh) share, in the order a KV tile meets them:
 *
 *   kv_tc_stage_pages     a tile's page indices into shared memory
 *   kv_tc_issue_kv_tile   its K and V rows, by cp.async, into a stage
 *   kv_tc_load_q          (once) Q as A fragments
 *   kv_tc_init_state      (once) the empty online-softmax state (m, l, O)
 *   kv_tc_compute_qk      S = Q K^T
 *   kv_tc_mask_scores     S in base 2, masked; its row maxima
 *   kv_tc_online_softmax  the rows' running maxima and sums move on
 *   kv_tc_p_frags         P = exp2(S - m) as the A fragments of P V
 *   kv_tc_scale_o         O rescaled to the new maxima
 *   kv_tc_compute_sv      O += P V, one k-step of 16 tokens
 *
 * They are device functions forced inline, not lambdas, so that each
 * step has a name, a comment and its own inputs and outputs, and the PTX
 * is that of the one function they are inlined into (tests/ptx checks it).
 * The barriers and cp.async waits stay in the kernels: the pipeline's
 * protocol is read in one place, and the CPU stand-in (tests/simt) names
 * each barrier by its own line.
 *
 * Fragments are laid out as for kv_mma (cuda_internal.cuh): a lane holds
 * rows gid = lane >> 2 and gid + 8, the columns 2 tig and +1 of each n8
 * tile (tig = lane & 3).
 */
#ifndef KV_CUDA_TC_CUH
#define KV_CUDA_TC_CUH

/*
 * Page index @i of the tile of @tile tokens from token @tb, tokens
 * stopping at @end (0 past the tile's pages): thread i stages the i-th.
 */
static __device__ __forceinline__ uint32_t kv_tc_page(const uint32_t *pt, uint32_t tb,
						      uint32_t end, uint32_t shift, int tile,
						      uint32_t i)
{
	uint32_t te = min(tb + (uint32_t)tile, end), p0 = tb >> shift;

	if (tb >= end || i > ((te - 1) >> shift) - p0)
		return 0;
	return pt[p0 + i];
}

/*
 * Store @fetched, this thread's page index of a tile (read from the page
 * table a tile earlier), into that tile's stage @pg, and return the one
 * of the tile from token @tb.  The index lives in shared memory before the
 * tile's copies are issued, and the global load that fetches it has a
 * whole tile to land: no K/V copy waits on a page-table load of its own
 * iteration (tests/ptx's page_load gate).  A barrier must follow before
 * the copies read @pg.
 */
template <int TILE, int PAGES>
static __device__ __forceinline__ uint32_t kv_tc_stage_pages(uint32_t *pg, uint32_t fetched,
							     const uint32_t *pt, uint32_t tb,
							     uint32_t end, uint32_t shift)
{
	if (threadIdx.x < PAGES)
		pg[threadIdx.x] = fetched;
	return kv_tc_page(pt, tb, end, shift, TILE, threadIdx.x);
}

/*
 * Issue the K and V rows of the tile from token @tb into @stage ([0] K,
 * [1] V; rows padded to ROW bytes), its page indices staged in @pg, as
 * cp.async: this thread copies 16-byte chunk @ch of rows @r0, @r0 + PASS,
 * and so on.  Tokens at or past @end are zero-filled (and read nothing),
 * so the tile's arithmetic needs no bounds of its own.  tokens_per_page is
 * 1 << @shift: a token's page and slot are a shift and a mask, no
 * division.  The caller commits the group.
 */
template <int TILE, int ROW, int PASS>
static __device__ __forceinline__ void kv_tc_issue_kv_tile(uint4 (*stage)[TILE][ROW / 16],
							   const uint32_t *pg, uint32_t tb,
							   uint32_t end, uint32_t shift,
							   const struct kv_dev_layer &L,
							   uint64_t head_off, int ch, int r0)
{
	const uint32_t p0 = tb >> shift, in_page = (1u << shift) - 1;

#pragma unroll
	for (int i = 0; i < TILE / PASS; i++) {
		const int r = r0 + i * PASS;
		const uint32_t t = tb + r;
		const bool ok = t < end;
		const uint64_t off = ok ? (uint64_t)pg[(t >> shift) - p0] * L.page_bytes +
					  (uint64_t)(t & in_page) * L.tok_stride + head_off : 0;

		kv_cp_async16(&stage[0][r][ch], L.base + L.k_off + off, ok);
		kv_cp_async16(&stage[1][r][ch], L.base + L.v_off + off, ok);
	}
}

/*
 * Q as the A fragments of every k-step of S = Q K^T: @q[r] the head-dim
 * row of this lane's row gid + 8 r, @ok[r] whether it exists.  Q stays in
 * registers for the whole KV loop; a missing row is zeros, so its scores
 * are finite and nothing needs to skip it.  Unscaled: the scale is
 * applied to S in fp32, as the reference does.
 */
template <int KSTEPS>
static __device__ __forceinline__ void kv_tc_load_q(uint32_t (*qa)[4], const uint32_t *const q[2],
						    const bool ok[2], int tig)
{
#pragma unroll
	for (int kk = 0; kk < KSTEPS; kk++)
#pragma unroll
		for (int f = 0; f < 4; f++) {
			const int r = f & 1;

			qa[kk][f] = ok[r] ? q[r][kk * 8 + (f >> 1) * 4 + tig] : 0;
		}
}

/*
 * The online softmax before any token: O = 0, sums 0, maxima -inf (which
 * kv_tc_online_softmax knows to mean "nothing seen yet").
 */
template <int NTILES>
static __device__ __forceinline__ void kv_tc_init_state(float (*o)[4], float m[2], float l[2])
{
#pragma unroll
	for (int j = 0; j < NTILES; j++)
		o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0;
	m[0] = m[1] = -INFINITY;
	l[0] = l[1] = 0;
}

/*
 * One n8 tile of S = Q K^T: @qa Q's A fragments, KSTEPS k-steps of 16;
 * @kr this lane's ldmatrix row of the tile's K in shared memory.  B
 * fragments by ldmatrix.x4: the 8x8 blocks (tokens of the tile, dims
 * 16 kk, 16 kk + 8, 16 kk + 16, 16 kk + 24), lane 8i + k giving row k of
 * block i, are b[0..1] of k-steps kk, kk + 1.
 */
template <typename T, int KSTEPS>
static __device__ __forceinline__ void kv_tc_qk(float s[4], const uint32_t (*qa)[4],
						const char *kr)
{
	s[0] = s[1] = s[2] = s[3] = 0;
#pragma unroll
	for (int kk = 0; kk < KSTEPS; kk += 2) {
		uint32_t b[4];

		kv_ldmatrix_x4<false>(b, kr + kk * 32);
		kv_mma<T>::run(s, qa[kk], b, s);
		kv_mma<T>::run(s, qa[kk + 1], b + 2, s);
	}
}

/*
 * S = Q K^T for the NT * 8 tokens whose K rows (ROW bytes apart) start at
 * @ks in shared memory: n-tile nt holds tokens nt * 8 ..  A lane passes
 * ldmatrix the address of row lane & 7 of block lane >> 3 (16 bytes of
 * head dim a block).
 */
template <typename T, int KSTEPS, int NT, int ROW>
static __device__ __forceinline__ void kv_tc_compute_qk(float (*s)[4], const uint32_t (*qa)[4],
							const char *ks, int lane)
{
#pragma unroll
	for (int nt = 0; nt < NT; nt++)
		kv_tc_qk<T, KSTEPS>(s[nt], qa, ks + (nt * 8 + (lane & 7)) * ROW + (lane >> 3) * 16);
}

/*
 * S of tokens @t0 .. (NT n-tiles) in base 2 (@scale2 = scale x log2 e, so
 * that exponentials are single ex2 instructions), a token at or past
 * @end[r] -inf in row gid + 8 r (a decode's sequence end, an extend's
 * causal limit); @mx the rows' maxima of this lane's scores.
 */
template <int NT>
static __device__ __forceinline__ void kv_tc_mask_scores(float (*s)[4], uint32_t t0,
							 const uint32_t end[2], float scale2,
							 int tig, float mx[2])
{
	mx[0] = mx[1] = -INFINITY;
#pragma unroll
	for (int nt = 0; nt < NT; nt++)
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const uint32_t t = t0 + nt * 8 + 2 * tig + (i & 1);

			s[nt][i] = t < end[i >> 1] ? s[nt][i] * scale2 : -INFINITY;
			mx[i >> 1] = fmaxf(mx[i >> 1], s[nt][i]);
		}
}

/*
 * A tile's online-softmax update of rows gid and gid + 8: @mx their
 * maxima in this lane's scores, made the quad's by two shuffles; the
 * running maxima @m and sums @l move on; @c the factor O is rescaled by,
 * @mu what the tile's scores are taken from (0 when nothing is seen yet:
 * no NaN).
 */
static __device__ __forceinline__ void kv_tc_online_softmax(float mx[2], float m[2], float l[2],
							    float c[2], float mu[2])
{
#pragma unroll
	for (int r = 0; r < 2; r++) {
		float mn;

		mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
		mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
		mn = fmaxf(m[r], mx[r]);
		mu[r] = mn == -INFINITY ? 0.0f : mn;
		c[r] = kv_ex2(m[r] - mu[r]);
		m[r] = mn;
		l[r] *= c[r];
	}
}

/*
 * P = exp2(S - mu) of two n8 tiles of S (@s[0], @s[1]: 16 tokens) as the
 * A fragment of one P V k-step, its high part @ph and the rest @pl (so
 * that P keeps f32-like precision); the rows' sums @l grow by P.  The C
 * fragment of S is the A fragment of P: no shuffle, no shared memory.
 */
template <typename T>
static __device__ __forceinline__ void kv_tc_p_frags(const float (*s)[4], const float mu[2],
						     float l[2], uint32_t ph[4], uint32_t pl[4])
{
#pragma unroll
	for (int f = 0; f < 4; f++) {
		const int nt = f >> 1, i = (f & 1) * 2, r = f & 1;
		const float p0 = kv_ex2(s[nt][i] - mu[r]), p1 = kv_ex2(s[nt][i + 1] - mu[r]);

		l[r] += p0 + p1;
		ph[f] = kv_mma<T>::pack(p0, p1);
		pl[f] = kv_mma<T>::pack(p0 - kv_mma<T>::elem(ph[f], 0),
					p1 - kv_mma<T>::elem(ph[f], 1));
	}
}

/*
 * O's rows gid and gid + 8 times @c (kv_tc_online_softmax): what was
 * summed against the old maxima, taken to the new ones before P V adds.
 */
template <int NTILES>
static __device__ __forceinline__ void kv_tc_scale_o(float (*o)[4], const float c[2])
{
#pragma unroll
	for (int j = 0; j < NTILES; j++) {
		o[j][0] *= c[0];
		o[j][1] *= c[0];
		o[j][2] *= c[1];
		o[j][3] *= c[1];
	}
}

/*
 * This lane's ldmatrix.trans row of the 16 tokens of V from @vs (rows ROW
 * bytes apart): lane 8i + k gives row k of block i, the blocks being
 * (tokens 0.., dims 0..), (tokens 8.., dims 0..), (tokens 0.., dims 8..),
 * (tokens 8.., dims 8..).
 */
template <int ROW>
static __device__ __forceinline__ const char *kv_tc_v_row(const char *vs, int lane)
{
	return vs + ((lane >> 3 & 1) * 8 + (lane & 7)) * ROW + (lane >> 4) * 16;
}

/*
 * O += P V over one k-step of 16 tokens: @ph and @pl P's A fragments
 * (kv_tc_p_frags), @vr this lane's row (kv_tc_v_row).  B fragments by
 * ldmatrix.x4.trans from dims 8 j: the blocks transposed, b[0..1] (tokens
 * 0..15 of dims 8 j..) are n-tile j's, b[2..3] n-tile j + 1's; both parts
 * of P go through the same B.
 */
template <typename T, int NTILES>
static __device__ __forceinline__ void kv_tc_compute_sv(float (*o)[4], const uint32_t ph[4],
							const uint32_t pl[4], const char *vr)
{
#pragma unroll
	for (int j = 0; j < NTILES; j += 2) {
		uint32_t b[4];

		kv_ldmatrix_x4<true>(b, vr + j * 16);
#pragma unroll
		for (int h = 0; h < 2; h++) {
			kv_mma<T>::run(o[j + h], ph, b + 2 * h, o[j + h]);
			kv_mma<T>::run(o[j + h], pl, b + 2 * h, o[j + h]);
		}
	}
}

/* @x summed over the 4 lanes of this lane's quad. */
static __device__ __forceinline__ float kv_quad_sum(float x)
{
	x += __shfl_xor_sync(0xffffffffu, x, 1);
	return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

#endif /* KV_CUDA_TC_CUH */
