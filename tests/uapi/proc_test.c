// SPDX-License-Identifier: GPL-2.0
/*
 * kvshare across processes and threads: sharing after fork() and through
 * separate opens, kill -9 of holders at several points, threads racing
 * LOOKUP, PUBLISH, PUT and eviction on one prefix chain, quota exhaustion
 * by one file while others allocate, and pool permissions.
 *
 * After every scenario: KVS_STATS_CHECK passes, free + owned + shared +
 * cached == n_pages, n_held == n_refs + n_owned, and once every file is
 * closed every counter (holdings, files, pools, objects) is back where it
 * started.
 *
 * Children never use the harness asserts (they would run the fixture's
 * teardown in the child); they report through KVS_CHILD_* and their exit
 * status, which the test asserts.
 */
#include <grp.h>
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>

#include "kvs_test.h"

FIXTURE(proc) {
	struct kvs_env env;
};

FIXTURE_SETUP(proc)
{
	kvs_env_init(&self->env);
}

FIXTURE_TEARDOWN(proc)
{
	kvs_env_fini(&self->env);
}

/* Pool counters through the control file, by pool id. */
static void pool_stats(struct __test_metadata *_metadata, FIXTURE_DATA(proc) *self,
		       __u32 id, struct kvs_pool_stats *st)
{
	kvs_check_invariants_st(_metadata, &self->env.ctl, id, st);
}

/* Everything released: only cached (or free) pages are left. */
static void assert_idle(struct __test_metadata *_metadata, FIXTURE_DATA(proc) *self,
			__u32 id, __u64 files)
{
	struct kvs_pool_stats st;

	pool_stats(_metadata, self, id, &st);
	ASSERT_EQ(files, st.n_files);
	if (!files) {
		ASSERT_EQ(0, st.n_held);
		ASSERT_EQ(0, st.n_owned);
		ASSERT_EQ(0, st.n_shared);
		ASSERT_EQ(0, st.n_refs);
	}
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* In a child: a new file attached to @name. */
static void child_attach(struct kvs_conn *c, const char *name, __u64 ns)
{
	KVS_CHILD_EQ(0, kvs_conn_open(c));
	KVS_CHILD_EQ(0, kvs_attach(c, name, ns, 0, NULL));
}

/* In a child: wait to be killed. */
static void __attribute__((noreturn)) child_hang(void)
{
	for (;;)
		pause();
}

/* ------------------------------------------------------------------ */

TEST_F(proc, fork_shares_file_holdings)
{
	struct kvs_pool_stats st;
	struct kvs_conn *c;
	char name[KVS_NAME_MAX];
	__u32 id, got[4], q, n;
	int sync[2];
	pid_t pid;

	KVS_REQUIRE(&self->env);
	id = kvs_env_pool(_metadata, &self->env, 16, 0, name);
	c = kvs_env_attach(_metadata, &self->env, name, 0);
	ASSERT_EQ(0, pipe(sync));
	pid = kvs_env_fork(_metadata, &self->env);
	ASSERT_LE(0, pid);
	if (pid == 0) {
		__u32 p[4];

		close(sync[0]);
		/*
		 * The inherited descriptor is the same file: same holdings.
		 * (Parent and child use it one after the other, which a
		 * daemon connection allows as well.)
		 */
		KVS_CHILD_EQ(0, kvs_alloc(c, 4, p));
		KVS_CHILD_EQ(0, kvs_publish_chain(c, p + 3, 1, KVS_NO_PAGE, 1, 0, NULL, NULL));
		KVS_CHILD_EQ(4, kvs_held(c));
		KVS_CHILD_EQ(0, kvs_sync_write(sync[1], p, sizeof(p)));
		_exit(0);
	}
	close(sync[1]);
	ASSERT_EQ(0, kvs_sync_read(sync[0], got, sizeof(got)));
	close(sync[0]);
	ASSERT_CHILD_OK(pid);

	/* The child is gone, its file lives on in the parent. */
	ASSERT_EQ(4, kvs_held(c));
	pool_stats(_metadata, self, id, &st);
	ASSERT_EQ(1, st.n_files);
	ASSERT_EQ(3, st.n_owned);
	ASSERT_EQ(1, st.n_shared);
	ASSERT_PAGE(c, 0, got[0], KVS_PAGE_OWNED, 0);
	ASSERT_EQ(0, kvs_put(c, got, 3));
	ASSERT_EQ(0, kvs_lookup_chain(c, 1, 0, 1, &q, &n));
	ASSERT_EQ(1, n);
	ASSERT_EQ(got[3], q);
	ASSERT_EQ(0, kvs_put(c, (__u32[]){ q, q }, 2));
	ASSERT_PAGE(c, 0, q, KVS_PAGE_CACHED, 0);
	kvs_conn_close(c);
	assert_idle(_metadata, self, id, 0);
	kvs_env_assert_baseline(_metadata, &self->env);
}

TEST_F(proc, separate_opens_share_pages)
{
	struct kvs_pool_stats st;
	struct kvs_conn *c;
	char name[KVS_NAME_MAX];
	__u32 id, got[3], q[3], n, i;
	int up[2], down[2];
	char go = 1;
	pid_t pid;

	KVS_REQUIRE(&self->env);
	id = kvs_env_pool(_metadata, &self->env, 16, 0, name);
	c = kvs_env_attach(_metadata, &self->env, name, 9);
	ASSERT_EQ(0, pipe(up));
	ASSERT_EQ(0, pipe(down));
	pid = kvs_env_fork(_metadata, &self->env);
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct kvs_conn own;
		__u32 p[3];

		close(up[0]);
		close(down[1]);
		kvs_conn_close(c);	/* this child works through its own file */
		child_attach(&own, name, 9);
		KVS_CHILD_EQ(0, kvs_alloc(&own, 3, p));
		KVS_CHILD_EQ(0, kvs_publish_chain(&own, p, 3, KVS_NO_PAGE, 2, 0, NULL, NULL));
		KVS_CHILD_EQ(0, kvs_sync_write(up[1], p, sizeof(p)));
		KVS_CHILD_EQ(0, kvs_sync_read(down[0], &go, 1));
		/* The parent's references keep the pages SHARED. */
		KVS_CHILD_EQ(0, kvs_put(&own, p, 3));
		KVS_CHILD_EQ(KVS_PAGE_SHARED, kvs_page_state(&own, 0, p[0]));
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	ASSERT_EQ(0, kvs_sync_read(up[0], got, sizeof(got)));
	ASSERT_EQ(0, kvs_lookup_chain(c, 2, 0, 3, q, &n));
	ASSERT_EQ(3, n);
	for (i = 0; i < 3; i++) {
		ASSERT_EQ(got[i], q[i]);
		ASSERT_PAGE(c, 0, q[i], KVS_PAGE_SHARED, 2);
	}
	pool_stats(_metadata, self, id, &st);
	ASSERT_EQ(2, st.n_files);
	ASSERT_EQ(0, kvs_sync_write(down[1], &go, 1));
	ASSERT_CHILD_OK(pid);
	close(up[0]);
	close(down[1]);
	for (i = 0; i < 3; i++)
		ASSERT_PAGE(c, 0, q[i], KVS_PAGE_SHARED, 1);
	ASSERT_EQ(0, kvs_put(c, q, 3));
	ASSERT_PAGE(c, 0, q[0], KVS_PAGE_CACHED, 0);
	kvs_conn_close(c);
	assert_idle(_metadata, self, id, 0);
	kvs_env_assert_baseline(_metadata, &self->env);
}

TEST_F(proc, kill9_after_alloc)
{
	struct kvs_pool_stats st;
	char name[KVS_NAME_MAX];
	__u32 id, got[10], i;
	int sync[2];
	pid_t pid;

	KVS_REQUIRE(&self->env);
	id = kvs_env_pool(_metadata, &self->env, 32, 0, name);
	ASSERT_EQ(0, pipe(sync));
	pid = kvs_env_fork(_metadata, &self->env);
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct kvs_conn c;
		__u32 p[10];

		close(sync[0]);
		child_attach(&c, name, 0);
		KVS_CHILD_EQ(0, kvs_alloc(&c, 10, p));
		KVS_CHILD_EQ(0, kvs_sync_write(sync[1], p, sizeof(p)));
		child_hang();
	}
	close(sync[1]);
	ASSERT_EQ(0, kvs_sync_read(sync[0], got, sizeof(got)));
	close(sync[0]);
	pool_stats(_metadata, self, id, &st);
	ASSERT_EQ(10, st.n_owned);
	ASSERT_EQ(1, st.n_files);
	ASSERT_KILL9(pid);
	pool_stats(_metadata, self, id, &st);
	ASSERT_EQ(32, st.n_free);
	for (i = 0; i < 10; i++)
		ASSERT_PAGE(&self->env.ctl, id, got[i], KVS_PAGE_FREE, 0);
	assert_idle(_metadata, self, id, 0);
	kvs_env_assert_baseline(_metadata, &self->env);
}

TEST_F(proc, kill9_after_publish)
{
	struct kvs_pool_stats st;
	struct kvs_conn *c;
	char name[KVS_NAME_MAX];
	__u32 id, got[4], q[4], n, i;
	int sync[2];
	pid_t pid;

	KVS_REQUIRE(&self->env);
	id = kvs_env_pool(_metadata, &self->env, 32, 0, name);
	ASSERT_EQ(0, pipe(sync));
	pid = kvs_env_fork(_metadata, &self->env);
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct kvs_conn cc;
		__u32 p[4], o[2];

		close(sync[0]);
		child_attach(&cc, name, 3);
		KVS_CHILD_EQ(0, kvs_alloc(&cc, 4, p));
		KVS_CHILD_EQ(0, kvs_publish_chain(&cc, p, 4, KVS_NO_PAGE, 3, 0, NULL, NULL));
		KVS_CHILD_EQ(0, kvs_alloc(&cc, 2, o));	/* and some unpublished */
		KVS_CHILD_EQ(0, kvs_sync_write(sync[1], p, sizeof(p)));
		child_hang();
	}
	close(sync[1]);
	ASSERT_EQ(0, kvs_sync_read(sync[0], got, sizeof(got)));
	close(sync[0]);
	pool_stats(_metadata, self, id, &st);
	ASSERT_EQ(4, st.n_shared);
	ASSERT_EQ(2, st.n_owned);
	ASSERT_KILL9(pid);
	pool_stats(_metadata, self, id, &st);
	ASSERT_EQ(4, st.n_cached);
	ASSERT_EQ(1, st.n_evictable);
	ASSERT_EQ(28, st.n_free);
	for (i = 0; i < 4; i++)
		ASSERT_PAGE(&self->env.ctl, id, got[i], KVS_PAGE_CACHED, 0);
	assert_idle(_metadata, self, id, 0);
	/* What the dead process computed is still there for the living. */
	c = kvs_env_attach(_metadata, &self->env, name, 3);
	ASSERT_EQ(0, kvs_lookup_chain(c, 3, 0, 4, q, &n));
	ASSERT_EQ(4, n);
	ASSERT_EQ(0, memcmp(got, q, sizeof(q)));
	kvs_conn_close(c);
	assert_idle(_metadata, self, id, 0);
	kvs_env_assert_baseline(_metadata, &self->env);
}

TEST_F(proc, kill9_holding_lookup_refs)
{
	struct kvs_pool_stats st;
	struct kvs_conn *c;
	char name[KVS_NAME_MAX];
	__u32 id, p[4], i;
	int sync[2];
	char ready;
	pid_t pid;

	KVS_REQUIRE(&self->env);
	id = kvs_env_pool(_metadata, &self->env, 32, 0, name);
	c = kvs_env_attach(_metadata, &self->env, name, 0);
	ASSERT_EQ(0, kvs_alloc(c, 4, p));
	ASSERT_EQ(0, kvs_publish_chain(c, p, 4, KVS_NO_PAGE, 4, 0, NULL, NULL));
	ASSERT_EQ(0, pipe(sync));
	pid = kvs_env_fork(_metadata, &self->env);
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct kvs_conn cc;
		__u32 q[4], n, o[3];

		close(sync[0]);
		kvs_conn_close(c);
		child_attach(&cc, name, 0);
		KVS_CHILD_EQ(0, kvs_lookup_chain(&cc, 4, 0, 4, q, &n));
		KVS_CHILD_EQ(4, n);
		KVS_CHILD_EQ(0, kvs_lookup_chain(&cc, 4, 0, 2, q, &n));
		KVS_CHILD_EQ(2, n);
		KVS_CHILD_EQ(0, kvs_alloc(&cc, 3, o));
		ready = 1;
		KVS_CHILD_EQ(0, kvs_sync_write(sync[1], &ready, 1));
		child_hang();
	}
	close(sync[1]);
	ASSERT_EQ(0, kvs_sync_read(sync[0], &ready, 1));
	close(sync[0]);
	ASSERT_PAGE(c, 0, p[0], KVS_PAGE_SHARED, 3);
	ASSERT_PAGE(c, 0, p[1], KVS_PAGE_SHARED, 3);
	ASSERT_PAGE(c, 0, p[2], KVS_PAGE_SHARED, 2);
	ASSERT_PAGE(c, 0, p[3], KVS_PAGE_SHARED, 2);
	pool_stats(_metadata, self, id, &st);
	ASSERT_EQ(3, st.n_owned);
	ASSERT_EQ(4 + 6, st.n_refs);
	ASSERT_KILL9(pid);
	for (i = 0; i < 4; i++)
		ASSERT_PAGE(c, 0, p[i], KVS_PAGE_SHARED, 1);
	pool_stats(_metadata, self, id, &st);
	ASSERT_EQ(0, st.n_owned);
	ASSERT_EQ(4, st.n_refs);
	ASSERT_EQ(4, st.n_held);
	ASSERT_EQ(1, st.n_files);
	kvs_conn_close(c);
	assert_idle(_metadata, self, id, 0);
	kvs_env_assert_baseline(_metadata, &self->env);
}

/* ------------------------------------------------------------------ */
/* a working client loop, for processes killed mid-flight and threads */
/* ------------------------------------------------------------------ */

#define LOOP_CHAINS	3
#define LOOP_LEN	6

/*
 * One round of a serving client: look a chain up, compute and publish
 * what was missing below the hit (possibly losing the race to another
 * client: a duplicate), sometimes look it up again, then give everything
 * back.  Returns 0, or a negative errno for an unexpected failure (with
 * @what set).  ENOSPC (pool under pressure) and, when @quota_ok, EDQUOT
 * just end the round early.
 */
static int client_round(struct kvs_conn *c, __u32 *seed, int quota_ok,
			const char **what)
{
	__u32 held[4 * LOOP_LEN], nh = 0, hits[LOOP_LEN], n, h, want, i;
	__u32 p[LOOP_LEN], res[LOOP_LEN], ndup;
	__u32 chain = 100 + kvs_rand(seed) % LOOP_CHAINS;
	int ret;

	ret = kvs_lookup_chain(c, chain, 0, LOOP_LEN, hits, &h);
	if (ret == -EDQUOT && quota_ok)
		return 0;
	if (ret) {
		*what = "lookup";
		return ret;
	}
	for (i = 0; i < h; i++)
		held[nh++] = hits[i];
	if (h < LOOP_LEN) {
		want = 1 + kvs_rand(seed) % (LOOP_LEN - h);
		ret = kvs_alloc(c, want, p);
		if (ret == -ENOSPC || (ret == -EDQUOT && quota_ok)) {
			ret = 0;
			goto release;
		}
		if (ret) {
			*what = "alloc";
			goto release;
		}
		ret = kvs_publish_chain(c, p, want, h ? hits[h - 1] : KVS_NO_PAGE,
					chain, h, res, &ndup);
		if (ret) {
			*what = "publish";
			kvs_put(c, p, want);
			goto release;
		}
		for (i = 0; i < want; i++)
			held[nh++] = res[i];
	}
	if (!(kvs_rand(seed) % 4)) {
		ret = kvs_lookup_chain(c, chain, 0, LOOP_LEN, hits, &n);
		if (ret == -EDQUOT && quota_ok) {
			ret = 0;
		} else if (ret) {
			*what = "lookup again";
			goto release;
		} else {
			for (i = 0; i < n; i++)
				held[nh++] = hits[i];
		}
	}
release:
	if (nh) {
		int r = kvs_put(c, held, nh);

		if (r && !ret) {
			*what = "put";
			ret = r;
		}
	}
	return ret;
}

/* Loops in a child until killed; counts rounds in shared memory. */
static void __attribute__((noreturn)) child_loop(struct kvs_conn *c, volatile long *rounds,
						  __u32 seed, int quota_ok)
{
	const char *what = "";
	int ret;

	for (;;) {
		ret = client_round(c, &seed, quota_ok, &what);
		if (ret) {
			fprintf(stderr, "# child %d: %s failed: %s\n", (int)getpid(),
				what, strerror(-ret));
			_exit(102);
		}
		__atomic_add_fetch(rounds, 1, __ATOMIC_RELAXED);
	}
}

/*
 * Processes serving from one pool, killed with SIGKILL one after another
 * at different moments of their loops; two of them share one file, so
 * killing the first must not release what the file still holds.  (Where
 * one file cannot serve two processes at once, the daemon's connection,
 * every child has its own.)
 */
TEST_F_TIMEOUT(proc, kill9_mid_loop, 90)
{
	enum { NCHILD = 4 };
	static const long delay_ms[NCHILD] = { 30, 90, 60, 150 };
	struct kvs_pool_stats st;
	struct kvs_conn *shared;
	char name[KVS_NAME_MAX];
	volatile long *rounds;
	__u32 id;
	pid_t pid[NCHILD];
	int round, i, share;

	KVS_REQUIRE(&self->env);
	share = !!(kvs_conn_caps(&self->env.ctl) & KVS_CAP_SHARED_FILE);
	if (!share)
		ksft_print_msg("kill9_mid_loop: one file per child (this transport "
			       "cannot share a file between processes at once)\n");
	id = kvs_env_pool(_metadata, &self->env, 24, 0, name);
	rounds = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, rounds);

	for (round = 0; round < 3; round++) {
		shared = kvs_env_attach(_metadata, &self->env, name, 0);
		for (i = 0; i < NCHILD; i++) {
			rounds[i] = 0;
			pid[i] = kvs_env_fork(_metadata, &self->env);
			ASSERT_LE(0, pid[i]);
			if (pid[i] == 0) {
				struct kvs_conn own;

				if (share && i >= 2) {	/* children 2 and 3 share a file */
					child_loop(shared, &rounds[i], 77 * round + i + 1, 1);
				}
				kvs_conn_close(shared);
				child_attach(&own, name, 0);
				child_loop(&own, &rounds[i], 77 * round + i + 1, 0);
			}
		}
		kvs_conn_close(shared);	/* now only children 2 and 3 hold it */
		/* Let every child get going, then kill them at staggered times. */
		for (i = 0; i < NCHILD; i++) {
			double t0 = now_s();

			while (!rounds[i] && now_s() - t0 < 20)
				sleep_ms(5);
			ASSERT_LT(0, rounds[i]) TH_LOG("child %d never completed a round", i);
		}
		for (i = 0; i < NCHILD; i++) {
			sleep_ms(delay_ms[(i + round) % NCHILD]);
			ASSERT_KILL9(pid[i]);
			pid[i] = 0;
			/* Others still run: only the arbiter's own (atomic) check. */
			ASSERT_EQ(0, kvs_stats(&self->env.ctl, id, KVS_STATS_CHECK, &st));
			ASSERT_EQ(st.n_pages, st.n_free + st.n_owned + st.n_shared + st.n_cached);
			ASSERT_EQ(st.n_held, st.n_refs + st.n_owned);
			/* Files left: the live ones' (2 and 3 share one). */
			if (share) {
				ASSERT_EQ(i < 2 ? 2 - i : (i == 2 ? 1 : 0), st.n_files);
			} else {
				ASSERT_EQ(NCHILD - 1 - i, st.n_files);
			}
		}
		assert_idle(_metadata, self, id, 0);
	}
	/* The children did serve: pages were published and found. */
	pool_stats(_metadata, self, id, &st);
	ASSERT_LT(0, st.publishes);
	ASSERT_LT(0, st.hits);
	munmap((void *)rounds, 4096);
	kvs_env_assert_baseline(_metadata, &self->env);
}

/* ------------------------------------------------------------------ */
/* threads                                                            */
/* ------------------------------------------------------------------ */

struct race_ctx {
	__u32 pool_id;
	__u32 n_pages;
	volatile int stop;
	pthread_mutex_t lock;
	char err[256];			/* first failure, empty if none */
};

struct race_worker {
	struct race_ctx *ctx;
	struct kvs_conn *c;
	int kind;			/* 0 client, 1 pressure, 2 checker */
	int quota_ok;
	__u32 seed;
	long rounds;
};

static void race_fail(struct race_ctx *ctx, const char *fmt, const char *what, int err)
{
	pthread_mutex_lock(&ctx->lock);
	if (!ctx->err[0])
		snprintf(ctx->err, sizeof(ctx->err), fmt, what, strerror(-err));
	pthread_mutex_unlock(&ctx->lock);
	ctx->stop = 1;
}

static void *race_thread(void *arg)
{
	struct race_worker *w = arg;
	struct race_ctx *ctx = w->ctx;
	const char *what = "";
	__u32 p[64];
	int ret;

	while (!ctx->stop) {
		switch (w->kind) {
		case 0:
			ret = client_round(w->c, &w->seed, w->quota_ok, &what);
			if (ret)
				race_fail(ctx, "client %s: %s", what, ret);
			break;
		case 1: {
			/* Allocation pressure: evicts the chain's cached pages. */
			__u32 k = 1 + kvs_rand(&w->seed) % (ctx->n_pages / 2);

			ret = kvs_alloc(w->c, k, p);
			if (!ret)
				ret = kvs_put(w->c, p, k);
			if (ret && ret != -ENOSPC)
				race_fail(ctx, "pressure %s: %s", "alloc/put", ret);
			break;
		}
		default: {
			/* The invariants hold at every instant, not only at rest. */
			struct kvs_pool_stats st;

			ret = kvs_stats(w->c, ctx->pool_id, KVS_STATS_CHECK, &st);
			if (ret)
				race_fail(ctx, "checker %s: %s", "STATS_CHECK", ret);
			else if (st.n_free + st.n_owned + st.n_shared + st.n_cached != st.n_pages ||
				 st.n_held != st.n_refs + st.n_owned)
				race_fail(ctx, "checker %s%s", "counters inconsistent", 0);
			break;
		}
		}
		w->rounds++;
	}
	return NULL;
}

/*
 * Client threads (each with its own file, or all on one file) race on one
 * chain with a thread that allocates under pressure (evicting) and a
 * thread that runs the full invariant check, for about a second.
 */
static void race_run(struct __test_metadata *_metadata, FIXTURE_DATA(proc) *self,
		     int one_file)
{
	enum { NCLIENT = 3, NTHREAD = NCLIENT + 2 };
	struct race_worker w[NTHREAD];
	struct kvs_pool_stats st;
	struct race_ctx ctx;
	char name[KVS_NAME_MAX];
	struct kvs_conn *files[NTHREAD];
	pthread_t t[NTHREAD];
	__u32 id, q[LOOP_LEN], n;
	int i;

	id = kvs_env_pool(_metadata, &self->env, 24, 0, name);
	memset(&ctx, 0, sizeof(ctx));
	pthread_mutex_init(&ctx.lock, NULL);
	ctx.pool_id = id;
	ctx.n_pages = 24;
	for (i = 0; i < NTHREAD; i++) {
		if (i == NCLIENT + 1)
			files[i] = kvs_env_open(_metadata, &self->env);	/* checker */
		else if (one_file && i > 0 && i < NCLIENT)
			files[i] = files[0];
		else
			files[i] = kvs_env_attach(_metadata, &self->env, name, 0);
		w[i].ctx = &ctx;
		w[i].c = files[i];
		w[i].kind = i < NCLIENT ? 0 : (i == NCLIENT ? 1 : 2);
		w[i].quota_ok = one_file;
		w[i].seed = 1234 + i;
		w[i].rounds = 0;
	}
	for (i = 0; i < NTHREAD; i++)
		ASSERT_EQ(0, pthread_create(&t[i], NULL, race_thread, &w[i]));
	sleep_ms(1000);
	ctx.stop = 1;
	for (i = 0; i < NTHREAD; i++)
		ASSERT_EQ(0, pthread_join(t[i], NULL));
	ASSERT_EQ(0, ctx.err[0]) TH_LOG("%s", ctx.err);
	for (i = 0; i < NTHREAD; i++)
		ASSERT_LT(0, w[i].rounds) TH_LOG("thread %d made no progress", i);

	/* Every thread gave back what it took: nothing is held. */
	pool_stats(_metadata, self, id, &st);
	ksft_print_msg("race: rounds %ld %ld %ld pressure %ld checks %ld; allocs %llu fails %llu "
		       "publishes %llu dups %llu lookups %llu hits %llu evictions %llu\n",
		       w[0].rounds, w[1].rounds, w[2].rounds, w[3].rounds, w[4].rounds,
		       st.allocs, st.alloc_fails, st.publishes, st.dup_publishes,
		       st.lookups, st.hits, st.evictions);
	/* The race did race: chains were built, found, and evicted. */
	ASSERT_LT(0, st.publishes);
	ASSERT_LT(0, st.hits);
	ASSERT_LT(0, st.evictions);
	ASSERT_EQ(0, st.n_held);
	ASSERT_EQ(0, st.n_owned);
	ASSERT_EQ(0, st.n_shared);
	for (i = 0; i < NCLIENT + 1; i++)
		ASSERT_EQ(0, kvs_held(files[i]));
	/* What survived of the chain is a prefix, reachable from its start. */
	ASSERT_EQ(0, kvs_lookup_chain(files[0], 100, 0, LOOP_LEN, q, &n));
	if (n)
		ASSERT_EQ(0, kvs_put(files[0], q, n));
	for (i = 0; i < NTHREAD; i++)
		kvs_conn_close(files[i]);
	assert_idle(_metadata, self, id, 0);
	kvs_env_assert_baseline(_metadata, &self->env);
	pthread_mutex_destroy(&ctx.lock);
}

TEST_F_TIMEOUT(proc, race_threads_own_files, 60)
{
	KVS_REQUIRE(&self->env);
	race_run(_metadata, self, 0);
}

TEST_F_TIMEOUT(proc, race_threads_one_file, 60)
{
	KVS_REQUIRE(&self->env);
	race_run(_metadata, self, 1);
}

/* ------------------------------------------------------------------ */
/* quota, permissions, lifetime                                       */
/* ------------------------------------------------------------------ */

/*
 * One process fills its quota (EDQUOT) while the other files of the pool
 * still allocate; once it dies its pages come back.
 */
TEST_F(proc, quota_exhaustion_other_file_allocates)
{
	struct kvs_pool_stats st;
	struct kvs_conn *b, *c;
	char name[KVS_NAME_MAX];
	__u32 id, pb[12], pc[12], x;
	int sync[2];
	char ready;
	pid_t pid;

	KVS_REQUIRE(&self->env);
	id = kvs_env_pool(_metadata, &self->env, 32, 12, name);
	ASSERT_EQ(0, pipe(sync));
	pid = kvs_env_fork(_metadata, &self->env);
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct kvs_conn a;
		__u32 p[13], q, n;

		close(sync[0]);
		child_attach(&a, name, 0);
		KVS_CHILD_EQ(0, kvs_alloc(&a, 12, p));
		KVS_CHILD_EQ(-EDQUOT, kvs_alloc(&a, 1, p + 12));
		/* Taking references counts against the quota too. */
		KVS_CHILD_EQ(0, kvs_put1(&a, p[11]));
		KVS_CHILD_EQ(0, kvs_publish_chain(&a, p, 1, KVS_NO_PAGE, 5, 0, NULL, NULL));
		KVS_CHILD_EQ(0, kvs_lookup_chain(&a, 5, 0, 1, &q, &n));
		KVS_CHILD_EQ(1, n);
		KVS_CHILD_EQ(-EDQUOT, kvs_lookup_chain(&a, 5, 0, 1, &q, &n));
		KVS_CHILD_EQ(12, kvs_held(&a));
		ready = 1;
		KVS_CHILD_EQ(0, kvs_sync_write(sync[1], &ready, 1));
		child_hang();
	}
	close(sync[1]);
	ASSERT_EQ(0, kvs_sync_read(sync[0], &ready, 1));
	close(sync[0]);

	b = kvs_env_attach(_metadata, &self->env, name, 0);
	c = kvs_env_attach(_metadata, &self->env, name, 0);
	ASSERT_EQ(0, kvs_alloc(b, 12, pb));
	ASSERT_EQ(0, kvs_alloc(c, 9, pc));
	pool_stats(_metadata, self, id, &st);
	ASSERT_EQ(0, st.n_free);
	/* Now the pool, not the quota, is the limit. */
	ASSERT_EQ(-ENOSPC, kvs_alloc(c, 1, &x));
	ASSERT_EQ(-EDQUOT, kvs_alloc(b, 1, &x));
	ASSERT_KILL9(pid);
	ASSERT_EQ(0, kvs_alloc(c, 3, pc + 9));
	pool_stats(_metadata, self, id, &st);
	ASSERT_EQ(24, st.n_owned);
	ASSERT_EQ(2, st.n_files);
	kvs_conn_close(b);
	kvs_conn_close(c);
	assert_idle(_metadata, self, id, 0);
	kvs_env_assert_baseline(_metadata, &self->env);
}

/*
 * uid 65534, a member of the device's group (KVS_TEST_GID, as group
 * kvshare in a real install), with root's group 0 too if @keep_group0.
 */
static void drop_to_nobody(int keep_group0)
{
	KVS_CHILD_EQ(0, kvs_become(KVS_NOBODY, 1, keep_group0 ? 0 : -1));
	KVS_CHILD_EQ(65534, geteuid());
}

/*
 * Root owns pools of several modes; an unprivileged process gets exactly
 * the access the mode bits give its class, and never DESTROY.
 */
TEST_F(proc, permissions)
{
	struct kvs_pool_create p600, p604, p666, p660;
	struct kvs_pool_desc d[KVS_ENV_POOLS + 8];
	struct kvs_pool_stats st;
	struct kvs_conn *c;
	struct stat sb;
	__u32 n, i, nobody_id = 0;
	char nobody_name[KVS_NAME_MAX];
	pid_t pid;

	KVS_REQUIRE(&self->env);
	if (geteuid() != 0)
		SKIP(return, "needs root to switch to uid 65534");
	ASSERT_EQ(0, stat(kvs_dev_path(), &sb));
	if (kvs_conn_caps(&self->env.ctl) & KVS_CAP_MODULE) {
		/* Members of the device's group may open it, nobody else. */
		ASSERT_EQ(0660, sb.st_mode & 0777);
		ASSERT_EQ(KVS_TEST_GID, sb.st_gid);
	}
	ASSERT_EQ(0, getegid());
	kvs_pool_args(&p600, "", 4);
	kvs_env_create(_metadata, &self->env, &p600, "m600");
	kvs_pool_args(&p604, "", 4);
	p604.mode = 0604;
	kvs_env_create(_metadata, &self->env, &p604, "m604");
	kvs_pool_args(&p666, "", 4);
	p666.mode = 0666;
	kvs_env_create(_metadata, &self->env, &p666, "m666");
	kvs_pool_args(&p660, "", 4);
	p660.mode = 0660;
	kvs_env_create(_metadata, &self->env, &p660, "m660");
	kvs_env_name(&self->env, nobody_name, "nobody");

	/*
	 * An unprivileged process outside the owner's group: "other".  It
	 * may open the device (it is in the device's group), and pools' own
	 * modes decide the rest.
	 */
	pid = kvs_env_fork(_metadata, &self->env);
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct kvs_pool_create mine;
		struct kvs_pool_stats cst;
		struct kvs_page_desc pd;
		struct kvs_conn x, y, z;
		__u32 pg;

		drop_to_nobody(0);
		KVS_CHILD_EQ(0, kvs_conn_open(&x));
		/* 0600: nothing. */
		KVS_CHILD_EQ(-EACCES, kvs_attach(&x, p600.name, 0, 0, NULL));
		KVS_CHILD_EQ(-EACCES, kvs_stats(&x, p600.pool_id, 0, &cst));
		KVS_CHILD_EQ(-EACCES, kvs_pages(&x, p600.pool_id, 0, 1, &pd, NULL));
		KVS_CHILD_EQ(-EPERM, kvs_destroy(&x, p600.pool_id));
		KVS_CHILD_EQ(-EBADFD, kvs_alloc(&x, 1, &pg));	/* still unattached */
		/* 0660: the group may, others may not. */
		KVS_CHILD_EQ(-EACCES, kvs_attach(&x, p660.name, 0, 0, NULL));
		/* 0604: read (stats, pages) but not attach, which needs rw. */
		KVS_CHILD_EQ(-EACCES, kvs_attach(&x, p604.name, 0, 0, NULL));
		KVS_CHILD_EQ(0, kvs_stats(&x, p604.pool_id, 0, &cst));
		KVS_CHILD_EQ(4, cst.n_pages);
		KVS_CHILD_EQ(0, kvs_pages(&x, p604.pool_id, 0, 1, &pd, NULL));
		KVS_CHILD_EQ(-EPERM, kvs_destroy(&x, p604.pool_id));
		/* 0666: attach and work, but still no DESTROY. */
		KVS_CHILD_EQ(0, kvs_attach(&x, p666.name, 0, 0, NULL));
		KVS_CHILD_EQ(0, kvs_alloc(&x, 1, &pg));
		KVS_CHILD_EQ(0, kvs_publish_chain(&x, &pg, 1, KVS_NO_PAGE, 6, 0, NULL, NULL));
		KVS_CHILD_EQ(-EPERM, kvs_destroy(&x, p666.pool_id));
		/* Anyone may create a pool, and owns it. */
		KVS_CHILD_EQ(0, kvs_conn_open(&y));
		kvs_pool_args(&mine, nobody_name, 2);
		KVS_CHILD_EQ(0, kvs_pool_create(&y, &mine));
		KVS_CHILD_EQ(0, kvs_attach(&y, nobody_name, 0, 0, NULL));
		/* and the destroyed-by-others check holds for root's pools */
		KVS_CHILD_EQ(0, kvs_conn_open(&z));
		KVS_CHILD_EQ(-EACCES, kvs_attach(&z, p600.name, 0, 0, NULL));
		_exit(0);
	}
	ASSERT_CHILD_OK(pid);

	/* The same uid with root's group as a supplementary group: "group". */
	pid = kvs_env_fork(_metadata, &self->env);
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct kvs_conn x, y;
		__u32 pg;

		drop_to_nobody(1);
		KVS_CHILD_EQ(0, kvs_conn_open(&x));
		KVS_CHILD_EQ(0, kvs_attach(&x, p660.name, 0, 0, NULL));
		KVS_CHILD_EQ(0, kvs_alloc(&x, 1, &pg));
		KVS_CHILD_EQ(-EPERM, kvs_destroy(&x, p660.pool_id));
		KVS_CHILD_EQ(0, kvs_conn_open(&y));
		KVS_CHILD_EQ(-EACCES, kvs_attach(&y, p600.name, 0, 0, NULL));
		_exit(0);
	}
	ASSERT_CHILD_OK(pid);

	/* Everything the children held went with them. */
	pool_stats(_metadata, self, p666.pool_id, &st);
	ASSERT_EQ(0, st.n_files);
	ASSERT_EQ(1, st.n_cached);
	pool_stats(_metadata, self, p660.pool_id, &st);
	ASSERT_EQ(4, st.n_free);
	/* nobody's pool: owned by 65534, mode 0600, and root may still
	 * attach and destroy (CAP_SYS_ADMIN). */
	ASSERT_EQ(0, kvs_pool_list(&self->env.ctl, d, KVS_ARRAY_SIZE(d), &n));
	for (i = 0; i < n && i < KVS_ARRAY_SIZE(d); i++) {
		if (!strcmp(d[i].name, nobody_name)) {
			nobody_id = d[i].pool_id;
			ASSERT_EQ(65534, d[i].uid);
			ASSERT_EQ(65534, d[i].gid);
			ASSERT_EQ(0600, d[i].mode);
			ASSERT_EQ(0, d[i].n_files);
		}
	}
	ASSERT_NE(0, nobody_id);
	kvs_env_track(_metadata, &self->env, nobody_id);
	/* Names are scoped by owner: root has no pool of that name. */
	ASSERT_EQ(-ENOENT, kvs_attach_owner(kvs_env_open(_metadata, &self->env), 0,
					    nobody_name, 0, 0, NULL));
	c = kvs_env_attach_owner(_metadata, &self->env, KVS_NOBODY, nobody_name, 0);
	ASSERT_EQ(0, kvs_stats(c, 0, KVS_STATS_CHECK, &st));
	ASSERT_EQ(2, st.n_pages);
	kvs_env_assert_baseline(_metadata, &self->env);
}

/* The creator's file and process may go: the pool stays until DESTROY. */
TEST_F(proc, pool_outlives_creator_process)
{
	struct kvs_pool_attach at;
	struct kvs_pool_stats st;
	struct kvs_info i0, i1;
	struct kvs_conn *c;
	char name[KVS_NAME_MAX];
	__u32 id = 0;
	int sync[2];
	pid_t pid;

	KVS_REQUIRE(&self->env);
	kvs_env_name(&self->env, name, "orphan");
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &i0));
	ASSERT_EQ(0, pipe(sync));
	pid = kvs_env_fork(_metadata, &self->env);
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct kvs_pool_create pc;
		struct kvs_conn cc;

		close(sync[0]);
		KVS_CHILD_EQ(0, kvs_conn_open(&cc));
		kvs_pool_args(&pc, name, 8);
		KVS_CHILD_EQ(0, kvs_pool_create(&cc, &pc));
		KVS_CHILD_EQ(0, kvs_sync_write(sync[1], &pc.pool_id, sizeof(pc.pool_id)));
		_exit(0);
	}
	close(sync[1]);
	ASSERT_EQ(0, kvs_sync_read(sync[0], &id, sizeof(id)));
	close(sync[0]);
	ASSERT_CHILD_OK(pid);
	kvs_env_track(_metadata, &self->env, id);
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &i1));
	ASSERT_EQ(i0.n_pools + 1, i1.n_pools);
	c = kvs_env_open(_metadata, &self->env);
	ASSERT_EQ(0, kvs_attach(c, name, 0, 0, &at));
	ASSERT_EQ(id, at.pool_id);
	pool_stats(_metadata, self, id, &st);
	ASSERT_EQ(8, st.n_free);
	ASSERT_EQ(1, st.n_files);
	kvs_env_assert_baseline(_metadata, &self->env);
}

/*
 * DESTROY while another process is attached and working: its file keeps
 * working, and the pool's last object goes when that process exits.
 */
TEST_F(proc, destroy_while_other_process_attached)
{
	struct kvs_info i0, i1;
	char name[KVS_NAME_MAX];
	__u32 id;
	int up[2], down[2];
	char ch = 0;
	pid_t pid;

	KVS_REQUIRE(&self->env);
	id = kvs_env_pool(_metadata, &self->env, 8, 0, name);
	ASSERT_EQ(0, pipe(up));
	ASSERT_EQ(0, pipe(down));
	pid = kvs_env_fork(_metadata, &self->env);
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct kvs_pool_stats cst;
		struct kvs_conn c;
		__u32 p[2], q, n;

		close(up[0]);
		close(down[1]);
		child_attach(&c, name, 0);
		KVS_CHILD_EQ(0, kvs_alloc(&c, 2, p));
		KVS_CHILD_EQ(0, kvs_sync_write(up[1], &ch, 1));
		KVS_CHILD_EQ(0, kvs_sync_read(down[0], &ch, 1));
		/* Destroyed meanwhile: everything still works on this file. */
		KVS_CHILD_EQ(0, kvs_publish_chain(&c, p, 2, KVS_NO_PAGE, 7, 0, NULL, NULL));
		KVS_CHILD_EQ(0, kvs_lookup_chain(&c, 7, 0, 2, p, &n));
		KVS_CHILD_EQ(2, n);
		KVS_CHILD_EQ(0, kvs_alloc(&c, 1, &q));
		KVS_CHILD_EQ(0, kvs_stats(&c, 0, KVS_STATS_CHECK, &cst));
		KVS_CHILD_EQ(5, cst.n_held);
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	ASSERT_EQ(0, kvs_sync_read(up[0], &ch, 1));
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &i0));
	kvs_env_destroy(_metadata, &self->env, id);
	ASSERT_EQ(-ENOENT, kvs_attach(kvs_env_open(_metadata, &self->env), name, 0, 0, NULL));
	ASSERT_EQ(0, kvs_sync_write(down[1], &ch, 1));
	ASSERT_CHILD_OK(pid);
	close(up[0]);
	close(down[1]);
	ASSERT_EQ(0, kvs_info(&self->env.ctl, &i1));
	ASSERT_EQ(i0.n_pools - 1, i1.n_pools);
	/* The pool itself and the child's file are gone. */
	ASSERT_LT(i1.n_objects, i0.n_objects);
	kvs_env_assert_baseline(_metadata, &self->env);
}

TEST_HARNESS_MAIN
