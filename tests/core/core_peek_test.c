// SPDX-License-Identifier: GPL-2.0
/*
 * KVS_LOOKUP_PEEK: counts the run LOOKUP would hit and changes nothing.
 * No reference, no holding, no pages written, no lookups/hits counted, a
 * CACHED page keeps its place in the eviction order, a file's armed wait
 * stays armed; it answers only where LOOKUP answers (attached files, their
 * namespace); bad flag combinations are refused.
 */
#include "kt.h"

#define PK_PAGES 16
#define NS 1

/*
 * Pool "pk" of uid 1000, mode 0600:
 *   a: chain kt_key(1, 0..2) on c[] (SHARED, held), kt_key(2, 0) on
 *      `cached` (put: CACHED), one page claimed under kt_key(3, 0);
 *   b: attached in the same namespace;  o: attached in namespace NS + 1;
 *   x: uid 2000, which may not attach;  v: admin viewer.
 */
FIXTURE(pk) {
	struct kt_client *a, *b, *o, *x, *v;
	struct kt_client *cls[2];
	__u32 pool, c[3], cached, claimed;
	struct kt_snap *snap;
};

FIXTURE_SETUP(pk)
{
	struct kvs_key ck = kt_key(3, 0);
	struct kvs_alloc al = { .count = 1, .flags = KVS_ALLOC_CLAIM,
				.keys = KT_PTR(&ck) };

	ASSERT_EQ(0, kt_core_init());
	self->v = kt_new(0, 0, 1);
	self->a = kt_new(1000, 1000, 0);
	self->b = kt_new(1000, 1000, 0);
	self->o = kt_new(1000, 1000, 0);
	self->x = kt_new(2000, 2000, 0);
	ASSERT_NE(NULL, self->v);
	ASSERT_NE(NULL, self->a);
	ASSERT_NE(NULL, self->b);
	ASSERT_NE(NULL, self->o);
	ASSERT_NE(NULL, self->x);
	self->cls[0] = self->a;
	self->cls[1] = self->b;
	self->snap = calloc(1, sizeof(*self->snap));
	ASSERT_NE(NULL, self->snap);
	ASSERT_EQ(0, kt_create(self->a, "pk", PK_PAGES, 0600, 0, 0, &self->pool));
	ASSERT_EQ(0, kt_attach(self->a, "pk", NS));
	ASSERT_EQ(0, kt_attach(self->b, "pk", NS));
	ASSERT_EQ(0, kt_attach(self->o, "pk", NS + 1));
	ASSERT_EQ(0, kt_alloc(self->a, 3, self->c));
	ASSERT_EQ(0, kt_publish_chain(self->a, self->c, 3, KVS_NO_PAGE, 1, 0, NULL, NULL));
	ASSERT_EQ(0, kt_alloc(self->a, 1, &self->cached));
	ASSERT_EQ(0, kt_publish_chain(self->a, &self->cached, 1, KVS_NO_PAGE, 2, 0,
				      NULL, NULL));
	ASSERT_EQ(0, kt_put1(self->a, self->cached));
	al.pages = KT_PTR(&self->claimed);
	ASSERT_EQ(0, kt_cmd(self->a, KVS_IOC_ALLOC, &al));
	KT_CHECK(self->v, self->pool);
}

FIXTURE_TEARDOWN(pk)
{
	free(self->snap);
	kt_core_teardown(_metadata, self->pool);
}

static int peek_raw(struct kt_client *c, const struct kvs_key *keys, __u32 count,
		    __u32 flags, __u64 pages, __u32 *n_hit)
{
	struct kvs_lookup l = { .count = count, .flags = KVS_LOOKUP_PEEK | flags,
				.keys = KT_PTR(keys), .pages = pages };
	int ret;

	l.n_hit = 0;
	ret = kt_cmd(c, KVS_IOC_LOOKUP, &l);
	*n_hit = ret ? 0xdead : l.n_hit;
	return ret;
}

/* The run peek reports for kt_key(chain, first..first + n), or -errno. */
static int peek_chain(struct kt_client *c, __u64 chain, __u64 first, __u32 n)
{
	struct kvs_key k[8];
	__u32 i, n_hit;
	int ret;

	for (i = 0; i < n; i++)
		k[i] = kt_key(chain, first + i);
	ret = peek_raw(c, k, n, 0, 0, &n_hit);
	return ret ? ret : (int)n_hit;
}

#define SNAP() ASSERT_EQ(0, kt_snap_take(self->v, self->pool, self->cls, 2, self->snap))
#define SAME() kt_snap_same(_metadata, self->v, self->pool, self->cls, 2, self->snap, __LINE__)

TEST_F(pk, peek_counts_lookups_run_and_changes_nothing)
{
	/* Key sequences: chain, chain then miss, cached, miss, claimed. */
	static const struct { __u64 chain, first; __u32 n; } seqs[] = {
		{ 1, 0, 3 }, { 1, 0, 5 }, { 1, 1, 2 }, { 2, 0, 1 }, { 2, 0, 3 },
		{ 9, 0, 2 }, { 3, 0, 1 }, { 1, 2, 1 },
	};
	struct kvs_pool_stats before, after;
	struct kvs_key k[8];
	__u32 p[8], q[8], n_peek, n_hit, i, j;

	for (i = 0; i < KT_ARRAY_SIZE(seqs); i++) {
		for (j = 0; j < seqs[i].n; j++)
			k[j] = kt_key(seqs[i].chain, seqs[i].first + j);
		memset(p, 0xa5, sizeof(p));
		SNAP();
		ASSERT_EQ(0, kt_stats(self->v, self->pool, 0, &before));
		ASSERT_EQ(0, peek_raw(self->b, k, seqs[i].n, 0, KT_PTR(p), &n_peek));
		ASSERT_EQ(0, kt_stats(self->v, self->pool, 0, &after));
		SAME();
		/* Not counted as lookups or hits, and pages[] untouched. */
		EXPECT_EQ(before.lookups, after.lookups);
		EXPECT_EQ(before.hits, after.hits);
		for (j = 0; j < 8; j++)
			EXPECT_EQ(0xa5a5a5a5u, p[j]);

		/* LOOKUP hits the same run (and takes it, then gives it back). */
		ASSERT_EQ(0, kt_lookup(self->b, k, seqs[i].n, q, &n_hit));
		EXPECT_EQ(n_hit, n_peek) {
			TH_LOG("sequence %u: peek %u, lookup %u", i, n_peek, n_hit);
		}
		if (n_hit)
			ASSERT_EQ(0, kt_put(self->b, q, n_hit));
	}
	/* The expected runs, spelled out. */
	EXPECT_EQ(3, peek_chain(self->b, 1, 0, 5));
	EXPECT_EQ(1, peek_chain(self->b, 2, 0, 3));
	EXPECT_EQ(0, peek_chain(self->b, 3, 0, 1));	/* claimed: in flight */
	EXPECT_EQ(0, peek_chain(self->b, 9, 0, 2));
	KT_EXPECT_PAGE(self->v, self->pool, self->cached, KVS_PAGE_CACHED, 0);
	KT_EXPECT_PAGE(self->v, self->pool, self->c[0], KVS_PAGE_SHARED, 1);
	EXPECT_EQ(0, kt_held(self->b));
	KT_CHECK(self->v, self->pool);
}

/*
 * The eviction order: CACHED pages A, then B, the pool otherwise full.
 * Peeking A leaves A the oldest, so the next ALLOC evicts A; a LOOKUP and
 * PUT of A (the control) makes it the newest, and B goes instead.
 */
static void lru_case(struct __test_metadata *_metadata, FIXTURE_DATA(pk) *self,
		     int touch_by_lookup, __u64 *victim_chain)
{
	__u32 pa, pb, fill[PK_PAGES], got, n_hit, i;
	struct kvs_pool_stats st;
	struct kvs_key k = kt_key(10, 0);

	ASSERT_EQ(0, kt_alloc(self->b, 1, &pa));
	ASSERT_EQ(0, kt_publish_chain(self->b, &pa, 1, KVS_NO_PAGE, 10, 0, NULL, NULL));
	ASSERT_EQ(0, kt_put1(self->b, pa));
	ASSERT_EQ(0, kt_alloc(self->b, 1, &pb));
	ASSERT_EQ(0, kt_publish_chain(self->b, &pb, 1, KVS_NO_PAGE, 11, 0, NULL, NULL));
	ASSERT_EQ(0, kt_put1(self->b, pb));
	ASSERT_EQ(0, kt_stats(self->v, self->pool, 0, &st));
	/* Take every free page, leaving the three CACHED ones. */
	ASSERT_GE(PK_PAGES, st.n_free);
	if (st.n_free)
		ASSERT_EQ(0, kt_alloc(self->b, st.n_free, fill));
	if (touch_by_lookup) {
		ASSERT_EQ(0, kt_lookup(self->b, &k, 1, &got, &n_hit));
		ASSERT_EQ(1, n_hit);
		ASSERT_EQ(0, kt_put1(self->b, got));
	} else {
		ASSERT_EQ(0, peek_raw(self->b, &k, 1, 0, 0, &n_hit));
		ASSERT_EQ(1, n_hit);
		KT_EXPECT_PAGE(self->v, self->pool, pa, KVS_PAGE_CACHED, 0);
	}
	/* (2, 0), published in the setup, is the oldest: evict it first. */
	ASSERT_EQ(0, kt_alloc(self->b, 1, &got));
	ASSERT_EQ(0, peek_chain(self->b, 2, 0, 1));
	ASSERT_EQ(0, kt_alloc(self->b, 1, &got));
	*victim_chain = peek_chain(self->b, 10, 0, 1) ? 11 : 10;
	for (i = 10; i <= 11; i++)
		EXPECT_EQ(i != *victim_chain, peek_chain(self->b, i, 0, 1));
	KT_CHECK(self->v, self->pool);
}

TEST_F(pk, peek_keeps_cached_page_evictable_in_place)
{
	__u64 victim = 0;

	lru_case(_metadata, self, 0, &victim);
	EXPECT_EQ(10, victim);
}

TEST_F(pk, lookup_and_put_moves_it_the_control)
{
	__u64 victim = 0;

	lru_case(_metadata, self, 1, &victim);
	EXPECT_EQ(11, victim);
}

TEST_F(pk, peek_bad_input)
{
	struct kvs_key k[3];
	__u32 n, i;

	for (i = 0; i < 3; i++)
		k[i] = kt_key(1, i);
	/* With WAIT: refused, nothing armed. */
	SNAP();
	EXPECT_EQ(-EINVAL, peek_raw(self->b, k, 3, KVS_LOOKUP_WAIT, 0, &n));
	EXPECT_EQ(0, kvs_client_waiting(self->b->cl));
	EXPECT_EQ(-EINVAL, peek_raw(self->b, k, 3, 1u << 2, 0, &n));
	EXPECT_EQ(-EINVAL, peek_raw(self->b, k, 3, 1u << 31, 0, &n));
	EXPECT_EQ(-EINVAL, peek_raw(self->b, k, 0, 0, 0, &n));
	EXPECT_EQ(-E2BIG, peek_raw(self->b, k, KVS_MAX_BATCH + 1, 0, 0, &n));
	EXPECT_EQ(-EFAULT, peek_raw(self->b, NULL, 3, 0, 0, &n));
	EXPECT_EQ(-EFAULT, peek_raw(self->b, (void *)(uintptr_t)KT_BAD, 3, 0, 0, &n));
	/* A bad pages pointer does not matter: it is never touched. */
	EXPECT_EQ(0, peek_raw(self->b, k, 3, 0, KT_BAD, &n));
	EXPECT_EQ(3, n);
	SAME();
}

TEST_F(pk, peek_answers_only_where_lookup_does)
{
	struct kvs_key k = kt_key(1, 0);
	__u32 n, p;

	/* Another namespace does not see the chain, by peek or by LOOKUP. */
	EXPECT_EQ(0, peek_chain(self->o, 1, 0, 3));
	ASSERT_EQ(0, kt_lookup(self->o, &k, 1, &p, &n));
	EXPECT_EQ(0, n);
	/* A uid that may not attach cannot peek, as it cannot LOOKUP. */
	EXPECT_EQ(-EACCES, kt_attach(self->x, "pk", NS));
	EXPECT_EQ(-EBADFD, peek_chain(self->x, 1, 0, 3));
	EXPECT_EQ(-EBADFD, kt_lookup(self->x, &k, 1, &p, &n));
	KT_CHECK(self->v, self->pool);
}

/* A peek is not "a LOOKUP" for the file's wait: it leaves it armed. */
TEST_F(pk, peek_leaves_the_wait_armed)
{
	struct kvs_key k = kt_key(3, 0);
	struct kvs_lookup l = { .count = 1, .flags = KVS_LOOKUP_WAIT,
				.keys = KT_PTR(&k) };
	__u32 p, n;

	l.pages = KT_PTR(&p);
	ASSERT_EQ(0, kt_cmd(self->b, KVS_IOC_LOOKUP, &l));
	ASSERT_EQ(0, l.n_hit);
	ASSERT_EQ(1, l.n_inflight);
	ASSERT_TRUE(kvs_client_waiting(self->b->cl));
	ASSERT_EQ(0, peek_raw(self->b, &k, 1, 0, 0, &n));
	EXPECT_EQ(0, n);
	EXPECT_TRUE(kvs_client_waiting(self->b->cl));
	KT_CHECK(self->v, self->pool);
}

TEST_HARNESS_MAIN
