// SPDX-License-Identifier: GPL-2.0
/*
 * Pool-level commands of the arbiter core: INFO, POOL_CREATE (names,
 * geometry, limits), POOL_ATTACH, POOL_DESTROY (also while attached),
 * POOL_LIST, POOL_STATS, PAGES, permissions, memory fds, detach, and
 * kvs_cmd_size / unknown commands.
 */
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kt.h"

#define OWNER_UID 1000
#define OWNER_GID 100

FIXTURE(cmd) {
	struct kt_client *own;	/* uid 1000 gid 100, creates pools, never attached */
	struct kt_client *adm;	/* admin, never attached */
	__u64 objects0;		/* core objects with just these two clients */
};

FIXTURE_SETUP(cmd)
{
	ASSERT_EQ(0, kt_core_init());
	self->own = kt_new(OWNER_UID, OWNER_GID, 0);
	self->adm = kt_new(0, 0, 1);
	ASSERT_NE(NULL, self->own);
	ASSERT_NE(NULL, self->adm);
	self->objects0 = kvs_core_objects();
}

FIXTURE_TEARDOWN(cmd)
{
	kt_core_teardown(_metadata, 0);
}

static int n_pools(struct kt_client *c)
{
	struct kvs_info info;

	memset(&info, 0, sizeof(info));
	if (kt_cmd(c, KVS_IOC_INFO, &info))
		return -1;
	return info.n_pools;
}

/* ---- INFO and command numbers --------------------------------------- */

TEST_F(cmd, info_reports_limits)
{
	struct kvs_info info;
	__u32 id;

	memset(&info, 0, sizeof(info));
	ASSERT_EQ(0, kt_cmd(self->own, KVS_IOC_INFO, &info));
	EXPECT_EQ(KVS_ABI_VERSION, info.abi_version);
	EXPECT_EQ(KVS_MAX_BATCH, info.max_batch);
	EXPECT_EQ(KT_MAX_POOLS, info.max_pools);
	EXPECT_EQ(KT_MAX_POOL_PAGES, info.max_pool_pages);
	EXPECT_EQ(0, info.n_pools);
	EXPECT_EQ(kvs_core_objects(), info.n_objects);
	EXPECT_EQ(KT_FEATURES, info.features);

	ASSERT_EQ(0, kt_create(self->own, "one", 4, 0600, 0, 0, &id));
	EXPECT_EQ(1, n_pools(self->own));
	memset(&info, 0, sizeof(info));
	ASSERT_EQ(0, kt_cmd(self->adm, KVS_IOC_INFO, &info));
	EXPECT_EQ(kvs_core_objects(), info.n_objects);
	EXPECT_LT(self->objects0, info.n_objects);
	ASSERT_EQ(0, kt_destroy(self->own, id));
	EXPECT_EQ(0, n_pools(self->own));
	EXPECT_EQ(self->objects0, kvs_core_objects());
}

TEST_F(cmd, info_rejects_flags_pad_reserved)
{
	struct kvs_info info;
	int i;

	memset(&info, 0, sizeof(info));
	info.flags = 1;
	EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_INFO, &info));
	memset(&info, 0, sizeof(info));
	info.flags = 1u << 31;
	EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_INFO, &info));
	memset(&info, 0, sizeof(info));
	info.pad = 1;
	EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_INFO, &info));
	for (i = 0; i < 4; i++) {
		memset(&info, 0, sizeof(info));
		info.reserved[i] = 1;
		EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_INFO, &info)) {
			TH_LOG("reserved[%d]", i);
		}
	}
}

TEST_F(cmd, cmd_size_and_unknown_commands)
{
	struct kvs_alloc a;

	EXPECT_EQ(sizeof(struct kvs_info), kvs_cmd_size(KVS_IOC_INFO));
	EXPECT_EQ(sizeof(struct kvs_pool_create), kvs_cmd_size(KVS_IOC_POOL_CREATE));
	EXPECT_EQ(sizeof(struct kvs_pool_attach), kvs_cmd_size(KVS_IOC_POOL_ATTACH));
	EXPECT_EQ(sizeof(struct kvs_pool_destroy), kvs_cmd_size(KVS_IOC_POOL_DESTROY));
	EXPECT_EQ(sizeof(struct kvs_pool_list), kvs_cmd_size(KVS_IOC_POOL_LIST));
	EXPECT_EQ(sizeof(struct kvs_pool_stats), kvs_cmd_size(KVS_IOC_POOL_STATS));
	EXPECT_EQ(sizeof(struct kvs_pages), kvs_cmd_size(KVS_IOC_PAGES));
	EXPECT_EQ(sizeof(struct kvs_quota), kvs_cmd_size(KVS_IOC_QUOTA));
	EXPECT_EQ(sizeof(struct kvs_alloc), kvs_cmd_size(KVS_IOC_ALLOC));
	EXPECT_EQ(sizeof(struct kvs_publish), kvs_cmd_size(KVS_IOC_PUBLISH));
	EXPECT_EQ(sizeof(struct kvs_lookup), kvs_cmd_size(KVS_IOC_LOOKUP));
	EXPECT_EQ(sizeof(struct kvs_put), kvs_cmd_size(KVS_IOC_PUT));
	EXPECT_EQ(sizeof(struct kvs_user_limits), kvs_cmd_size(KVS_IOC_USER_LIMITS));
	/* Size bits are ignored. */
	EXPECT_EQ(sizeof(struct kvs_alloc),
		  kvs_cmd_size(_IOC(_IOC_READ | _IOC_WRITE, KVS_IOC_MAGIC, 0x10, 8)));
	EXPECT_EQ(sizeof(struct kvs_pool_stats),
		  kvs_cmd_size(_IOC(_IOC_READ | _IOC_WRITE, KVS_IOC_MAGIC, 0x05, 4096)));
	/* Not kvshare commands. */
	EXPECT_EQ(0, kvs_cmd_size(_IOWR(KVS_IOC_MAGIC, 0x09, struct kvs_alloc)));
	EXPECT_EQ(0, kvs_cmd_size(_IOWR(KVS_IOC_MAGIC, 0x14, struct kvs_alloc)));
	EXPECT_EQ(0, kvs_cmd_size(_IOWR(KVS_IOC_MAGIC, 0xff, struct kvs_alloc)));
	EXPECT_EQ(0, kvs_cmd_size(_IOWR(KVS_IOC_MAGIC + 1, 0x10, struct kvs_alloc)));
	EXPECT_EQ(0, kvs_cmd_size(_IOWR('x', 0x00, struct kvs_info)));

	memset(&a, 0, sizeof(a));
	EXPECT_EQ(-ENOTTY, kt_cmd(self->own, _IOWR(KVS_IOC_MAGIC, 0x14, struct kvs_alloc), &a));
	EXPECT_EQ(-ENOTTY, kt_cmd(self->own, _IOWR(KVS_IOC_MAGIC + 1, 0x10, struct kvs_alloc), &a));
	EXPECT_EQ(-ENOTTY, kt_cmd(self->own, _IOWR(KVS_IOC_MAGIC, 0x09, struct kvs_alloc), &a));
}

TEST(core_init_limits)
{
	struct kvs_limits lim = { 0 };
	struct kt_client *c;
	struct kvs_info info;
	__u32 id;

	lim.max_pools = 0;
	lim.max_pool_pages = 16;
	EXPECT_NE(0, kvs_core_init(&lim));
	lim.max_pools = KVS_MAX_POOLS + 1;
	EXPECT_NE(0, kvs_core_init(&lim));
	lim.max_pools = 1;
	lim.max_pool_pages = 0;
	EXPECT_NE(0, kvs_core_init(&lim));
	lim.max_pool_pages = (__u64)KVS_MAX_POOL_PAGES + 1;
	EXPECT_NE(0, kvs_core_init(&lim));
	EXPECT_EQ(0, kvs_core_objects());

	lim.max_pools = 1;
	lim.max_pool_pages = 4;
	ASSERT_EQ(0, kvs_core_init(&lim));
	c = kt_new(1, 1, 0);
	ASSERT_NE(NULL, c);
	memset(&info, 0, sizeof(info));
	ASSERT_EQ(0, kt_cmd(c, KVS_IOC_INFO, &info));
	EXPECT_EQ(1, info.max_pools);
	EXPECT_EQ(4, info.max_pool_pages);
	EXPECT_EQ(-EINVAL, kt_create(c, "big", 5, 0600, 0, 0, NULL));
	ASSERT_EQ(0, kt_create(c, "fits", 4, 0600, 0, 0, &id));
	EXPECT_EQ(-ENOSPC, kt_create(c, "second", 1, 0600, 0, 0, NULL));
	ASSERT_EQ(0, kt_destroy(c, id));
	ASSERT_EQ(0, kt_create(c, "second", 1, 0600, 0, 0, &id));
	kt_core_teardown(_metadata, id);
}

/* ---- POOL_CREATE ------------------------------------------------------ */

TEST_F(cmd, create_reports_and_lists)
{
	struct kvs_pool_create r;
	struct kvs_pool_desc d[3];
	struct kvs_pool_list l;
	struct kvs_pool_desc *a, *b;
	__u32 id2;

	kt_create_req(&r, "Alpha-1.x_y", 32, 0640, 0, 0);
	ASSERT_EQ(0, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r));
	EXPECT_NE(0, r.pool_id);
	EXPECT_EQ(KT_PAGE_BYTES, r.geom.page_bytes);
	ASSERT_EQ(0, kt_create(self->own, "beta", 8, 0600, KVS_POOL_NS_PER_UID, 3, &id2));
	EXPECT_NE(r.pool_id, id2);
	EXPECT_EQ(2, n_pools(self->own));

	memset(d, 0, sizeof(d));
	memset(&l, 0, sizeof(l));
	l.count = 3;
	l.pools = KT_PTR(d);
	ASSERT_EQ(0, kt_cmd(self->own, KVS_IOC_POOL_LIST, &l));
	ASSERT_EQ(2, l.count);
	/* In pool id order. */
	ASSERT_LT(d[0].pool_id, d[1].pool_id);
	a = d[0].pool_id == r.pool_id ? &d[0] : &d[1];
	b = a == &d[0] ? &d[1] : &d[0];
	if (a) {

		EXPECT_STREQ("Alpha-1.x_y", a->name);
		EXPECT_EQ(r.pool_id, a->pool_id);
		EXPECT_EQ(0640, a->mode);
		EXPECT_EQ(OWNER_UID, a->uid);
		EXPECT_EQ(OWNER_GID, a->gid);
		EXPECT_EQ(32, a->n_pages);
		EXPECT_EQ(0, memcmp(&r.geom, &a->geom, sizeof(r.geom)));
		EXPECT_EQ(0, a->flags);
		EXPECT_EQ(0, a->n_files);
		EXPECT_EQ(0, a->has_mem_fd);
		EXPECT_STREQ("beta", b->name);
		EXPECT_EQ(id2, b->pool_id);
		EXPECT_EQ(KVS_POOL_NS_PER_UID, b->flags);
		EXPECT_EQ(3, b->max_pages_per_file);
		EXPECT_EQ(8, b->n_pages);
	}
	/* Unused tail of the buffer untouched. */
	EXPECT_EQ(0, d[2].pool_id);
	EXPECT_EQ(0, d[2].name[0]);
}

TEST_F(cmd, create_page_bytes_per_dtype)
{
	static const struct { __u32 dtype, size; } dt[] = {
		{ KVS_DTYPE_F16, 2 }, { KVS_DTYPE_BF16, 2 },
		{ KVS_DTYPE_F32, 4 }, { KVS_DTYPE_FP8, 1 },
	};
	struct kvs_pool_create r;
	unsigned int i;
	char name[16];

	for (i = 0; i < KT_ARRAY_SIZE(dt); i++) {
		snprintf(name, sizeof(name), "dt%u", i);
		kt_create_req(&r, name, 1, 0600, 0, 0);
		r.geom.n_layers = 3;
		r.geom.n_kv_heads = 5;
		r.geom.head_dim = 7;
		r.geom.tokens_per_page = 11;
		r.geom.dtype = dt[i].dtype;
		ASSERT_EQ(0, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r));
		EXPECT_EQ(2ull * 3 * 5 * 7 * 11 * dt[i].size, r.geom.page_bytes) {
			TH_LOG("dtype %u", dt[i].dtype);
		}
	}
}

TEST_F(cmd, create_geometry_limits)
{
	struct kvs_pool_create r;
	int n = 0;

	/* Every dimension may be 65536 as long as the page fits 1 GiB. */
	kt_create_req(&r, "g1", 1, 0600, 0, 0);
	r.geom = (struct kvs_geometry){ 65536, 1, 1, 1, KVS_DTYPE_FP8, 0, 0 };
	ASSERT_EQ(0, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r));
	EXPECT_EQ(131072, r.geom.page_bytes);
	n++;
	kt_create_req(&r, "g2", 1, 0600, 0, 0);
	r.geom = (struct kvs_geometry){ 1, 1, 1, 65536, KVS_DTYPE_F32, 0, 0 };
	ASSERT_EQ(0, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r));
	EXPECT_EQ(524288, r.geom.page_bytes);
	n++;
	/* Exactly 1 GiB: 2 * 64 * 64 * 128 * 512 * 2. */
	kt_create_req(&r, "g3", 1, 0600, 0, 0);
	r.geom = (struct kvs_geometry){ 64, 64, 128, 512, KVS_DTYPE_F16, 0, 0 };
	ASSERT_EQ(0, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r));
	EXPECT_EQ(1ull << 30, r.geom.page_bytes);
	n++;
	EXPECT_EQ(n, n_pools(self->own));
}

TEST_F(cmd, create_rejects_bad_geometry)
{
	static const struct kvs_geometry bad[] = {
		{ 0, 2, 64, 16, KVS_DTYPE_F16, 0, 0 },
		{ 2, 0, 64, 16, KVS_DTYPE_F16, 0, 0 },
		{ 2, 2, 0, 16, KVS_DTYPE_F16, 0, 0 },
		{ 2, 2, 64, 0, KVS_DTYPE_F16, 0, 0 },
		{ 65537, 1, 1, 1, KVS_DTYPE_FP8, 0, 0 },
		{ 1, 65537, 1, 1, KVS_DTYPE_FP8, 0, 0 },
		{ 1, 1, 65537, 1, KVS_DTYPE_FP8, 0, 0 },
		{ 1, 1, 1, 65537, KVS_DTYPE_FP8, 0, 0 },
		{ 2, 2, 64, 16, 0, 0, 0 },
		{ 2, 2, 64, 16, 5, 0, 0 },
		{ 2, 2, 64, 16, 0xffffffff, 0, 0 },
		{ 2, 2, 64, 16, KVS_DTYPE_F16, 1, 0 },		/* pad */
		{ 2, 2, 64, 16, KVS_DTYPE_F16, 0, 16384 },	/* page_bytes in */
		{ 2, 2, 64, 16, KVS_DTYPE_F16, 0, 1 },
		/* 2 GiB */
		{ 64, 64, 128, 512, KVS_DTYPE_F32, 0, 0 },
		/* 1 GiB + 2 * 64 * 64 * 128 * 2 */
		{ 64, 64, 128, 513, KVS_DTYPE_F16, 0, 0 },
		/* 2^67: wraps to 0 in 64 bits */
		{ 65536, 65536, 65536, 65536, KVS_DTYPE_F32, 0, 0 },
		/* 2^65: wraps to 0 in 64 bits */
		{ 65536, 65536, 65536, 65536, KVS_DTYPE_FP8, 0, 0 },
		/* 8 GiB: wraps to 0 in 32 bits */
		{ 256, 256, 256, 256, KVS_DTYPE_FP8, 0, 0 },
	};
	struct kvs_pool_create r;
	__u64 obj = kvs_core_objects();
	unsigned int i;

	for (i = 0; i < KT_ARRAY_SIZE(bad); i++) {
		kt_create_req(&r, "geom", 4, 0600, 0, 0);
		r.geom = bad[i];
		EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r)) {
			TH_LOG("geometry case %u", i);
		}
	}
	EXPECT_EQ(0, n_pools(self->own));
	EXPECT_EQ(obj, kvs_core_objects());
}

TEST_F(cmd, create_rejects_bad_names)
{
	static const char *const bad[] = {
		"", "a/b", "a b", "tab\t", "new\nline", "star*", "caf\xc3\xa9", "x:y",
		"..\\x", "a\x7f",
	};
	struct kvs_pool_create r;
	__u64 obj = kvs_core_objects();
	char n63[64];
	unsigned int i;

	for (i = 0; i < KT_ARRAY_SIZE(bad); i++) {
		kt_create_req(&r, bad[i], 4, 0600, 0, 0);
		EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r)) {
			TH_LOG("name case %u", i);
		}
	}
	/* No NUL in the buffer. */
	kt_create_req(&r, "x", 4, 0600, 0, 0);
	memset(r.name, 'a', sizeof(r.name));
	EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r));
	/* Junk after the NUL. */
	kt_create_req(&r, "ok", 4, 0600, 0, 0);
	r.name[10] = 'z';
	EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r));
	kt_create_req(&r, "ok", 4, 0600, 0, 0);
	r.name[KVS_NAME_MAX - 1] = 'z';
	EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r));
	EXPECT_EQ(0, n_pools(self->own));
	EXPECT_EQ(obj, kvs_core_objects());

	/* 63 bytes is the longest name. */
	memset(n63, 'N', 63);
	n63[63] = 0;
	ASSERT_EQ(0, kt_create(self->own, n63, 4, 0600, 0, 0, NULL));
	ASSERT_EQ(0, kt_create(self->own, "._-09azAZ", 4, 0600, 0, 0, NULL));
	EXPECT_EQ(2, n_pools(self->own));
}

TEST_F(cmd, create_rejects_bad_fields)
{
	struct kvs_pool_create r;
	__u64 obj = kvs_core_objects();
	int i, fd;

	kt_create_req(&r, "f", 4, 01000, 0, 0);
	EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r));
	kt_create_req(&r, "f", 4, 0xffffffff, 0, 0);
	EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r));
	kt_create_req(&r, "f", 0, 0600, 0, 0);
	EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r));
	kt_create_req(&r, "f", KT_MAX_POOL_PAGES + 1ull, 0600, 0, 0);
	EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r));
	kt_create_req(&r, "f", 1ull << 32, 0600, 0, 0);
	EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r));
	kt_create_req(&r, "f", 4, 0600, 0, 5);
	EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r));
	kt_create_req(&r, "f", 4, 0600, 2, 0);
	EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r));
	kt_create_req(&r, "f", 4, 0600, 1u << 31, 0);
	EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r));
	kt_create_req(&r, "f", 4, 0600, 0, 0);
	r.pad = 1;
	EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r));
	for (i = 0; i < 4; i++) {
		kt_create_req(&r, "f", 4, 0600, 0, 0);
		r.reserved[i] = 1;
		EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r)) {
			TH_LOG("reserved[%d]", i);
		}
	}
	/* mem_fd that is not an open fd. */
	for (fd = 1000; fd < 1100 && fcntl(fd, F_GETFD) >= 0; fd++)
		;
	kt_create_req(&r, "f", 4, 0600, 0, 0);
	r.mem_fd = fd;
	EXPECT_EQ(-EBADF, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r));
	EXPECT_EQ(0, n_pools(self->own));
	EXPECT_EQ(obj, kvs_core_objects());

	/* The limits themselves are accepted. */
	ASSERT_EQ(0, kt_create(self->own, "max", KT_MAX_POOL_PAGES, 0777, 0,
			       KT_MAX_POOL_PAGES, NULL));
	ASSERT_EQ(0, kt_create(self->own, "min", 1, 0, 0, 1, NULL));
}

TEST_F(cmd, create_eexist_and_max_pools)
{
	__u32 id[KT_MAX_POOLS], x;
	char name[16];
	int i;

	ASSERT_EQ(0, kt_create(self->own, "p0", 2, 0600, 0, 0, &id[0]));
	/* Same owner, same name: EEXIST, whatever the other fields. */
	EXPECT_EQ(-EEXIST, kt_create(self->own, "p0", 2, 0600, 0, 0, NULL));
	EXPECT_EQ(-EEXIST, kt_create(self->own, "p0", 9, 0644, KVS_POOL_NS_PER_UID, 0, NULL));
	/* Names are case-sensitive. */
	ASSERT_EQ(0, kt_create(self->own, "P0", 2, 0600, 0, 0, &id[1]));
	/* Names are scoped by owner: root's "p0" is another pool. */
	ASSERT_EQ(0, kt_create(self->adm, "p0", 9, 0644, KVS_POOL_NS_PER_UID, 0, &id[2]));
	EXPECT_NE(id[0], id[2]);
	ASSERT_EQ(0, kt_destroy(self->adm, id[2]));
	for (i = 2; i < KT_MAX_POOLS; i++) {
		snprintf(name, sizeof(name), "p%d", i);
		ASSERT_EQ(0, kt_create(self->own, name, 2, 0600, 0, 0, &id[i]));
	}
	EXPECT_EQ(KT_MAX_POOLS, n_pools(self->own));
	EXPECT_EQ(-ENOSPC, kt_create(self->own, "more", 2, 0600, 0, 0, &x));
	EXPECT_EQ(-ENOSPC, kt_create(self->adm, "more", 2, 0600, 0, 0, &x));
	ASSERT_EQ(0, kt_destroy(self->own, id[3]));
	ASSERT_EQ(0, kt_create(self->own, "more", 2, 0600, 0, 0, &x));
	for (i = 0; i < KT_MAX_POOLS; i++)
		EXPECT_NE(id[i] == x && i != 3, 1);
}

/* ---- POOL_ATTACH ------------------------------------------------------ */

TEST_F(cmd, attach_reports_pool)
{
	struct kvs_pool_attach at;
	struct kvs_pool_stats st;
	struct kt_client *c = kt_new(OWNER_UID, OWNER_GID, 0);
	__u32 id;

	ASSERT_NE(NULL, c);
	ASSERT_EQ(0, kt_create(self->own, "att", 12, 0600, 0, 0, &id));
	memset(&at, 0, sizeof(at));
	strcpy(at.name, "att");
	at.owner = OWNER_UID;
	at.ns = 42;
	ASSERT_EQ(0, kt_cmd(c, KVS_IOC_POOL_ATTACH, &at));
	EXPECT_EQ(id, at.pool_id);
	EXPECT_EQ(12, at.n_pages);
	EXPECT_EQ(-1, at.mem_fd);
	EXPECT_TRUE(at.max_pages_per_file == 12 || at.max_pages_per_file == 0) {
		TH_LOG("max_pages_per_file %u", at.max_pages_per_file);
	}
	EXPECT_EQ(KT_PAGE_BYTES, at.geom.page_bytes);
	EXPECT_EQ(2, at.geom.n_layers);
	EXPECT_EQ(16, at.geom.tokens_per_page);
	EXPECT_EQ(KVS_DTYPE_F16, at.geom.dtype);
	/* Stats of the attached pool by id 0. */
	ASSERT_EQ(0, kt_stats_check(c, 0, &st));
	EXPECT_EQ(12, st.n_pages);
	EXPECT_EQ(12, st.n_free);
	EXPECT_EQ(1, st.n_files);
	EXPECT_EQ(id, st.pool_id == 0 ? id : st.pool_id);
	/* Creating does not attach the creator. */
	EXPECT_EQ(-EBADFD, kt_stats(self->own, 0, 0, &st));
	kt_free(c);
	ASSERT_EQ(0, kt_stats(self->own, id, 0, &st));
	EXPECT_EQ(0, st.n_files);
}

TEST_F(cmd, attach_errors)
{
	struct kvs_pool_attach at;
	struct kt_client *c = kt_new(OWNER_UID, OWNER_GID, 0);
	struct kvs_pool_stats st;
	__u32 id1, id2, p;
	int i, ret;

	ASSERT_NE(NULL, c);
	ASSERT_EQ(0, kt_create(self->own, "a1", 4, 0600, 0, 0, &id1));
	ASSERT_EQ(0, kt_create(self->own, "a2", 4, 0600, 0, 0, &id2));

	EXPECT_EQ(-ENOENT, kt_attach(c, "nope", 0));
	EXPECT_EQ(-ENOENT, kt_attach(c, "A1", 0));
	memset(&at, 0, sizeof(at));
	strcpy(at.name, "a1");
	at.flags = 2;
	EXPECT_EQ(-EINVAL, kt_cmd(c, KVS_IOC_POOL_ATTACH, &at));
	at.flags = 1u << 31;
	EXPECT_EQ(-EINVAL, kt_cmd(c, KVS_IOC_POOL_ATTACH, &at));
	for (i = 0; i < 3; i++) {
		memset(&at, 0, sizeof(at));
		strcpy(at.name, "a1");
		at.owner = OWNER_UID;
		at.reserved[i] = 1;
		EXPECT_EQ(-EINVAL, kt_cmd(c, KVS_IOC_POOL_ATTACH, &at)) {
			TH_LOG("reserved[%d]", i);
		}
	}
	memset(&at, 0, sizeof(at));
	strcpy(at.name, "a1");
	at.owner = OWNER_UID;
	at.pool_flags = 1;
	EXPECT_EQ(-EINVAL, kt_cmd(c, KVS_IOC_POOL_ATTACH, &at));
	/* Unterminated name: rejected one way or the other. */
	memset(&at, 0, sizeof(at));
	memset(at.name, 'a', sizeof(at.name));
	ret = kt_cmd(c, KVS_IOC_POOL_ATTACH, &at);
	EXPECT_TRUE(ret == -EINVAL || ret == -ENOENT) {
		TH_LOG("unterminated name: %d", ret);
	}
	/* The pool has no memory fd. */
	memset(&at, 0, sizeof(at));
	strcpy(at.name, "a1");
	at.owner = OWNER_UID;
	at.flags = KVS_ATTACH_MEM_FD;
	EXPECT_EQ(-ENODATA, kt_cmd(c, KVS_IOC_POOL_ATTACH, &at));
	/* None of that attached it. */
	EXPECT_EQ(-EBADFD, kt_alloc(c, 1, &p));
	ASSERT_EQ(0, kt_stats(self->adm, id1, 0, &st));
	EXPECT_EQ(0, st.n_files);

	ASSERT_EQ(0, kt_attach(c, "a1", 0));
	EXPECT_EQ(-EBUSY, kt_attach(c, "a1", 0));
	EXPECT_EQ(-EBUSY, kt_attach(c, "a2", 0));
	/* Still attached to a1 only. */
	ASSERT_EQ(0, kt_alloc(c, 1, &p));
	ASSERT_EQ(0, kt_stats(self->adm, id1, 0, &st));
	EXPECT_EQ(1, st.n_files);
	EXPECT_EQ(1, st.n_owned);
	ASSERT_EQ(0, kt_stats(self->adm, id2, 0, &st));
	EXPECT_EQ(0, st.n_files);
	EXPECT_EQ(0, st.n_owned);
	KT_CHECK(c, 0);
}

TEST_F(cmd, attach_mem_fd)
{
	struct kvs_pool_create r;
	struct kvs_pool_attach at;
	struct kvs_pool_desc d;
	struct kvs_pool_list l;
	struct kt_client *c = kt_new(OWNER_UID, OWNER_GID, 0);
	struct kt_client *c2 = kt_new(OWNER_UID, OWNER_GID, 0);
	int fd, fds0, ret;

	ASSERT_NE(NULL, c);
	ASSERT_NE(NULL, c2);
	fds0 = test_open_fds();
	fd = kt_memfd(4 * KT_PAGE_BYTES);
	ASSERT_LE(0, fd);
	kt_create_req(&r, "mem", 4, 0600, 0, 0);
	r.mem_fd = fd;
	ASSERT_EQ(0, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r));
	/* The pool keeps its own reference: closing ours changes nothing. */
	close(fd);

	memset(&l, 0, sizeof(l));
	l.count = 1;
	l.pools = KT_PTR(&d);
	ASSERT_EQ(0, kt_cmd(self->own, KVS_IOC_POOL_LIST, &l));
	EXPECT_EQ(1, d.has_mem_fd);

	/* Asked for: the core hands the memory to the host in mem_out. */
	memset(&at, 0, sizeof(at));
	strcpy(at.name, "mem");
	at.owner = OWNER_UID;
	at.flags = KVS_ATTACH_MEM_FD;
	c->call.mem_out = NULL;
	ret = kvs_cmd(c->cl, KVS_IOC_POOL_ATTACH, &at, &c->call);
	ASSERT_EQ(0, ret);
	EXPECT_NE(NULL, c->call.mem_out);
	if (c->call.mem_out) {
		EXPECT_LE(0, fcntl(kvs_host_mem_fd(c->call.mem_out), F_GETFD));
		kvs_host_mem_put(c->call.mem_out);
	}
	c->call.mem_out = NULL;

	/* Not asked for: nothing handed over. */
	memset(&at, 0, sizeof(at));
	strcpy(at.name, "mem");
	at.owner = OWNER_UID;
	c2->call.mem_out = NULL;
	ret = kvs_cmd(c2->cl, KVS_IOC_POOL_ATTACH, &at, &c2->call);
	ASSERT_EQ(0, ret);
	EXPECT_EQ(NULL, c2->call.mem_out);
	EXPECT_EQ(-1, at.mem_fd);

	/* Destroyed, then the last file goes: the memory is released. */
	ASSERT_EQ(0, kt_destroy(self->own, r.pool_id));
	kt_free(c);
	kt_free(c2);
	EXPECT_EQ(self->objects0, kvs_core_objects());
	EXPECT_EQ(fds0, test_open_fds());
}

TEST_F(cmd, mem_fd_released_at_core_exit)
{
	struct kvs_pool_create r;
	int fd, fds0;

	fds0 = test_open_fds();
	fd = kt_memfd(4 * KT_PAGE_BYTES);
	ASSERT_LE(0, fd);
	kt_create_req(&r, "mem2", 4, 0600, 0, 0);
	r.mem_fd = fd;
	ASSERT_EQ(0, kt_cmd(self->own, KVS_IOC_POOL_CREATE, &r));
	close(fd);
	EXPECT_EQ(fds0 + 1, test_open_fds());
	kt_free_all();
	kvs_core_exit();
	EXPECT_EQ(0, kvs_core_objects());
	EXPECT_EQ(fds0, test_open_fds());
	/* The teardown exits again: start a core for it. */
	ASSERT_EQ(0, kt_core_init());
}

/*
 * Names are scoped by owner: two users' pools of one name are two pools,
 * each attached only by naming its owner.  (Against a core that ignores
 * the owner, the second CREATE is EEXIST and the squatter's pool would
 * be attached.)
 */
TEST_F(cmd, names_scoped_by_owner)
{
	struct kt_client *other = kt_new(2000, 2000, 0);
	struct kt_client *c1 = kt_new(OWNER_UID, OWNER_GID, 0);
	struct kt_client *c2 = kt_new(2000, 2000, 0);
	struct kt_client *c3 = kt_new(3000, 3000, 0);
	struct kvs_pool_attach at;
	struct kvs_pool_desc d[4];
	struct kvs_pool_list l;
	__u32 id_own, id_other;

	ASSERT_NE(NULL, other);
	ASSERT_NE(NULL, c1);
	ASSERT_NE(NULL, c2);
	ASSERT_NE(NULL, c3);
	/* The squatter comes first; the victim still gets its own pool. */
	ASSERT_EQ(0, kt_create(other, "demo", 4, 0666, 0, 0, &id_other));
	ASSERT_EQ(0, kt_create(self->own, "demo", 8, 0666, 0, 0, &id_own));
	EXPECT_NE(id_own, id_other);
	EXPECT_EQ(-EEXIST, kt_create(other, "demo", 4, 0666, 0, 0, NULL));
	EXPECT_EQ(-EEXIST, kt_create(self->own, "demo", 4, 0666, 0, 0, NULL));
	EXPECT_EQ(2, n_pools(self->own));

	/* LIST shows both, each with its owner. */
	memset(&l, 0, sizeof(l));
	l.count = 4;
	l.pools = KT_PTR(d);
	ASSERT_EQ(0, kt_cmd(self->own, KVS_IOC_POOL_LIST, &l));
	ASSERT_EQ(2, l.count);
	EXPECT_EQ(id_other, d[0].pool_id);
	EXPECT_EQ(2000, d[0].uid);
	EXPECT_EQ(id_own, d[1].pool_id);
	EXPECT_EQ(OWNER_UID, d[1].uid);

	/* Attaching by owner finds that owner's pool, whoever attaches. */
	memset(&at, 0, sizeof(at));
	strcpy(at.name, "demo");
	at.owner = OWNER_UID;
	ASSERT_EQ(0, kt_cmd(c1, KVS_IOC_POOL_ATTACH, &at));
	EXPECT_EQ(id_own, at.pool_id);
	EXPECT_EQ(8, at.n_pages);
	ASSERT_EQ(0, kt_attach_owner(c2, 2000, "demo", 0));
	EXPECT_EQ(id_other, kvs_client_pool_id(c2->cl));
	EXPECT_EQ(id_own, kvs_client_pool_id(c1->cl));

	/* An owner without such a pool: ENOENT, even though the name exists. */
	EXPECT_EQ(-ENOENT, kt_attach_owner(c3, 3000, "demo", 0));
	EXPECT_EQ(-ENOENT, kt_attach_owner(c3, 0, "demo", 0));
	EXPECT_EQ(0, kvs_client_pool_id(c3->cl));
	/* Once the owner's pool is destroyed, its name finds nothing. */
	ASSERT_EQ(0, kt_destroy(self->own, id_own));
	EXPECT_EQ(-ENOENT, kt_attach_owner(c3, OWNER_UID, "demo", 0));
	ASSERT_EQ(0, kt_attach_owner(c3, 2000, "demo", 0));
	EXPECT_EQ(id_other, kvs_client_pool_id(c3->cl));
}

/* ---- Permissions ------------------------------------------------------ */

TEST_F(cmd, permissions_as_for_files)
{
	static const struct {
		__u32 mode, uid, gid, group;	/* group: a supplementary gid, 0 none */
		int admin;
		int attach, read;		/* expected results */
	} t[] = {
		{ 0600, OWNER_UID, OWNER_GID, 0, 0, 0, 0 },
		{ 0600, 2000, OWNER_GID, 0, 0, -EACCES, -EACCES },
		{ 0600, 2000, 300, 0, 1, 0, 0 },		/* admin bypass */
		{ 0000, OWNER_UID, OWNER_GID, 0, 1, 0, 0 },	/* admin bypass */
		{ 0000, OWNER_UID, OWNER_GID, 0, 0, -EACCES, -EACCES },
		{ 0060, 2000, OWNER_GID, 0, 0, 0, 0 },		/* group class */
		{ 0060, OWNER_UID, OWNER_GID, 0, 0, -EACCES, -EACCES }, /* owner class wins */
		{ 0060, 2000, 300, OWNER_GID, 0, 0, 0 },	/* supplementary group */
		{ 0060, 2000, 300, 0, 0, -EACCES, -EACCES },	/* other class */
		{ 0604, 2000, OWNER_GID, 0, 0, -EACCES, -EACCES }, /* group class wins */
		{ 0006, 3000, 300, 0, 0, 0, 0 },		/* other */
		{ 0644, 2000, 300, 0, 0, -EACCES, 0 },		/* read only */
		{ 0400, OWNER_UID, OWNER_GID, 0, 0, -EACCES, 0 },
		{ 0200, OWNER_UID, OWNER_GID, 0, 0, -EACCES, -EACCES },
		{ 0066, OWNER_UID, 300, 0, 0, -EACCES, -EACCES },
	};
	struct kvs_page_desc d;
	struct kvs_pool_stats st;
	unsigned int i;
	char name[16];
	__u32 id, p, n;
	int ret;

	for (i = 0; i < KT_ARRAY_SIZE(t); i++) {
		struct kt_client *c = kt_new(t[i].uid, t[i].gid, t[i].admin);
		struct kt_client *r = kt_new(t[i].uid, t[i].gid, t[i].admin);

		ASSERT_NE(NULL, c);
		ASSERT_NE(NULL, r);
		if (t[i].group) {
			c->groups[0] = r->groups[0] = t[i].group;
			c->cred.n_groups = r->cred.n_groups = 1;
		}
		snprintf(name, sizeof(name), "perm%u", i);
		ASSERT_EQ(0, kt_create(self->own, name, 4, t[i].mode, 0, 0, &id));
		ret = kt_attach(c, name, 1);
		EXPECT_EQ(t[i].attach, ret) {
			TH_LOG("case %u: attach", i);
		}
		if (ret) {
			EXPECT_EQ(-EBADFD, kt_alloc(c, 1, &p));
		} else {
			EXPECT_EQ(0, kt_alloc(c, 1, &p));
		}
		/* Reading by id, unattached. */
		EXPECT_EQ(t[i].read, kt_stats(r, id, 0, &st)) {
			TH_LOG("case %u: stats", i);
		}
		EXPECT_EQ(t[i].read, kt_pages(r, id, 0, 1, &d, &n)) {
			TH_LOG("case %u: pages", i);
		}
		kt_free(c);
		kt_free(r);
		ASSERT_EQ(0, kt_destroy(self->own, id));
	}
	EXPECT_EQ(self->objects0, kvs_core_objects());
}

/* ---- POOL_DESTROY ----------------------------------------------------- */

TEST_F(cmd, destroy_permissions_and_errors)
{
	struct kvs_pool_destroy d;
	struct kt_client *other = kt_new(2000, OWNER_GID, 0);
	__u32 id, id2;
	int i;

	ASSERT_NE(NULL, other);
	ASSERT_EQ(0, kt_create(self->own, "d", 4, 0666, 0, 0, &id));
	EXPECT_EQ(-EPERM, kt_destroy(other, id));	/* same group, not owner */
	memset(&d, 0, sizeof(d));
	d.pool_id = id;
	d.flags = 1;
	EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_POOL_DESTROY, &d));
	for (i = 0; i < 2; i++) {
		memset(&d, 0, sizeof(d));
		d.pool_id = id;
		d.reserved[i] = 1;
		EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_POOL_DESTROY, &d));
	}
	EXPECT_EQ(-ENOENT, kt_destroy(self->own, id + 1000));
	EXPECT_EQ(-ENOENT, kt_destroy(self->own, 0));
	EXPECT_EQ(-ENOENT, kt_destroy(self->own, 0xffffffff));
	EXPECT_EQ(1, n_pools(self->own));
	ASSERT_EQ(0, kt_attach(other, "d", 0));		/* still there */

	/* Owner may; twice is ENOENT. */
	ASSERT_EQ(0, kt_destroy(self->own, id));
	EXPECT_EQ(-ENOENT, kt_destroy(self->own, id));
	EXPECT_EQ(-ENOENT, kt_destroy(self->adm, id));

	/* Admin may destroy anyone's pool. */
	ASSERT_EQ(0, kt_create(self->own, "d2", 4, 0600, 0, 0, &id2));
	ASSERT_EQ(0, kt_destroy(self->adm, id2));
	EXPECT_EQ(0, n_pools(self->own));
}

TEST_F(cmd, destroy_while_attached)
{
	struct kt_client *a = kt_new(OWNER_UID, OWNER_GID, 0);
	struct kt_client *b = kt_new(OWNER_UID, OWNER_GID, 0);
	struct kt_client *late = kt_new(OWNER_UID, OWNER_GID, 0);
	struct kvs_pool_desc d[2];
	struct kvs_pool_list l;
	struct kvs_pool_stats st;
	__u32 id, id2, p[2], lk[2], n_hit = 0;

	ASSERT_NE(NULL, a);
	ASSERT_NE(NULL, b);
	ASSERT_NE(NULL, late);
	ASSERT_EQ(0, kt_create(self->own, "dw", 8, 0666, 0, 0, &id));
	ASSERT_EQ(0, kt_attach(a, "dw", 1));
	ASSERT_EQ(0, kt_attach(b, "dw", 1));
	ASSERT_EQ(0, kt_alloc(a, 2, p));
	ASSERT_EQ(0, kt_destroy(self->own, id));

	/* The name is gone at once. */
	EXPECT_EQ(-ENOENT, kt_attach(late, "dw", 1));
	memset(&l, 0, sizeof(l));
	l.count = 2;
	l.pools = KT_PTR(d);
	ASSERT_EQ(0, kt_cmd(self->own, KVS_IOC_POOL_LIST, &l));
	EXPECT_EQ(0, l.count);
	EXPECT_EQ(-ENOENT, kt_destroy(self->own, id));
	/* ... and may be reused by a new pool. */
	ASSERT_EQ(0, kt_create(self->own, "dw", 4, 0666, 0, 0, &id2));
	EXPECT_NE(id, id2);
	ASSERT_EQ(0, kt_attach(late, "dw", 1));

	/* Attached files keep working on the old pool. */
	ASSERT_EQ(0, kt_publish_chain(a, p, 2, KVS_NO_PAGE, 1, 0, NULL, NULL));
	ASSERT_EQ(0, kt_lookup_chain(b, 1, 0, 2, lk, &n_hit));
	EXPECT_EQ(2, n_hit);
	EXPECT_EQ(p[0], lk[0]);
	ASSERT_EQ(0, kt_lookup_chain(late, 1, 0, 2, p, &n_hit));
	EXPECT_EQ(0, n_hit);	/* another pool */
	KT_CHECK_ST(a, 0, &st);
	EXPECT_EQ(8, st.n_pages);
	EXPECT_EQ(2, st.n_files);
	EXPECT_EQ(4, st.n_refs);
	ASSERT_EQ(0, kt_put(b, lk, 2));

	kt_free(late);
	ASSERT_EQ(0, kt_destroy(self->own, id2));
	kt_free(a);
	KT_CHECK_ST(b, 0, &st);
	EXPECT_EQ(1, st.n_files);
	EXPECT_EQ(0, st.n_refs);
	EXPECT_EQ(2, st.n_cached);
	kt_free(b);
	/* The pools went with their last files: only own and adm are left. */
	EXPECT_EQ(self->objects0, kvs_core_objects());
	EXPECT_EQ(0, n_pools(self->own));
}

TEST_F(cmd, destroy_unattached_pool_frees_it)
{
	__u32 id;

	ASSERT_EQ(0, kt_create(self->own, "gone", 64, 0600, 0, 0, &id));
	EXPECT_LT(self->objects0, kvs_core_objects());
	ASSERT_EQ(0, kt_destroy(self->own, id));
	EXPECT_EQ(self->objects0, kvs_core_objects());
	EXPECT_EQ(-ENOENT, kt_attach(self->own, "gone", 0));
	EXPECT_EQ(-ENOENT, kt_stats(self->adm, id, 0, &(struct kvs_pool_stats){ 0 }));
}

/* ---- POOL_LIST -------------------------------------------------------- */

TEST_F(cmd, list_counts_and_truncates)
{
	struct kvs_pool_desc d[4];
	struct kvs_pool_list l;
	__u32 id[3];
	int i;

	memset(&l, 0, sizeof(l));
	ASSERT_EQ(0, kt_cmd(self->own, KVS_IOC_POOL_LIST, &l));
	EXPECT_EQ(0, l.count);
	ASSERT_EQ(0, kt_create(self->own, "l0", 2, 0600, 0, 0, &id[0]));
	ASSERT_EQ(0, kt_create(self->own, "l1", 2, 0600, 0, 0, &id[1]));
	ASSERT_EQ(0, kt_create(self->own, "l2", 2, 0600, 0, 0, &id[2]));

	/* Only count. */
	memset(&l, 0, sizeof(l));
	ASSERT_EQ(0, kt_cmd(self->own, KVS_IOC_POOL_LIST, &l));
	EXPECT_EQ(3, l.count);

	/* Capacity 2 of 3: the two lowest ids, count says 3. */
	memset(d, 0x5a, sizeof(d));
	memset(&l, 0, sizeof(l));
	l.count = 2;
	l.pools = KT_PTR(d);
	ASSERT_EQ(0, kt_cmd(self->own, KVS_IOC_POOL_LIST, &l));
	EXPECT_EQ(3, l.count);
	EXPECT_LT(d[0].pool_id, d[1].pool_id);
	EXPECT_EQ(0x5a5a5a5a, d[2].pool_id);
	for (i = 0; i < 2; i++) {
		EXPECT_TRUE(d[i].pool_id == id[0] || d[i].pool_id == id[1] ||
			    d[i].pool_id == id[2]);
		EXPECT_EQ(0, d[i].reserved[0]);
		EXPECT_EQ(0, d[i].reserved[1]);
	}
	/* A page of output from the poison area faults. */
	memset(&l, 0, sizeof(l));
	l.count = 2;
	l.pools = KT_BAD;
	EXPECT_EQ(-EFAULT, kt_cmd(self->own, KVS_IOC_POOL_LIST, &l));
	memset(&l, 0, sizeof(l));
	l.count = 2;
	l.pools = 0;
	EXPECT_EQ(-EFAULT, kt_cmd(self->own, KVS_IOC_POOL_LIST, &l));
	memset(&l, 0, sizeof(l));
	l.count = 3;
	l.pools = KT_PTR(kt_edge(2 * sizeof(struct kvs_pool_desc)));
	EXPECT_EQ(-EFAULT, kt_cmd(self->own, KVS_IOC_POOL_LIST, &l));
	memset(&l, 0, sizeof(l));
	l.flags = 1;
	EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_POOL_LIST, &l));
	for (i = 0; i < 2; i++) {
		memset(&l, 0, sizeof(l));
		l.reserved[i] = 1;
		EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_POOL_LIST, &l));
	}
	/* A destroyed pool is not listed. */
	ASSERT_EQ(0, kt_destroy(self->own, id[1]));
	memset(&l, 0, sizeof(l));
	l.count = 4;
	l.pools = KT_PTR(d);
	ASSERT_EQ(0, kt_cmd(self->own, KVS_IOC_POOL_LIST, &l));
	EXPECT_EQ(2, l.count);
	EXPECT_EQ(id[0] < id[2] ? id[0] : id[2], d[0].pool_id);
	EXPECT_NE(id[1], d[0].pool_id);
	EXPECT_NE(id[1], d[1].pool_id);
}

/* ---- POOL_STATS and PAGES --------------------------------------------- */

TEST_F(cmd, stats_errors)
{
	struct kvs_pool_stats st;
	__u32 id;
	int i;

	ASSERT_EQ(0, kt_create(self->own, "s", 6, 0600, 0, 0, &id));
	EXPECT_EQ(-EBADFD, kt_stats(self->own, 0, 0, &st));
	EXPECT_EQ(-ENOENT, kt_stats(self->own, id + 77, 0, &st));
	EXPECT_EQ(-EINVAL, kt_stats(self->own, id, 2, &st));
	EXPECT_EQ(-EINVAL, kt_stats(self->own, id, 1u << 31, &st));
	for (i = 0; i < (int)(sizeof(st.reserved) / sizeof(st.reserved[0])); i++) {
		memset(&st, 0, sizeof(st));
		st.pool_id = id;
		st.reserved[i] = 1;
		EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_POOL_STATS, &st)) {
			TH_LOG("reserved[%d]", i);
		}
	}
	/* A fresh pool. */
	ASSERT_EQ(0, kt_stats_check(self->own, id, &st));
	EXPECT_EQ(6, st.n_pages);
	EXPECT_EQ(6, st.n_free);
	EXPECT_EQ(0, st.n_owned + st.n_shared + st.n_cached + st.n_evictable + st.n_refs +
		     st.n_held + st.n_files + st.allocs + st.alloc_fails + st.publishes +
		     st.dup_publishes + st.lookups + st.hits + st.evictions);
}

TEST_F(cmd, pages_describe_and_truncate)
{
	struct kvs_page_desc d[8];
	struct kvs_pages pg;
	__u32 id, n, i;
	int ret;

	ASSERT_EQ(0, kt_create(self->own, "pg", 6, 0600, 0, 0, &id));
	memset(d, 0x5a, sizeof(d));
	ASSERT_EQ(0, kt_pages(self->own, id, 0, 8, d, &n));
	ASSERT_EQ(6, n);
	for (i = 0; i < 6; i++) {
		EXPECT_EQ(i, d[i].index);
		EXPECT_EQ(KVS_PAGE_FREE, d[i].state);
		EXPECT_EQ(0, d[i].refcount);
		EXPECT_EQ(KVS_NO_PAGE, d[i].parent);
		EXPECT_EQ(0, d[i].n_children);
		EXPECT_EQ(0, d[i].pad);
		EXPECT_TRUE(kt_key_zero(&d[i].key));
	}
	EXPECT_EQ(0x5a5a5a5a, d[6].index);
	/* From the middle, cut at the end. */
	memset(d, 0x5a, sizeof(d));
	ASSERT_EQ(0, kt_pages(self->own, id, 4, 5, d, &n));
	EXPECT_EQ(2, n);
	EXPECT_EQ(4, d[0].index);
	EXPECT_EQ(5, d[1].index);
	EXPECT_EQ(0x5a5a5a5a, d[2].index);
	ASSERT_EQ(0, kt_pages(self->own, id, 5, 1, d, &n));
	EXPECT_EQ(1, n);
	/* Beyond the pool. */
	EXPECT_EQ(-EINVAL, kt_pages(self->own, id, 7, 1, d, &n));
	EXPECT_EQ(-EINVAL, kt_pages(self->own, id, 1ull << 32, 1, d, &n));
	EXPECT_EQ(-EINVAL, kt_pages(self->own, id, ~0ull, 1, d, &n));
	/* Other errors. */
	EXPECT_EQ(-ENOENT, kt_pages(self->own, id + 5, 0, 1, d, &n));
	ret = kt_pages(self->own, 0, 0, 1, d, &n);
	EXPECT_TRUE(ret == -EBADFD || ret == -ENOENT) {
		TH_LOG("PAGES of pool 0 while unattached: %d", ret);
	}
	EXPECT_EQ(-EFAULT, kt_pages(self->own, id, 0, 2, NULL, &n));
	EXPECT_EQ(-EFAULT, kt_pages(self->own, id, 0, 2, (void *)(uintptr_t)KT_BAD, &n));
	EXPECT_EQ(-EFAULT, kt_pages(self->own, id, 0, 3, kt_edge(2 * sizeof(d[0])), &n));
	EXPECT_EQ(-EINVAL, kt_pages(self->own, id, 0, 0, d, &n));
	EXPECT_EQ(-E2BIG, kt_pages(self->own, id, 0, KVS_MAX_BATCH + 1, d, &n));
	memset(&pg, 0, sizeof(pg));
	pg.pool_id = id;
	pg.count = 1;
	pg.pages = KT_PTR(d);
	pg.flags = 1;
	EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_PAGES, &pg));
	pg.flags = 0;
	pg.pad = 1;
	EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_PAGES, &pg));
	pg.pad = 0;
	pg.reserved[0] = 1;
	EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_PAGES, &pg));
	pg.reserved[0] = 0;
	pg.reserved[1] = 1;
	EXPECT_EQ(-EINVAL, kt_cmd(self->own, KVS_IOC_PAGES, &pg));
	pg.reserved[1] = 0;
	pg.count = 1;
	ASSERT_EQ(0, kt_cmd(self->own, KVS_IOC_PAGES, &pg));
	EXPECT_EQ(1, pg.count);
}

TEST_HARNESS_MAIN
