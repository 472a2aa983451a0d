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
#pragma push_macro("TEST_HARNESS_MAIN")
#undef TEST_HARNESS_MAIN
#define TEST_HARNESS_MAIN
#include "../attn/attn_cuda_test.c"
#pragma pop_macro("TEST_HARNESS_MAIN")
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

TEST_HARNESS_MAIN
