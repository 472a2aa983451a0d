// SPDX-License-Identifier: GPL-2.0
/*
 * The CUDA kernels against the C reference, on the same pools: random
 * non-identity page tables, NaN in every unwritten slot (attn_test.h),
 * the whole pool copied to the device as it is.  Queries are rounded to
 * the storage type first, so both sides see the same operands.
 *
 * Tolerances (research/gpu.md, section 3): the kernels write fp16/bf16, so
 * the output carries one rounding to the storage type.  Pass when the
 * relative Frobenius error against the fp32 reference is below 2e-3
 * (fp16) or 1e-2 (bf16), the largest error is at most twice that of the
 * reference itself rounded to the storage type plus 1e-4 (FlashAttention's
 * test), every LSE is within 1e-3, and nothing is NaN or Inf.  The KV
 * write must match the reference's bytes exactly.
 *
 * Without a CUDA device every GPU test skips with the reason; the argument
 * checks, which never reach the device, run everywhere.
 *
 * Under compute-sanitizer's racecheck and synccheck (KV_SANITIZER=1, set by
 * tools/gpu/gpu-checks.sh; tens to hundreds of times slower) every case
 * still runs, on shorter contexts (kv_sanitizer_cap(), tests/gpu/
 * kv_sanitizer.h: several KV tiles, pages and splits each, so the same
 * barriers, pipelines and merges), and each test gets SANITIZER_TIMEOUT
 * seconds instead of the harness's 30.  Without KV_SANITIZER the shapes are
 * the ones below, on a GPU and on the CPU stand-in (tests/simt) alike.
 */
#include <errno.h>

#include "kselftest_harness.h"
#include "attn_test.h"
#include "../gpu/kv_sanitizer.h"

#define SANITIZER_TIMEOUT	120	/* seconds a test under KV_SANITIZER */

#define NEED_GPU() do {							\
	if (kv_cuda_available() <= 0)					\
		SKIP(return, "no CUDA device (%s)", kv_cuda_error());	\
} while (0)

/* @n tokens (or requests), at most @small under racecheck/synccheck. */
#define SAN(n, small)	kv_sanitizer_cap(n, small)

#define TOL_LSE		1e-3
#define ATOL		1e-4

static double tol_frob(uint32_t dtype)
{
	return dtype == KVS_DTYPE_F16 ? 2e-3 : 1e-2;
}

static uint16_t to_dtype(uint32_t dtype, float x)
{
	return dtype == KVS_DTYPE_BF16 ? kv_f32_to_bf16(x) : kv_f32_to_f16(x);
}

static float from_dtype(uint32_t dtype, uint16_t h)
{
	return dtype == KVS_DTYPE_BF16 ? kv_bf16_to_f32(h) : kv_f16_to_f32(h);
}

static void *to_device(const void *src, size_t bytes)
{
	void *d = NULL;

	if (kv_cuda_malloc(&d, bytes ? bytes : 16))
		return NULL;
	if (bytes && kv_cuda_memcpy(d, src, bytes)) {
		kv_cuda_free(d);
		return NULL;
	}
	return d;
}

/* A float array as the device tensor of the pool's dtype. */
static void *tensor_to_device(uint32_t dtype, const float *x, size_t n)
{
	uint16_t *h = malloc(n * 2 + 2);
	void *d;
	size_t i;

	if (!h)
		return NULL;
	for (i = 0; i < n; i++)
		h[i] = to_dtype(dtype, x[i]);
	d = to_device(h, n * 2);
	free(h);
	return d;
}

/* The host env's pool and page tables, copied as they are. */
struct dev_env {
	struct kv_attn_kv kv;
	struct kv_attn_batch b, bx;
	void *pool;
	uint32_t *indptr, *pages, *seq, *qi;
};

static void dev_env_free(struct dev_env *d)
{
	kv_cuda_free(d->pool);
	kv_cuda_free(d->indptr);
	kv_cuda_free(d->pages);
	kv_cuda_free(d->seq);
	kv_cuda_free(d->qi);
	memset(d, 0, sizeof(*d));
}

static int dev_env_init(struct dev_env *d, const struct at_env *e)
{
	uint32_t n = e->c.n_reqs;

	memset(d, 0, sizeof(*d));
	d->pool = to_device(e->mem, e->mem_bytes);
	d->indptr = to_device(e->page_indptr, (n + 1) * sizeof(uint32_t));
	d->pages = to_device(e->pages, e->page_indptr[n] * sizeof(uint32_t));
	d->seq = to_device(e->seq_lens, n * sizeof(uint32_t));
	d->qi = to_device(e->q_indptr, (n + 1) * sizeof(uint32_t));
	if (!d->pool || !d->indptr || !d->pages || !d->seq || !d->qi) {
		dev_env_free(d);
		return -1;
	}
	d->kv = e->kv;
	d->kv.base = d->pool;
	d->b = e->b;
	d->b.page_indptr = d->indptr;
	d->b.pages = d->pages;
	d->b.seq_lens = d->seq;
	d->bx = d->b;
	d->bx.q_indptr = d->qi;
	d->bx.max_q_len = e->bx.max_q_len;
	return 0;
}

/*
 * Decode or extend on the device with queries @q (rounded to the storage
 * type on the way), outputs poisoned with NaN first: the output's bits to
 * @raw and the LSE to @lse, or no LSE buffer at all where @lse is NULL.
 */
static int run_device(const struct at_env *e, const struct dev_env *d, bool extend,
		      const struct kv_attn_params *p, const float *q, uint16_t *raw, float *lse)
{
	uint32_t rows = extend ? e->rows_ext : e->rows_dec;
	size_t n = (size_t)rows * e->nq * e->c.dim, n_lse = (size_t)rows * e->nq;
	void *dq = tensor_to_device(e->c.dtype, q, n), *dout = NULL;
	float *dlse = NULL;
	int ret = dq ? kv_cuda_malloc(&dout, n * 2) : -ENOMEM;

	if (!ret && lse)
		ret = kv_cuda_malloc((void **)&dlse, n_lse * sizeof(float));
	/* Poison: 0xffff is NaN in fp16 and bf16, 0xffffffff in fp32. */
	if (!ret)
		ret = kv_cuda_memset(dout, 0xff, n * 2);
	if (!ret && dlse)
		ret = kv_cuda_memset(dlse, 0xff, n_lse * sizeof(float));
	if (!ret)
		ret = extend ? kv_attn_extend_cuda(&d->kv, &d->bx, p, dq, dout, dlse)
			     : kv_attn_decode_cuda(&d->kv, &d->b, p, dq, dout, dlse);
	if (!ret)
		ret = kv_cuda_sync();
	if (!ret)
		ret = kv_cuda_memcpy(raw, dout, n * 2);
	if (!ret && dlse)
		ret = kv_cuda_memcpy(lse, dlse, n_lse * sizeof(float));
	kv_cuda_free(dq);
	kv_cuda_free(dout);
	kv_cuda_free(dlse);
	return ret;
}

/*
 * Decode or extend on the device and by the reference, compared as the
 * header says.  0 when they agree.
 */
static int check_cuda(struct __test_metadata *_metadata, struct at_env *e, struct dev_env *d,
		      bool extend, const struct kv_attn_params *p, const char *what)
{
	const uint32_t dt = e->c.dtype;
	uint32_t rows = extend ? e->rows_ext : e->rows_dec;
	size_t n = (size_t)rows * e->nq * e->c.dim, n_lse = (size_t)rows * e->nq, i;
	const float *q = extend ? e->q_ext : e->q_dec;
	float *qr = malloc(n * sizeof(float)), *ref = malloc(n * sizeof(float));
	float *ref_lse = malloc(n_lse * sizeof(float)), *got = malloc(n * sizeof(float));
	float *lse = malloc(n_lse * sizeof(float));
	uint16_t *raw = malloc(n * 2);
	double *refd = malloc(n * sizeof(double)), *ref_lsed = malloc(n_lse * sizeof(double));
	struct kv_attn_workers *w = kv_attn_workers_create(2);
	struct kv_attn_params pr = *p;
	double rnd_err = 0;
	struct at_err err;
	int ret, bad = 1;

	if (!qr || !ref || !ref_lse || !got || !lse || !raw || !refd || !ref_lsed || !w)
		goto out;
	for (i = 0; i < n; i++)
		qr[i] = from_dtype(dt, to_dtype(dt, q[i]));
	pr.workers = w;
	pr.stream = NULL;
	pr.workspace = NULL;
	ret = extend ? kv_attn_extend_ref(&e->kv, &e->bx, &pr, qr, ref, ref_lse)
		     : kv_attn_decode_ref(&e->kv, &e->b, &pr, qr, ref, ref_lse);
	if (ret) {
		TH_LOG("%s: reference failed: %d", what, ret);
		goto out;
	}
	ret = run_device(e, d, extend, p, qr, raw, lse);
	if (ret) {
		TH_LOG("%s: CUDA failed: %d (%s)", what, ret, kv_cuda_error());
		goto out;
	}
	for (i = 0; i < n; i++) {
		double r = from_dtype(dt, to_dtype(dt, ref[i])) - (double)ref[i];

		got[i] = from_dtype(dt, raw[i]);
		refd[i] = ref[i];
		rnd_err = fabs(r) > rnd_err ? fabs(r) : rnd_err;
	}
	for (i = 0; i < n_lse; i++)
		ref_lsed[i] = ref_lse[i];
	err = at_compare(got, refd, n, lse, ref_lsed, n_lse);
	bad = err.not_finite || !(err.rel_frob < tol_frob(dt)) ||
	      !(err.max_abs <= 2 * rnd_err + ATOL) || !(err.lse_abs <= TOL_LSE);
	if (bad)
		TH_LOG("%s %s %s D=%u T=%u Hkv=%u G=%u split=%u: rel %.3g (< %.0e), max %.3g (<= %.3g), lse %.3g, %zu not finite",
		       what, extend ? "extend" : "decode", at_dtype_name(dt), e->c.dim,
		       e->c.tpp, e->c.n_kv, e->c.group, p->kv_split, err.rel_frob,
		       tol_frob(dt), err.max_abs, 2 * rnd_err + ATOL, err.lse_abs,
		       err.not_finite);
out:
	kv_attn_workers_destroy(w);
	free(qr);
	free(ref);
	free(ref_lse);
	free(got);
	free(lse);
	free(raw);
	free(refd);
	free(ref_lsed);
	return bad;
}

static const uint32_t dtypes[] = { KVS_DTYPE_F16, KVS_DTYPE_BF16 };
static const uint32_t dims[] = { 64, 128, 256 };
static const uint32_t tpps[] = { 1, 16, 32, 64 };

/* dtype x head dim x page size; KV heads and GQA (1, 4, 8, 6, 16) rotate. */
static void grid_case(struct at_case *c, unsigned int idx, uint64_t seed)
{
	static const uint32_t kvh[] = { 1, 2, 8 }, groups[] = { 1, 4, 8, 6, 16 };

	memset(c, 0, sizeof(*c));
	c->dtype = dtypes[idx % 2];
	c->dim = dims[idx / 2 % 3];
	c->tpp = tpps[idx / 6 % 4];
	c->n_kv = kvh[idx % 3];
	c->group = groups[idx % 5];
	if (c->n_kv * c->group > 32)
		c->n_kv = 2;
	c->n_layers = 2;
	c->layer = idx % 2;
	c->qscale = idx % 2 ? 4.0f : 1.0f;
	c->seed = seed + idx;
}

static void edge_lengths(struct at_case *c, uint64_t *rng)
{
	uint32_t t = c->tpp;

	c->n_reqs = 8;
	c->seq[0] = 1;
	c->seq[1] = t > 1 ? t - 1 : 2;
	c->seq[2] = t;
	c->seq[3] = t + 1;
	c->seq[4] = 100;
	c->seq[5] = SAN(1000, 200);
	c->seq[6] = SAN(4097, 401);
	c->seq[7] = 1 + at_below(rng, SAN(3000, 300));
}

TEST(device_or_skip)
{
	char name[128];

	NEED_GPU();
	ASSERT_EQ(0, kv_cuda_device_name(name, sizeof(name)));
	TH_LOG("device: %s", name);
}

/* The write kernel stores exactly the reference's bytes, and nothing else. */
TEST(write_matches_reference)
{
	unsigned int k;

	NEED_GPU();
	for (k = 0; k < 2; k++) {
		struct at_case c = { .dtype = dtypes[k], .dim = 128, .tpp = 16, .n_kv = 4,
				     .group = 1, .n_layers = 3, .layer = 1, .n_reqs = 5,
				     .seq = { 1, 15, 16, 17, SAN(1000, 200) }, .seed = 71 };
		struct kv_attn_params p = { 0 };
		struct kv_attn_batch wb;
		struct dev_env d;
		struct at_env e;
		size_t n;
		uint8_t *back;
		void *dk, *dv;

		ASSERT_EQ(0, at_env_init(&e, &c));
		ASSERT_EQ(0, dev_env_init(&d, &e));
		/* Start the device pool over: NaN everywhere. */
		back = malloc(e.mem_bytes);
		ASSERT_NE(NULL, back);
		at_fill_nan(c.dtype, back, e.mem_bytes);
		ASSERT_EQ(0, kv_cuda_memcpy(d.pool, back, e.mem_bytes));
		n = (size_t)e.n_tok * c.n_kv * c.dim;
		dk = tensor_to_device(c.dtype, e.K, n);
		dv = tensor_to_device(c.dtype, e.V, n);
		ASSERT_NE(NULL, dk);
		ASSERT_NE(NULL, dv);
		/* Every token new, as the reference wrote them. */
		wb = d.b;
		wb.q_indptr = to_device(e.tok_off, (c.n_reqs + 1) * sizeof(uint32_t));
		wb.max_q_len = 1000;
		ASSERT_NE(NULL, wb.q_indptr);
		ASSERT_EQ(0, kv_attn_write_cuda(&d.kv, &wb, &p, dk, dv));
		ASSERT_EQ(0, kv_cuda_sync());
		ASSERT_EQ(0, kv_cuda_memcpy(back, d.pool, e.mem_bytes));
		ASSERT_EQ(0, memcmp(back, e.mem, e.mem_bytes));
		kv_cuda_free((void *)wb.q_indptr);
		free(back);
		kv_cuda_free(dk);
		kv_cuda_free(dv);
		dev_env_free(&d);
		at_env_free(&e);
	}
}

/*
 * The write at every head dim and page size, the way an engine calls it:
 * a prefill of all but each request's last token with no max_q_len (the
 * kernel's own grid), then the last tokens as decode (q_indptr NULL).
 * The pool must end up byte for byte as the reference wrote it.
 */
TEST(write_prefill_then_decode)
{
	unsigned int idx;

	NEED_GPU();
	for (idx = 0; idx < 12; idx++) {
		struct at_case c = { .dtype = dtypes[idx % 2], .dim = dims[idx % 3],
				     .tpp = tpps[idx / 3], .n_kv = 2, .group = 1,
				     .n_layers = 2, .layer = idx % 2, .n_reqs = 5,
				     .seq = { 2, 3, 63, 64, 300 }, .seed = 400 + idx };
		const size_t row = (size_t)c.n_kv * c.dim;
		uint32_t qi[6] = { 0 }, seq1[5], r, t, m = 0;
		struct kv_attn_params p = { 0 };
		struct kv_attn_batch wb;
		float *kp, *vp, *kl, *vl;
		void *dk, *dv, *dkl, *dvl;
		struct dev_env d;
		struct at_env e;
		uint8_t *back;

		ASSERT_EQ(0, at_env_init(&e, &c));
		ASSERT_EQ(0, dev_env_init(&d, &e));
		back = malloc(e.mem_bytes);
		kp = malloc(e.n_tok * row * sizeof(float));
		vp = malloc(e.n_tok * row * sizeof(float));
		kl = malloc(c.n_reqs * row * sizeof(float));
		vl = malloc(c.n_reqs * row * sizeof(float));
		ASSERT_TRUE(back && kp && vp && kl && vl);
		at_fill_nan(c.dtype, back, e.mem_bytes);
		ASSERT_EQ(0, kv_cuda_memcpy(d.pool, back, e.mem_bytes));
		/* Split every request's K/V rows into the prefill's and the last one. */
		for (r = 0; r < c.n_reqs; r++) {
			for (t = 0; t + 1 < c.seq[r]; t++, m++) {
				memcpy(kp + m * row, e.K + (e.tok_off[r] + t) * row, row * sizeof(float));
				memcpy(vp + m * row, e.V + (e.tok_off[r] + t) * row, row * sizeof(float));
			}
			memcpy(kl + r * row, e.K + (e.tok_off[r] + t) * row, row * sizeof(float));
			memcpy(vl + r * row, e.V + (e.tok_off[r] + t) * row, row * sizeof(float));
			seq1[r] = c.seq[r] - 1;
			qi[r + 1] = m;
		}
		dk = tensor_to_device(c.dtype, kp, m * row);
		dv = tensor_to_device(c.dtype, vp, m * row);
		dkl = tensor_to_device(c.dtype, kl, c.n_reqs * row);
		dvl = tensor_to_device(c.dtype, vl, c.n_reqs * row);
		wb = d.b;
		wb.seq_lens = to_device(seq1, sizeof(seq1));
		wb.q_indptr = to_device(qi, sizeof(qi));
		wb.max_q_len = 0;
		ASSERT_TRUE(dk && dv && dkl && dvl && wb.seq_lens && wb.q_indptr);
		ASSERT_EQ(0, kv_attn_write_cuda(&d.kv, &wb, &p, dk, dv));
		kv_cuda_free((void *)wb.seq_lens);
		kv_cuda_free((void *)wb.q_indptr);
		wb = d.b;
		ASSERT_EQ(0, kv_attn_write_cuda(&d.kv, &wb, &p, dkl, dvl));
		ASSERT_EQ(0, kv_cuda_sync());
		ASSERT_EQ(0, kv_cuda_memcpy(back, d.pool, e.mem_bytes));
		EXPECT_EQ(0, memcmp(back, e.mem, e.mem_bytes)) {
			TH_LOG("%s D=%u T=%u: pool differs from the reference's",
			       at_dtype_name(c.dtype), c.dim, c.tpp);
		}
		kv_cuda_free(dk);
		kv_cuda_free(dv);
		kv_cuda_free(dkl);
		kv_cuda_free(dvl);
		free(back);
		free(kp);
		free(vp);
		free(kl);
		free(vl);
		dev_env_free(&d);
		at_env_free(&e);
	}
}

/*
 * Paths the grids above do not reach on a large GPU: decode without a
 * split (max_seq_len 0: the kernel writes out and lse itself, no
 * combine), GQA groups 2, 3 and 32, extend with q_indptr NULL (one new
 * token a request), and lse NULL (same output bits as with it).
 */
TEST(unsplit_odd_groups_null_args)
{
	static const uint32_t groups[] = { 2, 3, 32 };
	uint64_t rng = 505;
	unsigned int k;

	NEED_GPU();
	for (k = 0; k < 3; k++) {
		struct at_case c = { .dtype = dtypes[k % 2], .dim = dims[k], .tpp = tpps[k + 1],
				     .n_kv = groups[k] == 32 ? 1 : 2, .group = groups[k],
				     .qscale = 2, .seed = 500 + k };
		struct kv_attn_params p = { 0 };
		struct dev_env d;
		struct at_env e;
		uint16_t *a, *b;
		float *lse;
		size_t n;

		edge_lengths(&c, &rng);
		ASSERT_EQ(0, at_env_init(&e, &c));
		ASSERT_EQ(0, dev_env_init(&d, &e));
		p.n_q_heads = e.nq;
		d.b.max_seq_len = 0;
		ASSERT_EQ(0, check_cuda(_metadata, &e, &d, false, &p, "unsplit"));
		n = (size_t)e.rows_dec * e.nq * c.dim;
		a = malloc(n * 2);
		b = malloc(n * 2);
		lse = malloc((size_t)e.rows_dec * e.nq * sizeof(float));
		ASSERT_TRUE(a && b && lse);
		ASSERT_EQ(0, run_device(&e, &d, false, &p, e.q_dec, a, lse));
		ASSERT_EQ(0, run_device(&e, &d, false, &p, e.q_dec, b, NULL));
		EXPECT_EQ(0, memcmp(a, b, n * 2));
		d.b.max_seq_len = e.b.max_seq_len;
		ASSERT_EQ(0, check_cuda(_metadata, &e, &d, false, &p, "split"));
		ASSERT_EQ(0, run_device(&e, &d, false, &p, e.q_dec, a, lse));
		ASSERT_EQ(0, run_device(&e, &d, false, &p, e.q_dec, b, NULL));
		EXPECT_EQ(0, memcmp(a, b, n * 2));
		/* Extend with one new token a request, said by q_indptr NULL. */
		e.bx.q_indptr = NULL;
		d.bx.q_indptr = NULL;
		d.bx.max_q_len = 0;
		e.rows_ext = c.n_reqs;
		ASSERT_EQ(0, check_cuda(_metadata, &e, &d, true, &p, "extend, q_indptr NULL"));
		free(a);
		free(b);
		free(lse);
		dev_env_free(&d);
		at_env_free(&e);
	}
}

TEST(decode_grid)
{
	uint64_t rng = 303;
	unsigned int idx;

	NEED_GPU();
	for (idx = 0; idx < 24; idx++) {
		struct kv_attn_params p = { 0 };
		struct dev_env d;
		struct at_case c;
		struct at_env e;

		grid_case(&c, idx, 3000);
		edge_lengths(&c, &rng);
		ASSERT_EQ(0, at_env_init(&e, &c));
		ASSERT_EQ(0, dev_env_init(&d, &e));
		p.n_q_heads = e.nq;
		ASSERT_EQ(0, check_cuda(_metadata, &e, &d, false, &p, "grid"));
		dev_env_free(&d);
		at_env_free(&e);
	}
}

/* Forced splits, with a caller's workspace and without, match the reference. */
TEST(decode_splits)
{
	static const uint32_t splits[] = { 0, 1, 64, 100, 1000 };
	struct at_case c = { .dtype = KVS_DTYPE_BF16, .dim = 128, .tpp = 16, .n_kv = 8,
			     .group = 4, .n_reqs = 3,
			     .seq = { SAN(5000, 1200), 1, SAN(777, 333) },
			     .qscale = 4, .seed = 81 };
	struct dev_env d;
	struct at_env e;
	unsigned int i;

	NEED_GPU();
	ASSERT_EQ(0, at_env_init(&e, &c));
	ASSERT_EQ(0, dev_env_init(&d, &e));
	for (i = 0; i < sizeof(splits) / sizeof(splits[0]); i++) {
		struct kv_attn_params p = { .n_q_heads = e.nq, .kv_split = splits[i] };
		void *ws = NULL;

		ASSERT_EQ(0, check_cuda(_metadata, &e, &d, false, &p, "split"));
		p.workspace_bytes = kv_attn_decode_cuda_workspace(&d.kv, &d.b, &p);
		if (p.workspace_bytes) {
			ASSERT_EQ(0, kv_cuda_malloc(&ws, p.workspace_bytes));
			p.workspace = ws;
			ASSERT_EQ(0, check_cuda(_metadata, &e, &d, false, &p, "split+ws"));
			kv_cuda_free(ws);
		}
	}
	dev_env_free(&d);
	at_env_free(&e);
}

/*
 * The tensor-core decode (GQA groups of 4 or more, head dims 64 and 128,
 * power-of-two pages): groups 4, 8, 16 and 32 (two blocks of 16 heads),
 * both storage types, lengths that end inside a tile and a page, one page
 * per token and several tiles per page; each unsplit, with the planned
 * split, and with 100-token splits (which start inside a tile).
 */
TEST(decode_tensor_cores)
{
	static const uint32_t groups[] = { 4, 8, 16, 32 }, pages[] = { 16, 1, 64, 32 };
	static const uint32_t splits[] = { 0, 0, 100 };
	unsigned int idx, k;

	NEED_GPU();
	for (idx = 0; idx < 8; idx++) {
		struct at_case c = { .dtype = dtypes[idx % 2], .dim = idx / 2 % 2 ? 128 : 64,
				     .tpp = pages[idx % 4], .group = groups[idx / 2],
				     .n_kv = idx / 2 == 3 ? 1 : 2, .n_reqs = 4,
				     .seq = { 1, 33, 100 + 7 * idx, SAN(700, 300) },
				     .qscale = idx % 2 ? 4.0f : 1.0f, .seed = 700 + idx };
		struct dev_env d;
		struct at_env e;

		ASSERT_EQ(0, at_env_init(&e, &c));
		ASSERT_EQ(0, dev_env_init(&d, &e));
		for (k = 0; k < 3; k++) {
			struct kv_attn_params p = { .n_q_heads = e.nq, .kv_split = splits[k] };

			/* First without a split (max_seq_len 0), then planned, then forced. */
			d.b.max_seq_len = k ? e.b.max_seq_len : 0;
			ASSERT_EQ(0, check_cuda(_metadata, &e, &d, false, &p,
						k ? "tensor cores, split" : "tensor cores"));
		}
		dev_env_free(&d);
		at_env_free(&e);
	}
}

/*
 * What stays on the CUDA-core kernels: head dim 256, and page sizes that
 * are not a power of two (24 tokens) at groups the tensor cores would
 * take; decode (split and unsplit) and extend.
 */
TEST(cuda_core_paths)
{
	unsigned int idx;

	NEED_GPU();
	for (idx = 0; idx < 2; idx++) {
		struct at_case c = { .dtype = dtypes[idx], .dim = idx ? 128 : 256,
				     .tpp = idx ? 24 : 16, .n_kv = 2, .group = idx ? 8 : 4,
				     .n_reqs = 3, .seq = { 40, 75, SAN(600, 300) },
				     .n_new = { 40, 9, 1 },
				     .qscale = 2, .seed = 720 + idx };
		struct kv_attn_params p = { 0 };
		struct dev_env d;
		struct at_env e;

		ASSERT_EQ(0, at_env_init(&e, &c));
		ASSERT_EQ(0, dev_env_init(&d, &e));
		p.n_q_heads = e.nq;
		ASSERT_EQ(0, check_cuda(_metadata, &e, &d, true, &p, "cuda cores"));
		ASSERT_EQ(0, check_cuda(_metadata, &e, &d, false, &p, "cuda cores"));
		d.b.max_seq_len = 0;
		ASSERT_EQ(0, check_cuda(_metadata, &e, &d, false, &p, "cuda cores, unsplit"));
		dev_env_free(&d);
		at_env_free(&e);
	}
}

/* Long contexts and wide batches: 32k at batch 1 and 4, batch 128 of short ones. */
TEST(decode_long_and_wide)
{
	struct at_case cs[3] = {
		{ .dtype = KVS_DTYPE_BF16, .dim = 128, .tpp = 16, .n_kv = 8, .group = 4,
		  .n_reqs = 1, .seq = { SAN(32768, 2048) }, .qscale = 4, .seed = 91 },
		{ .dtype = KVS_DTYPE_F16, .dim = 128, .tpp = 64, .n_kv = 2, .group = 8,
		  .n_reqs = 4, .seq = { SAN(32768, 2048), SAN(30001, 1901), 2, SAN(16384, 1024) },
		  .seed = 92 },
		{ .dtype = KVS_DTYPE_BF16, .dim = 64, .tpp = 16, .n_kv = 2, .group = 4,
		  .n_reqs = 128, .seed = 93 },
	};
	unsigned int i, r;
	uint64_t rng = 94;

	NEED_GPU();
	for (r = 0; r < 128; r++)
		cs[2].seq[r] = 1 + at_below(&rng, SAN(600, 100));
	for (i = 0; i < 3; i++) {
		struct kv_attn_params p = { 0 };
		struct dev_env d;
		struct at_env e;

		ASSERT_EQ(0, at_env_init(&e, &cs[i]));
		ASSERT_EQ(0, dev_env_init(&d, &e));
		p.n_q_heads = e.nq;
		ASSERT_EQ(0, check_cuda(_metadata, &e, &d, false, &p, "long"));
		dev_env_free(&d);
		at_env_free(&e);
	}
}

TEST(extend_grid)
{
	uint64_t rng = 404;
	unsigned int idx;

	NEED_GPU();
	for (idx = 0; idx < 24; idx++) {
		struct kv_attn_params p = { 0 };
		struct dev_env d;
		struct at_case c;
		struct at_env e;

		grid_case(&c, idx, 4000);
		c.n_reqs = 5;
		c.seq[0] = SAN(300, 70);	/* prefill */
		c.n_new[0] = c.seq[0];
		c.seq[1] = c.tpp;		/* one new token */
		c.n_new[1] = 1;
		c.seq[2] = 9 + at_below(&rng, SAN(2000, 300));
		c.n_new[2] = 9;
		c.seq[3] = c.tpp + 17;
		c.n_new[3] = 17;
		c.seq[4] = SAN(2048, 256) + 33;
		c.n_new[4] = 33;
		ASSERT_EQ(0, at_env_init(&e, &c));
		ASSERT_EQ(0, dev_env_init(&d, &e));
		p.n_q_heads = e.nq;
		ASSERT_EQ(0, check_cuda(_metadata, &e, &d, true, &p, "grid"));
		dev_env_free(&d);
		at_env_free(&e);
	}
}

/* A 2k prefill, and new tokens over a 32k prefix. */
TEST(extend_long)
{
	struct at_case c = { .dtype = KVS_DTYPE_BF16, .dim = 128, .tpp = 16, .n_kv = 8,
			     .group = 4, .n_reqs = 2, .seq = { SAN(2048, 256), SAN(32768, 2048) },
			     .n_new = { SAN(2048, 256), 64 }, .seed = 95 };
	struct kv_attn_params p = { 0 };
	struct dev_env d;
	struct at_env e;

	NEED_GPU();
	ASSERT_EQ(0, at_env_init(&e, &c));
	ASSERT_EQ(0, dev_env_init(&d, &e));
	p.n_q_heads = e.nq;
	ASSERT_EQ(0, check_cuda(_metadata, &e, &d, true, &p, "long"));
	dev_env_free(&d);
	at_env_free(&e);
}

/* Shared prefix pages: the same page indices in every table. */
TEST(shared_prefix_pages)
{
	struct at_case c = { .dtype = KVS_DTYPE_F16, .dim = 128, .tpp = 16, .n_kv = 8,
			     .group = 4, .n_reqs = 4,
			     .seq = { SAN(2048, 256), SAN(2100, 308), SAN(4000, 500), SAN(2049, 257) },
			     .n_new = { 1, 52, 100, 1 }, .shared_pages = SAN(128, 16), .seed = 96 };
	struct kv_attn_params p = { 0 };
	struct dev_env d;
	struct at_env e;

	NEED_GPU();
	ASSERT_EQ(0, at_env_init(&e, &c));
	ASSERT_EQ(0, dev_env_init(&d, &e));
	p.n_q_heads = e.nq;
	ASSERT_EQ(0, check_cuda(_metadata, &e, &d, false, &p, "shared"));
	ASSERT_EQ(0, check_cuda(_metadata, &e, &d, true, &p, "shared"));
	dev_env_free(&d);
	at_env_free(&e);
}

/* Host-side checks: they answer before any device is touched, so they run here too. */
TEST(bad_arguments)
{
	static uint32_t dummy[8] __attribute__((aligned(16)));
	struct kv_attn_kv kv = {
		.base = dummy, .n_pages = 1,
		.geom = { .n_layers = 1, .n_kv_heads = 2, .head_dim = 128,
			  .tokens_per_page = 16, .dtype = KVS_DTYPE_BF16 },
	};
	struct kv_attn_batch b = { .n_reqs = 1, .max_seq_len = 1, .page_indptr = dummy,
				   .pages = dummy, .seq_lens = dummy };
	struct kv_attn_params p = { .n_q_heads = 8 };
	struct kv_attn_kv k2;
	struct kv_attn_batch b2;

	k2 = kv;
	k2.geom.dtype = KVS_DTYPE_F32;
	ASSERT_EQ(-EOPNOTSUPP, kv_attn_decode_cuda(&k2, &b, &p, dummy, dummy, NULL));
	k2 = kv;
	k2.geom.head_dim = 96;
	ASSERT_EQ(-EOPNOTSUPP, kv_attn_extend_cuda(&k2, &b, &p, dummy, dummy, NULL));
	k2 = kv;
	k2.geom.page_bytes = 12345;
	ASSERT_EQ(-EINVAL, kv_attn_decode_cuda(&k2, &b, &p, dummy, dummy, NULL));
	k2 = kv;
	k2.base = (char *)dummy + 2;
	ASSERT_EQ(-EINVAL, kv_attn_decode_cuda(&k2, &b, &p, dummy, dummy, NULL));
	ASSERT_EQ(-EINVAL, kv_attn_decode_cuda(&kv, &b, &p, (char *)dummy + 8, dummy, NULL));
	ASSERT_EQ(-EINVAL, kv_attn_write_cuda(&kv, &b, &p, dummy, (char *)dummy + 2));
	p.n_q_heads = 3;
	ASSERT_EQ(-EINVAL, kv_attn_decode_cuda(&kv, &b, &p, dummy, dummy, NULL));
	p.n_q_heads = 8;
	/* Extend with per-request rows needs max_q_len to size its grid. */
	b2 = b;
	b2.q_indptr = dummy;
	ASSERT_EQ(-EINVAL, kv_attn_extend_cuda(&kv, &b2, &p, dummy, dummy, NULL));
	ASSERT_EQ(0, kv_attn_decode_cuda_workspace(&k2, &b, &p));
}

#ifndef ATTN_CUDA_TEST_OWN_MAIN
/* TEST_HARNESS_MAIN's, with the sanitizer's limit per test. */
static void __attribute__((constructor)) __constructor_order_last(void)
{
	if (!__constructor_order)
		__constructor_order = _CONSTRUCTOR_ORDER_BACKWARD;
}

int main(int argc, char **argv)
{
	struct __test_metadata *t;

	if (kv_under_sanitizer()) {
		fprintf(stderr, "# KV_SANITIZER: shorter contexts, %d s a test\n",
			SANITIZER_TIMEOUT);
		for (t = _fixture_global.tests; t; t = t->next)
			if (t->timeout < SANITIZER_TIMEOUT)
				t->timeout = SANITIZER_TIMEOUT;
	}
	return test_harness_run(argc, argv);
}
#endif
