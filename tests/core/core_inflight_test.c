// SPDX-License-Identifier: GPL-2.0
/*
 * In-flight dedupe (KVS_ALLOC_CLAIM, KVS_LOOKUP_WAIT): a claimed key is
 * reported in flight to other files of its namespace, which wait on it;
 * the wait ends, exactly once and with a wake, when the claim ends by
 * PUBLISH, PUT, the owner's release, another key published on the page or
 * the key published by someone else; a claim times out; claims are bounded
 * by quotas.  Every test checks the pool invariants after each step.
 */
#include "kt.h"

#define IF_PAGES 16
#define NS_A 7
#define NS_O 8

/*
 * One pool "if" of IF_PAGES pages owned by uid 1000.
 *   a, b, c: uid 1000, namespace NS_A.   o: namespace NS_O.
 *   v: admin viewer.
 * Each attached client counts the wakes it gets in wakes[].
 */
FIXTURE(inf) {
	struct kt_client *a, *b, *c, *o, *v;
	__u32 pool;
};

static int wakes[4];

static void count_wake(void *arg)
{
	(*(int *)arg)++;
}

FIXTURE_SETUP(inf)
{
	ASSERT_EQ(0, kt_core_init());
	memset(wakes, 0, sizeof(wakes));
	self->v = kt_new(0, 0, 1);
	self->a = kt_new(1000, 1000, 0);
	self->b = kt_new(1000, 1000, 0);
	self->c = kt_new(1000, 1000, 0);
	self->o = kt_new(1000, 1000, 0);
	ASSERT_NE(NULL, self->v);
	ASSERT_NE(NULL, self->a);
	ASSERT_NE(NULL, self->b);
	ASSERT_NE(NULL, self->c);
	ASSERT_NE(NULL, self->o);
	kvs_client_set_waker(self->a->cl, count_wake, &wakes[0]);
	kvs_client_set_waker(self->b->cl, count_wake, &wakes[1]);
	kvs_client_set_waker(self->c->cl, count_wake, &wakes[2]);
	kvs_client_set_waker(self->o->cl, count_wake, &wakes[3]);
	ASSERT_EQ(0, kt_create(self->a, "if", IF_PAGES, 0600, 0, 0, &self->pool));
	ASSERT_EQ(0, kt_attach(self->a, "if", NS_A));
	ASSERT_EQ(0, kt_attach(self->b, "if", NS_A));
	ASSERT_EQ(0, kt_attach(self->c, "if", NS_A));
	ASSERT_EQ(0, kt_attach(self->o, "if", NS_O));
}

FIXTURE_TEARDOWN(inf)
{
	kt_core_teardown(_metadata, self->pool);
}

#define CHECK() KT_CHECK(self->v, self->pool)
#define STATS(st) KT_CHECK_ST(self->v, self->pool, &(st))

/* ALLOC @n pages claimed under kt_key(chain, first + i). */
static int claim_chain(struct kt_client *c, __u64 chain, __u64 first, __u32 n,
		       __u32 *pages)
{
	struct kvs_key k[64];
	struct kvs_alloc a = { .count = n, .flags = KVS_ALLOC_CLAIM,
			       .pages = KT_PTR(pages), .keys = KT_PTR(k) };
	__u32 i;

	for (i = 0; i < n; i++)
		k[i] = kt_key(chain, first + i);
	return kt_cmd(c, KVS_IOC_ALLOC, &a);
}

/* LOOKUP with KVS_LOOKUP_WAIT of kt_key(chain, first .. first + n - 1). */
static int wait_chain(struct kt_client *c, __u64 chain, __u64 first, __u32 n,
		      __u32 *pages, __u32 *n_hit, __u32 *n_inflight)
{
	struct kvs_key k[64];
	struct kvs_lookup l = { .count = n, .flags = KVS_LOOKUP_WAIT,
				.keys = KT_PTR(k), .pages = KT_PTR(pages) };
	__u32 i;
	int ret;

	for (i = 0; i < n; i++)
		k[i] = kt_key(chain, first + i);
	ret = kt_cmd(c, KVS_IOC_LOOKUP, &l);
	*n_hit = l.n_hit;
	*n_inflight = l.n_inflight;
	return ret;
}

static __u64 n_claimed(struct __test_metadata *_metadata, FIXTURE_DATA(inf) *self)
{
	struct kvs_pool_stats st;

	STATS(st);
	return st.n_claimed;
}

#define CLAIMED() n_claimed(_metadata, self)

TEST_F(inf, publish_ends_the_wait_with_a_hit)
{
	__u32 p[4], q[4], hit, inf;

	ASSERT_EQ(0, claim_chain(self->a, 1, 0, 4, p));
	EXPECT_EQ(4, CLAIMED());
	ASSERT_EQ(0, wait_chain(self->b, 1, 0, 4, q, &hit, &inf));
	EXPECT_EQ(0, hit);
	EXPECT_EQ(4, inf);
	EXPECT_TRUE(kvs_client_waiting(self->b->cl));
	CHECK();
	/* Without the flag a claimed key is a plain miss, and no wait. */
	ASSERT_EQ(0, kt_lookup_chain(self->c, 1, 0, 4, q, &hit));
	EXPECT_EQ(0, hit);
	EXPECT_FALSE(kvs_client_waiting(self->c->cl));

	/* The first page published: b's wait (on key 0) ends, once. */
	ASSERT_EQ(0, kt_publish_chain(self->a, p, 1, KVS_NO_PAGE, 1, 0, NULL, NULL));
	EXPECT_EQ(1, wakes[1]);
	EXPECT_EQ(0, wakes[2]);
	EXPECT_FALSE(kvs_client_waiting(self->b->cl));
	EXPECT_EQ(3, CLAIMED());
	CHECK();
	ASSERT_EQ(0, wait_chain(self->b, 1, 0, 4, q, &hit, &inf));
	EXPECT_EQ(1, hit);
	EXPECT_EQ(p[0], q[0]);
	EXPECT_EQ(3, inf);
	CHECK();
	ASSERT_EQ(0, kt_publish_chain(self->a, p + 1, 3, p[0], 1, 1, NULL, NULL));
	EXPECT_EQ(2, wakes[1]);
	EXPECT_EQ(0, CLAIMED());
	ASSERT_EQ(0, wait_chain(self->b, 1, 1, 3, q + 1, &hit, &inf));
	EXPECT_EQ(3, hit);
	EXPECT_EQ(0, inf);
	EXPECT_EQ(0, memcmp(p, q, sizeof(p)));
	EXPECT_FALSE(kvs_client_waiting(self->b->cl));
	CHECK();
}

TEST_F(inf, owner_put_is_a_miss_and_the_waiter_claims)
{
	__u32 p[2], q[2], hit, inf;

	ASSERT_EQ(0, claim_chain(self->a, 2, 0, 2, p));
	ASSERT_EQ(0, wait_chain(self->b, 2, 0, 2, q, &hit, &inf));
	EXPECT_EQ(2, inf);
	ASSERT_EQ(0, kt_put(self->a, p, 2));
	EXPECT_EQ(1, wakes[1]);
	EXPECT_EQ(0, CLAIMED());
	CHECK();
	ASSERT_EQ(0, wait_chain(self->b, 2, 0, 2, q, &hit, &inf));
	EXPECT_EQ(0, hit);
	EXPECT_EQ(0, inf);
	ASSERT_EQ(0, claim_chain(self->b, 2, 0, 2, q));
	EXPECT_EQ(2, CLAIMED());
	CHECK();
}

TEST_F(inf, owner_death_wakes_at_once)
{
	__u32 p[3], q[3], hit, inf;

	ASSERT_EQ(0, claim_chain(self->a, 3, 0, 3, p));
	ASSERT_EQ(0, wait_chain(self->b, 3, 0, 3, q, &hit, &inf));
	ASSERT_EQ(0, wait_chain(self->c, 3, 1, 2, q, &hit, &inf));
	EXPECT_EQ(2, inf);
	kt_free(self->a);
	self->a = NULL;
	EXPECT_EQ(1, wakes[1]);
	EXPECT_EQ(1, wakes[2]);
	EXPECT_FALSE(kvs_client_waiting(self->b->cl));
	EXPECT_FALSE(kvs_client_waiting(self->c->cl));
	EXPECT_EQ(0, CLAIMED());
	CHECK();
	ASSERT_EQ(0, wait_chain(self->b, 3, 0, 3, q, &hit, &inf));
	EXPECT_EQ(0, hit + inf);
}

TEST_F(inf, claim_times_out_and_is_taken_over)
{
	__u32 p, q, r, hit, inf, dup;

	kvs_core_set_claim_timeout(50);
	ASSERT_EQ(0, claim_chain(self->a, 4, 0, 1, &p));
	ASSERT_EQ(0, wait_chain(self->b, 4, 0, 1, &q, &hit, &inf));
	EXPECT_EQ(1, inf);
	EXPECT_EQ(-EEXIST, claim_chain(self->b, 4, 0, 1, &q));
	usleep(80 * 1000);
	/* Stalled past the timeout: a miss; the expiry itself wakes nobody. */
	EXPECT_EQ(0, wakes[1]);
	ASSERT_EQ(0, wait_chain(self->b, 4, 0, 1, &q, &hit, &inf));
	EXPECT_EQ(0, hit);
	EXPECT_EQ(0, inf);
	ASSERT_EQ(0, wait_chain(self->c, 4, 0, 1, &r, &hit, &inf));
	EXPECT_EQ(0, inf);
	ASSERT_EQ(0, claim_chain(self->b, 4, 0, 1, &q));
	EXPECT_EQ(1, CLAIMED());
	CHECK();
	/* The stalled owner publishes at last: first to publish wins. */
	ASSERT_EQ(0, kt_publish_chain(self->a, &p, 1, KVS_NO_PAGE, 4, 0, &r, &dup));
	EXPECT_EQ(0, dup);
	EXPECT_EQ(p, r);
	EXPECT_EQ(0, CLAIMED());
	CHECK();
	ASSERT_EQ(0, kt_publish_chain(self->b, &q, 1, KVS_NO_PAGE, 4, 0, &r, &dup));
	EXPECT_EQ(1, dup);
	EXPECT_EQ(p, r);
	CHECK();
	/* Timeout 0: claims are never reported in flight. */
	kvs_core_set_claim_timeout(0);
	ASSERT_EQ(0, claim_chain(self->a, 5, 0, 1, &p));
	ASSERT_EQ(0, wait_chain(self->b, 5, 0, 1, &q, &hit, &inf));
	EXPECT_EQ(0, inf);
	CHECK();
}

TEST_F(inf, namespaces_do_not_see_each_others_claims)
{
	__u32 p, q, hit, inf;

	ASSERT_EQ(0, claim_chain(self->o, 6, 0, 1, &p));
	ASSERT_EQ(0, wait_chain(self->a, 6, 0, 1, &q, &hit, &inf));
	EXPECT_EQ(0, inf);
	EXPECT_FALSE(kvs_client_waiting(self->a->cl));
	ASSERT_EQ(0, claim_chain(self->a, 6, 0, 1, &q));
	EXPECT_EQ(2, CLAIMED());
	ASSERT_EQ(0, kt_publish_chain(self->o, &p, 1, KVS_NO_PAGE, 6, 0, NULL, NULL));
	EXPECT_EQ(1, CLAIMED());
	CHECK();
}

TEST_F(inf, claims_conflict_with_existing_keys)
{
	struct kvs_pool_stats before, after;
	__u32 p[2], q[2], hit, inf;

	ASSERT_EQ(0, claim_chain(self->a, 7, 0, 1, p));
	STATS(before);
	/* In flight elsewhere, in flight here, or published: EEXIST, no change. */
	EXPECT_EQ(-EEXIST, claim_chain(self->b, 7, 0, 2, q));
	EXPECT_EQ(-EEXIST, claim_chain(self->a, 7, 0, 1, q));
	STATS(after);
	EXPECT_EQ(before.n_free, after.n_free);
	EXPECT_EQ(before.n_owned, after.n_owned);
	EXPECT_EQ(1, after.n_claimed);
	ASSERT_EQ(0, kt_publish_chain(self->a, p, 1, KVS_NO_PAGE, 7, 0, NULL, NULL));
	EXPECT_EQ(-EEXIST, claim_chain(self->b, 7, 0, 1, q));
	/* A file never waits on its own claim. */
	ASSERT_EQ(0, claim_chain(self->a, 8, 0, 1, p));
	ASSERT_EQ(0, wait_chain(self->a, 8, 0, 1, q, &hit, &inf));
	EXPECT_EQ(0, inf);
	CHECK();
}

TEST_F(inf, key_listed_twice_is_claimed_once)
{
	struct kvs_key k[2] = { kt_key(9, 0), kt_key(9, 0) };
	struct kvs_alloc a = { .count = 2, .flags = KVS_ALLOC_CLAIM, .keys = KT_PTR(k) };
	__u32 p[2];

	a.pages = KT_PTR(p);
	ASSERT_EQ(0, kt_cmd(self->a, KVS_IOC_ALLOC, &a));
	EXPECT_EQ(1, CLAIMED());
	CHECK();
	ASSERT_EQ(0, kt_put(self->a, p, 2));
	EXPECT_EQ(0, CLAIMED());
	CHECK();
}

TEST_F(inf, claims_are_bounded_by_the_quota)
{
	__u32 p[IF_PAGES];

	ASSERT_EQ(0, kt_quota(self->b, 1, 2, NULL, NULL));
	EXPECT_EQ(-EDQUOT, claim_chain(self->b, 10, 0, 3, p));
	EXPECT_EQ(0, CLAIMED());
	ASSERT_EQ(0, claim_chain(self->b, 10, 0, 2, p));
	EXPECT_EQ(2, CLAIMED());
	/* Pages in flight are owned pages: the pool's size bounds them too. */
	EXPECT_EQ(-ENOSPC, claim_chain(self->a, 11, 0, IF_PAGES - 1, p));
	EXPECT_EQ(2, CLAIMED());
	CHECK();
}

TEST_F(inf, publish_elsewhere_or_under_another_key_ends_the_claim)
{
	__u32 p, q, r, s, hit, inf, dup;

	/* c publishes the key a has in flight: a's claim ends, b is woken. */
	ASSERT_EQ(0, claim_chain(self->a, 12, 0, 1, &p));
	ASSERT_EQ(0, wait_chain(self->b, 12, 0, 1, &q, &hit, &inf));
	ASSERT_EQ(0, kt_alloc(self->c, 1, &r));
	ASSERT_EQ(0, kt_publish_chain(self->c, &r, 1, KVS_NO_PAGE, 12, 0, &s, &dup));
	EXPECT_EQ(0, dup);
	EXPECT_EQ(1, wakes[1]);
	EXPECT_EQ(0, CLAIMED());
	CHECK();
	ASSERT_EQ(0, wait_chain(self->b, 12, 0, 1, &q, &hit, &inf));
	EXPECT_EQ(1, hit);
	EXPECT_EQ(r, q);
	ASSERT_EQ(0, kt_publish_chain(self->a, &p, 1, KVS_NO_PAGE, 12, 0, &s, &dup));
	EXPECT_EQ(1, dup);
	EXPECT_EQ(r, s);
	CHECK();

	/* a publishes its claimed page under another key: a miss for b. */
	ASSERT_EQ(0, claim_chain(self->a, 13, 0, 1, &p));
	ASSERT_EQ(0, wait_chain(self->b, 13, 0, 1, &q, &hit, &inf));
	EXPECT_EQ(1, inf);
	ASSERT_EQ(0, kt_publish_chain(self->a, &p, 1, KVS_NO_PAGE, 14, 0, NULL, NULL));
	EXPECT_EQ(2, wakes[1]);
	ASSERT_EQ(0, wait_chain(self->b, 13, 0, 1, &q, &hit, &inf));
	EXPECT_EQ(0, hit + inf);
	CHECK();
}

TEST_F(inf, every_lookup_disarms_the_wait)
{
	__u32 p, q, hit, inf;

	ASSERT_EQ(0, claim_chain(self->a, 15, 0, 1, &p));
	ASSERT_EQ(0, wait_chain(self->b, 15, 0, 1, &q, &hit, &inf));
	EXPECT_TRUE(kvs_client_waiting(self->b->cl));
	ASSERT_EQ(0, kt_lookup_chain(self->b, 15, 0, 1, &q, &hit));
	EXPECT_FALSE(kvs_client_waiting(self->b->cl));
	ASSERT_EQ(0, kt_publish_chain(self->a, &p, 1, KVS_NO_PAGE, 15, 0, NULL, NULL));
	EXPECT_EQ(0, wakes[1]);
	CHECK();
}

TEST_F(inf, bad_claims)
{
	struct kvs_key k = kt_key(16, 0);
	struct kvs_alloc a = { .count = 1, .flags = KVS_ALLOC_CLAIM };
	__u32 p;

	a.pages = KT_PTR(&p);
	EXPECT_EQ(-EFAULT, kt_cmd(self->a, KVS_IOC_ALLOC, &a));
	a.keys = KT_BAD;
	EXPECT_EQ(-EFAULT, kt_cmd(self->a, KVS_IOC_ALLOC, &a));
	a.keys = KT_PTR(&k);
	a.flags = 0;
	EXPECT_EQ(-EINVAL, kt_cmd(self->a, KVS_IOC_ALLOC, &a));
	a.flags = KVS_ALLOC_VALID << 1;
	EXPECT_EQ(-EINVAL, kt_cmd(self->a, KVS_IOC_ALLOC, &a));
	EXPECT_EQ(0, CLAIMED());
	CHECK();
}

TEST_HARNESS_MAIN

/* wait_chain() arming the parked wait (the module's io_uring LOOKUP). */
static int park_chain(struct kt_client *c, __u64 chain, __u64 first, __u32 n,
		      __u32 *pages, __u32 *n_hit, __u32 *n_inflight, __u32 *park_ms)
{
	int ret;

	c->call.park = 1;
	c->call.park_ms = ~0u;
	ret = wait_chain(c, chain, first, n, pages, n_hit, n_inflight);
	c->call.park = 0;
	*park_ms = c->call.park_ms;
	return ret;
}

TEST_F(inf, parked_wait_is_a_second_wait)
{
	__u32 p[2], q[2], hit, inf, ms;

	kvs_core_set_claim_timeout(5000);
	ASSERT_EQ(0, claim_chain(self->a, 17, 0, 2, p));
	ASSERT_EQ(0, park_chain(self->b, 17, 0, 2, q, &hit, &inf, &ms));
	EXPECT_EQ(0, hit);
	EXPECT_EQ(2, inf);
	/* What is left of the claim's life, not more. */
	EXPECT_GT(ms, 0);
	EXPECT_LE(ms, 5000);
	EXPECT_TRUE(kvs_client_parked(self->b->cl));
	EXPECT_FALSE(kvs_client_waiting(self->b->cl));
	CHECK();
	/* The poll wait comes and goes without touching the parked one. */
	ASSERT_EQ(0, wait_chain(self->b, 17, 0, 2, q, &hit, &inf));
	EXPECT_TRUE(kvs_client_waiting(self->b->cl));
	ASSERT_EQ(0, kt_lookup_chain(self->b, 17, 0, 2, q, &hit));
	EXPECT_FALSE(kvs_client_waiting(self->b->cl));
	EXPECT_TRUE(kvs_client_parked(self->b->cl));
	ASSERT_EQ(0, wait_chain(self->b, 17, 0, 2, q, &hit, &inf));
	CHECK();
	/* The claim ends: both cleared, and one wake for the two. */
	ASSERT_EQ(0, kt_publish_chain(self->a, p, 1, KVS_NO_PAGE, 17, 0, NULL, NULL));
	EXPECT_EQ(1, wakes[1]);
	EXPECT_FALSE(kvs_client_parked(self->b->cl));
	EXPECT_FALSE(kvs_client_waiting(self->b->cl));
	CHECK();
	/* Parked again on the next key; the host gives up: disarmed, no wake. */
	ASSERT_EQ(0, park_chain(self->b, 17, 0, 2, q, &hit, &inf, &ms));
	EXPECT_EQ(1, hit);
	EXPECT_EQ(1, inf);
	EXPECT_TRUE(kvs_client_parked(self->b->cl));
	kvs_client_unpark(self->b->cl);
	EXPECT_FALSE(kvs_client_parked(self->b->cl));
	CHECK();
	ASSERT_EQ(0, kt_put(self->a, p + 1, 1));
	EXPECT_EQ(1, wakes[1]);
	CHECK();
	kvs_core_set_claim_timeout(KVS_CLAIM_TIMEOUT_MS);
}

TEST_F(inf, parked_wait_ends_with_its_owner_or_its_file)
{
	__u32 p, q, hit, inf, ms;

	ASSERT_EQ(0, claim_chain(self->a, 18, 0, 1, &p));
	ASSERT_EQ(0, park_chain(self->b, 18, 0, 1, &q, &hit, &inf, &ms));
	ASSERT_EQ(0, park_chain(self->c, 18, 0, 1, &q, &hit, &inf, &ms));
	EXPECT_TRUE(kvs_client_parked(self->c->cl));
	/* The waiter's file goes: its parked wait no longer counts. */
	kt_free(self->c);
	self->c = NULL;
	CHECK();
	/* The owner's goes: the other waiter is woken at once. */
	kt_free(self->a);
	self->a = NULL;
	EXPECT_EQ(1, wakes[1]);
	EXPECT_FALSE(kvs_client_parked(self->b->cl));
	CHECK();
	/* No park without a claim in flight. */
	ASSERT_EQ(0, park_chain(self->b, 18, 0, 1, &q, &hit, &inf, &ms));
	EXPECT_EQ(0, inf);
	EXPECT_EQ(~0u, ms);
	EXPECT_FALSE(kvs_client_parked(self->b->cl));
	CHECK();
}
