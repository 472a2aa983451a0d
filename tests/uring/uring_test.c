// SPDX-License-Identifier: GPL-2.0
/*
 * uring_test: /dev/kvshare through io_uring IORING_OP_URING_CMD.
 *
 * The ABI (include/uapi/linux/kvshare.h, last paragraph): a ring set up
 * with IORING_SETUP_SQE128, sqe->cmd_op = the ioctl number, the 80-byte
 * sqe->cmd = the command struct itself.  ALLOC, PUBLISH, LOOKUP and PUT are
 * carried; cqe->res is -errno, or LOOKUP n_hit / PUBLISH n_dup / 0.
 *
 * What is checked here:
 *  - parity: one scenario (duplicates, partial runs, eviction, every
 *    error of the four commands) run through ioctl, through inline uring
 *    and through IOSQE_ASYNC uring gives the same result, the same output
 *    arrays, the same counters and the same page descriptors, step by step;
 *  - ioctl and uring mixed on the same files, holdings crossing over;
 *  - failed batches change nothing (stats, pages, holdings);
 *  - the uring-only errors: no SQE128 ring, command not carried, unknown
 *    command, pads and reserved fields, SQE header garbage, size bits;
 *  - a thread rewriting the mapped SQEs while they are submitted;
 *  - io-wq (IOSQE_ASYNC, and a contended pool lock) delivering positive
 *    results, and links after a positive result;
 *  - ring and file closed with work submitted; kill -9 of a submitter.
 * Every scenario ends with the invariant check (KVS_STATS_CHECK, the
 * counters against a walk of the page descriptors).
 *
 * liburing 2.3 has no URING_CMD helper: SQEs are filled by hand.
 *
 * Runs in the test VM (Debian 6.1 kernel, kvshare.ko loaded).  Without
 * /dev/kvshare, or where io_uring is unavailable (ENOSYS, EPERM), every
 * test skips with the reason.  KVS_DEV overrides the device path.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <liburing.h>
#include <linux/kvshare.h>

#include "kselftest_harness.h"

#define DEV_DEFAULT	"/dev/kvshare"
#define PTR(p)		((__u64)(uintptr_t)(p))
#define BAD_PTR		0x10ull		/* never mapped */
#define SQE128_BYTES	128
#define CMD_OFF		offsetof(struct io_uring_sqe, cmd)

/* Generous: the VM runs under TCG, ~50x slower than native. */
#define CQE_WAIT_S	20
#define RELEASE_WAIT_MS	20000

/* What ucmd() returns when no CQE came (submit failed or timed out). */
#define UCMD_LOST	(-1000000)

static const __u32 carried_ops[] = {
	KVS_IOC_ALLOC, KVS_IOC_PUBLISH, KVS_IOC_LOOKUP, KVS_IOC_PUT,
};

/* ------------------------------------------------------------------ */
/* Small things                                                       */
/* ------------------------------------------------------------------ */

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static __u32 rnd(__u32 *s)
{
	__u32 x = *s ? *s : 0x2545f491u;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	*s = x;
	return x;
}

static __u64 mix64(__u64 x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Key @i of chain @chain: opaque to the arbiter, all 256 bits differ. */
static struct kvs_key key_of(__u32 chain, __u32 i)
{
	__u64 x = mix64(((__u64)chain << 32) | i);	/* a bijection: no collision */
	struct kvs_key k;
	int w;

	for (w = 0; w < 4; w++)
		k.w[w] = w ? mix64(x + w) : x;
	return k;
}

static void keys_of(struct kvs_key *k, __u32 chain, __u32 first, __u32 n)
{
	__u32 i;

	for (i = 0; i < n; i++)
		k[i] = key_of(chain, first + i);
}

static struct kvs_publish_entry ent(__u32 page, __u32 parent, struct kvs_key key)
{
	struct kvs_publish_entry e;

	memset(&e, 0, sizeof(e));
	e.page = page;
	e.parent = parent;
	e.key = key;
	return e;
}

/* Entries publishing @pages as keys first.. of @chain, one chain. */
static void ents_chain(struct kvs_publish_entry *e, const __u32 *pages, __u32 n,
		       __u32 root, __u32 chain, __u32 first)
{
	__u32 i;

	for (i = 0; i < n; i++)
		e[i] = ent(pages[i], i ? KVS_PARENT_PREV : root, key_of(chain, first + i));
}

/* One read-only anonymous page: a result buffer that faults on write. */
static void *ro_page(void)
{
	void *p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* ------------------------------------------------------------------ */
/* The device through ioctl                                           */
/* ------------------------------------------------------------------ */

static const char *dev_path(void)
{
	const char *p = getenv("KVS_DEV");

	return p && *p ? p : DEV_DEFAULT;
}

static int dev_open(void)
{
	int fd = open(dev_path(), O_RDWR | O_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

static int xioctl(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) < 0 ? -errno : 0;
}

static int info_of(int fd, struct kvs_info *info)
{
	memset(info, 0, sizeof(*info));
	return xioctl(fd, KVS_IOC_INFO, info);
}

static int attach(int fd, const char *name, __u64 ns)
{
	struct kvs_pool_attach a;

	memset(&a, 0, sizeof(a));
	snprintf(a.name, sizeof(a.name), "%s", name);
	a.ns = ns;
	return xioctl(fd, KVS_IOC_POOL_ATTACH, &a);
}

static int stats_of(int fd, __u32 pool, __u32 flags, struct kvs_pool_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->pool_id = pool;
	st->flags = flags;
	return xioctl(fd, KVS_IOC_POOL_STATS, st);
}

/* Descriptors of pages start..start+n-1: the count written, or -errno. */
static int pages_of(int fd, __u32 pool, __u32 start, __u32 n, struct kvs_page_desc *d)
{
	struct kvs_pages p;
	int ret;

	memset(&p, 0, sizeof(p));
	p.pool_id = pool;
	p.start = start;
	p.count = n;
	p.pages = PTR(d);
	ret = xioctl(fd, KVS_IOC_PAGES, &p);
	return ret ? ret : (int)p.count;
}

static int page_of(int fd, __u32 pool, __u32 i, struct kvs_page_desc *d)
{
	int ret = pages_of(fd, pool, i, 1, d);

	return ret == 1 ? 0 : ret < 0 ? ret : -ERANGE;
}

/* OWNED pages plus references @fd holds, or -errno. */
static long held_of(int fd)
{
	struct kvs_quota q;
	int ret;

	memset(&q, 0, sizeof(q));
	ret = xioctl(fd, KVS_IOC_QUOTA, &q);
	return ret ? ret : (long)q.held;
}

static int quota_set(int fd, __u32 max)
{
	struct kvs_quota q;

	memset(&q, 0, sizeof(q));
	q.flags = KVS_QUOTA_SET;
	q.max_pages = max;
	return xioctl(fd, KVS_IOC_QUOTA, &q);
}

/* The four carried commands as structs ... */
static struct kvs_alloc req_alloc(__u32 n, __u32 *pages)
{
	struct kvs_alloc r;

	memset(&r, 0, sizeof(r));
	r.count = n;
	r.pages = PTR(pages);
	return r;
}

static struct kvs_publish req_publish(struct kvs_publish_entry *e, __u32 n)
{
	struct kvs_publish r;

	memset(&r, 0, sizeof(r));
	r.count = n;
	r.entries = PTR(e);
	return r;
}

static struct kvs_lookup req_lookup(const struct kvs_key *k, __u32 n, __u32 *pages)
{
	struct kvs_lookup r;

	memset(&r, 0, sizeof(r));
	r.count = n;
	r.keys = PTR(k);
	r.pages = PTR(pages);
	return r;
}

static struct kvs_put req_put(const __u32 *pages, __u32 n)
{
	struct kvs_put r;

	memset(&r, 0, sizeof(r));
	r.count = n;
	r.pages = PTR(pages);
	return r;
}

/* ... and through ioctl, returning what a CQE would carry. */
static int io_alloc(int fd, __u32 n, __u32 *pages)
{
	struct kvs_alloc r = req_alloc(n, pages);

	return xioctl(fd, KVS_IOC_ALLOC, &r);
}

static int io_publish(int fd, struct kvs_publish_entry *e, __u32 n)
{
	struct kvs_publish r = req_publish(e, n);
	int ret = xioctl(fd, KVS_IOC_PUBLISH, &r);

	return ret ? ret : (int)r.n_dup;
}

static int io_lookup(int fd, const struct kvs_key *k, __u32 n, __u32 *pages)
{
	struct kvs_lookup r = req_lookup(k, n, pages);
	int ret = xioctl(fd, KVS_IOC_LOOKUP, &r);

	return ret ? ret : (int)r.n_hit;
}

static int io_put(int fd, const __u32 *pages, __u32 n)
{
	struct kvs_put r = req_put(pages, n);

	return xioctl(fd, KVS_IOC_PUT, &r);
}

/* ------------------------------------------------------------------ */
/* The device through io_uring                                        */
/* ------------------------------------------------------------------ */

static __u64 next_ud = 1;

static unsigned int sqe_bytes(const struct io_uring *r)
{
	return (r->flags & IORING_SETUP_SQE128) ? 128 : 64;
}

/*
 * Fill @sqe by hand (liburing 2.3 has no URING_CMD helper).  cmd_op and
 * __pad1 alias sqe->off: nothing may touch off after this.
 */
static void prep_ucmd(const struct io_uring *r, struct io_uring_sqe *sqe, int fd,
		      __u32 op, const void *payload, size_t len, __u8 flags, __u64 ud)
{
	size_t room = sqe_bytes(r) - CMD_OFF;

	memset(sqe, 0, sqe_bytes(r));
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->flags = flags;
	sqe->fd = fd;
	sqe->cmd_op = op;
	sqe->user_data = ud;
	if (payload)
		memcpy(sqe->cmd, payload, len < room ? len : room);
}

static struct io_uring_sqe *get_sqe(struct io_uring *r)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(r);

	if (!sqe) {
		io_uring_submit(r);
		sqe = io_uring_get_sqe(r);
	}
	return sqe;
}

/* One CQE, or -ETIME after CQE_WAIT_S: a lost completion is a hang. */
static int wait_cqe(struct io_uring *r, struct io_uring_cqe **cqe)
{
	struct __kernel_timespec ts = { .tv_sec = CQE_WAIT_S };
	int ret;

	do {
		ret = io_uring_wait_cqe_timeout(r, cqe, &ts);
	} while (ret == -EINTR);
	return ret;
}

/*
 * One command through @r, waited for: cqe->res, or UCMD_LOST (with a
 * message) when no CQE came.  @pad1 and @cmd_flags go to sqe->__pad1 and
 * sqe->uring_cmd_flags.
 */
static int ucmd_full(struct io_uring *r, int fd, __u32 op, const void *payload,
		     size_t len, __u8 flags, __u32 pad1, __u32 cmd_flags)
{
	struct io_uring_sqe *sqe = get_sqe(r);
	struct io_uring_cqe *cqe;
	__u64 ud = next_ud++;
	int ret, res;

	if (!sqe) {
		fprintf(stderr, "# no free SQE\n");
		return UCMD_LOST;
	}
	prep_ucmd(r, sqe, fd, op, payload, len, flags, ud);
	sqe->__pad1 = pad1;
	sqe->uring_cmd_flags = cmd_flags;
	ret = io_uring_submit(r);
	if (ret != 1) {
		fprintf(stderr, "# io_uring_submit: %d\n", ret);
		return UCMD_LOST;
	}
	ret = wait_cqe(r, &cqe);
	if (ret) {
		fprintf(stderr, "# cmd_op %#x: no CQE within %d s (%s)\n", op,
			CQE_WAIT_S, strerror(-ret));
		return UCMD_LOST;
	}
	if (cqe->user_data != ud) {
		fprintf(stderr, "# cmd_op %#x: CQE of another request (%llu, res %d)\n",
			op, (unsigned long long)cqe->user_data, cqe->res);
		io_uring_cqe_seen(r, cqe);
		return UCMD_LOST;
	}
	res = cqe->res;
	io_uring_cqe_seen(r, cqe);
	return res;
}

static int ucmd(struct io_uring *r, int fd, __u32 op, const void *payload, size_t len)
{
	return ucmd_full(r, fd, op, payload, len, 0, 0, 0);
}

static int u_alloc(struct io_uring *r, int fd, __u32 n, __u32 *pages)
{
	struct kvs_alloc q = req_alloc(n, pages);

	return ucmd(r, fd, KVS_IOC_ALLOC, &q, sizeof(q));
}

static int u_publish(struct io_uring *r, int fd, struct kvs_publish_entry *e, __u32 n)
{
	struct kvs_publish q = req_publish(e, n);

	return ucmd(r, fd, KVS_IOC_PUBLISH, &q, sizeof(q));
}

static int u_lookup(struct io_uring *r, int fd, const struct kvs_key *k, __u32 n,
		    __u32 *pages)
{
	struct kvs_lookup q = req_lookup(k, n, pages);

	return ucmd(r, fd, KVS_IOC_LOOKUP, &q, sizeof(q));
}

static int u_put(struct io_uring *r, int fd, const __u32 *pages, __u32 n)
{
	struct kvs_put q = req_put(pages, n);

	return ucmd(r, fd, KVS_IOC_PUT, &q, sizeof(q));
}

/* @op with its _IOC size bits replaced by @size. */
static __u32 op_sized(__u32 op, __u32 size)
{
	return _IOC(_IOC_DIR(op), _IOC_TYPE(op), _IOC_NR(op), size);
}

/* ------------------------------------------------------------------ */
/* Fixture                                                            */
/* ------------------------------------------------------------------ */

#define MAX_POOLS	8
#define MAX_KIDS	8

FIXTURE(uring) {
	int skip;		/* 1: skip the test; 2: fail it (reason) */
	char reason[192];
	int ctl;		/* unattached control file */
	struct kvs_info base;	/* INFO at setup */
	__u32 pools[MAX_POOLS];	/* created, not yet destroyed */
	unsigned int seq;
	pid_t kids[MAX_KIDS];	/* children to kill if the test aborts */
};

/* Never asserts: a missing device or io_uring must become a SKIP. */
FIXTURE_SETUP(uring)
{
	struct io_uring r;
	int ret;

	self->ctl = -1;
	if (access(dev_path(), F_OK)) {
		self->skip = 1;
		snprintf(self->reason, sizeof(self->reason),
			 "%s absent (%s): kvshare.ko not loaded", dev_path(),
			 strerror(errno));
		return;
	}
	ret = io_uring_queue_init(4, &r, IORING_SETUP_SQE128);
	if (ret == -ENOSYS || ret == -EPERM) {
		self->skip = 1;
		snprintf(self->reason, sizeof(self->reason),
			 "io_uring unavailable: io_uring_queue_init: %s", strerror(-ret));
		return;
	}
	if (ret) {
		self->skip = 2;
		snprintf(self->reason, sizeof(self->reason),
			 "io_uring_queue_init(SQE128): %s", strerror(-ret));
		return;
	}
	io_uring_queue_exit(&r);

	ret = dev_open();
	if (ret < 0) {
		self->skip = 2;
		snprintf(self->reason, sizeof(self->reason), "open %s: %s",
			 dev_path(), strerror(-ret));
		return;
	}
	self->ctl = ret;
	ret = info_of(self->ctl, &self->base);
	if (ret) {
		self->skip = 2;
		snprintf(self->reason, sizeof(self->reason), "INFO: %s", strerror(-ret));
	} else if (!(self->base.features & KVS_FEAT_URING_CMD)) {
		self->skip = 2;
		snprintf(self->reason, sizeof(self->reason),
			 "INFO.features %#llx lacks KVS_FEAT_URING_CMD",
			 (unsigned long long)self->base.features);
	}
}

FIXTURE_TEARDOWN(uring)
{
	int i;

	for (i = 0; i < MAX_KIDS; i++) {
		if (self->kids[i] > 0) {
			kill(self->kids[i], SIGKILL);
			waitpid(self->kids[i], NULL, 0);
		}
	}
	for (i = 0; i < MAX_POOLS && self->ctl >= 0; i++) {
		if (self->pools[i]) {
			struct kvs_pool_destroy d;

			memset(&d, 0, sizeof(d));
			d.pool_id = self->pools[i];
			xioctl(self->ctl, KVS_IOC_POOL_DESTROY, &d);
		}
	}
	if (self->ctl >= 0)
		close(self->ctl);
}

/* First thing in every test (6.1's harness cannot skip from setup). */
#define REQUIRE() do { \
	if (self->skip == 1) \
		SKIP(return, "%s", self->reason); \
	ASSERT_EQ(0, self->skip) TH_LOG("%s", self->reason); \
} while (0)

static void track_kid(struct __test_metadata *_metadata,
		      FIXTURE_DATA(uring) *self, pid_t pid)
{
	int i;

	ASSERT_LT(0, pid) TH_LOG("fork: %s", strerror(errno));
	for (i = 0; i < MAX_KIDS; i++) {
		if (!self->kids[i]) {
			self->kids[i] = pid;
			return;
		}
	}
	ASSERT_TRUE(0) TH_LOG("too many children");
}

static void untrack_kid(FIXTURE_DATA(uring) *self, pid_t pid)
{
	int i;

	for (i = 0; i < MAX_KIDS; i++)
		if (self->kids[i] == pid)
			self->kids[i] = 0;
}

/* Create a pool (name unique to this process) and track it. */
static __u32 new_pool(struct __test_metadata *_metadata, FIXTURE_DATA(uring) *self,
		      const char *tag, __u64 n_pages, __u32 quota, char *name)
{
	struct kvs_pool_create pc;
	int i;

	memset(&pc, 0, sizeof(pc));
	snprintf(pc.name, sizeof(pc.name), "ur-%d-%u-%s", (int)getpid(), self->seq++, tag);
	pc.n_pages = n_pages;
	pc.geom.n_layers = 2;
	pc.geom.n_kv_heads = 2;
	pc.geom.head_dim = 16;
	pc.geom.tokens_per_page = 16;
	pc.geom.dtype = KVS_DTYPE_F16;
	pc.mode = 0600;
	pc.mem_fd = -1;
	pc.max_pages_per_file = quota;
	ASSERT_EQ(0, xioctl(self->ctl, KVS_IOC_POOL_CREATE, &pc)) TH_LOG("create %s", pc.name);
	ASSERT_NE(0u, pc.pool_id);
	for (i = 0; i < MAX_POOLS && self->pools[i]; i++)
		;
	ASSERT_LT(i, MAX_POOLS);
	self->pools[i] = pc.pool_id;
	memcpy(name, pc.name, KVS_NAME_MAX);
	return pc.pool_id;
}

static int open_attached(struct __test_metadata *_metadata, const char *name, __u64 ns)
{
	int fd = dev_open();

	ASSERT_LE(0, fd) TH_LOG("open: %s", strerror(-fd));
	ASSERT_EQ(0, attach(fd, name, ns)) TH_LOG("attach %s", name);
	return fd;
}

static void ring_init(struct __test_metadata *_metadata, struct io_uring *r,
		      unsigned int entries, unsigned int flags)
{
	int ret = io_uring_queue_init(entries, r, flags);

	ASSERT_EQ(0, ret) TH_LOG("io_uring_queue_init(%u, %#x): %s", entries, flags,
				 strerror(-ret));
}

/*
 * The invariants, at a quiescent point: KVS_STATS_CHECK passes, the
 * counters add up (n_held == n_refs + n_owned), and a walk of the page
 * descriptors agrees with the counters (states, refcounts, evictable
 * leaves, child counts, no key on a FREE/OWNED page).
 */
static void check_pool(struct __test_metadata *_metadata, int ctl, __u32 pool,
		       struct kvs_pool_stats *out)
{
	struct kvs_pool_stats st;
	struct kvs_page_desc *d;
	__u64 cnt[4] = { 0 }, refs = 0, evictable = 0;
	__u32 *children, i, n;
	int got;

	ASSERT_EQ(0, stats_of(ctl, pool, KVS_STATS_CHECK, &st));
	if (out)
		*out = st;
	ASSERT_EQ(st.n_pages, st.n_free + st.n_owned + st.n_shared + st.n_cached);
	ASSERT_EQ(st.n_held, st.n_refs + st.n_owned);
	ASSERT_LE(st.n_shared, st.n_refs);

	n = (__u32)st.n_pages;
	d = calloc(n, sizeof(*d));
	children = calloc(n, sizeof(*children));
	ASSERT_NE(NULL, d);
	ASSERT_NE(NULL, children);
	for (i = 0; i < n; i += got) {
		got = pages_of(ctl, pool, i, n - i < 4096 ? n - i : 4096, d + i);
		ASSERT_LT(0, got) TH_LOG("PAGES from %u: %d", i, got);
	}
	for (i = 0; i < n; i++) {
		const struct kvs_page_desc *p = &d[i];

		ASSERT_EQ(i, p->index);
		ASSERT_GE((unsigned)(KVS_PAGE_CACHED), p->state) TH_LOG("page %u", i);
		cnt[p->state]++;
		refs += p->refcount;
		if (p->state == KVS_PAGE_SHARED) {
			ASSERT_LE(1u, p->refcount) TH_LOG("page %u", i);
		} else {
			ASSERT_EQ(0u, p->refcount) TH_LOG("page %u", i);
		}
		if (p->state < KVS_PAGE_SHARED) {
			ASSERT_EQ(KVS_NO_PAGE, p->parent) TH_LOG("page %u", i);
			ASSERT_EQ(0u, p->n_children) TH_LOG("page %u", i);
			ASSERT_EQ(0u, p->key.w[0] | p->key.w[1] | p->key.w[2] | p->key.w[3])
				TH_LOG("page %u", i);
		} else if (p->parent != KVS_NO_PAGE) {
			ASSERT_LT(p->parent, n) TH_LOG("page %u", i);
			children[p->parent]++;
		}
		if (p->state == KVS_PAGE_CACHED && !p->n_children)
			evictable++;
	}
	for (i = 0; i < n; i++)
		ASSERT_EQ(children[i], d[i].n_children) TH_LOG("page %u", i);
	ASSERT_EQ(st.n_free, cnt[KVS_PAGE_FREE]);
	ASSERT_EQ(st.n_owned, cnt[KVS_PAGE_OWNED]);
	ASSERT_EQ(st.n_shared, cnt[KVS_PAGE_SHARED]);
	ASSERT_EQ(st.n_cached, cnt[KVS_PAGE_CACHED]);
	ASSERT_EQ(st.n_refs, refs);
	ASSERT_EQ(st.n_evictable, evictable);
	free(d);
	free(children);
}

/*
 * Poll until pool @pool has @files files attached, @held holdings and
 * @owned OWNED pages: a file closed by io_uring's teardown or by a dying
 * process is released asynchronously.
 */
static int wait_pool(int ctl, __u32 pool, __u64 files, __u64 held, __u64 owned,
		     struct kvs_pool_stats *st)
{
	long long end = now_ms() + RELEASE_WAIT_MS;

	for (;;) {
		int ret = stats_of(ctl, pool, 0, st);

		if (ret)
			return ret;
		if (st->n_files == files && st->n_held == held && st->n_owned == owned)
			return 0;
		if (now_ms() > end)
			return -ETIME;
		sleep_ms(10);
	}
}

#define ASSERT_POOL_AT(ctl, pool, files, held, owned) do { \
	struct kvs_pool_stats __st; \
	int __r = wait_pool((ctl), (pool), (files), (held), (owned), &__st); \
	ASSERT_EQ(0, __r) TH_LOG("pool %u: files %llu held %llu owned %llu, want %llu %llu %llu", \
		(unsigned)(pool), (unsigned long long)__st.n_files, \
		(unsigned long long)__st.n_held, (unsigned long long)__st.n_owned, \
		(unsigned long long)(files), (unsigned long long)(held), \
		(unsigned long long)(owned)); \
} while (0)

#define ASSERT_PAGE(ctl, pool, idx, state_, refs_) do { \
	struct kvs_page_desc __d; \
	ASSERT_EQ(0, page_of((ctl), (pool), (idx), &__d)); \
	ASSERT_EQ((__u32)(state_), __d.state) TH_LOG("page %u state", (unsigned)(idx)); \
	ASSERT_EQ((__u32)(refs_), __d.refcount) TH_LOG("page %u refcount", (unsigned)(idx)); \
} while (0)

/*
 * The end of a test: close @fds, destroy every pool, and wait until the
 * arbiter is back where setup found it (no pool or object left).
 */
static void finish(struct __test_metadata *_metadata, FIXTURE_DATA(uring) *self,
		   int *fds, int n_fds)
{
	struct kvs_info now;
	long long end;
	int i;

	for (i = 0; i < n_fds; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
	for (i = 0; i < MAX_POOLS; i++) {
		struct kvs_pool_destroy d;

		if (!self->pools[i])
			continue;
		memset(&d, 0, sizeof(d));
		d.pool_id = self->pools[i];
		ASSERT_EQ(0, xioctl(self->ctl, KVS_IOC_POOL_DESTROY, &d))
			TH_LOG("destroy pool %u", self->pools[i]);
		self->pools[i] = 0;
	}
	end = now_ms() + RELEASE_WAIT_MS;
	do {
		ASSERT_EQ(0, info_of(self->ctl, &now));
		if (now.n_pools == self->base.n_pools && now.n_objects == self->base.n_objects)
			break;
		sleep_ms(10);
	} while (now_ms() < end);
	ASSERT_EQ(self->base.n_pools, now.n_pools);
	ASSERT_EQ(self->base.n_objects, now.n_objects);
}

/* State of a small pool and of some of its files, for "nothing changed". */
#define SNAP_PAGES	64
#define SNAP_FDS	4

struct snap {
	struct kvs_pool_stats st;
	struct kvs_page_desc pg[SNAP_PAGES];
	long held[SNAP_FDS];
};

static void take_snap(struct __test_metadata *_metadata, int ctl, __u32 pool,
		      const int *fds, int n_fds, struct snap *s)
{
	int i, n;

	memset(s, 0, sizeof(*s));
	ASSERT_EQ(0, stats_of(ctl, pool, 0, &s->st));
	ASSERT_GE((unsigned)(SNAP_PAGES), s->st.n_pages);
	n = pages_of(ctl, pool, 0, (__u32)s->st.n_pages, s->pg);
	ASSERT_EQ((int)s->st.n_pages, n);
	for (i = 0; i < n_fds && i < SNAP_FDS; i++)
		s->held[i] = held_of(fds[i]);
}

/*
 * Nothing a failed command may change has changed: the state counters,
 * the counters of effects (allocs, publishes, duplicates, evictions),
 * every page descriptor and every file's holdings.  (alloc_fails,
 * lookups and hits count attempts, not effects.)
 */
static void assert_unchanged(struct __test_metadata *_metadata, const struct snap *a,
			     const struct snap *b, const char *what)
{
	__u32 i;

	ASSERT_EQ(a->st.n_free, b->st.n_free) TH_LOG("%s", what);
	ASSERT_EQ(a->st.n_owned, b->st.n_owned) TH_LOG("%s", what);
	ASSERT_EQ(a->st.n_shared, b->st.n_shared) TH_LOG("%s", what);
	ASSERT_EQ(a->st.n_cached, b->st.n_cached) TH_LOG("%s", what);
	ASSERT_EQ(a->st.n_evictable, b->st.n_evictable) TH_LOG("%s", what);
	ASSERT_EQ(a->st.n_refs, b->st.n_refs) TH_LOG("%s", what);
	ASSERT_EQ(a->st.n_held, b->st.n_held) TH_LOG("%s", what);
	ASSERT_EQ(a->st.n_files, b->st.n_files) TH_LOG("%s", what);
	ASSERT_EQ(a->st.allocs, b->st.allocs) TH_LOG("%s", what);
	ASSERT_EQ(a->st.publishes, b->st.publishes) TH_LOG("%s", what);
	ASSERT_EQ(a->st.dup_publishes, b->st.dup_publishes) TH_LOG("%s", what);
	ASSERT_EQ(a->st.evictions, b->st.evictions) TH_LOG("%s", what);
	for (i = 0; i < a->st.n_pages && i < SNAP_PAGES; i++)
		ASSERT_EQ(0, memcmp(&a->pg[i], &b->pg[i], sizeof(a->pg[i])))
			TH_LOG("%s: page %u (state %u->%u, refcount %u->%u)", what, i,
			       a->pg[i].state, b->pg[i].state, a->pg[i].refcount,
			       b->pg[i].refcount);
	for (i = 0; i < SNAP_FDS; i++)
		ASSERT_EQ(a->held[i], b->held[i]) TH_LOG("%s: file %u holdings", what, i);
}

/* ------------------------------------------------------------------ */
/* Parity: one scenario through ioctl, uring, uring + IOSQE_ASYNC     */
/* ------------------------------------------------------------------ */

enum xport { X_IOCTL, X_URING, X_URING_ASYNC };

static const char *const xport_name[] = { "ioctl", "uring", "uring+IOSQE_ASYNC" };

struct cli {
	int fd;
	enum xport x;
	struct io_uring *ring;
};

/* A carried command through @c's transport: what a CQE would carry. */
static int cli_cmd(struct cli *c, __u32 op, void *req, size_t len)
{
	int ret;

	if (c->x != X_IOCTL)
		return ucmd_full(c->ring, c->fd, op, req, len,
				 c->x == X_URING_ASYNC ? IOSQE_ASYNC : 0, 0, 0);
	ret = xioctl(c->fd, op, req);
	if (ret)
		return ret;
	if (op == KVS_IOC_LOOKUP)
		return ((struct kvs_lookup *)req)->n_hit;
	if (op == KVS_IOC_PUBLISH)
		return ((struct kvs_publish *)req)->n_dup;
	return 0;
}

static int c_alloc(struct cli *c, __u32 n, __u32 *pages)
{
	struct kvs_alloc q = req_alloc(n, pages);

	return cli_cmd(c, KVS_IOC_ALLOC, &q, sizeof(q));
}

static int c_publish(struct cli *c, struct kvs_publish_entry *e, __u32 n)
{
	struct kvs_publish q = req_publish(e, n);

	return cli_cmd(c, KVS_IOC_PUBLISH, &q, sizeof(q));
}

static int c_lookup(struct cli *c, const struct kvs_key *k, __u32 n, __u32 *pages)
{
	struct kvs_lookup q = req_lookup(k, n, pages);

	return cli_cmd(c, KVS_IOC_LOOKUP, &q, sizeof(q));
}

static int c_put(struct cli *c, const __u32 *pages, __u32 n)
{
	struct kvs_put q = req_put(pages, n);

	return cli_cmd(c, KVS_IOC_PUT, &q, sizeof(q));
}

#define PAR_N_PAGES	12
#define PAR_STEPS	64
#define PAR_OUT_WORDS	64

struct par_rec {
	const char *what;
	int expect, ret;
	__u32 out[PAR_OUT_WORDS];	/* the command's output array */
	long held_a, held_b;
	struct kvs_pool_stats st;	/* pool_id and flags zeroed */
	struct kvs_page_desc pg[PAR_N_PAGES];
};

struct par {
	int ctl;
	__u32 pool;
	struct cli a, b;
	void *ro;			/* a read-only page */
	int n;
	struct par_rec rec[PAR_STEPS];
};

static void par_snap(struct par *p, const char *what, int expect, int ret,
		     const void *out, size_t len)
{
	struct par_rec *r = &p->rec[p->n < PAR_STEPS - 1 ? p->n++ : PAR_STEPS - 1];

	memset(r, 0, sizeof(*r));
	r->what = what;
	r->expect = expect;
	r->ret = ret;
	if (out)
		memcpy(r->out, out, len < sizeof(r->out) ? len : sizeof(r->out));
	r->held_a = p->a.fd >= 0 ? held_of(p->a.fd) : -1;
	r->held_b = p->b.fd >= 0 ? held_of(p->b.fd) : -1;
	if (stats_of(p->ctl, p->pool, 0, &r->st))
		r->st.n_pages = ~0ull;
	r->st.pool_id = 0;
	r->st.flags = 0;
	if (pages_of(p->ctl, p->pool, 0, PAR_N_PAGES, r->pg) != PAR_N_PAGES)
		r->pg[0].index = ~0u;
}

/* Close @c's file and wait until the pool has @files files left. */
static void par_close(struct par *p, struct cli *c, __u64 files)
{
	struct kvs_pool_stats st;
	long long end = now_ms() + RELEASE_WAIT_MS;

	close(c->fd);
	c->fd = -1;
	while (!stats_of(p->ctl, p->pool, 0, &st) && st.n_files != files &&
	       now_ms() < end)
		sleep_ms(10);
}

/*
 * Two files a and b of a 12-page pool, namespace 7.  Expected results
 * worked out from the ABI (free pages are taken lowest first on a fresh
 * pool; a freed page is reused first; eviction is leaf-first LRU).
 */
static void par_scenario(struct par *p)
{
	struct cli *a = &p->a, *b = &p->b;
	__u32 ap[8], bp[4], a2[2], got[8], pg[8], big[64];
	struct kvs_publish_entry e[4];
	struct kvs_key k[8];
	int r;

#define SNAP(what, exp, ret, out, len) par_snap(p, what, exp, ret, out, len)
#define FILL(x) memset((x), 0xa5, sizeof(x))
	FILL(ap);
	r = c_alloc(a, 5, ap);
	SNAP("a: ALLOC 5", 0, r, ap, sizeof(ap));

	ents_chain(e, ap, 4, KVS_NO_PAGE, 1, 0);
	r = c_publish(a, e, 4);
	SNAP("a: PUBLISH chain 1 keys 0..3", 0, r, e, 4 * sizeof(e[0]));

	FILL(bp);
	r = c_alloc(b, 3, bp);
	SNAP("b: ALLOC 3", 0, r, bp, sizeof(bp));

	memset(e, 0, sizeof(e));
	e[0] = ent(bp[0], KVS_NO_PAGE, key_of(1, 0));
	e[1] = ent(bp[1], KVS_PARENT_PREV, key_of(1, 1));
	e[2] = ent(bp[2], KVS_PARENT_PREV, key_of(1, 7));
	r = c_publish(b, e, 3);
	SNAP("b: PUBLISH 2 duplicates + 1 new", 2, r, e, 3 * sizeof(e[0]));

	keys_of(k, 1, 0, 6);
	FILL(got);
	r = c_lookup(b, k, 6, got);
	SNAP("b: LOOKUP chain 1 keys 0..5 (run of 4)", 4, r, got, sizeof(got));

	keys_of(k, 2, 0, 2);
	FILL(got);
	r = c_lookup(b, k, 2, got);
	SNAP("b: LOOKUP chain 2 (miss at once)", 0, r, got, sizeof(got));

	k[0] = key_of(1, 0);
	k[1] = key_of(1, 1);
	k[2] = key_of(1, 7);
	FILL(got);
	r = c_lookup(b, k, 3, got);
	SNAP("b: LOOKUP the branch 1/0 1/1 1/7", 3, r, got, sizeof(got));

	r = c_put(a, &ap[4], 1);
	SNAP("a: PUT its OWNED page", 0, r, NULL, 0);
	r = c_put(a, &ap[4], 1);
	SNAP("a: PUT it again", -ENOENT, r, NULL, 0);

	pg[0] = pg[1] = pg[2] = ap[0];
	r = c_put(b, pg, 3);
	SNAP("b: PUT page 0 three times", 0, r, NULL, 0);
	pg[0] = ap[1];
	pg[1] = 99;
	r = c_put(b, pg, 2);
	SNAP("b: PUT [held, beyond the pool]", -ENOENT, r, NULL, 0);

	bp[3] = 0xa5a5a5a5;
	r = c_alloc(b, 1, &bp[3]);
	SNAP("b: ALLOC 1", 0, r, bp, sizeof(bp));

	memset(e, 0, sizeof(e));
	e[0] = ent(bp[3], KVS_NO_PAGE, key_of(3, 0));
	r = c_publish(a, e, 1);
	SNAP("a: PUBLISH b's page", -ENOENT, r, e, sizeof(e[0]));

	FILL(a2);
	r = c_alloc(a, 1, a2);
	SNAP("a: ALLOC 1", 0, r, a2, sizeof(a2));

	e[0] = ent(a2[0], KVS_NO_PAGE, key_of(4, 0));
	e[1] = ent(a2[0], KVS_PARENT_PREV, key_of(4, 1));
	r = c_publish(a, e, 2);
	SNAP("a: PUBLISH one page twice", -EINVAL, r, e, 2 * sizeof(e[0]));
	e[0] = ent(a2[0], KVS_PARENT_PREV, key_of(4, 0));
	r = c_publish(a, e, 1);
	SNAP("a: PUBLISH PARENT_PREV in entry 0", -EINVAL, r, e, sizeof(e[0]));
	e[0] = ent(a2[0], bp[3], key_of(4, 0));
	r = c_publish(a, e, 1);
	SNAP("a: PUBLISH under b's OWNED page", -ENOENT, r, e, sizeof(e[0]));
	e[0] = ent(a2[0], bp[2], key_of(4, 0));
	r = c_publish(a, e, 1);
	SNAP("a: PUBLISH under a SHARED page a does not hold", -ENOENT, r, e, sizeof(e[0]));
	e[0] = ent(a2[0], KVS_NO_PAGE, key_of(4, 0));
	e[0].flags = KVS_PUBLISHED_DUP;
	r = c_publish(a, e, 1);
	SNAP("a: PUBLISH with an out flag set", -EINVAL, r, e, sizeof(e[0]));

	FILL(big);
	r = c_alloc(a, 6, big);
	SNAP("a: ALLOC 6 of 5 free", -ENOSPC, r, big, sizeof(big));
	FILL(big);
	r = c_alloc(a, 20, big);
	SNAP("a: ALLOC 20 over quota", -EDQUOT, r, big, sizeof(big));

	r = quota_set(b->fd, (__u32)held_of(b->fd));
	SNAP("b: QUOTA = what it holds (ioctl)", 0, r, NULL, 0);
	keys_of(k, 1, 0, 2);
	FILL(got);
	r = c_lookup(b, k, 2, got);
	SNAP("b: LOOKUP over quota", -EDQUOT, r, got, sizeof(got));
	FILL(got);
	r = c_alloc(b, 1, got);
	SNAP("b: ALLOC over quota", -EDQUOT, r, got, sizeof(got));
	r = quota_set(b->fd, PAR_N_PAGES);
	SNAP("b: QUOTA back (ioctl)", 0, r, NULL, 0);

	keys_of(k, 1, 0, 4);
	r = c_lookup(a, k, 0, got);
	SNAP("a: LOOKUP count 0", -EINVAL, r, NULL, 0);
	r = c_lookup(a, k, KVS_MAX_BATCH + 1, got);
	SNAP("a: LOOKUP count MAX_BATCH+1", -E2BIG, r, NULL, 0);
	r = c_lookup(a, (const struct kvs_key *)(uintptr_t)BAD_PTR, 1, got);
	SNAP("a: LOOKUP unmapped keys", -EFAULT, r, NULL, 0);
	r = c_lookup(a, k, 4, p->ro);
	SNAP("a: LOOKUP read-only pages (hits)", -EFAULT, r, NULL, 0);
	r = c_put(a, ap, 0);
	SNAP("a: PUT count 0", -EINVAL, r, NULL, 0);
	r = c_put(a, (const __u32 *)(uintptr_t)BAD_PTR, 1);
	SNAP("a: PUT unmapped pages", -EFAULT, r, NULL, 0);
	r = c_alloc(a, 1, p->ro);
	SNAP("a: ALLOC into read-only pages", -EFAULT, r, NULL, 0);
	r = c_publish(a, p->ro, 1);
	SNAP("a: PUBLISH read-only entries", -EFAULT, r, NULL, 0);
	r = c_alloc(a, KVS_MAX_BATCH + 1, big);
	SNAP("a: ALLOC count MAX_BATCH+1", -E2BIG, r, NULL, 0);

	r = c_put(a, ap, 4);
	SNAP("a: PUT its 4 references", 0, r, NULL, 0);
	pg[0] = pg[1] = pg[2] = ap[1];
	pg[3] = ap[2];
	pg[4] = ap[3];
	pg[5] = pg[6] = bp[2];
	r = c_put(b, pg, 7);
	SNAP("b: PUT its 7 references", 0, r, NULL, 0);

	FILL(got);
	r = c_alloc(a, 6, got);
	SNAP("a: ALLOC 6, evicting one leaf", 0, r, got, sizeof(got));

	keys_of(k, 1, 0, 4);
	FILL(pg);
	r = c_lookup(b, k, 4, pg);
	SNAP("b: LOOKUP chain 1 0..3 (3 revived, 1 evicted)", 3, r, pg, sizeof(pg));

	e[0] = ent(bp[3], pg[2], key_of(1, 3));
	r = c_publish(b, e, 1);
	SNAP("b: PUBLISH the evicted key again under a held parent", 0, r, e, sizeof(e[0]));

	par_close(p, b, 1);
	SNAP("close b", 0, 0, NULL, 0);
	par_close(p, a, 0);
	SNAP("close a", 0, 0, NULL, 0);
#undef SNAP
#undef FILL
}

static void par_run(struct __test_metadata *_metadata, FIXTURE_DATA(uring) *self,
		    struct par *p, enum xport x, struct io_uring *ring, void *ro)
{
	char name[KVS_NAME_MAX];

	memset(p, 0, sizeof(*p));
	p->ctl = self->ctl;
	p->ro = ro;
	p->pool = new_pool(_metadata, self, "par", PAR_N_PAGES, 0, name);
	p->a = (struct cli){ open_attached(_metadata, name, 7), x, ring };
	p->b = (struct cli){ open_attached(_metadata, name, 7), x, ring };
	par_scenario(p);
	check_pool(_metadata, self->ctl, p->pool, NULL);
}

TEST_F_TIMEOUT(uring, parity_with_ioctl, 120)
{
	struct par *ref, *run;
	struct io_uring ring;
	void *ro;
	int x, i, w;

	REQUIRE();
	ro = ro_page();
	ASSERT_NE(NULL, ro);
	ref = calloc(1, sizeof(*ref));
	run = calloc(1, sizeof(*run));
	ASSERT_NE(NULL, ref);
	ASSERT_NE(NULL, run);
	ring_init(_metadata, &ring, 16, IORING_SETUP_SQE128);

	par_run(_metadata, self, ref, X_IOCTL, NULL, ro);
	for (i = 0; i < ref->n; i++)
		ASSERT_EQ(ref->rec[i].expect, ref->rec[i].ret)
			TH_LOG("ioctl, step %d: %s", i, ref->rec[i].what);

	for (x = X_URING; x <= X_URING_ASYNC; x++) {
		par_run(_metadata, self, run, x, &ring, ro);
		ASSERT_EQ(ref->n, run->n);
		for (i = 0; i < ref->n; i++) {
			const struct par_rec *a = &ref->rec[i], *b = &run->rec[i];
			const __u64 *sa = (const __u64 *)&a->st, *sb = (const __u64 *)&b->st;

			ASSERT_EQ(a->ret, b->ret)
				TH_LOG("%s, step %d: %s", xport_name[x], i, a->what);
			for (w = 0; w < PAR_OUT_WORDS; w++)
				ASSERT_EQ(a->out[w], b->out[w])
					TH_LOG("%s, step %d: %s: output word %d",
					       xport_name[x], i, a->what, w);
			ASSERT_EQ(a->held_a, b->held_a)
				TH_LOG("%s, step %d: %s", xport_name[x], i, a->what);
			ASSERT_EQ(a->held_b, b->held_b)
				TH_LOG("%s, step %d: %s", xport_name[x], i, a->what);
			for (w = 0; w < (int)(sizeof(a->st) / 8); w++)
				ASSERT_EQ(sa[w], sb[w])
					TH_LOG("%s, step %d: %s: stats word %d",
					       xport_name[x], i, a->what, w);
			for (w = 0; w < PAR_N_PAGES; w++) {
				const struct kvs_page_desc *pa = &a->pg[w], *pb = &b->pg[w];

				ASSERT_EQ(0, memcmp(pa, pb, sizeof(*pa)))
					TH_LOG("%s, step %d: %s: page %d (state %u/%u refs %u/%u)",
					       xport_name[x], i, a->what, w, pa->state,
					       pb->state, pa->refcount, pb->refcount);
			}
		}
	}
	io_uring_queue_exit(&ring);
	free(ref);
	free(run);
	finish(_metadata, self, NULL, 0);
}

/* ------------------------------------------------------------------ */
/* ioctl and uring on the same files                                  */
/* ------------------------------------------------------------------ */

TEST_F(uring, mixed_ioctl_and_uring)
{
	char name[KVS_NAME_MAX];
	struct kvs_publish_entry e[4];
	struct kvs_key k[4];
	struct kvs_pool_stats st;
	struct io_uring ring;
	__u32 pool, a[4], got[4], b0;
	int fds[2], A, B, i;

	REQUIRE();
	pool = new_pool(_metadata, self, "mix", 16, 0, name);
	A = fds[0] = open_attached(_metadata, name, 1);
	B = fds[1] = open_attached(_metadata, name, 1);
	ring_init(_metadata, &ring, 16, IORING_SETUP_SQE128);

	/* Alloc by ioctl, publish by uring. */
	ASSERT_EQ(0, io_alloc(A, 4, a));
	ASSERT_EQ(4, held_of(A));
	ents_chain(e, a, 4, KVS_NO_PAGE, 5, 0);
	ASSERT_EQ(0, u_publish(&ring, A, e, 4));
	for (i = 0; i < 4; i++) {
		ASSERT_EQ(a[i], e[i].result);
		ASSERT_EQ(0u, e[i].flags);
		ASSERT_PAGE(self->ctl, pool, a[i], KVS_PAGE_SHARED, 1);
	}
	ASSERT_EQ(4, held_of(A));

	/* Lookup by uring from the other file (same ring, other fd). */
	keys_of(k, 5, 0, 4);
	memset(got, 0xff, sizeof(got));
	ASSERT_EQ(4, u_lookup(&ring, B, k, 4, got));
	for (i = 0; i < 4; i++) {
		ASSERT_EQ(a[i], got[i]);
		ASSERT_PAGE(self->ctl, pool, a[i], KVS_PAGE_SHARED, 2);
	}
	ASSERT_EQ(4, held_of(B));

	/* References taken by uring, given back by ioctl, and not twice. */
	ASSERT_EQ(0, io_put(B, got, 2));
	ASSERT_EQ(2, held_of(B));
	ASSERT_EQ(-ENOENT, u_put(&ring, B, got, 2));
	ASSERT_EQ(2, held_of(B));

	/* uring PUT of what ioctl ALLOC + uring PUBLISH gave A. */
	ASSERT_EQ(0, u_put(&ring, A, a, 4));
	ASSERT_EQ(0, held_of(A));
	ASSERT_PAGE(self->ctl, pool, a[0], KVS_PAGE_CACHED, 0);
	ASSERT_PAGE(self->ctl, pool, a[1], KVS_PAGE_CACHED, 0);
	ASSERT_PAGE(self->ctl, pool, a[2], KVS_PAGE_SHARED, 1);
	ASSERT_PAGE(self->ctl, pool, a[3], KVS_PAGE_SHARED, 1);

	/* ioctl LOOKUP revives the cached half. */
	memset(got, 0xff, sizeof(got));
	ASSERT_EQ(4, io_lookup(A, k, 4, got));
	for (i = 0; i < 4; i++)
		ASSERT_EQ(a[i], got[i]);
	ASSERT_EQ(0, u_put(&ring, B, &a[2], 2));
	ASSERT_EQ(0, held_of(B));

	/* uring ALLOC, ioctl PUBLISH as a duplicate, ioctl PUT. */
	ASSERT_EQ(0, u_alloc(&ring, B, 1, &b0));
	ASSERT_PAGE(self->ctl, pool, b0, KVS_PAGE_OWNED, 0);
	e[0] = ent(b0, KVS_NO_PAGE, key_of(5, 0));
	ASSERT_EQ(1, io_publish(B, e, 1));
	ASSERT_EQ(a[0], e[0].result);
	ASSERT_EQ(KVS_PUBLISHED_DUP, e[0].flags);
	ASSERT_PAGE(self->ctl, pool, b0, KVS_PAGE_FREE, 0);
	ASSERT_PAGE(self->ctl, pool, a[0], KVS_PAGE_SHARED, 2);
	ASSERT_EQ(0, io_put(B, &a[0], 1));
	ASSERT_EQ(-ENOENT, u_put(&ring, A, &b0, 1));

	check_pool(_metadata, self->ctl, pool, &st);
	ASSERT_EQ(4u, st.n_held);
	ASSERT_EQ(4u, st.n_refs);
	ASSERT_EQ(0u, st.n_owned);
	ASSERT_EQ(2u, st.n_files);

	/* A's uring-era holdings go with A's file; the ring stays open. */
	close(A);
	fds[0] = -1;
	ASSERT_POOL_AT(self->ctl, pool, 1, 0, 0);
	check_pool(_metadata, self->ctl, pool, NULL);
	io_uring_queue_exit(&ring);
	finish(_metadata, self, fds, 2);
}

/*
 * KVS_LOOKUP_PEEK through io_uring: cqe->res is the run, as for LOOKUP,
 * and nothing is taken or written; with KVS_LOOKUP_WAIT (the parked
 * form's flag) on a plain payload it is refused.
 */
TEST_F(uring, lookup_peek_takes_nothing)
{
	char name[KVS_NAME_MAX];
	struct kvs_publish_entry e[3];
	struct kvs_pool_stats st0, st;
	struct kvs_lookup q;
	struct kvs_key k[5];
	struct io_uring ring;
	__u32 pool, a[3], got[5];
	int fds[2], A, B, i;

	REQUIRE();
	pool = new_pool(_metadata, self, "peek", 16, 0, name);
	A = fds[0] = open_attached(_metadata, name, 1);
	B = fds[1] = open_attached(_metadata, name, 1);
	ring_init(_metadata, &ring, 16, IORING_SETUP_SQE128);
	ASSERT_EQ(0, io_alloc(A, 3, a));
	ents_chain(e, a, 3, KVS_NO_PAGE, 6, 0);
	ASSERT_EQ(0, io_publish(A, e, 3));
	ASSERT_EQ(0, io_put(A, &a[2], 1));
	keys_of(k, 6, 0, 5);
	memset(got, 0xff, sizeof(got));
	check_pool(_metadata, self->ctl, pool, &st0);

	q = req_lookup(k, 5, got);
	q.flags = KVS_LOOKUP_PEEK;
	ASSERT_EQ(3, ucmd(&ring, B, KVS_IOC_LOOKUP, &q, sizeof(q)));
	q = req_lookup(k, 5, NULL);
	q.flags = KVS_LOOKUP_PEEK;
	ASSERT_EQ(3, ucmd(&ring, B, KVS_IOC_LOOKUP, &q, sizeof(q)));
	for (i = 0; i < 5; i++)
		ASSERT_EQ(0xffffffffu, got[i]);
	ASSERT_EQ(0, held_of(B));
	ASSERT_PAGE(self->ctl, pool, a[2], KVS_PAGE_CACHED, 0);
	check_pool(_metadata, self->ctl, pool, &st);
	ASSERT_EQ(st0.lookups, st.lookups);
	ASSERT_EQ(st0.hits, st.hits);
	ASSERT_EQ(st0.n_refs, st.n_refs);

	q.flags = KVS_LOOKUP_PEEK | KVS_LOOKUP_WAIT;
	ASSERT_EQ(-EINVAL, ucmd(&ring, B, KVS_IOC_LOOKUP, &q, sizeof(q)));
	ASSERT_EQ(0, held_of(B));
	/* LOOKUP by uring agrees, and takes the run. */
	ASSERT_EQ(3, u_lookup(&ring, B, k, 5, got));
	ASSERT_EQ(3, held_of(B));
	ASSERT_EQ(0, u_put(&ring, B, got, 3));
	ASSERT_EQ(0, io_put(A, a, 2));
	check_pool(_metadata, self->ctl, pool, NULL);
	io_uring_queue_exit(&ring);
	finish(_metadata, self, fds, 2);
}

/* ------------------------------------------------------------------ */
/* A failed batch changes nothing                                     */
/* ------------------------------------------------------------------ */

TEST_F(uring, bad_batch_all_or_nothing)
{
	char name[KVS_NAME_MAX];
	struct kvs_publish_entry e[4];
	struct kvs_key k[4];
	struct snap s0, s1;
	struct io_uring ring;
	__u32 pool, a[4], b[2], pg[4], got[16];
	int fds[2], A, B;
	void *ro;

	REQUIRE();
	ro = ro_page();
	ASSERT_NE(NULL, ro);
	pool = new_pool(_metadata, self, "bad", 16, 0, name);
	A = fds[0] = open_attached(_metadata, name, 3);
	B = fds[1] = open_attached(_metadata, name, 3);
	ring_init(_metadata, &ring, 16, IORING_SETUP_SQE128);

	/* A: references on a0 a1, OWNED a2 a3; B: OWNED b0 b1. */
	ASSERT_EQ(0, u_alloc(&ring, A, 4, a));
	ents_chain(e, a, 2, KVS_NO_PAGE, 9, 0);
	ASSERT_EQ(0, u_publish(&ring, A, e, 2));
	ASSERT_EQ(0, u_alloc(&ring, B, 2, b));
	take_snap(_metadata, self->ctl, pool, fds, 2, &s0);

#define UNCHANGED(what) do { \
	take_snap(_metadata, self->ctl, pool, fds, 2, &s1); \
	assert_unchanged(_metadata, &s0, &s1, what); \
} while (0)

	pg[0] = a[0];
	pg[1] = b[0];
	pg[2] = a[1];
	ASSERT_EQ(-ENOENT, u_put(&ring, A, pg, 3));
	UNCHANGED("PUT [held, B's page, held]");
	pg[0] = a[2];
	pg[1] = a[2];
	ASSERT_EQ(-ENOENT, u_put(&ring, A, pg, 2));
	UNCHANGED("PUT an OWNED page twice");
	pg[0] = a[0];
	pg[1] = a[1];
	pg[2] = a[0];
	ASSERT_EQ(-ENOENT, u_put(&ring, A, pg, 3));
	UNCHANGED("PUT a reference more often than held");
	pg[0] = a[3];
	pg[1] = 1000;
	ASSERT_EQ(-ENOENT, u_put(&ring, A, pg, 2));
	UNCHANGED("PUT [OWNED, beyond the pool]");

	e[0] = ent(a[2], KVS_NO_PAGE, key_of(10, 0));
	e[1] = ent(b[0], KVS_PARENT_PREV, key_of(10, 1));
	e[2] = ent(a[3], KVS_PARENT_PREV, key_of(10, 2));
	ASSERT_EQ(-ENOENT, u_publish(&ring, A, e, 3));
	UNCHANGED("PUBLISH with B's page in the middle");
	e[0] = ent(a[2], KVS_NO_PAGE, key_of(10, 0));
	e[1] = ent(a[3], KVS_PARENT_PREV, key_of(10, 1));
	e[2] = ent(a[2], KVS_PARENT_PREV, key_of(10, 2));
	ASSERT_EQ(-EINVAL, u_publish(&ring, A, e, 3));
	UNCHANGED("PUBLISH a page twice");
	e[0] = ent(a[2], KVS_NO_PAGE, key_of(10, 0));
	e[1] = ent(a[3], b[1], key_of(10, 1));
	ASSERT_EQ(-ENOENT, u_publish(&ring, A, e, 2));
	UNCHANGED("PUBLISH under a parent A does not hold");
	e[0] = ent(a[2], KVS_NO_PAGE, key_of(10, 0));
	e[1] = ent(a[3], KVS_PARENT_PREV, key_of(10, 1));
	e[1].result = 1;
	ASSERT_EQ(-EINVAL, u_publish(&ring, A, e, 2));
	UNCHANGED("PUBLISH with an out field set in entry 1");
	ASSERT_EQ(-EFAULT, u_publish(&ring, A, ro, 1));
	UNCHANGED("PUBLISH read-only entries");

	keys_of(k, 9, 0, 2);
	ASSERT_EQ(-EFAULT, u_lookup(&ring, B, k, 2, ro));
	UNCHANGED("LOOKUP (hits) into read-only pages");
	ASSERT_EQ(0, quota_set(B, 3));
	ASSERT_EQ(-EDQUOT, u_lookup(&ring, B, k, 2, got));
	ASSERT_EQ(0, quota_set(B, 16));
	UNCHANGED("LOOKUP over quota");
	ASSERT_EQ(-EFAULT, u_alloc(&ring, B, 1, ro));
	UNCHANGED("ALLOC into read-only pages");
	ASSERT_EQ(-EDQUOT, u_alloc(&ring, A, 13, got));
	UNCHANGED("ALLOC over quota");
	ASSERT_EQ(-ENOSPC, u_alloc(&ring, A, 11, got));
	UNCHANGED("ALLOC more than free");
#undef UNCHANGED

	/* The failed PUBLISHes left a2 a3 publishable (owner marks restored). */
	e[0] = ent(a[2], a[1], key_of(9, 2));
	e[1] = ent(a[3], KVS_PARENT_PREV, key_of(9, 3));
	ASSERT_EQ(0, u_publish(&ring, A, e, 2));
	ASSERT_EQ(a[2], e[0].result);
	ASSERT_EQ(a[3], e[1].result);
	ASSERT_EQ(0, u_put(&ring, B, b, 2));
	ASSERT_EQ(0, u_put(&ring, A, a, 4));
	ASSERT_EQ(0, held_of(A));
	ASSERT_EQ(0, held_of(B));
	check_pool(_metadata, self->ctl, pool, NULL);
	io_uring_queue_exit(&ring);
	finish(_metadata, self, fds, 2);
}

/* ------------------------------------------------------------------ */
/* uring-only errors                                                  */
/* ------------------------------------------------------------------ */

/* A pool with chain 20 (4 pages) published by P, and an empty file F. */
struct chain_env {
	__u32 pool;
	char name[KVS_NAME_MAX];
	int fds[2];		/* P, F */
	__u32 chain[4];
	struct kvs_key keys[4];
};

static void chain_env(struct __test_metadata *_metadata, FIXTURE_DATA(uring) *self,
		      struct chain_env *c, __u64 n_pages, __u32 quota)
{
	struct kvs_publish_entry e[4];

	c->pool = new_pool(_metadata, self, "ch", n_pages, quota, c->name);
	c->fds[0] = open_attached(_metadata, c->name, 2);
	c->fds[1] = open_attached(_metadata, c->name, 2);
	ASSERT_EQ(0, io_alloc(c->fds[0], 4, c->chain));
	ents_chain(e, c->chain, 4, KVS_NO_PAGE, 20, 0);
	ASSERT_EQ(0, io_publish(c->fds[0], e, 4));
	keys_of(c->keys, 20, 0, 4);
}

TEST_F(uring, ring_without_sqe128)
{
	struct chain_env c;
	struct io_uring r64;
	struct snap s0, s1;
	__u32 got[4], own;
	struct kvs_lookup lk;
	struct kvs_put put;
	struct kvs_alloc al;

	REQUIRE();
	chain_env(_metadata, self, &c, 16, 0);
	ASSERT_EQ(0, io_alloc(c.fds[1], 1, &own));
	ring_init(_metadata, &r64, 8, 0);
	take_snap(_metadata, self->ctl, c.pool, c.fds, 2, &s0);

	/* Only the first 16 bytes fit; each would act if it were accepted. */
	lk = req_lookup(c.keys, 1, got);
	ASSERT_EQ(-EINVAL, ucmd(&r64, c.fds[1], KVS_IOC_LOOKUP, &lk, sizeof(lk)));
	put = req_put(&own, 1);
	ASSERT_EQ(-EINVAL, ucmd(&r64, c.fds[1], KVS_IOC_PUT, &put, sizeof(put)));
	al = req_alloc(1, got);
	ASSERT_EQ(-EINVAL, ucmd(&r64, c.fds[1], KVS_IOC_ALLOC, &al, sizeof(al)));
	ASSERT_EQ(-EINVAL, ucmd_full(&r64, c.fds[1], KVS_IOC_LOOKUP, &lk, sizeof(lk),
				     IOSQE_ASYNC, 0, 0));
	take_snap(_metadata, self->ctl, c.pool, c.fds, 2, &s1);
	assert_unchanged(_metadata, &s0, &s1, "64-byte SQEs");

	io_uring_queue_exit(&r64);
	ASSERT_EQ(0, io_put(c.fds[1], &own, 1));
	check_pool(_metadata, self->ctl, c.pool, NULL);
	finish(_metadata, self, c.fds, 2);
}

TEST_F(uring, commands_not_carried)
{
	struct chain_env c;
	struct io_uring ring;
	struct snap s0, s1;
	struct kvs_info info;
	int unattached;
	union {
		struct kvs_info info;
		struct kvs_pool_create create;
		struct kvs_pool_attach attach;
		struct kvs_pool_destroy destroy;
		struct kvs_pool_list list;
		struct kvs_pool_stats stats;
		struct kvs_pages pages;
		struct kvs_quota quota;
		struct kvs_user_limits user;
		char raw[256];
	} u;
	static const __u32 ops[] = {
		KVS_IOC_INFO, KVS_IOC_POOL_CREATE, KVS_IOC_POOL_ATTACH,
		KVS_IOC_POOL_DESTROY, KVS_IOC_POOL_LIST, KVS_IOC_POOL_STATS,
		KVS_IOC_PAGES, KVS_IOC_QUOTA, KVS_IOC_USER_LIMITS,
	};
	unsigned int i;

	REQUIRE();
	chain_env(_metadata, self, &c, 16, 0);
	ring_init(_metadata, &ring, 8, IORING_SETUP_SQE128);
	unattached = dev_open();
	ASSERT_LE(0, unattached);
	take_snap(_metadata, self->ctl, c.pool, c.fds, 2, &s0);

	/* Valid requests (the first 80 bytes of them) that would all act. */
	for (i = 0; i < ARRAY_SIZE(ops); i++) {
		memset(&u, 0, sizeof(u));
		switch (ops[i]) {
		case KVS_IOC_POOL_CREATE:
			snprintf(u.create.name, sizeof(u.create.name), "ur-%d-nc", (int)getpid());
			break;
		case KVS_IOC_POOL_ATTACH:
			snprintf(u.attach.name, sizeof(u.attach.name), "%s", c.name);
			break;
		case KVS_IOC_POOL_DESTROY:
			u.destroy.pool_id = c.pool;
			break;
		case KVS_IOC_QUOTA:
			u.quota.flags = KVS_QUOTA_SET;
			u.quota.max_pages = 2;
			break;
		case KVS_IOC_POOL_STATS:
			u.stats.flags = KVS_STATS_CHECK;
			break;
		}
		ASSERT_EQ(-EOPNOTSUPP, ucmd(&ring, unattached, ops[i], &u, sizeof(u)))
			TH_LOG("cmd_op %#x on an unattached file", ops[i]);
		ASSERT_EQ(-EOPNOTSUPP, ucmd(&ring, c.fds[1], ops[i], &u, sizeof(u)))
			TH_LOG("cmd_op %#x on an attached file", ops[i]);
		ASSERT_EQ(-EOPNOTSUPP, ucmd_full(&ring, c.fds[1], ops[i], &u, sizeof(u),
						 IOSQE_ASYNC, 0, 0))
			TH_LOG("cmd_op %#x, IOSQE_ASYNC", ops[i]);
	}
	/* Nothing acted: no pool created or destroyed, nothing attached. */
	ASSERT_EQ(0, info_of(self->ctl, &info));
	ASSERT_EQ(self->base.n_pools + 1, info.n_pools);
	ASSERT_EQ(-EBADFD, (int)held_of(unattached));
	take_snap(_metadata, self->ctl, c.pool, c.fds, 2, &s1);
	assert_unchanged(_metadata, &s0, &s1, "commands not carried");
	{
		struct kvs_quota q;

		memset(&q, 0, sizeof(q));
		ASSERT_EQ(0, xioctl(c.fds[1], KVS_IOC_QUOTA, &q));
		ASSERT_EQ(16u, q.max_pages);
	}
	close(unattached);
	io_uring_queue_exit(&ring);
	check_pool(_metadata, self->ctl, c.pool, NULL);
	finish(_metadata, self, c.fds, 2);
}

TEST_F(uring, unknown_cmd_op)
{
	struct chain_env c;
	struct io_uring ring;
	struct snap s0, s1;
	__u32 got[4];
	struct kvs_lookup lk;
	const __u32 ops[] = {
		_IOWR(KVS_IOC_MAGIC, 0x14, struct kvs_lookup),
		_IOWR(KVS_IOC_MAGIC, 0x09, struct kvs_lookup),
		_IOWR(KVS_IOC_MAGIC, 0x0f, struct kvs_lookup),
		_IOWR(KVS_IOC_MAGIC, 0xff, struct kvs_lookup),
		_IOWR('x', 0x12, struct kvs_lookup),		/* LOOKUP's nr, other type */
		_IOW(KVS_IOC_MAGIC, 0x12, struct kvs_lookup),	/* other direction */
		_IOR(KVS_IOC_MAGIC, 0x12, struct kvs_lookup),
		_IO(KVS_IOC_MAGIC, 0x12),
		0,
		0xffffffffu,
	};
	unsigned int i;

	REQUIRE();
	chain_env(_metadata, self, &c, 16, 0);
	ring_init(_metadata, &ring, 8, IORING_SETUP_SQE128);
	take_snap(_metadata, self->ctl, c.pool, c.fds, 2, &s0);
	lk = req_lookup(c.keys, 4, got);
	for (i = 0; i < ARRAY_SIZE(ops); i++) {
		ASSERT_EQ(-ENOTTY, ucmd(&ring, c.fds[1], ops[i], &lk, sizeof(lk)))
			TH_LOG("cmd_op %#x", ops[i]);
		ASSERT_EQ(-ENOTTY, ucmd_full(&ring, c.fds[1], ops[i], &lk, sizeof(lk),
					     IOSQE_ASYNC, 0, 0))
			TH_LOG("cmd_op %#x, IOSQE_ASYNC", ops[i]);
	}
	take_snap(_metadata, self->ctl, c.pool, c.fds, 2, &s1);
	assert_unchanged(_metadata, &s0, &s1, "unknown commands");
	/* The same payload under the right number works. */
	ASSERT_EQ(4, ucmd(&ring, c.fds[1], KVS_IOC_LOOKUP, &lk, sizeof(lk)));
	ASSERT_EQ(0, u_put(&ring, c.fds[1], got, 4));
	io_uring_queue_exit(&ring);
	check_pool(_metadata, self->ctl, c.pool, NULL);
	finish(_metadata, self, c.fds, 2);
}

/* Byte offset and width of every must-be-zero field of a carried command. */
struct zero_field {
	__u32 op;
	const char *name;
	unsigned int off, width;
};

#define ZF(op, type, field) \
	{ op, #type "." #field, offsetof(struct type, field), \
	  sizeof(((struct type *)0)->field) }

static const struct zero_field zero_fields[] = {
	/* flags bit 0 is KVS_ALLOC_CLAIM: keys without it is EINVAL. */
	ZF(KVS_IOC_ALLOC, kvs_alloc, keys),
	ZF(KVS_IOC_ALLOC, kvs_alloc, reserved[0]),
	ZF(KVS_IOC_PUBLISH, kvs_publish, flags),
	ZF(KVS_IOC_PUBLISH, kvs_publish, n_dup),
	ZF(KVS_IOC_PUBLISH, kvs_publish, pad),
	ZF(KVS_IOC_PUBLISH, kvs_publish, reserved[0]),
	ZF(KVS_IOC_PUBLISH, kvs_publish, reserved[1]),
	/* flags bit 0 is KVS_LOOKUP_WAIT: uring_wait_test's. */
	ZF(KVS_IOC_LOOKUP, kvs_lookup, n_hit),
	ZF(KVS_IOC_LOOKUP, kvs_lookup, n_inflight),
	ZF(KVS_IOC_LOOKUP, kvs_lookup, reserved[0]),
	ZF(KVS_IOC_LOOKUP, kvs_lookup, reserved[1]),
	ZF(KVS_IOC_PUT, kvs_put, flags),
	ZF(KVS_IOC_PUT, kvs_put, reserved[0]),
	ZF(KVS_IOC_PUT, kvs_put, reserved[1]),
};

/*
 * In a chain_env, F's valid request of each carried command, each of
 * which acts when submitted: base_acts() submits them clean.
 */
struct base_reqs {
	struct kvs_publish_entry e[1];
	__u32 got[4], own[2];
};

/* F owns own[0] (PUT) and own[1] (PUBLISH) so every base request acts. */
static void base_init(struct __test_metadata *_metadata, const struct chain_env *c,
		      struct base_reqs *b)
{
	ASSERT_EQ(0, io_alloc(c->fds[1], 2, b->own));
	b->e[0] = ent(b->own[1], KVS_NO_PAGE, key_of(21, 0));
}

/* @op's base request, zero-padded to a whole payload: its size. */
static size_t base_payload(__u32 op, const struct chain_env *c, struct base_reqs *b,
			   unsigned char payload[KVS_URING_PAYLOAD_MAX])
{
	union {
		struct kvs_alloc al;
		struct kvs_publish pb;
		struct kvs_lookup lk;
		struct kvs_put put;
	} q;
	size_t len = 0;

	switch (op) {
	case KVS_IOC_ALLOC:
		q.al = req_alloc(1, b->got);
		len = sizeof(q.al);
		break;
	case KVS_IOC_PUBLISH:
		q.pb = req_publish(b->e, 1);
		len = sizeof(q.pb);
		break;
	case KVS_IOC_LOOKUP:
		q.lk = req_lookup(c->keys, 4, b->got);
		len = sizeof(q.lk);
		break;
	case KVS_IOC_PUT:
		q.put = req_put(b->own, 1);
		len = sizeof(q.put);
		break;
	}
	memset(payload, 0, KVS_URING_PAYLOAD_MAX);
	memcpy(payload, &q, len);
	return len;
}

/* The base requests, clean, act; then F holds nothing again. */
static void base_acts(struct __test_metadata *_metadata, struct io_uring *r,
		      const struct chain_env *c, struct base_reqs *b)
{
	struct kvs_lookup lk = req_lookup(c->keys, 4, b->got);
	struct kvs_put put = req_put(b->own, 1);
	struct kvs_publish pb = req_publish(b->e, 1);
	struct kvs_alloc al = req_alloc(1, b->own);
	int f = c->fds[1];

	ASSERT_EQ(4, ucmd(r, f, KVS_IOC_LOOKUP, &lk, sizeof(lk)));
	ASSERT_EQ(0, u_put(r, f, b->got, 4));
	ASSERT_EQ(0, ucmd(r, f, KVS_IOC_PUT, &put, sizeof(put)));
	ASSERT_EQ(0, ucmd(r, f, KVS_IOC_PUBLISH, &pb, sizeof(pb)));
	ASSERT_EQ(0, ucmd(r, f, KVS_IOC_ALLOC, &al, sizeof(al)));
	ASSERT_EQ(0, u_put(r, f, &b->e[0].result, 1));
	ASSERT_EQ(0, u_put(r, f, b->own, 1));
	ASSERT_EQ(0, held_of(f));
}

/*
 * After the refused requests: nothing changed since @s0, the base
 * requests act clean, and the test ends with the pool whole.
 */
static void base_end(struct __test_metadata *_metadata, FIXTURE_DATA(uring) *self,
		     struct io_uring *r, struct chain_env *c, struct base_reqs *b,
		     const struct snap *s0, const char *what)
{
	struct snap s1;

	take_snap(_metadata, self->ctl, c->pool, c->fds, 2, &s1);
	assert_unchanged(_metadata, s0, &s1, what);
	base_acts(_metadata, r, c, b);
	io_uring_queue_exit(r);
	check_pool(_metadata, self->ctl, c->pool, NULL);
	finish(_metadata, self, c->fds, 2);
}

TEST_F(uring, payload_pads_and_reserved)
{
	struct chain_env c;
	struct base_reqs b;
	struct io_uring ring;
	struct snap s0;
	unsigned char payload[KVS_URING_PAYLOAD_MAX];
	unsigned int i, bit;

	REQUIRE();
	chain_env(_metadata, self, &c, 16, 0);
	ring_init(_metadata, &ring, 8, IORING_SETUP_SQE128);
	base_init(_metadata, &c, &b);
	take_snap(_metadata, self->ctl, c.pool, c.fds, 2, &s0);

	for (i = 0; i < ARRAY_SIZE(zero_fields); i++) {
		const struct zero_field *z = &zero_fields[i];

		for (bit = 0; bit < 2; bit++) {
			base_payload(z->op, &c, &b, payload);
			/* Lowest bit, then highest bit of the field. */
			payload[z->off + (bit ? z->width - 1 : 0)] = bit ? 0x80 : 0x01;
			ASSERT_EQ(-EINVAL, ucmd(&ring, c.fds[1], z->op, payload, sizeof(payload)))
				TH_LOG("%s = %s bit", z->name, bit ? "high" : "low");
		}
	}
	base_end(_metadata, self, &ring, &c, &b, &s0, "non-zero pads and reserved fields");
}

/*
 * All of the SQE that the command does not use must be clear:
 * IORING_URING_CMD_FIXED names a registered buffer that no command
 * addresses, and the payload's bytes past the struct (however long
 * cmd_op says it is) are where it may grow.  Each refused SQE acts once
 * clean (base_acts()), so a check that is missing shows as a change.
 */
TEST_F(uring, cmd_flags_and_payload_tail)
{
	struct chain_env c;
	struct base_reqs b;
	struct io_uring ring;
	struct snap s0;
	static char fixed[4096] __attribute__((aligned(4096)));
	struct iovec iov = { .iov_base = fixed, .iov_len = sizeof(fixed) };
	unsigned char payload[KVS_URING_PAYLOAD_MAX];
	unsigned int i, async;

	REQUIRE();
	chain_env(_metadata, self, &c, 16, 0);
	ring_init(_metadata, &ring, 8, IORING_SETUP_SQE128);
	/* Else io_uring itself refuses FIXED (EFAULT), before the device sees it. */
	ASSERT_EQ(0, io_uring_register_buffers(&ring, &iov, 1));
	base_init(_metadata, &c, &b);
	take_snap(_metadata, self->ctl, c.pool, c.fds, 2, &s0);

	for (i = 0; i < ARRAY_SIZE(carried_ops); i++) {
		__u32 op = carried_ops[i];

		for (async = 0; async < 2; async++) {
			__u8 fl = async ? IOSQE_ASYNC : 0;
			size_t len = base_payload(op, &c, &b, payload);

			ASSERT_EQ(-EINVAL, ucmd_full(&ring, c.fds[1], op, payload, len, fl,
						     0, IORING_URING_CMD_FIXED))
				TH_LOG("cmd_op %#x FIXED, async %u", op, async);
			payload[len] = 0x01;
			ASSERT_EQ(-EINVAL, ucmd_full(&ring, c.fds[1], op, payload,
						     sizeof(payload), fl, 0, 0))
				TH_LOG("cmd_op %#x byte %zu, async %u", op, len, async);
			payload[len] = 0;
			payload[sizeof(payload) - 1] = 0x80;
			ASSERT_EQ(-EINVAL, ucmd_full(&ring, c.fds[1], op, payload,
						     sizeof(payload), fl, 0, 0))
				TH_LOG("cmd_op %#x last byte, async %u", op, async);
			payload[sizeof(payload) - 1] = 0;
			/* A shorter struct ends before the last reserved field. */
			payload[len - 1] = 0x01;
			ASSERT_EQ(-EINVAL, ucmd_full(&ring, c.fds[1], op_sized(op, len - 8),
						     payload, sizeof(payload), fl, 0, 0))
				TH_LOG("cmd_op %#x sized %zu, async %u", op, len - 8, async);
		}
	}
	base_end(_metadata, self, &ring, &c, &b, &s0, "FIXED, payload tail");
}

TEST_F(uring, sqe_header_garbage)
{
	struct chain_env c;
	struct io_uring ring;
	__u32 own, got[4];
	struct kvs_put put;
	struct kvs_lookup lk;
	static const __u32 bad_flags[] = { 1u << 1, 1u << 7, 1u << 31, ~1u };
	static const __u32 bad_pad1[] = { 1, 7, 0x80000000u };
	unsigned int i;

	REQUIRE();
	chain_env(_metadata, self, &c, 16, 0);
	ring_init(_metadata, &ring, 8, IORING_SETUP_SQE128);
	ASSERT_EQ(0, io_alloc(c.fds[1], 1, &own));
	put = req_put(&own, 1);
	lk = req_lookup(c.keys, 4, got);

	for (i = 0; i < ARRAY_SIZE(bad_pad1); i++) {
		ASSERT_EQ(-EINVAL, ucmd_full(&ring, c.fds[1], KVS_IOC_PUT, &put, sizeof(put),
					     0, bad_pad1[i], 0))
			TH_LOG("__pad1 %#x", bad_pad1[i]);
		ASSERT_EQ(-EINVAL, ucmd_full(&ring, c.fds[1], KVS_IOC_LOOKUP, &lk, sizeof(lk),
					     IOSQE_ASYNC, bad_pad1[i], 0))
			TH_LOG("__pad1 %#x, IOSQE_ASYNC", bad_pad1[i]);
	}
	for (i = 0; i < ARRAY_SIZE(bad_flags); i++) {
		ASSERT_EQ(-EINVAL, ucmd_full(&ring, c.fds[1], KVS_IOC_PUT, &put, sizeof(put),
					     0, 0, bad_flags[i]))
			TH_LOG("uring_cmd_flags %#x", bad_flags[i]);
		ASSERT_EQ(-EINVAL, ucmd_full(&ring, c.fds[1], KVS_IOC_LOOKUP, &lk, sizeof(lk),
					     0, 0, bad_flags[i]))
			TH_LOG("uring_cmd_flags %#x", bad_flags[i]);
	}
	/* Nothing acted. */
	ASSERT_PAGE(self->ctl, c.pool, own, KVS_PAGE_OWNED, 0);
	ASSERT_EQ(1, held_of(c.fds[1]));
	/* The same SQEs with a clean header act. */
	ASSERT_EQ(4, ucmd(&ring, c.fds[1], KVS_IOC_LOOKUP, &lk, sizeof(lk)));
	ASSERT_EQ(0, ucmd(&ring, c.fds[1], KVS_IOC_PUT, &put, sizeof(put)));
	ASSERT_PAGE(self->ctl, c.pool, own, KVS_PAGE_FREE, 0);
	ASSERT_EQ(0, u_put(&ring, c.fds[1], got, 4));
	ASSERT_EQ(0, held_of(c.fds[1]));
	io_uring_queue_exit(&ring);
	check_pool(_metadata, self->ctl, c.pool, NULL);
	finish(_metadata, self, c.fds, 2);
}

TEST_F(uring, cmd_op_size_bits)
{
	struct chain_env c;
	struct io_uring ring;
	struct snap s0, s1;
	unsigned char payload[KVS_URING_PAYLOAD_MAX];
	struct kvs_lookup lk;
	struct kvs_put put;
	__u32 got[4];
	static const __u32 big[] = { 81, 88, 96, 128, 256, 0x3fff };
	unsigned int i, j;

	REQUIRE();
	chain_env(_metadata, self, &c, 16, 0);
	ring_init(_metadata, &ring, 8, IORING_SETUP_SQE128);
	take_snap(_metadata, self->ctl, c.pool, c.fds, 2, &s0);
	lk = req_lookup(c.keys, 4, got);

	/* More than the 80-byte payload can hold. */
	for (i = 0; i < ARRAY_SIZE(carried_ops); i++) {
		for (j = 0; j < ARRAY_SIZE(big); j++) {
			__u32 op = op_sized(carried_ops[i], big[j]);

			memset(payload, 0, sizeof(payload));
			memcpy(payload, &lk, sizeof(lk));
			ASSERT_EQ(-E2BIG, ucmd(&ring, c.fds[1], op, payload, sizeof(payload)))
				TH_LOG("cmd_op %#x (size %u)", op, big[j]);
		}
	}
	/* A longer struct whose unknown tail is not zero. */
	memset(payload, 0, sizeof(payload));
	memcpy(payload, &lk, sizeof(lk));
	payload[KVS_URING_PAYLOAD_MAX - 1] = 1;
	ASSERT_EQ(-E2BIG, ucmd(&ring, c.fds[1], op_sized(KVS_IOC_LOOKUP, 80),
			       payload, sizeof(payload)));
	payload[KVS_URING_PAYLOAD_MAX - 1] = 0;
	payload[sizeof(lk)] = 0x40;
	ASSERT_EQ(-E2BIG, ucmd(&ring, c.fds[1], op_sized(KVS_IOC_LOOKUP, sizeof(lk) + 8),
			       payload, sizeof(payload)));
	take_snap(_metadata, self->ctl, c.pool, c.fds, 2, &s1);
	assert_unchanged(_metadata, &s0, &s1, "size bits");

	/* A longer struct with a zero tail, a shorter one zero-extended: accepted. */
	payload[sizeof(lk)] = 0;
	ASSERT_EQ(4, ucmd(&ring, c.fds[1], op_sized(KVS_IOC_LOOKUP, 80),
			  payload, sizeof(payload)));
	ASSERT_EQ(4, ucmd(&ring, c.fds[1], op_sized(KVS_IOC_LOOKUP,
						     offsetof(struct kvs_lookup, n_hit)),
			  &lk, offsetof(struct kvs_lookup, n_hit)));
	ASSERT_EQ(8, held_of(c.fds[1]));
	put = req_put(got, 4);
	ASSERT_EQ(0, ucmd(&ring, c.fds[1], op_sized(KVS_IOC_PUT, 80), &put, sizeof(put)));
	ASSERT_EQ(0, ucmd(&ring, c.fds[1],
			  op_sized(KVS_IOC_PUT, offsetof(struct kvs_put, reserved)),
			  &put, offsetof(struct kvs_put, reserved)));
	ASSERT_EQ(0, held_of(c.fds[1]));
	io_uring_queue_exit(&ring);
	check_pool(_metadata, self->ctl, c.pool, NULL);
	finish(_metadata, self, c.fds, 2);
}

/* ------------------------------------------------------------------ */
/* A thread rewriting the submitted SQEs                              */
/* ------------------------------------------------------------------ */

#define RACE_SQES	8
#define RACE_CHAIN	8

struct racer {
	unsigned char *sqes;		/* the mapped SQE array */
	unsigned int n_sqes;
	__u64 ptrs[8];
	unsigned int n_ptrs;
	int stop;
	unsigned long writes;
};

static void *racer_fn(void *arg)
{
	static const __u32 counts[] = {
		0, 1, 2, 3, 8, KVS_MAX_BATCH + 1, 0xffffffffu,
	};
	struct racer *r = arg;
	__u32 seed = 0x5eed;

	while (!__atomic_load_n(&r->stop, __ATOMIC_RELAXED)) {
		__u32 x = rnd(&seed);
		unsigned char *p = r->sqes + (x % r->n_sqes) * SQE128_BYTES + CMD_OFF;

		x >>= 8;
		switch (x & 3) {
		case 0:		/* count */
			__atomic_store_n((__u32 *)p, counts[(x >> 2) % ARRAY_SIZE(counts)],
					 __ATOMIC_RELAXED);
			break;
		case 1:		/* LOOKUP keys, PUT pages */
			__atomic_store_n((__u64 *)(p + 8), r->ptrs[(x >> 2) % r->n_ptrs],
					 __ATOMIC_RELAXED);
			break;
		case 2:		/* LOOKUP pages, PUT reserved[0] */
			__atomic_store_n((__u64 *)(p + 16), r->ptrs[(x >> 2) % r->n_ptrs],
					 __ATOMIC_RELAXED);
			break;
		case 3:		/* flip between two valid counts */
			__atomic_store_n((__u32 *)p, (x >> 2) & 1 ? 4 : 8, __ATOMIC_RELAXED);
			break;
		}
		r->writes++;
	}
	return NULL;
}

/*
 * F's holdings when only the chain's publisher (one reference on each
 * chain page) and F hold anything: refcount - 1 on each chain page.
 */
static int race_holdings(int ctl, __u32 pool, const __u32 *chain, __u32 *list, __u32 cap)
{
	struct kvs_page_desc d;
	__u32 i, j, n = 0;
	int ret;

	for (i = 0; i < RACE_CHAIN; i++) {
		ret = page_of(ctl, pool, chain[i], &d);
		if (ret)
			return ret;
		if (d.state != KVS_PAGE_SHARED || !d.refcount)
			return -EUCLEAN;
		for (j = 1; j < d.refcount && n < cap; j++)
			list[n++] = chain[i];
	}
	return n;
}

TEST_F_TIMEOUT(uring, sqe_rewritten_while_submitted, 180)
{
	char name[KVS_NAME_MAX];
	struct kvs_publish_entry e[RACE_CHAIN];
	struct kvs_key keys[16];
	__u32 chain[RACE_CHAIN], pages[RACE_SQES][16], put_list[16], drain[128];
	struct kvs_pool_stats st;
	struct io_uring ring;
	struct racer rc;
	pthread_t th;
	unsigned long sqes = 0, ok = 0, errs = 0, iters = 0;
	long long end;
	void *ro;
	int P, F, fds[2], n, j, ret;
	__u32 pool;

	REQUIRE();
	ro = ro_page();
	ASSERT_NE(NULL, ro);
	pool = new_pool(_metadata, self, "race", 64, 0, name);
	P = fds[0] = open_attached(_metadata, name, 4);
	F = fds[1] = open_attached(_metadata, name, 4);
	ASSERT_EQ(0, io_alloc(P, RACE_CHAIN, chain));
	ents_chain(e, chain, RACE_CHAIN, KVS_NO_PAGE, 30, 0);
	ASSERT_EQ(0, io_publish(P, e, RACE_CHAIN));
	ring_init(_metadata, &ring, RACE_SQES, IORING_SETUP_SQE128);
	ASSERT_EQ((unsigned)(RACE_SQES), ring.sq.ring_entries);

	memset(&rc, 0, sizeof(rc));
	rc.sqes = (unsigned char *)ring.sq.sqes;
	rc.n_sqes = ring.sq.ring_entries;
	rc.ptrs[rc.n_ptrs++] = PTR(keys);
	rc.ptrs[rc.n_ptrs++] = PTR(&keys[1]);
	rc.ptrs[rc.n_ptrs++] = PTR(pages[0]);
	rc.ptrs[rc.n_ptrs++] = PTR(put_list);
	rc.ptrs[rc.n_ptrs++] = 0;
	rc.ptrs[rc.n_ptrs++] = BAD_PTR;
	rc.ptrs[rc.n_ptrs++] = PTR(ro);
	ASSERT_EQ(0, pthread_create(&th, NULL, racer_fn, &rc));

	end = now_ms() + 1000;
	while (now_ms() < end && iters < 500) {
		/* Keys may have been overwritten through a raced pages pointer. */
		keys_of(keys, 30, 0, RACE_CHAIN);
		keys_of(&keys[RACE_CHAIN], 31, 0, 16 - RACE_CHAIN);
		memcpy(put_list, chain, sizeof(chain));
		for (j = 0; j < RACE_SQES; j++) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			__u8 flags = (j & 3) == 3 ? IOSQE_ASYNC : 0;

			ASSERT_NE(NULL, sqe);
			if (j & 1) {
				struct kvs_put q = req_put(put_list, 4);

				prep_ucmd(&ring, sqe, F, KVS_IOC_PUT, &q, sizeof(q), flags, j);
			} else {
				struct kvs_lookup q = req_lookup(keys, RACE_CHAIN, pages[j]);

				prep_ucmd(&ring, sqe, F, KVS_IOC_LOOKUP, &q, sizeof(q), flags, j);
			}
		}
		/* Every other round, leave the racer a window before submitting. */
		if (iters & 1) {
			long long spin_end = now_ms() + 1;

			while (now_ms() < spin_end)
				;
		}
		ret = io_uring_submit(&ring);
		ASSERT_EQ(RACE_SQES, ret);
		for (j = 0; j < RACE_SQES; j++) {
			struct io_uring_cqe *cqe;
			int res, is_put;

			ret = wait_cqe(&ring, &cqe);
			ASSERT_EQ(0, ret) TH_LOG("no CQE within %d s", CQE_WAIT_S);
			res = cqe->res;
			is_put = cqe->user_data & 1;
			io_uring_cqe_seen(&ring, cqe);
			sqes++;
			if (res >= 0) {
				ok++;
				if (is_put) {
					ASSERT_EQ(0, res);
				} else {
					ASSERT_GE(RACE_CHAIN, res);
				}
				continue;
			}
			errs++;
			if (res == -EINVAL || res == -E2BIG || res == -EFAULT)
				continue;
			if (is_put) {
				ASSERT_EQ(-ENOENT, res);
			} else {
				ASSERT_EQ(-EDQUOT, res);
			}
		}
		/* Keep F under its quota so that LOOKUPs keep acting. */
		if (held_of(F) > 40) {
			n = race_holdings(self->ctl, pool, chain, drain, ARRAY_SIZE(drain));
			ASSERT_LT(0, n);
			ASSERT_EQ(0, io_put(F, drain, n));
		}
		iters++;
	}
	__atomic_store_n(&rc.stop, 1, __ATOMIC_RELAXED);
	pthread_join(th, NULL);
	ksft_print_msg("race: %lu SQEs in %lu rounds, %lu acted, %lu failed cleanly, %lu rewrites\n",
		       sqes, iters, ok, errs, rc.writes);
	ASSERT_LT(0u, ok);

	/* Every reference F took can be returned, by one clean SQE. */
	check_pool(_metadata, self->ctl, pool, &st);
	n = race_holdings(self->ctl, pool, chain, drain, ARRAY_SIZE(drain));
	ASSERT_LE(0, n);
	ASSERT_EQ(n, held_of(F));
	if (n)
		ASSERT_EQ(0, u_put(&ring, F, drain, n));
	ASSERT_EQ(0, held_of(F));
	check_pool(_metadata, self->ctl, pool, &st);
	ASSERT_EQ((unsigned)(RACE_CHAIN), st.n_held);
	ASSERT_EQ((unsigned)(RACE_CHAIN), st.n_refs);
	ASSERT_EQ(0u, st.n_owned);
	io_uring_queue_exit(&ring);
	finish(_metadata, self, fds, 2);
}

/* ------------------------------------------------------------------ */
/* io-wq: forced (IOSQE_ASYNC) and on a contended pool lock           */
/* ------------------------------------------------------------------ */

#define ASYNC_N	12

TEST_F_TIMEOUT(uring, iosqe_async_positive_results, 120)
{
	char name[KVS_NAME_MAX];
	struct kvs_publish_entry e[4];
	struct kvs_key k[6];
	__u32 pool, c[4], d[2], pages[ASYNC_N][6];
	struct kvs_lookup lk[ASYNC_N];
	struct kvs_put put[ASYNC_N];
	struct kvs_alloc al;
	struct kvs_publish pb;
	struct io_uring ring;
	int fds[3], P, D, F, j, ret, seen[ASYNC_N];

	REQUIRE();
	pool = new_pool(_metadata, self, "async", 64, 0, name);
	P = fds[0] = open_attached(_metadata, name, 5);
	D = fds[1] = open_attached(_metadata, name, 5);
	F = fds[2] = open_attached(_metadata, name, 5);
	ring_init(_metadata, &ring, 32, IORING_SETUP_SQE128);

	/* ALLOC and PUBLISH from io-wq. */
	al = req_alloc(4, c);
	ASSERT_EQ(0, ucmd_full(&ring, P, KVS_IOC_ALLOC, &al, sizeof(al), IOSQE_ASYNC, 0, 0));
	ents_chain(e, c, 4, KVS_NO_PAGE, 40, 0);
	pb = req_publish(e, 4);
	ASSERT_EQ(0, ucmd_full(&ring, P, KVS_IOC_PUBLISH, &pb, sizeof(pb), IOSQE_ASYNC, 0, 0));
	al = req_alloc(2, d);
	ASSERT_EQ(0, ucmd_full(&ring, D, KVS_IOC_ALLOC, &al, sizeof(al), IOSQE_ASYNC, 0, 0));
	ents_chain(e, d, 2, KVS_NO_PAGE, 40, 0);
	pb = req_publish(e, 2);
	/* A positive n_dup from io-wq must reach the CQE. */
	ASSERT_EQ(2, ucmd_full(&ring, D, KVS_IOC_PUBLISH, &pb, sizeof(pb), IOSQE_ASYNC, 0, 0));
	ASSERT_EQ(c[0], e[0].result);
	ASSERT_EQ(c[1], e[1].result);
	ASSERT_EQ(KVS_PUBLISHED_DUP, e[0].flags);

	/* Many positive n_hit from io-wq at once: a partial run of 4 of 6. */
	keys_of(k, 40, 0, 6);
	memset(pages, 0xff, sizeof(pages));
	for (j = 0; j < ASYNC_N; j++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

		ASSERT_NE(NULL, sqe);
		lk[j] = req_lookup(k, 6, pages[j]);
		prep_ucmd(&ring, sqe, F, KVS_IOC_LOOKUP, &lk[j], sizeof(lk[j]), IOSQE_ASYNC, j);
	}
	ASSERT_EQ(ASYNC_N, io_uring_submit(&ring));
	memset(seen, 0, sizeof(seen));
	for (j = 0; j < ASYNC_N; j++) {
		struct io_uring_cqe *cqe;

		ret = wait_cqe(&ring, &cqe);
		ASSERT_EQ(0, ret) TH_LOG("LOOKUP %d of %d: no CQE within %d s (hang)",
					 j, ASYNC_N, CQE_WAIT_S);
		ASSERT_GT(ASYNC_N, (int)cqe->user_data);
		ASSERT_EQ(0, seen[cqe->user_data]);
		seen[cqe->user_data] = 1;
		ASSERT_EQ(4, cqe->res) TH_LOG("SQE %llu", (unsigned long long)cqe->user_data);
		io_uring_cqe_seen(&ring, cqe);
	}
	for (j = 0; j < ASYNC_N; j++) {
		ASSERT_EQ(0, memcmp(pages[j], c, sizeof(c)));
		ASSERT_EQ(0xffffffffu, pages[j][4]);	/* past n_hit: left as it was */
	}
	ASSERT_EQ(4 * ASYNC_N, held_of(F));

	/* A miss (0) and the PUTs (0), from io-wq too. */
	keys_of(k, 41, 0, 2);
	lk[0] = req_lookup(k, 2, pages[0]);
	ASSERT_EQ(0, ucmd_full(&ring, F, KVS_IOC_LOOKUP, &lk[0], sizeof(lk[0]), IOSQE_ASYNC, 0, 0));
	for (j = 0; j < ASYNC_N; j++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

		ASSERT_NE(NULL, sqe);
		put[j] = req_put(c, 4);
		prep_ucmd(&ring, sqe, F, KVS_IOC_PUT, &put[j], sizeof(put[j]), IOSQE_ASYNC, j);
	}
	ASSERT_EQ(ASYNC_N, io_uring_submit(&ring));
	for (j = 0; j < ASYNC_N; j++) {
		struct io_uring_cqe *cqe;

		ASSERT_EQ(0, wait_cqe(&ring, &cqe)) TH_LOG("PUT: no CQE (hang)");
		ASSERT_EQ(0, cqe->res);
		io_uring_cqe_seen(&ring, cqe);
	}
	ASSERT_EQ(0, held_of(F));
	ASSERT_EQ(2, held_of(D));
	ASSERT_EQ(4, held_of(P));
	check_pool(_metadata, self->ctl, pool, NULL);
	io_uring_queue_exit(&ring);
	finish(_metadata, self, fds, 3);
}

struct hammer {
	int fd;
	__u32 pool;
	int stop;
	unsigned long calls, errors;
	int last_error;
};

/* Holds the pool lock as long as it can: STATS with the full check. */
static void *hammer_fn(void *arg)
{
	struct hammer *h = arg;

	while (!__atomic_load_n(&h->stop, __ATOMIC_RELAXED)) {
		struct kvs_pool_stats st;
		int ret = stats_of(h->fd, h->pool, KVS_STATS_CHECK, &st);

		if (ret) {
			h->errors++;
			h->last_error = ret;
		}
		h->calls++;
	}
	return NULL;
}

TEST_F_TIMEOUT(uring, contended_pool_retried_in_io_wq, 120)
{
	struct chain_env c;
	struct kvs_pool_stats st0, st1;
	struct io_uring ring;
	struct hammer h;
	pthread_t th[2];
	__u32 pages[8][4];
	struct kvs_lookup lk;
	struct kvs_put put;
	unsigned long n_lookup = 0, rounds = 0;
	long long end;
	int j, ret, t;

	REQUIRE();
	chain_env(_metadata, self, &c, 8192, 0);
	ring_init(_metadata, &ring, 16, IORING_SETUP_SQE128);
	ASSERT_EQ(0, stats_of(self->ctl, c.pool, 0, &st0));

	memset(&h, 0, sizeof(h));
	h.fd = self->ctl;
	h.pool = c.pool;
	for (t = 0; t < 2; t++)
		ASSERT_EQ(0, pthread_create(&th[t], NULL, hammer_fn, &h));

	end = now_ms() + 1000;
	while (now_ms() < end && rounds < 300) {
		for (j = 0; j < 8; j++) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

			ASSERT_NE(NULL, sqe);
			lk = req_lookup(c.keys, 4, pages[j]);
			prep_ucmd(&ring, sqe, c.fds[1], KVS_IOC_LOOKUP, &lk, sizeof(lk), 0, j);
		}
		ASSERT_EQ(8, io_uring_submit(&ring));
		for (j = 0; j < 8; j++) {
			struct io_uring_cqe *cqe;

			ret = wait_cqe(&ring, &cqe);
			ASSERT_EQ(0, ret) TH_LOG("LOOKUP: no CQE within %d s (hang)", CQE_WAIT_S);
			ASSERT_EQ(4, cqe->res) TH_LOG("EAGAIN must never reach the CQE");
			ASSERT_EQ(0, memcmp(pages[cqe->user_data], c.chain, sizeof(c.chain)));
			io_uring_cqe_seen(&ring, cqe);
			n_lookup++;
		}
		for (j = 0; j < 8; j++) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

			ASSERT_NE(NULL, sqe);
			put = req_put(c.chain, 4);
			prep_ucmd(&ring, sqe, c.fds[1], KVS_IOC_PUT, &put, sizeof(put), 0, j);
		}
		ASSERT_EQ(8, io_uring_submit(&ring));
		for (j = 0; j < 8; j++) {
			struct io_uring_cqe *cqe;

			ASSERT_EQ(0, wait_cqe(&ring, &cqe)) TH_LOG("PUT: no CQE (hang)");
			ASSERT_EQ(0, cqe->res);
			io_uring_cqe_seen(&ring, cqe);
		}
		rounds++;
	}
	__atomic_store_n(&h.stop, 1, __ATOMIC_RELAXED);
	for (t = 0; t < 2; t++)
		pthread_join(th[t], NULL);
	ksft_print_msg("contended: %lu LOOKUPs, %lu checks under the lock meanwhile\n",
		       n_lookup, h.calls);
	ASSERT_EQ(0u, h.errors) TH_LOG("STATS_CHECK failed during the run: %d", h.last_error);
	/* Each LOOKUP ran exactly once (a retry must not run it twice). */
	ASSERT_EQ(0, stats_of(self->ctl, c.pool, 0, &st1));
	ASSERT_EQ(st0.lookups + 4 * n_lookup, st1.lookups);
	ASSERT_EQ(st0.hits + 4 * n_lookup, st1.hits);
	ASSERT_EQ(0, held_of(c.fds[1]));
	check_pool(_metadata, self->ctl, c.pool, NULL);
	io_uring_queue_exit(&ring);
	finish(_metadata, self, c.fds, 2);
}

/* A positive result completes the request: links go on after it. */
TEST_F(uring, links_after_positive_result)
{
	struct chain_env c;
	struct io_uring ring;
	__u32 got[2][4], bad = 1000;
	struct kvs_lookup lk[2];
	struct kvs_put put;
	int vi, j;

	REQUIRE();
	chain_env(_metadata, self, &c, 16, 0);
	ring_init(_metadata, &ring, 8, IORING_SETUP_SQE128);

	for (vi = 0; vi < 3; vi++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
		int want[2];

		ASSERT_NE(NULL, sqe);
		if (vi < 2) {
			lk[vi] = req_lookup(c.keys, 4, got[vi]);
			prep_ucmd(&ring, sqe, c.fds[1], KVS_IOC_LOOKUP, &lk[vi],
				  sizeof(lk[0]), IOSQE_IO_LINK | (vi ? IOSQE_ASYNC : 0), 1);
			want[0] = 4;
			want[1] = 0;
		} else {
			/* A page beyond the pool: ENOENT, which breaks the link. */
			put = req_put(&bad, 1);
			prep_ucmd(&ring, sqe, c.fds[1], KVS_IOC_PUT, &put, sizeof(put),
				  IOSQE_IO_LINK, 1);
			want[0] = -ENOENT;
			want[1] = -ECANCELED;
		}
		sqe = io_uring_get_sqe(&ring);
		ASSERT_NE(NULL, sqe);
		io_uring_prep_nop(sqe);
		sqe->user_data = 2;
		ASSERT_EQ(2, io_uring_submit(&ring));
		for (j = 0; j < 2; j++) {
			struct io_uring_cqe *cqe;

			ASSERT_EQ(0, wait_cqe(&ring, &cqe)) TH_LOG("variant %d: hang", vi);
			ASSERT_LE(1, (int)cqe->user_data);
			ASSERT_GE(2, (int)cqe->user_data);
			ASSERT_EQ(want[cqe->user_data - 1], cqe->res)
				TH_LOG("variant %d, %s", vi,
				       cqe->user_data == 1 ? "the command" : "the linked NOP");
			io_uring_cqe_seen(&ring, cqe);
		}
	}
	ASSERT_EQ(8, held_of(c.fds[1]));
	ASSERT_EQ(0, u_put(&ring, c.fds[1], got[0], 4));
	ASSERT_EQ(0, u_put(&ring, c.fds[1], got[1], 4));
	io_uring_queue_exit(&ring);
	check_pool(_metadata, self->ctl, c.pool, NULL);
	finish(_metadata, self, c.fds, 2);
}

/* ------------------------------------------------------------------ */
/* Closing with work submitted; kill -9 of a submitter                */
/* ------------------------------------------------------------------ */

static int pipe_put(int fd, char ch)
{
	return write(fd, &ch, 1) == 1 ? 0 : -1;
}

static int pipe_get(int fd)
{
	char ch;
	ssize_t n;

	do {
		n = read(fd, &ch, 1);
	} while (n < 0 && errno == EINTR);
	return n == 1 ? ch : -1;
}

#define CLOSE_LOOKUPS	8

/*
 * Child: its own file and ring; 2 OWNED pages (waited for), then
 * CLOSE_LOOKUPS LOOKUPs of the 4-page chain submitted and never reaped;
 * then ring and file closed (in the order asked), reporting each step to
 * the parent and waiting for its go between them.  Exit codes name the
 * failing step.
 */
static int close_child(const char *name, const struct kvs_key *keys, int async,
		       int ring_first, int up, int down)
{
	static __u32 pages[CLOSE_LOOKUPS][4];
	static struct kvs_lookup lk[CLOSE_LOOKUPS];
	struct io_uring ring;
	__u32 own[2];
	int fd, j;

	fd = dev_open();
	if (fd < 0 || attach(fd, name, 2))
		return 10;
	if (io_uring_queue_init(16, &ring, IORING_SETUP_SQE128))
		return 11;
	if (u_alloc(&ring, fd, 2, own))
		return 12;
	for (j = 0; j < CLOSE_LOOKUPS; j++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

		if (!sqe)
			return 13;
		lk[j] = req_lookup(keys, 4, pages[j]);
		prep_ucmd(&ring, sqe, fd, KVS_IOC_LOOKUP, &lk[j], sizeof(lk[j]),
			  async ? IOSQE_ASYNC : 0, j);
	}
	if (io_uring_submit(&ring) != CLOSE_LOOKUPS)
		return 14;
	if (ring_first)
		io_uring_queue_exit(&ring);
	else
		close(fd);
	if (pipe_put(up, '1') || pipe_get(down) != 'g')
		return 15;
	if (ring_first)
		close(fd);
	else
		io_uring_queue_exit(&ring);
	if (pipe_put(up, '2') || pipe_get(down) != 'x')
		return 16;
	return 0;
}

TEST_F_TIMEOUT(uring, close_ring_and_file_with_work_submitted, 180)
{
	struct chain_env c;
	struct kvs_pool_stats st;
	int vi;

	REQUIRE();
	chain_env(_metadata, self, &c, 64, 0);
	close(c.fds[1]);	/* only the publisher P stays */
	c.fds[1] = -1;

	for (vi = 0; vi < 4; vi++) {
		int async = vi & 1, ring_first = vi >> 1;
		int up[2], down[2], st_child = 0;
		pid_t pid;

		ASSERT_EQ(0, pipe(up));
		ASSERT_EQ(0, pipe(down));
		fflush(stdout);
		fflush(stderr);
		pid = fork();
		if (!pid) {
			close(up[0]);
			close(down[1]);
			_exit(close_child(c.name, c.keys, async, ring_first, up[1], down[0]));
		}
		track_kid(_metadata, self, pid);
		close(up[1]);
		close(down[0]);

		ASSERT_EQ('1', pipe_get(up[0])) TH_LOG("variant %d: child failed early", vi);
		if (ring_first) {
			/* The file is open: its holdings are there. */
			ASSERT_EQ(0, stats_of(self->ctl, c.pool, 0, &st));
			ASSERT_EQ(2u, st.n_files);
			ASSERT_EQ(2u, st.n_owned);
			if (!async) {
				/* Inline commands completed at submission. */
				ASSERT_EQ((unsigned)(4 + 2 + 4 * CLOSE_LOOKUPS), st.n_held)
					TH_LOG("variant %d", vi);
			} else {
				ASSERT_LE((unsigned)(4 + 2), st.n_held);
				ASSERT_GE((unsigned)(4 + 2 + 4 * CLOSE_LOOKUPS), st.n_held);
			}
		} else if (!async) {
			/* Nothing in flight pins the file: closing it released it. */
			ASSERT_POOL_AT(self->ctl, c.pool, 1, 4, 0);
		}
		ASSERT_EQ(0, pipe_put(down[1], 'g'));
		ASSERT_EQ('2', pipe_get(up[0])) TH_LOG("variant %d", vi);
		/* Both closed, the child still alive: everything is back. */
		ASSERT_POOL_AT(self->ctl, c.pool, 1, 4, 0);
		check_pool(_metadata, self->ctl, c.pool, &st);
		ASSERT_EQ(4u, st.n_refs);
		ASSERT_EQ(0, pipe_put(down[1], 'x'));
		ASSERT_EQ(pid, waitpid(pid, &st_child, 0));
		untrack_kid(self, pid);
		ASSERT_TRUE(WIFEXITED(st_child)) TH_LOG("variant %d: status %#x", vi, st_child);
		ASSERT_EQ(0, WEXITSTATUS(st_child)) TH_LOG("variant %d", vi);
		close(up[0]);
		close(down[1]);
	}
	finish(_metadata, self, c.fds, 2);
}

/*
 * Child: owns 4 pages, holds the chain, then submits LOOKUP and PUT SQEs
 * (inline and IOSQE_ASYNC) in a loop and reaps only some of the CQEs, so
 * that many completions are outstanding when it is killed.
 */
static void kill_child(const char *name, const struct kvs_key *keys, const __u32 *chain,
		       int up)
{
	static __u32 pages[16][4];
	static struct kvs_lookup lk[16];
	static struct kvs_put put[16];
	struct io_uring ring;
	__u32 own[4], got[4];
	unsigned long round;
	int fd, j;

	fd = dev_open();
	if (fd < 0 || attach(fd, name, 2))
		_exit(10);
	if (io_uring_queue_init(32, &ring, IORING_SETUP_SQE128))
		_exit(11);
	if (u_alloc(&ring, fd, 4, own))
		_exit(12);
	if (u_lookup(&ring, fd, keys, 4, got) != 4)
		_exit(13);
	for (round = 0;; round++) {
		for (j = 0; j < 16; j++) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			__u8 flags = (j & 2) ? IOSQE_ASYNC : 0;

			if (!sqe)
				break;
			if (j & 1) {
				put[j] = req_put(chain, 4);
				prep_ucmd(&ring, sqe, fd, KVS_IOC_PUT, &put[j], sizeof(put[j]),
					  flags, j);
			} else {
				lk[j] = req_lookup(keys, 4, pages[j]);
				prep_ucmd(&ring, sqe, fd, KVS_IOC_LOOKUP, &lk[j], sizeof(lk[j]),
					  flags, j);
			}
		}
		if (io_uring_submit(&ring) < 0 || io_uring_cq_ready(&ring) > 48)
			io_uring_cq_advance(&ring, io_uring_cq_ready(&ring) / 2);
		if (round == 4 && pipe_put(up, 's'))
			_exit(14);
	}
}

TEST_F_TIMEOUT(uring, kill9_submitter, 180)
{
	struct chain_env c;
	struct kvs_pool_stats st;
	int vi;

	REQUIRE();
	chain_env(_metadata, self, &c, 64, 0);
	close(c.fds[1]);
	c.fds[1] = -1;

	for (vi = 0; vi < 2; vi++) {
		int up[2], status = 0;
		pid_t pid;

		ASSERT_EQ(0, pipe(up));
		fflush(stdout);
		fflush(stderr);
		pid = fork();
		if (!pid) {
			close(up[0]);
			kill_child(c.name, c.keys, c.chain, up[1]);
			_exit(1);
		}
		track_kid(_metadata, self, pid);
		close(up[1]);
		ASSERT_EQ('s', pipe_get(up[0])) TH_LOG("child failed before submitting");
		close(up[0]);
		ASSERT_EQ(0, stats_of(self->ctl, c.pool, 0, &st));
		ASSERT_EQ(2u, st.n_files);
		ASSERT_LE(4u, st.n_owned);
		/* Let it run (vi 1: longer, CQ overflowing). */
		sleep_ms(vi ? 500 : 100);
		ASSERT_EQ(0, kill(pid, SIGKILL));
		ASSERT_EQ(pid, waitpid(pid, &status, 0));
		untrack_kid(self, pid);
		ASSERT_TRUE(WIFSIGNALED(status)) TH_LOG("child exited by itself: %d",
							WEXITSTATUS(status));
		ASSERT_EQ(SIGKILL, WTERMSIG(status));
		/* Only the publisher's 4 references remain; nothing OWNED. */
		ASSERT_POOL_AT(self->ctl, c.pool, 1, 4, 0);
		check_pool(_metadata, self->ctl, c.pool, &st);
		ASSERT_EQ(4u, st.n_refs);
	}
	finish(_metadata, self, c.fds, 2);
}

TEST_HARNESS_MAIN
