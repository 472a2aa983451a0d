// SPDX-License-Identifier: GPL-2.0
/*
 * Multi-user safety of the arbiter core: per-user limits (EDQUOT while
 * other users carry on) and their accounting (usage back to 0 after PUT,
 * close and undo), KVS_IOC_USER_LIMITS, STATS CHECK for admins only,
 * PAGES hiding keys and namespaces from all but the owner, the undo of
 * CREATE and ATTACH (kvs_cmd_undo), and the pool memory the user host
 * accepts (a memfd sealed against shrinking, as long as the pool).
 */
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "kt.h"

#define UID_A 1000
#define UID_B 2000

/* Start the core with per-user limits (the other limits as kt_core_init()). */
static int ku_core_init(__u32 pools, __u64 pool_pages, __u64 held, __u64 held_bytes)
{
	struct kvs_limits lim = { .max_pools = KT_MAX_POOLS,
				  .max_pool_pages = KT_MAX_POOL_PAGES,
				  .features = KT_FEATURES,
				  .max_user_pools = pools,
				  .max_user_pool_pages = pool_pages,
				  .max_user_held = held,
				  .max_user_held_bytes = held_bytes };

	return kvs_core_init(&lim);
}

/* USER_LIMITS of @uid (KVS_USER_UID) through @c. */
static int ku_usage(struct kt_client *c, __u32 uid, struct kvs_user_limits *u)
{
	memset(u, 0, sizeof(*u));
	u->uid = uid;
	u->flags = KVS_USER_UID;
	return kt_cmd(c, KVS_IOC_USER_LIMITS, u);
}

/* One usage figure of @uid, as an admin sees it; ~0 on error. */
enum { KU_POOLS, KU_POOL_PAGES, KU_HELD, KU_HELD_BYTES };
static __u64 ku_get(__u32 uid, int what)
{
	struct kt_client *adm = kt_new(0, 0, 1);
	struct kvs_user_limits u;
	__u64 v = ~0ull;

	if (adm && !ku_usage(adm, uid, &u)) {
		switch (what) {
		case KU_POOLS:
			v = u.n_pools;
			break;
		case KU_POOL_PAGES:
			v = u.pool_pages;
			break;
		case KU_HELD:
			v = u.held;
			break;
		default:
			v = u.held_bytes;
		}
	}
	kt_free(adm);
	return v;
}

static int ku_n_pools(struct kt_client *c)
{
	struct kvs_info info;

	memset(&info, 0, sizeof(info));
	if (kt_cmd(c, KVS_IOC_INFO, &info))
		return -1;
	return info.n_pools;
}

/* A pool of @n_pages with @tokens tokens per page (page_bytes 1024 * tokens). */
static int ku_create_geom(struct kt_client *c, const char *name, __u64 n_pages,
			  __u32 tokens, __u32 *id)
{
	struct kvs_pool_create r;
	int ret;

	kt_create_req(&r, name, n_pages, 0666, 0, 0);
	r.geom.tokens_per_page = tokens;
	ret = kt_cmd(c, KVS_IOC_POOL_CREATE, &r);
	if (!ret) {
		kt_name_owner_set(name, c->cred.uid);
		if (id)
			*id = r.pool_id;
	}
	return ret;
}

/* ---- Per-user pool limits ---------------------------------------------- */

TEST(user_pool_limit)
{
	struct kt_client *a, *b, *adm, *ca;
	__u32 id[3], x;

	ASSERT_EQ(0, ku_core_init(2, 0, 0, 0));
	a = kt_new(UID_A, UID_A, 0);
	b = kt_new(UID_B, UID_B, 0);
	adm = kt_new(0, 0, 1);
	ca = kt_new(UID_A, UID_A, 0);
	ASSERT_NE(NULL, a);
	ASSERT_NE(NULL, b);
	ASSERT_NE(NULL, adm);
	ASSERT_NE(NULL, ca);

	ASSERT_EQ(0, kt_create(a, "p0", 4, 0666, 0, 0, &id[0]));
	ASSERT_EQ(0, kt_create(a, "p1", 4, 0666, 0, 0, &id[1]));
	EXPECT_EQ(2, ku_get(UID_A, KU_POOLS));
	EXPECT_EQ(8, ku_get(UID_A, KU_POOL_PAGES));
	/* A is at its limit: EDQUOT, and the failed call charged nothing. */
	EXPECT_EQ(-EDQUOT, kt_create(a, "p2", 4, 0666, 0, 0, &x));
	EXPECT_EQ(2, ku_get(UID_A, KU_POOLS));
	EXPECT_EQ(8, ku_get(UID_A, KU_POOL_PAGES));
	EXPECT_EQ(2, ku_n_pools(a));
	/* Everyone else carries on: B creates, even the same name; admin too. */
	ASSERT_EQ(0, kt_create(b, "p2", 4, 0666, 0, 0, &id[2]));
	ASSERT_EQ(0, kt_create(b, "p3", 4, 0666, 0, 0, NULL));
	ASSERT_EQ(0, kt_create(adm, "a0", 4, 0666, 0, 0, NULL));
	ASSERT_EQ(0, kt_create(adm, "a1", 4, 0666, 0, 0, NULL));
	ASSERT_EQ(0, kt_create(adm, "a2", 4, 0666, 0, 0, NULL));
	EXPECT_EQ(3, ku_get(0, KU_POOLS));
	EXPECT_EQ(2, ku_get(UID_B, KU_POOLS));

	/*
	 * A pool counts until it is freed: destroyed while attached, it still
	 * holds A's slot; the last close gives it back.
	 */
	ASSERT_EQ(0, kt_attach_owner(ca, UID_A, "p0", 0));
	ASSERT_EQ(0, kt_destroy(a, id[0]));
	EXPECT_EQ(2, ku_get(UID_A, KU_POOLS));
	EXPECT_EQ(-EDQUOT, kt_create(a, "p2", 4, 0666, 0, 0, &x));
	kt_free(ca);
	EXPECT_EQ(1, ku_get(UID_A, KU_POOLS));
	EXPECT_EQ(4, ku_get(UID_A, KU_POOL_PAGES));
	ASSERT_EQ(0, kt_create(a, "p2", 4, 0666, 0, 0, &x));
	EXPECT_NE(id[2], x);
	kt_core_teardown(_metadata, 0);
}

TEST(user_pool_pages_limit)
{
	struct kt_client *a, *b, *adm;
	struct kvs_pool_create r;
	__u32 id;
	__u64 obj0;

	ASSERT_EQ(0, ku_core_init(0, 100, 0, 0));
	a = kt_new(UID_A, UID_A, 0);
	b = kt_new(UID_B, UID_B, 0);
	adm = kt_new(0, 0, 1);
	ASSERT_NE(NULL, a);
	ASSERT_NE(NULL, b);
	ASSERT_NE(NULL, adm);

	ASSERT_EQ(0, kt_create(a, "big", 60, 0666, 0, 0, &id));
	obj0 = kvs_core_objects();
	EXPECT_EQ(-EDQUOT, kt_create(a, "more", 41, 0666, 0, 0, NULL));
	/* Nothing was built or charged for the refused pool. */
	EXPECT_EQ(obj0, kvs_core_objects());
	EXPECT_EQ(60, ku_get(UID_A, KU_POOL_PAGES));
	EXPECT_EQ(1, ku_get(UID_A, KU_POOLS));
	ASSERT_EQ(0, kt_create(a, "fits", 40, 0666, 0, 0, NULL));
	EXPECT_EQ(100, ku_get(UID_A, KU_POOL_PAGES));
	EXPECT_EQ(-EDQUOT, kt_create(a, "one", 1, 0666, 0, 0, NULL));
	/* B's pages are its own. */
	ASSERT_EQ(0, kt_create(b, "big", 100, 0666, 0, 0, NULL));
	EXPECT_EQ(-EDQUOT, kt_create(b, "one", 1, 0666, 0, 0, NULL));
	ASSERT_EQ(0, kt_create(adm, "huge", 1000, 0666, 0, 0, NULL));
	/* A refusal for a bad memory fd also charges nothing. */
	ASSERT_EQ(0, kt_destroy(a, id));
	EXPECT_EQ(40, ku_get(UID_A, KU_POOL_PAGES));
	kt_create_req(&r, "mem", 8, 0666, 0, 0);
	r.mem_fd = 0x7ffffff0;
	EXPECT_EQ(-EBADF, kt_cmd(a, KVS_IOC_POOL_CREATE, &r));
	EXPECT_EQ(40, ku_get(UID_A, KU_POOL_PAGES));
	EXPECT_EQ(1, ku_get(UID_A, KU_POOLS));
	kt_core_teardown(_metadata, 0);
}

/* ---- Per-user holdings -------------------------------------------------- */

/*
 * Limit on pages held: A's files in two pools share one budget; B's files
 * (and admin's) are not affected; PUT, close and a failed call leave the
 * usage exact.
 */
TEST(user_held_limit)
{
	struct kt_client *a1, *a2, *b, *adm, *own;
	__u32 p[8], q[8], l[8], m[8], n_hit = 9, id1, id2;
	struct kt_snap *s = calloc(1, sizeof(*s));
	struct kt_client *cls[2];

	ASSERT_NE(NULL, s);
	ASSERT_EQ(0, ku_core_init(0, 0, 6, 0));
	own = kt_new(3000, 3000, 0);
	a1 = kt_new(UID_A, UID_A, 0);
	a2 = kt_new(UID_A, UID_A, 0);
	b = kt_new(UID_B, UID_B, 0);
	adm = kt_new(0, 0, 1);
	ASSERT_NE(NULL, own);
	ASSERT_NE(NULL, a1);
	ASSERT_NE(NULL, a2);
	ASSERT_NE(NULL, b);
	ASSERT_NE(NULL, adm);
	ASSERT_EQ(0, kt_create(own, "h1", 32, 0666, 0, 0, &id1));
	ASSERT_EQ(0, kt_create(own, "h2", 32, 0666, 0, 0, &id2));
	ASSERT_EQ(0, kt_attach(a1, "h1", 1));
	ASSERT_EQ(0, kt_attach(a2, "h2", 1));
	ASSERT_EQ(0, kt_attach(b, "h1", 1));
	ASSERT_EQ(0, kt_attach(adm, "h1", 1));
	/* Owning pools is not holding pages. */
	EXPECT_EQ(0, ku_get(3000, KU_HELD));

	ASSERT_EQ(0, kt_alloc(a1, 4, p));
	EXPECT_EQ(4, ku_get(UID_A, KU_HELD));
	EXPECT_EQ(4 * KT_PAGE_BYTES, ku_get(UID_A, KU_HELD_BYTES));
	ASSERT_EQ(0, kt_alloc(a2, 2, q));
	EXPECT_EQ(6, ku_get(UID_A, KU_HELD));
	/* At the limit, in either pool: EDQUOT, nothing changed. */
	cls[0] = a1;
	cls[1] = b;
	ASSERT_EQ(0, kt_snap_take(adm, id1, cls, 2, s));
	EXPECT_EQ(-EDQUOT, kt_alloc(a1, 1, l));
	EXPECT_EQ(-EDQUOT, kt_alloc(a2, 1, l));
	kt_snap_same(_metadata, adm, id1, cls, 2, s, __LINE__);
	EXPECT_EQ(6, ku_get(UID_A, KU_HELD));
	/* B and admin are not held back by A. */
	ASSERT_EQ(0, kt_alloc(b, 6, l));
	ASSERT_EQ(0, kt_alloc(adm, 8, m));
	EXPECT_EQ(6, ku_get(UID_B, KU_HELD));
	EXPECT_EQ(0, ku_get(0, KU_HELD));
	ASSERT_EQ(0, kt_put(b, l, 6));

	/* PUBLISH turns A's OWNED pages into references: same count. */
	ASSERT_EQ(0, kt_publish_chain(a1, p, 4, KVS_NO_PAGE, 7, 0, NULL, NULL));
	EXPECT_EQ(6, ku_get(UID_A, KU_HELD));
	/* LOOKUP would take 4 more references: EDQUOT, none taken. */
	ASSERT_EQ(0, kt_snap_take(adm, id1, cls, 2, s));
	EXPECT_EQ(-EDQUOT, kt_lookup_chain(a1, 7, 0, 4, l, &n_hit));
	kt_snap_same(_metadata, adm, id1, cls, 2, s, __LINE__);
	EXPECT_EQ(6, ku_get(UID_A, KU_HELD));
	/* B looks up the same chain, unhindered. */
	ASSERT_EQ(0, kt_lookup_chain(b, 7, 0, 4, l, &n_hit));
	EXPECT_EQ(4, n_hit);
	EXPECT_EQ(4, ku_get(UID_B, KU_HELD));

	/* PUT uncharges; then the lookup fits. */
	ASSERT_EQ(0, kt_put(a2, q, 2));
	EXPECT_EQ(4, ku_get(UID_A, KU_HELD));
	ASSERT_EQ(0, kt_lookup_chain(a1, 7, 0, 2, l, &n_hit));
	EXPECT_EQ(2, n_hit);
	EXPECT_EQ(6, ku_get(UID_A, KU_HELD));
	EXPECT_EQ(6 * KT_PAGE_BYTES, ku_get(UID_A, KU_HELD_BYTES));
	KT_CHECK(adm, id1);

	/* Close uncharges everything the file held. */
	kt_free(a1);
	EXPECT_EQ(0, ku_get(UID_A, KU_HELD));
	EXPECT_EQ(0, ku_get(UID_A, KU_HELD_BYTES));
	ASSERT_EQ(0, kt_alloc(a2, 6, q));
	EXPECT_EQ(6, ku_get(UID_A, KU_HELD));
	kt_free(a2);
	kt_free(b);
	EXPECT_EQ(0, ku_get(UID_A, KU_HELD));
	EXPECT_EQ(0, ku_get(UID_B, KU_HELD));
	free(s);
	kt_core_teardown(_metadata, id1);
}

/* Limit on bytes held: pools of different page sizes weigh differently. */
TEST(user_held_bytes_limit)
{
	struct kt_client *own, *small, *large, *b;
	__u32 p[16];

	/* Units of 16 KiB: "small" pages are 1 unit, "large" ones 4. */
	ASSERT_EQ(0, ku_core_init(0, 0, 0, 8 * KT_PAGE_BYTES));
	own = kt_new(3000, 3000, 0);
	small = kt_new(UID_A, UID_A, 0);
	large = kt_new(UID_A, UID_A, 0);
	b = kt_new(UID_B, UID_B, 0);
	ASSERT_NE(NULL, own);
	ASSERT_NE(NULL, small);
	ASSERT_NE(NULL, large);
	ASSERT_NE(NULL, b);
	ASSERT_EQ(0, ku_create_geom(own, "small", 16, 16, NULL));
	ASSERT_EQ(0, ku_create_geom(own, "large", 16, 64, NULL));
	ASSERT_EQ(0, kt_attach(small, "small", 0));
	ASSERT_EQ(0, kt_attach(large, "large", 0));
	ASSERT_EQ(0, kt_attach(b, "large", 0));

	ASSERT_EQ(0, kt_alloc(large, 1, p));			/* 4 units */
	EXPECT_EQ(4 * KT_PAGE_BYTES, ku_get(UID_A, KU_HELD_BYTES));
	ASSERT_EQ(0, kt_alloc(small, 3, p + 1));		/* 7 */
	EXPECT_EQ(-EDQUOT, kt_alloc(large, 1, p + 4));		/* would be 11 */
	EXPECT_EQ(-EDQUOT, kt_alloc(small, 2, p + 4));		/* would be 9 */
	EXPECT_EQ(7 * KT_PAGE_BYTES, ku_get(UID_A, KU_HELD_BYTES));
	EXPECT_EQ(4, ku_get(UID_A, KU_HELD));
	ASSERT_EQ(0, kt_alloc(small, 1, p + 4));		/* 8: the limit */
	EXPECT_EQ(8 * KT_PAGE_BYTES, ku_get(UID_A, KU_HELD_BYTES));
	EXPECT_EQ(-EDQUOT, kt_alloc(small, 1, p + 5));
	EXPECT_EQ(5, ku_get(UID_A, KU_HELD));
	/* B: its own budget of 8 units, 2 large pages. */
	ASSERT_EQ(0, kt_alloc(b, 2, p + 8));
	EXPECT_EQ(-EDQUOT, kt_alloc(b, 1, p + 10));
	ASSERT_EQ(0, kt_put(large, p, 1));
	EXPECT_EQ(4 * KT_PAGE_BYTES, ku_get(UID_A, KU_HELD_BYTES));
	ASSERT_EQ(0, kt_alloc(small, 4, p + 5));
	EXPECT_EQ(8 * KT_PAGE_BYTES, ku_get(UID_A, KU_HELD_BYTES));
	kt_core_teardown(_metadata, 0);
	EXPECT_EQ(0, kvs_core_objects());
}

/* An ALLOC that fails for want of pages gives back its charge too. */
TEST(user_charge_undone_on_enospc)
{
	struct kt_client *a, *a2;
	__u32 p[8], id;

	ASSERT_EQ(0, ku_core_init(0, 0, 100, 0));
	a = kt_new(UID_A, UID_A, 0);
	a2 = kt_new(UID_A, UID_A, 0);
	ASSERT_NE(NULL, a);
	ASSERT_NE(NULL, a2);
	ASSERT_EQ(0, kt_create(a, "tiny", 4, 0600, 0, 0, &id));
	ASSERT_EQ(0, kt_attach(a, "tiny", 0));
	ASSERT_EQ(0, kt_attach(a2, "tiny", 0));
	ASSERT_EQ(0, kt_alloc(a2, 2, p + 4));
	ASSERT_EQ(0, kt_alloc(a, 1, p));
	EXPECT_EQ(-ENOSPC, kt_alloc(a, 2, p + 1));
	EXPECT_EQ(3, ku_get(UID_A, KU_HELD));
	EXPECT_EQ(3 * KT_PAGE_BYTES, ku_get(UID_A, KU_HELD_BYTES));
	ASSERT_EQ(0, kt_put(a2, p + 4, 2));
	ASSERT_EQ(0, kt_alloc(a, 2, p + 1));
	/* A LOOKUP that misses takes (and charges) nothing. */
	ASSERT_EQ(0, kt_lookup_chain(a, 99, 0, 4, p + 3, NULL));
	EXPECT_EQ(3, ku_get(UID_A, KU_HELD));
	ASSERT_EQ(0, kt_put(a, p, 3));
	EXPECT_EQ(0, ku_get(UID_A, KU_HELD));
	EXPECT_EQ(0, ku_get(UID_A, KU_HELD_BYTES));
	kt_core_teardown(_metadata, id);
}

/*
 * Holdings taken by a command whose results cannot be written back are
 * given back, and so is their charge (the final copy of each fails).
 */
TEST(user_charge_undone_on_efault)
{
	struct kt_client *a;
	__u32 p[4], l[4], n_hit, id;
	int copies;

	ASSERT_EQ(0, ku_core_init(0, 0, 100, 0));
	a = kt_new(UID_A, UID_A, 0);
	ASSERT_NE(NULL, a);
	ASSERT_EQ(0, kt_create(a, "ef", 16, 0600, 0, 0, &id));
	ASSERT_EQ(0, kt_attach(a, "ef", 0));
	ASSERT_EQ(0, kt_alloc(a, 4, p));
	ASSERT_EQ(0, kt_publish_chain(a, p, 4, KVS_NO_PAGE, 8, 0, NULL, NULL));
	EXPECT_EQ(4, ku_get(UID_A, KU_HELD));

	/* ALLOC: count its copies, then fail the last one. */
	ASSERT_EQ(0, kt_alloc(a, 2, l));
	copies = a->copies;
	ASSERT_EQ(0, kt_put(a, l, 2));
	a->fail_at = copies;
	EXPECT_EQ(-EFAULT, kt_alloc(a, 2, l));
	a->fail_at = 0;
	EXPECT_EQ(4, ku_get(UID_A, KU_HELD));
	EXPECT_EQ(4, kt_held(a));

	/* LOOKUP likewise. */
	ASSERT_EQ(0, kt_lookup_chain(a, 8, 0, 4, l, &n_hit));
	ASSERT_EQ(4, n_hit);
	copies = a->copies;
	ASSERT_EQ(0, kt_put(a, l, 4));
	a->fail_at = copies;
	EXPECT_EQ(-EFAULT, kt_lookup_chain(a, 8, 0, 4, l, &n_hit));
	a->fail_at = 0;
	EXPECT_EQ(4, ku_get(UID_A, KU_HELD));
	EXPECT_EQ(4 * KT_PAGE_BYTES, ku_get(UID_A, KU_HELD_BYTES));
	EXPECT_EQ(4, kt_held(a));
	KT_CHECK(a, 0);
	kt_core_teardown(_metadata, id);
}

/* ---- KVS_IOC_USER_LIMITS ------------------------------------------------ */

TEST(user_limits_command)
{
	struct kt_client *a, *b, *adm;
	struct kvs_user_limits u;
	int i;

	ASSERT_EQ(0, ku_core_init(3, 1000, 500, 1ull << 40));
	a = kt_new(UID_A, UID_A, 0);
	b = kt_new(UID_B, UID_B, 0);
	adm = kt_new(0, 0, 1);
	ASSERT_NE(NULL, a);
	ASSERT_NE(NULL, b);
	ASSERT_NE(NULL, adm);
	ASSERT_EQ(0, kt_create(a, "lim", 10, 0666, 0, 0, NULL));

	/* No attachment needed; the caller's own figures, uid filled in. */
	memset(&u, 0, sizeof(u));
	ASSERT_EQ(0, kt_cmd(a, KVS_IOC_USER_LIMITS, &u));
	EXPECT_EQ(UID_A, u.uid);
	EXPECT_EQ(1, u.n_pools);
	EXPECT_EQ(10, u.pool_pages);
	EXPECT_EQ(0, u.held);
	EXPECT_EQ(3, u.max_pools);
	EXPECT_EQ(1000, u.max_pool_pages);
	EXPECT_EQ(500, u.max_held);
	EXPECT_EQ(1ull << 40, u.max_held_bytes);
	/* Its own uid named explicitly: fine. */
	ASSERT_EQ(0, ku_usage(a, UID_A, &u));
	EXPECT_EQ(1, u.n_pools);
	/* A user nothing is known of: zeros. */
	ASSERT_EQ(0, ku_usage(adm, 4242, &u));
	EXPECT_EQ(4242, u.uid);
	EXPECT_EQ(0, u.n_pools);
	EXPECT_EQ(3, u.max_pools);

	/* Another user's figures: admin only. */
	EXPECT_EQ(-EPERM, ku_usage(b, UID_A, &u));
	ASSERT_EQ(0, ku_usage(adm, UID_A, &u));
	EXPECT_EQ(1, u.n_pools);
	EXPECT_EQ(10, u.pool_pages);

	/* Bad input. */
	memset(&u, 0, sizeof(u));
	u.flags = 2;
	EXPECT_EQ(-EINVAL, kt_cmd(a, KVS_IOC_USER_LIMITS, &u));
	u.flags = 1u << 31;
	EXPECT_EQ(-EINVAL, kt_cmd(adm, KVS_IOC_USER_LIMITS, &u));
	for (i = 0; i < 4; i++) {
		memset(&u, 0, sizeof(u));
		u.reserved[i] = 1;
		EXPECT_EQ(-EINVAL, kt_cmd(a, KVS_IOC_USER_LIMITS, &u)) {
			TH_LOG("reserved[%d]", i);
		}
	}
	/* A uid without KVS_USER_UID. */
	memset(&u, 0, sizeof(u));
	u.uid = UID_A;
	EXPECT_EQ(-EINVAL, kt_cmd(a, KVS_IOC_USER_LIMITS, &u));
	kt_core_teardown(_metadata, 0);
}

TEST(core_init_rejects_bad_user_limits)
{
	struct kvs_limits lim = { .max_pools = KT_MAX_POOLS,
				  .max_pool_pages = KT_MAX_POOL_PAGES,
				  .max_user_pools = KVS_MAX_POOLS + 1 };

	EXPECT_EQ(-EINVAL, kvs_core_init(&lim));
	EXPECT_EQ(0, kvs_core_objects());
}

/* ---- STATS CHECK and PAGES ----------------------------------------------- */

TEST(check_is_admin_only)
{
	struct kt_client *own, *c, *adm;
	struct kvs_pool_stats st;
	__u32 id, p;

	ASSERT_EQ(0, kt_core_init());
	own = kt_new(UID_A, UID_A, 0);
	c = kt_new(UID_A, UID_A, 0);
	adm = kt_new(0, 0, 1);
	ASSERT_NE(NULL, own);
	ASSERT_NE(NULL, c);
	ASSERT_NE(NULL, adm);
	ASSERT_EQ(0, kt_create(own, "chk", 8, 0600, 0, 0, &id));
	ASSERT_EQ(0, kt_attach(c, "chk", 0));
	ASSERT_EQ(0, kt_alloc(c, 1, &p));
	/* Even the owner, attached or by id. */
	EXPECT_EQ(-EPERM, kt_stats(c, 0, KVS_STATS_CHECK, &st));
	EXPECT_EQ(-EPERM, kt_stats(own, id, KVS_STATS_CHECK, &st));
	/* Plain stats stay open to readers. */
	ASSERT_EQ(0, kt_stats(c, 0, 0, &st));
	EXPECT_EQ(1, st.n_owned);
	ASSERT_EQ(0, kt_stats(adm, id, KVS_STATS_CHECK, &st));
	EXPECT_EQ(1, st.n_owned);
	kt_core_teardown(_metadata, id);
}

TEST(pages_keys_for_owner_and_admin_only)
{
	struct kt_client *own, *peer, *adm;
	struct kvs_page_desc d[4];
	__u32 id, p[3], n, i;

	ASSERT_EQ(0, kt_core_init());
	own = kt_new(UID_A, 100, 0);
	peer = kt_new(UID_B, 100, 0);	/* same group: may read and attach */
	adm = kt_new(0, 0, 1);
	ASSERT_NE(NULL, own);
	ASSERT_NE(NULL, peer);
	ASSERT_NE(NULL, adm);
	ASSERT_EQ(0, kt_create(own, "keys", 4, 0660, 0, 0, &id));
	ASSERT_EQ(0, kt_attach(peer, "keys", 77));
	ASSERT_EQ(0, kt_alloc(peer, 3, p));
	/* Even the pages the peer published itself. */
	ASSERT_EQ(0, kt_publish_chain(peer, p, 3, KVS_NO_PAGE, 5, 0, NULL, NULL));

	ASSERT_EQ(0, kt_pages(peer, 0, 0, 4, d, &n));
	ASSERT_EQ(4, n);
	for (i = 0; i < 3; i++) {
		EXPECT_EQ(KVS_PAGE_SHARED, d[p[i]].state);
		EXPECT_EQ(1, d[p[i]].refcount);
		EXPECT_TRUE(kt_key_zero(&d[p[i]].key));
		EXPECT_EQ(0, d[p[i]].ns);
	}
	/* The structure (parents) is still shown. */
	EXPECT_EQ(p[0], d[p[1]].parent);
	ASSERT_EQ(0, kt_pages(own, id, 0, 4, d, &n));
	for (i = 0; i < 3; i++) {
		struct kvs_key k = kt_key(5, i);

		EXPECT_TRUE(kt_key_eq(&k, &d[p[i]].key));
		EXPECT_EQ(77, d[p[i]].ns);
	}
	ASSERT_EQ(0, kt_pages(adm, id, 0, 4, d, &n));
	EXPECT_EQ(77, d[p[2]].ns);
	kt_core_teardown(_metadata, id);
}

/* PAGES of more pages than one lock chunk: every page, in order. */
TEST(pages_across_chunks)
{
	static struct kvs_page_desc d[1000];
	struct kt_client *own, *c;
	__u32 id, p[64], n, i;

	ASSERT_EQ(0, kt_core_init());
	own = kt_new(UID_A, UID_A, 0);
	c = kt_new(UID_A, UID_A, 0);
	ASSERT_NE(NULL, own);
	ASSERT_NE(NULL, c);
	ASSERT_EQ(0, kt_create(own, "chunks", 1000, 0600, 0, 0, &id));
	ASSERT_EQ(0, kt_attach(c, "chunks", 3));
	ASSERT_EQ(0, kt_alloc(c, 64, p));
	ASSERT_EQ(0, kt_publish_chain(c, p, 64, KVS_NO_PAGE, 9, 0, NULL, NULL));
	ASSERT_EQ(0, kt_pages(own, id, 10, 1000, d, &n));
	ASSERT_EQ(990, n);
	for (i = 0; i < n; i++)
		ASSERT_EQ(10 + i, d[i].index);
	for (i = 0; i < 64; i++) {
		if (p[i] < 10)
			continue;
		EXPECT_EQ(KVS_PAGE_SHARED, d[p[i] - 10].state);
		EXPECT_EQ(3, d[p[i] - 10].ns);
	}
	KT_CHECK(c, 0);
	kt_core_teardown(_metadata, id);
}

/* ---- kvs_cmd_undo() ------------------------------------------------------ */

TEST(undo_create)
{
	struct kt_client *a, *c;
	struct kvs_pool_create r;
	struct kvs_pool_stats st;
	__u32 p, two[2];
	int fd, fds0;
	__u64 obj0;

	ASSERT_EQ(0, ku_core_init(1, 0, 0, 0));
	a = kt_new(UID_A, UID_A, 0);
	c = kt_new(UID_A, UID_A, 0);
	ASSERT_NE(NULL, a);
	ASSERT_NE(NULL, c);
	obj0 = kvs_core_objects();
	fds0 = test_open_fds();

	/* Undone: as if never made; the name and the user's slot are free. */
	fd = kt_memfd(8 * KT_PAGE_BYTES);
	ASSERT_LE(0, fd);
	kt_create_req(&r, "u", 8, 0600, 0, 0);
	r.mem_fd = fd;
	ASSERT_EQ(0, kt_cmd(a, KVS_IOC_POOL_CREATE, &r));
	EXPECT_EQ(1, ku_n_pools(a));
	kvs_cmd_undo(a->cl, KVS_IOC_POOL_CREATE, &r, &a->cred);
	EXPECT_EQ(0, ku_n_pools(a));
	EXPECT_EQ(obj0, kvs_core_objects());
	EXPECT_EQ(0, ku_get(UID_A, KU_POOLS));
	EXPECT_EQ(-ENOENT, kt_attach_owner(c, UID_A, "u", 0));
	EXPECT_EQ(-ENOENT, kt_stats(a, r.pool_id, 0, &st));
	/* The pool's reference on the memory went with it. */
	close(fd);
	EXPECT_EQ(fds0, test_open_fds());

	/* Undone after another file attached: that file keeps the pool. */
	ASSERT_EQ(0, kt_create(a, "u", 8, 0600, 0, 0, NULL));
	kt_create_req(&r, "u", 8, 0600, 0, 0);
	r.pool_id = 0;
	ASSERT_EQ(0, kt_attach_owner(c, UID_A, "u", 0));
	r.pool_id = kvs_client_pool_id(c->cl);
	kvs_cmd_undo(a->cl, KVS_IOC_POOL_CREATE, &r, &a->cred);
	EXPECT_EQ(0, ku_n_pools(a));
	ASSERT_EQ(0, kt_alloc(c, 2, two));
	ASSERT_EQ(0, kt_stats_check(c, 0, &st));
	EXPECT_EQ(2, st.n_owned);
	EXPECT_EQ(1, ku_get(UID_A, KU_POOLS));
	kt_free(c);
	EXPECT_EQ(0, ku_get(UID_A, KU_POOLS));
	EXPECT_EQ(obj0 - 1, kvs_core_objects());

	/* Only the pool that CREATE made: another owner's or name is left. */
	ASSERT_EQ(0, kt_create(a, "keep", 8, 0600, 0, 0, &p));
	kt_create_req(&r, "other", 8, 0600, 0, 0);
	r.pool_id = p;
	kvs_cmd_undo(a->cl, KVS_IOC_POOL_CREATE, &r, &a->cred);
	EXPECT_EQ(1, ku_n_pools(a));
	/* Commands that undo themselves: nothing. */
	kvs_cmd_undo(a->cl, KVS_IOC_INFO, &r, &a->cred);
	kvs_cmd_undo(a->cl, 0, &r, &a->cred);
	EXPECT_EQ(1, ku_n_pools(a));
	kt_core_teardown(_metadata, 0);
}

TEST(undo_attach)
{
	struct kt_client *own, *c, *o, *adm;
	struct kvs_pool_attach at;
	struct kvs_pool_stats st;
	__u32 id, id2, p[4], l[4], n_hit;
	__u64 obj1;

	ASSERT_EQ(0, ku_core_init(0, 0, 100, 0));
	own = kt_new(UID_B, UID_B, 0);
	c = kt_new(UID_A, UID_A, 0);
	o = kt_new(UID_A, UID_A, 0);
	adm = kt_new(0, 0, 1);
	ASSERT_NE(NULL, own);
	ASSERT_NE(NULL, c);
	ASSERT_NE(NULL, o);
	ASSERT_NE(NULL, adm);
	ASSERT_EQ(0, kt_create(own, "ua", 16, 0666, 0, 0, &id));
	ASSERT_EQ(0, kt_create(own, "ub", 16, 0666, 0, 0, &id2));
	ASSERT_EQ(0, kt_attach(o, "ua", 1));
	ASSERT_EQ(0, kt_alloc(o, 2, l));
	ASSERT_EQ(0, kt_publish_chain(o, l, 2, KVS_NO_PAGE, 3, 0, NULL, NULL));
	obj1 = kvs_core_objects();

	memset(&at, 0, sizeof(at));
	strcpy(at.name, "ua");
	at.owner = UID_B;
	at.ns = 1;
	ASSERT_EQ(0, kt_cmd(c, KVS_IOC_POOL_ATTACH, &at));
	/* Other threads of the file took pages meanwhile. */
	ASSERT_EQ(0, kt_alloc(c, 2, p));
	ASSERT_EQ(0, kt_publish_chain(c, p, 1, KVS_NO_PAGE, 4, 0, NULL, NULL));
	ASSERT_EQ(0, kt_lookup_chain(c, 3, 0, 2, l + 2, &n_hit));
	ASSERT_EQ(2, n_hit);
	EXPECT_EQ(6, ku_get(UID_A, KU_HELD));
	ASSERT_EQ(0, kt_stats(adm, id, 0, &st));
	EXPECT_EQ(2, st.n_files);

	kvs_cmd_undo(c->cl, KVS_IOC_POOL_ATTACH, &at, &c->cred);
	/* Detached: holds nothing, charged nothing, pool intact. */
	EXPECT_EQ(0, kvs_client_pool_id(c->cl));
	EXPECT_EQ(0, kvs_client_held(c->cl));
	EXPECT_EQ(-EBADFD, kt_alloc(c, 1, p));
	EXPECT_EQ(2, ku_get(UID_A, KU_HELD));
	ASSERT_EQ(0, kt_stats_check(adm, id, &st));
	EXPECT_EQ(1, st.n_files);
	EXPECT_EQ(2, st.n_held);
	EXPECT_EQ(2, st.n_shared);
	EXPECT_EQ(1, st.n_cached);	/* c's published page, now unreferenced */
	EXPECT_EQ(0, st.n_owned);
	KT_CHECK(adm, id);
	EXPECT_EQ(obj1, kvs_core_objects());
	/* It may attach again, anywhere. */
	ASSERT_EQ(0, kt_attach(c, "ub", 0));
	EXPECT_EQ(id2, kvs_client_pool_id(c->cl));
	ASSERT_EQ(0, kt_alloc(c, 1, p));
	EXPECT_EQ(3, ku_get(UID_A, KU_HELD));
	/* Undo on a file not attached: nothing. */
	kt_free(o);
	kvs_cmd_undo(own->cl, KVS_IOC_POOL_ATTACH, &at, &own->cred);
	kt_free(c);
	EXPECT_EQ(0, ku_get(UID_A, KU_HELD));
	kt_core_teardown(_metadata, id);
}

/*
 * The undo of an ATTACH races with other threads using the file: it waits
 * for them, and a pool destroyed meanwhile goes with the last of them (run
 * under ASan: a command using a freed pool is caught).
 */
struct ku_racer {
	struct kt_client *c;
	int stop;			/* atomic */
	long rounds;
};

static void *ku_race_main(void *arg)
{
	struct ku_racer *r = arg;
	__u32 p[4], l[4], n_hit;

	while (!__atomic_load_n(&r->stop, __ATOMIC_RELAXED)) {
		if (kt_alloc(r->c, 2, p) == 0) {
			if (kt_publish_chain(r->c, p, 2, KVS_NO_PAGE, 1, 0, NULL, NULL))
				kt_put(r->c, p, 2);
		}
		if (kt_lookup_chain(r->c, 1, 0, 2, l, &n_hit) == 0 && n_hit)
			kt_put(r->c, l, n_hit);
		r->rounds++;
	}
	return NULL;
}

TEST(undo_attach_races_with_commands)
{
	struct kt_client *own, *c;
	struct kvs_pool_attach at;
	struct ku_racer r = { 0 };
	pthread_t t;
	__u32 id;
	int i;

	ASSERT_EQ(0, ku_core_init(0, 0, 1000, 0));
	own = kt_new(UID_B, UID_B, 0);
	c = kt_new(UID_A, UID_A, 0);
	ASSERT_NE(NULL, own);
	ASSERT_NE(NULL, c);
	r.c = kt_new(UID_A, UID_A, 0);
	ASSERT_NE(NULL, r.c);
	/* The racer's commands go through the file the main thread undoes. */
	kvs_client_free(r.c->cl);
	r.c->cl = c->cl;
	ASSERT_EQ(0, pthread_create(&t, NULL, ku_race_main, &r));
	for (i = 0; i < 200; i++) {
		char name[16];

		snprintf(name, sizeof(name), "race%d", i % 4);
		if (kt_create(own, name, 16, 0666, 0, 0, &id))
			break;
		memset(&at, 0, sizeof(at));
		snprintf(at.name, sizeof(at.name), "%s", name);
		at.owner = UID_B;
		if (kt_cmd(c, KVS_IOC_POOL_ATTACH, &at))
			break;
		/* The pool's only other reference goes first. */
		if (kt_destroy(own, id))
			break;
		usleep(100);
		kvs_cmd_undo(c->cl, KVS_IOC_POOL_ATTACH, &at, &c->cred);
	}
	__atomic_store_n(&r.stop, 1, __ATOMIC_RELAXED);
	pthread_join(t, NULL);
	EXPECT_EQ(200, i);
	EXPECT_EQ(0, kvs_client_pool_id(c->cl));
	EXPECT_EQ(0, ku_get(UID_A, KU_HELD));
	TH_LOG("%ld racing rounds", r.rounds);
	/* r.c shares c's core client: free that once. */
	r.c->cl = kvs_client_new();
	kt_core_teardown(_metadata, 0);
}

/* ---- Pool memory -------------------------------------------------------- */

/* CREATE @r as a fresh copy each time (the core fills page_bytes in). */
static int ku_create_mem(struct kt_client *c, struct kvs_pool_create *r)
{
	struct kvs_pool_create copy = *r;
	int ret;

	copy.geom.page_bytes = 0;
	ret = kt_cmd(c, KVS_IOC_POOL_CREATE, &copy);
	r->pool_id = copy.pool_id;
	return ret;
}

TEST(mem_fd_refusals)
{
	struct kvs_pool_create r;
	struct kt_client *a;
	char path[] = "/tmp/kvs-core-user-XXXXXX";
	int fd, pfd[2], fds0;
	__u64 obj0;

	ASSERT_EQ(0, kt_core_init());
	a = kt_new(UID_A, UID_A, 0);
	ASSERT_NE(NULL, a);
	obj0 = kvs_core_objects();
	fds0 = test_open_fds();

	/* A memfd without F_SEAL_SHRINK: its creator could shrink it. */
	fd = memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, ftruncate(fd, 8 * KT_PAGE_BYTES));
	kt_create_req(&r, "m", 8, 0600, 0, 0);
	r.mem_fd = fd;
	EXPECT_EQ(-EPERM, ku_create_mem(a, &r));
	/* Other seals are not enough. */
	ASSERT_EQ(0, fcntl(fd, F_ADD_SEALS, F_SEAL_GROW));
	EXPECT_EQ(-EPERM, ku_create_mem(a, &r));
	/* Nor is F_SEAL_SHRINK while anyone may still add a write seal. */
	ASSERT_EQ(0, fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK));
	EXPECT_EQ(-EPERM, ku_create_mem(a, &r));
	close(fd);
	/* Sealed against writes: no attacher could map it writable. */
	fd = memfd_create("writesealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, ftruncate(fd, 8 * KT_PAGE_BYTES));
	ASSERT_EQ(0, fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_SEAL));
	r.mem_fd = fd;
	EXPECT_EQ(-EPERM, ku_create_mem(a, &r));
	close(fd);
	/* Without MFD_ALLOW_SEALING it can never be sealed. */
	fd = memfd_create("nosealing", MFD_CLOEXEC);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, ftruncate(fd, 8 * KT_PAGE_BYTES));
	r.mem_fd = fd;
	EXPECT_EQ(-EPERM, ku_create_mem(a, &r));
	close(fd);

	/* Sealed but shorter than the pool. */
	fd = kt_memfd(8 * KT_PAGE_BYTES - 1);
	ASSERT_LE(0, fd);
	r.mem_fd = fd;
	EXPECT_EQ(-ERANGE, ku_create_mem(a, &r));
	kt_create_req(&r, "m", 7, 0600, 0, 0);
	r.mem_fd = fd;
	EXPECT_EQ(0, ku_create_mem(a, &r));
	ASSERT_EQ(0, kt_destroy(a, r.pool_id));
	close(fd);

	/* A regular file on disk (not tmpfs) and a pipe: not a memfd. */
	fd = mkstemp(path);
	ASSERT_LE(0, fd);
	unlink(path);
	ASSERT_EQ(0, ftruncate(fd, 8 * KT_PAGE_BYTES));
	kt_create_req(&r, "m", 8, 0600, 0, 0);
	r.mem_fd = fd;
	/*
	 * /tmp may itself be a tmpfs, whose files answer F_GET_SEALS
	 * (F_SEAL_SEAL) like a memfd: refused all the same, not a memfd.
	 */
	EXPECT_EQ(-EINVAL, ku_create_mem(a, &r));
	close(fd);
	/* A file of this tree, as the tests run from the repository. */
	fd = open("Makefile", O_RDONLY);
	if (fd >= 0) {
		r.mem_fd = fd;
		EXPECT_EQ(-EINVAL, ku_create_mem(a, &r));
		close(fd);
	}
	fd = open(".", O_RDONLY | O_DIRECTORY);
	ASSERT_LE(0, fd);
	r.mem_fd = fd;
	EXPECT_EQ(-EINVAL, ku_create_mem(a, &r));
	close(fd);
	ASSERT_EQ(0, pipe(pfd));
	r.mem_fd = pfd[0];
	EXPECT_EQ(-EINVAL, ku_create_mem(a, &r));
	r.mem_fd = pfd[1];
	EXPECT_EQ(-EINVAL, ku_create_mem(a, &r));
	close(pfd[0]);
	close(pfd[1]);
	/* Not an open fd. */
	r.mem_fd = pfd[0];
	EXPECT_EQ(-EBADF, ku_create_mem(a, &r));

	/* None of that left a pool, a charge or a descriptor behind. */
	EXPECT_EQ(0, ku_n_pools(a));
	EXPECT_EQ(obj0, kvs_core_objects());
	EXPECT_EQ(0, ku_get(UID_A, KU_POOLS));
	EXPECT_EQ(fds0, test_open_fds());
	kt_core_teardown(_metadata, 0);
}

/* A sealed pool memory cannot be shrunk by anyone holding it. */
TEST(mem_fd_sealed_cannot_shrink)
{
	struct kvs_pool_create r;
	struct kvs_pool_attach at;
	struct kt_client *a, *c;
	int fd, mfd, ret;

	ASSERT_EQ(0, kt_core_init());
	a = kt_new(UID_A, UID_A, 0);
	c = kt_new(UID_B, UID_B, 0);
	ASSERT_NE(NULL, a);
	ASSERT_NE(NULL, c);
	fd = kt_memfd(4 * KT_PAGE_BYTES);
	ASSERT_LE(0, fd);
	kt_create_req(&r, "s", 4, 0666, 0, 0);
	r.mem_fd = fd;
	ASSERT_EQ(0, kt_cmd(a, KVS_IOC_POOL_CREATE, &r));
	memset(&at, 0, sizeof(at));
	strcpy(at.name, "s");
	at.owner = UID_A;
	at.flags = KVS_ATTACH_MEM_FD;
	c->call.mem_out = NULL;
	ASSERT_EQ(0, kvs_cmd(c->cl, KVS_IOC_POOL_ATTACH, &at, &c->call));
	ASSERT_NE(NULL, c->call.mem_out);
	mfd = kvs_host_mem_fd(c->call.mem_out);
	ret = ftruncate(mfd, KT_PAGE_BYTES);
	EXPECT_EQ(-1, ret);
	EXPECT_EQ(EPERM, errno);
	EXPECT_EQ(-1, ftruncate(fd, 0));
	kvs_host_mem_put(c->call.mem_out);
	c->call.mem_out = NULL;
	close(fd);
	kt_core_teardown(_metadata, 0);
}

TEST_HARNESS_MAIN
