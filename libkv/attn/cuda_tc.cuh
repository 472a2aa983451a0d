/* SPDX-License-Identifier: MIT */
/*
 * The pieces the two tensor-core kernels (cuda_decode_tc.cuh,
 * cuda_extend_tc.cuh) share, all forced inline: their page staging, the
 * S = Q K^T n-tile, the online-softmax update of a tile and P's A
 * fragments.  Fragments are laid out as for kv_mma (cuda_internal.cuh):
 * a lane holds rows gid = lane >> 2 and gid + 8, the columns 2 tig and
 * +1 of each n8 tile (tig = lane & 3).
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
 * A tile's online-softmax update of rows gid and gid + 8: @mx their
 * maxima in this lane's scores, made the quad's by two shuffles; the
 * running maxima @m and sums @l move on; @c the factor O is rescaled by,
 * @mu what the tile's scores are taken from (0 when nothing is seen yet:
 * no NaN).
 */
static __device__ __forceinline__ void kv_tc_rescale(float mx[2], float m[2], float l[2],
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
 * that P keeps f32-like precision); the rows' sums @l grow by P.
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

/* @x summed over the 4 lanes of this lane's quad. */
static __device__ __forceinline__ float kv_quad_sum(float x)
{
	x += __shfl_xor_sync(0xffffffffu, x, 1);
	return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

#endif /* KV_CUDA_TC_CUH */
