/* SPDX-License-Identifier: MIT */
/*
 * The C reference's inner loops, written once with GCC vector extensions
 * and built once per instruction set: the including file defines KV_VL
 * (floats per vector: 4, 8 or 16), KV_OPS (the ops table's name) and
 * KV_OPS_NAME, and is compiled with the matching -m flags.
 *
 * Per block of KV_REF_TB tokens and per KV head: scores of every query
 * vector of the head's group against the block's K rows (a small GEMM,
 * tiled so that each K load feeds several queries, its dot products summed
 * eight at a time by a shuffle tree), one online-softmax rescale, then the
 * block's V rows accumulated into the outputs (tiled so that each V load
 * feeds several outputs).  K and V are converted to fp32 as they are
 * loaded; nothing is allocated.
 *
 * Decode is memory-bound with nothing to overlap but its own arithmetic,
 * so while one head-block computes, the next one's rows are prefetched, a
 * few per score tile (see struct kv_prefetch).  Measured on a 2-vCPU
 * Zen 5 guest: the spread-out prefetch took decode from ~13 to ~20 GB/s;
 * token-major walks that leave it to the hardware prefetchers got ~11.
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "attn_internal.h"

#if defined(__x86_64__) && (defined(__AVX2__) || defined(__AVX512F__))
#include <immintrin.h>
#endif

typedef float vf __attribute__((vector_size(KV_VL * 4)));
typedef int32_t vi __attribute__((vector_size(KV_VL * 4)));
typedef uint32_t vu __attribute__((vector_size(KV_VL * 4)));
typedef uint16_t vh __attribute__((vector_size(KV_VL * 2)));

#define ALWAYS	static inline __attribute__((always_inline))
/* Tiles live in registers only once their loops are fully unrolled. */
#define UNROLL	_Pragma("GCC unroll 16")
#define TB	KV_REF_TB

/*
 * Rows to prefetch while computing: those of the next head-block (this
 * block's next KV head, or the next block's first).  One head-block ahead
 * is enough to cover memory latency and small enough to stay in L1/L2;
 * the rows of one head are a page-strided gather that the hardware
 * prefetchers do not follow, and decode has nothing else to hide behind.
 */
struct kv_prefetch {
	const uint8_t *k[TB], *v[TB];
	uint32_t n;
	uint64_t row_bytes;
};

#define SC_JMAX	8	/* most tokens in a score tile */
/* Tokens per tile for four query rows: 32 registers hold 4 x 4. */
#define SC_J4	(KV_VL == 16 ? 4 : 2)
/* Accumulate tile: output rows held in registers across a block. */
#define AC_RT	8

ALWAYS vf ld_f32(const void *p)
{
	vf v;

	memcpy(&v, p, sizeof(v));
	return v;
}

ALWAYS void st_f32(void *p, vf v)
{
	memcpy(p, &v, sizeof(v));
}

ALWAYS vf ld_bf16(const void *p)
{
#if KV_VL == 16 && defined(__AVX512F__)
	__m512i x = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));

	return (vf)_mm512_slli_epi32(x, 16);
#elif KV_VL == 8 && defined(__AVX2__)
	__m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));

	return (vf)_mm256_slli_epi32(x, 16);
#else
	vh h;

	memcpy(&h, p, sizeof(h));
	return (vf)(__builtin_convertvector(h, vu) << 16);
#endif
}

ALWAYS vf ld_f16(const void *p)
{
#if KV_VL == 16 && defined(__AVX512F__)
	return (vf)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
#elif KV_VL == 8 && defined(__F16C__)
	return (vf)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
#else
	/* kv_f16_to_f32() on a whole vector, without branches. */
	vh h;
	vu u, em, sign, special;
	vf f;

	memcpy(&h, p, sizeof(h));
	u = __builtin_convertvector(h, vu);
	sign = (u & 0x8000u) << 16;
	em = u & 0x7fffu;
	f = (vf)(em << 13) * 0x1p112f;
	special = (vu)(em >= 0x7c00u);
	u = ((vu)f & ~special) | (((em << 13) | 0x7f800000u) & special);
	return (vf)(u | sign);
#endif
}

/*
 * bf16 by pairs: one load of 2 * KV_VL elements as 32-bit words gives the
 * even elements by a shift and the odd ones by a mask, with no shuffle.
 * Queries and outputs are then kept with each 2 * KV_VL chunk of dims
 * split into [even | odd] (pair_split), which dot products and sums do not
 * mind, and put back in order at the end (pair_join).
 */
#define DT_BF16P	0x100

ALWAYS uint32_t esize(uint32_t dt)
{
	return dt == DT_BF16P ? 2 : kv_dtype_size(dt);
}

ALWAYS void ld_pair(const uint8_t *p, vf *even, vf *odd)
{
	vu x;

	memcpy(&x, p, sizeof(x));
	*even = (vf)(x << 16);
	*odd = (vf)(x & 0xffff0000u);
}

static void pair_split(float *x, uint32_t dim)
{
	float t[2 * KV_VL];
	uint32_t c, i;

	for (c = 0; c < dim; c += 2 * KV_VL) {
		for (i = 0; i < KV_VL; i++) {
			t[i] = x[c + 2 * i];
			t[KV_VL + i] = x[c + 2 * i + 1];
		}
		memcpy(x + c, t, sizeof(t));
	}
}

static void pair_join(float *x, uint32_t dim)
{
	float t[2 * KV_VL];
	uint32_t c, i;

	for (c = 0; c < dim; c += 2 * KV_VL) {
		for (i = 0; i < KV_VL; i++) {
			t[2 * i] = x[c + i];
			t[2 * i + 1] = x[c + KV_VL + i];
		}
		memcpy(x + c, t, sizeof(t));
	}
}

/* @dt is a constant wherever this is inlined, so the switch folds. */
ALWAYS vf ld_kv(uint32_t dt, const uint8_t *p)
{
	if (dt == KVS_DTYPE_BF16)
		return ld_bf16(p);
	if (dt == KVS_DTYPE_F16)
		return ld_f16(p);
	return ld_f32(p);
}

/*
 * The lanes' sum by halving: lane i += lane i + n/2 while n > 1, the very
 * tree reduce8() below follows, so that a score comes out the same bits
 * whichever tile shape computed it (and with it a row's result does not
 * depend on how a call was cut into tiles).
 */
ALWAYS float hsum(vf v)
{
	float x[KV_VL];
	int n, i;

	memcpy(x, &v, sizeof(x));
	for (n = KV_VL / 2; n > 0; n /= 2)
		for (i = 0; i < n; i++)
			x[i] += x[i + n];
	return x[0];
}

/*
 * 2^x for x <= 0 (a difference from a running maximum), ~1e-7 relative:
 * x = n + f with |f| <= 1/2, 2^f by its Taylor series to degree 6, 2^n
 * put into the exponent.  Below 2^-126 the result is a negligible 2^-126
 * rather than a subnormal; NaN stays NaN.
 */
ALWAYS vf vexp2(vf x)
{
	const vf lo = (vf){ 0 } - 126.0f;
	vi small = x < lo;
	vi n;
	vf f, p;

	x = (vf)(((vi)x & ~small) | ((vi)lo & small));
	n = __builtin_convertvector(x - 0.5f, vi);	/* x <= 0: rounds */
	f = x - __builtin_convertvector(n, vf);
	p = 1.5403530393381606e-4f * f + 1.3333558146428443e-3f;
	p = p * f + 9.6181291076284772e-3f;
	p = p * f + 5.5504108664821580e-2f;
	p = p * f + 2.4022650695910071e-1f;
	p = p * f + 6.9314718055994531e-1f;
	p = p * f + 1.0f;
	return p * (vf)((n + 127) << 23);
}

/*
 * Horizontal sums of eight accumulators at once, by a tree of shuffles:
 * each step adds the two halves of every accumulator's lanes while
 * packing two vectors into one, so that 8 sums cost about 7 shuffle
 * pairs instead of 8 separate reductions.  out[i] = sum of a[i]'s lanes.
 */
#define SH	__builtin_shufflevector
ALWAYS void reduce8(const vf *a, float *out)
{
#if KV_VL == 16
	vf c[4], d[2], e, f;
	int i;

	for (i = 0; i < 4; i++)
		c[i] = SH(a[2 * i], a[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7,
			  16, 17, 18, 19, 20, 21, 22, 23) +
		       SH(a[2 * i], a[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15,
			  24, 25, 26, 27, 28, 29, 30, 31);
	for (i = 0; i < 2; i++)
		d[i] = SH(c[2 * i], c[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11,
			  16, 17, 18, 19, 24, 25, 26, 27) +
		       SH(c[2 * i], c[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15,
			  20, 21, 22, 23, 28, 29, 30, 31);
	e = SH(d[0], d[1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
	    SH(d[0], d[1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
	f = SH(e, e, 0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14) +
	    SH(e, e, 1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15);
	memcpy(out, &f, 8 * sizeof(float));
#elif KV_VL == 8
	vf c[4], d[2], e;
	int i;

	for (i = 0; i < 4; i++)
		c[i] = SH(a[2 * i], a[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11) +
		       SH(a[2 * i], a[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15);
	for (i = 0; i < 2; i++)
		d[i] = SH(c[2 * i], c[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13) +
		       SH(c[2 * i], c[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15);
	e = SH(d[0], d[1], 0, 2, 4, 6, 8, 10, 12, 14) +
	    SH(d[0], d[1], 1, 3, 5, 7, 9, 11, 13, 15);
	memcpy(out, &e, 8 * sizeof(float));
#else
	vf c[4], d[2];
	int i;

	for (i = 0; i < 4; i++)
		c[i] = SH(a[2 * i], a[2 * i + 1], 0, 1, 4, 5) +
		       SH(a[2 * i], a[2 * i + 1], 2, 3, 6, 7);
	for (i = 0; i < 2; i++)
		d[i] = SH(c[2 * i], c[2 * i + 1], 0, 2, 4, 6) +
		       SH(c[2 * i], c[2 * i + 1], 1, 3, 5, 7);
	memcpy(out, &d[0], 4 * sizeof(float));
	memcpy(out + 4, &d[1], 4 * sizeof(float));
#endif
}
#undef SH

/*
 * s[r * TB + j] = q_r . k_j for R rows and J tokens (constants).  With
 * R * J == 8 or 16 the sums go through reduce8; other shapes (the
 * leftovers) reduce one by one.
 */
ALWAYS void score_tile(uint32_t dt, int R, int J, const float *q, uint32_t dim,
		       const uint8_t *const *krow, uint32_t es, float *s)
{
	vf a[16];
	float sums[16];
	uint32_t d;
	int r, j;

	UNROLL
	for (r = 0; r < R * J; r++)
		a[r] = (vf){ 0 };
	for (d = 0; dt == DT_BF16P && d < dim; d += 2 * KV_VL) {
		vf ke[SC_JMAX], ko[SC_JMAX];

		UNROLL
		for (j = 0; j < J; j++)
			ld_pair(krow[j] + (size_t)d * 2, &ke[j], &ko[j]);
		UNROLL
		for (r = 0; r < R; r++) {
			vf qe = ld_f32(q + (size_t)r * dim + d);
			vf qo = ld_f32(q + (size_t)r * dim + d + KV_VL);

			UNROLL
			for (j = 0; j < J; j++)
				a[r * J + j] += qe * ke[j] + qo * ko[j];
		}
	}
	for (d = 0; dt != DT_BF16P && d < dim; d += KV_VL) {
		vf k[SC_JMAX];

		UNROLL
		for (j = 0; j < J; j++)
			k[j] = ld_kv(dt, krow[j] + (size_t)d * es);
		UNROLL
		for (r = 0; r < R; r++) {
			vf qv = ld_f32(q + (size_t)r * dim + d);

			UNROLL
			for (j = 0; j < J; j++)
				a[r * J + j] += qv * k[j];
		}
	}
	if (R * J == 8 || R * J == 16) {
		reduce8(a, sums);
		if (R * J == 16)
			reduce8(a + 8, sums + 8);
		UNROLL
		for (r = 0; r < R; r++)
			UNROLL
			for (j = 0; j < J; j++)
				s[r * TB + j] = sums[r * J + j];
		return;
	}
	UNROLL
	for (r = 0; r < R; r++)
		UNROLL
		for (j = 0; j < J; j++)
			s[r * TB + j] = hsum(a[r * J + j]);
}

/* Prefetch rows [j0, j1) of the next head-block (K and V), if any. */
ALWAYS void prefetch_some(const struct kv_prefetch *pf, uint32_t j0, uint32_t j1)
{
	uint32_t j;
	uint64_t b;

	if (j0 >= pf->n)
		return;
	if (j1 > pf->n)
		j1 = pf->n;
	for (j = j0; j < j1; j++)
		for (b = 0; b < pf->row_bytes; b += 64) {
			__builtin_prefetch(pf->k[j] + b, 0, 2);
			__builtin_prefetch(pf->v[j] + b, 0, 2);
		}
}

/*
 * Tiles of @R query rows @q by @J tokens from K row *@j on, while whole
 * ones fit (*@j ends past the last); each tile wider than one token asks
 * for the next @step rows of the next head-block from *@pj on.
 */
ALWAYS void score_tiles(uint32_t dt, int R, int J, const float *q, uint32_t dim,
			const uint8_t *const *krow, uint32_t nb, uint32_t es, float *s,
			const struct kv_prefetch *pf, uint32_t step, uint32_t *j, uint32_t *pj)
{
	for (; *j + J <= nb; *j += J) {
		if (J > 1) {
			prefetch_some(pf, *pj, *pj + step);
			*pj += step;
		}
		score_tile(dt, R, J, q, dim, krow + *j, es, s + *j);
	}
}

/*
 * Scores of @R query vectors (rows of @dim) against @nb K rows, asking
 * for the next head-block's rows a few at a time as it goes: spread out,
 * the prefetches never pile up in the miss queue.
 */
ALWAYS void scores(uint32_t dt, const float *q, uint32_t R, uint32_t dim,
		   const uint8_t *const *krow, uint32_t nb, uint32_t es, float *s,
		   const struct kv_prefetch *pf)
{
	/* About the number of tile calls below, to spread the prefetches over. */
	uint32_t calls = (R / 4) * ((nb + SC_J4 - 1) / SC_J4) + (R % 4) * ((nb + 3) / 4) + 1;
	uint32_t step = (pf->n + calls - 1) / calls, r = 0, j, pj = 0;

	/* Four rows: SC_J4 tokens a tile (2 with 8-lane vectors), then 2, then 1. */
	for (; r + 4 <= R; r += 4) {
		const float *qr = q + (size_t)r * dim;
		float *sr = s + r * TB;

		j = 0;
		score_tiles(dt, 4, SC_J4, qr, dim, krow, nb, es, sr, pf, step, &j, &pj);
		score_tiles(dt, 4, 2, qr, dim, krow, nb, es, sr, pf, step, &j, &pj);
		score_tiles(dt, 4, 1, qr, dim, krow, nb, es, sr, pf, step, &j, &pj);
	}
	/* Fewer rows left (MHA, small groups): more tokens per tile instead. */
	for (; r + 2 <= R; r += 2) {
		const float *qr = q + (size_t)r * dim;
		float *sr = s + r * TB;

		j = 0;
		score_tiles(dt, 2, 4, qr, dim, krow, nb, es, sr, pf, step, &j, &pj);
		score_tiles(dt, 2, 1, qr, dim, krow, nb, es, sr, pf, step, &j, &pj);
	}
	for (; r < R; r++) {
		const float *qr = q + (size_t)r * dim;
		float *sr = s + r * TB;

		j = 0;
		score_tiles(dt, 1, 8, qr, dim, krow, nb, es, sr, pf, step, &j, &pj);
		score_tiles(dt, 1, 1, qr, dim, krow, nb, es, sr, pf, step, &j, &pj);
	}
	prefetch_some(pf, pj, pf->n);	/* whatever the tiles did not cover */
}

/* acc_r += sum_j p[r * TB + j] * v_j for R output rows (a constant). */
ALWAYS void accum_tile(uint32_t dt, int R, float *acc, uint32_t dim,
		       const float *p, const uint8_t *const *vrow, uint32_t nb,
		       uint32_t es)
{
	uint32_t d, j;
	int r;

	for (d = 0; dt == DT_BF16P && d < dim; d += 2 * KV_VL) {
		vf ae[AC_RT], ao[AC_RT];

		UNROLL
		for (r = 0; r < R; r++) {
			ae[r] = ld_f32(acc + (size_t)r * dim + d);
			ao[r] = ld_f32(acc + (size_t)r * dim + d + KV_VL);
		}
		_Pragma("GCC unroll 2")
		for (j = 0; j < nb; j++) {
			vf ve, vo;

			ld_pair(vrow[j] + (size_t)d * 2, &ve, &vo);
			UNROLL
			for (r = 0; r < R; r++) {
				ae[r] += p[r * TB + j] * ve;
				ao[r] += p[r * TB + j] * vo;
			}
		}
		UNROLL
		for (r = 0; r < R; r++) {
			st_f32(acc + (size_t)r * dim + d, ae[r]);
			st_f32(acc + (size_t)r * dim + d + KV_VL, ao[r]);
		}
	}
	for (d = 0; dt != DT_BF16P && d < dim; d += KV_VL) {
		vf a[AC_RT];

		UNROLL
		for (r = 0; r < R; r++)
			a[r] = ld_f32(acc + (size_t)r * dim + d);
		_Pragma("GCC unroll 4")
		for (j = 0; j < nb; j++) {
			vf v = ld_kv(dt, vrow[j] + (size_t)d * es);

			UNROLL
			for (r = 0; r < R; r++)
				a[r] += p[r * TB + j] * v;
		}
		UNROLL
		for (r = 0; r < R; r++)
			st_f32(acc + (size_t)r * dim + d, a[r]);
	}
}

ALWAYS void accum(uint32_t dt, float *acc, uint32_t R, uint32_t dim,
		  const float *p, const uint8_t *const *vrow, uint32_t nb,
		  uint32_t es)
{
	uint32_t r = 0;

	/* Pairs need two registers a row: with 16 registers, four rows. */
	if (dt == DT_BF16P && KV_VL < 16) {
		for (; r + 4 <= R; r += 4)
			accum_tile(dt, 4, acc + (size_t)r * dim, dim, p + r * TB, vrow, nb, es);
	}
	for (; r + AC_RT <= R; r += AC_RT)
		accum_tile(dt, AC_RT, acc + (size_t)r * dim, dim, p + r * TB, vrow, nb, es);
	if (R - r >= 4) {
		accum_tile(dt, 4, acc + (size_t)r * dim, dim, p + r * TB, vrow, nb, es);
		r += 4;
	}
	if (R - r >= 2) {
		accum_tile(dt, 2, acc + (size_t)r * dim, dim, p + r * TB, vrow, nb, es);
		r += 2;
	}
	if (R - r)
		accum_tile(dt, 1, acc + (size_t)r * dim, dim, p + r * TB, vrow, nb, es);
}

ALWAYS vf vsplat(float x)
{
	return (vf){ 0 } + x;
}

ALWAYS vf vsel(vi m, vf a, vf b)
{
	return (vf)(((vi)a & m) | ((vi)b & ~m));
}

ALWAYS float hmax(vf v)
{
	float m = v[0];
	int i;

	for (i = 1; i < KV_VL; i++)
		m = v[i] > m ? v[i] : m;
	return m;
}

/*
 * Online softmax over one block for @R query vectors: the first @valid0
 * tokens are visible to vector 0, and every @group vectors (the next
 * query row) see one token more; at most @nb.  Scores become weights
 * (0 where not visible).  Whole vectors of TB scores at a time.
 */
ALWAYS void softmax_block(float *s, float *m, float *l, float *acc, uint32_t R,
			  uint32_t group, uint32_t dim, uint32_t valid0,
			  uint32_t nb)
{
	vi lane;
	uint32_t r, j, d;
	int i;

	for (i = 0; i < KV_VL; i++)
		lane[i] = i;
	for (r = 0; r < R; r++) {
		int32_t lim = (int32_t)(valid0 + r / group < nb ? valid0 + r / group : nb);
		float *sr = s + r * TB;
		vf mx = vsplat(-INFINITY), sum = { 0 };
		float mb, mn;

		UNROLL
		for (j = 0; j < TB; j += KV_VL) {
			vf x = vsel(lane + (int32_t)j < lim, ld_f32(sr + j), vsplat(-INFINITY));

			mx = vsel(x > mx, x, mx);
		}
		mb = hmax(mx);
		mn = m[r] > mb ? m[r] : mb;
		if (mn != m[r]) {
			/* m starts at -inf, where exp2f gives 0 and acc is 0. */
			float c = exp2f(m[r] - mn);
			float *ar = acc + (size_t)r * dim;

			for (d = 0; d < dim; d++)
				ar[d] *= c;
			l[r] *= c;
			m[r] = mn;
		}
		UNROLL
		for (j = 0; j < TB; j += KV_VL) {
			vi ok = lane + (int32_t)j < lim;
			vf e = (vf)((vi)vexp2(ld_f32(sr + j) - mn) & ok);

			st_f32(sr + j, e);
			sum += e;
		}
		l[r] += hsum(sum);
	}
}

/* Byte offsets of tokens [tb, tb + nb) from the (layer, K|V) base. */
ALWAYS void block_offsets(const struct kv_ref_job *jb, uint32_t tb, uint32_t nb,
			  uint64_t *off)
{
	uint32_t j;

	for (j = 0; j < nb; j++) {
		uint32_t t = tb + j;

		off[j] = (uint64_t)jb->pages[t / jb->tpp] * jb->page_bytes +
			 (t % jb->tpp) * jb->tok_stride;
	}
}

ALWAYS void attend_dt(uint32_t dt, const struct kv_ref_job *jb, struct kv_ref_state *st)
{
	const uint32_t G = jb->group, D = jb->dim, es = esize(dt);
	const uint32_t rows_per_head = jb->n_rows * G;
	const uint64_t head_bytes = (uint64_t)D * es;
	uint64_t off[TB], next[TB];
	const uint8_t *krow[TB], *vrow[TB];
	struct kv_prefetch pf = { .row_bytes = head_bytes };
	uint32_t tb, h, j, first, nb, nb_next;

	nb = jb->t1 - jb->t0 < TB ? jb->t1 - jb->t0 : TB;
	block_offsets(jb, jb->t0, nb, next);
	for (tb = jb->t0; tb < jb->t1; tb += nb) {
		nb = jb->t1 - tb < TB ? jb->t1 - tb : TB;
		memcpy(off, next, nb * sizeof(off[0]));
		nb_next = jb->t1 - (tb + nb) < TB ? jb->t1 - (tb + nb) : TB;
		block_offsets(jb, tb + nb, nb_next, next);
		/* Rows before this block see none of it (extend only). */
		first = tb > jb->pos0 ? tb - jb->pos0 : 0;
		for (h = 0; h < jb->n_kv; h++) {
			size_t v0 = (size_t)h * rows_per_head + (size_t)first * G;
			uint32_t R = rows_per_head - first * G;

			/* The next head-block: this block's next head, or the next block's first. */
			if (h + 1 < jb->n_kv) {
				pf.n = nb;
				for (j = 0; j < nb; j++) {
					pf.k[j] = jb->kbase + off[j] + (h + 1) * head_bytes;
					pf.v[j] = jb->vbase + off[j] + (h + 1) * head_bytes;
				}
			} else {
				pf.n = nb_next;
				for (j = 0; j < nb_next; j++) {
					pf.k[j] = jb->kbase + next[j];
					pf.v[j] = jb->vbase + next[j];
				}
			}
			for (j = 0; j < nb; j++) {
				krow[j] = jb->kbase + off[j] + h * head_bytes;
				vrow[j] = jb->vbase + off[j] + h * head_bytes;
			}
			scores(dt, st->q + v0 * D, R, D, krow, nb, es, st->s, &pf);
			softmax_block(st->s, st->m + v0, st->l + v0, st->acc + v0 * D,
				      R, G, D, jb->pos0 + first + 1 - tb, nb);
			accum(dt, st->acc + v0 * D, R, D, st->s, vrow, nb, es);
		}
	}
}

/* Start the state: scaled queries in [h][i][g] order, empty softmax. */
static void state_start(const struct kv_ref_job *jb, struct kv_ref_state *st,
			bool paired)
{
	const uint32_t G = jb->group, D = jb->dim, nq = jb->n_kv * G;
	uint32_t h, i, g, d;
	size_t v = 0;

	for (h = 0; h < jb->n_kv; h++)
		for (i = 0; i < jb->n_rows; i++)
			for (g = 0; g < G; g++, v++) {
				const float *src = jb->q + ((size_t)i * nq + h * G + g) * D;

				for (d = 0; d < D; d++)
					st->q[v * D + d] = src[d] * jb->scale2;
				if (paired)
					pair_split(st->q + v * D, D);
				memset(st->acc + v * D, 0, D * sizeof(float));
				st->m[v] = -INFINITY;
				st->l[v] = 0;
			}
}

static void attend_f16(const struct kv_ref_job *jb, struct kv_ref_state *st)
{
	attend_dt(KVS_DTYPE_F16, jb, st);
}

static void attend_bf16(const struct kv_ref_job *jb, struct kv_ref_state *st)
{
	attend_dt(KVS_DTYPE_BF16, jb, st);
}

static void attend_bf16_pairs(const struct kv_ref_job *jb, struct kv_ref_state *st)
{
	size_t v, n = (size_t)jb->n_kv * jb->group * jb->n_rows;

	attend_dt(DT_BF16P, jb, st);
	for (v = 0; v < n; v++)
		pair_join(st->acc + v * jb->dim, jb->dim);
}

static void attend_f32(const struct kv_ref_job *jb, struct kv_ref_state *st)
{
	attend_dt(KVS_DTYPE_F32, jb, st);
}

static void attend(const struct kv_ref_job *jb, struct kv_ref_state *st)
{
	bool pairs = jb->dtype == KVS_DTYPE_BF16 && jb->dim % (2 * KV_VL) == 0;

	state_start(jb, st, pairs);
	switch (jb->dtype) {
	case KVS_DTYPE_F16:
		attend_f16(jb, st);
		break;
	case KVS_DTYPE_BF16:
		if (pairs)
			attend_bf16_pairs(jb, st);
		else
			attend_bf16(jb, st);
		break;
	default:
		attend_f32(jb, st);
		break;
	}
}

const struct kv_ref_ops KV_OPS = {
	.name = KV_OPS_NAME,
	.vl = KV_VL,
	.attend = attend,
};
