// SPDX-License-Identifier: GPL-2.0
/*
 * kvshared on the host, with several client processes: each test starts
 * its own daemon (the ASan/UBSan build, tests/daemon/kvd_test.h) with one
 * configured pool "t" of host memory (a memfd) and a metrics endpoint,
 * and stops it with SIGTERM at the end: the test fails unless it exits 0,
 * removes its socket and logs no sanitizer report.
 *
 *  - processes share pages: one publishes a chain, the others find the
 *    same page numbers, and the bytes written through one process's
 *    mapping read back identical in the others';
 *  - kill -9 of clients after ALLOC, after PUBLISH, holding LOOKUP
 *    references and in the middle of their loops, then the invariants
 *    (STATS_CHECK, n_held == n_refs + n_owned, nothing held, every
 *    object gone once every client is);
 *  - garbage on raw connections (truncated, mis-sized, bad magic, unknown
 *    commands, long structs, stray descriptors, huge lengths, offsets
 *    outside the data area, stalled and flooding clients) gets an error
 *    reply or a closed connection, while a well-behaved client keeps
 *    working and the invariants hold;
 *  - a client at its quota (EDQUOT) while others still allocate;
 *  - the daemon killed (SIGKILL) and restarted under its clients: their
 *    next calls fail with ENOTCONN, and once they reconnect, attach and
 *    map again they work on the new daemon;
 *  - SIGTERM with clients attached: exit 0, socket removed;
 *  - metrics: the Prometheus text over the unix endpoint matches STATS
 *    and every connection's holdings;
 *  - attacks from a second uid (65534, in a forked child that drops root
 *    with setgroups/setgid/setuid), each failing here and working on the
 *    old main: connections past the total and per-uid caps; a slowloris
 *    message, replies never read, a message above the per-connection
 *    buffer and buffers past the total budget (each dropped while a
 *    victim keeps working); a connection flood filling the log; groups
 *    gained after connect (SO_PEERGROUPS, not /proc); every per-user limit
 *    in socket mode (EDQUOT, while a victim still creates and attaches);
 *    PAGES' keys and salts, and STATS' CHECK, as a non-owner;
 *  - what one uid costs kvshared (max_user_memory, max_memory_total),
 *    each resource pushed past its limit by a second uid while kvshared's
 *    RSS is measured and a victim's rounds keep their deadline: unfinished
 *    messages, two uids against the total, pools' bookkeeping, connections
 *    with 65536 groups and rings.
 *
 * Children report through their exit status (KVD_CHILD_*), never the
 * harness asserts.
 */
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/mman.h>

#include <kvshare/arbiter.h>

#include "kvd_client.h"
#include "../open_fds.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include "kselftest_harness.h"
#pragma GCC diagnostic pop
#pragma GCC diagnostic ignored "-Wsign-compare"

#define POOL		"t"
#define POOL_PAGES	64
#define PAGE_BYTES	4096u	/* 2 * 2 layers * 2 heads * 16 dims * 16 tokens * 2 bytes */
#define POOL_SPEC	POOL ":pages=64,layers=2,kv_heads=2,head_dim=16," \
			"tokens_per_page=16,dtype=f16,mode=0666"
#define MAX_KIDS	16
#define HDR		sizeof(struct kvs_msg)
#define BULK_FDS	TEST_SEND_FDS_MAX	/* the most one message carries */
#define BULK_MSGS	40

/* ------------------------------------------------------------------ */
/* helpers shared by the tests and their children                     */
/* ------------------------------------------------------------------ */

static __u64 mix64(__u64 x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Key of page @i of chain @chain: every word depends on both. */
static struct kvs_key make_key(__u32 chain, __u32 i)
{
	__u64 x = ((__u64)chain << 32) | i;
	struct kvs_key k = { { mix64(x), mix64(x ^ 0x6b7673ull), mix64(x + 2), mix64(x + 3) } };

	return k;
}

static __u32 xrand(__u32 *s)
{
	__u32 x = *s ? *s : 0x2545f491u;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	*s = x;
	return x;
}

/* A page's bytes as a function of @seed: what one process writes, others check. */
static void fill_page(void *p, __u32 seed)
{
	__u32 *w = p, s = seed * 2654435761u + 1;
	size_t i;

	for (i = 0; i < PAGE_BYTES / 4; i++)
		w[i] = xrand(&s);
}

static int page_is(const void *p, __u32 seed)
{
	__u32 *want = malloc(PAGE_BYTES);
	int ok;

	if (!want)
		return 0;
	fill_page(want, seed);
	ok = !memcmp(p, want, PAGE_BYTES);
	free(want);
	return ok;
}

/* Publish @n OWNED pages as keys 0..n-1 of @chain under @root. */
static int publish_chain(struct kv_arbiter *a, const __u32 *pages, __u32 n,
			 __u32 root, __u32 chain, __u32 first, __u32 *res)
{
	struct kvs_publish_entry e[64];
	__u32 i;
	int ret;

	if (n > 64)
		return -E2BIG;
	memset(e, 0, sizeof(e));
	for (i = 0; i < n; i++) {
		e[i].page = pages[i];
		e[i].parent = i ? KVS_PARENT_PREV : root;
		e[i].key = make_key(chain, first + i);
	}
	ret = kv_publish(a, e, n);
	if (ret >= 0 && res)
		for (i = 0; i < n; i++)
			res[i] = e[i].result;
	return ret;
}

/* Look up keys first..first+n-1 of @chain: the hit count, or -errno. */
static int lookup_chain(struct kv_arbiter *a, __u32 chain, __u32 first, __u32 n,
			__u32 *pages)
{
	struct kvs_key k[64];
	__u32 i;

	if (n > 64)
		return -E2BIG;
	for (i = 0; i < n; i++)
		k[i] = make_key(chain, first + i);
	return kv_lookup(a, k, n, pages);
}

static long held(struct kv_arbiter *a)
{
	struct kvs_quota q;
	int ret;

	memset(&q, 0, sizeof(q));
	ret = kv_arbiter_call(a, KVS_IOC_QUOTA, &q);
	return ret ? ret : (long)q.held;
}

static int xwrite(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= n;
	}
	return 0;
}

static int xread(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= n;
	}
	return 0;
}

/*
 * Pool memory as the arbiter takes it: a memfd of @bytes sealed against
 * shrinking (else anyone holding it could make the others fault).  The fd
 * or -1.
 */
static int sealed_memfd(const char *name, size_t bytes)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		return -1;
	if (ftruncate(fd, bytes) || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL)) {
		close(fd);
		return -1;
	}
	return fd;
}

static void __attribute__((noreturn)) hang(void)
{
	for (;;)
		pause();
}

#define LOOP_CHAINS	3
#define LOOP_LEN	6

/*
 * One round of a serving client: look a chain up, compute and publish
 * what was missing (possibly a duplicate of another client's), sometimes
 * look it up again, give everything back.  0, or -errno with @what set.
 * ENOSPC and EDQUOT end the round early.
 */
static int client_round(struct kv_arbiter *a, __u32 *seed, const char **what)
{
	__u32 hold[4 * LOOP_LEN], nh = 0, hits[LOOP_LEN], p[LOOP_LEN], res[LOOP_LEN];
	__u32 chain = 100 + xrand(seed) % LOOP_CHAINS, want, i;
	int h, ret = 0;

	h = lookup_chain(a, chain, 0, LOOP_LEN, hits);
	if (h == -EDQUOT)
		return 0;
	if (h < 0) {
		*what = "lookup";
		return h;
	}
	for (i = 0; i < (__u32)h; i++)
		hold[nh++] = hits[i];
	if (h < LOOP_LEN) {
		want = 1 + xrand(seed) % (LOOP_LEN - h);
		ret = kv_alloc(a, want, p);
		if (ret == -ENOSPC || ret == -EDQUOT) {
			ret = 0;
			goto out;
		}
		if (ret) {
			*what = "alloc";
			goto out;
		}
		ret = publish_chain(a, p, want, h ? hits[h - 1] : KVS_NO_PAGE, chain, h, res);
		if (ret < 0) {
			*what = "publish";
			kv_put(a, p, want);
			goto out;
		}
		ret = 0;
		for (i = 0; i < want; i++)
			hold[nh++] = res[i];
	}
	if (!(xrand(seed) % 4)) {
		h = lookup_chain(a, chain, 0, LOOP_LEN, hits);
		if (h >= 0) {
			for (i = 0; i < (__u32)h; i++)
				hold[nh++] = hits[i];
		} else if (h != -EDQUOT) {
			*what = "lookup again";
			ret = h;
		}
	}
out:
	if (nh) {
		int r = kv_put(a, hold, nh);

		if (r && !ret) {
			*what = "put";
			ret = r;
		}
	}
	return ret;
}

/* Shared between a test and its looping children. */
struct loop_shm {
	volatile long rounds[MAX_KIDS];
	volatile long max_round_us[MAX_KIDS];	/* the slowest round so far */
	volatile int stop;
};

/*
 * In a child: serve rounds until told to stop (exit 0) or killed.  @flags
 * are kv_pool_open()'s (KV_ARBITER_NO_URING: no shared ring).
 */
static void __attribute__((noreturn)) child_loop_flags(const char *sock, struct loop_shm *shm,
							int slot, __u32 seed, unsigned int flags)
{
	struct kv_pool *pool;
	const char *what = "";
	int ret;

	KVD_CHILD_EQ(0, kv_pool_open(sock, POOL, 0, flags, &pool));
	while (!shm->stop) {
		double t0 = kvd_now();
		long us;

		ret = client_round(kv_pool_arbiter(pool), &seed, &what);
		if (ret) {
			fprintf(stderr, "# child %d: %s failed: %s\n", (int)getpid(), what,
				strerror(-ret));
			_exit(102);
		}
		us = (long)((kvd_now() - t0) * 1e6);
		if (us > shm->max_round_us[slot])
			shm->max_round_us[slot] = us;
		__atomic_add_fetch(&shm->rounds[slot], 1, __ATOMIC_RELAXED);
	}
	kv_pool_close(pool);
	_exit(0);
}

static void __attribute__((noreturn)) child_loop(const char *sock, struct loop_shm *shm,
						  int slot, __u32 seed)
{
	child_loop_flags(sock, shm, slot, seed, 0);
}

/* ------------------------------------------------------------------ */
/* the fixture: one daemon per test                                   */
/* ------------------------------------------------------------------ */

FIXTURE(kvd) {
	struct kvd d;
	struct kv_arbiter *ctl;		/* unattached control connection */
	__u32 pool_id;			/* of pool "t" */
	struct kvs_info base;		/* INFO right after start */
	pid_t kids[MAX_KIDS];
	char why[512];
};

/* The daemon with pool "t" and metrics, and @extra arguments (or NULL). */
static int start_daemon(FIXTURE_DATA(kvd) *self, const char *const *extra)
{
	char metrics[128];
	const char *args[KVD_MAX_ARGS] = {
		"--pool", POOL_SPEC, "--max-pools", "8", "--metrics", metrics,
	};
	int n = 6;

	while (extra && *extra && n < KVD_MAX_ARGS - 1)
		args[n++] = *extra++;
	args[n] = NULL;
	snprintf(metrics, sizeof(metrics), "unix:%s", self->d.metrics);
	return kvd_start(&self->d, args, self->why, sizeof(self->why));
}

FIXTURE_SETUP(kvd)
{
	int ret;

	memset(self->kids, 0, sizeof(self->kids));
	self->ctl = NULL;
	self->why[0] = '\0';
	ret = kvd_init(&self->d);
	ASSERT_EQ(0, ret) TH_LOG("mkdtemp: %s", strerror(-ret));
	ret = start_daemon(self, NULL);
	if (!ret)
		/* Control only: no shared ring, whose bytes count against the budget. */
		ret = kv_arbiter_open(self->d.sock, KV_ARBITER_NO_URING, &self->ctl);
	if (!ret) {
		memset(&self->base, 0, sizeof(self->base));
		ret = kv_arbiter_call(self->ctl, KVS_IOC_INFO, &self->base);
	}
	if (!ret)
		self->pool_id = kvd_pool_id(self->ctl, POOL);
	else if (!self->why[0])
		snprintf(self->why, sizeof(self->why), "connect/INFO: %s", strerror(-ret));
	/* No teardown follows a failed setup: leave nothing running. */
	if (ret || !self->pool_id) {
		if (self->ctl)
			kv_arbiter_close(self->ctl);
		self->d.failed = 1;
		kvd_fini(&self->d);
	}
	ASSERT_EQ(0, ret) TH_LOG("%s", self->why);
	ASSERT_NE(0, self->pool_id) TH_LOG("pool '%s' not configured", POOL);
}

FIXTURE_TEARDOWN(kvd)
{
	int i, ret;

	for (i = 0; i < MAX_KIDS; i++) {
		if (self->kids[i] > 0 && waitpid(self->kids[i], NULL, WNOHANG) == 0) {
			kill(self->kids[i], SIGKILL);
			waitpid(self->kids[i], NULL, 0);
		}
	}
	if (self->ctl)
		kv_arbiter_close(self->ctl);
	self->why[0] = '\0';
	ret = kvd_stop(&self->d, self->why, sizeof(self->why));
	if (ret)
		TH_LOG("kvshared: %s", self->why);
	EXPECT_EQ(0, ret);
	kvd_fini(&self->d);
}

static pid_t fork_kid(struct __test_metadata *_metadata, FIXTURE_DATA(kvd) *self)
{
	pid_t pid;
	int i;

	for (i = 0; i < MAX_KIDS && self->kids[i] > 0; i++)
		;
	ASSERT_LT(i, MAX_KIDS) TH_LOG("out of child slots");
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid > 0)
		self->kids[i] = pid;
	return pid;
}

static void forget_kid(FIXTURE_DATA(kvd) *self, pid_t pid)
{
	int i;

	for (i = 0; i < MAX_KIDS; i++)
		if (self->kids[i] == pid)
			self->kids[i] = 0;
}

/* Reap @pid, assert it exited 0; the daemon has then seen it go. */
#define ASSERT_KID_OK(pid) do { \
	int __st = 0; \
	ASSERT_EQ((pid), waitpid((pid), &__st, 0)); \
	forget_kid(self, (pid)); \
	ASSERT_TRUE(WIFEXITED(__st)) TH_LOG("child status 0x%x", __st); \
	ASSERT_EQ(0, WEXITSTATUS(__st)); \
	ASSERT_EQ(0, kvd_settle(&self->d)); \
} while (0)

/* kill -9 @pid, reap it; the daemon has then seen its connections close. */
#define ASSERT_KID_KILL9(pid) do { \
	int __st = 0; \
	ASSERT_EQ(0, kill((pid), SIGKILL)); \
	ASSERT_EQ((pid), waitpid((pid), &__st, 0)); \
	forget_kid(self, (pid)); \
	ASSERT_TRUE(WIFSIGNALED(__st)) TH_LOG("child exited by itself: 0x%x", __st); \
	ASSERT_EQ(0, kvd_settle(&self->d)); \
} while (0)

/*
 * Pool @id's counters through the control connection, with the arbiter's
 * own check (KVS_STATS_CHECK) and the counting invariants.
 */
static void stats(struct __test_metadata *_metadata, FIXTURE_DATA(kvd) *self,
		  __u32 id, struct kvs_pool_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->pool_id = id;
	st->flags = KVS_STATS_CHECK;
	ASSERT_EQ(0, kv_arbiter_call(self->ctl, KVS_IOC_POOL_STATS, st));
	ASSERT_EQ(st->n_pages, st->n_free + st->n_owned + st->n_shared + st->n_cached);
	ASSERT_EQ(st->n_held, st->n_refs + st->n_owned);
	ASSERT_LE(st->n_shared, st->n_refs);
	ASSERT_LE(st->n_evictable, st->n_cached);
}

/* Every client of pool @id gone: nothing held, and no object left over. */
static void assert_all_gone(struct __test_metadata *_metadata, FIXTURE_DATA(kvd) *self,
			    __u32 id)
{
	struct kvs_pool_stats st;
	struct kvs_info in;

	ASSERT_EQ(0, kvd_settle(&self->d));
	stats(_metadata, self, id, &st);
	ASSERT_EQ(0, st.n_files);
	ASSERT_EQ(0, st.n_held);
	ASSERT_EQ(0, st.n_owned);
	ASSERT_EQ(0, st.n_shared);
	ASSERT_EQ(0, st.n_refs);
	memset(&in, 0, sizeof(in));
	ASSERT_EQ(0, kv_arbiter_call(self->ctl, KVS_IOC_INFO, &in));
	ASSERT_EQ(self->base.n_pools, in.n_pools);
	ASSERT_EQ(self->base.n_objects, in.n_objects);
}

/* ------------------------------------------------------------------ */
/* sharing                                                            */
/* ------------------------------------------------------------------ */

struct share_report {
	__u32 reader;
	__u32 pages[4];
	__u32 mine;			/* the page it published itself */
	__u64 ino;			/* its pool memory's inode */
};

/*
 * One process publishes a chain it filled; three others find the same
 * pages with the same bytes, and each publishes a page of its own that
 * the first one, and the test, then read back.
 */
TEST_F(kvd, processes_share_pages_and_bytes)
{
	enum { NREAD = 3 };
	struct share_report rep[NREAD];
	struct kvs_pool_stats st;
	struct kv_pool *mine;
	struct stat sb;
	__u32 pub[4], got[4];
	int up[2], down[2], i, j;
	pid_t publisher, reader[NREAD];
	char go = 1;

	ASSERT_EQ(0, pipe(up));
	ASSERT_EQ(0, pipe(down));
	publisher = fork_kid(_metadata, self);
	if (publisher == 0) {
		struct kv_pool *pool;
		__u32 p[4], res[4], q[1];

		KVD_CHILD_EQ(0, kv_pool_open(self->d.sock, POOL, 0, 0, &pool));
		KVD_CHILD_EQ(PAGE_BYTES, kv_pool_info(pool)->geom.page_bytes);
		KVD_CHILD_EQ(0, kv_alloc(kv_pool_arbiter(pool), 4, p));
		for (i = 0; i < 4; i++)
			fill_page(kv_page_addr(pool, p[i]), 1000 + i);
		KVD_CHILD_EQ(0, publish_chain(kv_pool_arbiter(pool), p, 4, KVS_NO_PAGE, 1, 0, res));
		for (i = 0; i < 4; i++)
			KVD_CHILD_EQ(p[i], res[i]);
		KVD_CHILD_EQ(0, xwrite(up[1], p, sizeof(p)));
		/* Once the readers are done, read what each of them wrote. */
		KVD_CHILD_EQ(0, xread(down[0], &go, 1));
		for (i = 0; i < NREAD; i++) {
			KVD_CHILD_EQ(1, lookup_chain(kv_pool_arbiter(pool), 10 + i, 0, 1, q));
			KVD_CHILD_TRUE(page_is(kv_page_addr(pool, q[0]), 2000 + i));
		}
		/* Its own chain still reads as it wrote it. */
		for (i = 0; i < 4; i++)
			KVD_CHILD_TRUE(page_is(kv_page_addr(pool, p[i]), 1000 + i));
		kv_pool_close(pool);
		_exit(0);
	}
	ASSERT_EQ(0, xread(up[0], pub, sizeof(pub)));

	for (i = 0; i < NREAD; i++) {
		reader[i] = fork_kid(_metadata, self);
		if (reader[i] == 0) {
			struct share_report r = { .reader = i };
			struct kv_pool *pool;
			struct stat s;

			KVD_CHILD_EQ(0, kv_pool_open(self->d.sock, POOL, 0, 0, &pool));
			KVD_CHILD_EQ(4, lookup_chain(kv_pool_arbiter(pool), 1, 0, 4, r.pages));
			for (j = 0; j < 4; j++)
				KVD_CHILD_TRUE(page_is(kv_page_addr(pool, r.pages[j]), 1000 + j));
			KVD_CHILD_EQ(0, kv_alloc(kv_pool_arbiter(pool), 1, &r.mine));
			fill_page(kv_page_addr(pool, r.mine), 2000 + i);
			KVD_CHILD_EQ(0, publish_chain(kv_pool_arbiter(pool), &r.mine, 1,
						      KVS_NO_PAGE, 10 + i, 0, NULL));
			KVD_CHILD_EQ(0, fstat(kv_pool_info(pool)->mem_fd, &s));
			r.ino = s.st_ino;
			KVD_CHILD_EQ(5, held(kv_pool_arbiter(pool)));
			KVD_CHILD_EQ(0, xwrite(up[1], &r, sizeof(r)));	/* < PIPE_BUF: atomic */
			kv_pool_close(pool);
			_exit(0);
		}
	}
	for (i = 0; i < NREAD; i++)
		ASSERT_EQ(0, xread(up[0], &rep[i], sizeof(rep[i])));
	for (i = 0; i < NREAD; i++)
		ASSERT_KID_OK(reader[i]);

	/* The test is one more process reading the same memory. */
	ASSERT_EQ(0, kv_pool_open(self->d.sock, POOL, 0, 0, &mine));
	ASSERT_EQ(0, fstat(kv_pool_info(mine)->mem_fd, &sb));
	for (i = 0; i < NREAD; i++) {
		for (j = 0; j < 4; j++)
			ASSERT_EQ(pub[j], rep[i].pages[j]) TH_LOG("reader %u page %d", rep[i].reader, j);
		ASSERT_EQ((__u64)sb.st_ino, rep[i].ino);
		ASSERT_TRUE(page_is(kv_page_addr(mine, rep[i].mine), 2000 + rep[i].reader));
	}
	ASSERT_EQ(4, lookup_chain(kv_pool_arbiter(mine), 1, 0, 4, got));
	ASSERT_EQ(0, memcmp(pub, got, sizeof(got)));
	for (j = 0; j < 4; j++)
		ASSERT_TRUE(page_is(kv_page_addr(mine, got[j]), 1000 + j));
	stats(_metadata, self, self->pool_id, &st);
	ASSERT_EQ(2, st.n_files);
	ASSERT_EQ(4, st.n_shared);
	ASSERT_EQ(8, st.n_refs);		/* the publisher's and ours */
	ASSERT_EQ(NREAD, st.n_cached);		/* the readers' pages, their owners gone */

	ASSERT_EQ(0, xwrite(down[1], &go, 1));
	ASSERT_KID_OK(publisher);
	ASSERT_EQ(0, kv_put(kv_pool_arbiter(mine), got, 4));
	kv_pool_close(mine);
	assert_all_gone(_metadata, self, self->pool_id);
	stats(_metadata, self, self->pool_id, &st);
	ASSERT_EQ(4 + NREAD, st.n_cached);
	ASSERT_EQ(4 + NREAD, st.publishes);
	ASSERT_EQ(3 * 4 + NREAD + 4, st.hits);
	for (i = 0; i < 2; i++) {
		close(up[i]);
		close(down[i]);
	}
}

/* ------------------------------------------------------------------ */
/* kill -9                                                            */
/* ------------------------------------------------------------------ */

/*
 * Clients killed with SIGKILL after ALLOC, after PUBLISH, while holding
 * LOOKUP references, and in the middle of their loops: each kill releases
 * exactly what that client held.
 */
TEST_F_TIMEOUT(kvd, kill9_at_several_points, 60)
{
	enum { NLOOP = 3 };
	struct kvs_pool_stats st;
	struct loop_shm *shm;
	struct kv_pool *late;
	__u32 a_pages[10], b_pages[4], q[4];
	pid_t a, b, c, loop[NLOOP];
	int sync[2], i;
	char ch;
	double t0;

	shm = mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, shm);
	memset((void *)shm, 0, sizeof(*shm));
	ASSERT_EQ(0, pipe(sync));

	/* a: after ALLOC */
	a = fork_kid(_metadata, self);
	if (a == 0) {
		struct kv_pool *pool;
		__u32 p[10];

		KVD_CHILD_EQ(0, kv_pool_open(self->d.sock, POOL, 0, 0, &pool));
		KVD_CHILD_EQ(0, kv_alloc(kv_pool_arbiter(pool), 10, p));
		KVD_CHILD_EQ(0, xwrite(sync[1], p, sizeof(p)));
		hang();
	}
	ASSERT_EQ(0, xread(sync[0], a_pages, sizeof(a_pages)));
	/* b: after PUBLISH (a chain of 4), with 2 pages still OWNED */
	b = fork_kid(_metadata, self);
	if (b == 0) {
		struct kv_pool *pool;
		__u32 p[4], o[2];

		KVD_CHILD_EQ(0, kv_pool_open(self->d.sock, POOL, 0, 0, &pool));
		KVD_CHILD_EQ(0, kv_alloc(kv_pool_arbiter(pool), 4, p));
		KVD_CHILD_EQ(0, publish_chain(kv_pool_arbiter(pool), p, 4, KVS_NO_PAGE, 3, 0, NULL));
		KVD_CHILD_EQ(0, kv_alloc(kv_pool_arbiter(pool), 2, o));
		KVD_CHILD_EQ(0, xwrite(sync[1], p, sizeof(p)));
		hang();
	}
	ASSERT_EQ(0, xread(sync[0], b_pages, sizeof(b_pages)));
	/* c: holding LOOKUP references on b's chain (twice on its first half) */
	c = fork_kid(_metadata, self);
	if (c == 0) {
		struct kv_pool *pool;
		__u32 p[4];

		KVD_CHILD_EQ(0, kv_pool_open(self->d.sock, POOL, 0, 0, &pool));
		KVD_CHILD_EQ(4, lookup_chain(kv_pool_arbiter(pool), 3, 0, 4, p));
		KVD_CHILD_EQ(2, lookup_chain(kv_pool_arbiter(pool), 3, 0, 2, p));
		KVD_CHILD_EQ(0, xwrite(sync[1], "c", 1));
		hang();
	}
	ASSERT_EQ(0, xread(sync[0], &ch, 1));
	stats(_metadata, self, self->pool_id, &st);
	ASSERT_EQ(3, st.n_files);
	ASSERT_EQ(12, st.n_owned);
	ASSERT_EQ(4, st.n_shared);
	ASSERT_EQ(4 + 6, st.n_refs);

	ASSERT_KID_KILL9(a);
	stats(_metadata, self, self->pool_id, &st);
	ASSERT_EQ(2, st.n_files);
	ASSERT_EQ(2, st.n_owned);
	ASSERT_EQ(POOL_PAGES - 6, st.n_free);
	for (i = 0; i < 10; i++) {
		struct kvs_page_desc d;
		struct kvs_pages pg = { .pool_id = self->pool_id, .start = a_pages[i],
					.count = 1, .pages = (uintptr_t)&d };

		ASSERT_EQ(0, kv_arbiter_call(self->ctl, KVS_IOC_PAGES, &pg));
		ASSERT_EQ(KVS_PAGE_FREE, d.state) TH_LOG("page %u", a_pages[i]);
	}

	/* Loopers serving rounds, killed one by one in the middle of them. */
	for (i = 0; i < NLOOP; i++) {
		loop[i] = fork_kid(_metadata, self);
		if (loop[i] == 0)
			child_loop(self->d.sock, shm, i, 77 + i);
	}
	for (i = 0; i < NLOOP; i++) {
		t0 = kvd_now();
		while (shm->rounds[i] < 3 && kvd_now() - t0 < 20)
			kvd_sleep_ms(2);
		ASSERT_LE(3, shm->rounds[i]) TH_LOG("looper %d made no progress", i);
	}
	for (i = 0; i < NLOOP; i++) {
		kvd_sleep_ms(15 + 20 * i);
		ASSERT_KID_KILL9(loop[i]);
		stats(_metadata, self, self->pool_id, &st);
		ASSERT_EQ(2 + NLOOP - 1 - i, st.n_files);
	}
	/* Only b and c are left: b's chain (c holds 6 references on it). */
	stats(_metadata, self, self->pool_id, &st);
	ASSERT_EQ(2, st.n_owned);
	ASSERT_EQ(4 + 6, st.n_refs);

	ASSERT_KID_KILL9(b);
	stats(_metadata, self, self->pool_id, &st);
	ASSERT_EQ(0, st.n_owned);
	ASSERT_EQ(4, st.n_shared);
	ASSERT_EQ(6, st.n_refs);
	ASSERT_EQ(1, st.n_files);

	ASSERT_KID_KILL9(c);
	assert_all_gone(_metadata, self, self->pool_id);
	for (i = 0; i < 4; i++) {
		struct kvs_page_desc d;
		struct kvs_pages pg = { .pool_id = self->pool_id, .start = b_pages[i],
					.count = 1, .pages = (uintptr_t)&d };

		ASSERT_EQ(0, kv_arbiter_call(self->ctl, KVS_IOC_PAGES, &pg));
		ASSERT_EQ(KVS_PAGE_CACHED, d.state);
		ASSERT_EQ(0, d.refcount);
	}
	/* What the dead computed is still there for the living. */
	ASSERT_EQ(0, kv_pool_open(self->d.sock, POOL, 0, 0, &late));
	ASSERT_EQ(4, lookup_chain(kv_pool_arbiter(late), 3, 0, 4, q));
	ASSERT_EQ(0, memcmp(b_pages, q, sizeof(q)));
	kv_pool_close(late);
	assert_all_gone(_metadata, self, self->pool_id);
	munmap((void *)shm, sizeof(*shm));
	close(sync[0]);
	close(sync[1]);
}

/* ------------------------------------------------------------------ */
/* raw connections                                                    */
/* ------------------------------------------------------------------ */

struct raw_reply {
	struct kvs_msg h;
	unsigned char body[65536];	/* struct, then the data written */
};

/* A request in @buf: header, @usize bytes of @st, @dlen bytes of @data. */
static size_t raw_build(void *buf, __u32 cmd, const void *st, size_t usize,
			const void *data, size_t dlen, __u64 seq)
{
	struct kvs_msg h = {
		.magic = KVS_MSG_MAGIC, .cmd = cmd,
		.len = (__u32)(HDR + usize + dlen), .seq = seq,
	};

	memcpy(buf, &h, HDR);
	if (usize)
		memcpy((char *)buf + HDR, st, usize);
	if (dlen)
		memcpy((char *)buf + HDR + usize, data, dlen);
	return HDR + usize + dlen;
}

/* Send @len bytes, @nfds descriptors riding on the first.  0 or -errno. */
static int raw_send(int fd, const void *buf, size_t len, const int *fds, int nfds)
{
	const char *p = buf;
	ssize_t n;

	while (len) {
		n = test_send_fds(fd, p, len, fds, nfds, 0);
		if (n == -EINTR)
			continue;
		if (n < 0)
			return (int)n;
		p += n;
		len -= n;
		nfds = 0;
	}
	return 0;
}

/* Read exactly @len bytes within @ms.  0, -EPIPE at EOF, -ETIMEDOUT. */
static int raw_read(int fd, void *buf, size_t len, int ms)
{
	double deadline = kvd_now() + ms / 1000.0;
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	char *p = buf;
	ssize_t n;

	while (len) {
		int left = (int)((deadline - kvd_now()) * 1000);

		if (left <= 0)
			return -ETIMEDOUT;
		if (poll(&pfd, 1, left) <= 0)
			continue;
		n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == ECONNRESET)
			return -EPIPE;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EPIPE;
		p += n;
		len -= n;
	}
	return 0;
}

/* One reply (framed by its len).  0, -EPIPE (closed), -ETIMEDOUT, -EPROTO. */
static int raw_recv(int fd, struct raw_reply *r, int ms)
{
	int ret = raw_read(fd, &r->h, HDR, ms);

	if (ret)
		return ret;
	if (r->h.magic != KVS_MSG_MAGIC || r->h.len < HDR || r->h.len - HDR > sizeof(r->body))
		return -EPROTO;
	return raw_read(fd, r->body, r->h.len - HDR, ms);
}

/* Send a request and read its reply: 0 (result in r->h.result) or -errno. */
static int raw_call(int fd, __u32 cmd, const void *st, size_t usize, const void *data,
		    size_t dlen, struct raw_reply *r)
{
	size_t cap = HDR + usize + dlen;
	void *buf = malloc(cap);
	int ret;

	if (!buf)
		return -ENOMEM;
	raw_build(buf, cmd, st, usize, data, dlen, 42);
	ret = raw_send(fd, buf, cap, NULL, 0);
	free(buf);
	return ret ? ret : raw_recv(fd, r, 5000);
}

/* Expect the daemon to close the connection without a reply: 0, or -errno. */
static int raw_expect_closed(int fd, int ms)
{
	struct raw_reply *r = malloc(sizeof(*r));
	int ret;

	if (!r)
		return -ENOMEM;
	ret = raw_recv(fd, r, ms);
	free(r);
	return ret == -EPIPE ? 0 : (ret ? ret : -EEXIST);
}

/* The pipe's read end sees EOF: no writer is left anywhere (daemon included). */
static int pipe_writers_gone(int rfd, int ms)
{
	return kvd_wait_eof(rfd, ms);
}

/* Wait until looper @slot completed @more more rounds: 0, or -ETIMEDOUT. */
static int progress(struct loop_shm *shm, int slot, long more)
{
	long r0 = shm->rounds[slot];
	double t0 = kvd_now();

	while (shm->rounds[slot] < r0 + more) {
		if (kvd_now() - t0 > 10)
			return -ETIMEDOUT;
		kvd_sleep_ms(1);
	}
	return 0;
}

/* Command numbers the arbiter does not know. */
static const __u32 unknown_cmds[] = {
	_IOWR(KVS_IOC_MAGIC, 0x30, struct kvs_alloc),
	_IOWR(KVS_IOC_MAGIC + 1, _IOC_NR(KVS_IOC_ALLOC), struct kvs_alloc),
	_IOW(KVS_IOC_MAGIC, _IOC_NR(KVS_IOC_ALLOC), struct kvs_alloc),
	_IO(KVS_IOC_MAGIC, _IOC_NR(KVS_IOC_INFO)),
	0x5401,		/* TCGETS */
};

/* An ALLOC of 2 pages: where its data area is, and offsets outside it. */
#define ALLOC_DATA	(HDR + sizeof(struct kvs_alloc))
#define ALLOC_END	(ALLOC_DATA + 2 * sizeof(__u32))
static const __u64 bad_offsets[] = {
	0, 8, HDR, ALLOC_DATA + 4, ALLOC_END, ALLOC_END + 4096,
	1ull << 32, 1ull << 63, ~0ull, ~0ull - 3,
};

/* After each garbage case: the good client progresses, the pool is sound. */
#define ASSERT_UNDISTURBED(what) do { \
	struct kvs_pool_stats __st; \
	ASSERT_EQ(0, progress(shm, 0, 3)) TH_LOG("good client stalled after %s", what); \
	ASSERT_EQ(0, kill(self->d.pid, 0)) TH_LOG("daemon gone after %s", what); \
	stats(_metadata, self, self->pool_id, &__st); \
} while (0)

/*
 * Clients that send garbage get an error reply or a closed connection,
 * and never disturb a well-behaved client, which keeps working through
 * all of it; the invariants hold after every case.
 */
TEST_F_TIMEOUT(kvd, garbage_clients_cannot_disturb_others, 60)
{
	static unsigned char buf[1 << 16];
	struct raw_reply *r;
	struct loop_shm *shm;
	struct kvs_info info;
	struct kvs_pool_create pc;
	struct kvs_pool_attach at;
	struct kvs_alloc al;
	struct kvs_put put;
	struct kvs_lookup lk;
	struct kvs_publish pub;
	struct kvs_quota q;
	struct kvs_info now;
	struct kvs_pool_destroy dd;
	size_t len, usz;
	pid_t good;
	int fd, stall, flood, pfd[2], fds[8], i, ret, mfd;
	__u32 pages[2];

	r = calloc(1, sizeof(*r));
	ASSERT_NE(NULL, r);
	shm = mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, shm);
	memset((void *)shm, 0, sizeof(*shm));
	good = fork_kid(_metadata, self);
	if (good == 0)
		child_loop(self->d.sock, shm, 0, 5);
	ASSERT_EQ(0, progress(shm, 0, 3));
	memset(&info, 0, sizeof(info));

	/* Truncated: part of a header, then close. */
	fd = kvd_connect(self->d.sock);
	ASSERT_LE(0, fd);
	len = raw_build(buf, KVS_IOC_INFO, &info, sizeof(info), NULL, 0, 1);
	ASSERT_EQ(0, raw_send(fd, buf, 10, NULL, 0));
	close(fd);
	ASSERT_UNDISTURBED("a truncated header");

	/* Truncated: the header and half the struct, then close. */
	fd = kvd_connect(self->d.sock);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, raw_send(fd, buf, HDR + sizeof(info) / 2, NULL, 0));
	close(fd);
	ASSERT_UNDISTURBED("a truncated struct");

	/* A large message announced, 100 bytes of it sent, then close. */
	fd = kvd_connect(self->d.sock);
	ASSERT_LE(0, fd);
	((struct kvs_msg *)buf)->len = KVS_MSG_MAX;
	ASSERT_EQ(0, raw_send(fd, buf, HDR + 100, NULL, 0));
	close(fd);
	ASSERT_UNDISTURBED("a large message cut short");

	/* len below the header, above KVS_MSG_MAX, or bad magic: closed. */
	{
		static const __u32 bad_len[] = { 0, HDR - 1, KVS_MSG_MAX + 1, 0xffffffffu };

		for (i = 0; i < 5; i++) {
			fd = kvd_connect(self->d.sock);
			ASSERT_LE(0, fd);
			raw_build(buf, KVS_IOC_INFO, &info, sizeof(info), NULL, 0, 1);
			if (i < 4)
				((struct kvs_msg *)buf)->len = bad_len[i];
			else
				((struct kvs_msg *)buf)->magic = 0x3153564c;
			ASSERT_EQ(0, raw_send(fd, buf, len, NULL, 0));
			ASSERT_EQ(0, raw_expect_closed(fd, 5000)) TH_LOG("case %d", i);
			close(fd);
		}
	}
	ASSERT_UNDISTURBED("bad lengths and magic");

	/* A len past the message: it swallows the next one's start, the rest cannot be framed. */
	fd = kvd_connect(self->d.sock);
	ASSERT_LE(0, fd);
	len = raw_build(buf, KVS_IOC_INFO, &info, sizeof(info), NULL, 0, 7);
	((struct kvs_msg *)buf)->len = len + 32;
	raw_build(buf + len, KVS_IOC_INFO, &info, sizeof(info), NULL, 0, 8);
	ASSERT_EQ(0, raw_send(fd, buf, 2 * len, NULL, 0));
	ASSERT_EQ(0, raw_recv(fd, r, 5000));
	ASSERT_EQ(7, r->h.seq);
	ASSERT_EQ(0, r->h.result);
	ASSERT_EQ(0, raw_expect_closed(fd, 5000));
	close(fd);
	ASSERT_UNDISTURBED("an overlong len");

	/* Unknown commands: ENOTTY, and the connection stays usable. */
	fd = kvd_connect(self->d.sock);
	ASSERT_LE(0, fd);
	memset(&al, 0, sizeof(al));
	for (i = 0; i < (int)(sizeof(unknown_cmds) / sizeof(unknown_cmds[0])); i++) {
		ASSERT_EQ(0, raw_call(fd, unknown_cmds[i], &al, _IOC_SIZE(unknown_cmds[i]),
				      NULL, 0, r));
		ASSERT_EQ(-ENOTTY, r->h.result) TH_LOG("cmd 0x%x", unknown_cmds[i]);
		ASSERT_EQ(unknown_cmds[i], r->h.cmd);
	}
	ASSERT_EQ(0, raw_call(fd, KVS_IOC_INFO, &info, sizeof(info), NULL, 0, r));
	ASSERT_EQ(0, r->h.result);
	ASSERT_EQ(HDR + sizeof(info), r->h.len);
	ASSERT_EQ(KVS_ABI_VERSION, ((struct kvs_info *)r->body)->abi_version);

	/* A struct longer than known: a non-zero tail is E2BIG, a zero one works. */
	memset(buf, 0, sizeof(struct kvs_info) + 64);
	usz = sizeof(struct kvs_info) + 64;
	buf[usz - 1] = 1;
	ASSERT_EQ(0, raw_call(fd, _IOC(_IOC_READ | _IOC_WRITE, KVS_IOC_MAGIC, 0, usz), buf, usz,
			      NULL, 0, r));
	ASSERT_EQ(-E2BIG, r->h.result);
	buf[usz - 1] = 0;
	ASSERT_EQ(0, raw_call(fd, _IOC(_IOC_READ | _IOC_WRITE, KVS_IOC_MAGIC, 0, usz), buf, usz,
			      NULL, 0, r));
	ASSERT_EQ(0, r->h.result);
	ASSERT_EQ(HDR + usz, r->h.len);

	/* len too short for the command's struct: EINVAL, a bare header back. */
	len = raw_build(buf, KVS_IOC_INFO, &info, 4, NULL, 0, 9);
	ASSERT_EQ(0, raw_send(fd, buf, len, NULL, 0));
	ASSERT_EQ(0, raw_recv(fd, r, 5000));
	ASSERT_EQ(-EINVAL, r->h.result);
	ASSERT_EQ(HDR, r->h.len);

	/* result, out_off or out_len set in a request: EINVAL. */
	for (i = 0; i < 3; i++) {
		struct kvs_msg *h = (struct kvs_msg *)buf;

		len = raw_build(buf, KVS_IOC_INFO, &info, sizeof(info), NULL, 0, 10 + i);
		if (i == 0)
			h->result = -1;
		else if (i == 1)
			h->out_off = HDR;
		else
			h->out_len = 4;
		ASSERT_EQ(0, raw_send(fd, buf, len, NULL, 0));
		ASSERT_EQ(0, raw_recv(fd, r, 5000));
		ASSERT_EQ(-EINVAL, r->h.result) TH_LOG("field %d", i);
		ASSERT_EQ(10 + i, r->h.seq);
	}

	/* Pipelined: three requests in one write, three replies in order. */
	len = 0;
	for (i = 0; i < 3; i++)
		len += raw_build(buf + len, KVS_IOC_INFO, &info, sizeof(info), NULL, 0, 101 + i);
	ASSERT_EQ(0, raw_send(fd, buf, len, NULL, 0));
	for (i = 0; i < 3; i++) {
		ASSERT_EQ(0, raw_recv(fd, r, 5000));
		ASSERT_EQ(101 + i, r->h.seq);
		ASSERT_EQ(0, r->h.result);
	}
	ASSERT_UNDISTURBED("unknown commands and bad structs");

	/* A descriptor where none belongs: EINVAL, and the daemon keeps no copy. */
	ASSERT_EQ(0, pipe(pfd));
	len = raw_build(buf, KVS_IOC_INFO, &info, sizeof(info), NULL, 0, 20);
	ASSERT_EQ(0, raw_send(fd, buf, len, &pfd[1], 1));
	ASSERT_EQ(0, raw_recv(fd, r, 5000));
	ASSERT_EQ(-EINVAL, r->h.result);
	close(pfd[1]);
	ASSERT_EQ(0, pipe_writers_gone(pfd[0], 5000)) TH_LOG("the daemon kept the stray descriptor");
	close(pfd[0]);

	/* POOL_CREATE and descriptors: too many, one with mem_fd -1, none with 0, not a file. */
	memset(&now, 0, sizeof(now));
	ASSERT_EQ(0, kv_arbiter_call(self->ctl, KVS_IOC_INFO, &now));
	memset(&pc, 0, sizeof(pc));
	snprintf(pc.name, sizeof(pc.name), "raw");
	pc.n_pages = 4;
	pc.geom.n_layers = 2;
	pc.geom.n_kv_heads = 2;
	pc.geom.head_dim = 16;
	pc.geom.tokens_per_page = 16;
	pc.geom.dtype = KVS_DTYPE_F16;
	pc.mode = 0600;
	ASSERT_EQ(0, pipe(pfd));
	for (i = 0; i < 8; i++)
		fds[i] = pfd[1];
	pc.mem_fd = 0;
	len = raw_build(buf, KVS_IOC_POOL_CREATE, &pc, sizeof(pc), NULL, 0, 21);
	ASSERT_EQ(0, raw_send(fd, buf, len, fds, 8));
	ASSERT_EQ(0, raw_recv(fd, r, 5000));
	ASSERT_EQ(-EINVAL, r->h.result);
	ASSERT_EQ(0, raw_send(fd, buf, len, fds, 2));
	ASSERT_EQ(0, raw_recv(fd, r, 5000));
	ASSERT_EQ(-EINVAL, r->h.result);
	ASSERT_EQ(0, raw_send(fd, buf, len, fds, 1));		/* a pipe is no memory */
	ASSERT_EQ(0, raw_recv(fd, r, 5000));
	ASSERT_EQ(-EINVAL, r->h.result);
	ASSERT_EQ(0, raw_send(fd, buf, len, NULL, 0));		/* mem_fd 0, nothing sent */
	ASSERT_EQ(0, raw_recv(fd, r, 5000));
	ASSERT_EQ(-EBADF, r->h.result);
	pc.mem_fd = -1;
	len = raw_build(buf, KVS_IOC_POOL_CREATE, &pc, sizeof(pc), NULL, 0, 22);
	ASSERT_EQ(0, raw_send(fd, buf, len, fds, 1));		/* sent, but mem_fd -1 */
	ASSERT_EQ(0, raw_recv(fd, r, 5000));
	ASSERT_EQ(-EINVAL, r->h.result);
	pc.mem_fd = 3;
	len = raw_build(buf, KVS_IOC_POOL_CREATE, &pc, sizeof(pc), NULL, 0, 23);
	ASSERT_EQ(0, raw_send(fd, buf, len, NULL, 0));		/* no descriptor 3 on the wire */
	ASSERT_EQ(0, raw_recv(fd, r, 5000));
	ASSERT_EQ(-EBADF, r->h.result);
	close(pfd[1]);
	ASSERT_EQ(0, pipe_writers_gone(pfd[0], 5000)) TH_LOG("the daemon kept a refused descriptor");
	close(pfd[0]);
	/* A memfd with mem_fd 0 is the right way: the pool exists, then goes. */
	mfd = sealed_memfd("kvd-raw", 4 * PAGE_BYTES);
	ASSERT_LE(0, mfd);
	pc.mem_fd = 0;
	len = raw_build(buf, KVS_IOC_POOL_CREATE, &pc, sizeof(pc), NULL, 0, 24);
	ASSERT_EQ(0, raw_send(fd, buf, len, &mfd, 1));
	close(mfd);
	ASSERT_EQ(0, raw_recv(fd, r, 5000));
	ASSERT_EQ(0, r->h.result);
	ASSERT_EQ(0, ((struct kvs_pool_create *)r->body)->mem_fd);
	memset(&dd, 0, sizeof(dd));
	dd.pool_id = ((struct kvs_pool_create *)r->body)->pool_id;
	ASSERT_NE(0, dd.pool_id);
	ASSERT_EQ(0, raw_call(fd, KVS_IOC_POOL_DESTROY, &dd, sizeof(dd), NULL, 0, r));
	ASSERT_EQ(0, r->h.result);
	memset(&info, 0, sizeof(info));
	ASSERT_EQ(0, kv_arbiter_call(self->ctl, KVS_IOC_INFO, &info));
	ASSERT_EQ(now.n_pools, info.n_pools);
	memset(&info, 0, sizeof(info));
	ASSERT_UNDISTURBED("descriptors");

	/* Arrays outside the data area: EFAULT, nothing taken. */
	memset(&at, 0, sizeof(at));
	snprintf(at.name, sizeof(at.name), "%s", POOL);
	ASSERT_EQ(0, raw_call(fd, KVS_IOC_POOL_ATTACH, &at, sizeof(at), NULL, 0, r));
	ASSERT_EQ(0, r->h.result);
	for (i = 0; i < (int)(sizeof(bad_offsets) / sizeof(bad_offsets[0])); i++) {
		memset(&al, 0, sizeof(al));
		al.count = 2;
		al.pages = bad_offsets[i];
		ASSERT_EQ(0, raw_call(fd, KVS_IOC_ALLOC, &al, sizeof(al), pages,
				      sizeof(pages), r));
		ASSERT_EQ(-EFAULT, r->h.result) TH_LOG("offset 0x%llx",
							(unsigned long long)bad_offsets[i]);
		ASSERT_EQ(0, r->h.out_len);
	}
	/* A count whose array runs past the end. */
	memset(&al, 0, sizeof(al));
	al.count = 3;
	al.pages = ALLOC_DATA;
	ASSERT_EQ(0, raw_call(fd, KVS_IOC_ALLOC, &al, sizeof(al), pages, sizeof(pages), r));
	ASSERT_EQ(-EFAULT, r->h.result);
	memset(&q, 0, sizeof(q));
	ASSERT_EQ(0, raw_call(fd, KVS_IOC_QUOTA, &q, sizeof(q), NULL, 0, r));
	ASSERT_EQ(0, r->h.result);
	ASSERT_EQ(0, ((struct kvs_quota *)r->body)->held);

	/* The same, well placed: two pages, written back where they belong. */
	al.count = 2;
	ASSERT_EQ(0, raw_call(fd, KVS_IOC_ALLOC, &al, sizeof(al), pages, sizeof(pages), r));
	ASSERT_EQ(0, r->h.result);
	ASSERT_EQ(ALLOC_DATA, r->h.out_off);
	ASSERT_EQ(sizeof(pages), r->h.out_len);
	memcpy(pages, r->body + sizeof(al), sizeof(pages));
	ASSERT_LT(pages[0], POOL_PAGES);
	ASSERT_LT(pages[1], POOL_PAGES);
	ASSERT_NE(pages[0], pages[1]);

	/* LOOKUP and PUBLISH with their arrays outside: EFAULT. */
	memset(&lk, 0, sizeof(lk));
	lk.count = 1;
	lk.keys = HDR + sizeof(lk) + 4096;
	lk.pages = HDR + sizeof(lk);
	ASSERT_EQ(0, raw_call(fd, KVS_IOC_LOOKUP, &lk, sizeof(lk), pages, 4, r));
	ASSERT_EQ(-EFAULT, r->h.result);
	memset(&pub, 0, sizeof(pub));
	pub.count = 1;
	pub.entries = 0;
	ASSERT_EQ(0, raw_call(fd, KVS_IOC_PUBLISH, &pub, sizeof(pub), NULL, 0, r));
	ASSERT_EQ(-EFAULT, r->h.result);
	pub.entries = HDR + sizeof(pub);	/* one entry, but only half of it there */
	ASSERT_EQ(0, raw_call(fd, KVS_IOC_PUBLISH, &pub, sizeof(pub), buf,
			      sizeof(struct kvs_publish_entry) / 2, r));
	ASSERT_EQ(-EFAULT, r->h.result);

	memset(&put, 0, sizeof(put));
	put.count = 2;
	put.pages = HDR + sizeof(put);
	ASSERT_EQ(0, raw_call(fd, KVS_IOC_PUT, &put, sizeof(put), pages, sizeof(pages), r));
	ASSERT_EQ(0, r->h.result);
	ASSERT_EQ(0, raw_call(fd, KVS_IOC_QUOTA, &q, sizeof(q), NULL, 0, r));
	ASSERT_EQ(0, ((struct kvs_quota *)r->body)->held);
	ASSERT_UNDISTURBED("offsets outside the data area");

	/* A client stalled in the middle of a message, kept open to the end. */
	stall = kvd_connect(self->d.sock);
	ASSERT_LE(0, stall);
	len = raw_build(buf, KVS_IOC_INFO, &info, sizeof(info), NULL, 0, 30);
	ASSERT_EQ(0, raw_send(stall, buf, HDR + 10, NULL, 0));
	ASSERT_UNDISTURBED("a stalled client");

	/* A client that sends and never reads: the daemon stops reading it. */
	flood = kvd_connect(self->d.sock);
	ASSERT_LE(0, flood);
	ASSERT_EQ(0, fcntl(flood, F_SETFL, O_NONBLOCK));
	len = 0;
	while (len + HDR + sizeof(info) <= sizeof(buf))
		len += raw_build(buf + len, KVS_IOC_INFO, &info, sizeof(info), NULL, 0, 40);
	for (i = 0; i < 4096; i++) {
		ssize_t n = send(flood, buf, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EAGAIN)
			break;
		ASSERT_LT(0, n);
		if ((size_t)n < len)
			break;	/* the tail of a message is stuck; no matter */
	}
	ASSERT_LT(i, 4096) TH_LOG("the daemon read forever without being read");
	ASSERT_UNDISTURBED("a client that never reads");
	close(flood);
	close(stall);
	close(fd);
	ASSERT_UNDISTURBED("closing them all");

	/* The good client stops by itself, cleanly. */
	shm->stop = 1;
	ASSERT_KID_OK(good);
	ret = kvd_settle(&self->d);
	ASSERT_EQ(0, ret);
	assert_all_gone(_metadata, self, self->pool_id);
	munmap((void *)shm, sizeof(*shm));
	free(r);
}

/* ------------------------------------------------------------------ */
/* quota                                                              */
/* ------------------------------------------------------------------ */

/*
 * A pool created over the socket with its own memory (a memfd passed as
 * SCM_RIGHTS) and a quota of 12: one process at its quota gets EDQUOT
 * while the others still allocate until the pool, not the quota, is the
 * limit; once it dies, its pages come back.
 */
/* The descriptors kvshared holds now (/proc/<pid>/fd), or -1. */
static int daemon_fds(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	return test_fds_in(path);
}

/*
 * Every descriptor a client sends goes to its uid's close queue, and the
 * closers close them all: full messages of SCM_MAX_FD, and a message left
 * unread in a connection kvshared closes.  Copies of a pipe's write end
 * make a leak visible (its read end never sees EOF), and kvshared's
 * descriptor count must come back to where it was.
 */
TEST_F_TIMEOUT(kvd, descriptors_in_bulk_are_all_closed, 60)
{
	static unsigned char buf[4096];
	struct raw_reply *r;
	struct kvs_info info;
	int fd, pfd[2], before, after = -1, i, copies[BULK_FDS];
	size_t len;

	r = calloc(1, sizeof(*r));
	ASSERT_NE(NULL, r);
	ASSERT_EQ(0, kvd_settle(&self->d));
	before = daemon_fds(self->d.pid);
	ASSERT_LT(0, before) TH_LOG("/proc/%d/fd: %s", self->d.pid, strerror(errno));
	ASSERT_EQ(0, pipe(pfd));
	for (i = 0; i < BULK_FDS; i++)
		copies[i] = pfd[1];

	/* 40 requests with 253 descriptors each: EINVAL, none kept. */
	fd = kvd_connect(self->d.sock);
	ASSERT_LE(0, fd);
	memset(&info, 0, sizeof(info));
	for (i = 0; i < BULK_MSGS; i++) {
		len = raw_build(buf, KVS_IOC_INFO, &info, sizeof(info), NULL, 0, 1000 + i);
		ASSERT_EQ(0, raw_send(fd, buf, len, copies, BULK_FDS));
		ASSERT_EQ(0, raw_recv(fd, r, 5000));
		ASSERT_EQ(1000 + i, r->h.seq);
		ASSERT_EQ(-EINVAL, r->h.result);
	}
	close(fd);

	/*
	 * A header kvshared refuses, and behind it a message with 253
	 * descriptors that it never reads: closing the connection must not
	 * lose them to the loop, nor keep them.
	 */
	fd = kvd_connect(self->d.sock);
	ASSERT_LE(0, fd);
	memset(buf, 0xa5, HDR);
	ASSERT_EQ(0, raw_send(fd, buf, HDR, NULL, 0));
	len = raw_build(buf, KVS_IOC_INFO, &info, sizeof(info), NULL, 0, 2);
	ASSERT_EQ(0, raw_send(fd, buf, len, copies, BULK_FDS));
	ASSERT_EQ(0, raw_expect_closed(fd, 5000));
	close(fd);

	close(pfd[1]);
	ASSERT_EQ(0, pipe_writers_gone(pfd[0], 10000))
		TH_LOG("kvshared kept a descriptor it was sent");
	close(pfd[0]);
	for (i = 0; i < 500; i++) {
		after = daemon_fds(self->d.pid);
		if (after == before)
			break;
		kvd_sleep_ms(10);
	}
	ASSERT_EQ(before, after) TH_LOG("kvshared holds %d descriptors, %d before", after, before);
	ASSERT_EQ(0, kv_arbiter_call(self->ctl, KVS_IOC_INFO, &info));
	free(r);
}

/*
 * A request whose last byte is sent out of band, with a descriptor on it.
 * Without SO_OOBINLINE kvshared's reads skip that byte, and the kernel
 * releases its descriptors inside the read, on kvshared's loop (a FUSE
 * file's release may then never return) and the request never completes.
 * Inline, the byte ends the request and the descriptor is refused
 * (EINVAL) through the close queue like any other.
 */
TEST_F(kvd, out_of_band_descriptors_arrive_inline)
{
	static unsigned char buf[512];
	struct raw_reply *r;
	struct kvs_info info;
	int fd, pfd[2];
	ssize_t n;
	size_t len;

	r = calloc(1, sizeof(*r));
	ASSERT_NE(NULL, r);
	ASSERT_EQ(0, pipe(pfd));
	fd = kvd_connect(self->d.sock);
	ASSERT_LE(0, fd);
	memset(&info, 0, sizeof(info));
	len = raw_build(buf, KVS_IOC_INFO, &info, sizeof(info), NULL, 0, 77);
	ASSERT_EQ(0, raw_send(fd, buf, len - 1, NULL, 0));

	n = test_send_fds(fd, buf + len - 1, 1, &pfd[1], 1, MSG_OOB);
	if (n != 1) {
		close(fd);
		close(pfd[0]);
		close(pfd[1]);
		free(r);
		if (n == -EOPNOTSUPP)
			SKIP(return, "this kernel has no out-of-band data on unix sockets");
		ASSERT_EQ(1, n) TH_LOG("sendmsg(MSG_OOB): %s", strerror((int)-n));
	}
	ASSERT_EQ(0, raw_recv(fd, r, 5000)) TH_LOG("the out-of-band byte never reached kvshared");
	ASSERT_EQ(77, r->h.seq);
	ASSERT_EQ(-EINVAL, r->h.result);
	close(fd);
	close(pfd[1]);
	ASSERT_EQ(0, pipe_writers_gone(pfd[0], 10000)) TH_LOG("kvshared kept the descriptor");
	close(pfd[0]);
	free(r);
}

TEST_F(kvd, quota_exhausted_while_others_allocate)
{
	struct kvs_pool_create pc;
	struct kvs_pool_destroy d;
	struct kvs_pool_stats st;
	struct kvs_quota q;
	struct kv_pool *b, *c;
	__u32 pb[12], pc_[12], x;
	int sync[2], mfd;
	pid_t a;
	char ch;

	mfd = sealed_memfd("kvd-quota", 32 * PAGE_BYTES);
	ASSERT_LE(0, mfd);
	memset(&pc, 0, sizeof(pc));
	snprintf(pc.name, sizeof(pc.name), "q");
	pc.n_pages = 32;
	pc.geom.n_layers = 2;
	pc.geom.n_kv_heads = 2;
	pc.geom.head_dim = 16;
	pc.geom.tokens_per_page = 16;
	pc.geom.dtype = KVS_DTYPE_F16;
	pc.mode = 0666;
	pc.mem_fd = mfd;
	pc.max_pages_per_file = 12;
	ASSERT_EQ(0, kv_arbiter_call(self->ctl, KVS_IOC_POOL_CREATE, &pc));
	close(mfd);

	ASSERT_EQ(0, pipe(sync));
	a = fork_kid(_metadata, self);
	if (a == 0) {
		struct kv_pool *pool;
		__u32 p[13], r[1];

		KVD_CHILD_EQ(0, kv_pool_open(self->d.sock, "q", 0, 0, &pool));
		KVD_CHILD_EQ(12, kv_pool_info(pool)->max_pages_per_file);
		KVD_CHILD_EQ(0, kv_alloc(kv_pool_arbiter(pool), 12, p));
		KVD_CHILD_EQ(-EDQUOT, kv_alloc(kv_pool_arbiter(pool), 1, p + 12));
		/* References count against the quota too. */
		KVD_CHILD_EQ(0, kv_put(kv_pool_arbiter(pool), p + 11, 1));
		KVD_CHILD_EQ(0, publish_chain(kv_pool_arbiter(pool), p, 1, KVS_NO_PAGE, 5, 0, NULL));
		KVD_CHILD_EQ(1, lookup_chain(kv_pool_arbiter(pool), 5, 0, 1, r));
		KVD_CHILD_EQ(-EDQUOT, lookup_chain(kv_pool_arbiter(pool), 5, 0, 1, r));
		KVD_CHILD_EQ(12, held(kv_pool_arbiter(pool)));
		KVD_CHILD_EQ(0, xwrite(sync[1], "a", 1));
		hang();
	}
	ASSERT_EQ(0, xread(sync[0], &ch, 1));

	ASSERT_EQ(0, kv_pool_open(self->d.sock, "q", 0, 0, &b));
	ASSERT_EQ(0, kv_pool_open(self->d.sock, "q", 0, 0, &c));
	ASSERT_EQ(0, kv_alloc(kv_pool_arbiter(b), 12, pb));
	ASSERT_EQ(0, kv_alloc(kv_pool_arbiter(c), 9, pc_));
	stats(_metadata, self, pc.pool_id, &st);
	ASSERT_EQ(0, st.n_free);
	ASSERT_EQ(3, st.n_files);
	/* Now the pool, not the quota, is what stops c; b is at its quota. */
	ASSERT_EQ(-ENOSPC, kv_alloc(kv_pool_arbiter(c), 1, &x));
	ASSERT_EQ(-EDQUOT, kv_alloc(kv_pool_arbiter(b), 1, &x));
	/* A quota below what a file holds is refused; above the pool's, too. */
	memset(&q, 0, sizeof(q));
	q.flags = KVS_QUOTA_SET;
	q.max_pages = 8;
	ASSERT_EQ(-EINVAL, kv_arbiter_call(kv_pool_arbiter(c), KVS_IOC_QUOTA, &q));
	q.max_pages = 13;
	ASSERT_EQ(-EINVAL, kv_arbiter_call(kv_pool_arbiter(c), KVS_IOC_QUOTA, &q));

	ASSERT_KID_KILL9(a);
	ASSERT_EQ(0, kv_alloc(kv_pool_arbiter(c), 3, pc_ + 9));
	ASSERT_EQ(-EDQUOT, kv_alloc(kv_pool_arbiter(c), 1, &x));
	stats(_metadata, self, pc.pool_id, &st);
	ASSERT_EQ(24, st.n_owned);
	ASSERT_EQ(2, st.n_files);
	ASSERT_EQ(1, st.n_cached);		/* a's published page */
	ASSERT_EQ(1, st.alloc_fails);		/* the ENOSPC; EDQUOT is no lack of pages */
	kv_pool_close(b);
	kv_pool_close(c);
	ASSERT_EQ(0, kvd_settle(&self->d));
	stats(_metadata, self, pc.pool_id, &st);
	ASSERT_EQ(0, st.n_files);
	ASSERT_EQ(0, st.n_held);
	memset(&d, 0, sizeof(d));
	d.pool_id = pc.pool_id;
	ASSERT_EQ(0, kv_arbiter_call(self->ctl, KVS_IOC_POOL_DESTROY, &d));
	assert_all_gone(_metadata, self, self->pool_id);
	close(sync[0]);
	close(sync[1]);
}

/* ------------------------------------------------------------------ */
/* the daemon going away                                              */
/* ------------------------------------------------------------------ */

struct restart_report {
	__u32 pages[2];
	__u64 ino;
};

/*
 * kvshared killed with SIGKILL under two clients that hold pages and
 * have the memory mapped: every call they make fails with ENOTCONN (and
 * keeps failing once a new daemon runs: nothing reconnects behind their
 * back); after they reconnect, attach and map again they work on the new
 * daemon, whose pool is new memory with nothing cached.
 */
TEST_F_TIMEOUT(kvd, daemon_killed_and_restarted_under_clients, 60)
{
	enum { NCLI = 2 };
	struct restart_report rep[NCLI];
	struct kvs_pool_stats st;
	struct kvs_info in;
	int up[2], down[NCLI][2], i;
	pid_t cli[NCLI];
	char ch = 1;

	ASSERT_EQ(0, pipe(up));
	for (i = 0; i < NCLI; i++) {
		ASSERT_EQ(0, pipe(down[i]));
		cli[i] = fork_kid(_metadata, self);
		if (cli[i] == 0) {
			struct restart_report r;
			struct kv_pool *pool;
			struct kvs_info cin;
			struct stat s;
			__u32 p[2], one;
			double t0;
			int ret;

			KVD_CHILD_EQ(0, kv_pool_open(self->d.sock, POOL, 0, 0, &pool));
			KVD_CHILD_EQ(0, kv_alloc(kv_pool_arbiter(pool), 2, r.pages));
			fill_page(kv_page_addr(pool, r.pages[0]), 4000 + i);
			KVD_CHILD_EQ(0, publish_chain(kv_pool_arbiter(pool), r.pages, 1,
						      KVS_NO_PAGE, 40 + i, 0, NULL));
			KVD_CHILD_EQ(0, fstat(kv_pool_info(pool)->mem_fd, &s));
			r.ino = s.st_ino;
			KVD_CHILD_EQ(0, xwrite(up[1], &r, sizeof(r)));

			/* The daemon is killed. */
			KVD_CHILD_EQ(0, xread(down[i][0], &ch, 1));
			KVD_CHILD_EQ(-ENOTCONN, kv_alloc(kv_pool_arbiter(pool), 1, &one));
			KVD_CHILD_EQ(-ENOTCONN, lookup_chain(kv_pool_arbiter(pool), 40 + i, 0, 1, p));
			KVD_CHILD_EQ(-ENOTCONN, kv_put(kv_pool_arbiter(pool), r.pages, 2));
			/* The mapping itself stays readable: the memfd outlives the daemon. */
			KVD_CHILD_TRUE(page_is(kv_page_addr(pool, r.pages[0]), 4000 + i));
			KVD_CHILD_EQ(0, xwrite(up[1], "k", 1));

			/* A new daemon runs: the old handle still knows it is dead. */
			KVD_CHILD_EQ(0, xread(down[i][0], &ch, 1));
			memset(&cin, 0, sizeof(cin));
			KVD_CHILD_EQ(-ENOTCONN, kv_arbiter_call(kv_pool_arbiter(pool), KVS_IOC_INFO, &cin));
			kv_pool_close(pool);
			t0 = kvd_now();
			while ((ret = kv_pool_open(self->d.sock, POOL, 0, 0, &pool)) &&
			       kvd_now() - t0 < 10)
				kvd_sleep_ms(10);
			KVD_CHILD_EQ(0, ret);
			KVD_CHILD_EQ(0, fstat(kv_pool_info(pool)->mem_fd, &s));
			KVD_CHILD_TRUE(s.st_ino != r.ino);		/* new memory */
			KVD_CHILD_EQ(0, lookup_chain(kv_pool_arbiter(pool), 40 + i, 0, 1, p));
			KVD_CHILD_EQ(0, kv_alloc(kv_pool_arbiter(pool), 2, p));
			if (i == 0) {
				/* It publishes on the new daemon ... */
				fill_page(kv_page_addr(pool, p[0]), 5000);
				KVD_CHILD_EQ(0, publish_chain(kv_pool_arbiter(pool), p, 1,
							      KVS_NO_PAGE, 50, 0, NULL));
				KVD_CHILD_EQ(0, xwrite(up[1], "p", 1));
				KVD_CHILD_EQ(0, xread(down[i][0], &ch, 1));
			} else {
				/* ... and the other finds it, with its bytes. */
				KVD_CHILD_EQ(0, xread(down[i][0], &ch, 1));
				KVD_CHILD_EQ(1, lookup_chain(kv_pool_arbiter(pool), 50, 0, 1, &one));
				KVD_CHILD_TRUE(page_is(kv_page_addr(pool, one), 5000));
			}
			KVD_CHILD_EQ(3, held(kv_pool_arbiter(pool)) + (i == 0));
			kv_pool_close(pool);
			_exit(0);
		}
	}
	for (i = 0; i < NCLI; i++)
		ASSERT_EQ(0, xread(up[0], &rep[i], sizeof(rep[i])));
	stats(_metadata, self, self->pool_id, &st);
	ASSERT_EQ(NCLI, st.n_files);
	ASSERT_EQ(2 * NCLI, st.n_held);

	/* Crash. */
	ASSERT_EQ(0, kvd_kill9(&self->d));
	memset(&in, 0, sizeof(in));
	ASSERT_EQ(-ENOTCONN, kv_arbiter_call(self->ctl, KVS_IOC_INFO, &in));
	for (i = 0; i < NCLI; i++)
		ASSERT_EQ(0, xwrite(down[i][1], &ch, 1));
	for (i = 0; i < NCLI; i++)
		ASSERT_EQ(0, xread(up[0], &ch, 1));

	/* Restart on the same socket (the stale one is replaced). */
	ASSERT_EQ(0, start_daemon(self, NULL)) TH_LOG("%s", self->why);
	ASSERT_EQ(1, kvd_logged(&self->d, "kvshared: ready"));
	ASSERT_EQ(-ENOTCONN, kv_arbiter_call(self->ctl, KVS_IOC_INFO, &in));
	kv_arbiter_close(self->ctl);
	self->ctl = NULL;
	ASSERT_EQ(0, kv_arbiter_open(self->d.sock, KV_ARBITER_NO_URING, &self->ctl));
	memset(&self->base, 0, sizeof(self->base));
	ASSERT_EQ(0, kv_arbiter_call(self->ctl, KVS_IOC_INFO, &self->base));
	ASSERT_EQ(1, self->base.n_pools);
	self->pool_id = kvd_pool_id(self->ctl, POOL);
	ASSERT_NE(0, self->pool_id);
	stats(_metadata, self, self->pool_id, &st);
	ASSERT_EQ(POOL_PAGES, st.n_free);
	ASSERT_EQ(0, st.n_files);

	for (i = 0; i < NCLI; i++)
		ASSERT_EQ(0, xwrite(down[i][1], &ch, 1));
	ASSERT_EQ(0, xread(up[0], &ch, 1));	/* client 0 published */
	ASSERT_EQ(0, xwrite(down[1][1], &ch, 1));
	ASSERT_KID_OK(cli[1]);
	ASSERT_EQ(0, xwrite(down[0][1], &ch, 1));
	ASSERT_KID_OK(cli[0]);
	assert_all_gone(_metadata, self, self->pool_id);
	stats(_metadata, self, self->pool_id, &st);
	ASSERT_EQ(1, st.n_cached);
	close(up[0]);
	close(up[1]);
	for (i = 0; i < NCLI; i++) {
		close(down[i][0]);
		close(down[i][1]);
	}
}

/* SIGTERM with clients attached: exit 0, socket gone, clients told. */
TEST_F(kvd, sigterm_with_clients_attached)
{
	enum { NCLI = 2 };
	int up[2], down[2], i, st;
	pid_t cli[NCLI];
	char ch = 1;

	ASSERT_EQ(0, pipe(up));
	ASSERT_EQ(0, pipe(down));
	for (i = 0; i < NCLI; i++) {
		cli[i] = fork_kid(_metadata, self);
		if (cli[i] == 0) {
			struct kv_pool *pool;
			__u32 p[3], x;

			KVD_CHILD_EQ(0, kv_pool_open(self->d.sock, POOL, 0, 0, &pool));
			KVD_CHILD_EQ(0, kv_alloc(kv_pool_arbiter(pool), 3, p));
			KVD_CHILD_EQ(0, publish_chain(kv_pool_arbiter(pool), p, 2, KVS_NO_PAGE,
						      60 + i, 0, NULL));
			KVD_CHILD_EQ(0, xwrite(up[1], "r", 1));
			KVD_CHILD_EQ(0, xread(down[0], &ch, 1));
			KVD_CHILD_EQ(-ENOTCONN, kv_alloc(kv_pool_arbiter(pool), 1, &x));
			KVD_CHILD_EQ(-ENOTCONN, kv_put(kv_pool_arbiter(pool), p, 3));
			kv_pool_close(pool);
			_exit(0);
		}
	}
	for (i = 0; i < NCLI; i++)
		ASSERT_EQ(0, xread(up[0], &ch, 1));

	ASSERT_EQ(0, kvd_stop(&self->d, self->why, sizeof(self->why))) TH_LOG("%s", self->why);
	ASSERT_TRUE(kvd_logged(&self->d, "kvshared: stopped"));
	ASSERT_NE(0, access(self->d.sock, F_OK));
	ASSERT_NE(0, access(self->d.metrics, F_OK));
	for (i = 0; i < NCLI; i++)
		ASSERT_EQ(0, xwrite(down[1], &ch, 1));
	for (i = 0; i < NCLI; i++) {
		ASSERT_EQ(cli[i], waitpid(cli[i], &st, 0));
		forget_kid(self, cli[i]);
		ASSERT_TRUE(WIFEXITED(st));
		ASSERT_EQ(0, WEXITSTATUS(st));
	}
	close(up[0]);
	close(up[1]);
	close(down[0]);
	close(down[1]);
}

/* ------------------------------------------------------------------ */
/* metrics                                                            */
/* ------------------------------------------------------------------ */

/* GET @path over the metrics unix socket: the whole response, or NULL. */
static char *scrape(const struct kvd *d, const char *method, const char *path)
{
	size_t cap = 1 << 20, len = 0;
	char *buf = malloc(cap), req[256];
	int fd = kvd_connect(d->metrics);
	double deadline = kvd_now() + 10;
	ssize_t n;

	if (!buf || fd < 0) {
		free(buf);
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	snprintf(req, sizeof(req), "%s %s HTTP/1.0\r\nHost: kvshared\r\n\r\n", method, path);
	if (xwrite(fd, req, strlen(req))) {
		close(fd);
		free(buf);
		return NULL;
	}
	while (len + 1 < cap && kvd_now() < deadline) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };

		if (poll(&pfd, 1, 1000) <= 0)
			continue;
		n = read(fd, buf + len, cap - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += n;
	}
	close(fd);
	buf[len] = '\0';
	return buf;
}

/*
 * The value of the sample whose line starts with @prefix (the metric name
 * and its labels exactly as exported), or -1 if there is none.
 */
static long long sample(const char *text, const char *prefix)
{
	size_t plen = strlen(prefix);
	const char *p = text;

	while ((p = strstr(p, prefix))) {
		if ((p == text || p[-1] == '\n') && p[plen] == ' ')
			return strtoll(p + plen + 1, NULL, 10);
		p += plen;
	}
	return -1;
}

/* The held-pages sample of the connection of process @pid in pool @pool, or -1. */
static long long client_held(const char *text, const char *pool, pid_t pid, int *n_lines)
{
	char want_pool[96], want_pid[48];
	const char *p = text;
	long long v = -1;

	snprintf(want_pool, sizeof(want_pool), "kvshare_client_held_pages{pool=\"%s\",", pool);
	snprintf(want_pid, sizeof(want_pid), ",pid=\"%d\",", (int)pid);
	*n_lines = 0;
	while ((p = strstr(p, want_pool))) {
		const char *eol = strchr(p, '\n'), *close_ = strstr(p, "} ");
		char line[512];
		size_t len = eol ? (size_t)(eol - p) : strlen(p);

		if (len >= sizeof(line))
			len = sizeof(line) - 1;
		memcpy(line, p, len);
		line[len] = '\0';
		if (strstr(line, want_pid) && close_) {
			v = strtoll(close_ + 2, NULL, 10);
			(*n_lines)++;
		}
		p += len;
	}
	return v;
}

#define ASSERT_SAMPLE(text, expected, fmt, ...) do { \
	char __name[256]; \
	snprintf(__name, sizeof(__name), fmt, ##__VA_ARGS__); \
	ASSERT_EQ((long long)(expected), sample((text), __name)) TH_LOG("%s", __name); \
} while (0)

/*
 * GET /metrics by hand over the unix endpoint: the pool's gauges and
 * counters are the arbiter's STATS, and every attached connection's
 * holdings are there under its pid.
 */
TEST_F(kvd, metrics_match_stats)
{
	struct kvs_pool_stats st;
	struct kv_pool *m;
	const char *cur;
	char *text, *body;
	struct kvs_key key;
	__u32 p[3], q[3], r[2];
	int sync[2], lines;
	pid_t x;
	char ch;
	long long sum = 0;

	ASSERT_EQ(0, pipe(sync));
	x = fork_kid(_metadata, self);
	if (x == 0) {
		struct kv_pool *pool;
		__u32 c[3];

		KVD_CHILD_EQ(0, kv_pool_open(self->d.sock, POOL, 0, 0, &pool));
		KVD_CHILD_EQ(0, kv_alloc(kv_pool_arbiter(pool), 3, c));
		KVD_CHILD_EQ(0, publish_chain(kv_pool_arbiter(pool), c, 2, KVS_NO_PAGE, 70, 0, NULL));
		KVD_CHILD_EQ(0, xwrite(sync[1], "x", 1));
		hang();
	}
	ASSERT_EQ(0, xread(sync[0], &ch, 1));
	ASSERT_EQ(0, kv_pool_open(self->d.sock, POOL, 0, 0, &m));
	ASSERT_EQ(2, lookup_chain(kv_pool_arbiter(m), 70, 0, 3, q));	/* a miss, too */
	ASSERT_EQ(0, kv_alloc(kv_pool_arbiter(m), 3, p));
	ASSERT_EQ(0, publish_chain(kv_pool_arbiter(m), p, 2, KVS_NO_PAGE, 71, 0, r));
	ASSERT_EQ(0, kv_put(kv_pool_arbiter(m), r, 2));			/* 2 cached */
	ASSERT_EQ(3, held(kv_pool_arbiter(m)));
	stats(_metadata, self, self->pool_id, &st);

	text = scrape(&self->d, "GET", "/metrics");
	ASSERT_NE(NULL, text);
	ASSERT_EQ(0, strncmp(text, "HTTP/1.0 200 ", 13)) TH_LOG("%.80s", text);
	ASSERT_NE(NULL, strstr(text, "Content-Type: text/plain; version=0.0.4"));
	body = strstr(text, "\r\n\r\n");
	ASSERT_NE(NULL, body);
	body += 4;

	ASSERT_SAMPLE(body, 1, "kvshare_up{mode=\"socket\"}");
	ASSERT_SAMPLE(body, 1, "kvshare_pools");
	ASSERT_SAMPLE(body, 3, "kvshare_connections");	/* ctl, m, x */
	ASSERT_SAMPLE(body, st.n_free, "kvshare_pool_pages{pool=\"%s\",state=\"free\"}", POOL);
	ASSERT_SAMPLE(body, st.n_owned, "kvshare_pool_pages{pool=\"%s\",state=\"owned\"}", POOL);
	ASSERT_SAMPLE(body, st.n_shared, "kvshare_pool_pages{pool=\"%s\",state=\"shared\"}", POOL);
	ASSERT_SAMPLE(body, st.n_cached, "kvshare_pool_pages{pool=\"%s\",state=\"cached\"}", POOL);
	ASSERT_EQ(2, st.n_owned);
	ASSERT_EQ(2, st.n_shared);
	ASSERT_EQ(2, st.n_cached);
	ASSERT_EQ(POOL_PAGES - 6, st.n_free);
	ASSERT_SAMPLE(body, POOL_PAGES, "kvshare_pool_size_pages{pool=\"%s\"}", POOL);
	ASSERT_SAMPLE(body, st.n_evictable, "kvshare_pool_evictable_pages{pool=\"%s\"}", POOL);
	ASSERT_SAMPLE(body, st.n_refs, "kvshare_pool_refs{pool=\"%s\"}", POOL);
	ASSERT_SAMPLE(body, st.n_held, "kvshare_pool_held_pages{pool=\"%s\"}", POOL);
	ASSERT_SAMPLE(body, 2, "kvshare_pool_files{pool=\"%s\"}", POOL);
	ASSERT_SAMPLE(body, st.allocs, "kvshare_pool_allocs_total{pool=\"%s\"}", POOL);
	ASSERT_SAMPLE(body, st.alloc_fails, "kvshare_pool_alloc_fails_total{pool=\"%s\"}", POOL);
	ASSERT_SAMPLE(body, st.publishes, "kvshare_pool_publishes_total{pool=\"%s\"}", POOL);
	ASSERT_SAMPLE(body, st.dup_publishes, "kvshare_pool_dup_publishes_total{pool=\"%s\"}", POOL);
	ASSERT_SAMPLE(body, st.lookups, "kvshare_pool_lookups_total{pool=\"%s\"}", POOL);
	ASSERT_SAMPLE(body, st.hits, "kvshare_pool_hits_total{pool=\"%s\"}", POOL);
	ASSERT_SAMPLE(body, st.lookups - st.hits, "kvshare_pool_misses_total{pool=\"%s\"}", POOL);
	ASSERT_SAMPLE(body, st.evictions, "kvshare_pool_evictions_total{pool=\"%s\"}", POOL);
	ASSERT_EQ(6, st.allocs);
	ASSERT_EQ(3, st.lookups);
	ASSERT_EQ(2, st.hits);

	/* Per connection: x holds 3 (1 owned, 2 published), m holds 3 too. */
	ASSERT_EQ(3, client_held(body, POOL, x, &lines));
	ASSERT_EQ(1, lines);
	ASSERT_EQ(3, client_held(body, POOL, getpid(), &lines));
	ASSERT_EQ(1, lines);	/* the unattached control connection has no sample */
	for (cur = body; (cur = strstr(cur, "\nkvshare_client_held_pages{pool=\"" POOL "\","));) {
		cur = strstr(cur, "} ");
		ASSERT_NE(NULL, cur);
		sum += strtoll(cur + 2, NULL, 10);
	}
	ASSERT_EQ(st.n_held, sum);
	free(text);

	/* Only GET (and HEAD) of /metrics. */
	text = scrape(&self->d, "GET", "/nope");
	ASSERT_NE(NULL, text);
	ASSERT_EQ(0, strncmp(text, "HTTP/1.0 404 ", 13));
	free(text);
	text = scrape(&self->d, "POST", "/metrics");
	ASSERT_NE(NULL, text);
	ASSERT_EQ(0, strncmp(text, "HTTP/1.0 405 ", 13));
	free(text);

	/* x goes: its sample goes, the pool's gauges follow. */
	ASSERT_KID_KILL9(x);
	stats(_metadata, self, self->pool_id, &st);
	text = scrape(&self->d, "GET", "/metrics");
	ASSERT_NE(NULL, text);
	ASSERT_EQ(-1, client_held(text, POOL, x, &lines));
	ASSERT_EQ(3, client_held(text, POOL, getpid(), &lines));
	ASSERT_SAMPLE(strstr(text, "\r\n\r\n") + 4, 2, "kvshare_connections");
	ASSERT_SAMPLE(strstr(text, "\r\n\r\n") + 4, st.n_held, "kvshare_pool_held_pages{pool=\"%s\"}", POOL);
	ASSERT_SAMPLE(strstr(text, "\r\n\r\n") + 4, st.n_shared, "kvshare_pool_pages{pool=\"%s\",state=\"shared\"}", POOL);
	ASSERT_SAMPLE(strstr(text, "\r\n\r\n") + 4, st.n_cached, "kvshare_pool_pages{pool=\"%s\",state=\"cached\"}", POOL);
	ASSERT_EQ(2, st.n_shared);	/* x's chain, still referenced by m */
	ASSERT_EQ(3, st.n_held);
	ASSERT_SAMPLE(strstr(text, "\r\n\r\n") + 4, 0, "kvshare_pool_claimed_pages{pool=\"%s\"}", POOL);
	free(text);

	/* m claims a key: the claimed gauge counts it until m puts it. */
	key = make_key(73, 0);
	ASSERT_EQ(0, kv_alloc_claim(kv_pool_arbiter(m), &key, 1, p));
	stats(_metadata, self, self->pool_id, &st);
	ASSERT_EQ(1, st.n_claimed);
	text = scrape(&self->d, "GET", "/metrics");
	ASSERT_NE(NULL, text);
	ASSERT_SAMPLE(strstr(text, "\r\n\r\n") + 4, 1, "kvshare_pool_claimed_pages{pool=\"%s\"}", POOL);
	free(text);
	ASSERT_EQ(0, kv_put(kv_pool_arbiter(m), p, 1));
	text = scrape(&self->d, "GET", "/metrics");
	ASSERT_NE(NULL, text);
	ASSERT_SAMPLE(strstr(text, "\r\n\r\n") + 4, 0, "kvshare_pool_claimed_pages{pool=\"%s\"}", POOL);
	free(text);
	kv_pool_close(m);
	assert_all_gone(_metadata, self, self->pool_id);
	stats(_metadata, self, self->pool_id, &st);
	ASSERT_EQ(4, st.n_cached);
	close(sync[0]);
	close(sync[1]);
}

/* ------------------------------------------------------------------ */
/* a second uid: attacks that must fail                               */
/* ------------------------------------------------------------------ */

#define NOBODY		65534	/* the attacker */
#define VICTIM		65533	/* another unprivileged user */
#define OTHER		65532	/* a third one */
#define G_OWNER		4242	/* owner and group of pool "g" */
#define G_GROUP		4243

/* In a child: become @uid (gid @uid) with @n supplementary @groups. */

/* kvshare_close_@what from the metrics, waited for (at most 5 s) to be @want. */
static long long close_gauge(const struct kvd *d, const char *what, long long want)
{
	char name[64];
	long long v = -1;
	int i;

	snprintf(name, sizeof(name), "kvshare_close_%s", what);
	for (i = 0; i < 500; i++) {
		char *text = scrape(d, "GET", "/metrics");

		v = text ? sample(text, name) : -1;
		free(text);
		if (v == want)
			break;
		kvd_sleep_ms(10);
	}
	return v;
}

/*
 * A closer stuck in close() shows in the metrics, and the gauge comes back
 * when it is freed.  A pipe's close waits for the pipe's lock, which a
 * reader holds while it copies into a page that never arrives (a
 * userfaultfd page here, a FUSE file's page for an attacker); kvshared is
 * sent the pipe's write end, refuses it and leaves it to a closer.
 */
TEST_F_TIMEOUT(kvd, metrics_count_a_closer_stuck_in_close, 60)
{
	static unsigned char buf[512];
	struct uffdio_zeropage zp = { .range.len = 4096 };
	struct kvd_stuck_read w;
	struct raw_reply *r;
	struct kvs_info info;
	pthread_t t;
	int fd, uffd, pfd[2];
	size_t len;
	void *page;

	ASSERT_EQ(0, close_gauge(&self->d, "busy", 0));
	ASSERT_EQ(0, close_gauge(&self->d, "queued", 0));
	page = kvd_stuck_page(&uffd);
	if (!page)
		SKIP(return, "no userfaultfd: %s", strerror(errno));
	r = calloc(1, sizeof(*r));
	ASSERT_NE(NULL, r);
	ASSERT_EQ(0, pipe(pfd));
	ASSERT_EQ(1, write(pfd[1], "x", 1));
	w.fd = pfd[0];
	w.page = page;
	ASSERT_EQ(0, pthread_create(&t, NULL, kvd_read_into, &w));
	ASSERT_EQ(0, kvd_wait_fault(uffd, 5000));

	fd = kvd_connect(self->d.sock);
	ASSERT_LE(0, fd);
	memset(&info, 0, sizeof(info));
	len = raw_build(buf, KVS_IOC_INFO, &info, sizeof(info), NULL, 0, 5);
	/*
	 * The write end rides on the first byte, and ours is closed before
	 * the rest is sent: kvshared's copy is then the last, whose close
	 * releases the pipe (and takes its lock).
	 */
	ASSERT_EQ(0, raw_send(fd, buf, 1, &pfd[1], 1));
	close(pfd[1]);
	ASSERT_EQ(0, raw_send(fd, buf + 1, len - 1, NULL, 0));
	ASSERT_EQ(0, raw_recv(fd, r, 5000));
	ASSERT_EQ(-EINVAL, r->h.result);
	EXPECT_EQ(1, close_gauge(&self->d, "busy", 1));
	EXPECT_EQ(0, close_gauge(&self->d, "queued", 0));
	/* Still served meanwhile. */
	ASSERT_EQ(0, raw_call(fd, KVS_IOC_INFO, &info, sizeof(info), NULL, 0, r));
	ASSERT_EQ(0, r->h.result);

	/* The page arrives: the reader finishes, then the closer. */
	zp.range.start = (uintptr_t)page;
	ASSERT_EQ(0, ioctl(uffd, UFFDIO_ZEROPAGE, &zp));
	ASSERT_EQ(0, pthread_join(t, NULL));
	EXPECT_EQ(0, close_gauge(&self->d, "busy", 0));
	close(fd);
	close(pfd[0]);
	close(uffd);
	munmap(page, 4096);
	free(r);
}

static void become(uid_t uid, const gid_t *groups, int n)
{
	KVD_CHILD_EQ(0, setgroups(n, groups));
	KVD_CHILD_EQ(0, setgid(uid));
	KVD_CHILD_EQ(0, setuid(uid));
}

/* Stop the daemon, start it again with @extra arguments, reconnect. */
static void restart(struct __test_metadata *_metadata, FIXTURE_DATA(kvd) *self,
		    const char *const *extra)
{
	if (self->ctl)
		kv_arbiter_close(self->ctl);
	self->ctl = NULL;
	ASSERT_EQ(0, kvd_stop(&self->d, self->why, sizeof(self->why)))
		TH_LOG("%s", self->why);
	ASSERT_EQ(0, start_daemon(self, extra)) TH_LOG("%s", self->why);
	ASSERT_EQ(0, kv_arbiter_open(self->d.sock, KV_ARBITER_NO_URING, &self->ctl));
	memset(&self->base, 0, sizeof(self->base));
	ASSERT_EQ(0, kv_arbiter_call(self->ctl, KVS_IOC_INFO, &self->base));
	self->pool_id = kvd_pool_id(self->ctl, POOL);
	ASSERT_NE(0, self->pool_id);
}

/* 1 if the daemon answers INFO on @fd, 0 if it closed it, else -errno. */
static int answers(int fd)
{
	struct raw_reply *r = malloc(sizeof(*r));
	struct kvs_info info;
	int ret;

	if (!r)
		return -ENOMEM;
	memset(&info, 0, sizeof(info));
	ret = raw_call(fd, KVS_IOC_INFO, &info, sizeof(info), NULL, 0, r);
	if (!ret)
		ret = r->h.result ? r->h.result : 1;
	else if (ret == -EPIPE || ret == -ECONNRESET)
		ret = 0;
	free(r);
	return ret;
}

/* Lines of the current log holding @needle; -errno if unreadable. */
static int log_count(const struct kvd *d, const char *needle)
{
	size_t cap = 4 << 20;
	char *buf = malloc(cap), *p;
	ssize_t n;
	int count = 0;

	if (!buf)
		return -ENOMEM;
	n = kvd_read_file(d->log, buf, cap);
	if (n < 0) {
		free(buf);
		return n;
	}
	for (p = buf; (p = strstr(p, needle)); p += strlen(needle))
		count++;
	free(buf);
	return count;
}

/* Wait up to @ms for the log to hold @needle: 0, or -ETIMEDOUT. */
static int log_wait(const struct kvd *d, const char *needle, int ms)
{
	double deadline = kvd_now() + ms / 1000.0;

	while (log_count(d, needle) <= 0) {
		if (kvd_now() > deadline)
			return -ETIMEDOUT;
		kvd_sleep_ms(10);
	}
	return 0;
}

/* @n connections of this process: how many the daemon serves (rest: closed). */
static int open_served(const char *sock, int *fds, int n)
{
	int i, served = 0, a;

	for (i = 0; i < n; i++) {
		fds[i] = kvd_connect(sock);
		if (fds[i] < 0)
			return fds[i];
	}
	for (i = 0; i < n; i++) {
		a = answers(fds[i]);
		if (a < 0)
			return a;
		served += a;
	}
	return served;
}

/*
 * Connection caps: an attacker's uid gets max_connections_per_uid
 * connections and every further one is closed at once; a second uid fills
 * max_connections; once the first goes, a victim connects and works.  On
 * the old main every connection was served.
 */
TEST_F_TIMEOUT(kvd, connection_caps_total_and_per_uid, 60)
{
	const char *const caps[] = {
		"--max-connections", "7", "--max-connections-per-uid", "4", NULL,
	};
	int up[2], down[2];
	pid_t att, other, vic;
	char ch;

	restart(_metadata, self, caps);
	ASSERT_EQ(0, pipe(up));
	ASSERT_EQ(0, pipe(down));
	att = fork_kid(_metadata, self);
	if (att == 0) {
		int fds[10];
		double t0;

		become(NOBODY, NULL, 0);
		t0 = kvd_now();
		/* The control connection is root's: 4 of 10, whatever the total. */
		KVD_CHILD_EQ(4, open_served(self->d.sock, fds, 10));
		/* The refused ones were closed at once, not left in the backlog. */
		KVD_CHILD_TRUE(kvd_now() - t0 < 5);
		KVD_CHILD_EQ(1, write(up[1], "a", 1));
		KVD_CHILD_EQ(1, read(down[0], &ch, 1));
		_exit(0);
	}
	/* Only the child writes up and reads down: a child that failed is EOF. */
	close(up[1]);
	close(down[0]);
	ASSERT_EQ(1, read(up[0], &ch, 1));
	other = fork_kid(_metadata, self);
	if (other == 0) {
		int fds[10];

		become(OTHER, NULL, 0);
		/* 7 in all: root's control connection, 4 of NOBODY, 2 of ours. */
		KVD_CHILD_EQ(2, open_served(self->d.sock, fds, 10));
		_exit(0);
	}
	ASSERT_KID_OK(other);
	ASSERT_EQ(1, log_count(&self->d, "refused: uid 65534 has max_connections_per_uid 4 connections") > 0);
	ASSERT_EQ(1, log_count(&self->d, "refused: max_connections 7 reached") > 0);

	/* The attacker goes: its slots are free for a victim, who works. */
	ASSERT_EQ(1, write(down[1], "b", 1));
	ASSERT_KID_OK(att);
	vic = fork_kid(_metadata, self);
	if (vic == 0) {
		struct kv_pool *pool;
		__u32 p[2];

		become(VICTIM, NULL, 0);
		KVD_CHILD_EQ(0, kv_pool_open(self->d.sock, POOL, 0, 0, &pool));
		KVD_CHILD_EQ(0, kv_alloc(kv_pool_arbiter(pool), 2, p));
		KVD_CHILD_EQ(0, kv_put(kv_pool_arbiter(pool), p, 2));
		kv_pool_close(pool);
		_exit(0);
	}
	ASSERT_KID_OK(vic);
	close(up[0]);
	close(down[1]);
	assert_all_gone(_metadata, self, self->pool_id);
}

/* Send a byte every 20 ms until the daemon closes @fd: ms it took, or -errno. */
static int trickle_until_closed(int fd, int max_ms)
{
	double t0 = kvd_now();
	char b = 0;

	while ((kvd_now() - t0) * 1000 < max_ms) {
		ssize_t n = send(fd, &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
			return (int)((kvd_now() - t0) * 1000);
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		kvd_sleep_ms(20);
	}
	return -ETIMEDOUT;
}

/*
 * Hostile clients hold the daemon's memory and slots: one trickles a
 * message byte by byte (slowloris), one never reads its replies, one
 * announces a message above max_conn_buffer, two together try to buffer
 * more than max_buffer_total.  Each is dropped, and a victim's calls keep
 * working throughout.  On the old main none was dropped.
 */
TEST_F_TIMEOUT(kvd, stalled_and_hoarding_clients_are_dropped, 60)
{
	const char *const caps[] = {
		"--stall-timeout-ms", "2000", "--max-conn-buffer", "1M",
		"--max-buffer-total", "1M", NULL,
	};
	struct loop_shm *shm;
	pid_t vic, att;

	restart(_metadata, self, caps);
	shm = mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, shm);
	memset((void *)shm, 0, sizeof(*shm));
	vic = fork_kid(_metadata, self);
	if (vic == 0) {
		become(VICTIM, NULL, 0);
		/*
		 * On the socket alone: a shared ring counts against
		 * max_buffer_total too, and this test spends that budget
		 * to the byte.
		 */
		child_loop_flags(self->d.sock, shm, 0, 9, KV_ARBITER_NO_URING);
	}
	ASSERT_EQ(0, progress(shm, 0, 3));

	att = fork_kid(_metadata, self);
	if (att == 0) {
		static unsigned char buf[1 << 20];
		struct kvs_info info;
		int a, b, fd, i, ms;
		size_t len;

		become(NOBODY, NULL, 0);
		memset(&info, 0, sizeof(info));

		/* Two buffers beyond max_buffer_total: the second is dropped. */
		a = kvd_connect(self->d.sock);
		b = kvd_connect(self->d.sock);
		KVD_CHILD_TRUE(a >= 0 && b >= 0);
		raw_build(buf, KVS_IOC_INFO, &info, sizeof(info), NULL, 0, 1);
		((struct kvs_msg *)buf)->len = 1 << 20;
		KVD_CHILD_EQ(0, raw_send(a, buf, 700 << 10, NULL, 0));
		KVD_CHILD_EQ(0, progress(shm, 0, 2));	/* a is buffered by now */
		((struct kvs_msg *)buf)->len = 256 << 10;
		KVD_CHILD_EQ(0, raw_send(b, buf, 200 << 10, NULL, 0));
		/* At once: well before the stall timeout could close it. */
		KVD_CHILD_EQ(0, raw_expect_closed(b, 1000));
		close(b);
		KVD_CHILD_EQ(0, progress(shm, 0, 3));
		/* a stalls in its message: dropped after the stall timeout. */
		ms = trickle_until_closed(a, 6000);
		KVD_CHILD_TRUE(ms >= 0);
		close(a);
		KVD_CHILD_EQ(0, progress(shm, 0, 3));

		/* Slowloris: a byte every 20 ms never finishes a message. */
		fd = kvd_connect(self->d.sock);
		KVD_CHILD_TRUE(fd >= 0);
		((struct kvs_msg *)buf)->len = 64 << 10;
		KVD_CHILD_EQ(0, raw_send(fd, buf, HDR + 100, NULL, 0));
		ms = trickle_until_closed(fd, 6000);
		KVD_CHILD_TRUE(ms >= 1800 && ms < 5000);
		close(fd);
		KVD_CHILD_EQ(0, progress(shm, 0, 3));

		/* A message above max_conn_buffer cannot be framed: closed. */
		fd = kvd_connect(self->d.sock);
		KVD_CHILD_TRUE(fd >= 0);
		((struct kvs_msg *)buf)->len = (1 << 20) + 4096;
		KVD_CHILD_EQ(0, raw_send(fd, buf, HDR + 100, NULL, 0));
		KVD_CHILD_EQ(0, raw_expect_closed(fd, 1000));
		close(fd);

		/* Requests sent, replies never read: dropped after the timeout. */
		fd = kvd_connect(self->d.sock);
		KVD_CHILD_TRUE(fd >= 0);
		len = 0;
		while (len + HDR + sizeof(info) <= (64 << 10))
			len += raw_build(buf + len, KVS_IOC_INFO, &info, sizeof(info),
					 NULL, 0, 2);
		for (i = 0; i < 4096; i++) {
			ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);

			if (n < 0 || (size_t)n < len)
				break;
		}
		KVD_CHILD_TRUE(i < 4096);
		KVD_CHILD_EQ(0, progress(shm, 0, 3));
		ms = trickle_until_closed(fd, 6000);
		KVD_CHILD_TRUE(ms >= 0);
		close(fd);
		KVD_CHILD_EQ(0, progress(shm, 0, 3));
		_exit(0);
	}
	ASSERT_KID_OK(att);
	ASSERT_LT(0, log_count(&self->d, "buffer budget exhausted"));
	ASSERT_LT(0, log_count(&self->d, "in the middle of a message"));
	ASSERT_LT(0, log_count(&self->d, "above max_conn_buffer"));
	ASSERT_LT(0, log_count(&self->d, "did not read its reply"));
	ASSERT_EQ(0, progress(shm, 0, 3));
	shm->stop = 1;
	ASSERT_KID_OK(vic);
	assert_all_gone(_metadata, self, self->pool_id);
	munmap((void *)shm, sizeof(*shm));
}

/*
 * A flood of connections writes a bounded number of log lines: at most
 * KVSD_LOG_BURST (20) per kind per 5 s window, then one line saying how
 * many were suppressed.  On the old main: one line per connection.
 */
TEST_F_TIMEOUT(kvd, connection_floods_are_logged_at_a_bounded_rate, 60)
{
	enum { FLOOD = 300 };
	char *buf, *p;
	pid_t att;
	long suppressed = 0;
	int connected;

	att = fork_kid(_metadata, self);
	if (att == 0) {
		int i, fd;

		become(NOBODY, NULL, 0);
		for (i = 0; i < FLOOD; i++) {
			fd = kvd_connect(self->d.sock);
			KVD_CHILD_TRUE(fd >= 0);
			close(fd);
		}
		_exit(0);
	}
	ASSERT_KID_OK(att);
	connected = log_count(&self->d, " connected (pid");
	/* One window, or two if the flood straddled a boundary. */
	ASSERT_LE(connected, 40);
	ASSERT_LE(log_count(&self->d, "disconnected: not attached"), 40);
	/* Once the window has passed, the count of what was dropped. */
	kvd_sleep_ms(5200);
	ASSERT_EQ(0, log_wait(&self->d, "connection messages suppressed", 3000));
	ASSERT_EQ(0, log_wait(&self->d, "disconnection messages suppressed", 3000));
	buf = malloc(1 << 20);
	ASSERT_NE(NULL, buf);
	ASSERT_LT(0, kvd_read_file(self->d.log, buf, 1 << 20));
	for (p = buf; (p = strstr(p, " connection messages suppressed")); p++) {
		char *q = p;

		while (q > buf && q[-1] >= '0' && q[-1] <= '9')
			q--;
		suppressed += strtol(q, NULL, 10);
	}
	free(buf);
	/* Every connection is either a line or counted. */
	ASSERT_LE(FLOOD, connected + suppressed);
}

/* Attach @a to @owner's pool @name (as the ABI 2 ATTACH does): 0 or -errno. */
static int attach_owner(struct kv_arbiter *a, const char *name, __u32 owner)
{
	struct kvs_pool_attach at;

	memset(&at, 0, sizeof(at));
	snprintf(at.name, sizeof(at.name), "%s", name);
	at.owner = owner;
	return kv_arbiter_call(a, KVS_IOC_POOL_ATTACH, &at);
}

/* The same on a raw connection: the reply's result, or -errno. */
static int raw_attach_owner(int fd, const char *name, __u32 owner)
{
	struct raw_reply *r = malloc(sizeof(*r));
	struct kvs_pool_attach at;
	int ret;

	if (!r)
		return -ENOMEM;
	memset(&at, 0, sizeof(at));
	snprintf(at.name, sizeof(at.name), "%s", name);
	at.owner = owner;
	ret = raw_call(fd, KVS_IOC_POOL_ATTACH, &at, sizeof(at), NULL, 0, r);
	if (!ret)
		ret = r->h.result;
	free(r);
	return ret;
}

/*
 * Supplementary groups come from SO_PEERGROUPS, as they were at connect:
 * a member of the pool's group attaches, a non-member does not, and a
 * process that gains the group after connecting (while the daemon had not
 * accepted yet) does not get it.  The old main read /proc/PID/status at
 * accept and granted the last case.
 */
TEST_F_TIMEOUT(kvd, supplementary_groups_are_those_at_connect, 60)
{
	const char *const gpool[] = {
		"--pool", "g:pages=8,layers=2,kv_heads=2,head_dim=16,mode=0660,"
		"uid=4242,gid=4243", NULL,
	};
	int up[2], down[2];
	pid_t kid;
	char ch;

	restart(_metadata, self, gpool);
	kid = fork_kid(_metadata, self);
	if (kid == 0) {
		gid_t g = G_GROUP;
		struct kv_arbiter *a;

		become(NOBODY, &g, 1);
		KVD_CHILD_EQ(0, kv_arbiter_open(self->d.sock, 0, &a));
		KVD_CHILD_EQ(0, attach_owner(a, "g", G_OWNER));
		kv_arbiter_close(a);
		_exit(0);
	}
	ASSERT_KID_OK(kid);
	kid = fork_kid(_metadata, self);
	if (kid == 0) {
		struct kv_arbiter *a;

		become(NOBODY, NULL, 0);
		KVD_CHILD_EQ(0, kv_arbiter_open(self->d.sock, 0, &a));
		KVD_CHILD_EQ(-EACCES, attach_owner(a, "g", G_OWNER));
		kv_arbiter_close(a);
		_exit(0);
	}
	ASSERT_KID_OK(kid);

	/* Connect while the daemon is stopped, then gain the group. */
	ASSERT_EQ(0, pipe(up));
	ASSERT_EQ(0, pipe(down));
	ASSERT_EQ(0, kill(self->d.pid, SIGSTOP));
	kid = fork_kid(_metadata, self);
	if (kid == 0) {
		gid_t g = G_GROUP;
		int fd;

		/* Unprivileged, but root can be taken back (saved uid 0). */
		KVD_CHILD_EQ(0, setgroups(0, NULL));
		KVD_CHILD_EQ(0, setresgid(NOBODY, NOBODY, NOBODY));
		KVD_CHILD_EQ(0, setresuid(NOBODY, NOBODY, 0));
		fd = kvd_connect(self->d.sock);
		KVD_CHILD_TRUE(fd >= 0);
		KVD_CHILD_EQ(0, seteuid(0));
		KVD_CHILD_EQ(0, setgroups(1, &g));
		KVD_CHILD_EQ(0, setresuid(NOBODY, NOBODY, NOBODY));
		KVD_CHILD_EQ(1, write(up[1], "c", 1));
		KVD_CHILD_EQ(1, read(down[0], &ch, 1));
		KVD_CHILD_EQ(-EACCES, raw_attach_owner(fd, "g", G_OWNER));
		close(fd);
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	ch = 0;
	read(up[0], &ch, 1);
	/* Let the daemon go on whatever happened, so that teardown stops it. */
	ASSERT_EQ(0, kill(self->d.pid, SIGCONT));
	ASSERT_EQ('c', ch);
	ASSERT_EQ(1, write(down[1], "d", 1));
	ASSERT_KID_OK(kid);
	close(up[0]);
	close(down[1]);
}

/* USER_LIMITS of @uid (admin) or the caller (@uid < 0): 0 or -errno. */
static int user_limits(struct kv_arbiter *a, long uid, struct kvs_user_limits *ul)
{
	memset(ul, 0, sizeof(*ul));
	if (uid >= 0) {
		ul->uid = uid;
		ul->flags = KVS_USER_UID;
	}
	return kv_arbiter_call(a, KVS_IOC_USER_LIMITS, ul);
}

/* Create pool @name of @pages pages (pool "t"'s geometry) with memory: 0 or -errno. */
static int create_pool(struct kv_arbiter *a, const char *name, __u64 pages, __u32 *id)
{
	struct kvs_pool_create pc;
	int ret, mfd = sealed_memfd(name, pages * PAGE_BYTES);

	if (mfd < 0)
		return -errno;
	memset(&pc, 0, sizeof(pc));
	snprintf(pc.name, sizeof(pc.name), "%s", name);
	pc.n_pages = pages;
	pc.geom.n_layers = 2;
	pc.geom.n_kv_heads = 2;
	pc.geom.head_dim = 16;
	pc.geom.tokens_per_page = 16;
	pc.geom.dtype = KVS_DTYPE_F16;
	pc.mode = 0600;
	pc.mem_fd = mfd;
	ret = kv_arbiter_call(a, KVS_IOC_POOL_CREATE, &pc);
	close(mfd);
	if (!ret && id)
		*id = pc.pool_id;
	return ret;
}

/* Destroy every pool @uid owns (as root): how many, or -errno. */
static int destroy_pools_of(struct kv_arbiter *a, __u32 uid)
{
	struct kvs_pool_desc d[16];
	struct kvs_pool_list l;
	struct kvs_pool_destroy dd;
	__u32 i;
	int n = 0, ret;

	memset(&l, 0, sizeof(l));
	l.count = 16;
	l.pools = (uintptr_t)d;
	ret = kv_arbiter_call(a, KVS_IOC_POOL_LIST, &l);
	if (ret)
		return ret;
	for (i = 0; i < l.count && i < 16; i++) {
		if (d[i].uid != uid)
			continue;
		memset(&dd, 0, sizeof(dd));
		dd.pool_id = d[i].pool_id;
		ret = kv_arbiter_call(a, KVS_IOC_POOL_DESTROY, &dd);
		if (ret)
			return ret;
		n++;
	}
	return n;
}

/*
 * Per-user limits in socket mode (the config keys): an attacker at every
 * limit (pools, their pages, pages held across connections, bytes held)
 * gets EDQUOT, while a victim still creates and attaches; what the
 * attacker held is back to 0 once it disconnects.  On the old main the
 * attacker could take everything.
 */
TEST_F_TIMEOUT(kvd, per_user_limits_in_socket_mode, 60)
{
	const char *const limits[] = {
		"--max-user-pools", "2", "--max-user-pool-pages", "64",
		"--max-user-held", "16", "--max-user-held-bytes", "0", NULL,
	};
	const char *const bytes[] = {
		"--max-user-held", "0", "--max-user-held-bytes", "40960", NULL,
	};
	struct kvs_user_limits ul;
	int up[2], down[2];
	pid_t att, vic;
	char ch;

	restart(_metadata, self, limits);
	ASSERT_EQ(0, pipe(up));
	ASSERT_EQ(0, pipe(down));
	att = fork_kid(_metadata, self);
	if (att == 0) {
		struct kv_arbiter *a, *b;
		__u32 p[17];

		become(NOBODY, NULL, 0);
		KVD_CHILD_EQ(0, kv_arbiter_open(self->d.sock, 0, &a));
		KVD_CHILD_EQ(0, kv_arbiter_open(self->d.sock, 0, &b));
		KVD_CHILD_EQ(0, create_pool(a, "a1", 32, NULL));
		KVD_CHILD_EQ(-EDQUOT, create_pool(a, "a2", 40, NULL));	/* 72 pages > 64 */
		KVD_CHILD_EQ(0, create_pool(a, "a2", 16, NULL));
		KVD_CHILD_EQ(-EDQUOT, create_pool(b, "a3", 1, NULL));	/* 3 pools > 2 */
		KVD_CHILD_EQ(0, user_limits(a, -1, &ul));
		KVD_CHILD_EQ(NOBODY, ul.uid);
		KVD_CHILD_EQ(2, ul.n_pools);
		KVD_CHILD_EQ(2, ul.max_pools);
		KVD_CHILD_EQ(48, ul.pool_pages);
		KVD_CHILD_EQ(64, ul.max_pool_pages);
		KVD_CHILD_EQ(16, ul.max_held);
		/* Pages held, over both connections. */
		KVD_CHILD_EQ(0, attach_owner(a, POOL, 0));
		KVD_CHILD_EQ(0, attach_owner(b, POOL, 0));
		KVD_CHILD_EQ(0, kv_alloc(a, 12, p));
		KVD_CHILD_EQ(-EDQUOT, kv_alloc(b, 5, p + 12));
		KVD_CHILD_EQ(0, kv_alloc(b, 4, p + 12));
		KVD_CHILD_EQ(-EDQUOT, kv_alloc(a, 1, p + 16));
		KVD_CHILD_EQ(0, user_limits(b, -1, &ul));
		KVD_CHILD_EQ(16, ul.held);
		KVD_CHILD_EQ(16 * PAGE_BYTES, ul.held_bytes);
		/* Another user's figures are not ours to read. */
		KVD_CHILD_EQ(-EPERM, user_limits(a, 0, &ul));
		KVD_CHILD_EQ(1, write(up[1], "e", 1));
		KVD_CHILD_EQ(1, read(down[0], &ch, 1));
		_exit(0);		/* disconnects, holding everything */
	}
	close(up[1]);
	close(down[0]);
	ASSERT_EQ(1, read(up[0], &ch, 1));
	vic = fork_kid(_metadata, self);
	if (vic == 0) {
		struct kv_arbiter *a;
		__u32 p[8];

		become(VICTIM, NULL, 0);
		KVD_CHILD_EQ(0, kv_arbiter_open(self->d.sock, 0, &a));
		KVD_CHILD_EQ(0, create_pool(a, "v1", 32, NULL));
		KVD_CHILD_EQ(0, attach_owner(a, POOL, 0));
		KVD_CHILD_EQ(0, kv_alloc(a, 8, p));
		KVD_CHILD_EQ(0, kv_put(a, p, 8));
		kv_arbiter_close(a);
		_exit(0);
	}
	ASSERT_KID_OK(vic);
	ASSERT_EQ(1, write(down[1], "f", 1));
	ASSERT_KID_OK(att);
	/* Gone with the connections: what they held; the pools stay till destroyed. */
	ASSERT_EQ(0, user_limits(self->ctl, NOBODY, &ul));
	ASSERT_EQ(0, ul.held);
	ASSERT_EQ(0, ul.held_bytes);
	ASSERT_EQ(2, ul.n_pools);
	ASSERT_EQ(2, destroy_pools_of(self->ctl, NOBODY));
	ASSERT_EQ(1, destroy_pools_of(self->ctl, VICTIM));
	ASSERT_EQ(0, user_limits(self->ctl, NOBODY, &ul));
	ASSERT_EQ(0, ul.n_pools);
	ASSERT_EQ(0, ul.pool_pages);
	assert_all_gone(_metadata, self, self->pool_id);

	/* Bytes held: 10 pages of 4 KiB, then EDQUOT. */
	restart(_metadata, self, bytes);
	att = fork_kid(_metadata, self);
	if (att == 0) {
		struct kv_arbiter *a;
		__u32 p[11];

		become(NOBODY, NULL, 0);
		KVD_CHILD_EQ(0, kv_arbiter_open(self->d.sock, 0, &a));
		KVD_CHILD_EQ(0, attach_owner(a, POOL, 0));
		KVD_CHILD_EQ(0, kv_alloc(a, 10, p));
		KVD_CHILD_EQ(-EDQUOT, kv_alloc(a, 1, p + 10));
		KVD_CHILD_EQ(0, user_limits(a, -1, &ul));
		KVD_CHILD_EQ(10 * PAGE_BYTES, ul.held_bytes);
		KVD_CHILD_EQ(40960, ul.max_held_bytes);
		_exit(0);
	}
	ASSERT_KID_OK(att);
	vic = fork_kid(_metadata, self);
	if (vic == 0) {
		struct kv_arbiter *a;
		__u32 p[10];

		become(VICTIM, NULL, 0);
		KVD_CHILD_EQ(0, kv_arbiter_open(self->d.sock, 0, &a));
		KVD_CHILD_EQ(0, attach_owner(a, POOL, 0));
		KVD_CHILD_EQ(0, kv_alloc(a, 10, p));
		_exit(0);
	}
	ASSERT_KID_OK(vic);
	ASSERT_EQ(0, user_limits(self->ctl, NOBODY, &ul));
	ASSERT_EQ(0, ul.held_bytes);
	close(up[0]);
	close(down[1]);
	assert_all_gone(_metadata, self, self->pool_id);
}

/*
 * PAGES shows keys and namespaces (salts) only to the pool's owner and to
 * admins, and STATS' CHECK (a walk of every page under the pool lock) is
 * for admins only.  On the old main any attached user got both.
 */
TEST_F(kvd, pages_hides_keys_and_check_is_admin_only)
{
	struct kvs_page_desc pd[POOL_PAGES];
	struct kvs_pages pg;
	struct kvs_pool_stats st;
	struct kv_pool *pool;
	__u32 p[4], res[4], i, n_keys = 0;
	pid_t att;

	/* Root (the owner) publishes a chain: it sees its keys. */
	ASSERT_EQ(0, kv_pool_open(self->d.sock, POOL, 7, 0, &pool));
	ASSERT_EQ(0, kv_alloc(kv_pool_arbiter(pool), 4, p));
	ASSERT_LE(0, publish_chain(kv_pool_arbiter(pool), p, 4, KVS_NO_PAGE, 1, 0, res));
	memset(&pg, 0, sizeof(pg));
	pg.pool_id = self->pool_id;
	pg.count = POOL_PAGES;
	pg.pages = (uintptr_t)pd;
	ASSERT_EQ(0, kv_arbiter_call(self->ctl, KVS_IOC_PAGES, &pg));
	for (i = 0; i < pg.count; i++)
		n_keys += pd[i].state == KVS_PAGE_SHARED && pd[i].key.w[0] && pd[i].ns == 7;
	ASSERT_EQ(4, n_keys);

	att = fork_kid(_metadata, self);
	if (att == 0) {
		struct kv_arbiter *a;
		__u32 shared = 0;

		become(NOBODY, NULL, 0);
		KVD_CHILD_EQ(0, kv_arbiter_open(self->d.sock, 0, &a));
		memset(&pg, 0, sizeof(pg));
		pg.pool_id = self->pool_id;
		pg.count = POOL_PAGES;
		pg.pages = (uintptr_t)pd;
		KVD_CHILD_EQ(0, kv_arbiter_call(a, KVS_IOC_PAGES, &pg));
		for (i = 0; i < pg.count; i++) {
			shared += pd[i].state == KVS_PAGE_SHARED;
			KVD_CHILD_EQ(0, pd[i].ns);
			KVD_CHILD_EQ(0, pd[i].key.w[0] | pd[i].key.w[1] |
				     pd[i].key.w[2] | pd[i].key.w[3]);
		}
		KVD_CHILD_EQ(4, shared);	/* the pages are listed, keys not */
		memset(&st, 0, sizeof(st));
		st.pool_id = self->pool_id;
		st.flags = KVS_STATS_CHECK;
		KVD_CHILD_EQ(-EPERM, kv_arbiter_call(a, KVS_IOC_POOL_STATS, &st));
		st.flags = 0;
		KVD_CHILD_EQ(0, kv_arbiter_call(a, KVS_IOC_POOL_STATS, &st));
		KVD_CHILD_EQ(4, st.n_shared);
		kv_arbiter_close(a);
		_exit(0);
	}
	ASSERT_KID_OK(att);
	stats(_metadata, self, self->pool_id, &st);	/* CHECK, as root */
	ASSERT_EQ(0, kv_put(kv_pool_arbiter(pool), res, 4));
	kv_pool_close(pool);
	assert_all_gone(_metadata, self, self->pool_id);
}

/* ------------------------------------------------------------------ */
/* what one uid costs kvshared: max_user_memory, max_memory_total     */
/* ------------------------------------------------------------------ */

#define MiB		(1l << 20)
/* kvshared's own RSS beside what it is charged: malloc's slack, stacks. */
#define RSS_SLACK	(12 * MiB)
#define ROUND_DEADLINE_US 2000000	/* a victim's round, at the most */

#ifndef KVD_KVSHARED_PLAIN_REL
#define KVD_KVSHARED_PLAIN_REL "../../kvshared"
#endif

/*
 * RSS is measured on the plain build next to the sanitized one: ASan's
 * shadow and quarantine would be measured otherwise.  $KVSHARED, when
 * set, is what every test runs, these included.
 */
static void use_plain_kvshared(void)
{
	char exe[4000], path[4200], *slash;
	ssize_t n;

	if (getenv("KVSHARED"))
		return;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return;
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (!slash)
		return;
	*slash = '\0';
	snprintf(path, sizeof(path), "%s/%s", exe, KVD_KVSHARED_PLAIN_REL);
	if (!access(path, X_OK))
		setenv("KVSHARED", path, 1);
}

/* @pid's resident set (VmRSS), bytes; -1 if unreadable. */
static long rss_of(pid_t pid)
{
	char path[64], buf[4096], *p;
	long kb = -1;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (kvd_read_file(path, buf, sizeof(buf)) <= 0)
		return -1;
	p = strstr(buf, "VmRSS:");
	if (p)
		kb = strtol(p + 6, NULL, 10);
	return kb < 0 ? -1 : kb * 1024;
}

/*
 * The daemon restarted on the plain build with @extra, and a victim of
 * another uid looping rounds in slot 0 (its slowest round recorded).
 */
static struct loop_shm *cost_setup(struct __test_metadata *_metadata,
				   FIXTURE_DATA(kvd) *self, const char *const *extra,
				   pid_t *vic)
{
	struct loop_shm *shm;

	use_plain_kvshared();
	restart(_metadata, self, extra);
	unsetenv("KVSHARED");
	shm = mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		   -1, 0);
	ASSERT_NE(MAP_FAILED, shm);
	memset((void *)shm, 0, sizeof(*shm));
	*vic = fork_kid(_metadata, self);
	if (*vic == 0) {
		become(VICTIM, NULL, 0);
		child_loop_flags(self->d.sock, shm, 0, 7, KV_ARBITER_NO_URING);
	}
	ASSERT_EQ(0, progress(shm, 0, 3));
	return shm;
}

/* The victim still served, never past its deadline; then stopped. */
static void cost_teardown(struct __test_metadata *_metadata, FIXTURE_DATA(kvd) *self,
			  struct loop_shm *shm, pid_t vic)
{
	ASSERT_EQ(0, progress(shm, 0, 3));
	shm->stop = 1;
	ASSERT_KID_OK(vic);
	ASSERT_GT(ROUND_DEADLINE_US, shm->max_round_us[0])
		TH_LOG("the victim's slowest round took %ld us", shm->max_round_us[0]);
	assert_all_gone(_metadata, self, self->pool_id);
	munmap((void *)shm, sizeof(*shm));
	/* Every charge was given back as its connection went. */
	ASSERT_EQ(0, log_count(&self->d, "ledger freed with"));
}

/*
 * In a child: @n connections, each sending @sent bytes of a message that
 * announces 8 MiB, and never the rest.  How many are still open once the
 * daemon has read what came (the caller keeps them open while the parent
 * measures the daemon).
 */
static int half_sent(const char *sock, int n, size_t sent, int *fds)
{
	static unsigned char buf[8 << 20];
	struct kvs_info info;
	int i, open = 0;

	memset(&info, 0, sizeof(info));
	raw_build(buf, KVS_IOC_INFO, &info, sizeof(info), NULL, 0, 1);
	((struct kvs_msg *)buf)->len = KVS_MSG_MAX;
	for (i = 0; i < n; i++) {
		size_t done = 0;
		ssize_t k;

		fds[i] = kvd_connect(sock);
		if (fds[i] < 0)
			return fds[i];
		/* The daemon reads as it comes, or drops the connection (EPIPE). */
		while (done < sent) {
			k = send(fds[i], buf + done, sent - done, MSG_NOSIGNAL);
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0)
				break;
			done += k;
		}
	}
	kvd_sleep_ms(500);	/* the daemon reads what arrived */
	for (i = 0; i < n; i++) {
		struct pollfd pfd = { .fd = fds[i], .events = POLLIN };

		/* A dropped connection reads EOF; a live one has nothing to read. */
		open += poll(&pfd, 1, 0) == 0;
	}
	return open;
}

/*
 * Half-sent messages: 24 connections of one uid each send 7 MiB of an
 * 8 MiB message and stop.  On 7ba17a4 all were kept, and kvshared grew
 * by their size (the issue measured +389 MiB with 4 MiB each).  Now its
 * buffers stop at max_user_memory (64 MiB by default): the connections
 * past it are dropped with the uid in the log, kvshared's RSS grows by at
 * most the limit, and a victim of another uid is served throughout.
 */
TEST_F_TIMEOUT(kvd, half_sent_messages_cost_one_uid_its_limit_at_most, 90)
{
	struct loop_shm *shm;
	int sync[2], go[2];
	long base, peak;
	pid_t vic, att;
	char c;

	shm = cost_setup(_metadata, self, NULL, &vic);
	ASSERT_EQ(0, pipe(sync));
	ASSERT_EQ(0, pipe(go));
	base = rss_of(self->d.pid);
	ASSERT_LT(0, base);
	att = fork_kid(_metadata, self);
	if (att == 0) {
		int fds[24], open;

		become(NOBODY, NULL, 0);
		open = half_sent(self->d.sock, 24, 7 << 20, fds);
		KVD_CHILD_EQ(0, xwrite(sync[1], &open, sizeof(open)));
		KVD_CHILD_EQ(0, xread(go[0], &c, 1));
		_exit(0);
	}
	/* Ours closed: a child that dies is an EOF here, not a wait. */
	close(sync[1]);
	close(go[0]);
	{
		int open = 0;

		ASSERT_EQ(0, xread(sync[0], &open, sizeof(open)));
		peak = rss_of(self->d.pid);
		TH_LOG("24 unfinished 8 MiB messages: %d connections kept, RSS %ld -> %ld MiB "
		       "(+%ld MiB)", open, base / MiB, peak / MiB, (peak - base) / MiB);
		ASSERT_EQ(0, xwrite(go[1], "x", 1));
		ASSERT_KID_OK(att);
		ASSERT_LT(0, open);
		ASSERT_GT(24, open);
	}
	ASSERT_EQ(0, progress(shm, 0, 3));
	ASSERT_GE(64 * MiB + RSS_SLACK, peak - base);
	ASSERT_LT(0, log_count(&self->d, "uid 65534: a message's buffer refused: uid 65534 "
			       "would cost kvshared"));
	close(sync[0]);
	close(go[1]);
	cost_teardown(_metadata, self, shm, vic);
}

/*
 * The same against max_memory_total: two uids, 24 MiB each under a
 * per-uid limit of 32 MiB but a total of 32 MiB: the second is refused
 * by the total (logged as such), and kvshared grows by at most the total.
 */
TEST_F_TIMEOUT(kvd, all_uids_together_cost_at_most_the_total, 90)
{
	const char *const caps[] = {
		"--max-user-memory", "32M", "--max-memory-total", "32M", NULL,
	};
	const uid_t uids[2] = { NOBODY, OTHER };
	struct loop_shm *shm;
	int sync[2], go[2], i;
	long base, peak;
	pid_t vic, att[2];
	char c;

	shm = cost_setup(_metadata, self, caps, &vic);
	ASSERT_EQ(0, pipe(sync));
	ASSERT_EQ(0, pipe(go));
	base = rss_of(self->d.pid);
	for (i = 0; i < 2; i++) {
		att[i] = fork_kid(_metadata, self);
		if (att[i] == 0) {
			int fds[6], open;

			become(uids[i], NULL, 0);
			open = half_sent(self->d.sock, 6, 4 << 20, fds);
			KVD_CHILD_EQ(0, xwrite(sync[1], &open, sizeof(open)));
			KVD_CHILD_EQ(0, xread(go[0], &c, 1));
			_exit(0);
		}
		{
			int open = 0;

			ASSERT_EQ(0, xread(sync[0], &open, sizeof(open)));
			TH_LOG("uid %u: %d of 6 half-sent messages kept", uids[i], open);
		}
	}
	peak = rss_of(self->d.pid);
	TH_LOG("two uids: RSS %ld -> %ld MiB (+%ld MiB)", base / MiB, peak / MiB,
	       (peak - base) / MiB);
	ASSERT_EQ(0, progress(shm, 0, 3));
	ASSERT_GE(32 * MiB + RSS_SLACK, peak - base);
	ASSERT_LT(0, log_count(&self->d, "refused: all users would cost kvshared"));
	ASSERT_EQ(0, xwrite(go[1], "xx", 2));
	ASSERT_KID_OK(att[0]);
	ASSERT_KID_OK(att[1]);
	close(sync[0]);
	close(sync[1]);
	close(go[0]);
	close(go[1]);
	cost_teardown(_metadata, self, shm, vic);
}

/* POOL_CREATE of @pages pages without memory, as the caller: 0 or -errno. */
static int create_bare_pool(struct kv_arbiter *a, const char *name, __u64 pages)
{
	struct kvs_pool_create pc;

	memset(&pc, 0, sizeof(pc));
	snprintf(pc.name, sizeof(pc.name), "%s", name);
	pc.n_pages = pages;
	pc.geom.n_layers = 2;
	pc.geom.n_kv_heads = 2;
	pc.geom.head_dim = 16;
	pc.geom.tokens_per_page = 16;
	pc.geom.dtype = KVS_DTYPE_F16;
	pc.mode = 0600;
	pc.mem_fd = -1;
	return kv_arbiter_call(a, KVS_IOC_POOL_CREATE, &pc);
}

/*
 * Pools' bookkeeping is charged to their creator: one 4M-page pool (on
 * 7ba17a4, +180 MiB of kvshared for one uid) is EDQUOT at once, and
 * 256k-page pools are created until the next would pass 64 MiB.  Once
 * destroyed (and so freed), they no longer count: the uid may create
 * again.  kvshared grows by at most the limit meanwhile.
 */
TEST_F_TIMEOUT(kvd, pools_bookkeeping_is_charged_to_their_creator, 90)
{
	struct loop_shm *shm;
	int sync[2], go[2];
	long base, peak;
	pid_t vic, att;
	char c;

	shm = cost_setup(_metadata, self, NULL, &vic);
	ASSERT_EQ(0, pipe(sync));
	ASSERT_EQ(0, pipe(go));
	base = rss_of(self->d.pid);
	att = fork_kid(_metadata, self);
	if (att == 0) {
		struct kv_arbiter *a;
		char name[32];
		int n, ret = 0;

		become(NOBODY, NULL, 0);
		KVD_CHILD_EQ(0, kv_arbiter_open(self->d.sock, KV_ARBITER_NO_URING, &a));
		KVD_CHILD_EQ(-EDQUOT, create_bare_pool(a, "huge", KVS_MAX_POOL_PAGES));
		for (n = 0; n < 8; n++) {
			snprintf(name, sizeof(name), "p%d", n);
			ret = create_bare_pool(a, name, 256 << 10);
			if (ret)
				break;
		}
		/* 20 MiB each: three fit beside the connection, the fourth not. */
		KVD_CHILD_EQ(-EDQUOT, ret);
		KVD_CHILD_EQ(3, n);
		KVD_CHILD_EQ(0, xwrite(sync[1], &n, sizeof(n)));
		KVD_CHILD_EQ(0, xread(go[0], &c, 1));
		/* Destroyed (nothing attached: freed at once), they stop counting. */
		KVD_CHILD_EQ(3, destroy_pools_of(a, NOBODY));
		KVD_CHILD_EQ(0, create_bare_pool(a, "again", 256 << 10));
		KVD_CHILD_EQ(1, destroy_pools_of(a, NOBODY));
		kv_arbiter_close(a);
		_exit(0);
	}
	/* Ours closed: a child that dies is an EOF here, not a wait. */
	close(sync[1]);
	close(go[0]);
	{
		int n = 0;

		ASSERT_EQ(0, xread(sync[0], &n, sizeof(n)));
		peak = rss_of(self->d.pid);
		TH_LOG("%d pools of 256k pages: RSS %ld -> %ld MiB (+%ld MiB)", n,
		       base / MiB, peak / MiB, (peak - base) / MiB);
	}
	ASSERT_GE(64 * MiB + RSS_SLACK, peak - base);
	ASSERT_LT(0, log_count(&self->d, "uid 65534: POOL_CREATE refused: uid 65534 "
			       "would cost kvshared"));
	ASSERT_EQ(0, xwrite(go[1], "x", 1));
	ASSERT_KID_OK(att);
	close(sync[0]);
	close(go[1]);
	cost_teardown(_metadata, self, shm, vic);
}

/*
 * Connections are charged with their supplementary groups: 64 connections
 * of a uid with 65536 groups (256 KiB each) pass a 16 MiB limit, and the
 * ones past it are refused, logged with the uid; rings are charged too
 * (RING_SETUP fails with EDQUOT past the limit).
 */
TEST_F_TIMEOUT(kvd, connections_groups_and_rings_are_charged, 90)
{
	const char *const caps[] = { "--max-user-memory", "16M", NULL };
	struct loop_shm *shm;
	long base, peak;
	pid_t vic, att;
	int sync[2], go[2];
	char c;

	shm = cost_setup(_metadata, self, caps, &vic);
	ASSERT_EQ(0, pipe(sync));
	ASSERT_EQ(0, pipe(go));
	base = rss_of(self->d.pid);
	att = fork_kid(_metadata, self);
	if (att == 0) {
		static gid_t groups[65536];
		int fds[64], i, served, rings = 0, ret;
		struct kvs_ring_setup rs;
		struct raw_reply *r = malloc(sizeof(*r));

		for (i = 0; i < 65536; i++)
			groups[i] = 100000 + i;
		become(NOBODY, groups, 65536);
		served = open_served(self->d.sock, fds, 64);
		KVD_CHILD_TRUE(served > 0 && served < 64);
		/* The parent measures the daemon while they are open. */
		KVD_CHILD_EQ(0, xwrite(sync[1], &served, sizeof(served)));
		KVD_CHILD_EQ(0, xread(go[0], &c, 1));
		for (i = 0; i < 64; i++)
			close(fds[i]);
		kvd_sleep_ms(200);
		/* Now rings of 8 MiB until refused. */
		for (i = 0; i < 8; i++) {
			fds[i] = kvd_connect(self->d.sock);
			KVD_CHILD_TRUE(fds[i] >= 0 && r);
			memset(&rs, 0, sizeof(rs));
			rs.size = 8 << 20;
			KVD_CHILD_EQ(0, raw_call(fds[i], KVS_SOCK_RING_SETUP, &rs, sizeof(rs),
						 NULL, 0, r));
			ret = r->h.result;
			if (ret)
				break;
			rings++;
		}
		KVD_CHILD_EQ(-EDQUOT, ret);
		KVD_CHILD_EQ(1, rings);
		_exit(0);
	}
	/* Ours closed: a child that dies is an EOF here, not a wait. */
	close(sync[1]);
	close(go[0]);
	{
		int served = 0;

		ASSERT_EQ(0, xread(sync[0], &served, sizeof(served)));
		peak = rss_of(self->d.pid);
		TH_LOG("%d of 64 connections with 65536 groups served; RSS %ld -> %ld MiB "
		       "(+%ld MiB)", served, base / MiB, peak / MiB, (peak - base) / MiB);
	}
	ASSERT_GE(16 * MiB + RSS_SLACK, peak - base);
	ASSERT_EQ(0, xwrite(go[1], "x", 1));
	ASSERT_LT(0, log_count(&self->d, "uid 65534: a connection refused: uid 65534 "
			       "would cost kvshared"));
	ASSERT_KID_OK(att);
	ASSERT_LT(0, log_count(&self->d, "uid 65534: a shared ring refused"));
	close(sync[0]);
	close(go[1]);
	cost_teardown(_metadata, self, shm, vic);
}

/*
 * The core's table of the pages a connection holds is charged as it
 * grows: in a 1M-page pool of the daemon's (mode 0666, no memory), one
 * uid ALLOCs 65536 pages at a time under a 16 MiB limit.  Eight batches
 * fit (a 12 MiB table), the ninth would double it: EDQUOT, logged, and
 * the pages taken so far go back when the connection closes.
 */
TEST_F_TIMEOUT(kvd, held_pages_tables_are_charged, 90)
{
	const char *const caps[] = {
		"--max-user-memory", "16M", "--pool",
		"h:pages=1048576,layers=2,kv_heads=2,head_dim=16,memory=none,mode=0666",
		NULL,
	};
	struct loop_shm *shm;
	long base, peak;
	pid_t vic, att;
	int sync[2], go[2];
	char c;

	shm = cost_setup(_metadata, self, caps, &vic);
	ASSERT_EQ(0, pipe(sync));
	ASSERT_EQ(0, pipe(go));
	base = rss_of(self->d.pid);
	att = fork_kid(_metadata, self);
	if (att == 0) {
		static __u32 pages[65536];
		struct kv_arbiter *a;
		struct kvs_alloc al;
		int n, ret = 0;

		become(NOBODY, NULL, 0);
		KVD_CHILD_EQ(0, kv_arbiter_open(self->d.sock, KV_ARBITER_NO_URING, &a));
		KVD_CHILD_EQ(0, attach_owner(a, "h", 0));
		for (n = 0; n < 16; n++) {
			memset(&al, 0, sizeof(al));
			al.count = 65536;
			al.pages = (uintptr_t)pages;
			ret = kv_arbiter_call(a, KVS_IOC_ALLOC, &al);
			if (ret)
				break;
		}
		KVD_CHILD_EQ(-EDQUOT, ret);
		KVD_CHILD_EQ(8, n);
		KVD_CHILD_EQ(0, xwrite(sync[1], &n, sizeof(n)));
		KVD_CHILD_EQ(0, xread(go[0], &c, 1));
		kv_arbiter_close(a);
		_exit(0);
	}
	/* Ours closed: a child that dies is an EOF here, not a wait. */
	close(sync[1]);
	close(go[0]);
	{
		int n = 0;

		ASSERT_EQ(0, xread(sync[0], &n, sizeof(n)));
		peak = rss_of(self->d.pid);
		TH_LOG("%d batches of 65536 pages held; RSS %ld -> %ld MiB (+%ld MiB)",
		       n, base / MiB, peak / MiB, (peak - base) / MiB);
	}
	ASSERT_GE(16 * MiB + RSS_SLACK, peak - base);
	ASSERT_LT(0, log_count(&self->d, "uid 65534: holding more pages refused"));
	ASSERT_EQ(0, xwrite(go[1], "x", 1));
	ASSERT_KID_OK(att);
	close(sync[0]);
	close(go[1]);
	cost_teardown(_metadata, self, shm, vic);
}

TEST_HARNESS_MAIN
