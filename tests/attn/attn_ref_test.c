// SPDX-License-Identifier: GPL-2.0
/*
 * The C reference of paged attention against a naive dense attention in
 * double precision (attn_test.h), on random non-identity page tables with
 * NaN in every slot nobody wrote, for every instruction set this CPU has.
 *
 * Tolerances.  The naive reads the very values the pool stores (K and V
 * rounded to the storage type first), so only the reference's fp32
 * arithmetic separates the two: relative Frobenius error <= 2e-5 and
 * |LSE error| <= 1e-4, for every storage type.  Against the unrounded
 * fp32 K/V (what research/gpu.md's bounds are for: rel. Frobenius 2e-3 for
 * fp16, 1e-2 for bf16 operands) a separate test checks that storage
 * rounding stays inside those.  NaN or Inf anywhere fails.
 */
#include <errno.h>
#include <math.h>

#include "kselftest_harness.h"
#include "attn_test.h"

#define TOL_FROB	2e-5
#define TOL_LSE		1e-4

static const char *const isas[] = { "base", "avx2", "avx512" };
#define N_ISAS	(sizeof(isas) / sizeof(isas[0]))

/* Query heads' buffers for @rows rows, filled with NaN (every element must be written). */
static float *poisoned(size_t n)
{
	float *p = malloc(n * sizeof(float) + 1);
	size_t i;

	for (i = 0; p && i < n; i++)
		p[i] = nanf("");
	return p;
}

/*
 * Run decode or extend on @e with @p on every instruction set this CPU
 * has, and compare each to the naive.  0 when all pass.
 */
static int check_env(struct __test_metadata *_metadata, struct at_env *e,
		     bool extend, const struct kv_attn_params *p, const char *what)
{
	uint32_t rows = extend ? e->rows_ext : e->rows_dec;
	size_t n = (size_t)rows * e->nq * e->c.dim;
	double *ref = malloc(n * sizeof(double)), *ref_lse = malloc(rows * e->nq * sizeof(double));
	unsigned int i, ran = 0;
	int bad = 0;

	if (!ref || !ref_lse || at_naive(e, extend, ref, ref_lse)) {
		free(ref);
		free(ref_lse);
		return -1;
	}
	for (i = 0; i < N_ISAS; i++) {
		float *out = poisoned(n), *lse = poisoned((size_t)rows * e->nq);
		struct at_err err;
		int ret;

		if (kv_attn_ref_set_isa(isas[i])) {
			free(out);
			free(lse);
			continue;
		}
		ran++;
		ret = extend ? kv_attn_extend_ref(&e->kv, &e->bx, p, e->q_ext, out, lse)
			     : kv_attn_decode_ref(&e->kv, &e->b, p, e->q_dec, out, lse);
		err = at_compare(out, ref, n, lse, ref_lse, (size_t)rows * e->nq);
		if (ret || err.not_finite || !(err.rel_frob <= TOL_FROB) ||
		    !(err.lse_abs <= TOL_LSE)) {
			TH_LOG("%s %s [%s] %s D=%u T=%u Hkv=%u G=%u: ret %d, rel %.3g, max %.3g, lse %.3g, %zu not finite",
			       what, extend ? "extend" : "decode", isas[i],
			       at_dtype_name(e->c.dtype), e->c.dim, e->c.tpp, e->c.n_kv,
			       e->c.group, ret, err.rel_frob, err.max_abs, err.lse_abs,
			       err.not_finite);
			bad = 1;
		}
		free(out);
		free(lse);
	}
	kv_attn_ref_set_isa(NULL);
	free(ref);
	free(ref_lse);
	if (!ran)
		TH_LOG("no instruction set ran");
	return bad || !ran;
}

static const uint32_t dtypes[] = { KVS_DTYPE_F16, KVS_DTYPE_BF16, KVS_DTYPE_F32 };
static const uint32_t dims[] = { 64, 128, 256 };
static const uint32_t tpps[] = { 1, 16, 32, 64 };

/* Grid point @idx: every dtype x head dim x page size, rotating KV heads and GQA. */
static void grid_case(struct at_case *c, unsigned int idx, uint64_t seed)
{
	static const uint32_t kvh[] = { 1, 2, 4 }, groups[] = { 1, 4, 8 };

	memset(c, 0, sizeof(*c));
	c->dtype = dtypes[idx % 3];
	c->dim = dims[idx / 3 % 3];
	c->tpp = tpps[idx / 9 % 4];
	c->n_kv = kvh[idx % 3];
	c->group = groups[(idx / 3 + idx / 9) % 3];
	/* Keep the naive cheap at the widest heads. */
	if (c->dim == 256 && c->n_kv * c->group > 8)
		c->n_kv = 1;
	c->n_layers = 3;
	c->layer = idx % 3;
	c->qscale = idx % 2 ? 4.0f : 1.0f;	/* flat and peaked softmax */
	c->seed = seed + idx;
}

/* Lengths at the page edges, and a longer random one. */
static void edge_lengths(struct at_case *c, uint64_t *rng)
{
	uint32_t t = c->tpp;

	c->n_reqs = 6;
	c->seq[0] = 1;
	c->seq[1] = t > 1 ? t - 1 : 2;
	c->seq[2] = t;
	c->seq[3] = t + 1;
	c->seq[4] = 2 * t + 3;
	c->seq[5] = 1 + at_below(rng, 700);
}

TEST(layout_is_a_bijection)
{
	const uint32_t L = 2, H = 3, D = 8, T = 4;
	unsigned int k;

	for (k = 0; k < 3; k++) {
		struct kvs_geometry g = { .n_layers = L, .n_kv_heads = H, .head_dim = D,
					  .tokens_per_page = T, .dtype = dtypes[k] };
		uint32_t es = kv_dtype_size(g.dtype), layer, w, s, h, d;
		uint64_t n = kv_page_bytes(&g) / es, seen = 0;
		uint8_t *mark = calloc(n, 1);

		ASSERT_NE(NULL, mark);
		ASSERT_EQ(2ull * L * H * D * T * es, kv_page_bytes(&g));
		for (layer = 0; layer < L; layer++)
			for (w = 0; w < 2; w++)
				for (s = 0; s < T; s++)
					for (h = 0; h < H; h++)
						for (d = 0; d < D; d++) {
							uint64_t i = kv_elem_in_page(&g, layer, w, s, h, d);
							uint64_t off = kv_offset(&g, 5, layer, w, s, h, d);

							ASSERT_LT(i, n);
							ASSERT_EQ(0, mark[i]);
							mark[i] = 1;
							seen++;
							ASSERT_EQ(5 * kv_page_bytes(&g) + i * es, off);
							/* NHD: dims, then heads, then tokens. */
							if (d + 1 < D)
								ASSERT_EQ(off + es, kv_offset(&g, 5, layer, w, s, h, d + 1));
							if (h + 1 < H)
								ASSERT_EQ(off + D * es, kv_offset(&g, 5, layer, w, s, h + 1, d));
							if (s + 1 < T)
								ASSERT_EQ(off + kv_token_stride(&g),
									  kv_offset(&g, 5, layer, w, s + 1, h, d));
						}
		ASSERT_EQ(n, seen);
		ASSERT_EQ(kv_block_offset(&g, 1, KV_V), kv_offset(&g, 0, 1, KV_V, 0, 0, 0));
		free(mark);
	}
}

/* Value of a non-negative fp16/bf16 encoding, computed from its fields. */
static double f16_value(uint16_t h)
{
	int e = (h >> 10) & 31, m = h & 1023;

	return e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
}

static double bf16_value(uint16_t h)
{
	int e = (h >> 7) & 255, m = h & 127;

	return e ? ldexp(128 + m, e - 134) : ldexp(m, -133);
}

/*
 * Round |x| to the nearest encoding among 0..@max_finite (monotonic),
 * ties to even, where max_finite + 1 (Inf) counts as the next power of two.
 */
static uint16_t round_oracle(double (*val)(uint16_t), uint16_t max_finite,
			     double inf_at, float x)
{
	double a = fabs((double)x), lo_v, hi_v;
	uint32_t lo = 0, hi = max_finite, mid;
	uint16_t sign = signbit(x) ? 0x8000 : 0, r;

	if (a >= val(max_finite)) {
		lo = max_finite;
	} else {
		while (lo < hi) {	/* largest encoding with value <= a */
			mid = (lo + hi + 1) / 2;
			if (val(mid) <= a)
				lo = mid;
			else
				hi = mid - 1;
		}
	}
	lo_v = val(lo);
	hi_v = lo == max_finite ? inf_at : val(lo + 1);
	if (a - lo_v < hi_v - a || (a - lo_v == hi_v - a && !(lo & 1)))
		r = lo;
	else
		r = lo + 1;
	return sign | r;
}

TEST(bf16_conversions)
{
	uint64_t rng = 7;
	uint32_t h, i;

	for (h = 0; h < 65536; h++) {
		float f = kv_bf16_to_f32(h);

		if ((h & 0x7fff) > 0x7f80) {
			ASSERT_TRUE(isnan(f));
			ASSERT_EQ(h | 0x40, kv_f32_to_bf16(f));
			continue;
		}
		ASSERT_EQ(h, kv_f32_to_bf16(f));
		if ((h & 0x7fff) < 0x7f80)
			ASSERT_EQ(bf16_value(h & 0x7fff), fabs((double)f));
	}
	/* Every tie and both of its neighbours, then random bit patterns. */
	for (h = 0; h < 0x7f7f; h++) {
		float mid = (float)((bf16_value(h) + bf16_value(h + 1)) / 2);
		float probe[3] = { mid, nextafterf(mid, 0), nextafterf(mid, INFINITY) };

		for (i = 0; i < 3; i++)
			ASSERT_EQ(round_oracle(bf16_value, 0x7f7f, 0x1p128, probe[i]),
				  kv_f32_to_bf16(probe[i]));
	}
	for (i = 0; i < 1000000; i++) {
		float f = kv_bits_f32((uint32_t)at_rand(&rng));

		if (isnan(f)) {
			ASSERT_TRUE(isnan(kv_bf16_to_f32(kv_f32_to_bf16(f))));
		} else if (isinf(f)) {
			ASSERT_EQ((kv_f32_bits(f) >> 16), kv_f32_to_bf16(f));
		} else {
			ASSERT_EQ(round_oracle(bf16_value, 0x7f7f, 0x1p128, f), kv_f32_to_bf16(f));
		}
	}
}

TEST(f16_conversions)
{
	uint64_t rng = 11;
	uint32_t h, i;

	for (h = 0; h < 65536; h++) {
		float f = kv_f16_to_f32(h);

		if ((h & 0x7fff) > 0x7c00) {
			ASSERT_TRUE(isnan(f));
			ASSERT_EQ(h | 0x200, kv_f32_to_f16(f));
			continue;
		}
		ASSERT_EQ(h, kv_f32_to_f16(f));
		ASSERT_EQ(!!(h & 0x8000), !!signbit(f));
		if ((h & 0x7fff) < 0x7c00) {
			ASSERT_EQ(f16_value(h & 0x7fff), fabs((double)f));
		} else {
			ASSERT_TRUE(isinf(f));
		}
	}
	for (h = 0; h < 0x7bff; h++) {
		float mid = (float)((f16_value(h) + f16_value(h + 1)) / 2);
		float probe[3] = { mid, nextafterf(mid, 0), nextafterf(mid, INFINITY) };

		for (i = 0; i < 3; i++)
			ASSERT_EQ(round_oracle(f16_value, 0x7bff, 65536.0, probe[i]),
				  kv_f32_to_f16(probe[i]));
	}
	for (i = 0; i < 1000000; i++) {
		/* Exponents near fp16's range, where the rounding happens. */
		uint32_t u = (uint32_t)at_rand(&rng);
		float f = kv_bits_f32((u & 0x807fffffu) | ((96 + u % 48) << 23));

		ASSERT_EQ(round_oracle(f16_value, 0x7bff, 65536.0, f), kv_f32_to_f16(f));
	}
	ASSERT_EQ(0x7c00, kv_f32_to_f16(65520.0f));
	ASSERT_EQ(0x7bff, kv_f32_to_f16(65519.996f));
	ASSERT_EQ(0xfc00, kv_f32_to_f16(-INFINITY));
	ASSERT_EQ(0x0000, kv_f32_to_f16(0x1p-25f));
	ASSERT_EQ(0x0001, kv_f32_to_f16(0x1.000002p-25f));
}

/* The write puts each token where kv_layout.h says and touches nothing else. */
TEST(write_places_every_token)
{
	struct at_case c = { .dtype = KVS_DTYPE_BF16, .dim = 64, .tpp = 16, .n_kv = 3,
			     .group = 1, .n_layers = 3, .layer = 2, .n_reqs = 4,
			     .seq = { 1, 16, 17, 100 }, .seed = 3 };
	unsigned int k;

	for (k = 0; k < 3; k++) {
		struct at_env e;
		uint64_t written = 0, finite = 0, i;
		uint32_t es, r, t, h, d, w;

		c.dtype = dtypes[k];
		ASSERT_EQ(0, at_env_init(&e, &c));
		es = kv_dtype_size(c.dtype);
		for (r = 0; r < c.n_reqs; r++)
			for (t = 0; t < c.seq[r]; t++) {
				uint32_t page = e.pages[e.page_indptr[r] + t / c.tpp];

				for (w = 0; w < 2; w++)
					for (h = 0; h < c.n_kv; h++)
						for (d = 0; d < c.dim; d++) {
							const float *src = w ? e.V : e.K;
							float want = src[((size_t)(e.tok_off[r] + t) * c.n_kv + h) * c.dim + d];
							uint64_t off = kv_offset(&e.kv.geom, page, c.layer, w,
										 t % c.tpp, h, d);
							float got;
							uint16_t x;

							if (es == 4) {
								memcpy(&got, e.mem + off, 4);
							} else {
								memcpy(&x, e.mem + off, 2);
								got = c.dtype == KVS_DTYPE_BF16 ?
								      kv_bf16_to_f32(x) : kv_f16_to_f32(x);
							}
							ASSERT_EQ(kv_f32_bits(want), kv_f32_bits(got));
							written++;
						}
			}
		for (i = 0; i < e.mem_bytes; i += es) {
			float f;
			uint16_t x;

			if (es == 4) {
				memcpy(&f, e.mem + i, 4);
			} else {
				memcpy(&x, e.mem + i, 2);
				f = c.dtype == KVS_DTYPE_BF16 ? kv_bf16_to_f32(x) : kv_f16_to_f32(x);
			}
			finite += !isnan(f);
		}
		ASSERT_EQ(written, finite);
		at_env_free(&e);
	}
}

/* Decode over dtype x head dim x page size, GQA 1/4/8, lengths at page edges. */
TEST(decode_grid)
{
	uint64_t rng = 101;
	unsigned int idx;

	for (idx = 0; idx < 36; idx++) {
		struct kv_attn_params p = { 0 };
		struct at_case c;
		struct at_env e;

		grid_case(&c, idx, 1000);
		edge_lengths(&c, &rng);
		ASSERT_EQ(0, at_env_init(&e, &c));
		p.n_q_heads = e.nq;
		ASSERT_EQ(0, check_env(_metadata, &e, false, &p, "grid"));
		at_env_free(&e);
	}
}

/* Extend: prefill (no prefix), one new token, and new tokens over prefixes. */
TEST(extend_grid)
{
	uint64_t rng = 202;
	unsigned int idx;

	for (idx = 0; idx < 36; idx++) {
		struct kv_attn_params p = { 0 };
		struct at_case c;
		struct at_env e;

		grid_case(&c, idx, 2000);
		if (c.n_kv * c.group > 8)
			c.group = 8 / c.n_kv;
		c.n_reqs = 4;
		c.seq[0] = 37;			/* prefill */
		c.n_new[0] = 37;
		c.seq[1] = c.tpp;		/* one new token: decode through extend */
		c.n_new[1] = 1;
		c.seq[2] = 9 + at_below(&rng, 300);
		c.n_new[2] = 9;
		c.seq[3] = c.tpp + 17;
		c.n_new[3] = 17;
		ASSERT_EQ(0, at_env_init(&e, &c));
		p.n_q_heads = e.nq;
		ASSERT_EQ(0, check_env(_metadata, &e, true, &p, "grid"));
		at_env_free(&e);
	}
}

/* Split decode: any split size, with and without threads, matches. */
TEST(decode_splits_and_threads)
{
	static const uint32_t splits[] = { 0, 1, 13, 64, 100, 1000 };
	struct at_case c = { .dtype = KVS_DTYPE_BF16, .dim = 128, .tpp = 16, .n_kv = 2,
			     .group = 4, .n_reqs = 5, .seq = { 1, 2047, 3000, 15, 700 },
			     .qscale = 3, .seed = 5 };
	struct kv_attn_workers *w3 = kv_attn_workers_create(3);
	struct at_env e;
	unsigned int i;

	ASSERT_NE(NULL, w3);
	ASSERT_EQ(0, at_env_init(&e, &c));
	for (i = 0; i < sizeof(splits) / sizeof(splits[0]); i++) {
		struct kv_attn_params p = { .n_q_heads = e.nq, .kv_split = splits[i] };

		ASSERT_EQ(0, check_env(_metadata, &e, false, &p, "split"));
		p.workers = w3;
		ASSERT_EQ(0, check_env(_metadata, &e, false, &p, "split+threads"));
	}
	at_env_free(&e);
	kv_attn_workers_destroy(w3);
}

/* With the split fixed, the thread count changes nothing, bit for bit. */
TEST(threads_are_deterministic)
{
	struct at_case c = { .dtype = KVS_DTYPE_F16, .dim = 64, .tpp = 32, .n_kv = 4,
			     .group = 2, .n_reqs = 3, .seq = { 5000, 33, 1200 },
			     .n_new = { 40, 33, 1 }, .seed = 9 };
	unsigned int nthreads[] = { 1, 2, 5 }, i;
	float *ref_d = NULL, *ref_x = NULL;
	struct at_env e;
	size_t nd, nx;

	ASSERT_EQ(0, at_env_init(&e, &c));
	nd = (size_t)e.rows_dec * e.nq * c.dim;
	nx = (size_t)e.rows_ext * e.nq * c.dim;
	for (i = 0; i < 3; i++) {
		struct kv_attn_workers *w = kv_attn_workers_create(nthreads[i]);
		struct kv_attn_params p = { .n_q_heads = e.nq, .kv_split = 512, .workers = w };
		float *od = poisoned(nd), *ox = poisoned(nx);

		ASSERT_NE(NULL, w);
		ASSERT_EQ(0, kv_attn_decode_ref(&e.kv, &e.b, &p, e.q_dec, od, NULL));
		ASSERT_EQ(0, kv_attn_extend_ref(&e.kv, &e.bx, &p, e.q_ext, ox, NULL));
		if (!i) {
			ref_d = od;
			ref_x = ox;
		} else {
			ASSERT_EQ(0, memcmp(ref_d, od, nd * sizeof(float)));
			ASSERT_EQ(0, memcmp(ref_x, ox, nx * sizeof(float)));
			free(od);
			free(ox);
		}
		kv_attn_workers_destroy(w);
	}
	free(ref_d);
	free(ref_x);
	at_env_free(&e);
}

/*
 * A prompt cut into calls anywhere (chunked prefill, a cached prefix)
 * gives the very bits of one whole prefill: attn.h promises it, and
 * prefix sharing leans on it (a page computed by one process after its
 * own cached prefix must equal the page another computes from scratch).
 */
TEST(extend_is_chunk_invariant)
{
	static const uint32_t cuts[][3] = { { 3, 250, 447 }, { 16, 17, 600 }, { 1, 2, 9 } };
	static const uint32_t tpps_here[] = { 1, 16 };
	unsigned int t, k, i, s;

	for (t = 0; t < 2; t++) {
		struct at_case c = { .dtype = t ? KVS_DTYPE_BF16 : KVS_DTYPE_F16, .dim = 64,
				     .tpp = tpps_here[t], .n_kv = 2, .group = 3, .n_reqs = 1,
				     .seq = { 700 }, .n_new = { 700 }, .seed = 31 + t };
		struct kv_attn_params p = { 0 };
		struct at_env e;
		size_t row_f, n;
		float *whole, *part, *wl, *pl;

		ASSERT_EQ(0, at_env_init(&e, &c));
		p.n_q_heads = e.nq;
		row_f = (size_t)e.nq * c.dim;
		n = c.seq[0] * row_f;
		for (i = 0; i < N_ISAS; i++) {
			if (kv_attn_ref_set_isa(isas[i]))
				continue;
			whole = poisoned(n);
			wl = poisoned((size_t)c.seq[0] * e.nq);
			ASSERT_EQ(0, kv_attn_extend_ref(&e.kv, &e.bx, &p, e.q_ext, whole, wl));
			for (k = 0; k < 3; k++) {
				uint32_t bounds[5] = { 0, cuts[k][0], cuts[k][1], cuts[k][2], c.seq[0] };

				part = poisoned(n);
				pl = poisoned((size_t)c.seq[0] * e.nq);
				for (s = 0; s < 4; s++) {
					uint32_t qi[2] = { 0, bounds[s + 1] - bounds[s] };
					uint32_t seq = bounds[s + 1];
					struct kv_attn_batch b = e.bx;

					b.seq_lens = &seq;
					b.q_indptr = qi;
					b.max_q_len = 0;
					ASSERT_EQ(0, kv_attn_extend_ref(&e.kv, &b, &p,
									e.q_ext + bounds[s] * row_f,
									part + bounds[s] * row_f,
									pl + (size_t)bounds[s] * e.nq));
				}
				EXPECT_EQ(0, memcmp(whole, part, n * sizeof(float))) {
					TH_LOG("[%s] T=%u cuts %u/%u/%u: outputs differ",
					       isas[i], c.tpp, cuts[k][0], cuts[k][1], cuts[k][2]);
				}
				EXPECT_EQ(0, memcmp(wl, pl, (size_t)c.seq[0] * e.nq * sizeof(float)));
				free(part);
				free(pl);
			}
			free(whole);
			free(wl);
		}
		kv_attn_ref_set_isa(NULL);
		at_env_free(&e);
	}
}

/* A shared prefix: the same physical pages in every request's table. */
TEST(shared_prefix_pages)
{
	struct at_case c = { .dtype = KVS_DTYPE_BF16, .dim = 128, .tpp = 16, .n_kv = 2,
			     .group = 4, .n_reqs = 4, .seq = { 320, 330, 400, 321 },
			     .n_new = { 1, 10, 80, 1 }, .shared_pages = 20, .seed = 21 };
	struct kv_attn_params p = { 0 };
	struct at_env e;

	ASSERT_EQ(0, at_env_init(&e, &c));
	p.n_q_heads = e.nq;
	ASSERT_EQ(0, check_env(_metadata, &e, false, &p, "shared"));
	ASSERT_EQ(0, check_env(_metadata, &e, true, &p, "shared"));
	at_env_free(&e);
}

/*
 * Head dims that are multiples of 8 but not of the widest vectors: the
 * narrower instruction sets and the bf16 path without pairs take them.
 */
TEST(other_head_dims)
{
	static const uint32_t odd_dims[] = { 8, 24, 72, 80, 96 };
	unsigned int i, k;

	for (i = 0; i < sizeof(odd_dims) / sizeof(odd_dims[0]); i++)
		for (k = 0; k < 3; k++) {
			struct at_case c = { .dtype = dtypes[k], .dim = odd_dims[i], .tpp = 16,
					     .n_kv = 2, .group = 4, .n_reqs = 3,
					     .seq = { 1, 100, 333 }, .n_new = { 1, 20, 9 },
					     .seed = 77 + i };
			struct kv_attn_params p = { 0 };
			struct at_env e;

			ASSERT_EQ(0, at_env_init(&e, &c));
			p.n_q_heads = e.nq;
			ASSERT_EQ(0, check_env(_metadata, &e, false, &p, "dims"));
			ASSERT_EQ(0, check_env(_metadata, &e, true, &p, "dims"));
			at_env_free(&e);
		}
}

/* fp16 subnormals and tiny values take the conversion's slow corners. */
TEST(f16_subnormal_values)
{
	struct at_case c = { .dtype = KVS_DTYPE_F16, .dim = 64, .tpp = 16, .n_kv = 1,
			     .group = 4, .n_reqs = 2, .seq = { 100, 37 }, .seed = 33 };
	struct kv_attn_params p = { 0 };
	struct at_env e;
	size_t i, n;

	ASSERT_EQ(0, at_env_init(&e, &c));
	n = (size_t)e.n_tok * c.n_kv * c.dim;
	for (i = 0; i < n; i++)
		e.V[i] = at_round(c.dtype, e.V[i] * 0x1p-16f);	/* mostly subnormal */
	{
		struct kv_attn_batch wb = e.b;

		wb.q_indptr = e.tok_off;
		wb.max_q_len = 0;
		ASSERT_EQ(0, kv_attn_write_ref(&e.kv, &wb, e.K, e.V));
	}
	p.n_q_heads = e.nq;
	ASSERT_EQ(0, check_env(_metadata, &e, false, &p, "subnormal"));
	at_env_free(&e);
}

/* Storage rounding against fp32 K/V stays inside research/gpu.md's bounds. */
TEST(storage_error_within_gpu_md_bounds)
{
	static const double bound[] = { 2e-3, 1e-2 };
	unsigned int k;

	for (k = 0; k < 2; k++) {
		struct at_case c = { .dtype = dtypes[k], .dim = 128, .tpp = 16, .n_kv = 2,
				     .group = 4, .n_reqs = 3, .seq = { 1000, 77, 1 },
				     .qscale = 2, .seed = 44 };
		struct kv_attn_params p = { 0 };
		struct at_env e, e32;
		struct at_err err;
		size_t n;
		double *ref, *ref_lse;
		float *out;

		ASSERT_EQ(0, at_env_init(&e, &c));
		c.dtype = KVS_DTYPE_F32;
		/* Same seed: the same draws, unrounded; the same queries. */
		ASSERT_EQ(0, at_env_init(&e32, &c));
		n = (size_t)e.rows_dec * e.nq * c.dim;
		ref = malloc(n * sizeof(double));
		ref_lse = malloc(e.rows_dec * e.nq * sizeof(double));
		out = poisoned(n);
		ASSERT_EQ(0, at_naive(&e32, false, ref, ref_lse));
		p.n_q_heads = e.nq;
		ASSERT_EQ(0, kv_attn_decode_ref(&e.kv, &e.b, &p, e.q_dec, out, NULL));
		err = at_compare(out, ref, n, NULL, NULL, 0);
		TH_LOG("%s storage: rel. Frobenius %.3g vs fp32 K/V", at_dtype_name(dtypes[k]),
		       err.rel_frob);
		ASSERT_EQ(0, err.not_finite);
		ASSERT_TRUE(err.rel_frob < bound[k]);
		free(ref);
		free(ref_lse);
		free(out);
		at_env_free(&e);
		at_env_free(&e32);
	}
}

/* The long contexts: 32k tokens, with and without splits, with threads. */
TEST(decode_32k)
{
	struct at_case c = { .dtype = KVS_DTYPE_BF16, .dim = 128, .tpp = 16, .n_kv = 2,
			     .group = 8, .n_reqs = 2, .seq = { 32768, 4097 },
			     .qscale = 4, .seed = 55 };
	struct kv_attn_workers *w = kv_attn_workers_create(2);
	struct kv_attn_params p = { 0 };
	struct at_env e;

	ASSERT_NE(NULL, w);
	ASSERT_EQ(0, at_env_init(&e, &c));
	p.n_q_heads = e.nq;
	p.workers = w;
	ASSERT_EQ(0, check_env(_metadata, &e, false, &p, "32k"));
	at_env_free(&e);

	c = (struct at_case){ .dtype = KVS_DTYPE_F16, .dim = 64, .tpp = 64, .n_kv = 4,
			      .group = 1, .n_reqs = 2, .seq = { 32000, 1 },
			      .n_new = { 3, 1 }, .seed = 56 };
	ASSERT_EQ(0, at_env_init(&e, &c));
	p.n_q_heads = e.nq;
	p.kv_split = 4096;
	ASSERT_EQ(0, check_env(_metadata, &e, false, &p, "32k"));
	/* Extend over a 32k prefix: three new tokens. */
	ASSERT_EQ(0, check_env(_metadata, &e, true, &p, "32k"));
	at_env_free(&e);
	kv_attn_workers_destroy(w);
}

TEST(bad_arguments)
{
	struct at_case c = { .dtype = KVS_DTYPE_BF16, .dim = 64, .tpp = 16, .n_kv = 2,
			     .group = 2, .n_reqs = 2, .seq = { 40, 16 }, .n_new = { 5, 2 },
			     .seed = 66 };
	struct kv_attn_params p = { 0 };
	struct kv_attn_kv kv;
	struct kv_attn_batch b;
	struct at_env e;
	uint32_t seq[2], pages_bad[16], qi[3];
	float *out;

	ASSERT_EQ(0, at_env_init(&e, &c));
	out = poisoned((size_t)e.rows_ext * e.nq * c.dim + e.rows_dec * e.nq * c.dim);
	p.n_q_heads = e.nq;
	ASSERT_EQ(0, kv_attn_decode_ref(&e.kv, &e.b, &p, e.q_dec, out, NULL));

	p.n_q_heads = 3;		/* not a multiple of the KV heads */
	ASSERT_EQ(-EINVAL, kv_attn_decode_ref(&e.kv, &e.b, &p, e.q_dec, out, NULL));
	p.n_q_heads = e.nq;
	p.scale = NAN;
	ASSERT_EQ(-EINVAL, kv_attn_decode_ref(&e.kv, &e.b, &p, e.q_dec, out, NULL));
	p.scale = 0;

	kv = e.kv;
	kv.geom.dtype = KVS_DTYPE_FP8;
	ASSERT_EQ(-EOPNOTSUPP, kv_attn_decode_ref(&kv, &e.b, &p, e.q_dec, out, NULL));
	kv = e.kv;
	kv.geom.page_bytes += 2;
	ASSERT_EQ(-EINVAL, kv_attn_decode_ref(&kv, &e.b, &p, e.q_dec, out, NULL));
	kv = e.kv;
	kv.layer = kv.geom.n_layers;
	ASSERT_EQ(-EINVAL, kv_attn_write_ref(&kv, &e.b, e.K, e.V));
	kv = e.kv;
	kv.geom.head_dim = 12;
	kv.geom.page_bytes = 0;
	ASSERT_EQ(-EOPNOTSUPP, kv_attn_decode_ref(&kv, &e.b, &p, e.q_dec, out, NULL));

	/* A length past the request's pages, and zero. */
	b = e.b;
	seq[0] = 40;
	seq[1] = (e.page_indptr[2] - e.page_indptr[1]) * c.tpp + 1;
	b.seq_lens = seq;
	ASSERT_EQ(-EINVAL, kv_attn_decode_ref(&e.kv, &b, &p, e.q_dec, out, NULL));
	seq[1] = 0;
	ASSERT_EQ(-EINVAL, kv_attn_decode_ref(&e.kv, &b, &p, e.q_dec, out, NULL));

	/* A page index outside the pool. */
	b = e.b;
	memcpy(pages_bad, e.pages, e.page_indptr[2] * sizeof(uint32_t));
	pages_bad[1] = e.kv.n_pages;
	b.pages = pages_bad;
	ASSERT_EQ(-EINVAL, kv_attn_decode_ref(&e.kv, &b, &p, e.q_dec, out, NULL));
	ASSERT_EQ(-EINVAL, kv_attn_write_ref(&e.kv, &b, e.K, e.V));

	/* More new tokens than tokens; q_indptr going backwards; hints exceeded. */
	b = e.bx;
	qi[0] = 0;
	qi[1] = 41;
	qi[2] = 43;
	b.q_indptr = qi;
	b.max_q_len = 0;
	ASSERT_EQ(-EINVAL, kv_attn_extend_ref(&e.kv, &b, &p, e.q_ext, out, NULL));
	qi[1] = 5;
	qi[2] = 4;
	ASSERT_EQ(-EINVAL, kv_attn_extend_ref(&e.kv, &b, &p, e.q_ext, out, NULL));
	b = e.bx;
	b.max_q_len = 4;
	ASSERT_EQ(-EINVAL, kv_attn_extend_ref(&e.kv, &b, &p, e.q_ext, out, NULL));
	b = e.b;
	b.max_seq_len = 39;
	ASSERT_EQ(-EINVAL, kv_attn_decode_ref(&e.kv, &b, &p, e.q_dec, out, NULL));

	/* An empty batch is nothing to do. */
	b = e.b;
	b.n_reqs = 0;
	ASSERT_EQ(0, kv_attn_decode_ref(&e.kv, &b, &p, NULL, NULL, NULL));
	free(out);
	at_env_free(&e);
}

TEST(instruction_set_choice)
{
	const char *auto_isa = kv_attn_ref_isa();

	ASSERT_NE(NULL, auto_isa);
	TH_LOG("this CPU runs the \"%s\" inner loops", auto_isa);
	ASSERT_EQ(-EINVAL, kv_attn_ref_set_isa("sse9"));
	ASSERT_EQ(0, kv_attn_ref_set_isa("base"));
	ASSERT_EQ(0, strcmp("base", kv_attn_ref_isa()));
	ASSERT_EQ(0, kv_attn_ref_set_isa(NULL));
	ASSERT_EQ(0, strcmp(auto_isa, kv_attn_ref_isa()));
}

TEST_HARNESS_MAIN
