/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Helpers of the suites of the pool event channel (KVS_IOC_CHAN_OPEN):
 * chan_test, chan_hostile_test, chan_storm_test and tests/vm-daemon's
 * tier_storm_test.  Module only: the channel is an anon-inode file of
 * kvshare.ko.  Include after kvs_test.h.
 *
 * A channel's fd wrapped in a struct kvs_conn (chan_conn()) takes the
 * ordinary PUT and PUBLISH helpers of kvs_test.h: those are the two
 * client commands a channel runs.
 */
#ifndef KVS_CHAN_H
#define KVS_CHAN_H

#include <poll.h>

/* The channel's fd, or -errno. */
static inline int chan_open(struct kvs_conn *c, __u32 pool, __u32 ring, __u32 fetch_max)
{
	struct kvs_chan_open r = { .pool_id = pool, .ring = ring, .fetch_max = fetch_max };

	if (ioctl(c->fd, KVS_IOC_CHAN_OPEN, &r))
		return -errno;
	return r.fd;
}

static inline int chan_stats(int fd, struct kvs_chan_stats *st)
{
	memset(st, 0, sizeof(*st));
	return ioctl(fd, KVS_IOC_CHAN_STATS, st) ? -errno : 0;
}

static inline int chan_put(int fd, const __u32 *pages, __u32 n)
{
	struct kvs_put p = { .count = n, .pages = KVS_PTR(pages) };

	return ioctl(fd, KVS_IOC_PUT, &p) ? -errno : 0;
}

/* The channel as a client, for kvs_publish_chain() and kvs_put(). */
static inline struct kvs_conn chan_conn(int fd)
{
	struct kvs_conn c = { .fd = fd };

	return c;
}

/* Is @fd readable now (a record pending; a waiter's claim ended)? */
static inline int readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

/* Key 0 of @chain published by @c on a new page, which @c still holds. */
static inline int publish_one(struct kvs_conn *c, __u32 chain, __u32 *page)
{
	int ret = kvs_alloc(c, 1, page);

	return ret ? ret : kvs_publish_chain(c, page, 1, KVS_NO_PAGE, chain, 0, page, NULL);
}

/*
 * LOOKUP with KVS_LOOKUP_WAIT of keys @first..@first + @n - 1 of @chain
 * (@n <= 64): 0 or -errno, the hits (held) in @pages.
 */
static inline int lookup_wait(struct kvs_conn *c, __u32 chain, __u32 first, __u32 n,
			      __u32 *pages, __u32 *n_hit, __u32 *n_inflight)
{
	struct kvs_key k[64];
	struct kvs_lookup l;
	__u32 i;
	int ret;

	if (n > KVS_ARRAY_SIZE(k))
		return -ENOBUFS;
	for (i = 0; i < n; i++)
		k[i] = make_key(chain, first + i);
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

/* Each test's pool: CH_PAGES pages, CH_QUOTA a file (the channel's max_held). */
#define CH_PAGES	32
#define CH_QUOTA	16
#define CH_NS		5

/*
 * A pool of root's (0600) and two clients attached to it in CH_NS; each
 * test ends with the pool's invariants and the arbiter's baseline (no
 * pool, file, channel or table left: INFO's n_objects).
 */
FIXTURE(chan) {
	struct kvs_env env;
	__u32 pool;
	char name[KVS_NAME_MAX];
	struct kvs_conn *a, *b;
};

FIXTURE_SETUP(chan)
{
	kvs_env_init(&self->env);
}

FIXTURE_TEARDOWN(chan)
{
	kvs_env_fini(&self->env);
}

/* The channel is the module's: a test on kvshared skips. */
#define CH_REQUIRE_MODULE() do { \
	KVS_REQUIRE(&self->env); \
	if (!(kvs_conn_caps(&self->env.ctl) & KVS_CAP_MODULE)) \
		SKIP(return, "the arbiter is not kvshare.ko"); \
} while (0)

#define CH_BEGIN() do { \
	CH_REQUIRE_MODULE(); \
	self->pool = kvs_env_pool(_metadata, &self->env, CH_PAGES, CH_QUOTA, self->name); \
	self->a = kvs_env_attach(_metadata, &self->env, self->name, CH_NS); \
	self->b = kvs_env_attach(_metadata, &self->env, self->name, CH_NS); \
} while (0)

#define CH_END() do { \
	check_invariants(&self->env.ctl, self->pool); \
	kvs_env_assert_baseline(_metadata, &self->env); \
} while (0)

#endif /* KVS_CHAN_H */
