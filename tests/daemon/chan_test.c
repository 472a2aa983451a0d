// SPDX-License-Identifier: GPL-2.0
/*
 * The pool event channel on kvshared's socket (KVS_IOC_CHAN_OPEN): the
 * channel comes with the reply as one end of a SOCK_SEQPACKET pair.  Each
 * test runs its own daemon (tests/daemon/kvd_test.h, the ASan/UBSan
 * build), stopped with SIGTERM at the end (exit 0, clean logs):
 *
 *  - PUBLISHED records: poll(2) says POLLIN, read(2) gives whole records,
 *    each holding a reference (the pool's n_refs) until a framed PUT on
 *    the channel gives it back (CHAN_STATS: 0 held, nothing pending);
 *  - MISS records: a LOOKUP with WAIT sees the claimed keys in flight,
 *    the records name its uid, and the channel's PUBLISH of them (its
 *    reply carries the entries' results) turns them into hits;
 *  - any other command on the channel is ENOTTY and the channel stays;
 *    a message that is no request closes it;
 *  - its holder killed with -9 while it holds references and claims:
 *    everything goes back (n_held 0, the claims no longer in flight), and
 *    the pool can have a channel again (EBUSY only while one is open);
 *    a plain close() with both held gives everything back the same way;
 *  - as real second uids: the owner of a pool (uid 65534) opens its
 *    channel, uid 65533 gets EPERM.
 */
#include <errno.h>
#include <grp.h>
#include <stdint.h>
#include <sys/wait.h>

#include <kvshare/arbiter.h>

#include "kvd_client.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include "kselftest_harness.h"
#pragma GCC diagnostic pop
#pragma GCC diagnostic ignored "-Wsign-compare"

#define POOL		"c"
#define GEOM		"layers=2,kv_heads=2,head_dim=16,tokens_per_page=16,dtype=f16"
#define POOL_SPEC	POOL ":pages=64," GEOM ",mode=0666"
#define UPOOL		"u"
#define UPOOL_SPEC	UPOOL ":pages=16," GEOM ",mode=0666,uid=65534,gid=65534"
#define OWNER_UID	65534
#define OTHER_UID	65533
#define HDR		sizeof(struct kvs_msg)
#define CHAIN		4
#define EVENT_MS	10000

static struct kvs_key make_key(__u32 chain, __u32 i)
{
	struct kvs_key k = { { 0x4348414eull, chain, i, (__u64)chain * 131 + i } };

	return k;
}

/* KVS_IOC_CHAN_OPEN on @a: the channel's fd, or -errno. */
static int chan_open(struct kv_arbiter *a, __u32 pool, __u32 ring, __u32 fetch_max)
{
	struct kvs_chan_open co = { .pool_id = pool, .ring = ring, .fetch_max = fetch_max };
	int ret = kv_arbiter_call(a, KVS_IOC_CHAN_OPEN, &co);

	return ret ? ret : co.fd;
}

/*
 * Records waiting on channel @fd, read within EVENT_MS: how many (into
 * @ev, at most @max), or -errno.
 */
static int chan_records(int fd, struct kvs_event *ev, int max)
{
	char buf[8192];
	int got = 0;

	while (got < max && kvd_wait_readable(fd, got ? 200 : EVENT_MS)) {
		ssize_t n = read(fd, buf, sizeof(buf));
		int i;

		if (n <= 0)
			return n ? -errno : -EPIPE;
		if (n % sizeof(*ev) || ((struct kvs_msg *)buf)->magic == KVS_MSG_MAGIC)
			return -EPROTO;
		for (i = 0; i < n / (int)sizeof(*ev) && got < max; i++)
			memcpy(&ev[got++], buf + i * sizeof(*ev), sizeof(*ev));
	}
	return got;
}

/*
 * A request on channel @fd, framed as on the socket: struct @st of
 * @usize bytes, then @dlen bytes of @data; the reply's struct and data
 * come back.  The command's result, or a transport error - 1000.
 */
static int chan_call(int fd, __u32 cmd, void *st, size_t usize, void *data, size_t dlen)
{
	unsigned char buf[8192];
	struct kvs_msg h = { .magic = KVS_MSG_MAGIC, .cmd = cmd, .len = HDR + usize + dlen };
	struct kvs_msg *r = (struct kvs_msg *)buf;
	ssize_t n;

	memcpy(buf, &h, HDR);
	memcpy(buf + HDR, st, usize);
	if (dlen)
		memcpy(buf + HDR + usize, data, dlen);
	if (send(fd, buf, h.len, MSG_NOSIGNAL) != (ssize_t)h.len)
		return -1000 - errno;
	for (;;) {
		if (!kvd_wait_readable(fd, EVENT_MS))
			return -1000 - ETIMEDOUT;
		n = read(fd, buf, sizeof(buf));
		if (n <= 0)
			return -1000 - EPIPE;
		if (r->magic == KVS_MSG_MAGIC)
			break;
		/* A batch of records before the reply: not this test's. */
	}
	if (n != r->len || r->len < HDR)
		return -1000 - EPROTO;
	if (!r->result && r->len >= HDR + usize)
		memcpy(st, buf + HDR, usize);
	if (!r->result && r->out_len) {
		if (r->out_off < HDR + usize || r->out_off + r->out_len > HDR + usize + dlen)
			return -1000 - EPROTO;
		memcpy((unsigned char *)data + (r->out_off - HDR - usize),
		       buf + HDR + usize, r->out_len);
	}
	return r->result;
}

static int chan_put(int fd, const __u32 *pages, __u32 n)
{
	struct kvs_put put = { .count = n, .pages = HDR + sizeof(put) };

	return chan_call(fd, KVS_IOC_PUT, &put, sizeof(put), (void *)pages, n * sizeof(*pages));
}

static int chan_stats(int fd, struct kvs_chan_stats *st)
{
	memset(st, 0, sizeof(*st));
	return chan_call(fd, KVS_IOC_CHAN_STATS, st, sizeof(*st), NULL, 0);
}

/* Publish chain @chain (CHAIN keys) from fresh pages of @a. */
static int publish_chain(struct kv_arbiter *a, __u32 chain)
{
	struct kvs_publish_entry e[CHAIN];
	__u32 pages[CHAIN], i;
	int ret = kv_alloc(a, CHAIN, pages);

	if (ret)
		return ret;
	memset(e, 0, sizeof(e));
	for (i = 0; i < CHAIN; i++) {
		e[i].page = pages[i];
		e[i].parent = i ? KVS_PARENT_PREV : KVS_NO_PAGE;
		e[i].key = make_key(chain, i);
	}
	ret = kv_publish(a, e, CHAIN);
	for (i = 0; !ret && i < CHAIN; i++)
		pages[i] = e[i].result;
	return ret ? ret : kv_put(a, pages, CHAIN);
}

/* LOOKUP with WAIT of chain @chain on @a: n_hit, n_inflight out; pages put back. */
static int lookup_wait(struct kv_arbiter *a, __u32 chain, __u32 *n_hit, __u32 *n_inflight)
{
	struct kvs_key keys[CHAIN];
	__u32 pages[CHAIN], i;
	struct kvs_lookup l = { .count = CHAIN, .flags = KVS_LOOKUP_WAIT,
				.keys = (uintptr_t)keys, .pages = (uintptr_t)pages };
	int ret;

	for (i = 0; i < CHAIN; i++)
		keys[i] = make_key(chain, i);
	ret = kv_arbiter_call(a, KVS_IOC_LOOKUP, &l);
	if (ret)
		return ret;
	*n_hit = l.n_hit;
	*n_inflight = l.n_inflight;
	return l.n_hit ? kv_put(a, pages, l.n_hit) : 0;
}

FIXTURE(chan) {
	struct kvd d;
	struct kv_arbiter *ctl, *a;
	__u32 pool_id;
	pid_t kid;
	char why[512];
};

FIXTURE_SETUP(chan)
{
	const char *args[] = { "--pool", POOL_SPEC, "--pool", UPOOL_SPEC, NULL };
	int ret;

	self->kid = 0;
	self->why[0] = '\0';
	ret = kvd_init(&self->d);
	ASSERT_EQ(0, ret) TH_LOG("mkdtemp: %s", strerror(-ret));
	ret = kvd_start_ctl(&self->d, args, POOL, &self->ctl, &self->pool_id,
			    self->why, sizeof(self->why));
	ASSERT_EQ(0, ret) TH_LOG("%s", self->why);
	ASSERT_EQ(0, kvd_open_attached(self->d.sock, POOL, KV_ARBITER_NO_URING, &self->a));
}

FIXTURE_TEARDOWN(chan)
{
	int ret;

	if (self->a)
		kv_arbiter_close(self->a);
	ret = kvd_stop_ctl(&self->d, self->kid, self->ctl, self->why, sizeof(self->why));
	if (ret)
		TH_LOG("kvshared: %s", self->why);
	EXPECT_EQ(0, ret);
	kvd_fini(&self->d);
}

static struct kvs_pool_stats pool_stats(FIXTURE_DATA(chan) *self)
{
	struct kvs_pool_stats st;

	memset(&st, 0, sizeof(st));
	st.pool_id = self->pool_id;
	st.flags = KVS_STATS_CHECK;
	if (kv_arbiter_call(self->ctl, KVS_IOC_POOL_STATS, &st))
		st.n_pages = 0;
	return st;
}

/*
 * The pool's stats once its channel's holdings are gone: kvshared sees the
 * holder's end close on its loop, so give it up to 2 s.
 */
static struct kvs_pool_stats stats_once_released(FIXTURE_DATA(chan) *self)
{
	struct kvs_pool_stats st;
	int i;

	for (i = 0; i < 100; i++) {
		st = pool_stats(self);
		if (!st.n_held)
			break;
		kvd_sleep_ms(20);
	}
	return st;
}

TEST_F(chan, published_records_hold_references_until_put)
{
	struct kvs_event ev[8];
	struct kvs_chan_stats cs;
	__u32 pages[CHAIN], i;
	int fd, type;
	socklen_t len = sizeof(type);

	fd = chan_open(self->ctl, self->pool_id, 64, 0);
	ASSERT_LE(0, fd) TH_LOG("CHAN_OPEN: %s", strerror(-fd));
	ASSERT_EQ(0, getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len));
	EXPECT_EQ(SOCK_SEQPACKET, type);
	EXPECT_EQ(0, kvd_wait_readable(fd, 100));
	EXPECT_EQ(-EBUSY, chan_open(self->ctl, self->pool_id, 64, 0));

	ASSERT_EQ(0, publish_chain(self->a, 1));
	ASSERT_EQ(CHAIN, chan_records(fd, ev, 8));
	for (i = 0; i < CHAIN; i++) {
		struct kvs_key k = make_key(1, i);

		EXPECT_EQ(KVS_EVENT_PUBLISHED, ev[i].type);
		EXPECT_EQ(0, memcmp(&ev[i].key, &k, sizeof(k)));
		pages[i] = ev[i].page;
	}
	EXPECT_EQ(CHAIN, pool_stats(self).n_refs);
	ASSERT_EQ(0, chan_stats(fd, &cs));
	EXPECT_EQ(CHAIN, cs.held);
	EXPECT_EQ(CHAIN, cs.published);

	ASSERT_EQ(0, chan_put(fd, pages, CHAIN));
	EXPECT_EQ(0, pool_stats(self).n_refs);
	EXPECT_EQ(0, pool_stats(self).n_held);
	ASSERT_EQ(0, chan_stats(fd, &cs));
	EXPECT_EQ(0, cs.held);
	EXPECT_EQ(0, cs.pending);
	/* Put twice: the channel holds it no more. */
	EXPECT_EQ(-ENOENT, chan_put(fd, pages, 1));
	EXPECT_EQ(0, kvd_wait_readable(fd, 100));
	close(fd);
}

TEST_F(chan, miss_claims_and_publish_on_the_channel)
{
	struct kvs_publish_entry e[CHAIN];
	struct kvs_publish pub;
	struct kvs_event ev[8];
	__u32 n_hit = 9, n_in = 9, res[CHAIN], i;
	int fd;

	fd = chan_open(self->ctl, self->pool_id, 64, CHAIN);
	ASSERT_LE(0, fd) TH_LOG("CHAN_OPEN: %s", strerror(-fd));
	ASSERT_EQ(0, lookup_wait(self->a, 2, &n_hit, &n_in));
	EXPECT_EQ(0, n_hit);
	EXPECT_EQ(CHAIN, n_in);
	ASSERT_EQ(CHAIN, chan_records(fd, ev, 8));
	memset(e, 0, sizeof(e));
	for (i = 0; i < CHAIN; i++) {
		EXPECT_EQ(KVS_EVENT_MISS, ev[i].type);
		EXPECT_EQ(i, ev[i].k);
		EXPECT_EQ(CHAIN, ev[i].n);
		EXPECT_EQ(geteuid(), ev[i].uid);
		e[i].page = ev[i].page;
		e[i].parent = i ? KVS_PARENT_PREV : KVS_NO_PAGE;
		e[i].key = ev[i].key;
	}
	EXPECT_EQ(CHAIN, pool_stats(self).n_claimed);

	memset(&pub, 0, sizeof(pub));
	pub.count = CHAIN;
	pub.entries = HDR + sizeof(pub);
	ASSERT_EQ(0, chan_call(fd, KVS_IOC_PUBLISH, &pub, sizeof(pub), e, sizeof(e)));
	for (i = 0; i < CHAIN; i++) {
		EXPECT_EQ(ev[i].page, e[i].result);
		res[i] = e[i].result;
	}
	/* Its own publish makes no record. */
	EXPECT_EQ(0, kvd_wait_readable(fd, 100));
	ASSERT_EQ(0, chan_put(fd, res, CHAIN));
	n_hit = n_in = 0;
	ASSERT_EQ(0, lookup_wait(self->a, 2, &n_hit, &n_in));
	EXPECT_EQ(CHAIN, n_hit);
	EXPECT_EQ(0, pool_stats(self).n_claimed);
	close(fd);
}

TEST_F(chan, other_commands_enotty_garbage_closes)
{
	struct kvs_lookup l = { .count = 1 };
	struct kvs_chan_stats cs;
	__u32 word = 0xdeadbeef;
	char c;
	int fd;

	fd = chan_open(self->ctl, self->pool_id, 16, 0);
	ASSERT_LE(0, fd);
	EXPECT_EQ(-ENOTTY, chan_call(fd, KVS_IOC_LOOKUP, &l, sizeof(l), NULL, 0));
	EXPECT_EQ(-ENOTTY, chan_call(fd, KVS_IOC_POOL_LIST, &l, sizeof(l), NULL, 0));
	ASSERT_EQ(0, chan_stats(fd, &cs));
	/* No request at all: the channel closes, and the pool may have one again. */
	ASSERT_EQ(sizeof(word), send(fd, &word, sizeof(word), MSG_NOSIGNAL));
	ASSERT_EQ(1, kvd_wait_readable(fd, EVENT_MS));
	EXPECT_EQ(0, read(fd, &c, 1));
	close(fd);
	for (int i = 0; i < 50; i++) {
		fd = chan_open(self->ctl, self->pool_id, 16, 0);
		if (fd != -EBUSY)
			break;
		kvd_sleep_ms(20);
	}
	ASSERT_LE(0, fd);
	close(fd);
	EXPECT_EQ(1, kvd_logged(&self->d, "a message that is no request"));
}

TEST_F(chan, holder_killed_gives_everything_back)
{
	struct kvs_pool_stats st;
	__u32 n_hit, n_in;
	int p[2], fd;
	char c;

	ASSERT_EQ(0, pipe(p));
	self->kid = fork();
	ASSERT_LE(0, self->kid);
	if (!self->kid) {
		struct kv_arbiter *h;

		close(p[0]);
		KVD_CHILD_EQ(0, kv_arbiter_open(self->d.sock, KV_ARBITER_NO_URING, &h));
		fd = chan_open(h, self->pool_id, 64, CHAIN);
		KVD_CHILD_EQ(1, fd >= 0);
		KVD_CHILD_EQ(1, write(p[1], "o", 1));
		pause();	/* holds, never reads */
		_exit(0);
	}
	close(p[1]);
	ASSERT_EQ(1, read(p[0], &c, 1));
	close(p[0]);
	EXPECT_EQ(-EBUSY, chan_open(self->ctl, self->pool_id, 64, 0));
	ASSERT_EQ(0, publish_chain(self->a, 3));
	n_hit = n_in = 9;
	ASSERT_EQ(0, lookup_wait(self->a, 4, &n_hit, &n_in));
	EXPECT_EQ(CHAIN, n_in);
	st = pool_stats(self);
	EXPECT_EQ(CHAIN, st.n_refs);
	EXPECT_EQ(CHAIN, st.n_claimed);

	ASSERT_EQ(0, kill(self->kid, SIGKILL));
	ASSERT_EQ(self->kid, waitpid(self->kid, NULL, 0));
	self->kid = 0;
	st = stats_once_released(self);
	EXPECT_EQ(0, st.n_held);
	EXPECT_EQ(0, st.n_refs);
	EXPECT_EQ(0, st.n_claimed);
	/* The keys it claimed are no longer in flight: the LOOKUP computes. */
	n_hit = n_in = 9;
	ASSERT_EQ(0, lookup_wait(self->a, 4, &n_hit, &n_in));
	EXPECT_EQ(0, n_in);
	fd = chan_open(self->ctl, self->pool_id, 64, 0);
	EXPECT_LE(0, fd);
	if (fd >= 0)
		close(fd);
}

/* A plain close() with references and claims held, as for a kill: nothing stays. */
TEST_F(chan, holder_closes_gives_everything_back)
{
	struct kvs_pool_stats st;
	__u32 n_hit = 9, n_in = 9;
	int fd;

	fd = chan_open(self->ctl, self->pool_id, 64, CHAIN);
	ASSERT_LE(0, fd) TH_LOG("CHAN_OPEN: %s", strerror(-fd));
	ASSERT_EQ(0, publish_chain(self->a, 5));
	ASSERT_EQ(0, lookup_wait(self->a, 6, &n_hit, &n_in));
	EXPECT_EQ(CHAIN, n_in);
	st = pool_stats(self);
	EXPECT_EQ(CHAIN, st.n_refs);
	EXPECT_EQ(CHAIN, st.n_claimed);
	close(fd);
	st = stats_once_released(self);
	EXPECT_EQ(0, st.n_held);
	EXPECT_EQ(0, st.n_refs);
	EXPECT_EQ(0, st.n_claimed);
	fd = chan_open(self->ctl, self->pool_id, 64, 0);
	EXPECT_LE(0, fd);
	if (fd >= 0)
		close(fd);
}

/* As @uid in a child: KVS_IOC_CHAN_OPEN on pool UPOOL; exits 0 if it got @want. */
static pid_t open_as(const char *sock, uid_t uid, __u32 pool, int want)
{
	pid_t pid = fork();

	if (!pid) {
		struct kv_arbiter *a;
		int fd;

		KVD_CHILD_EQ(0, setgroups(0, NULL));
		KVD_CHILD_EQ(0, setgid(uid));
		KVD_CHILD_EQ(0, setuid(uid));
		KVD_CHILD_EQ(0, kv_arbiter_open(sock, KV_ARBITER_NO_URING, &a));
		fd = chan_open(a, pool, 16, 0);
		KVD_CHILD_EQ(want, fd >= 0 ? 0 : fd);
		/* The owner's channel: a second is EBUSY, even for the owner. */
		if (fd >= 0)
			KVD_CHILD_EQ(-EBUSY, chan_open(a, pool, 16, 0));
		_exit(0);
	}
	return pid;
}

TEST_F(chan, owner_opens_another_uid_eperm)
{
	__u32 upool = kvd_pool_id(self->ctl, UPOOL);
	int st;
	pid_t pid;

	ASSERT_NE(0, upool);
	pid = open_as(self->d.sock, OTHER_UID, upool, -EPERM);
	ASSERT_LT(0, pid);
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* Another uid's pool, even a world-writable one: EPERM too. */
	pid = open_as(self->d.sock, OWNER_UID, self->pool_id, -EPERM);
	ASSERT_LT(0, pid);
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	pid = open_as(self->d.sock, OWNER_UID, upool, 0);
	ASSERT_LT(0, pid);
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

TEST_HARNESS_MAIN
