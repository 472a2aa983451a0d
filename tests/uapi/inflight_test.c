// SPDX-License-Identifier: GPL-2.0
/*
 * In-flight dedupe through the ABI: a file claims keys (ALLOC with
 * KVS_ALLOC_CLAIM), another file's LOOKUP with KVS_LOOKUP_WAIT sees them in
 * flight, and its wait ends when the page is published (a hit) or the
 * owner goes away (a miss), killed or not.  On the module the waiter's file
 * polls not readable while it waits and readable at once when the claim
 * ends; kvshared signals nothing (yet), so there the waiter looks again.
 */
#include <poll.h>
#include <pthread.h>
#include <time.h>

#include "kvs_test.h"

#define INF_PAGES	32
#define INF_NS		3

FIXTURE(inf) {
	struct kvs_env env;
	__u32 pool;
	char name[KVS_NAME_MAX];
	struct kvs_conn *a, *b;
};

FIXTURE_SETUP(inf)
{
	kvs_env_init(&self->env);
}

FIXTURE_TEARDOWN(inf)
{
	kvs_env_fini(&self->env);
}

#define INF_BEGIN() do { \
	KVS_REQUIRE(&self->env); \
	self->pool = kvs_env_pool(_metadata, &self->env, INF_PAGES, 0, self->name); \
	self->a = kvs_env_attach(_metadata, &self->env, self->name, INF_NS); \
	self->b = kvs_env_attach(_metadata, &self->env, self->name, INF_NS); \
} while (0)

#define INF_END() do { \
	check_invariants(&self->env.ctl, self->pool); \
	kvs_env_assert_baseline(_metadata, &self->env); \
} while (0)

static int wait_chain(struct kvs_conn *c, __u32 chain, __u32 n, __u32 *pages,
		      __u32 *n_hit, __u32 *n_inflight)
{
	struct kvs_key k[16];
	struct kvs_lookup l;
	__u32 i;
	int ret;

	for (i = 0; i < n; i++)
		k[i] = make_key(chain, i);
	memset(&l, 0, sizeof(l));
	l.count = n;
	l.flags = KVS_LOOKUP_WAIT;
	l.keys = KVS_PTR(k);
	l.pages = KVS_PTR(pages);
	ret = kvs_call(c, KVS_IOC_LOOKUP, &l);
	*n_hit = l.n_hit;
	*n_inflight = l.n_inflight;
	return ret;
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Whether a module file turns readable within @ms (0: is readable now),
 * woken before the timeout: poll() looks once more when it times out, so
 * readiness seen only then means nobody woke the waiter.  -1 when the
 * arbiter is kvshared.
 */
static int readable(struct kvs_conn *c, int ms)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	long long t0 = now_ms();

	if (!(kvs_conn_caps(c) & KVS_CAP_MODULE))
		return -1;
	if (poll(&p, 1, ms) < 0)
		return -2;
	if (ms && now_ms() - t0 >= ms)
		return 0;
	return !!(p.revents & POLLIN);
}

/*
 * The claim must end while the waiter sleeps in poll(), or no wake is
 * needed at all: a thread does it 100 ms after the waiter went to sleep.
 */
struct later {
	pthread_t t;
	struct kvs_conn *c;
	__u32 *pages;
	pid_t victim;
	int ret;
};

static void *later_fn(void *arg)
{
	struct later *l = arg;

	usleep(100 * 1000);
	if (l->victim)
		l->ret = kill(l->victim, SIGKILL);
	else
		l->ret = kvs_publish_chain(l->c, l->pages, 3, KVS_NO_PAGE, 1, 0,
					   NULL, NULL);
	return NULL;
}

TEST_F(inf, publish_wakes_the_waiter_with_a_hit)
{
	__u32 p[3], q[3], hit = 9, inf = 9;
	struct kvs_pool_stats st;
	int r;

	INF_BEGIN();
	/* Nothing to wait for: readable. */
	r = readable(self->b, 0);
	ASSERT_NE(0, r);
	ASSERT_EQ(0, kvs_claim_chain(self->a, 1, 3, p));
	ASSERT_EQ(0, wait_chain(self->b, 1, 3, q, &hit, &inf));
	ASSERT_EQ(0, hit);
	ASSERT_EQ(3, inf);
	ASSERT_EQ(0, kvs_stats(&self->env.ctl, self->pool, 0, &st));
	ASSERT_EQ(3, st.n_claimed);
	ASSERT_EQ(1, st.inflight_waits);
	r = readable(self->b, 0);
	if (r >= 0)
		ASSERT_EQ(0, r);
	{
		struct later l = { .c = self->a, .pages = p };

		ASSERT_EQ(0, pthread_create(&l.t, NULL, later_fn, &l));
		r = readable(self->b, 5000);
		pthread_join(l.t, NULL);
		ASSERT_EQ(0, l.ret);
	}
	if (r >= 0)
		ASSERT_EQ(1, r);
	ASSERT_EQ(0, wait_chain(self->b, 1, 3, q, &hit, &inf));
	ASSERT_EQ(3, hit);
	ASSERT_EQ(0, inf);
	ASSERT_EQ(0, memcmp(p, q, sizeof(p)));
	ASSERT_EQ(0, kvs_put(self->a, p, 3));
	ASSERT_EQ(0, kvs_put(self->b, q, 3));
	INF_END();
}

/* The owner is killed while b waits: b is woken at once, and claims. */
TEST_F(inf, killed_owner_wakes_the_waiter)
{
	__u32 q[4], hit = 9, inf = 9;
	pid_t pid;
	int r;

	INF_BEGIN();
	pid = kvs_env_fork_claimer(_metadata, &self->env, self->name, INF_NS, 2, 4);
	ASSERT_EQ(0, wait_chain(self->b, 2, 4, q, &hit, &inf));
	ASSERT_EQ(0, hit);
	ASSERT_EQ(4, inf);
	r = readable(self->b, 50);
	if (r >= 0)
		ASSERT_EQ(0, r);
	{
		struct later l = { .victim = pid };

		ASSERT_EQ(0, pthread_create(&l.t, NULL, later_fn, &l));
		r = readable(self->b, 5000);
		pthread_join(l.t, NULL);
		ASSERT_EQ(0, l.ret);
	}
	ASSERT_EQ(pid, waitpid(pid, NULL, 0));
	if (r >= 0) {
		ASSERT_EQ(1, r);
	} else {
		ASSERT_EQ(0, kvs_settle());
	}
	ASSERT_EQ(0, wait_chain(self->b, 2, 4, q, &hit, &inf));
	ASSERT_EQ(0, hit);
	ASSERT_EQ(0, inf);
	ASSERT_EQ(0, kvs_claim_chain(self->b, 2, 4, q));
	ASSERT_EQ(0, kvs_publish_chain(self->b, q, 4, KVS_NO_PAGE, 2, 0, NULL, NULL));
	ASSERT_EQ(0, kvs_put(self->b, q, 4));
	INF_END();
}

/* The owner gives up (PUT, or closes its file): a miss for the waiter. */
TEST_F(inf, abandoned_claim_is_a_miss)
{
	__u32 p[2], q[2], hit = 9, inf = 9;
	int r;

	INF_BEGIN();
	ASSERT_EQ(0, kvs_claim_chain(self->a, 3, 2, p));
	ASSERT_EQ(-EEXIST, kvs_claim_chain(self->b, 3, 2, q));
	ASSERT_EQ(0, wait_chain(self->b, 3, 2, q, &hit, &inf));
	ASSERT_EQ(2, inf);
	ASSERT_EQ(0, kvs_put(self->a, p, 1));
	r = readable(self->b, 5000);
	if (r >= 0)
		ASSERT_EQ(1, r);
	ASSERT_EQ(0, wait_chain(self->b, 3, 2, q, &hit, &inf));
	ASSERT_EQ(0, hit + inf);
	/* Key 1 is still in flight; the owner's file closes. */
	ASSERT_EQ(0, kvs_claim_chain(self->b, 4, 1, q));
	ASSERT_EQ(0, kvs_put(self->b, q, 1));
	kvs_conn_close(self->a);
	ASSERT_EQ(0, wait_chain(self->b, 3, 2, q, &hit, &inf));
	ASSERT_EQ(0, hit + inf);
	INF_END();
}

/* Other namespaces never see a claim. */
TEST_F(inf, namespaces_are_apart)
{
	struct kvs_conn *o;
	__u32 p, q, hit = 9, inf = 9;

	INF_BEGIN();
	o = kvs_env_attach(_metadata, &self->env, self->name, INF_NS + 1);
	ASSERT_EQ(0, kvs_claim_chain(o, 5, 1, &p));
	ASSERT_EQ(0, wait_chain(self->b, 5, 1, &q, &hit, &inf));
	ASSERT_EQ(0, hit + inf);
	ASSERT_EQ(0, kvs_claim_chain(self->b, 5, 1, &q));
	kvs_conn_close(o);
	kvs_conn_close(self->b);
	INF_END();
}

TEST_HARNESS_MAIN
