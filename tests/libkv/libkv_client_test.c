// SPDX-License-Identifier: GPL-2.0
/*
 * libkv's arbiter client: the same calls give the same results whether
 * the page commands travel by io_uring or by ioctl, and pools are attached
 * by owner.  Runs in the guest, where /dev/kvshare exists, and on the host
 * against a private kvshared ($KVSHARE_ARBITER, set by
 * tests/daemon/with-kvshared.sh); elsewhere every test skips.  Runs as
 * root: the multi-user cases drop to uid 65534 in a child.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <kvshare/arbiter.h>
#include "kselftest_harness.h"

#define N_PAGES	16
#define CHAIN	6
#define NOBODY	65534

/* The arbiter libkv opens by default: the daemon's socket, or the device. */
static int no_arbiter(void)
{
	const char *env = getenv("KVSHARE_ARBITER");

	return !(env && *env) && access("/dev/kvshare", F_OK) != 0;
}

/*
 * In a forked child: become uid 65534, keeping the group that may open
 * the device (a real install's group kvshare; the daemon's socket is open
 * to all).
 */
static int become_nobody(void)
{
	struct stat st;
	gid_t g[1];
	int n = 0;

	if (!getenv("KVSHARE_ARBITER") && !stat("/dev/kvshare", &st))
		g[n++] = st.st_gid;
	if (setgroups(n, g) || setgid(NOBODY) || setuid(NOBODY))
		return -errno;
	return 0;
}

/* Pool memory as the arbiter demands it: a memfd sealed against shrinking. */
static int sealed_memfd(size_t bytes)
{
	int fd = memfd_create("kvs-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0 || ftruncate(fd, bytes) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static void chain_key(struct kvs_key *k, unsigned int i)
{
	memset(k, 0, sizeof(*k));
	k->w[0] = 0x6b7673686172652dull;
	k->w[1] = i;
}

/* Publish entries for @pages, chained from the first: keys 0 .. @n-1. */
static void chain_entries(struct kvs_publish_entry *ents, const uint32_t *pages,
			  unsigned int n)
{
	unsigned int i;

	memset(ents, 0, n * sizeof(*ents));
	for (i = 0; i < n; i++) {
		ents[i].page = pages[i];
		ents[i].parent = i ? KVS_PARENT_PREV : KVS_NO_PAGE;
		chain_key(&ents[i].key, i);
	}
}

FIXTURE(client) {
	struct kv_arbiter *ctl;
	char name[KVS_NAME_MAX];
	__u32 pool_id;
	int skip;
};

FIXTURE_VARIANT(client) {
	unsigned int flags;
	int want_uring;
};

FIXTURE_VARIANT_ADD(client, uring) { .flags = 0, .want_uring = 1 };
FIXTURE_VARIANT_ADD(client, ioctl) { .flags = KV_ARBITER_NO_URING, .want_uring = 0 };

FIXTURE_SETUP(client)
{
	struct kvs_pool_create req = {
		.n_pages = N_PAGES,
		.geom = { .n_layers = 1, .n_kv_heads = 1, .head_dim = 64,
			  .tokens_per_page = 16, .dtype = KVS_DTYPE_BF16 },
		.mode = 0600,
		.mem_fd = -1,
	};

	/* 6.1's harness runs the body even after SKIP here: remember it. */
	self->skip = no_arbiter();
	if (self->skip)
		return;
	ASSERT_EQ(0, kv_arbiter_open(NULL, KV_ARBITER_NO_URING, &self->ctl));
	snprintf(self->name, sizeof(self->name), "libkv-%d", getpid());
	strcpy(req.name, self->name);
	ASSERT_EQ(0, kv_arbiter_call(self->ctl, KVS_IOC_POOL_CREATE, &req));
	self->pool_id = req.pool_id;
}

FIXTURE_TEARDOWN(client)
{
	struct kvs_pool_destroy d = { .pool_id = self->pool_id };

	if (self->skip)
		return;
	EXPECT_EQ(0, kv_arbiter_call(self->ctl, KVS_IOC_POOL_DESTROY, &d));
	kv_arbiter_close(self->ctl);
}

static void pool_stats(struct __test_metadata *_metadata, struct kv_arbiter *arb,
		       __u32 pool_id, struct kvs_pool_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->pool_id = pool_id;
	st->flags = KVS_STATS_CHECK;
	ASSERT_EQ(0, kv_arbiter_call(arb, KVS_IOC_POOL_STATS, st));
}

/* Two files share a chain; the transport is the variant's. */
TEST_F(client, share_a_chain)
{
	struct kvs_publish_entry ents[CHAIN];
	struct kvs_key keys[CHAIN + 2];
	struct kv_arbiter *a, *b;
	struct kvs_pool_stats st;
	__u32 pages[CHAIN], got[CHAIN + 2];
	unsigned int i;

	if (self->skip)
		SKIP(return, "no arbiter");
	ASSERT_EQ(0, kv_arbiter_open(NULL, variant->flags, &a));
	ASSERT_EQ(0, kv_arbiter_open(NULL, variant->flags, &b));
	/* The daemon's socket never carries io_uring. */
	ASSERT_EQ(variant->want_uring && !kv_arbiter_is_daemon(a),
		  kv_arbiter_uses_uring(a));
	ASSERT_EQ(0, kv_arbiter_attach(a, self->name, 7, NULL));
	ASSERT_EQ(0, kv_arbiter_attach(b, self->name, 7, NULL));

	ASSERT_EQ(0, kv_alloc(a, CHAIN, pages));
	chain_entries(ents, pages, CHAIN);
	ASSERT_EQ(0, kv_publish(a, ents, CHAIN));

	/* b finds the whole chain and stops at the first unknown key. */
	for (i = 0; i < CHAIN + 2; i++)
		chain_key(&keys[i], i);
	ASSERT_EQ(CHAIN, kv_lookup(b, keys, CHAIN + 2, got));
	for (i = 0; i < CHAIN; i++)
		ASSERT_EQ(pages[i], got[i]);

	/* b computed the same chain: PUBLISH tells it the canonical pages. */
	ASSERT_EQ(0, kv_alloc(b, 2, got + CHAIN));
	chain_entries(ents, got + CHAIN, 2);
	ASSERT_EQ(2, kv_publish(b, ents, 2));
	ASSERT_EQ(pages[0], ents[0].result);
	ASSERT_EQ(pages[1], ents[1].result);

	pool_stats(_metadata, self->ctl, self->pool_id, &st);
	ASSERT_EQ(CHAIN, st.n_shared);
	ASSERT_EQ(2 * CHAIN + 2, st.n_refs);

	/* Errors come back as -errno on either transport. */
	ASSERT_EQ(-ENOENT, kv_put(a, &got[CHAIN], 1));
	ASSERT_EQ(-EINVAL, kv_put(a, pages, 0));

	ASSERT_EQ(0, kv_put(b, got, CHAIN));
	ASSERT_EQ(0, kv_put(b, &ents[0].result, 1));
	ASSERT_EQ(0, kv_put(b, &ents[1].result, 1));
	kv_arbiter_close(b);
	kv_arbiter_close(a);

	pool_stats(_metadata, self->ctl, self->pool_id, &st);
	ASSERT_EQ(CHAIN, st.n_cached);
	ASSERT_EQ(0, st.n_refs);
	ASSERT_EQ(0, st.n_held);
	ASSERT_EQ(N_PAGES - CHAIN, st.n_free);
}

/*
 * kv_lookup_peek (KVS_LOOKUP_PEEK) counts kv_lookup()'s run on either
 * transport and changes nothing: no reference, no holding, a CACHED page
 * stays CACHED, lookups and hits stay as they were.  A uid that may not
 * attach the pool cannot peek, as it cannot look up.
 */
TEST_F(client, peek_counts_the_run_and_takes_nothing)
{
	struct kvs_publish_entry ents[CHAIN];
	struct kvs_pool_stats before, after;
	struct kvs_key keys[CHAIN + 2];
	struct kv_arbiter *a, *b;
	__u32 pages[CHAIN], got[CHAIN + 2];
	unsigned int i;
	int status;
	pid_t pid;

	if (self->skip)
		SKIP(return, "no arbiter");
	ASSERT_EQ(0, kv_arbiter_open(NULL, variant->flags, &a));
	ASSERT_EQ(0, kv_arbiter_open(NULL, variant->flags, &b));
	ASSERT_EQ(0, kv_arbiter_attach(a, self->name, 7, NULL));
	ASSERT_EQ(0, kv_arbiter_attach(b, self->name, 7, NULL));
	ASSERT_EQ(0, kv_alloc(a, CHAIN, pages));
	chain_entries(ents, pages, CHAIN);
	ASSERT_EQ(0, kv_publish(a, ents, CHAIN));
	/* The last two pages CACHED: a peek must not make them SHARED. */
	ASSERT_EQ(0, kv_put(a, pages + CHAIN - 2, 2));
	for (i = 0; i < CHAIN + 2; i++)
		chain_key(&keys[i], i);

	pool_stats(_metadata, self->ctl, self->pool_id, &before);
	ASSERT_EQ(2, before.n_cached);
	ASSERT_EQ(CHAIN, kv_lookup_peek(b, keys, CHAIN + 2));
	ASSERT_EQ(3, kv_lookup_peek(b, keys, 3));
	ASSERT_EQ(0, kv_lookup_peek(b, keys + CHAIN, 2));
	pool_stats(_metadata, self->ctl, self->pool_id, &after);
	EXPECT_EQ(before.n_refs, after.n_refs);
	EXPECT_EQ(before.n_held, after.n_held);
	EXPECT_EQ(before.n_cached, after.n_cached);
	EXPECT_EQ(before.n_evictable, after.n_evictable);
	EXPECT_EQ(before.lookups, after.lookups);
	EXPECT_EQ(before.hits, after.hits);
	/* Bad input is refused as for kv_lookup(), and takes nothing. */
	EXPECT_EQ(-EINVAL, kv_lookup_peek(b, keys, 0));
	EXPECT_EQ(-E2BIG, kv_lookup_peek(b, keys, KVS_MAX_BATCH + 1));
	EXPECT_EQ(-EFAULT, kv_lookup_peek(b, NULL, 2));

	/* kv_lookup() agrees, and does take the run. */
	ASSERT_EQ(CHAIN, kv_lookup(b, keys, CHAIN + 2, got));
	pool_stats(_metadata, self->ctl, self->pool_id, &after);
	EXPECT_EQ(before.n_refs + CHAIN, after.n_refs);
	EXPECT_EQ(before.hits + CHAIN, after.hits);
	ASSERT_EQ(0, kv_put(b, got, CHAIN));

	/* uid 65534 may not attach root's 0600 pool: no peek either. */
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		struct kv_arbiter *n;
		int code = 0;

		if (become_nobody() || kv_arbiter_open(NULL, variant->flags, &n))
			_exit(10);
		if (kv_arbiter_attach_owner(n, 0, self->name, 7, NULL) != -EACCES)
			code |= 1;
		if (kv_lookup_peek(n, keys, CHAIN) != -EBADFD)
			code |= 2;
		if (kv_lookup(n, keys, CHAIN, got) != -EBADFD)
			code |= 4;
		kv_arbiter_close(n);
		_exit(code);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(0, WEXITSTATUS(status));

	ASSERT_EQ(0, kv_put(a, pages, CHAIN - 2));
	kv_arbiter_close(b);
	kv_arbiter_close(a);
	pool_stats(_metadata, self->ctl, self->pool_id, &after);
	ASSERT_EQ(0, after.n_refs);
	ASSERT_EQ(0, after.n_held);
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct publisher {
	struct kv_arbiter *arb;
	struct kvs_publish_entry ents[CHAIN];
	int ret;
};

/* Publish what was claimed, 100 ms from now: the waiter sleeps by then. */
static void *publish_later(void *arg)
{
	struct publisher *p = arg;

	usleep(100 * 1000);
	p->ret = kv_publish(p->arb, p->ents, CHAIN);
	return NULL;
}

/*
 * In-flight dedupe: b waits for the chain a claimed instead of computing
 * it, gets it when a publishes, gives up after its timeout while a key is
 * still in flight, and sees a miss at once when a's handle closes.
 */
TEST_F(client, lookup_wait_for_a_claimed_chain)
{
	struct kvs_key keys[CHAIN + 2];
	struct kv_arbiter *a, *b;
	struct kvs_pool_stats st;
	struct publisher pub;
	__u32 pages[CHAIN + 2], got[CHAIN + 2], inflight = 99;
	unsigned int i;
	long long t0;
	pthread_t t;

	if (self->skip)
		SKIP(return, "no arbiter");
	ASSERT_EQ(0, kv_arbiter_open(NULL, variant->flags, &a));
	ASSERT_EQ(0, kv_arbiter_open(NULL, variant->flags, &b));
	ASSERT_EQ(0, kv_arbiter_attach(a, self->name, 7, NULL));
	ASSERT_EQ(0, kv_arbiter_attach(b, self->name, 7, NULL));
	for (i = 0; i < CHAIN + 2; i++)
		chain_key(&keys[i], i);

	ASSERT_EQ(0, kv_alloc_claim(a, keys, CHAIN, pages));
	ASSERT_EQ(-EEXIST, kv_alloc_claim(b, keys, 1, got));
	memset(&pub, 0, sizeof(pub));
	pub.arb = a;
	for (i = 0; i < CHAIN; i++) {
		pub.ents[i].page = pages[i];
		pub.ents[i].parent = i ? KVS_PARENT_PREV : KVS_NO_PAGE;
		pub.ents[i].key = keys[i];
	}
	ASSERT_EQ(0, pthread_create(&t, NULL, publish_later, &pub));
	t0 = now_ms();
	ASSERT_EQ(CHAIN, kv_lookup_wait(b, keys, CHAIN, got, 10000, &inflight));
	ASSERT_GT(5000, now_ms() - t0);
	pthread_join(t, NULL);
	ASSERT_EQ(0, pub.ret);
	ASSERT_EQ(0, inflight);
	for (i = 0; i < CHAIN; i++)
		ASSERT_EQ(pages[i], got[i]);

	/* Two more keys in flight: b gives up after 100 ms, holding the run. */
	ASSERT_EQ(0, kv_alloc_claim(a, keys + CHAIN, 2, pages + CHAIN));
	ASSERT_EQ(0, kv_put(b, got, CHAIN));
	t0 = now_ms();
	ASSERT_EQ(CHAIN, kv_lookup_wait(b, keys, CHAIN + 2, got, 100, &inflight));
	ASSERT_LE(100, now_ms() - t0);
	ASSERT_EQ(2, inflight);
	ASSERT_EQ(0, kv_put(b, got, CHAIN));
	/* a goes away: its claims end, b misses at once and may claim. */
	kv_arbiter_close(a);
	ASSERT_EQ(CHAIN, kv_lookup_wait(b, keys, CHAIN + 2, got, 10000, &inflight));
	ASSERT_EQ(0, inflight);
	ASSERT_EQ(0, kv_alloc_claim(b, keys + CHAIN, 2, got + CHAIN));
	pool_stats(_metadata, self->ctl, self->pool_id, &st);
	ASSERT_EQ(2, st.n_claimed);
	kv_arbiter_close(b);
	/* kvshared sees a connection closed asynchronously: give it 2 s. */
	for (t0 = now_ms(); now_ms() - t0 < 2000; usleep(1000)) {
		pool_stats(_metadata, self->ctl, self->pool_id, &st);
		if (!st.n_held)
			break;
	}
	ASSERT_EQ(0, st.n_claimed);
	ASSERT_EQ(0, st.n_held);
}

/*
 * Pool memory is shared: a page written through one process's mapping
 * reads back the same through another's (memfd registered with the pool).
 */
TEST(memory_is_shared)
{
	struct kvs_pool_create req = {
		.n_pages = N_PAGES,
		.geom = { .n_layers = 2, .n_kv_heads = 2, .head_dim = 64,
			  .tokens_per_page = 16, .dtype = KVS_DTYPE_BF16 },
		.mode = 0600,
	};
	struct kvs_pool_destroy d = { 0 };
	struct kv_pool *a, *b;
	struct kv_arbiter *ctl;
	__u32 page;
	size_t bytes;
	pid_t pid;
	int st, memfd, i;
	char *p;

	if (no_arbiter())
		SKIP(return, "no arbiter");
	bytes = 2ul * 2 * 2 * 64 * 16 * 2 * N_PAGES;
	memfd = sealed_memfd(bytes);
	ASSERT_LE(0, memfd);
	ASSERT_EQ(0, kv_arbiter_open(NULL, 0, &ctl));
	snprintf(req.name, sizeof(req.name), "libkv-mem-%d", getpid());
	req.mem_fd = memfd;
	ASSERT_EQ(0, kv_arbiter_call(ctl, KVS_IOC_POOL_CREATE, &req));
	close(memfd);		/* the pool keeps its own reference */
	d.pool_id = req.pool_id;

	ASSERT_EQ(0, kv_pool_open(NULL, req.name, 1, 0, &a));
	ASSERT_EQ(req.geom.page_bytes, kv_pool_info(a)->geom.page_bytes);
	ASSERT_EQ(NULL, kv_page_addr(a, N_PAGES));
	ASSERT_EQ(0, kv_alloc(kv_pool_arbiter(a), 1, &page));
	p = kv_page_addr(a, page);
	ASSERT_NE(NULL, p);
	for (i = 0; i < (int)req.geom.page_bytes; i++)
		p[i] = (char)(i * 7 + page);

	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		const char *q;
		int ok = 1;

		if (kv_pool_open(NULL, req.name, 1, 0, &b))
			_exit(2);
		q = kv_page_addr(b, page);
		for (i = 0; i < (int)req.geom.page_bytes; i++)
			ok &= q[i] == (char)(i * 7 + page);
		/* ... and back the other way. */
		((char *)kv_page_addr(b, page))[0] = 'K';
		kv_pool_close(b);
		_exit(ok ? 0 : 1);
	}
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	ASSERT_TRUE(WIFEXITED(st));
	ASSERT_EQ(0, WEXITSTATUS(st));
	ASSERT_EQ('K', p[0]);

	kv_pool_close(a);
	ASSERT_EQ(0, kv_arbiter_call(ctl, KVS_IOC_POOL_DESTROY, &d));
	kv_arbiter_close(ctl);
}

/* Attaching names the owner: another uid's pool of that name is not found. */
TEST_F(client, attach_by_owner)
{
	struct kvs_pool_attach info = { 0 };
	struct kv_arbiter *a;
	uint32_t owner = 1;

	if (self->skip)
		SKIP(return, "no arbiter");
	unsetenv("KVSHARE_POOL_OWNER");
	ASSERT_EQ(0, kv_arbiter_open(NULL, variant->flags, &a));
	/* Root's pool, and root (or a root daemon) is the default owner. */
	ASSERT_EQ(0, kv_arbiter_default_owner(a, &owner));
	ASSERT_EQ(0, owner);
	ASSERT_EQ(-ENOENT, kv_arbiter_attach_owner(a, NOBODY, self->name, 0, NULL));
	ASSERT_EQ(0, setenv("KVSHARE_POOL_OWNER", "65534", 1));
	ASSERT_EQ(-ENOENT, kv_arbiter_attach(a, self->name, 0, NULL));
	ASSERT_EQ(0, setenv("KVSHARE_POOL_OWNER", "no-such-user-kvshare", 1));
	ASSERT_EQ(-EINVAL, kv_arbiter_attach(a, self->name, 0, NULL));
	ASSERT_EQ(0, setenv("KVSHARE_POOL_OWNER", "0", 1));
	ASSERT_EQ(0, kv_arbiter_attach(a, self->name, 0, &info));
	unsetenv("KVSHARE_POOL_OWNER");
	ASSERT_EQ(self->pool_id, info.pool_id);
	ASSERT_EQ(0, info.owner);
	kv_arbiter_close(a);

	ASSERT_EQ(0, kv_arbiter_open(NULL, variant->flags, &a));
	ASSERT_EQ(0, kv_arbiter_attach_owner(a, 0, self->name, 0, &info));
	ASSERT_EQ(self->pool_id, info.pool_id);
	kv_arbiter_close(a);
}

/*
 * Squatting: uid 65534 creates a pool under the name root's clients use,
 * backed by memory it keeps, before root does.  Root's clients never
 * attach it (and would read the squatter's bytes if they did); root still
 * creates the name, and its clients get root's pool and root's memory.
 */
TEST(no_squatting)
{
	const size_t bytes = 2ul * 64 * 16 * 2 * N_PAGES;
	struct kvs_pool_create req = {
		.n_pages = N_PAGES,
		.geom = { .n_layers = 1, .n_kv_heads = 1, .head_dim = 64,
			  .tokens_per_page = 16, .dtype = KVS_DTYPE_BF16 },
		.mode = 0666,
	};
	struct kvs_pool_destroy d = { 0 };
	struct kv_pool *pool = NULL;
	struct kv_arbiter *ctl;
	__u32 sq_id = 0;
	int st, go[2];
	pid_t pid;

	if (no_arbiter())
		SKIP(return, "no arbiter");
	unsetenv("KVSHARE_POOL_OWNER");
	snprintf(req.name, sizeof(req.name), "libkv-squat-%d", getpid());
	ASSERT_EQ(0, pipe(go));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		struct kvs_pool_create sq = req;
		struct kv_arbiter *arb;
		__u32 id = 0;

		sq.n_pages = N_PAGES / 2;	/* told apart from root's */
		close(go[0]);
		sq.mem_fd = sealed_memfd(bytes);
		if (sq.mem_fd >= 0 && !become_nobody() &&
		    !kv_arbiter_open(NULL, KV_ARBITER_NO_URING, &arb) &&
		    !kv_arbiter_call(arb, KVS_IOC_POOL_CREATE, &sq))
			id = sq.pool_id;
		/* Keep the connection until the parent is done. */
		if (write(go[1], &id, sizeof(id)) != sizeof(id))
			_exit(2);
		close(go[1]);
		pause();
		_exit(0);
	}
	close(go[1]);
	ASSERT_EQ(sizeof(sq_id), read(go[0], &sq_id, sizeof(sq_id)));
	close(go[0]);
	if (!sq_id) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
	}
	ASSERT_NE(0, sq_id);

	/* Root's name is not the squatter's pool. */
	EXPECT_EQ(-ENOENT, kv_pool_open(NULL, req.name, 0, 0, &pool));
	EXPECT_EQ(NULL, pool);

	/* Root creates the name all the same, and attaches its own pool. */
	ASSERT_EQ(0, kv_arbiter_open(NULL, 0, &ctl));
	req.mem_fd = sealed_memfd(bytes);
	ASSERT_LE(0, req.mem_fd);
	EXPECT_EQ(0, kv_arbiter_call(ctl, KVS_IOC_POOL_CREATE, &req));
	close(req.mem_fd);
	d.pool_id = req.pool_id;
	EXPECT_EQ(0, kv_pool_open(NULL, req.name, 0, 0, &pool));
	if (pool) {
		EXPECT_EQ(req.pool_id, kv_pool_info(pool)->pool_id);
		EXPECT_EQ(N_PAGES, kv_pool_info(pool)->n_pages);
		kv_pool_close(pool);
	}
	/* The squatter's, asked for by owner, is the other one. */
	pool = NULL;
	EXPECT_EQ(0, kv_pool_open_owner(NULL, NOBODY, req.name, 0, 0, &pool));
	if (pool) {
		EXPECT_EQ(N_PAGES / 2, kv_pool_info(pool)->n_pages);
		EXPECT_NE(req.pool_id, kv_pool_info(pool)->pool_id);
		kv_pool_close(pool);
	}
	if (d.pool_id)
		EXPECT_EQ(0, kv_arbiter_call(ctl, KVS_IOC_POOL_DESTROY, &d));
	d.pool_id = sq_id;	/* an admin may destroy anyone's pool */
	EXPECT_EQ(0, kv_arbiter_call(ctl, KVS_IOC_POOL_DESTROY, &d));
	kv_arbiter_close(ctl);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
}

TEST_HARNESS_MAIN
