// SPDX-License-Identifier: GPL-2.0
/*
 * Bad input on every page command of the arbiter core, and faults: each
 * failing call must return the documented errno and change nothing (the
 * whole pool state, every page descriptor and every file's holdings are
 * compared before and after).  Copy faults are injected at every copy of
 * a call in turn ("fail-nth"), including after the state was changed.
 */
#include "kt.h"

#define BI_PAGES 32
#define NS 1

/*
 * Pool "bi" (BI_PAGES pages) with some of everything in it:
 *   a: chain c[0] <- c[1] <- c[2] (SHARED, keys (1, 0..2)), one more page
 *      `cached` published as (2, 0) and put (CACHED), one OWNED page a_own;
 *   b: two OWNED pages b_own[2] and a reference on c[0];
 *   u: attached to nothing; v: admin viewer.
 */
FIXTURE(bi) {
	struct kt_client *a, *b, *u, *v;
	struct kt_client *cls[2];
	__u32 pool;
	__u32 c[3], cached, a_own, b_own[2];
	struct kt_snap *snap;
};

FIXTURE_SETUP(bi)
{
	__u32 l, n_hit = 0;

	ASSERT_EQ(0, kt_core_init());
	self->v = kt_new(0, 0, 1);
	self->a = kt_new(1000, 1000, 0);
	self->b = kt_new(1000, 1000, 0);
	self->u = kt_new(1000, 1000, 0);
	ASSERT_NE(NULL, self->v);
	ASSERT_NE(NULL, self->a);
	ASSERT_NE(NULL, self->b);
	ASSERT_NE(NULL, self->u);
	self->cls[0] = self->a;
	self->cls[1] = self->b;
	self->snap = calloc(1, sizeof(*self->snap));
	ASSERT_NE(NULL, self->snap);
	ASSERT_EQ(0, kt_create(self->a, "bi", BI_PAGES, 0600, 0, 0, &self->pool));
	ASSERT_EQ(0, kt_attach(self->a, "bi", NS));
	ASSERT_EQ(0, kt_attach(self->b, "bi", NS));
	ASSERT_EQ(0, kt_alloc(self->a, 3, self->c));
	ASSERT_EQ(0, kt_publish_chain(self->a, self->c, 3, KVS_NO_PAGE, 1, 0, NULL, NULL));
	ASSERT_EQ(0, kt_alloc(self->a, 1, &self->cached));
	ASSERT_EQ(0, kt_publish_chain(self->a, &self->cached, 1, KVS_NO_PAGE, 2, 0, NULL, NULL));
	ASSERT_EQ(0, kt_put1(self->a, self->cached));
	ASSERT_EQ(0, kt_alloc(self->a, 1, &self->a_own));
	ASSERT_EQ(0, kt_alloc(self->b, 2, self->b_own));
	ASSERT_EQ(0, kt_lookup_chain(self->b, 1, 0, 1, &l, &n_hit));
	ASSERT_EQ(1, n_hit);
	ASSERT_EQ(self->c[0], l);
	KT_CHECK(self->v, self->pool);
}

FIXTURE_TEARDOWN(bi)
{
	free(self->snap);
	kt_core_teardown(_metadata, self->pool);
}

#define SNAP() ASSERT_EQ(0, kt_snap_take(self->v, self->pool, self->cls, 2, self->snap))
#define SAME() kt_snap_same(_metadata, self->v, self->pool, self->cls, 2, self->snap, __LINE__)

/* Run a call that must fail with err and change nothing. */
#define BAD(err, call) do {							\
	int __ret;								\
	SNAP();									\
	__ret = (call);								\
	EXPECT_EQ((err), __ret) {						\
		TH_LOG("%s", #call);						\
	}									\
	SAME();									\
} while (0)

/* The same, when either of two errnos is a fair reading of the spec. */
#define BAD2(err1, err2, call) do {						\
	int __ret;								\
	SNAP();									\
	__ret = (call);								\
	EXPECT_TRUE(__ret == (err1) || __ret == (err2)) {			\
		TH_LOG("%s: %d", #call, __ret);					\
	}									\
	SAME();									\
} while (0)

static int alloc_raw(struct kt_client *c, __u32 count, __u32 flags, __u64 pages,
		     __u64 keys, __u64 r0)
{
	struct kvs_alloc a = { .count = count, .flags = flags, .pages = pages,
			       .keys = keys, .reserved = { r0 } };

	return kt_cmd(c, KVS_IOC_ALLOC, &a);
}

static int publish_raw(struct kt_client *c, __u32 count, __u32 flags, __u64 entries,
		       __u32 pad, __u64 r0, __u64 r1)
{
	struct kvs_publish p = { .count = count, .flags = flags, .entries = entries,
				 .pad = pad, .reserved = { r0, r1 } };

	return kt_cmd(c, KVS_IOC_PUBLISH, &p);
}

static int lookup_raw(struct kt_client *c, __u32 count, __u32 flags, __u64 keys,
		      __u64 pages, __u32 pad, __u64 r0, __u64 r1)
{
	struct kvs_lookup l = { .count = count, .flags = flags, .keys = keys,
				.pages = pages, .n_inflight = pad, .reserved = { r0, r1 } };

	return kt_cmd(c, KVS_IOC_LOOKUP, &l);
}

static int put_raw(struct kt_client *c, __u32 count, __u32 flags, __u64 pages,
		   __u64 r0, __u64 r1)
{
	struct kvs_put p = { .count = count, .flags = flags, .pages = pages,
			     .reserved = { r0, r1 } };

	return kt_cmd(c, KVS_IOC_PUT, &p);
}

static int quota_raw(struct kt_client *c, __u32 flags, __u32 max, __u32 pad,
		     __u64 r0, __u64 r1)
{
	struct kvs_quota q = { .flags = flags, .max_pages = max, .pad = pad,
			       .reserved = { r0, r1 } };

	return kt_cmd(c, KVS_IOC_QUOTA, &q);
}

/* ---- ALLOC ------------------------------------------------------------ */

TEST_F(bi, alloc_bad_input)
{
	__u32 p[4];
	__u32 *e = kt_edge(sizeof(__u32));
	__u32 *big;
	int ret;

	BAD(-EINVAL, alloc_raw(self->a, 0, 0, KT_PTR(p), 0, 0));
	BAD(-E2BIG, alloc_raw(self->a, KVS_MAX_BATCH + 1, 0, KT_PTR(p), 0, 0));
	BAD(-E2BIG, alloc_raw(self->a, 0xffffffff, 0, KT_PTR(p), 0, 0));
	BAD(-EINVAL, alloc_raw(self->a, 1, 2, KT_PTR(p), 0, 0));
	BAD(-EINVAL, alloc_raw(self->a, 1, 1u << 31, KT_PTR(p), 0, 0));
	BAD(-EINVAL, alloc_raw(self->a, 1, 0, KT_PTR(p), 1, 0));
	BAD(-EINVAL, alloc_raw(self->a, 1, 0, KT_PTR(p), 0, 1ull << 63));
	/* Bad output pointers: nothing allocated. */
	BAD(-EFAULT, alloc_raw(self->a, 2, 0, 0, 0, 0));
	BAD(-EFAULT, alloc_raw(self->a, 2, 0, KT_BAD, 0, 0));
	BAD(-EFAULT, alloc_raw(self->a, 2, 0, KT_PTR(e), 0, 0));
	BAD(-EFAULT, alloc_raw(self->a, 2, 0, ~0ull - 3, 0, 0));
	/* Not attached. */
	BAD(-EBADFD, alloc_raw(self->u, 1, 0, KT_PTR(p), 0, 0));
	/* KVS_MAX_BATCH itself is not too big: it fails for lack of pages. */
	big = calloc(KVS_MAX_BATCH, sizeof(*big));
	ASSERT_NE(NULL, big);
	SNAP();
	ret = alloc_raw(self->a, KVS_MAX_BATCH, 0, KT_PTR(big), 0, 0);
	EXPECT_TRUE(ret == -EDQUOT || ret == -ENOSPC) {
		TH_LOG("ALLOC of KVS_MAX_BATCH: %d", ret);
	}
	SAME();
	free(big);
	KT_CHECK(self->v, self->pool);
}

/* ---- PUBLISH ---------------------------------------------------------- */

static void entry(struct kvs_publish_entry *e, __u32 page, __u32 parent, __u64 a, __u64 b)
{
	memset(e, 0, sizeof(*e));
	e->page = page;
	e->parent = parent;
	e->key = kt_key(a, b);
}

TEST_F(bi, publish_bad_input)
{
	struct kvs_publish_entry e[2], *edge;
	struct kvs_publish_entry *big;
	__u32 i;
	int ret;

	entry(&e[0], self->a_own, KVS_NO_PAGE, 9, 0);
	BAD(-EINVAL, publish_raw(self->a, 0, 0, KT_PTR(e), 0, 0, 0));
	BAD(-E2BIG, publish_raw(self->a, KVS_MAX_BATCH + 1, 0, KT_PTR(e), 0, 0, 0));
	BAD(-E2BIG, publish_raw(self->a, 0xffffffff, 0, KT_PTR(e), 0, 0, 0));
	BAD(-EINVAL, publish_raw(self->a, 1, 1, KT_PTR(e), 0, 0, 0));
	BAD(-EINVAL, publish_raw(self->a, 1, 1u << 31, KT_PTR(e), 0, 0, 0));
	BAD(-EINVAL, publish_raw(self->a, 1, 0, KT_PTR(e), 1, 0, 0));
	BAD(-EINVAL, publish_raw(self->a, 1, 0, KT_PTR(e), 0, 1, 0));
	BAD(-EINVAL, publish_raw(self->a, 1, 0, KT_PTR(e), 0, 0, 1));
	/* Entry flags are out-only: must be 0 in, in any entry. */
	e[0].flags = KVS_PUBLISHED_DUP;
	BAD(-EINVAL, publish_raw(self->a, 1, 0, KT_PTR(e), 0, 0, 0));
	entry(&e[0], self->b_own[0], KVS_NO_PAGE, 9, 0);
	entry(&e[1], self->b_own[1], KVS_PARENT_PREV, 9, 1);
	e[1].flags = 1u << 30;
	BAD(-EINVAL, publish_raw(self->b, 2, 0, KT_PTR(e), 0, 0, 0));
	/* Pointers. */
	entry(&e[0], self->a_own, KVS_NO_PAGE, 9, 0);
	BAD(-EFAULT, publish_raw(self->a, 1, 0, 0, 0, 0, 0));
	BAD(-EFAULT, publish_raw(self->a, 1, 0, KT_BAD, 0, 0, 0));
	edge = kt_edge(sizeof(*edge));
	memcpy(edge, e, sizeof(*edge));
	BAD(-EFAULT, publish_raw(self->a, 2, 0, KT_PTR(edge), 0, 0, 0));
	/* Pages out of range, or not ours. */
	entry(&e[0], BI_PAGES, KVS_NO_PAGE, 9, 0);
	BAD2(-ENOENT, -EINVAL, kt_publish(self->a, e, 1, NULL));
	entry(&e[0], 0xfffffffd, KVS_NO_PAGE, 9, 0);
	BAD2(-ENOENT, -EINVAL, kt_publish(self->a, e, 1, NULL));
	entry(&e[0], KVS_NO_PAGE, KVS_NO_PAGE, 9, 0);
	BAD2(-ENOENT, -EINVAL, kt_publish(self->a, e, 1, NULL));
	entry(&e[0], self->b_own[0], KVS_NO_PAGE, 9, 0);	/* foreign OWNED */
	BAD(-ENOENT, kt_publish(self->a, e, 1, NULL));
	entry(&e[0], self->c[0], KVS_NO_PAGE, 9, 0);		/* held SHARED */
	BAD(-ENOENT, kt_publish(self->b, e, 1, NULL));
	/* Parents out of range. */
	entry(&e[0], self->a_own, BI_PAGES, 9, 0);
	BAD2(-ENOENT, -EINVAL, kt_publish(self->a, e, 1, NULL));
	entry(&e[0], self->a_own, 0xfffffffd, 9, 0);
	BAD2(-ENOENT, -EINVAL, kt_publish(self->a, e, 1, NULL));
	/* Not attached. */
	entry(&e[0], self->a_own, KVS_NO_PAGE, 9, 0);
	BAD(-EBADFD, kt_publish(self->u, e, 1, NULL));
	/* KVS_MAX_BATCH is not too big: the entries are what is wrong. */
	big = calloc(KVS_MAX_BATCH, sizeof(*big));
	ASSERT_NE(NULL, big);
	for (i = 0; i < KVS_MAX_BATCH; i++)
		entry(&big[i], BI_PAGES + i, i ? KVS_PARENT_PREV : KVS_NO_PAGE, 10, i);
	SNAP();
	ret = kt_publish(self->a, big, KVS_MAX_BATCH, NULL);
	EXPECT_TRUE(ret == -ENOENT || ret == -EINVAL) {
		TH_LOG("PUBLISH of KVS_MAX_BATCH bad entries: %d", ret);
	}
	SAME();
	free(big);
	/* After all that the page still publishes. */
	entry(&e[0], self->a_own, KVS_NO_PAGE, 9, 0);
	ASSERT_EQ(0, kt_publish(self->a, e, 1, NULL));
	KT_CHECK(self->v, self->pool);
}

/* ---- LOOKUP ----------------------------------------------------------- */

TEST_F(bi, lookup_bad_input)
{
	struct kvs_key k[3], *ke, *big;
	__u32 p[3], *pe, *bigp, i, n_hit = 0;
	int ret;

	for (i = 0; i < 3; i++)
		k[i] = kt_key(1, i);
	BAD(-EINVAL, lookup_raw(self->a, 0, 0, KT_PTR(k), KT_PTR(p), 0, 0, 0));
	BAD(-E2BIG, lookup_raw(self->a, KVS_MAX_BATCH + 1, 0, KT_PTR(k), KT_PTR(p), 0, 0, 0));
	BAD(-E2BIG, lookup_raw(self->a, 0xffffffff, 0, KT_PTR(k), KT_PTR(p), 0, 0, 0));
	BAD(-EINVAL, lookup_raw(self->a, 3, 4, KT_PTR(k), KT_PTR(p), 0, 0, 0));
	BAD(-EINVAL, lookup_raw(self->a, 3, KVS_LOOKUP_PEEK | KVS_LOOKUP_WAIT,
				 KT_PTR(k), KT_PTR(p), 0, 0, 0));
	BAD(-EINVAL, lookup_raw(self->a, 3, 1u << 31, KT_PTR(k), KT_PTR(p), 0, 0, 0));
	BAD(-EINVAL, lookup_raw(self->a, 3, 0, KT_PTR(k), KT_PTR(p), 1, 0, 0));
	BAD(-EINVAL, lookup_raw(self->a, 3, 0, KT_PTR(k), KT_PTR(p), 0, 1, 0));
	BAD(-EINVAL, lookup_raw(self->a, 3, 0, KT_PTR(k), KT_PTR(p), 0, 0, 1));
	/* Bad keys. */
	BAD(-EFAULT, lookup_raw(self->a, 3, 0, 0, KT_PTR(p), 0, 0, 0));
	BAD(-EFAULT, lookup_raw(self->a, 3, 0, KT_BAD, KT_PTR(p), 0, 0, 0));
	ke = kt_edge(2 * sizeof(*ke));
	memcpy(ke, k, 2 * sizeof(*ke));
	BAD(-EFAULT, lookup_raw(self->a, 3, 0, KT_PTR(ke), KT_PTR(p), 0, 0, 0));
	/* Bad pages for three hits: no reference may stay behind. */
	BAD(-EFAULT, lookup_raw(self->a, 3, 0, KT_PTR(k), 0, 0, 0, 0));
	BAD(-EFAULT, lookup_raw(self->a, 3, 0, KT_PTR(k), KT_BAD, 0, 0, 0));
	pe = kt_edge(2 * sizeof(*pe));
	BAD(-EFAULT, lookup_raw(self->a, 3, 0, KT_PTR(k), KT_PTR(pe), 0, 0, 0));
	/* Not attached. */
	BAD(-EBADFD, lookup_raw(self->u, 3, 0, KT_PTR(k), KT_PTR(p), 0, 0, 0));

	/* KVS_MAX_BATCH keys is fine: the chain, then misses. */
	big = calloc(KVS_MAX_BATCH, sizeof(*big));
	bigp = calloc(KVS_MAX_BATCH, sizeof(*bigp));
	ASSERT_NE(NULL, big);
	ASSERT_NE(NULL, bigp);
	for (i = 0; i < KVS_MAX_BATCH; i++)
		big[i] = kt_key(1, i);
	ret = kt_lookup(self->b, big, KVS_MAX_BATCH, bigp, &n_hit);
	ASSERT_EQ(0, ret);
	ASSERT_EQ(3, n_hit);
	EXPECT_EQ(self->c[0], bigp[0]);
	EXPECT_EQ(self->c[2], bigp[2]);
	ASSERT_EQ(0, kt_put(self->b, bigp, 3));
	free(big);
	free(bigp);
	KT_CHECK(self->v, self->pool);
}

/* ---- PUT -------------------------------------------------------------- */

TEST_F(bi, put_bad_input)
{
	__u32 p[2] = { self->b_own[0], self->c[0] }, *pe, *big, x, i;
	int ret;

	BAD(-EINVAL, put_raw(self->b, 0, 0, KT_PTR(p), 0, 0));
	BAD(-E2BIG, put_raw(self->b, KVS_MAX_BATCH + 1, 0, KT_PTR(p), 0, 0));
	BAD(-E2BIG, put_raw(self->b, 0xffffffff, 0, KT_PTR(p), 0, 0));
	BAD(-EINVAL, put_raw(self->b, 2, 1, KT_PTR(p), 0, 0));
	BAD(-EINVAL, put_raw(self->b, 2, 1u << 31, KT_PTR(p), 0, 0));
	BAD(-EINVAL, put_raw(self->b, 2, 0, KT_PTR(p), 1, 0));
	BAD(-EINVAL, put_raw(self->b, 2, 0, KT_PTR(p), 0, 1));
	BAD(-EFAULT, put_raw(self->b, 2, 0, 0, 0, 0));
	BAD(-EFAULT, put_raw(self->b, 2, 0, KT_BAD, 0, 0));
	pe = kt_edge(sizeof(*pe));
	*pe = self->b_own[0];
	BAD(-EFAULT, put_raw(self->b, 2, 0, KT_PTR(pe), 0, 0));
	/* Out of range, foreign, unheld. */
	x = BI_PAGES;
	BAD2(-ENOENT, -EINVAL, kt_put(self->b, &x, 1));
	x = KVS_NO_PAGE;
	BAD2(-ENOENT, -EINVAL, kt_put(self->b, &x, 1));
	x = 0xfffffffe;
	BAD2(-ENOENT, -EINVAL, kt_put(self->b, &x, 1));
	BAD(-ENOENT, kt_put1(self->b, self->a_own));		/* a's OWNED */
	BAD(-ENOENT, kt_put1(self->b, self->c[1]));		/* SHARED, a's */
	BAD(-ENOENT, kt_put1(self->b, self->cached));		/* CACHED */
	BAD(-ENOENT, kt_put1(self->a, self->b_own[1]));		/* b's OWNED */
	/* Not attached. */
	BAD(-EBADFD, put_raw(self->u, 2, 0, KT_PTR(p), 0, 0));
	/* KVS_MAX_BATCH is not too big: the pages are what is wrong. */
	big = calloc(KVS_MAX_BATCH, sizeof(*big));
	ASSERT_NE(NULL, big);
	for (i = 0; i < KVS_MAX_BATCH; i++)
		big[i] = self->c[0];	/* held once, listed 65536 times */
	SNAP();
	ret = kt_put(self->b, big, KVS_MAX_BATCH);
	EXPECT_EQ(-ENOENT, ret);
	SAME();
	free(big);
	ASSERT_EQ(0, kt_put(self->b, p, 2));
	KT_CHECK(self->v, self->pool);
}

/* ---- QUOTA ------------------------------------------------------------ */

TEST_F(bi, quota_bad_input)
{
	__u32 max = 0;

	BAD(-EINVAL, quota_raw(self->b, 2, 0, 0, 0, 0));
	BAD(-EINVAL, quota_raw(self->b, 1u << 31, 0, 0, 0, 0));
	BAD(-EINVAL, quota_raw(self->b, 0, 0, 1, 0, 0));
	BAD(-EINVAL, quota_raw(self->b, 0, 0, 0, 1, 0));
	BAD(-EINVAL, quota_raw(self->b, 0, 0, 0, 0, 1));
	BAD(-EINVAL, quota_raw(self->b, KVS_QUOTA_SET, 2, 0, 0, 0));	/* b holds 3 */
	BAD(-EINVAL, quota_raw(self->b, KVS_QUOTA_SET, BI_PAGES + 1, 0, 0, 0));
	BAD(-EINVAL, quota_raw(self->b, KVS_QUOTA_SET, 0xffffffff, 0, 0, 0));
	BAD(-EINVAL, quota_raw(self->b, KVS_QUOTA_SET, 8, 1, 0, 0));
	BAD(-EBADFD, quota_raw(self->u, 0, 0, 0, 0, 0));
	BAD(-EBADFD, quota_raw(self->u, KVS_QUOTA_SET, 4, 0, 0, 0));
	ASSERT_EQ(0, kt_quota(self->b, 0, 0, &max, NULL));
	EXPECT_EQ(BI_PAGES, max);
}

/* ---- STATS / PAGES / LIST / DESTROY / ATTACH / CREATE ---------------- */

TEST_F(bi, other_commands_bad_input)
{
	struct kvs_pool_stats st;
	struct kvs_pool_destroy d;
	struct kvs_pool_attach at;
	struct kvs_pool_create cr;
	struct kvs_pool_list l;
	struct kvs_page_desc pd;
	struct kvs_pages pg;
	struct kt_client *other;
	int i;

	BAD(-EINVAL, kt_stats(self->a, 0, 2, &st));
	BAD(-EINVAL, kt_stats(self->a, 0, KVS_STATS_CHECK | 4, &st));
	for (i = 0; i < (int)(sizeof(st.reserved) / sizeof(st.reserved[0])); i++) {
		memset(&st, 0, sizeof(st));
		st.reserved[i] = 1;
		BAD(-EINVAL, kt_cmd(self->a, KVS_IOC_POOL_STATS, &st));
	}
	BAD(-EBADFD, kt_stats(self->u, 0, 0, &st));
	BAD(-ENOENT, kt_stats(self->u, self->pool + 1, 0, &st));

	memset(&pg, 0, sizeof(pg));
	pg.count = 1;
	pg.pages = KT_PTR(&pd);
	pg.flags = 1;
	BAD(-EINVAL, kt_cmd(self->a, KVS_IOC_PAGES, &pg));
	pg.flags = 0;
	pg.pad = 1;
	BAD(-EINVAL, kt_cmd(self->a, KVS_IOC_PAGES, &pg));
	pg.pad = 0;
	pg.start = BI_PAGES + 1;
	BAD(-EINVAL, kt_cmd(self->a, KVS_IOC_PAGES, &pg));
	pg.start = 0;
	pg.pages = KT_BAD;
	BAD(-EFAULT, kt_cmd(self->a, KVS_IOC_PAGES, &pg));

	memset(&l, 0, sizeof(l));
	l.flags = 1;
	BAD(-EINVAL, kt_cmd(self->a, KVS_IOC_POOL_LIST, &l));
	memset(&l, 0, sizeof(l));
	l.count = 1;
	l.pools = KT_BAD;
	BAD(-EFAULT, kt_cmd(self->a, KVS_IOC_POOL_LIST, &l));

	memset(&d, 0, sizeof(d));
	d.pool_id = self->pool;
	d.flags = 1;
	BAD(-EINVAL, kt_cmd(self->a, KVS_IOC_POOL_DESTROY, &d));
	d.flags = 0;
	d.reserved[1] = 1;
	BAD(-EINVAL, kt_cmd(self->a, KVS_IOC_POOL_DESTROY, &d));
	other = kt_new(2000, 1000, 0);
	ASSERT_NE(NULL, other);
	BAD(-EPERM, kt_destroy(other, self->pool));

	memset(&at, 0, sizeof(at));
	strcpy(at.name, "bi");
	at.flags = 4;
	BAD(-EINVAL, kt_cmd(self->u, KVS_IOC_POOL_ATTACH, &at));
	BAD(-EBUSY, kt_attach(self->a, "bi", NS));

	kt_create_req(&cr, "bi2", 4, 0600, 0, 0);
	cr.reserved[3] = 1;
	BAD(-EINVAL, kt_cmd(self->a, KVS_IOC_POOL_CREATE, &cr));
	BAD(-EEXIST, kt_create(self->b, "bi", 4, 0600, 0, 0, NULL));

	/* Unknown command numbers. */
	BAD(-ENOTTY, kt_cmd(self->a, _IOWR(KVS_IOC_MAGIC, 0x14, struct kvs_put), &d));
	BAD(-ENOTTY, kt_cmd(self->a, _IOWR(KVS_IOC_MAGIC, 0x09, struct kvs_put), &d));
	BAD(-ENOTTY, kt_cmd(self->a, 0, &d));
	KT_CHECK(self->v, self->pool);
}

/* ---- Copy faults at every copy of a call ------------------------------ */

/*
 * Run @call with the fail_at-th copy of client @c failing, for every
 * fail_at until the call needs fewer copies and succeeds; each failed run
 * must be -EFAULT and leave everything as it was.
 */
#define FAIL_NTH(c, call) do {							\
	int __n, __ret;								\
	for (__n = 1; __n < 64; __n++) {					\
		SNAP();								\
		(c)->fail_at = __n;						\
		__ret = (call);							\
		(c)->fail_at = 0;						\
		if (__ret == 0)							\
			break;							\
		EXPECT_EQ(-EFAULT, __ret) {					\
			TH_LOG("%s, copy %d failing", #call, __n);		\
		}								\
		SAME();								\
	}									\
	ASSERT_EQ(0, __ret) {							\
		TH_LOG("%s never succeeded", #call);				\
	}									\
	ASSERT_GT(__n, 1) {							\
		TH_LOG("%s made no copy", #call);				\
	}									\
} while (0)

TEST_F(bi, efault_at_every_copy_alloc)
{
	__u32 p[3];

	FAIL_NTH(self->a, kt_alloc(self->a, 3, p));
	KT_EXPECT_PAGE(self->v, self->pool, p[0], KVS_PAGE_OWNED, 0);
	KT_EXPECT_PAGE(self->v, self->pool, p[2], KVS_PAGE_OWNED, 0);
	KT_CHECK(self->v, self->pool);
}

/*
 * Fail copies 1..@last-1 of @call, each of which must come before the call
 * acts: -EFAULT and nothing changed.  Copy @last is the write-back of the
 * results, which the caller checks on its own (see the uapi conventions).
 */
#define FAIL_BEFORE_WRITEBACK(c, call, last) do {				\
	int __n, __ret;								\
	for (__n = 1; __n < (last); __n++) {					\
		SNAP();								\
		(c)->fail_at = __n;						\
		__ret = (call);							\
		(c)->fail_at = 0;						\
		EXPECT_EQ(-EFAULT, __ret) {					\
			TH_LOG("%s, copy %d failing", #call, __n);		\
		}								\
		SAME();								\
	}									\
} while (0)

/* Probe read, probe write, then the write-back of the pages. */
#define ALLOC_WRITEBACK		3
/* Entries in, probe write, then the write-back of the results. */
#define PUBLISH_WRITEBACK	3

TEST_F(bi, efault_at_every_copy_alloc_with_eviction)
{
	struct kvs_pool_stats st;
	__u32 fill[BI_PAGES], p[1], free_n, owned_n;

	ASSERT_EQ(0, kt_stats(self->v, self->pool, 0, &st));
	free_n = st.n_free;
	ASSERT_EQ(0, kt_alloc(self->b, free_n, fill));
	ASSERT_EQ(0, kt_stats(self->v, self->pool, 0, &st));
	owned_n = st.n_owned;
	/* Free is 0: the only way is to evict `cached`. */
	FAIL_BEFORE_WRITEBACK(self->a, kt_alloc(self->a, 1, p), ALLOC_WRITEBACK);

	/* The write-back fails: the page goes back, the eviction stays. */
	self->a->fail_at = ALLOC_WRITEBACK;
	EXPECT_EQ(-EFAULT, kt_alloc(self->a, 1, p));
	self->a->fail_at = 0;
	ASSERT_EQ(0, kt_stats(self->v, self->pool, 0, &st));
	EXPECT_EQ(owned_n, st.n_owned);
	EXPECT_EQ(1, st.n_free);
	EXPECT_EQ(1, st.evictions);
	KT_EXPECT_PAGE(self->v, self->pool, self->cached, KVS_PAGE_FREE, 0);
	KT_CHECK(self->v, self->pool);

	ASSERT_EQ(0, kt_alloc(self->a, 1, p));
	EXPECT_EQ(self->cached, p[0]);
	KT_CHECK(self->v, self->pool);
}

TEST_F(bi, efault_at_every_copy_publish)
{
	struct kvs_publish_entry e[3];
	struct kvs_pool_stats st;
	__u32 q[2], n_dup = 0, held;

	ASSERT_EQ(0, kt_alloc(self->b, 2, q));
	/* A duplicate of c[1] hung on c[0] (held), then two new pages. */
	entry(&e[0], self->b_own[0], self->c[0], 1, 1);
	entry(&e[1], q[0], KVS_PARENT_PREV, 1, 5);
	entry(&e[2], q[1], KVS_PARENT_PREV, 1, 6);
	FAIL_BEFORE_WRITEBACK(self->b, kt_publish(self->b, e, 3, &n_dup),
			      PUBLISH_WRITEBACK);

	/*
	 * The write-back fails after the entries were published: the file
	 * holds none of their pages, and what it published stays published.
	 */
	ASSERT_EQ(0, kt_stats(self->v, self->pool, 0, &st));
	held = st.n_held;
	self->b->fail_at = PUBLISH_WRITEBACK;
	EXPECT_EQ(-EFAULT, kt_publish(self->b, e, 3, &n_dup));
	self->b->fail_at = 0;
	ASSERT_EQ(0, kt_stats(self->v, self->pool, 0, &st));
	EXPECT_EQ(held - 3, st.n_held);
	KT_EXPECT_PAGE(self->v, self->pool, self->b_own[0], KVS_PAGE_FREE, 0);
	KT_EXPECT_PAGE(self->v, self->pool, q[0], KVS_PAGE_CACHED, 0);
	KT_EXPECT_PAGE(self->v, self->pool, q[1], KVS_PAGE_CACHED, 0);
	EXPECT_EQ(self->c[1], kt_desc(self->v, self->pool, q[0]).parent);
	EXPECT_EQ(-ENOENT, kt_put1(self->b, q[0]));
	KT_CHECK(self->v, self->pool);
}

TEST_F(bi, efault_at_every_copy_lookup)
{
	struct kvs_key k[4];
	__u32 p[4], n_hit = 0, i;

	for (i = 0; i < 3; i++)
		k[i] = kt_key(1, i);
	k[3] = kt_key(1, 50);	/* missing: ends the run */
	FAIL_NTH(self->b, kt_lookup(self->b, k, 4, p, &n_hit));
	EXPECT_EQ(3, n_hit);
	KT_EXPECT_PAGE(self->v, self->pool, self->c[0], KVS_PAGE_SHARED, 3);
	KT_EXPECT_PAGE(self->v, self->pool, self->cached, KVS_PAGE_CACHED, 0);
	/* Reviving a CACHED page, with the fault. */
	k[3] = kt_key(2, 0);
	FAIL_NTH(self->b, kt_lookup(self->b, &k[3], 1, p, &n_hit));
	EXPECT_EQ(1, n_hit);
	KT_EXPECT_PAGE(self->v, self->pool, self->cached, KVS_PAGE_SHARED, 1);
	KT_CHECK(self->v, self->pool);
}

TEST_F(bi, efault_at_every_copy_put)
{
	__u32 p[3] = { self->b_own[0], self->c[0], self->b_own[1] };
	__u32 l[2], n_hit = 0;

	FAIL_NTH(self->b, kt_put(self->b, p, 3));
	KT_EXPECT_PAGE(self->v, self->pool, self->b_own[0], KVS_PAGE_FREE, 0);
	KT_EXPECT_PAGE(self->v, self->pool, self->c[0], KVS_PAGE_SHARED, 1);
	/* A last reference with the fault: SHARED -> CACHED only on success. */
	ASSERT_EQ(0, kt_lookup_chain(self->b, 2, 0, 1, l, &n_hit));
	ASSERT_EQ(1, n_hit);
	FAIL_NTH(self->b, kt_put(self->b, l, 1));
	KT_EXPECT_PAGE(self->v, self->pool, self->cached, KVS_PAGE_CACHED, 0);
	KT_CHECK(self->v, self->pool);
}

TEST_HARNESS_MAIN
