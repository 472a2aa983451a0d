// SPDX-License-Identifier: GPL-2.0
/*
 * kvshare with two real users (issue 11): a victim (root, or a member uid
 * that holds the device's group) and an attacker, uid 65534, in a forked
 * child that dropped its groups, gid and uid (kvs_become()).  Each test
 * makes one attack of the issue and proves that it fails and that the
 * victim's pool is intact: its keys still LOOKUP to the same pages, its
 * memory holds the same bytes, and STATS with CHECK, asked by root,
 * passes.
 *
 *  - device_needs_group:     only the device's group may open /dev/kvshare;
 *  - squat_name_first:       a name created first by the attacker is not
 *                            the victim's pool;
 *  - user_limits:            one user at every per-user limit (EDQUOT)
 *                            leaves others working, and gets it all back;
 *  - user_limits_of_others:  nobody reads another user's figures;
 *  - module_params:          dev_mode takes read/write bits only, and the
 *                            limits given at load are the ones in force
 *                            (module);
 *  - check_and_pages:        CHECK is admin-only, PAGES hides keys and
 *                            namespaces from all but the owner;
 *  - opener_credentials:     a file carries its opener's rights (module);
 *  - opener_groups:          and its opener's supplementary groups (module);
 *  - pool_memory_refused / shrink_pool_memory: pool memory is a memfd
 *                            sealed against shrinking;
 *  - pool_memory_reopened / pool_memory_hugetlb: a memfd reopened through
 *                            /proc, and a hugetlbfs memfd, under the same
 *                            rules;
 *  - failed_copy_undone:     ATTACH and CREATE whose results cannot be
 *                            written back leave nothing behind (module).
 *
 * Each test says, at its top, why it fails on the main of before issue 11
 * (commit 19bd58c).  Children report through KVS_CHILD_* and their exit
 * status, never through the harness asserts.
 *
 * In the VM the suite reloads kvshare.ko with small per-user limits for
 * user_limits, and with other parameters for module_params (and again
 * with the defaults after each); against kvshared the limits are the
 * daemon's, which the suite's runner sets small (see uapi-tests.mk).
 */
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>

#include "kvs_test.h"

#define KVS_MODULE_DEFAULT	"/lib/modules/kvshare.ko"

/* A member who is not root: a victim the per-user limits also apply to. */
#define MU_MEMBER		1000

/*
 * The per-user limits user_limits needs (and reloads the module with):
 * small enough to reach cheaply, and such that on a pool of 1 KiB pages
 * the page limit is hit first, on one of 16 KiB pages the byte limit.
 */
#define MU_MAX_POOLS		4
#define MU_MAX_POOL_PAGES	40
#define MU_MAX_HELD		24
#define MU_MAX_HELD_BYTES	(4 * 16384)
#define MU_LIMIT_PARAMS		"max_user_pools=4 max_user_pool_pages=40 " \
				"max_user_held=24 max_user_held_bytes=65536"

FIXTURE(mu) {
	struct kvs_env env;
	int reloaded;		/* the module runs with other parameters */
	long dev_gid;		/* the device's group at setup, or -errno */
	long nr_huge;		/* vm.nr_hugepages to restore, or -1 */
};

FIXTURE_SETUP(mu)
{
	self->reloaded = 0;
	self->dev_gid = kvs_dev_group();
	self->nr_huge = -1;
	kvs_env_init(&self->env);
}

static int mu_reload(const char *params, long gid);
static void huge_restore(long nr);

FIXTURE_TEARDOWN(mu)
{
	kvs_env_fini(&self->env);
	/* Later suites get the module as the VM loaded it. */
	if (self->reloaded && mu_reload("", self->dev_gid))
		fprintf(stderr, "# could not load kvshare.ko with its defaults again\n");
	huge_restore(self->nr_huge);
}

static int is_module(FIXTURE_DATA(mu) *self)
{
	return !!(kvs_conn_caps(&self->env.ctl) & KVS_CAP_MODULE);
}

#define MU_BEGIN() do { \
	KVS_REQUIRE(&self->env); \
	if (geteuid() != 0) \
		SKIP(return, "needs root to switch to uid 65534"); \
} while (0)

#define MU_MODULE_ONLY() do { \
	if (!is_module(self)) \
		SKIP(return, "the arbiter is not kvshare.ko"); \
} while (0)

/* In a child: become @uid, a member of the device's group or not. */
#define CHILD_BECOME(uid, member) \
	KVS_CHILD_EQ(0, kvs_become((uid), (member), -1))

/* In a child: a new connection, or exit. */
static void child_open(struct kvs_conn *c)
{
	KVS_CHILD_EQ(0, kvs_conn_open(c));
}

/* A default geometry with @tokens tokens a page: tokens * 256 bytes. */
static void geom_tokens(struct kvs_pool_create *pc, __u32 tokens)
{
	pc->geom.tokens_per_page = tokens;
}

/* Fill (or check) @len bytes at @p with a pattern of @seed. */
static void pattern_fill(unsigned char *p, size_t len, unsigned int seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		p[i] = (unsigned char)(seed * 131 + i * 7 + (i >> 12));
}

static int pattern_ok(const unsigned char *p, size_t len, unsigned int seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (p[i] != (unsigned char)(seed * 131 + i * 7 + (i >> 12)))
			return 0;
	return 1;
}

/*
 * Read all of @len bytes at @p in a child: 0 if they hold @seed's
 * pattern, else the child's wait status (a SIGBUS shows as one).
 */
static int read_in_child(const unsigned char *p, size_t len, unsigned int seed)
{
	pid_t pid;
	int st = 0;

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0)
		_exit(pattern_ok(p, len, seed) ? 0 : 1);
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return st;
}

/* The victim's pool is intact: keys of @chain still map to @pages. */
static void assert_chain_intact(struct __test_metadata *_metadata,
				struct kvs_conn *c, __u32 chain, const __u32 *pages,
				__u32 n)
{
	__u32 got[16], hit = 0, i;

	ASSERT_LE(n, KVS_ARRAY_SIZE(got));
	ASSERT_EQ(0, kvs_lookup_chain(c, chain, 0, n, got, &hit));
	ASSERT_EQ(n, hit);
	for (i = 0; i < n; i++)
		ASSERT_EQ(pages[i], got[i]) TH_LOG("key %u", i);
	ASSERT_EQ(0, kvs_put(c, got, n));
}

/* The pool id of @owner's pool @name, from the listing; 0 if none. */
static __u32 find_pool(struct __test_metadata *_metadata, struct kvs_conn *c,
		       __u32 owner, const char *name)
{
	struct kvs_pool_desc d[KVS_ENV_POOLS + 8];
	__u32 n = 0, i;

	ASSERT_EQ(0, kvs_pool_list(c, d, KVS_ARRAY_SIZE(d), &n));
	for (i = 0; i < n && i < KVS_ARRAY_SIZE(d); i++)
		if (d[i].uid == owner && !strncmp(d[i].name, name, KVS_NAME_MAX))
			return d[i].pool_id;
	return 0;
}

/* ------------------------------------------------------------------ */
/* The device                                                         */
/* ------------------------------------------------------------------ */

/*
 * /dev/kvshare is 0660, its group the VM's kvshare group (what the udev
 * rule does in a real install): uid 65534 without that group cannot open
 * it at all; with the group it can.
 * On 19bd58c the module made the device 0666: the attacker opened it.
 */
TEST_F(mu, device_needs_group)
{
	struct stat sb;
	pid_t pid;

	MU_BEGIN();
	MU_MODULE_ONLY();
	ASSERT_EQ(0, stat(kvs_dev_path(), &sb));
	ASSERT_EQ(0, sb.st_mode & 0007) TH_LOG("mode 0%o", sb.st_mode & 07777);
	ASSERT_EQ(0060, sb.st_mode & 0060);
	ASSERT_EQ(KVS_TEST_GID, sb.st_gid);

	pid = kvs_env_fork(_metadata, &self->env);
	if (pid == 0) {
		CHILD_BECOME(KVS_NOBODY, 0);
		KVS_CHILD_EQ(-1, open(kvs_dev_path(), O_RDWR | O_CLOEXEC));
		KVS_CHILD_EQ(EACCES, errno);
		KVS_CHILD_EQ(-1, open(kvs_dev_path(), O_RDONLY | O_CLOEXEC));
		KVS_CHILD_EQ(EACCES, errno);
		_exit(0);
	}
	ASSERT_CHILD_OK(pid);

	pid = kvs_env_fork(_metadata, &self->env);
	if (pid == 0) {
		struct kvs_conn c;
		struct kvs_info in;

		CHILD_BECOME(KVS_NOBODY, 1);
		child_open(&c);
		KVS_CHILD_EQ(0, kvs_info(&c, &in));
		KVS_CHILD_EQ(KVS_ABI_VERSION, in.abi_version);
		_exit(0);
	}
	ASSERT_CHILD_OK(pid);
	kvs_env_assert_baseline(_metadata, &self->env);
}

/* ------------------------------------------------------------------ */
/* Squatting                                                          */
/* ------------------------------------------------------------------ */

#define SQ_PAGES	4
#define SQ_CHAIN	77

/*
 * The attacker creates the victim's pool name first, mode 0666, backed by
 * its own memory, hoping the victim will use it.  The victim still
 * creates its pool under that name, attaches by (owner, name) and gets
 * its own pool and its own memory; the attacker's pool and memory never
 * see the victim's keys or bytes; an ATTACH naming another owner is
 * ENOENT.
 * On 19bd58c names were global: the victim's CREATE failed with EEXIST,
 * and an ATTACH by name got the attacker's pool (and memory).
 */
TEST_F(mu, squat_name_first)
{
	const size_t bytes = SQ_PAGES * KVS_T_PAGE_BYTES;
	struct kvs_pool_create pc;
	struct kvs_pool_attach at;
	struct kvs_info in;
	struct kvs_conn *v, *v2, *x;
	char name[KVS_NAME_MAX];
	__u32 evil_id = 0, p[2];
	unsigned char *vmap;
	struct stat s_mem, s_got;
	int up[2], down[2], vfd, mem_fd;
	char ch = 0;
	pid_t pid;

	MU_BEGIN();
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &in));
	mem_fd = !!(in.features & KVS_FEAT_MEM_FD);
	kvs_env_name(&self->env, name, "squat");
	ASSERT_EQ(0, pipe(up));
	ASSERT_EQ(0, pipe(down));
	pid = kvs_env_fork(_metadata, &self->env);
	if (pid == 0) {
		struct kvs_pool_create mine;
		struct kvs_pool_attach a;
		struct kvs_conn c, d;
		unsigned char *m = NULL;
		__u32 q[2], n = 9;
		int fd = -1;

		close(up[0]);
		close(down[1]);
		CHILD_BECOME(KVS_NOBODY, 1);
		child_open(&c);
		kvs_pool_args(&mine, name, SQ_PAGES);
		mine.mode = 0666;
		if (mem_fd) {
			fd = kvs_memfd("evil", bytes, KVS_T_SEALS);
			KVS_CHILD_CHECK(fd >= 0);
			m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			KVS_CHILD_CHECK(m != MAP_FAILED);
			memset(m, 'A', bytes);
			mine.mem_fd = fd;
		}
		KVS_CHILD_EQ(0, kvs_pool_create(&c, &mine));
		KVS_CHILD_EQ(0, kvs_sync_write(up[1], &mine.pool_id, sizeof(mine.pool_id)));
		KVS_CHILD_EQ(0, kvs_sync_read(down[0], &ch, 1));
		KVS_CHILD_EQ(0, kvs_attach_owner(&c, KVS_NOBODY, name, 0, 0, &a));
		KVS_CHILD_EQ(mine.pool_id, a.pool_id);
		/* The victim's keys are not in the attacker's pool ... */
		KVS_CHILD_EQ(0, kvs_lookup_chain(&c, SQ_CHAIN, 0, 2, q, &n));
		KVS_CHILD_EQ(0, n);
		/* ... its memory never saw the victim's bytes ... */
		if (m) {
			size_t i;

			for (i = 0; i < bytes; i++)
				KVS_CHILD_EQ('A', m[i]);
		}
		/* ... and the victim's pool (0600) is not the attacker's to use. */
		child_open(&d);
		KVS_CHILD_EQ(-EACCES, kvs_attach_owner(&d, 0, name, 0, 0, NULL));
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	ASSERT_EQ(0, kvs_sync_read(up[0], &evil_id, sizeof(evil_id)));
	kvs_env_track(_metadata, &self->env, evil_id);

	/* The victim: its own pool under the same name, with its memory. */
	kvs_pool_args(&pc, name, SQ_PAGES);
	vfd = -1;
	vmap = NULL;
	if (mem_fd) {
		vfd = kvs_memfd("victim", bytes, KVS_T_SEALS);
		ASSERT_LE(0, vfd);
		vmap = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, vfd, 0);
		ASSERT_NE(MAP_FAILED, vmap);
		pattern_fill(vmap, bytes, 1);
		ASSERT_EQ(0, fstat(vfd, &s_mem));
		pc.mem_fd = vfd;
	}
	ASSERT_EQ(0, kvs_pool_create(&self->env.ctl, &pc)) TH_LOG("the name was squatted");
	kvs_env_track(_metadata, &self->env, pc.pool_id);
	ASSERT_NE(evil_id, pc.pool_id);
	if (vfd >= 0)
		close(vfd);

	/* Attaching by (owner, name) gives the victim's pool and memory. */
	v = kvs_env_open(_metadata, &self->env);
	ASSERT_EQ(0, kvs_attach_owner(v, 0, name, 0, mem_fd ? KVS_ATTACH_MEM_FD : 0, &at));
	ASSERT_EQ(pc.pool_id, at.pool_id);
	if (mem_fd) {
		unsigned char *m2;

		ASSERT_LE(0, at.mem_fd);
		ASSERT_EQ(0, fstat(at.mem_fd, &s_got));
		ASSERT_EQ(s_mem.st_ino, s_got.st_ino);
		ASSERT_EQ(s_mem.st_dev, s_got.st_dev);
		m2 = mmap(NULL, bytes, PROT_READ, MAP_SHARED, at.mem_fd, 0);
		ASSERT_NE(MAP_FAILED, m2);
		ASSERT_TRUE(pattern_ok(m2, bytes, 1));
		munmap(m2, bytes);
		close(at.mem_fd);
	}
	ASSERT_EQ(0, kvs_alloc(v, 2, p));
	ASSERT_EQ(0, kvs_publish_chain(v, p, 2, KVS_NO_PAGE, SQ_CHAIN, 0, NULL, NULL));
	v2 = kvs_env_attach_owner(_metadata, &self->env, 0, name, 0);
	assert_chain_intact(_metadata, v2, SQ_CHAIN, p, 2);

	/* Naming another owner: that owner's pool, or none. */
	x = kvs_env_open(_metadata, &self->env);
	ASSERT_EQ(-ENOENT, kvs_attach_owner(x, 12345, name, 0, 0, NULL));
	ASSERT_EQ(-ENOENT, kvs_attach_owner(x, 0, "no-such-pool", 0, 0, NULL));
	ASSERT_EQ(0, kvs_attach_owner(x, KVS_NOBODY, name, 0, 0, &at));
	ASSERT_EQ(evil_id, at.pool_id);

	ASSERT_EQ(0, kvs_sync_write(down[1], &ch, 1));
	ASSERT_CHILD_OK(pid);
	close(up[0]);
	close(down[1]);

	/* The victim's pool, pages and bytes are as they were. */
	assert_chain_intact(_metadata, v2, SQ_CHAIN, p, 2);
	if (vmap) {
		ASSERT_EQ(0, read_in_child(vmap, bytes, 1));
		munmap(vmap, bytes);
	}
	check_invariants(&self->env.ctl, pc.pool_id);
	check_invariants(&self->env.ctl, evil_id);
	kvs_env_assert_baseline(_metadata, &self->env);
}

/* ------------------------------------------------------------------ */
/* Per-user limits                                                    */
/* ------------------------------------------------------------------ */

static int mu_unload(void)
{
	int i;

	/* The daemon-less module sees a closed file at once; give it time anyway. */
	for (i = 0; i < 100; i++) {
		if (!syscall(__NR_delete_module, "kvshare", O_NONBLOCK))
			return 0;
		if (errno == ENOENT)
			return 0;	/* not loaded: a failed test left it so */
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EBUSY)
			return -errno;
		usleep(20000);
	}
	return -EBUSY;
}

/* Load kvshare.ko from $KVS_MODULE (default /lib/modules/kvshare.ko). */
static int mu_load(const char *params)
{
	const char *ko = getenv("KVS_MODULE");
	int kfd, ret = 0;

	if (!ko || !*ko)
		ko = KVS_MODULE_DEFAULT;
	kfd = open(ko, O_RDONLY | O_CLOEXEC);
	if (kfd < 0)
		return -errno;
	if (syscall(__NR_finit_module, kfd, params, 0))
		ret = -errno;
	close(kfd);
	return ret;
}

/*
 * Reload kvshare.ko with module parameters @params ("" for the defaults),
 * as unload_test does, and give the new device node group @gid, the one
 * the node had when the test began (no udev in the VM).  Every file of
 * the device must be closed.
 */
static int mu_reload(const char *params, long gid)
{
	int ret;

	if (gid < 0)
		return (int)gid;
	ret = mu_unload();
	if (!ret)
		ret = mu_load(params);
	return ret ? ret : kvs_dev_set_group(gid);
}

/* Are the attacker's limits @l cheap to reach, and shaped as the test needs? */
static int limits_usable(const struct kvs_user_limits *l, const struct kvs_info *in)
{
	return l->max_pools >= 3 && l->max_pools <= 16 &&
	       l->max_pool_pages >= l->max_pools + 2 && l->max_pool_pages <= 4096 &&
	       l->max_pool_pages <= in->max_pool_pages &&
	       l->max_held >= 4 && l->max_held <= 4096 &&
	       l->max_held_bytes >= 2 * 16384 && l->max_held_bytes <= 256 * 16384 &&
	       l->max_held_bytes / 16384 < l->max_held &&
	       l->max_held * 1024 < l->max_held_bytes;
}

/* In a child: the caller's own figures. */
static void child_limits(struct kvs_conn *c, struct kvs_user_limits *u)
{
	KVS_CHILD_EQ(0, kvs_user_limits(c, -1, u));
	KVS_CHILD_EQ(geteuid(), u->uid);
}

/*
 * In a child (@uid, a member, not admin): what a victim does while the
 * attacker sits at its limits: create a pool, attach it, allocate and
 * publish; and take pages in root's public pools @small and @big.
 */
static void victim_works(const char *tag, const char *small, const char *big)
{
	struct kvs_pool_create pc;
	struct kvs_user_limits u;
	struct kvs_conn c, s, b;
	__u32 p[4], q[4], n = 0;

	child_open(&c);
	kvs_pool_args(&pc, "", 8);	/* room for its quota: 2 published + 2 looked up */
	snprintf(pc.name, sizeof(pc.name), "mu-%d-victim-%s", (int)getppid(), tag);
	KVS_CHILD_EQ(0, kvs_pool_create(&c, &pc));
	KVS_CHILD_EQ(0, kvs_attach_owner(&c, geteuid(), pc.name, 0, 0, NULL));
	KVS_CHILD_EQ(0, kvs_alloc(&c, 2, p));
	KVS_CHILD_EQ(0, kvs_publish_chain(&c, p, 2, KVS_NO_PAGE, 5, 0, NULL, NULL));
	KVS_CHILD_EQ(0, kvs_lookup_chain(&c, 5, 0, 2, q, &n));
	KVS_CHILD_EQ(2, n);
	child_open(&s);
	KVS_CHILD_EQ(0, kvs_attach_owner(&s, 0, small, 0, 0, NULL));
	KVS_CHILD_EQ(0, kvs_alloc(&s, 4, p));
	child_open(&b);
	KVS_CHILD_EQ(0, kvs_attach_owner(&b, 0, big, 0, 0, NULL));
	KVS_CHILD_EQ(0, kvs_alloc(&b, 1, p));
	child_limits(&c, &u);
	KVS_CHILD_EQ(1, u.n_pools);
	KVS_CHILD_EQ(8, u.pool_pages);
	KVS_CHILD_EQ(2 + 2 + 4 + 1, u.held);	/* 2 OWNED->SHARED, 2 refs, 4 + 1 OWNED */
	KVS_CHILD_EQ(4 * KVS_T_PAGE_BYTES + 4 * 1024 + 16384, u.held_bytes);
	/* Its pool goes once its last file does (the process's exit). */
	KVS_CHILD_EQ(0, kvs_destroy(&c, pc.pool_id));
	_exit(0);
}

static void run_victim(struct __test_metadata *_metadata, FIXTURE_DATA(mu) *self,
		       const char *tag, const char *small, const char *big)
{
	pid_t pid = kvs_env_fork(_metadata, &self->env);

	if (pid == 0) {
		KVS_CHILD_EQ(0, kvs_become(MU_MEMBER, 1, -1));
		victim_works(tag, small, big);
	}
	ASSERT_CHILD_OK(pid);
	/* Root too: admin, and never limited. */
	{
		struct kvs_conn *c = kvs_env_attach_owner(_metadata, &self->env, 0, small, 0);
		__u32 p;

		ASSERT_EQ(0, kvs_alloc(c, 1, &p));
		kvs_conn_close(c);
	}
}

/*
 * The attacker (uid 65534, a member) takes everything the per-user limits
 * let one user take: as many pools as it may own (max_user_pools), as
 * many pages in them as it may (max_user_pool_pages), as many pages held
 * in other users' pools as it may (max_user_held, on a pool of 1 KiB
 * pages) and as many bytes (max_user_held_bytes, on a pool of 16 KiB
 * pages).  Each next step is EDQUOT, KVS_IOC_USER_LIMITS shows the
 * figures, and at each limit another member (uid 1000) and root still
 * create, attach and allocate.  Once the attacker's files are closed its
 * holdings are 0, and once root destroyed its pools, so are the rest.
 * On 19bd58c there were no per-user limits (every step succeeded) and no
 * KVS_IOC_USER_LIMITS (ENOTTY).
 */
TEST_F_TIMEOUT(mu, user_limits, 300)
{
	struct kvs_user_limits l, u;
	struct kvs_pool_create small, big;
	struct kvs_info in;
	__u32 n_small, n_big, i;
	int up[2], down[2];
	char ch = 0;
	pid_t pid;

	MU_BEGIN();
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &in));
	ASSERT_EQ(0, kvs_user_limits(&self->env.ctl, KVS_NOBODY, &l));
	if (!limits_usable(&l, &in)) {
		if (!is_module(self))
			SKIP(return, "kvshared's per-user limits (%u pools, %llu pool pages, "
			     "%llu held, %llu bytes held) are not the small ones this test "
			     "needs: see uapi-tests.mk", l.max_pools,
			     (unsigned long long)l.max_pool_pages,
			     (unsigned long long)l.max_held,
			     (unsigned long long)l.max_held_bytes);
		/* Every file must be closed to unload the module. */
		kvs_env_fini(&self->env);
		self->reloaded = 1;
		ASSERT_EQ(0, mu_reload(MU_LIMIT_PARAMS, self->dev_gid));
		kvs_env_init(&self->env);
		KVS_REQUIRE(&self->env);
		ASSERT_EQ(0, kvs_info(&self->env.ctl, &in));
		ASSERT_EQ(0, kvs_user_limits(&self->env.ctl, KVS_NOBODY, &l));
		ASSERT_EQ(MU_MAX_POOLS, l.max_pools);
		ASSERT_EQ(MU_MAX_POOL_PAGES, l.max_pool_pages);
		ASSERT_EQ(MU_MAX_HELD, l.max_held);
		ASSERT_EQ(MU_MAX_HELD_BYTES, l.max_held_bytes);
		ASSERT_TRUE(limits_usable(&l, &in));
	}
	ASSERT_EQ(KVS_NOBODY, l.uid);
	ASSERT_EQ(0, l.n_pools);
	ASSERT_EQ(0, l.pool_pages);
	ASSERT_EQ(0, l.held);
	ASSERT_EQ(0, l.held_bytes);

	/* Root's public pools, room for the attacker's limit and a victim's. */
	n_small = l.max_held + 8;
	kvs_pool_args(&small, "", n_small);
	geom_tokens(&small, 4);			/* 1 KiB pages */
	small.mode = 0666;
	kvs_env_create(_metadata, &self->env, &small, "small");
	ASSERT_EQ(1024, small.geom.page_bytes);
	n_big = l.max_held_bytes / 16384 + 4;
	kvs_pool_args(&big, "", n_big);
	geom_tokens(&big, 64);			/* 16 KiB pages */
	big.mode = 0666;
	kvs_env_create(_metadata, &self->env, &big, "big");
	ASSERT_EQ(16384, big.geom.page_bytes);

	ASSERT_EQ(0, pipe(up));
	ASSERT_EQ(0, pipe(down));
	pid = kvs_env_fork(_metadata, &self->env);
	if (pid == 0) {
		struct kvs_pool_create pc;
		struct kvs_conn c, f1, f2, f3;
		__u32 pools[16], p[4096], q, n, k, h1;

		close(up[0]);
		close(down[1]);
		CHILD_BECOME(KVS_NOBODY, 1);
		/* Closing a file releases at once here too (kvs_settle()). */
		kvs_settle_arm(1);
		child_open(&c);

		/* max_user_pools pools of one page, then EDQUOT. */
		for (i = 0; i < l.max_pools; i++) {
			kvs_pool_args(&pc, "", 1);
			snprintf(pc.name, sizeof(pc.name), "mu-%d-evil-%u", (int)getppid(), i);
			KVS_CHILD_EQ(0, kvs_pool_create(&c, &pc));
			pools[i] = pc.pool_id;
		}
		kvs_pool_args(&pc, "", 1);
		snprintf(pc.name, sizeof(pc.name), "mu-%d-evil-more", (int)getppid());
		KVS_CHILD_EQ(-EDQUOT, kvs_pool_create(&c, &pc));
		child_limits(&c, &u);
		KVS_CHILD_EQ(l.max_pools, u.n_pools);
		KVS_CHILD_EQ(l.max_pools, u.max_pools);
		KVS_CHILD_EQ(l.max_pools, u.pool_pages);
		KVS_CHILD_EQ(l.max_pool_pages, u.max_pool_pages);
		KVS_CHILD_EQ(l.max_held, u.max_held);
		KVS_CHILD_EQ(l.max_held_bytes, u.max_held_bytes);

		/* Pages of its pools: all of max_user_pool_pages, then EDQUOT. */
		for (i = 2; i < l.max_pools; i++)
			KVS_CHILD_EQ(0, kvs_destroy(&c, pools[i]));
		kvs_pool_args(&pc, "", l.max_pool_pages - 1);	/* 2 + this: one too many */
		snprintf(pc.name, sizeof(pc.name), "mu-%d-evil-big", (int)getppid());
		KVS_CHILD_EQ(-EDQUOT, kvs_pool_create(&c, &pc));
		kvs_pool_args(&pc, "", l.max_pool_pages - 2);
		snprintf(pc.name, sizeof(pc.name), "mu-%d-evil-big", (int)getppid());
		KVS_CHILD_EQ(0, kvs_pool_create(&c, &pc));
		kvs_pool_args(&pc, "", 1);
		snprintf(pc.name, sizeof(pc.name), "mu-%d-evil-more", (int)getppid());
		KVS_CHILD_EQ(-EDQUOT, kvs_pool_create(&c, &pc));
		child_limits(&c, &u);
		KVS_CHILD_EQ(3, u.n_pools);
		KVS_CHILD_EQ(l.max_pool_pages, u.pool_pages);

		/*
		 * Pages held in root's pool of 1 KiB pages, through two files:
		 * the limit is the user's, not a file's.  Publishing keeps the
		 * page held (as a reference); a LOOKUP would take another.
		 */
		child_open(&f1);
		child_open(&f2);
		KVS_CHILD_EQ(0, kvs_attach_owner(&f1, 0, small.name, 0, 0, NULL));
		KVS_CHILD_EQ(0, kvs_attach_owner(&f2, 0, small.name, 0, 0, NULL));
		h1 = l.max_held / 2;
		KVS_CHILD_EQ(0, kvs_alloc(&f1, h1, p));
		KVS_CHILD_EQ(0, kvs_publish_chain(&f1, p, 1, KVS_NO_PAGE, 9, 0, NULL, NULL));
		KVS_CHILD_EQ(0, kvs_alloc(&f2, l.max_held - h1, p + h1));
		KVS_CHILD_EQ(-EDQUOT, kvs_alloc(&f2, 1, &q));
		KVS_CHILD_EQ(-EDQUOT, kvs_alloc(&f1, 1, &q));
		KVS_CHILD_EQ(-EDQUOT, kvs_lookup_chain(&f2, 9, 0, 1, &q, &n));
		child_limits(&c, &u);
		KVS_CHILD_EQ(l.max_held, u.held);
		KVS_CHILD_EQ(l.max_held * 1024ull, u.held_bytes);
		KVS_CHILD_EQ(0, kvs_sync_write(up[1], &ch, 1));
		KVS_CHILD_EQ(0, kvs_sync_read(down[0], &ch, 1));

		/* Bytes held, in root's pool of 16 KiB pages. */
		kvs_conn_close(&f1);
		kvs_conn_close(&f2);
		child_limits(&c, &u);
		KVS_CHILD_EQ(0, u.held);
		child_open(&f3);
		KVS_CHILD_EQ(0, kvs_attach_owner(&f3, 0, big.name, 0, 0, NULL));
		k = l.max_held_bytes / 16384;
		KVS_CHILD_EQ(-EDQUOT, kvs_alloc(&f3, k + 1, p));	/* all or nothing */
		KVS_CHILD_EQ(0, kvs_alloc(&f3, k, p));
		KVS_CHILD_EQ(-EDQUOT, kvs_alloc(&f3, 1, &q));
		child_limits(&c, &u);
		KVS_CHILD_EQ(k, u.held);
		KVS_CHILD_EQ(k * 16384ull, u.held_bytes);
		KVS_CHILD_CHECK(u.held < u.max_held);	/* bytes, not pages, stopped it */
		/* Still at its pool limits too. */
		KVS_CHILD_EQ(-EDQUOT, kvs_pool_create(&c, &pc));
		KVS_CHILD_EQ(0, kvs_sync_write(up[1], &ch, 1));
		KVS_CHILD_EQ(0, kvs_sync_read(down[0], &ch, 1));
		_exit(0);
	}
	close(up[1]);
	close(down[0]);

	/* The attacker at its pool, pool-page and held-page limits. */
	ASSERT_EQ(0, kvs_sync_read(up[0], &ch, 1));
	ASSERT_EQ(0, kvs_user_limits(&self->env.ctl, KVS_NOBODY, &u));
	ASSERT_EQ(3, u.n_pools);
	ASSERT_EQ(l.max_pool_pages, u.pool_pages);
	ASSERT_EQ(l.max_held, u.held);
	run_victim(_metadata, self, "1", small.name, big.name);
	ASSERT_EQ(0, kvs_sync_write(down[1], &ch, 1));

	/* ... and at its byte limit. */
	ASSERT_EQ(0, kvs_sync_read(up[0], &ch, 1));
	ASSERT_EQ(0, kvs_user_limits(&self->env.ctl, KVS_NOBODY, &u));
	ASSERT_EQ(l.max_held_bytes / 16384 * 16384, u.held_bytes);
	run_victim(_metadata, self, "2", small.name, big.name);
	ASSERT_EQ(0, kvs_sync_write(down[1], &ch, 1));
	ASSERT_CHILD_OK(pid);
	close(up[0]);
	close(down[1]);

	/* The attacker's files are closed: it holds nothing any more. */
	ASSERT_EQ(0, kvs_user_limits(&self->env.ctl, KVS_NOBODY, &u));
	ASSERT_EQ(0, u.held);
	ASSERT_EQ(0, u.held_bytes);
	ASSERT_EQ(3, u.n_pools);	/* pools live until destroyed */
	/* The victims' and the attacker's pools: root destroys them. */
	for (i = 0; i < 16; i++) {
		struct kvs_pool_desc d[KVS_ENV_POOLS + 8];
		__u32 n = 0, j, found = 0;

		ASSERT_EQ(0, kvs_pool_list(&self->env.ctl, d, KVS_ARRAY_SIZE(d), &n));
		for (j = 0; j < n && j < KVS_ARRAY_SIZE(d); j++) {
			if (d[j].uid == KVS_NOBODY || d[j].uid == MU_MEMBER) {
				ASSERT_EQ(0, d[j].n_files);
				ASSERT_EQ(0, kvs_destroy(&self->env.ctl, d[j].pool_id));
				found++;
			}
		}
		if (!found)
			break;
	}
	ASSERT_EQ(0, kvs_user_limits(&self->env.ctl, KVS_NOBODY, &u));
	ASSERT_EQ(0, u.n_pools);
	ASSERT_EQ(0, u.pool_pages);
	ASSERT_EQ(0, kvs_user_limits(&self->env.ctl, MU_MEMBER, &u));
	ASSERT_EQ(0, u.n_pools);
	ASSERT_EQ(0, u.held);
	check_invariants(&self->env.ctl, small.pool_id);
	check_invariants(&self->env.ctl, big.pool_id);
	kvs_env_assert_baseline(_metadata, &self->env);
}

/*
 * A user's figures are its own: another user's are EPERM unless admin.
 * On 19bd58c there was no KVS_IOC_USER_LIMITS (ENOTTY).
 */
TEST_F(mu, user_limits_of_others)
{
	struct kvs_user_limits u;
	pid_t pid;

	MU_BEGIN();
	ASSERT_EQ(0, kvs_user_limits(&self->env.ctl, KVS_NOBODY, &u));
	ASSERT_EQ(KVS_NOBODY, u.uid);
	ASSERT_EQ(0, kvs_user_limits(&self->env.ctl, -1, &u));
	ASSERT_EQ(0, u.uid);
	pid = kvs_env_fork(_metadata, &self->env);
	if (pid == 0) {
		struct kvs_conn c;

		CHILD_BECOME(KVS_NOBODY, 1);
		child_open(&c);
		KVS_CHILD_EQ(-EPERM, kvs_user_limits(&c, 0, &u));
		KVS_CHILD_EQ(-EPERM, kvs_user_limits(&c, MU_MEMBER, &u));
		KVS_CHILD_EQ(0, kvs_user_limits(&c, KVS_NOBODY, &u));
		KVS_CHILD_EQ(KVS_NOBODY, u.uid);
		KVS_CHILD_EQ(0, kvs_user_limits(&c, -1, &u));
		KVS_CHILD_EQ(KVS_NOBODY, u.uid);
		_exit(0);
	}
	ASSERT_CHILD_OK(pid);
	kvs_env_assert_baseline(_metadata, &self->env);
}

/* ------------------------------------------------------------------ */
/* Module parameters                                                  */
/* ------------------------------------------------------------------ */

/* /sys/module/kvshare/parameters/@name, or "" if it cannot be read. */
static void read_param(const char *name, char *buf, size_t len)
{
	char path[128];
	ssize_t n = -1;
	int fd;

	snprintf(path, sizeof(path), "/sys/module/kvshare/parameters/%s", name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, buf, len - 1);
		close(fd);
	}
	buf[n > 0 ? n : 0] = '\0';
}

/*
 * dev_mode takes read and write bits in octal and nothing else: a mode
 * with an execute, setuid or sticky bit (0777, 0661, 01666), 0 (which a
 * misc device would turn into 0600), trailing garbage or no value fails
 * the load with EINVAL and leaves no module.  dev_mode=0666 with two
 * per-user limits overridden loads: the node is 0666 (a user outside its
 * group opens it), parameters/ shows the three values and the one left
 * alone, and KVS_IOC_USER_LIMITS the limits the module runs with.  A load
 * without parameters makes the node 0660 again.
 * On 19bd58c the module had none of these parameters: the loader ignored
 * each as unknown, so every bad dev_mode loaded (and the node was 0666),
 * and parameters/ held no dev_mode or max_user_* files.
 */
TEST_F(mu, module_params)
{
	static const char *const bad[] = {
		"dev_mode=0777", "dev_mode=0661", "dev_mode=01666", "dev_mode=0",
		"dev_mode=660x", "dev_mode=", "dev_mode",
	};
	struct kvs_user_limits u;
	struct stat sb;
	char buf[64];
	unsigned int i;
	pid_t pid;

	MU_BEGIN();
	MU_MODULE_ONLY();
	ASSERT_LE(0, self->dev_gid);
	/* Every file must be closed to unload the module. */
	kvs_env_fini(&self->env);
	self->reloaded = 1;
	ASSERT_EQ(0, mu_unload());
	for (i = 0; i < KVS_ARRAY_SIZE(bad); i++) {
		EXPECT_EQ(-EINVAL, mu_load(bad[i])) TH_LOG("insmod kvshare.ko %s", bad[i]);
		EXPECT_NE(0, access("/sys/module/kvshare", F_OK))
			TH_LOG("%s left kvshare loaded", bad[i]);
		ASSERT_EQ(0, mu_unload());
	}

	ASSERT_EQ(0, mu_load("dev_mode=0666 max_user_pools=3 max_user_held_bytes=1048576"));
	ASSERT_EQ(0, kvs_dev_set_group(self->dev_gid));
	ASSERT_EQ(0, stat(kvs_dev_path(), &sb));
	ASSERT_EQ(0666, sb.st_mode & 07777);
	read_param("dev_mode", buf, sizeof(buf));
	ASSERT_STREQ("0666\n", buf);
	read_param("max_user_pools", buf, sizeof(buf));
	ASSERT_STREQ("3\n", buf);
	read_param("max_user_held_bytes", buf, sizeof(buf));
	ASSERT_STREQ("1048576\n", buf);
	read_param("max_user_held", buf, sizeof(buf));
	ASSERT_NE(0, buf[0]);
	kvs_env_init(&self->env);
	KVS_REQUIRE(&self->env);
	ASSERT_EQ(0, kvs_user_limits(&self->env.ctl, KVS_NOBODY, &u));
	ASSERT_EQ(3, u.max_pools);
	ASSERT_EQ(1048576, u.max_held_bytes);
	ASSERT_EQ(strtoull(buf, NULL, 10), u.max_held);
	pid = kvs_env_fork(_metadata, &self->env);
	if (pid == 0) {
		struct kvs_conn c;
		struct kvs_info in;

		CHILD_BECOME(KVS_NOBODY, 0);
		child_open(&c);
		KVS_CHILD_EQ(0, kvs_info(&c, &in));
		_exit(0);
	}
	ASSERT_CHILD_OK(pid);
	kvs_env_fini(&self->env);

	/* The defaults again, as later tests and suites expect them. */
	ASSERT_EQ(0, mu_reload("", self->dev_gid));
	self->reloaded = 0;
	ASSERT_EQ(0, stat(kvs_dev_path(), &sb));
	ASSERT_EQ(0660, sb.st_mode & 07777);
	ASSERT_EQ(self->dev_gid, sb.st_gid);
	read_param("dev_mode", buf, sizeof(buf));
	ASSERT_STREQ("0660\n", buf);
	read_param("max_user_pools", buf, sizeof(buf));
	ASSERT_STRNE("3\n", buf);
	kvs_env_init(&self->env);
	KVS_REQUIRE(&self->env);
	kvs_env_assert_baseline(_metadata, &self->env);
}

/* ------------------------------------------------------------------ */
/* CHECK and PAGES                                                    */
/* ------------------------------------------------------------------ */

#define CP_PAGES	8
#define CP_CHAIN	31

/*
 * In a child: PAGES of pool @id as its caller sees them: every keyed
 * page's key and namespace are @visible (as published: chain @chain, ns
 * @ns) or all zero.  The states and refcounts are there either way.
 */
static void child_pages(struct kvs_conn *c, __u32 id, int visible, __u32 chain,
			__u64 ns, __u32 n_keyed)
{
	struct kvs_page_desc d[CP_PAGES];
	__u32 n = 0, i, keyed = 0, k = 0;

	KVS_CHILD_EQ(0, kvs_pages(c, id, 0, CP_PAGES, d, &n));
	KVS_CHILD_EQ(CP_PAGES, n);
	for (i = 0; i < n; i++) {
		if (d[i].state < KVS_PAGE_SHARED) {
			KVS_CHILD_CHECK(kvs_key_zero(&d[i].key));
			continue;
		}
		keyed++;
		if (visible) {
			struct kvs_key want;
			int found = 0;

			for (k = 0; k < n_keyed; k++) {
				want = make_key(chain, k);
				found |= kvs_key_eq(&want, &d[i].key);
			}
			KVS_CHILD_CHECK(found);
			KVS_CHILD_EQ(ns, d[i].ns);
		} else {
			KVS_CHILD_CHECK(kvs_key_zero(&d[i].key));
			KVS_CHILD_EQ(0, d[i].ns);
		}
	}
	KVS_CHILD_EQ(n_keyed, keyed);
}

/*
 * STATS with CHECK walks a whole pool under its lock: only admin may ask,
 * even the pool's owner may not.  PAGES gives keys and namespaces (the
 * salts that keep tenants apart) to the pool's owner and admin only:
 * another reader sees the pages' states with zero keys and namespaces.
 * On 19bd58c any reader could CHECK (and stall the pool) and PAGES showed
 * every key and namespace to every reader: the attacker's first CHECK
 * succeeded.
 */
TEST_F(mu, check_and_pages)
{
	struct kvs_pool_create pc;
	struct kvs_pool_stats st;
	struct kvs_conn *a;
	__u32 p[3], member_id = 0;
	int sync[2];
	pid_t pid;

	MU_BEGIN();
	/* Root's pool, readable and writable by all, with root's keys in ns 42. */
	kvs_pool_args(&pc, "", CP_PAGES);
	pc.mode = 0666;
	kvs_env_create(_metadata, &self->env, &pc, "cp");
	a = kvs_env_attach_owner(_metadata, &self->env, 0, pc.name, 42);
	ASSERT_EQ(0, kvs_alloc(a, 3, p));
	ASSERT_EQ(0, kvs_publish_chain(a, p, 3, KVS_NO_PAGE, CP_CHAIN, 0, NULL, NULL));

	/* The attacker, reading root's pool and attached to it. */
	pid = kvs_env_fork(_metadata, &self->env);
	if (pid == 0) {
		struct kvs_pool_stats cst;
		struct kvs_conn c, d;

		CHILD_BECOME(KVS_NOBODY, 1);
		child_open(&c);
		child_open(&d);
		KVS_CHILD_EQ(-EPERM, kvs_stats(&c, pc.pool_id, KVS_STATS_CHECK, &cst));
		KVS_CHILD_EQ(0, kvs_stats(&c, pc.pool_id, 0, &cst));
		KVS_CHILD_EQ(CP_PAGES, cst.n_pages);
		KVS_CHILD_EQ(0, kvs_attach_owner(&d, 0, pc.name, 42, 0, NULL));
		KVS_CHILD_EQ(-EPERM, kvs_stats(&d, 0, KVS_STATS_CHECK, &cst));
		child_pages(&c, pc.pool_id, 0, 0, 0, 3);
		child_pages(&d, 0, 0, 0, 0, 3);
		_exit(0);
	}
	ASSERT_CHILD_OK(pid);

	/* A member's pool, mode 0644, with its keys in ns 7. */
	ASSERT_EQ(0, pipe(sync));
	pid = kvs_env_fork(_metadata, &self->env);
	if (pid == 0) {
		struct kvs_pool_create mine;
		struct kvs_pool_stats cst;
		struct kvs_conn c;
		__u32 q[2];

		close(sync[0]);
		KVS_CHILD_EQ(0, kvs_become(MU_MEMBER, 1, -1));
		child_open(&c);
		kvs_pool_args(&mine, "", CP_PAGES);
		snprintf(mine.name, sizeof(mine.name), "mu-%d-cp-member", (int)getppid());
		mine.mode = 0644;
		KVS_CHILD_EQ(0, kvs_pool_create(&c, &mine));
		KVS_CHILD_EQ(0, kvs_attach_owner(&c, MU_MEMBER, mine.name, 7, 0, NULL));
		KVS_CHILD_EQ(0, kvs_alloc(&c, 2, q));
		KVS_CHILD_EQ(0, kvs_publish_chain(&c, q, 2, KVS_NO_PAGE, CP_CHAIN + 1, 0, NULL, NULL));
		/* The owner sees its keys, but may not CHECK either. */
		child_pages(&c, mine.pool_id, 1, CP_CHAIN + 1, 7, 2);
		child_pages(&c, 0, 1, CP_CHAIN + 1, 7, 2);
		KVS_CHILD_EQ(-EPERM, kvs_stats(&c, 0, KVS_STATS_CHECK, &cst));
		KVS_CHILD_EQ(0, kvs_stats(&c, 0, 0, &cst));
		/* Root's pool: a reader, not the owner. */
		child_pages(&c, pc.pool_id, 0, 0, 0, 3);
		KVS_CHILD_EQ(0, kvs_sync_write(sync[1], &mine.pool_id, sizeof(mine.pool_id)));
		_exit(0);
	}
	close(sync[1]);
	ASSERT_EQ(0, kvs_sync_read(sync[0], &member_id, sizeof(member_id)));
	close(sync[0]);
	ASSERT_CHILD_OK(pid);
	kvs_env_track(_metadata, &self->env, member_id);

	/* The attacker, reading the member's pool. */
	pid = kvs_env_fork(_metadata, &self->env);
	if (pid == 0) {
		struct kvs_pool_stats cst;
		struct kvs_conn c;

		CHILD_BECOME(KVS_NOBODY, 1);
		child_open(&c);
		KVS_CHILD_EQ(-EPERM, kvs_stats(&c, member_id, KVS_STATS_CHECK, &cst));
		KVS_CHILD_EQ(0, kvs_stats(&c, member_id, 0, &cst));
		child_pages(&c, member_id, 0, 0, 0, 2);
		_exit(0);
	}
	ASSERT_CHILD_OK(pid);

	/* Root (owner of one pool, admin for both) sees every key. */
	{
		struct kvs_page_desc d;

		ASSERT_EQ(0, kvs_page(&self->env.ctl, pc.pool_id, p[0], &d));
		ASSERT_EQ(42, d.ns);
		ASSERT_TRUE(!kvs_key_zero(&d.key));
	}
	ASSERT_EQ(0, kvs_stats(&self->env.ctl, member_id, KVS_STATS_CHECK, &st));
	ASSERT_EQ(2, st.n_cached);
	assert_chain_intact(_metadata, a, CP_CHAIN, p, 3);
	check_invariants(&self->env.ctl, pc.pool_id);
	check_invariants(&self->env.ctl, member_id);
	kvs_env_assert_baseline(_metadata, &self->env);
}

/* ------------------------------------------------------------------ */
/* Credentials                                                        */
/* ------------------------------------------------------------------ */

static int send_fd(int sock, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct msghdr mh;
	struct cmsghdr *cm;
	struct iovec iov;
	char b = 'f';

	memset(&mh, 0, sizeof(mh));
	memset(cbuf, 0, sizeof(cbuf));
	iov.iov_base = &b;
	iov.iov_len = 1;
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = cbuf;
	mh.msg_controllen = sizeof(cbuf);
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	return sendmsg(sock, &mh, 0) == 1 ? 0 : -1;
}

static int recv_fd(int sock)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct msghdr mh;
	struct cmsghdr *cm;
	struct iovec iov;
	char b;
	int fd = -1;

	memset(&mh, 0, sizeof(mh));
	iov.iov_base = &b;
	iov.iov_len = 1;
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = cbuf;
	mh.msg_controllen = sizeof(cbuf);
	if (recvmsg(sock, &mh, MSG_CMSG_CLOEXEC) != 1)
		return -1;
	cm = CMSG_FIRSTHDR(&mh);
	if (!cm || cm->cmsg_type != SCM_RIGHTS)
		return -1;
	memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	return fd;
}

/*
 * What a call may do is decided by whoever opened the file
 * (file->f_cred), not by the thread that issues it:
 *  - a file root opened, inherited across fork() by a child that became
 *    uid 65534 without the device's group (it cannot open the device
 *    itself), or passed to it with SCM_RIGHTS, attaches root's 0600 pool
 *    and may CHECK (admin);
 *  - a file the attacker opened and passed to root stays the attacker's:
 *    root's 0600 pool is EACCES through it, DESTROY EPERM, and
 *    USER_LIMITS reports uid 65534.
 * On 19bd58c the calling thread's credentials decided: the inherited and
 * passed files were refused (EACCES) and the attacker's file, used by
 * root, attached root's pool.
 */
TEST_F(mu, opener_credentials)
{
	struct kvs_pool_create pc;
	struct kvs_pool_stats st;
	struct kvs_user_limits u;
	struct kvs_conn inherited, passed, evil;
	__u32 p;
	int sv[2];
	pid_t pid;

	MU_BEGIN();
	MU_MODULE_ONLY();
	kvs_pool_args(&pc, "", 8);		/* mode 0600: root's alone */
	kvs_env_create(_metadata, &self->env, &pc, "cred");
	ASSERT_EQ(0, kvs_conn_open(&inherited));
	ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	pid = kvs_env_fork(_metadata, &self->env);
	if (pid == 0) {
		struct kvs_pool_stats cst;
		struct kvs_conn g;
		__u32 q;

		close(sv[0]);
		CHILD_BECOME(KVS_NOBODY, 0);
		KVS_CHILD_EQ(-1, open(kvs_dev_path(), O_RDWR));
		KVS_CHILD_EQ(0, kvs_attach_owner(&inherited, 0, pc.name, 0, 0, NULL));
		KVS_CHILD_EQ(0, kvs_alloc(&inherited, 1, &q));
		KVS_CHILD_EQ(0, kvs_stats(&inherited, 0, KVS_STATS_CHECK, &cst));
		KVS_CHILD_EQ(0, kvs_user_limits(&inherited, -1, &u));
		KVS_CHILD_EQ(0, u.uid);
		/* A file root opens now, passed over a socket. */
		KVS_CHILD_EQ(0, kvs_sync_write(sv[1], "r", 1));
		g.fd = recv_fd(sv[1]);
		KVS_CHILD_CHECK(g.fd >= 0);
		KVS_CHILD_EQ(0, kvs_attach_owner(&g, 0, pc.name, 0, 0, NULL));
		KVS_CHILD_EQ(0, kvs_alloc(&g, 1, &q));
		KVS_CHILD_EQ(0, kvs_stats(&g, pc.pool_id, KVS_STATS_CHECK, &cst));
		KVS_CHILD_EQ(2, cst.n_owned);
		_exit(0);
	}
	{
		char r;

		ASSERT_EQ(0, kvs_sync_read(sv[0], &r, 1));
		ASSERT_EQ(0, kvs_conn_open(&passed));
		ASSERT_EQ(0, send_fd(sv[0], passed.fd));
		kvs_conn_close(&passed);
	}
	ASSERT_CHILD_OK(pid);
	kvs_conn_close(&inherited);
	close(sv[0]);
	close(sv[1]);

	/* The attacker's own file, used by root. */
	ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	pid = kvs_env_fork(_metadata, &self->env);
	if (pid == 0) {
		struct kvs_conn h;

		close(sv[0]);
		CHILD_BECOME(KVS_NOBODY, 1);
		child_open(&h);
		KVS_CHILD_EQ(0, send_fd(sv[1], h.fd));
		_exit(0);
	}
	evil.fd = recv_fd(sv[0]);
	ASSERT_LE(0, evil.fd);
	ASSERT_CHILD_OK(pid);
	close(sv[0]);
	close(sv[1]);
	ASSERT_EQ(-EACCES, kvs_attach_owner(&evil, 0, pc.name, 0, 0, NULL));
	ASSERT_EQ(-EBADFD, kvs_alloc(&evil, 1, &p));
	ASSERT_EQ(-EACCES, kvs_stats(&evil, pc.pool_id, 0, &st));
	ASSERT_EQ(-EPERM, kvs_destroy(&evil, pc.pool_id));
	ASSERT_EQ(0, kvs_user_limits(&evil, -1, &u));
	ASSERT_EQ(KVS_NOBODY, u.uid);
	ASSERT_EQ(-EPERM, kvs_user_limits(&evil, 0, &u));
	kvs_conn_close(&evil);

	/* The pool is root's as it was; what the child held went with it. */
	ASSERT_EQ(0, kvs_stats(&self->env.ctl, pc.pool_id, KVS_STATS_CHECK, &st));
	ASSERT_EQ(0, st.n_files);
	ASSERT_EQ(8, st.n_free);
	check_invariants(&self->env.ctl, pc.pool_id);
	kvs_env_assert_baseline(_metadata, &self->env);
}

/*
 * A file of the device opened by uid 65534, a member of the device's
 * group and, unless @extra_gid is -1, of group @extra_gid too; passed to
 * this process over a socket.  The fd, or the test fails.
 */
static int open_as_nobody(struct __test_metadata *_metadata, FIXTURE_DATA(mu) *self,
			  long extra_gid)
{
	int sv[2], fd;
	pid_t pid;

	ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	pid = kvs_env_fork(_metadata, &self->env);
	if (pid == 0) {
		struct kvs_conn c;

		close(sv[0]);
		KVS_CHILD_EQ(0, kvs_become(KVS_NOBODY, 1, extra_gid));
		child_open(&c);
		KVS_CHILD_EQ(0, send_fd(sv[1], c.fd));
		_exit(0);
	}
	fd = recv_fd(sv[0]);
	close(sv[0]);
	close(sv[1]);
	ASSERT_LE(0, fd);
	ASSERT_CHILD_OK(pid);
	return fd;
}

/*
 * Group access is decided by the supplementary groups of whoever opened
 * the file.  A member uid (1000) creates a 0660 pool, of its group 1000.
 * Uid 65534 opens two files, one while it holds group 1000 as a
 * supplementary group and one while it does not; the two differ in
 * nothing else.  A process of uid 65534 with no group at all (it cannot
 * even open the device) attaches the pool through the first and
 * allocates; root, holding group 1000 itself, is refused (EACCES) through
 * the second.
 * On 19bd58c the calling process's credentials decided: the groupless
 * process was refused, and root (admin, and in the group) attached.  A
 * module that took f_cred's uid but current's groups fails both ways too.
 */
TEST_F(mu, opener_groups)
{
	struct kvs_pool_desc d[KVS_ENV_POOLS + 8];
	struct kvs_pool_stats st;
	struct kvs_conn member, outsider;
	struct kvs_quota q;
	char name[KVS_NAME_MAX];
	__u32 id, n = 0, i;
	pid_t pid;

	MU_BEGIN();
	MU_MODULE_ONLY();
	kvs_env_name(&self->env, name, "group");
	pid = kvs_env_fork(_metadata, &self->env);
	if (pid == 0) {
		struct kvs_pool_create pc;
		struct kvs_conn c;

		KVS_CHILD_EQ(0, kvs_become(MU_MEMBER, 1, -1));
		child_open(&c);
		kvs_pool_args(&pc, name, 4);
		pc.mode = 0660;
		KVS_CHILD_EQ(0, kvs_pool_create(&c, &pc));
		_exit(0);
	}
	ASSERT_CHILD_OK(pid);
	id = find_pool(_metadata, &self->env.ctl, MU_MEMBER, name);
	kvs_env_track(_metadata, &self->env, id);
	ASSERT_EQ(0, kvs_pool_list(&self->env.ctl, d, KVS_ARRAY_SIZE(d), &n));
	for (i = 0; i < n && d[i].pool_id != id; i++)
		;
	ASSERT_LT(i, n);
	ASSERT_EQ(MU_MEMBER, d[i].gid);
	ASSERT_EQ(0660, d[i].mode);

	member.fd = open_as_nobody(_metadata, self, MU_MEMBER);
	outsider.fd = open_as_nobody(_metadata, self, -1);
	pid = kvs_env_fork(_metadata, &self->env);
	if (pid == 0) {
		__u32 p;

		CHILD_BECOME(KVS_NOBODY, 0);
		KVS_CHILD_EQ(-1, open(kvs_dev_path(), O_RDWR | O_CLOEXEC));
		KVS_CHILD_EQ(-EACCES, kvs_attach_owner(&outsider, MU_MEMBER, name, 0, 0, NULL));
		KVS_CHILD_EQ(0, kvs_attach_owner(&member, MU_MEMBER, name, 0, 0, NULL));
		KVS_CHILD_EQ(0, kvs_alloc(&member, 1, &p));
		_exit(0);
	}
	ASSERT_CHILD_OK(pid);
	pid = kvs_env_fork(_metadata, &self->env);
	if (pid == 0) {
		gid_t g = MU_MEMBER;

		/* Still root (admin), now in the pool's group as well. */
		KVS_CHILD_EQ(0, setgroups(1, &g));
		KVS_CHILD_EQ(-EACCES, kvs_attach_owner(&outsider, MU_MEMBER, name, 0, 0, NULL));
		_exit(0);
	}
	ASSERT_CHILD_OK(pid);

	/* The member's file holds the page; the outsider's holds nothing. */
	ASSERT_EQ(0, kvs_stats(&self->env.ctl, id, KVS_STATS_CHECK, &st));
	ASSERT_EQ(1, st.n_files);
	ASSERT_EQ(1, st.n_owned);
	ASSERT_EQ(-EBADFD, kvs_quota_get(&outsider, &q));
	kvs_conn_close(&member);
	kvs_conn_close(&outsider);
	check_invariants(&self->env.ctl, id);
	kvs_env_assert_baseline(_metadata, &self->env);
}

/* ------------------------------------------------------------------ */
/* Pool memory                                                        */
/* ------------------------------------------------------------------ */

#define PM_PAGES	4
#define PM_BYTES	(PM_PAGES * KVS_T_PAGE_BYTES)

/*
 * Pool memory must be a memfd sealed with F_SEAL_SHRINK and F_SEAL_SEAL,
 * with no write seal, and at least as long as the pool: an unsealed memfd
 * (or one sealed against growing only, or against shrinking but open to
 * more seals, or sealed against writes, or one made without
 * MFD_ALLOW_SEALING, which only F_SEAL_SEAL seals) is EPERM, a short one
 * ERANGE, a regular file (on disk or tmpfs), a pipe or a socket EINVAL;
 * each refusal leaves nothing behind, and the same name is then created
 * with valid memory (exact, and longer).
 * On 19bd58c every regular file was taken: the unsealed memfd, the short
 * one and the plain file all made pools.
 */
TEST_F(mu, pool_memory_refused)
{
	struct kvs_pool_create pc;
	struct kvs_info i0, i1;
	struct kvs_conn *c;
	char name[KVS_NAME_MAX], path[128];
	int fd, pfd[2], sv[2];

	MU_BEGIN();
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &i0));
	if (!(i0.features & KVS_FEAT_MEM_FD))
		SKIP(return, "arbiter without KVS_FEAT_MEM_FD");
	kvs_env_name(&self->env, name, "mem");
	c = &self->env.ctl;
#define EXPECT_MEM(err, what, fd_) do { \
	kvs_pool_args(&pc, name, PM_PAGES); \
	pc.mem_fd = (fd_); \
	ASSERT_EQ(err, kvs_pool_create(c, &pc)) TH_LOG("%s", what); \
} while (0)
	fd = kvs_memfd("unsealed", PM_BYTES, 0);
	ASSERT_LE(0, fd);
	EXPECT_MEM(-EPERM, "unsealed memfd", fd);
	close(fd);
	fd = kvs_memfd("grow-sealed", PM_BYTES, F_SEAL_GROW);
	ASSERT_LE(0, fd);
	EXPECT_MEM(-EPERM, "memfd sealed against growing only", fd);
	close(fd);
	fd = kvs_memfd("seal-open", PM_BYTES, F_SEAL_SHRINK);
	ASSERT_LE(0, fd);
	EXPECT_MEM(-EPERM, "memfd open to more seals", fd);
	close(fd);
	fd = kvs_memfd("future-write", PM_BYTES, KVS_T_SEALS | F_SEAL_FUTURE_WRITE);
	ASSERT_LE(0, fd);
	EXPECT_MEM(-EPERM, "memfd sealed against writes", fd);
	close(fd);
	/*
	 * A memfd made without MFD_ALLOW_SEALING carries F_SEAL_SEAL from
	 * birth and can never be sealed against shrinking.
	 */
	fd = memfd_create("no-sealing", MFD_CLOEXEC);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, ftruncate(fd, PM_BYTES));
	EXPECT_MEM(-EPERM, "memfd without MFD_ALLOW_SEALING", fd);
	close(fd);
	fd = kvs_memfd("short", PM_BYTES - 1, KVS_T_SEALS);
	ASSERT_LE(0, fd);
	EXPECT_MEM(-ERANGE, "memfd one byte short", fd);
	close(fd);
	fd = kvs_memfd("empty", 0, KVS_T_SEALS);
	ASSERT_LE(0, fd);
	EXPECT_MEM(-ERANGE, "empty memfd", fd);
	close(fd);
	/* A regular file: in the working directory (the VM's /tmp is tmpfs). */
	snprintf(path, sizeof(path), "mu-%d-file", (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	ASSERT_LE(0, fd);
	unlink(path);
	ASSERT_EQ(0, ftruncate(fd, PM_BYTES));
	EXPECT_MEM(-EINVAL, "regular file", fd);
	close(fd);
	/* A tmpfs file that is not a memfd (its seals are F_SEAL_SEAL). */
	fd = open("/dev/shm", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd >= 0) {
		ASSERT_EQ(0, ftruncate(fd, PM_BYTES));
		EXPECT_MEM(-EINVAL, "tmpfs file", fd);
		close(fd);
	}
	ASSERT_EQ(0, pipe(pfd));
	EXPECT_MEM(-EINVAL, "pipe", pfd[0]);
	EXPECT_MEM(-EINVAL, "pipe (write end)", pfd[1]);
	close(pfd[0]);
	close(pfd[1]);
	ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	EXPECT_MEM(-EINVAL, "socket", sv[0]);
	close(sv[0]);
	close(sv[1]);
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &i1));
	ASSERT_EQ(i0.n_pools, i1.n_pools);
	ASSERT_EQ(i0.n_objects, i1.n_objects);

	/* Valid memory: exactly the pool's size, and longer. */
	fd = kvs_memfd("exact", PM_BYTES, KVS_T_SEALS);
	ASSERT_LE(0, fd);
	kvs_pool_args(&pc, name, PM_PAGES);
	pc.mem_fd = fd;
	kvs_env_create(_metadata, &self->env, &pc, "");
	close(fd);
	fd = kvs_memfd("longer", 2 * PM_BYTES, F_SEAL_SHRINK | F_SEAL_SEAL);
	ASSERT_LE(0, fd);
	kvs_pool_args(&pc, "", PM_PAGES);
	pc.mem_fd = fd;
	kvs_env_create(_metadata, &self->env, &pc, "mem2");
	close(fd);
#undef EXPECT_MEM
	kvs_env_assert_baseline(_metadata, &self->env);
}

/*
 * A memfd reopened through /proc/self/fd/N is a new open file of the same
 * memfd, its seals included, and is taken as pool memory as the memfd
 * itself is: an attacher's memory fd shows the creator's bytes and seals.
 * A guard, not an attack: 19bd58c took any regular file, so this passed
 * there too.  It keeps the check on the memory itself (the inode: which
 * file system, which seals), not on the open file that was passed.
 */
TEST_F(mu, pool_memory_reopened)
{
	struct kvs_pool_create pc;
	struct kvs_pool_attach at;
	struct kvs_info in;
	struct kvs_conn *a;
	unsigned char *m, *am;
	char path[64];
	int fd, rfd, st;

	MU_BEGIN();
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &in));
	if (!(in.features & KVS_FEAT_MEM_FD))
		SKIP(return, "arbiter without KVS_FEAT_MEM_FD");
	fd = kvs_memfd("reopened", PM_BYTES, KVS_T_SEALS);
	ASSERT_LE(0, fd);
	m = mmap(NULL, PM_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ASSERT_NE(MAP_FAILED, m);
	pattern_fill(m, PM_BYTES, 5);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	rfd = open(path, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, rfd) TH_LOG("%s: %s", path, strerror(errno));
	close(fd);
	kvs_pool_args(&pc, "", PM_PAGES);
	pc.mem_fd = rfd;
	kvs_env_create(_metadata, &self->env, &pc, "reopened");
	close(rfd);

	a = kvs_env_open(_metadata, &self->env);
	ASSERT_EQ(0, kvs_attach(a, pc.name, 0, KVS_ATTACH_MEM_FD, &at));
	ASSERT_LE(0, at.mem_fd);
	ASSERT_EQ(KVS_T_SEALS, fcntl(at.mem_fd, F_GET_SEALS) & KVS_T_SEALS);
	am = mmap(NULL, PM_BYTES, PROT_READ, MAP_SHARED, at.mem_fd, 0);
	ASSERT_NE(MAP_FAILED, am);
	close(at.mem_fd);
	st = read_in_child(am, PM_BYTES, 5);
	ASSERT_EQ(0, st) TH_LOG("reader status 0x%x", st);
	munmap(am, PM_BYTES);
	munmap(m, PM_BYTES);
	check_invariants(&self->env.ctl, pc.pool_id);
	kvs_env_assert_baseline(_metadata, &self->env);
}

/* A number from /proc/meminfo ("HugePages_Free", "Hugepagesize"), or -1. */
static long meminfo_get(const char *key)
{
	char line[128];
	size_t len = strlen(key);
	long v = -1;
	FILE *f = fopen("/proc/meminfo", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, len) && line[len] == ':') {
			v = strtol(line + len + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

#define NR_HUGEPAGES	"/proc/sys/vm/nr_hugepages"

static long nr_hugepages(void)
{
	FILE *f = fopen(NR_HUGEPAGES, "r");
	long v = -1;

	if (!f)
		return -1;
	if (fscanf(f, "%ld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

static int set_nr_hugepages(long nr)
{
	FILE *f = fopen(NR_HUGEPAGES, "w");
	int ret;

	if (!f)
		return -errno;
	ret = fprintf(f, "%ld\n", nr) < 0 ? -EIO : 0;
	if (fclose(f) && !ret)
		ret = -errno;
	return ret;
}

/* Give back the huge pages a test reserved (@nr: the count before, or -1). */
static void huge_restore(long nr)
{
	if (nr >= 0 && set_nr_hugepages(nr))
		fprintf(stderr, "# could not set vm.nr_hugepages back to %ld\n", nr);
}

/*
 * Pool memory on hugetlbfs (memfd_create(MFD_HUGETLB)) obeys the same
 * rules as a shmem memfd: unsealed EPERM, one 4 KiB page longer than the
 * memfd ERANGE, sealed and long enough a pool, whose attachers map the
 * creator's bytes.  The VM boots without huge pages: in it the test
 * reserves one (vm.nr_hugepages, given back at teardown); on a shared
 * host with none free it skips rather than change the host.
 * On 19bd58c any regular file was taken: the unsealed memfd made a pool,
 * and its creator could shrink it under every attacher's mapping.
 */
TEST_F(mu, pool_memory_hugetlb)
{
	struct kvs_pool_create pc;
	struct kvs_pool_attach at;
	struct kvs_info i0, i1;
	struct kvs_conn *a;
	unsigned char *m, *am;
	long hsize, nr;
	int fd, st;

	MU_BEGIN();
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &i0));
	if (!(i0.features & KVS_FEAT_MEM_FD))
		SKIP(return, "arbiter without KVS_FEAT_MEM_FD");
	hsize = meminfo_get("Hugepagesize") * 1024;
	if (hsize <= 0)
		SKIP(return, "no hugetlbfs (no Hugepagesize in /proc/meminfo)");
	nr = nr_hugepages();
	if (meminfo_get("HugePages_Free") < 1 && is_module(self) && nr >= 0 &&
	    !set_nr_hugepages(nr + 1))
		self->nr_huge = nr;
	if (meminfo_get("HugePages_Free") < 1)
		SKIP(return, "no free huge page (vm.nr_hugepages %ld)%s", nr,
		     is_module(self) ? ", and none could be reserved" :
		     ": not reserving one on a shared host");
	fd = memfd_create("kvs-huge", MFD_CLOEXEC | MFD_HUGETLB | MFD_ALLOW_SEALING);
	if (fd < 0)
		SKIP(return, "memfd_create(MFD_HUGETLB): %s", strerror(errno));
	ASSERT_EQ(0, ftruncate(fd, hsize));
	kvs_pool_args(&pc, "", hsize / KVS_T_PAGE_BYTES);
	kvs_env_name(&self->env, pc.name, "huge");
	pc.mem_fd = fd;
	ASSERT_EQ(-EPERM, kvs_pool_create(&self->env.ctl, &pc));
	ASSERT_EQ(0, fcntl(fd, F_ADD_SEALS, KVS_T_SEALS));
	pc.n_pages++;
	ASSERT_EQ(-ERANGE, kvs_pool_create(&self->env.ctl, &pc));
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &i1));
	ASSERT_EQ(i0.n_pools, i1.n_pools);
	ASSERT_EQ(i0.n_objects, i1.n_objects);
	pc.n_pages--;
	kvs_env_create(_metadata, &self->env, &pc, "");

	m = mmap(NULL, hsize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ASSERT_NE(MAP_FAILED, m) TH_LOG("mmap: %s", strerror(errno));
	close(fd);
	pattern_fill(m, hsize, 9);
	a = kvs_env_open(_metadata, &self->env);
	ASSERT_EQ(0, kvs_attach(a, pc.name, 0, KVS_ATTACH_MEM_FD, &at));
	ASSERT_LE(0, at.mem_fd);
	am = mmap(NULL, hsize, PROT_READ, MAP_SHARED, at.mem_fd, 0);
	ASSERT_NE(MAP_FAILED, am) TH_LOG("mmap: %s", strerror(errno));
	close(at.mem_fd);
	st = read_in_child(am, hsize, 9);
	ASSERT_EQ(0, st) TH_LOG("reader status 0x%x", st);
	munmap(am, hsize);
	munmap(m, hsize);
	check_invariants(&self->env.ctl, pc.pool_id);
	kvs_env_assert_baseline(_metadata, &self->env);
}

/*
 * The victim's pool memory is mapped by the victim and handed to the
 * attacker (mode 0666, KVS_ATTACH_MEM_FD gives an O_RDWR fd).  The
 * attacker truncates it, to 0 and to half: EPERM (F_SEAL_SHRINK), and
 * the victim still reads every byte it wrote (no SIGBUS).  Nor can the
 * attacker seal it against writes (F_SEAL_SEAL), which would make every
 * later writable mapping of the pool fail.
 * The victim first offers the arbiter unsealed memory, as any caller
 * could before: on 19bd58c it was taken, the attacker's ftruncate
 * succeeded and the victim's read died of SIGBUS.
 */
TEST_F(mu, shrink_pool_memory)
{
	struct kvs_pool_create pc;
	struct kvs_info in;
	struct kvs_conn *v;
	__u32 p[2];
	unsigned char *m;
	int fd, ret, st;
	pid_t pid;

	MU_BEGIN();
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &in));
	if (!(in.features & KVS_FEAT_MEM_FD))
		SKIP(return, "arbiter without KVS_FEAT_MEM_FD");
	fd = kvs_memfd("victim", PM_BYTES, 0);
	ASSERT_LE(0, fd);
	kvs_pool_args(&pc, "", PM_PAGES);
	kvs_env_name(&self->env, pc.name, "shrink");
	pc.mode = 0666;
	pc.mem_fd = fd;
	ret = kvs_pool_create(&self->env.ctl, &pc);
	if (ret == 0) {
		kvs_env_track(_metadata, &self->env, pc.pool_id);	/* the old ABI */
	} else {
		ASSERT_EQ(-EPERM, ret);
		ASSERT_EQ(0, fcntl(fd, F_ADD_SEALS, KVS_T_SEALS));
		kvs_env_create(_metadata, &self->env, &pc, "");
	}
	m = mmap(NULL, PM_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ASSERT_NE(MAP_FAILED, m);
	close(fd);
	pattern_fill(m, PM_BYTES, 3);
	v = kvs_env_attach(_metadata, &self->env, pc.name, 0);
	ASSERT_EQ(0, kvs_alloc(v, 2, p));
	ASSERT_EQ(0, kvs_publish_chain(v, p, 2, KVS_NO_PAGE, 41, 0, NULL, NULL));

	pid = kvs_env_fork(_metadata, &self->env);
	if (pid == 0) {
		struct kvs_pool_attach at;
		struct kvs_conn c;
		struct stat sb;

		CHILD_BECOME(KVS_NOBODY, 1);
		child_open(&c);
		KVS_CHILD_EQ(0, kvs_attach_owner(&c, 0, pc.name, 0, KVS_ATTACH_MEM_FD, &at));
		KVS_CHILD_CHECK(at.mem_fd >= 0);
		KVS_CHILD_EQ(O_RDWR, fcntl(at.mem_fd, F_GETFL) & O_ACCMODE);
		KVS_CHILD_EQ(-1, ftruncate(at.mem_fd, 0));
		KVS_CHILD_EQ(EPERM, errno);
		KVS_CHILD_EQ(-1, ftruncate(at.mem_fd, PM_BYTES / 2));
		KVS_CHILD_EQ(EPERM, errno);
		/* Nor can the seal be taken off, nor a write seal added. */
		KVS_CHILD_CHECK(fcntl(at.mem_fd, F_GET_SEALS) & F_SEAL_SHRINK);
		KVS_CHILD_EQ(-1, fcntl(at.mem_fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE));
		KVS_CHILD_EQ(EPERM, errno);
		KVS_CHILD_CHECK(!(fcntl(at.mem_fd, F_GET_SEALS) & F_SEAL_FUTURE_WRITE));
		KVS_CHILD_EQ(0, fstat(at.mem_fd, &sb));
		KVS_CHILD_EQ(PM_BYTES, sb.st_size);
		_exit(0);
	}
	ASSERT_CHILD_OK(pid);

	/* Every byte still there (a shrunk file would SIGBUS the reader). */
	st = read_in_child(m, PM_BYTES, 3);
	ASSERT_EQ(0, st) TH_LOG("reader status 0x%x (signal %d)", st,
				WIFSIGNALED(st) ? WTERMSIG(st) : 0);
	munmap(m, PM_BYTES);
	assert_chain_intact(_metadata, kvs_env_attach(_metadata, &self->env, pc.name, 0),
			    41, p, 2);
	check_invariants(&self->env.ctl, pc.pool_id);
	kvs_env_assert_baseline(_metadata, &self->env);
}

/* ------------------------------------------------------------------ */
/* A final copy that fails                                            */
/* ------------------------------------------------------------------ */

/*
 * The module checks, before a command acts, that its struct can be
 * written back (it writes it back unchanged), so only memory whose
 * protection changes while the command runs can still fail the final
 * copy.  To make that happen deterministically, the test holds the
 * command inside the module: an admin's STATS with CHECK walks a large
 * pool under its lock for a while; an ATTACH to that pool, once past the
 * probe, waits for the lock holding the registry lock; a CREATE then
 * waits for the registry lock.  When /proc shows both threads asleep in
 * the kernel ('D', a mutex: nothing else in these calls sleeps so) and
 * the CHECK has not returned, the test makes their structs read-only;
 * the CHECK ends, and both final copies fail.  If the CHECK ended first
 * (too small a pool for this machine) the round does not count, and the
 * test retries with a larger pool, or skips.
 */
struct undo_call {
	int fd;
	unsigned long cmd;
	void *arg;
	pid_t tid;
	int started, done;		/* __atomic_* only */
	int ret;
};

static void *undo_thread(void *p)
{
	struct undo_call *u = p;

	u->tid = (pid_t)syscall(SYS_gettid);
	__atomic_store_n(&u->started, 1, __ATOMIC_SEQ_CST);
	u->ret = ioctl(u->fd, u->cmd, u->arg) ? -errno : 0;
	__atomic_store_n(&u->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

/* The state letter of thread @tid of this process ('?' if unknown). */
static char thread_state(pid_t tid)
{
	char path[64], buf[512], *s;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return '?';
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return '?';
	buf[n] = 0;
	s = strrchr(buf, ')');
	return s && s[1] == ' ' ? s[2] : '?';
}

/* Wait until @u sleeps in the kernel ('D'): 1, or 0 if it returned first. */
static int wait_blocked(struct undo_call *u)
{
	int i;

	while (!__atomic_load_n(&u->started, __ATOMIC_SEQ_CST))
		usleep(100);
	for (i = 0; i < 200000; i++) {
		if (__atomic_load_n(&u->done, __ATOMIC_SEQ_CST))
			return 0;
		if (thread_state(u->tid) == 'D')
			return 1;
		sched_yield();
	}
	return 0;
}

static int count_fds(void)
{
	int fd, n = 0;

	for (fd = 0; fd < 1024; fd++)
		if (fcntl(fd, F_GETFD) >= 0)
			n++;
	return n;
}

/*
 * ATTACH (with KVS_ATTACH_MEM_FD) and CREATE whose final copy to the
 * caller fails take no effect: the file is not attached (ALLOC is EBADFD,
 * the pool counts no new file, a later ATTACH works), no fd was
 * installed, and the pool the CREATE made is gone (its name is free).
 * On 19bd58c the file stayed attached and the pool stayed created.
 */
TEST_F_TIMEOUT(mu, failed_copy_undone, 300)
{
	struct kvs_pool_create big, *cr;
	struct kvs_pool_attach *at;
	struct kvs_pool_stats st0, st, chk_st;
	struct undo_call chk, att, cre;
	pthread_t tc, ta, tb;
	struct kvs_info in, i0, i1;
	struct kvs_conn *fresh, *cc, *chk_conn;
	char name[KVS_NAME_MAX];
	long pg = sysconf(_SC_PAGESIZE);
	__u64 n_pages;
	unsigned char *area;
	int round, att_ok = 0, cre_ok = 0, att_held, cre_held, fds0, mfd;
	__u32 q;

	MU_BEGIN();
	MU_MODULE_ONLY();
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &in));
	area = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, area);
	for (round = 0, n_pages = 1u << 18; round < 4 && !(att_ok && cre_ok);
	     round++, n_pages *= 2) {
		if (n_pages > in.max_pool_pages)
			break;
		ASSERT_EQ(0, mprotect(area, 2 * pg, PROT_READ | PROT_WRITE));
		memset(area, 0, 2 * pg);
		/* The pool the CHECK walks, with (sparse) memory for MEM_FD. */
		mfd = kvs_memfd("undo", n_pages * KVS_T_PAGE_BYTES, KVS_T_SEALS);
		ASSERT_LE(0, mfd);
		kvs_pool_args(&big, "", n_pages);
		big.mem_fd = mfd;
		kvs_env_create(_metadata, &self->env, &big, "undo");
		close(mfd);
		fresh = kvs_env_open(_metadata, &self->env);
		cc = kvs_env_open(_metadata, &self->env);
		chk_conn = kvs_env_open(_metadata, &self->env);
		ASSERT_EQ(0, kvs_stats(&self->env.ctl, big.pool_id, 0, &st0));
		ASSERT_EQ(0, kvs_info(&self->env.ctl, &i0));
		fds0 = count_fds();

		at = (void *)area;
		snprintf(at->name, KVS_NAME_MAX, "%s", big.name);
		at->flags = KVS_ATTACH_MEM_FD;
		cr = (void *)(area + pg);
		kvs_pool_args(cr, "", 2);
		kvs_env_name(&self->env, name, "undone");
		memcpy(cr->name, name, KVS_NAME_MAX);

		memset(&chk_st, 0, sizeof(chk_st));
		chk_st.pool_id = big.pool_id;
		chk_st.flags = KVS_STATS_CHECK;
		chk = (struct undo_call){ .fd = chk_conn->fd, .cmd = KVS_IOC_POOL_STATS,
					  .arg = &chk_st };
		att = (struct undo_call){ .fd = fresh->fd, .cmd = KVS_IOC_POOL_ATTACH,
					  .arg = at };
		cre = (struct undo_call){ .fd = cc->fd, .cmd = KVS_IOC_POOL_CREATE,
					  .arg = cr };
		att_held = cre_held = 0;
		ASSERT_EQ(0, pthread_create(&tc, NULL, undo_thread, &chk));
		while (!__atomic_load_n(&chk.started, __ATOMIC_SEQ_CST))
			usleep(100);
		usleep(2000);	/* let the CHECK take the pool lock */
		ASSERT_EQ(0, pthread_create(&ta, NULL, undo_thread, &att));
		ASSERT_EQ(0, pthread_create(&tb, NULL, undo_thread, &cre));
		if (wait_blocked(&att)) {
			cre_held = wait_blocked(&cre);
			ASSERT_EQ(0, mprotect(area, 2 * pg, PROT_READ));
			/* Still waiting after the mprotect: the round counts. */
			att_held = !__atomic_load_n(&chk.done, __ATOMIC_SEQ_CST) &&
				   !__atomic_load_n(&att.done, __ATOMIC_SEQ_CST);
			cre_held = cre_held && att_held &&
				   !__atomic_load_n(&cre.done, __ATOMIC_SEQ_CST);
		}
		pthread_join(tb, NULL);
		pthread_join(ta, NULL);
		pthread_join(tc, NULL);
		ASSERT_EQ(0, chk.ret);
		ASSERT_EQ(0, mprotect(area, 2 * pg, PROT_READ | PROT_WRITE));
		TH_LOG("round %d (%llu pages): ATTACH %s, CREATE %s", round,
		       (unsigned long long)n_pages, att_held ? "held" : "not held",
		       cre_held ? "held" : "not held");

		if (att_held) {
			/* ATTACH: EFAULT, and as if it never happened. */
			ASSERT_EQ(-EFAULT, att.ret);
			ASSERT_EQ(-EBADFD, kvs_alloc(fresh, 1, &q))
				TH_LOG("the file stayed attached");
			ASSERT_EQ(0, kvs_stats(&self->env.ctl, big.pool_id, 0, &st));
			ASSERT_EQ(st0.n_files, st.n_files);
			ASSERT_EQ(fds0, count_fds()) TH_LOG("an fd was installed");
			ASSERT_EQ(0, kvs_attach(fresh, big.name, 0, 0, NULL));
			ASSERT_EQ(0, kvs_alloc(fresh, 1, &q));
			att_ok = 1;
		} else if (!att.ret && at->mem_fd >= 0) {
			close(at->mem_fd);
		}
		if (cre_held) {
			/* CREATE: EFAULT, and no pool of that name. */
			ASSERT_EQ(-EFAULT, cre.ret);
			ASSERT_EQ(0, kvs_info(&self->env.ctl, &i1));
			ASSERT_EQ(i0.n_pools, i1.n_pools) TH_LOG("the pool stayed");
			ASSERT_EQ(0, find_pool(_metadata, &self->env.ctl, 0, name));
			ASSERT_EQ(-ENOENT, kvs_attach(cc, name, 0, 0, NULL));
			kvs_pool_args(cr, name, 2);
			kvs_env_create(_metadata, &self->env, cr, "");
			cre_ok = 1;
		} else if (!cre.ret) {
			kvs_env_track(_metadata, &self->env, cr->pool_id);
		}
		check_invariants(&self->env.ctl, big.pool_id);
		kvs_env_assert_baseline(_metadata, &self->env);
	}
	munmap(area, 2 * pg);
	if (!att_ok)
		SKIP(return, "could not hold an ATTACH in the module long enough");
	if (!cre_ok)
		SKIP(return, "ATTACH checked; a CREATE could not be held in the module");
}

TEST_HARNESS_MAIN
