// SPDX-License-Identifier: GPL-2.0
/*
 * kvshare arbiter: success paths, every state transition of
 * docs/design.md section 3, eviction order, quotas, counters and
 * invariants, pool lifecycle, pool and page listings.
 *
 * Each test runs on a fresh pool of ARB_PAGES pages with two files, a and
 * b, attached in namespace 1; it ends by checking that every counter of
 * the arbiter (pools, objects) is back where it started.
 */
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/resource.h>

#include "kvs_test.h"

#define ARB_PAGES	64
#define ARB_NS		1

FIXTURE(arb) {
	struct kvs_env env;
	__u32 pool;
	char name[KVS_NAME_MAX];
	struct kvs_conn *a, *b;
};

FIXTURE_SETUP(arb)
{
	kvs_env_init(&self->env);
}

FIXTURE_TEARDOWN(arb)
{
	kvs_env_fini(&self->env);
}

/* Start of every test: skip without a device, else pool + files a, b. */
#define ARB_BEGIN() do { \
	KVS_REQUIRE(&self->env); \
	self->pool = kvs_env_pool(_metadata, &self->env, ARB_PAGES, 0, self->name); \
	self->a = kvs_env_attach(_metadata, &self->env, self->name, ARB_NS); \
	self->b = kvs_env_attach(_metadata, &self->env, self->name, ARB_NS); \
} while (0)

#define ARB_END() do { \
	check_invariants(&self->env.ctl, self->pool); \
	kvs_env_assert_baseline(_metadata, &self->env); \
} while (0)

#define STATS(c, st) ASSERT_EQ(0, kvs_stats((c), 0, 0, (st)))

/* Allocate every FREE page of @c's pool into @pages; returns how many. */
static __u32 fill_free(struct __test_metadata *_metadata, struct kvs_conn *c,
		       __u32 *pages)
{
	struct kvs_pool_stats st;

	ASSERT_EQ(0, kvs_stats(c, 0, 0, &st));
	if (st.n_free)
		ASSERT_EQ(0, kvs_alloc(c, (__u32)st.n_free, pages));
	return (__u32)st.n_free;
}

/* Publish a fresh chain of @n pages of @chain through @c; pages in @p. */
static void publish_new_chain(struct __test_metadata *_metadata,
			      struct kvs_conn *c, __u32 chain, __u32 n, __u32 *p)
{
	__u32 res[16], n_dup = 99, i;

	ASSERT_LE(n, 16);
	ASSERT_EQ(0, kvs_alloc(c, n, p));
	ASSERT_EQ(0, kvs_publish_chain(c, p, n, KVS_NO_PAGE, chain, 0, res, &n_dup));
	ASSERT_EQ(0, n_dup);
	for (i = 0; i < n; i++)
		ASSERT_EQ(p[i], res[i]);
}

/* ------------------------------------------------------------------ */

TEST_F(arb, info)
{
	struct kvs_info in;
	int i;

	ARB_BEGIN();
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &in));
	ASSERT_EQ(KVS_ABI_VERSION, in.abi_version);
	ASSERT_EQ(KVS_MAX_BATCH, in.max_batch);
	ASSERT_LT(0, in.max_pool_pages);
	ASSERT_LE(in.max_pool_pages, KVS_MAX_POOL_PAGES);
	ASSERT_LE(1, in.max_pools);
	ASSERT_LE(self->env.base.n_pools + 1, in.n_pools);
	ASSERT_LE(in.n_pools, in.max_pools);
	/* This test holds a pool and three files at least. */
	ASSERT_LE(4, in.n_objects);
	if (kvs_conn_caps(&self->env.ctl) & KVS_CAP_MODULE) {
		ASSERT_EQ(0, in.features & ~(KVS_FEAT_URING_CMD | KVS_FEAT_MEM_FD |
					     KVS_FEAT_DEVICE_MEM));
	} else {
		/* kvshared says so, and carries no io_uring. */
		ASSERT_EQ(KVS_FEAT_DAEMON, in.features & KVS_FEAT_DAEMON);
		ASSERT_EQ(0, in.features & ~(KVS_FEAT_MEM_FD | KVS_FEAT_DAEMON |
					     KVS_FEAT_DEVICE_MEM));
	}
	ASSERT_EQ(0, in.flags);
	ASSERT_EQ(0, in.pad);
	for (i = 0; i < 4; i++)
		ASSERT_EQ(0, in.reserved[i]);
	/* INFO needs no attachment and works on an attached file too. */
	ASSERT_EQ(0, kvs_info(self->a, &in));
	ASSERT_EQ(KVS_ABI_VERSION, in.abi_version);
	ARB_END();
}

TEST_F(arb, files_are_objects)
{
	struct kvs_info i0, i1, i2;
	struct kvs_conn *c;

	ARB_BEGIN();
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &i0));
	c = kvs_env_open(_metadata, &self->env);
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &i1));
	ASSERT_LT(i0.n_objects, i1.n_objects);
	ASSERT_EQ(0, kvs_attach(c, self->name, 7, 0, NULL));
	kvs_conn_close(c);
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &i2));
	ASSERT_EQ(i0.n_objects, i2.n_objects);
	ASSERT_EQ(i0.n_pools, i2.n_pools);
	ARB_END();
}

TEST_F(arb, create_geometry_dtypes)
{
	static const struct { __u32 dtype, size; } dt[] = {
		{ KVS_DTYPE_F16, 2 }, { KVS_DTYPE_BF16, 2 },
		{ KVS_DTYPE_F32, 4 }, { KVS_DTYPE_FP8, 1 },
	};
	__u32 ids[KVS_ARRAY_SIZE(dt)];
	unsigned int i, j;

	ARB_BEGIN();
	for (i = 0; i < KVS_ARRAY_SIZE(dt); i++) {
		struct kvs_pool_create pc;
		struct kvs_pool_attach at;
		struct kvs_conn *c;

		kvs_pool_args(&pc, "", 5);
		pc.geom.n_layers = 3;
		pc.geom.n_kv_heads = 5;
		pc.geom.head_dim = 7;
		pc.geom.tokens_per_page = 11;
		pc.geom.dtype = dt[i].dtype;
		kvs_env_create(_metadata, &self->env, &pc, "dt");
		ASSERT_EQ(2ull * 3 * 5 * 7 * 11 * dt[i].size, pc.geom.page_bytes);
		ASSERT_NE(0, pc.pool_id);
		ASSERT_NE(self->pool, pc.pool_id);
		ids[i] = pc.pool_id;
		for (j = 0; j < i; j++)
			ASSERT_NE(ids[j], ids[i]);

		c = kvs_env_open(_metadata, &self->env);
		ASSERT_EQ(0, kvs_attach(c, pc.name, 0, 0, &at));
		ASSERT_EQ(pc.pool_id, at.pool_id);
		ASSERT_EQ(0, memcmp(&pc.geom, &at.geom, sizeof(at.geom)));
		kvs_conn_close(c);
	}
	/* The largest page allowed: exactly 1 GiB. */
	{
		struct kvs_pool_create pc;

		kvs_pool_args(&pc, "", 1);
		pc.geom.n_layers = 1;
		pc.geom.n_kv_heads = 1;
		pc.geom.head_dim = 65536;
		pc.geom.tokens_per_page = 4096;
		pc.geom.dtype = KVS_DTYPE_F16;
		kvs_env_create(_metadata, &self->env, &pc, "1g");
		ASSERT_EQ(1ull << 30, pc.geom.page_bytes);
	}
	ARB_END();
}

TEST_F(arb, create_list_describes_pool)
{
	struct kvs_pool_create pc;
	struct kvs_pool_desc d[KVS_ENV_POOLS + 8];
	struct kvs_pool_attach at;
	struct kvs_conn *c;
	__u32 n, i, found = 0;

	ARB_BEGIN();
	kvs_pool_args(&pc, "", 10);
	pc.mode = 0640;
	pc.max_pages_per_file = 3;
	kvs_env_create(_metadata, &self->env, &pc, "list");

	c = kvs_env_open(_metadata, &self->env);
	ASSERT_EQ(0, kvs_attach(c, pc.name, 0, 0, &at));
	ASSERT_EQ(3, at.max_pages_per_file);
	ASSERT_EQ(10, at.n_pages);
	ASSERT_EQ(-1, at.mem_fd);

	ASSERT_EQ(0, kvs_pool_list(&self->env.ctl, d, KVS_ARRAY_SIZE(d), &n));
	ASSERT_LE(n, KVS_ARRAY_SIZE(d));
	for (i = 0; i < n; i++) {
		if (d[i].pool_id == pc.pool_id) {
			found++;
			ASSERT_EQ(0, strcmp(pc.name, d[i].name));
			ASSERT_EQ(0640, d[i].mode);
			ASSERT_EQ(geteuid(), d[i].uid);
			ASSERT_EQ(getegid(), d[i].gid);
			ASSERT_EQ(10, d[i].n_pages);
			ASSERT_EQ(0, memcmp(&pc.geom, &d[i].geom, sizeof(pc.geom)));
			ASSERT_EQ(0, d[i].flags);
			ASSERT_EQ(1, d[i].n_files);
			ASSERT_EQ(3, d[i].max_pages_per_file);
			ASSERT_EQ(0, d[i].has_mem_fd);
		}
		if (d[i].pool_id == self->pool) {
			found++;
			ASSERT_EQ(2, d[i].n_files);
			/* Quota 0 at creation means n_pages. */
			ASSERT_EQ(ARB_PAGES, d[i].max_pages_per_file);
			ASSERT_EQ(0600, d[i].mode);
		}
	}
	ASSERT_EQ(2, found);
	ARB_END();
}

TEST_F(arb, create_duplicate_name_eexist)
{
	struct kvs_pool_create pc;
	struct kvs_info i0, i1;

	ARB_BEGIN();
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &i0));
	kvs_pool_args(&pc, self->name, 8);
	ASSERT_EQ(-EEXIST, kvs_pool_create(&self->env.ctl, &pc));
	/* Another file, another geometry: the name alone decides. */
	kvs_pool_args(&pc, self->name, ARB_PAGES);
	pc.geom.dtype = KVS_DTYPE_F32;
	ASSERT_EQ(-EEXIST, kvs_pool_create(self->a, &pc));
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &i1));
	ASSERT_EQ(i0.n_pools, i1.n_pools);
	ASSERT_EQ(i0.n_objects, i1.n_objects);
	ARB_END();
}

TEST_F(arb, max_pools_enospc)
{
	struct kvs_pool_create pc;
	struct kvs_info in;
	__u32 room, i, last = 0;

	ARB_BEGIN();
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &in));
	room = in.max_pools - in.n_pools;
	if (room > KVS_ENV_POOLS - 4)
		SKIP(return, "max_pools %u too large for this test", in.max_pools);
	for (i = 0; i < room; i++) {
		kvs_pool_args(&pc, "", 1);
		kvs_env_create(_metadata, &self->env, &pc, "max");
		last = pc.pool_id;
	}
	kvs_pool_args(&pc, "", 1);
	kvs_env_name(&self->env, pc.name, "over");
	ASSERT_EQ(-ENOSPC, kvs_pool_create(&self->env.ctl, &pc));
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &in));
	ASSERT_EQ(in.max_pools, in.n_pools);
	/* One destroyed makes room for one. */
	if (last) {
		kvs_env_destroy(_metadata, &self->env, last);
		kvs_env_create(_metadata, &self->env, &pc, "over");
	}
	ARB_END();
}

TEST_F(arb, attach_reports_pool)
{
	struct kvs_pool_attach at;
	struct kvs_geometry g;
	struct kvs_pool_stats st;
	struct kvs_conn *c;

	ARB_BEGIN();
	c = kvs_env_open(_metadata, &self->env);
	ASSERT_EQ(0, kvs_attach(c, self->name, 42, 0, &at));
	ASSERT_EQ(self->pool, at.pool_id);
	ASSERT_EQ(ARB_PAGES, at.n_pages);
	ASSERT_EQ(ARB_PAGES, at.max_pages_per_file);
	ASSERT_EQ(-1, at.mem_fd);
	kvs_geom_default(&g);
	g.page_bytes = KVS_T_PAGE_BYTES;
	ASSERT_EQ(0, memcmp(&g, &at.geom, sizeof(g)));
	ASSERT_EQ(42, at.ns);
	STATS(c, &st);
	ASSERT_EQ(3, st.n_files);
	ASSERT_EQ(ARB_PAGES, st.n_pages);
	ASSERT_EQ(ARB_PAGES, st.n_free);
	ARB_END();
}

TEST_F(arb, attach_twice_ebusy)
{
	struct kvs_pool_stats st0, st1;
	char other[KVS_NAME_MAX];

	ARB_BEGIN();
	kvs_env_pool(_metadata, &self->env, 4, 0, other);
	STATS(self->a, &st0);
	ASSERT_EQ(-EBUSY, kvs_attach(self->a, self->name, ARB_NS, 0, NULL));
	ASSERT_EQ(-EBUSY, kvs_attach(self->a, other, 0, 0, NULL));
	STATS(self->a, &st1);
	kvs_assert_same_state(_metadata, &st0, &st1);
	ASSERT_EQ(ARB_PAGES, st1.n_pages);	/* still the first pool */
	ARB_END();
}

TEST_F(arb, attach_missing_enoent_then_ok)
{
	struct kvs_pool_attach at;
	char missing[KVS_NAME_MAX];
	struct kvs_conn *c;

	ARB_BEGIN();
	kvs_env_name(&self->env, missing, "missing");
	c = kvs_env_open(_metadata, &self->env);
	ASSERT_EQ(-ENOENT, kvs_attach(c, missing, 0, 0, NULL));
	/* The failed ATTACH left the file unattached. */
	ASSERT_EQ(-EBADFD, kvs_alloc(c, 1, (__u32[1]){ 0 }));
	ASSERT_EQ(0, kvs_attach(c, self->name, 0, 0, &at));
	ASSERT_EQ(self->pool, at.pool_id);
	ARB_END();
}

TEST_F(arb, unattached_ebadfd)
{
	struct kvs_publish_entry e;
	struct kvs_key k = make_key(1, 0);
	struct kvs_pool_stats st;
	struct kvs_page_desc d;
	struct kvs_quota q;
	struct kvs_info in;
	__u32 pages[2] = { 0, 1 }, n;
	struct kvs_conn *c;

	ARB_BEGIN();
	c = kvs_env_open(_metadata, &self->env);
	memset(&e, 0, sizeof(e));
	e.page = 0;
	e.parent = KVS_NO_PAGE;
	e.key = k;
	ASSERT_EQ(-EBADFD, kvs_alloc(c, 1, pages));
	ASSERT_EQ(-EBADFD, kvs_publish(c, &e, 1, NULL));
	ASSERT_EQ(-EBADFD, kvs_lookup(c, &k, 1, pages, &n));
	ASSERT_EQ(-EBADFD, kvs_put(c, pages, 1));
	ASSERT_EQ(-EBADFD, kvs_quota_get(c, &q));
	ASSERT_EQ(-EBADFD, kvs_quota_set(c, 1));
	ASSERT_EQ(-EBADFD, kvs_stats(c, 0, 0, &st));
	ASSERT_EQ(-EBADFD, kvs_pages(c, 0, 0, 1, &d, &n));
	/* What needs no pool works. */
	ASSERT_EQ(0, kvs_info(c, &in));
	ASSERT_EQ(0, kvs_stats(c, self->pool, 0, &st));
	ASSERT_EQ(2, st.n_files);
	ARB_END();
}

TEST_F(arb, mem_fd_pool)
{
	struct kvs_pool_create pc;
	struct kvs_pool_attach at;
	struct kvs_pool_desc d[KVS_ENV_POOLS + 8];
	struct kvs_info in;
	struct stat s0, s1;
	struct kvs_conn *c, *c2, *c3;
	int mfd, bad, flags;
	__u32 n, i, seen = 0;

	ARB_BEGIN();
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &in));
	if (!(in.features & KVS_FEAT_MEM_FD))
		SKIP(return, "arbiter without KVS_FEAT_MEM_FD");
	mfd = kvs_pool_memfd(4);
	ASSERT_LE(0, mfd);
	ASSERT_EQ(0, fstat(mfd, &s0));

	kvs_pool_args(&pc, "", 4);
	pc.mem_fd = mfd;
	kvs_env_create(_metadata, &self->env, &pc, "mem");
	/* mem_fd is an input: it comes back as it was given. */
	ASSERT_EQ(mfd, pc.mem_fd);
	/* The arbiter keeps the file, not our descriptor. */
	close(mfd);

	ASSERT_EQ(0, kvs_pool_list(&self->env.ctl, d, KVS_ARRAY_SIZE(d), &n));
	for (i = 0; i < n && i < KVS_ARRAY_SIZE(d); i++) {
		if (d[i].pool_id == pc.pool_id) {
			ASSERT_EQ(1, d[i].has_mem_fd);
			seen++;
		}
		if (d[i].pool_id == self->pool) {
			ASSERT_EQ(0, d[i].has_mem_fd);
			seen++;
		}
	}
	ASSERT_EQ(2, seen);

	c = kvs_env_open(_metadata, &self->env);
	ASSERT_EQ(0, kvs_attach(c, pc.name, 0, KVS_ATTACH_MEM_FD, &at));
	ASSERT_LE(0, at.mem_fd);
	flags = fcntl(at.mem_fd, F_GETFD);
	ASSERT_LE(0, flags);
	ASSERT_TRUE(flags & FD_CLOEXEC);
	ASSERT_EQ(0, fstat(at.mem_fd, &s1));
	ASSERT_EQ(s0.st_ino, s1.st_ino);
	ASSERT_EQ(s0.st_dev, s1.st_dev);
	ASSERT_EQ(4 * KVS_T_PAGE_BYTES, (unsigned long long)s1.st_size);
	close(at.mem_fd);

	/* Without the flag no fd is installed. */
	c2 = kvs_env_open(_metadata, &self->env);
	ASSERT_EQ(0, kvs_attach(c2, pc.name, 0, 0, &at));
	ASSERT_EQ(-1, at.mem_fd);

	/* A pool without memory: ENODATA, and the file stays unattached. */
	c3 = kvs_env_open(_metadata, &self->env);
	ASSERT_EQ(-ENODATA, kvs_attach(c3, self->name, 0, KVS_ATTACH_MEM_FD, NULL));
	ASSERT_EQ(0, kvs_attach(c3, self->name, 0, 0, &at));
	ASSERT_EQ(-1, at.mem_fd);

	/* An fd number that is not open. */
	for (bad = 900; fcntl(bad, F_GETFD) >= 0; bad++)
		;
	kvs_pool_args(&pc, "", 4);
	kvs_env_name(&self->env, pc.name, "badfd");
	pc.mem_fd = bad;
	ASSERT_EQ(-EBADF, kvs_pool_create(&self->env.ctl, &pc));
	ARB_END();
}

/* CREATE of a KVS_POOL_DEVICE_MEM pool named @tag with memory @fd. */
static int dev_create(struct kvs_env *e, const char *tag, int fd, struct kvs_pool_create *pc)
{
	kvs_pool_args(pc, "", 4);
	kvs_env_name(e, pc->name, tag);
	pc->flags = KVS_POOL_DEVICE_MEM;
	pc->mem_fd = fd;
	return kvs_pool_create(&e->ctl, pc);
}

/*
 * Device memory (KVS_POOL_DEVICE_MEM): a driver's handle, taken by
 * exclusion.  Never a socket, a directory, a regular file that is not a
 * memfd, this arbiter's own file or an io_uring file; a memfd only under
 * the host rules; anything else (a character device here) is kept and
 * handed to attachers, who learn the kind from pool_flags.
 */
TEST_F(arb, device_mem_pool)
{
	struct kvs_pool_create pc;
	struct kvs_pool_attach at;
	struct stat s0, s1;
	struct kvs_info in;
	struct kvs_conn *c;
	int fd, sv[2];

	ARB_BEGIN();
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &in));
	if (!(in.features & KVS_FEAT_DEVICE_MEM))
		SKIP(return, "arbiter without KVS_FEAT_DEVICE_MEM");
	EXPECT_EQ(-EINVAL, dev_create(&self->env, "none", -1, &pc));
	ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	EXPECT_EQ(-EINVAL, dev_create(&self->env, "sock", sv[0], &pc));
	close(sv[0]);
	close(sv[1]);
	fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ASSERT_LE(0, fd);
	EXPECT_EQ(-EINVAL, dev_create(&self->env, "dir", fd, &pc));
	close(fd);
	/* A file of a mounted tmpfs is no memfd. */
	fd = open("/tmp", O_RDWR | O_TMPFILE | O_CLOEXEC, 0600);
	if (fd >= 0) {
		ASSERT_EQ(0, ftruncate(fd, 4 * KVS_T_PAGE_BYTES));
		EXPECT_EQ(-EINVAL, dev_create(&self->env, "file", fd, &pc));
		close(fd);
	}
	fd = kvs_memfd("kvs-test", 4 * KVS_T_PAGE_BYTES, 0);
	ASSERT_LE(0, fd);
	EXPECT_EQ(-EPERM, dev_create(&self->env, "unsealed", fd, &pc));
	close(fd);
	fd = kvs_memfd("kvs-test", 2 * KVS_T_PAGE_BYTES, KVS_T_SEALS);
	ASSERT_LE(0, fd);
	EXPECT_EQ(-ERANGE, dev_create(&self->env, "short", fd, &pc));
	close(fd);
	fd = kvs_pool_memfd(4);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, dev_create(&self->env, "memfd", fd, &pc));
	kvs_env_track(_metadata, &self->env, pc.pool_id);
	close(fd);
	if (kvs_conn_caps(&self->env.ctl) & KVS_CAP_MODULE) {
		struct { __u32 sq, cq, flags, sq_thread_cpu, sq_thread_idle, features,
			 wq_fd, resv[3]; __u64 off[10]; } params;

		/* A pool holding the arbiter's own file: a reference cycle. */
		EXPECT_EQ(-EINVAL, dev_create(&self->env, "self", self->env.ctl.fd, &pc));
		memset(&params, 0, sizeof(params));
		fd = syscall(425 /* __NR_io_uring_setup */, 4, &params);
		if (fd >= 0) {
			EXPECT_EQ(-EINVAL, dev_create(&self->env, "uring", fd, &pc));
			close(fd);
		}
	}
	/* Anything else is the driver's business: a character device. */
	fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, fstat(fd, &s0));
	ASSERT_EQ(0, dev_create(&self->env, "chr", fd, &pc));
	kvs_env_track(_metadata, &self->env, pc.pool_id);
	close(fd);
	c = kvs_env_open(_metadata, &self->env);
	ASSERT_EQ(0, kvs_attach(c, pc.name, 0, KVS_ATTACH_MEM_FD, &at));
	EXPECT_EQ(KVS_POOL_DEVICE_MEM, at.pool_flags & KVS_POOL_DEVICE_MEM);
	ASSERT_LE(0, at.mem_fd);
	ASSERT_EQ(0, fstat(at.mem_fd, &s1));
	EXPECT_EQ(s0.st_rdev, s1.st_rdev);
	close(at.mem_fd);
	/* Without the flag the host rules still refuse it. */
	fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	kvs_pool_args(&pc, "", 4);
	kvs_env_name(&self->env, pc.name, "chr-host");
	pc.mem_fd = fd;
	EXPECT_EQ(-EINVAL, kvs_pool_create(&self->env.ctl, &pc));
	close(fd);
	ARB_END();
}

/*
 * ATTACH with KVS_ATTACH_MEM_FD when no fd is free: EMFILE, and like every
 * failed call it changes nothing: the file is not attached, the pool
 * counts no file, and a later ATTACH works.
 */
TEST_F(arb, mem_fd_attach_emfile_changes_nothing)
{
	struct kvs_pool_create pc;
	struct kvs_pool_attach at;
	struct kvs_pool_stats st;
	struct kvs_info in;
	struct rlimit rl, low;
	struct kvs_conn *c;
	int mfd, fds[64], nfds = 0, lim, ret;
	__u32 p;

	ARB_BEGIN();
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &in));
	if (!(in.features & KVS_FEAT_MEM_FD))
		SKIP(return, "arbiter without KVS_FEAT_MEM_FD");
	/*
	 * Over the daemon's socket the descriptor travels in the reply, after
	 * the daemon attached the connection: a client with no descriptor
	 * free cannot be left unattached, only told (by libkv).
	 */
	if (!(kvs_conn_caps(&self->env.ctl) & KVS_CAP_MODULE))
		SKIP(return, "daemon: ATTACH is done before its descriptor reaches the client");
	mfd = kvs_pool_memfd(1);
	ASSERT_LE(0, mfd);
	kvs_pool_args(&pc, "", 1);
	pc.mem_fd = mfd;
	kvs_env_create(_metadata, &self->env, &pc, "emfile");
	close(mfd);
	c = kvs_env_open(_metadata, &self->env);

	/* Use up every descriptor below a low limit. */
	ASSERT_EQ(0, getrlimit(RLIMIT_NOFILE, &rl));
	lim = c->fd + 8;
	low = rl;
	low.rlim_cur = lim;
	ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &low));
	for (;;) {
		int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

		if (fd < 0)
			break;
		ASSERT_LT(nfds, 64);
		fds[nfds++] = fd;
	}
	ASSERT_EQ(EMFILE, errno);

	ret = kvs_attach(c, pc.name, 0, KVS_ATTACH_MEM_FD, &at);
	/* Make room again before asserting, so the checks can open files. */
	while (nfds)
		close(fds[--nfds]);
	ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &rl));
	ASSERT_EQ(-EMFILE, ret);
	ASSERT_EQ(0, kvs_stats(&self->env.ctl, pc.pool_id, KVS_STATS_CHECK, &st));
	ASSERT_EQ(0, st.n_files) TH_LOG("the failed ATTACH left the file attached");
	ASSERT_EQ(-EBADFD, kvs_alloc(c, 1, &p));
	ASSERT_EQ(0, kvs_attach(c, pc.name, 0, KVS_ATTACH_MEM_FD, &at));
	ASSERT_LE(0, at.mem_fd);
	close(at.mem_fd);
	ARB_END();
}

TEST_F(arb, alloc_owned_pages)
{
	struct kvs_pool_stats st0, st;
	__u32 p[5];
	int i, j;

	ARB_BEGIN();
	STATS(self->a, &st0);
	ASSERT_EQ(0, kvs_alloc(self->a, 5, p));
	for (i = 0; i < 5; i++) {
		ASSERT_LT(p[i], ARB_PAGES);
		for (j = 0; j < i; j++)
			ASSERT_NE(p[j], p[i]);
		ASSERT_PAGE(self->a, 0, p[i], KVS_PAGE_OWNED, 0);
	}
	STATS(self->a, &st);
	ASSERT_EQ(5, st.n_owned);
	ASSERT_EQ(ARB_PAGES - 5, st.n_free);
	ASSERT_EQ(5, st.n_held);
	ASSERT_EQ(0, st.n_refs);
	ASSERT_EQ(st0.allocs + 5, st.allocs);
	ASSERT_EQ(5, kvs_held(self->a));
	ASSERT_EQ(0, kvs_held(self->b));
	check_invariants(self->a, 0);

	ASSERT_EQ(0, kvs_put(self->a, p, 5));
	for (i = 0; i < 5; i++)
		ASSERT_PAGE(self->a, 0, p[i], KVS_PAGE_FREE, 0);
	STATS(self->a, &st);
	kvs_assert_same_state(_metadata, &st0, &st);
	ASSERT_EQ(0, kvs_held(self->a));
	ARB_END();
}

TEST_F(arb, alloc_all_then_enospc)
{
	struct kvs_pool_stats st0, st;
	__u32 p[ARB_PAGES], one;

	ARB_BEGIN();
	STATS(self->a, &st0);
	ASSERT_EQ(0, kvs_alloc(self->a, ARB_PAGES, p));
	/* a is at its quota (n_pages) as well: EDQUOT, not a lack of pages. */
	ASSERT_EQ(-EDQUOT, kvs_alloc(self->a, 1, &one));
	ASSERT_EQ(-ENOSPC, kvs_alloc(self->b, 1, &one));
	ASSERT_EQ(-ENOSPC, kvs_alloc(self->b, 1, &one));
	STATS(self->a, &st);
	ASSERT_EQ(st0.alloc_fails + 2, st.alloc_fails);
	ASSERT_EQ(st0.allocs + ARB_PAGES, st.allocs);
	ASSERT_EQ(0, st.n_free);
	ASSERT_EQ(ARB_PAGES, st.n_owned);
	check_invariants(self->a, 0);
	ASSERT_EQ(0, kvs_put(self->a, p, ARB_PAGES));
	ASSERT_EQ(0, kvs_alloc(self->b, 1, &one));
	ASSERT_EQ(0, kvs_put1(self->b, one));
	ARB_END();
}

TEST_F(arb, alloc_all_or_nothing)
{
	struct kvs_pool_stats st;
	__u32 p[ARB_PAGES], q[3] = { 0xdead, 0xdead, 0xdead };

	ARB_BEGIN();
	ASSERT_EQ(0, kvs_alloc(self->a, ARB_PAGES - 2, p));
	ASSERT_EQ(-ENOSPC, kvs_alloc(self->b, 3, q));
	STATS(self->a, &st);
	ASSERT_EQ(ARB_PAGES - 2, st.n_owned);
	ASSERT_EQ(2, st.n_free);
	ASSERT_EQ(0, kvs_held(self->b));
	ASSERT_EQ(0, kvs_alloc(self->b, 2, q));
	ASSERT_EQ(2, kvs_held(self->b));
	check_invariants(self->a, 0);
	ARB_END();
}

TEST_F(arb, publish_chain_shared)
{
	struct kvs_pool_stats st0, st;
	struct kvs_page_desc d;
	__u32 p[4];
	int i;

	ARB_BEGIN();
	STATS(self->a, &st0);
	publish_new_chain(_metadata, self->a, 1, 4, p);
	for (i = 0; i < 4; i++) {
		struct kvs_key k = make_key(1, i);

		ASSERT_EQ(0, kvs_page(self->a, 0, p[i], &d));
		ASSERT_EQ(KVS_PAGE_SHARED, d.state);
		ASSERT_EQ(1, d.refcount);
		ASSERT_EQ(i ? p[i - 1] : KVS_NO_PAGE, d.parent);
		ASSERT_EQ(i < 3 ? 1 : 0, d.n_children);
		ASSERT_EQ(ARB_NS, d.ns);
		ASSERT_TRUE(kvs_key_eq(&k, &d.key));
	}
	STATS(self->a, &st);
	ASSERT_EQ(4, st.n_shared);
	ASSERT_EQ(0, st.n_owned);
	ASSERT_EQ(4, st.n_refs);
	ASSERT_EQ(4, st.n_held);
	ASSERT_EQ(st0.publishes + 4, st.publishes);
	ASSERT_EQ(st0.dup_publishes, st.dup_publishes);
	ASSERT_EQ(4, kvs_held(self->a));
	check_invariants(self->a, 0);
	ARB_END();
}

TEST_F(arb, put_last_ref_caches)
{
	struct kvs_pool_stats st;
	__u32 p[4], q[4], n;
	int i;

	ARB_BEGIN();
	publish_new_chain(_metadata, self->a, 2, 4, p);
	ASSERT_EQ(0, kvs_put(self->a, p, 4));
	for (i = 0; i < 4; i++)
		ASSERT_PAGE(self->a, 0, p[i], KVS_PAGE_CACHED, 0);
	STATS(self->a, &st);
	ASSERT_EQ(4, st.n_cached);
	ASSERT_EQ(0, st.n_shared);
	ASSERT_EQ(1, st.n_evictable);	/* the leaf only */
	ASSERT_EQ(0, st.n_held);
	ASSERT_EQ(0, st.n_refs);
	check_invariants(self->a, 0);

	/* Still findable by anyone in the namespace. */
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 2, 0, 4, q, &n));
	ASSERT_EQ(4, n);
	for (i = 0; i < 4; i++) {
		ASSERT_EQ(p[i], q[i]);
		ASSERT_PAGE(self->b, 0, p[i], KVS_PAGE_SHARED, 1);
	}
	ASSERT_EQ(0, kvs_put(self->b, q, 4));
	ARB_END();
}

TEST_F(arb, publish_parent_held_ref)
{
	struct kvs_publish_entry e;
	struct kvs_pool_stats st;
	struct kvs_page_desc d;
	__u32 r, q, hit[2], n;

	ARB_BEGIN();
	publish_new_chain(_metadata, self->a, 3, 1, &r);
	/* b finds a's root and extends the chain below it. */
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 3, 0, 2, hit, &n));
	ASSERT_EQ(1, n);
	ASSERT_EQ(r, hit[0]);
	ASSERT_EQ(0, kvs_alloc(self->b, 1, &q));
	memset(&e, 0, sizeof(e));
	e.page = q;
	e.parent = r;
	e.key = make_key(3, 1);
	ASSERT_EQ(0, kvs_publish(self->b, &e, 1, &n));
	ASSERT_EQ(0, n);
	ASSERT_EQ(q, e.result);
	ASSERT_EQ(0, e.flags);
	ASSERT_EQ(0, kvs_page(self->a, 0, q, &d));
	ASSERT_EQ(r, d.parent);
	ASSERT_EQ(KVS_PAGE_SHARED, d.state);
	ASSERT_EQ(0, kvs_page(self->a, 0, r, &d));
	ASSERT_EQ(1, d.n_children);
	ASSERT_EQ(2, d.refcount);
	check_invariants(self->a, 0);

	/* Everything cached: the root keeps its child, only q is evictable. */
	ASSERT_EQ(0, kvs_put(self->b, (__u32[]){ r, q }, 2));
	ASSERT_EQ(0, kvs_put1(self->a, r));
	ASSERT_EQ(0, kvs_page(self->a, 0, r, &d));
	ASSERT_EQ(KVS_PAGE_CACHED, d.state);
	ASSERT_EQ(1, d.n_children);
	STATS(self->a, &st);
	ASSERT_EQ(2, st.n_cached);
	ASSERT_EQ(1, st.n_evictable);
	ARB_END();
}

TEST_F(arb, publish_parent_not_held_enoent)
{
	struct kvs_publish_entry e;
	struct kvs_pool_stats st0, st;
	__u32 r, q[2], n;
	__u32 bad_parents[4];
	unsigned int i;

	ARB_BEGIN();
	publish_new_chain(_metadata, self->a, 4, 1, &r);
	ASSERT_EQ(0, kvs_alloc(self->b, 2, q));
	bad_parents[0] = r;		/* SHARED, but held by a only */
	bad_parents[1] = q[1];		/* b's own OWNED page: not SHARED */
	bad_parents[2] = ARB_PAGES;	/* beyond the pool */
	bad_parents[3] = 0xfffffffdu;	/* no such page */
	STATS(self->b, &st0);
	for (i = 0; i < KVS_ARRAY_SIZE(bad_parents); i++) {
		memset(&e, 0, sizeof(e));
		e.page = q[0];
		e.parent = bad_parents[i];
		e.key = make_key(4, 1);
		ASSERT_EQ(-ENOENT, kvs_publish(self->b, &e, 1, &n))
			TH_LOG("parent %u", bad_parents[i]);
		STATS(self->b, &st);
		kvs_assert_same_state(_metadata, &st0, &st);
		ASSERT_PAGE(self->b, 0, q[0], KVS_PAGE_OWNED, 0);
	}
	/* CACHED and not held by b: still not a parent b may name. */
	ASSERT_EQ(0, kvs_put1(self->a, r));
	memset(&e, 0, sizeof(e));
	e.page = q[0];
	e.parent = r;
	e.key = make_key(4, 1);
	ASSERT_EQ(-ENOENT, kvs_publish(self->b, &e, 1, &n));
	ASSERT_PAGE(self->b, 0, r, KVS_PAGE_CACHED, 0);
	/* As a root it publishes. */
	e.parent = KVS_NO_PAGE;
	ASSERT_EQ(0, kvs_publish(self->b, &e, 1, &n));
	ASSERT_EQ(q[0], e.result);
	ARB_END();
}

TEST_F(arb, publish_duplicate_canonical)
{
	struct kvs_publish_entry e[4];
	struct kvs_pool_stats st0, st;
	__u32 pa[4], pb[4], n_dup = 0;
	int i;

	ARB_BEGIN();
	publish_new_chain(_metadata, self->a, 5, 4, pa);
	ASSERT_EQ(0, kvs_alloc(self->b, 4, pb));
	STATS(self->b, &st0);
	memset(e, 0, sizeof(e));
	for (i = 0; i < 4; i++) {
		e[i].page = pb[i];
		e[i].parent = i ? KVS_PARENT_PREV : KVS_NO_PAGE;
		e[i].key = make_key(5, i);
	}
	ASSERT_EQ(0, kvs_publish(self->b, e, 4, &n_dup));
	ASSERT_EQ(4, n_dup);
	for (i = 0; i < 4; i++) {
		ASSERT_EQ(pa[i], e[i].result);
		ASSERT_EQ(KVS_PUBLISHED_DUP, e[i].flags);
		ASSERT_PAGE(self->b, 0, pb[i], KVS_PAGE_FREE, 0);
		ASSERT_PAGE(self->b, 0, pa[i], KVS_PAGE_SHARED, 2);
	}
	STATS(self->b, &st);
	ASSERT_EQ(st0.publishes + 4, st.publishes);
	ASSERT_EQ(st0.dup_publishes + 4, st.dup_publishes);
	ASSERT_EQ(0, st.n_owned);
	ASSERT_EQ(ARB_PAGES - 4, st.n_free);
	ASSERT_EQ(8, st.n_refs);
	ASSERT_EQ(4, kvs_held(self->b));
	check_invariants(self->b, 0);
	/* b's own pages went back: it holds the canonical ones instead. */
	ASSERT_EQ(-ENOENT, kvs_put1(self->b, pb[0]));
	ASSERT_EQ(0, kvs_put(self->b, pa, 4));
	for (i = 0; i < 4; i++)
		ASSERT_PAGE(self->b, 0, pa[i], KVS_PAGE_SHARED, 1);
	ARB_END();
}

TEST_F(arb, publish_duplicate_of_cached)
{
	struct kvs_pool_stats st0, st;
	__u32 r, q, res, n_dup;

	ARB_BEGIN();
	publish_new_chain(_metadata, self->a, 6, 1, &r);
	ASSERT_EQ(0, kvs_put1(self->a, r));
	STATS(self->a, &st0);
	ASSERT_EQ(1, st0.n_cached);
	ASSERT_EQ(0, kvs_alloc(self->b, 1, &q));
	ASSERT_EQ(0, kvs_publish_chain(self->b, &q, 1, KVS_NO_PAGE, 6, 0, &res, &n_dup));
	ASSERT_EQ(1, n_dup);
	ASSERT_EQ(r, res);
	ASSERT_PAGE(self->b, 0, r, KVS_PAGE_SHARED, 1);
	ASSERT_PAGE(self->b, 0, q, KVS_PAGE_FREE, 0);
	STATS(self->a, &st);
	ASSERT_EQ(0, st.n_cached);
	ASSERT_EQ(1, st.n_shared);
	check_invariants(self->a, 0);
	ARB_END();
}

TEST_F(arb, publish_dup_then_prev_parent)
{
	struct kvs_publish_entry e[2];
	struct kvs_page_desc d;
	__u32 r, q[2], n_dup;

	ARB_BEGIN();
	publish_new_chain(_metadata, self->a, 7, 1, &r);
	ASSERT_EQ(0, kvs_alloc(self->b, 2, q));
	memset(e, 0, sizeof(e));
	e[0].page = q[0];
	e[0].parent = KVS_NO_PAGE;
	e[0].key = make_key(7, 0);
	e[1].page = q[1];
	e[1].parent = KVS_PARENT_PREV;
	e[1].key = make_key(7, 1);
	ASSERT_EQ(0, kvs_publish(self->b, e, 2, &n_dup));
	ASSERT_EQ(1, n_dup);
	ASSERT_EQ(r, e[0].result);
	ASSERT_EQ(KVS_PUBLISHED_DUP, e[0].flags);
	ASSERT_EQ(q[1], e[1].result);
	ASSERT_EQ(0, e[1].flags);
	/* PARENT_PREV is the page entry 0 resulted in: the canonical one. */
	ASSERT_EQ(0, kvs_page(self->b, 0, q[1], &d));
	ASSERT_EQ(r, d.parent);
	ASSERT_EQ(0, kvs_page(self->b, 0, r, &d));
	ASSERT_EQ(1, d.n_children);
	ASSERT_EQ(2, d.refcount);
	check_invariants(self->b, 0);
	ARB_END();
}

TEST_F(arb, publish_same_key_twice_in_batch)
{
	struct kvs_publish_entry e[2];
	__u32 p[2], n_dup;

	ARB_BEGIN();
	ASSERT_EQ(0, kvs_alloc(self->a, 2, p));
	memset(e, 0, sizeof(e));
	e[0].page = p[0];
	e[0].parent = KVS_NO_PAGE;
	e[0].key = make_key(8, 0);
	e[1].page = p[1];
	e[1].parent = KVS_NO_PAGE;
	e[1].key = make_key(8, 0);
	ASSERT_EQ(0, kvs_publish(self->a, e, 2, &n_dup));
	/* Entries apply in order: the second is a duplicate of the first. */
	ASSERT_EQ(1, n_dup);
	ASSERT_EQ(p[0], e[0].result);
	ASSERT_EQ(0, e[0].flags);
	ASSERT_EQ(p[0], e[1].result);
	ASSERT_EQ(KVS_PUBLISHED_DUP, e[1].flags);
	ASSERT_PAGE(self->a, 0, p[0], KVS_PAGE_SHARED, 2);
	ASSERT_PAGE(self->a, 0, p[1], KVS_PAGE_FREE, 0);
	ASSERT_EQ(2, kvs_held(self->a));
	ASSERT_EQ(0, kvs_put(self->a, (__u32[]){ p[0], p[0] }, 2));
	ASSERT_PAGE(self->a, 0, p[0], KVS_PAGE_CACHED, 0);
	ARB_END();
}

TEST_F(arb, lookup_longest_run)
{
	struct kvs_pool_stats st0, st;
	struct kvs_key k[3];
	__u32 pa[4], q[6], n;
	int i;

	ARB_BEGIN();
	publish_new_chain(_metadata, self->a, 9, 4, pa);
	STATS(self->b, &st0);
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 9, 0, 6, q, &n));
	ASSERT_EQ(4, n);
	for (i = 0; i < 4; i++) {
		ASSERT_EQ(pa[i], q[i]);
		ASSERT_PAGE(self->b, 0, pa[i], KVS_PAGE_SHARED, 2);
	}
	STATS(self->b, &st);
	ASSERT_EQ(st0.lookups + 6, st.lookups);
	ASSERT_EQ(st0.hits + 4, st.hits);
	ASSERT_EQ(st0.n_refs + 4, st.n_refs);
	ASSERT_EQ(4, kvs_held(self->b));

	/* The run starts at the first key: a miss there is a miss. */
	k[0] = make_key(9, 100);
	k[1] = make_key(9, 1);
	ASSERT_EQ(0, kvs_lookup(self->b, k, 2, q, &n));
	ASSERT_EQ(0, n);
	/* A gap ends the run. */
	k[0] = make_key(9, 0);
	k[1] = make_key(9, 100);
	k[2] = make_key(9, 2);
	ASSERT_EQ(0, kvs_lookup(self->b, k, 3, q, &n));
	ASSERT_EQ(1, n);
	ASSERT_EQ(pa[0], q[0]);
	ASSERT_EQ(5, kvs_held(self->b));
	ASSERT_PAGE(self->b, 0, pa[0], KVS_PAGE_SHARED, 3);
	ASSERT_PAGE(self->b, 0, pa[2], KVS_PAGE_SHARED, 2);
	check_invariants(self->b, 0);
	ARB_END();
}

/* pages[] is written up to n_hit only: the rest is left as it was. */
TEST_F(arb, lookup_leaves_pages_past_hits)
{
	__u32 pa[2], q[5], n = 77;
	int i;

	ARB_BEGIN();
	publish_new_chain(_metadata, self->a, 15, 2, pa);
	for (i = 0; i < 5; i++)
		q[i] = 0xdead0000u + i;
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 15, 0, 4, q, &n));
	ASSERT_EQ(2, n);
	ASSERT_EQ(pa[0], q[0]);
	ASSERT_EQ(pa[1], q[1]);
	for (i = 2; i < 5; i++) {
		ASSERT_EQ(0xdead0000u + i, q[i]) TH_LOG("pages[%d] written past n_hit", i);
	}
	/* A miss at the first key writes nothing at all. */
	for (i = 0; i < 5; i++)
		q[i] = 0xbeef0000u + i;
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 16, 0, 4, q, &n));
	ASSERT_EQ(0, n);
	for (i = 0; i < 5; i++) {
		ASSERT_EQ(0xbeef0000u + i, q[i]) TH_LOG("pages[%d] written on a miss", i);
	}
	ASSERT_EQ(2, kvs_held(self->b));
	ARB_END();
}

TEST_F(arb, lookup_revives_cached)
{
	struct kvs_pool_stats st;
	__u32 p[3], q[2], n;

	ARB_BEGIN();
	publish_new_chain(_metadata, self->a, 10, 3, p);
	ASSERT_EQ(0, kvs_put(self->a, p, 3));
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 10, 0, 2, q, &n));
	ASSERT_EQ(2, n);
	ASSERT_PAGE(self->b, 0, p[0], KVS_PAGE_SHARED, 1);
	ASSERT_PAGE(self->b, 0, p[1], KVS_PAGE_SHARED, 1);
	ASSERT_PAGE(self->b, 0, p[2], KVS_PAGE_CACHED, 0);
	STATS(self->b, &st);
	ASSERT_EQ(2, st.n_shared);
	ASSERT_EQ(1, st.n_cached);
	ASSERT_EQ(1, st.n_evictable);
	ASSERT_EQ(2, st.n_refs);
	check_invariants(self->b, 0);
	ARB_END();
}

TEST_F(arb, lookup_same_file_twice_refs)
{
	__u32 p, q, n;

	ARB_BEGIN();
	publish_new_chain(_metadata, self->a, 11, 1, &p);
	ASSERT_EQ(0, kvs_lookup_chain(self->a, 11, 0, 1, &q, &n));
	ASSERT_EQ(1, n);
	ASSERT_EQ(p, q);
	ASSERT_PAGE(self->a, 0, p, KVS_PAGE_SHARED, 2);
	ASSERT_EQ(2, kvs_held(self->a));
	ASSERT_EQ(-ENOENT, kvs_put(self->a, (__u32[]){ p, p, p }, 3));
	ASSERT_PAGE(self->a, 0, p, KVS_PAGE_SHARED, 2);
	ASSERT_EQ(0, kvs_put(self->a, (__u32[]){ p, p }, 2));
	ASSERT_PAGE(self->a, 0, p, KVS_PAGE_CACHED, 0);
	ASSERT_EQ(-ENOENT, kvs_put1(self->a, p));
	ARB_END();
}

TEST_F(arb, put_semantics)
{
	struct kvs_pool_stats st0, st;
	__u32 o, s, q, n;

	ARB_BEGIN();
	ASSERT_EQ(0, kvs_alloc(self->a, 1, &o));
	publish_new_chain(_metadata, self->a, 12, 1, &s);
	STATS(self->a, &st0);
	/* One bad page fails the whole PUT. */
	ASSERT_EQ(-ENOENT, kvs_put(self->a, (__u32[]){ o, ARB_PAGES + 5 }, 2));
	ASSERT_EQ(-ENOENT, kvs_put(self->a, (__u32[]){ s, s }, 2));
	ASSERT_EQ(-ENOENT, kvs_put(self->a, (__u32[]){ o, o }, 2));
	STATS(self->a, &st);
	kvs_assert_same_state(_metadata, &st0, &st);
	ASSERT_PAGE(self->a, 0, o, KVS_PAGE_OWNED, 0);
	ASSERT_PAGE(self->a, 0, s, KVS_PAGE_SHARED, 1);

	/* A reference dropped while another file holds one: still SHARED. */
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 12, 0, 1, &q, &n));
	ASSERT_EQ(1, n);
	ASSERT_PAGE(self->a, 0, s, KVS_PAGE_SHARED, 2);
	ASSERT_EQ(0, kvs_put1(self->a, s));
	ASSERT_PAGE(self->a, 0, s, KVS_PAGE_SHARED, 1);
	ASSERT_EQ(-ENOENT, kvs_put1(self->a, s));
	ASSERT_EQ(0, kvs_put1(self->b, s));
	ASSERT_PAGE(self->a, 0, s, KVS_PAGE_CACHED, 0);
	/* An OWNED page goes straight back to FREE, and only once. */
	ASSERT_EQ(0, kvs_put1(self->a, o));
	ASSERT_PAGE(self->a, 0, o, KVS_PAGE_FREE, 0);
	ASSERT_EQ(-ENOENT, kvs_put1(self->a, o));
	ASSERT_EQ(0, kvs_held(self->a));
	ASSERT_EQ(0, kvs_held(self->b));
	ARB_END();
}

/* One page through every edge of the state table, checked each step. */
TEST_F(arb, state_machine_walk)
{
	struct kvs_pool_stats st0, st;
	__u32 p, q, n, fill[ARB_PAGES], nf, extra;

	ARB_BEGIN();
	/* FREE -> OWNED -> FREE */
	ASSERT_EQ(0, kvs_alloc(self->a, 1, &p));
	ASSERT_PAGE(self->a, 0, p, KVS_PAGE_OWNED, 0);
	check_invariants(self->a, 0);
	ASSERT_EQ(0, kvs_put1(self->a, p));
	ASSERT_PAGE(self->a, 0, p, KVS_PAGE_FREE, 0);
	check_invariants(self->a, 0);

	/* FREE -> OWNED -> SHARED(1) */
	ASSERT_EQ(0, kvs_alloc(self->a, 1, &p));
	ASSERT_EQ(0, kvs_publish_chain(self->a, &p, 1, KVS_NO_PAGE, 13, 0, &q, &n));
	ASSERT_EQ(p, q);
	ASSERT_PAGE(self->a, 0, p, KVS_PAGE_SHARED, 1);
	check_invariants(self->a, 0);
	/* SHARED(1) -> SHARED(2) by LOOKUP, back to 1 by PUT */
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 13, 0, 1, &q, &n));
	ASSERT_EQ(1, n);
	ASSERT_PAGE(self->a, 0, p, KVS_PAGE_SHARED, 2);
	ASSERT_EQ(0, kvs_put1(self->a, p));
	ASSERT_PAGE(self->a, 0, p, KVS_PAGE_SHARED, 1);
	check_invariants(self->a, 0);
	/* last PUT: SHARED -> CACHED */
	ASSERT_EQ(0, kvs_put1(self->b, p));
	ASSERT_PAGE(self->a, 0, p, KVS_PAGE_CACHED, 0);
	check_invariants(self->a, 0);
	/* LOOKUP hit: CACHED -> SHARED, and back */
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 13, 0, 1, &q, &n));
	ASSERT_EQ(1, n);
	ASSERT_EQ(p, q);
	ASSERT_PAGE(self->a, 0, p, KVS_PAGE_SHARED, 1);
	ASSERT_EQ(0, kvs_put1(self->b, p));
	ASSERT_PAGE(self->a, 0, p, KVS_PAGE_CACHED, 0);
	check_invariants(self->a, 0);

	/* eviction: CACHED -> FREE when ALLOC runs out of FREE pages */
	STATS(self->a, &st0);
	nf = fill_free(_metadata, self->a, fill);
	ASSERT_EQ(ARB_PAGES - 1, nf);
	ASSERT_EQ(0, kvs_alloc(self->a, 1, &extra));
	ASSERT_EQ(p, extra);		/* the only page it could take */
	STATS(self->a, &st);
	ASSERT_EQ(st0.evictions + 1, st.evictions);
	ASSERT_EQ(0, st.n_cached);
	ASSERT_EQ(ARB_PAGES, st.n_owned);
	check_invariants(self->a, 0);
	/* The key went with it. */
	ASSERT_EQ(0, kvs_put(self->a, fill, nf));
	ASSERT_EQ(0, kvs_put1(self->a, extra));
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 13, 0, 1, &q, &n));
	ASSERT_EQ(0, n);

	/* OWNED -> FREE through a duplicate PUBLISH */
	publish_new_chain(_metadata, self->a, 14, 1, &p);
	ASSERT_EQ(0, kvs_alloc(self->b, 1, &q));
	ASSERT_EQ(0, kvs_publish_chain(self->b, &q, 1, KVS_NO_PAGE, 14, 0, &extra, &n));
	ASSERT_EQ(1, n);
	ASSERT_EQ(p, extra);
	ASSERT_PAGE(self->a, 0, q, KVS_PAGE_FREE, 0);
	ASSERT_PAGE(self->a, 0, p, KVS_PAGE_SHARED, 2);
	check_invariants(self->a, 0);
	ARB_END();
}

TEST_F(arb, evict_lru_order)
{
	struct kvs_pool_stats st0, st;
	__u32 x, y, z, q, n, fill[ARB_PAGES], nf, e1, e2, e3, e4;

	ARB_BEGIN();
	publish_new_chain(_metadata, self->a, 20, 1, &x);
	publish_new_chain(_metadata, self->a, 21, 1, &y);
	publish_new_chain(_metadata, self->a, 22, 1, &z);
	ASSERT_EQ(0, kvs_put1(self->a, x));
	ASSERT_EQ(0, kvs_put1(self->a, y));
	ASSERT_EQ(0, kvs_put1(self->a, z));
	/* Use x again: y is now the least recently used. */
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 20, 0, 1, &q, &n));
	ASSERT_EQ(1, n);
	ASSERT_EQ(0, kvs_put1(self->b, x));
	STATS(self->a, &st0);
	ASSERT_EQ(3, st0.n_evictable);

	nf = fill_free(_metadata, self->a, fill);
	ASSERT_EQ(ARB_PAGES - 3, nf);
	STATS(self->a, &st);
	ASSERT_EQ(st0.evictions, st.evictions);	/* FREE pages first */

	ASSERT_EQ(0, kvs_alloc(self->a, 1, &e1));
	ASSERT_NE(KVS_PAGE_CACHED, kvs_page_state(self->a, 0, y));
	ASSERT_EQ(KVS_PAGE_CACHED, kvs_page_state(self->a, 0, x));
	ASSERT_EQ(KVS_PAGE_CACHED, kvs_page_state(self->a, 0, z));
	ASSERT_EQ(0, kvs_alloc(self->a, 1, &e2));
	ASSERT_NE(KVS_PAGE_CACHED, kvs_page_state(self->a, 0, z));
	ASSERT_EQ(KVS_PAGE_CACHED, kvs_page_state(self->a, 0, x));
	ASSERT_EQ(0, kvs_alloc(self->a, 1, &e3));
	ASSERT_NE(KVS_PAGE_CACHED, kvs_page_state(self->a, 0, x));
	ASSERT_EQ(-ENOSPC, kvs_alloc(self->b, 1, &e4));
	STATS(self->a, &st);
	ASSERT_EQ(st0.evictions + 3, st.evictions);
	ASSERT_EQ(st0.alloc_fails + 1, st.alloc_fails);
	ASSERT_EQ(ARB_PAGES, st.n_owned);
	check_invariants(self->a, 0);
	/* Evicted keys are gone for everyone. */
	ASSERT_EQ(0, kvs_put(self->a, fill, nf));
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 21, 0, 1, &q, &n));
	ASSERT_EQ(0, n);
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 20, 0, 1, &q, &n));
	ASSERT_EQ(0, n);
	ARB_END();
}

/* KVS_LOOKUP_PEEK of @count keys: 0 and the run in *@n, or -errno. */
static int peek_keys(struct kvs_conn *c, const struct kvs_key *keys, __u32 count,
		     __u32 flags, __u64 pages, __u32 *n)
{
	struct kvs_lookup l;
	int ret;

	memset(&l, 0, sizeof(l));
	l.count = count;
	l.flags = KVS_LOOKUP_PEEK | flags;
	l.keys = KVS_PTR(keys);
	l.pages = pages;
	ret = kvs_call(c, KVS_IOC_LOOKUP, &l);
	*n = ret ? 0xdead : l.n_hit;
	return ret;
}

/*
 * A peek counts LOOKUP's run and changes nothing: no reference, no
 * holding, pages[] untouched (or absent), no lookups or hits counted, a
 * CACHED page stays CACHED.  With WAIT it is refused.
 */
TEST_F(arb, lookup_peek_counts_and_takes_nothing)
{
	struct kvs_pool_stats st0, st;
	struct kvs_key k[6];
	__u32 pa[4], q[6], n;
	int i;

	ARB_BEGIN();
	publish_new_chain(_metadata, self->a, 23, 4, pa);
	ASSERT_EQ(0, kvs_put1(self->a, pa[3]));
	for (i = 0; i < 6; i++) {
		k[i] = make_key(23, i);
		q[i] = 0xdead0000u + i;
	}
	STATS(self->b, &st0);
	ASSERT_EQ(0, peek_keys(self->b, k, 6, 0, KVS_PTR(q), &n));
	ASSERT_EQ(4, n);
	ASSERT_EQ(0, peek_keys(self->b, k, 2, 0, 0, &n));
	ASSERT_EQ(2, n);
	ASSERT_EQ(0, peek_keys(self->b, k + 4, 2, 0, 0, &n));
	ASSERT_EQ(0, n);
	for (i = 0; i < 6; i++) {
		ASSERT_EQ(0xdead0000u + i, q[i]) TH_LOG("peek wrote pages[%d]", i);
	}
	STATS(self->b, &st);
	ASSERT_EQ(st0.lookups, st.lookups);
	ASSERT_EQ(st0.hits, st.hits);
	ASSERT_EQ(st0.n_refs, st.n_refs);
	ASSERT_EQ(st0.n_cached, st.n_cached);
	ASSERT_EQ(0, kvs_held(self->b));
	ASSERT_PAGE(self->b, 0, pa[0], KVS_PAGE_SHARED, 1);
	ASSERT_PAGE(self->b, 0, pa[3], KVS_PAGE_CACHED, 0);

	/* The same run as LOOKUP's. */
	ASSERT_EQ(0, kvs_lookup(self->b, k, 6, q, &n));
	ASSERT_EQ(4, n);
	ASSERT_EQ(0, kvs_put(self->b, q, 4));

	/* Refused: with WAIT, an unknown flag, no keys; nothing taken. */
	ASSERT_EQ(-EINVAL, peek_keys(self->b, k, 6, KVS_LOOKUP_WAIT, 0, &n));
	ASSERT_EQ(-EINVAL, peek_keys(self->b, k, 6, 1u << 2, 0, &n));
	ASSERT_EQ(-EINVAL, peek_keys(self->b, k, 0, 0, 0, &n));
	ASSERT_EQ(-EFAULT, peek_keys(self->b, NULL, 6, 0, 0, &n));
	ASSERT_EQ(-EBADFD, peek_keys(&self->env.ctl, k, 6, 0, 0, &n));
	ASSERT_EQ(0, kvs_held(self->b));
	ASSERT_EQ(0, kvs_put(self->a, pa, 3));
	ARB_END();
}

/*
 * A peek leaves a CACHED page where it is in the eviction order: x, y
 * CACHED in that order; peeking x keeps x the first to go.  (LOOKUP and
 * PUT of x would make y go first: evict_lru_order.)
 */
TEST_F(arb, lookup_peek_keeps_lru_order)
{
	__u32 x, y, e1, fill[ARB_PAGES], nf, n;
	struct kvs_key kx = make_key(24, 0);

	ARB_BEGIN();
	publish_new_chain(_metadata, self->a, 24, 1, &x);
	publish_new_chain(_metadata, self->a, 25, 1, &y);
	ASSERT_EQ(0, kvs_put1(self->a, x));
	ASSERT_EQ(0, kvs_put1(self->a, y));
	ASSERT_EQ(0, peek_keys(self->b, &kx, 1, 0, 0, &n));
	ASSERT_EQ(1, n);
	nf = fill_free(_metadata, self->a, fill);
	ASSERT_EQ(ARB_PAGES - 2, nf);
	ASSERT_EQ(0, kvs_alloc(self->a, 1, &e1));
	ASSERT_NE(KVS_PAGE_CACHED, kvs_page_state(self->a, 0, x));
	ASSERT_EQ(KVS_PAGE_CACHED, kvs_page_state(self->a, 0, y));
	ASSERT_EQ(0, kvs_put(self->a, fill, nf));
	ASSERT_EQ(0, kvs_put1(self->a, e1));
	ARB_END();
}

TEST_F(arb, evict_leaf_first)
{
	struct kvs_pool_stats st;
	__u32 c[3], fill[ARB_PAGES], nf, e[3], q[3], n;

	ARB_BEGIN();
	publish_new_chain(_metadata, self->a, 23, 3, c);
	/* Root released first: by age alone it would go first. */
	ASSERT_EQ(0, kvs_put1(self->a, c[0]));
	ASSERT_EQ(0, kvs_put1(self->a, c[1]));
	ASSERT_EQ(0, kvs_put1(self->a, c[2]));
	STATS(self->a, &st);
	ASSERT_EQ(3, st.n_cached);
	ASSERT_EQ(1, st.n_evictable);
	nf = fill_free(_metadata, self->a, fill);

	ASSERT_EQ(0, kvs_alloc(self->a, 1, &e[0]));
	ASSERT_NE(KVS_PAGE_CACHED, kvs_page_state(self->a, 0, c[2]));
	ASSERT_EQ(KVS_PAGE_CACHED, kvs_page_state(self->a, 0, c[1]));
	ASSERT_EQ(KVS_PAGE_CACHED, kvs_page_state(self->a, 0, c[0]));
	check_invariants(self->a, 0);
	ASSERT_EQ(0, kvs_alloc(self->a, 1, &e[1]));
	ASSERT_NE(KVS_PAGE_CACHED, kvs_page_state(self->a, 0, c[1]));
	ASSERT_EQ(KVS_PAGE_CACHED, kvs_page_state(self->a, 0, c[0]));
	check_invariants(self->a, 0);
	/* What is left stays reachable from the start of its chain. */
	ASSERT_EQ(0, kvs_put(self->a, fill, nf));
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 23, 0, 3, q, &n));
	ASSERT_EQ(1, n);
	ASSERT_EQ(c[0], q[0]);
	ARB_END();
}

TEST_F(arb, evict_never_parent_of_live_child)
{
	struct kvs_pool_stats st0, st;
	__u32 c[2], fill[ARB_PAGES], nf, x;

	ARB_BEGIN();
	publish_new_chain(_metadata, self->a, 24, 2, c);
	ASSERT_EQ(0, kvs_put1(self->a, c[0]));	/* CACHED, child still SHARED */
	STATS(self->a, &st0);
	ASSERT_EQ(1, st0.n_cached);
	ASSERT_EQ(0, st0.n_evictable);
	nf = fill_free(_metadata, self->a, fill);
	ASSERT_EQ(ARB_PAGES - 2, nf);
	ASSERT_EQ(-ENOSPC, kvs_alloc(self->b, 1, &x));
	ASSERT_PAGE(self->a, 0, c[0], KVS_PAGE_CACHED, 0);
	STATS(self->a, &st);
	ASSERT_EQ(st0.evictions, st.evictions);
	check_invariants(self->a, 0);
	/* Once the child is cached too, the chain goes leaf first. */
	ASSERT_EQ(0, kvs_put1(self->a, c[1]));
	ASSERT_EQ(0, kvs_alloc(self->b, 1, &x));
	ASSERT_EQ(c[1], x);
	ASSERT_EQ(0, kvs_alloc(self->b, 1, &x));
	ASSERT_EQ(c[0], x);
	ARB_END();
}

TEST_F(arb, evict_never_shared)
{
	struct kvs_pool_stats st0, st;
	__u32 s, fill[ARB_PAGES], q, n;

	ARB_BEGIN();
	publish_new_chain(_metadata, self->a, 25, 1, &s);
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 25, 0, 1, &q, &n));
	ASSERT_EQ(0, kvs_put1(self->a, s));	/* only b holds it now */
	STATS(self->a, &st0);
	fill_free(_metadata, self->a, fill);
	ASSERT_EQ(-ENOSPC, kvs_alloc(self->a, 1, &q));
	ASSERT_PAGE(self->a, 0, s, KVS_PAGE_SHARED, 1);
	STATS(self->a, &st);
	ASSERT_EQ(st0.evictions, st.evictions);
	ASSERT_EQ(st0.alloc_fails + 1, st.alloc_fails);
	check_invariants(self->a, 0);
	ARB_END();
}

TEST_F(arb, quota_alloc_edquot)
{
	struct kvs_pool_stats st0, st;
	struct kvs_quota q;
	struct kvs_conn *c, *d;
	char name[KVS_NAME_MAX];
	__u32 pc[5], pd[5];

	ARB_BEGIN();
	kvs_env_pool(_metadata, &self->env, 16, 4, name);
	c = kvs_env_attach(_metadata, &self->env, name, 0);
	d = kvs_env_attach(_metadata, &self->env, name, 0);
	ASSERT_EQ(0, kvs_quota_get(c, &q));
	ASSERT_EQ(4, q.max_pages);
	ASSERT_EQ(0, q.held);
	ASSERT_EQ(0, kvs_alloc(c, 4, pc));
	STATS(c, &st0);
	ASSERT_EQ(-EDQUOT, kvs_alloc(c, 1, pc + 4));
	ASSERT_EQ(-EDQUOT, kvs_alloc(d, 5, pd));
	STATS(c, &st);
	kvs_assert_same_state(_metadata, &st0, &st);
	ASSERT_EQ(st0.alloc_fails, st.alloc_fails);	/* not a lack of pages */
	/* The other file still allocates: the pool is not exhausted. */
	ASSERT_EQ(0, kvs_alloc(d, 4, pd));
	ASSERT_EQ(0, kvs_quota_get(c, &q));
	ASSERT_EQ(4, q.held);
	STATS(c, &st);
	ASSERT_EQ(8, st.n_owned);
	ASSERT_EQ(8, st.n_free);
	check_invariants(c, 0);
	ARB_END();
}

TEST_F(arb, quota_set_bounds)
{
	struct kvs_quota q;
	struct kvs_conn *c;
	char name[KVS_NAME_MAX];
	__u32 p[4];

	ARB_BEGIN();
	kvs_env_pool(_metadata, &self->env, 16, 4, name);
	c = kvs_env_attach(_metadata, &self->env, name, 0);
	ASSERT_EQ(0, kvs_alloc(c, 3, p));
	ASSERT_EQ(-EINVAL, kvs_quota_set(c, 2));	/* below what it holds */
	ASSERT_EQ(-EINVAL, kvs_quota_set(c, 5));	/* above the pool's limit */
	ASSERT_EQ(0, kvs_quota_get(c, &q));
	ASSERT_EQ(4, q.max_pages);
	ASSERT_EQ(0, kvs_quota_set(c, 3));
	ASSERT_EQ(0, kvs_quota_get(c, &q));
	ASSERT_EQ(3, q.max_pages);
	ASSERT_EQ(3, q.held);
	ASSERT_EQ(-EDQUOT, kvs_alloc(c, 1, p + 3));
	ASSERT_EQ(0, kvs_put1(c, p[2]));
	ASSERT_EQ(0, kvs_alloc(c, 1, p + 2));
	ASSERT_EQ(0, kvs_quota_set(c, 4));
	ASSERT_EQ(0, kvs_alloc(c, 1, p + 3));
	ASSERT_EQ(4, kvs_held(c));
	ARB_END();
}

TEST_F(arb, quota_lookup_edquot)
{
	struct kvs_pool_stats st0, st;
	__u32 pa[4], q[4], n = 77;
	int i;

	ARB_BEGIN();
	publish_new_chain(_metadata, self->a, 26, 4, pa);
	ASSERT_EQ(0, kvs_quota_set(self->b, 3));
	STATS(self->b, &st0);
	ASSERT_EQ(-EDQUOT, kvs_lookup_chain(self->b, 26, 0, 4, q, &n));
	STATS(self->b, &st);
	kvs_assert_same_state(_metadata, &st0, &st);
	for (i = 0; i < 4; i++)
		ASSERT_PAGE(self->b, 0, pa[i], KVS_PAGE_SHARED, 1);
	ASSERT_EQ(0, kvs_held(self->b));
	/* A shorter chain fits. */
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 26, 0, 3, q, &n));
	ASSERT_EQ(3, n);
	ASSERT_EQ(3, kvs_held(self->b));
	ASSERT_EQ(-EDQUOT, kvs_lookup_chain(self->b, 26, 0, 1, q, &n));
	/* A lookup that misses takes nothing, so the full quota is no error. */
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 27, 0, 1, q, &n));
	ASSERT_EQ(0, n);
	check_invariants(self->b, 0);
	ARB_END();
}

TEST_F(arb, stats_by_id_and_errors)
{
	struct kvs_pool_stats s0, s1;
	__u32 p[3];

	ARB_BEGIN();
	ASSERT_EQ(0, kvs_alloc(self->a, 3, p));
	ASSERT_EQ(0, kvs_stats(self->a, 0, KVS_STATS_CHECK, &s0));
	ASSERT_EQ(0, kvs_stats(&self->env.ctl, self->pool, KVS_STATS_CHECK, &s1));
	ASSERT_EQ(self->pool, s1.pool_id);
	kvs_assert_same_state(_metadata, &s0, &s1);
	ASSERT_EQ(ARB_PAGES, s1.n_pages);
	ASSERT_EQ(3, s1.n_owned);
	ASSERT_EQ(2, s1.n_files);
	/* A file attached elsewhere may still read another pool by id. */
	ASSERT_EQ(0, kvs_stats(self->b, self->pool, 0, &s1));
	ASSERT_EQ(3, s1.n_owned);
	ASSERT_EQ(-ENOENT, kvs_stats(&self->env.ctl, 0x7ffffff0u, 0, &s1));
	ASSERT_EQ(-EBADFD, kvs_stats(&self->env.ctl, 0, 0, &s1));
	ARB_END();
}

TEST_F(arb, pages_listing_bounds)
{
	struct kvs_page_desc d[12];
	__u32 n, i;

	ARB_BEGIN();
	memset(d, 0x5a, sizeof(d));
	ASSERT_EQ(0, kvs_pages(&self->env.ctl, self->pool, ARB_PAGES - 4, 10, d, &n));
	ASSERT_EQ(4, n);
	for (i = 0; i < 4; i++) {
		ASSERT_EQ(ARB_PAGES - 4 + i, d[i].index);
		ASSERT_EQ(KVS_PAGE_FREE, d[i].state);
		ASSERT_EQ(0, d[i].refcount);
		ASSERT_EQ(KVS_NO_PAGE, d[i].parent);
		ASSERT_EQ(0, d[i].n_children);
		ASSERT_EQ(0, d[i].ns);
		ASSERT_EQ(0, d[i].pad);
		ASSERT_TRUE(kvs_key_zero(&d[i].key));
	}
	/* Only what was written is touched. */
	ASSERT_EQ(0x5a5a5a5au, d[4].index);
	ASSERT_EQ(-EINVAL, kvs_pages(&self->env.ctl, self->pool, ARB_PAGES + 1, 1, d, &n));
	ASSERT_EQ(-EINVAL, kvs_pages(&self->env.ctl, self->pool, 1ull << 40, 1, d, &n));
	ASSERT_EQ(-ENOENT, kvs_pages(&self->env.ctl, 0x7ffffff0u, 0, 1, d, &n));
	/* pool_id 0 on an attached file is its pool. */
	ASSERT_EQ(0, kvs_pages(self->a, 0, 0, 12, d, &n));
	ASSERT_EQ(12, n);
	for (i = 0; i < 12; i++)
		ASSERT_EQ(i, d[i].index);
	ARB_END();
}

TEST_F(arb, destroy_unlinks_name_files_keep_working)
{
	struct kvs_pool_create pc;
	struct kvs_pool_stats st;
	struct kvs_info i0, i1;
	struct kvs_conn *c;
	__u32 r, o, q, n, old = 0;

	ARB_BEGIN();
	publish_new_chain(_metadata, self->a, 30, 1, &r);
	ASSERT_EQ(0, kvs_alloc(self->a, 1, &o));
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &i0));

	old = self->pool;
	kvs_env_destroy(_metadata, &self->env, old);
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &i1));
	ASSERT_EQ(i0.n_pools - 1, i1.n_pools);
	/* The name is gone at once ... */
	c = kvs_env_open(_metadata, &self->env);
	ASSERT_EQ(-ENOENT, kvs_attach(c, self->name, ARB_NS, 0, NULL));
	ASSERT_EQ(-ENOENT, kvs_destroy(&self->env.ctl, old));
	ASSERT_EQ(-ENOENT, kvs_stats(&self->env.ctl, old, 0, &st));
	/* ... but attached files keep working until they close. */
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 30, 0, 1, &q, &n));
	ASSERT_EQ(1, n);
	ASSERT_EQ(r, q);
	ASSERT_EQ(0, kvs_alloc(self->b, 2, (__u32[2]){ 0 }));
	ASSERT_EQ(0, kvs_stats(self->a, 0, KVS_STATS_CHECK, &st));
	ASSERT_EQ(2, st.n_files);
	ASSERT_EQ(3, st.n_owned);

	/* The name can be reused for a new, separate pool. */
	kvs_pool_args(&pc, self->name, 8);
	kvs_env_create(_metadata, &self->env, &pc, "");
	ASSERT_NE(old, pc.pool_id);
	ASSERT_EQ(0, kvs_attach(c, self->name, ARB_NS, 0, NULL));
	ASSERT_EQ(0, kvs_lookup_chain(c, 30, 0, 1, &q, &n));
	ASSERT_EQ(0, n);
	ASSERT_EQ(0, kvs_stats(c, 0, 0, &st));
	ASSERT_EQ(8, st.n_pages);
	ASSERT_EQ(1, st.n_files);

	/* Last file of the old pool closes: it and its tables go. */
	kvs_conn_close(self->a);
	kvs_conn_close(self->b);
	kvs_conn_close(c);
	kvs_env_destroy(_metadata, &self->env, pc.pool_id);
	kvs_env_assert_baseline(_metadata, &self->env);
}

TEST_F(arb, destroy_errors)
{
	ARB_BEGIN();
	ASSERT_EQ(-ENOENT, kvs_destroy(&self->env.ctl, 0));
	ASSERT_EQ(-ENOENT, kvs_destroy(&self->env.ctl, 0x7ffffff0u));
	ASSERT_EQ(-ENOENT, kvs_destroy(&self->env.ctl, 0xffffffffu));
	/* Any file of the owner may destroy, attached or not. */
	ASSERT_EQ(0, kvs_destroy(self->b, self->pool));
	kvs_env_untrack(&self->env, self->pool);
	ASSERT_EQ(-ENOENT, kvs_destroy(self->a, self->pool));
	kvs_env_assert_baseline(_metadata, &self->env);
}

TEST_F(arb, close_releases_holdings)
{
	struct kvs_pool_stats st;
	__u32 own[2], pa[2], pb[2], q[2], n;

	ARB_BEGIN();
	publish_new_chain(_metadata, self->b, 31, 2, pb);
	ASSERT_EQ(0, kvs_alloc(self->a, 2, own));
	publish_new_chain(_metadata, self->a, 32, 2, pa);
	ASSERT_EQ(0, kvs_lookup_chain(self->a, 31, 0, 2, q, &n));
	ASSERT_EQ(2, n);
	ASSERT_EQ(0, kvs_lookup_chain(self->a, 31, 0, 1, q, &n));	/* twice */
	ASSERT_EQ(7, kvs_held(self->a));
	ASSERT_PAGE(self->b, 0, pb[0], KVS_PAGE_SHARED, 3);

	kvs_conn_close(self->a);
	STATS(self->b, &st);
	ASSERT_EQ(0, st.n_owned);
	ASSERT_EQ(1, st.n_files);
	ASSERT_EQ(2, st.n_held);
	ASSERT_EQ(2, st.n_refs);
	ASSERT_EQ(ARB_PAGES - 4, st.n_free);
	ASSERT_PAGE(self->b, 0, pb[0], KVS_PAGE_SHARED, 1);
	ASSERT_PAGE(self->b, 0, pb[1], KVS_PAGE_SHARED, 1);
	ASSERT_PAGE(self->b, 0, pa[0], KVS_PAGE_CACHED, 0);
	ASSERT_PAGE(self->b, 0, pa[1], KVS_PAGE_CACHED, 0);
	ASSERT_PAGE(self->b, 0, own[0], KVS_PAGE_FREE, 0);
	check_invariants(self->b, 0);
	ARB_END();
}

TEST_F(arb, pool_list_order_and_count)
{
	struct kvs_pool_desc d[KVS_ENV_POOLS + 8];
	struct kvs_info in;
	__u32 ids[2], n, i, found = 0;

	ARB_BEGIN();
	ids[0] = kvs_env_pool(_metadata, &self->env, 2, 0, NULL);
	ids[1] = kvs_env_pool(_metadata, &self->env, 3, 0, NULL);
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &in));
	ASSERT_EQ(0, kvs_pool_list(&self->env.ctl, NULL, 0, &n));
	ASSERT_EQ(in.n_pools, n);
	ASSERT_LE(3, n);
	ASSERT_LT(n, KVS_ARRAY_SIZE(d));

	memset(d, 'Z', sizeof(d));
	ASSERT_EQ(0, kvs_pool_list(&self->env.ctl, d, 1, &n));
	ASSERT_EQ(in.n_pools, n);
	ASSERT_EQ('Z', d[1].name[0]);		/* capacity respected */

	memset(d, 'Z', sizeof(d));
	ASSERT_EQ(0, kvs_pool_list(&self->env.ctl, d, n + 2, &n));
	ASSERT_EQ(in.n_pools, n);
	ASSERT_EQ('Z', d[n].name[0]);
	for (i = 0; i < n; i++) {
		if (i)
			ASSERT_LT(d[i - 1].pool_id, d[i].pool_id);
		if (d[i].pool_id == ids[0] || d[i].pool_id == ids[1] ||
		    d[i].pool_id == self->pool)
			found++;
		ASSERT_NE(0, d[i].name[0]);
		ASSERT_EQ(0, d[i].name[KVS_NAME_MAX - 1]);
	}
	ASSERT_EQ(3, found);
	ARB_END();
}

TEST_F(arb, pool_outlives_creator_file)
{
	struct kvs_pool_create pc;
	struct kvs_pool_attach at;
	struct kvs_conn *c, *d;

	ARB_BEGIN();
	c = kvs_env_open(_metadata, &self->env);
	kvs_pool_args(&pc, "", 4);
	kvs_env_name(&self->env, pc.name, "orphan");
	ASSERT_EQ(0, kvs_pool_create(c, &pc));
	kvs_env_track(_metadata, &self->env, pc.pool_id);
	/* Not attached to its creator. */
	ASSERT_EQ(-EBADFD, kvs_alloc(c, 1, (__u32[1]){ 0 }));
	kvs_conn_close(c);
	d = kvs_env_open(_metadata, &self->env);
	ASSERT_EQ(0, kvs_attach(d, pc.name, 0, 0, &at));
	ASSERT_EQ(pc.pool_id, at.pool_id);
	ASSERT_EQ(0, kvs_alloc(d, 4, (__u32[4]){ 0 }));
	check_invariants(d, 0);
	ARB_END();
}

TEST_HARNESS_MAIN
