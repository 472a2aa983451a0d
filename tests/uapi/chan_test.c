// SPDX-License-Identifier: GPL-2.0
/*
 * The pool event channel of kvshare.ko (KVS_IOC_CHAN_OPEN): an anon-inode
 * file whose read(2) returns records in batches and whose poll(2) says
 * when one is pending.  A PUBLISHED record holds a reference until the
 * channel PUTs it; a channel left unread until full drops and counts,
 * and the clients' calls go on; only the pool's owner (or an admin) may
 * open it; io_uring polls and reads it as any file; its holder killed
 * with references and claims held leaves
 * nothing behind; the module's reference count comes back, so rmmod
 * (unload_test, run after this suite) still succeeds.
 */
#include <liburing.h>

#include "kvs_test.h"
#include "kvs_chan.h"

TEST_F(chan, published_record_holds_a_reference)
{
	struct kvs_event ev[4];
	struct kvs_chan_stats cs;
	struct kvs_pool_stats st;
	struct kvs_alloc al;
	__u32 pages[2], got[2];
	int fd, i;

	CH_BEGIN();
	fd = chan_open(&self->env.ctl, self->pool, 8, 0);
	ASSERT_LE(0, fd);
	ASSERT_EQ(FD_CLOEXEC, fcntl(fd, F_GETFD) & FD_CLOEXEC);
	ASSERT_EQ(-EBUSY, chan_open(&self->env.ctl, self->pool, 8, 0));
	ASSERT_FALSE(readable(fd));
	ASSERT_EQ(0, fcntl(fd, F_SETFL, O_NONBLOCK));
	ASSERT_EQ(-1, read(fd, ev, sizeof(ev)));
	ASSERT_EQ(EAGAIN, errno);

	ASSERT_EQ(0, kvs_alloc(self->a, 2, pages));
	ASSERT_EQ(0, kvs_publish_chain(self->a, pages, 2, KVS_NO_PAGE, 1, 0, pages, NULL));
	ASSERT_TRUE(readable(fd));
	/* Whole records only. */
	ASSERT_EQ(-1, read(fd, ev, sizeof(ev[0]) - 1));
	ASSERT_EQ(EINVAL, errno);
	ASSERT_EQ((ssize_t)(2 * sizeof(ev[0])), read(fd, ev, sizeof(ev)));
	ASSERT_FALSE(readable(fd));
	for (i = 0; i < 2; i++) {
		struct kvs_key k = make_key(1, i);

		ASSERT_EQ(KVS_EVENT_PUBLISHED, ev[i].type);
		ASSERT_EQ(pages[i], ev[i].page);
		ASSERT_EQ(CH_NS, ev[i].ns);
		ASSERT_TRUE(kvs_key_eq(&k, &ev[i].key));
		got[i] = ev[i].page;
	}
	ASSERT_EQ(0, chan_stats(fd, &cs));
	ASSERT_EQ(2, cs.held);

	/* The publisher lets go; the channel's references keep the pages. */
	ASSERT_EQ(0, kvs_put(self->a, pages, 2));
	ASSERT_EQ(0, kvs_stats(&self->env.ctl, self->pool, KVS_STATS_CHECK, &st));
	ASSERT_EQ(2, st.n_shared);
	ASSERT_EQ(2, st.n_refs);
	/* Only PUT and PUBLISH run on the channel. */
	memset(&al, 0, sizeof(al));
	al.count = 1;
	al.pages = KVS_PTR(pages);
	ASSERT_EQ(-1, ioctl(fd, KVS_IOC_ALLOC, &al));
	ASSERT_EQ(ENOTTY, errno);
	ASSERT_EQ(0, chan_put(fd, got, 2));
	ASSERT_EQ(-ENOENT, chan_put(fd, got, 1));
	ASSERT_EQ(0, kvs_stats(&self->env.ctl, self->pool, KVS_STATS_CHECK, &st));
	ASSERT_EQ(0, st.n_refs);
	ASSERT_EQ(2, st.n_cached);
	close(fd);
	CH_END();
}

TEST_F(chan, second_uid_is_refused)
{
	pid_t pid;
	int fd;

	CH_BEGIN();
	if (geteuid() != 0)
		SKIP(return, "needs root to switch to uid 65534");
	pid = kvs_env_fork(_metadata, &self->env);
	if (pid == 0) {
		struct kvs_pool_create pc;
		struct kvs_conn c;

		KVS_CHILD_EQ(0, kvs_become(KVS_NOBODY, 1, -1));
		KVS_CHILD_EQ(0, kvs_conn_open(&c));
		/* May use root's pool (it is 0600: not even that), never watch it. */
		KVS_CHILD_EQ(-EPERM, chan_open(&c, self->pool, 8, 4));
		/* Its own pool, yes. */
		kvs_pool_args(&pc, "", 8);
		snprintf(pc.name, sizeof(pc.name), "chan-own-%d", (int)getpid());
		KVS_CHILD_EQ(0, kvs_pool_create(&c, &pc));
		fd = chan_open(&c, pc.pool_id, 8, 4);
		KVS_CHILD_CHECK(fd >= 0);
		close(fd);
		KVS_CHILD_EQ(0, kvs_destroy(&c, pc.pool_id));
		_exit(0);
	}
	ASSERT_CHILD_OK(pid);
	CH_END();
}

TEST_F(chan, unread_channel_drops_and_never_blocks)
{
	struct kvs_chan_stats cs;
	struct kvs_event ev[8];
	__u32 page, miss[2], i;
	int fd;

	CH_BEGIN();
	fd = chan_open(&self->env.ctl, self->pool, 4, 4);
	ASSERT_LE(0, fd);
	/* 24 publishes and 8 misses, nobody reading: every call succeeds. */
	for (i = 0; i < 24; i++) {
		ASSERT_EQ(0, publish_one(self->a, 100 + i, &page));
		ASSERT_EQ(0, kvs_put1(self->a, page));
	}
	for (i = 0; i < 8; i++)
		ASSERT_EQ(0, kvs_lookup_chain(self->b, 200 + i, 0, 2, miss, NULL));
	ASSERT_EQ(0, chan_stats(fd, &cs));
	ASSERT_EQ(4, cs.pending);
	ASSERT_EQ(4, cs.published);
	ASSERT_EQ(0, cs.missed);
	ASSERT_EQ(28, cs.dropped_full);
	ASSERT_EQ(4, cs.held);
	check_invariants(&self->env.ctl, self->pool);
	ASSERT_EQ((ssize_t)(4 * sizeof(ev[0])), read(fd, ev, sizeof(ev)));
	close(fd);
	CH_END();
}

TEST_F(chan, killed_holder_releases_references_and_claims)
{
	struct kvs_pool_stats st;
	struct kvs_lookup l;
	struct kvs_key keys[6];
	__u32 pages[6], i;
	int go[2], fd;
	char byte;
	pid_t pid;

	CH_BEGIN();
	ASSERT_EQ(0, pipe(go));
	pid = kvs_env_fork(_metadata, &self->env);
	if (pid == 0) {
		close(go[0]);
		fd = chan_open(&self->env.ctl, self->pool, 64, 8);
		KVS_CHILD_CHECK(fd >= 0);
		KVS_CHILD_EQ(1, write(go[1], "x", 1));
		for (;;)
			pause();
	}
	close(go[1]);
	ASSERT_EQ(1, read(go[0], &byte, 1));
	close(go[0]);

	/* Four references and six claims held by a channel nobody reads. */
	for (i = 0; i < 4; i++) {
		ASSERT_EQ(0, publish_one(self->a, 300 + i, &pages[0]));
		ASSERT_EQ(0, kvs_put1(self->a, pages[0]));
	}
	for (i = 0; i < 6; i++)
		keys[i] = make_key(400, i);
	ASSERT_EQ(0, kvs_lookup(self->a, keys, 6, pages, NULL));
	memset(&l, 0, sizeof(l));
	l.count = 6;
	l.flags = KVS_LOOKUP_WAIT;
	l.keys = KVS_PTR(keys);
	l.pages = KVS_PTR(pages);
	ASSERT_EQ(0, kvs_call(self->b, KVS_IOC_LOOKUP, &l));
	ASSERT_EQ(6, l.n_inflight);
	ASSERT_FALSE(readable(self->b->fd));
	ASSERT_EQ(0, kvs_stats(&self->env.ctl, self->pool, KVS_STATS_CHECK, &st));
	ASSERT_EQ(4, st.n_refs);
	ASSERT_EQ(6, st.n_claimed);

	ASSERT_KILL9(pid);
	ASSERT_TRUE(readable(self->b->fd));
	ASSERT_EQ(0, kvs_stats(&self->env.ctl, self->pool, KVS_STATS_CHECK, &st));
	ASSERT_EQ(0, st.n_refs);
	ASSERT_EQ(0, st.n_claimed);
	ASSERT_EQ(0, st.n_owned);
	ASSERT_EQ(2, st.n_files);
	/* The pool takes a new channel. */
	fd = chan_open(&self->env.ctl, self->pool, 4, 0);
	ASSERT_LE(0, fd);
	close(fd);
	CH_END();
}

TEST_F(chan, destroyed_pool_is_the_last_record)
{
	struct kvs_event ev[4];
	__u32 page;
	int fd;

	CH_BEGIN();
	fd = chan_open(&self->env.ctl, self->pool, 4, 0);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, publish_one(self->a, 500, &page));
	kvs_env_destroy(_metadata, &self->env, self->pool);
	ASSERT_EQ((ssize_t)(2 * sizeof(ev[0])), read(fd, ev, sizeof(ev)));
	ASSERT_EQ(KVS_EVENT_PUBLISHED, ev[0].type);
	ASSERT_EQ(KVS_EVENT_POOL_GONE, ev[1].type);
	ASSERT_FALSE(readable(fd));
	close(fd);
	kvs_env_assert_baseline(_metadata, &self->env);
}

TEST_F(chan, io_uring_polls_and_reads)
{
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;
	struct io_uring ring;
	struct kvs_event ev[4];
	__u32 page;
	int fd, ret;

	CH_BEGIN();
	fd = chan_open(&self->env.ctl, self->pool, 8, 0);
	ASSERT_LE(0, fd);
	ret = io_uring_queue_init(4, &ring, 0);
	if (ret)
		SKIP(close(fd); return, "io_uring_queue_init: %s", strerror(-ret));
	/* A poll armed on the empty channel completes when a record comes. */
	sqe = io_uring_get_sqe(&ring);
	io_uring_prep_poll_add(sqe, fd, POLLIN);
	sqe->user_data = 1;
	ASSERT_EQ(1, io_uring_submit(&ring));
	ASSERT_EQ(-EAGAIN, io_uring_peek_cqe(&ring, &cqe));
	ASSERT_EQ(0, publish_one(self->a, 600, &page));
	ASSERT_EQ(0, io_uring_wait_cqe(&ring, &cqe));
	ASSERT_EQ(1, cqe->user_data);
	ASSERT_TRUE(cqe->res & POLLIN);
	io_uring_cqe_seen(&ring, cqe);
	sqe = io_uring_get_sqe(&ring);
	io_uring_prep_read(sqe, fd, ev, sizeof(ev), 0);
	sqe->user_data = 2;
	ASSERT_EQ(1, io_uring_submit(&ring));
	ASSERT_EQ(0, io_uring_wait_cqe(&ring, &cqe));
	ASSERT_EQ(2, cqe->user_data);
	ASSERT_EQ((int)sizeof(ev[0]), cqe->res);
	io_uring_cqe_seen(&ring, cqe);
	ASSERT_EQ(KVS_EVENT_PUBLISHED, ev[0].type);
	ASSERT_EQ(page, ev[0].page);
	io_uring_queue_exit(&ring);
	close(fd);
	CH_END();
}

TEST_HARNESS_MAIN
