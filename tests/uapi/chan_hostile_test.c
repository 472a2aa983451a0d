// SPDX-License-Identifier: GPL-2.0
/*
 * The pool event channel of kvshare.ko under hostile or unlucky holders,
 * beyond chan_test's cases (a holder killed before it read anything, a
 * full ring of a channel nobody reads, uid 65534 on root's pool):
 *
 *  - a client killed while it waits (KVS_LOOKUP_WAIT) on keys the channel
 *    claimed: the claims stay the channel's, the other waiters still wake
 *    when the tier publishes or gives them back;
 *  - the holder killed mid-fetch, blocked in read(2), after it read its
 *    records, published part of its claims and gave back part of its
 *    references: everything else goes at once, and the keys it held are
 *    free to compute;
 *  - a full ring, or a channel at its holding bound (max_held), drops a
 *    miss whole: the client's LOOKUP sees nothing in flight and computes,
 *    it never waits on a claim that was never made;
 *  - a user of the pool (read and write in its mode) of another uid than
 *    the owner is refused (EPERM); the owner and an admin are not.
 *
 * Each test ends with the pool's references and claims (n_refs,
 * n_claimed) back to zero, the invariants checked and the arbiter's
 * objects (INFO's n_objects) back to the baseline; the guest's rmmod at
 * the end proves the module's own count came back too.
 */
#include "kvs_test.h"
#include "kvs_chan.h"

/* Read exactly @n records from channel @fd (blocking), 0 or -1. */
static int chan_read_n(int fd, struct kvs_event *ev, __u32 n)
{
	__u32 got = 0;

	while (got < n) {
		ssize_t r = read(fd, ev + got, (n - got) * sizeof(*ev));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0 || r % sizeof(*ev))
			return -1;
		got += r / sizeof(*ev);
	}
	return 0;
}

static void pool_stats(struct __test_metadata *_metadata, struct kvs_conn *ctl,
		       __u32 pool, struct kvs_pool_stats *st)
{
	ASSERT_EQ(0, kvs_stats(ctl, pool, KVS_STATS_CHECK, st));
}

TEST_F(chan, waiter_killed_on_a_channel_claim)
{
	struct kvs_event ev[6];
	struct kvs_chan_stats cs;
	struct kvs_pool_stats st;
	__u32 mp[6], res[3], pages[6], own[3], hit, inflight, k;
	struct kvs_conn cc;
	int go[2], fd;
	char byte;
	pid_t pid;

	CH_BEGIN();
	fd = chan_open(&self->env.ctl, self->pool, 16, 8);
	ASSERT_LE(0, fd);
	cc = chan_conn(fd);
	/* b misses six keys: the channel claims them, one record each. */
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 700, 0, 6, pages, &hit));
	ASSERT_EQ(0, hit);
	ASSERT_EQ(0, chan_read_n(fd, ev, 6));
	for (k = 0; k < 6; k++) {
		ASSERT_EQ(KVS_EVENT_MISS, ev[k].type);
		ASSERT_EQ(k, ev[k].k);
		ASSERT_EQ(6, ev[k].n);
		mp[k] = ev[k].page;
	}

	/* Two waiters: a, which lives, and a child, killed while it polls. */
	ASSERT_EQ(0, lookup_wait(self->a, 700, 0, 6, pages, &hit, &inflight));
	ASSERT_EQ(0, hit);
	ASSERT_EQ(6, inflight);
	ASSERT_FALSE(readable(self->a->fd));
	ASSERT_EQ(0, pipe(go));
	pid = kvs_env_fork(_metadata, &self->env);
	if (pid == 0) {
		struct pollfd p = { .events = POLLIN };
		struct kvs_conn c;

		close(go[0]);
		KVS_CHILD_EQ(0, kvs_conn_open(&c));
		KVS_CHILD_EQ(0, kvs_attach(&c, self->name, CH_NS, 0, NULL));
		KVS_CHILD_EQ(0, lookup_wait(&c, 700, 0, 6, pages, &hit, &inflight));
		KVS_CHILD_EQ(6, inflight);
		KVS_CHILD_EQ(1, write(go[1], "w", 1));
		p.fd = c.fd;
		for (;;)
			poll(&p, 1, -1);
	}
	close(go[1]);
	ASSERT_EQ(1, read(go[0], &byte, 1));
	close(go[0]);
	pool_stats(_metadata, &self->env.ctl, self->pool, &st);
	ASSERT_EQ(2, st.inflight_waits);
	ASSERT_EQ(4, st.n_files);	/* a, b, the channel, the waiter */
	ASSERT_KILL9(pid);

	/* The claims are still the channel's; a still waits. */
	pool_stats(_metadata, &self->env.ctl, self->pool, &st);
	ASSERT_EQ(6, st.n_claimed);
	ASSERT_EQ(3, st.n_files);
	ASSERT_EQ(0, chan_stats(fd, &cs));
	ASSERT_EQ(6, cs.held);
	ASSERT_FALSE(readable(self->a->fd));

	/* The tier fetched three of them and gives the other three back. */
	ASSERT_EQ(0, kvs_publish_chain(&cc, mp, 3, KVS_NO_PAGE, 700, 0, res, NULL));
	ASSERT_EQ(0, chan_put(fd, mp + 3, 3));
	ASSERT_TRUE(readable(self->a->fd));
	ASSERT_EQ(0, chan_stats(fd, &cs));
	ASSERT_EQ(3, cs.held);		/* a reference on each page published */
	ASSERT_EQ(0, chan_put(fd, res, 3));
	ASSERT_EQ(0, chan_stats(fd, &cs));
	ASSERT_EQ(0, cs.held);
	close(fd);

	/* a looks again: three hits, and the rest are a's to compute. */
	ASSERT_EQ(0, kvs_lookup_chain(self->a, 700, 0, 6, pages, &hit));
	ASSERT_EQ(3, hit);
	for (k = 0; k < 3; k++)
		ASSERT_EQ(mp[k], pages[k]);
	ASSERT_EQ(0, kvs_claim_keys(self->a, 700, 3, 3, own));
	ASSERT_EQ(0, kvs_publish_chain(self->a, own, 3, pages[2], 700, 3, NULL, NULL));
	ASSERT_EQ(0, kvs_put(self->a, pages, 3));
	ASSERT_EQ(0, kvs_put(self->a, own, 3));
	pool_stats(_metadata, &self->env.ctl, self->pool, &st);
	ASSERT_EQ(0, st.n_refs);
	ASSERT_EQ(0, st.n_claimed);
	ASSERT_EQ(0, st.n_owned);
	ASSERT_EQ(6, st.n_cached);
	CH_END();
}

/* What the holder reports once it holds what it will be killed with. */
struct holding {
	__u64 held;
	__u32 published, missed;
};

TEST_F(chan, holder_killed_mid_fetch_in_read)
{
	struct kvs_pool_stats st;
	struct holding h;
	__u32 pages[6], own[4], hit, inflight, i;
	int up[2], fd;
	char byte;
	pid_t pid;

	CH_BEGIN();
	ASSERT_EQ(0, pipe(up));
	pid = kvs_env_fork(_metadata, &self->env);
	if (pid == 0) {
		struct kvs_event ev[16];
		__u32 np = 0, nm = 0, pub[4], miss[6];
		struct kvs_chan_stats cs;
		struct kvs_conn cc;
		ssize_t r;
		int j;

		close(up[0]);
		fd = chan_open(&self->env.ctl, self->pool, 64, 8);
		KVS_CHILD_CHECK(fd >= 0);
		cc = chan_conn(fd);
		KVS_CHILD_EQ(1, write(up[1], "o", 1));
		/* Four PUBLISHED records and six MISS, in batches as they come. */
		while (np + nm < 10) {
			r = read(fd, ev, sizeof(ev));
			KVS_CHILD_CHECK(r > 0 && r % sizeof(ev[0]) == 0);
			for (j = 0; j < r / (ssize_t)sizeof(ev[0]); j++) {
				KVS_CHILD_CHECK(np + nm < 10);
				if (ev[j].type == KVS_EVENT_PUBLISHED)
					pub[np++] = ev[j].page;
				else if (ev[j].type == KVS_EVENT_MISS)
					miss[nm++] = ev[j].page;
			}
		}
		KVS_CHILD_EQ(4, np);
		KVS_CHILD_EQ(6, nm);
		/* Mid-fetch: two claims filled and published, one copy done. */
		KVS_CHILD_EQ(0, kvs_publish_chain(&cc, miss, 2, KVS_NO_PAGE, 400, 0,
						  NULL, NULL));
		KVS_CHILD_EQ(0, chan_put(fd, pub, 1));
		KVS_CHILD_EQ(0, chan_stats(fd, &cs));
		h.held = cs.held;
		h.published = np;
		h.missed = nm;
		KVS_CHILD_EQ(0, kvs_sync_write(up[1], &h, sizeof(h)));
		/* Blocked in read(2) when the kill comes. */
		for (;;)
			if (read(fd, ev, sizeof(ev)) < 0 && errno != EINTR)
				_exit(102);
	}
	close(up[1]);
	ASSERT_EQ(1, read(up[0], &byte, 1));

	for (i = 0; i < 4; i++) {
		ASSERT_EQ(0, publish_one(self->a, 300 + i, &pages[0]));
		ASSERT_EQ(0, kvs_put1(self->a, pages[0]));
	}
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 400, 0, 6, pages, &hit));
	ASSERT_EQ(0, hit);
	ASSERT_EQ(0, kvs_sync_read(up[0], &h, sizeof(h)));
	close(up[0]);
	/* 3 references of records, 2 of published claims, 4 claims. */
	ASSERT_EQ(9, h.held);
	pool_stats(_metadata, &self->env.ctl, self->pool, &st);
	ASSERT_EQ(5, st.n_refs);
	ASSERT_EQ(4, st.n_claimed);

	/* b waits on the four claims left. */
	ASSERT_EQ(0, lookup_wait(self->b, 400, 0, 6, pages, &hit, &inflight));
	ASSERT_EQ(2, hit);
	ASSERT_EQ(4, inflight);
	ASSERT_FALSE(readable(self->b->fd));
	ASSERT_KILL9(pid);

	ASSERT_TRUE(readable(self->b->fd));
	pool_stats(_metadata, &self->env.ctl, self->pool, &st);
	ASSERT_EQ(2, st.n_refs);	/* b's two hits only */
	ASSERT_EQ(0, st.n_claimed);
	ASSERT_EQ(0, st.n_owned);
	ASSERT_EQ(2, st.n_files);
	/* Nothing is in flight any more: b computes the four itself. */
	ASSERT_EQ(0, kvs_claim_keys(self->b, 400, 2, 4, own));
	ASSERT_EQ(0, kvs_publish_chain(self->b, own, 4, pages[1], 400, 2, NULL, NULL));
	ASSERT_EQ(0, kvs_put(self->b, pages, 2));
	ASSERT_EQ(0, kvs_put(self->b, own, 4));
	fd = chan_open(&self->env.ctl, self->pool, 4, 0);
	ASSERT_LE(0, fd);
	close(fd);
	pool_stats(_metadata, &self->env.ctl, self->pool, &st);
	ASSERT_EQ(0, st.n_refs);
	ASSERT_EQ(0, st.n_claimed);
	ASSERT_EQ(10, st.n_cached);
	CH_END();
}

TEST_F(chan, full_ring_drops_a_miss_whole_and_nobody_waits)
{
	struct kvs_event ev[8];
	struct kvs_chan_stats cs;
	struct kvs_pool_stats st;
	__u32 page, pages[6], own[6], hit, inflight, i;
	int fd;

	CH_BEGIN();
	fd = chan_open(&self->env.ctl, self->pool, 4, 8);
	ASSERT_LE(0, fd);
	for (i = 0; i < 3; i++) {
		ASSERT_EQ(0, publish_one(self->a, 800 + i, &page));
		ASSERT_EQ(0, kvs_put1(self->a, page));
	}
	/* One slot left, a miss of six: dropped whole, no claim made. */
	ASSERT_EQ(0, lookup_wait(self->b, 810, 0, 6, pages, &hit, &inflight));
	ASSERT_EQ(0, hit);
	ASSERT_EQ(0, inflight);
	ASSERT_EQ(0, chan_stats(fd, &cs));
	ASSERT_EQ(0, cs.missed);
	ASSERT_EQ(1, cs.dropped_full);
	ASSERT_EQ(3, cs.held);
	pool_stats(_metadata, &self->env.ctl, self->pool, &st);
	ASSERT_EQ(0, st.n_claimed);
	/* So b computes: its claims, its publish (one record fits, five not). */
	ASSERT_EQ(0, kvs_claim_keys(self->b, 810, 0, 6, own));
	ASSERT_EQ(0, kvs_publish_chain(self->b, own, 6, KVS_NO_PAGE, 810, 0, NULL, NULL));
	ASSERT_EQ(0, kvs_put(self->b, own, 6));
	ASSERT_EQ(0, chan_stats(fd, &cs));
	ASSERT_EQ(4, cs.pending);
	ASSERT_EQ(6, cs.dropped_full);
	/* Drained, the channel takes misses again. */
	ASSERT_EQ((ssize_t)(4 * sizeof(ev[0])), read(fd, ev, sizeof(ev)));
	for (i = 0; i < 4; i++) {
		ASSERT_EQ(KVS_EVENT_PUBLISHED, ev[i].type);
		ASSERT_EQ(0, chan_put(fd, &ev[i].page, 1));
	}
	ASSERT_EQ(0, lookup_wait(self->b, 820, 0, 2, pages, &hit, &inflight));
	ASSERT_EQ(2, inflight);
	ASSERT_FALSE(readable(self->b->fd));
	ASSERT_EQ(0, chan_stats(fd, &cs));
	ASSERT_EQ(2, cs.missed);
	ASSERT_EQ(2, cs.held);
	close(fd);
	ASSERT_TRUE(readable(self->b->fd));
	pool_stats(_metadata, &self->env.ctl, self->pool, &st);
	ASSERT_EQ(0, st.n_refs);
	ASSERT_EQ(0, st.n_claimed);
	CH_END();
}

TEST_F(chan, held_bound_drops_and_nobody_waits)
{
	struct kvs_chan_open req = { .ring = 64, .fetch_max = 8 };
	struct kvs_chan_stats cs;
	struct kvs_pool_stats st;
	__u32 page, pages[4], hit, inflight, i;
	int fd;

	CH_BEGIN();
	req.pool_id = self->pool;
	ASSERT_EQ(0, ioctl(self->env.ctl.fd, KVS_IOC_CHAN_OPEN, &req));
	fd = req.fd;
	ASSERT_EQ(CH_QUOTA, req.max_held);
	/* 20 publishes: the channel holds 16, the pool's max_pages_per_file. */
	for (i = 0; i < 20; i++) {
		ASSERT_EQ(0, publish_one(self->a, 900 + i, &page));
		ASSERT_EQ(0, kvs_put1(self->a, page));
	}
	ASSERT_EQ(0, chan_stats(fd, &cs));
	ASSERT_EQ(CH_QUOTA, cs.held);
	ASSERT_EQ(CH_QUOTA, cs.published);
	ASSERT_EQ(20 - CH_QUOTA, cs.dropped_held);
	ASSERT_EQ(0, cs.dropped_full);
	/* At the bound, a miss claims nothing: b does not wait. */
	ASSERT_EQ(0, lookup_wait(self->b, 950, 0, 4, pages, &hit, &inflight));
	ASSERT_EQ(0, inflight);
	ASSERT_EQ(0, chan_stats(fd, &cs));
	ASSERT_EQ(0, cs.missed);
	ASSERT_EQ(20 - CH_QUOTA + 1, cs.dropped_held);
	pool_stats(_metadata, &self->env.ctl, self->pool, &st);
	ASSERT_EQ(CH_QUOTA, st.n_refs);
	ASSERT_EQ(0, st.n_claimed);
	close(fd);
	pool_stats(_metadata, &self->env.ctl, self->pool, &st);
	ASSERT_EQ(0, st.n_refs);
	ASSERT_EQ(20, st.n_cached);
	CH_END();
}

TEST_F(chan, pool_user_of_another_uid_is_refused)
{
	struct kvs_pool_stats st;
	__u32 pool;
	int up[2], down[2], fd;
	char byte;
	pid_t owner, user;

	CH_BEGIN();
	if (geteuid() != 0)
		SKIP(return, "needs root to switch uids");
	ASSERT_EQ(0, pipe(up));
	ASSERT_EQ(0, pipe(down));
	/* uid 65533 makes a pool anyone may read and write, and watches it. */
	owner = kvs_env_fork(_metadata, &self->env);
	if (owner == 0) {
		struct kvs_pool_create pc;
		struct kvs_conn c;

		close(up[0]);
		close(down[1]);
		KVS_CHILD_EQ(0, kvs_become(KVS_TEST_GID, 1, -1));
		KVS_CHILD_EQ(0, kvs_conn_open(&c));
		kvs_pool_args(&pc, "", 8);
		snprintf(pc.name, sizeof(pc.name), "chan-rw-%d", (int)getpid());
		pc.mode = 0666;
		KVS_CHILD_EQ(0, kvs_pool_create(&c, &pc));
		fd = chan_open(&c, pc.pool_id, 8, 4);
		KVS_CHILD_CHECK(fd >= 0);
		close(fd);
		KVS_CHILD_EQ(0, kvs_sync_write(up[1], &pc.pool_id, sizeof(pc.pool_id)));
		KVS_CHILD_EQ(0, kvs_sync_write(up[1], pc.name, sizeof(pc.name)));
		KVS_CHILD_EQ(1, read(down[0], &byte, 1));
		KVS_CHILD_EQ(0, kvs_destroy(&c, pc.pool_id));
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	ASSERT_EQ(0, kvs_sync_read(up[0], &pool, sizeof(pool)));
	ASSERT_EQ(0, kvs_sync_read(up[0], self->name, sizeof(self->name)));
	close(up[0]);

	/* uid 65534 uses the pool, as the mode allows, and cannot watch it. */
	user = kvs_env_fork(_metadata, &self->env);
	if (user == 0) {
		struct kvs_conn c, w;
		__u32 page;

		KVS_CHILD_EQ(0, kvs_become(KVS_NOBODY, 1, -1));
		KVS_CHILD_EQ(0, kvs_conn_open(&c));
		KVS_CHILD_EQ(0, kvs_attach_owner(&c, KVS_TEST_GID, self->name, 9, 0, NULL));
		KVS_CHILD_EQ(0, publish_one(&c, 1000, &page));
		KVS_CHILD_EQ(0, kvs_put1(&c, page));
		KVS_CHILD_EQ(-EPERM, chan_open(&c, pool, 8, 4));
		/* Not from an unattached file either. */
		KVS_CHILD_EQ(0, kvs_conn_open(&w));
		KVS_CHILD_EQ(-EPERM, chan_open(&w, pool, 8, 4));
		_exit(0);
	}
	ASSERT_CHILD_OK(user);

	/* The refusals took nothing: an admin opens it now. */
	pool_stats(_metadata, &self->env.ctl, pool, &st);
	ASSERT_EQ(0, st.n_refs);
	ASSERT_EQ(1, st.n_cached);
	ASSERT_EQ(0, st.n_files);
	fd = chan_open(&self->env.ctl, pool, 8, 4);
	ASSERT_LE(0, fd);
	close(fd);
	ASSERT_EQ(1, write(down[1], "d", 1));
	close(down[1]);
	ASSERT_CHILD_OK(owner);
	CH_END();
}

TEST_HARNESS_MAIN
