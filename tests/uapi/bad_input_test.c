// SPDX-License-Identifier: GPL-2.0
/*
 * kvshare bad input (research/security.md section 5, the items that apply
 * to ioctls): every failing check is exercised with otherwise valid data,
 * expects the exact errno of <linux/kvshare.h>, and then checks that the
 * failed call changed nothing.
 *
 *  - non-zero flags bits, pads and reserved fields, on every command;
 *  - unknown command numbers;
 *  - struct size variants through the _IOC size bits;
 *  - array counts 0, 1, KVS_MAX_BATCH, KVS_MAX_BATCH + 1 and huge;
 *  - NULL, unmapped, kernel, read-only and partially mapped pointers;
 *  - stale, foreign and out-of-range page indices, PUT twice;
 *  - namespaces: a key is found in its own namespace only;
 *  - pool names, geometry and create parameters.
 */
#include <grp.h>
#include <sys/mman.h>

#include "kvs_test.h"

#define BAD_PAGES	64
#define BAD_NS		1

FIXTURE(bad) {
	struct kvs_env env;
	__u32 pool;
	char name[KVS_NAME_MAX];
	struct kvs_conn *a, *b;
};

FIXTURE_SETUP(bad)
{
	kvs_env_init(&self->env);
}

FIXTURE_TEARDOWN(bad)
{
	kvs_env_fini(&self->env);
}

#define BAD_BEGIN() do { \
	KVS_REQUIRE(&self->env); \
	self->pool = kvs_env_pool(_metadata, &self->env, BAD_PAGES, 0, self->name); \
	self->a = kvs_env_attach(_metadata, &self->env, self->name, BAD_NS); \
	self->b = kvs_env_attach(_metadata, &self->env, self->name, BAD_NS); \
} while (0)

#define BAD_END() do { \
	check_invariants(&self->env.ctl, self->pool); \
	kvs_env_assert_baseline(_metadata, &self->env); \
} while (0)

#define REQUIRE_USER_POINTERS(c) do { \
	if (!(kvs_conn_caps(c) & KVS_CAP_USER_POINTERS)) \
		SKIP(return, "transport does not take raw user pointers"); \
} while (0)

/* A snapshot of everything a failed call must leave alone. */
struct snap {
	struct kvs_pool_stats st;
	struct kvs_info info;
	long held_a, held_b;
};

static void take_snap(struct __test_metadata *_metadata, FIXTURE_DATA(bad) *self,
		      struct snap *s)
{
	ASSERT_EQ(0, kvs_stats(&self->env.ctl, self->pool, 0, &s->st));
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &s->info));
	s->held_a = kvs_held(self->a);
	s->held_b = kvs_held(self->b);
}

static void assert_unchanged(struct __test_metadata *_metadata,
			     FIXTURE_DATA(bad) *self, const struct snap *s0)
{
	struct snap s1;

	take_snap(_metadata, self, &s1);
	kvs_assert_same_state(_metadata, &s0->st, &s1.st);
	ASSERT_EQ(s0->st.publishes, s1.st.publishes);
	ASSERT_EQ(s0->st.evictions, s1.st.evictions);
	ASSERT_EQ(s0->info.n_pools, s1.info.n_pools);
	ASSERT_EQ(s0->info.n_objects, s1.info.n_objects);
	ASSERT_EQ(s0->held_a, s1.held_a);
	ASSERT_EQ(s0->held_b, s1.held_b);
}

/* ------------------------------------------------------------------ */
/* flags, pads, reserved fields                                       */
/* ------------------------------------------------------------------ */

struct mut {
	const char *what;
	size_t off, len;
	__u64 val;
};

#define MUT(type, member, v) \
	{ #type "." #member "=" #v, offsetof(type, member), \
	  sizeof(((type *)0)->member), (v) }
#define MUT_RES(type, i) \
	{ #type ".reserved[" #i "]", offsetof(type, reserved) + (i) * 8, 8, 1ull << 63 }

/*
 * Send @cmd with @valid (a request that would succeed) changed by each of
 * @m in turn: every one must fail with EINVAL and change nothing.
 */
static void expect_einval(struct __test_metadata *_metadata,
			  FIXTURE_DATA(bad) *self, struct kvs_conn *c,
			  unsigned long cmd, const void *valid,
			  const struct mut *m, size_t n)
{
	unsigned char buf[512];
	struct snap s0;
	size_t i;

	ASSERT_LE(_IOC_SIZE(cmd), sizeof(buf));
	for (i = 0; i < n; i++) {
		memcpy(buf, valid, _IOC_SIZE(cmd));
		ASSERT_LE(m[i].off + m[i].len, _IOC_SIZE(cmd));
		/* Little-endian: the low m[i].len bytes of val. */
		memcpy(buf + m[i].off, &m[i].val, m[i].len);
		take_snap(_metadata, self, &s0);
		ASSERT_EQ(-EINVAL, kvs_call(c, cmd, buf)) TH_LOG("%s", m[i].what);
		assert_unchanged(_metadata, self, &s0);
	}
}

TEST_F(bad, reserved_info)
{
	static const struct mut m[] = {
		MUT(struct kvs_info, flags, 1),
		MUT(struct kvs_info, flags, 0x80000000u),
		MUT(struct kvs_info, pad, 1),
		MUT_RES(struct kvs_info, 0), MUT_RES(struct kvs_info, 1),
		MUT_RES(struct kvs_info, 2), MUT_RES(struct kvs_info, 3),
	};
	struct kvs_info in;

	BAD_BEGIN();
	memset(&in, 0, sizeof(in));
	expect_einval(_metadata, self, self->a, KVS_IOC_INFO, &in, m, KVS_ARRAY_SIZE(m));
	ASSERT_EQ(0, kvs_call(self->a, KVS_IOC_INFO, &in));
	BAD_END();
}

TEST_F(bad, reserved_pool_create)
{
	static const struct mut m[] = {
		MUT(struct kvs_pool_create, flags, KVS_POOL_VALID << 1),
		MUT(struct kvs_pool_create, flags, 0x80000000u),
		MUT(struct kvs_pool_create, pad, 1),
		MUT(struct kvs_pool_create, geom.pad, 1),
		MUT(struct kvs_pool_create, geom.page_bytes, 4096),
		MUT_RES(struct kvs_pool_create, 0), MUT_RES(struct kvs_pool_create, 1),
		MUT_RES(struct kvs_pool_create, 2), MUT_RES(struct kvs_pool_create, 3),
	};
	struct kvs_pool_create pc;

	BAD_BEGIN();
	kvs_pool_args(&pc, "", 4);
	kvs_env_name(&self->env, pc.name, "res");
	expect_einval(_metadata, self, &self->env.ctl, KVS_IOC_POOL_CREATE, &pc,
		      m, KVS_ARRAY_SIZE(m));
	kvs_env_create(_metadata, &self->env, &pc, "");
	BAD_END();
}

TEST_F(bad, reserved_pool_attach)
{
	static const struct mut m[] = {
		MUT(struct kvs_pool_attach, flags, KVS_ATTACH_VALID << 1),
		MUT(struct kvs_pool_attach, flags, 0x80000000u),
		/* ABI 2: the pad after owner, and the 3 reserved words left. */
		MUT(struct kvs_pool_attach, pool_flags, 1),
		MUT(struct kvs_pool_attach, pool_flags, 0x80000000u),
		MUT_RES(struct kvs_pool_attach, 0), MUT_RES(struct kvs_pool_attach, 1),
		MUT_RES(struct kvs_pool_attach, 2),
	};
	struct kvs_pool_attach at, wrong;
	static const __u32 owners[] = { 1, 65534, 0x80000000u, 0xffffffffu };
	struct kvs_conn *c;
	struct snap s0;
	size_t i;

	BAD_BEGIN();
	c = kvs_env_open(_metadata, &self->env);
	memset(&at, 0, sizeof(at));
	snprintf(at.name, sizeof(at.name), "%s", self->name);
	expect_einval(_metadata, self, c, KVS_IOC_POOL_ATTACH, &at, m, KVS_ARRAY_SIZE(m));
	/*
	 * owner is an input, not a must-be-zero field: another uid (none of
	 * which owns a pool of this name) is ENOENT, not EINVAL.  On 19bd58c
	 * owner was reserved[0]: EINVAL.
	 */
	for (i = 0; i < KVS_ARRAY_SIZE(owners); i++) {
		wrong = at;
		wrong.owner = owners[i];
		take_snap(_metadata, self, &s0);
		ASSERT_EQ(-ENOENT, kvs_call(c, KVS_IOC_POOL_ATTACH, &wrong))
			TH_LOG("owner %u", owners[i]);
		assert_unchanged(_metadata, self, &s0);
	}
	/* Every refused ATTACH left the file unattached. */
	ASSERT_EQ(0, kvs_call(c, KVS_IOC_POOL_ATTACH, &at));
	ASSERT_EQ(self->pool, at.pool_id);
	ASSERT_EQ(0, at.owner);		/* an input: comes back as it was */
	BAD_END();
}

/*
 * KVS_IOC_USER_LIMITS (ABI 2): flags, reserved words, and a uid without
 * KVS_USER_UID are EINVAL.  On 19bd58c the command did not exist (ENOTTY).
 */
TEST_F(bad, reserved_user_limits)
{
	static const struct mut m[] = {
		MUT(struct kvs_user_limits, flags, KVS_USER_VALID << 1),
		MUT(struct kvs_user_limits, flags, 0x80000000u),
		MUT(struct kvs_user_limits, uid, 1),
		MUT(struct kvs_user_limits, uid, 0xffffffffu),
		MUT_RES(struct kvs_user_limits, 0), MUT_RES(struct kvs_user_limits, 1),
		MUT_RES(struct kvs_user_limits, 2), MUT_RES(struct kvs_user_limits, 3),
	};
	struct kvs_user_limits u, v;

	BAD_BEGIN();
	memset(&u, 0, sizeof(u));
	expect_einval(_metadata, self, self->a, KVS_IOC_USER_LIMITS, &u, m, KVS_ARRAY_SIZE(m));
	ASSERT_EQ(0, kvs_call(self->a, KVS_IOC_USER_LIMITS, &u));
	ASSERT_EQ(geteuid(), u.uid);
	ASSERT_EQ(0, u.flags);
	/* Asking for one's own uid by number gives the same figures. */
	ASSERT_EQ(0, kvs_user_limits(self->a, geteuid(), &v));
	ASSERT_EQ(u.uid, v.uid);
	ASSERT_EQ(u.n_pools, v.n_pools);
	ASSERT_EQ(u.max_pools, v.max_pools);
	ASSERT_EQ(u.pool_pages, v.pool_pages);
	ASSERT_EQ(u.max_held, v.max_held);
	ASSERT_EQ(u.held, v.held);
	/* No attachment needed; nothing was written into reserved. */
	ASSERT_EQ(0, kvs_call(&self->env.ctl, KVS_IOC_USER_LIMITS, &u));
	ASSERT_EQ(0, u.reserved[0] | u.reserved[1] | u.reserved[2] | u.reserved[3]);
	BAD_END();
}

TEST_F(bad, reserved_pool_destroy)
{
	static const struct mut m[] = {
		MUT(struct kvs_pool_destroy, flags, 1),
		MUT(struct kvs_pool_destroy, flags, 0x80000000u),
		MUT_RES(struct kvs_pool_destroy, 0), MUT_RES(struct kvs_pool_destroy, 1),
	};
	struct kvs_pool_destroy d;
	__u32 id;

	BAD_BEGIN();
	id = kvs_env_pool(_metadata, &self->env, 2, 0, NULL);
	memset(&d, 0, sizeof(d));
	d.pool_id = id;
	expect_einval(_metadata, self, &self->env.ctl, KVS_IOC_POOL_DESTROY, &d,
		      m, KVS_ARRAY_SIZE(m));
	ASSERT_EQ(0, kvs_call(&self->env.ctl, KVS_IOC_POOL_DESTROY, &d));
	kvs_env_untrack(&self->env, id);
	BAD_END();
}

TEST_F(bad, reserved_pool_list)
{
	static const struct mut m[] = {
		MUT(struct kvs_pool_list, flags, 1),
		MUT(struct kvs_pool_list, flags, 0x80000000u),
		MUT_RES(struct kvs_pool_list, 0), MUT_RES(struct kvs_pool_list, 1),
	};
	struct kvs_pool_list l;

	BAD_BEGIN();
	memset(&l, 0, sizeof(l));
	expect_einval(_metadata, self, self->a, KVS_IOC_POOL_LIST, &l, m, KVS_ARRAY_SIZE(m));
	ASSERT_EQ(0, kvs_call(self->a, KVS_IOC_POOL_LIST, &l));
	ASSERT_LE(1, l.count);
	BAD_END();
}

TEST_F(bad, reserved_pool_stats)
{
	static const struct mut m[] = {
		MUT(struct kvs_pool_stats, flags, KVS_STATS_VALID << 1),
		MUT(struct kvs_pool_stats, flags, 0x80000000u),
		MUT_RES(struct kvs_pool_stats, 0), MUT_RES(struct kvs_pool_stats, 1),
		MUT(struct kvs_pool_stats, n_claimed, 1),
		MUT(struct kvs_pool_stats, inflight_waits, 1),
	};
	struct kvs_pool_stats st;

	BAD_BEGIN();
	memset(&st, 0, sizeof(st));
	expect_einval(_metadata, self, self->a, KVS_IOC_POOL_STATS, &st, m, KVS_ARRAY_SIZE(m));
	ASSERT_EQ(0, kvs_call(self->a, KVS_IOC_POOL_STATS, &st));
	ASSERT_EQ(BAD_PAGES, st.n_pages);
	BAD_END();
}

TEST_F(bad, reserved_pages)
{
	static const struct mut m[] = {
		MUT(struct kvs_pages, flags, 1),
		MUT(struct kvs_pages, flags, 0x80000000u),
		MUT(struct kvs_pages, pad, 1),
		MUT_RES(struct kvs_pages, 0), MUT_RES(struct kvs_pages, 1),
	};
	struct kvs_page_desc d[2];
	struct kvs_pages p;

	BAD_BEGIN();
	memset(&p, 0, sizeof(p));
	p.count = 2;
	p.pages = KVS_PTR(d);
	expect_einval(_metadata, self, self->a, KVS_IOC_PAGES, &p, m, KVS_ARRAY_SIZE(m));
	ASSERT_EQ(0, kvs_call(self->a, KVS_IOC_PAGES, &p));
	ASSERT_EQ(2, p.count);
	BAD_END();
}

TEST_F(bad, reserved_quota)
{
	static const struct mut m[] = {
		MUT(struct kvs_quota, flags, KVS_QUOTA_VALID << 1),
		MUT(struct kvs_quota, flags, 0x80000000u),
		MUT(struct kvs_quota, pad, 1),
		MUT_RES(struct kvs_quota, 0), MUT_RES(struct kvs_quota, 1),
	};
	struct kvs_quota q;

	BAD_BEGIN();
	memset(&q, 0, sizeof(q));
	q.flags = KVS_QUOTA_SET;
	q.max_pages = 10;
	expect_einval(_metadata, self, self->a, KVS_IOC_QUOTA, &q, m, KVS_ARRAY_SIZE(m));
	ASSERT_EQ(0, kvs_quota_get(self->a, &q));
	ASSERT_EQ(BAD_PAGES, q.max_pages);	/* no refused SET applied */
	ASSERT_EQ(0, kvs_quota_set(self->a, 10));
	BAD_END();
}

TEST_F(bad, reserved_alloc)
{
	static const struct mut m[] = {
		MUT(struct kvs_alloc, flags, KVS_ALLOC_VALID << 1),
		MUT(struct kvs_alloc, flags, 0x80000000u),
		MUT_RES(struct kvs_alloc, 0),
	};
	struct kvs_alloc a;
	__u32 p[2];

	BAD_BEGIN();
	memset(&a, 0, sizeof(a));
	a.count = 2;
	a.pages = KVS_PTR(p);
	expect_einval(_metadata, self, self->a, KVS_IOC_ALLOC, &a, m, KVS_ARRAY_SIZE(m));
	/* keys without KVS_ALLOC_CLAIM (a readable array: libkv copies it). */
	{
		struct kvs_key k[2];
		struct snap s0;

		memset(k, 0, sizeof(k));
		a.keys = KVS_PTR(k);
		take_snap(_metadata, self, &s0);
		ASSERT_EQ(-EINVAL, kvs_call(self->a, KVS_IOC_ALLOC, &a));
		assert_unchanged(_metadata, self, &s0);
		a.keys = 0;
	}
	ASSERT_EQ(0, kvs_call(self->a, KVS_IOC_ALLOC, &a));
	ASSERT_EQ(2, kvs_held(self->a));
	BAD_END();
}

TEST_F(bad, reserved_publish)
{
	static const struct mut m[] = {
		MUT(struct kvs_publish, flags, 1),
		MUT(struct kvs_publish, flags, 0x80000000u),
		MUT(struct kvs_publish, pad, 1),
		MUT_RES(struct kvs_publish, 0), MUT_RES(struct kvs_publish, 1),
	};
	struct kvs_publish_entry e[2];
	struct kvs_publish pub;
	struct snap s0;
	__u32 p[2];

	BAD_BEGIN();
	ASSERT_EQ(0, kvs_alloc(self->a, 2, p));
	memset(e, 0, sizeof(e));
	e[0].page = p[0];
	e[0].parent = KVS_NO_PAGE;
	e[0].key = make_key(1, 0);
	e[1].page = p[1];
	e[1].parent = KVS_PARENT_PREV;
	e[1].key = make_key(1, 1);
	memset(&pub, 0, sizeof(pub));
	pub.count = 2;
	pub.entries = KVS_PTR(e);
	expect_einval(_metadata, self, self->a, KVS_IOC_PUBLISH, &pub, m, KVS_ARRAY_SIZE(m));

	/* Entry flags are out only: set on input they are refused. */
	take_snap(_metadata, self, &s0);
	e[1].flags = KVS_PUBLISHED_DUP;
	ASSERT_EQ(-EINVAL, kvs_publish(self->a, e, 2, NULL));
	assert_unchanged(_metadata, self, &s0);
	e[1].flags = 0x80000000u;
	ASSERT_EQ(-EINVAL, kvs_publish(self->a, e, 2, NULL));
	assert_unchanged(_metadata, self, &s0);
	ASSERT_PAGE(self->a, 0, p[0], KVS_PAGE_OWNED, 0);
	ASSERT_PAGE(self->a, 0, p[1], KVS_PAGE_OWNED, 0);

	e[1].flags = 0;
	ASSERT_EQ(0, kvs_call(self->a, KVS_IOC_PUBLISH, &pub));
	ASSERT_PAGE(self->a, 0, p[1], KVS_PAGE_SHARED, 1);
	BAD_END();
}

TEST_F(bad, reserved_lookup)
{
	static const struct mut m[] = {
		MUT(struct kvs_lookup, flags, KVS_LOOKUP_VALID << 1),
		MUT(struct kvs_lookup, flags, 0x80000000u),
		MUT(struct kvs_lookup, n_inflight, 1),
		MUT_RES(struct kvs_lookup, 0), MUT_RES(struct kvs_lookup, 1),
	};
	struct kvs_key k = make_key(2, 0);
	struct kvs_lookup l;
	__u32 p, q;

	BAD_BEGIN();
	ASSERT_EQ(0, kvs_alloc(self->a, 1, &p));
	ASSERT_EQ(0, kvs_publish_chain(self->a, &p, 1, KVS_NO_PAGE, 2, 0, NULL, NULL));
	memset(&l, 0, sizeof(l));
	l.count = 1;
	l.keys = KVS_PTR(&k);
	l.pages = KVS_PTR(&q);
	expect_einval(_metadata, self, self->b, KVS_IOC_LOOKUP, &l, m, KVS_ARRAY_SIZE(m));
	ASSERT_PAGE(self->a, 0, p, KVS_PAGE_SHARED, 1);
	ASSERT_EQ(0, kvs_call(self->b, KVS_IOC_LOOKUP, &l));
	ASSERT_EQ(1, l.n_hit);
	ASSERT_EQ(p, q);
	BAD_END();
}

TEST_F(bad, reserved_put)
{
	static const struct mut m[] = {
		MUT(struct kvs_put, flags, 1),
		MUT(struct kvs_put, flags, 0x80000000u),
		MUT_RES(struct kvs_put, 0), MUT_RES(struct kvs_put, 1),
	};
	struct kvs_put put;
	__u32 p;

	BAD_BEGIN();
	ASSERT_EQ(0, kvs_alloc(self->a, 1, &p));
	memset(&put, 0, sizeof(put));
	put.count = 1;
	put.pages = KVS_PTR(&p);
	expect_einval(_metadata, self, self->a, KVS_IOC_PUT, &put, m, KVS_ARRAY_SIZE(m));
	ASSERT_PAGE(self->a, 0, p, KVS_PAGE_OWNED, 0);
	ASSERT_EQ(0, kvs_call(self->a, KVS_IOC_PUT, &put));
	ASSERT_PAGE(self->a, 0, p, KVS_PAGE_FREE, 0);
	BAD_END();
}

/* ------------------------------------------------------------------ */
/* command numbers and struct sizes                                   */
/* ------------------------------------------------------------------ */

TEST_F(bad, unknown_ioctl_enotty)
{
	const unsigned long cmds[] = {
		/* unused numbers of our magic */
		_IOWR(KVS_IOC_MAGIC, 0x09, struct kvs_alloc),
		_IOWR(KVS_IOC_MAGIC, 0x0f, struct kvs_alloc),
		_IOWR(KVS_IOC_MAGIC, 0x14, struct kvs_alloc),
		_IOWR(KVS_IOC_MAGIC, 0x30, struct kvs_alloc),
		_IOWR(KVS_IOC_MAGIC, 0xff, struct kvs_alloc),
		/* a real number under another magic */
		_IOWR(KVS_IOC_MAGIC + 1, _IOC_NR(KVS_IOC_ALLOC), struct kvs_alloc),
		_IOWR('k', _IOC_NR(KVS_IOC_ALLOC), struct kvs_alloc),
		/* a real number with another direction: commands are _IOWR */
		_IOW(KVS_IOC_MAGIC, _IOC_NR(KVS_IOC_ALLOC), struct kvs_alloc),
		_IOR(KVS_IOC_MAGIC, _IOC_NR(KVS_IOC_ALLOC), struct kvs_alloc),
		_IO(KVS_IOC_MAGIC, _IOC_NR(KVS_IOC_ALLOC)),
		/* a terminal ioctl */
		0x5401 /* TCGETS */,
	};
	struct kvs_alloc a;
	struct snap s0;
	__u32 p[4];
	size_t i;

	BAD_BEGIN();
	if (!(kvs_conn_caps(self->a) & KVS_CAP_RAW_CMD))
		SKIP(return, "transport cannot send arbitrary command numbers");
	for (i = 0; i < KVS_ARRAY_SIZE(cmds); i++) {
		memset(&a, 0, sizeof(a));
		a.count = 1;
		a.pages = KVS_PTR(p);
		take_snap(_metadata, self, &s0);
		ASSERT_EQ(-ENOTTY, kvs_call(self->a, cmds[i], &a)) TH_LOG("cmd 0x%lx", cmds[i]);
		assert_unchanged(_metadata, self, &s0);
	}
	BAD_END();
}

/*
 * A struct one size larger than the arbiter knows, with a non-zero byte
 * in the tail: E2BIG, for every command, before anything happens.
 */
TEST_F(bad, size_longer_nonzero_tail_e2big)
{
	struct {
		unsigned long cmd;
		struct kvs_conn *c;
	} cmds[] = {
		{ KVS_IOC_INFO, NULL }, { KVS_IOC_POOL_CREATE, NULL },
		{ KVS_IOC_POOL_ATTACH, NULL }, { KVS_IOC_POOL_DESTROY, NULL },
		{ KVS_IOC_POOL_LIST, NULL }, { KVS_IOC_POOL_STATS, NULL },
		{ KVS_IOC_PAGES, NULL }, { KVS_IOC_QUOTA, NULL },
		{ KVS_IOC_ALLOC, NULL }, { KVS_IOC_PUBLISH, NULL },
		{ KVS_IOC_LOOKUP, NULL }, { KVS_IOC_PUT, NULL },
		{ KVS_IOC_USER_LIMITS, NULL },
	};
	static const unsigned int extra[] = { 8, 64, 1000 };
	unsigned char buf[2048];
	struct kvs_publish_entry e;
	struct kvs_page_desc pd;
	struct kvs_pool_desc ld;
	struct kvs_key k = make_key(3, 0);
	struct kvs_conn *fresh;
	struct snap s0;
	__u32 owned, q[2], id;
	size_t i, j, pos;

	BAD_BEGIN();
	if (!(kvs_conn_caps(self->a) & KVS_CAP_RAW_CMD))
		SKIP(return, "transport cannot send arbitrary sizes");
	fresh = kvs_env_open(_metadata, &self->env);
	id = kvs_env_pool(_metadata, &self->env, 2, 0, NULL);
	ASSERT_EQ(0, kvs_alloc(self->a, 1, &owned));
	for (i = 0; i < KVS_ARRAY_SIZE(cmds); i++) {
		unsigned long cmd = cmds[i].cmd;
		size_t size = _IOC_SIZE(cmd);
		struct kvs_conn *c = self->a;

		/* A request that succeeds at its own size. */
		memset(buf, 0, sizeof(buf));
		switch (_IOC_NR(cmd)) {
		case _IOC_NR(KVS_IOC_POOL_CREATE): {
			struct kvs_pool_create *pc = (void *)buf;

			kvs_pool_args(pc, "", 2);
			kvs_env_name(&self->env, pc->name, "big");
			c = &self->env.ctl;
			break;
		}
		case _IOC_NR(KVS_IOC_POOL_ATTACH):
			snprintf(((struct kvs_pool_attach *)buf)->name, KVS_NAME_MAX,
				 "%s", self->name);
			c = fresh;
			break;
		case _IOC_NR(KVS_IOC_POOL_DESTROY):
			((struct kvs_pool_destroy *)buf)->pool_id = id;
			c = &self->env.ctl;
			break;
		case _IOC_NR(KVS_IOC_POOL_LIST):
			((struct kvs_pool_list *)buf)->count = 1;
			((struct kvs_pool_list *)buf)->pools = KVS_PTR(&ld);
			break;
		case _IOC_NR(KVS_IOC_PAGES):
			((struct kvs_pages *)buf)->count = 1;
			((struct kvs_pages *)buf)->pages = KVS_PTR(&pd);
			break;
		case _IOC_NR(KVS_IOC_ALLOC):
			((struct kvs_alloc *)buf)->count = 2;
			((struct kvs_alloc *)buf)->pages = KVS_PTR(q);
			break;
		case _IOC_NR(KVS_IOC_PUBLISH):
			memset(&e, 0, sizeof(e));
			e.page = owned;
			e.parent = KVS_NO_PAGE;
			e.key = k;
			((struct kvs_publish *)buf)->count = 1;
			((struct kvs_publish *)buf)->entries = KVS_PTR(&e);
			break;
		case _IOC_NR(KVS_IOC_LOOKUP):
			((struct kvs_lookup *)buf)->count = 1;
			((struct kvs_lookup *)buf)->keys = KVS_PTR(&k);
			((struct kvs_lookup *)buf)->pages = KVS_PTR(q);
			break;
		case _IOC_NR(KVS_IOC_PUT):
			((struct kvs_put *)buf)->count = 1;
			((struct kvs_put *)buf)->pages = KVS_PTR(&owned);
			break;
		}
		for (j = 0; j < KVS_ARRAY_SIZE(extra); j++) {
			/* Non-zero first, then last, byte of the unknown tail. */
			for (pos = 0; pos < 2; pos++) {
				size_t at = pos ? size + extra[j] - 1 : size;

				memset(buf + size, 0, extra[j]);
				buf[at] = 0x01;
				take_snap(_metadata, self, &s0);
				ASSERT_EQ(-E2BIG, kvs_call_sized(c, cmd, size + extra[j], buf))
					TH_LOG("cmd nr 0x%x size %zu+%u, byte %zu",
					       (unsigned int)_IOC_NR(cmd), size, extra[j], at);
				assert_unchanged(_metadata, self, &s0);
			}
		}
		memset(buf + size, 0, sizeof(buf) - size);
	}
	/* Nothing above took effect: the file is unattached, the pool alive. */
	ASSERT_EQ(-EBADFD, kvs_alloc(fresh, 1, q));
	ASSERT_EQ(0, kvs_stats(&self->env.ctl, id, 0, &s0.st));
	ASSERT_PAGE(self->a, 0, owned, KVS_PAGE_OWNED, 0);
	BAD_END();
}

/* A longer struct whose unknown tail is zero is accepted. */
TEST_F(bad, size_longer_zero_tail_accepted)
{
	static const unsigned int extra[] = { 8, 64, 4096 + 8 };
	static unsigned char buf[1u << _IOC_SIZEBITS];
	struct kvs_info *in = (void *)buf;
	struct kvs_alloc *al = (void *)buf;
	struct kvs_publish *pub = (void *)buf;
	struct kvs_publish_entry e;
	struct kvs_pool_stats *st = (void *)buf;
	__u32 p[2];
	size_t j, i;

	BAD_BEGIN();
	if (!(kvs_conn_caps(self->a) & KVS_CAP_RAW_CMD))
		SKIP(return, "transport cannot send arbitrary sizes");
	for (j = 0; j < KVS_ARRAY_SIZE(extra); j++) {
		size_t sz;

		memset(buf, 0, sizeof(buf));
		sz = sizeof(*in) + extra[j];
		ASSERT_EQ(0, kvs_call_sized(self->a, KVS_IOC_INFO, sz, buf));
		ASSERT_EQ(KVS_ABI_VERSION, in->abi_version);
		ASSERT_EQ(KVS_MAX_BATCH, in->max_batch);
		for (i = sizeof(*in); i < sz; i++)
			ASSERT_EQ(0, buf[i]);

		memset(buf, 0, sizeof(buf));
		al->count = 1;
		al->pages = KVS_PTR(p);
		ASSERT_EQ(0, kvs_call_sized(self->a, KVS_IOC_ALLOC, sizeof(*al) + extra[j], buf));
		ASSERT_PAGE(self->a, 0, p[0], KVS_PAGE_OWNED, 0);

		memset(buf, 0, sizeof(buf));
		memset(&e, 0, sizeof(e));
		e.page = p[0];
		e.parent = KVS_NO_PAGE;
		e.key = make_key(4, j);
		pub->count = 1;
		pub->entries = KVS_PTR(&e);
		ASSERT_EQ(0, kvs_call_sized(self->a, KVS_IOC_PUBLISH, sizeof(*pub) + extra[j], buf));
		ASSERT_EQ(0, pub->n_dup);
		ASSERT_EQ(p[0], e.result);
		ASSERT_PAGE(self->a, 0, p[0], KVS_PAGE_SHARED, 1);

		memset(buf, 0, sizeof(buf));
		ASSERT_EQ(0, kvs_call_sized(self->a, KVS_IOC_POOL_STATS, sizeof(*st) + extra[j], buf));
		ASSERT_EQ(BAD_PAGES, st->n_pages);
		ASSERT_EQ(j + 1, st->n_shared);
	}
	/* The largest size the _IOC bits can carry (14 bits). */
	memset(buf, 0, sizeof(buf));
	ASSERT_EQ(0, kvs_call_sized(self->a, KVS_IOC_INFO, (1u << _IOC_SIZEBITS) - 1, buf));
	ASSERT_EQ(KVS_ABI_VERSION, in->abi_version);
	BAD_END();
}

/*
 * An older, shorter struct is zero-extended, and only the bytes the
 * caller passed are written back.
 */
TEST_F(bad, size_shorter_zero_extended)
{
	unsigned char buf[512];
	struct kvs_info *in = (void *)buf;
	struct kvs_pool_stats *st = (void *)buf;
	struct kvs_alloc *al = (void *)buf;
	struct kvs_lookup *lk = (void *)buf;
	struct kvs_pool_attach *at = (void *)buf;
	struct kvs_key k = make_key(5, 0);
	struct snap s0;
	struct kvs_conn *c;
	__u32 p[2] = { 0, 0 }, q = 0xdeadbeef;
	size_t i, sz;

	BAD_BEGIN();
	if (!(kvs_conn_caps(self->a) & KVS_CAP_RAW_CMD))
		SKIP(return, "transport cannot send arbitrary sizes");

	/* INFO: just abi_version and flags. */
	memset(buf, 0xa5, sizeof(buf));
	memset(buf, 0, 8);
	ASSERT_EQ(0, kvs_call_sized(self->a, KVS_IOC_INFO, 8, buf));
	ASSERT_EQ(KVS_ABI_VERSION, in->abi_version);
	for (i = 8; i < sizeof(*in); i++)
		ASSERT_EQ(0xa5, buf[i]) TH_LOG("byte %zu written back", i);

	/* STATS up to n_cached. */
	sz = offsetof(struct kvs_pool_stats, n_evictable);
	memset(buf, 0xa5, sizeof(buf));
	memset(buf, 0, sz);
	ASSERT_EQ(0, kvs_call_sized(self->a, KVS_IOC_POOL_STATS, sz, buf));
	ASSERT_EQ(BAD_PAGES, st->n_pages);
	ASSERT_EQ(BAD_PAGES, st->n_free);
	for (i = sz; i < sizeof(*st); i++)
		ASSERT_EQ(0xa5, buf[i]) TH_LOG("byte %zu written back", i);

	/* ALLOC without its reserved words. */
	sz = offsetof(struct kvs_alloc, reserved);
	memset(buf, 0xa5, sizeof(buf));
	memset(buf, 0, sz);
	al->count = 2;
	al->pages = KVS_PTR(p);
	ASSERT_EQ(0, kvs_call_sized(self->a, KVS_IOC_ALLOC, sz, buf));
	ASSERT_NE(p[0], p[1]);
	ASSERT_PAGE(self->a, 0, p[0], KVS_PAGE_OWNED, 0);
	ASSERT_PAGE(self->a, 0, p[1], KVS_PAGE_OWNED, 0);
	/* Cut before `pages`: it reads as 0, a NULL array: EFAULT, no page. */
	take_snap(_metadata, self, &s0);
	memset(buf, 0, sizeof(buf));
	al->count = 1;
	al->pages = KVS_PTR(p);
	ASSERT_EQ(-EFAULT, kvs_call_sized(self->a, KVS_IOC_ALLOC, 8, buf));
	assert_unchanged(_metadata, self, &s0);

	/* PUBLISH p[0] normally, then LOOKUP without the reserved words. */
	ASSERT_EQ(0, kvs_publish_chain(self->a, p, 1, KVS_NO_PAGE, 5, 0, NULL, NULL));
	sz = offsetof(struct kvs_lookup, reserved);
	memset(buf, 0xa5, sizeof(buf));
	memset(buf, 0, sz);
	lk->count = 1;
	lk->keys = KVS_PTR(&k);
	lk->pages = KVS_PTR(&q);
	ASSERT_EQ(0, kvs_call_sized(self->b, KVS_IOC_LOOKUP, sz, buf));
	ASSERT_EQ(1, lk->n_hit);
	ASSERT_EQ(p[0], q);
	for (i = sz; i < sizeof(*lk); i++)
		ASSERT_EQ(0xa5, buf[i]) TH_LOG("byte %zu written back", i);
	ASSERT_PAGE(self->a, 0, p[0], KVS_PAGE_SHARED, 2);

	/*
	 * ATTACH of ABI 1, cut before `owner`: zero-extended, it asks for
	 * root's pool of that name, which the fixture's is.
	 */
	c = kvs_env_open(_metadata, &self->env);
	sz = offsetof(struct kvs_pool_attach, owner);
	memset(buf, 0xa5, sizeof(buf));
	memset(buf, 0, sz);
	snprintf(at->name, KVS_NAME_MAX, "%s", self->name);
	ASSERT_EQ(0, kvs_call_sized(c, KVS_IOC_POOL_ATTACH, sz, buf));
	ASSERT_EQ(self->pool, at->pool_id);
	for (i = sz; i < sizeof(*at); i++)
		ASSERT_EQ(0xa5, buf[i]) TH_LOG("byte %zu written back", i);
	kvs_conn_close(c);

	/* ATTACH without its reserved words. */
	c = kvs_env_open(_metadata, &self->env);
	sz = offsetof(struct kvs_pool_attach, reserved);
	memset(buf, 0xa5, sizeof(buf));
	memset(buf, 0, sz);
	snprintf(at->name, KVS_NAME_MAX, "%s", self->name);
	ASSERT_EQ(0, kvs_call_sized(c, KVS_IOC_POOL_ATTACH, sz, buf));
	ASSERT_EQ(self->pool, at->pool_id);
	ASSERT_EQ(BAD_PAGES, at->n_pages);
	for (i = sz; i < sizeof(*at); i++)
		ASSERT_EQ(0xa5, buf[i]) TH_LOG("byte %zu written back", i);
	BAD_END();
}

/* ------------------------------------------------------------------ */
/* array counts                                                       */
/* ------------------------------------------------------------------ */

TEST_F(bad, counts_zero_and_too_big)
{
	static const __u32 big[] = { KVS_MAX_BATCH + 1, 0x80000000u, 0xffffffffu };
	struct kvs_publish_entry e[2];
	struct kvs_key k[2] = { make_key(6, 0), make_key(6, 1) };
	struct kvs_page_desc d[2];
	struct kvs_alloc al;
	struct kvs_publish pub;
	struct kvs_lookup lk;
	struct kvs_put put;
	struct kvs_pages pg;
	struct snap s0;
	__u32 p[2], q[2];
	size_t i;

	BAD_BEGIN();
	ASSERT_EQ(0, kvs_alloc(self->a, 2, p));
	memset(e, 0, sizeof(e));
	e[0].page = p[0];
	e[0].parent = KVS_NO_PAGE;
	e[0].key = k[0];
	e[1].page = p[1];
	e[1].parent = KVS_PARENT_PREV;
	e[1].key = k[1];

	take_snap(_metadata, self, &s0);
	/* count 0 */
	ASSERT_EQ(-EINVAL, kvs_alloc(self->a, 0, q));
	ASSERT_EQ(-EINVAL, kvs_publish(self->a, e, 0, NULL));
	ASSERT_EQ(-EINVAL, kvs_lookup(self->a, k, 0, q, NULL));
	ASSERT_EQ(-EINVAL, kvs_put(self->a, p, 0));
	ASSERT_EQ(-EINVAL, kvs_pages(self->a, 0, 0, 0, d, NULL));
	assert_unchanged(_metadata, self, &s0);

	/* more than KVS_MAX_BATCH, with small but valid arrays behind */
	for (i = 0; i < KVS_ARRAY_SIZE(big); i++) {
		memset(&al, 0, sizeof(al));
		al.count = big[i];
		al.pages = KVS_PTR(q);
		ASSERT_EQ(-E2BIG, kvs_call(self->a, KVS_IOC_ALLOC, &al)) TH_LOG("%u", big[i]);
		memset(&pub, 0, sizeof(pub));
		pub.count = big[i];
		pub.entries = KVS_PTR(e);
		ASSERT_EQ(-E2BIG, kvs_call(self->a, KVS_IOC_PUBLISH, &pub)) TH_LOG("%u", big[i]);
		memset(&lk, 0, sizeof(lk));
		lk.count = big[i];
		lk.keys = KVS_PTR(k);
		lk.pages = KVS_PTR(q);
		ASSERT_EQ(-E2BIG, kvs_call(self->a, KVS_IOC_LOOKUP, &lk)) TH_LOG("%u", big[i]);
		memset(&put, 0, sizeof(put));
		put.count = big[i];
		put.pages = KVS_PTR(p);
		ASSERT_EQ(-E2BIG, kvs_call(self->a, KVS_IOC_PUT, &put)) TH_LOG("%u", big[i]);
		memset(&pg, 0, sizeof(pg));
		pg.count = big[i];
		pg.pages = KVS_PTR(d);
		ASSERT_EQ(-E2BIG, kvs_call(self->a, KVS_IOC_PAGES, &pg)) TH_LOG("%u", big[i]);
		assert_unchanged(_metadata, self, &s0);
	}

	/* count 1 works for each */
	ASSERT_EQ(0, kvs_publish(self->a, e, 1, NULL));
	ASSERT_EQ(0, kvs_lookup(self->b, k, 1, q, NULL));
	ASSERT_EQ(p[0], q[0]);
	ASSERT_EQ(0, kvs_put(self->b, q, 1));
	ASSERT_EQ(0, kvs_alloc(self->b, 1, q));
	ASSERT_EQ(0, kvs_pages(self->a, 0, 0, 1, d, NULL));
	BAD_END();
}

/* KVS_MAX_BATCH itself is accepted by the count check. */
TEST_F(bad, count_max_batch_small_pool)
{
	struct kvs_key *keys;
	__u32 *pages, n = 9;
	struct snap s0;
	__u32 i;
	int ret;

	BAD_BEGIN();
	pages = calloc(KVS_MAX_BATCH, sizeof(*pages));
	keys = calloc(KVS_MAX_BATCH, sizeof(*keys));
	ASSERT_NE(NULL, pages);
	ASSERT_NE(NULL, keys);
	take_snap(_metadata, self, &s0);
	/* Not E2BIG: more than the pool and the quota, both refusals fit. */
	ret = kvs_alloc(self->a, KVS_MAX_BATCH, pages);
	ASSERT_TRUE(ret == -ENOSPC || ret == -EDQUOT) TH_LOG("ret %d", ret);
	assert_unchanged(_metadata, self, &s0);
	for (i = 0; i < KVS_MAX_BATCH; i++)
		keys[i] = make_key(7, i);
	ASSERT_EQ(0, kvs_lookup(self->a, keys, KVS_MAX_BATCH, pages, &n));
	ASSERT_EQ(0, n);
	ASSERT_EQ(0, kvs_held(self->a));
	free(pages);
	free(keys);
	BAD_END();
}

TEST_F_TIMEOUT(bad, count_max_batch_full, 120)
{
	struct kvs_publish_entry *e;
	struct kvs_page_desc *d;
	struct kvs_pool_stats st;
	struct kvs_conn *c, *c2;
	char name[KVS_NAME_MAX];
	__u32 *pages, *q, i, n, n_dup;
	__u32 id;

	BAD_BEGIN();
	id = kvs_env_pool(_metadata, &self->env, KVS_MAX_BATCH, 0, name);
	c = kvs_env_attach(_metadata, &self->env, name, 0);
	c2 = kvs_env_attach(_metadata, &self->env, name, 0);
	pages = calloc(KVS_MAX_BATCH, sizeof(*pages));
	q = calloc(KVS_MAX_BATCH, sizeof(*q));
	e = calloc(KVS_MAX_BATCH, sizeof(*e));
	d = calloc(KVS_MAX_BATCH, sizeof(*d));
	ASSERT_NE(NULL, pages);
	ASSERT_NE(NULL, q);
	ASSERT_NE(NULL, e);
	ASSERT_NE(NULL, d);

	ASSERT_EQ(0, kvs_alloc(c, KVS_MAX_BATCH, pages));
	for (i = 0; i < KVS_MAX_BATCH; i++) {
		e[i].page = pages[i];
		e[i].parent = i ? KVS_PARENT_PREV : KVS_NO_PAGE;
		e[i].key = make_key(8, i);
	}
	ASSERT_EQ(0, kvs_publish(c, e, KVS_MAX_BATCH, &n_dup));
	ASSERT_EQ(0, n_dup);
	ASSERT_EQ(pages[KVS_MAX_BATCH - 1], e[KVS_MAX_BATCH - 1].result);
	ASSERT_EQ(0, kvs_lookup_chain(c2, 8, 0, KVS_MAX_BATCH, q, &n));
	ASSERT_EQ(KVS_MAX_BATCH, n);
	ASSERT_EQ(0, memcmp(pages, q, KVS_MAX_BATCH * sizeof(*q)));
	ASSERT_EQ(0, kvs_pages(c, 0, 0, KVS_MAX_BATCH, d, &n));
	ASSERT_EQ(KVS_MAX_BATCH, n);
	ASSERT_EQ(2, d[pages[100]].refcount);
	ASSERT_EQ(pages[99], d[pages[100]].parent);
	check_invariants(c, 0);
	ASSERT_EQ(0, kvs_put(c2, q, KVS_MAX_BATCH));
	ASSERT_EQ(0, kvs_put(c, pages, KVS_MAX_BATCH));
	ASSERT_EQ(0, kvs_stats(c, 0, KVS_STATS_CHECK, &st));
	ASSERT_EQ(KVS_MAX_BATCH, st.n_cached);
	ASSERT_EQ(1, st.n_evictable);
	ASSERT_EQ(0, st.n_held);
	free(pages);
	free(q);
	free(e);
	free(d);
	(void)id;
	BAD_END();
}

/* ------------------------------------------------------------------ */
/* pointers                                                           */
/* ------------------------------------------------------------------ */

#define PG 4096ul

struct bad_ptrs {
	void *unmapped;		/* a hole */
	void *kernel;		/* a kernel address */
	char *edge;		/* first byte after a mapped page (unmapped) */
	char *ro;		/* a read-only page */
};

static void make_ptrs(struct __test_metadata *_metadata, struct bad_ptrs *bp)
{
	char *m = mmap(NULL, 4 * PG, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	ASSERT_NE(MAP_FAILED, m);
	memset(m, 0, 4 * PG);
	/* [0] mapped, [1] unmapped, [2] read-only, [3] unmapped */
	ASSERT_EQ(0, munmap(m + PG, PG));
	ASSERT_EQ(0, munmap(m + 3 * PG, PG));
	ASSERT_EQ(0, mprotect(m + 2 * PG, PG, PROT_READ));
	bp->edge = m + PG;
	bp->unmapped = m + 3 * PG;
	bp->ro = m + 2 * PG;
	bp->kernel = (void *)0xffffffff81000000ul;
}

/* The last element straddles the end of the mapping. */
static void *straddle(const struct bad_ptrs *bp, size_t elem, size_t n)
{
	return bp->edge - (n - 1) * elem - elem / 2;
}

TEST_F(bad, efault_alloc)
{
	struct bad_ptrs bp;
	struct snap s0;
	void *bad[5];
	size_t i;

	BAD_BEGIN();
	REQUIRE_USER_POINTERS(self->a);
	make_ptrs(_metadata, &bp);
	bad[0] = NULL;
	bad[1] = bp.unmapped;
	bad[2] = bp.kernel;
	bad[3] = straddle(&bp, sizeof(__u32), 3);
	bad[4] = bp.ro;
	for (i = 0; i < KVS_ARRAY_SIZE(bad); i++) {
		take_snap(_metadata, self, &s0);
		ASSERT_EQ(-EFAULT, kvs_alloc(self->a, 3, bad[i])) TH_LOG("case %zu", i);
		assert_unchanged(_metadata, self, &s0);
	}
	BAD_END();
}

TEST_F(bad, efault_publish)
{
	struct kvs_publish_entry *e;
	struct bad_ptrs bp;
	struct snap s0;
	void *bad[5];
	__u32 p[2], n;
	size_t i;

	BAD_BEGIN();
	REQUIRE_USER_POINTERS(self->a);
	make_ptrs(_metadata, &bp);
	ASSERT_EQ(0, kvs_alloc(self->a, 2, p));
	/* Valid entries in the read-only page: readable, not writable. */
	ASSERT_EQ(0, mprotect(bp.ro, PG, PROT_READ | PROT_WRITE));
	e = (void *)bp.ro;
	memset(e, 0, 2 * sizeof(*e));
	e[0].page = p[0];
	e[0].parent = KVS_NO_PAGE;
	e[0].key = make_key(9, 0);
	e[1].page = p[1];
	e[1].parent = KVS_PARENT_PREV;
	e[1].key = make_key(9, 1);
	ASSERT_EQ(0, mprotect(bp.ro, PG, PROT_READ));
	/* The same two entries with the second one cut by the hole. */
	memcpy(straddle(&bp, sizeof(*e), 2), e, sizeof(*e) + sizeof(*e) / 2);

	bad[0] = NULL;
	bad[1] = bp.unmapped;
	bad[2] = bp.kernel;
	bad[3] = straddle(&bp, sizeof(*e), 2);
	bad[4] = bp.ro;
	for (i = 0; i < KVS_ARRAY_SIZE(bad); i++) {
		take_snap(_metadata, self, &s0);
		ASSERT_EQ(-EFAULT, kvs_publish(self->a, bad[i], 2, &n)) TH_LOG("case %zu", i);
		assert_unchanged(_metadata, self, &s0);
		ASSERT_PAGE(self->a, 0, p[0], KVS_PAGE_OWNED, 0);
		ASSERT_PAGE(self->a, 0, p[1], KVS_PAGE_OWNED, 0);
	}
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 9, 0, 1, p, &n));
	ASSERT_EQ(0, n);
	BAD_END();
}

TEST_F(bad, efault_lookup)
{
	struct bad_ptrs bp;
	struct kvs_key *k, k1;
	struct snap s0;
	void *bad[5];
	__u32 pa[2], q[2], n;
	size_t i;

	BAD_BEGIN();
	REQUIRE_USER_POINTERS(self->a);
	make_ptrs(_metadata, &bp);
	ASSERT_EQ(0, kvs_alloc(self->a, 2, pa));
	ASSERT_EQ(0, kvs_publish_chain(self->a, pa, 2, KVS_NO_PAGE, 10, 0, NULL, NULL));

	/* Bad key arrays (the second key cut by the hole). */
	k = straddle(&bp, sizeof(*k), 2);
	k[0] = make_key(10, 0);
	k1 = make_key(10, 1);
	memcpy(&k[1], &k1, sizeof(k1) / 2);
	bad[0] = NULL;
	bad[1] = bp.unmapped;
	bad[2] = bp.kernel;
	bad[3] = k;
	for (i = 0; i < 4; i++) {
		take_snap(_metadata, self, &s0);
		ASSERT_EQ(-EFAULT, kvs_lookup(self->b, bad[i], 2, q, &n)) TH_LOG("keys %zu", i);
		assert_unchanged(_metadata, self, &s0);
	}

	/* Good keys, bad page arrays: the references must not stay taken. */
	k = calloc(2, sizeof(*k));
	ASSERT_NE(NULL, k);
	k[0] = make_key(10, 0);
	k[1] = make_key(10, 1);
	bad[3] = straddle(&bp, sizeof(__u32), 2);
	bad[4] = bp.ro;
	for (i = 0; i < 5; i++) {
		take_snap(_metadata, self, &s0);
		ASSERT_EQ(-EFAULT, kvs_lookup(self->b, k, 2, bad[i], &n)) TH_LOG("pages %zu", i);
		assert_unchanged(_metadata, self, &s0);
		ASSERT_PAGE(self->a, 0, pa[0], KVS_PAGE_SHARED, 1);
		ASSERT_PAGE(self->a, 0, pa[1], KVS_PAGE_SHARED, 1);
	}
	ASSERT_EQ(0, kvs_lookup(self->b, k, 2, q, &n));
	ASSERT_EQ(2, n);
	free(k);
	BAD_END();
}

TEST_F(bad, efault_put)
{
	struct bad_ptrs bp;
	struct snap s0;
	void *bad[4];
	__u32 p[2], *s;
	size_t i;

	BAD_BEGIN();
	REQUIRE_USER_POINTERS(self->a);
	make_ptrs(_metadata, &bp);
	ASSERT_EQ(0, kvs_alloc(self->a, 2, p));
	s = straddle(&bp, sizeof(__u32), 2);
	s[0] = p[0];
	memcpy(&s[1], &p[1], 2);
	bad[0] = NULL;
	bad[1] = bp.unmapped;
	bad[2] = bp.kernel;
	bad[3] = s;
	for (i = 0; i < KVS_ARRAY_SIZE(bad); i++) {
		take_snap(_metadata, self, &s0);
		ASSERT_EQ(-EFAULT, kvs_put(self->a, bad[i], 2)) TH_LOG("case %zu", i);
		assert_unchanged(_metadata, self, &s0);
		ASSERT_PAGE(self->a, 0, p[0], KVS_PAGE_OWNED, 0);
	}
	/* Read-only input is fine for PUT. */
	ASSERT_EQ(0, mprotect(bp.ro, PG, PROT_READ | PROT_WRITE));
	memcpy(bp.ro, p, sizeof(p));
	ASSERT_EQ(0, mprotect(bp.ro, PG, PROT_READ));
	ASSERT_EQ(0, kvs_put(self->a, (__u32 *)bp.ro, 2));
	ASSERT_EQ(0, kvs_held(self->a));
	BAD_END();
}

TEST_F(bad, efault_listings)
{
	struct bad_ptrs bp;
	struct snap s0;
	void *bad[5];
	size_t i;

	BAD_BEGIN();
	REQUIRE_USER_POINTERS(self->a);
	make_ptrs(_metadata, &bp);
	bad[0] = NULL;
	bad[1] = bp.unmapped;
	bad[2] = bp.kernel;
	bad[3] = bp.ro;
	bad[4] = straddle(&bp, sizeof(struct kvs_page_desc), 2);
	for (i = 0; i < KVS_ARRAY_SIZE(bad); i++) {
		take_snap(_metadata, self, &s0);
		ASSERT_EQ(-EFAULT, kvs_pages(self->a, 0, 0, 2, bad[i], NULL)) TH_LOG("pages %zu", i);
		ASSERT_EQ(-EFAULT, kvs_pool_list(self->a, bad[i], 2, NULL)) TH_LOG("list %zu", i);
		assert_unchanged(_metadata, self, &s0);
	}
	BAD_END();
}

/*
 * The command struct itself unreadable, or readable but not writable:
 * EFAULT for every command, and none takes effect.
 */
TEST_F(bad, efault_struct_itself)
{
	static const unsigned long cmds[] = {
		KVS_IOC_INFO, KVS_IOC_POOL_CREATE, KVS_IOC_POOL_ATTACH,
		KVS_IOC_POOL_DESTROY, KVS_IOC_POOL_LIST, KVS_IOC_POOL_STATS,
		KVS_IOC_PAGES, KVS_IOC_QUOTA, KVS_IOC_ALLOC, KVS_IOC_PUBLISH,
		KVS_IOC_LOOKUP, KVS_IOC_PUT, KVS_IOC_USER_LIMITS,
	};
	struct kvs_publish_entry e;
	struct kvs_page_desc pd[2];
	struct kvs_key k = make_key(11, 0);
	struct kvs_conn *fresh;
	struct bad_ptrs bp;
	struct snap s0;
	__u32 owned, shared, q[2], id, n;
	unsigned char buf[512];
	size_t i;

	BAD_BEGIN();
	REQUIRE_USER_POINTERS(self->a);
	make_ptrs(_metadata, &bp);
	fresh = kvs_env_open(_metadata, &self->env);
	id = kvs_env_pool(_metadata, &self->env, 2, 0, NULL);
	ASSERT_EQ(0, kvs_alloc(self->a, 2, q));
	owned = q[0];
	shared = q[1];
	ASSERT_EQ(0, kvs_publish_chain(self->a, &shared, 1, KVS_NO_PAGE, 11, 0, NULL, NULL));

	for (i = 0; i < KVS_ARRAY_SIZE(cmds); i++) {
		unsigned long cmd = cmds[i];
		size_t size = _IOC_SIZE(cmd);
		struct kvs_conn *c = self->a;

		memset(buf, 0, sizeof(buf));
		switch (_IOC_NR(cmd)) {
		case _IOC_NR(KVS_IOC_POOL_CREATE):
			kvs_pool_args((void *)buf, "", 2);
			kvs_env_name(&self->env, ((struct kvs_pool_create *)buf)->name, "ro");
			c = &self->env.ctl;
			break;
		case _IOC_NR(KVS_IOC_POOL_ATTACH):
			snprintf(((struct kvs_pool_attach *)buf)->name, KVS_NAME_MAX,
				 "%s", self->name);
			c = fresh;
			break;
		case _IOC_NR(KVS_IOC_POOL_DESTROY):
			((struct kvs_pool_destroy *)buf)->pool_id = id;
			c = &self->env.ctl;
			break;
		case _IOC_NR(KVS_IOC_POOL_LIST):
			((struct kvs_pool_list *)buf)->count = 1;
			((struct kvs_pool_list *)buf)->pools = KVS_PTR(pd);
			break;
		case _IOC_NR(KVS_IOC_PAGES):
			((struct kvs_pages *)buf)->count = 1;
			((struct kvs_pages *)buf)->pages = KVS_PTR(pd);
			break;
		case _IOC_NR(KVS_IOC_ALLOC):
			((struct kvs_alloc *)buf)->count = 1;
			((struct kvs_alloc *)buf)->pages = KVS_PTR(q);
			break;
		case _IOC_NR(KVS_IOC_PUBLISH):
			memset(&e, 0, sizeof(e));
			e.page = owned;
			e.parent = KVS_NO_PAGE;
			e.key = make_key(11, 1);
			((struct kvs_publish *)buf)->count = 1;
			((struct kvs_publish *)buf)->entries = KVS_PTR(&e);
			break;
		case _IOC_NR(KVS_IOC_LOOKUP):
			((struct kvs_lookup *)buf)->count = 1;
			((struct kvs_lookup *)buf)->keys = KVS_PTR(&k);
			((struct kvs_lookup *)buf)->pages = KVS_PTR(q);
			c = self->b;
			break;
		case _IOC_NR(KVS_IOC_PUT):
			((struct kvs_put *)buf)->count = 1;
			((struct kvs_put *)buf)->pages = KVS_PTR(&owned);
			break;
		}
		/* Unreadable: NULL, a hole, the kernel, cut in the middle. */
		take_snap(_metadata, self, &s0);
		ASSERT_EQ(-EFAULT, kvs_call(c, cmd, NULL)) TH_LOG("nr 0x%x NULL", (unsigned int)_IOC_NR(cmd));
		ASSERT_EQ(-EFAULT, kvs_call(c, cmd, bp.unmapped)) TH_LOG("nr 0x%x hole", (unsigned int)_IOC_NR(cmd));
		ASSERT_EQ(-EFAULT, kvs_call(c, cmd, bp.kernel)) TH_LOG("nr 0x%x kernel", (unsigned int)_IOC_NR(cmd));
		memcpy(bp.edge - size / 2, buf, size / 2);
		ASSERT_EQ(-EFAULT, kvs_call(c, cmd, bp.edge - size / 2))
			TH_LOG("nr 0x%x cut", (unsigned int)_IOC_NR(cmd));
		assert_unchanged(_metadata, self, &s0);
		/* Readable, valid, but the results cannot be written back. */
		ASSERT_EQ(0, mprotect(bp.ro, PG, PROT_READ | PROT_WRITE));
		memcpy(bp.ro, buf, size);
		ASSERT_EQ(0, mprotect(bp.ro, PG, PROT_READ));
		ASSERT_EQ(-EFAULT, kvs_call(c, cmd, bp.ro)) TH_LOG("nr 0x%x read-only", (unsigned int)_IOC_NR(cmd));
		assert_unchanged(_metadata, self, &s0);
	}
	/* None of it happened: the page is still OWNED, the file unattached,
	 * the pool alive, the key unpublished, no reference taken. */
	ASSERT_PAGE(self->a, 0, owned, KVS_PAGE_OWNED, 0);
	ASSERT_PAGE(self->a, 0, shared, KVS_PAGE_SHARED, 1);
	ASSERT_EQ(-EBADFD, kvs_alloc(fresh, 1, q));
	ASSERT_EQ(0, kvs_stats(&self->env.ctl, id, 0, &s0.st));
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 11, 1, 1, q, &n));
	ASSERT_EQ(0, n);
	ASSERT_EQ(0, kvs_held(self->b));
	BAD_END();
}

/* ------------------------------------------------------------------ */
/* page indices                                                       */
/* ------------------------------------------------------------------ */

TEST_F(bad, stale_foreign_and_wild_pages)
{
	struct kvs_publish_entry e;
	struct snap s0;
	__u32 bown, bshared, cached, freep, stale, q, n, wild[5], fill[BAD_PAGES];
	__u32 nf, i;
	__u32 cases[9];

	BAD_BEGIN();
	ASSERT_EQ(0, kvs_alloc(self->b, 1, &bown));			/* b's OWNED */
	ASSERT_EQ(0, kvs_alloc(self->b, 1, &bshared));
	ASSERT_EQ(0, kvs_publish_chain(self->b, &bshared, 1, KVS_NO_PAGE, 12, 0, NULL, NULL));
	ASSERT_EQ(0, kvs_alloc(self->b, 1, &cached));
	ASSERT_EQ(0, kvs_publish_chain(self->b, &cached, 1, KVS_NO_PAGE, 13, 0, NULL, NULL));
	ASSERT_EQ(0, kvs_put1(self->b, cached));			/* CACHED */
	ASSERT_EQ(0, kvs_alloc(self->a, 1, &stale));
	ASSERT_EQ(0, kvs_put1(self->a, stale));				/* a's, given back */
	for (freep = 0; freep < BAD_PAGES; freep++)
		if (kvs_page_state(self->a, 0, freep) == KVS_PAGE_FREE && freep != stale)
			break;
	ASSERT_LT(freep, BAD_PAGES);
	wild[0] = BAD_PAGES;
	wild[1] = 0x7fffffffu;
	wild[2] = 0x80000000u;
	wild[3] = KVS_PARENT_PREV;
	wild[4] = KVS_NO_PAGE;
	cases[0] = bown;
	cases[1] = bshared;
	cases[2] = cached;
	cases[3] = freep;
	cases[4] = stale;
	for (i = 0; i < 4; i++)
		cases[5 + i] = wild[i];

	for (i = 0; i < KVS_ARRAY_SIZE(cases); i++) {
		take_snap(_metadata, self, &s0);
		ASSERT_EQ(-ENOENT, kvs_put1(self->a, cases[i])) TH_LOG("put %u", cases[i]);
		memset(&e, 0, sizeof(e));
		e.page = cases[i];
		e.parent = KVS_NO_PAGE;
		e.key = make_key(14, i);
		ASSERT_EQ(-ENOENT, kvs_publish(self->a, &e, 1, &n)) TH_LOG("publish %u", cases[i]);
		assert_unchanged(_metadata, self, &s0);
	}
	ASSERT_EQ(-ENOENT, kvs_put1(self->a, wild[4]));
	/* PUBLISH of a page a holds, but SHARED rather than OWNED. */
	ASSERT_EQ(0, kvs_lookup_chain(self->a, 12, 0, 1, &q, &n));
	ASSERT_EQ(1, n);
	memset(&e, 0, sizeof(e));
	e.page = bshared;
	e.parent = KVS_NO_PAGE;
	e.key = make_key(14, 99);
	ASSERT_EQ(-ENOENT, kvs_publish(self->a, &e, 1, &n));
	ASSERT_EQ(0, kvs_put1(self->a, bshared));

	/* ABA: a's old index reused by b; a still may not touch it. */
	nf = 0;
	for (;;) {
		ASSERT_EQ(0, kvs_alloc(self->b, 1, &fill[nf]));
		if (fill[nf++] == stale)
			break;
		ASSERT_LT(nf, BAD_PAGES);
	}
	ASSERT_EQ(-ENOENT, kvs_put1(self->a, stale));
	memset(&e, 0, sizeof(e));
	e.page = stale;
	e.parent = KVS_NO_PAGE;
	e.key = make_key(14, 100);
	ASSERT_EQ(-ENOENT, kvs_publish(self->a, &e, 1, &n));
	ASSERT_PAGE(self->b, 0, stale, KVS_PAGE_OWNED, 0);
	/* b's holdings are all intact and its own to give back. */
	ASSERT_EQ(0, kvs_put(self->b, fill, nf));
	ASSERT_EQ(0, kvs_put1(self->b, bown));
	ASSERT_EQ(0, kvs_put1(self->b, bshared));
	ASSERT_EQ(0, kvs_held(self->b));
	BAD_END();
}

TEST_F(bad, put_twice)
{
	struct snap s0;
	__u32 o, s, q, n;

	BAD_BEGIN();
	ASSERT_EQ(0, kvs_alloc(self->a, 1, &o));
	ASSERT_EQ(0, kvs_put1(self->a, o));
	take_snap(_metadata, self, &s0);
	ASSERT_EQ(-ENOENT, kvs_put1(self->a, o));
	assert_unchanged(_metadata, self, &s0);

	ASSERT_EQ(0, kvs_alloc(self->a, 1, &s));
	ASSERT_EQ(0, kvs_publish_chain(self->a, &s, 1, KVS_NO_PAGE, 15, 0, NULL, NULL));
	ASSERT_EQ(0, kvs_lookup_chain(self->a, 15, 0, 1, &q, &n));
	ASSERT_EQ(s, q);
	/* Held twice: listing it three times fails whole. */
	take_snap(_metadata, self, &s0);
	ASSERT_EQ(-ENOENT, kvs_put(self->a, (__u32[]){ s, s, s }, 3));
	assert_unchanged(_metadata, self, &s0);
	ASSERT_EQ(0, kvs_put1(self->a, s));
	ASSERT_EQ(0, kvs_put1(self->a, s));
	take_snap(_metadata, self, &s0);
	ASSERT_EQ(-ENOENT, kvs_put1(self->a, s));
	assert_unchanged(_metadata, self, &s0);
	ASSERT_PAGE(self->a, 0, s, KVS_PAGE_CACHED, 0);
	BAD_END();
}

TEST_F(bad, publish_entry_errors)
{
	struct kvs_publish_entry e[3];
	struct snap s0;
	__u32 p[3], q, n;

	BAD_BEGIN();
	ASSERT_EQ(0, kvs_alloc(self->a, 3, p));
	take_snap(_metadata, self, &s0);
	/* A page listed twice. */
	memset(e, 0, sizeof(e));
	e[0].page = p[0];
	e[0].parent = KVS_NO_PAGE;
	e[0].key = make_key(16, 0);
	e[1].page = p[1];
	e[1].parent = KVS_PARENT_PREV;
	e[1].key = make_key(16, 1);
	e[2].page = p[0];
	e[2].parent = KVS_PARENT_PREV;
	e[2].key = make_key(16, 2);
	ASSERT_EQ(-EINVAL, kvs_publish(self->a, e, 3, &n));
	assert_unchanged(_metadata, self, &s0);
	/* PARENT_PREV in entry 0. */
	e[2].page = p[2];
	e[0].parent = KVS_PARENT_PREV;
	ASSERT_EQ(-EINVAL, kvs_publish(self->a, e, 3, &n));
	assert_unchanged(_metadata, self, &s0);
	/* A bad last entry: the good ones before it are not applied. */
	e[0].parent = KVS_NO_PAGE;
	e[2].page = BAD_PAGES + 1;
	ASSERT_EQ(-ENOENT, kvs_publish(self->a, e, 3, &n));
	assert_unchanged(_metadata, self, &s0);
	ASSERT_PAGE(self->a, 0, p[0], KVS_PAGE_OWNED, 0);
	ASSERT_EQ(0, kvs_lookup_chain(self->b, 16, 0, 1, &q, &n));
	ASSERT_EQ(0, n);
	/* Fixed, it goes through. */
	e[2].page = p[2];
	ASSERT_EQ(0, kvs_publish(self->a, e, 3, &n));
	ASSERT_EQ(0, n);
	ASSERT_EQ(p[2], e[2].result);
	ASSERT_PAGE(self->a, 0, p[2], KVS_PAGE_SHARED, 1);
	BAD_END();
}

/* ------------------------------------------------------------------ */
/* namespaces                                                         */
/* ------------------------------------------------------------------ */

/* Same key, other namespace: miss; same namespace: hit (hit counters). */
TEST_F(bad, namespace_paired)
{
	struct kvs_pool_stats s0, s1;
	struct kvs_page_desc d;
	struct kvs_conn *other, *same;
	__u32 pa, po, q, n, n_dup;

	BAD_BEGIN();
	other = kvs_env_attach(_metadata, &self->env, self->name, BAD_NS + 1);
	same = kvs_env_attach(_metadata, &self->env, self->name, BAD_NS);
	ASSERT_EQ(0, kvs_alloc(self->a, 1, &pa));
	ASSERT_EQ(0, kvs_publish_chain(self->a, &pa, 1, KVS_NO_PAGE, 17, 0, NULL, NULL));

	ASSERT_EQ(0, kvs_stats(self->a, 0, 0, &s0));
	ASSERT_EQ(0, kvs_lookup_chain(other, 17, 0, 1, &q, &n));
	ASSERT_EQ(0, n);
	ASSERT_EQ(0, kvs_stats(self->a, 0, 0, &s1));
	ASSERT_EQ(s0.hits, s1.hits);
	ASSERT_EQ(s0.lookups + 1, s1.lookups);

	ASSERT_EQ(0, kvs_lookup_chain(same, 17, 0, 1, &q, &n));
	ASSERT_EQ(1, n);
	ASSERT_EQ(pa, q);
	ASSERT_EQ(0, kvs_stats(self->a, 0, 0, &s0));
	ASSERT_EQ(s1.hits + 1, s0.hits);

	/* The other namespace publishing the same key is no duplicate. */
	ASSERT_EQ(0, kvs_alloc(other, 1, &po));
	ASSERT_EQ(0, kvs_publish_chain(other, &po, 1, KVS_NO_PAGE, 17, 0, &q, &n_dup));
	ASSERT_EQ(0, n_dup);
	ASSERT_EQ(po, q);
	ASSERT_EQ(0, kvs_page(self->a, 0, po, &d));
	ASSERT_EQ(BAD_NS + 1, d.ns);
	ASSERT_EQ(0, kvs_page(self->a, 0, pa, &d));
	ASSERT_EQ(BAD_NS, d.ns);
	/* Each namespace finds its own page. */
	ASSERT_EQ(0, kvs_lookup_chain(same, 17, 0, 1, &q, &n));
	ASSERT_EQ(pa, q);
	ASSERT_EQ(0, kvs_lookup_chain(other, 17, 0, 1, &q, &n));
	ASSERT_EQ(po, q);
	BAD_END();
}

/* Namespaces are 64-bit: 0, 1<<32 and 1<<63 are three namespaces. */
TEST_F(bad, namespace_all_64_bits)
{
	static const __u64 ns[] = { 0, 1ull << 32, 1ull << 63, 0xffffffffull };
	struct kvs_conn *c[KVS_ARRAY_SIZE(ns)], *twin;
	__u32 p, q, n;
	size_t i;

	BAD_BEGIN();
	for (i = 0; i < KVS_ARRAY_SIZE(ns); i++)
		c[i] = kvs_env_attach(_metadata, &self->env, self->name, ns[i]);
	twin = kvs_env_attach(_metadata, &self->env, self->name, 0);
	ASSERT_EQ(0, kvs_alloc(c[0], 1, &p));
	ASSERT_EQ(0, kvs_publish_chain(c[0], &p, 1, KVS_NO_PAGE, 18, 0, NULL, NULL));
	for (i = 1; i < KVS_ARRAY_SIZE(ns); i++) {
		ASSERT_EQ(0, kvs_lookup_chain(c[i], 18, 0, 1, &q, &n));
		ASSERT_EQ(0, n) TH_LOG("ns 0x%llx", (unsigned long long)ns[i]);
	}
	ASSERT_EQ(0, kvs_lookup_chain(twin, 18, 0, 1, &q, &n));
	ASSERT_EQ(1, n);
	ASSERT_EQ(p, q);
	BAD_END();
}

/* Keys are 256-bit: a key differing in any one word is another key. */
TEST_F(bad, key_all_256_bits)
{
	struct kvs_key k = make_key(19, 0), x;
	__u32 p, q, n;
	int w, bit;

	BAD_BEGIN();
	ASSERT_EQ(0, kvs_alloc(self->a, 1, &p));
	ASSERT_EQ(0, kvs_publish_chain(self->a, &p, 1, KVS_NO_PAGE, 19, 0, NULL, NULL));
	for (w = 0; w < 4; w++) {
		for (bit = 0; bit < 64; bit += 63) {
			x = k;
			x.w[w] ^= 1ull << bit;
			ASSERT_EQ(0, kvs_lookup(self->b, &x, 1, &q, &n));
			ASSERT_EQ(0, n) TH_LOG("word %d bit %d", w, bit);
		}
	}
	ASSERT_EQ(0, kvs_lookup(self->b, &k, 1, &q, &n));
	ASSERT_EQ(1, n);
	ASSERT_EQ(p, q);
	BAD_END();
}

/* uid 65534, a member of the device's group (see kvs_become()). */
static void drop_to_nobody(void)
{
	KVS_CHILD_EQ(0, kvs_become(KVS_NOBODY, 1, -1));
}

TEST_F(bad, ns_per_uid_attach)
{
	struct kvs_pool_create pc;
	struct kvs_page_desc d;
	struct kvs_conn *c1, *c2;
	__u32 p, q, n;

	BAD_BEGIN();
	kvs_pool_args(&pc, "", 8);
	pc.flags = KVS_POOL_NS_PER_UID;
	pc.mode = 0666;
	kvs_env_create(_metadata, &self->env, &pc, "peruid");
	c1 = kvs_env_open(_metadata, &self->env);
	/* Asking for a namespace on such a pool is refused ... */
	ASSERT_EQ(-EINVAL, kvs_attach(c1, pc.name, 5, 0, NULL));
	ASSERT_EQ(-EBADFD, kvs_alloc(c1, 1, &p));
	/* ... with 0 the namespace is the caller's uid. */
	ASSERT_EQ(0, kvs_attach(c1, pc.name, 0, 0, NULL));
	c2 = kvs_env_attach(_metadata, &self->env, pc.name, 0);
	ASSERT_EQ(0, kvs_alloc(c1, 1, &p));
	ASSERT_EQ(0, kvs_publish_chain(c1, &p, 1, KVS_NO_PAGE, 20, 0, NULL, NULL));
	ASSERT_EQ(0, kvs_page(c1, 0, p, &d));
	ASSERT_EQ(geteuid(), d.ns);
	/* Same uid: same namespace, a hit. */
	ASSERT_EQ(0, kvs_lookup_chain(c2, 20, 0, 1, &q, &n));
	ASSERT_EQ(1, n);
	ASSERT_EQ(p, q);
	/* The fixture's namespace BAD_NS is another pool anyway: miss. */
	ASSERT_EQ(0, kvs_lookup_chain(self->a, 20, 0, 1, &q, &n));
	ASSERT_EQ(0, n);
	check_invariants(c1, 0);
	BAD_END();
}

TEST_F(bad, ns_per_uid_isolation)
{
	struct kvs_pool_create pc;
	struct kvs_pool_stats s0, s1;
	struct kvs_page_desc d;
	struct kvs_conn *root, *root2;
	__u32 p, q, n, child_page = KVS_NO_PAGE;
	int sync[2];
	pid_t pid;

	BAD_BEGIN();
	if (geteuid() != 0)
		SKIP(return, "needs root to switch to uid 65534");
	kvs_pool_args(&pc, "", 8);
	pc.flags = KVS_POOL_NS_PER_UID;
	pc.mode = 0666;
	kvs_env_create(_metadata, &self->env, &pc, "isol");
	root = kvs_env_attach(_metadata, &self->env, pc.name, 0);
	root2 = kvs_env_attach(_metadata, &self->env, pc.name, 0);
	ASSERT_EQ(0, kvs_alloc(root, 1, &p));
	ASSERT_EQ(0, kvs_publish_chain(root, &p, 1, KVS_NO_PAGE, 21, 0, NULL, NULL));
	ASSERT_EQ(0, kvs_stats(root, 0, 0, &s0));
	ASSERT_EQ(0, pipe(sync));

	pid = kvs_env_fork(_metadata, &self->env);
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct kvs_conn c;
		__u32 cp, cq, cn = 9, dup = 9;

		close(sync[0]);
		drop_to_nobody();
		KVS_CHILD_EQ(0, kvs_conn_open(&c));
		KVS_CHILD_EQ(0, kvs_attach(&c, pc.name, 0, 0, NULL));
		/* Another uid: the same key is not found ... */
		KVS_CHILD_EQ(0, kvs_lookup_chain(&c, 21, 0, 1, &cq, &cn));
		KVS_CHILD_EQ(0, cn);
		/* ... and publishing it is no duplicate. */
		KVS_CHILD_EQ(0, kvs_alloc(&c, 1, &cp));
		KVS_CHILD_EQ(0, kvs_publish_chain(&c, &cp, 1, KVS_NO_PAGE, 21, 0, &cq, &dup));
		KVS_CHILD_EQ(0, dup);
		KVS_CHILD_EQ(cp, cq);
		KVS_CHILD_EQ(0, kvs_sync_write(sync[1], &cp, sizeof(cp)));
		_exit(0);
	}
	close(sync[1]);
	ASSERT_EQ(0, kvs_sync_read(sync[0], &child_page, sizeof(child_page)));
	close(sync[0]);
	ASSERT_CHILD_OK(pid);

	ASSERT_EQ(0, kvs_stats(root, 0, 0, &s1));
	ASSERT_EQ(s0.hits, s1.hits);		/* the child's lookup missed */
	ASSERT_EQ(s0.lookups + 1, s1.lookups);
	ASSERT_NE(p, child_page);
	ASSERT_EQ(0, kvs_page(root, 0, child_page, &d));
	ASSERT_EQ(KVS_PAGE_CACHED, d.state);	/* its file closed */
	ASSERT_EQ(65534, d.ns);
	ASSERT_EQ(0, kvs_page(root, 0, p, &d));
	ASSERT_EQ(0, d.ns);
	/* Root still finds root's page, and that is a hit. */
	ASSERT_EQ(0, kvs_lookup_chain(root2, 21, 0, 1, &q, &n));
	ASSERT_EQ(1, n);
	ASSERT_EQ(p, q);
	ASSERT_EQ(0, kvs_stats(root, 0, 0, &s0));
	ASSERT_EQ(s1.hits + 1, s0.hits);
	check_invariants(root, 0);
	BAD_END();
}

/* ------------------------------------------------------------------ */
/* create and attach parameters                                       */
/* ------------------------------------------------------------------ */

TEST_F(bad, create_bad_names)
{
	static const char *const bad[] = {
		"a/b", "a b", "a\nb", "caf\xc3\xa9", "x:y", "a\\b", "*",
	};
	struct kvs_pool_create pc;
	struct kvs_pool_attach at;
	struct kvs_conn *c;
	struct snap s0;
	char name[KVS_NAME_MAX];
	int i, ret;

	BAD_BEGIN();
	take_snap(_metadata, self, &s0);
	kvs_pool_args(&pc, "", 2);			/* empty */
	ASSERT_EQ(-EINVAL, kvs_pool_create(&self->env.ctl, &pc));
	kvs_pool_args(&pc, "", 2);			/* 64 bytes, no NUL */
	memset(pc.name, 'a', KVS_NAME_MAX);
	ASSERT_EQ(-EINVAL, kvs_pool_create(&self->env.ctl, &pc));
	for (i = 0; i < (int)KVS_ARRAY_SIZE(bad); i++) {
		kvs_pool_args(&pc, bad[i], 2);
		ASSERT_EQ(-EINVAL, kvs_pool_create(&self->env.ctl, &pc))
			TH_LOG("name '%s'", bad[i]);
	}
	/* Garbage after the terminating NUL. */
	kvs_env_name(&self->env, name, "tail");
	kvs_pool_args(&pc, name, 2);
	pc.name[KVS_NAME_MAX - 1] = 'x';
	ASSERT_EQ(-EINVAL, kvs_pool_create(&self->env.ctl, &pc));
	assert_unchanged(_metadata, self, &s0);
	/* 63 characters of the allowed set is the longest name. */
	kvs_pool_args(&pc, "", 2);
	kvs_env_name(&self->env, pc.name, "");
	for (i = strlen(pc.name); i < KVS_NAME_MAX - 1; i++)
		pc.name[i] = "aZ09._-"[i % 7];
	kvs_env_create(_metadata, &self->env, &pc, "");
	/* ATTACH never matches a pool through a malformed name. */
	memcpy(name, pc.name, KVS_NAME_MAX);
	c = kvs_env_open(_metadata, &self->env);
	memset(&at, 0, sizeof(at));
	memcpy(at.name, self->name, KVS_NAME_MAX);
	at.name[KVS_NAME_MAX - 1] = 'x';	/* garbage after the NUL */
	ret = kvs_call(c, KVS_IOC_POOL_ATTACH, &at);
	ASSERT_TRUE(ret == -EINVAL || ret == -ENOENT) TH_LOG("ret %d", ret);
	memset(&at, 0, sizeof(at));
	memset(at.name, 'a', KVS_NAME_MAX);	/* unterminated */
	ret = kvs_call(c, KVS_IOC_POOL_ATTACH, &at);
	ASSERT_TRUE(ret == -EINVAL || ret == -ENOENT) TH_LOG("ret %d", ret);
	/* The file is still unattached and attaches to the long name. */
	ASSERT_EQ(0, kvs_attach(c, name, 0, 0, NULL));
	BAD_END();
}

static void set_dim(struct kvs_geometry *g, int i, __u32 v)
{
	switch (i) {
	case 0: g->n_layers = v; break;
	case 1: g->n_kv_heads = v; break;
	case 2: g->head_dim = v; break;
	default: g->tokens_per_page = v; break;
	}
}

TEST_F(bad, create_bad_geometry_and_params)
{
	struct kvs_pool_create pc;
	struct kvs_info in;
	struct kvs_conn *self_fd;
	struct snap s0;
	int i;

	BAD_BEGIN();
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &in));
	self_fd = kvs_env_open(_metadata, &self->env);
	take_snap(_metadata, self, &s0);
#define EXPECT_CREATE(err, what, stmt) do { \
	kvs_pool_args(&pc, "", 4); \
	kvs_env_name(&self->env, pc.name, "geo"); \
	stmt; \
	ASSERT_EQ(err, kvs_pool_create(&self->env.ctl, &pc)) TH_LOG("%s", what); \
} while (0)
	for (i = 0; i < 4; i++) {
		EXPECT_CREATE(-EINVAL, "dimension 0", set_dim(&pc.geom, i, 0));
		EXPECT_CREATE(-EINVAL, "dimension 65537", set_dim(&pc.geom, i, 65537));
		EXPECT_CREATE(-EINVAL, "dimension 2^32-1", set_dim(&pc.geom, i, ~0u));
		/* 65536 itself is allowed: the page is then small enough. */
		EXPECT_CREATE(-EEXIST, "dimension 65536",
			      set_dim(&pc.geom, i, 65536); memcpy(pc.name, self->name, KVS_NAME_MAX));
	}
	EXPECT_CREATE(-EINVAL, "dtype 0", pc.geom.dtype = 0);
	EXPECT_CREATE(-EINVAL, "dtype 5", pc.geom.dtype = 5);
	EXPECT_CREATE(-EINVAL, "dtype ~0", pc.geom.dtype = ~0u);
	/* 2 * 65536 * 4097 * 2 bytes: just over 1 GiB. */
	EXPECT_CREATE(-EINVAL, "page over 1 GiB",
		      pc.geom.n_layers = 1; pc.geom.n_kv_heads = 1;
		      pc.geom.head_dim = 65536; pc.geom.tokens_per_page = 4097);
	/* 2 * 65536^4 * 4 = 2^67 wraps a u64 to 0 unless checked. */
	EXPECT_CREATE(-EINVAL, "page size overflow",
		      pc.geom.n_layers = 65536; pc.geom.n_kv_heads = 65536;
		      pc.geom.head_dim = 65536; pc.geom.tokens_per_page = 65536;
		      pc.geom.dtype = KVS_DTYPE_F32);
	EXPECT_CREATE(-EINVAL, "page_bytes in", pc.geom.page_bytes = 4096);
	EXPECT_CREATE(-EINVAL, "geom pad", pc.geom.pad = 1);
	EXPECT_CREATE(-EINVAL, "n_pages 0", pc.n_pages = 0);
	EXPECT_CREATE(-EINVAL, "n_pages over max", pc.n_pages = in.max_pool_pages + 1);
	EXPECT_CREATE(-EINVAL, "n_pages 2^40", pc.n_pages = 1ull << 40);
	EXPECT_CREATE(-EINVAL, "n_pages 2^32+4", pc.n_pages = (1ull << 32) + 4);
	EXPECT_CREATE(-EINVAL, "mode 01000", pc.mode = 01000);
	EXPECT_CREATE(-EINVAL, "mode 04666", pc.mode = 04666);
	EXPECT_CREATE(-EINVAL, "mode ~0", pc.mode = ~0u);
	EXPECT_CREATE(-EINVAL, "quota > n_pages", pc.max_pages_per_file = 5);
	EXPECT_CREATE(-EBADF, "mem_fd -2", pc.mem_fd = -2);
	EXPECT_CREATE(-EBADF, "mem_fd INT_MAX", pc.mem_fd = 0x7fffffff);
	/* A kvshare file as pool memory would be a reference cycle. */
	EXPECT_CREATE(-EINVAL, "mem_fd is /dev/kvshare", pc.mem_fd = self_fd->fd);
#undef EXPECT_CREATE
	assert_unchanged(_metadata, self, &s0);
	BAD_END();
}

/* security.md item 7: one file takes references up to its quota, cleanly. */
TEST_F(bad, refcount_capped_by_quota)
{
	struct kvs_pool_stats st;
	__u32 p, q, n, i;

	BAD_BEGIN();
	ASSERT_EQ(0, kvs_alloc(self->a, 1, &p));
	ASSERT_EQ(0, kvs_publish_chain(self->a, &p, 1, KVS_NO_PAGE, 22, 0, NULL, NULL));
	ASSERT_EQ(0, kvs_quota_set(self->b, 8));
	for (i = 0; i < 8; i++) {
		ASSERT_EQ(0, kvs_lookup_chain(self->b, 22, 0, 1, &q, &n));
		ASSERT_EQ(1, n);
	}
	ASSERT_EQ(-EDQUOT, kvs_lookup_chain(self->b, 22, 0, 1, &q, &n));
	ASSERT_PAGE(self->a, 0, p, KVS_PAGE_SHARED, 9);
	ASSERT_EQ(8, kvs_held(self->b));
	kvs_conn_close(self->b);
	ASSERT_PAGE(self->a, 0, p, KVS_PAGE_SHARED, 1);
	ASSERT_EQ(0, kvs_stats(self->a, 0, KVS_STATS_CHECK, &st));
	ASSERT_EQ(1, st.n_refs);
	BAD_END();
}

TEST_HARNESS_MAIN
