// SPDX-License-Identifier: GPL-2.0
/*
 * uring_wait_test: a LOOKUP with KVS_LOOKUP_WAIT through io_uring parks
 * until the claim it waits on ends (include/uapi/linux/kvshare.h, the
 * io_uring paragraph): a hit when the owner publishes, a miss when it
 * puts, dies or its claim times out, the keys still in flight in res2 at
 * the deadline; one parked LOOKUP per file; and a parked command never
 * holds up its ring's teardown, its process's exit, or the module's
 * unload (the VM ends with rmmod).
 *
 * A wake is told from the deadline or the claim's timeout by when the CQE
 * comes: each is far beyond WOKEN_S, which in turn leaves the VM (TCG)
 * ample time for a real wake.
 */
#include <poll.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>

#include <liburing.h>

#include "kvs_test.h"

#define W_PAGES		32
#define W_NS		5
#define WOKEN_S		5		/* a wake comes sooner than this */
#define LONG_WAIT_MS	KVS_URING_WAIT_MAX_MS	/* the deadline, far off */
#define KVS_MODULE_DEFAULT	"/lib/modules/kvshare.ko"

FIXTURE(uw) {
	struct kvs_env env;
	__u32 pool;
	char name[KVS_NAME_MAX];
	struct kvs_conn *a, *b;		/* a claims, b waits */
	struct io_uring ring;		/* b's */
	int ring_ok;
};

FIXTURE_SETUP(uw)
{
	kvs_env_init(&self->env);
	self->ring_ok = 0;
}

FIXTURE_TEARDOWN(uw)
{
	if (self->ring_ok)
		io_uring_queue_exit(&self->ring);
	kvs_env_fini(&self->env);
}

static void ring_init(struct __test_metadata *_metadata, struct io_uring *r,
		      unsigned int flags)
{
	int ret = io_uring_queue_init(8, r, flags);

	if (ret == -ENOSYS || ret == -EPERM)
		SKIP(return, "io_uring unavailable: %s", strerror(-ret));
	ASSERT_EQ(0, ret) TH_LOG("io_uring_queue_init(%#x): %s", flags, strerror(-ret));
}

#define W_BEGIN() do { \
	KVS_REQUIRE(&self->env); \
	self->pool = kvs_env_pool(_metadata, &self->env, W_PAGES, 0, self->name); \
	self->a = kvs_env_attach(_metadata, &self->env, self->name, W_NS); \
	self->b = kvs_env_attach(_metadata, &self->env, self->name, W_NS); \
	ring_init(_metadata, &self->ring, IORING_SETUP_SQE128 | IORING_SETUP_CQE32); \
	self->ring_ok = 1; \
} while (0)

#define W_END() do { \
	check_invariants(&self->env.ctl, self->pool); \
	kvs_env_assert_baseline(_metadata, &self->env); \
} while (0)

static void keys_of(struct kvs_key *k, __u32 chain, __u32 n)
{
	__u32 i;

	for (i = 0; i < n; i++)
		k[i] = make_key(chain, i);
}

/* Keys and pages of one parked LOOKUP: they must outlive the submission. */
struct uwait {
	struct kvs_key keys[16];
	__u32 pages[16];
	struct kvs_uring_lookup req;
};

static void uwait_prep(struct uwait *w, __u32 chain, __u32 n, __u32 timeout_ms)
{
	memset(w, 0, sizeof(*w));
	keys_of(w->keys, chain, n);
	memset(w->pages, 0xff, sizeof(w->pages));
	w->req.lookup.count = n;
	w->req.lookup.flags = KVS_LOOKUP_WAIT;
	w->req.lookup.keys = KVS_PTR(w->keys);
	w->req.lookup.pages = KVS_PTR(w->pages);
	w->req.timeout_ms = timeout_ms;
}

/*
 * Submit @len bytes of @payload as @op on @fd (a 128-byte SQE), with
 * @cmd_flags in sqe->uring_cmd_flags: 0 or -errno.
 */
static int submit_flags(struct io_uring *r, int fd, __u32 op, const void *payload,
			size_t len, __u32 cmd_flags, __u64 ud)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(r);
	int ret;

	if (!sqe)
		return -EBUSY;
	memset(sqe, 0, 2 * sizeof(*sqe));
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = fd;
	sqe->cmd_op = op;
	sqe->uring_cmd_flags = cmd_flags;
	sqe->user_data = ud;
	memcpy(sqe->cmd, payload, len);
	ret = io_uring_submit(r);
	return ret == 1 ? 0 : ret < 0 ? ret : -EIO;
}

static int submit(struct io_uring *r, int fd, __u32 op, const void *payload,
		  size_t len, __u64 ud)
{
	return submit_flags(r, fd, op, payload, len, 0, ud);
}

static int submit_wait(struct io_uring *r, int fd, struct uwait *w, __u64 ud)
{
	return submit(r, fd, KVS_IOC_LOOKUP, &w->req, sizeof(w->req), ud);
}

struct done {
	__u64 ud;
	int res;
	__u64 res2;
};

/*
 * The next CQE within @s seconds: 0, or -ETIME when none came.  res2 is
 * big_cqe[0] on a CQE32 ring.
 */
static int reap(struct io_uring *r, int s, struct done *d)
{
	struct __kernel_timespec ts = { .tv_sec = s };
	struct io_uring_cqe *cqe;
	int ret;

	do {
		ret = io_uring_wait_cqe_timeout(r, &cqe, &ts);
	} while (ret == -EINTR);
	if (ret)
		return ret;
	d->ud = cqe->user_data;
	d->res = cqe->res;
	d->res2 = (r->flags & IORING_SETUP_CQE32) ? cqe->big_cqe[0] : 0;
	io_uring_cqe_seen(r, cqe);
	return 0;
}

/* No CQE is ready now. */
static int nothing_ready(struct io_uring *r)
{
	struct io_uring_cqe *cqe;

	return io_uring_peek_cqe(r, &cqe) == -EAGAIN;
}

static __u64 inflight_waits(struct __test_metadata *_metadata, struct kvs_conn *ctl,
			    __u32 pool)
{
	struct kvs_pool_stats st;

	EXPECT_EQ(0, kvs_stats(ctl, pool, 0, &st));
	return st.inflight_waits;
}

/* Until the pool has counted @n armed waits (a parked LOOKUP arms one). */
static int waits_reach(struct __test_metadata *_metadata, struct kvs_conn *ctl,
		       __u32 pool, __u64 n)
{
	int i;

	for (i = 0; i < 2000; i++) {
		if (inflight_waits(_metadata, ctl, pool) >= n)
			return 0;
		usleep(5000);
	}
	return -ETIME;
}

/* The owner publishes its chain: the parked waiter gets every page. */
TEST_F(uw, publish_completes_with_hits)
{
	__u32 p[3], q[3], hit = 9, inf = 9;
	struct kvs_lookup l;
	struct uwait w;
	struct done d;

	W_BEGIN();
	ASSERT_EQ(0, kvs_claim_chain(self->a, 1, 3, p));
	uwait_prep(&w, 1, 3, LONG_WAIT_MS);
	ASSERT_EQ(0, submit_wait(&self->ring, self->b->fd, &w, 7));
	ASSERT_EQ(0, waits_reach(_metadata, &self->env.ctl, self->pool, 1));
	ASSERT_TRUE(nothing_ready(&self->ring));
	ASSERT_EQ(3, kvs_held(self->a));
	ASSERT_EQ(0, kvs_held(self->b));

	/* The poll wait of the same file does not disarm the parked one. */
	keys_of(w.keys, 1, 3);
	memset(&l, 0, sizeof(l));
	l.count = 3;
	l.flags = KVS_LOOKUP_WAIT;
	l.keys = KVS_PTR(w.keys);
	l.pages = KVS_PTR(q);
	ASSERT_EQ(0, kvs_call(self->b, KVS_IOC_LOOKUP, &l));
	hit = l.n_hit;
	inf = l.n_inflight;
	ASSERT_EQ(0, hit);
	ASSERT_EQ(3, inf);
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 1, 0, 3, q, &hit));
	ASSERT_EQ(0, hit);

	/* Key 0 published: a hit, and parked again on key 1. */
	ASSERT_EQ(0, kvs_publish_chain(self->a, p, 1, KVS_NO_PAGE, 1, 0, NULL, NULL));
	ASSERT_EQ(0, waits_reach(_metadata, &self->env.ctl, self->pool, 3));
	ASSERT_TRUE(nothing_ready(&self->ring));
	ASSERT_EQ(1, kvs_held(self->b));

	ASSERT_EQ(0, kvs_publish_chain(self->a, p + 1, 2, p[0], 1, 1, NULL, NULL));
	ASSERT_EQ(0, reap(&self->ring, WOKEN_S, &d)) TH_LOG("no CQE: the wake was lost");
	ASSERT_EQ(7, d.ud);
	ASSERT_EQ(3, d.res);
	ASSERT_EQ(0, d.res2);
	ASSERT_EQ(0, memcmp(p, w.pages, sizeof(p)));
	ASSERT_EQ(3, kvs_held(self->b));
	check_invariants(&self->env.ctl, self->pool);
	ASSERT_EQ(0, kvs_put(self->a, p, 3));
	ASSERT_EQ(0, kvs_put(self->b, w.pages, 3));
	W_END();
}

/* The owner puts its claim back: a miss, and the waiter may claim. */
TEST_F(uw, put_completes_with_a_miss)
{
	__u32 p[2], q[2];
	struct uwait w;
	struct done d;

	W_BEGIN();
	ASSERT_EQ(0, kvs_claim_chain(self->a, 2, 2, p));
	uwait_prep(&w, 2, 2, LONG_WAIT_MS);
	ASSERT_EQ(0, submit_wait(&self->ring, self->b->fd, &w, 1));
	ASSERT_EQ(0, waits_reach(_metadata, &self->env.ctl, self->pool, 1));
	ASSERT_TRUE(nothing_ready(&self->ring));
	ASSERT_EQ(0, kvs_put(self->a, p, 2));
	ASSERT_EQ(0, reap(&self->ring, WOKEN_S, &d)) TH_LOG("no CQE: the wake was lost");
	ASSERT_EQ(0, d.res);
	ASSERT_EQ(0, d.res2);
	ASSERT_EQ(0xffffffffu, w.pages[0]);
	ASSERT_EQ(0, kvs_claim_chain(self->b, 2, 2, q));
	ASSERT_EQ(0, kvs_put(self->b, q, 2));
	W_END();
}

/* The owner is killed: its claim ends with its file, the waiter at once. */
TEST_F(uw, owner_killed_completes_at_once)
{
	struct uwait w;
	struct done d;
	pid_t pid;

	W_BEGIN();
	pid = kvs_env_fork_claimer(_metadata, &self->env, self->name, W_NS, 3, 4);
	uwait_prep(&w, 3, 4, LONG_WAIT_MS);
	ASSERT_EQ(0, submit_wait(&self->ring, self->b->fd, &w, 2));
	ASSERT_EQ(0, waits_reach(_metadata, &self->env.ctl, self->pool, 1));
	ASSERT_TRUE(nothing_ready(&self->ring));
	ASSERT_KILL9(pid);
	ASSERT_EQ(0, reap(&self->ring, WOKEN_S, &d)) TH_LOG("no CQE: the wake was lost");
	ASSERT_EQ(0, d.res);
	ASSERT_EQ(0, d.res2);
	W_END();
}

/* Still in flight at the deadline: the hits so far, the rest in res2. */
TEST_F(uw, deadline_reports_keys_in_flight)
{
	__u32 p[3];
	struct uwait w;
	struct done d;

	W_BEGIN();
	ASSERT_EQ(0, kvs_alloc(self->a, 1, p));
	ASSERT_EQ(0, kvs_publish_chain(self->a, p, 1, KVS_NO_PAGE, 4, 0, NULL, NULL));
	ASSERT_EQ(0, kvs_claim_keys(self->a, 4, 1, 2, p + 1));
	uwait_prep(&w, 4, 3, 200);
	ASSERT_EQ(0, submit_wait(&self->ring, self->b->fd, &w, 3));
	ASSERT_EQ(0, reap(&self->ring, WOKEN_S, &d)) TH_LOG("the deadline did not end the wait");
	ASSERT_EQ(1, d.res);
	ASSERT_EQ(2, d.res2);
	ASSERT_EQ(p[0], w.pages[0]);
	ASSERT_EQ(0xffffffffu, w.pages[1]);
	ASSERT_EQ(1, kvs_held(self->b));
	check_invariants(&self->env.ctl, self->pool);
	/* Given up: the claim's end finds nothing parked, and nothing breaks. */
	ASSERT_EQ(0, kvs_publish_chain(self->a, p + 1, 2, p[0], 4, 1, NULL, NULL));
	ASSERT_TRUE(nothing_ready(&self->ring));
	ASSERT_EQ(0, kvs_put(self->b, w.pages, 1));
	ASSERT_EQ(0, kvs_put(self->a, p, 3));
	W_END();
}

/* Nothing in flight: it completes at once, as a plain LOOKUP. */
TEST_F(uw, nothing_in_flight_completes_at_once)
{
	__u32 p[2];
	struct uwait w;
	struct done d;

	W_BEGIN();
	ASSERT_EQ(0, kvs_alloc(self->a, 2, p));
	ASSERT_EQ(0, kvs_publish_chain(self->a, p, 2, KVS_NO_PAGE, 5, 0, NULL, NULL));
	uwait_prep(&w, 5, 3, LONG_WAIT_MS);
	ASSERT_EQ(0, submit_wait(&self->ring, self->b->fd, &w, 4));
	ASSERT_EQ(0, reap(&self->ring, WOKEN_S, &d));
	ASSERT_EQ(2, d.res);
	ASSERT_EQ(0, d.res2);
	ASSERT_EQ(0, inflight_waits(_metadata, &self->env.ctl, self->pool));
	ASSERT_EQ(0, kvs_put(self->b, w.pages, 2));
	ASSERT_EQ(0, kvs_put(self->a, p, 2));
	W_END();
}

/* One parked LOOKUP per file: EBUSY for a second; another file may park. */
TEST_F(uw, second_parked_wait_is_ebusy)
{
	struct kvs_conn *c;
	struct uwait w1, w2, w3;
	struct done d;
	__u32 p[1];
	int seen = 0;

	W_BEGIN();
	c = kvs_env_attach(_metadata, &self->env, self->name, W_NS);
	ASSERT_EQ(0, kvs_claim_chain(self->a, 6, 1, p));
	uwait_prep(&w1, 6, 1, LONG_WAIT_MS);
	uwait_prep(&w2, 6, 1, LONG_WAIT_MS);
	uwait_prep(&w3, 6, 1, LONG_WAIT_MS);
	ASSERT_EQ(0, submit_wait(&self->ring, self->b->fd, &w1, 1));
	ASSERT_EQ(0, submit_wait(&self->ring, self->b->fd, &w2, 2));
	ASSERT_EQ(0, reap(&self->ring, WOKEN_S, &d));
	ASSERT_EQ(2, d.ud);
	ASSERT_EQ(-EBUSY, d.res);
	ASSERT_EQ(0, submit_wait(&self->ring, c->fd, &w3, 3));
	ASSERT_EQ(0, waits_reach(_metadata, &self->env.ctl, self->pool, 2));
	ASSERT_TRUE(nothing_ready(&self->ring));
	ASSERT_EQ(0, kvs_publish_chain(self->a, p, 1, KVS_NO_PAGE, 6, 0, NULL, NULL));
	while (seen != 3) {
		ASSERT_EQ(0, reap(&self->ring, WOKEN_S, &d)) TH_LOG("seen %d", seen);
		ASSERT_EQ(1, d.res);
		ASSERT_EQ(0, d.res2);
		ASSERT_TRUE(d.ud == 1 || d.ud == 3);
		seen |= (int)d.ud;
	}
	ASSERT_EQ(p[0], w1.pages[0]);
	ASSERT_EQ(p[0], w3.pages[0]);
	ASSERT_EQ(0, kvs_put(self->b, w1.pages, 1));
	ASSERT_EQ(0, kvs_put(c, w3.pages, 1));
	ASSERT_EQ(0, kvs_put(self->a, p, 1));
	/* The slot is free again. */
	uwait_prep(&w1, 6, 1, LONG_WAIT_MS);
	ASSERT_EQ(0, submit_wait(&self->ring, self->b->fd, &w1, 5));
	ASSERT_EQ(0, reap(&self->ring, WOKEN_S, &d));
	ASSERT_EQ(1, d.res);
	ASSERT_EQ(0, kvs_put(self->b, w1.pages, 1));
	W_END();
}

/* Malformed waits are refused before anything is taken or armed. */
TEST_F(uw, bad_waits_are_refused)
{
	struct kvs_pool_stats s0, s1;
	struct io_uring plain;
	struct uwait w;
	struct done d;
	__u32 p[1];
	unsigned int i;
	struct {
		const char *what;
		int expect;
	} bad[] = {
		{ "timeout 0", -ERANGE },
		{ "timeout above the max", -ERANGE },
		{ "pad", -EINVAL },
		{ "unknown flag", -EINVAL },
		{ "reserved", -EINVAL },
		{ "n_inflight in", -EINVAL },
		{ "count 0", -EINVAL },
		{ "size bits", -EINVAL },
		{ "last byte after the struct", -EINVAL },
		{ "first byte after the struct", -EINVAL },
		{ "IORING_URING_CMD_FIXED", -EINVAL },
		{ "PEEK, which has nothing to wait for", -EINVAL },
	};
	static char fixed[4096] __attribute__((aligned(4096)));
	struct iovec iov = { .iov_base = fixed, .iov_len = sizeof(fixed) };

	W_BEGIN();
	/* Else io_uring itself refuses FIXED (EFAULT), before the device sees it. */
	ASSERT_EQ(0, io_uring_register_buffers(&self->ring, &iov, 1));
	ASSERT_EQ(0, kvs_claim_chain(self->a, 7, 1, p));
	ASSERT_EQ(0, kvs_stats(&self->env.ctl, self->pool, 0, &s0));
	for (i = 0; i < KVS_ARRAY_SIZE(bad); i++) {
		unsigned char raw[KVS_URING_PAYLOAD_MAX] = { 0 };
		__u32 op = KVS_IOC_LOOKUP, cmd_flags = 0;

		uwait_prep(&w, 7, 1, LONG_WAIT_MS);
		switch (i) {
		case 0:
			w.req.timeout_ms = 0;
			break;
		case 1:
			w.req.timeout_ms = KVS_URING_WAIT_MAX_MS + 1;
			break;
		case 2:
			w.req.pad = 1;
			break;
		case 3:
			w.req.lookup.flags |= 1u << 31;
			break;
		case 4:
			w.req.lookup.reserved[1] = 1;
			break;
		case 5:
			w.req.lookup.n_inflight = 1;
			break;
		case 6:
			w.req.lookup.count = 0;
			break;
		case 7:
			/* An older, shorter struct kvs_lookup. */
			op = (KVS_IOC_LOOKUP & ~(_IOC_SIZEMASK << _IOC_SIZESHIFT)) |
			     (40u << _IOC_SIZESHIFT);
			break;
		case 8:
			/* Where the struct may grow: must be zero now. */
			raw[KVS_URING_PAYLOAD_MAX - 1] = 1;
			break;
		case 9:
			raw[sizeof(w.req)] = 0x80;
			break;
		case 10:
			/* A registered buffer, which no command uses. */
			cmd_flags = IORING_URING_CMD_FIXED;
			break;
		case 11:
			w.req.lookup.flags |= KVS_LOOKUP_PEEK;
			break;
		}
		memcpy(raw, &w.req, sizeof(w.req));
		ASSERT_EQ(0, submit_flags(&self->ring, self->b->fd, op, raw,
					  sizeof(raw), cmd_flags, 10 + i));
		ASSERT_EQ(0, reap(&self->ring, WOKEN_S, &d)) TH_LOG("%s", bad[i].what);
		ASSERT_EQ(bad[i].expect, d.res) TH_LOG("%s", bad[i].what);
	}
	/* A ring without CQE32 has no room for n_inflight. */
	ring_init(_metadata, &plain, IORING_SETUP_SQE128);
	uwait_prep(&w, 7, 1, LONG_WAIT_MS);
	ASSERT_EQ(0, submit_wait(&plain, self->b->fd, &w, 20));
	ASSERT_EQ(0, reap(&plain, WOKEN_S, &d));
	ASSERT_EQ(-EINVAL, d.res);
	io_uring_queue_exit(&plain);
	/* Nothing armed, taken or counted. */
	ASSERT_EQ(0, kvs_stats(&self->env.ctl, self->pool, 0, &s1));
	ASSERT_EQ(s0.inflight_waits, s1.inflight_waits);
	kvs_assert_same_state(_metadata, &s0, &s1);
	ASSERT_EQ(0, kvs_held(self->b));
	/* The same wait, clean, parks: its 1 ms deadline finds the key in flight. */
	uwait_prep(&w, 7, 1, 1);
	ASSERT_EQ(0, submit_wait(&self->ring, self->b->fd, &w, 30));
	ASSERT_EQ(0, reap(&self->ring, WOKEN_S, &d));
	ASSERT_EQ(30, d.ud);
	ASSERT_EQ(0, d.res);
	ASSERT_EQ(1, d.res2);
	ASSERT_EQ(0, kvs_put(self->a, p, 1));
	W_END();
}

/*
 * A waiter with a LOOKUP parked exits, is killed or execs: the command
 * completes within a tick, so the waiter's file is released (and an exec
 * goes on) although the claim (10 s) and the deadline (30 s) are far off.
 */
enum waiter_end { W_EXIT, W_KILL9, W_EXEC };

static void waiter_goes(struct __test_metadata *_metadata, FIXTURE_DATA(uw) *self,
			__u32 chain, enum waiter_end how)
{
	struct kvs_pool_stats st;
	__u32 p[2];
	int go[2], back[2], i;
	char byte;
	pid_t pid;

	ASSERT_EQ(0, kvs_claim_chain(self->a, chain, 2, p));
	ASSERT_EQ(0, pipe(go));
	ASSERT_EQ(0, pipe(back));
	pid = kvs_env_fork(_metadata, &self->env);
	if (!pid) {
		struct io_uring r;
		struct kvs_conn c;
		struct uwait w;

		close(go[0]);
		close(back[1]);
		if (kvs_conn_open(&c) || kvs_attach(&c, self->name, W_NS, 0, NULL) ||
		    io_uring_queue_init(4, &r, IORING_SETUP_SQE128 | IORING_SETUP_CQE32))
			_exit(1);
		uwait_prep(&w, chain, 2, LONG_WAIT_MS);
		if (submit_wait(&r, c.fd, &w, 1))
			_exit(2);
		if (write(go[1], "x", 1) != 1)
			_exit(3);
		if (how == W_KILL9) {
			for (;;)
				pause();
		}
		/* Still parked when told to go; leave, closing neither. */
		if (read(back[0], &byte, 1) != 1 || !nothing_ready(&r))
			_exit(4);
		if (how == W_EXEC) {
			execl("/bin/sh", "sh", "-c", "exit 0", (char *)NULL);
			_exit(5);
		}
		_exit(0);
	}
	close(go[1]);
	close(back[0]);
	ASSERT_EQ(1, read(go[0], &byte, 1));
	close(go[0]);
	ASSERT_EQ(0, waits_reach(_metadata, &self->env.ctl, self->pool, 1));
	ASSERT_EQ(0, kvs_stats(&self->env.ctl, self->pool, 0, &st));
	ASSERT_EQ(3, st.n_files);
	ASSERT_EQ(1, write(back[1], "x", 1));
	close(back[1]);
	if (how == W_KILL9)
		ASSERT_EQ(0, kill(pid, SIGKILL));
	/*
	 * Within WOKEN_S, far from the claim's timeout and the deadline; and
	 * before reaping, which would wait for an exec held up (sh exits at
	 * once after it).
	 */
	for (i = 0; i < WOKEN_S * 100; i++) {
		ASSERT_EQ(0, kvs_stats(&self->env.ctl, self->pool, 0, &st));
		if (st.n_files == 2)
			break;
		usleep(10000);
	}
	ASSERT_EQ(2, st.n_files) TH_LOG("the waiter's file was not released");
	ASSERT_EQ(2, st.n_claimed);
	if (how == W_KILL9) {
		int status = 0;

		ASSERT_EQ(pid, waitpid(pid, &status, 0));
		ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	} else {
		ASSERT_CHILD_OK(pid);
	}
	ASSERT_EQ(0, kvs_put(self->a, p, 2));
}

TEST_F(uw, waiter_exiting_with_a_parked_wait)
{
	W_BEGIN();
	waiter_goes(_metadata, self, 8, W_EXIT);
	W_END();
}

TEST_F(uw, waiter_killed_with_a_parked_wait)
{
	W_BEGIN();
	waiter_goes(_metadata, self, 9, W_KILL9);
	W_END();
}

/* exec waits for the process's io_uring commands: not for the deadline. */
TEST_F(uw, waiter_execing_with_a_parked_wait)
{
	W_BEGIN();
	waiter_goes(_metadata, self, 12, W_EXEC);
	W_END();
}

/*
 * The ring is torn down while a LOOKUP is parked and the process lives
 * on: the teardown waits for the command, which completes when the claim
 * ends; then the file, closed meanwhile, is released.
 */
TEST_F(uw, ring_closed_while_parked)
{
	struct kvs_pool_stats st;
	struct uwait w;
	__u32 p[1];
	int i;

	W_BEGIN();
	ASSERT_EQ(0, kvs_claim_chain(self->a, 10, 1, p));
	uwait_prep(&w, 10, 1, LONG_WAIT_MS);
	ASSERT_EQ(0, submit_wait(&self->ring, self->b->fd, &w, 1));
	ASSERT_EQ(0, waits_reach(_metadata, &self->env.ctl, self->pool, 1));
	io_uring_queue_exit(&self->ring);
	self->ring_ok = 0;
	kvs_conn_close(self->b);
	ASSERT_EQ(0, kvs_stats(&self->env.ctl, self->pool, 0, &st));
	ASSERT_EQ(2, st.n_files);		/* the parked command holds it */
	ASSERT_EQ(0, kvs_put(self->a, p, 1));
	for (i = 0; i < WOKEN_S * 100; i++) {
		ASSERT_EQ(0, kvs_stats(&self->env.ctl, self->pool, 0, &st));
		if (st.n_files == 1)
			break;
		usleep(10000);
	}
	ASSERT_EQ(1, st.n_files) TH_LOG("the parked command was not completed");
	W_END();
}

struct thread_wait {
	struct io_uring *ring;
	int fd;
	struct uwait *w;
	int ret;
};

static void *submit_and_exit(void *arg)
{
	struct thread_wait *t = arg;

	t->ret = submit_wait(t->ring, t->fd, t->w, 6);
	return NULL;
}

/*
 * The thread that submitted is gone (a thread pool shrinking): the
 * command cannot look up in its task again and gives up within a tick,
 * but the hit of its first round is written to pages[] in the memory the
 * process still has, and referenced by the file.  The CQE must say so,
 * or the process can never put that page.
 */
TEST_F(uw, submitter_thread_gone_reports_hits_taken)
{
	struct thread_wait t;
	struct uwait w;
	struct done d;
	pthread_t th;
	__u32 p[2];

	W_BEGIN();
	ASSERT_EQ(0, kvs_alloc(self->a, 1, p));
	ASSERT_EQ(0, kvs_publish_chain(self->a, p, 1, KVS_NO_PAGE, 14, 0, NULL, NULL));
	ASSERT_EQ(0, kvs_claim_keys(self->a, 14, 1, 1, p + 1));
	uwait_prep(&w, 14, 2, LONG_WAIT_MS);
	t.ring = &self->ring;
	t.fd = self->b->fd;
	t.w = &w;
	t.ret = -1;
	ASSERT_EQ(0, pthread_create(&th, NULL, submit_and_exit, &t));
	ASSERT_EQ(0, pthread_join(th, NULL));
	ASSERT_EQ(0, t.ret);
	ASSERT_EQ(0, reap(&self->ring, WOKEN_S, &d)) TH_LOG("no CQE: still parked");
	ASSERT_EQ(6, d.ud);
	ASSERT_EQ(1, d.res) TH_LOG("res %d: the hit taken is not reported", d.res);
	ASSERT_EQ(0, d.res2);
	ASSERT_EQ(p[0], w.pages[0]);
	ASSERT_EQ(1, kvs_held(self->b));
	check_invariants(&self->env.ctl, self->pool);
	ASSERT_EQ(0, kvs_publish_chain(self->a, p + 1, 1, p[0], 14, 1, NULL, NULL));
	ASSERT_TRUE(nothing_ready(&self->ring));
	ASSERT_EQ(0, kvs_put(self->b, w.pages, 1));
	ASSERT_EQ(0, kvs_put(self->a, p, 2));
	W_END();
}

/* The waiting thread of lone_waiter_test(): the process's last one. */
struct lone {
	const char *name;
	pthread_t main;
	int go, back;
};

static void *lone_waiter(void *arg)
{
	struct lone *l = arg;
	struct io_uring r;
	struct kvs_conn c;
	struct uwait w;
	struct done d;
	int res = -EIO;

	if (kvs_conn_open(&c) || kvs_attach(&c, l->name, W_NS, 0, NULL) ||
	    io_uring_queue_init(4, &r, IORING_SETUP_SQE128 | IORING_SETUP_CQE32))
		_exit(1);
	uwait_prep(&w, 15, 2, LONG_WAIT_MS);
	if (submit_wait(&r, c.fd, &w, 1))
		_exit(2);
	/* Parked, and the leader has left: the owner may publish now. */
	if (pthread_join(l->main, NULL) || write(l->go, "x", 1) != 1)
		_exit(3);
	if (!reap(&r, WOKEN_S, &d))
		res = d.res;
	if (write(l->back, &res, sizeof(res)) != sizeof(res))
		_exit(4);
	_exit(0);
}

/*
 * The process's main thread has left with pthread_exit() and the one
 * that parked a LOOKUP lives on: the process is not exiting, so the wait
 * goes on until the claim ends, with the owner's pages.
 */
TEST_F(uw, leader_thread_gone_the_wait_goes_on)
{
	int go[2], back[2], res = 0;
	struct lone l;
	pthread_t th;
	char byte;
	__u32 p[2];
	pid_t pid;

	W_BEGIN();
	ASSERT_EQ(0, kvs_claim_chain(self->a, 15, 2, p));
	ASSERT_EQ(0, pipe(go));
	ASSERT_EQ(0, pipe(back));
	pid = kvs_env_fork(_metadata, &self->env);
	if (!pid) {
		l.name = self->name;
		l.main = pthread_self();
		l.go = go[1];
		l.back = back[1];
		if (pthread_create(&th, NULL, lone_waiter, &l))
			_exit(5);
		pthread_exit(NULL);
	}
	close(go[1]);
	close(back[1]);
	ASSERT_EQ(1, read(go[0], &byte, 1));
	ASSERT_EQ(0, waits_reach(_metadata, &self->env.ctl, self->pool, 1));
	ASSERT_EQ(0, kvs_publish_chain(self->a, p, 2, KVS_NO_PAGE, 15, 0, NULL, NULL));
	ASSERT_EQ(sizeof(res), read(back[0], &res, sizeof(res)));
	EXPECT_EQ(2, res) TH_LOG("res %d: the wait ended with the leader thread", res);
	ASSERT_CHILD_OK(pid);
	close(go[0]);
	close(back[0]);
	ASSERT_EQ(0, kvs_put(self->a, p, 2));
	W_END();
}

/* Load kvshare.ko with @params after unloading it; 0 or -errno. */
static int reload(const char *params)
{
	const char *ko = getenv("KVS_MODULE");
	long gid = kvs_dev_group();
	int i, kfd, ret = 0;

	for (i = 0; i < 100; i++) {
		if (!syscall(__NR_delete_module, "kvshare", O_NONBLOCK) || errno == ENOENT)
			break;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EBUSY)
			return -errno;
		usleep(20000);
	}
	if (i == 100)
		return -EBUSY;
	kfd = open(ko && *ko ? ko : KVS_MODULE_DEFAULT, O_RDONLY | O_CLOEXEC);
	if (kfd < 0)
		return -errno;
	if (syscall(__NR_finit_module, kfd, params, 0))
		ret = -errno;
	close(kfd);
	return ret ? ret : kvs_dev_set_group(gid);
}

/*
 * The claim times out while the LOOKUP is parked: it completes then, a
 * miss, long before its deadline (the expiry wakes nobody, the parked
 * command looks again when the claim's time is up).  Reloads the module
 * with claim_timeout_ms=300, and with the defaults after.
 */
TEST_F(uw, claim_timeout_completes_with_a_miss)
{
	struct uwait w;
	struct done d;
	__u32 p[2];
	int ret;

	KVS_REQUIRE(&self->env);
	kvs_conn_close(&self->env.ctl);
	ret = reload("claim_timeout_ms=300");
	ASSERT_EQ(0, ret) TH_LOG("reload: %s", strerror(-ret));
	ASSERT_EQ(0, kvs_conn_open(&self->env.ctl));
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &self->env.base));
	W_BEGIN();
	ASSERT_EQ(0, kvs_claim_chain(self->a, 11, 2, p));
	uwait_prep(&w, 11, 2, LONG_WAIT_MS);
	ASSERT_EQ(0, submit_wait(&self->ring, self->b->fd, &w, 1));
	ASSERT_EQ(0, reap(&self->ring, WOKEN_S, &d)) TH_LOG("the claim's timeout did not end it");
	ASSERT_EQ(0, d.res);
	ASSERT_EQ(0, d.res2);
	ASSERT_EQ(0, kvs_put(self->a, p, 2));
	io_uring_queue_exit(&self->ring);
	self->ring_ok = 0;
	W_END();
	kvs_conn_close(&self->env.ctl);
	ret = reload("");
	ASSERT_EQ(0, ret) TH_LOG("reload: %s", strerror(-ret));
	ASSERT_EQ(0, kvs_conn_open(&self->env.ctl));
}

TEST_HARNESS_MAIN
