// SPDX-License-Identifier: GPL-2.0
/*
 * The pool event channel (KVS_IOC_CHAN_OPEN): who may open it; a
 * PUBLISHED record holds a reference the tier gives back with PUT on the
 * channel; a LOOKUP miss claims the rest of the chain for the channel, so
 * waiting LOOKUPs see it in flight, and the channel's PUBLISH of it wakes
 * them; a full ring or the holding bound drops and counts, never failing
 * the client; closing releases everything; a destroyed pool's record
 * comes last.  Every test checks the pool invariants after each step.
 */
#include "kt.h"

#define CH_PAGES 32
#define CH_QUOTA 16
#define NS_A 7

/*
 * Pool "ch" of CH_PAGES pages, max_pages_per_file CH_QUOTA, owned by uid
 * 1000.  a, b: uid 1000, namespace NS_A; x: uid 2000; v: admin viewer.
 * t: the channel's own client, driven like a file (PUT, PUBLISH).
 */
FIXTURE(ch) {
	struct kt_client *a, *b, *x, *v, *t;
	struct kvs_chan *chan;
	__u32 pool;
};

static int chan_wakes, b_wakes;

static void count_wake(void *arg)
{
	(*(int *)arg)++;
}

static int chan_open(struct kt_client *c, __u32 pool, __u32 ring, __u32 fetch_max,
		     struct kvs_chan **out, __u32 *max_held)
{
	struct kvs_chan_open r = { .pool_id = pool, .ring = ring, .fetch_max = fetch_max };
	int ret = kvs_chan_open(&r, &c->cred, count_wake, &chan_wakes, out);

	if (!ret && max_held)
		*max_held = r.max_held;
	return ret;
}

/* A kt_client around the channel's client, not owned by the registry. */
static struct kt_client *chan_as_client(struct kvs_chan *ch)
{
	struct kt_client *c = kt_new(1000, 1000, 0);

	if (!c)
		return NULL;
	pthread_mutex_lock(&kt_reg_lock);
	kt_reg[c->slot] = NULL;
	c->slot = -1;
	pthread_mutex_unlock(&kt_reg_lock);
	kvs_client_free(c->cl);
	c->cl = kvs_chan_client(ch);
	return c;
}

static void chan_close(FIXTURE_DATA(ch) *self)
{
	if (self->t)
		free(self->t);
	self->t = NULL;
	if (self->chan)
		kvs_chan_close(self->chan);
	self->chan = NULL;
}

static struct kvs_chan_stats chan_stats(struct kvs_chan *ch)
{
	struct kvs_chan_stats st;

	memset(&st, 0, sizeof(st));
	if (kvs_chan_stats(ch, &st))
		st.pending = (__u32)-1;
	return st;
}

FIXTURE_SETUP(ch)
{
	ASSERT_EQ(0, kt_core_init());
	chan_wakes = b_wakes = 0;
	self->chan = NULL;
	self->t = NULL;
	self->v = kt_new(0, 0, 1);
	self->a = kt_new(1000, 1000, 0);
	self->b = kt_new(1000, 1000, 0);
	self->x = kt_new(2000, 2000, 0);
	ASSERT_NE(NULL, self->v);
	ASSERT_NE(NULL, self->a);
	ASSERT_NE(NULL, self->b);
	ASSERT_NE(NULL, self->x);
	kvs_client_set_waker(self->b->cl, count_wake, &b_wakes);
	ASSERT_EQ(0, kt_create(self->a, "ch", CH_PAGES, 0666, 0, CH_QUOTA, &self->pool));
	ASSERT_EQ(0, kt_attach(self->a, "ch", NS_A));
	ASSERT_EQ(0, kt_attach(self->b, "ch", NS_A));
}

FIXTURE_TEARDOWN(ch)
{
	chan_close(self);
	kt_core_teardown(_metadata, self->pool);
}

#define CHECK() KT_CHECK(self->v, self->pool)
#define OPEN(ring, fetch) do {							\
	ASSERT_EQ(0, chan_open(self->a, self->pool, (ring), (fetch), &self->chan, NULL)); \
	self->t = chan_as_client(self->chan);					\
	ASSERT_NE(NULL, self->t);						\
} while (0)

/* ALLOC n pages for @c and publish them as chain @chain from key 0. */
static int publish_chain(struct kt_client *c, __u64 chain, __u32 n, __u32 *pages)
{
	int ret = kt_alloc(c, n, pages);

	return ret ? ret : kt_publish_chain(c, pages, n, KVS_NO_PAGE, chain, 0, pages, NULL);
}

TEST_F(ch, open_rights_and_arguments)
{
	struct kvs_chan *other = NULL;
	struct kvs_chan_open r;
	__u32 max_held = 0;

	/* Another uid may read and write the pool, but not watch it. */
	ASSERT_EQ(0, kt_attach(self->x, "ch", 0));
	EXPECT_EQ(-EPERM, chan_open(self->x, self->pool, 8, 4, &other, NULL));
	EXPECT_EQ(-ENOENT, chan_open(self->a, self->pool + 100, 8, 4, &other, NULL));
	EXPECT_EQ(-ENOENT, chan_open(self->a, 0, 8, 4, &other, NULL));
	EXPECT_EQ(-EINVAL, chan_open(self->a, self->pool, 0, 4, &other, NULL));
	EXPECT_EQ(-EINVAL, chan_open(self->a, self->pool, KVS_CHAN_RING_MAX + 1, 4,
				     &other, NULL));
	EXPECT_EQ(-EINVAL, chan_open(self->a, self->pool, 8, KVS_CHAN_FETCH_MAX + 1,
				     &other, NULL));
	memset(&r, 0, sizeof(r));
	r.pool_id = self->pool;
	r.ring = 8;
	r.reserved[1] = 1;
	EXPECT_EQ(-EINVAL, kvs_chan_open(&r, &self->a->cred, NULL, NULL, &other));
	r.reserved[1] = 0;
	r.flags = 1;
	EXPECT_EQ(-EINVAL, kvs_chan_open(&r, &self->a->cred, NULL, NULL, &other));

	/* An admin may; the bound is the pool's per-file limit; one per pool. */
	ASSERT_EQ(0, chan_open(self->v, self->pool, 8, 4, &self->chan, &max_held));
	EXPECT_EQ(CH_QUOTA, max_held);
	EXPECT_EQ(-EBUSY, chan_open(self->a, self->pool, 8, 4, &other, NULL));
	CHECK();
	kvs_chan_close(self->chan);
	self->chan = NULL;
	ASSERT_EQ(0, chan_open(self->a, self->pool, 8, 4, &self->chan, NULL));
	CHECK();

	EXPECT_TRUE(kvs_chan_cmd_ok(KVS_IOC_PUT));
	EXPECT_TRUE(kvs_chan_cmd_ok(KVS_IOC_PUBLISH));
	EXPECT_FALSE(kvs_chan_cmd_ok(KVS_IOC_ALLOC));
	EXPECT_FALSE(kvs_chan_cmd_ok(KVS_IOC_LOOKUP));
	EXPECT_FALSE(kvs_chan_cmd_ok(KVS_IOC_POOL_ATTACH));
}

TEST_F(ch, published_record_holds_a_reference)
{
	struct kvs_event ev[4];
	__u32 pages[2], n;

	OPEN(8, 0);
	ASSERT_EQ(0, publish_chain(self->a, 1, 2, pages));
	EXPECT_EQ(2, chan_wakes);
	EXPECT_TRUE(kvs_chan_ready(self->chan));
	n = kvs_chan_read(self->chan, ev, 4);
	ASSERT_EQ(2, n);
	EXPECT_FALSE(kvs_chan_ready(self->chan));
	EXPECT_EQ(KVS_EVENT_PUBLISHED, ev[0].type);
	EXPECT_EQ(pages[0], ev[0].page);
	EXPECT_EQ(KVS_NO_PAGE, ev[0].parent);
	EXPECT_EQ(NS_A, ev[0].ns);
	struct kvs_key k0 = kt_key(1, 0), k1 = kt_key(1, 1);
	EXPECT_TRUE(kt_key_eq(&k0, &ev[0].key));
	EXPECT_EQ(pages[1], ev[1].page);
	EXPECT_EQ(pages[0], ev[1].parent);
	EXPECT_TRUE(kt_key_eq(&k1, &ev[1].key));
	EXPECT_EQ(2, chan_stats(self->chan).held);
	CHECK();

	/* The publisher lets go: the channel's reference keeps the page SHARED. */
	ASSERT_EQ(0, kt_put(self->a, pages, 2));
	KT_EXPECT_PAGE(self->v, self->pool, pages[0], KVS_PAGE_SHARED, 1);
	CHECK();
	/* The tier gives it back with an ordinary PUT on the channel. */
	ASSERT_EQ(0, kt_put(self->t, pages, 2));
	KT_EXPECT_PAGE(self->v, self->pool, pages[0], KVS_PAGE_CACHED, 0);
	EXPECT_EQ(-ENOENT, kt_put1(self->t, pages[0]));
	EXPECT_EQ(0, chan_stats(self->chan).held);
	EXPECT_EQ(2, chan_stats(self->chan).published);
	CHECK();
}

TEST_F(ch, miss_claims_the_rest_of_the_chain)
{
	struct kvs_event ev[8];
	struct kvs_key keys[6];
	struct kvs_publish_entry e[3];
	__u32 pages[6], n_hit = 9, i, n, last_hit;
	struct kvs_lookup l;

	OPEN(16, 3);
	ASSERT_EQ(0, publish_chain(self->a, 2, 2, pages));
	ASSERT_EQ(2, kvs_chan_read(self->chan, ev, 8));
	ASSERT_EQ(0, kt_put(self->t, (__u32[]){ ev[0].page, ev[1].page }, 2));

	/*
	 * a misses after 2 hits: keys 2, 3, 4 (fetch_max 3) go to the
	 * channel, the first record naming the last hit, which the channel
	 * holds a reference on.
	 */
	for (i = 0; i < 6; i++)
		keys[i] = kt_key(2, i);
	ASSERT_EQ(0, kt_lookup(self->a, keys, 6, pages, &n_hit));
	EXPECT_EQ(2, n_hit);
	last_hit = pages[1];
	n = kvs_chan_read(self->chan, ev, 8);
	ASSERT_EQ(3, n);
	for (i = 0; i < 3; i++) {
		EXPECT_EQ(KVS_EVENT_MISS, ev[i].type);
		EXPECT_EQ(i, ev[i].k);
		EXPECT_EQ(3, ev[i].n);
		EXPECT_EQ(NS_A, ev[i].ns);
		EXPECT_EQ(i ? KVS_NO_PAGE : last_hit, ev[i].parent);
		EXPECT_TRUE(kt_key_eq(&keys[2 + i], &ev[i].key));
		KT_EXPECT_PAGE(self->v, self->pool, ev[i].page, KVS_PAGE_OWNED, 0);
	}
	/* a's publish and hit, and the channel's. */
	KT_EXPECT_PAGE(self->v, self->pool, last_hit, KVS_PAGE_SHARED, 3);
	EXPECT_EQ(4, chan_stats(self->chan).held);
	CHECK();

	/* b waits: the claimed keys are in flight, and no second miss. */
	memset(&l, 0, sizeof(l));
	l.count = 4;
	l.flags = KVS_LOOKUP_WAIT;
	l.keys = KT_PTR(&keys[2]);
	l.pages = KT_PTR(pages);
	ASSERT_EQ(0, kt_cmd(self->b, KVS_IOC_LOOKUP, &l));
	EXPECT_EQ(0, l.n_hit);
	EXPECT_EQ(3, l.n_inflight);
	EXPECT_TRUE(kvs_client_waiting(self->b->cl));
	EXPECT_FALSE(kvs_chan_ready(self->chan));
	CHECK();

	/*
	 * The tier fetched them: PUBLISH on the channel, in the claims'
	 * namespace, under the last hit as a's compute would have.
	 */
	memset(e, 0, sizeof(e));
	for (i = 0; i < 3; i++) {
		e[i].page = ev[i].page;
		e[i].parent = i ? KVS_PARENT_PREV : ev[0].parent;
		e[i].key = ev[i].key;
	}
	ASSERT_EQ(0, kt_publish(self->t, e, 3, NULL));
	EXPECT_EQ(1, b_wakes);
	EXPECT_FALSE(kvs_client_waiting(self->b->cl));
	/* Its own publish is no record for it. */
	EXPECT_FALSE(kvs_chan_ready(self->chan));
	EXPECT_EQ(last_hit, kt_desc(self->v, self->pool, e[0].result).parent);
	EXPECT_EQ(1, kt_desc(self->v, self->pool, last_hit).n_children);
	ASSERT_EQ(0, kt_put(self->t, (__u32[]){ e[0].result, e[1].result, e[2].result,
						last_hit }, 4));
	EXPECT_EQ(0, chan_stats(self->chan).held);
	KT_EXPECT_PAGE(self->v, self->pool, last_hit, KVS_PAGE_SHARED, 2);
	ASSERT_EQ(0, kt_lookup(self->b, keys, 5, pages, &n_hit));
	EXPECT_EQ(5, n_hit);
	EXPECT_EQ(3, chan_stats(self->chan).missed);
	CHECK();
}

/*
 * A tier whose store has nothing PUTs the claims: the LOOKUPs that woke
 * then see nothing in flight (they compute), and a miss of the same key
 * makes no new claim for KVS_CHAN_NEG_MS.  The record names the uid
 * whose LOOKUP missed.
 */
TEST_F(ch, put_claims_are_not_claimed_again_at_once)
{
	struct kvs_event ev[8];
	struct kvs_key keys[3];
	__u32 pages[3], n_hit = 9, i;
	struct kvs_lookup l;

	OPEN(16, 3);
	for (i = 0; i < 3; i++)
		keys[i] = kt_key(4, i);
	ASSERT_EQ(0, kt_lookup(self->a, keys, 3, pages, &n_hit));
	EXPECT_EQ(0, n_hit);
	ASSERT_EQ(3, kvs_chan_read(self->chan, ev, 8));
	for (i = 0; i < 3; i++)
		EXPECT_EQ(1000, ev[i].uid);

	memset(&l, 0, sizeof(l));
	l.count = 3;
	l.flags = KVS_LOOKUP_WAIT;
	l.keys = KT_PTR(keys);
	l.pages = KT_PTR(pages);
	ASSERT_EQ(0, kt_cmd(self->b, KVS_IOC_LOOKUP, &l));
	EXPECT_EQ(3, l.n_inflight);
	ASSERT_EQ(0, kt_put(self->t, (__u32[]){ ev[0].page, ev[1].page, ev[2].page }, 3));
	EXPECT_EQ(1, b_wakes);
	EXPECT_EQ(0, chan_stats(self->chan).held);

	/* Woken, b looks again: nothing in flight, no new record. */
	l.n_hit = l.n_inflight = 0;
	ASSERT_EQ(0, kt_cmd(self->b, KVS_IOC_LOOKUP, &l));
	EXPECT_EQ(0, l.n_hit);
	EXPECT_EQ(0, l.n_inflight);
	EXPECT_FALSE(kvs_chan_ready(self->chan));
	EXPECT_EQ(0, chan_stats(self->chan).held);
	/*
	 * Another key still misses into the channel.  Its w[2] is moved off
	 * kt_key()'s pattern: the negative memory's tag is w[0] ^ w[2] ^ ns,
	 * the same for every kt_key(), so a key of that pattern that fell in
	 * one of the three put keys' slots (3 runs in 1,024: the slot is
	 * seeded per pool) was taken for the put key.  Keys that are hashes
	 * differ there.
	 */
	keys[0] = kt_key(5, 0);
	keys[0].w[2] ^= 0x5a5a5a5a00000000ull;
	ASSERT_EQ(0, kt_lookup(self->a, keys, 1, pages, &n_hit));
	EXPECT_TRUE(kvs_chan_ready(self->chan));
	CHECK();
}

TEST_F(ch, full_ring_drops_and_counts)
{
	struct kvs_event ev[8];
	struct kvs_chan_stats st;
	__u32 pages[6];

	OPEN(2, 4);
	/* Six publishes into a ring of two: every call succeeds. */
	ASSERT_EQ(0, publish_chain(self->a, 3, 6, pages));
	st = chan_stats(self->chan);
	EXPECT_EQ(2, st.pending);
	EXPECT_EQ(2, st.published);
	EXPECT_EQ(4, st.dropped_full);
	EXPECT_EQ(2, st.held);
	ASSERT_EQ(1, kvs_chan_read(self->chan, ev, 1));
	EXPECT_EQ(pages[0], ev[0].page);
	/* A miss of three keys needs three slots, not one: dropped whole. */
	ASSERT_EQ(0, kt_lookup_chain(self->b, 4, 0, 3, pages + 2, NULL));
	st = chan_stats(self->chan);
	EXPECT_EQ(5, st.dropped_full);
	EXPECT_EQ(0, st.missed);
	EXPECT_EQ(2, st.held);
	CHECK();
	ASSERT_EQ(1, kvs_chan_read(self->chan, ev, 8));
	EXPECT_EQ(pages[1], ev[0].page);
	/* Room for two of a miss's three keys would now do: two are claimed. */
	ASSERT_EQ(0, kt_lookup_chain(self->b, 4, 0, 2, pages + 2, NULL));
	st = chan_stats(self->chan);
	EXPECT_EQ(2, st.missed);
	EXPECT_EQ(4, st.held);
	CHECK();
}

TEST_F(ch, holding_bound_drops_and_counts)
{
	struct kvs_chan_stats st;
	__u32 pages[CH_QUOTA + 4];

	OPEN(64, 8);
	/* CH_QUOTA references fill the channel's bound; the rest are dropped. */
	ASSERT_EQ(0, publish_chain(self->a, 5, CH_QUOTA, pages));
	ASSERT_EQ(0, kt_put(self->a, pages, CH_QUOTA));
	ASSERT_EQ(0, publish_chain(self->b, 6, 4, pages));
	st = chan_stats(self->chan);
	EXPECT_EQ(CH_QUOTA, st.held);
	EXPECT_EQ(CH_QUOTA, st.published);
	EXPECT_EQ(4, st.dropped_held);
	/* A miss past the bound claims nothing. */
	ASSERT_EQ(0, kt_lookup_chain(self->b, 7, 0, 2, pages, NULL));
	st = chan_stats(self->chan);
	EXPECT_EQ(5, st.dropped_held);
	EXPECT_EQ(0, st.missed);
	CHECK();
}

/* A miss whose claims fill the bound: no room for its parent's reference, a root. */
TEST_F(ch, miss_at_the_bound_names_no_parent)
{
	struct kvs_event ev[CH_QUOTA + 2];
	__u32 pages[CH_QUOTA], n_hit = 9, i, n;

	OPEN(CH_QUOTA + 2, 2);
	/* The channel holds CH_QUOTA - 2 references: two of chain 12, the rest singles. */
	ASSERT_EQ(0, publish_chain(self->a, 12, 2, pages));
	ASSERT_EQ(0, kt_put(self->a, pages, 2));
	for (i = 0; i < CH_QUOTA - 4; i++) {
		ASSERT_EQ(0, publish_chain(self->a, 100 + i, 1, pages));
		ASSERT_EQ(0, kt_put(self->a, pages, 1));
	}
	EXPECT_EQ(CH_QUOTA - 2, chan_stats(self->chan).held);
	ASSERT_EQ(CH_QUOTA - 2, kvs_chan_read(self->chan, ev, CH_QUOTA + 2));

	ASSERT_EQ(0, kt_lookup_chain(self->a, 12, 0, 4, pages, &n_hit));
	EXPECT_EQ(2, n_hit);
	n = kvs_chan_read(self->chan, ev, CH_QUOTA + 2);
	ASSERT_EQ(2, n);
	for (i = 0; i < n; i++) {
		EXPECT_EQ(KVS_EVENT_MISS, ev[i].type);
		EXPECT_EQ(KVS_NO_PAGE, ev[i].parent);
	}
	EXPECT_EQ(CH_QUOTA, chan_stats(self->chan).held);
	EXPECT_EQ(0, chan_stats(self->chan).dropped_held);
	/* The channel's reference of its PUBLISHED record and a's hit: no third. */
	KT_EXPECT_PAGE(self->v, self->pool, pages[1], KVS_PAGE_SHARED, 2);
	CHECK();
}

TEST_F(ch, close_releases_references_and_claims)
{
	struct kvs_pool_stats st;
	struct kvs_lookup l;
	struct kvs_key keys[4];
	__u32 pages[4], i;

	OPEN(16, 4);
	ASSERT_EQ(0, publish_chain(self->a, 8, 2, pages));
	ASSERT_EQ(0, kt_put(self->a, pages, 2));
	for (i = 0; i < 4; i++)
		keys[i] = kt_key(9, i);
	ASSERT_EQ(0, kt_lookup(self->a, keys, 4, pages, NULL));
	EXPECT_EQ(6, chan_stats(self->chan).held);
	memset(&l, 0, sizeof(l));
	l.count = 4;
	l.flags = KVS_LOOKUP_WAIT;
	l.keys = KT_PTR(keys);
	l.pages = KT_PTR(pages);
	ASSERT_EQ(0, kt_cmd(self->b, KVS_IOC_LOOKUP, &l));
	EXPECT_EQ(4, l.n_inflight);
	CHECK();

	/* Never read: closing gives back both references and all four claims. */
	chan_close(self);
	EXPECT_EQ(1, b_wakes);
	EXPECT_FALSE(kvs_client_waiting(self->b->cl));
	ASSERT_EQ(0, kt_stats(self->v, self->pool, KVS_STATS_CHECK, &st));
	EXPECT_EQ(0, st.n_owned);
	EXPECT_EQ(0, st.n_claimed);
	EXPECT_EQ(0, st.n_refs);
	EXPECT_EQ(2, st.n_files);
	CHECK();
	/* And the pool takes a new channel. */
	OPEN(4, 0);
	CHECK();
}

TEST_F(ch, pool_gone_is_the_last_record)
{
	struct kvs_event ev[4];
	__u32 pages[2];

	OPEN(1, 0);
	ASSERT_EQ(0, publish_chain(self->a, 10, 2, pages));
	ASSERT_EQ(0, kt_destroy(self->a, self->pool));
	/* After the destroy, attached files go on; the channel records nothing. */
	ASSERT_EQ(0, kt_put(self->a, pages, 2));
	ASSERT_EQ(0, publish_chain(self->a, 11, 1, pages));
	ASSERT_EQ(2, kvs_chan_read(self->chan, ev, 4));
	EXPECT_EQ(KVS_EVENT_PUBLISHED, ev[0].type);
	EXPECT_EQ(KVS_EVENT_POOL_GONE, ev[1].type);
	EXPECT_EQ(0, kvs_chan_read(self->chan, ev, 4));
	EXPECT_FALSE(kvs_chan_ready(self->chan));
	EXPECT_EQ(1, chan_stats(self->chan).dropped_full);
	/* The pool has no id any more: the teardown checks what it can. */
	self->pool = 0;
}

TEST_HARNESS_MAIN
