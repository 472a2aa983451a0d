// SPDX-License-Identifier: GPL-2.0
/*
 * tests/attn/attn_cuda_test.c, unchanged, on the CPU stand-in for the GPU
 * (tests/simt): the exact libkv/attn/cuda_*.cu compiled as host C++,
 * every CUDA thread a fiber, the order of threads between barriers
 * shuffled by KV_SIMT_SEED, and the shared-memory race checker on.  The
 * kernels are compared with the C reference within the suite's documented
 * tolerances; a race, a deadlock or a divergent collective fails the
 * launch (cudaErrorLaunchFailure), so the test fails.
 *
 * Four of the suite's cases take minutes each on a CPU (extend_grid,
 * extend_long, decode_splits, shared_prefix_pages: ~10 min on one core
 * together); they run with KV_SIMT_FULL=1 (make simt-full), and smaller
 * versions of them below, which reach the same code paths (several KV
 * tiles and pages, causal masks across tiles, every dtype, head dim, page
 * size and GQA group, forced and planned splits, shared pages), run every
 * time.
 */
#include "kselftest_harness.h"
#include "attn_test.h"

/* A CPU runs a GPU's threads one by one: the harness's 30 s are for GPUs. */
#undef TEST_TIMEOUT_DEFAULT
#define TEST_TIMEOUT_DEFAULT	600

static int simt_gate(const char *name);
static const char *simt_error(void);

/* The suite asks whether there is a device: the stand-in answers per test. */
#define kv_cuda_available()	simt_gate(_metadata->name)
#define kv_cuda_error()		simt_error()
#define ATTN_CUDA_TEST_OWN_MAIN	/* ours is at the end */
#include "../attn/attn_cuda_test.c"
#undef kv_cuda_available
#undef kv_cuda_error

static const char *const heavy[] = {
	"extend_grid", "extend_long", "decode_splits", "shared_prefix_pages",
};
static const char *skipping;

/* Is @name in the comma-separated @list? */
static bool listed(const char *list, const char *name)
{
	size_t n = strlen(name);
	const char *p;

	for (p = list; (p = strstr(p, name)); p += n)
		if ((p == list || p[-1] == ',') && (p[n] == ',' || !p[n]))
			return true;
	return false;
}

/* KV_SIMT_ONLY=name[,name...] runs those tests alone. */
static int simt_gate(const char *name)
{
	const char *full = getenv("KV_SIMT_FULL"), *only = getenv("KV_SIMT_ONLY");
	unsigned int i;

	skipping = NULL;
	for (i = 0; i < sizeof(heavy) / sizeof(heavy[0]); i++)
		if (!strcmp(name, heavy[i]) && !(full && *full == '1'))
			skipping = "minutes on the stand-in: KV_SIMT_FULL=1 (make simt-full) runs it";
	if (only && *only && !listed(only, name))
		skipping = "not a test KV_SIMT_ONLY names";
	return skipping ? 0 : kv_cuda_available();
}

static const char *simt_error(void)
{
	return skipping ? skipping : kv_cuda_error();
}

#define NEED_STAND_IN() do {						\
	if (simt_gate(_metadata->name) <= 0)				\
		SKIP(return, "%s", simt_error());			\
} while (0)

/* extend_grid's 24 cases with lengths a CPU runs in seconds. */
TEST(extend_grid_small)
{
	uint64_t rng = 405;
	unsigned int idx;

	NEED_STAND_IN();
	for (idx = 0; idx < 24; idx++) {
		struct kv_attn_params p = { 0 };
		struct dev_env d;
		struct at_case c;
		struct at_env e;

		grid_case(&c, idx, 4100);
		c.n_reqs = 5;
		c.seq[0] = 70;			/* prefill: three KV tiles */
		c.n_new[0] = 70;
		c.seq[1] = c.tpp;		/* one new token */
		c.n_new[1] = 1;
		c.seq[2] = 9 + at_below(&rng, 300);
		c.n_new[2] = 9;
		c.seq[3] = c.tpp + 17;
		c.n_new[3] = 17;
		c.seq[4] = 256 + 33;
		c.n_new[4] = 33;
		ASSERT_EQ(0, at_env_init(&e, &c));
		ASSERT_EQ(0, dev_env_init(&d, &e));
		p.n_q_heads = e.nq;
		ASSERT_EQ(0, check_cuda(_metadata, &e, &d, true, &p, "grid"));
		dev_env_free(&d);
		at_env_free(&e);
	}
}

/* decode_splits: planned and forced splits, with and without a workspace. */
TEST(decode_splits_small)
{
	static const uint32_t splits[] = { 0, 16, 100, 1000 };
	struct at_case c = { .dtype = KVS_DTYPE_BF16, .dim = 128, .tpp = 16, .n_kv = 2,
			     .group = 4, .n_reqs = 3, .seq = { 1200, 1, 333 },
			     .qscale = 4, .seed = 82 };
	struct dev_env d;
	struct at_env e;
	unsigned int i;

	NEED_STAND_IN();
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

/* shared_prefix_pages: the same page indices in every table, decode and extend. */
TEST(shared_prefix_pages_small)
{
	struct at_case c = { .dtype = KVS_DTYPE_F16, .dim = 128, .tpp = 16, .n_kv = 2,
			     .group = 4, .n_reqs = 4, .seq = { 256, 300, 400, 257 },
			     .n_new = { 1, 20, 30, 1 }, .shared_pages = 16, .seed = 97 };
	struct kv_attn_params p = { 0 };
	struct dev_env d;
	struct at_env e;

	NEED_STAND_IN();
	ASSERT_EQ(0, at_env_init(&e, &c));
	ASSERT_EQ(0, dev_env_init(&d, &e));
	p.n_q_heads = e.nq;
	ASSERT_EQ(0, check_cuda(_metadata, &e, &d, false, &p, "shared"));
	ASSERT_EQ(0, check_cuda(_metadata, &e, &d, true, &p, "shared"));
	dev_env_free(&d);
	at_env_free(&e);
}

/*
 * The C reference suite's chunk invariance, on the device: an extend cut
 * into pieces (each piece's tokens new, the earlier ones its prefix)
 * writes exactly the bits of the whole, since every query vector's KV
 * tiles start at token 0 whatever the piece.
 */
TEST(extend_is_chunk_invariant)
{
	static const uint32_t cuts[][3] = { { 3, 100, 201 }, { 16, 17, 250 }, { 1, 2, 9 } };
	static const uint32_t tpps_here[] = { 1, 16 };
	unsigned int t, k, s;

	NEED_STAND_IN();
	for (t = 0; t < 2; t++) {
		struct at_case c = { .dtype = t ? KVS_DTYPE_BF16 : KVS_DTYPE_F16, .dim = 64,
				     .tpp = tpps_here[t], .n_kv = 2, .group = 3, .n_reqs = 1,
				     .seq = { 300 }, .n_new = { 300 }, .seed = 31 + t };
		struct kv_attn_params p = { 0 };
		struct dev_env d;
		struct at_env e;
		size_t row, n, n_lse;
		uint16_t *whole, *part;
		float *wl, *pl, *dlse;
		char *dq, *dout;

		ASSERT_EQ(0, at_env_init(&e, &c));
		ASSERT_EQ(0, dev_env_init(&d, &e));
		p.n_q_heads = e.nq;
		row = (size_t)e.nq * c.dim;
		n = c.seq[0] * row;
		n_lse = (size_t)c.seq[0] * e.nq;
		whole = malloc(n * 2);
		part = malloc(n * 2);
		wl = malloc(n_lse * sizeof(float));
		pl = malloc(n_lse * sizeof(float));
		ASSERT_TRUE(whole && part && wl && pl);
		ASSERT_EQ(0, run_device(&e, &d, true, &p, e.q_ext, whole, wl));
		dq = tensor_to_device(c.dtype, e.q_ext, n);
		ASSERT_NE(NULL, dq);
		for (k = 0; k < 3; k++) {
			uint32_t bounds[5] = { 0, cuts[k][0], cuts[k][1], cuts[k][2], c.seq[0] };

			ASSERT_EQ(0, kv_cuda_malloc((void **)&dout, n * 2));
			ASSERT_EQ(0, kv_cuda_malloc((void **)&dlse, n_lse * sizeof(float)));
			for (s = 0; s < 4; s++) {
				uint32_t qi[2] = { 0, bounds[s + 1] - bounds[s] }, seq = bounds[s + 1];
				struct kv_attn_batch b = d.bx;

				b.seq_lens = to_device(&seq, sizeof(seq));
				b.q_indptr = to_device(qi, sizeof(qi));
				b.max_q_len = qi[1];
				ASSERT_TRUE(b.seq_lens && b.q_indptr);
				ASSERT_EQ(0, kv_attn_extend_cuda(&d.kv, &b, &p, dq + bounds[s] * row * 2,
								 dout + bounds[s] * row * 2,
								 dlse + (size_t)bounds[s] * e.nq));
				kv_cuda_free((void *)b.seq_lens);
				kv_cuda_free((void *)b.q_indptr);
			}
			ASSERT_EQ(0, kv_cuda_sync());
			ASSERT_EQ(0, kv_cuda_memcpy(part, dout, n * 2));
			ASSERT_EQ(0, kv_cuda_memcpy(pl, dlse, n_lse * sizeof(float)));
			EXPECT_EQ(0, memcmp(whole, part, n * 2)) {
				TH_LOG("T=%u cuts %u/%u/%u: outputs differ", c.tpp, cuts[k][0],
				       cuts[k][1], cuts[k][2]);
			}
			EXPECT_EQ(0, memcmp(wl, pl, n_lse * sizeof(float)));
			kv_cuda_free(dout);
			kv_cuda_free(dlse);
		}
		kv_cuda_free(dq);
		free(whole);
		free(part);
		free(wl);
		free(pl);
		dev_env_free(&d);
		at_env_free(&e);
	}
}

/*
 * Every output within one fp16 subnormal step (2^-24) of the reference:
 * check_cuda's relative bound assumes normal outputs, whose rounding is
 * relative; a subnormal's is absolute.  LSE as check_cuda.
 */
static int check_quantum(struct __test_metadata *_metadata, struct at_env *e,
			 struct dev_env *d, bool extend, const struct kv_attn_params *p)
{
	uint32_t rows = extend ? e->rows_ext : e->rows_dec;
	size_t n = (size_t)rows * e->nq * e->c.dim, n_lse = (size_t)rows * e->nq, i;
	const float *q = extend ? e->q_ext : e->q_dec;
	float *qr = malloc(n * sizeof(float)), *ref = malloc(n * sizeof(float));
	float *ref_lse = malloc(n_lse * sizeof(float)), *lse = malloc(n_lse * sizeof(float));
	uint16_t *raw = malloc(n * 2);
	double worst = 0, worst_lse = 0;
	int bad = 1;

	if (!qr || !ref || !ref_lse || !lse || !raw)
		goto out;
	for (i = 0; i < n; i++)
		qr[i] = kv_f16_to_f32(kv_f32_to_f16(q[i]));
	if ((extend ? kv_attn_extend_ref(&e->kv, &e->bx, p, qr, ref, ref_lse)
		    : kv_attn_decode_ref(&e->kv, &e->b, p, qr, ref, ref_lse)) ||
	    run_device(e, d, extend, p, qr, raw, lse))
		goto out;
	for (i = 0; i < n; i++) {
		double err = fabs((double)kv_f16_to_f32(raw[i]) - ref[i]);

		worst = err > worst || isnan(err) ? err : worst;
	}
	for (i = 0; i < n_lse; i++) {
		double err = fabs((double)lse[i] - ref_lse[i]);

		worst_lse = err > worst_lse || isnan(err) ? err : worst_lse;
	}
	bad = !(worst <= 0x1p-24) || !(worst_lse <= TOL_LSE);
	if (bad)
		TH_LOG("%s: max error %.3g (<= 2^-24), lse %.3g", extend ? "extend" : "decode",
		       worst, worst_lse);
out:
	free(qr);
	free(ref);
	free(ref_lse);
	free(lse);
	free(raw);
	return bad;
}

/* The C reference suite's fp16 subnormals: V mostly subnormal, decode and extend. */
TEST(f16_subnormal_values)
{
	struct at_case c = { .dtype = KVS_DTYPE_F16, .dim = 64, .tpp = 16, .n_kv = 1,
			     .group = 4, .n_reqs = 2, .seq = { 100, 37 }, .n_new = { 20, 37 },
			     .seed = 33 };
	struct kv_attn_params p = { 0 };
	struct kv_attn_batch wb;
	struct dev_env d;
	struct at_env e;
	size_t i, n;

	NEED_STAND_IN();
	ASSERT_EQ(0, at_env_init(&e, &c));
	n = (size_t)e.n_tok * c.n_kv * c.dim;
	for (i = 0; i < n; i++)
		e.V[i] = at_round(c.dtype, e.V[i] * 0x1p-16f);
	wb = e.b;
	wb.q_indptr = e.tok_off;
	wb.max_q_len = 0;
	ASSERT_EQ(0, kv_attn_write_ref(&e.kv, &wb, e.K, e.V));
	ASSERT_EQ(0, dev_env_init(&d, &e));
	p.n_q_heads = e.nq;
	ASSERT_EQ(0, check_quantum(_metadata, &e, &d, false, &p));
	ASSERT_EQ(0, check_quantum(_metadata, &e, &d, true, &p));
	dev_env_free(&d);
	at_env_free(&e);
}

/* TEST_HARNESS_MAIN's, with an hour a test for KV_SIMT_FULL's long cases. */
static void __attribute__((constructor)) __constructor_order_last(void)
{
	if (!__constructor_order)
		__constructor_order = _CONSTRUCTOR_ORDER_BACKWARD;
}

int main(int argc, char **argv)
{
	const char *full = getenv("KV_SIMT_FULL");
	struct __test_metadata *t;

	if (full && *full == '1')
		for (t = _fixture_global.tests; t; t = t->next)
			t->timeout = 3600;
	return test_harness_run(argc, argv);
}
