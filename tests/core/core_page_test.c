// SPDX-License-Identifier: GPL-2.0
/*
 * Page life cycle of the arbiter core (docs/design.md section 3): ALLOC,
 * PUBLISH (duplicates, parents), LOOKUP (longest run, references,
 * namespaces), PUT, client free, eviction order and quotas.  Every test
 * ends with the pool invariants (kt_check_pool) and the teardown checks
 * that all holdings went away with the clients and no core object leaked.
 */
#include "kt.h"

#define PG_PAGES 16
#define NS_A 7
#define NS_O 8

/*
 * One pool "pg" of PG_PAGES pages, mode 0600, owned by uid 1000.
 *   a, b: uid 1000, namespace NS_A.
 *   o:    uid 1000, namespace NS_O (fills the pool in eviction tests).
 *   v:    admin viewer, not attached, reads stats and pages by pool id.
 */
FIXTURE(pg) {
	struct kt_client *a, *b, *o, *v;
	__u32 pool;
};

FIXTURE_SETUP(pg)
{
	ASSERT_EQ(0, kt_core_init());
	self->v = kt_new(0, 0, 1);
	self->a = kt_new(1000, 1000, 0);
	self->b = kt_new(1000, 1000, 0);
	self->o = kt_new(1000, 1000, 0);
	ASSERT_NE(NULL, self->v);
	ASSERT_NE(NULL, self->a);
	ASSERT_NE(NULL, self->b);
	ASSERT_NE(NULL, self->o);
	ASSERT_EQ(0, kt_create(self->a, "pg", PG_PAGES, 0600, 0, 0, &self->pool));
	ASSERT_NE(0, self->pool);
	ASSERT_EQ(0, kt_attach(self->a, "pg", NS_A));
	ASSERT_EQ(0, kt_attach(self->b, "pg", NS_A));
	ASSERT_EQ(0, kt_attach(self->o, "pg", NS_O));
}

FIXTURE_TEARDOWN(pg)
{
	kt_core_teardown(_metadata, self->pool);
}

#define CHECK() KT_CHECK(self->v, self->pool)
#define STATS(st) KT_CHECK_ST(self->v, self->pool, &(st))
#define PAGE(p, s, r) KT_EXPECT_PAGE(self->v, self->pool, (p), (s), (r))
#define DESC(p) kt_desc(self->v, self->pool, (p))

#define COUNTS(st, f, ow, sh, ca) do {				\
	EXPECT_EQ((__u64)(f), (st).n_free);			\
	EXPECT_EQ((__u64)(ow), (st).n_owned);			\
	EXPECT_EQ((__u64)(sh), (st).n_shared);			\
	EXPECT_EQ((__u64)(ca), (st).n_cached);			\
} while (0)

static int distinct(const __u32 *p, __u32 n, __u32 limit)
{
	__u32 i, j;

	for (i = 0; i < n; i++) {
		if (p[i] >= limit)
			return 0;
		for (j = 0; j < i; j++)
			if (p[i] == p[j])
				return 0;
	}
	return 1;
}

/* Take every FREE page of the pool as OWNED by @c; returns how many. */
static __u32 fill(struct __test_metadata *_metadata, struct kt_client *v, __u32 pool,
		  struct kt_client *c, __u32 *out)
{
	struct kvs_pool_stats st;

	EXPECT_EQ(0, kt_stats(v, pool, 0, &st));
	if (st.n_free) {
		EXPECT_EQ(0, kt_alloc(c, st.n_free, out));
	}
	return st.n_free;
}
#define FILL(c, out) fill(_metadata, self->v, self->pool, (c), (out))

/* ---- FREE -> OWNED -> FREE ----------------------------------------- */

TEST_F(pg, alloc_then_put_owned)
{
	struct kvs_pool_stats st;
	__u32 p[3], i, two[2];

	ASSERT_EQ(0, kt_alloc(self->a, 3, p));
	ASSERT_TRUE(distinct(p, 3, PG_PAGES));
	STATS(st);
	COUNTS(st, PG_PAGES - 3, 3, 0, 0);
	EXPECT_EQ(3, st.allocs);
	EXPECT_EQ(3, st.n_held);
	EXPECT_EQ(0, st.n_refs);
	EXPECT_EQ(3, st.n_files);
	for (i = 0; i < 3; i++) {
		struct kvs_page_desc d = DESC(p[i]);

		EXPECT_EQ(KVS_PAGE_OWNED, d.state);
		EXPECT_EQ(0, d.refcount);
		EXPECT_EQ(KVS_NO_PAGE, d.parent);
		EXPECT_TRUE(kt_key_zero(&d.key));
	}
	EXPECT_EQ(3, kt_held(self->a));
	EXPECT_EQ(0, kt_held(self->b));

	/* OWNED -> FREE by PUT */
	ASSERT_EQ(0, kt_put1(self->a, p[1]));
	PAGE(p[1], KVS_PAGE_FREE, 0);
	/* PUT twice: the second is not held any more. */
	EXPECT_EQ(-ENOENT, kt_put1(self->a, p[1]));
	/* Another file cannot PUT our OWNED page. */
	EXPECT_EQ(-ENOENT, kt_put1(self->b, p[0]));
	PAGE(p[0], KVS_PAGE_OWNED, 0);
	STATS(st);
	COUNTS(st, PG_PAGES - 2, 2, 0, 0);
	EXPECT_EQ(2, kt_held(self->a));

	two[0] = p[2];
	two[1] = p[0];
	ASSERT_EQ(0, kt_put(self->a, two, 2));
	STATS(st);
	COUNTS(st, PG_PAGES, 0, 0, 0);
	EXPECT_EQ(0, st.n_held);
	EXPECT_EQ(3, st.allocs);
	EXPECT_EQ(0, kt_held(self->a));
}

TEST_F(pg, alloc_whole_pool_then_enospc)
{
	struct kvs_pool_stats st;
	__u32 p[PG_PAGES], x;

	ASSERT_EQ(0, kt_alloc(self->a, PG_PAGES, p));
	ASSERT_TRUE(distinct(p, PG_PAGES, PG_PAGES));
	EXPECT_EQ(-ENOSPC, kt_alloc(self->b, 1, &x));
	STATS(st);
	COUNTS(st, 0, PG_PAGES, 0, 0);
	EXPECT_EQ(1, st.alloc_fails);
	EXPECT_EQ(PG_PAGES, st.allocs);
	EXPECT_EQ(0, kt_held(self->b));
	ASSERT_EQ(0, kt_put(self->a, p, PG_PAGES));
	CHECK();
}

TEST_F(pg, owned_freed_by_client_free)
{
	struct kvs_pool_stats st;
	__u32 p[4], q[2], i;

	ASSERT_EQ(0, kt_alloc(self->a, 4, p));
	ASSERT_EQ(0, kt_alloc(self->b, 2, q));
	STATS(st);
	COUNTS(st, PG_PAGES - 6, 6, 0, 0);
	kt_free(self->a);
	self->a = NULL;
	STATS(st);
	COUNTS(st, PG_PAGES - 2, 2, 0, 0);
	EXPECT_EQ(2, st.n_files);
	EXPECT_EQ(2, st.n_held);
	for (i = 0; i < 4; i++)
		PAGE(p[i], KVS_PAGE_FREE, 0);
	for (i = 0; i < 2; i++)
		PAGE(q[i], KVS_PAGE_OWNED, 0);
	CHECK();
}

/* ---- OWNED -> SHARED -> CACHED -> SHARED ---------------------------- */

TEST_F(pg, publish_chain_makes_shared)
{
	struct kvs_pool_stats st;
	__u32 p[3], r[3], n_dup = 99, i;

	ASSERT_EQ(0, kt_alloc(self->a, 3, p));
	ASSERT_EQ(0, kt_publish_chain(self->a, p, 3, KVS_NO_PAGE, 1, 0, r, &n_dup));
	EXPECT_EQ(0, n_dup);
	for (i = 0; i < 3; i++) {
		struct kvs_page_desc d = DESC(p[i]);
		struct kvs_key k = kt_key(1, i);

		EXPECT_EQ(p[i], r[i]);
		EXPECT_EQ(KVS_PAGE_SHARED, d.state);
		EXPECT_EQ(1, d.refcount);
		EXPECT_EQ(i ? p[i - 1] : KVS_NO_PAGE, d.parent);
		EXPECT_EQ(i < 2 ? 1 : 0, d.n_children);
		EXPECT_EQ(NS_A, d.ns);
		EXPECT_TRUE(kt_key_eq(&k, &d.key));
	}
	STATS(st);
	COUNTS(st, PG_PAGES - 3, 0, 3, 0);
	EXPECT_EQ(3, st.n_refs);
	EXPECT_EQ(3, st.n_held);
	EXPECT_EQ(3, st.publishes);
	EXPECT_EQ(0, st.dup_publishes);
	EXPECT_EQ(0, st.n_evictable);
	EXPECT_EQ(3, kt_held(self->a));
	/* A published page is no longer OWNED: PUBLISH of it again fails. */
	EXPECT_EQ(-ENOENT, kt_publish_chain(self->a, p, 1, KVS_NO_PAGE, 1, 9, NULL, NULL));
	ASSERT_EQ(0, kt_put(self->a, p, 3));
	CHECK();
}

TEST_F(pg, publish_flags_zero_when_not_dup)
{
	struct kvs_publish_entry e[2];
	__u32 p[2], n_dup = 7;

	ASSERT_EQ(0, kt_alloc(self->a, 2, p));
	memset(e, 0, sizeof(e));
	e[0].page = p[0];
	e[0].parent = KVS_NO_PAGE;
	e[0].key = kt_key(2, 0);
	e[1].page = p[1];
	e[1].parent = KVS_PARENT_PREV;
	e[1].key = kt_key(2, 1);
	ASSERT_EQ(0, kt_publish(self->a, e, 2, &n_dup));
	EXPECT_EQ(0, n_dup);
	EXPECT_EQ(p[0], e[0].result);
	EXPECT_EQ(p[1], e[1].result);
	EXPECT_EQ(0, e[0].flags);
	EXPECT_EQ(0, e[1].flags);
	EXPECT_EQ(p[1], e[1].page);
	EXPECT_EQ(KVS_PARENT_PREV, e[1].parent);
	ASSERT_EQ(0, kt_put(self->a, p, 2));
	CHECK();
}

TEST_F(pg, last_put_caches_then_lookup_revives)
{
	struct kvs_pool_stats st;
	__u32 p[2], l[2], n_hit = 0;

	ASSERT_EQ(0, kt_alloc(self->a, 2, p));
	ASSERT_EQ(0, kt_publish_chain(self->a, p, 2, KVS_NO_PAGE, 3, 0, NULL, NULL));
	ASSERT_EQ(0, kt_lookup_chain(self->b, 3, 0, 2, l, &n_hit));
	ASSERT_EQ(2, n_hit);
	EXPECT_EQ(p[0], l[0]);
	EXPECT_EQ(p[1], l[1]);
	PAGE(p[0], KVS_PAGE_SHARED, 2);
	PAGE(p[1], KVS_PAGE_SHARED, 2);
	STATS(st);
	EXPECT_EQ(4, st.n_refs);
	EXPECT_EQ(2, st.hits);
	EXPECT_EQ(2, st.lookups);

	/* Not the last reference: stays SHARED. */
	ASSERT_EQ(0, kt_put(self->a, p, 2));
	PAGE(p[0], KVS_PAGE_SHARED, 1);
	PAGE(p[1], KVS_PAGE_SHARED, 1);

	/* Last reference of the leaf: CACHED, evictable (no child). */
	ASSERT_EQ(0, kt_put1(self->b, p[1]));
	PAGE(p[1], KVS_PAGE_CACHED, 0);
	STATS(st);
	COUNTS(st, PG_PAGES - 2, 0, 1, 1);
	EXPECT_EQ(1, st.n_evictable);
	EXPECT_EQ(1, st.n_refs);

	/* Last reference of the root: CACHED, but it has a child. */
	ASSERT_EQ(0, kt_put1(self->b, p[0]));
	PAGE(p[0], KVS_PAGE_CACHED, 0);
	STATS(st);
	COUNTS(st, PG_PAGES - 2, 0, 0, 2);
	EXPECT_EQ(1, st.n_evictable);
	EXPECT_EQ(0, st.n_refs);
	EXPECT_EQ(0, st.n_held);
	/* Keys and links survive caching. */
	EXPECT_EQ(p[0], DESC(p[1]).parent);
	EXPECT_EQ(1, DESC(p[0]).n_children);

	/* CACHED -> SHARED by a LOOKUP hit, from any file of the namespace. */
	ASSERT_EQ(0, kt_lookup_chain(self->a, 3, 0, 2, l, &n_hit));
	ASSERT_EQ(2, n_hit);
	EXPECT_EQ(p[0], l[0]);
	EXPECT_EQ(p[1], l[1]);
	PAGE(p[0], KVS_PAGE_SHARED, 1);
	PAGE(p[1], KVS_PAGE_SHARED, 1);
	STATS(st);
	COUNTS(st, PG_PAGES - 2, 0, 2, 0);
	EXPECT_EQ(0, st.n_evictable);
	EXPECT_EQ(4, st.hits);
	EXPECT_EQ(4, st.lookups);
	EXPECT_EQ(2, kt_held(self->a));
	ASSERT_EQ(0, kt_put(self->a, l, 2));
	CHECK();
}

TEST_F(pg, client_free_drops_references)
{
	struct kvs_pool_stats st;
	__u32 p[4], l[2], q, n_hit;
	struct kt_client *c;

	ASSERT_EQ(0, kt_alloc(self->a, 4, p));
	ASSERT_EQ(0, kt_publish_chain(self->a, p, 2, KVS_NO_PAGE, 30, 0, NULL, NULL));
	ASSERT_EQ(0, kt_lookup_chain(self->b, 30, 0, 2, l, &n_hit));
	ASSERT_EQ(2, n_hit);
	ASSERT_EQ(0, kt_alloc(self->b, 1, &q));
	STATS(st);
	COUNTS(st, PG_PAGES - 5, 3, 2, 0);

	kt_free(self->a);
	self->a = NULL;
	STATS(st);
	COUNTS(st, PG_PAGES - 3, 1, 2, 0);
	EXPECT_EQ(2, st.n_refs);
	EXPECT_EQ(2, st.n_files);
	PAGE(p[0], KVS_PAGE_SHARED, 1);
	PAGE(p[1], KVS_PAGE_SHARED, 1);
	PAGE(p[2], KVS_PAGE_FREE, 0);
	PAGE(p[3], KVS_PAGE_FREE, 0);

	kt_free(self->b);
	self->b = NULL;
	STATS(st);
	COUNTS(st, PG_PAGES - 2, 0, 0, 2);
	EXPECT_EQ(0, st.n_refs);
	EXPECT_EQ(0, st.n_held);
	EXPECT_EQ(1, st.n_files);
	PAGE(q, KVS_PAGE_FREE, 0);

	/* Still findable by a new file of the namespace. */
	c = kt_new(1000, 1000, 0);
	ASSERT_NE(NULL, c);
	ASSERT_EQ(0, kt_attach(c, "pg", NS_A));
	ASSERT_EQ(0, kt_lookup_chain(c, 30, 0, 2, l, &n_hit));
	ASSERT_EQ(2, n_hit);
	EXPECT_EQ(p[0], l[0]);
	EXPECT_EQ(p[1], l[1]);
	CHECK();
	kt_free(c);
	CHECK();
}

/* ---- PUBLISH duplicates and parents --------------------------------- */

TEST_F(pg, publish_duplicate_returns_canonical)
{
	struct kvs_pool_stats st;
	struct kvs_publish_entry e;
	__u32 p, q, n_dup = 0;

	ASSERT_EQ(0, kt_alloc(self->a, 1, &p));
	ASSERT_EQ(0, kt_publish_chain(self->a, &p, 1, KVS_NO_PAGE, 4, 0, NULL, NULL));
	ASSERT_EQ(0, kt_alloc(self->b, 1, &q));
	ASSERT_NE(p, q);
	memset(&e, 0, sizeof(e));
	e.page = q;
	e.parent = KVS_NO_PAGE;
	e.key = kt_key(4, 0);
	ASSERT_EQ(0, kt_publish(self->b, &e, 1, &n_dup));
	EXPECT_EQ(1, n_dup);
	EXPECT_EQ(p, e.result);
	EXPECT_EQ(KVS_PUBLISHED_DUP, e.flags);
	PAGE(q, KVS_PAGE_FREE, 0);
	PAGE(p, KVS_PAGE_SHARED, 2);
	STATS(st);
	COUNTS(st, PG_PAGES - 1, 0, 1, 0);
	EXPECT_EQ(2, st.publishes);
	EXPECT_EQ(1, st.dup_publishes);
	EXPECT_EQ(2, st.n_refs);
	EXPECT_EQ(1, kt_held(self->b));
	/* The duplicate's page is not held any more; the canonical one is. */
	EXPECT_EQ(-ENOENT, kt_put1(self->b, q));
	ASSERT_EQ(0, kt_put1(self->b, p));
	EXPECT_EQ(-ENOENT, kt_put1(self->b, p));
	PAGE(p, KVS_PAGE_SHARED, 1);
	ASSERT_EQ(0, kt_put1(self->a, p));
	PAGE(p, KVS_PAGE_CACHED, 0);
	CHECK();
}

TEST_F(pg, publish_duplicate_of_cached_page)
{
	struct kvs_pool_stats st;
	__u32 p, q, r, n_dup = 0;

	ASSERT_EQ(0, kt_alloc(self->a, 1, &p));
	ASSERT_EQ(0, kt_publish_chain(self->a, &p, 1, KVS_NO_PAGE, 5, 0, NULL, NULL));
	ASSERT_EQ(0, kt_put1(self->a, p));
	PAGE(p, KVS_PAGE_CACHED, 0);
	ASSERT_EQ(0, kt_alloc(self->b, 1, &q));
	ASSERT_EQ(0, kt_publish_chain(self->b, &q, 1, KVS_NO_PAGE, 5, 0, &r, &n_dup));
	EXPECT_EQ(1, n_dup);
	EXPECT_EQ(p, r);
	PAGE(p, KVS_PAGE_SHARED, 1);
	PAGE(q, KVS_PAGE_FREE, 0);
	STATS(st);
	COUNTS(st, PG_PAGES - 1, 0, 1, 0);
	EXPECT_EQ(0, st.n_evictable);
	ASSERT_EQ(0, kt_put1(self->b, p));
	PAGE(p, KVS_PAGE_CACHED, 0);
	CHECK();
}

TEST_F(pg, publish_duplicate_within_one_batch)
{
	struct kvs_publish_entry e[2];
	struct kvs_pool_stats st;
	__u32 p[2], n_dup = 0, two[2];

	ASSERT_EQ(0, kt_alloc(self->a, 2, p));
	memset(e, 0, sizeof(e));
	e[0].page = p[0];
	e[0].parent = KVS_NO_PAGE;
	e[0].key = kt_key(6, 0);
	e[1].page = p[1];
	e[1].parent = KVS_NO_PAGE;
	e[1].key = kt_key(6, 0);
	/* In order: the second entry finds the key the first one published. */
	ASSERT_EQ(0, kt_publish(self->a, e, 2, &n_dup));
	EXPECT_EQ(1, n_dup);
	EXPECT_EQ(p[0], e[0].result);
	EXPECT_EQ(0, e[0].flags);
	EXPECT_EQ(p[0], e[1].result);
	EXPECT_EQ(KVS_PUBLISHED_DUP, e[1].flags);
	PAGE(p[0], KVS_PAGE_SHARED, 2);
	PAGE(p[1], KVS_PAGE_FREE, 0);
	STATS(st);
	EXPECT_EQ(2, st.publishes);
	EXPECT_EQ(1, st.dup_publishes);
	EXPECT_EQ(2, kt_held(self->a));
	/* Held twice: may be listed twice in one PUT, not three times. */
	two[0] = two[1] = p[0];
	{
		__u32 three[3] = { p[0], p[0], p[0] };

		EXPECT_EQ(-ENOENT, kt_put(self->a, three, 3));
		PAGE(p[0], KVS_PAGE_SHARED, 2);
	}
	ASSERT_EQ(0, kt_put(self->a, two, 2));
	PAGE(p[0], KVS_PAGE_CACHED, 0);
	CHECK();
}

TEST_F(pg, publish_duplicates_then_prev_chains_to_canonical)
{
	struct kvs_pool_stats st;
	__u32 p[2], q[3], r[3], n_dup = 0;

	ASSERT_EQ(0, kt_alloc(self->a, 2, p));
	ASSERT_EQ(0, kt_publish_chain(self->a, p, 2, KVS_NO_PAGE, 7, 0, NULL, NULL));
	ASSERT_EQ(0, kt_alloc(self->b, 3, q));
	ASSERT_EQ(0, kt_publish_chain(self->b, q, 3, KVS_NO_PAGE, 7, 0, r, &n_dup));
	EXPECT_EQ(2, n_dup);
	EXPECT_EQ(p[0], r[0]);
	EXPECT_EQ(p[1], r[1]);
	EXPECT_EQ(q[2], r[2]);
	PAGE(q[0], KVS_PAGE_FREE, 0);
	PAGE(q[1], KVS_PAGE_FREE, 0);
	PAGE(q[2], KVS_PAGE_SHARED, 1);
	PAGE(p[0], KVS_PAGE_SHARED, 2);
	PAGE(p[1], KVS_PAGE_SHARED, 2);
	/* PARENT_PREV is the previous entry's *result*: the canonical page. */
	EXPECT_EQ(p[1], DESC(q[2]).parent);
	EXPECT_EQ(1, DESC(p[1]).n_children);
	EXPECT_EQ(1, DESC(p[0]).n_children);
	STATS(st);
	EXPECT_EQ(5, st.publishes);
	EXPECT_EQ(2, st.dup_publishes);
	EXPECT_EQ(3, kt_held(self->b));
	ASSERT_EQ(0, kt_put(self->b, r, 3));
	ASSERT_EQ(0, kt_put(self->a, p, 2));
	STATS(st);
	COUNTS(st, PG_PAGES - 3, 0, 0, 3);
	EXPECT_EQ(1, st.n_evictable);
	CHECK();
}

TEST_F(pg, publish_explicit_parent_held_reference)
{
	struct kvs_pool_stats st;
	__u32 p, l, q, r, x, rx, n_hit = 0, n_dup = 0;

	ASSERT_EQ(0, kt_alloc(self->a, 1, &p));
	ASSERT_EQ(0, kt_publish_chain(self->a, &p, 1, KVS_NO_PAGE, 8, 0, NULL, NULL));
	/* b holds a reference on p through LOOKUP and hangs its page on it. */
	ASSERT_EQ(0, kt_lookup_chain(self->b, 8, 0, 1, &l, &n_hit));
	ASSERT_EQ(1, n_hit);
	ASSERT_EQ(0, kt_alloc(self->b, 1, &q));
	ASSERT_EQ(0, kt_publish_chain(self->b, &q, 1, p, 8, 1, &r, &n_dup));
	EXPECT_EQ(0, n_dup);
	EXPECT_EQ(q, r);
	EXPECT_EQ(p, DESC(q).parent);
	EXPECT_EQ(1, DESC(p).n_children);
	/* A second branch from the same parent, by a. */
	ASSERT_EQ(0, kt_alloc(self->a, 1, &x));
	ASSERT_EQ(0, kt_publish_chain(self->a, &x, 1, p, 9, 1, &rx, NULL));
	EXPECT_EQ(x, rx);
	EXPECT_EQ(2, DESC(p).n_children);
	ASSERT_EQ(0, kt_put1(self->a, x));
	ASSERT_EQ(0, kt_put1(self->b, q));
	ASSERT_EQ(0, kt_put1(self->b, p));
	ASSERT_EQ(0, kt_put1(self->a, p));
	STATS(st);
	COUNTS(st, PG_PAGES - 3, 0, 0, 3);
	EXPECT_EQ(2, st.n_evictable);
	CHECK();
}

TEST_F(pg, publish_parent_must_be_held)
{
	struct kt_snap *s = calloc(1, sizeof(*s));
	struct kt_client *cls[3] = { self->a, self->b, self->o };
	__u32 pa[2], pc, q, own, freep = KVS_NO_PAGE, i;
	struct kvs_page_desc d[PG_PAGES];
	__u32 bad[5];
	__u32 n;

	ASSERT_NE(NULL, s);
	/* pa[0]: SHARED held by a only; pc: CACHED, held by nobody. */
	ASSERT_EQ(0, kt_alloc(self->a, 2, pa));
	ASSERT_EQ(0, kt_publish_chain(self->a, &pa[0], 1, KVS_NO_PAGE, 10, 0, NULL, NULL));
	ASSERT_EQ(0, kt_alloc(self->a, 1, &pc));
	ASSERT_EQ(0, kt_publish_chain(self->a, &pc, 1, KVS_NO_PAGE, 11, 0, NULL, NULL));
	ASSERT_EQ(0, kt_put1(self->a, pc));
	/* own: b's OWNED page that is not in the batch. */
	ASSERT_EQ(0, kt_alloc(self->b, 1, &q));
	ASSERT_EQ(0, kt_alloc(self->b, 1, &own));
	ASSERT_EQ(0, kt_pages(self->v, self->pool, 0, PG_PAGES, d, &n));
	for (i = 0; i < n; i++)
		if (d[i].state == KVS_PAGE_FREE) {
			freep = i;
			break;
		}
	ASSERT_NE(KVS_NO_PAGE, freep);
	bad[0] = pa[0];		/* SHARED, but held by another file */
	bad[1] = pc;		/* CACHED */
	bad[2] = own;		/* OWNED by this file, not SHARED */
	bad[3] = pa[1];		/* OWNED by another file */
	bad[4] = freep;		/* FREE */
	for (i = 0; i < KT_ARRAY_SIZE(bad); i++) {
		ASSERT_EQ(0, kt_snap_take(self->v, self->pool, cls, 3, s));
		EXPECT_EQ(-ENOENT, kt_publish_chain(self->b, &q, 1, bad[i], 12, 0, NULL, NULL)) {
			TH_LOG("parent case %u (page %u)", i, bad[i]);
		}
		kt_snap_same(_metadata, self->v, self->pool, cls, 3, s, __LINE__);
	}
	PAGE(q, KVS_PAGE_OWNED, 0);
	free(s);
	CHECK();
}

TEST_F(pg, publish_page_must_be_owned_by_caller)
{
	struct kt_snap *s = calloc(1, sizeof(*s));
	struct kt_client *cls[3] = { self->a, self->b, self->o };
	__u32 pa, ps, freep = KVS_NO_PAGE, i, n;
	struct kvs_page_desc d[PG_PAGES];
	__u32 bad[3];

	ASSERT_NE(NULL, s);
	ASSERT_EQ(0, kt_alloc(self->a, 1, &pa));		/* a's OWNED */
	ASSERT_EQ(0, kt_alloc(self->b, 1, &ps));
	ASSERT_EQ(0, kt_publish_chain(self->b, &ps, 1, KVS_NO_PAGE, 13, 0, NULL, NULL));
	ASSERT_EQ(0, kt_pages(self->v, self->pool, 0, PG_PAGES, d, &n));
	for (i = 0; i < n; i++)
		if (d[i].state == KVS_PAGE_FREE) {
			freep = i;
			break;
		}
	bad[0] = pa;	/* another file's OWNED page */
	bad[1] = ps;	/* SHARED, held by the caller */
	bad[2] = freep;	/* FREE */
	for (i = 0; i < KT_ARRAY_SIZE(bad); i++) {
		ASSERT_EQ(0, kt_snap_take(self->v, self->pool, cls, 3, s));
		EXPECT_EQ(-ENOENT, kt_publish_chain(self->b, &bad[i], 1, KVS_NO_PAGE, 14, 0,
						    NULL, NULL)) {
			TH_LOG("page case %u (page %u)", i, bad[i]);
		}
		kt_snap_same(_metadata, self->v, self->pool, cls, 3, s, __LINE__);
	}
	free(s);
	CHECK();
}

TEST_F(pg, publish_einval_page_twice_or_prev_first)
{
	struct kt_snap *s = calloc(1, sizeof(*s));
	struct kt_client *cls[3] = { self->a, self->b, self->o };
	struct kvs_publish_entry e[3];
	__u32 p[2];

	ASSERT_NE(NULL, s);
	ASSERT_EQ(0, kt_alloc(self->a, 2, p));
	ASSERT_EQ(0, kt_snap_take(self->v, self->pool, cls, 3, s));

	memset(e, 0, sizeof(e));
	e[0].page = p[0];
	e[0].parent = KVS_NO_PAGE;
	e[0].key = kt_key(15, 0);
	e[1].page = p[1];
	e[1].parent = KVS_PARENT_PREV;
	e[1].key = kt_key(15, 1);
	e[2].page = p[0];		/* listed twice */
	e[2].parent = KVS_NO_PAGE;
	e[2].key = kt_key(15, 2);
	EXPECT_EQ(-EINVAL, kt_publish(self->a, e, 3, NULL));
	kt_snap_same(_metadata, self->v, self->pool, cls, 3, s, __LINE__);

	e[0].parent = KVS_PARENT_PREV;	/* PARENT_PREV in entry 0 */
	EXPECT_EQ(-EINVAL, kt_publish(self->a, e, 2, NULL));
	kt_snap_same(_metadata, self->v, self->pool, cls, 3, s, __LINE__);

	PAGE(p[0], KVS_PAGE_OWNED, 0);
	PAGE(p[1], KVS_PAGE_OWNED, 0);
	free(s);
	CHECK();
}

TEST_F(pg, publish_all_or_nothing)
{
	struct kt_snap *s = calloc(1, sizeof(*s));
	struct kt_client *cls[3] = { self->a, self->b, self->o };
	struct kvs_publish_entry e[3];
	__u32 p[2], x, l, n_hit = 9;

	ASSERT_NE(NULL, s);
	ASSERT_EQ(0, kt_alloc(self->a, 2, p));
	ASSERT_EQ(0, kt_alloc(self->b, 1, &x));
	ASSERT_EQ(0, kt_snap_take(self->v, self->pool, cls, 3, s));
	memset(e, 0, sizeof(e));
	e[0].page = p[0];
	e[0].parent = KVS_NO_PAGE;
	e[0].key = kt_key(16, 0);
	e[1].page = p[1];
	e[1].parent = KVS_PARENT_PREV;
	e[1].key = kt_key(16, 1);
	e[2].page = x;			/* b's page: the last entry is invalid */
	e[2].parent = KVS_PARENT_PREV;
	e[2].key = kt_key(16, 2);
	EXPECT_EQ(-ENOENT, kt_publish(self->a, e, 3, NULL));
	kt_snap_same(_metadata, self->v, self->pool, cls, 3, s, __LINE__);
	/* Nothing of the batch became visible. */
	ASSERT_EQ(0, kt_lookup_chain(self->b, 16, 0, 1, &l, &n_hit));
	EXPECT_EQ(0, n_hit);
	/* The valid part alone goes through. */
	ASSERT_EQ(0, kt_publish(self->a, e, 2, NULL));
	PAGE(p[0], KVS_PAGE_SHARED, 1);
	PAGE(p[1], KVS_PAGE_SHARED, 1);
	free(s);
	CHECK();
}

TEST_F(pg, publish_same_key_other_namespace_is_not_dup)
{
	__u32 p, q, r, n_dup = 5, l, n_hit = 0;
	struct kvs_page_desc d;

	ASSERT_EQ(0, kt_alloc(self->a, 1, &p));
	ASSERT_EQ(0, kt_publish_chain(self->a, &p, 1, KVS_NO_PAGE, 17, 0, NULL, NULL));
	ASSERT_EQ(0, kt_alloc(self->o, 1, &q));
	ASSERT_EQ(0, kt_publish_chain(self->o, &q, 1, KVS_NO_PAGE, 17, 0, &r, &n_dup));
	EXPECT_EQ(0, n_dup);
	EXPECT_EQ(q, r);
	d = DESC(q);
	EXPECT_EQ(KVS_PAGE_SHARED, d.state);
	EXPECT_EQ(NS_O, d.ns);
	PAGE(p, KVS_PAGE_SHARED, 1);
	/* Each namespace finds its own page. */
	ASSERT_EQ(0, kt_lookup_chain(self->b, 17, 0, 1, &l, &n_hit));
	ASSERT_EQ(1, n_hit);
	EXPECT_EQ(p, l);
	ASSERT_EQ(0, kt_put1(self->b, l));
	ASSERT_EQ(0, kt_lookup_chain(self->o, 17, 0, 1, &l, &n_hit));
	ASSERT_EQ(1, n_hit);
	EXPECT_EQ(q, l);
	ASSERT_EQ(0, kt_put1(self->o, l));
	CHECK();
}

/* ---- LOOKUP ----------------------------------------------------------- */

TEST_F(pg, lookup_longest_run_takes_references)
{
	struct kvs_pool_stats st0, st;
	__u32 p[4], l[5], n_hit = 0, i;

	ASSERT_EQ(0, kt_alloc(self->a, 4, p));
	ASSERT_EQ(0, kt_publish_chain(self->a, p, 4, KVS_NO_PAGE, 20, 0, NULL, NULL));
	STATS(st0);
	memset(l, 0xee, sizeof(l));
	ASSERT_EQ(0, kt_lookup_chain(self->b, 20, 0, 5, l, &n_hit));
	ASSERT_EQ(4, n_hit);
	for (i = 0; i < 4; i++) {
		EXPECT_EQ(p[i], l[i]);
		PAGE(p[i], KVS_PAGE_SHARED, 2);
	}
	STATS(st);
	EXPECT_EQ(st0.lookups + 5, st.lookups);
	EXPECT_EQ(st0.hits + 4, st.hits);
	EXPECT_EQ(8, st.n_refs);
	EXPECT_EQ(4, kt_held(self->b));
	/* A run from the middle of a chain is a run too. */
	ASSERT_EQ(0, kt_lookup_chain(self->b, 20, 2, 3, l, &n_hit));
	ASSERT_EQ(2, n_hit);
	EXPECT_EQ(p[2], l[0]);
	EXPECT_EQ(p[3], l[1]);
	PAGE(p[2], KVS_PAGE_SHARED, 3);
	EXPECT_EQ(6, kt_held(self->b));
	CHECK();
}

/* "pages: out, __u32[count]; the first n_hit are written." */
TEST_F(pg, lookup_writes_only_n_hit_pages)
{
	__u32 p[2], l[4], n_hit = 0;

	ASSERT_EQ(0, kt_alloc(self->a, 2, p));
	ASSERT_EQ(0, kt_publish_chain(self->a, p, 2, KVS_NO_PAGE, 27, 0, NULL, NULL));
	memset(l, 0xee, sizeof(l));
	ASSERT_EQ(0, kt_lookup_chain(self->b, 27, 0, 4, l, &n_hit));
	ASSERT_EQ(2, n_hit);
	EXPECT_EQ(p[0], l[0]);
	EXPECT_EQ(p[1], l[1]);
	EXPECT_EQ(0xeeeeeeee, l[2]);
	EXPECT_EQ(0xeeeeeeee, l[3]);
	/* No hit at all: nothing written. */
	memset(l, 0xee, sizeof(l));
	ASSERT_EQ(0, kt_lookup_chain(self->b, 28, 0, 4, l, &n_hit));
	ASSERT_EQ(0, n_hit);
	EXPECT_EQ(0xeeeeeeee, l[0]);
	CHECK();
}

TEST_F(pg, lookup_gap_stops_run)
{
	struct kvs_pool_stats st0, st;
	struct kvs_key k[3];
	__u32 p[3], l[3], n_hit = 9;

	ASSERT_EQ(0, kt_alloc(self->a, 3, p));
	ASSERT_EQ(0, kt_publish_chain(self->a, p, 3, KVS_NO_PAGE, 21, 0, NULL, NULL));
	STATS(st0);
	k[0] = kt_key(21, 0);
	k[1] = kt_key(21, 99);		/* missing */
	k[2] = kt_key(21, 2);		/* exists, but after the gap */
	ASSERT_EQ(0, kt_lookup(self->b, k, 3, l, &n_hit));
	ASSERT_EQ(1, n_hit);
	EXPECT_EQ(p[0], l[0]);
	PAGE(p[0], KVS_PAGE_SHARED, 2);
	PAGE(p[1], KVS_PAGE_SHARED, 1);
	PAGE(p[2], KVS_PAGE_SHARED, 1);
	EXPECT_EQ(1, kt_held(self->b));
	STATS(st);
	EXPECT_EQ(st0.hits + 1, st.hits);
	EXPECT_EQ(st0.lookups + 3, st.lookups);

	/* A miss first: no hit, nothing taken, still a success. */
	k[0] = kt_key(21, 98);
	k[1] = kt_key(21, 0);
	ASSERT_EQ(0, kt_lookup(self->b, k, 2, l, &n_hit));
	EXPECT_EQ(0, n_hit);
	PAGE(p[0], KVS_PAGE_SHARED, 2);
	EXPECT_EQ(1, kt_held(self->b));
	ASSERT_EQ(0, kt_put1(self->b, p[0]));
	CHECK();
}

TEST_F(pg, lookup_misses_owned_pages)
{
	__u32 p, l, n_hit = 9;
	struct kvs_publish_entry e;

	/* An OWNED page is invisible, even after a failed PUBLISH of its key. */
	ASSERT_EQ(0, kt_alloc(self->a, 1, &p));
	memset(&e, 0, sizeof(e));
	e.page = p;
	e.parent = KVS_PARENT_PREV;	/* invalid in entry 0 */
	e.key = kt_key(22, 0);
	ASSERT_EQ(-EINVAL, kt_publish(self->a, &e, 1, NULL));
	ASSERT_EQ(0, kt_lookup_chain(self->b, 22, 0, 1, &l, &n_hit));
	EXPECT_EQ(0, n_hit);
	ASSERT_EQ(0, kt_lookup_chain(self->a, 22, 0, 1, &l, &n_hit));
	EXPECT_EQ(0, n_hit);
	CHECK();
}

TEST_F(pg, lookup_namespaces_separate_hits)
{
	struct kvs_pool_stats st0, st;
	__u32 p, l, n_hit = 0;

	ASSERT_EQ(0, kt_alloc(self->a, 1, &p));
	ASSERT_EQ(0, kt_publish_chain(self->a, &p, 1, KVS_NO_PAGE, 23, 0, NULL, NULL));
	ASSERT_EQ(0, kt_put1(self->a, p));
	STATS(st0);
	/* Other namespace: miss, nothing taken. */
	ASSERT_EQ(0, kt_lookup_chain(self->o, 23, 0, 1, &l, &n_hit));
	EXPECT_EQ(0, n_hit);
	PAGE(p, KVS_PAGE_CACHED, 0);
	STATS(st);
	EXPECT_EQ(st0.hits, st.hits);
	/* Same namespace, another file: hit. */
	ASSERT_EQ(0, kt_lookup_chain(self->b, 23, 0, 1, &l, &n_hit));
	ASSERT_EQ(1, n_hit);
	EXPECT_EQ(p, l);
	STATS(st);
	EXPECT_EQ(st0.hits + 1, st.hits);
	PAGE(p, KVS_PAGE_SHARED, 1);
	ASSERT_EQ(0, kt_put1(self->b, p));
	CHECK();
}

TEST_F(pg, lookup_twice_holds_twice)
{
	__u32 p, l, n_hit = 0;

	ASSERT_EQ(0, kt_alloc(self->a, 1, &p));
	ASSERT_EQ(0, kt_publish_chain(self->a, &p, 1, KVS_NO_PAGE, 24, 0, NULL, NULL));
	ASSERT_EQ(0, kt_lookup_chain(self->b, 24, 0, 1, &l, &n_hit));
	ASSERT_EQ(1, n_hit);
	ASSERT_EQ(0, kt_lookup_chain(self->b, 24, 0, 1, &l, &n_hit));
	ASSERT_EQ(1, n_hit);
	PAGE(p, KVS_PAGE_SHARED, 3);
	EXPECT_EQ(2, kt_held(self->b));
	ASSERT_EQ(0, kt_put1(self->b, p));
	PAGE(p, KVS_PAGE_SHARED, 2);
	ASSERT_EQ(0, kt_put1(self->b, p));
	EXPECT_EQ(-ENOENT, kt_put1(self->b, p));
	PAGE(p, KVS_PAGE_SHARED, 1);
	EXPECT_EQ(0, kt_held(self->b));
	CHECK();
}

/* ---- PUT -------------------------------------------------------------- */

TEST_F(pg, put_all_or_nothing)
{
	struct kt_snap *s = calloc(1, sizeof(*s));
	struct kt_client *cls[3] = { self->a, self->b, self->o };
	__u32 p[2], x, list[3];

	ASSERT_NE(NULL, s);
	ASSERT_EQ(0, kt_alloc(self->a, 2, p));
	ASSERT_EQ(0, kt_publish_chain(self->a, &p[1], 1, KVS_NO_PAGE, 25, 0, NULL, NULL));
	ASSERT_EQ(0, kt_alloc(self->b, 1, &x));
	ASSERT_EQ(0, kt_snap_take(self->v, self->pool, cls, 3, s));
	list[0] = p[0];
	list[1] = p[1];
	list[2] = x;			/* b's: not held by a */
	EXPECT_EQ(-ENOENT, kt_put(self->a, list, 3));
	kt_snap_same(_metadata, self->v, self->pool, cls, 3, s, __LINE__);
	list[2] = p[1];			/* held once, listed twice */
	EXPECT_EQ(-ENOENT, kt_put(self->a, list, 3));
	kt_snap_same(_metadata, self->v, self->pool, cls, 3, s, __LINE__);
	list[2] = p[0];			/* OWNED: held once */
	EXPECT_EQ(-ENOENT, kt_put(self->a, list, 3));
	kt_snap_same(_metadata, self->v, self->pool, cls, 3, s, __LINE__);
	ASSERT_EQ(0, kt_put(self->a, list, 2));
	PAGE(p[0], KVS_PAGE_FREE, 0);
	PAGE(p[1], KVS_PAGE_CACHED, 0);
	PAGE(x, KVS_PAGE_OWNED, 0);
	free(s);
	CHECK();
}

TEST_F(pg, put_cached_or_free_page_enoent)
{
	__u32 p, f = KVS_NO_PAGE, i, n;
	struct kvs_page_desc d[PG_PAGES];

	ASSERT_EQ(0, kt_alloc(self->a, 1, &p));
	ASSERT_EQ(0, kt_publish_chain(self->a, &p, 1, KVS_NO_PAGE, 26, 0, NULL, NULL));
	ASSERT_EQ(0, kt_put1(self->a, p));
	EXPECT_EQ(-ENOENT, kt_put1(self->a, p));
	EXPECT_EQ(-ENOENT, kt_put1(self->b, p));
	PAGE(p, KVS_PAGE_CACHED, 0);
	ASSERT_EQ(0, kt_pages(self->v, self->pool, 0, PG_PAGES, d, &n));
	for (i = 0; i < n; i++)
		if (d[i].state == KVS_PAGE_FREE)
			f = i;
	ASSERT_NE(KVS_NO_PAGE, f);
	EXPECT_EQ(-ENOENT, kt_put1(self->a, f));
	PAGE(f, KVS_PAGE_FREE, 0);
	CHECK();
}

/* ---- Eviction --------------------------------------------------------- */

TEST_F(pg, evict_leaf_first_whatever_lru)
{
	struct kvs_pool_stats st;
	__u32 p[3], fillp[PG_PAGES], x, l[3], n_hit = 9;

	ASSERT_EQ(0, kt_alloc(self->a, 3, p));
	ASSERT_EQ(0, kt_publish_chain(self->a, p, 3, KVS_NO_PAGE, 40, 0, NULL, NULL));
	/* Root first: p[0] is the least recently used, but has a child. */
	ASSERT_EQ(0, kt_put1(self->a, p[0]));
	ASSERT_EQ(0, kt_put1(self->a, p[1]));
	ASSERT_EQ(0, kt_put1(self->a, p[2]));
	STATS(st);
	COUNTS(st, PG_PAGES - 3, 0, 0, 3);
	EXPECT_EQ(1, st.n_evictable);
	ASSERT_EQ(PG_PAGES - 3, FILL(self->o, fillp));

	ASSERT_EQ(0, kt_alloc(self->b, 1, &x));
	EXPECT_EQ(p[2], x);
	PAGE(p[2], KVS_PAGE_OWNED, 0);
	STATS(st);
	EXPECT_EQ(1, st.evictions);
	EXPECT_EQ(1, st.n_evictable);	/* p[1] lost its only child */
	EXPECT_EQ(0, DESC(p[1]).n_children);
	EXPECT_EQ(KVS_NO_PAGE, DESC(p[2]).parent);

	ASSERT_EQ(0, kt_alloc(self->b, 1, &x));
	EXPECT_EQ(p[1], x);
	ASSERT_EQ(0, kt_alloc(self->b, 1, &x));
	EXPECT_EQ(p[0], x);
	EXPECT_EQ(-ENOSPC, kt_alloc(self->b, 1, &x));
	STATS(st);
	EXPECT_EQ(3, st.evictions);
	EXPECT_EQ(1, st.alloc_fails);
	COUNTS(st, 0, PG_PAGES, 0, 0);
	/* Evicted keys are gone. */
	ASSERT_EQ(0, kt_lookup_chain(self->a, 40, 0, 3, l, &n_hit));
	EXPECT_EQ(0, n_hit);
	CHECK();
}

TEST_F(pg, evict_never_parent_of_shared_child)
{
	struct kvs_pool_stats st;
	__u32 p[2], l[2], fillp[PG_PAGES], x[2], n_hit = 0;

	ASSERT_EQ(0, kt_alloc(self->a, 2, p));
	ASSERT_EQ(0, kt_publish_chain(self->a, p, 2, KVS_NO_PAGE, 41, 0, NULL, NULL));
	ASSERT_EQ(0, kt_lookup_chain(self->b, 41, 0, 2, l, &n_hit));
	ASSERT_EQ(2, n_hit);
	ASSERT_EQ(0, kt_put(self->a, p, 2));
	ASSERT_EQ(0, kt_put1(self->b, p[0]));
	/* p[0] CACHED with a SHARED child: not evictable. */
	PAGE(p[0], KVS_PAGE_CACHED, 0);
	PAGE(p[1], KVS_PAGE_SHARED, 1);
	STATS(st);
	EXPECT_EQ(0, st.n_evictable);
	ASSERT_EQ(PG_PAGES - 2, FILL(self->o, fillp));
	EXPECT_EQ(-ENOSPC, kt_alloc(self->a, 1, x));
	PAGE(p[0], KVS_PAGE_CACHED, 0);
	STATS(st);
	EXPECT_EQ(0, st.evictions);
	EXPECT_EQ(1, st.alloc_fails);

	/* The child goes CACHED: both evictable in one ALLOC, child first. */
	ASSERT_EQ(0, kt_put1(self->b, p[1]));
	STATS(st);
	EXPECT_EQ(1, st.n_evictable);
	ASSERT_EQ(0, kt_alloc(self->a, 2, x));
	EXPECT_TRUE((x[0] == p[0] && x[1] == p[1]) || (x[0] == p[1] && x[1] == p[0]));
	STATS(st);
	EXPECT_EQ(2, st.evictions);
	COUNTS(st, 0, PG_PAGES, 0, 0);
	CHECK();
}

TEST_F(pg, evict_cascades_through_chain_in_one_alloc)
{
	struct kvs_pool_stats st;
	__u32 p[4], fillp[PG_PAGES], x[4], i, j, found;

	ASSERT_EQ(0, kt_alloc(self->a, 4, p));
	ASSERT_EQ(0, kt_publish_chain(self->a, p, 4, KVS_NO_PAGE, 42, 0, NULL, NULL));
	ASSERT_EQ(0, kt_put(self->a, p, 4));
	STATS(st);
	EXPECT_EQ(1, st.n_evictable);
	ASSERT_EQ(PG_PAGES - 4, FILL(self->o, fillp));
	/* Only one page is evictable now, but all four are in turn. */
	ASSERT_EQ(0, kt_alloc(self->b, 4, x));
	for (i = 0; i < 4; i++) {
		found = 0;
		for (j = 0; j < 4; j++)
			found += x[j] == p[i];
		EXPECT_EQ(1, found);
	}
	STATS(st);
	EXPECT_EQ(4, st.evictions);
	COUNTS(st, 0, PG_PAGES, 0, 0);
	CHECK();
}

TEST_F(pg, evict_lru_order_among_leaves)
{
	struct kvs_publish_entry e[3];
	__u32 p[3], fillp[PG_PAGES], x, i;

	ASSERT_EQ(0, kt_alloc(self->a, 3, p));
	memset(e, 0, sizeof(e));
	for (i = 0; i < 3; i++) {
		e[i].page = p[i];
		e[i].parent = KVS_NO_PAGE;
		e[i].key = kt_key(43 + i, 0);
	}
	ASSERT_EQ(0, kt_publish(self->a, e, 3, NULL));
	/* Cached in the order p1, p0, p2. */
	ASSERT_EQ(0, kt_put1(self->a, p[1]));
	ASSERT_EQ(0, kt_put1(self->a, p[0]));
	ASSERT_EQ(0, kt_put1(self->a, p[2]));
	ASSERT_EQ(PG_PAGES - 3, FILL(self->o, fillp));
	ASSERT_EQ(0, kt_alloc(self->b, 1, &x));
	EXPECT_EQ(p[1], x);
	PAGE(p[0], KVS_PAGE_CACHED, 0);
	PAGE(p[2], KVS_PAGE_CACHED, 0);
	ASSERT_EQ(0, kt_alloc(self->b, 1, &x));
	EXPECT_EQ(p[0], x);
	ASSERT_EQ(0, kt_alloc(self->b, 1, &x));
	EXPECT_EQ(p[2], x);
	CHECK();
}

TEST_F(pg, evict_lookup_refreshes_lru)
{
	__u32 p[2], fillp[PG_PAGES], x, l, n_hit = 0;
	struct kvs_publish_entry e[2];

	ASSERT_EQ(0, kt_alloc(self->a, 2, p));
	memset(e, 0, sizeof(e));
	e[0].page = p[0];
	e[0].parent = KVS_NO_PAGE;
	e[0].key = kt_key(46, 0);
	e[1].page = p[1];
	e[1].parent = KVS_NO_PAGE;
	e[1].key = kt_key(47, 0);
	ASSERT_EQ(0, kt_publish(self->a, e, 2, NULL));
	ASSERT_EQ(0, kt_put1(self->a, p[0]));
	ASSERT_EQ(0, kt_put1(self->a, p[1]));
	/* Use p[0] again: it becomes the most recently used. */
	ASSERT_EQ(0, kt_lookup_chain(self->b, 46, 0, 1, &l, &n_hit));
	ASSERT_EQ(1, n_hit);
	ASSERT_EQ(0, kt_put1(self->b, l));
	ASSERT_EQ(PG_PAGES - 2, FILL(self->o, fillp));
	ASSERT_EQ(0, kt_alloc(self->b, 1, &x));
	EXPECT_EQ(p[1], x);
	ASSERT_EQ(0, kt_alloc(self->b, 1, &x));
	EXPECT_EQ(p[0], x);
	CHECK();
}

TEST_F(pg, evict_branch_parent_waits_for_all_children)
{
	struct kvs_pool_stats st;
	__u32 p[3], fillp[PG_PAGES], x;

	ASSERT_EQ(0, kt_alloc(self->a, 3, p));
	ASSERT_EQ(0, kt_publish_chain(self->a, p, 2, KVS_NO_PAGE, 48, 0, NULL, NULL));
	ASSERT_EQ(0, kt_publish_chain(self->a, &p[2], 1, p[0], 49, 1, NULL, NULL));
	EXPECT_EQ(2, DESC(p[0]).n_children);
	/* LRU: p1, p2, then p0 (newest, but a parent anyway). */
	ASSERT_EQ(0, kt_put1(self->a, p[1]));
	ASSERT_EQ(0, kt_put1(self->a, p[2]));
	ASSERT_EQ(0, kt_put1(self->a, p[0]));
	STATS(st);
	EXPECT_EQ(2, st.n_evictable);
	ASSERT_EQ(PG_PAGES - 3, FILL(self->o, fillp));
	ASSERT_EQ(0, kt_alloc(self->b, 1, &x));
	EXPECT_EQ(p[1], x);
	STATS(st);
	EXPECT_EQ(1, st.n_evictable);
	EXPECT_EQ(1, DESC(p[0]).n_children);
	ASSERT_EQ(0, kt_alloc(self->b, 1, &x));
	EXPECT_EQ(p[2], x);
	STATS(st);
	EXPECT_EQ(1, st.n_evictable);
	ASSERT_EQ(0, kt_alloc(self->b, 1, &x));
	EXPECT_EQ(p[0], x);
	CHECK();
}

TEST_F(pg, alloc_takes_free_pages_before_evicting)
{
	struct kvs_pool_stats st;
	struct kvs_publish_entry e[2];
	__u32 p[2], fillp[PG_PAGES], x[2];

	ASSERT_EQ(0, kt_alloc(self->a, 2, p));
	memset(e, 0, sizeof(e));
	e[0].page = p[0];
	e[0].parent = KVS_NO_PAGE;
	e[0].key = kt_key(50, 0);
	e[1].page = p[1];
	e[1].parent = KVS_NO_PAGE;
	e[1].key = kt_key(51, 0);
	ASSERT_EQ(0, kt_publish(self->a, e, 2, NULL));
	ASSERT_EQ(0, kt_put(self->a, p, 2));
	/* Leave 2 FREE pages next to the 2 CACHED ones. */
	ASSERT_EQ(0, kt_alloc(self->o, PG_PAGES - 4, fillp));
	ASSERT_EQ(0, kt_alloc(self->b, 2, x));
	EXPECT_NE(p[0], x[0]);
	EXPECT_NE(p[1], x[0]);
	EXPECT_NE(p[0], x[1]);
	EXPECT_NE(p[1], x[1]);
	STATS(st);
	EXPECT_EQ(0, st.evictions);
	COUNTS(st, 0, PG_PAGES - 2, 0, 2);
	CHECK();
}

TEST_F(pg, alloc_enospc_evicts_nothing)
{
	struct kt_snap *s = calloc(1, sizeof(*s));
	struct kt_client *cls[3] = { self->a, self->b, self->o };
	struct kvs_publish_entry e[2];
	struct kvs_pool_stats st;
	__u32 p[2], fillp[PG_PAGES], x[3], l[2], n_hit = 0;

	ASSERT_NE(NULL, s);
	ASSERT_EQ(0, kt_alloc(self->a, 2, p));
	memset(e, 0, sizeof(e));
	e[0].page = p[0];
	e[0].parent = KVS_NO_PAGE;
	e[0].key = kt_key(52, 0);
	e[1].page = p[1];
	e[1].parent = KVS_NO_PAGE;
	e[1].key = kt_key(53, 0);
	ASSERT_EQ(0, kt_publish(self->a, e, 2, NULL));
	ASSERT_EQ(0, kt_put(self->a, p, 2));
	ASSERT_EQ(PG_PAGES - 2, FILL(self->o, fillp));
	ASSERT_EQ(0, kt_snap_take(self->v, self->pool, cls, 3, s));
	EXPECT_EQ(-ENOSPC, kt_alloc(self->b, 3, x));
	kt_snap_same(_metadata, self->v, self->pool, cls, 3, s, __LINE__);
	STATS(st);
	EXPECT_EQ(1, st.alloc_fails);
	EXPECT_EQ(0, st.evictions);
	/* Both keys still there. */
	ASSERT_EQ(0, kt_lookup_chain(self->b, 52, 0, 1, &l[0], &n_hit));
	EXPECT_EQ(1, n_hit);
	ASSERT_EQ(0, kt_lookup_chain(self->b, 53, 0, 1, &l[1], &n_hit));
	EXPECT_EQ(1, n_hit);
	free(s);
	CHECK();
}

TEST_F(pg, evicted_key_can_be_published_again)
{
	__u32 p, fillp[PG_PAGES], x, q, r, n_dup = 9, l, n_hit = 0;

	ASSERT_EQ(0, kt_alloc(self->a, 1, &p));
	ASSERT_EQ(0, kt_publish_chain(self->a, &p, 1, KVS_NO_PAGE, 54, 0, NULL, NULL));
	ASSERT_EQ(0, kt_put1(self->a, p));
	ASSERT_EQ(PG_PAGES - 1, FILL(self->o, fillp));
	ASSERT_EQ(0, kt_alloc(self->b, 1, &x));
	ASSERT_EQ(p, x);
	ASSERT_EQ(0, kt_put1(self->b, x));
	ASSERT_EQ(0, kt_lookup_chain(self->a, 54, 0, 1, &l, &n_hit));
	EXPECT_EQ(0, n_hit);
	ASSERT_EQ(0, kt_alloc(self->a, 1, &q));
	ASSERT_EQ(0, kt_publish_chain(self->a, &q, 1, KVS_NO_PAGE, 54, 0, &r, &n_dup));
	EXPECT_EQ(0, n_dup);
	EXPECT_EQ(q, r);
	CHECK();
}

/* ---- Quotas ----------------------------------------------------------- */

TEST_F(pg, quota_get_and_set_bounds)
{
	__u32 max = 0, held = 9, p[5];

	ASSERT_EQ(0, kt_quota(self->a, 0, 0, &max, &held));
	EXPECT_EQ(PG_PAGES, max);	/* max_pages_per_file 0 means n_pages */
	EXPECT_EQ(0, held);
	ASSERT_EQ(0, kt_quota(self->a, 1, 4, &max, &held));
	EXPECT_EQ(4, max);
	ASSERT_EQ(0, kt_quota(self->a, 0, 0, &max, &held));
	EXPECT_EQ(4, max);
	/* Other files keep theirs. */
	ASSERT_EQ(0, kt_quota(self->b, 0, 0, &max, &held));
	EXPECT_EQ(PG_PAGES, max);

	EXPECT_EQ(-EDQUOT, kt_alloc(self->a, 5, p));
	EXPECT_EQ(0, kt_held(self->a));
	ASSERT_EQ(0, kt_alloc(self->a, 3, p));
	ASSERT_EQ(0, kt_alloc(self->a, 1, &p[3]));
	EXPECT_EQ(-EDQUOT, kt_alloc(self->a, 1, &p[4]));
	ASSERT_EQ(0, kt_quota(self->a, 0, 0, &max, &held));
	EXPECT_EQ(4, held);
	/* Below what is held, above the pool's limit: EINVAL, unchanged. */
	EXPECT_EQ(-EINVAL, kt_quota(self->a, 1, 3, NULL, NULL));
	EXPECT_EQ(-EINVAL, kt_quota(self->a, 1, PG_PAGES + 1, NULL, NULL));
	ASSERT_EQ(0, kt_quota(self->a, 0, 0, &max, &held));
	EXPECT_EQ(4, max);
	/* Exactly what is held, and raise back to the limit. */
	ASSERT_EQ(0, kt_quota(self->a, 1, 4, &max, NULL));
	ASSERT_EQ(0, kt_quota(self->a, 1, PG_PAGES, &max, NULL));
	EXPECT_EQ(PG_PAGES, max);
	ASSERT_EQ(0, kt_alloc(self->a, 1, &p[4]));
	EXPECT_EQ(5, kt_held(self->a));
	CHECK();
}

TEST_F(pg, quota_lookup_edquot_takes_nothing)
{
	struct kvs_key k[4];
	__u32 p[3], l[4], x, n_hit = 9, i;

	ASSERT_EQ(0, kt_alloc(self->a, 3, p));
	ASSERT_EQ(0, kt_publish_chain(self->a, p, 3, KVS_NO_PAGE, 60, 0, NULL, NULL));
	ASSERT_EQ(0, kt_quota(self->b, 1, 2, NULL, NULL));
	EXPECT_EQ(-EDQUOT, kt_lookup_chain(self->b, 60, 0, 3, l, &n_hit));
	for (i = 0; i < 3; i++)
		PAGE(p[i], KVS_PAGE_SHARED, 1);
	EXPECT_EQ(0, kt_held(self->b));
	/* More keys than quota, but the run fits. */
	for (i = 0; i < 4; i++)
		k[i] = kt_key(60, i == 2 ? 77 : i);
	ASSERT_EQ(0, kt_lookup(self->b, k, 4, l, &n_hit));
	EXPECT_EQ(2, n_hit);
	EXPECT_EQ(2, kt_held(self->b));
	ASSERT_EQ(0, kt_put(self->b, l, 2));
	/* OWNED pages count too. */
	ASSERT_EQ(0, kt_alloc(self->b, 1, &x));
	ASSERT_EQ(0, kt_quota(self->b, 1, 3, NULL, NULL));
	EXPECT_EQ(-EDQUOT, kt_lookup_chain(self->b, 60, 0, 3, l, &n_hit));
	EXPECT_EQ(1, kt_held(self->b));
	ASSERT_EQ(0, kt_lookup_chain(self->b, 60, 0, 2, l, &n_hit));
	EXPECT_EQ(2, n_hit);
	EXPECT_EQ(3, kt_held(self->b));
	/* A duplicate PUBLISH swaps an OWNED page for a reference: held stays. */
	ASSERT_EQ(0, kt_put1(self->b, l[1]));
	ASSERT_EQ(0, kt_publish_chain(self->b, &x, 1, l[0], 60, 1, NULL, NULL));
	EXPECT_EQ(2, kt_held(self->b));
	CHECK();
}

TEST(pool_quota_limit)
{
	struct kt_client *c, *u;
	struct kvs_pool_attach at;
	__u32 id, max = 0, p[6];

	ASSERT_EQ(0, kt_core_init());
	c = kt_new(1000, 1000, 0);
	u = kt_new(1000, 1000, 0);
	ASSERT_NE(NULL, c);
	ASSERT_NE(NULL, u);
	ASSERT_EQ(0, kt_create(c, "q5", 10, 0600, 0, 5, &id));
	memset(&at, 0, sizeof(at));
	strcpy(at.name, "q5");
	at.owner = 1000;
	ASSERT_EQ(0, kt_cmd(c, KVS_IOC_POOL_ATTACH, &at));
	EXPECT_EQ(5, at.max_pages_per_file);
	EXPECT_EQ(10, at.n_pages);
	ASSERT_EQ(0, kt_quota(c, 0, 0, &max, NULL));
	EXPECT_EQ(5, max);
	EXPECT_EQ(-EINVAL, kt_quota(c, 1, 6, NULL, NULL));
	EXPECT_EQ(-EDQUOT, kt_alloc(c, 6, p));
	ASSERT_EQ(0, kt_alloc(c, 5, p));
	EXPECT_EQ(-EDQUOT, kt_alloc(c, 1, p));
	/* Quota > n_pages at creation is EINVAL. */
	EXPECT_EQ(-EINVAL, kt_create(c, "q11", 10, 0600, 0, 11, NULL));
	ASSERT_EQ(0, kt_create(c, "q10", 10, 0600, 0, 10, NULL));
	KT_CHECK(c, 0);
	kt_core_teardown(_metadata, id);
}

/*
 * The same key in many namespaces at once, in a nearly full pool: each
 * namespace has its own page and finds only that one (the index must not
 * mix namespaces whose entries share a probe run).
 */
TEST(same_key_many_namespaces)
{
	enum { NNS = 60 };
	struct kt_client *c[NNS + 1];
	__u32 id, p[NNS], r, l, n_hit = 9, n_dup = 9, i;

	ASSERT_EQ(0, kt_core_init());
	c[0] = kt_new(1000, 1000, 0);
	ASSERT_NE(NULL, c[0]);
	ASSERT_EQ(0, kt_create(c[0], "many", 64, 0600, 0, 0, &id));
	for (i = 0; i <= NNS; i++) {
		if (i)
			c[i] = kt_new(1000, 1000, 0);
		ASSERT_NE(NULL, c[i]);
		ASSERT_EQ(0, kt_attach(c[i], "many", 1000 + i));
	}
	for (i = 0; i < NNS; i++) {
		ASSERT_EQ(0, kt_alloc(c[i], 1, &p[i]));
		ASSERT_EQ(0, kt_publish_chain(c[i], &p[i], 1, KVS_NO_PAGE, 80, 0, &r, &n_dup));
		EXPECT_EQ(0, n_dup) {
			TH_LOG("namespace %u: duplicate of page %u", 1000 + i, r);
		}
		EXPECT_EQ(p[i], r);
	}
	for (i = 0; i < NNS; i++) {
		ASSERT_EQ(0, kt_lookup_chain(c[i], 80, 0, 1, &l, &n_hit));
		ASSERT_EQ(1, n_hit);
		EXPECT_EQ(p[i], l) {
			TH_LOG("namespace %u found page %u of another namespace", 1000 + i, l);
		}
		EXPECT_EQ(1000 + i, kt_desc(c[i], 0, l).ns);
		ASSERT_EQ(0, kt_put1(c[i], l));
	}
	/* A namespace that published nothing finds nothing. */
	ASSERT_EQ(0, kt_lookup_chain(c[NNS], 80, 0, 1, &l, &n_hit));
	EXPECT_EQ(0, n_hit);
	KT_CHECK(c[0], 0);
	kt_core_teardown(_metadata, id);
}

/* ---- KVS_POOL_NS_PER_UID ---------------------------------------------- */

TEST(ns_per_uid_pool)
{
	struct kt_client *x, *y, *z, *bad;
	__u32 id, p, q, r, l, n_hit = 9, n_dup = 9;

	ASSERT_EQ(0, kt_core_init());
	x = kt_new(1000, 100, 0);
	y = kt_new(1000, 100, 0);
	z = kt_new(2000, 100, 0);
	bad = kt_new(1000, 100, 0);
	ASSERT_NE(NULL, x);
	ASSERT_NE(NULL, y);
	ASSERT_NE(NULL, z);
	ASSERT_NE(NULL, bad);
	ASSERT_EQ(0, kt_create(x, "peruid", 16, 0666, KVS_POOL_NS_PER_UID, 0, &id));
	/* ns must be 0 on such a pool. */
	EXPECT_EQ(-EINVAL, kt_attach(bad, "peruid", 5));
	EXPECT_EQ(-EBADFD, kt_alloc(bad, 1, &p));
	ASSERT_EQ(0, kt_attach(x, "peruid", 0));
	ASSERT_EQ(0, kt_attach(y, "peruid", 0));
	ASSERT_EQ(0, kt_attach(z, "peruid", 0));

	ASSERT_EQ(0, kt_alloc(x, 1, &p));
	ASSERT_EQ(0, kt_publish_chain(x, &p, 1, KVS_NO_PAGE, 70, 0, NULL, NULL));
	EXPECT_EQ(1000, kt_desc(x, 0, p).ns);
	/* Same uid: hit.  Other uid: miss. */
	ASSERT_EQ(0, kt_lookup_chain(y, 70, 0, 1, &l, &n_hit));
	ASSERT_EQ(1, n_hit);
	EXPECT_EQ(p, l);
	ASSERT_EQ(0, kt_lookup_chain(z, 70, 0, 1, &l, &n_hit));
	EXPECT_EQ(0, n_hit);
	/* Other uid publishes the same key: its own page, not a duplicate. */
	ASSERT_EQ(0, kt_alloc(z, 1, &q));
	ASSERT_EQ(0, kt_publish_chain(z, &q, 1, KVS_NO_PAGE, 70, 0, &r, &n_dup));
	EXPECT_EQ(0, n_dup);
	EXPECT_EQ(q, r);
	/* Only the pool's owner (x) sees namespaces; z's own page is no exception. */
	EXPECT_EQ(2000, kt_desc(x, 0, q).ns);
	EXPECT_EQ(0, kt_desc(z, 0, q).ns);
	EXPECT_EQ(0, kt_desc(z, 0, p).ns);
	KT_EXPECT_PAGE(x, 0, p, KVS_PAGE_SHARED, 2);
	KT_EXPECT_PAGE(x, 0, q, KVS_PAGE_SHARED, 1);
	KT_CHECK(x, 0);
	kt_core_teardown(_metadata, id);
}

TEST_HARNESS_MAIN
